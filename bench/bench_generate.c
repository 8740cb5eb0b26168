// bench_generate.c - prompt and generation tokens/s for SmolLM2-135M in F32,
// F16, BF16, Q8_0, Q4_0, Q4_1 and Q4_K_M, on all cores (llama-bench's protocol:
// 128-token prompt, 32 generated), each generation beside the ceiling that this
// machine's memory read rate, measured in the same run, sets. llama.cpp is measured
// beside it, back to back, by tools/reference/llama_bench_compare.py.
//
//   RG_SMOLLM2=path/to/SmolLM2-135M-Instruct.Q4_1.gguf ./build/bench_generate
//
// The other types (F32 F16 BF16 Q8_0 Q4_0 Q4_K_M IQ4_XS) are made from the Q4_1 file with
// `retrograd quantize --allow-requantize` (same shapes; the weights are the Q4_1 values), so
// the speeds are what each storage type costs. RG_SMOLLM2 may name any file (scripts/gpu-check.sh
// gives make-tiny's BF16 shapes and leaves the shipped row out with RG_BENCH_TYPES); on a device
// each row also says what the token graph left on the CPU and copied.
//
// Optional environment (for profiling one type on a busy machine):
//   RG_BENCH_TYPES=f32,q4_0   only these labels (the first word of the label)
//   RG_BENCH_CACHE=/tmp/dir   keep the quantized files there and reuse them (as PREFIX-LABEL.gguf,
//                             RG_BENCH_CACHE_PREFIX, default smollm2: e.g. smollm2-q4_k_m.gguf)
//   RG_BENCH_REPS=5           repetitions (default 3); the best one is printed
//   RG_BENCH_SKIP=pp|tg       skip the prompt (and the generation after it) or both generations
//   RG_BENCH_THREADS=1        threads (default: all cores)
//   RG_BENCH_CPU=1            also print the process CPU seconds of each phase (best run), a
//                             measure of work that a busy machine disturbs less than wall time
//   RG_BENCH_PROFILE=1        also print where the time goes per op (graph/exec.h's profile),
//                             prompt and generation apart, summed over the repetitions
//   RG_BENCH_PP=128 RG_BENCH_TG=32   prompt and generated tokens (llama-bench's pp128, tg32)
//   RG_BENCH_MODEL=F.gguf     this file alone, as it is (any type; e.g. make-tiny --shape 1b), instead
//                             of RG_SMOLLM2 and its types; its row is labelled "file"
//   RG_BENCH_DEVICE=cuda      sessions on the CUDA device (rg_session_opts.device; scripts/gpu-check.sh
//                             runs this on a lent GPU): the ceiling is then the device's memory
//                             bandwidth (bench_util.h's table by name, or RG_BENCH_PEAK_GBS=4800), and
//                             RG_BENCH_PROFILE's times synchronize the device after every node. Under
//                             the host execution of the CUDA code (RETRO_CUDA_HOST=1) the figures are
//                             CPU timings, never GPU ones.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/cpu.h"
#include "base/threadpool.h"
#include "bench_memrate.h"
#include "bench_util.h"
#include "cuda/cuda.h"
#include "infer/session.h"
#include "model/quantize.h"

static const struct {
    const char *target;  // retrograd quantize name, NULL: the file as shipped
    const char *label;
} types[] = {
    {"F32", "f32"},   {"F16", "f16"},   {"BF16", "bf16"}, {"Q8_0", "q8_0"}, {"Q4_0", "q4_0"}, {NULL, "q4_1 (shipped)"},
    {"Q4_K_M", "q4_k_m"}, {"IQ4_XS", "iq4_xs"},
};

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The greedy pick: the first largest logit. Two passes (the largest value in
// 8 running maxima, then its first index) instead of one loop comparing with
// logits[best], whose load-compare-select chain cost ~8 cycles per logit:
// 0.15-0.3 ms per token over SmolLM2's 49152, timed with the generation
// (llama.cpp's bench samples nothing).
static int32_t greedy(const float *logits, int64_t V) {
    float m[8];
    for (int i = 0; i < 8; i++) m[i] = logits[0];
    int64_t v = 0;
    for (; v + 8 <= V; v += 8)
        for (int i = 0; i < 8; i++) m[i] = logits[v + i] > m[i] ? logits[v + i] : m[i];
    float top = m[0];
    for (int i = 1; i < 8; i++) top = m[i] > top ? m[i] : top;
    for (; v < V; v++) top = logits[v] > top ? logits[v] : top;
    for (v = 0; v < V; v++)
        if (logits[v] == top) return (int32_t)v;
    return 0;  // logits[0] is NaN: no compare with it holds, as before
}

// Whether label's first word is in the comma-separated list (NULL: every type).
static int selected(const char *list, const char *label) {
    if (!list || !*list) return 1;
    size_t n = strcspn(label, " ");
    for (const char *p = list; *p;) {
        size_t m = strcspn(p, ",");
        if (m == n && !strncmp(p, label, n)) return 1;
        p += m;
        if (*p == ',') p++;
    }
    return 0;
}


// Adds what `from` holds to `to` and clears `from`.
static void profile_move(rg_exec_profile *from, rg_exec_profile *to) {
    for (int o = 0; o < RG_OP_COUNT; o++) to->op_s[o] += from->op_s[o], to->op_n[o] += from->op_n[o];
    for (int t = 0; t < RG_TYPE_COUNT; t++)
        to->mm_s[t] += from->mm_s[t], to->mm_n[t] += from->mm_n[t], to->mm_bytes[t] += from->mm_bytes[t];
    to->run_s += from->run_s, to->runs += from->runs;
    memset(from, 0, sizeof *from);
}

// What every row shares.
typedef struct gen_opts {
    int pp, tg, reps, threads;
    bool skip_pp, skip_tg, show_cpu, show_prof;
    rg_device device;
    double gbs;  // the memory read rate that sets the generation ceiling (0: none)
} gen_opts;

static rg_exec_profile prof, prof_pp, prof_tg, prof_tga;

// Best seconds of the prompt, of the TG tokens after it, of llama-bench's tg from an empty
// cache, and the process CPU seconds of the prompt and of tg.
typedef struct gen_times {
    double pp, tga, tg, cpu_pp, cpu_tg;
} gen_times;

static rg_status time_session(rg_session *s, const int32_t *prompt, float *logits, int64_t V, const gen_opts *o,
                              gen_times *t, rg_error *err) {
    *t = (gen_times){1e30, 1e30, 1e30, 1e30, 1e30};
    for (int rep = 0; rep < o->reps; rep++) {
        rg_status st = RG_OK;
        // The prompt, then TG tokens after it (a chat's generation, attending to PP + k tokens).
        if (!o->skip_pp) {
            rg_session_truncate(s, 0);
            double c0 = cpu_now(), t0 = bench_now();
            st = rg_session_eval(s, prompt, o->pp, logits, 0, err);
            double t1 = bench_now(), c1 = cpu_now();
            if (o->show_prof) profile_move(&prof, &prof_pp);
            for (int k = 0; k < o->tg && !o->skip_tg && !st; k++) {
                int32_t best = greedy(logits, V);
                st = rg_session_eval(s, &best, 1, logits, 0, err);
            }
            double t2 = bench_now();
            if (o->show_prof) profile_move(&prof, &prof_tga);
            if (c1 - c0 < t->cpu_pp) t->cpu_pp = c1 - c0;
            if (t1 - t0 < t->pp) t->pp = t1 - t0;
            if (t2 - t1 < t->tga) t->tga = t2 - t1;
        }
        // llama-bench's tg test: TG tokens one at a time from an empty cache.
        if (!o->skip_tg && !st) {
            rg_session_truncate(s, 0);
            int32_t tok = prompt[0];
            double c0 = cpu_now(), t0 = bench_now();
            for (int k = 0; k < o->tg && !st; k++) {
                st = rg_session_eval(s, &tok, 1, logits, 0, err);
                tok = greedy(logits, V);
            }
            double t1 = bench_now(), c1 = cpu_now();
            if (o->show_prof) profile_move(&prof, &prof_tg);
            if (c1 - c0 < t->cpu_tg) t->cpu_tg = c1 - c0;
            if (t1 - t0 < t->tg) t->tg = t1 - t0;
        }
        if (st) return st;
    }
    return RG_OK;
}

// One row: file loaded, timed, printed under label.
static void bench_file(const char *label, const char *file, const gen_opts *o) {
    rg_error err = {0};
    rg_model *m;
    rg_session *s;
    rg_session_opts so = {.n_ctx = o->pp + o->tg, .n_threads = o->threads, .n_batch = o->pp, .device = o->device,
                          .profile = o->show_prof ? &prof : NULL};
    memset(&prof_pp, 0, sizeof prof_pp);
    memset(&prof_tg, 0, sizeof prof_tg);
    memset(&prof_tga, 0, sizeof prof_tga);
    if (rg_model_load(&m, file, &err)) {
        printf("%-16s %s\n", label, err.msg);
        return;
    }
    if (rg_session_create(&s, m, &so, &err)) {
        printf("%-16s %s\n", label, err.msg);
        rg_model_free(m);
        return;
    }
    int64_t V = m->hp.n_vocab;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)o->pp);
    float *logits = malloc(sizeof(float) * (size_t)V);
    for (int k = 0; k < o->pp; k++) prompt[k] = (int32_t)((k * 7919 + 13) % (V - 100)) + 50;
    gen_times t;
    if (time_session(s, prompt, logits, V, o, &t, &err)) {
        printf("%-16s %s\n", label, err.msg);
    } else {
        size_t wbytes = 0;
        for (uint64_t i = 0; i < m->file->n_tensors; i++) wbytes += m->file->tensors[i].nbytes;
        char ceil_s[48] = "-";
        if (o->gbs > 0 && !o->skip_tg)
            snprintf(ceil_s, sizeof ceil_s, "%.0f%% of %.0f", 100.0 * o->tg / t.tg / (o->gbs * 1e9 / (double)wbytes),
                     o->gbs * 1e9 / (double)wbytes);
        printf("%-16s %12.1f %12.1f %18s %14.1f", label, o->skip_pp ? 0.0 : o->pp / t.pp, o->skip_tg ? 0.0 : o->tg / t.tg,
               ceil_s, o->skip_pp || o->skip_tg ? 0.0 : o->tg / t.tga);
        if (o->show_cpu) printf("   cpu ms: prompt %.1f, per generated token %.2f", t.cpu_pp * 1e3, t.cpu_tg * 1e3 / o->tg);
        printf("\n");
        if (o->device != RG_DEVICE_CPU) {  // what the single-token graph left on the CPU (fallbacks) and copied
            const rg_exec_stats st = rg_session_decode_stats(s);
            printf("%-16s   on the device: the token graph has %d nodes on the CPU (fallbacks) and %d scheduled copies a "
                   "run; %.3f MiB copied between the CPU and the device in all\n", "", st.nodes_fallback, st.copies_scheduled,
                   (double)(st.bytes_to_device + st.bytes_to_host) / 1048576.0);
        }
        if (o->show_prof) {
            printf("prompt ");
            rg_exec_profile_print(&prof_pp, stdout);
            printf("generation ");
            rg_exec_profile_print(&prof_tg, stdout);
            printf("generation after the prompt ");
            rg_exec_profile_print(&prof_tga, stdout);
        }
    }
    fflush(stdout);
    free(prompt), free(logits);
    rg_session_free(s);
    rg_model_free(m);
}

static int env_int(const char *name, int def, int lo) {
    const char *v = getenv(name);
    return v && atoi(v) >= lo ? atoi(v) : def;
}

// The ceiling's read rate: the CPU's plain read measured here, or the device's nominal bandwidth.
// Returns false (line printed) when the device was asked for and there is none.
static bool set_ceiling(gen_opts *o) {
    if (o->device == RG_DEVICE_CPU) {
        o->gbs = plain_read_gbs(o->threads);
        printf("memory: a plain read of 512 MiB on %d threads runs at %.1f GB/s; a generated token reads every weight "
               "once, so the ceiling is that over the weight bytes\n", o->threads, o->gbs);
        return true;
    }
    rg_cuda_device_info info;
    rg_error err = {0};
    char why[256] = "";
    if (rg_cuda_device_count(why, sizeof why) <= 0 || rg_cuda_device_get(0, &info, &err)) {
        printf("bench_generate: RG_BENCH_DEVICE=cuda but there is no CUDA device: %s\n", err.msg[0] ? err.msg : why);
        return false;
    }
    const char *env = getenv("RG_BENCH_PEAK_GBS");
    o->gbs = env && atof(env) > 0 ? atof(env) : bench_device_peak_of(info.name).mem_gbs;
    const bool host = strstr(info.name, "host execution") != NULL;
    printf("device: %s (compute %d.%d, %zu MiB); the ceiling is its nominal %.0f GB/s over the weight bytes%s\n", info.name,
           info.major, info.minor, info.total_mem >> 20, o->gbs,
           host ? " (the host execution is the CPU: these are CPU timings, not GPU results)"
           : o->gbs > 0 ? "" : " (unknown device: set RG_BENCH_PEAK_GBS)");
    return true;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // lines reach a log as they come, also when a timeout kills the run
    const char *one = getenv("RG_BENCH_MODEL");
    const char *src = one && *one ? one : getenv("RG_SMOLLM2");
    if (!src || access(src, R_OK)) {
        fprintf(stderr, "bench_generate: set RG_SMOLLM2 to SmolLM2-135M-Instruct.Q4_1.gguf (scripts/smollm2.sh prints it), "
                        "or RG_BENCH_MODEL to one file\n");
        return 2;
    }
    const char *only = getenv("RG_BENCH_TYPES"), *cache = getenv("RG_BENCH_CACHE"), *skip = getenv("RG_BENCH_SKIP");
    const char *dev = getenv("RG_BENCH_DEVICE"), *prefix = getenv("RG_BENCH_CACHE_PREFIX");
    gen_opts o = {.pp = env_int("RG_BENCH_PP", 128, 1), .tg = env_int("RG_BENCH_TG", 32, 1),
                  .reps = env_int("RG_BENCH_REPS", 3, 1), .threads = env_int("RG_BENCH_THREADS", rg_cpu_count(), 1),
                  .skip_pp = skip && !strcmp(skip, "pp"), .skip_tg = skip && !strcmp(skip, "tg"),
                  .show_cpu = env_int("RG_BENCH_CPU", 0, 0) > 0, .show_prof = env_int("RG_BENCH_PROFILE", 0, 0) > 0,
                  .device = dev && !strcmp(dev, "cuda") ? RG_DEVICE_CUDA : RG_DEVICE_CPU};
    printf("bench_generate: %s, prompt %d tokens, %d generated (greedy), %d threads, best of %d%s\n",
           one && *one ? one : src, o.pp, o.tg, o.threads, o.reps,
           o.device == RG_DEVICE_CUDA ? ", on the CUDA device" : "");
    if (!set_ceiling(&o)) return 1;
    printf("gen tok/s is llama-bench's tg%d (from an empty cache); after prompt: the same %d tokens after the %d-token "
           "prompt (attending to %d-%d)\n", o.tg, o.tg, o.pp, o.pp + 1, o.pp + o.tg);
    printf("%-16s %12s %12s %18s %14s\n", "type", "prompt tok/s", "gen tok/s", "gen of ceiling", "after prompt");
    if (one && *one) {
        bench_file("file", one, &o);
        return 0;
    }
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (!selected(only, types[i].label)) continue;
        char path[4096] = "/tmp/rg_bench_genXXXXXX";
        const char *file = src;
        bool keep = false;
        rg_error err = {0};
        if (types[i].target) {
            if (cache) {
                snprintf(path, sizeof path, "%s/%s-%s.gguf", cache, prefix && *prefix ? prefix : "smollm2", types[i].label);
                keep = true;
            } else {
                close(mkstemp(path));
            }
            if (!keep || access(path, R_OK)) {
                rg_quantize_opts qo = {.allow_requantize = true};
                rg_quantize_summary sum;
                if (rg_quantize_file(src, path, types[i].target, &qo, &sum, &err)) {
                    printf("%-16s %s\n", types[i].label, err.msg);
                    continue;
                }
            }
            file = path;
        }
        bench_file(types[i].label, file, &o);
        if (types[i].target && !keep) unlink(path);
    }
    printf("(skipped columns print 0; llama.cpp beside it: tools/reference/llama_bench_compare.py)\n");
    return 0;
}
