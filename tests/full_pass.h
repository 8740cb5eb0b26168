// full_pass.h - what the model tests share: a model's logits over a few tokens in one pass
// without a cache (the reference for cached, batched and adapted evaluations), and the gap
// between two sets of logits. Header-only, for the test programs.
#ifndef RG_TEST_FULL_PASS_H
#define RG_TEST_FULL_PASS_H

#include <math.h>
#include <string.h>

#include "graph/exec.h"
#include "model/forward.h"
#include "model/lora.h"

// Logits [n_vocab, n] of ids at positions 0..n-1, with adapter l attached at scale when l != NULL.
static inline rg_status rg_test_full_logits(const rg_model *m, const rg_lora *l, float scale, const int32_t *ids,
                                            int64_t n, float *logits, rg_error *err) {
    rg_graph *g = rg_graph_new();
    rg_model_nodes w;
    rg_status st = rg_model_leaf_nodes(g, m, &w, err);
    if (!st && l) st = rg_lora_attach(g, l, &w, scale, false, err);
    rg_node *idn = rg_leaf(g, "ids", RG_TYPE_I32, 1, &n, NULL), *pn = rg_leaf(g, "pos", RG_TYPE_I32, 1, &n, NULL);
    rg_node *out = st ? NULL : rg_model_forward(g, m, &w, idn, pn, NULL);
    rg_exec *ex = NULL;
    if (!st && !out) st = rg_graph_error(g, err);
    if (!st) {
        out->flags |= RG_NODE_OUTPUT;
        rg_exec_opts o = {.n_threads = 2};
        st = rg_exec_create(&ex, g, &o, err);
    }
    if (!st) {
        memcpy(idn->t.data, ids, sizeof(int32_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) ((int32_t *)pn->t.data)[i] = (int32_t)i;
        st = rg_exec_run(ex, 0, -1, err);
    }
    if (!st) memcpy(logits, out->t.data, sizeof(float) * (size_t)(m->hp.n_vocab * n));
    rg_exec_free(ex);
    rg_graph_free(g);
    return st;
}

// max |a - b| over n values, relative to max |b| (1 when b is all zeros).
static inline double rg_test_max_rel(const float *a, const float *b, int64_t n) {
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / (scale > 0 ? scale : 1));
    return worst;
}

#endif
