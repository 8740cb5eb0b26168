// checkpoint.h - training checkpoints: everything a resumed run needs to
// continue bit for bit (shared/spec/training.md §3, "What a bit-exact resume
// must save").
//
// OUTDIR/checkpoints/step-N/ holds
//   state.gguf    every trainable tensor in its own type (raw bits), its F32
//                 master, m and v (or the SGD momentum), and the run's scalars
//                 under retrograd.ckpt.*: t (completed optimizer steps), iter
//                 (attempted steps = data position), skipped counts, seed,
//                 thread count, data hash, tokens seen, elapsed time, and the
//                 effective config as text;
//   adapter.gguf  (LoRA) the adapter as llama.cpp loads it;
//   config.yaml   the effective config, for people.
// A checkpoint is written into checkpoints/.step-N.tmp/ (each file synced),
// then the directory is synced and renamed to step-N and checkpoints/ synced:
// a crash or a full disk leaves the previous checkpoint untouched, and a
// directory named step-N is always complete. Only the newest `keep` are kept.
#ifndef RG_TRAIN_CHECKPOINT_H
#define RG_TRAIN_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "train/train_state.h"

typedef struct rg_ckpt_meta {
    int64_t t;               // completed optimizer steps
    int64_t iter;            // attempted steps (the data position: rows consumed = iter * rows per step)
    int64_t n_skipped;       // steps skipped so far
    int64_t skipped_in_row;  // consecutive skipped steps at the end
    int64_t tokens_seen;     // tokens processed
    double elapsed_s;        // training time so far
    uint64_t seed;
    uint64_t data_hash;
    int32_t threads;         // the pool size the run used (bitwise determinism holds per thread count)
    int32_t fused_ce;        // 1: the step graph used the fused cross-entropy (auto resolves per machine), -1: not recorded
    char config[8192];       // the effective config (rg_train_config_write)
} rg_ckpt_meta;

// Writes checkpoint step-<iter> under out_dir/checkpoints and prunes to the newest `keep` (>= 1).
rg_status rg_checkpoint_save(const rg_train_state *s, const rg_ckpt_meta *meta, const char *out_dir, int keep,
                             rg_error *err);
// The newest complete checkpoint under out_dir/checkpoints: its directory into path; RG_ERR_NOT_FOUND when none.
rg_status rg_checkpoint_find_latest(const char *out_dir, char *path, size_t cap, rg_error *err);
// Reads a checkpoint directory into s (tensors, state, t) and meta. Every
// trainable tensor must be there with its type and shape; a stored weight that
// is not the RNE of its stored master is refused.
rg_status rg_checkpoint_load(rg_train_state *s, const char *dir, rg_ckpt_meta *meta, rg_error *err);

// fsync of a directory (for the renames that publish files).
rg_status rg_sync_dir(const char *dir, rg_error *err);

#endif
