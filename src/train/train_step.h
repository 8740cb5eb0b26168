// train_step.h - the step graph's builder (train_step.c), shared by train_state.c and
// train_device.c; internal to src/train/.
#ifndef RG_TRAIN_STEP_H
#define RG_TRAIN_STEP_H

#include "graph/plan.h"
#include "train/train_state.h"

// Entries the state's per-tensor arrays hold: every model tensor, or LoRA's A and B of each.
size_t rg_train_tensor_capacity(const rg_model *m);
// A 64-byte aligned buffer (free with free), at least 64 bytes.
void *rg_train_alloc64(size_t n);
// training.flash_attn resolved for this device and ctx (on, off, or auto: on from 2048 tokens);
// refuses on where the device has no flash kernels.
rg_status rg_train_choose_flash(const rg_train_config *c, rg_device device, bool *flash, rg_error *err);
// (Re)builds the step graph into s->g, unplanned: the trainable tensors' nodes (s->params), the
// inputs, the forward, the loss (LINEAR_CE on the hidden states when fused, else
// CROSS_ENTROPY_LOSS on the logits), the backward with s->grads and s->loss_back, layer
// recompute when asked, the gradient accumulation when s->accumulate (an eval-only state
// stops after the loss). A second call replaces the graph and keeps the trained buffers and
// the adapter (the same order, hence tensor ids).
rg_status rg_train_step_build(rg_train_state *s, bool fused, bool recompute, rg_error *err);
// The one choice of recompute, the fused loss and flash attention: builds and plans (without
// allocating) the configured step, then, in this order while it does not fit the limit (0: the
// machine's memory on the CPU, none on a device), the candidates with recompute (auto), the fused
// loss (auto), flash attention (auto, CPU). Leaves s->g the chosen step with its plan in *plan,
// s->state_bytes and s->grad_bytes set, *need the run's bytes and *limit the limit applied.
rg_status rg_train_step_choose(rg_train_state *s, rg_device device, size_t memory_limit, rg_plan *plan, size_t *need,
                               size_t *limit, rg_error *err);
// Binds the accumulator leaves of the step graph (s->acc, made by rg_train_step_build when
// s->accumulate: acc_k = acc_k + grad_k by ADD and CPY_INTO) to s->grad_bufs, once allocated.
void rg_train_step_bind_accumulators(rg_train_state *s);

#endif
