// tokenizer_special.c - special tokens: the attributes llama.cpp gives them and the split
// that cuts their text out of the input (spec/architectures.md §5.4 step 1; the rules are
// those of llama.cpp's src/llama-vocab.cpp, its loader and tokenizer_st_partition).
//
// Attributes. A token is split out of text when its type is CONTROL, USER_DEFINED or UNKNOWN,
// or when its text looks like a control token: one of llama.cpp's end-of-generation texts, or
// a fill-in-the-middle text while the file names no token for that role. Those are CONTROL
// whatever their stored type, so Phi-3's USER_DEFINED "</s>" is split only with
// parse_special. Strip rules come from names, as in llama.cpp: a general.name holding "phi-3"
// or "phi3" (any case) drops the whitespace after every special token except <unk>, <s> and
// <|endoftext|>; "modern-bert" drops the whitespace before [MASK]; the jina-v2 pre-tokenizers
// and the nomic-bert-moe / jina-bert-v3 architectures the whitespace before <mask>.
//
// The split. llama.cpp takes the special tokens longest text first and, for each, cuts every
// occurrence out of the text that is still plain, left to right, dropping the whitespace next
// to it that the token's lstrip/rstrip asks for. The same cuts come from one pass: find
// every occurrence of every special text with the trie, sort them by (text length
// descending, id ascending, position), and take each whose bytes are all still plain text.
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/tokenizer_impl.h"

// ---------------------------------------------------------------------------
// Attributes

// Texts llama.cpp treats as ending generation; each is a control token whatever its type.
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // <｜end▁of▁sentence｜>
    "[e~[",
};

// Fill-in-the-middle texts per role: a control token when the file names no id for the role.
static const struct {
    const char *key, *old_key;
    const char *texts[9];
} fim_roles[] = {
    {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id",
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
      "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"}},
    {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id",
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>",
      "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"}},
    {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id",
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
      "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"}},
    {"tokenizer.ggml.fim_pad_token_id", NULL, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
    {"tokenizer.ggml.fim_rep_token_id", NULL, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
    {"tokenizer.ggml.fim_sep_token_id", NULL, {"<|file_sep|>"}},
};

// True when the file names a token id in range under key (llama.cpp ignores one out of range).
static bool names_id(const rg_tokenizer *tok, const rg_gguf *g, const char *key) {
    const rg_gguf_kv *kv = key ? rg_gguf_find(g, key) : NULL;
    int64_t v;
    return kv && kv->type != RG_GGUF_ARRAY && rg_gguf_kv_i64(kv, 0, &v) && v >= 0 && v < tok->info.n_tokens;
}

// The string value of key holds needle; with lower, the ASCII letters of the value are taken
// in lowercase (needle is lowercase).
static bool value_contains(const rg_gguf *g, const char *key, const char *needle, bool lower) {
    const rg_gguf_kv *kv = rg_gguf_find(g, key);
    if (!kv || kv->type != RG_GGUF_STRING) return false;
    rg_gguf_str s = rg_gguf_kv_str(kv, 0);
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= s.len; i++) {
        size_t k = 0;
        for (; k < m; k++) {
            char c = s.ptr[i + k];
            if (lower && c >= 'A' && c <= 'Z') c = (char)(c + 32);
            if (c != needle[k]) break;
        }
        if (k == m) return true;
    }
    return false;
}

// Sets or clears bits of the token with this text. A text can belong to several tokens; the
// text map, like llama.cpp's, names the last.
static void set_attr(rg_tokenizer *tok, const char *text, uint8_t bit, bool on) {
    int32_t id = rg_tok_lookup(tok, text, strlen(text));
    if (id < 0) return;
    if (on) tok->attr[id] |= bit;
    else tok->attr[id] &= (uint8_t)~bit;
}

// llama.cpp's per-model strip attributes, keyed on names; the first rule that applies wins.
static void set_strip_attrs(rg_tokenizer *tok, const rg_gguf *g) {
    static const char *const jina_pre[] = {"jina-v2-de", "jina-v2-es", "jina-v2-code"};
    static const char *const jina_arch[] = {"nomic-bert-moe", "jina-bert-v3"};
    bool jina = false;
    for (size_t k = 0; k < 3; k++) jina |= value_contains(g, "tokenizer.ggml.pre", jina_pre[k], false);
    for (size_t k = 0; k < 2; k++) jina |= value_contains(g, "general.architecture", jina_arch[k], false);
    if (jina) {
        set_attr(tok, "<mask>", RG_TOKATTR_LSTRIP, true);
    } else if (value_contains(g, "general.name", "phi-3", true) || value_contains(g, "general.name", "phi3", true)) {
        for (int32_t id = 0; id < tok->info.n_tokens; id++)
            if (tok->attr[id] & RG_TOKATTR_SPECIAL) tok->attr[id] |= RG_TOKATTR_RSTRIP;
        set_attr(tok, "</s>", RG_TOKATTR_RSTRIP, true);
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t k = 0; k < 3; k++) set_attr(tok, keep[k], RG_TOKATTR_RSTRIP, false);
    } else if (value_contains(g, "general.name", "modern-bert", true)) {
        set_attr(tok, "[MASK]", RG_TOKATTR_LSTRIP, true);
    }
}

static void set_attrs(rg_tokenizer *tok, const rg_gguf *g) {
    const int32_t n = tok->info.n_tokens;
    for (int32_t id = 0; id < n; id++) {
        int t = tok->type[id];
        if (t == RG_TOKTYPE_CONTROL || t == RG_TOKTYPE_UNKNOWN) tok->attr[id] |= RG_TOKATTR_SPECIAL | RG_TOKATTR_CONTROL;
        if (t == RG_TOKTYPE_USER_DEFINED) tok->attr[id] |= RG_TOKATTR_SPECIAL;
    }
    for (size_t k = 0; k < sizeof eog_texts / sizeof eog_texts[0]; k++)
        set_attr(tok, eog_texts[k], RG_TOKATTR_EOG | RG_TOKATTR_SPECIAL | RG_TOKATTR_CONTROL, true);
    for (size_t r = 0; r < sizeof fim_roles / sizeof fim_roles[0]; r++) {
        if (names_id(tok, g, fim_roles[r].key) || names_id(tok, g, fim_roles[r].old_key)) continue;
        for (size_t k = 0; k < 9 && fim_roles[r].texts[k]; k++)
            set_attr(tok, fim_roles[r].texts[k], RG_TOKATTR_SPECIAL | RG_TOKATTR_CONTROL, true);
    }
    for (int32_t id = 0; id < n; id++)  // an empty text is never found in text
        if (tok->text_len[id] == 0) tok->attr[id] &= (uint8_t)~RG_TOKATTR_SPECIAL;
    set_strip_attrs(tok, g);
}

// The byte trie of special-token texts. At a node shared by several tokens (one text, several
// ids) the lowest id is kept, the one llama.cpp's longest-first order reaches first.
static rg_status build_trie(rg_tokenizer *tok, rg_error *err) {
    size_t nodes = 1;
    for (int32_t id = 0; id < tok->info.n_tokens; id++)
        if (tok->attr[id] & RG_TOKATTR_SPECIAL) nodes += tok->text_len[id];
    if (nodes > INT32_MAX) return rg_fail(err, RG_ERR_FORMAT, "tokenizer: special-token texts too long");
    tok->trie = malloc(nodes * sizeof *tok->trie);
    if (!tok->trie) return rg_fail(err, RG_ERR_NOMEM, "tokenizer: out of memory");
    tok->trie[0] = (rg_trie_node){-1, -1, -1, -1, 0};
    tok->n_trie = 1;
    for (int32_t id = 0; id < tok->info.n_tokens; id++) {
        if (!(tok->attr[id] & RG_TOKATTR_SPECIAL)) continue;
        const uint8_t *s = (const uint8_t *)tok->texts + tok->text_off[id];
        int32_t node = 0;
        for (uint32_t k = 0; k < tok->text_len[id]; k++) {
            int32_t c = tok->trie[node].first_child;
            while (c >= 0 && tok->trie[c].byte != s[k]) c = tok->trie[c].next_sibling;
            if (c < 0) {
                c = tok->n_trie++;
                tok->trie[c] = (rg_trie_node){-1, tok->trie[node].first_child, -1, -1, s[k]};
                tok->trie[node].first_child = c;
            }
            node = c;
        }
        rg_trie_node *end = &tok->trie[node];
        if (end->token < 0) end->token = id;
        if (end->token_plain < 0 && !(tok->attr[id] & RG_TOKATTR_CONTROL)) end->token_plain = id;
        tok->trie_first[s[0]] = 1;
    }
    return RG_OK;
}

rg_status rg_tok_special_init(rg_tokenizer *tok, const rg_gguf *g, rg_error *err) {
    set_attrs(tok, g);
    return build_trie(tok, err);
}

// ---------------------------------------------------------------------------
// The split

typedef struct special_hit {
    uint32_t start, len;
    int32_t id;
} special_hit;

// llama.cpp's order: longer texts first, then (our choice where its sort leaves the order
// open) lower ids; one token's occurrences left to right.
static int hit_priority(const void *va, const void *vb) {
    const special_hit *a = va, *b = vb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    if (a->id != b->id) return a->id < b->id ? -1 : 1;
    return a->start < b->start ? -1 : a->start > b->start;
}

static int hit_position(const void *va, const void *vb) {
    const special_hit *a = va, *b = vb;
    return a->start < b->start ? -1 : a->start > b->start;
}

// isspace() in the C locale, which is what llama.cpp's strip sees.
static bool is_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Every occurrence of a special text that may be split (all of them, overlapping ones too).
static bool find_hits(const rg_tokenizer *tok, const uint8_t *u, size_t len, bool parse_special, special_hit **hits,
                      size_t *n_hits) {
    size_t n = 0, cap = 0;
    special_hit *h = NULL;
    for (size_t i = 0; i < len; i++) {
        if (!tok->trie_first[u[i]]) continue;
        int32_t node = 0;
        for (size_t k = i; k < len; k++) {
            int32_t c = tok->trie[node].first_child;
            while (c >= 0 && tok->trie[c].byte != u[k]) c = tok->trie[c].next_sibling;
            if (c < 0) break;
            node = c;
            int32_t id = parse_special ? tok->trie[node].token : tok->trie[node].token_plain;
            if (id < 0) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                special_hit *g = realloc(h, cap * sizeof *h);
                if (!g) {
                    free(h);
                    return false;
                }
                h = g;
            }
            h[n++] = (special_hit){(uint32_t)i, (uint32_t)(k + 1 - i), id};
        }
    }
    *hits = h;
    *n_hits = n;
    return true;
}

enum { PLAIN = 0, TAKEN = 1, STRIPPED = 2 };

// Calls piece for the ordinary text of [begin, end) without the stripped whitespace at its
// ends (stripped bytes always touch the token that stripped them).
static bool plain_piece(const uint8_t *state, size_t begin, size_t end, rg_split_fn piece, void *ctx) {
    while (begin < end && state[begin] == STRIPPED) begin++;
    while (end > begin && state[end - 1] == STRIPPED) end--;
    return begin == end || piece(ctx, begin, end, -1);
}

bool rg_tok_split_special(const rg_tokenizer *tok, const char *text, size_t len, bool parse_special, rg_split_fn piece,
                          void *ctx) {
    const uint8_t *u = (const uint8_t *)text;
    special_hit *hits;
    size_t n_hits;
    if (len >= UINT32_MAX || !find_hits(tok, u, len, parse_special, &hits, &n_hits)) return false;
    if (n_hits == 0) return len == 0 || piece(ctx, 0, len, -1);
    uint8_t *state = calloc(len, 1);
    if (!state) {
        free(hits);
        return false;
    }
    qsort(hits, n_hits, sizeof *hits, hit_priority);
    size_t n_taken = 0;
    for (size_t k = 0; k < n_hits; k++) {
        special_hit h = hits[k];
        size_t b = h.start, e = (size_t)h.start + h.len;
        size_t i = b;
        while (i < e && state[i] == PLAIN) i++;
        if (i < e) continue;  // overlaps a token taken before or whitespace it stripped
        memset(state + b, TAKEN, h.len);
        if (tok->attr[h.id] & RG_TOKATTR_LSTRIP)
            for (size_t j = b; j > 0 && state[j - 1] == PLAIN && is_space(u[j - 1]); j--) state[j - 1] = STRIPPED;
        if (tok->attr[h.id] & RG_TOKATTR_RSTRIP)
            for (size_t j = e; j < len && state[j] == PLAIN && is_space(u[j]); j++) state[j] = STRIPPED;
        hits[n_taken++] = h;
    }
    qsort(hits, n_taken, sizeof *hits, hit_position);
    bool ok = true;
    size_t at = 0;
    for (size_t k = 0; k < n_taken && ok; k++) {
        ok = plain_piece(state, at, hits[k].start, piece, ctx) &&
             piece(ctx, hits[k].start, (size_t)hits[k].start + hits[k].len, hits[k].id);
        at = (size_t)hits[k].start + hits[k].len;
    }
    ok = ok && plain_piece(state, at, len, piece, ctx);
    free(state);
    free(hits);
    return ok;
}
