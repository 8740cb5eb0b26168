// TEMPORARY (removed before the graph issue closes): weak placeholders so the
// library links while the kernel families are being written in parallel.
#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda.h"

__attribute__((weak)) rg_status cpu_fill(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_fill: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_add(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_add: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_sub(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_sub: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_mul(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_mul: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_scale(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_scale: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_repeat(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_repeat: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_repeat_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_repeat_back: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_silu(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_silu: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_silu_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_silu_back: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_swiglu(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_swiglu: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_sum(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_sum: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_mean(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_mean: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_sum_rows(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_sum_rows: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_cont(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_cont: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_cpy(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_cpy: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_view_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_view_back: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_get_rows(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_get_rows: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_get_rows_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_get_rows_back: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_rms_norm(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_rms_norm: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_rms_norm_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_rms_norm_back: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_rope(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_rope: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_rope_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_rope_back: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_soft_max(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_soft_max: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_soft_max_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_soft_max_back: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_cross_entropy_loss(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_cross_entropy_loss: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_cross_entropy_loss_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_cross_entropy_loss_back: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_adamw(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_adamw: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_sgd(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_sgd: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_mul_mat(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_mul_mat: not written yet (%s)", n->t.name); }
__attribute__((weak)) rg_status cpu_out_prod(rg_exec_ctx *ctx, rg_node *n, rg_error *err) { (void)ctx; return rg_fail(err, RG_ERR_UNSUPPORTED, "cpu_out_prod: not written yet (%s)", n->t.name); }
__attribute__((weak)) size_t cpu_mul_mat_work(const rg_node *n, int n_threads) { (void)n, (void)n_threads; return 0; }
__attribute__((weak)) size_t cpu_out_prod_work(const rg_node *n, int n_threads) { (void)n, (void)n_threads; return 0; }
#ifdef RG_HAVE_CUDA
__attribute__((weak)) rg_status rg_cuda_ctx_create(rg_cuda_ctx **out, int device, rg_error *err) { *out = NULL; return rg_fail(err, RG_ERR_UNSUPPORTED, "cuda %d: ops not written yet", device); }
__attribute__((weak)) void rg_cuda_ctx_free(rg_cuda_ctx *ctx) { (void)ctx; }
__attribute__((weak)) const rg_cuda_stats *rg_cuda_ctx_stats(const rg_cuda_ctx *ctx) { (void)ctx; static const rg_cuda_stats z = {0}; return &z; }
__attribute__((weak)) bool rg_cuda_op_supported(const struct rg_node *n) { (void)n; return false; }
__attribute__((weak)) const char *rg_cuda_op_types(int op) { (void)op; return NULL; }
__attribute__((weak)) rg_status rg_cuda_op_run(rg_cuda_ctx *ctx, struct rg_node *n, rg_error *err) { (void)ctx, (void)n; return rg_fail(err, RG_ERR_UNSUPPORTED, "not written yet"); }
#endif
