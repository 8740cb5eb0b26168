// test_quant_legacy_k.c - the legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), the
// K-quants (Q2_K..Q6_K) and the activation types (Q8_1, Q8_K).
//
//   - spec §7.1-§7.3 test vectors, byte for byte and value for value;
//   - the quant.c table points at these functions;
//   - AVX2 dequantization == reference bit for bit, on quantized data and on
//     random bytes (garbage scales included; two NaNs count as equal, since x86
//     NaN propagation depends on operand order a compiler may commute);
//   - AVX2 activation quantizers (Q8_0, Q8_1, Q8_K) == reference byte for byte,
//     NaN / Inf / subnormal inputs included;
//   - round-trip relative RMSE per type on realistic weights, under a table of bounds;
//   - imatrix: the importance-weighted error is not worse than without, and
//     all-ones importance behaves like none;
//   - vec_dot (reference and AVX2) against a double-precision dot of the
//     dequantized operands, and against the f32 dot within the activation's
//     quantization error; K-quant AVX2 dots equal the reference bit for bit;
//   - edge cases: zero, constant, outlier, negative-only and tiny rows, 1 and 64
//     blocks, with canaries after every output buffer.
// RG_TEST_QUICK=1 (sanitizer build) cuts the sizes.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_legacy_k.h"

static int quick_mode(void) {
    const char *s = getenv("RG_TEST_QUICK");
    return s && *s && strcmp(s, "0") != 0;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// Same bits, or both NaN.
static int same_float(float a, float b) { return bits_of(a) == bits_of(b) || (isnan(a) && isnan(b)); }

// ---------------------------------------------------------------------------
// The types under test

enum { VT_Q8_0, VT_Q8_1, VT_Q8_K };

typedef struct qtype {
    const char *name;
    uint32_t id;
    int qk, bytes;
    rg_dequant_fn deq, deq_ref;
    rg_quantize_fn quant;
    rg_vec_dot_fn dot, dot_ref;
    int vt;  // activation type of the dot product
    double rmse_max;  // bound on the round-trip relative RMSE (test_roundtrip_rmse)
} qtype;

// Relative RMSE bounds, rms(x − deq(quant(x))) / rms(x), for Gaussian rows of
// 4096 with 0.2% outliers (x8), 8 rows. Measured (printed by test_roundtrip_rmse,
// identical at -O0..-O3 and under the sanitizers), then ~25% of margin added:
//   type   Q8_0    Q6_K    Q5_K    Q5_1    Q5_0    Q4_K    Q4_1    Q4_0    Q3_K    Q2_K
//   rmse   0.0063  0.0197  0.0381  0.0396  0.0498  0.0754  0.0816  0.0998  0.1624  0.3103
//   bound  0.0079  0.0247  0.048   0.050   0.062   0.094   0.102   0.125   0.203   0.39
static const qtype types[] = {
    {"q4_0", RG_TYPE_Q4_0, 32, 18, rg_dequant_row_q4_0, rg_dequant_row_q4_0_ref, rg_quantize_row_q4_0,
     rg_vec_dot_q4_0_q8_0, rg_vec_dot_q4_0_q8_0_ref, VT_Q8_0, 0.125},
    {"q4_1", RG_TYPE_Q4_1, 32, 20, rg_dequant_row_q4_1, rg_dequant_row_q4_1_ref, rg_quantize_row_q4_1,
     rg_vec_dot_q4_1_q8_1, rg_vec_dot_q4_1_q8_1_ref, VT_Q8_1, 0.102},
    {"q5_0", RG_TYPE_Q5_0, 32, 22, rg_dequant_row_q5_0, rg_dequant_row_q5_0_ref, rg_quantize_row_q5_0,
     rg_vec_dot_q5_0_q8_0, rg_vec_dot_q5_0_q8_0_ref, VT_Q8_0, 0.062},
    {"q5_1", RG_TYPE_Q5_1, 32, 24, rg_dequant_row_q5_1, rg_dequant_row_q5_1_ref, rg_quantize_row_q5_1,
     rg_vec_dot_q5_1_q8_1, rg_vec_dot_q5_1_q8_1_ref, VT_Q8_1, 0.050},
    {"q8_0", RG_TYPE_Q8_0, 32, 34, rg_dequant_row_q8_0, rg_dequant_row_q8_0_ref, rg_quantize_row_q8_0,
     rg_vec_dot_q8_0_q8_0, rg_vec_dot_q8_0_q8_0_ref, VT_Q8_0, 0.0079},
    {"q2_K", RG_TYPE_Q2_K, 256, 84, rg_dequant_row_q2_K, rg_dequant_row_q2_K_ref, rg_quantize_row_q2_K,
     rg_vec_dot_q2_K_q8_k, rg_vec_dot_q2_K_q8_k_ref, VT_Q8_K, 0.39},
    {"q3_K", RG_TYPE_Q3_K, 256, 110, rg_dequant_row_q3_K, rg_dequant_row_q3_K_ref, rg_quantize_row_q3_K,
     rg_vec_dot_q3_K_q8_k, rg_vec_dot_q3_K_q8_k_ref, VT_Q8_K, 0.203},
    {"q4_K", RG_TYPE_Q4_K, 256, 144, rg_dequant_row_q4_K, rg_dequant_row_q4_K_ref, rg_quantize_row_q4_K,
     rg_vec_dot_q4_K_q8_k, rg_vec_dot_q4_K_q8_k_ref, VT_Q8_K, 0.094},
    {"q5_K", RG_TYPE_Q5_K, 256, 176, rg_dequant_row_q5_K, rg_dequant_row_q5_K_ref, rg_quantize_row_q5_K,
     rg_vec_dot_q5_K_q8_k, rg_vec_dot_q5_K_q8_k_ref, VT_Q8_K, 0.048},
    {"q6_K", RG_TYPE_Q6_K, 256, 210, rg_dequant_row_q6_K, rg_dequant_row_q6_K_ref, rg_quantize_row_q6_K,
     rg_vec_dot_q6_K_q8_k, rg_vec_dot_q6_K_q8_k_ref, VT_Q8_K, 0.0247},
};
#define N_TYPES ((int)(sizeof types / sizeof types[0]))

// Activation types: quantize (dispatched), block size and bytes, dequantize.
static void dequant_q8_1(const void *src, float *dst, int64_t n) {  // y = q·d (ggml has no dequantizer)
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 36, dst += 32) {
        const float d = rg_fp16_to_fp32(rg_rd16(b));
        for (int j = 0; j < 32; j++) dst[j] = (float)(int8_t)b[4 + j] * d;
    }
}
static void act_quantize(int vt, const float *x, void *dst, int64_t n) {
    if (vt == VT_Q8_0)
        rg_quantize_row_q8_0(x, dst, n, NULL);
    else if (vt == VT_Q8_1)
        rg_quantize_row_q8_1(x, dst, n, NULL);
    else
        rg_quantize_row_q8_K(x, dst, n, NULL);
}
static void act_dequant(int vt, const void *src, float *dst, int64_t n) {
    if (vt == VT_Q8_0)
        rg_dequant_row_q8_0_ref(src, dst, n);
    else if (vt == VT_Q8_1)
        dequant_q8_1(src, dst, n);
    else
        rg_dequant_row_q8_K_ref(src, dst, n);
}
static size_t act_bytes(int vt, int64_t n) {
    return vt == VT_Q8_0 ? (size_t)n / 32 * 34 : vt == VT_Q8_1 ? (size_t)n / 32 * 36 : (size_t)n / 256 * 292;
}

static size_t row_bytes(const qtype *t, int64_t n) { return (size_t)(n / t->qk) * (size_t)t->bytes; }

// ---------------------------------------------------------------------------
// Data

// Realistic weights: N(0, 0.02²) with 0.2% outliers scaled x8. Deterministic in (seed, row).
static void weights_row(float *x, int64_t n, uint64_t seed, uint64_t row) {
    for (int64_t i = 0; i < n; i++) {
        float v = 0.02f * rg_rng_normal(seed, row, (uint64_t)i);
        if (rg_rng_uniform(seed ^ 0x5151, row, (uint64_t)i) < 0.002f) v *= 8.0f;
        x[i] = v;
    }
}

static void random_bytes(uint8_t *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rg_rng_u64(seed, 77, i);
}

// Overwrites the f16 scale fields of every block with finite, moderate values
// (±2^-10 .. 2^2), so that dequantized values and dots stay finite.
static void sane_scales(const qtype *t, uint8_t *b, int64_t nblocks, uint64_t seed) {
    static const struct {
        const char *name;
        int off[2];
    } f[] = {
        {"q4_0", {0, -1}},  {"q4_1", {0, 2}},    {"q5_0", {0, -1}}, {"q5_1", {0, 2}}, {"q8_0", {0, -1}},
        {"q2_K", {80, 82}}, {"q3_K", {108, -1}}, {"q4_K", {0, 2}},  {"q5_K", {0, 2}}, {"q6_K", {208, -1}},
    };
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
        if (strcmp(f[k].name, t->name)) continue;
        for (int64_t i = 0; i < nblocks; i++)
            for (int o = 0; o < 2; o++)
                if (f[k].off[o] >= 0) {
                    float v = ldexpf(1.0f + rg_rng_uniform(seed, 3 + (uint64_t)o, (uint64_t)i),
                                     -10 + (int)(rg_rng_u64(seed, 9, (uint64_t)i) % 12));
                    if (rg_rng_u64(seed, 11 + (uint64_t)o, (uint64_t)i) & 1) v = -v;
                    rg_wr16(b + i * t->bytes + f[k].off[o], rg_fp32_to_fp16(v));
                }
    }
}

static double rel_rmse(const float *x, const float *y, int64_t n) {
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e / (double)n);
}

// A buffer with 64 canary bytes after `n` bytes.
enum { CANARY = 64 };
static void *canary_alloc(size_t n) {
    uint8_t *p = malloc(n + CANARY);
    if (p) memset(p + n, 0xA5, CANARY);
    return p;
}
static int canary_ok(const void *p, size_t n) {
    const uint8_t *c = (const uint8_t *)p + n;
    for (int i = 0; i < CANARY; i++)
        if (c[i] != 0xA5) return 0;
    return 1;
}

// ---------------------------------------------------------------------------
// SHA-256 (FIPS 180-4), for the §7 digests.

static uint32_t ror32(uint32_t x, int r) { return x >> r | x << (32 - r); }

static void sha256(const uint8_t *msg, size_t len, uint8_t out[32]) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const size_t total = (len + 9 + 63) / 64 * 64;
    for (size_t off = 0; off < total; off += 64) {
        uint8_t blk[64];
        for (int i = 0; i < 64; i++) {
            const size_t p = off + (size_t)i;
            blk[i] = p < len ? msg[p] : p == len ? 0x80 : 0;
        }
        if (off + 64 == total)
            for (int i = 0; i < 8; i++) blk[56 + i] = (uint8_t)((uint64_t)len * 8 >> (56 - 8 * i));
        uint32_t w[64];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)blk[4 * i] << 24 | (uint32_t)blk[4 * i + 1] << 16 | (uint32_t)blk[4 * i + 2] << 8 |
                   blk[4 * i + 3];
        for (int i = 16; i < 64; i++) {
            const uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
        for (int i = 0; i < 64; i++) {
            const uint32_t t1 = hh + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
            const uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
    }
    for (int i = 0; i < 32; i++) out[i] = (uint8_t)(h[i / 4] >> (24 - 8 * (i % 4)));
}

static int sha256_is(const void *p, size_t n, const char *hex) {
    uint8_t d[32];
    char s[65];
    sha256(p, n, d);
    for (int i = 0; i < 32; i++) snprintf(s + 2 * i, 3, "%02x", d[i]);
    return strcmp(s, hex) == 0;
}

// Little-endian f32 bytes of n floats (the digests are over these).
static void f32_le(const float *x, int n, uint8_t *out) {
    for (int i = 0; i < n; i++) rg_wr32(out + 4 * i, bits_of(x[i]));
}

// ---------------------------------------------------------------------------
// Spec §7 test vectors

// x_i = v_i·(1 + i/32)/2048 from the spec's LCG (all exact in f32).
static void spec_input(float *x) {
    uint64_t s = 1;
    for (int i = 0; i < 256; i++) {
        s = (s * 1103515245u + 12345u) % 2147483648u;
        const int v = (int)((s >> 16) & 1023) - 512;
        x[i] = (float)v * (float)(1 + i / 32) / 2048.0f;
    }
}

static void test_spec_input(void) {
    float x[256];
    uint8_t le[1024];
    spec_input(x);
    RG_CHECK(bits_of(x[0]) == 0xBCE80000u, "x_0 bits %08x", bits_of(x[0]));
    RG_CHECK(x[9] == 0.2451171875f && x[255] == -0.6328125f, "x_9 %g x_255 %g", x[9], x[255]);
    f32_le(x, 256, le);
    RG_CHECK(sha256_is(le, sizeof le, "086dd02bb0b94d86adc721e5f6198469d22d5e76197ecb026251c1e9a890b3d7"),
             "SHA-256 of x_0..x_255");
    RG_CHECK(sha256_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "SHA-256('abc')");
}

static void test_spec_q4_0(void) {
    static const uint8_t want[18] = {0xd8, 0xa7, 0x89, 0x56, 0x72, 0x0e, 0xbb, 0x28, 0xf8,
                                     0xfc, 0xf3, 0xa0, 0x65, 0x39, 0x92, 0xe3, 0x38, 0x3e};
    static const double want_y[32] = {-0.0306396484375,
                                      0.061279296875,
                                      0.183837890625,
                                      -0.183837890625,
                                      -0.0919189453125,
                                      -0.0,
                                      -0.0,
                                      -0.12255859375,
                                      0.1531982421875,
                                      0.2451171875,
                                      0.0919189453125,
                                      -0.0306396484375,
                                      0.183837890625,
                                      0.1531982421875,
                                      -0.0,
                                      -0.183837890625,
                                      -0.0,
                                      0.0919189453125,
                                      0.0306396484375,
                                      0.2451171875,
                                      -0.0919189453125,
                                      0.183837890625,
                                      -0.2144775390625,
                                      -0.2144775390625,
                                      -0.2144775390625,
                                      -0.061279296875,
                                      0.061279296875,
                                      0.1531982421875,
                                      -0.0306396484375,
                                      -0.183837890625,
                                      0.1531982421875,
                                      0.1531982421875};
    float x[256], y[32], y2[32];
    uint8_t b[18];
    spec_input(x);
    RG_CHECK(rg_quantize_row_q4_0(x, b, 32, NULL) == 18, "bytes written");
    RG_CHECK(memcmp(b, want, 18) == 0, "Q4_0 block bytes differ from spec §7.1");
    rg_dequant_row_q4_0_ref(b, y, 32);
    rg_dequant_row_q4_0(b, y2, 32);
    for (int i = 0; i < 32; i++) {
        RG_CHECK(bits_of(y[i]) == bits_of((float)want_y[i]), "ref y_%d = %.17g, want %.17g", i, y[i], want_y[i]);
        RG_CHECK(bits_of(y2[i]) == bits_of((float)want_y[i]), "dispatched y_%d = %.17g", i, y2[i]);
    }
    // All-zero block: d = −0.0 -> 00 80, then 16 x 88.
    memset(x, 0, sizeof x);
    rg_quantize_row_q4_0(x, b, 32, NULL);
    RG_CHECK(b[0] == 0x00 && b[1] == 0x80, "zero block d bytes %02x %02x", b[0], b[1]);
    for (int i = 2; i < 18; i++) RG_CHECK(b[i] == 0x88, "zero block qs[%d] = %02x", i - 2, b[i]);
}

static void test_spec_q8_0(void) {
    static const uint8_t want[34] = {0xe8, 0x17, 0xf1, 0x20, 0x61, 0x9a, 0xd2, 0xff, 0xf8, 0xbe, 0x56, 0x7f,
                                     0x30, 0xf8, 0x60, 0x48, 0xf8, 0xa1, 0x00, 0x30, 0x0c, 0x79, 0xd5, 0x5e,
                                     0x82, 0x90, 0x99, 0xd9, 0x22, 0x57, 0xea, 0xa1, 0x50, 0x57};
    static const double want_y[8] = {-0.02895355224609375, 0.061767578125,      0.18723297119140625,
                                     -0.1968841552734375,  -0.0887908935546875, -0.00193023681640625,
                                     -0.01544189453125,    -0.1273956298828125};
    float x[256], y[32], y2[32];
    uint8_t b[34], b2[34];
    spec_input(x);
    RG_CHECK(rg_quantize_row_q8_0(x, b, 32, NULL) == 34, "bytes written");
    rg_quantize_row_q8_0_ref(x, b2, 32);
    RG_CHECK(memcmp(b, want, 34) == 0, "Q8_0 (dispatched) bytes differ from spec §7.2");
    RG_CHECK(memcmp(b2, want, 34) == 0, "Q8_0 (reference) bytes differ from spec §7.2");
    rg_dequant_row_q8_0_ref(b, y, 32);
    rg_dequant_row_q8_0(b, y2, 32);
    for (int i = 0; i < 8; i++) RG_CHECK(y[i] == (float)want_y[i], "y_%d = %.17g, want %.17g", i, y[i], want_y[i]);
    RG_CHECK(y[9] == 0.24514007568359375f && y[16] == 0.0f, "y_9 %.17g y_16 %.17g", y[9], y[16]);
    for (int i = 0; i < 32; i++) RG_CHECK(bits_of(y[i]) == bits_of(y2[i]), "dispatched y_%d differs", i);
    memset(x, 0, sizeof x);
    rg_quantize_row_q8_0(x, b, 32, NULL);
    for (int i = 0; i < 34; i++) RG_CHECK(b[i] == 0, "zero block byte %d = %02x", i, b[i]);
}

static void test_spec_q4_K(void) {
    static const uint8_t want[144] = {
        0xeb, 0x1b, 0x54, 0x27, 0x89, 0x90, 0xd8, 0xe1, 0x88, 0xd1, 0xd9, 0xe3, 0xb8, 0x0d, 0xa9, 0xff, 0xc6, 0x98,
        0x4c, 0xa1, 0x74, 0x67, 0x66, 0x73, 0x5b, 0xde, 0x59, 0x16, 0xdc, 0xbb, 0x96, 0x11, 0xf7, 0x49, 0xa7, 0xed,
        0x34, 0x3c, 0xc0, 0xe0, 0x61, 0x94, 0x38, 0xeb, 0x25, 0x41, 0x5b, 0xdb, 0xe3, 0xd1, 0x9e, 0xe9, 0x14, 0xff,
        0x5f, 0xaa, 0x07, 0xa3, 0x86, 0x72, 0xbb, 0x04, 0x01, 0xed, 0x5c, 0xbd, 0x0f, 0xc5, 0x38, 0x9c, 0xa6, 0x52,
        0xad, 0xdc, 0x1a, 0xa7, 0xa0, 0x97, 0xed, 0x5f, 0xbc, 0x09, 0xf4, 0x68, 0x14, 0x6e, 0xde, 0x34, 0x1a, 0xaa,
        0x64, 0x59, 0x2d, 0x33, 0x26, 0x4e, 0xb2, 0x10, 0xb2, 0x39, 0xbf, 0x7c, 0x14, 0x39, 0x31, 0xbd, 0x8a, 0xcb,
        0x58, 0xf7, 0xc0, 0x00, 0xaa, 0x30, 0x64, 0x76, 0x2f, 0x91, 0x07, 0x96, 0x41, 0xa2, 0x48, 0x14, 0xfd, 0x26,
        0x26, 0xaa, 0xa5, 0x72, 0xe2, 0xa1, 0x74, 0xed, 0x5d, 0x0a, 0xd6, 0x17, 0xbd, 0xa0, 0x0a, 0x4e, 0xf8, 0x57};
    static const struct {
        int i;
        double y;
    } picks[] = {{0, -0.020229339599609375},  {1, 0.0493621826171875},    {2, 0.18854522705078125},
                 {3, -0.19420814514160156},   {4, -0.08982086181640625},  {5, 0.014566421508789062},
                 {6, -0.020229339599609375},  {7, -0.12461662292480469},  {32, 0.25567626953125},
                 {33, 0.070098876953125},     {34, -0.23919677734375},    {35, 0.1319580078125},
                 {224, 0.6322975158691406},   {225, -1.0726947784423828}, {226, -0.3419837951660156},
                 {227, -0.09841346740722656}, {228, -1.3162651062011719}, {229, 0.38872718811035156},
                 {230, -1.80340576171875},    {231, 0.38872718811035156}, {255, -0.5855541229248047}};
    float x[256], y[256], y2[256];
    uint8_t b[144], le[1024];
    spec_input(x);
    RG_CHECK(rg_quantize_row_q4_K(x, b, 256, NULL) == 144, "bytes written");
    for (int i = 0; i < 144; i++)
        RG_CHECK(b[i] == want[i], "Q4_K byte %d = %02x, spec §7.3 says %02x", i, b[i], want[i]);
    // (sc, m) per sub-block, from the packed scales.
    static const int want_sm[8][2] = {{9, 8}, {16, 17}, {24, 25}, {33, 35}, {40, 43}, {45, 48}, {57, 58}, {63, 63}};
    for (int s = 0; s < 8; s++) {
        int sc, m;
        rg_k4_scale_min(s, b + 4, &sc, &m);
        RG_CHECK(sc == want_sm[s][0] && m == want_sm[s][1], "sub-block %d: (%d, %d)", s, sc, m);
    }
    rg_dequant_row_q4_K_ref(b, y, 256);
    rg_dequant_row_q4_K(b, y2, 256);
    for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++)
        RG_CHECK(y[picks[k].i] == (float)picks[k].y, "y_%d = %.17g, want %.17g", picks[k].i, y[picks[k].i], picks[k].y);
    f32_le(y, 256, le);
    RG_CHECK(sha256_is(le, sizeof le, "8bbca06dca86c16028a7d1d459544d9b87d901ecf0232b8d7de1839d8c0eaa7c"),
             "SHA-256 of the reference dequantization");
    f32_le(y2, 256, le);
    RG_CHECK(sha256_is(le, sizeof le, "8bbca06dca86c16028a7d1d459544d9b87d901ecf0232b8d7de1839d8c0eaa7c"),
             "SHA-256 of the dispatched dequantization");
    double maxerr = 0;
    for (int i = 0; i < 256; i++) maxerr = fmax(maxerr, fabs((double)x[i] - y[i]));
    RG_CHECK(fabs(maxerr - 0.1225) < 0.0001, "max |x - y| = %.6f, spec says 0.1225", maxerr);
    memset(x, 0, sizeof x);
    rg_quantize_row_q4_K(x, b, 256, NULL);
    for (int i = 0; i < 144; i++) RG_CHECK(b[i] == 0, "zero super-block byte %d = %02x", i, b[i]);
}

// ---------------------------------------------------------------------------
// The quant.c table resolves to these functions.

static void test_table_wiring(void) {
    for (int k = 0; k < N_TYPES; k++) {
        const qtype *t = &types[k];
        const rg_quant_ops *ops = rg_quant_get(t->id);
        RG_CHECK(ops->dequant == t->deq && ops->dequant_ref == t->deq_ref, "%s dequant entries", t->name);
        RG_CHECK(ops->quantize == t->quant, "%s quantize entry", t->name);
        RG_CHECK(ops->vec_dot == t->dot && ops->vec_dot_ref == t->dot_ref, "%s vec_dot entries", t->name);
        RG_CHECK(rg_type_row_size(t->id, 4096) == row_bytes(t, 4096), "%s row size", t->name);
    }
    const rg_quant_ops *q81 = rg_quant_get(RG_TYPE_Q8_1), *q8k = rg_quant_get(RG_TYPE_Q8_K);
    RG_CHECK(q81->quantize == rg_quantize_row_q8_1, "q8_1 quantize entry");
    RG_CHECK(q8k->quantize == rg_quantize_row_q8_K && q8k->dequant == rg_dequant_row_q8_K &&
                 q8k->dequant_ref == rg_dequant_row_q8_K_ref,
             "q8_K entries");
    RG_CHECK(rg_type_row_size(RG_TYPE_Q8_1, 64) == 72 && rg_type_row_size(RG_TYPE_Q8_K, 256) == 292,
             "activation row sizes");
}

// ---------------------------------------------------------------------------
// AVX2 == reference

// Compares dispatched and reference dequantization of nblocks blocks at b.
static int compare_dequant(const char *name, rg_dequant_fn a, rg_dequant_fn r, const uint8_t *b, int64_t n, float *ya,
                           float *yr, const char *what) {
    a(b, ya, n);
    r(b, yr, n);
    for (int64_t i = 0; i < n; i++) {
        if (!same_float(ya[i], yr[i])) {
            RG_CHECK(0, "%s %s: element %lld: AVX2 %08x, reference %08x", name, what, (long long)i, bits_of(ya[i]),
                     bits_of(yr[i]));
            return 0;
        }
    }
    return 1;
}

static void test_avx2_dequant_bitexact(void) {
    if (!rg_cpu_has_avx2()) RG_SKIP("CPU lacks AVX2/FMA/F16C: the dispatched dequantizers are the reference");
    if (!rg_quant_legacy_avx2_built || !rg_quant_k_avx2_built) RG_SKIP("the *_avx2.c files were built without -mavx2");
    const int64_t n = quick_mode() ? 4096 : 65536;
    float *x = malloc(sizeof(float) * (size_t)n), *ya = malloc(sizeof(float) * (size_t)n),
          *yr = malloc(sizeof(float) * (size_t)n);
    uint8_t *b = malloc((size_t)n / 256 * 292 + 64);
    RG_REQUIRE(x && ya && yr && b, "out of memory");
    for (int k = 0; k < N_TYPES; k++) {
        const qtype *t = &types[k];
        const int64_t nb = n / t->qk;
        weights_row(x, n, 11, (uint64_t)k);
        t->quant(x, b, n, NULL);
        compare_dequant(t->name, t->deq, t->deq_ref, b, n, ya, yr, "quantized weights");
        for (int rep = 0; rep < 3; rep++) {  // any bits at all: NaN/Inf/subnormal scales
            random_bytes(b, row_bytes(t, n), 100 + (uint64_t)(k * 10 + rep));
            compare_dequant(t->name, t->deq, t->deq_ref, b, n, ya, yr, "random bytes");
        }
        random_bytes(b, row_bytes(t, n), 200 + (uint64_t)k);
        sane_scales(t, b, nb, 300 + (uint64_t)k);
        compare_dequant(t->name, t->deq, t->deq_ref, b, n, ya, yr, "random bytes, finite scales");
    }
    // Q8_K (f32 d)
    weights_row(x, n, 12, 0);
    rg_quantize_row_q8_K(x, b, n, NULL);
    compare_dequant("q8_K", rg_dequant_row_q8_K, rg_dequant_row_q8_K_ref, b, n, ya, yr, "quantized");
    random_bytes(b, (size_t)n / 256 * 292, 400);
    compare_dequant("q8_K", rg_dequant_row_q8_K, rg_dequant_row_q8_K_ref, b, n, ya, yr, "random bytes");
    free(x), free(ya), free(yr), free(b);
}

// Activation inputs that stress the quantizers: Gaussian, NaN, ±Inf, huge,
// subnormal, values whose 1/d overflows, exact ties (k + 0.5 after scaling).
static void act_input(float *x, int64_t n, int kind, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) x[i] = rg_rng_normal(seed, (uint64_t)kind, (uint64_t)i);
    for (int64_t i = 0; i < n; i++) {
        const float u = rg_rng_uniform(seed ^ 0xABCD, (uint64_t)kind, (uint64_t)i);
        switch (kind) {
            case 1:
                if (u < 0.01f) x[i] = NAN;
                break;
            case 2:
                if (u < 0.01f) x[i] = u < 0.005f ? INFINITY : -INFINITY;
                break;
            case 3:
                x[i] *= 3e38f;
                break;
            case 4:
                x[i] *= 1e-39f;
                break;  // subnormal
            case 5:
                x[i] *= 1e-37f;
                break;  // normal, but 1/d or −127/max overflows
            case 6:
                x[i] = (float)((int)(u * 64.0f) - 32) * 0.5f;
                break;  // many exact halves: roundf ties
            case 7:
                x[i] = 0.0f;
                break;
            case 8:
                x[i] = u < 0.5f ? -0.0f : x[i];
                break;
            default:
                break;
        }
    }
}

static void test_avx2_activation_quantize_bitexact(void) {
    if (!rg_cpu_has_avx2()) RG_SKIP("CPU lacks AVX2/FMA/F16C: the dispatched quantizers are the reference");
    if (!rg_quant_legacy_avx2_built || !rg_quant_k_avx2_built) RG_SKIP("the *_avx2.c files were built without -mavx2");
    const int64_t n = quick_mode() ? 2048 : 16384;
    float *x = malloc(sizeof(float) * (size_t)n);
    const size_t cap = (size_t)n / 256 * 292;  // the largest of the three rows (Q8_K > Q8_1 > Q8_0)
    uint8_t *a = malloc(cap), *r = malloc(cap);
    RG_REQUIRE(x && a && r, "out of memory");
    for (int kind = 0; kind <= 8; kind++) {
        act_input(x, n, kind, 5);
        rg_quantize_row_q8_0(x, a, n, NULL);
        rg_quantize_row_q8_0_ref(x, r, n);
        RG_CHECK(memcmp(a, r, (size_t)n / 32 * 34) == 0, "q8_0 AVX2 bytes differ (input kind %d)", kind);
        rg_quantize_row_q8_1(x, a, n, NULL);
        rg_quantize_row_q8_1_ref(x, r, n);
        RG_CHECK(memcmp(a, r, (size_t)n / 32 * 36) == 0, "q8_1 AVX2 bytes differ (input kind %d)", kind);
        rg_quantize_row_q8_K(x, a, n, NULL);
        rg_quantize_row_q8_K_ref(x, r, n);
        RG_CHECK(memcmp(a, r, (size_t)n / 256 * 292) == 0, "q8_K AVX2 bytes differ (input kind %d)", kind);
    }
    free(x), free(a), free(r);
}

// Q8_1's s is fp16(Σq·d); Q8_K's bsums are the sums of 16 quants; Q8_K's
// round trip keeps the f32 d.
static void test_activation_fields(void) {
    const int64_t n = 1024;
    float x[1024], y[1024];
    uint8_t b[1024 / 256 * 292];
    act_input(x, n, 0, 8);
    rg_quantize_row_q8_1(x, b, n, NULL);
    for (int64_t i = 0; i < n / 32; i++) {
        const uint8_t *q = b + 36 * i;
        int sum = 0;
        float amax = 0;
        for (int j = 0; j < 32; j++) sum += (int8_t)q[4 + j], amax = fmaxf(amax, fabsf(x[32 * i + j]));
        RG_CHECK(rg_rd16(q + 2) == rg_fp32_to_fp16((float)sum * (amax / 127.0f)), "q8_1 block %lld s field",
                 (long long)i);
    }
    rg_quantize_row_q8_K(x, b, n, NULL);
    for (int64_t i = 0; i < n / 256; i++)
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += (int8_t)b[292 * i + 4 + 16 * g + l];
            RG_CHECK((int16_t)rg_rd16(b + 292 * i + 260 + 2 * g) == sum, "q8_K block %lld bsum %d", (long long)i, g);
        }
    rg_dequant_row_q8_K(b, y, n);
    RG_CHECK(rel_rmse(x, y, n) < 0.008, "q8_K round trip rel RMSE %.5f (measured 0.0058)", rel_rmse(x, y, n));
}

// ---------------------------------------------------------------------------
// Round-trip accuracy

static void test_roundtrip_rmse(void) {
    const int64_t n = 4096;
    const int rows = quick_mode() ? 2 : 8;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    uint8_t *b = malloc(row_bytes(&types[4], n));
    RG_REQUIRE(x && y && b, "out of memory");
    printf("    type   rel RMSE   bound\n");
    for (int k = 0; k < N_TYPES; k++) {
        const qtype *t = &types[k];
        double e = 0, s = 0;
        for (int r = 0; r < rows; r++) {
            weights_row(x, n, 21, (uint64_t)r);
            RG_CHECK(t->quant(x, b, n, NULL) == row_bytes(t, n), "%s bytes written", t->name);
            t->deq(b, y, n);
            for (int64_t i = 0; i < n; i++)
                e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]), s += (double)x[i] * x[i];
        }
        const double rel = sqrt(e / s);
        printf("    %-5s  %.5f    %.4f\n", t->name, rel, t->rmse_max);
        RG_CHECK(rel < t->rmse_max, "%s relative RMSE %.5f >= bound %.4f", t->name, rel, t->rmse_max);
    }
    free(x), free(y), free(b);
}

// ---------------------------------------------------------------------------
// Importance matrix

static void test_imatrix(void) {
    const int64_t n = 4096;
    const int rows = quick_mode() ? 2 : 6;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
    float *ones = malloc(sizeof(float) * n);
    uint8_t *b = malloc(row_bytes(&types[4], n));
    RG_REQUIRE(x && y && w && ones && b, "out of memory");
    // Non-uniform importance, like an activation's mean square: log-normal-ish,
    // a few columns 100x more important.
    for (int64_t i = 0; i < n; i++) {
        const float g = rg_rng_normal(31, 0, (uint64_t)i);
        w[i] = expf(1.5f * g);
        if (rg_rng_uniform(31, 1, (uint64_t)i) < 0.01f) w[i] *= 100.0f;
        ones[i] = 1.0f;
    }
    printf("    type   weighted err: none     imatrix    ratio | rel RMSE: none   ones\n");
    for (int k = 0; k < N_TYPES; k++) {
        const qtype *t = &types[k];
        double e_none = 0, e_imat = 0, r_none = 0, r_ones = 0, s = 0;
        for (int r = 0; r < rows; r++) {
            weights_row(x, n, 41, (uint64_t)r);
            t->quant(x, b, n, NULL);
            t->deq(b, y, n);
            for (int64_t i = 0; i < n; i++) {
                const double d = (double)x[i] - y[i];
                e_none += w[i] * d * d, r_none += d * d, s += (double)x[i] * x[i];
            }
            t->quant(x, b, n, w);
            t->deq(b, y, n);
            for (int64_t i = 0; i < n; i++) e_imat += w[i] * ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            RG_CHECK(t->quant(x, b, n, ones) == row_bytes(t, n), "%s bytes written", t->name);
            t->deq(b, y, n);
            for (int64_t i = 0; i < n; i++) r_ones += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        }
        const double rn = sqrt(r_none / s), ro = sqrt(r_ones / s);
        printf("    %-5s  %.4e  %.4e  %.3f |           %.5f  %.5f\n", t->name, e_none, e_imat, e_imat / e_none, rn, ro);
        RG_CHECK(e_imat <= e_none * 1.0000001, "%s: weighted error with imatrix %.4e > without %.4e", t->name, e_imat,
                 e_none);
        // All-ones importance: still a good quantization (within the type's bound,
        // and not far from the plain reference).
        RG_CHECK(ro < t->rmse_max && ro < rn * 1.15, "%s: rel RMSE with all-ones imatrix %.5f (none %.5f)", t->name, ro,
                 rn);
    }
    free(x), free(y), free(w), free(ones), free(b);
}

// ---------------------------------------------------------------------------
// Dot products

// Checks ref and dispatched vec_dot of quantized x (row x_f) and activation y_f.
static void check_dot(const qtype *t, const float *xf, const float *yf, int64_t n, const char *what) {
    uint8_t *bx = canary_alloc(row_bytes(t, n)), *by = canary_alloc(act_bytes(t->vt, n));
    float *xd = malloc(sizeof(float) * (size_t)n), *yd = malloc(sizeof(float) * (size_t)n);
    if (!bx || !by || !xd || !yd) {
        RG_CHECK(0, "out of memory");
        free(bx), free(by), free(xd), free(yd);
        return;
    }
    t->quant(xf, bx, n, NULL);
    act_quantize(t->vt, yf, by, n);
    t->deq_ref(bx, xd, n);
    act_dequant(t->vt, by, yd, n);
    double exact = 0, mag = 0, act_err = 0, f32dot = 0;
    for (int64_t i = 0; i < n; i++) {
        exact += (double)xd[i] * yd[i];
        mag += fabs((double)xd[i] * yd[i]);
        f32dot += (double)xd[i] * yf[i];
        act_err += fabs((double)xd[i]) * fabs((double)yf[i] - yd[i]);  // bound on |exact − f32dot|
    }
    if (t->vt == VT_Q8_1) {
        // Q4_1/Q5_1 · Q8_1 takes the min term as m_x·s_y, and s_y = fp16(d_y·Σq_y)
        // is rounded: the exact dot of the stored operands uses s, not d_y·Σq_y.
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *qx = bx + (size_t)b * (size_t)t->bytes, *qy = by + 36 * b;
            int sumq = 0;
            for (int j = 0; j < 32; j++) sumq += (int8_t)qy[4 + j];
            const double m = rg_fp16_to_fp32(rg_rd16(qx + 2));
            const double corr =
                m * ((double)rg_fp16_to_fp32(rg_rd16(qy + 2)) - (double)rg_fp16_to_fp32(rg_rd16(qy)) * sumq);
            exact += corr;
            act_err += fabs(corr);
        }
    }
    float sr = NAN, sa = NAN;
    t->dot_ref(n, &sr, bx, by);
    t->dot(n, &sa, bx, by);
    const double tol_r = 1e-5 * mag + 1e-30, tol_a = 1e-4 * mag + 1e-30;
    RG_CHECK(fabs(sr - exact) <= tol_r, "%s %s n=%lld: ref dot %.9g, exact %.9g (|err| %.3g > %.3g)", t->name, what,
             (long long)n, sr, exact, fabs(sr - exact), tol_r);
    RG_CHECK(fabs(sa - exact) <= tol_a, "%s %s n=%lld: dispatched dot %.9g, exact %.9g (|err| %.3g > %.3g)", t->name,
             what, (long long)n, sa, exact, fabs(sa - exact), tol_a);
    RG_CHECK(fabs(sa - f32dot) <= act_err + tol_a, "%s %s: dot %.9g vs f32 dot %.9g beyond the activation error %.3g",
             t->name, what, sa, f32dot, act_err);
    if (t->qk == 256 && rg_cpu_has_avx2())  // K-quants: same integers, same f32 expression
        RG_CHECK(bits_of(sa) == bits_of(sr), "%s %s: AVX2 dot %.9g != reference %.9g", t->name, what, sa, sr);
    RG_CHECK(canary_ok(bx, row_bytes(t, n)) && canary_ok(by, act_bytes(t->vt, n)), "%s: write past the end", t->name);
    free(bx), free(by), free(xd), free(yd);
}

static void test_vec_dot(void) {
    const int64_t n = quick_mode() ? 2048 : 8192;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    RG_REQUIRE(x && y, "out of memory");
    for (int k = 0; k < N_TYPES; k++) {
        const qtype *t = &types[k];
        for (int r = 0; r < 3; r++) {
            weights_row(x, n, 51, (uint64_t)(k * 3 + r));
            for (int64_t i = 0; i < n; i++)
                y[i] = rg_rng_normal(52, (uint64_t)(k * 3 + r), (uint64_t)i) * (r == 2 ? 30.0f : 1.0f);
            check_dot(t, x, y, n, "gaussian");
            check_dot(t, x, y, t->qk, "one block");
        }
        for (int64_t i = 0; i < n; i++) y[i] = fabsf(y[i]);  // one sign: no cancellation to hide errors
        check_dot(t, x, y, n, "positive activations");
    }
    free(x), free(y);
}

// Random bytes on both sides (finite scales): AVX2 and reference dots agree
// (bit for bit for the K-quants), and neither crashes on any level pattern.
static void test_vec_dot_random_bytes(void) {
    const int64_t n = 4096;
    uint8_t *bx = malloc((size_t)n / 32 * 34), *by = malloc((size_t)n / 32 * 36 + 292 * 16);
    RG_REQUIRE(bx && by, "out of memory");
    for (int k = 0; k < N_TYPES; k++) {
        const qtype *t = &types[k];
        for (int rep = 0; rep < 4; rep++) {
            random_bytes(bx, row_bytes(t, n), 600 + (uint64_t)(k * 4 + rep));
            sane_scales(t, bx, n / t->qk, 700 + (uint64_t)(k * 4 + rep));
            const size_t yb = act_bytes(t->vt, n);
            random_bytes(by, yb, 800 + (uint64_t)(k * 4 + rep));
            // Activation scales: f16 d (and s) or f32 d, finite and moderate.
            double bound = 0;  // Σ over blocks of |terms|, for the tolerance
            if (t->vt == VT_Q8_K) {
                for (int64_t i = 0; i < n / 256; i++) rg_wr32(by + 292 * i, bits_of(0.01f * (float)(i + 1)));
            } else {
                const int sz = t->vt == VT_Q8_0 ? 34 : 36;
                for (int64_t i = 0; i < n / 32; i++) {
                    rg_wr16(by + sz * i, rg_fp32_to_fp16(0.01f * (float)(i % 7 + 1)));
                    if (sz == 36) rg_wr16(by + sz * i + 2, rg_fp32_to_fp16(-0.5f * (float)(i % 5)));
                }
            }
            float *xd = malloc(sizeof(float) * (size_t)n), *yd = malloc(sizeof(float) * (size_t)n);
            RG_REQUIRE(xd && yd, "out of memory");
            t->deq_ref(bx, xd, n);
            act_dequant(t->vt, by, yd, n);
            for (int64_t i = 0; i < n; i++) bound += fabs((double)xd[i] * yd[i]);
            free(xd), free(yd);
            float sr = NAN, sa = NAN;
            t->dot_ref(n, &sr, bx, by);
            t->dot(n, &sa, bx, by);
            RG_CHECK(isfinite(sr) && isfinite(sa), "%s: non-finite dot %g %g", t->name, sr, sa);
            if (t->qk == 256 && rg_cpu_has_avx2())
                RG_CHECK(bits_of(sa) == bits_of(sr), "%s: AVX2 dot %.9g != reference %.9g", t->name, sa, sr);
            else  // legacy: only the f32 summation order differs (plus the m·s terms of Q4_1/Q5_1)
                RG_CHECK(fabs((double)sa - sr) <= 1e-4 * (bound + 4096.0), "%s: AVX2 dot %.9g, reference %.9g", t->name,
                         sa, sr);
        }
    }
    free(bx), free(by);
}

// ---------------------------------------------------------------------------
// Edge cases

typedef struct edge_row {
    const char *what;
    int kind;
} edge_row;

static void edge_input(float *x, int64_t n, int kind) {
    for (int64_t i = 0; i < n; i++) {
        const float g = 0.02f * rg_rng_normal(61, (uint64_t)kind, (uint64_t)i);
        switch (kind) {
            case 0:
                x[i] = 0.0f;
                break;  // all zero
            case 1:
                x[i] = 0.3125f;
                break;  // constant
            case 2:
                x[i] = -0.3125f;
                break;  // negative constant
            case 3:
                x[i] = i == n / 3 ? 50.0f : g;
                break;  // one huge outlier
            case 4:
                x[i] = -fabsf(g) - 0.001f;
                break;  // negative only
            case 5:
                x[i] = 1e-30f * rg_rng_normal(61, 5, (uint64_t)i);
                break;  // tiny
            case 6:
                x[i] = i % 37 == 5 ? NAN : g;
                break;  // NaN inside
            case 7:
                x[i] = i % 41 == 7 ? (i & 1 ? INFINITY : -INFINITY) : g;
                break;
            case 8:
                x[i] = 3e38f * rg_rng_normal(61, 8, (uint64_t)i);
                break;  // near FLT_MAX (sums overflow)
            default:
                x[i] = g;
                break;
        }
    }
}

static void test_edge_cases(void) {
    static const edge_row rows[] = {{"all-zero", 0},         {"constant", 1},      {"negative constant", 2},
                                    {"one huge outlier", 3}, {"negative-only", 4}, {"tiny (1e-30)", 5},
                                    {"NaN inside", 6},       {"Inf inside", 7},    {"near FLT_MAX", 8}};
    for (int k = 0; k < N_TYPES; k++) {
        const qtype *t = &types[k];
        const int64_t sizes[2] = {t->qk, 64 * (int64_t)t->qk};  // one block, 64 blocks
        for (int si = 0; si < 2; si++) {
            const int64_t n = sizes[si];
            float *x = malloc(sizeof(float) * (size_t)n), *y = canary_alloc(sizeof(float) * (size_t)n);
            float *y2 = canary_alloc(sizeof(float) * (size_t)n);
            uint8_t *b = canary_alloc(row_bytes(t, n));
            float *w = malloc(sizeof(float) * (size_t)n);  // a mildly non-uniform importance
            RG_REQUIRE(x && y && y2 && b && w, "out of memory");
            for (int64_t i = 0; i < n; i++) w[i] = 0.5f + (float)(i % 3);
            for (size_t e = 0; e < sizeof rows / sizeof rows[0]; e++) {
                edge_input(x, n, rows[e].kind);
                for (int imat = 0; imat < 2; imat++) {
                    const size_t got = t->quant(x, b, n, imat ? w : NULL);
                    t->deq(b, y, n);
                    t->deq_ref(b, y2, n);
                    RG_CHECK(got == row_bytes(t, n), "%s %s: returned %zu bytes", t->name, rows[e].what, got);
                    RG_CHECK(canary_ok(b, row_bytes(t, n)) && canary_ok(y, sizeof(float) * (size_t)n) &&
                                 canary_ok(y2, sizeof(float) * (size_t)n),
                             "%s %s n=%lld: write past the end", t->name, rows[e].what, (long long)n);
                    int finite = 1, same = 1;
                    for (int64_t i = 0; i < n; i++) finite &= isfinite(y[i]) != 0, same &= same_float(y[i], y2[i]);
                    // Non-finite inputs (kinds 6-8) only have to go through without
                    // undefined behaviour or stray writes; what they decode to is garbage.
                    RG_CHECK(finite || rows[e].kind >= 6, "%s %s: non-finite output", t->name, rows[e].what);
                    RG_CHECK(same, "%s %s: dispatched and reference dequantization differ", t->name, rows[e].what);
                    const double rel = rel_rmse(x, y, n);
                    const char *mode = imat ? "imatrix" : "plain";
                    switch (rows[e].kind) {
                        case 0:
                            for (int64_t i = 0; i < n; i++)
                                RG_CHECK(y[i] == 0.0f, "%s all-zero (%s): y_%lld = %g", t->name, mode, (long long)i,
                                         y[i]);
                            break;
                        case 1:
                        case 2:  // a constant is represented nearly exactly (fp16 and 6-bit scale rounding)
                            RG_CHECK(rel < 0.02, "%s %s (%s): rel RMSE %.5f", t->name, rows[e].what, mode, rel);
                            break;
                        case 3: {
                            RG_CHECK(rel < t->rmse_max, "%s outlier (%s): rel RMSE %.5f", t->name, mode, rel);
                            const double oe = fabs((double)y[n / 3] - 50.0);
                            RG_CHECK(oe < 50.0 * 0.15, "%s outlier (%s): 50 -> %g", t->name, mode, y[n / 3]);
                            break;
                        }
                        case 4:
                            RG_CHECK(rel < t->rmse_max, "%s negative-only (%s): rel RMSE %.5f", t->name, mode, rel);
                            break;
                        case 5:  // fp16 scales underflow: everything decodes to (signed) zero or close to x
                            for (int64_t i = 0; i < n; i++)
                                RG_CHECK(fabsf(y[i]) <= 1e-29f, "%s tiny (%s): y_%lld = %g", t->name, mode,
                                         (long long)i, y[i]);
                            break;
                    }
                }
            }
            free(x), free(y), free(y2), free(b), free(w);
        }
    }
}

static const rg_test_case cases[] = {
    RG_TEST(test_spec_input),
    RG_TEST(test_spec_q4_0),
    RG_TEST(test_spec_q8_0),
    RG_TEST(test_spec_q4_K),
    RG_TEST(test_table_wiring),
    RG_TEST(test_avx2_dequant_bitexact),
    RG_TEST(test_avx2_activation_quantize_bitexact),
    RG_TEST(test_activation_fields),
    RG_TEST(test_roundtrip_rmse),
    RG_TEST(test_imatrix),
    RG_TEST(test_vec_dot),
    RG_TEST(test_vec_dot_random_bytes),
    RG_TEST(test_edge_cases),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
