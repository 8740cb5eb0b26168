// bpe_train.c - byte-level BPE: training a vocabulary (bpe_train.h). The pre-tokenizer and the
// hash maps are in bpe_maps.c, encoding, decoding and the vocabulary helpers in bpe_encode.c.
#include "text/bpe_train.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retrograd.h"
#include "text/bpe_maps.h"
#include "text/byte_unicode.h"

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
    rg_bpe_smap tok_set;  // token bytes -> id, to refuse a merge that would duplicate a token

    train_word *words;  // unique pieces
    size_t n_words;
    int32_t *syms;  // symbol ids of all unique pieces, back to back

    int32_t *merge_a, *merge_b;  // [n_merge] the pair merged at each rank
    int32_t n_merge;

    rg_bpe_umap pairs;   // pair -> weighted count, rebuilt every step
    rg_bpe_umap banned;  // pairs whose concatenation is already a token
} trainer;

static void trainer_free(trainer *t) {
    if (t->tok_bytes)
        for (int32_t i = 0; i < t->n_tok; i++) free(t->tok_bytes[i]);
    free(t->tok_bytes);
    free(t->tok_len);
    rg_bpe_smap_free(&t->tok_set);
    free(t->words);
    free(t->syms);
    free(t->merge_a);
    free(t->merge_b);
    rg_bpe_umap_free(&t->pairs);
    rg_bpe_umap_free(&t->banned);
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
    rg_bpe_smap seen;
    if (rg_bpe_smap_init(&seen, 1024) != 0) return -1;
    size_t cap = 0, total = 0;
    for (size_t i = 0; i < len;) {
        size_t j = rg_bpe_piece_end(s, len, i);
        if (t->n_words == cap) {
            size_t ncap = cap ? cap * 2 : 1024;
            train_word *nw = realloc(t->words, ncap * sizeof *nw);
            if (!nw) goto fail;
            t->words = nw;
            cap = ncap;
        }
        if (t->n_words >= INT32_MAX) goto fail;
        int32_t w = rg_bpe_smap_put(&seen, s + i, j - i, (int32_t)t->n_words);
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
    rg_bpe_smap_free(&seen);
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
    rg_bpe_smap_free(&seen);
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
    if (rg_bpe_smap_put(&t->tok_set, p, an + bn, id) < 0) return -1;
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
    rg_bpe_umap_clear(&t->pairs);
    for (size_t w = 0; w < t->n_words; w++) {
        const int32_t *s = t->syms + t->words[w].off;
        for (size_t i = 0; i + 1 < t->words[w].len; i++) {
            int64_t *c = rg_bpe_umap_upsert(&t->pairs, rg_bpe_pair_key(s[i], s[i + 1]), 0);
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
            if (rg_bpe_umap_get(&t->banned, rg_bpe_pair_key(a, b))) continue;
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
        int exists = rg_bpe_smap_get(&t->tok_set, cat, n) >= 0;
        if (cat != stack_buf) free(cat);
        if (!exists) {
            *best_a = ba;
            *best_b = bb;
            return 1;
        }
        if (!rg_bpe_umap_upsert(&t->banned, rg_bpe_pair_key(ba, bb), 1)) return -1;
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
        rg_bpe_smap_init(&t.tok_set, max_tok) != 0 || rg_bpe_umap_init(&t.pairs, total) != 0 ||
        rg_bpe_umap_init(&t.banned, 16) != 0) {
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

