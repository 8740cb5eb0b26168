// session.c - see session.h. One graph per evaluated batch of several
// tokens: built, planned, run and dropped; the KV cache and the thread pool
// persist.
//
// Single tokens (generation) reuse one planned graph for every position of
// the context instead (decode_graph below): building and planning the ~1300
// nodes of a token took 300-400 us, 3-4% of a token on SmolLM2. A graph for
// position p differs from one for p + 1 only in the KV-cache views (their
// offsets and lengths) and the shapes that follow from them (the scores and
// their softmax), each changing by a fixed step per position. So the graph is
// built and planned for the last position of the context (the largest
// shapes), the steps are read off graphs built for the two positions before it
// (and must agree: linear, or the graph is not used), and each token patches
// those nodes to its position and rebinds the views. Every kernel then sees
// exactly the graph a fresh build would give (test_session compares with a
// full pass). One graph for the whole context costs only the largest scores
// in the plan (n_ctx x n_head floats) and is built once per session: with a
// range of 32 positions, the three builds, the plan and the first touch of a
// fresh buffer came back every 32 tokens (~1 ms each time on SmolLM2), and a
// truncated session (a new prompt) rebuilt at its first generated token.
#include "infer/session.h"
#include "infer/session_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/ops.h"
#include "model/forward.h"
#include "model/lora.h"
#include "model/state.h"

// Weights in huge pages. Generating a token streams every weight once (92 MB
// for SmolLM2 Q4_1), and with the file's 4 KiB pages each page costs a TLB
// miss and restarts the hardware prefetchers, which stop at page boundaries.
// A session on the CPU therefore copies the model's tensor data into
// anonymous memory advised for transparent huge pages (2 MiB) and points the
// graphs' weight leaves there. Measured on the weight products of a token
// alone, one thread: 7.8-12.7 GB/s from 4 KiB pages, 12.9-13.9 GB/s from
// huge pages. Opt-in (RETRO_WEIGHTS_HUGEPAGES=1): by default the mapping is
// used in place, as the loader promises (no second copy of the weights in
// memory). Skipped also when the kernel has transparent huge pages off, when
// the data exceed a quarter of the RAM, or when the memory cannot be had.
// The file's own mapping is advised for huge pages too (base/file.c): a model
// not yet in the page cache gets them without a copy; this copy is for one
// already cached in 4 KiB pages.
#define HUGE_PAGE ((size_t)2 << 20)

// A draw requested with an evaluation: from the last token's logits, into *out.
typedef struct sample_req {
    rg_sampler *smp;
    int32_t *out;
} sample_req;

// Whether the kernel gives transparent huge pages to memory advised for them.
static bool thp_available(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char line[128] = {0};
    bool ok = fgets(line, sizeof line, f) && (strstr(line, "[always]") || strstr(line, "[madvise]"));
    fclose(f);
    return ok;
}

// The copy described above, or none (wc->dst == NULL) when it does not apply.
static void weight_copy_make(weight_copy *wc, const rg_model *m) {
    memset(wc, 0, sizeof *wc);
    const rg_gguf *f = m->file;
    const uint8_t *lo = NULL, *hi = NULL;
    for (uint64_t i = 0; f && i < f->n_tensors; i++) {
        const uint8_t *d = f->tensors[i].data;
        if (!d || !f->tensors[i].nbytes) continue;
        if (!lo || d < lo) lo = d;
        if (!hi || d + f->tensors[i].nbytes > hi) hi = d + f->tensors[i].nbytes;
    }
    if (!lo || !thp_available()) return;
    size_t size = (size_t)(hi - lo), mapped = (size + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0 || mapped > (size_t)pages * (size_t)page / 4) return;
    // Over-map by a huge page to cut a 2 MiB-aligned range out of it.
    uint8_t *raw = mmap(NULL, mapped + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return;
    uint8_t *dst = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (dst > raw) munmap(raw, (size_t)(dst - raw));
    munmap(dst + mapped, (size_t)(raw + HUGE_PAGE - dst));
    if (madvise(dst, mapped, MADV_HUGEPAGE) != 0) {
        munmap(dst, mapped);
        return;
    }
    memcpy(dst, lo, size);
    mprotect(dst, mapped, PROT_READ);  // weights are never written
    *wc = (weight_copy){lo, dst, size, mapped};
}

// A prompt batch through flash attention. bench_flash_attn's prompt rows (SmolLM2-135M's 9 heads over 3, Dh 64,
// an f16 cache, T queries over n_kv keys, 2 threads on a loaded 2-core AVX2 machine) found FLASH_ATTN_EXT at
// 0.53-0.83x the speed of the materialized MUL_MAT, SOFT_MAX, MUL_MAT on every shape measured (n_kv 256-4096,
// T 32-512; e.g. n_kv 4096, T 256: 64 ms against 38 ms per layer), and only 9% faster on values stored
// untransposed (58 ms): the materialized path's GEMMs beat the flash kernel's dot products (no FMA, to keep the
// AVX2 and baseline loops' bits alike), so speed never picks it here. What it saves is memory: the scores
// [n_kv, T, n_head] f32 (and their softmax) grow with the product and are never made. auto therefore takes flash once those scores would pass FLASH_PROMPT_SCORES: a long prompt in one batch
// (n_batch = the prompt, as bench_generate runs it: SmolLM2 at n_kv = T = 4096 would hold 576 MiB of scores), not
// generate's or perplexity's 256-token batches at a few thousand tokens (36 MiB at n_kv 4096).
#define FLASH_PROMPT_SCORES ((size_t)256 << 20)

// The most tokens of one exact evaluation (rg_session_eval_exact cuts longer calls into such batches, which
// changes nothing of their bits): a verification batch is the draft and one token, and past a few dozen
// columns the dot products cost more than the prompt paths they replace.
#define SESSION_EXACT_BATCH 32

bool rg_session_flash_prompt(rg_flash_attn_mode mode, rg_device device, int64_t n_head, int64_t n_tokens, int64_t n_kv) {
    if (n_tokens <= 1 || mode == RG_FLASH_ATTN_OFF) return false;
    if (mode == RG_FLASH_ATTN_ON) return true;
    return device == RG_DEVICE_CPU && (size_t)n_kv * (size_t)n_tokens * (size_t)n_head * sizeof(float) > FLASH_PROMPT_SCORES;
}

static void weight_copy_free(weight_copy *wc) {
    if (wc->dst) munmap(wc->dst, wc->mapped);
    memset(wc, 0, sizeof *wc);
}

// Points the graph's leaves over the model's data at the copy.
static void weight_copy_bind(const weight_copy *wc, rg_graph *g) {
    if (!wc->dst) return;
    for (int i = 0; i < g->n_nodes; i++) {
        rg_node *n = g->nodes[i];
        const uint8_t *d = n->t.data;
        if (n->op == RG_OP_NONE && d && d >= wc->src && d < wc->src + wc->size) n->t.data = wc->dst + (d - wc->src);
    }
}

static void decode_graph_free(decode_graph *d) {
    rg_exec_free(d->ex);
    rg_graph_free(d->g);
    free(d->var);
    memset(d, 0, sizeof *d);
}

// Whether any layer weight takes the BF16 tiles in prompts here (a session's tiles cache serves them).
static bool prompt_tiles_weights(const rg_model *m) {
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        for (int r = 0; r < RG_N_ROLES; r++)
            if (m->layers[il].t[r] && cpu_prompt_bf16_tiles(m->layers[il].t[r]->type)) return true;
    return false;
}

rg_tiles_cache_stats rg_session_tiles_stats(const rg_session *s) { return rg_tiles_cache_get_stats(s->tiles); }

rg_status rg_session_create(rg_session **out, const rg_model *m, const rg_session_opts *opts, rg_error *err) {
    *out = NULL;
    rg_session *s = calloc(1, sizeof *s);
    if (!s) return rg_fail(err, RG_ERR_NOMEM, "session: out of memory");
    s->m = m;
    s->opts = *opts;
    if (s->opts.n_ctx <= 0) s->opts.n_ctx = m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    if (s->opts.n_batch <= 0) s->opts.n_batch = 256;
    if (s->opts.flash_attn == RG_FLASH_ATTN_ON && s->opts.device != RG_DEVICE_CPU) {
        free(s);
        return rg_fail(err, RG_ERR_UNSUPPORTED, "session: flash attention is on, but FLASH_ATTN_EXT has no CUDA kernel "
                       "yet: use --flash-attn off or auto (the materialized attention) on the device");
    }
    if (s->opts.n_seq <= 0) s->opts.n_seq = 1;
    if (s->opts.n_seq > RG_SESSION_MAX_SEQ) {
        const int n_seq = s->opts.n_seq;
        free(s);
        return rg_fail(err, RG_ERR_ARG, "session: %d sequences asked for, at most %d", n_seq, RG_SESSION_MAX_SEQ);
    }
    s->seqs = calloc((size_t)s->opts.n_seq, sizeof *s->seqs);
    if (!s->seqs) {
        free(s);
        return rg_fail(err, RG_ERR_NOMEM, "session: out of memory");
    }
    rg_status st = RG_OK;
    for (int i = 0; i < s->opts.n_seq; i++) s->seqs[i].snap.batch_n = -1;
    for (int i = 0; !st && i < s->opts.n_seq; i++) {
        s->q = &s->seqs[i];
        st = rg_model_state_init(&s->q->state, m, s->opts.n_ctx, RG_TYPE_F16, err);
        if (!st) st = snap_init(s, err);  // after the state (sized from it) and n_batch
    }
    s->q = &s->seqs[0];
    if (!st) st = rg_threadpool_create(&s->pool, opts->n_threads, err);
    const char *hp_env = getenv("RETRO_WEIGHTS_HUGEPAGES");
    if (!st && s->opts.device == RG_DEVICE_CPU && hp_env && !strcmp(hp_env, "1")) weight_copy_make(&s->wc, m);
    if (!st && s->opts.device == RG_DEVICE_CUDA) st = rg_backend_cuda_create(&s->dev, 0, err);
    if (!st && s->dev) st = rg_resident_create(&s->resident, s->dev, err);
    if (!st && s->opts.device == RG_DEVICE_CPU && !s->opts.exact_activations && prompt_tiles_weights(m)) {
        const size_t cap = rg_tiles_cache_default_cap(0, 0);
        if (cap) st = rg_tiles_cache_create(&s->tiles, cap, err);
    }
    const char *ds = getenv("RETRO_DEVICE_SAMPLING");
    if (!st && ds && *ds && strcmp(ds, "0") && strcmp(ds, "1"))
        st = rg_fail(err, RG_ERR_ARG, "RETRO_DEVICE_SAMPLING=%.64s: expected 0 (draw on the CPU) or 1 (the default: "
                     "draw on the device)", ds);
    s->device_sampling = s->dev && !(ds && !strcmp(ds, "0"));
    if (st) {
        rg_session_free(s);
        return st;
    }
    *out = s;
    return RG_OK;
}

void rg_session_free(rg_session *s) {
    if (!s) return;
    for (int i = 0; s->seqs && i < s->opts.n_seq; i++) decode_graph_free(&s->seqs[i].dec);
    rg_cuda_sampler_free(s->dsamp);
    free(s->pen);
    free(s->logits);
    rg_resident_free(s->resident);
    rg_backend_free(s->dev);
    weight_copy_free(&s->wc);
    rg_exec_mem_free(&s->mem);
    rg_tiles_cache_free(s->tiles);  // after every exec that read it (the decode graph's, above)
    for (int i = 0; s->seqs && i < s->opts.n_seq; i++) {
        snap_free(&s->seqs[i].snap);
        rg_model_state_free(&s->seqs[i].state);
    }
    free(s->seqs);
    rg_threadpool_free(s->pool);
    free(s);
}

rg_status rg_session_pick(rg_session *s, int seq, const char *what, rg_error *err) {
    if (seq < 0 || seq >= s->opts.n_seq)
        return rg_fail(err, RG_ERR_ARG, "session: %s: sequence %d does not exist (the session holds %d: 0..%d)", what,
                       seq, s->opts.n_seq, s->opts.n_seq - 1);
    s->q = &s->seqs[seq];
    return RG_OK;
}

int rg_session_n_seq(const rg_session *s) { return s->opts.n_seq; }
int64_t rg_session_n_past(const rg_session *s) { return s->seqs[0].n_past; }
int64_t rg_session_n_past_seq(const rg_session *s, int seq) {
    return seq >= 0 && seq < s->opts.n_seq ? s->seqs[seq].n_past : -1;
}
bool rg_session_device_sampling(const rg_session *s) { return s->device_sampling; }
int64_t rg_session_n_ctx(const rg_session *s) { return s->opts.n_ctx; }
rg_exec_stats rg_session_decode_stats(const rg_session *s) {
    const rg_exec_stats none = {0};
    return s->seqs[0].dec.ex ? rg_exec_get_stats(s->seqs[0].dec.ex) : none;
}

const rg_model *rg_session_model(const rg_session *s) { return s->m; }

// On a device the recurrent state lives in the resident copies, which the graphs read and write: after the host
// bytes change (a reset, a restore) they are uploaded again.
rg_status rg_session_seq_state_upload(rg_session *s, rg_error *err) {
    for (int64_t il = 0; s->resident && il < s->q->state.n_layer; il++) {
        const rg_layer_state *ls = &s->q->state.layers[il];
        for (int j = 0; j < ls->n_bufs; j++) {
            if (ls->per_token[j]) continue;
            rg_status st = rg_resident_refresh(s->resident, ls->buf[j], ls->bytes[j], err);
            if (st) return st;
        }
    }
    return RG_OK;
}

static void truncate_seq(rg_session *s, int64_t n_past) {
    rg_error ignored;
    if (n_past == 0) {
        rg_model_state_reset(&s->q->state);  // a fresh sequence
        s->q->state_lost = rg_session_seq_state_upload(s, &ignored) != RG_OK;  // the next call says the state is lost
    } else if (n_past > 0 && n_past < s->q->n_past && rg_model_state_recurrent(&s->q->state)) {
        // The recurrent state holds every token: back to n_past only from a snapshot (session_snap.c), else lost.
        if (snap_restore(s, n_past, &ignored)) s->q->state_lost = true;
    }
    if (n_past >= 0 && n_past < s->q->n_past) {
        s->q->n_past = n_past;
        snap_forget_after(&s->q->snap, n_past);
    }
}

void rg_session_truncate(rg_session *s, int64_t n_past) {
    s->q = &s->seqs[0];
    truncate_seq(s, n_past);
}

rg_status rg_session_rewind(rg_session *s, int64_t pos, rg_error *err) { return rg_session_rewind_seq(s, 0, pos, err); }

rg_status rg_session_rewind_seq(rg_session *s, int seq, int64_t pos, rg_error *err) {
    rg_status picked = rg_session_pick(s, seq, "rewind", err);
    if (picked) return picked;
    if (pos < 0 || pos > s->q->n_past)
        return rg_fail(err, RG_ERR_ARG, "session: rewind to position %lld: sequence %d holds %lld tokens (0..%lld)",
                       (long long)pos, (int)(s->q - s->seqs), (long long)s->q->n_past, (long long)s->q->n_past);
    if (pos == s->q->n_past) return RG_OK;
    if (pos > 0 && rg_model_state_recurrent(&s->q->state)) {
        if (s->q->state_lost)
            return rg_fail(err, RG_ERR_ARG, "session: rewind to position %lld: the recurrent state no longer matches "
                           "position %lld (a failed evaluation); truncate to 0", (long long)pos, (long long)s->q->n_past);
        rg_status st = snap_restore(s, pos, err);  // the state after pos tokens, or refused (nothing changed)
        if (st && st != RG_ERR_UNSUPPORTED) s->q->state_lost = true;  // a restore that failed while it ran
        if (st) return st;
        s->q->n_past = pos;
        snap_forget_after(&s->q->snap, pos);
        return RG_OK;
    }
    truncate_seq(s, pos);
    if (s->q->state_lost)  // pos 0 of a recurrent model on a device whose reset did not reach it
        return rg_fail(err, RG_ERR_IO, "session: rewind to 0: the recurrent state on the device could not be reset");
    return RG_OK;
}

rg_status session_graph_begin(rg_session *s, bool flash, bool exact, rg_graph **gp, rg_model_nodes *w, rg_error *err) {
    rg_graph *g = rg_graph_new();
    *gp = g;
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "session: out of memory");
    rg_status st = rg_model_leaf_nodes(g, s->m, w, err);
    w->flash_attn = !exact && flash;
    w->exact_columns = exact;
    if (!st && s->opts.lora) st = rg_lora_attach(g, s->opts.lora, w, s->opts.lora_scale, false, err);
    return st;
}

rg_status session_graph_end(rg_session *s, rg_graph *g, rg_node *out, bool exact, rg_error *err) {
    if (!out) return rg_graph_error(g, err);
    out->flags |= RG_NODE_OUTPUT;
    for (int i = 0; exact && i < g->n_nodes; i++)
        if (g->nodes[i]->op == RG_OP_MUL_MAT && g->nodes[i]->src[1]->t.ne[2] == 1 && g->nodes[i]->src[1]->t.ne[3] == 1)
            g->nodes[i]->ip[0] = RG_MUL_MAT_COLUMNS;  // the projections (attention runs ATTN_DECODE)
    weight_copy_bind(&s->wc, g);
    return RG_OK;
}

rg_exec_opts session_batch_exec_opts(rg_session *s) {
    return (rg_exec_opts){.pool = s->pool, .device = s->opts.device, .profile = s->opts.profile, .mem = &s->mem,
                          .int8_activations = !s->opts.exact_activations, .backend = s->dev,
                          .resident = s->resident, .tiles_cache = s->tiles};
}

// The graph of n tokens at positions n_past.. (logits of the last or all), not planned.
// exact: every token computed as a single-token step computes it (rg_session_eval_exact): attention query by
// query, and every MUL_MAT marked RG_MUL_MAT_COLUMNS.
static rg_status build_graph(rg_session *s, int64_t n, int64_t n_past, bool all, bool exact, rg_graph **gp,
                             rg_node **ids_n, rg_node **pos_n, rg_node **out, rg_error *err) {
    const rg_model *m = s->m;
    rg_model_nodes w;
    *out = NULL;
    rg_status st = session_graph_begin(
        s, rg_session_flash_prompt(s->opts.flash_attn, s->opts.device, m->hp.n_head, n, n_past + n), exact, gp, &w, err);
    if (st) return st;
    rg_graph *g = *gp;
    *ids_n = rg_leaf(g, "ids", RG_TYPE_I32, 1, &n, NULL);
    *pos_n = rg_leaf(g, "pos", RG_TYPE_I32, 1, &n, NULL);
    *out = rg_model_forward_kv(g, m, &w, *ids_n, *pos_n, &s->q->state, n_past, !all);
    return session_graph_end(s, g, *out, exact, err);
}

// Whether the nodes of a and b have the same ops and sources (by index).
static bool same_structure(const rg_graph *a, const rg_graph *b) {
    if (a->n_nodes != b->n_nodes) return false;
    for (int i = 0; i < a->n_nodes; i++) {
        const rg_node *x = a->nodes[i], *y = b->nodes[i];
        if (x->op != y->op || x->t.type != y->t.type || x->flags != y->flags || (x->view_of == NULL) != (y->view_of == NULL))
            return false;
        if (x->view_of && x->view_of->id != y->view_of->id) return false;
        for (int k = 0; k < RG_MAX_SRC; k++) {
            if ((x->src[k] == NULL) != (y->src[k] == NULL)) return false;
            if (x->src[k] && x->src[k]->id != y->src[k]->id) return false;
        }
    }
    return true;
}

// Builds and plans the single-token graph serving positions [lo, hi] (hi >= 2),
// with the per-position steps of its variable nodes. RG_ERR_UNSUPPORTED when
// the graphs are not linear in the position (then tokens build their own).
static rg_status decode_graph_make(rg_session *s, int64_t lo, int64_t hi, rg_error *err) {
    decode_graph *d = &s->q->dec;
    decode_graph_free(d);
    rg_graph *g1 = NULL, *g2 = NULL;
    rg_node *ids, *pos, *out;
    rg_status st = build_graph(s, 1, hi, false, false, &d->g, &d->ids, &d->pos, &d->out, err);
    if (!st) st = build_graph(s, 1, hi - 1, false, false, &g1, &ids, &pos, &out, err);
    if (!st) st = build_graph(s, 1, hi - 2, false, false, &g2, &ids, &pos, &out, err);
    if (!st && (!same_structure(d->g, g1) || !same_structure(d->g, g2)))
        st = rg_fail(err, RG_ERR_UNSUPPORTED, "session: single-token graphs differ in structure between positions");
    int n_var = 0;
    if (!st) {
        d->var = malloc(sizeof *d->var * (size_t)d->g->n_nodes);
        if (!d->var) st = rg_fail(err, RG_ERR_NOMEM, "session: out of memory");
    }
    for (int i = 0; !st && i < d->g->n_nodes; i++) {
        const rg_tensor *t0 = &d->g->nodes[i]->t, *t1 = &g1->nodes[i]->t, *t2 = &g2->nodes[i]->t;
        var_node v = {i, {0}, {0}, (int64_t)t0->view_offs - (int64_t)t1->view_offs};
        bool moves = v.doffs != 0, linear = v.doffs == (int64_t)t1->view_offs - (int64_t)t2->view_offs;
        for (int k = 0; k < RG_MAX_DIMS; k++) {
            v.dne[k] = t0->ne[k] - t1->ne[k];
            v.dnb[k] = (int64_t)t0->nb[k] - (int64_t)t1->nb[k];
            moves = moves || v.dne[k] || v.dnb[k];
            linear = linear && v.dne[k] == t1->ne[k] - t2->ne[k] && v.dnb[k] == (int64_t)t1->nb[k] - (int64_t)t2->nb[k];
        }
        if (!moves) continue;
        // Growing with the position, or a leaf with bytes from outside: nothing else may move.
        const rg_node *n = d->g->nodes[i];
        bool growing = v.doffs >= 0;
        for (int k = 0; k < RG_MAX_DIMS; k++) growing = growing && v.dne[k] >= 0 && v.dnb[k] >= 0;
        if (!linear || !growing || n->op == RG_OP_NONE)
            st = rg_fail(err, RG_ERR_UNSUPPORTED, "session: node %d ('%s') of the single-token graph does not grow "
                         "linearly with the position", i, n->t.name);
        else d->var[n_var++] = v;
    }
    rg_graph_free(g1);
    rg_graph_free(g2);
    if (!st) {
        rg_exec_opts eo = {.pool = s->pool, .device = s->opts.device, .profile = s->opts.profile,
                           .int8_activations = !s->opts.exact_activations, .backend = s->dev,
                           .resident = s->resident};
        st = rg_exec_create(&d->ex, d->g, &eo, err);
    }
    if (st) {
        decode_graph_free(d);
        return st;
    }
    d->n_var = n_var;
    d->lo = lo, d->hi = hi, d->cur = hi;
    return RG_OK;
}

// Moves the variable nodes of the decode graph to position p (lo <= p <= hi).
static void decode_graph_patch(decode_graph *d, int64_t p) {
    int64_t step = p - d->cur;
    if (step == 0) return;
    for (int i = 0; i < d->n_var; i++) {
        const var_node *v = &d->var[i];
        rg_tensor *t = &d->g->nodes[v->idx]->t;
        for (int k = 0; k < RG_MAX_DIMS; k++) {
            t->ne[k] += step * v->dne[k];
            t->nb[k] = (size_t)((int64_t)t->nb[k] + step * v->dnb[k]);
        }
        t->view_offs = (size_t)((int64_t)t->view_offs + step * v->doffs);
    }
    d->cur = p;
    rg_exec_rebind(d->ex);
}

// The draw of req from the logits node `out` of ex (the last token's [n_vocab]): on the device
// when the session samples there and the node lives there, else read back and drawn here.
static rg_status sample_out(rg_session *s, rg_exec *ex, const rg_node *out, const sample_req *req, rg_error *err) {
    const int64_t V = s->m->hp.n_vocab;
    if (s->device_sampling && out->backend == RG_BACKEND_CUDA) {
        const rg_sampler_params *p = rg_sampler_get_params(req->smp);
        int64_t need = p->repeat_last_n > 0 ? p->repeat_last_n : 1;
        if (!s->dsamp || s->pen_cap < need) {
            rg_cuda_sampler_free(s->dsamp);
            s->dsamp = NULL;
            free(s->pen);
            s->pen = malloc((size_t)need * sizeof *s->pen);
            s->pen_cap = s->pen ? need : 0;
            if (!s->pen) return rg_fail(err, RG_ERR_NOMEM, "session: out of memory");
            rg_status st = rg_cuda_sampler_create((rg_cuda_ctx *)s->dev->impl, (int32_t)V, (int32_t)need, &s->dsamp, err);
            if (st) return st;
        }
        rg_cuda_sample_args a = {.p = *p, .step = rg_sampler_step(req->smp), .penalized = s->pen};
        a.n_penalized = rg_sampler_penalized(req->smp, s->pen, s->pen_cap);
        rg_status st = rg_cuda_sample(s->dsamp, (const float *)out->t.data, &a, req->out, err);
        if (!st) rg_sampler_advance(req->smp);
        return st;
    }
    if (!s->logits && !(s->logits = malloc((size_t)V * sizeof *s->logits)))
        return rg_fail(err, RG_ERR_NOMEM, "session: out of memory for %lld logits", (long long)V);
    rg_status st = rg_exec_read(ex, out, s->logits, (size_t)V * sizeof(float), err);
    if (!st) *req->out = rg_sampler_sample(req->smp, s->logits);
    return st;
}

// One token at position n_past through the decode graph; *used = false when
// there is none for this position (the caller builds one graph as usual).
// *ran: the graph started running (so it may have written the state).
static rg_status eval_token(rg_session *s, const int32_t *id, float *logits, const sample_req *req, bool *used, bool *ran,
                            rg_error *err) {
    decode_graph *d = &s->q->dec;
    *used = false;
    if (!d->g || s->q->n_past < d->lo || s->q->n_past > d->hi) {
        const int64_t hi = s->opts.n_ctx - 1;  // every position of the context
        if (hi < 2 || d->failed) return RG_OK;
        rg_error ignored;
        if (decode_graph_make(s, 0, hi, &ignored)) {  // not linear: build per token from now on
            d->failed = true;
            return RG_OK;
        }
    }
    *used = true;
    decode_graph_patch(d, s->q->n_past);
    *(int32_t *)rg_exec_input(d->ex, d->ids) = *id;
    *(int32_t *)rg_exec_input(d->ex, d->pos) = (int32_t)s->q->n_past;
    *ran = true;
    rg_status st = rg_exec_run(d->ex, 0, -1, err);
    if (!st && logits) st = rg_exec_read(d->ex, d->out, logits, (size_t)rg_tensor_nelements(&d->out->t) * sizeof(float), err);
    if (!st && req) st = sample_out(s, d->ex, d->out, req, err);
    if (!st) s->q->n_past += 1;
    return st;
}

// One batch: tokens ids[0..n) at positions n_past.., logits of the last or all; *ran as eval_token's.
static rg_status eval_batch(rg_session *s, const int32_t *ids, int64_t n, float *logits, bool all, bool exact,
                            const sample_req *req, bool *ran, rg_error *err) {
    *ran = false;
    if (n == 1) snap_token(s);  // the state after n_past tokens into the ring (RETRO_RECURRENT_ROLLBACK=auto)
    if (n == 1) {
        bool used;
        rg_status st = eval_token(s, ids, logits, req, &used, ran, err);
        if (used || st) return st;
    }
    rg_graph *g;
    rg_exec *ex = NULL;
    rg_node *ids_n, *pos_n, *out;
    if (n > 1) snap_batch_begin(s, n);  // the graph also writes the batch's snapshots (session_snap.c)
    rg_status st = build_graph(s, n, s->q->n_past, all, exact, &g, &ids_n, &pos_n, &out, err);
    if (!st) {
        const rg_exec_opts eo = session_batch_exec_opts(s);
        st = rg_exec_create(&ex, g, &eo, err);
    }
    if (!st) {
        memcpy(rg_exec_input(ex, ids_n), ids, (size_t)n * sizeof(int32_t));
        int32_t *p = rg_exec_input(ex, pos_n);
        for (int64_t i = 0; i < n; i++) p[i] = (int32_t)(s->q->n_past + i);
        *ran = true;
        st = rg_exec_run(ex, 0, -1, err);
    }
    if (!st && logits) st = rg_exec_read(ex, out, logits, (size_t)rg_tensor_nelements(&out->t) * sizeof(float), err);
    if (!st && req) st = sample_out(s, ex, out, req, err);  // all is false with a request: out is the last token's
    if (n > 1) snap_batch_end(s, n, !st);
    if (!st) s->q->n_past += n;
    rg_exec_free(ex);
    rg_graph_free(g);
    return st;
}

rg_status session_check_tokens(rg_session *s, const int32_t *ids, int64_t n, const char *who, rg_error *err) {
    if (n <= 0 || !ids) return rg_fail(err, RG_ERR_ARG, "session: %sno tokens to evaluate", who);
    if (s->q->n_past + n > s->opts.n_ctx)
        return rg_fail(err, RG_ERR_ARG, "session: %s%lld cached + %lld new tokens exceed the context of %lld", who,
                       (long long)s->q->n_past, (long long)n, (long long)s->opts.n_ctx);
    const int64_t V = s->m->hp.n_vocab;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return rg_fail(err, RG_ERR_ARG, "session: %stoken id %d at position %lld is outside the vocabulary of %lld",
                           who, ids[i], (long long)i, (long long)V);
    if (s->q->state_lost)
        return rg_fail(err, RG_ERR_ARG, "session: %sthe recurrent state of this %s model does not match position %lld "
                       "(a truncation or a failed evaluation); rewind it to 0 and evaluate it again", who,
                       s->m->hp.arch_name, (long long)s->q->n_past);
    return RG_OK;
}

static rg_status eval_common(rg_session *s, const int32_t *ids, int64_t n, float *logits, int all_logits, bool exact,
                             const sample_req *req, rg_error *err) {
    rg_status st = session_check_tokens(s, ids, n, "", err);
    if (st) return st;
    // Recurrent state (short conv, SSM) holds every token seen: it is rewound only from snapshots (session_snap.c,
    // RETRO_RECURRENT_ROLLBACK=auto). A call of several tokens saves it and puts it back when it fails; a single token (generation, where the copy would cost as much as
    // the step) that fails once its graph ran leaves it lost. Attention layers have nothing to save: rows past
    // n_past are ignored.
    const bool recurrent = rg_model_state_recurrent(&s->q->state);
    rg_status saved = recurrent && n > 1 && s->resident ? rg_resident_sync_host(s->resident, err) : RG_OK;
    if (!saved && recurrent && n > 1) saved = rg_model_state_save(&s->q->state, err);
    if (saved) return saved;
    int64_t start_past = s->q->n_past;
    const int64_t step = exact && s->opts.n_batch > SESSION_EXACT_BATCH ? SESSION_EXACT_BATCH : s->opts.n_batch;
    for (int64_t off = 0; off < n; off += step) {
        int64_t b = n - off < step ? n - off : step;
        bool last_batch = off + b == n;
        float *dst = NULL;
        if (logits && all_logits) dst = logits + off * s->m->hp.n_vocab;
        else if (logits && last_batch) dst = logits;
        bool ran;
        rg_status st = eval_batch(s, ids + off, b, dst, all_logits != 0, exact, last_batch ? req : NULL, &ran, err);
        if (st) {
            s->q->n_past = start_past;  // a failed call changes nothing
            snap_forget_after(&s->q->snap, start_past);
            rg_error ignored;
            if (recurrent && n > 1) {
                rg_model_state_restore(&s->q->state);
                if (rg_session_seq_state_upload(s, &ignored)) s->q->state_lost = true;
            } else if (recurrent && ran) s->q->state_lost = true;
            return st;
        }
    }
    return RG_OK;
}

rg_status rg_session_eval(rg_session *s, const int32_t *ids, int64_t n, float *logits, int all_logits, rg_error *err) {
    return rg_session_eval_seq(s, 0, ids, n, logits, all_logits, err);
}

rg_status rg_session_eval_seq(rg_session *s, int seq, const int32_t *ids, int64_t n, float *logits, int all_logits,
                              rg_error *err) {
    rg_status st = rg_session_pick(s, seq, "evaluate", err);
    return st ? st : eval_common(s, ids, n, logits, all_logits, false, NULL, err);
}

rg_status rg_session_eval_exact(rg_session *s, const int32_t *ids, int64_t n, float *logits, rg_error *err) {
    return rg_session_eval_exact_seq(s, 0, ids, n, logits, err);
}

rg_status rg_session_eval_exact_seq(rg_session *s, int seq, const int32_t *ids, int64_t n, float *logits, rg_error *err) {
    rg_status st = rg_session_pick(s, seq, "evaluate", err);
    return st ? st : eval_common(s, ids, n, logits, 1, true, NULL, err);
}

rg_status rg_session_eval_sample(rg_session *s, const int32_t *ids, int64_t n, rg_sampler *smp, int32_t *out,
                                 rg_error *err) {
    return rg_session_eval_sample_seq(s, 0, ids, n, smp, out, err);
}

rg_status rg_session_eval_sample_seq(rg_session *s, int seq, const int32_t *ids, int64_t n, rg_sampler *smp,
                                     int32_t *out, rg_error *err) {
    rg_status picked = rg_session_pick(s, seq, "evaluate", err);
    if (picked) {
        *out = -1;
        return picked;
    }
    if (!smp || rg_sampler_n_vocab(smp) != s->m->hp.n_vocab) *out = -1;
    if (!smp) return rg_fail(err, RG_ERR_ARG, "session: no sampler to draw with");
    if (rg_sampler_n_vocab(smp) != s->m->hp.n_vocab)
        return rg_fail(err, RG_ERR_ARG, "session: the sampler is made for %d tokens, the model's vocabulary has %lld",
                       (int)rg_sampler_n_vocab(smp), (long long)s->m->hp.n_vocab);
    int32_t id = -1;  // out may point into ids (the token just drawn, evaluated next)
    sample_req req = {smp, &id};
    rg_status st = eval_common(s, ids, n, NULL, 0, false, &req, err);
    *out = id;
    return st;
}
