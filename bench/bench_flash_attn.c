// bench_flash_attn.c - causal self-attention of one sequence on the CPU: FLASH_ATTN_EXT and
// its backward (FLASH_ATTN_BACK through autodiff) beside the materialized path they replace
// (MUL_MAT, SOFT_MAX, MUL_MAT and their backward), in the same process, at T = 256, 1024 and
// 4096 (8192 with RG_BENCH_FLASH_8192=1) and head_dim 64, 128, 256; 4 query heads over 2 kv
// heads, f32, all cores.
//
//   ./build/bench_flash_attn      RG_BENCH_THREADS=N, RG_BENCH_FLASH_T=256,1024 (the lengths),
//                                 RG_BENCH_FLASH_DH=64 (the head dims), RG_BENCH_FLASH_8192=1
//
// GFLOP/s by FlashAttention-2's convention: forward 4 T Tk H Dh, halved for causal; the
// backward 2.5 times the forward (its five products; our dq pass recomputes two more, which
// the convention does not count). The backward's time is that of the forward-and-backward
// graph less the forward's. Memory: the planned buffer plus scratch of the forward-and-
// backward graph (MiB), which for the materialized path holds the [T, T, H] scores, their
// softmax and their gradients (one score tensor's MiB in its own column).
//
//   RG_BENCH_DEVICE=cuda ./build/bench_flash_attn   the CUDA kernels (cuda/ops_flash.cu) alone:
//     FlashAttention-2/3's benchmark shape (16k tokens as S = 16384 / T sequences, hidden 2048 as
//     H = 2048 / Dh heads, H = Hkv), T = 4096 (RG_BENCH_FLASH_T), head_dim 64, 128, 256, causal
//     and not, forward and backward, in TF/s by the same convention, beside FlashAttention-2's
//     and -3's published H100 figures (FP16/BF16 on tensor cores; constants, not measured here).
//     Under the host execution of the CUDA code (RETRO_CUDA_HOST=1) it runs at T = 64, one
//     sequence, two heads, and says its figures are CPU timings.
//
// Then a session's prompt batch (RG_BENCH_FLASH_PROMPT=0 skips it, =only runs it alone): T
// queries at positions n_past.. over n_kv = n_past + T keys of an f16 cache as the session
// keeps it (keys [Dh, n_ctx, Hkv], values transposed [n_ctx, Dh, Hkv]), SmolLM2-135M's heads
// (9 over 3, Dh 64), forward only: FLASH_ATTN_EXT on the cache views (values through a
// transposed view) against the session's materialized MUL_MAT, SOFT_MAX, MUL_MAT, CONT, and
// beside flash on the same values stored [Dh, n_ctx, Hkv] (what the transposed cache costs it).
// session.c's prompt_flash takes its rule from this table.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "bench_util.h"
#include "cuda/cuda.h"
#include "graph/exec.h"
#include "graph/plan.h"
#include "tensor/half.h"

enum { H = 4, HKV = 2 };

typedef struct bench_bufs {
    float *q, *k, *v, *w;
} bench_bufs;

// The attention measured: q [Dh, T, H, S], k and v [Dh, T, Hkv, S], f32.
typedef struct bench_shape {
    int64_t Dh, T, H, Hkv, S;
    bool causal;
} bench_shape;

// o [Dh, H, T, S] of the flash op or of the materialized path (S = 1 only); with train,
// loss = sum(o w) and its backward.
static rg_graph *build(const bench_shape *sh, bool flash, bool train, const bench_bufs *b) {
    const int64_t Dh = sh->Dh, T = sh->T;
    rg_graph *g = rg_graph_new();
    rg_node *(*mk)(rg_graph *, const char *, uint32_t, int, const int64_t *, void *) = train ? rg_param : rg_leaf;
    rg_node *q = mk(g, "q", RG_TYPE_F32, 4, (int64_t[]){Dh, T, sh->H, sh->S}, b->q);    // [Dh, T, H, S]
    rg_node *k = mk(g, "k", RG_TYPE_F32, 4, (int64_t[]){Dh, T, sh->Hkv, sh->S}, b->k);  // [Dh, T, Hkv, S]
    rg_node *v = mk(g, "v", RG_TYPE_F32, 4, (int64_t[]){Dh, T, sh->Hkv, sh->S}, b->v);  // [Dh, T, Hkv, S]
    const float scale = 1.0f / sqrtf((float)Dh);
    rg_node *o;
    if (flash) {
        const rg_flash_params p = {scale, 0.0f, 0, sh->causal};
        o = rg_flash_part(g, rg_flash_attn_ext(g, q, k, v, NULL, NULL, &p), RG_FLASH_O);  // [Dh, H, T, S]
    } else {
        rg_node *kq = rg_soft_max(g, rg_mul_mat(g, k, q), NULL, sh->causal, scale, 0.0f);  // [T, T, H]
        rg_node *om = rg_mul_mat(g, rg_cont(g, rg_transpose(g, v)), kq);                   // [Dh, T, H]
        o = rg_cont(g, rg_permute(g, om, 0, 2, 1, 3));                                     // [Dh, H, T]
    }
    const int64_t o_ne[4] = {Dh, sh->H, T, sh->S};
    o = rg_reshape(g, o, 4, o_ne);
    if (!train) {
        if (o) o->flags |= RG_NODE_OUTPUT;
        return g;
    }
    rg_node *loss = rg_sum(g, rg_mul(g, o, rg_leaf(g, "w", RG_TYPE_F32, 4, o_ne, b->w)));
    rg_error err = {0};
    if (!rg_graph_error(g, &err) && rg_graph_backward(g, loss, &err)) fprintf(stderr, "bench_flash_attn: %s\n", err.msg);
    return g;
}

// Random q, k, v, w for a shape (free with bufs_free).
static bench_bufs bufs_new(const bench_shape *sh) {
    const int64_t nq = sh->Dh * sh->T * sh->H * sh->S, nk = sh->Dh * sh->T * sh->Hkv * sh->S;
    bench_bufs b = {malloc(sizeof(float) * (size_t)nq), malloc(sizeof(float) * (size_t)nk),
                    malloc(sizeof(float) * (size_t)nk), malloc(sizeof(float) * (size_t)nq)};
    for (int64_t i = 0; i < nq; i++) b.q[i] = rg_rng_normal(7, 0, (uint64_t)i), b.w[i] = rg_rng_normal(7, 3, (uint64_t)i);
    for (int64_t i = 0; i < nk; i++) b.k[i] = rg_rng_normal(7, 1, (uint64_t)i), b.v[i] = rg_rng_normal(7, 2, (uint64_t)i);
    return b;
}
static void bufs_free(bench_bufs *b) { free(b->q), free(b->k), free(b->v), free(b->w); }

// Best seconds of a run of g over `trials` runs (after one warm-up) on the CPU's pool or the CUDA
// device (rg_exec_run waits for the device); the CPU plan's MiB into mib.
static double time_graph(rg_graph *g, rg_threadpool *pool, rg_device device, int threads, int trials, double *mib) {
    rg_error err = {0};
    rg_plan plan;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.pool = device == RG_DEVICE_CPU ? pool : NULL, .n_threads = threads, .device = device};
    if (rg_graph_error(g, &err) || rg_graph_plan(g, threads, 0, &plan, &err) || rg_exec_create(&ex, g, &o, &err) ||
        rg_exec_run(ex, 0, -1, &err)) {
        fprintf(stderr, "bench_flash_attn: %s\n", err.msg);
        exit(1);
    }
    if (mib) *mib = (double)(plan.buffer_bytes + plan.scratch_bytes) / 1048576.0;
    double best = 1e30;
    for (int t = 0; t < trials; t++) {
        const double t0 = bench_now();
        rg_exec_run(ex, 0, -1, &err);
        best = fmin(best, bench_now() - t0);
    }
    rg_exec_free(ex);
    return best;
}

static int parse_list(const char *env, const int64_t *dflt, int n_dflt, int64_t *out) {
    const char *s = getenv(env);
    if (!s || !*s) {
        memcpy(out, dflt, sizeof(int64_t) * (size_t)n_dflt);
        return n_dflt;
    }
    int n = 0;
    for (char *end; *s && n < 8; s = *end ? end + 1 : end) {
        const long long v = strtoll(s, &end, 10);
        if (end == s) break;
        if (v > 0) out[n++] = v;
    }
    return n;
}

// ---------------------------------------------------------------------------
// RG_BENCH_DEVICE=cuda: the CUDA kernels alone, in TF/s, beside published figures.

// FlashAttention-2's and -3's published H100 SXM figures, FP16/BF16 on tensor cores: constants
// from their papers for comparison, never measured here (our kernels compute in f32 on CUDA
// cores, whose H100/H200 SXM peak is 67 TF/s by NVIDIA's data sheet).
static const struct {
    const char *what;
    double tfs;
} published_h100[] = {
    {"FA3 forward, head_dim 256, long sequences (FA3 paper, Shah et al. 2024: up to 740 TF/s)", 740},
    {"FA3 backward, head_dim 128 (FA3 paper's backward figure)", 561},
    {"FA2 on H100 (FA3 paper: 35% utilization of 989 TF/s)", 0.35 * 989.4},
};
enum { FP32_PEAK_H100_TFS = 67 };

static int device_main(void) {
    char why[256] = "";
    rg_cuda_device_info info;
    rg_error err = {0};
    if (rg_cuda_device_count(why, sizeof why) <= 0 || rg_cuda_device_get(0, &info, &err)) {
        printf("bench_flash_attn: RG_BENCH_DEVICE=cuda but there is no CUDA device: %s\n", err.msg[0] ? err.msg : why);
        return 1;
    }
    const bool host = strstr(info.name, "host execution") != NULL;
    const bool hopper = strstr(info.name, "H100") || strstr(info.name, "H200");
    const int64_t t_dflt[1] = {host ? 64 : 4096}, dh_dflt[3] = {64, 128, 256};
    int64_t lens[8], dims[8];
    const int n_len = parse_list("RG_BENCH_FLASH_T", t_dflt, 1, lens);
    const int n_dim = parse_list("RG_BENCH_FLASH_DH", dh_dflt, 3, dims);
    printf("bench_flash_attn: FLASH_ATTN_EXT/BACK on the CUDA device (cuda/ops_flash.cu, f32 on CUDA cores): %s "
           "(compute %d.%d)%s\n", info.name, info.major, info.minor,
           host ? "\n  HOST EXECUTION of the CUDA code: these are CPU timings of a tiny shape, not GPU results" : "");
    printf("TF/s by FlashAttention-2's convention: forward 4 S T^2 H Dh (halved when causal), backward 2.5x the forward "
           "(its time: forward-and-backward less forward); shape %s\n",
           host ? "1 sequence, 2 heads" : "S = 16384 / T sequences, H = 2048 / Dh heads (FA2/FA3's benchmark shape)");
    printf("%6s %4s %3s %6s %4s | %9s %8s | %9s %8s | %s\n", "T", "Dh", "H", "S", "mask", "fwd ms", "TF/s", "bwd ms",
           "TF/s", hopper ? "of the fp32 peak (fwd, bwd)" : "");
    for (int li = 0; li < n_len; li++)
        for (int di = 0; di < n_dim; di++)
            for (int causal = 1; causal >= 0; causal--) {
                const int64_t T = lens[li], Dh = dims[di];
                const int64_t Hd = host ? 2 : (2048 / Dh > 0 ? 2048 / Dh : 1), S = host ? 1 : (16384 / T > 0 ? 16384 / T : 1);
                const bench_shape sh = {Dh, T, Hd, Hd, S, causal != 0};
                bench_bufs b = bufs_new(&sh);
                const double fwd_flop = 4.0 * (double)S * (double)T * (double)T * (double)Hd * (double)Dh / (causal ? 2 : 1);
                const int trials = host ? 1 : 3;
                rg_graph *g = build(&sh, true, false, &b);
                const double f = time_graph(g, NULL, RG_DEVICE_CUDA, 1, trials, NULL);
                rg_graph_free(g);
                g = build(&sh, true, true, &b);
                const double bwd = fmax(time_graph(g, NULL, RG_DEVICE_CUDA, 1, trials, NULL) - f, 1e-9);
                rg_graph_free(g);
                const double ft = fwd_flop / f * 1e-12, bt = 2.5 * fwd_flop / bwd * 1e-12;
                char peak[64] = "";
                if (hopper)
                    snprintf(peak, sizeof peak, "%.0f%%, %.0f%%", 100 * ft / FP32_PEAK_H100_TFS, 100 * bt / FP32_PEAK_H100_TFS);
                printf("%6lld %4lld %3lld %6lld %4s | %9.3f %8.4f | %9.3f %8.4f | %s%s\n", (long long)T, (long long)Dh,
                       (long long)Hd, (long long)S, causal ? "caus" : "full", f * 1e3, ft, bwd * 1e3, bt, peak,
                       host ? "host execution, not a GPU result" : "");
                bufs_free(&b);
            }
    printf("published H100 figures (FP16/BF16 tensor cores; literature constants, not measured here):\n");
    for (size_t i = 0; i < sizeof published_h100 / sizeof *published_h100; i++)
        printf("  published H100 figure, not measured here: %6.1f TF/s  %s\n", published_h100[i].tfs, published_h100[i].what);
    printf("  data sheet, not measured here:            %6d TF/s  the f32 CUDA-core peak of an H100/H200 SXM, which "
           "bounds these kernels\n", FP32_PEAK_H100_TFS);
    return 0;
}

// ---------------------------------------------------------------------------
// The prompt rows

enum { P_H = 9, P_HKV = 3, P_DH = 64 };

// o [Dh*H, T] of T queries over the n_kv cached rows of kc [Dh, n_ctx, Hkv] and vc [n_ctx, Dh, Hkv] (f16), as
// layer_attn.c builds it with a cache; vp: flash reads the values from vp [Dh, n_ctx, Hkv] instead.
static rg_graph *build_prompt(int64_t T, int64_t n_kv, int64_t n_ctx, bool flash, float *q, uint16_t *kc, uint16_t *vc,
                              uint16_t *vp) {
    rg_graph *g = rg_graph_new();
    const int64_t Dh = P_DH, es = 2;
    rg_node *Q = rg_leaf(g, "q", RG_TYPE_F32, 3, (int64_t[]){Dh, T, P_H}, q);  // [Dh, T, H]
    rg_node *kl = rg_leaf(g, "cache_k", RG_TYPE_F16, 3, (int64_t[]){Dh, n_ctx, P_HKV}, kc);
    rg_node *vl = rg_leaf(g, "cache_v", RG_TYPE_F16, 3, (int64_t[]){n_ctx, Dh, P_HKV}, vc);
    rg_node *K = rg_view(g, kl, 3, (int64_t[]){Dh, n_kv, P_HKV}, (size_t[]){es, Dh * es, Dh * n_ctx * es}, 0);
    rg_node *Vt = rg_view(g, vl, 3, (int64_t[]){n_kv, Dh, P_HKV}, (size_t[]){es, n_ctx * es, Dh * n_ctx * es}, 0);
    const float scale = 1.0f / sqrtf((float)Dh);
    rg_node *o;
    if (flash) {
        const rg_flash_params p = {scale, 0.0f, 0, true};
        rg_node *V = rg_permute(g, Vt, 1, 0, 2, 3);  // [Dh, n_kv, Hkv], strided rows
        if (vp)
            V = rg_view(g, rg_leaf(g, "packed_v", RG_TYPE_F16, 3, (int64_t[]){Dh, n_ctx, P_HKV}, vp), 3,
                        (int64_t[]){Dh, n_kv, P_HKV}, (size_t[]){es, Dh * es, Dh * n_ctx * es}, 0);
        o = rg_flash_part(g, rg_flash_attn_ext(g, Q, K, V, NULL, NULL, &p), RG_FLASH_O);
    } else {
        rg_node *kq = rg_soft_max_ext(g, rg_mul_mat(g, K, Q), NULL, true, scale, 0.0f, 0);  // [n_kv, T, H]
        o = rg_cont(g, rg_permute(g, rg_mul_mat(g, Vt, kq), 0, 2, 1, 3));                  // [Dh, H, T]
    }
    o = rg_reshape(g, o, 2, (int64_t[]){Dh * P_H, T});
    if (o) o->flags |= RG_NODE_OUTPUT;
    return g;
}

static void bench_prompt(rg_threadpool *pool, int threads) {
    static const int64_t kv_lens[] = {256, 512, 1024, 2048, 4096}, batches[] = {32, 64, 128, 256, 512};
    const int64_t n_ctx = 4096, Dh = P_DH;
    float *q = malloc(sizeof(float) * (size_t)(Dh * 512 * P_H));
    uint16_t *kc = malloc(sizeof(uint16_t) * (size_t)(Dh * n_ctx * P_HKV)), *vc = malloc(sizeof(uint16_t) * (size_t)(Dh * n_ctx * P_HKV));
    for (int64_t i = 0; i < Dh * 512 * P_H; i++) q[i] = rg_rng_normal(9, 0, (uint64_t)i);
    uint16_t *vp = malloc(sizeof(uint16_t) * (size_t)(Dh * n_ctx * P_HKV));
    for (int64_t i = 0; i < Dh * n_ctx * P_HKV; i++)
        kc[i] = rg_fp32_to_fp16(rg_rng_normal(9, 1, (uint64_t)i)), vc[i] = rg_fp32_to_fp16(rg_rng_normal(9, 2, (uint64_t)i));
    for (int64_t g = 0; g < P_HKV; g++)
        for (int64_t j = 0; j < n_ctx; j++)
            for (int64_t e = 0; e < Dh; e++) vp[e + Dh * (j + n_ctx * g)] = vc[j + n_ctx * (e + Dh * g)];
    printf("\nprompt: T queries over n_kv = n_past + T cached f16 keys (values transposed), %d heads over %d, Dh %d, "
           "%d threads; forward only\n", P_H, P_HKV, (int)Dh, threads);
    printf("%6s %5s | %9s %9s %9s | %9s %9s | %10s %6s\n", "n_kv", "T", "flash ms", "GF/s", "packed-v", "mat ms", "GF/s",
           "scores MiB", "speed");
    for (size_t ki = 0; ki < sizeof kv_lens / sizeof *kv_lens; ki++)
        for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
            const int64_t n_kv = kv_lens[ki], T = batches[bi];
            if (T > n_kv) continue;
            // causal: query t sees n_kv - T + t + 1 keys
            const double flop = 4.0 * P_H * (double)Dh * ((double)T * (double)(n_kv - T) + (double)T * (double)(T + 1) / 2);
            const int trials = (double)n_kv * (double)T <= 1 << 18 ? 5 : 2;
            double ms[3];  // materialized, flash, flash on packed values
            for (int way = 2; way >= 0; way--) {
                rg_graph *g = build_prompt(T, n_kv, n_ctx, way > 0, q, kc, vc, way == 2 ? vp : NULL);
                ms[way] = time_graph(g, pool, RG_DEVICE_CPU, threads, trials, NULL) * 1e3;
                rg_graph_free(g);
            }
            printf("%6lld %5lld | %9.3f %9.2f %9.3f | %9.3f %9.2f | %10.1f %5.2fx\n", (long long)n_kv, (long long)T, ms[1],
                   flop / ms[1] * 1e-6, ms[2], ms[0], flop / ms[0] * 1e-6, (double)n_kv * (double)T * P_H * 4.0 / 1048576.0,
                   ms[0] / ms[1]);
        }
    printf("speed: materialized time over flash's (> 1: flash faster)\n");
    free(q), free(kc), free(vc), free(vp);
}

int main(void) {
    const char *dev = getenv("RG_BENCH_DEVICE");
    if (dev && !strcmp(dev, "cuda")) return device_main();
    int threads = getenv("RG_BENCH_THREADS") ? atoi(getenv("RG_BENCH_THREADS")) : rg_cpu_count();
    if (threads < 1) threads = rg_cpu_count();
    const int64_t t_dflt[4] = {256, 1024, 4096, 8192}, dh_dflt[3] = {64, 128, 256};
    int64_t lens[8], dims[8];
    const char *big = getenv("RG_BENCH_FLASH_8192");
    const int n_len = parse_list("RG_BENCH_FLASH_T", t_dflt, big && *big == '1' ? 4 : 3, lens);
    const int n_dim = parse_list("RG_BENCH_FLASH_DH", dh_dflt, 3, dims);
    rg_threadpool *pool;
    rg_error err = {0};
    if (rg_threadpool_create(&pool, threads, &err)) {
        fprintf(stderr, "bench_flash_attn: %s\n", err.msg);
        return 1;
    }
    const char *prompt = getenv("RG_BENCH_FLASH_PROMPT");
    if (prompt && !strcmp(prompt, "only")) {
        bench_prompt(pool, threads);
        rg_threadpool_free(pool);
        return 0;
    }
    printf("bench_flash_attn: causal self-attention, %d heads over %d kv heads, f32, %d threads%s\n", H, HKV, threads,
           rg_cpu_has_avx2() ? ", AVX2" : ", baseline loops");
    printf("GFLOP/s: forward 4 T^2 H Dh / 2 (causal), backward 2.5x; MiB: the forward-and-backward graph's buffer + scratch\n");
    printf("%6s %4s | %9s %9s %9s %9s | %9s %9s %9s %9s | %8s %8s %8s %6s\n", "T", "Dh", "flash ms", "GF/s", "back ms",
           "GF/s", "mat ms", "GF/s", "back ms", "GF/s", "flash MiB", "mat MiB", "scores", "speed");
    for (int li = 0; li < n_len; li++)
        for (int di = 0; di < n_dim; di++) {
            const int64_t T = lens[li], Dh = dims[di];
            const bench_shape sh = {Dh, T, H, HKV, 1, true};
            bench_bufs b = bufs_new(&sh);
            const double fwd_flop = 4.0 * (double)T * (double)T * H * (double)Dh / 2.0, bwd_flop = 2.5 * fwd_flop;
            const int trials = T <= 1024 ? 3 : 1;
            double ms[2][2], mib[2];
            for (int flash = 1; flash >= 0; flash--) {
                rg_graph *g = build(&sh, flash, false, &b);
                const double f = time_graph(g, pool, RG_DEVICE_CPU, threads, trials, NULL);
                rg_graph_free(g);
                g = build(&sh, flash, true, &b);
                const double fb = time_graph(g, pool, RG_DEVICE_CPU, threads, trials, &mib[flash]);
                rg_graph_free(g);
                ms[flash][0] = f * 1e3, ms[flash][1] = fmax(fb - f, 1e-9) * 1e3;
            }
            const double scores_mib = (double)T * (double)T * H * 4.0 / 1048576.0;
            printf("%6lld %4lld | %9.2f %9.2f %9.2f %9.2f | %9.2f %9.2f %9.2f %9.2f | %8.1f %8.1f %8.1f %5.2fx\n",
                   (long long)T, (long long)Dh, ms[1][0], fwd_flop / ms[1][0] * 1e-6, ms[1][1], bwd_flop / ms[1][1] * 1e-6,
                   ms[0][0], fwd_flop / ms[0][0] * 1e-6, ms[0][1], bwd_flop / ms[0][1] * 1e-6, mib[1], mib[0], scores_mib,
                   (ms[0][0] + ms[0][1]) / (ms[1][0] + ms[1][1]));
            bufs_free(&b);
        }
    printf("speed: materialized forward + backward time over flash's\n");
    if (!prompt || strcmp(prompt, "0")) bench_prompt(pool, threads);
    rg_threadpool_free(pool);
    return 0;
}
