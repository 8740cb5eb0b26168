// session_seqs.c - rg_session_eval_seqs (session.h): the tokens of several sequences in one graph, what a
// server's continuous batching runs each step (every slot's next token, and the prompts being read, together).
//
// One pass over the weights serves every sequence: the embeddings, norms, FFNs and projections run over all
// the batch's columns; attention, and the short conv and the SSM scan of recurrent layers, run per segment over
// that sequence's own cache and state (model/forward.h's rg_model_forward_seqs), so no sequence reads another's
// keys or state. Each sequence's snapshots (RETRO_RECURRENT_ROLLBACK=auto) are kept as its own evaluation would
// keep them: a segment of one token takes the ring, a longer one the batch's snapshots, so every sequence rewinds
// afterwards exactly as after rg_session_eval_seq. A failed batch changes no sequence.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "infer/session.h"
#include "infer/session_internal.h"
#include "model/forward.h"
#include "model/state.h"

// Everything checked before anything changes: the sequences (each once), the sizes, the ids, the states.
static rg_status check_batch(rg_session *s, const rg_seq_tokens *b, int n_b, int64_t *total, rg_error *err) {
    *total = 0;
    if (n_b <= 0) return rg_fail(err, RG_ERR_ARG, "session: no sequences to evaluate");
    for (int i = 0; i < n_b; i++) {
        rg_status st = rg_session_pick(s, b[i].seq, "evaluate a batch of sequences", err);
        if (st) return st;
        for (int j = 0; j < i; j++)
            if (b[j].seq == b[i].seq)
                return rg_fail(err, RG_ERR_ARG, "session: sequence %d appears twice in one batch (entries %d and %d): "
                               "give each sequence's tokens once, in order", b[i].seq, j, i);
        char who[48];
        snprintf(who, sizeof who, "entry %d (sequence %d): ", i, b[i].seq);
        st = session_check_tokens(s, b[i].ids, b[i].n, who, err);
        if (st) return st;
        *total += b[i].n;
    }
    if (*total > s->opts.n_batch)
        return rg_fail(err, RG_ERR_ARG, "session: a batch of %d sequences holds %lld tokens, more than n_batch %lld: "
                       "split it", n_b, (long long)*total, (long long)s->opts.n_batch);
    return RG_OK;
}

// The graph, its inputs written and run; logits read into `logits` when asked.
static rg_status run_batch(rg_session *s, const rg_seq_tokens *b, int n_b, const rg_seq_seg *segs, int64_t total,
                           float *logits, bool all, bool exact, bool *ran, rg_error *err) {
    const rg_model *m = s->m;
    int64_t max_n = 0, max_kv = 0;
    for (int i = 0; i < n_b; i++) {
        if (segs[i].n > max_n) max_n = segs[i].n;
        if (segs[i].n_past + segs[i].n > max_kv) max_kv = segs[i].n_past + segs[i].n;
    }
    rg_graph *g = NULL;
    rg_exec *ex = NULL;
    rg_model_nodes w;
    rg_status st = session_graph_begin(
        s, rg_session_flash_prompt(s->opts.flash_attn, s->opts.device, m->hp.n_head, max_n, max_kv), exact, &g, &w, err);
    rg_node *ids_n = NULL, *pos_n = NULL, *last_n = NULL, *out = NULL;
    if (!st) {
        const int64_t nb = n_b;
        ids_n = rg_leaf(g, "ids", RG_TYPE_I32, 1, &total, NULL);
        pos_n = rg_leaf(g, "pos", RG_TYPE_I32, 1, &total, NULL);
        last_n = all ? NULL : rg_leaf(g, "last", RG_TYPE_I32, 1, &nb, NULL);
        out = rg_model_forward_seqs(g, m, &w, ids_n, pos_n, segs, n_b, last_n);
        st = session_graph_end(s, g, out, exact, err);
    }
    if (!st) {
        const rg_exec_opts eo = session_batch_exec_opts(s);
        st = rg_exec_create(&ex, g, &eo, err);
    }
    if (!st) {
        int32_t *ids = rg_exec_input(ex, ids_n), *pos = rg_exec_input(ex, pos_n);
        int32_t *last = last_n ? rg_exec_input(ex, last_n) : NULL;
        for (int i = 0; i < n_b; i++) {
            memcpy(ids + segs[i].first, b[i].ids, (size_t)b[i].n * sizeof(int32_t));
            for (int64_t t = 0; t < segs[i].n; t++) pos[segs[i].first + t] = (int32_t)(segs[i].n_past + t);
            if (last) last[i] = (int32_t)(segs[i].first + segs[i].n - 1);
        }
        *ran = true;
        st = rg_exec_run(ex, 0, -1, err);
    }
    if (!st && logits) st = rg_exec_read(ex, out, logits, (size_t)rg_tensor_nelements(&out->t) * sizeof(float), err);
    rg_exec_free(ex);
    rg_graph_free(g);
    return st;
}

rg_status rg_session_eval_seqs(rg_session *s, const rg_seq_tokens *b, int n_b, float *logits, int all_logits,
                               bool exact, rg_error *err) {
    int64_t total = 0;
    rg_status st = check_batch(s, b, n_b, &total, err);
    if (st) return st;
    if (n_b == 1) {  // one sequence: its own evaluation (the same layout of logits), single-token graph included
        return exact ? (all_logits || b[0].n == 1
                            ? rg_session_eval_exact_seq(s, b[0].seq, b[0].ids, b[0].n, logits, err)
                            : rg_fail(err, RG_ERR_ARG, "session: an exact batch gives every token's logits: "
                                      "all_logits must be 1"))
                     : rg_session_eval_seq(s, b[0].seq, b[0].ids, b[0].n, logits, all_logits, err);
    }
    if (exact && !all_logits)
        return rg_fail(err, RG_ERR_ARG, "session: an exact batch gives every token's logits: all_logits must be 1");
    rg_seq_seg *segs = calloc((size_t)n_b, sizeof *segs);
    if (!segs) return rg_fail(err, RG_ERR_NOMEM, "session: out of memory");
    // The recurrent state of every sequence in the batch is put back if the batch fails (on a device, the host's
    // copy brought up to date first).
    const bool recurrent = rg_model_state_recurrent(&s->seqs[0].state);
    if (recurrent && s->resident) st = rg_resident_sync_host(s->resident, err);
    int64_t first = 0;
    for (int i = 0; i < n_b; i++) {
        s->q = &s->seqs[b[i].seq];
        segs[i] = (rg_seq_seg){&s->q->state, first, b[i].n, s->q->n_past};
        first += b[i].n;
        if (!st && recurrent) st = rg_model_state_save(&s->q->state, err);
    }
    // Each sequence's snapshots as its own evaluation takes them (session_snap.c).
    for (int i = 0; !st && i < n_b; i++) {
        s->q = &s->seqs[b[i].seq];
        if (b[i].n == 1) snap_token(s);
        else snap_batch_begin(s, b[i].n);
    }
    bool ran = false;
    if (!st) st = run_batch(s, b, n_b, segs, total, logits, all_logits != 0, exact, &ran, err);
    for (int i = 0; i < n_b; i++) {
        s->q = &s->seqs[b[i].seq];
        if (b[i].n > 1) snap_batch_end(s, b[i].n, !st);
        if (!st) {
            s->q->n_past += b[i].n;
            continue;
        }
        snap_forget_after(&s->q->snap, segs[i].n_past);
        if (recurrent && ran) {
            rg_error ignored;
            rg_model_state_restore(&s->q->state);
            if (rg_session_seq_state_upload(s, &ignored)) s->q->state_lost = true;
        }
    }
    free(segs);
    return st;
}
