// serve_gen.c - one request's generation on the connection's side: the prompt it asks for (the chat template or
// the completion prompt), the engine's tokens turned into text with the request's stop strings, and the replies
// in OpenAI's shapes (one JSON object, or server-sent-event chunks ending in "data: [DONE]").
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/server_internal.h"
#include "text/tool_calls.h"

void gen_free(gen *g) {
    rg_serve_req_free(&g->req);
    free(g->prompt);
    free(g->piece);
    free(g->text);
    free(g->evs);
    free(g->lps);
    if (g->calls) rg_tool_calls_free(g->calls);
    free(g->calls);
    pthread_cond_destroy(&g->cv);
    free(g);
}

void gen_release(gen *g) {
    rg_server *s = g->srv;
    pthread_mutex_lock(&s->mu);
    const bool last = --g->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) gen_free(g);
}

// The request's model: the server's id or its file's name.
static bool model_known(const rg_server *s, const char *m) {
    if (strcmp(m, s->alias) == 0) return true;
    const char *b = strrchr(s->o.model_path, '/');
    return strcmp(m, b ? b + 1 : s->o.model_path) == 0;
}

rg_status gen_render_chat(rg_server *s, const rg_serve_req *r, rg_chat_rendered *out, rg_serve_error *e) {
    if (!s->have_tmpl) {
        rg_serve_fail(e, 400, "messages", "this model has no chat template this server can render (%s); use "
                                          "/v1/completions", s->tmpl_error);
        return RG_ERR_UNSUPPORTED;
    }
    rg_chat_message *m = calloc(r->n_messages, sizeof *m);
    if (!m) {
        rg_serve_fail(e, 500, "", "out of memory");
        return RG_ERR_NOMEM;
    }
    for (size_t i = 0; i < r->n_messages; i++) {
        m[i].role = r->messages[i].role, m[i].role_len = strlen(r->messages[i].role);
        m[i].content = r->messages[i].content, m[i].content_len = r->messages[i].content_len;
        m[i].tool_calls = r->messages[i].tool_calls;
        if (r->messages[i].name) m[i].name = r->messages[i].name, m[i].name_len = strlen(r->messages[i].name);
    }
    rg_chat_options o = {.add_generation_prompt = true};
    if (r->tool_choice.mode != RG_TOOL_CHOICE_NONE) o.tools = r->tools;
    rg_error err;
    rg_status st = rg_chat_render(&s->tmpl, m, r->n_messages, &o, out, &err);
    free(m);
    if (st) rg_serve_fail(e, 400, "messages", "%s", err.msg);
    return st;
}

static rg_status chat_prompt(rg_server *s, gen *g, rg_serve_error *e) {
    rg_chat_rendered out = {0};
    rg_status st = gen_render_chat(s, &g->req, &out, e);
    if (st) return st;
    rg_error err;
    st = rg_tokenize_alloc(s->tok, out.text, out.len, false, true, &g->prompt, &g->n_prompt_tokens, &err);
    rg_chat_rendered_free(&out);
    if (st) rg_serve_fail(e, 400, "messages", "%s", err.msg);
    return st;
}

static rg_status completion_prompt(rg_server *s, gen *g, rg_serve_error *e) {
    const rg_serve_req *r = &g->req;
    if (r->prompt) {
        rg_error err;
        rg_status st = rg_tokenize_alloc(s->tok, r->prompt, r->prompt_len, true, true, &g->prompt,
                                         &g->n_prompt_tokens, &err);
        if (st) rg_serve_fail(e, 400, "prompt", "%s", err.msg);
        return st;
    }
    const int32_t V = rg_tokenizer_n_tokens(s->tok);
    for (size_t i = 0; i < r->n_prompt_tokens; i++)
        if (r->prompt_tokens[i] >= V) {
            rg_serve_fail(e, 400, "prompt", "'prompt[%zu]' is %d, outside the vocabulary of %d tokens", i,
                          r->prompt_tokens[i], V);
            return RG_ERR_ARG;
        }
    g->prompt = malloc(sizeof(int32_t) * r->n_prompt_tokens);
    if (!g->prompt) {
        rg_serve_fail(e, 500, "", "out of memory");
        return RG_ERR_NOMEM;
    }
    memcpy(g->prompt, r->prompt_tokens, sizeof(int32_t) * r->n_prompt_tokens);
    g->n_prompt_tokens = r->n_prompt_tokens;
    return RG_OK;
}

rg_status gen_prepare(rg_server *s, gen *g, rg_serve_error *e) {
    rg_serve_req *r = &g->req;
    if (!model_known(s, r->model) && !server_adapter_named(s, r->model)) {
        rg_serve_fail(e, 404, "model", "the model '%s' does not exist; this server has '%s' and its fine-tuned "
                                       "models (GET /v1/models)", r->model, s->alias);
        e->code = "model_not_found";
        return RG_ERR_NOT_FOUND;
    }
    if (!server_request_scales(s, r->model, r, g->scales, g->serials, e)) return RG_ERR_NOT_FOUND;
    g->model_id = model_known(s, r->model) ? s->alias : r->model;
    rg_status st = r->kind == RG_SERVE_CHAT ? chat_prompt(s, g, e) : completion_prompt(s, g, e);
    if (st) return st;
    if (g->n_prompt_tokens == 0) {
        rg_serve_fail(e, 400, r->kind == RG_SERVE_CHAT ? "messages" : "prompt", "the prompt has no tokens");
        return RG_ERR_ARG;
    }
    if ((int64_t)g->n_prompt_tokens >= s->n_ctx) {
        rg_serve_fail(e, 400, r->kind == RG_SERVE_CHAT ? "messages" : "prompt",
                      "the prompt is %lld tokens; a slot's context is %lld tokens and must leave room for at least "
                      "one more", (long long)g->n_prompt_tokens, (long long)s->n_ctx);
        e->code = "context_length_exceeded";
        return RG_ERR_ARG;
    }
    static atomic_ullong counter;
    const unsigned long long k = atomic_fetch_add(&counter, 1) + 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (!r->seed_given)  // a fresh seed per request, reported back so the request can be replayed
        r->sampling.seed = ((uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull) ^ (k << 32) ^ (uint64_t)ts.tv_sec;
    snprintf(g->id, sizeof g->id, "%s-%llx%08llx", r->kind == RG_SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)ts.tv_sec, k);
    g->created = (int64_t)ts.tv_sec;
    g->er = (rg_engine_request){.prompt = g->prompt, .n_prompt = (int64_t)g->n_prompt_tokens, .sampling = r->sampling,
                                .max_tokens = r->max_tokens, .stop = s->eog, .n_stop = s->n_eog,
                                .logprobs = r->logprobs, .top_logprobs = r->top_logprobs};
    g->buffered = r->tools && r->tool_choice.mode != RG_TOOL_CHOICE_NONE;
    g->piece_cap = rg_detok_stream_max_out(s->tok);
    g->piece = malloc(g->piece_cap);
    if (!g->piece) {
        rg_serve_fail(e, 500, "", "out of memory");
        return RG_ERR_NOMEM;
    }
    rg_detok_stream_init(&g->ds, s->tok, false);
    return RG_OK;
}

// ---------------------------------------------------------------------------------------------------------------
// Text, stop strings

static bool text_append(gen *g, const char *p, size_t n) {
    if (g->text_len + n + 1 > g->text_cap) {
        size_t cap = g->text_cap ? g->text_cap : 256;
        while (cap < g->text_len + n + 1) cap *= 2;
        char *t = realloc(g->text, cap);
        if (!t) return false;
        g->text = t, g->text_cap = cap;
    }
    memcpy(g->text + g->text_len, p, n);
    g->text_len += n;
    g->text[g->text_len] = 0;
    return true;
}

// The earliest stop string in the text not yet sent (a match may begin before it, inside the held-back tail):
// its offset, or SIZE_MAX.
static size_t stop_at(const gen *g) {
    size_t best = SIZE_MAX;
    for (int i = 0; i < g->req.n_stop; i++) {
        const size_t n = g->req.stop_len[i];
        const size_t from = g->sent;
        for (size_t p = from; p + n <= g->text_len && p < best; p++)
            if (memcmp(g->text + p, g->req.stop[i], n) == 0) {
                best = p;
                break;
            }
    }
    return best;
}

// How much of the text may be sent now: all but a tail that could still grow into a stop string.
static size_t sendable(const gen *g) {
    size_t hold = 0;
    for (int i = 0; i < g->req.n_stop; i++) {
        const size_t n = g->req.stop_len[i];
        for (size_t k = n - 1; k > hold; k--)  // the longest proper prefix of stop[i] that ends the text
            if (k <= g->text_len - g->sent && memcmp(g->text + g->text_len - k, g->req.stop[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return g->text_len - hold;
}

// ---------------------------------------------------------------------------------------------------------------
// Replies

void gen_head(gen *g, rg_jw *w, bool chunk) {
    const bool chat = g->req.kind == RG_SERVE_CHAT;
    rg_jw_kstr(w, "id", g->id);
    rg_jw_kstr(w, "object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    rg_jw_ki64(w, "created", g->created);
    rg_jw_kstr(w, "model", g->model_id ? g->model_id : g->srv->alias);
    rg_jw_kstr(w, "system_fingerprint", "retrograd-" RG_VERSION_STRING);
}

static void token_bytes(rg_jw *w, const char *p, size_t n) {
    rg_jw_key(w, "bytes");
    rg_jw_arr(w);
    for (size_t i = 0; i < n; i++) rg_jw_i64(w, (unsigned char)p[i]);
    rg_jw_arr_end(w);
}

// The logprobs of tokens [from, to) of g->lps: chat's {"content": [...]} or the legacy completions object.
void gen_logprobs_json(gen *g, rg_jw *w, int from, int to) {
    const rg_tokenizer *tok = g->srv->tok;
    char piece[256];
    rg_jw_key(w, "logprobs");
    if (!g->req.logprobs) {
        rg_jw_null(w);
        return;
    }
    rg_jw_obj(w);
    if (g->req.kind == RG_SERVE_CHAT) {
        rg_jw_key(w, "content");
        rg_jw_arr(w);
        for (int i = from; i < to; i++) {
            const gen_event *ev = &g->lps[i];
            size_t n = rg_token_to_piece(tok, ev->token, false, piece, sizeof piece);
            n = n < sizeof piece ? n : sizeof piece;
            rg_jw_obj(w);
            rg_jw_key(w, "token"), rg_jw_strn(w, piece, n);
            rg_jw_kf64(w, "logprob", ev->logprob);
            token_bytes(w, piece, n);
            rg_jw_key(w, "top_logprobs");
            rg_jw_arr(w);
            for (int k = 0; k < ev->n_top; k++) {
                size_t m = rg_token_to_piece(tok, ev->top_id[k], false, piece, sizeof piece);
                m = m < sizeof piece ? m : sizeof piece;
                rg_jw_obj(w);
                rg_jw_key(w, "token"), rg_jw_strn(w, piece, m);
                rg_jw_kf64(w, "logprob", ev->top_logprob[k]);
                token_bytes(w, piece, m);
                rg_jw_obj_end(w);
            }
            rg_jw_arr_end(w);
            rg_jw_obj_end(w);
        }
        rg_jw_arr_end(w);
    } else {
        rg_jw_key(w, "tokens");
        rg_jw_arr(w);
        for (int i = from; i < to; i++) {
            size_t n = rg_token_to_piece(tok, g->lps[i].token, false, piece, sizeof piece);
            rg_jw_strn(w, piece, n < sizeof piece ? n : sizeof piece);
        }
        rg_jw_arr_end(w);
        rg_jw_key(w, "token_logprobs");
        rg_jw_arr(w);
        for (int i = from; i < to; i++) rg_jw_f64(w, g->lps[i].logprob);
        rg_jw_arr_end(w);
        rg_jw_key(w, "top_logprobs");
        rg_jw_arr(w);
        for (int i = from; i < to; i++) {
            rg_jw_obj(w);
            for (int k = 0; k < g->lps[i].n_top; k++) {
                size_t m = rg_token_to_piece(tok, g->lps[i].top_id[k], false, piece, sizeof piece);
                m = m < sizeof piece - 1 ? m : sizeof piece - 1;
                piece[m] = 0;
                if (strlen(piece) != m) continue;  // a key cannot hold NUL bytes
                rg_jw_kf64(w, piece, g->lps[i].top_logprob[k]);
            }
            rg_jw_obj_end(w);
        }
        rg_jw_arr_end(w);
    }
    rg_jw_obj_end(w);
}

void gen_usage_json(gen *g, rg_jw *w) {
    rg_jw_key(w, "usage");
    rg_jw_obj(w);
    rg_jw_ki64(w, "prompt_tokens", (int64_t)g->n_prompt_tokens);
    rg_jw_ki64(w, "completion_tokens", g->n_gen);
    rg_jw_ki64(w, "total_tokens", (int64_t)g->n_prompt_tokens + g->n_gen);
    rg_jw_key(w, "prompt_tokens_details");
    rg_jw_obj(w);
    rg_jw_ki64(w, "cached_tokens", g->n_cached);
    rg_jw_obj_end(w);
    rg_jw_obj_end(w);
}

// The frame of a reply with one choice: [data: ]{id..., "choices": [{"index": 0, ... then its end: the finish
// reason, and for a whole reply the usage.
void gen_choice_open(gen *g, rg_jw *w, bool chunk) {
    if (chunk) rg_jw_text_append(w, "data: ", 6);
    rg_jw_obj(w);
    gen_head(g, w, chunk);
    rg_jw_key(w, "choices");
    rg_jw_arr(w);
    rg_jw_obj(w);
    rg_jw_ki64(w, "index", 0);
}

void gen_choice_close(gen *g, rg_jw *w, const char *finish, bool chunk) {
    rg_jw_key(w, "finish_reason");
    rg_jw_str(w, finish);
    rg_jw_obj_end(w);
    rg_jw_arr_end(w);
    if (!chunk) gen_usage_json(g, w);
    rg_jw_obj_end(w);
    if (chunk) rg_jw_text_append(w, "\n\n", 2);
}

// One SSE chunk with text [a, b) of g->text and the logprobs not yet sent; finish (or NULL).
void gen_sse_chunk(gen *g, rg_jw *w, size_t a, size_t b, const char *finish, bool role) {
    gen_choice_open(g, w, true);
    if (g->req.kind == RG_SERVE_CHAT) {
        rg_jw_key(w, "delta");
        rg_jw_obj(w);
        if (role) rg_jw_kstr(w, "role", "assistant");
        if (b > a || role) {
            rg_jw_key(w, "content");
            rg_jw_strn(w, g->text ? g->text + a : "", b - a);
        }
        rg_jw_obj_end(w);
    } else {
        rg_jw_key(w, "text");
        rg_jw_strn(w, g->text ? g->text + a : "", b - a);
    }
    gen_logprobs_json(g, w, g->lp_sent, g->n_lps);
    g->lp_sent = g->n_lps;
    gen_choice_close(g, w, finish, true);
}

void gen_sse_usage(gen *g, rg_jw *w) {
    rg_jw_text_append(w, "data: ", 6);
    rg_jw_obj(w);
    gen_head(g, w, true);
    rg_jw_key(w, "choices");
    rg_jw_arr(w);
    rg_jw_arr_end(w);
    gen_usage_json(g, w);
    rg_jw_obj_end(w);
    rg_jw_text_append(w, "\n\n", 2);
}

void gen_whole_reply(gen *g, rg_jw *w) {
    gen_choice_open(g, w, false);
    if (g->req.kind == RG_SERVE_CHAT) {
        rg_jw_key(w, "message");
        rg_jw_obj(w);
        rg_jw_kstr(w, "role", "assistant");
        rg_jw_key(w, "content");
        rg_jw_strn(w, g->text ? g->text : "", g->text_len);
        rg_jw_obj_end(w);
    } else {
        rg_jw_key(w, "text");
        rg_jw_strn(w, g->text ? g->text : "", g->text_len);
    }
    gen_logprobs_json(g, w, 0, g->n_lps);
    gen_choice_close(g, w, g->finish_reason, false);
}

static void error_reply(gen *g, rg_jw *w, const char *msg) {
    rg_serve_error e;
    rg_serve_fail(&e, g->error_http ? g->error_http : 500, "", "generation failed: %s", msg);
    if (g->req.stream) rg_jw_text_append(w, "data: ", 6);
    rg_jw_obj(w);
    rg_jw_key(w, "error");
    rg_jw_obj(w);
    rg_jw_kstr(w, "message", e.msg);
    rg_jw_kstr(w, "type", e.type);
    rg_jw_key(w, "param"), rg_jw_null(w);
    rg_jw_key(w, "code"), rg_jw_null(w);
    rg_jw_obj_end(w);
    rg_jw_obj_end(w);
    if (g->req.stream) rg_jw_text_append(w, "\n\ndata: [DONE]\n\n", 16);
    g->finish_reason = NULL;
    g->reply_http = e.http;
    g->done = true;
}

// The end: what is left of the text, the finish reason, usage, [DONE].
static void finish(gen *g, rg_jw *w, const char *reason) {
    g->finish_reason = reason;
    if (g->buffered) gen_tool_calls(g);
    if (g->req.stream) {
        if (g->buffered) gen_tool_chunks(g, w);
        else gen_sse_chunk(g, w, g->sent, g->text_len, g->finish_reason, false);
        g->sent = g->text_len;
        if (g->req.include_usage) gen_sse_usage(g, w);
        rg_jw_text_append(w, "data: [DONE]\n\n", 14);
    } else if (g->buffered) {
        gen_tool_reply(g, w);
    } else {
        gen_whole_reply(g, w);
    }
    g->done = true;
}

// Waits for the generation's next event; false when the submission failed (g->error says why).
static bool next_event(gen *g, gen_event *ev) {
    rg_server *s = g->srv;
    pthread_mutex_lock(&s->mu);
    while (g->head == g->n_evs && !g->ended) {
        if (!g->gone) {
            pthread_cond_wait(&g->cv, &s->mu);
            continue;
        }
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        const double now = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
        if (now - g->gone_checked >= 0.2) {  // every 200 ms, however often tokens come
            g->gone_checked = now;
            pthread_mutex_unlock(&s->mu);
            const bool gone = g->gone(g->gone_user);  // (a socket check: not under the mutex)
            pthread_mutex_lock(&s->mu);
            if (gone && !g->ended) {  // the client left: stop generating for nobody
                g->cancel = true;
                g->gone = NULL;
                pthread_cond_signal(&s->work);
            }
            continue;
        }
        t.tv_nsec += 200 * 1000 * 1000;
        if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &s->mu, &t);
    }
    const bool have = g->head < g->n_evs;
    if (have) *ev = g->evs[g->head++];
    pthread_mutex_unlock(&s->mu);
    return have;
}

static bool keep_logprob(gen *g, const gen_event *ev) {
    if (g->n_lps == g->cap_lps) {
        const int cap = g->cap_lps ? 2 * g->cap_lps : 64;
        gen_event *l = realloc(g->lps, sizeof *l * (size_t)cap);
        if (!l) return false;
        g->lps = l, g->cap_lps = cap;
    }
    g->lps[g->n_lps++] = *ev;
    return true;
}

bool gen_next(gen *g, rg_jw *w) {
    if (g->done) return false;
    if (g->req.stream && !g->started && g->req.kind == RG_SERVE_CHAT && !g->buffered) {
        g->started = true;
        gen_sse_chunk(g, w, 0, 0, NULL, true);
        return true;
    }
    gen_event ev;
    if (!next_event(g, &ev)) {
        error_reply(g, w, g->error);
        return false;
    }
    if (ev.finish != RG_FINISH_NONE) {
        const int64_t n = rg_detok_stream_flush(&g->ds, g->piece, g->piece_cap);
        if (n > 0 && !text_append(g, g->piece, (size_t)n)) {
            error_reply(g, w, "out of memory");
            return false;
        }
        if (ev.finish == RG_FINISH_ERROR) {
            error_reply(g, w, g->error);
            return false;
        }
        if (ev.finish == RG_FINISH_CANCELLED) {
            error_reply(g, w, "cancelled (the server is shutting down)");
            return false;
        }
        const size_t at = stop_at(g);
        if (at != SIZE_MAX) g->text_len = at;
        finish(g, w, at != SIZE_MAX || ev.finish == RG_FINISH_STOP ? "stop" : "length");
        return false;
    }
    g->n_gen++;
    if (g->req.logprobs && !keep_logprob(g, &ev)) {
        server_cancel(g->srv, g);
        error_reply(g, w, "out of memory");
        return false;
    }
    const int64_t n = rg_detok_stream_push(&g->ds, ev.token, g->piece, g->piece_cap);
    if (n > 0 && !text_append(g, g->piece, (size_t)n)) {
        server_cancel(g->srv, g);
        error_reply(g, w, "out of memory");
        return false;
    }
    const size_t at = stop_at(g);
    if (at != SIZE_MAX) {  // a stop string: the text ends before it, and the slot is freed
        g->text_len = at;
        server_cancel(g->srv, g);
        finish(g, w, "stop");
        return false;
    }
    if (g->req.stream && !g->buffered) {
        const size_t upto = sendable(g);
        if (upto > g->sent || g->lp_sent < g->n_lps) {
            gen_sse_chunk(g, w, g->sent, upto, NULL, false);
            g->sent = upto;
        }
    }
    return true;
}
