// test_sround.c - Philox4x32-10, the keyed generator, and stochastic rounding
// F32 -> BF16 / F16 (shared/spec/training.md §2).
//
//   - Philox KAT vectors and the rg_rand_u32 values of §2.2;
//   - every test vector of §2.5 (BF16 and F16), and the end-to-end example;
//   - exact representables (all 65,536 BF16 and F16 patterns) are unchanged
//     for any r; NaN stays NaN (and matches the RNE conversions' NaN);
//   - against an independent reference in double (grid spacing from frexp,
//     Q = floor(q * 2^32), up iff r + Q >= 2^32) on a stride sample of all f32
//     patterns, for r = 0 (truncation toward zero), r = 0xFFFFFFFF (up
//     whenever Q > 0) and other r;
//   - unbiasedness: over 1e6 consecutive keyed r, |mean - x| <= 4 sigma with
//     sigma = (hi - lo) * sqrt(q (1 - q) / N);
//   - the row helpers give the scalar function's bits with the keyed r.
#include "train/philox.h"
#include "train/sround.h"
#include "tensor/half.h"

#include "rg_test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// ---------------------------------------------------------------- Philox ---

static void test_philox_kat(void) {
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
         {0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
         {0xa4093822u, 0x299f31d0u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        rg_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++)
            RG_CHECK(out[j] == kat[i].out[j], "kat %zu word %d: got %08x want %08x", i, j, out[j], kat[i].out[j]);
    }
    // out may alias ctr
    uint32_t c[4] = {0, 0, 0, 0};
    const uint32_t k[2] = {0, 0};
    rg_philox4x32_10(c, k, c);
    RG_CHECK(c[0] == 0x6627e8d5u && c[3] == 0x9b00dbd8u, "aliased: %08x %08x", c[0], c[3]);
}

static void test_rand_u32_values(void) {
    static const struct {
        uint64_t seed;
        uint32_t step, tensor;
        uint64_t index;
        uint32_t want;
    } v[] = {
        {0, 0, 0, 0, 0x6627e8d5u},
        {0, 0, 0, 1, 0xe169c58du},
        {0, 0, 0, 4, 0xf8e4cca4u},
        {42, 1, 0, 0, 0x20439b04u},
        {42, 1, 7, 5, 0x4c7bbd42u},
        {0x0123456789ABCDEFull, 1000, 3, 123456789, 0x7df22a84u},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint32_t r = rg_rand_u32(v[i].seed, v[i].step, 0, v[i].tensor, v[i].index);
        RG_CHECK(r == v[i].want, "value %zu: got %08x want %08x", i, r, v[i].want);
    }
    // rg_rand_block4 is the same layout.
    uint32_t w[4];
    rg_rand_block4(0x0123456789ABCDEFull, 1000, 0, 3, 123456789ull >> 2, w);
    RG_CHECK(w[123456789ull & 3] == 0x7df22a84u, "block4: %08x", w[123456789ull & 3]);
    // The purpose changes the stream.
    RG_CHECK(rg_rand_u32(42, 1, 1, 7, 5) != rg_rand_u32(42, 1, 0, 7, 5), "purpose ignored");
}

// --------------------------------------------------------- §2.5 vectors ---

typedef struct {
    uint32_t x, r;
    uint16_t out;
} sr_vec;

static void test_bf16_vectors(void) {
    static const sr_vec v[] = {
        {0x3f802000u, 0xe0000000u, 0x3f81}, {0x3f802000u, 0xdfffffffu, 0x3f80},
        {0xbf802000u, 0xe0000000u, 0xbf81}, {0x3fffffffu, 0x00010000u, 0x4000},
        {0x3fffffffu, 0x0000ffffu, 0x3fff}, {0x3f800000u, 0xffffffffu, 0x3f80},
        {0x3dcccccdu, 0x33330000u, 0x3dcd}, {0x3dcccccdu, 0x3332ffffu, 0x3dcc},
        {0x7f7fffffu, 0x00010000u, 0x7f80}, {0x7f7fffffu, 0x00000000u, 0x7f7f},
        {0x7f800000u, 0xffffffffu, 0x7f80}, {0xff800000u, 0xffffffffu, 0xff80},
        {0x7fc00001u, 0x12345678u, 0x7fc0}, {0x7f800001u, 0x00000000u, 0x7fc0},
        {0xffc00000u, 0xffffffffu, 0xffc0}, {0x00000001u, 0xffff0000u, 0x0001},
        {0x00000001u, 0xfffeffffu, 0x0000}, {0x80000000u, 0xffffffffu, 0x8000},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint16_t o = rg_sr_bf16(f_of(v[i].x), v[i].r);
        RG_CHECK(o == v[i].out, "bf16 %08x r=%08x: got %04x want %04x", v[i].x, v[i].r, o, v[i].out);
    }
}

static void test_f16_vectors(void) {
    static const sr_vec v[] = {
        {0x3f800800u, 0xc0000000u, 0x3c01}, {0x3f800800u, 0xbfffffffu, 0x3c00},
        {0xbf800800u, 0xc0000000u, 0xbc01}, {0x3fffffffu, 0x00080000u, 0x4000},
        {0x3fffffffu, 0x0007ffffu, 0x3fff}, {0x3dcccccdu, 0x99980000u, 0x2e67},
        {0x3dcccccdu, 0x9997ffffu, 0x2e66}, {0x477fe000u, 0xffffffffu, 0x7bff},
        {0x477ff000u, 0x80000000u, 0x7c00}, {0x477ff000u, 0x7fffffffu, 0x7bff},
        {0x47800000u, 0x00000000u, 0x7c00}, {0x4788b800u, 0x00000000u, 0x7c00},
        {0x7f800000u, 0x00000000u, 0x7c00}, {0xff800000u, 0x00000000u, 0xfc00},
        {0x38800000u, 0xffffffffu, 0x0400}, {0x387ff000u, 0x40000000u, 0x0400},
        {0x387ff000u, 0x3fffffffu, 0x03ff}, {0x387fe000u, 0x00000000u, 0x03ff},
        {0x387fe000u, 0xffffffffu, 0x0400}, {0x33c00000u, 0x80000000u, 0x0002},
        {0x33c00000u, 0x7fffffffu, 0x0001}, {0x33000000u, 0x80000000u, 0x0001},
        {0x33000000u, 0x7fffffffu, 0x0000}, {0x2b800000u, 0xffff0000u, 0x0001},
        {0x2b800000u, 0xfffeffffu, 0x0000}, {0x21800000u, 0xffffffffu, 0x0000},
        {0x00000001u, 0xffffffffu, 0x0000}, {0x80000000u, 0xffffffffu, 0x8000},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint16_t o = rg_sr_f16(f_of(v[i].x), v[i].r);
        RG_CHECK(o == v[i].out, "f16 %08x r=%08x: got %04x want %04x", v[i].x, v[i].r, o, v[i].out);
    }
    // NaN rows: "any" r.
    static const uint32_t rs[] = {0, 1, 0x7fffffffu, 0x80000000u, 0xffffffffu, 0x12345678u};
    for (size_t j = 0; j < sizeof rs / sizeof rs[0]; j++) {
        RG_CHECK(rg_sr_f16(f_of(0x7fc00000u), rs[j]) == 0x7e00, "7fc00000 r=%08x", rs[j]);
        RG_CHECK(rg_sr_f16(f_of(0xffc00001u), rs[j]) == 0xfe00, "ffc00001 r=%08x", rs[j]);
    }
}

static void test_end_to_end(void) {
    uint32_t r = rg_rand_u32(42, 1, 0, 7, 5);
    RG_CHECK(r == 0x4c7bbd42u, "r=%08x", r);
    float x = f_of(0x3dcccccdu);
    RG_CHECK(rg_sr_bf16(x, r) == 0x3dcd, "bf16 %04x", rg_sr_bf16(x, r));
    RG_CHECK(rg_sr_f16(x, r) == 0x2e66, "f16 %04x", rg_sr_f16(x, r));
}

// ------------------------------------------------- exact values and NaN ---

static const uint32_t some_r[] = {0u, 1u, 0xffffu, 0x10000u, 0x7fffffffu, 0x80000000u,
                                  0xfffeffffu, 0xffff0000u, 0xffffffffu, 0x12345678u, 0x9e3779b9u};
#define N_SOME_R (sizeof some_r / sizeof some_r[0])

static void test_exact_unchanged(void) {
    for (uint32_t h = 0; h < 0x10000u; h++) {
        int bf_nan = (h & 0x7fffu) > 0x7f80u;
        int f16_nan = (h & 0x7fffu) > 0x7c00u;
        for (size_t j = 0; j < N_SOME_R; j++) {
            if (!bf_nan) {
                uint16_t o = rg_sr_bf16(rg_bf16_to_fp32((uint16_t)h), some_r[j]);
                RG_CHECK(o == h, "bf16 %04x r=%08x -> %04x", h, some_r[j], o);
            }
            if (!f16_nan) {
                uint16_t o = rg_sr_f16(rg_fp16_to_fp32((uint16_t)h), some_r[j]);
                RG_CHECK(o == h, "f16 %04x r=%08x -> %04x", h, some_r[j], o);
            }
        }
    }
}

static void test_nan_stays_nan(void) {
    static const uint32_t nans[] = {0x7f800001u, 0x7f80ffffu, 0x7f810000u, 0x7fc00000u, 0x7fc00001u,
                                    0x7fffffffu, 0xff800001u, 0xffc00000u, 0xffffffffu, 0x7fbfffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        float x = f_of(nans[i]);
        for (size_t j = 0; j < N_SOME_R; j++) {
            uint16_t b = rg_sr_bf16(x, some_r[j]), h = rg_sr_f16(x, some_r[j]);
            RG_CHECK((b & 0x7fffu) > 0x7f80u && (b & 0x0040u), "bf16 %08x -> %04x", nans[i], b);
            RG_CHECK(b == rg_fp32_to_bf16(x), "bf16 %08x -> %04x, rne %04x", nans[i], b, rg_fp32_to_bf16(x));
            RG_CHECK(h == ((nans[i] >> 16 & 0x8000u) | 0x7e00u), "f16 %08x -> %04x", nans[i], h);
            RG_CHECK(h == rg_fp32_to_fp16(x), "f16 %08x -> %04x, rne %04x", nans[i], h, rg_fp32_to_fp16(x));
        }
    }
}

// ------------------------------------------------ independent reference ---

// SR of a non-NaN x from the definition, in double: spacing of the target grid
// around |x|, lo = floor(|x|/ulp)*ulp, Q = floor(q * 2^32), up iff r + Q >= 2^32.
// All of it is exact in double (the scalings are by powers of two).
static uint16_t ref_sr(float x, uint32_t r, int bf16) {
    const int mant = bf16 ? 7 : 10;                 // stored mantissa bits
    const int emin = bf16 ? -126 : -14;             // smallest normal exponent
    const double inf_at = bf16 ? ldexp(1, 128) : 65536.0;  // the "next grid point" past the max
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    uint16_t inf = bf16 ? 0x7f80 : 0x7c00;
    double ax = fabs((double)x);
    if (isinf(ax) || ax >= inf_at) return sign | inf;
    int e = emin;
    if (ax >= ldexp(1, emin)) {
        (void)frexp(ax, &e);
        e -= 1;  // ax in [2^e, 2^(e+1))
    }
    double ulp = ldexp(1, e - mant);
    double lo = floor(ax / ulp) * ulp;
    double q = (ax - lo) / ulp;
    uint64_t Q = (uint64_t)floor(ldexp(q, 32));
    double v = lo + ((((uint64_t)r + Q) >> 32) ? ulp : 0.0);
    if (v >= inf_at) return sign | inf;
    return sign | (bf16 ? rg_fp32_to_bf16((float)v) : rg_fp32_to_fp16((float)v));
}

static void test_against_reference(void) {
    const char *quick = getenv("RG_TEST_QUICK");
    const uint32_t stride = (quick && *quick == '1') ? 0x9e371u : 0x9e37u;  // odd: hits every residue
    long n = 0;
    for (uint64_t k = 0; k < 0x100000000ull; k += stride) {
        uint32_t u = (uint32_t)k;
        if ((u & 0x7fffffffu) > 0x7f800000u) continue;  // NaN: tested above
        float x = f_of(u);
        for (size_t j = 0; j < N_SOME_R; j++) {
            uint32_t r = some_r[j];
            uint16_t b = rg_sr_bf16(x, r), wb = ref_sr(x, r, 1);
            uint16_t h = rg_sr_f16(x, r), wh = ref_sr(x, r, 0);
            RG_CHECK(b == wb, "bf16 %08x r=%08x: got %04x want %04x", u, r, b, wb);
            RG_CHECK(h == wh, "f16 %08x r=%08x: got %04x want %04x", u, r, h, wh);
        }
        // r = 0 is truncation toward zero; r = ~0 rounds up whenever q > 0
        // (BF16: the low 16 bits are not all zero).
        RG_CHECK(rg_sr_bf16(x, 0) == (uint16_t)(u >> 16), "bf16 trunc %08x", u);
        uint16_t up = (uint16_t)((u >> 16) + ((u & 0xffffu) != 0));
        RG_CHECK(rg_sr_bf16(x, 0xffffffffu) == up, "bf16 up %08x", u);
        // F16 truncation, against the reference (also checked from the grid below).
        RG_CHECK(rg_sr_f16(x, 0) == ref_sr(x, 0, 0), "f16 trunc %08x", u);
        n++;
    }
    RG_CHECK(n > 1000, "n=%ld", n);
}

// F16 r = 0 / r = ~0 directly from the grid, with q > 0 meaning Q > 0 (true
// for |x| >= 2^-33): a dense sweep over [2^-26, 65536) plus sign.
static void test_f16_trunc_and_up(void) {
    for (uint32_t u = 0x32800000u; u < 0x47800000u; u += 0x101u) {
        for (int neg = 0; neg < 2; neg++) {
            uint32_t v = u | (neg ? 0x80000000u : 0);
            float x = f_of(v);
            uint16_t lo = rg_sr_f16(x, 0), hi = rg_sr_f16(x, 0xffffffffu);
            // lo is |x| truncated: its value <= |x| and the next pattern's value > |x|.
            double ax = fabs((double)x);
            double vlo = fabs((double)rg_fp16_to_fp32(lo));
            double vnext = (lo & 0x7fffu) == 0x7bffu ? 65536.0 : fabs((double)rg_fp16_to_fp32((uint16_t)(lo + 1)));
            RG_CHECK((lo & 0x8000u) == (neg ? 0x8000u : 0) && vlo <= ax && vnext > ax, "trunc %08x -> %04x", v,
                     lo);
            uint16_t want_hi = (vlo == ax) ? lo : (uint16_t)(lo + 1);
            RG_CHECK(hi == want_hi, "up %08x -> %04x want %04x", v, hi, want_hi);
        }
    }
}

// ------------------------------------------------------------ unbiased ---

// Mean of SR(x) over N = 1e6 consecutive keyed r (seed 7, step 3, tensor 11,
// indices 0..N-1) must be within 4 sigma of x, sigma = (hi-lo)*sqrt(q(1-q)/N).
// An F16 result of Inf counts as its grid value 65536 (§2.1: hi of 65504).
static double dec(uint16_t o, int bf16) {
    if (!bf16 && (o & 0x7fffu) == 0x7c00u) return (o & 0x8000u) ? -65536.0 : 65536.0;
    return bf16 ? rg_bf16_to_fp32(o) : rg_fp16_to_fp32(o);
}

static void check_unbiased(float x, int bf16) {
    const long N = 1000000;
    uint16_t lo = bf16 ? rg_sr_bf16(x, 0) : rg_sr_f16(x, 0);
    uint16_t hi = bf16 ? rg_sr_bf16(x, 0xffffffffu) : rg_sr_f16(x, 0xffffffffu);
    double dlo = dec(lo, bf16);
    double dhi = dec(hi, bf16);
    double q = ((double)x - dlo) / (dhi - dlo);
    RG_REQUIRE(lo != hi && q > 0 && q < 1, "x=%g: q=%g", (double)x, q);
    double sum = 0;
    long n_up = 0;
    for (long i = 0; i < N; i++) {
        uint32_t r = rg_rand_u32(7, 3, 0, 11, (uint64_t)i);
        uint16_t o = bf16 ? rg_sr_bf16(x, r) : rg_sr_f16(x, r);
        RG_CHECK(o == lo || o == hi, "x=%g: %04x not a neighbour", (double)x, o);
        n_up += o == hi;
        sum += dec(o, bf16);
    }
    double mean = sum / (double)N;
    double sigma = fabs(dhi - dlo) * sqrt(q * (1 - q) / (double)N);
    RG_CHECK(fabs(mean - (double)x) <= 4 * sigma, "%s x=%.9g q=%.6f: mean %.9g, |diff| %.3g > 4 sigma (%.3g)",
             bf16 ? "bf16" : "f16", (double)x, q, mean, fabs(mean - (double)x), 4 * sigma);
    // The same in probability: the fraction rounded up is within 4 sigma of q.
    double p = (double)n_up / (double)N, sp = sqrt(q * (1 - q) / (double)N);
    RG_CHECK(fabs(p - q) <= 4 * sp, "%s x=%.9g: P(up) %.6f vs q %.6f (4 sigma %.3g)", bf16 ? "bf16" : "f16",
             (double)x, p, q, 4 * sp);
}

static void test_unbiased(void) {
    static const float xs[] = {0.1f, -0.1f, 1.0003f, 3.14159265f, -1e-3f, 0.99999f, 123.456f};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        check_unbiased(xs[i], 1);
        check_unbiased(xs[i], 0);
    }
    check_unbiased(f_of(0x3f7fff58u), 1);  // §2.7: 1 - 1e-5 in BF16, q = 0.997437
    check_unbiased(3e-7f, 0);              // F16 subnormal
    check_unbiased(-2.5e-5f, 0);           // F16 subnormal, negative
    check_unbiased(65510.0f, 0);           // F16 top: hi is Inf, counted as 65536
}

// ----------------------------------------------------------------- rows ---

static void test_rows(void) {
    enum { NMAX = 1000 };
    static float x[NMAX];
    static uint16_t y[NMAX + 1];
    uint32_t s = 12345;
    for (int i = 0; i < NMAX; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ldexpf((float)(s >> 8) / 16777216.0f - 0.5f, (int)(s % 40) - 20);
    }
    x[3] = f_of(0x7fc00001u);
    x[4] = -0.0f;
    x[5] = f_of(0x7f800000u);
    static const int64_t ns[] = {1, 7, 1000};
    static const uint64_t offs[] = {0, 1, 3, 5, 4096, (1ull << 33) + 6, 0xfffffffffffffff0ull};
    const uint64_t seed = 0x0123456789ABCDEFull;
    const uint32_t step = 17, tid = 9;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        for (size_t b = 0; b < sizeof offs / sizeof offs[0]; b++) {
            int64_t n = ns[a];
            uint64_t off = offs[b];
            for (int t = 0; t < 2; t++) {
                y[n] = 0xBEEF;
                if (t == 0)
                    rg_sr_bf16_row(x, y, n, seed, step, tid, off);
                else
                    rg_sr_f16_row(x, y, n, seed, step, tid, off);
                RG_CHECK(y[n] == 0xBEEF, "row wrote past n");
                for (int64_t i = 0; i < n; i++) {
                    uint32_t r = rg_rand_u32(seed, step, 0, tid, off + (uint64_t)i);
                    uint16_t want = t == 0 ? rg_sr_bf16(x[i], r) : rg_sr_f16(x[i], r);
                    RG_CHECK(y[i] == want, "%s n=%lld off=%llu i=%lld: %04x want %04x", t ? "f16" : "bf16",
                             (long long)n, (unsigned long long)off, (long long)i, y[i], want);
                }
            }
        }
    }
    // n <= 0 writes nothing.
    y[0] = 0xBEEF;
    rg_sr_bf16_row(x, y, 0, seed, step, tid, 0);
    rg_sr_f16_row(x, y, -3, seed, step, tid, 0);
    RG_CHECK(y[0] == 0xBEEF, "n<=0 wrote");
}

static const rg_test_case cases[] = {
    RG_TEST(test_philox_kat),       RG_TEST(test_rand_u32_values),   RG_TEST(test_bf16_vectors),
    RG_TEST(test_f16_vectors),      RG_TEST(test_end_to_end),        RG_TEST(test_exact_unchanged),
    RG_TEST(test_nan_stays_nan),    RG_TEST(test_against_reference), RG_TEST(test_f16_trunc_and_up),
    RG_TEST(test_unbiased),         RG_TEST(test_rows),              {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
