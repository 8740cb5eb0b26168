// data.c - the training dataset of data.h: read and tokenize samples, mark targets, split off the
// eval samples, pack rows (first-fit over a max segment tree), and serve rows in a per-epoch order.
#include "train/data.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "train/data_line.h"
#include "train/philox.h"

enum { LABEL_IGNORE = -100, TENSOR_SPLIT = 1, TENSOR_EPOCH = 2 };

typedef struct sample {
    int64_t off;       // first token in d->tokens
    int32_t n_tok;     // tokens (inputs, plus the label-only last token of a window or a truncated document)
    int32_t n_in;      // row positions it takes
    int32_t n_target;  // labels != -100 it gives
} sample;

typedef struct split_rows {
    int64_t n_samples;
    int32_t *samples;    // sample indices of this split, in packing order
    int64_t n_rows;
    int64_t *row_begin;  // [n_rows + 1] into row_items
    int32_t *row_items;  // sample indices, row by row, in placement order
} split_rows;

struct rg_dataset {
    rg_data_opts opts;
    int32_t *tokens;  // [n_tokens]
    uint8_t *target;  // [n_tokens] 1: the token is predicted from the tokens before it
    int64_t n_tokens, cap_tokens;
    sample *samples;
    int64_t n_samples, cap_samples;
    split_rows split[2];
    int32_t pad_id;
    rg_data_stats stats;
    uint64_t hash;
    // The train order of the last epoch asked for (computed on demand, shared by threads).
    pthread_mutex_t mu;
    int64_t perm_epoch;  // -1: none yet
    int32_t *perm;
    // A separate evaluation file (rg_dataset_set_eval): its rows, in packing order, are the eval split.
    struct rg_dataset *eval;
};

// ---------------------------------------------------------------------------
// Random draws (Philox, purpose DATA): unbiased bounded integers and Fisher-Yates

typedef struct draw {
    uint64_t seed;
    uint32_t step, tensor;
    uint64_t counter;
} draw;

// Uniform in [0, bound), bound >= 1 (Lemire's multiply with rejection of the biased low part).
static uint32_t draw_below(draw *r, uint32_t bound) {
    for (;;) {
        uint32_t x = rg_rand_u32(r->seed, r->step, RG_RAND_PURPOSE_DATA, r->tensor, r->counter++);
        uint64_t m = (uint64_t)x * bound;
        uint32_t low = (uint32_t)m;
        if (low < bound) {
            uint32_t threshold = (uint32_t)(-bound) % bound;
            if (low < threshold) continue;
        }
        return (uint32_t)(m >> 32);
    }
}

// perm[0..n) becomes a uniformly random permutation of 0..n-1.
static void shuffle_identity(int32_t *perm, int64_t n, uint64_t seed, uint32_t step, uint32_t tensor) {
    for (int64_t i = 0; i < n; i++) perm[i] = (int32_t)i;
    draw r = {seed, step, tensor, 0};
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = draw_below(&r, (uint32_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

// ---------------------------------------------------------------------------
// Building: tokens, targets, samples

typedef struct loader {
    rg_dataset *d;
    const char *path;
    const rg_tokenizer *tok;
    const rg_tokenizer_info *info;
    const rg_chat_template *tmpl;
    rg_error *err;
    int kinds;
} loader;

static rg_status reserve_tokens(loader *L, int64_t more) {
    rg_dataset *d = L->d;
    if (d->n_tokens + more <= d->cap_tokens) return RG_OK;
    int64_t cap = d->cap_tokens ? d->cap_tokens : 4096;
    while (cap < d->n_tokens + more) cap *= 2;
    int32_t *t = realloc(d->tokens, (size_t)cap * sizeof *t);
    if (t) d->tokens = t;
    uint8_t *g = t ? realloc(d->target, (size_t)cap) : NULL;
    if (g) d->target = g;
    if (!t || !g) return rg_fail(L->err, RG_ERR_NOMEM, "%s: out of memory for %lld tokens", L->path, (long long)cap);
    d->cap_tokens = cap;
    return RG_OK;
}

static rg_status push_token(loader *L, int32_t id, bool target) {
    rg_status st = reserve_tokens(L, 1);
    if (st) return st;
    L->d->tokens[L->d->n_tokens] = id;
    L->d->target[L->d->n_tokens++] = target;
    return RG_OK;
}

// Appends the tokens of text[0..len) (special tokens parsed, nothing added), all marked `target`.
// Parsing is on for every kind of sample, rendered chats (whose markers are special-token
// text, spec §6.2) and plain text alike, as Hugging Face tokenizers split added tokens in
// any text; llama.cpp's finetune example tokenizes plain text without it. BOS is added by
// bos_front, once per sample, never after a BOS the text already starts with.
static rg_status push_text(loader *L, const char *text, size_t len, bool target, int64_t line) {
    rg_dataset *d = L->d;
    int64_t want = (int64_t)len + 8;
    for (;;) {
        rg_status st = reserve_tokens(L, want);
        if (st) return st;
        int64_t n = rg_tokenize(L->tok, text, len, false, true, d->tokens + d->n_tokens, d->cap_tokens - d->n_tokens);
        if (n < 0)
            return line ? rg_fail(L->err, RG_ERR_NOMEM, "%s:%lld: could not tokenize %zu bytes", L->path, (long long)line, len)
                        : rg_fail(L->err, RG_ERR_NOMEM, "%s: could not tokenize %zu bytes", L->path, len);
        if (n <= d->cap_tokens - d->n_tokens) {
            memset(d->target + d->n_tokens, target ? 1 : 0, (size_t)n);
            d->n_tokens += n;
            return RG_OK;
        }
        want = n;
    }
}

static bool add_bos(const loader *L) { return L->info->add_bos && L->info->bos >= 0; }

// Puts BOS in front of the sample starting at `off` unless it already starts with it.
static rg_status bos_front(loader *L, int64_t off) {
    rg_dataset *d = L->d;
    if (!add_bos(L) || (d->n_tokens > off && d->tokens[off] == L->info->bos)) return RG_OK;
    rg_status st = push_token(L, 0, false);
    if (st) return st;
    memmove(d->tokens + off + 1, d->tokens + off, (size_t)(d->n_tokens - 1 - off) * sizeof *d->tokens);
    memmove(d->target + off + 1, d->target + off, (size_t)(d->n_tokens - 1 - off));
    d->tokens[off] = L->info->bos;
    d->target[off] = 0;
    return RG_OK;
}

static rg_status eos_back(loader *L, int64_t off, bool target) {
    rg_dataset *d = L->d;
    int32_t eos = L->info->eos;
    if (eos < 0 || (d->n_tokens > off && d->tokens[d->n_tokens - 1] == eos)) return RG_OK;
    return push_token(L, eos, target);
}

static rg_status push_sample(loader *L, const sample *s) {
    rg_dataset *d = L->d;
    if (d->n_samples == d->cap_samples) {
        int64_t cap = d->cap_samples ? d->cap_samples * 2 : 256;
        if (cap > INT32_MAX)
            return rg_fail(L->err, RG_ERR_FORMAT, "%s: too many samples (%lld)", L->path, (long long)d->n_samples);
        sample *n = realloc(d->samples, (size_t)cap * sizeof *n);
        if (!n) return rg_fail(L->err, RG_ERR_NOMEM, "%s: out of memory", L->path);
        d->samples = n;
        d->cap_samples = cap;
    }
    d->samples[d->n_samples++] = *s;
    return RG_OK;
}

static int32_t count_targets(const rg_dataset *d, const sample *s) {
    int32_t n = 0;
    for (int32_t j = 0; j + 1 < s->n_tok && j < s->n_in; j++) n += d->target[s->off + j + 1];
    return n;
}

// The document just tokenized at tokens[off..n_tokens) becomes a sample, after the overlong rule.
static rg_status finish_document(loader *L, int64_t off, int64_t line) {
    rg_dataset *d = L->d;
    int64_t ctx = d->opts.ctx, n = d->n_tokens - off;
    sample s = {.off = off, .n_tok = (int32_t)(n < INT32_MAX ? n : INT32_MAX)};
    s.n_in = s.n_tok;
    if (count_targets(d, &s) == 0) {  // useless whatever its length
        d->stats.n_no_target++;
        d->n_tokens = off;
        return RG_OK;
    }
    if (n > ctx) {
        switch (d->opts.overlong) {
        case RG_DATA_OVERLONG_ERROR:
            return rg_fail(L->err, RG_ERR_FORMAT,
                           "%s:%lld: sample has %lld tokens, more than training.ctx %lld (set data.overlong=truncate or "
                           "drop)",
                           L->path, (long long)line, (long long)n, (long long)ctx);
        case RG_DATA_OVERLONG_DROP:
            d->stats.n_dropped++;
            d->n_tokens = off;
            return RG_OK;
        case RG_DATA_OVERLONG_TRUNCATE:
        default:
            // ctx inputs; the next token stays as the last input's label.
            d->stats.n_truncated++;
            d->n_tokens = off + ctx + 1;
            s.n_tok = (int32_t)(ctx + 1);
            s.n_in = (int32_t)ctx;
            break;
        }
    } else {
        s.n_tok = s.n_in = (int32_t)n;
    }
    s.n_target = count_targets(d, &s);
    if (s.n_target == 0) {  // its targets were all cut off
        d->stats.n_no_target++;
        d->n_tokens = off;
        return RG_OK;
    }
    return push_sample(L, &s);
}

static int64_t line_of(const uint8_t *data, size_t offset) {
    int64_t line = 1;
    for (size_t i = 0; i < offset; i++) line += data[i] == '\n';
    return line;
}

static rg_status load_plain(loader *L, const char *text, size_t len) {
    rg_dataset *d = L->d;
    L->d->stats.format = "text";
    rg_status st = push_text(L, text, len, true, 0);
    if (!st) st = bos_front(L, 0);
    if (st) return st;
    int64_t n = d->n_tokens, ctx = d->opts.ctx;
    for (int64_t w = 0; w * ctx + 1 < n; w++) {
        int64_t off = w * ctx, n_tok = n - off < ctx + 1 ? n - off : ctx + 1;
        sample s = {.off = off, .n_tok = (int32_t)n_tok, .n_in = (int32_t)(n_tok - 1)};
        s.n_target = count_targets(d, &s);
        if (s.n_target == 0) {
            d->stats.n_no_target++;
            continue;
        }
        if ((st = push_sample(L, &s))) return st;
    }
    return RG_OK;
}

// ---------------------------------------------------------------------------
// Loading a JSONL line: tokens and targets

typedef struct cut {
    size_t begin, end;
    bool target;
} cut;

static int cmp_cut(const void *a, const void *b) {
    const cut *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

// Where an assistant message's targets start: content_begin, or the call text when the template
// writes the calls before the content (LFM2: the line after the header).
static size_t target_begin(const rg_chat_rendered *r, const rg_chat_span *sp, const rg_chat_message *m) {
    if (!m->tool_calls || sp->role_end >= sp->content_begin) return sp->content_begin;
    const char *nl = memchr(r->text + sp->role_end, '\n', sp->content_begin - sp->role_end);
    return nl ? (size_t)(nl - r->text) + 1 : sp->content_begin;
}

// The rendered text, tokenized piece by piece: each assistant message's content_begin ..
// marker_end a piece of its own, a target unless its weight is 0; the text between them a target
// only with train_on all.
static rg_status load_messages(loader *L, int64_t line, const parsed_line *p) {
    rg_dataset *d = L->d;
    const rg_chat_rendered *r = &p->r;
    cut *cuts = calloc(r->n_spans + 1, sizeof *cuts);
    if (!cuts) return rg_fail(L->err, RG_ERR_NOMEM, "%s: out of memory", L->path);
    size_t n_cuts = 0;
    for (size_t i = 0; i < r->n_spans; i++) {
        const rg_chat_span *sp = &r->spans[i];
        if (!sp->rendered || sp->message < 0) continue;
        const rg_chat_message *msg = &p->msgs[sp->message];
        size_t begin = target_begin(r, sp, msg);
        if (data_role_is(msg, "assistant") && sp->marker_end > begin)
            cuts[n_cuts++] = (cut){.begin = begin, .end = sp->marker_end, .target = p->target[sp->message]};
    }
    qsort(cuts, n_cuts, sizeof *cuts, cmp_cut);
    int64_t off = d->n_tokens;
    bool all = d->opts.train_on == RG_DATA_TRAIN_ON_ALL;
    size_t at = 0;
    rg_status st = RG_OK;
    for (size_t c = 0; !st && c <= n_cuts; c++) {
        size_t begin = c < n_cuts ? cuts[c].begin : r->len, end = c < n_cuts ? cuts[c].end : r->len;
        if (begin < at) begin = at;  // spans never overlap; defensive
        if (begin > at) st = push_text(L, r->text + at, begin - at, all, line);
        if (!st && end > begin) st = push_text(L, r->text + begin, end - begin, cuts[c].target, line);
        if (end > at) at = end;
    }
    if (!st) st = bos_front(L, off);
    if (!st) st = finish_document(L, off, line);
    free(cuts);
    return st;
}

static rg_status load_line(loader *L, int64_t line, const char *text, size_t len) {
    rg_dataset *d = L->d;
    where w = {.path = L->path, .line = line, .err = L->err};
    parsed_line p;
    rg_status st = data_parse_line(&w, L->tmpl, text, len, &p);
    if (st) return st;
    L->kinds |= p.kind;
    bool all = d->opts.train_on == RG_DATA_TRAIN_ON_ALL;
    int64_t off = d->n_tokens;
    if (p.kind == KIND_MESSAGES) {
        st = load_messages(L, line, &p);
    } else {
        st = push_text(L, p.a, p.a_len, p.kind == KIND_TEXT || all, line);
        if (!st && p.kind == KIND_PROMPT) st = push_text(L, p.b, p.b_len, true, line);
        if (!st) st = bos_front(L, off);
        if (!st) st = eos_back(L, off, true);
        if (!st) st = finish_document(L, off, line);
    }
    data_parsed_line_free(&p);
    return st;
}

static rg_status load_jsonl(loader *L, const char *text, size_t len) {
    int64_t line = 1;
    for (size_t at = 0; at < len; line++) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        if (!data_is_blank(text + at, end - at)) {
            rg_status st = load_line(L, line, text + at, end - at);
            if (st) return st;
        }
        at = end + 1;
    }
    int k = L->kinds;
    L->d->stats.format = k == KIND_TEXT ? "jsonl:text"
                         : k == KIND_MESSAGES ? "jsonl:messages"
                         : k == KIND_PROMPT ? "jsonl:prompt_completion"
                         : k ? "jsonl:mixed" : "jsonl";
    return RG_OK;
}

// ---------------------------------------------------------------------------
// Packing

// First-fit over rows with capacity ctx: a max segment tree over the rows' free space finds the
// leftmost row with room; rows not yet opened have full capacity, so "no open row fits" lands on
// the first new one.
static rg_status pack_split(rg_dataset *d, split_rows *sr, rg_error *err) {
    int64_t n = sr->n_samples, ctx = d->opts.ctx;
    int32_t *row_of = malloc((size_t)(n ? n : 1) * sizeof *row_of);
    if (!row_of) return rg_fail(err, RG_ERR_NOMEM, "data: out of memory packing %lld samples", (long long)n);
    int64_t n_rows = 0;
    if (!d->opts.pack) {
        for (int64_t i = 0; i < n; i++) row_of[i] = (int32_t)i;
        n_rows = n;
    } else if (n) {
        int64_t leaves = 1;
        while (leaves < n) leaves *= 2;
        int32_t *tree = malloc((size_t)(2 * leaves) * sizeof *tree);
        if (!tree) {
            free(row_of);
            return rg_fail(err, RG_ERR_NOMEM, "data: out of memory packing %lld samples", (long long)n);
        }
        for (int64_t i = 0; i < 2 * leaves; i++) tree[i] = (int32_t)ctx;
        for (int64_t i = 0; i < n; i++) {
            int32_t need = d->samples[sr->samples[i]].n_in;
            int64_t node = 1;
            while (node < leaves) node = tree[2 * node] >= need ? 2 * node : 2 * node + 1;
            int64_t row = node - leaves;
            row_of[i] = (int32_t)row;
            if (row + 1 > n_rows) n_rows = row + 1;
            tree[node] -= need;
            for (node /= 2; node >= 1; node /= 2)
                tree[node] = tree[2 * node] > tree[2 * node + 1] ? tree[2 * node] : tree[2 * node + 1];
        }
        free(tree);
    }
    // Row lists in placement order (a stable counting sort by row).
    sr->n_rows = n_rows;
    sr->row_begin = calloc((size_t)n_rows + 1, sizeof *sr->row_begin);
    sr->row_items = malloc((size_t)(n ? n : 1) * sizeof *sr->row_items);
    if (!sr->row_begin || !sr->row_items) {
        free(row_of);
        return rg_fail(err, RG_ERR_NOMEM, "data: out of memory for %lld rows", (long long)n_rows);
    }
    for (int64_t i = 0; i < n; i++) sr->row_begin[row_of[i] + 1]++;
    for (int64_t r = 0; r < n_rows; r++) sr->row_begin[r + 1] += sr->row_begin[r];
    int64_t *fill = malloc((size_t)(n_rows ? n_rows : 1) * sizeof *fill);
    if (!fill) {
        free(row_of);
        return rg_fail(err, RG_ERR_NOMEM, "data: out of memory for %lld rows", (long long)n_rows);
    }
    memcpy(fill, sr->row_begin, (size_t)n_rows * sizeof *fill);
    for (int64_t i = 0; i < n; i++) sr->row_items[fill[row_of[i]]++] = sr->samples[i];
    free(fill);
    free(row_of);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// Loading

static bool ends_with_jsonl(const char *path) {
    size_t n = strlen(path);
    if (n < 6) return false;
    const char *e = path + n - 6;
    for (int i = 0; i < 6; i++)
        if (tolower((unsigned char)e[i]) != ".jsonl"[i]) return false;
    return true;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

static rg_status check_opts(const rg_data_opts *o, const char *path, rg_error *err) {
    if (o->ctx < 1 || o->ctx > ((int64_t)1 << 24))
        return rg_fail(err, RG_ERR_ARG, "%s: training.ctx %lld is out of range (1 .. 16777216)", path, (long long)o->ctx);
    if (!(o->eval_split >= 0.0 && o->eval_split < 1.0))
        return rg_fail(err, RG_ERR_ARG, "%s: eval split %g is out of range [0, 1)", path, o->eval_split);
    if ((unsigned)o->train_on > RG_DATA_TRAIN_ON_COMPLETION)
        return rg_fail(err, RG_ERR_ARG, "%s: unknown train_on value %d", path, (int)o->train_on);
    if ((unsigned)o->overlong > RG_DATA_OVERLONG_ERROR)
        return rg_fail(err, RG_ERR_ARG, "%s: unknown overlong value %d", path, (int)o->overlong);
    return RG_OK;
}

static rg_status split_and_pack(rg_dataset *d, rg_error *err) {
    int64_t n = d->n_samples, n_eval = 0;
    if (d->opts.eval_split > 0 && n >= 2) {
        n_eval = (int64_t)floor(d->opts.eval_split * (double)n + 0.5);
        if (n_eval < 1) n_eval = 1;
        if (n_eval > n - 1) n_eval = n - 1;
    }
    int32_t *perm = malloc((size_t)n * sizeof *perm);
    uint8_t *is_eval = calloc((size_t)n, 1);
    d->split[0].samples = malloc((size_t)(n - n_eval ? n - n_eval : 1) * sizeof(int32_t));
    d->split[1].samples = malloc((size_t)(n_eval ? n_eval : 1) * sizeof(int32_t));
    if (!perm || !is_eval || !d->split[0].samples || !d->split[1].samples) {
        free(perm);
        free(is_eval);
        return rg_fail(err, RG_ERR_NOMEM, "data: out of memory for %lld samples", (long long)n);
    }
    shuffle_identity(perm, n, d->opts.seed, 0, TENSOR_SPLIT);
    for (int64_t i = 0; i < n_eval; i++) is_eval[perm[i]] = 1;
    for (int64_t i = n_eval; i < n; i++) d->split[0].samples[i - n_eval] = perm[i];
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (is_eval[i]) d->split[1].samples[k++] = (int32_t)i;
    d->split[0].n_samples = n - n_eval;
    d->split[1].n_samples = n_eval;
    free(perm);
    free(is_eval);
    rg_status st = pack_split(d, &d->split[0], err);
    if (!st) st = pack_split(d, &d->split[1], err);
    return st;
}

static void fill_stats(rg_dataset *d) {
    rg_data_stats *s = &d->stats;
    s->n_train_samples = d->split[0].n_samples;
    s->n_eval_samples = d->split[1].n_samples;
    s->n_samples = d->n_samples;
    s->n_train_rows = d->split[0].n_rows;
    s->n_eval_rows = d->split[1].n_rows;
    for (int64_t i = 0; i < d->n_samples; i++) {
        s->n_tokens += d->samples[i].n_in;
        s->n_target_tokens += d->samples[i].n_target;
    }
    s->n_pad_tokens = (s->n_train_rows + s->n_eval_rows) * d->opts.ctx - s->n_tokens;
}

rg_status rg_dataset_load_memory(rg_dataset **out, const char *path, const void *data, size_t len,
                                 const rg_tokenizer *tok, const rg_chat_template *tmpl, const rg_data_opts *opts,
                                 rg_error *err) {
    *out = NULL;
    if (!path || (!data && len) || !tok || !opts)
        return rg_fail(err, RG_ERR_ARG, "data: name, bytes, tokenizer and options are required");
    rg_status st = check_opts(opts, path, err);
    if (st) return st;
    rg_dataset *d = calloc(1, sizeof *d);
    if (!d) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", path);
    d->opts = *opts;
    d->perm_epoch = -1;
    pthread_mutex_init(&d->mu, NULL);
    const rg_tokenizer_info *info = rg_tokenizer_get_info(tok);
    d->pad_id = info->eos >= 0 ? info->eos : 0;

    const uint8_t *bytes = data;
    const char *text = data;
    size_t base = 0;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) base = 3;  // byte order mark
    size_t bad = base + rg_utf8_first_invalid(text + base, len - base);
    if (bad < len) {
        st = rg_fail(err, RG_ERR_FORMAT, "%s:%lld: invalid UTF-8 at byte offset %zu (byte 0x%02X)", path,
                     (long long)line_of(bytes, bad), bad, bytes[bad]);
    } else {
        loader L = {.d = d, .path = path, .tok = tok, .info = info, .tmpl = tmpl, .err = err};
        st = ends_with_jsonl(path) ? load_jsonl(&L, text + base, len - base) : load_plain(&L, text + base, len - base);
    }
    if (!st && d->n_samples == 0) {
        const rg_data_stats *s = &d->stats;
        if (len - base == 0) {
            st = rg_fail(err, RG_ERR_FORMAT, "%s: no samples: the file is empty", path);
        } else if (s->n_dropped || s->n_no_target) {
            st = rg_fail(err, RG_ERR_FORMAT,
                         "%s: no samples: %lld longer than training.ctx %lld were dropped (data.overlong=drop), %lld had "
                         "no target token",
                         path, (long long)s->n_dropped, (long long)opts->ctx, (long long)s->n_no_target);
        } else {
            st = rg_fail(err, RG_ERR_FORMAT, "%s: no samples (only blank lines, or fewer than 2 tokens of text)", path);
        }
    }
    if (!st) {
        uint64_t h = 0xCBF29CE484222325ull;
        h = fnv1a(h, bytes, len);
        int64_t o[5] = {opts->ctx, opts->train_on, opts->pack, opts->overlong, 0};
        memcpy(&o[4], &opts->eval_split, sizeof(double));
        h = fnv1a(h, o, sizeof o);
        h = fnv1a(h, &opts->seed, sizeof opts->seed);
        h = fnv1a(h, d->tokens, (size_t)d->n_tokens * sizeof *d->tokens);
        h = fnv1a(h, d->target, (size_t)d->n_tokens);
        d->hash = h;
        st = split_and_pack(d, err);
    }
    if (st) {
        rg_dataset_free(d);
        return st;
    }
    fill_stats(d);
    *out = d;
    return RG_OK;
}

rg_status rg_dataset_load(rg_dataset **out, const char *path, const rg_tokenizer *tok, const rg_chat_template *tmpl,
                          const rg_data_opts *opts, rg_error *err) {
    *out = NULL;
    if (!path || !tok || !opts) return rg_fail(err, RG_ERR_ARG, "data: path, tokenizer and options are required");
    rg_status st = check_opts(opts, path, err);
    if (st) return st;
    rg_file_map map = {0};
    if ((st = rg_file_map_open(&map, path, err))) return st;
    st = rg_dataset_load_memory(out, path, map.data, map.size, tok, tmpl, opts, err);
    rg_file_map_close(&map);
    return st;
}

void rg_dataset_free(rg_dataset *d) {
    if (!d) return;
    rg_dataset_free(d->eval);
    for (int s = 0; s < 2; s++) {
        free(d->split[s].samples);
        free(d->split[s].row_begin);
        free(d->split[s].row_items);
    }
    pthread_mutex_destroy(&d->mu);
    free(d->perm);
    free(d->tokens);
    free(d->target);
    free(d->samples);
    free(d);
}

rg_data_stats rg_dataset_stats(const rg_dataset *d) { return d->stats; }

uint64_t rg_dataset_hash(const rg_dataset *d) { return d->hash; }

int64_t rg_dataset_n_rows(const rg_dataset *d, int split) {
    if (d && split == 1 && d->eval) return d->eval->split[0].n_rows;
    return d && (split == 0 || split == 1) ? d->split[split].n_rows : 0;
}

rg_status rg_dataset_set_eval(rg_dataset *d, rg_dataset *eval, const char *eval_path, rg_error *err) {
    if (d->eval || d->split[1].n_samples) {
        rg_dataset_free(eval);
        return rg_fail(err, RG_ERR_ARG, "%s: the training data already holds out an eval split (training.eval_split "
                       "must be 0 with a separate eval file)", eval_path);
    }
    if (eval->split[1].n_samples || eval->opts.ctx != d->opts.ctx) {
        rg_dataset_free(eval);
        return rg_fail(err, RG_ERR_ARG, "%s: an eval file is loaded whole (eval_split 0) with the training data's ctx",
                       eval_path);
    }
    d->eval = eval;
    rg_data_stats *s = &d->stats;
    const rg_data_stats *e = &eval->stats;
    s->n_eval_samples = e->n_samples;
    s->n_eval_rows = e->n_train_rows;
    s->n_samples += e->n_samples;
    s->n_truncated += e->n_truncated, s->n_dropped += e->n_dropped, s->n_no_target += e->n_no_target;
    s->n_tokens += e->n_tokens, s->n_target_tokens += e->n_target_tokens;
    s->n_pad_tokens += e->n_pad_tokens;
    d->hash = fnv1a(d->hash, &eval->hash, sizeof eval->hash);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// Rows

static int64_t train_row(const rg_dataset *cd, int64_t epoch, int64_t k) {
    rg_dataset *d = (rg_dataset *)cd;  // the order cache is the only mutable part, behind the mutex
    int64_t n = d->split[0].n_rows, row = -1;
    pthread_mutex_lock(&d->mu);
    if (d->perm_epoch != epoch || !d->perm) {
        if (!d->perm) d->perm = malloc((size_t)(n ? n : 1) * sizeof *d->perm);
        if (d->perm) {
            shuffle_identity(d->perm, n, d->opts.seed, (uint32_t)epoch, TENSOR_EPOCH);
            d->perm_epoch = epoch;
        }
    }
    if (d->perm) row = d->perm[k];
    pthread_mutex_unlock(&d->mu);
    return row;
}

void rg_dataset_row(const rg_dataset *d, int split, int64_t epoch, int64_t k, int32_t *ids, int32_t *labels,
                    int32_t *pos, int32_t *seg) {
    int64_t ctx = d->opts.ctx, p = 0, next_pos = 0;
    int64_t row = -1;
    const split_rows *sr = NULL;
    if (split == 1 && d->eval) {  // a separate eval file: its rows in packing order
        d = d->eval;
        sr = &d->split[0];
        if (k >= 0 && k < sr->n_rows) row = k;
    } else if ((split == 0 || split == 1) && k >= 0 && k < d->split[split].n_rows) {
        sr = &d->split[split];
        row = split == 0 ? train_row(d, epoch, k) : k;
    }
    if (row >= 0) {
        for (int64_t it = sr->row_begin[row]; it < sr->row_begin[row + 1]; it++) {
            const sample *s = &d->samples[sr->row_items[it]];
            int32_t doc = (int32_t)(it - sr->row_begin[row]);
            const int32_t *t = d->tokens + s->off;
            const uint8_t *g = d->target + s->off;
            for (int32_t j = 0; j < s->n_in && p < ctx; j++, p++) {
                if (ids) ids[p] = t[j];
                if (labels) labels[p] = j + 1 < s->n_tok && g[j + 1] ? t[j + 1] : LABEL_IGNORE;
                if (pos) pos[p] = j;
                if (seg) seg[p] = doc;
            }
            next_pos = s->n_in;
        }
    }
    for (; p < ctx; p++, next_pos++) {
        if (ids) ids[p] = d->pad_id;
        if (labels) labels[p] = LABEL_IGNORE;
        if (pos) pos[p] = (int32_t)next_pos;
        if (seg) seg[p] = -1;
    }
}
