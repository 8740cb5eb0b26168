// ops_ssm_rows.h - test_ops.c's rows for the state-space family (graph.h, SSM_*): case
// generators, builders and double references of SSM_CONV(_BACK), SSM_DT and
// SSM_SCAN(_BACK), and the test that the threaded, chunked CPU scan equals a plain
// sequential loop. Included by test_ops.c (it uses that file's tcase, in_rand, ...).
//
// The references follow the specs, not the kernels: architectures.md §2.5, §3.3, §3.5-3.7
// and training.md §8.1-8.2, §8.4 in double, documents found from the ids directly (a
// token's document starts at the last u <= t with seg[u] != seg[u-1], or 0). The
// forward rows train every float input, so the backward rows of the table check the
// gradients of x, c, the state (conv), xBC, dt, A and the state (scan) against central
// differences of these references, packed outputs whole (y and the final state).

// ---------------------------------------------------------------------------
// Common

// Document ids I32 [T] (S2 = 1) or [T, S2].
static tin *in_seg(tcase *c, int64_t T, int64_t S2, const int32_t *ids) {
    tin *t = new_in(c, "seg", RG_TYPE_I32, T, S2, 1, 1, false);
    memcpy(t->ival, ids, sizeof(int32_t) * (size_t)(T * S2));
    return t;
}

// Sequence s's ids (input iseg, -1: none), or NULL.
static const int32_t *seg_ids(const tcase *c, int64_t iseg, int64_t T, int64_t s) {
    if (iseg < 0) return NULL;
    const tin *t = &c->in[iseg];
    return t->ival + (t->ne[1] > 1 ? s * T : 0);
}

// The first token of t's document (t = T: the next chunk's first token, in the last document).
static int64_t doc_start(const int32_t *seg, int64_t T, int64_t t) {
    int64_t u = t < T ? t : T - 1;
    while (seg && u > 0 && seg[u] == seg[u - 1]) u--;
    return seg ? u : 0;
}

// ---------------------------------------------------------------------------
// SSM_CONV, SSM_CONV_BACK. ip: C, T, S, K, state input (-1: none), seg input (-1), the
// channel offset of x in a wider leaf (0: x is the leaf), x's input index (0 or 1).

typedef struct conv_dims {
    int64_t C, T, S, K, W, off;  // W: the x leaf's row (off + C + 2 for a strided view)
    int ix, istate, iseg;
} conv_dims;

static conv_dims conv_dims_of(const tcase *c) {
    conv_dims d = {.C = c->ip[0], .T = c->ip[1], .S = c->ip[2], .K = c->ip[3], .off = c->ip[6],
                   .ix = (int)c->ip[7], .istate = (int)c->ip[4], .iseg = (int)c->ip[5]};
    d.W = d.off ? d.off + d.C + 2 : d.C;
    return d;
}

// One conv case: ids NULL for none, [T] or (per_seq) [T, S]; off: x read from a view at
// channel off of a wider leaf. The big cases (no input trained) split between threads.
typedef struct conv_spec {
    const char *name;
    int64_t C, T, S, K;
    bool state;
    const int32_t *ids;
    bool per_seq;
    int64_t off;
} conv_spec;

static const int32_t conv_ids9[9] = {3, 3, 4, 4, 4, 4, 4, 9, 9};  // documents [0, 1], [2, 6], [7, 8]
static const int32_t conv_ids3x2[6] = {1, 1, 1, 1, 2, 2};         // s0 one document, s1 a start at t = 1
static const int32_t conv_ids10x2[20] = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2};
static const int32_t conv_ids5[5] = {0, 1, 2, 2, 3};
static int32_t conv_ids_big[60];  // t / 7, and one more from t = 31

static const conv_spec conv_fwd_specs[] = {
    {"K=4", 6, 7, 1, 4, false, NULL, false, 0},
    {"K=3 state S=2", 5, 6, 2, 3, true, NULL, false, 0},
    {"K=4 state seg S=2", 4, 9, 2, 4, true, conv_ids9, false, 0},
    {"K=6 T=3 seg[T,S]", 3, 3, 2, 6, true, conv_ids3x2, true, 0},
    {"K=8 strided x", 5, 10, 2, 8, false, conv_ids10x2, true, 3},
    {"K=2 seg starts", 4, 5, 1, 2, true, conv_ids5, false, 0},
    {"big K=4 state seg", 300, 60, 4, 4, true, conv_ids_big, false, 0},
};
static const conv_spec conv_back_specs[] = {
    {"K=4 state seg S=2", 4, 9, 2, 4, true, conv_ids9, false, 0},
    {"K=6 T=3 seg[T,S]", 3, 3, 2, 6, true, conv_ids3x2, true, 0},
    {"K=3 strided x", 5, 10, 2, 3, false, conv_ids10x2, true, 3},
    {"big K=4 state seg", 300, 60, 4, 4, true, conv_ids_big, false, 0},
};

// Case v of specs (n of them) for SSM_CONV (back false: x, c, state trained but in big
// cases) or SSM_CONV_BACK (d first; nothing trained); 0 past the last.
static int gen_conv_case(tcase *c, uint32_t type, int v, const conv_spec *specs, int n, bool back) {
    if (v >= n) return 0;
    const conv_spec *sp = &specs[v];
    const int64_t C = sp->C, T = sp->T, S = sp->S, K = sp->K, W = sp->off ? sp->off + C + 2 : C;
    const bool train = !back && C * T < 1000;
    for (int t = 0; t < 60; t++) conv_ids_big[t] = t / 7 + (t > 30);
    label(c, type, sp->name);
    c->ip[0] = C, c->ip[1] = T, c->ip[2] = S, c->ip[3] = K, c->ip[6] = sp->off, c->ip[7] = back;
    if (back) in_rand(c, "d", RG_TYPE_F32, C * T * S + C * (K - 1) * S, 1, 1, 1, 1.0, false);
    in_rand(c, "x", RG_TYPE_F32, W, T, S, 1, 1.0, train);
    in_rand(c, "c", RG_TYPE_F32, K, C, 1, 1, 0.5, train);
    c->ip[4] = sp->state ? c->n_in : -1;
    if (sp->state) in_rand(c, "state", RG_TYPE_F32, C, K - 1, S, 1, 1.0, train);
    c->ip[5] = sp->ids ? c->n_in : -1;
    if (sp->ids) in_seg(c, T, sp->per_seq ? S : 1, sp->ids);
    set_ne(c->out_ne, C * T * S + C * (K - 1) * S + (back ? K * C : 0), 1, 1, 1);
    return 1;
}

static int gen_ssm_conv(tcase *c, uint32_t type, int v) {
    return gen_conv_case(c, type, v, conv_fwd_specs, (int)(sizeof conv_fwd_specs / sizeof *conv_fwd_specs), false);
}
static int gen_ssm_conv_back(tcase *c, uint32_t type, int v) {
    return gen_conv_case(c, type, v, conv_back_specs, (int)(sizeof conv_back_specs / sizeof *conv_back_specs), true);
}

// x as the op reads it: the leaf, or a [C, T, S] view at channel `off` of a wider leaf.
static rg_node *conv_x(rg_graph *g, rg_node *leaf, const conv_dims *d) {
    if (!d->off) return leaf;
    const size_t fs = sizeof(float);
    return rg_view(g, leaf, 3, (int64_t[]){d->C, d->T, d->S}, (size_t[]){fs, fs * d->W, fs * d->W * d->T}, fs * d->off);
}

static int build_ssm_conv(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    const conv_dims d = conv_dims_of(c);
    out[0] = rg_ssm_conv(g, conv_x(g, in[0], &d), in[1], d.istate >= 0 ? in[d.istate] : NULL,
                         d.iseg >= 0 ? in[d.iseg] : NULL);
    return 1;
}

static int build_ssm_conv_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    const conv_dims d = conv_dims_of(c);
    out[0] = rg_ssm_conv_back(g, in[0], conv_x(g, in[1], &d), in[2], d.istate >= 0 ? in[d.istate] : NULL,
                              d.iseg >= 0 ? in[d.iseg] : NULL);
    return 1;
}

// Whether token t (T: the next chunk's first) reads position tau of its window (< 0: the state).
static bool conv_reads(const int32_t *seg, int64_t T, int64_t t, int64_t tau) {
    const int64_t ds = doc_start(seg, T, t);
    return tau >= 0 ? tau >= ds : ds == 0;
}

// u(tau)[ch] of sequence s: x, the state (0 without one).
static double conv_value(const conv_dims *d, double *const *x, int64_t s, int64_t tau, int64_t ch) {
    if (tau >= 0) return x[d->ix][d->off + ch + d->W * (tau + d->T * s)];
    return d->istate >= 0 ? x[d->istate][ch + d->C * ((d->K - 1 + tau) + (d->K - 1) * s)] : 0.0;
}

static void ref_ssm_conv(const tcase *c, double *const *x, double *y) {
    const conv_dims d = conv_dims_of(c);
    const int64_t C = d.C, T = d.T, K = d.K;
    const double *w = x[d.ix + 1];
    double *fin = y + C * T * d.S;
    for (int64_t s = 0; s < d.S; s++) {
        const int32_t *seg = seg_ids(c, d.iseg, T, s);
        for (int64_t t = 0; t < T; t++)
            for (int64_t ch = 0; ch < C; ch++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    const int64_t tau = t - (K - 1) + k;
                    if (conv_reads(seg, T, t, tau)) acc += w[k + K * ch] * conv_value(&d, x, s, tau, ch);
                }
                y[ch + C * (t + T * s)] = acc;
            }
        for (int64_t j = 0; j < K - 1; j++)
            for (int64_t ch = 0; ch < C; ch++) {
                const int64_t tau = T - (K - 1) + j;
                fin[ch + C * (j + (K - 1) * s)] = conv_reads(seg, T, T, tau) ? conv_value(&d, x, s, tau, ch) : 0.0;
            }
    }
}

// training.md §8.1 as the transpose of the forward's sums: each tap (t, k) that reads tau
// sends dy w to tau and dy u(tau) to dc; each final-state column sends its d to its tau.
static void ref_ssm_conv_back(const tcase *c, double *const *x, double *y) {
    const conv_dims d = conv_dims_of(c);
    const int64_t C = d.C, T = d.T, S = d.S, K = d.K;
    const double *dy = x[0], *dfin = x[0] + C * T * S, *w = x[d.ix + 1];
    double *dx = y, *dstate = y + C * T * S, *dc = dstate + C * (K - 1) * S;
    memset(y, 0, sizeof(double) * (size_t)nel4(c->out_ne));
    for (int64_t s = 0; s < S; s++) {
        const int32_t *seg = seg_ids(c, d.iseg, T, s);
        for (int64_t ch = 0; ch < C; ch++) {
            for (int64_t t = 0; t <= T; t++)
                for (int64_t k = 0; k < K; k++) {
                    const int64_t tau = t - (K - 1) + k;
                    if (!conv_reads(seg, T, t, tau) || (t == T && tau >= T)) continue;
                    // token t's tap k, or (t = T) the final state's column k
                    const double g = t < T ? dy[ch + C * (t + T * s)] * w[k + K * ch] : dfin[ch + C * (k + (K - 1) * s)];
                    if (tau >= 0) dx[ch + C * (tau + T * s)] += g;
                    else dstate[ch + C * ((K - 1 + tau) + (K - 1) * s)] += g;
                    if (t < T) dc[k + K * ch] += dy[ch + C * (t + T * s)] * conv_value(&d, x, s, tau, ch);
                }
        }
    }
}

// ---------------------------------------------------------------------------
// SSM_DT, SSM_SCAN, SSM_SCAN_BACK. ip: P, N, G, state input (-1), seg input (-1), xBC's
// input index (0, or 1 after d). dt is xBC + 1, A xBC + 2.

typedef struct scan_dims {
    int64_t P, H, N, G, T, S, D;
    int ixbc, istate, iseg;
} scan_dims;

static scan_dims scan_dims_of(const tcase *c) {
    scan_dims d = {.P = c->ip[0], .N = c->ip[1], .G = c->ip[2], .istate = (int)c->ip[3], .iseg = (int)c->ip[4],
                   .ixbc = (int)c->ip[5]};
    const tin *dt = &c->in[d.ixbc + 1];
    d.H = dt->ne[0], d.T = dt->ne[1], d.S = dt->ne[2], d.D = d.P * d.H + 2 * d.G * d.N;
    return d;
}

static const int32_t scan_ids7[7] = {0, 1, 1, 1, 2, 2, 2};
static const int32_t scan_ids8[8] = {0, 0, 0, 1, 1, 2, 2, 2};
static const int32_t scan_ids6x2[12] = {5, 5, 6, 6, 6, 6, 1, 2, 2, 2, 3, 3};
static int32_t scan_ids_long[2 * 70];  // s0: starts at 33 and 64 (a checkpoint chunk's first), s1: every 20

// The spec's step, decay and slope (architectures.md §3.3 step 4, training.md §8.2).
static void ref_dt_values(double dt, double A, bool starts, double *step, double *decay, double *slope) {
    *step = dt > 20 ? dt : log1p(exp(dt));
    *decay = starts ? 0.0 : exp(*step * A);
    *slope = dt > 20 ? 1.0 : sigmoid(dt);
}

// dt ~ N(0.5, 1) with the listed tokens above 20; A = -exp(N(0, 0.5)), [1, H] or [H].
static void gen_dt_a(tcase *c, int64_t H, int64_t T, int64_t S, bool a_flat, bool big_dt, bool train) {
    tin *dt = in_rand(c, "dt", RG_TYPE_F32, H, T, S, 1, 1.0, train);
    for (int64_t i = 0; i < H * T * S; i++) set_f32(dt, i, dt->val[i] + 0.5);
    if (big_dt)
        for (int64_t i = 1; i < H * T * S; i += 5) set_f32(dt, i, 21.0 + (double)(i % 4));
    tin *A = a_flat ? in_rand(c, "A", RG_TYPE_F32, H, 1, 1, 1, 0.5, train) : in_rand(c, "A", RG_TYPE_F32, 1, H, 1, 1, 0.5, train);
    for (int64_t h = 0; h < H; h++) set_f32(A, h, -exp(A->val[h]));
}

static int gen_ssm_dt(tcase *c, uint32_t type, int v) {
    static const char *const names[3] = {"dt>20", "seg S=2 A[H]", "seg[T,S]"};
    if (v > 2) return 0;
    label(c, type, names[v]);
    static const int64_t sh[3][3] = {{5, 6, 1}, {3, 8, 2}, {4, 6, 2}};  // H, T, S
    const int64_t H = sh[v][0], T = sh[v][1], S = sh[v][2];
    gen_dt_a(c, H, T, S, v == 1, v == 0, false);
    if (v == 0) set_f32(&c->in[0], 2, -30.0);
    c->ip[4] = v ? c->n_in : -1;
    if (v == 1) in_seg(c, T, 1, scan_ids8);
    if (v == 2) in_seg(c, T, S, scan_ids6x2);
    set_ne(c->out_ne, H, T, S, 3);
    return 1;
}

static int build_ssm_dt(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_ssm_dt(g, in[0], in[1], c->ip[4] >= 0 ? in[c->ip[4]] : NULL);
    return 1;
}

static void ref_ssm_dt(const tcase *c, double *const *x, double *y) {
    const int64_t H = c->out_ne[0], T = c->out_ne[1], S = c->out_ne[2], HTS = H * T * S;
    for (int64_t s = 0; s < S; s++) {
        const int32_t *seg = seg_ids(c, c->ip[4], T, s);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t i = h + H * (t + T * s);
                ref_dt_values(x[0][i], x[1][h], doc_start(seg, T, t) == t && t > 0, &y[i], &y[i + HTS], &y[i + 2 * HTS]);
            }
    }
}

// One scan case: ids NULL, [T] or (per_seq) [T, S]; A [H] (a_flat) or [1, H]; big_dt: some
// dt above 20 (softplus the identity). The big cases (no input trained) split between threads
// or need more than 48 KiB of shared memory per CUDA block.
typedef struct scan_spec {
    const char *name;
    int64_t P, H, N, G, T, S;
    bool state;
    const int32_t *ids;
    bool per_seq, a_flat, big_dt;
} scan_spec;

static const scan_spec scan_fwd_specs[] = {
    {"H=2 P=3 N=4", 3, 2, 4, 1, 5, 1, false, NULL, false, false, false},
    {"G=2 state S=2 A[H]", 2, 4, 3, 2, 6, 2, true, NULL, false, true, false},
    {"seg state S=2", 3, 2, 2, 1, 8, 2, true, scan_ids8, false, false, false},
    {"G=H seg[T,S] dt>20", 2, 3, 3, 3, 6, 2, true, scan_ids6x2, true, false, true},
    {"big G=2 T=70 seg", 16, 8, 16, 2, 70, 2, true, scan_ids_long, true, false, false},
    {"N=P=128 (64 KiB shared)", 128, 1, 128, 1, 3, 1, true, NULL, false, false, false},
};
static const scan_spec scan_back_specs[] = {
    {"G=1 no state", 3, 2, 4, 1, 5, 1, false, NULL, false, false, false},
    {"G=2 state seg S=2", 2, 4, 3, 2, 7, 2, true, scan_ids7, false, true, false},
    {"T=70 seg[T,S] dt>20", 3, 2, 2, 1, 70, 2, true, scan_ids_long, true, false, true},
    {"big G=2 T=70", 16, 8, 16, 2, 70, 2, true, scan_ids_long, true, false, false},
    {"N=P=128 (64 KiB shared)", 128, 1, 128, 1, 3, 1, true, NULL, false, false, false},
    // More columns, then more rows, than the 512 threads a CUDA block of the kernel may have (its
    // registers allow 672 on sm_90): a thread takes several; P = 1000 also leaves a partial warp.
    {"P=1000 (two columns a thread)", 1000, 1, 8, 1, 3, 1, true, NULL, false, false, false},
    {"N=1024 (two rows a thread)", 3, 2, 1024, 1, 2, 1, true, NULL, false, false, false},
};

// Case v of specs (n of them) for SSM_SCAN (back false: every float input trained but in
// big cases) or SSM_SCAN_BACK (d first; nothing trained); 0 past the last.
static int gen_scan_case(tcase *c, uint32_t type, int v, const scan_spec *specs, int n, bool back) {
    if (v >= n) return 0;
    const scan_spec *sp = &specs[v];
    const int64_t P = sp->P, H = sp->H, N = sp->N, G = sp->G, T = sp->T, S = sp->S, D = P * H + 2 * G * N;
    const int64_t n_fwd = P * H * T * S + N * P * H * S;
    const bool train = !back && N * P * H * T * S < 10000;
    for (int t = 0; t < 70; t++) scan_ids_long[t] = t < 33 ? 0 : t < 64 ? 1 : 2, scan_ids_long[70 + t] = t / 20;
    label(c, type, sp->name);
    c->ip[0] = P, c->ip[1] = N, c->ip[2] = G, c->ip[5] = back;
    if (back) in_rand(c, "d", RG_TYPE_F32, n_fwd, 1, 1, 1, 1.0, false);
    tin *xbc = in_rand(c, "xBC", RG_TYPE_F32, D, T, S, 1, 1.0, train);
    for (int64_t i = 0; i < D * T * S; i++)  // B and C ~ N(0, 0.5)
        if (i % D >= P * H) set_f32(xbc, i, 0.5 * xbc->val[i]);
    gen_dt_a(c, H, T, S, sp->a_flat, sp->big_dt, train);
    c->ip[3] = sp->state ? c->n_in : -1;
    if (sp->state) in_rand(c, "state", RG_TYPE_F32, N, P, H, S, 0.5, train);
    c->ip[4] = sp->ids ? c->n_in : -1;
    if (sp->ids) in_seg(c, T, sp->per_seq ? S : 1, sp->ids);
    set_ne(c->out_ne, back ? D * T * S + H * T * S + H + N * P * H * S : n_fwd, 1, 1, 1);
    return 1;
}

static int gen_ssm_scan(tcase *c, uint32_t type, int v) {
    return gen_scan_case(c, type, v, scan_fwd_specs, (int)(sizeof scan_fwd_specs / sizeof *scan_fwd_specs), false);
}
static int gen_ssm_scan_back(tcase *c, uint32_t type, int v) {
    return gen_scan_case(c, type, v, scan_back_specs, (int)(sizeof scan_back_specs / sizeof *scan_back_specs), true);
}

static int build_ssm_scan(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    const scan_dims d = scan_dims_of(c);
    out[0] = rg_ssm_scan(g, in[0], in[1], in[2], d.istate >= 0 ? in[d.istate] : NULL, d.iseg >= 0 ? in[d.iseg] : NULL,
                         d.P, d.N, d.G);
    return 1;
}

static int build_ssm_scan_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    const scan_dims d = scan_dims_of(c);
    rg_node *seg = d.iseg >= 0 ? in[d.iseg] : NULL, *state = d.istate >= 0 ? in[d.istate] : NULL;
    out[0] = rg_ssm_scan_back(g, in[0], in[1], rg_ssm_dt(g, in[2], in[3], seg), in[3], state, d.P, d.N, d.G);
    return 1;
}

// The states of head h of sequence s in double: S[(t + 1) * N * P + n + N * p] = S_t (S_{-1}
// first), and each token's step, decay and slope.
static void ref_scan_states(const tcase *c, const scan_dims *d, double *const *x, int64_t s, int64_t h, double *S,
                            double *step, double *decay, double *slope) {
    const int64_t NP = d->N * d->P, g = h / (d->H / d->G);
    const int32_t *seg = seg_ids(c, d->iseg, d->T, s);
    for (int64_t i = 0; i < NP; i++) S[i] = d->istate >= 0 ? x[d->istate][i + NP * (h + d->H * s)] : 0.0;
    for (int64_t t = 0; t < d->T; t++) {
        const double *row = x[d->ixbc] + d->D * (t + d->T * s), *xh = row + d->P * h, *B = row + d->P * d->H + d->N * g;
        ref_dt_values(x[d->ixbc + 1][h + d->H * (t + d->T * s)], x[d->ixbc + 2][h], t > 0 && doc_start(seg, d->T, t) == t,
                      &step[t], &decay[t], &slope[t]);
        for (int64_t p = 0; p < d->P; p++)
            for (int64_t n = 0; n < d->N; n++)
                S[(t + 1) * NP + n + d->N * p] = decay[t] * S[t * NP + n + d->N * p] + B[n] * xh[p] * step[t];
    }
}

static void ref_ssm_scan(const tcase *c, double *const *x, double *y) {
    const scan_dims d = scan_dims_of(c);
    const int64_t NP = d.N * d.P;
    double *S = malloc(sizeof(double) * (size_t)((d.T + 1) * NP)), *k = malloc(sizeof(double) * (size_t)(3 * d.T));
    double *fin = y + d.P * d.H * d.T * d.S;
    for (int64_t s = 0; s < d.S; s++)
        for (int64_t h = 0; h < d.H; h++) {
            ref_scan_states(c, &d, x, s, h, S, k, k + d.T, k + 2 * d.T);
            const int64_t g = h / (d.H / d.G);
            for (int64_t t = 0; t < d.T; t++) {
                const double *C = x[d.ixbc] + d.D * (t + d.T * s) + d.P * d.H + d.N * (d.G + g);
                for (int64_t p = 0; p < d.P; p++) {
                    double acc = 0;
                    for (int64_t n = 0; n < d.N; n++) acc += S[(t + 1) * NP + n + d.N * p] * C[n];
                    y[p + d.P * (h + d.H * (t + d.T * s))] = acc;
                }
            }
            for (int64_t i = 0; i < NP; i++) fin[i + NP * (h + d.H * s)] = S[d.T * NP + i];
        }
    free(S), free(k);
}

// training.md §8.2 with every state kept: G_t = C_t dy_t^T + decay_{t+1} G_{t+1} (the final
// state's d above the last token), then each token's terms; dstate = decay_0 G_0.
static void ref_ssm_scan_back(const tcase *c, double *const *x, double *y) {
    const scan_dims d = scan_dims_of(c);
    const int64_t N = d.N, P = d.P, NP = N * P, H = d.H, T = d.T, S = d.S;
    const double *dy = x[0], *dfin = x[0] + P * H * T * S, *A = x[d.ixbc + 2];
    double *dxbc = y, *ddt = y + d.D * T * S, *dA = ddt + H * T * S, *dstate = dA + H;
    double *St = malloc(sizeof(double) * (size_t)((T + 1) * NP)), *k = malloc(sizeof(double) * (size_t)(3 * T));
    double *G = malloc(sizeof(double) * (size_t)NP);
    memset(y, 0, sizeof(double) * (size_t)nel4(c->out_ne));
    for (int64_t s = 0; s < S; s++)
        for (int64_t h = 0; h < H; h++) {
            const double *step = k, *decay = k + T, *slope = k + 2 * T;
            ref_scan_states(c, &d, x, s, h, St, k, k + T, k + 2 * T);
            const int64_t g = h / (H / d.G);
            for (int64_t i = 0; i < NP; i++) G[i] = dfin[i + NP * (h + H * s)];
            for (int64_t t = T - 1; t >= 0; t--) {
                const double *row = x[d.ixbc] + d.D * (t + T * s), *xh = row + P * h, *B = row + P * H + N * g;
                const double *C = B + N * d.G, *dyt = dy + P * (h + H * (t + T * s));
                const double *Sprev = St + t * NP, *Scur = St + (t + 1) * NP;
                double *drow = dxbc + d.D * (t + T * s), *dB = drow + P * H + N * g, *dC = dB + N * d.G;
                const double next = t == T - 1 ? 1.0 : decay[t + 1];
                double gbx = 0, gs = 0;
                for (int64_t p = 0; p < P; p++)
                    for (int64_t n = 0; n < N; n++) {
                        const int64_t i = n + N * p;
                        G[i] = C[n] * dyt[p] + next * G[i];
                        dC[n] += Scur[i] * dyt[p];
                        dB[n] += step[t] * G[i] * xh[p];
                        drow[P * h + p] += step[t] * G[i] * B[n];
                        gbx += G[i] * B[n] * xh[p];
                        gs += G[i] * Sprev[i];
                    }
                ddt[h + H * (t + T * s)] = (gbx + A[h] * decay[t] * gs) * slope[t];
                dA[h] += step[t] * decay[t] * gs;
            }
            for (int64_t i = 0; i < NP; i++) dstate[i + NP * (h + H * s)] = decay[0] * G[i];
        }
    free(St), free(k), free(G);
}

// ---------------------------------------------------------------------------
// The threaded, chunked CPU scan against a plain loop

// A plain sequential f32 scan and its backward, every state kept, in the operations and
// orders graph.h and ops_ssm_scan.c state (step, decay and slope from cpu/ssm_math.h).
typedef struct plain_scan {
    int64_t P, H, N, G, T, S, D;
    const float *xbc, *dt, *A, *state, *d;  // d: the gradient of [y, final state]
    const int32_t *seg;                     // [T, S]
} plain_scan;

static void plain_scan_run(const plain_scan *c, float *y, float *fin, float *dxbc, float *ddt, float *dA,
                           float *dstate) {
    const int64_t P = c->P, H = c->H, N = c->N, T = c->T, S = c->S, D = c->D, NP = N * P, hpg = H / c->G;
    float *St = malloc(sizeof(float) * (size_t)((T + 1) * NP)), *G = malloc(sizeof(float) * (size_t)NP);
    float *gB = malloc(sizeof(float) * (size_t)P), *q = malloc(sizeof(float) * (size_t)P);
    float *k = malloc(sizeof(float) * (size_t)(3 * T));  // step, decay, slope
    float *dBh = calloc((size_t)(N * H * T * S), sizeof(float)), *dCh = calloc((size_t)(N * H * T * S), sizeof(float));
    double *dAh = calloc((size_t)(H * S), sizeof(double));
    for (int64_t s = 0; s < S; s++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / hpg;
            for (int64_t i = 0; i < NP; i++) St[i] = c->state[i + NP * (h + H * s)];
            for (int64_t t = 0; t < T; t++) {
                const float *row = c->xbc + D * (t + T * s), *x = row + P * h, *B = row + P * H + N * g,
                            *C = B + N * c->G;
                rg_ssm_dt_values(c->dt[h + H * (t + T * s)], c->A[h], rg_ssm_starts_doc(c->seg + T * s, t), &k[t],
                                 &k[T + t], &k[2 * T + t]);
                for (int64_t p = 0; p < P; p++) {
                    const float xs = x[p] * k[t];
                    float acc = 0.0f;
                    for (int64_t n = 0; n < N; n++) {
                        const int64_t i = n + N * p;
                        St[(t + 1) * NP + i] = k[T + t] * St[t * NP + i] + B[n] * xs;
                        acc = acc + St[(t + 1) * NP + i] * C[n];
                    }
                    y[p + P * (h + H * (t + T * s))] = acc;
                }
            }
            for (int64_t i = 0; i < NP; i++) {
                fin[i + NP * (h + H * s)] = St[T * NP + i];
                G[i] = c->d[P * H * T * S + i + NP * (h + H * s)];
            }
            float next = 1.0f;
            for (int64_t t = T - 1; t >= 0; t--) {
                const float *row = c->xbc + D * (t + T * s), *x = row + P * h, *B = row + P * H + N * g,
                            *C = B + N * c->G, *dy = c->d + P * (h + H * (t + T * s));
                const float step = k[t], decay = k[T + t], slope = k[2 * T + t];
                double s1 = 0.0, s2 = 0.0;
                for (int64_t p = 0; p < P; p++) {
                    gB[p] = 0.0f, q[p] = 0.0f;
                    for (int64_t n = 0; n < N; n++) {
                        const int64_t i = n + N * p;
                        G[i] = C[n] * dy[p] + next * G[i];
                        gB[p] = gB[p] + G[i] * B[n];
                        q[p] = q[p] + G[i] * St[t * NP + i];
                    }
                    dxbc[D * (t + T * s) + P * h + p] = step * gB[p];
                }
                for (int64_t p = 0; p < P; p++) s1 += (double)x[p] * (double)gB[p], s2 += (double)q[p];
                for (int64_t n = 0; n < N; n++) {
                    float cs[RG_SSM_LANES] = {0}, bs[RG_SSM_LANES] = {0};  // lane p mod 8, p in order
                    for (int64_t p = 0; p < P; p++) {
                        cs[p % RG_SSM_LANES] = cs[p % RG_SSM_LANES] + St[(t + 1) * NP + n + N * p] * dy[p];
                        bs[p % RG_SSM_LANES] = bs[p % RG_SSM_LANES] + G[n + N * p] * x[p];
                    }
                    dCh[n + N * (h + H * (t + T * s))] = rg_ssm_lanes_sum(cs);
                    dBh[n + N * (h + H * (t + T * s))] = step * rg_ssm_lanes_sum(bs);
                }
                ddt[h + H * (t + T * s)] = (float)((s1 + (double)c->A[h] * (double)decay * s2) * (double)slope);
                dAh[h + H * s] += (double)step * (double)decay * s2;
                next = decay;
            }
            for (int64_t i = 0; i < NP; i++) dstate[i + NP * (h + H * s)] = next * G[i];
        }
    for (int64_t r = 0; r < T * S; r++)
        for (int64_t g = 0; g < c->G; g++)
            for (int64_t n = 0; n < N; n++) {
                float b = 0.0f, cc = 0.0f;
                for (int64_t h = g * hpg; h < (g + 1) * hpg; h++) b = b + dBh[n + N * (h + H * r)], cc = cc + dCh[n + N * (h + H * r)];
                dxbc[D * r + P * H + n + N * g] = b;
                dxbc[D * r + P * H + N * (c->G + g) + n] = cc;
            }
    for (int64_t h = 0; h < H; h++) {
        double a = 0.0;
        for (int64_t s = 0; s < S; s++) a += dAh[h + H * s];
        dA[h] = (float)a;
    }
    free(St), free(G), free(gB), free(q), free(k), free(dBh), free(dCh), free(dAh);
}

// SSM_SCAN and SSM_SCAN_BACK through the graph on 1, 2 and 3 threads against plain_scan_run,
// bit for bit: T = 150 makes checkpoint chunks with a short last one, documents start at the
// chunk boundaries and beside them, G groups of H / G heads, 2 sequences, a non-zero state.
// P = 5 runs the scalar lanes only; P = 24 the AVX-512 build's 16 lanes, then 8 (AVX2), and
// the AVX2 backward; P = 64 the AVX-512 backward's fused pass (all of a head in registers).
static void scan_sequential_case(int64_t P, int64_t H, int64_t N, int64_t G) {
    const int64_t T = 150, S = 2, D = P * H + 2 * G * N;
    printf("    P %lld, %lld heads, N %lld, %lld groups:\n", (long long)P, (long long)H, (long long)N, (long long)G);
    const int64_t n_fwd = P * H * T * S + N * P * H * S, n_back = D * T * S + H * T * S + H + N * P * H * S;
    tcase c;
    memset(&c, 0, sizeof c);
    c.seed = 0x55ca;
    tin *xbc = in_rand(&c, "xBC", RG_TYPE_F32, D, T, S, 1, 0.7, false);
    gen_dt_a(&c, H, T, S, false, false, false);
    tin *st = in_rand(&c, "state", RG_TYPE_F32, N, P, H, S, 0.5, false);
    int32_t ids[2 * 150];
    for (int64_t t = 0; t < T; t++) ids[t] = t < 64 ? 0 : t < 65 ? 1 : t < 127 ? 2 : 3, ids[T + t] = (t + 1) / 41;
    tin *seg = in_seg(&c, T, S, ids);
    tin *d = in_rand(&c, "d", RG_TYPE_F32, n_fwd, 1, 1, 1, 1.0, false);
    for (int i = 0; i < c.n_in; i++) memcpy(c.in[i].work, c.in[i].bytes, c.in[i].nbytes);
    float *want = malloc(sizeof(float) * (size_t)(n_fwd + n_back));
    const plain_scan pc = {P, H, N, G, T, S, D, xbc->work, c.in[1].work, c.in[2].work, st->work, d->work, seg->work};
    plain_scan_run(&pc, want, want + P * H * T * S, want + n_fwd, want + n_fwd + D * T * S,
                   want + n_fwd + D * T * S + H * T * S, want + n_fwd + D * T * S + H * T * S + H);
    float *got = malloc(sizeof(float) * (size_t)(n_fwd + n_back));
    for (int nth = 1; nth <= 3; nth++) {
        rg_graph *g = rg_graph_new();
        rg_node *in[6];
        for (int i = 0; i < c.n_in; i++) in[i] = rg_leaf(g, c.in[i].name, c.in[i].type, 4, c.in[i].ne, c.in[i].work);
        rg_node *fwd = rg_ssm_scan(g, in[0], in[1], in[2], in[3], in[4], P, N, G);
        rg_node *back = rg_ssm_scan_back(g, in[5], in[0], rg_ssm_dt(g, in[1], in[2], in[4]), in[2], in[3], P, N, G);
        rg_error err = {0};
        rg_exec *ex = NULL;
        rg_status s = rg_graph_error(g, &err);
        if (!s) fwd->flags |= RG_NODE_OUTPUT, back->flags |= RG_NODE_OUTPUT;
        if (!s) s = rg_exec_create(&ex, g, &(rg_exec_opts){.n_threads = nth}, &err);
        if (!s) s = rg_exec_run(ex, 0, -1, &err);
        RG_CHECK(s == RG_OK, "%d threads: %s", nth, err.msg);
        if (!s) {
            memcpy(got, fwd->t.data, sizeof(float) * (size_t)n_fwd);
            memcpy(got + n_fwd, back->t.data, sizeof(float) * (size_t)n_back);
            int64_t first = -1;
            for (int64_t i = 0; i < n_fwd + n_back && first < 0; i++)
                if (memcmp(&got[i], &want[i], sizeof(float))) first = i;
            printf("    %d threads: y, final state, dxBC, ddt, dA, dstate (%lld values) %s the plain loop's%s\n", nth,
                   (long long)(n_fwd + n_back), first < 0 ? "equal" : "DIFFER from", first < 0 ? " bit for bit" : "");
            RG_CHECK(first < 0, "%d threads: value %lld is %.9g, the plain loop's %.9g", nth, (long long)first,
                     first >= 0 ? got[first] : 0.0, first >= 0 ? want[first] : 0.0);
        }
        rg_exec_free(ex);
        rg_graph_free(g);
    }
    free(want), free(got);
    free_case(&c);
}

static void test_ssm_scan_sequential(void) {
    scan_sequential_case(5, 6, 7, 2);
    scan_sequential_case(24, 4, 9, 2);
    scan_sequential_case(64, 2, 16, 1);
}

// Refusals name the op, the source and its shape.
static void test_ssm_errors(void) {
    static const struct {
        const char *what, *expect;
    } cases[] = {
        {"d_conv 9", "ssm_conv: kernel c 'conv1d' [9, 4] has 9 taps (d_conv); the conv takes 2..8"},
        {"d_conv 1", "ssm_conv: kernel c 'conv1d' [1, 4] has 1 taps"},
        {"state", "ssm_conv: state 'state' [4, 2] (f32) must be f32 [d_inner, d_conv - 1, n_seqs] = [4, 3, 1]"},
        {"seg", "ssm_conv: document ids 'seg' [5] (i32) must be i32 [T] = [6] or [T, n_seqs] = [6, 1]"},
        {"mamba1 A", "ssm_scan: A 'ssm_a' [3, 2] is per element (Mamba-1's [d_state, n_head])"},
        {"xBC", "ssm_scan: xBC 'xBC' [9, 6] (f32) must be f32 [head_dim * n_head + 2 * n_group * d_state, T, n_seqs] "
                "= [10, 6, 1]"},
        {"groups", "ssm_scan: head_dim 2, d_state 3 and n_group 3 must be >= 1, n_group dividing n_head 2 ('dt' [2, 6])"},
        {"d", "ssm_scan_back: d 'd' [7] must hold the gradient of the whole ssm_scan output (36 values)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rg_graph *g = rg_graph_new();
        rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){4, 6}, NULL);
        rg_node *xbc = rg_leaf(g, "xBC", RG_TYPE_F32, 2, (int64_t[]){2 * 2 + 2 * 3, 6}, NULL);
        rg_node *dt = rg_leaf(g, "dt", RG_TYPE_F32, 2, (int64_t[]){2, 6}, NULL);
        rg_node *A = rg_leaf(g, "ssm_a", RG_TYPE_F32, 2, (int64_t[]){1, 2}, NULL);
        switch (i) {
        case 0: rg_ssm_conv(g, x, rg_leaf(g, "conv1d", RG_TYPE_F32, 2, (int64_t[]){9, 4}, NULL), NULL, NULL); break;
        case 1: rg_ssm_conv(g, x, rg_leaf(g, "conv1d", RG_TYPE_F32, 2, (int64_t[]){1, 4}, NULL), NULL, NULL); break;
        case 2:
            rg_ssm_conv(g, x, rg_leaf(g, "conv1d", RG_TYPE_F32, 2, (int64_t[]){4, 4}, NULL),
                        rg_leaf(g, "state", RG_TYPE_F32, 2, (int64_t[]){4, 2}, NULL), NULL);
            break;
        case 3:
            rg_ssm_conv(g, x, rg_leaf(g, "conv1d", RG_TYPE_F32, 2, (int64_t[]){4, 4}, NULL), NULL,
                        rg_leaf(g, "seg", RG_TYPE_I32, 1, (int64_t[]){5}, NULL));
            break;
        case 4: rg_ssm_scan(g, xbc, dt, rg_leaf(g, "ssm_a", RG_TYPE_F32, 2, (int64_t[]){3, 2}, NULL), NULL, NULL, 2, 3, 1); break;
        case 5: rg_ssm_scan(g, rg_leaf(g, "xBC", RG_TYPE_F32, 2, (int64_t[]){9, 6}, NULL), dt, A, NULL, NULL, 2, 3, 1); break;
        case 6: rg_ssm_scan(g, xbc, dt, A, NULL, NULL, 2, 3, 3); break;
        default:
            rg_ssm_scan_back(g, rg_leaf(g, "d", RG_TYPE_F32, 1, (int64_t[]){7}, NULL), xbc, rg_ssm_dt(g, dt, A, NULL), A,
                             NULL, 2, 3, 1);
            break;
        }
        rg_error err = {0};
        const bool refused = rg_graph_error(g, &err) != RG_OK;
        printf("    %-9s %s\n", cases[i].what, refused ? err.msg : "(accepted)");
        RG_CHECK(refused && strstr(err.msg, cases[i].expect), "%s: '%s' does not contain '%s'", cases[i].what,
                 refused ? err.msg : "", cases[i].expect);
        rg_graph_free(g);
    }
}

// ---------------------------------------------------------------------------
// CONV_RS_GATHER (graph.h): the conv window after the first pos tokens of x. ip: C, n, S, K-1, pos, x's channel
// offset in a wider leaf (0: x is the leaf, as conv_x reads it).

typedef struct gather_spec {
    const char *name;
    int64_t C, n, S, K1, pos, off;
} gather_spec;

static const gather_spec gather_specs[] = {
    {"pos 0", 5, 4, 1, 3, 0, 0},           {"pos 2 < K-1", 5, 4, 1, 3, 2, 0}, {"pos n S=2", 6, 7, 2, 2, 7, 0},
    {"pos 5 strided x", 4, 9, 2, 3, 5, 3}, {"K-1 = 1 pos 1", 3, 1, 1, 1, 1, 0},
};

static int gen_conv_rs_gather(tcase *c, uint32_t type, int v) {
    if (v >= (int)(sizeof gather_specs / sizeof *gather_specs)) return 0;
    const gather_spec *sp = &gather_specs[v];
    label(c, type, sp->name);
    c->ip[0] = sp->C, c->ip[1] = sp->n, c->ip[2] = sp->S, c->ip[3] = sp->K1, c->ip[4] = sp->pos, c->ip[6] = sp->off;
    const int64_t W = sp->off ? sp->off + sp->C + 2 : sp->C;
    in_rand(c, "x", RG_TYPE_F32, W, sp->n, sp->S, 1, 1.0, false);
    in_rand(c, "prev", RG_TYPE_F32, sp->C, sp->K1, sp->S, 1, 1.0, false);
    set_ne(c->out_ne, sp->C, sp->K1, sp->S, 1);
    return 1;
}

static int build_conv_rs_gather(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    const conv_dims d = {.C = c->ip[0], .T = c->ip[1], .S = c->ip[2], .off = c->ip[6],
                         .W = c->ip[6] ? c->ip[6] + c->ip[0] + 2 : c->ip[0]};
    out[0] = rg_conv_rs_gather(g, conv_x(g, in[0], &d), in[1], c->ip[4]);
    return 1;
}

static void ref_conv_rs_gather(const tcase *c, double *const *x, double *y) {
    const int64_t C = c->ip[0], n = c->ip[1], S = c->ip[2], K1 = c->ip[3], pos = c->ip[4], off = c->ip[6];
    const int64_t W = off ? off + C + 2 : C;
    for (int64_t s = 0; s < S; s++)
        for (int64_t j = 0; j < K1; j++)
            for (int64_t ch = 0; ch < C; ch++) {
                const int64_t tau = pos - K1 + j;
                y[ch + C * (j + K1 * s)] = tau >= 0 ? x[0][off + ch + W * (tau + n * s)] : x[1][ch + C * (K1 + tau + K1 * s)];
            }
}

// The snapshots of exact rewind (infer/session_snap.c), bit for bit on the CPU: SSM_SCAN's part 2 (the state
// after every token, ip[3] = 1) against the final state of the same scan cut after each token, with its parts 0
// and 1 equal to the plain scan's; CONV_RS_GATHER at every position against SSM_CONV's part 1 of the chunk cut
// there. P = 24 runs the AVX-512 build's 16 lanes then 8 (AVX2); 2 sequences, a non-zero state, no documents
// (a session's batches have none).
static void test_ssm_snapshots(void) {
    const int64_t P = 24, H = 4, N = 9, G = 2, T = 11, S = 2, D = P * H + 2 * G * N, NPH = N * P * H, K = 4;
    tcase c;
    memset(&c, 0, sizeof c);
    c.seed = 0x5a95;
    in_rand(&c, "xBC", RG_TYPE_F32, D, T, S, 1, 0.7, false);
    gen_dt_a(&c, H, T, S, false, false, false);
    in_rand(&c, "state", RG_TYPE_F32, N, P, H, S, 0.5, false);
    in_rand(&c, "conv1d", RG_TYPE_F32, K, D, 1, 1, 0.5, false);
    in_rand(&c, "conv_state", RG_TYPE_F32, D, K - 1, S, 1, 0.5, false);
    for (int i = 0; i < c.n_in; i++) memcpy(c.in[i].work, c.in[i].bytes, c.in[i].nbytes);
    const int64_t win = D * (K - 1) * S;  // one conv window of every sequence
    float *states = malloc(sizeof(float) * (size_t)(NPH * T * S));
    float *full = malloc(sizeof(float) * (size_t)(P * H * T * S + NPH * S));
    float *gathers = malloc(sizeof(float) * (size_t)(win * (T + 1)));  // [win, T + 1]: after q tokens
    int bad = 0;
    // cut = 0: the whole chunk with snapshots; cut = 1..T: the first cut tokens, plain.
    for (int64_t cut = 0; cut <= T; cut++) {
        const int64_t Tc = cut ? cut : T;
        rg_graph *g = rg_graph_new();
        rg_node *in[7];
        for (int i = 0; i < c.n_in; i++) in[i] = rg_leaf(g, c.in[i].name, c.in[i].type, 4, c.in[i].ne, c.in[i].work);
        // The first Tc tokens of every sequence: views of xBC [D, T, S] and dt [H, T, S].
        rg_node *xbc = rg_cont(g, rg_view(g, in[0], 3, (int64_t[]){D, Tc, S}, (size_t[]){4, 4 * D, 4 * D * T}, 0));
        rg_node *dt = rg_cont(g, rg_view(g, in[1], 3, (int64_t[]){H, Tc, S}, (size_t[]){4, 4 * H, 4 * H * T}, 0));
        rg_node *scan = (cut ? rg_ssm_scan : rg_ssm_scan_snap)(g, xbc, dt, in[2], in[3], NULL, P, N, G);
        rg_node *conv = rg_ssm_conv(g, xbc, in[4], in[5], NULL);
        rg_node *gat[12] = {0};
        for (int64_t q = 0; !cut && q <= T; q++) {
            gat[q] = rg_conv_rs_gather(g, xbc, in[5], q);
            if (gat[q]) gat[q]->flags |= RG_NODE_OUTPUT;
        }
        rg_error err = {0};
        rg_exec *ex = NULL;
        rg_status st = rg_graph_error(g, &err);
        if (!st) scan->flags |= RG_NODE_OUTPUT, conv->flags |= RG_NODE_OUTPUT;
        if (!st) st = rg_exec_create(&ex, g, &(rg_exec_opts){.n_threads = 2}, &err);
        if (!st) st = rg_exec_run(ex, 0, -1, &err);
        RG_CHECK(st == RG_OK, "cut %lld: %s", (long long)cut, err.msg);
        if (!st && !cut) {
            rg_pack p;
            rg_pack_of(scan, &p);
            RG_CHECK(p.n_parts == 3 && p.ne[2][0] == NPH && p.ne[2][1] == T, "the snapshot scan has %d parts", p.n_parts);
            memcpy(states, (float *)scan->t.data + p.off[RG_SSM_SCAN_STATES], sizeof(float) * (size_t)(NPH * T * S));
            memcpy(full, scan->t.data, sizeof(float) * (size_t)(P * H * T * S + NPH * S));
            for (int64_t q = 0; q <= T; q++) memcpy(gathers + win * q, gat[q]->t.data, sizeof(float) * (size_t)win);
            RG_CHECK(!memcmp(gathers, c.in[5].work, sizeof(float) * (size_t)win), "the window after 0 tokens is not prev");
        }
        if (!st && cut) {
            rg_pack p;
            rg_pack_of(scan, &p);
            const float *fin = (const float *)scan->t.data + p.off[RG_SSM_SCAN_STATE];
            for (int64_t s = 0; s < S; s++)
                if (memcmp(fin + NPH * s, states + NPH * (cut - 1 + T * s), sizeof(float) * (size_t)NPH)) {
                    bad++;
                    RG_CHECK(false, "sequence %lld: the state after token %lld differs from the scan cut there",
                             (long long)s, (long long)(cut - 1));
                }
            rg_pack pc;
            rg_pack_of(conv, &pc);
            if (memcmp((const float *)conv->t.data + pc.off[RG_SSM_CONV_STATE], gathers + win * cut,
                       sizeof(float) * (size_t)win)) {
                bad++;
                RG_CHECK(false, "conv_rs_gather at %lld differs from the conv's window of the chunk cut there",
                         (long long)cut);
            }
            if (cut == T)
                RG_CHECK(!memcmp(scan->t.data, full, sizeof(float) * (size_t)(P * H * T * S + NPH * S)),
                         "the snapshot scan's y and final state differ from the plain scan's");
        }
        rg_exec_free(ex);
        rg_graph_free(g);
    }
    RG_CHECK(!memcmp(c.in[5].work, c.in[5].bytes, c.in[5].nbytes), "conv_rs_gather wrote its prev");
    // The CUDA kernels (a GPU, or the host execution of the CUDA code): the snapshot scan's whole packed output and
    // the gathers, the CPU's bits.
    char why[256];
    if (rg_cuda_device_count(why, sizeof why) > 0) {
        rg_graph *g = rg_graph_new();
        rg_node *in[7];
        for (int i = 0; i < c.n_in; i++) in[i] = rg_leaf(g, c.in[i].name, c.in[i].type, 4, c.in[i].ne, c.in[i].work);
        rg_node *out[13];
        out[0] = rg_ssm_scan_snap(g, in[0], in[1], in[2], in[3], NULL, P, N, G);
        for (int64_t q = 0; q <= T; q++) out[1 + q] = rg_conv_rs_gather(g, in[0], in[5], q);
        rg_error err = {0};
        rg_status st = rg_graph_error(g, &err);
        for (int k = 0; !st && k < 2 + T; k++) out[k]->flags |= RG_NODE_OUTPUT;
        rg_exec *ex = NULL;
        if (!st) st = rg_exec_create(&ex, g, &(rg_exec_opts){.n_threads = 1, .device = RG_DEVICE_CUDA}, &err);
        if (!st) st = rg_exec_run(ex, 0, -1, &err);
        const int64_t total = P * H * T * S + NPH * S + NPH * T * S;
        float *got = malloc(sizeof(float) * (size_t)(total + win * (T + 1)));
        if (!st) st = rg_exec_read(ex, out[0], got, sizeof(float) * (size_t)total, &err);
        for (int64_t q = 0; !st && q <= T; q++)
            st = rg_exec_read(ex, out[1 + q], got + total + win * q, sizeof(float) * (size_t)win, &err);
        RG_CHECK(st == RG_OK, "cuda: %s", err.msg);
        const bool same = !st && !memcmp(got, full, sizeof(float) * (size_t)(P * H * T * S + NPH * S)) &&
                          !memcmp(got + P * H * T * S + NPH * S, states, sizeof(float) * (size_t)(NPH * T * S)) &&
                          !memcmp(got + total, gathers, sizeof(float) * (size_t)(win * (T + 1)));
        RG_CHECK(st || same, "cuda: the snapshot scan or the gathers differ from the CPU's bits");
        printf("    cuda: the snapshot scan (y, final state, states) and the gathers %s the CPU's\n",
               same ? "equal, bit for bit," : "DIFFER from");
        free(got);
        rg_exec_free(ex);
        rg_graph_free(g);
    } else {
        printf("    cuda: not run (%s)\n", why);
    }
    printf("    the state after each of %lld tokens of 2 sequences and conv_rs_gather at 0..%lld: %s the final states "
           "of the scan and the conv cut there\n", (long long)T, (long long)T, bad ? "DIFFER from" : "equal, bit for bit,");
    free(states), free(full), free(gathers);
    free_case(&c);
}
