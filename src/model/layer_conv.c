// layer_conv.c - lfm2's gated short convolution (architectures.md §2.5):
// x + W_out (C * conv_L(B * X)) with (B, C, X) = W_in RMSNorm(x; attn_norm), a
// depthwise causal conv of L taps (SSM_CONV), no bias and no activation, as
// llama.cpp's lfm2 graph builds it. Its state is the last L-1 gated inputs
// B * X per sequence, stored [d, L-1] as SSM_CONV takes it (the previous
// chunk's final state as it is), zeros at a sequence's start. In training the
// document ids reset the conv at every packed document's start.
// d = n_embd, T = n_tokens, L = shortconv.l_cache.
#include "model/layer.h"

static int64_t conv_elements(const rg_hparams *hp, const rg_layer *L) {
    (void)L;
    return (hp->n_conv - 1) * hp->n_embd;   // [d, L-1]
}

static const rg_state_buf conv_state[] = {
    {"conv", false, conv_elements, NULL},
};

// The causal conv of bx [d, T, 1] over c's state (the window written back, the batch's conv inputs kept for exact
// rewind): y [d, T].
static rg_node *conv(const rg_layer_ctx *c, rg_node *bx) {
    rg_graph *g = c->g;
    const rg_hparams *hp = &c->m->hp;
    const int64_t d = hp->n_embd, T = bx->t.ne[1];
    rg_node *state = rg_layer_state_leaf(c, 0, "conv_state", 3, (int64_t[]){d, hp->n_conv - 1, 1});  // [d, L-1, 1]
    rg_node *cv = rg_ssm_conv(g, bx, rg_layer_f32(g, c->w->w[RG_ROLE_CONV_KERNEL]), state, c->seg);
    rg_node *y = rg_reshape(g, rg_ssm_part(g, cv, RG_SSM_CONV_Y), 2, (int64_t[]){d, T});            // [d, T]
    if (state) rg_cpy_into(g, rg_ssm_part(g, cv, RG_SSM_CONV_STATE), state);                        // the next chunk's window
    if (state && c->state->snap_conv_x && T <= c->state->snap_cap)                                   // the batch's conv inputs
        rg_cpy_into(g, bx, rg_leaf(g, "snap_conv_x", RG_TYPE_F32, 3, (int64_t[]){d, T, 1}, c->state->snap_conv_x));
    return y;
}

static rg_node *build(const rg_layer_ctx *c, rg_node *x) {
    rg_graph *g = c->g;
    const rg_hparams *hp = &c->m->hp;
    const rg_layer_nodes *L = c->w;
    const int64_t d = hp->n_embd, T = x->t.ne[1];
    rg_node *h = rg_layer_norm(g, x, L->w[RG_ROLE_ATTN_NORM], hp->norm_eps);                        // [d, T]
    rg_node *bcx = rg_layer_linear(c, RG_ROLE_CONV_IN, RG_N_ROLES, h);                              // [3d, T]: B, C, X per token
    const size_t row = (size_t)(3 * d) * sizeof(float);
    rg_node *b = rg_view(g, bcx, 2, (int64_t[]){d, T}, (size_t[]){4, row}, 0);                      // [d, T]
    rg_node *cg = rg_view(g, bcx, 2, (int64_t[]){d, T}, (size_t[]){4, row}, (size_t)d * 4);         // [d, T]
    rg_node *xs = rg_view(g, bcx, 2, (int64_t[]){d, T}, (size_t[]){4, row}, (size_t)(2 * d) * 4);   // [d, T]
    rg_node *bx = rg_reshape(g, rg_mul(g, b, xs), 3, (int64_t[]){d, T, 1});                         // [d, T, 1]
    rg_node *y;
    if (c->segs) {  // several sequences: each segment's columns through its own window
        y = rg_layer_gather(c, "conv_y", d, T);                                                     // [d, T]
        for (int i = 0; i < c->n_segs && y; i++) {
            const rg_layer_ctx cs = rg_layer_seg_ctx(c, i);
            const int64_t f = c->segs[i].first, n = c->segs[i].n;
            rg_layer_put_cols(g, conv(&cs, rg_layer_cols(g, bx, 1, f, n)), y, f);                   // [d, n] at column f
        }
    } else {
        y = conv(c, bx);                                                                            // [d, T]
    }
    rg_node *z = rg_mul(g, cg, y);                                                                  // [d, T]
    return rg_add(g, x, rg_layer_linear(c, RG_ROLE_CONV_OUT, RG_N_ROLES, z));                       // [d, T]
}

const rg_layer_kind_desc rg_layer_shortconv = {"short conv", build, 1, conv_state};
