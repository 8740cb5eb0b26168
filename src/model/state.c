// state.c - see state.h: the buffers each layer's kinds describe.
#include "model/state.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/layer.h"

// Appends kind k's buffers to layer state ls (sizes only).
static rg_status describe(rg_layer_state *ls, const rg_layer_kind_desc *k, const rg_hparams *hp, const rg_layer *L,
                          int64_t n_ctx, uint32_t token_type, int64_t il, rg_error *err) {
    for (int i = 0; k && i < k->n_state; i++) {
        if (ls->n_bufs == RG_STATE_MAX_BUFS)
            return rg_fail(err, RG_ERR_ARG, "state: layer %lld has more than %d buffers", (long long)il, RG_STATE_MAX_BUFS);
        const rg_state_buf *b = &k->state[i];
        const int j = ls->n_bufs++;
        const int64_t n = b->elements(hp, L) * (b->per_token ? n_ctx : 1);
        if (n < 0) return rg_fail(err, RG_ERR_ARG, "state: layer %lld's %s %s buffer has a negative size", (long long)il,
                                  k->name, b->name);
        ls->per_token[j] = b->per_token;
        ls->type[j] = b->per_token ? token_type : RG_TYPE_F32;
        ls->bytes[j] = (size_t)n * rg_type_get(ls->type[j])->type_size;
        if (b->per_token) {
            const int64_t run = b->run ? b->run(hp, L) : 0;
            if (run <= 0 || (n / n_ctx) % run)
                return rg_fail(err, RG_ERR_ARG, "state: layer %lld's %s %s buffer: %lld elements per token are not "
                               "runs of %lld", (long long)il, k->name, b->name, (long long)(n / n_ctx), (long long)run);
            ls->run_bytes[j] = (size_t)run * rg_type_get(ls->type[j])->type_size;
        }
    }
    return RG_OK;
}

rg_status rg_model_state_init(rg_model_state *s, const rg_model *m, int64_t n_ctx, uint32_t token_type, rg_error *err) {
    const rg_hparams *hp = &m->hp;
    memset(s, 0, sizeof *s);
    if (n_ctx <= 0) return rg_fail(err, RG_ERR_ARG, "kv cache: context %lld must be positive", (long long)n_ctx);
    if (token_type != RG_TYPE_F32 && token_type != RG_TYPE_F16)
        return rg_fail(err, RG_ERR_ARG, "kv cache: type must be f32 or f16");
    s->n_ctx = n_ctx, s->n_layer = hp->n_layer, s->token_type = token_type;
    s->layers = calloc((size_t)hp->n_layer, sizeof *s->layers);
    if (!s->layers) return rg_fail(err, RG_ERR_NOMEM, "kv cache: out of memory");
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const rg_layer *L = &m->layers[il];
        rg_layer_state *ls = &s->layers[il];
        rg_status st = describe(ls, rg_layer_kind_get(L->mixer), hp, L, n_ctx, token_type, il, err);
        if (!st) st = describe(ls, rg_layer_kind_get(L->ffn), hp, L, n_ctx, token_type, il, err);
        if (st) {
            rg_model_state_free(s);
            return st;
        }
        for (int j = 0; j < ls->n_bufs; j++) {
            ls->buf[j] = calloc(1, ls->bytes[j] ? ls->bytes[j] : 1);
            if (!ls->buf[j]) {
                size_t total = s->token_bytes + s->seq_bytes;
                rg_model_state_free(s);
                return rg_fail(err, RG_ERR_NOMEM, "kv cache: out of memory for layer %lld of %lld (%.1f MiB so far)",
                               (long long)il, (long long)hp->n_layer, (double)total / 1048576.0);
            }
            *(ls->per_token[j] ? &s->token_bytes : &s->seq_bytes) += ls->bytes[j];
        }
    }
    return RG_OK;
}

void rg_model_state_free(rg_model_state *s) {
    for (int64_t il = 0; s->layers && il < s->n_layer; il++)
        for (int j = 0; j < s->layers[il].n_bufs; j++) free(s->layers[il].buf[j]);
    free(s->layers);
    free(s->saved);
    memset(s, 0, sizeof *s);
}

bool rg_model_state_recurrent(const rg_model_state *s) { return s->seq_bytes > 0; }

void rg_model_state_reset(rg_model_state *s) {
    for (int64_t il = 0; il < s->n_layer; il++) {
        rg_layer_state *ls = &s->layers[il];
        for (int j = 0; j < ls->n_bufs; j++)
            if (!ls->per_token[j]) memset(ls->buf[j], 0, ls->bytes[j]);
    }
}

// Copies every per-sequence buffer to (save) or from (restore) s->saved, in layer order.
static void copy_seq(rg_model_state *s, bool save) {
    char *p = s->saved;
    for (int64_t il = 0; il < s->n_layer; il++) {
        rg_layer_state *ls = &s->layers[il];
        for (int j = 0; j < ls->n_bufs; j++) {
            if (ls->per_token[j]) continue;
            if (save) memcpy(p, ls->buf[j], ls->bytes[j]);
            else memcpy(ls->buf[j], p, ls->bytes[j]);
            p += ls->bytes[j];
        }
    }
}

rg_status rg_model_state_save(rg_model_state *s, rg_error *err) {
    if (!s->seq_bytes) return RG_OK;
    if (!s->saved && !(s->saved = malloc(s->seq_bytes)))
        return rg_fail(err, RG_ERR_NOMEM, "state: out of memory saving %.1f MiB", (double)s->seq_bytes / 1048576.0);
    copy_seq(s, true);
    return RG_OK;
}

void rg_model_state_restore(rg_model_state *s) {
    if (s->saved) copy_seq(s, false);
}
