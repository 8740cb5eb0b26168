// layer_ssm.c - mamba2's mixer (architectures.md §3.3), as llama.cpp's mamba2
// graph builds it: in_proj to z, xBC, dt; a causal depthwise conv of K taps
// (SSM_CONV) with bias and SiLU over xBC; the selective scan (SSM_SCAN: scalar
// decay exp(softplus(dt + dt_bias) A) per head, A = ssm_a as stored, groups of
// heads sharing B and C); the D skip; the SiLU(z) gate; the RMSNorm per group
// of D_in/G lanes times ssm_norm; out_proj; with the residual around
// RMSNorm(x; attn_norm). Its state per sequence: the last K-1 pre-conv xBC
// vectors [D_in + 2GN, K-1] and the SSM state [N, P, nh] (= N * D_in floats),
// zeros at a sequence's start. In training the document ids reset both at every
// packed document's start.
// d = n_embd, T = n_tokens, D_in = ssm.inner_size, N = d_state, nh heads of P = head_dim, G groups,
// Cc = D_in + 2GN (the conv channels), K = conv_kernel.
#include "model/layer.h"

static int64_t conv_channels(const rg_hparams *hp) { return hp->ssm_inner + 2 * hp->ssm_groups * hp->ssm_state; }

static int64_t conv_elements(const rg_hparams *hp, const rg_layer *L) {
    (void)L;
    return (hp->n_conv - 1) * conv_channels(hp);   // [Cc, K-1]
}

static int64_t ssm_elements(const rg_hparams *hp, const rg_layer *L) {
    (void)L;
    return hp->ssm_state * hp->ssm_inner;   // [N, P, nh]
}

static const rg_state_buf ssm_state[] = {
    {"conv", false, conv_elements, NULL},
    {"ssm", false, ssm_elements, NULL},
};

// The conv and the scan of xbc [Cc, T, 1] and dt [nh, T] (views of the input projection) over c's state (both
// written back; the batch's conv inputs and states kept for exact rewind), with the D skip: y [P, nh, T].
static rg_node *conv_scan(const rg_layer_ctx *c, rg_node *xbc, rg_node *dt) {
    rg_graph *g = c->g;
    const rg_hparams *hp = &c->m->hp;
    const rg_layer_nodes *L = c->w;
    const int64_t T = xbc->t.ne[1], D_in = hp->ssm_inner, N = hp->ssm_state, nh = hp->ssm_heads, G = hp->ssm_groups;
    const int64_t P = D_in / nh, Cc = conv_channels(hp);
    rg_node *conv_st = rg_layer_state_leaf(c, 0, "conv_state", 3, (int64_t[]){Cc, hp->n_conv - 1, 1});  // [Cc, K-1, 1]
    rg_node *conv = rg_ssm_conv(g, xbc, rg_layer_f32(g, L->w[RG_ROLE_SSM_CONV]), conv_st, c->seg);
    if (conv_st) rg_cpy_into(g, rg_ssm_part(g, conv, RG_SSM_CONV_STATE), conv_st);
    const bool snap = conv_st && c->state->snap_conv_x && c->state->snap_ssm && T <= c->state->snap_cap;
    if (snap)  // the batch's conv inputs, for exact rewind (infer/session_snap.c)
        rg_cpy_into(g, xbc, rg_leaf(g, "snap_conv_x", RG_TYPE_F32, 3, (int64_t[]){Cc, T, 1}, c->state->snap_conv_x));
    rg_node *conv_b = rg_layer_f32(g, L->w[RG_ROLE_SSM_CONV_B]);
    xbc = rg_silu(g, rg_add(g, rg_ssm_part(g, conv, RG_SSM_CONV_Y), conv_b));                       // [Cc, T, 1]

    dt = rg_reshape(g, rg_add(g, dt, rg_layer_f32(g, L->w[RG_ROLE_SSM_DT_B])), 3, (int64_t[]){nh, T, 1});  // [nh, T, 1]
    rg_node *ssm_st = rg_layer_state_leaf(c, 1, "ssm_state", 4, (int64_t[]){N, P, nh, 1});          // [N, P, nh, 1]
    rg_node *scan = (snap ? rg_ssm_scan_snap : rg_ssm_scan)(g, xbc, dt, rg_layer_f32(g, L->w[RG_ROLE_SSM_A]), ssm_st,
                                                            c->seg, P, N, G);
    if (ssm_st) rg_cpy_into(g, rg_ssm_part(g, scan, RG_SSM_SCAN_STATE), ssm_st);
    if (snap)  // the state after every token of the batch
        rg_cpy_into(g, rg_ssm_part(g, scan, RG_SSM_SCAN_STATES),
                    rg_leaf(g, "snap_ssm", RG_TYPE_F32, 4, (int64_t[]){N * P * nh, T, 1, 1}, c->state->snap_ssm));
    rg_node *y = rg_reshape(g, rg_ssm_part(g, scan, RG_SSM_SCAN_Y), 3, (int64_t[]){P, nh, T});      // [P, nh, T]

    // The D skip: y += x * D per head, x the conv output's first D_in lanes.
    rg_node *xs = rg_view(g, xbc, 3, (int64_t[]){P, nh, T}, (size_t[]){4, (size_t)P * 4, (size_t)Cc * 4},
                          0);                                                                         // [P, nh, T]
    return rg_add(g, y, rg_mul(g, xs, rg_layer_f32(g, L->w[RG_ROLE_SSM_D])));                       // [P, nh, T]
}

static rg_node *build(const rg_layer_ctx *c, rg_node *x) {
    rg_graph *g = c->g;
    const rg_hparams *hp = &c->m->hp;
    const rg_layer_nodes *L = c->w;
    const int64_t T = x->t.ne[1], D_in = hp->ssm_inner, N = hp->ssm_state, nh = hp->ssm_heads, G = hp->ssm_groups;
    const int64_t Cc = conv_channels(hp), n_in = 2 * D_in + 2 * G * N + nh;
    rg_node *h = rg_layer_norm(g, x, L->w[RG_ROLE_ATTN_NORM], hp->norm_eps);                        // [d, T]
    rg_node *zxbcdt = rg_layer_linear(c, RG_ROLE_SSM_IN, RG_N_ROLES, h);                            // [n_in, T]: z, xBC, dt
    const size_t row = (size_t)n_in * sizeof(float);
    rg_node *z = rg_view(g, zxbcdt, 2, (int64_t[]){D_in, T}, (size_t[]){4, row}, 0);                // [D_in, T]
    rg_node *xbc = rg_view(g, zxbcdt, 3, (int64_t[]){Cc, T, 1}, (size_t[]){4, row, row * T},
                           (size_t)D_in * 4);                                                         // [Cc, T, 1]
    rg_node *dt = rg_view(g, zxbcdt, 2, (int64_t[]){nh, T}, (size_t[]){4, row}, (size_t)(D_in + Cc) * 4);  // [nh, T]
    rg_node *y;
    if (c->segs) {  // several sequences: each segment's columns through its own conv window and SSM state
        y = rg_layer_gather(c, "ssm_y", D_in, T);                                                   // [D_in, T]
        for (int i = 0; i < c->n_segs && y; i++) {
            const rg_layer_ctx cs = rg_layer_seg_ctx(c, i);
            const int64_t f = c->segs[i].first, n = c->segs[i].n;
            rg_node *xbc_s = rg_view(g, zxbcdt, 3, (int64_t[]){Cc, n, 1}, (size_t[]){4, row, row * n},
                                     (size_t)f * row + (size_t)D_in * 4);                            // [Cc, n, 1]
            rg_layer_put_cols(g, conv_scan(&cs, xbc_s, rg_layer_cols(g, dt, 1, f, n)), y, f);       // [D_in, n] at f
        }
    } else {
        y = conv_scan(c, xbc, dt);                                                                  // [P, nh, T]
    }
    // The gate, then RMSNorm over each group of D_in/G lanes times ssm_norm [D_in/G, G].
    y = rg_mul(g, rg_reshape(g, y, 2, (int64_t[]){D_in, T}), rg_silu(g, z));                        // [D_in, T]
    y = rg_reshape(g, y, 3, (int64_t[]){D_in / G, G, T});                                           // [D_in/G, G, T]
    y = rg_layer_norm(g, y, L->w[RG_ROLE_SSM_NORM], hp->norm_eps);                                  // per group
    y = rg_reshape(g, y, 2, (int64_t[]){D_in, T});                                                  // [D_in, T]
    return rg_add(g, x, rg_layer_linear(c, RG_ROLE_SSM_OUT, RG_N_ROLES, y));                        // [d, T]
}

const rg_layer_kind_desc rg_layer_ssm = {"ssm", build, 2, ssm_state};
