// build_ssm.c - the constructors of the state-space family (graph.h, SSM_CONV(_BACK),
// SSM_DT, SSM_SCAN(_BACK), their parts) and of packing nodes: the shape rules here, the
// packed layouts in pack.c.
#include <string.h>

#include "cpu/ssm_math.h"
#include "graph/build_util.h"
#include "graph/pack.h"

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
    if (!ssm_conv_sources(g, rg_op_name(RG_OP_SSM_CONV), x, c, state, seg)) return NULL;
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
    const char *op = rg_op_name(RG_OP_SSM_CONV_BACK);
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
    const char *op = rg_op_name(RG_OP_SSM_DT);
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

static rg_node *ssm_scan(rg_graph *g, rg_node *xbc, rg_node *dt, rg_node *A, rg_node *state, rg_node *seg,
                         int64_t head_dim, int64_t d_state, int64_t n_group, bool snap) {
    REQUIRE(xbc, dt, A);
    char s[160];
    const char *op = rg_op_name(RG_OP_SSM_SCAN);
    if (!need_f32(g, op, dt, "dt")) return NULL;
    if (dt->t.ne[3] != 1) return fail(g, RG_ERR_ARG, "%s: dt %s must be [n_head, T, n_seqs]", op, shape(dt, s));
    if (!ssm_scan_sources(g, op, xbc, dt, A, state, head_dim, d_state, n_group) ||
        !ssm_seg(g, op, seg, dt->t.ne[1], dt->t.ne[2]))
        return NULL;
    rg_node *src[RG_MAX_SRC] = {contiguous(g, xbc), contiguous(g, dt), contiguous(g, A),
                                state ? contiguous(g, state) : NULL, seg ? contiguous(g, seg) : NULL};
    for (int i = 0; snap && i < RG_MAX_SRC; i++)
        if (src[i] && (src[i]->flags & RG_NODE_NEEDS_GRAD))
            return fail(g, RG_ERR_UNSUPPORTED, "%s with snapshots: source %d needs a gradient; the states after every "
                        "token are for inference (exact rewind) and have no backward", op, i);
    return rg_graph_packed_node(g, RG_OP_SSM_SCAN, src, (const int64_t[8]){head_dim, d_state, n_group, snap ? 1 : 0});
}

rg_node *rg_ssm_scan(rg_graph *g, rg_node *xbc, rg_node *dt, rg_node *A, rg_node *state, rg_node *seg,
                     int64_t head_dim, int64_t d_state, int64_t n_group) {
    return ssm_scan(g, xbc, dt, A, state, seg, head_dim, d_state, n_group, false);
}

rg_node *rg_ssm_scan_snap(rg_graph *g, rg_node *xbc, rg_node *dt, rg_node *A, rg_node *state, rg_node *seg,
                          int64_t head_dim, int64_t d_state, int64_t n_group) {
    return ssm_scan(g, xbc, dt, A, state, seg, head_dim, d_state, n_group, true);
}

rg_node *rg_conv_rs_gather(rg_graph *g, rg_node *x, rg_node *prev, int64_t pos) {
    REQUIRE(x, prev);
    char s1[160], s2[160];
    const char *op = rg_op_name(RG_OP_CONV_RS_GATHER);
    if (!need_f32(g, op, prev, "prev") || !need_f32(g, op, x, "x")) return NULL;
    const int64_t C = x->t.ne[0], n = x->t.ne[1], S = x->t.ne[2], K1 = prev->t.ne[1];
    if (x->t.ne[3] != 1 || (C > 1 && x->t.nb[0] != sizeof(float)))
        return fail(g, RG_ERR_ARG, "%s: x %s must be [C, n, n_seqs] with packed rows", op, shape(x, s1));
    if (K1 < 1 || !ssm_shape(g, op, prev, "prev", (const int64_t[4]){C, K1, S, 1}, "[C, K-1, n_seqs]")) {
        if (K1 < 1) return fail(g, RG_ERR_ARG, "%s: prev %s holds no column (K-1 >= 1)", op, shape(prev, s1));
        return NULL;
    }
    if (pos < 0 || pos > n)
        return fail(g, RG_ERR_ARG, "%s: position %lld is outside x %s's 0..%lld tokens", op, (long long)pos,
                    shape(x, s2), (long long)n);
    rg_node *out = node_new(g, RG_OP_CONV_RS_GATHER, RG_TYPE_F32, (const int64_t[4]){C, K1, S, 1},
                            x, contiguous(g, prev), NULL, NULL);
    if (!out) return NULL;
    out->ip[0] = pos;
    out->flags &= ~RG_NODE_NEEDS_GRAD;
    return out;
}

rg_node *rg_ssm_scan_back(rg_graph *g, rg_node *d, rg_node *xbc, rg_node *dta, rg_node *A, rg_node *state,
                          int64_t head_dim, int64_t d_state, int64_t n_group) {
    REQUIRE(d, xbc, dta, A);
    char s[160];
    const char *op = rg_op_name(RG_OP_SSM_SCAN_BACK);
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
