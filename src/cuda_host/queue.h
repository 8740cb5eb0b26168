// queue.h - streams, events and graph capture of the host execution. Work
// enqueued on a stream (launches, async copies and memsets, cuBLAS calls) is
// deferred: it runs in stream order only when the host synchronizes
// (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
// cudaStreamQuery / cudaEventQuery, blocking copies and memsets, cudaFree), so
// host code that reads a result too early sees the old bytes, as it could on a
// GPU. Before an item runs, what it depends on runs: the earlier items of its
// stream, the record an event wait names (cudaStreamWaitEvent), and the legacy
// default stream's implicit ordering (stream 0 waits for every blocking stream
// and they for it; cudaStreamNonBlocking streams do not take part). By default a
// sync runs one stream's items after another's; RETRO_CUDA_HOST_ORDER=shuffle
// interleaves the streams' items in an order drawn from RETRO_CUDA_HOST_SEED and
// =reverse always runs the latest-submitted item that may run, both within those
// dependencies only, so that a missing event wait gives a wrong result.
//
// While a stream captures (cudaStreamBeginCapture), what is enqueued on it is
// recorded instead, in program order; a graph launch replays the recorded work
// with the arguments it was given. Streams that wait on an event recorded in a
// capture join it. While a capture is under way, the calls CUDA calls
// "potentially unsafe" (allocation, freeing, synchronous copies, synchronization)
// are refused by the rules of the capture's and the calling thread's modes
// (refuse_during_capture).
#ifndef RG_CUDA_HOST_QUEUE_H
#define RG_CUDA_HOST_QUEUE_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rgh {

struct Stream;
struct Event;

// One piece of device work or a marker.
struct Work {
    enum Kind { EXEC, RECORD, WAIT } kind = EXEC;
    std::string what;  // names the work in errors: "kernel 'add_f32_kernel'", "cudaMemcpyAsync"
    // EXEC: does it; returns an error with *why filled, which becomes sticky.
    std::function<cudaError_t(std::string *why)> run;
    bool host_code = false;  // cudaLaunchHostFunc: device memory is closed while it runs
    // RECORD: this record of the event (its generation); WAIT: the record waited for.
    std::shared_ptr<Event> event;
    uint64_t gen = 0;
    std::weak_ptr<Stream> wait_stream;
    uint64_t wait_seq = 0;
};
using WorkPtr = std::shared_ptr<const Work>;

// EXEC work that does f and cannot fail.
WorkPtr simple_work(std::string what, std::function<void()> f, bool host_code = false);

// A graph's work in capture order. Each item belongs to the lane of the stream that
// captured it and runs after the earlier items of its lane and after the first `after`
// items of other lanes that an event joined to it (cudaEventRecord in the capture, then
// cudaStreamWaitEvent): the edges a replay must keep when it interleaves the lanes.
struct GraphItem {
    WorkPtr w;
    int lane;
    std::vector<std::pair<int, size_t>> after;  // (lane, items of that lane that run first)
};
struct Graph {
    std::vector<GraphItem> items;
    int lanes = 0;
};

// Resolves a handle (NULL and cudaStreamLegacy: the legacy stream,
// cudaStreamPerThread: a blocking stream of its own); NULL with the last error
// set when the handle is not a live stream.
Stream *find_stream(cudaStream_t s, const char *call);
// Adds w to the stream, or to its capture.
cudaError_t submit(Stream *s, WorkPtr w);
// Runs the stream's work (and what it depends on); cudaSuccess or the sticky error.
cudaError_t sync_stream(Stream *s);
cudaError_t sync_all(void);
// Fails with cudaErrorStreamCaptureUnsupported (invalidating the captures that
// forbid it) when CUDA forbids a "potentially unsafe" call (allocation, freeing,
// synchronous copies and synchronization) now: the calling thread has a capture
// that did not begin in cudaStreamCaptureModeRelaxed, or another thread has one in
// cudaStreamCaptureModeGlobal; a thread whose mode is Relaxed
// (cudaThreadExchangeStreamCaptureMode) may make them.
cudaError_t refuse_during_capture(const char *call);
// cudaThreadExchangeStreamCaptureMode.
cudaError_t exchange_capture_mode(cudaStreamCaptureMode *mode);
// Whether the calling thread began a capture that is under way (any mode).
bool thread_captures(void);
bool stream_capturing(const Stream *s);

cudaError_t stream_create(cudaStream_t *out, unsigned flags);
cudaError_t stream_destroy(cudaStream_t s);
cudaError_t event_create(cudaEvent_t *out, unsigned flags);
cudaError_t event_destroy(cudaEvent_t e);
cudaError_t event_record(cudaEvent_t e, cudaStream_t s);
cudaError_t event_query(cudaEvent_t e, bool wait);
cudaError_t event_elapsed(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t stream_wait_event(cudaStream_t s, cudaEvent_t e);
cudaError_t capture_begin(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t capture_end(cudaStream_t s, cudaGraph_t *out);
cudaError_t capture_status(cudaStream_t s, cudaStreamCaptureStatus *out);
cudaError_t graph_instantiate(cudaGraphExec_t *out, cudaGraph_t g);
cudaError_t graph_launch(cudaGraphExec_t g, cudaStream_t s);
cudaError_t graph_destroy(cudaGraph_t g);
cudaError_t graph_exec_destroy(cudaGraphExec_t g);

// Drops every stream, event, graph and queued item (cudaDeviceReset).
void queue_reset(void);

}  // namespace rgh

#endif
