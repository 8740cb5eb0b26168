// tokenizer.c - loading a tokenizer from GGUF, BOS/EOS, decoding (spec/architectures.md §5).
// The special tokens' attributes and split live in tokenizer_special.c, the encoders in
// tokenizer_bpe.c and tokenizer_spm.c, the pre-tokenizers in pretokenize.c.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/byte_unicode.h"
#include "text/tokenizer_impl.h"

// ---------------------------------------------------------------------------
// Small shared helpers

bool rg_idvec_push(rg_idvec *iv, int32_t id) {
    if (!iv->ok) return false;
    if (iv->n == iv->cap) {
        size_t cap = iv->cap ? 2 * iv->cap : 256;
        int32_t *v = realloc(iv->v, cap * sizeof *v);
        if (!v) {
            iv->ok = false;
            return false;
        }
        iv->v = v;
        iv->cap = cap;
    }
    iv->v[iv->n++] = id;
    return true;
}

void rg_tok_scratch_free(rg_tok_scratch *s) {
    free(s->cp);
    free(s->off);
    free(s->fl);
    free(s->sym_id);
    free(s->sym_prev);
    free(s->sym_next);
    free(s->sym_off);
    free(s->sym_len);
    free(s->heap);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

static bool grow(void **p, size_t n, size_t elem) {
    void *q = realloc(*p, n * elem);
    if (!q) return false;
    *p = q;
    return true;
}

bool rg_tok_scratch_syms(rg_tok_scratch *s, size_t n) {
    if (n <= s->sym_cap) return true;
    size_t cap = n > 2 * s->sym_cap ? n : 2 * s->sym_cap;
    if (!grow((void **)&s->sym_id, cap, sizeof(int32_t)) || !grow((void **)&s->sym_prev, cap, sizeof(int32_t)) ||
        !grow((void **)&s->sym_next, cap, sizeof(int32_t)) || !grow((void **)&s->sym_off, cap, sizeof(uint32_t)) ||
        !grow((void **)&s->sym_len, cap, sizeof(uint32_t)))
        return false;
    s->sym_cap = cap;
    return true;
}

bool rg_tok_scratch_buf(rg_tok_scratch *s, size_t n) {
    if (n <= s->buf_cap) return true;
    size_t cap = n > 2 * s->buf_cap ? n : 2 * s->buf_cap;
    if (!grow((void **)&s->buf, cap, 1)) return false;
    s->buf_cap = cap;
    return true;
}

int32_t rg_tok_lookup(const rg_tokenizer *tok, const char *s, size_t n) {
    uint32_t h = rg_tok_hash(s, n);
    for (uint64_t i = h & tok->map_mask;; i = (i + 1) & tok->map_mask) {
        uint32_t slot = tok->map_ids[i];
        if (!slot) return -1;
        int32_t id = (int32_t)(slot - 1);
        if (tok->map_hash[i] == h && tok->text_len[id] == n && memcmp(tok->texts + tok->text_off[id], s, n) == 0)
            return id;
    }
}

// ---------------------------------------------------------------------------
// Loading

void rg_tokenizer_free(rg_tokenizer *tok) {
    if (!tok) return;
    free(tok->texts);
    free(tok->text_off);
    free(tok->text_len);
    free(tok->type);
    free(tok->attr);
    free(tok->scores);
    free(tok->map_ids);
    free(tok->map_hash);
    free(tok->merges);
    free(tok->trie);
    free((void *)tok->info.chat_template);
    free(tok);
}

static const struct {
    const char *name;
    rg_pretok_kind kind;
} pre_names[] = {
    {"default", RG_PRETOK_DEFAULT},  {"gpt-2", RG_PRETOK_GPT2},           {"phi-2", RG_PRETOK_GPT2},
    {"llama3", RG_PRETOK_LLAMA3},    {"llama-v3", RG_PRETOK_LLAMA3},      {"llama-bpe", RG_PRETOK_LLAMA3},
    {"lfm2", RG_PRETOK_LLAMA3},      {"falcon3", RG_PRETOK_LLAMA3},       {"pixtral", RG_PRETOK_LLAMA3},
    {"qwen2", RG_PRETOK_QWEN2},      {"deepseek-r1-qwen", RG_PRETOK_QWEN2}, {"smollm", RG_PRETOK_SMOLLM},
};

// Text of a GGUF string for messages: at most 60 bytes, with a marker when cut.
#define STRF(s) (int)((s).len > 60 ? 60 : (s).len), (s).ptr, ((s).len > 60 ? "..." : "")

// Reads one optional special-token id. -1 / 0xFFFFFFFF stored mean "none".
static rg_status read_special(const rg_gguf *g, const char *key, int32_t n_tokens, int32_t *id, rg_error *err) {
    const rg_gguf_kv *kv = rg_gguf_find(g, key);
    if (!kv) return RG_OK;
    int64_t v;
    if (kv->type == RG_GGUF_ARRAY || !rg_gguf_kv_i64(kv, 0, &v))
        return rg_fail(err, RG_ERR_FORMAT, "%s: %s is not an integer", g->path, key);
    if (v == -1 || v == (int64_t)UINT32_MAX) {
        *id = -1;
        return RG_OK;
    }
    if (v < 0 || v >= n_tokens)
        return rg_fail(err, RG_ERR_FORMAT, "%s: %s = %" PRId64 " is out of range: the vocabulary has %" PRId32 " tokens",
                       g->path, key, v, n_tokens);
    *id = (int32_t)v;
    return RG_OK;
}

static rg_status read_bool(const rg_gguf *g, const char *key, bool *out, rg_error *err) {
    const rg_gguf_kv *kv = rg_gguf_find(g, key);
    if (!kv) return RG_OK;
    return rg_gguf_get_bool(g, key, out, err);
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t p = 16;
    while (p < n) p *= 2;
    return p;
}

static rg_status build_text_map(rg_tokenizer *tok, rg_error *err) {
    uint64_t cap = pow2_at_least(2 * (uint64_t)tok->info.n_tokens);
    tok->map_ids = calloc(cap, sizeof *tok->map_ids);
    tok->map_hash = calloc(cap, sizeof *tok->map_hash);
    if (!tok->map_ids || !tok->map_hash) return rg_fail(err, RG_ERR_NOMEM, "tokenizer: out of memory");
    tok->map_mask = cap - 1;
    for (int32_t id = 0; id < tok->info.n_tokens; id++) {
        const char *s = tok->texts + tok->text_off[id];
        uint32_t n = tok->text_len[id];
        uint32_t h = rg_tok_hash(s, n);
        uint64_t i = h & tok->map_mask;
        // A text that occurs twice maps to its last id, as in llama.cpp.
        for (;; i = (i + 1) & tok->map_mask) {
            uint32_t slot = tok->map_ids[i];
            if (!slot) break;
            int32_t other = (int32_t)(slot - 1);
            if (tok->map_hash[i] == h && tok->text_len[other] == n && memcmp(tok->texts + tok->text_off[other], s, n) == 0)
                break;
        }
        tok->map_ids[i] = (uint32_t)id + 1;
        tok->map_hash[i] = h;
    }
    return RG_OK;
}

static rg_status build_merges(rg_tokenizer *tok, const rg_gguf *g, rg_error *err) {
    const rg_gguf_kv *kv = rg_gguf_find(g, "tokenizer.ggml.merges");
    if (!kv) return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.merges is missing (a gpt2 tokenizer needs it)", g->path);
    if (kv->type != RG_GGUF_ARRAY || kv->arr_type != RG_GGUF_STRING)
        return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.merges is not an array of strings", g->path);
    if (kv->n > INT32_MAX) return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.merges has too many entries", g->path);
    tok->info.n_merges = (int32_t)kv->n;
    uint64_t cap = pow2_at_least(2 * kv->n);
    tok->merges = calloc(cap, sizeof *tok->merges);
    if (!tok->merges) return rg_fail(err, RG_ERR_NOMEM, "tokenizer: out of memory for %" PRIu64 " merges", kv->n);
    tok->merge_mask = cap - 1;
    char *joined = NULL;
    size_t joined_cap = 0;
    rg_status st = RG_OK;
    for (uint64_t r = 0; r < kv->n && st == RG_OK; r++) {
        rg_gguf_str m = rg_gguf_kv_str(kv, r);
        // The two parts are split at the first space at index >= 1 (§5.1).
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) {
            st = rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.merges[%" PRIu64 "] = '%.*s%s' has no space between two parts",
                         g->path, r, STRF(m));
            break;
        }
        size_t la = (size_t)(sp - m.ptr), lb = m.len - la - 1;
        int32_t a = rg_tok_lookup(tok, m.ptr, la);
        int32_t b = rg_tok_lookup(tok, sp + 1, lb);
        if (a < 0 || b < 0) {
            st = rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.merges[%" PRIu64 "] = '%.*s%s': part '%.*s' is not a token",
                         g->path, r, STRF(m), (int)(a < 0 ? la : lb), a < 0 ? m.ptr : sp + 1);
            break;
        }
        if (la + lb + 1 > joined_cap) {
            joined_cap = 2 * (la + lb + 1);
            char *j = realloc(joined, joined_cap);
            if (!j) {
                st = rg_fail(err, RG_ERR_NOMEM, "tokenizer: out of memory");
                break;
            }
            joined = j;
        }
        memcpy(joined, m.ptr, la);
        memcpy(joined + la, sp + 1, lb);
        int32_t res = rg_tok_lookup(tok, joined, la + lb);
        if (res < 0) {
            st = rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.merges[%" PRIu64 "] = '%.*s%s': the result '%.*s' is not a token",
                         g->path, r, STRF(m), (int)(la + lb > 60 ? 60 : la + lb), joined);
            break;
        }
        uint64_t key = rg_merge_key(a, b);
        uint64_t i = rg_merge_hash(key) & tok->merge_mask;
        while (tok->merges[i].key && tok->merges[i].key != key) i = (i + 1) & tok->merge_mask;
        if (tok->merges[i].key) continue;  // a repeated pair keeps its first (lowest) rank
        tok->merges[i] = (rg_merge_slot){key, (int32_t)r, res};
    }
    free(joined);
    return st;
}

static rg_status load_tokens(rg_tokenizer *tok, const rg_gguf *g, rg_error *err) {
    const rg_gguf_kv *kv = rg_gguf_find(g, "tokenizer.ggml.tokens");
    if (!kv) return rg_fail(err, RG_ERR_NOT_FOUND, "%s: no tokenizer: tokenizer.ggml.tokens is missing", g->path);
    if (kv->type != RG_GGUF_ARRAY || kv->arr_type != RG_GGUF_STRING)
        return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.tokens is not an array of strings", g->path);
    if (kv->n == 0 || kv->n >= INT32_MAX)
        return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %" PRIu64 " entries", g->path, kv->n);
    int32_t n = (int32_t)kv->n;
    tok->info.n_tokens = n;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += rg_gguf_kv_str(kv, (uint64_t)i).len + 1;
    if (total > UINT32_MAX) return rg_fail(err, RG_ERR_FORMAT, "%s: token texts exceed 4 GiB", g->path);
    tok->texts = malloc(total);
    tok->text_off = malloc((size_t)n * sizeof *tok->text_off);
    tok->text_len = malloc((size_t)n * sizeof *tok->text_len);
    tok->type = malloc((size_t)n);
    tok->attr = calloc((size_t)n, 1);
    tok->scores = calloc((size_t)n, sizeof *tok->scores);
    if (!tok->texts || !tok->text_off || !tok->text_len || !tok->type || !tok->attr || !tok->scores)
        return rg_fail(err, RG_ERR_NOMEM, "tokenizer: out of memory for %" PRId32 " tokens", n);
    uint32_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        rg_gguf_str s = rg_gguf_kv_str(kv, (uint64_t)i);
        memcpy(tok->texts + pos, s.ptr, s.len);
        tok->texts[pos + s.len] = '\0';
        tok->text_off[i] = pos;
        tok->text_len[i] = (uint32_t)s.len;
        pos += (uint32_t)s.len + 1;
        if (s.len > tok->info.max_token_len) tok->info.max_token_len = s.len;
        tok->type[i] = RG_TOKTYPE_NORMAL;
    }

    const rg_gguf_kv *types = rg_gguf_find(g, "tokenizer.ggml.token_type");
    if (types) {
        if (types->type != RG_GGUF_ARRAY)
            return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.token_type is not an array", g->path);
        if (types->n != kv->n)
            return rg_fail(err, RG_ERR_FORMAT,
                           "%s: tokenizer.ggml.token_type has %" PRIu64 " entries but tokenizer.ggml.tokens has %" PRIu64,
                           g->path, types->n, kv->n);
        for (int32_t i = 0; i < n; i++) {
            int64_t t;
            if (!rg_gguf_kv_i64(types, (uint64_t)i, &t))
                return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.token_type is not numeric", g->path);
            if (t < 0 || t > RG_TOKTYPE_BYTE)
                return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.token_type[%" PRId32 "] = %" PRId64 " is not a token type (0..6)",
                               g->path, i, t);
            tok->type[i] = (uint8_t)t;
        }
    }
    const rg_gguf_kv *scores = rg_gguf_find(g, "tokenizer.ggml.scores");
    if (scores) {
        if (scores->type != RG_GGUF_ARRAY || scores->n != kv->n)
            return rg_fail(err, RG_ERR_FORMAT,
                           "%s: tokenizer.ggml.scores has %" PRIu64 " entries but tokenizer.ggml.tokens has %" PRIu64,
                           g->path, scores->type == RG_GGUF_ARRAY ? scores->n : 1, kv->n);
        for (int32_t i = 0; i < n; i++) {
            double v;
            if (!rg_gguf_kv_f64(scores, (uint64_t)i, &v))
                return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.scores is not numeric", g->path);
            tok->scores[i] = (float)v;
        }
    }
    return RG_OK;
}

static rg_status load_all(rg_tokenizer *tok, const rg_gguf *g, rg_error *err) {
    rg_tokenizer_info *in = &tok->info;
    const rg_gguf_kv *model = rg_gguf_find(g, "tokenizer.ggml.model");
    if (!model) return rg_fail(err, RG_ERR_NOT_FOUND, "%s: no tokenizer: tokenizer.ggml.model is missing", g->path);
    rg_gguf_str ms = rg_gguf_kv_str(model, 0);
    if (model->type != RG_GGUF_STRING) return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.model is not a string", g->path);
    if (rg_gguf_str_eq(ms, "gpt2")) in->kind = RG_VOCAB_BPE;
    else if (rg_gguf_str_eq(ms, "llama")) in->kind = RG_VOCAB_SPM;
    else
        return rg_fail(err, RG_ERR_UNSUPPORTED,
                       "%s: tokenizer.ggml.model '%.*s%s' is not supported (supported: gpt2 = byte-level BPE, llama = SentencePiece BPE)",
                       g->path, STRF(ms));

    in->pretok = RG_PRETOK_DEFAULT;
    const rg_gguf_kv *pre = rg_gguf_find(g, "tokenizer.ggml.pre");
    if (pre) {
        rg_gguf_str ps = rg_gguf_kv_str(pre, 0);
        if (pre->type != RG_GGUF_STRING) return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.pre is not a string", g->path);
        snprintf(in->pre_name, sizeof in->pre_name, "%.*s", (int)(ps.len < 31 ? ps.len : 31), ps.ptr);
        if (in->kind == RG_VOCAB_BPE) {
            size_t k = 0, n_names = sizeof pre_names / sizeof pre_names[0];
            while (k < n_names && !rg_gguf_str_eq(ps, pre_names[k].name)) k++;
            if (k == n_names)
                return rg_fail(err, RG_ERR_UNSUPPORTED,
                               "%s: tokenizer.ggml.pre '%.*s%s' is not supported (supported: default, gpt-2, phi-2, llama3, "
                               "llama-v3, llama-bpe, lfm2, falcon3, pixtral, qwen2, deepseek-r1-qwen, smollm)",
                               g->path, STRF(ps));
            in->pretok = pre_names[k].kind;
        }
    }

    rg_status st = load_tokens(tok, g, err);
    if (st) return st;
    if ((st = build_text_map(tok, err))) return st;

    // Defaults of the families (llama.cpp), then the keys.
    in->bos = in->eos = in->eot = in->eom = in->pad = in->unk = in->sep = -1;
    if (in->kind == RG_VOCAB_SPM) {
        in->bos = in->n_tokens > 1 ? 1 : -1;
        in->eos = in->n_tokens > 2 ? 2 : -1;
        in->unk = 0;
        in->add_bos = true;
        in->add_space_prefix = true;
    } else {
        in->ignore_merges = in->pretok == RG_PRETOK_LLAMA3;
        in->add_bos = in->pretok == RG_PRETOK_LLAMA3;
    }
    static const char *const id_keys[] = {
        "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",     "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",     "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.seperator_token_id",
    };
    int32_t *ids[] = {&in->bos, &in->eos, &in->eot, &in->eom, &in->pad, &in->unk, &in->sep};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++)
        if ((st = read_special(g, id_keys[k], in->n_tokens, ids[k], err))) return st;
    bool add_bos_default = in->add_bos;
    if ((st = read_bool(g, "tokenizer.ggml.add_bos_token", &in->add_bos, err))) return st;
    if ((st = read_bool(g, "tokenizer.ggml.add_eos_token", &in->add_eos, err))) return st;
    if (in->kind == RG_VOCAB_SPM && (st = read_bool(g, "tokenizer.ggml.add_space_prefix", &in->add_space_prefix, err)))
        return st;
    if (in->add_bos && in->bos < 0) {
        if (!add_bos_default || rg_gguf_find(g, "tokenizer.ggml.add_bos_token"))
            return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.add_bos_token is true but there is no bos_token_id", g->path);
        in->add_bos = false;
    }
    if (in->add_eos && in->eos < 0)
        return rg_fail(err, RG_ERR_FORMAT, "%s: tokenizer.ggml.add_eos_token is true but there is no eos_token_id", g->path);
    int32_t eog[] = {in->eos, in->eot, in->eom};
    for (size_t k = 0; k < 3; k++)
        if (eog[k] >= 0) tok->attr[eog[k]] |= RG_TOKATTR_EOG;

    if (in->kind == RG_VOCAB_BPE) {
        if ((st = build_merges(tok, g, err))) return st;
        for (int b = 0; b < 256; b++) {
            char buf[4];
            size_t n = rg_bytes_to_bpe_text(&(uint8_t){(uint8_t)b}, 1, buf, sizeof buf);
            tok->byte_token[b] = rg_tok_lookup(tok, buf, n);
        }
    } else {
        tok->spm_split_safe = true;
        for (int32_t id = 0; id < in->n_tokens && tok->spm_split_safe; id++) {
            int t = tok->type[id];
            if (t != RG_TOKTYPE_NORMAL && t != RG_TOKTYPE_UNDEFINED && t != RG_TOKTYPE_USER_DEFINED) continue;
            const char *s = tok->texts + tok->text_off[id];
            for (uint32_t k = 1; k + 3 <= tok->text_len[id]; k++)
                if (memcmp(s + k, "\xE2\x96\x81", 3) == 0 && (k < 3 || memcmp(s + k - 3, "\xE2\x96\x81", 3) != 0)) {
                    tok->spm_split_safe = false;
                    break;
                }
        }
        for (int b = 0; b < 256; b++) {
            char buf[8];
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            int32_t id = rg_tok_lookup(tok, buf, 6);
            if (id < 0) id = rg_tok_lookup(tok, &(char){(char)b}, 1);
            tok->byte_token[b] = id;
        }
    }
    if ((st = rg_tok_special_init(tok, g, err))) return st;

    const rg_gguf_kv *tmpl = rg_gguf_find(g, "tokenizer.chat_template");
    if (tmpl && tmpl->type == RG_GGUF_STRING) {
        rg_gguf_str ts = rg_gguf_kv_str(tmpl, 0);
        char *copy = malloc(ts.len + 1);
        if (!copy) return rg_fail(err, RG_ERR_NOMEM, "tokenizer: out of memory");
        memcpy(copy, ts.ptr, ts.len);
        copy[ts.len] = '\0';
        in->chat_template = copy;
        in->chat_template_len = ts.len;
    }
    return RG_OK;
}

rg_status rg_tokenizer_load(rg_tokenizer **out, const rg_gguf *g, rg_error *err) {
    *out = NULL;
    rg_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return rg_fail(err, RG_ERR_NOMEM, "tokenizer: out of memory");
    rg_status st = load_all(tok, g, err);
    if (st) {
        rg_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return RG_OK;
}

// ---------------------------------------------------------------------------
// Accessors

const rg_tokenizer_info *rg_tokenizer_get_info(const rg_tokenizer *tok) { return &tok->info; }
int32_t rg_tokenizer_n_tokens(const rg_tokenizer *tok) { return tok->info.n_tokens; }

static bool valid_id(const rg_tokenizer *tok, int32_t id) { return id >= 0 && id < tok->info.n_tokens; }

const char *rg_token_text(const rg_tokenizer *tok, int32_t id, size_t *len) {
    if (!valid_id(tok, id)) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = tok->text_len[id];
    return tok->texts + tok->text_off[id];
}

int rg_token_type(const rg_tokenizer *tok, int32_t id) { return valid_id(tok, id) ? tok->type[id] : -1; }
float rg_token_score(const rg_tokenizer *tok, int32_t id) { return valid_id(tok, id) ? tok->scores[id] : 0.0f; }
int32_t rg_token_find(const rg_tokenizer *tok, const char *text, size_t len) { return rg_tok_lookup(tok, text, len); }
bool rg_token_is_eog(const rg_tokenizer *tok, int32_t id) { return valid_id(tok, id) && (tok->attr[id] & RG_TOKATTR_EOG); }

int rg_token_eog_ids(const rg_tokenizer *tok, int32_t *out, int cap) {
    int n = 0;
    for (int32_t t = 0; t < rg_tokenizer_n_tokens(tok) && n < cap; t++)
        if (rg_token_is_eog(tok, t)) out[n++] = t;
    return n;
}

// ---------------------------------------------------------------------------
// Encoding

typedef struct encode_ctx {
    const rg_tokenizer *tok;
    const char *text;
    rg_tok_scratch s;
    rg_idvec *out;
} encode_ctx;

// One piece of the special split: a special token's id, or ordinary text. Every text piece
// starts the text or follows a special token, which is where an SPM vocabulary with
// add_space_prefix puts its "▁" (llama.cpp's rule).
static bool encode_piece(void *vctx, size_t begin, size_t end, int32_t id) {
    encode_ctx *c = vctx;
    const rg_tokenizer *tok = c->tok;
    if (id >= 0) return rg_idvec_push(c->out, id);
    const char *text = c->text + begin;
    if (tok->info.kind == RG_VOCAB_SPM)
        return rg_spm_encode_fragment(tok, text, end - begin, tok->info.add_space_prefix, &c->s, c->out);
    return rg_bpe_encode_fragment(tok, text, end - begin, &c->s, c->out);
}

// BOS and EOS as the model asks when add_special, nothing else: text that starts with the BOS
// text gets a second BOS, as in llama.cpp (the callers that render text with a BOS in it add
// none themselves).
static bool tokenize_into(const rg_tokenizer *tok, const char *text, size_t len, bool add_special, bool parse_special,
                          rg_idvec *out) {
    if (len >= UINT32_MAX) return false;  // offsets are 32-bit
    const rg_tokenizer_info *in = &tok->info;
    if (add_special && in->add_bos && in->bos >= 0) rg_idvec_push(out, in->bos);
    encode_ctx c = {.tok = tok, .text = text, .out = out};
    bool ok = rg_tok_split_special(tok, text, len, parse_special, encode_piece, &c);
    if (ok && add_special && in->add_eos && in->eos >= 0) ok = rg_idvec_push(out, in->eos);
    rg_tok_scratch_free(&c.s);
    return ok && out->ok;
}

int64_t rg_tokenize(const rg_tokenizer *tok, const char *text, size_t len, bool add_special, bool parse_special,
                    int32_t *ids, int64_t cap) {
    rg_idvec out = {.ok = true};
    if (!tokenize_into(tok, text, len, add_special, parse_special, &out)) {
        free(out.v);
        return -1;
    }
    int64_t n = (int64_t)out.n;
    if (cap > 0 && ids && n > 0) memcpy(ids, out.v, (size_t)(n < cap ? n : cap) * sizeof *ids);
    free(out.v);
    return n;
}

rg_status rg_tokenize_alloc(const rg_tokenizer *tok, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **ids, size_t *n_ids, rg_error *err) {
    rg_idvec out = {.ok = true};
    *ids = NULL;
    *n_ids = 0;
    if (!tokenize_into(tok, text, len, add_special, parse_special, &out)) {
        free(out.v);
        if (len >= UINT32_MAX) return rg_fail(err, RG_ERR_ARG, "tokenize: text of %zu bytes is too long (4 GiB at most)", len);
        return rg_fail(err, RG_ERR_NOMEM, "tokenize: out of memory for %zu bytes of text", len);
    }
    if (!out.v) out.v = malloc(sizeof *out.v);  // a valid pointer even for no tokens
    *ids = out.v;
    *n_ids = out.n;
    return RG_OK;
}

// ---------------------------------------------------------------------------
// Decoding

// Appends src[0..n) to out at *pos under the snprintf convention (the length always grows).
static void put(char *out, size_t cap, size_t *pos, const void *src, size_t n) {
    if (*pos < cap) {
        size_t room = cap - *pos;
        memcpy(out + *pos, src, n < room ? n : room);
    }
    *pos += n;
}

// The bytes of one token, appended at *pos; strip_space drops one leading space.
static void piece_into(const rg_tokenizer *tok, int32_t id, bool render_special, bool strip_space, char *out,
                       size_t cap, size_t *pos) {
    if (!valid_id(tok, id)) return;
    const char *t = tok->texts + tok->text_off[id];
    size_t n = tok->text_len[id];
    if (tok->attr[id] & RG_TOKATTR_CONTROL) {  // CONTROL, UNKNOWN or a control-looking text
        if (render_special) put(out, cap, pos, t, n);
        return;
    }
    switch (tok->type[id]) {
    case RG_TOKTYPE_USER_DEFINED: put(out, cap, pos, t, n); return;
    case RG_TOKTYPE_UNUSED: return;
    default: break;
    }
    if (tok->info.kind == RG_VOCAB_SPM) {
        if (tok->type[id] == RG_TOKTYPE_BYTE) {
            unsigned v;
            if (n == 6 && sscanf(t, "<0x%2X>", &v) == 1) {
                char b = (char)v;
                if (!(strip_space && b == ' ')) put(out, cap, pos, &b, 1);
                return;
            }
        }
        // "▁" (E2 96 81) stands for a space.
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(t + i, "\xE2\x96\x81", 3) == 0) {
                if (!strip_space) put(out, cap, pos, " ", 1);
                strip_space = false;
                i += 3;
            } else {
                size_t j = i + 1;
                while (j < n && !(j + 3 <= n && memcmp(t + j, "\xE2\x96\x81", 3) == 0)) j++;
                put(out, cap, pos, t + i, j - i);
                strip_space = false;
                i = j;
            }
        }
        return;
    }
    // Byte-level text back to bytes; text that is not byte-level (a foreign token) verbatim.
    uint8_t small[512];
    int64_t m = rg_bpe_text_to_bytes(t, n, small, sizeof small);
    if (m < 0) {
        put(out, cap, pos, t, n);
    } else if ((size_t)m <= sizeof small) {
        put(out, cap, pos, small, (size_t)m);
    } else {
        uint8_t *big = malloc((size_t)m);
        if (!big) return;
        rg_bpe_text_to_bytes(t, n, big, (size_t)m);
        put(out, cap, pos, big, (size_t)m);
        free(big);
    }
}

size_t rg_token_to_piece(const rg_tokenizer *tok, int32_t id, bool render_special, char *out, size_t cap) {
    size_t pos = 0;
    piece_into(tok, id, render_special, false, out, cap, &pos);
    if (cap > 0) out[pos < cap ? pos : cap - 1] = '\0';
    return pos;
}

// SPM with a space prefix: encoding put one "▁" at the start and after every special token.
static bool strips_after(const rg_tokenizer *tok, int32_t id) {
    return valid_id(tok, id) && (tok->attr[id] & RG_TOKATTR_SPECIAL);
}

size_t rg_detokenize(const rg_tokenizer *tok, const int32_t *ids, size_t n, bool render_special, char *out,
                     size_t cap) {
    size_t pos = 0;
    bool spm_prefix = tok->info.kind == RG_VOCAB_SPM && tok->info.add_space_prefix;
    bool strip = spm_prefix;
    for (size_t i = 0; i < n; i++) {
        piece_into(tok, ids[i], render_special, strip && !strips_after(tok, ids[i]), out, cap, &pos);
        strip = spm_prefix && strips_after(tok, ids[i]);
    }
    if (cap > 0) out[pos < cap ? pos : cap - 1] = '\0';
    return pos;
}

// ---------------------------------------------------------------------------
// Streaming decode

void rg_detok_stream_init(rg_detok_stream *s, const rg_tokenizer *tok, bool render_special) {
    memset(s, 0, sizeof *s);
    s->tok = tok;
    s->render_special = render_special;
    s->strip_space = tok->info.kind == RG_VOCAB_SPM && tok->info.add_space_prefix;
}

size_t rg_detok_stream_max_out(const rg_tokenizer *tok) { return tok->info.max_token_len + 4; }

// How many bytes at the end of p[0..n) form a UTF-8 sequence that is incomplete but still
// well-formed so far (0..3): those are held back for the next token.
static size_t incomplete_tail(const uint8_t *p, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        uint8_t c = p[n - back];
        if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
        if (c >= 0xF5) need = 0;
        if (need <= back) return 0;  // complete (or not a lead byte at all)
        // The bytes present must be a valid start: check the second byte's range.
        if (back >= 2) {
            uint8_t s1 = p[n - back + 1];
            uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
            uint8_t hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            if (s1 < lo || s1 > hi) return 0;
        }
        return back;
    }
    return 0;
}

int64_t rg_detok_stream_push(rg_detok_stream *s, int32_t id, char *out, size_t cap) {
    const rg_tokenizer *tok = s->tok;
    bool special = strips_after(tok, id);
    bool strip = s->strip_space && !special;
    // Measure first so that a short buffer leaves the state unchanged.
    size_t len = 0;
    piece_into(tok, id, s->render_special, strip, NULL, 0, &len);
    if (s->n_held + len > cap) return -1;
    memcpy(out, s->held, s->n_held);
    size_t pos = s->n_held;
    piece_into(tok, id, s->render_special, strip, out, cap, &pos);
    size_t keep = incomplete_tail((const uint8_t *)out, pos);
    memcpy(s->held, out + pos - keep, keep);
    s->n_held = (uint8_t)keep;
    s->strip_space = tok->info.kind == RG_VOCAB_SPM && tok->info.add_space_prefix && special;
    return (int64_t)(pos - keep);
}

int64_t rg_detok_stream_flush(rg_detok_stream *s, char *out, size_t cap) {
    if (s->n_held > cap) return -1;
    memcpy(out, s->held, s->n_held);
    int64_t n = s->n_held;
    s->n_held = 0;
    return n;
}

// ---------------------------------------------------------------------------
// The encoders' binary heap over untyped elements of heap_elem bytes.

#define HEAP_AT(s, i) ((char *)(s)->heap + (i) * (s)->heap_elem)

bool rg_tok_heap_push(rg_tok_scratch *s, const void *elem, size_t elem_size, rg_tok_before_fn before) {
    if (s->heap_elem != elem_size) {  // the heap was last used by the other encoder
        free(s->heap);
        s->heap = NULL;
        s->heap_n = s->heap_cap = 0;
        s->heap_elem = elem_size;
    }
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? 2 * s->heap_cap : 64;
        void *h = realloc(s->heap, cap * elem_size);
        if (!h) return false;
        s->heap = h;
        s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(elem, HEAP_AT(s, parent))) break;
        memcpy(HEAP_AT(s, i), HEAP_AT(s, parent), elem_size);
        i = parent;
    }
    memcpy(HEAP_AT(s, i), elem, elem_size);
    return true;
}

void rg_tok_heap_pop(rg_tok_scratch *s, void *out, rg_tok_before_fn before) {
    char last[32];
    const size_t es = s->heap_elem;
    memcpy(out, HEAP_AT(s, 0), es);
    memcpy(last, HEAP_AT(s, --s->heap_n), es);
    size_t n = s->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(HEAP_AT(s, c + 1), HEAP_AT(s, c))) c++;
        if (!before(HEAP_AT(s, c), last)) break;
        memcpy(HEAP_AT(s, i), HEAP_AT(s, c), es);
        i = c;
    }
    if (n) memcpy(HEAP_AT(s, i), last, es);
}
