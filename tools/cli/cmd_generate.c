// cmd_generate.c - `retrograd generate`: text from a prompt, or an interactive chat, with a
// KV-cached session and the seeded sampler chain (infer/sampler.h).
//
//   retrograd generate -m MODEL.gguf (-p TEXT | -f FILE | --chat) [-n N] [--temp T] [--top-k K]
//       [--top-p P] [--min-p M] [--repeat-penalty R] [--repeat-last-n N] [--seed S] [-c CTX]
//       [-t THREADS] [--device cpu|cuda] [--no-bos] [--raw] [--truncate] [--verbose-prompt]
//       [--lora A.gguf[:SCALE]]... [--chat-template NAME]
//
// The prompt is a user message rendered with the model's chat template and its generation
// prompt (--raw: the text as is; a model without a chat template is used raw, with a
// warning; --chat-template NAME: a built-in family's layout instead, rg_chat_template_builtin). Special-token text in the prompt is recognized, by llama.cpp's rules
// (text/tokenizer.h), as llama-cli recognizes it. BOS is put first when the model asks for
// it, unless the tokens already start with BOS: a template that writes bos_token (llama.cpp's
// chat gives one BOS there too) or a raw prompt that begins with the BOS text (llama-cli
// would give two). No EOS is added; --no-bos: never a BOS. Decoded text streams to stdout
// token by token (a UTF-8 character split over tokens is printed when complete); generation
// stops after -n tokens (-1: no limit), at an end-of-generation token, or when the context
// is full; then one line of timings goes to stderr.
//
// --lora applies a LoRA adapter (llama.cpp's adapter.gguf) through the graph on any base type,
// y = W x + SCALE * alpha/rank * B(A x); the session keeps it for every evaluation. Repeated, the
// adapters' terms are summed, as llama.cpp's repeated --lora does (stacked: model/lora_stack.h).
//
// --chat reads user lines from stdin ("> " on stderr), answers each, and keeps the
// conversation in the KV cache: each turn evaluates only the text the template adds after
// the previous answer. /exit or end of input stops it.
//
// This file also holds the helpers cmd_perplexity.c shares (declared in cli.h).
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "base/error.h"
#include "cli.h"
#include "infer/sampler.h"
#include "infer/session.h"
#include "model/lora.h"
#include "model/model.h"
#include "text/chat.h"
#include "text/tokenizer.h"

// ---------------------------------------------------------------------------
// Helpers shared with cmd_perplexity.c

double cli_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *bigger = realloc(buf, cap * 2 + 1);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

bool cli_parse_i64(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "retrograd %s: %s '%s' is not valid: give an integer in %" PRId64 "..%" PRId64 "\n", cmd, opt, s,
                lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_f32(const char *cmd, const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || fabs(v) > 3e38) {
        fprintf(stderr, "retrograd %s: %s '%s' is not a number\n", cmd, opt, s);
        return false;
    }
    *out = (float)v;
    return true;
}

bool cli_parse_device(const char *cmd, const char *s, rg_device *out) {
    if (!strcmp(s, "cpu")) *out = RG_DEVICE_CPU;
    else if (!strcmp(s, "cuda")) *out = RG_DEVICE_CUDA;
    else {
        fprintf(stderr, "retrograd %s: --device must be cpu or cuda, not '%s'\n", cmd, s);
        return false;
    }
    return true;
}

bool cli_parse_flash_attn(const char *cmd, const char *s, rg_flash_attn_mode *out) {
    if (!strcmp(s, "auto")) *out = RG_FLASH_ATTN_AUTO;
    else if (!strcmp(s, "on")) *out = RG_FLASH_ATTN_ON;
    else if (!strcmp(s, "off")) *out = RG_FLASH_ATTN_OFF;
    else {
        fprintf(stderr, "retrograd %s: --flash-attn must be auto, on or off, not '%s'\n", cmd, s);
        return false;
    }
    return true;
}

int64_t cli_default_ctx(const rg_model *m) {
    int64_t train = m->hp.n_ctx_train;
    return train > 0 && train < 4096 ? train : 4096;
}

// ---------------------------------------------------------------------------

static void usage(FILE *f) {
    fprintf(f,
            "usage: retrograd generate -m MODEL.gguf (-p TEXT | -f FILE | --chat) [options]\n"
            "  -m MODEL.gguf         the model\n"
            "  -p TEXT               the prompt\n"
            "  -f FILE               the prompt, read from FILE\n"
            "  --chat                interactive: user lines from stdin, /exit or end of input stops\n"
            "  -n N                  tokens to generate (default 128; -1: until the end or a full context)\n"
            "  --temp T              temperature (default 0.8; <= 0: greedy)\n"
            "  --top-k K             keep the K most likely tokens (default 40; 0: off)\n"
            "  --top-p P             keep the smallest set with probability >= P, in (0, 1] (default 0.95; 1: off)\n"
            "  --min-p M             keep tokens with probability >= M x the top one, in [0, 1) (default 0.05; 0: off)\n"
            "  --repeat-penalty R    penalty of recently seen tokens, > 0 (default 1.0: off)\n"
            "  --repeat-last-n N     how many recent tokens it looks at (default 64; 0: off; -1: the context)\n"
            "  --seed S              seed of the draws (default 42): same seed, same text\n"
            "  -c CTX                context length in tokens (default 4096, or the model's if smaller)\n"
            "  -t THREADS            CPU threads (default: all cores)\n"
            "  --device cpu|cuda     where to run (default cpu)\n"
            "  --flash-attn auto|on|off\n"
            "                        prompt batches through flash attention over the KV cache instead of the\n"
            "                        [n_kv, T, n_head] scores (default auto: when those would pass 256 MiB; CPU only)\n"
            "  --lora A.gguf[:SCALE] apply a LoRA adapter (llama.cpp's format) with SCALE x alpha/rank (default 1);\n"
            "                        repeat it to apply several (their terms are summed)\n"
            "  --no-bos              never put a BOS token first\n"
            "  --raw                 use the text as is, without the chat template\n"
            "  --chat-template NAME  render with a built-in layout instead of the model's template (or for a model\n"
            "                        without one): chatml, llama3, llama3.1, lfm2, gemma\n"
            "  --truncate            keep the end of a prompt longer than the context instead of failing\n"
            "  --verbose-prompt      print the tokens evaluated (each turn) to stderr\n"
            "  --profile             at the end, print to stderr where the time went per op and weight type\n");
}

typedef struct gen {
    const char *cmd;
    rg_model *model;
    rg_tokenizer *tok;
    const rg_tokenizer_info *info;
    rg_session *sess;
    rg_sampler *smp;
    float *logits;  // [n_vocab]
    int64_t n_vocab, n_ctx, n_predict;
    bool add_bos, truncate;
    rg_detok_stream stream;
    char *piece;
    size_t piece_cap;
    bool last_newline;  // the last byte written to stdout was '\n' (or nothing was written)
    bool verbose_prompt;
} gen;

static void emit(gen *g, const char *p, int64_t n) {
    if (n <= 0) return;
    fwrite(p, 1, (size_t)n, stdout);
    fflush(stdout);
    g->last_newline = p[n - 1] == '\n';
}

// Tokenizes text for the session: special-token text recognized, BOS first when asked.
static rg_status tokenize(gen *g, const char *text, size_t len, bool bos, int32_t **ids, size_t *n, rg_error *err) {
    int32_t *t = NULL;
    size_t k = 0;
    rg_status st = rg_tokenize_alloc(g->tok, text, len, false, true, &t, &k, err);
    if (st) return st;
    if (bos && g->info->bos >= 0 && (k == 0 || t[0] != g->info->bos)) {
        int32_t *b = realloc(t, (k + 1) * sizeof *t);
        if (!b) {
            free(t);
            return rg_fail(err, RG_ERR_NOMEM, "out of memory");
        }
        t = b;
        memmove(t + 1, t, k * sizeof *t);
        t[0] = g->info->bos;
        k++;
    }
    *ids = t;
    *n = k;
    return RG_OK;
}

typedef struct turn_stats {
    int64_t n_prompt, n_gen;
    double t_prompt, t_gen;
    int32_t last;       // the last token drawn
    bool eog;           // stopped at an end-of-generation token
    bool ctx_full;      // stopped because the context is full
    char *reply;        // the decoded text (chat mode), malloc'd
    size_t reply_len;
} turn_stats;

// Evaluates ids after the cache, then draws up to n_predict tokens, streaming them out. The
// last drawn token is not evaluated (ts->last; the chat evaluates it before the next turn
// unless it ended the answer). ids[0..skip) are already in the sampler's history.
static rg_status run_turn(gen *g, const int32_t *ids, int64_t n, int64_t skip, bool keep_reply, turn_stats *ts,
                          rg_error *err) {
    memset(ts, 0, sizeof *ts);
    ts->last = -1;
    if (g->verbose_prompt) {
        fprintf(stderr, "%" PRId64 " tokens after %" PRId64 " cached:", n, rg_session_n_past(g->sess));
        for (int64_t i = 0; i < n; i++) {
            size_t k = rg_token_to_piece(g->tok, ids[i], true, g->piece, g->piece_cap);
            if (k >= g->piece_cap) k = g->piece_cap - 1;
            fprintf(stderr, " %" PRId32 ":'", ids[i]);
            for (size_t j = 0; j < k; j++) {
                unsigned char ch = (unsigned char)g->piece[j];
                if (ch == '\n') fputs("\\n", stderr);
                else if (ch < 0x20 || ch == 0x7f) fprintf(stderr, "\\x%02X", ch);
                else fputc(ch, stderr);
            }
            fputc('\'', stderr);
        }
        fputc('\n', stderr);
    }
    for (int64_t i = skip; i < n; i++) rg_sampler_accept(g->smp, ids[i]);
    double t0 = cli_now();
    rg_status st = rg_session_eval(g->sess, ids, n, g->logits, 0, err);
    if (st) return st;
    double t1 = cli_now();
    ts->n_prompt = n;
    ts->t_prompt = t1 - t0;
    rg_detok_stream_init(&g->stream, g->tok, false);
    g->stream.strip_space = false;  // the text continues the prompt
    size_t cap = 0;
    int32_t *out_ids = NULL;
    for (int64_t i = 0; g->n_predict < 0 || i < g->n_predict; i++) {
        int32_t id = rg_sampler_sample(g->smp, g->logits);
        rg_sampler_accept(g->smp, id);
        ts->last = id;
        if (rg_token_is_eog(g->tok, id)) {
            ts->eog = true;
            break;
        }
        ts->n_gen++;
        int64_t k = rg_detok_stream_push(&g->stream, id, g->piece, g->piece_cap);
        emit(g, g->piece, k);
        if (keep_reply) {
            if ((size_t)ts->n_gen > cap) {
                cap = cap ? cap * 2 : 256;
                int32_t *b = realloc(out_ids, cap * sizeof *b);
                if (!b) {
                    free(out_ids);
                    return rg_fail(err, RG_ERR_NOMEM, "out of memory");
                }
                out_ids = b;
            }
            out_ids[ts->n_gen - 1] = id;
        }
        if (g->n_predict >= 0 && i + 1 >= g->n_predict) break;
        if (rg_session_n_past(g->sess) >= g->n_ctx) {
            ts->ctx_full = true;
            break;
        }
        st = rg_session_eval(g->sess, &id, 1, g->logits, 0, err);
        if (st) {
            free(out_ids);
            return st;
        }
    }
    emit(g, g->piece, rg_detok_stream_flush(&g->stream, g->piece, g->piece_cap));
    ts->t_gen = cli_now() - t1;
    if (keep_reply) {
        size_t need = rg_detokenize(g->tok, out_ids, (size_t)ts->n_gen, false, NULL, 0);
        ts->reply = malloc(need + 1);
        if (!ts->reply) {
            free(out_ids);
            return rg_fail(err, RG_ERR_NOMEM, "out of memory");
        }
        rg_detokenize(g->tok, out_ids, (size_t)ts->n_gen, false, ts->reply, need + 1);
        ts->reply_len = need;
    }
    free(out_ids);
    return RG_OK;
}

static void print_stats(gen *g, const turn_stats *ts) {
    if (!g->last_newline) fputc('\n', stderr);  // the timings on a line of their own
    if (ts->ctx_full)
        fprintf(stderr, "retrograd %s: note: the context of %" PRId64 " tokens is full; generation stopped (-c sets it)\n",
                g->cmd, g->n_ctx);
    double pr = ts->t_prompt > 0 ? (double)ts->n_prompt / ts->t_prompt : 0;
    double gr = ts->t_gen > 0 ? (double)ts->n_gen / ts->t_gen : 0;
    fprintf(stderr, "prompt: %" PRId64 " tokens in %.2f s (%.1f tok/s) | generation: %" PRId64 " tokens in %.2f s (%.1f tok/s)\n",
            ts->n_prompt, ts->t_prompt, pr, ts->n_gen, ts->t_gen, gr);
    fflush(stderr);
    g->last_newline = true;
}

// Fits a prompt of n tokens into the context: an error, or with --truncate its last part.
static rg_status fit_prompt(gen *g, int32_t *ids, size_t *n, rg_error *err) {
    if ((int64_t)*n < g->n_ctx) return RG_OK;
    if (g->n_ctx < 2) return rg_fail(err, RG_ERR_ARG, "-c %" PRId64 " leaves no room to generate", g->n_ctx);
    if (!g->truncate)
        return rg_fail(err, RG_ERR_ARG,
                       "the prompt is %zu tokens but the context (-c) holds %" PRId64 " and at least one more is "
                       "needed to generate: use a larger -c, a shorter prompt, or --truncate to keep its end",
                       *n, g->n_ctx);
    // keep room for -n tokens, but for no more than half the context
    int64_t room = g->n_predict >= 0 && g->n_predict < g->n_ctx / 2 ? g->n_predict : g->n_ctx / 2;
    if (room < 1) room = 1;
    size_t keep = (size_t)(g->n_ctx - room);
    size_t head = g->add_bos && *n > 0 && ids[0] == g->info->bos ? 1 : 0;  // a BOS stays first
    memmove(ids + head, ids + (*n - (keep - head)), (keep - head) * sizeof *ids);
    fprintf(stderr, "retrograd %s: note: the prompt of %zu tokens was cut to its last %zu to fit -c %" PRId64 "\n",
            g->cmd, *n, keep, g->n_ctx);
    *n = keep;
    return RG_OK;
}

static int one_shot(gen *g, const char *text, size_t len, const rg_chat_template *tmpl) {
    rg_error err = {0};
    rg_chat_rendered r = {0};
    const char *in = text;
    size_t in_len = len;
    if (tmpl) {
        rg_chat_message msg = {"user", 4, text, len};
        rg_chat_options o = {.add_generation_prompt = true};
        if (rg_chat_render(tmpl, &msg, 1, &o, &r, &err)) {
            fprintf(stderr, "retrograd %s: %s\n", g->cmd, err.msg);
            return 1;
        }
        in = r.text;
        in_len = r.len;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rg_status st = tokenize(g, in, in_len, g->add_bos, &ids, &n, &err);
    rg_chat_rendered_free(&r);
    if (!st && n == 0) st = rg_fail(&err, RG_ERR_ARG, "the prompt is empty (no tokens)");
    if (!st) st = fit_prompt(g, ids, &n, &err);
    turn_stats ts = {0};
    if (!st) st = run_turn(g, ids, (int64_t)n, 0, false, &ts, &err);
    free(ids);
    if (st) {
        if (!g->last_newline) fputc('\n', stderr);
        fprintf(stderr, "retrograd %s: %s\n", g->cmd, err.msg);
        return 1;
    }
    print_stats(g, &ts);
    return 0;
}

typedef struct msg_list {
    rg_chat_message *m;
    size_t n, cap;
} msg_list;

static bool msgs_push(msg_list *l, const char *role, const char *content, size_t len) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        rg_chat_message *b = realloc(l->m, cap * sizeof *b);
        if (!b) return false;
        l->m = b;
        l->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return false;
    memcpy(c, content, len);
    c[len] = '\0';
    l->m[l->n++] = (rg_chat_message){role, strlen(role), c, len};
    return true;
}

static void msgs_free(msg_list *l) {
    for (size_t i = 0; i < l->n; i++) free((char *)l->m[i].content);
    free(l->m);
}

// The end of the content of message idx in the rendered text.
static size_t content_end_of(const rg_chat_rendered *r, size_t idx) {
    for (size_t i = 0; i < r->n_spans; i++)
        if (r->spans[i].message == (int32_t)idx) return r->spans[i].content_end;
    return r->len;
}

static int chat(gen *g, const rg_chat_template *tmpl) {
    msg_list msgs = {0};
    char *line = NULL;
    size_t line_cap = 0;
    int rc = 0;
    rg_error err = {0};
    int32_t pending = -1;  // the last token of the previous answer, drawn but not evaluated
    for (;;) {
        fputs("> ", stderr);
        fflush(stderr);
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) {
            fputc('\n', stderr);
            break;
        }
        size_t len = (size_t)got;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        line[len] = '\0';
        if (!strcmp(line, "/exit")) break;
        if (len == 0) continue;
        if (rg_utf8_first_invalid(line, len) < len)
            fprintf(stderr, "retrograd %s: warning: the line is not valid UTF-8; it is tokenized byte by byte\n", g->cmd);
        size_t prev_assistant = msgs.n - 1;  // only read when msgs.n > 0
        bool first = msgs.n == 0;
        if (!msgs_push(&msgs, "user", line, len)) {
            fprintf(stderr, "retrograd %s: out of memory\n", g->cmd);
            rc = 1;
            break;
        }
        rg_chat_rendered r = {0};
        rg_chat_options o = {.add_generation_prompt = true};
        if (rg_chat_render(tmpl, msgs.m, msgs.n, &o, &r, &err)) {
            fprintf(stderr, "retrograd %s: %s\n", g->cmd, err.msg);
            rc = 1;
            break;
        }
        // the cache holds everything up to the previous answer's content (but its last token
        // when that did not end the answer): evaluate that token and the template's text after it
        size_t from = first ? 0 : content_end_of(&r, prev_assistant);
        int32_t *ids = NULL;
        size_t n = 0;
        rg_status st = tokenize(g, r.text + from, r.len - from, first && g->add_bos, &ids, &n, &err);
        rg_chat_rendered_free(&r);
        if (!st && pending >= 0) {
            int32_t *b = realloc(ids, (n + 1) * sizeof *b);
            if (!b) st = rg_fail(&err, RG_ERR_NOMEM, "out of memory");
            else {
                ids = b;
                memmove(ids + 1, ids, n * sizeof *ids);
                ids[0] = pending;
                n++;
            }
        }
        if (!st && rg_session_n_past(g->sess) + (int64_t)n >= g->n_ctx)
            st = rg_fail(&err, RG_ERR_ARG,
                         "the conversation (%" PRId64 " tokens so far, %zu more for this turn) no longer fits the "
                         "context of %" PRId64 " tokens: start again with a larger -c",
                         rg_session_n_past(g->sess), n, g->n_ctx);
        turn_stats ts = {0};
        if (!st) st = run_turn(g, ids, (int64_t)n, pending >= 0 ? 1 : 0, true, &ts, &err);
        free(ids);
        if (st) {
            if (!g->last_newline) fputc('\n', stderr);
            fprintf(stderr, "retrograd %s: %s\n", g->cmd, err.msg);
            rc = 1;
            break;
        }
        if (!g->last_newline) emit(g, "\n", 1);  // the answer on lines of its own
        print_stats(g, &ts);
        bool ok = msgs_push(&msgs, "assistant", ts.reply, ts.reply_len);
        free(ts.reply);
        if (!ok) {
            fprintf(stderr, "retrograd %s: out of memory\n", g->cmd);
            rc = 1;
            break;
        }
        if (ts.ctx_full) {
            fprintf(stderr, "retrograd %s: the conversation fills the context; start again with a larger -c\n", g->cmd);
            rc = 1;
            break;
        }
        pending = ts.eog || ts.last < 0 ? -1 : ts.last;
    }
    free(line);
    msgs_free(&msgs);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    const char *C = "generate";
    const char *model_path = NULL, *prompt = NULL, *file = NULL;
    cli_loras loras = {0};
    bool chat_mode = false, raw = false, no_bos = false, truncate = false, verbose = false, profile = false;
    const char *tmpl_name = NULL;  // --chat-template: a built-in layout
    int64_t n_predict = 128, n_ctx = 0, n_threads = 0, repeat_last_n = 64;
    rg_device device = RG_DEVICE_CPU;
    rg_flash_attn_mode flash = RG_FLASH_ATTN_AUTO;
    rg_sampler_params sp = rg_sampler_defaults();
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--chat")) { chat_mode = true; continue; }
        if (!strcmp(a, "--raw")) { raw = true; continue; }
        if (!strcmp(a, "--no-bos")) { no_bos = true; continue; }
        if (!strcmp(a, "--truncate")) { truncate = true; continue; }
        if (!strcmp(a, "--verbose-prompt")) { verbose = true; continue; }
        if (!strcmp(a, "--profile")) { profile = true; continue; }
        static const char *const with_value[] = {"-m", "-p", "-f", "-n", "--temp", "--top-k", "--top-p", "--min-p",
                                                 "--repeat-penalty", "--repeat-last-n", "--seed", "-c", "-t",
                                                 "--threads", "--device", "--ctx-size", "--n-predict", "--lora",
                                                 "--chat-template", "--flash-attn"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(a, with_value[k]);
        if (!known) {
            fprintf(stderr, "retrograd %s: unknown argument '%s'\n", C, a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "retrograd %s: %s needs a value\n", C, a);
            return 2;
        }
        const char *v = argv[++i];
        bool ok = true;
        int64_t x = 0;
        if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "-p")) prompt = v;
        else if (!strcmp(a, "-f")) file = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) ok = cli_parse_i64(C, a, v, -1, INT64_MAX, &n_predict);
        else if (!strcmp(a, "--temp")) ok = cli_parse_f32(C, a, v, &sp.temp);
        else if (!strcmp(a, "--top-k")) ok = cli_parse_i64(C, a, v, INT32_MIN, INT32_MAX, &x), sp.top_k = (int32_t)x;
        else if (!strcmp(a, "--top-p")) ok = cli_parse_f32(C, a, v, &sp.top_p);
        else if (!strcmp(a, "--min-p")) ok = cli_parse_f32(C, a, v, &sp.min_p);
        else if (!strcmp(a, "--repeat-penalty")) ok = cli_parse_f32(C, a, v, &sp.repeat_penalty);
        else if (!strcmp(a, "--repeat-last-n")) ok = cli_parse_i64(C, a, v, -1, INT32_MAX, &repeat_last_n);
        else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (!*v || *end || errno || v[0] == '-') {
                fprintf(stderr, "retrograd %s: --seed '%s' is not a non-negative integer\n", C, v);
                ok = false;
            }
            sp.seed = s;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) ok = cli_parse_i64(C, a, v, 1, INT32_MAX, &n_ctx);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = cli_parse_i64(C, a, v, 1, 512, &n_threads);
        else if (!strcmp(a, "--device")) ok = cli_parse_device(C, v, &device);
        else if (!strcmp(a, "--flash-attn")) ok = cli_parse_flash_attn(C, v, &flash);
        else if (!strcmp(a, "--lora")) ok = cli_loras_add(C, &loras, v);
        else if (!strcmp(a, "--chat-template")) tmpl_name = v;
        if (!ok) return 2;
    }
    if (!model_path) {
        fprintf(stderr, "retrograd %s: -m MODEL.gguf is required\n", C);
        usage(stderr);
        return 2;
    }
    if ((prompt != NULL) + (file != NULL) + chat_mode != 1) {
        fprintf(stderr, "retrograd %s: give exactly one of -p TEXT, -f FILE or --chat\n", C);
        usage(stderr);
        return 2;
    }
    rg_error err = {0};
    sp.repeat_last_n = repeat_last_n < 0 ? 0 : (int32_t)repeat_last_n;  // -1 is resolved below
    if (rg_sampler_params_check(&sp, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        return 2;
    }

    size_t text_len = 0;
    char *text = NULL;
    if (file) {
        text = cli_read_file(file, &text_len);
        if (!text) {
            fprintf(stderr, "retrograd %s: %s: cannot read the file: %s\n", C, file, strerror(errno));
            return 1;
        }
    } else if (prompt) {
        text_len = strlen(prompt);
    }
    const char *input = file ? text : prompt;
    if (input) {
        size_t bad = rg_utf8_first_invalid(input, text_len);
        if (bad < text_len)
            fprintf(stderr, "retrograd %s: warning: the prompt is not valid UTF-8 (first invalid byte at offset %zu); "
                            "it is tokenized byte by byte\n", C, bad);
    }

    gen g = {.cmd = C, .n_predict = n_predict, .truncate = truncate, .last_newline = true, .verbose_prompt = verbose};
    rg_chat_template tmpl = {0};
    bool have_tmpl = false;
    rg_lora *lora = NULL;
    float lora_scale = 1.0f;
    int rc = 1;
    if (rg_model_load(&g.model, model_path, &err) || rg_tokenizer_load(&g.tok, g.model->file, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        goto done;
    }
    g.info = rg_tokenizer_get_info(g.tok);
    g.add_bos = g.info->add_bos && !no_bos;
    g.n_vocab = g.model->hp.n_vocab;
    g.n_ctx = n_ctx > 0 ? n_ctx : cli_default_ctx(g.model);
    if (n_ctx > 0 && g.model->hp.n_ctx_train > 0 && n_ctx > g.model->hp.n_ctx_train)
        fprintf(stderr, "retrograd %s: warning: -c %" PRId64 " is beyond the %" PRId64 " tokens the model was trained on\n",
                C, n_ctx, g.model->hp.n_ctx_train);
    if (repeat_last_n < 0) sp.repeat_last_n = (int32_t)g.n_ctx;
    if (!raw || chat_mode) {
        const char *bos = g.info->bos >= 0 ? rg_token_text(g.tok, g.info->bos, NULL) : NULL;
        rg_status st = tmpl_name ? rg_chat_template_builtin(&tmpl, tmpl_name, bos, &err)
                                 : rg_chat_template_from_tokenizer(&tmpl, g.tok, &err);
        if (!st) have_tmpl = true;
        else if (tmpl_name) {
            fprintf(stderr, "retrograd %s: --chat-template: %s\n", C, err.msg);
            goto done;
        }
        else if (chat_mode) {
            fprintf(stderr, "retrograd %s: --chat needs the model's chat template: %s\n", C, err.msg);
            goto done;
        } else {
            fprintf(stderr, "retrograd %s: warning: %s; the prompt is used as is (as with --raw)\n", C, err.msg);
        }
    }
    rc = cli_loras_load(C, &loras, g.model, &lora, &lora_scale);
    if (rc) goto done;
    rc = 1;
    rg_exec_profile prof = {0};
    rg_session_opts so = {.n_ctx = g.n_ctx, .n_threads = (int)n_threads, .device = device, .lora = lora,
                          .lora_scale = lora_scale, .profile = profile ? &prof : NULL, .flash_attn = flash};
    if (rg_session_create(&g.sess, g.model, &so, &err) ||
        rg_sampler_create(&g.smp, &sp, (int32_t)g.n_vocab, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        goto done;
    }
    g.logits = malloc((size_t)g.n_vocab * sizeof *g.logits);
    g.piece_cap = rg_detok_stream_max_out(g.tok);
    g.piece = malloc(g.piece_cap);
    if (!g.logits || !g.piece) {
        fprintf(stderr, "retrograd %s: out of memory\n", C);
        goto done;
    }
    rc = chat_mode ? chat(&g, &tmpl) : one_shot(&g, input, text_len, have_tmpl ? &tmpl : NULL);
    if (profile) {
        fprintf(stderr, "retrograd %s: ", C);
        rg_exec_profile_print(&prof, stderr);
    }
done:
    if (have_tmpl) rg_chat_template_free(&tmpl);
    free(g.logits);
    free(g.piece);
    rg_sampler_free(g.smp);
    rg_session_free(g.sess);
    rg_lora_free(lora);
    rg_tokenizer_free(g.tok);
    rg_model_free(g.model);
    free(text);
    return rc;
}
