// tiles_cache.c - see tiles_cache.h: frozen weights packed once into BF16 tiles and held.
#include "cpu/tiles_cache.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cpu/gemm_tiles.h"
#include "graph/graph.h"

// Everything the packed tiles of a batch's B depend on (problem 0's B stands for the batch:
// the caller's B is one frozen tensor, so the other problems' B follow from it).
typedef struct tiles_key {
    const void *data;
    uint32_t type;
    bool rows_along_k;
    int64_t N, K, n_problems;
    int64_t rs, cs;      // F32 B
    size_t row_stride;   // typed B
} tiles_key;

typedef struct tiles_entry {
    tiles_key key;
    void *packed;
    size_t bytes;
} tiles_entry;

struct rg_tiles_cache {
    tiles_entry *e;
    int64_t n, cap_entries;
    rg_tiles_cache_stats st;
};

rg_status rg_tiles_cache_create(rg_tiles_cache **out, size_t cap, rg_error *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return rg_fail(err, RG_ERR_NOMEM, "tiles cache: out of memory");
    (*out)->st.cap = cap;
    return RG_OK;
}

void rg_tiles_cache_free(rg_tiles_cache *c) {
    if (!c) return;
    for (int64_t i = 0; i < c->n; i++) free(c->e[i].packed);
    free(c->e);
    free(c);
}

rg_tiles_cache_stats rg_tiles_cache_get_stats(const rg_tiles_cache *c) {
    rg_tiles_cache_stats none = {0};
    return c ? c->st : none;
}

static tiles_key key_of(const rg_gemm_batch *bt) {
    rg_gemm_problem p;
    memset(&p, 0, sizeof p);
    bt->get(bt->ctx, 0, &p);
    tiles_key k;
    memset(&k, 0, sizeof k);  // the padding too: keys are compared field by field, but keep them clean
    k.data = p.b.data;
    k.type = bt->b_type;
    k.N = bt->N, k.K = bt->K, k.n_problems = bt->n_problems;
    if (bt->b_type == RG_TYPE_F32) {
        k.rs = p.b.rs, k.cs = p.b.cs;
    } else {
        k.rows_along_k = bt->b_rows_along_k;
        k.row_stride = p.b.row_stride;
    }
    return k;
}

static bool key_eq(const tiles_key *a, const tiles_key *b) {
    return a->data == b->data && a->type == b->type && a->rows_along_k == b->rows_along_k && a->N == b->N &&
           a->K == b->K && a->n_problems == b->n_problems && a->rs == b->rs && a->cs == b->cs &&
           a->row_stride == b->row_stride;
}

// The held tiles of this batch's B, packed now if they fit; NULL when they do not (or the pack
// failed: the caller's own run reports a real error the same way it would have).
static const void *find_or_pack(rg_tiles_cache *c, rg_threadpool *pool, const rg_gemm_batch *bt) {
    const tiles_key k = key_of(bt);
    for (int64_t i = 0; i < c->n; i++)
        if (key_eq(&c->e[i].key, &k)) {
            c->st.hits++;
            return c->e[i].packed;
        }
    const size_t bytes = rg_gemm_tiles_packed_b_size(bt);
    if (bytes == 0 || c->st.bytes > c->st.cap || bytes > c->st.cap - c->st.bytes) goto refuse;
    if (c->n == c->cap_entries) {
        int64_t ncap = c->cap_entries ? 2 * c->cap_entries : 64;
        tiles_entry *ne = realloc(c->e, sizeof *ne * (size_t)ncap);
        if (!ne) goto refuse;
        c->e = ne, c->cap_entries = ncap;
    }
    void *packed = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!packed) goto refuse;
    rg_error perr;
    if (rg_gemm_tiles_pack_b(pool, bt, packed, bytes, &perr) != RG_OK) {
        free(packed);
        goto refuse;  // the uncached run meets the same problem and says so
    }
    c->e[c->n++] = (tiles_entry){k, packed, bytes};
    c->st.bytes += bytes;
    c->st.entries = c->n;
    c->st.packs++;
    return packed;
refuse:
    c->st.refused++;
    if (bytes > c->st.refused_bytes) c->st.refused_bytes = bytes;
    return NULL;
}

rg_status rg_tiles_cache_run(rg_tiles_cache *c, rg_threadpool *pool, const rg_gemm_batch *bt, void *work,
                             size_t work_size, rg_error *err) {
    if (!c || bt->M <= 0 || bt->N <= 0 || bt->K <= 0 || bt->n_problems <= 0 || rg_gemm_tiles_path() == RG_TILES_NONE)
        return rg_gemm_run(pool, RG_SGEMM_BF16, bt, work, work_size, err);
    const void *packed = find_or_pack(c, pool, bt);
    if (!packed) return rg_gemm_run(pool, RG_SGEMM_BF16, bt, work, work_size, err);
    return rg_gemm_tiles_run_packed(pool, rg_gemm_tiles_path(), bt, packed, work, work_size, err);
}

// MemAvailable from /proc/meminfo in bytes, 0 when it cannot be read.
static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

size_t rg_tiles_cache_default_cap(size_t need, size_t limit) {
    const char *e = getenv("RG_TILES_CACHE_MB");
    if (e && *e) {
        char *end;
        double mb = strtod(e, &end);
        if (end != e && *end == '\0' && mb >= 0)
            return mb * 1048576.0 >= (double)SIZE_MAX ? SIZE_MAX : (size_t)(mb * 1048576.0);
        fprintf(stderr, "retrograd: RG_TILES_CACHE_MB='%s' is not a number of MiB >= 0; ignored\n", e);
    }
    // Half of what the run leaves free, by its limit and by what the kernel has now (the run's own
    // allocations are not made yet when this is asked: need comes off both).
    const size_t avail = mem_available();
    const size_t by_limit = limit ? (limit > need ? (limit - need) / 2 : 0) : SIZE_MAX;
    const size_t by_avail = avail ? (avail > need ? (avail - need) / 2 : 0) : limit ? SIZE_MAX : 0;
    return by_limit < by_avail ? by_limit : by_avail;
}

// ---------------------------------------------------------------------------
// What a graph's products would hold.

typedef struct want_key {
    const void *data;
    int64_t N, K;
    bool along_k;  // the weight's rows along K (MUL_MAT, the logits) or along N (dX, dh): a square weight has both
} want_key;

static size_t tiles_bytes(int64_t N, int64_t K) {
    if (N <= 0 || K <= 0) return 0;
    return (size_t)((N + 31) / 32 * 2) * (size_t)((K + 31) / 32) * RG_TILES_TILE_ELEMS * sizeof(uint16_t);
}

size_t rg_tiles_cache_wanted(const rg_graph *g) {
    want_key *seen = NULL;
    int64_t n_seen = 0, cap_seen = 0;
    size_t total = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const rg_node *n = g->nodes[i];
        const rg_node *w = NULL;
        int64_t N = 0, K = 0;
        const bool along_k = n->op == RG_OP_MUL_MAT || n->op == RG_OP_LINEAR_CE;
        switch (n->op) {
            case RG_OP_MUL_MAT: w = n->src[0], N = w->t.ne[1], K = w->t.ne[0]; break;     // C = x W^T
            case RG_OP_OUT_PROD: w = n->src[0], N = w->t.ne[0], K = w->t.ne[1]; break;    // dX = out_prod(W, dY^T)
            case RG_OP_LINEAR_CE: w = n->src[0], N = w->t.ne[1], K = w->t.ne[0]; break;   // the logits (by chunks)
            case RG_OP_LINEAR_CE_BACK:                                                    // dh = G W (by chunks)
                w = n->src[2] ? n->src[2]->src[0] : NULL;
                if (w) N = w->t.ne[0], K = w->t.ne[1];
                break;
            default: break;
        }
        if (!w || !rg_node_frozen(w) || w->t.ne[2] * w->t.ne[3] != 1) continue;
        const want_key k = {w->t.data, N, K, along_k};
        bool dup = false;
        for (int64_t j = 0; j < n_seen && !dup; j++)
            dup = seen[j].data == k.data && seen[j].N == k.N && seen[j].K == k.K && seen[j].along_k == k.along_k;
        if (dup) continue;
        if (n_seen == cap_seen) {
            int64_t nc = cap_seen ? 2 * cap_seen : 64;
            want_key *ns = realloc(seen, sizeof *ns * (size_t)nc);
            if (!ns) break;  // an estimate: what was counted so far
            seen = ns, cap_seen = nc;
        }
        seen[n_seen++] = k;
        total += tiles_bytes(N, K);
    }
    free(seen);
    return total;
}
