// ops_ssm_scan.c - SSM_SCAN and SSM_SCAN_BACK on the CPU: Mamba-2's selective scan and its
// gradient (graph.h has the shapes; architectures.md §3.6-3.7, training.md §8.2, §8.4).
//
// Work items are (sequence s, head h) pairs, spread over the threads by index; an item
// runs its head's recurrence in token order, alone, so the bits do not depend on the
// thread count. Per item the state S [N, P] is held as [n][p] (p contiguous), so each
// step runs along p for every n:
//   S[n][p] = decay * S[n][p] + B[n] * xs[p],   xs[p] = x[p] * step       (each rounded)
//   y[p]   += S[n][p] * C[n]                                             (n in order)
// in f32, step and decay from rg_ssm_dt_values (cpu/ssm_math.h; decay 0 at a document
// start). The CUDA kernels (cuda/ops_ssm.cu) make the same operations in the same order.
//
// The backward, per item, going back over the tokens with G = dL/dS_t (training.md §8.2):
//   G[n][p] = C[n] * dy[p] + decay_{t+1} * G[n][p]     (G_{T-1} from the final state's d)
//   gB[p] = sum_n G[n][p] B[n],  q[p] = sum_n G[n][p] S_{t-1}[n][p]      (f32, n in order)
//   dx[p] = step * gB[p]
//   dC_h[n] = sum_p S_t[n][p] dy[p],  dB_h[n] = step * sum_p G[n][p] x[p]  (f32, p in the
//                                      eight lanes of rg_ssm_lanes_sum: vectors over p)
//   s1 = sum_p x[p] gB[p],  s2 = sum_p q[p]                               (double, p in order)
//   ddt = (float)((s1 + A decay s2) * slope),  dA_h += step decay s2      (double)
// and at the end dstate = decay_0 * G. The states S_{t-1} come back chunk by chunk: a first
// pass keeps the state at every RG_SSM_SCAN_CHUNK-th token, then each chunk, last first, is
// recomputed from its checkpoint (the forward's operations, so the forward's bits) before
// its tokens are walked back. dB and dC of a group sum its heads: each item writes its
// head's terms into scratch [S, T, H, N], and a second section adds them in head order.
// A document start has decay 0, which is all a reset needs here: G does not pass it and
// its q terms vanish (training.md §8.4).
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "cpu/cpu_rows.h"
#include "cpu/ops_ssm.h"
#include "cpu/ops_ssm_scan_jobs.h"
#include "cpu/ssm_math.h"

#define SCAN_FN(name) name
#include "cpu/ops_ssm_scan_items.h"

static bool scan_avx2(void) { return rg_ssm_scan_avx2_built && rg_cpu_has_avx2(); }
static bool scan_avx512(void) { return rg_ssm_scan_avx512_built && scan_avx2() && rg_cpu_has_avx512_vnni(); }

size_t cpu_ssm_scan_work(const rg_node *n, int n_threads) {
    return (size_t)(n_threads < 1 ? 1 : n_threads) * scan_work_floats(n->ip[1], n->ip[0]) * sizeof(float);
}

rg_status cpu_ssm_scan(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_pack p;
    rg_status st;
    if (!rg_pack_of(n, &p)) return rg_fail(err, RG_ERR_ARG, "ssm_scan '%s': the sources give no layout", n->t.name);
    if ((st = cpu_ssm_check(rg_op_name(RG_OP_SSM_SCAN), n, 0, p.total, err))) return st;
    const int nth = cpu_ssm_threads(ctx);
    const size_t need = cpu_ssm_scan_work(n, nth);
    if (!ctx || !ctx->scratch || ctx->scratch_size < need)
        return rg_fail(err, RG_ERR_ARG, "ssm_scan '%s': scratch of %zu bytes is below the %zu needed", n->t.name,
                       ctx ? ctx->scratch_size : 0, need);
    scan_job j = {.d = dims_of(n, n->src[0], n->src[1]), .xbc = n->src[0]->t.data, .dt = n->src[1]->t.data,
                  .A = n->src[2]->t.data, .state = n->src[3] ? n->src[3]->t.data : NULL, .seg = n->src[4],
                  .work = ctx->scratch, .work_floats = scan_work_floats(n->ip[1], n->ip[0])};
    j.y = (float *)n->t.data + p.off[RG_SSM_SCAN_Y];
    j.fin = (float *)n->t.data + p.off[RG_SSM_SCAN_STATE];
    j.states = p.n_parts > RG_SSM_SCAN_STATES ? (float *)n->t.data + p.off[RG_SSM_SCAN_STATES] : NULL;
    const scan_dims *d = &j.d;
    run_rows(ctx->pool, scan_avx512() ? rg_ssm_scan_items_avx512 : scan_avx2() ? rg_ssm_scan_items_avx2 : rg_ssm_scan_items, &j, 4 * d->N * d->P * d->T * d->H * d->S);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SSM_SCAN_BACK

// dB and dC of every (token, group): the heads' terms in head order; dA: the sequences' in order.
static void back_reduce(void *arg, int ith, int nth) {
    const scan_back_job *j = arg;
    const scan_dims *d = &j->d;
    const int64_t N = d->N, hpg = d->H / d->G;
    int64_t r0, r1;
    rg_split_range(d->T * d->S, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {  // r = t + T * s
        float *row = j->dxbc + d->D * r + d->P * d->H;  // dB [N, G], then dC [N, G]
        for (int64_t g = 0; g < d->G; g++)
            for (int64_t n = 0; n < N; n++) {
                float b = 0.0f, c = 0.0f;
                for (int64_t h = g * hpg; h < (g + 1) * hpg; h++) {
                    b = b + j->dB_h[n + N * (h + d->H * r)];
                    c = c + j->dC_h[n + N * (h + d->H * r)];
                }
                row[n + N * g] = b;
                row[n + N * (d->G + g)] = c;
            }
    }
    if (ith == 0)
        for (int64_t h = 0; h < d->H; h++) {
            double a = 0.0;
            for (int64_t s = 0; s < d->S; s++) a += j->dA_h[s * d->H + h];
            j->dA[h] = (float)a;
        }
}

// The scratch: dA_h [S, H] doubles, dB_h and dC_h [S, T, H, N], then each part's floats.
static size_t back_shared_bytes(const scan_dims *d) {
    return (size_t)(d->S * d->H) * sizeof(double) + 2 * (size_t)(d->S * d->T * d->H * d->N) * sizeof(float);
}

size_t cpu_ssm_scan_back_work(const rg_node *n, int n_threads) {
    const scan_dims d = dims_of(n, n->src[1], n->src[2]);
    int64_t L, n_chunks;
    back_chunking(d.T, &L, &n_chunks);
    return back_shared_bytes(&d) +
           (size_t)(n_threads < 1 ? 1 : n_threads) * back_work_floats(d.N, d.P, L, n_chunks) * sizeof(float);
}

rg_status cpu_ssm_scan_back(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_pack p, pf;
    rg_status st;
    if (!rg_pack_of(n, &p) ||
        !rg_pack_layout(RG_OP_SSM_SCAN, (rg_node *[RG_MAX_SRC]){n->src[1], n->src[2], n->src[3]}, n->ip, &pf))
        return rg_fail(err, RG_ERR_ARG, "ssm_scan_back '%s': the sources give no layout", n->t.name);
    if ((st = cpu_ssm_check(rg_op_name(RG_OP_SSM_SCAN_BACK), n, 0, p.total, err))) return st;
    if (rg_tensor_nelements(&n->src[0]->t) != pf.total)
        return rg_fail(err, RG_ERR_ARG, "ssm_scan_back '%s': d must hold the forward's %lld values", n->t.name,
                       (long long)pf.total);
    const int nth = cpu_ssm_threads(ctx);
    const size_t need = cpu_ssm_scan_back_work(n, nth);
    if (!ctx || !ctx->scratch || ctx->scratch_size < need)
        return rg_fail(err, RG_ERR_ARG, "ssm_scan_back '%s': scratch of %zu bytes is below the %zu needed", n->t.name,
                       ctx ? ctx->scratch_size : 0, need);
    const float *dsrc = n->src[0]->t.data;
    float *out = n->t.data;
    scan_back_job j = {.d = dims_of(n, n->src[1], n->src[2]), .dy = dsrc + pf.off[RG_SSM_SCAN_Y],
                       .dfin = dsrc + pf.off[RG_SSM_SCAN_STATE], .xbc = n->src[1]->t.data, .dta = n->src[2]->t.data,
                       .A = n->src[3]->t.data, .state = n->src[4] ? n->src[4]->t.data : NULL,
                       .dxbc = out + p.off[RG_SSM_SCAN_BACK_DXBC], .ddt = out + p.off[RG_SSM_SCAN_BACK_DDT],
                       .dA = out + p.off[RG_SSM_SCAN_BACK_DA], .dstate = out + p.off[RG_SSM_SCAN_BACK_DSTATE]};
    const scan_dims *d = &j.d;
    back_chunking(d->T, &j.L, &j.n_chunks);
    j.dA_h = ctx->scratch;
    j.dB_h = (float *)(j.dA_h + d->S * d->H);
    j.dC_h = j.dB_h + d->S * d->T * d->H * d->N;
    j.work = j.dC_h + d->S * d->T * d->H * d->N;
    j.work_floats = back_work_floats(d->N, d->P, j.L, j.n_chunks);
    run_rows(ctx->pool,
             scan_avx512() ? rg_ssm_scan_back_items_avx512 : scan_avx2() ? rg_ssm_scan_back_items_avx2 : rg_ssm_scan_back_items, &j, 12 * d->N * d->P * d->T * d->H * d->S);
    run_rows(ctx->pool, back_reduce, &j, d->N * d->T * d->H * d->S);
    return RG_OK;
}
