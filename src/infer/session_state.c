// session_state.c - see session_state.h. The file, every integer little-endian (the byte order of the machines
// we build for, x86-64 and AArch64, so values are copied as they lie in memory), no padding:
//
//   offset        bytes  field
//        0            8  magic "RGSTATE\0"
//        8            4  u32 format version (STATE_FORMAT_VERSION): this layout of the file
//       12            4  u32 state layout version (RG_STATE_LAYOUT_VERSION, model/state.h): the buffers' layout
//       16            4  u32 flags: bit 0, the recurrent state was lost (never written so by this build; refused)
//       20            4  u32 the per-token buffers' type (rg_type: F16 or F32)
//       24           32  the architecture's name, NUL-padded
//       56           48  i64 n_layer, n_embd, n_vocab, n_head, n_head_kv, head_dim (the largest layer's heads)
//      104            8  u64 the weights' hash (weights_hash)
//      112            8  i64 the saving session's n_ctx
//      120            8  i64 n_past
//      128            4  u32 sequences in the file (1: a file holds one sequence of a session, loaded into any
//                        sequence of a session with rg_session_state_load_seq)
//      132            4  u32 reserved, 0
//      136            8  u64 the LoRA adapter's hash (adapter_hash; 0: none)
//      144  24 x n_layer  per layer: u32 mixer kind, u32 ffn kind (rg_layer_kind), i64 n_head, i64 n_head_kv
//   then for every layer, every buffer of the layer in model/state.h's order, a record:
//                    32  u32 layer, u32 buffer, u32 per_token, u32 type, u64 run_bytes, u64 data bytes
//                     n  the data. Per-token: for each of the buffer's runs (bytes / (run_bytes * n_ctx): a key
//                        head, a value column), its rows 0..n_past (n_past * run_bytes bytes), so the file does
//                        not depend on n_ctx. Per-sequence: the whole buffer.
//   then (format version 2; version 1 ends here with the checksum) the recurrent-state snapshots a session made
//   with RETRO_RECURRENT_ROLLBACK=auto keeps (infer/session_snap.c), so a loaded session rewinds where the saving
//   one could. From offset E, the records' end:
//        E           32  u64 seq_bytes (one copy of the per-sequence buffers), i64 batch_start, i64 batch_n (-1: no
//                        batch kept, batch_start 0), u32 ring entries R, u32 ring_next (the slot the ring's next
//                        single-token step takes)
//                     b  batch_n >= 0: the batch's parts in snap_batch_parts' order, prev (seq_bytes: the state
//                        after batch_start tokens), then per short-conv or SSM layer its conv inputs [C, batch_n]
//                        and an SSM layer's states after each token [N*P*H, batch_n], F32
//   R times          16  i64 position (the entry holds the state after that many tokens), u32 ring slot, u32 0
//              seq_bytes  the per-sequence buffers
//   end - 16          8  u64 S, the bytes from E up to this field (a reader without the model finds E at end - 16 - S)
//   end - 8           8  u64 FNV-1a of every byte before it
// A session that keeps no snapshots (off, a model without recurrent state) writes E's 32 bytes, batch_n -1, R 0.
//
// Everything that says what the state is comes before its bytes, so a reader checks a file against a session
// before copying any. A session of several sequences saves each to its own file; a format that holds several in
// one file would add its records with a new format version (n_seq and the flags leave it room).
#include "infer/session_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "infer/session_internal.h"
#include "model/layer.h"
#include "model/lora.h"

#define STATE_MAGIC "RGSTATE"   // 8 bytes with its NUL
#define STATE_FORMAT_VERSION 2u  // written; 1 (no snapshots) is read too
#define STATE_FLAG_LOST 1u
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

enum { HEADER_BYTES = 144, LAYER_BYTES = 24, RECORD_BYTES = 32, TRAILER_BYTES = 8, ARCH_BYTES = 32, WEIGHT_SAMPLE = 64,
       SNAP_HEAD_BYTES = 32, RING_HEAD_BYTES = 16, SNAP_END_BYTES = 8 };

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

// The model's weights, cheaply and deterministically: FNV-1a over every tensor of its GGUF file in the file's
// order: the tensor's name, type, four dimensions and byte count, and its data's first and last WEIGHT_SAMPLE
// bytes (all of it when shorter). Another model, another quantization of this one, or a fine-tune that moved a
// tensor's first or last elements hashes differently; a change only inside every tensor's middle does not. Reads
// 128 bytes per tensor (a page or two), not the weights, and nothing of the GGUF metadata (the tokenizer's keys
// do not change the state).
static uint64_t weights_hash(const rg_model *m) {
    uint64_t h = FNV_OFFSET;
    for (uint64_t i = 0; m->file && i < m->file->n_tensors; i++) {
        const rg_gguf_tensor *t = &m->file->tensors[i];
        h = fnv1a(h, t->name, strlen(t->name));
        h = fnv1a(h, &t->type, sizeof t->type);
        h = fnv1a(h, t->ne, sizeof t->ne);
        h = fnv1a(h, &t->nbytes, sizeof t->nbytes);
        if (!t->data) continue;
        const size_t n = (size_t)t->nbytes, head = n < WEIGHT_SAMPLE ? n : WEIGHT_SAMPLE;
        const size_t tail = n - head < WEIGHT_SAMPLE ? n - head : WEIGHT_SAMPLE;  // not overlapping the head
        h = fnv1a(h, t->data, head);
        h = fnv1a(h, (const uint8_t *)t->data + n - tail, tail);
    }
    return h;
}

// The LoRA adapter the session applies, the same way: FNV-1a over its rank, alpha, targets and the session's
// scale, then per adapted tensor its name, sizes and the first and last WEIGHT_SAMPLE bytes of A and B. 0 without
// one (or with a scale of 0: off); a hash of 0 otherwise is taken as 1.
static uint64_t adapter_hash(const rg_session *s) {
    const rg_lora *l = s->opts.lora;
    if (!l || s->opts.lora_scale == 0.0f) return 0;
    uint64_t h = FNV_OFFSET;
    h = fnv1a(h, &l->rank, sizeof l->rank);
    h = fnv1a(h, &l->alpha, sizeof l->alpha);
    h = fnv1a(h, &l->targets, sizeof l->targets);
    h = fnv1a(h, &s->opts.lora_scale, sizeof s->opts.lora_scale);
    for (int64_t i = 0; i < l->n_layer * RG_LORA_N_TARGETS; i++) {
        const rg_lora_pair *p = &l->pairs[i];
        if (!p->a) continue;
        h = fnv1a(h, p->name, strnlen(p->name, sizeof p->name));
        h = fnv1a(h, &p->n_in, sizeof p->n_in);
        h = fnv1a(h, &p->n_out, sizeof p->n_out);
        const float *m[2] = {p->a, p->b};
        const size_t bytes[2] = {(size_t)(p->n_in * l->rank) * sizeof(float), (size_t)(l->rank * p->n_out) * sizeof(float)};
        for (int k = 0; k < 2; k++) {
            const size_t head = bytes[k] < WEIGHT_SAMPLE ? bytes[k] : WEIGHT_SAMPLE;
            const size_t tail = bytes[k] - head < WEIGHT_SAMPLE ? bytes[k] - head : WEIGHT_SAMPLE;
            h = fnv1a(h, m[k], head);
            h = fnv1a(h, (const uint8_t *)m[k] + bytes[k] - tail, tail);
        }
    }
    return h ? h : 1;
}

static uint8_t *put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); return p + 4; }
static uint8_t *put_i64(uint8_t *p, int64_t v) { memcpy(p, &v, 8); return p + 8; }
static uint8_t *put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); return p + 8; }
static uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static int64_t get_i64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); return v; }
static uint64_t get_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static size_t prefix_bytes(const rg_session *s) { return HEADER_BYTES + LAYER_BYTES * (size_t)s->q->state.n_layer; }

// The header and the layer table of s's state at position n_past, into p[prefix_bytes(s)].
static void put_prefix(const rg_session *s, int64_t n_past, uint8_t *p) {
    const rg_hparams *hp = &s->m->hp;
    memset(p, 0, prefix_bytes(s));
    memcpy(p, STATE_MAGIC, 8);
    p = put_u32(p + 8, STATE_FORMAT_VERSION);
    p = put_u32(p, RG_STATE_LAYOUT_VERSION);
    p = put_u32(p, s->q->state_lost ? STATE_FLAG_LOST : 0);
    p = put_u32(p, s->q->state.token_type);
    memcpy(p, hp->arch_name, strnlen(hp->arch_name, ARCH_BYTES - 1));
    p += ARCH_BYTES;
    const int64_t dims[] = {hp->n_layer, hp->n_embd, hp->n_vocab, hp->n_head, hp->n_head_kv, hp->head_dim};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) p = put_i64(p, dims[i]);
    p = put_u64(p, weights_hash(s->m));
    p = put_i64(p, s->opts.n_ctx);
    p = put_i64(p, n_past);
    p = put_u32(p, 1);
    p = put_u32(p, 0);
    p = put_u64(p, adapter_hash(s));
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const rg_layer *L = &s->m->layers[il];
        p = put_u32(p, (uint32_t)L->mixer);
        p = put_u32(p, (uint32_t)L->ffn);
        p = put_i64(p, L->n_head);
        p = put_i64(p, L->n_head_kv);
    }
}

// Runs of a per-token buffer (see the layout above); 1 for a per-sequence one.
static size_t buf_runs(const rg_model_state *st, const rg_layer_state *ls, int j) {
    return ls->per_token[j] ? ls->bytes[j] / (ls->run_bytes[j] * (size_t)st->n_ctx) : 1;
}

// Bytes of buffer j's data in a file at position n_past.
static size_t record_data_bytes(const rg_model_state *st, const rg_layer_state *ls, int j, int64_t n_past) {
    return ls->per_token[j] ? buf_runs(st, ls, j) * (size_t)n_past * ls->run_bytes[j] : ls->bytes[j];
}

static void put_record(const rg_model_state *st, int64_t il, int j, int64_t n_past, uint8_t *p) {
    const rg_layer_state *ls = &st->layers[il];
    p = put_u32(p, (uint32_t)il);
    p = put_u32(p, (uint32_t)j);
    p = put_u32(p, ls->per_token[j]);
    p = put_u32(p, ls->type[j]);
    p = put_u64(p, ls->run_bytes[j]);
    put_u64(p, record_data_bytes(st, ls, j, n_past));
}

// The whole file's size for s's state at position n_past.
static size_t file_bytes(const rg_session *s, int64_t n_past) {
    size_t n = prefix_bytes(s) + TRAILER_BYTES;
    for (int64_t il = 0; il < s->q->state.n_layer; il++)
        for (int j = 0; j < s->q->state.layers[il].n_bufs; j++)
            n += RECORD_BYTES + record_data_bytes(&s->q->state, &s->q->state.layers[il], j, n_past);
    return n;
}

// Writes through the atomic file, hashing what it writes (the trailer's checksum).
typedef struct hashed_writer {
    rg_atomic_file af;
    uint64_t hash;
} hashed_writer;

static rg_status put(hashed_writer *w, const void *p, size_t n, rg_error *err) {
    w->hash = fnv1a(w->hash, p, n);
    return rg_atomic_write(&w->af, p, n, err);
}

// The kept batch's parts (snap_batch_parts; malloc'd, *n of them), or NULL when out of memory.
static snap_part *batch_parts(const rg_session *s, int *n) {
    snap_part *parts = malloc(sizeof *parts * (size_t)(1 + 2 * s->q->state.n_layer));
    if (parts) *n = snap_batch_parts(s, parts);
    return parts;
}

// Bytes of a kept batch of n tokens in a file (0: none kept, n < 0).
static size_t batch_bytes(const snap_part *parts, int n_parts, int64_t n) {
    size_t b = 0;
    for (int k = 0; n >= 0 && k < n_parts; k++) b += parts[k].fixed + parts[k].per_token * (size_t)n;
    return b;
}

// The snapshot section (see the layout above) of s's store.
static rg_status put_snapshots(hashed_writer *w, const rg_session *s, const snap_part *parts, int n_parts,
                               rg_error *err) {
    const snap_store *sn = &s->q->snap;
    const size_t seq = s->q->state.seq_bytes;
    uint32_t n_ring = 0;
    for (int i = 0; i < SNAP_RING; i++) n_ring += sn->ring_pos[i] >= 0;
    uint8_t head[SNAP_HEAD_BYTES];
    put_u32(put_u32(put_i64(put_i64(put_u64(head, seq), sn->batch_n >= 0 ? sn->batch_start : 0), sn->batch_n), n_ring),
            (uint32_t)sn->ring_next);
    rg_status st = put(w, head, sizeof head, err);
    for (int k = 0; !st && sn->batch_n >= 0 && k < n_parts; k++)
        st = put(w, parts[k].p, batch_bytes(&parts[k], 1, sn->batch_n), err);
    for (int i = 0; !st && i < SNAP_RING; i++) {
        if (sn->ring_pos[i] < 0) continue;
        uint8_t rh[RING_HEAD_BYTES];
        put_u32(put_u32(put_i64(rh, sn->ring_pos[i]), (uint32_t)i), 0);
        st = put(w, rh, sizeof rh, err);
        if (!st) st = put(w, sn->ring + (size_t)i * seq, seq, err);
    }
    uint8_t end[SNAP_END_BYTES];
    put_u64(end, SNAP_HEAD_BYTES + batch_bytes(parts, n_parts, sn->batch_n) + n_ring * (RING_HEAD_BYTES + seq));
    return st ? st : put(w, end, sizeof end, err);
}

rg_status rg_session_state_save(rg_session *s, const char *path, rg_error *err) {
    return rg_session_state_save_seq(s, 0, path, err);
}

rg_status rg_session_state_save_seq(rg_session *s, int seq, const char *path, rg_error *err) {
    rg_status picked = rg_session_pick(s, seq, "save the state", err);
    if (picked) return picked;
    if (s->q->state_lost)
        return rg_fail(err, RG_ERR_ARG, "%s: not saved: the recurrent state of this %s session matches no position "
                       "(a truncation or a failed evaluation lost it); truncate to 0 and evaluate the sequence again",
                       path, s->m->hp.arch_name);
    // On a device the cache and the recurrent state live in the resident copies: the host's bytes first.
    rg_status st = s->resident ? rg_resident_sync_host(s->resident, err) : RG_OK;
    if (st) return st;
    const int64_t n_past = s->q->n_past;
    uint8_t *prefix = malloc(prefix_bytes(s));
    if (!prefix) return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", path);
    put_prefix(s, n_past, prefix);
    hashed_writer w = {.hash = FNV_OFFSET};
    st = rg_atomic_open(&w.af, path, err);
    if (!st) st = put(&w, prefix, prefix_bytes(s), err);
    free(prefix);
    for (int64_t il = 0; !st && il < s->q->state.n_layer; il++) {
        const rg_layer_state *ls = &s->q->state.layers[il];
        for (int j = 0; !st && j < ls->n_bufs; j++) {
            uint8_t rec[RECORD_BYTES];
            put_record(&s->q->state, il, j, n_past, rec);
            st = put(&w, rec, sizeof rec, err);
            if (!ls->per_token[j]) {
                if (!st) st = put(&w, ls->buf[j], ls->bytes[j], err);
                continue;
            }
            const size_t run = ls->run_bytes[j], stride = run * (size_t)s->q->state.n_ctx;
            for (size_t r = 0; !st && r < buf_runs(&s->q->state, ls, j); r++)
                st = put(&w, (const uint8_t *)ls->buf[j] + r * stride, (size_t)n_past * run, err);
        }
    }
    int n_parts = 0;
    snap_part *parts = st ? NULL : batch_parts(s, &n_parts);
    if (!st && !parts) st = rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", path);
    if (!st) st = put_snapshots(&w, s, parts, n_parts, err);
    free(parts);
    uint8_t trailer[TRAILER_BYTES];
    put_u64(trailer, w.hash);
    if (!st) st = rg_atomic_write(&w.af, trailer, sizeof trailer, err);
    if (!st) return rg_atomic_commit(&w.af, err);
    rg_atomic_abort(&w.af);
    return st;
}

// "another model" errors: field names what differs, with the file's and the session's values.
static rg_status differs_i64(const char *path, const char *field, int64_t file, int64_t sess, rg_error *err) {
    return rg_fail(err, RG_ERR_ARG, "%s: saved from another model: its %s is %lld, this session's model's is %lld",
                   path, field, (long long)file, (long long)sess);
}

static const char *type_name(uint32_t type) {
    const char *name = rg_type_get(type)->name;
    return name ? name : "unknown";
}

static const char *kind_name(uint32_t k) {
    const rg_layer_kind_desc *d = k <= RG_KIND_FFN ? rg_layer_kind_get((rg_layer_kind)k) : NULL;
    return k == RG_KIND_NONE ? "none" : d ? d->name : "unknown";
}

// The header and the layer table of the file d[size] against s (the fingerprint, the versions, the position);
// *n_past: the file's.
static rg_status check_prefix(const rg_session *s, const char *path, const uint8_t *d, size_t size, int64_t *n_past,
                              uint32_t *version, rg_error *err) {
    if (size < 16 || memcmp(d, STATE_MAGIC, 8))
        return rg_fail(err, RG_ERR_FORMAT, "%s: not a retrograd state file (%s)", path,
                       size < 8 ? "shorter than the 8 bytes of the magic" : size < 16 ? "truncated after the magic"
                                                                          : "the magic at offset 0 is not \"RGSTATE\"");
    *version = get_u32(d + 8);
    if (*version < 1 || *version > STATE_FORMAT_VERSION)
        return rg_fail(err, RG_ERR_FORMAT, "%s: format version %u (offset 8); this build reads versions 1 to %u", path,
                       *version, STATE_FORMAT_VERSION);
    if (get_u32(d + 12) != RG_STATE_LAYOUT_VERSION)
        return rg_fail(err, RG_ERR_FORMAT, "%s: saved by a build with state layout version %u (offset 12); this "
                       "build's is %u: the buffers are laid out differently", path, get_u32(d + 12),
                       RG_STATE_LAYOUT_VERSION);
    if (size < HEADER_BYTES)
        return rg_fail(err, RG_ERR_FORMAT, "%s: truncated: %zu bytes, shorter than the %d of the header", path, size,
                       HEADER_BYTES);
    const rg_hparams *hp = &s->m->hp;
    char arch[ARCH_BYTES + 1] = {0};
    memcpy(arch, d + 24, ARCH_BYTES);
    if (strcmp(arch, hp->arch_name))
        return rg_fail(err, RG_ERR_ARG, "%s: saved from another model: its architecture is '%s', this session's "
                       "model's is '%s'", path, arch, hp->arch_name);
    static const char *const dim_names[] = {"n_layer", "n_embd", "n_vocab", "n_head", "n_head_kv", "head_dim"};
    const int64_t dims[] = {hp->n_layer, hp->n_embd, hp->n_vocab, hp->n_head, hp->n_head_kv, hp->head_dim};
    for (int i = 0; i < 6; i++)
        if (get_i64(d + 56 + 8 * i) != dims[i]) return differs_i64(path, dim_names[i], get_i64(d + 56 + 8 * i), dims[i], err);
    if (get_u32(d + 20) != s->q->state.token_type)
        return rg_fail(err, RG_ERR_ARG, "%s: its KV cache holds %s tokens, this session's holds %s", path,
                       type_name(get_u32(d + 20)),
                       rg_type_get(s->q->state.token_type)->name);
    if (size < prefix_bytes(s))
        return rg_fail(err, RG_ERR_FORMAT, "%s: truncated: %zu bytes, shorter than the %zu of the header and the layer "
                       "table", path, size, prefix_bytes(s));
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const uint8_t *p = d + HEADER_BYTES + LAYER_BYTES * (size_t)il;
        const rg_layer *L = &s->m->layers[il];
        char field[64];
        if (get_u32(p) != (uint32_t)L->mixer || get_u32(p + 4) != (uint32_t)L->ffn)
            return rg_fail(err, RG_ERR_ARG, "%s: saved from another model: its layer %lld is %s + %s, this session's "
                           "model's is %s + %s", path, (long long)il, kind_name(get_u32(p)), kind_name(get_u32(p + 4)),
                           kind_name((uint32_t)L->mixer), kind_name((uint32_t)L->ffn));
        snprintf(field, sizeof field, "layer %lld's n_head", (long long)il);
        if (get_i64(p + 8) != L->n_head) return differs_i64(path, field, get_i64(p + 8), L->n_head, err);
        snprintf(field, sizeof field, "layer %lld's n_head_kv", (long long)il);
        if (get_i64(p + 16) != L->n_head_kv) return differs_i64(path, field, get_i64(p + 16), L->n_head_kv, err);
    }
    const uint64_t wh = weights_hash(s->m);
    if (get_u64(d + 104) != wh)
        return rg_fail(err, RG_ERR_ARG, "%s: saved from another model: its weights hash (offset 104: every tensor's "
                       "name, type, shape and first and last %d bytes) is %016llx, this session's model's is %016llx",
                       path, WEIGHT_SAMPLE, (unsigned long long)get_u64(d + 104), (unsigned long long)wh);
    const uint64_t ah = adapter_hash(s), file_ah = get_u64(d + 136);
    if (file_ah != ah)
        return rg_fail(err, RG_ERR_ARG, "%s: %s (the adapter hash at offset 136 is %016llx, the session's %016llx)",
                       path, !ah ? "saved with a LoRA adapter, this session applies none"
                             : !file_ah ? "saved without a LoRA adapter, this session applies one"
                                        : "saved with another LoRA adapter or scale than this session applies",
                       (unsigned long long)file_ah, (unsigned long long)ah);
    const uint32_t flags = get_u32(d + 16);
    if (flags & STATE_FLAG_LOST)
        return rg_fail(err, RG_ERR_FORMAT, "%s: its recurrent state is marked lost (flags at offset 16)", path);
    if (flags || get_u32(d + 128) != 1 || get_u32(d + 132))
        return rg_fail(err, RG_ERR_FORMAT, "%s: flags 0x%x (offset 16), %u sequences (offset 128), reserved %u "
                       "(offset 132): this build writes 0, 1, 0", path, flags, get_u32(d + 128), get_u32(d + 132));
    const int64_t file_ctx = get_i64(d + 112);
    *n_past = get_i64(d + 120);
    if (file_ctx <= 0 || *n_past < 0 || *n_past > file_ctx)
        return rg_fail(err, RG_ERR_FORMAT, "%s: n_past %lld (offset 120) does not fit its context of %lld (offset 112)",
                       path, (long long)*n_past, (long long)file_ctx);
    if (*n_past > s->opts.n_ctx)
        return rg_fail(err, RG_ERR_ARG, "%s: holds %lld tokens, more than this session's context of %lld", path,
                       (long long)*n_past, (long long)s->opts.n_ctx);
    return RG_OK;
}

// What a file's snapshot section holds (its header), where it starts, and its bytes (S).
typedef struct snap_head {
    uint32_t version;           // the file's format version (1: no section)
    int64_t batch_start, batch_n;
    uint32_t n_ring, ring_next;
    size_t at, bytes;           // E, and S (0 in a version 1 file)
} snap_head;

// The snapshot section's header at h->at against s, n_past and the file's size: h filled, S computed from it (the
// smallest section when the file is too short to hold the header: the size check then says truncated).
static rg_status check_snap_head(const rg_session *s, const char *path, const uint8_t *d, size_t size, int64_t n_past,
                                 const snap_part *parts, int n_parts, snap_head *h, rg_error *err) {
    const size_t seq = s->q->state.seq_bytes, min = h->at + SNAP_HEAD_BYTES + SNAP_END_BYTES + TRAILER_BYTES;
    h->batch_n = -1, h->n_ring = 0, h->bytes = SNAP_HEAD_BYTES;
    if (size < min) return RG_OK;
    const uint8_t *p = d + h->at;
    h->batch_start = get_i64(p + 8), h->batch_n = get_i64(p + 16), h->n_ring = get_u32(p + 24);
    h->ring_next = get_u32(p + 28);
    if (get_u64(p) != seq)
        return rg_fail(err, RG_ERR_FORMAT, "%s: the snapshots at offset %zu are of %llu bytes of recurrent state, this "
                       "model's is %zu", path, h->at, (unsigned long long)get_u64(p), seq);
    if (h->batch_n < -1 || (h->batch_n >= 0 && (!seq || h->batch_start < 0 || h->batch_start > n_past - h->batch_n)))
        return rg_fail(err, RG_ERR_FORMAT, "%s: corrupt: the kept batch (offset %zu) of %lld tokens at %lld is not "
                       "within the file's %lld tokens", path, h->at + 8, (long long)h->batch_n,
                       (long long)h->batch_start, (long long)n_past);
    const size_t batch = batch_bytes(parts, n_parts, h->batch_n), entry = RING_HEAD_BYTES + seq;
    if ((h->n_ring && !seq) || h->n_ring > (size - min) / entry)  // more entries than the file holds: not S's sum
        return rg_fail(err, RG_ERR_FORMAT, "%s: truncated or corrupt: %u ring snapshots (offset %zu) of %zu bytes "
                       "each do not fit its %zu bytes", path, h->n_ring, h->at + 24, entry, size);
    h->bytes = SNAP_HEAD_BYTES + batch + h->n_ring * entry;
    return RG_OK;
}

// After the checksum: S where the file's end says, and every ring entry's position within the file's tokens.
static rg_status check_snap_body(const rg_session *s, const char *path, const uint8_t *d, int64_t n_past,
                                 const snap_head *h, rg_error *err) {
    const size_t s_at = h->at + h->bytes, entry = RING_HEAD_BYTES + s->q->state.seq_bytes;
    if (get_u64(d + s_at) != h->bytes)
        return rg_fail(err, RG_ERR_FORMAT, "%s: corrupt: the snapshots' size at offset %zu is %llu, their header "
                       "says %zu", path, s_at, (unsigned long long)get_u64(d + s_at), h->bytes);
    size_t off = s_at - h->n_ring * entry;
    for (uint32_t i = 0; i < h->n_ring; i++, off += entry)
        if (get_i64(d + off) < 0 || get_i64(d + off) > n_past || get_u32(d + off + 12))
            return rg_fail(err, RG_ERR_FORMAT, "%s: corrupt: ring snapshot %u (offset %zu) holds position %lld of "
                           "the file's %lld tokens (reserved %u)", path, i, off, (long long)get_i64(d + off),
                           (long long)n_past, get_u32(d + off + 12));
    return RG_OK;
}

// The whole file d[size] against s: the prefix, its size, every record's header, the snapshots' sizes, the checksum.
static rg_status check_file(const rg_session *s, const char *path, const uint8_t *d, size_t size, int64_t *n_past,
                            const snap_part *parts, int n_parts, snap_head *h, rg_error *err) {
    rg_status st = check_prefix(s, path, d, size, n_past, &h->version, err);
    if (st) return st;
    h->at = file_bytes(s, *n_past) - TRAILER_BYTES;  // the records' end
    h->batch_n = -1, h->n_ring = 0, h->bytes = 0;
    if (h->version >= 2) st = check_snap_head(s, path, d, size, *n_past, parts, n_parts, h, err);
    if (st) return st;
    const size_t want = h->at + h->bytes + (h->version >= 2 ? SNAP_END_BYTES : 0) + TRAILER_BYTES;
    if (size < want)
        return rg_fail(err, RG_ERR_FORMAT, "%s: truncated: %zu bytes, the state of %lld tokens of this model%s takes "
                       "%zu", path, size, (long long)*n_past, h->version >= 2 ? " and its snapshots" : "", want);
    if (size > want)
        return rg_fail(err, RG_ERR_FORMAT, "%s: %zu trailing bytes after the state's end at offset %zu", path,
                       size - want, want);
    size_t off = prefix_bytes(s);
    for (int64_t il = 0; il < s->q->state.n_layer; il++) {
        const rg_layer_state *ls = &s->q->state.layers[il];
        for (int j = 0; j < ls->n_bufs; j++) {
            uint8_t rec[RECORD_BYTES];
            put_record(&s->q->state, il, j, *n_past, rec);
            if (memcmp(d + off, rec, sizeof rec))
                return rg_fail(err, RG_ERR_FORMAT, "%s: the record at offset %zu is not layer %lld's buffer %d (%s, %s, "
                               "%zu bytes per token run, %zu bytes)", path, off, (long long)il, j,
                               ls->per_token[j] ? "per token" : "per sequence", rg_type_get(ls->type[j])->name,
                               ls->run_bytes[j], record_data_bytes(&s->q->state, ls, j, *n_past));
            off += RECORD_BYTES + record_data_bytes(&s->q->state, ls, j, *n_past);
        }
    }
    const uint64_t sum = fnv1a(FNV_OFFSET, d, want - TRAILER_BYTES);
    if (get_u64(d + want - TRAILER_BYTES) != sum)
        return rg_fail(err, RG_ERR_FORMAT, "%s: corrupt: the checksum at offset %zu is %016llx, the bytes before it "
                       "hash to %016llx", path, want - TRAILER_BYTES,
                       (unsigned long long)get_u64(d + want - TRAILER_BYTES), (unsigned long long)sum);
    return h->version >= 2 ? check_snap_body(s, path, d, *n_past, h, err) : RG_OK;
}

// Copies the checked file's buffers into s's state (rows 0..n_past of the per-token ones) and moves s to n_past.
static void apply(rg_session *s, const uint8_t *d, int64_t n_past) {
    const uint8_t *p = d + prefix_bytes(s);
    for (int64_t il = 0; il < s->q->state.n_layer; il++) {
        rg_layer_state *ls = &s->q->state.layers[il];
        for (int j = 0; j < ls->n_bufs; j++) {
            p += RECORD_BYTES;
            if (!ls->per_token[j]) {
                memcpy(ls->buf[j], p, ls->bytes[j]);
                p += ls->bytes[j];
                continue;
            }
            const size_t run = ls->run_bytes[j], stride = run * (size_t)s->q->state.n_ctx, rows = (size_t)n_past * run;
            for (size_t r = 0; r < buf_runs(&s->q->state, ls, j); r++, p += rows)
                if (rows) memcpy((uint8_t *)ls->buf[j] + r * stride, p, rows);
        }
    }
    s->q->n_past = n_past;
    s->q->state_lost = false;
}

// The checked file's snapshots into s's store, replacing those of the sequence replaced: what its room holds (the
// first tokens of a batch longer than its snapshot_tokens; nothing when it keeps none), each exactly as saved; a
// rewind to a position not kept is refused as in the saving session.
static void apply_snapshots(rg_session *s, const uint8_t *d, const snap_part *parts, int n_parts, const snap_head *h) {
    snap_store *sn = &s->q->snap;
    const size_t seq = s->q->state.seq_bytes;
    snap_forget_after(sn, -1);
    if (!sn->on) return;
    const uint8_t *p = d + h->at + SNAP_HEAD_BYTES;
    if (h->batch_n >= 0) {
        const int64_t keep = h->batch_n < sn->cap ? h->batch_n : sn->cap;
        for (int k = 0; k < n_parts; p += batch_bytes(&parts[k], 1, h->batch_n), k++)
            memcpy(parts[k].p, p, batch_bytes(&parts[k], 1, keep));
        sn->batch_start = h->batch_start, sn->batch_n = keep;
    }
    for (uint32_t i = 0; i < h->n_ring; i++, p += RING_HEAD_BYTES + seq) {
        const uint32_t slot = get_u32(p + 8);
        if (slot >= SNAP_RING) continue;  // a larger ring's slot (another build): not kept here
        memcpy(sn->ring + (size_t)slot * seq, p + RING_HEAD_BYTES, seq);
        sn->ring_pos[slot] = get_i64(p);
    }
    sn->ring_next = h->ring_next < SNAP_RING ? (int)h->ring_next : 0;
}

// On a device the graphs read the resident copies: every state buffer that has one (one without a copy is uploaded
// from the host bytes when a graph first reads it), then the snapshots'.
static rg_status upload_state(rg_session *s, rg_error *err) {
    for (int64_t il = 0; s->resident && il < s->q->state.n_layer; il++) {
        const rg_layer_state *ls = &s->q->state.layers[il];
        for (int j = 0; j < ls->n_bufs; j++) {
            rg_status st = rg_resident_refresh(s->resident, ls->buf[j], ls->bytes[j], err);
            if (st) return st;
        }
    }
    return snap_upload(s, err);
}

rg_status rg_session_state_load(rg_session *s, const char *path, rg_error *err) {
    return rg_session_state_load_seq(s, 0, path, err);
}

rg_status rg_session_state_load_seq(rg_session *s, int seq, const char *path, rg_error *err) {
    rg_status st = rg_session_pick(s, seq, "load a state", err);
    if (st) return st;
    rg_file_map map;
    st = rg_file_map_open(&map, path, err);
    if (st) return st;
    int64_t n_past = 0;
    int n_parts = 0;
    snap_head h = {0};
    snap_part *parts = batch_parts(s, &n_parts);
    st = parts ? check_file(s, path, map.data, map.size, &n_past, parts, n_parts, &h, err)
               : rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", path);
    if (!st) {
        apply(s, map.data, n_past);
        apply_snapshots(s, map.data, parts, n_parts, &h);
    }
    rg_file_map_close(&map);
    free(parts);
    rg_error e = {0};
    if (!st && s->resident && (st = upload_state(s, &e))) {
        s->q->n_past = 0;
        s->q->state_lost = rg_model_state_recurrent(&s->q->state);
        snap_forget_after(&s->q->snap, -1);
        rg_fail(err, st, "%s: loaded, but the upload to the device failed (%s): the session starts over at position "
                "0%s", path, e.msg, s->q->state_lost ? " with its recurrent state lost" : "");
    }
    return st;
}
