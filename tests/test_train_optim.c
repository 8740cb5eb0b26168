// test_train_optim.c - the trainer's host optimizer step (src/train/optim.c)
// against shared/spec/training.md:
//   - §1.6 AdamW three steps on two scalars: the canonical f32 bits of theta,
//     m and v at every step; the same run with clipping at 0.25 (norms,
//     coefficients and theta bits);
//   - §1.6 SGD: plain and with momentum 0.9 / decay 0.1 (values);
//   - §1.5 schedule values (cosine, linear with W = 2, T = 10);
//   - §1.4 global norm: thread-count independent, double blocks;
//   - F16/BF16 in place: the stored weight is the keyed SR of the f32 update,
//     the same bits for 1 and 2 threads; with a master: w = RNE(master);
//   - the graph ops ADAMW and SGD (f32, f16/bf16 by SR, f16/bf16 with a
//     master) give rg_optim_apply's weights, masters and moments bit for bit.
#include "cpu/cpu_ops.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "train/optim.h"
#include "tensor/half.h"
#include "train/philox.h"
#include "train/sround.h"

#include "rg_test.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static rg_train_tensor scalar_pair(float *w, float *g, float *m, float *v) {
    rg_train_tensor t = {.id = 0, .type = RG_TYPE_F32, .n_dims = 1, .ne = {2, 1, 1, 1}, .nel = 2,
                         .w = w, .grad = g, .m = m, .v = v, .decay = true};
    strcpy(t.name, "theta");
    return t;
}

static const float G[3][2] = {{0.1f, -0.2f}, {0.3f, 0.05f}, {-0.2f, 0.4f}};

static void test_adamw_worked_example(void) {
    float w[2] = {1.0f, -0.5f}, g[2], m[2] = {0, 0}, v[2] = {0, 0};
    rg_train_tensor t = scalar_pair(w, g, m, v);
    static const uint32_t want_w[3][2] = {{0x3f7d2f1b, 0xbefa9fbf}, {0x3f7a94d1, 0xbef7f83f}, {0x3f79aba6, 0xbef9c772}};
    static const uint32_t want_m[3][2] = {{0x3c23d70b, 0xbca3d70b}, {0x3d1fbe78, 0xbc54fdf5}, {0x3c776601, 0x3ce7d567}};
    static const uint32_t want_v[3][2] = {{0x3727c5ae, 0x3827c5ae}, {0x38d1b1ba, 0x38321716}, {0x3912af71, 0x3954400d}};
    for (int s = 0; s < 3; s++) {
        memcpy(g, G[s], sizeof g);
        rg_optim_step st = {.optimizer = 0, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1,
                            .t = s + 1, .clip = 1.0f};
        rg_error err = {0};
        RG_REQUIRE(rg_optim_apply(&t, 1, &st, NULL, &err) == RG_OK, "%s", err.msg);
        for (int i = 0; i < 2; i++) {
            RG_CHECK(bits(w[i]) == want_w[s][i], "t=%d theta[%d] %08x want %08x", s + 1, i, bits(w[i]), want_w[s][i]);
            RG_CHECK(bits(m[i]) == want_m[s][i], "t=%d m[%d] %08x want %08x", s + 1, i, bits(m[i]), want_m[s][i]);
            RG_CHECK(bits(v[i]) == want_v[s][i], "t=%d v[%d] %08x want %08x", s + 1, i, bits(v[i]), want_v[s][i]);
        }
    }
}

static void test_adamw_clipped(void) {
    float w[2] = {1.0f, -0.5f}, g[2], m[2] = {0, 0}, v[2] = {0, 0};
    rg_train_tensor t = scalar_pair(w, g, m, v);
    static const double want_norm[3] = {0.2236067977, 0.3041381265, 0.4472135955};
    static const double want_coef[3] = {1.0, 0.8219922338, 0.5590157444};
    static const uint32_t want_w[3][2] = {{0, 0}, {0x3f7a8561, 0xbef7c7bf}, {0x3f792fe1, 0xbef89913}};
    for (int s = 0; s < 3; s++) {
        memcpy(g, G[s], sizeof g);
        double norm = rg_grad_global_norm(&t, 1, NULL);
        float coef = rg_clip_coef(norm, 0.25);
        RG_CHECK(fabs(norm - want_norm[s]) < 5e-8 * want_norm[s],  // the f32 inputs are not the exact decimals
                 "t=%d norm %.10f want %.10f", s + 1, norm, want_norm[s]);
        RG_CHECK(fabs(coef - want_coef[s]) < 1e-7, "t=%d coef %.10f want %.10f", s + 1, (double)coef, want_coef[s]);
        rg_optim_step st = {.optimizer = 0, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1,
                            .t = s + 1, .clip = coef};
        rg_error err = {0};
        RG_REQUIRE(rg_optim_apply(&t, 1, &st, NULL, &err) == RG_OK, "%s", err.msg);
        if (s > 0)
            for (int i = 0; i < 2; i++)
                RG_CHECK(bits(w[i]) == want_w[s][i], "t=%d theta[%d] %08x want %08x", s + 1, i, bits(w[i]), want_w[s][i]);
    }
}

static void test_sgd_worked_example(void) {
    static const struct {
        double mu, wd;
        double want[3][2];
    } cases[] = {
        {0.0, 0.0, {{0.99, -0.48}, {0.96, -0.485}, {0.98, -0.525}}},
        {0.9, 0.1, {{0.98, -0.475}, {0.9222, -0.45275}, {0.880958, -0.4681975}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float w[2] = {1.0f, -0.5f}, g[2], b[2] = {0, 0};
        rg_train_tensor t = scalar_pair(w, g, cases[c].mu != 0.0 ? b : NULL, NULL);
        for (int s = 0; s < 3; s++) {
            memcpy(g, G[s], sizeof g);
            rg_optim_step st = {.optimizer = 1, .lr = 0.1, .weight_decay = cases[c].wd, .momentum = cases[c].mu,
                                .t = s + 1, .clip = 1.0f};
            rg_error err = {0};
            RG_REQUIRE(rg_optim_apply(&t, 1, &st, NULL, &err) == RG_OK, "%s", err.msg);
            for (int i = 0; i < 2; i++)
                RG_CHECK(fabs(w[i] - cases[c].want[s][i]) <= 2e-6 * fabs(cases[c].want[s][i]),
                         "case %zu t=%d theta[%d] %.9g want %.9g", c, s + 1, i, (double)w[i], cases[c].want[s][i]);
        }
    }
}

static void test_schedules(void) {
    static const struct {
        int64_t s;
        double cosine, linear;
    } rows[] = {{0, 0, 0},
                {1, 5.0e-04, 5.0e-04},
                {2, 1.0e-03, 1.0e-03},
                {3, 9.6193976626e-04, 8.75e-04},
                {5, 6.9134171618e-04, 6.25e-04},
                {6, 5.0e-04, 5.0e-04},
                {9, 3.8060233744e-05, 1.25e-04},
                {10, 0, 0}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double c = 1e-3 * rg_schedule_factor(2, rows[i].s, 2, 10), l = 1e-3 * rg_schedule_factor(1, rows[i].s, 2, 10);
        RG_CHECK(fabs(c - rows[i].cosine) < 1e-13, "cosine s=%lld %.12g want %.12g", (long long)rows[i].s, c, rows[i].cosine);
        RG_CHECK(fabs(l - rows[i].linear) < 1e-13, "linear s=%lld %.12g want %.12g", (long long)rows[i].s, l, rows[i].linear);
        double k = rg_schedule_factor(0, rows[i].s, 2, 10);
        double want_k = rows[i].s < 2 ? rows[i].s / 2.0 : 1.0;
        RG_CHECK(k == want_k, "constant s=%lld %g want %g", (long long)rows[i].s, k, want_k);
    }
}

// A tensor of n random-ish values in [-1, 1) from the keyed generator.
static void fill(float *x, int64_t n, uint32_t purpose_tensor, float scale) {
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * ((float)(rg_rand_u32(99, 0, 7, purpose_tensor, (uint64_t)i) >> 8) * 0x1p-23f - 1.0f);
}

static void test_norm_thread_independent(void) {
    const int64_t n = 3 * 4096 + 77;
    float *g = malloc(sizeof(float) * n);
    fill(g, n, 1, 1.0f);
    rg_train_tensor t = {.type = RG_TYPE_F32, .nel = n, .grad = g};
    // §1.4 with our block sum: per 4096-element block, 16 lanes (i mod 16) in
    // index order, added by the tree (l, l+8), (l, l+4), (l, l+2), (l, l+1);
    // the blocks in order. And a plain running sum, which it must stay close to.
    double ref = 0.0, plain = 0.0;
    for (int64_t b = 0; b < n; b += 4096) {
        double lanes[16] = {0};
        for (int64_t i = b; i < n && i < b + 4096; i++) {
            lanes[(i - b) % 16] += (double)g[i] * (double)g[i];
            plain += (double)g[i] * (double)g[i];
        }
        for (int w = 8; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) lanes[l] += lanes[l + w];
        ref += lanes[0];
    }
    RG_CHECK(fabs(ref - plain) <= 1e-13 * plain, "lanes %.17g vs a running sum %.17g", ref, plain);
    for (int64_t len = 0; len <= 70; len++) {  // every tail length, with and without the AVX2 part
        double lanes[16] = {0};
        for (int64_t i = 0; i < len; i++) lanes[i % 16] += (double)g[i] * (double)g[i];
        for (int w = 8; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) lanes[l] += lanes[l + w];
        double got = rg_sumsq_f64(g, len);
        RG_CHECK(memcmp(&got, &lanes[0], sizeof got) == 0, "rg_sumsq_f64 over %lld: %.17g want %.17g", (long long)len,
                 got, lanes[0]);
    }
    rg_threadpool *pool = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_threadpool_create(&pool, 2, &err) == RG_OK, "%s", err.msg);
    double a = rg_grad_global_norm(&t, 1, NULL), b = rg_grad_global_norm(&t, 1, pool);
    RG_CHECK(a == b && a == sqrt(ref), "1 thread %.17g, 2 threads %.17g, reference %.17g", a, b, sqrt(ref));
    g[5] = NAN;
    RG_CHECK(!isfinite(rg_grad_global_norm(&t, 1, pool)), "a NaN gradient must give a non-finite norm");
    rg_threadpool_free(pool);
    free(g);
}

// Half weights: in place the stored bits are SR(canonical f32 update) with the
// keyed word; with a master, the master follows the F32 run exactly and the
// stored weight is RNE(master). 1 and 2 threads agree bit for bit.
static void test_half_storage(void) {
    const int64_t n = 5000;
    const uint32_t types[2] = {RG_TYPE_F16, RG_TYPE_BF16};
    rg_threadpool *pool = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_threadpool_create(&pool, 2, &err) == RG_OK, "%s", err.msg);
    float *w0 = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
    float *mm = malloc(sizeof(float) * n * 6), *master = malloc(sizeof(float) * n);
    uint16_t *h1 = malloc(2 * n), *h2 = malloc(2 * n);
    fill(w0, n, 2, 0.5f);
    fill(g, n, 3, 0.01f);
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t ty = types[ti];
        for (int use_master = 0; use_master < 2; use_master++) {
            // the half weights start as the RNE of w0; the F32 twin starts at their exact upcast
            for (int64_t i = 0; i < n; i++) {
                h1[i] = ty == RG_TYPE_F16 ? rg_fp32_to_fp16(w0[i]) : rg_fp32_to_bf16(w0[i]);
                ref[i] = ty == RG_TYPE_F16 ? rg_fp16_to_fp32(h1[i]) : rg_bf16_to_fp32(h1[i]);
                master[i] = ref[i];
            }
            memcpy(h2, h1, 2 * n);
            memset(mm, 0, sizeof(float) * n * 6);
            rg_train_tensor th1 = {.id = 5, .type = ty, .n_dims = 2, .nel = n, .w = h1, .grad = g, .m = mm, .v = mm + n,
                                   .master = use_master ? master : NULL, .decay = true};
            float *master2 = malloc(sizeof(float) * n);
            memcpy(master2, master, sizeof(float) * n);
            rg_train_tensor th2 = th1;
            th2.w = h2, th2.m = mm + 2 * n, th2.v = mm + 3 * n, th2.master = use_master ? master2 : NULL;
            rg_train_tensor tf = {.id = 5, .type = RG_TYPE_F32, .n_dims = 2, .nel = n, .w = ref, .grad = g, .m = mm + 4 * n,
                                  .v = mm + 5 * n, .decay = true};
            for (int s = 1; s <= 3; s++) {
                rg_optim_step st = {.optimizer = 0, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                    .weight_decay = 0.01, .t = s, .seed = 1234, .clip = 1.0f};
                // the expected in-place result, computed from this step's start
                float *theta = malloc(sizeof(float) * n), *em = malloc(sizeof(float) * n * 2);
                for (int64_t i = 0; i < n; i++)
                    theta[i] = ty == RG_TYPE_F16 ? rg_fp16_to_fp32(h1[i]) : rg_bf16_to_fp32(h1[i]);
                memcpy(em, th1.m, sizeof(float) * n), memcpy(em + n, th1.v, sizeof(float) * n);
                rg_train_tensor te = {.id = 5, .type = RG_TYPE_F32, .nel = n, .w = theta, .grad = g, .m = em, .v = em + n,
                                      .decay = true};
                RG_REQUIRE(rg_optim_apply(&te, 1, &st, NULL, &err) == RG_OK, "%s", err.msg);
                RG_REQUIRE(rg_optim_apply(&th1, 1, &st, NULL, &err) == RG_OK, "%s", err.msg);
                RG_REQUIRE(rg_optim_apply(&th2, 1, &st, pool, &err) == RG_OK, "%s", err.msg);
                RG_REQUIRE(rg_optim_apply(&tf, 1, &st, NULL, &err) == RG_OK, "%s", err.msg);
                int bad = 0;
                for (int64_t i = 0; i < n && bad < 5; i++) {
                    if (h1[i] != h2[i]) {
                        bad++;
                        RG_CHECK(0, "type %u master %d t=%d [%lld]: 1 thread %04x, 2 threads %04x", ty, use_master, s,
                                 (long long)i, h1[i], h2[i]);
                    }
                    uint16_t want;
                    if (use_master) {
                        want = ty == RG_TYPE_F16 ? rg_fp32_to_fp16(master[i]) : rg_fp32_to_bf16(master[i]);
                        if (bits(master[i]) != bits(ref[i])) {
                            bad++;
                            RG_CHECK(0, "master [%lld] %08x != F32 run %08x", (long long)i, bits(master[i]), bits(ref[i]));
                        }
                    } else {
                        uint32_t r = rg_rand_u32(1234, (uint32_t)s, RG_RAND_PURPOSE_SR, 5, (uint64_t)i);
                        want = ty == RG_TYPE_F16 ? rg_sr_f16(theta[i], r) : rg_sr_bf16(theta[i], r);
                    }
                    if (h1[i] != want) {
                        bad++;
                        RG_CHECK(0, "type %u master %d t=%d [%lld]: %04x want %04x", ty, use_master, s, (long long)i, h1[i],
                                 want);
                    }
                }
                free(theta), free(em);
            }
            free(master2);
        }
    }
    rg_threadpool_free(pool);
    free(w0), free(g), free(ref), free(mm), free(master), free(h1), free(h2);
}

// ---------------------------------------------------------------------------
// The graph ops against the host step: the same start, the same three steps
// (decay, then a clipped gradient), the same bits.

typedef struct graph_optim_case {
    const char *what;
    int optimizer;  // 0 AdamW, 1 SGD
    uint32_t type;
    bool master;
} graph_optim_case;

// The node's fp as rg_optim_apply computes them for a tensor that decays.
static rg_adamw_step adamw_scalars(const rg_optim_step *s) {
    const double bc1 = 1.0 - pow(s->beta1, (double)s->t), bc2 = 1.0 - pow(s->beta2, (double)s->t);
    rg_adamw_step a = {(float)(s->lr / bc1), (float)(1.0 - s->beta1), (float)s->beta2, (float)(1.0 - s->beta2),
                       (float)s->eps, (float)(1.0 - s->lr * s->weight_decay), (float)sqrt(bc2), s->clip};
    return a;
}

// One step of the graph op on (w, grad, m, v, master) in place, on the CPU with 2 threads.
static rg_status graph_step(const graph_optim_case *k, const rg_optim_step *s, void *w, float *grad, float *m,
                            float *v, float *master, int64_t n, uint32_t tensor_id, rg_error *err) {
    rg_graph *g = rg_graph_new();
    const int64_t ne[2] = {n / 10, 10};
    rg_node *lw = rg_leaf(g, "w", k->type, 2, ne, w), *lg = rg_leaf(g, "grad", RG_TYPE_F32, 2, ne, grad);
    rg_node *lm = m ? rg_leaf(g, "m", RG_TYPE_F32, 2, ne, m) : NULL, *lv = v ? rg_leaf(g, "v", RG_TYPE_F32, 2, ne, v) : NULL;
    rg_optim_half h = {master ? rg_leaf(g, "master", RG_TYPE_F32, 2, ne, master) : NULL, s->seed, (uint32_t)s->t,
                       tensor_id};
    const rg_adamw_step a = adamw_scalars(s);
    rg_node *step;
    if (k->optimizer == 0)
        step = k->type == RG_TYPE_F32 ? rg_adamw(g, lw, lg, lm, lv, &a) : rg_adamw_half(g, lw, lg, lm, lv, &a, &h);
    else if (k->type == RG_TYPE_F32)
        step = rg_sgd(g, lw, lg, (float)s->lr, (float)s->weight_decay, s->clip);
    else
        step = rg_sgd_half(g, lw, lg, (float)s->lr, (float)s->weight_decay, s->clip, &h);
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 2, .device = RG_DEVICE_CPU};
    rg_status st = step ? RG_OK : rg_graph_error(g, err);
    if (!st) st = rg_exec_create(&ex, g, &o, err);
    if (!st) st = rg_exec_run(ex, 0, -1, err);
    rg_exec_free(ex);
    rg_graph_free(g);
    return st;
}

static void test_graph_ops_equal_host_step(void) {
    static const graph_optim_case cases[] = {
        {"adamw f32", 0, RG_TYPE_F32, false},       {"adamw f16 SR", 0, RG_TYPE_F16, false},
        {"adamw bf16 SR", 0, RG_TYPE_BF16, false},  {"adamw f16 master", 0, RG_TYPE_F16, true},
        {"adamw bf16 master", 0, RG_TYPE_BF16, true}, {"sgd f32", 1, RG_TYPE_F32, false},
        {"sgd f16 SR", 1, RG_TYPE_F16, false},      {"sgd bf16 SR", 1, RG_TYPE_BF16, false},
        {"sgd f16 master", 1, RG_TYPE_F16, true},   {"sgd bf16 master", 1, RG_TYPE_BF16, true},
    };
    const int64_t n = 5030;  // not a multiple of the chunks (2048) nor of the SR blocks (4)
    const uint32_t id = 0xABCDE;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const graph_optim_case *k = &cases[c];
        const size_t esz = k->type == RG_TYPE_F32 ? 4 : 2;
        float *w0 = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n), *st = calloc((size_t)n * 6, sizeof(float));
        void *wh = malloc(esz * n), *wg = malloc(esz * n);
        fill(w0, n, 11, 0.5f);
        for (int64_t i = 0; i < n; i++) {
            if (k->type == RG_TYPE_F32) ((float *)wh)[i] = w0[i];
            else ((uint16_t *)wh)[i] = k->type == RG_TYPE_F16 ? rg_fp32_to_fp16(w0[i]) : rg_fp32_to_bf16(w0[i]);
            st[4 * n + i] = st[5 * n + i] = k->type == RG_TYPE_F16 ? rg_fp16_to_fp32(((uint16_t *)wh)[i])
                                            : k->type == RG_TYPE_BF16 ? rg_bf16_to_fp32(((uint16_t *)wh)[i])
                                                                      : w0[i];
        }
        memcpy(wg, wh, esz * n);
        void *w_start = malloc(esz * n);
        memcpy(w_start, wh, esz * n);
        float *hm = st, *hv = st + n, *gm = st + 2 * n, *gv = st + 3 * n, *hmaster = st + 4 * n, *gmaster = st + 5 * n;
        const bool adamw = k->optimizer == 0;
        rg_train_tensor t = {.id = id, .type = k->type, .n_dims = 2, .ne = {n / 10, 10, 1, 1}, .nel = n, .w = wh,
                             .grad = g, .m = adamw ? hm : NULL, .v = adamw ? hv : NULL,
                             .master = k->master ? hmaster : NULL, .decay = true};
        int bad = 0;
        for (int s = 1; s <= 3 && !bad; s++) {
            fill(g, n, 20 + (uint32_t)s, 0.02f);
            rg_optim_step os = {.optimizer = k->optimizer, .lr = adamw ? 1e-3 : 0.05, .beta1 = 0.9, .beta2 = 0.999,
                                .eps = 1e-8, .weight_decay = s == 1 ? 0.1 : 0.0, .t = s,
                                .seed = 0x123456789ABCDEF0ull, .clip = s == 3 ? 0.625f : 1.0f};
            rg_error err = {0};
            RG_REQUIRE(rg_optim_apply(&t, 1, &os, NULL, &err) == RG_OK, "%s: %s", k->what, err.msg);
            RG_REQUIRE(graph_step(k, &os, wg, g, adamw ? gm : NULL, adamw ? gv : NULL, k->master ? gmaster : NULL, n,
                                  id, &err) == RG_OK,
                       "%s t=%d: %s", k->what, s, err.msg);
            for (int64_t i = 0; i < n && bad < 5; i++) {
                const bool w_ok = !memcmp((char *)wh + i * esz, (char *)wg + i * esz, esz);
                const bool st_ok = (!adamw || (bits(hm[i]) == bits(gm[i]) && bits(hv[i]) == bits(gv[i]))) &&
                                   (!k->master || bits(hmaster[i]) == bits(gmaster[i]));
                if (w_ok && st_ok) continue;
                bad++;
                RG_CHECK(0, "%s t=%d [%lld]: weight %s, state %s (host m %08x v %08x master %08x, graph %08x %08x %08x)",
                         k->what, s, (long long)i, w_ok ? "same" : "differs", st_ok ? "same" : "differs", bits(hm[i]),
                         bits(hv[i]), bits(hmaster[i]), bits(gm[i]), bits(gv[i]), bits(gmaster[i]));
            }
        }
        // the steps did something: most weights moved
        int64_t moved = 0;
        for (int64_t i = 0; i < n; i++) moved += memcmp((char *)wh + i * esz, (char *)w_start + i * esz, esz) != 0;
        RG_CHECK(moved > n / 2, "%s: only %lld of %lld weights moved", k->what, (long long)moved, (long long)n);
        printf("    %-18s 3 steps, %lld elements: graph op == rg_optim_apply %s\n", k->what, (long long)n,
               bad ? "NO" : "bit for bit");
        free(w0), free(g), free(st), free(wh), free(wg), free(w_start);
    }
}

static const rg_test_case cases[] = {
    RG_TEST(test_adamw_worked_example),
    RG_TEST(test_adamw_clipped),
    RG_TEST(test_sgd_worked_example),
    RG_TEST(test_schedules),
    RG_TEST(test_norm_thread_independent),
    RG_TEST(test_half_storage),
    RG_TEST(test_graph_ops_equal_host_step),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
