// bpe_maps.c - the pre-tokenizer and the hash maps of the BPE trainer and encoder (bpe_maps.h).
#include "text/bpe_maps.h"

#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------
// The pre-tokenizer (the rule is documented in bpe_train.h)

enum { CLS_SPACE, CLS_LETTER, CLS_DIGIT, CLS_OTHER };

static int byte_class(uint8_t c) {
    if (c == ' ' || (c >= '\t' && c <= '\r')) return CLS_SPACE;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return CLS_LETTER;
    if (c >= '0' && c <= '9') return CLS_DIGIT;
    return CLS_OTHER;
}

// Classes that may take a leading space, as GPT-2's " ?\p{L}+" and " ?[^\s\p{L}\p{N}]+" do.
static int takes_space(int cls) { return cls == CLS_LETTER || cls == CLS_OTHER; }

// The end of the piece that starts at s[i] (i < n). Always > i, so callers make progress.
size_t rg_bpe_piece_end(const uint8_t *s, size_t n, size_t i) {
    int cls = byte_class(s[i]);
    size_t j = i + 1;
    if (s[i] == ' ' && j < n && takes_space(byte_class(s[j]))) {
        cls = byte_class(s[j]);
        while (j < n && byte_class(s[j]) == cls) j++;
        return j;
    }
    switch (cls) {
    case CLS_DIGIT:
        return j;
    case CLS_LETTER:
    case CLS_OTHER:
        while (j < n && byte_class(s[j]) == cls) j++;
        return j;
    default:
        while (j < n && byte_class(s[j]) == CLS_SPACE) j++;
        // GPT-2's \s+(?!\S): leave the last space of a longer run to the word that follows.
        if (j < n && j - i >= 2 && s[j - 1] == ' ' && takes_space(byte_class(s[j]))) j--;
        return j;
    }
}

// ---------------------------------------------------------------------------
// Hashing

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: short keys, good enough spread
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t hash_u64(uint64_t x) {
    // splitmix64's finalizer: pair keys differ mostly in low bits of each half.
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t rg_bpe_pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

// ---------------------------------------------------------------------------
// rg_bpe_smap (bpe_maps.h)



static int smap_alloc(rg_bpe_smap *m, size_t cap) {
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].val = -1;
    m->cap = cap;
    m->n = 0;
    return 0;
}

int rg_bpe_smap_init(rg_bpe_smap *m, size_t expect) {
    size_t cap = 16;
    while (cap / 2 < expect && cap < ((size_t)1 << 40)) cap *= 2;
    return smap_alloc(m, cap);
}

void rg_bpe_smap_free(rg_bpe_smap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

static rg_bpe_smap_slot *smap_find(const rg_bpe_smap *m, const uint8_t *key, size_t len, uint64_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        rg_bpe_smap_slot *s = &m->slots[i];
        if (s->val < 0) return s;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s;
    }
}

int32_t rg_bpe_smap_get(const rg_bpe_smap *m, const void *key, size_t len) {
    return smap_find(m, key, len, hash_bytes(key, len))->val;
}

static int smap_grow(rg_bpe_smap *m) {
    rg_bpe_smap old = *m;
    if (smap_alloc(m, old.cap * 2) != 0) {
        *m = old;
        return -1;
    }
    for (size_t i = 0; i < old.cap; i++) {
        if (old.slots[i].val < 0) continue;
        *smap_find(m, old.slots[i].key, old.slots[i].len, old.slots[i].hash) = old.slots[i];
        m->n++;
    }
    free(old.slots);
    return 0;
}

// Maps key to val unless key is already present. Returns the value now stored under key (val or
// the earlier one), or -1 when memory runs out.
int32_t rg_bpe_smap_put(rg_bpe_smap *m, const void *key, size_t len, int32_t val) {
    if ((m->n + 1) * 2 > m->cap && smap_grow(m) != 0) return -1;
    uint64_t h = hash_bytes(key, len);
    rg_bpe_smap_slot *s = smap_find(m, key, len, h);
    if (s->val >= 0) return s->val;
    s->key = key;
    s->len = len;
    s->hash = h;
    s->val = val;
    m->n++;
    return val;
}

// ---------------------------------------------------------------------------
// rg_bpe_umap (bpe_maps.h)


void rg_bpe_umap_free(rg_bpe_umap *m) {
    free(m->keys);
    free(m->vals);
    free(m->stamp);
    free(m->used);
    memset(m, 0, sizeof *m);
}

static int umap_alloc(rg_bpe_umap *m, size_t cap) {
    memset(m, 0, sizeof *m);
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->stamp = calloc(cap, sizeof *m->stamp);
    m->used = malloc((cap / 2 + 1) * sizeof *m->used);
    if (!m->keys || !m->vals || !m->stamp || !m->used) {
        rg_bpe_umap_free(m);
        return -1;
    }
    m->cap = cap;
    m->gen = 1;
    return 0;
}

int rg_bpe_umap_init(rg_bpe_umap *m, size_t expect) {
    size_t cap = 16;
    while (cap / 2 < expect && cap < ((size_t)1 << 40)) cap *= 2;
    return umap_alloc(m, cap);
}

void rg_bpe_umap_clear(rg_bpe_umap *m) {
    m->n = 0;
    if (++m->gen == 0) {  // after 2^32 clears old stamps could look live again
        memset(m->stamp, 0, m->cap * sizeof *m->stamp);
        m->gen = 1;
    }
}

static size_t umap_probe(const rg_bpe_umap *m, uint64_t key) {
    size_t mask = m->cap - 1;
    size_t i = (size_t)hash_u64(key) & mask;
    while (m->stamp[i] == m->gen && m->keys[i] != key) i = (i + 1) & mask;
    return i;
}

int64_t *rg_bpe_umap_get(const rg_bpe_umap *m, uint64_t key) {
    size_t i = umap_probe(m, key);
    return m->stamp[i] == m->gen ? &m->vals[i] : NULL;
}

static int umap_grow(rg_bpe_umap *m) {
    rg_bpe_umap old = *m;
    if (umap_alloc(m, old.cap * 2) != 0) {
        *m = old;
        return -1;
    }
    for (size_t k = 0; k < old.n; k++) {
        size_t from = old.used[k];
        size_t i = umap_probe(m, old.keys[from]);
        m->keys[i] = old.keys[from];
        m->vals[i] = old.vals[from];
        m->stamp[i] = m->gen;
        m->used[m->n++] = i;
    }
    rg_bpe_umap_free(&old);
    return 0;
}

// The value stored under key, inserted as init when absent; NULL when memory runs out. The
// pointer is valid until the next insertion.
int64_t *rg_bpe_umap_upsert(rg_bpe_umap *m, uint64_t key, int64_t init) {
    size_t i = umap_probe(m, key);
    if (m->stamp[i] == m->gen) return &m->vals[i];
    if ((m->n + 1) * 2 > m->cap) {
        if (umap_grow(m) != 0) return NULL;
        i = umap_probe(m, key);
    }
    m->keys[i] = key;
    m->vals[i] = init;
    m->stamp[i] = m->gen;
    m->used[m->n++] = i;
    return &m->vals[i];
}

