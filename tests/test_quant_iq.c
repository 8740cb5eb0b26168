// test_quant_iq.c - the IQ, ternary, FP4 and low-bit types (quant_iq.c,
// quant_iq4*.c, quant_tq.c, quant_fp4.c, quant_lowbit.c) against the spec
// (shared/spec/gguf-and-types.md §3.4–3.6, §4.3–4.6, §5.5, §5.6):
//   - the imported IQ grids: SHA-256 of their little-endian bytes (§4.6), the
//     ksigns formula, the value sets, and the kvalues tables;
//   - every dequantizer (ref and dispatched) against a second, deliberately
//     simple per-element implementation of the §4 formulas written here, on
//     hand-built blocks with values worked out by hand and on thousands of
//     random-byte blocks per type (bit for bit; NaN matches any NaN);
//   - SHA-256 vectors recorded from gguf-py (the `gguf` package) for the
//     dequantizers it has and for the TQ1_0 / TQ2_0 / MXFP4 quantizers, from
//     gguf-py's own UE4M3 encoder for NVFP4, and from an f32 emulation of §5.5
//     for the rest (IQ4_NL, IQ4_XS with and without imatrix, Q1_0, Q2_0);
//   - the AVX2 IQ4 kernels give the references' bits;
//   - quantize -> dequantize error (RMSE) bounds, idempotence where §5.5
//     implies it, edge blocks, and dot products against double precision.
// RG_TEST_QUICK=1 (sanitizer builds) uses fewer random blocks.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "tensor/quant/quant_iq_grids.h"

// ---------------------------------------------------------------------------
// The functions under test (named directly, so that a static link pulls them in).

#define DECL_DEQ(t)                                         \
    void rg_dequant_row_##t(const void *, float *, int64_t); \
    void rg_dequant_row_##t##_ref(const void *, float *, int64_t);
#define DECL_DOT(t, v)                                                          \
    void rg_vec_dot_##t##_##v(int64_t, float *, const void *, const void *); \
    void rg_vec_dot_##t##_##v##_ref(int64_t, float *, const void *, const void *);
#define DECL_Q(t) size_t rg_quantize_row_##t(const float *, void *, int64_t, const float *);

DECL_DEQ(iq2_xxs) DECL_DOT(iq2_xxs, q8_k)
DECL_DEQ(iq2_xs) DECL_DOT(iq2_xs, q8_k)
DECL_DEQ(iq2_s) DECL_DOT(iq2_s, q8_k)
DECL_DEQ(iq3_xxs) DECL_DOT(iq3_xxs, q8_k)
DECL_DEQ(iq3_s) DECL_DOT(iq3_s, q8_k)
DECL_DEQ(iq1_s) DECL_DOT(iq1_s, q8_k)
DECL_DEQ(iq1_m) DECL_DOT(iq1_m, q8_k)
DECL_DEQ(iq4_nl) DECL_DOT(iq4_nl, q8_0) DECL_Q(iq4_nl)
DECL_DEQ(iq4_xs) DECL_DOT(iq4_xs, q8_k) DECL_Q(iq4_xs)
DECL_DEQ(tq1_0) DECL_DOT(tq1_0, q8_k) DECL_Q(tq1_0)
DECL_DEQ(tq2_0) DECL_DOT(tq2_0, q8_k) DECL_Q(tq2_0)
DECL_DEQ(mxfp4) DECL_DOT(mxfp4, q8_0) DECL_Q(mxfp4)
DECL_DEQ(nvfp4) DECL_DOT(nvfp4, q8_0) DECL_Q(nvfp4)
DECL_DEQ(q1_0) DECL_DOT(q1_0, q8_0) DECL_Q(q1_0)
DECL_DEQ(q2_0) DECL_DOT(q2_0, q8_0) DECL_Q(q2_0)

// The AVX2 kernels of quant_iq4_avx2.c.
extern const int rg_quant_iq4_avx2_built;
void rg_dequant_row_iq4_nl_avx2(const void *src, float *dst, int64_t n);
void rg_dequant_row_iq4_xs_avx2(const void *src, float *dst, int64_t n);
void rg_vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void rg_vec_dot_iq4_xs_q8_k_avx2(int64_t n, float *s, const void *x, const void *y);

// ---------------------------------------------------------------------------
// Small helpers: SHA-256, a deterministic generator, byte access.

typedef struct sha256 {
    uint32_t h[8];
    uint8_t buf[64];
    uint64_t len;
} sha256;

static uint32_t ror32(uint32_t x, int r) { return x >> r | x << (32 - r); }

static void sha256_block(sha256 *s, const uint8_t *p) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64], a[8];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        const uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(a, s->h, sizeof a);
    for (int i = 0; i < 64; i++) {
        const uint32_t t1 = a[7] + (ror32(a[4], 6) ^ ror32(a[4], 11) ^ ror32(a[4], 25)) + ((a[4] & a[5]) ^ (~a[4] & a[6])) + k[i] + w[i];
        const uint32_t t2 = (ror32(a[0], 2) ^ ror32(a[0], 13) ^ ror32(a[0], 22)) + ((a[0] & a[1]) ^ (a[0] & a[2]) ^ (a[1] & a[2]));
        memmove(a + 1, a, 7 * sizeof a[0]);
        a[4] += t1;
        a[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) s->h[i] += a[i];
}

static void sha256_init(sha256 *s) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->len = 0;
}

static void sha256_update(sha256 *s, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        s->buf[s->len % 64] = p[i];
        if (++s->len % 64 == 0) sha256_block(s, s->buf);
    }
}

// The digest as 64 lowercase hex characters.
static void sha256_hex(sha256 *s, char out[65]) {
    const uint64_t bits = s->len * 8;
    const uint8_t one = 0x80, zero = 0;
    sha256_update(s, &one, 1);
    while (s->len % 64 != 56) sha256_update(s, &zero, 1);
    for (int i = 7; i >= 0; i--) {
        const uint8_t b = (uint8_t)(bits >> (8 * i));
        sha256_update(s, &b, 1);
    }
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", s->h[i]);
}

static void sha256_of(const void *data, size_t n, char out[65]) {
    sha256 s;
    sha256_init(&s);
    sha256_update(&s, data, n);
    sha256_hex(&s, out);
}

// SHA-256 of floats serialized little-endian.
static void sha256_floats(const float *x, size_t n, char out[65]) {
    sha256 s;
    sha256_init(&s);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        const uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        sha256_update(&s, b, 4);
    }
    sha256_hex(&s, out);
}

// splitmix64
static uint64_t rng_state;
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) * 0x1p-53; }
static double rng_gauss(void) {
    double u = rng_uniform(), v = rng_uniform();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static int quick_mode(void) {
    const char *s = getenv("RG_TEST_QUICK");
    return s && *s && strcmp(s, "0") != 0;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static int same_float(float a, float b) { return fbits(a) == fbits(b) || (isnan(a) && isnan(b)); }

static uint16_t u16le(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32le(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static float h2f(const uint8_t *p) { return rg_fp16_to_fp32(u16le(p)); }
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)v), put16(p + 2, (uint16_t)(v >> 16)); }

// ---------------------------------------------------------------------------
// The spec's constants, typed in again from §3.5, §4.4, §4.6.

static const int8_t spec_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int8_t spec_kvalues_fp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// §4.6: ksigns_iq2xs[i] = i | (popcount(i) & 1) << 7.
static int ksign(int i) {
    int pop = 0;
    for (int b = 0; b < 7; b++) pop += (i >> b) & 1;
    return i | (pop & 1) << 7;
}

static int gbyte(uint64_t entry, int j) { return (int)((entry >> (8 * j)) & 0xFF); }

// ---------------------------------------------------------------------------
// The per-element formulas of §4, one element e of a block b at a time.

static float signed_mul(float v, int neg) { return neg ? v * -1.0f : v; }

static float e_iq2_xxs(const uint8_t *b, int e) {
    const int ib = e / 32, l = e % 32 / 8, j = e % 8;
    const uint32_t a0 = u32le(b + 2 + 8 * ib), a1 = u32le(b + 6 + 8 * ib);
    const float db = h2f(b) * (0.5f + (float)(a1 >> 28)) * 0.25f;
    const int g = gbyte(rg_iq2xxs_grid[(a0 >> (8 * l)) & 255], j);
    return signed_mul(db * (float)g, (ksign((int)(a1 >> (7 * l)) & 127) >> j) & 1);
}

static float e_iq2_xs(const uint8_t *b, int e) {
    const int ib = e / 32, l = e % 32 / 8, j = e % 8;
    const uint16_t v = u16le(b + 2 + 2 * (4 * ib + l));
    const int s = (b[66 + ib] >> (4 * (l / 2))) & 15;
    const float db = h2f(b) * (0.5f + (float)s) * 0.25f;
    return signed_mul(db * (float)gbyte(rg_iq2xs_grid[v & 511], j), (ksign(v >> 9) >> j) & 1);
}

static float e_iq2_s(const uint8_t *b, int e) {
    const int ib = e / 32, l = e % 32 / 8, j = e % 8;
    const int idx = b[2 + 4 * ib + l] | ((b[66 + ib] >> (2 * l)) & 3) << 8;
    const int s = (b[74 + ib] >> (4 * (l / 2))) & 15;
    const float db = h2f(b) * (0.5f + (float)s) * 0.25f;
    return signed_mul(db * (float)gbyte(rg_iq2s_grid[idx], j), (b[34 + 4 * ib + l] >> j) & 1);
}

static float e_iq3_xxs(const uint8_t *b, int e) {
    const int ib = e / 32, l = e % 32 / 8, j = e % 8;
    const uint32_t a = u32le(b + 66 + 4 * ib);
    const float db = h2f(b) * (0.5f + (float)(a >> 28)) * 0.5f;
    const int g = gbyte(rg_iq3xxs_grid[b[2 + 8 * ib + 2 * l + j / 4]], j % 4);
    return signed_mul(db * (float)g, (ksign((int)(a >> (7 * l)) & 127) >> j) & 1);
}

static float e_iq3_s(const uint8_t *b, int e) {
    const int ib = e / 32, l = e % 32 / 8, j = e % 8, k = 2 * l + j / 4;
    const int s = (b[106 + ib / 2] >> (4 * (ib % 2))) & 15;
    const float db = h2f(b) * (float)(1 + 2 * s);
    const int idx = b[2 + 8 * ib + k] | ((b[66 + ib] >> k) & 1) << 8;
    return signed_mul(db * (float)gbyte(rg_iq3s_grid[idx], j % 4), (b[74 + 4 * ib + l] >> j) & 1);
}

static float e_iq1_s(const uint8_t *b, int e) {
    const int ib = e / 32, l = e % 32 / 8, j = e % 8;
    const uint16_t h = u16le(b + 34 + 2 * ib);
    const float dl = h2f(b) * (float)(2 * ((h >> 12) & 7) + 1);
    const float delta = (h & 0x8000) ? -0.125f : 0.125f;
    const int g = (int8_t)gbyte(rg_iq1s_grid[b[2 + 4 * ib + l] | ((h >> (3 * l)) & 7) << 8], j);
    return dl * ((float)g + delta);
}

static float e_iq1_m(const uint8_t *b, int e) {
    const int ib = e / 32, g = e % 32 / 8, j = e % 8;
    uint16_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = u16le(b + 48 + 2 * k);
    const uint16_t dbits = (uint16_t)((sc[0] >> 12) | (sc[1] >> 12) << 4 | (sc[2] >> 12) << 8 | (sc[3] >> 12) << 12);
    const float d = rg_fp16_to_fp32(dbits);
    const int sh = 6 * (ib % 2) + (g < 2 ? 0 : 3);
    const float dl = d * (float)(2 * ((sc[ib / 2] >> sh) & 7) + 1);
    const int nib = (b[32 + 2 * ib + g / 2] >> (4 * (g % 2))) & 15;
    const int v = (int8_t)gbyte(rg_iq1s_grid[b[4 * ib + g] | (nib & 7) << 8], j);
    return dl * ((float)v + ((nib & 8) ? -0.125f : 0.125f));
}

static float e_iq4_nl(const uint8_t *b, int e) {
    const int q = e < 16 ? b[2 + e] & 15 : b[2 + e - 16] >> 4;
    return h2f(b) * (float)spec_kvalues_iq4nl[q];
}

static float e_iq4_xs(const uint8_t *b, int e) {
    const int ib = e / 32, r = e % 32;
    const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | ((u16le(b + 2) >> (2 * ib)) & 3) << 4;
    const float dl = h2f(b) * (float)(ls - 32);
    const int q = r < 16 ? b[8 + 16 * ib + r] & 15 : b[8 + 16 * ib + r - 16] >> 4;
    return dl * (float)spec_kvalues_iq4nl[q];
}

static float e_tq1_0(const uint8_t *b, int e) {
    int byte, n;
    if (e < 160) byte = b[e % 32], n = e / 32;
    else if (e < 240) byte = b[32 + (e - 160) % 16], n = (e - 160) / 16;
    else byte = b[48 + (e - 240) % 4], n = (e - 240) / 4;
    int p = 1;
    for (int k = 0; k < n; k++) p *= 3;
    const int t = (((byte * p) % 256) * 3) >> 8;
    return (float)(t - 1) * h2f(b + 52);
}

static float e_tq2_0(const uint8_t *b, int e) {
    const int h = e / 128, n = e % 128 / 32, m = e % 32;
    return (float)(((b[32 * h + m] >> (2 * n)) & 3) - 1) * h2f(b + 64);
}

static float e_mxfp4(const uint8_t *b, int e) {
    const int q = e < 16 ? b[1 + e] & 15 : b[1 + e - 16] >> 4;
    return (float)spec_kvalues_fp4[q] * ldexpf(1.0f, (int)b[0] - 128);  // 2^(e−128), §3.4
}

static float ue4m3_ref(uint8_t u) {  // §3.6, with ldexp instead of bits
    if (u == 0 || u == 0x7F) return 0.0f;
    const int exp = (u >> 3) & 15, man = u & 7;
    return exp == 0 ? ldexpf((float)man, -9) : ldexpf(1.0f + (float)man / 8.0f, exp - 7);
}

static float e_nvfp4(const uint8_t *b, int e) {
    const int s = e / 16, r = e % 16;
    const int q = r < 8 ? b[4 + 8 * s + r] & 15 : b[4 + 8 * s + r - 8] >> 4;
    return (float)spec_kvalues_fp4[q] * (ue4m3_ref(b[s]) / 2.0f);
}

static float e_q1_0(const uint8_t *b, int e) { return (b[2 + e / 8] >> (e % 8)) & 1 ? h2f(b) : -h2f(b); }

static float e_q2_0(const uint8_t *b, int e) { return (float)(((b[2 + e / 4] >> (2 * (e % 4))) & 3) - 1) * h2f(b); }

// ---------------------------------------------------------------------------
// The types.

enum { PATCH_NONE = -1, PATCH_IQ1M = -2 };

typedef struct qtype {
    const char *name;
    uint32_t id;
    int qk, bytes;
    rg_dequant_fn deq, deq_ref;
    rg_quantize_fn quant;
    rg_vec_dot_fn dot, dot_ref;
    uint32_t vec_type;  // RG_TYPE_Q8_0 or RG_TYPE_Q8_K
    float (*elem)(const uint8_t *b, int e);
    int patch;           // offset of the f16 scale to make finite, or PATCH_*
    const char *deq_sha;  // SHA-256 of the dequantized vector blocks (see deq_vector_blocks)
    const char *deq_src;  // who computed it
} qtype;

// vt: the activation type's name in the function names (q8_0, q8_k); VT its type id.
#define T_NOQ(t, ID, QK, B, vt, VT, P, SHA, SRC)                                                                        \
    {#t, ID, QK, B, rg_dequant_row_##t, rg_dequant_row_##t##_ref, NULL, rg_vec_dot_##t##_##vt, rg_vec_dot_##t##_##vt##_ref, \
     VT, e_##t, P, SHA, SRC}
#define T_Q(t, ID, QK, B, vt, VT, P, SHA, SRC)                                                                    \
    {#t, ID, QK, B, rg_dequant_row_##t, rg_dequant_row_##t##_ref, rg_quantize_row_##t, rg_vec_dot_##t##_##vt, \
     rg_vec_dot_##t##_##vt##_ref, VT, e_##t, P, SHA, SRC}

static const qtype types[] = {
    T_NOQ(iq2_xxs, RG_TYPE_IQ2_XXS, 256, 66, q8_k, RG_TYPE_Q8_K, 0, "3875a849b236fcc9e54709263a09317706561eced1ba87794eb8833493d5d5ba", "gguf-py"),
    T_NOQ(iq2_xs, RG_TYPE_IQ2_XS, 256, 74, q8_k, RG_TYPE_Q8_K, 0, "d9102292c556f18f53cd7e7de5aa01655dbdce8625105a544b1958183b246f53", "gguf-py"),
    T_NOQ(iq2_s, RG_TYPE_IQ2_S, 256, 82, q8_k, RG_TYPE_Q8_K, 0, "daa27d6b724854a990f07e4813ec56ecd3e2d9ae8f23ce406f79350ee2498430", "gguf-py"),
    T_NOQ(iq3_xxs, RG_TYPE_IQ3_XXS, 256, 98, q8_k, RG_TYPE_Q8_K, 0, "01de61175a3a7a290b9363c5615ac4e2bef556245a7bb47ff02d122f1ec7cb54", "gguf-py"),
    T_NOQ(iq3_s, RG_TYPE_IQ3_S, 256, 110, q8_k, RG_TYPE_Q8_K, 0, "cf8401f6d1a881ae9ee3e0156a5f8efbc75f71ca70ddd96dab23b8f38f1412e1", "gguf-py"),
    T_NOQ(iq1_s, RG_TYPE_IQ1_S, 256, 50, q8_k, RG_TYPE_Q8_K, 0, "cd5548598538662af885472a64ceb55590f8a11da5aef75fc9e6b3691ea16830", "gguf-py"),
    T_NOQ(iq1_m, RG_TYPE_IQ1_M, 256, 56, q8_k, RG_TYPE_Q8_K, PATCH_IQ1M, "ab8340656cae56aa77af6ac9265d42e314cea994975bf4e670d3223120ce73e2", "gguf-py"),
    T_Q(iq4_nl, RG_TYPE_IQ4_NL, 32, 18, q8_0, RG_TYPE_Q8_0, 0, "d01058360f1f03a8199080993fc1499d717518f7f50898f5221029e64de08be5", "gguf-py"),
    T_Q(iq4_xs, RG_TYPE_IQ4_XS, 256, 136, q8_k, RG_TYPE_Q8_K, 0, "e31c3abeb2aa29c24167eab6ea397c21656f0178e069aa7ce5a7f229714ec2b3", "gguf-py"),
    T_Q(tq1_0, RG_TYPE_TQ1_0, 256, 54, q8_k, RG_TYPE_Q8_K, 52, "805a35aaf9698c96aa7336a7bc9fc10209917a0404c77a9d77b11c9e10f6f3bd", "gguf-py"),
    T_Q(tq2_0, RG_TYPE_TQ2_0, 256, 66, q8_k, RG_TYPE_Q8_K, 64, "3297a93ac200eb6486d1906964c333d1dce5edde9a3f6e3f70cbb36afde409df", "gguf-py"),
    T_Q(mxfp4, RG_TYPE_MXFP4, 32, 17, q8_0, RG_TYPE_Q8_0, PATCH_NONE, "b019e1bb515091b4816790d593c13fa62c001dba15c7648741772ec1e53e8ecf", "gguf-py"),
    T_Q(nvfp4, RG_TYPE_NVFP4, 64, 36, q8_0, RG_TYPE_Q8_0, PATCH_NONE, "1d9ee0c177011613407c8c7469d849c550806202b802043fc32c00a72079106e", "gguf-py"),
    T_Q(q1_0, RG_TYPE_Q1_0, 128, 18, q8_0, RG_TYPE_Q8_0, 0, "b5a070bef2b4c772fc4edd80a3d13723081aa40e24263227a7fdc473d7f7cc35", "f32 emulation of §4.5"),
    T_Q(q2_0, RG_TYPE_Q2_0, 64, 18, q8_0, RG_TYPE_Q8_0, 0, "03389973863393bb1a3d2af5f73ce99c7024018d36c1cddc674988c86f06dc6b", "f32 emulation of §4.5"),
};
#define NTYPES (int)(sizeof types / sizeof types[0])

static const qtype *find_type(uint32_t id) {
    for (int i = 0; i < NTYPES; i++)
        if (types[i].id == id) return &types[i];
    return NULL;
}

// Random block bytes; the f16 scale (when the type has one) made finite, |d| in [2^-7, 4).
static void random_block(const qtype *t, uint8_t *b, int sane) {
    for (int k = 0; k < t->bytes; k++) b[k] = (uint8_t)(rng_next() >> 56);
    const uint64_t v = rng_next();
    const uint16_t h = (uint16_t)((v >> 63) << 15 | (8 + ((v >> 10) & 7)) << 10 | (v & 0x3FF));
    if (!sane) return;
    if (t->patch >= 0) put16(b + t->patch, h);
    if (t->patch == PATCH_IQ1M)
        for (int k = 0; k < 4; k++) put16(b + 48 + 2 * k, (uint16_t)((u16le(b + 48 + 2 * k) & 0x0FFF) | ((h >> (4 * k)) & 15) << 12));
}

// ---------------------------------------------------------------------------
// Grids and tables

static void test_sha256_selfcheck(void) {
    char hex[65];
    sha256_of("abc", 3, hex);
    RG_CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "sha256(abc) = %s", hex);
    static uint8_t big[1000];
    memset(big, 'a', sizeof big);
    sha256_of(big, sizeof big, hex);  // several blocks and a padding block of its own
    RG_CHECK(!strcmp(hex, "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"), "sha256(1000 x a) = %s", hex);
}

static void check_grid64(const char *name, const uint64_t *g, int n, const char *want, const int *vals, int nvals) {
    uint8_t *bytes = malloc((size_t)n * 8);
    int bad_value = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 8; j++) {
            const int v = gbyte(g[i], j);
            bytes[8 * i + j] = (uint8_t)v;
            int ok = 0;
            for (int k = 0; k < nvals; k++) ok |= (uint8_t)vals[k] == v;
            bad_value += !ok;
        }
    char hex[65];
    sha256_of(bytes, (size_t)n * 8, hex);
    RG_CHECK(!strcmp(hex, want), "%s: SHA-256 %s, spec §4.6 says %s", name, hex, want);
    RG_CHECK(bad_value == 0, "%s: %d bytes outside the spec's value set", name, bad_value);
    free(bytes);
}

static void check_grid32(const char *name, const uint32_t *g, int n, const char *want, const int *vals, int nvals) {
    uint8_t *bytes = malloc((size_t)n * 4);
    int bad_value = 0;
    for (int i = 0; i < n; i++) {
        put32(bytes + 4 * i, g[i]);
        for (int j = 0; j < 4; j++) {
            int ok = 0;
            for (int k = 0; k < nvals; k++) ok |= vals[k] == bytes[4 * i + j];
            bad_value += !ok;
        }
    }
    char hex[65];
    sha256_of(bytes, (size_t)n * 4, hex);
    RG_CHECK(!strcmp(hex, want), "%s: SHA-256 %s, spec §4.6 says %s", name, hex, want);
    RG_CHECK(bad_value == 0, "%s: %d bytes outside the spec's value set", name, bad_value);
    free(bytes);
}

static void test_grids_match_spec(void) {
    static const int v2[] = {8, 25, 43}, v3xxs[] = {4, 12, 20, 28, 36, 44, 52, 62}, v3s[] = {1, 3, 5, 7, 9, 11, 13, 15};
    static const int v1[] = {0xFF, 0, 1};
    check_grid64("iq2xxs_grid", rg_iq2xxs_grid, 256, "05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54", v2, 3);
    check_grid64("iq2xs_grid", rg_iq2xs_grid, 512, "06e47aaca60b4dc1d9b5a3f34540437058a6b142b4d7a59d5ded769b4d1bf1de", v2, 3);
    check_grid64("iq2s_grid", rg_iq2s_grid, 1024, "e1aa1473412b0552c2174c30ef22ab4073f6a181b85a17056e8249bd2932fd88", v2, 3);
    check_grid32("iq3xxs_grid", rg_iq3xxs_grid, 256, "46e35f5a997efdee6c99ce57854c8a0d4f0ff8ca57e5e8a60c0793ea580acf5d", v3xxs, 8);
    check_grid32("iq3s_grid", rg_iq3s_grid, 512, "bd1af4945a1717c65610b0284e4628b9a1ba3b306fae3a06f6e5f597356e349f", v3s, 8);
    check_grid64("iq1s_grid", rg_iq1s_grid, 2048, "07540ffc1aeaf6ad4d97e96b0fcc765aae39671d4ae4a27bbd0e796fde167c6a", v1, 3);

    char hex[65];
    sha256_of(rg_ksigns_iq2xs, 128, hex);
    RG_CHECK(!strcmp(hex, "a76742a603f8beca5212ecce0f1f02f11a4887fd2f7c8b15aca0ea3eb3380c31"), "ksigns_iq2xs: SHA-256 %s", hex);
    uint8_t formula[128];
    for (int i = 0; i < 128; i++) formula[i] = (uint8_t)ksign(i);
    RG_CHECK(!memcmp(formula, rg_ksigns_iq2xs, 128), "ksigns_iq2xs differs from i | parity(i) << 7");
    sha256_of(formula, 128, hex);
    RG_CHECK(!strcmp(hex, "a76742a603f8beca5212ecce0f1f02f11a4887fd2f7c8b15aca0ea3eb3380c31"), "ksigns formula: SHA-256 %s", hex);
    for (int i = 0; i < 128; i++) {  // an even number of negative signs in every byte
        int pop = 0;
        for (int b = 0; b < 8; b++) pop += (rg_ksigns_iq2xs[i] >> b) & 1;
        RG_CHECK(pop % 2 == 0, "ksigns[%d] = 0x%02x has odd parity", i, rg_ksigns_iq2xs[i]);
    }
}

static void test_kvalues_tables(void) {
    RG_CHECK(!memcmp(rg_kvalues_iq4nl, spec_kvalues_iq4nl, 16), "rg_kvalues_iq4nl differs from §4.4");
    RG_CHECK(!memcmp(rg_kvalues_fp4, spec_kvalues_fp4, 16), "rg_kvalues_fp4 differs from §3.5");
}

// The quant table (quant.c) points at these functions.
static void test_table_wiring(void) {
    for (int i = 0; i < NTYPES; i++) {
        const qtype *t = &types[i];
        const rg_quant_ops *ops = rg_quant_get(t->id);
        RG_CHECK(ops->dequant == t->deq && ops->dequant_ref == t->deq_ref, "%s: table dequant pointers", t->name);
        RG_CHECK(ops->quantize == t->quant, "%s: table quantize pointer", t->name);
        RG_CHECK(ops->vec_dot == t->dot && ops->vec_dot_ref == t->dot_ref, "%s: table vec_dot pointers", t->name);
        RG_CHECK(ops->vec_dot_type == t->vec_type, "%s: vec_dot_type %u, expected %u", t->name, ops->vec_dot_type, t->vec_type);
    }
}

// ---------------------------------------------------------------------------
// Dequantization

// Dequantizes one block with ref, dispatched, and the per-element formula;
// checks `n` listed elements against hand-worked values and all against the formula.
static void check_hand(uint32_t id, const uint8_t *b, const int *idx, const float *want, int n) {
    const qtype *t = find_type(id);
    float y[256], z[256];
    t->deq_ref(b, y, t->qk);
    t->deq(b, z, t->qk);
    for (int k = 0; k < n; k++)
        RG_CHECK(y[idx[k]] == want[k] && z[idx[k]] == want[k] && t->elem(b, idx[k]) == want[k],
                 "%s: element %d = %.9g (dispatched %.9g, formula %.9g), expected %.9g", t->name, idx[k], y[idx[k]], z[idx[k]],
                 t->elem(b, idx[k]), want[k]);
    for (int e = 0; e < t->qk; e++)
        RG_CHECK(same_float(y[e], t->elem(b, e)) && same_float(z[e], y[e]), "%s: element %d", t->name, e);
}

static void test_dequant_hand_built(void) {
    uint8_t b[136];
    {  // IQ2_XXS: d = 1; sub-block 0: scale 3, sign index 1 (ksigns 0x81) on group 0; sub-block 1: grid 1
        memset(b, 0, sizeof b);
        put16(b, 0x3C00);
        put32(b + 6, 3u << 28 | 1);
        put32(b + 10, 1);
        const int i[] = {0, 1, 6, 7, 8, 31, 32, 33, 39, 40, 255};
        const float w[] = {-7, 7, 7, -7, 7, 7, 5.375f, 1, 1, 1, 1};
        check_hand(RG_TYPE_IQ2_XXS, b, i, w, 11);
    }
    {  // IQ2_XS: d = 2; qs[0] = grid 1 with sign index 3; scales[0] = 0x21
        memset(b, 0, sizeof b);
        put16(b, 0x4000);
        put16(b + 2, 1 | 3 << 9);
        b[66] = 0x21;
        const int i[] = {0, 1, 2, 7, 8, 15, 16, 31, 32};
        const float w[] = {-32.25f, -6, 6, 6, 6, 6, 10, 10, 2};
        check_hand(RG_TYPE_IQ2_XS, b, i, w, 9);
    }
    {  // IQ2_S: d = 1; qs[0] = 1, signs[0] = 0x80, scales 0
        memset(b, 0, sizeof b);
        put16(b, 0x3C00);
        b[2] = 1;
        b[34] = 0x80;
        const int i[] = {0, 1, 6, 7, 8};
        const float w[] = {5.375f, 1, 1, -1, 1};
        check_hand(RG_TYPE_IQ2_S, b, i, w, 5);
    }
    {  // IQ3_XXS: d = 1; qs[0] = 5 (62,12,4,4), scale 1, sign index 2 (0x82)
        memset(b, 0, sizeof b);
        put16(b, 0x3C00);
        b[2] = 5;
        put32(b + 66, 1u << 28 | 2);
        const int i[] = {0, 1, 2, 3, 4, 6, 7, 32};
        const float w[] = {46.5f, -9, 3, 3, 3, 3, -3, 1};
        check_hand(RG_TYPE_IQ3_XXS, b, i, w, 8);
    }
    {  // IQ3_S: d = 0.5; scales[0] = 1 -> db 1.5; qs[0] = 3 (11,1,1,1); signs[0] = 1
        memset(b, 0, sizeof b);
        put16(b, 0x3800);
        b[2] = 3;
        b[74] = 1;
        b[106] = 1;
        const int i[] = {0, 1, 4, 7, 32};
        const float w[] = {-16.5f, 1.5f, 1.5f, 1.5f, 0.5f};
        check_hand(RG_TYPE_IQ3_S, b, i, w, 5);
    }
    {  // IQ1_S: d = 1; qh[0] = 0x9000 (scale 1 -> dl 3, delta −1/8); qs[0] = 1 (+1, −1 ...)
        memset(b, 0, sizeof b);
        put16(b, 0x3C00);
        b[2] = 1;
        put16(b + 34, 0x9000);
        const int i[] = {0, 1, 7, 8, 31, 32};
        const float w[] = {2.625f, -3.375f, -3.375f, -3.375f, -3.375f, -0.875f};
        check_hand(RG_TYPE_IQ1_S, b, i, w, 6);
    }
    {  // IQ1_M: d = 1 spread as nibbles 0,0,C,3; sc[0] = 9 (3-bit scales 1,1 -> dl 3); qh[0] = 0x80
        memset(b, 0, sizeof b);
        put16(b + 48, 0x0009);
        put16(b + 52, 0xC000);
        put16(b + 54, 0x3000);
        b[0] = 1;
        b[32] = 0x80;
        const int i[] = {0, 1, 8, 16, 24, 32};
        const float w[] = {3.375f, -2.625f, -3.375f, -2.625f, -2.625f, -0.875f};
        check_hand(RG_TYPE_IQ1_M, b, i, w, 6);
    }
    {  // IQ4_NL: d = 1, qs[j] = j | (15 − j) << 4
        memset(b, 0, sizeof b);
        put16(b, 0x3C00);
        for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | (15 - j) << 4);
        const int i[] = {0, 7, 8, 15, 16, 31};
        const float w[] = {-127, -10, 1, 113, 113, -127};
        check_hand(RG_TYPE_IQ4_NL, b, i, w, 6);
    }
    {  // IQ4_XS: d = 0.5; ls0 = 5 | 2 << 4 = 37 -> dl 2.5; ls1 = 0 -> dl −16
        memset(b, 0, sizeof b);
        put16(b, 0x3800);
        put16(b + 2, 0x0002);
        b[4] = 0x05;
        b[8] = 0xF0;
        const int i[] = {0, 16, 1, 32, 255};
        const float w[] = {-317.5f, 282.5f, -317.5f, 2032, 2032};
        check_hand(RG_TYPE_IQ4_XS, b, i, w, 5);
    }
    {  // TQ1_0: d = 1; qs[0] = 0xFF (all trits 2), qs[1] = 0 (all 0), 0x80 elsewhere (all 1); qh[0] = 0xFF
        memset(b, 0x80, 52);
        put16(b + 52, 0x3C00);
        b[0] = 0xFF, b[1] = 0x00, b[48] = 0xFF;
        const int i[] = {0, 32, 128, 1, 33, 129, 2, 160, 240, 244, 252, 241};
        const float w[] = {1, 1, 1, -1, -1, -1, 0, 0, 1, 1, 1, 0};
        check_hand(RG_TYPE_TQ1_0, b, i, w, 12);
    }
    {  // TQ2_0: d = 2; qs[0] = 0xE4 (levels 0,1,2,3 at elements 0,32,64,96)
        memset(b, 0x55, 64);
        put16(b + 64, 0x4000);
        b[0] = 0xE4;
        const int i[] = {0, 32, 64, 96, 1, 128};
        const float w[] = {-2, 0, 2, 4, 0, 0};
        check_hand(RG_TYPE_TQ2_0, b, i, w, 6);
    }
    {  // MXFP4: e = 128 (d = 1), codes j | (15 − j) << 4; then e = 0 (d = 2^−128)
        memset(b, 0, sizeof b);
        b[0] = 128;
        for (int j = 0; j < 16; j++) b[1 + j] = (uint8_t)(j | (15 - j) << 4);
        const int i[] = {0, 1, 7, 9, 15, 16, 31};
        const float w[] = {0, 1, 12, -1, -12, -12, 0};
        check_hand(RG_TYPE_MXFP4, b, i, w, 7);
        b[0] = 0;
        const float w0[] = {0, 0x1p-128f, 12 * 0x1p-128f, -0x1p-128f, -12 * 0x1p-128f, -12 * 0x1p-128f, 0};
        check_hand(RG_TYPE_MXFP4, b, i, w0, 7);
    }
    {  // NVFP4: scales 1.0, 2^−6, 2^−9 (subnormal), 448 (0x7E); all codes 7 (= 12)
        memset(b, 0x77, 36);
        b[0] = 0x38, b[1] = 0x08, b[2] = 0x01, b[3] = 0x7E;
        const int i[] = {0, 15, 16, 32, 48, 63};
        const float w[] = {6, 6, 0.09375f, 0.01171875f, 2688, 2688};
        check_hand(RG_TYPE_NVFP4, b, i, w, 6);
        b[0] = 0x7F, b[1] = 0xFF, b[2] = 0x80, b[3] = 0xB8;  // 0x7F -> 0; bit 7 ignored: 0xFF = 480, 0x80 = 0, 0xB8 = 1
        const float w2[] = {0, 0, 2880, 0, 6, 6};
        check_hand(RG_TYPE_NVFP4, b, i, w2, 6);
    }
    {  // Q1_0: d = 0.25; qs[0] = 1
        memset(b, 0, sizeof b);
        put16(b, 0x3400);
        b[2] = 1;
        const int i[] = {0, 1, 7, 8, 127};
        const float w[] = {0.25f, -0.25f, -0.25f, -0.25f, -0.25f};
        check_hand(RG_TYPE_Q1_0, b, i, w, 5);
    }
    {  // Q2_0: d = 0.5; qs[0] = 0xE4 (levels 0..3)
        memset(b, 0, sizeof b);
        put16(b, 0x3800);
        b[2] = 0xE4;
        const int i[] = {0, 1, 2, 3, 4};
        const float w[] = {-0.5f, 0, 0.5f, 1, -0.5f};
        check_hand(RG_TYPE_Q2_0, b, i, w, 5);
    }
}

// Random bytes (any bit pattern, NaN and Inf scales included) never crash and
// give the per-element formula's values; the dispatched row equals the ref row.
static void test_dequant_random_blocks(void) {
    const int nblk = quick_mode() ? 300 : 4000;
    for (int ti = 0; ti < NTYPES; ti++) {
        const qtype *t = &types[ti];
        rng_state = 0xDEC0DE00u + t->id;
        uint8_t *b = malloc((size_t)nblk * t->bytes);
        float *y = malloc((size_t)nblk * t->qk * sizeof *y), *z = malloc((size_t)nblk * t->qk * sizeof *z);
        for (int i = 0; i < nblk; i++) random_block(t, b + (size_t)i * t->bytes, i % 2);
        t->deq_ref(b, y, (int64_t)nblk * t->qk);
        t->deq(b, z, (int64_t)nblk * t->qk);
        int bad = 0, bad_disp = 0;
        for (int i = 0; i < nblk; i++)
            for (int e = 0; e < t->qk; e++) {
                const float want = t->elem(b + (size_t)i * t->bytes, e);
                const size_t k = (size_t)i * t->qk + e;
                if (!same_float(y[k], want) && bad++ < 3)
                    RG_CHECK(0, "%s block %d element %d: ref %.9g (0x%08x), formula %.9g (0x%08x)", t->name, i, e, y[k], fbits(y[k]),
                             want, fbits(want));
                if (!same_float(z[k], y[k]) && bad_disp++ < 3)
                    RG_CHECK(0, "%s block %d element %d: dispatched %.9g, ref %.9g", t->name, i, e, z[k], y[k]);
            }
        RG_CHECK(bad == 0 && bad_disp == 0, "%s: %d / %d elements differ from the formula, %d dispatched", t->name, bad, nblk * t->qk,
                 bad_disp);
        free(b), free(y), free(z);
    }
}

// 64 blocks per type from splitmix64 seeded 0x5EED0000 + type id: each byte is
// the top byte of one draw, then one draw gives the f16 scale that replaces
// the block's (see random_block). The SHA-256 of the dequantized floats was
// computed by gguf-py's dequantize (or the emulation named in the table).
static void test_dequant_vectors(void) {
    for (int ti = 0; ti < NTYPES; ti++) {
        const qtype *t = &types[ti];
        rng_state = 0x5EED0000u + t->id;
        uint8_t *b = malloc((size_t)64 * t->bytes);
        float *y = malloc((size_t)64 * t->qk * sizeof *y);
        for (int i = 0; i < 64; i++) random_block(t, b + (size_t)i * t->bytes, 1);
        char hex[65];
        t->deq_ref(b, y, (int64_t)64 * t->qk);
        sha256_floats(y, (size_t)64 * t->qk, hex);
        RG_CHECK(!strcmp(hex, t->deq_sha), "%s: dequantized vector SHA-256 %s, %s gives %s", t->name, hex, t->deq_src, t->deq_sha);
        t->deq(b, y, (int64_t)64 * t->qk);
        sha256_floats(y, (size_t)64 * t->qk, hex);
        RG_CHECK(!strcmp(hex, t->deq_sha), "%s: dispatched dequantized vector SHA-256 %s", t->name, hex);
        free(b), free(y);
    }
}

// ---------------------------------------------------------------------------
// Quantization

// The quantizer input of the vectors: 1024 exact floats, ints of 20 bits times
// 2^−17 times a power of two per 64 elements; every 37th ×16, 320..383 zero.
static void vector_input(float *x, float *w, int n) {
    rng_state = 0xF10A7;
    float scale = 1.0f;
    for (int i = 0; i < n; i++) {
        if (i % 64 == 0) scale = ldexpf(1.0f, (int)(rng_next() % 9) - 4);
        float v = (float)((int64_t)(rng_next() >> 44) - 524288) * 0x1p-17f * scale;
        if (i % 37 == 0) v *= 16;
        if (i >= 320 && i < 384) v = 0;
        x[i] = v;
    }
    rng_state = 0x1A7E1C;
    for (int i = 0; i < n; i++) w[i] = (float)(1 + (rng_next() >> 56)) / 64.0f;
}

static void test_quantize_vectors(void) {
    static const struct {
        uint32_t id;
        int imatrix;
        const char *sha, *src;
    } vec[] = {
        {RG_TYPE_TQ1_0, 0, "32a9c5db430a1b3807670a6765933bf29e9833a6a2430ea45173061150e095d3", "gguf-py quantize"},
        {RG_TYPE_TQ2_0, 0, "8d0c216a8872239fc4bc3a4a0f3fa56be4d8643ce7bcbff9f82a04ce564ddd81", "gguf-py quantize"},
        {RG_TYPE_MXFP4, 0, "308f3397682a0a694b04ffa99f89150cb1032019eea1e23367151a3fcbfcb0ad", "gguf-py quantize"},
        {RG_TYPE_NVFP4, 0, "8abe67097573ed1964ce6093c090267c805eed2601b53c11222136c34732de64", "gguf-py fp32_to_ue4m3 + nearest code"},
        {RG_TYPE_IQ4_NL, 0, "56341254fd2625b2ec68278757171f177f205cc5e7b622a72001d721e85d60e6", "f32 emulation of §5.5"},
        {RG_TYPE_IQ4_NL, 1, "285ea02228e2ed5b515fb166d895d610a283fcf62d9c7af55a4db62113f80c18", "f32 emulation of §5.6"},
        {RG_TYPE_IQ4_XS, 0, "dcb41f27f47a39ac95255ed1e636fbef85f99c44ed41f0283f64e9f86155fd9c", "f32 emulation of §5.5"},
        {RG_TYPE_IQ4_XS, 1, "f7f7e98e83d4c166ba693180b6ddfb1b246aa602e312225cc2e919c267f83954", "f32 emulation of §5.6"},
        {RG_TYPE_Q1_0, 0, "fc3a23989a501c9b47b57d75d7a1555be154e1098c2b57947dff5b6333fc45c8", "f32 emulation of §5.5"},
        {RG_TYPE_Q2_0, 0, "f6dc22f25ace22a29729cc3ffdd8c41f0d29d896589e620217659db3dee566b4", "f32 emulation of §5.5"},
    };
    float x[1024], w[1024];
    vector_input(x, w, 1024);
    char hex[65];
    sha256_floats(x, 1024, hex);
    RG_REQUIRE(!strcmp(hex, "f5b940a089cd655b70c5b9465cc03ea9fd522e951f0d199376f6defdc2fb11e4"), "vector input SHA-256 %s", hex);
    sha256_floats(w, 1024, hex);
    RG_REQUIRE(!strcmp(hex, "ac3d3969b83b3e1d349e478dc8f4370d0e3e3602f0a3b51cbfad3238c97376e7"), "vector weights SHA-256 %s", hex);
    uint8_t out[1024 / 32 * 18 + 64];
    for (size_t k = 0; k < sizeof vec / sizeof vec[0]; k++) {
        const qtype *t = find_type(vec[k].id);
        const size_t want = (size_t)(1024 / t->qk) * t->bytes;
        const size_t got = t->quant(x, out, 1024, vec[k].imatrix ? w : NULL);
        RG_CHECK(got == want, "%s: quantize returned %zu bytes, expected %zu", t->name, got, want);
        sha256_of(out, want, hex);
        RG_CHECK(!strcmp(hex, vec[k].sha), "%s%s: quantized SHA-256 %s, %s gives %s", t->name, vec[k].imatrix ? " (imatrix)" : "", hex,
                 vec[k].src, vec[k].sha);
        if (!vec[k].imatrix && t->id != RG_TYPE_IQ4_NL && t->id != RG_TYPE_IQ4_XS) {  // §5.6: an imatrix is ignored
            uint8_t out2[sizeof out];
            t->quant(x, out2, 1024, w);
            RG_CHECK(!memcmp(out, out2, want), "%s: the imatrix changed the bytes", t->name);
        }
    }
}

// Blocks whose bytes follow from §5.5 by hand.
static void test_quantize_edge_blocks(void) {
    float x[256] = {0};
    uint8_t b[256];
    uint8_t want[136];
    // All-zero blocks.
    rg_quantize_row_iq4_nl(x, b, 32, NULL);  // scale 0 -> d = +0, requantized best_index(0) = 8
    memset(want, 0x88, 18), want[0] = want[1] = 0;
    RG_CHECK(!memcmp(b, want, 18), "iq4_nl zero block");
    rg_quantize_row_iq4_xs(x, b, 256, NULL);  // D = −0/32 = −0.0; l = 0 -> code 32 in every sub-block
    memset(want, 0x88, 136), put16(want, 0x8000), put16(want + 2, 0xAAAA), memset(want + 4, 0, 4);
    RG_CHECK(!memcmp(b, want, 136), "iq4_xs zero block: %02x %02x %02x %02x %02x", b[0], b[1], b[2], b[3], b[4]);
    rg_quantize_row_tq2_0(x, b, 256, NULL);  // t = 1 everywhere
    memset(want, 0x55, 64), want[64] = want[65] = 0;
    RG_CHECK(!memcmp(b, want, 66), "tq2_0 zero block");
    rg_quantize_row_tq1_0(x, b, 256, NULL);  // 5 ones = 121 -> 128; qh: 4 ones ×3 = 120 -> 127
    memset(want, 0x80, 48), memset(want + 48, 0x7F, 4), want[52] = want[53] = 0;
    RG_CHECK(!memcmp(b, want, 54), "tq1_0 zero block");
    rg_quantize_row_mxfp4(x, b, 32, NULL);
    memset(want, 0, 17);
    RG_CHECK(!memcmp(b, want, 17), "mxfp4 zero block");
    rg_quantize_row_nvfp4(x, b, 64, NULL);
    memset(want, 0, 36);
    RG_CHECK(!memcmp(b, want, 36), "nvfp4 zero block");
    rg_quantize_row_q1_0(x, b, 128, NULL);  // x >= 0 sets every bit
    memset(want, 0xFF, 18), want[0] = want[1] = 0;
    RG_CHECK(!memcmp(b, want, 18), "q1_0 zero block");
    rg_quantize_row_q2_0(x, b, 64, NULL);
    memset(want, 0x55, 18), want[0] = want[1] = 0;
    RG_CHECK(!memcmp(b, want, 18), "q2_0 zero block");

    // IQ4_NL ties (§5.5: exactly on a midpoint -> the upper entry). Four elements
    // on the grid with d = 1 carry all the weight (imatrix), so the search ends
    // on d = 1 exactly; the others (weight 0) sit on midpoints.
    {
        static const float xv[8] = {-127, 113, 53, -49, 7, -4.5f, -115.5f, 101};
        static const uint8_t lv[8] = {0, 15, 12, 4, 9, 8, 1, 15};
        float qw[32] = {1, 1, 1, 1};
        memset(x, 0, sizeof x);
        memcpy(x, xv, sizeof xv);
        rg_quantize_row_iq4_nl(x, b, 32, qw);
        memset(want, 0x88, 18), put16(want, 0x3C00);
        for (int j = 0; j < 8; j++) want[2 + j] = (uint8_t)(lv[j] | 8 << 4);
        RG_CHECK(!memcmp(b, want, 18), "iq4_nl midpoints: %02x%02x %02x %02x %02x %02x %02x %02x %02x %02x", b[0], b[1], b[2], b[3], b[4],
                 b[5], b[6], b[7], b[8], b[9]);
    }

    // MXFP4 exponents (§5.5): e = floor(log2 amax) − 2 + 127; codes nearest, ties to the lower code.
    static const struct { float amax; uint8_t e; } mx[] = {
        {1.0f, 125}, {6.0f, 127}, {7.99f, 127}, {8.0f, 128}, {0x1p-120f, 5}, {0x1p-125f, 0}, {0x1p-126f, 0}, {0x1p-140f, 0}, {3e38f, 252}};
    for (size_t k = 0; k < sizeof mx / sizeof mx[0]; k++) {
        memset(x, 0, sizeof x);
        x[3] = -mx[k].amax;
        rg_quantize_row_mxfp4(x, b, 32, NULL);
        RG_CHECK(b[0] == mx[k].e, "mxfp4 amax %g: e = %u, expected %u", mx[k].amax, b[0], mx[k].e);
    }
    memset(x, 0, sizeof x);  // d = 2^−1 (amax 6): 6 -> 12 (code 7); 0.25 is halfway 0..0.5 -> code 0; −0.75 halfway −0.5..−1 -> code 9
    x[0] = 6.0f, x[1] = 0.25f, x[2] = -0.75f, x[3] = -0.0f, x[16] = 5.0f, x[17] = -2.6f;
    rg_quantize_row_mxfp4(x, b, 32, NULL);
    RG_CHECK(b[0] == 127 && b[1] == (7 | 6 << 4) && b[2] == (0 | 13 << 4) && b[3] == 9 && b[4] == 0, "mxfp4 codes %u %02x %02x %02x %02x",
             b[0], b[1], b[2], b[3], b[4]);

    // NVFP4 scale bytes: ue(amax/6) (§3.6).
    static const struct { float amax; uint8_t u; } nv[] = {
        {6.0f, 0x38},            // 1.0
        {6.375f, 0x39},          // 1.0625: half way to 1.125 rounds up
        {6.3f, 0x38},            // 1.05 rounds down
        {6 * 0x1p-9f, 0x01},     // smallest subnormal
        {6 * 0x1p-11f, 0x00},    // too small
        {6 * 7.9f / 512, 0x07},  // subnormal man 8 clamped to 7
        {6 * 240.0f, 0x77},      // 240 = 1.875·2^7
        {6 * 250.0f, 0x7E},      // rounds up into exponent 15
        {6 * 300.0f, 0x7E},      // exponent 15 is always 0x7E
        {1e30f, 0x7E},           // clamped to 448
    };
    for (size_t k = 0; k < sizeof nv / sizeof nv[0]; k++) {
        memset(x, 0, sizeof x);
        x[5] = nv[k].amax;
        rg_quantize_row_nvfp4(x, b, 64, NULL);
        RG_CHECK(b[0] == nv[k].u, "nvfp4 amax %g: scale byte 0x%02x, expected 0x%02x", nv[k].amax, b[0], nv[k].u);
    }
    // Every UE4M3 byte decodes as §3.6 says (through the NVFP4 dequantizer, code 2 = 2·d = the value).
    for (int u = 0; u < 256; u++) {
        memset(b, 0x22, 36);
        b[0] = (uint8_t)u;
        float y[64];
        rg_dequant_row_nvfp4_ref(b, y, 64);
        RG_CHECK(y[0] == ue4m3_ref((uint8_t)u), "ue4m3 0x%02x: %g, expected %g", u, y[0], ue4m3_ref((uint8_t)u));
    }
    // Non-finite input must not crash (values are unspecified).
    for (int ti = 0; ti < NTYPES; ti++) {
        const qtype *t = &types[ti];
        if (!t->quant) continue;
        for (int j = 0; j < 256; j++) x[j] = (j % 3 == 0) ? NAN : (j % 3 == 1) ? INFINITY : -1.0f;
        t->quant(x, b, 256, NULL);
        t->quant(x, b, 256, x);
    }
}

// Gaussian rows, 1% of the elements ×8 (outliers).
static void gauss_row(float *x, int n, uint64_t seed) {
    rng_state = seed;
    for (int i = 0; i < n; i++) {
        x[i] = (float)rng_gauss();
        if (rng_uniform() < 0.01) x[i] *= 8.0f;
    }
}

// Ternary-like rows: {−a, 0, a} plus noise of 3% of a.
static void ternary_row(float *x, int n, uint64_t seed) {
    rng_state = seed;
    for (int i = 0; i < n; i++) x[i] = (float)((double)((int)(rng_next() % 3) - 1) * 0.7 + rng_gauss() * 0.021);
}

// sqrt(Σw(x−y)²/Σw x²) (w = 1 when NULL).
static double rel_rmse(const float *x, const float *y, const float *w, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        const double ww = w ? w[i] : 1.0;
        num += ww * ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        den += ww * (double)x[i] * x[i];
    }
    return sqrt(num / den);
}

static double roundtrip_rmse(const qtype *t, const float *x, int n, const float *imatrix, const float *wmetric) {
    uint8_t *q = malloc((size_t)(n / t->qk) * t->bytes);
    float *y = malloc((size_t)n * sizeof *y);
    t->quant(x, q, n, imatrix);
    t->deq_ref(q, y, n);
    const double r = rel_rmse(x, y, wmetric, n);
    free(q), free(y);
    return r;
}

// Relative RMSE bounds: measured at -O2 on x86-64, then ~25% added.
static void test_quantize_rmse(void) {
    static const struct {
        uint32_t id;
        int data;  // 0 Gaussian with outliers, 1 ternary-like, 2 Gaussian with an imatrix
        double bound;
    } table[] = {
        // measured (gcc 12 / clang 14, x86-64): iq4_nl 0.1032, imatrix 0.0893 (weighted); iq4_xs 0.1050, imatrix 0.0931;
        // tq1_0 / tq2_0 0.0877 ternary-like, 0.7736 Gaussian; mxfp4 0.1452; nvfp4 0.0938; q1_0 0.7402; q2_0 0.6542
        {RG_TYPE_IQ4_NL, 0, 0.130}, {RG_TYPE_IQ4_NL, 2, 0.112}, {RG_TYPE_IQ4_XS, 0, 0.131}, {RG_TYPE_IQ4_XS, 2, 0.116},
        {RG_TYPE_TQ1_0, 1, 0.110},  {RG_TYPE_TQ1_0, 0, 0.967},  {RG_TYPE_TQ2_0, 1, 0.110},  {RG_TYPE_TQ2_0, 0, 0.967},
        {RG_TYPE_MXFP4, 0, 0.182},  {RG_TYPE_NVFP4, 0, 0.117},  {RG_TYPE_Q1_0, 0, 0.925},   {RG_TYPE_Q2_0, 0, 0.818},
    };
    const int n = 256 * 64;
    float *x = malloc((size_t)n * sizeof *x), *w = malloc((size_t)n * sizeof *w);
    for (size_t k = 0; k < sizeof table / sizeof table[0]; k++) {
        const qtype *t = find_type(table[k].id);
        double r;
        const char *what;
        if (table[k].data == 1) {
            ternary_row(x, n, 77);
            r = roundtrip_rmse(t, x, n, NULL, NULL);
            what = "ternary-like";
        } else if (table[k].data == 0) {
            gauss_row(x, n, 42);
            r = roundtrip_rmse(t, x, n, NULL, NULL);
            what = "gaussian+outliers";
        } else {
            gauss_row(x, n, 43);
            rng_state = 99;  // importance: most columns 1, one in 8 ×50
            for (int i = 0; i < n; i++) w[i] = (rng_next() % 8 == 0) ? 50.0f : 1.0f;
            r = roundtrip_rmse(t, x, n, w, w);
            const double plain = roundtrip_rmse(t, x, n, NULL, w);
            printf("    %-8s %-22s weighted rmse %.5f (bound %.3f; without the imatrix %.5f)\n", t->name, "gaussian+imatrix", r,
                   table[k].bound, plain);
            RG_CHECK(r < plain, "%s: the imatrix did not lower the weighted error (%.5f vs %.5f)", t->name, r, plain);
            what = "gaussian+imatrix";
        }
        if (table[k].data != 2) printf("    %-8s %-22s rel rmse %.5f (bound %.3f)\n", t->name, what, r, table[k].bound);
        RG_CHECK(r < table[k].bound, "%s on %s: relative RMSE %.5f over the bound %.3f", t->name, what, r, table[k].bound);
    }
    free(x), free(w);
}

// quantize -> dequantize -> quantize gives the same bytes where §5.5 implies it:
// Q1_0, Q2_0, TQ1_0, TQ2_0 (the dequantized block's max|x| / mean|x| is the
// stored scale), MXFP4 (its max stays in the same binade) and NVFP4 (its max
// is 6·UE4M3(u), which encodes back to u). IQ4_NL / IQ4_XS re-run a weighted
// scale search and are not idempotent in general (the share is printed).
static void test_quantize_idempotent(void) {
    const int n = 256 * 32;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    uint8_t *a = malloc((size_t)n * 2), *b = malloc((size_t)n * 2);
    gauss_row(x, n, 5);
    for (int ti = 0; ti < NTYPES; ti++) {
        const qtype *t = &types[ti];
        if (!t->quant) continue;
        const size_t bytes = t->quant(x, a, n, NULL);
        t->deq_ref(a, y, n);
        t->quant(y, b, n, NULL);
        int same = 0;
        for (int i = 0; i < n / t->qk; i++) same += !memcmp(a + (size_t)i * t->bytes, b + (size_t)i * t->bytes, (size_t)t->bytes);
        if (t->id == RG_TYPE_IQ4_NL || t->id == RG_TYPE_IQ4_XS)
            printf("    %-8s requantized blocks identical: %d / %d (not required)\n", t->name, same, n / t->qk);
        else
            RG_CHECK(!memcmp(a, b, bytes), "%s: requantizing changed %d / %d blocks", t->name, n / t->qk - same, n / t->qk);
    }
    free(x), free(y), free(a), free(b);
}

// ---------------------------------------------------------------------------
// Dot products

// Test-local activation quantizers (§5.1): Q8_0 (34 bytes) and Q8_K (292 bytes).
static void local_q8_0(const float *x, uint8_t *y, int n) {
    for (int i = 0; i < n / 32; i++, x += 32, y += 34) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
        put16(y, rg_fp32_to_fp16(d));
        for (int j = 0; j < 32; j++) y[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

static void local_q8_K(const float *x, uint8_t *y, int n) {
    for (int i = 0; i < n / 256; i++, x += 256, y += 292) {
        float amax = 0, max = 0;
        for (int j = 0; j < 256; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        memset(y, 0, 292);
        if (amax == 0) continue;
        const float iscale = -127.0f / max, d = 1 / iscale;
        memcpy(y, &d, 4);
        for (int j = 0; j < 256; j++) {
            int q = (int)lrintf(iscale * x[j]);
            y[4 + j] = (uint8_t)(int8_t)(q > 127 ? 127 : q);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += (int8_t)y[4 + 16 * g + j];
            put16(y + 260 + 2 * g, (uint16_t)(int16_t)s);
        }
    }
}

// Activation value i of a Q8_0 / Q8_K row, in double.
static double act_value(uint32_t vt, const uint8_t *y, int i) {
    if (vt == RG_TYPE_Q8_0) return (double)h2f(y + 34 * (i / 32)) * (int8_t)y[34 * (i / 32) + 2 + i % 32];
    float d;
    memcpy(&d, y + 292 * (i / 256), 4);
    return (double)d * (int8_t)y[292 * (i / 256) + 4 + i % 256];
}

static void test_vec_dot_accuracy(void) {
    const int n = 4096, rows = quick_mode() ? 4 : 24;
    float *x = malloc((size_t)n * sizeof *x), *xd = malloc((size_t)n * sizeof *xd), *a = malloc((size_t)n * sizeof *a);
    uint8_t *xq = malloc((size_t)n * 2), *yq = malloc((size_t)n / 32 * 34 + (size_t)n / 256 * 292);
    for (int ti = 0; ti < NTYPES; ti++) {
        const qtype *t = &types[ti];
        double worst_ref = 0, worst_disp = 0;
        for (int r = 0; r < rows; r++) {
            const uint64_t seed = 1000 * t->id + (uint64_t)r;
            if (t->quant) {
                gauss_row(x, n, seed);
                t->quant(x, xq, n, NULL);
            } else {
                rng_state = seed;
                for (int i = 0; i < n / t->qk; i++) random_block(t, xq + (size_t)i * t->bytes, 1);
            }
            t->deq_ref(xq, xd, n);
            gauss_row(a, n, seed + 7777);
            if (t->vec_type == RG_TYPE_Q8_0) local_q8_0(a, yq, n);
            else local_q8_K(a, yq, n);
            double ref = 0, mag = 0;
            for (int i = 0; i < n; i++) {
                const double p = (double)xd[i] * act_value(t->vec_type, yq, i);
                ref += p, mag += fabs(p);
            }
            float s_ref = NAN, s_disp = NAN;
            t->dot_ref(n, &s_ref, xq, yq);
            t->dot(n, &s_disp, xq, yq);
            const double e_ref = fabs(s_ref - ref) / mag, e_disp = fabs(s_disp - ref) / mag;
            worst_ref = e_ref > worst_ref ? e_ref : worst_ref;
            worst_disp = e_disp > worst_disp ? e_disp : worst_disp;
            RG_CHECK(e_ref < 1e-5, "%s row %d: ref %.9g vs %.9g (rel %.3g)", t->name, r, s_ref, ref, e_ref);
            RG_CHECK(e_disp < 1e-4, "%s row %d: dispatched %.9g vs %.9g (rel %.3g)", t->name, r, s_disp, ref, e_disp);
        }
        printf("    %-8s vec_dot worst relative error: ref %.2e, dispatched %.2e\n", t->name, worst_ref, worst_disp);
        // Random bytes on both sides (NaN scales, q8 = −128) must not crash.
        rng_state = 31337 + t->id;
        for (int i = 0; i < n / t->qk; i++) random_block(t, xq + (size_t)i * t->bytes, 0);
        for (size_t i = 0; i < (size_t)n / 32 * 34 + (size_t)n / 256 * 292; i++) yq[i] = (uint8_t)(rng_next() >> 56);
        float s;
        t->dot_ref(n, &s, xq, yq);
        t->dot(n, &s, xq, yq);
    }
    free(x), free(xd), free(a), free(xq), free(yq);
}

// ---------------------------------------------------------------------------
// AVX2

static void test_iq4_avx2_matches_ref(void) {
    if (!rg_quant_iq4_avx2_built || !rg_cpu_has_avx2()) RG_SKIP("no AVX2 (CPU or build): the IQ4 kernels are the references");
    const int nblk = quick_mode() ? 64 : 1024;
    for (int pass = 0; pass < 2; pass++) {
        const qtype *t = find_type(pass ? RG_TYPE_IQ4_XS : RG_TYPE_IQ4_NL);
        const int n = nblk * t->qk;
        uint8_t *xq = malloc((size_t)nblk * t->bytes), *yq = malloc((size_t)n / 32 * 34 + (size_t)n / 256 * 292);
        float *y = malloc((size_t)n * sizeof *y), *z = malloc((size_t)n * sizeof *z);
        rng_state = 4242 + (uint64_t)pass;
        for (int i = 0; i < nblk; i++) random_block(t, xq + (size_t)i * t->bytes, i % 4 != 0);  // a quarter with any scale bits
        t->deq_ref(xq, y, n);
        (pass ? rg_dequant_row_iq4_xs_avx2 : rg_dequant_row_iq4_nl_avx2)(xq, z, n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += fbits(y[i]) != fbits(z[i]);
        RG_CHECK(bad == 0, "%s: AVX2 dequant differs from ref in %d / %d values (bits)", t->name, bad, n);
        // Dot products per block and over the row, activations of any bytes (q8 = −128 too) with finite scales.
        int bad_dot = 0;
        for (int len = 1; len <= nblk; len = len < 8 ? len + 1 : len * 2) {
            const int m = len * t->qk;
            if (m % 256 && t->vec_type == RG_TYPE_Q8_K) continue;
            for (size_t i = 0; i < (size_t)n / 32 * 34 + (size_t)n / 256 * 292; i++) yq[i] = (uint8_t)(rng_next() >> 56);
            if (t->vec_type == RG_TYPE_Q8_0)
                for (int i = 0; i < m / 32; i++) put16(yq + 34 * i, (uint16_t)(0x2000 + (rng_next() & 0x1FFF)));
            else
                for (int i = 0; i < m / 256; i++) {
                    const float d = (float)rng_uniform() * 0.01f;
                    memcpy(yq + 292 * i, &d, 4);
                }
            float s_ref, s_avx;
            t->dot_ref(m, &s_ref, xq, yq);
            (pass ? rg_vec_dot_iq4_xs_q8_k_avx2 : rg_vec_dot_iq4_nl_q8_0_avx2)(m, &s_avx, xq, yq);
            if (!same_float(s_ref, s_avx) && bad_dot++ < 3)
                RG_CHECK(0, "%s: %d blocks: AVX2 dot %.9g, ref %.9g", t->name, len, s_avx, s_ref);
        }
        RG_CHECK(bad_dot == 0, "%s: %d AVX2 dot products differ from ref", t->name, bad_dot);
        free(xq), free(yq), free(y), free(z);
    }
}

// ---------------------------------------------------------------------------

static const rg_test_case cases[] = {
    RG_TEST(test_sha256_selfcheck),
    RG_TEST(test_grids_match_spec),
    RG_TEST(test_kvalues_tables),
    RG_TEST(test_table_wiring),
    RG_TEST(test_dequant_hand_built),
    RG_TEST(test_dequant_random_blocks),
    RG_TEST(test_dequant_vectors),
    RG_TEST(test_quantize_vectors),
    RG_TEST(test_quantize_edge_blocks),
    RG_TEST(test_quantize_rmse),
    RG_TEST(test_quantize_idempotent),
    RG_TEST(test_vec_dot_accuracy),
    RG_TEST(test_iq4_avx2_matches_ref),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
