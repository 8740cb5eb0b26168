// test_tokenizer.c - the tokenizer against the reference ids, pre-tokenizers, round trips,
// streaming decode, special tokens, BOS rules, malformed metadata, the CLI, speed
// (spec/architectures.md §5). Chat templates are in test_chat.c.
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "rg_test.h"
#include "text/byte_unicode.h"
#include "text/tiny_corpus.h"
#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"

#define DATA RG_SOURCE_DIR "/tests/data/tokenizer/"

// ---------------------------------------------------------------------------
// Helpers

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len) *len = (size_t)n;
    }
    return buf;
}

typedef struct vocab {
    rg_gguf *g;
    rg_tokenizer *tok;
} vocab;

static bool open_vocab(const char *name, vocab *v) {
    char path[1024];
    snprintf(path, sizeof path, DATA "ggml-vocab-%s.gguf", name);
    rg_error err = {0};
    v->g = NULL;
    v->tok = NULL;
    if (rg_gguf_open(&v->g, path, &err)) {
        printf("    %s\n", err.msg);
        return false;
    }
    if (rg_tokenizer_load(&v->tok, v->g, &err)) {
        printf("    %s\n", err.msg);
        rg_gguf_free(v->g);
        return false;
    }
    return true;
}

static void close_vocab(vocab *v) {
    rg_tokenizer_free(v->tok);
    rg_gguf_free(v->g);
}

// Tokenizes and returns a malloc'd array; *n gets the count.
static int32_t *tok_ids(const rg_tokenizer *tok, const char *s, size_t len, bool add_special, bool parse_special,
                        size_t *n) {
    int32_t *ids = NULL;
    rg_error err = {0};
    if (rg_tokenize_alloc(tok, s, len, add_special, parse_special, &ids, n, &err)) {
        printf("    tokenize failed: %s\n", err.msg);
        *n = 0;
        return NULL;
    }
    return ids;
}

static void format_ids(const int32_t *ids, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && o + 16 < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId32, i ? " " : "", ids[i]);
}

// Checks that s tokenizes to exactly want[0..n_want).
static bool ids_equal(const rg_tokenizer *tok, const char *s, bool add_special, bool parse_special, const int32_t *want,
                      size_t n_want) {
    size_t n;
    int32_t *ids = tok_ids(tok, s, strlen(s), add_special, parse_special, &n);
    bool ok = n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        char got[512], exp[512];
        format_ids(ids, n, got, sizeof got);
        format_ids(want, n_want, exp, sizeof exp);
        printf("    '%s': got [%s] want [%s]\n", s, got, exp);
    }
    free(ids);
    return ok;
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

// ---------------------------------------------------------------------------
// The reference test vectors (tests/data/tokenizer/README.md): X.gguf.inp holds the inputs
// separated by "\n__ggml_vocab_test__\n" (the file ends with a separator), X.gguf.out one
// line of expected ids per input, tokenized without BOS/EOS and without special parsing.
// X.gguf.special.inp / .out are the special-token vectors made with llama.cpp's
// llama-tokenize: the same input format; the .out has a '#' header line, then per input four
// columns separated by '|', one per (add_special, parse_special) in special_columns' order.

#define MAX_CASES 96

typedef struct cases {
    char *inp, *out;
    char *text[MAX_CASES];
    size_t len[MAX_CASES];
    char *expect[MAX_CASES];
    int n;
} cases;

// Reads DATA/ggml-vocab-NAME.gguf{suffix}.inp and .out.
static bool load_cases(const char *name, const char *suffix, cases *c) {
    char path[1024];
    memset(c, 0, sizeof *c);
    snprintf(path, sizeof path, DATA "ggml-vocab-%s.gguf%s.inp", name, suffix);
    c->inp = read_file(path, NULL);
    snprintf(path, sizeof path, DATA "ggml-vocab-%s.gguf%s.out", name, suffix);
    c->out = read_file(path, NULL);
    if (!c->inp || !c->out) return false;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = c->inp;
    for (char *q; (q = strstr(p, sep)); p = q + strlen(sep)) {
        if (c->n == MAX_CASES) return false;
        *q = '\0';
        c->text[c->n] = p;
        c->len[c->n] = (size_t)(q - p);
        c->n++;
    }
    int k = 0;
    for (char *line = c->out; *line && k < c->n;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (line[0] != '#') c->expect[k++] = line;
        line = nl ? nl + 1 : line + strlen(line);
    }
    return k == c->n;
}

static void free_cases(cases *c) {
    free(c->inp);
    free(c->out);
}

static const char *const vocab_names[] = {"qwen2", "llama-bpe", "gpt-2", "llama-spm", "phi-3"};

// One tokenization of case i against want: ids separated by spaces (spaces around ignored).
static bool case_matches(const char *vname, const rg_tokenizer *tok, const cases *c, int i, bool add_special,
                         bool parse_special, char *want) {
    while (*want == ' ') want++;
    size_t w = strlen(want);
    while (w > 0 && want[w - 1] == ' ') want[--w] = '\0';
    size_t n;
    int32_t *ids = tok_ids(tok, c->text[i], c->len[i], add_special, parse_special, &n);
    char got[8192];
    format_ids(ids, n, got, sizeof got);
    free(ids);
    bool ok = strcmp(got, want) == 0;
    RG_CHECK(ok, "%s case %d '%.60s' (add_special %d, parse_special %d): got '%.200s' want '%.200s'", vname, i,
             c->text[i], add_special, parse_special, got, want);
    return ok;
}

static bool reference_case(const char *vname, const rg_tokenizer *tok, cases *c, int i) {
    return case_matches(vname, tok, c, i, false, false, c->expect[i]);
}

static const struct {
    bool add_special, parse_special;
} special_columns[4] = {{true, true}, {true, false}, {false, true}, {false, false}};

static bool special_case(const char *vname, const rg_tokenizer *tok, cases *c, int i) {
    bool ok = true;
    int k = 0;
    for (char *col = c->expect[i]; col; k++) {
        char *bar = strchr(col, '|');
        if (bar) *bar = '\0';
        if (k < 4) ok &= case_matches(vname, tok, c, i, special_columns[k].add_special, special_columns[k].parse_special, col);
        col = bar ? bar + 1 : NULL;
    }
    RG_CHECK(k == 4, "%s case %d: %d columns, 4 expected", vname, i, k);
    return ok && k == 4;
}

// Checks every case of DATA/ggml-vocab-NAME.gguf{suffix}.inp/.out for the five vocabularies,
// each file holding min_cases..max_cases cases.
static void check_vectors(const char *suffix, bool (*check)(const char *, const rg_tokenizer *, cases *, int),
                          int min_cases, int max_cases) {
    for (size_t v = 0; v < sizeof vocab_names / sizeof vocab_names[0]; v++) {
        vocab voc;
        cases c;
        RG_REQUIRE(open_vocab(vocab_names[v], &voc), "cannot open %s", vocab_names[v]);
        RG_REQUIRE(load_cases(vocab_names[v], suffix, &c), "cannot read the cases%s of %s", suffix, vocab_names[v]);
        int passed = 0;
        for (int i = 0; i < c.n; i++) passed += check(vocab_names[v], voc.tok, &c, i);
        printf("    %-10s %d/%d\n", vocab_names[v], passed, c.n);
        RG_CHECK(c.n >= min_cases && c.n <= max_cases, "%s: %d cases", vocab_names[v], c.n);
        free_cases(&c);
        close_vocab(&voc);
    }
}

static void test_reference_vectors(void) { check_vectors("", reference_case, 46, 46); }

// Four tokenizations per case, one per column.
static void test_special_vectors(void) { check_vectors(".special", special_case, 25, MAX_CASES); }

// ---------------------------------------------------------------------------
// Pre-tokenizers (§5.3): the pieces each family's regex cuts, written joined by '|'.

typedef struct pretok_case {
    rg_pretok_kind kind;
    const char *text;
    const char *pieces;
} pretok_case;

static const pretok_case pretok_cases[] = {
    {RG_PRETOK_QWEN2, "Hello  world 123\n\n  x", "Hello| | world| |1|2|3|\n\n| | x"},
    {RG_PRETOK_LLAMA3, "Hello  world 123\n\n  x", "Hello| | world| |123|\n\n| | x"},
    {RG_PRETOK_GPT2, "Hello  world 123\n\n  x", "Hello| | world| 123|\n\n | x"},
    {RG_PRETOK_SMOLLM, "Hello  world 123\n\n  x", "Hello| | world| |1|2|3|\n\n | x"},
    {RG_PRETOK_DEFAULT, "a+b=12345, ok!", "a|+|b|=|123|45|,| ok|!"},
    {RG_PRETOK_LLAMA3, "1234567", "123|456|7"},
    {RG_PRETOK_QWEN2, "I'M don'T we'Ll", "I|'M| don|'T| we|'Ll"},
    {RG_PRETOK_GPT2, "I'M don't", "I|'|M| don|'t"},
    {RG_PRETOK_QWEN2, "(normal) x.\r\n\r\ny", "(normal|)| x|.\r\n\r\n|y"},
    {RG_PRETOK_QWEN2, "\t\tfoo  \t", "\t|\tfoo|  \t"},
    {RG_PRETOK_QWEN2, "ab\xFF" "cd \xC3", "ab|\xFF" "cd| \xC3"},
    {RG_PRETOK_QWEN2, "\xE1\x9E\x80\xE1\x9E\xB6x", "\xE1\x9E\x80|\xE1\x9E\xB6x"},  // Khmer: a letter, then a mark (not \p{L})
};

typedef struct join_ctx {
    const char *text;
    char buf[256];
    size_t n;
} join_ctx;

static bool join_piece(void *ctx, size_t b, size_t e) {
    join_ctx *j = ctx;
    if (j->n) j->buf[j->n++] = '|';
    memcpy(j->buf + j->n, j->text + b, e - b);
    j->n += e - b;
    j->buf[j->n] = '\0';
    return true;
}

static void test_pretokenizers(void) {
    rg_tok_scratch s = {0};
    for (size_t i = 0; i < sizeof pretok_cases / sizeof pretok_cases[0]; i++) {
        const pretok_case *c = &pretok_cases[i];
        join_ctx j = {.text = c->text};
        RG_CHECK(rg_pretokenize(c->kind, c->text, strlen(c->text), &s, join_piece, &j), "pretokenize");
        RG_CHECK(strcmp(j.buf, c->pieces) == 0, "case %zu (kind %d): got '%s' want '%s'", i, c->kind, j.buf, c->pieces);
    }
    rg_tok_scratch_free(&s);
}

// SPM text is merged in pieces cut before each "▁" that follows another character, which the
// loader allows only when no token could cross such a cut; the result equals one global merge.
static void test_spm_pieces_equal_whole(void) {
    static const char *const names[] = {"llama-spm", "phi-3"};
    const char *tail = "  a  b\n \n  \xE2\x96\x81x\xE2\x96\x81 \xE2\x96\x81\xE2\x96\x81y 🦙 end......";
    size_t len = 8 * rg_tiny_corpus_len + strlen(tail);
    char *text = malloc(len);
    for (int k = 0; k < 8; k++) memcpy(text + k * rg_tiny_corpus_len, rg_tiny_corpus, rg_tiny_corpus_len);
    memcpy(text + 8 * rg_tiny_corpus_len, tail, strlen(tail));
    for (size_t v = 0; v < 2; v++) {
        vocab voc;
        RG_REQUIRE(open_vocab(names[v], &voc), "open");
        RG_CHECK(voc.tok->spm_split_safe, "%s should allow pieces", names[v]);
        size_t n1, n2;
        int32_t *a = tok_ids(voc.tok, text, len, true, true, &n1);
        voc.tok->spm_split_safe = false;
        int32_t *b = tok_ids(voc.tok, text, len, true, true, &n2);
        RG_CHECK(n1 == n2 && memcmp(a, b, n1 * sizeof *a) == 0, "%s: pieces %zu tokens, whole %zu", names[v], n1, n2);
        free(a);
        free(b);
        close_vocab(&voc);
    }
    free(text);
}

// ---------------------------------------------------------------------------
// Round trips: decode(encode(x)) == x for byte-level vocabularies, on every reference input
// and on hard strings, with special-token parsing off and on.

typedef struct text {
    const char *s;
    size_t len;  // 0: strlen
} text;

static const text hard_strings[] = {
    {"👨‍👩‍👧‍👦 🏳️‍🌈 😶‍🌫️ 🦙🦙🦙 ✅", 0},
    {"我想在apple工作1314151天～ 日本語のテキスト、한국어 텍스트。", 0},
    {"e\xCC\x81 n\xCC\x83 a\xCC\x88\xCC\x84 Z\xCD\x91\xCD\x97\xCC\x9B\xCD\x9B" "a\xCC\x9Fl\xCD\x88go", 0},  // combining marks
    {"1234567890123456789012345678901234567890 3.14159 1,000,000 ١٢٣٤ ⅣⅫ ½¾", 0},
    {"    \t\t  \n\n \r\n\r\n   x  \t \xE3\x80\x80\xE3\x80\x80y\xC2\xA0\xC2\xA0z \xE2\x80\xA8 ", 0},
    {"\r\n", 0},
    {"\r\n\r\n\r", 0},
    {"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", 0},
    {"<|endoftext|><|endoftext|> text <|begin_of_text|><|eot_id|>x<|end_of_text|>", 0},
    {"<|im_start|<|im_end||><|<|>", 0},
    {"\xFF\xFE\xC3\x28 \xE2\x82 \xF0\x9F\x98 \xED\xA0\x80 \xC0\xAF \x80\x80 end\xC3", 0},  // invalid UTF-8
    {"a\0b\0\0c", 6},                                                                       // NUL bytes
    {"I'M you'RE they'Ve it'S don'T we'LL he'D 'twas '' '", 0},
    {"ſtraße İstanbul ǅemal ΣΑΣ ﬁne", 0},
};

static bool check_round_trip(const char *vname, const rg_tokenizer *tok, const char *s, size_t len, bool add_special,
                             bool parse_special) {
    size_t n;
    int32_t *ids = tok_ids(tok, s, len, add_special, parse_special, &n);
    size_t need = rg_detokenize(tok, ids, n, parse_special, NULL, 0);
    char *back = malloc(need + 1);
    size_t got = rg_detokenize(tok, ids, n, parse_special, back, need + 1);
    bool ok = got == need && need == len && memcmp(back, s, len) == 0;
    // With special tokens shown, an added BOS shows too: compare what follows it.
    const rg_tokenizer_info *in = rg_tokenizer_get_info(tok);
    if (!ok && add_special && parse_special && in->add_bos && n > 0 && ids[0] == in->bos) {
        need = rg_detokenize(tok, ids + 1, n - 1, true, back, need + 1);
        ok = need == len && memcmp(back, s, len) == 0;
    }
    if (!ok)
        printf("    %s round trip (special %d/%d) of '%.40s' (%zu bytes) gave '%.40s' (%zu bytes)\n", vname, add_special,
               parse_special, s, len, back, need);
    free(back);
    free(ids);
    return ok;
}

static void test_round_trip_byte_level(void) {
    static const char *const names[] = {"qwen2", "llama-bpe", "gpt-2"};
    for (size_t v = 0; v < 3; v++) {
        vocab voc;
        cases c;
        RG_REQUIRE(open_vocab(names[v], &voc), "open %s", names[v]);
        RG_REQUIRE(load_cases(names[v], "", &c), "cases %s", names[v]);
        int total = 0, good = 0;
        for (int parse = 0; parse < 2; parse++) {
            for (int add = 0; add < 2; add++) {
                for (int i = 0; i < c.n; i++, total++) good += check_round_trip(names[v], voc.tok, c.text[i], c.len[i], add, parse);
                for (size_t i = 0; i < sizeof hard_strings / sizeof hard_strings[0]; i++, total++) {
                    const text *t = &hard_strings[i];
                    good += check_round_trip(names[v], voc.tok, t->s, t->len ? t->len : strlen(t->s), add, parse);
                }
            }
        }
        // Every single byte value, and long runs (the heap paths).
        char all[256];
        for (int b = 0; b < 256; b++) all[b] = (char)b;
        total++, good += check_round_trip(names[v], voc.tok, all, 256, false, false);
        size_t big = 20000;
        char *run = malloc(big);
        const char fills[] = {' ', '!', 'a', '7', '\n'};
        for (size_t f = 0; f < sizeof fills; f++) {
            memset(run, fills[f], big);
            total++, good += check_round_trip(names[v], voc.tok, run, big, false, false);
        }
        free(run);
        printf("    %-10s %d/%d round trips\n", names[v], good, total);
        RG_CHECK(good == total, "%s: %d of %d round trips failed", names[v], total - good, total);
        free_cases(&c);
        close_vocab(&voc);
    }
}

// SentencePiece vocabularies: the space prefix that encoding adds is dropped again.
static void test_round_trip_spm(void) {
    static const char *const names[] = {"llama-spm", "phi-3"};
    for (size_t v = 0; v < 2; v++) {
        vocab voc;
        cases c;
        RG_REQUIRE(open_vocab(names[v], &voc), "open %s", names[v]);
        RG_REQUIRE(load_cases(names[v], "", &c), "cases %s", names[v]);
        int total = 0, good = 0;
        for (int add = 0; add < 2; add++)
            for (int i = 0; i < c.n; i++, total++) good += check_round_trip(names[v], voc.tok, c.text[i], c.len[i], add, false);
        // No whitespace after a special token: phi-3 drops it (rstrip), and nothing brings it back.
        total++, good += check_round_trip(names[v], voc.tok, "<s>Hi</s>there<unk>", 19, true, true);
        printf("    %-10s %d/%d round trips\n", names[v], good, total);
        RG_CHECK(good == total, "%s: %d of %d round trips failed", names[v], total - good, total);
        free_cases(&c);
        close_vocab(&voc);
    }
}

// ---------------------------------------------------------------------------
// Streaming decode: a UTF-8 string cut into two separately tokenized halves at every byte
// position (so tokens end inside characters) decodes chunk by chunk into whole characters only.

static bool whole_utf8(const char *s, size_t n) { return rg_utf8_first_invalid(s, n) == n; }

static void test_stream_decode(void) {
    static const char *const names[] = {"qwen2", "llama-bpe", "gpt-2"};
    static const char *const strings[] = {
        "héllo wörld 你好世界 🦙🚀 e\xCC\x81 𝄞 ok",
        "😶‍🌫️😁 ?我想在apple工作1314151天～",
    };
    for (size_t v = 0; v < 3; v++) {
        vocab voc;
        RG_REQUIRE(open_vocab(names[v], &voc), "open %s", names[v]);
        size_t cap = rg_detok_stream_max_out(voc.tok);
        char *chunk = malloc(cap);
        for (size_t k = 0; k < 2; k++) {
            const char *s = strings[k];
            size_t len = strlen(s);
            for (size_t cut = 0; cut <= len; cut++) {
                size_t n1, n2;
                int32_t *a = tok_ids(voc.tok, s, cut, false, false, &n1);
                int32_t *b = tok_ids(voc.tok, s + cut, len - cut, false, false, &n2);
                rg_detok_stream st;
                rg_detok_stream_init(&st, voc.tok, false);
                char out[1024];
                size_t o = 0;
                bool chunks_whole = true;
                for (size_t i = 0; i < n1 + n2; i++) {
                    int64_t m = rg_detok_stream_push(&st, i < n1 ? a[i] : b[i - n1], chunk, cap);
                    RG_REQUIRE(m >= 0, "push failed");
                    chunks_whole &= whole_utf8(chunk, (size_t)m);
                    memcpy(out + o, chunk, (size_t)m);
                    o += (size_t)m;
                }
                int64_t m = rg_detok_stream_flush(&st, chunk, cap);
                memcpy(out + o, chunk, (size_t)m);
                o += (size_t)m;
                RG_CHECK(chunks_whole, "%s: a chunk ended inside a character (cut %zu)", names[v], cut);
                RG_CHECK(m == 0, "%s: %lld bytes held at the end (cut %zu)", names[v], (long long)m, cut);
                RG_CHECK(o == len && memcmp(out, s, len) == 0, "%s: stream gave '%.*s' (cut %zu)", names[v], (int)o, out, cut);
                free(a);
                free(b);
            }
        }
        // The stream equals rg_detokenize, also on invalid UTF-8 and an unfinished character at the end.
        const char *bad = "ok \xFF\xC3( \xE2\x82\xAC \xF0\x9F\x98";
        size_t n;
        int32_t *ids = tok_ids(voc.tok, bad, strlen(bad), true, false, &n);
        char whole[256], streamed[256];
        size_t w = rg_detokenize(voc.tok, ids, n, false, whole, sizeof whole), o = 0;
        rg_detok_stream st;
        rg_detok_stream_init(&st, voc.tok, false);
        for (size_t i = 0; i < n; i++) {
            int64_t m = rg_detok_stream_push(&st, ids[i], streamed + o, sizeof streamed - o);
            RG_REQUIRE(m >= 0, "push");
            o += (size_t)m;
        }
        int64_t m = rg_detok_stream_flush(&st, streamed + o, sizeof streamed - o);
        o += (size_t)m;
        RG_CHECK(o == w && memcmp(whole, streamed, w) == 0, "%s: stream != detokenize on invalid UTF-8", names[v]);
        RG_CHECK(m == 3, "%s: the unfinished emoji should be held until the flush (%lld)", names[v], (long long)m);
        RG_CHECK(rg_detok_stream_push(&st, ids[0], chunk, 0) == -1 || rg_token_to_piece(voc.tok, ids[0], false, NULL, 0) == 0,
                 "%s: a push into a short buffer must fail", names[v]);
        free(ids);
        free(chunk);
        close_vocab(&voc);
    }
}

// SPM: characters outside the vocabulary come out as <0xXX> byte tokens, one byte each.
static void test_stream_decode_spm(void) {
    vocab voc;
    RG_REQUIRE(open_vocab("llama-spm", &voc), "open");
    const char *s = "héllo 🦙🚀 Cửa Việt 𝄞 ok";
    size_t len = strlen(s), n;
    int32_t *ids = tok_ids(voc.tok, s, len, true, false, &n);
    size_t cap = rg_detok_stream_max_out(voc.tok);
    char *chunk = malloc(cap), out[256];
    size_t o = 0, n_bytes = 0;
    rg_detok_stream st;
    rg_detok_stream_init(&st, voc.tok, false);
    for (size_t i = 0; i < n; i++) {
        n_bytes += rg_token_type(voc.tok, ids[i]) == RG_TOKTYPE_BYTE;
        int64_t m = rg_detok_stream_push(&st, ids[i], chunk, cap);
        RG_REQUIRE(m >= 0, "push");
        RG_CHECK(whole_utf8(chunk, (size_t)m), "chunk %zu is not whole characters", i);
        memcpy(out + o, chunk, (size_t)m);
        o += (size_t)m;
    }
    RG_CHECK(rg_detok_stream_flush(&st, chunk, cap) == 0, "nothing held");
    RG_CHECK(n_bytes >= 8, "the emoji should use byte tokens (%zu)", n_bytes);
    RG_CHECK(o == len && memcmp(out, s, len) == 0, "stream gave '%.*s'", (int)o, out);
    free(chunk);
    free(ids);
    close_vocab(&voc);
}

// ---------------------------------------------------------------------------
// Special tokens, BOS/EOS, end of generation

static void test_special_tokens(void) {
    vocab q;
    RG_REQUIRE(open_vocab("qwen2", &q), "open qwen2");
    const char *chat = "<|im_start|>user\nhi<|im_end|>\n";
    RG_CHECK(ids_equal(q.tok, chat, false, true, IDS(151644, 872, 198, 6023, 151645, 198)), "parse_special on");
    size_t n;
    int32_t *ids = tok_ids(q.tok, chat, strlen(chat), false, false, &n);
    bool any = false;
    for (size_t i = 0; i < n; i++) any |= ids[i] >= 151643;
    RG_CHECK(!any && n > 6, "parse_special off must give ordinary tokens (%zu)", n);
    free(ids);
    // Adjacent specials, specials at both ends, text between.
    RG_CHECK(ids_equal(q.tok, "<|endoftext|><|im_end|>a<|im_start|>", false, true, IDS(151643, 151645, 64, 151644)), "adjacent");
    // USER_DEFINED tokens are matched even without parse_special (Qwen2's [PAD...] entries).
    RG_CHECK(ids_equal(q.tok, "x[PAD151646]y", false, false, IDS(87, 151646, 88)), "user-defined");
    // A prefix of a special text is plain text.
    RG_CHECK(ids_equal(q.tok, "<|im_end|", false, true, IDS(27, 91, 318, 6213, 91)), "prefix");
    close_vocab(&q);

    vocab p;
    RG_REQUIRE(open_vocab("phi-3", &p), "open phi-3");
    // phi-3 stores </s> as USER_DEFINED, but its text ends generation, which makes it a control
    // token: split only with parse_special, and then the whitespace after it is dropped (phi-3's
    // rstrip) and SPM adds the space prefix again.
    RG_CHECK(ids_equal(p.tok, "a</s>b", false, false, IDS(263, 829, 29879, 29958, 29890)), "phi-3 </s> as text");
    RG_CHECK(ids_equal(p.tok, "a</s> \n b", false, true, IDS(263, 2, 289)), "phi-3 </s> split, rstrip");
    RG_CHECK(!(p.tok->attr[2] & RG_TOKATTR_LSTRIP) && (p.tok->attr[2] & RG_TOKATTR_CONTROL), "phi-3 </s> attributes");
    RG_CHECK(ids_equal(p.tok, "<|user|>\nHi<|end|>", false, true, IDS(32010, 6324, 32007)), "phi-3 rstrip after <|user|>");
    close_vocab(&p);
}

static void test_bos_eos_rules(void) {
    vocab l, q, s;
    RG_REQUIRE(open_vocab("llama-bpe", &l) && open_vocab("qwen2", &q) && open_vocab("llama-spm", &s), "open");
    const rg_tokenizer_info *li = rg_tokenizer_get_info(l.tok);
    RG_CHECK(li->add_bos && !li->add_eos && li->bos == 128000 && li->ignore_merges, "llama-bpe defaults");
    RG_CHECK(ids_equal(l.tok, "Hello", true, true, IDS(128000, 9906)), "BOS added");
    RG_CHECK(ids_equal(l.tok, "Hello", false, true, IDS(9906)), "no BOS without add_special");
    // Text that starts with the BOS text gets a second BOS, as in llama.cpp (callers that render
    // a BOS into the text tokenize without add_special, §5.4 step 7).
    RG_CHECK(ids_equal(l.tok, "<|begin_of_text|>Hello", true, true, IDS(128000, 128000, 9906)), "BOS text after BOS");
    RG_CHECK(ids_equal(l.tok, "<|begin_of_text|>Hello", false, true, IDS(128000, 9906)), "BOS text alone");
    RG_CHECK(ids_equal(l.tok, "<|begin_of_text|><|begin_of_text|>", false, true, IDS(128000, 128000)), "explicit double");
    // Qwen2: no BOS (add_bos_token absent, pre qwen2).
    RG_CHECK(!rg_tokenizer_get_info(q.tok)->add_bos, "qwen2 add_bos");
    RG_CHECK(ids_equal(q.tok, "Hello", true, true, IDS(9707)), "qwen2 no BOS");
    // SPM: BOS from add_bos_token, space prefix.
    RG_CHECK(ids_equal(s.tok, "Hello world", true, false, IDS(1, 15043, 3186)), "spm BOS");
    RG_CHECK(ids_equal(s.tok, "", true, false, IDS(1)), "spm empty text gives BOS alone");
    RG_CHECK(ids_equal(s.tok, "<s>Hello", true, true, IDS(1, 1, 15043)), "spm BOS text after BOS");
    size_t n = 0;
    int32_t *ids = tok_ids(q.tok, "", 0, true, true, &n);
    RG_CHECK(n == 0 && ids != NULL, "empty text: no tokens (%zu)", n);
    free(ids);
    // The count/copy convention of rg_tokenize.
    int32_t two[2] = {-7, -7};
    RG_CHECK(rg_tokenize(l.tok, "Hello world", 11, true, true, two, 2) == 3 && two[0] == 128000 && two[1] == 9906,
             "rg_tokenize copies the first cap ids and returns the count");
    RG_CHECK(rg_tokenize(l.tok, "Hello world", 11, true, true, NULL, 0) == 3, "count only");
    RG_CHECK(rg_tokenize(q.tok, "", 0, false, false, two, 2) == 0, "empty text into a buffer");
    close_vocab(&l);
    close_vocab(&q);
    close_vocab(&s);
}

static void test_eog_and_accessors(void) {
    vocab q, l, p;
    RG_REQUIRE(open_vocab("qwen2", &q) && open_vocab("llama-bpe", &l) && open_vocab("phi-3", &p), "open");
    RG_CHECK(rg_token_is_eog(q.tok, 151643) && rg_token_is_eog(q.tok, 151645) && !rg_token_is_eog(q.tok, 151644),
             "qwen2: <|endoftext|> and <|im_end|> end generation, <|im_start|> does not");
    RG_CHECK(rg_token_is_eog(l.tok, 128001) && rg_token_is_eog(l.tok, 128009) && !rg_token_is_eog(l.tok, 128000),
             "llama3: <|end_of_text|> and <|eot_id|>");
    RG_CHECK(rg_token_is_eog(p.tok, 32000) && rg_token_is_eog(p.tok, 32007) && !rg_token_is_eog(p.tok, 32010), "phi-3: <|end|>");
    RG_CHECK(!rg_token_is_eog(q.tok, -1) && !rg_token_is_eog(q.tok, 1 << 30), "out of range");
    size_t len;
    const char *t = rg_token_text(q.tok, 9707, &len);
    RG_CHECK(t && len == 5 && memcmp(t, "Hello", 5) == 0, "token text");
    t = rg_token_text(q.tok, 21927, &len);
    RG_CHECK(t && strcmp(t, "\xC4\xA0Hello") == 0, "stored byte-level text");
    RG_CHECK(rg_token_type(q.tok, 151644) == RG_TOKTYPE_CONTROL && rg_token_type(q.tok, 5) == RG_TOKTYPE_NORMAL, "types");
    RG_CHECK(rg_token_find(q.tok, "\xC4\xA0Hello", 7) == 21927 && rg_token_find(q.tok, "no such token!", 14) == -1, "find");
    char piece[64];
    RG_CHECK(rg_token_to_piece(q.tok, 21927, false, piece, sizeof piece) == 6 && strcmp(piece, " Hello") == 0, "piece");
    RG_CHECK(rg_token_to_piece(q.tok, 151645, false, piece, sizeof piece) == 0, "control hidden");
    RG_CHECK(rg_token_to_piece(q.tok, 151645, true, piece, sizeof piece) == 10 && strcmp(piece, "<|im_end|>") == 0, "control shown");
    RG_CHECK(rg_token_to_piece(p.tok, 15043, false, piece, sizeof piece) == 6 && strcmp(piece, " Hello") == 0, "spm piece");
    RG_CHECK(rg_token_to_piece(p.tok, 13, false, piece, sizeof piece) == 1 && piece[0] == '\n', "spm byte piece");
    RG_CHECK(rg_token_score(p.tok, 15043) < 0 && rg_token_score(q.tok, 15043) == 0, "scores");
    close_vocab(&q);
    close_vocab(&l);
    close_vocab(&p);
}

// ---------------------------------------------------------------------------
// Small made-up vocabularies: the 256 byte tokens, a few merges, special tokens; and broken
// variants that loading must refuse with a message naming the key and the index.

static const char *const synth_extra[] = {"he", "ll", "hell", "hello", "<|a|>", "<|a|>b", "<u>", "<|eos|>"};
static const int32_t synth_extra_types[] = {1, 1, 1, 1, RG_TOKTYPE_CONTROL, RG_TOKTYPE_CONTROL, RG_TOKTYPE_USER_DEFINED,
                                            RG_TOKTYPE_CONTROL};
static const char *const synth_merges[] = {"h e", "l l", "he ll", "hell o"};
#define SYNTH_N (256 + 8)
#define SYNTH_MAX_EXTRA 16

// The 256 byte tokens (id = byte), then extra[0..n_extra) with their types, which must begin
// with the results of synth_merges ("he", "ll", "hell", "hello"); general.name when name.
static rg_gguf *synth_vocab_of(const char *const *extra, const int32_t *extra_types, int n_extra, const char *name) {
    rg_gguf *g = rg_gguf_new();
    static char bytes[256][4];
    const char *tokens[256 + SYNTH_MAX_EXTRA];
    int32_t types[256 + SYNTH_MAX_EXTRA];
    for (int b = 0; b < 256; b++) {
        rg_bytes_to_bpe_text(&(uint8_t){(uint8_t)b}, 1, bytes[b], sizeof bytes[b]);
        tokens[b] = bytes[b];
        types[b] = RG_TOKTYPE_NORMAL;
    }
    for (int i = 0; i < n_extra && i < SYNTH_MAX_EXTRA; i++) {
        tokens[256 + i] = extra[i];
        types[256 + i] = extra_types[i];
    }
    uint64_t n = 256 + (uint64_t)n_extra;
    rg_error err = {0};
    rg_status st = rg_gguf_set_str(g, "tokenizer.ggml.model", "gpt2", &err);
    if (!st) st = rg_gguf_set_str(g, "tokenizer.ggml.pre", "qwen2", &err);
    if (!st) st = rg_gguf_set_str_array(g, "tokenizer.ggml.tokens", tokens, n, &err);
    if (!st) st = rg_gguf_set_array(g, "tokenizer.ggml.token_type", RG_GGUF_I32, types, n, &err);
    if (!st) st = rg_gguf_set_str_array(g, "tokenizer.ggml.merges", synth_merges, 4, &err);
    if (!st && name) st = rg_gguf_set_str(g, "general.name", name, &err);
    if (st) {
        printf("    building the vocabulary failed: %s\n", err.msg);
        rg_gguf_free(g);
        return NULL;
    }
    return g;
}

static rg_gguf *synth_vocab(void) {
    rg_gguf *g = synth_vocab_of(synth_extra, synth_extra_types, 8, NULL);
    rg_error err = {0};
    if (g && (rg_gguf_set_u32(g, "tokenizer.ggml.eos_token_id", 256 + 7, &err) ||
              rg_gguf_set_bool(g, "tokenizer.ggml.add_eos_token", true, &err))) {
        printf("    building the vocabulary failed: %s\n", err.msg);
        rg_gguf_free(g);
        return NULL;
    }
    return g;
}

static void test_synthetic_vocab(void) {
    rg_gguf *g = synth_vocab();
    RG_REQUIRE(g, "synth");
    rg_tokenizer *tok = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_tokenizer_load(&tok, g, &err) == RG_OK, "%s", err.msg);
    rg_gguf_free(g);  // the tokenizer owns copies of everything
    const int32_t hello = 259, eos = 263, a = 260, ab = 261, u = 262;
    RG_CHECK(ids_equal(tok, "hello", false, false, IDS(hello)), "merges");
    RG_CHECK(ids_equal(tok, "hello", true, false, IDS(hello, eos)), "EOS appended");
    RG_CHECK(ids_equal(tok, "hel", false, false, IDS(256, 'l')), "partial merges");
    // Special texts: the longer text first, then the leftmost.
    RG_CHECK(ids_equal(tok, "<|a|>bc", false, true, IDS(ab, 'c')), "longest");
    RG_CHECK(ids_equal(tok, "<|a|>c", false, true, IDS(a, 'c')), "shorter");
    RG_CHECK(ids_equal(tok, "<<|a|>", false, true, IDS('<', a)), "leftmost");
    RG_CHECK(ids_equal(tok, "<u>", false, false, IDS(u)), "user-defined without parse_special");
    size_t n;
    int32_t *ids = tok_ids(tok, "<|a|>", 5, false, false, &n);
    RG_CHECK(n == 5 && ids[0] == '<', "control text without parse_special is plain text (%zu)", n);
    free(ids);
    RG_CHECK(rg_token_is_eog(tok, eos) && !rg_token_is_eog(tok, a), "eog");
    rg_tokenizer_free(tok);
}

// llama.cpp's special-token rules on made-up vocabularies: longest text first anywhere in the
// text (not leftmost first), one text under two ids, control-looking texts, the model-name
// strip rules (modern-bert: lstrip of [MASK]; phi-3: rstrip of every special but three).
static const char *const rules_extra[] = {"he", "ll", "hell", "hello", "<u>", "u>vwx", "[MASK]", "<d>", "<d>",
                                          "<|im_end|>", "<|fim_pad|>", "<s>", "<|x|>"};
static const int32_t rules_types[] = {1, 1, 1, 1, RG_TOKTYPE_USER_DEFINED, RG_TOKTYPE_CONTROL, RG_TOKTYPE_USER_DEFINED,
                                      RG_TOKTYPE_CONTROL, RG_TOKTYPE_USER_DEFINED, RG_TOKTYPE_USER_DEFINED,
                                      RG_TOKTYPE_NORMAL, RG_TOKTYPE_CONTROL, RG_TOKTYPE_USER_DEFINED};
enum { R_U = 260, R_UVWX, R_MASK, R_D_CONTROL, R_D_USER, R_IM_END, R_FIM_PAD, R_S, R_X };
#define R_N ((int)(sizeof rules_extra / sizeof rules_extra[0]))

typedef struct rule_case {
    const char *text;
    bool parse_special;
    int32_t want[8];  // ends at the first 0 (no case expects the byte 0)
    const char *why;
} rule_case;

static const rule_case modern_bert_cases[] = {
    {"<u>vwxyz", true, {'<', R_UVWX, 'y', 'z'}, "the longer text wins though it starts later"},
    {"<u>vwxyz", false, {R_U, 'v', 'w', 'x', 'y', 'z'}, "control text not matched: the user-defined one is"},
    {"a  [MASK] b", false, {'a', R_MASK, ' ', 'b'}, "[MASK] drops the whitespace before it, not after"},
    {"  [MASK]", false, {R_MASK}, "lstrip at the start of the text"},
    {"<d>", true, {R_D_CONTROL}, "one text, two ids: the lower id"},
    {"<d>", false, {R_D_USER}, "one text, two ids: the user-defined one without parse_special"},
    {"<|im_end|>", true, {R_IM_END}, "an end-of-generation text is a control token"},
    {"<|fim_pad|>", true, {R_FIM_PAD}, "a FIM text is a control token when the file names no FIM id"},
    {"<s> x", true, {R_S, ' ', 'x'}, "no strip rule outside phi-3 and the BERT masks"},
};

static const rule_case phi3_cases[] = {
    {"<|x|> \n x", false, {R_X, 'x'}, "phi-3: the whitespace after a special token is dropped"},
    {"<u>\t<u>", false, {R_U, R_U}, "phi-3: between two specials"},
    {"a <u>", false, {'a', ' ', R_U}, "phi-3: not the whitespace before"},
    {"<s> x", true, {R_S, ' ', 'x'}, "phi-3: <s> keeps the whitespace after it"},
    {"[MASK] x", false, {R_MASK, 'x'}, "phi-3: no lstrip of [MASK], but rstrip"},
};

static void check_rule_cases(const char *vname, const rule_case *cases, size_t n) {
    rg_gguf *g = synth_vocab_of(rules_extra, rules_types, R_N, vname);
    RG_REQUIRE(g, "synth");
    rg_tokenizer *tok = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_tokenizer_load(&tok, g, &err) == RG_OK, "%s", err.msg);
    rg_gguf_free(g);
    for (size_t i = 0; i < n; i++) {
        size_t n_want = 0;
        while (n_want < 8 && cases[i].want[n_want]) n_want++;
        RG_CHECK(ids_equal(tok, cases[i].text, false, cases[i].parse_special, cases[i].want, n_want), "%s: %s", vname,
                 cases[i].why);
    }
    RG_CHECK(rg_token_is_eog(tok, R_IM_END) && rg_token_type(tok, R_IM_END) == RG_TOKTYPE_USER_DEFINED,
             "the stored type stays USER_DEFINED");
    rg_tokenizer_free(tok);
}

static void test_special_split_rules(void) {
    check_rule_cases("modern-bert-test", modern_bert_cases, sizeof modern_bert_cases / sizeof modern_bert_cases[0]);
    check_rule_cases("Tiny-Phi-3-test", phi3_cases, sizeof phi3_cases / sizeof phi3_cases[0]);
    // A FIM text stays ordinary when the file names the FIM token of its role.
    rg_gguf *g = synth_vocab_of(rules_extra, rules_types, R_N, NULL);
    rg_error err = {0};
    RG_REQUIRE(g && rg_gguf_set_u32(g, "tokenizer.ggml.fim_pad_token_id", R_S, &err) == RG_OK, "synth");
    rg_tokenizer *tok = NULL;
    RG_REQUIRE(rg_tokenizer_load(&tok, g, &err) == RG_OK, "%s", err.msg);
    rg_gguf_free(g);
    size_t n;
    int32_t *ids = tok_ids(tok, "<|fim_pad|>", 11, false, true, &n);
    RG_CHECK(n == 11 && ids[0] == '<', "<|fim_pad|> with fim_pad_token_id set is ordinary text (%zu ids)", n);
    free(ids);
    rg_tokenizer_free(tok);
}

typedef struct broken_case {
    const char *what;
    rg_status want;
    const char *msg;  // a piece of the message
} broken_case;

static void expect_broken(rg_gguf *g, const broken_case *c) {
    rg_tokenizer *tok = NULL;
    rg_error err = {0};
    rg_status st = rg_tokenizer_load(&tok, g, &err);
    RG_CHECK(st == c->want && tok == NULL, "%s: status %d, wanted %d (%s)", c->what, st, c->want, err.msg);
    RG_CHECK(st == RG_OK || strstr(err.msg, c->msg), "%s: message '%s' lacks '%s'", c->what, err.msg, c->msg);
    rg_tokenizer_free(tok);
    rg_gguf_free(g);
}

static void test_malformed_metadata(void) {
    rg_error err = {0};
    rg_gguf *g;
    const char *bad_merges[] = {"h e", "l l", "zz q", "hell o"};
    const char *no_space[] = {"h e", "hell"};
    const char *no_result[] = {"h e", "x y"};
    const char *bad_pre[] = {"he", "ll"};

    g = synth_vocab();
    rg_gguf_set_array(g, "tokenizer.ggml.token_type", RG_GGUF_I32, (int32_t[]){1, 1, 1}, 3, &err);
    expect_broken(g, &(broken_case){"short token_type", RG_ERR_FORMAT, "token_type has 3 entries but tokenizer.ggml.tokens has 264"});

    g = synth_vocab();
    rg_gguf_set_str_array(g, "tokenizer.ggml.merges", bad_merges, 4, &err);
    expect_broken(g, &(broken_case){"unknown merge part", RG_ERR_FORMAT, "tokenizer.ggml.merges[2] = 'zz q': part 'zz' is not a token"});

    g = synth_vocab();
    rg_gguf_set_str_array(g, "tokenizer.ggml.merges", no_space, 2, &err);
    expect_broken(g, &(broken_case){"merge without space", RG_ERR_FORMAT, "merges[1] = 'hell' has no space"});

    g = synth_vocab();
    rg_gguf_set_str_array(g, "tokenizer.ggml.merges", no_result, 2, &err);
    expect_broken(g, &(broken_case){"merge result missing", RG_ERR_FORMAT, "merges[1] = 'x y': the result 'xy' is not a token"});

    g = synth_vocab();
    rg_gguf_set_u32(g, "tokenizer.ggml.bos_token_id", 99999, &err);
    expect_broken(g, &(broken_case){"bos out of range", RG_ERR_FORMAT, "tokenizer.ggml.bos_token_id = 99999 is out of range: the vocabulary has 264 tokens"});

    g = synth_vocab();
    rg_gguf_set_i32(g, "tokenizer.ggml.eos_token_id", -5, &err);
    expect_broken(g, &(broken_case){"negative eos", RG_ERR_FORMAT, "eos_token_id = -5 is out of range"});

    g = synth_vocab();
    rg_gguf_set_array(g, "tokenizer.ggml.token_type", RG_GGUF_I32, (int32_t[SYNTH_N]){[17] = 9}, SYNTH_N, &err);
    expect_broken(g, &(broken_case){"bad token type", RG_ERR_FORMAT, "token_type[17] = 9 is not a token type"});

    g = synth_vocab();
    rg_gguf_set_array(g, "tokenizer.ggml.scores", RG_GGUF_F32, (float[]){0, 0}, 2, &err);
    expect_broken(g, &(broken_case){"short scores", RG_ERR_FORMAT, "scores has 2 entries"});

    g = synth_vocab();
    rg_gguf_set_str(g, "tokenizer.ggml.model", "bert", &err);
    expect_broken(g, &(broken_case){"bert", RG_ERR_UNSUPPORTED, "tokenizer.ggml.model 'bert' is not supported"});

    g = synth_vocab();
    rg_gguf_set_str(g, "tokenizer.ggml.pre", "mystery-pre", &err);
    expect_broken(g, &(broken_case){"unknown pre", RG_ERR_UNSUPPORTED, "tokenizer.ggml.pre 'mystery-pre' is not supported"});

    g = synth_vocab();
    rg_gguf_remove(g, "tokenizer.ggml.model");
    expect_broken(g, &(broken_case){"no model", RG_ERR_NOT_FOUND, "no tokenizer: tokenizer.ggml.model is missing"});

    g = synth_vocab();
    rg_gguf_remove(g, "tokenizer.ggml.tokens");
    expect_broken(g, &(broken_case){"no tokens", RG_ERR_NOT_FOUND, "tokenizer.ggml.tokens is missing"});

    g = synth_vocab();
    rg_gguf_set_array(g, "tokenizer.ggml.tokens", RG_GGUF_I32, (int32_t[]){1, 2}, 2, &err);
    expect_broken(g, &(broken_case){"numeric tokens", RG_ERR_FORMAT, "tokens is not an array of strings"});

    g = synth_vocab();
    rg_gguf_remove(g, "tokenizer.ggml.merges");
    expect_broken(g, &(broken_case){"no merges", RG_ERR_FORMAT, "tokenizer.ggml.merges is missing"});

    g = synth_vocab();
    rg_gguf_set_bool(g, "tokenizer.ggml.add_bos_token", true, &err);
    expect_broken(g, &(broken_case){"add_bos without bos", RG_ERR_FORMAT, "add_bos_token is true but there is no bos_token_id"});

    g = synth_vocab();
    rg_gguf_set_str_array(g, "tokenizer.ggml.merges", bad_pre, 2, &err);
    expect_broken(g, &(broken_case){"merge without space (2)", RG_ERR_FORMAT, "merges[0] = 'he' has no space"});

    // -1 stored as a special id means "none" and loads.
    g = synth_vocab();
    rg_gguf_set_i32(g, "tokenizer.ggml.padding_token_id", -1, &err);
    rg_tokenizer *tok = NULL;
    RG_CHECK(rg_tokenizer_load(&tok, g, &err) == RG_OK && rg_tokenizer_get_info(tok)->pad == -1, "pad -1: %s", err.msg);
    rg_tokenizer_free(tok);
    rg_gguf_free(g);
}

// ---------------------------------------------------------------------------
// The command line: vocabulary-only and full files, output forms, errors.

static int run_cli(const char *args, char *out, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/retrograd %s 2>&1", RG_BINARY_DIR, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_cli_tokenize(void) {
    if (access(RG_BINARY_DIR "/retrograd", X_OK) != 0) RG_SKIP("the retrograd binary is not built");
    char out[4096];
    const char *q = "-m " DATA "ggml-vocab-qwen2.gguf";
    char args[1024];
    snprintf(args, sizeof args, "tokenize %s -p 'Hello world'", q);
    RG_CHECK(run_cli(args, out, sizeof out) == 0 && strcmp(out, "9707\t'Hello'\n1879\t' world'\n") == 0, "lines: '%s'", out);
    snprintf(args, sizeof args, "tokenize %s -p 'Hello world' --ids", q);
    RG_CHECK(run_cli(args, out, sizeof out) == 0 && strcmp(out, "[9707, 1879]\n") == 0, "ids: '%s'", out);
    snprintf(args, sizeof args, "tokenize %s -p 'Hello world' --count", q);
    RG_CHECK(run_cli(args, out, sizeof out) == 0 && strcmp(out, "2\n") == 0, "count: '%s'", out);
    snprintf(args, sizeof args, "tokenize %s -p '<|im_end|>' --ids", q);
    RG_CHECK(run_cli(args, out, sizeof out) == 0 && strcmp(out, "[151645]\n") == 0, "special: '%s'", out);
    snprintf(args, sizeof args, "tokenize %s -p '<|im_end|>' --ids --no-special", q);
    RG_CHECK(run_cli(args, out, sizeof out) == 0 && strcmp(out, "[27, 91, 318, 6213, 91, 29]\n") == 0, "no-special: '%s'", out);
    snprintf(args, sizeof args, "tokenize -m " DATA "ggml-vocab-llama-bpe.gguf -p Hello --ids");
    RG_CHECK(run_cli(args, out, sizeof out) == 0 && strcmp(out, "[128000, 9906]\n") == 0, "bos: '%s'", out);
    snprintf(args, sizeof args, "tokenize -m " DATA "ggml-vocab-llama-bpe.gguf -p Hello --ids --no-bos");
    RG_CHECK(run_cli(args, out, sizeof out) == 0 && strcmp(out, "[9906]\n") == 0, "no-bos: '%s'", out);

    // Invalid UTF-8 from a file: tokenized, with a warning naming the offset.
    char tmp[] = "/tmp/rg_tok_XXXXXX";
    int fd = mkstemp(tmp);
    RG_REQUIRE(fd >= 0, "mkstemp");
    RG_REQUIRE(write(fd, "abc\xFF\n", 5) == 5, "write");
    close(fd);
    snprintf(args, sizeof args, "tokenize %s -f %s --ids", q, tmp);
    RG_CHECK(run_cli(args, out, sizeof out) == 0 && strstr(out, "first invalid byte at offset 3") && strstr(out, "[13683, 187, 198]"),
             "invalid utf-8: '%s'", out);
    snprintf(args, sizeof args, "tokenize %s -f %s", q, tmp);
    RG_CHECK(run_cli(args, out, sizeof out) == 0 && strstr(out, "187\t'\\xFF'\n198\t'\\n'\n"), "escaped pieces: '%s'", out);

    // Errors: one line, non-zero exit.
    RG_CHECK(run_cli("tokenize -m /nonexistent/model.gguf -p x", out, sizeof out) != 0 && strstr(out, "/nonexistent/model.gguf") &&
                 strchr(out, '\n') == out + strlen(out) - 1, "missing file: '%s'", out);
    RG_CHECK(run_cli("tokenize -m " DATA "README.md -p x", out, sizeof out) != 0 && strstr(out, "not a GGUF file"), "not gguf: '%s'", out);
    rg_gguf *g = rg_gguf_new();
    rg_error err = {0};
    rg_gguf_set_str(g, "general.architecture", "qwen2", &err);
    RG_REQUIRE(rg_gguf_write(g, tmp, &err) == RG_OK, "%s", err.msg);
    rg_gguf_free(g);
    snprintf(args, sizeof args, "tokenize -m %s -p x", tmp);
    RG_CHECK(run_cli(args, out, sizeof out) != 0 && strstr(out, "no tokenizer") && strchr(out, '\n') == out + strlen(out) - 1,
             "no tokenizer keys: '%s'", out);
    RG_CHECK(run_cli("tokenize -p x", out, sizeof out) == 2, "usage error");

    // A full model file (make-tiny writes one with a trained byte-level vocabulary).
    snprintf(args, sizeof args, "make-tiny --arch qwen2 --type f32 -o %s", tmp);
    if (run_cli(args, out, sizeof out) == 0) {
        snprintf(args, sizeof args, "tokenize -m %s -p '<|im_start|>user' --ids", tmp);
        RG_CHECK(run_cli(args, out, sizeof out) == 0 && out[0] == '[', "full model: '%s'", out);
    }
    unlink(tmp);
}

// ---------------------------------------------------------------------------
// Speed: 1 MiB of English text.

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_speed_1mb_english(void) {
    size_t len = 1 << 20;
    char *text = malloc(len);
    for (size_t o = 0; o < len; o += rg_tiny_corpus_len) {
        size_t k = len - o < rg_tiny_corpus_len ? len - o : rg_tiny_corpus_len;
        memcpy(text + o, rg_tiny_corpus, k);
    }
    static const char *const names[] = {"qwen2", "llama-bpe", "gpt-2", "llama-spm"};
    for (size_t v = 0; v < 4; v++) {
        vocab voc;
        RG_REQUIRE(open_vocab(names[v], &voc), "open");
        double t0 = now_s();
        int64_t n = rg_tokenize(voc.tok, text, len, false, true, NULL, 0);
        double dt = now_s() - t0;
        printf("    %-10s 1 MiB of English in %.0f ms (%.1f MB/s), %lld tokens\n", names[v], dt * 1e3, (double)len / dt / 1e6,
               (long long)n);
        RG_CHECK(n > 100000 && dt < 10.0, "%s: %lld tokens in %.2f s", names[v], (long long)n, dt);
        close_vocab(&voc);
    }
    free(text);
}

static const rg_test_case test_cases[] = {
    RG_TEST(test_reference_vectors),
    RG_TEST(test_special_vectors),
    RG_TEST(test_pretokenizers),
    RG_TEST(test_spm_pieces_equal_whole),
    RG_TEST(test_round_trip_byte_level),
    RG_TEST(test_round_trip_spm),
    RG_TEST(test_stream_decode),
    RG_TEST(test_stream_decode_spm),
    RG_TEST(test_special_tokens),
    RG_TEST(test_bos_eos_rules),
    RG_TEST(test_eog_and_accessors),
    RG_TEST(test_synthetic_vocab),
    RG_TEST(test_special_split_rules),
    RG_TEST(test_malformed_metadata),
    RG_TEST(test_cli_tokenize),
    RG_TEST(test_speed_1mb_english),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, test_cases); }
