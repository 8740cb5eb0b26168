// server.c - see server.h: loading, the engine thread, and the routes other than the generations' own replies
// (serve_gen.c).
#include "serve/server_internal.h"
#include "serve/serve_ft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---------------------------------------------------------------------------------------------------------------
// The engine thread: takes submissions and cancellations, steps the engine while anything is pending, and hands
// each event to its generation's queue.

static void queue_event(gen *g, const gen_event *ev) {
    if (g->n_evs == g->cap_evs) {
        if (g->head > 0) {  // slide the unread events down before growing
            memmove(g->evs, g->evs + g->head, sizeof *g->evs * (size_t)(g->n_evs - g->head));
            g->n_evs -= g->head, g->head = 0;
        }
        if (g->n_evs == g->cap_evs) {
            const int cap = g->cap_evs ? 2 * g->cap_evs : 16;
            gen_event *e = realloc(g->evs, sizeof *e * (size_t)cap);
            if (!e) {
                g->ended = true;
                snprintf(g->error, sizeof g->error, "out of memory queueing a token");
                return;
            }
            g->evs = e, g->cap_evs = cap;
        }
    }
    g->evs[g->n_evs++] = *ev;
}

static gen *active_take(rg_server *s, int eng, int id, bool remove) {
    for (gen **p = &s->active; *p; p = &(*p)->next_active)
        if ((*p)->engine_id == id && (*p)->eng->index == eng) {
            gen *g = *p;
            if (remove) *p = g->next_active;
            return g;
        }
    return NULL;
}

// With the mutex held: every event of the step to its generation; an end drops the engine's reference.
static void dispatch(rg_server *s, step_events *se) {
    for (int i = 0; i < se->n; i++) {
        const rg_engine_event *ev = &se->ev[i];
        gen *g = active_take(s, se->eng[i], ev->id, ev->finish != RG_FINISH_NONE);
        if (!g) continue;
        gen_event ge = {.token = ev->token, .finish = ev->finish, .logprob = ev->logprob, .n_top = ev->n_top};
        memcpy(ge.top_id, ev->top_id, sizeof ge.top_id);
        memcpy(ge.top_logprob, ev->top_logprob, sizeof ge.top_logprob);
        queue_event(g, &ge);
        if (ev->finish == RG_FINISH_NONE) {
            atomic_fetch_add(&s->m_gen_tokens, 1);
        } else {
            g->ended = true;
            s->n_inflight--;
            g->n_prompt = ev->n_prompt, g->n_cached = ev->n_cached;
            if (ev->finish == RG_FINISH_ERROR) snprintf(g->error, sizeof g->error, "%s", se->err[i]);
            atomic_fetch_add(&s->m_prompt_tokens, ev->n_prompt);
            atomic_fetch_add(&s->m_cached_tokens, ev->n_cached);
        }
        pthread_cond_broadcast(&g->cv);
        if (ev->finish != RG_FINISH_NONE && --g->refs == 0) gen_free(g);
    }
    se->n = 0;
}

// Requests the engines hold; also counts, for /metrics, their slots and the slots serving a request.
static int engines_pending(rg_server *s) {
    int n = 0, slots = 0, busy = 0;
    for (int k = 0; k < RG_SERVE_MAX_ENGINES; k++)
        if (s->engines[k].used) {
            n += rg_engine_pending(s->engines[k].engine);
            slots += rg_engine_n_slots(s->engines[k].engine);
            busy += rg_engine_busy(s->engines[k].engine);
        }
    atomic_store(&s->m_slots, slots);
    atomic_store(&s->m_busy, busy);
    return n;
}

// A submission the engine thread could not take: its generation ends with the error.
static void submit_failed(rg_server *s, gen *g, const char *msg, int http) {
    pthread_mutex_lock(&s->mu);
    g->ended = true;
    g->error_http = http;
    snprintf(g->error, sizeof g->error, "%s", msg);
    s->n_inflight--;
    pthread_cond_broadcast(&g->cv);
    if (--g->refs == 0) gen_free(g);
    pthread_mutex_unlock(&s->mu);
}

static void *engine_main(void *arg) {
    rg_server *s = arg;
    step_events *se = &s->se;
    pthread_mutex_lock(&s->mu);
    while (!s->quit) {
        // Submissions and cancellations (engine calls without the mutex: their events go to se).
        gen *sub = s->submit_head;
        s->submit_head = s->submit_tail = NULL;
        pthread_mutex_unlock(&s->mu);
        for (gen *g = sub, *next; g; g = next) {
            next = g->next_submit;
            rg_error err;
            serve_engine *eng = server_engine_for(s, g->scales, &err);
            if (!eng || rg_engine_submit(eng->engine, &g->er, &g->engine_id, &err)) {
                // every engine busy with other adapters: a retry later succeeds (503); else the request (400)
                submit_failed(s, g, err.msg, !eng && err.status == RG_ERR_ARG ? 503 : eng ? 400
                                             : err.status == RG_ERR_NOT_FOUND ? 404 : 500);
                continue;
            }
            g->eng = eng;
            g->next_active = s->active;
            s->active = g;
        }
        pthread_mutex_lock(&s->mu);
        server_run_slot_ops(s);
        server_reap_adapters(s);
        for (gen *g = s->active; g; g = g->next_active)
            if (g->cancel) {
                g->cancel = false;
                pthread_mutex_unlock(&s->mu);
                rg_engine_cancel(g->eng->engine, g->engine_id);
                pthread_mutex_lock(&s->mu);
            }
        dispatch(s, se);
        if (engines_pending(s) == 0) {
            if (!s->submit_head && !s->ops && !s->quit && !s->reap) pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        // One step of every engine with work (each configuration's batch in turn).
        rg_status st = RG_OK;
        rg_error err;
        for (int k = 0; k < RG_SERVE_MAX_ENGINES && !st; k++)
            if (s->engines[k].used && rg_engine_pending(s->engines[k].engine) > 0) {
                st = rg_engine_step(s->engines[k].engine, &err);
                atomic_fetch_add(&s->m_steps, 1);
            }
        pthread_mutex_lock(&s->mu);
        dispatch(s, se);
        if (st) {  // an engine cannot go on (out of memory): end everything held
            fprintf(stderr, "retrograd serve: engine step failed: %s\n", err.msg);
            for (gen *g = s->active; g; g = g->next_active) g->cancel = true;
        }
    }
    // Quit: refuse waiting slot operations, end every generation still held.
    for (slot_op *op = s->ops; op; op = op->next) {
        op->st = RG_ERR_IO, op->done = true;
        snprintf(op->msg, sizeof op->msg, "the server is shutting down");
    }
    s->ops = NULL;
    pthread_cond_broadcast(&s->ops_cv);
    pthread_mutex_unlock(&s->mu);
    for (gen *g = s->active; g; g = g->next_active) rg_engine_cancel(g->eng->engine, g->engine_id);
    pthread_mutex_lock(&s->mu);
    dispatch(s, se);
    pthread_mutex_unlock(&s->mu);
    free(se->ev);
    free(se->err);
    free(se->eng);
    return NULL;
}

bool server_submit(rg_server *s, gen *g, rg_serve_error *e) {
    pthread_mutex_lock(&s->mu);
    const int max_queue = s->o.max_queue > 0 ? s->o.max_queue : 64, waiting = s->n_inflight - s->n_slots;
    if (waiting >= max_queue) {
        pthread_mutex_unlock(&s->mu);
        return rg_serve_fail(e, 429, "", "%d requests are already waiting for a slot (the server's --max-queue); "
                                         "retry later", waiting);
    }
    if (s->quit) {
        pthread_mutex_unlock(&s->mu);
        return rg_serve_fail(e, 503, "", "the server is shutting down");
    }
    if (!server_adapters_current(s, g->scales, g->serials)) {
        pthread_mutex_unlock(&s->mu);
        return rg_serve_fail(e, 404, "lora", "an adapter of this request was unloaded while it was being prepared");
    }
    g->refs++;
    s->n_inflight++;
    g->next_submit = NULL;
    if (s->submit_tail) s->submit_tail->next_submit = g;
    else s->submit_head = g;
    s->submit_tail = g;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return true;
}

void server_cancel(rg_server *s, gen *g) {
    pthread_mutex_lock(&s->mu);
    if (!g->ended) {
        g->cancel = true;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
}

// ---------------------------------------------------------------------------------------------------------------
// Loading

static rg_status load(rg_server *s, rg_error *err) {
    rg_status st = rg_model_load(&s->model, s->o.model_path, err);
    if (!st) st = rg_tokenizer_load(&s->tok, s->model->file, err);
    if (st) return st;
    rg_error terr;
    if (rg_chat_template_from_tokenizer(&s->tmpl, s->tok, &terr) == RG_OK) s->have_tmpl = true;
    else snprintf(s->tmpl_error, sizeof s->tmpl_error, "%s", terr.msg);
    s->eog = malloc(sizeof(int32_t) * 64);
    if (!s->eog) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    s->n_eog = rg_token_eog_ids(s->tok, s->eog, 64);
    st = server_load_adapters(s, err);
    if (!st) st = server_agent_start(s, err);
    if (st) return st;
    float base[RG_SERVE_MAX_LORA] = {0};  // the base configuration's engine, made now: it fixes n_ctx, and a model
    for (int i = 0; i < s->n_adapters; i++) base[i] = s->adapters[i].scale;  // that does not fit fails here
    serve_engine *e = server_engine_for(s, base, err);
    if (!e) return err->status;
    s->n_ctx = rg_engine_n_ctx(e->engine);
    return RG_OK;
}

static void *loader_main(void *arg) {
    rg_server *s = arg;
    rg_error err;
    const rg_status st = load(s, &err);
    pthread_mutex_lock(&s->mu);
    if (st) {
        snprintf(s->load_error, sizeof s->load_error, "%s", err.msg);
        s->state = -1;
    } else if (pthread_create(&s->engine_thread, NULL, engine_main, s) != 0) {
        snprintf(s->load_error, sizeof s->load_error, "could not start the engine thread");
        s->state = -1;
    } else {
        s->engine_started = true;
        s->state = 1;
    }
    pthread_cond_broadcast(&s->ready_cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

// The model's id: the alias, or the file's name without its directory and ".gguf".
static char *model_id(const rg_server_opts *o) {
    if (o->alias) return strdup(o->alias);
    const char *b = strrchr(o->model_path, '/');
    b = b ? b + 1 : o->model_path;
    size_t n = strlen(b);
    if (n > 5 && strcmp(b + n - 5, ".gguf") == 0) n -= 5;
    return strndup(b, n);
}

rg_status rg_server_create(rg_server **out, const rg_server_opts *o, rg_error *err) {
    *out = NULL;
    if (!o->model_path) return rg_fail(err, RG_ERR_ARG, "serve: no model (-m MODEL.gguf)");
    rg_server *s = calloc(1, sizeof *s);
    if (!s) return rg_fail(err, RG_ERR_NOMEM, "serve: out of memory");
    s->o = *o;
    s->n_slots = o->n_slots > 0 ? o->n_slots : 1;
    s->alias = model_id(o);
    s->created = (int64_t)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->ready_cv, NULL);
    pthread_cond_init(&s->ops_cv, NULL);
    if (o->files_dir && serve_ft_create(&s->ft, s, o->files_dir, o->max_upload, o->job_threads, err)) {
        rg_server_free(s);
        return err ? err->status : RG_ERR_IO;
    }
    if (pthread_create(&s->loader, NULL, loader_main, s) != 0) {
        rg_server_free(s);
        return rg_fail(err, RG_ERR_NOMEM, "serve: could not start the loading thread");
    }
    s->loader_started = true;
    if (!o->load_in_background && rg_server_wait_ready(s) < 0) {
        rg_fail(err, RG_ERR_IO, "serve: %s", s->load_error);
        rg_server_free(s);
        return err ? err->status : RG_ERR_IO;
    }
    *out = s;
    return RG_OK;
}

int rg_server_wait_ready(rg_server *s) {
    pthread_mutex_lock(&s->mu);
    while (s->state == 0) pthread_cond_wait(&s->ready_cv, &s->mu);
    const int st = s->state;
    pthread_mutex_unlock(&s->mu);
    return st;
}

int rg_server_state(rg_server *s) {
    pthread_mutex_lock(&s->mu);
    const int st = s->state;
    pthread_mutex_unlock(&s->mu);
    return st;
}

const char *rg_server_load_error(rg_server *s) { return s->load_error; }

void rg_server_free(rg_server *s) {
    if (!s) return;
    if (s->loader_started) pthread_join(s->loader, NULL);
    serve_ft_free(s->ft);  // (its worker kills a running training child)
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (s->engine_started) pthread_join(s->engine_thread, NULL);
    server_engines_free(s);
    server_agent_free(s);
    if (s->have_tmpl) rg_chat_template_free(&s->tmpl);
    rg_tokenizer_free(s->tok);
    rg_model_free(s->model);
    free(s->eog);
    free(s->alias);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->ready_cv);
    pthread_cond_destroy(&s->ops_cv);
    free(s);
}

// ---------------------------------------------------------------------------------------------------------------
// Responses

void rg_serve_response_free(rg_serve_response *r) {
    free(r->body);
    if (r->stream) rg_serve_stream_free(r->stream);
    memset(r, 0, sizeof *r);
}

void server_list_open(rg_jw *w) {
    rg_jw_init(w);
    rg_jw_obj(w);
    rg_jw_kstr(w, "object", "list");
    rg_jw_key(w, "data");
    rg_jw_arr(w);
}

void server_json_response(int status, rg_jw *w, rg_serve_response *out) {
    memset(out, 0, sizeof *out);
    out->status = status;
    out->content_type = "application/json";
    if (rg_jw_failed(w)) {
        rg_jw_free(w);
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
        out->status = 500;
        out->body = strdup(oom);
        out->len = out->body ? sizeof oom - 1 : 0;
        return;
    }
    out->body = rg_jw_take(w, &out->len);
}

void rg_server_error_response(const rg_serve_error *e, rg_serve_response *out) {
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_key(&w, "error");
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "message", e->msg);
    rg_jw_kstr(&w, "type", e->type ? e->type : "invalid_request_error");
    rg_jw_key(&w, "param");
    if (e->param[0]) rg_jw_str(&w, e->param);
    else rg_jw_null(&w);
    rg_jw_key(&w, "code");
    rg_jw_str(&w, e->code);
    rg_jw_obj_end(&w);
    rg_jw_obj_end(&w);
    server_json_response(e->http ? e->http : 400, &w, out);
}

void server_fail_response(rg_server *s, rg_serve_response *out, rg_serve_error *e) {
    atomic_fetch_add(&s->m_errors, 1);
    rg_server_error_response(e, out);
}

// ---------------------------------------------------------------------------------------------------------------
// Routes

static void route_health(rg_server *s, rg_serve_response *out) {
    rg_jw w;
    rg_jw_init(&w);
    const int st = rg_server_state(s);
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "status", st == 1 ? "ok" : st == 0 ? "loading model" : "error");
    if (st < 0) rg_jw_kstr(&w, "error", s->load_error);
    rg_jw_obj_end(&w);
    server_json_response(st == 1 ? 200 : 503, &w, out);
}

static void route_models(rg_server *s, rg_serve_response *out) {
    rg_jw w;
    server_list_open(&w);
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "id", s->alias);
    rg_jw_kstr(&w, "object", "model");
    rg_jw_ki64(&w, "created", s->created);
    rg_jw_kstr(&w, "owned_by", "retrograd");
    rg_jw_ki64(&w, "context_length", s->n_ctx);
    rg_jw_obj_end(&w);
    server_models_json(s, &w);
    rg_jw_arr_end(&w);
    rg_jw_obj_end(&w);
    server_json_response(200, &w, out);
}

static void route_metrics(rg_server *s, rg_serve_response *out) {
    rg_jw w;
    rg_jw_init(&w);
    char line[256];
    pthread_mutex_lock(&s->mu);
    const long long inflight = s->n_inflight;
    pthread_mutex_unlock(&s->mu);
    const long long busy = atomic_load(&s->m_busy), waiting = inflight > busy ? inflight - busy : 0;
    const struct {
        const char *name, *type, *help;
        long long v;
    } rows[] = {
        {"retrograd_requests_total", "counter", "Requests answered.", atomic_load(&s->m_requests)},
        {"retrograd_request_errors_total", "counter", "Requests refused or failed.", atomic_load(&s->m_errors)},
        {"retrograd_prompt_tokens_total", "counter", "Prompt tokens of finished generations.",
         atomic_load(&s->m_prompt_tokens)},
        {"retrograd_prompt_tokens_cached_total", "counter", "Prompt tokens a slot's cache already held.",
         atomic_load(&s->m_cached_tokens)},
        {"retrograd_tokens_generated_total", "counter", "Tokens generated.", atomic_load(&s->m_gen_tokens)},
        {"retrograd_engine_steps_total", "counter", "Engine steps (one batch each).", atomic_load(&s->m_steps)},
        {"retrograd_slots", "gauge", "Slots (sequences decoded together), over every adapter configuration's engine.",
         atomic_load(&s->m_slots)},
        {"retrograd_slots_busy", "gauge", "Slots serving a request.", busy},
        {"retrograd_requests_waiting", "gauge", "Requests waiting for a slot.", waiting},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int n = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", rows[i].name, rows[i].help,
                         rows[i].name, rows[i].type, rows[i].name, rows[i].v);
        rg_jw_text_append(&w, line, (size_t)n);
    }
    server_json_response(200, &w, out);
    out->content_type = "text/plain; version=0.0.4";
}

bool server_parse_body(rg_json_doc **doc, const char *body, size_t len, rg_json_type want, rg_serve_error *e) {
    rg_error jerr;
    rg_json_limits jl = {.max_depth = 16, .max_bytes = len + 1};
    if (rg_json_parse(doc, body, len, &jl, &jerr))
        return rg_serve_fail(e, 400, "", "the request body is not valid JSON: %s", jerr.msg);
    if (!rg_json_is(rg_json_root(*doc), want)) {
        rg_json_free(*doc);
        return rg_serve_fail(e, 400, "", "the request body must be a JSON %s",
                             want == RG_JSON_ARRAY ? "array" : "object");
    }
    return true;
}

// POST /tokenize {"content": TEXT, "add_special": bool, "parse_special": bool, "with_pieces": bool}
static void route_tokenize(rg_server *s, const char *body, size_t len, rg_serve_response *out) {
    rg_serve_error e;
    rg_json_doc *doc;
    if (!server_parse_body(&doc, body, len, RG_JSON_OBJECT, &e)) return server_fail_response(s, out, &e);
    const rg_json *r = rg_json_root(doc);
    size_t n;
    const char *text = rg_json_str(rg_json_get(r, "content"), &n);
    const rg_json *as = rg_json_get(r, "add_special"), *ps = rg_json_get(r, "parse_special");
    const bool add_special = as ? rg_json_bool(as) : false, parse_special = ps ? rg_json_bool(ps) : true;
    const bool pieces = rg_json_bool(rg_json_get(r, "with_pieces"));
    if (!text) {
        rg_json_free(doc);
        rg_serve_fail(&e, 400, "content", "'content' (a string) is required");
        return server_fail_response(s, out, &e);
    }
    int32_t *ids = NULL;
    size_t k = 0;
    rg_error err;
    if (rg_tokenize_alloc(s->tok, text, n, add_special, parse_special, &ids, &k, &err)) {
        rg_json_free(doc);
        rg_serve_fail(&e, 400, "content", "%s", err.msg);
        return server_fail_response(s, out, &e);
    }
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_key(&w, "tokens");
    rg_jw_arr(&w);
    char piece[512];
    for (size_t i = 0; i < k; i++) {
        if (!pieces) {
            rg_jw_i64(&w, ids[i]);
            continue;
        }
        size_t pn = rg_token_to_piece(s->tok, ids[i], true, piece, sizeof piece);
        rg_jw_obj(&w);
        rg_jw_ki64(&w, "id", ids[i]);
        rg_jw_key(&w, "piece");
        rg_jw_strn(&w, piece, pn < sizeof piece ? pn : sizeof piece);
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    rg_jw_obj_end(&w);
    free(ids);
    rg_json_free(doc);
    server_json_response(200, &w, out);
}

// POST /detokenize {"tokens": [ids]}
static void route_detokenize(rg_server *s, const char *body, size_t len, rg_serve_response *out) {
    rg_serve_error e;
    rg_json_doc *doc;
    if (!server_parse_body(&doc, body, len, RG_JSON_OBJECT, &e)) return server_fail_response(s, out, &e);
    const rg_json *t = rg_json_get(rg_json_root(doc), "tokens");
    const size_t n = rg_json_len(t);
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    const int32_t V = rg_tokenizer_n_tokens(s->tok);
    bool ok = ids && rg_json_is(t, RG_JSON_ARRAY);
    if (!ok) rg_serve_fail(&e, 400, "tokens", "'tokens' (an array of token ids) is required");
    for (size_t i = 0; ok && i < n; i++) {
        int64_t v;
        if (!rg_json_int64(rg_json_at(t, i), &v) || v < 0 || v >= V)
            ok = rg_serve_fail(&e, 400, "tokens", "'tokens[%zu]' is not a token id in [0, %d)", i, V);
        else ids[i] = (int32_t)v;
    }
    rg_json_free(doc);
    if (!ok) {
        free(ids);
        return server_fail_response(s, out, &e);
    }
    const size_t need = rg_detokenize(s->tok, ids, n, false, NULL, 0);
    char *text = malloc(need + 1);
    if (text) rg_detokenize(s->tok, ids, n, false, text, need + 1);
    free(ids);
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_key(&w, "content");
    rg_jw_strn(&w, text ? text : "", text ? need : 0);
    rg_jw_obj_end(&w);
    free(text);
    server_json_response(200, &w, out);
}

// POST /apply-template: a chat request's prompt as the model's template renders it (what the model is fed).
static void route_apply_template(rg_server *s, const char *body, size_t len, rg_serve_response *out) {
    rg_serve_error e;
    rg_serve_req r;
    if (!rg_serve_req_parse(&r, RG_SERVE_TEMPLATE, body, len, &s->o.limits, &e)) return server_fail_response(s, out, &e);
    rg_chat_rendered text = {0};
    if (gen_render_chat(s, &r, &text, &e)) {
        rg_serve_req_free(&r);
        return server_fail_response(s, out, &e);
    }
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_key(&w, "prompt");
    rg_jw_strn(&w, text.text, text.len);
    rg_jw_obj_end(&w);
    rg_chat_rendered_free(&text);
    rg_serve_req_free(&r);
    server_json_response(200, &w, out);
}

struct rg_serve_stream {
    gen *g;
    rg_jw out;
    size_t off;
};

static void route_generate(rg_server *s, rg_serve_kind kind, const char *body, size_t len, bool (*gone)(void *),
                           void *gone_user, rg_serve_response *out) {
    rg_serve_error e;
    gen *g = calloc(1, sizeof *g);
    if (!g) {
        rg_serve_fail(&e, 500, "", "out of memory");
        return server_fail_response(s, out, &e);
    }
    g->srv = s;
    g->refs = 1;
    pthread_cond_init(&g->cv, NULL);
    if (!rg_serve_req_parse(&g->req, kind, body, len, &s->o.limits, &e) || gen_prepare(s, g, &e) ||
        !server_submit(s, g, &e)) {
        gen_free(g);
        return server_fail_response(s, out, &e);
    }
    if (g->req.stream) {
        rg_serve_stream *st = calloc(1, sizeof *st);
        if (!st) {
            server_cancel(s, g);
            gen_release(g);
            rg_serve_fail(&e, 500, "", "out of memory");
            return server_fail_response(s, out, &e);
        }
        st->g = g;
        rg_jw_init(&st->out);
        out->status = 200;
        out->content_type = "text/event-stream";
        out->stream = st;
        return;
    }
    g->gone = gone, g->gone_user = gone_user;
    rg_jw w;
    rg_jw_init(&w);
    while (gen_next(g, &w)) {
    }
    const int status = g->finish_reason ? 200 : g->reply_http ? g->reply_http : 500;
    gen_release(g);
    server_json_response(status, &w, out);
}

// serve --agent: a chat request without tools of its own is the agent's (serve_agent.c).
static void route_chat_or_agent(rg_server *s, const char *body, size_t len, bool (*gone)(void *), void *gone_user,
                                rg_serve_response *out) {
    rg_json_doc *doc;
    rg_serve_error e;
    if (!server_parse_body(&doc, body, len, RG_JSON_OBJECT, &e)) return server_fail_response(s, out, &e);
    if (server_agent_wants(s, rg_json_root(doc))) server_agent_route(s, rg_json_root(doc), gone, gone_user, out);
    else route_generate(s, RG_SERVE_CHAT, body, len, gone, gone_user, out);
    rg_json_free(doc);
}

ssize_t rg_serve_stream_read(rg_serve_stream *st, char *buf, size_t cap) {
    for (;;) {
        size_t n;
        const char *t = rg_jw_text(&st->out, &n);
        if (!t) return -1;
        if (st->off < n) {
            const size_t k = n - st->off < cap ? n - st->off : cap;
            memcpy(buf, t + st->off, k);
            st->off += k;
            return (ssize_t)k;
        }
        if (st->g->done) return 0;
        rg_jw_reset(&st->out);
        st->off = 0;
        gen_next(st->g, &st->out);
    }
}

void rg_serve_stream_free(rg_serve_stream *st) {
    if (!st) return;
    if (!st->g->done) server_cancel(st->g->srv, st->g);
    gen_release(st->g);
    rg_jw_free(&st->out);
    free(st);
}

void rg_server_handle(rg_server *s, const char *method, const char *path, const char *body, size_t len,
                      rg_serve_response *out) {
    rg_server_handle_watch(s, method, path, body, len, NULL, NULL, out);
}

void rg_server_handle_watch(rg_server *s, const char *method, const char *path, const char *body, size_t len,
                            bool (*gone)(void *user), void *user, rg_serve_response *out) {
    memset(out, 0, sizeof *out);
    atomic_fetch_add(&s->m_requests, 1);
    rg_serve_error e;
    const bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(path, "/health") == 0 || strcmp(path, "/v1/health") == 0) return route_health(s, out);
    if (strcmp(path, "/metrics") == 0 && get) return route_metrics(s, out);
    const int st = rg_server_state(s);
    if (st != 1) {
        rg_serve_fail(&e, 503, "", st == 0 ? "the model is loading" : "the model failed to load: %s", s->load_error);
        return server_fail_response(s, out, &e);
    }
    if (get && (strcmp(path, "/v1/models") == 0 || strcmp(path, "/models") == 0)) return route_models(s, out);
    if (post && strcmp(path, "/tokenize") == 0) return route_tokenize(s, body, len, out);
    if (post && strcmp(path, "/detokenize") == 0) return route_detokenize(s, body, len, out);
    if (post && strcmp(path, "/apply-template") == 0) return route_apply_template(s, body, len, out);
    if ((get || post) && strcmp(path, "/lora-adapters") == 0) return route_lora_adapters(s, path, post, body, len, out);
    if (post && (strcmp(path, "/lora-adapters/load") == 0 || strcmp(path, "/lora-adapters/unload") == 0))
        return route_lora_adapters(s, path, post, body, len, out);
    if (post && strncmp(path, "/slots/", 7) == 0) return route_slots(s, path, body, len, out);
    if (post && (strcmp(path, "/v1/chat/completions") == 0 || strcmp(path, "/chat/completions") == 0))
        return s->agent_tools ? route_chat_or_agent(s, body, len, gone, user, out)
                              : route_generate(s, RG_SERVE_CHAT, body, len, gone, user, out);
    if (post && (strcmp(path, "/v1/completions") == 0 || strcmp(path, "/completions") == 0))
        return route_generate(s, RG_SERVE_COMPLETION, body, len, gone, user, out);
    if (serve_ft_route(s, s->ft, method, path, body, len, out)) return;  // /v1/files, /v1/fine_tuning/jobs
    rg_serve_fail(&e, 404, "", "no route %s %s (see GET /v1/models, POST /v1/chat/completions, POST /v1/completions, "
                               "POST /tokenize, POST /detokenize, POST /apply-template, GET|POST /lora-adapters, POST /lora-adapters/load|unload, POST /slots/N?action=save|restore|erase, GET /health, GET /metrics)", method, path);
    server_fail_response(s, out, &e);
}
