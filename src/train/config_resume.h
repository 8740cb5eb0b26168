// config_resume.h - the config text a checkpoint stores, and the resume's comparison with it.
//
// A checkpoint stores the effective config as text (rg_train_config_write) with one change:
// training.compute_dtype holds what the key resolved to ("f32" or "bf16"), never "auto", since
// auto resolves by weight type and machine (bf16 on a CPU with a matrix unit) and a resume must
// multiply as the run it continues did. A checkpoint written before the key existed has no
// compute_dtype line: its products were F32, so it resumes where this run's are F32.
#ifndef RG_TRAIN_CONFIG_RESUME_H
#define RG_TRAIN_CONFIG_RESUME_H

#include <stddef.h>

#include "retrograd.h"

// Sets the value of text's "training.compute_dtype: " line to the resolved dtype
// (RG_COMPUTE_F32 or RG_COMPUTE_BF16, config.h); text without the line is left as it is.
void rg_train_config_text_resolve(char *text, size_t cap, int resolved_dtype);
// RG_OK when a run with config text `now` (resolved) may continue checkpoint `dir` whose text is
// `saved`; otherwise RG_ERR_ARG naming the first line that differs ("checkpoint has '...', this
// run has '...'"), or, for a checkpoint from before compute_dtype whose products were F32, that
// this run's products (`products`: "bf16 on amx", ...) are not and how to resume.
rg_status rg_train_resume_config_check(const char *saved, const char *now, const char *products, const char *dir,
                                       rg_error *err);

#endif
