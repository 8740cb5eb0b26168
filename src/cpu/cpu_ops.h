// cpu_ops.h - the CPU kernels of the op table, one per op, named cpu_<op>.
// Each file under src/cpu/ holds one family; ops.c wires them into the table.
#ifndef RG_CPU_OPS_H
#define RG_CPU_OPS_H

#include "graph/ops.h"

// ops_elementwise.c: broadcasting binary ops, scale, fill, repeat, activations
rg_status cpu_fill(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_add(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_sub(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_mul(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_scale(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_repeat(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_repeat_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_silu(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_silu_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_swiglu(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// ops_gelu_softcap.c: GELU (tanh approximation), the softcap and their backward (CPU only)
rg_status cpu_gelu(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_gelu_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_softcap(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_softcap_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// ops_reduce.c
rg_status cpu_sum(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_mean(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_sum_rows(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// ops_copy.c: copies, conversions, row gathers and their backward
rg_status cpu_cont(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_cpy(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_view_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_get_rows(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_get_rows_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// ops_copy_into.c: writes into a window of a leaf (KV cache)
rg_status cpu_cpy_into(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// ops_norm_rope.c
rg_status cpu_rms_norm(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_rms_norm_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_rope(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_rope_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// ops_softmax_loss.c
rg_status cpu_soft_max(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_soft_max_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_cross_entropy_loss(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_cross_entropy_loss_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// One row of V logits: its max and sum_v exp(z[v] - max) in 8 double partial
// sums (v mod 8, a fixed tree); e, when not NULL, gets the exponentials (it may
// be z). The cross-entropy ops and LINEAR_CE's chunks use it.
void rg_ce_row_max_sumexp(const float *z, float *e, int64_t V, bool avx2, float *mx_out, double *sum_out);
// ops_optim.c
rg_status cpu_adamw(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_sgd(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// SUMSQ and CLIP_COEF (graph.h): the global norm's square by blocks, and the clip from it.
#define RG_SUMSQ_BLOCK 4096  // training.md §1.4's fixed blocks
rg_status cpu_sumsq(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
size_t cpu_sumsq_work(const rg_node *n, int n_threads);
rg_status cpu_clip_coef(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// min(1, max_norm / (norm + 1e-6)) in double, cast once; 1 when max_norm <= 0 (training.md §1.4).
float rg_clip_coef_f64(double norm, double max_norm);
// The same updates over one row of n elements, for callers outside a graph (the
// trainer's host step): out may alias theta; fp as in the ADAMW / SGD nodes.
void rg_adamw_row(float *out, const float *theta, const float *grad, float *m, float *v, int64_t n, const float fp[8]);
void rg_sgd_row(float *out, const float *theta, const float *grad, int64_t n, const float fp[8]);
// SGD with a momentum buffer b (updated in place): fp as rg_sgd_row's, fp[3] mu, fp[4] first.
void rg_sgd_momentum_row(float *out, const float *theta, const float *grad, float *b, int64_t n, const float fp[8]);
// The f32 theta of elements [i0, i0 + n) of a parameter stored as `type` with
// an optional f32 master: the master itself, the f32 weight itself, or the
// exact upcast of the half weight into buf[n]. Updated in place, it is stored
// back by rg_optim_store.
float *rg_optim_theta(uint32_t type, const void *w, float *master, int64_t i0, int64_t n, float *buf);
// Stores the updated theta[n] into elements [i0, i0 + n) of w: an f32 weight
// takes the values (when theta is not already its bytes); a half weight their
// RNE when theta is a master (from_master), else their stochastic rounding
// with the words keyed by (seed, step, tensor_id, element) (train/sround.h).
void rg_optim_store(uint32_t type, void *w, int64_t i0, const float *theta, int64_t n, bool from_master,
                    uint64_t seed, uint32_t step, uint32_t tensor_id);
// Σ x[i]^2 in double: 16 lanes (i mod 16) summed in index order, then a fixed
// tree; the same bits with or without AVX2 (training.md §1.4's block sums).
double rg_sumsq_f64(const float *x, int64_t n);
// ops_matmul.c: MUL_MAT and OUT_PROD for every weight type (gemm.c underneath)
rg_status cpu_mul_mat(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// A training product whose B is `weight`'s bytes (MUL_MAT's weight, OUT_PROD's a, a LINEAR_CE head):
// rg_gemm_run on the F32 SGEMM, or on RG_SGEMM_BF16 with ctx->bf16_products, through the exec's
// tiles cache (cpu/tiles_cache.h) when the weight is frozen. The same bits either way.
// Whether prompts (rg_exec_ctx.int8_activations) multiply weights of this type on the BF16 tiles
// here (BF16 and F16 on AMX or the emulated tiles): what a session's tiles cache would serve.
bool cpu_prompt_bf16_tiles(uint32_t weight_type);
struct rg_gemm_batch;
rg_status cpu_run_products(rg_exec_ctx *ctx, const rg_node *weight, const struct rg_gemm_batch *bt, void *work,
                           size_t work_size, rg_error *err);
size_t cpu_mul_mat_work(const rg_node *n, int n_threads);
// n MUL_MAT nodes in a row that read the same src[1] and not each other: one
// parallel section when they all take the dot products (generation), else
// cpu_mul_mat on each in order. The same results either way.
rg_status cpu_mul_mat_many(rg_exec_ctx *ctx, rg_node *const *nodes, int n, rg_error *err);
// MUL_MAT's fusion hook (ops.h's rg_group_fn): the products after node i that
// cpu_mul_mat_many may run with it (the same activations, none reading another).
int cpu_mul_mat_group(rg_graph *g, int i, int to, rg_node **grp, int *last);
rg_status cpu_out_prod(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
size_t cpu_out_prod_work(const rg_node *n, int n_threads);
// ops_linear_ce.c: LINEAR_CE and its backward (the cross-entropy of w^T h by vocabulary chunks)
rg_status cpu_linear_ce(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
size_t cpu_linear_ce_work(const rg_node *n, int n_threads);
rg_status cpu_linear_ce_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
size_t cpu_linear_ce_back_work(const rg_node *n, int n_threads);
// The vocabulary chunk of a LINEAR_CE / LINEAR_CE_BACK node over V entries and T
// tokens: ip[1], or the automatic one ([T, chunk] f32 of about 4 MiB, at most V / 8).
int64_t rg_linear_ce_chunk(const rg_node *n, int64_t V, int64_t T);
// ops_attn_decode.c: ATTN_DECODE, attention of new queries against a KV cache (generation)
rg_status cpu_attn_decode(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
size_t cpu_attn_decode_work(const rg_node *n, int n_threads);
// ops_ssm.c: SSM_CONV(_BACK), SSM_DT; ops_ssm_scan.c: SSM_SCAN(_BACK) (graph.h, the state-space family)
rg_status cpu_ssm_conv(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_ssm_conv_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
size_t cpu_ssm_conv_back_work(const rg_node *n, int n_threads);
rg_status cpu_ssm_dt(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
rg_status cpu_ssm_scan(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
size_t cpu_ssm_scan_work(const rg_node *n, int n_threads);
rg_status cpu_ssm_scan_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
size_t cpu_ssm_scan_back_work(const rg_node *n, int n_threads);
// ops_ssm.c: CONV_RS_GATHER (the conv window after a chunk's first pos tokens, graph.h)
rg_status cpu_conv_rs_gather(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
// ops_flash.c: FLASH_ATTN_EXT and FLASH_ATTN_BACK (graph.h, flash attention; training.md §6)
rg_status cpu_flash_attn_ext(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
size_t cpu_flash_attn_ext_work(const rg_node *n, int n_threads);
rg_status cpu_flash_attn_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err);
size_t cpu_flash_attn_back_work(const rg_node *n, int n_threads);

#endif
