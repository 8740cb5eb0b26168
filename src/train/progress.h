// progress.h - what a training run shows and leaves behind about its course:
// the progress bar (a terminal) or plain lines (a log), train.jsonl (one
// record per step) and the loss plot (loss.svg).
#ifndef RG_TRAIN_PROGRESS_H
#define RG_TRAIN_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "retrograd.h"

typedef struct rg_step_record {
    int64_t iter;          // 1-based attempted step
    int64_t t;             // completed optimizer steps after it
    int64_t epoch;
    double loss;           // mean target loss of the step (NaN when it was not finite)
    double lr, grad_norm;
    int64_t tokens, targets;
    double tokens_per_s;   // this step
    double elapsed_s;      // since the run began (resumed runs include the time before)
    double rss_mib;
    bool skipped;
    double eval_loss;      // NaN when no eval ran at this step
} rg_step_record;

// The progress line. mode: 1 = a terminal (one line rewritten in place),
// 2 = plain lines (every `every` steps and the last), 0 = silent.
typedef struct rg_progress {
    FILE *f;
    int mode;
    int64_t total, every;
    double ema_loss;       // smoothed loss shown on the bar
    bool have_ema;
} rg_progress;

void rg_progress_init(rg_progress *p, FILE *f, int mode, int64_t total_steps);
void rg_progress_step(rg_progress *p, const rg_step_record *r, double eta_s);
void rg_progress_end(rg_progress *p);

// One JSON line for r (no trailing newline handling needed by the caller).
void rg_step_record_write(FILE *f, const rg_step_record *r);
// Keeps the lines of train.jsonl whose "iter" <= iter (a resumed run starts after them); the rest is cut.
rg_status rg_jsonl_truncate(const char *path, int64_t iter, rg_error *err);
// Reads the "loss"/"eval_loss" series of train.jsonl (for the plot after a resume). Caller frees.
int64_t rg_jsonl_read_losses(const char *path, int64_t **iters, double **loss, double **eval_loss);
// loss.svg: training loss per step (and eval loss points), axes with ticks. Written atomically.
rg_status rg_loss_plot_write(const char *path, const int64_t *iters, const double *loss, const double *eval_loss, int64_t n,
                             const char *title, rg_error *err);

// Resident set size of this process, MiB (0 when unknown).
double rg_rss_mib(void);
double rg_peak_rss_mib(void);

#endif
