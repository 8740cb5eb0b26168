// test_cpu_ops_nn.c - the CPU kernels of ops_norm_rope.c, ops_softmax_loss.c
// and ops_optim.c, called on hand-built nodes.
//
// Every kernel runs with a 1-thread and a 3-thread pool and must give the same
// bits. Forwards are compared with double-precision references written here.
// Each _BACK kernel is compared with central finite differences of the double
// reference forward: loss = sum(w ⊙ y) with random w, step h = 1e-6 in double,
// error metric ||g_kernel - g_fd||_2 / ||g_fd||_2 with tolerance 1e-3 (the FD
// itself is good to ~1e-9; the kernels measure ~1e-7, printed per case).
// The optimizers are checked bit for bit against training.md §1.6 and against
// the canonical f32 formulas of §1.2/§1.3 written out here, and within rtol
// 2e-6 against a double implementation of torch's update over 3 steps.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "cpu/cpu_ops.h"
#include "rg_test.h"

#define FD_H 1e-6
#define FD_TOL 1e-3

typedef rg_status (*kernel_fn)(rg_exec_ctx *ctx, rg_node *n, rg_error *err);

// ---------------------------------------------------------------------------
// Tensors and nodes

static rg_threadpool *pool1, *pool3;

static void pools(void) {
    rg_error err = {0};
    if (!pool1 && rg_threadpool_create(&pool1, 1, &err) != RG_OK) abort();
    if (!pool3 && rg_threadpool_create(&pool3, 3, &err) != RG_OK) abort();
}

// A node with a fresh zeroed tensor [ne0, ne1, ne2, ne3]; rows are padded by
// `pad` elements (pad > 0 makes dims 1..3 strided, rows still packed).
static void node_init_pad(rg_node *nd, const char *name, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2,
                          int64_t ne3, int64_t pad) {
    memset(nd, 0, sizeof *nd);
    rg_tensor *t = &nd->t;
    t->type = type;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2, t->ne[3] = ne3;
    t->nb[0] = 4;  // f32 and i32 only here
    t->nb[1] = (size_t)(ne0 + pad) * 4;
    t->nb[2] = t->nb[1] * (size_t)ne1;
    t->nb[3] = t->nb[2] * (size_t)ne2;
    t->data = calloc(1, t->nb[3] * (size_t)ne3 + 4);
    snprintf(t->name, sizeof t->name, "%s", name);
}

static void node_init(rg_node *nd, const char *name, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2,
                      int64_t ne3) {
    node_init_pad(nd, name, type, ne0, ne1, ne2, ne3, 0);
}

static void node_free(rg_node *nd) {
    free(nd->t.data);
    nd->t.data = NULL;
}

static int64_t nel(const rg_node *nd) { return rg_tensor_nelements(&nd->t); }

// Element i (flat, logical order) of an f32 tensor, honouring nb[1..3].
static float *at(const rg_node *nd, int64_t i) {
    const rg_tensor *t = &nd->t;
    int64_t i0 = i % t->ne[0], r = i / t->ne[0];
    int64_t i1 = r % t->ne[1], i23 = r / t->ne[1];
    return (float *)rg_tensor_at(t, i0, i1, i23 % t->ne[2], i23 / t->ne[2]);
}

static void fill_normal(rg_node *nd, uint64_t seed, float scale) {
    for (int64_t i = 0; i < nel(nd); i++) *at(nd, i) = scale * rg_rng_normal(seed, 1, (uint64_t)i);
}

// The logical elements of an f32 tensor in double.
static double *to_double(const rg_node *nd) {
    double *d = malloc(sizeof(double) * (size_t)(nel(nd) + 1));
    for (int64_t i = 0; i < nel(nd); i++) d[i] = *at(nd, i);
    return d;
}

// Runs k on n with the 1-thread pool (result left in n->t) and again with the
// 3-thread pool into a scratch copy of the output, checking identical bits.
// Returns the 1-thread status (the 3-thread one must match).
static rg_status run_k(kernel_fn k, rg_node *n, rg_error *err) {
    pools();
    size_t bytes = n->t.nb[3] * (size_t)n->t.ne[3];
    void *out = n->t.data;
    void *alt = malloc(bytes + 4);
    memcpy(alt, out, bytes);  // untouched padding equal in both
    rg_exec_ctx c1 = {pool1, NULL, 0, false, NULL, NULL, false, NULL}, c3 = {pool3, NULL, 0, false, NULL, NULL, false, NULL};
    rg_status s1 = k(&c1, n, err);
    n->t.data = alt;
    rg_error e3 = {0};
    rg_status s3 = k(&c3, n, &e3);
    n->t.data = out;
    RG_CHECK(s1 == s3, "status %d with 1 thread, %d with 3", (int)s1, (int)s3);
    if (s1 == RG_OK && s3 == RG_OK)
        RG_CHECK(memcmp(out, alt, bytes) == 0, "'%s': 1 and 3 threads give different bits", n->t.name);
    free(alt);
    return s1;
}

// Runs k with the output sharing src[0]'s bytes (as the planner may bind an
// op marked inplace_ok) and checks the same bits as the out-of-place result
// already in n->t.
static void check_inplace(kernel_fn k, rg_node *n) {
    rg_node *s = n->src[0];
    size_t bytes = n->t.nb[3] * (size_t)n->t.ne[3];
    RG_REQUIRE(s->t.nb[3] * (size_t)s->t.ne[3] == bytes, "in-place: sizes differ");
    void *buf = malloc(bytes + 4), *sdata = s->t.data, *odata = n->t.data;
    memcpy(buf, sdata, bytes);
    s->t.data = buf;
    n->t.data = buf;
    rg_exec_ctx c3 = {pool3, NULL, 0, false, NULL, NULL, false, NULL};
    rg_error err = {0};
    RG_CHECK(k(&c3, n, &err) == RG_OK, "in-place: %s", err.msg);
    RG_CHECK(memcmp(buf, odata, bytes) == 0, "'%s': in-place result differs from out-of-place", n->t.name);
    s->t.data = sdata;
    n->t.data = odata;
    free(buf);
}

// ||g - fd||_2 / ||fd||_2 over the logical elements of the kernel output g.
static double fd_rel(const rg_node *g, const double *fd) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < nel(g); i++) {
        double d = (double)*at(g, i) - fd[i];
        num += d * d;
        den += fd[i] * fd[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// Central differences of f(x) = sum(w ⊙ forward(x)) at every element of x.
typedef double (*fd_loss_fn)(const double *x, const void *ctx);
static double *fd_grad(fd_loss_fn f, double *x, int64_t n, const void *ctx) {
    double *g = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + FD_H;
        double fp = f(x, ctx);
        x[i] = x0 - FD_H;
        double fm = f(x, ctx);
        x[i] = x0;
        g[i] = (fp - fm) / (2 * FD_H);
    }
    return g;
}

// max |a - ref| / max |ref| over the logical elements.
static double max_rel(const rg_node *a, const double *ref) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < nel(a); i++) {
        double d = fabs((double)*at(a, i) - ref[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(ref[i]) > den) den = fabs(ref[i]);
    }
    return den > 0 ? num / den : num;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// ---------------------------------------------------------------------------
// RMS_NORM

typedef struct rms_ctx {
    int64_t n, rows;
    double eps;
    const double *w;  // FD weights, like x
} rms_ctx;

static void rms_ref(const double *x, double *y, const rms_ctx *c) {
    for (int64_t r = 0; r < c->rows; r++) {
        double ss = 0;
        for (int64_t k = 0; k < c->n; k++) ss += x[r * c->n + k] * x[r * c->n + k];
        double rr = 1.0 / sqrt(ss / (double)c->n + c->eps);
        for (int64_t k = 0; k < c->n; k++) y[r * c->n + k] = x[r * c->n + k] * rr;
    }
}

static double rms_loss(const double *x, const void *p) {
    const rms_ctx *c = p;
    double *y = malloc(sizeof(double) * (size_t)(c->n * c->rows));
    rms_ref(x, y, c);
    double s = 0;
    for (int64_t i = 0; i < c->n * c->rows; i++) s += c->w[i] * y[i];
    free(y);
    return s;
}

static void test_rms_norm_forward(void) {
    // [37, 3, 2] with padded (strided) rows in the source, eps 1e-6, one row of
    // zeros (y = 0) and one with large values.
    rg_node x, y;
    node_init_pad(&x, "x", RG_TYPE_F32, 37, 3, 2, 1, 5);
    node_init(&y, "rms", RG_TYPE_F32, 37, 3, 2, 1);
    fill_normal(&x, 11, 1.5f);
    for (int k = 0; k < 37; k++) *at(&x, 2 * 37 + k) = 0.0f;
    for (int k = 0; k < 37; k++) *at(&x, 4 * 37 + k) *= 1e15f;
    y.op = RG_OP_RMS_NORM;
    y.src[0] = &x;
    y.fp[0] = 1e-6f;
    rg_error err = {0};
    RG_REQUIRE(run_k(cpu_rms_norm, &y, &err) == RG_OK, "%s", err.msg);
    double *xd = to_double(&x), *ref = malloc(sizeof(double) * 37 * 6);
    rms_ctx c = {37, 6, (double)1e-6f, NULL};
    rms_ref(xd, ref, &c);
    double worst = 0;
    for (int64_t r = 0; r < 6; r++) {  // per row: the large row must not dominate the metric
        double num = 0, den = 0;
        for (int k = 0; k < 37; k++) {
            num = fmax(num, fabs((double)*at(&y, r * 37 + k) - ref[r * 37 + k]));
            den = fmax(den, fabs(ref[r * 37 + k]));
        }
        worst = fmax(worst, den > 0 ? num / den : num);
    }
    RG_CHECK(worst < 1e-6, "rms_norm: worst row-relative error %.3g", worst);
    for (int k = 0; k < 37; k++) RG_CHECK(*at(&y, 2 * 37 + k) == 0.0f, "zero row must give zeros");
    printf("    rms_norm forward: worst row-relative error %.3g\n", worst);
    // In place (y's bytes are x's): same bits. Needs packed x: copy into one.
    rg_node xc;
    node_init(&xc, "xc", RG_TYPE_F32, 37, 3, 2, 1);
    for (int64_t i = 0; i < nel(&x); i++) *at(&xc, i) = *at(&x, i);
    y.src[0] = &xc;
    check_inplace(cpu_rms_norm, &y);
    // nb[0] != 4 is refused.
    x.t.nb[0] = 8;
    y.src[0] = &x;
    rg_exec_ctx c0 = {NULL, NULL, 0, false, NULL, NULL, false, NULL};
    RG_CHECK(cpu_rms_norm(&c0, &y, &err) != RG_OK && strstr(err.msg, "stride"), "strided elements: %s", err.msg);
    x.t.nb[0] = 4;
    x.t.type = RG_TYPE_I32;
    RG_CHECK(cpu_rms_norm(&c0, &y, &err) == RG_ERR_UNSUPPORTED && strstr(err.msg, "i32"), "i32 x: %s", err.msg);
    free(xd), free(ref);
    node_free(&x), node_free(&y), node_free(&xc);
}

static void test_rms_norm_back_fd(void) {
    const int64_t n = 24, rows = 5;
    rg_node dy, x, dx;
    node_init(&dy, "dy", RG_TYPE_F32, n, rows, 1, 1);
    node_init_pad(&x, "x", RG_TYPE_F32, n, rows, 1, 1, 3);
    node_init(&dx, "rms_back", RG_TYPE_F32, n, rows, 1, 1);
    fill_normal(&dy, 21, 1.0f);
    fill_normal(&x, 22, 0.7f);
    for (int k = 0; k < n; k++) *at(&x, 3 * n + k) *= 0.01f;  // a small row: eps matters there
    dx.op = RG_OP_RMS_NORM_BACK;
    dx.src[0] = &dy, dx.src[1] = &x;
    dx.fp[0] = 1e-5f;
    rg_error err = {0};
    RG_REQUIRE(run_k(cpu_rms_norm_back, &dx, &err) == RG_OK, "%s", err.msg);
    double *w = to_double(&dy), *xd = to_double(&x);
    rms_ctx c = {n, rows, (double)1e-5f, w};
    double *fd = fd_grad(rms_loss, xd, n * rows, &c);
    double rel = fd_rel(&dx, fd);
    RG_CHECK(rel < FD_TOL, "rms_norm_back vs finite differences: %.3g", rel);
    printf("    rms_norm_back vs FD: relative L2 error %.3g\n", rel);
    check_inplace(cpu_rms_norm_back, &dx);
    free(w), free(xd), free(fd);
    node_free(&dy), node_free(&x), node_free(&dx);
}

// ---------------------------------------------------------------------------
// ROPE

typedef struct rope_ctx {
    int64_t hd, nh, T, n_rot;
    int mode;
    double base, scale;
    const int32_t *pos;
    const double *w;
} rope_ctx;

// Rotation by sign*theta (sign -1: the backward), all in double.
static void rope_ref(const double *x, double *y, const rope_ctx *c, double sign) {
    int64_t half = c->n_rot / 2;
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t h = 0; h < c->nh; h++) {
            const double *xr = x + (t * c->nh + h) * c->hd;
            double *yr = y + (t * c->nh + h) * c->hd;
            for (int64_t k = 0; k < c->hd; k++) yr[k] = xr[k];
            for (int64_t i = 0; i < half; i++) {
                double th = (double)c->pos[t] * c->scale * pow(c->base, -2.0 * (double)i / (double)c->n_rot);
                double cs = cos(th), sn = sign * sin(th);
                int64_t ia = c->mode == 2 ? i : 2 * i, ib = c->mode == 2 ? i + half : 2 * i + 1;
                yr[ia] = xr[ia] * cs - xr[ib] * sn;
                yr[ib] = xr[ia] * sn + xr[ib] * cs;
            }
        }
}

static double rope_loss(const double *x, const void *p) {
    const rope_ctx *c = p;
    int64_t n = c->hd * c->nh * c->T;
    double *y = malloc(sizeof(double) * (size_t)n);
    rope_ref(x, y, c, 1.0);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += c->w[i] * y[i];
    free(y);
    return s;
}

static void test_rope_forward(void) {
    // head_dim 12, n_rot 8 (dims 8..11 pass through), 3 heads, 4 tokens at
    // positions 5, 6, 9, 300; both modes; freq_scale 0.5 and base 10000.
    const int64_t hd = 12, nh = 3, T = 4;
    const int32_t positions[4] = {5, 6, 9, 300};
    for (int mode = 0; mode <= 2; mode += 2) {
        rg_node x, pos, y;
        node_init(&x, "q", RG_TYPE_F32, hd, nh, T, 1);
        node_init(&pos, "pos", RG_TYPE_I32, T, 1, 1, 1);
        node_init(&y, "q_rope", RG_TYPE_F32, hd, nh, T, 1);
        memcpy(pos.t.data, positions, sizeof positions);
        fill_normal(&x, 31 + (uint64_t)mode, 1.0f);
        y.op = RG_OP_ROPE;
        y.src[0] = &x, y.src[1] = &pos;
        y.ip[0] = 8, y.ip[1] = mode;
        y.fp[0] = 10000.0f, y.fp[1] = 0.5f;
        rg_error err = {0};
        RG_REQUIRE(run_k(cpu_rope, &y, &err) == RG_OK, "%s", err.msg);
        rope_ctx c = {hd, nh, T, 8, mode, 10000.0, 0.5, positions, NULL};
        double *xd = to_double(&x), *ref = malloc(sizeof(double) * (size_t)(hd * nh * T));
        rope_ref(xd, ref, &c, 1.0);
        double rel = max_rel(&y, ref);
        RG_CHECK(rel < 1e-6, "rope mode %d: max error %.3g of max |y|", mode, rel);
        printf("    rope mode %d forward: max error / max |y| = %.3g\n", mode, rel);
        for (int64_t r = 0; r < nh * T; r++)
            for (int64_t k = 8; k < hd; k++)
                RG_CHECK(fbits(*at(&y, r * hd + k)) == fbits(*at(&x, r * hd + k)), "mode %d tail dim %lld changed",
                         mode, (long long)k);
        // The pair layout: in mode 0 dims 0 and 1 rotate together, in mode 2 dims 0 and 4.
        {
            rope_ctx c1 = c;
            c1.mode = 2 - mode;
            double *other = malloc(sizeof(double) * (size_t)(hd * nh * T));
            rope_ref(xd, other, &c1, 1.0);
            RG_CHECK(max_rel(&y, other) > 1e-3, "mode %d matches the other pairing", mode);
            free(other);
        }
        check_inplace(cpu_rope, &y);
        // ROPE_BACK of ROPE is the identity (to f32 rounding).
        rg_node back;
        node_init(&back, "q_rope_back", RG_TYPE_F32, hd, nh, T, 1);
        back.op = RG_OP_ROPE_BACK;
        back.src[0] = &y, back.src[1] = &pos;
        memcpy(back.ip, y.ip, sizeof y.ip);
        memcpy(back.fp, y.fp, sizeof y.fp);
        RG_REQUIRE(run_k(cpu_rope_back, &back, &err) == RG_OK, "%s", err.msg);
        double rt = max_rel(&back, xd);
        RG_CHECK(rt < 1e-6, "rope_back(rope(x)) != x: %.3g", rt);
        free(xd), free(ref);
        node_free(&x), node_free(&pos), node_free(&y), node_free(&back);
    }
}

static void test_rope_back_fd(void) {
    const int64_t hd = 10, nh = 2, T = 3;
    const int32_t positions[3] = {7, 8, 1000};
    for (int mode = 0; mode <= 2; mode += 2) {
        rg_node dy, pos, dx;
        node_init(&dy, "dq", RG_TYPE_F32, hd, nh, T, 1);
        node_init(&pos, "pos", RG_TYPE_I32, T, 1, 1, 1);
        node_init(&dx, "dq_back", RG_TYPE_F32, hd, nh, T, 1);
        memcpy(pos.t.data, positions, sizeof positions);
        fill_normal(&dy, 41 + (uint64_t)mode, 1.0f);
        dx.op = RG_OP_ROPE_BACK;
        dx.src[0] = &dy, dx.src[1] = &pos;
        dx.ip[0] = 6, dx.ip[1] = mode;
        dx.fp[0] = 500000.0f, dx.fp[1] = 1.0f;
        rg_error err = {0};
        RG_REQUIRE(run_k(cpu_rope_back, &dx, &err) == RG_OK, "%s", err.msg);
        double *w = to_double(&dy);
        double *x = malloc(sizeof(double) * (size_t)(hd * nh * T));
        for (int64_t i = 0; i < hd * nh * T; i++) x[i] = rg_rng_normal(43, 0, (uint64_t)i);
        rope_ctx c = {hd, nh, T, 6, mode, 500000.0, 1.0, positions, w};
        double *fd = fd_grad(rope_loss, x, hd * nh * T, &c);
        double rel = fd_rel(&dx, fd);
        RG_CHECK(rel < FD_TOL, "rope_back mode %d vs FD: %.3g", mode, rel);
        printf("    rope_back mode %d vs FD: relative L2 error %.3g\n", mode, rel);
        check_inplace(cpu_rope_back, &dx);
        free(w), free(x), free(fd);
        node_free(&dy), node_free(&pos), node_free(&dx);
    }
}

static void test_rope_errors(void) {
    rg_node x, pos, y;
    node_init(&x, "q", RG_TYPE_F32, 8, 2, 3, 1);
    node_init(&pos, "pos", RG_TYPE_I32, 3, 1, 1, 1);
    node_init(&y, "q_rope", RG_TYPE_F32, 8, 2, 3, 1);
    y.op = RG_OP_ROPE;
    y.src[0] = &x, y.src[1] = &pos;
    y.fp[0] = 10000.0f, y.fp[1] = 1.0f;
    rg_exec_ctx c = {NULL, NULL, 0, false, NULL, NULL, false, NULL};
    rg_error err = {0};
    y.ip[0] = 7;
    RG_CHECK(cpu_rope(&c, &y, &err) == RG_ERR_ARG && strstr(err.msg, "n_rot = 7"), "odd n_rot: %s", err.msg);
    y.ip[0] = 10;
    RG_CHECK(cpu_rope(&c, &y, &err) == RG_ERR_ARG && strstr(err.msg, "n_rot = 10"), "n_rot > head_dim: %s", err.msg);
    y.ip[0] = 8, y.ip[1] = 1;
    RG_CHECK(cpu_rope(&c, &y, &err) == RG_ERR_UNSUPPORTED && strstr(err.msg, "mode 1"), "mode 1: %s", err.msg);
    y.ip[1] = 0;
    pos.t.ne[0] = 2;
    RG_CHECK(cpu_rope(&c, &y, &err) == RG_ERR_ARG && strstr(err.msg, "positions"), "short pos: %s", err.msg);
    pos.t.ne[0] = 3;
    pos.t.type = RG_TYPE_F32;
    RG_CHECK(cpu_rope(&c, &y, &err) == RG_ERR_ARG && strstr(err.msg, "i32"), "f32 pos: %s", err.msg);
    pos.t.type = RG_TYPE_I32;
    y.ip[0] = 0;  // n_rot 0: a copy
    fill_normal(&x, 5, 1.0f);
    RG_CHECK(cpu_rope(&c, &y, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(memcmp(x.t.data, y.t.data, 8 * 2 * 3 * 4) == 0, "n_rot 0 must copy");
    node_free(&x), node_free(&pos), node_free(&y);
}

// ---------------------------------------------------------------------------
// SOFT_MAX

typedef struct sm_ctx {
    int64_t n_kv, T, H;
    const float *mask;  // [n_kv, T] or NULL
    int causal;
    double scale, softcap;
    const double *w;
} sm_ctx;

static void sm_ref(const double *a, double *y, const sm_ctx *c) {
    for (int64_t h = 0; h < c->H; h++)
        for (int64_t i = 0; i < c->T; i++) {
            const double *ar = a + (h * c->T + i) * c->n_kv;
            double *yr = y + (h * c->T + i) * c->n_kv;
            double mx = -INFINITY;
            for (int64_t j = 0; j < c->n_kv; j++) {
                double z = c->scale * ar[j];
                if (c->softcap > 0) z = c->softcap * tanh(z / c->softcap);
                if (c->mask) z += c->mask[i * c->n_kv + j];
                if (c->causal && j > i + (c->n_kv - c->T)) z = -INFINITY;
                yr[j] = z;
                mx = fmax(mx, z);
            }
            if (mx == -INFINITY) {
                for (int64_t j = 0; j < c->n_kv; j++) yr[j] = 0;
                continue;
            }
            double s = 0;
            for (int64_t j = 0; j < c->n_kv; j++) s += (yr[j] = exp(yr[j] - mx));
            for (int64_t j = 0; j < c->n_kv; j++) yr[j] /= s;
        }
}

static double sm_loss(const double *a, const void *p) {
    const sm_ctx *c = p;
    int64_t n = c->n_kv * c->T * c->H;
    double *y = malloc(sizeof(double) * (size_t)n);
    sm_ref(a, y, c);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += c->w[i] * y[i];
    free(y);
    return s;
}

// One soft_max configuration: forward vs double, NaN-free, then the backward vs FD.
static void sm_case(const char *label, int64_t n_kv, int64_t T, int64_t H, int causal, int with_mask, float scale,
                    float softcap, int mask_row_off) {
    rg_node a, mask, y;
    node_init(&a, "kq", RG_TYPE_F32, n_kv, T, H, 1);
    node_init(&y, "kq_soft_max", RG_TYPE_F32, n_kv, T, H, 1);
    fill_normal(&a, 51, 3.0f);
    if (with_mask) {
        node_init(&mask, "kq_mask", RG_TYPE_F32, n_kv, T + 2, 1, 1);  // padded to T + 2 rows
        for (int64_t i = 0; i < T + 2; i++)
            for (int64_t j = 0; j < n_kv; j++)
                *at(&mask, i * n_kv + j) = (j * 7 + i) % 5 == 0 ? -INFINITY : 0.25f * (float)(j % 3);
        if (mask_row_off >= 0)  // one query row masked entirely
            for (int64_t j = 0; j < n_kv; j++) *at(&mask, mask_row_off * n_kv + j) = -INFINITY;
    }
    y.op = RG_OP_SOFT_MAX;
    y.src[0] = &a, y.src[1] = with_mask ? &mask : NULL;
    y.ip[0] = causal;
    y.fp[0] = scale, y.fp[1] = softcap;
    rg_error err = {0};
    RG_REQUIRE(run_k(cpu_soft_max, &y, &err) == RG_OK, "%s: %s", label, err.msg);
    double *ad = to_double(&a), *ref = malloc(sizeof(double) * (size_t)nel(&y));
    sm_ctx c = {n_kv, T, H, with_mask ? (const float *)mask.t.data : NULL, causal, scale, softcap, NULL};
    sm_ref(ad, ref, &c);
    double worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < nel(&y); i++) {
        float v = *at(&y, i);
        if (!isfinite(v)) bad++;
        worst = fmax(worst, fabs(v - ref[i]) / (ref[i] + 1e-30));
        if (ref[i] == 0) RG_CHECK(v == 0.0f, "%s: masked element %lld is %g", label, (long long)i, (double)v);
    }
    RG_CHECK(bad == 0, "%s: %d non-finite outputs", label, bad);
    RG_CHECK(worst < 2e-5, "%s: worst relative error %.3g", label, worst);
    printf("    soft_max %s forward: worst relative error %.3g\n", label, worst);
    check_inplace(cpu_soft_max, &y);

    // SOFT_MAX_BACK with dy = w, y from the kernel, a given (read only with a softcap).
    rg_node dy, da;
    node_init(&dy, "dkq", RG_TYPE_F32, n_kv, T, H, 1);
    node_init(&da, "kq_soft_max_back", RG_TYPE_F32, n_kv, T, H, 1);
    fill_normal(&dy, 52, 1.0f);
    da.op = RG_OP_SOFT_MAX_BACK;
    da.src[0] = &dy, da.src[1] = &y, da.src[2] = softcap > 0 ? &a : NULL;
    da.fp[0] = scale, da.fp[1] = softcap;
    RG_REQUIRE(run_k(cpu_soft_max_back, &da, &err) == RG_OK, "%s back: %s", label, err.msg);
    double *w = to_double(&dy);
    c.w = w;
    double *fd = fd_grad(sm_loss, ad, nel(&a), &c);
    double rel = fd_rel(&da, fd);
    RG_CHECK(rel < FD_TOL, "%s: soft_max_back vs FD %.3g", label, rel);
    printf("    soft_max_back %s vs FD: relative L2 error %.3g\n", label, rel);
    for (int64_t i = 0; i < nel(&da); i++) {
        RG_CHECK(isfinite(*at(&da, i)), "%s: da[%lld] not finite", label, (long long)i);
        if (ref[i] == 0) RG_CHECK(*at(&da, i) == 0.0f, "%s: masked da[%lld] = %g", label, (long long)i,
                                  (double)*at(&da, i));
    }
    check_inplace(cpu_soft_max_back, &da);
    free(ad), free(ref), free(w), free(fd);
    node_free(&a), node_free(&y), node_free(&dy), node_free(&da);
    if (with_mask) node_free(&mask);
}

static void test_soft_max_causal_past(void) {
    // n_kv = 9 > T = 4: n_past = 5, query i sees keys 0..i+5.
    sm_case("causal n_kv>T", 9, 4, 3, 1, 0, 0.35f, 0.0f, -1);
}

static void test_soft_max_mask(void) {
    // An explicit mask (some -inf, some finite), no causal rule.
    sm_case("mask", 7, 5, 2, 0, 1, 0.5f, 0.0f, -1);
}

static void test_soft_max_softcap(void) {
    // Softcap 2 on scale*a with scores of size ~3: tanh saturates for part of the row.
    sm_case("softcap", 8, 3, 2, 1, 0, 1.0f, 2.0f, -1);
    sm_case("softcap+mask", 6, 4, 2, 1, 1, 0.7f, 5.0f, -1);
}

static void test_soft_max_fully_masked(void) {
    // Row 2 of the mask is all -inf; with n_kv = 3 < T = 5, causal rows 0 and 1
    // (i + n_kv - T < 0) see no key at all either.
    sm_case("masked row", 6, 4, 2, 0, 1, 1.0f, 0.0f, 2);
    sm_case("causal n_kv<T", 3, 5, 2, 1, 0, 1.0f, 0.0f, -1);
}

static void test_soft_max_errors(void) {
    rg_node a, mask, y;
    node_init(&a, "kq", RG_TYPE_F32, 5, 4, 2, 1);
    node_init(&mask, "kq_mask", RG_TYPE_F32, 5, 3, 1, 1);  // too few rows
    node_init(&y, "kq_soft_max", RG_TYPE_F32, 5, 4, 2, 1);
    y.op = RG_OP_SOFT_MAX;
    y.src[0] = &a, y.src[1] = &mask;
    y.fp[0] = 1.0f;
    rg_exec_ctx c = {NULL, NULL, 0, false, NULL, NULL, false, NULL};
    rg_error err = {0};
    RG_CHECK(cpu_soft_max(&c, &y, &err) == RG_ERR_ARG && strstr(err.msg, "mask [5, 3]"), "%s", err.msg);
    y.src[1] = NULL;
    a.t.nb[0] = 8;
    RG_CHECK(cpu_soft_max(&c, &y, &err) == RG_ERR_ARG && strstr(err.msg, "stride"), "%s", err.msg);
    a.t.nb[0] = 4;
    // SOFT_MAX_BACK with a softcap and no a.
    y.op = RG_OP_SOFT_MAX_BACK;
    y.src[0] = &a, y.src[1] = &a, y.src[2] = NULL;
    y.fp[1] = 30.0f;
    RG_CHECK(cpu_soft_max_back(&c, &y, &err) == RG_ERR_ARG && strstr(err.msg, "softcap"), "%s", err.msg);
    y.fp[1] = 0.0f;
    RG_CHECK(cpu_soft_max_back(&c, &y, &err) == RG_OK, "no softcap, no a: %s", err.msg);
    node_free(&a), node_free(&mask), node_free(&y);
}

// ---------------------------------------------------------------------------
// CROSS_ENTROPY_LOSS

typedef struct ce_ctx {
    int64_t V, T;
    const int32_t *labels;
    int32_t ignore;
    double inv_n;  // as the kernel uses it
    double w;      // dL for the FD loss
} ce_ctx;

static double ce_ref(const double *z, const ce_ctx *c) {
    double s = 0;
    for (int64_t t = 0; t < c->T; t++) {
        if (c->labels[t] == c->ignore) continue;
        const double *zr = z + t * c->V;
        double mx = -INFINITY, e = 0;
        for (int64_t v = 0; v < c->V; v++) mx = fmax(mx, zr[v]);
        for (int64_t v = 0; v < c->V; v++) e += exp(zr[v] - mx);
        s += mx + log(e) - zr[c->labels[t]];
    }
    return s * c->inv_n;
}

static double ce_loss(const double *z, const void *p) {
    const ce_ctx *c = p;
    return c->w * ce_ref(z, c);
}

// Logits [11, 6]: row 2 ignored, row 4 has logits around 1e4, labels in range.
#define CE_V 11
#define CE_T 6
static const int32_t ce_labels[CE_T] = {3, 0, -100, 10, 7, 5};

static void ce_logits(rg_node *z) {
    node_init(z, "logits", RG_TYPE_F32, CE_V, CE_T, 1, 1);
    fill_normal(z, 61, 2.0f);
    for (int v = 0; v < CE_V; v++) *at(z, 4 * CE_V + v) = 1e4f + 3.0f * (float)(v % 4) - (float)v;
}

static void test_cross_entropy_forward(void) {
    rg_node z, lab, L;
    ce_logits(&z);
    node_init(&lab, "labels", RG_TYPE_I32, CE_T, 1, 1, 1);
    node_init(&L, "loss", RG_TYPE_F32, 1, 1, 1, 1);
    memcpy(lab.t.data, ce_labels, sizeof ce_labels);
    L.op = RG_OP_CROSS_ENTROPY_LOSS;
    L.src[0] = &z, L.src[1] = &lab;
    L.ip[0] = -100;
    rg_error err = {0};
    // fp[0] = 0: N_valid = 5 counted here.
    RG_REQUIRE(run_k(cpu_cross_entropy_loss, &L, &err) == RG_OK, "%s", err.msg);
    double *zd = to_double(&z);
    ce_ctx c = {CE_V, CE_T, ce_labels, -100, 1.0 / 5.0, 1.0};
    double ref = ce_ref(zd, &c);
    float got = *(float *)L.t.data;
    RG_CHECK(isfinite(got) && fabs(got - ref) <= 1e-6 * fabs(ref), "counted: %.9g vs %.9g", (double)got, ref);
    printf("    cross_entropy counted: %.9g (double %.9g)\n", (double)got, ref);
    // fp[0] given (the step has 16 valid tokens over all micro-batches).
    L.fp[0] = 1.0f / 16.0f;
    RG_REQUIRE(run_k(cpu_cross_entropy_loss, &L, &err) == RG_OK, "%s", err.msg);
    c.inv_n = 1.0 / 16.0;
    double ref16 = ce_ref(zd, &c);
    got = *(float *)L.t.data;
    RG_CHECK(fabs(got - ref16) <= 1e-6 * fabs(ref16), "given: %.9g vs %.9g", (double)got, ref16);
    RG_CHECK(fabs(ref16 * 16.0 - ref * 5.0) < 1e-9 * fabs(ref * 5.0), "same sum");
    // The huge row alone is finite and correct (no overflow of exp).
    {
        int32_t only4[CE_T] = {-100, -100, -100, -100, 7, -100};
        memcpy(lab.t.data, only4, sizeof only4);
        L.fp[0] = 0.0f;
        RG_REQUIRE(run_k(cpu_cross_entropy_loss, &L, &err) == RG_OK, "%s", err.msg);
        ce_ctx c4 = {CE_V, CE_T, only4, -100, 1.0, 1.0};
        double r4 = ce_ref(zd, &c4);
        got = *(float *)L.t.data;
        RG_CHECK(isfinite(got) && fabs(got - r4) <= 1e-6 * fabs(r4), "huge row: %.9g vs %.9g", (double)got, r4);
    }
    // N_valid = 0, fp[0] = 0: loss 0.
    {
        int32_t none[CE_T] = {-100, -100, -100, -100, -100, -100};
        memcpy(lab.t.data, none, sizeof none);
        *(float *)L.t.data = 123.0f;
        RG_REQUIRE(run_k(cpu_cross_entropy_loss, &L, &err) == RG_OK, "%s", err.msg);
        RG_CHECK(*(float *)L.t.data == 0.0f, "N_valid = 0: loss %g", (double)*(float *)L.t.data);
    }
    // A different ignore index: -100 becomes an out-of-range label.
    {
        memcpy(lab.t.data, ce_labels, sizeof ce_labels);
        L.ip[0] = -1;
        RG_CHECK(run_k(cpu_cross_entropy_loss, &L, &err) == RG_ERR_ARG &&
                     strstr(err.msg, "label -100 at position 2 is outside 0..10"),
                 "%s", err.msg);
        L.ip[0] = -100;
    }
    // Out of range labels name their position.
    {
        int32_t badl[CE_T] = {3, 0, -100, 11, 7, 5};
        memcpy(lab.t.data, badl, sizeof badl);
        RG_CHECK(run_k(cpu_cross_entropy_loss, &L, &err) == RG_ERR_ARG &&
                     strstr(err.msg, "cross_entropy 'loss': label 11 at position 3 is outside 0..10"),
                 "%s", err.msg);
        badl[3] = 10, badl[5] = -7;
        memcpy(lab.t.data, badl, sizeof badl);
        RG_CHECK(run_k(cpu_cross_entropy_loss, &L, &err) == RG_ERR_ARG && strstr(err.msg, "label -7 at position 5"),
                 "%s", err.msg);
    }
    // Label count mismatch.
    lab.t.ne[0] = CE_T - 1;
    RG_CHECK(run_k(cpu_cross_entropy_loss, &L, &err) == RG_ERR_ARG && strstr(err.msg, "labels [5]"), "%s", err.msg);
    free(zd);
    node_free(&z), node_free(&lab), node_free(&L);
}

static void test_cross_entropy_back_fd(void) {
    rg_node z, lab, dl, dz;
    ce_logits(&z);
    node_init(&lab, "labels", RG_TYPE_I32, CE_T, 1, 1, 1);
    node_init(&dl, "dloss", RG_TYPE_F32, 1, 1, 1, 1);
    node_init(&dz, "dlogits", RG_TYPE_F32, CE_V, CE_T, 1, 1);
    memcpy(lab.t.data, ce_labels, sizeof ce_labels);
    *(float *)dl.t.data = 0.75f;
    dz.op = RG_OP_CROSS_ENTROPY_LOSS_BACK;
    dz.src[0] = &dl, dz.src[1] = &z, dz.src[2] = &lab;
    dz.ip[0] = -100;
    double *zd = to_double(&z);
    rg_error err = {0};
    for (int given = 0; given < 2; given++) {
        dz.fp[0] = given ? 1.0f / 8.0f : 0.0f;
        RG_REQUIRE(run_k(cpu_cross_entropy_loss_back, &dz, &err) == RG_OK, "%s", err.msg);
        ce_ctx c = {CE_V, CE_T, ce_labels, -100, given ? 1.0 / 8.0 : 1.0 / 5.0, 0.75};
        double *fd = fd_grad(ce_loss, zd, CE_V * CE_T, &c);
        double rel = fd_rel(&dz, fd);
        RG_CHECK(rel < FD_TOL, "cross_entropy_back (%s) vs FD: %.3g", given ? "given" : "counted", rel);
        printf("    cross_entropy_back (inv_n %s) vs FD: relative L2 error %.3g\n", given ? "given" : "counted", rel);
        for (int v = 0; v < CE_V; v++) RG_CHECK(*at(&dz, 2 * CE_V + v) == 0.0f, "ignored row must be 0");
        for (int t = 0; t < CE_T; t++) {  // each valid row sums to ~0
            double s = 0;
            for (int v = 0; v < CE_V; v++) s += *at(&dz, t * CE_V + v);
            RG_CHECK(fabs(s) < 1e-7, "row %d sums to %g", t, s);
        }
        free(fd);
    }
    // N_valid = 0: a zero gradient.
    int32_t none[CE_T] = {-100, -100, -100, -100, -100, -100};
    memcpy(lab.t.data, none, sizeof none);
    dz.fp[0] = 0.0f;
    memset(dz.t.data, 0xff, CE_V * CE_T * 4);
    RG_REQUIRE(run_k(cpu_cross_entropy_loss_back, &dz, &err) == RG_OK, "%s", err.msg);
    for (int i = 0; i < CE_V * CE_T; i++) RG_CHECK(fbits(*at(&dz, i)) == 0, "N_valid = 0: dZ[%d] nonzero", i);
    // Out of range in the backward too.
    int32_t badl[CE_T] = {3, 0, -100, 10, 7, 99};
    memcpy(lab.t.data, badl, sizeof badl);
    RG_CHECK(run_k(cpu_cross_entropy_loss_back, &dz, &err) == RG_ERR_ARG && strstr(err.msg, "label 99 at position 5"),
             "%s", err.msg);
    free(zd);
    node_free(&z), node_free(&lab), node_free(&dl), node_free(&dz);
}

// ---------------------------------------------------------------------------
// ADAMW and SGD

// The host scalars of §1.2, computed in double and cast once.
static void adamw_fp(float fp[8], double lr, double b1, double b2, double eps, double wd, int t, double clip) {
    fp[0] = (float)(lr / (1.0 - pow(b1, t)));
    fp[1] = (float)(1.0 - b1);
    fp[2] = (float)b2;
    fp[3] = (float)(1.0 - b2);
    fp[4] = (float)eps;
    fp[5] = (float)(1.0 - lr * wd);
    fp[6] = (float)sqrt(1.0 - pow(b2, t));
    fp[7] = (float)clip;
}

// The canonical f32 element update of §1.2, written out independently.
static void adamw_canon(float *th, float *m, float *v, const float *g, int64_t n, const float fp[8]) {
    for (int64_t i = 0; i < n; i++) {
        float gi = fp[7] == 1.0f ? g[i] : g[i] * fp[7];
        m[i] = fmaf(fp[1], gi - m[i], m[i]);
        v[i] = fmaf(fp[3], gi * gi, fp[2] * v[i]);
        float den = sqrtf(v[i]) / fp[6] + fp[4];
        float t = fp[5] == 1.0f ? th[i] : th[i] * fp[5];
        th[i] = fmaf(-fp[0], m[i] / den, t);
    }
}

// One AdamW step through the kernel with pool p; n elements in flat [n] tensors.
static rg_status adamw_step(rg_threadpool *p, float *th, float *g, float *m, float *v, int64_t n, const float fp[8],
                            float *out, rg_error *err) {
    rg_node nd[4], o;
    float *bufs[4] = {th, g, m, v};
    const char *names[4] = {"w", "w_grad", "w_m", "w_v"};
    for (int i = 0; i < 4; i++) {
        memset(&nd[i], 0, sizeof nd[i]);
        nd[i].t.type = RG_TYPE_F32;
        nd[i].t.ne[0] = n, nd[i].t.ne[1] = nd[i].t.ne[2] = nd[i].t.ne[3] = 1;
        nd[i].t.nb[0] = 4, nd[i].t.nb[1] = nd[i].t.nb[2] = nd[i].t.nb[3] = (size_t)n * 4;
        nd[i].t.data = bufs[i];
        snprintf(nd[i].t.name, sizeof nd[i].t.name, "%s", names[i]);
    }
    o = nd[0];
    snprintf(o.t.name, sizeof o.t.name, "w_adamw");
    o.t.data = out ? out : th;
    o.op = RG_OP_ADAMW;
    for (int i = 0; i < 4; i++) o.src[i] = &nd[i];
    memcpy(o.fp, fp, sizeof o.fp);
    rg_exec_ctx c = {p, NULL, 0, false, NULL, NULL, false, NULL};
    return cpu_adamw(&c, &o, err);
}

static void test_adamw_spec_example(void) {
    // training.md §1.6: θ0 = [1, -0.5], lr 0.01 constant, β (0.9, 0.999), ε 1e-8, λ 0.1.
    pools();
    const float gs[3][2] = {{0.1f, -0.2f}, {0.3f, 0.05f}, {-0.2f, 0.4f}};
    const uint32_t th_hex[3][2] = {{0x3f7d2f1b, 0xbefa9fbf}, {0x3f7a94d1, 0xbef7f83f}, {0x3f79aba6, 0xbef9c772}};
    const uint32_t m_hex[3][2] = {{0x3c23d70b, 0xbca3d70b}, {0x3d1fbe78, 0xbc54fdf5}, {0x3c776601, 0x3ce7d567}};
    const uint32_t v_hex[3][2] = {{0x3727c5ae, 0x3827c5ae}, {0x38d1b1ba, 0x38321716}, {0x3912af71, 0x3954400d}};
    // Clipped: at t=1 the coefficient clamps to 1, so θ is the unclipped value.
    const uint32_t clip_hex[3][2] = {{0x3f7d2f1b, 0xbefa9fbf}, {0x3f7a8561, 0xbef7c7bf}, {0x3f792fe1, 0xbef89913}};
    for (int clipped = 0; clipped < 2; clipped++)
        for (int pi = 0; pi < 2; pi++) {
            rg_threadpool *p = pi ? pool3 : pool1;
            float th[2] = {1.0f, -0.5f}, m[2] = {0, 0}, v[2] = {0, 0};
            for (int t = 1; t <= 3; t++) {
                float g[2] = {gs[t - 1][0], gs[t - 1][1]};
                double clip = 1.0;
                if (clipped) {  // §1.4: the norm in double, coef = min(0.25/(total + 1e-6), 1)
                    double total = sqrt((double)g[0] * g[0] + (double)g[1] * g[1]);
                    clip = fmin(0.25 / (total + 1e-6), 1.0);
                }
                float fp[8];
                adamw_fp(fp, 0.01, 0.9, 0.999, 1e-8, 0.1, t, clip);
                rg_error err = {0};
                RG_REQUIRE(adamw_step(p, th, g, m, v, 2, fp, NULL, &err) == RG_OK, "%s", err.msg);
                if (!clipped) {
                    for (int i = 0; i < 2; i++) {
                        RG_CHECK(fbits(th[i]) == th_hex[t - 1][i], "t=%d θ[%d] %08x, spec %08x", t, i,
                                 (unsigned)fbits(th[i]), (unsigned)th_hex[t - 1][i]);
                        RG_CHECK(fbits(m[i]) == m_hex[t - 1][i], "t=%d m[%d] %08x, spec %08x", t, i,
                                 (unsigned)fbits(m[i]), (unsigned)m_hex[t - 1][i]);
                        RG_CHECK(fbits(v[i]) == v_hex[t - 1][i], "t=%d v[%d] %08x, spec %08x", t, i,
                                 (unsigned)fbits(v[i]), (unsigned)v_hex[t - 1][i]);
                    }
                } else {
                    for (int i = 0; i < 2; i++)
                        RG_CHECK(fbits(th[i]) == clip_hex[t - 1][i], "clipped t=%d θ[%d] %08x, spec %08x", t, i,
                                 (unsigned)fbits(th[i]), (unsigned)clip_hex[t - 1][i]);
                }
            }
        }
}

// torch's AdamW in double (§1.2, decay first, then the bias-corrected step).
static void adamw_torch(double *th, double *m, double *v, const float *g, int64_t n, double lr, double b1, double b2,
                        double eps, double wd, int t, double clip) {
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (int64_t i = 0; i < n; i++) {
        double gi = (double)g[i] * clip;
        th[i] *= 1.0 - lr * wd;
        m[i] += (1.0 - b1) * (gi - m[i]);
        v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        th[i] -= (lr / bc1) * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

static void test_adamw_vs_torch(void) {
    // 1003 elements (AVX2 lanes plus a scalar tail; 3 threads split at odd
    // offsets), 3 steps; configurations: decay + no clip, no decay + clip 0.5.
    pools();
    const int64_t n = 1003;
    const double lr = 2e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8;
    for (int cfg = 0; cfg < 2; cfg++) {
        const double wd = cfg == 0 ? 0.1 : 0.0, clip = cfg == 0 ? 1.0 : 0.5;
        float *th1 = malloc(4 * n), *th3 = malloc(4 * n), *thc = malloc(4 * n), *g = malloc(4 * n);
        float *m1 = calloc(n, 4), *v1 = calloc(n, 4), *m3 = calloc(n, 4), *v3 = calloc(n, 4), *mc = calloc(n, 4),
              *vc = calloc(n, 4), *out = malloc(4 * n);
        double *thd = malloc(8 * n), *md = calloc(n, 8), *vd = calloc(n, 8);
        for (int64_t i = 0; i < n; i++) {
            float u = rg_rng_uniform(71, 0, (uint64_t)i);
            th1[i] = th3[i] = thc[i] = (i % 2 ? -1.0f : 1.0f) * (0.5f + u);  // |θ| >= 0.5: rtol is meaningful
            thd[i] = th1[i];
        }
        double worst_th = 0, worst_mv = 0;
        for (int t = 1; t <= 3; t++) {
            for (int64_t i = 0; i < n; i++)
                g[i] = (i == 5 ? 0.0f : 1e-2f * rg_rng_normal(72, (uint64_t)t, (uint64_t)i)) +
                       (i % 97 == 0 ? 3.0f : 0.0f);  // a zero gradient and a few large ones
            float fp[8];
            adamw_fp(fp, lr, b1, b2, eps, wd, t, clip);
            rg_error err = {0};
            RG_REQUIRE(adamw_step(pool1, th1, g, m1, v1, n, fp, NULL, &err) == RG_OK, "%s", err.msg);
            // 3 threads into a separate output (θ read from th3, written to out).
            RG_REQUIRE(adamw_step(pool3, th3, g, m3, v3, n, fp, out, &err) == RG_OK, "%s", err.msg);
            memcpy(th3, out, 4 * n);
            adamw_canon(thc, mc, vc, g, n, fp);
            adamw_torch(thd, md, vd, g, n, lr, b1, b2, eps, wd, t, clip);
            RG_CHECK(memcmp(th1, th3, 4 * n) == 0 && memcmp(m1, m3, 4 * n) == 0 && memcmp(v1, v3, 4 * n) == 0,
                     "cfg %d t=%d: 1 and 3 threads differ", cfg, t);
            int nbad = 0;
            for (int64_t i = 0; i < n; i++)
                if (fbits(th1[i]) != fbits(thc[i]) || fbits(m1[i]) != fbits(mc[i]) || fbits(v1[i]) != fbits(vc[i]))
                    nbad++;
            RG_CHECK(nbad == 0, "cfg %d t=%d: %d elements differ from the canonical f32 formula", cfg, t, nbad);
            double mscale = 0, vscale = 0;
            for (int64_t i = 0; i < n; i++) mscale = fmax(mscale, fabs(md[i])), vscale = fmax(vscale, vd[i]);
            for (int64_t i = 0; i < n; i++) {
                worst_th = fmax(worst_th, fabs(th1[i] - thd[i]) / fabs(thd[i]));
                worst_mv = fmax(worst_mv, fabs(m1[i] - md[i]) / fmax(fabs(md[i]), 1e-3 * mscale));
                worst_mv = fmax(worst_mv, fabs(v1[i] - vd[i]) / fmax(vd[i], 1e-3 * vscale));
            }
        }
        RG_CHECK(worst_th <= 2e-6, "cfg %d: θ worst relative gap to torch-double %.3g", cfg, worst_th);
        RG_CHECK(worst_mv <= 2e-6, "cfg %d: m/v worst relative gap %.3g", cfg, worst_mv);
        printf("    adamw cfg %d vs torch in double, 3 steps: θ rel %.3g, m/v rel %.3g\n", cfg, worst_th, worst_mv);
        free(th1), free(th3), free(thc), free(g), free(m1), free(v1), free(m3), free(v3), free(mc), free(vc);
        free(out), free(thd), free(md), free(vd);
    }
    // Shape mismatch and non-contiguous grad are refused.
    {
        float a[4] = {0}, b[4] = {0}, c[4] = {0}, d[4] = {0}, fp[8] = {0};
        rg_node nd[4], o;
        float *bufs[4] = {a, b, c, d};
        for (int i = 0; i < 4; i++) {
            memset(&nd[i], 0, sizeof nd[i]);
            nd[i].t.type = RG_TYPE_F32;
            nd[i].t.ne[0] = 4, nd[i].t.ne[1] = nd[i].t.ne[2] = nd[i].t.ne[3] = 1;
            nd[i].t.nb[0] = 4, nd[i].t.nb[1] = nd[i].t.nb[2] = nd[i].t.nb[3] = 16;
            nd[i].t.data = bufs[i];
        }
        o = nd[0];
        snprintf(o.t.name, sizeof o.t.name, "w_adamw");
        for (int i = 0; i < 4; i++) o.src[i] = &nd[i];
        memcpy(o.fp, fp, sizeof fp);
        rg_exec_ctx cx = {NULL, NULL, 0, false, NULL, NULL, false, NULL};
        rg_error err = {0};
        nd[3].t.ne[0] = 3;
        RG_CHECK(cpu_adamw(&cx, &o, &err) == RG_ERR_ARG && strstr(err.msg, "v [3]"), "%s", err.msg);
        nd[3].t.ne[0] = 4;
        nd[1].t.nb[0] = 8;
        RG_CHECK(cpu_adamw(&cx, &o, &err) == RG_ERR_ARG && strstr(err.msg, "grad must be contiguous"), "%s", err.msg);
    }
}

static rg_status sgd_step(rg_threadpool *p, float *th, float *g, int64_t n, float lr, float wd, float clip,
                          rg_error *err) {
    rg_node nd[2], o;
    float *bufs[2] = {th, g};
    for (int i = 0; i < 2; i++) {
        memset(&nd[i], 0, sizeof nd[i]);
        nd[i].t.type = RG_TYPE_F32;
        nd[i].t.ne[0] = n, nd[i].t.ne[1] = nd[i].t.ne[2] = nd[i].t.ne[3] = 1;
        nd[i].t.nb[0] = 4, nd[i].t.nb[1] = nd[i].t.nb[2] = nd[i].t.nb[3] = (size_t)n * 4;
        nd[i].t.data = bufs[i];
    }
    o = nd[0];
    snprintf(o.t.name, sizeof o.t.name, "w_sgd");
    o.op = RG_OP_SGD;
    o.src[0] = &nd[0], o.src[1] = &nd[1];
    o.fp[0] = lr, o.fp[1] = wd, o.fp[2] = clip;
    rg_exec_ctx c = {p, NULL, 0, false, NULL, NULL, false, NULL};
    return cpu_sgd(&c, &o, err);
}

static void test_sgd(void) {
    pools();
    // §1.6 plain SGD, lr 0.1: [0.99, -0.48] -> [0.96, -0.485] -> [0.98, -0.525].
    {
        const float gs[3][2] = {{0.1f, -0.2f}, {0.3f, 0.05f}, {-0.2f, 0.4f}};
        const double want[3][2] = {{0.99, -0.48}, {0.96, -0.485}, {0.98, -0.525}};
        for (int pi = 0; pi < 2; pi++) {
            float th[2] = {1.0f, -0.5f}, tc[2] = {1.0f, -0.5f};
            for (int t = 0; t < 3; t++) {
                float g[2] = {gs[t][0], gs[t][1]};
                rg_error err = {0};
                RG_REQUIRE(sgd_step(pi ? pool3 : pool1, th, g, 2, 0.1f, 0.0f, 1.0f, &err) == RG_OK, "%s", err.msg);
                for (int i = 0; i < 2; i++) {
                    tc[i] = fmaf(-0.1f, g[i], tc[i]);
                    RG_CHECK(fbits(th[i]) == fbits(tc[i]), "t=%d [%d]: not the canonical bits", t + 1, i);
                    RG_CHECK(fabs(th[i] - want[t][i]) <= 2e-6 * fabs(want[t][i]), "t=%d [%d]: %.9g vs %.9g", t + 1,
                             i, (double)th[i], want[t][i]);
                }
            }
        }
    }
    // 1003 elements, 3 steps, L2 decay 0.1 and clip 0.75 vs torch in double and the canonical bits.
    const int64_t n = 1003;
    float *th1 = malloc(4 * n), *th3 = malloc(4 * n), *tc = malloc(4 * n), *g = malloc(4 * n);
    double *td = malloc(8 * n);
    for (int64_t i = 0; i < n; i++) {
        th1[i] = th3[i] = tc[i] = (i % 3 ? -1.0f : 1.0f) * (0.5f + rg_rng_uniform(81, 0, (uint64_t)i));
        td[i] = th1[i];
    }
    const float lr = 0.05f, wd = 0.1f, clip = 0.75f;
    double worst = 0;
    for (int t = 1; t <= 3; t++) {
        for (int64_t i = 0; i < n; i++) g[i] = rg_rng_normal(82, (uint64_t)t, (uint64_t)i);
        rg_error err = {0};
        RG_REQUIRE(sgd_step(pool1, th1, g, n, lr, wd, clip, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(sgd_step(pool3, th3, g, n, lr, wd, clip, &err) == RG_OK, "%s", err.msg);
        RG_CHECK(memcmp(th1, th3, 4 * n) == 0, "t=%d: 1 and 3 threads differ", t);
        int nbad = 0;
        for (int64_t i = 0; i < n; i++) {
            float gi = g[i] * clip;
            gi = fmaf(wd, tc[i], gi);
            tc[i] = fmaf(-lr, gi, tc[i]);
            if (fbits(tc[i]) != fbits(th1[i])) nbad++;
            // torch: g = g*clip + λθ; θ -= lr*g (with the f32 hyperparameters as doubles)
            td[i] -= (double)lr * ((double)g[i] * clip + (double)wd * td[i]);
            worst = fmax(worst, fabs(th1[i] - td[i]) / fabs(td[i]));
        }
        RG_CHECK(nbad == 0, "t=%d: %d elements differ from the canonical f32 formula", t, nbad);
    }
    RG_CHECK(worst <= 2e-6, "sgd vs torch in double: %.3g", worst);
    printf("    sgd (λ 0.1, clip 0.75) vs torch in double, 3 steps: rel %.3g\n", worst);
    free(th1), free(th3), free(tc), free(g), free(td);
}

static const rg_test_case cases[] = {
    RG_TEST(test_rms_norm_forward),
    RG_TEST(test_rms_norm_back_fd),
    RG_TEST(test_rope_forward),
    RG_TEST(test_rope_back_fd),
    RG_TEST(test_rope_errors),
    RG_TEST(test_soft_max_causal_past),
    RG_TEST(test_soft_max_mask),
    RG_TEST(test_soft_max_softcap),
    RG_TEST(test_soft_max_fully_masked),
    RG_TEST(test_soft_max_errors),
    RG_TEST(test_cross_entropy_forward),
    RG_TEST(test_cross_entropy_back_fd),
    RG_TEST(test_adamw_spec_example),
    RG_TEST(test_adamw_vs_torch),
    RG_TEST(test_sgd),
    {0},
};

int main(int argc, char **argv) {
    int rc = rg_test_run(argc, argv, cases);
    rg_threadpool_free(pool1);
    rg_threadpool_free(pool3);
    return rc;
}
