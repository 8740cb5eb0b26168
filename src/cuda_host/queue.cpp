// queue.cpp - see queue.h.
#include "cuda_host/queue.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <deque>
#include <map>
#include <thread>

#include "cuda_host/devmem.h"
#include "cuda_host/state.h"

namespace rgh {

struct Capture {
    std::vector<GraphItem> items;
    std::map<const Stream *, int> lane;        // the lane of each stream in the capture
    std::vector<size_t> lane_items;            // items captured on each lane so far
    std::map<int, std::vector<std::pair<int, size_t>>> pending;  // joins for a lane's next item
    int lane_of(const Stream *s) {
        auto it = lane.find(s);
        if (it != lane.end()) return it->second;
        lane_items.push_back(0);
        return lane[s] = (int)lane_items.size() - 1;
    }
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    bool invalid = false;
    std::thread::id thread;   // the thread that began it
    const void *origin = nullptr;  // the stream it began on (for messages)
};

struct Stream {
    unsigned flags = cudaStreamDefault;
    bool legacy = false;
    struct Item {
        uint64_t seq;
        WorkPtr w;
    };
    std::deque<Item> q;
    std::shared_ptr<Capture> capture;
    bool capture_origin = false;  // cudaStreamBeginCapture was called on this stream
};

struct Event {
    unsigned flags = 0;
    bool recorded = false, done = true;
    std::weak_ptr<Stream> stream;
    uint64_t seq = 0, gen = 0;
    double ms = 0;                     // host time when the record ran
    std::shared_ptr<Capture> capture;  // recorded inside this capture,
    int cap_lane = 0;                  // on this lane
    size_t cap_items = 0;              // after that lane's first cap_items items
};

namespace {

uint64_t g_seq;
std::shared_ptr<Stream> g_legacy, g_per_thread;
std::map<const void *, std::shared_ptr<Stream>> g_streams;
std::map<const void *, std::shared_ptr<Event>> g_events;
std::map<const void *, std::shared_ptr<Graph>> g_graphs, g_execs;

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

Stream *legacy(void) {
    if (!g_legacy) {
        g_legacy = std::make_shared<Stream>();
        g_legacy->legacy = true;
    }
    return g_legacy.get();
}

std::shared_ptr<Stream> shared_of(Stream *s) {
    if (s == g_legacy.get()) return g_legacy;
    if (s == g_per_thread.get()) return g_per_thread;
    auto it = g_streams.find(s);
    return it == g_streams.end() ? nullptr : it->second;
}

template <class F>
void each_stream(F f) {
    if (g_legacy) f(g_legacy.get());
    if (g_per_thread) f(g_per_thread.get());
    for (auto &kv : g_streams) f(kv.second.get());
}

bool blocking(const Stream *s) { return !s->legacy && !(s->flags & cudaStreamNonBlocking); }

uint64_t push(Stream *s, WorkPtr w) {
    s->q.push_back(Stream::Item{++g_seq, std::move(w)});
    return g_seq;
}

// One EXEC item; its error (with the item named) becomes *why.
cudaError_t exec_one(const Work &w, std::string *why) {
    cudaError_t e;
    if (w.host_code) {
        DevSuspend host;
        e = w.run(why);
    } else {
        e = w.run(why);
    }
    if (e != cudaSuccess) {
        if (why->empty()) *why = w.what + " failed";
        return e;
    }
    if (w.host_code) return cudaSuccess;
    const std::string damage = dev_check_red_zones();
    if (!damage.empty()) {
        *why = "after " + w.what + ": " + damage;
        return cudaErrorIllegalAddress;
    }
    return cudaSuccess;
}

cudaError_t execute(const Work &w) {
    if (sticky_error() != cudaSuccess) return sticky_error();  // a faulted device runs nothing more
    switch (w.kind) {
    case Work::RECORD:
        if (w.event->gen == w.gen) {
            w.event->done = true;
            w.event->ms = now_ms();
        }
        return cudaSuccess;
    case Work::WAIT: return cudaSuccess;
    case Work::EXEC: break;
    }
    std::string why;
    cudaError_t e = exec_one(w, &why);
    return e == cudaSuccess ? e : fault_sticky(e, why);
}

// Runs the items of s with a sequence number below `limit`, each after what it depends on.
cudaError_t run_until(Stream *s, uint64_t limit) {
    while (!s->q.empty() && s->q.front().seq < limit) {
        const uint64_t seq = s->q.front().seq;
        const WorkPtr w = s->q.front().w;
        cudaError_t e = cudaSuccess;
        if (s->legacy) {
            each_stream([&](Stream *b) {
                if (e == cudaSuccess && blocking(b)) e = run_until(b, seq);
            });
        } else if (blocking(s) && g_legacy) {
            e = run_until(g_legacy.get(), seq);
        }
        if (e == cudaSuccess && w->kind == Work::WAIT)
            if (std::shared_ptr<Stream> t = w->wait_stream.lock()) e = run_until(t.get(), w->wait_seq + 1);
        if (e != cudaSuccess) return e;
        s->q.pop_front();
        e = execute(*w);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

// ---------------------------------------------------------------------------
// Interleaved drains. RETRO_CUDA_HOST_ORDER=shuffle runs the work a sync needs in a
// seeded random interleaving of the streams (RETRO_CUDA_HOST_SEED), =reverse always picks
// the latest-submitted item that may run: either order keeps every real dependency
// (stream order, event waits, the legacy stream's implicit ordering) and nothing
// else, so work on two streams without an event wait between them runs in an
// order a GPU could choose and a missing wait shows as a wrong result.

enum class Order { plain, shuffle, reverse };

Order drain_order(void) {
    const char *v = getenv("RETRO_CUDA_HOST_ORDER");  // read per drain: tests switch it
    if (v && !strcmp(v, "shuffle")) return Order::shuffle;
    if (v && !strcmp(v, "reverse")) return Order::reverse;
    return Order::plain;
}

// splitmix64 over the seed and the number of drains so far: the same program with the
// same seed interleaves the same way.
uint64_t drain_random(void) {
    static uint64_t drains;
    const char *v = getenv("RETRO_CUDA_HOST_SEED");
    uint64_t z = (v && *v ? strtoull(v, nullptr, 10) : 1) + ++drains * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// For each stream, the items with a sequence number below its value must run.
using Needs = std::map<Stream *, uint64_t>;

// Adds what the needed items depend on, until nothing more is added.
void close_needs(Needs *need) {
    for (bool grew = true; grew;) {
        grew = false;
        auto raise = [&](Stream *t, uint64_t limit) {
            uint64_t &cur = (*need)[t];
            if (limit > cur) cur = limit, grew = true;
        };
        const Needs now = *need;
        for (const auto &kv : now) {
            Stream *x = kv.first;
            for (const Stream::Item &it : x->q) {
                if (it.seq >= kv.second) break;
                if (it.w->kind == Work::WAIT)
                    if (std::shared_ptr<Stream> t = it.w->wait_stream.lock()) raise(t.get(), it.w->wait_seq + 1);
                if (x->legacy)
                    each_stream([&](Stream *b) {
                        if (blocking(b)) raise(b, it.seq);
                    });
                else if (blocking(x) && g_legacy)
                    raise(g_legacy.get(), it.seq);
            }
        }
    }
}

bool done_below(const Stream *t, uint64_t limit) { return t->q.empty() || t->q.front().seq >= limit; }

// Whether the first item of x may run now: what it depends on has run.
bool head_ready(Stream *x) {
    const Stream::Item &h = x->q.front();
    if (h.w->kind == Work::WAIT)
        if (std::shared_ptr<Stream> t = h.w->wait_stream.lock())
            if (!done_below(t.get(), h.w->wait_seq + 1)) return false;
    bool ready = true;
    if (x->legacy)
        each_stream([&](Stream *b) { ready = ready && (!blocking(b) || done_below(b, h.seq)); });
    else if (blocking(x) && g_legacy)
        ready = done_below(g_legacy.get(), h.seq);
    return ready;
}

cudaError_t drain_interleaved(Needs need, Order order) {
    close_needs(&need);
    std::vector<Stream *> ready;
    for (;;) {
        ready.clear();
        for (const auto &kv : need)
            if (!kv.first->q.empty() && kv.first->q.front().seq < kv.second && head_ready(kv.first))
                ready.push_back(kv.first);
        // The needed item with the lowest number is always ready, so none ready means all ran.
        if (ready.empty()) return cudaSuccess;
        Stream *pick = ready[0];
        if (order == Order::reverse) {
            for (Stream *x : ready)
                if (x->q.front().seq > pick->q.front().seq) pick = x;
        } else {
            pick = ready[drain_random() % ready.size()];
        }
        const WorkPtr w = pick->q.front().w;
        pick->q.pop_front();
        if (cudaError_t e = execute(*w)) return e;
    }
}

// Runs the items of s below `limit` and what they depend on, in the drain order.
cudaError_t drain(Stream *s, uint64_t limit) {
    const Order order = drain_order();
    if (order == Order::plain) return run_until(s, limit);
    return drain_interleaved(Needs{{s, limit}}, order);
}

void invalidate_captures(bool global_only) {
    each_stream([&](Stream *s) {
        if (s->capture && (!global_only || s->capture->mode == cudaStreamCaptureModeGlobal)) s->capture->invalid = true;
    });
}

}  // namespace

WorkPtr simple_work(std::string what, std::function<void()> f, bool host_code) {
    auto w = std::make_shared<Work>();
    w->what = std::move(what);
    w->host_code = host_code;
    w->run = [f](std::string *) {
        f();
        return cudaSuccess;
    };
    return w;
}

Stream *find_stream(cudaStream_t s, const char *call) {
    if (s == nullptr || s == cudaStreamLegacy) return legacy();
    if (s == cudaStreamPerThread) {
        if (!g_per_thread) g_per_thread = std::make_shared<Stream>();
        return g_per_thread.get();
    }
    auto it = g_streams.find((const void *)s);
    if (it == g_streams.end()) {
        set_error(cudaErrorInvalidResourceHandle, "%s: stream %p is not a live stream", call, (void *)s);
        return nullptr;
    }
    return it->second.get();
}

bool stream_capturing(const Stream *s) { return s->capture != nullptr; }

// Whether work may be queued on s (not captured) now: the legacy stream may
// not take work while a blocking stream captures (it would depend on it).
static cudaError_t check_queueable(const Stream *s, const char *what) {
    if (!s->legacy) return cudaSuccess;
    bool implicit = false;
    each_stream([&](Stream *b) { implicit = implicit || (b->capture && blocking(b)); });
    if (!implicit) return cudaSuccess;
    invalidate_captures(false);
    return set_error(cudaErrorStreamCaptureImplicit, "%s on the legacy stream while a blocking stream captures", what);
}

cudaError_t submit(Stream *s, WorkPtr w) {
    if (s->capture) {
        if (s->capture->invalid)
            return set_error(cudaErrorStreamCaptureInvalidated, "%s: the stream's capture was invalidated earlier",
                             w->what.c_str());
        Capture &c = *s->capture;
        const int lane = c.lane_of(s);
        c.items.push_back(GraphItem{std::move(w), lane, std::move(c.pending[lane])});
        c.pending.erase(lane);
        c.lane_items[(size_t)lane]++;
        return cudaSuccess;
    }
    cudaError_t e = check_queueable(s, w->what.c_str());
    if (e != cudaSuccess) return e;
    push(s, std::move(w));
    return cudaSuccess;
}

// Whether any stream holds work (a drain with none need not open device memory).
static bool work_pending(void) {
    bool any = false;
    each_stream([&](Stream *s) { any = any || !s->q.empty(); });
    return any;
}

cudaError_t sync_stream(Stream *s) {
    if (s->capture) {
        s->capture->invalid = true;
        return set_error(cudaErrorStreamCaptureUnsupported, "synchronizing a stream that captures");
    }
    // The legacy stream waits for every blocking stream, a capturing one too.
    if (cudaError_t e = check_queueable(s, "synchronizing the legacy stream")) return e;
    if (!work_pending()) return sticky_error();
    DevAccess open;
    cudaError_t e = drain(s, UINT64_MAX);
    return e != cudaSuccess ? e : sticky_error();
}

cudaError_t sync_all(void) {
    if (!work_pending()) return sticky_error();
    DevAccess open;
    cudaError_t e = cudaSuccess;
    if (const Order order = drain_order(); order != Order::plain) {
        Needs all;
        each_stream([&](Stream *s) { all[s] = UINT64_MAX; });
        e = drain_interleaved(std::move(all), order);
    } else {
        each_stream([&](Stream *s) {
            if (e == cudaSuccess) e = run_until(s, UINT64_MAX);
        });
    }
    return e != cudaSuccess ? e : sticky_error();
}

// The calling thread's capture interaction mode (cudaThreadExchangeStreamCaptureMode).
static thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

static const char *mode_name(cudaStreamCaptureMode m) {
    switch (m) {
    case cudaStreamCaptureModeGlobal: return "cudaStreamCaptureModeGlobal";
    case cudaStreamCaptureModeThreadLocal: return "cudaStreamCaptureModeThreadLocal";
    case cudaStreamCaptureModeRelaxed: return "cudaStreamCaptureModeRelaxed";
    }
    return "an unknown capture mode";
}

// CUDA's rule for "potentially unsafe" calls: a thread whose own mode is not Relaxed may
// not make one while it has a capture of its own that did not begin Relaxed, nor, when
// its mode is Global, while another thread has a capture that began Global. The call
// fails and invalidates those captures.
cudaError_t refuse_during_capture(const char *call) {
    if (t_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
    const std::thread::id me = std::this_thread::get_id();
    const Capture *first = nullptr;
    each_stream([&](Stream *s) {
        Capture *c = s->capture.get();
        if (!c) return;
        const bool own = c->thread == me && c->mode != cudaStreamCaptureModeRelaxed;
        const bool other = c->thread != me && t_mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal;
        if (!own && !other) return;
        c->invalid = true;
        if (!first) first = c;
    });
    if (!first) return cudaSuccess;
    return set_error(cudaErrorStreamCaptureUnsupported,
                     "%s while stream %p captures (%s, begun by %s thread): not allowed during a capture; the "
                     "capture is invalidated",
                     call, first->origin, mode_name(first->mode), first->thread == me ? "this" : "another");
}

cudaError_t exchange_capture_mode(cudaStreamCaptureMode *mode) {
    if (!mode) return set_error(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: NULL mode");
    if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
        *mode != cudaStreamCaptureModeRelaxed)
        return set_error(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: mode %d", (int)*mode);
    const cudaStreamCaptureMode old = t_mode;
    t_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

bool thread_captures(void) {
    const std::thread::id me = std::this_thread::get_id();
    bool any = false;
    each_stream([&](Stream *s) { any = any || (s->capture && s->capture->thread == me); });
    return any;
}

// ---------------------------------------------------------------------------
// Streams and events

cudaError_t stream_create(cudaStream_t *out, unsigned flags) {
    if (!out) return set_error(cudaErrorInvalidValue, "cudaStreamCreate: NULL stream pointer");
    if (flags & ~(unsigned)cudaStreamNonBlocking)
        return set_error(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: unknown flags 0x%x", flags);
    auto s = std::make_shared<Stream>();
    s->flags = flags;
    g_streams[s.get()] = s;
    *out = reinterpret_cast<cudaStream_t>(s.get());
    return cudaSuccess;
}

cudaError_t stream_destroy(cudaStream_t h) {
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
        return set_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: the default stream cannot be destroyed");
    Stream *s = find_stream(h, "cudaStreamDestroy");
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->capture) return set_error(cudaErrorStreamCaptureUnsupported, "cudaStreamDestroy of a stream that captures");
    // Work already enqueued still completes, as on a GPU.
    cudaError_t e = sync_stream(s);
    g_streams.erase(s);
    return e;
}

static Event *find_event(cudaEvent_t h, const char *call) {
    auto it = g_events.find((const void *)h);
    if (it == g_events.end()) {
        set_error(cudaErrorInvalidResourceHandle, "%s: event %p is not a live event", call, (void *)h);
        return nullptr;
    }
    return it->second.get();
}

cudaError_t event_create(cudaEvent_t *out, unsigned flags) {
    if (!out) return set_error(cudaErrorInvalidValue, "cudaEventCreate: NULL event pointer");
    auto e = std::make_shared<Event>();
    e->flags = flags;
    g_events[e.get()] = e;
    *out = reinterpret_cast<cudaEvent_t>(e.get());
    return cudaSuccess;
}

cudaError_t event_destroy(cudaEvent_t h) {
    if (!find_event(h, "cudaEventDestroy")) return cudaErrorInvalidResourceHandle;
    g_events.erase((const void *)h);  // a pending record keeps the object alive
    return cudaSuccess;
}

// The live stream and event behind two handles; false (the last error set) when either is not.
static bool find_both(cudaStream_t hs, cudaEvent_t h, const char *call, Stream **s, Event **ev) {
    *s = find_stream(hs, call);
    *ev = *s ? find_event(h, call) : nullptr;
    return *ev != nullptr;
}

cudaError_t event_record(cudaEvent_t h, cudaStream_t hs) {
    Stream *s;
    Event *ev;
    if (!find_both(hs, h, "cudaEventRecord", &s, &ev)) return cudaErrorInvalidResourceHandle;
    if (s->capture) {
        ev->capture = s->capture;  // a stream that waits on it joins the capture
        ev->cap_lane = s->capture->lane_of(s);
        ev->cap_items = s->capture->lane_items[(size_t)ev->cap_lane];
        return cudaSuccess;
    }
    cudaError_t e = check_queueable(s, "cudaEventRecord");
    if (e != cudaSuccess) return e;
    auto w = std::make_shared<Work>();
    w->kind = Work::RECORD;
    w->what = "cudaEventRecord";
    w->event = g_events[(const void *)h];
    w->gen = ++ev->gen;
    ev->capture = nullptr;
    ev->recorded = true;
    ev->done = false;
    ev->stream = shared_of(s);
    ev->seq = push(s, w);
    return cudaSuccess;
}

cudaError_t event_query(cudaEvent_t h, bool wait) {
    (void)wait;  // a query runs the work too: nothing runs in the background here
    Event *ev = find_event(h, wait ? "cudaEventSynchronize" : "cudaEventQuery");
    if (!ev) return cudaErrorInvalidResourceHandle;
    if (ev->capture) return set_error(cudaErrorStreamCaptureUnsupported, "event %p was recorded in a capture", (void *)h);
    if (!ev->recorded || ev->done) return cudaSuccess;
    if (std::shared_ptr<Stream> s = ev->stream.lock()) {
        DevAccess open;
        cudaError_t e = drain(s.get(), ev->seq + 1);
        if (e != cudaSuccess) return e;
    }
    return ev->done ? cudaSuccess : sticky_error();
}

cudaError_t event_elapsed(float *ms, cudaEvent_t a, cudaEvent_t b) {
    Event *ea = find_event(a, "cudaEventElapsedTime"), *eb = ea ? find_event(b, "cudaEventElapsedTime") : nullptr;
    if (!ea || !eb) return cudaErrorInvalidResourceHandle;
    if (!ms) return set_error(cudaErrorInvalidValue, "cudaEventElapsedTime: NULL result pointer");
    if ((ea->flags | eb->flags) & cudaEventDisableTiming)
        return set_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was created without timing");
    if (!ea->recorded || !eb->recorded)
        return set_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
    if (!ea->done || !eb->done) return set_error(cudaErrorNotReady, "cudaEventElapsedTime: an event has not completed");
    *ms = (float)(eb->ms - ea->ms);
    return cudaSuccess;
}

cudaError_t stream_wait_event(cudaStream_t hs, cudaEvent_t h) {
    Stream *s;
    Event *ev;
    if (!find_both(hs, h, "cudaStreamWaitEvent", &s, &ev)) return cudaErrorInvalidResourceHandle;
    if (ev->capture) {  // fork into the capture: this stream's work is recorded from now on
        if (s->capture && s->capture != ev->capture)
            return set_error(cudaErrorStreamCaptureIsolation, "cudaStreamWaitEvent joins two captures");
        if (s->legacy) return set_error(cudaErrorStreamCaptureImplicit, "the legacy stream cannot join a capture");
        s->capture = ev->capture;
        // The stream's next captured item runs after what the record follows.
        if (ev->cap_items) s->capture->pending[s->capture->lane_of(s)].emplace_back(ev->cap_lane, ev->cap_items);
        return cudaSuccess;
    }
    if (!ev->recorded || ev->done) return cudaSuccess;
    if (s->capture) {
        s->capture->invalid = true;
        return set_error(cudaErrorStreamCaptureIsolation, "a capturing stream waits on work outside the capture");
    }
    auto w = std::make_shared<Work>();
    w->kind = Work::WAIT;
    w->what = "cudaStreamWaitEvent";
    w->wait_stream = ev->stream;
    w->wait_seq = ev->seq;
    return submit(s, w);
}

// ---------------------------------------------------------------------------
// Capture and graphs

cudaError_t capture_begin(cudaStream_t hs, cudaStreamCaptureMode mode) {
    Stream *s = find_stream(hs, "cudaStreamBeginCapture");
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->legacy) return set_error(cudaErrorStreamCaptureUnsupported, "the legacy stream cannot capture");
    if (s->capture) return set_error(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream captures already");
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed)
        return set_error(cudaErrorInvalidValue, "cudaStreamBeginCapture: mode %d", (int)mode);
    s->capture = std::make_shared<Capture>();
    s->capture->mode = mode;
    s->capture->thread = std::this_thread::get_id();
    s->capture->origin = (const void *)hs;
    s->capture_origin = true;
    return cudaSuccess;
}

cudaError_t capture_end(cudaStream_t hs, cudaGraph_t *out) {
    Stream *s = find_stream(hs, "cudaStreamEndCapture");
    if (!s) return cudaErrorInvalidResourceHandle;
    if (!out) return set_error(cudaErrorInvalidValue, "cudaStreamEndCapture: NULL graph pointer");
    *out = nullptr;
    if (!s->capture || !s->capture_origin)
        return set_error(cudaErrorIllegalState, "cudaStreamEndCapture: the stream did not begin a capture");
    std::shared_ptr<Capture> c = s->capture;
    each_stream([&](Stream *x) {
        if (x->capture == c) x->capture = nullptr, x->capture_origin = false;
    });
    for (auto &kv : g_events)
        if (kv.second->capture == c) kv.second->capture = nullptr;
    if (c->invalid) return set_error(cudaErrorStreamCaptureInvalidated, "the capture was invalidated by an earlier call");
    auto g = std::make_shared<Graph>();
    g->items = c->items;
    g->lanes = (int)c->lane_items.size();
    g_graphs[g.get()] = g;
    *out = reinterpret_cast<cudaGraph_t>(g.get());
    return cudaSuccess;
}

cudaError_t capture_status(cudaStream_t hs, cudaStreamCaptureStatus *out) {
    Stream *s = find_stream(hs, "cudaStreamIsCapturing");
    if (!s) return cudaErrorInvalidResourceHandle;
    *out = !s->capture ? cudaStreamCaptureStatusNone
           : s->capture->invalid ? cudaStreamCaptureStatusInvalidated
                                 : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t graph_instantiate(cudaGraphExec_t *out, cudaGraph_t hg) {
    auto it = g_graphs.find((const void *)hg);
    if (!out || it == g_graphs.end())
        return set_error(cudaErrorInvalidValue, "cudaGraphInstantiate: %p is not a live graph", (void *)hg);
    auto x = std::make_shared<Graph>(*it->second);
    g_execs[x.get()] = x;
    *out = reinterpret_cast<cudaGraphExec_t>(x.get());
    return cudaSuccess;
}

// Runs a graph's EXEC items: in capture order by default; with RETRO_CUDA_HOST_ORDER=shuffle
// or =reverse its lanes interleave as a sync's streams do, keeping each lane's order and
// the joins of its events.
static cudaError_t replay(const Graph &g, std::string *why) {
    const Order order = drain_order();
    std::vector<std::vector<size_t>> lane(g.lanes > 0 ? (size_t)g.lanes : 1);
    for (size_t i = 0; i < g.items.size(); i++) lane[(size_t)g.items[i].lane].push_back(i);
    std::vector<size_t> done(lane.size(), 0);  // items of each lane that ran
    std::vector<size_t> ready;
    for (size_t left = g.items.size(); left > 0; left--) {
        size_t pick = g.items.size();
        if (order == Order::plain) {
            pick = g.items.size() - left;
        } else {
            ready.clear();
            for (size_t l = 0; l < lane.size(); l++) {
                if (done[l] == lane[l].size()) continue;
                const GraphItem &head = g.items[lane[l][done[l]]];
                bool ok = true;
                for (const auto &dep : head.after) ok = ok && done[(size_t)dep.first] >= dep.second;
                if (ok) ready.push_back(lane[l][done[l]]);
            }
            if (ready.empty()) break;  // cannot happen: the joins follow capture order
            pick = order == Order::reverse ? *std::max_element(ready.begin(), ready.end())
                                           : ready[drain_random() % ready.size()];
        }
        const GraphItem &item = g.items[pick];
        done[(size_t)item.lane]++;
        if (item.w->kind != Work::EXEC) continue;
        cudaError_t e = exec_one(*item.w, why);
        if (e != cudaSuccess) {
            *why = "in a graph: " + *why;
            return e;
        }
    }
    return cudaSuccess;
}

cudaError_t graph_launch(cudaGraphExec_t hx, cudaStream_t hs) {
    auto it = g_execs.find((const void *)hx);
    if (it == g_execs.end())
        return set_error(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: %p is not a live executable graph", (void *)hx);
    Stream *s = find_stream(hs, "cudaGraphLaunch");
    if (!s) return cudaErrorInvalidResourceHandle;
    // The recorded work in capture order (a valid order of its dependencies).
    std::shared_ptr<const Graph> g = it->second;
    auto w = std::make_shared<Work>();
    w->what = "cudaGraphLaunch";
    w->run = [g](std::string *why) { return replay(*g, why); };
    return submit(s, w);
}

cudaError_t graph_destroy(cudaGraph_t hg) {
    if (!g_graphs.erase((const void *)hg))
        return set_error(cudaErrorInvalidValue, "cudaGraphDestroy: %p is not a live graph", (void *)hg);
    return cudaSuccess;
}

cudaError_t graph_exec_destroy(cudaGraphExec_t hx) {
    if (!g_execs.erase((const void *)hx))
        return set_error(cudaErrorInvalidValue, "cudaGraphExecDestroy: %p is not a live executable graph", (void *)hx);
    return cudaSuccess;
}

void queue_reset(void) {
    g_streams.clear();
    g_events.clear();
    g_graphs.clear();
    g_execs.clear();
    g_legacy.reset();
    g_per_thread.reset();
}

}  // namespace rgh
