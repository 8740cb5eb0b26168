// bench_generate.c - prompt and generation tokens/s for SmolLM2-135M in F32,
// F16, BF16, Q8_0, Q4_0, Q4_1 and Q4_K_M, on all cores (llama-bench's protocol:
// 128-token prompt, 32 generated), each generation beside the ceiling that this
// machine's memory read rate, measured in the same run, sets. llama.cpp is measured
// beside it, back to back, by tools/reference/llama_bench_compare.py.
//
//   RG_SMOLLM2=path/to/SmolLM2-135M-Instruct.Q4_1.gguf ./build/bench_generate
//
// The other types are made from the Q4_1 file with `retrograd quantize
// --allow-requantize` (same shapes; the weights are the Q4_1 values), so the
// speeds are what each storage type costs.
//
// Optional environment (for profiling one type on a busy machine):
//   RG_BENCH_TYPES=f32,q4_0   only these labels (the first word of the label)
//   RG_BENCH_CACHE=/tmp/dir   keep the quantized files there and reuse them
//   RG_BENCH_REPS=5           repetitions (default 3); the best one is printed
//   RG_BENCH_SKIP=pp|tg       skip the prompt (and the generation after it) or both generations
//   RG_BENCH_THREADS=1        threads (default: all cores)
//   RG_BENCH_CPU=1            also print the process CPU seconds of each phase (best run), a
//                             measure of work that a busy machine disturbs less than wall time
//   RG_BENCH_PROFILE=1        also print where the time goes per op (graph/exec.h's profile),
//                             prompt and generation apart, summed over the repetitions
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/cpu.h"
#include "base/threadpool.h"
#include "bench_util.h"
#include "infer/session.h"
#include "model/quantize.h"

static const struct {
    const char *target;  // retrograd quantize name, NULL: the file as shipped
    const char *label;
} types[] = {
    {"F32", "f32"}, {"F16", "f16"}, {"BF16", "bf16"}, {"Q8_0", "q8_0"}, {"Q4_0", "q4_0"}, {NULL, "q4_1 (shipped)"}, {"Q4_K_M", "q4_k_m"},
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

// The memory yardstick, measured in this process: a plain read of 512 MiB
// (far past the caches) on the same threads, 64-bit words into independent
// sums, prefetched ahead like the kernels' rows. Generation reads every weight once per token, so bytes per token over
// this rate is the ceiling no kernel passes.
typedef struct read_job {
    const uint64_t *p;
    int64_t n;
    uint64_t sum[64];
} read_job;

static void read_part(void *arg, int ith, int nth) {
    read_job *j = arg;
    int64_t i0, i1;
    rg_split_range(j->n, ith, nth, &i0, &i1);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = i0; i + 4 <= i1; i += 4) {
        if ((i & 7) == 0) __builtin_prefetch(j->p + i + 256);  // 2 KB ahead, as the decode kernels fetch
        a += j->p[i], b ^= j->p[i + 1], c += j->p[i + 2], d ^= j->p[i + 3];
    }
    j->sum[ith % 64] = a + b + c + d;
}

static double plain_read_gbs(int threads) {
    const size_t bytes = (size_t)512 << 20;
    // In huge pages when the kernel gives them, as the model's own mapping is
    // advised (base/file.c): a yardstick in 4 KiB pages read slower than the
    // weights did.
    uint64_t *buf = aligned_alloc((size_t)2 << 20, bytes);
#ifdef MADV_HUGEPAGE
    if (buf) madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    rg_threadpool *pool = NULL;
    rg_error err;
    if (!buf || rg_threadpool_create(&pool, threads, &err)) {
        free(buf);
        return 0;
    }
    for (size_t i = 0; i < bytes / 8; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    read_job j = {.p = buf, .n = (int64_t)(bytes / 8)};
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = bench_now();
        rg_threadpool_run(pool, read_part, &j);
        double t = bench_now() - t0;
        if (t < best) best = t;
    }
    rg_threadpool_free(pool);
    free(buf);
    return (double)bytes / best * 1e-9;
}

// Adds what `from` holds to `to` and clears `from`.
static void profile_move(rg_exec_profile *from, rg_exec_profile *to) {
    for (int o = 0; o < RG_OP_COUNT; o++) to->op_s[o] += from->op_s[o], to->op_n[o] += from->op_n[o];
    for (int t = 0; t < RG_TYPE_COUNT; t++)
        to->mm_s[t] += from->mm_s[t], to->mm_n[t] += from->mm_n[t], to->mm_bytes[t] += from->mm_bytes[t];
    to->run_s += from->run_s, to->runs += from->runs;
    memset(from, 0, sizeof *from);
}

int main(void) {
    const char *src = getenv("RG_SMOLLM2");
    if (!src || access(src, R_OK)) {
        fprintf(stderr, "bench_generate: set RG_SMOLLM2 to SmolLM2-135M-Instruct.Q4_1.gguf (scripts/smollm2.sh prints it)\n");
        return 2;
    }
    const char *only = getenv("RG_BENCH_TYPES"), *cache = getenv("RG_BENCH_CACHE"), *skip = getenv("RG_BENCH_SKIP");
    int reps = getenv("RG_BENCH_REPS") ? atoi(getenv("RG_BENCH_REPS")) : 3;
    if (reps < 1) reps = 1;
    bool skip_pp = skip && !strcmp(skip, "pp"), skip_tg = skip && !strcmp(skip, "tg");
    enum { PP = 128, TG = 32 };
    int threads = getenv("RG_BENCH_THREADS") ? atoi(getenv("RG_BENCH_THREADS")) : rg_cpu_count();
    if (threads < 1) threads = rg_cpu_count();
    bool show_cpu = getenv("RG_BENCH_CPU") && atoi(getenv("RG_BENCH_CPU"));
    bool show_prof = getenv("RG_BENCH_PROFILE") && atoi(getenv("RG_BENCH_PROFILE"));
    static rg_exec_profile prof, prof_pp, prof_tg, prof_tga;
    printf("bench_generate: SmolLM2-135M, prompt %d tokens, %d generated (greedy), %d threads, best of %d\n", PP, TG,
           threads, reps);
    double gbs = plain_read_gbs(threads);
    printf("memory: a plain read of 512 MiB on %d threads runs at %.1f GB/s; a generated token reads every weight once, "
           "so the ceiling is that over the weight bytes\n", threads, gbs);
    printf("gen tok/s is llama-bench's tg%d (from an empty cache); after prompt: the same %d tokens after the %d-token "
           "prompt (attending to %d-%d)\n", TG, TG, PP, PP + 1, PP + TG);
    printf("%-16s %12s %12s %18s %14s\n", "type", "prompt tok/s", "gen tok/s", "gen of ceiling", "after prompt");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (!selected(only, types[i].label)) continue;
        char path[4096] = "/tmp/rg_bench_genXXXXXX";
        const char *file = src;
        bool keep = false;
        rg_error err = {0};
        if (types[i].target) {
            if (cache) {
                snprintf(path, sizeof path, "%s/smollm2-%s.gguf", cache, types[i].label);
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
        rg_model *m;
        rg_session *s;
        rg_session_opts so = {.n_ctx = PP + TG, .n_threads = threads, .n_batch = PP, .profile = show_prof ? &prof : NULL};
        memset(&prof_pp, 0, sizeof prof_pp);
        memset(&prof_tg, 0, sizeof prof_tg);
        memset(&prof_tga, 0, sizeof prof_tga);
        if (rg_model_load(&m, file, &err) || rg_session_create(&s, m, &so, &err)) {
            printf("%-16s %s\n", types[i].label, err.msg);
            continue;
        }
        int64_t V = m->hp.n_vocab;
        int32_t prompt[PP];
        for (int k = 0; k < PP; k++) prompt[k] = (int32_t)((k * 7919 + 13) % (V - 100)) + 50;
        float *logits = malloc(sizeof(float) * (size_t)V);
        double best_pp = 1e30, best_tg = 1e30, best_tga = 1e30, cpu_pp = 1e30, cpu_tg = 1e30;
        for (int rep = 0; rep < reps; rep++) {
            bool failed = false;
            // The prompt, then TG tokens after it (a chat's generation, attending to PP + k tokens).
            if (!skip_pp) {
                rg_session_truncate(s, 0);
                double c0 = cpu_now(), t0 = bench_now();
                failed = rg_session_eval(s, prompt, PP, logits, 0, &err) != RG_OK;
                double t1 = bench_now(), c1 = cpu_now();
                if (show_prof) profile_move(&prof, &prof_pp);
                for (int k = 0; k < TG && !skip_tg && !failed; k++) {
                    int32_t best = greedy(logits, V);
                    failed = rg_session_eval(s, &best, 1, logits, 0, &err) != RG_OK;
                }
                double t2 = bench_now();
                if (show_prof) profile_move(&prof, &prof_tga);
                if (c1 - c0 < cpu_pp) cpu_pp = c1 - c0;
                if (t1 - t0 < best_pp) best_pp = t1 - t0;
                if (t2 - t1 < best_tga) best_tga = t2 - t1;
            }
            // llama-bench's tg test: TG tokens one at a time from an empty cache.
            if (!skip_tg && !failed) {
                rg_session_truncate(s, 0);
                int32_t tok = prompt[0];
                double c0 = cpu_now(), t0 = bench_now();
                for (int k = 0; k < TG && !failed; k++) {
                    failed = rg_session_eval(s, &tok, 1, logits, 0, &err) != RG_OK;
                    tok = greedy(logits, V);
                }
                double t1 = bench_now(), c1 = cpu_now();
                if (show_prof) profile_move(&prof, &prof_tg);
                if (c1 - c0 < cpu_tg) cpu_tg = c1 - c0;
                if (t1 - t0 < best_tg) best_tg = t1 - t0;
            }
            if (failed) {
                printf("%-16s %s\n", types[i].label, err.msg);
                break;
            }
        }
        size_t wbytes = 0;
        for (uint64_t t = 0; t < m->file->n_tensors; t++) wbytes += m->file->tensors[t].nbytes;
        char ceil_s[48] = "-";
        if (gbs > 0 && !skip_tg)
            snprintf(ceil_s, sizeof ceil_s, "%.0f%% of %.0f", 100.0 * TG / best_tg / (gbs * 1e9 / (double)wbytes),
                     gbs * 1e9 / (double)wbytes);
        printf("%-16s %12.1f %12.1f %18s %14.1f", types[i].label, skip_pp ? 0.0 : PP / best_pp,
               skip_tg ? 0.0 : TG / best_tg, ceil_s, skip_pp || skip_tg ? 0.0 : TG / best_tga);
        if (show_cpu) printf("   cpu ms: prompt %.1f, per generated token %.2f", cpu_pp * 1e3, cpu_tg * 1e3 / TG);
        printf("\n");
        if (show_prof) {
            printf("prompt ");
            rg_exec_profile_print(&prof_pp, stdout);
            printf("generation ");
            rg_exec_profile_print(&prof_tg, stdout);
            printf("generation after the prompt ");
            rg_exec_profile_print(&prof_tga, stdout);
        }
        fflush(stdout);
        free(logits);
        rg_session_free(s);
        rg_model_free(m);
        if (types[i].target && !keep) unlink(path);
    }
    printf("(skipped columns print 0; llama.cpp beside it: tools/reference/llama_bench_compare.py)\n");
    return 0;
}
