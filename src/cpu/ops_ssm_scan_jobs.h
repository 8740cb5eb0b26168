// ops_ssm_scan_jobs.h - what the SSM_SCAN and SSM_SCAN_BACK kernels share between
// ops_ssm_scan.c (the ops, baseline x86-64) and the per-item loops of ops_ssm_scan_items.h,
// compiled twice: in ops_ssm_scan.c and, with AVX2, in ops_ssm_scan_avx2.c.
#ifndef RG_CPU_OPS_SSM_SCAN_JOBS_H
#define RG_CPU_OPS_SSM_SCAN_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"

#define RG_SSM_SCAN_CHUNK 8  // tokens between the backward's state checkpoints

typedef struct scan_dims {
    int64_t P, H, N, G, T, S, D;  // D = P*H + 2*G*N, xBC's row
} scan_dims;

static inline scan_dims dims_of(const rg_node *n, const rg_node *xbc, const rg_node *dt) {
    scan_dims d = {.P = n->ip[0], .N = n->ip[1], .G = n->ip[2], .H = dt->t.ne[0], .T = dt->t.ne[1], .S = dt->t.ne[2],
                   .D = xbc->t.ne[0]};
    return d;
}

typedef struct scan_job {
    scan_dims d;
    const float *xbc, *dt, *A, *state;  // [D, T, S], [H, T, S], [H], [N, P, H, S] or NULL
    const rg_node *seg;
    float *y, *fin;                     // parts: [P, H, T, S], [N, P, H, S]
    float *states;                      // part 2 (ip[3] = 1): [N, P, H, T, S], the state after every token; or NULL
    float *work;                        // per part: S [N][P], xs [P]
    size_t work_floats;
} scan_job;

static inline size_t scan_work_floats(int64_t N, int64_t P) { return (size_t)(N * P + P); }

typedef struct scan_back_job {
    scan_dims d;
    int64_t L, n_chunks;                 // checkpoint spacing, checkpoints per item
    const float *dy, *dfin;              // the parts of d: [P, H, T, S], [N, P, H, S]
    const float *xbc, *dta, *A, *state;  // [D, T, S], [H, T, S, 3], [H], [N, P, H, S] or NULL
    float *dxbc, *ddt, *dA, *dstate;     // parts: [D, T, S], [H, T, S], [H], [N, P, H, S]
    float *dB_h, *dC_h;                  // scratch [S, T, H, N]: each head's dB and dC terms
    double *dA_h;                        // scratch [S, H]
    float *work;                         // per part (work_floats): G, the checkpoints, the chunk's states, xs, gB, q
    size_t work_floats;
} scan_back_job;

static inline size_t back_work_floats(int64_t N, int64_t P, int64_t L, int64_t n_chunks) {
    return (size_t)(N * P * (1 + n_chunks + L + 1) + 3 * P);
}

static inline void back_chunking(int64_t T, int64_t *L, int64_t *n_chunks) {
    *L = T < RG_SSM_SCAN_CHUNK ? (T > 0 ? T : 1) : RG_SSM_SCAN_CHUNK;
    *n_chunks = (T + *L - 1) / *L;
}

// The per-item loops (ops_ssm_scan_items.h): the baseline build's and the AVX2 one's, which
// make the same bits (the same operations in the same order, -ffp-contract=off, 8 lanes
// where the baseline has 4); rg_ssm_scan_avx2_built is 0 when the compiler could not build it.
void rg_ssm_scan_items(void *arg, int ith, int nth);
void rg_ssm_scan_back_items(void *arg, int ith, int nth);
void rg_ssm_scan_items_avx2(void *arg, int ith, int nth);
void rg_ssm_scan_back_items_avx2(void *arg, int ith, int nth);
extern const int rg_ssm_scan_avx2_built;
// The AVX-512 build of the same loops (ops_ssm_scan_avx512.c), with the same bits.
void rg_ssm_scan_items_avx512(void *arg, int ith, int nth);
void rg_ssm_scan_back_items_avx512(void *arg, int ith, int nth);
extern const int rg_ssm_scan_avx512_built;

#endif
