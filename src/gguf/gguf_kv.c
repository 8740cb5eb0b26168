// gguf_kv.c - looking up, converting and setting metadata pairs and tensors.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "gguf/gguf.h"

size_t rg_gguf_vtype_size(uint32_t type) {
    switch (type) {
    case RG_GGUF_U8: case RG_GGUF_I8: case RG_GGUF_BOOL: return 1;
    case RG_GGUF_U16: case RG_GGUF_I16: return 2;
    case RG_GGUF_U32: case RG_GGUF_I32: case RG_GGUF_F32: return 4;
    case RG_GGUF_U64: case RG_GGUF_I64: case RG_GGUF_F64: return 8;
    default: return 0;
    }
}

const char *rg_gguf_vtype_name(uint32_t type) {
    static const char *names[RG_GGUF_VTYPE_COUNT] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                     "bool", "string", "array", "u64", "i64", "f64"};
    return type < RG_GGUF_VTYPE_COUNT ? names[type] : "unknown";
}

bool rg_gguf_str_eq(rg_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

const rg_gguf_kv *rg_gguf_find(const rg_gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (rg_gguf_str_eq(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const rg_gguf_tensor *rg_gguf_find_tensor(const rg_gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0) return &g->tensors[i];
    return NULL;
}

// Element i of a numeric value as the widest type of its kind.
typedef struct num { int kind; int64_t i; uint64_t u; double f; } num;  // kind: 0 signed, 1 unsigned, 2 float

static bool kv_num(const rg_gguf_kv *kv, uint64_t i, num *out) {
    uint32_t t = kv->type == RG_GGUF_ARRAY ? kv->arr_type : kv->type;
    size_t size = rg_gguf_vtype_size(t);
    if (size == 0 || i >= kv->n) return false;
    const uint8_t *p = (const uint8_t *)kv->data + i * size;
    uint64_t raw = 0;
    for (size_t b = 0; b < size; b++) raw |= (uint64_t)p[b] << (8 * b);
    switch (t) {
    case RG_GGUF_U8: case RG_GGUF_U16: case RG_GGUF_U32: case RG_GGUF_U64: case RG_GGUF_BOOL:
        *out = (num){1, 0, raw, 0};
        return true;
    case RG_GGUF_I8: *out = (num){0, (int8_t)raw, 0, 0}; return true;
    case RG_GGUF_I16: *out = (num){0, (int16_t)raw, 0, 0}; return true;
    case RG_GGUF_I32: *out = (num){0, (int32_t)raw, 0, 0}; return true;
    case RG_GGUF_I64: *out = (num){0, (int64_t)raw, 0, 0}; return true;
    case RG_GGUF_F32: {
        uint32_t r32 = (uint32_t)raw;
        float f;
        memcpy(&f, &r32, 4);
        *out = (num){2, 0, 0, f};
        return true;
    }
    case RG_GGUF_F64: {
        double d;
        memcpy(&d, &raw, 8);
        *out = (num){2, 0, 0, d};
        return true;
    }
    }
    return false;
}

bool rg_gguf_kv_i64(const rg_gguf_kv *kv, uint64_t i, int64_t *out) {
    num n;
    if (!kv_num(kv, i, &n) || n.kind == 2) return false;
    if (n.kind == 1 && n.u > (uint64_t)INT64_MAX) return false;
    *out = n.kind == 1 ? (int64_t)n.u : n.i;
    return true;
}

bool rg_gguf_kv_u64(const rg_gguf_kv *kv, uint64_t i, uint64_t *out) {
    num n;
    if (!kv_num(kv, i, &n) || n.kind == 2) return false;
    if (n.kind == 0 && n.i < 0) return false;
    *out = n.kind == 1 ? n.u : (uint64_t)n.i;
    return true;
}

bool rg_gguf_kv_f64(const rg_gguf_kv *kv, uint64_t i, double *out) {
    num n;
    if (!kv_num(kv, i, &n)) return false;
    *out = n.kind == 2 ? n.f : n.kind == 1 ? (double)n.u : (double)n.i;
    return true;
}

rg_gguf_str rg_gguf_kv_str(const rg_gguf_kv *kv, uint64_t i) {
    bool is_str = kv->type == RG_GGUF_STRING || (kv->type == RG_GGUF_ARRAY && kv->arr_type == RG_GGUF_STRING);
    if (!is_str || i >= kv->n) return (rg_gguf_str){0, NULL};
    return ((const rg_gguf_str *)kv->data)[i];
}

static const rg_gguf_kv *find_scalar(const rg_gguf *g, const char *key, rg_error *err, rg_status *s) {
    const rg_gguf_kv *kv = rg_gguf_find(g, key);
    *s = RG_OK;
    if (!kv) *s = rg_fail(err, RG_ERR_NOT_FOUND, "%s: key '%s' is missing", g->path, key);
    else if (kv->type == RG_GGUF_ARRAY)
        *s = rg_fail(err, RG_ERR_FORMAT, "%s: key '%s' is an array, expected a single value", g->path, key);
    return *s ? NULL : kv;
}

rg_status rg_gguf_get_u64(const rg_gguf *g, const char *key, uint64_t *out, rg_error *err) {
    rg_status s;
    const rg_gguf_kv *kv = find_scalar(g, key, err, &s);
    if (!kv) return s;
    if (kv->type == RG_GGUF_BOOL || !rg_gguf_kv_u64(kv, 0, out))
        return rg_fail(err, RG_ERR_FORMAT, "%s: key '%s' has type %s, expected a non-negative integer", g->path, key,
                       rg_gguf_vtype_name(kv->type));
    return RG_OK;
}

rg_status rg_gguf_get_f64(const rg_gguf *g, const char *key, double *out, rg_error *err) {
    rg_status s;
    const rg_gguf_kv *kv = find_scalar(g, key, err, &s);
    if (!kv) return s;
    if (kv->type == RG_GGUF_BOOL || !rg_gguf_kv_f64(kv, 0, out))
        return rg_fail(err, RG_ERR_FORMAT, "%s: key '%s' has type %s, expected a number", g->path, key,
                       rg_gguf_vtype_name(kv->type));
    return RG_OK;
}

rg_status rg_gguf_get_bool(const rg_gguf *g, const char *key, bool *out, rg_error *err) {
    rg_status s;
    const rg_gguf_kv *kv = find_scalar(g, key, err, &s);
    if (!kv) return s;
    if (kv->type != RG_GGUF_BOOL)
        return rg_fail(err, RG_ERR_FORMAT, "%s: key '%s' has type %s, expected bool", g->path, key,
                       rg_gguf_vtype_name(kv->type));
    *out = *(const uint8_t *)kv->data != 0;
    return RG_OK;
}

rg_status rg_gguf_get_str(const rg_gguf *g, const char *key, rg_gguf_str *out, rg_error *err) {
    rg_status s;
    const rg_gguf_kv *kv = find_scalar(g, key, err, &s);
    if (!kv) return s;
    if (kv->type != RG_GGUF_STRING)
        return rg_fail(err, RG_ERR_FORMAT, "%s: key '%s' has type %s, expected string", g->path, key,
                       rg_gguf_vtype_name(kv->type));
    *out = rg_gguf_kv_str(kv, 0);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// Building

static rg_gguf_kv *slot_for(rg_gguf *g, const char *key, rg_error *err) {
    size_t klen = strlen(key);
    if (klen == 0) {
        rg_fail(err, RG_ERR_ARG, "%s: empty key", g->path);
        return NULL;
    }
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (rg_gguf_str_eq(g->kv[i].key, key)) {
            rg_gguf_str k = g->kv[i].key;
            memset(&g->kv[i], 0, sizeof g->kv[i]);
            g->kv[i].key = k;
            return &g->kv[i];
        }
    if (g->n_kv == g->cap_kv) {
        uint64_t cap = g->cap_kv ? 2 * g->cap_kv : 32;
        rg_gguf_kv *kv = realloc(g->kv, cap * sizeof *kv);
        if (!kv) {
            rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
            return NULL;
        }
        g->kv = kv;
        g->cap_kv = cap;
    }
    rg_gguf_kv *kv = &g->kv[g->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key.ptr = rg_arena_strndup(&g->arena, key, klen);
    if (!kv->key.ptr) {
        rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
        return NULL;
    }
    kv->key.len = klen;
    g->n_kv++;
    return kv;
}

static rg_status copy_strs(rg_gguf *g, rg_gguf_kv *kv, const rg_gguf_str *src, uint64_t n, rg_error *err) {
    rg_gguf_str *v = rg_arena_alloc(&g->arena, (n ? n : 1) * sizeof *v, 8);
    if (!v) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n; i++) {
        char *c = rg_arena_strndup(&g->arena, src[i].ptr ? src[i].ptr : "", src[i].len);
        if (!c) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
        v[i] = (rg_gguf_str){src[i].len, c};
    }
    kv->data = v;
    kv->n = n;
    return RG_OK;
}

static rg_status copy_bytes(rg_gguf *g, rg_gguf_kv *kv, const void *data, size_t bytes, rg_error *err) {
    void *p = rg_arena_alloc(&g->arena, bytes ? bytes : 1, 8);
    if (!p) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
    if (bytes) memcpy(p, data, bytes);
    kv->data = p;
    return RG_OK;
}

// Keeps g->alignment in step with the general.alignment pair as it is written.
static rg_status after_set(rg_gguf *g, const rg_gguf_kv *kv, rg_error *err) {
    if (!rg_gguf_str_eq(kv->key, "general.alignment")) return RG_OK;
    uint64_t a = 0;
    if (kv->type != RG_GGUF_U32 || !rg_gguf_kv_u64(kv, 0, &a) || a == 0 || (a & (a - 1))) {
        rg_gguf_remove(g, "general.alignment");
        return rg_fail(err, RG_ERR_ARG, "%s: general.alignment must be a u32 nonzero power of two", g->path);
    }
    g->alignment = (uint32_t)a;
    return RG_OK;
}

rg_status rg_gguf_set(rg_gguf *g, const char *key, uint32_t type, const void *value, rg_error *err) {
    size_t size = rg_gguf_vtype_size(type);
    if (type != RG_GGUF_STRING && size == 0)
        return rg_fail(err, RG_ERR_ARG, "%s: key '%s': value type %u is not a scalar type", g->path, key, type);
    rg_gguf_kv *kv = slot_for(g, key, err);
    if (!kv) return err ? err->status : RG_ERR_NOMEM;
    kv->type = type;
    kv->n = 1;
    rg_status s;
    if (type == RG_GGUF_STRING) {
        const char *str = value;
        rg_gguf_str v = {strlen(str), str};
        s = copy_strs(g, kv, &v, 1, err);
    } else {
        if (type == RG_GGUF_BOOL && *(const uint8_t *)value > 1)
            return rg_fail(err, RG_ERR_ARG, "%s: key '%s': bool must be 0 or 1", g->path, key);
        s = copy_bytes(g, kv, value, size, err);
    }
    return s ? s : after_set(g, kv, err);
}

rg_status rg_gguf_set_u32(rg_gguf *g, const char *key, uint32_t v, rg_error *err) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return rg_gguf_set(g, key, RG_GGUF_U32, b, err);
}
rg_status rg_gguf_set_i32(rg_gguf *g, const char *key, int32_t v, rg_error *err) {
    return rg_gguf_set(g, key, RG_GGUF_I32, &v, err);  // x86-64 only: host order is little-endian
}
rg_status rg_gguf_set_u64(rg_gguf *g, const char *key, uint64_t v, rg_error *err) {
    return rg_gguf_set(g, key, RG_GGUF_U64, &v, err);
}
rg_status rg_gguf_set_f32(rg_gguf *g, const char *key, float v, rg_error *err) {
    return rg_gguf_set(g, key, RG_GGUF_F32, &v, err);
}
rg_status rg_gguf_set_bool(rg_gguf *g, const char *key, bool v, rg_error *err) {
    uint8_t b = v ? 1 : 0;
    return rg_gguf_set(g, key, RG_GGUF_BOOL, &b, err);
}
rg_status rg_gguf_set_str(rg_gguf *g, const char *key, const char *v, rg_error *err) {
    return rg_gguf_set(g, key, RG_GGUF_STRING, v, err);
}

rg_status rg_gguf_set_array(rg_gguf *g, const char *key, uint32_t elem_type, const void *data, uint64_t n,
                            rg_error *err) {
    size_t size = rg_gguf_vtype_size(elem_type);
    if (size == 0)
        return rg_fail(err, RG_ERR_ARG, "%s: key '%s': array element type %s is not numeric", g->path, key,
                       rg_gguf_vtype_name(elem_type));
    if (n > RG_GGUF_MAX_STRING)
        return rg_fail(err, RG_ERR_ARG, "%s: key '%s': %llu elements is too many", g->path, key, (unsigned long long)n);
    rg_gguf_kv *kv = slot_for(g, key, err);
    if (!kv) return err ? err->status : RG_ERR_NOMEM;
    kv->type = RG_GGUF_ARRAY;
    kv->arr_type = elem_type;
    kv->n = n;
    return copy_bytes(g, kv, data, (size_t)(n * size), err);
}

rg_status rg_gguf_set_str_array(rg_gguf *g, const char *key, const char *const *strs, uint64_t n, rg_error *err) {
    rg_gguf_str *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n; i++) tmp[i] = (rg_gguf_str){strlen(strs[i]), strs[i]};
    rg_status s = RG_OK;
    rg_gguf_kv *kv = slot_for(g, key, err);
    if (!kv) s = err ? err->status : RG_ERR_NOMEM;
    else {
        kv->type = RG_GGUF_ARRAY;
        kv->arr_type = RG_GGUF_STRING;
        s = copy_strs(g, kv, tmp, n, err);
    }
    free(tmp);
    return s;
}

rg_status rg_gguf_set_kv(rg_gguf *g, const rg_gguf_kv *src, rg_error *err) {
    char *key = rg_arena_strndup(&g->arena, src->key.ptr, src->key.len);
    if (!key) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
    rg_gguf_kv *kv = slot_for(g, key, err);
    if (!kv) return err ? err->status : RG_ERR_NOMEM;
    kv->type = src->type;
    kv->arr_type = src->arr_type;
    uint32_t et = src->type == RG_GGUF_ARRAY ? src->arr_type : src->type;
    rg_status s;
    if (et == RG_GGUF_STRING) s = copy_strs(g, kv, src->data, src->n, err);
    else {
        kv->n = src->n;
        s = copy_bytes(g, kv, src->data, (size_t)(src->n * rg_gguf_vtype_size(et)), err);
    }
    return s ? s : after_set(g, kv, err);
}

rg_status rg_gguf_remove(rg_gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (rg_gguf_str_eq(g->kv[i].key, key)) {
            memmove(&g->kv[i], &g->kv[i + 1], (g->n_kv - i - 1) * sizeof *g->kv);
            g->n_kv--;
            if (strcmp(key, "general.alignment") == 0) g->alignment = RG_GGUF_DEFAULT_ALIGNMENT;
            return RG_OK;
        }
    return RG_ERR_NOT_FOUND;
}

rg_status rg_gguf_add_tensor(rg_gguf *g, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                             const void *data, rg_error *err) {
    size_t len = strlen(name);
    if (len == 0 || len > RG_GGUF_MAX_NAME)
        return rg_fail(err, RG_ERR_ARG, "%s: tensor name '%s' must be 1..%d bytes", g->path, name, RG_GGUF_MAX_NAME);
    if (rg_gguf_find_tensor(g, name))
        return rg_fail(err, RG_ERR_ARG, "%s: duplicate tensor name '%s'", g->path, name);
    if (n_dims < 1 || n_dims > RG_GGUF_MAX_DIMS)
        return rg_fail(err, RG_ERR_ARG, "%s: tensor '%s': %u dimensions, expected 1..4", g->path, name, n_dims);
    const rg_type_traits *tt = rg_type_get(type);
    if (tt->role != RG_ROLE_STORAGE)
        return rg_fail(err, RG_ERR_ARG, "%s: tensor '%s': type %u (%s) cannot be stored in a file", g->path, name,
                       type, tt->name);
    rg_gguf_tensor t;
    memset(&t, 0, sizeof t);
    memcpy(t.name, name, len + 1);
    t.n_dims = n_dims;
    t.type = type;
    int64_t nel = 1;
    for (int d = 0; d < RG_GGUF_MAX_DIMS; d++) {
        t.ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0 || (t.ne[d] && nel > INT64_MAX / t.ne[d]))
            return rg_fail(err, RG_ERR_ARG, "%s: tensor '%s': bad dimension %d (%lld)", g->path, name, d,
                           (long long)t.ne[d]);
        nel *= t.ne[d];
    }
    if (t.ne[0] % tt->block_size)
        return rg_fail(err, RG_ERR_ARG, "%s: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %lld",
                       g->path, name, (long long)t.ne[0], tt->name, (long long)tt->block_size);
    t.nbytes = (uint64_t)(nel / tt->block_size) * tt->type_size;
    t.data = data;
    if (g->n_tensors == g->cap_tensors) {
        uint64_t cap = g->cap_tensors ? 2 * g->cap_tensors : 32;
        rg_gguf_tensor *p = realloc(g->tensors, cap * sizeof *p);
        if (!p) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
        g->tensors = p;
        g->cap_tensors = cap;
    }
    g->tensors[g->n_tensors++] = t;
    return RG_OK;
}
