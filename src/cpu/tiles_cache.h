// tiles_cache.h - frozen weights held packed in the BF16 tile layout (gemm_tiles.h) across
// products and steps: a LoRA base (any type, quantized included) is decoded and packed once
// for the whole run instead of once per product, as issue 25 asked ("cached for frozen bases,
// held decoded when memory allows, reported by the plan").
//
// What may be cached: the B of an RG_SGEMM_BF16 batch whose bytes are a frozen weight's
// (graph.h's rg_node_frozen: a model leaf that is not trained; its host bytes do not change
// while the cache lives). The key is everything the packed tiles depend on: B's pointer, type,
// strides or row stride, orientation, N, K and the number of problems (the layout does not
// depend on M or on the tile path). So MUL_MAT's weight (rows along K) and the backward's
// dX = out_prod(W, dY^T) (rows along N) are two entries of one weight, and a LINEAR_CE head is
// one entry per vocabulary chunk and orientation.
//
// Memory: entries are packed on first use while their sum stays within the cap; a weight that
// does not fit is run as before (packed per product) and counted as refused, so the order of
// first use decides which weights are held (the forward's, then the backward's, every step the
// same). Nothing is evicted: a run's set of weights is the same every step, and evicting would
// only turn a steady state into thrash.
//
// The bits: rg_gemm_tiles_run_packed gives the same bits as rg_gemm_tiles_run (gemm_tiles.h),
// so caching never changes a result.
#ifndef RG_CPU_TILES_CACHE_H
#define RG_CPU_TILES_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "cpu/gemm.h"
#include "graph/graph.h"
#include "retrograd.h"

typedef struct rg_tiles_cache rg_tiles_cache;

typedef struct rg_tiles_cache_stats {
    size_t cap;          // bytes the cache may hold
    size_t bytes;        // bytes held (packed tiles)
    int64_t entries;     // weights (and orientations) held
    int64_t packs;       // entries packed (each once)
    int64_t hits;        // products that read a held entry
    int64_t refused;     // products whose weight did not fit the cap (packed per product instead)
    size_t refused_bytes;  // the largest entry refused, to say how much more would have held it
} rg_tiles_cache_stats;

// An empty cache that may hold cap bytes (0: holds nothing, every product packs its own B).
rg_status rg_tiles_cache_create(rg_tiles_cache **out, size_t cap, rg_error *err);
void rg_tiles_cache_free(rg_tiles_cache *c);
rg_tiles_cache_stats rg_tiles_cache_get_stats(const rg_tiles_cache *c);

// rg_gemm_run(pool, RG_SGEMM_BF16, bt, ...) with B taken from the cache: packed on its first
// use (on the pool) when it fits, read from the held tiles after that. The caller vouches that
// every problem's B is a frozen weight's bytes. c == NULL: plain rg_gemm_run. The same bits
// either way; the same failures as rg_gemm_run, plus RG_ERR_NOMEM never (a failed allocation
// counts as refused and runs uncached).
rg_status rg_tiles_cache_run(rg_tiles_cache *c, rg_threadpool *pool, const rg_gemm_batch *bt, void *work,
                             size_t work_size, rg_error *err);

// The cap a run gets when nobody says: RG_TILES_CACHE_MB from the environment when set (MiB; 0
// turns the cache off; a value that is not a number is ignored with a line on stderr), else half
// of what is left after `need` (the run's planned peak, not yet allocated) of its memory limit
// (0: none) and of the memory the kernel reports available now (MemAvailable), the smaller.
size_t rg_tiles_cache_default_cap(size_t need, size_t limit);

// The bytes the frozen weights' tiles of graph g's products take (each weight and orientation
// once; a LINEAR_CE head counted whole, its chunks' padding left out): what a cache would hold
// with no cap. For the plan's report, before anything is packed.
size_t rg_tiles_cache_wanted(const rg_graph *g);

#endif
