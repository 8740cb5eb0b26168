// generate_turn.c - one turn of `retrograd generate`: the prompt's tokens fitted to the
// context and evaluated, then tokens drawn and streamed to stdout until -n, an
// end-of-generation token or a full context (generate.h).
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "generate.h"
#include "infer/speculative.h"

void gen_emit(gen *g, const char *p, int64_t n) {
    if (n <= 0) return;
    fwrite(p, 1, (size_t)n, stdout);
    fflush(stdout);
    g->last_newline = p[n - 1] == '\n';
}

rg_status gen_tokenize(gen *g, const char *text, size_t len, bool bos, int32_t **ids, size_t *n, rg_error *err) {
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

// --verbose-prompt: the n tokens about to be evaluated, with their pieces escaped, on stderr.
static void print_prompt_tokens(gen *g, const int32_t *ids, int64_t n) {
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

// The ids of an answer, kept for the chat's history.
typedef struct id_list {
    int32_t *ids;
    size_t n, cap;
} id_list;

static bool ids_push(id_list *l, int32_t id) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        int32_t *b = realloc(l->ids, cap * sizeof *b);
        if (!b) return false;
        l->ids = b, l->cap = cap;
    }
    l->ids[l->n++] = id;
    return true;
}

// ts->reply: the answer's ids decoded (no streaming state: the whole text at once).
static rg_status decode_reply(gen *g, const id_list *l, turn_stats *ts, rg_error *err) {
    size_t need = rg_detokenize(g->tok, l->ids, l->n, false, NULL, 0);
    ts->reply = malloc(need + 1);
    if (!ts->reply) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    rg_detokenize(g->tok, l->ids, l->n, false, ts->reply, need + 1);
    ts->reply_len = need;
    return RG_OK;
}

// What both loops below do with each token they stream: id into the sampler's history (unless it is there, a kept
// draft), a stop at an end-of-generation token, its piece streamed and kept in reply (when not NULL), and a stop
// at -n (i: the tokens streamed before it) or when the context is full (pos: id's position).
static rg_status take_token(gen *g, int32_t id, bool accept, int64_t i, int64_t pos, turn_stats *ts, id_list *reply,
                            bool *stop, rg_error *err) {
    *stop = true;
    if (accept) rg_sampler_accept(g->smp, id);
    ts->last = id;
    if (rg_token_is_eog(g->tok, id)) {
        ts->eog = true;
        return RG_OK;
    }
    ts->n_gen++;
    gen_emit(g, g->piece, rg_detok_stream_push(&g->stream, id, g->piece, g->piece_cap));
    if (reply && !ids_push(reply, id)) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    if (g->n_predict >= 0 && i + 1 >= g->n_predict) return RG_OK;
    if (pos >= g->n_ctx) {
        ts->ctx_full = true;
        return RG_OK;
    }
    *stop = false;
    return RG_OK;
}

// Streams `id` (drawn from the prompt's logits) and draws and evaluates the tokens after it, until
// -n, an end-of-generation token or a full context; reply (when not NULL) gets every streamed id.
// Each evaluation draws the next token with it (rg_session_eval_sample: on a CUDA device the draw
// runs there and only the id comes back).
static rg_status draw_tokens(gen *g, int32_t id, turn_stats *ts, id_list *reply, rg_error *err) {
    rg_detok_stream_init(&g->stream, g->tok, false);
    g->stream.strip_space = false;  // the text continues the prompt
    rg_status st = RG_OK;
    bool stop = false;
    for (int64_t i = 0; !st && !stop && (g->n_predict < 0 || i < g->n_predict); i++) {
        st = take_token(g, id, true, i, rg_session_n_past(g->sess), ts, reply, &stop, err);
        if (!st && !stop) st = rg_session_eval_sample(g->sess, &id, 1, g->smp, &id, err);
    }
    gen_emit(g, g->piece, rg_detok_stream_flush(&g->stream, g->piece, g->piece_cap));
    return st;
}

// draw_tokens with --draft: each verification (rg_spec_step) evaluates the last drawn token and the drafts in
// one batch and gives the tokens that follow it, the kept drafts (already in the sampler's history) and the
// target's own token; they are streamed one by one under the same stops. A stop inside a verified run leaves
// the session past the last drawn token: it is rewound there with the decoder's context (rg_spec_rewind), as
// draw_tokens leaves it, so a chat's next turn continues both.
static rg_status draw_tokens_spec(gen *g, int32_t id, turn_stats *ts, id_list *reply, rg_error *err) {
    rg_detok_stream_init(&g->stream, g->tok, false);
    g->stream.strip_space = false;
    int64_t pos = rg_session_n_past(g->sess);  // id's position: it is drawn, not evaluated
    int64_t n_q = 0, i_q = 0;                  // g->spec_out[i_q..n_q): verified tokens still to stream
    bool in_history = false;                   // id is already in the sampler's history (a kept draft)
    rg_status st = RG_OK;
    bool stop = false;
    for (int64_t i = 0; !st && !stop && (g->n_predict < 0 || i < g->n_predict); i++) {
        st = take_token(g, id, !in_history, i, pos, ts, reply, &stop, err);
        if (st || stop) break;
        if (i_q == n_q) {  // verify the next drafts; no more than the tokens still wanted
            int64_t left = g->n_predict < 0 ? INT64_MAX : g->n_predict - (i + 1);
            if ((st = rg_spec_step(g->spec, id, g->smp, left - 1, g->spec_out, &n_q, err))) break;
            i_q = 0;
        }
        id = g->spec_out[i_q++];
        in_history = i_q < n_q;
        pos++;
    }
    gen_emit(g, g->piece, rg_detok_stream_flush(&g->stream, g->piece, g->piece_cap));
    if (!st && rg_session_n_past(g->sess) > pos) st = rg_spec_rewind(g->spec, pos, err);
    return st;
}

rg_status gen_run_turn(gen *g, const int32_t *ids, int64_t n, int64_t skip, bool keep_reply, turn_stats *ts,
                       rg_error *err) {
    memset(ts, 0, sizeof *ts);
    ts->last = -1;
    if (g->verbose_prompt) print_prompt_tokens(g, ids, n);
    for (int64_t i = skip; i < n; i++) rg_sampler_accept(g->smp, ids[i]);
    double t0 = cli_now();
    int32_t first;
    rg_status st = rg_session_eval_sample(g->sess, ids, n, g->smp, &first, err);  // the prompt, its first draw
    if (st) return st;
    double t1 = cli_now();
    ts->n_prompt = n;
    ts->t_prompt = t1 - t0;
    id_list reply = {NULL, 0, 0};
    if (g->spec && (st = rg_spec_push(g->spec, ids, n, err))) return st;
    st = (g->spec ? draw_tokens_spec : draw_tokens)(g, first, ts, keep_reply ? &reply : NULL, err);
    ts->t_gen = cli_now() - t1;
    if (!st && keep_reply) st = decode_reply(g, &reply, ts, err);
    free(reply.ids);
    return st;
}

void gen_print_stats(gen *g, const turn_stats *ts) {
    if (!g->last_newline) fputc('\n', stderr);  // the timings on a line of their own
    if (ts->ctx_full)
        fprintf(stderr, "retrograd %s: note: the context of %" PRId64 " tokens is full; generation stopped (-c sets it)\n",
                g->cmd, g->n_ctx);
    double pr = ts->t_prompt > 0 ? (double)ts->n_prompt / ts->t_prompt : 0;
    double gr = ts->t_gen > 0 ? (double)ts->n_gen / ts->t_gen : 0;
    fprintf(stderr, "prompt: %" PRId64 " tokens in %.2f s (%.1f tok/s) | generation: %" PRId64 " tokens in %.2f s (%.1f tok/s)\n",
            ts->n_prompt, ts->t_prompt, pr, ts->n_gen, ts->t_gen, gr);
    if (g->spec) {
        const rg_spec_stats ss = rg_spec_get_stats(g->spec);
        fprintf(stderr, "speculative: %" PRId64 " drafted, %" PRId64 " accepted (%.1f%%) in %" PRId64
                        " verification batches (%.2f tokens each); generation %.1f tok/s\n",
                ss.n_drafted, ss.n_accepted, ss.n_drafted ? 100.0 * (double)ss.n_accepted / (double)ss.n_drafted : 0.0,
                ss.n_steps, ss.n_steps ? (double)(ss.n_accepted + ss.n_steps) / (double)ss.n_steps : 0.0, gr);
    }
    const rg_tiles_cache_stats tc = rg_session_tiles_stats(g->sess);
    if (tc.entries)  // prompts' BF16/F16 weights on the BF16 tiles, packed once (cpu/tiles_cache.h)
        fprintf(stderr, "bf16 tiles: %" PRId64 " weights held (%.1f MiB), packed once; %" PRId64 " products read them, %" PRId64
                        " packed their own (over the cap)\n",
                tc.entries, (double)tc.bytes / 1048576.0, tc.hits, tc.refused);
    fflush(stderr);
    g->last_newline = true;
}

// Fits a prompt of n tokens into the context after the n_past cached (loaded) ones: an error, or with --truncate
// its last part.
static rg_status fit_prompt(gen *g, int32_t *ids, size_t *n, rg_error *err) {
    const int64_t n_past = rg_session_n_past(g->sess), ctx = g->n_ctx - n_past;  // the room left
    if ((int64_t)*n < ctx) return RG_OK;
    if (ctx < 2)
        return rg_fail(err, RG_ERR_ARG, "-c %" PRId64 " leaves no room to generate%s", g->n_ctx,
                       n_past ? " after the loaded state's tokens" : "");
    if (!g->truncate)
        return rg_fail(err, RG_ERR_ARG,
                       "the prompt is %zu tokens but the context (-c) holds %" PRId64 "%s and at least one more is "
                       "needed to generate: use a larger -c, a shorter prompt, or --truncate to keep its end",
                       *n, ctx, n_past ? " after the loaded state's tokens" : "");
    // keep room for -n tokens, but for no more than half the context
    int64_t room = g->n_predict >= 0 && g->n_predict < ctx / 2 ? g->n_predict : ctx / 2;
    if (room < 1) room = 1;
    size_t keep = (size_t)(ctx - room);
    size_t head = g->add_bos && *n > 0 && ids[0] == g->info->bos ? 1 : 0;  // a BOS stays first
    memmove(ids + head, ids + (*n - (keep - head)), (keep - head) * sizeof *ids);
    fprintf(stderr, "retrograd %s: note: the prompt of %zu tokens was cut to its last %zu to fit -c %" PRId64 "\n",
            g->cmd, *n, keep, g->n_ctx);
    *n = keep;
    return RG_OK;
}

int gen_one_shot(gen *g, const char *text, size_t len, const rg_chat_template *tmpl) {
    rg_error err = {0};
    rg_chat_rendered r = {0};
    const char *in = text;
    size_t in_len = len;
    if (tmpl) {
        rg_chat_message msg = {.role = "user", .role_len = 4, .content = text, .content_len = len};
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
    // After a loaded state the prompt continues its sequence: no BOS.
    rg_status st = gen_tokenize(g, in, in_len, g->add_bos && rg_session_n_past(g->sess) == 0, &ids, &n, &err);
    rg_chat_rendered_free(&r);
    if (!st && n == 0) st = rg_fail(&err, RG_ERR_ARG, "the prompt is empty (no tokens)");
    if (!st) st = fit_prompt(g, ids, &n, &err);
    turn_stats ts = {0};
    if (!st) st = gen_run_turn(g, ids, (int64_t)n, 0, false, &ts, &err);
    free(ids);
    if (st) {
        if (!g->last_newline) fputc('\n', stderr);
        fprintf(stderr, "retrograd %s: %s\n", g->cmd, err.msg);
        return 1;
    }
    gen_print_stats(g, &ts);
    return 0;
}
