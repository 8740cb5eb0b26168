// graph.h - the op graph: nodes made by op constructors, automatic
// differentiation, a memory plan, and execution on backends.
//
// A node is a tensor (shape, type, strides; its bytes are bound by the plan)
// plus the op that computes it from its sources. Nodes are created in an
// order where every source exists before its users, so creation order is a
// topological order; backward appends gradient nodes after the forward ones.
//
// Constructors check shapes and types and, on a mismatch, return NULL and
// record one sticky error on the graph naming the op and both shapes; a NULL
// source makes any constructor return NULL, so a whole model can be built and
// the first error read once with rg_graph_error().
#ifndef RG_GRAPH_H
#define RG_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/threadpool.h"
#include "retrograd.h"
#include "tensor/tensor.h"

#define RG_MAX_SRC 6  // FLASH_ATTN_BACK reads six tensors (d, q, k, v, the forward, seg)

// The op table's enumeration. The order is the order of rg_op_defs[] (ops.c).
typedef enum rg_op {
    RG_OP_NONE = 0,          // a leaf: input, parameter or constant with bytes bound from outside
    RG_OP_FILL,              // [any] every element = fp[0]
    RG_OP_GET_ROWS,          // (a [n, rows] any type, ids I32 [k]) -> [n, k] f32
    RG_OP_GET_ROWS_BACK,     // (dy [n, k], ids I32 [k]) -> [n, ip[0] = rows] f32, scatter-add in increasing k
    RG_OP_MUL_MAT,           // (w [K, M, b2, b3] any type, x [K, N, c2, c3] f32) -> [M, N, c2, c3] f32;
                             // ip[0] RG_MUL_MAT_COLUMNS: every column of the output has exactly the bits of a
                             // MUL_MAT of that column alone (a session's exact batches, infer/session.c)
    RG_OP_OUT_PROD,          // (a [M, K, b2, b3] any type, b [N, K, c2, c3] f32) -> [M, N, c2, c3]: out[i,j] = sum_k a[i,k] b[j,k];
                             // ip[0] F16/BF16: the operands' type on a device's tensor path (cuda.h);
                             // ip[1] RG_OUT_PROD_WEIGHT_GRAD: a leaf weight's dW (MUL_MAT's backward), whose
                             // operands the CPU's BF16 products round (rg_exec_opts.bf16_products) as they do
                             // the weight's other products; two activations' products keep F32 there
    RG_OP_ADD,               // (a, b broadcast into a) -> like a, f32
    RG_OP_SUB,
    RG_OP_MUL,
    RG_OP_SCALE,             // (a) -> a * fp[0]
    RG_OP_REPEAT,            // (a, like) -> a tiled to like's shape (like.ne[i] % a.ne[i] == 0)
    RG_OP_REPEAT_BACK,       // (a, like) -> sum of a's tiles into like's shape (the backward of a broadcast)
    RG_OP_SUM,               // (a) -> [1]
    RG_OP_MEAN,              // (a) -> [1]
    RG_OP_SUM_ROWS,          // (a [n, ...]) -> [1, ...]
    RG_OP_RMS_NORM,          // (x [n, ...]) -> x / sqrt(mean(x^2) + fp[0])
    RG_OP_RMS_NORM_BACK,     // (dy, x) -> dx, eps fp[0]
    RG_OP_ROPE,              // (x [head_dim, n_head, T], pos I32 [T]) ip: n_rot, mode (0 normal, 2 neox); fp: freq_base, freq_scale
    RG_OP_ROPE_BACK,         // (dy, pos) -> dx, the same rotation by -theta
    RG_OP_SOFT_MAX,          // (a [n_kv, T, H], mask [n_kv, T] f32 or NULL) ip[0] causal, ip[1] sliding window (0 = none,
                             // with causal: key j is masked when (i + n_kv - T) - j >= window); fp: scale, softcap (0 = none)
    RG_OP_SOFT_MAX_BACK,     // (dy, y, a) -> da; a is used only with a softcap
    RG_OP_SILU,              // (a) -> a * sigmoid(a)
    RG_OP_SILU_BACK,         // (dy, a) -> dy * silu'(a)
    RG_OP_SWIGLU,            // (gate, up) -> silu(gate) * up
    RG_OP_GELU,              // (a) -> gelu(a), the tanh approximation: 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))
    RG_OP_GELU_BACK,         // (dy, a) -> dy * gelu'(a)
    RG_OP_SOFTCAP,           // (a) -> fp[0] * tanh(a / fp[0]), fp[0] > 0 (gemma2's final-logit softcap)
    RG_OP_SOFTCAP_BACK,      // (dy, a) -> dy * (1 - tanh^2(a / fp[0]))
    RG_OP_RESHAPE,           // views: no kernel, bytes shared with src[0]
    RG_OP_VIEW,              // ip[0..3] = nb[0..3] of the view (bytes), ip[4] = offset from the source (bytes)
    RG_OP_PERMUTE,           // ip[0..3] = axes
    RG_OP_TRANSPOSE,
    RG_OP_VIEW_BACK,         // (dy, like) -> zeros like `like` with dy written into the view window (ip as VIEW)
    RG_OP_CONT,              // (a) -> contiguous copy, same type
    RG_OP_CPY,               // (a) -> a's values stored in the node's type (F32 <-> F16/BF16, RNE), a's shape
    RG_OP_CROSS_ENTROPY_LOSS,      // (logits [V, T] f32, labels I32 [T]) -> [1]; ip[0] ignore index; fp[0] 1/N_valid or 0 (= count here)
    RG_OP_CROSS_ENTROPY_LOSS_BACK, // (dL [1], logits, labels) -> dlogits [V, T]
    RG_OP_ADAMW,             // (param, grad, m, v, master or NULL, clip or NULL) -> param updated in place; fp: lr/bc1,
                             // 1-beta1, beta2, 1-beta2, eps, decay, sqrt(bc2), clip. param f32, or f16/bf16 stored back
                             // from the f32 update: with a master (src[4], f32) by RNE of the updated master, without by
                             // stochastic rounding keyed by ip[0] seed, ip[1] step, ip[2] tensor id (training.md §2, §3).
                             // With src[5] (F32 [1], a CLIP_COEF) the clip is read from there instead of fp[7]
    RG_OP_SGD,               // (param, grad, master or NULL, buf or NULL, clip or NULL) -> param updated in place; fp: lr,
                             // weight decay, clip, momentum mu, first (1: the first step, buf = g); with buf (src[3],
                             // f32, updated in place) the heavy-ball step of torch.optim.SGD (dampening 0, no nesterov);
                             // param types, master (src[2]) and ip as ADAMW; src[4] the clip as ADAMW's src[5]
    RG_OP_CPY_INTO,          // (a, dst) -> a's values written into dst's bytes (dst: a view of a leaf, any strides,
                             // f32/f16/bf16); the node is that window (a KV-cache write). Runs in creation order.
                             // ip[0] = 1 (rg_acc_into): accumulate, dst += a, both f32 (a gradient accumulator)
    RG_OP_LINEAR_CE,         // (w [d, V] any type, h [d, T] f32, labels I32 [T]; w, labels leaves) -> [T + 1] f32: the CE of
                             // logits w^T h without materializing them (training.md §7). [0] the loss as CROSS_ENTROPY_LOSS
                             // (ip[0] ignore index; fp[0] 1/N_valid or 0 = count here), [1 + t] lse_t (0 for ignored t);
                             // ip[1] vocabulary chunk (0: auto, [T, chunk] f32 of about 4 MiB, at most V / 8)
    RG_OP_LINEAR_CE_BACK,    // (dy [T + 1], h, the LINEAR_CE node, dw or NULL) -> dh [d, T] f32; w and labels are read
                             // through the LINEAR_CE node. With src[3] (a FILL [d, V] made just before, the weight's
                             // gradient) the kernel also writes dw into src[3]'s bytes, as CPY_INTO writes a window:
                             // the logits are recomputed once for both. fp[0], ip[0..1] as LINEAR_CE
    RG_OP_ATTN_DECODE,       // (q [Dh, H, T] f32, k [Dh, n_kv, Hkv], vt [n_kv, Dh, Hkv]; k, vt f32 or f16 with packed rows,
                             // views of a KV cache) -> [Dh, H, T] f32: softmax(z_j) weighted sum of v_j per head,
                             // z_j = fp[0] * q.k_j, capped as fp[1] * tanh(z_j / fp[1]) when fp[1] > 0 (SOFT_MAX's
                             // softcap), causal (query t at p = n_kv - T + t sees keys j <= p), within ip[0] > 0 keys
                             // (a sliding window: p - j < ip[0]), head h reads kv head h / (H / Hkv).
                             // Inference only (no backward): the KV-cached path of forward.c
    // The state-space family (Mamba-2's xBC conv and selective scan, LFM2's short conv); packed
    // outputs (graph/pack.h) and their views: rg_ssm_* below, with the shapes and the rules.
    RG_OP_SSM_CONV,          // (x [C, T, S], c [K, C], state [C, K-1, S] or NULL, seg I32 [T] or [T, S] or NULL)
                             // -> packed [y [C, T, S], final state [C, K-1, S]]
    RG_OP_SSM_CONV_BACK,     // (d like SSM_CONV's output, x, c, state or NULL, seg or NULL) -> packed [dx, dstate, dc]
    RG_OP_SSM_DT,            // (dt [H, T, S], A [1, H] or [H], seg or NULL) -> [H, T, S, 3]: step, decay, slope
    RG_OP_SSM_SCAN,          // (xBC [P*H + 2*G*N, T, S], dt [H, T, S], A, state [N, P, H, S] or NULL, seg or NULL)
                             // ip: head_dim P, d_state N, n_group G -> packed [y [P, H, T, S], final state [N, P, H, S]]
    RG_OP_SSM_SCAN_BACK,     // (d like SSM_SCAN's output, xBC, SSM_DT's output, A, state or NULL) ip as SSM_SCAN
                             // -> packed [dxBC, ddt [H, T, S], dA (A's shape), dstate [N, P, H, S]]
    RG_OP_CONV_RS_GATHER,    // (x [C, n, S] f32 packed rows, prev [C, K-1, S] f32 contiguous) ip[0] pos (0..n)
                             // -> [C, K-1, S]: the conv window after the first pos tokens of x (rg_conv_rs_gather).
                             // Inference only (no backward): exact rewind of a conv state (infer/session_snap.c)
    // Flash attention (training.md §6): softmax(softcap(scale q.k) + mask) v without the
    // [Tk, T] scores, one packed output (graph/pack.h); rg_flash_* below has the rules.
    // CPU kernels in cpu/ops_flash.c, CUDA ones in cuda/ops_flash.cu (head_dim <= 512).
    RG_OP_FLASH_ATTN_EXT,    // (q [Dh, T, H, S] f32, k [Dh, Tk, Hkv, S], v [Dh, Tk, Hkv, S] f32 or f16, seg I32 [Tk] or
                             // [Tk, S] or NULL, sinks [H] f32 or NULL) ip: causal, window; fp: scale, softcap
                             // -> packed [o [Dh, H, T, S], lse [T, H, S]]
    RG_OP_FLASH_ATTN_BACK,   // (d like FLASH_ATTN_EXT's output, q, k, v, the FLASH_ATTN_EXT node, seg or NULL) ip, fp as
                             // the forward's -> packed [dq [Dh, T, H, S], dk [Dh, Tk, Hkv, S], dv [Dh, Tk, Hkv, S]]
    // The global gradient norm and its clip as graph nodes (training.md §1.4; CPU kernels in cpu/ops_optim.c,
    // CUDA ones in cuda/ops_optim.cu, the same bits): the optimizer graph chains SUMSQ over the trainable
    // tensors' gradients in order, then CLIP_COEF feeds every ADAMW / SGD node its clip.
    RG_OP_SUMSQ,             // (a f32 contiguous, prev F64 [1] or NULL) -> F64 [1]: prev (0 when NULL) plus the sums of
                             // squares of a's blocks of 4096 elements, added in block order; a block's sum is
                             // rg_sumsq_f64's: 16 double lanes (element i into lane i % 16, in increasing i, products
                             // and sums in double), folded 8, 4, 2, 1. No gradient
    RG_OP_CLIP_COEF,         // (total F64 [1], the sum of squares) -> F32 [1] = rg_clip_coef(sqrt(total), max_norm):
                             // min(1, max_norm / (norm + 1e-6)) in double, cast once; 1 when max_norm <= 0. ip[0] holds
                             // max_norm's double bits (a float would round the configured value). No gradient
    RG_OP_COUNT,
} rg_op;

enum { RG_OUT_PROD_WEIGHT_GRAD = 1 };  // OUT_PROD's ip[1]: the product is a leaf weight's gradient
enum { RG_MUL_MAT_COLUMNS = 1 };       // MUL_MAT's ip[0]: each column computed as if alone (above)

enum {
    RG_NODE_PARAM = 1u << 0,   // trainable: backward makes a gradient for it
    RG_NODE_INPUT = 1u << 1,   // bytes bound by the caller before each run
    RG_NODE_OUTPUT = 1u << 2,  // read after the run: kept alive to the end, never overwritten
    RG_NODE_LOSS = 1u << 3,    // the scalar the backward starts from
    RG_NODE_GRAD = 1u << 4,    // a gradient of a parameter (an output of the backward)
    RG_NODE_NEEDS_GRAD = 1u << 5,  // set during construction: depends on a parameter
    RG_NODE_EXTERNAL = 1u << 6,    // a leaf whose bytes the caller owns (given at creation or by rg_node_bind)
    // A leaf of a model's weights that nothing trains (rg_model_leaf): its host bytes do not change
    // while the graph and anything made for it live, so the CPU may keep derived copies of them
    // (cpu/tiles_cache.h's packed BF16 tiles). Never set with RG_NODE_PARAM (rg_node_frozen checks).
    RG_NODE_FROZEN = 1u << 7,
};

typedef struct rg_node {
    rg_tensor t;               // type, ne, nb; t.data bound by the plan (or by the caller for leaves)
    rg_op op;
    struct rg_node *src[RG_MAX_SRC];
    int64_t ip[8];             // integer parameters (meaning per op, see the enum)
    float fp[8];               // float parameters
    uint32_t flags;
    struct rg_node *grad;      // the gradient node, after rg_graph_backward
    struct rg_node *back;      // a loss's backward node, after rg_graph_backward (CROSS_ENTROPY_LOSS's
                               // CROSS_ENTROPY_LOSS_BACK, LINEAR_CE's LINEAR_CE_BACK: whose fp[0] is its 1/N)
    struct rg_node *view_of;   // views: the node that owns the bytes (never itself a view)
    int id;                    // index in the graph
    // Filled by the plan:
    int first_use, last_use;   // node indices where the bytes are born and last read
    int64_t offset;            // byte offset in the plan's buffer, -1 when bound from outside
    struct rg_node *inplace_of;  // the source whose bytes this node reuses, if any
    int backend;               // RG_BACKEND_* chosen by the scheduler
} rg_node;

typedef struct rg_graph {
    rg_arena arena;            // nodes and their parameters
    rg_node **nodes;
    int n_nodes, cap_nodes;
    int n_forward;             // nodes before the backward was appended
    rg_error err;              // the first construction error (status RG_OK while none)
} rg_graph;

rg_graph *rg_graph_new(void);
void rg_graph_free(rg_graph *g);
// The first construction error, or RG_OK.
rg_status rg_graph_error(const rg_graph *g, rg_error *err);

// Leaves. data may be NULL and bound later with rg_node_bind (inputs), or
// point at bytes that outlive the graph (weights in a mapped GGUF).
rg_node *rg_leaf(rg_graph *g, const char *name, uint32_t type, int n_dims, const int64_t *ne, void *data);
rg_node *rg_param(rg_graph *g, const char *name, uint32_t type, int n_dims, const int64_t *ne, void *data);
void rg_node_bind(rg_node *n, void *data);
// Whether n's bytes (its own, or a view's owner's) are a frozen weight's (RG_NODE_FROZEN, not a parameter).
bool rg_node_frozen(const rg_node *n);
void rg_node_set_name(rg_node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A MUL_MAT marked RG_MUL_MAT_COLUMNS run a column at a time: *yc a copy of n narrowed to column j of its
// output, unmarked, reading *xc, a copy of n's x narrowed to column j (the same strides and bytes).
void rg_mul_mat_column(const rg_node *n, int64_t j, rg_node *xc, rg_node *yc);

// Constructors (see the op enum for shapes).
rg_node *rg_fill(rg_graph *g, uint32_t type, int n_dims, const int64_t *ne, float value);
rg_node *rg_get_rows(rg_graph *g, rg_node *a, rg_node *ids);
rg_node *rg_get_rows_back(rg_graph *g, rg_node *dy, rg_node *ids, int64_t n_rows);
rg_node *rg_mul_mat(rg_graph *g, rg_node *w, rg_node *x);
rg_node *rg_out_prod(rg_graph *g, rg_node *a, rg_node *b);
rg_node *rg_add(rg_graph *g, rg_node *a, rg_node *b);
rg_node *rg_sub(rg_graph *g, rg_node *a, rg_node *b);
rg_node *rg_mul(rg_graph *g, rg_node *a, rg_node *b);
rg_node *rg_scale(rg_graph *g, rg_node *a, float s);
rg_node *rg_repeat(rg_graph *g, rg_node *a, rg_node *like);
rg_node *rg_repeat_back(rg_graph *g, rg_node *a, rg_node *like);
rg_node *rg_sum(rg_graph *g, rg_node *a);
rg_node *rg_mean(rg_graph *g, rg_node *a);
rg_node *rg_sum_rows(rg_graph *g, rg_node *a);
rg_node *rg_rms_norm(rg_graph *g, rg_node *x, float eps);
rg_node *rg_rms_norm_back(rg_graph *g, rg_node *dy, rg_node *x, float eps);
// mode: 0 normal (adjacent pairs), 2 neox (halves).
rg_node *rg_rope(rg_graph *g, rg_node *x, rg_node *pos, int n_rot, int mode, float freq_base, float freq_scale);
rg_node *rg_rope_back(rg_graph *g, rg_node *dy, rg_node *pos, int n_rot, int mode, float freq_base, float freq_scale);
// mask may be NULL; causal masks key j > query i + (n_kv - T); softcap 0 = none.
rg_node *rg_soft_max(rg_graph *g, rg_node *a, rg_node *mask, bool causal, float scale, float softcap);
// The same with a sliding window (architectures.md §1.7): with causal and window > 0, query i (at position
// i + n_kv - T) also drops key j when (i + n_kv - T) - j >= window. window 0: rg_soft_max.
rg_node *rg_soft_max_ext(rg_graph *g, rg_node *a, rg_node *mask, bool causal, float scale, float softcap, int64_t window);
rg_node *rg_soft_max_back(rg_graph *g, rg_node *dy, rg_node *y, rg_node *a, float scale, float softcap);
rg_node *rg_silu(rg_graph *g, rg_node *a);
rg_node *rg_silu_back(rg_graph *g, rg_node *dy, rg_node *a);
rg_node *rg_swiglu(rg_graph *g, rg_node *gate, rg_node *up);
// GELU with the tanh approximation (HF's gelu_pytorch_tanh, ggml's gelu) and its backward.
rg_node *rg_gelu(rg_graph *g, rg_node *a);
rg_node *rg_gelu_back(rg_graph *g, rg_node *dy, rg_node *a);
// cap * tanh(a / cap), cap > 0, and its backward (dy and the forward's input a).
rg_node *rg_softcap(rg_graph *g, rg_node *a, float cap);
rg_node *rg_softcap_back(rg_graph *g, rg_node *dy, rg_node *a, float cap);
rg_node *rg_reshape(rg_graph *g, rg_node *a, int n_dims, const int64_t *ne);
rg_node *rg_view(rg_graph *g, rg_node *a, int n_dims, const int64_t *ne, const size_t *nb, size_t offset);
rg_node *rg_permute(rg_graph *g, rg_node *a, int ax0, int ax1, int ax2, int ax3);
rg_node *rg_transpose(rg_graph *g, rg_node *a);
rg_node *rg_view_back(rg_graph *g, rg_node *dy, rg_node *view);
rg_node *rg_cont(rg_graph *g, rg_node *a);
rg_node *rg_cpy(rg_graph *g, rg_node *a, uint32_t type);
// Writes a into the bytes of dst (same shape); nodes created after it that read
// dst's owner see the values (execution follows creation order).
rg_node *rg_cpy_into(rg_graph *g, rg_node *a, rg_node *dst);
// The same in CPY_INTO's accumulate mode (ip[0] = 1): dst's window += a, both f32, each
// element one f32 add (a gradient accumulator: acc += grad in one pass, no temporary).
rg_node *rg_acc_into(rg_graph *g, rg_node *a, rg_node *dst);
// labels I32 [T]; ignore_index usually -100. The mean is over labels != ignore_index.
rg_node *rg_cross_entropy_loss(rg_graph *g, rg_node *logits, rg_node *labels, int32_t ignore_index);
rg_node *rg_cross_entropy_loss_back(rg_graph *g, rg_node *dloss, rg_node *logits, rg_node *labels, int32_t ignore_index);
// The cross-entropy of the logits mul_mat(w, h) [V, T], computed by vocabulary
// chunks so that neither the logits nor their gradient exist whole (training.md
// §7, CCE with a deterministic order). w and labels must be leaves (or views
// of leaves): the backward reads them through this node, so they must outlive
// it. chunk 0: automatic. Returns the [T + 1] node; rg_linear_ce_loss views
// its element 0, the loss.
rg_node *rg_linear_ce(rg_graph *g, rg_node *w, rg_node *h, rg_node *labels, int32_t ignore_index, int64_t chunk);
rg_node *rg_linear_ce_loss(rg_graph *g, rg_node *lce);
// The gradient of LINEAR_CE node lce for the incoming dy [T + 1]: returns dh
// [d, T]; with with_dw, rg_linear_ce_back_dw(g, dh) is dw [d, V], written by
// the same kernel.
rg_node *rg_linear_ce_back(rg_graph *g, rg_node *dy, rg_node *lce, bool with_dw);
rg_node *rg_linear_ce_back_dw(rg_graph *g, rg_node *back);
// Attention of the new queries q (roped) against cached keys k and transposed
// values vt (views of a KV cache of the same type, f32 or f16), in one op: the
// scores, scale, causal mask, softmax and weighted sum of MUL_MAT, SOFT_MAX,
// MUL_MAT. Returns [Dh, H, T]. No gradient.
rg_node *rg_attn_decode(rg_graph *g, rg_node *q, rg_node *k, rg_node *vt, float scale, float softcap, int64_t window);

// ---------------------------------------------------------------------------
// The state-space family (architectures.md §2.5, §3.3-3.7; training.md §8). Names: C
// channels (d_inner, Mamba-2's conv_dim), T tokens per sequence, S sequences (n_seqs),
// K taps (d_conv), H heads, P head_dim, N d_state, G n_group. All f32; seg I32.
// A node with several results packs them in its one 1-D output (graph/pack.h), and
// rg_ssm_part(g, node, i) is part i as a view (contiguous, the part's shape); the
// gradients of the parts used downstream reach the packed node through the views.
//
// Documents (training.md §8.4): seg, when given, is a per-token document id, I32 [T]
// (the same for every sequence) or [T, S]. Token t > 0 starts a document where
// seg[t] != seg[t-1]; there the conv's taps and the scan's state before t are zero, so
// nothing, forward or backward, crosses the boundary. The incoming state feeds only
// the first document of the chunk (token 0 never starts one: a fresh sequence passes
// a zero state, or NULL).
//
// SSM_CONV: the depthwise causal conv1d over a state prepended to the chunk, in x's own
// layout (ggml's SSM_CONV reads concat(state, x^T) [K-1+T, C, S]; the same sums here):
//   x      [C, T, S]    f32, packed rows (nb[0] = 4), any row strides (a view of zxbcdt)
//   c      [K, C]       the kernel, ggml's layout: c[k, ch] at k + K*ch; K (d_conv) 2..8
//   state  [C, K-1, S]  the K-1 columns of x before the chunk (the previous chunk's final
//                       state as it is, no transpose), or NULL for zeros
//   seg    I32 [T] or [T, S], or NULL
// Let u(tau) = x[:, tau] for tau >= 0 and state[:, K-1+tau] for -(K-1) <= tau < 0. Then
//   part 0  y [C, T, S]           y[ch, t] = sum_{k=0..K-1} c[k, ch] * u(t-(K-1)+k)[ch]
//           (tap K-1 is the current token; in f32, k in order; no bias, no activation)
//   part 1  state [C, K-1, S]     u(T-(K-1)+j) for j = 0..K-2: the last K-1 columns of
//           concat(state, x), which feed the next chunk (generation); columns before the
//           last document's start are 0.
// With seg, a tap u(tau) of token t reads 0 when tau is before the document of t.
rg_node *rg_ssm_conv(rg_graph *g, rg_node *x, rg_node *c, rg_node *state, rg_node *seg);
// SSM_CONV_BACK: d is the gradient of the whole SSM_CONV output (y's and the final
// state's); the other sources are the forward's. Packed: part 0 dx [C, T, S], part 1
// dstate [C, K-1, S] (computed, as zeros' gradient, also when state is NULL), part 2
// dc [K, C] (summed over tokens and sequences in double).
rg_node *rg_ssm_conv_back(rg_graph *g, rg_node *d, rg_node *x, rg_node *c, rg_node *state, rg_node *seg);
// SSM_DT: the per-token quantities of the scan (architectures.md §3.3 step 4, training.md
// §8.2), made by the scan inside and by this op for its backward:
//   dt [H, T, S]   with dt_bias already added (a broadcast ADD before the scan)
//   A  [1, H] or [H]  (GGUF's ssm_a, A = -exp(A_log))
// -> [H, T, S, 3]: [..., 0] step = softplus(dt) (dt itself above 20), [..., 1] decay =
// exp(step * A) (0 at a document start), [..., 2] slope = d step / d dt = sigmoid(dt)
// (1 above 20); each evaluated in double and rounded once. No gradient.
rg_node *rg_ssm_dt(rg_graph *g, rg_node *dt, rg_node *A, rg_node *seg);
// SSM_SCAN: Mamba-2's selective scan (ggml's SSM_SCAN for mamba2; softplus inside,
// dt_bias and the D skip outside as ADD and MUL):
//   xBC    [P*H + 2*G*N, T, S]  the conv's output as it is: x [P, H] (head h's lanes at
//          h*P), then B [N, G], then C [N, G] per token; contiguous
//   dt     [H, T, S] (dt_bias added);  A [1, H] or [H];  state [N, P, H, S] or NULL (zeros)
// Head h uses group h / (H/G). Per head, with step, decay as SSM_DT's and S_{-1} = state:
//   S_t[n, p] = decay_t * S_{t-1}[n, p] + B_t[n] * (x_t[p] * step_t)
//   y_t[p]    = sum_n S_t[n, p] * C_t[n]          (f32, n in order)
//   part 0  y [P, H, T, S] (without the D term);  part 1  the final state S_{T-1} [N, P, H, S]
// Mamba-1's per-element A [N, H] is refused.
rg_node *rg_ssm_scan(rg_graph *g, rg_node *xbc, rg_node *dt, rg_node *A, rg_node *state, rg_node *seg,
                     int64_t head_dim, int64_t d_state, int64_t n_group);
// The scan with snapshots (ip[3] = 1): also part 2, states [N*P*H, T, S], the state S_t after every token t
// ([N, P, H] each), written inside the scan's loop as it goes (no second pass; the same values as the final state
// of a scan of the chunk cut after t: the recurrence runs in t order per head). Inference only: refused when a
// source needs a gradient. Exact rewind of a recurrent model keeps these (infer/session_snap.c).
rg_node *rg_ssm_scan_snap(rg_graph *g, rg_node *xbc, rg_node *dt, rg_node *A, rg_node *state, rg_node *seg,
                          int64_t head_dim, int64_t d_state, int64_t n_group);
// SSM_SCAN_BACK (training.md §8.2, §8.4): d is the gradient of the whole SSM_SCAN output (y's
// and the final state's), dta = rg_ssm_dt(dt, A, seg) of the forward's dt, A and seg. Packed:
// part 0 dxBC (dx, then dB and dC summed over each group's heads), part 1 ddt [H, T, S],
// part 2 dA (A's shape), part 3 dstate [N, P, H, S] (also when state is NULL).
rg_node *rg_ssm_scan_back(rg_graph *g, rg_node *d, rg_node *xbc, rg_node *dta, rg_node *A, rg_node *state,
                          int64_t head_dim, int64_t d_state, int64_t n_group);
// Part i of an SSM_CONV, SSM_CONV_BACK, SSM_SCAN or SSM_SCAN_BACK node (graph/pack.h).
rg_node *rg_ssm_part(rg_graph *g, rg_node *packed, int part);
enum { RG_SSM_CONV_Y = 0, RG_SSM_CONV_STATE = 1 };
enum { RG_SSM_CONV_BACK_DX = 0, RG_SSM_CONV_BACK_DSTATE = 1, RG_SSM_CONV_BACK_DC = 2 };
enum { RG_SSM_SCAN_Y = 0, RG_SSM_SCAN_STATE = 1, RG_SSM_SCAN_STATES = 2 };
enum { RG_SSM_SCAN_BACK_DXBC = 0, RG_SSM_SCAN_BACK_DDT = 1, RG_SSM_SCAN_BACK_DA = 2, RG_SSM_SCAN_BACK_DSTATE = 3 };
// How the layers use them (model/layer_conv.c, model/layer_ssm.c): LFM2's short conv (architectures.md §2.5) is
// Z = C ⊙ part 0 of ssm_conv(B ⊙ X, conv.weight, state, seg); Mamba-2 (§3.3) is xBC' =
// silu(part 0 of ssm_conv(xBC, conv1d.weight, state, seg) + conv1d.bias), then
// y = part 0 of ssm_scan(xBC', dt_raw + dt_bias, ssm_a, state, seg) + x ⊙ ssm_d, then the
// gate and the grouped norm. Part 1 of either op is the next chunk's state.
//
// CONV_RS_GATHER: the conv window of SSM_CONV after the first pos tokens of a chunk, from the window before the
// chunk and the chunk's conv inputs (so a session keeps those instead of a window per token):
//   x     [C, n, S]    the chunk's conv inputs (SSM_CONV's x), packed rows, any row strides
//   prev  [C, K-1, S]  the state before the chunk (SSM_CONV's state source as it was), contiguous
//   pos   ip[0], 0 <= pos <= n
// -> [C, K-1, S], column j = u(pos-(K-1)+j) with u(tau) = x[:, tau] for tau >= 0, prev[:, K-1+tau] for tau < 0:
// the last K-1 columns of concat(prev, x[:, 0..pos)), bit-for-bit what SSM_CONV's part 1 gives for a chunk of the
// first pos tokens without document ids (pos = n: its part 1 for the whole chunk). A copy: no arithmetic.
rg_node *rg_conv_rs_gather(rg_graph *g, rg_node *x, rg_node *prev, int64_t pos);

// ---------------------------------------------------------------------------
// Flash attention (training.md §6; the FlashAttention-2 algorithm, on the CPU and CUDA). Names: Dh
// head_dim, T queries and Tk keys per sequence (Tk >= T: the first Tk - T keys are a prefix
// the queries follow, a KV cache), H query heads, Hkv kv heads (H a multiple of Hkv; query
// head h reads kv head h / (H / Hkv)), S sequences. The shapes are ggml's flash_attn_ext's:
//   q      [Dh, T, H, S]     f32, packed rows (nb[0] = 4), any other strides: a permuted view
//                            of [Dh, H, T] (permute 0, 2, 1, 3) needs no copy
//   k, v   [Dh, Tk, Hkv, S]  both f32 or both f16, any strides; k's rows packed, v's rows may
//                            be strided (a transposed view: the session's V cache [n_ctx, Dh,
//                            Hkv] read through permute 1, 0, 2, 3 needs no copy)
//   seg    I32 [Tk] (every sequence) or [Tk, S], or NULL: the document id of each position
//   sinks  F32 [H] or NULL: an extra logit per head in the softmax's denominator (no value)
// Query t sits at position qpos = t + (Tk - T), key j at kpos = j. Key j is visible to query
// t when all of these hold: (causal) kpos <= qpos; (window W > 0) qpos - kpos < W; (seg)
// seg[kpos] == seg[qpos]. Per head and query, over the visible keys:
//   s_j = scale * q.k_j;  with softcap c > 0: s_j = c * tanh(s_j / c)  (before the mask)
//   lse = log(e^sink + sum_j e^(s_j))   (no sink term without sinks)
//   o   = sum_j e^(s_j - lse) v_j
// A query with no visible key and no sink gets o = 0 and lse = +inf (no such row exists
// when Tk >= T: a query always sees its own position). f32 throughout, exp as exp_poly.h's.
// The output packs part 0 o [Dh, H, T, S] (ggml's layout: reshaped to [Dh*H, T*S] it feeds
// the output projection) and part 1 lse [T, H, S] (what the backward recomputes P from).
typedef struct rg_flash_params {
    float scale;     // usually 1/sqrt(Dh); finite
    float softcap;   // 0: none; > 0 and finite
    int64_t window;  // 0: none; > 0: a key is visible when qpos - kpos < window
    bool causal;
} rg_flash_params;
rg_node *rg_flash_attn_ext(rg_graph *g, rg_node *q, rg_node *k, rg_node *v, rg_node *seg, rg_node *sinks,
                           const rg_flash_params *p);
// Whether a caller builds its attention on FLASH_ATTN_EXT: training.flash_attn (train_state.c's
// choose_flash) and a session's prompt batches (rg_session_flash_prompt) decide auto each in
// their one place; on and off force it.
typedef enum { RG_FLASH_ATTN_AUTO = 0, RG_FLASH_ATTN_ON = 1, RG_FLASH_ATTN_OFF = 2 } rg_flash_attn_mode;
// FLASH_ATTN_BACK for the FLASH_ATTN_EXT node fwd: d is the gradient of fwd's whole packed
// output (o's and lse's: dS = P (dP - D) with D = rowsum(dO o) - dlse). Reads q, k, v and seg
// through fwd's sources. Packed: part 0 dq [Dh, T, H, S], part 1 dk, part 2 dv [Dh, Tk, Hkv, S]
// (dk, dv summed over the heads of each kv head, in head order). A forward with sinks is
// refused: their gradient is not made here (build the materialized attention instead).
rg_node *rg_flash_attn_back(rg_graph *g, rg_node *d, rg_node *fwd);
// Part i of a FLASH_ATTN_EXT or FLASH_ATTN_BACK node (graph/pack.h), as a contiguous view.
rg_node *rg_flash_part(rg_graph *g, rg_node *packed, int part);
enum { RG_FLASH_O = 0, RG_FLASH_LSE = 1 };
enum { RG_FLASH_BACK_DQ = 0, RG_FLASH_BACK_DK = 1, RG_FLASH_BACK_DV = 2 };

// Optimizer steps, in place on a parameter (the node aliases its bytes).
// The host computes the per-step scalars in double (training.md §1.2); see the
// RG_OP_ADAMW / RG_OP_SGD rows for the meaning of each.
typedef struct rg_adamw_step {
    float step;     // lr / (1 - beta1^t)
    float omb1;     // 1 - beta1
    float b2;       // beta2
    float omb2;     // 1 - beta2
    float eps;
    float decay;    // 1 - lr * weight_decay (1: none)
    float bc2s;     // sqrt(1 - beta2^t)
    float clip;     // gradient scale from clipping (1: none)
} rg_adamw_step;
rg_node *rg_adamw(rg_graph *g, rg_node *param, rg_node *grad, rg_node *m, rg_node *v, const rg_adamw_step *s);
rg_node *rg_sgd(rg_graph *g, rg_node *param, rg_node *grad, float lr, float weight_decay, float clip);
// The same steps on a parameter stored as F16 or BF16 (training.md §2, §3), with
// the bits of the host step (train/optim.h) for the same storage:
//   - master NULL: theta is the parameter's exact upcast, and the update is stored
//     back by stochastic rounding with the word keyed by (seed, step, tensor_id,
//     element) (train/sround.h);
//   - master (F32, shaped like the parameter): theta is the master, updated in
//     place, and the parameter becomes its RNE.
typedef struct rg_optim_half {
    rg_node *master;     // F32 master copy, or NULL: stochastic rounding
    uint64_t seed;       // the run seed (the SR key)
    uint32_t step;       // the optimizer step t being taken, 1-based
    uint32_t tensor_id;  // the tensor's SR id (< 2^24)
} rg_optim_half;
rg_node *rg_adamw_half(rg_graph *g, rg_node *param, rg_node *grad, rg_node *m, rg_node *v, const rg_adamw_step *s,
                       const rg_optim_half *h);
rg_node *rg_sgd_half(rg_graph *g, rg_node *param, rg_node *grad, float lr, float weight_decay, float clip,
                     const rg_optim_half *h);
// Gives an SGD node a momentum buffer (f32, the parameter's shape, updated in place) and mu:
// b = first ? g : mu b + g, theta -= lr b (g after clip and weight decay). `first` (fp[4]) is
// set per step by the caller. Returns sgd, or NULL with the graph's error set.
rg_node *rg_sgd_momentum(rg_graph *g, rg_node *sgd, rg_node *buf, float momentum);
// The global norm's square (training.md §1.4) by SUMSQ: prev (F64 [1], or NULL for 0) plus the
// squares of a (contiguous f32). Chained over the tensors in order it is the host norm's total.
rg_node *rg_sumsq(rg_graph *g, rg_node *a, rg_node *prev);
// The clip coefficient F32 [1] of a SUMSQ total against max_norm (<= 0: no clipping, 1).
rg_node *rg_clip_coef_node(rg_graph *g, rg_node *total, double max_norm);
// Makes an ADAMW or SGD node read its clip from clip (F32 [1]) instead of its fp. Returns upd,
// or NULL with the graph's error set.
rg_node *rg_optim_set_clip(rg_graph *g, rg_node *upd, rg_node *clip);

// Marks the node as the loss and appends the backward graph: every parameter
// the loss depends on gets param->grad (flagged RG_NODE_GRAD | RG_NODE_OUTPUT).
// Gradients of a node used twice are summed. Frozen leaves get none.
rg_status rg_graph_backward(rg_graph *g, rg_node *loss, rg_error *err);
// Activation recompute (training.md §9), a rewrite of a graph that has its
// backward. bounds[0..n_seg]: forward F32 nodes; segment i (a layer) is the
// forward nodes strictly between bounds[i], its input, and bounds[i + 1].
// Afterwards the backward reads no inner node of a segment: the inner nodes
// it needs (and what they need) are computed again from the segment's input
// just before the first backward node that reads them, so the plan frees a
// layer's activations as soon as the forward has passed it. ckpt_type F32:
// the inputs are kept as they are and the recomputed values equal the first
// ones bit for bit. F16/BF16: each input is also stored rounded (RNE, kept to
// the end of the run; ckpts[i] gets it when ckpts is not NULL), and the
// recompute and the backward read it widened back to F32.
rg_status rg_graph_recompute(rg_graph *g, rg_node *const *bounds, int n_seg, uint32_t ckpt_type, rg_node **ckpts,
                             rg_error *err);
// The op's name, the one the op table holds (graph/ops.c): every message, report and
// profile names an op through it.
const char *rg_op_name(rg_op op);

#endif
