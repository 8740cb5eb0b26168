// train_rows.h - rows and states for the training tests that compare two step
// graphs on the tiny model (test_train_recompute.c, test_train_fused_ce.c, test_train_flash.c).
#ifndef RG_TESTS_TRAIN_ROWS_H
#define RG_TESTS_TRAIN_ROWS_H

#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "model/quantize.h"
#include "model/tiny.h"
#include "train/train_state.h"

// The tiny model of tc written to path and loaded; with quant set (not F32),
// written as tc says and then quantized to that type. NULL with err set (and
// no file left) on failure.
static inline rg_model *tt_tiny(const char *path, const rg_tiny_config *tc, uint32_t quant, rg_error *err) {
    char src[300];
    snprintf(src, sizeof src, "%s.src", path);
    rg_model *m = NULL;
    rg_status st = rg_tiny_write(tc, quant == RG_TYPE_F32 ? path : src, err);
    if (!st && quant != RG_TYPE_F32) {
        rg_quantize_opts o = {.n_threads = 2};
        rg_quantize_summary sum;
        st = rg_quantize_file(src, path, rg_type_get(quant)->name, &o, &sum, err);
        unlink(src);
    }
    if (st || rg_model_load(&m, path, err)) {
        unlink(path);
        return NULL;
    }
    return m;
}

// How a test's rows look: T tokens, two packed documents split at `split`
// (positions restart, no attention across), no target at i % mod == rem and
// at each document's last token; ids from an LCG started at mul * (r + add).
typedef struct tt_rows {
    int T, split, mod, rem;
    uint32_t mul, add;
} tt_rows;

static inline void tt_make_row(const tt_rows *f, int r, int32_t *ids, int32_t *labels, int32_t *pos, int32_t *seg) {
    uint32_t x = f->mul * (uint32_t)(r + (int)f->add);
    for (int i = 0; i < f->T; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)(x >> 8) % RG_TINY_N_VOCAB;
        int doc = i < f->split ? 0 : 1;
        seg[i] = doc;
        pos[i] = doc ? i - f->split : i;
    }
    for (int i = 0; i < f->T; i++)
        labels[i] = (i + 1 < f->T && seg[i + 1] == seg[i] && i % f->mod != f->rem) ? ids[i + 1] : -100;
}

// The settings both tests start from: T tokens, 2 threads, AdamW lr 1e-3 with
// decay 0.01, constant, LoRA rank 4; each test then sets what it compares.
static inline rg_train_config tt_config(rg_train_method method, int T) {
    rg_train_config c;
    rg_train_config_defaults(&c);
    c.method = method;
    c.ctx = T;
    c.threads = 2;
    c.eval_split = 0;
    c.steps = 4;
    c.lr = 1e-3;
    c.weight_decay = 0.01;
    c.schedule = RG_SCHED_CONSTANT;
    c.lora_rank = 4;
    return c;
}

// The spec the library takes: c validated as the CLI validates it, and with limit (bytes) > 0 a memory limit of
// exactly limit (training.memory_limit_gb = limit / 2^30, exact in a double and back).
static inline rg_status tt_spec(rg_train_spec *sp, const rg_train_config *c, size_t limit, rg_error *err) {
    rg_train_config with_limit = *c;
    if (limit) with_limit.memory_limit_gb = (double)limit / 1073741824.0;
    return rg_train_config_validate(&with_limit, sp, err);
}

static inline rg_train_state *tt_state(const rg_model *m, const rg_train_config *c, size_t limit, rg_error *err) {
    rg_train_state *s = NULL;
    rg_train_spec sp;
    if (tt_spec(&sp, c, limit, err) || rg_train_state_create(&s, m, &sp, c->steps, err)) return NULL;
    return s;
}

// The memory report of the state tt_state would make, from its plan alone (rg_train_state_plan).
static inline rg_status tt_plan(const rg_model *m, const rg_train_config *c, size_t limit, rg_train_memory *out,
                                rg_error *err) {
    rg_train_spec sp;
    rg_status st = tt_spec(&sp, c, limit, err);
    return st ? st : rg_train_state_plan(m, &sp, out, err);
}

// One row through the step graph, normalised by its own targets.
static inline rg_status tt_micro(const tt_rows *f, rg_train_state *s, int r, double *loss, rg_error *err) {
    int32_t ids[1024], labels[1024], pos[1024], seg[1024];
    if (f->T > 1024) return RG_ERR_ARG;
    tt_make_row(f, r, ids, labels, pos, seg);
    int64_t n = 0;
    for (int i = 0; i < f->T; i++) n += labels[i] != -100;
    return rg_train_state_micro(s, ids, labels, pos, seg, 1.0 / (double)n, loss, err);
}

// §4.1: worst over tensors of max|Δ| / max|g|.
static inline double tt_grad_gap(const rg_train_state *ref, const rg_train_state *s, const char **where) {
    double worst = 0;
    for (int k = 0; k < ref->n_tensors; k++) {
        const float *g = ref->tensors[k].grad, *h = s->tensors[k].grad;
        double md = 0, mg = 0;
        for (int64_t i = 0; i < ref->tensors[k].nel; i++) {
            md = fmax(md, fabs((double)h[i] - (double)g[i]));
            mg = fmax(mg, fabs((double)g[i]));
        }
        double t = mg > 0 ? md / mg : (md > 0 ? INFINITY : 0);
        if (!(t <= worst)) worst = t, *where = ref->tensors[k].name;
    }
    return worst;
}

// Largest |Δ| between the two runs' F32 weights (trained copies or LoRA A/B).
static inline double tt_weight_gap(const rg_train_state *a, const rg_train_state *b) {
    double md = 0;
    for (int k = 0; k < a->n_tensors; k++) {
        if (a->tensors[k].type != RG_TYPE_F32) continue;
        const float *x = a->tensors[k].w, *y = b->tensors[k].w;
        for (int64_t i = 0; i < a->tensors[k].nel; i++) md = fmax(md, fabs((double)x[i] - (double)y[i]));
    }
    return md;
}

#endif
