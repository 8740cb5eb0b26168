// backend.c - see backend.h: the op table's cells per backend, and the CPU backend.
#include "graph/backend.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cuda/cuda.h"
#include "graph/ops.h"

rg_op_col rg_op_cell(rg_backend_id b, int op) {
    rg_op_col c = {0};
    if (op <= RG_OP_NONE || op >= RG_OP_COUNT || rg_op_defs[op].is_view) return c;
    if (b == RG_BACKEND_CPU) {
        const rg_op_def *d = &rg_op_defs[op];
        c.run = d->cpu;
        c.supports = d->cpu_supports;
        c.work = d->cpu_work;
        c.types = d->cpu ? d->cpu_types : NULL;
        c.group = d->cpu_group;
        c.run_group = d->cpu_run_group;
    } else if (b == RG_BACKEND_CUDA) {
        const rg_op_col *col = rg_cuda_column();
        if (col) c = col[op];
    }
    return c;
}

bool rg_op_cell_runs(rg_backend_id b, const rg_node *n) {
    if (!n) return false;
    const rg_op_col c = rg_op_cell(b, n->op);
    return c.run && (!c.supports || c.supports(n));
}

const char *rg_backend_name(rg_backend_id b) {
    switch (b) {
    case RG_BACKEND_CPU: return "cpu";
    case RG_BACKEND_CUDA: return "cuda";
    default: return "unknown backend";
    }
}

// ---------------------------------------------------------------------------
// The CPU backend: host memory, plain copies.

static rg_op_col cpu_cell(int op) { return rg_op_cell(RG_BACKEND_CPU, op); }

static rg_status cpu_alloc(rg_backend *b, size_t bytes, void **out, rg_error *err) {
    (void)b;
    *out = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64 * (bytes == 0));
    if (!*out) return rg_fail(err, RG_ERR_NOMEM, "cpu: cannot allocate %.2f MiB", (double)bytes / 1048576.0);
    return RG_OK;
}
static void cpu_release(rg_backend *b, void *p) { (void)b, free(p); }
static rg_status cpu_copy(rg_backend *b, void *dst, const void *src, size_t bytes, rg_error *err) {
    (void)b, (void)err;
    if (bytes) memmove(dst, src, bytes);
    return RG_OK;
}
static rg_status cpu_zero(rg_backend *b, void *dst, size_t bytes, rg_error *err) {
    (void)b, (void)err;
    if (bytes) memset(dst, 0, bytes);
    return RG_OK;
}
static rg_status cpu_sync(rg_backend *b, rg_error *err) { return (void)b, (void)err, RG_OK; }
static void cpu_destroy(rg_backend *b) { (void)b; }

static const rg_backend_vt cpu_vt = {
    .id = RG_BACKEND_CPU,
    .cell = cpu_cell,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
};
static rg_backend cpu_backend = {&cpu_vt, NULL, true, "cpu"};

rg_backend *rg_backend_cpu(void) { return &cpu_backend; }

void rg_backend_free(rg_backend *b) {
    if (b && b != &cpu_backend && b->vt->destroy) b->vt->destroy(b);
}
