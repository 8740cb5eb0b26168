// session.c - see session.h. One graph per evaluated batch: built, planned,
// run and dropped; the KV cache and the thread pool persist.
#include "infer/session.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/forward.h"
#include "model/lora.h"

struct rg_session {
    const rg_model *m;
    rg_session_opts opts;
    rg_kv_cache cache;
    rg_threadpool *pool;
    int64_t n_past;
};

rg_status rg_session_create(rg_session **out, const rg_model *m, const rg_session_opts *opts, rg_error *err) {
    *out = NULL;
    rg_session *s = calloc(1, sizeof *s);
    if (!s) return rg_fail(err, RG_ERR_NOMEM, "session: out of memory");
    s->m = m;
    s->opts = *opts;
    if (s->opts.n_ctx <= 0) s->opts.n_ctx = m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    if (s->opts.n_batch <= 0) s->opts.n_batch = 256;
    rg_status st = rg_kv_cache_init(&s->cache, m, s->opts.n_ctx, RG_TYPE_F16, err);
    if (!st) st = rg_threadpool_create(&s->pool, opts->n_threads, err);
    if (st) {
        rg_session_free(s);
        return st;
    }
    *out = s;
    return RG_OK;
}

void rg_session_free(rg_session *s) {
    if (!s) return;
    rg_kv_cache_free(&s->cache);
    rg_threadpool_free(s->pool);
    free(s);
}

int64_t rg_session_n_past(const rg_session *s) { return s->n_past; }
int64_t rg_session_n_ctx(const rg_session *s) { return s->opts.n_ctx; }
const rg_model *rg_session_model(const rg_session *s) { return s->m; }

void rg_session_truncate(rg_session *s, int64_t n_past) {
    if (n_past >= 0 && n_past < s->n_past) s->n_past = n_past;
}

// One batch: tokens ids[0..n) at positions n_past.., logits of the last or all.
static rg_status eval_batch(rg_session *s, const int32_t *ids, int64_t n, float *logits, bool all, rg_error *err) {
    const rg_model *m = s->m;
    rg_graph *g = rg_graph_new();
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "session: out of memory");
    rg_exec *ex = NULL;
    rg_model_nodes w;
    rg_status st = rg_model_leaf_nodes(g, m, &w, err);
    if (!st && s->opts.lora) st = rg_lora_attach(g, s->opts.lora, &w, s->opts.lora_scale, false, err);
    rg_node *ids_n = rg_leaf(g, "ids", RG_TYPE_I32, 1, &n, NULL);
    rg_node *pos_n = rg_leaf(g, "pos", RG_TYPE_I32, 1, &n, NULL);
    rg_node *out = st ? NULL : rg_model_forward_kv(g, m, &w, ids_n, pos_n, &s->cache, s->n_past, !all);
    if (!st && !out) st = rg_graph_error(g, err);
    if (!st) {
        out->flags |= RG_NODE_OUTPUT;
        rg_exec_opts eo = {.pool = s->pool, .device = s->opts.device};
        st = rg_exec_create(&ex, g, &eo, err);
    }
    if (!st) {
        memcpy(ids_n->t.data, ids, (size_t)n * sizeof(int32_t));
        int32_t *p = pos_n->t.data;
        for (int64_t i = 0; i < n; i++) p[i] = (int32_t)(s->n_past + i);
        st = rg_exec_run(ex, 0, -1, err);
    }
    if (!st && logits) memcpy(logits, out->t.data, (size_t)rg_tensor_nelements(&out->t) * sizeof(float));
    if (!st) s->n_past += n;
    rg_exec_free(ex);
    rg_graph_free(g);
    return st;
}

rg_status rg_session_eval(rg_session *s, const int32_t *ids, int64_t n, float *logits, int all_logits, rg_error *err) {
    if (n <= 0) return rg_fail(err, RG_ERR_ARG, "session: no tokens to evaluate");
    if (s->n_past + n > s->opts.n_ctx)
        return rg_fail(err, RG_ERR_ARG, "session: %lld cached + %lld new tokens exceed the context of %lld",
                       (long long)s->n_past, (long long)n, (long long)s->opts.n_ctx);
    const int64_t V = s->m->hp.n_vocab;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return rg_fail(err, RG_ERR_ARG, "session: token id %d at position %lld is outside the vocabulary of %lld",
                           ids[i], (long long)i, (long long)V);
    int64_t start_past = s->n_past;
    for (int64_t off = 0; off < n; off += s->opts.n_batch) {
        int64_t b = n - off < s->opts.n_batch ? n - off : s->opts.n_batch;
        bool last_batch = off + b == n;
        float *dst = NULL;
        if (logits && all_logits) dst = logits + off * V;
        else if (logits && last_batch) dst = logits;
        rg_status st = eval_batch(s, ids + off, b, dst, all_logits != 0, err);
        if (st) {
            s->n_past = start_past;  // a failed call changes nothing
            return st;
        }
    }
    return RG_OK;
}
