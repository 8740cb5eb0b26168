// tokenizer_impl.h - what the tokenizer's source files share; not for other modules.
//
// tokenizer.c loads, encodes and decodes; tokenizer_special.c derives the special tokens'
// attributes and cuts their text out of the input; pretokenize.c cuts text into pre-tokens
// (§5.3); tokenizer_bpe.c and tokenizer_spm.c turn one piece of text into ids.
#ifndef RG_TEXT_TOKENIZER_IMPL_H
#define RG_TEXT_TOKENIZER_IMPL_H

#include "text/tokenizer.h"

// Per-token attribute bits (rg_tokenizer.attr), llama.cpp's LLAMA_TOKEN_ATTR_* as its loader
// derives them from the token types, the token texts and the model name (tokenizer_special.c).
enum {
    RG_TOKATTR_EOG = 0x01,      // ends generation
    RG_TOKATTR_SPECIAL = 0x02,  // found in text by the special split (CONTROL, USER_DEFINED or UNKNOWN)
    RG_TOKATTR_CONTROL = 0x04,  // split and shown only with parse_special / render_special
                                // (CONTROL or UNKNOWN type, or a control-looking text)
    RG_TOKATTR_LSTRIP = 0x08,   // the split drops the whitespace right before its text
    RG_TOKATTR_RSTRIP = 0x10,   // the split drops the whitespace right after its text
};

// One node of the byte trie of special-token texts. Children are a linked list (few per node).
typedef struct rg_trie_node {
    int32_t first_child, next_sibling;
    int32_t token;        // the first (lowest) special token whose text ends here, or -1
    int32_t token_plain;  // the same among tokens split without parse_special (not CONTROL), or -1
    uint8_t byte;
} rg_trie_node;

typedef struct rg_merge_slot {
    uint64_t key;
    int32_t rank, result;
} rg_merge_slot;

struct rg_tokenizer {
    rg_tokenizer_info info;
    char *texts;          // every token text, NUL-terminated, back to back
    uint32_t *text_off;   // [n_tokens] into texts
    uint32_t *text_len;   // [n_tokens]
    uint8_t *type;        // [n_tokens] RG_TOKTYPE_*
    uint8_t *attr;        // [n_tokens] RG_TOKATTR_*
    float *scores;        // [n_tokens] (all 0 when the file has none)

    // text -> id: open addressing, slot holds id + 1 (0 = empty) and the text's hash.
    uint32_t *map_ids, *map_hash;
    uint64_t map_mask;

    // BPE merges: (left id, right id) -> rank and result id; open addressing, key 0 = empty
    // (a stored key is ((left + 1) << 32) | (right + 1), never 0).
    rg_merge_slot *merges;
    uint64_t merge_mask;

    // BPE: the token of the single byte-level character that stands for byte b (-1 if none).
    // SPM: the <0xXX> token for byte b (or the one-byte token), for byte fallback (-1 if none).
    int32_t byte_token[256];

    // SPM: no token that text can form holds "▁" right after another character, so the text
    // may be merged in pieces cut before each such "▁" (tokenizer_spm.c).
    bool spm_split_safe;

    rg_trie_node *trie;   // node 0 is the root
    int32_t n_trie;
    uint8_t trie_first[256];  // 1 when some special text starts with this byte
};

// FNV-1a, 32 bits, of s[0..n).
static inline uint32_t rg_tok_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

// Token id of exactly s[0..n), or -1.
int32_t rg_tok_lookup(const rg_tokenizer *tok, const char *s, size_t n);

static inline uint64_t rg_merge_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)(left + 1) << 32) | (uint32_t)(right + 1);
}
static inline uint64_t rg_merge_hash(uint64_t key) {  // the MurmurHash3 / SplitMix64 finalizer
    uint64_t h = key;
    h = (h ^ (h >> 33)) * 0xFF51AFD7ED558CCDull;
    h = (h ^ (h >> 33)) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 33);
}
// The merge of the adjacent tokens (left, right), or NULL.
static inline const rg_merge_slot *rg_merge_find(const rg_tokenizer *tok, int32_t left, int32_t right) {
    if (left < 0 || right < 0 || !tok->merges) return NULL;
    uint64_t key = rg_merge_key(left, right);
    for (uint64_t i = rg_merge_hash(key) & tok->merge_mask;; i = (i + 1) & tok->merge_mask) {
        const rg_merge_slot *m = &tok->merges[i];
        if (m->key == key) return m;
        if (m->key == 0) return NULL;
    }
}

// A growable array of ids that the encoders append to; ok turns false when memory runs out.
typedef struct rg_idvec {
    int32_t *v;
    size_t n, cap;
    bool ok;
} rg_idvec;

bool rg_idvec_push(rg_idvec *iv, int32_t id);

// Reusable scratch memory for one rg_tokenize call. Every buffer grows on demand.
typedef struct rg_tok_scratch {
    // pre-tokenizer: code points of the current fragment
    uint32_t *cp;     // code point, or RG_CP_INVALID | byte for a byte that is not UTF-8
    uint32_t *off;    // byte offset of each code point; off[n] == fragment length
    uint8_t *fl;      // rg_unicode_flags of each code point
    size_t cp_cap;
    // encoders: symbols of the current word and their pair heap
    int32_t *sym_id, *sym_prev, *sym_next;
    uint32_t *sym_off, *sym_len;  // SPM: byte range of each symbol in the escaped text
    size_t sym_cap;
    void *heap;
    size_t heap_n, heap_cap, heap_elem;
    char *buf;        // BPE: byte-level text of a word; SPM: the escaped fragment
    size_t buf_cap;
} rg_tok_scratch;

void rg_tok_scratch_free(rg_tok_scratch *s);

// The encoders' pair heap in the scratch: elements of elem_size bytes (at most
// 32), `before(a, b)` true when a must come out first. A push with another
// element size than the heap holds starts it afresh. Push fails only when out
// of memory; pop requires heap_n > 0.
typedef bool (*rg_tok_before_fn)(const void *a, const void *b);
bool rg_tok_heap_push(rg_tok_scratch *s, const void *elem, size_t elem_size, rg_tok_before_fn before);
void rg_tok_heap_pop(rg_tok_scratch *s, void *out, rg_tok_before_fn before);
bool rg_tok_scratch_syms(rg_tok_scratch *s, size_t n);
bool rg_tok_scratch_buf(rg_tok_scratch *s, size_t n);

#define RG_CP_INVALID 0x80000000u

// Sets the special tokens' attribute bits (EOG, SPECIAL, CONTROL, LSTRIP, RSTRIP) from the
// types, the texts and g's general.name, then builds the trie of their texts. Needs the types,
// the text map and the special ids loaded.
rg_status rg_tok_special_init(rg_tokenizer *tok, const rg_gguf *g, rg_error *err);

// Cuts text[0..len) at the special-token texts it contains (llama.cpp's rules, tokenizer.h)
// and calls piece(ctx, begin, end, id) in order: id >= 0 for a special token whose text was
// text[begin..end), id -1 for ordinary text in between. Whitespace dropped by a token's
// lstrip/rstrip is in no piece. False when memory runs out or a callback returned false.
typedef bool (*rg_split_fn)(void *ctx, size_t begin, size_t end, int32_t id);
bool rg_tok_split_special(const rg_tokenizer *tok, const char *text, size_t len, bool parse_special, rg_split_fn piece,
                          void *ctx);

// Cuts text[0..len) into pre-tokens for the given family (§5.3) and calls piece(ctx, begin,
// end) with byte offsets, in order; the pieces tile the text exactly. Returns false when
// memory runs out or a callback returned false.
typedef bool (*rg_piece_fn)(void *ctx, size_t begin, size_t end);
bool rg_pretokenize(rg_pretok_kind kind, const char *text, size_t len, rg_tok_scratch *s, rg_piece_fn piece,
                    void *ctx);

// Byte-level BPE of one whole fragment (pre-tokenized inside). False when memory runs out.
bool rg_bpe_encode_fragment(const rg_tokenizer *tok, const char *text, size_t len, rg_tok_scratch *s, rg_idvec *out);
// SPM of one fragment; prefix_space adds the "▁" in front. False when memory runs out.
bool rg_spm_encode_fragment(const rg_tokenizer *tok, const char *text, size_t len, bool prefix_space,
                            rg_tok_scratch *s, rg_idvec *out);

// Length of the well-formed UTF-8 sequence at s[i] (1..4), with its code point, or 0 when
// the byte there does not start one (the caller then takes the byte alone).
size_t rg_utf8_decode(const uint8_t *s, size_t n, size_t i, uint32_t *cp);

#endif
