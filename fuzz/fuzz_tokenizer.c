// fuzz_tokenizer.c - libFuzzer target for the tokenizer (src/text/tokenizer*.c, pretokenize.c):
// encoding arbitrary bytes and decoding arbitrary id sequences, on three byte-level BPE
// vocabularies (Qwen2, Llama 3, GPT-2) and two SentencePiece ones (Llama 2, Phi-3), all
// loaded once from tests/data/tokenizer/.
//
// Input: one control byte, then the text (encode) or the ids (decode).
//   bits 0-2  vocabulary (modulo 5)
//   bit 3     0: encode the rest as text; 1: decode the rest as ids
//   bit 4     parse_special when encoding, render_special when decoding
//   bit 5     add_special when encoding
//   bit 6     also check short output buffers (snprintf convention, tokenize's cap, a push
//             refused for want of room)
//   bit 7     decode: ids are raw little-endian int32 (mostly out of range) instead of 3-byte
//             values folded into [-8, n_tokens + 8)
//
// What tokenizer.h promises and this checks:
//   - rg_tokenize returns the full count, writes the first min(count, cap) ids, agrees with
//     rg_tokenize_alloc, and every id is in range;
//   - add_special is the plain encoding with BOS in front (even when the text starts with the
//     BOS text, as llama.cpp does) and EOS behind, as info.add_bos / add_eos say;
//   - without parse_special no CONTROL or UNKNOWN token comes out of text;
//   - byte-level vocabularies: rg_detokenize(rg_tokenize(x)) == x for every byte string x,
//     with render_special as parse_special was, less the whitespace a special token's
//     lstrip/rstrip drops (phi-3: after most specials; rg_tok_split_special says what is kept);
//     SentencePiece: the same with each U+2581 of x read as a space (the space prefix added by
//     encoding is dropped by decoding);
//   - rg_detokenize is the concatenation of rg_token_to_piece, less the one leading space
//     after the start and after each special token with an SPM space prefix; both follow the
//     snprintf convention;
//   - streaming decode with rg_detok_stream_max_out bytes of room never fails, a push refused
//     for want of room changes nothing, and everything pushed and flushed equals
//     rg_detokenize; when that is well-formed UTF-8, so is every chunk and nothing is held;
//   - out-of-range ids: no text, type -1, score 0, no piece, not end-of-generation.
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "text/tokenizer_impl.h"

#define N_VOCABS 5
static const char *const vocab_names[N_VOCABS] = {"qwen2", "llama-bpe", "gpt-2", "llama-spm", "phi-3"};
static rg_tokenizer *vocabs[N_VOCABS];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    for (int v = 0; v < N_VOCABS; v++) vocabs[v] = fz_load_vocab(vocab_names[v]);
    return 0;
}

static bool is_special(const rg_tokenizer *tok, int32_t id) {
    size_t len;
    const char *t = rg_token_text(tok, id, &len);
    int type = rg_token_type(tok, id);
    return t && len > 0 && (type == RG_TOKTYPE_CONTROL || type == RG_TOKTYPE_USER_DEFINED || type == RG_TOKTYPE_UNKNOWN);
}

static bool spm_prefix(const rg_tokenizer *tok) {
    const rg_tokenizer_info *in = rg_tokenizer_get_info(tok);
    return in->kind == RG_VOCAB_SPM && in->add_space_prefix;
}

// rg_detokenize into a malloc'd buffer, checking the snprintf convention on the way.
static char *detokenize(const rg_tokenizer *tok, const int32_t *ids, size_t n, bool render, bool short_bufs,
                        size_t *len) {
    size_t need = rg_detokenize(tok, ids, n, render, NULL, 0);
    char *out = malloc(need + 1);
    FZ_CHECK(out, "out of memory");
    out[need] = 'x';
    size_t got = rg_detokenize(tok, ids, n, render, out, need + 1);
    FZ_CHECK(got == need && out[need] == '\0', "detokenize measured %zu bytes, then wrote %zu", need, got);
    if (short_bufs && need > 0) {
        size_t cap = 1 + (size_t)ids[0] % need;  // 1 .. need: always short
        char *cut = malloc(cap);
        FZ_CHECK(cut, "out of memory");
        got = rg_detokenize(tok, ids, n, render, cut, cap);
        FZ_CHECK(got == need && cut[cap - 1] == '\0' && memcmp(cut, out, cap - 1) == 0,
                 "detokenize into %zu bytes: returned %zu (want %zu) or wrote other bytes", cap, got, need);
        free(cut);
    }
    *len = need;
    return out;
}

// The decode promises on one id sequence; returns rg_detokenize's text (malloc'd) and its length.
static char *check_decode(const rg_tokenizer *tok, const int32_t *ids, size_t n, bool render, bool short_bufs,
                          size_t *len) {
    size_t whole_len;
    char *whole = detokenize(tok, ids, n, render, short_bufs, &whole_len);

    // The concatenated pieces, each checked against the snprintf convention.
    size_t max_out = rg_detok_stream_max_out(tok);
    char *piece = malloc(max_out + 1), *joined = malloc(whole_len + 1);
    FZ_CHECK(piece && joined, "out of memory");
    size_t joined_len = 0;
    bool strip = spm_prefix(tok);
    for (size_t i = 0; i < n; i++) {
        size_t len = rg_token_to_piece(tok, ids[i], render, NULL, 0);
        FZ_CHECK(len + 4 <= max_out, "token %d: piece of %zu bytes, but max_out is %zu", ids[i], len, max_out);
        size_t got = rg_token_to_piece(tok, ids[i], render, piece, max_out + 1);
        FZ_CHECK(got == len && piece[len] == '\0', "token %d: piece measured %zu, wrote %zu", ids[i], len, got);
        if (short_bufs && len > 0) {
            char cut[8];
            size_t cap = 1 + i % (len < sizeof cut ? len : sizeof cut);  // short: 1 .. len bytes
            FZ_CHECK(rg_token_to_piece(tok, ids[i], render, cut, cap) == len && cut[cap - 1] == '\0' &&
                         memcmp(cut, piece, cap - 1) == 0,
                     "token %d: piece into %zu bytes", ids[i], cap);
        }
        bool special = is_special(tok, ids[i]);
        size_t skip = strip && !special && len > 0 && piece[0] == ' ';
        FZ_CHECK(joined_len + len - skip <= whole_len, "the pieces are longer than rg_detokenize's %zu bytes", whole_len);
        memcpy(joined + joined_len, piece + skip, len - skip);
        joined_len += len - skip;
        strip = spm_prefix(tok) && special;
        if (rg_token_text(tok, ids[i], NULL) == NULL) {
            FZ_CHECK(len == 0 && rg_token_type(tok, ids[i]) == -1 && rg_token_score(tok, ids[i]) == 0.0f &&
                         !rg_token_is_eog(tok, ids[i]),
                     "out-of-range id %d has a piece, a type, a score or ends generation", ids[i]);
        } else {
            size_t tlen;
            const char *text = rg_token_text(tok, ids[i], &tlen);
            int32_t found = rg_token_find(tok, text, tlen);
            size_t flen;
            const char *ftext = rg_token_text(tok, found, &flen);
            FZ_CHECK(ftext && flen == tlen && memcmp(ftext, text, tlen) == 0,
                     "rg_token_find of token %d's text gave %d, another text", ids[i], found);
        }
    }
    FZ_CHECK(joined_len == whole_len && memcmp(joined, whole, whole_len) == 0,
             "rg_detokenize (%zu bytes) is not the concatenated pieces (%zu bytes)", whole_len, joined_len);

    // Streaming: the same bytes, chunk by chunk.
    bool whole_valid = rg_utf8_first_invalid(whole, whole_len) == whole_len;
    rg_detok_stream s;
    rg_detok_stream_init(&s, tok, render);
    char *chunk = malloc(max_out);
    FZ_CHECK(chunk, "out of memory");
    size_t streamed = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t m = -1;
        if (short_bufs) {
            size_t cap = (size_t)(i * 7 + (uint32_t)ids[i]) % max_out;
            rg_detok_stream before = s;
            m = rg_detok_stream_push(&s, ids[i], chunk, cap);
            FZ_CHECK(m <= (int64_t)cap, "push wrote %lld bytes into %zu", (long long)m, cap);
            if (m < 0)
                FZ_CHECK(s.n_held == before.n_held && memcmp(s.held, before.held, s.n_held) == 0 &&
                             s.strip_space == before.strip_space,
                         "a refused push (room %zu) changed the stream", cap);
        }
        if (m < 0) m = rg_detok_stream_push(&s, ids[i], chunk, max_out);
        FZ_CHECK(m >= 0, "push of token %d failed with max_out (%zu) bytes of room", ids[i], max_out);
        FZ_CHECK(streamed + (size_t)m <= whole_len && memcmp(chunk, whole + streamed, (size_t)m) == 0,
                 "push %zu (token %d) gave bytes that rg_detokenize does not have at %zu", i, ids[i], streamed);
        FZ_CHECK(!whole_valid || rg_utf8_first_invalid(chunk, (size_t)m) == (size_t)m,
                 "push %zu (token %d) gave a chunk that is not whole UTF-8 though the whole text is", i, ids[i]);
        streamed += (size_t)m;
    }
    int64_t m = rg_detok_stream_flush(&s, chunk, max_out);
    FZ_CHECK(m >= 0 && m <= 3, "flush gave %lld bytes", (long long)m);
    FZ_CHECK(!whole_valid || m == 0, "flush gave %lld held bytes at the end of well-formed text", (long long)m);
    FZ_CHECK(streamed + (size_t)m == whole_len && memcmp(chunk, whole + streamed, (size_t)m) == 0,
             "the stream gave %zu bytes, rg_detokenize %zu", streamed + (size_t)m, whole_len);
    FZ_CHECK(rg_detok_stream_flush(&s, chunk, max_out) == 0, "a second flush gave bytes");
    free(chunk);
    free(piece);
    free(joined);
    *len = whole_len;
    return whole;
}

static int32_t *tokenize(const rg_tokenizer *tok, const char *text, size_t len, bool add, bool parse, size_t *n) {
    int32_t *ids = NULL;
    rg_error err = {0};
    rg_status st = rg_tokenize_alloc(tok, text, len, add, parse, &ids, n, &err);
    FZ_CHECK(st == RG_OK && ids, "rg_tokenize_alloc of %zu bytes failed: %s", len, err.msg);
    int32_t n_tokens = rg_tokenizer_n_tokens(tok);
    for (size_t i = 0; i < *n; i++)
        FZ_CHECK(ids[i] >= 0 && ids[i] < n_tokens, "id %d at %zu is out of range", ids[i], i);
    return ids;
}

// The input text with every U+2581 (E2 96 81) as a space: what SPM decoding gives back.
static char *spm_expected(const char *text, size_t len, size_t *out_len) {
    char *e = malloc(len + 1);
    FZ_CHECK(e, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (i + 3 <= len && memcmp(text + i, "\xE2\x96\x81", 3) == 0) {
            e[n++] = ' ';
            i += 2;
        } else {
            e[n++] = text[i];
        }
    }
    *out_len = n;
    return e;
}

// The bytes of text that the special-token cut keeps (what lstrip/rstrip drop is in no piece).
typedef struct kept_text {
    const char *text;
    char *out;
    size_t n;
} kept_text;

static bool keep_piece(void *ctx, size_t begin, size_t end, int32_t id) {
    (void)id;
    kept_text *k = ctx;
    memcpy(k->out + k->n, k->text + begin, end - begin);
    k->n += end - begin;
    return true;
}

static void check_encode(const rg_tokenizer *tok, const char *text, size_t len, bool add, bool parse, bool short_bufs) {
    const rg_tokenizer_info *in = rg_tokenizer_get_info(tok);
    size_t n_plain;
    int32_t *plain = tokenize(tok, text, len, false, parse, &n_plain);
    for (size_t i = 0; i < n_plain && !parse; i++) {
        int type = rg_token_type(tok, plain[i]);
        FZ_CHECK(type != RG_TOKTYPE_CONTROL && type != RG_TOKTYPE_UNKNOWN,
                 "token %d at %zu (type %d) came out of text without parse_special", plain[i], i, type);
    }

    // Decoding gives the text back, less what a special token's lstrip/rstrip dropped.
    kept_text k = {text, malloc(len + 1), 0};
    FZ_CHECK(k.out, "out of memory");
    FZ_CHECK(rg_tok_split_special(tok, text, len, parse, keep_piece, &k), "rg_tok_split_special failed");
    size_t back_len, want_len = k.n;
    char *back = check_decode(tok, plain, n_plain, parse, short_bufs, &back_len);
    char *want = in->kind == RG_VOCAB_SPM ? spm_expected(k.out, k.n, &want_len) : NULL;
    FZ_CHECK(back_len == want_len && memcmp(back, want ? want : k.out, want_len) == 0,
             "round trip of %zu bytes (%zu kept) gave %zu bytes: '%.*s'", len, k.n, back_len,
             (int)(back_len < 200 ? back_len : 200), back);
    free(want);
    free(back);
    free(k.out);

    int32_t *with = plain;  // the ids of (add, parse)
    size_t n_with = n_plain;
    if (add) {
        with = tokenize(tok, text, len, true, parse, &n_with);
        // llama.cpp's framing: BOS first even when the text already starts with the BOS text (two BOS then)
        bool bos = in->add_bos && in->bos >= 0, eos = in->add_eos && in->eos >= 0;
        size_t want_n = n_plain + bos + eos;
        bool same = n_with == want_n && (!bos || with[0] == in->bos) && (!eos || with[n_with - 1] == in->eos) &&
                    memcmp(with + bos, plain, n_plain * sizeof *with) == 0;
        FZ_CHECK(same, "add_special gave %zu ids, want %zu: BOS %d, EOS %d around the plain ids", n_with, want_n, bos,
                 eos);
    }

    // rg_tokenize into half the room: the full count, the first ids, nothing past the cap.
    if (short_bufs) {
        int64_t cap = (int64_t)n_with / 2;
        int32_t *ids = calloc(n_with + 1, sizeof *ids);
        FZ_CHECK(ids, "out of memory");
        int64_t count = rg_tokenize(tok, text, len, add, parse, ids, cap);
        FZ_CHECK(count == (int64_t)n_with, "rg_tokenize with cap %lld counted %lld, rg_tokenize_alloc %zu", (long long)cap,
                 (long long)count, n_with);
        FZ_CHECK(memcmp(ids, with, (size_t)cap * sizeof *ids) == 0, "rg_tokenize's first ids differ");
        for (size_t i = (size_t)cap; i < n_with; i++) FZ_CHECK(ids[i] == 0, "rg_tokenize wrote past its cap %lld", (long long)cap);
        free(ids);
    }
    if (with != plain) free(with);
    free(plain);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t ctl = data[0];
    const rg_tokenizer *tok = vocabs[(ctl & 7) % N_VOCABS];
    bool decode = ctl & 8, special = ctl & 16, add = ctl & 32, short_bufs = ctl & 64, raw_ids = ctl & 128;
    const uint8_t *rest = data + 1;
    size_t n_rest = size - 1;
    if (!decode) {
        check_encode(tok, (const char *)rest, n_rest, add, special, short_bufs);
        return 0;
    }
    size_t width = raw_ids ? 4 : 3, n = n_rest / width;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    FZ_CHECK(ids, "out of memory");
    int64_t span = (int64_t)rg_tokenizer_n_tokens(tok) + 16;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = rest + i * width;
        uint32_t v = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
        if (raw_ids) v |= (uint32_t)b[3] << 24;
        ids[i] = raw_ids ? (int32_t)v : (int32_t)((int64_t)v % span - 8);
    }
    size_t len;
    free(check_decode(tok, ids, n, special, short_bufs, &len));
    free(ids);
    return 0;
}
