// test_gemm_int8_tiles.c - prompts on the matrix unit's tiles (cpu/gemm_int8_tiles.h, and the BF16
// tiles of cpu/gemm_tiles.h for BF16 and F16 weights).
//
// The int8 tile path promises the bits of the VNNI path (gemm_int8.h): every case below holds it to
// rg_int8_panel_mul_ref, the VNNI path's portable reference, bit for bit, for the five types over
// row counts around the tiles (1..70, M not a multiple of 16) and prompt lengths 1..512, with
// strided activations and outputs whose padding must stay untouched, on 1, 2 and 5 threads. The
// emulated tiles (cpu/tiles.h) run everywhere and refuse what the hardware would refuse (a
// recording hook turns a refusal into a failed check); the hardware AMX kernel runs where the CPU
// has AMX-INT8 (SKIP with the reason elsewhere) and the real VNNI kernel where the CPU has it.
// MUL_MAT in inference takes the tiles (int8 types: the reference's bits; BF16, F16: gemm_tiles.h's
// reference bits); in training (no int8_activations) it does not. Generation with tiny Q4_K, Q8_0,
// BF16 and F16 models runs in child processes, with RG_TILES_EMULATE=1 (the tiles) and without
// (what runs today): the same bits where today's path is VNNI; elsewhere (the SGEMM on F32
// activations) the logits within the activations' rounding and the same greedy tokens up to a near tie.
//
// main sets RG_TILES_EMULATE=1 for this process: where the CPU has no AMX the tile paths are the
// emulated ones.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "cpu/cpu_ops.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gemm_int8.h"
#include "cpu/gemm_int8_tiles.h"
#include "cpu/gemm_tiles.h"
#include "cpu/tiles.h"
#include "full_pass.h"
#include "graph/graph.h"
#include "infer/session.h"
#include "model/quantize.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

extern char **environ;

typedef struct shape {
    uint32_t type;
    int64_t K, M, N;
} shape;

// Row counts around the two A tiles of a panel (16, 32) and column counts around the B tiles; K:
// one block, SmolLM2's 576, several superblocks.
static const shape shapes[] = {
    {RG_TYPE_Q4_0, 32, 1, 1},    {RG_TYPE_Q4_0, 64, 15, 16},  {RG_TYPE_Q4_0, 576, 17, 33},  {RG_TYPE_Q4_0, 96, 70, 9},
    {RG_TYPE_Q4_0, 128, 32, 32}, {RG_TYPE_Q5_0, 32, 16, 17},  {RG_TYPE_Q5_0, 96, 33, 8},    {RG_TYPE_Q5_0, 576, 5, 31},
    {RG_TYPE_Q8_0, 32, 31, 2},   {RG_TYPE_Q8_0, 576, 40, 19}, {RG_TYPE_Q8_0, 64, 1, 64},    {RG_TYPE_Q4_K, 256, 1, 1},
    {RG_TYPE_Q4_K, 256, 17, 7},  {RG_TYPE_Q4_K, 768, 33, 34}, {RG_TYPE_Q4_K, 512, 64, 16},  {RG_TYPE_Q6_K, 256, 3, 17},
    {RG_TYPE_Q6_K, 512, 32, 33}, {RG_TYPE_Q6_K, 768, 47, 5},  {RG_TYPE_Q6_K, 256, 16, 48},
};
// Prompt lengths 1..512 (llama.cpp's AMX path read past its buffers on some): one type of each
// family at M = 50 (a panel and a partial one).
static const int64_t prompt_lengths[] = {1, 2, 3, 7, 8, 15, 16, 31, 32, 33, 63, 100, 255, 256, 257, 511, 512};

static const char *tname(uint32_t type) { return rg_type_get(type)->name; }

static float *randn(int64_t n, uint64_t seed, float scale) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = scale * rg_rng_normal(seed, 7, (uint64_t)i);
    return x;
}

static void *quant_rows(uint32_t type, const float *src, int64_t K, int64_t M) {
    size_t row = rg_type_row_size(type, K);
    char *q = malloc(row * (size_t)M);
    for (int64_t m = 0; m < M; m++) rg_quant_get(type)->quantize(src + m * K, q + (size_t)m * row, K, NULL);
    return q;
}

// A buffer of exactly `bytes`, 64-aligned (posix_memalign takes any size: ASan sees a byte past it).
static void *exact_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1)) return NULL;
    return p;
}

// The emulation's refusals, recorded instead of aborting.
static int tile_faults;
static char tile_fault_msg[256];
static void record_fault(void *user, const char *file, int line, rg_tile_rule rule, const char *message) {
    (void)user;
    if (!tile_faults++)
        snprintf(tile_fault_msg, sizeof tile_fault_msg, "%s:%d %s: %s", file, line, rg_tile_rule_name(rule), message);
}

// A case's operands: M weight rows, N columns of K floats ldx = K + 3 apart, outputs ldy = M + 5 apart.
typedef struct operands {
    shape s;
    void *wq;
    size_t row;
    float *x, *yr;  // yr: the VNNI path's reference
    int64_t ldx, ldy;
    size_t x_len, y_len;  // floats, exactly what the strides reach
} operands;

static void operands_make(operands *o, shape s, uint64_t seed) {
    o->s = s;
    o->row = rg_type_row_size(s.type, s.K);
    float *wf = randn(s.K * s.M, seed, 0.05f);
    o->wq = quant_rows(s.type, wf, s.K, s.M);
    free(wf);
    o->ldx = s.K + 3, o->ldy = s.M + 5;
    o->x_len = (size_t)((s.N - 1) * o->ldx + s.K), o->y_len = (size_t)((s.N - 1) * o->ldy + s.M);
    o->x = randn((int64_t)o->x_len, seed + 1, 1.0f);
    // the reference: the VNNI path's pieces, panel by panel of 16
    rg_q8_cols cols;
    rg_int8_panel p;
    o->yr = calloc(o->y_len, sizeof(float));
    if (!rg_q8_cols_alloc(&cols, s.K, s.N) || !rg_int8_panel_alloc(&p, s.type, s.K)) abort();
    rg_q8_cols_quantize(&cols, o->x, o->ldx);
    for (int64_t m0 = 0; m0 < s.M; m0 += RG_INT8_PANEL) {
        rg_int8_panel_pack(&p, o->wq, o->row, m0, s.M);
        rg_int8_panel_mul_ref(&p, &cols, s.M - m0 < RG_INT8_PANEL ? (int)(s.M - m0) : RG_INT8_PANEL, o->yr + m0, o->ldy);
    }
    free(cols.q), free(p.codes);
}

static void operands_free(operands *o) { free(o->wq), free(o->x), free(o->yr); }

// The tile driver on `path` and `pool` into an output whose padding holds a canary; the count of
// outputs that differ from the reference, -1 when the padding was written.
static int64_t run_tiles(const operands *o, rg_tile_path path, rg_threadpool *pool) {
    const shape s = o->s;
    const size_t ws = rg_gemm_int8_tiles_work(s.K, s.N, rg_threadpool_size(pool));
    void *work = exact_alloc(ws);
    float *y = exact_alloc(o->y_len * sizeof(float)), *x = exact_alloc(o->x_len * sizeof(float));
    void *w = exact_alloc(o->row * (size_t)s.M);
    memcpy(x, o->x, o->x_len * sizeof(float)), memcpy(w, o->wq, o->row * (size_t)s.M);
    for (size_t i = 0; i < o->y_len; i++) y[i] = -12345.0f;
    rg_gemm_int8_tiles(pool, path, s.type, s.K, s.M, s.N, w, o->row, x, o->ldx, y, o->ldy, work);
    int64_t diff = 0;
    bool padding = true;
    for (int64_t n = 0; n < s.N; n++) {
        for (int64_t m = 0; m < s.M; m++) diff += memcmp(&y[n * o->ldy + m], &o->yr[n * o->ldy + m], sizeof(float)) != 0;
        for (int64_t m = s.M; m < o->ldy && n * o->ldy + m < (int64_t)o->y_len; m++) padding &= y[n * o->ldy + m] == -12345.0f;
    }
    free(work), free(y), free(x), free(w);
    return padding ? diff : -1;
}

// Every shape and prompt length on `path`, 1, 2 and 5 threads, against the VNNI path's reference.
static void check_path_against_reference(rg_tile_path path) {
    // 5 threads: fewer panels than threads, so panels are shared by their column groups
    rg_threadpool *pools[3] = {NULL, NULL, NULL};
    const int threads[3] = {1, 2, 5};
    rg_error err = {0};
    for (int t = 0; t < 3; t++) RG_REQUIRE(!rg_threadpool_create(&pools[t], threads[t], &err), "%s", err.msg);
    tile_faults = 0;
    rg_tile_set_fault_hook(record_fault, NULL);
    const size_t n_shapes = sizeof shapes / sizeof shapes[0], n_len = sizeof prompt_lengths / sizeof prompt_lengths[0];
    int cases = 0;
    for (size_t c = 0; c < n_shapes + 2 * n_len; c++) {
        shape s;
        if (c < n_shapes) s = shapes[c];
        else {
            const size_t i = (c - n_shapes) % n_len;
            s = (shape){c - n_shapes < n_len ? RG_TYPE_Q4_0 : RG_TYPE_Q6_K, 256, 50, prompt_lengths[i]};
        }
        operands o;
        operands_make(&o, s, 100 + c);
        for (int t = 0; t < 3; t++) {
            const int64_t diff = run_tiles(&o, path, pools[t]);
            RG_CHECK(diff == 0, "%s path %s K %lld M %lld N %lld on %d thread(s): %s%lld of %lld outputs differ from the "
                     "VNNI path's reference", rg_tile_path_name(path), tname(s.type), (long long)s.K, (long long)s.M,
                     (long long)s.N, threads[t], diff < 0 ? "the padding of y was written; " : "", (long long)diff,
                     (long long)(s.M * s.N));
        }
        RG_CHECK(!rg_tile_emu_configured(), "%s: the calling thread still holds a tile configuration", tname(s.type));
        operands_free(&o);
        cases++;
    }
    rg_tile_set_fault_hook(NULL, NULL);
    printf("    %s tiles: %d shapes (5 types, M 1..70, N 1..512) on 1, 2 and 5 threads, bit for bit the VNNI path's "
           "reference; %d tile refusals\n", rg_tile_path_name(path), cases, tile_faults);
    RG_CHECK(tile_faults == 0, "the emulated tiles refused an instruction: %s", tile_fault_msg);
    for (int t = 0; t < 3; t++) rg_threadpool_free(pools[t]);
}

static void test_emulated_tiles_match_vnni_reference(void) { check_path_against_reference(RG_TILES_EMULATED); }

static void test_amx_tiles_match_vnni_reference(void) {
    if (rg_int8_tiles_path() != RG_TILES_AMX)
        RG_SKIP("no AMX-INT8 kernel runs here (%s): the hardware tiles are not used on this machine",
                !rg_cpu_has_amx_int8() ? rg_cpu_amx_reason() : "this build's compiler has no -mamx-int8");
    check_path_against_reference(RG_TILES_AMX);
}

// Where the CPU has AVX-512 VNNI, the real VNNI kernel and the emulated tiles agree bit for bit.
static void test_vnni_kernel_matches_emulated_tiles(void) {
    if (!rg_gemm_int8_supports(RG_TYPE_Q4_0, 32)) RG_SKIP("no AVX-512 VNNI on this CPU: the VNNI kernel does not run here");
    rg_threadpool *pool = NULL;
    rg_error err = {0};
    RG_REQUIRE(!rg_threadpool_create(&pool, 2, &err), "%s", err.msg);
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        operands o;
        operands_make(&o, shapes[c], 300 + c);
        const shape s = o.s;
        void *work = aligned_alloc(64, (rg_gemm_int8_work(s.K, s.N, 2) + 63) / 64 * 64);
        float *y = calloc(o.y_len, sizeof(float));
        rg_gemm_int8(pool, s.type, s.K, s.M, s.N, o.wq, o.row, o.x, o.ldx, y, o.ldy, work);
        int64_t diff = 0;
        for (int64_t n = 0; n < s.N; n++)
            for (int64_t m = 0; m < s.M; m++) diff += memcmp(&y[n * o.ldy + m], &o.yr[n * o.ldy + m], 4) != 0;
        RG_CHECK(diff == 0 && run_tiles(&o, RG_TILES_EMULATED, pool) == 0,
                 "%s K %lld M %lld N %lld: the VNNI kernel (%lld outputs off the reference) and the tiles differ",
                 tname(s.type), (long long)s.K, (long long)s.M, (long long)s.N, (long long)diff);
        free(work), free(y);
        operands_free(&o);
    }
    rg_threadpool_free(pool);
}

// ---------------------------------------------------------------------------
// MUL_MAT's dispatch.

static rg_tensor tensor2(uint32_t type, int64_t ne0, int64_t ne1, void *data) {
    rg_tensor t;
    memset(&t, 0, sizeof t);
    t.type = type;
    t.ne[0] = ne0, t.ne[1] = ne1, t.ne[2] = t.ne[3] = 1;
    t.nb[0] = rg_type_get(type)->type_size;
    t.nb[1] = rg_type_row_size(type, ne0);
    t.nb[2] = t.nb[3] = t.nb[1] * (size_t)ne1;
    t.data = data;
    return t;
}

static bool run_mul_mat(rg_node *y, rg_threadpool *pool, bool int8) {
    size_t ws = cpu_mul_mat_work(y, rg_threadpool_size(pool));
    rg_exec_ctx ctx = {pool, ws ? exact_alloc(ws) : NULL, ws, int8, NULL, NULL, false, NULL};
    rg_error err = {0};
    rg_status st = cpu_mul_mat(&ctx, y, &err);
    RG_CHECK(st == RG_OK, "%s", err.msg);
    free(ctx.scratch);
    return st == RG_OK;
}

// y = w x for BF16 and F16 weights as gemm_tiles.h's reference computes it: ops_matmul.c's batch
// (C(n, m) = sum_k x[k, n] w[k, m]) written out by hand.
typedef struct half_batch {
    uint32_t type;
    const void *w;
    size_t row;
    const float *x;
    int64_t K;
    float *y;
    int64_t M;
} half_batch;

static void half_batch_get(const void *ctx, int64_t p, rg_gemm_problem *prob) {
    const half_batch *c = ctx;
    (void)p;
    memset(prob, 0, sizeof *prob);
    prob->a = c->x, prob->a_rs = c->K, prob->a_cs = 1;
    prob->b.type = c->type, prob->b.data = c->w, prob->b.row_stride = c->row, prob->b.rows_along_k = true;
    prob->c = c->y, prob->ldc = c->M;
}

// The bits MUL_MAT must give with int8 activations allowed when a tile path takes it: the VNNI path's
// reference (int8 types) or gemm_tiles.h's (BF16, F16). False when no tile path takes it here.
static bool expected_bits(uint32_t type, const void *wq, const float *x, int64_t K, int64_t M, int64_t N, float *ye) {
    if (type == RG_TYPE_BF16 || type == RG_TYPE_F16) {
        const rg_tile_path path = rg_gemm_tiles_path();
        if ((path != RG_TILES_AMX || !rg_gemm_tiles_amx_built) && path != RG_TILES_EMULATED) return false;
        half_batch c = {type, wq, rg_type_row_size(type, K), x, K, ye, M};
        rg_gemm_batch bt = {N, M, K, type, true, false, 1, half_batch_get, &c};
        rg_error err = {0};
        return rg_gemm_tiles_ref(path, &bt, &err) == RG_OK;
    }
    if (!rg_gemm_int8_tiles_supports(type, K)) return false;
    rg_q8_cols cols;
    rg_int8_panel p;
    if (!rg_q8_cols_alloc(&cols, K, N) || !rg_int8_panel_alloc(&p, type, K)) abort();
    rg_q8_cols_quantize(&cols, x, K);
    const size_t row = rg_type_row_size(type, K);
    for (int64_t m0 = 0; m0 < M; m0 += RG_INT8_PANEL) {
        rg_int8_panel_pack(&p, wq, row, m0, M);
        rg_int8_panel_mul_ref(&p, &cols, M - m0 < RG_INT8_PANEL ? (int)(M - m0) : RG_INT8_PANEL, ye + m0, M);
    }
    free(cols.q), free(p.codes);
    return true;
}

// MUL_MAT [K, M] x [K, N] with int8 activations allowed (inference): the tile path's bits; without
// (training): the SGEMM on F32 activations, which differs.
static void check_mul_mat(uint32_t type, int64_t K, int64_t M, int64_t N) {
    rg_threadpool *pool = NULL;
    rg_error err = {0};
    RG_REQUIRE(!rg_threadpool_create(&pool, 2, &err), "%s", err.msg);
    float *wf = randn(K * M, 51 + type, 0.05f), *x = randn(K * N, 61 + type, 1.0f);
    void *wq = quant_rows(type, wf, K, M);
    float *yi = calloc((size_t)(M * N), sizeof(float)), *yf = calloc((size_t)(M * N), sizeof(float)),
          *ye = calloc((size_t)(M * N), sizeof(float));
    rg_node wn, xn, y;
    memset(&wn, 0, sizeof wn), memset(&xn, 0, sizeof xn), memset(&y, 0, sizeof y);
    wn.t = tensor2(type, K, M, wq);
    xn.t = tensor2(RG_TYPE_F32, K, N, x);
    y.op = RG_OP_MUL_MAT, y.src[0] = &wn, y.src[1] = &xn;
    y.t = tensor2(RG_TYPE_F32, M, N, yi);
    tile_faults = 0;
    rg_tile_set_fault_hook(record_fault, NULL);
    const bool ran = run_mul_mat(&y, pool, true);
    rg_tile_set_fault_hook(NULL, NULL);
    y.t.data = yf;
    run_mul_mat(&y, pool, false);
    const bool tiles = expected_bits(type, wq, x, K, M, N, ye);
    int64_t diff = 0, sgemm_diff = 0;
    for (int64_t i = 0; i < M * N; i++) {
        diff += memcmp(&yi[i], &ye[i], sizeof(float)) != 0;
        sgemm_diff += memcmp(&yi[i], &yf[i], sizeof(float)) != 0;
    }
    printf("    %s [%lld, %lld] x [%lld, %lld]: %s; %lld of %lld outputs differ from that path's reference, %lld from the "
           "F32 SGEMM of training\n", tname(type), (long long)K, (long long)M, (long long)K, (long long)N,
           tiles ? "the tiles take the prompt" : "no tile path here (the check is skipped)", (long long)diff,
           (long long)(M * N), (long long)sgemm_diff);
    RG_CHECK(ran && tile_faults == 0, "%s: %d tile refusals: %s", tname(type), tile_faults, tile_faults ? tile_fault_msg : "");
    if (tiles) {
        RG_CHECK(diff == 0, "%s: MUL_MAT in inference is not the tile path's bits (%lld outputs differ)", tname(type),
                 (long long)diff);
        RG_CHECK(sgemm_diff > 0, "%s: inference and training give the same bits: the tile path did not run", tname(type));
    }
    free(wf), free(x), free(wq), free(yi), free(yf), free(ye);
    rg_threadpool_free(pool);
    if (!tiles) RG_SKIP("%s: no tile path takes prompts on this machine", tname(type));
}

static void test_mul_mat_q4_0(void) { check_mul_mat(RG_TYPE_Q4_0, 576, 70, 37); }
static void test_mul_mat_q5_0(void) { check_mul_mat(RG_TYPE_Q5_0, 96, 33, 8); }
static void test_mul_mat_q8_0(void) { check_mul_mat(RG_TYPE_Q8_0, 576, 40, 17); }
static void test_mul_mat_q4_K(void) { check_mul_mat(RG_TYPE_Q4_K, 768, 33, 64); }
static void test_mul_mat_q6_K(void) { check_mul_mat(RG_TYPE_Q6_K, 512, 50, 9); }
static void test_mul_mat_bf16(void) { check_mul_mat(RG_TYPE_BF16, 96, 33, 19); }
static void test_mul_mat_f16(void) { check_mul_mat(RG_TYPE_F16, 80, 21, 12); }

// ---------------------------------------------------------------------------
// Generation with a tiny quantized model, in child processes (a process asks for its paths once).

enum { PROMPT = 24, GEN = 8 };

static bool half_type(uint32_t type) { return type == RG_TYPE_BF16 || type == RG_TYPE_F16; }

// The prompt path of a weight type (ops_matmul.c's choice): 0 the SGEMM on F32 activations, 1 VNNI
// (int8 types) or AVX512_BF16 (BF16), 2 + rg_tile_path for the tiles.
static int32_t prompt_path_code(uint32_t type, int64_t K) {
    if (half_type(type)) {
        const rg_tile_path p = rg_gemm_tiles_path();
        if ((p == RG_TILES_AMX && rg_gemm_tiles_amx_built) || p == RG_TILES_EMULATED) return 2 + (int32_t)p;
        return type == RG_TYPE_BF16 && rg_gemm_bf16_supports(K) ? 1 : 0;
    }
    if (rg_gemm_int8_tiles_supports(type, K)) return 2 + (int32_t)rg_int8_tiles_path();
    return rg_gemm_int8_supports(type, K) ? 1 : 0;
}

// The child: the prompt in one batch (all logits), then GEN tokens drawn greedily one at a time.
// Writes the prompt path it took (0 SGEMM, 1 VNNI, 2 + rg_tile_path for the tiles), the tokens and
// every logit to out_path.
static int session_child(const char *model_path, const char *out_path) {
    rg_model *m = NULL;
    rg_error err = {0};
    if (rg_model_load(&m, model_path, &err)) return fprintf(stderr, "child: %s\n", err.msg), 2;
    const int64_t V = m->hp.n_vocab;
    const uint32_t type = m->output->type;  // every matrix: the file is quantized pure
    float *logits = malloc(sizeof(float) * (size_t)(V * (PROMPT + GEN)));
    int32_t ids[PROMPT], gen[GEN];
    for (int i = 0; i < PROMPT; i++) ids[i] = (i * 37 + 11) % (int32_t)V;
    rg_session *s = NULL;
    rg_session_opts so = {.n_ctx = 64, .n_threads = 2, .n_batch = PROMPT};
    if (rg_session_create(&s, m, &so, &err) || rg_session_eval(s, ids, PROMPT, logits, 1, &err))
        return fprintf(stderr, "child: %s\n", err.msg), 2;
    const float *last = logits + (size_t)(PROMPT - 1) * V;
    for (int g = 0; g < GEN; g++) {
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++) best = last[v] > last[best] ? (int32_t)v : best;
        gen[g] = best;
        float *out = logits + (size_t)(PROMPT + g) * V;
        if (rg_session_eval(s, &gen[g], 1, out, 0, &err)) return fprintf(stderr, "child: %s\n", err.msg), 2;
        last = out;
    }
    const int32_t path = prompt_path_code(type, m->hp.n_embd);
    FILE *f = fopen(out_path, "wb");
    const bool ok = f && fwrite(&path, 4, 1, f) == 1 && fwrite(gen, 4, GEN, f) == GEN &&
                    fwrite(logits, sizeof(float), (size_t)(V * (PROMPT + GEN)), f) == (size_t)(V * (PROMPT + GEN));
    if (f) fclose(f);
    rg_session_free(s);
    rg_model_free(m);
    free(logits);
    return ok ? 0 : 2;
}

static char self_path[4096];

// Runs the child on model_path with RG_TILES_EMULATE and RG_NO_AMX set as given (NULL: unset) and
// reads what it wrote: its path, tokens and logits (V * (PROMPT + GEN)).
static bool run_child(const char *model_path, const char *emulate, const char *no_amx, int64_t V, int32_t *path,
                      int32_t *gen, float *logits) {
    char out[64] = "/tmp/rg_test_int8t_outXXXXXX";
    close(mkstemp(out));
    // the child's environment, made before fork: ours without the two variables, then those given
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 3, sizeof(char *)), e1[64], e2[64];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "RG_TILES_EMULATE=", 17) && strncmp(environ[i], "RG_NO_AMX=", 10)) env[k++] = environ[i];
    if (emulate) snprintf(e1, sizeof e1, "RG_TILES_EMULATE=%s", emulate), env[k++] = e1;
    if (no_amx) snprintf(e2, sizeof e2, "RG_NO_AMX=%s", no_amx), env[k++] = e2;
    char *argv[] = {self_path, "--session-child", (char *)model_path, out, NULL};
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execve(self_path, argv, env);
        _exit(127);
    }
    int status = 0;
    const bool exited = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    free(env);
    FILE *f = exited ? fopen(out, "rb") : NULL;
    const size_t nl = (size_t)(V * (PROMPT + GEN));
    const bool ok = f && fread(path, 4, 1, f) == 1 && fread(gen, 4, GEN, f) == GEN && fread(logits, sizeof(float), nl, f) == nl;
    if (f) fclose(f);
    unlink(out);
    return ok;
}

static const char *child_path_name(uint32_t type, int32_t p) {
    return p == 0                    ? "the SGEMM on F32 activations"
           : p == 1                  ? (half_type(type) ? "AVX512_BF16" : "VNNI")
           : p == 2 + RG_TILES_AMX   ? "AMX tiles"
                                     : "emulated tiles";
}

// The tiny model (qwen2) with every matrix in `type`: generation with the tiles (RG_TILES_EMULATE=1: the
// emulated tiles, or AMX where the CPU has it) against what runs without them (RG_NO_AMX=1).
//   int8 types, the other run on VNNI: the same bits (the tile path's promise).
//   int8 types, the other run on the SGEMM (F32 activations): the prompt's logits within 2e-2 of the
//     largest (the Q8_0 rounding of the activations; test_gemm_int8's bound for the same change).
//   BF16, F16 (the other run: the SGEMM, or VDPBF16PS in its own order): within 1e-2 (the activations,
//     and F16 weights, rounded to BF16: 2^-9 of each value; seen here: 2.8e-3 BF16, 4.0e-3 F16).
// Either way the greedy tokens are the same up to the first step whose top two logits (the other
// run's) are closer than that bound. And where the CPU has AMX: AMX against the emulation, bit for bit.
static void check_generation(uint32_t type) {
    RG_REQUIRE(readlink("/proc/self/exe", self_path, sizeof self_path - 1) > 0, "cannot find this test's binary");
    char path[64] = "/tmp/rg_test_int8t_modelXXXXXX";
    close(mkstemp(path));
    const bool half = half_type(type);
    const double tol = half ? 1e-2 : 2e-2;
    rg_tiny_config cfg = {.arch = "qwen2", .type = half ? type : RG_TYPE_F32, .seed = 5};
    rg_quantize_opts qo = {.n_threads = 1, .pure = true};
    rg_quantize_summary qs;
    rg_error err = {0};
    RG_REQUIRE(!rg_tiny_write(&cfg, path, &err) && (half || !rg_quantize_file(path, path, tname(type), &qo, &qs, &err)),
               "%s", err.msg);
    const int64_t V = RG_TINY_N_VOCAB;
    const size_t nl = (size_t)(V * (PROMPT + GEN));
    float *lt = malloc(sizeof(float) * nl), *lo = malloc(sizeof(float) * nl), *le = malloc(sizeof(float) * nl);
    int32_t pt = -1, po = -1, pe = -1, gt[GEN], go[GEN], ge[GEN];
    const bool ran = run_child(path, "1", NULL, V, &pt, gt, lt) && run_child(path, NULL, "1", V, &po, go, lo);
    RG_CHECK(ran, "%s: a child failed", tname(type));
    const bool tiles = ran && pt >= 2;
    if (ran && !tiles && half)  // a CPU with AVX512_BF16 and no AMX: BF16 prompts keep VDPBF16PS, emulation or not
        printf("    %s: RG_TILES_EMULATE=1 but the prompt takes %s: no BF16 tile path for prompts here\n", tname(type),
               child_path_name(type, pt));
    else RG_CHECK(tiles, "%s: RG_TILES_EMULATE=1 but the prompt took %s", tname(type), child_path_name(type, pt));
    if (tiles) {
        const double prompt_rel = rg_test_max_rel(lt, lo, V * PROMPT), all_rel = rg_test_max_rel(lt, lo, (int64_t)nl);
        int same = 0;
        while (same < GEN && gt[same] == go[same]) same++;
        const bool bits = !memcmp(lt, lo, sizeof(float) * nl);
        printf("    %s: prompt of %d on %s against %s: logits %s (max gap %.2e of the largest prompt logit, %.2e with "
               "the %d generated), greedy tokens %d of %d the same\n", tname(type), PROMPT, child_path_name(type, pt),
               child_path_name(type, po), bits ? "bit for bit the same" : "differ", prompt_rel, all_rel, GEN, same, GEN);
        if (po == 1 && !half) {
            RG_CHECK(bits && same == GEN, "%s: the tiles and VNNI differ", tname(type));
        } else {
            RG_CHECK(prompt_rel <= tol, "%s: the prompt's logits differ by %.3g of the largest (bound %.0e)", tname(type),
                     prompt_rel, tol);
            if (same < GEN) {  // a different token only at a near tie of the other run's logits
                const float *l = lo + (size_t)(PROMPT + same - 1) * V;  // what drew token `same`
                float top = -INFINITY, second = -INFINITY, scale = 0;
                for (int64_t v = 0; v < V; v++) {
                    scale = fmaxf(scale, fabsf(l[v]));
                    if (l[v] > top) second = top, top = l[v];
                    else if (l[v] > second) second = l[v];
                }
                RG_CHECK(top - second <= 2 * tol * scale, "%s: token %d differs (%d against %d) where the top two "
                         "logits are %.3g apart (not a near tie)", tname(type), same, gt[same], go[same], top - second);
            }
        }
        if (pt == 2 + RG_TILES_AMX) {  // the hardware: the emulation must give its bits
            RG_CHECK(run_child(path, "1", "1", V, &pe, ge, le), "%s: the emulated child failed", tname(type));
            RG_CHECK(pe == 2 + RG_TILES_EMULATED && !memcmp(lt, le, sizeof(float) * nl) && !memcmp(gt, ge, sizeof gt),
                     "%s: AMX and the emulated tiles differ", tname(type));
        }
    }
    unlink(path);
    free(lt), free(lo), free(le);
    if (ran && !tiles && half) RG_SKIP("%s: no BF16 tile path takes prompts on this CPU", tname(type));
}

static void test_generation_q4_K(void) { check_generation(RG_TYPE_Q4_K); }
static void test_generation_q8_0(void) { check_generation(RG_TYPE_Q8_0); }
static void test_generation_bf16(void) { check_generation(RG_TYPE_BF16); }
static void test_generation_f16(void) { check_generation(RG_TYPE_F16); }

static const rg_test_case cases[] = {
    RG_TEST(test_emulated_tiles_match_vnni_reference),
    RG_TEST(test_amx_tiles_match_vnni_reference),
    RG_TEST(test_vnni_kernel_matches_emulated_tiles),
    RG_TEST(test_mul_mat_q4_0),
    RG_TEST(test_mul_mat_q5_0),
    RG_TEST(test_mul_mat_q8_0),
    RG_TEST(test_mul_mat_q4_K),
    RG_TEST(test_mul_mat_q6_K),
    RG_TEST(test_mul_mat_bf16),
    RG_TEST(test_mul_mat_f16),
    RG_TEST(test_generation_q4_K),
    RG_TEST(test_generation_q8_0),
    RG_TEST(test_generation_bf16),
    RG_TEST(test_generation_f16),
    {0},
};

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--session-child")) return session_child(argv[2], argv[3]);
    setenv("RG_TILES_EMULATE", "1", 1);  // before any path is asked for: the emulated tiles where there is no AMX
    return rg_test_run(argc, argv, cases);
}
