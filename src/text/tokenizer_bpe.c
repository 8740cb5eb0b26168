// tokenizer_bpe.c - byte-level BPE with merge ranks (spec/architectures.md §5.4, steps 2-6).
//
// Each pre-token's bytes start as one symbol per byte: the token of the byte's stand-in
// character from GPT-2's byte-to-unicode table (byte_unicode.h). Then, repeatedly, the
// adjacent pair with the lowest merge rank is replaced by its merge result, ties going to the
// leftmost pair, until no adjacent pair has a rank. Symbols are token ids throughout: the
// loader checked that every merge joins two tokens into a token, so a pair of ids fully
// determines the merge. A min-heap keyed by (rank, left position) holds candidate pairs;
// entries made stale by an earlier merge are recognized and dropped when popped.
#include <stdlib.h>
#include <string.h>

#include "text/byte_unicode.h"
#include "text/tokenizer_impl.h"

typedef struct bpe_pair {
    int32_t rank;
    int32_t left, right;        // symbol positions
    int32_t left_id, right_id;  // their ids when the pair was queued
} bpe_pair;
_Static_assert(sizeof(bpe_pair) <= 32, "rg_tok_heap_pop holds an element in 32 bytes");

static bool pair_before(const void *va, const void *vb) {
    const bpe_pair *a = va, *b = vb;
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static bool heap_push(rg_tok_scratch *s, bpe_pair p) { return rg_tok_heap_push(s, &p, sizeof p, pair_before); }

static bpe_pair heap_pop(rg_tok_scratch *s) {
    bpe_pair p;
    rg_tok_heap_pop(s, &p, pair_before);
    return p;
}

static bool queue_pair(const rg_tokenizer *tok, rg_tok_scratch *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    const rg_merge_slot *m = rg_merge_find(tok, s->sym_id[left], s->sym_id[right]);
    if (!m) return true;
    return heap_push(s, (bpe_pair){m->rank, left, right, s->sym_id[left], s->sym_id[right]});
}

// A symbol with no token (a byte whose stand-in character is not in the vocabulary): the
// unknown token when there is one, otherwise nothing (§5.4 step 6).
static bool push_missing(const rg_tokenizer *tok, rg_idvec *out) {
    return tok->info.unk < 0 || rg_idvec_push(out, tok->info.unk);
}

// Encodes one pre-token, bytes w[0..n).
static bool bpe_word(const rg_tokenizer *tok, const uint8_t *w, size_t n, rg_tok_scratch *s, rg_idvec *out) {
    if (n == 1) {
        int32_t id = tok->byte_token[w[0]];
        return id >= 0 ? rg_idvec_push(out, id) : push_missing(tok, out);
    }
    if (tok->info.ignore_merges) {
        // §5.4 step 4: a pre-token that is itself a token is emitted without merging.
        if (!rg_tok_scratch_buf(s, 2 * n + 1)) return false;
        size_t m = rg_bytes_to_bpe_text(w, n, s->buf, s->buf_cap);
        int32_t id = rg_tok_lookup(tok, s->buf, m);
        if (id >= 0) return rg_idvec_push(out, id);
    }
    if (n > INT32_MAX || !rg_tok_scratch_syms(s, n)) return false;
    for (size_t k = 0; k < n; k++) {
        s->sym_id[k] = tok->byte_token[w[k]];
        s->sym_prev[k] = (int32_t)k - 1;
        s->sym_next[k] = k + 1 < n ? (int32_t)k + 1 : -1;
    }
    s->heap_n = 0;
    for (size_t k = 0; k + 1 < n; k++)
        if (!queue_pair(tok, s, (int32_t)k, (int32_t)k + 1)) return false;
    while (s->heap_n) {
        bpe_pair p = heap_pop(s);
        // Stale when either side has been merged since the pair was queued.
        if (s->sym_id[p.left] != p.left_id || s->sym_next[p.left] != p.right || s->sym_id[p.right] != p.right_id)
            continue;
        const rg_merge_slot *m = rg_merge_find(tok, p.left_id, p.right_id);
        s->sym_id[p.left] = m->result;
        int32_t after = s->sym_next[p.right];
        s->sym_next[p.left] = after;
        if (after >= 0) s->sym_prev[after] = p.left;
        s->sym_id[p.right] = -2;  // gone: never equal to a queued id
        s->sym_next[p.right] = -1;
        if (!queue_pair(tok, s, s->sym_prev[p.left], p.left)) return false;
        if (!queue_pair(tok, s, p.left, after)) return false;
    }
    for (int32_t k = 0; k >= 0; k = s->sym_next[k]) {
        int32_t id = s->sym_id[k];
        if (!(id >= 0 ? rg_idvec_push(out, id) : push_missing(tok, out))) return false;
    }
    return true;
}

typedef struct bpe_ctx {
    const rg_tokenizer *tok;
    const uint8_t *text;
    rg_tok_scratch *s;
    rg_idvec *out;
} bpe_ctx;

static bool on_piece(void *ctx, size_t begin, size_t end) {
    bpe_ctx *c = ctx;
    return bpe_word(c->tok, c->text + begin, end - begin, c->s, c->out) && c->out->ok;
}

bool rg_bpe_encode_fragment(const rg_tokenizer *tok, const char *text, size_t len, rg_tok_scratch *s,
                            rg_idvec *out) {
    bpe_ctx c = {tok, (const uint8_t *)text, s, out};
    return rg_pretokenize(tok->info.pretok, text, len, s, on_piece, &c);
}
