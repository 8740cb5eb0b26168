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
//   dC_h[n] = sum_p S_t[n][p] dy[p],  dB_h[n] = step * sum_p G[n][p] x[p]  (f32, p in order)
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

#include "base/error.h"
#include "cpu/cpu_rows.h"
#include "cpu/ops_ssm.h"
#include "cpu/ssm_math.h"

#define RG_SSM_SCAN_CHUNK 64  // tokens between the backward's state checkpoints

typedef struct scan_dims {
    int64_t P, H, N, G, T, S, D;  // D = P*H + 2*G*N, xBC's row
} scan_dims;

static scan_dims dims_of(const rg_node *n, const rg_node *xbc, const rg_node *dt) {
    scan_dims d = {.P = n->ip[0], .N = n->ip[1], .G = n->ip[2], .H = dt->t.ne[0], .T = dt->t.ne[1], .S = dt->t.ne[2],
                   .D = xbc->t.ne[0]};
    return d;
}

// Token t of sequence s in xBC [D, T, S]: x of head h [P], B and C of its group [N].
typedef struct scan_token {
    const float *x, *B, *C;
} scan_token;

static scan_token token_of(const scan_dims *d, const float *xbc, int64_t s, int64_t t, int64_t h) {
    const float *row = xbc + d->D * (t + d->T * s);
    const int64_t g = h / (d->H / d->G);
    scan_token k = {row + d->P * h, row + d->P * d->H + d->N * g, row + d->P * d->H + d->N * (d->G + g)};
    return k;
}

// One token's step of one head: out = decay * in + B (x * step) ([N][P]; out may be in);
// y (when not NULL) = sum_n out[n][:] C[n]. xs [P] is scratch.
static void scan_step(const scan_dims *d, const scan_token *k, float step, float decay, const float *in, float *out,
                      float *xs, float *y) {
    const int64_t P = d->P;
    for (int64_t p = 0; p < P; p++) xs[p] = k->x[p] * step;
    if (y)
        for (int64_t p = 0; p < P; p++) y[p] = 0.0f;
    for (int64_t n = 0; n < d->N; n++) {
        const float b = k->B[n], c = k->C[n];
        const float *si = in + n * P;
        float *so = out + n * P;
        for (int64_t p = 0; p < P; p++) so[p] = decay * si[p] + b * xs[p];
        if (y)
            for (int64_t p = 0; p < P; p++) y[p] = y[p] + so[p] * c;
    }
}

// state [N, P, H, S] (n contiguous) of item (s, h) <-> [n][p].
static void state_load(const scan_dims *d, const float *state, int64_t s, int64_t h, float *S_np) {
    const int64_t N = d->N, P = d->P;
    if (!state) {
        memset(S_np, 0, sizeof(float) * (size_t)(N * P));
        return;
    }
    const float *src = state + N * P * (h + d->H * s);
    for (int64_t p = 0; p < P; p++)
        for (int64_t n = 0; n < N; n++) S_np[n * P + p] = src[n + N * p];
}

static void state_store(const scan_dims *d, const float *S_np, float scale, int64_t s, int64_t h, float *state) {
    const int64_t N = d->N, P = d->P;
    float *dst = state + N * P * (h + d->H * s);
    for (int64_t p = 0; p < P; p++)
        for (int64_t n = 0; n < N; n++) dst[n + N * p] = scale * S_np[n * P + p];
}

// ---------------------------------------------------------------------------
// SSM_SCAN

typedef struct scan_job {
    scan_dims d;
    const float *xbc, *dt, *A, *state;  // [D, T, S], [H, T, S], [H], [N, P, H, S] or NULL
    const rg_node *seg;
    float *y, *fin;                     // parts: [P, H, T, S], [N, P, H, S]
    float *work;                        // per part: S [N][P], xs [P]
    size_t work_floats;
} scan_job;

static size_t scan_work_floats(int64_t N, int64_t P) { return (size_t)(N * P + P); }

static void scan_items(void *arg, int ith, int nth) {
    const scan_job *j = arg;
    const scan_dims *d = &j->d;
    float *S_np = j->work + (size_t)ith * j->work_floats, *xs = S_np + d->N * d->P;
    int64_t i0, i1;
    rg_split_range(d->S * d->H, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const int64_t s = i / d->H, h = i % d->H;
        const int32_t *seg = cpu_ssm_seg(j->seg, d->T, s);
        state_load(d, j->state, s, h, S_np);
        for (int64_t t = 0; t < d->T; t++) {
            const scan_token k = token_of(d, j->xbc, s, t, h);
            float step, decay, slope;
            rg_ssm_dt_values(j->dt[h + d->H * (t + d->T * s)], j->A[h], rg_ssm_starts_doc(seg, t), &step, &decay, &slope);
            scan_step(d, &k, step, decay, S_np, S_np, xs, j->y + d->P * (h + d->H * (t + d->T * s)));
        }
        state_store(d, S_np, 1.0f, s, h, j->fin);
    }
}

size_t cpu_ssm_scan_work(const rg_node *n, int n_threads) {
    return (size_t)(n_threads < 1 ? 1 : n_threads) * scan_work_floats(n->ip[1], n->ip[0]) * sizeof(float);
}

rg_status cpu_ssm_scan(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    rg_pack p;
    rg_status st;
    if (!rg_pack_of(n, &p)) return rg_fail(err, RG_ERR_ARG, "ssm_scan '%s': the sources give no layout", n->t.name);
    if ((st = cpu_ssm_check("ssm_scan", n, 0, p.total, err))) return st;
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
    const scan_dims *d = &j.d;
    run_rows(ctx->pool, scan_items, &j, 4 * d->N * d->P * d->T * d->H * d->S);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// SSM_SCAN_BACK

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

static size_t back_work_floats(int64_t N, int64_t P, int64_t L, int64_t n_chunks) {
    return (size_t)(N * P * (1 + n_chunks + L + 1) + 3 * P);
}

static void back_chunking(int64_t T, int64_t *L, int64_t *n_chunks) {
    *L = T < RG_SSM_SCAN_CHUNK ? (T > 0 ? T : 1) : RG_SSM_SCAN_CHUNK;
    *n_chunks = (T + *L - 1) / *L;
}

// Token t of item (s, h) walked back: G becomes G_t, and every term of t is written.
static void back_token(const scan_back_job *j, int64_t s, int64_t h, int64_t t, float decay_next, const float *S_prev,
                       const float *S_cur, float *G, float *gB, float *q, double *dA_acc) {
    const scan_dims *d = &j->d;
    const int64_t N = d->N, P = d->P, it = h + d->H * (t + d->T * s), HTS = d->H * d->T * d->S;
    const scan_token k = token_of(d, j->xbc, s, t, h);
    const float step = j->dta[it], decay = j->dta[it + HTS], slope = j->dta[it + 2 * HTS];
    const float *dy = j->dy + P * it;  // [P]
    for (int64_t p = 0; p < P; p++) gB[p] = 0.0f, q[p] = 0.0f;
    for (int64_t n = 0; n < N; n++) {
        const float c = k.C[n], b = k.B[n];
        float *Gn = G + n * P;
        const float *Sp = S_prev + n * P;
        for (int64_t p = 0; p < P; p++) {
            const float gv = c * dy[p] + decay_next * Gn[p];
            Gn[p] = gv;
            gB[p] = gB[p] + gv * b;
            q[p] = q[p] + gv * Sp[p];
        }
    }
    float *dx = j->dxbc + d->D * (t + d->T * s) + P * h;  // [P]
    double s1 = 0.0, s2 = 0.0;
    for (int64_t p = 0; p < P; p++) {
        dx[p] = step * gB[p];
        s1 += (double)k.x[p] * (double)gB[p];
        s2 += (double)q[p];
    }
    float *dB = j->dB_h + N * (h + d->H * (t + d->T * s)), *dC = j->dC_h + N * (h + d->H * (t + d->T * s));  // [N]
    for (int64_t n = 0; n < N; n++) {
        const float *Gn = G + n * P, *Sc = S_cur + n * P;
        float c_acc = 0.0f, b_acc = 0.0f;
        for (int64_t p = 0; p < P; p++) {
            c_acc = c_acc + Sc[p] * dy[p];
            b_acc = b_acc + Gn[p] * k.x[p];
        }
        dC[n] = c_acc;
        dB[n] = step * b_acc;
    }
    const double ad = (double)j->A[h] * (double)decay;
    j->ddt[it] = (float)((s1 + ad * s2) * (double)slope);
    *dA_acc += (double)step * (double)decay * s2;
}

static void back_items(void *arg, int ith, int nth) {
    const scan_back_job *j = arg;
    const scan_dims *d = &j->d;
    const int64_t N = d->N, P = d->P, NP = N * P, HTS = d->H * d->T * d->S;
    float *G = j->work + (size_t)ith * j->work_floats;  // [N][P]
    float *ckpt = G + NP;                               // [n_chunks][N][P]: the state before each chunk
    float *buf = ckpt + j->n_chunks * NP;               // [L + 1][N][P]: a chunk's states, the one before it first
    float *xs = buf + (j->L + 1) * NP, *gB = xs + P, *q = gB + P;
    int64_t i0, i1;
    rg_split_range(d->S * d->H, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const int64_t s = i / d->H, h = i % d->H;
        // The checkpoints: the forward's states, kept before every chunk.
        state_load(d, j->state, s, h, buf);
        for (int64_t c = 0; c < j->n_chunks; c++) {
            memcpy(ckpt + c * NP, buf, sizeof(float) * (size_t)NP);
            for (int64_t t = c * j->L; t < d->T && t < (c + 1) * j->L; t++) {
                const int64_t it = h + d->H * (t + d->T * s);
                const scan_token k = token_of(d, j->xbc, s, t, h);
                scan_step(d, &k, j->dta[it], j->dta[it + HTS], buf, buf, xs, NULL);
            }
        }
        // Back over the chunks, last first: the chunk's states again, then its tokens in reverse.
        state_load(d, j->dfin, s, h, G);
        float decay_next = 1.0f;  // G_{T-1} = C dy^T + the final state's gradient
        double dA_acc = 0.0;
        for (int64_t c = j->n_chunks - 1; c >= 0; c--) {
            const int64_t t0 = c * j->L, len = (d->T - t0 < j->L ? d->T - t0 : j->L);
            memcpy(buf, ckpt + c * NP, sizeof(float) * (size_t)NP);
            for (int64_t r = 0; r < len; r++) {
                const int64_t it = h + d->H * (t0 + r + d->T * s);
                const scan_token k = token_of(d, j->xbc, s, t0 + r, h);
                scan_step(d, &k, j->dta[it], j->dta[it + HTS], buf + r * NP, buf + (r + 1) * NP, xs, NULL);
            }
            for (int64_t r = len - 1; r >= 0; r--) {
                back_token(j, s, h, t0 + r, decay_next, buf + r * NP, buf + (r + 1) * NP, G, gB, q, &dA_acc);
                decay_next = j->dta[h + d->H * (t0 + r + d->T * s) + HTS];
            }
        }
        state_store(d, G, decay_next, s, h, j->dstate);  // dstate = decay_0 G_0
        j->dA_h[s * d->H + h] = dA_acc;
    }
}

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
    if ((st = cpu_ssm_check("ssm_scan_back", n, 0, p.total, err))) return st;
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
    run_rows(ctx->pool, back_items, &j, 12 * d->N * d->P * d->T * d->H * d->S);
    run_rows(ctx->pool, back_reduce, &j, d->N * d->T * d->H * d->S);
    return RG_OK;
}
