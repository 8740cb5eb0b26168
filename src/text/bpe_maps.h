// bpe_maps.h - what the BPE trainer (bpe_train.c) and encoder (bpe_encode.c) share, private
// to src/text/bpe_*.c (bpe_maps.c): the pre-tokenizer (the rule is documented in bpe_train.h)
// and two small open-addressing hash maps (byte strings -> id and 64-bit pair keys -> value).
// Pairs of token ids are packed into one 64-bit key as (left << 32) | right.
#ifndef RG_TEXT_BPE_MAPS_H
#define RG_TEXT_BPE_MAPS_H

#include <stddef.h>
#include <stdint.h>

// The end of the piece that starts at s[i] (i < n). Always > i, so callers make progress.
size_t rg_bpe_piece_end(const uint8_t *s, size_t n, size_t i);
uint64_t rg_bpe_pair_key(int32_t a, int32_t b);

// rg_bpe_smap: byte string -> non-negative int32. Keys are borrowed, never copied: they point into the
// corpus, the trainer's token bytes or the vocabulary's strings, all of which outlive the map.

typedef struct rg_bpe_smap_slot {
    const uint8_t *key;
    size_t len;
    uint64_t hash;
    int32_t val;  // < 0: empty slot
} rg_bpe_smap_slot;

typedef struct rg_bpe_smap {
    rg_bpe_smap_slot *slots;
    size_t cap;  // power of two, kept at least twice n
    size_t n;
} rg_bpe_smap;

int rg_bpe_smap_init(rg_bpe_smap *m, size_t expect);
void rg_bpe_smap_free(rg_bpe_smap *m);
int32_t rg_bpe_smap_get(const rg_bpe_smap *m, const void *key, size_t len);
// Maps key to val unless key is already present. Returns the value now stored under key (val or
// the earlier one), or -1 when memory runs out.
int32_t rg_bpe_smap_put(rg_bpe_smap *m, const void *key, size_t len, int32_t val);

// rg_bpe_umap: 64-bit key -> int64. A slot is live only when its stamp equals the map's generation, so
// clearing the map between merge steps is O(1); `used` lists live slots for iteration.

typedef struct rg_bpe_umap {
    uint64_t *keys;
    int64_t *vals;
    uint32_t *stamp;
    size_t *used;  // [n] live slot indices, in insertion order
    size_t cap;    // power of two, kept at least twice n
    size_t n;
    uint32_t gen;
} rg_bpe_umap;

void rg_bpe_umap_free(rg_bpe_umap *m);
int rg_bpe_umap_init(rg_bpe_umap *m, size_t expect);
void rg_bpe_umap_clear(rg_bpe_umap *m);
int64_t *rg_bpe_umap_get(const rg_bpe_umap *m, uint64_t key);
// The value stored under key, inserted as init when absent; NULL when memory runs out. The
// pointer is valid until the next insertion.
int64_t *rg_bpe_umap_upsert(rg_bpe_umap *m, uint64_t key, int64_t init);

#endif
