// optim.h - one optimizer step over the trainable tensors, on the host.
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

// The pre-clip global gradient norm (§1.4): squares summed in double in
// blocks of 4096 elements in index order, blocks and tensors added in order;
// the same for any thread count. Not finite when any gradient is not.
double rg_grad_global_norm(const rg_train_tensor *ts, int n, rg_threadpool *pool);
// min(1, max_norm / (total + 1e-6)) in double, cast once; 1 when max_norm <= 0.
float rg_clip_coef(double total, double max_norm);

// The schedule multiplier f(s) of §1.5 (kind 0 constant, 1 linear, 2 cosine),
// s = completed optimizer steps, warmup W, total T.
double rg_schedule_factor(int kind, int64_t s, int64_t warmup, int64_t total);

// Applies one step to every tensor (AdamW needs m and v; SGD with momentum
// needs m). Errors only on a tensor that lacks the state its optimizer needs.
rg_status rg_optim_apply(rg_train_tensor *ts, int n, const rg_optim_step *s, rg_threadpool *pool, rg_error *err);

#endif
