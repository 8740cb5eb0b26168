// build.c - op constructors: shape and type rules, checked when the node is
// made; a mismatch records one error naming the op and both shapes.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/ops.h"
#include "graph/pack.h"
#include "cpu/ssm_math.h"

rg_graph *rg_graph_new(void) {
    rg_graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    rg_arena_init(&g->arena, 0);
    return g;
}

void rg_graph_free(rg_graph *g) {
    if (!g) return;
    rg_arena_free(&g->arena);
    free(g->nodes);
    free(g);
}

rg_status rg_graph_error(const rg_graph *g, rg_error *err) {
    if (g->err.status == RG_OK) return RG_OK;
    if (err) *err = g->err;
    return g->err.status;
}

const char *rg_op_name(rg_op op) { return op < RG_OP_COUNT ? rg_op_defs[op].name : "invalid op"; }
int rg_op_n_src(rg_op op) { return op < RG_OP_COUNT ? rg_op_defs[op].max_src : 0; }

// Records the first error only: later ones are usually its consequences.
static void vfail(rg_graph *g, rg_status s, const char *fmt, va_list ap) {
    if (g->err.status == RG_OK) {
        g->err.status = s;
        vsnprintf(g->err.msg, sizeof g->err.msg, fmt, ap);
    }
}
static rg_node *fail(rg_graph *g, rg_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static rg_node *fail(rg_graph *g, rg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(g, s, fmt, ap);
    va_end(ap);
    return NULL;
}
// The same for a check that answers true or false.
static bool refuse(rg_graph *g, rg_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool refuse(rg_graph *g, rg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(g, s, fmt, ap);
    va_end(ap);
    return false;
}

static const char *shape(const rg_node *n, char *buf) {
    char s[64];
    rg_tensor_shape_str(&n->t, s, sizeof s);
    snprintf(buf, 160, "%s%s%s %s", n->t.name[0] ? "'" : "", n->t.name, n->t.name[0] ? "'" : "", s);
    return buf;
}

static bool same_shape(const rg_node *a, const rg_node *b) { return rg_tensor_same_shape(&a->t, &b->t); }

static rg_node *node_new(rg_graph *g, rg_op op, uint32_t type, const int64_t ne[RG_MAX_DIMS], rg_node *s0, rg_node *s1,
                         rg_node *s2, rg_node *s3) {
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 256;
        rg_node **p = realloc(g->nodes, (size_t)cap * sizeof *p);
        if (!p) return fail(g, RG_ERR_NOMEM, "graph: out of memory for %d nodes", cap);
        g->nodes = p;
        g->cap_nodes = cap;
    }
    rg_node *n = rg_arena_alloc(&g->arena, sizeof *n, 16);
    if (!n) return fail(g, RG_ERR_NOMEM, "graph: out of memory");
    rg_error err;
    int n_dims = RG_MAX_DIMS;
    while (n_dims > 1 && ne[n_dims - 1] == 1) n_dims--;
    rg_tensor *t = rg_tensor_wrap(&g->arena, type, n_dims, ne, NULL, &err);
    if (!t) return fail(g, err.status, "%s: %s", rg_op_name(op), err.msg);
    n->t = *t;
    n->op = op;
    n->src[0] = s0, n->src[1] = s1, n->src[2] = s2, n->src[3] = s3;
    n->id = g->n_nodes;
    n->offset = -1;
    for (int i = 0; i < RG_MAX_SRC; i++)
        if (n->src[i] && (n->src[i]->flags & RG_NODE_NEEDS_GRAD)) n->flags |= RG_NODE_NEEDS_GRAD;
    g->nodes[g->n_nodes++] = n;
    return n;
}

static const int64_t *ne_of(const rg_node *n) { return n->t.ne; }

void rg_node_bind(rg_node *n, void *data) {
    n->t.data = data;
    if (data) n->flags |= RG_NODE_EXTERNAL;
    else n->flags &= ~RG_NODE_EXTERNAL;
}

void rg_node_set_name(rg_node *n, const char *fmt, ...) {
    if (!n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->t.name, sizeof n->t.name, fmt, ap);
    va_end(ap);
}

static rg_node *leaf(rg_graph *g, const char *name, uint32_t type, int n_dims, const int64_t *ne, void *data,
                     uint32_t flags) {
    if (n_dims < 1 || n_dims > RG_MAX_DIMS) return fail(g, RG_ERR_ARG, "leaf '%s': %d dimensions", name, n_dims);
    int64_t full[RG_MAX_DIMS] = {1, 1, 1, 1};
    for (int i = 0; i < n_dims; i++) full[i] = ne[i];
    rg_node *n = node_new(g, RG_OP_NONE, type, full, NULL, NULL, NULL, NULL);
    if (!n) return NULL;
    n->t.data = data;
    n->flags |= flags | (data ? RG_NODE_EXTERNAL : 0);
    snprintf(n->t.name, sizeof n->t.name, "%s", name ? name : "");
    return n;
}

rg_node *rg_leaf(rg_graph *g, const char *name, uint32_t type, int n_dims, const int64_t *ne, void *data) {
    return leaf(g, name, type, n_dims, ne, data, RG_NODE_INPUT);
}

rg_node *rg_param(rg_graph *g, const char *name, uint32_t type, int n_dims, const int64_t *ne, void *data) {
    if (type != RG_TYPE_F32 && type != RG_TYPE_F16 && type != RG_TYPE_BF16)
        return fail(g, RG_ERR_ARG, "param '%s': trainable tensors must be f32, f16 or bf16, not %s", name,
                    rg_type_get(type)->name);
    return leaf(g, name, type, n_dims, ne, data, RG_NODE_INPUT | RG_NODE_PARAM | RG_NODE_NEEDS_GRAD);
}

#define REQUIRE(...) \
    do { for (rg_node *rq_[] = {__VA_ARGS__}, **p_ = rq_; p_ < rq_ + sizeof rq_ / sizeof *rq_; p_++) if (!*p_) return NULL; } while (0)

static bool is_f32(const rg_node *n) { return n->t.type == RG_TYPE_F32; }

// Ops that read whole rows want them packed; a strided source gets a CONT.
static rg_node *contiguous(rg_graph *g, rg_node *a) {
    return rg_tensor_is_contiguous(&a->t) ? a : rg_cont(g, a);
}

static rg_node *need_f32(rg_graph *g, const char *op, rg_node *a, const char *what) {
    char s[160];
    if (!is_f32(a)) return fail(g, RG_ERR_ARG, "%s: %s %s has type %s, expected f32", op, what, shape(a, s), rg_type_get(a->t.type)->name);
    return a;
}

rg_node *rg_fill(rg_graph *g, uint32_t type, int n_dims, const int64_t *ne, float value) {
    int64_t full[RG_MAX_DIMS] = {1, 1, 1, 1};
    for (int i = 0; i < n_dims && i < RG_MAX_DIMS; i++) full[i] = ne[i];
    rg_node *n = node_new(g, RG_OP_FILL, type, full, NULL, NULL, NULL, NULL);
    if (n) n->fp[0] = value;
    return n;
}

rg_node *rg_get_rows(rg_graph *g, rg_node *a, rg_node *ids) {
    REQUIRE(a, ids);
    char s1[160], s2[160];
    if (ids->t.type != RG_TYPE_I32 || ids->t.ne[1] != 1 || ids->t.ne[2] != 1)
        return fail(g, RG_ERR_ARG, "get_rows: ids %s must be a 1-D i32 tensor", shape(ids, s2));
    if (a->t.ne[2] != 1 || a->t.ne[3] != 1)
        return fail(g, RG_ERR_ARG, "get_rows: table %s must be 2-D", shape(a, s1));
    int64_t ne[4] = {a->t.ne[0], ids->t.ne[0], 1, 1};
    return node_new(g, RG_OP_GET_ROWS, RG_TYPE_F32, ne, a, ids, NULL, NULL);
}

rg_node *rg_get_rows_back(rg_graph *g, rg_node *dy, rg_node *ids, int64_t n_rows) {
    REQUIRE(dy, ids);
    char s1[160], s2[160];
    if (!need_f32(g, "get_rows_back", dy, "dy")) return NULL;
    if (ids->t.type != RG_TYPE_I32 || dy->t.ne[1] != ids->t.ne[0])
        return fail(g, RG_ERR_ARG, "get_rows_back: dy %s and ids %s disagree", shape(dy, s1), shape(ids, s2));
    int64_t ne[4] = {dy->t.ne[0], n_rows, 1, 1};
    rg_node *n = node_new(g, RG_OP_GET_ROWS_BACK, RG_TYPE_F32, ne, contiguous(g, dy), ids, NULL, NULL);
    if (n) n->ip[0] = n_rows;
    return n;
}

static bool broadcasts(const rg_node *big, const rg_node *small, int from_dim) {
    for (int i = from_dim; i < RG_MAX_DIMS; i++)
        if (small->t.ne[i] == 0 || big->t.ne[i] % small->t.ne[i]) return false;
    return true;
}

rg_node *rg_mul_mat(rg_graph *g, rg_node *w, rg_node *x) {
    REQUIRE(w, x);
    char s1[160], s2[160];
    if (!need_f32(g, "mul_mat", x, "activations")) return NULL;
    if (w->t.ne[0] != x->t.ne[0] || !broadcasts(x, w, 2))
        return fail(g, RG_ERR_ARG, "mul_mat: weight %s and activations %s do not fit (ne[0] must match, ne[2..3] divide)",
                    shape(w, s1), shape(x, s2));
    if (!rg_tensor_rows_contiguous(&w->t))
        return fail(g, RG_ERR_ARG, "mul_mat: weight %s rows are not contiguous", shape(w, s1));
    int64_t ne[4] = {w->t.ne[1], x->t.ne[1], x->t.ne[2], x->t.ne[3]};
    return node_new(g, RG_OP_MUL_MAT, RG_TYPE_F32, ne, w, x, NULL, NULL);
}

rg_node *rg_out_prod(rg_graph *g, rg_node *a, rg_node *b) {
    REQUIRE(a, b);
    char s1[160], s2[160];
    if (!need_f32(g, "out_prod", b, "b")) return NULL;
    if (a->t.ne[1] != b->t.ne[1] || !broadcasts(b, a, 2))
        return fail(g, RG_ERR_ARG, "out_prod: a %s and b %s do not fit (ne[1] must match, ne[2..3] divide)", shape(a, s1),
                    shape(b, s2));
    int64_t ne[4] = {a->t.ne[0], b->t.ne[0], b->t.ne[2], b->t.ne[3]};
    return node_new(g, RG_OP_OUT_PROD, RG_TYPE_F32, ne, a, b, NULL, NULL);
}

static rg_node *binary(rg_graph *g, rg_op op, rg_node *a, rg_node *b) {
    REQUIRE(a, b);
    char s1[160], s2[160];
    if (!need_f32(g, rg_op_name(op), a, "a") || !need_f32(g, rg_op_name(op), b, "b")) return NULL;
    if (!broadcasts(a, b, 0))
        return fail(g, RG_ERR_ARG, "%s: %s does not broadcast into %s", rg_op_name(op), shape(b, s2), shape(a, s1));
    return node_new(g, op, RG_TYPE_F32, ne_of(a), a, b, NULL, NULL);
}

rg_node *rg_add(rg_graph *g, rg_node *a, rg_node *b) { return binary(g, RG_OP_ADD, a, b); }
rg_node *rg_sub(rg_graph *g, rg_node *a, rg_node *b) { return binary(g, RG_OP_SUB, a, b); }
rg_node *rg_mul(rg_graph *g, rg_node *a, rg_node *b) { return binary(g, RG_OP_MUL, a, b); }

static rg_node *unary(rg_graph *g, rg_op op, rg_node *a) {
    REQUIRE(a);
    if (!need_f32(g, rg_op_name(op), a, "input")) return NULL;
    return node_new(g, op, RG_TYPE_F32, ne_of(a), a, NULL, NULL, NULL);
}

rg_node *rg_scale(rg_graph *g, rg_node *a, float s) {
    rg_node *n = unary(g, RG_OP_SCALE, a);
    if (n) n->fp[0] = s;
    return n;
}

rg_node *rg_repeat(rg_graph *g, rg_node *a, rg_node *like) {
    REQUIRE(a, like);
    char s1[160], s2[160];
    if (!need_f32(g, "repeat", a, "input")) return NULL;
    if (!broadcasts(like, a, 0)) return fail(g, RG_ERR_ARG, "repeat: %s does not tile %s", shape(a, s1), shape(like, s2));
    return node_new(g, RG_OP_REPEAT, RG_TYPE_F32, ne_of(like), a, like, NULL, NULL);
}

rg_node *rg_repeat_back(rg_graph *g, rg_node *a, rg_node *like) {
    REQUIRE(a, like);
    char s1[160], s2[160];
    if (!need_f32(g, "repeat_back", a, "input")) return NULL;
    if (!broadcasts(a, like, 0))
        return fail(g, RG_ERR_ARG, "repeat_back: %s is not a tiling of %s", shape(a, s1), shape(like, s2));
    return node_new(g, RG_OP_REPEAT_BACK, RG_TYPE_F32, ne_of(like), a, like, NULL, NULL);
}

rg_node *rg_sum(rg_graph *g, rg_node *a) {
    REQUIRE(a);
    if (!need_f32(g, "sum", a, "input")) return NULL;
    int64_t ne[4] = {1, 1, 1, 1};
    return node_new(g, RG_OP_SUM, RG_TYPE_F32, ne, a, NULL, NULL, NULL);
}

rg_node *rg_mean(rg_graph *g, rg_node *a) {
    REQUIRE(a);
    if (!need_f32(g, "mean", a, "input")) return NULL;
    int64_t ne[4] = {1, 1, 1, 1};
    return node_new(g, RG_OP_MEAN, RG_TYPE_F32, ne, a, NULL, NULL, NULL);
}

rg_node *rg_sum_rows(rg_graph *g, rg_node *a) {
    REQUIRE(a);
    if (!need_f32(g, "sum_rows", a, "input")) return NULL;
    int64_t ne[4] = {1, a->t.ne[1], a->t.ne[2], a->t.ne[3]};
    return node_new(g, RG_OP_SUM_ROWS, RG_TYPE_F32, ne, a, NULL, NULL, NULL);
}

rg_node *rg_rms_norm(rg_graph *g, rg_node *x, float eps) {
    REQUIRE(x);
    if (!need_f32(g, "rms_norm", x, "input")) return NULL;
    if (!(eps >= 0)) return fail(g, RG_ERR_ARG, "rms_norm: eps %g must be >= 0", (double)eps);
    rg_node *n = node_new(g, RG_OP_RMS_NORM, RG_TYPE_F32, ne_of(x), contiguous(g, x), NULL, NULL, NULL);
    if (n) n->fp[0] = eps;
    return n;
}

rg_node *rg_rms_norm_back(rg_graph *g, rg_node *dy, rg_node *x, float eps) {
    REQUIRE(dy, x);
    char s1[160], s2[160];
    if (!need_f32(g, "rms_norm_back", dy, "dy") || !need_f32(g, "rms_norm_back", x, "x")) return NULL;
    if (!same_shape(dy, x)) return fail(g, RG_ERR_ARG, "rms_norm_back: dy %s and x %s differ", shape(dy, s1), shape(x, s2));
    rg_node *n = node_new(g, RG_OP_RMS_NORM_BACK, RG_TYPE_F32, ne_of(x), contiguous(g, dy), contiguous(g, x), NULL, NULL);
    if (n) n->fp[0] = eps;
    return n;
}

static rg_node *rope_like(rg_graph *g, rg_op op, rg_node *x, rg_node *pos, int n_rot, int mode, float base, float scale) {
    REQUIRE(x, pos);
    char s1[160], s2[160];
    if (!need_f32(g, rg_op_name(op), x, "input")) return NULL;
    if (pos->t.type != RG_TYPE_I32 || pos->t.ne[0] != x->t.ne[2] || pos->t.ne[1] != 1)
        return fail(g, RG_ERR_ARG, "%s: positions %s must be i32 [n_tokens] for input %s [head_dim, n_head, n_tokens]",
                    rg_op_name(op), shape(pos, s2), shape(x, s1));
    if (n_rot <= 0 || n_rot % 2 || n_rot > x->t.ne[0] || (mode != 0 && mode != 2))
        return fail(g, RG_ERR_ARG, "%s: n_rot %d (even, <= head_dim %lld) or mode %d (0 normal, 2 neox) is invalid",
                    rg_op_name(op), n_rot, (long long)x->t.ne[0], mode);
    rg_node *n = node_new(g, op, RG_TYPE_F32, ne_of(x), contiguous(g, x), pos, NULL, NULL);
    if (n) n->ip[0] = n_rot, n->ip[1] = mode, n->fp[0] = base, n->fp[1] = scale;
    return n;
}

rg_node *rg_rope(rg_graph *g, rg_node *x, rg_node *pos, int n_rot, int mode, float freq_base, float freq_scale) {
    return rope_like(g, RG_OP_ROPE, x, pos, n_rot, mode, freq_base, freq_scale);
}
rg_node *rg_rope_back(rg_graph *g, rg_node *dy, rg_node *pos, int n_rot, int mode, float freq_base, float freq_scale) {
    return rope_like(g, RG_OP_ROPE_BACK, dy, pos, n_rot, mode, freq_base, freq_scale);
}

rg_node *rg_soft_max(rg_graph *g, rg_node *a, rg_node *mask, bool causal, float scale, float softcap) {
    return rg_soft_max_ext(g, a, mask, causal, scale, softcap, 0);
}

rg_node *rg_soft_max_ext(rg_graph *g, rg_node *a, rg_node *mask, bool causal, float scale, float softcap, int64_t window) {
    REQUIRE(a);
    if (window < 0 || (window > 0 && !causal))
        return fail(g, RG_ERR_ARG, "soft_max: sliding window %lld must be >= 0 and needs the causal mask", (long long)window);
    char s1[160], s2[160];
    if (!need_f32(g, "soft_max", a, "input")) return NULL;
    if (mask && (!is_f32(mask) || mask->t.ne[0] != a->t.ne[0] || mask->t.ne[1] < a->t.ne[1] || mask->t.ne[2] != 1))
        return fail(g, RG_ERR_ARG, "soft_max: mask %s does not cover scores %s", shape(mask, s2), shape(a, s1));
    if (causal && a->t.ne[1] > a->t.ne[0])
        return fail(g, RG_ERR_ARG, "soft_max: causal scores %s have more queries than keys", shape(a, s1));
    if (!(softcap >= 0)) return fail(g, RG_ERR_ARG, "soft_max: softcap %g must be >= 0", (double)softcap);
    rg_node *n = node_new(g, RG_OP_SOFT_MAX, RG_TYPE_F32, ne_of(a), contiguous(g, a), mask ? contiguous(g, mask) : NULL,
                          NULL, NULL);
    if (n) n->ip[0] = causal, n->ip[1] = window, n->fp[0] = scale, n->fp[1] = softcap;
    return n;
}

rg_node *rg_soft_max_back(rg_graph *g, rg_node *dy, rg_node *y, rg_node *a, float scale, float softcap) {
    REQUIRE(dy, y);
    char s1[160], s2[160];
    if (!need_f32(g, "soft_max_back", dy, "dy") || !need_f32(g, "soft_max_back", y, "y")) return NULL;
    if (!same_shape(dy, y)) return fail(g, RG_ERR_ARG, "soft_max_back: dy %s and y %s differ", shape(dy, s1), shape(y, s2));
    if (softcap > 0 && !a) return fail(g, RG_ERR_ARG, "soft_max_back: a softcap needs the scores");
    rg_node *n = node_new(g, RG_OP_SOFT_MAX_BACK, RG_TYPE_F32, ne_of(y), contiguous(g, dy), contiguous(g, y),
                          softcap > 0 ? contiguous(g, a) : NULL, NULL);
    if (n) n->fp[0] = scale, n->fp[1] = softcap;
    return n;
}

rg_node *rg_silu(rg_graph *g, rg_node *a) { return unary(g, RG_OP_SILU, a); }

rg_node *rg_silu_back(rg_graph *g, rg_node *dy, rg_node *a) {
    REQUIRE(dy, a);
    char s1[160], s2[160];
    if (!need_f32(g, "silu_back", dy, "dy") || !need_f32(g, "silu_back", a, "a")) return NULL;
    if (!same_shape(dy, a)) return fail(g, RG_ERR_ARG, "silu_back: dy %s and a %s differ", shape(dy, s1), shape(a, s2));
    return node_new(g, RG_OP_SILU_BACK, RG_TYPE_F32, ne_of(a), dy, a, NULL, NULL);
}

rg_node *rg_gelu(rg_graph *g, rg_node *a) {
    REQUIRE(a);
    return unary(g, RG_OP_GELU, contiguous(g, a));
}

// The backward of an elementwise op of a: dy and a of one shape, both packed for the kernel.
static rg_node *unary_back(rg_graph *g, rg_op op, rg_node *dy, rg_node *a) {
    REQUIRE(dy, a);
    char s1[160], s2[160];
    if (!need_f32(g, rg_op_name(op), dy, "dy") || !need_f32(g, rg_op_name(op), a, "a")) return NULL;
    if (!same_shape(dy, a)) return fail(g, RG_ERR_ARG, "%s: dy %s and a %s differ", rg_op_name(op), shape(dy, s1), shape(a, s2));
    return node_new(g, op, RG_TYPE_F32, ne_of(a), contiguous(g, dy), contiguous(g, a), NULL, NULL);
}

rg_node *rg_gelu_back(rg_graph *g, rg_node *dy, rg_node *a) { return unary_back(g, RG_OP_GELU_BACK, dy, a); }

rg_node *rg_softcap(rg_graph *g, rg_node *a, float cap) {
    REQUIRE(a);
    if (!(cap > 0) || !isfinite(cap)) return fail(g, RG_ERR_ARG, "softcap: cap %g must be positive and finite", (double)cap);
    rg_node *n = unary(g, RG_OP_SOFTCAP, contiguous(g, a));
    if (n) n->fp[0] = cap;
    return n;
}

rg_node *rg_softcap_back(rg_graph *g, rg_node *dy, rg_node *a, float cap) {
    if (!(cap > 0) || !isfinite(cap)) return fail(g, RG_ERR_ARG, "softcap_back: cap %g must be positive and finite", (double)cap);
    rg_node *n = unary_back(g, RG_OP_SOFTCAP_BACK, dy, a);
    if (n) n->fp[0] = cap;
    return n;
}

rg_node *rg_swiglu(rg_graph *g, rg_node *gate, rg_node *up) {
    REQUIRE(gate, up);
    char s1[160], s2[160];
    if (!need_f32(g, "swiglu", gate, "gate") || !need_f32(g, "swiglu", up, "up")) return NULL;
    if (!same_shape(gate, up)) return fail(g, RG_ERR_ARG, "swiglu: gate %s and up %s differ", shape(gate, s1), shape(up, s2));
    return node_new(g, RG_OP_SWIGLU, RG_TYPE_F32, ne_of(gate), gate, up, NULL, NULL);
}

// Views share the owner's bytes: data = owner data + view_offs, bound by the plan.
static rg_node *view_node(rg_graph *g, rg_op op, rg_node *a, const rg_tensor *t) {
    rg_node *n = node_new(g, op, a->t.type, t->ne, a, NULL, NULL, NULL);
    if (!n) return NULL;
    for (int i = 0; i < RG_MAX_DIMS; i++) n->t.nb[i] = t->nb[i];
    n->view_of = a->view_of ? a->view_of : a;
    n->t.view_offs = t->view_offs;
    return n;
}

// Runs a tensor-level view function on a stand-in whose data pointer encodes
// the source's offset inside its owner, so the result's offset can be read back.
static rg_node *make_view(rg_graph *g, rg_op op, rg_node *a, int n_dims, const int64_t *ne, const size_t *nb,
                          size_t offset, const int *axes) {
    rg_tensor owner = a->view_of ? a->view_of->t : a->t;
    rg_tensor src = a->t;
    static char base[1];
    owner.data = base;
    owner.view_src = NULL;
    src.data = base + a->t.view_offs;
    src.view_src = &owner;
    rg_error err;
    rg_tensor *v = NULL;
    if (op == RG_OP_RESHAPE) v = rg_tensor_reshape(&g->arena, &src, n_dims, ne, &err);
    else if (op == RG_OP_VIEW) v = rg_tensor_view(&g->arena, &src, n_dims, ne, nb, offset, &err);
    else v = rg_tensor_permute(&g->arena, &src, axes, &err);
    if (!v) {
        char s[160];
        return fail(g, err.status, "%s of %s: %s", rg_op_name(op), shape(a, s), err.msg);
    }
    v->view_offs = (size_t)((char *)v->data - base);
    return view_node(g, op, a, v);
}

rg_node *rg_reshape(rg_graph *g, rg_node *a, int n_dims, const int64_t *ne) {
    REQUIRE(a);
    return make_view(g, RG_OP_RESHAPE, a, n_dims, ne, NULL, 0, NULL);
}

rg_node *rg_view(rg_graph *g, rg_node *a, int n_dims, const int64_t *ne, const size_t *nb, size_t offset) {
    REQUIRE(a);
    rg_node *n = make_view(g, RG_OP_VIEW, a, n_dims, ne, nb, offset, NULL);
    if (n) {
        for (int i = 0; i < RG_MAX_DIMS; i++) n->ip[i] = (int64_t)n->t.nb[i];
        n->ip[4] = (int64_t)offset;
    }
    return n;
}

rg_node *rg_permute(rg_graph *g, rg_node *a, int ax0, int ax1, int ax2, int ax3) {
    REQUIRE(a);
    int axes[4] = {ax0, ax1, ax2, ax3};
    rg_node *n = make_view(g, RG_OP_PERMUTE, a, 0, NULL, NULL, 0, axes);
    if (n)
        for (int i = 0; i < 4; i++) n->ip[i] = axes[i];
    return n;
}

rg_node *rg_transpose(rg_graph *g, rg_node *a) {
    REQUIRE(a);
    int axes[4] = {1, 0, 2, 3};
    rg_node *n = make_view(g, RG_OP_TRANSPOSE, a, 0, NULL, NULL, 0, axes);
    return n;
}

rg_node *rg_view_back(rg_graph *g, rg_node *dy, rg_node *view) {
    REQUIRE(dy, view);
    char s1[160], s2[160];
    rg_node *base = view->src[0];
    if (view->op != RG_OP_VIEW || !rg_tensor_is_contiguous(&base->t) || !same_shape(dy, view))
        return fail(g, RG_ERR_ARG, "view_back: dy %s does not match a view %s of a contiguous tensor", shape(dy, s1),
                    shape(view, s2));
    rg_node *n = node_new(g, RG_OP_VIEW_BACK, RG_TYPE_F32, ne_of(base), dy, view, NULL, NULL);
    if (!n) return NULL;
    // The view's strides and offset were in bytes of the base's type; the output is F32.
    size_t esz = rg_type_get(base->t.type)->type_size;
    for (int i = 0; i < 4; i++) n->ip[i] = view->ip[i] / (int64_t)esz * 4;
    n->ip[4] = view->ip[4] / (int64_t)esz * 4;
    return n;
}

rg_node *rg_cont(rg_graph *g, rg_node *a) {
    REQUIRE(a);
    return node_new(g, RG_OP_CONT, a->t.type, ne_of(a), a, NULL, NULL, NULL);
}

rg_node *rg_cpy(rg_graph *g, rg_node *a, uint32_t type) {
    REQUIRE(a);
    char s[160];
    bool ok_src = a->t.type == RG_TYPE_F32 || a->t.type == RG_TYPE_F16 || a->t.type == RG_TYPE_BF16;
    bool ok_dst = type == RG_TYPE_F32 || type == RG_TYPE_F16 || type == RG_TYPE_BF16;
    if (!ok_src || !ok_dst)
        return fail(g, RG_ERR_ARG, "cpy: %s from %s to %s is not supported (f32, f16, bf16)", shape(a, s),
                    rg_type_get(a->t.type)->name, rg_type_get(type)->name);
    return node_new(g, RG_OP_CPY, type, ne_of(a), a, NULL, NULL, NULL);
}

rg_node *rg_cpy_into(rg_graph *g, rg_node *a, rg_node *dst) {
    REQUIRE(a, dst);
    char s1[160], s2[160];
    uint32_t ta = a->t.type, td = dst->t.type;
    bool ok = (ta == RG_TYPE_F32 || ta == RG_TYPE_F16 || ta == RG_TYPE_BF16) &&
              (td == RG_TYPE_F32 || td == RG_TYPE_F16 || td == RG_TYPE_BF16);
    if (!ok || !same_shape(a, dst))
        return fail(g, RG_ERR_ARG, "cpy_into: %s (%s) cannot be written into %s (%s)", shape(a, s1), rg_type_get(ta)->name,
                    shape(dst, s2), rg_type_get(td)->name);
    rg_node *o = dst->view_of ? dst->view_of : dst;
    if (o->op != RG_OP_NONE) return fail(g, RG_ERR_ARG, "cpy_into: the destination %s must be (a view of) a leaf", shape(dst, s2));
    rg_node *n = node_new(g, RG_OP_CPY_INTO, td, ne_of(dst), a, dst, NULL, NULL);
    if (!n) return NULL;
    for (int i = 0; i < RG_MAX_DIMS; i++) n->t.nb[i] = dst->t.nb[i];
    n->view_of = o;
    n->t.view_offs = dst->t.view_offs;
    n->flags &= ~RG_NODE_NEEDS_GRAD;
    return n;
}

rg_node *rg_cross_entropy_loss(rg_graph *g, rg_node *logits, rg_node *labels, int32_t ignore_index) {
    REQUIRE(logits, labels);
    char s1[160], s2[160];
    if (!need_f32(g, "cross_entropy_loss", logits, "logits")) return NULL;
    if (labels->t.type != RG_TYPE_I32 || labels->t.ne[0] != logits->t.ne[1] || labels->t.ne[1] != 1 || logits->t.ne[2] != 1)
        return fail(g, RG_ERR_ARG, "cross_entropy_loss: labels %s must be i32 [n_tokens] for logits %s [n_vocab, n_tokens]",
                    shape(labels, s2), shape(logits, s1));
    int64_t ne[4] = {1, 1, 1, 1};
    rg_node *n = node_new(g, RG_OP_CROSS_ENTROPY_LOSS, RG_TYPE_F32, ne, contiguous(g, logits), labels, NULL, NULL);
    if (n) n->ip[0] = ignore_index;
    return n;
}

rg_node *rg_cross_entropy_loss_back(rg_graph *g, rg_node *dloss, rg_node *logits, rg_node *labels, int32_t ignore_index) {
    REQUIRE(dloss, logits, labels);
    char s1[160], s2[160];
    if (!need_f32(g, "cross_entropy_loss_back", dloss, "dloss") || !need_f32(g, "cross_entropy_loss_back", logits, "logits"))
        return NULL;
    if (rg_tensor_nelements(&dloss->t) != 1 || labels->t.type != RG_TYPE_I32 || labels->t.ne[0] != logits->t.ne[1])
        return fail(g, RG_ERR_ARG, "cross_entropy_loss_back: dloss must be one value and labels %s i32 [n_tokens] for logits %s",
                    shape(labels, s2), shape(logits, s1));
    rg_node *n = node_new(g, RG_OP_CROSS_ENTROPY_LOSS_BACK, RG_TYPE_F32, ne_of(logits), dloss, contiguous(g, logits),
                          labels, NULL);
    if (n) n->ip[0] = ignore_index;
    return n;
}

// Leaves, or views of leaves, outlive every node (the plan keeps them).
static bool leaf_bytes(const rg_node *n) { return (n->view_of ? n->view_of : n)->op == RG_OP_NONE; }

rg_node *rg_linear_ce(rg_graph *g, rg_node *w, rg_node *h, rg_node *labels, int32_t ignore_index, int64_t chunk) {
    REQUIRE(w, h, labels);
    char s1[160], s2[160];
    if (!need_f32(g, "linear_ce", h, "hidden states")) return NULL;
    if (w->t.ne[0] != h->t.ne[0] || w->t.ne[2] != 1 || w->t.ne[3] != 1 || h->t.ne[2] != 1 || h->t.ne[3] != 1)
        return fail(g, RG_ERR_ARG, "linear_ce: weight %s [n_embd, n_vocab] and hidden states %s [n_embd, n_tokens] do not fit",
                    shape(w, s1), shape(h, s2));
    if (!rg_tensor_rows_contiguous(&w->t))
        return fail(g, RG_ERR_ARG, "linear_ce: weight %s rows are not contiguous", shape(w, s1));
    if (labels->t.type != RG_TYPE_I32 || labels->t.ne[0] != h->t.ne[1] || labels->t.ne[1] != 1)
        return fail(g, RG_ERR_ARG, "linear_ce: labels %s must be i32 [n_tokens] for hidden states %s", shape(labels, s2),
                    shape(h, s1));
    if (!leaf_bytes(w) || !leaf_bytes(labels))
        return fail(g, RG_ERR_ARG, "linear_ce: weight %s and labels %s must be leaves (the backward reads them through the loss)",
                    shape(w, s1), shape(labels, s2));
    if (chunk < 0) return fail(g, RG_ERR_ARG, "linear_ce: chunk %lld must be >= 0", (long long)chunk);
    int64_t ne[4] = {h->t.ne[1] + 1, 1, 1, 1};
    rg_node *n = node_new(g, RG_OP_LINEAR_CE, RG_TYPE_F32, ne, w, contiguous(g, h), labels, NULL);
    if (n) n->ip[0] = ignore_index, n->ip[1] = chunk;
    return n;
}

rg_node *rg_linear_ce_loss(rg_graph *g, rg_node *lce) {
    REQUIRE(lce);
    char s[160];
    if (lce->op != RG_OP_LINEAR_CE) return fail(g, RG_ERR_ARG, "linear_ce_loss: %s is not a linear_ce node", shape(lce, s));
    return rg_view(g, lce, 1, (int64_t[]){1}, (size_t[]){sizeof(float)}, 0);
}

rg_node *rg_linear_ce_back(rg_graph *g, rg_node *dy, rg_node *lce, bool with_dw) {
    REQUIRE(dy, lce);
    char s1[160], s2[160];
    if (lce->op != RG_OP_LINEAR_CE) return fail(g, RG_ERR_ARG, "linear_ce_back: %s is not a linear_ce node", shape(lce, s2));
    if (!need_f32(g, "linear_ce_back", dy, "dy")) return NULL;
    if (!same_shape(dy, lce))
        return fail(g, RG_ERR_ARG, "linear_ce_back: dy %s does not match the loss %s", shape(dy, s1), shape(lce, s2));
    rg_node *w = lce->src[0], *h = lce->src[1];
    // dw's node: its own bytes (so it can be a parameter's gradient as it is),
    // written by the kernel below, which runs after it (creation order).
    rg_node *dw = with_dw ? rg_fill(g, RG_TYPE_F32, 2, w->t.ne, 0.0f) : NULL;
    if (with_dw && !dw) return NULL;
    rg_node *n = node_new(g, RG_OP_LINEAR_CE_BACK, RG_TYPE_F32, ne_of(h), contiguous(g, dy), h, lce, dw);
    if (!n) return NULL;
    n->ip[0] = lce->ip[0], n->ip[1] = lce->ip[1];
    n->fp[0] = lce->fp[0];
    return n;
}

rg_node *rg_linear_ce_back_dw(rg_graph *g, rg_node *back) {
    REQUIRE(back);
    char s[160];
    if (back->op != RG_OP_LINEAR_CE_BACK || !back->src[3])
        return fail(g, RG_ERR_ARG, "linear_ce_back_dw: %s is not a linear_ce_back node with a weight gradient", shape(back, s));
    return back->src[3];
}

// The update writes the parameter's own bytes: the node is an alias of it
// (view_of) that nevertheless runs a kernel. The parameter is f32, or f16/bf16
// when h says how it is stored back; the other sources are f32 shaped like it.
static rg_node *optimizer_node(rg_graph *g, rg_op op, rg_node *param, rg_node *grad, rg_node *m, rg_node *v,
                               const rg_optim_half *h) {
    char s1[160], s2[160];
    const uint32_t pt = param->t.type;
    if (h ? pt != RG_TYPE_F16 && pt != RG_TYPE_BF16 : pt != RG_TYPE_F32)
        return fail(g, RG_ERR_ARG, "%s: parameter %s has type %s, expected %s", rg_op_name(op), shape(param, s1),
                    rg_type_get(pt)->name, h ? "f16 or bf16 (f32 takes the plain step)" : "f32 (halves take the _half step)");
    if (!rg_tensor_is_contiguous(&param->t))
        return fail(g, RG_ERR_ARG, "%s: parameter %s must be contiguous", rg_op_name(op), shape(param, s1));
    if (h && h->tensor_id >= (1u << 24))
        return fail(g, RG_ERR_ARG, "%s: tensor id %u of %s is not below 2^24", rg_op_name(op), h->tensor_id, shape(param, s1));
    rg_node *master = h ? h->master : NULL;
    rg_node *srcs[3] = {grad, m, v};
    for (int i = 0; i < 4; i++) {
        rg_node *x = i < 3 ? srcs[i] : master;
        if (!x) continue;  // SGD's moments, or no master (the callers REQUIRE the rest)
        if (!is_f32(x) || !same_shape(x, param) || !rg_tensor_is_contiguous(&x->t))
            return fail(g, RG_ERR_ARG, "%s: %s must be contiguous f32 shaped like the parameter %s", rg_op_name(op),
                        shape(x, s2), shape(param, s1));
    }
    rg_node *n = op == RG_OP_ADAMW ? node_new(g, op, pt, ne_of(param), param, grad, m, v)
                                   : node_new(g, op, pt, ne_of(param), param, grad, master, NULL);
    if (!n) return NULL;
    if (op == RG_OP_ADAMW) n->src[4] = master;
    if (h) n->ip[0] = (int64_t)h->seed, n->ip[1] = h->step, n->ip[2] = h->tensor_id;
    n->view_of = param->view_of ? param->view_of : param;
    n->t.view_offs = param->t.view_offs;
    n->flags &= ~RG_NODE_NEEDS_GRAD;
    n->flags |= RG_NODE_OUTPUT;
    snprintf(n->t.name, sizeof n->t.name, "%s %.50s", rg_op_name(op), param->t.name);
    return n;
}

static rg_node *adamw_node(rg_graph *g, rg_node *param, rg_node *grad, rg_node *m, rg_node *v, const rg_adamw_step *s,
                           const rg_optim_half *h) {
    REQUIRE(param, grad, m, v);
    rg_node *n = optimizer_node(g, RG_OP_ADAMW, param, grad, m, v, h);
    if (n) {
        n->fp[0] = s->step, n->fp[1] = s->omb1, n->fp[2] = s->b2, n->fp[3] = s->omb2;
        n->fp[4] = s->eps, n->fp[5] = s->decay, n->fp[6] = s->bc2s, n->fp[7] = s->clip;
    }
    return n;
}

static rg_node *sgd_node(rg_graph *g, rg_node *param, rg_node *grad, float lr, float weight_decay, float clip,
                         const rg_optim_half *h) {
    REQUIRE(param, grad);
    rg_node *n = optimizer_node(g, RG_OP_SGD, param, grad, NULL, NULL, h);
    if (n) n->fp[0] = lr, n->fp[1] = weight_decay, n->fp[2] = clip;
    return n;
}

rg_node *rg_adamw(rg_graph *g, rg_node *param, rg_node *grad, rg_node *m, rg_node *v, const rg_adamw_step *s) {
    return adamw_node(g, param, grad, m, v, s, NULL);
}

rg_node *rg_sgd(rg_graph *g, rg_node *param, rg_node *grad, float lr, float weight_decay, float clip) {
    return sgd_node(g, param, grad, lr, weight_decay, clip, NULL);
}

rg_node *rg_adamw_half(rg_graph *g, rg_node *param, rg_node *grad, rg_node *m, rg_node *v, const rg_adamw_step *s,
                       const rg_optim_half *h) {
    if (!h) return fail(g, RG_ERR_ARG, "adamw_half: no store description");
    return adamw_node(g, param, grad, m, v, s, h);
}

rg_node *rg_sgd_half(rg_graph *g, rg_node *param, rg_node *grad, float lr, float weight_decay, float clip,
                     const rg_optim_half *h) {
    if (!h) return fail(g, RG_ERR_ARG, "sgd_half: no store description");
    return sgd_node(g, param, grad, lr, weight_decay, clip, h);
}

rg_node *rg_sgd_momentum(rg_graph *g, rg_node *sgd, rg_node *buf, float momentum) {
    REQUIRE(sgd, buf);
    char s1[96], s2[96];
    if (sgd->op != RG_OP_SGD) return fail(g, RG_ERR_ARG, "sgd_momentum: %s is not an sgd node", shape(sgd, s1));
    if (!is_f32(buf) || !same_shape(buf, sgd->src[0]) || !rg_tensor_is_contiguous(&buf->t))
        return fail(g, RG_ERR_ARG, "sgd_momentum: the buffer %s must be contiguous f32 shaped like the parameter %s",
                    shape(buf, s2), shape(sgd->src[0], s1));
    if (!(momentum > 0.0f) || !(momentum < 1.0f))
        return fail(g, RG_ERR_ARG, "sgd_momentum: momentum %g is not in (0, 1)", (double)momentum);
    sgd->src[3] = buf;
    sgd->fp[3] = momentum, sgd->fp[4] = 1.0f;
    return sgd;
}

// A copy of n (op, shape, strides, parameters) reading src[] instead of n's
// sources; a view shares the bytes of view_of. Graph rewrites (recompute.c)
// append these and then reorder the node list.
rg_node *rg_graph_clone_node(rg_graph *g, const rg_node *n, rg_node *const src[RG_MAX_SRC], rg_node *view_of) {
    rg_node *c = node_new(g, n->op, n->t.type, n->t.ne, src[0], src[1], src[2], src[3]);
    if (!c) return NULL;
    for (int i = 4; i < RG_MAX_SRC; i++) {
        c->src[i] = src[i];
        if (src[i] && (src[i]->flags & RG_NODE_NEEDS_GRAD)) c->flags |= RG_NODE_NEEDS_GRAD;
    }
    c->t = n->t;
    c->t.data = NULL;
    c->t.view_src = NULL;
    memcpy(c->ip, n->ip, sizeof c->ip);
    memcpy(c->fp, n->fp, sizeof c->fp);
    c->view_of = view_of;
    return c;
}

rg_node *rg_attn_decode(rg_graph *g, rg_node *q, rg_node *k, rg_node *vt, float scale) {
    REQUIRE(q, k, vt);
    char s1[160], s2[160], s3[160];
    if (!need_f32(g, "attn_decode", q, "queries")) return NULL;
    const uint32_t ct = k->t.type;
    const size_t es = rg_type_get(ct)->type_size;
    if ((ct != RG_TYPE_F32 && ct != RG_TYPE_F16) || vt->t.type != ct)
        return fail(g, RG_ERR_ARG, "attn_decode: keys %s and values %s must both be f32 or f16", shape(k, s1), shape(vt, s2));
    const int64_t Dh = q->t.ne[0], H = q->t.ne[1], T = q->t.ne[2], n_kv = k->t.ne[1], Hkv = k->t.ne[2];
    if (k->t.ne[0] != Dh || vt->t.ne[1] != Dh || vt->t.ne[0] != n_kv || vt->t.ne[2] != Hkv || Hkv <= 0 || H % Hkv ||
        T > n_kv || q->t.ne[3] != 1 || k->t.ne[3] != 1 || vt->t.ne[3] != 1)
        return fail(g, RG_ERR_ARG, "attn_decode: queries %s [Dh, H, T], keys %s [Dh, n_kv, Hkv] and values %s [n_kv, Dh, Hkv] "
                    "do not fit", shape(q, s1), shape(k, s2), shape(vt, s3));
    if (k->t.nb[0] != es || vt->t.nb[0] != es)
        return fail(g, RG_ERR_ARG, "attn_decode: keys %s and values %s need packed rows", shape(k, s1), shape(vt, s2));
    rg_node *n = node_new(g, RG_OP_ATTN_DECODE, RG_TYPE_F32, ne_of(q), contiguous(g, q), k, vt, NULL);
    if (n) n->fp[0] = scale;
    return n;
}

// ---------------------------------------------------------------------------
// The state-space family (graph.h, SSM_*): the shape rules here, the packed layouts in pack.c.

// A packing op's node (ops.h): 1-D f32 of its layout's length, sources src[0..RG_MAX_SRC), ip copied.
rg_node *rg_graph_packed_node(rg_graph *g, rg_op op, rg_node *const src[RG_MAX_SRC], const int64_t ip[8]) {
    rg_pack p;
    if (!rg_pack_layout(op, src, ip, &p)) return fail(g, RG_ERR_ARG, "%s: the sources give no layout", rg_op_name(op));
    const int64_t ne[4] = {p.total, 1, 1, 1};
    rg_node *n = node_new(g, op, RG_TYPE_F32, ne, src[0], src[1], src[2], src[3]);
    if (!n) return NULL;
    for (int i = 4; i < RG_MAX_SRC; i++) {
        n->src[i] = src[i];
        if (src[i] && (src[i]->flags & RG_NODE_NEEDS_GRAD)) n->flags |= RG_NODE_NEEDS_GRAD;
    }
    memcpy(n->ip, ip, sizeof n->ip);
    return n;
}

// An f32 tensor of exactly the shape ne (what is named in the error).
static bool ssm_shape(rg_graph *g, const char *op, const rg_node *a, const char *what, const int64_t ne[4],
                      const char *dims) {
    char s[160];
    if (a && is_f32(a) && a->t.ne[0] == ne[0] && a->t.ne[1] == ne[1] && a->t.ne[2] == ne[2] && a->t.ne[3] == ne[3])
        return true;
    if (!a) return refuse(g, RG_ERR_ARG, "%s: no %s", op, what);
    return refuse(g, RG_ERR_ARG, "%s: %s %s (%s) must be f32 %s = [%lld, %lld, %lld]", op, what, shape(a, s),
                  rg_type_get(a->t.type)->name, dims, (long long)ne[0], (long long)ne[1], (long long)ne[2]);
}

// Document ids: I32 [T] (every sequence) or [T, S]; NULL is one document.
static bool ssm_seg(rg_graph *g, const char *op, const rg_node *seg, int64_t T, int64_t S) {
    char s[160];
    if (!seg || (seg->t.type == RG_TYPE_I32 && seg->t.ne[0] == T && (seg->t.ne[1] == 1 || seg->t.ne[1] == S) &&
                 seg->t.ne[2] == 1 && seg->t.ne[3] == 1))
        return true;
    return refuse(g, RG_ERR_ARG, "%s: document ids %s (%s) must be i32 [T] = [%lld] or [T, n_seqs] = [%lld, %lld]", op,
                  shape(seg, s), rg_type_get(seg->t.type)->name, (long long)T, (long long)T, (long long)S);
}

// x [C, T, S] with packed rows, c [K, C] with 2 <= K <= RG_SSM_CONV_MAX_K, state [C, K-1, S], seg.
static bool ssm_conv_sources(rg_graph *g, const char *op, rg_node *x, rg_node *c, const rg_node *state,
                             const rg_node *seg) {
    char s1[160], s2[160];
    if (!need_f32(g, op, x, "x") || !need_f32(g, op, c, "kernel c")) return false;
    const int64_t C = x->t.ne[0], T = x->t.ne[1], S = x->t.ne[2], K = c->t.ne[0];
    if (x->t.ne[3] != 1 || (C > 1 && x->t.nb[0] != sizeof(float)))
        return refuse(g, RG_ERR_ARG, "%s: x %s must be [d_inner, T, n_seqs] with packed rows", op, shape(x, s1));
    if (K < 2 || K > RG_SSM_CONV_MAX_K)
        return refuse(g, RG_ERR_UNSUPPORTED, "%s: kernel c %s has %lld taps (d_conv); the conv takes 2..%d", op,
                      shape(c, s1), (long long)K, RG_SSM_CONV_MAX_K);
    if (c->t.ne[1] != C || c->t.ne[2] != 1 || c->t.ne[3] != 1)
        return refuse(g, RG_ERR_ARG, "%s: kernel c %s [d_conv, d_inner] does not fit x %s [d_inner, T, n_seqs]", op,
                      shape(c, s1), shape(x, s2));
    if (state && !ssm_shape(g, op, state, "state", (const int64_t[4]){C, K - 1, S, 1}, "[d_inner, d_conv - 1, n_seqs]"))
        return false;
    return ssm_seg(g, op, seg, T, S);
}

rg_node *rg_ssm_conv(rg_graph *g, rg_node *x, rg_node *c, rg_node *state, rg_node *seg) {
    REQUIRE(x, c);
    if (!ssm_conv_sources(g, "ssm_conv", x, c, state, seg)) return NULL;
    rg_node *src[RG_MAX_SRC] = {x, contiguous(g, c), state ? contiguous(g, state) : NULL, seg ? contiguous(g, seg) : NULL,
                                NULL};
    return rg_graph_packed_node(g, RG_OP_SSM_CONV, src, (const int64_t[8]){0});
}

// d: the gradient of the whole output of `op`'s forward (its layout with these sources).
static bool ssm_grad_length(rg_graph *g, const char *op, rg_node *d, rg_op fwd, rg_node *const src[RG_MAX_SRC],
                            const int64_t ip[8]) {
    char s[160];
    rg_pack p;
    if (!need_f32(g, op, d, "d")) return false;
    if (rg_pack_layout(fwd, src, ip, &p) && rg_tensor_nelements(&d->t) == p.total) return true;
    return refuse(g, RG_ERR_ARG, "%s: d %s must hold the gradient of the whole %s output (%lld values)", op, shape(d, s),
                  rg_op_name(fwd), (long long)p.total);
}

rg_node *rg_ssm_conv_back(rg_graph *g, rg_node *d, rg_node *x, rg_node *c, rg_node *state, rg_node *seg) {
    REQUIRE(d, x, c);
    const char *op = "ssm_conv_back";
    if (!ssm_conv_sources(g, op, x, c, state, seg) ||
        !ssm_grad_length(g, op, d, RG_OP_SSM_CONV, (rg_node *[RG_MAX_SRC]){x, c}, (const int64_t[8]){0}))
        return NULL;
    rg_node *src[RG_MAX_SRC] = {contiguous(g, d), x, contiguous(g, c), state ? contiguous(g, state) : NULL,
                                seg ? contiguous(g, seg) : NULL};
    return rg_graph_packed_node(g, RG_OP_SSM_CONV_BACK, src, (const int64_t[8]){0});
}

// A [1, H] or [H] for n_head H (from `from`, dt or dta): Mamba-2's scalar decay per head.
static bool ssm_a(rg_graph *g, const char *op, rg_node *A, const rg_node *from) {
    char s1[160], s2[160];
    if (!need_f32(g, op, A, "A")) return false;
    const int64_t *a = A->t.ne;
    if (a[0] > 1 && rg_tensor_nelements(&A->t) != a[0])
        return refuse(g, RG_ERR_UNSUPPORTED, "%s: A %s is per element (Mamba-1's [d_state, n_head]); the scan takes "
                      "Mamba-2's one A per head, [1, n_head]", op, shape(A, s1));
    if (rg_tensor_nelements(&A->t) == from->t.ne[0] && a[2] == 1 && a[3] == 1) return true;
    return refuse(g, RG_ERR_ARG, "%s: A %s must be [1, n_head] or [n_head] for %s [n_head, T, n_seqs]", op, shape(A, s1),
                  shape(from, s2));
}

rg_node *rg_ssm_dt(rg_graph *g, rg_node *dt, rg_node *A, rg_node *seg) {
    REQUIRE(dt, A);
    char s[160];
    const char *op = "ssm_dt";
    if (!need_f32(g, op, dt, "dt")) return NULL;
    if (dt->t.ne[3] != 1) return fail(g, RG_ERR_ARG, "%s: dt %s must be [n_head, T, n_seqs]", op, shape(dt, s));
    if (!ssm_a(g, op, A, dt) || !ssm_seg(g, op, seg, dt->t.ne[1], dt->t.ne[2])) return NULL;
    const int64_t ne[4] = {dt->t.ne[0], dt->t.ne[1], dt->t.ne[2], 3};
    return node_new(g, RG_OP_SSM_DT, RG_TYPE_F32, ne, contiguous(g, dt), contiguous(g, A), seg ? contiguous(g, seg) : NULL,
                    NULL);
}

// The scan's sources around dt (or dta) [H, T, S, *]: P, N, G >= 1 with G dividing H,
// xBC [P*H + 2*G*N, T, S], A, state [N, P, H, S] or NULL.
static bool ssm_scan_sources(rg_graph *g, const char *op, const rg_node *xbc, const rg_node *dt, rg_node *A,
                             const rg_node *state, int64_t P, int64_t N, int64_t G) {
    char s[160];
    const int64_t H = dt->t.ne[0], T = dt->t.ne[1], S = dt->t.ne[2];
    if (!ssm_a(g, op, A, dt)) return false;
    if (P < 1 || N < 1 || G < 1 || H % G)
        return refuse(g, RG_ERR_ARG, "%s: head_dim %lld, d_state %lld and n_group %lld must be >= 1, n_group dividing "
                      "n_head %lld (%s)", op, (long long)P, (long long)N, (long long)G, (long long)H, shape(dt, s));
    if (!ssm_shape(g, op, xbc, "xBC", (const int64_t[4]){P * H + 2 * G * N, T, S, 1},
                   "[head_dim * n_head + 2 * n_group * d_state, T, n_seqs]"))
        return false;
    return !state || ssm_shape(g, op, state, "state", (const int64_t[4]){N, P, H, S}, "[d_state, head_dim, n_head, n_seqs]");
}

rg_node *rg_ssm_scan(rg_graph *g, rg_node *xbc, rg_node *dt, rg_node *A, rg_node *state, rg_node *seg,
                     int64_t head_dim, int64_t d_state, int64_t n_group) {
    REQUIRE(xbc, dt, A);
    char s[160];
    const char *op = "ssm_scan";
    if (!need_f32(g, op, dt, "dt")) return NULL;
    if (dt->t.ne[3] != 1) return fail(g, RG_ERR_ARG, "%s: dt %s must be [n_head, T, n_seqs]", op, shape(dt, s));
    if (!ssm_scan_sources(g, op, xbc, dt, A, state, head_dim, d_state, n_group) ||
        !ssm_seg(g, op, seg, dt->t.ne[1], dt->t.ne[2]))
        return NULL;
    rg_node *src[RG_MAX_SRC] = {contiguous(g, xbc), contiguous(g, dt), contiguous(g, A),
                                state ? contiguous(g, state) : NULL, seg ? contiguous(g, seg) : NULL};
    return rg_graph_packed_node(g, RG_OP_SSM_SCAN, src, (const int64_t[8]){head_dim, d_state, n_group});
}

rg_node *rg_ssm_scan_back(rg_graph *g, rg_node *d, rg_node *xbc, rg_node *dta, rg_node *A, rg_node *state,
                          int64_t head_dim, int64_t d_state, int64_t n_group) {
    REQUIRE(d, xbc, dta, A);
    char s[160];
    const char *op = "ssm_scan_back";
    const int64_t ip[8] = {head_dim, d_state, n_group};
    if (!need_f32(g, op, dta, "dta")) return NULL;
    if (dta->t.ne[3] != 3)
        return fail(g, RG_ERR_ARG, "%s: dta %s must be the ssm_dt output [n_head, T, n_seqs, 3]", op, shape(dta, s));
    // The forward's layout reads only dt's [H, T, S], which dta's first dimensions are.
    if (!ssm_scan_sources(g, op, xbc, dta, A, state, head_dim, d_state, n_group) ||
        !ssm_grad_length(g, op, d, RG_OP_SSM_SCAN, (rg_node *[RG_MAX_SRC]){xbc, dta, A}, ip))
        return NULL;
    rg_node *src[RG_MAX_SRC] = {contiguous(g, d), contiguous(g, xbc), contiguous(g, dta), contiguous(g, A),
                                state ? contiguous(g, state) : NULL};
    return rg_graph_packed_node(g, RG_OP_SSM_SCAN_BACK, src, ip);
}

rg_node *rg_ssm_part(rg_graph *g, rg_node *packed, int part) {
    REQUIRE(packed);
    char s[160];
    const rg_op op = packed->op;
    if (op != RG_OP_SSM_CONV && op != RG_OP_SSM_CONV_BACK && op != RG_OP_SSM_SCAN && op != RG_OP_SSM_SCAN_BACK)
        return fail(g, RG_ERR_ARG, "ssm_part: %s (%s) is not a packed ssm node", shape(packed, s), rg_op_name(op));
    return rg_pack_part(g, packed, part);
}
