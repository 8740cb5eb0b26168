// layer_conv.c - lfm2's gated short convolution (architectures.md §2.5):
// x + W_out (C * conv_L(B * X)) with (B, C, X) = W_in RMSNorm(x; attn_norm), a
// depthwise causal conv of L taps, no bias and no activation. Its state is the
// last L-1 gated inputs B * X per sequence, [L-1, d] (time innermost, as
// ggml's SSM_CONV reads it), zeros at a sequence's start.
//
// The builder waits for the SSM_CONV op (graph/ops.h); until then the layer
// loads, its state is allocated, and building it is an error that says so.
#include "model/layer.h"

static int64_t conv_elements(const rg_hparams *hp, const rg_layer *L) {
    (void)L;
    return (hp->n_conv - 1) * hp->n_embd;   // [L-1, d]
}

static const rg_state_buf conv_state[] = {
    {"conv", false, conv_elements},
};

static rg_node *build(const rg_layer_ctx *c, rg_node *x) {
    (void)x;
    return rg_layer_unsupported(c, "short conv", "SSM_CONV/SSM_SCAN ops");
}

const rg_layer_kind_desc rg_layer_shortconv = {"short conv", build, 1, conv_state};
