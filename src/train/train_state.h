// train_state.h - what one training run holds in memory, and the two moves
// it makes: a micro-batch (forward, loss, backward, gradient accumulation) and
// an optimizer step (norm, clip, schedule, update, store).
//
// Both moves are graphs, the same on every backend (train_step.c builds the step graph,
// optim.h's rg_optim_graph the optimizer's): on the CPU they run on host memory, on a device
// (train_device.c) on resident copies of the parameters, gradients and optimizer state. The
// step graph ends with acc_k = acc_k + grad_k into accumulators when a step has several rows
// or the run is on a device; a CPU run with one row per step has none, and the optimizer
// graph reads the step graph's gradient outputs. The optimizer graph runs in segments: the
// global norm (SUMSQ, read back: 8 bytes), then clip, ADAMW/SGD and the accumulators zeroed.
//
// The step graph is built once for rows of exactly ctx tokens: inputs ids,
// pos, labels I32 [ctx] and an additive mask F32 [ctx, ctx] (0 within a
// document, -inf across packed documents; the causal part is the op's), the
// model's forward, the cross-entropy of §5.8 and the backward. It is planned
// once and run for every row. With training.fused_ce the forward stops at the
// final norm and the loss is LINEAR_CE (training.md §7): the same loss and
// gradients up to roundoff, without the [n_vocab, ctx] logits and their
// gradient.
//
// Trainable tensors:
//   - full fine-tuning: every tensor of the model, copied out of the mapping
//     into buffers of its own type (F32, F16 or BF16; quantized models must
//     use LoRA); the forward reads those buffers, the optimizer writes them;
//   - LoRA: A and B of every targeted projection (F32); the base stays frozen
//     in the mapping, whatever its type.
// Tensor ids (the SR key) are the index in that list, a pure function of the
// model and the config, so a resumed run draws the same random words.
#ifndef RG_TRAIN_STATE_H
#define RG_TRAIN_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/exec.h"
#include "model/lora.h"
#include "model/model.h"
#include "train/compute.h"
#include "train/config.h"
#include "train/optim.h"

typedef struct rg_train_state {
    const rg_model *model;
    rg_train_config cfg;
    rg_lora *lora;               // LoRA mode: the adapter being trained (owned)
    rg_train_tensor *tensors;    // [n_tensors]
    int n_tensors;
    void **weight_bufs;          // full mode: the trained copies (owned), [n_tensors]
    float **grad_bufs;           // the step's gradient: the graph's output, or an accumulator when a step has several rows
    bool accumulate;             // several rows per step: gradients are summed into owned accumulators
    int64_t rows_this_step;      // rows accumulated since the last optimizer step

    rg_graph *g;
    rg_exec *ex;
    rg_threadpool *pool;         // owned; shared by the graph and the optimizer
    rg_node *ids, *pos, *labels, *mask, *loss;  // [ctx] x3, [ctx, ctx] (NULL: no materialized attention), [1]
    rg_node *seg;                // I32 [ctx] document ids for the short conv and SSM layers (NULL: the model has none)
    rg_node *ce;                 // the node whose fp[0] is the loss scale: the CROSS_ENTROPY_LOSS, or the LINEAR_CE
                                 // whose element 0 `loss` views (training.fused_ce)
    rg_node *loss_back;          // the cross-entropy's backward: carries the same 1/N as the loss
    bool fused_ce;               // the loss is LINEAR_CE on the final hidden states: no [n_vocab, ctx] logits
    bool flash_attn;             // attention layers on FLASH_ATTN_EXT/BACK (training.flash_attn)
    rg_train_products products;  // training.compute_dtype resolved (train/compute.h): the execs' bf16_products
    struct rg_tiles_cache *tiles;  // with BF16 products on the CPU: the frozen weights' packed tiles (owned), or NULL
    size_t tiles_cap;            // the bytes it may hold (rg_tiles_cache_default_cap of the plan; 0: none)
    bool softcap_noted;          // the one line saying a capped head (gemma2) cannot take the fused loss was written
    rg_node **bounds;            // [n_layer + 1] the layer boundaries of the forward (for recompute)
    rg_node **grads;             // [n_tensors] the graph's gradient nodes (NULL: no path from the loss)
    rg_node **params;            // [n_tensors] the step graph's parameter nodes, recorded as they are made
    rg_node **acc;               // [n_tensors] the accumulator leaves over grad_bufs (NULL: none, or no gradient)
    int64_t ctx;
    bool recompute;              // the graph recomputes each layer before its backward (training.recompute)
    rg_node **ckpts;             // [n_layer] F16/BF16 stored layer inputs (checked for overflow), or NULL
    int n_ckpts;

    int64_t t;                   // completed optimizer steps
    double lr;                   // the base learning rate (config resolved)
    int64_t total_steps;         // T of the schedule
    size_t state_bytes, weight_bytes, grad_bytes;  // owned: optimizer state (m, v, master), trained copies, accumulators
    bool eval_only;              // rg_train_state_create_eval: forward and loss only
    float eval_scale;            // its adapter's user scale
    rg_optim_graph og;           // the optimizer graph (optim.h): norm | clip, update | zeroing
    rg_exec *oex;                // its exec, on the step's backend
    struct rg_train_device *dev_run;  // the run lives on a device (train_device.c), or NULL: the CPU
} rg_train_state;

// Builds the trainable tensors, the optimizer state and the step graph, and
// plans it, from a spec made by rg_train_config_validate (trusted, not checked
// again). total_steps = T of the schedule. spec->memory_limit (bytes, 0: the
// machine's memory): the run is refused before any large allocation when
// weights + gradients + optimizer state + activations + scratch exceed it, with
// the numbers.
rg_status rg_train_state_create(rg_train_state **out, const rg_model *m, const rg_train_spec *spec, int64_t total_steps,
                                rg_error *err);
// The same on a device (RG_DEVICE_CUDA: a GPU, or the host execution of the CUDA code):
// train_device.c. Without spec->memory_limit the device's free memory is the limit (refused with the numbers).
rg_status rg_train_state_create_on(rg_train_state **out, const rg_model *m, const rg_train_spec *spec,
                                   int64_t total_steps, rg_device device, rg_error *err);
// On a device: brings the parameters and the optimizer state back to their host buffers
// (before a checkpoint or anything else reads them); uploads them after a checkpoint was
// loaded into those buffers. Both do nothing on the CPU.
rg_status rg_train_state_sync_host(rg_train_state *s, rg_error *err);
rg_status rg_train_state_refresh_device(rg_train_state *s, rg_error *err);
// An eval-only state: the same forward and loss as a training step (rg_train_state_eval_row), with no trainable
// tensor, no backward and no optimizer state: the frozen model m, plus adapter applied at user_scale when it is not
// NULL (the state owns it from here on, also when this fails). Reads the spec's ctx, threads, flash_attn and
// fused_ce (on: the fused loss). rg_train_state_micro and _step must not be called on it.
rg_status rg_train_state_create_eval(rg_train_state **out, const rg_model *m, const rg_train_spec *spec,
                                     rg_lora *adapter, float user_scale, rg_error *err);
void rg_train_state_free(rg_train_state *s);

// The memory report (bytes): weights (the model's mapped tensors + trained
// copies), gradients, optimizer state, activations (the plan's buffer less the
// gradients), scratch.
typedef struct rg_train_memory {
    size_t weights, gradients, optimizer, activations, scratch, total;
    // On a device: this process's device memory by the same parts (scratch_*), and the whole
    // device's used and free memory when the report was made (device_*: another process's
    // allocations count there; compare two points in time, not two processes).
    bool on_device;
    size_t scratch_weights, scratch_gradients, scratch_optimizer, scratch_activations, scratch_scratch, scratch_total;
    size_t device_used, device_free;
    bool recompute;          // activations are the layer inputs + one layer (training.recompute)
    bool fused_ce;           // the cross-entropy never holds the logits (training.fused_ce)
    bool flash_attn;         // attention never holds its [ctx, ctx] scores (training.flash_attn)
    uint32_t checkpoint_type;  // the type those inputs are kept in
    // With BF16 products on the CPU: the frozen weights held as packed BF16 tiles (cpu/tiles_cache.h), not in
    // total: wanted (all of them, each orientation once) and the cap they are held within (what memory allows).
    size_t tiles_wanted, tiles_cap;
} rg_train_memory;
rg_train_memory rg_train_state_memory(const rg_train_state *s);
// The memory report of the step rg_train_state_create would make (CPU), from its plan alone: the same
// choices (training.flash_attn, recompute and fused_ce auto against spec->memory_limit, 0: the machine's
// memory), without the planned buffer, the exec or the optimizer state ever allocated, and not refused when it
// exceeds the limit (compare total with it). What a bench at a context too large to run asks.
rg_status rg_train_state_plan(const rg_model *m, const rg_train_spec *spec, rg_train_memory *out, rg_error *err);

// One row of ctx tokens (ids, labels, pos, seg as rg_dataset_row writes them).
// inv_n = 1 / (target tokens of the whole step). Adds this row's gradient to
// the step's and returns its loss contribution (its target losses summed,
// times inv_n) in *loss. A NaN/Inf loss returns RG_ERR_NONFINITE.
rg_status rg_train_state_micro(rg_train_state *s, const int32_t *ids, const int32_t *labels, const int32_t *pos,
                               const int32_t *seg, double inv_n, double *loss, rg_error *err);
// Forward only: the summed target loss of one row and its target count.
rg_status rg_train_state_eval_row(rg_train_state *s, const int32_t *ids, const int32_t *labels, const int32_t *pos,
                                  const int32_t *seg, double *loss_sum, int64_t *n_targets, rg_error *err);

// The optimizer step after the step's rows: global norm (pre-clip, into
// *grad_norm), clip, lr = base * f(t), t += 1, update and store. A non-finite
// norm skips the step (*skipped = true; no weight, moment or t changes).
rg_status rg_train_state_step(rg_train_state *s, double *grad_norm, double *lr_used, bool *skipped, rg_error *err);
// Drops the gradients of the rows since the last step (after a skipped row).
void rg_train_state_discard(rg_train_state *s);
// Adds the time of later steps to p per op (NULL: stops): the step graph and the optimizer's.
// On a device the profile synchronizes after every node, so a benchmark profiles a step it
// does not time.
void rg_train_state_set_profile(rg_train_state *s, rg_exec_profile *p);

// What the executors of a run have moved so far (graph/exec.h's counters): the step graph's
// in *step and the optimizer graph's in *optim. The seed's device_memory test reads them: a
// resident step moves only its rows in and the loss out.
void rg_train_state_exec_stats(const rg_train_state *s, rg_exec_stats *step, rg_exec_stats *optim);

// train_device.c's side of the state (internal): the backend and the resident copies both
// execs share (into *eo), their release, and what the memory report reads of the device: the
// resident copies' bytes, the whole device's used and free memory.
rg_status rg_train_device_create(rg_train_state *s, rg_device device, rg_exec_opts *eo, rg_error *err);
void rg_train_device_free(rg_train_state *s);
void rg_train_device_usage(const rg_train_state *s, size_t *resident, size_t *used, size_t *free_bytes);

#endif
