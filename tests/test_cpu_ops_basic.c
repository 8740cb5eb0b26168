// test_cpu_ops_basic.c - the elementwise, reduction and copy kernels of the CPU
// backend, called directly on hand-built nodes.
//
// Every kernel runs on a 1-thread and on a 3-thread pool and must give the same
// bits; results are compared with double-precision references computed here.
// Sources include broadcast operands, transposed (strided) views and F16/BF16/
// quantized tables; sizes are large enough that the kernels really split work.
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "cpu/cpu_ops.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

typedef rg_status (*kernel_fn)(rg_exec_ctx *ctx, rg_node *n, rg_error *err);

static rg_threadpool *pool1, *pool3;
static rg_arena ar;  // nodes and tensors of the current case
static int node_counter;

static int setup(void) {
    rg_error err = {0};
    if (!pool1 && rg_threadpool_create(&pool1, 1, &err) != RG_OK) return 0;
    if (!pool3 && rg_threadpool_create(&pool3, 3, &err) != RG_OK) return 0;
    rg_arena_free(&ar);
    rg_arena_init(&ar, 1 << 20);
    return 1;
}

// A node holding a new contiguous tensor (zeroed), named "t<k>".
static rg_node *node_new(uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    rg_error err = {0};
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    rg_tensor *t = rg_tensor_new(&ar, type, 4, ne, &err);
    rg_node *n = rg_arena_alloc(&ar, sizeof *n, 16);
    if (!t || !n) {
        fprintf(stderr, "node_new: %s\n", err.msg);
        abort();
    }
    n->t = *t;
    snprintf(n->t.name, sizeof n->t.name, "t%d", node_counter++);
    return n;
}

// A logical [ne0, ne1, ne2, ne3] tensor stored transposed: memory holds
// [ne1, ne0, ...] and the view swaps ne and nb of dims 0 and 1.
static rg_node *node_transposed(uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    rg_node *n = node_new(type, ne1, ne0, ne2, ne3);
    int64_t e = n->t.ne[0];
    n->t.ne[0] = n->t.ne[1], n->t.ne[1] = e;
    size_t b = n->t.nb[0];
    n->t.nb[0] = n->t.nb[1], n->t.nb[1] = b;
    return n;
}

static rg_node *op_node(rg_op op, uint32_t type, const int64_t ne[4], rg_node *s0, rg_node *s1) {
    rg_node *n = node_new(type, ne[0], ne[1], ne[2], ne[3]);
    n->op = op;
    n->src[0] = s0;
    n->src[1] = s1;
    return n;
}

static int64_t nel(const rg_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

// Element (i0..i3) of a plain-typed tensor as double, through its own strides.
static double get(const rg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const char *p = rg_tensor_at(t, i0, i1, i2, i3);
    uint16_t h;
    float f;
    int32_t i;
    switch (t->type) {
    case RG_TYPE_F16: memcpy(&h, p, 2); return rg_fp16_to_fp32(h);
    case RG_TYPE_BF16: memcpy(&h, p, 2); return rg_bf16_to_fp32(h);
    case RG_TYPE_I32: memcpy(&i, p, 4); return i;
    default: memcpy(&f, p, 4); return f;
    }
}

static void set(rg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, float v) {
    char *p = rg_tensor_at(t, i0, i1, i2, i3);
    uint16_t h;
    switch (t->type) {
    case RG_TYPE_F16: h = rg_fp32_to_fp16(v), memcpy(p, &h, 2); break;
    case RG_TYPE_BF16: h = rg_fp32_to_bf16(v), memcpy(p, &h, 2); break;
    default: memcpy(p, &v, 4); break;
    }
}

// Linear index -> coordinates of shape ne.
static void coords(const int64_t ne[4], int64_t k, int64_t i[4]) {
    for (int d = 0; d < 4; d++) i[d] = k % ne[d], k /= ne[d];
}

static float out_f(const rg_node *n, int64_t k) { return ((const float *)n->t.data)[k]; }

// Fills a plain tensor with scale * normal + shift, element k of the logical
// order drawn from (seed, k).
static void fill_random(rg_node *n, uint64_t seed, float scale, float shift) {
    int64_t i[4];
    for (int64_t k = 0; k < nel(&n->t); k++) {
        coords(n->t.ne, k, i);
        set(&n->t, i[0], i[1], i[2], i[3], scale * rg_rng_normal(seed, 0, (uint64_t)k) + shift);
    }
}

// Runs the kernel on a 1-thread and on a 3-thread pool (poisoning the output
// before each) and checks that both succeed with the same bits. The 3-thread
// result stays in n.
static int run2(kernel_fn k, rg_node *n, const char *what) {
    size_t bytes = rg_tensor_span(&n->t);
    rg_exec_ctx c1 = {pool1, NULL, 0, false, NULL, NULL, false, NULL}, c3 = {pool3, NULL, 0, false, NULL, NULL, false, NULL};
    rg_error err = {0};
    memset(n->t.data, 0xA5, bytes);
    rg_status st = k(&c1, n, &err);
    RG_CHECK(st == RG_OK, "%s: 1 thread: %s", what, err.msg);
    if (st) return 0;
    unsigned char *copy = malloc(bytes ? bytes : 1);
    memcpy(copy, n->t.data, bytes);
    memset(n->t.data, 0x5A, bytes);
    st = k(&c3, n, &err);
    RG_CHECK(st == RG_OK, "%s: 3 threads: %s", what, err.msg);
    int same = st == RG_OK && memcmp(copy, n->t.data, bytes) == 0;
    RG_CHECK(same, "%s: 1 and 3 threads give different bits", what);
    free(copy);
    return same;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// |got - ref| within tol ulps of f32 at ref's magnitude (ref computed in high precision).
static int near_ulps(float got, long double ref, double tol) {
    double r = (double)ref;
    double ulp = ldexp(1.0, (r == 0 ? -149 : ilogb(r) - 23 < -149 ? -149 : ilogb(r) - 23));
    return fabsl((long double)got - ref) <= tol * ulp;
}

// ---------------------------------------------------------------------------
// FILL

static void test_fill(void) {
    RG_REQUIRE(setup(), "pools");
    const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16};
    const float v = -1.2345678f;
    for (int t = 0; t < 3; t++) {
        rg_node *n = node_new(types[t], 1001, 70, 1, 1);
        n->op = RG_OP_FILL;
        n->fp[0] = v;
        if (!run2(cpu_fill, n, "fill")) continue;
        int bad = 0;
        for (int64_t k = 0; k < nel(&n->t); k++) {
            if (types[t] == RG_TYPE_F32) bad += bits_of(out_f(n, k)) != bits_of(v);
            else bad += ((uint16_t *)n->t.data)[k] != (types[t] == RG_TYPE_F16 ? rg_fp32_to_fp16(v) : rg_fp32_to_bf16(v));
        }
        RG_CHECK(bad == 0, "fill %s: %d wrong elements", rg_type_get(types[t])->name, bad);
    }
}

// ---------------------------------------------------------------------------
// ADD, SUB, MUL with broadcasting and strided operands

static double ref_binary(rg_op op, double a, double b) {
    return op == RG_OP_ADD ? a + b : op == RG_OP_SUB ? a - b : a * b;
}

static void check_binary(rg_op op, kernel_fn k, const int64_t ane[4], const int64_t bne[4], int a_tr, int b_tr) {
    rg_node *a = a_tr ? node_transposed(RG_TYPE_F32, ane[0], ane[1], ane[2], ane[3])
                      : node_new(RG_TYPE_F32, ane[0], ane[1], ane[2], ane[3]);
    rg_node *b = b_tr ? node_transposed(RG_TYPE_F32, bne[0], bne[1], bne[2], bne[3])
                      : node_new(RG_TYPE_F32, bne[0], bne[1], bne[2], bne[3]);
    fill_random(a, 1, 1.0f, 0.0f);
    fill_random(b, 2, 1.0f, 0.5f);
    rg_node *n = op_node(op, RG_TYPE_F32, ane, a, b);
    char what[128];
    snprintf(what, sizeof what, "op %d a [%lld,%lld,%lld,%lld]%s b [%lld,%lld,%lld,%lld]%s", (int)op,
             (long long)ane[0], (long long)ane[1], (long long)ane[2], (long long)ane[3], a_tr ? "T" : "",
             (long long)bne[0], (long long)bne[1], (long long)bne[2], (long long)bne[3], b_tr ? "T" : "");
    if (!run2(k, n, what)) return;
    int bad = 0;
    int64_t i[4];
    for (int64_t e = 0; e < nel(&n->t); e++) {
        coords(ane, e, i);
        double r = ref_binary(op, get(&a->t, i[0], i[1], i[2], i[3]),
                              get(&b->t, i[0] % bne[0], i[1] % bne[1], i[2] % bne[2], i[3] % bne[3]));
        // Both operands are floats of similar size: the double result is exact,
        // so the kernel must give its correctly rounded f32 value.
        if (bits_of(out_f(n, e)) != bits_of((float)r) && bad++ < 3)
            RG_CHECK(0, "%s: element %lld: %.9g, expected %.9g", what, (long long)e, out_f(n, e), r);
    }
    RG_CHECK(bad == 0, "%s: %d wrong elements", what, bad);
}

static void test_binary_broadcast(void) {
    RG_REQUIRE(setup(), "pools");
    const int64_t ane[4] = {300, 20, 4, 3};
    const int64_t bnes[][4] = {
        {300, 20, 4, 3}, {300, 1, 1, 1}, {1, 20, 1, 3}, {100, 10, 2, 1}, {1, 1, 1, 1}, {150, 20, 4, 3}, {3, 5, 4, 1},
    };
    const struct { rg_op op; kernel_fn k; } ops[] = {{RG_OP_ADD, cpu_add}, {RG_OP_SUB, cpu_sub}, {RG_OP_MUL, cpu_mul}};
    for (int o = 0; o < 3; o++)
        for (size_t b = 0; b < sizeof bnes / sizeof bnes[0]; b++)
            for (int tr = 0; tr < 4; tr++) check_binary(ops[o].op, ops[o].k, ane, bnes[b], tr & 1, tr >> 1);
    // A small case that stays on one thread, and a 1-D one longer than a chunk.
    const int64_t small[4] = {7, 3, 1, 1}, bsmall[4] = {7, 1, 1, 1}, big1[4] = {100003, 1, 1, 1}, b1[4] = {1, 1, 1, 1};
    check_binary(RG_OP_ADD, cpu_add, small, bsmall, 0, 0);
    check_binary(RG_OP_MUL, cpu_mul, big1, big1, 0, 0);
    check_binary(RG_OP_SUB, cpu_sub, big1, b1, 0, 0);
}

// The executor may hand a's bytes to the output: out->t.data == a->t.data.
static void test_binary_inplace(void) {
    RG_REQUIRE(setup(), "pools");
    const int64_t ne[4] = {513, 130, 1, 1};
    const struct { rg_op op; kernel_fn k; } ops[] = {
        {RG_OP_ADD, cpu_add}, {RG_OP_SUB, cpu_sub}, {RG_OP_MUL, cpu_mul}, {RG_OP_SCALE, cpu_scale}, {RG_OP_SILU, cpu_silu}};
    for (int o = 0; o < 5; o++)
        for (int bshape = 0; bshape < 2; bshape++) {
            rg_node *a = node_new(RG_TYPE_F32, ne[0], ne[1], 1, 1);
            rg_node *b = bshape ? node_new(RG_TYPE_F32, ne[0], 1, 1, 1) : node_new(RG_TYPE_F32, ne[0], ne[1], 1, 1);
            fill_random(a, 3, 1.0f, 0.0f);
            fill_random(b, 4, 1.0f, 0.0f);
            int unary = ops[o].op == RG_OP_SCALE || ops[o].op == RG_OP_SILU;
            rg_node *ref = op_node(ops[o].op, RG_TYPE_F32, ne, a, unary ? NULL : b);
            rg_node *inp = op_node(ops[o].op, RG_TYPE_F32, ne, a, unary ? NULL : b);
            ref->fp[0] = inp->fp[0] = 0.75f;
            rg_error err = {0};
            rg_exec_ctx c3 = {pool3, NULL, 0, false, NULL, NULL, false, NULL};
            RG_CHECK(ops[o].k(&c3, ref, &err) == RG_OK, "%s", err.msg);
            inp->t.data = a->t.data;  // in place
            RG_CHECK(ops[o].k(&c3, inp, &err) == RG_OK, "%s", err.msg);
            RG_CHECK(memcmp(ref->t.data, inp->t.data, (size_t)nel(&ref->t) * 4) == 0,
                     "op %d (b %d): in place differs from out of place", (int)ops[o].op, bshape);
        }
}

// ---------------------------------------------------------------------------
// SCALE

static void test_scale(void) {
    RG_REQUIRE(setup(), "pools");
    for (int tr = 0; tr < 2; tr++) {
        const int64_t ne[4] = {250, 300, 1, 1};
        rg_node *a = tr ? node_transposed(RG_TYPE_F32, 250, 300, 1, 1) : node_new(RG_TYPE_F32, 250, 300, 1, 1);
        fill_random(a, 5, 2.0f, 0.0f);
        rg_node *n = op_node(RG_OP_SCALE, RG_TYPE_F32, ne, a, NULL);
        n->fp[0] = -0.3f;
        if (!run2(cpu_scale, n, "scale")) continue;
        int bad = 0;
        for (int64_t e = 0; e < nel(&n->t); e++)
            bad += bits_of(out_f(n, e)) != bits_of((float)(get(&a->t, e % 250, e / 250, 0, 0) * (double)-0.3f));
        RG_CHECK(bad == 0, "scale (transposed %d): %d wrong", tr, bad);
    }
}

// ---------------------------------------------------------------------------
// REPEAT and REPEAT_BACK

static void test_repeat_and_back(void) {
    RG_REQUIRE(setup(), "pools");
    // repeat: a [7, 3, 1, 2] tiled to [700, 6, 4, 2] (100 x 2 x 4 x 1 tiles).
    const int64_t ane[4] = {7, 3, 1, 2}, lne[4] = {700, 6, 4, 2};
    for (int tr = 0; tr < 2; tr++) {
        rg_node *a = tr ? node_transposed(RG_TYPE_F32, 7, 3, 1, 2) : node_new(RG_TYPE_F32, 7, 3, 1, 2);
        fill_random(a, 6, 1.0f, 0.0f);
        rg_node *like = node_new(RG_TYPE_F32, lne[0], lne[1], lne[2], lne[3]);
        rg_node *r = op_node(RG_OP_REPEAT, RG_TYPE_F32, lne, a, like);
        if (!run2(cpu_repeat, r, "repeat")) continue;
        int bad = 0;
        int64_t i[4];
        for (int64_t e = 0; e < nel(&r->t); e++) {
            coords(lne, e, i);
            bad += out_f(r, e) != (float)get(&a->t, i[0] % 7, i[1] % 3, 0, i[3] % 2);
        }
        RG_CHECK(bad == 0, "repeat: %d wrong", bad);
        // repeat_back(repeat(a)) = a * 800 (the number of tiles), exactly.
        rg_node *rb = op_node(RG_OP_REPEAT_BACK, RG_TYPE_F32, ane, r, a);
        if (!run2(cpu_repeat_back, rb, "repeat_back(repeat)")) continue;
        bad = 0;
        for (int64_t e = 0; e < nel(&rb->t); e++) {
            coords(ane, e, i);
            bad += out_f(rb, e) != (float)(800.0 * get(&a->t, i[0], i[1], i[2], i[3]));
        }
        RG_CHECK(bad == 0, "repeat_back(repeat): %d wrong", bad);
    }
    // repeat_back of random data, against double sums in increasing linear index
    // of the source (the kernel's documented order): the same bits.
    const int64_t big[4] = {512, 96, 2, 1};
    const int64_t likes[][4] = {{128, 1, 2, 1}, {1, 96, 1, 1}, {512, 1, 1, 1}, {1, 1, 1, 1}, {64, 32, 2, 1}, {512, 96, 2, 1}};
    for (int tr = 0; tr < 2; tr++) {
        rg_node *a = tr ? node_transposed(RG_TYPE_F32, 512, 96, 2, 1) : node_new(RG_TYPE_F32, 512, 96, 2, 1);
        fill_random(a, 7, 1.0f, 0.25f);
        for (size_t l = 0; l < sizeof likes / sizeof likes[0]; l++) {
            const int64_t *L = likes[l];
            rg_node *like = node_new(RG_TYPE_F32, L[0], L[1], L[2], L[3]);
            rg_node *rb = op_node(RG_OP_REPEAT_BACK, RG_TYPE_F32, L, a, like);
            if (!run2(cpu_repeat_back, rb, "repeat_back")) continue;
            int64_t m = nel(&rb->t);
            double *ref = calloc((size_t)m, sizeof(double));
            int64_t i[4];
            for (int64_t e = 0; e < nel(&a->t); e++) {
                coords(big, e, i);
                int64_t j = (i[0] % L[0]) + L[0] * ((i[1] % L[1]) + L[1] * ((i[2] % L[2]) + L[2] * (i[3] % L[3])));
                ref[j] += get(&a->t, i[0], i[1], i[2], i[3]);
            }
            int bad = 0;
            for (int64_t j = 0; j < m; j++) bad += bits_of(out_f(rb, j)) != bits_of((float)ref[j]);
            RG_CHECK(bad == 0, "repeat_back to [%lld,%lld,%lld,%lld] (transposed %d): %d wrong", (long long)L[0],
                     (long long)L[1], (long long)L[2], (long long)L[3], tr, bad);
            free(ref);
        }
    }
}

// ---------------------------------------------------------------------------
// SILU, SILU_BACK, SWIGLU

static double sig(double a) { return 1.0 / (1.0 + exp(-a)); }

static void test_silu_family(void) {
    RG_REQUIRE(setup(), "pools");
    const int64_t ne[4] = {1003, 70, 1, 1};  // 1003: every row has a tail after the 8-wide part
    static const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 87.0f, -87.0f, 87.3f, -87.3f, 87.4f, -87.4f,
                                     100.0f, -100.0f, 20.0f, -20.0f, 0.5f, -0.5f, -1.2785f, 3e38f, -3e38f, 1e-40f};
    const size_t nspec = sizeof specials / sizeof specials[0];
    for (int tr = 0; tr < 2; tr++) {
        rg_node *x = tr ? node_transposed(RG_TYPE_F32, ne[0], ne[1], 1, 1) : node_new(RG_TYPE_F32, ne[0], ne[1], 1, 1);
        rg_node *y = tr ? node_transposed(RG_TYPE_F32, ne[0], ne[1], 1, 1) : node_new(RG_TYPE_F32, ne[0], ne[1], 1, 1);
        fill_random(x, 8, 6.0f, 0.0f);
        fill_random(y, 9, 1.0f, 0.0f);
        for (size_t s = 0; s < nspec; s++) {
            set(&x->t, (int64_t)s * 37 % ne[0], (int64_t)s, 0, 0, specials[s]);
            set(&x->t, ne[0] - 1 - (int64_t)s, 3, 0, 0, specials[s]);  // in the scalar tail too
        }
        rg_node *silu = op_node(RG_OP_SILU, RG_TYPE_F32, ne, x, NULL);
        rg_node *back = op_node(RG_OP_SILU_BACK, RG_TYPE_F32, ne, y, x);
        rg_node *glu = op_node(RG_OP_SWIGLU, RG_TYPE_F32, ne, x, y);
        if (!run2(cpu_silu, silu, "silu") || !run2(cpu_silu_back, back, "silu_back") ||
            !run2(cpu_swiglu, glu, "swiglu"))
            continue;
        int bad = 0;
        for (int64_t e = 0; e < nel(&silu->t); e++) {
            double a = get(&x->t, e % ne[0], e / ne[0], 0, 0), d = get(&y->t, e % ne[0], e / ne[0], 0, 0);
            double s = sig(a), sp = s * (1 + a * (1 - s));
            // Relative to the magnitude of the factors (silu'(a) cancels near
            // a = -1.28), plus an absolute floor for the underflowing tail.
            double r1 = a * s, r2 = d * sp, r3 = a * s * d;
            // Below a = -87.3 the kernels flush e^a to 0: |silu| < 1.1e-36 there.
            double t1 = 4e-7 * fabs(r1) + 1.1e-36;
            double t2 = 4e-7 * fabs(d) * (s + fabs(a) * s * (1 - s)) + 1.1e-36;
            double t3 = 4e-7 * fabs(r3) + 1.1e-36 * fabs(d);
            if (fabs(r3) > FLT_MAX) t3 = INFINITY;  // overflows f32: inf is right
            if (!(fabs(out_f(silu, e) - r1) <= t1) && bad++ < 3) RG_CHECK(0, "silu(%.9g) = %.9g, expected %.9g", a, out_f(silu, e), r1);
            if (!(fabs(out_f(back, e) - r2) <= t2) && bad++ < 3)
                RG_CHECK(0, "silu_back(%.9g, %.9g) = %.9g, expected %.9g", d, a, out_f(back, e), r2);
            if (!(fabs(out_f(glu, e) - r3) <= t3) && bad++ < 3)
                RG_CHECK(0, "swiglu(%.9g, %.9g) = %.9g, expected %.9g", a, d, out_f(glu, e), r3);
        }
        RG_CHECK(bad == 0, "silu family (transposed %d): %d wrong", tr, bad);
        // Contiguous sources take the 8-wide path, transposed ones the scalar
        // one: the same values must give the same bits either way.
        static unsigned char *first[3];
        static size_t bytes;
        if (tr == 0) {
            bytes = (size_t)nel(&silu->t) * 4;
            rg_node *outs[3] = {silu, back, glu};
            for (int o = 0; o < 3; o++) {
                free(first[o]);
                first[o] = malloc(bytes);
                memcpy(first[o], outs[o]->t.data, bytes);
            }
        } else {
            RG_CHECK(memcmp(first[0], silu->t.data, bytes) == 0, "silu: strided and contiguous sources differ");
            RG_CHECK(memcmp(first[1], back->t.data, bytes) == 0, "silu_back: strided and contiguous sources differ");
            RG_CHECK(memcmp(first[2], glu->t.data, bytes) == 0, "swiglu: strided and contiguous sources differ");
            for (int o = 0; o < 3; o++) free(first[o]), first[o] = NULL;
        }
    }
    // NaN in, NaN out.
    rg_node *x = node_new(RG_TYPE_F32, 16, 1, 1, 1);
    for (int i = 0; i < 16; i++) set(&x->t, i, 0, 0, 0, i % 3 ? NAN : 1.0f);
    const int64_t ne16[4] = {16, 1, 1, 1};
    rg_node *silu = op_node(RG_OP_SILU, RG_TYPE_F32, ne16, x, NULL);
    if (run2(cpu_silu, silu, "silu nan"))
        for (int i = 0; i < 16; i++) RG_CHECK(isnan(out_f(silu, i)) == (i % 3 != 0), "silu nan lane %d", i);
}

// ---------------------------------------------------------------------------
// SUM, MEAN, SUM_ROWS

static void test_sum_mean_1e6(void) {
    RG_REQUIRE(setup(), "pools");
    const int64_t ne[4] = {1, 1, 1, 1};
    for (int tr = 0; tr < 2; tr++) {
        rg_node *a = tr ? node_transposed(RG_TYPE_F32, 1000, 1000, 1, 1) : node_new(RG_TYPE_F32, 1000, 1000, 1, 1);
        fill_random(a, 10, 1.0f, 0.01f);
        long double ref = 0;
        for (int64_t e = 0; e < 1000000; e++) ref += get(&a->t, e % 1000, e / 1000, 0, 0);
        rg_node *s = op_node(RG_OP_SUM, RG_TYPE_F32, ne, a, NULL);
        rg_node *m = op_node(RG_OP_MEAN, RG_TYPE_F32, ne, a, NULL);
        if (!run2(cpu_sum, s, "sum") || !run2(cpu_mean, m, "mean")) continue;
        // Accurate to double: the f32 result is the correctly rounded sum
        // (within half an ulp, plus slack for the double accumulation).
        RG_CHECK(near_ulps(out_f(s, 0), ref, 0.5001), "sum %.9g vs %.12Lg (transposed %d)", out_f(s, 0), ref, tr);
        RG_CHECK(near_ulps(out_f(m, 0), ref / 1e6L, 0.5001), "mean %.9g vs %.12Lg", out_f(m, 0), ref / 1e6L);
    }
    // F16 and BF16 sources, an odd count that ends inside a chunk.
    const uint32_t halves[] = {RG_TYPE_F16, RG_TYPE_BF16};
    for (int h = 0; h < 2; h++) {
        rg_node *a = node_new(halves[h], 333, 301, 1, 1);
        fill_random(a, 11, 3.0f, 0.5f);
        long double ref = 0;
        for (int64_t e = 0; e < 333 * 301; e++) ref += get(&a->t, e % 333, e / 333, 0, 0);
        rg_node *s = op_node(RG_OP_SUM, RG_TYPE_F32, ne, a, NULL);
        if (run2(cpu_sum, s, "sum half"))
            RG_CHECK(near_ulps(out_f(s, 0), ref, 0.5001), "sum %s %.9g vs %.12Lg", rg_type_get(halves[h])->name,
                     out_f(s, 0), ref);
    }
}

static void test_sum_rows(void) {
    RG_REQUIRE(setup(), "pools");
    const int64_t shapes[][4] = {{777, 50, 3, 1}, {500, 300, 1, 1}, {1, 40000, 1, 1}, {100003, 1, 1, 1}};
    for (size_t sh = 0; sh < 4; sh++)
        for (int tr = 0; tr < 2; tr++) {
            const int64_t *S = shapes[sh];
            rg_node *a = tr ? node_transposed(RG_TYPE_F32, S[0], S[1], S[2], S[3]) : node_new(RG_TYPE_F32, S[0], S[1], S[2], S[3]);
            fill_random(a, 12, 1.0f, 0.1f);
            const int64_t one[4] = {1, S[1], S[2], S[3]};
            rg_node *n = op_node(RG_OP_SUM_ROWS, RG_TYPE_F32, one, a, NULL);
            if (!run2(cpu_sum_rows, n, "sum_rows")) continue;
            int bad = 0;
            for (int64_t r = 0; r < S[1] * S[2] * S[3]; r++) {
                long double ref = 0;
                for (int64_t i0 = 0; i0 < S[0]; i0++) ref += get(&a->t, i0, r % S[1], (r / S[1]) % S[2], r / (S[1] * S[2]));
                bad += !near_ulps(out_f(n, r), ref, 0.5001);
            }
            RG_CHECK(bad == 0, "sum_rows [%lld,%lld,%lld] (transposed %d): %d rows off", (long long)S[0],
                     (long long)S[1], (long long)S[2], tr, bad);
        }
}

// ---------------------------------------------------------------------------
// CONT, CPY

static void test_cont(void) {
    RG_REQUIRE(setup(), "pools");
    const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16};
    const int64_t ne[4] = {301, 250, 2, 1};
    for (int t = 0; t < 3; t++) {
        rg_node *a = node_transposed(types[t], ne[0], ne[1], ne[2], ne[3]);
        fill_random(a, 13, 1.0f, 0.0f);
        rg_node *n = op_node(RG_OP_CONT, types[t], ne, a, NULL);
        if (!run2(cpu_cont, n, "cont")) continue;
        RG_CHECK(n->t.nb[0] < n->t.nb[1], "output contiguous");
        int bad = 0;
        int64_t i[4];
        for (int64_t e = 0; e < nel(&n->t); e++) {
            coords(ne, e, i);
            bad += memcmp(rg_tensor_at(&n->t, i[0], i[1], i[2], i[3]), rg_tensor_at(&a->t, i[0], i[1], i[2], i[3]),
                          n->t.nb[0]) != 0;
        }
        RG_CHECK(bad == 0, "cont %s: %d wrong", rg_type_get(types[t])->name, bad);
    }
    // I32, a permuted view (dims 1 and 2 swapped).
    {
        rg_node *a = node_new(RG_TYPE_I32, 64, 30, 40, 1);
        for (int64_t e = 0; e < nel(&a->t); e++) ((int32_t *)a->t.data)[e] = (int32_t)(e * 2654435761u);
        int64_t e1 = a->t.ne[1];
        a->t.ne[1] = a->t.ne[2], a->t.ne[2] = e1;
        size_t b1 = a->t.nb[1];
        a->t.nb[1] = a->t.nb[2], a->t.nb[2] = b1;
        const int64_t pne[4] = {64, 40, 30, 1};
        rg_node *n = op_node(RG_OP_CONT, RG_TYPE_I32, pne, a, NULL);
        if (run2(cpu_cont, n, "cont i32")) {
            int bad = 0;
            int64_t i[4];
            for (int64_t e = 0; e < nel(&n->t); e++) {
                coords(pne, e, i);
                bad += ((int32_t *)n->t.data)[e] != (int32_t)get(&a->t, i[0], i[1], i[2], i[3]);
            }
            RG_CHECK(bad == 0, "cont i32 permuted: %d wrong", bad);
        }
    }
    // Q8_0: every other row of a [64, 2000] table (rows strided, blocks packed).
    {
        rg_node *q = node_new(RG_TYPE_Q8_0, 64, 2000, 1, 1);
        for (size_t b = 0; b < rg_tensor_span(&q->t); b++) ((uint8_t *)q->t.data)[b] = (uint8_t)rg_rng_u64(14, 0, b);
        rg_node *v = node_new(RG_TYPE_Q8_0, 64, 1000, 1, 1);  // header only: re-pointed at q
        v->t.data = q->t.data;
        v->t.nb[1] = 2 * q->t.nb[1];
        v->t.nb[2] = v->t.nb[3] = v->t.nb[1] * 1000;
        const int64_t qne[4] = {64, 1000, 1, 1};
        rg_node *n = op_node(RG_OP_CONT, RG_TYPE_Q8_0, qne, v, NULL);
        if (run2(cpu_cont, n, "cont q8_0")) {
            int bad = 0;
            size_t row = rg_type_row_size(RG_TYPE_Q8_0, 64);
            for (int64_t r = 0; r < 1000; r++)
                bad += memcmp((char *)n->t.data + r * row, (char *)q->t.data + 2 * r * row, row) != 0;
            RG_CHECK(bad == 0, "cont q8_0: %d rows wrong", bad);
        }
        // Blocks that are not packed cannot be copied: an error, not a crash.
        v->t.nb[0] = 2 * v->t.nb[0];
        rg_error err = {0};
        rg_exec_ctx c = {pool3, NULL, 0, false, NULL, NULL, false, NULL};
        RG_CHECK(cpu_cont(&c, n, &err) == RG_ERR_UNSUPPORTED, "cont of unpacked q8_0 blocks must fail");
    }
}

static float special_value(int64_t k) {
    static const uint32_t bits[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x00000001,
        0x33800000, 0x33800001, 0x387fe000, 0x387ff000, 0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001,
        0x3f801000, 0x3f803000, 0x3f808000, 0x3f818000, 0x7f7fffff, 0x7f7f8000, 0x00800000, 0x00008000,
    };
    const size_t nb = sizeof bits / sizeof bits[0];
    float f;
    if (k < (int64_t)nb) {
        memcpy(&f, &bits[k], 4);
    } else {
        uint32_t u = (uint32_t)rg_rng_u64(15, 0, (uint64_t)k);
        memcpy(&f, &u, 4);  // every bit pattern: NaNs, subnormals, huge values
        if (k % 2) f = rg_rng_normal(15, 1, (uint64_t)k) * 100.0f;
    }
    return f;
}

static void test_cpy_conversions(void) {
    RG_REQUIRE(setup(), "pools");
    const int64_t ne[4] = {257, 160, 1, 1};
    for (int tr = 0; tr < 2; tr++) {
        rg_node *a = tr ? node_transposed(RG_TYPE_F32, ne[0], ne[1], 1, 1) : node_new(RG_TYPE_F32, ne[0], ne[1], 1, 1);
        for (int64_t e = 0; e < nel(&a->t); e++) set(&a->t, e % ne[0], e / ne[0], 0, 0, special_value(e));
        rg_node *h = op_node(RG_OP_CPY, RG_TYPE_F16, ne, a, NULL);
        rg_node *b = op_node(RG_OP_CPY, RG_TYPE_BF16, ne, a, NULL);
        rg_node *f = op_node(RG_OP_CPY, RG_TYPE_F32, ne, a, NULL);
        if (!run2(cpu_cpy, h, "cpy f32->f16") || !run2(cpu_cpy, b, "cpy f32->bf16") || !run2(cpu_cpy, f, "cpy f32->f32"))
            continue;
        int bad_h = 0, bad_b = 0, bad_f = 0;
        for (int64_t e = 0; e < nel(&a->t); e++) {
            float v;
            memcpy(&v, rg_tensor_at(&a->t, e % ne[0], e / ne[0], 0, 0), 4);
            bad_h += ((uint16_t *)h->t.data)[e] != rg_fp32_to_fp16(v);
            bad_b += ((uint16_t *)b->t.data)[e] != rg_fp32_to_bf16(v);
            bad_f += bits_of(out_f(f, e)) != bits_of(v);
        }
        RG_CHECK(bad_h == 0, "f32->f16 (transposed %d): %d differ from rg_fp32_to_fp16", tr, bad_h);
        RG_CHECK(bad_b == 0, "f32->bf16 (transposed %d): %d differ from rg_fp32_to_bf16", tr, bad_b);
        RG_CHECK(bad_f == 0, "f32->f32 (transposed %d): %d differ", tr, bad_f);
        // Back to f32 (exact), from a strided half view as well; and f16 <-> bf16.
        for (int src = 0; src < 2; src++) {
            rg_node *hs = src ? b : h;
            uint32_t st = src ? RG_TYPE_BF16 : RG_TYPE_F16;
            for (int vtr = 0; vtr < 2; vtr++) {
                rg_node *view = hs;
                if (vtr) {  // the same bytes seen as [160, 257] transposed
                    view = node_new(st, 1, 1, 1, 1);
                    view->t = hs->t;
                    view->t.ne[0] = ne[1], view->t.ne[1] = ne[0];
                    view->t.nb[0] = hs->t.nb[1], view->t.nb[1] = hs->t.nb[0];
                }
                const int64_t vne[4] = {view->t.ne[0], view->t.ne[1], 1, 1};
                rg_node *back = op_node(RG_OP_CPY, RG_TYPE_F32, vne, view, NULL);
                rg_node *other = op_node(RG_OP_CPY, src ? RG_TYPE_F16 : RG_TYPE_BF16, vne, view, NULL);
                if (!run2(cpu_cpy, back, "cpy half->f32") || !run2(cpu_cpy, other, "cpy half->half")) continue;
                int bad = 0, bad_o = 0;
                for (int64_t e = 0; e < nel(&back->t); e++) {
                    int64_t i0 = e % vne[0], i1 = e / vne[0];
                    uint16_t hv;
                    memcpy(&hv, rg_tensor_at(&view->t, i0, i1, 0, 0), 2);
                    float x = src ? rg_bf16_to_fp32(hv) : rg_fp16_to_fp32(hv);
                    bad += bits_of(out_f(back, e)) != bits_of(x);
                    uint16_t want = src ? rg_fp32_to_fp16(x) : rg_fp32_to_bf16(x);
                    bad_o += ((uint16_t *)other->t.data)[e] != want;
                }
                RG_CHECK(bad == 0, "%s->f32 (view transposed %d): %d wrong", rg_type_get(st)->name, vtr, bad);
                RG_CHECK(bad_o == 0, "%s->other half (view transposed %d): %d wrong", rg_type_get(st)->name, vtr, bad_o);
            }
        }
    }
    // Same count, different shape: linear element order is kept.
    rg_node *a = node_transposed(RG_TYPE_F32, 6, 4, 1, 1);
    fill_random(a, 16, 1.0f, 0.0f);
    const int64_t one[4] = {8, 3, 1, 1};
    rg_node *r = op_node(RG_OP_CPY, RG_TYPE_BF16, one, a, NULL);
    if (run2(cpu_cpy, r, "cpy reshape"))
        for (int64_t e = 0; e < 24; e++) {
            float v = (float)get(&a->t, e % 6, e / 6, 0, 0);
            RG_CHECK(((uint16_t *)r->t.data)[e] == rg_fp32_to_bf16(v), "cpy reshape element %lld", (long long)e);
        }
}

// ---------------------------------------------------------------------------
// VIEW_BACK

static void test_view_back(void) {
    RG_REQUIRE(setup(), "pools");
    // Base [300, 200] f32; the view [100, 50] at column 17, row 33; and the
    // transposed window ([50, 100] with strides swapped). dy is strided too.
    const int64_t base[4] = {300, 200, 1, 1};
    const size_t nb1 = 300 * 4;
    const int64_t off = (17 + 300 * 33) * 4;
    for (int case_ = 0; case_ < 3; case_++) {
        int transposed_window = case_ == 1, strided_dy = case_ == 2;
        int64_t d0 = transposed_window ? 50 : 100, d1 = transposed_window ? 100 : 50;
        rg_node *dy = strided_dy ? node_transposed(RG_TYPE_F32, d0, d1, 1, 1) : node_new(RG_TYPE_F32, d0, d1, 1, 1);
        fill_random(dy, 17, 1.0f, 0.0f);
        rg_node *n = op_node(RG_OP_VIEW_BACK, RG_TYPE_F32, base, dy, NULL);
        n->ip[0] = transposed_window ? (int64_t)nb1 : 4;
        n->ip[1] = transposed_window ? 4 : (int64_t)nb1;
        n->ip[2] = n->ip[3] = (int64_t)(nb1 * 200);
        n->ip[4] = off;
        if (!run2(cpu_view_back, n, "view_back")) continue;
        float *want = calloc(300 * 200, sizeof(float));
        for (int64_t i1 = 0; i1 < d1; i1++)
            for (int64_t i0 = 0; i0 < d0; i0++)
                want[(off + i0 * n->ip[0] + i1 * n->ip[1]) / 4] = (float)get(&dy->t, i0, i1, 0, 0);
        RG_CHECK(memcmp(want, n->t.data, sizeof(float) * 300 * 200) == 0, "view_back case %d: wrong output", case_);
        free(want);
        // A window that leaves the base is refused.
        n->ip[4] = off + (int64_t)nb1 * 150;
        rg_error err = {0};
        rg_exec_ctx c = {pool3, NULL, 0, false, NULL, NULL, false, NULL};
        RG_CHECK(cpu_view_back(&c, n, &err) == RG_ERR_ARG, "view_back: window outside the base must fail");
    }
}

// ---------------------------------------------------------------------------
// GET_ROWS, GET_ROWS_BACK

static void test_get_rows_types(void) {
    RG_REQUIRE(setup(), "pools");
    const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16, RG_TYPE_Q8_0, RG_TYPE_Q4_K};
    const int64_t n = 256, rows = 50, k = 300;  // k x n = 76800 output elements
    float *src = malloc(sizeof(float) * n * rows), *ref = malloc(sizeof(float) * n);
    for (int64_t e = 0; e < n * rows; e++) src[e] = rg_rng_normal(18, 0, (uint64_t)e);
    rg_node *ids = node_new(RG_TYPE_I32, k, 1, 1, 1);
    for (int64_t t = 0; t < k; t++) ((int32_t *)ids->t.data)[t] = (int32_t)(rg_rng_u64(19, 0, (uint64_t)t) % rows);
    ((int32_t *)ids->t.data)[0] = 0, ((int32_t *)ids->t.data)[1] = (int32_t)rows - 1;
    for (int ty = 0; ty < 5; ty++) {
        rg_node *a = node_new(types[ty], n, rows, 1, 1);
        rg_error err = {0};
        RG_REQUIRE(rg_quantize(types[ty], src, a->t.data, rows, n, NULL, "table", &err) == RG_OK, "%s", err.msg);
        const int64_t one[4] = {n, k, 1, 1};
        rg_node *g = op_node(RG_OP_GET_ROWS, RG_TYPE_F32, one, a, ids);
        if (!run2(cpu_get_rows, g, "get_rows")) continue;
        int bad = 0;
        size_t row = rg_type_row_size(types[ty], n);
        for (int64_t t = 0; t < k; t++) {
            int32_t id = ((int32_t *)ids->t.data)[t];
            rg_quant_get(types[ty])->dequant_ref((char *)a->t.data + id * row, ref, n);
            bad += memcmp(ref, (float *)g->t.data + t * n, sizeof(float) * n) != 0;
        }
        RG_CHECK(bad == 0, "get_rows %s: %d rows differ from the reference dequantizer", rg_type_get(types[ty])->name,
                 bad);
    }
    // A transposed f32 table (strided rows), and a batched one: a [n, rows, 2], ids [k, 2].
    {
        rg_node *a = node_transposed(RG_TYPE_F32, 40, rows, 1, 1);
        fill_random(a, 20, 1.0f, 0.0f);
        const int64_t one[4] = {40, k, 1, 1};
        rg_node *g = op_node(RG_OP_GET_ROWS, RG_TYPE_F32, one, a, ids);
        if (run2(cpu_get_rows, g, "get_rows strided")) {
            int bad = 0;
            for (int64_t t = 0; t < k; t++)
                for (int64_t i = 0; i < 40; i++)
                    bad += out_f(g, t * 40 + i) != (float)get(&a->t, i, ((int32_t *)ids->t.data)[t], 0, 0);
            RG_CHECK(bad == 0, "get_rows strided: %d wrong", bad);
        }
        rg_node *a2 = node_new(RG_TYPE_F32, 64, rows, 2, 1);
        fill_random(a2, 21, 1.0f, 0.0f);
        rg_node *ids2 = node_new(RG_TYPE_I32, k, 2, 1, 1);
        for (int64_t t = 0; t < 2 * k; t++) ((int32_t *)ids2->t.data)[t] = (int32_t)((t * 7) % rows);
        const int64_t bne[4] = {64, k, 2, 1};
        rg_node *gb = op_node(RG_OP_GET_ROWS, RG_TYPE_F32, bne, a2, ids2);
        if (run2(cpu_get_rows, gb, "get_rows batched")) {
            int bad = 0;
            for (int64_t b = 0; b < 2; b++)
                for (int64_t t = 0; t < k; t++)
                    for (int64_t i = 0; i < 64; i++)
                        bad += out_f(gb, (b * k + t) * 64 + i) !=
                               (float)get(&a2->t, i, ((int32_t *)ids2->t.data)[b * k + t], b, 0);
            RG_CHECK(bad == 0, "get_rows batched: %d wrong", bad);
        }
    }
    free(src);
    free(ref);
}

static void test_get_rows_out_of_range(void) {
    RG_REQUIRE(setup(), "pools");
    rg_node *a = node_new(RG_TYPE_F32, 8, 10, 1, 1);
    rg_node *ids = node_new(RG_TYPE_I32, 6, 1, 1, 1);
    const int32_t bad_ids[2] = {10, -1};
    for (int c = 0; c < 2; c++) {
        for (int t = 0; t < 6; t++) ((int32_t *)ids->t.data)[t] = t;
        ((int32_t *)ids->t.data)[3] = bad_ids[c];
        const int64_t one[4] = {8, 6, 1, 1};
        rg_node *g = op_node(RG_OP_GET_ROWS, RG_TYPE_F32, one, a, ids);
        snprintf(g->t.name, sizeof g->t.name, "tok_embd_lookup");
        rg_error err = {0};
        rg_exec_ctx ctx = {pool3, NULL, 0, false, NULL, NULL, false, NULL};
        char want[128];
        snprintf(want, sizeof want, "id %d at position 3", bad_ids[c]);
        RG_CHECK(cpu_get_rows(&ctx, g, &err) == RG_ERR_ARG, "get_rows must refuse id %d", bad_ids[c]);
        RG_CHECK(strstr(err.msg, "tok_embd_lookup") && strstr(err.msg, want), "message: %s", err.msg);
        // The backward refuses the same id (against its table size ip[0]).
        rg_node *dy = node_new(RG_TYPE_F32, 8, 6, 1, 1);
        const int64_t bne[4] = {8, 10, 1, 1};
        rg_node *gb = op_node(RG_OP_GET_ROWS_BACK, RG_TYPE_F32, bne, dy, ids);
        gb->ip[0] = 10;
        snprintf(gb->t.name, sizeof gb->t.name, "grad_embd");
        memset(&err, 0, sizeof err);
        RG_CHECK(cpu_get_rows_back(&ctx, gb, &err) == RG_ERR_ARG, "get_rows_back must refuse id %d", bad_ids[c]);
        RG_CHECK(strstr(err.msg, "grad_embd") && strstr(err.msg, want), "message: %s", err.msg);
    }
}

static void test_get_rows_back(void) {
    RG_REQUIRE(setup(), "pools");
    const int64_t n = 64, k = 700, V = 300;
    for (int tr = 0; tr < 2; tr++) {
        rg_node *dy = tr ? node_transposed(RG_TYPE_F32, n, k, 1, 1) : node_new(RG_TYPE_F32, n, k, 1, 1);
        fill_random(dy, 22, 1.0f, 0.0f);
        rg_node *ids = node_new(RG_TYPE_I32, k, 1, 1, 1);
        // Many repeats (a skewed draw over 40 rows), rows 40.. absent.
        for (int64_t t = 0; t < k; t++) {
            uint64_t r = rg_rng_u64(23, 0, (uint64_t)t);
            ((int32_t *)ids->t.data)[t] = (int32_t)((r % 40) * (r % 40) / 40);
        }
        ((int32_t *)ids->t.data)[5] = (int32_t)V - 1;
        const int64_t one[4] = {n, V, 1, 1};
        rg_node *g = op_node(RG_OP_GET_ROWS_BACK, RG_TYPE_F32, one, dy, ids);
        g->ip[0] = V;
        if (!run2(cpu_get_rows_back, g, "get_rows_back")) continue;
        // Reference: f32 sums in increasing t (the specified order), so equal bits.
        float *ref = calloc((size_t)(n * V), sizeof(float));
        for (int64_t t = 0; t < k; t++) {
            int32_t v = ((int32_t *)ids->t.data)[t];
            for (int64_t i = 0; i < n; i++) ref[v * n + i] += (float)get(&dy->t, i, t, 0, 0);
        }
        RG_CHECK(memcmp(ref, g->t.data, sizeof(float) * n * V) == 0, "get_rows_back (transposed %d): wrong sums", tr);
        // And within a double of the exact sums, to catch a reference that is wrong in the same way.
        int far = 0;
        for (int64_t v = 0; v < V; v++)
            for (int64_t i = 0; i < n; i++) {
                double s = 0, m = 0;
                for (int64_t t = 0; t < k; t++)
                    if (((int32_t *)ids->t.data)[t] == v) s += get(&dy->t, i, t, 0, 0), m += fabs(get(&dy->t, i, t, 0, 0));
                far += fabs(out_f(g, v * n + i) - s) > 1e-6 * m;
            }
        RG_CHECK(far == 0, "get_rows_back: %d sums far from exact", far);
        free(ref);
    }
}

static const rg_test_case cases[] = {
    RG_TEST(test_fill),
    RG_TEST(test_binary_broadcast),
    RG_TEST(test_binary_inplace),
    RG_TEST(test_scale),
    RG_TEST(test_repeat_and_back),
    RG_TEST(test_silu_family),
    RG_TEST(test_sum_mean_1e6),
    RG_TEST(test_sum_rows),
    RG_TEST(test_cont),
    RG_TEST(test_cpy_conversions),
    RG_TEST(test_view_back),
    RG_TEST(test_get_rows_types),
    RG_TEST(test_get_rows_out_of_range),
    RG_TEST(test_get_rows_back),
    {0},
};

int main(int argc, char **argv) {
    int rc = rg_test_run(argc, argv, cases);
    rg_arena_free(&ar);
    rg_threadpool_free(pool1);
    rg_threadpool_free(pool3);
    return rc;
}
