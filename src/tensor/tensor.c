// tensor.c - shapes, strides and views.
#include "tensor/tensor.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"

static rg_status check_shape(uint32_t type, int n_dims, const int64_t *ne, rg_error *err) {
    const rg_type_traits *tt = rg_type_get(type);
    if (tt->role != RG_ROLE_STORAGE && tt->role != RG_ROLE_INTERMEDIATE)
        return rg_fail(err, RG_ERR_ARG, "tensor: type %u (%s) cannot hold data", type, tt->name);
    if (n_dims < 1 || n_dims > RG_MAX_DIMS)
        return rg_fail(err, RG_ERR_ARG, "tensor: %d dimensions, expected 1..%d", n_dims, RG_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] < 0) return rg_fail(err, RG_ERR_ARG, "tensor: dimension %d is negative (%lld)", i, (long long)ne[i]);
        if (ne[i] && n > INT64_MAX / ne[i]) return rg_fail(err, RG_ERR_ARG, "tensor: element count overflows");
        n *= ne[i];
    }
    if (ne[0] % tt->block_size)
        return rg_fail(err, RG_ERR_ARG, "tensor: ne[0] = %lld is not a multiple of the %s block size %lld",
                       (long long)ne[0], tt->name, (long long)tt->block_size);
    if ((uint64_t)(n / tt->block_size) > SIZE_MAX / 2 / tt->type_size)
        return rg_fail(err, RG_ERR_ARG, "tensor: byte size overflows");
    return RG_OK;
}

static void set_contiguous_strides(rg_tensor *t) {
    const rg_type_traits *tt = rg_type_get(t->type);
    t->nb[0] = tt->type_size;
    t->nb[1] = (size_t)(t->ne[0] / tt->block_size) * tt->type_size;
    t->nb[2] = t->nb[1] * (size_t)t->ne[1];
    t->nb[3] = t->nb[2] * (size_t)t->ne[2];
}

static rg_tensor *header(rg_arena *a, uint32_t type, int n_dims, const int64_t *ne, rg_error *err) {
    if (check_shape(type, n_dims, ne, err)) return NULL;
    rg_tensor *t = rg_arena_alloc(a, sizeof *t, 8);
    if (!t) {
        rg_fail(err, RG_ERR_NOMEM, "tensor: out of memory");
        return NULL;
    }
    t->type = type;
    for (int i = 0; i < RG_MAX_DIMS; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    set_contiguous_strides(t);
    return t;
}

rg_tensor *rg_tensor_new(rg_arena *a, uint32_t type, int n_dims, const int64_t *ne, rg_error *err) {
    rg_tensor *t = header(a, type, n_dims, ne, err);
    if (!t) return NULL;
    size_t bytes = rg_tensor_span(t);
    t->data = rg_arena_alloc(a, bytes ? bytes : 1, 64);
    if (!t->data) {
        rg_fail(err, RG_ERR_NOMEM, "tensor: out of memory for %zu bytes", bytes);
        return NULL;
    }
    return t;
}

rg_tensor *rg_tensor_wrap(rg_arena *a, uint32_t type, int n_dims, const int64_t *ne, void *data, rg_error *err) {
    rg_tensor *t = header(a, type, n_dims, ne, err);
    if (t) t->data = data;
    return t;
}

int64_t rg_tensor_nelements(const rg_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
int64_t rg_tensor_nrows(const rg_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

size_t rg_tensor_row_size(const rg_tensor *t) { return rg_type_row_size(t->type, t->ne[0]); }

size_t rg_tensor_span(const rg_tensor *t) {
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (t->ne[i] == 0) return 0;
    const rg_type_traits *tt = rg_type_get(t->type);
    size_t last = 0;
    // Offset of the last block, plus its size.
    last += (size_t)(t->ne[0] / tt->block_size - 1) * t->nb[0];
    for (int i = 1; i < RG_MAX_DIMS; i++) last += (size_t)(t->ne[i] - 1) * t->nb[i];
    return last + tt->type_size;
}

bool rg_tensor_is_contiguous(const rg_tensor *t) {
    const rg_type_traits *tt = rg_type_get(t->type);
    size_t next = tt->type_size;
    if (t->ne[0] != tt->block_size && t->nb[0] != next) return false;
    next = (size_t)(t->ne[0] / tt->block_size) * tt->type_size;
    for (int i = 1; i < RG_MAX_DIMS; i++) {
        if (t->ne[i] != 1) {
            if (t->nb[i] != next) return false;
            next *= (size_t)t->ne[i];
        }
    }
    return true;
}

bool rg_tensor_rows_contiguous(const rg_tensor *t) {
    return t->ne[0] / rg_type_get(t->type)->block_size <= 1 || t->nb[0] == rg_type_get(t->type)->type_size;
}

bool rg_tensor_is_transposed(const rg_tensor *t) { return t->nb[0] > t->nb[1]; }

bool rg_tensor_same_shape(const rg_tensor *a, const rg_tensor *b) {
    for (int i = 0; i < RG_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i]) return false;
    return true;
}

const char *rg_tensor_shape_str(const rg_tensor *t, char *buf, size_t cap) {
    int n_dims = RG_MAX_DIMS;
    while (n_dims > 1 && t->ne[n_dims - 1] == 1) n_dims--;
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n_dims && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

static rg_tensor *owner(rg_tensor *t) { return t->view_src ? t->view_src : t; }

rg_tensor *rg_tensor_view(rg_arena *a, rg_tensor *src, int n_dims, const int64_t *ne, const size_t *nb, size_t offset,
                          rg_error *err) {
    rg_tensor *v = header(a, src->type, n_dims, ne, err);
    if (!v) return NULL;
    for (int i = 0; i < n_dims; i++) v->nb[i] = nb[i];
    for (int i = n_dims; i < RG_MAX_DIMS; i++) v->nb[i] = v->nb[n_dims - 1] * (size_t)v->ne[n_dims - 1];
    rg_tensor *o = owner(src);
    size_t base = (size_t)((char *)src->data - (char *)o->data) + offset;
    size_t span = rg_tensor_span(v);
    size_t limit = rg_tensor_span(o);
    if (span && (base > limit || span > limit - base)) {
        char s1[64], s2[64];
        rg_fail(err, RG_ERR_ARG, "view: a window %s at byte offset %zu spans %zu bytes, beyond the %zu bytes of %s%s%s",
                rg_tensor_shape_str(v, s1, sizeof s1), offset, span, limit, o->name[0] ? o->name : "tensor ",
                o->name[0] ? " " : "", rg_tensor_shape_str(o, s2, sizeof s2));
        return NULL;
    }
    v->data = (char *)o->data + base;
    v->view_src = o;
    v->view_offs = base;
    return v;
}

rg_tensor *rg_tensor_reshape(rg_arena *a, rg_tensor *src, int n_dims, const int64_t *ne, rg_error *err) {
    char s1[64], s2[64];
    if (!rg_tensor_is_contiguous(src))
        return rg_fail(err, RG_ERR_ARG, "reshape: source %s is not contiguous", rg_tensor_shape_str(src, s1, sizeof s1)),
               NULL;
    rg_tensor *v = header(a, src->type, n_dims, ne, err);
    if (!v) return NULL;
    if (rg_tensor_nelements(v) != rg_tensor_nelements(src))
        return rg_fail(err, RG_ERR_ARG, "reshape: %s has %lld elements, %s has %lld", rg_tensor_shape_str(src, s1, sizeof s1),
                       (long long)rg_tensor_nelements(src), rg_tensor_shape_str(v, s2, sizeof s2),
                       (long long)rg_tensor_nelements(v)),
               NULL;
    rg_tensor *o = owner(src);
    v->data = src->data;
    v->view_src = o;
    v->view_offs = (size_t)((char *)src->data - (char *)o->data);
    return v;
}

rg_tensor *rg_tensor_permute(rg_arena *a, rg_tensor *src, const int axes[RG_MAX_DIMS], rg_error *err) {
    int seen = 0;
    for (int i = 0; i < RG_MAX_DIMS; i++) {
        if (axes[i] < 0 || axes[i] >= RG_MAX_DIMS || (seen >> axes[i] & 1))
            return rg_fail(err, RG_ERR_ARG, "permute: axes (%d, %d, %d, %d) are not a permutation of 0..3", axes[0],
                           axes[1], axes[2], axes[3]),
                   NULL;
        seen |= 1 << axes[i];
    }
    if (rg_type_get(src->type)->block_size != 1 && axes[0] != 0)
        return rg_fail(err, RG_ERR_ARG, "permute: a %s tensor keeps its blocks along dimension 0",
                       rg_type_get(src->type)->name),
               NULL;
    rg_tensor *v = rg_arena_alloc(a, sizeof *v, 8);
    if (!v) return rg_fail(err, RG_ERR_NOMEM, "permute: out of memory"), NULL;
    *v = *src;
    for (int i = 0; i < RG_MAX_DIMS; i++) {
        v->ne[axes[i]] = src->ne[i];
        v->nb[axes[i]] = src->nb[i];
    }
    v->view_src = owner(src);
    v->view_offs = (size_t)((char *)src->data - (char *)v->view_src->data);
    v->name[0] = 0;
    return v;
}

rg_tensor *rg_tensor_transpose(rg_arena *a, rg_tensor *src, rg_error *err) {
    static const int axes[RG_MAX_DIMS] = {1, 0, 2, 3};
    return rg_tensor_permute(a, src, axes, err);
}
