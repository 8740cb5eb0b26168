// test_cuda_norm.c - the CUDA cells of the normalization family (src/cuda/ops_norm.cu)
// against the CPU kernels: every case runs one graph through the executor on
// RG_DEVICE_CUDA and on RG_DEVICE_CPU and compares the outputs element by
// element, one table line per op, type and shape (worst |cuda - cpu|, the worst
// ratio of that difference to the element's bound, how many elements differ in
// their bits). Each graph is made of this family's ops (and views), so it must
// run whole on the device: every kernel there, no copy inside the run.
// Without a device (a GPU, or the host execution under RETRO_CUDA_HOST=1) the
// cases skip saying why; the support table runs everywhere.
//
// Bounds, per element, u = 2^-24 (f32), u_d = 2^-53 (double); every one follows
// from the one place where the two sides' arithmetic differs (ops_norm.cu):
//   RMS_NORM       2^-22 |y|: the double sum of squares in another order can move
//                  the f32 scale by 1 ulp, and y = x * scale by 2 ulp.
//   RMS_NORM_BACK  2^-23 |dx| + 2 n u_d (|r dy| + 3 |c x| + r^3 |x| sum|dy x|): the
//                  double sums' order (n u_d of their magnitude each side), then one rounding.
//   ROPE(_BACK)    2^-22 (|a| + |b|) for the pair (a, b) of the element: CUDA's
//                  double pow/sin/cos (<= 2 ulp) may round c or s to the next f32
//                  (2^-24 absolute), and the two products and the sum then round
//                  apart; 2^-21 for a ROPE_BACK that reads the device's ROPE output
//                  (its input already differs by that much; a rotation keeps norms);
//                  0 for the dims past n_rot (copies).
//   SOFT_MAX       1e-6, as test_cuda (CUDA's expf and tanhf against the CPU's).
//   SOFT_MAX_BACK  from its leaves: 2^-23 |da| + 2 n u_d |y scale f| sum|y dy| (the
//                  double sum's order) + 2^-21 |y (dy - s) scale| with a softcap
//                  (tanhf within 2 ulp moves 1 - t^2 by <= 2^-21); after the device's
//                  SOFT_MAX: the forward's measured relative difference e_y carried
//                  through to first order, doubled: 2 e_y (|g| + |y scale f| sum|y dy|).
//   CROSS_ENTROPY_LOSS       2^-22 |L|: the exponentials are the CPU's bits; the
//                  double sums and log differ in their last bits, then one f32 rounding.
//   CROSS_ENTROPY_LOSS_BACK  2^-23 |dz| + 4 V u_d |coef|: the label's element is
//                  e c - coef and cancels; e c moves by V u_d of itself.
//   ATTN_DECODE    Vmax (4 e_z + 264 u), e_z = |scale| 2 Dh u S + 2 u Zmax: the f32
//                  dot products q.k (S = max sum_d |q_d k_d|) sum in different
//                  orders (each within Dh u S), which moves p_j = exp(z_j - m) by
//                  2 e_z relatively and the weighted mean by twice that of the
//                  largest |v|; the f32 sums of p v over a chunk of 128 keys add
//                  128 u Vmax each side.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "rg_test.h"
#include "tensor/half.h"

static char why[256];

static int have_device(void) { return rg_cuda_device_count(why, sizeof why) > 0; }

#define U_F32 0x1p-24
#define U_F64 0x1p-53

// ---------------------------------------------------------------------------
// Running a graph on both sides

// n normal values times `scale`, stream `stream`.
static float *normal_values(int64_t n, uint64_t stream, float scale) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; p && i < n; i++) p[i] = scale * rg_rng_normal(11, stream, (uint64_t)i);
    return p;
}

// Kernels the graph runs: every node that is neither a leaf nor a view.
static int kernel_nodes(const rg_graph *g) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) k += g->nodes[i]->op != RG_OP_NONE && !rg_op_defs[g->nodes[i]->op].is_view;
    return k;
}

// Plans and runs g on `dev`; out[k] (contiguous f32) is read into dst[k].
static rg_status run_on(rg_graph *g, rg_device dev, rg_node *const *out, int n_out, float *const *dst,
                        rg_exec_stats *stats, rg_error *err) {
    rg_status st = rg_graph_error(g, err);
    if (st) return st;
    for (int k = 0; k < n_out; k++) out[k]->flags |= RG_NODE_OUTPUT;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 2, .device = dev};
    st = rg_exec_create(&ex, g, &o, err);
    if (!st) st = rg_exec_run(ex, 0, -1, err);
    for (int k = 0; k < n_out && !st; k++)
        st = rg_exec_read(ex, out[k], dst[k], sizeof(float) * (size_t)rg_tensor_nelements(&out[k]->t), err);
    if (!st && stats) *stats = rg_exec_get_stats(ex);
    rg_exec_free(ex);
    return st;
}

// The outputs of one graph on both sides: cuda[k] and cpu[k] hold out[k].
typedef struct both {
    int n_out;
    float *cuda[4], *cpu[4];
} both;

static void both_free(both *b) {
    for (int k = 0; k < b->n_out; k++) free(b->cuda[k]), free(b->cpu[k]);
    b->n_out = 0;
}

// Runs g on the device and on the CPU. The device must run it whole: every kernel
// there, no copy inside the run, each output read once. Returns 0 (the failure
// recorded) when the case cannot be compared.
static int run_both(rg_graph *g, rg_node *const *out, int n_out, both *b) {
    b->n_out = n_out;
    for (int k = 0; k < n_out; k++) {
        const size_t bytes = sizeof(float) * (size_t)rg_tensor_nelements(&out[k]->t);
        b->cuda[k] = malloc(bytes), b->cpu[k] = malloc(bytes);
    }
    rg_error err = {0};
    rg_exec_stats s = {0};
    if (run_on(g, RG_DEVICE_CUDA, out, n_out, b->cuda, &s, &err)) {
        rg_test_fail_(__FILE__, __LINE__, "cuda run", "%s", err.msg);
        return 0;
    }
    const int kernels = kernel_nodes(g);
    RG_CHECK(s.nodes_gpu == kernels && s.nodes_cpu == 0 && s.nodes_fallback == 0,
             "nodes on the device %d, on the CPU %d (fallbacks %d): expected all %d on the device", s.nodes_gpu,
             s.nodes_cpu, s.nodes_fallback, kernels);
    RG_CHECK(s.copies_scheduled == 0 && s.copies_to_device == 0 && s.copies_to_host == 0,
             "copies inside the run: %d scheduled, %llu to the device, %llu to the host: expected none",
             s.copies_scheduled, (unsigned long long)s.copies_to_device, (unsigned long long)s.copies_to_host);
    RG_CHECK(s.output_copies == (uint64_t)n_out, "output reads %llu, expected %d", (unsigned long long)s.output_copies,
             n_out);
    if (run_on(g, RG_DEVICE_CPU, out, n_out, b->cpu, NULL, &err)) {
        rg_test_fail_(__FILE__, __LINE__, "cpu run", "%s", err.msg);
        return 0;
    }
    return 1;
}

// One output compared: each element against its own bound.
typedef struct cmp {
    int64_t n, over, differ;  // elements, beyond their bound, not the same bits
    double maxd, worst;       // max |cuda - cpu|, max |cuda - cpu| / bound
} cmp;

static void cmp_add(cmp *c, float cuda, float cpu, double tol) {
    c->n++;
    if (memcmp(&cuda, &cpu, sizeof cuda) == 0) return;
    c->differ++;
    const double d = fabs((double)cuda - (double)cpu);
    if (!(d <= tol)) c->over++;  // NaN on one side only is over
    if (!(d <= c->maxd)) c->maxd = d;
    const double r = tol > 0 ? d / tol : INFINITY;
    if (!(r <= c->worst)) c->worst = r;
}

// The table line of one output, and its check.
static void report(const char *op, const char *type, const char *what, const cmp *c, const char *bound) {
    printf("    %-13s %-4s %-40s max|d| %-9.3g d/bound %-8.3g bits differ %6lld/%-7lld bound %-22s %s\n", op, type,
           what, c->maxd, c->worst, (long long)c->differ, (long long)c->n, bound, c->over ? "FAIL" : "ok");
    RG_CHECK(c->over == 0, "%s %s %s: %lld of %lld elements beyond %s (worst |d| %.3g, %.3g x the bound)", op, type,
             what, (long long)c->over, (long long)c->n, bound, c->maxd, c->worst);
}

// n's op on `src` instead of its sources: a node the constructors would not make
// from strided views (they insert a CONT first), as a graph rewrite makes it.
static rg_node *on_sources(rg_graph *g, const rg_node *n, rg_node *s0, rg_node *s1, rg_node *s2) {
    rg_node *src[RG_MAX_SRC] = {s0, s1, s2, NULL};
    return rg_graph_clone_node(g, n, src, NULL);
}

// How a case lays out its f32 input of shape ne: packed, rows padded (each row
// `pad` floats longer, so dims 1..3 have their own strides), or dims 1 and 2
// swapped in memory (a permuted view).
typedef enum layout { PACKED, PADDED, PERMUTED } layout;
static const char *const layout_name[] = {"", " padded rows", " dims 1,2 permuted"};

// A leaf holding the values v (in the logical order of ne) laid out as `lay`, and
// the node that reads it with shape ne.
static rg_node *laid_out(rg_graph *g, const char *name, const float *v, const int64_t ne[4], layout lay, float **bytes) {
    const int64_t n = ne[0] * ne[1] * ne[2] * ne[3], pad = lay == PADDED ? 3 : 0;
    const int64_t ld = ne[0] + pad;
    float *p = calloc((size_t)(ld * ne[1] * ne[2] * ne[3]), sizeof(float));
    *bytes = p;
    for (int64_t i = 0; i < n; i++) {
        const int64_t i0 = i % ne[0], r = i / ne[0], i1 = r % ne[1], i2 = r / ne[1] % ne[2], i3 = r / ne[1] / ne[2];
        const int64_t at = lay == PERMUTED ? i0 + ne[0] * (i2 + ne[2] * (i1 + ne[1] * i3)) : i0 + ld * r;
        p[at] = v[i];
    }
    if (lay == PACKED) return rg_leaf(g, name, RG_TYPE_F32, 4, ne, p);
    if (lay == PERMUTED) {
        const int64_t pne[4] = {ne[0], ne[2], ne[1], ne[3]};
        return rg_permute(g, rg_leaf(g, name, RG_TYPE_F32, 4, pne, p), 0, 2, 1, 3);
    }
    const int64_t lne[4] = {ld, ne[1], ne[2], ne[3]};
    rg_node *leaf = rg_leaf(g, name, RG_TYPE_F32, 4, lne, p);
    const size_t nb[4] = {4, (size_t)ld * 4, (size_t)(ld * ne[1]) * 4, (size_t)(ld * ne[1] * ne[2]) * 4};
    return rg_view(g, leaf, 4, ne, nb, 0);
}

static void shape_str(char *buf, size_t cap, const char *what, const int64_t ne[4], layout lay) {
    snprintf(buf, cap, "%s[%lld,%lld,%lld,%lld]%s", what, (long long)ne[0], (long long)ne[1], (long long)ne[2],
             (long long)ne[3], layout_name[lay]);
}

// ---------------------------------------------------------------------------
// RMS_NORM and RMS_NORM_BACK: y = rms_norm(x), dx = rms_norm_back(dy, x) in one graph.

typedef struct norm_case {
    int64_t ne[4];
    float eps;
    layout lay;  // of x and dy
} norm_case;

static void test_cuda_rms_norm(void) {
    if (!have_device()) RG_SKIP("no device: %s", why);
    static const norm_case cases[] = {
        {{64, 5, 1, 1}, 1e-5f, PACKED},   {{67, 5, 2, 1}, 1e-6f, PACKED},  {{4099, 3, 1, 1}, 1e-5f, PACKED},
        {{1, 7, 1, 1}, 1e-5f, PACKED},    {{300, 4, 3, 2}, 1e-3f, PACKED}, {{67, 6, 2, 1}, 1e-5f, PADDED},
        {{40, 3, 5, 2}, 1e-5f, PERMUTED},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const norm_case *k = &cases[ci];
        const int64_t n = k->ne[0], count = n * k->ne[1] * k->ne[2] * k->ne[3];
        float *x = normal_values(count, 100 + ci, 1.0f), *dy = normal_values(count, 200 + ci, 1.0f);
        float *xb, *dyb;
        rg_graph *g = rg_graph_new(), *tg = rg_graph_new();
        rg_node *lx = laid_out(g, "x", x, k->ne, k->lay, &xb), *ldy = laid_out(g, "dy", dy, k->ne, k->lay, &dyb);
        // The templates read packed leaves of the same shape; the clones read the views.
        rg_node *tx = rg_leaf(tg, "x", RG_TYPE_F32, 4, k->ne, NULL), *tdy = rg_leaf(tg, "dy", RG_TYPE_F32, 4, k->ne, NULL);
        rg_node *out[2] = {on_sources(g, rg_rms_norm(tg, tx, k->eps), lx, NULL, NULL),
                           on_sources(g, rg_rms_norm_back(tg, tdy, tx, k->eps), ldy, lx, NULL)};
        both b = {0};
        if (run_both(g, out, 2, &b)) {
            cmp cy = {0}, cdx = {0};
            for (int64_t r = 0; r < count / n; r++) {
                const float *xr = x + r * n, *dyr = dy + r * n;
                double ss = 0, sdx = 0, sadx = 0;
                for (int64_t i = 0; i < n; i++)
                    ss += (double)xr[i] * xr[i], sdx += (double)dyr[i] * xr[i], sadx += fabs((double)dyr[i] * xr[i]);
                const double rr = 1.0 / sqrt(ss / (double)n + k->eps), c = rr * rr * rr / (double)n * sdx;
                for (int64_t i = 0; i < n; i++) {
                    const int64_t o = r * n + i;
                    cmp_add(&cy, b.cuda[0][o], b.cpu[0][o], 0x1p-22 * fabs(b.cpu[0][o]));
                    const double mag = fabs(rr * dyr[i]) + 3 * fabs(c * xr[i]) + rr * rr * rr * fabs(xr[i]) * sadx;
                    cmp_add(&cdx, b.cuda[1][o], b.cpu[1][o], 0x1p-23 * fabs(b.cpu[1][o]) + 2.0 * n * U_F64 * mag);
                }
            }
            char what[192];
            shape_str(what, sizeof what, "", k->ne, k->lay);
            report("rms_norm", "f32", what, &cy, "2^-22 |y|");
            report("rms_norm_back", "f32", what, &cdx, "2^-23|dx|+2n u_d mag");
        }
        both_free(&b);
        rg_graph_free(g), rg_graph_free(tg);
        free(x), free(dy), free(xb), free(dyb);
    }
}

// ---------------------------------------------------------------------------
// ROPE and ROPE_BACK: y = rope(x), xb = rope_back(y) (which gives x back) in one graph.

typedef struct rope_case {
    int64_t ne[4];  // [head_dim, n_head, T, b]
    int n_rot, mode;
    float base, scale;
    layout lay;
} rope_case;

// The element paired with element i0 of a row (itself past n_rot).
static int64_t rope_partner(int64_t i0, int n_rot, int mode) {
    const int64_t half = n_rot / 2;
    if (i0 >= n_rot) return i0;
    if (mode == 2) return i0 < half ? i0 + half : i0 - half;
    return i0 ^ 1;
}

static void test_cuda_rope(void) {
    if (!have_device()) RG_SKIP("no device: %s", why);
    static const rope_case cases[] = {
        {{64, 4, 5, 1}, 64, 0, 10000.0f, 1.0f, PACKED},   {{64, 4, 5, 1}, 64, 2, 10000.0f, 1.0f, PACKED},
        {{80, 3, 7, 1}, 32, 2, 1e6f, 1.0f, PACKED},       {{10, 2, 3, 2}, 6, 0, 500.0f, 0.25f, PACKED},
        {{128, 2, 300, 1}, 128, 2, 10000.0f, 1.0f, PACKED}, {{2, 1, 1, 1}, 2, 0, 10000.0f, 1.0f, PACKED},
        {{32, 3, 4, 1}, 32, 0, 10000.0f, 1.0f, PADDED},   {{48, 5, 6, 1}, 16, 2, 10000.0f, 0.5f, PERMUTED},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const rope_case *k = &cases[ci];
        const int64_t hd = k->ne[0], T = k->ne[2], count = hd * k->ne[1] * T * k->ne[3];
        float *x = normal_values(count, 300 + ci, 1.0f), *xb;
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
        for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)((t * 977 + 3 * ci) % 32768);  // up to 32767
        rg_graph *g = rg_graph_new(), *tg = rg_graph_new();
        int64_t pne[1] = {T};
        rg_node *lpos = rg_leaf(g, "pos", RG_TYPE_I32, 1, pne, pos), *lx = laid_out(g, "x", x, k->ne, k->lay, &xb);
        rg_node *tx = rg_leaf(tg, "x", RG_TYPE_F32, 4, k->ne, NULL), *tpos = rg_leaf(tg, "pos", RG_TYPE_I32, 1, pne, NULL);
        rg_node *y = on_sources(g, rg_rope(tg, tx, tpos, k->n_rot, k->mode, k->base, k->scale), lx, lpos, NULL);
        rg_node *out[2] = {y, rg_rope_back(g, y, lpos, k->n_rot, k->mode, k->base, k->scale)};
        both b = {0};
        if (run_both(g, out, 2, &b)) {
            cmp cy = {0}, cb = {0};
            double back_err = 0;  // rope_back(rope(x)) against x, on the device
            for (int64_t i = 0; i < count; i++) {
                const int64_t i0 = i % hd, j = i - i0 + rope_partner(i0, k->n_rot, k->mode);
                const double pair = i0 < k->n_rot ? fabs(x[i]) + fabs(x[j]) : 0.0;
                cmp_add(&cy, b.cuda[0][i], b.cpu[0][i], 0x1p-22 * pair);
                cmp_add(&cb, b.cuda[1][i], b.cpu[1][i], 0x1p-21 * pair);
                back_err = fmax(back_err, fabs((double)b.cuda[1][i] - x[i]));
            }
            char what[192], shape[64];
            shape_str(shape, sizeof shape, "", k->ne, k->lay);
            snprintf(what, sizeof what, "%s %s n_rot=%d", shape, k->mode == 2 ? "neox" : "normal", k->n_rot);
            report("rope", "f32", what, &cy, "2^-22 (|a|+|b|)");
            report("rope_back", "f32", what, &cb, "2^-21 (|a|+|b|)");
            RG_CHECK(back_err <= 1e-5, "rope_back(rope(x)) is %.3g from x", back_err);
        }
        both_free(&b);
        rg_graph_free(g), rg_graph_free(tg);
        free(x), free(xb), free(pos);
    }
}

// ---------------------------------------------------------------------------
// SOFT_MAX_BACK: from leaves, and after the device's SOFT_MAX (y = soft_max(a),
// da = soft_max_back(dy, y, a)) in one graph.

typedef struct sm_case {
    int64_t ne[4];  // [n_kv, T, H, b]
    int mask, causal;
    float scale, softcap;
} sm_case;

// The per-element bound of SOFT_MAX_BACK (see the top), from the values it read:
// e_y = 0 for leaves, else the relative difference of the two sides' y.
static void soft_max_back_bounds(const float *dy, const float *y, const float *a, int64_t n, int64_t nrows,
                                 const sm_case *k, double e_y, const float *da_cpu, const float *da_cuda, cmp *c) {
    for (int64_t r = 0; r < nrows; r++) {
        const float *dyr = dy + r * n, *yr = y + r * n, *ar = a + r * n;
        double s = 0, sa = 0;
        for (int64_t i = 0; i < n; i++) s += (double)yr[i] * dyr[i], sa += fabs((double)yr[i] * dyr[i]);
        for (int64_t i = 0; i < n; i++) {
            double f = 1.0;
            if (k->softcap > 0) {
                const double t = tanh((double)k->scale * ar[i] / k->softcap);
                f = 1 - t * t;
            }
            const double g = fabs(yr[i] * (dyr[i] - s) * k->scale), ys = fabs(yr[i] * k->scale * f);
            double tol = 0x1p-23 * fabs(da_cpu[r * n + i]) + 2.0 * n * U_F64 * ys * sa;
            if (k->softcap > 0) tol += 0x1p-21 * g;
            tol += 2 * e_y * (g * f + ys * sa);
            cmp_add(c, da_cuda[r * n + i], da_cpu[r * n + i], tol);
        }
    }
}

static const sm_case sm_cases[] = {
    {{37, 5, 3, 1}, 0, 0, 0.7f, 0.0f},  {{37, 5, 3, 1}, 1, 1, 1.2f, 2.5f}, {{300, 4, 2, 1}, 0, 1, 0.1f, 0.0f},
    {{1, 3, 2, 1}, 0, 0, 1.0f, 0.0f},   {{4099, 2, 1, 1}, 1, 0, 0.05f, 30.0f}, {{16, 4, 2, 3}, 0, 0, 1.0f, 5.0f},
};

static void sm_what(char *buf, size_t cap, const sm_case *k) {
    char shape[64];
    shape_str(shape, sizeof shape, "", k->ne, PACKED);
    snprintf(buf, cap, "%s%s%s scale=%g cap=%g", shape, k->mask ? " mask" : "", k->causal ? " causal" : "",
             (double)k->scale, (double)k->softcap);
}

static void test_cuda_soft_max_back(void) {
    if (!have_device()) RG_SKIP("no device: %s", why);
    for (size_t ci = 0; ci < sizeof sm_cases / sizeof *sm_cases; ci++) {
        const sm_case *k = &sm_cases[ci];
        const int64_t n = k->ne[0], count = n * k->ne[1] * k->ne[2] * k->ne[3];
        float *dy = normal_values(count, 400 + ci, 1.0f), *a = normal_values(count, 500 + ci, 2.0f);
        float *y = normal_values(count, 600 + ci, 1.0f);
        for (int64_t i = 0; i < count; i++) y[i] = fabsf(y[i]) / (float)n;  // probability-like
        rg_graph *g = rg_graph_new();
        rg_node *ldy = rg_leaf(g, "dy", RG_TYPE_F32, 4, k->ne, dy), *ly = rg_leaf(g, "y", RG_TYPE_F32, 4, k->ne, y);
        rg_node *la = rg_leaf(g, "a", RG_TYPE_F32, 4, k->ne, a);
        rg_node *out[1] = {rg_soft_max_back(g, ldy, ly, la, k->scale, k->softcap)};
        both b = {0};
        if (run_both(g, out, 1, &b)) {
            cmp c = {0};
            soft_max_back_bounds(dy, y, a, n, count / n, k, 0.0, b.cpu[0], b.cuda[0], &c);
            char what[192];
            sm_what(what, sizeof what, k);
            report("soft_max_back", "f32", what, &c, "2^-23|da|+order+tanhf");
        }
        both_free(&b);
        rg_graph_free(g);
        free(dy), free(a), free(y);
    }
}

static void test_cuda_soft_max_forward_backward(void) {
    if (!have_device()) RG_SKIP("no device: %s", why);
    for (size_t ci = 0; ci < sizeof sm_cases / sizeof *sm_cases; ci++) {
        const sm_case *k = &sm_cases[ci];
        const int64_t n = k->ne[0], T = k->ne[1], count = n * T * k->ne[2] * k->ne[3];
        float *dy = normal_values(count, 700 + ci, 1.0f), *a = normal_values(count, 800 + ci, 3.0f);
        float *mask = k->mask ? normal_values(n * T, 900 + ci, 1.0f) : NULL;
        for (int64_t i = 0; mask && i < n * T; i += 7) mask[i] = -INFINITY;  // some keys removed
        rg_graph *g = rg_graph_new();
        int64_t mne[2] = {n, T};
        rg_node *la = rg_leaf(g, "a", RG_TYPE_F32, 4, k->ne, a), *ldy = rg_leaf(g, "dy", RG_TYPE_F32, 4, k->ne, dy);
        rg_node *lm = mask ? rg_leaf(g, "mask", RG_TYPE_F32, 2, mne, mask) : NULL;
        rg_node *y = rg_soft_max(g, la, lm, k->causal, k->scale, k->softcap);
        rg_node *out[2] = {y, rg_soft_max_back(g, ldy, y, la, k->scale, k->softcap)};
        both b = {0};
        if (run_both(g, out, 2, &b)) {
            cmp cy = {0}, cda = {0};
            double e_y = 0;
            for (int64_t i = 0; i < count; i++) {
                cmp_add(&cy, b.cuda[0][i], b.cpu[0][i], 1e-6);
                if (b.cpu[0][i] > 0) e_y = fmax(e_y, fabs((double)b.cuda[0][i] - b.cpu[0][i]) / b.cpu[0][i]);
                else if (b.cuda[0][i] != 0) e_y = INFINITY;  // a removed key must give 0 on both sides
            }
            // The backward read each side's own y: the bound carries the forward's difference.
            soft_max_back_bounds(dy, b.cpu[0], a, n, count / n, k, e_y, b.cpu[1], b.cuda[1], &cda);
            char what[192];
            sm_what(what, sizeof what, k);
            report("soft_max", "f32", what, &cy, "1e-6");
            report("soft_max_back", "f32", what, &cda, "above + 2 e_y (|g|+..)");
            printf("    %-13s %-4s %-40s forward relative difference e_y = %.3g\n", "", "", "", e_y);
        }
        both_free(&b);
        rg_graph_free(g);
        free(dy), free(a), free(mask);
    }
}

// ---------------------------------------------------------------------------
// CROSS_ENTROPY_LOSS and its backward: L = ce(z, labels), dz = ce_back(dL, z, labels) in one graph.

typedef struct ce_case {
    const char *what;
    int64_t V, T;
    int ignore_every;  // every ignore_every-th label is the ignore index (0: none)
    float shift;       // added to every logit
    float inv_n;       // fp[0]: 0 = the mean over valid labels, counted on the device
    layout lay;        // PACKED or PADDED logits
} ce_case;

static void test_cuda_cross_entropy(void) {
    if (!have_device()) RG_SKIP("no device: %s", why);
    static const ce_case cases[] = {
        {"some ignored", 1000, 7, 3, 0.0f, 0.0f, PACKED},
        {"odd V", 37, 13, 0, 0.0f, 0.0f, PACKED},
        {"all ignored", 50, 4, 1, 0.0f, 0.0f, PACKED},
        {"logits+200", 300, 5, 4, 200.0f, 0.0f, PACKED},
        {"inv_n given", 129, 6, 2, 0.0f, 0.125f, PACKED},
        {"V=1", 1, 5, 0, 0.0f, 0.0f, PACKED},
        {"vocab 50257", 50257, 3, 0, 0.0f, 0.0f, PACKED},
        {"padded rows", 65, 9, 4, 0.0f, 0.0f, PADDED},
    };
    const int32_t ignore = -100;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const ce_case *k = &cases[ci];
        const int64_t V = k->V, T = k->T, ne[4] = {V, T, 1, 1};
        float *z = normal_values(V * T, 1000 + ci, 3.0f), *zb;
        for (int64_t i = 0; i < V * T; i++) z[i] += k->shift;
        int32_t *labels = malloc(sizeof(int32_t) * (size_t)T);
        for (int64_t t = 0; t < T; t++)
            labels[t] = k->ignore_every && t % k->ignore_every == 0 ? ignore : (int32_t)((t * 7919 + 5) % V);
        float dl_value = 0.7f;
        rg_graph *g = rg_graph_new(), *tg = rg_graph_new();
        int64_t lne[1] = {T}, one[1] = {1};
        rg_node *lz = laid_out(g, "logits", z, ne, k->lay, &zb), *ll = rg_leaf(g, "labels", RG_TYPE_I32, 1, lne, labels);
        rg_node *ldl = rg_leaf(g, "dL", RG_TYPE_F32, 1, one, &dl_value);
        rg_node *tz = rg_leaf(tg, "logits", RG_TYPE_F32, 4, ne, NULL), *tl = rg_leaf(tg, "labels", RG_TYPE_I32, 1, lne, NULL);
        rg_node *tdl = rg_leaf(tg, "dL", RG_TYPE_F32, 1, one, NULL);
        rg_node *loss = on_sources(g, rg_cross_entropy_loss(tg, tz, tl, ignore), lz, ll, NULL);
        rg_node *dz = on_sources(g, rg_cross_entropy_loss_back(tg, tdl, tz, tl, ignore), ldl, lz, ll);
        loss->fp[0] = dz->fp[0] = k->inv_n;
        rg_node *out[2] = {loss, dz};
        both b = {0};
        if (run_both(g, out, 2, &b)) {
            int64_t n_valid = 0;
            for (int64_t t = 0; t < T; t++) n_valid += labels[t] != ignore;
            const double inv_n = k->inv_n > 0 ? k->inv_n : n_valid ? 1.0 / (double)n_valid : 0.0;
            const double coef = (double)dl_value * inv_n;
            cmp cl = {0}, cd = {0};
            cmp_add(&cl, b.cuda[0][0], b.cpu[0][0], 0x1p-22 * fabs(b.cpu[0][0]));
            for (int64_t i = 0; i < V * T; i++)
                cmp_add(&cd, b.cuda[1][i], b.cpu[1][i], 0x1p-23 * fabs(b.cpu[1][i]) + 4.0 * V * U_F64 * fabs(coef));
            char what[192];
            snprintf(what, sizeof what, "%s [%lld,%lld]", k->what, (long long)V, (long long)T);
            report("cross_entropy", "f32", what, &cl, "2^-22 |L|");
            report("ce_back", "f32", what, &cd, "2^-23|dz|+4V u_d|coef|");
        }
        both_free(&b);
        rg_graph_free(g), rg_graph_free(tg);
        free(z), free(zb), free(labels);
    }
}

// A label outside [0, V): the CPU refuses the node; the device, which cannot stop
// there, gives a NaN loss and NaN gradients (the executor's loss check names them).
static void test_cuda_cross_entropy_bad_label(void) {
    if (!have_device()) RG_SKIP("no device: %s", why);
    enum { V = 10, T = 4 };
    float *z = normal_values(V * T, 1100, 1.0f), dl_value = 1.0f, loss_v = 0, dz_v[V * T];
    int32_t labels[T] = {1, -100, 10, 3};
    rg_graph *g = rg_graph_new();
    int64_t zne[2] = {V, T}, lne[1] = {T}, one[1] = {1};
    rg_node *lz = rg_leaf(g, "logits", RG_TYPE_F32, 2, zne, z), *ll = rg_leaf(g, "labels", RG_TYPE_I32, 1, lne, labels);
    rg_node *out[2] = {rg_cross_entropy_loss(g, lz, ll, -100),
                       rg_cross_entropy_loss_back(g, rg_leaf(g, "dL", RG_TYPE_F32, 1, one, &dl_value), lz, ll, -100)};
    float *dst[2] = {&loss_v, dz_v};
    rg_error err = {0};
    rg_status st = run_on(g, RG_DEVICE_CUDA, out, 2, dst, NULL, &err);
    RG_CHECK(st == RG_OK, "cuda run: %s", err.msg);
    int nan_rows = 0, zero_row = 1;
    for (int t = 0; t < T; t++) nan_rows += isnan(dz_v[t * V]);
    for (int v = 0; v < V; v++) zero_row &= dz_v[V + v] == 0.0f;  // the ignored token
    printf("    label 10 of V = 10: device loss %g, gradient rows NaN %d of %d, ignored row zero %d\n", (double)loss_v,
           nan_rows, T, zero_row);
    RG_CHECK(isnan(loss_v), "the loss with a bad label is %g, expected NaN", (double)loss_v);
    RG_CHECK(nan_rows == T - 1 && zero_row, "gradient: %d NaN rows (expected %d), ignored row zero %d", nan_rows, T - 1,
             zero_row);
    st = run_on(g, RG_DEVICE_CPU, out, 2, dst, NULL, &err);
    printf("    cpu: %s\n", err.msg);
    RG_CHECK(st != RG_OK && strstr(err.msg, "label 10"), "the CPU accepted the bad label: %s", err.msg);
    rg_graph_free(g);
    free(z);
}

// ---------------------------------------------------------------------------
// ATTN_DECODE: q [Dh, H, T] against the first n_kv rows of a cache of C rows
// (keys [Dh, C, Hkv], transposed values [C, Dh, Hkv]), through views with the
// cache's strides as forward.c makes them; the rows past n_kv are never read.

typedef struct ad_case {
    int64_t Dh, H, Hkv, T, n_kv, C, window;
    float softcap;
} ad_case;

static void test_cuda_attn_decode(void) {
    if (!have_device()) RG_SKIP("no device: %s", why);
    static const ad_case cases[] = {
        {64, 6, 2, 1, 150, 160, 0, 0},  {16, 4, 4, 3, 77, 80, 0, 0},       {20, 20, 2, 1, 5, 9, 0, 0},
        {128, 8, 2, 2, 300, 320, 0, 0}, {512, 2, 1, 1, 40, 48, 0, 0},      {1, 2, 1, 1, 1, 1, 0, 0},
        {32, 4, 2, 4, 1100, 1104, 0, 0}, {32, 4, 2, 3, 300, 300, 100, 0}, {64, 4, 1, 2, 260, 264, 7, 0.8f},
        {16, 4, 2, 3, 150, 152, 0, 0.8f},
    };
    static const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (size_t ti = 0; ti < 2; ti++) {
            const ad_case *k = &cases[ci];
            const uint32_t type = types[ti];
            const size_t es = type == RG_TYPE_F16 ? 2 : 4;
            const int64_t Dh = k->Dh, H = k->H, Hkv = k->Hkv, T = k->T, n_kv = k->n_kv, C = k->C;
            const int64_t nq = Dh * H * T, nc = Dh * C * Hkv;
            float *q = normal_values(nq, 1200 + ci, 1.5f), *kf = normal_values(nc, 1300 + ci, 1.5f);
            float *vf = normal_values(nc, 1400 + ci, 1.0f);
            void *kc = malloc((size_t)nc * es), *vc = malloc((size_t)nc * es);
            for (int64_t i = 0; i < nc; i++) {  // the values as the cache holds them (f16 rounded once, here)
                if (type == RG_TYPE_F16) {
                    ((uint16_t *)kc)[i] = rg_fp32_to_fp16(kf[i]), kf[i] = rg_fp16_to_fp32(((uint16_t *)kc)[i]);
                    ((uint16_t *)vc)[i] = rg_fp32_to_fp16(vf[i]), vf[i] = rg_fp16_to_fp32(((uint16_t *)vc)[i]);
                } else {
                    ((float *)kc)[i] = kf[i], ((float *)vc)[i] = vf[i];
                }
            }
            const float scale = 1.0f / sqrtf((float)Dh);
            rg_graph *g = rg_graph_new();
            const int64_t qne[3] = {Dh, H, T}, kne[3] = {Dh, C, Hkv}, vne[3] = {C, Dh, Hkv};
            const int64_t kvne[3] = {Dh, n_kv, Hkv}, vtne[3] = {n_kv, Dh, Hkv};
            const size_t knb[3] = {es, Dh * es, Dh * C * es}, vnb[3] = {es, C * es, Dh * C * es};
            rg_node *lq = rg_leaf(g, "q", RG_TYPE_F32, 3, qne, q);
            rg_node *lk = rg_view(g, rg_leaf(g, "cache_k", type, 3, kne, kc), 3, kvne, knb, 0);
            rg_node *lv = rg_view(g, rg_leaf(g, "cache_v", type, 3, vne, vc), 3, vtne, vnb, 0);
            rg_node *out[1] = {rg_attn_decode(g, lq, lk, lv, scale, k->softcap, k->window)};
            both b = {0};
            if (run_both(g, out, 1, &b)) {
                // The bound's ingredients: S = max sum_d |q_d k_d|, Zmax = max |scale q.k|, Vmax.
                double S = 0, Z = 0, Vmax = 0;
                for (int64_t t = 0; t < T; t++)
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t j = 0; j < n_kv; j++) {
                            const float *qr = q + (t * H + h) * Dh, *kr = kf + (h / (H / Hkv) * C + j) * Dh;
                            double s = 0, sa = 0;
                            for (int64_t d = 0; d < Dh; d++) s += (double)qr[d] * kr[d], sa += fabs((double)qr[d] * kr[d]);
                            S = fmax(S, sa), Z = fmax(Z, fabs(scale * s));
                        }
                for (int64_t kvh = 0; kvh < Hkv; kvh++)
                    for (int64_t d = 0; d < Dh; d++)
                        for (int64_t j = 0; j < n_kv; j++) Vmax = fmax(Vmax, fabs(vf[(kvh * Dh + d) * C + j]));
                // a cap only shrinks a score's error (tanh' <= 1) and adds tanhf's few ulps of the cap
                const double e_z = scale * 2.0 * Dh * U_F32 * S + 2 * U_F32 * Z + 4 * U_F32 * k->softcap;
                const double tol = Vmax * (4 * e_z + 264 * U_F32);
                cmp c = {0};
                for (int64_t i = 0; i < nq; i++) cmp_add(&c, b.cuda[0][i], b.cpu[0][i], tol);
                char what[192], bound[48];
                snprintf(what, sizeof what, "Dh=%lld H=%lld Hkv=%lld T=%lld n_kv=%lld window=%lld softcap=%g", (long long)Dh,
                         (long long)H, (long long)Hkv, (long long)T, (long long)n_kv, (long long)k->window,
                         (double)k->softcap);
                snprintf(bound, sizeof bound, "%.2g (Vmax(4e_z+264u))", tol);
                report("attn_decode", type == RG_TYPE_F16 ? "f16" : "f32", what, &c, bound);
            }
            both_free(&b);
            rg_graph_free(g);
            free(q), free(kf), free(vf), free(kc), free(vc);
        }
}

// ---------------------------------------------------------------------------
// One graph of this family alone, as a training step and a decode step use it:
// h = rms_norm(x), r = rope(h), L = ce(r as logits), its backward back to dx
// through ce_back, rope_back and rms_norm_back; attention of r's heads over a
// cache; a softmax and its backward. All of it on the device, nothing copied.

static void test_cuda_family_graph_stays_on_device(void) {
    if (!have_device()) RG_SKIP("no device: %s", why);
    enum { HD = 32, NH = 4, T = 6, C = 40, V = HD * NH };
    float *x = normal_values(HD * NH * T, 1500, 1.0f), *kc = normal_values(HD * C, 1501, 1.0f);
    float *vc = normal_values(HD * C, 1502, 1.0f), *sc = normal_values(C * T, 1503, 2.0f);
    float *dy = normal_values(C * T, 1504, 1.0f), dl_value = 1.0f;
    int32_t pos[T], labels[T];
    for (int t = 0; t < T; t++) pos[t] = 10 + t, labels[t] = t == 2 ? -100 : (t * 37) % V;
    rg_graph *g = rg_graph_new();
    const int64_t xne[3] = {HD, NH, T}, tne[1] = {T}, one[1] = {1}, zne[2] = {V, T}, kne[3] = {HD, C, 1};
    const int64_t vne[3] = {C, HD, 1}, sne[2] = {C, T};
    rg_node *lx = rg_leaf(g, "x", RG_TYPE_F32, 3, xne, x), *lpos = rg_leaf(g, "pos", RG_TYPE_I32, 1, tne, pos);
    rg_node *ll = rg_leaf(g, "labels", RG_TYPE_I32, 1, tne, labels);
    rg_node *h = rg_rms_norm(g, lx, 1e-5f), *r = rg_rope(g, h, lpos, HD, 2, 10000.0f, 1.0f);
    rg_node *z = rg_reshape(g, r, 2, zne);
    rg_node *loss = rg_cross_entropy_loss(g, z, ll, -100);
    rg_node *dz = rg_cross_entropy_loss_back(g, rg_leaf(g, "dL", RG_TYPE_F32, 1, one, &dl_value), z, ll, -100);
    rg_node *dh = rg_rope_back(g, rg_reshape(g, dz, 3, xne), lpos, HD, 2, 10000.0f, 1.0f);
    rg_node *dx = rg_rms_norm_back(g, dh, lx, 1e-5f);
    rg_node *att = rg_attn_decode(g, r, rg_leaf(g, "cache_k", RG_TYPE_F32, 3, kne, kc),
                                  rg_leaf(g, "cache_v", RG_TYPE_F32, 3, vne, vc), 0.125f, 0.0f, 0);
    rg_node *p = rg_soft_max(g, rg_leaf(g, "scores", RG_TYPE_F32, 2, sne, sc), NULL, true, 0.5f, 0.0f);
    rg_node *dp = rg_soft_max_back(g, rg_leaf(g, "dy", RG_TYPE_F32, 2, sne, dy), p, NULL, 0.5f, 0.0f);
    rg_node *out[4] = {loss, dx, att, dp};
    both b = {0};
    if (run_both(g, out, 4, &b)) {  // checks the stats: every kernel on the device, no copy
        printf("    %d kernels on the device, none on the CPU, no copy inside the run; loss cuda %.9g cpu %.9g\n",
               kernel_nodes(g), (double)b.cuda[0][0], (double)b.cpu[0][0]);
        // Composed ops: the elementwise bounds above compound, so one relative bound for the whole.
        const char *names[4] = {"loss", "dx", "attn", "soft_max_back"};
        for (int k = 0; k < 4; k++) {
            const int64_t n = rg_tensor_nelements(&out[k]->t);
            double mx = 0;
            for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(b.cpu[k][i]));
            cmp c = {0};
            for (int64_t i = 0; i < n; i++) cmp_add(&c, b.cuda[k][i], b.cpu[k][i], 1e-5 * mx);
            report("family graph", "f32", names[k], &c, "1e-5 max|out|");
        }
    }
    both_free(&b);
    rg_graph_free(g);
    free(x), free(kc), free(vc), free(sc), free(dy);
}

// ---------------------------------------------------------------------------
// The support rules, from types, shapes and strides alone (no device needed; a
// build without CUDA says no to every node).

static void test_cuda_norm_support_table(void) {
    static float f[8192];
    static uint16_t hf[8192];
    static int32_t iv[64];
    rg_graph *g = rg_graph_new();
    const int64_t xne[3] = {16, 4, 3}, tne[1] = {3}, zne[2] = {16, 12}, tne12[1] = {12}, one[1] = {1};
    const int64_t qne[3] = {16, 4, 2}, kne[3] = {16, 8, 2}, vne[3] = {8, 16, 2}, bigq[3] = {520, 2, 1};
    const int64_t bigk[3] = {520, 4, 1}, bigv[3] = {4, 520, 1};
    rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 3, xne, f), *pos = rg_leaf(g, "pos", RG_TYPE_I32, 1, tne, iv);
    rg_node *z = rg_leaf(g, "z", RG_TYPE_F32, 2, zne, f), *lab = rg_leaf(g, "labels", RG_TYPE_I32, 1, tne12, iv);
    rg_node *dl = rg_leaf(g, "dL", RG_TYPE_F32, 1, one, f), *q = rg_leaf(g, "q", RG_TYPE_F32, 3, qne, f);
    rg_node *k32 = rg_leaf(g, "k32", RG_TYPE_F32, 3, kne, f), *v32 = rg_leaf(g, "v32", RG_TYPE_F32, 3, vne, f);
    rg_node *k16 = rg_leaf(g, "k16", RG_TYPE_F16, 3, kne, hf), *v16 = rg_leaf(g, "v16", RG_TYPE_F16, 3, vne, hf);
    rg_node *kb = rg_leaf(g, "kbf", RG_TYPE_BF16, 3, kne, hf), *vb = rg_leaf(g, "vbf", RG_TYPE_BF16, 3, vne, hf);
    rg_node *rope1 = rg_rope(g, x, pos, 16, 0, 10000.0f, 1.0f);
    rg_node *rope_bad = on_sources(g, rope1, x, pos, NULL);
    rope_bad->ip[1] = 1;  // a mode neither side has
    rg_node *sm_cap = rg_soft_max_back(g, x, x, x, 1.0f, 2.0f);
    rg_node *sm_cap_no_a = on_sources(g, sm_cap, x, x, NULL);
    struct {
        const char *what;
        rg_node *n;
        bool device;
    } rows[] = {
        {"rms_norm", rg_rms_norm(g, x, 1e-5f), true},
        {"rms_norm_back", rg_rms_norm_back(g, x, x, 1e-5f), true},
        {"rope normal", rope1, true},
        {"rope_back neox n_rot 8/16", rg_rope_back(g, x, pos, 8, 2, 10000.0f, 1.0f), true},
        {"rope mode 1", rope_bad, false},
        {"soft_max_back", rg_soft_max_back(g, x, x, NULL, 1.0f, 0.0f), true},
        {"soft_max_back softcap", sm_cap, true},
        {"soft_max_back softcap, no a", sm_cap_no_a, false},
        {"cross_entropy_loss", rg_cross_entropy_loss(g, z, lab, -100), true},
        {"cross_entropy_loss_back", rg_cross_entropy_loss_back(g, dl, z, lab, -100), true},
        {"attn_decode f32", rg_attn_decode(g, q, k32, v32, 0.25f, 0.0f, 0), true},
        {"attn_decode f16", rg_attn_decode(g, q, k16, v16, 0.25f, 0.0f, 0), true},
        {"attn_decode bf16 cache", on_sources(g, rg_attn_decode(g, q, k16, v16, 0.25f, 0.0f, 0), q, kb, vb), false},
        {"attn_decode Dh 520", rg_attn_decode(g, rg_leaf(g, "qb", RG_TYPE_F32, 3, bigq, f),
                                              rg_leaf(g, "kb", RG_TYPE_F32, 3, bigk, f),
                                              rg_leaf(g, "vb", RG_TYPE_F32, 3, bigv, f), 0.25f, 0.0f, 0),
         false},
    };
    rg_error err = {0};
    RG_REQUIRE(rg_graph_error(g, &err) == RG_OK, "%s", err.msg);
    const int compiled = rg_cuda_compiled();
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const bool want = compiled && rows[i].device, got = rg_op_cell_runs(RG_BACKEND_CUDA, rows[i].n);
        printf("    %-30s %s\n", rows[i].what, got ? "device" : "cpu");
        RG_CHECK(got == want, "%s: the CUDA cell says %d, expected %d", rows[i].what, got, want);
    }
    static const struct {
        rg_op op;
        const char *types;
    } listed[] = {{RG_OP_RMS_NORM, "f32"},           {RG_OP_RMS_NORM_BACK, "f32"},
                  {RG_OP_ROPE, "f32"},               {RG_OP_ROPE_BACK, "f32"},
                  {RG_OP_SOFT_MAX_BACK, "f32"},      {RG_OP_CROSS_ENTROPY_LOSS, "f32"},
                  {RG_OP_CROSS_ENTROPY_LOSS_BACK, "f32"}, {RG_OP_ATTN_DECODE, "f32, f16"}};
    for (size_t i = 0; compiled && i < sizeof listed / sizeof *listed; i++) {
        const char *t = rg_op_cell(RG_BACKEND_CUDA, listed[i].op).types;
        RG_CHECK(t && !strcmp(t, listed[i].types), "%s lists '%s', expected '%s'", rg_op_name(listed[i].op),
                 t ? t : "(null)", listed[i].types);
    }
    rg_graph_free(g);
}

static const rg_test_case cases[] = {
    RG_TEST(test_cuda_norm_support_table),
    RG_TEST(test_cuda_rms_norm),
    RG_TEST(test_cuda_rope),
    RG_TEST(test_cuda_soft_max_back),
    RG_TEST(test_cuda_soft_max_forward_backward),
    RG_TEST(test_cuda_cross_entropy),
    RG_TEST(test_cuda_cross_entropy_bad_label),
    RG_TEST(test_cuda_attn_decode),
    RG_TEST(test_cuda_family_graph_stays_on_device),
    {0},
};

int main(int argc, char **argv) {
    printf("cuda compiled: %s\n", rg_cuda_compiled() ? "yes" : "no");
    return rg_test_run(argc, argv, cases);
}
