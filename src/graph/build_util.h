// build_util.h - what the op constructors (build.c, build_loss_optim.c, build_ssm.c,
// build_flash.c) share: the graph's first error, shape strings, the node allocator and
// the checks every family makes. Internal to src/graph.
#ifndef RG_GRAPH_BUILD_UTIL_H
#define RG_GRAPH_BUILD_UTIL_H

#include <stdarg.h>
#include <stdio.h>

#include "graph/ops.h"

// A node of op with sources s0..s3 (the others NULL), its shape ne and type; NULL after
// recording the error when memory runs out or the shape is refused.
rg_node *rg_build_node(rg_graph *g, rg_op op, uint32_t type, const int64_t ne[RG_MAX_DIMS], rg_node *s0, rg_node *s1,
                       rg_node *s2, rg_node *s3);
static inline rg_node *node_new(rg_graph *g, rg_op op, uint32_t type, const int64_t ne[RG_MAX_DIMS], rg_node *s0,
                                rg_node *s1, rg_node *s2, rg_node *s3) {
    return rg_build_node(g, op, type, ne, s0, s1, s2, s3);
}

// Records the first error only: later ones are usually its consequences.
static inline void vfail(rg_graph *g, rg_status s, const char *fmt, va_list ap) {
    if (g->err.status == RG_OK) {
        g->err.status = s;
        vsnprintf(g->err.msg, sizeof g->err.msg, fmt, ap);
    }
}
static inline rg_node *fail(rg_graph *g, rg_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline rg_node *fail(rg_graph *g, rg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(g, s, fmt, ap);
    va_end(ap);
    return NULL;
}
// The same for a check that answers true or false.
static inline bool refuse(rg_graph *g, rg_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline bool refuse(rg_graph *g, rg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(g, s, fmt, ap);
    va_end(ap);
    return false;
}

static inline const char *shape(const rg_node *n, char *buf) {
    char s[64];
    rg_tensor_shape_str(&n->t, s, sizeof s);
    snprintf(buf, 160, "%s%s%s %s", n->t.name[0] ? "'" : "", n->t.name, n->t.name[0] ? "'" : "", s);
    return buf;
}

static inline bool same_shape(const rg_node *a, const rg_node *b) { return rg_tensor_same_shape(&a->t, &b->t); }

static inline const int64_t *ne_of(const rg_node *n) { return n->t.ne; }

#define REQUIRE(...) \
    do { for (rg_node *rq_[] = {__VA_ARGS__}, **p_ = rq_; p_ < rq_ + sizeof rq_ / sizeof *rq_; p_++) if (!*p_) return NULL; } while (0)

static inline bool is_f32(const rg_node *n) { return n->t.type == RG_TYPE_F32; }

// Ops that read whole rows want them packed; a strided source gets a CONT (NULL stays NULL).
static inline rg_node *contiguous(rg_graph *g, rg_node *a) {
    return !a || rg_tensor_is_contiguous(&a->t) ? a : rg_cont(g, a);
}

static inline rg_node *need_f32(rg_graph *g, const char *op, rg_node *a, const char *what) {
    char s[160];
    if (!is_f32(a)) return fail(g, RG_ERR_ARG, "%s: %s %s has type %s, expected f32", op, what, shape(a, s), rg_type_get(a->t.type)->name);
    return a;
}

#endif
