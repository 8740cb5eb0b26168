// ops_flash_rows.h - test_ops.c's rows for flash attention (graph.h, FLASH_ATTN_EXT and
// FLASH_ATTN_BACK): case tables, builders and double references, the test that 1, 2 and 3
// threads on the AVX2 and the baseline loops give the same bits, the comparison with the
// materialized attention (MUL_MAT, SOFT_MAX with a dense mask, MUL_MAT) for every mask
// kind, and the refusals. Included by test_ops.c (it uses that file's tcase, in_rand, ...).
//
// The references follow graph.h's rules in double, not the kernels: visibility from the
// positions (query t at t + Tk - T, key j at j), the window and the document ids; the
// scores scale q.k, capped c tanh(s/c); lse = log(e^sink + sum e^s); o = sum e^(s - lse) v.
// FLASH_ATTN_EXT's rows train q, k and v in the small cases, so the backward rule
// (FLASH_ATTN_BACK through autodiff, o's and lse's gradients both) is checked against
// central differences of the forward reference; FLASH_ATTN_BACK's own rows check the
// packed [dq, dk, dv] against the analytic gradient in double (training.md §6.3).

static void restore_inputs(const tcase *c);  // test_ops.c

// ---------------------------------------------------------------------------
// Cases. ip: causal, window, seg input (-1: none), sinks input (-1), q read through a
// permute of a [Dh, H, T, S] leaf, first (1 for FLASH_ATTN_BACK: d is input 0), v read
// through a permute of a [Tk, Dh, Hkv, S] leaf (the session's transposed V cache); fp:
// scale, softcap.

typedef struct flash_spec {
    const char *name;
    int64_t Dh, T, Tk, H, Hkv, S;
    bool causal;
    int64_t window;
    double softcap;
    const int32_t *ids;  // document ids [Tk] (per_seq: [Tk, S]), or NULL
    bool per_seq, sinks, qperm, train;
    double q_scale;      // 0: 1
    bool vperm;          // v as a transposed view (strided rows)
} flash_spec;

static const int32_t fa_ids35[35] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1,
                                     1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2};
static const int32_t fa_ids2x36[72] = {5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6,
                                       6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static int32_t fa_ids_big[200];  // t / 37: documents crossing the tiles

static const flash_spec flash_fwd_specs[] = {
    //  name                          Dh   T  Tk  H Hkv S causal W  cap  ids  per_seq sinks qperm train qs vperm
    {"causal Dh=8 T=35", 8, 35, 35, 2, 2, 1, true, 0, 0, NULL, false, false, false, true, 0, false},
    {"non-causal Dh=5 gqa 2:1", 5, 34, 34, 2, 1, 1, false, 0, 0, NULL, false, false, false, true, 0, false},
    {"docs causal S=2 [Tk,S]", 4, 36, 36, 2, 2, 2, true, 0, 0, fa_ids2x36, true, false, false, true, 0, false},
    {"docs non-causal [Tk]", 6, 35, 35, 1, 1, 1, false, 0, 0, fa_ids35, false, false, false, true, 0, false},
    {"window 5 causal", 8, 35, 35, 2, 1, 1, true, 5, 0, NULL, false, false, false, true, 0, false},
    {"softcap 2 causal", 8, 33, 33, 2, 2, 1, true, 0, 2.0, NULL, false, false, false, true, 3.0, false},
    {"gqa H=4 Hkv=2", 4, 33, 33, 4, 2, 1, true, 0, 0, NULL, false, false, false, true, 0, false},
    {"gqa H=4 Hkv=1", 4, 33, 33, 4, 1, 1, true, 0, 0, NULL, false, false, false, true, 0, false},
    {"prefix Tk=45 T=13", 8, 13, 45, 2, 2, 1, true, 0, 0, NULL, false, false, false, true, 0, false},
    {"T=1 Tk=20", 8, 1, 20, 2, 1, 1, true, 0, 0, NULL, false, false, false, true, 0, false},
    {"q permuted view", 8, 34, 34, 2, 1, 1, true, 0, 0, NULL, false, false, true, true, 0, false},
    {"sinks causal", 8, 35, 35, 2, 1, 1, true, 0, 0, NULL, false, true, false, false, 0, false},
    {"sinks window softcap", 8, 20, 30, 2, 2, 1, true, 7, 5.0, NULL, false, true, false, false, 2.0, false},
    {"Dh=64 causal", 64, 40, 40, 2, 1, 1, true, 0, 0, NULL, false, false, false, false, 0, false},
    {"Dh=128 prefix", 128, 33, 70, 2, 2, 1, true, 0, 0, NULL, false, false, false, false, 0, false},
    {"Dh=256 non-causal", 256, 20, 20, 2, 1, 1, false, 0, 0, NULL, false, false, false, false, 0, false},
    {"Dh=512 T=3", 512, 3, 9, 1, 1, 1, true, 0, 0, NULL, false, false, false, false, 0, false},
    {"Dh=3 window softcap", 3, 70, 70, 2, 2, 1, true, 9, 1.5, NULL, false, false, false, false, 2.0, false},
    {"big docs gqa S=2", 32, 130, 200, 4, 2, 2, true, 0, 0, fa_ids_big, false, false, false, false, 0, false},
    {"v transposed prefix gqa", 8, 13, 45, 2, 1, 1, true, 0, 0, NULL, false, false, false, true, 0, true},
    {"v transposed window softcap", 64, 40, 100, 4, 2, 1, true, 30, 3.0, NULL, false, false, false, false, 2.0, true},
};

static const flash_spec flash_back_specs[] = {
    {"causal gqa 2:1", 8, 35, 35, 4, 2, 1, true, 0, 0, NULL, false, false, false, false, 0, false},
    {"docs causal S=2 [Tk,S]", 4, 36, 36, 2, 2, 2, true, 0, 0, fa_ids2x36, true, false, false, false, 0, false},
    {"docs non-causal [Tk]", 6, 35, 35, 1, 1, 1, false, 0, 0, fa_ids35, false, false, false, false, 0, false},
    {"window softcap prefix", 8, 20, 30, 2, 1, 1, true, 7, 3.0, NULL, false, false, false, false, 2.0, false},
    {"T=1 Tk=20 gqa 2:1", 8, 1, 20, 2, 1, 1, true, 0, 0, NULL, false, false, false, false, 0, false},
    {"Dh=5 non-causal gqa 4:1", 5, 34, 34, 4, 1, 1, false, 0, 0, NULL, false, false, false, false, 0, false},
    {"Dh=64 causal", 64, 40, 40, 2, 1, 1, true, 0, 0, NULL, false, false, false, false, 0, false},
    {"Dh=128 prefix", 128, 33, 70, 2, 2, 1, true, 0, 0, NULL, false, false, false, false, 0, false},
    {"Dh=256 window", 256, 20, 20, 2, 1, 1, true, 6, 0, NULL, false, false, false, false, 0, false},
    {"big docs gqa S=2", 32, 130, 200, 4, 2, 2, true, 0, 0, fa_ids_big, false, false, false, false, 0, false},
    {"v transposed window prefix", 16, 20, 70, 2, 1, 1, true, 9, 0, NULL, false, false, false, false, 0, true},
};

#define FA_N(specs) ((int)(sizeof specs / sizeof *specs))

typedef struct fa_dims {
    int64_t Dh, T, Tk, H, Hkv, S, G;
    int iq, iseg, isinks;
    bool qperm, vperm, causal;
    int64_t window;
    double scale, cap;
} fa_dims;

static fa_dims fa_dims_of(const tcase *c) {
    fa_dims d = {.iq = (int)c->ip[5], .iseg = (int)c->ip[2], .isinks = (int)c->ip[3], .qperm = c->ip[4] != 0,
                 .vperm = c->ip[6] != 0,
                 .causal = c->ip[0] != 0, .window = c->ip[1], .scale = c->fp[0], .cap = c->fp[1]};
    const int64_t *qn = c->in[d.iq].ne, *kn = c->in[d.iq + 1].ne;
    d.Dh = qn[0], d.T = d.qperm ? qn[2] : qn[1], d.H = d.qperm ? qn[1] : qn[2], d.S = qn[3];
    d.Tk = kn[1], d.Hkv = kn[2], d.G = d.H / d.Hkv;
    return d;
}

// Case v of specs for FLASH_ATTN_EXT (back false) or FLASH_ATTN_BACK (d first, nothing
// trained); k and v in the type under test; 0 past the last.
static int gen_flash_case(tcase *c, uint32_t type, int v, const flash_spec *specs, int n, bool back) {
    if (v >= n) return 0;
    const flash_spec *sp = &specs[v];
    const int64_t Dh = sp->Dh, T = sp->T, Tk = sp->Tk, H = sp->H, Hkv = sp->Hkv, S = sp->S;
    const int64_t n_fwd = Dh * H * T * S + T * H * S;
    for (int t = 0; t < 200; t++) fa_ids_big[t] = t / 37;
    label(c, type, sp->name);
    c->ip[0] = sp->causal, c->ip[1] = sp->window, c->ip[4] = sp->qperm, c->ip[5] = back, c->ip[6] = sp->vperm;
    c->fp[0] = (double)(1.0f / sqrtf((float)Dh));
    c->fp[1] = (double)(float)sp->softcap;
    if (back) {
        tin *d = in_rand(c, "d", RG_TYPE_F32, n_fwd, 1, 1, 1, 1.0, false);
        for (int64_t i = Dh * H * T * S; i < n_fwd; i++) set_f32(d, i, 0.3 * d->val[i]);  // lse's gradient
    }
    const double qs = sp->q_scale > 0 ? sp->q_scale : 1.0;
    if (sp->qperm) in_rand(c, "q", RG_TYPE_F32, Dh, H, T, S, qs, sp->train);
    else in_rand(c, "q", RG_TYPE_F32, Dh, T, H, S, qs, sp->train);
    in_rand(c, "k", type, Dh, Tk, Hkv, S, 1.0, sp->train);
    if (sp->vperm) in_rand(c, "v", type, Tk, Dh, Hkv, S, 1.0, sp->train);
    else in_rand(c, "v", type, Dh, Tk, Hkv, S, 1.0, sp->train);
    c->ip[2] = sp->ids ? c->n_in : -1;
    if (sp->ids) in_seg(c, Tk, sp->per_seq ? S : 1, sp->ids);
    c->ip[3] = sp->sinks ? c->n_in : -1;
    if (sp->sinks) in_rand(c, "sinks", RG_TYPE_F32, H, 1, 1, 1, 1.0, false);
    set_ne(c->out_ne, back ? Dh * T * H * S + 2 * Dh * Tk * Hkv * S : n_fwd, 1, 1, 1);
    return 1;
}

static int gen_flash_attn_ext(tcase *c, uint32_t type, int v) {
    return gen_flash_case(c, type, v, flash_fwd_specs, FA_N(flash_fwd_specs), false);
}
static int gen_flash_attn_back(tcase *c, uint32_t type, int v) {
    return gen_flash_case(c, type, v, flash_back_specs, FA_N(flash_back_specs), true);
}

static rg_node *fa_build_fwd(rg_graph *g, rg_node *const *in, const tcase *c) {
    const fa_dims d = fa_dims_of(c);
    rg_node *q = d.qperm ? rg_permute(g, in[d.iq], 0, 2, 1, 3) : in[d.iq];
    rg_node *v = d.vperm ? rg_permute(g, in[d.iq + 2], 1, 0, 2, 3) : in[d.iq + 2];
    const rg_flash_params p = {(float)d.scale, (float)d.cap, d.window, d.causal};
    return rg_flash_attn_ext(g, q, in[d.iq + 1], v, d.iseg >= 0 ? in[d.iseg] : NULL,
                             d.isinks >= 0 ? in[d.isinks] : NULL, &p);
}
static int build_flash_attn_ext(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = fa_build_fwd(g, in, c);
    return 1;
}
static int build_flash_attn_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_flash_attn_back(g, in[0], fa_build_fwd(g, in, c));
    return 1;
}

// ---------------------------------------------------------------------------
// The double references

static double fa_q(const fa_dims *d, double *const *x, int64_t s, int64_t h, int64_t t, int64_t e) {
    return d->qperm ? x[d->iq][e + d->Dh * (h + d->H * (t + d->T * s))] : x[d->iq][e + d->Dh * (t + d->T * (h + d->H * s))];
}
static const double *fa_kv(const fa_dims *d, double *const *x, int which, int64_t s, int64_t g, int64_t j) {
    return x[d->iq + which] + d->Dh * (j + d->Tk * (g + d->Hkv * s));
}
// Element e of value j (kv head g, sequence s), stored [Dh, Tk] or transposed [Tk, Dh].
static double fa_v(const fa_dims *d, double *const *x, int64_t s, int64_t g, int64_t j, int64_t e) {
    return d->vperm ? x[d->iq + 2][j + d->Tk * (e + d->Dh * (g + d->Hkv * s))] : fa_kv(d, x, 2, s, g, j)[e];
}
static bool fa_ref_visible(const fa_dims *d, const tcase *c, int64_t s, int64_t t, int64_t j) {
    const int64_t qpos = t + d->Tk - d->T;
    if (d->causal && j > qpos) return false;
    if (d->window > 0 && qpos - j >= d->window) return false;
    if (d->iseg < 0) return true;
    const tin *sg = &c->in[d->iseg];
    const int32_t *ids = sg->ival + (sg->ne[1] > 1 ? s * d->Tk : 0);
    return ids[j] == ids[qpos];
}

// Query (s, h, t): the capped scores z[j] (-inf where masked), p[j] = e^(z - lse), lse.
static double fa_ref_row(const fa_dims *d, const tcase *c, double *const *x, int64_t s, int64_t h, int64_t t, double *z,
                         double *p) {
    const int64_t g = h / d->G;
    double m = d->isinks >= 0 ? x[d->isinks][h] : -INFINITY;
    for (int64_t j = 0; j < d->Tk; j++) {
        z[j] = -INFINITY;
        if (!fa_ref_visible(d, c, s, t, j)) continue;
        const double *k = fa_kv(d, x, 1, s, g, j);
        double dot = 0;
        for (int64_t e = 0; e < d->Dh; e++) dot += fa_q(d, x, s, h, t, e) * k[e];
        z[j] = d->scale * dot;
        if (d->cap > 0) z[j] = d->cap * tanh(z[j] / d->cap);
        m = fmax(m, z[j]);
    }
    if (m == -INFINITY) {
        for (int64_t j = 0; j < d->Tk; j++) p[j] = 0;
        return INFINITY;
    }
    double sum = d->isinks >= 0 ? exp(x[d->isinks][h] - m) : 0;
    for (int64_t j = 0; j < d->Tk; j++) sum += z[j] == -INFINITY ? 0 : exp(z[j] - m);
    const double lse = m + log(sum);
    for (int64_t j = 0; j < d->Tk; j++) p[j] = z[j] == -INFINITY ? 0 : exp(z[j] - lse);
    return lse;
}

static void ref_flash_attn_ext(const tcase *c, double *const *x, double *y) {
    const fa_dims d = fa_dims_of(c);
    double *z = malloc(sizeof(double) * (size_t)d.Tk), *p = malloc(sizeof(double) * (size_t)d.Tk);
    double *lse = y + d.Dh * d.H * d.T * d.S;
    for (int64_t s = 0; s < d.S; s++)
        for (int64_t h = 0; h < d.H; h++)
            for (int64_t t = 0; t < d.T; t++) {
                lse[t + d.T * (h + d.H * s)] = fa_ref_row(&d, c, x, s, h, t, z, p);
                double *o = y + d.Dh * (h + d.H * (t + d.T * s));
                for (int64_t e = 0; e < d.Dh; e++) o[e] = 0;
                for (int64_t j = 0; j < d.Tk; j++) {
                    if (p[j] == 0) continue;
                    for (int64_t e = 0; e < d.Dh; e++) o[e] += p[j] * fa_v(&d, x, s, h / d.G, j, e);
                }
            }
    free(z), free(p);
}

// training.md §6.3 in double: D = dO.o - dlse, dz = p (dO.v - D), times 1 - (z/c)^2 with a
// softcap; dq = scale sum dz k, dk = scale sum dz q, dv = sum p dO (dk, dv over the group).
static void ref_flash_attn_back(const tcase *c, double *const *x, double *y) {
    const fa_dims d = fa_dims_of(c);
    const int64_t Dh = d.Dh, n_o = Dh * d.H * d.T * d.S;
    double *z = malloc(sizeof(double) * (size_t)d.Tk), *p = malloc(sizeof(double) * (size_t)d.Tk);
    double *o = malloc(sizeof(double) * (size_t)Dh);
    double *dq = y, *dk = y + Dh * d.T * d.H * d.S, *dv = dk + Dh * d.Tk * d.Hkv * d.S;
    memset(y, 0, sizeof(double) * (size_t)nel4(c->out_ne));
    for (int64_t s = 0; s < d.S; s++)
        for (int64_t h = 0; h < d.H; h++)
            for (int64_t t = 0; t < d.T; t++) {
                const int64_t g = h / d.G;
                fa_ref_row(&d, c, x, s, h, t, z, p);
                const double *dO = x[0] + Dh * (h + d.H * (t + d.T * s)), dlse = x[0][n_o + t + d.T * (h + d.H * s)];
                double D = -dlse;
                for (int64_t e = 0; e < Dh; e++) o[e] = 0;
                for (int64_t j = 0; j < d.Tk; j++)
                    for (int64_t e = 0; e < Dh && p[j] != 0; e++) o[e] += p[j] * fa_v(&d, x, s, g, j, e);
                for (int64_t e = 0; e < Dh; e++) D += dO[e] * o[e];
                for (int64_t j = 0; j < d.Tk; j++) {
                    if (p[j] == 0) continue;
                    const double *k = fa_kv(&d, x, 1, s, g, j);
                    double dP = 0;
                    for (int64_t e = 0; e < Dh; e++) dP += dO[e] * fa_v(&d, x, s, g, j, e);
                    double dz = p[j] * (dP - D);
                    if (d.cap > 0) dz *= 1 - (z[j] / d.cap) * (z[j] / d.cap);
                    double *dkj = dk + Dh * (j + d.Tk * (g + d.Hkv * s)), *dvj = dv + Dh * (j + d.Tk * (g + d.Hkv * s));
                    double *dqt = dq + Dh * (t + d.T * (h + d.H * s));
                    for (int64_t e = 0; e < Dh; e++) {
                        dqt[e] += d.scale * dz * k[e];
                        dkj[e] += d.scale * dz * fa_q(&d, x, s, h, t, e);
                        dvj[e] += p[j] * dO[e];
                    }
                }
            }
    free(z), free(p), free(o);
}

// ---------------------------------------------------------------------------
// Bits: FLASH_ATTN_EXT and FLASH_ATTN_BACK on 1, 2 and 3 threads, on the AVX2 loops and
// the baseline ones (rg_cpu_force_baseline), give the same bits, on shapes whose items
// spread over the threads: several query and key tiles, partial last tiles, GQA, two
// sequences, documents, and K/V in f32 and f16.

typedef struct fa_bits_spec {
    const char *name;
    int64_t Dh, T, Tk, H, Hkv, S, window;
    bool causal, docs;
    float softcap;
    uint32_t kv_type;
} fa_bits_spec;

// Runs fwd and back (d random) of one spec on nth threads; out gets both packed outputs.
static bool fa_run_bits(const tcase *c, const fa_bits_spec *sp, int nth, float *out, int64_t n_fwd, int64_t n_back) {
    rg_graph *g = rg_graph_new();
    rg_node *in[MAX_IN];
    for (int i = 0; i < c->n_in; i++) in[i] = rg_leaf(g, c->in[i].name, c->in[i].type, 4, c->in[i].ne, c->in[i].work);
    const rg_flash_params p = {1.0f / sqrtf((float)sp->Dh), sp->softcap, sp->window, sp->causal};
    rg_node *fwd = rg_flash_attn_ext(g, in[0], in[1], in[2], sp->docs ? in[4] : NULL, NULL, &p);
    rg_node *back = rg_flash_attn_back(g, in[3], fwd);
    rg_error err = {0};
    rg_exec *ex = NULL;
    rg_status st = rg_graph_error(g, &err);
    if (!st) fwd->flags |= RG_NODE_OUTPUT, back->flags |= RG_NODE_OUTPUT;
    if (!st) st = rg_exec_create(&ex, g, &(rg_exec_opts){.n_threads = nth}, &err);
    if (!st) restore_inputs(c), st = rg_exec_run(ex, 0, -1, &err);
    RG_CHECK(st == RG_OK, "%s, %d threads: %s", sp->name, nth, err.msg);
    if (!st) {
        memcpy(out, fwd->t.data, sizeof(float) * (size_t)n_fwd);
        memcpy(out + n_fwd, back->t.data, sizeof(float) * (size_t)n_back);
    }
    rg_exec_free(ex);
    rg_graph_free(g);
    return st == RG_OK;
}

static void test_flash_attn_bits(void) {
    static const fa_bits_spec specs[] = {
        {"causal docs gqa 2:1 S=2", 64, 150, 150, 4, 2, 2, 0, true, true, 0.0f, RG_TYPE_F32},
        {"prefix window softcap f16", 40, 70, 130, 2, 1, 1, 33, true, false, 4.0f, RG_TYPE_F16},
        {"non-causal Dh=13 gqa 3:1", 13, 100, 100, 3, 1, 1, 0, false, false, 0.0f, RG_TYPE_F32},
    };
    const bool avx2 = rg_cpu_has_avx2() != 0;
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        const fa_bits_spec *sp = &specs[i];
        const int64_t Dh = sp->Dh, T = sp->T, Tk = sp->Tk, H = sp->H, Hkv = sp->Hkv, S = sp->S;
        const int64_t n_fwd = Dh * H * T * S + T * H * S, n_back = Dh * T * H * S + 2 * Dh * Tk * Hkv * S;
        tcase c;
        memset(&c, 0, sizeof c);
        c.seed = 0xfa00 + i;
        in_rand(&c, "q", RG_TYPE_F32, Dh, T, H, S, 1.0, false);
        in_rand(&c, "k", sp->kv_type, Dh, Tk, Hkv, S, 1.0, false);
        in_rand(&c, "v", sp->kv_type, Dh, Tk, Hkv, S, 1.0, false);
        in_rand(&c, "d", RG_TYPE_F32, n_fwd, 1, 1, 1, 1.0, false);
        int32_t ids[150];
        for (int t = 0; t < 150; t++) ids[t] = t < 40 ? 0 : t < 41 ? 1 : t < 97 ? 2 : 3;
        in_seg(&c, Tk, 1, ids);
        float *want = malloc(sizeof(float) * (size_t)(n_fwd + n_back)), *got = malloc(sizeof(float) * (size_t)(n_fwd + n_back));
        bool have = false;
        for (int base = 0; base <= (avx2 ? 1 : 0); base++) {
            rg_cpu_force_baseline(base && avx2 ? 1 : 0);
            for (int nth = 1; nth <= 3; nth++) {
                if (!fa_run_bits(&c, sp, nth, have ? got : want, n_fwd, n_back)) continue;
                if (!have) {
                    have = true;
                    continue;
                }
                int64_t first = -1;
                for (int64_t e = 0; e < n_fwd + n_back && first < 0; e++)
                    if (memcmp(&got[e], &want[e], sizeof(float))) first = e;
                printf("    %s, %s loops, %d threads: o, lse, dq, dk, dv (%lld values) %s\n", sp->name,
                       avx2 && !base ? "AVX2" : "baseline", nth, (long long)(n_fwd + n_back),
                       first < 0 ? "the same bits as 1 thread" : "DIFFER");
                RG_CHECK(first < 0, "%s, %d threads (%s): value %lld is %.9g, 1 thread's %.9g", sp->name, nth,
                         base ? "baseline" : "avx2", (long long)first, first >= 0 ? got[first] : 0.0,
                         first >= 0 ? want[first] : 0.0);
            }
        }
        rg_cpu_force_baseline(0);
        free(want), free(got);
        free_case(&c);
    }
}

// ---------------------------------------------------------------------------
// The flash op against the materialized attention on the same inputs: scores MUL_MAT(k, q)
// [Tk, T, H, S], SOFT_MAX with the scale, the softcap and a dense F32 mask [Tk, T] (0 or
// -inf, made from the same causal, window and document rules), then MUL_MAT(v^T, p); the
// loss sum(o w) and its gradients. Both are f32 computations of the same sums in different
// orders (tiles and an online softmax against whole rows), so they agree within a few
// roundoff units, not bit for bit: o within 2e-6 of max|o|, dq, dk, dv within 1e-5 of their
// largest element. 2 threads.

typedef struct fa_mat_spec {
    const char *name;
    int64_t Dh, T, Tk, H, Hkv, window;
    bool causal, docs;
    float softcap;
    uint32_t kv_type;
} fa_mat_spec;

static void fa_compare_materialized(const fa_mat_spec *sp, uint64_t seed) {
    const int64_t Dh = sp->Dh, T = sp->T, Tk = sp->Tk, H = sp->H, Hkv = sp->Hkv;
    tcase c;
    memset(&c, 0, sizeof c);
    c.seed = seed;
    in_rand(&c, "q", RG_TYPE_F32, Dh, T, H, 1, sp->softcap > 0 ? 2.0 : 1.0, true);
    in_rand(&c, "k", sp->kv_type, Dh, Tk, Hkv, 1, 1.0, true);
    in_rand(&c, "v", sp->kv_type, Dh, Tk, Hkv, 1, 1.0, true);
    tin *w = in_rand(&c, "w", RG_TYPE_F32, Dh, H, T, 1, 1.0, false);
    int32_t ids[256];
    for (int64_t j = 0; j < Tk; j++) ids[j] = (int32_t)(j / 29 + (j > 70));
    tin *seg = in_seg(&c, Tk, 1, ids);
    tin *mask = new_in(&c, "mask", RG_TYPE_F32, Tk, T, 1, 1, false);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < Tk; j++) {
            const int64_t qpos = t + Tk - T;
            const bool vis = (!sp->causal || j <= qpos) && (sp->window <= 0 || qpos - j < sp->window) &&
                             (!sp->docs || ids[j] == ids[qpos]);
            set_f32(mask, j + Tk * t, vis ? 0.0 : -INFINITY);
        }
    (void)w, (void)seg;
    const float scale = 1.0f / sqrtf((float)Dh);
    double *o[2], *gr[2][3];
    int64_t ng[3] = {Dh * T * H, Dh * Tk * Hkv, Dh * Tk * Hkv};
    bool ok = true;
    for (int flash = 0; flash < 2; flash++) {
        rg_graph *g = rg_graph_new();
        rg_node *q = rg_param(g, "q", RG_TYPE_F32, 4, c.in[0].ne, c.in[0].work);
        rg_node *k = rg_param(g, "k", sp->kv_type, 4, c.in[1].ne, c.in[1].work);
        rg_node *v = rg_param(g, "v", sp->kv_type, 4, c.in[2].ne, c.in[2].work);
        rg_node *wn = rg_leaf(g, "w", RG_TYPE_F32, 4, c.in[3].ne, c.in[3].work);
        rg_node *y;  // o [Dh, H, T]
        if (flash) {
            const rg_flash_params p = {scale, sp->softcap, sp->window, sp->causal};
            rg_node *seg_n = sp->docs ? rg_leaf(g, "seg", RG_TYPE_I32, 1, c.in[4].ne, c.in[4].work) : NULL;
            y = rg_flash_part(g, rg_flash_attn_ext(g, q, k, v, seg_n, NULL, &p), RG_FLASH_O);
        } else {
            rg_node *m = rg_leaf(g, "mask", RG_TYPE_F32, 2, c.in[5].ne, c.in[5].work);
            rg_node *kq = rg_soft_max(g, rg_mul_mat(g, k, q), m, false, scale, sp->softcap);  // [Tk, T, H]
            rg_node *om = rg_mul_mat(g, rg_cont(g, rg_transpose(g, v)), kq);                 // [Dh, T, H]
            y = rg_cont(g, rg_permute(g, om, 0, 2, 1, 3));
        }
        y = rg_reshape(g, y, 4, c.in[3].ne);
        rg_node *loss = rg_sum(g, rg_mul(g, y, wn));
        rg_error err = {0};
        rg_exec *ex = NULL;
        rg_status st = rg_graph_error(g, &err);
        if (!st) y->flags |= RG_NODE_OUTPUT;
        if (!st) st = rg_graph_backward(g, loss, &err);
        if (!st) st = rg_exec_create(&ex, g, &(rg_exec_opts){.n_threads = 2}, &err);
        if (!st) restore_inputs(&c), st = rg_exec_run(ex, 0, -1, &err);
        RG_CHECK(st == RG_OK, "%s (%s): %s", sp->name, flash ? "flash" : "materialized", err.msg);
        o[flash] = malloc(sizeof(double) * (size_t)(Dh * H * T));
        rg_node *params[3] = {q, k, v};
        for (int i = 0; i < 3; i++) gr[flash][i] = calloc((size_t)ng[i], sizeof(double));
        if (!st) {
            read_tensor(&y->t, o[flash]);
            for (int i = 0; i < 3; i++) read_tensor(&params[i]->grad->t, gr[flash][i]);
        }
        ok = ok && st == RG_OK;
        rg_exec_free(ex);
        rg_graph_free(g);
    }
    if (ok) {
        double eo = 0, mo = 0, eg[3] = {0}, mg[3] = {0};
        for (int64_t i = 0; i < Dh * H * T; i++) eo = fmax(eo, fabs(o[1][i] - o[0][i])), mo = fmax(mo, fabs(o[0][i]));
        for (int k = 0; k < 3; k++) {
            for (int64_t i = 0; i < ng[k]; i++)
                eg[k] = fmax(eg[k], fabs(gr[1][k][i] - gr[0][k][i])), mg[k] = fmax(mg[k], fabs(gr[0][k][i]));
            eg[k] /= mg[k] > 0 ? mg[k] : 1;
        }
        eo /= mo > 0 ? mo : 1;
        const bool good = eo <= 2e-6 && eg[0] <= 1e-5 && eg[1] <= 1e-5 && eg[2] <= 1e-5;
        printf("    %-28s %s: o %.1e (<= 2e-6 of max), dq %.1e, dk %.1e, dv %.1e (<= 1e-5 of max)%s\n", sp->name,
               rg_type_get(sp->kv_type)->name, eo, eg[0], eg[1], eg[2], good ? "" : "  FAIL");
        RG_CHECK(good, "%s: flash and materialized differ: o %.3e, dq %.3e, dk %.3e, dv %.3e", sp->name, eo, eg[0], eg[1],
                 eg[2]);
        RG_CHECK(mo > 0 && mg[0] > 0 && mg[1] > 0 && mg[2] > 0, "%s: zero outputs or gradients", sp->name);
    }
    for (int f = 0; f < 2; f++) {
        free(o[f]);
        for (int k = 0; k < 3; k++) free(gr[f][k]);
    }
    free_case(&c);
}

static void test_flash_attn_materialized(void) {
    static const fa_mat_spec specs[] = {
        {"causal", 64, 100, 100, 2, 2, 0, true, false, 0.0f, RG_TYPE_F32},
        {"non-causal", 32, 70, 70, 2, 2, 0, false, false, 0.0f, RG_TYPE_F32},
        {"packed docs causal", 32, 100, 100, 2, 1, 0, true, true, 0.0f, RG_TYPE_F32},
        {"packed docs non-causal", 16, 90, 90, 2, 2, 0, false, true, 0.0f, RG_TYPE_F32},
        {"sliding window 17", 32, 100, 100, 2, 2, 17, true, false, 0.0f, RG_TYPE_F32},
        {"softcap 3", 32, 80, 80, 2, 2, 0, true, false, 3.0f, RG_TYPE_F32},
        {"gqa 4:1", 16, 70, 70, 4, 1, 0, true, false, 0.0f, RG_TYPE_F32},
        {"kv prefix Tk=120 T=40", 32, 40, 120, 2, 2, 0, true, false, 0.0f, RG_TYPE_F32},
        {"f16 kv causal gqa 2:1", 64, 90, 90, 4, 2, 0, true, false, 0.0f, RG_TYPE_F16},
        {"f16 kv docs window softcap", 32, 100, 100, 2, 1, 40, true, true, 2.5f, RG_TYPE_F16},
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) fa_compare_materialized(&specs[i], 0xfa10 + i);
}

// ---------------------------------------------------------------------------
// Refusals name the op, the tensor at fault and the rule.

static void test_flash_attn_errors(void) {
    static const struct {
        const char *what, *expect;
    } cases[] = {
        {"head_dim", "flash_attn_ext: head_dim mismatch: keys 'k8'"},
        {"gqa", "flash_attn_ext: n_head 3 of the queries 'q3'"},
        {"sinks back", "flash_attn_back: the forward 'attn' [60] (f32) has attention sinks 'sinks' [2] (f32)"},
        {"window", "flash_attn_ext: window -2 is negative"},
        {"softcap<0", "flash_attn_ext: softcap -1 must be 0 (none) or a finite cap > 0"},
        {"softcap nan", "flash_attn_ext: softcap nan must be 0 (none) or a finite cap > 0"},
        {"Tk < T", "flash_attn_ext: keys 'kshort'"},
        {"kv types", "flash_attn_ext: keys 'k' [4, 6] (f32) and values 'vh' [4, 6] (f16) must both be f32 or both f16"},
        {"seg", "flash_attn_ext: document ids 'seg5'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rg_graph *g = rg_graph_new();
        rg_node *q = rg_leaf(g, "q", RG_TYPE_F32, 3, (int64_t[]){4, 6, 2}, NULL);
        rg_node *k = rg_leaf(g, "k", RG_TYPE_F32, 3, (int64_t[]){4, 6, 1}, NULL);
        rg_node *v = rg_leaf(g, "v", RG_TYPE_F32, 3, (int64_t[]){4, 6, 1}, NULL);
        rg_flash_params p = {0.5f, 0.0f, 0, true};
        switch (i) {
        case 0: rg_flash_attn_ext(g, q, rg_leaf(g, "k8", RG_TYPE_F32, 3, (int64_t[]){8, 6, 1}, NULL), v, NULL, NULL, &p); break;
        case 1: rg_flash_attn_ext(g, rg_leaf(g, "q3", RG_TYPE_F32, 3, (int64_t[]){4, 6, 3}, NULL),
                                  rg_leaf(g, "k2", RG_TYPE_F32, 3, (int64_t[]){4, 6, 2}, NULL),
                                  rg_leaf(g, "v2", RG_TYPE_F32, 3, (int64_t[]){4, 6, 2}, NULL), NULL, NULL, &p);
            break;
        case 2: {
            rg_node *f = rg_flash_attn_ext(g, q, k, v, NULL, rg_leaf(g, "sinks", RG_TYPE_F32, 1, (int64_t[]){2}, NULL), &p);
            rg_node_set_name(f, "attn");
            rg_flash_attn_back(g, rg_leaf(g, "d", RG_TYPE_F32, 1, (int64_t[]){4 * 2 * 6 + 6 * 2}, NULL), f);
            break;
        }
        case 3: p.window = -2; rg_flash_attn_ext(g, q, k, v, NULL, NULL, &p); break;
        case 4: p.softcap = -1.0f; rg_flash_attn_ext(g, q, k, v, NULL, NULL, &p); break;
        case 5: p.softcap = NAN; rg_flash_attn_ext(g, q, k, v, NULL, NULL, &p); break;
        case 6: rg_flash_attn_ext(g, q, rg_leaf(g, "kshort", RG_TYPE_F32, 3, (int64_t[]){4, 5, 1}, NULL),
                                  rg_leaf(g, "vshort", RG_TYPE_F32, 3, (int64_t[]){4, 5, 1}, NULL), NULL, NULL, &p);
            break;
        case 7: rg_flash_attn_ext(g, q, k, rg_leaf(g, "vh", RG_TYPE_F16, 3, (int64_t[]){4, 6, 1}, NULL), NULL, NULL, &p); break;
        default: rg_flash_attn_ext(g, q, k, v, rg_leaf(g, "seg5", RG_TYPE_I32, 1, (int64_t[]){5}, NULL), NULL, &p); break;
        }
        rg_error err = {0};
        const bool refused = rg_graph_error(g, &err) != RG_OK;
        printf("    %-11s %s\n", cases[i].what, refused ? err.msg : "(accepted)");
        RG_CHECK(refused && strstr(err.msg, cases[i].expect), "%s: '%s' does not contain '%s'", cases[i].what,
                 refused ? err.msg : "", cases[i].expect);
        rg_graph_free(g);
    }
    // And the sinks message names them.
    rg_graph *g = rg_graph_new();
    rg_node *q = rg_leaf(g, "q", RG_TYPE_F32, 3, (int64_t[]){4, 6, 2}, NULL);
    rg_node *k = rg_leaf(g, "k", RG_TYPE_F32, 3, (int64_t[]){4, 6, 1}, NULL);
    rg_node *f = rg_flash_attn_ext(g, q, k, k, NULL, rg_leaf(g, "attn_sinks", RG_TYPE_F32, 1, (int64_t[]){2}, NULL),
                                   &(rg_flash_params){0.5f, 0.0f, 0, true});
    rg_flash_attn_back(g, rg_leaf(g, "d", RG_TYPE_F32, 1, (int64_t[]){60}, NULL), f);
    rg_error err = {0};
    RG_CHECK(rg_graph_error(g, &err) && strstr(err.msg, "attention sinks 'attn_sinks'") &&
                 strstr(err.msg, "materialized"),
             "sinks: '%s'", err.msg);
    rg_graph_free(g);
}
