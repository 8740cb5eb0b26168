// eval.h - the loss of a model over a data file, read as `retrograd train` reads its data: the training run's
// eval pass and `retrograd merge --check` (base + adapter against the merged file) share it.
#ifndef RG_TRAIN_EVAL_H
#define RG_TRAIN_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "model/model.h"
#include "train/config.h"
#include "train/data.h"
#include "train/train_state.h"

// Loads path for model m with the options of spec (training.ctx, data.train_on, data.pack, data.overlong,
// training.eval_split, training.seed; checked at the edge by rg_train_config_validate) through m's tokenizer and
// chat template (a template that cannot be used is a note on log, or none when log is NULL; it only matters to
// "messages" lines, which then fail naming the line). eval_path (NULL: none) is a separate evaluation file, read
// the same way, whose rows are the eval split in place of training.eval_split's held-out samples (the whole of
// path trains).
rg_status rg_eval_load_data(rg_dataset **out, const rg_model *m, const char *path, const char *eval_path,
                            const rg_train_spec *spec, FILE *log, rg_error *err);

// The mean target loss (nats per target token) over rows [0, max_rows) of a split of d (max_rows <= 0: every row),
// one row at a time through rg_train_state_eval_row; *n_targets counts the targets (NULL allowed). A row whose
// loss is not finite returns RG_ERR_NONFINITE. d must be packed with s's ctx.
rg_status rg_eval_rows(rg_train_state *s, const rg_dataset *d, int split, int64_t max_rows, double *mean_loss,
                       int64_t *n_targets, rg_error *err);

// The whole of it for a file: loads model_path, adapter_path (NULL: none) at user_scale, the data with spec's
// options and training.eval_split forced to 0, and returns the mean loss over every row (both splits are one then).
rg_status rg_eval_file(const char *model_path, const char *adapter_path, float user_scale, const char *data_path,
                       const rg_train_spec *spec, double *mean_loss, int64_t *n_targets, rg_error *err);

#endif
