// fuzz_jsonl.c - libFuzzer target for the training data reader (src/train/data.c, and through it
// src/base/json.c and the chat renderer): JSON Lines with "text", "messages" (OpenAI's fine-tuning
// format with tools, tool_calls and weight) and "prompt"/"completion" samples, and plain text, loaded from memory with
// rg_dataset_load_memory. Two real model setups, loaded once from the repository: Qwen2's
// vocabulary with its own ChatML template (no BOS), and Llama 3's vocabulary (add_bos) with the
// Llama 3.1 template of fuzz/templates/.
//
// Input: a control byte, then (row mode only) two option bytes, then the file's bytes.
//   bit 0 = 0  exact mode: ctx large enough for any sample, no packing, no eval split. Every
//              sample is then one row, and the rows must hold exactly the documents data.h
//              describes, each line's own: its tokens decoded, and its target tokens decoded,
//              compared as multisets (the train order is shuffled).
//     bits 1-2 train_on (all, assistant, completion, assistant), bit 3 plain text (the file is
//              "fuzz.txt" instead of "fuzz.jsonl"), bit 4 the Llama 3 setup.
//   bit 0 = 1  row mode: small ctx, packing, overlong rules and eval splits; the rows must keep
//              the invariants of rg_dataset_row and add up to the stats.
//     bits 1-2 train_on, bit 3 plain text, bit 4 pack, bits 5-6 overlong (truncate, drop,
//              error, truncate), bit 7 an eval split; option byte 1: ctx (1 + b % 64, or
//              128 .. 4096 for b >= 0xF0); option byte 2: bit 0 load twice and compare, bit 1
//              the Llama 3 setup, bits 2-3 the eval fraction, bits 4-7 the seed.
//
// Errors must be RG_ERR_FORMAT (or RG_ERR_UNSUPPORTED from the template), name the file, and
// name a line of the file that exists.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "support.h"
#include "text/chat.h"
#include "train/data.h"

enum { LABEL_IGNORE = -100 };

typedef struct setup {
    rg_tokenizer *tok;
    rg_chat_template tmpl;
} setup;
static setup setups[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    rg_error err = {0};
    setups[0].tok = fz_load_vocab("qwen2");
    if (rg_chat_template_from_tokenizer(&setups[0].tmpl, setups[0].tok, &err)) {
        fprintf(stderr, "fuzz_jsonl: qwen2 template: %s\n", err.msg);
        exit(1);
    }
    setups[1].tok = fz_load_vocab("llama-bpe");
    const rg_tokenizer_info *in = rg_tokenizer_get_info(setups[1].tok);
    size_t len;
    char *text = fz_read_source_file("fuzz/templates/llama3.1.jinja", &len);
    if (rg_chat_template_parse(&setups[1].tmpl, text, len, rg_token_text(setups[1].tok, in->bos, NULL), &err)) {
        fprintf(stderr, "fuzz_jsonl: llama3.1 template: %s\n", err.msg);
        exit(1);
    }
    free(text);
    return 0;
}

// ---------------------------------------------------------------------------
// Growing byte strings and the documents made of them

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->p = realloc(b->p, b->cap);
        FZ_CHECK(b->p, "out of memory");
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void put_piece(buf *b, const rg_tokenizer *tok, int32_t id) {
    char piece[1024];
    size_t n = rg_token_to_piece(tok, id, true, piece, sizeof piece);
    FZ_CHECK(n < sizeof piece, "token %d: piece of %zu bytes", id, n);
    put(b, piece, n);
}

// A document as decoded text: all its tokens, and its target tokens (those a label predicts).
typedef struct doc {
    uint64_t hash;  // of both texts; documents are compared as a multiset of these
    size_t all_len, target_len;
} doc;

typedef struct docs {
    doc *v;
    size_t n, cap;
} docs;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

static void add_doc(docs *ds, const buf *all, const buf *target) {
    if (ds->n == ds->cap) {
        ds->cap = ds->cap ? 2 * ds->cap : 16;
        ds->v = realloc(ds->v, ds->cap * sizeof *ds->v);
        FZ_CHECK(ds->v, "out of memory");
    }
    uint64_t h = fnv(0xCBF29CE484222325ull, all->p, all->n);
    h = fnv(h ^ 0xFF, target->p, target->n);
    ds->v[ds->n++] = (doc){h, all->n, target->n};
}

static int cmp_doc(const void *a, const void *b) {
    const doc *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    if (x->all_len != y->all_len) return x->all_len < y->all_len ? -1 : 1;
    return x->target_len < y->target_len ? -1 : x->target_len > y->target_len;
}

// ---------------------------------------------------------------------------
// What each line must become (data.h), computed from the line alone

typedef struct expect {
    const rg_tokenizer *tok;
    const rg_tokenizer_info *info;
    const rg_chat_template *tmpl;
    rg_data_train_on train_on;
    docs want;
    int64_t n_no_target;
    int kinds;  // 1 text, 2 messages, 4 prompt/completion
} expect;

typedef struct idseq {
    int32_t *id;
    uint8_t *target;
    size_t n, cap;
} idseq;

static void push_ids(idseq *s, const rg_tokenizer *tok, const char *text, size_t len, bool target) {
    int64_t n = rg_tokenize(tok, text, len, false, true, NULL, 0);
    FZ_CHECK(n >= 0, "rg_tokenize of %zu bytes failed", len);
    if (n == 0) return;
    if (s->n + (size_t)n > s->cap) {
        s->cap = 2 * (s->n + (size_t)n) + 4;
        s->id = realloc(s->id, s->cap * sizeof *s->id);
        s->target = realloc(s->target, s->cap);
        FZ_CHECK(s->id && s->target, "out of memory");
    }
    rg_tokenize(tok, text, len, false, true, s->id + s->n, n);
    memset(s->target + s->n, target, (size_t)n);
    s->n += (size_t)n;
}

static void push_id(idseq *s, int32_t id, bool target, bool front) {
    if (s->n + 1 > s->cap) {
        s->cap = 2 * s->n + 4;
        s->id = realloc(s->id, s->cap * sizeof *s->id);
        s->target = realloc(s->target, s->cap);
        FZ_CHECK(s->id && s->target, "out of memory");
    }
    if (front) {
        memmove(s->id + 1, s->id, s->n * sizeof *s->id);
        memmove(s->target + 1, s->target, s->n);
    }
    s->id[front ? 0 : s->n] = id;
    s->target[front ? 0 : s->n] = target;
    s->n++;
}

// BOS in front unless the document already starts with it; EOS behind unless it ends with it.
static void bos_eos(expect *E, idseq *s, bool eos) {
    if (E->info->add_bos && E->info->bos >= 0 && !(s->n > 0 && s->id[0] == E->info->bos))
        push_id(s, E->info->bos, false, true);
    if (eos && E->info->eos >= 0 && !(s->n > 0 && s->id[s->n - 1] == E->info->eos)) push_id(s, E->info->eos, true, false);
}

// A sample of ids: its decoded texts, or a count of samples without a target (the first token
// is never one: it is only an input).
static void add_ids(expect *E, const idseq *s) {
    buf all = {0}, target = {0};
    bool any = false;
    for (size_t i = 0; i < s->n; i++) {
        put_piece(&all, E->tok, s->id[i]);
        if (i > 0 && s->target[i]) {
            put_piece(&target, E->tok, s->id[i]);
            any = true;
        }
    }
    if (any) add_doc(&E->want, &all, &target);
    else E->n_no_target++;
    free(all.p);
    free(target.p);
}

static const char *str_member(const rg_json *obj, const char *key, size_t *len) {
    const char *s = rg_json_str(rg_json_get(obj, key), len);
    FZ_CHECK(s, "an accepted line has a '%s' that is not a string", key);
    return s;
}

// OpenAI's array of text parts, which an accepted line's content may be: every part {"type": "text", "text": S},
// the texts joined with nothing between them (malloc'd).
static char *text_parts(const rg_json *c, size_t *len) {
    buf b = {0};
    for (size_t k = 0; k < rg_json_len(c); k++) {
        const rg_json *part = rg_json_at(c, k);
        size_t tl, n;
        const char *type = rg_json_str(rg_json_get(part, "type"), &tl);
        FZ_CHECK(type && tl == 4 && !memcmp(type, "text", 4), "an accepted content part %zu is not of type text", k);
        const char *t = str_member(part, "text", &n);
        put(&b, t, n);
    }
    put(&b, "", 1);  // NUL-terminated, so never NULL
    *len = b.n - 1;
    return b.p;
}

// Orders cuts (pairs of offsets) by their first offset.
static int cmp_size(const void *a, const void *b) {
    const size_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t *x = a, *y = b;
    return *x < *y ? -1 : *x > *y;
}

// Removes the ranges cut[k] (offsets into the rendered text, sorted, shift added) from text[from, n): target
// text under train_on all when some assistant messages have weight 0.
static void put_except(buf *out, const char *text, size_t from, size_t n, size_t (*cut)[2], size_t n_cut,
                       size_t shift) {
    size_t at = from;
    for (size_t c = 0; c < n_cut; c++) {
        size_t a = cut[c][0] + shift, b = cut[c][1] + shift;
        if (b <= at) continue;
        if (a > at) put(out, text + at, a - at);
        at = b;
    }
    if (at < n) put(out, text + at, n - at);
}

// OpenAI's fine-tuning chat format as data.h describes it: "tools" next to "messages" (null: none), assistant
// "tool_calls" (null or [] : none; then "content" may be null or absent), "weight" 0 or 1 on assistant messages
// (0: that message's span is no target, under train_on all too), 'tool' messages' "name".
static void expect_messages(expect *E, const rg_json *root, const rg_json *msgs) {
    size_t n = rg_json_len(msgs);
    FZ_CHECK(rg_json_is(msgs, RG_JSON_ARRAY) && n > 0, "an accepted 'messages' is not a non-empty array");
    rg_chat_message *m = calloc(n, sizeof *m);
    bool *weight0 = calloc(n, sizeof *weight0);
    char **joined = calloc(n, sizeof *joined);  // contents given as text parts, joined here
    FZ_CHECK(m && weight0 && joined, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const rg_json *item = rg_json_at(msgs, i), *calls = rg_json_get(item, "tool_calls");
        m[i].role = str_member(item, "role", &m[i].role_len);
        if (calls && rg_json_is(calls, RG_JSON_ARRAY) && rg_json_len(calls) > 0) m[i].tool_calls = calls;
        const rg_json *c = rg_json_get(item, "content");
        if (m[i].tool_calls && (!c || rg_json_is(c, RG_JSON_NULL))) m[i].content = "", m[i].content_len = 0;
        else if (rg_json_is(c, RG_JSON_ARRAY)) m[i].content = joined[i] = text_parts(c, &m[i].content_len);
        else m[i].content = str_member(item, "content", &m[i].content_len);
        m[i].name = rg_json_str(rg_json_get(item, "name"), &m[i].name_len);
        int64_t w = 1;
        if (rg_json_get(item, "weight"))
            FZ_CHECK(rg_json_int64(rg_json_get(item, "weight"), &w) && (w == 0 || w == 1),
                     "an accepted weight is not 0 or 1");
        weight0[i] = w == 0;
    }
    const rg_json *tools = rg_json_get(root, "tools");
    rg_chat_options opt = {.tools = tools && !rg_json_is(tools, RG_JSON_NULL) ? tools : NULL};
    rg_chat_rendered r;
    rg_error err = {0};
    FZ_CHECK(rg_chat_render(E->tmpl, m, n, &opt, &r, &err) == RG_OK, "an accepted conversation does not render: %s",
             err.msg);
    // The assistant turns, content through end-of-turn marker, in text order (both setups write an assistant
    // message's calls after its content), and those of weight 0.
    size_t (*cuts)[2] = calloc(r.n_spans + 1, sizeof *cuts), n_cuts = 0;
    size_t (*off)[2] = calloc(r.n_spans + 1, sizeof *off), n_off = 0;
    FZ_CHECK(cuts && off, "out of memory");
    for (size_t i = 0; i < r.n_spans; i++) {
        const rg_chat_span *sp = &r.spans[i];
        if (sp->rendered && sp->message >= 0 && sp->marker_end > sp->content_begin && m[sp->message].role_len == 9 &&
            memcmp(m[sp->message].role, "assistant", 9) == 0) {
            size_t(*to)[2] = weight0[sp->message] ? off : cuts;
            size_t *k = weight0[sp->message] ? &n_off : &n_cuts;
            to[*k][0] = sp->content_begin;
            to[(*k)++][1] = sp->marker_end;
        }
    }
    qsort(cuts, n_cuts, sizeof *cuts, cmp_size);
    qsort(off, n_off, sizeof *off, cmp_size);
    // The first piece is tokenized alone: whether BOS goes in front depends on its first token.
    size_t first_end = r.len;
    if (n_cuts && cuts[0][0] < first_end) first_end = cuts[0][0];
    if (n_off && off[0][0] < first_end) first_end = off[0][0];
    int32_t first_id = -1;
    int64_t n_first = rg_tokenize(E->tok, r.text, first_end, false, true, &first_id, 1);
    bool bos = E->info->add_bos && E->info->bos >= 0 && !(n_first > 0 && first_id == E->info->bos);
    buf all = {0}, target = {0};
    if (bos) put_piece(&all, E->tok, E->info->bos);
    const size_t shift = all.n;
    put(&all, r.text, r.len);
    if (E->train_on == RG_DATA_TRAIN_ON_ALL) {
        // Every token but the first and those of weight-0 messages: the text less the first token's piece.
        int32_t first = bos ? E->info->bos : first_id;
        size_t skip = n_first > 0 || bos ? rg_token_to_piece(E->tok, first, true, NULL, 0) : all.n;
        put_except(&target, all.p, skip, all.n, off, n_off, shift);
    } else {
        for (size_t c = 0; c < n_cuts; c++) put(&target, r.text + cuts[c][0], cuts[c][1] - cuts[c][0]);
    }
    if (target.n) add_doc(&E->want, &all, &target);
    else E->n_no_target++;
    free(all.p);
    free(target.p);
    free(cuts);
    free(off);
    rg_chat_rendered_free(&r);
    for (size_t i = 0; i < n; i++) free(joined[i]);
    free(joined);
    free(m);
    free(weight0);
}

static void expect_line(expect *E, const char *line, size_t len) {
    rg_json_doc *doc = NULL;
    rg_error err = {0};
    FZ_CHECK(rg_json_parse(&doc, line, len, NULL, &err) == RG_OK, "an accepted line is not JSON: %s", err.msg);
    const rg_json *root = rg_json_root(doc);
    const rg_json *text = rg_json_get(root, "text"), *msgs = rg_json_get(root, "messages");
    const rg_json *prompt = rg_json_get(root, "prompt"), *completion = rg_json_get(root, "completion");
    FZ_CHECK(rg_json_is(root, RG_JSON_OBJECT) && (text != NULL) + (msgs != NULL) + (prompt || completion) == 1,
             "an accepted line is not an object with exactly one kind of sample");
    idseq s = {0};
    if (text) {
        E->kinds |= 1;
        size_t n;
        const char *t = str_member(root, "text", &n);
        push_ids(&s, E->tok, t, n, true);
        bos_eos(E, &s, true);
        add_ids(E, &s);
    } else if (msgs) {
        E->kinds |= 2;
        expect_messages(E, root, msgs);
    } else {
        E->kinds |= 4;
        size_t pn, cn;
        const char *p = str_member(root, "prompt", &pn), *c = str_member(root, "completion", &cn);
        push_ids(&s, E->tok, p, pn, E->train_on == RG_DATA_TRAIN_ON_ALL);
        push_ids(&s, E->tok, c, cn, true);
        bos_eos(E, &s, true);
        add_ids(E, &s);
    }
    free(s.id);
    free(s.target);
    rg_json_free(doc);
}

// ---------------------------------------------------------------------------
// Checks

static int64_t count_lines(const uint8_t *p, size_t n) {
    int64_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += p[i] == '\n';
    return lines;
}

static void check_failure(rg_status st, const rg_error *err, const char *path, const uint8_t *data, size_t size) {
    fz_check_error(st, err, FZ_STATUS(RG_ERR_FORMAT) | FZ_STATUS(RG_ERR_UNSUPPORTED), "rg_dataset_load_memory");
    size_t plen = strlen(path);
    FZ_CHECK(strncmp(err->msg, path, plen) == 0, "the error does not start with the file name: %s", err->msg);
    long long line;
    if (err->msg[plen] != ':' || sscanf(err->msg + plen + 1, "%lld:", &line) != 1) return;
    FZ_CHECK(line >= 1 && line <= count_lines(data, size), "the error names line %lld of %lld: %s", line,
             (long long)count_lines(data, size), err->msg);
    // JSON errors point into the line: its only line, a column (in characters) within it or just past it.
    const char *json = strstr(err->msg, ": not valid JSON: line ");
    size_t json_line, column;
    if (!json || sscanf(json, ": not valid JSON: line %zu, column %zu:", &json_line, &column) != 2) return;
    const uint8_t *p = data, *end = data + size;
    for (long long l = 1; l < line; l++) p = memchr(p, '\n', (size_t)(end - p)) + 1;
    const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
    size_t chars = 0;
    for (const uint8_t *q = p; q < (nl ? nl : end); q++) chars += (*q & 0xC0) != 0x80;
    FZ_CHECK(json_line == 1 && column >= 1 && column <= chars + 1, "JSON error at line %zu, column %zu of a line of %zu "
             "characters: %s", json_line, column, chars, err->msg);
}

typedef struct row {
    int32_t *ids, *labels, *pos, *seg;
} row;

// The row invariants of rg_dataset_row; adds the row's tokens, targets and padding to the sums.
static void check_row(const rg_dataset *d, const rg_tokenizer *tok, const row *r, int64_t ctx, int64_t sums[3],
                      int64_t *n_docs, bool pack) {
    const rg_tokenizer_info *in = rg_tokenizer_get_info(tok);
    int32_t pad = in->eos >= 0 ? in->eos : 0, n_tokens = rg_tokenizer_n_tokens(tok);
    int32_t doc = -1;
    int64_t p = 0;
    for (; p < ctx && r->seg[p] >= 0; p++) {
        FZ_CHECK(r->ids[p] >= 0 && r->ids[p] < n_tokens, "id %d at %lld", r->ids[p], (long long)p);
        if (r->pos[p] == 0) {
            FZ_CHECK(r->seg[p] == doc + 1, "document %d starts at %lld after document %d", r->seg[p], (long long)p, doc);
            doc++;
        } else {
            FZ_CHECK(p > 0 && r->seg[p] == doc && r->pos[p] == r->pos[p - 1] + 1, "pos %d seg %d at %lld", r->pos[p],
                     r->seg[p], (long long)p);
        }
        if (r->labels[p] != LABEL_IGNORE) {
            FZ_CHECK(r->labels[p] >= 0 && r->labels[p] < n_tokens, "label %d at %lld", r->labels[p], (long long)p);
            bool next_same = p + 1 < ctx && r->seg[p + 1] == doc && r->pos[p + 1] == r->pos[p] + 1;
            FZ_CHECK(!next_same || r->labels[p] == r->ids[p + 1], "label %d at %lld is not the next id %d", r->labels[p],
                     (long long)p, r->ids[p + 1]);
            sums[1]++;
        }
        sums[0]++;
    }
    FZ_CHECK(p > 0 || !d, "a row without a document");
    FZ_CHECK(pack || doc <= 0, "%d documents in one row without packing", doc + 1);
    *n_docs += doc + 1;
    int32_t next_pos = p > 0 ? r->pos[p - 1] + 1 : 0;
    for (int64_t q = p; q < ctx; q++, next_pos++) {
        FZ_CHECK(r->seg[q] == -1 && r->ids[q] == pad && r->labels[q] == LABEL_IGNORE && r->pos[q] == next_pos,
                 "padding at %lld: id %d label %d pos %d seg %d", (long long)q, r->ids[q], r->labels[q], r->pos[q],
                 r->seg[q]);
        sums[2]++;
    }
}

static void fetch(const rg_dataset *d, int split, int64_t epoch, int64_t k, const row *r) {
    rg_dataset_row(d, split, epoch, k, r->ids, r->labels, r->pos, r->seg);
}

// Row mode: every row of both splits, the stats they add up to, the epochs' orders.
static void check_rows(const rg_dataset *d, const rg_tokenizer *tok, const rg_data_opts *o) {
    rg_data_stats st = rg_dataset_stats(d);
    int64_t n = st.n_samples, n_eval = 0;
    if (o->eval_split > 0 && n >= 2) {
        n_eval = (int64_t)(o->eval_split * (double)n + 0.5);
        n_eval = n_eval < 1 ? 1 : n_eval > n - 1 ? n - 1 : n_eval;
    }
    FZ_CHECK(st.n_train_samples + st.n_eval_samples == n && st.n_eval_samples == n_eval,
             "%" PRId64 " samples: %" PRId64 " train, %" PRId64 " eval (want %" PRId64 " eval)", n, st.n_train_samples,
             st.n_eval_samples, n_eval);
    FZ_CHECK(rg_dataset_n_rows(d, 0) == st.n_train_rows && rg_dataset_n_rows(d, 1) == st.n_eval_rows &&
                 rg_dataset_n_rows(d, 2) == 0 && rg_dataset_n_rows(d, -1) == 0,
             "row counts");
    int64_t ctx = o->ctx;
    row r = {malloc(ctx * 4), malloc(ctx * 4), malloc(ctx * 4), malloc(ctx * 4)};
    FZ_CHECK(r.ids && r.labels && r.pos && r.seg, "out of memory");
    int64_t sums[3] = {0}, n_docs = 0;
    int64_t n_train_rows = rg_dataset_n_rows(d, 0);
    uint64_t *hashes = malloc((size_t)(n_train_rows ? n_train_rows : 1) * sizeof *hashes);
    FZ_CHECK(hashes, "out of memory");
    for (int split = 0; split < 2; split++) {
        int64_t rows = rg_dataset_n_rows(d, split), split_docs = 0;
        for (int64_t k = 0; k < rows; k++) {
            fetch(d, split, 0, k, &r);
            check_row(d, tok, &r, ctx, sums, &split_docs, o->pack);
            if (split == 0) hashes[k] = fnv(fnv(0, r.ids, ctx * 4), r.labels, ctx * 4);
        }
        FZ_CHECK(split_docs == (split ? st.n_eval_samples : st.n_train_samples), "split %d: %" PRId64 " documents in rows",
                 split, split_docs);
        FZ_CHECK(o->pack || rows == split_docs, "split %d: %" PRId64 " rows for %" PRId64 " samples without packing",
                 split, rows, split_docs);
        n_docs += split_docs;
        // Out of range: all padding.
        for (int64_t k = -1; k <= rows; k += rows + 1) {
            int64_t ignore[3] = {0}, none = 0;
            fetch(d, split, 0, k, &r);
            check_row(NULL, tok, &r, ctx, ignore, &none, o->pack);
            FZ_CHECK(none == 0, "row %" PRId64 " of %" PRId64 " holds a document", k, rows);
        }
    }
    FZ_CHECK(n_docs == st.n_samples, "%" PRId64 " documents in the rows of %" PRId64 " samples", n_docs, st.n_samples);
    FZ_CHECK(sums[0] == st.n_tokens && sums[1] == st.n_target_tokens && sums[2] == st.n_pad_tokens,
             "rows hold %" PRId64 " tokens, %" PRId64 " targets, %" PRId64 " padding; the stats say %" PRId64 ", %" PRId64
             ", %" PRId64,
             sums[0], sums[1], sums[2], st.n_tokens, st.n_target_tokens, st.n_pad_tokens);
    // Another epoch: the same train rows in another order.
    int64_t rows = n_train_rows;
    uint64_t *other = malloc((size_t)(rows ? rows : 1) * sizeof *other);
    FZ_CHECK(other, "out of memory");
    for (int64_t k = 0; k < rows; k++) {
        fetch(d, 0, 1, k, &r);
        other[k] = fnv(fnv(0, r.ids, ctx * 4), r.labels, ctx * 4);
    }
    qsort(hashes, (size_t)rows, sizeof *other, cmp_u64);
    qsort(other, (size_t)rows, sizeof *other, cmp_u64);
    FZ_CHECK(memcmp(hashes, other, (size_t)rows * sizeof *other) == 0, "epoch 1 does not hold epoch 0's rows");
    free(other);
    free(hashes);
    free(r.ids);
    free(r.labels);
    free(r.pos);
    free(r.seg);
}

// Exact mode: the rows are the documents each line makes, no more and no fewer.
static void check_exact(const rg_dataset *d, const setup *su, const rg_data_opts *o, bool plain, const char *text,
                        size_t len) {
    expect E = {.tok = su->tok, .info = rg_tokenizer_get_info(su->tok), .tmpl = &su->tmpl, .train_on = o->train_on};
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) text += 3, len -= 3;
    if (plain) {
        idseq s = {0};
        push_ids(&s, su->tok, text, len, true);
        bos_eos(&E, &s, false);
        if (s.n >= 2) add_ids(&E, &s);
        free(s.id);
        free(s.target);
    } else {
        for (size_t at = 0; at < len;) {
            const char *nl = memchr(text + at, '\n', len - at);
            size_t end = nl ? (size_t)(nl - text) : len;
            bool blank = true;
            for (size_t i = at; i < end && blank; i++) blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\r';
            if (!blank) expect_line(&E, text + at, end - at);
            at = end + 1;
        }
    }
    rg_data_stats st = rg_dataset_stats(d);
    static const char *const formats[] = {"jsonl", "jsonl:text", "jsonl:messages", "jsonl:mixed", "jsonl:prompt_completion",
                                          "jsonl:mixed", "jsonl:mixed", "jsonl:mixed"};
    const char *format = plain ? "text" : formats[E.kinds];
    FZ_CHECK(strcmp(st.format, format) == 0, "format '%s', want '%s'", st.format, format);
    FZ_CHECK(st.n_truncated == 0 && st.n_dropped == 0, "%" PRId64 " truncated, %" PRId64 " dropped with ctx %" PRId64,
             st.n_truncated, st.n_dropped, o->ctx);
    FZ_CHECK(st.n_samples == (int64_t)E.want.n && st.n_no_target == E.n_no_target && st.n_eval_samples == 0,
             "%" PRId64 " samples (%" PRId64 " without a target), want %zu (%" PRId64 ")", st.n_samples, st.n_no_target,
             E.want.n, E.n_no_target);

    docs got = {0};
    int64_t ctx = o->ctx;
    row r = {malloc(ctx * 4), malloc(ctx * 4), malloc(ctx * 4), malloc(ctx * 4)};
    FZ_CHECK(r.ids && r.labels && r.pos && r.seg, "out of memory");
    for (int64_t k = 0; k < rg_dataset_n_rows(d, 0); k++) {
        fetch(d, 0, 0, k, &r);
        buf all = {0}, target = {0};
        int64_t n_in = 0;
        while (n_in < ctx && r.seg[n_in] == 0) n_in++;
        for (int64_t p = 0; p < n_in; p++) {
            put_piece(&all, su->tok, r.ids[p]);
            if (r.labels[p] != LABEL_IGNORE) put_piece(&target, su->tok, r.labels[p]);
        }
        // A plain-text window's last token is only the last position's label.
        if (n_in > 0 && r.labels[n_in - 1] != LABEL_IGNORE) put_piece(&all, su->tok, r.labels[n_in - 1]);
        add_doc(&got, &all, &target);
        free(all.p);
        free(target.p);
    }
    FZ_CHECK(got.n == E.want.n, "%zu rows for %zu documents", got.n, E.want.n);
    qsort(got.v, got.n, sizeof *got.v, cmp_doc);
    qsort(E.want.v, E.want.n, sizeof *E.want.v, cmp_doc);
    for (size_t i = 0; i < got.n; i++)
        FZ_CHECK(cmp_doc(&got.v[i], &E.want.v[i]) == 0,
                 "the rows' documents differ from the lines': a row of %zu bytes (%zu of targets) where a line "
                 "gives %zu (%zu)",
                 got.v[i].all_len, got.v[i].target_len, E.want.v[i].all_len, E.want.v[i].target_len);
    free(got.v);
    free(E.want.v);
    free(r.ids);
    free(r.labels);
    free(r.pos);
    free(r.seg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_reader in = {data, size};
    uint8_t ctl = fz_byte(&in);
    bool rows_mode = ctl & 1, plain = ctl & 8;
    static const rg_data_train_on train_on[] = {RG_DATA_TRAIN_ON_ALL, RG_DATA_TRAIN_ON_ASSISTANT,
                                                RG_DATA_TRAIN_ON_COMPLETION, RG_DATA_TRAIN_ON_ASSISTANT};
    rg_data_opts o = {.train_on = train_on[ctl >> 1 & 3], .overlong = RG_DATA_OVERLONG_TRUNCATE};
    const setup *su = &setups[ctl >> 4 & 1];
    bool twice = false;
    if (rows_mode) {
        static const rg_data_overlong overlong[] = {RG_DATA_OVERLONG_TRUNCATE, RG_DATA_OVERLONG_DROP,
                                                    RG_DATA_OVERLONG_ERROR, RG_DATA_OVERLONG_TRUNCATE};
        static const double fractions[] = {0.05, 0.25, 0.5, 0.9};
        uint8_t b1 = fz_byte(&in), b2 = fz_byte(&in);
        o.ctx = b1 >= 0xF0 ? 128 << (b1 & 7) % 6 : 1 + b1 % 64;
        o.pack = ctl & 16;
        o.overlong = overlong[ctl >> 5 & 3];
        o.eval_split = ctl & 128 ? fractions[b2 >> 2 & 3] : 0;
        o.seed = b2 >> 4;
        twice = b2 & 1;
        su = &setups[b2 >> 1 & 1];
    } else {
        o.ctx = 3 * (int64_t)in.n + 256;
    }
    const char *path = plain ? "fuzz.txt" : "fuzz.jsonl";
    rg_dataset *d = NULL;
    rg_error err = {0};
    rg_status st = rg_dataset_load_memory(&d, path, in.p, in.n, su->tok, &su->tmpl, &o, &err);
    if (st) {
        FZ_CHECK(!d, "a failed load returned a dataset");
        check_failure(st, &err, path, in.p, in.n);
        return 0;
    }
    FZ_CHECK(d, "no dataset");
    if (rows_mode) {
        check_rows(d, su->tok, &o);
        if (twice) {
            rg_dataset *d2 = NULL;
            FZ_CHECK(rg_dataset_load_memory(&d2, path, in.p, in.n, su->tok, &su->tmpl, &o, &err) == RG_OK &&
                         rg_dataset_hash(d2) == rg_dataset_hash(d),
                     "a second load differs");
            rg_data_stats a = rg_dataset_stats(d), b = rg_dataset_stats(d2);
            FZ_CHECK(a.n_samples == b.n_samples && a.n_tokens == b.n_tokens && a.n_train_rows == b.n_train_rows,
                     "a second load gives other stats");
            rg_dataset_free(d2);
        }
    } else {
        check_exact(d, su, &o, plain, (const char *)in.p, in.n);
    }
    rg_dataset_free(d);
    return 0;
}
