// bench_attn.c - a generated token's attention over the KV cache, per layer,
// at growing context lengths: ATTN_DECODE (the generation path) beside the
// unfused MUL_MAT, SOFT_MAX, MUL_MAT it replaced, in the same process, on
// SmolLM2's shapes (64-dim heads, 9 query heads over 3 kv heads, F16 cache of
// 4096 rows), all cores.
//
//   ./build/bench_attn            RG_BENCH_THREADS=1 for one thread, RG_BENCH_CTX=0 for a cache
//                                 of exactly n_kv rows (default 4096)
//
// Prints microseconds per layer and GFLOP/s (4 Dh H n_kv: scores and the
// weighted sum of values), and what 30 such layers cost a token.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "bench_util.h"
#include "graph/exec.h"
#include "tensor/half.h"

enum { DH = 64, H = 9, HKV = 3, LAYERS = 30 };
static int64_t C = 4096;  // cache rows (RG_BENCH_CTX; 0: each length's own, so value rows are contiguous)

// One layer's attention for a single token over n_kv cached rows; fused or the three ops.
static rg_graph *build(int64_t n_kv, bool fused, float *q, uint16_t *ck, uint16_t *cv) {
    rg_graph *g = rg_graph_new();
    rg_node *qn = rg_leaf(g, "q", RG_TYPE_F32, 3, (int64_t[]){DH, H, 1}, q);
    rg_node *kc = rg_leaf(g, "cache_k", RG_TYPE_F16, 3, (int64_t[]){DH, C, HKV}, ck);
    rg_node *vc = rg_leaf(g, "cache_v", RG_TYPE_F16, 3, (int64_t[]){C, DH, HKV}, cv);
    rg_node *k = rg_view(g, kc, 3, (int64_t[]){DH, n_kv, HKV}, (size_t[]){2, DH * 2, DH * C * 2}, 0);
    rg_node *vt = rg_view(g, vc, 3, (int64_t[]){n_kv, DH, HKV}, (size_t[]){2, C * 2, DH * C * 2}, 0);
    const float scale = 1.0f / sqrtf((float)DH);
    rg_node *o;
    if (fused) {
        o = rg_attn_decode(g, qn, k, vt, scale, 0.0f, 0);
    } else {
        // forward.c's path without the fused op: head h reads kv head h / (H / Hkv).
        rg_node *Q = rg_permute(g, qn, 0, 2, 1, 3);                        // [Dh, 1, H]
        rg_node *kq = rg_mul_mat(g, k, Q);                                 // [n_kv, 1, H]
        kq = rg_soft_max(g, kq, NULL, true, scale, 0.0f);
        o = rg_mul_mat(g, vt, kq);                                         // [Dh, 1, H]
        o = rg_cont(g, rg_permute(g, o, 0, 2, 1, 3));                      // [Dh, H, 1]
    }
    if (o) o->flags |= RG_NODE_OUTPUT;
    return g;
}

int main(void) {
    const char *ctx_env = getenv("RG_BENCH_CTX");
    if (ctx_env && atoll(ctx_env) > 0) C = atoll(ctx_env);
    int threads = getenv("RG_BENCH_THREADS") ? atoi(getenv("RG_BENCH_THREADS")) : rg_cpu_count();
    if (threads < 1) threads = rg_cpu_count();
    float *q = malloc(sizeof(float) * DH * H);
    uint16_t *ck = malloc(sizeof(uint16_t) * DH * C * HKV), *cv = malloc(sizeof(uint16_t) * DH * C * HKV);
    for (int i = 0; i < DH * H; i++) q[i] = rg_rng_normal(1, 0, (uint64_t)i);
    for (int i = 0; i < DH * C * HKV; i++) {
        ck[i] = rg_fp32_to_fp16(rg_rng_normal(1, 1, (uint64_t)i));
        cv[i] = rg_fp32_to_fp16(rg_rng_normal(1, 2, (uint64_t)i));
    }
    rg_threadpool *pool;
    rg_error err = {0};
    if (rg_threadpool_create(&pool, threads, &err)) {
        fprintf(stderr, "bench_attn: %s\n", err.msg);
        return 1;
    }
    printf("bench_attn: one token's attention per layer, Dh %d, %d heads over %d kv heads, F16 cache, %d threads\n", DH,
           H, HKV, threads);
    printf("%8s %14s %14s %12s %14s %16s\n", "n_kv", "fused us", "unfused us", "fused GF/s", "unfused GF/s",
           "fused ms/token");
    static const int64_t lens[] = {32, 160, 512, 1024, 2048, 4096};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int64_t n = lens[li];
        if (ctx_env && atoll(ctx_env) == 0) C = n;
        double best[2] = {1e30, 1e30};
        for (int f = 0; f < 2; f++) {
            rg_graph *g = build(n, f == 0, q, ck, cv);
            rg_exec *ex = NULL;
            rg_exec_opts o = {.pool = pool};
            if (rg_graph_error(g, &err) || rg_exec_create(&ex, g, &o, &err)) {
                fprintf(stderr, "bench_attn: %s\n", err.msg);
                return 1;
            }
            const int reps = n <= 512 ? 2000 : 300;
            for (int r = 0; r < 5; r++) {  // best of 5 batches of reps
                double t0 = bench_now();
                for (int k = 0; k < reps; k++) rg_exec_run(ex, 0, -1, &err);
                double t = (bench_now() - t0) / reps;
                if (t < best[f]) best[f] = t;
            }
            rg_exec_free(ex);
            rg_graph_free(g);
        }
        const double flop = 4.0 * DH * H * (double)n;
        printf("%8lld %14.2f %14.2f %12.2f %14.2f %16.2f\n", (long long)n, best[0] * 1e6, best[1] * 1e6,
               flop / best[0] * 1e-9, flop / best[1] * 1e-9, best[0] * LAYERS * 1e3);
    }
    rg_threadpool_free(pool);
    free(q), free(ck), free(cv);
    return 0;
}
