// optim.c - see optim.h.
#include "train/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"

#define NORM_BLOCK 4096  // §1.4: fixed blocks of squares, summed in double
#define CHUNK 2048       // elements per update chunk (a stack buffer of theta)

// ---------------------------------------------------------------------------
// Global norm: each thread sums whole blocks into its own slots; the blocks are
// then added in index order, so the value does not depend on the split. Within
// a block the squares go to 16 lanes (rg_sumsq_f64): one running sum would be a
// chain of dependent double adds, 7 GB/s where the memory gives several times that.
typedef struct norm_job {
    const float *g;
    int64_t nel, n_blocks;
    double *block_sums;  // [n_blocks]
} norm_job;

static void norm_range(void *p, int ith, int nth) {
    norm_job *j = p;
    int64_t b0, b1;
    rg_split_range(j->n_blocks, ith, nth, &b0, &b1);
    for (int64_t b = b0; b < b1; b++) {
        int64_t i0 = b * NORM_BLOCK, i1 = i0 + NORM_BLOCK < j->nel ? i0 + NORM_BLOCK : j->nel;
        j->block_sums[b] = rg_sumsq_f64(j->g + i0, i1 - i0);
    }
}

double rg_grad_global_norm(const rg_train_tensor *ts, int n, rg_threadpool *pool) {
    double total = 0.0;
    double local[64];
    for (int k = 0; k < n; k++) {
        const rg_train_tensor *t = &ts[k];
        int64_t n_blocks = (t->nel + NORM_BLOCK - 1) / NORM_BLOCK;
        double *sums = n_blocks <= 64 ? local : malloc(sizeof(double) * (size_t)n_blocks);
        if (!sums) return NAN;  // out of memory reads as "not finite": the step is skipped, not corrupted
        norm_job j = {.g = t->grad, .nel = t->nel, .n_blocks = n_blocks, .block_sums = sums};
        if (n_blocks > 1) rg_threadpool_run(pool, norm_range, &j);
        else norm_range(&j, 0, 1);
        for (int64_t b = 0; b < n_blocks; b++) total += sums[b];
        if (sums != local) free(sums);
    }
    return sqrt(total);
}

float rg_clip_coef(double total, double max_norm) {
    if (!(max_norm > 0.0)) return 1.0f;
    double c = max_norm / (total + 1e-6);
    return (float)(c < 1.0 ? c : 1.0);
}

double rg_schedule_factor(int kind, int64_t s, int64_t warmup, int64_t total) {
    if (s < warmup) return (double)s / (double)(warmup > 1 ? warmup : 1);
    double span = (double)(total - warmup > 1 ? total - warmup : 1);
    switch (kind) {
    case 1: {  // linear
        double f = (double)(total - s) / span;
        return f > 0.0 ? f : 0.0;
    }
    case 2: {  // cosine, half a cycle
        double p = (double)(s - warmup) / span;
        double f = 0.5 * (1.0 + cos(M_PI * 2.0 * 0.5 * p));
        return f > 0.0 ? f : 0.0;
    }
    default:
        return 1.0;
    }
}

// ---------------------------------------------------------------------------
// The update of one tensor, over element chunks split across threads.
typedef struct update_job {
    rg_train_tensor *t;
    const rg_optim_step *s;
    float fp[8];        // the row kernel's scalars, computed once in double and cast (§2.6)
    int64_t n_chunks;
} update_job;

static void update_range(void *p, int ith, int nth) {
    update_job *j = p;
    rg_train_tensor *t = j->t;
    const rg_optim_step *s = j->s;
    float theta[CHUNK];
    int64_t c0, c1;
    rg_split_range(j->n_chunks, ith, nth, &c0, &c1);
    for (int64_t c = c0; c < c1; c++) {
        const int64_t i0 = c * CHUNK, n = (i0 + CHUNK < t->nel ? i0 + CHUNK : t->nel) - i0;
        // theta: the master, the F32 weight itself, or the exact upcast of a half weight (cpu_ops.h)
        float *th = rg_optim_theta(t->type, t->w, t->master, i0, n, theta);
        const float *g = t->grad + i0;
        if (s->optimizer == 0) rg_adamw_row(th, th, g, t->m + i0, t->v + i0, n, j->fp);
        else if (t->m) rg_sgd_momentum_row(th, th, g, t->m + i0, n, j->fp);  // the graph op's row (ops_optim.c)
        else rg_sgd_row(th, th, g, n, j->fp);
        rg_optim_store(t->type, t->w, i0, th, n, t->master != NULL, s->seed, (uint32_t)s->t, t->id);
    }
}

rg_status rg_optim_apply(rg_train_tensor *ts, int n, const rg_optim_step *s, rg_threadpool *pool, rg_error *err) {
    const double bc1 = 1.0 - pow(s->beta1, (double)s->t), bc2 = 1.0 - pow(s->beta2, (double)s->t);
    for (int k = 0; k < n; k++) {
        rg_train_tensor *t = &ts[k];
        if (t->type != RG_TYPE_F32 && t->type != RG_TYPE_F16 && t->type != RG_TYPE_BF16)
            return rg_fail(err, RG_ERR_UNSUPPORTED, "optimizer: tensor '%s' is stored as %s; only f32, f16 and bf16 train in place",
                           t->name, rg_type_get(t->type)->name);
        if (!t->grad) return rg_fail(err, RG_ERR_ARG, "optimizer: tensor '%s' has no gradient", t->name);
        if (s->optimizer == 0 && (!t->m || !t->v))
            return rg_fail(err, RG_ERR_ARG, "optimizer: tensor '%s' has no AdamW moments", t->name);
        if (s->optimizer == 1 && s->momentum != 0.0 && !t->m)
            return rg_fail(err, RG_ERR_ARG, "optimizer: tensor '%s' has no momentum buffer", t->name);
        const double wd = t->decay ? s->weight_decay : 0.0;
        update_job j = {.t = t, .s = s, .n_chunks = (t->nel + CHUNK - 1) / CHUNK};
        if (s->optimizer == 0) {
            j.fp[0] = (float)(s->lr / bc1);
            j.fp[1] = (float)(1.0 - s->beta1);
            j.fp[2] = (float)s->beta2;
            j.fp[3] = (float)(1.0 - s->beta2);
            j.fp[4] = (float)s->eps;
            j.fp[5] = (float)(1.0 - s->lr * wd);
            j.fp[6] = (float)sqrt(bc2);
            j.fp[7] = s->clip;
        } else {
            j.fp[0] = (float)s->lr;
            j.fp[1] = (float)wd;
            j.fp[2] = s->clip;
            j.fp[3] = (float)s->momentum;
            j.fp[4] = s->t == 1 ? 1.0f : 0.0f;  // the first step: b = g
        }
        if (j.n_chunks > 1) rg_threadpool_run(pool, update_range, &j);
        else update_range(&j, 0, 1);
    }
    return RG_OK;
}
