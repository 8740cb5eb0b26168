// test_train_data.c - the training dataset (src/train/data.h) with the tiny qwen2's byte-level BPE
// and ChatML template: each format's tokens and targets (checked by decoding them), packing and
// its row invariants (seg/pos restart per document, no document split across rows, padding),
// overlong samples, the eval split, the per-epoch row orders, the hash, the errors for bad files, and
// tool-calling chats (OpenAI's format: targets, weight, the refusals, rg_data_check_line).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"
#include "gguf/gguf.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "text/chat.h"
#include "text/tokenizer.h"
#include "train/data.h"

#define DATA RG_SOURCE_DIR "/tests/data/train/"

// ---------------------------------------------------------------------------
// Fixture: the tiny model's tokenizer and chat template, a temporary folder

static rg_gguf *tiny_gguf;
static rg_tokenizer *tok;
static rg_chat_template tmpl;
static char tmp_dir[64];

static bool fixture(void) {
    if (tok) return true;
    rg_error err = {0};
    rg_tiny_config cfg = {.arch = "qwen2", .type = RG_TYPE_F32, .seed = 1};
    if (rg_tiny_build(&cfg, &tiny_gguf, &err) || rg_tokenizer_load(&tok, tiny_gguf, &err) ||
        rg_chat_template_from_tokenizer(&tmpl, tok, &err)) {
        printf("    fixture: %s\n", err.msg);
        return false;
    }
    strcpy(tmp_dir, "/tmp/rg_test_train_dataXXXXXX");
    if (!mkdtemp(tmp_dir)) {
        printf("    mkdtemp failed\n");
        return false;
    }
    return true;
}

static char *write_tmp(const char *name, const char *content, size_t len) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    fwrite(content, 1, len, f);
    fclose(f);
    return path;
}

static rg_data_opts opts_of(int64_t ctx, rg_data_train_on on, bool pack) {
    return (rg_data_opts){.ctx = ctx, .train_on = on, .pack = pack, .overlong = RG_DATA_OVERLONG_ERROR, .seed = 42};
}

static rg_dataset *load_with(const char *path, const rg_tokenizer *t, const rg_data_opts *o) {
    rg_dataset *d = NULL;
    rg_error err = {0};
    if (rg_dataset_load(&d, path, t, &tmpl, o, &err)) {
        printf("    load %s: %s\n", path, err.msg);
        return NULL;
    }
    return d;
}

static rg_dataset *load(const char *path, const rg_data_opts *o) { return load_with(path, tok, o); }

static char *decode_with(const rg_tokenizer *t, const int32_t *ids, size_t n) {
    size_t len = rg_detokenize(t, ids, n, true, NULL, 0);
    char *s = malloc(len + 1);
    rg_detokenize(t, ids, n, true, s, len + 1);
    return s;
}

static int32_t *tokenize(const rg_tokenizer *t, const char *s, size_t *n) {
    int32_t *ids = NULL;
    rg_error err = {0};
    if (rg_tokenize_alloc(t, s, strlen(s), false, true, &ids, n, &err)) *n = 0;
    return ids;
}

// ---------------------------------------------------------------------------
// Rows and documents

typedef struct rows {
    int64_t n, ctx;
    int32_t *ids, *labels, *pos, *seg;  // [ctx, n]
} rows;

static rows fetch(const rg_dataset *d, int split, int64_t epoch, int64_t ctx) {
    rows r = {.n = rg_dataset_n_rows(d, split), .ctx = ctx};
    size_t sz = (size_t)(r.n ? r.n : 1) * (size_t)ctx * sizeof(int32_t);
    r.ids = malloc(sz), r.labels = malloc(sz), r.pos = malloc(sz), r.seg = malloc(sz);
    for (int64_t k = 0; k < r.n; k++)
        rg_dataset_row(d, split, epoch, k, r.ids + k * ctx, r.labels + k * ctx, r.pos + k * ctx, r.seg + k * ctx);
    return r;
}

static void rows_free(rows *r) {
    free(r->ids), free(r->labels), free(r->pos), free(r->seg);
    memset(r, 0, sizeof *r);
}

// One document of a row: its positions [begin, end) in the row.
typedef struct doc {
    int64_t row, begin, end;
    char *text;     // the decoded ids
    char *targets;  // the decoded predicted tokens, runs of consecutive targets joined by '|'
} doc;

typedef struct docs {
    doc *v;
    int64_t n;
} docs;

static void docs_free(docs *ds) {
    for (int64_t i = 0; i < ds->n; i++) free(ds->v[i].text), free(ds->v[i].targets);
    free(ds->v);
    memset(ds, 0, sizeof *ds);
}

static docs split_docs(const rows *r, const rg_tokenizer *t) {
    docs ds = {0};
    int64_t cap = 16;
    ds.v = malloc((size_t)cap * sizeof *ds.v);
    for (int64_t k = 0; k < r->n; k++) {
        const int32_t *seg = r->seg + k * r->ctx, *ids = r->ids + k * r->ctx, *lab = r->labels + k * r->ctx;
        for (int64_t p = 0; p < r->ctx && seg[p] >= 0;) {
            int64_t q = p;
            while (q < r->ctx && seg[q] == seg[p]) q++;
            if (ds.n == cap) cap *= 2, ds.v = realloc(ds.v, (size_t)cap * sizeof *ds.v);
            doc *dc = &ds.v[ds.n++];
            dc->row = k, dc->begin = p, dc->end = q;
            dc->text = decode_with(t, ids + p, (size_t)(q - p));
            // Target runs.
            size_t cap_t = 16, len_t = 0;
            dc->targets = calloc(cap_t, 1);
            for (int64_t i = p; i < q;) {
                if (lab[i] == -100) {
                    i++;
                    continue;
                }
                int64_t j = i;
                while (j < q && lab[j] != -100) j++;
                char *run = decode_with(t, lab + i, (size_t)(j - i));
                size_t need = len_t + strlen(run) + 2;
                if (need > cap_t) cap_t = need * 2, dc->targets = realloc(dc->targets, cap_t);
                if (len_t) dc->targets[len_t++] = '|';
                memcpy(dc->targets + len_t, run, strlen(run) + 1);
                len_t += strlen(run);
                free(run);
                i = j;
            }
            p = q;
        }
    }
    return ds;
}

static const doc *find_doc(const docs *ds, const char *text) {
    for (int64_t i = 0; i < ds->n; i++)
        if (strcmp(ds->v[i].text, text) == 0) return &ds->v[i];
    return NULL;
}

// The row invariants every dataset must satisfy, and the stats they must add up to.
static void check_rows(const rg_dataset *d, int64_t ctx, const char *what) {
    rg_data_stats st = rg_dataset_stats(d);
    int64_t n_tokens = 0, n_targets = 0, n_pad = 0, n_docs = 0, bad = 0;
    int32_t n_vocab = rg_tokenizer_n_tokens(tok);
    for (int split = 0; split < 2; split++) {
        rows r = fetch(d, split, 0, ctx);
        for (int64_t k = 0; k < r.n && bad < 5; k++) {
            const int32_t *ids = r.ids + k * ctx, *lab = r.labels + k * ctx, *pos = r.pos + k * ctx, *seg = r.seg + k * ctx;
            int64_t row_targets = 0;
            for (int64_t p = 0; p < ctx; p++) {
                bool pad = seg[p] < 0;
                bool ok = true;
                if (p == 0) ok &= seg[0] == 0 && pos[0] == 0;  // a row is never empty
                else if (pad) ok &= (seg[p - 1] >= 0 || seg[p - 1] == -1) && pos[p] == pos[p - 1] + 1;
                else if (seg[p] == seg[p - 1]) ok &= pos[p] == pos[p - 1] + 1;
                else ok &= seg[p] == seg[p - 1] + 1 && seg[p - 1] >= 0 && pos[p] == 0;
                if (pad) ok &= lab[p] == -100 && (p == 0 || seg[p - 1] >= 0 || seg[p - 1] == -1);
                if (lab[p] != -100) {
                    ok &= lab[p] >= 0 && lab[p] < n_vocab;
                    if (p + 1 < ctx && seg[p + 1] == seg[p]) ok &= lab[p] == ids[p + 1];
                    row_targets++;
                }
                if (!ok) {
                    bad++;
                    printf("    %s: split %d row %lld position %lld: id %d label %d pos %d seg %d (before: pos %d seg %d)\n",
                           what, split, (long long)k, (long long)p, ids[p], lab[p], pos[p], seg[p], p ? pos[p - 1] : -1,
                           p ? seg[p - 1] : -9);
                    break;
                }
                if (pad) n_pad++;
                else n_tokens++;
                if (!pad && (p == 0 || seg[p] != seg[p - 1])) n_docs++;
            }
            RG_CHECK(row_targets > 0, "%s: split %d row %lld has no target", what, split, (long long)k);
            n_targets += row_targets;
        }
        rows_free(&r);
    }
    RG_CHECK(bad == 0, "%s: %lld rows break the invariants", what, (long long)bad);
    RG_CHECK(n_targets == st.n_target_tokens, "%s: labels != -100 over all rows %lld, stats %lld", what,
             (long long)n_targets, (long long)st.n_target_tokens);
    RG_CHECK(n_tokens == st.n_tokens && n_pad == st.n_pad_tokens, "%s: tokens %lld pad %lld, stats %lld %lld", what,
             (long long)n_tokens, (long long)n_pad, (long long)st.n_tokens, (long long)st.n_pad_tokens);
    RG_CHECK(n_docs == st.n_samples && st.n_samples == st.n_train_samples + st.n_eval_samples,
             "%s: %lld documents in rows, stats %lld = %lld + %lld", what, (long long)n_docs, (long long)st.n_samples,
             (long long)st.n_train_samples, (long long)st.n_eval_samples);
    RG_CHECK(st.n_train_rows == rg_dataset_n_rows(d, 0) && st.n_eval_rows == rg_dataset_n_rows(d, 1),
             "%s: row counts", what);
}

// ---------------------------------------------------------------------------
// Formats

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    *len = fread(s, 1, (size_t)n, f);
    s[*len] = 0;
    fclose(f);
    return s;
}

static void test_plain_text(void) {
    if (!fixture()) RG_SKIP("no fixture");
    size_t len = 0, n_ref = 0;
    char *text = read_file(DATA "plain.txt", &len);
    RG_REQUIRE(text, "read plain.txt");
    int32_t *ref = tokenize(tok, text, &n_ref);  // the tiny model adds no BOS
    for (int pack = 0; pack < 2; pack++) {
        const int64_t ctx = 16;
        rg_data_opts o = opts_of(ctx, RG_DATA_TRAIN_ON_ASSISTANT, pack);
        rg_dataset *d = load(DATA "plain.txt", &o);
        RG_REQUIRE(d, "load");
        rg_data_stats st = rg_dataset_stats(d);
        int64_t n_windows = ((int64_t)n_ref - 1 + ctx - 1) / ctx;  // windows with >= 2 tokens
        RG_CHECK(strcmp(st.format, "text") == 0, "format %s", st.format);
        RG_CHECK(st.n_samples == n_windows && st.n_train_rows == n_windows, "%zu tokens: %lld samples %lld rows, want %lld",
                 n_ref, (long long)st.n_samples, (long long)st.n_train_rows, (long long)n_windows);
        RG_CHECK(st.n_target_tokens == (int64_t)n_ref - 1, "targets %lld, want every token but the first: %zu",
                 (long long)st.n_target_tokens, n_ref - 1);
        check_rows(d, ctx, "plain");
        // Each row is one window w: ids ref[w*ctx ..], labels ref[w*ctx+1 ..]; each window exactly once.
        rows r = fetch(d, 0, 0, ctx);
        char *seen = calloc((size_t)n_windows + 1, 1);
        for (int64_t k = 0; k < r.n; k++) {
            int64_t found = -1;
            for (int64_t w = 0; w < n_windows && found < 0; w++) {
                if (seen[w]) continue;
                bool same = true;
                for (int64_t p = 0; p < ctx && same; p++) {
                    int64_t t = w * ctx + p;
                    bool in = t + 1 < (int64_t)n_ref;
                    same = in ? r.ids[k * ctx + p] == ref[t] && r.labels[k * ctx + p] == ref[t + 1]
                              : r.seg[k * ctx + p] == -1;
                }
                if (same) found = w;
            }
            RG_CHECK(found >= 0, "pack %d: row %lld is no window of the text", pack, (long long)k);
            if (found >= 0) seen[found] = 1;
        }
        free(seen);
        rows_free(&r);
        rg_dataset_free(d);
    }
    free(ref);
    free(text);
}

static const char *const text_lines[] = {
    "The cat sat on the mat.", "A quick brown fox jumps over the lazy dog.", "Rain is expected tomorrow afternoon.",
    "She sells sea shells by the sea shore.", "One, two, three, four, five.", "Water boils at one hundred degrees.",
    "The library opens at nine.", "Bring a coat, it is cold outside.", "Green tea has less caffeine than coffee.",
    "He plays the violin every Sunday.", "Mountains are higher than hills.", "The train to Paris leaves at noon.",
    "Bees make honey from nectar.", "Turn left at the second light.", "Our meeting moved to Thursday.",
    "The river froze last winter.", "Please close the door quietly.",
    "Caf\xC3\xA9 au lait, s'il vous pla\xC3\xAEt \xE2\x98\x95", "Seven is a prime number.", "The moon orbits the earth.",
};
enum { N_TEXT_LINES = sizeof text_lines / sizeof *text_lines };

// Every text line appears as exactly one document "<text><|im_end|>" whose targets are all its
// tokens but the first.
static void check_text_docs(const docs *ds, const char *what) {
    RG_CHECK(ds->n == N_TEXT_LINES, "%s: %lld documents, want %d", what, (long long)ds->n, N_TEXT_LINES);
    for (int i = 0; i < N_TEXT_LINES; i++) {
        char want[256];
        snprintf(want, sizeof want, "%s<|im_end|>", text_lines[i]);
        int count = 0;
        for (int64_t j = 0; j < ds->n; j++) count += strcmp(ds->v[j].text, want) == 0;
        RG_CHECK(count == 1, "%s: line %d '%s' found %d times", what, i + 1, want, count);
        const doc *dc = find_doc(ds, want);
        if (!dc) continue;
        size_t n = 0;
        int32_t *ids = tokenize(tok, want, &n);
        char *tail = decode_with(tok, ids + 1, n - 1);
        RG_CHECK(strcmp(dc->targets, tail) == 0, "%s: targets '%s', want '%s'", what, dc->targets, tail);
        free(tail);
        free(ids);
    }
}

static void test_text_lines(void) {
    if (!fixture()) RG_SKIP("no fixture");
    for (int on = 0; on < 2; on++) {
        rg_data_opts o = opts_of(64, on ? RG_DATA_TRAIN_ON_ASSISTANT : RG_DATA_TRAIN_ON_ALL, false);
        rg_dataset *d = load(DATA "text.jsonl", &o);
        RG_REQUIRE(d, "load");
        rg_data_stats st = rg_dataset_stats(d);
        RG_CHECK(strcmp(st.format, "jsonl:text") == 0, "format %s", st.format);
        RG_CHECK(st.n_samples == N_TEXT_LINES && st.n_train_rows == N_TEXT_LINES, "samples %lld rows %lld",
                 (long long)st.n_samples, (long long)st.n_train_rows);
        check_rows(d, 64, "text");
        rows r = fetch(d, 0, 0, 64);
        docs ds = split_docs(&r, tok);
        check_text_docs(&ds, "text");
        // A document's last token has no label; the row continues with padding (EOS ids).
        for (int64_t i = 0; i < ds.n; i++) {
            const doc *dc = &ds.v[i];
            RG_CHECK(r.labels[dc->row * 64 + dc->end - 1] == -100, "doc %lld: last label %d", (long long)i,
                     r.labels[dc->row * 64 + dc->end - 1]);
            if (dc->end < 64)
                RG_CHECK(r.ids[dc->row * 64 + dc->end] == rg_tokenizer_get_info(tok)->eos, "padding id %d",
                         r.ids[dc->row * 64 + dc->end]);
        }
        docs_free(&ds);
        rows_free(&r);
        rg_dataset_free(d);
    }
    // A byte order mark is skipped, CRLF line ends are fine, special tokens in text are parsed,
    // and an EOS already at the end is not doubled.
    const char crlf[] = "\xEF\xBB\xBF{\"text\":\"a b\"}\r\n\r\n{\"text\":\"c<|im_start|>d<|im_end|>\"}\r\n";
    char *path = write_tmp("crlf.jsonl", crlf, sizeof crlf - 1);
    rg_data_opts o = opts_of(32, RG_DATA_TRAIN_ON_ALL, true);
    rg_dataset *d = load(path, &o);
    RG_REQUIRE(d, "load crlf");
    rows r = fetch(d, 0, 0, 32);
    docs ds = split_docs(&r, tok);
    RG_CHECK(ds.n == 2 && find_doc(&ds, "a b<|im_end|>") && find_doc(&ds, "c<|im_start|>d<|im_end|>"),
             "BOM/CRLF/special: %lld documents, first '%s'", (long long)ds.n, ds.n ? ds.v[0].text : "");
    const doc *dc = find_doc(&ds, "c<|im_start|>d<|im_end|>");
    int32_t im_start = rg_token_find(tok, "<|im_start|>", 12);
    RG_CHECK(dc && dc->end - dc->begin == 4 && r.ids[dc->row * 32 + dc->begin + 1] == im_start,
             "'c<|im_start|>d<|im_end|>' should be 4 tokens with the special token parsed");
    docs_free(&ds);
    rows_free(&r);
    rg_dataset_free(d);
}

// A model whose rule adds BOS (Llama 3's vocabulary): one BOS in front, also when the text starts with it.
static void test_bos_rule(void) {
    if (!fixture()) RG_SKIP("no fixture");
    rg_gguf *g = NULL;
    rg_tokenizer *t = NULL;
    rg_error err = {0};
    if (rg_gguf_open(&g, RG_SOURCE_DIR "/tests/data/tokenizer/ggml-vocab-llama-bpe.gguf", &err) ||
        rg_tokenizer_load(&t, g, &err)) {
        rg_gguf_free(g);
        RG_REQUIRE(0, "llama-bpe vocabulary: %s", err.msg);
    }
    const rg_tokenizer_info *info = rg_tokenizer_get_info(t);
    RG_REQUIRE(info->add_bos && info->bos >= 0 && info->eos >= 0, "llama-bpe: add_bos %d bos %d eos %d", info->add_bos,
               info->bos, info->eos);
    const char lines[] = "{\"text\":\"hello world\"}\n{\"text\":\"<|begin_of_text|>already\"}\n"
                         "{\"prompt\":\"p\",\"completion\":\"c\"}\n";
    char *path = write_tmp("bos.jsonl", lines, sizeof lines - 1);
    rg_data_opts o = opts_of(16, RG_DATA_TRAIN_ON_ASSISTANT, false);
    rg_dataset *d = load_with(path, t, &o);
    RG_REQUIRE(d, "load");
    rows r = fetch(d, 0, 0, 16);
    docs ds = split_docs(&r, t);
    const char *want[] = {"<|begin_of_text|>hello world<|end_of_text|>", "<|begin_of_text|>already<|end_of_text|>",
                          "<|begin_of_text|>pc<|end_of_text|>"};
    const char *want_targets[] = {"hello world<|end_of_text|>", "already<|end_of_text|>", "c<|end_of_text|>"};
    char eos_text[64];
    rg_token_to_piece(t, info->eos, true, eos_text, sizeof eos_text);
    for (int i = 0; i < 3; i++) {
        char w[128], wt[128];
        // The vocabulary's EOS text may differ from <|end_of_text|>; build the expectation from it.
        snprintf(w, sizeof w, "%.*s%s", (int)(strlen(want[i]) - strlen("<|end_of_text|>")), want[i], eos_text);
        snprintf(wt, sizeof wt, "%.*s%s", (int)(strlen(want_targets[i]) - strlen("<|end_of_text|>")), want_targets[i],
                 eos_text);
        const doc *dc = find_doc(&ds, w);
        RG_CHECK(dc, "no document '%s'", w);
        if (!dc) continue;
        RG_CHECK(r.ids[dc->row * 16 + dc->begin] == info->bos && r.ids[dc->row * 16 + dc->begin + 1] != info->bos,
                 "'%s': not exactly one BOS in front", w);
        RG_CHECK(strcmp(dc->targets, wt) == 0, "'%s': targets '%s', want '%s'", w, dc->targets, wt);
    }
    // Plain text: BOS in front of the first window only.
    const char plain[] = "one two three four five six seven eight nine ten eleven twelve";
    path = write_tmp("bos.txt", plain, sizeof plain - 1);
    rg_dataset *dp = load_with(path, t, &o);
    RG_CHECK(dp && rg_dataset_stats(dp).n_samples >= 1, "plain text with BOS");
    if (dp) {
        int64_t n = rg_dataset_n_rows(dp, 0), n_bos = 0;
        int32_t ids[16];
        for (int64_t k = 0; k < n; k++) {
            rg_dataset_row(dp, 0, 0, k, ids, NULL, NULL, NULL);
            for (int p = 0; p < 16; p++) n_bos += ids[p] == info->bos;
        }
        RG_CHECK(n_bos == 1, "%lld BOS tokens in the plain-text rows, want 1", (long long)n_bos);
    }
    rg_dataset_free(dp);
    docs_free(&ds);
    rows_free(&r);
    rg_dataset_free(d);
    rg_tokenizer_free(t);
    rg_gguf_free(g);
}

static const char chat1[] =
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
    "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n<|im_start|>user\nTell me a joke<|im_end|>\n"
    "<|im_start|>assistant\nNo.<|im_end|>\n";
static const char chat2[] =
    "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
    "<|im_start|>assistant\n4<|im_end|>\n";
static const char chat3[] =
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nOnly a question, no "
    "answer<|im_end|>\n";
static const char chat4[] =
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nCaf\xC3\xA9?<|im_end|>\n"
    "<|im_start|>assistant\nOui \xE2\x98\x95\nbien s\xC3\xBBr<|im_end|>\n";

static void test_messages_masks(void) {
    if (!fixture()) RG_SKIP("no fixture");
    for (int on = 0; on < 2; on++) {
        bool assistant = on == 1;
        rg_data_opts o = opts_of(128, assistant ? RG_DATA_TRAIN_ON_ASSISTANT : RG_DATA_TRAIN_ON_ALL, true);
        rg_dataset *d = load(DATA "chat.jsonl", &o);
        RG_REQUIRE(d, "load");
        rg_data_stats st = rg_dataset_stats(d);
        RG_CHECK(strcmp(st.format, "jsonl:messages") == 0, "format %s", st.format);
        // Without an assistant turn, conversation 3 has no target when training on assistant turns.
        RG_CHECK(st.n_samples == (assistant ? 3 : 4) && st.n_no_target == (assistant ? 1 : 0),
                 "train_on %d: %lld samples, %lld without target", on, (long long)st.n_samples,
                 (long long)st.n_no_target);
        check_rows(d, 128, "messages");
        rows r = fetch(d, 0, 0, 128);
        docs ds = split_docs(&r, tok);
        const char *texts[] = {chat1, chat2, chat3, chat4};
        const char *targets[] = {"Hello! How can I help?<|im_end|>|No.<|im_end|>", "4<|im_end|>", NULL,
                                 "Oui \xE2\x98\x95\nbien s\xC3\xBBr<|im_end|>"};
        for (int i = 0; i < 4; i++) {
            const doc *dc = find_doc(&ds, texts[i]);
            if (assistant && !targets[i]) {
                RG_CHECK(!dc, "conversation %d without an assistant turn should be dropped", i + 1);
                continue;
            }
            RG_CHECK(dc, "train_on %d: conversation %d not found as rendered", on, i + 1);
            if (!dc) continue;
            // ALL: everything after the first token (<|im_start|>).
            const char *want = assistant ? targets[i] : texts[i] + strlen("<|im_start|>");
            RG_CHECK(strcmp(dc->targets, want) == 0, "train_on %d, conversation %d: targets\n      '%s'\n    want\n      '%s'",
                     on, i + 1, dc->targets, want);
        }
        docs_free(&ds);
        rows_free(&r);
        rg_dataset_free(d);
    }
    // Without a template, a messages line is an error naming it.
    rg_data_opts o = opts_of(128, RG_DATA_TRAIN_ON_ASSISTANT, true);
    rg_dataset *d = NULL;
    rg_error err = {0};
    RG_CHECK(rg_dataset_load(&d, DATA "chat.jsonl", tok, NULL, &o, &err) == RG_ERR_FORMAT &&
                 strcmp(err.msg, DATA "chat.jsonl:1: 'messages' needs a chat template and the model has none (set "
                                  "data.chat_template to one of chatml, llama3, llama3.1, lfm2, gemma)") == 0,
             "no template: %s", err.msg);
}

static void test_prompt_completion(void) {
    if (!fixture()) RG_SKIP("no fixture");
    const char *texts[] = {"Q: What is the capital of France?\nA: Paris<|im_end|>", "Translate to French: cat\nchat<|im_end|>",
                           "2+2=4<|im_end|>"};
    const char *completions[] = {" Paris<|im_end|>", "chat<|im_end|>", "4<|im_end|>"};
    for (int on = 0; on < 3; on++) {
        rg_data_opts o = opts_of(64, (rg_data_train_on)on, false);
        rg_dataset *d = load(DATA "prompt_completion.jsonl", &o);
        RG_REQUIRE(d, "load");
        RG_CHECK(strcmp(rg_dataset_stats(d).format, "jsonl:prompt_completion") == 0, "format %s",
                 rg_dataset_stats(d).format);
        check_rows(d, 64, "prompt/completion");
        rows r = fetch(d, 0, 0, 64);
        docs ds = split_docs(&r, tok);
        RG_CHECK(ds.n == 3, "%lld documents", (long long)ds.n);
        for (int i = 0; i < 3; i++) {
            const doc *dc = find_doc(&ds, texts[i]);
            RG_CHECK(dc, "no document '%s'", texts[i]);
            if (!dc) continue;
            size_t n = 0;
            int32_t *ids = tokenize(tok, texts[i], &n);
            char *all = decode_with(tok, ids + 1, n - 1);
            const char *want = on == RG_DATA_TRAIN_ON_ALL ? all : completions[i];
            RG_CHECK(strcmp(dc->targets, want) == 0, "train_on %d: targets '%s', want '%s'", on, dc->targets, want);
            free(all);
            free(ids);
        }
        docs_free(&ds);
        rows_free(&r);
        rg_dataset_free(d);
    }
}

static void test_mixed_format(void) {
    if (!fixture()) RG_SKIP("no fixture");
    const char lines[] = "{\"text\":\"plain words\"}\n"
                         "{\"prompt\":\"P\",\"completion\":\"C\",\"meta\":{\"x\":[1,2]}}\n"
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":\"a\"}]}\n";
    char *path = write_tmp("mixed.jsonl", lines, sizeof lines - 1);
    rg_data_opts o = opts_of(64, RG_DATA_TRAIN_ON_ASSISTANT, true);
    rg_dataset *d = load(path, &o);
    RG_REQUIRE(d, "load");
    rg_data_stats st = rg_dataset_stats(d);
    RG_CHECK(strcmp(st.format, "jsonl:mixed") == 0 && st.n_samples == 3, "format %s, %lld samples", st.format,
             (long long)st.n_samples);
    RG_CHECK(st.n_train_rows == 1, "3 short samples should pack into 1 row, got %lld", (long long)st.n_train_rows);
    check_rows(d, 64, "mixed");
    rows r = fetch(d, 0, 0, 64);
    docs ds = split_docs(&r, tok);
    const doc *a = find_doc(&ds, "plain words<|im_end|>"), *b = find_doc(&ds, "PC<|im_end|>");
    RG_CHECK(a && b && strcmp(b->targets, "C<|im_end|>") == 0, "mixed documents");
    docs_free(&ds);
    rows_free(&r);
    rg_dataset_free(d);
}

// Bytes in memory load as the file of that name does (the name picks the format).
static void test_load_memory(void) {
    if (!fixture()) RG_SKIP("no fixture");
    static const char *const names[] = {"chat.jsonl", "plain.txt", "prompt_completion.jsonl", "text.jsonl"};
    rg_data_opts o = opts_of(64, RG_DATA_TRAIN_ON_ASSISTANT, true);
    o.overlong = RG_DATA_OVERLONG_TRUNCATE;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, DATA "%s", names[i]);
        size_t len = 0;
        char *bytes = read_file(path, &len);
        RG_REQUIRE(bytes, "read %s", path);
        rg_dataset *a = load(path, &o), *b = NULL;
        rg_error err = {0};
        RG_CHECK(rg_dataset_load_memory(&b, path, bytes, len, tok, &tmpl, &o, &err) == RG_OK, "%s from memory: %s",
                 names[i], err.msg);
        RG_CHECK(a && b && rg_dataset_hash(a) == rg_dataset_hash(b) &&
                     strcmp(rg_dataset_stats(a).format, rg_dataset_stats(b).format) == 0 &&
                     rg_dataset_stats(a).n_train_rows == rg_dataset_stats(b).n_train_rows,
                 "%s: the file and its bytes load differently", names[i]);
        rg_dataset_free(a);
        rg_dataset_free(b);
        free(bytes);
    }
    rg_dataset *d = NULL;
    rg_error err = {0};
    RG_CHECK(rg_dataset_load_memory(&d, "mem.jsonl", "{\"text\": 1}", 11, tok, &tmpl, &o, &err) == RG_ERR_FORMAT &&
                 !d && strstr(err.msg, "mem.jsonl:1: 'text' is a number"),
             "bad line from memory: %s", err.msg);
    RG_CHECK(rg_dataset_load_memory(&d, "mem.jsonl", NULL, 0, tok, &tmpl, &o, &err) == RG_ERR_FORMAT &&
                 strstr(err.msg, "the file is empty"),
             "no bytes: %s", err.msg);
}

// ---------------------------------------------------------------------------
// Packing

static void test_packing(void) {
    if (!fixture()) RG_SKIP("no fixture");
    const int64_t ctx = 40;
    rg_data_opts o = opts_of(ctx, RG_DATA_TRAIN_ON_ASSISTANT, true);
    rg_dataset *d = load(DATA "text.jsonl", &o);
    RG_REQUIRE(d, "load");
    rg_data_stats st = rg_dataset_stats(d);
    RG_CHECK(st.n_train_rows < N_TEXT_LINES && st.n_train_rows * ctx <= 2 * st.n_tokens + ctx,
             "%lld rows for %d short lines (%lld tokens): not packed", (long long)st.n_train_rows, N_TEXT_LINES,
             (long long)st.n_tokens);
    check_rows(d, ctx, "packed");
    rows r = fetch(d, 0, 0, ctx);
    docs ds = split_docs(&r, tok);
    check_text_docs(&ds, "packed");  // every line whole and exactly once: no document crosses rows
    // Restarts at every boundary; a document's last label is -100; first-fit leaves at most one
    // row at most half full.
    int64_t half_full = 0, multi = 0;
    for (int64_t k = 0; k < r.n; k++) {
        int64_t used = 0, n_docs = 0;
        for (int64_t i = 0; i < ds.n; i++) {
            const doc *dc = &ds.v[i];
            if (dc->row != k) continue;
            used += dc->end - dc->begin;
            n_docs++;
            RG_CHECK(r.pos[k * ctx + dc->begin] == 0 && r.seg[k * ctx + dc->begin] == n_docs - 1,
                     "row %lld doc %lld starts at pos %d seg %d", (long long)k, (long long)n_docs - 1,
                     r.pos[k * ctx + dc->begin], r.seg[k * ctx + dc->begin]);
            RG_CHECK(r.labels[k * ctx + dc->end - 1] == -100, "row %lld: label %d at a document end", (long long)k,
                     r.labels[k * ctx + dc->end - 1]);
        }
        half_full += 2 * used <= ctx;
        multi += n_docs > 1;
    }
    RG_CHECK(half_full <= 1, "%lld rows at most half full (first-fit allows 1)", (long long)half_full);
    RG_CHECK(multi > 0, "no row holds two documents");
    docs_free(&ds);
    rows_free(&r);
    rg_dataset_free(d);
    // pack = false: one document per row.
    o.pack = false;
    d = load(DATA "text.jsonl", &o);
    RG_REQUIRE(d, "load");
    r = fetch(d, 0, 0, ctx);
    ds = split_docs(&r, tok);
    RG_CHECK(r.n == N_TEXT_LINES && ds.n == N_TEXT_LINES, "pack=false: %lld rows %lld documents", (long long)r.n,
             (long long)ds.n);
    for (int64_t i = 0; i < ds.n; i++) RG_CHECK(ds.v[i].row == i && ds.v[i].begin == 0, "pack=false: row %lld", (long long)i);
    check_rows(d, ctx, "unpacked");
    docs_free(&ds);
    rows_free(&r);
    rg_dataset_free(d);
}

// ---------------------------------------------------------------------------
// Overlong samples

static void test_overlong(void) {
    if (!fixture()) RG_SKIP("no fixture");
    const char *long_text = "This line is much longer than the sixteen tokens a row holds, so it must be cut or dropped.";
    char lines[512];
    snprintf(lines, sizeof lines, "{\"text\":\"short one\"}\n{\"text\":\"%s\"}\n{\"text\":\"short two\"}\n", long_text);
    char *path = write_tmp("long.jsonl", lines, strlen(lines));
    char full[256];
    snprintf(full, sizeof full, "%s<|im_end|>", long_text);
    size_t n_full = 0;
    int32_t *ref = tokenize(tok, full, &n_full);
    const int64_t ctx = 16;
    RG_REQUIRE((int64_t)n_full > ctx + 1, "the long line has only %zu tokens", n_full);

    rg_data_opts o = opts_of(ctx, RG_DATA_TRAIN_ON_ASSISTANT, false);
    rg_dataset *d = NULL;
    rg_error err = {0};
    char want[512];
    snprintf(want, sizeof want,
             "%s:2: sample has %zu tokens, more than training.ctx 16 (set data.overlong=truncate or drop)", path, n_full);
    RG_CHECK(rg_dataset_load(&d, path, tok, &tmpl, &o, &err) == RG_ERR_FORMAT && strcmp(err.msg, want) == 0,
             "error:\n      got  '%s'\n      want '%s'", err.msg, want);

    o.overlong = RG_DATA_OVERLONG_DROP;
    d = load(path, &o);
    RG_REQUIRE(d, "load (drop)");
    rg_data_stats st = rg_dataset_stats(d);
    RG_CHECK(st.n_dropped == 1 && st.n_truncated == 0 && st.n_samples == 2, "drop: dropped %lld truncated %lld samples %lld",
             (long long)st.n_dropped, (long long)st.n_truncated, (long long)st.n_samples);
    check_rows(d, ctx, "drop");
    rg_dataset_free(d);

    o.overlong = RG_DATA_OVERLONG_TRUNCATE;
    d = load(path, &o);
    RG_REQUIRE(d, "load (truncate)");
    st = rg_dataset_stats(d);
    RG_CHECK(st.n_truncated == 1 && st.n_dropped == 0 && st.n_samples == 3, "truncate: truncated %lld dropped %lld samples %lld",
             (long long)st.n_truncated, (long long)st.n_dropped, (long long)st.n_samples);
    check_rows(d, ctx, "truncate");
    // The truncated document: the first ctx tokens, the last of which still predicts token ctx.
    rows r = fetch(d, 0, 0, ctx);
    int found = 0;
    for (int64_t k = 0; k < r.n; k++) {
        if (memcmp(r.ids + k * ctx, ref, (size_t)ctx * sizeof(int32_t)) != 0) continue;
        found++;
        bool ok = true;
        for (int64_t p = 0; p < ctx; p++) ok &= r.labels[k * ctx + p] == ref[p + 1] && r.seg[k * ctx + p] == 0;
        RG_CHECK(ok, "truncated row: labels are not the next tokens (last %d, want %d)", r.labels[k * ctx + ctx - 1],
                 ref[ctx]);
    }
    RG_CHECK(found == 1, "truncated document found %d times", found);
    rows_free(&r);
    rg_dataset_free(d);
    free(ref);
}

// ---------------------------------------------------------------------------
// Eval split

static void test_eval_split(void) {
    if (!fixture()) RG_SKIP("no fixture");
    typedef struct {
        double frac;
        int64_t n_eval;
    } split_case;
    const split_case cases[] = {{0.25, 5}, {0.01, 1}, {0.5, 10}, {0.99, 19}, {0.0, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        for (int pack = 0; pack < 2; pack++) {
            rg_data_opts o = opts_of(48, RG_DATA_TRAIN_ON_ALL, pack);
            o.eval_split = cases[c].frac;
            rg_dataset *d = load(DATA "text.jsonl", &o);
            RG_REQUIRE(d, "load");
            rg_data_stats st = rg_dataset_stats(d);
            RG_CHECK(st.n_eval_samples == cases[c].n_eval && st.n_train_samples == N_TEXT_LINES - cases[c].n_eval,
                     "eval_split %g: %lld eval %lld train, want %lld eval", cases[c].frac, (long long)st.n_eval_samples,
                     (long long)st.n_train_samples, (long long)cases[c].n_eval);
            check_rows(d, 48, "eval split");
            rows tr = fetch(d, 0, 0, 48), ev = fetch(d, 1, 0, 48), ev2 = fetch(d, 1, 7, 48);
            docs dt = split_docs(&tr, tok), de = split_docs(&ev, tok);
            RG_CHECK(dt.n == st.n_train_samples && de.n == st.n_eval_samples, "documents %lld + %lld", (long long)dt.n,
                     (long long)de.n);
            for (int64_t i = 0; i < de.n; i++)
                RG_CHECK(!find_doc(&dt, de.v[i].text), "'%s' is in both splits", de.v[i].text);
            // Together they are all lines (each once).
            docs all = {malloc((size_t)(dt.n + de.n + 1) * sizeof(doc)), 0};
            for (int64_t i = 0; i < dt.n; i++) all.v[all.n++] = dt.v[i];
            for (int64_t i = 0; i < de.n; i++) all.v[all.n++] = de.v[i];
            check_text_docs(&all, "train+eval");
            free(all.v);
            RG_CHECK(ev.n == ev2.n && (ev.n == 0 || memcmp(ev.ids, ev2.ids, (size_t)(ev.n * 48) * sizeof(int32_t)) == 0),
                     "eval rows depend on the epoch");
            docs_free(&dt), docs_free(&de);
            rows_free(&tr), rows_free(&ev), rows_free(&ev2);
            rg_dataset_free(d);
        }
    }
    // Fewer than 2 samples: no eval sample. eval_split outside [0, 1): refused.
    const char one[] = "{\"text\":\"alone\"}\n";
    char *path = write_tmp("one.jsonl", one, sizeof one - 1);
    rg_data_opts o = opts_of(16, RG_DATA_TRAIN_ON_ALL, true);
    o.eval_split = 0.5;
    rg_dataset *d = load(path, &o);
    RG_CHECK(d && rg_dataset_stats(d).n_eval_samples == 0 && rg_dataset_n_rows(d, 1) == 0, "1 sample: eval must be empty");
    rg_dataset_free(d);
    d = NULL;
    rg_error err = {0};
    o.eval_split = 1.0;
    RG_CHECK(rg_dataset_load(&d, path, tok, &tmpl, &o, &err) == RG_ERR_ARG && strstr(err.msg, "eval split 1"),
             "eval_split 1: %s", err.msg);
    // The held-out set depends on the seed.
    int differ = 0;
    char *first = NULL;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        o = opts_of(48, RG_DATA_TRAIN_ON_ALL, false);
        o.eval_split = 0.25;
        o.seed = seed;
        d = load(DATA "text.jsonl", &o);
        RG_REQUIRE(d, "load");
        int32_t ids[48];
        rg_dataset_row(d, 1, 0, 0, ids, NULL, NULL, NULL);
        char *s = decode_with(tok, ids, 8);
        if (!first) first = s;
        else differ += strcmp(first, s) != 0, free(s);
        rg_dataset_free(d);
    }
    free(first);
    RG_CHECK(differ > 0, "four seeds chose the same first eval sample");
}

// A separate eval file (rg_dataset_set_eval: train --eval-data, a job's validation_file): its rows are the eval
// split, in its own packing order and the same every epoch; the training file's samples all train; the stats
// and the hash count both; a training set that holds out its own split, or a file loaded with another ctx, is
// refused naming the eval file.
static void test_eval_file(void) {
    if (!fixture()) RG_SKIP("no fixture");
    const char ev_text[] = "{\"text\":\"held out one\"}\n{\"text\":\"held out two\"}\n{\"text\":\"held out three\"}\n";
    char *ev_path = strdup(write_tmp("eval.jsonl", ev_text, sizeof ev_text - 1));
    for (int pack = 0; pack < 2; pack++) {
        rg_data_opts o = opts_of(48, RG_DATA_TRAIN_ON_ALL, pack);
        rg_dataset *d = load(DATA "text.jsonl", &o), *e = load(ev_path, &o), *alone = load(ev_path, &o);
        RG_REQUIRE(d && e && alone, "load");
        const uint64_t h0 = rg_dataset_hash(d);
        rg_error err = {0};
        RG_REQUIRE(rg_dataset_set_eval(d, e, ev_path, &err) == RG_OK, "set_eval: %s", err.msg);
        const rg_data_stats st = rg_dataset_stats(d);
        RG_CHECK(st.n_train_samples == N_TEXT_LINES && st.n_eval_samples == 3 && st.n_samples == N_TEXT_LINES + 3,
                 "stats: %lld train %lld eval %lld in all", (long long)st.n_train_samples, (long long)st.n_eval_samples,
                 (long long)st.n_samples);
        RG_CHECK(st.n_eval_rows == rg_dataset_n_rows(d, 1) && st.n_eval_rows == (pack ? 1 : 3), "eval rows %lld",
                 (long long)st.n_eval_rows);
        RG_CHECK(rg_dataset_hash(d) != h0, "the hash does not count the eval file");
        rows ev = fetch(d, 1, 0, 48), ev5 = fetch(d, 1, 5, 48), want = fetch(alone, 0, 0, 48), tr = fetch(d, 0, 0, 48);
        int matched = 0;  // each eval row is a row of the eval file loaded alone (there in its epoch order)
        for (int64_t k = 0; k < ev.n; k++)
            for (int64_t j = 0; j < want.n; j++)
                if (!memcmp(ev.ids + k * 48, want.ids + j * 48, 48 * sizeof(int32_t)) &&
                    !memcmp(ev.labels + k * 48, want.labels + j * 48, 48 * sizeof(int32_t))) {
                    matched++;
                    break;
                }
        RG_CHECK(ev.n == want.n && matched == ev.n, "%d of %lld eval rows are the eval file's rows", matched,
                 (long long)ev.n);
        RG_CHECK(ev5.n == ev.n && !memcmp(ev.ids, ev5.ids, (size_t)(ev.n * 48) * sizeof(int32_t)),
                 "eval rows depend on the epoch");
        docs dt = split_docs(&tr, tok), de = split_docs(&ev, tok);
        check_text_docs(&dt, "the training file, all of it trained");
        RG_CHECK(de.n == 3 && find_doc(&de, "held out two<|im_end|>") && !find_doc(&dt, "held out two<|im_end|>"),
                 "eval documents %lld", (long long)de.n);
        docs_free(&dt), docs_free(&de);
        rows_free(&ev), rows_free(&ev5), rows_free(&want), rows_free(&tr);
        rg_dataset_free(d);
        rg_dataset_free(alone);
    }
    // refused: a training set with its own held-out split; an eval file of another ctx
    rg_data_opts o = opts_of(48, RG_DATA_TRAIN_ON_ALL, true);
    o.eval_split = 0.25;
    rg_dataset *d = load(DATA "text.jsonl", &o);
    o.eval_split = 0;
    rg_dataset *e = load(ev_path, &o);
    RG_REQUIRE(d && e, "load");
    rg_error err = {0};
    RG_CHECK(rg_dataset_set_eval(d, e, ev_path, &err) == RG_ERR_ARG && strstr(err.msg, ev_path) &&
                 strstr(err.msg, "training.eval_split"), "a second eval split: %s", err.msg);
    rg_dataset_free(d);
    d = load(DATA "text.jsonl", &o);
    o.ctx = 32;
    e = load(ev_path, &o);
    RG_REQUIRE(d && e, "load");
    RG_CHECK(rg_dataset_set_eval(d, e, ev_path, &err) == RG_ERR_ARG && strstr(err.msg, "ctx"), "another ctx: %s",
             err.msg);
    RG_CHECK(rg_dataset_n_rows(d, 1) == 0, "a refused eval file left rows");
    rg_dataset_free(d);
    free(ev_path);
}

// ---------------------------------------------------------------------------
// Epoch orders

static uint64_t row_print(const rg_dataset *d, int64_t epoch, int64_t k, int64_t ctx) {
    int32_t buf[4 * 64];
    rg_dataset_row(d, 0, epoch, k, buf, buf + ctx, buf + 2 * ctx, buf + 3 * ctx);
    uint64_t h = 0xCBF29CE484222325ull;
    const unsigned char *b = (const unsigned char *)buf;
    for (size_t i = 0; i < (size_t)(4 * ctx) * sizeof(int32_t); i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_epoch_orders(void) {
    if (!fixture()) RG_SKIP("no fixture");
    const int64_t ctx = 32;
    rg_data_opts o = opts_of(ctx, RG_DATA_TRAIN_ON_ALL, false);
    rg_dataset *a = load(DATA "text.jsonl", &o), *b = load(DATA "text.jsonl", &o);
    RG_REQUIRE(a && b, "load");
    int64_t n = rg_dataset_n_rows(a, 0);
    RG_REQUIRE(n == N_TEXT_LINES, "%lld rows", (long long)n);
    uint64_t order[4][N_TEXT_LINES], sorted[4][N_TEXT_LINES];
    const int64_t epochs[4] = {0, 1, 2, 0};  // epoch 0 again after others: the cache must not leak
    for (int e = 0; e < 4; e++) {
        for (int64_t k = 0; k < n; k++) order[e][k] = row_print(a, epochs[e], k, ctx);
        memcpy(sorted[e], order[e], sizeof order[e]);
        qsort(sorted[e], (size_t)n, sizeof(uint64_t), cmp_u64);
        for (int64_t k = 1; k < n; k++) RG_CHECK(sorted[e][k] != sorted[e][k - 1], "epoch %lld repeats a row", (long long)epochs[e]);
        RG_CHECK(memcmp(sorted[e], sorted[0], sizeof sorted[0]) == 0, "epoch %lld is not a permutation of epoch 0's rows",
                 (long long)epochs[e]);
        // The second load gives the same order.
        bool same = true;
        for (int64_t k = 0; k < n; k++) same &= row_print(b, epochs[e], k, ctx) == order[e][k];
        RG_CHECK(same, "epoch %lld differs between two loads", (long long)epochs[e]);
    }
    RG_CHECK(memcmp(order[0], order[1], sizeof order[0]) != 0 && memcmp(order[1], order[2], sizeof order[1]) != 0,
             "epochs 0, 1, 2 should have different orders");
    RG_CHECK(memcmp(order[0], order[3], sizeof order[0]) == 0, "epoch 0 asked twice gives two orders");
    // Out of range: an all-padding row.
    int32_t ids[32], lab[32], pos[32], seg[32];
    rg_dataset_row(a, 0, 0, n, ids, lab, pos, seg);
    bool pad = true;
    for (int p = 0; p < 32; p++) pad &= lab[p] == -100 && seg[p] == -1 && pos[p] == p;
    RG_CHECK(pad, "row n_rows should be padding");
    // The hash: equal for equal inputs, different for another seed or file.
    RG_CHECK(rg_dataset_hash(a) == rg_dataset_hash(b), "hash differs between two loads");
    o.seed = 43;
    rg_dataset *c = load(DATA "text.jsonl", &o);
    o.seed = 42;
    o.overlong = RG_DATA_OVERLONG_TRUNCATE;
    rg_dataset *e = load(DATA "chat.jsonl", &o);
    RG_CHECK(c && e && rg_dataset_hash(c) != rg_dataset_hash(a) && rg_dataset_hash(e) != rg_dataset_hash(a),
             "hash ignores the seed or the file");
    rg_dataset_free(a), rg_dataset_free(b), rg_dataset_free(c), rg_dataset_free(e);
}

// ---------------------------------------------------------------------------
// Bad files: exact messages ("%s" is the file's path)

typedef struct bad_case {
    const char *name;
    const char *content;
    size_t len;
    rg_status status;
    const char *want;
} bad_case;

#define B(n, c, s, w) {n, c, sizeof(c) - 1, s, w}

static const bad_case bad_cases[] = {
    B("json.jsonl", "{\"text\":\"ok\"}\n{\"text\": \"a\",}\n", RG_ERR_FORMAT,
      "%s:2: not valid JSON: line 1, column 14: expected a string key after ',' (trailing commas are not allowed), found '}'"),
    B("json2.jsonl", "\n\n{\"text\": \"a\" \"b\"}\n", RG_ERR_FORMAT,
      "%s:3: not valid JSON: line 1, column 14: expected ',' or '}' after an object member, found '\"'"),
    B("nofield.jsonl", "{\"txt\":\"a\"}\n", RG_ERR_FORMAT, "%s:1: no 'text', 'messages' or 'prompt'/'completion' field"),
    B("array.jsonl", "{\"text\":\"a\"}\n[1]\n", RG_ERR_FORMAT, "%s:2: expected a JSON object, found an array"),
    B("type.jsonl", "{\"text\":5}\n", RG_ERR_FORMAT, "%s:1: 'text' is a number, expected a string"),
    B("both.jsonl", "{\"text\":\"a\",\"messages\":[]}\n", RG_ERR_FORMAT,
      "%s:1: more than one of 'text', 'messages' and 'prompt'/'completion'"),
    B("prompt.jsonl", "{\"prompt\":\"a\"}\n", RG_ERR_FORMAT, "%s:1: 'prompt' without 'completion'"),
    B("compl.jsonl", "{\"completion\":\"a\"}\n", RG_ERR_FORMAT, "%s:1: 'completion' without 'prompt'"),
    B("ptype.jsonl", "{\"prompt\":\"a\",\"completion\":null}\n", RG_ERR_FORMAT, "%s:1: 'completion' is null, expected a string"),
    B("msgs.jsonl", "{\"messages\":\"hi\"}\n", RG_ERR_FORMAT,
      "%s:1: 'messages' is a string, expected an array of {role, content} objects"),
    B("msgs0.jsonl", "{\"messages\":[]}\n", RG_ERR_FORMAT, "%s:1: 'messages' is empty"),
    B("item.jsonl", "{\"messages\":[\"hi\"]}\n", RG_ERR_FORMAT,
      "%s:1: messages[0] is a string, expected an object with 'role' and 'content'"),
    B("role.jsonl", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":1,\"content\":\"b\"}]}\n", RG_ERR_FORMAT,
      "%s:1: messages[1].role is a number, expected a string"),
    B("content.jsonl", "{\"messages\":[{\"role\":\"assistant\",\"content\":null}]}\n", RG_ERR_FORMAT,
      "%s:1: messages[0].content is null, expected a string"),
    B("nocontent.jsonl", "{\"messages\":[{\"role\":\"assistant\"}]}\n", RG_ERR_FORMAT,
      "%s:1: messages[0].content is missing"),
    B("utf8.jsonl", "{\"text\":\"ok\"}\n{\"text\":\"\xFF\"}\n", RG_ERR_FORMAT, "%s:2: invalid UTF-8 at byte offset 23 (byte 0xFF)"),
    B("utf8.txt", "line one\nline two\nline \xC3(three\n", RG_ERR_FORMAT,
      "%s:3: invalid UTF-8 at byte offset 23 (byte 0xC3)"),
    B("empty.jsonl", "", RG_ERR_FORMAT, "%s: no samples: the file is empty"),
    B("empty.txt", "", RG_ERR_FORMAT, "%s: no samples: the file is empty"),
    B("blank.jsonl", "\n  \r\n\t\n", RG_ERR_FORMAT, "%s: no samples (only blank lines, or fewer than 2 tokens of text)"),
    B("notarget.jsonl", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}\n", RG_ERR_FORMAT,
      "%s: no samples: 0 longer than training.ctx 16 were dropped (data.overlong=drop), 1 had no target token"),
    B("notobject.jsonl", "{\"text\":\"a\"}\n\"just a string\"\n", RG_ERR_FORMAT, "%s:2: expected a JSON object, found a string"),
};

static void test_bad_files(void) {
    if (!fixture()) RG_SKIP("no fixture");
    for (size_t c = 0; c < sizeof bad_cases / sizeof *bad_cases; c++) {
        const bad_case *bc = &bad_cases[c];
        char path[256];
        snprintf(path, sizeof path, "%s", write_tmp(bc->name, bc->content, bc->len));
        rg_data_opts o = opts_of(16, RG_DATA_TRAIN_ON_ASSISTANT, true);
        rg_dataset *d = NULL;
        rg_error err = {0};
        rg_status st = rg_dataset_load(&d, path, tok, &tmpl, &o, &err);
        char want[512];
        snprintf(want, sizeof want, bc->want, path);
        RG_CHECK(st == bc->status && d == NULL && strcmp(err.msg, want) == 0, "%s (status %d):\n      got  '%s'\n      want '%s'",
                 bc->name, (int)st, err.msg, want);
        rg_dataset_free(d);
    }
    // A missing file and bad options.
    rg_data_opts o = opts_of(16, RG_DATA_TRAIN_ON_ASSISTANT, true);
    rg_dataset *d = NULL;
    rg_error err = {0};
    RG_CHECK(rg_dataset_load(&d, "/nonexistent/x.jsonl", tok, &tmpl, &o, &err) == RG_ERR_IO && strstr(err.msg, "x.jsonl"),
             "missing file: %s", err.msg);
    o.ctx = 0;
    RG_CHECK(rg_dataset_load(&d, DATA "text.jsonl", tok, &tmpl, &o, &err) == RG_ERR_ARG && strstr(err.msg, "training.ctx 0"),
             "ctx 0: %s", err.msg);
    o = opts_of(16, (rg_data_train_on)7, true);
    RG_CHECK(rg_dataset_load(&d, DATA "text.jsonl", tok, &tmpl, &o, &err) == RG_ERR_ARG, "train_on 7 accepted");
}

// ---------------------------------------------------------------------------
// Tool-calling chats (OpenAI's fine-tuning format: "tools", tool_calls, 'tool' messages, weight)

#define TOOLS_JSON                                                                                             \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\",\"parameters\":" \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]"
#define CALL_JSON                                                                                             \
    "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": " \
    "\\\"Paris\\\"}\"}}]"
// A conversation with one call: system, user, assistant (calls; WEIGHT0 may add "weight":0), tool, assistant.
#define TOOL_CHAT(WEIGHT0)                                                                                        \
    "{\"tools\":" TOOLS_JSON ",\"messages\":[{\"role\":\"system\",\"content\":\"Sys\"},{\"role\":\"user\","     \
    "\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":null," WEIGHT0 "\"tool_calls\":" CALL_JSON \
    "},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"name\":\"get_weather\",\"content\":\"{\\\"temp\\\": 21}\"},"   \
    "{\"role\":\"assistant\",\"content\":\"It is 21 C.\",\"weight\":1}]}"

// The dataset of one JSONL text in memory (named "tools.jsonl"), or NULL with the error printed.
static rg_dataset *load_text(const char *jsonl, const rg_chat_template *t, rg_data_train_on on) {
    rg_data_opts o = opts_of(4096, on, false);
    rg_dataset *d = NULL;
    rg_error err = {0};
    if (rg_dataset_load_memory(&d, "tools.jsonl", jsonl, strlen(jsonl), tok, t, &o, &err)) printf("    load: %s\n", err.msg);
    return d;
}

// The messages and tools of a line, as a caller of rg_chat_render writes them, rendered.
static bool render_line(const char *line, const rg_chat_template *t, rg_chat_rendered *r) {
    rg_json_doc *doc = NULL;
    rg_error err = {0};
    if (rg_json_parse(&doc, line, strlen(line), NULL, &err)) return false;
    const rg_json *root = rg_json_root(doc), *msgs = rg_json_get(root, "messages");
    size_t n = rg_json_len(msgs);
    rg_chat_message m[8] = {{0}};
    for (size_t i = 0; i < n && i < 8; i++) {
        const rg_json *it = rg_json_at(msgs, i);
        m[i].role = rg_json_str(rg_json_get(it, "role"), &m[i].role_len);
        m[i].content = rg_json_str(rg_json_get(it, "content"), &m[i].content_len);
        if (!m[i].content) m[i].content = "";
        m[i].tool_calls = rg_json_get(it, "tool_calls");
        m[i].name = rg_json_str(rg_json_get(it, "name"), &m[i].name_len);
    }
    rg_chat_options opt = {.tools = rg_json_get(root, "tools")};
    rg_status st = rg_chat_render(t, m, n, &opt, r, &err);
    if (st) printf("    render: %s\n", err.msg);
    rg_json_free(doc);
    return st == RG_OK;
}

// Loads line (train_on assistant) and checks: one sample whose ids are the tokenization of
// rg_chat_render's text and whose targets are want_targets.
static void check_tool_chat(const char *line, const rg_chat_template *t, const char *want_targets, const char *what) {
    rg_dataset *d = load_text(line, t, RG_DATA_TRAIN_ON_ASSISTANT);
    RG_CHECK(d, "%s: load", what);
    rg_chat_rendered r = {0};
    bool rendered = render_line(line, t, &r);
    RG_CHECK(rendered, "%s: render", what);
    if (!d || !rendered) {
        rg_dataset_free(d);
        rg_chat_rendered_free(&r);
        return;
    }
    RG_CHECK(rg_dataset_stats(d).n_samples == 1, "%s: %lld samples", what, (long long)rg_dataset_stats(d).n_samples);
    check_rows(d, 4096, what);
    rows rw = fetch(d, 0, 0, 4096);
    docs ds = split_docs(&rw, tok);
    size_t n_ref = 0;
    int32_t *ref = tokenize(tok, r.text, &n_ref);
    bool same = ds.n == 1 && ds.v[0].end - ds.v[0].begin == (int64_t)n_ref &&
                memcmp(rw.ids + ds.v[0].begin, ref, n_ref * sizeof *ref) == 0;
    RG_CHECK(same, "%s: the sample's %lld tokens are not the %zu tokens of the rendered text\n      '%s'", what,
             ds.n ? (long long)(ds.v[0].end - ds.v[0].begin) : -1LL, n_ref, r.text);
    if (ds.n == 1) {
        const char *tg = ds.v[0].targets;
        RG_CHECK(strcmp(tg, want_targets) == 0, "%s: targets\n      '%s'\n    want\n      '%s'", what, tg, want_targets);
        RG_CHECK(!strstr(tg, "tool_response") && !strstr(tg, "get_weather\", \"description") && !strstr(tg, "Sys") &&
                     !strstr(tg, "temp"),
                 "%s: tool results or the tools block are targets: '%s'", what, tg);
    }
    free(ref);
    docs_free(&ds);
    rows_free(&rw);
    rg_chat_rendered_free(&r);
    rg_dataset_free(d);
}

static void test_tool_calls_chatml(void) {
    if (!fixture()) RG_SKIP("no fixture");
    check_tool_chat(TOOL_CHAT(""), &tmpl,
                    "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
                    "<|im_end|>|It is 21 C.<|im_end|>",
                    "chatml tool chat");
    // Content next to the calls is a target too, and content may be absent.
    const char with_content[] =
        "{\"tools\":" TOOLS_JSON ",\"messages\":[{\"role\":\"user\",\"content\":\"Paris?\"},{\"role\":\"assistant\","
        "\"content\":\"Checking.\",\"tool_calls\":" CALL_JSON "},{\"role\":\"tool\",\"content\":\"sunny\"},"
        "{\"role\":\"assistant\",\"content\":\"Sunny.\"}]}";
    check_tool_chat(with_content, &tmpl,
                    "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                    "</tool_call><|im_end|>|Sunny.<|im_end|>",
                    "chatml content and calls");
    const char no_content[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Paris?\"},{\"role\":\"assistant\","
                              "\"tool_calls\":" CALL_JSON "}]}";
    check_tool_chat(no_content, &tmpl,
                    "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
                    "<|im_end|>",
                    "chatml calls without content or tools");
}

static void test_tool_calls_lfm2(void) {
    if (!fixture()) RG_SKIP("no fixture");
    rg_chat_template lfm2 = {0};
    rg_error err = {0};
    RG_REQUIRE(rg_chat_template_builtin(&lfm2, "lfm2", NULL, &err) == RG_OK, "lfm2: %s", err.msg);
    // LFM2 writes the calls before the content: they are targets all the same.
    check_tool_chat(TOOL_CHAT(""), &lfm2,
                    "<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|><|im_end|>|It is 21 C.<|im_end|>",
                    "lfm2 tool chat");
    rg_chat_template_free(&lfm2);
}

// weight 0: that assistant message is not a target (with train_on assistant and all).
static void test_tool_weight(void) {
    if (!fixture()) RG_SKIP("no fixture");
    check_tool_chat(TOOL_CHAT("\"weight\":0,"), &tmpl, "It is 21 C.<|im_end|>", "weight 0");
    rg_dataset *d = load_text(TOOL_CHAT("\"weight\":0,"), &tmpl, RG_DATA_TRAIN_ON_ALL);
    RG_REQUIRE(d, "weight 0, train_on all");
    rows rw = fetch(d, 0, 0, 4096);
    docs ds = split_docs(&rw, tok);
    RG_CHECK(ds.n == 1 && !strstr(ds.v[0].targets, "\"arguments\": {\"city\"") &&
                 strstr(ds.v[0].targets, "Weather in Paris?<|im_end|>\n<|im_start|>assistant|\n<|im_start|>user") &&
                 strstr(ds.v[0].targets, "<tool_response>") &&
                 strstr(ds.v[0].targets, "It is 21 C.<|im_end|>"),
             "train_on all: the weight-0 message should be the only text left out: '%s'", ds.n ? ds.v[0].targets : "");
    docs_free(&ds);
    rows_free(&rw);
    rg_dataset_free(d);
    // Every assistant message at weight 0: no target, so no sample.
    const char none[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\","
                        "\"weight\":0}]}\n{\"text\":\"x y\"}";
    d = load_text(none, &tmpl, RG_DATA_TRAIN_ON_ASSISTANT);
    RG_CHECK(d && rg_dataset_stats(d).n_no_target == 1 && rg_dataset_stats(d).n_samples == 1, "all weights 0");
    rg_dataset_free(d);
}

// A line the loader refuses at line 2 (after a good line) and rg_data_check_line refuses with
// the same status and message, which contains want.
typedef struct tool_bad {
    const char *line, *want;
} tool_bad;

#define USER_MSG "{\"role\":\"user\",\"content\":\"Paris?\"}"
#define ASSISTANT_CALLS(CALLS) "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":" CALLS "}"
#define CHAT3(M) "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"}," USER_MSG "," M "]}"
#define FN_CALL(FN) "[{\"id\":\"c1\",\"type\":\"function\",\"function\":" FN "}]"

static const tool_bad tool_bad_cases[] = {
    // content as text parts: only text parts, each text a string
    {CHAT3("{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_url\","
           "\"image_url\":{\"url\":\"x\"}}]}"),
     "tools.jsonl:2: messages[2].content[1] is a part of type 'image_url'; only text parts can be trained on"},
    {CHAT3("{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":5}]}"),
     "tools.jsonl:2: messages[2].content[0].text is a number, expected a string"},
    {CHAT3("{\"role\":\"assistant\",\"content\":[\"a\"]}"),
     "tools.jsonl:2: messages[2].content[0] is a part of type '(none)'; only text parts can be trained on"},
    {CHAT3(ASSISTANT_CALLS("{\"id\":\"c1\"}")),
     "tools.jsonl:2: messages[2].tool_calls is an object, expected an array of {\"type\": \"function\", \"function\": "
     "{\"name\", \"arguments\"}} objects"},
    {CHAT3(ASSISTANT_CALLS("[1]")), "tools.jsonl:2: messages[2].tool_calls[0] is a number, expected an object"},
    {CHAT3(ASSISTANT_CALLS("[{\"id\":\"c1\",\"type\":\"function\"}]")),
     "tools.jsonl:2: messages[2].tool_calls[0].function is missing"},
    {CHAT3(ASSISTANT_CALLS("[{\"type\":\"function\",\"function\":\"f\"}]")),
     "tools.jsonl:2: messages[2].tool_calls[0].function is a string, expected an object"},
    {CHAT3(ASSISTANT_CALLS("[{\"type\":\"code\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]")),
     "tools.jsonl:2: messages[2].tool_calls[0].type must be \"function\""},
    {CHAT3(ASSISTANT_CALLS(FN_CALL("{\"arguments\":\"{}\"}"))),
     "tools.jsonl:2: messages[2].tool_calls[0].function.name is missing"},
    {CHAT3(ASSISTANT_CALLS(FN_CALL("{\"name\":7,\"arguments\":\"{}\"}"))),
     "tools.jsonl:2: messages[2].tool_calls[0].function.name is a number, expected a string"},
    {CHAT3(ASSISTANT_CALLS(FN_CALL("{\"name\":\"\",\"arguments\":\"{}\"}"))),
     "tools.jsonl:2: messages[2].tool_calls[0].function.name is empty"},
    {CHAT3(ASSISTANT_CALLS(FN_CALL("{\"name\":\"f\"}"))),
     "tools.jsonl:2: messages[2].tool_calls[0].function.arguments is missing"},
    {CHAT3(ASSISTANT_CALLS(FN_CALL("{\"name\":\"f\",\"arguments\":\"{city: Paris}\"}"))),
     "tools.jsonl:2: messages[2].tool_calls[0].function.arguments is not valid JSON text: "},
    {CHAT3(ASSISTANT_CALLS(FN_CALL("{\"name\":\"f\",\"arguments\":\"[1, 2]\"}"))),
     "tools.jsonl:2: messages[2].tool_calls[0].function.arguments is JSON text of an array, expected a JSON object"},
    {CHAT3(ASSISTANT_CALLS(FN_CALL("{\"name\":\"f\",\"arguments\":5}"))),
     "tools.jsonl:2: messages[2].tool_calls[0].function.arguments is a number, expected a JSON object"},
    {CHAT3(ASSISTANT_CALLS("[{\"id\":3,\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]")),
     "tools.jsonl:2: messages[2].tool_calls[0].id is a number, expected a string"},
    {CHAT3("{\"role\":\"assistant\"}"), "tools.jsonl:2: messages[2].content is missing"},
    {CHAT3("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}"),
     "tools.jsonl:2: messages[2].content is null, expected a string"},
    {CHAT3("{\"role\":\"assistant\",\"content\":\"a\",\"weight\":2}"),
     "tools.jsonl:2: messages[2].weight is 2, expected 0 or 1"},
    {CHAT3("{\"role\":\"assistant\",\"content\":\"a\",\"weight\":true}"),
     "tools.jsonl:2: messages[2].weight is a boolean, expected 0 or 1"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"weight\":0}]}",
     "tools.jsonl:2: messages[0].weight is only for assistant messages"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"tool_calls\":" CALL_JSON "}]}",
     "tools.jsonl:2: messages[0].tool_calls is only for assistant messages, not 'user'"},
    {CHAT3("{\"role\":\"assistant\",\"content\":\"a\",\"function_call\":{\"name\":\"f\",\"arguments\":\"{}\"}}"),
     "tools.jsonl:2: messages[2].function_call is the legacy function-calling format: use 'tool_calls'"},
    {CHAT3("{\"role\":\"function\",\"name\":\"f\",\"content\":\"r\"}"),
     "tools.jsonl:2: messages[2].role 'function' is the legacy function-calling format: use 'tool' messages"},
    {"{\"functions\":[{\"name\":\"f\"}],\"messages\":[" USER_MSG "]}",
     "tools.jsonl:2: 'functions' is the legacy function-calling format: give 'tools' (and 'tool_calls' in assistant "
     "messages)"},
    {"{\"tools\":{\"type\":\"function\"},\"messages\":[" USER_MSG "]}",
     "tools.jsonl:2: 'tools' is an object, expected an array of {\"type\": \"function\", \"function\": {\"name\", "
     "...}} objects"},
    {"{\"tools\":[\"f\"],\"messages\":[" USER_MSG "]}", "tools.jsonl:2: tools[0] is a string, expected an object"},
    {"{\"tools\":[{\"function\":{\"name\":\"f\"}}],\"messages\":[" USER_MSG "]}",
     "tools.jsonl:2: tools[0].type must be \"function\""},
    {"{\"tools\":[{\"type\":\"function\",\"function\":{\"description\":\"d\"}}],\"messages\":[" USER_MSG "]}",
     "tools.jsonl:2: tools[0].function.name is missing"},
    {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}],\"messages\":[" USER_MSG "]}",
     "tools.jsonl:2: tools[0].function.parameters is an array, expected an object"},
    {"{\"tools\":" TOOLS_JSON ",\"text\":\"a\"}", "tools.jsonl:2: 'tools' is only read with 'messages'"},
    {CHAT3("{\"role\":\"tool\",\"tool_call_id\":\"c1\"}"), "tools.jsonl:2: messages[2].content is missing"},
    {CHAT3("{\"role\":\"tool\",\"tool_call_id\":5,\"content\":\"r\"}"),
     "tools.jsonl:2: messages[2].tool_call_id is a number, expected a string"},
    {CHAT3("{\"role\":\"tool\",\"name\":[],\"content\":\"r\"}"),
     "tools.jsonl:2: messages[2].name is an array, expected a string"},
};

// OpenAI's content as an array of text parts trains as the parts joined: the same rows as the joined string.
static void test_content_parts(void) {
    if (!fixture()) RG_SKIP("no fixture");
    static const char parts[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What is \"},"
        "{\"type\":\"text\",\"text\":\"two plus two?\"}]},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
        "\"text\":\"Four.\"}]}]}\n";
    static const char joined[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"What is two plus two?\"},{\"role\":\"assistant\","
        "\"content\":\"Four.\"}]}\n";
    rg_data_opts o = opts_of(64, RG_DATA_TRAIN_ON_ASSISTANT, true);
    rg_dataset *a = NULL, *b = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_dataset_load_memory(&a, "parts.jsonl", parts, sizeof parts - 1, tok, &tmpl, &o, &err) == RG_OK,
               "parts: %s", err.msg);
    RG_REQUIRE(rg_dataset_load_memory(&b, "joined.jsonl", joined, sizeof joined - 1, tok, &tmpl, &o, &err) == RG_OK,
               "joined: %s", err.msg);
    rows ra = fetch(a, 0, 0, 64), rb = fetch(b, 0, 0, 64);
    RG_CHECK(ra.n == 1 && rb.n == 1 && !memcmp(ra.ids, rb.ids, 64 * sizeof(int32_t)) &&
                 !memcmp(ra.labels, rb.labels, 64 * sizeof(int32_t)),
             "text parts do not train as their joined string");
    rows_free(&ra), rows_free(&rb);
    rg_dataset_free(a), rg_dataset_free(b);
}

static void test_tool_bad_lines(void) {
    if (!fixture()) RG_SKIP("no fixture");
    rg_data_opts o = opts_of(4096, RG_DATA_TRAIN_ON_ASSISTANT, true);
    for (size_t c = 0; c < sizeof tool_bad_cases / sizeof *tool_bad_cases; c++) {
        const tool_bad *tb = &tool_bad_cases[c];
        char file[2048];
        int len = snprintf(file, sizeof file, "{\"text\":\"good\"}\n%s\n", tb->line);
        RG_REQUIRE(len > 0 && (size_t)len < sizeof file, "case %zu too long", c);
        rg_dataset *d = NULL;
        rg_error le = {0}, ce = {0};
        rg_status ls = rg_dataset_load_memory(&d, "tools.jsonl", file, (size_t)len, tok, &tmpl, &o, &le);
        rg_status cs = rg_data_check_line(&tmpl, "tools.jsonl", 2, tb->line, strlen(tb->line), &ce);
        RG_CHECK(ls == RG_ERR_FORMAT && !d && strstr(le.msg, tb->want) == le.msg,
                 "case %zu: loader (status %d)\n      got  '%s'\n      want '%s'", c, (int)ls, le.msg, tb->want);
        RG_CHECK(cs == ls && strcmp(ce.msg, le.msg) == 0, "case %zu: check_line (status %d) '%s', loader '%s'", c,
                 (int)cs, ce.msg, le.msg);
        rg_dataset_free(d);
    }
}

// rg_data_check_line agrees with the loader: good lines (all formats), blank lines, no template,
// and each line of the bad files whose error names a line.
static void test_check_line(void) {
    if (!fixture()) RG_SKIP("no fixture");
    rg_error err = {0};
    const char *good[] = {TOOL_CHAT(""),
                          TOOL_CHAT("\"weight\":0,"),
                          "{\"text\":\"a\"}",
                          "{\"prompt\":\"p\",\"completion\":\"c\"}",
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tools\":null}",
                          "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"u\"}]}]}",
                          "",
                          "  \t\r",
                          "\xEF\xBB\xBF{\"text\":\"bom\"}"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        RG_CHECK(rg_data_check_line(&tmpl, "x.jsonl", 1, good[i], strlen(good[i]), &err) == RG_OK, "good line %zu: %s",
                 i, err.msg);
    const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}]}";
    RG_CHECK(rg_data_check_line(NULL, DATA "chat.jsonl", 1, chat, strlen(chat), &err) == RG_ERR_FORMAT &&
                 strcmp(err.msg, DATA "chat.jsonl:1: 'messages' needs a chat template and the model has none (set "
                                  "data.chat_template to one of chatml, llama3, llama3.1, lfm2, gemma)") == 0,
             "no template: %s", err.msg);
    const char *text = "{\"text\":\"a\"}";
    RG_CHECK(rg_data_check_line(NULL, "x.jsonl", 1, text, strlen(text), &err) == RG_OK, "no template, text: %s", err.msg);
    RG_CHECK(rg_data_check_line(&tmpl, "x.jsonl", 4, "{\"text\":\"\xFF\"}", 12, &err) == RG_ERR_FORMAT &&
                 strcmp(err.msg, "x.jsonl:4: invalid UTF-8 at byte 9 of the line (byte 0xFF)") == 0,
             "bad UTF-8: %s", err.msg);
    // The tools with a template that cannot write them: the renderer's refusal, named by line.
    rg_chat_template llama = {0};
    RG_REQUIRE(rg_chat_template_builtin(&llama, "llama3", NULL, &err) == RG_OK, "llama3: %s", err.msg);
    const char *tc = TOOL_CHAT("");
    rg_dataset *d = NULL;
    rg_data_opts o = opts_of(4096, RG_DATA_TRAIN_ON_ASSISTANT, true);
    rg_error le = {0};
    rg_status ls = rg_dataset_load_memory(&d, "x.jsonl", tc, strlen(tc), tok, &llama, &o, &le);
    rg_status cs = rg_data_check_line(&llama, "x.jsonl", 1, tc, strlen(tc), &err);
    RG_CHECK(ls == RG_ERR_UNSUPPORTED && cs == ls && strcmp(le.msg, err.msg) == 0 &&
                 strstr(le.msg, "x.jsonl:1: chat: tools and tool calls are not supported with llama3"),
             "llama3 tools: loader '%s', check_line '%s'", le.msg, err.msg);
    rg_dataset_free(d);
    rg_chat_template_free(&llama);
    // The bad files: the first line check_line refuses gives the loader's message.
    for (size_t c = 0; c < sizeof bad_cases / sizeof *bad_cases; c++) {
        const bad_case *bc = &bad_cases[c];
        size_t n = strlen(bc->name);
        if (n < 6 || strcmp(bc->name + n - 6, ".jsonl") != 0 || strstr(bc->want, "invalid UTF-8")) continue;
        char want[512], path[300];
        snprintf(path, sizeof path, "%s/%s", tmp_dir, bc->name);
        snprintf(want, sizeof want, bc->want, path);
        rg_status st = RG_OK;
        int64_t line = 1;
        for (size_t at = 0; at < bc->len && !st; line++) {
            const char *nl = memchr(bc->content + at, '\n', bc->len - at);
            size_t end = nl ? (size_t)(nl - bc->content) : bc->len;
            st = rg_data_check_line(&tmpl, path, line, bc->content + at, end - at, &err);
            at = end + 1;
        }
        size_t pl = strlen(path);
        bool per_line = strncmp(want, path, pl) == 0 && want[pl] == ':' && want[pl + 1] >= '0' && want[pl + 1] <= '9';
        RG_CHECK(per_line ? st == bc->status && strcmp(err.msg, want) == 0 : st == RG_OK,
                 "%s: check_line (status %d) '%s', loader '%s'", bc->name, (int)st, st ? err.msg : "", want);
    }
}

// A larger generated file: the invariants and totals hold for every mode; first-fit stays fast.
static void test_generated_corpus(void) {
    if (!fixture()) RG_SKIP("no fixture");
    const char *q = getenv("RG_TEST_QUICK");
    int n_lines = q && *q && strcmp(q, "0") ? 300 : 3000;
    size_t cap = (size_t)n_lines * 200, len = 0;
    char *buf = malloc(cap);
    uint32_t x = 12345;
    for (int i = 0; i < n_lines; i++) {
        x = x * 1664525u + 1013904223u;
        int words = 1 + (int)(x >> 24) % 24;
        int kind = i % 3;
        len += (size_t)sprintf(buf + len, kind == 0 ? "{\"text\":\"" : kind == 1 ? "{\"prompt\":\"q%d\",\"completion\":\""
                                                                           : "{\"messages\":[{\"role\":\"user\",\"content\":\"u%d\"},{\"role\":\"assistant\",\"content\":\"",
                               i);
        for (int w = 0; w < words; w++) {
            x = x * 1664525u + 1013904223u;
            len += (size_t)sprintf(buf + len, "%sw%u", w ? " " : "", (x >> 20) % 97);
        }
        len += (size_t)sprintf(buf + len, kind == 2 ? "\"}]}\n" : "\"}\n");
    }
    char *path = write_tmp("gen.jsonl", buf, len);
    free(buf);
    for (int mode = 0; mode < 8; mode++) {
        rg_data_opts o = opts_of(mode & 4 ? 24 : 64, mode & 1 ? RG_DATA_TRAIN_ON_ASSISTANT : RG_DATA_TRAIN_ON_ALL, mode & 2);
        o.overlong = mode & 4 ? RG_DATA_OVERLONG_TRUNCATE : RG_DATA_OVERLONG_DROP;
        o.eval_split = 0.1;
        rg_dataset *d = load(path, &o);
        RG_REQUIRE(d, "load mode %d", mode);
        rg_data_stats st = rg_dataset_stats(d);
        RG_CHECK(strcmp(st.format, "jsonl:mixed") == 0, "format %s", st.format);
        RG_CHECK(st.n_samples + st.n_dropped + st.n_no_target == n_lines, "mode %d: %lld + %lld + %lld != %d", mode,
                 (long long)st.n_samples, (long long)st.n_dropped, (long long)st.n_no_target, n_lines);
        char what[32];
        snprintf(what, sizeof what, "generated mode %d", mode);
        check_rows(d, o.ctx, what);
        rg_dataset_free(d);
    }
}

static const rg_test_case cases[] = {
    RG_TEST(test_plain_text),
    RG_TEST(test_text_lines),
    RG_TEST(test_bos_rule),
    RG_TEST(test_messages_masks),
    RG_TEST(test_prompt_completion),
    RG_TEST(test_mixed_format),
    RG_TEST(test_load_memory),
    RG_TEST(test_packing),
    RG_TEST(test_overlong),
    RG_TEST(test_eval_split),
    RG_TEST(test_eval_file),
    RG_TEST(test_content_parts),
    RG_TEST(test_epoch_orders),
    RG_TEST(test_bad_files),
    RG_TEST(test_tool_calls_chatml),
    RG_TEST(test_tool_calls_lfm2),
    RG_TEST(test_tool_weight),
    RG_TEST(test_tool_bad_lines),
    RG_TEST(test_check_line),
    RG_TEST(test_generated_corpus),
    {0},
};

static void remove_tmp(void) {
    if (!tmp_dir[0]) return;
    static const char *const names[] = {"crlf.jsonl", "bos.jsonl", "bos.txt",  "mixed.jsonl", "long.jsonl",
                                        "one.jsonl",  "gen.jsonl", NULL};
    char path[256];
    for (int i = 0; names[i]; i++) snprintf(path, sizeof path, "%s/%s", tmp_dir, names[i]), unlink(path);
    for (size_t c = 0; c < sizeof bad_cases / sizeof *bad_cases; c++)
        snprintf(path, sizeof path, "%s/%s", tmp_dir, bad_cases[c].name), unlink(path);
    rmdir(tmp_dir);
}

int main(int argc, char **argv) {
    int rc = rg_test_run(argc, argv, cases);
    remove_tmp();
    if (tok) rg_chat_template_free(&tmpl);
    rg_tokenizer_free(tok);
    rg_gguf_free(tiny_gguf);
    return rc;
}
