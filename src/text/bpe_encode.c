// bpe_encode.c - byte-level BPE: encoding and decoding with a vocabulary, and the
// vocabulary helpers (bpe_train.h). The pre-tokenizer and the hash maps: bpe_maps.c.
#include "text/bpe_train.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retrograd.h"
#include "text/bpe_maps.h"
#include "text/byte_unicode.h"

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
    rg_bpe_smap tok;           // text -> id of ordinary tokens (the first one wins on duplicates)
    rg_bpe_umap merge;         // pair -> (rank << 32) | merged id
    int32_t byte_id[256];
    bpe_sym *syms;      // [cap] work space for one piece
    bpe_cand *heap;     // [3 * cap]: n-1 initial pairs + at most 2 per merge
    size_t cap;
    int64_t n_out;
    int32_t *out;
    int64_t out_cap;
} encoder;

static void encoder_free(encoder *e) {
    rg_bpe_smap_free(&e->tok);
    rg_bpe_umap_free(&e->merge);
    free(e->syms);
    free(e->heap);
}

static int encoder_init(encoder *e, const rg_bpe_vocab *v) {
    memset(e, 0, sizeof *e);
    int32_t n_tok = v->tokens ? v->n_tokens : 0;
    int32_t n_merges = v->merges ? v->n_merges : 0;
    if (rg_bpe_smap_init(&e->tok, n_tok > 0 ? (size_t)n_tok : 1) != 0) return -1;
    if (rg_bpe_umap_init(&e->merge, n_merges > 0 ? (size_t)n_merges : 1) != 0) return -1;
    for (int32_t id = 0; id < n_tok; id++) {
        int32_t type = v->token_types ? v->token_types[id] : RG_TOKEN_TYPE_NORMAL;
        if (!v->tokens[id] || !is_ordinary_type(type)) continue;
        if (rg_bpe_smap_put(&e->tok, v->tokens[id], strlen(v->tokens[id]), id) < 0) return -1;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        char text[3];
        size_t n = rg_bytes_to_bpe_text(&byte, 1, text, sizeof text);
        e->byte_id[b] = rg_bpe_smap_get(&e->tok, text, n);
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
        int32_t a = rg_bpe_smap_get(&e->tok, m, an);
        int32_t b = rg_bpe_smap_get(&e->tok, sp + 1, bn);
        int32_t ab = rg_bpe_smap_get(&e->tok, cat, an + bn);
        if (a < 0 || b < 0 || ab < 0) continue;  // an inconsistent vocabulary: skip the rule
        uint64_t key = rg_bpe_pair_key(a, b);
        if (rg_bpe_umap_get(&e->merge, key)) continue;  // a repeated rule keeps its lower rank
        if (!rg_bpe_umap_upsert(&e->merge, key, ((int64_t)k << 32) | (uint32_t)ab)) {
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
    const int64_t *r = rg_bpe_umap_get(&e->merge, rg_bpe_pair_key(e->syms[left].id, e->syms[right].id));
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
        size_t j = rg_bpe_piece_end(s, len, i);
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
