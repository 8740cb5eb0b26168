// ops.c - the op table and each op's backward rule (training.md §5).
#include "graph/ops.h"

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "graph/pack.h"

// Shorthands for backward rules: n is the node, dy its gradient.
#define SRC(i) (n->src[i])
#define NEEDS(i) (n->src[i] && (n->src[i]->flags & RG_NODE_NEEDS_GRAD))
#define ADD_GRAD(i, expr) \
    do { if (NEEDS(i)) { rg_status st_ = rg_grad_add(g, SRC(i), (expr), err); if (st_) return st_; } } while (0)

// The gradient of a broadcast source: summed back to its shape when it was tiled.
static rg_node *unbroadcast(rg_graph *g, rg_node *grad, rg_node *src) {
    return rg_tensor_same_shape(&grad->t, &src->t) ? grad : rg_repeat_back(g, grad, src);
}

static rg_status bw_get_rows(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_get_rows_back(g, n->grad, SRC(1), SRC(0)->t.ne[1]));
    return RG_OK;
}

// MUL_MAT broadcasts a weight slice over r consecutive activation slices
// (slice i2 reads weight slice i2 / r, as grouped-query attention shares a kv
// head among consecutive query heads), so its weight gradient sums each run
// of r slices: viewed as [K*M, r, b2], summed over r.
static rg_node *sum_groups(rg_graph *g, rg_node *grad, rg_node *w) {
    const int64_t *gn = grad->t.ne, *wn = w->t.ne;
    if (gn[2] == wn[2] && gn[3] == wn[3]) return grad;
    if (gn[3] != wn[3]) {
        rg_fail(&g->err, RG_ERR_UNSUPPORTED, "mul_mat backward: broadcasting over dimension 3 (%lld over %lld) is not supported",
                (long long)gn[3], (long long)wn[3]);
        return NULL;
    }
    int64_t r = gn[2] / wn[2];
    rg_node *v = rg_reshape(g, grad, 4, (int64_t[]){gn[0] * gn[1], r, wn[2], gn[3]});
    // repeat_back reads only the shape of `like`: the weight itself, reshaped, when it can be.
    int64_t like_ne[4] = {gn[0] * gn[1], 1, wn[2], gn[3]};
    rg_node *like = rg_tensor_is_contiguous(&w->t) && rg_type_get(w->t.type)->block_size == 1
                        ? rg_reshape(g, w, 4, like_ne)
                        : rg_fill(g, RG_TYPE_F32, 4, like_ne, 0.0f);
    return rg_reshape(g, rg_repeat_back(g, v, like), 4, wn);
}

// dW = out_prod(X, dY) (summed over broadcast slices), dX = out_prod(W, dY^T).
static rg_status bw_mul_mat(rg_graph *g, rg_node *n, rg_error *err) {
    rg_node *dy = n->grad;
    // dW = x dy^T. For a half weight, ip[0] tells a device with a tensor path (CUDA's
    // RETRO_CUDA_HALF_GEMM=tensor) to round both operands to the weight's type, as its
    // forward does; the CPU reads ip[1] instead (a weight's products round to BF16 when the exec
    // asks, rg_exec_opts.bf16_products, and compute in F32 otherwise).
    if (NEEDS(0)) {
        rg_node *dw = rg_out_prod(g, SRC(1), dy);
        const uint32_t wt = SRC(0)->t.type;
        if (dw && (wt == RG_TYPE_F16 || wt == RG_TYPE_BF16)) dw->ip[0] = wt;
        // a weight's gradient: the CPU's BF16 products (bf16_products) round it as the weight's other products
        if (dw && (SRC(0)->view_of ? SRC(0)->view_of : SRC(0))->op == RG_OP_NONE) dw->ip[1] = RG_OUT_PROD_WEIGHT_GRAD;
        ADD_GRAD(0, sum_groups(g, dw, SRC(0)));
    }
    ADD_GRAD(1, rg_out_prod(g, SRC(0), rg_transpose(g, dy)));
    return RG_OK;
}

static rg_status bw_add(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, n->grad);
    ADD_GRAD(1, unbroadcast(g, n->grad, SRC(1)));
    return RG_OK;
}

static rg_status bw_sub(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, n->grad);
    ADD_GRAD(1, rg_scale(g, unbroadcast(g, n->grad, SRC(1)), -1.0f));
    return RG_OK;
}

static rg_status bw_mul(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_mul(g, n->grad, SRC(1)));
    ADD_GRAD(1, unbroadcast(g, rg_mul(g, n->grad, SRC(0)), SRC(1)));
    return RG_OK;
}

static rg_status bw_scale(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_scale(g, n->grad, n->fp[0]));
    return RG_OK;
}

static rg_status bw_repeat(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_repeat_back(g, n->grad, SRC(0)));
    return RG_OK;
}

static rg_status bw_repeat_back(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_repeat(g, n->grad, SRC(0)));
    return RG_OK;
}

static rg_status bw_sum(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_repeat(g, n->grad, SRC(0)));
    return RG_OK;
}

static rg_status bw_mean(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_scale(g, rg_repeat(g, n->grad, SRC(0)), 1.0f / (float)rg_tensor_nelements(&SRC(0)->t)));
    return RG_OK;
}

static rg_status bw_sum_rows(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_repeat(g, n->grad, SRC(0)));
    return RG_OK;
}

static rg_status bw_rms_norm(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_rms_norm_back(g, n->grad, SRC(0), n->fp[0]));
    return RG_OK;
}

static rg_status bw_rope(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_rope_back(g, n->grad, SRC(1), (int)n->ip[0], (int)n->ip[1], n->fp[0], n->fp[1]));
    return RG_OK;
}

static rg_status bw_soft_max(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_soft_max_back(g, n->grad, n, SRC(0), n->fp[0], n->fp[1]));
    return RG_OK;
}

static rg_status bw_silu(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_silu_back(g, n->grad, SRC(0)));
    return RG_OK;
}

// h = silu(gate) * up: d_gate = silu'(gate) * (dh * up), d_up = silu(gate) * dh.
static rg_status bw_swiglu(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_silu_back(g, rg_mul(g, n->grad, SRC(1)), SRC(0)));
    ADD_GRAD(1, rg_mul(g, n->grad, rg_silu(g, SRC(0))));
    return RG_OK;
}

static rg_status bw_gelu(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_gelu_back(g, n->grad, SRC(0)));
    return RG_OK;
}

static rg_status bw_softcap(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_softcap_back(g, n->grad, SRC(0), n->fp[0]));
    return RG_OK;
}

static rg_status bw_reshape(rg_graph *g, rg_node *n, rg_error *err) {
    rg_node *dy = rg_tensor_is_contiguous(&n->grad->t) ? n->grad : rg_cont(g, n->grad);
    ADD_GRAD(0, rg_reshape(g, dy, RG_MAX_DIMS, SRC(0)->t.ne));
    return RG_OK;
}

static rg_status bw_view(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_view_back(g, n->grad, n));
    return RG_OK;
}

static rg_status bw_permute(rg_graph *g, rg_node *n, rg_error *err) {
    int inv[4];
    for (int i = 0; i < 4; i++) inv[n->ip[i]] = i;
    ADD_GRAD(0, rg_permute(g, n->grad, inv[0], inv[1], inv[2], inv[3]));
    return RG_OK;
}

static rg_status bw_transpose(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, rg_transpose(g, n->grad));
    return RG_OK;
}

static rg_status bw_cont(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, n->grad);
    return RG_OK;
}

// A cast's gradient is the identity in F32 (gradients are always F32).
static rg_status bw_cpy(rg_graph *g, rg_node *n, rg_error *err) {
    ADD_GRAD(0, n->grad);
    return RG_OK;
}

static rg_status bw_cross_entropy(rg_graph *g, rg_node *n, rg_error *err) {
    rg_node *d = n->back = rg_cross_entropy_loss_back(g, n->grad, SRC(0), SRC(1), (int32_t)n->ip[0]);
    if (d) d->fp[0] = n->fp[0];
    ADD_GRAD(0, d);
    return RG_OK;
}

// The loss's gradient from LINEAR_CE_BACK, which makes dh and (when w is
// trained) dw in one pass, so the logits are recomputed once for both
// (training.md §7.2). dy [T + 1]: element 0 the loss's, 1 + t lse_t's.
static rg_status bw_linear_ce(rg_graph *g, rg_node *n, rg_error *err) {
    rg_node *b = n->back = rg_linear_ce_back(g, n->grad, n, NEEDS(0));
    ADD_GRAD(0, rg_linear_ce_back_dw(g, b));
    ADD_GRAD(1, b);
    return RG_OK;
}

// SSM_CONV (graph.h): SSM_CONV_BACK makes dx, dstate and dc from the gradient of the
// whole packed output (y's and the final state's) in one pass (training.md §8.1).
static rg_status bw_ssm_conv(rg_graph *g, rg_node *n, rg_error *err) {
    if (!NEEDS(0) && !NEEDS(1) && !NEEDS(2)) return RG_OK;
    rg_node *b = rg_ssm_conv_back(g, n->grad, SRC(0), SRC(1), SRC(2), SRC(3));
    ADD_GRAD(0, rg_ssm_part(g, b, RG_SSM_CONV_BACK_DX));
    ADD_GRAD(1, rg_ssm_part(g, b, RG_SSM_CONV_BACK_DC));
    ADD_GRAD(2, rg_ssm_part(g, b, RG_SSM_CONV_BACK_DSTATE));
    return RG_OK;
}

// SSM_SCAN: SSM_DT remakes the forward's step, decay (with the document resets) and
// slope, and SSM_SCAN_BACK makes dxBC, ddt, dA and dstate from the gradient of the whole
// packed output in one pass (training.md §8.2, §8.4). SSM_DT stands between them because
// a node reads at most RG_MAX_SRC sources.
static rg_status bw_ssm_scan(rg_graph *g, rg_node *n, rg_error *err) {
    if (!NEEDS(0) && !NEEDS(1) && !NEEDS(2) && !NEEDS(3)) return RG_OK;
    rg_node *dta = rg_ssm_dt(g, SRC(1), SRC(2), SRC(4));
    rg_node *b = rg_ssm_scan_back(g, n->grad, SRC(0), dta, SRC(2), SRC(3), n->ip[0], n->ip[1], n->ip[2]);
    ADD_GRAD(0, rg_ssm_part(g, b, RG_SSM_SCAN_BACK_DXBC));
    ADD_GRAD(1, rg_ssm_part(g, b, RG_SSM_SCAN_BACK_DDT));
    ADD_GRAD(2, rg_ssm_part(g, b, RG_SSM_SCAN_BACK_DA));
    ADD_GRAD(3, rg_ssm_part(g, b, RG_SSM_SCAN_BACK_DSTATE));
    return RG_OK;
}

// FLASH_ATTN_EXT: FLASH_ATTN_BACK makes dq, dk and dv from the gradient of the whole packed
// output (o's and lse's) in one node of two passes (training.md §6.3, §6.5). A forward with
// attention sinks has no gradient here: rg_flash_attn_back refuses it, naming the sinks.
static rg_status bw_flash_attn(rg_graph *g, rg_node *n, rg_error *err) {
    if (!NEEDS(0) && !NEEDS(1) && !NEEDS(2)) return RG_OK;
    rg_node *b = rg_flash_attn_back(g, n->grad, n);
    if (!b) return rg_graph_error(g, err);
    ADD_GRAD(0, rg_flash_part(g, b, RG_FLASH_BACK_DQ));
    ADD_GRAD(1, rg_flash_part(g, b, RG_FLASH_BACK_DK));
    ADD_GRAD(2, rg_flash_part(g, b, RG_FLASH_BACK_DV));
    return RG_OK;
}

static bool plain_f32(const rg_node *n) {
    for (int i = 0; i < RG_MAX_SRC; i++)
        if (n->src[i] && n->src[i]->t.type != RG_TYPE_F32 && n->src[i]->t.type != RG_TYPE_I32) return false;
    return true;
}
static bool any_types(const rg_node *n) { (void)n; return true; }
// Ops whose later sources only lend their shape (repeat, repeat_back, view_back).
static bool f32_src0(const rg_node *n) { return n->src[0] && n->src[0]->t.type == RG_TYPE_F32; }
static bool fill_types(const rg_node *n) {
    return n->t.type == RG_TYPE_F32 || n->t.type == RG_TYPE_F16 || n->t.type == RG_TYPE_BF16;
}
static bool attn_decode_types(const rg_node *n) {
    uint32_t t = n->src[1]->t.type;
    return n->src[0]->t.type == RG_TYPE_F32 && (t == RG_TYPE_F32 || t == RG_TYPE_F16) && n->src[2]->t.type == t;
}
// q f32; k and v both f32 or both f16; seg i32; sinks, d and the forward f32.
static bool flash_types(const rg_node *n) {
    const int first = n->op == RG_OP_FLASH_ATTN_BACK;
    const uint32_t kt = n->src[first + 1]->t.type;
    if (n->src[first]->t.type != RG_TYPE_F32 || (kt != RG_TYPE_F32 && kt != RG_TYPE_F16) || n->src[first + 2]->t.type != kt)
        return false;
    for (int i = 0; i < RG_MAX_SRC; i++)
        if (n->src[i] && i != first + 1 && i != first + 2 && n->src[i]->t.type != RG_TYPE_F32 &&
            n->src[i]->t.type != RG_TYPE_I32)
            return false;
    return true;
}
static bool half_or_f32(const rg_node *n) {
    uint32_t t = n->src[0]->t.type;
    return t == RG_TYPE_F32 || t == RG_TYPE_F16 || t == RG_TYPE_BF16;
}

// ADAMW / SGD: an f32 parameter, or an f16/bf16 one (stored back by SR or from an f32
// master); the node has the parameter's type, every other source is f32.
static bool optim_types(const rg_node *n) {
    const uint32_t t = n->src[0]->t.type;
    if (n->t.type != t || (t != RG_TYPE_F32 && t != RG_TYPE_F16 && t != RG_TYPE_BF16)) return false;
    for (int i = 1; i < RG_MAX_SRC; i++)
        if (n->src[i] && n->src[i]->t.type != RG_TYPE_F32) return false;
    return t != RG_TYPE_F32 || !rg_optim_master(n);
}

// SUMSQ: f32 a, f64 prev, f64 out; CLIP_COEF: f64 total, f32 out.
static bool sumsq_types(const rg_node *n) {
    return n->src[0]->t.type == RG_TYPE_F32 && (!n->src[1] || n->src[1]->t.type == RG_TYPE_F64) &&
           n->t.type == RG_TYPE_F64;
}
static bool clip_coef_types(const rg_node *n) { return n->src[0]->t.type == RG_TYPE_F64 && n->t.type == RG_TYPE_F32; }

// Hidden reads and in-place writes (rg_op_def.extra_reads, .writes_src).
// LINEAR_CE_BACK recomputes the logits from the weight and labels of its LINEAR_CE source.
static int reads_linear_ce_back(const rg_node *n, rg_node **out) {
    int k = 0;
    const rg_node *lce = n->src[2];
    if (lce && lce->src[0]) out[k++] = lce->src[0];  // w
    if (lce && lce->src[2]) out[k++] = lce->src[2];  // labels
    return k;
}
// ... and adds into the weight gradient (src[3]) when there is one.
static int writes_linear_ce_back(const rg_node *n, rg_node **out) {
    int k = 0;
    if (n->src[3]) out[k++] = n->src[3];
    return k;
}
// CPY_INTO writes its window of dst (src[1]).
static int writes_cpy_into(const rg_node *n, rg_node **out) { return out[0] = n->src[1], 1; }
// The optimizers update the parameter, their state (AdamW's moments, SGD's momentum buffer)
// and the F32 master copy of a half parameter.
static int writes_optim(const rg_node *n, rg_node **out) {
    int k = 0;
    out[k++] = n->src[0];
    if (n->op == RG_OP_ADAMW) out[k++] = n->src[2], out[k++] = n->src[3];
    else if (n->src[3]) out[k++] = n->src[3];  // SGD's momentum buffer
    if (rg_optim_master(n)) out[k++] = rg_optim_master(n);
    return k;
}

// The table. A row: the name, the CPU kernel, its scratch (NULL: none), which nodes it runs,
// the types the report lists, the backward rule (NULL: no gradient) and whether the output may
// take over src[0]'s bytes; extra fields follow where an op has them. Each group's comment
// names, for its ops: the shape rule (the rg_<op> constructor), the CPU kernel's file
// (cpu_<op>), the CUDA kernel's file (its cell in src/cuda/op_table.cu's list) and the tests
// beyond tests/test_ops.c, whose table holds a row for every op (forward against a double
// reference, gradient against finite differences, CUDA against the CPU: cuda_parity).
#define OP(name_, kernel_, work_, supports_, types_, backward_, inplace_)                                  \
    .name = name_, .cpu = kernel_, .cpu_work = work_, .cpu_supports = supports_, .cpu_types = types_, \
    .backward = backward_, .inplace_ok = inplace_
#define VIEW_OP(name_, backward_) .name = name_, .is_view = true, .cpu_supports = any_types, .backward = backward_
#define F32 "f32"

const rg_op_def rg_op_defs[RG_OP_COUNT] = {
    [RG_OP_NONE] = {.name = "none", .cpu_supports = any_types},
    // Fills, gathers, copies and casts. Shape: graph/build.c. CPU: cpu/ops_elementwise.c (fill), cpu/ops_copy.c,
    // cpu/ops_copy_into.c (cpy_into). CUDA: cuda/ops_elementwise.cu. Tests: test_cpu_ops_basic.c,
    // test_cuda_elementwise.c.
    [RG_OP_FILL] = {OP("fill", cpu_fill, NULL, fill_types, "f32, f16, bf16", NULL, false)},
    [RG_OP_GET_ROWS] = {OP("get_rows", cpu_get_rows, NULL, any_types, "any weight type", bw_get_rows, false)},
    [RG_OP_GET_ROWS_BACK] = {OP("get_rows_back", cpu_get_rows_back, NULL, plain_f32, F32, NULL, false)},
    [RG_OP_VIEW_BACK] = {OP("view_back", cpu_view_back, NULL, f32_src0, F32, NULL, false)},
    [RG_OP_CONT] = {OP("cont", cpu_cont, NULL, any_types, "any type", bw_cont, false)},
    [RG_OP_CPY] = {OP("cpy", cpu_cpy, NULL, half_or_f32, "f32, f16, bf16", bw_cpy, false)},
    [RG_OP_CPY_INTO] = {OP("cpy_into", cpu_cpy_into, NULL, any_types, "f32 into f32, f16, bf16", NULL, false),
                        .writes_src = writes_cpy_into},
    // Views: no kernel, the bytes of src[0]. Shape: graph/build.c.
    [RG_OP_RESHAPE] = {VIEW_OP("reshape", bw_reshape)},
    [RG_OP_VIEW] = {VIEW_OP("view", bw_view)},
    [RG_OP_PERMUTE] = {VIEW_OP("permute", bw_permute)},
    [RG_OP_TRANSPOSE] = {VIEW_OP("transpose", bw_transpose)},
    // Products. Shape: graph/build.c. CPU: cpu/ops_matmul.c (over cpu/gemm*.c, cpu/mul_mat_rows.c; MUL_MAT's
    // fusion hook groups products of the same activations). CUDA: cuda/ops.cu (mul_mat), cuda/ops_train.cu
    // (out_prod), cuda/gemm_half.cu. Tests: test_matmul.c, test_cuda.c, test_cuda_train.c.
    [RG_OP_MUL_MAT] = {OP("mul_mat", cpu_mul_mat, cpu_mul_mat_work, any_types, "any weight type", bw_mul_mat, false),
                       .cpu_group = cpu_mul_mat_group, .cpu_run_group = cpu_mul_mat_many},
    [RG_OP_OUT_PROD] = {OP("out_prod", cpu_out_prod, cpu_out_prod_work, any_types, "any weight type", NULL, false)},
    // Elementwise arithmetic, broadcasts and reductions. Shape: graph/build.c. CPU: cpu/ops_elementwise.c,
    // cpu/ops_reduce.c (sum, mean, sum_rows). CUDA: cuda/ops.cu (add), cuda/ops_elementwise.cu. Tests:
    // test_cpu_ops_basic.c, test_cuda_elementwise.c.
    [RG_OP_ADD] = {OP("add", cpu_add, NULL, plain_f32, F32, bw_add, true)},
    [RG_OP_SUB] = {OP("sub", cpu_sub, NULL, plain_f32, F32, bw_sub, true)},
    [RG_OP_MUL] = {OP("mul", cpu_mul, NULL, plain_f32, F32, bw_mul, true)},
    [RG_OP_SCALE] = {OP("scale", cpu_scale, NULL, plain_f32, F32, bw_scale, true)},
    [RG_OP_REPEAT] = {OP("repeat", cpu_repeat, NULL, f32_src0, F32, bw_repeat, false)},
    [RG_OP_REPEAT_BACK] = {OP("repeat_back", cpu_repeat_back, NULL, f32_src0, F32, bw_repeat_back, false)},
    [RG_OP_SUM] = {OP("sum", cpu_sum, NULL, plain_f32, F32, bw_sum, false)},
    [RG_OP_MEAN] = {OP("mean", cpu_mean, NULL, plain_f32, F32, bw_mean, false)},
    [RG_OP_SUM_ROWS] = {OP("sum_rows", cpu_sum_rows, NULL, plain_f32, F32, bw_sum_rows, false)},
    // Activations. Shape: graph/build.c. CPU: cpu/ops_elementwise.c (silu, swiglu), cpu/ops_gelu_softcap.c. CUDA:
    // cuda/ops_elementwise.cu (silu, swiglu), cuda/ops_gelu_softcap.cu. Tests: test_cpu_ops_nn.c,
    // test_cuda_elementwise.c.
    [RG_OP_SILU] = {OP("silu", cpu_silu, NULL, plain_f32, F32, bw_silu, true)},
    [RG_OP_SILU_BACK] = {OP("silu_back", cpu_silu_back, NULL, plain_f32, F32, NULL, false)},
    [RG_OP_SWIGLU] = {OP("swiglu", cpu_swiglu, NULL, plain_f32, F32, bw_swiglu, false)},
    [RG_OP_GELU] = {OP("gelu", cpu_gelu, NULL, plain_f32, F32, bw_gelu, false)},
    [RG_OP_GELU_BACK] = {OP("gelu_back", cpu_gelu_back, NULL, plain_f32, F32, NULL, false)},
    [RG_OP_SOFTCAP] = {OP("softcap", cpu_softcap, NULL, plain_f32, F32, bw_softcap, false)},
    [RG_OP_SOFTCAP_BACK] = {OP("softcap_back", cpu_softcap_back, NULL, plain_f32, F32, NULL, false)},
    // Norms, rotary embeddings, softmax and the decode step's attention. Shape: graph/build.c. CPU:
    // cpu/ops_norm_rope.c, cpu/ops_softmax_loss.c (soft_max), cpu/ops_attn_decode.c. CUDA: cuda/ops_norm.cu
    // (soft_max: cuda/ops.cu). Tests: test_cpu_ops_nn.c, test_cuda_norm.c.
    [RG_OP_RMS_NORM] = {OP("rms_norm", cpu_rms_norm, NULL, plain_f32, F32, bw_rms_norm, true)},
    [RG_OP_RMS_NORM_BACK] = {OP("rms_norm_back", cpu_rms_norm_back, NULL, plain_f32, F32, NULL, false)},
    [RG_OP_ROPE] = {OP("rope", cpu_rope, NULL, plain_f32, F32, bw_rope, true)},
    [RG_OP_ROPE_BACK] = {OP("rope_back", cpu_rope_back, NULL, plain_f32, F32, NULL, false)},
    [RG_OP_SOFT_MAX] = {OP("soft_max", cpu_soft_max, NULL, plain_f32, F32, bw_soft_max, true)},
    [RG_OP_SOFT_MAX_BACK] = {OP("soft_max_back", cpu_soft_max_back, NULL, plain_f32, F32, NULL, false)},
    [RG_OP_ATTN_DECODE] = {OP("attn_decode", cpu_attn_decode, cpu_attn_decode_work, attn_decode_types,
                              "f32 (cache f32, f16)", NULL, false)},
    // Losses. Shape: graph/build_loss_optim.c. CPU: cpu/ops_softmax_loss.c, cpu/ops_linear_ce.c. CUDA:
    // cuda/ops_norm.cu (cross_entropy_loss), cuda/ops_train.cu (linear_ce). Tests: test_cpu_ops_nn.c,
    // test_cuda_norm.c, test_cuda_train.c.
    [RG_OP_CROSS_ENTROPY_LOSS] = {OP("cross_entropy_loss", cpu_cross_entropy_loss, NULL, plain_f32, F32,
                                     bw_cross_entropy, false)},
    [RG_OP_CROSS_ENTROPY_LOSS_BACK] = {OP("cross_entropy_loss_back", cpu_cross_entropy_loss_back, NULL, plain_f32, F32,
                                          NULL, false)},
    [RG_OP_LINEAR_CE] = {OP("linear_ce", cpu_linear_ce, cpu_linear_ce_work, any_types, "any weight type", bw_linear_ce,
                            false)},
    [RG_OP_LINEAR_CE_BACK] = {OP("linear_ce_back", cpu_linear_ce_back, cpu_linear_ce_back_work, any_types,
                                 "any weight type", NULL, false),
                              .extra_reads = reads_linear_ce_back, .writes_src = writes_linear_ce_back},
    // Optimizer steps, in place. Shape: graph/build_loss_optim.c. CPU: cpu/ops_optim.c. CUDA: cuda/ops_optim.cu.
    // Tests: test_train_optim.c, test_cuda_train.c.
    [RG_OP_ADAMW] = {OP("adamw", cpu_adamw, NULL, optim_types, "f32, f16, bf16", NULL, false),
                     .writes_src = writes_optim},
    [RG_OP_SGD] = {OP("sgd", cpu_sgd, NULL, optim_types, "f32, f16, bf16", NULL, false), .writes_src = writes_optim},
    // State-space layers (training.md §8). Shape: graph/build_ssm.c (packed outputs: graph/pack.c). CPU:
    // cpu/ops_ssm.c (conv, dt), cpu/ops_ssm_scan.c. CUDA: cuda/ops_ssm.cu. Tests: test_ops.c's rows
    // (tests/ops_ssm_rows.h), test_cuda_host_limits.c.
    [RG_OP_SSM_CONV] = {OP("ssm_conv", cpu_ssm_conv, NULL, plain_f32, F32, bw_ssm_conv, false)},
    [RG_OP_SSM_CONV_BACK] = {OP("ssm_conv_back", cpu_ssm_conv_back, cpu_ssm_conv_back_work, plain_f32, F32, NULL,
                                false)},
    [RG_OP_SSM_DT] = {OP("ssm_dt", cpu_ssm_dt, NULL, plain_f32, F32, NULL, false)},
    [RG_OP_SSM_SCAN] = {OP("ssm_scan", cpu_ssm_scan, cpu_ssm_scan_work, plain_f32, F32, bw_ssm_scan, false)},
    [RG_OP_SSM_SCAN_BACK] = {OP("ssm_scan_back", cpu_ssm_scan_back, cpu_ssm_scan_back_work, plain_f32, F32, NULL,
                                false)},
    [RG_OP_CONV_RS_GATHER] = {OP("conv_rs_gather", cpu_conv_rs_gather, NULL, plain_f32, F32, NULL, false)},
    // Flash attention (training.md §6). Shape: graph/build_flash.c. CPU: cpu/ops_flash.c. CUDA: cuda/ops_flash.cu
    // (head_dim <= 512; wider nodes run on the CPU). Tests: test_ops.c's rows (tests/ops_flash_rows.h),
    // test_train_flash.c.
    [RG_OP_FLASH_ATTN_EXT] = {OP("flash_attn_ext", cpu_flash_attn_ext, cpu_flash_attn_ext_work, flash_types,
                                 "f32 (k, v f32, f16)", bw_flash_attn, false)},
    [RG_OP_FLASH_ATTN_BACK] = {OP("flash_attn_back", cpu_flash_attn_back, cpu_flash_attn_back_work, flash_types,
                                  "f32 (k, v f32, f16)", NULL, false)},
    // The global norm and its clip (training.md §1.4). Shape: graph/build_loss_optim.c. CPU: cpu/ops_optim.c.
    // CUDA: cuda/ops_optim.cu (the CPU's bits). Tests: test_ops.c (sumsq, clip_coef), test_cuda_train.c
    // (test_cuda_global_norm_bits).
    [RG_OP_SUMSQ] = {OP("sumsq", cpu_sumsq, cpu_sumsq_work, sumsq_types, "f32 into f64", NULL, false)},
    [RG_OP_CLIP_COEF] = {OP("clip_coef", cpu_clip_coef, NULL, clip_coef_types, "f64 into f32", NULL, false)},
};
