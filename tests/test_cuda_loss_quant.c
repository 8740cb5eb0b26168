// test_cuda_loss_quant.c - the fused cross-entropy (LINEAR_CE, LINEAR_CE_BACK; src/cuda/ops_linear_ce.cu)
// with a quantized head on the CUDA device against the CPU's, through the executor, in both
// product modes (RETRO_CUDA_HALF_GEMM=f32 and tensor, read when each exec's device context is
// made), for every quantized type the device decodes: heads quantized from random values where
// the type has a quantizer, random blocks with a sane scale where it has none (the IQ1/IQ2/IQ3
// types). Each graph is the loss and its dh (a frozen head: no dw, which the cell refuses for a
// quantized w). Cases that need a device skip without one; run them on the CPU through the host
// execution of the CUDA code with RETRO_CUDA_HOST=1.
//
// Tolerances (S_t = max_v sum_k |w_kv h_kt| of the decoded head, u = 2^-8):
//   f32 mode   the decoded rows are the CPU's bits (rg_cu_dequant_rows), so only the summation
//              order differs, as for an F32 head (test_cuda_train.c's header): lse_t within
//              2e-5 S_t + 5e-7 + 2e-7 |lse_t|, the loss within inv_n sum_t (that + 2e-5 S_t) +
//              2e-7 |loss|; dh_kt within sum_v |w_kv| (|c_t| e_tv (4e-5 S_t + 1e-6) + 2e-5 |G_tv|).
//   tensor     the device multiplies w and h rounded to BF16 (G too, in the backward). Against a
//              double reference of those rounded operands the F32 bounds above hold (plus u |G|
//              per term for G's rounding); against the CPU's run on the unrounded operands each
//              logit moves by at most (2u + u^2) S_t more, so lse_t by that too, e_tv by a factor
//              within expm1(2 ((2u + u^2) + 2e-5) S_t), and dh by u |w| |G| per term more (w's
//              own rounding).
// The memory the loss holds on the device (the planned buffer: the LINEAR_CE output and dh; and
// the cells' scratch) is at most 1.1x the bytes of dh plus the chunk (its logits [T, chunk] and
// its decoded rows [d, chunk], f32).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "graph/plan.h"
#include "quant_fixture.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "cpu/cpu_ops.h"  // rg_linear_ce_chunk: the chunk both sides take

static char why[256];

static int have_gpu(void) { return rg_cuda_device_count(why, sizeof why) > 0; }

static const char *type_name(uint32_t t) { return rg_type_get(t)->name; }

// The quantized types the device decodes (cuda/dequant.cuh); the seed's FUSED_SPARSE_CE list
// first (Q4_0 .. Q6_K), which the CUDA cell must take.
static const uint32_t quant_types[] = {
    RG_TYPE_Q4_0,   RG_TYPE_Q4_1,    RG_TYPE_Q5_0,   RG_TYPE_Q5_1,  RG_TYPE_Q8_0,  RG_TYPE_Q2_K,   RG_TYPE_Q3_K,
    RG_TYPE_Q4_K,   RG_TYPE_Q5_K,    RG_TYPE_Q6_K,   RG_TYPE_IQ1_S, RG_TYPE_IQ1_M, RG_TYPE_IQ2_XXS, RG_TYPE_IQ2_XS,
    RG_TYPE_IQ2_S,  RG_TYPE_IQ3_XXS, RG_TYPE_IQ3_S,  RG_TYPE_IQ4_NL, RG_TYPE_IQ4_XS, RG_TYPE_TQ1_0, RG_TYPE_TQ2_0,
    RG_TYPE_MXFP4,  RG_TYPE_NVFP4,   RG_TYPE_Q1_0,   RG_TYPE_Q2_0,
};
enum { N_SEED_TYPES = 10 };

static float *randn(int64_t n, uint64_t stream, float scale) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    for (int64_t i = 0; p && i < n; i++) p[i] = scale * rg_rng_normal(13, stream, (uint64_t)i);
    return p;
}

static float bf16_round(float x) { return rg_bf16_to_fp32(rg_fp32_to_bf16(x)); }

// rows x per_row values of x as `type` (quant_fixture.h).
static void *make_quant(uint32_t type, const float *x, int64_t rows, int64_t per_row, uint64_t seed) {
    return rg_test_quant_fixture(type, x, rows, per_row, seed, "test head");
}

// The CPU's dequantized values of a [per_row, rows] tensor.
static float *dequant(uint32_t type, const void *q, int64_t rows, int64_t per_row) {
    float *w = malloc(sizeof(float) * (size_t)(rows * per_row));
    rg_error err = {0};
    if (rg_dequantize(type, q, w, rows * per_row, "test head", &err) != RG_OK) {
        printf("    dequantize %s: %s\n", type_name(type), err.msg);
        free(w);
        return NULL;
    }
    return w;
}

// ---------------------------------------------------------------------------
// Which nodes the CUDA cells take (any machine).

static void test_cuda_loss_quant_support(void) {
    enum { D = 256, V = 64, T = 6 };
    static float f[D * T];
    static uint8_t q[D * V * 2];
    static int32_t lab[T];
    const int compiled = rg_cuda_compiled();
    for (size_t i = 0; i < sizeof quant_types / sizeof *quant_types; i++) {
        const uint32_t wt = quant_types[i];
        rg_graph *g = rg_graph_new();
        rg_node *w = rg_leaf(g, "w", wt, 2, (int64_t[]){D, V}, q);
        rg_node *h = rg_leaf(g, "h", RG_TYPE_F32, 2, (int64_t[]){D, T}, f);
        rg_node *lce = rg_linear_ce(g, w, h, rg_leaf(g, "labels", RG_TYPE_I32, 1, (int64_t[]){T}, lab), -100, 0);
        rg_node *dy = rg_leaf(g, "dy", RG_TYPE_F32, 1, (int64_t[]){T + 1}, f);
        rg_node *back = rg_linear_ce_back(g, dy, lce, false), *back_dw = rg_linear_ce_back(g, dy, lce, true);
        rg_error err = {0};
        RG_REQUIRE(rg_graph_error(g, &err) == RG_OK, "%s: %s", type_name(wt), err.msg);
        const bool f1 = rg_op_cell_runs(RG_BACKEND_CUDA, lce), b1 = rg_op_cell_runs(RG_BACKEND_CUDA, back);
        const bool b2 = rg_op_cell_runs(RG_BACKEND_CUDA, back_dw);
        printf("    %-8s linear_ce %s, linear_ce_back %s, with dw %s\n", type_name(wt), f1 ? "gpu" : "cpu",
               b1 ? "gpu" : "cpu", b2 ? "gpu" : "cpu");
        RG_CHECK(f1 == compiled && b1 == compiled, "%s: the CUDA cells say %d %d, expected %d", type_name(wt), f1, b1,
                 compiled);
        RG_CHECK(!b2, "%s: the CUDA cell takes a dw for a quantized head", type_name(wt));
        rg_graph_free(g);
    }
    // A head whose rows do not hold whole blocks cannot be made; one of a type without a decoder
    // (an integer type) is refused by the constructor before the cells are asked.
}

// ---------------------------------------------------------------------------
// Parity

typedef struct lce_case {
    const char *what;
    int64_t d, V, T, chunk;
    int ignore_every;  // every n-th label is ignored (0: none)
    float inv_n;       // fp[0]: 0 = counted
    int all_types;     // run for every type (else only Q4_0 and Q4_K)
} lce_case;

static const lce_case cases[] = {
    {"auto chunk", 256, 300, 17, 0, 0, 0.0f, 1},
    {"chunk 37, ignored: 3 tiles of h", 256, 301, 80, 37, 3, 0.0f, 0},
    {"chunk 64, 300 tokens: 2 tiles of G", 256, 200, 300, 64, 0, 0.01f, 0},
};

static int32_t *make_labels(const lce_case *k) {
    int32_t *l = malloc(sizeof(int32_t) * k->T);
    for (int64_t t = 0; t < k->T; t++)
        l[t] = k->ignore_every && t % k->ignore_every == 0 ? -100 : (int32_t)(rg_rng_u64(3, 9, (uint64_t)t) % (uint64_t)k->V);
    return l;
}

static double inv_n_of(const lce_case *k, const int32_t *labels) {
    int64_t cnt = 0;
    for (int64_t t = 0; t < k->T; t++) cnt += labels[t] != -100;
    return k->inv_n > 0 ? k->inv_n : cnt ? 1.0 / (double)cnt : 0.0;
}

// Double reference of the operands w [V rows of d], h [T rows of d]: z [T, V], lse [T],
// S_t = max_v sum_k |w h|.
typedef struct ref {
    double *z, *lse, *S;
} ref;

static ref reference(const lce_case *k, const float *w, const float *h) {
    ref r = {malloc(sizeof(double) * k->T * k->V), malloc(sizeof(double) * k->T), malloc(sizeof(double) * k->T)};
    for (int64_t t = 0; t < k->T; t++) {
        double mx = -INFINITY, S = 0;
        for (int64_t v = 0; v < k->V; v++) {
            double z = 0, mag = 0;
            for (int64_t i = 0; i < k->d; i++) {
                const double p = (double)w[v * k->d + i] * h[t * k->d + i];
                z += p, mag += fabs(p);
            }
            r.z[t * k->V + v] = z;
            mx = z > mx ? z : mx, S = mag > S ? mag : S;
        }
        double sum = 0;
        for (int64_t v = 0; v < k->V; v++) sum += exp(r.z[t * k->V + v] - mx);
        r.lse[t] = mx + log(sum), r.S[t] = S;
    }
    return r;
}

static void ref_free(ref *r) { free(r->z), free(r->lse), free(r->S); }

// One run of the loss and its dh on dev: out [T + 1], dh [d, T]; stats and the device plan's
// buffer and scratch bytes when asked.
static rg_status run_loss(const lce_case *k, uint32_t wt, const void *wq, const float *h, const int32_t *labels,
                          const float *dy, rg_device dev, float *out, float *dh, rg_exec_stats *stats, size_t *buffer,
                          size_t *scratch, rg_error *err) {
    rg_graph *g = rg_graph_new();
    rg_node *lw = rg_leaf(g, "w", wt, 2, (int64_t[]){k->d, k->V}, (void *)wq);
    rg_node *lh = rg_leaf(g, "h", RG_TYPE_F32, 2, (int64_t[]){k->d, k->T}, (void *)h);
    rg_node *ll = rg_leaf(g, "labels", RG_TYPE_I32, 1, (int64_t[]){k->T}, (void *)labels);
    rg_node *lce = rg_linear_ce(g, lw, lh, ll, -100, k->chunk);
    if (lce) lce->fp[0] = k->inv_n;
    rg_node *back = rg_linear_ce_back(g, rg_leaf(g, "dy", RG_TYPE_F32, 1, (int64_t[]){k->T + 1}, (void *)dy), lce, false);
    rg_status st = rg_graph_error(g, err);
    rg_exec *ex = NULL;
    if (!st) {
        lce->flags |= RG_NODE_OUTPUT, back->flags |= RG_NODE_OUTPUT;
        rg_exec_opts o = {.n_threads = 2, .device = dev};
        st = rg_exec_create(&ex, g, &o, err);
    }
    if (!st) st = rg_exec_run(ex, 0, -1, err);
    if (!st) st = rg_exec_read(ex, lce, out, sizeof(float) * (size_t)(k->T + 1), err);
    if (!st) st = rg_exec_read(ex, back, dh, sizeof(float) * (size_t)(k->d * k->T), err);
    if (!st && stats) *stats = rg_exec_get_stats(ex);
    if (!st && buffer) {
        const rg_plan *p = rg_exec_device_plan(ex);
        *buffer = p ? p->buffer_bytes : 0, *scratch = p ? p->scratch_bytes : 0;
    }
    rg_exec_free(ex);
    rg_graph_free(g);
    return st;
}

// The forward's bounds (header): lse_t against the other side within tol_t, the loss within *loss_tol.
static void fwd_tols(const lce_case *k, const ref *r, const int32_t *labels, double extra, double loss_scale,
                     double *tol, double *loss_tol) {
    const double inv_n = inv_n_of(k, labels);
    *loss_tol = 0;
    for (int64_t t = 0; t < k->T; t++) {
        tol[t] = labels[t] == -100 ? 0 : (2e-5 + extra) * r->S[t] + 5e-7 + 2e-7 * fabs(r->lse[t]);
        if (labels[t] != -100) *loss_tol += inv_n * (tol[t] + (2e-5 + extra) * r->S[t]);
    }
    *loss_tol += 2e-7 * fabs(loss_scale);
}

// dh's bound per element: sum_v |w_kv| (|c_t| e_tv rel_t + gterm |G_tv|) (header); G_tv from r.
static void back_tols(const lce_case *k, const float *w, const ref *r, const int32_t *labels, const float *dy,
                      double extra, double gterm, double *tol, double *dh_ref) {
    const double inv_n = inv_n_of(k, labels), coef0 = (double)dy[0] * inv_n;
    memset(tol, 0, sizeof(double) * k->d * k->T);
    memset(dh_ref, 0, sizeof(double) * k->d * k->T);
    for (int64_t t = 0; t < k->T; t++) {
        if (labels[t] == -100) continue;
        const double ct = coef0 + dy[1 + t];
        const double rel = expm1(2 * (2e-5 + extra) * r->S[t]) + 1e-6;
        for (int64_t v = 0; v < k->V; v++) {
            const double e = exp(r->z[t * k->V + v] - r->lse[t]);
            const double G = e * ct - (v == labels[t] ? coef0 : 0);
            const double term = fabs(ct) * e * rel + gterm * fabs(G);
            for (int64_t i = 0; i < k->d; i++) {
                tol[t * k->d + i] += fabs((double)w[v * k->d + i]) * term;
                dh_ref[t * k->d + i] += (double)w[v * k->d + i] * G;
            }
        }
    }
}

static int64_t beyond(const float *x, const float *y, const double *yd, const double *tol, int64_t n, double *maxd) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)x[i] - (y ? (double)y[i] : yd[i]));
        if (d > *maxd || d != d) *maxd = d;
        if (!(d <= tol[i] + 1e-30)) bad++;
    }
    return bad;
}

static void parity_mode(const char *mode) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    const bool tensor = !strcmp(mode, "tensor");
    const double u = 0x1p-8, extra = tensor ? 2 * u + u * u : 0.0;
    setenv("RETRO_CUDA_HALF_GEMM", mode, 1);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t ti = 0; ti < sizeof quant_types / sizeof *quant_types; ti++) {
            const lce_case *k = &cases[c];
            const uint32_t wt = quant_types[ti];
            if (!k->all_types && wt != RG_TYPE_Q4_0 && wt != RG_TYPE_Q4_K) continue;
            const int64_t d = k->d, V = k->V, T = k->T;
            float *x = randn(d * V, 100 + ti, 0.4f), *h = randn(d * T, 200 + c, 1.0f), *dy = randn(T + 1, 300 + c, 1.0f);
            void *wq = make_quant(wt, x, V, d, 400 + ti);
            float *w = wq ? dequant(wt, wq, V, d) : NULL;
            RG_REQUIRE(w, "%s: no head", type_name(wt));
            int32_t *labels = make_labels(k);
            float *out[2], *dh[2];
            for (int dev = 0; dev < 2; dev++) out[dev] = malloc(sizeof(float) * (T + 1)), dh[dev] = malloc(sizeof(float) * d * T);
            rg_error err = {0};
            rg_exec_stats s = {0};
            rg_status st = run_loss(k, wt, wq, h, labels, dy, RG_DEVICE_CUDA, out[0], dh[0], &s, NULL, NULL, &err);
            RG_CHECK(st == RG_OK, "%s %s (%s) on cuda: %s", k->what, type_name(wt), mode, err.msg);
            if (!st) st = run_loss(k, wt, wq, h, labels, dy, RG_DEVICE_CPU, out[1], dh[1], NULL, NULL, NULL, &err);
            RG_CHECK(st == RG_OK, "%s %s on the cpu: %s", k->what, type_name(wt), err.msg);
            if (!st) {
                RG_CHECK(s.nodes_gpu == 2 && s.nodes_cpu == 0 && s.nodes_fallback == 0 && s.copies_scheduled == 0,
                         "%s %s: nodes gpu %d cpu %d fallback %d, %d copies", k->what, type_name(wt), s.nodes_gpu,
                         s.nodes_cpu, s.nodes_fallback, s.copies_scheduled);
                double *tol = malloc(sizeof(double) * (d * T > T + 1 ? d * T : T + 1));
                double *dh_ref = malloc(sizeof(double) * d * T), loss_tol, maxd = 0;
                // Against the CPU on the unrounded operands: the mode's bounds.
                ref r = reference(k, w, h);
                fwd_tols(k, &r, labels, extra, out[1][0], tol, &loss_tol);
                int64_t bad = beyond(out[0] + 1, out[1] + 1, NULL, tol, T, &maxd);
                const double dl = fabs((double)out[0][0] - out[1][0]);
                bad += !(dl <= loss_tol);
                back_tols(k, w, &r, labels, dy, extra, 2e-5 + (tensor ? 2 * u : 0), tol, dh_ref);
                double maxb = 0;
                bad += beyond(dh[0], dh[1], NULL, tol, d * T, &maxb);
                printf("    %-6s %-8s %-36s vs cpu: lse/loss max|d| %-9.3g dh max|d| %-9.3g %s\n", mode, type_name(wt),
                       k->what, maxd, maxb, bad ? "FAIL" : "ok");
                RG_CHECK(bad == 0, "%s %s (%s): %lld outputs beyond the bound against the cpu (loss %.9g vs %.9g, tol "
                         "%.3g)", k->what, type_name(wt), mode, (long long)bad, out[0][0], out[1][0], loss_tol);
                ref_free(&r);
                if (tensor) {  // against the double reference of the rounded operands: the F32 bounds
                    float *wr = malloc(sizeof(float) * d * V), *hr = malloc(sizeof(float) * d * T);
                    for (int64_t i = 0; i < d * V; i++) wr[i] = bf16_round(w[i]);
                    for (int64_t i = 0; i < d * T; i++) hr[i] = bf16_round(h[i]);
                    ref rr = reference(k, wr, hr);
                    const double inv_n = inv_n_of(k, labels);
                    double loss_ref = 0;
                    for (int64_t t = 0; t < T; t++)
                        if (labels[t] != -100) loss_ref += inv_n * (rr.lse[t] - rr.z[t * V + labels[t]]);
                    fwd_tols(k, &rr, labels, 0.0, loss_ref, tol, &loss_tol);
                    for (int64_t t = 0; t < T; t++)
                        if (labels[t] == -100) rr.lse[t] = 0;  // an ignored token's output is 0 (its bound too)
                    double m2 = 0;
                    int64_t bad2 = beyond(out[0] + 1, NULL, rr.lse, tol, T, &m2);
                    bad2 += !(fabs((double)out[0][0] - loss_ref) <= loss_tol);
                    back_tols(k, wr, &rr, labels, dy, 0.0, 2e-5 + u, tol, dh_ref);
                    double m3 = 0;
                    bad2 += beyond(dh[0], NULL, dh_ref, tol, d * T, &m3);
                    printf("    %-6s %-8s %-36s vs rounded reference: lse %-9.3g dh %-9.3g %s\n", mode, type_name(wt),
                           k->what, m2, m3, bad2 ? "FAIL" : "ok");
                    RG_CHECK(bad2 == 0, "%s %s: %lld outputs beyond the bound against the rounded reference", k->what,
                             type_name(wt), (long long)bad2);
                    ref_free(&rr);
                    free(wr), free(hr);
                }
                free(tol), free(dh_ref);
            }
            for (int dev = 0; dev < 2; dev++) free(out[dev]), free(dh[dev]);
            free(x), free(h), free(dy), free(wq), free(w), free(labels);
        }
    unsetenv("RETRO_CUDA_HALF_GEMM");
}

static void test_cuda_linear_ce_quant_f32(void) { parity_mode("f32"); }
static void test_cuda_linear_ce_quant_tensor(void) { parity_mode("tensor"); }

// ---------------------------------------------------------------------------
// The memory the loss holds: the planned buffer (the LINEAR_CE output, dh) and the cells'
// scratch against dh plus the chunk.

static void test_cuda_linear_ce_quant_memory(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const lce_case mk[] = {
        {"tiny qwen2 (d 256, V 512, T 48)", 256, 512, 48, 0, 0, 0.0f, 1},
        {"a longer row (T 1024)", 256, 2048, 1024, 0, 0, 0.0f, 1},
    };
    for (size_t c = 0; c < sizeof mk / sizeof *mk; c++) {
        const lce_case *k = &mk[c];
        const int64_t d = k->d, V = k->V, T = k->T;
        float *x = randn(d * V, 500, 0.4f), *h = randn(d * T, 501, 1.0f), *dy = randn(T + 1, 502, 1.0f);
        void *wq = make_quant(RG_TYPE_Q4_K, x, V, d, 503);
        int32_t *labels = make_labels(k);
        float *out = malloc(sizeof(float) * (T + 1)), *dh = malloc(sizeof(float) * d * T);
        rg_error err = {0};
        size_t buffer = 0, scratch = 0;
        rg_status st = run_loss(k, RG_TYPE_Q4_K, wq, h, labels, dy, RG_DEVICE_CUDA, out, dh, NULL, &buffer, &scratch, &err);
        RG_CHECK(st == RG_OK, "%s: %s", k->what, err.msg);
        if (!st) {
            // The chunk the cells take: rg_linear_ce_chunk's rule (cpu_ops.h), from a node of the same shape.
            rg_graph *g = rg_graph_new();
            rg_node *lce = rg_linear_ce(g, rg_leaf(g, "w", RG_TYPE_Q4_K, 2, (int64_t[]){d, V}, wq),
                                        rg_leaf(g, "h", RG_TYPE_F32, 2, (int64_t[]){d, T}, h),
                                        rg_leaf(g, "l", RG_TYPE_I32, 1, (int64_t[]){T}, labels), -100, 0);
            const int64_t chunk = rg_linear_ce_chunk(lce, V, T);
            rg_graph_free(g);
            const double dh_bytes = 4.0 * d * T, chunk_bytes = 4.0 * T * chunk + 4.0 * d * chunk;
            const double held = (double)buffer + (double)scratch, ratio = held / (dh_bytes + chunk_bytes);
            printf("    %s: chunk %lld; the loss holds %.0f bytes (buffer %zu: output + dh; scratch %zu) = %.3fx dh "
                   "(%.0f) + the chunk (%.0f)\n",
                   k->what, (long long)chunk, held, buffer, scratch, ratio, dh_bytes, chunk_bytes);
            RG_CHECK(ratio <= 1.1, "%s: the loss holds %.3fx dh plus the chunk (bound 1.1)", k->what, ratio);
        }
        free(x), free(h), free(dy), free(wq), free(labels), free(out), free(dh);
    }
}

static const rg_test_case tcases[] = {
    RG_TEST(test_cuda_loss_quant_support),
    RG_TEST(test_cuda_linear_ce_quant_f32),
    RG_TEST(test_cuda_linear_ce_quant_tensor),
    RG_TEST(test_cuda_linear_ce_quant_memory),
    {0},
};

int main(int argc, char **argv) {
    printf("cuda compiled: %s\n", rg_cuda_compiled() ? "yes" : "no");
    return rg_test_run(argc, argv, tcases);
}
