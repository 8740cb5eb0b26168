// bench_dot_rows.c - the kernel lab of a decode batch's weight rows (dot_rows.h), one core: N columns (the
// sequences a server decodes together) against a whole weight matrix, tile by tile as ops_matmul.c runs them
// (VEC_TILE = 16 rows), two ways in the same run:
//   "pairs"     each pair of columns a pass over the packed rows (rg_cpu_dot_rows2: every pass unpacks again);
//   "unpacked"  each tile unpacked once (rg_cpu_unpack_rows), then every four columns (rg_cpu_unpacked_rows4,
//               Q4_K and Q6_K) or pair a pass over the unpacked rows.
// Both give every column the bits of one column alone (test_dot_rows checks that; here the outputs are
// compared too). Shapes of the models a server runs: SmolLM2-135M (576 x 1536, 1536 x 576) and the LFM2-350M
// shape (1024 x 4608, 4608 x 1024); types Q4_0, Q5_0 (what SmolLM2's Q4_K_M file holds where rows are not
// whole 256-blocks), Q4_K, Q6_K. Rounds interleaved; the median ns per weight row and column and the range of
// the ratio pairs / unpacked over rounds.
//
//   ./build/bench_dot_rows            RG_BENCH_REPS=7 (rounds, default 5)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "bench_util.h"
#include "cpu/cpu_ops.h"
#include "cpu/dot_rows.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "retrograd.h"
#include "tensor/quant/quant.h"

enum { TILE = 16, MAX_N = 16, MAX_ROUNDS = 15 };

typedef struct lab {
    uint32_t type;
    int64_t K, M, N;
    const uint8_t *w;
    size_t row;
    const void *x[MAX_N];
    float *y[MAX_N];
    uint8_t *u;  // one tile unpacked
    rg_dot_rows2_fn pair, upair;
    rg_dot_rows4_fn uquad;  // four columns a pass over unpacked rows, or NULL
    rg_unpack_rows_fn unpack;
} lab;

static void run_pairs(void *p) {
    const lab *l = p;
    for (int64_t m0 = 0; m0 < l->M; m0 += TILE) {
        const int64_t nr = l->M - m0 < TILE ? l->M - m0 : TILE;
        for (int64_t n = 0; n + 2 <= l->N; n += 2)
            l->pair(l->K, nr, l->w + m0 * l->row, l->row, l->x[n], l->x[n + 1], l->y[n] + m0, l->y[n + 1] + m0);
    }
}

static void run_unpacked(void *p) {
    const lab *l = p;
    const size_t urow = rg_unpacked_row_bytes(l->type, l->K);
    for (int64_t m0 = 0; m0 < l->M; m0 += TILE) {
        const int64_t nr = l->M - m0 < TILE ? l->M - m0 : TILE;
        l->unpack(l->K, nr, l->w + m0 * l->row, l->row, l->u);
        int64_t n = 0;
        for (; l->uquad && n + 4 <= l->N; n += 4) {
            float *const ys[4] = {l->y[n] + m0, l->y[n + 1] + m0, l->y[n + 2] + m0, l->y[n + 3] + m0};
            l->uquad(l->K, nr, l->u, urow, &l->x[n], ys);
        }
        for (; n + 2 <= l->N; n += 2)
            l->upair(l->K, nr, l->u, urow, l->x[n], l->x[n + 1], l->y[n] + m0, l->y[n + 1] + m0);
    }
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench_shape(uint32_t type, int64_t K, int64_t M, int rounds) {
    lab l = {.type = type, .K = K, .M = M};
    l.unpack = rg_cpu_unpack_rows(type, K, &l.upair);
    l.pair = rg_cpu_dot_rows2(type);
    l.uquad = rg_cpu_unpacked_rows4(type);
    if (!l.unpack || !l.pair) {
        printf("%-5s %5lld x %-5lld  no unpacked kernel on this CPU\n", rg_type_get(type)->name, (long long)K,
               (long long)M);
        return;
    }
    const rg_quant_ops *q = rg_quant_get(type), *qa = rg_quant_get(q->vec_dot_type);
    l.row = rg_type_row_size(type, K);
    uint8_t *w = malloc(l.row * (size_t)M);
    float *f = malloc(sizeof(float) * (size_t)K);
    for (int64_t r = 0; r < M; r++) {
        for (int64_t i = 0; i < K; i++) f[i] = rg_rng_normal(7, (uint64_t)r, (uint64_t)i);
        q->quantize(f, w + (size_t)r * l.row, K, NULL);
    }
    l.w = w;
    for (int n = 0; n < MAX_N; n++) {
        void *x = malloc(rg_type_row_size(q->vec_dot_type, K));
        for (int64_t i = 0; i < K; i++) f[i] = rg_rng_normal(8, (uint64_t)n, (uint64_t)i);
        qa->quantize(f, x, K, NULL);
        l.x[n] = x;
        l.y[n] = malloc(sizeof(float) * (size_t)M * 2);
    }
    l.u = aligned_alloc(64, (rg_unpacked_row_bytes(type, K) * TILE + 63) / 64 * 64);
    static const int64_t Ns[] = {4, 8, 16};
    for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
        l.N = Ns[ni];
        double tp[MAX_ROUNDS], tu[MAX_ROUNDS], ratio[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {  // interleaved: the VM's speed drifts
            tp[r] = bench_best(run_pairs, &l, 3, 3);
            tu[r] = bench_best(run_unpacked, &l, 3, 3);
            ratio[r] = tp[r] / tu[r];
        }
        // the same bits both ways
        float *keep = malloc(sizeof(float) * (size_t)M);
        run_pairs(&l);
        memcpy(keep, l.y[l.N - 1], sizeof(float) * (size_t)M);
        run_unpacked(&l);
        const int same = !memcmp(keep, l.y[l.N - 1], sizeof(float) * (size_t)M);
        free(keep);
        qsort(tp, (size_t)rounds, sizeof(double), cmp_double);
        qsort(tu, (size_t)rounds, sizeof(double), cmp_double);
        qsort(ratio, (size_t)rounds, sizeof(double), cmp_double);
        const double per = 1e9 / ((double)M * (double)l.N);
        printf("%-5s %5lld x %-5lld N=%-2lld  pairs %6.2f ns  unpacked %6.2f ns  (per row x column)  "
               "pairs/unpacked %.2fx [%.2f-%.2f]%s\n",
               rg_type_get(type)->name, (long long)K, (long long)M, (long long)l.N, tp[rounds / 2] * per,
               tu[rounds / 2] * per, ratio[rounds / 2], ratio[0], ratio[rounds - 1], same ? "" : "  BITS DIFFER");
    }
    for (int n = 0; n < MAX_N; n++) free((void *)l.x[n]), free(l.y[n]);
    free(w), free(f), free(l.u);
}

// A whole MUL_MAT of N columns on one core, two ways: marked RG_MUL_MAT_COLUMNS (the dot products, tiles unpacked
// where the type has it: an exact decode batch) and unmarked without int8 activations (the SGEMM on F32
// activations with the weights dequantized into its panels: what a prompt took on an AVX2 CPU before
// rg_unpack_prompt_max_n, and what it takes past it).
typedef struct mm_lab {
    rg_node w, x, y;
    rg_exec_ctx ctx;
} mm_lab;

static void run_mul_mat(void *p) {
    mm_lab *l = p;
    rg_error err = {0};
    if (cpu_mul_mat(&l->ctx, &l->y, &err) != RG_OK) {
        fprintf(stderr, "bench_dot_rows: mul_mat: %s\n", err.msg);
        exit(1);
    }
}

static void bench_mul_mat(uint32_t type, int64_t K, int64_t M, int rounds) {
    static const int64_t Ns[] = {8, 16, 32, 48, 64, 96, 128, 192};
    const rg_quant_ops *q = rg_quant_get(type);
    const size_t row = rg_type_row_size(type, K);
    uint8_t *w = malloc(row * (size_t)M);
    float *x = malloc(sizeof(float) * (size_t)(K * 192)), *y = malloc(sizeof(float) * (size_t)(M * 192));
    for (int64_t r = 0; r < M; r++) {
        float f[8192];
        for (int64_t i = 0; i < K; i++) f[i] = rg_rng_normal(9, (uint64_t)r, (uint64_t)i);
        q->quantize(f, w + (size_t)r * row, K, NULL);
    }
    for (int64_t i = 0; i < K * 192; i++) x[i] = rg_rng_normal(10, 0, (uint64_t)i);
    for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
        const int64_t N = Ns[ni];
        mm_lab a, b;
        for (int k = 0; k < 2; k++) {
            mm_lab *l = k ? &b : &a;
            memset(l, 0, sizeof *l);
            l->w.t = (rg_tensor){.type = type, .ne = {K, M, 1, 1}, .nb = {rg_type_get(type)->type_size, row, row * M, row * M},
                                 .data = w};
            l->x.t = (rg_tensor){.type = RG_TYPE_F32, .ne = {K, N, 1, 1}, .nb = {4, 4 * K, 4 * K * N, 4 * K * N}, .data = x};
            l->y.t = (rg_tensor){.type = RG_TYPE_F32, .ne = {M, N, 1, 1}, .nb = {4, 4 * M, 4 * M * N, 4 * M * N}, .data = y};
            l->y.op = RG_OP_MUL_MAT, l->y.src[0] = &l->w, l->y.src[1] = &l->x;
            l->y.ip[0] = k ? 0 : RG_MUL_MAT_COLUMNS;
            const size_t ws = cpu_mul_mat_work(&l->y, 1);
            l->ctx = (rg_exec_ctx){.pool = NULL, .scratch = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL,
                                   .scratch_size = ws, .int8_activations = k == 0};
        }
        double ta[MAX_ROUNDS], tb[MAX_ROUNDS], ratio[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            ta[r] = bench_best(run_mul_mat, &a, 2, 3);
            tb[r] = bench_best(run_mul_mat, &b, 2, 3);
            ratio[r] = tb[r] / ta[r];
        }
        qsort(ta, (size_t)rounds, sizeof(double), cmp_double);
        qsort(tb, (size_t)rounds, sizeof(double), cmp_double);
        qsort(ratio, (size_t)rounds, sizeof(double), cmp_double);
        const double per = 1e9 / ((double)M * (double)N);
        printf("%-5s %5lld x %-5lld N=%-2lld  dot products %6.2f ns  SGEMM %6.2f ns  (per row x column)  "
               "SGEMM/dots %.2fx [%.2f-%.2f]\n",
               rg_type_get(type)->name, (long long)K, (long long)M, (long long)N, ta[rounds / 2] * per,
               tb[rounds / 2] * per, ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
        free(a.ctx.scratch), free(b.ctx.scratch);
    }
    free(w), free(x), free(y);
}

int main(void) {
    const char *e = getenv("RG_BENCH_REPS");
    int rounds = e ? atoi(e) : 5;
    if (rounds < 1) rounds = 1;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    printf("bench_dot_rows: one core, %d interleaved rounds; ns per weight row and column, medians\n", rounds);
    static const struct {
        uint32_t type;
        int64_t K, M;
    } shapes[] = {
        {RG_TYPE_Q5_0, 576, 1536}, {RG_TYPE_Q4_0, 576, 1536}, {RG_TYPE_Q4_K, 1536, 576}, {RG_TYPE_Q6_K, 1536, 576},
        {RG_TYPE_Q4_K, 1024, 4608}, {RG_TYPE_Q4_K, 4608, 1024}, {RG_TYPE_Q6_K, 1024, 4608}, {RG_TYPE_Q6_K, 4608, 1024},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        bench_shape(shapes[i].type, shapes[i].K, shapes[i].M, rounds);
    if (getenv("RG_BENCH_MUL_MAT")) {
        printf("\nMUL_MAT of N columns, one core: the dot products (as an exact batch) against the SGEMM\n");
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            bench_mul_mat(shapes[i].type, shapes[i].K, shapes[i].M, rounds);
    }
    return 0;
}
