// ops_flash_jobs.h - what the FLASH_ATTN_EXT and FLASH_ATTN_BACK kernels share between
// ops_flash.c (the ops, baseline x86-64) and the per-item loops of ops_flash_items.h,
// compiled twice: in ops_flash.c and, with AVX2, in ops_flash_avx2.c.
#ifndef RG_CPU_OPS_FLASH_JOBS_H
#define RG_CPU_OPS_FLASH_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#define RG_FLASH_BR 32  // query rows per tile
#define RG_FLASH_BC 64  // keys per tile

typedef struct flash_dims {
    int64_t Dh, T, Tk, H, Hkv, S, G;  // G = H / Hkv query heads per kv head
    int64_t n_qt, n_kt;               // query tiles ceil(T / BR), key tiles ceil(Tk / BC)
} flash_dims;

typedef struct flash_job {
    flash_dims d;
    const rg_tensor *q, *k, *v;  // [Dh, T, H, S] f32; [Dh, Tk, Hkv, S] f32 or f16; any strides, q and k rows packed
    bool f16;                    // k and v are f16
    const int32_t *seg;          // document ids, or NULL
    int64_t seg_stride;          // between sequences: Tk ([Tk, S]) or 0 ([Tk])
    const float *sinks;          // [H] or NULL (forward only)
    float scale, softcap;        // softcap 0: none
    int64_t window;              // 0: none
    bool causal;
    // FLASH_ATTN_EXT: the parts of its output
    float *o, *lse;              // [Dh, H, T, S], [T, H, S]
    // FLASH_ATTN_BACK
    const float *dO, *dlse;      // the parts of d: [Dh, H, T, S], [T, H, S]
    const float *fo, *flse;      // the forward's o and lse
    float *Dsum;                 // scratch [T, H, S]: rowsum(dO o) - dlse
    float *dq, *dk, *dv;         // parts: [Dh, T, H, S], [Dh, Tk, Hkv, S] twice
    float *work;                 // per thread: work_floats (rg_flash_work_floats)
    size_t work_floats;
} flash_job;

// Floats of one thread's tiles: K and V as f32, the backward's dK and dV accumulators
// [BC][Dh] each, two [BR][BC] tiles (scores / P, dP / dS), an accumulator [BR][Dh]
// (o or dq), m and l [BR]; rounded up to 64 bytes.
static inline size_t rg_flash_work_floats(int64_t Dh) {
    const size_t n = (size_t)(4 * RG_FLASH_BC * Dh + 2 * RG_FLASH_BR * RG_FLASH_BC + RG_FLASH_BR * Dh + 2 * RG_FLASH_BR);
    return (n + 15) / 16 * 16;
}

// The per-item loops (ops_flash_items.h), each fn(job, ith, nth): items are taken by
// thread ith as ith, ith + nth, ...; an item is computed alone in a fixed order, so the
// bits depend on neither the thread count nor the split. The AVX2 build makes the same
// operations in the same order (8-lane partial sums in both, -ffp-contract=off), so the
// same bits; rg_flash_avx2_built is 0 when the compiler could not build it.
//   fwd   items (s, h, query tile): online softmax over the key tiles in order
//   dsum  rows (s, h, t): Dsum = rowsum(dO o) - dlse
//   dkv   items (s, kv head, key tile): dK, dV summed over the group's heads in order,
//         each over its query tiles in order
//   dq    items (s, h, query tile): dQ summed over the key tiles in order
void rg_flash_fwd_items(void *arg, int ith, int nth);
void rg_flash_dsum_items(void *arg, int ith, int nth);
void rg_flash_dkv_items(void *arg, int ith, int nth);
void rg_flash_dq_items(void *arg, int ith, int nth);
void rg_flash_fwd_items_avx2(void *arg, int ith, int nth);
void rg_flash_dsum_items_avx2(void *arg, int ith, int nth);
void rg_flash_dkv_items_avx2(void *arg, int ith, int nth);
void rg_flash_dq_items_avx2(void *arg, int ith, int nth);
extern const int rg_flash_avx2_built;

#endif
