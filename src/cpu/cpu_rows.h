// cpu_rows.h - checks and row addressing shared by the row-wise CPU kernels
// (norms, rope, softmax, cross-entropy): each works on rows of ne[0] packed
// F32 values, rows flattened over dimensions 1..3.
#ifndef RG_CPU_ROWS_H
#define RG_CPU_ROWS_H

#include "base/error.h"
#include "base/threadpool.h"
#include "graph/graph.h"

// Runs fn on the pool, or on the calling thread alone when the node is small
// (work: its elements, weighted by the caller): handing a few thousand
// elements to another thread and waiting for it costs more than the work
// (token generation has hundreds of such nodes per token). The kernels split
// by rows and never split a row's reduction, so the bits are the same.
#define RG_ROWS_SERIAL_MAX 16384
static inline void run_rows(rg_threadpool *pool, rg_parallel_fn fn, void *job, int64_t work) {
    if (work < RG_ROWS_SERIAL_MAX) fn(job, 0, 1);
    else rg_threadpool_run(pool, fn, job);
}

// An F32 tensor whose rows are packed (nb[0] == 4; a row of one element may
// have any nb[0]).
static inline rg_status need_f32_rows(const char *op, const rg_node *n, const rg_tensor *t, const char *what,
                                      rg_error *err) {
    if (!t || !t->data) return rg_fail(err, RG_ERR_ARG, "%s '%s': %s has no data", op, n->t.name, what);
    if (t->type != RG_TYPE_F32)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s '%s': %s is %s, expected f32", op, n->t.name, what,
                       rg_type_get(t->type)->name);
    if (t->ne[0] > 1 && t->nb[0] != sizeof(float))
        return rg_fail(err, RG_ERR_ARG, "%s '%s': %s has element stride %zu bytes, expected packed rows (4)", op,
                       n->t.name, what, t->nb[0]);
    return RG_OK;
}

static inline rg_status need_same_shape(const char *op, const rg_node *n, const rg_tensor *a, const char *what,
                                        rg_error *err) {
    if (rg_tensor_same_shape(&n->t, a)) return RG_OK;
    char s1[96], s2[96];
    return rg_fail(err, RG_ERR_ARG, "%s '%s': output %s and %s %s differ in shape", op, n->t.name,
                   rg_tensor_shape_str(&n->t, s1, sizeof s1), what, rg_tensor_shape_str(a, s2, sizeof s2));
}

// Row r (flat over dims 1..3) of t.
static inline float *row_at(const rg_tensor *t, int64_t r) {
    int64_t i1 = r % t->ne[1], i23 = r / t->ne[1];
    int64_t i2 = i23 % t->ne[2], i3 = i23 / t->ne[2];
    return (float *)((char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
}

#endif
