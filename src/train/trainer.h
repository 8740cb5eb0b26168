// trainer.h - a whole training run, as `retrograd train` runs it: model and
// data in, OUTDIR out (DESIGN.md §2).
//
// OUTDIR receives train.jsonl (one record per step), loss.svg, report.json,
// checkpoints/step-N/ every training.save_every steps and at the end, and
// the result: adapter.gguf (LoRA; llama.cpp's --lora format) or model.gguf
// (full fine-tune: the input's architecture, keys and tensor types).
//
// Step k (1-based) consumes rows (k-1)*R .. k*R-1 of the training stream,
// R = batch_size * grad_accum, where stream row r is row (r mod n) of epoch
// floor(r / n) of the dataset's seeded order: the data position is a pure
// function of the step count, so a checkpoint needs only that count.
#ifndef RG_TRAIN_TRAINER_H
#define RG_TRAIN_TRAINER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "train/config.h"

typedef struct rg_train_opts {
    const char *model_path, *data_path, *out_dir;
    const char *eval_data_path;  // a separate eval file (NULL: training.eval_split holds samples of data_path out)
    rg_train_spec spec;   // the settings, checked at the edge: rg_train_config_validate made it
    bool resume;          // continue from the newest checkpoint in out_dir
    FILE *log;            // messages and progress (stderr when NULL)
    int progress;         // 0 auto (a bar on a terminal, lines otherwise), 1 bar, 2 lines, 3 silent
    int device;           // rg_device: RG_DEVICE_CPU (0) or RG_DEVICE_CUDA (train_device.c)
} rg_train_opts;

typedef struct rg_train_summary {
    int64_t steps, skipped, tokens;
    double first_loss, last_loss, eval_loss;  // eval_loss NaN when there is no eval split
    double seconds, tokens_per_s, peak_rss_mib;
} rg_train_summary;

rg_status rg_train_run(const rg_train_opts *o, rg_train_summary *sum, rg_error *err);

#endif
