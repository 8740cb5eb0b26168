// test_cuda_elementwise.c - the CUDA cells of src/cuda/ops_elementwise.cu against
// the CPU kernels, through the executor (RG_DEVICE_CUDA and RG_DEVICE_CPU on the
// same graph). Without a device (a GPU, or the host execution of the CUDA code
// under RETRO_CUDA_HOST=1) every parity case skips saying why; the support
// table runs everywhere.
//
// Every comparison is bit for bit (tol 0): each kernel performs the CPU's IEEE
// operations in the CPU's order -
//   FILL, CONT, REPEAT, VIEW_BACK, GET_ROWS  copies of bits (a quantized table: the CPU's dequantized bits)
//   CPY, CPY_INTO                            half.c's conversions on bit patterns
//   SUB, MUL, SCALE                          one IEEE op per element
//   SILU, SILU_BACK, SWIGLU                  exp_poly.h's polynomial, op for op, no FMA
//   REPEAT_BACK                              double sums in the CPU's tile order
//   SUM, MEAN, SUM_ROWS                      ops_reduce.c's chunks, 8 lanes and tree
//   GET_ROWS_BACK                            f32 sums per row in increasing token order
// (The inputs are finite here: a GPU's arithmetic NaN would be the canonical one.)
//
// Each table line: op, type, case and shape, the largest |gpu - cpu| and the
// tolerance. Each graph must run whole on the device: every kernel node counted
// in nodes_gpu, no fallback and no copy inside the run.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "quant_fixture.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

static char why[256];

static int have_device(void) { return rg_cuda_device_count(why, sizeof why) > 0; }

#define NEED_DEVICE() \
    do { if (!have_device()) RG_SKIP("no GPU: %s", why); } while (0)

// ---------------------------------------------------------------------------
// Sources

// How a source of shape ne is made from its leaf.
enum { PLAIN, TRANSPOSED, PERMUTED, PADDED };
static const char *const view_names[] = {"", "transposed ", "permuted ", "padded "};

// Host bytes the leaves of one graph point at, freed with it.
static void *keep[64];
static int n_keep;

static void *kept(void *p) {
    if (n_keep < (int)(sizeof keep / sizeof *keep)) keep[n_keep++] = p;
    return p;
}

static void free_kept(void) {
    while (n_keep) free(keep[--n_keep]);
}

static int64_t numel(const int64_t ne[4]) { return ne[0] * ne[1] * ne[2] * ne[3]; }

static size_t type_size(uint32_t type) { return rg_type_get(type)->type_size; }

// n values of `type` (f32, f16, bf16): normal times scale, from stream `stream`.
static void *values(int64_t n, uint32_t type, uint64_t stream, float scale) {
    void *p = kept(malloc((size_t)(n > 0 ? n : 1) * type_size(type)));
    for (int64_t i = 0; p && i < n; i++) {
        const float v = scale * rg_rng_normal(7, stream, (uint64_t)i);
        if (type == RG_TYPE_F32) ((float *)p)[i] = v;
        else ((uint16_t *)p)[i] = type == RG_TYPE_F16 ? rg_fp32_to_fp16(v) : rg_fp32_to_bf16(v);
    }
    return p;
}

// A source of shape ne: a leaf (a parameter when param), or a view of one.
//   TRANSPOSED  the transpose of a [ne1, ne0, ne2, ne3] leaf (dim 0 strided)
//   PERMUTED    permute(2, 0, 1, 3) of a [ne2, ne0, ne1, ne3] leaf
//   PADDED      rows of ne0 from a leaf with rows of ne0 + 3, one element in
static rg_node *source(rg_graph *g, const char *name, uint32_t type, const int64_t ne[4], int view, uint64_t stream,
                       float scale, int param) {
    int64_t lne[4] = {ne[0], ne[1], ne[2], ne[3]};
    if (view == TRANSPOSED) lne[0] = ne[1], lne[1] = ne[0];
    if (view == PERMUTED) lne[0] = ne[2], lne[1] = ne[0], lne[2] = ne[1];
    if (view == PADDED) lne[0] = ne[0] + 3;
    void *data = values(numel(lne), type, stream, scale);
    rg_node *leaf = param ? rg_param(g, name, type, 4, lne, data) : rg_leaf(g, name, type, 4, lne, data);
    if (!leaf) return NULL;
    switch (view) {
    case TRANSPOSED: return rg_transpose(g, leaf);
    case PERMUTED: return rg_permute(g, leaf, 2, 0, 1, 3);
    case PADDED: return rg_view(g, leaf, 4, ne, leaf->t.nb, type_size(type));
    default: return leaf;
    }
}

// Makes a sum's bits depend on its order: every 97th element of src's leaf
// becomes +-1e20 (or +-1e10), cancelled 57 elements later, so that the small
// values added while a spike is in a double accumulator are lost.
static void spike(rg_node *src) {
    rg_node *leaf = src->view_of ? src->view_of : src;
    float *p = leaf->t.data;
    const int64_t n = rg_tensor_nelements(&leaf->t);
    for (int64_t i = 0; i < n; i++) {
        const float big = (i / 97) % 3 ? 1e20f : -1e10f;
        if (i % 97 == 3) p[i] = big;
        if (i % 97 == 60) p[i] = -big;
    }
}

// I32 ids [n] in 0..rows-1 (many repeats), every `step`-th of a leaf (a strided view for step > 1).
static rg_node *ids_node(rg_graph *g, int64_t n, int64_t rows, int step, uint64_t seed) {
    int64_t ln = n * step;
    int32_t *p = kept(malloc((size_t)ln * 4));
    for (int64_t i = 0; i < ln; i++) p[i] = (int32_t)(rg_rng_u64(seed, 3, (uint64_t)i) % (uint64_t)rows);
    rg_node *leaf = rg_leaf(g, "ids", RG_TYPE_I32, 1, &ln, p);
    if (step == 1 || !leaf) return leaf;
    size_t nb[1] = {(size_t)step * 4};
    return rg_view(g, leaf, 1, &n, nb, 0);
}

// ---------------------------------------------------------------------------
// Running and comparing

// Plans and runs g on dev; copies each output's bytes (its span) into bufs[i].
static rg_status run_on(rg_graph *g, rg_device dev, rg_node *const *outs, int n_out, void **bufs, rg_exec_stats *stats,
                        rg_error *err) {
    rg_status st = rg_graph_error(g, err);
    if (st) return st;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 2, .budget = 0, .device = dev};
    st = rg_exec_create(&ex, g, &o, err);
    if (!st) st = rg_exec_run(ex, 0, -1, err);
    for (int i = 0; !st && i < n_out; i++) st = rg_exec_read(ex, outs[i], bufs[i], rg_tensor_span(&outs[i]->t), err);
    if (ex && stats) *stats = rg_exec_get_stats(ex);
    rg_exec_free(ex);
    return st;
}

// Elements of type `type` that differ in their bits, and the largest |x - y| of their values.
static int64_t bits_differ(uint32_t type, const void *x, const void *y, size_t bytes, double *maxd) {
    const size_t esz = rg_type_get(type)->block_size == 1 ? type_size(type) : 1;
    int64_t bad = 0;
    *maxd = 0;
    for (size_t i = 0; i < bytes / esz; i++) {
        const char *p = (const char *)x + i * esz, *q = (const char *)y + i * esz;
        if (memcmp(p, q, esz) == 0) continue;
        bad++;
        double d = INFINITY;
        if (type == RG_TYPE_F32) {
            float u, v;
            memcpy(&u, p, 4), memcpy(&v, q, 4);
            d = fabs((double)u - v);
        } else if (type == RG_TYPE_F16 || type == RG_TYPE_BF16) {
            uint16_t u, v;
            memcpy(&u, p, 2), memcpy(&v, q, 2);
            d = type == RG_TYPE_F16 ? fabs((double)rg_fp16_to_fp32(u) - rg_fp16_to_fp32(v))
                                    : fabs((double)rg_bf16_to_fp32(u) - rg_bf16_to_fp32(v));
        }
        if (!(d <= *maxd)) *maxd = d;  // NaN differences count as the largest
    }
    return bad;
}

// Kernel nodes of g (views and leaves run nothing).
static int kernel_nodes(const rg_graph *g) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) k += g->nodes[i]->op != RG_OP_NONE && !rg_op_defs[g->nodes[i]->op].is_view;
    return k;
}

// Runs g on the device, then on the CPU (a CPY_INTO writes the CPU's leaf in
// place, so the device must read it first), compares every output bit for bit
// and prints one table line per output; the device must run every kernel node
// with no copy inside the run. labels[i]: the line's type column.
static void parity(const char *op, const char *what, rg_graph *g, rg_node *const *outs, const char *const *labels,
                   int n_out) {
    void *gpu[8], *cpu[8];
    RG_REQUIRE(n_out <= 8, "too many outputs");
    for (int i = 0; i < n_out; i++) {
        if (outs[i]) outs[i]->flags |= RG_NODE_OUTPUT;
        const size_t bytes = outs[i] ? rg_tensor_span(&outs[i]->t) : 1;
        gpu[i] = malloc(bytes), cpu[i] = malloc(bytes);
    }
    rg_error err = {0};
    rg_exec_stats s = {0};
    rg_status st = run_on(g, RG_DEVICE_CUDA, outs, n_out, gpu, &s, &err);
    RG_CHECK(st == RG_OK, "%s %s: cuda run: %s", op, what, err.msg);
    if (!st) {
        st = run_on(g, RG_DEVICE_CPU, outs, n_out, cpu, NULL, &err);
        RG_CHECK(st == RG_OK, "%s %s: cpu run: %s", op, what, err.msg);
    }
    for (int i = 0; !st && i < n_out; i++) {
        double maxd;
        const int64_t bad = bits_differ(outs[i]->t.type, gpu[i], cpu[i], rg_tensor_span(&outs[i]->t), &maxd);
        printf("    %-13s %-6s %-52s max|d| %-9.3g tol 0 (bits)  %s\n", op, labels[i], what, maxd, bad ? "FAIL" : "ok");
        RG_CHECK(bad == 0, "%s %s %s: %lld elements differ from the CPU (max |d| %.3g)", op, labels[i], what,
                 (long long)bad, maxd);
    }
    if (!st) {
        const int want = kernel_nodes(g);
        RG_CHECK(s.nodes_gpu == want && s.nodes_cpu == 0 && s.nodes_fallback == 0,
                 "%s %s: nodes gpu %d cpu %d fallback %d, expected %d on the device", op, what, s.nodes_gpu,
                 s.nodes_cpu, s.nodes_fallback, want);
        RG_CHECK(s.copies_scheduled == 0 && s.copies_to_device == 0 && s.copies_to_host == 0,
                 "%s %s: copies inside the run: %d scheduled, %llu to device, %llu to host", op, what,
                 s.copies_scheduled, (unsigned long long)s.copies_to_device, (unsigned long long)s.copies_to_host);
    }
    for (int i = 0; i < n_out; i++) free(gpu[i]), free(cpu[i]);
}

static void parity1(const char *op, const char *what, rg_graph *g, rg_node *out) {
    const char *label = out ? rg_type_get(out->t.type)->name : "?";
    if (!out) {
        rg_error err = {0};
        rg_graph_error(g, &err);
        RG_CHECK(out != NULL, "%s %s: the graph was not built: %s", op, what, err.msg);
        return;
    }
    parity(op, what, g, &out, &label, 1);
}

static void shape_str(char *s, size_t cap, const char *what, int view, const int64_t a[4]) {
    snprintf(s, cap, "%s%s[%lld,%lld,%lld,%lld]", what, view_names[view], (long long)a[0], (long long)a[1],
             (long long)a[2], (long long)a[3]);
}

// ---------------------------------------------------------------------------
// FILL

static void test_cuda_fill_parity(void) {
    NEED_DEVICE();
    static const struct {
        uint32_t type;
        int64_t ne[4];
        float value;
    } cases[] = {
        {RG_TYPE_F32, {1000003, 1, 1, 1}, 0.1f}, {RG_TYPE_F32, {7, 1, 3, 1}, -0.0f},
        {RG_TYPE_F16, {67, 33, 1, 1}, 0.1f},     {RG_TYPE_F16, {5, 1, 3, 2}, 65520.0f},  // rounds to Inf
        {RG_TYPE_F16, {300, 1, 1, 1}, 1e-6f},    // an f16 subnormal
        {RG_TYPE_BF16, {5, 1, 3, 1}, -3.7f},     {RG_TYPE_BF16, {1, 1, 1, 1}, NAN},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rg_graph *g = rg_graph_new();
        rg_node *y = rg_fill(g, cases[c].type, 4, cases[c].ne, cases[c].value);
        char what[96], sh[64];
        shape_str(sh, sizeof sh, "", PLAIN, cases[c].ne);
        snprintf(what, sizeof what, "%g %s", (double)cases[c].value, sh);
        parity1("fill", what, g, y);
        rg_graph_free(g);
        free_kept();
    }
}

// ---------------------------------------------------------------------------
// SUB, MUL, SCALE, SILU, SILU_BACK, SWIGLU

typedef struct ew_case {
    rg_op op;
    const char *what;
    int64_t a[4], b[4];  // b: SUB/MUL's tiled source, SILU_BACK's a, SWIGLU's up
    int a_view, b_view;
    float scale;         // of the inputs (SILU: wide enough to pass exp's cutoff)
    float p;             // SCALE's factor
} ew_case;

static void test_cuda_ew_parity(void) {
    NEED_DEVICE();
    static const ew_case cases[] = {
        {RG_OP_SUB, "same shape ", {67, 33, 3, 2}, {67, 33, 3, 2}, PLAIN, PLAIN, 1, 0},
        {RG_OP_SUB, "bias over rows ", {67, 33, 3, 2}, {67, 1, 1, 1}, PLAIN, PLAIN, 1, 0},
        {RG_OP_SUB, "tiled b ", {67, 33, 3, 2}, {1, 33, 1, 2}, PLAIN, PLAIN, 1, 0},
        {RG_OP_SUB, "b tiled along dim 0 ", {64, 5, 2, 1}, {16, 5, 1, 1}, PLAIN, PLAIN, 1, 0},
        {RG_OP_SUB, "", {67, 33, 1, 1}, {67, 33, 1, 1}, TRANSPOSED, TRANSPOSED, 1, 0},
        {RG_OP_SUB, "1M ", {1000003, 1, 1, 1}, {1000003, 1, 1, 1}, PLAIN, PLAIN, 1, 0},
        {RG_OP_MUL, "same shape ", {67, 33, 3, 2}, {67, 33, 3, 2}, PLAIN, PERMUTED, 1, 0},
        {RG_OP_MUL, "bias over rows ", {67, 33, 3, 2}, {67, 1, 1, 1}, PADDED, PLAIN, 1, 0},
        {RG_OP_MUL, "per-row scale ", {67, 33, 3, 1}, {1, 33, 3, 1}, PERMUTED, PADDED, 1, 0},
        {RG_OP_MUL, "ne=1 dims ", {1, 1, 37, 1}, {1, 1, 1, 1}, PLAIN, PLAIN, 1, 0},
        {RG_OP_SCALE, "", {1000003, 1, 1, 1}, {0}, PLAIN, PLAIN, 1, 0.37f},
        {RG_OP_SCALE, "", {67, 33, 3, 1}, {0}, TRANSPOSED, PLAIN, 1, -1.0f},
        {RG_OP_SCALE, "", {13, 7, 5, 2}, {0}, PERMUTED, PLAIN, 1, 3e-39f},  // subnormal products
        {RG_OP_SILU, "", {4099, 3, 1, 1}, {0}, PLAIN, PLAIN, 8, 0},
        {RG_OP_SILU, "wide ", {67, 33, 3, 1}, {0}, TRANSPOSED, PLAIN, 60, 0},
        {RG_OP_SILU_BACK, "", {4099, 3, 1, 1}, {4099, 3, 1, 1}, PLAIN, PLAIN, 6, 0},
        {RG_OP_SILU_BACK, "wide ", {13, 7, 5, 2}, {13, 7, 5, 2}, PERMUTED, TRANSPOSED, 40, 0},
        {RG_OP_SWIGLU, "", {4099, 3, 1, 1}, {4099, 3, 1, 1}, PLAIN, PLAIN, 6, 0},
        {RG_OP_SWIGLU, "wide ", {67, 33, 1, 1}, {67, 33, 1, 1}, PADDED, TRANSPOSED, 40, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const ew_case *k = &cases[c];
        rg_graph *g = rg_graph_new();
        rg_node *a = source(g, "a", RG_TYPE_F32, k->a, k->a_view, 100 + c, k->scale, 0), *b = NULL, *y = NULL;
        if (k->op != RG_OP_SCALE && k->op != RG_OP_SILU)
            b = source(g, "b", RG_TYPE_F32, k->b, k->b_view, 200 + c, k->scale, 0);
        switch (k->op) {
        case RG_OP_SUB: y = rg_sub(g, a, b); break;
        case RG_OP_MUL: y = rg_mul(g, a, b); break;
        case RG_OP_SCALE: y = rg_scale(g, a, k->p); break;
        case RG_OP_SILU: y = rg_silu(g, a); break;
        case RG_OP_SILU_BACK: y = rg_silu_back(g, a, b); break;
        default: y = rg_swiglu(g, a, b); break;
        }
        char what[96], sh[64];
        shape_str(sh, sizeof sh, k->what, k->a_view, k->a);
        if (b) snprintf(what, sizeof what, "%s, %s[%lld,%lld,%lld,%lld]", sh, view_names[k->b_view], (long long)k->b[0],
                        (long long)k->b[1], (long long)k->b[2], (long long)k->b[3]);
        else snprintf(what, sizeof what, "%s", sh);
        parity1(rg_op_name(k->op), what, g, y);
        rg_graph_free(g);
        free_kept();
    }
}

// ---------------------------------------------------------------------------
// REPEAT, REPEAT_BACK

typedef struct rep_case {
    rg_op op;
    int64_t a[4], like[4];
    int a_view, spiky;
} rep_case;

static void test_cuda_repeat_parity(void) {
    NEED_DEVICE();
    static const rep_case cases[] = {
        {RG_OP_REPEAT, {3, 1, 2, 1}, {12, 5, 4, 3}, PLAIN, 0},
        {RG_OP_REPEAT, {67, 1, 1, 1}, {67, 33, 1, 1}, PLAIN, 0},
        {RG_OP_REPEAT, {5, 4, 1, 1}, {10, 8, 3, 1}, TRANSPOSED, 0},
        {RG_OP_REPEAT, {1, 1, 1, 1}, {1000, 1, 1, 1}, PLAIN, 0},
        {RG_OP_REPEAT_BACK, {12, 5, 4, 3}, {3, 1, 2, 1}, PLAIN, 0},
        {RG_OP_REPEAT_BACK, {67, 33, 1, 1}, {67, 1, 1, 1}, PLAIN, 0},
        {RG_OP_REPEAT_BACK, {67, 33, 1, 1}, {1, 33, 1, 1}, PADDED, 0},
        {RG_OP_REPEAT_BACK, {10, 8, 3, 1}, {5, 4, 1, 1}, TRANSPOSED, 0},
        {RG_OP_REPEAT_BACK, {13, 7, 5, 2}, {13, 1, 5, 1}, PERMUTED, 0},
        {RG_OP_REPEAT_BACK, {1000, 300, 1, 1}, {1, 1, 1, 1}, PLAIN, 0},  // 300k terms into one output
        {RG_OP_REPEAT_BACK, {1000, 300, 1, 1}, {1, 1, 1, 1}, PLAIN, 1},
        {RG_OP_REPEAT_BACK, {67, 33, 3, 1}, {67, 1, 3, 1}, TRANSPOSED, 1},
        {RG_OP_REPEAT_BACK, {12, 50, 4, 3}, {3, 5, 2, 1}, PLAIN, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const rep_case *k = &cases[c];
        rg_graph *g = rg_graph_new();
        rg_node *a = source(g, "a", RG_TYPE_F32, k->a, k->a_view, 300 + c, 1.0f, 0);
        if (k->spiky) spike(a);
        rg_node *like = rg_leaf(g, "like", RG_TYPE_F32, 4, k->like, values(numel(k->like), RG_TYPE_F32, 1, 0.0f));
        rg_node *y = k->op == RG_OP_REPEAT ? rg_repeat(g, a, like) : rg_repeat_back(g, a, like);
        char what[96], sh[64];
        shape_str(sh, sizeof sh, k->spiky ? "spiky " : "", k->a_view, k->a);
        snprintf(what, sizeof what, "%s -> [%lld,%lld,%lld,%lld]", sh, (long long)k->like[0], (long long)k->like[1],
                 (long long)k->like[2], (long long)k->like[3]);
        parity1(rg_op_name(k->op), what, g, y);
        rg_graph_free(g);
        free_kept();
    }
}

// ---------------------------------------------------------------------------
// SUM, MEAN, SUM_ROWS (f32 sources: the op table's rule).

typedef struct red_case {
    rg_op op;
    int64_t a[4];
    int a_view, spiky;
} red_case;

static void test_cuda_reduce_parity(void) {
    NEED_DEVICE();
    static const red_case cases[] = {
        {RG_OP_SUM, {2097157, 1, 1, 1}, PLAIN, 0},  // 513 chunks
        {RG_OP_SUM, {67, 33, 3, 1}, TRANSPOSED, 0},
        {RG_OP_SUM, {13, 7, 5, 2}, PERMUTED, 0},
        {RG_OP_SUM, {100, 40, 1, 1}, PADDED, 0},
        {RG_OP_SUM, {1, 1, 1, 1}, PLAIN, 0},
        {RG_OP_MEAN, {12293, 1, 1, 1}, PLAIN, 0},
        {RG_OP_MEAN, {129, 65, 1, 1}, TRANSPOSED, 0},
        {RG_OP_MEAN, {5000, 3, 1, 1}, PADDED, 0},   // chunks that cross rows
        {RG_OP_SUM_ROWS, {4099, 7, 1, 1}, PLAIN, 0},
        {RG_OP_SUM_ROWS, {7, 1000, 1, 1}, PADDED, 0},
        {RG_OP_SUM_ROWS, {33, 67, 2, 1}, TRANSPOSED, 0},
        {RG_OP_SUM_ROWS, {1, 5, 3, 1}, PLAIN, 0},
        {RG_OP_SUM_ROWS, {13, 7, 5, 2}, PERMUTED, 0},
        {RG_OP_SUM, {2097157, 1, 1, 1}, PLAIN, 1},
        {RG_OP_SUM, {67, 330, 3, 1}, TRANSPOSED, 1},
        {RG_OP_MEAN, {5000, 3, 1, 1}, PADDED, 1},
        {RG_OP_SUM_ROWS, {4099, 7, 1, 1}, PLAIN, 1},
        {RG_OP_SUM_ROWS, {330, 67, 2, 1}, TRANSPOSED, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const red_case *k = &cases[c];
        rg_graph *g = rg_graph_new();
        rg_node *a = source(g, "a", RG_TYPE_F32, k->a, k->a_view, 400 + c, 1.0f, 0);
        if (k->spiky) spike(a);
        rg_node *y = k->op == RG_OP_SUM ? rg_sum(g, a) : k->op == RG_OP_MEAN ? rg_mean(g, a) : rg_sum_rows(g, a);
        char what[96];
        shape_str(what, sizeof what, k->spiky ? "spiky " : "", k->a_view, k->a);
        parity1(rg_op_name(k->op), what, g, y);
        rg_graph_free(g);
        free_kept();
    }
}

// ---------------------------------------------------------------------------
// CONT, CPY

typedef struct copy_case {
    rg_op op;
    uint32_t from, to;
    int64_t a[4];
    int a_view;
} copy_case;

static void test_cuda_copy_parity(void) {
    NEED_DEVICE();
    static const copy_case cases[] = {
        {RG_OP_CONT, RG_TYPE_F32, RG_TYPE_F32, {67, 33, 3, 1}, TRANSPOSED},
        {RG_OP_CONT, RG_TYPE_F16, RG_TYPE_F16, {13, 7, 5, 2}, PERMUTED},
        {RG_OP_CONT, RG_TYPE_BF16, RG_TYPE_BF16, {100, 40, 1, 1}, PADDED},
        {RG_OP_CONT, RG_TYPE_F32, RG_TYPE_F32, {1, 1, 1000, 1}, PERMUTED},
        {RG_OP_CPY, RG_TYPE_F32, RG_TYPE_F16, {67, 33, 3, 1}, TRANSPOSED},
        {RG_OP_CPY, RG_TYPE_F32, RG_TYPE_BF16, {13, 7, 5, 2}, PERMUTED},
        {RG_OP_CPY, RG_TYPE_F16, RG_TYPE_F32, {100, 40, 1, 1}, PADDED},
        {RG_OP_CPY, RG_TYPE_BF16, RG_TYPE_F32, {67, 33, 1, 1}, TRANSPOSED},
        {RG_OP_CPY, RG_TYPE_F16, RG_TYPE_BF16, {4099, 3, 1, 1}, PLAIN},
        {RG_OP_CPY, RG_TYPE_BF16, RG_TYPE_F16, {4099, 3, 1, 1}, PLAIN},
        {RG_OP_CPY, RG_TYPE_F32, RG_TYPE_F32, {67, 33, 1, 1}, TRANSPOSED},
        {RG_OP_CPY, RG_TYPE_F32, RG_TYPE_F16, {1000003, 1, 1, 1}, PLAIN},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const copy_case *k = &cases[c];
        rg_graph *g = rg_graph_new();
        // wide values: f16 overflows and underflows
        rg_node *a = source(g, "a", k->from, k->a, k->a_view, 500 + c, 1000.0f, 0);
        rg_node *y = k->op == RG_OP_CONT ? rg_cont(g, a) : rg_cpy(g, a, k->to);
        char what[96], sh[64];
        shape_str(sh, sizeof sh, "", k->a_view, k->a);
        snprintf(what, sizeof what, "%s -> %s %s", rg_type_get(k->from)->name, rg_type_get(k->to)->name, sh);
        parity1(rg_op_name(k->op), what, g, y);
        rg_graph_free(g);
        free_kept();
    }
}

// CONT of types the float ops never see: I32 (transposed) and whole rows of
// Q8_0 blocks (every other row of a leaf).
static void test_cuda_cont_other_types(void) {
    NEED_DEVICE();
    {
        rg_graph *g = rg_graph_new();
        int64_t ne[2] = {33, 67};
        int32_t *p = kept(malloc(33 * 67 * 4));
        for (int i = 0; i < 33 * 67; i++) p[i] = (int32_t)rg_rng_u64(5, 1, (uint64_t)i);
        rg_node *y = rg_cont(g, rg_transpose(g, rg_leaf(g, "i", RG_TYPE_I32, 2, ne, p)));
        parity1("cont", "i32 transposed [67,33]", g, y);
        rg_graph_free(g);
        free_kept();
    }
    {
        rg_graph *g = rg_graph_new();
        const size_t row = rg_type_row_size(RG_TYPE_Q8_0, 64);  // 2 blocks of 34 bytes
        int64_t ne[2] = {64, 10}, vne[2] = {64, 5};
        uint8_t *p = kept(malloc(row * 10));
        for (size_t i = 0; i < row * 10; i++) p[i] = (uint8_t)rg_rng_u64(5, 2, i);
        rg_node *leaf = rg_leaf(g, "q", RG_TYPE_Q8_0, 2, ne, p);
        size_t nb[2] = {leaf->t.nb[0], 2 * row};
        rg_node *y = rg_cont(g, rg_view(g, leaf, 2, vne, nb, row));
        parity1("cont", "q8_0 every other row [64,5]", g, y);
        rg_graph_free(g);
        free_kept();
    }
}

// Special values through CPY: every f16 and bf16 bit pattern widened (NaN
// payloads, subnormals, Inf), narrowed into the other half type, and f32
// values at every rounding boundary narrowed to f16 and bf16.
static void test_cuda_cpy_special_values(void) {
    NEED_DEVICE();
    enum { N_SPECIAL = 96, N_RANDOM = 200000 };
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u,  // sNaN
        0x7FBFFFFFu, 0xFF812345u, 0x7FFFFFFFu, 0x00000001u, 0x807FFFFFu, 0x00800000u,            // f32 subnormals
        0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x477FFFFFu, 0x47800000u, 0xC77FF000u,            // around 65504..65536
        0x38800000u, 0x387FFFFFu, 0x387FE000u, 0x38000000u, 0x33800000u, 0x33000000u, 0x33000001u,  // f16 subnormals
        0x32FFFFFFu, 0x33C00000u, 0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x3F800001u, 0x3F801000u,  // bf16 / f16 ties
        0x3F803000u, 0x7F7FFFFFu, 0x7F7F8000u, 0xFF7FFFFFu, 0x3F800000u, 0xBF800000u,
    };
    const int n_spec = (int)(sizeof special / sizeof *special);
    const int64_t n32 = N_SPECIAL + N_RANDOM;
    uint32_t *f32 = kept(malloc((size_t)n32 * 4));
    for (int64_t i = 0; i < n32; i++)
        f32[i] = i < n_spec      ? special[i]
                 : i < N_SPECIAL ? special[i % n_spec] ^ 1u  // one ulp off a boundary
                                 : (uint32_t)rg_rng_u64(6, 1, (uint64_t)i);
    uint16_t *all = kept(malloc(65536 * 2));
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    static const struct {
        uint32_t from, to;
    } pairs[] = {
        {RG_TYPE_F32, RG_TYPE_F16}, {RG_TYPE_F32, RG_TYPE_BF16}, {RG_TYPE_F16, RG_TYPE_F32},
        {RG_TYPE_BF16, RG_TYPE_F32}, {RG_TYPE_F16, RG_TYPE_BF16}, {RG_TYPE_BF16, RG_TYPE_F16},
    };
    for (size_t c = 0; c < sizeof pairs / sizeof *pairs; c++) {
        rg_graph *g = rg_graph_new();
        const int64_t n = pairs[c].from == RG_TYPE_F32 ? n32 : 65536;
        rg_node *a = rg_leaf(g, "a", pairs[c].from, 1, &n, pairs[c].from == RG_TYPE_F32 ? (void *)f32 : (void *)all);
        rg_node *y = rg_cpy(g, a, pairs[c].to);
        char what[96];
        snprintf(what, sizeof what, "%s -> %s, %s", rg_type_get(pairs[c].from)->name, rg_type_get(pairs[c].to)->name,
                 pairs[c].from == RG_TYPE_F32 ? "boundaries, NaNs, 200k random bits" : "all 65536 patterns");
        parity1("cpy", what, g, y);
        rg_graph_free(g);
    }
    free_kept();
}

// ---------------------------------------------------------------------------
// VIEW_BACK: dy into a window of a [10, 6, 4] base.

static void test_cuda_view_back_parity(void) {
    NEED_DEVICE();
    static const struct {
        const char *what;
        int n_dims;
        int64_t ne[3];
        size_t nb[3];  // in elements of the base
        size_t offset; // elements
        int dy_view;
    } cases[] = {
        {"window [4,3,2] at (2,1,1)", 3, {4, 3, 2}, {1, 10, 60}, 2 + 10 + 60, PLAIN},
        {"rows and columns swapped [6,10]", 2, {6, 10}, {10, 1}, 0, PLAIN},
        {"every other element [120]", 1, {120, 1, 1}, {2, 1, 1}, 1, PLAIN},
        {"one column [1,6,4], dy transposed", 3, {1, 6, 4}, {1, 10, 60}, 9, PERMUTED},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rg_graph *g = rg_graph_new();
        int64_t bne[3] = {10, 6, 4};
        rg_node *base = rg_leaf(g, "base", RG_TYPE_F32, 3, bne, values(240, RG_TYPE_F32, 1, 1.0f));
        size_t nb[3];
        for (int i = 0; i < 3; i++) nb[i] = cases[c].nb[i] * 4;
        rg_node *v = rg_view(g, base, cases[c].n_dims, cases[c].ne, nb, cases[c].offset * 4);
        int64_t dne[4] = {cases[c].ne[0], cases[c].n_dims > 1 ? cases[c].ne[1] : 1,
                          cases[c].n_dims > 2 ? cases[c].ne[2] : 1, 1};
        rg_node *dy = source(g, "dy", RG_TYPE_F32, dne, cases[c].dy_view, 600 + c, 1.0f, 0);
        rg_node *y = rg_view_back(g, dy, v);
        parity1("view_back", cases[c].what, g, y);
        rg_graph_free(g);
        free_kept();
    }
}

// ---------------------------------------------------------------------------
// CPY_INTO: new values written into a cache leaf, read back whole.

typedef struct into_case {
    const char *what;
    uint32_t cache_type, a_type;
    int transposed_cache;  // the cache is [n_ctx, Dh, H] (values stored transposed)
    int64_t T, pos;        // tokens written at position pos
    int a_view;            // how a [Dh, T, H] (or [T, Dh, H]) is made
} into_case;

static void test_cuda_cpy_into_parity(void) {
    NEED_DEVICE();
    enum { DH = 16, CTX = 10, H = 3 };
    static const into_case cases[] = {
        {"f32 window [16,4,3] at 5", RG_TYPE_F32, RG_TYPE_F32, 0, 4, 5, PLAIN},
        {"f16 window, packed rows", RG_TYPE_F16, RG_TYPE_F32, 0, 4, 5, PLAIN},
        {"bf16 window, a transposed", RG_TYPE_BF16, RG_TYPE_F32, 0, 4, 2, TRANSPOSED},
        {"f16 transposed cache [4,16,3] at 2", RG_TYPE_F16, RG_TYPE_F32, 1, 4, 2, TRANSPOSED},
        {"f16 transposed cache, one token", RG_TYPE_F16, RG_TYPE_F32, 1, 1, 7, TRANSPOSED},
        {"f16 into f16, packed (bits)", RG_TYPE_F16, RG_TYPE_F16, 0, 4, 5, PLAIN},
        {"f16 into f16, a transposed", RG_TYPE_F16, RG_TYPE_F16, 0, 4, 5, TRANSPOSED},
        {"bf16 into f32", RG_TYPE_F32, RG_TYPE_BF16, 0, 3, 0, PADDED},
        {"f32 into f32, transposed cache", RG_TYPE_F32, RG_TYPE_F32, 1, 3, 6, PLAIN},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const into_case *k = &cases[c];
        rg_graph *g = rg_graph_new();
        const size_t esz = type_size(k->cache_type);
        int64_t cne[3] = {DH, CTX, H}, wne[3] = {DH, k->T, H};
        if (k->transposed_cache) cne[0] = CTX, cne[1] = DH, wne[0] = k->T, wne[1] = DH;
        rg_node *cache = rg_leaf(g, "cache", k->cache_type, 3, cne, values(DH * CTX * H, k->cache_type, 9, 1.0f));
        const size_t off = k->transposed_cache ? (size_t)k->pos * esz : (size_t)k->pos * cache->t.nb[1];
        rg_node *win = rg_view(g, cache, 3, wne, cache->t.nb, off);
        int64_t ane[4] = {wne[0], wne[1], wne[2], 1};
        rg_node *a = source(g, "a", k->a_type, ane, k->a_view, 700 + c, 1000.0f, 0);
        rg_node *y = rg_cpy_into(g, a, win);
        RG_CHECK(y != NULL, "cpy_into %s was not built", k->what);
        if (y) {
            y->flags |= RG_NODE_OUTPUT;
            const char *label = rg_type_get(k->cache_type)->name;
            parity("cpy_into", k->what, g, &cache, &label, 1);
        }
        rg_graph_free(g);
        free_kept();
    }
}

// ---------------------------------------------------------------------------
// GET_ROWS, GET_ROWS_BACK

static void test_cuda_get_rows_parity(void) {
    NEED_DEVICE();
    static const struct {
        uint32_t type;
        int64_t n, rows, k;
        int table_view, ids_step;
    } cases[] = {
        {RG_TYPE_F32, 37, 50, 300, PLAIN, 1},   {RG_TYPE_F16, 37, 50, 300, PLAIN, 1},
        {RG_TYPE_BF16, 37, 50, 300, PLAIN, 1},  {RG_TYPE_F32, 37, 50, 20, TRANSPOSED, 3},
        {RG_TYPE_F16, 37, 50, 20, PADDED, 2},   {RG_TYPE_BF16, 1, 7, 9, TRANSPOSED, 1},
        {RG_TYPE_F32, 4099, 3, 5, PLAIN, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rg_graph *g = rg_graph_new();
        int64_t ne[4] = {cases[c].n, cases[c].rows, 1, 1};
        rg_node *table = source(g, "table", cases[c].type, ne, cases[c].table_view, 800 + c, 1.0f, 0);
        rg_node *y = rg_get_rows(g, table, ids_node(g, cases[c].k, cases[c].rows, cases[c].ids_step, 80 + c));
        char what[96], sh[64];
        shape_str(sh, sizeof sh, "", cases[c].table_view, ne);
        snprintf(what, sizeof what, "%s %s, %lld ids%s", rg_type_get(cases[c].type)->name, sh, (long long)cases[c].k,
                 cases[c].ids_step > 1 ? " (strided)" : "");
        parity1("get_rows", what, g, y);
        rg_graph_free(g);
        free_kept();
    }
}

// A quantized token embedding [n, rows, b2] of every type the device decodes (cuda/dequant.cuh),
// gathered into F32 rows: the bits of the CPU's dequantization. The table is quantized from
// random values where the type has a quantizer, else random blocks with the f16 scale set to 2^-7
// (the IQ1/IQ2/IQ3 types). Ids out of order with repeats; for Q8_0 and Q4_K also 300 strided ids.
static void *quant_table(uint32_t type, int64_t per_row, int64_t rows, uint64_t seed) {
    float *x = malloc(sizeof(float) * (size_t)(per_row * rows));
    for (int64_t i = 0; i < per_row * rows; i++) x[i] = 0.5f * rg_rng_normal(7, seed, (uint64_t)i);
    uint8_t *q = rg_test_quant_fixture(type, x, rows, per_row, seed, "test table");
    free(x);
    return q ? kept(q) : NULL;
}

static void test_cuda_get_rows_quant_parity(void) {
    NEED_DEVICE();
    static const uint32_t types[] = {
        RG_TYPE_Q4_0,    RG_TYPE_Q4_1,   RG_TYPE_Q5_0,  RG_TYPE_Q5_1,    RG_TYPE_Q8_0,   RG_TYPE_Q2_K,   RG_TYPE_Q3_K,
        RG_TYPE_Q4_K,    RG_TYPE_Q5_K,   RG_TYPE_Q6_K,  RG_TYPE_IQ1_S,   RG_TYPE_IQ1_M,  RG_TYPE_IQ2_XXS, RG_TYPE_IQ2_XS,
        RG_TYPE_IQ2_S,   RG_TYPE_IQ3_XXS, RG_TYPE_IQ3_S, RG_TYPE_IQ4_NL, RG_TYPE_IQ4_XS, RG_TYPE_TQ1_0,  RG_TYPE_TQ2_0,
        RG_TYPE_MXFP4,   RG_TYPE_NVFP4,  RG_TYPE_Q1_0,  RG_TYPE_Q2_0,
    };
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (int sl = 0; sl < (types[t] == RG_TYPE_Q8_0 || types[t] == RG_TYPE_Q4_K ? 2 : 1); sl++) {
            const uint32_t type = types[t];
            const int64_t n = 512, rows = 50, k = sl ? 300 : 37;
            rg_graph *g = rg_graph_new();
            void *q = quant_table(type, n, rows, 700 + t);
            RG_REQUIRE(q, "%s: no table", rg_type_get(type)->name);
            rg_node *table = rg_leaf(g, "table", type, 2, (int64_t[]){n, rows}, q);
            rg_node *y = rg_get_rows(g, table, ids_node(g, k, rows, sl ? 3 : 1, 60 + t));
            char what[96];
            snprintf(what, sizeof what, "%s [%lld,%lld], %lld ids%s", rg_type_get(type)->name, (long long)n,
                     (long long)rows, (long long)k, sl ? " (strided)" : "");
            parity1("get_rows", what, g, y);
            rg_graph_free(g);
            free_kept();
        }
}

static void test_cuda_get_rows_back_parity(void) {
    NEED_DEVICE();
    static const struct {
        int64_t n, k, rows;
        int dy_view;
    } cases[] = {
        {37, 300, 50, PLAIN},        // several id tiles per row
        {2500, 40, 7, PLAIN},        // rows wider than one pass of the block's columns
        {5, 1, 3, PLAIN},
        {33, 67, 20, TRANSPOSED},    // dy made contiguous by a CONT first (the constructor's rule)
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rg_graph *g = rg_graph_new();
        int64_t ne[4] = {cases[c].n, cases[c].k, 1, 1};
        rg_node *dy = source(g, "dy", RG_TYPE_F32, ne, cases[c].dy_view, 900 + c, 1.0f, 0);
        rg_node *y = rg_get_rows_back(g, dy, ids_node(g, cases[c].k, cases[c].rows, 1, 90 + c), cases[c].rows);
        char what[96], sh[64];
        shape_str(sh, sizeof sh, "dy ", cases[c].dy_view, ne);
        snprintf(what, sizeof what, "%s -> %lld rows", sh, (long long)cases[c].rows);
        parity1("get_rows_back", what, g, y);
        rg_graph_free(g);
        free_kept();
    }
}

// Ids outside the table, which the CPU refuses: on the device GET_ROWS gives
// their rows as NaN and GET_ROWS_BACK skips them, and neither reads or writes
// out of bounds (the host execution would catch it). Device only.
static void test_cuda_bad_ids_stay_in_bounds(void) {
    NEED_DEVICE();
    enum { N = 5, ROWS = 7, K = 6 };
    static const int32_t ids[K] = {2, 99, 4, -1, 2, 6};
    rg_graph *g = rg_graph_new();
    int64_t ne_t[2] = {N, ROWS}, ne_i[1] = {K}, ne_d[2] = {N, K};
    float *table = values(N * ROWS, RG_TYPE_F32, 11, 1.0f), *dy = values(N * K, RG_TYPE_F32, 12, 1.0f);
    rg_node *li = rg_leaf(g, "ids", RG_TYPE_I32, 1, ne_i, (void *)ids);
    rg_node *rows = rg_get_rows(g, rg_leaf(g, "table", RG_TYPE_F32, 2, ne_t, table), li);
    rg_node *back = rg_get_rows_back(g, rg_leaf(g, "dy", RG_TYPE_F32, 2, ne_d, dy), li, ROWS);
    rg_node *outs[2] = {rows, back};
    for (int i = 0; i < 2; i++) outs[i]->flags |= RG_NODE_OUTPUT;
    float got_rows[N * K], got_back[N * ROWS];
    void *bufs[2] = {got_rows, got_back};
    rg_error err = {0};
    rg_status st = run_on(g, RG_DEVICE_CUDA, outs, 2, bufs, NULL, &err);
    RG_CHECK(st == RG_OK, "cuda run: %s", err.msg);
    int bad = 0;
    for (int t = 0; st == RG_OK && t < K; t++)
        for (int i = 0; i < N; i++) {
            const int ok_id = ids[t] >= 0 && ids[t] < ROWS;
            const float v = got_rows[t * N + i];
            bad += ok_id ? memcmp(&v, &table[ids[t] * N + i], 4) != 0 : !isnan(v);
        }
    for (int r = 0; st == RG_OK && r < ROWS; r++)
        for (int i = 0; i < N; i++) {
            float want = 0.0f;  // the valid tokens with id r, in order
            for (int t = 0; t < K; t++)
                if (ids[t] == r) want += dy[t * N + i];
            bad += memcmp(&want, &got_back[r * N + i], 4) != 0;
        }
    printf("    ids {2, 99, 4, -1, 2, 6} into %d rows: get_rows NaN rows for 99 and -1, get_rows_back skips them: %s\n",
           ROWS, bad ? "FAIL" : "ok");
    RG_CHECK(bad == 0, "%d values differ from what bad ids should give", bad);
    rg_graph_free(g);
    free_kept();
}

// ---------------------------------------------------------------------------
// Backward ops through small graphs with their forwards: the loss and every
// gradient, bit for bit, with the whole training graph on the device.

static void backward_case(const char *what, rg_graph *g, rg_node *loss, rg_node *const *params,
                          const char *const *names, int n) {
    rg_error err = {0};
    rg_status st = rg_graph_backward(g, loss, &err);
    RG_REQUIRE(st == RG_OK, "%s: backward: %s", what, err.msg);
    rg_node *outs[8] = {loss};
    const char *labels[8] = {"loss"};
    for (int i = 0; i < n; i++) outs[1 + i] = params[i]->grad, labels[1 + i] = names[i];
    for (int i = 0; i <= n; i++) RG_REQUIRE(outs[i] != NULL, "%s: no gradient for %s", what, labels[i]);
    parity("backward", what, g, outs, labels, n + 1);
}

static void test_cuda_backward_graphs(void) {
    NEED_DEVICE();
    {  // get_rows -> add bias -> silu -> mul -> view -> sum: GET_ROWS_BACK, REPEAT_BACK, SILU_BACK, VIEW_BACK
        rg_graph *g = rg_graph_new();
        int64_t ne_e[4] = {24, 40, 1, 1}, ne_b[4] = {24, 1, 1, 1}, ne_w[4] = {24, 70, 1, 1};
        rg_node *E = source(g, "E", RG_TYPE_F32, ne_e, PLAIN, 1000, 1.0f, 1);
        rg_node *b = source(g, "b", RG_TYPE_F32, ne_b, PLAIN, 1001, 1.0f, 1);
        rg_node *w = source(g, "w", RG_TYPE_F32, ne_w, PLAIN, 1002, 1.0f, 1);
        rg_node *x = rg_get_rows(g, E, ids_node(g, 70, 40, 1, 100));
        rg_node *h = rg_mul(g, rg_silu(g, rg_add(g, x, b)), w);
        int64_t vne[2] = {20, 60};
        size_t vnb[2] = {4, h->t.nb[1]};
        rg_node *loss = rg_sum(g, rg_view(g, h, 2, vne, vnb, h->t.nb[1] * 5 + 8));
        rg_node *params[] = {E, b, w};
        const char *names[] = {"dE", "db", "dw"};
        backward_case("embed, bias, silu, mul, view, sum", g, loss, params, names, 3);
        rg_graph_free(g);
        free_kept();
    }
    {  // swiglu -> scale -> sub broadcast -> mean: SILU_BACK (through SWIGLU's rule), REPEAT_BACK
        rg_graph *g = rg_graph_new();
        int64_t ne[4] = {67, 33, 1, 1}, ne_c[4] = {1, 33, 1, 1};
        rg_node *gate = source(g, "gate", RG_TYPE_F32, ne, PLAIN, 1010, 3.0f, 1);
        rg_node *up = source(g, "up", RG_TYPE_F32, ne, PLAIN, 1011, 1.0f, 1);
        rg_node *cc = source(g, "c", RG_TYPE_F32, ne_c, PLAIN, 1012, 1.0f, 1);
        rg_node *z = rg_sub(g, rg_scale(g, rg_swiglu(g, gate, up), 0.75f), cc);
        rg_node *loss = rg_mean(g, rg_mul(g, z, z));
        rg_node *params[] = {gate, up, cc};
        const char *names[] = {"dgate", "dup", "dc"};
        backward_case("swiglu, scale, sub, mul, mean", g, loss, params, names, 3);
        rg_graph_free(g);
        free_kept();
    }
    {  // repeat -> mul -> sum_rows -> mean: REPEAT_BACK (REPEAT's rule), REPEAT (SUM_ROWS's)
        rg_graph *g = rg_graph_new();
        int64_t ne_a[4] = {4, 3, 1, 1}, ne_l[4] = {8, 6, 2, 1};
        rg_node *a = source(g, "a", RG_TYPE_F32, ne_a, PLAIN, 1020, 1.0f, 1);
        rg_node *w = source(g, "w", RG_TYPE_F32, ne_l, PLAIN, 1021, 1.0f, 1);
        rg_node *like = rg_leaf(g, "like", RG_TYPE_F32, 4, ne_l, values(96, RG_TYPE_F32, 1, 0.0f));
        rg_node *loss = rg_mean(g, rg_sum_rows(g, rg_mul(g, rg_repeat(g, a, like), w)));
        rg_node *params[] = {a, w};
        const char *names[] = {"da", "dw"};
        backward_case("repeat, mul, sum_rows, mean", g, loss, params, names, 2);
        rg_graph_free(g);
        free_kept();
    }
}

// ---------------------------------------------------------------------------
// Host-side: which nodes the CUDA cells take, from types, shapes and strides
// alone (no device needed; a build without CUDA says no to all).

static void test_cuda_elementwise_support_table(void) {
    rg_graph *g = rg_graph_new();
    static float f[4096];
    static uint16_t h[4096];
    static uint8_t q[4096];
    static int32_t ids[16];
    int64_t ne2[2] = {16, 8}, ne_b[2] = {16, 1}, ne_i[1] = {16}, ne_q[2] = {64, 8};
    rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, ne2, f);
    rg_node *x16 = rg_leaf(g, "x16", RG_TYPE_F32, 2, (int64_t[]){16, 16}, f);
    rg_node *xt = rg_transpose(g, rg_leaf(g, "xt", RG_TYPE_F32, 2, (int64_t[]){8, 16}, f));
    rg_node *xh = rg_leaf(g, "xh", RG_TYPE_F16, 2, ne2, h);
    rg_node *b = rg_leaf(g, "b", RG_TYPE_F32, 2, ne_b, f);
    rg_node *id = rg_leaf(g, "ids", RG_TYPE_I32, 1, ne_i, ids);
    rg_node *wq = rg_leaf(g, "wq", RG_TYPE_Q8_0, 2, ne_q, q);
    // A window whose rows overlap (a row stride of 2 elements for rows of 4), and an f32 view 2 bytes in.
    int64_t ov_ne[2] = {4, 3}, mis_ne[1] = {8};
    size_t ov_nb[2] = {4, 8}, mis_nb[1] = {4};
    rg_node *overlap = rg_view(g, x, 2, ov_ne, ov_nb, 0);
    rg_node *misaligned = rg_view(g, x, 1, mis_ne, mis_nb, 2);
    rg_node *dy_ov = rg_leaf(g, "dy", RG_TYPE_F32, 2, ov_ne, f);
    rg_node *cache = rg_leaf(g, "cache", RG_TYPE_F16, 2, ne2, h);
    rg_node *cache_ov = rg_view(g, cache, 2, ov_ne, (size_t[]){2, 4}, 0);
    struct {
        const char *what;
        rg_node *n;
        bool gpu;
    } rows[] = {
        {"fill f16", rg_fill(g, RG_TYPE_F16, 2, ne2, 1.0f), true},
        {"sub, b broadcast", rg_sub(g, x, b), true},
        {"mul, a transposed", rg_mul(g, xt, b), true},
        {"silu of a view 2 bytes in", rg_silu(g, misaligned), false},
        {"sum f32", rg_sum(g, x), true},
        {"cpy f32 -> bf16", rg_cpy(g, x, RG_TYPE_BF16), true},
        {"cont f16 transposed", rg_cont(g, rg_transpose(g, xh)), true},
        {"cont q8_0 rows", rg_cont(g, wq), true},
        {"get_rows f16 table", rg_get_rows(g, xh, id), true},
        {"get_rows q8_0 table", rg_get_rows(g, wq, id), true},
        {"get_rows_back", rg_get_rows_back(g, x16, id, 5), true},
        {"view_back", rg_view_back(g, dy_ov, rg_view(g, x, 2, ov_ne, (size_t[]){4, 32}, 0)), true},
        {"view_back, overlapping window", rg_view_back(g, dy_ov, overlap), false},
        {"cpy_into f16 window", rg_cpy_into(g, dy_ov, rg_view(g, cache, 2, ov_ne, (size_t[]){2, 32}, 0)), true},
        {"cpy_into overlapping window", rg_cpy_into(g, dy_ov, cache_ov), false},
    };
    rg_error err = {0};
    RG_REQUIRE(rg_graph_error(g, &err) == RG_OK, "%s", err.msg);
    const int compiled = rg_cuda_compiled();
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const bool want = compiled && rows[i].gpu;
        const bool got = rg_op_cell_runs(RG_BACKEND_CUDA, rows[i].n);
        printf("    %-32s %s\n", rows[i].what, got ? "gpu" : "cpu");
        RG_CHECK(got == want, "%s: the CUDA cell says %d, expected %d", rows[i].what, got, want);
    }
    static const rg_op ops[] = {RG_OP_FILL, RG_OP_SUB, RG_OP_MUL, RG_OP_SCALE, RG_OP_REPEAT, RG_OP_REPEAT_BACK,
                                RG_OP_SUM, RG_OP_MEAN, RG_OP_SUM_ROWS, RG_OP_SILU, RG_OP_SILU_BACK, RG_OP_SWIGLU,
                                RG_OP_CONT, RG_OP_CPY, RG_OP_VIEW_BACK, RG_OP_CPY_INTO, RG_OP_GET_ROWS,
                                RG_OP_GET_ROWS_BACK};
    for (size_t i = 0; compiled && i < sizeof ops / sizeof *ops; i++)
        RG_CHECK(rg_op_cell(RG_BACKEND_CUDA, ops[i]).types != NULL, "%s lists no CUDA types", rg_op_name(ops[i]));
    rg_graph_free(g);
}

static const rg_test_case cases[] = {
    RG_TEST(test_cuda_elementwise_support_table),
    RG_TEST(test_cuda_fill_parity),
    RG_TEST(test_cuda_ew_parity),
    RG_TEST(test_cuda_repeat_parity),
    RG_TEST(test_cuda_reduce_parity),
    RG_TEST(test_cuda_copy_parity),
    RG_TEST(test_cuda_cont_other_types),
    RG_TEST(test_cuda_cpy_special_values),
    RG_TEST(test_cuda_view_back_parity),
    RG_TEST(test_cuda_cpy_into_parity),
    RG_TEST(test_cuda_get_rows_parity),
    RG_TEST(test_cuda_get_rows_quant_parity),
    RG_TEST(test_cuda_get_rows_back_parity),
    RG_TEST(test_cuda_bad_ids_stay_in_bounds),
    RG_TEST(test_cuda_backward_graphs),
    {0},
};

int main(int argc, char **argv) {
    printf("cuda compiled: %s\n", rg_cuda_compiled() ? "yes" : "no");
    return rg_test_run(argc, argv, cases);
}
