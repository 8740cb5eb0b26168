// bpe_train.c - byte-level BPE: training a vocabulary, encoding and decoding with it.
//
// Layout: the pre-tokenizer, two small open-addressing hash maps (byte strings -> id and
// 64-bit pair keys -> value), the trainer, the encoder, then decode and the vocabulary helpers.
// Pairs of token ids are packed into one 64-bit key as (left << 32) | right.
#include "text/bpe_train.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retrograd.h"
#include "text/byte_unicode.h"

// ---------------------------------------------------------------------------
// Pre-tokenizer (the rule is documented in bpe_train.h)

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
static size_t piece_end(const uint8_t *s, size_t n, size_t i) {
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

static uint64_t pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

// ---------------------------------------------------------------------------
// smap: byte string -> non-negative int32. Keys are borrowed, never copied: they point into the
// corpus, the trainer's token bytes or the vocabulary's strings, all of which outlive the map.

typedef struct smap_slot {
    const uint8_t *key;
    size_t len;
    uint64_t hash;
    int32_t val;  // < 0: empty slot
} smap_slot;

typedef struct smap {
    smap_slot *slots;
    size_t cap;  // power of two, kept at least twice n
    size_t n;
} smap;

static int smap_alloc(smap *m, size_t cap) {
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].val = -1;
    m->cap = cap;
    m->n = 0;
    return 0;
}

static int smap_init(smap *m, size_t expect) {
    size_t cap = 16;
    while (cap / 2 < expect && cap < ((size_t)1 << 40)) cap *= 2;
    return smap_alloc(m, cap);
}

static void smap_free(smap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

static smap_slot *smap_find(const smap *m, const uint8_t *key, size_t len, uint64_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        smap_slot *s = &m->slots[i];
        if (s->val < 0) return s;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s;
    }
}

static int32_t smap_get(const smap *m, const void *key, size_t len) {
    return smap_find(m, key, len, hash_bytes(key, len))->val;
}

static int smap_grow(smap *m) {
    smap old = *m;
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
static int32_t smap_put(smap *m, const void *key, size_t len, int32_t val) {
    if ((m->n + 1) * 2 > m->cap && smap_grow(m) != 0) return -1;
    uint64_t h = hash_bytes(key, len);
    smap_slot *s = smap_find(m, key, len, h);
    if (s->val >= 0) return s->val;
    s->key = key;
    s->len = len;
    s->hash = h;
    s->val = val;
    m->n++;
    return val;
}

// ---------------------------------------------------------------------------
// umap: 64-bit key -> int64. A slot is live only when its stamp equals the map's generation, so
// clearing the map between merge steps is O(1); `used` lists live slots for iteration.

typedef struct umap {
    uint64_t *keys;
    int64_t *vals;
    uint32_t *stamp;
    size_t *used;  // [n] live slot indices, in insertion order
    size_t cap;    // power of two, kept at least twice n
    size_t n;
    uint32_t gen;
} umap;

static void umap_free(umap *m) {
    free(m->keys);
    free(m->vals);
    free(m->stamp);
    free(m->used);
    memset(m, 0, sizeof *m);
}

static int umap_alloc(umap *m, size_t cap) {
    memset(m, 0, sizeof *m);
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->stamp = calloc(cap, sizeof *m->stamp);
    m->used = malloc((cap / 2 + 1) * sizeof *m->used);
    if (!m->keys || !m->vals || !m->stamp || !m->used) {
        umap_free(m);
        return -1;
    }
    m->cap = cap;
    m->gen = 1;
    return 0;
}

static int umap_init(umap *m, size_t expect) {
    size_t cap = 16;
    while (cap / 2 < expect && cap < ((size_t)1 << 40)) cap *= 2;
    return umap_alloc(m, cap);
}

static void umap_clear(umap *m) {
    m->n = 0;
    if (++m->gen == 0) {  // after 2^32 clears old stamps could look live again
        memset(m->stamp, 0, m->cap * sizeof *m->stamp);
        m->gen = 1;
    }
}

static size_t umap_probe(const umap *m, uint64_t key) {
    size_t mask = m->cap - 1;
    size_t i = (size_t)hash_u64(key) & mask;
    while (m->stamp[i] == m->gen && m->keys[i] != key) i = (i + 1) & mask;
    return i;
}

static int64_t *umap_get(const umap *m, uint64_t key) {
    size_t i = umap_probe(m, key);
    return m->stamp[i] == m->gen ? &m->vals[i] : NULL;
}

static int umap_grow(umap *m) {
    umap old = *m;
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
    umap_free(&old);
    return 0;
}

// The value stored under key, inserted as init when absent; NULL when memory runs out. The
// pointer is valid until the next insertion.
static int64_t *umap_upsert(umap *m, uint64_t key, int64_t init) {
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

// ---------------------------------------------------------------------------
// Training

static void set_err(char *err, size_t cap, const char *fmt, ...) {
    if (!err || cap == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

typedef struct train_word {
    size_t off;     // first symbol in trainer.syms
    size_t len;     // current number of symbols; shrinks as merges apply
    int64_t count;  // occurrences of this piece in the corpus
} train_word;

typedef struct trainer {
    // Token bytes by id; ids 0..255 are the single bytes.
    uint8_t **tok_bytes;
    size_t *tok_len;
    int32_t n_tok;
    smap tok_set;  // token bytes -> id, to refuse a merge that would duplicate a token

    train_word *words;  // unique pieces
    size_t n_words;
    int32_t *syms;  // symbol ids of all unique pieces, back to back

    int32_t *merge_a, *merge_b;  // [n_merge] the pair merged at each rank
    int32_t n_merge;

    umap pairs;   // pair -> weighted count, rebuilt every step
    umap banned;  // pairs whose concatenation is already a token
} trainer;

static void trainer_free(trainer *t) {
    if (t->tok_bytes)
        for (int32_t i = 0; i < t->n_tok; i++) free(t->tok_bytes[i]);
    free(t->tok_bytes);
    free(t->tok_len);
    smap_free(&t->tok_set);
    free(t->words);
    free(t->syms);
    free(t->merge_a);
    free(t->merge_b);
    umap_free(&t->pairs);
    umap_free(&t->banned);
}

static int bytes_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c) return c;
    return (an > bn) - (an < bn);
}

// The tie-break order: lexicographic on the left token's bytes, then on the right token's.
static int pair_before(const trainer *t, int32_t a1, int32_t b1, int32_t a2, int32_t b2) {
    int c = bytes_cmp(t->tok_bytes[a1], t->tok_len[a1], t->tok_bytes[a2], t->tok_len[a2]);
    if (c) return c < 0;
    return bytes_cmp(t->tok_bytes[b1], t->tok_len[b1], t->tok_bytes[b2], t->tok_len[b2]) < 0;
}

// Splits the corpus into pieces and counts each distinct piece.
static int collect_words(trainer *t, const uint8_t *s, size_t len) {
    smap seen;
    if (smap_init(&seen, 1024) != 0) return -1;
    size_t cap = 0, total = 0;
    for (size_t i = 0; i < len;) {
        size_t j = piece_end(s, len, i);
        if (t->n_words == cap) {
            size_t ncap = cap ? cap * 2 : 1024;
            train_word *nw = realloc(t->words, ncap * sizeof *nw);
            if (!nw) goto fail;
            t->words = nw;
            cap = ncap;
        }
        if (t->n_words >= INT32_MAX) goto fail;
        int32_t w = smap_put(&seen, s + i, j - i, (int32_t)t->n_words);
        if (w < 0) goto fail;
        if ((size_t)w == t->n_words) {
            // A new piece: for now off is its corpus offset, replaced below.
            t->words[w] = (train_word){.off = i, .len = j - i, .count = 0};
            t->n_words++;
            total += j - i;
        }
        t->words[w].count++;
        i = j;
    }
    smap_free(&seen);
    t->syms = malloc((total ? total : 1) * sizeof *t->syms);
    if (!t->syms) return -1;
    size_t off = 0;
    for (size_t w = 0; w < t->n_words; w++) {
        const uint8_t *p = s + t->words[w].off;
        for (size_t k = 0; k < t->words[w].len; k++) t->syms[off + k] = p[k];
        t->words[w].off = off;
        off += t->words[w].len;
    }
    return 0;
fail:
    smap_free(&seen);
    return -1;
}

static int add_token(trainer *t, const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
    uint8_t *p = malloc(an + bn);
    if (!p) return -1;
    memcpy(p, a, an);
    if (bn) memcpy(p + an, b, bn);
    int32_t id = t->n_tok;
    t->tok_bytes[id] = p;
    t->tok_len[id] = an + bn;
    t->n_tok++;
    if (smap_put(&t->tok_set, p, an + bn, id) < 0) return -1;
    return 0;
}

static void apply_merge(trainer *t, int32_t a, int32_t b, int32_t merged) {
    for (size_t w = 0; w < t->n_words; w++) {
        int32_t *s = t->syms + t->words[w].off;
        size_t n = t->words[w].len, j = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && s[i] == a && s[i + 1] == b) {
                s[j++] = merged;
                i += 2;
            } else {
                s[j++] = s[i++];
            }
        }
        t->words[w].len = j;
    }
}

// Picks the next merge; returns 1 with *a, *b set, 0 when no pair occurs twice, -1 on no memory.
static int best_pair(trainer *t, int32_t *best_a, int32_t *best_b) {
    umap_clear(&t->pairs);
    for (size_t w = 0; w < t->n_words; w++) {
        const int32_t *s = t->syms + t->words[w].off;
        for (size_t i = 0; i + 1 < t->words[w].len; i++) {
            int64_t *c = umap_upsert(&t->pairs, pair_key(s[i], s[i + 1]), 0);
            if (!c) return -1;
            *c += t->words[w].count;
        }
    }
    for (;;) {
        int64_t best = 1;  // a pair must occur at least twice to be worth a token
        int32_t ba = -1, bb = -1;
        for (size_t k = 0; k < t->pairs.n; k++) {
            size_t slot = t->pairs.used[k];
            int64_t c = t->pairs.vals[slot];
            if (c < best) continue;
            int32_t a = (int32_t)(t->pairs.keys[slot] >> 32);
            int32_t b = (int32_t)(uint32_t)t->pairs.keys[slot];
            if (c == best && (ba < 0 || !pair_before(t, a, b, ba, bb))) continue;
            if (umap_get(&t->banned, pair_key(a, b))) continue;
            best = c;
            ba = a;
            bb = b;
        }
        if (ba < 0) return 0;
        // Two merge paths can spell the same bytes ("ab"+"c" and "a"+"bc"); a second token with
        // the same text would make text -> id lookups ambiguous, so that pair is skipped for good.
        uint8_t stack_buf[256];
        size_t n = t->tok_len[ba] + t->tok_len[bb];
        uint8_t *cat = n <= sizeof stack_buf ? stack_buf : malloc(n);
        if (!cat) return -1;
        memcpy(cat, t->tok_bytes[ba], t->tok_len[ba]);
        memcpy(cat + t->tok_len[ba], t->tok_bytes[bb], t->tok_len[bb]);
        int exists = smap_get(&t->tok_set, cat, n) >= 0;
        if (cat != stack_buf) free(cat);
        if (!exists) {
            *best_a = ba;
            *best_b = bb;
            return 1;
        }
        if (!umap_upsert(&t->banned, pair_key(ba, bb), 1)) return -1;
    }
}

static char *bpe_text_dup(const uint8_t *p, size_t n) {
    size_t need = rg_bytes_to_bpe_text(p, n, NULL, 0);
    char *s = malloc(need + 1);
    if (s) rg_bytes_to_bpe_text(p, n, s, need + 1);
    return s;
}

// Builds the GGUF-shaped vocabulary from the trainer's tokens and merges.
static int export_vocab(const trainer *t, rg_bpe_vocab *v) {
    memset(v, 0, sizeof *v);
    v->tokens = calloc((size_t)t->n_tok, sizeof *v->tokens);
    v->token_types = malloc((size_t)t->n_tok * sizeof *v->token_types);
    v->merges = calloc(t->n_merge ? (size_t)t->n_merge : 1, sizeof *v->merges);
    if (!v->tokens || !v->token_types || !v->merges) goto fail;
    v->n_tokens = t->n_tok;
    v->n_merges = t->n_merge;
    for (int32_t i = 0; i < t->n_tok; i++) {
        v->token_types[i] = RG_TOKEN_TYPE_NORMAL;
        v->tokens[i] = bpe_text_dup(t->tok_bytes[i], t->tok_len[i]);
        if (!v->tokens[i]) goto fail;
    }
    for (int32_t k = 0; k < t->n_merge; k++) {
        const char *a = v->tokens[t->merge_a[k]], *b = v->tokens[t->merge_b[k]];
        size_t an = strlen(a), bn = strlen(b);
        char *m = malloc(an + bn + 2);
        if (!m) goto fail;
        memcpy(m, a, an);
        m[an] = ' ';
        memcpy(m + an + 1, b, bn + 1);
        v->merges[k] = m;
    }
    return 0;
fail:
    rg_bpe_vocab_free(v);
    return -1;
}

int rg_bpe_train(const char *corpus, size_t len, int32_t n_merges, rg_bpe_vocab *out,
                 char *err, size_t err_cap) {
    if (!out) {
        set_err(err, err_cap, "bpe_train: output vocabulary is NULL");
        return RG_ERR_ARG;
    }
    memset(out, 0, sizeof *out);
    if (!corpus && len > 0) {
        set_err(err, err_cap, "bpe_train: corpus is NULL but len is %zu", len);
        return RG_ERR_ARG;
    }
    if (n_merges < 0 || n_merges > INT32_MAX - 256) {
        set_err(err, err_cap, "bpe_train: n_merges %d is out of range 0..%d", (int)n_merges,
                (int)(INT32_MAX - 256));
        return RG_ERR_ARG;
    }
    const char *what = "no memory";
    trainer t;
    memset(&t, 0, sizeof t);
    if (collect_words(&t, (const uint8_t *)corpus, len) != 0) {
        what = "no memory for the word table (or over 2^31 distinct pieces)";
        goto fail;
    }
    // Every merge removes at least one symbol from the unique pieces, so this bounds the
    // tables no matter how large n_merges is.
    size_t total = 0;
    for (size_t w = 0; w < t.n_words; w++) total += t.words[w].len;
    size_t max_merges = (size_t)n_merges < total ? (size_t)n_merges : total;
    size_t max_tok = 256 + max_merges;
    t.tok_bytes = calloc(max_tok, sizeof *t.tok_bytes);
    t.tok_len = malloc(max_tok * sizeof *t.tok_len);
    t.merge_a = malloc((max_merges ? max_merges : 1) * sizeof *t.merge_a);
    t.merge_b = malloc((max_merges ? max_merges : 1) * sizeof *t.merge_b);
    if (!t.tok_bytes || !t.tok_len || !t.merge_a || !t.merge_b ||
        smap_init(&t.tok_set, max_tok) != 0 || umap_init(&t.pairs, total) != 0 ||
        umap_init(&t.banned, 16) != 0) {
        what = "no memory for the token tables";
        goto fail;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        if (add_token(&t, &byte, 1, NULL, 0) != 0) goto fail;
    }
    while ((size_t)t.n_merge < max_merges) {
        int32_t a, b;
        int r = best_pair(&t, &a, &b);
        if (r < 0) {
            what = "no memory for the pair counts";
            goto fail;
        }
        if (r == 0) break;
        int32_t merged = t.n_tok;
        if (add_token(&t, t.tok_bytes[a], t.tok_len[a], t.tok_bytes[b], t.tok_len[b]) != 0)
            goto fail;
        t.merge_a[t.n_merge] = a;
        t.merge_b[t.n_merge] = b;
        t.n_merge++;
        apply_merge(&t, a, b, merged);
    }
    if (export_vocab(&t, out) != 0) {
        what = "no memory for the vocabulary strings";
        goto fail;
    }
    trainer_free(&t);
    return RG_OK;
fail:
    set_err(err, err_cap, "bpe_train: %s (corpus of %zu bytes, %d merges requested)", what, len,
            (int)n_merges);
    trainer_free(&t);
    memset(out, 0, sizeof *out);
    return RG_ERR_NOMEM;
}

// ---------------------------------------------------------------------------
// Encoding

static int is_ordinary_type(int32_t type) {
    return type != RG_TOKEN_TYPE_CONTROL && type != RG_TOKEN_TYPE_USER_DEFINED &&
           type != RG_TOKEN_TYPE_UNKNOWN && type != RG_TOKEN_TYPE_UNUSED;
}

typedef struct bpe_sym {
    int32_t id;  // -1 once merged into its left neighbour
    int32_t prev, next;
} bpe_sym;

typedef struct bpe_cand {
    int32_t rank, left;  // heap order: lowest rank, then leftmost
    int32_t left_id, right_id, merged_id;
} bpe_cand;

typedef struct encoder {
    smap tok;           // text -> id of ordinary tokens (the first one wins on duplicates)
    umap merge;         // pair -> (rank << 32) | merged id
    int32_t byte_id[256];
    bpe_sym *syms;      // [cap] work space for one piece
    bpe_cand *heap;     // [3 * cap]: n-1 initial pairs + at most 2 per merge
    size_t cap;
    int64_t n_out;
    int32_t *out;
    int64_t out_cap;
} encoder;

static void encoder_free(encoder *e) {
    smap_free(&e->tok);
    umap_free(&e->merge);
    free(e->syms);
    free(e->heap);
}

static int encoder_init(encoder *e, const rg_bpe_vocab *v) {
    memset(e, 0, sizeof *e);
    int32_t n_tok = v->tokens ? v->n_tokens : 0;
    int32_t n_merges = v->merges ? v->n_merges : 0;
    if (smap_init(&e->tok, n_tok > 0 ? (size_t)n_tok : 1) != 0) return -1;
    if (umap_init(&e->merge, n_merges > 0 ? (size_t)n_merges : 1) != 0) return -1;
    for (int32_t id = 0; id < n_tok; id++) {
        int32_t type = v->token_types ? v->token_types[id] : RG_TOKEN_TYPE_NORMAL;
        if (!v->tokens[id] || !is_ordinary_type(type)) continue;
        if (smap_put(&e->tok, v->tokens[id], strlen(v->tokens[id]), id) < 0) return -1;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        char text[3];
        size_t n = rg_bytes_to_bpe_text(&byte, 1, text, sizeof text);
        e->byte_id[b] = smap_get(&e->tok, text, n);
    }
    char *cat = NULL;
    size_t cat_cap = 0;
    for (int32_t k = 0; k < n_merges; k++) {
        const char *m = v->merges[k];
        if (!m || !m[0]) continue;
        // Split at the first space at index >= 1, as llama.cpp does: byte-level text never
        // holds a raw space, so any other layout is a malformed entry and is ignored.
        const char *sp = strchr(m + 1, ' ');
        if (!sp) continue;
        size_t an = (size_t)(sp - m), bn = strlen(sp + 1);
        if (an + bn > cat_cap) {
            char *nc = realloc(cat, an + bn);
            if (!nc) {
                free(cat);
                return -1;
            }
            cat = nc;
            cat_cap = an + bn;
        }
        memcpy(cat, m, an);
        memcpy(cat + an, sp + 1, bn);
        int32_t a = smap_get(&e->tok, m, an);
        int32_t b = smap_get(&e->tok, sp + 1, bn);
        int32_t ab = smap_get(&e->tok, cat, an + bn);
        if (a < 0 || b < 0 || ab < 0) continue;  // an inconsistent vocabulary: skip the rule
        uint64_t key = pair_key(a, b);
        if (umap_get(&e->merge, key)) continue;  // a repeated rule keeps its lower rank
        if (!umap_upsert(&e->merge, key, ((int64_t)k << 32) | (uint32_t)ab)) {
            free(cat);
            return -1;
        }
    }
    free(cat);
    return 0;
}

static int cand_less(const bpe_cand *x, const bpe_cand *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(bpe_cand *h, size_t *n, bpe_cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static bpe_cand heap_pop(bpe_cand *h, size_t *n) {
    bpe_cand top = h[0];
    bpe_cand last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c])) c++;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

static void push_pair(encoder *e, size_t *heap_n, int32_t left) {
    int32_t right = e->syms[left].next;
    if (right < 0) return;
    const int64_t *r = umap_get(&e->merge, pair_key(e->syms[left].id, e->syms[right].id));
    if (!r) return;
    bpe_cand c = {
        .rank = (int32_t)(*r >> 32),
        .left = left,
        .left_id = e->syms[left].id,
        .right_id = e->syms[right].id,
        .merged_id = (int32_t)(uint32_t)*r,
    };
    heap_push(e->heap, heap_n, c);
}

static void emit(encoder *e, int32_t id) {
    if (e->n_out < e->out_cap) e->out[e->n_out] = id;
    e->n_out++;
}

// Runs the merge loop on one piece (spec §5.4 step 5) and emits its ids.
static int encode_piece(encoder *e, const uint8_t *s, size_t n) {
    if (n > (size_t)INT32_MAX / 4) return -1;  // symbol indices are int32
    if (n > e->cap) {
        size_t cap = e->cap ? e->cap : 64;
        while (cap < n) cap *= 2;
        bpe_sym *ns = realloc(e->syms, cap * sizeof *ns);
        if (!ns) return -1;
        e->syms = ns;
        bpe_cand *nh = realloc(e->heap, 3 * cap * sizeof *nh);
        if (!nh) return -1;
        e->heap = nh;
        e->cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t id = e->byte_id[s[i]];
        if (id < 0) return -1;
        e->syms[i] = (bpe_sym){
            .id = id,
            .prev = (int32_t)i - 1,
            .next = i + 1 < n ? (int32_t)i + 1 : -1,
        };
    }
    size_t heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(e, &heap_n, (int32_t)i);
    while (heap_n > 0) {
        bpe_cand c = heap_pop(e->heap, &heap_n);
        bpe_sym *l = &e->syms[c.left];
        // Entries are never removed when their symbols change; drop the stale ones here.
        if (l->id != c.left_id || l->next < 0 || e->syms[l->next].id != c.right_id) continue;
        int32_t r = l->next;
        l->id = c.merged_id;
        l->next = e->syms[r].next;
        if (l->next >= 0) e->syms[l->next].prev = c.left;
        e->syms[r].id = -1;
        if (l->prev >= 0) push_pair(e, &heap_n, l->prev);
        push_pair(e, &heap_n, c.left);
    }
    // Merges always keep the left symbol, so symbol 0 is still the first.
    for (int32_t i = 0; i >= 0; i = e->syms[i].next) emit(e, e->syms[i].id);
    return 0;
}

int64_t rg_bpe_encode(const rg_bpe_vocab *v, const char *text, size_t len, int32_t *ids,
                      int64_t cap) {
    if (!v || (!text && len > 0)) return -1;
    if (len == 0) return 0;
    encoder e;
    if (encoder_init(&e, v) != 0) {
        encoder_free(&e);
        return -1;
    }
    e.out = ids;
    e.out_cap = ids ? cap : 0;
    const uint8_t *s = (const uint8_t *)text;
    int64_t result = 0;
    for (size_t i = 0; i < len;) {
        size_t j = piece_end(s, len, i);
        if (encode_piece(&e, s + i, j - i) != 0) {
            result = -1;
            break;
        }
        i = j;
    }
    if (result == 0) result = e.n_out;
    encoder_free(&e);
    return result;
}

// ---------------------------------------------------------------------------
// Decoding and the vocabulary helpers

size_t rg_bpe_decode(const rg_bpe_vocab *v, const int32_t *ids, int64_t n, char *out, size_t cap) {
    size_t need = 0;
    if (!out) cap = 0;
    for (int64_t k = 0; v && v->tokens && ids && k < n; k++) {
        int32_t id = ids[k];
        if (id < 0 || id >= v->n_tokens || !v->tokens[id]) continue;
        const char *t = v->tokens[id];
        size_t tl = strlen(t);
        int32_t type = v->token_types ? v->token_types[id] : RG_TOKEN_TYPE_NORMAL;
        uint8_t *dst = need < cap ? (uint8_t *)out + need : NULL;
        size_t room = need < cap ? cap - need : 0;
        if (type != RG_TOKEN_TYPE_CONTROL && type != RG_TOKEN_TYPE_USER_DEFINED) {
            int64_t nb = rg_bpe_text_to_bytes(t, tl, dst, room);
            if (nb >= 0) {
                need += (size_t)nb;
                continue;
            }
        }
        if (dst) memcpy(dst, t, tl < room ? tl : room);
        need += tl;
    }
    if (need < cap) out[need] = '\0';
    return need;
}

int32_t rg_bpe_vocab_add(rg_bpe_vocab *v, const char *text, int32_t type) {
    if (!v || !text || !text[0]) return -1;
    if (type < RG_TOKEN_TYPE_NORMAL || type > RG_TOKEN_TYPE_BYTE) return -1;
    if (v->n_tokens < 0 || v->n_tokens == INT32_MAX) return -1;
    int32_t n = v->tokens ? v->n_tokens : 0;
    for (int32_t i = 0; i < n; i++)
        if (v->tokens[i] && strcmp(v->tokens[i], text) == 0) return -1;
    size_t tl = strlen(text);
    char *copy = malloc(tl + 1);
    if (!copy) return -1;
    memcpy(copy, text, tl + 1);
    char **nt = realloc(v->tokens, ((size_t)n + 1) * sizeof *nt);
    if (!nt) {
        free(copy);
        return -1;
    }
    v->tokens = nt;
    int had_types = v->token_types != NULL;
    int32_t *ny = realloc(v->token_types, ((size_t)n + 1) * sizeof *ny);
    if (!ny) {
        free(copy);
        return -1;
    }
    // A vocabulary without types means all-NORMAL; keep that meaning for the old tokens.
    if (!had_types)
        for (int32_t i = 0; i < n; i++) ny[i] = RG_TOKEN_TYPE_NORMAL;
    v->token_types = ny;
    v->tokens[n] = copy;
    v->token_types[n] = type;
    v->n_tokens = n + 1;
    return n;
}

void rg_bpe_vocab_free(rg_bpe_vocab *v) {
    if (!v) return;
    if (v->tokens)
        for (int32_t i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    if (v->merges)
        for (int32_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->token_types);
    free(v->merges);
    memset(v, 0, sizeof *v);
}
