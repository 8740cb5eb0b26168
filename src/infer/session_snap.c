// session_snap.c - exact rewind of recurrent state: the snapshots a session keeps under
// RETRO_RECURRENT_ROLLBACK=auto (read once at rg_session_create; off, the default, keeps none), and the
// restore rg_session_rewind runs from them.
//
// What is kept (all planned at rg_session_create from n_batch, or rg_session_opts.snapshot_tokens when smaller, and
// SNAP_RING, one allocation,
// rg_session_snapshot_bytes reports it):
//   - For the last evaluated batch of several tokens (at positions batch_start .. batch_start + n - 1):
//     prev, a copy of every per-sequence buffer before the batch; per short-conv or SSM layer the batch's conv
//     inputs x [C, n] (SSM_CONV's x, written by a CPY_INTO the layer adds to the batch's graph); per SSM layer
//     the SSM state after every token [N*P*H, n] (SSM_SCAN's part 2, written inside the scan's loop, then a
//     CPY_INTO). No conv window per token is kept: the window after token q of the batch is the last K-1
//     columns of concat(prev's window, x[:, 0..q)), which CONV_RS_GATHER makes when a rewind needs it, bit for
//     bit what the conv would have left (a copy of the same floats).
//   - For single-token steps, a ring of SNAP_RING copies of every per-sequence buffer, each taken before the
//     step (the state after n_past tokens), keyed by that position.
// A rewind to pos (0 < pos < n_past) restores, per recurrent layer, the conv window (CONV_RS_GATHER of prev
// and x at q = pos - batch_start) and the SSM state (prev's at q = 0, the kept state after token q-1 of the
// batch otherwise) through a small graph run like the batches' (so it runs where they run), or copies a ring
// entry back. Anything else is refused naming what is kept, never a state of another position: every snapshot
// after a rewind's position or a failed call's start is forgotten (snap_forget_after); a loaded state file replaces
// them with the saving session's (session_state.c, through snap_batch_parts; what this session's room holds).
//
// Why this is exact: the restored bytes are the bytes a session stopped at pos holds. The conv window is a
// copy of the inputs it would hold; the SSM state after token q is the scan's state at that step, and the scan
// runs its recurrence in token order per head, so the state after q of a batch of n equals the final state of
// the batch cut after q (test_ops checks the part against a cut scan; test_session_rewind_recurrent checks
// logits and state files after a continuation, memcmp).
//
// Memory: prev + ring = (1 + SNAP_RING) x the recurrent state, plus per batch token C floats per conv and
// N*P*H per SSM layer. For LFM2 (convs only) and a verification batch of 16 tokens: 16 x C per conv layer
// against 16 x (K-1) x C for 16 windows.
//
// On a device the batch's snapshots are written and read by graphs there (resident copies of the snapshot
// buffers; prev is copied on the host after the state is brought back and refreshed there); the ring copies
// host bytes, so each single-token step first downloads the state (rg_resident_sync_host) and a ring restore
// uploads it again. Not built yet: several sequences per session.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/exec.h"
#include "infer/session_internal.h"
#include "model/arch.h"

// The per-sequence buffers of s's state copied to (save) or from (!save) dst, in model/state.c's order.
static void copy_seq(rg_session *s, uint8_t *dst, bool save) {
    for (int64_t il = 0; il < s->q->state.n_layer; il++) {
        rg_layer_state *ls = &s->q->state.layers[il];
        for (int j = 0; j < ls->n_bufs; j++) {
            if (ls->per_token[j]) continue;
            if (save) memcpy(dst, ls->buf[j], ls->bytes[j]);
            else memcpy(ls->buf[j], dst, ls->bytes[j]);
            dst += ls->bytes[j];
        }
    }
}

// On a device the state lives in the resident copies: brings them to the host bytes (before a copy), or sends the
// host bytes of every per-sequence buffer there (after one is put back): rg_session_seq_state_upload.
static rg_status seq_sync_host(rg_session *s, rg_error *err) {
    return s->resident ? rg_resident_sync_host(s->resident, err) : RG_OK;
}


// The offset of per-sequence buffer j of layer il in a copy_seq copy.
static size_t seq_offset(const rg_session *s, int64_t il, int j) {
    size_t off = 0;
    for (int64_t l = 0; l < s->q->state.n_layer; l++) {
        const rg_layer_state *ls = &s->q->state.layers[l];
        for (int k = 0; k < ls->n_bufs; k++) {
            if (l == il && k == j) return off;
            if (!ls->per_token[k]) off += ls->bytes[k];
        }
    }
    return off;
}

// Conv channels C and window K-1 of layer il's conv state (buffer 0 of a short-conv or SSM mixer), or 0.
static int64_t conv_channels(const rg_session *s, int64_t il) {
    const rg_layer_kind k = s->m->layers[il].mixer;
    if (k != RG_KIND_SHORTCONV && k != RG_KIND_SSM) return 0;
    return (int64_t)(s->q->state.layers[il].bytes[0] / sizeof(float)) / (s->m->hp.n_conv - 1);
}

static int64_t ssm_floats(const rg_session *s, int64_t il) {
    return s->m->layers[il].mixer == RG_KIND_SSM ? (int64_t)(s->q->state.layers[il].bytes[1] / sizeof(float)) : 0;
}

rg_status snap_init(rg_session *s, rg_error *err) {
    snap_store *sn = &s->q->snap;
    memset(sn, 0, sizeof *sn);
    sn->batch_n = -1;
    for (int i = 0; i < SNAP_RING; i++) sn->ring_pos[i] = -1;
    const char *env = getenv("RETRO_RECURRENT_ROLLBACK");
    if (env && *env && strcmp(env, "off") && strcmp(env, "auto"))
        return rg_fail(err, RG_ERR_ARG, "RETRO_RECURRENT_ROLLBACK=%.64s: expected off (the default: no snapshots) or "
                       "auto (keep snapshots of the recurrent state for exact rewinds)", env);
    sn->requested = s->opts.recurrent_rollback ? s->opts.recurrent_rollback > 0 : env && !strcmp(env, "auto");
    if (!sn->requested || !rg_model_state_recurrent(&s->q->state)) return RG_OK;
    const int64_t L = s->q->state.n_layer;
    const int64_t cap = s->opts.snapshot_tokens > 0 && s->opts.snapshot_tokens < s->opts.n_batch ? s->opts.snapshot_tokens
                                                                                                 : s->opts.n_batch;
    size_t bytes = (1 + SNAP_RING) * s->q->state.seq_bytes;
    for (int64_t il = 0; il < L; il++)
        bytes += (size_t)(conv_channels(s, il) + ssm_floats(s, il)) * (size_t)cap * sizeof(float);
    sn->conv_x = calloc((size_t)L, sizeof *sn->conv_x);
    sn->ssm = calloc((size_t)L, sizeof *sn->ssm);
    sn->mem = malloc(bytes);
    if (!sn->conv_x || !sn->ssm || !sn->mem) {
        snap_free(sn);
        return rg_fail(err, RG_ERR_NOMEM, "session: out of memory for %.1f MiB of recurrent-state snapshots "
                       "(RETRO_RECURRENT_ROLLBACK=auto, %lld tokens a batch)", (double)bytes / 1048576.0, (long long)cap);
    }
    sn->on = true, sn->cap = cap, sn->bytes = bytes;
    sn->prev = sn->mem;
    sn->ring = sn->prev + s->q->state.seq_bytes;
    uint8_t *p = sn->ring + SNAP_RING * s->q->state.seq_bytes;
    for (int64_t il = 0; il < L; il++) {
        const int64_t C = conv_channels(s, il), NPH = ssm_floats(s, il);
        if (C) sn->conv_x[il] = (float *)p, p += (size_t)(C * cap) * sizeof(float);
        if (NPH) sn->ssm[il] = (float *)p, p += (size_t)(NPH * cap) * sizeof(float);
    }
    return RG_OK;
}

void snap_free(snap_store *sn) {
    free(sn->mem);
    free(sn->conv_x);
    free(sn->ssm);
    memset(sn, 0, sizeof *sn);
    sn->batch_n = -1;
}

int64_t rg_session_snapshot_bytes(const rg_session *s) {
    int64_t bytes = 0;
    for (int i = 0; i < s->opts.n_seq; i++) bytes += (int64_t)s->seqs[i].snap.bytes;
    return bytes;
}

void snap_forget_after(snap_store *sn, int64_t pos) {
    if (sn->batch_n >= 0 && pos < sn->batch_start + sn->batch_n)
        sn->batch_n = pos >= sn->batch_start ? pos - sn->batch_start : -1;
    for (int i = 0; i < SNAP_RING; i++)
        if (sn->ring_pos[i] > pos) sn->ring_pos[i] = -1;
}

void snap_batch_begin(rg_session *s, int64_t n) {
    snap_store *sn = &s->q->snap;
    if (!sn->on) return;
    sn->batch_n = -1;  // prev and the buffers are about to be overwritten
    rg_error ignored;
    if (n > sn->cap || seq_sync_host(s, &ignored)) return;  // nothing kept for this batch
    copy_seq(s, sn->prev, true);
    // A device copy of prev's buffers (made by an earlier rewind's graph) is stale now.
    for (int64_t il = 0; s->resident && il < s->q->state.n_layer; il++) {
        const rg_layer_state *ls = &s->q->state.layers[il];
        for (int j = 0; j < ls->n_bufs; j++)
            if (!ls->per_token[j] && rg_resident_refresh(s->resident, sn->prev + seq_offset(s, il, j), ls->bytes[j], &ignored))
                return;
    }
    for (int64_t il = 0; il < s->q->state.n_layer; il++) {
        rg_layer_state *ls = &s->q->state.layers[il];
        ls->snap_conv_x = sn->conv_x[il], ls->snap_ssm = sn->ssm[il], ls->snap_cap = sn->cap;
    }
}

void snap_batch_end(rg_session *s, int64_t n, bool ok) {
    snap_store *sn = &s->q->snap;
    if (!sn->on) return;
    bool kept = false;
    for (int64_t il = 0; il < s->q->state.n_layer; il++) {
        rg_layer_state *ls = &s->q->state.layers[il];
        kept = kept || ls->snap_conv_x;
        ls->snap_conv_x = ls->snap_ssm = NULL, ls->snap_cap = 0;
    }
    if (ok && kept) sn->batch_start = s->q->n_past, sn->batch_n = n;
}

void snap_token(rg_session *s) {
    snap_store *sn = &s->q->snap;
    rg_error ignored;
    if (!sn->on) return;
    // On a device: the state brought back first (a download per token: the ring's cost there).
    if (seq_sync_host(s, &ignored)) {
        snap_forget_after(sn, s->q->n_past - 1);  // no entry for this position
        return;
    }
    int slot = sn->ring_next;
    for (int i = 0; i < SNAP_RING; i++)
        if (sn->ring_pos[i] == s->q->n_past) slot = i;  // the same position again (after a rewind): the same state
    if (slot == sn->ring_next) sn->ring_next = (sn->ring_next + 1) % SNAP_RING;
    copy_seq(s, sn->ring + (size_t)slot * s->q->state.seq_bytes, true);
    sn->ring_pos[slot] = s->q->n_past;
}

int snap_batch_parts(const rg_session *s, snap_part *parts) {
    const snap_store *sn = &s->q->snap;
    int n = 0;
    parts[n++] = (snap_part){sn->prev, s->q->state.seq_bytes, 0};
    for (int64_t il = 0; il < s->q->state.n_layer; il++) {
        const int64_t C = conv_channels(s, il), NPH = ssm_floats(s, il);
        if (C) parts[n++] = (snap_part){sn->on ? (uint8_t *)sn->conv_x[il] : NULL, 0, (size_t)C * sizeof(float)};
        if (NPH) parts[n++] = (snap_part){sn->on ? (uint8_t *)sn->ssm[il] : NULL, 0, (size_t)NPH * sizeof(float)};
    }
    return n;
}

// The batch's device copies are keyed by its length (one per batch size seen), prev's per buffer: every copy inside
// the one allocation.
rg_status snap_upload(rg_session *s, rg_error *err) {
    return s->q->snap.on ? rg_resident_refresh_within(s->resident, s->q->snap.mem, s->q->snap.bytes, err) : RG_OK;
}

// The state after token q of the kept batch (0 <= q <= batch_n), through one graph of CONV_RS_GATHER and
// CPY_INTO nodes per recurrent layer.
static rg_status restore_batch(rg_session *s, int64_t q, rg_error *err) {
    snap_store *sn = &s->q->snap;
    const int64_t n = sn->batch_n, K1 = s->m->hp.n_conv - 1;
    rg_graph *g = rg_graph_new();
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "session: out of memory for the rewind's graph");
    for (int64_t il = 0; il < s->q->state.n_layer; il++) {
        rg_layer_state *ls = &s->q->state.layers[il];
        const int64_t C = conv_channels(s, il), NPH = ssm_floats(s, il);
        if (!C) continue;
        rg_node *x = rg_leaf(g, "snap_conv_x", RG_TYPE_F32, 3, (int64_t[]){C, n, 1}, sn->conv_x[il]);     // [C, n, 1]
        rg_node *prev = rg_leaf(g, "snap_prev_conv", RG_TYPE_F32, 3, (int64_t[]){C, K1, 1},
                                sn->prev + seq_offset(s, il, 0));                                         // [C, K-1, 1]
        rg_node *conv = rg_leaf(g, "conv_state", RG_TYPE_F32, 3, (int64_t[]){C, K1, 1}, ls->buf[0]);      // [C, K-1, 1]
        rg_cpy_into(g, rg_conv_rs_gather(g, x, prev, q), conv);
        if (!NPH) continue;
        rg_node *ssm = rg_leaf(g, "ssm_state", RG_TYPE_F32, 1, (int64_t[]){NPH}, ls->buf[1]);             // [N*P*H]
        rg_node *from;
        if (q == 0) {
            from = rg_leaf(g, "snap_prev_ssm", RG_TYPE_F32, 1, (int64_t[]){NPH}, sn->prev + seq_offset(s, il, 1));
        } else {  // column q-1 of the kept states [N*P*H, n]
            rg_node *all = rg_leaf(g, "snap_ssm", RG_TYPE_F32, 2, (int64_t[]){NPH, n}, sn->ssm[il]);
            from = rg_view(g, all, 1, (int64_t[]){NPH}, (size_t[]){sizeof(float)},
                           (size_t)((q - 1) * NPH) * sizeof(float));
        }
        rg_cpy_into(g, from, ssm);
    }
    rg_status st = rg_graph_error(g, err);
    rg_exec *ex = NULL;
    if (!st) {
        rg_exec_opts eo = {.pool = s->pool, .device = s->opts.device, .backend = s->dev, .resident = s->resident};
        st = rg_exec_create(&ex, g, &eo, err);
    }
    if (!st) st = rg_exec_run(ex, 0, -1, err);
    rg_exec_free(ex);
    rg_graph_free(g);
    return st;
}

rg_status snap_restore(rg_session *s, int64_t pos, rg_error *err) {
    snap_store *sn = &s->q->snap;
    if (!sn->on)
        return rg_fail(err, RG_ERR_UNSUPPORTED,
                       "session: rewind to position %lld of %lld: this %s model's short-conv/SSM state holds every token "
                       "and no snapshot of it is kept (%s; rewinding to 0 starts over)", (long long)pos,
                       (long long)s->q->n_past, s->m->hp.arch_name,
                       "RETRO_RECURRENT_ROLLBACK is off: set it to auto before the session is made");
    if (sn->batch_n >= 0 && pos >= sn->batch_start && pos <= sn->batch_start + sn->batch_n)
        return restore_batch(s, pos - sn->batch_start, err);
    for (int i = 0; i < SNAP_RING; i++)
        if (sn->ring_pos[i] == pos) {
            copy_seq(s, sn->ring + (size_t)i * s->q->state.seq_bytes, false);
            return rg_session_seq_state_upload(s, err);
        }
    int64_t oldest = sn->batch_n >= 0 ? sn->batch_start : -1;
    for (int i = 0; i < SNAP_RING; i++)
        if (sn->ring_pos[i] >= 0 && (oldest < 0 || sn->ring_pos[i] < oldest)) oldest = sn->ring_pos[i];
    if (oldest < 0)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "session: rewind to position %lld of %lld: no snapshot of the recurrent "
                       "state is kept (none since the last start, load or rewind before them)", (long long)pos,
                       (long long)s->q->n_past);
    char batch[96] = "none";
    if (sn->batch_n >= 0)
        snprintf(batch, sizeof batch, "%lld..%lld", (long long)sn->batch_start, (long long)(sn->batch_start + sn->batch_n));
    return rg_fail(err, RG_ERR_UNSUPPORTED, "session: rewind to position %lld of %lld: the recurrent state after token "
                   "%lld is no longer kept (the last batch's snapshots cover positions %s, the ring the last %d "
                   "single-token steps; the oldest kept position is %lld)", (long long)pos, (long long)s->q->n_past,
                   (long long)pos, batch, SNAP_RING, (long long)oldest);
}
