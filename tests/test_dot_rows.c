// test_dot_rows.c - the multi-row dot kernels (src/cpu/dot_rows*.c) against the
// type table's scalar reference dot, row by row:
//   - every type with a kernel, row counts 1..19 (short last groups of 4 and 8),
//     K = 32 .. 16416 (the K-quants: multiples of 256, and 131328 with rows
//     1..5), random weights quantized by our quantizer, activations
//     in the type's vec_dot_type as our quantizer writes them;
//   - |kernel - reference| <= 2e-6 * sum |w_i x_i| (the sums differ only in
//     the order of the f32 additions; the bound is relative to the magnitude of
//     the terms, computed in double from the dequantized operands);
//   - a row's result does not depend on which group it falls in (rows 0..n
//     computed with nr = n and with nr = 1 each: identical bits);
//   - a weight stride larger than a row is honoured;
//   - the two- and three-column kernels give each column the one-column kernel's bits, and so do the
//     pair kernels on unpacked rows (Q4_0, Q5_0, Q4_K, Q6_K: rg_cpu_unpack_rows).
#include "base/cpu.h"
#include "cpu/dot_rows.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

#include "rg_test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg = 88172645463325252ull;
static float frand(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((lcg >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

// fn2, when not NULL, must give fn's bits on every input (the AVX-512 kernels against the AVX2 ones).
static void check_kernel(uint32_t type, rg_dot_rows_fn fn, rg_dot_rows_fn fn2) {
    const rg_quant_ops *q = rg_quant_get(type), *qa = rg_quant_get(q->vec_dot_type);
    const rg_type_traits *tt = rg_type_get(type), *ta = rg_type_get(q->vec_dot_type);
    // 16416 = 513 blocks: longer than the Q8_0 kernel's table of activation scales.
    // 131328 = 513 K-quant blocks: past the K-quant kernels' activation tables.
    static const int64_t Ks[] = {32, 256, 576, 1536, 4096, 16416, 131328};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        const int64_t K = Ks[ki], max_rows = K > 16416 ? 5 : 19;
        if (K % tt->block_size || (K > 16416 && tt->block_size != 256)) continue;
        const size_t row_bytes = (size_t)(K / tt->block_size) * tt->type_size, stride = row_bytes + 64;
        const size_t act_bytes = (size_t)(K / ta->block_size) * ta->type_size;
        uint8_t *w = calloc((size_t)max_rows, stride), *x = calloc(1, act_bytes);
        float *wf = malloc(sizeof(float) * (size_t)K), *xf = malloc(sizeof(float) * (size_t)K);
        float *xd = malloc(sizeof(float) * (size_t)K), *wd = malloc(sizeof(float) * (size_t)K);
        float y[32], y1[32];
        for (int64_t r = 0; r < max_rows; r++) {
            for (int64_t i = 0; i < K; i++) wf[i] = frand() * (r % 3 == 0 ? 4.0f : 0.5f);
            if (q->quantize) q->quantize(wf, w + (size_t)r * stride, K, NULL);
            else memcpy(w + (size_t)r * stride, wf, sizeof(float) * (size_t)K);  // F32
        }
        for (int64_t i = 0; i < K; i++) xf[i] = frand() * 2.0f;
        if (qa->quantize) qa->quantize(xf, x, K, NULL);
        else memcpy(x, xf, sizeof(float) * (size_t)K);
        if (qa->dequant) qa->dequant(x, xd, K);
        else if (q->vec_dot_type == RG_TYPE_Q8_1)  // blocks of {f16 d, f16 s, int8 q[32]}: value d * q
            for (int64_t b = 0; b < K / 32; b++) {
                const uint8_t *blk = x + (size_t)b * ta->type_size;
                float d = rg_fp16_to_fp32((uint16_t)(blk[0] | blk[1] << 8));
                for (int i = 0; i < 32; i++) xd[b * 32 + i] = d * (float)(int8_t)blk[4 + i];
            }
        else memcpy(xd, x, sizeof(float) * (size_t)K);
        for (int64_t nr = 1; nr <= max_rows; nr++) {
            fn(K, nr, w, stride, x, y);
            if (fn2) {
                float y2[32];
                fn2(K, nr, w, stride, x, y2);
                RG_CHECK(memcmp(y, y2, sizeof(float) * (size_t)nr) == 0, "%s K=%lld nr=%lld: the two kernels' bits differ",
                         tt->name, (long long)K, (long long)nr);
            }
            for (int64_t r = 0; r < nr; r++) {
                float ref = 0;
                (q->vec_dot_ref ? q->vec_dot_ref : q->vec_dot)(K, &ref, w + (size_t)r * stride, x);
                if (q->dequant) q->dequant(w + (size_t)r * stride, wd, K);
                else memcpy(wd, w + (size_t)r * stride, sizeof(float) * (size_t)K);
                double mag = 0;
                for (int64_t i = 0; i < K; i++) mag += fabs((double)wd[i] * xd[i]);
                RG_CHECK(fabs((double)y[r] - ref) <= 2e-6 * mag + 1e-30, "%s K=%lld nr=%lld row %lld: %.9g, reference %.9g (terms %.3g)",
                         tt->name, (long long)K, (long long)nr, (long long)r, (double)y[r], (double)ref, mag);
                fn(K, 1, w + (size_t)r * stride, stride, x, y1 + r);
                RG_CHECK(memcmp(&y[r], &y1[r], sizeof(float)) == 0, "%s K=%lld row %lld: %.9g in a group of %lld, %.9g alone",
                         tt->name, (long long)K, (long long)r, (double)y[r], (long long)nr, (double)y1[r]);
            }
        }
        free(w), free(x), free(wf), free(xf), free(xd), free(wd);
    }
}

static void check_type(uint32_t type) {
    rg_dot_rows_fn fn = rg_cpu_dot_rows(type);
    if (fn) check_kernel(type, fn, NULL);  // else no kernel on this CPU for this type: the table's vec_dot serves
}

static void test_dot_rows_against_reference(void) {
    static const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16, RG_TYPE_Q4_0, RG_TYPE_Q4_1,
                                     RG_TYPE_Q5_0, RG_TYPE_Q8_0, RG_TYPE_Q4_K, RG_TYPE_Q6_K};
    int n_kernels = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        n_kernels += rg_cpu_dot_rows(types[i]) != NULL;
        check_type(types[i]);
    }
    if (n_kernels == 0) RG_SKIP("no dot-rows kernel on this CPU (no AVX2): the table's vec_dot serves every type");
    printf("    %d types with a multi-row kernel checked\n", n_kernels);
}

// On an AVX-512 VNNI CPU the dispatcher picks dot_rows_avx512.c's Q4_0 and Q5_0 kernels; the
// AVX2 ones must still hold (other CPUs run them), and the two must agree bit for bit.
static void test_dot_rows_avx512_matches_avx2(void) {
    if (!rg_dot_rows_avx512_built || !rg_cpu_has_avx512_vnni())
        RG_SKIP("no AVX-512 VNNI kernels here (not built, not on this CPU, or RG_NO_AVX512 set)");
    RG_CHECK(rg_cpu_dot_rows(RG_TYPE_Q4_0) == rg_dot_rows_q4_0_avx512, "Q4_0 does not dispatch to the AVX-512 kernel");
    RG_CHECK(rg_cpu_dot_rows(RG_TYPE_Q5_0) == rg_dot_rows_q5_0_avx512, "Q5_0 does not dispatch to the AVX-512 kernel");
    check_kernel(RG_TYPE_Q4_0, rg_dot_rows_q4_0_avx2, rg_dot_rows_q4_0_avx512);
    check_kernel(RG_TYPE_Q5_0, rg_dot_rows_q5_0_avx2, rg_dot_rows_q5_0_avx512);
}

// The two- and three-column kernels (rg_cpu_dot_rows2/3, where a type has them on this CPU): each column the bits of
// the one-column kernel for that activation row alone, at every K above (Q8_0 past its table of scales included),
// row counts 1, 5 and 19.
static void test_dot_rows_columns(void) {
    static const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16, RG_TYPE_Q4_0, RG_TYPE_Q4_1,
                                     RG_TYPE_Q5_0, RG_TYPE_Q8_0, RG_TYPE_Q4_K, RG_TYPE_Q6_K};
    static const int64_t Ks[] = {32, 96, 576, 1536, 4608, 16416, 131328};
    static const int64_t nrs[] = {1, 5, 19};
    int n_kernels = 0, n_quads = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        rg_dot_rows_fn one = rg_cpu_dot_rows(type);
        rg_dot_rows2_fn two = rg_cpu_dot_rows2(type);
        rg_dot_rows3_fn three = rg_cpu_dot_rows3(type);
        rg_dot_rows2_fn upair;
        const bool unpacks = rg_cpu_unpack_rows(type, 256, &upair) != NULL;
        if (!one || (!two && !three && !unpacks)) continue;
        n_kernels += (two != NULL) + (three != NULL) + unpacks;
        const rg_quant_ops *q = rg_quant_get(type), *qa = rg_quant_get(q->vec_dot_type);
        const rg_type_traits *tt = rg_type_get(type), *ta = rg_type_get(q->vec_dot_type);
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
            const int64_t K = Ks[ki];
            if (K % tt->block_size || (K > 16416 && tt->block_size != 256)) continue;
            // (none at 131328 for the K-quants: past their kernels' limit of blocks, which take vec_dot)
            rg_unpack_rows_fn unpack = rg_cpu_unpack_rows(type, K, &upair);
            const size_t row_bytes = (size_t)(K / tt->block_size) * tt->type_size;
            const size_t act_bytes = (size_t)(K / ta->block_size) * ta->type_size;
            uint8_t *w = calloc(19, row_bytes), *x[3];
            float *f = malloc(sizeof(float) * (size_t)K);
            for (int64_t r = 0; r < 19; r++) {
                for (int64_t i = 0; i < K; i++) f[i] = frand() * (r % 3 == 0 ? 4.0f : 0.5f);
                if (q->quantize) q->quantize(f, w + (size_t)r * row_bytes, K, NULL);
                else memcpy(w + (size_t)r * row_bytes, f, sizeof(float) * (size_t)K);
            }
            for (int c = 0; c < 3; c++) {
                x[c] = calloc(1, act_bytes);
                for (int64_t i = 0; i < K; i++) f[i] = frand() * (1.0f + (float)c);
                if (qa->quantize) qa->quantize(f, x[c], K, NULL);
                else memcpy(x[c], f, sizeof(float) * (size_t)K);
            }
            for (size_t ni = 0; ni < sizeof nrs / sizeof nrs[0]; ni++) {
                const int64_t nr = nrs[ni];
                float ref[3][19], got[3][19];
                for (int c = 0; c < 3; c++) one(K, nr, w, row_bytes, x[c], ref[c]);
                if (two) {
                    two(K, nr, w, row_bytes, x[0], x[1], got[0], got[1]);
                    RG_CHECK(!memcmp(ref[0], got[0], sizeof(float) * (size_t)nr) &&
                                 !memcmp(ref[1], got[1], sizeof(float) * (size_t)nr),
                             "%s K=%lld nr=%lld: the two-column kernel's bits differ from one column's", tt->name,
                             (long long)K, (long long)nr);
                }
                if (unpack) {  // the rows unpacked, then two columns over them
                    const size_t urow = rg_unpacked_row_bytes(type, K);
                    uint8_t *u = aligned_alloc(64, (urow * (size_t)nr + 63) / 64 * 64);
                    unpack(K, nr, w, row_bytes, u);
                    upair(K, nr, u, urow, x[1], x[2], got[1], got[2]);
                    RG_CHECK(!memcmp(ref[1], got[1], sizeof(float) * (size_t)nr) &&
                                 !memcmp(ref[2], got[2], sizeof(float) * (size_t)nr),
                             "%s K=%lld nr=%lld: the unpacked rows' pair kernel's bits differ from one column's",
                             tt->name, (long long)K, (long long)nr);
                    rg_dot_rows4_fn quad = rg_cpu_unpacked_rows4(type);
                    if (quad) {  // four columns a pass: x[2], x[0], x[1], x[2] (a column twice in one pass too)
                        float got4[4][19];
                        const void *const xs[4] = {x[2], x[0], x[1], x[2]};
                        float *const ys[4] = {got4[0], got4[1], got4[2], got4[3]};
                        quad(K, nr, u, urow, xs, ys);
                        const int want[4] = {2, 0, 1, 2};
                        for (int c = 0; c < 4; c++)
                            RG_CHECK(!memcmp(ref[want[c]], got4[c], sizeof(float) * (size_t)nr),
                                     "%s K=%lld nr=%lld column %d: the unpacked rows' four-column kernel's bits differ "
                                     "from one column's", tt->name, (long long)K, (long long)nr, c);
                        n_quads++;
                    }
                    free(u);
                }
                if (three) {
                    const void *const xs[3] = {x[0], x[1], x[2]};
                    float *const ys[3] = {got[0], got[1], got[2]};
                    three(K, nr, w, row_bytes, xs, ys);
                    for (int c = 0; c < 3; c++)
                        RG_CHECK(!memcmp(ref[c], got[c], sizeof(float) * (size_t)nr),
                                 "%s K=%lld nr=%lld column %d: the three-column kernel's bits differ from one column's",
                                 tt->name, (long long)K, (long long)nr, c);
                }
            }
            for (int c = 0; c < 3; c++) free(x[c]);
            free(w), free(f);
        }
    }
    if (n_kernels == 0) RG_SKIP("no multi-column kernel on this CPU (no AVX2)");
    printf("    %d multi-column kernels checked against one column (%d shapes of four columns over unpacked rows)\n",
           n_kernels, n_quads);
}

static const rg_test_case cases[] = {
    RG_TEST(test_dot_rows_against_reference),
    RG_TEST(test_dot_rows_avx512_matches_avx2),
    RG_TEST(test_dot_rows_columns),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
