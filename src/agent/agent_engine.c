// agent_engine.c - the agent's generator on a one-slot engine (agent_engine.h).
#include <stdlib.h>
#include <string.h>

#include "agent/agent_engine.h"
#include "base/error.h"
#include "base/json_write.h"
#include "infer/engine.h"

struct rg_agent_engine {
    rg_agent_engine_opts o;
    rg_engine *engine;
    int32_t *eog;           // [n_eog]: the model's end-of-generation tokens
    int n_eog;
    // the request in flight, filled by on_event
    int id;
    rg_detok_stream ds;
    char *piece;            // [piece_cap]
    size_t piece_cap;
    rg_jw text;             // the decoded reply so far
    bool ended;
    rg_finish finish;
    int64_t n_prompt, n_cached;
    char error[512];
};

static void on_event(void *user, const rg_engine_event *ev) {
    rg_agent_engine *e = user;
    if (ev->id != e->id || e->ended) return;
    if (ev->finish != RG_FINISH_NONE) {
        e->ended = true;
        e->finish = ev->finish;
        e->n_prompt = ev->n_prompt;
        e->n_cached = ev->n_cached;
        if (ev->error) snprintf(e->error, sizeof e->error, "%s", ev->error);
        const int64_t n = rg_detok_stream_flush(&e->ds, e->piece, e->piece_cap);
        if (n > 0) rg_jw_text_append(&e->text, e->piece, (size_t)n);
        return;
    }
    const int64_t n = rg_detok_stream_push(&e->ds, ev->token, e->piece, e->piece_cap);
    if (n > 0) rg_jw_text_append(&e->text, e->piece, (size_t)n);
}

rg_status rg_agent_engine_create(rg_agent_engine **out, const rg_agent_engine_opts *opts, rg_error *err) {
    *out = NULL;
    rg_agent_engine *e = calloc(1, sizeof *e);
    if (!e) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    e->o = *opts;
    if (e->o.max_tokens <= 0) e->o.max_tokens = 1024;
    rg_jw_init(&e->text);
    e->eog = malloc(sizeof *e->eog * 64);
    e->piece_cap = rg_detok_stream_max_out(opts->tok);
    e->piece = malloc(e->piece_cap);
    if (!e->eog || !e->piece) {
        rg_agent_engine_free(e);
        return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    }
    e->n_eog = rg_token_eog_ids(opts->tok, e->eog, 64);
    rg_engine_opts eo = {.n_slots = 1, .n_ctx = opts->n_ctx, .n_threads = opts->n_threads, .device = opts->device,
                         .lora = opts->lora, .lora_scale = opts->lora ? opts->lora_scale : 1.0f,
                         .on_event = on_event, .user = e};
    rg_status st = rg_engine_create(&e->engine, opts->model, &eo, err);
    if (st) {
        rg_agent_engine_free(e);
        return st;
    }
    *out = e;
    return RG_OK;
}

void rg_agent_engine_free(rg_agent_engine *e) {
    if (!e) return;
    rg_engine_free(e->engine);
    rg_jw_free(&e->text);
    free(e->piece);
    free(e->eog);
    free(e);
}

// The rendered conversation's tokens (malloc'd).
static rg_status prompt_tokens(rg_agent_engine *e, const rg_chat_message *msgs, size_t n_msgs, const rg_json *tools,
                               int32_t **ids, size_t *n, rg_error *err) {
    rg_chat_rendered r = {0};
    rg_chat_options co = {.add_generation_prompt = true, .tools = tools};
    rg_status st = rg_chat_render(e->o.tmpl, msgs, n_msgs, &co, &r, err);
    if (st) return st;
    st = rg_tokenize_alloc(e->o.tok, r.text, r.len, false, true, ids, n, err);
    rg_chat_rendered_free(&r);
    if (st) return st;
    const rg_tokenizer_info *info = rg_tokenizer_get_info(e->o.tok);
    if (info->add_bos && info->bos >= 0 && (*n == 0 || (*ids)[0] != info->bos)) {
        int32_t *b = realloc(*ids, (*n + 1) * sizeof *b);
        if (!b) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
        memmove(b + 1, b, *n * sizeof *b);
        b[0] = info->bos;
        *ids = b;
        (*n)++;
    }
    return RG_OK;
}

rg_status rg_agent_engine_generate(void *engine, const rg_chat_message *msgs, size_t n_msgs, const rg_json *tools,
                                   rg_agent_gen *out, rg_error *err) {
    rg_agent_engine *e = engine;
    int32_t *ids = NULL;
    size_t n = 0;
    rg_status st = prompt_tokens(e, msgs, n_msgs, tools, &ids, &n, err);
    if (st) {
        char inner[sizeof err->msg];
        memcpy(inner, err->msg, sizeof inner);
        return rg_fail(err, st, "agent: rendering the conversation: %s", inner);
    }
    const int64_t n_ctx = rg_engine_n_ctx(e->engine);
    if ((int64_t)n >= n_ctx) {
        free(ids);
        return rg_fail(err, RG_ERR_ARG, "agent: the conversation is %zu tokens, more than the context of %lld "
                       "(-c) leaves room for", n, (long long)n_ctx);
    }
    rg_engine_request r = {.prompt = ids, .n_prompt = (int64_t)n, .sampling = e->o.sampling,
                           .max_tokens = e->o.max_tokens, .stop = e->eog, .n_stop = e->n_eog};
    rg_jw_reset(&e->text);
    rg_detok_stream_init(&e->ds, e->o.tok, false);
    e->ended = false;
    e->error[0] = '\0';
    e->id = -1;
    st = rg_engine_submit(e->engine, &r, &e->id, err);
    free(ids);
    if (st) {
        char inner[sizeof err->msg];
        memcpy(inner, err->msg, sizeof inner);
        return rg_fail(err, st, "agent: %s", inner);
    }
    while (!e->ended && !st) st = rg_engine_step(e->engine, err);
    if (st) return st;
    if (e->finish == RG_FINISH_ERROR) return rg_fail(err, RG_ERR_IO, "agent: generation failed: %s", e->error);
    if (rg_jw_failed(&e->text)) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    size_t len;
    const char *text = rg_jw_text(&e->text, &len);
    out->text = malloc(len + 1);
    if (!out->text) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    if (len) memcpy(out->text, text, len);
    out->text[len] = '\0';
    out->len = len;
    out->n_prompt = e->n_prompt;
    out->n_reused = e->n_cached;
    return RG_OK;
}
