// gguf_write.c - serialize an rg_gguf (spec §1.8), atomically.
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "gguf/gguf.h"

static rg_status put_u32(rg_atomic_file *f, uint32_t v, rg_error *err) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return rg_atomic_write(f, b, 4, err);
}

static rg_status put_u64(rg_atomic_file *f, uint64_t v, rg_error *err) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    return rg_atomic_write(f, b, 8, err);
}

static rg_status put_str(rg_atomic_file *f, rg_gguf_str s, rg_error *err) {
    rg_status st = put_u64(f, s.len, err);
    return st ? st : rg_atomic_write(f, s.ptr, (size_t)s.len, err);
}

static rg_status put_kv(rg_atomic_file *f, const rg_gguf_kv *kv, rg_error *err) {
    rg_status s = put_str(f, kv->key, err);
    if (!s) s = put_u32(f, kv->type, err);
    if (s) return s;
    uint32_t et = kv->type;
    if (kv->type == RG_GGUF_ARRAY) {
        et = kv->arr_type;
        if ((s = put_u32(f, kv->arr_type, err)) || (s = put_u64(f, kv->n, err))) return s;
    }
    if (et == RG_GGUF_STRING) {
        const rg_gguf_str *v = kv->data;
        for (uint64_t i = 0; i < kv->n && !s; i++) s = put_str(f, v[i], err);
        return s;
    }
    return rg_atomic_write(f, kv->data, (size_t)(kv->n * rg_gguf_vtype_size(et)), err);
}

static uint64_t pad_to(uint64_t n, uint32_t align) { return (align - n % align) % align; }

// Tensor i's data: its bytes, or fill's chunks through buf.
static rg_status put_data(rg_atomic_file *f, const rg_gguf_tensor *t, uint64_t i, rg_gguf_fill_fn fill, void *ctx,
                          void *buf, rg_error *err) {
    if (t->data || !t->nbytes) return rg_atomic_write(f, t->data, (size_t)t->nbytes, err);
    const rg_type_traits *tt = rg_type_get(t->type);
    const size_t chunk = RG_GGUF_FILL_CHUNK / tt->type_size * tt->type_size;
    rg_status s = RG_OK;
    for (uint64_t off = 0; off < t->nbytes && !s; off += chunk) {
        const size_t n = t->nbytes - off < chunk ? (size_t)(t->nbytes - off) : chunk;
        s = fill(ctx, i, off, buf, n, err);
        if (!s) s = rg_atomic_write(f, buf, n, err);
    }
    return s;
}

rg_status rg_gguf_write_filled(const rg_gguf *g, const char *path, rg_gguf_fill_fn fill, void *ctx, rg_error *err) {
    uint32_t align = g->alignment ? g->alignment : RG_GGUF_DEFAULT_ALIGNMENT;
    bool any_fill = false;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (!g->tensors[i].nbytes || g->tensors[i].data) continue;
        if (!fill) return rg_fail(err, RG_ERR_ARG, "%s: tensor '%s' has no data to write", path, g->tensors[i].name);
        any_fill = true;
    }
    void *buf = any_fill ? malloc(RG_GGUF_FILL_CHUNK) : NULL;
    if (any_fill && !buf) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory for a %zu MiB write buffer", path,
                                         RG_GGUF_FILL_CHUNK >> 20);
    rg_atomic_file f;
    rg_status s = rg_atomic_open(&f, path, err);
    if (s) {
        free(buf);
        return s;
    }
    s = put_u32(&f, RG_GGUF_MAGIC, err);
    if (!s) s = put_u32(&f, g->version ? g->version : 3, err);
    if (!s) s = put_u64(&f, g->n_tensors, err);
    if (!s) s = put_u64(&f, g->n_kv, err);
    for (uint64_t i = 0; i < g->n_kv && !s; i++) s = put_kv(&f, &g->kv[i], err);
    uint64_t offset = 0;
    for (uint64_t i = 0; i < g->n_tensors && !s; i++) {
        const rg_gguf_tensor *t = &g->tensors[i];
        s = put_str(&f, (rg_gguf_str){strlen(t->name), t->name}, err);
        if (!s) s = put_u32(&f, t->n_dims, err);
        for (uint32_t d = 0; d < t->n_dims && !s; d++) s = put_u64(&f, (uint64_t)t->ne[d], err);
        if (!s) s = put_u32(&f, t->type, err);
        if (!s) s = put_u64(&f, offset, err);
        offset += t->nbytes + pad_to(t->nbytes, align);
    }
    if (!s) s = rg_atomic_write_zeros(&f, (size_t)pad_to(f.written, align), err);
    for (uint64_t i = 0; i < g->n_tensors && !s; i++) {
        const rg_gguf_tensor *t = &g->tensors[i];
        s = put_data(&f, t, i, fill, ctx, buf, err);
        if (!s) s = rg_atomic_write_zeros(&f, (size_t)pad_to(t->nbytes, align), err);
    }
    free(buf);
    if (s) {
        rg_atomic_abort(&f);
        return s;
    }
    return rg_atomic_commit(&f, err);
}

rg_status rg_gguf_write(const rg_gguf *g, const char *path, rg_error *err) {
    return rg_gguf_write_filled(g, path, NULL, NULL, err);
}
