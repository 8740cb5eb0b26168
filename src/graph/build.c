// build.c - op constructors: shape and type rules, checked when the node is
// made; a mismatch records one error naming the op and both shapes.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/build_util.h"
#include "graph/ops.h"

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

rg_node *rg_build_node(rg_graph *g, rg_op op, uint32_t type, const int64_t ne[RG_MAX_DIMS], rg_node *s0, rg_node *s1,
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


void rg_node_bind(rg_node *n, void *data) {
    n->t.data = data;
    if (data) n->flags |= RG_NODE_EXTERNAL;
    else n->flags &= ~RG_NODE_EXTERNAL;
}

bool rg_node_frozen(const rg_node *n) {
    const rg_node *o = n && n->view_of ? n->view_of : n;
    return o && o->op == RG_OP_NONE && (o->flags & RG_NODE_FROZEN) && !(o->flags & RG_NODE_PARAM) && o->t.data;
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
    if (!need_f32(g, rg_op_name(RG_OP_GET_ROWS_BACK), dy, "dy")) return NULL;
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
    if (!need_f32(g, rg_op_name(RG_OP_MUL_MAT), x, "activations")) return NULL;
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
    if (!need_f32(g, rg_op_name(RG_OP_OUT_PROD), b, "b")) return NULL;
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
    if (!need_f32(g, rg_op_name(RG_OP_REPEAT), a, "input")) return NULL;
    if (!broadcasts(like, a, 0)) return fail(g, RG_ERR_ARG, "repeat: %s does not tile %s", shape(a, s1), shape(like, s2));
    return node_new(g, RG_OP_REPEAT, RG_TYPE_F32, ne_of(like), a, like, NULL, NULL);
}

rg_node *rg_repeat_back(rg_graph *g, rg_node *a, rg_node *like) {
    REQUIRE(a, like);
    char s1[160], s2[160];
    if (!need_f32(g, rg_op_name(RG_OP_REPEAT_BACK), a, "input")) return NULL;
    if (!broadcasts(a, like, 0))
        return fail(g, RG_ERR_ARG, "repeat_back: %s is not a tiling of %s", shape(a, s1), shape(like, s2));
    return node_new(g, RG_OP_REPEAT_BACK, RG_TYPE_F32, ne_of(like), a, like, NULL, NULL);
}

rg_node *rg_sum(rg_graph *g, rg_node *a) {
    REQUIRE(a);
    if (!need_f32(g, rg_op_name(RG_OP_SUM), a, "input")) return NULL;
    int64_t ne[4] = {1, 1, 1, 1};
    return node_new(g, RG_OP_SUM, RG_TYPE_F32, ne, a, NULL, NULL, NULL);
}

rg_node *rg_mean(rg_graph *g, rg_node *a) {
    REQUIRE(a);
    if (!need_f32(g, rg_op_name(RG_OP_MEAN), a, "input")) return NULL;
    int64_t ne[4] = {1, 1, 1, 1};
    return node_new(g, RG_OP_MEAN, RG_TYPE_F32, ne, a, NULL, NULL, NULL);
}

rg_node *rg_sum_rows(rg_graph *g, rg_node *a) {
    REQUIRE(a);
    if (!need_f32(g, rg_op_name(RG_OP_SUM_ROWS), a, "input")) return NULL;
    int64_t ne[4] = {1, a->t.ne[1], a->t.ne[2], a->t.ne[3]};
    return node_new(g, RG_OP_SUM_ROWS, RG_TYPE_F32, ne, a, NULL, NULL, NULL);
}

rg_node *rg_rms_norm(rg_graph *g, rg_node *x, float eps) {
    REQUIRE(x);
    if (!need_f32(g, rg_op_name(RG_OP_RMS_NORM), x, "input")) return NULL;
    if (!(eps >= 0)) return fail(g, RG_ERR_ARG, "rms_norm: eps %g must be >= 0", (double)eps);
    rg_node *n = node_new(g, RG_OP_RMS_NORM, RG_TYPE_F32, ne_of(x), contiguous(g, x), NULL, NULL, NULL);
    if (n) n->fp[0] = eps;
    return n;
}

rg_node *rg_rms_norm_back(rg_graph *g, rg_node *dy, rg_node *x, float eps) {
    REQUIRE(dy, x);
    char s1[160], s2[160];
    const char *op = rg_op_name(RG_OP_RMS_NORM_BACK);
    if (!need_f32(g, op, dy, "dy") || !need_f32(g, op, x, "x")) return NULL;
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
    if (!need_f32(g, rg_op_name(RG_OP_SOFT_MAX), a, "input")) return NULL;
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
    const char *op = rg_op_name(RG_OP_SOFT_MAX_BACK);
    if (!need_f32(g, op, dy, "dy") || !need_f32(g, op, y, "y")) return NULL;
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
    const char *op = rg_op_name(RG_OP_SILU_BACK);
    if (!need_f32(g, op, dy, "dy") || !need_f32(g, op, a, "a")) return NULL;
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
    const char *op = rg_op_name(RG_OP_SWIGLU);
    if (!need_f32(g, op, gate, "gate") || !need_f32(g, op, up, "up")) return NULL;
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

rg_node *rg_acc_into(rg_graph *g, rg_node *a, rg_node *dst) {
    REQUIRE(a, dst);
    char s1[160], s2[160];
    if (a->t.type != RG_TYPE_F32 || dst->t.type != RG_TYPE_F32)
        return fail(g, RG_ERR_ARG, "acc_into: %s (%s) cannot be added into %s (%s): both must be f32", shape(a, s1),
                    rg_type_get(a->t.type)->name, shape(dst, s2), rg_type_get(dst->t.type)->name);
    rg_node *n = rg_cpy_into(g, a, dst);
    if (n) n->ip[0] = 1;  // CPY_INTO's accumulate mode: dst += a
    return n;
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

void rg_mul_mat_column(const rg_node *n, int64_t j, rg_node *xc, rg_node *yc) {
    *xc = *n->src[1], *yc = *n;
    xc->t.ne[1] = 1, yc->t.ne[1] = 1;
    xc->t.data = (char *)n->src[1]->t.data + (size_t)j * n->src[1]->t.nb[1];
    yc->t.data = (char *)n->t.data + (size_t)j * n->t.nb[1];
    yc->src[1] = xc;
    yc->ip[0] = 0;
}

rg_node *rg_attn_decode(rg_graph *g, rg_node *q, rg_node *k, rg_node *vt, float scale, float softcap, int64_t window) {
    REQUIRE(q, k, vt);
    char s1[160], s2[160], s3[160];
    if (!need_f32(g, rg_op_name(RG_OP_ATTN_DECODE), q, "queries")) return NULL;
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
    if (!(softcap >= 0.0f) || window < 0)
        return fail(g, RG_ERR_ARG, "attn_decode: a logit cap of %g and a window of %lld: both must be >= 0 (0: none)",
                    (double)softcap, (long long)window);
    rg_node *n = node_new(g, RG_OP_ATTN_DECODE, RG_TYPE_F32, ne_of(q), contiguous(g, q), k, vt, NULL);
    if (n) n->fp[0] = scale, n->fp[1] = softcap, n->ip[0] = window;
    return n;
}
