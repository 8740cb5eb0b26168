// gguf_read.c - parse and validate a GGUF file (spec §1, checklist §1.10).
//
// The file is hostile until proven otherwise: every read is bounds-checked
// against the bytes that remain, every count is checked against what those
// bytes could hold before anything is allocated from it, and every product
// is checked for overflow. Failures name the file, the byte offset and what
// was expected there.
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "gguf/gguf.h"

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *path;
    rg_error *err;
} cursor;

static rg_status truncated(cursor *c, uint64_t need, const char *what) {
    return rg_fail(c->err, RG_ERR_FORMAT,
                   "%s: truncated at offset %llu: expected %llu bytes of %s, but the file ends at %llu", c->path,
                   (unsigned long long)c->pos, (unsigned long long)need, what, (unsigned long long)c->size);
}

static rg_status take(cursor *c, uint64_t n, const char *what, const uint8_t **out) {
    if (n > c->size - c->pos) return truncated(c, n, what);
    *out = c->base + c->pos;
    c->pos += n;
    return RG_OK;
}

static rg_status read_u32(cursor *c, const char *what, uint32_t *v) {
    const uint8_t *p = NULL;
    rg_status s = take(c, 4, what, &p);
    if (s) return s;
    *v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return RG_OK;
}

static rg_status read_u64(cursor *c, const char *what, uint64_t *v) {
    const uint8_t *p = NULL;
    rg_status s = take(c, 8, what, &p);
    if (s) return s;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | p[i];
    *v = x;
    return RG_OK;
}

static rg_status read_str(cursor *c, const char *what, rg_gguf_str *out) {
    uint64_t at = c->pos;
    uint64_t len;
    rg_status s = read_u64(c, what, &len);
    if (s) return s;
    if (len > RG_GGUF_MAX_STRING)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: %s has length %llu, over the limit of %llu bytes",
                       c->path, (unsigned long long)at, what, (unsigned long long)len,
                       (unsigned long long)RG_GGUF_MAX_STRING);
    const uint8_t *p = NULL;
    s = take(c, len, what, &p);
    if (s) return s;
    out->len = len;
    out->ptr = (const char *)p;
    return RG_OK;
}

// ---------------------------------------------------------------------------
// A set of strings for duplicate detection: open addressing, FNV-1a. Linear
// duplicate checks would let a file of a million tiny keys hang the reader.

typedef struct str_set {
    const rg_gguf_str **slots;
    uint64_t cap;
} str_set;

static uint64_t str_hash(const rg_gguf_str *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < s->len; i++) h = (h ^ (uint8_t)s->ptr[i]) * 1099511628211ull;
    return h;
}

static bool str_set_init(str_set *set, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    set->cap = cap;
    set->slots = calloc(cap, sizeof *set->slots);
    return set->slots != NULL;
}

// Returns the string already present that equals s, or NULL after inserting s.
static const rg_gguf_str *str_set_insert(str_set *set, const rg_gguf_str *s) {
    uint64_t i = str_hash(s) & (set->cap - 1);
    while (set->slots[i]) {
        const rg_gguf_str *o = set->slots[i];
        if (o->len == s->len && memcmp(o->ptr, s->ptr, s->len) == 0) return o;
        i = (i + 1) & (set->cap - 1);
    }
    set->slots[i] = s;
    return NULL;
}

// ---------------------------------------------------------------------------

static rg_status parse_value(cursor *c, rg_gguf *g, rg_gguf_kv *kv, uint64_t value_at) {
    const char *key = kv->key.ptr;  // NUL-terminated copy, see parse_kvs
    if (kv->type == RG_GGUF_STRING) {
        rg_gguf_str *v = rg_arena_alloc(&g->arena, sizeof *v, 8);
        if (!v) return rg_fail(c->err, RG_ERR_NOMEM, "%s: out of memory", c->path);
        rg_status s = read_str(c, "a string value", v);
        if (s) return s;
        kv->n = 1;
        kv->data = v;
        return RG_OK;
    }
    if (kv->type == RG_GGUF_ARRAY) {
        rg_status s = read_u32(c, "an array element type", &kv->arr_type);
        if (s) return s;
        if (kv->arr_type == RG_GGUF_ARRAY)
            return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: key '%s' is an array of arrays, which GGUF readers do not accept",
                           c->path, (unsigned long long)value_at, key);
        if (kv->arr_type >= RG_GGUF_VTYPE_COUNT)
            return rg_fail(c->err, RG_ERR_FORMAT,
                           "%s: offset %llu: key '%s' has unknown array element type %u (expected 0..12)", c->path,
                           (unsigned long long)value_at, key, kv->arr_type);
        uint64_t count_at = c->pos;
        s = read_u64(c, "an array length", &kv->n);
        if (s) return s;
        uint64_t remaining = c->size - c->pos;
        uint64_t elem = kv->arr_type == RG_GGUF_STRING ? 8 : rg_gguf_vtype_size(kv->arr_type);
        if (kv->n > RG_GGUF_MAX_STRING || kv->n > remaining / elem)
            return rg_fail(c->err, RG_ERR_FORMAT,
                           "%s: offset %llu: key '%s' claims %llu array elements, but only %llu bytes remain "
                           "(each element needs at least %llu)",
                           c->path, (unsigned long long)count_at, key, (unsigned long long)kv->n,
                           (unsigned long long)remaining, (unsigned long long)elem);
        if (kv->arr_type == RG_GGUF_STRING) {
            rg_gguf_str *v = kv->n ? rg_arena_alloc(&g->arena, kv->n * sizeof *v, 8) : NULL;
            if (kv->n && !v) return rg_fail(c->err, RG_ERR_NOMEM, "%s: out of memory for %llu strings", c->path,
                                            (unsigned long long)kv->n);
            for (uint64_t i = 0; i < kv->n; i++) {
                s = read_str(c, "an array string", &v[i]);
                if (s) return s;
            }
            kv->data = v;
            return RG_OK;
        }
        const uint8_t *p = NULL;
        s = take(c, kv->n * elem, "array data", &p);
        if (s) return s;
        if (kv->arr_type == RG_GGUF_BOOL)
            for (uint64_t i = 0; i < kv->n; i++)
                if (p[i] > 1)
                    return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: key '%s' element %llu is bool byte %u, expected 0 or 1",
                                   c->path, (unsigned long long)(p + i - c->base), key, (unsigned long long)i, p[i]);
        kv->data = p;
        return RG_OK;
    }
    size_t size = rg_gguf_vtype_size(kv->type);
    if (size == 0)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: key '%s' has unknown value type %u (expected 0..12)",
                       c->path, (unsigned long long)value_at, key, kv->type);
    const uint8_t *p = NULL;
    rg_status s = take(c, size, "a value", &p);
    if (s) return s;
    if (kv->type == RG_GGUF_BOOL && p[0] > 1)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: key '%s' is bool byte %u, expected 0 or 1", c->path,
                       (unsigned long long)(p - c->base), key, p[0]);
    kv->n = 1;
    kv->data = p;
    return RG_OK;
}

static rg_status parse_kvs(cursor *c, rg_gguf *g) {
    str_set seen;
    if (!str_set_init(&seen, g->n_kv)) return rg_fail(c->err, RG_ERR_NOMEM, "%s: out of memory", c->path);
    rg_status s = RG_OK;
    for (uint64_t i = 0; i < g->n_kv && !s; i++) {
        rg_gguf_kv *kv = &g->kv[i];
        kv->file_offset = c->pos;
        rg_gguf_str raw;
        if ((s = read_str(c, "a key", &raw))) break;
        if (raw.len == 0) {
            s = rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: key %llu is empty", c->path,
                        (unsigned long long)kv->file_offset, (unsigned long long)i);
            break;
        }
        // Keep a NUL-terminated copy so keys can be used as C strings.
        char *key = rg_arena_strndup(&g->arena, raw.ptr, raw.len);
        if (!key) {
            s = rg_fail(c->err, RG_ERR_NOMEM, "%s: out of memory", c->path);
            break;
        }
        if (strlen(key) != raw.len) {
            s = rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: key '%s...' contains a NUL byte", c->path,
                        (unsigned long long)kv->file_offset, key);
            break;
        }
        kv->key.ptr = key;
        kv->key.len = raw.len;
        if (str_set_insert(&seen, &kv->key)) {
            s = rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: duplicate key '%s'", c->path,
                        (unsigned long long)kv->file_offset, key);
            break;
        }
        uint64_t type_at = c->pos;
        if ((s = read_u32(c, "a value type", &kv->type))) break;
        s = parse_value(c, g, kv, type_at);
    }
    free(seen.slots);
    return s;
}

static rg_status check_alignment(cursor *c, rg_gguf *g) {
    g->alignment = RG_GGUF_DEFAULT_ALIGNMENT;
    const rg_gguf_kv *kv = rg_gguf_find(g, "general.alignment");
    if (!kv) return RG_OK;
    if (kv->type != RG_GGUF_U32)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: general.alignment has type %s, expected u32", c->path,
                       (unsigned long long)kv->file_offset, rg_gguf_vtype_name(kv->type));
    uint64_t a;
    rg_gguf_kv_u64(kv, 0, &a);
    if (a == 0 || (a & (a - 1)))
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: general.alignment is %llu, expected a nonzero power of two",
                       c->path, (unsigned long long)kv->file_offset, (unsigned long long)a);
    g->alignment = (uint32_t)a;
    return RG_OK;
}

static rg_status parse_tensor_info(cursor *c, rg_gguf *g, rg_gguf_tensor *t, str_set *names) {
    t->info_offset = c->pos;
    const unsigned long long at = (unsigned long long)t->info_offset;
    rg_gguf_str name;
    rg_status s = read_str(c, "a tensor name", &name);
    if (s) return s;
    if (name.len == 0) return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: tensor name is empty", c->path, at);
    if (name.len > RG_GGUF_MAX_NAME)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: tensor name '%.40s...' is %llu bytes, at most %d allowed",
                       c->path, at, name.ptr, (unsigned long long)name.len, RG_GGUF_MAX_NAME);
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = 0;
    if (strlen(t->name) != name.len)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: tensor name '%s...' contains a NUL byte", c->path, at,
                       t->name);
    rg_gguf_str *stored = rg_arena_alloc(&g->arena, sizeof *stored, 8);
    if (!stored) return rg_fail(c->err, RG_ERR_NOMEM, "%s: out of memory", c->path);
    stored->ptr = t->name;
    stored->len = name.len;
    if (str_set_insert(names, stored))
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: duplicate tensor name '%s'", c->path, at, t->name);
    if ((s = read_u32(c, "a dimension count", &t->n_dims))) return s;
    if (t->n_dims > RG_GGUF_MAX_DIMS)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: tensor '%s' has %u dimensions, at most %d allowed",
                       c->path, at, t->name, t->n_dims, RG_GGUF_MAX_DIMS);
    int64_t nelements = 1;
    for (int d = 0; d < RG_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        if ((s = read_u64(c, "a dimension", &v))) return s;
        if (v > (uint64_t)INT64_MAX)
            return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: tensor '%s' dimension %u is negative (%lld)",
                           c->path, at, t->name, d, (long long)(int64_t)v);
        t->ne[d] = (int64_t)v;
        if (v != 0 && nelements > INT64_MAX / (int64_t)v)
            return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: tensor '%s' element count overflows 64 bits",
                           c->path, at, t->name);
        nelements *= (int64_t)v;
    }
    if ((s = read_u32(c, "a tensor type", &t->type))) return s;
    const rg_type_traits *tt = rg_type_get(t->type);
    if (t->type >= RG_TYPE_COUNT)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: tensor '%s' has unknown type id %u (known ids are 0..%d)",
                       c->path, at, t->name, t->type, RG_TYPE_COUNT - 1);
    if (tt->role == RG_ROLE_INVALID)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: tensor '%s' has type id %u (%s), which ggml no longer accepts",
                       c->path, at, t->name, t->type, tt->name);
    if (tt->role == RG_ROLE_INTERMEDIATE)
        return rg_fail(c->err, RG_ERR_FORMAT,
                       "%s: offset %llu: tensor '%s' has type %s, a run-time intermediate type that files must not hold",
                       c->path, at, t->name, tt->name);
    if (t->ne[0] % tt->block_size)
        return rg_fail(c->err, RG_ERR_FORMAT,
                       "%s: offset %llu: tensor '%s' of type %s has ne[0] = %lld, not a multiple of the block size %lld",
                       c->path, at, t->name, tt->name, (long long)t->ne[0], (long long)tt->block_size);
    uint64_t blocks = (uint64_t)nelements / (uint64_t)tt->block_size;
    if (blocks > UINT64_MAX / tt->type_size)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: tensor '%s' byte size overflows 64 bits", c->path, at,
                       t->name);
    t->nbytes = blocks * tt->type_size;
    uint64_t off_at = c->pos;
    if ((s = read_u64(c, "a tensor data offset", &t->offset))) return s;
    if (t->offset % g->alignment)
        return rg_fail(c->err, RG_ERR_FORMAT, "%s: offset %llu: tensor '%s' data offset %llu is not a multiple of the alignment %u",
                       c->path, (unsigned long long)off_at, t->name, (unsigned long long)t->offset, g->alignment);
    return RG_OK;
}

static rg_status parse(rg_gguf *g, const uint8_t *data, uint64_t size, rg_error *err) {
    cursor c = {data, size, 0, g->path, err};
    g->file_size = size;
    if (size < 24)
        return rg_fail(err, RG_ERR_FORMAT, "%s: not a GGUF file: %llu bytes, shorter than the 24-byte header", g->path,
                       (unsigned long long)size);
    uint32_t magic = 0, version = 0;
    read_u32(&c, "the magic", &magic);
    if (magic != RG_GGUF_MAGIC)
        return rg_fail(err, RG_ERR_FORMAT,
                       "%s: not a GGUF file: offset 0 holds bytes %02x %02x %02x %02x, expected 47 47 55 46 (\"GGUF\")",
                       g->path, data[0], data[1], data[2], data[3]);
    read_u32(&c, "the version", &version);
    if ((version & 0xFFFF) == 0)
        return rg_fail(err, RG_ERR_FORMAT,
                       "%s: offset 4: version field 0x%08x looks byte-swapped: big-endian GGUF files are not supported",
                       g->path, version);
    if (version == 1)
        return rg_fail(err, RG_ERR_FORMAT, "%s: offset 4: GGUF version 1 is not supported (versions 2 and 3 are); "
                       "convert the file with a current llama.cpp", g->path);
    if (version != 2 && version != 3)
        return rg_fail(err, RG_ERR_FORMAT, "%s: offset 4: GGUF version %u is not supported (expected 2 or 3)", g->path,
                       version);
    g->version = version;
    uint64_t n_tensors = 0, n_kv = 0;
    read_u64(&c, "the tensor count", &n_tensors);
    read_u64(&c, "the key count", &n_kv);
    uint64_t rest = size - 24;
    // Each pair needs at least 8 (key length) + 1 (key) + 4 (type) + 1 (value) bytes and
    // each tensor info at least 8 + 1 + 4 + 4 + 8 = 25: a count beyond that is a lie.
    if (n_tensors > rest / 25)
        return rg_fail(err, RG_ERR_FORMAT, "%s: offset 8: tensor count %llu is impossible in a file of %llu bytes",
                       g->path, (unsigned long long)n_tensors, (unsigned long long)size);
    if (n_kv > rest / 14)
        return rg_fail(err, RG_ERR_FORMAT, "%s: offset 16: key count %llu is impossible in a file of %llu bytes",
                       g->path, (unsigned long long)n_kv, (unsigned long long)size);
    if (n_kv * 14 + n_tensors * 25 > rest)
        return rg_fail(err, RG_ERR_FORMAT, "%s: offset 8: %llu tensors and %llu keys cannot fit in a file of %llu bytes (truncated or corrupt)",
                       g->path, (unsigned long long)n_tensors, (unsigned long long)n_kv, (unsigned long long)size);
    g->n_kv = g->cap_kv = n_kv;
    g->n_tensors = g->cap_tensors = n_tensors;
    g->kv = n_kv ? calloc(n_kv, sizeof *g->kv) : NULL;
    g->tensors = n_tensors ? calloc(n_tensors, sizeof *g->tensors) : NULL;
    if ((n_kv && !g->kv) || (n_tensors && !g->tensors)) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);

    rg_status s = parse_kvs(&c, g);
    if (s) return s;
    if ((s = check_alignment(&c, g))) return s;

    str_set names;
    if (!str_set_init(&names, n_tensors)) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n_tensors && !s; i++) s = parse_tensor_info(&c, g, &g->tensors[i], &names);
    free(names.slots);
    if (s) return s;

    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_start = c.pos + pad;
    if (n_tensors && g->data_start > size)
        return rg_fail(err, RG_ERR_FORMAT, "%s: truncated: the data section should start at offset %llu, but the file ends at %llu",
                       g->path, (unsigned long long)g->data_start, (unsigned long long)size);
    // Tensors are packed in declaration order, each padded to the alignment, as ggml
    // requires: this also guarantees that no two tensors overlap.
    uint64_t expect = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        rg_gguf_tensor *t = &g->tensors[i];
        if (t->offset != expect)
            return rg_fail(err, RG_ERR_FORMAT,
                           "%s: offset %llu: tensor '%s' data offset is %llu, expected %llu (tensors must be packed in order)",
                           g->path, (unsigned long long)t->info_offset, t->name, (unsigned long long)t->offset,
                           (unsigned long long)expect);
        uint64_t avail = size - g->data_start;
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return rg_fail(err, RG_ERR_FORMAT,
                           "%s: truncated: tensor '%s' needs bytes %llu..%llu, but the file ends at %llu", g->path,
                           t->name, (unsigned long long)(g->data_start + t->offset),
                           (unsigned long long)(g->data_start + t->offset + t->nbytes), (unsigned long long)size);
        t->data = data + g->data_start + t->offset;
        uint64_t padded = t->nbytes + (g->alignment - t->nbytes % g->alignment) % g->alignment;
        expect += padded;
    }
    return RG_OK;
}

static rg_gguf *gguf_alloc(const char *name) {
    rg_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    rg_arena_init(&g->arena, 0);
    g->path = strdup(name);
    if (!g->path) {
        free(g);
        return NULL;
    }
    g->version = 3;
    g->alignment = RG_GGUF_DEFAULT_ALIGNMENT;
    return g;
}

rg_status rg_gguf_open_memory(rg_gguf **out, const void *data, size_t size, const char *name, rg_error *err) {
    *out = NULL;
    rg_gguf *g = gguf_alloc(name ? name : "<memory>");
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", name ? name : "<memory>");
    rg_status s = parse(g, data, size, err);
    if (s) {
        rg_gguf_free(g);
        return s;
    }
    *out = g;
    return RG_OK;
}

rg_status rg_gguf_open(rg_gguf **out, const char *path, rg_error *err) {
    *out = NULL;
    rg_gguf *g = gguf_alloc(path);
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", path);
    rg_status s = rg_file_map_open(&g->map, path, err);
    if (!s) s = parse(g, g->map.data, g->map.size, err);
    if (s) {
        rg_gguf_free(g);
        return s;
    }
    *out = g;
    return RG_OK;
}

rg_gguf *rg_gguf_new(void) { return gguf_alloc("<new gguf>"); }

void rg_gguf_free(rg_gguf *g) {
    if (!g) return;
    rg_file_map_close(&g->map);
    rg_arena_free(&g->arena);
    free(g->kv);
    free(g->tensors);
    free(g->path);
    free(g);
}
