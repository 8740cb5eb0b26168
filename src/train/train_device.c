// train_device.c - a training run whose tensors live on a device (train_state.h).
//
// The run's two graphs are the CPU's (train_step.c, optim.h's rg_optim_graph); here they get
// a backend and one set of resident copies (graph/exec.h's rg_resident) that both execs share:
// the parameters, the gradient accumulators and the optimizer state stay on the device. A step
// thus moves the rows' tokens, labels, positions and masks in, and the loss and the gradients'
// sum of squares (8 bytes) out; nothing else crosses. The norm, clip and updates are the CPU's
// ops with the CPU's bits (SUMSQ, CLIP_COEF, ADAMW/SGD: cuda/ops_optim.cu), so given the same
// gradients the device's norm and stored weights are the CPU's bits. Checkpoints download the
// device copies first (rg_train_state_sync_host); a resumed run uploads what it loaded
// (rg_train_state_refresh_device).
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "train/train_state.h"

// What the device run adds to the state (owned by it through s->dev_run).
typedef struct rg_train_device {
    rg_backend *backend;
    rg_resident *res;
} rg_train_device;

rg_status rg_train_device_create(rg_train_state *s, rg_device device, rg_exec_opts *eo, rg_error *err) {
    rg_train_device *d = s->dev_run = calloc(1, sizeof *d);
    if (!d) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    rg_status st = device == RG_DEVICE_CUDA ? rg_backend_cuda_create(&d->backend, 0, err)
                                            : rg_fail(err, RG_ERR_ARG, "train: unknown device %d", (int)device);
    if (!st) st = rg_resident_create(&d->res, d->backend, err);
    eo->backend = d->backend, eo->resident = d->res;
    return st;
}

// After the execs (rg_train_state_free frees them first).
void rg_train_device_free(rg_train_state *s) {
    rg_train_device *d = s->dev_run;
    if (!d) return;
    rg_resident_free(d->res);
    rg_backend_free(d->backend);
    free(d);
    s->dev_run = NULL;
}

rg_status rg_train_state_sync_host(rg_train_state *s, rg_error *err) {
    return s->dev_run ? rg_resident_sync_host(s->dev_run->res, err) : RG_OK;
}

rg_status rg_train_state_refresh_device(rg_train_state *s, rg_error *err) {
    rg_train_device *d = s->dev_run;
    for (int k = 0; d && k < s->n_tensors; k++) {
        const rg_train_tensor *t = &s->tensors[k];
        const size_t n4 = (size_t)t->nel * 4;
        const size_t nw = (size_t)t->nel * rg_type_get(t->type)->type_size;
        rg_status st = rg_resident_refresh(d->res, t->w, nw, err);
        if (!st && t->master) st = rg_resident_refresh(d->res, t->master, n4, err);
        if (!st && t->m) st = rg_resident_refresh(d->res, t->m, n4, err);
        if (!st && t->v) st = rg_resident_refresh(d->res, t->v, n4, err);
        if (st) return st;
    }
    return RG_OK;
}

void rg_train_device_usage(const rg_train_state *s, size_t *resident, size_t *used, size_t *free_bytes) {
    const rg_train_device *d = s->dev_run;
    *resident = rg_resident_bytes(d->res);
    *used = *free_bytes = 0;
    size_t fr = 0, tot = 0;
    rg_error ignored;
    if (d->backend->vt->mem_info && d->backend->vt->mem_info(d->backend, &fr, &tot, &ignored) == RG_OK)
        *used = tot - fr, *free_bytes = fr;
}
