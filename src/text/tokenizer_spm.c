// tokenizer_spm.c - SentencePiece-style BPE by token scores (tokenizer.ggml.model = "llama").
//
// The fragment is escaped first: every space becomes "▁" (U+2581), and a "▁" is put in front
// when the caller asks (add_space_prefix at the start of the text and after a special token).
// The symbols start as the UTF-8 characters of the escaped text. Repeatedly, among adjacent
// symbol pairs whose concatenation is a token, the pair whose token has the highest score is
// merged (ties: leftmost). Symbols are byte ranges of the escaped text, so a pair's text is
// one contiguous range and needs no copying. A final symbol that is not a token (a single
// character outside the vocabulary) is written as its bytes through the <0xXX> byte tokens.
// This is the merge order llama.cpp uses for these vocabularies; it reproduces the Hugging
// Face reference ids of the Llama 2 and Phi-3 test vectors.
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"

typedef struct spm_pair {
    float score;
    int32_t left, right;  // symbol positions
    uint32_t size;        // bytes of the pair when queued
} spm_pair;
_Static_assert(sizeof(spm_pair) <= 32, "rg_tok_heap_pop holds an element in 32 bytes");

static bool pair_before(const void *va, const void *vb) {
    const spm_pair *a = va, *b = vb;
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static bool heap_push(rg_tok_scratch *s, spm_pair p) { return rg_tok_heap_push(s, &p, sizeof p, pair_before); }

static spm_pair heap_pop(rg_tok_scratch *s) {
    spm_pair p;
    rg_tok_heap_pop(s, &p, pair_before);
    return p;
}

// Tokens that text may turn into: not CONTROL, UNKNOWN, UNUSED or BYTE tokens, whose text
// ("<s>", "<0x0A>") must not be assembled from ordinary characters.
static int32_t text_token(const rg_tokenizer *tok, const char *p, size_t n) {
    int32_t id = rg_tok_lookup(tok, p, n);
    if (id < 0) return -1;
    int t = tok->type[id];
    return (t == RG_TOKTYPE_NORMAL || t == RG_TOKTYPE_UNDEFINED || t == RG_TOKTYPE_USER_DEFINED) ? id : -1;
}

static bool queue_pair(const rg_tokenizer *tok, rg_tok_scratch *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    uint32_t size = s->sym_len[left] + s->sym_len[right];
    int32_t id = text_token(tok, s->buf + s->sym_off[left], size);
    if (id < 0) return true;
    return heap_push(s, (spm_pair){tok->scores[id], left, right, size});
}

// Merges the escaped text buf[begin..end) and appends its tokens.
static bool spm_segment(const rg_tokenizer *tok, rg_tok_scratch *s, size_t begin, size_t end, rg_idvec *out) {
    // Symbols: one per UTF-8 character; a byte that does not start one stands alone.
    if (!rg_tok_scratch_syms(s, end - begin)) return false;
    const uint8_t *u = (const uint8_t *)s->buf;
    int32_t n_sym = 0;
    for (size_t i = begin; i < end;) {
        uint32_t cp;
        size_t k = rg_utf8_decode(u, end, i, &cp);
        if (!k) k = 1;
        s->sym_off[n_sym] = (uint32_t)i;
        s->sym_len[n_sym] = (uint32_t)k;
        s->sym_prev[n_sym] = n_sym - 1;
        s->sym_next[n_sym] = n_sym + 1;
        n_sym++;
        i += k;
    }
    s->sym_next[n_sym - 1] = -1;

    s->heap_n = 0;
    for (int32_t k = 0; k + 1 < n_sym; k++)
        if (!queue_pair(tok, s, k, k + 1)) return false;
    while (s->heap_n) {
        spm_pair p = heap_pop(s);
        // Symbols only grow, so unchanged sizes mean neither side was merged since queuing.
        if (s->sym_len[p.left] == 0 || s->sym_len[p.right] == 0 || s->sym_next[p.left] != p.right ||
            s->sym_len[p.left] + s->sym_len[p.right] != p.size)
            continue;
        s->sym_len[p.left] += s->sym_len[p.right];
        s->sym_len[p.right] = 0;
        int32_t after = s->sym_next[p.right];
        s->sym_next[p.left] = after;
        if (after >= 0) s->sym_prev[after] = p.left;
        if (!queue_pair(tok, s, s->sym_prev[p.left], p.left)) return false;
        if (!queue_pair(tok, s, p.left, after)) return false;
    }

    for (int32_t k = 0; k >= 0; k = s->sym_next[k]) {
        const char *p = s->buf + s->sym_off[k];
        uint32_t m = s->sym_len[k];
        int32_t id = text_token(tok, p, m);
        if (id >= 0) {
            if (!rg_idvec_push(out, id)) return false;
            continue;
        }
        // Byte fallback; a byte without a token becomes the unknown token (or is dropped).
        for (uint32_t j = 0; j < m; j++) {
            int32_t b = tok->byte_token[(uint8_t)p[j]];
            if (b < 0) b = tok->info.unk;
            if (b >= 0 && !rg_idvec_push(out, b)) return false;
        }
    }
    return true;
}

bool rg_spm_encode_fragment(const rg_tokenizer *tok, const char *text, size_t len, bool prefix_space,
                            rg_tok_scratch *s, rg_idvec *out) {
    static const char space_mark[3] = {'\xE2', '\x96', '\x81'};  // U+2581 "▁"
    // Escape: at most 3 bytes per input byte, plus the prefix.
    if (len > (UINT32_MAX - 3) / 3 || !rg_tok_scratch_buf(s, 3 * len + 3)) return false;
    size_t n = 0;
    if (prefix_space) {
        memcpy(s->buf, space_mark, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->buf + n, space_mark, 3);
            n += 3;
        } else {
            s->buf[n++] = text[i];
        }
    }
    if (n == 0) return true;
    if (!tok->spm_split_safe) return spm_segment(tok, s, 0, n, out);
    // No mergeable token holds "▁" after another character, so no merge can cross the point
    // just before a "▁" that follows something else: the pieces between such points are
    // merged independently, with the same result and without one heap over the whole text.
    size_t begin = 0;
    for (size_t i = 3; i + 3 <= n; i++) {
        if (memcmp(s->buf + i, space_mark, 3) != 0 || memcmp(s->buf + i - 3, space_mark, 3) == 0) continue;
        if (!spm_segment(tok, s, begin, i, out)) return false;
        begin = i;
        i += 2;
    }
    return spm_segment(tok, s, begin, n, out);
}
