// layer_ssm.c - mamba2's mixer (architectures.md §3.3): in_proj to z, xBC, dt;
// a causal depthwise conv of K taps with bias and SiLU over xBC; the selective
// scan (scalar decay exp(softplus(dt + dt_bias) A) per head, groups of heads
// sharing B and C); the D skip; the SiLU(z) gate; the grouped gated RMSNorm;
// out_proj; with the residual around RMSNorm(x; attn_norm). Its state per
// sequence: the last K-1 pre-conv xBC vectors [K-1, D_in + 2GN] and the SSM
// state [N, P, nh] (= N * D_in floats), zeros at a sequence's start.
//
// The builder waits for the SSM_CONV and SSM_SCAN ops (graph/ops.h); until
// then the layer loads, its state is allocated, and building it is an error
// that says so.
#include "model/layer.h"

static int64_t conv_elements(const rg_hparams *hp, const rg_layer *L) {
    (void)L;
    return (hp->n_conv - 1) * (hp->ssm_inner + 2 * hp->ssm_groups * hp->ssm_state);   // [K-1, D_in + 2GN]
}

static int64_t ssm_elements(const rg_hparams *hp, const rg_layer *L) {
    (void)L;
    return hp->ssm_state * hp->ssm_inner;   // [N, P, nh]
}

static const rg_state_buf ssm_state[] = {
    {"conv", false, conv_elements},
    {"ssm", false, ssm_elements},
};

static rg_node *build(const rg_layer_ctx *c, rg_node *x) {
    (void)x;
    return rg_layer_unsupported(c, "ssm", "SSM_CONV/SSM_SCAN ops");
}

const rg_layer_kind_desc rg_layer_ssm = {"ssm", build, 2, ssm_state};
