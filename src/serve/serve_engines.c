// serve_engines.c - LoRA adapters at run time: the adapters loaded at launch, loaded and unloaded while serving
// (POST /lora-adapters/load|unload, finished fine-tuning jobs), one engine per adapter configuration in use (see
// server_internal.h), the engines' event callback, and GET/POST /lora-adapters.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
        a->serial = ++s->adapter_serial;
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

static bool same_config(const serve_engine *e, const float *scales) {
    for (int i = 0; i < RG_SERVE_MAX_LORA; i++)
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

int server_adapter_add(rg_server *s, const char *path, const char *name, rg_serve_error *e) {
    rg_lora *l = NULL;
    rg_error lerr;
    if (rg_lora_load(&l, path, s->model, &lerr)) {  // outside the mutex: reading the file takes a while
        rg_serve_fail(e, lerr.status == RG_ERR_NOMEM ? 500 : 400, "", "the adapter %s: %s", path, lerr.msg);
        return -1;
    }
    char *p = strdup(path), *n = name ? strdup(name) : NULL;
    int id = -1;
    pthread_mutex_lock(&s->mu);
    bool taken = name && strcmp(name, s->alias) == 0;
    for (int i = 0; i < s->n_adapters && name && !taken; i++)
        taken = s->adapters[i].name && strcmp(s->adapters[i].name, name) == 0;
    for (int i = 0; i < s->n_adapters && id < 0; i++)
        if (!s->adapters[i].lora && !s->adapters[i].unloading) id = i;
    if (id < 0 && s->n_adapters < RG_SERVE_MAX_LORA) id = s->n_adapters;
    if (!p || (name && !n)) rg_serve_fail(e, 500, "", "out of memory");
    else if (taken) rg_serve_fail(e, 409, "name", "a model named '%s' is already served", name);
    else if (id < 0)
        rg_serve_fail(e, 507, "", "%d adapters are loaded, the most one server holds: unload one first "
                                  "(POST /lora-adapters/unload)", RG_SERVE_MAX_LORA);
    if (p && (!name || n) && !taken && id >= 0) {
        s->adapters[id] = (serve_adapter){.path = p, .name = n, .lora = l, .scale = 0, .serial = ++s->adapter_serial};
        if (id == s->n_adapters) s->n_adapters++;
        p = n = NULL, l = NULL;
    } else id = -1;
    pthread_mutex_unlock(&s->mu);
    free(p);
    free(n);
    rg_lora_free(l);
    return id;
}

static bool engine_uses(const serve_engine *e, int adapter) { return e->used && e->scales[adapter] != 0; }

void server_reap_adapters(rg_server *s) {
    if (!s->reap) return;
    s->reap = false;
    for (int i = 0; i < s->n_adapters; i++) {
        serve_adapter *a = &s->adapters[i];
        if (!a->unloading) continue;
        bool busy = false;
        for (int k = 0; k < RG_SERVE_MAX_ENGINES; k++)
            busy |= engine_uses(&s->engines[k], i) && rg_engine_pending(s->engines[k].engine) > 0;
        for (const gen *g = s->submit_head; g; g = g->next_submit) busy |= g->scales[i] != 0;
        if (busy) {
            s->reap = true;  // again after the next step
            continue;
        }
        for (int k = 0; k < RG_SERVE_MAX_ENGINES; k++)
            if (engine_uses(&s->engines[k], i)) engine_drop(&s->engines[k]);
        rg_lora_free(a->lora);
        free(a->path);
        free(a->name);
        *a = (serve_adapter){0};
    }
}

static bool adapter_live(const serve_adapter *a) { return a->lora && !a->unloading; }

bool server_adapters_current(rg_server *s, const float *scales, const uint64_t *serials) {
    for (int i = 0; i < RG_SERVE_MAX_LORA; i++)
        if (scales[i] != 0 && (i >= s->n_adapters || !adapter_live(&s->adapters[i]) ||
                               s->adapters[i].serial != serials[i]))
            return false;
    return true;
}

bool server_request_scales(rg_server *s, const char *model, const rg_serve_req *r, float *scales, uint64_t *serials,
                           rg_serve_error *e) {
    bool ok = true;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < RG_SERVE_MAX_LORA; i++) scales[i] = 0;
    if (!r->lora_given)  // the server's defaults (POST /lora-adapters)
        for (int i = 0; i < s->n_adapters; i++) scales[i] = adapter_live(&s->adapters[i]) ? s->adapters[i].scale : 0;
    for (int i = 0; i < s->n_adapters; i++)  // a fine-tuned model's own adapter
        if (adapter_live(&s->adapters[i]) && s->adapters[i].name && strcmp(s->adapters[i].name, model) == 0)
            scales[i] = 1;
    for (int i = 0; ok && r->lora_given && i < r->n_lora; i++) {  // the request's adapters
        const int64_t id = r->lora[i].id;
        if (id >= s->n_adapters || !adapter_live(&s->adapters[id]))
            ok = rg_serve_fail(e, 400, "lora", "no adapter with id %lld is loaded (GET /lora-adapters)", (long long)id);
        else scales[id] = r->lora[i].scale;
    }
    for (int i = 0; i < RG_SERVE_MAX_LORA; i++) serials[i] = i < s->n_adapters ? s->adapters[i].serial : 0;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

bool server_adapter_named(rg_server *s, const char *model) {
    bool found = false;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_adapters && !found; i++)
        found = adapter_live(&s->adapters[i]) && s->adapters[i].name && strcmp(s->adapters[i].name, model) == 0;
    pthread_mutex_unlock(&s->mu);
    return found;
}

void server_models_json(rg_server *s, rg_jw *w) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_adapters; i++) {
        const serve_adapter *a = &s->adapters[i];
        if (!adapter_live(a) || !a->name) continue;
        rg_jw_obj(w);
        rg_jw_kstr(w, "id", a->name);
        rg_jw_kstr(w, "object", "model");
        rg_jw_ki64(w, "created", s->created);
        rg_jw_kstr(w, "owned_by", "retrograd");
        rg_jw_kstr(w, "parent", s->alias);
        rg_jw_kstr(w, "root", s->alias);
        rg_jw_ki64(w, "context_length", s->n_ctx);
        rg_jw_ki64(w, "adapter_id", i);
        rg_jw_obj_end(w);
    }
    pthread_mutex_unlock(&s->mu);
}

// Makes engine e for the configuration: the adapters with a non-zero scale, one as it is, several stacked.
static rg_status engine_make(rg_server *s, serve_engine *e, const float *scales, rg_error *err) {
    rg_lora *ls[RG_SERVE_MAX_LORA];
    float sc[RG_SERVE_MAX_LORA];
    int n = 0;
    for (int i = 0; i < RG_SERVE_MAX_LORA; i++) {
        if (scales[i] == 0) continue;
        if (!s->adapters[i].lora)  // unloaded after the request was taken
            return rg_fail(err, RG_ERR_NOT_FOUND, "serve: adapter %d was unloaded", i);
        ls[n] = s->adapters[i].lora, sc[n++] = scales[i];
    }
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
    memcpy(e->scales, scales, sizeof e->scales);
    e->used = true;
    return RG_OK;
}

serve_engine *server_engine_for(rg_server *s, const float *scales, rg_error *err) {
    serve_engine *free_e = NULL, *idle = NULL;
    for (int k = 0; k < RG_SERVE_MAX_ENGINES; k++) {
        serve_engine *e = &s->engines[k];
        e->index = k;
        if (e->used && same_config(e, scales)) {
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
        free(s->adapters[i].name);
    }
}

static void list_adapters(rg_server *s, rg_serve_response *out) {
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_arr(&w);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_adapters; i++) {
        const serve_adapter *a = &s->adapters[i];
        if (!adapter_live(a)) continue;
        rg_jw_obj(&w);
        rg_jw_ki64(&w, "id", i);
        rg_jw_kstr(&w, "path", a->path);
        rg_jw_kf64(&w, "scale", a->scale);
        if (a->name) rg_jw_kstr(&w, "model", a->name);
        rg_jw_obj_end(&w);
    }
    pthread_mutex_unlock(&s->mu);
    rg_jw_arr_end(&w);
    server_json_response(200, &w, out);
}

// POST /lora-adapters [{"id", "scale"}]: the default scales of requests that do not name adapters (those not
// listed become 0), as llama-server's route sets them.
static void set_scales(rg_server *s, const char *body, size_t len, rg_serve_response *out) {
    rg_serve_error e;
    rg_json_doc *doc;
    if (!server_parse_body(&doc, body, len, RG_JSON_ARRAY, &e)) return server_fail_response(s, out, &e);
    const rg_json *a = rg_json_root(doc);
    float scales[RG_SERVE_MAX_LORA] = {0};
    bool ok = true;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; ok && i < rg_json_len(a); i++) {
        const rg_json *it = rg_json_at(a, i), *sv = rg_json_get(it, "scale");
        int64_t id;
        const double sc = rg_json_num(sv);
        if (!rg_json_int64(rg_json_get(it, "id"), &id) || id < 0 || id >= s->n_adapters ||
            !adapter_live(&s->adapters[id]))
            ok = rg_serve_fail(&e, 400, "id", "item %zu: 'id' must name a loaded adapter (GET /lora-adapters)", i);
        else if (!rg_json_is(sv, RG_JSON_NUMBER) || !(sc >= -16 && sc <= 16))
            ok = rg_serve_fail(&e, 400, "scale", "item %zu: 'scale' must be a number in [-16, 16]", i);
        else scales[id] = (float)sc;
    }
    if (ok)
        for (int i = 0; i < s->n_adapters; i++) s->adapters[i].scale = scales[i];
    pthread_mutex_unlock(&s->mu);
    rg_json_free(doc);
    if (!ok) return server_fail_response(s, out, &e);
    list_adapters(s, out);
}

// An adapter file's name as POST /lora-adapters/load takes it: a plain name in --lora-dir ending in .gguf.
static bool plain_gguf_name(const char *n) {
    const size_t len = n ? strlen(n) : 0;
    return len > 5 && len < 200 && n[0] != '.' && !strchr(n, '/') && !strchr(n, '\\') &&
           strcmp(n + len - 5, ".gguf") == 0;
}

// POST /lora-adapters/load {"file": "NAME.gguf", "scale": S}: an adapter from --lora-dir, by its plain name, so
// no client path reaches the file system. Its default scale is S (0 when not given: requests name it).
static void load_adapter(rg_server *s, const char *body, size_t len, rg_serve_response *out) {
    rg_serve_error e;
    if (!s->o.lora_dir) {
        rg_serve_fail(&e, 403, "", "loading adapters needs the server started with --lora-dir DIR");
        return server_fail_response(s, out, &e);
    }
    rg_json_doc *doc;
    if (!server_parse_body(&doc, body, len, RG_JSON_OBJECT, &e)) return server_fail_response(s, out, &e);
    const rg_json *r = rg_json_root(doc), *sv = rg_json_get(r, "scale");
    const char *f = rg_json_str(rg_json_get(r, "file"), NULL);
    const double sc = sv ? rg_json_num(sv) : 0;
    char path[4096];
    struct stat sb;
    bool ok = plain_gguf_name(f);
    if (!ok) rg_serve_fail(&e, 400, "file", "'file' must be the plain name of a .gguf file in the server's --lora-dir");
    else if (sv && (!rg_json_is(sv, RG_JSON_NUMBER) || !(sc >= -16 && sc <= 16)))
        ok = rg_serve_fail(&e, 400, "scale", "'scale' must be a number in [-16, 16]");
    else if (snprintf(path, sizeof path, "%s/%s", s->o.lora_dir, f) >= (int)sizeof path || stat(path, &sb) != 0)
        ok = rg_serve_fail(&e, 404, "file", "no adapter file '%s' in --lora-dir", f);
    rg_json_free(doc);
    if (!ok) return server_fail_response(s, out, &e);
    const int id = server_adapter_add(s, path, NULL, &e);
    if (id < 0) return server_fail_response(s, out, &e);
    pthread_mutex_lock(&s->mu);
    s->adapters[id].scale = (float)sc;
    pthread_mutex_unlock(&s->mu);
    list_adapters(s, out);
}

bool server_adapter_remove(rg_server *s, int64_t id) {
    pthread_mutex_lock(&s->mu);
    const bool ok = id >= 0 && id < s->n_adapters && adapter_live(&s->adapters[id]);
    if (ok) {
        s->adapters[id].unloading = true;
        s->adapters[id].scale = 0;
        s->reap = true;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

// POST /lora-adapters/unload {"id": N}: new requests are refused it at once; the requests already running on it
// finish with it, then it is freed (the engine thread, between steps).
static void unload_adapter(rg_server *s, const char *body, size_t len, rg_serve_response *out) {
    rg_serve_error e;
    rg_json_doc *doc;
    if (!server_parse_body(&doc, body, len, RG_JSON_OBJECT, &e)) return server_fail_response(s, out, &e);
    int64_t id;
    const bool given = rg_json_int64(rg_json_get(rg_json_root(doc), "id"), &id);
    rg_json_free(doc);
    if (!given || !server_adapter_remove(s, id)) {
        rg_serve_fail(&e, 404, "id", "'id' must name a loaded adapter (GET /lora-adapters)");
        return server_fail_response(s, out, &e);
    }
    list_adapters(s, out);
}

void route_lora_adapters(rg_server *s, const char *path, bool post, const char *body, size_t len,
                         rg_serve_response *out) {
    if (!post) return list_adapters(s, out);
    if (strcmp(path, "/lora-adapters/load") == 0) return load_adapter(s, body, len, out);
    if (strcmp(path, "/lora-adapters/unload") == 0) return unload_adapter(s, body, len, out);
    return set_scales(s, body, len, out);
}
