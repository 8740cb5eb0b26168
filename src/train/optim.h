// optim.h - one optimizer step over the trainable tensors, as a graph (the ADAMW / SGD,
// SUMSQ and CLIP_COEF ops) on the CPU or a device.
//
// Spec: shared/spec/training.md §1 (step order, AdamW, SGD, clipping by global
// norm, schedules), §2 (stochastic rounding), §3 (master weights).
//
// A trainable tensor is stored in its own type (F32, F16 or BF16) and has an
// F32 gradient, F32 optimizer state and, with master weights, an F32 master
// copy. Per element, the update is the canonical f32 sequence of §1.2 / §1.3
// (the same row kernels as the ADAMW / SGD graph ops), then the store:
//   - F32 weight:                 written directly;
//   - F16/BF16 in place:          w = SR(theta) with the random word keyed by
//                                 (seed, t, tensor id, element) (§2.2);
//   - F16/BF16 with a master:     master = theta, w = RNE(master) (§3).
// Every step is elementwise, so the bits depend on neither the thread count
// nor the chunking.
#ifndef RG_TRAIN_OPTIM_H
#define RG_TRAIN_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "graph/graph.h"
#include "retrograd.h"

typedef struct rg_train_tensor {
    char name[64];
    uint32_t id;        // the stochastic-rounding key's tensor id (< 2^24)
    uint32_t type;      // storage type of w: RG_TYPE_F32, F16 or BF16
    int n_dims;
    int64_t ne[4];
    int64_t nel;
    void *w;            // [nel] the stored weight (the bytes the forward reads)
    float *grad;        // [nel] the step's gradient
    float *m, *v;       // AdamW moments; SGD with momentum keeps its buffer in m; NULL when unused
    float *master;      // [nel] F32 master copy, or NULL
    bool decay;         // weight decay applies (matrices, embeddings, LoRA A/B; never 1-D tensors)
} rg_train_tensor;

typedef struct rg_optim_step {
    int optimizer;      // 0 AdamW, 1 SGD (the values of rg_optim_kind in train/config.h)
    double lr;          // this step's scheduled learning rate
    double beta1, beta2, eps, weight_decay;
    double momentum;    // SGD: 0 = none
    int64_t t;          // the optimizer step being taken, 1-based (after the increment of §1.1 step 5)
    uint64_t seed;      // run seed: the SR key
    float clip;         // gradient scale from clipping (1: none)
} rg_optim_step;

// The pre-clip global gradient norm (§1.4): SUMSQ over the tensors in order (squares summed
// in double in blocks of 4096 elements, blocks and tensors added in order), the same for any
// thread count. Not finite when any gradient is not. A one-shot graph on the CPU.
double rg_grad_global_norm(const rg_train_tensor *ts, int n, rg_threadpool *pool);
// min(1, max_norm / (total + 1e-6)) in double, cast once; 1 when max_norm <= 0.
float rg_clip_coef(double total, double max_norm);

// The schedule multiplier f(s) of §1.5 (kind 0 constant, 1 linear, 2 cosine),
// s = completed optimizer steps, warmup W, total T.
double rg_schedule_factor(int kind, int64_t s, int64_t warmup, int64_t total);

// The scalars of one step for a tensor that decays or not, as the ADAMW / SGD nodes read
// them in fp[] (graph.h): computed in double and cast once (§2.6). The one place they are
// packed, for every backend.
void rg_optim_pack(const rg_optim_step *s, bool decay, float fp[8]);

// The optimizer step as a graph, run in segments on any backend (the trainer's, and the
// one-shot rg_optim_apply's):
//   [0, seg_norm)         with norm: the gradients' sum of squares, SUMSQ chained over the
//                         tensors in order into `total` (F64 [1]), which the caller reads;
//   [seg_norm, seg_upd)   with norm: CLIP_COEF of the total, then ADAMW / SGD on every tensor
//                         (the clip read from CLIP_COEF; without norm from rg_optim_step.clip);
//   [seg_upd, end)        with zero_grads: the gradients zeroed (accumulators for the next step).
// Every source is a leaf over the tensors' own buffers (w, grad, m, v, master), so the graph
// updates them in place on the CPU, or their resident copies on a device.
typedef struct rg_optim_graph_opts {
    int optimizer;      // 0 AdamW, 1 SGD
    double momentum;    // SGD: 0 = none (else each tensor's m is its buffer)
    uint64_t seed;      // the SR key of half weights
    bool norm;          // the global norm and clip as nodes, against max_norm
    double max_norm;    // <= 0: no clipping
    bool zero_grads;
} rg_optim_graph_opts;

typedef struct rg_optim_graph {
    rg_graph *g;
    rg_node **upd;      // [n] the ADAMW / SGD nodes, in tensor order
    rg_node *total;     // F64 [1] the sum of squares (norm), or NULL
    int n;
    int seg_norm, seg_upd;
} rg_optim_graph;

// Builds the graph over ts[0..n) (every grad set). Refuses, naming the tensor, a type that does
// not train in place or a missing moment or buffer.
rg_status rg_optim_graph_build(rg_optim_graph *og, const rg_train_tensor *ts, int n, const rg_optim_graph_opts *o,
                               rg_error *err);
// Sets every update node's scalars and SR step for step s (rg_optim_pack): call before running
// [seg_norm, seg_upd).
void rg_optim_graph_set_step(rg_optim_graph *og, const rg_train_tensor *ts, const rg_optim_step *s);
void rg_optim_graph_free(rg_optim_graph *og);

// Applies one step to every tensor (AdamW needs m and v; SGD with momentum
// needs m) with s->clip, through a one-shot rg_optim_graph on the CPU. Errors on a
// tensor that lacks the state its optimizer needs.
rg_status rg_optim_apply(rg_train_tensor *ts, int n, const rg_optim_step *s, rg_threadpool *pool, rg_error *err);

#endif
