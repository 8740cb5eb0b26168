// serve_slots.c - slot state to files and back (POST /slots/N?action=save|restore|erase, llama-server's route):
// the server names the files (slot-N-TIME-K.bin in --slot-save-path, and its .tokens beside it) and a restore
// takes only a name of that form that exists there, so no client path ever reaches the file system. The
// operation runs on the engine thread between steps, on the slots of the default adapter configuration's
// engine; a slot serving a request is refused.
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "serve/server_internal.h"

void server_run_slot_ops(rg_server *s) {
    while (s->ops) {
        slot_op *op = s->ops;
        s->ops = op->next;
        float scales[RG_SERVE_MAX_LORA] = {0};
        for (int i = 0; i < s->n_adapters; i++) scales[i] = s->adapters[i].lora ? s->adapters[i].scale : 0;
        pthread_mutex_unlock(&s->mu);
        rg_error err = {0};
        serve_engine *e = server_engine_for(s, scales, &err);
        rg_status st = e ? RG_OK : err.status;
        if (!st && op->kind == SLOT_OP_SAVE) st = rg_engine_slot_save(e->engine, op->slot, op->path, &op->n_tokens, &err);
        if (!st && op->kind == SLOT_OP_RESTORE) st = rg_engine_slot_load(e->engine, op->slot, op->path, &op->n_tokens, &err);
        if (!st && op->kind == SLOT_OP_ERASE) st = rg_engine_slot_erase(e->engine, op->slot, &err);
        pthread_mutex_lock(&s->mu);
        op->st = st;
        if (st) snprintf(op->msg, sizeof op->msg, "%s", err.msg);
        op->done = true;
        pthread_cond_broadcast(&s->ops_cv);
    }
}

// A slot file's name as the server makes it: slot-DIGITS-DIGITS-DIGITS.bin.
static bool server_name(const char *n) {
    const char *p = n;
    if (strncmp(p, "slot-", 5) != 0) return false;
    p += 5;
    for (int part = 0; part < 3; part++) {
        if (!isdigit((unsigned char)*p)) return false;
        while (isdigit((unsigned char)*p)) p++;
        if (part < 2 && *p++ != '-') return false;
    }
    return strcmp(p, ".bin") == 0 && strlen(n) < 96;
}

void route_slots(rg_server *s, const char *path, const char *body, size_t len, rg_serve_response *out) {
    rg_serve_error e;
    char *end;
    const long k = strtol(path + 7, &end, 10);
    const char *action = strncmp(end, "?action=", 8) == 0 ? end + 8 : "";
    const int n_slots = s->o.n_slots > 0 ? s->o.n_slots : 1;
    if (end == path + 7 || k < 0 || k >= n_slots) {
        rg_serve_fail(&e, 400, "id_slot", "no slot '%.*s': the slots are 0..%d", (int)(end - path - 7), path + 7,
                      n_slots - 1);
        return server_fail_response(s, out, &e);
    }
    slot_op op = {.slot = (int)k};
    if (!strcmp(action, "save")) op.kind = SLOT_OP_SAVE;
    else if (!strcmp(action, "restore")) op.kind = SLOT_OP_RESTORE;
    else if (!strcmp(action, "erase")) op.kind = SLOT_OP_ERASE;
    else {
        rg_serve_fail(&e, 400, "action", "action '%s': expected save, restore or erase", action);
        return server_fail_response(s, out, &e);
    }
    if (op.kind != SLOT_OP_ERASE && !s->o.slot_save_path) {
        rg_serve_fail(&e, 400, "action", "slot files are off: start the server with --slot-save-path DIR");
        return server_fail_response(s, out, &e);
    }
    char name[128] = "";
    if (op.kind == SLOT_OP_SAVE) {
        static atomic_uint counter;
        snprintf(name, sizeof name, "slot-%ld-%lld-%u.bin", k, (long long)time(NULL), atomic_fetch_add(&counter, 1));
    } else if (op.kind == SLOT_OP_RESTORE) {
        rg_json_doc *doc;
        if (!server_parse_body(&doc, body, len, RG_JSON_OBJECT, &e)) return server_fail_response(s, out, &e);
        const char *f = rg_json_str(rg_json_get(rg_json_root(doc), "filename"), NULL);
        const bool ok = f && server_name(f);
        if (ok) snprintf(name, sizeof name, "%s", f);
        rg_json_free(doc);
        if (!ok) {
            rg_serve_fail(&e, 400, "filename", "'filename' must be a name this server gave (slot-N-T-K.bin)");
            return server_fail_response(s, out, &e);
        }
    }
    if (name[0]) snprintf(op.path, sizeof op.path, "%s/%s", s->o.slot_save_path, name);
    struct stat sb;
    if (op.kind == SLOT_OP_RESTORE && stat(op.path, &sb) != 0) {
        rg_serve_fail(&e, 404, "filename", "no slot file '%s'", name);
        return server_fail_response(s, out, &e);
    }
    pthread_mutex_lock(&s->mu);
    op.next = s->ops;
    s->ops = &op;
    pthread_cond_signal(&s->work);
    while (!op.done) pthread_cond_wait(&s->ops_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (op.st) {
        rg_serve_fail(&e, op.st == RG_ERR_ARG ? 409 : op.st == RG_ERR_FORMAT ? 400 : 500, "", "%s", op.msg);
        return server_fail_response(s, out, &e);
    }
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_ki64(&w, "id_slot", k);
    if (name[0]) rg_jw_kstr(&w, "filename", name);
    if (op.kind == SLOT_OP_SAVE) rg_jw_ki64(&w, "n_saved", op.n_tokens);
    if (op.kind == SLOT_OP_RESTORE) rg_jw_ki64(&w, "n_restored", op.n_tokens);
    rg_jw_obj_end(&w);
    server_json_response(200, &w, out);
}
