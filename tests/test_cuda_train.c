// test_cuda_train.c - the CUDA cells of the training ops (src/cuda/ops_train.cu, ops_optim.cu)
// against the CPU, through the executor: each graph runs with .device =
// RG_DEVICE_CUDA and RG_DEVICE_CPU and the outputs are compared, one table
// line per op, type and shape. Cases that need a device skip without one; run
// them on the CPU through the host execution of the CUDA code with
// RETRO_CUDA_HOST=1. Tolerances:
//   OUT_PROD        |gpu - cpu| <= 1e-5 * sum_k |a_ik b_jk| per element: both sides
//                   sum the same exact F32 products (half operands widened exactly)
//                   and differ only in the order of the F32 sums.
//   LINEAR_CE       per token the logits differ by the GEMM's order, at most 1e-5 *
//                   S_t on each side, S_t = max_v sum_k |w_kv h_kt|; exp (expf against
//                   exp_poly.h's, 2 ulp each) and the f32 cast of lse add <= 5e-7 +
//                   2e-7 |lse_t|. So lse_t within 2e-5 S_t + 5e-7 + 2e-7 |lse_t|, the
//                   loss within inv_n sum_t (that + 2e-5 S_t) (z_t's own error) + 2e-7 |loss|.
//   On the tensor path (RETRO_CUDA_HALF_GEMM=tensor) a half head rounds h and G to its type:
//   these tests give it an h already in that type (the CPU then multiplies the same values)
//   and add u |G_tv| per term to LINEAR_CE_BACK's bound for G's rounding (and 2^-25 for an F16
//   G in F16's subnormal range, where the spacing is absolute).
//   LINEAR_CE_BACK  G_tv = c_t e_tv (- coef0 at the label) inherits the relative error
//                   of e, |dz| + |dlse| + 4 ulp <= 4e-5 S_t + 1e-6, plus the GEMMs'
//                   order: dh_kt within sum_v |w_kv| (|c_t| e_tv (4e-5 S_t + 1e-6) +
//                   2e-5 |G_tv|), dw_kv likewise with |h_kt| over t (computed from a
//                   double reference).
//   SUMSQ, CLIP_COEF  bit for bit: the global norm of the same gradients (a trainer's tensors'
//                   sizes, several 4096-element blocks, tails) is the CPU's double sums in the
//                   CPU's order, and so is the clip.
//   ADAMW, SGD      bit for bit (the same IEEE operations, fma where the CPU uses fmaf;
//                   the same keyed words and roundings for f16/bf16), except that a NaN
//                   result is only required to be a NaN: a GPU's arithmetic returns its
//                   canonical NaN where x86 keeps the operand's sign and payload.
// Graphs made only of these ops run with no copy inside the run; in graphs with
// other ops (the backward's seed and views) this file checks that its own
// nodes ran on the device.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "train/optim.h"

static char why[256];

static int have_gpu(void) { return rg_cuda_device_count(why, sizeof why) > 0; }

// ---------------------------------------------------------------------------
// Helpers

static const char *type_name(uint32_t t) { return rg_type_get(t)->name; }

static float *randn(int64_t n, uint64_t stream, float scale) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    for (int64_t i = 0; p && i < n; i++) p[i] = scale * rg_rng_normal(11, stream, (uint64_t)i);
    return p;
}

// x rounded to `type` (RNE) and widened back: the values a leaf of that type holds.
static void round_to(float *x, int64_t n, uint32_t type) {
    for (int64_t i = 0; i < n && type != RG_TYPE_F32; i++)
        x[i] = type == RG_TYPE_F16 ? rg_fp16_to_fp32(rg_fp32_to_fp16(x[i])) : rg_bf16_to_fp32(rg_fp32_to_bf16(x[i]));
}

// The (already representable) values x stored as `type`.
static void *as_type(const float *x, int64_t n, uint32_t type) {
    const size_t esz = type == RG_TYPE_F32 ? 4 : 2;
    char *p = malloc((size_t)(n > 0 ? n : 1) * esz);
    for (int64_t i = 0; p && i < n; i++) {
        if (type == RG_TYPE_F32) memcpy(p + 4 * i, &x[i], 4);
        else {
            uint16_t h = type == RG_TYPE_F16 ? rg_fp32_to_fp16(x[i]) : rg_fp32_to_bf16(x[i]);
            memcpy(p + 2 * i, &h, 2);
        }
    }
    return p;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Plans g on dev, runs it once, reads outs[i] (contiguous f32) into dst[i], and with
// `download` copies the device's external leaves back to their host bytes.
static rg_status run_read(rg_graph *g, rg_device dev, rg_node *const *outs, float *const *dst, int n_out, bool download,
                          rg_exec_stats *stats, rg_error *err) {
    rg_status st = rg_graph_error(g, err);
    if (st) return st;
    for (int i = 0; i < n_out; i++) outs[i]->flags |= RG_NODE_OUTPUT;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 2, .device = dev};
    st = rg_exec_create(&ex, g, &o, err);
    if (!st) st = rg_exec_run(ex, 0, -1, err);
    for (int i = 0; i < n_out && !st; i++)
        st = rg_exec_read(ex, outs[i], dst[i], (size_t)rg_tensor_nelements(&outs[i]->t) * sizeof(float), err);
    if (!st && download) st = rg_exec_download_leaves(ex, err);
    if (stats && ex) *stats = rg_exec_get_stats(ex);
    rg_exec_free(ex);
    return st;
}

static void table_line(const char *op, const char *type, const char *shape, double maxd, const char *tol, int ok) {
    printf("    %-14s %-5s %-46s max|d| %-10.3g tol %-22s %s\n", op, type, shape, maxd, tol, ok ? "ok" : "FAIL");
}

// Every node of op `op` in g ran on the device (after a CUDA exec was made for g).
static int count_on_device(const rg_graph *g, rg_op op, int *total) {
    int on = 0;
    *total = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == op) (*total)++, on += g->nodes[i]->backend == RG_BACKEND_CUDA;
    return on;
}

// A graph of n_gpu device nodes and nothing else: no CPU node, no copy inside the run.
static void check_device_only(const rg_exec_stats *s, int n_gpu, const char *what) {
    RG_CHECK(s->nodes_gpu == n_gpu && s->nodes_cpu == 0 && s->nodes_fallback == 0,
             "%s: nodes gpu %d cpu %d fallback %d, expected %d, 0, 0", what, s->nodes_gpu, s->nodes_cpu,
             s->nodes_fallback, n_gpu);
    RG_CHECK(s->copies_scheduled == 0 && s->copies_to_device == 0 && s->copies_to_host == 0,
             "%s: %d copies scheduled inside the run", what, s->copies_scheduled);
}

// Leaf a [ne] of `type` with values x; `pad` extra elements per row (a view of a wider leaf) when > 0.
static rg_node *leaf_padded(rg_graph *g, const char *name, uint32_t type, const int64_t ne[4], int64_t pad,
                            const float *x, void **bytes) {
    const size_t esz = type == RG_TYPE_F32 ? 4 : 2;
    const int64_t row = ne[0] + pad, n = row * ne[1] * ne[2] * ne[3];
    float *wide = malloc((size_t)n * sizeof(float));
    for (int64_t r = 0; r < n / row; r++)
        for (int64_t i = 0; i < row; i++) wide[r * row + i] = i < ne[0] ? x[r * ne[0] + i] : 1e30f;  // padding poisons
    *bytes = as_type(wide, n, type);
    free(wide);
    const int64_t wne[4] = {row, ne[1], ne[2], ne[3]};
    rg_node *l = rg_leaf(g, name, type, 4, wne, *bytes);
    if (!pad) return l;
    const size_t nb[4] = {esz, row * esz, row * esz * ne[1], row * esz * ne[1] * ne[2]};
    return rg_view(g, l, 4, ne, nb, 0);
}

// An operand [ne] with values x (packed in that shape) as the transpose of a leaf
// [ne1, ne0, ne2, ne3], so that its rows run along ne1.
static rg_node *leaf_transposed(rg_graph *g, const char *name, uint32_t type, const int64_t ne[4], const float *x,
                                void **bytes) {
    const int64_t slice = ne[0] * ne[1], n = slice * ne[2] * ne[3];
    float *tr = malloc((size_t)n * sizeof(float));
    for (int64_t s = 0; s < n / slice; s++)
        for (int64_t i = 0; i < ne[0]; i++)
            for (int64_t j = 0; j < ne[1]; j++) tr[s * slice + i * ne[1] + j] = x[s * slice + j * ne[0] + i];
    const int64_t tne[4] = {ne[1], ne[0], ne[2], ne[3]};
    rg_node *l = rg_transpose(g, leaf_padded(g, name, type, tne, 0, tr, bytes));
    free(tr);
    return l;
}

// ---------------------------------------------------------------------------
// Which nodes the CUDA cells take, from types, shapes and strides alone (any machine).

static void test_cuda_train_support_table(void) {
    static float f[4096];
    static uint16_t h[4096];
    static uint8_t q[4096];
    static int32_t lab[64];
    rg_graph *g = rg_graph_new();
    const int64_t ne_a[2] = {16, 8}, ne_b[2] = {12, 8}, ne_bt[2] = {8, 12}, ne_w[2] = {32, 64}, ne_h[2] = {32, 6};
    const int64_t ne_l[1] = {6};
    rg_node *a32 = rg_leaf(g, "a32", RG_TYPE_F32, 2, ne_a, f), *a16 = rg_leaf(g, "a16", RG_TYPE_F16, 2, ne_a, h);
    rg_node *abf = rg_leaf(g, "abf", RG_TYPE_BF16, 2, ne_a, h), *aq8 = rg_leaf(g, "aq8", RG_TYPE_Q8_0, 2, ne_w, q);
    rg_node *b = rg_leaf(g, "b", RG_TYPE_F32, 2, ne_b, f);
    rg_node *bt = rg_transpose(g, rg_leaf(g, "bt", RG_TYPE_F32, 2, ne_bt, f));
    rg_node *w16 = rg_leaf(g, "w16", RG_TYPE_F16, 2, ne_w, h), *hh = rg_leaf(g, "h", RG_TYPE_F32, 2, ne_h, f);
    rg_node *labels = rg_leaf(g, "labels", RG_TYPE_I32, 1, ne_l, lab);
    rg_node *p32 = rg_leaf(g, "p32", RG_TYPE_F32, 2, ne_a, f), *p16 = rg_leaf(g, "p16", RG_TYPE_F16, 2, ne_a, h);
    rg_node *gr = rg_leaf(g, "g", RG_TYPE_F32, 2, ne_a, f), *mm = rg_leaf(g, "m", RG_TYPE_F32, 2, ne_a, f);
    rg_node *vv = rg_leaf(g, "v", RG_TYPE_F32, 2, ne_a, f), *ms = rg_leaf(g, "master", RG_TYPE_F32, 2, ne_a, f);
    const rg_adamw_step s = {1e-3f, 0.1f, 0.999f, 1e-3f, 1e-8f, 1.0f, 0.1f, 1.0f};
    const rg_optim_half sr = {NULL, 7, 1, 3}, mw = {ms, 7, 1, 3};
    rg_node *lce = rg_linear_ce(g, w16, hh, labels, -100, 0), *lceq = rg_linear_ce(g, aq8, hh, labels, -100, 0);
    struct {
        const char *what;
        rg_node *n;
        bool gpu;
    } rows[] = {
        {"out_prod f32", rg_out_prod(g, a32, b), true},
        {"out_prod f16", rg_out_prod(g, a16, b), true},
        {"out_prod bf16, b^T", rg_out_prod(g, abf, bt), true},
        {"out_prod f16 a^T", rg_out_prod(g, rg_transpose(g, rg_leaf(g, "a16t", RG_TYPE_F16, 2, (int64_t[]){8, 16}, h)), b), false},
        {"out_prod q8_0", rg_out_prod(g, aq8, rg_leaf(g, "b2", RG_TYPE_F32, 2, (int64_t[]){12, 64}, f)), true},
        {"linear_ce f16", lce, true},
        {"linear_ce q8_0", lceq, true},
        {"linear_ce_back q8_0 + dw", rg_linear_ce_back(g, rg_fill(g, RG_TYPE_F32, 1, (int64_t[]){7}, 1.0f), lceq, true), false},
        {"linear_ce_back f16 + dw", rg_linear_ce_back(g, rg_fill(g, RG_TYPE_F32, 1, (int64_t[]){7}, 1.0f), lce, true), true},
        {"adamw f32", rg_adamw(g, p32, gr, mm, vv, &s), true},
        {"adamw f16 SR", rg_adamw_half(g, p16, gr, mm, vv, &s, &sr), true},
        {"sgd f16 master", rg_sgd_half(g, p16, gr, 0.1f, 0.0f, 1.0f, &mw), true},
    };
    rg_error err = {0};
    RG_REQUIRE(rg_graph_error(g, &err) == RG_OK, "%s", err.msg);
    const int compiled = rg_cuda_compiled();
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const bool got = rg_op_cell_runs(RG_BACKEND_CUDA, rows[i].n), want = compiled && rows[i].gpu;
        printf("    %-26s %s\n", rows[i].what, got ? "gpu" : "cpu");
        RG_CHECK(got == want, "%s: the CUDA cell says %d, expected %d", rows[i].what, got, want);
    }
    static const rg_op ops[] = {RG_OP_LINEAR_CE, RG_OP_LINEAR_CE_BACK, RG_OP_ADAMW, RG_OP_SGD};
    for (size_t i = 0; compiled && i < sizeof ops / sizeof *ops; i++) {
        const char *t = rg_op_cell(RG_BACKEND_CUDA, ops[i]).types;
        // The fused loss also takes a quantized head (ops_linear_ce.cu; test_cuda_loss_quant).
        RG_CHECK(t && !strncmp(t, "f32, f16, bf16", 14), "%s lists types '%s'", rg_op_name(ops[i]), t ? t : "(null)");
    }
    // OUT_PROD: the float types, then the quantized types the device decodes (test_cuda_quant_mm)
    const char *op_types = compiled ? rg_op_cell(RG_BACKEND_CUDA, RG_OP_OUT_PROD).types : NULL;
    RG_CHECK(!compiled || (op_types && !strncmp(op_types, "f32, f16, bf16, ", 16) && strstr(op_types, ", q8_0")),
             "out_prod lists types '%s'", op_types ? op_types : "(null)");
    rg_graph_free(g);
}

// ---------------------------------------------------------------------------
// OUT_PROD

typedef struct op_case {
    const char *what;
    int64_t M, K, N, b2, b3, c2, c3;
    int a_pad;        // a's rows (along M) padded: a strided view
    int a_trans;      // a is the transpose of a leaf [K, M] (f32 only)
    int b_trans;      // b is the transpose of a leaf [K, N]
    int budget_mb;    // RETRO_CUDA_DEQUANT_BUDGET_MB (0: default)
} op_case;

// The type CUDA's tensor path rounds an f32 operand to in a product with a `wt` weight
// (RETRO_CUDA_HALF_GEMM=tensor, the default; cuda.h), or RG_TYPE_F32 when it is not taken.
static uint32_t tensor_round(uint32_t wt) {
    const bool half = wt == RG_TYPE_F16 || wt == RG_TYPE_BF16;
    return half && rg_cuda_half_gemm_env(NULL, 0) == RG_CUDA_HALF_GEMM_TENSOR ? wt : (uint32_t)RG_TYPE_F32;
}

static double rounded(double v, uint32_t type) {
    float f = (float)v;
    round_to(&f, 1, type);
    return f;
}

// The bound of one output element: 1e-5 * sum_k |a_ik b_jk|; returns the number beyond it and the worst |d|.
// On the tensor path (rt F16/BF16) b is rounded to rt first and the device is compared with
// the double sum of those exact products instead of the CPU's F32 result: the rounding is
// the only approximation the path adds, so the bound stays the F32 summation's.
static int64_t out_prod_compare(const rg_tensor *a, const rg_tensor *b, const op_case *k, const float *gpu,
                                const float *cpu, uint32_t rt, double *maxd) {
    int64_t bad = 0;
    *maxd = 0;
    const int64_t r2 = k->c2 / k->b2, r3 = k->c3 / k->b3;
    for (int64_t i3 = 0; i3 < k->c3; i3++)
        for (int64_t i2 = 0; i2 < k->c2; i2++)
            for (int64_t j = 0; j < k->N; j++)
                for (int64_t i = 0; i < k->M; i++) {
                    double mag = 0, ref = 0;
                    for (int64_t kk = 0; kk < k->K; kk++) {
                        const char *pa = (const char *)a->data + i * a->nb[0] + kk * a->nb[1] + (i2 / r2) * a->nb[2] +
                                         (i3 / r3) * a->nb[3];
                        const char *pb = (const char *)b->data + j * b->nb[0] + kk * b->nb[1] + i2 * b->nb[2] + i3 * b->nb[3];
                        float av, bv;
                        uint16_t hv;
                        if (a->type == RG_TYPE_F32) memcpy(&av, pa, 4);
                        else memcpy(&hv, pa, 2), av = a->type == RG_TYPE_F16 ? rg_fp16_to_fp32(hv) : rg_bf16_to_fp32(hv);
                        memcpy(&bv, pb, 4);
                        const double bq = rounded(bv, rt);
                        mag += fabs((double)av * bq), ref += (double)av * bq;
                    }
                    const int64_t o = ((i3 * k->c2 + i2) * k->N + j) * k->M + i;
                    const double d = fabs((double)gpu[o] - (rt != RG_TYPE_F32 ? ref : cpu[o]));
                    if (d > *maxd || d != d) *maxd = d;
                    if (!(d <= 1e-5 * mag)) bad++;
                }
    return bad;
}

static void test_cuda_out_prod_parity(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const op_case cases[] = {
        {"plain", 67, 33, 29, 1, 1, 1, 1, 0, 0, 0, 0},
        {"b transposed (dY^T)", 40, 70, 23, 1, 1, 1, 1, 0, 0, 1, 0},
        {"a transposed", 31, 20, 17, 1, 1, 1, 1, 0, 1, 0, 0},
        {"batched", 12, 9, 7, 3, 2, 3, 2, 0, 0, 0, 0},
        {"broadcast r2=3 r3=2", 16, 10, 5, 2, 1, 6, 2, 0, 0, 1, 0},
        {"strided a", 33, 12, 9, 2, 1, 2, 1, 5, 0, 0, 0},
        {"K=1, N=1", 65, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
        {"M=1", 1, 300, 3, 1, 1, 1, 1, 0, 0, 1, 0},
        {"sliced widening", 2100, 130, 3, 1, 1, 1, 1, 0, 0, 0, 1},
    };
    static const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t ti = 0; ti < 3; ti++) {
            const op_case *k = &cases[c];
            const uint32_t at = types[ti];
            if (k->a_trans && at != RG_TYPE_F32) continue;  // both sides take a half a with packed rows only
            const int64_t na = k->M * k->K * k->b2 * k->b3, nbv = k->N * k->K * k->c2 * k->c3;
            const int64_t ny = k->M * k->N * k->c2 * k->c3;
            float *av = randn(na, 100 + c, 1.0f), *bv = randn(nbv, 200 + c, 1.0f);
            round_to(av, na, at);
            float *gpu = malloc((size_t)ny * 4), *cpu = malloc((size_t)ny * 4);
            void *abytes = NULL, *bbytes = NULL;
            rg_graph *g = rg_graph_new();
            const int64_t ane[4] = {k->M, k->K, k->b2, k->b3}, bne[4] = {k->N, k->K, k->c2, k->c3};
            rg_node *la = k->a_trans ? leaf_transposed(g, "a", at, ane, av, &abytes)
                                     : leaf_padded(g, "a", at, ane, k->a_pad, av, &abytes);
            rg_node *lb = k->b_trans ? leaf_transposed(g, "b", RG_TYPE_F32, bne, bv, &bbytes)
                                     : leaf_padded(g, "b", RG_TYPE_F32, bne, 0, bv, &bbytes);
            rg_node *y = rg_out_prod(g, la, lb);
            if (k->budget_mb) setenv("RETRO_CUDA_DEQUANT_BUDGET_MB", "1", 1);
            rg_error err = {0};
            rg_exec_stats s = {0};
            rg_status st = run_read(g, RG_DEVICE_CUDA, &y, &gpu, 1, false, &s, &err);
            if (k->budget_mb) unsetenv("RETRO_CUDA_DEQUANT_BUDGET_MB");
            RG_CHECK(st == RG_OK, "out_prod %s %s on cuda: %s", k->what, type_name(at), err.msg);
            if (!st) st = run_read(g, RG_DEVICE_CPU, &y, &cpu, 1, false, NULL, &err);
            RG_CHECK(st == RG_OK, "out_prod %s %s on the cpu: %s", k->what, type_name(at), err.msg);
            if (!st) {
                double maxd;
                const uint32_t rt = tensor_round(at);
                const int64_t bad = out_prod_compare(&la->t, &lb->t, k, gpu, cpu, rt, &maxd);
                char shape[96];
                snprintf(shape, sizeof shape, "%s a[%lld,%lld,%lld,%lld] b[%lld,%lld,%lld,%lld]", k->what,
                         (long long)k->M, (long long)k->K, (long long)k->b2, (long long)k->b3, (long long)k->N,
                         (long long)k->K, (long long)k->c2, (long long)k->c3);
                table_line("out_prod", type_name(at), shape, maxd,
                           rt != RG_TYPE_F32 ? "1e-5 sum|a b^| (b^ = b in a's type)" : "1e-5 sum|a b|", bad == 0);
                RG_CHECK(bad == 0, "out_prod %s %s: %lld of %lld outputs beyond the bound", k->what, type_name(at),
                         (long long)bad, (long long)ny);
                check_device_only(&s, 1, "out_prod");
            }
            rg_graph_free(g);
            free(av), free(bv), free(gpu), free(cpu), free(abytes), free(bbytes);
        }
}

// MUL_MAT's backward: dW = out_prod(x, dy) and dx = out_prod(W, dy^T) on the device. The loss
// sum(y * c) makes dy = c exactly on both sides, so the reference bound is OUT_PROD's.
static void test_cuda_out_prod_in_backward(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    enum { K = 48, M = 37, N = 21 };
    static const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16};
    for (size_t ti = 0; ti < 3; ti++) {
        const uint32_t wt = types[ti];
        float *wv = randn(K * M, 300, 0.5f), *xv = randn(K * N, 301, 1.0f), *cv = randn(M * N, 302, 1.0f);
        round_to(wv, K * M, wt);
        void *wb = as_type(wv, K * M, wt);
        float *res[2][2];
        int on_dev = 0, total = 0, ok = 1;
        for (int dev = 0; dev < 2 && ok; dev++) {
            rg_graph *g = rg_graph_new();
            rg_node *w = rg_param(g, "w", wt, 2, (int64_t[]){K, M}, wb);
            rg_node *x = rg_param(g, "x", RG_TYPE_F32, 2, (int64_t[]){K, N}, xv);
            rg_node *cst = rg_leaf(g, "c", RG_TYPE_F32, 2, (int64_t[]){M, N}, cv);
            rg_node *loss = rg_sum(g, rg_mul(g, rg_mul_mat(g, w, x), cst));
            rg_error err = {0};
            rg_status st = rg_graph_error(g, &err);
            if (!st) st = rg_graph_backward(g, loss, &err);
            res[dev][0] = malloc(K * M * 4), res[dev][1] = malloc(K * N * 4);
            rg_node *outs[2] = {w->grad, x->grad};
            if (!st) st = run_read(g, dev ? RG_DEVICE_CPU : RG_DEVICE_CUDA, outs, res[dev], 2, false, NULL, &err);
            if (!st && dev == 0) on_dev = count_on_device(g, RG_OP_OUT_PROD, &total);
            RG_CHECK(st == RG_OK, "%s backward on %s: %s", type_name(wt), dev ? "the cpu" : "cuda", err.msg);
            ok = st == RG_OK;
            rg_graph_free(g);
        }
        if (ok) {
            RG_CHECK(total == 2 && on_dev == 2, "%d of %d out_prod nodes ran on the device", on_dev, total);
            // dW[k, m] = sum_n x[k, n] c[m, n]; dx[k, n] = sum_m w[k, m] c[m, n]. On the tensor
            // path (rt) c, and for dW x too, are rounded to the weight's type, and the device
            // is compared with the double sum of those products (out_prod_compare's rule).
            const uint32_t rt = tensor_round(wt);
            double maxd = 0;
            int64_t bad = 0;
            for (int q = 0; q < 2; q++)
                for (int64_t kk = 0; kk < K; kk++)
                    for (int64_t o = 0; o < (q ? N : M); o++) {
                        double mag = 0, ref = 0;
                        for (int64_t r = 0; r < (q ? M : N); r++) {
                            const double p = q ? (double)wv[r * K + kk] * rounded(cv[o * M + r], rt)
                                               : rounded(xv[r * K + kk], rt) * rounded(cv[r * M + o], rt);
                            mag += fabs(p), ref += p;
                        }
                        const double d = fabs((double)res[0][q][o * K + kk] - (rt != RG_TYPE_F32 ? ref : res[1][q][o * K + kk]));
                        if (d > maxd || d != d) maxd = d;
                        if (!(d <= 1e-5 * mag)) bad++;
                    }
            table_line("out_prod (bw)", type_name(wt), "dW, dx of mul_mat w[48,37] x[48,21]", maxd,
                       rt != RG_TYPE_F32 ? "1e-5 sum|a^ b^| (in w's type)" : "1e-5 sum|a b|", bad == 0);
            RG_CHECK(bad == 0, "%s: %lld gradient elements beyond the bound", type_name(wt), (long long)bad);
        }
        for (int dev = 0; dev < 2; dev++) free(res[dev][0]), free(res[dev][1]);
        free(wv), free(xv), free(cv), free(wb);
    }
}

// ---------------------------------------------------------------------------
// LINEAR_CE and LINEAR_CE_BACK

typedef struct lce_case {
    const char *what;
    int64_t d, V, T, chunk;
    int ignore_every;  // every n-th label is ignored (0: none; 1: all)
    float inv_n;       // fp[0]: 0 = counted
    int w_pad;         // w's rows padded (a view of a wider leaf)
} lce_case;

static const lce_case lce_cases[] = {
    {"auto chunk", 64, 300, 17, 0, 0, 0.0f, 0},
    {"chunk 37, ignored", 40, 301, 33, 37, 3, 0.0f, 0},
    {"given 1/N, padded w", 24, 1000, 5, 128, 0, 0.02f, 3},
    {"one token", 16, 129, 1, 64, 0, 0.0f, 0},
    {"all ignored", 16, 70, 6, 32, 1, 0.0f, 0},
};

// The double reference of one case: z [T, V], lse [T], S_t = max_v sum_k |w h|.
typedef struct lce_ref {
    double *z, *lse, *S;
} lce_ref;

static lce_ref lce_reference(const lce_case *k, const float *w, const float *h) {
    lce_ref r = {malloc(sizeof(double) * k->T * k->V), malloc(sizeof(double) * k->T), malloc(sizeof(double) * k->T)};
    for (int64_t t = 0; t < k->T; t++) {
        double mx = -INFINITY, S = 0;
        for (int64_t v = 0; v < k->V; v++) {
            double z = 0, mag = 0;
            for (int64_t i = 0; i < k->d; i++) z += (double)w[v * k->d + i] * h[t * k->d + i], mag += fabs((double)w[v * k->d + i] * h[t * k->d + i]);
            r.z[t * k->V + v] = z;
            mx = z > mx ? z : mx, S = mag > S ? mag : S;
        }
        double sum = 0;
        for (int64_t v = 0; v < k->V; v++) sum += exp(r.z[t * k->V + v] - mx);
        r.lse[t] = mx + log(sum), r.S[t] = S;
    }
    return r;
}

static void lce_ref_free(lce_ref *r) { free(r->z), free(r->lse), free(r->S); }

static int32_t *lce_labels(const lce_case *k) {
    int32_t *l = malloc(sizeof(int32_t) * k->T);
    for (int64_t t = 0; t < k->T; t++)
        l[t] = k->ignore_every && t % k->ignore_every == 0 ? -100 : (int32_t)((rg_rng_u64(3, 9, (uint64_t)t) % (uint64_t)k->V));
    return l;
}

static double lce_inv_n(const lce_case *k, const int32_t *labels) {
    int64_t cnt = 0;
    for (int64_t t = 0; t < k->T; t++) cnt += labels[t] != -100;
    return k->inv_n > 0 ? k->inv_n : cnt ? 1.0 / (double)cnt : 0.0;
}

static void test_cuda_linear_ce_parity(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16};
    for (size_t c = 0; c < sizeof lce_cases / sizeof *lce_cases; c++)
        for (size_t ti = 0; ti < 3; ti++) {
            const lce_case *k = &lce_cases[c];
            const uint32_t wt = types[ti];
            float *w = randn(k->d * k->V, 400 + c, 0.4f), *h = randn(k->d * k->T, 500 + c, 1.0f);
            round_to(w, k->d * k->V, wt);
            // The tensor path (a half head) rounds h to w's type; with h already representable the
            // device and the CPU multiply the same values, and the bounds below hold unchanged.
            round_to(h, k->d * k->T, tensor_round(wt));
            int32_t *labels = lce_labels(k);
            float *gpu = malloc(sizeof(float) * (k->T + 1)), *cpu = malloc(sizeof(float) * (k->T + 1));
            void *wb = NULL;
            rg_graph *g = rg_graph_new();
            rg_node *lw = leaf_padded(g, "w", wt, (int64_t[]){k->d, k->V, 1, 1}, k->w_pad, w, &wb);
            rg_node *lh = rg_leaf(g, "h", RG_TYPE_F32, 2, (int64_t[]){k->d, k->T}, h);
            rg_node *ll = rg_leaf(g, "labels", RG_TYPE_I32, 1, (int64_t[]){k->T}, labels);
            rg_node *lce = rg_linear_ce(g, lw, lh, ll, -100, k->chunk);
            if (lce) lce->fp[0] = k->inv_n;
            rg_error err = {0};
            rg_exec_stats s = {0};
            rg_status st = run_read(g, RG_DEVICE_CUDA, &lce, &gpu, 1, false, &s, &err);
            RG_CHECK(st == RG_OK, "linear_ce %s %s on cuda: %s", k->what, type_name(wt), err.msg);
            if (!st) st = run_read(g, RG_DEVICE_CPU, &lce, &cpu, 1, false, NULL, &err);
            RG_CHECK(st == RG_OK, "linear_ce %s %s on the cpu: %s", k->what, type_name(wt), err.msg);
            if (!st) {
                lce_ref r = lce_reference(k, w, h);
                const double inv_n = lce_inv_n(k, labels);
                double maxd = 0, loss_tol = 0;
                int64_t bad = 0;
                for (int64_t t = 0; t < k->T; t++) {
                    const double d = fabs((double)gpu[1 + t] - cpu[1 + t]);
                    const double tol = labels[t] == -100 ? 0 : 2e-5 * r.S[t] + 5e-7 + 2e-7 * fabs(r.lse[t]);
                    if (labels[t] != -100) loss_tol += inv_n * (tol + 2e-5 * r.S[t]);
                    if (d > maxd || d != d) maxd = d;
                    if (!(d <= tol)) bad++;
                }
                loss_tol += 2e-7 * fabs((double)cpu[0]);
                const double dl = fabs((double)gpu[0] - cpu[0]);
                if (dl > maxd || dl != dl) maxd = dl;
                char shape[96], tol[40];
                snprintf(shape, sizeof shape, "%s d=%lld V=%lld T=%lld", k->what, (long long)k->d, (long long)k->V,
                         (long long)k->T);
                snprintf(tol, sizeof tol, "2e-5 S_t+ (loss %.1e)", loss_tol);
                table_line("linear_ce", type_name(wt), shape, maxd, tol, bad == 0 && dl <= loss_tol);
                RG_CHECK(bad == 0, "linear_ce %s %s: %lld of %lld lse beyond the bound", k->what, type_name(wt),
                         (long long)bad, (long long)k->T);
                RG_CHECK(dl <= loss_tol, "linear_ce %s %s: loss %.9g on cuda, %.9g on the cpu (tol %.3g)", k->what,
                         type_name(wt), gpu[0], cpu[0], loss_tol);
                if (k->ignore_every == 1)
                    for (int64_t t = 0; t <= k->T; t++) RG_CHECK(gpu[t] == 0.0f, "all ignored: out[%lld] = %g", (long long)t, gpu[t]);
                check_device_only(&s, 1, "linear_ce");
                lce_ref_free(&r);
            }
            rg_graph_free(g);
            free(w), free(h), free(labels), free(gpu), free(cpu), free(wb);
        }
}

// A label outside [0, V) that is not ignored: the CPU names it; the device, which cannot
// return an error without a synchronization, makes the loss NaN (the exec's loss check then
// names the node) and leaves the other tokens' lse as they are.
static void test_cuda_linear_ce_bad_label(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    enum { D = 8, V = 50, T = 4 };
    float *w = randn(D * V, 450, 0.5f), *h = randn(D * T, 451, 1.0f), out[T + 1];
    int32_t labels[T] = {3, V, 7, -100};
    rg_graph *g = rg_graph_new();
    rg_node *lce = rg_linear_ce(g, rg_leaf(g, "w", RG_TYPE_F32, 2, (int64_t[]){D, V}, w),
                                rg_leaf(g, "h", RG_TYPE_F32, 2, (int64_t[]){D, T}, h),
                                rg_leaf(g, "labels", RG_TYPE_I32, 1, (int64_t[]){T}, labels), -100, 0);
    float *dst = out;
    rg_error err = {0};
    RG_CHECK(run_read(g, RG_DEVICE_CPU, &lce, &dst, 1, false, NULL, &err) != RG_OK && strstr(err.msg, "position 1"),
             "the cpu: '%s'", err.msg);
    RG_CHECK(run_read(g, RG_DEVICE_CUDA, &lce, &dst, 1, false, NULL, &err) == RG_OK, "cuda: %s", err.msg);
    RG_CHECK(out[0] != out[0] && out[1] == out[1] && out[3] == out[3] && out[4] == 0.0f,
             "cuda: loss %g, lse %g %g %g %g", out[0], out[1], out[2], out[3], out[4]);
    printf("    label %d with V = %d: the cpu refuses it, cuda gives the loss %g\n", V, V, out[0]);
    rg_graph_free(g);
    free(w), free(h);
}

// The bound of LINEAR_CE_BACK's outputs for a given dy (header): tol_dh [d, T], tol_dw [d, V].
// u: the unit roundoff the device's G carries on the tensor path (0 otherwise): G is rounded
// to w's type before the two products, u |G| per term more.
static void lce_back_bounds(const lce_case *k, const float *w, const float *h, const int32_t *labels, const float *dy,
                            const lce_ref *r, double u, double *tol_dh, double *tol_dw) {
    const double inv_n = lce_inv_n(k, labels), coef0 = (double)dy[0] * inv_n;
    memset(tol_dh, 0, sizeof(double) * k->d * k->T);
    memset(tol_dw, 0, sizeof(double) * k->d * k->V);
    for (int64_t t = 0; t < k->T; t++) {
        if (labels[t] == -100) continue;
        const double ct = coef0 + dy[1 + t], rel = 4e-5 * r->S[t] + 1e-6;
        for (int64_t v = 0; v < k->V; v++) {
            const double e = exp(r->z[t * k->V + v] - r->lse[t]);
            const double G = e * ct - (v == labels[t] ? coef0 : 0);
            // F16's subnormals (below 2^-14) are spaced 2^-24 apart: a rounded G is off by up to 2^-25 there
            const double term = fabs(ct) * e * rel + (2e-5 + u) * fabs(G) + (u == 0x1p-11 ? 0x1p-25 : 0.0);
            for (int64_t i = 0; i < k->d; i++) {
                tol_dh[t * k->d + i] += fabs((double)w[v * k->d + i]) * term;
                tol_dw[v * k->d + i] += fabs((double)h[t * k->d + i]) * term;
            }
        }
    }
}

static int64_t count_beyond(const float *gpu, const float *cpu, const double *tol, int64_t n, double *maxd) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)gpu[i] - cpu[i]);
        if (d > *maxd || d != d) *maxd = d;
        if (!(d <= tol[i] + 1e-30)) bad++;
    }
    return bad;
}

// LINEAR_CE_BACK straight from a random dy [T + 1] (the lse outputs' gradient too), with and
// without dw; and the gradients of the graph's own backward of sum(c * linear_ce(w, h)).
static void test_cuda_linear_ce_back_parity(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16};
    for (size_t c = 0; c < sizeof lce_cases / sizeof *lce_cases; c++)
        for (size_t ti = 0; ti < 3; ti++)
            for (int mode = 0; mode < 3; mode++) {  // 0: dh only, 1: dh and dw, 2: rg_graph_backward
                const lce_case *k = &lce_cases[c];
                const uint32_t wt = types[ti];
                const int64_t d = k->d, V = k->V, T = k->T;
                float *w = randn(d * V, 600 + c, 0.4f), *h = randn(d * T, 700 + c, 1.0f);
                float *dy = randn(T + 1, 800 + c, 1.0f);
                round_to(w, d * V, wt);
                round_to(h, d * T, tensor_round(wt));  // as in test_cuda_linear_ce_parity; G is still rounded
                int32_t *labels = lce_labels(k);
                float *res[2][2];
                for (int dev = 0; dev < 2; dev++) res[dev][0] = malloc(4 * d * T), res[dev][1] = malloc(4 * d * V);
                int ok = 1, on_dev = 0, total = 0;
                rg_exec_stats s = {0};
                for (int dev = 0; dev < 2 && ok; dev++) {
                    rg_graph *g = rg_graph_new();
                    void *wb = NULL;
                    rg_node *lw, *lh;
                    if (mode == 2) {  // trained: both get gradients from rg_graph_backward
                        wb = as_type(w, d * V, wt);
                        lw = rg_param(g, "w", wt, 2, (int64_t[]){d, V}, wb);
                        lh = rg_param(g, "h", RG_TYPE_F32, 2, (int64_t[]){d, T}, h);
                    } else {
                        lw = leaf_padded(g, "w", wt, (int64_t[]){d, V, 1, 1}, k->w_pad, w, &wb);
                        lh = rg_leaf(g, "h", RG_TYPE_F32, 2, (int64_t[]){d, T}, h);
                    }
                    rg_node *ll = rg_leaf(g, "labels", RG_TYPE_I32, 1, (int64_t[]){T}, labels);
                    rg_node *lce = rg_linear_ce(g, lw, lh, ll, -100, k->chunk);
                    if (lce) lce->fp[0] = k->inv_n;
                    rg_node *outs[2] = {NULL, NULL};
                    rg_error err = {0};
                    rg_status st = RG_OK;
                    if (mode < 2) {
                        rg_node *ldy = rg_leaf(g, "dy", RG_TYPE_F32, 1, (int64_t[]){T + 1}, dy);
                        outs[0] = rg_linear_ce_back(g, ldy, lce, mode == 1);
                        if (mode == 1) outs[1] = rg_linear_ce_back_dw(g, outs[0]);
                    } else {
                        rg_node *cst = rg_leaf(g, "c", RG_TYPE_F32, 1, (int64_t[]){T + 1}, dy);
                        rg_node *loss = rg_sum(g, rg_mul(g, lce, cst));  // dy = c exactly
                        st = rg_graph_error(g, &err);
                        if (!st) st = rg_graph_backward(g, loss, &err);
                        if (!st) outs[0] = lh->grad, outs[1] = lw->grad;
                    }
                    if (!st) st = run_read(g, dev ? RG_DEVICE_CPU : RG_DEVICE_CUDA, outs, res[dev], mode ? 2 : 1, false,
                                           dev ? NULL : &s, &err);
                    if (!st && dev == 0) on_dev = count_on_device(g, RG_OP_LINEAR_CE_BACK, &total);
                    RG_CHECK(st == RG_OK, "linear_ce_back %s %s mode %d on %s: %s", k->what, type_name(wt), mode,
                             dev ? "the cpu" : "cuda", err.msg);
                    ok = st == RG_OK;
                    rg_graph_free(g);
                    free(wb);
                }
                if (ok) {
                    lce_ref r = lce_reference(k, w, h);
                    double *tol_dh = malloc(sizeof(double) * d * T), *tol_dw = malloc(sizeof(double) * d * V);
                    const uint32_t rt = tensor_round(wt);
                    const double u = rt == RG_TYPE_BF16 ? 0x1p-8 : rt == RG_TYPE_F16 ? 0x1p-11 : 0;
                    lce_back_bounds(k, w, h, labels, dy, &r, u, tol_dh, tol_dw);
                    double maxd = 0;
                    int64_t bad = count_beyond(res[0][0], res[1][0], tol_dh, d * T, &maxd);
                    if (mode) bad += count_beyond(res[0][1], res[1][1], tol_dw, d * V, &maxd);
                    static const char *const modes[3] = {"dh", "dh+dw", "backward"};
                    char shape[96];
                    snprintf(shape, sizeof shape, "%s %s d=%lld V=%lld T=%lld", modes[mode], k->what, (long long)d,
                             (long long)V, (long long)T);
                    table_line("linear_ce_back", type_name(wt), shape, maxd, u ? "sum|w| dG (+u|G|)" : "sum|w| dG (header)",
                               bad == 0);
                    RG_CHECK(bad == 0, "linear_ce_back %s %s mode %d: %lld outputs beyond the bound", k->what,
                             type_name(wt), mode, (long long)bad);
                    RG_CHECK(total == 1 && on_dev == 1, "linear_ce_back ran on the device %d of %d times", on_dev, total);
                    if (mode == 0) check_device_only(&s, 2, "linear_ce + linear_ce_back");
                    free(tol_dh), free(tol_dw);
                    lce_ref_free(&r);
                }
                for (int dev = 0; dev < 2; dev++) free(res[dev][0]), free(res[dev][1]);
                free(w), free(h), free(dy), free(labels);
            }
}

// ---------------------------------------------------------------------------
// ADAMW and SGD

typedef struct optim_case {
    const char *what;
    int adamw;
    uint32_t type;
    int master;
    int64_t n;
} optim_case;

// Per step: the start values and the step's scalars (decay at step 1, a clip at step 3).
static rg_adamw_step adamw_step_of(int t) {
    const double lr = 1e-3, b1 = 0.9, b2 = 0.999, wd = t == 1 ? 0.1 : 0.0;
    rg_adamw_step a = {(float)(lr / (1 - pow(b1, t))), (float)(1 - b1), (float)b2, (float)(1 - b2), 1e-8f,
                       (float)(1 - lr * wd), (float)sqrt(1 - pow(b2, t)), t == 3 ? 0.625f : 1.0f};
    return a;
}

// One step on (param, grad, m, v, master) in host memory, on `dev`; the leaves come back.
static rg_status optim_step(const optim_case *k, rg_device dev, int t, void *param, float *grad, float *m, float *v,
                            float *master, const rg_optim_half *key, rg_exec_stats *s, rg_error *err) {
    rg_graph *g = rg_graph_new();
    const int64_t ne[1] = {k->n};
    rg_node *p = rg_leaf(g, "p", k->type, 1, ne, param), *gr = rg_leaf(g, "g", RG_TYPE_F32, 1, ne, grad);
    rg_optim_half h = *key;
    h.master = k->master ? rg_leaf(g, "master", RG_TYPE_F32, 1, ne, master) : NULL;
    h.step = key->step ? key->step : (uint32_t)t;
    const rg_adamw_step a = adamw_step_of(t);
    rg_node *lm = k->adamw ? rg_leaf(g, "m", RG_TYPE_F32, 1, ne, m) : NULL;
    rg_node *lv = k->adamw ? rg_leaf(g, "v", RG_TYPE_F32, 1, ne, v) : NULL;
    const float lr = key->step ? -1.0f : 0.05f, wd = t == 1 && !key->step ? 0.01f : 0.0f, clip = t == 3 ? 0.625f : 1.0f;
    rg_node *step = k->adamw ? (k->type == RG_TYPE_F32 ? rg_adamw(g, p, gr, lm, lv, &a) : rg_adamw_half(g, p, gr, lm, lv, &a, &h))
                             : (k->type == RG_TYPE_F32 ? rg_sgd(g, p, gr, lr, wd, clip) : rg_sgd_half(g, p, gr, lr, wd, clip, &h));
    rg_status st = run_read(g, dev, NULL, NULL, 0, true, s, err);
    (void)step;
    rg_graph_free(g);
    return st;
}

// A half NaN (f16: exponent 31 and a mantissa; bf16: exponent 255 and a mantissa).
static int half_nan(uint32_t type, uint16_t h) {
    return type == RG_TYPE_F16 ? (h & 0x7C00) == 0x7C00 && (h & 0x3FF) : (h & 0x7F80) == 0x7F80 && (h & 0x7F);
}

// Element i of the device and host results agree: the same bits, or both NaN.
static int same_value(uint32_t type, const void *a, const void *b, int64_t i) {
    if (type == RG_TYPE_F32) {
        const uint32_t x = ((const uint32_t *)a)[i], y = ((const uint32_t *)b)[i];
        return x == y || (from_bits(x) != from_bits(x) && from_bits(y) != from_bits(y));
    }
    const uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
    return x == y || (half_nan(type, x) && half_nan(type, y));
}

// Runs 3 steps of case k on both sides from the same start; returns the elements that differ.
static int64_t optim_run(const optim_case *k, const rg_optim_half *key, const float *grads, int steps, rg_exec_stats *s,
                         rg_error *err, rg_status *st) {
    const int64_t n = k->n;
    const size_t esz = k->type == RG_TYPE_F32 ? 4 : 2;
    void *param[2];
    float *state[2];
    float *w0 = randn(n, 900, 0.5f);
    round_to(w0, n, k->type);
    for (int dev = 0; dev < 2; dev++) {
        param[dev] = key->step ? calloc((size_t)n, esz) : as_type(w0, n, k->type);  // SR probe: theta = 0
        state[dev] = calloc((size_t)n * 3, sizeof(float));
        memcpy(state[dev] + 2 * n, w0, sizeof(float) * n);  // the master starts at the weight's values
    }
    *st = RG_OK;
    for (int t = 1; t <= steps && !*st; t++)
        for (int dev = 0; dev < 2 && !*st; dev++)
            *st = optim_step(k, dev ? RG_DEVICE_CPU : RG_DEVICE_CUDA, t, param[dev], (float *)grads + (t - 1) * n,
                             state[dev], state[dev] + n, state[dev] + 2 * n, key, dev ? NULL : s, err);
    int64_t bad = 0;
    for (int64_t i = 0; i < n && !*st; i++) {
        int ok = same_value(k->type, param[0], param[1], i);
        for (int q = 0; q < 3; q++) ok = ok && same_value(RG_TYPE_F32, state[0] + q * n, state[1] + q * n, i);
        bad += !ok;
    }
    for (int dev = 0; dev < 2; dev++) free(param[dev]), free(state[dev]);
    free(w0);
    return bad;
}

static void test_cuda_optim_parity(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const optim_case cases[] = {
        {"adamw", 1, RG_TYPE_F32, 0, 100003}, {"adamw SR", 1, RG_TYPE_F16, 0, 100003},
        {"adamw SR", 1, RG_TYPE_BF16, 0, 4097}, {"adamw master", 1, RG_TYPE_F16, 1, 4097},
        {"adamw master", 1, RG_TYPE_BF16, 1, 100003}, {"sgd", 0, RG_TYPE_F32, 0, 100003},
        {"sgd SR", 0, RG_TYPE_F16, 0, 4099}, {"sgd SR", 0, RG_TYPE_BF16, 0, 100003},
        {"sgd master", 0, RG_TYPE_F16, 1, 100003}, {"sgd master", 0, RG_TYPE_BF16, 1, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const optim_case *k = &cases[c];
        float *grads = randn(3 * k->n, 1000 + c, 0.01f);
        const rg_optim_half key = {NULL, 0x0123456789ABCDEFull, 0, 0x00ABCDEF};
        rg_error err = {0};
        rg_status st;
        rg_exec_stats s = {0};
        const int64_t bad = optim_run(k, &key, grads, 3, &s, &err, &st);
        RG_CHECK(st == RG_OK, "%s %s: %s", k->what, type_name(k->type), err.msg);
        if (!st) {
            char shape[64];
            snprintf(shape, sizeof shape, "%s, 3 steps, n=%lld", k->what, (long long)k->n);
            table_line(k->adamw ? "adamw" : "sgd", type_name(k->type), shape, (double)bad, "0 (bits)", bad == 0);
            RG_CHECK(bad == 0, "%s %s: %lld of %lld elements (weight, m, v or master) differ", k->what,
                     type_name(k->type), (long long)bad, (long long)k->n);
            check_device_only(&s, 1, k->what);
        }
        free(grads);
    }
}

// Stochastic rounding on the device against the CPU's on many keys: SGD with lr = -1 from a
// zero parameter makes theta = grad exactly, so the stored half is SR(grad) for any f32 grad
// (all exponents, the f16 and bf16 edges, subnormals, Inf, NaN) under the key (seed, step,
// tensor id, element).
static void test_cuda_sr_keys(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const uint64_t seeds[] = {0, 1, 0x123456789ABCDEF0ull, 0xFFFFFFFFFFFFFFFFull};
    static const uint32_t steps[] = {1, 77, 0xFFFFFFFFu}, ids[] = {0, 5, 0xFFFFFFu};
    static const uint32_t types[] = {RG_TYPE_F16, RG_TYPE_BF16};
    int64_t keys = 0, bad = 0;
    for (int big = 0; big < 2; big++)
        for (size_t ti = 0; ti < 2; ti++) {
            const int64_t n = big ? 262147 : 4099;
            float *g = malloc(sizeof(float) * n);
            for (int64_t i = 0; i < n; i++) {
                const uint64_t r = rg_rng_u64(5, 70 + ti, (uint64_t)i);
                uint32_t u = (uint32_t)r;
                if (i % 2) u = (u & 0x807FFFFFu) | ((uint32_t)(90 + (r >> 40) % 70) << 23);  // exponents 2^-37 .. 2^32
                g[i] = from_bits(u);
            }
            static const uint32_t edges[] = {0x477FEFFFu, 0x477FF000u, 0x47800000u, 0x38800000u, 0x387FFFFFu,
                                             0x33800000u, 0x00000001u, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u,
                                             0x7FC00001u, 0x80000000u};
            for (size_t e = 0; e < sizeof edges / sizeof *edges; e++) g[e] = from_bits(edges[e]);
            for (size_t a = 0; a < 4; a++)
                for (size_t b = 0; b < 3; b++)
                    for (size_t c = 0; c < 3; c++) {
                        if (big && (a != 2 || b != 2 || c != 2)) continue;  // one key on the large tensor
                        const optim_case k = {"sr", 0, types[ti], 0, n};
                        const rg_optim_half key = {NULL, seeds[a], steps[b], ids[c]};
                        rg_error err = {0};
                        rg_status st;
                        bad += optim_run(&k, &key, g, 1, NULL, &err, &st);
                        RG_REQUIRE(st == RG_OK, "sr %s: %s", type_name(types[ti]), err.msg);
                        keys += n;
                    }
            free(g);
        }
    char shape[64];
    snprintf(shape, sizeof shape, "SR(grad) over %lld (key, value) pairs", (long long)keys);
    table_line("sgd lr=-1", "f16+", shape, (double)bad, "0 (bits)", bad == 0);
    RG_CHECK(bad == 0, "%lld of %lld stochastic roundings differ from the CPU's", (long long)bad, (long long)keys);
}

// ---------------------------------------------------------------------------
// A graph of these ops alone lives on the device: the loss, the hidden states' gradient,
// a weight-gradient product and an AdamW step on h, with no copy inside the run.
static void test_cuda_train_graph_resident(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    enum { D = 32, V = 200, T = 9 };
    float *w = randn(D * V, 1100, 0.3f), *h = randn(D * T, 1101, 1.0f), *dy = randn(T + 1, 1102, 1.0f);
    float *zeros = calloc(2 * D * T, sizeof(float));
    const lce_case k = {"resident", D, V, T, 48, 4, 0.0f, 0};
    int32_t *labels = lce_labels(&k);
    float *res[2][3];
    for (int dev = 0; dev < 2; dev++) res[dev][0] = malloc(4 * (T + 1)), res[dev][1] = malloc(4 * D * T), res[dev][2] = malloc(4 * D * D);
    float hcopy[2][D * T], mv[2][2 * D * T];
    rg_exec_stats s = {0};
    for (int dev = 0; dev < 2; dev++) {
        memcpy(hcopy[dev], h, sizeof hcopy[dev]);
        memcpy(mv[dev], zeros, sizeof mv[dev]);
        rg_graph *g = rg_graph_new();
        rg_node *lw = rg_leaf(g, "w", RG_TYPE_F32, 2, (int64_t[]){D, V}, w);
        rg_node *lh = rg_leaf(g, "h", RG_TYPE_F32, 2, (int64_t[]){D, T}, hcopy[dev]);
        rg_node *ll = rg_leaf(g, "labels", RG_TYPE_I32, 1, (int64_t[]){T}, labels);
        rg_node *ldy = rg_leaf(g, "dy", RG_TYPE_F32, 1, (int64_t[]){T + 1}, dy);
        rg_node *lm = rg_leaf(g, "m", RG_TYPE_F32, 2, (int64_t[]){D, T}, mv[dev]);
        rg_node *lv = rg_leaf(g, "v", RG_TYPE_F32, 2, (int64_t[]){D, T}, mv[dev] + D * T);
        rg_node *lce = rg_linear_ce(g, lw, lh, ll, -100, 48);
        rg_node *dh = rg_linear_ce_back(g, ldy, lce, false);
        rg_node *hh = rg_out_prod(g, lh, dh);  // [D, D]
        const rg_adamw_step a = adamw_step_of(1);
        rg_node *step = rg_adamw(g, lh, dh, lm, lv, &a);
        (void)step;
        rg_node *outs[3] = {lce, dh, hh};
        rg_error err = {0};
        rg_status st = run_read(g, dev ? RG_DEVICE_CPU : RG_DEVICE_CUDA, outs, res[dev], 3, true, dev ? NULL : &s, &err);
        RG_CHECK(st == RG_OK, "resident graph on %s: %s", dev ? "the cpu" : "cuda", err.msg);
        rg_graph_free(g);
    }
    printf("    resident graph: gpu nodes %d, cpu nodes %d, copies inside the run %d, uploads at setup %llu\n",
           s.nodes_gpu, s.nodes_cpu, s.copies_scheduled, (unsigned long long)s.setup_copies);
    RG_CHECK(s.nodes_gpu == 4 && s.nodes_cpu == 0 && s.nodes_fallback == 0,
             "nodes gpu %d cpu %d fallback %d, expected 4, 0, 0", s.nodes_gpu, s.nodes_cpu, s.nodes_fallback);
    RG_CHECK(s.copies_scheduled == 0 && s.copies_to_device == 0 && s.copies_to_host == 0,
             "%d copies scheduled inside the run", s.copies_scheduled);
    RG_CHECK(s.setup_copies == 6, "uploads at setup %llu, expected 6 (w, h, labels, dy, m, v)",
             (unsigned long long)s.setup_copies);
    // The values agree as the parity cases bound them (loose here: 1e-3 relative); the step moved h.
    double maxd = 0;
    for (int q = 0; q < 3; q++)
        for (int64_t i = 0; i < (q == 0 ? T + 1 : q == 1 ? D * T : D * D); i++) {
            const double d = fabs((double)res[0][q][i] - res[1][q][i]) / (1e-3 + fabs((double)res[1][q][i]));
            maxd = d > maxd ? d : maxd;
        }
    RG_CHECK(maxd < 1e-3, "the resident graph's outputs differ by %.3g (relative)", maxd);
    RG_CHECK(memcmp(hcopy[0], h, sizeof hcopy[0]) != 0, "the AdamW step did not change h on the device");
    for (int dev = 0; dev < 2; dev++) free(res[dev][0]), free(res[dev][1]), free(res[dev][2]);
    free(w), free(h), free(dy), free(zeros), free(labels);
}


// ---------------------------------------------------------------------------
// The global norm: the optimizer graph's norm segment (rg_optim_graph: SUMSQ over the
// tensors in order, then CLIP_COEF) on the same gradients on the device and on the CPU gives
// the same sum of squares and clip, bit for bit, and the host's rg_grad_global_norm agrees.

static void test_cuda_global_norm_bits(void) {
    if (!have_gpu()) RG_SKIP("no CUDA device: %s", why);
    static const int64_t sizes[] = {1, 37, 4096, 5000, 100003, 3 * 4096};
    enum { N = sizeof sizes / sizeof sizes[0] };
    rg_train_tensor ts[N];
    float *bufs[N][4];
    memset(ts, 0, sizeof ts);
    for (int k = 0; k < N; k++) {
        for (int j = 0; j < 4; j++) bufs[k][j] = randn(sizes[k], 100 + 4 * (uint64_t)k + (uint64_t)j, j == 1 ? 0.3f : 0.0f);
        rg_train_tensor *t = &ts[k];
        snprintf(t->name, sizeof t->name, "t%d", k);
        t->id = (uint32_t)k, t->type = RG_TYPE_F32, t->n_dims = 1, t->ne[0] = sizes[k], t->nel = sizes[k];
        t->ne[1] = t->ne[2] = t->ne[3] = 1;
        t->w = bufs[k][0], t->grad = bufs[k][1], t->m = bufs[k][2], t->v = bufs[k][3], t->decay = true;
    }
    const rg_optim_graph_opts oo = {.optimizer = 0, .seed = 1, .norm = true, .max_norm = 0.3};
    double total[2] = {0, 0};
    float clip[2] = {0, 0};
    for (int d = 0; d < 2; d++) {
        rg_optim_graph og;
        rg_error err = {0};
        RG_REQUIRE(rg_optim_graph_build(&og, ts, N, &oo, &err) == RG_OK, "%s", err.msg);
        rg_node *coef = NULL;  // the CLIP_COEF node, the first of the update segment
        for (int i = og.seg_norm; i < og.g->n_nodes && !coef; i++)
            if (og.g->nodes[i]->op == RG_OP_CLIP_COEF) coef = og.g->nodes[i];
        RG_REQUIRE(coef, "the optimizer graph has no clip_coef node");
        coef->flags |= RG_NODE_OUTPUT;
        rg_exec *ex = NULL;
        rg_exec_opts o = {.n_threads = 2, .device = d ? RG_DEVICE_CUDA : RG_DEVICE_CPU};
        rg_status st = rg_exec_create(&ex, og.g, &o, &err);
        if (!st) st = rg_exec_run(ex, 0, og.seg_norm + 1, &err);  // the norm and the clip, no update
        if (!st) st = rg_exec_read(ex, og.total, &total[d], sizeof total[d], &err);
        if (!st) st = rg_exec_read(ex, coef, &clip[d], sizeof clip[d], &err);
        RG_CHECK(st == RG_OK, "%s: %s", d ? "cuda" : "cpu", err.msg);
        int on = 0, n_sumsq = 0;
        if (d) on = count_on_device(og.g, RG_OP_SUMSQ, &n_sumsq);
        RG_CHECK(!d || on == n_sumsq, "%d of %d sumsq nodes ran on the device", on, n_sumsq);
        rg_exec_free(ex);
        rg_optim_graph_free(&og);
    }
    const double host = rg_grad_global_norm(ts, N, NULL);
    const int same = memcmp(&total[0], &total[1], sizeof total[0]) == 0 && memcmp(&clip[0], &clip[1], sizeof clip[0]) == 0;
    table_line("sumsq+clip", "f32", "6 tensors, 1..100003 elements", fabs(total[1] - total[0]), "0 (bits)", same);
    printf("    norm %.17g (cpu) %.17g (cuda) %.17g (rg_grad_global_norm), clip %.9g\n", sqrt(total[0]), sqrt(total[1]),
           host, (double)clip[1]);
    RG_CHECK(same, "the device's sum of squares %.17g or clip %.9g differ from the CPU's %.17g, %.9g", total[1],
             (double)clip[1], total[0], (double)clip[0]);
    RG_CHECK(sqrt(total[0]) == host, "the graph's norm %.17g is not rg_grad_global_norm's %.17g", sqrt(total[0]), host);
    RG_CHECK(clip[0] == rg_clip_coef(host, 0.3), "clip %.9g, rg_clip_coef says %.9g", (double)clip[0],
             (double)rg_clip_coef(host, 0.3));
    for (int k = 0; k < N; k++)
        for (int j = 0; j < 4; j++) free(bufs[k][j]);
}

static const rg_test_case cases[] = {
    RG_TEST(test_cuda_train_support_table),
    RG_TEST(test_cuda_out_prod_parity),
    RG_TEST(test_cuda_out_prod_in_backward),
    RG_TEST(test_cuda_linear_ce_parity),
    RG_TEST(test_cuda_linear_ce_bad_label),
    RG_TEST(test_cuda_linear_ce_back_parity),
    RG_TEST(test_cuda_optim_parity),
    RG_TEST(test_cuda_global_norm_bits),
    RG_TEST(test_cuda_sr_keys),
    RG_TEST(test_cuda_train_graph_resident),
    {0},
};

int main(int argc, char **argv) {
    printf("cuda compiled: %s\n", rg_cuda_compiled() ? "yes" : "no");
    return rg_test_run(argc, argv, cases);
}
