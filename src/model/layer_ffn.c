// layer_ffn.c - the dense gated FFN (architectures.md §0.4, §1.7):
// x + post_norm(W_down (act(W_gate h) * (W_up h))) with h = RMSNorm(x; ffn_norm),
// act SiLU (SwiGLU) or, where hparams.ffn_gelu (gemma), GELU with the tanh
// approximation (GeGLU); the post-norm where the layer has one (gemma). No state.
// d = n_embd, T = n_tokens, F = the layer's n_ff.
#include "model/layer.h"

static rg_node *build(const rg_layer_ctx *c, rg_node *x) {
    rg_graph *g = c->g;
    const rg_hparams *hp = &c->m->hp;
    rg_node *h = rg_layer_norm(g, x, c->w->w[RG_ROLE_FFN_NORM], hp->norm_eps);             // [d, T]
    rg_node *gate = rg_layer_linear(c, RG_ROLE_FFN_GATE, RG_N_ROLES, h);                    // [F, T]
    rg_node *up = rg_layer_linear(c, RG_ROLE_FFN_UP, RG_N_ROLES, h);                        // [F, T]
    rg_node *act = hp->ffn_gelu ? rg_mul(g, rg_gelu(g, gate), up) : rg_swiglu(g, gate, up);  // [F, T]
    rg_node *y = rg_layer_linear(c, RG_ROLE_FFN_DOWN, RG_N_ROLES, act);                     // [d, T]
    rg_node *post = c->w->w[RG_ROLE_FFN_POST_NORM];
    if (post) y = rg_layer_norm(g, y, post, hp->norm_eps);
    return rg_add(g, x, y);                                                                  // [d, T]
}

const rg_layer_kind_desc rg_layer_ffn = {"ffn", build, 0, NULL};
