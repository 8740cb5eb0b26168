// serve_engines.c - LoRA adapters at run time: the adapters loaded at launch, one engine per adapter
// configuration in use (see server_internal.h), the engines' event callback, and GET/POST /lora-adapters.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/lora.h"
#include "model/lora_stack.h"
#include "serve/server_internal.h"

rg_status server_load_adapters(rg_server *s, rg_error *err) {
    if (s->o.n_lora > RG_SERVE_MAX_LORA)
        return rg_fail(err, RG_ERR_ARG, "serve: %d adapters; at most %d", s->o.n_lora, RG_SERVE_MAX_LORA);
    for (int i = 0; i < s->o.n_lora; i++) {
        serve_adapter *a = &s->adapters[i];
        rg_error lerr;
        if (rg_lora_load(&a->lora, s->o.lora_paths[i], s->model, &lerr))
            return rg_fail(err, lerr.status, "serve: --lora %s: %s", s->o.lora_paths[i], lerr.msg);
        a->path = strdup(s->o.lora_paths[i]);
        a->scale = s->o.lora_scales ? s->o.lora_scales[i] : 1.0f;
        s->n_adapters = i + 1;
        if (!a->path) return rg_fail(err, RG_ERR_NOMEM, "serve: out of memory");
    }
    return RG_OK;
}

void server_on_event(void *user, const rg_engine_event *ev) {
    serve_engine *eng = user;
    rg_server *s = (rg_server *)((char *)(eng - eng->index) - offsetof(rg_server, engines));
    step_events *se = &s->se;
    if (se->n == se->cap) {
        const int cap = se->cap ? 2 * se->cap : 64;
        rg_engine_event *e = realloc(se->ev, sizeof *e * (size_t)cap);
        if (e) se->ev = e;
        char(*er)[1024] = realloc(se->err, sizeof *er * (size_t)cap);
        if (er) se->err = er;
        int *en = realloc(se->eng, sizeof *en * (size_t)cap);
        if (en) se->eng = en;
        if (!e || !er || !en) return;  // out of memory: the event is lost (its request then never ends: logged)
        se->cap = cap;
    }
    se->ev[se->n] = *ev;
    se->eng[se->n] = eng->index;
    snprintf(se->err[se->n], sizeof se->err[0], "%s", ev->error ? ev->error : "");
    se->n++;
}

static bool same_config(const serve_engine *e, const float *scales, int n) {
    for (int i = 0; i < n; i++)
        if (e->scales[i] != scales[i]) return false;
    return true;
}

static void engine_drop(serve_engine *e) {
    rg_engine_free(e->engine);
    rg_lora_free(e->stacked);
    const int index = e->index;
    memset(e, 0, sizeof *e);
    e->index = index;
}

// Makes engine e for the configuration: the adapters with a non-zero scale, one as it is, several stacked.
static rg_status engine_make(rg_server *s, serve_engine *e, const float *scales, rg_error *err) {
    rg_lora *ls[RG_SERVE_MAX_LORA];
    float sc[RG_SERVE_MAX_LORA];
    int n = 0;
    for (int i = 0; i < s->n_adapters; i++)
        if (scales[i] != 0) ls[n] = s->adapters[i].lora, sc[n++] = scales[i];
    rg_engine_opts eo = {.n_slots = s->o.n_slots > 0 ? s->o.n_slots : 1, .n_ctx = s->o.n_ctx,
                         .n_threads = s->o.n_threads, .device = s->o.device, .on_event = server_on_event, .user = e};
    if (n == 1) eo.lora = ls[0], eo.lora_scale = sc[0];
    if (n > 1) {
        rg_status st = rg_lora_stack(&e->stacked, ls, sc, n, err);
        if (st) return st;
        eo.lora = e->stacked, eo.lora_scale = 1.0f;
    }
    rg_status st = rg_engine_create(&e->engine, s->model, &eo, err);
    if (st) {
        rg_lora_free(e->stacked);
        e->stacked = NULL;
        return st;
    }
    memcpy(e->scales, scales, sizeof(float) * (size_t)s->n_adapters);
    e->used = true;
    return RG_OK;
}

serve_engine *server_engine_for(rg_server *s, const float *scales, rg_error *err) {
    serve_engine *free_e = NULL, *idle = NULL;
    for (int k = 0; k < RG_SERVE_MAX_ENGINES; k++) {
        serve_engine *e = &s->engines[k];
        e->index = k;
        if (e->used && same_config(e, scales, s->n_adapters)) {
            e->last_used = ++s->engine_clock;
            return e;
        }
        if (!e->used && !free_e) free_e = e;
        if (e->used && rg_engine_pending(e->engine) == 0 && (!idle || e->last_used < idle->last_used)) idle = e;
    }
    serve_engine *e = free_e ? free_e : idle;
    if (!e) {
        rg_fail(err, RG_ERR_ARG, "serve: %d adapter configurations are busy; a request with another one waits "
                                 "until one is idle (retry)", RG_SERVE_MAX_ENGINES);
        return NULL;
    }
    if (e->used) engine_drop(e);  // its slots' caches go with it
    if (engine_make(s, e, scales, err)) return NULL;
    e->last_used = ++s->engine_clock;
    return e;
}

void server_engines_free(rg_server *s) {
    for (int k = 0; k < RG_SERVE_MAX_ENGINES; k++)
        if (s->engines[k].used) engine_drop(&s->engines[k]);
    for (int i = 0; i < s->n_adapters; i++) {
        rg_lora_free(s->adapters[i].lora);
        free(s->adapters[i].path);
    }
}

static void list_adapters(rg_server *s, rg_serve_response *out) {
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_arr(&w);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_adapters; i++) {
        rg_jw_obj(&w);
        rg_jw_ki64(&w, "id", i);
        rg_jw_kstr(&w, "path", s->adapters[i].path);
        rg_jw_kf64(&w, "scale", s->adapters[i].scale);
        rg_jw_obj_end(&w);
    }
    pthread_mutex_unlock(&s->mu);
    rg_jw_arr_end(&w);
    server_json_response(200, &w, out);
}

// POST /lora-adapters [{"id", "scale"}]: the default scales of requests that do not name adapters (those not
// listed become 0), as llama-server's route sets them.
void route_lora_adapters(rg_server *s, bool post, const char *body, size_t len, rg_serve_response *out) {
    if (!post) return list_adapters(s, out);
    rg_serve_error e;
    rg_json_doc *doc;
    rg_error jerr;
    rg_json_limits jl = {.max_depth = 8, .max_bytes = len + 1};
    if (rg_json_parse(&doc, body, len, &jl, &jerr)) {
        rg_serve_fail(&e, 400, "", "the request body is not valid JSON: %s", jerr.msg);
        return server_fail_response(s, out, &e);
    }
    const rg_json *a = rg_json_root(doc);
    float scales[RG_SERVE_MAX_LORA] = {0};
    bool ok = rg_json_is(a, RG_JSON_ARRAY);
    if (!ok) rg_serve_fail(&e, 400, "", "the body must be an array of {\"id\": N, \"scale\": S}");
    for (size_t i = 0; ok && i < rg_json_len(a); i++) {
        const rg_json *it = rg_json_at(a, i), *sv = rg_json_get(it, "scale");
        int64_t id;
        const double sc = rg_json_num(sv);
        if (!rg_json_int64(rg_json_get(it, "id"), &id) || id < 0 || id >= s->n_adapters)
            ok = rg_serve_fail(&e, 400, "id", "item %zu: 'id' must name a loaded adapter (0..%d)", i, s->n_adapters - 1);
        else if (!rg_json_is(sv, RG_JSON_NUMBER) || !(sc >= -16 && sc <= 16))
            ok = rg_serve_fail(&e, 400, "scale", "item %zu: 'scale' must be a number in [-16, 16]", i);
        else scales[id] = (float)sc;
    }
    rg_json_free(doc);
    if (!ok) return server_fail_response(s, out, &e);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_adapters; i++) s->adapters[i].scale = scales[i];
    pthread_mutex_unlock(&s->mu);
    list_adapters(s, out);
}
