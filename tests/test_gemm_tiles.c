// test_gemm_tiles.c - the BF16 products on the matrix unit (cpu/gemm_tiles.h, cpu/tiles.h):
//   - the emulated tile kernel (RG_TILES_EMULATED) against rg_gemm_tiles_ref bit for bit over a
//     table of shapes, layouts and B types, on 1 and 2 threads, with no refusal from the emulator;
//   - the reference itself: within a stated bound of the exact sum in double, and hand-made
//     cases where the documented orders (AMX's even/odd partial sums per step of 32, AVX512's
//     odd-then-even pairs) give other results than a sequential sum, denormals flushed;
//   - the emulator: every refusal rule reported with the caller's file and line through the
//     hook, the refused instruction without effect, and TDPBUSD's dword sums;
//   - the hardware paths (AMX, AVX512_BF16) against the reference bit for bit where the CPU has
//     them (SKIP with the reason where not);
//   - a B packed once and reused (rg_gemm_tiles_pack_b, rg_gemm_tiles_run_packed): the same bits;
//   - rg_gemm_run(RG_SGEMM_BF16) (RG_TILES_EMULATE=1 is set here when the environment says
//     nothing) and the driver's refusals.
#include <float.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "cpu/gemm.h"
#include "cpu/gemm_tiles.h"
#include "cpu/tiles.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

// ---------------------------------------------------------------------------
// Fixtures: a batch of n_problems products with the layouts of a case.

typedef enum a_layout { A_ROWS, A_COLS, A_STRIDED } a_layout;          // (K, 1), (1, M), (2, 2M + 1)
typedef enum b_layout { B_ROWS, B_COLS, B_STRIDED, B_TYPED } b_layout;  // F32 (N, 1), (1, K), (2, 2K + 1); typed rows

typedef struct tcase {
    int64_t M, N, K;
    bool accumulate;
    a_layout al;
    b_layout bl;
    uint32_t type;      // B_TYPED
    bool rows_along_k;  // B_TYPED
    int64_t n_problems;
    int special;        // 1: sprinkle denormals, tiny and huge values, -0 into A and B
} tcase;

typedef struct fixture {
    tcase tc;
    float *a;
    int64_t a_rs, a_cs, a_per;
    void *b;  // F32 or typed rows
    int64_t b_rs, b_cs;
    size_t b_per, row_stride;  // bytes
    float *c_init;
    int64_t ldc, c_per;
} fixture;

static void fixture_get(const void *ctx, int64_t p, rg_gemm_problem *prob) {
    const fixture *f = ctx;
    memset(prob, 0, sizeof *prob);
    prob->a = f->a + p * f->a_per, prob->a_rs = f->a_rs, prob->a_cs = f->a_cs;
    prob->b.type = f->tc.bl == B_TYPED ? f->tc.type : RG_TYPE_F32;
    prob->b.data = (const char *)f->b + (size_t)p * f->b_per;
    prob->b.rs = f->b_rs, prob->b.cs = f->b_cs;
    prob->b.row_stride = f->row_stride, prob->b.rows_along_k = f->tc.rows_along_k;
    prob->c = NULL;  // filled by the caller's output
    prob->ldc = f->ldc;
}

typedef struct out_ctx {
    const fixture *f;
    float *c;
} out_ctx;

static void out_get(const void *ctx, int64_t p, rg_gemm_problem *prob) {
    const out_ctx *o = ctx;
    fixture_get(o->f, p, prob);
    prob->c = o->c + p * o->f->c_per;
}

static float value(const tcase *tc, uint64_t seed, uint64_t stream, uint64_t i) {
    float v = rg_rng_normal(seed, stream, i);
    if (tc->special) {
        const uint64_t r = rg_rng_u64(seed, stream + 100, i) % 16;
        if (r == 0) v *= 1e-39f;       // an F32 denormal (a BF16 denormal after rounding)
        else if (r == 1) v *= 1e-22f;  // products underflow below F32's normals
        else if (r == 2) v *= 1e18f;   // products near the top of the range
        else if (r == 3) v = -0.0f;
    }
    return v;
}

static bool fixture_make(fixture *f, const tcase *tc, uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->tc = *tc;
    const int64_t M = tc->M, N = tc->N, K = tc->K, P = tc->n_problems;
    switch (tc->al) {
        case A_ROWS: f->a_rs = K, f->a_cs = 1, f->a_per = M * K; break;
        case A_COLS: f->a_rs = 1, f->a_cs = M, f->a_per = M * K; break;
        case A_STRIDED: f->a_rs = 2, f->a_cs = 2 * M + 1, f->a_per = 2 * M + (2 * M + 1) * K + 1; break;
    }
    f->a = malloc(sizeof(float) * (size_t)(f->a_per * P + 1));
    for (int64_t i = 0; i < f->a_per * P; i++) f->a[i] = value(tc, seed, 1, (uint64_t)i);
    if (tc->bl == B_TYPED) {
        const int64_t rows = tc->rows_along_k ? N : K, per_row = tc->rows_along_k ? K : N;
        f->row_stride = rg_type_row_size(tc->type, per_row);
        f->b_per = f->row_stride * (size_t)rows;
        float *src = malloc(sizeof(float) * (size_t)(rows * per_row + 1));
        f->b = malloc(f->b_per * (size_t)P + 1);
        for (int64_t p = 0; p < P; p++) {
            for (int64_t i = 0; i < rows * per_row; i++) src[i] = value(tc, seed + p, 2, (uint64_t)i);
            rg_error err = {0};
            if (rg_quantize(tc->type, src, (char *)f->b + (size_t)p * f->b_per, rows, per_row, NULL, "B", &err) != RG_OK) {
                printf("    quantize: %s\n", err.msg);
                free(src);
                return false;
            }
        }
        free(src);
    } else {
        int64_t per = K * N;
        if (tc->bl == B_ROWS) f->b_rs = N, f->b_cs = 1;
        if (tc->bl == B_COLS) f->b_rs = 1, f->b_cs = K;
        if (tc->bl == B_STRIDED) f->b_rs = 2, f->b_cs = 2 * K + 1, per = 2 * K + (2 * K + 1) * N + 1;
        f->b_per = (size_t)per * sizeof(float);
        float *b = malloc(f->b_per * (size_t)P + 4);
        for (int64_t i = 0; i < per * P; i++) b[i] = value(tc, seed, 2, (uint64_t)i);
        f->b = b;
    }
    f->ldc = N + 3;  // gaps between rows: nothing may write them
    f->c_per = M * f->ldc;
    f->c_init = malloc(sizeof(float) * (size_t)(f->c_per * P + 1));
    for (int64_t i = 0; i < f->c_per * P; i++) f->c_init[i] = rg_rng_normal(seed, 3, (uint64_t)i);
    return true;
}

static void fixture_free(fixture *f) { free(f->a), free(f->b), free(f->c_init); }

static rg_gemm_batch batch_of(const fixture *f, out_ctx *o) {
    rg_gemm_batch bt = {f->tc.M, f->tc.N, f->tc.K, f->tc.bl == B_TYPED ? f->tc.type : RG_TYPE_F32,
                        f->tc.rows_along_k, f->tc.accumulate, f->tc.n_problems, out_get, o};
    return bt;
}

static const char *type_name(const tcase *tc) { return tc->bl == B_TYPED ? rg_type_get(tc->type)->name : "f32"; }

// ---------------------------------------------------------------------------
// The table: edges of the 16/32 tiles and of the 256 x 512 x 256 blocks, K below 32 and 1, every
// A and B layout, the typed B both ways, several problems a batch.

static const tcase cases[] = {
    {1, 1, 1, false, A_ROWS, B_ROWS, 0, false, 1, 0},
    {3, 5, 1, true, A_ROWS, B_COLS, 0, false, 1, 0},
    {5, 7, 3, false, A_COLS, B_ROWS, 0, false, 1, 0},
    {16, 16, 32, false, A_ROWS, B_ROWS, 0, false, 1, 0},
    {17, 33, 31, true, A_STRIDED, B_STRIDED, 0, false, 1, 0},
    {32, 32, 64, false, A_ROWS, B_COLS, 0, false, 1, 1},
    {33, 47, 100, true, A_COLS, B_COLS, 0, false, 1, 1},
    {64, 80, 513, false, A_ROWS, B_ROWS, 0, false, 1, 0},
    {40, 300, 1100, true, A_ROWS, B_COLS, 0, false, 1, 0},
    {300, 20, 70, false, A_COLS, B_ROWS, 0, false, 1, 0},
    {1100, 20, 600, true, A_ROWS, B_COLS, 0, false, 1, 0},  // A of all rows over 1 MB: blocks of 256 rows
    {7, 9, 0, false, A_ROWS, B_ROWS, 0, false, 1, 0},
    {7, 9, 0, true, A_ROWS, B_ROWS, 0, false, 1, 0},
    {9, 13, 45, true, A_ROWS, B_ROWS, 0, false, 3, 1},
    {20, 36, 33, false, A_STRIDED, B_COLS, 0, false, 2, 0},
    {9, 40, 64, false, A_ROWS, B_TYPED, RG_TYPE_BF16, true, 1, 1},
    {33, 40, 70, true, A_COLS, B_TYPED, RG_TYPE_BF16, false, 1, 1},
    {9, 40, 66, true, A_ROWS, B_TYPED, RG_TYPE_F16, true, 1, 0},
    {10, 35, 47, false, A_ROWS, B_TYPED, RG_TYPE_F16, false, 2, 0},
    {11, 37, 96, false, A_ROWS, B_TYPED, RG_TYPE_Q8_0, true, 1, 0},
    {12, 64, 29, true, A_COLS, B_TYPED, RG_TYPE_Q8_0, false, 3, 0},
    {13, 33, 768, false, A_ROWS, B_TYPED, RG_TYPE_Q4_K, true, 1, 0},
    {14, 256, 45, true, A_ROWS, B_TYPED, RG_TYPE_Q4_K, false, 1, 0},
    {5, 512, 1024, false, A_ROWS, B_TYPED, RG_TYPE_Q4_K, true, 2, 0},
};
#define N_CASES (sizeof cases / sizeof cases[0])

// A recording fault hook: the count and the first refusal.
typedef struct fault_log {
    int count;
    rg_tile_rule rule;
    char file[256];
    int line;
    char msg[256];
} fault_log;

static void record_fault(void *user, const char *file, int line, rg_tile_rule rule, const char *message) {
    fault_log *l = user;
    if (l->count++ == 0) {
        l->rule = rule, l->line = line;
        snprintf(l->file, sizeof l->file, "%s", file);
        snprintf(l->msg, sizeof l->msg, "%s", message);
    }
}

// Runs case c on `path` (rg_gemm_tiles_run, 1 and 2 threads) against the reference of `path`,
// bit for bit, C's gaps included.
static void check_path_against_reference(rg_tile_path path) {
    rg_threadpool *pools[2] = {NULL, NULL};
    rg_error err = {0};
    RG_REQUIRE(rg_threadpool_create(&pools[1], 2, &err) == RG_OK, "pool: %s", err.msg);
    fault_log log = {0};
    if (path == RG_TILES_EMULATED) rg_tile_set_fault_hook(record_fault, &log);
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const tcase *tc = &cases[ci];
        fixture f;
        if (!fixture_make(&f, tc, 100 + ci)) {
            RG_CHECK(0, "case %zu: no fixture", ci);
            fixture_free(&f);
            continue;
        }
        const size_t c_bytes = sizeof(float) * (size_t)(f.c_per * tc->n_problems);
        float *want = malloc(c_bytes + 4), *got = malloc(c_bytes + 4);
        memcpy(want, f.c_init, c_bytes);
        out_ctx ow = {&f, want};
        rg_gemm_batch bw = batch_of(&f, &ow);
        RG_CHECK(rg_gemm_tiles_ref(path, &bw, &err) == RG_OK, "case %zu: reference: %s", ci, err.msg);
        for (int th = 0; th < 2; th++) {
            memcpy(got, f.c_init, c_bytes);
            out_ctx og = {&f, got};
            rg_gemm_batch bg = batch_of(&f, &og);
            const size_t ws = rg_gemm_tiles_work_size(&bg, th + 1);
            void *work = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
            rg_status st = rg_gemm_tiles_run(pools[th], path, &bg, work, ws, &err);
            RG_CHECK(st == RG_OK, "case %zu (%s), %d threads: %s", ci, rg_tile_path_name(path), th + 1, err.msg);
            int64_t bad = -1, n_bad = 0;
            for (int64_t i = 0; i < f.c_per * tc->n_problems; i++)
                if (memcmp(&got[i], &want[i], 4)) n_bad++, bad = bad < 0 ? i : bad;
            RG_CHECK(n_bad == 0,
                     "case %zu (M=%lld N=%lld K=%lld acc=%d A%d B%d %s rows_along_k=%d problems=%lld), %s on %d "
                     "threads: %lld elements differ from the reference, first at %lld: %.9g vs %.9g",
                     ci, (long long)tc->M, (long long)tc->N, (long long)tc->K, tc->accumulate, (int)tc->al, (int)tc->bl,
                     type_name(tc), tc->rows_along_k, (long long)tc->n_problems, rg_tile_path_name(path), th + 1,
                     (long long)n_bad, (long long)bad, bad >= 0 ? got[bad] : 0.0, bad >= 0 ? want[bad] : 0.0);
            free(work);
        }
        free(want), free(got);
        fixture_free(&f);
    }
    if (path == RG_TILES_EMULATED) {
        rg_tile_set_fault_hook(NULL, NULL);
        RG_CHECK(log.count == 0, "the emulator refused %d tile instructions, first at %s:%d (%s): %s", log.count,
                 log.file, log.line, rg_tile_rule_name(log.rule), log.msg);
    }
    rg_threadpool_free(pools[1]);
}

static void test_emulated_kernel_matches_reference(void) { check_path_against_reference(RG_TILES_EMULATED); }

static void test_amx_kernel_matches_reference(void) {
    if (!rg_gemm_tiles_amx_built) RG_SKIP("this build's compiler has no AMX (gemm_tiles_amx.c is a stub)");
    if (!rg_cpu_has_amx_bf16()) RG_SKIP("no AMX-BF16 here: %s", rg_cpu_amx_reason());
    check_path_against_reference(RG_TILES_AMX);
}

static void test_avx512_kernel_matches_reference(void) {
    if (!rg_gemm_tiles_avx512_built) RG_SKIP("this build's compiler has no AVX512_BF16 (gemm_tiles_avx512.c is a stub)");
    if (!rg_cpu_has_avx512_bf16()) RG_SKIP("no AVX512_BF16 on this CPU (or RG_NO_AVX512=1)");
    check_path_against_reference(RG_TILES_AVX512);
}

// ---------------------------------------------------------------------------
// The reference against sums in double.

static float bf16r(float x) { return rg_bf16_to_fp32(rg_fp32_to_bf16(x)); }

// Within the error of its own order: the AMX order's longest chain of roundings is 16 (a partial
// sum) + 1 (e + o) + one per step, the AVX512 order's one per element; each rounding's error is at
// most 2^-24 of a partial sum, itself at most sum |a b|. Against the exact sum of the BF16-rounded
// operands in double: |ref - exact| <= (chain + 1) 2^-24 sum |a b|. Against the unrounded F32
// operands, the roundings to BF16 add at most (2^-7 + 2^-16) sum |a b| (each operand within 2^-8
// of itself: 8 significant bits, round to nearest).
static void test_reference_within_bound_of_double(void) {
    const int64_t shapes[][3] = {{3, 4, 1}, {5, 3, 31}, {4, 6, 64}, {2, 3, 100}, {3, 2, 1000}, {2, 2, 4099}};
    rg_error err = {0};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        tcase tc = {shapes[si][0], shapes[si][1], shapes[si][2], false, A_ROWS, B_ROWS, 0, false, 1, 0};
        fixture f;
        fixture_make(&f, &tc, 7 + si);
        for (int order = 0; order < 2; order++) {
            const rg_tile_path path = order ? RG_TILES_AVX512 : RG_TILES_AMX;
            float *c = malloc(sizeof(float) * (size_t)f.c_per);
            out_ctx o = {&f, c};
            rg_gemm_batch bt = batch_of(&f, &o);
            RG_CHECK(rg_gemm_tiles_ref(path, &bt, &err) == RG_OK, "%s", err.msg);
            const double chain = order ? (double)tc.K + 1 : 16 + 1 + (double)((tc.K + 31) / 32) + 1;
            for (int64_t i = 0; i < tc.M; i++)
                for (int64_t j = 0; j < tc.N; j++) {
                    double exact_r = 0, exact = 0, mag = 0;
                    for (int64_t k = 0; k < tc.K; k++) {
                        const float a = f.a[i * tc.K + k], b = ((const float *)f.b)[k * tc.N + j];
                        exact_r += (double)bf16r(a) * bf16r(b), exact += (double)a * b, mag += fabs((double)a * b);
                    }
                    const double got = c[i * f.ldc + j], bound_r = (chain + 1) * ldexp(1, -24) * mag * 1.01;
                    const double bound = bound_r + (ldexp(1, -7) + ldexp(1, -16)) * mag * 1.01;
                    RG_CHECK(fabs(got - exact_r) <= bound_r, "%s order, M=%lld N=%lld K=%lld (%lld, %lld): %.9g vs %.9g "
                             "(BF16 operands in double), bound %.3g", rg_tile_path_name(path), (long long)tc.M,
                             (long long)tc.N, (long long)tc.K, (long long)i, (long long)j, got, exact_r, bound_r);
                    RG_CHECK(fabs(got - exact) <= bound, "%s order (%lld, %lld): %.9g vs %.9g (F32 operands), bound %.3g",
                             rg_tile_path_name(path), (long long)i, (long long)j, got, exact, bound);
                }
            free(c);
        }
        fixture_free(&f);
    }
}

// ---------------------------------------------------------------------------
// Hand-made cases for the orders: one row of A, one column of B (M = N = 1).

typedef struct order_case {
    const char *what;
    int K;
    float a[64], b[64];   // A(0, k) and B(k, 0); unlisted entries 0
    float c0;             // C before, with accumulate
    bool accumulate;
    float amx, avx512;    // what each order gives
} order_case;

#define P24 16777216.0f  // 2^24: 2^24 + 1 rounds back to 2^24

static const order_case order_cases[] = {
    // terms 2^24, 1, -2^24, 1 (k = 0..3): AMX: e = 2^24 - 2^24 = 0, o = 1 + 1 = 2 -> 2. AVX512: pair 0:
    // 0 + 1 = 1, 1 + 2^24 -> 2^24; pair 1: 2^24 + 1 -> 2^24, - 2^24 -> 0. A sequential sum gives 1.
    {"even/odd against odd-then-even", 4, {4096, 1, -4096, 1}, {4096, 1, 4096, 1}, 0, false, 2.0f, 0.0f},
    // one step of 32 then another: AMX adds each step's e + o to C once: 2^24 + (1 + 1) = 2^24 + 2;
    // AVX512 adds one at a time: 2^24 + 1 -> 2^24, twice.
    {"steps of 32", 64, {[0] = 4096, [32] = 1, [33] = 1}, {[0] = 4096, [32] = 1, [33] = 1}, 0, false, P24 + 2, P24},
    // the product 2^-140 is an F32 denormal: flushed when it lands in a sum
    {"denormal product flushed", 2, {0x1p-70f, 0}, {0x1p-70f, 0}, 0, false, 0.0f, 0.0f},
    // a BF16 denormal input reads as zero: 2^-130 x 2^100 would be 2^-30
    {"denormal input as zero", 1, {0x1p-130f}, {0x1p100f}, 0, false, 0.0f, 0.0f},
    // C denormal before: read as zero
    {"denormal C as zero", 1, {1.0f}, {0.0f}, 0x1p-140f, true, 0.0f, 0.0f},
    // operands rounded to BF16 to nearest even: 1 + 2^-8 (a tie) -> 1, 1 + 3 x 2^-8 -> 1 + 2^-6... with B = 1
    {"operands rounded to nearest even", 2, {1.00390625f, 1.01171875f}, {1.0f, 1.0f}, 0, false, 2.015625f, 2.015625f},
    // accumulate onto C, K = 1 padded: C + a b
    {"accumulate, K = 1", 1, {3.0f}, {0.5f}, 10.0f, true, 11.5f, 11.5f},
};

static void run_order_case(const order_case *oc, rg_tile_path path, float *c, bool kernel) {
    float b[64];
    memcpy(b, oc->b, sizeof b);
    const tcase tc = {1, 1, oc->K, oc->accumulate, A_ROWS, B_ROWS, 0, false, 1, 0};
    fixture f;
    memset(&f, 0, sizeof f);
    f.tc = tc;
    f.a = (float *)oc->a, f.a_rs = oc->K, f.a_cs = 1, f.a_per = oc->K;
    f.b = b, f.b_rs = 1, f.b_cs = oc->K;
    f.ldc = 1, f.c_per = 1;
    *c = oc->c0;
    out_ctx o = {&f, c};
    rg_gemm_batch bt = batch_of(&f, &o);
    rg_error err = {0};
    rg_status st = kernel ? rg_gemm_tiles_run(NULL, path, &bt, NULL, 0, &err) : rg_gemm_tiles_ref(path, &bt, &err);
    RG_CHECK(st == RG_OK, "%s: %s", oc->what, err.msg);
}

static void test_reference_orders_by_hand(void) {
    for (size_t i = 0; i < sizeof order_cases / sizeof order_cases[0]; i++) {
        const order_case *oc = &order_cases[i];
        float c;
        run_order_case(oc, RG_TILES_AMX, &c, false);
        RG_CHECK(memcmp(&c, &oc->amx, 4) == 0, "%s: the AMX order gives %.9g, want %.9g", oc->what, c, oc->amx);
        run_order_case(oc, RG_TILES_AVX512, &c, false);
        RG_CHECK(memcmp(&c, &oc->avx512, 4) == 0, "%s: the AVX512 order gives %.9g, want %.9g", oc->what, c, oc->avx512);
        run_order_case(oc, RG_TILES_EMULATED, &c, true);
        RG_CHECK(memcmp(&c, &oc->amx, 4) == 0, "%s: the emulated tiles give %.9g, want %.9g", oc->what, c, oc->amx);
    }
}

// ---------------------------------------------------------------------------
// The emulator's refusals: each case does one thing the hardware (or our rules) refuses, on the
// line it reports.

static rg_tile_config good_config(void) {
    rg_tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) rg_tile_config_set(&cfg, t, 16, 64);
    return cfg;
}

static _Alignas(64) uint8_t scratch[16 * 128];

static int bad_palette(void) {
    rg_tile_config c = good_config();
    c.palette_id = 2;
    int l = __LINE__; RG_TILE_LOADCONFIG(&c);
    return l;
}
static int bad_reserved(void) {
    rg_tile_config c = good_config();
    c.reserved[3] = 1;
    int l = __LINE__; RG_TILE_LOADCONFIG(&c);
    return l;
}
static int bad_tile_9(void) {
    rg_tile_config c = good_config();
    rg_tile_config_set(&c, 9, 16, 64);
    int l = __LINE__; RG_TILE_LOADCONFIG(&c);
    return l;
}
static int bad_rows(void) {
    rg_tile_config c = good_config();
    rg_tile_config_set(&c, 2, 17, 64);
    int l = __LINE__; RG_TILE_LOADCONFIG(&c);
    return l;
}
static int bad_colsb(void) {
    rg_tile_config c = good_config();
    rg_tile_config_set(&c, 2, 16, 68);
    int l = __LINE__; RG_TILE_LOADCONFIG(&c);
    return l;
}
static int bad_half_zero(void) {
    rg_tile_config c = good_config();
    rg_tile_config_set(&c, 5, 16, 0);
    int l = __LINE__; RG_TILE_LOADCONFIG(&c);
    return l;
}
static int bad_unconfigured(void) {
    int l = __LINE__; RG_TILE_DPBF16PS(0, 1, 2);
    return l;
}
static int bad_unused_tile(void) {
    rg_tile_config c = good_config();
    rg_tile_config_set(&c, 3, 0, 0);
    RG_TILE_LOADCONFIG(&c);
    int l = __LINE__; RG_TILE_LOADD(3, scratch, 64);
    return l;
}
static int bad_register(void) {
    rg_tile_config c = good_config();
    RG_TILE_LOADCONFIG(&c);
    int l = __LINE__; RG_TILE_ZERO(8);
    return l;
}
static int bad_same_tile(void) {
    rg_tile_config c = good_config();
    RG_TILE_LOADCONFIG(&c);
    int l = __LINE__; RG_TILE_DPBF16PS(1, 1, 2);
    return l;
}
static int bad_dp_colsb(void) {
    rg_tile_config c = good_config();
    rg_tile_config_set(&c, 0, 16, 62), rg_tile_config_set(&c, 2, 16, 62);
    RG_TILE_LOADCONFIG(&c);
    int l = __LINE__; RG_TILE_DPBF16PS(0, 1, 2);
    return l;
}
static int bad_dp_rows(void) {
    rg_tile_config c = good_config();
    rg_tile_config_set(&c, 0, 8, 64);
    RG_TILE_LOADCONFIG(&c);
    int l = __LINE__; RG_TILE_DPBF16PS(0, 1, 2);
    return l;
}
static int bad_dp_k(void) {
    rg_tile_config c = good_config();
    rg_tile_config_set(&c, 2, 8, 64);
    RG_TILE_LOADCONFIG(&c);
    int l = __LINE__; RG_TILE_DPBUSD(0, 1, 2);
    return l;
}
static int bad_dp_n(void) {
    rg_tile_config c = good_config();
    rg_tile_config_set(&c, 2, 16, 32);
    RG_TILE_LOADCONFIG(&c);
    int l = __LINE__; RG_TILE_DPBF16PS(0, 1, 2);
    return l;
}
static int bad_load_bounds(void) {
    rg_tile_config c = good_config();
    RG_TILE_LOADCONFIG(&c);
    RG_TILE_BOUNDS(scratch, 16 * 64);
    int l = __LINE__; RG_TILE_LOADD(1, scratch, 65);  // the last row ends 15 bytes past the buffer
    return l;
}
static int bad_store_bounds(void) {
    rg_tile_config c = good_config();
    RG_TILE_LOADCONFIG(&c);
    RG_TILE_BOUNDS(scratch, 16 * 64);
    int l = __LINE__; RG_TILE_STORED(1, scratch + 64, 64);
    return l;
}
static int bad_reconfig(void) {
    rg_tile_config c = good_config();
    RG_TILE_LOADCONFIG(&c);
    int l = __LINE__; RG_TILE_LOADCONFIG(&c);
    return l;
}
static int bad_release(void) {
    int l = __LINE__; RG_TILE_RELEASE();
    return l;
}
static int bad_not_released(void) {
    rg_tile_config c = good_config();
    RG_TILE_LOADCONFIG(&c);
    int l = __LINE__; RG_TILE_CHECK_RELEASED();
    return l;
}

typedef struct refusal {
    const char *what;
    rg_tile_rule rule;
    int (*run)(void);
} refusal;

static const refusal refusals[] = {
    {"palette 2", RG_TILE_RULE_PALETTE, bad_palette},
    {"a reserved byte set", RG_TILE_RULE_RESERVED, bad_reserved},
    {"tile 9 configured", RG_TILE_RULE_RESERVED, bad_tile_9},
    {"17 rows", RG_TILE_RULE_SHAPE, bad_rows},
    {"68 bytes a row", RG_TILE_RULE_SHAPE, bad_colsb},
    {"16 rows of 0 bytes", RG_TILE_RULE_SHAPE, bad_half_zero},
    {"a product with no configuration", RG_TILE_RULE_UNCONFIGURED, bad_unconfigured},
    {"a load into a tile of 0 rows", RG_TILE_RULE_TILE_UNUSED, bad_unused_tile},
    {"tmm8", RG_TILE_RULE_REGISTER, bad_register},
    {"one tile twice in TDPBF16PS", RG_TILE_RULE_DP_SAME, bad_same_tile},
    {"62 bytes a row in a product", RG_TILE_RULE_DP_COLSB, bad_dp_colsb},
    {"c of 8 rows, a of 16", RG_TILE_RULE_DP_ROWS, bad_dp_rows},
    {"a of 16 quads, b of 8 rows (TDPBUSD)", RG_TILE_RULE_DP_K, bad_dp_k},
    {"c of 64 bytes a row, b of 32", RG_TILE_RULE_DP_N, bad_dp_n},
    {"a load past its buffer", RG_TILE_RULE_BOUNDS, bad_load_bounds},
    {"a store past its buffer", RG_TILE_RULE_BOUNDS, bad_store_bounds},
    {"LDTILECFG twice", RG_TILE_RULE_RECONFIG, bad_reconfig},
    {"TILERELEASE with nothing held", RG_TILE_RULE_RELEASE, bad_release},
    {"a kernel returning with its configuration", RG_TILE_RULE_NOT_RELEASED, bad_not_released},
};

static void test_emulator_refusals(void) {
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        const refusal *r = &refusals[i];
        fault_log log = {0};
        rg_tile_set_fault_hook(record_fault, &log);
        const int line = r->run();
        if (rg_tile_emu_configured()) rg_tile_emu_release(__FILE__, __LINE__);
        rg_tile_set_fault_hook(NULL, NULL);
        RG_CHECK(log.count == 1, "%s: %d refusals, want 1", r->what, log.count);
        RG_CHECK(log.rule == r->rule, "%s: rule %s, want %s (%s)", r->what, rg_tile_rule_name(log.rule),
                 rg_tile_rule_name(r->rule), log.msg);
        RG_CHECK(strcmp(log.file, __FILE__) == 0 && log.line == line, "%s: reported at %s:%d, want %s:%d", r->what,
                 log.file, log.line, __FILE__, line);
    }
}

// Without a hook installed a refusal names the rule and the kernel's line on stderr and aborts
// (in a child process here).
static void test_emulator_default_hook_aborts(void) {
    int fds[2];
    RG_REQUIRE(pipe(fds) == 0, "pipe");
    fflush(stdout);
    const pid_t pid = fork();
    RG_REQUIRE(pid >= 0, "fork");
    int line = __LINE__ + 4;
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        RG_TILE_RELEASE();
        _exit(0);
    }
    close(fds[1]);
    char buf[512] = {0};
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    char where[64];
    snprintf(where, sizeof where, "test_gemm_tiles.c:%d", line);
    RG_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "the child was not aborted (status %d)", status);
    RG_CHECK(strstr(buf, where) && strstr(buf, "(release)"), "stderr says \"%s\", want %s and (release)", buf, where);
}

// A refused product leaves C as it was; a refused load leaves the tile as it was.
static void test_emulator_refusal_has_no_effect(void) {
    fault_log log = {0};
    rg_tile_set_fault_hook(record_fault, &log);
    rg_tile_config c = good_config();
    rg_tile_config_set(&c, 2, 16, 32);  // b narrower than c: TDPBF16PS refuses
    float in[16][16], out[16][16];
    uint16_t ones[16][32];
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 32; j++) ones[r][j] = 0x3F80;  // 1.0
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 16; j++) in[r][j] = (float)(r * 16 + j);
    RG_TILE_LOADCONFIG(&c);
    RG_TILE_LOADD(0, in, 64);
    RG_TILE_LOADD(1, ones, 64);
    RG_TILE_LOADD(2, ones, 64);
    RG_TILE_DPBF16PS(0, 1, 2);
    RG_TILE_BOUNDS(ones, sizeof ones);
    RG_TILE_LOADD(0, ones, 4096);  // refused: rows far past the buffer
    RG_TILE_STORED(0, out, 64);     // refused too (out is not declared): out stays as set below
    RG_TILE_BOUNDS(out, sizeof out);
    memset(out, 0xFF, sizeof out);
    RG_TILE_STORED(0, out, 64);
    RG_TILE_RELEASE();
    rg_tile_set_fault_hook(NULL, NULL);
    RG_CHECK(log.count == 3, "%d refusals, want 3 (the product, the load, the first store)", log.count);
    RG_CHECK(memcmp(in, out, sizeof in) == 0, "C changed after refused instructions: (0, 1) = %g, want %g", out[0][1],
             in[0][1]);
}

// TDPBUSD: c(m, n) += sum over k of the 4 products of a's u8 quad k and b's s8 quad (k, n), in
// 32 bits that wrap.
static void test_emulator_dpbusd(void) {
    uint8_t a[16][64];
    int8_t b[16][64];
    int32_t c[16][16], out[16][16];
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 64; j++) {
            a[r][j] = (uint8_t)(rg_rng_u64(5, 1, (uint64_t)(r * 64 + j)) >> 56);
            b[r][j] = (int8_t)(rg_rng_u64(5, 2, (uint64_t)(r * 64 + j)) >> 56);
        }
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 16; j++) c[r][j] = (r + j) % 3 == 0 ? INT32_MAX - 1000 : (r + j) % 3 == 1 ? INT32_MIN + 7 : r * j;
    rg_tile_config cfg = good_config();
    RG_TILE_LOADCONFIG(&cfg);
    RG_TILE_LOADD(0, c, 64);
    RG_TILE_LOADD(1, a, 64);
    RG_TILE_LOADD(2, b, 64);
    RG_TILE_DPBUSD(0, 1, 2);
    RG_TILE_STORED(0, out, 64);
    RG_TILE_RELEASE();
    int bad = 0, wrapped = 0;
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            int64_t s = c[m][n];
            for (int k = 0; k < 16; k++)
                for (int q = 0; q < 4; q++) s += (int64_t)a[m][4 * k + q] * b[k][4 * n + q];
            const int32_t want = (int32_t)(uint32_t)(uint64_t)s;
            wrapped += s > INT32_MAX || s < INT32_MIN;
            if (out[m][n] != want && bad++ < 5) RG_CHECK(0, "c(%d, %d) = %d, want %d", m, n, out[m][n], want);
        }
    RG_CHECK(wrapped > 0, "no sum wrapped: the case does not test the wrap");
}

// ---------------------------------------------------------------------------
// The driver: rg_gemm_run's BF16 road, the work buffer, refusals.

static void test_gemm_run_bf16(void) {
    const rg_tile_path path = rg_gemm_tiles_path();
    if (path == RG_TILES_NONE) RG_SKIP("no BF16 path (RG_TILES_EMULATE=0 in the environment): %s", rg_gemm_tiles_missing());
    const tcase tc = {37, 70, 200, true, A_ROWS, B_TYPED, RG_TYPE_BF16, true, 2, 0};
    fixture f;
    RG_REQUIRE(fixture_make(&f, &tc, 77), "fixture");
    const size_t c_bytes = sizeof(float) * (size_t)(f.c_per * tc.n_problems);
    float *want = malloc(c_bytes), *got = malloc(c_bytes);
    memcpy(want, f.c_init, c_bytes), memcpy(got, f.c_init, c_bytes);
    out_ctx ow = {&f, want}, og = {&f, got};
    rg_gemm_batch bw = batch_of(&f, &ow), bg = batch_of(&f, &og);
    rg_error err = {0};
    rg_threadpool *pool = NULL;
    RG_REQUIRE(rg_threadpool_create(&pool, 2, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(rg_gemm_tiles_ref(path, &bw, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(rg_gemm_work_size(RG_SGEMM_BF16, &bg, 2) == rg_gemm_tiles_work_size(&bg, 2), "work sizes differ");
    RG_CHECK(rg_gemm_run(pool, RG_SGEMM_BF16, &bg, NULL, 0, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(memcmp(want, got, c_bytes) == 0, "rg_gemm_run(RG_SGEMM_BF16) on %s differs from the reference",
             rg_tile_path_name(path));
    // A short work buffer is refused, naming the sizes.
    const size_t ws = rg_gemm_tiles_work_size(&bg, 2);
    void *work = aligned_alloc(64, (ws + 63) / 64 * 64);
    RG_CHECK(rg_gemm_tiles_run(pool, path, &bg, work, ws - 1, &err) == RG_ERR_ARG && strstr(err.msg, "work buffer"),
             "a short work buffer: %s", err.msg);
    RG_CHECK(rg_gemm_tiles_run(pool, path, &bg, work, ws, &err) == RG_OK, "%s", err.msg);
    free(work);
    rg_threadpool_free(pool);
    free(want), free(got);
    fixture_free(&f);
}

// A B packed once (rg_gemm_tiles_pack_b, 2 threads) and reused: the same bits as packing per call,
// for every case of the table, on 1 and 2 threads.
static void test_packed_b_reused(void) {
    rg_threadpool *pools[2] = {NULL, NULL};
    rg_error err = {0};
    RG_REQUIRE(rg_threadpool_create(&pools[1], 2, &err) == RG_OK, "pool: %s", err.msg);
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const tcase *tc = &cases[ci];
        fixture f;
        if (!fixture_make(&f, tc, 300 + ci)) {
            RG_CHECK(0, "case %zu: no fixture", ci);
            fixture_free(&f);
            continue;
        }
        const size_t c_bytes = sizeof(float) * (size_t)(f.c_per * tc->n_problems);
        float *want = malloc(c_bytes + 4), *got = malloc(c_bytes + 4);
        memcpy(want, f.c_init, c_bytes);
        out_ctx ow = {&f, want};
        rg_gemm_batch bw = batch_of(&f, &ow);
        RG_CHECK(rg_gemm_tiles_run(NULL, RG_TILES_EMULATED, &bw, NULL, 0, &err) == RG_OK, "case %zu: %s", ci, err.msg);
        const size_t pb = rg_gemm_tiles_packed_b_size(&bw);
        void *packed = pb ? aligned_alloc(64, (pb + 63) / 64 * 64) : NULL;
        if (pb) {
            RG_CHECK(rg_gemm_tiles_pack_b(pools[1], &bw, packed, pb - 1, &err) == RG_ERR_ARG, "case %zu: a short buffer", ci);
            RG_CHECK(rg_gemm_tiles_pack_b(pools[1], &bw, packed, pb, &err) == RG_OK, "case %zu: %s", ci, err.msg);
        }
        for (int th = 0; th < 2; th++) {
            memcpy(got, f.c_init, c_bytes);
            out_ctx og = {&f, got};
            rg_gemm_batch bg = batch_of(&f, &og);
            rg_status st = pb ? rg_gemm_tiles_run_packed(pools[th], RG_TILES_EMULATED, &bg, packed, NULL, 0, &err)
                              : rg_gemm_tiles_run(pools[th], RG_TILES_EMULATED, &bg, NULL, 0, &err);
            RG_CHECK(st == RG_OK, "case %zu, %d threads: %s", ci, th + 1, err.msg);
            RG_CHECK(memcmp(got, want, c_bytes) == 0, "case %zu (M=%lld N=%lld K=%lld %s), %d threads: a packed B gives "
                     "other bits than packing per call", ci, (long long)tc->M, (long long)tc->N, (long long)tc->K,
                     type_name(tc), th + 1);
        }
        free(packed), free(want), free(got);
        fixture_free(&f);
    }
    rg_threadpool_free(pools[1]);
}

static void test_paths_refused_where_absent(void) {
    const tcase tc = {4, 4, 4, false, A_ROWS, B_ROWS, 0, false, 1, 0};
    fixture f;
    fixture_make(&f, &tc, 1);
    float c[64];
    out_ctx o = {&f, c};
    rg_gemm_batch bt = batch_of(&f, &o);
    rg_error err = {0};
    RG_CHECK(rg_gemm_tiles_run(NULL, RG_TILES_NONE, &bt, NULL, 0, &err) == RG_ERR_UNSUPPORTED, "NONE ran");
    if (!rg_cpu_has_amx_bf16())
        RG_CHECK(rg_gemm_tiles_run(NULL, RG_TILES_AMX, &bt, NULL, 0, &err) == RG_ERR_UNSUPPORTED && strstr(err.msg, "amx"),
                 "AMX without the CPU's AMX: %s", err.msg);
    if (!rg_cpu_has_avx512_bf16())
        RG_CHECK(rg_gemm_tiles_run(NULL, RG_TILES_AVX512, &bt, NULL, 0, &err) == RG_ERR_UNSUPPORTED,
                 "AVX512 without the CPU's AVX512_BF16: %s", err.msg);
    // Q4_K rows must be whole blocks of 256.
    rg_gemm_batch bq = bt;
    bq.b_type = RG_TYPE_Q4_K, bq.b_rows_along_k = true;
    RG_CHECK(rg_gemm_tiles_run(NULL, RG_TILES_EMULATED, &bq, NULL, 0, &err) == RG_ERR_ARG && strstr(err.msg, "blocks"),
             "Q4_K rows of 4: %s", err.msg);
    fixture_free(&f);
}

static const rg_test_case tests[] = {
    RG_TEST(test_emulated_kernel_matches_reference),
    RG_TEST(test_amx_kernel_matches_reference),
    RG_TEST(test_avx512_kernel_matches_reference),
    RG_TEST(test_reference_within_bound_of_double),
    RG_TEST(test_reference_orders_by_hand),
    RG_TEST(test_emulator_refusals),
    RG_TEST(test_emulator_default_hook_aborts),
    RG_TEST(test_emulator_refusal_has_no_effect),
    RG_TEST(test_emulator_dpbusd),
    RG_TEST(test_gemm_run_bf16),
    RG_TEST(test_packed_b_reused),
    RG_TEST(test_paths_refused_where_absent),
    {0},
};

int main(int argc, char **argv) {
    setenv("RG_TILES_EMULATE", "1", 0);  // rg_gemm_run's BF16 road runs here too, unless told otherwise
    return rg_test_run(argc, argv, tests);
}
