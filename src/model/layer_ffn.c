// layer_ffn.c - the dense SwiGLU FFN (architectures.md §0.4):
// x + W_down (silu(W_gate h) * (W_up h)) with h = RMSNorm(x; ffn_norm). No state.
// d = n_embd, T = n_tokens, F = the layer's n_ff.
#include "model/layer.h"

static rg_node *build(const rg_layer_ctx *c, rg_node *x) {
    rg_graph *g = c->g;
    rg_node *h = rg_layer_norm(g, x, c->w->w[RG_ROLE_FFN_NORM], c->m->hp.norm_eps);       // [d, T]
    rg_node *act = rg_swiglu(g, rg_layer_linear(c, RG_ROLE_FFN_GATE, RG_N_ROLES, h),
                             rg_layer_linear(c, RG_ROLE_FFN_UP, RG_N_ROLES, h));          // [F, T]
    return rg_add(g, x, rg_layer_linear(c, RG_ROLE_FFN_DOWN, RG_N_ROLES, act));           // [d, T]
}

const rg_layer_kind_desc rg_layer_ffn = {"ffn", build, 0, NULL};
