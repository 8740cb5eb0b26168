// test_cuda_quant_mm.c - MUL_MAT and OUT_PROD with quantized weights on the CUDA device
// (src/cuda/ops_quant_mm.cu), through the executor, against a double reference computed from
// the CPU's dequantized weights (rg_quant_get(type)->dequant). Cases that need a device skip
// without one; run them on the CPU through the host execution of the CUDA code with
// RETRO_CUDA_HOST=1. Each case runs under RETRO_CUDA_HALF_GEMM=f32 and tensor.
//
// The paths (ops_quant_mm.cu): N <= 8 columns (MUL_MAT's x.ne1, OUT_PROD's b.ne0) and an
// OUT_PROD b with no unit stride take the in-place decoder in both modes; wider products the
// sliced decode + cuBLAS. Tolerances, per output element, S = sum |w x| over its K terms,
// gamma(n) = n u / (1 - n u), u = 2^-24:
//   in place, and sliced under f32   |gpu - ref| <= gamma(K + 40) S: F32 products and sums of
//                                    the CPU's dequantized values, in another order (the
//                                    butterfly's 5 levels and cuBLAS's blocking inside K + 40).
//   sliced under tensor              the weight decoded to BF16 and the activations rounded to
//                                    BF16 (RNE): against the double sum of those rounded
//                                    operands, gamma(K + 40) S' (S' the same sum of the rounded
//                                    products), so a truncation instead of RNE fails; and
//                                    against the unrounded reference (2 2^-8 + 2^-16) S +
//                                    gamma(K + 40) S (1 + 2^-7), the BF16 bound.
//   in place against sliced          the two within the sum of their bounds.
// THE BUDGET TEST: the same outputs, bit for bit (memcmp), under RETRO_CUDA_DEQUANT_BUDGET_MB
// 0, 1 and 64 and unset, for MUL_MAT and OUT_PROD with weights that 1 MiB slices (MUL_MAT's
// rows, OUT_PROD's block columns, M not a multiple of the slice), and the device plan's scratch
// (what the train memory report prints as scratch) smaller under 1 MiB than under 0.
// Then the backward of a frozen quantized weight (dX = out_prod(W, dY^T), built by
// rg_graph_backward) on the device, and the budget variable's parsing.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

static char why[256];

static int have_gpu(void) { return rg_cuda_device_count(why, sizeof why) > 0; }

// The types of the list; each must be decoded on the device.
static const uint32_t required_types[] = {RG_TYPE_Q4_0,  RG_TYPE_Q4_1,    RG_TYPE_Q5_0,   RG_TYPE_Q8_0,
                                          RG_TYPE_Q2_K,  RG_TYPE_Q4_K,    RG_TYPE_Q6_K,   RG_TYPE_IQ2_XXS,
                                          RG_TYPE_IQ4_XS, RG_TYPE_MXFP4};
// Every other storage type the CPU dequantizes: checked where the device decodes it.
static const uint32_t other_types[] = {RG_TYPE_Q5_1,  RG_TYPE_Q3_K,  RG_TYPE_Q5_K,  RG_TYPE_IQ1_S,  RG_TYPE_IQ1_M,
                                       RG_TYPE_IQ2_XS, RG_TYPE_IQ2_S, RG_TYPE_IQ3_XXS, RG_TYPE_IQ3_S, RG_TYPE_IQ4_NL,
                                       RG_TYPE_TQ1_0, RG_TYPE_TQ2_0, RG_TYPE_NVFP4, RG_TYPE_Q1_0,  RG_TYPE_Q2_0};

static const char *type_name(uint32_t t) { return rg_type_get(t)->name; }
static double gamma_n(double n) { return n * 0x1p-24 / (1 - n * 0x1p-24); }
static double bf16_of(float v) { return rg_bf16_to_fp32(rg_fp32_to_bf16(v)); }
// RG_TEST_QUICK (the sanitizer runs): fewer types per case.
static size_t quick_count(size_t n) { return getenv("RG_TEST_QUICK") ? 1 : n; }

// ---------------------------------------------------------------------------
// Inputs

// `rows` rows of ne0 elements of `type`: normal values quantized by the type's quantizer, or
// for the types that need an importance matrix random blocks that decode to finite values of
// a sane size; *deq gets the CPU's dequantized values.
static uint8_t *quantized_rows(uint32_t type, int64_t ne0, int64_t rows, uint64_t seed, float **deq) {
    const rg_type_traits *tt = rg_type_get(type);
    const rg_quant_ops *ops = rg_quant_get(type);
    const size_t row_bytes = rg_type_row_size(type, ne0);
    uint8_t *q = malloc(row_bytes * (size_t)rows);
    float *f = malloc(sizeof(float) * (size_t)(ne0 * rows));
    if (ops->quantize && !ops->quantize_needs_imatrix) {
        for (int64_t i = 0; i < ne0 * rows; i++) f[i] = 0.5f * rg_rng_normal(seed, 1, (uint64_t)i);
        rg_error err = {0};
        if (rg_quantize(type, f, q, rows, ne0, NULL, "w", &err)) memset(q, 0, row_bytes * (size_t)rows);
    } else {
        const int64_t nb = ne0 / tt->block_size * rows;
        float *tmp = malloc(sizeof(float) * (size_t)tt->block_size);
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = q + b * (int64_t)tt->type_size;
            bool ok = false;
            for (uint64_t att = 0; att < 100000 && !ok; att++) {
                for (size_t j = 0; j < tt->type_size; j++)
                    blk[j] = (uint8_t)rg_rng_u64(seed, 2, ((uint64_t)b << 32) + att * 4096 + j);
                ops->dequant(blk, tmp, tt->block_size);
                double mx = 0;
                ok = true;
                for (int64_t i = 0; i < tt->block_size; i++) {
                    if (!isfinite(tmp[i])) ok = false;
                    else if (fabs(tmp[i]) > mx) mx = fabs(tmp[i]);
                }
                ok = ok && mx > 1e-3 && mx < 4.0;
            }
            if (!ok) memset(blk, 0, tt->type_size);
        }
        free(tmp);
    }
    for (int64_t r = 0; r < rows; r++) ops->dequant(q + r * (int64_t)row_bytes, f + r * ne0, ne0);
    *deq = f;
    return q;
}

static float *randn(int64_t n, uint64_t stream) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = rg_rng_normal(21, stream, (uint64_t)i);
    return p;
}

// A quantized weight [ne0, ne1, b2, b3] as a view of a leaf with `pad_blocks` more blocks per
// row and every `row_step`-th row: its values at deq[full_row * full_ne0 + k].
typedef struct qweight {
    uint8_t *bytes;
    float *deq;
    int64_t full_ne0;
    size_t full_row_bytes;
    size_t nb[4];  // the view's strides
    rg_node *node;
} qweight;

static qweight qweight_make(rg_graph *g, uint32_t type, const int64_t ne[4], int pad_blocks, int row_step,
                            uint64_t seed) {
    qweight w;
    const int64_t bs = rg_type_get(type)->block_size;
    w.full_ne0 = ne[0] + pad_blocks * bs;
    const int64_t full_ne[4] = {w.full_ne0, ne[1] * row_step, ne[2], ne[3]};
    w.bytes = quantized_rows(type, w.full_ne0, full_ne[1] * ne[2] * ne[3], seed, &w.deq);
    w.full_row_bytes = rg_type_row_size(type, w.full_ne0);
    rg_node *leaf = rg_leaf(g, "w", type, 4, full_ne, w.bytes);
    if (!pad_blocks && row_step == 1) {
        w.node = leaf;
    } else {
        const size_t nb[4] = {rg_type_get(type)->type_size, w.full_row_bytes * (size_t)row_step,
                              w.full_row_bytes * (size_t)full_ne[1], w.full_row_bytes * (size_t)(full_ne[1] * ne[2])};
        w.node = rg_view(g, leaf, 4, ne, nb, 0);
    }
    memcpy(w.nb, w.node->t.nb, sizeof w.nb);
    return w;
}

// Element (k, m, i2, i3) of the weight's view, as the CPU dequantizes it.
static double qweight_at(const qweight *w, int64_t k, int64_t m, int64_t i2, int64_t i3) {
    const size_t off = (size_t)m * w->nb[1] + (size_t)i2 * w->nb[2] + (size_t)i3 * w->nb[3];
    return w->deq[(int64_t)(off / w->full_row_bytes) * w->full_ne0 + k];
}

// An f32 operand: its leaf's host bytes and the view's strides.
typedef struct fview {
    float *bytes;
    size_t nb[4];
} fview;

static float f32_at(const fview *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const size_t off = (size_t)i0 * v->nb[0] + (size_t)i1 * v->nb[1] + (size_t)i2 * v->nb[2] + (size_t)i3 * v->nb[3];
    const float *bytes = v->bytes;
    return *(const float *)((const char *)bytes + off);
}

// Plans g on dev, runs it once and reads out (contiguous f32); *scratch gets the device plan's
// scratch bytes (NULL: not wanted).
static rg_status run_read(rg_graph *g, rg_device dev, rg_node *out, float *dst, rg_exec_stats *stats, size_t *scratch,
                          rg_error *err) {
    rg_status st = rg_graph_error(g, err);
    if (st) return st;
    out->flags |= RG_NODE_OUTPUT;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 2, .device = dev};
    st = rg_exec_create(&ex, g, &o, err);
    if (!st) st = rg_exec_run(ex, 0, -1, err);
    if (!st) st = rg_exec_read(ex, out, dst, (size_t)rg_tensor_nelements(&out->t) * sizeof(float), err);
    if (!st && stats) *stats = rg_exec_get_stats(ex);
    if (!st && scratch) *scratch = rg_exec_device_plan(ex) ? rg_exec_device_plan(ex)->scratch_bytes : 0;
    rg_exec_free(ex);
    return st;
}

static void set_mode(int tensor) { setenv("RETRO_CUDA_HALF_GEMM", tensor ? "tensor" : "f32", 1); }

// ---------------------------------------------------------------------------
// The comparison of one output element against its references

typedef struct tally {
    int64_t bad;
    double worst;  // the largest |d| / bound
} tally;

// ref, S: the exact sum and sum |.| of the CPU's values; reft, St: of the BF16-rounded
// operands (used when `rounded`, the tensor mode's sliced path).
static void check_elem(tally *t, double gpu, double ref, double S, double reft, double St, int64_t K, bool rounded) {
    const double order = gamma_n((double)K + 40);
    double r;
    if (rounded) {
        const double r1 = fabs(gpu - reft) / (order * St + 1e-300);
        const double r2 = fabs(gpu - ref) / ((0x1p-7 + 0x1p-16) * S + order * S * (1 + 0x1p-7) + 1e-300);
        r = r1 > r2 ? r1 : r2;
    } else {
        r = fabs(gpu - ref) / (order * S + 1e-300);
    }
    if (!(r <= 1)) t->bad++;
    if (!(r <= t->worst)) t->worst = r;
}

// ---------------------------------------------------------------------------
// MUL_MAT

typedef struct mm_case {
    const char *what;
    int64_t K, M, N, b2, b3, c2, c3;
    int pad_blocks, row_step;  // the weight as a strided view
    int x_pad;                 // x's rows padded (a view of a wider leaf)
} mm_case;

static const mm_case mm_cases[] = {
    {"N=1 (decode)", 512, 40, 1, 1, 1, 1, 1, 0, 1, 0},
    {"N=3", 256, 33, 3, 1, 1, 1, 1, 0, 1, 0},
    {"N=8 strided w, padded x", 256, 21, 8, 1, 1, 1, 1, 1, 2, 5},
    {"N=12 broadcast r2=2 r3=2", 256, 19, 12, 2, 1, 4, 2, 0, 1, 0},
    {"N=2 broadcast r2=2 r3=2", 256, 19, 2, 2, 1, 4, 2, 0, 1, 0},
    {"N=40 strided w", 512, 37, 40, 1, 1, 1, 1, 2, 3, 0},
    {"N=64 wide", 256, 300, 64, 1, 1, 1, 1, 0, 1, 0},
};

// Runs w [K, M, b2, b3] x [K, N, c2, c3] on the device into y; *x gets x's bytes and strides.
static rg_status mm_run(const mm_case *k, uint32_t type, uint64_t seed, qweight *w, fview *x, float *y,
                        rg_exec_stats *s, size_t *scratch, rg_error *err) {
    rg_graph *g = rg_graph_new();
    const int64_t wne[4] = {k->K, k->M, k->b2, k->b3};
    *w = qweight_make(g, type, wne, k->pad_blocks, k->row_step, seed);
    const int64_t xrow = k->K + k->x_pad, nx = xrow * k->N * k->c2 * k->c3;
    x->bytes = randn(nx, seed + 7);
    const int64_t xfull[4] = {xrow, k->N, k->c2, k->c3}, xne[4] = {k->K, k->N, k->c2, k->c3};
    rg_node *xl = rg_leaf(g, "x", RG_TYPE_F32, 4, xfull, x->bytes);
    const size_t xnb[4] = {4, (size_t)xrow * 4, (size_t)(xrow * k->N) * 4, (size_t)(xrow * k->N * k->c2) * 4};
    rg_node *xn = k->x_pad ? rg_view(g, xl, 4, xne, xnb, 0) : xl;
    memcpy(x->nb, xn->t.nb, sizeof x->nb);
    rg_node *yn = rg_mul_mat(g, w->node, xn);
    rg_status st = run_read(g, RG_DEVICE_CUDA, yn, y, s, scratch, err);
    w->node = NULL;
    rg_graph_free(g);
    return st;
}

// The element checks of y against the reference; `rounded`: the tensor mode's sliced path.
static tally mm_compare(const mm_case *k, const qweight *w, const fview *x, const float *y, bool rounded) {
    tally t = {0, 0};
    const int64_t r2 = k->c2 / k->b2, r3 = k->c3 / k->b3;
    double *wcol = malloc(sizeof(double) * (size_t)k->K);
    for (int64_t i3 = 0; i3 < k->c3; i3++)
        for (int64_t i2 = 0; i2 < k->c2; i2++)
            for (int64_t m = 0; m < k->M; m++) {
                for (int64_t kk = 0; kk < k->K; kk++) wcol[kk] = qweight_at(w, kk, m, i2 / r2, i3 / r3);
                for (int64_t n = 0; n < k->N; n++) {
                    double ref = 0, S = 0, reft = 0, St = 0;
                    for (int64_t kk = 0; kk < k->K; kk++) {
                        const float xv = f32_at(x, kk, n, i2, i3);
                        const double p = wcol[kk] * xv, pt = bf16_of((float)wcol[kk]) * bf16_of(xv);
                        ref += p, S += fabs(p), reft += pt, St += fabs(pt);
                    }
                    check_elem(&t, y[((i3 * k->c2 + i2) * k->N + n) * k->M + m], ref, S, reft, St, k->K, rounded);
                }
            }
    free(wcol);
    return t;
}

static void mm_type(uint32_t type, int tensor) {
    for (size_t c = 0; c < sizeof mm_cases / sizeof *mm_cases; c++) {
        const mm_case *k = &mm_cases[c];
        if (k->K % rg_type_get(type)->block_size) continue;
        const int64_t ny = k->M * k->N * k->c2 * k->c3;
        float *y = malloc(sizeof(float) * (size_t)ny);
        qweight w;
        fview x = {0};
        rg_error err = {0};
        rg_exec_stats s = {0};
        rg_status st = mm_run(k, type, 100 + c, &w, &x, y, &s, NULL, &err);
        RG_CHECK(st == RG_OK, "mul_mat %s %s: %s", type_name(type), k->what, err.msg);
        if (!st) {
            RG_CHECK(s.nodes_gpu == 1 && s.nodes_cpu == 0, "mul_mat %s %s: %d nodes on the gpu, %d on the cpu",
                     type_name(type), k->what, s.nodes_gpu, s.nodes_cpu);
            const bool sliced = k->N > 8, rounded = sliced && tensor;
            const tally t = mm_compare(k, &w, &x, y, rounded);
            printf("    mul_mat  %-8s %-6s %-28s %-8s worst %.3f of its bound %s\n", type_name(type),
                   tensor ? "tensor" : "f32", k->what, sliced ? "sliced" : "in place", t.worst, t.bad ? "FAIL" : "ok");
            RG_CHECK(t.bad == 0, "mul_mat %s %s (%s): %lld of %lld outputs beyond the bound (worst %.3g)",
                     type_name(type), k->what, tensor ? "tensor" : "f32", (long long)t.bad, (long long)ny, t.worst);
        }
        free(y), free(x.bytes), free(w.bytes), free(w.deq);
    }
}

// ---------------------------------------------------------------------------
// OUT_PROD: a [Ka, M, b2, b3] quantized, b [N, M, c2, c3] f32 -> [Ka, N, c2, c3]

typedef struct op_case {
    const char *what;
    int64_t Ka, M, N, b2, b3, c2, c3;
    int pad_blocks, row_step;
    int b_kind;  // 0: plain leaf; 1: dY^T (the transpose of a [M, N] leaf); 2: no unit stride
} op_case;

static const op_case op_cases[] = {
    {"N=1 dY^T (decode's dX)", 512, 40, 1, 1, 1, 1, 1, 0, 1, 1},
    {"N=3 plain", 256, 37, 3, 1, 1, 1, 1, 0, 1, 0},
    {"N=16 b without unit stride", 256, 35, 16, 1, 1, 1, 1, 0, 1, 2},
    {"N=12 dY^T broadcast r2=2 r3=2", 256, 19, 12, 2, 1, 4, 2, 0, 1, 1},
    {"N=2 broadcast r2=2 r3=2", 256, 19, 2, 2, 1, 4, 2, 0, 1, 0},
    {"N=24 strided a, dY^T", 512, 33, 24, 1, 1, 1, 1, 1, 2, 1},
    {"N=64 wide dY^T", 768, 70, 64, 1, 1, 1, 1, 0, 1, 1},
};

static rg_node *op_b(rg_graph *g, const op_case *k, float **bb) {  // b's leaf bytes in *bb
    const int64_t N = k->N, M = k->M, c2 = k->c2, c3 = k->c3;
    if (k->b_kind == 0) {
        *bb = randn(N * M * c2 * c3, 300);
        return rg_leaf(g, "b", RG_TYPE_F32, 4, (int64_t[]){N, M, c2, c3}, *bb);
    }
    if (k->b_kind == 1) {
        *bb = randn(M * N * c2 * c3, 301);
        return rg_transpose(g, rg_leaf(g, "dy", RG_TYPE_F32, 4, (int64_t[]){M, N, c2, c3}, *bb));
    }
    // element (j, m) at 2 m + 2 M j floats: no stride is 1
    *bb = randn(2 * M * N * c2 * c3, 302);
    rg_node *l = rg_leaf(g, "b2", RG_TYPE_F32, 4, (int64_t[]){2 * M, N, c2, c3}, *bb);
    const size_t nb[4] = {(size_t)(2 * M) * 4, 8, (size_t)(2 * M * N) * 4, (size_t)(2 * M * N * c2) * 4};
    return rg_view(g, l, 4, (int64_t[]){N, M, c2, c3}, nb, 0);
}

static rg_status op_run(const op_case *k, uint32_t type, uint64_t seed, qweight *a, fview *b, float *y,
                        rg_exec_stats *s, size_t *scratch, rg_error *err) {
    rg_graph *g = rg_graph_new();
    const int64_t ane[4] = {k->Ka, k->M, k->b2, k->b3};
    *a = qweight_make(g, type, ane, k->pad_blocks, k->row_step, seed);
    rg_node *bn = op_b(g, k, &b->bytes);
    memcpy(b->nb, bn->t.nb, sizeof b->nb);
    rg_node *yn = rg_out_prod(g, a->node, bn);
    rg_status st = run_read(g, RG_DEVICE_CUDA, yn, y, s, scratch, err);
    a->node = NULL;
    rg_graph_free(g);
    return st;
}

static tally op_compare(const op_case *k, const qweight *a, const fview *b, const float *y, bool rounded) {
    tally t = {0, 0};
    const int64_t r2 = k->c2 / k->b2, r3 = k->c3 / k->b3;
    double *arow = malloc(sizeof(double) * (size_t)k->M);
    for (int64_t i3 = 0; i3 < k->c3; i3++)
        for (int64_t i2 = 0; i2 < k->c2; i2++)
            for (int64_t i = 0; i < k->Ka; i++) {
                for (int64_t m = 0; m < k->M; m++) arow[m] = qweight_at(a, i, m, i2 / r2, i3 / r3);
                for (int64_t j = 0; j < k->N; j++) {
                    double ref = 0, S = 0, reft = 0, St = 0;
                    for (int64_t m = 0; m < k->M; m++) {
                        const float bv = f32_at(b, j, m, i2, i3);
                        const double p = arow[m] * bv, pt = bf16_of((float)arow[m]) * bf16_of(bv);
                        ref += p, S += fabs(p), reft += pt, St += fabs(pt);
                    }
                    check_elem(&t, y[((i3 * k->c2 + i2) * k->N + j) * k->Ka + i], ref, S, reft, St, k->M, rounded);
                }
            }
    free(arow);
    return t;
}

static void op_type(uint32_t type, int tensor) {
    for (size_t c = 0; c < sizeof op_cases / sizeof *op_cases; c++) {
        const op_case *k = &op_cases[c];
        if (k->Ka % rg_type_get(type)->block_size) continue;
        const int64_t ny = k->Ka * k->N * k->c2 * k->c3;
        float *y = malloc(sizeof(float) * (size_t)ny);
        qweight a;
        fview b = {0};
        rg_error err = {0};
        rg_exec_stats s = {0};
        rg_status st = op_run(k, type, 200 + c, &a, &b, y, &s, NULL, &err);
        RG_CHECK(st == RG_OK, "out_prod %s %s: %s", type_name(type), k->what, err.msg);
        if (!st) {
            RG_CHECK(s.nodes_gpu == 1 && s.nodes_cpu == 0, "out_prod %s %s: %d nodes on the gpu, %d on the cpu",
                     type_name(type), k->what, s.nodes_gpu, s.nodes_cpu);
            const bool sliced = k->N > 8 && k->b_kind != 2, rounded = sliced && tensor;
            const tally t = op_compare(k, &a, &b, y, rounded);
            printf("    out_prod %-8s %-6s %-28s %-8s worst %.3f of its bound %s\n", type_name(type),
                   tensor ? "tensor" : "f32", k->what, sliced ? "sliced" : "in place", t.worst, t.bad ? "FAIL" : "ok");
            RG_CHECK(t.bad == 0, "out_prod %s %s (%s): %lld of %lld outputs beyond the bound (worst %.3g)",
                     type_name(type), k->what, tensor ? "tensor" : "f32", (long long)t.bad, (long long)ny, t.worst);
        }
        free(y), free(b.bytes), free(a.bytes), free(a.deq);
    }
}

// ---------------------------------------------------------------------------
// The tests

// Which types the device takes: the list must all be there; the rest are listed.
static void test_quant_mm_support(void) {
    static float f[4096];
    static uint8_t q[1 << 16];
    const int compiled = rg_cuda_compiled();
    rg_graph *g = rg_graph_new();
    rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){256, 3}, f);
    rg_node *xt = rg_transpose(g, rg_leaf(g, "xt", RG_TYPE_F32, 2, (int64_t[]){3, 256}, f));
    rg_node *dyt = rg_transpose(g, rg_leaf(g, "dy", RG_TYPE_F32, 2, (int64_t[]){8, 3}, f));
    for (size_t i = 0; i < sizeof required_types / sizeof *required_types; i++) {
        const uint32_t t = required_types[i];
        rg_node *w = rg_leaf(g, "w", t, 2, (int64_t[]){256, 8}, q);
        const bool mm = rg_op_cell_runs(RG_BACKEND_CUDA, rg_mul_mat(g, w, x));
        const bool op = rg_op_cell_runs(RG_BACKEND_CUDA, rg_out_prod(g, w, dyt));
        const bool strided_x = rg_op_cell_runs(RG_BACKEND_CUDA, rg_mul_mat(g, w, xt));
        printf("    %-8s mul_mat %s, out_prod %s, mul_mat of a transposed x %s\n", type_name(t), mm ? "gpu" : "cpu",
               op ? "gpu" : "cpu", strided_x ? "gpu" : "cpu");
        RG_CHECK(mm == (bool)compiled && op == (bool)compiled, "%s: the CUDA cells say mul_mat %d, out_prod %d",
                 type_name(t), mm, op);
        RG_CHECK(!strided_x, "%s: a transposed x (no packed rows) is not the cell's", type_name(t));
    }
    printf("    other types on the device:");
    for (size_t i = 0; i < sizeof other_types / sizeof *other_types; i++) {
        rg_node *w = rg_leaf(g, "w", other_types[i], 2, (int64_t[]){256, 8}, q);
        printf(" %s %s", type_name(other_types[i]), rg_op_cell_runs(RG_BACKEND_CUDA, rg_mul_mat(g, w, x)) ? "yes" : "no");
    }
    printf("\n");
    if (compiled) {
        const char *mm = rg_op_cell(RG_BACKEND_CUDA, RG_OP_MUL_MAT).types;
        const char *op = rg_op_cell(RG_BACKEND_CUDA, RG_OP_OUT_PROD).types;
        printf("    types listed: mul_mat '%s'\n", mm ? mm : "(null)");
        RG_CHECK(mm && op && !strcmp(mm, op) && !strncmp(mm, "f32, f16, bf16, ", 16), "types '%s' / '%s'", mm, op);
        for (size_t i = 0; mm && i < sizeof required_types / sizeof *required_types; i++) {
            char want[32];
            snprintf(want, sizeof want, ", %s", type_name(required_types[i]));
            RG_CHECK(strstr(mm, want), "'%s' does not list %s", mm, type_name(required_types[i]));
        }
    }
    rg_graph_free(g);
}

// Every listed type (and each other type the device decodes) through the cases, both modes.
static void each_type(void (*fn)(uint32_t, int)) {
    rg_graph *probe = rg_graph_new();
    static float f[256];
    static uint8_t q[1 << 14];
    rg_node *x = rg_leaf(probe, "x", RG_TYPE_F32, 2, (int64_t[]){256, 1}, f);
    const bool quick = getenv("RG_TEST_QUICK") != NULL;
    for (int tensor = 0; tensor < 2; tensor++) {
        set_mode(tensor);
        for (size_t i = 0; i < sizeof required_types / sizeof *required_types; i++)
            if (!quick || i % 3 == 0) fn(required_types[i], tensor);
        for (size_t i = 0; !quick && i < sizeof other_types / sizeof *other_types; i++) {
            rg_node *w = rg_leaf(probe, "w", other_types[i], 2, (int64_t[]){256, 1}, q);
            if (rg_op_cell_runs(RG_BACKEND_CUDA, rg_mul_mat(probe, w, x))) fn(other_types[i], tensor);
        }
    }
    unsetenv("RETRO_CUDA_HALF_GEMM");
    rg_graph_free(probe);
}

static void test_quant_mul_mat(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    each_type(mm_type);
}

static void test_quant_out_prod(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    each_type(op_type);
}

// The in-place decoder against the sliced path on the same weights: the first 8 columns of a
// wide product (sliced) and the same 8 columns alone (in place), within the sum of their bounds.
static void test_quant_inplace_vs_sliced(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const uint32_t types[] = {RG_TYPE_Q4_K, RG_TYPE_Q8_0, RG_TYPE_IQ4_XS};
    enum { K = 512, M = 70, N = 24 };
    for (int tensor = 0; tensor < 2; tensor++) {
        set_mode(tensor);
        for (size_t ti = 0; ti < quick_count(sizeof types / sizeof *types); ti++) {
            const uint32_t type = types[ti];
            float *wdeq, *xb = randn(K * N, 400), wide[M * N], narrow[M * 8];
            uint8_t *wq = quantized_rows(type, K, M, 401, &wdeq);
            rg_status st = RG_OK;
            rg_error err = {0};
            for (int pass = 0; pass < 2 && !st; pass++) {
                rg_graph *g = rg_graph_new();
                rg_node *w = rg_leaf(g, "w", type, 2, (int64_t[]){K, M}, wq);
                rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){K, pass ? 8 : N}, xb);
                st = run_read(g, RG_DEVICE_CUDA, rg_mul_mat(g, w, x), pass ? narrow : wide, NULL, NULL, &err);
                rg_graph_free(g);
            }
            RG_CHECK(st == RG_OK, "%s: %s", type_name(type), err.msg);
            tally t = {0, 0};
            for (int64_t n = 0; n < 8 && !st; n++)
                for (int64_t m = 0; m < M; m++) {
                    double S = 0;
                    for (int64_t k = 0; k < K; k++) S += fabs((double)wdeq[m * K + k] * xb[n * K + k]);
                    const double tol = (2 * gamma_n(K + 40) + (tensor ? 0x1p-7 + 0x1p-16 + 0x1p-7 * gamma_n(K + 40) : 0)) * S;
                    const double r = fabs((double)wide[n * M + m] - narrow[n * M + m]) / (tol + 1e-300);
                    if (!(r <= 1)) t.bad++;
                    if (!(r <= t.worst)) t.worst = r;
                }
            printf("    %-8s %-6s sliced [%d, %d] x [%d, %d] against in place on its first 8 columns: worst %.3f of "
                   "the bound\n",
                   type_name(type), tensor ? "tensor" : "f32", K, M, K, N, t.worst);
            RG_CHECK(t.bad == 0, "%s %s: %lld outputs of the two paths apart beyond the bound", type_name(type),
                     tensor ? "tensor" : "f32", (long long)t.bad);
            free(wdeq), free(xb), free(wq);
        }
    }
    unsetenv("RETRO_CUDA_HALF_GEMM");
}

// THE BUDGET TEST. A weight that 1 MiB slices: MUL_MAT w [256, 5000] (1024 F32 or 2048 BF16
// rows per slice: 5000 is not a multiple of either) with N = 16; OUT_PROD a [2560, 600] (one
// 256-block column of every row is 600 KiB in F32: 1 such column, 10 slices; 32-blocks: 13
// columns of 32, 416 elements: 2560 is not a multiple) with N = 16 and b = dY^T.
static const char *const budgets[] = {"0", "1", "64", NULL};

static void budget_case(int op, uint32_t type, int tensor) {
    const mm_case mk = {"budget", 256, 5000, 16, 1, 1, 1, 1, 0, 1, 0};
    const op_case ok = {"budget", 2560, 600, 16, 1, 1, 1, 1, 0, 1, 1};
    const int64_t ny = op ? ok.Ka * ok.N : mk.M * mk.N;
    float *y[4];
    size_t scratch[4] = {0};
    bool ran = true;
    for (int b = 0; b < 4; b++) {
        if (budgets[b]) setenv("RETRO_CUDA_DEQUANT_BUDGET_MB", budgets[b], 1);
        else unsetenv("RETRO_CUDA_DEQUANT_BUDGET_MB");
        y[b] = malloc(sizeof(float) * (size_t)ny);
        qweight w;
        fview x = {0};
        rg_error err = {0};
        rg_status st = op ? op_run(&ok, type, 500, &w, &x, y[b], NULL, &scratch[b], &err)
                          : mm_run(&mk, type, 500, &w, &x, y[b], NULL, &scratch[b], &err);
        RG_CHECK(st == RG_OK, "%s %s budget %s: %s", op ? "out_prod" : "mul_mat", type_name(type),
                 budgets[b] ? budgets[b] : "unset", err.msg);
        ran = ran && st == RG_OK;
        if (!st && b == 0) {  // the values once, against the reference
            const tally t = op ? op_compare(&ok, &w, &x, y[b], tensor) : mm_compare(&mk, &w, &x, y[b], tensor);
            RG_CHECK(t.bad == 0, "%s %s: %lld outputs beyond the bound", op ? "out_prod" : "mul_mat", type_name(type),
                     (long long)t.bad);
        }
        free(x.bytes), free(w.bytes), free(w.deq);
    }
    unsetenv("RETRO_CUDA_DEQUANT_BUDGET_MB");
    int same = 1;
    for (int b = 1; b < 4 && ran; b++) same &= !memcmp(y[0], y[b], sizeof(float) * (size_t)ny);
    printf("    %-8s %-8s %-6s budgets 0 / 1 / 64 / unset MiB: scratch %.2f / %.2f / %.2f / %.2f MiB, outputs %s\n",
           op ? "out_prod" : "mul_mat", type_name(type), tensor ? "tensor" : "f32", scratch[0] / 1048576.0,
           scratch[1] / 1048576.0, scratch[2] / 1048576.0, scratch[3] / 1048576.0,
           ran ? (same ? "bit for bit the same" : "DIFFER") : "(a run failed)");
    if (ran) {
        RG_CHECK(same, "%s %s %s: the outputs depend on the budget", op ? "out_prod" : "mul_mat", type_name(type),
                 tensor ? "tensor" : "f32");
        RG_CHECK(scratch[1] < scratch[0] && scratch[1] > 0, "%s %s: scratch %zu under 1 MiB, %zu under 0 (no slicing)",
                 op ? "out_prod" : "mul_mat", type_name(type), scratch[1], scratch[0]);
        const size_t act = (size_t)(op ? ok.N * ok.M : mk.K * mk.N) * 2;  // the activations in BF16
        RG_CHECK(scratch[1] <= ((size_t)1 << 20) + act + 512,
                 "%s %s: scratch %zu under 1 MiB exceeds 1 MiB of slice and %zu bytes of BF16 activations",
                 op ? "out_prod" : "mul_mat", type_name(type), scratch[1], act);
        RG_CHECK(scratch[2] == scratch[3], "the default is 64 MiB: scratch %zu against %zu", scratch[3], scratch[2]);
    }
    for (int b = 0; b < 4; b++) free(y[b]);
}

static void test_quant_budget_same_bits(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const uint32_t types[] = {RG_TYPE_Q4_K, RG_TYPE_Q8_0};
    for (int tensor = 0; tensor < 2; tensor++) {
        set_mode(tensor);
        for (int op = 0; op < 2; op++)
            for (size_t ti = 0; ti < quick_count(sizeof types / sizeof *types); ti++) budget_case(op, types[ti], tensor);
    }
    unsetenv("RETRO_CUDA_HALF_GEMM");
}

// MUL_MAT's backward with a frozen quantized weight (LoRA's base): only dx, an OUT_PROD of
// the weight and dY^T (ops.c's rule), which must run on the device, against the reference.
static void test_quant_backward_dx(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    enum { K = 256, M = 48, N = 20 };
    static const uint32_t types[] = {RG_TYPE_Q4_K, RG_TYPE_Q4_1, RG_TYPE_IQ4_XS};
    for (int tensor = 0; tensor < 2; tensor++) {
        set_mode(tensor);
        for (size_t ti = 0; ti < quick_count(sizeof types / sizeof *types); ti++) {
            const uint32_t type = types[ti];
            float *wdeq, *xv = randn(K * N, 600), *cv = randn(M * N, 601), dx[K * N];
            uint8_t *wq = quantized_rows(type, K, M, 602, &wdeq);
            rg_graph *g = rg_graph_new();
            rg_node *w = rg_leaf(g, "w", type, 2, (int64_t[]){K, M}, wq);
            rg_node *x = rg_param(g, "x", RG_TYPE_F32, 2, (int64_t[]){K, N}, xv);
            rg_node *cst = rg_leaf(g, "c", RG_TYPE_F32, 2, (int64_t[]){M, N}, cv);
            rg_node *loss = rg_sum(g, rg_mul(g, rg_mul_mat(g, w, x), cst));
            rg_error err = {0};
            rg_status st = rg_graph_error(g, &err);
            if (!st) st = rg_graph_backward(g, loss, &err);
            if (!st) st = run_read(g, RG_DEVICE_CUDA, x->grad, dx, NULL, NULL, &err);
            RG_CHECK(st == RG_OK, "%s backward: %s", type_name(type), err.msg);
            int total = 0, on = 0;
            for (int i = 0; i < g->n_nodes; i++)
                if (g->nodes[i]->op == RG_OP_OUT_PROD || g->nodes[i]->op == RG_OP_MUL_MAT)
                    total++, on += g->nodes[i]->backend == RG_BACKEND_CUDA;
            RG_CHECK(!w->grad, "%s: a frozen weight got a gradient", type_name(type));
            RG_CHECK(total == 2 && on == 2, "%s: %d of %d mul_mat/out_prod nodes on the device (expected 2 of 2)",
                     type_name(type), on, total);
            // dx[k, n] = sum_m w[k, m] c[m, n]; N = 20 > 8 with dY^T: the sliced path
            tally t = {0, 0};
            for (int64_t n = 0; n < N && !st; n++)
                for (int64_t k = 0; k < K; k++) {
                    double ref = 0, S = 0, reft = 0, St = 0;
                    for (int64_t m = 0; m < M; m++) {
                        const double p = (double)wdeq[m * K + k] * cv[n * M + m];
                        const double pt = bf16_of(wdeq[m * K + k]) * bf16_of(cv[n * M + m]);
                        ref += p, S += fabs(p), reft += pt, St += fabs(pt);
                    }
                    check_elem(&t, dx[n * K + k], ref, S, reft, St, M, tensor);
                }
            printf("    %-8s %-6s dx of mul_mat w[%d,%d] x[%d,%d], out_prod(w, dY^T) on the device: worst %.3f of the "
                   "bound\n",
                   type_name(type), tensor ? "tensor" : "f32", K, M, K, N, t.worst);
            RG_CHECK(t.bad == 0, "%s: %lld dx elements beyond the bound", type_name(type), (long long)t.bad);
            rg_graph_free(g);
            free(wdeq), free(xv), free(cv), free(wq);
        }
    }
    unsetenv("RETRO_CUDA_HALF_GEMM");
}

// The budget variable: integers in MiB (0 or less: no slicing), the seed's name as a fallback,
// anything else an error naming the variable and the value, also when a context is made.
static void test_quant_budget_env(void) {
    static const struct {
        const char *retro, *ggml;
        int ok;
        size_t bytes;
        const char *named;
    } rows[] = {
        {NULL, NULL, 1, (size_t)64 << 20, NULL},
        {"1", NULL, 1, (size_t)1 << 20, NULL},
        {"0", NULL, 1, 0, NULL},
        {"-5", NULL, 1, 0, NULL},
        {"256", "8", 1, (size_t)256 << 20, NULL},
        {NULL, "8", 1, (size_t)8 << 20, NULL},
        {"", "3", 1, (size_t)3 << 20, NULL},
        {"12x", NULL, 0, 0, "RETRO_CUDA_DEQUANT_BUDGET_MB=12x"},
        {"1.5", "8", 0, 0, "RETRO_CUDA_DEQUANT_BUDGET_MB=1.5"},
        {NULL, "lots", 0, 0, "GGML_CUDA_DEQUANT_BUDGET_MB=lots"},
        {"99999999999999999999", NULL, 0, 0, "RETRO_CUDA_DEQUANT_BUDGET_MB=99999999999999999999"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        if (rows[i].retro) setenv("RETRO_CUDA_DEQUANT_BUDGET_MB", rows[i].retro, 1);
        else unsetenv("RETRO_CUDA_DEQUANT_BUDGET_MB");
        if (rows[i].ggml) setenv("GGML_CUDA_DEQUANT_BUDGET_MB", rows[i].ggml, 1);
        else unsetenv("GGML_CUDA_DEQUANT_BUDGET_MB");
        size_t bytes = 12345;
        char msg[160] = "";
        const int r = rg_cuda_dequant_budget_env(&bytes, msg, sizeof msg);
        printf("    RETRO %-22s GGML %-6s -> %s\n", rows[i].retro ? rows[i].retro : "(unset)",
               rows[i].ggml ? rows[i].ggml : "(unset)", r < 0 ? msg : "ok");
        if (rows[i].ok) {
            RG_CHECK(r == 0 && bytes == rows[i].bytes, "row %zu: %d, %zu bytes (expected %zu)", i, r, bytes, rows[i].bytes);
        } else {
            RG_CHECK(r < 0 && strstr(msg, rows[i].named), "row %zu: %d, '%s' does not name %s", i, r, msg, rows[i].named);
            if (have_gpu()) {  // a context is made with the variable: the executor's creation fails
                static float a[8];
                rg_graph *g = rg_graph_new();
                rg_node *y = rg_add(g, rg_leaf(g, "a", RG_TYPE_F32, 1, (int64_t[]){8}, a),
                                    rg_leaf(g, "b", RG_TYPE_F32, 1, (int64_t[]){8}, a));
                float out[8];
                rg_error err = {0};
                const rg_status st = run_read(g, RG_DEVICE_CUDA, y, out, NULL, NULL, &err);
                RG_CHECK(st != RG_OK && strstr(err.msg, rows[i].named), "row %zu: the exec says %d '%s'", i, st, err.msg);
                rg_graph_free(g);
            }
        }
    }
    unsetenv("RETRO_CUDA_DEQUANT_BUDGET_MB");
    unsetenv("GGML_CUDA_DEQUANT_BUDGET_MB");
}

int main(int argc, char **argv) {
    static const rg_test_case cases[] = {
        RG_TEST(test_quant_mm_support),       RG_TEST(test_quant_budget_env),   RG_TEST(test_quant_mul_mat),
        RG_TEST(test_quant_out_prod),         RG_TEST(test_quant_inplace_vs_sliced),
        RG_TEST(test_quant_budget_same_bits), RG_TEST(test_quant_backward_dx), {0}};
    return rg_test_run(argc, argv, cases);
}
