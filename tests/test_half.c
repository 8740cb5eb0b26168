// test_half.c - F16 and BF16 conversions against independent references.
//
// The references below work in double from the definitions (bit fields and
// ldexp, nearest neighbour by distance), not from the bit tricks in half.c:
//   - every one of the 65,536 F16 and BF16 patterns is decoded and re-encoded;
//   - encoders are checked on a large float sample: every float whose bit
//     pattern is a multiple of a stride, a dense stretch of the F16 range, every
//     halfway point between neighbours (and one float ulp either side of it),
//     and hand-picked boundaries and NaN payloads;
//   - the dispatched (AVX2/F16C) rows must give the scalar rows' bits.
// RG_TEST_QUICK=1 makes the strides 10x larger (for sanitizer builds).
#include "tensor/half.h"

#include "rg_test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int quick_mode(void) {
    const char *s = getenv("RG_TEST_QUICK");
    return s && *s && strcmp(s, "0") != 0;
}

// ---------------------------------------------------------------------------
// Hand-computed cases (they also check the references below)

typedef struct encode_case {
    uint32_t f32;   // input bit pattern
    uint16_t want;  // expected F16 or BF16 bits
    const char *what;
} encode_case;

static const encode_case fp16_encode_cases[] = {
    {0x3F800000, 0x3C00, "1"},
    {0xC0000000, 0xC000, "-2"},
    {0x3DCCCCCD, 0x2E66, "0.1f"},
    {0x3EAAAAAB, 0x3555, "1/3"},
    {0x3F801000, 0x3C00, "1 + 2^-11: tie, stays even"},
    {0x3F801001, 0x3C01, "just above 1 + 2^-11"},
    {0x3F803000, 0x3C02, "1 + 3*2^-11: tie, goes up to even"},
    {0x44FFF000, 0x6800, "2047.5: tie, carries into the exponent"},
    {0x477FE000, 0x7BFF, "65504, the largest half"},
    {0x477FEFFF, 0x7BFF, "just below 65520"},
    {0x477FF000, 0x7C00, "65520 -> Inf"},
    {0xC77FF000, 0xFC00, "-65520 -> -Inf"},
    {0x7F7FFFFF, 0x7C00, "FLT_MAX"},
    {0x7F800000, 0x7C00, "Inf"},
    {0xFF800000, 0xFC00, "-Inf"},
    {0x38800000, 0x0400, "2^-14, the smallest normal"},
    {0x387FC000, 0x03FF, "1023*2^-24, the largest subnormal"},
    {0x387FE000, 0x0400, "2^-14 - 2^-25: tie between 0x3FF and 0x400, up to even"},
    {0x387FDFFF, 0x03FF, "just below that tie"},
    {0x33800000, 0x0001, "2^-24, the smallest subnormal"},
    {0x33C00000, 0x0002, "1.5*2^-24: tie, goes up to even"},
    {0x33A00000, 0x0001, "1.25*2^-24"},
    {0x33000000, 0x0000, "2^-25: tie, down to zero"},
    {0xB3000000, 0x8000, "-2^-25 -> -0"},
    {0x33000001, 0x0001, "2^-25 + ulp"},
    {0x32FFFFFF, 0x0000, "2^-25 - ulp"},
    {0x00000001, 0x0000, "smallest f32 subnormal"},
    {0x80000001, 0x8000, "smallest negative f32 subnormal"},
    {0x80000000, 0x8000, "-0"},
    {0x7FC00000, 0x7E00, "quiet NaN"},
    {0x7F800001, 0x7E00, "signalling NaN, low payload"},
    {0xFF800001, 0xFE00, "negative signalling NaN"},
    {0x7FFFFFFF, 0x7E00, "NaN, full payload dropped"},
    {0xFFBFE000, 0xFE00, "negative NaN with a payload F16C would keep"},
};

static const encode_case bf16_encode_cases[] = {
    {0x3F800000, 0x3F80, "1"},
    {0x3F808000, 0x3F80, "tie, kept LSB even: down"},
    {0x3F818000, 0x3F82, "tie, kept LSB odd: up"},
    {0x3F808001, 0x3F81, "just above a tie"},
    {0x3F807FFF, 0x3F80, "just below a tie"},
    {0x7F7F7FFF, 0x7F7F, "below the overflow tie"},
    {0x7F7F8000, 0x7F80, "overflow tie -> Inf"},
    {0x7F7FFFFF, 0x7F80, "FLT_MAX -> Inf"},
    {0xFF800000, 0xFF80, "-Inf"},
    {0x00000001, 0x0000, "tiny subnormal"},
    {0x00008000, 0x0000, "subnormal tie, down"},
    {0x00018000, 0x0002, "subnormal tie, up"},
    {0x00008001, 0x0001, "subnormal above a tie"},
    {0x807FFFFF, 0x8080, "largest negative subnormal rounds to -FLT_MIN"},
    {0x7FC00000, 0x7FC0, "quiet NaN"},
    {0x7F800001, 0x7FC0, "signalling NaN, low payload"},
    {0xFF810000, 0xFFC1, "negative NaN, payload top kept"},
    {0x7FFFFFFF, 0x7FFF, "NaN all ones"},
};

typedef struct decode_case {
    uint16_t h;     // F16 bits
    uint32_t want;  // expected f32 bits
    const char *what;
} decode_case;

static const decode_case fp16_decode_cases[] = {
    {0x3C00, 0x3F800000, "1"},
    {0x0001, 0x33800000, "2^-24"},
    {0x8001, 0xB3800000, "-2^-24"},
    {0x03FF, 0x387FC000, "largest subnormal"},
    {0x0400, 0x38800000, "2^-14"},
    {0x7BFF, 0x477FE000, "65504"},
    {0x7C00, 0x7F800000, "Inf"},
    {0xFC00, 0xFF800000, "-Inf"},
    {0x8000, 0x80000000, "-0"},
    {0x7C01, 0x7FC02000, "signalling NaN: quieted, payload kept"},
    {0xFE00, 0xFFC00000, "negative quiet NaN"},
};

// ---------------------------------------------------------------------------
// Reference F16, in double

// The 31,744 non-negative finite halves by bit pattern (which orders them by
// value), plus 65536 at 0x7C00: the neighbour above 65504 when rounding, and
// where Inf sits.
static double half_mag[0x7C01];

// The half's value from its bit fields. NaN patterns give a NaN.
static double ref_fp16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, -24);
    else v = ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static void init_half_mag(void) {
    for (int i = 0; i < 0x7C00; i++) half_mag[i] = ref_fp16_value((uint16_t)i);
    half_mag[0x7C00] = 65536.0;
}

// The nearest half by distance to its two neighbours, ties to the even pattern.
static uint16_t ref_fp32_to_fp16(uint32_t u) {
    float f = float_of(u);
    uint16_t sign = (u >> 31) ? 0x8000u : 0u;
    if (isnan(f)) return sign | 0x7E00;
    double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7C00;
    // Largest lo with half_mag[lo] <= a; hi = lo + 1.
    int lo = 0, hi = 0x7C00;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (half_mag[mid] <= a) lo = mid;
        else hi = mid;
    }
    // Both differences are exact in double: at and above 2^-26 they are
    // multiples of a's ulp smaller than 2^26 of them; below, a is so far under
    // the tie at 2^-25 that a rounded dh still compares right.
    double dl = a - half_mag[lo], dh = half_mag[hi] - a;
    int pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | (uint16_t)pick;
}

// ---------------------------------------------------------------------------
// Reference BF16, in double

static double ref_bf16_value(uint16_t h) {
    int e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 255) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, -133);
    else v = ldexp(128 + m, e - 134);
    return (h & 0x8000) ? -v : v;
}

// Nearest of the two BF16 magnitudes around |f| (its top 16 bits, and the next
// pattern up), by distance in double, ties to the even pattern.
static uint16_t ref_fp32_to_bf16(uint32_t u) {
    float f = float_of(u);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x0040);  // the spec's NaN rule
    uint16_t sign = (u >> 31) ? 0x8000u : 0u;
    uint16_t lo = (uint16_t)((u & 0x7FFFFFFF) >> 16);
    if (lo == 0x7F80) return sign | 0x7F80;  // Inf
    uint16_t hi = (uint16_t)(lo + 1);
    double a = fabs((double)f);
    double vlo = ref_bf16_value(lo);
    double vhi = hi == 0x7F80 ? ldexp(1, 128) : ref_bf16_value(hi);  // Inf's place: 2^128
    // Exact: both are multiples of a's ulp and smaller than a BF16 ulp.
    double dl = a - vlo, dh = vhi - a;
    uint16_t pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | pick;
}

// ---------------------------------------------------------------------------
// Float samples

typedef struct float_sampler {
    uint32_t *extra;  // first: these bit patterns
    size_t n_extra;
    uint64_t stride;  // then every multiple of stride below 2^32
    uint64_t dense_lo, dense_hi, dense_stride;  // then [dense_lo, dense_hi) by dense_stride (0: none)
    int phase;
    uint64_t pos;
} float_sampler;

typedef struct u32_list {
    uint32_t *v;
    size_t n, cap;
} u32_list;

static void list_push(u32_list *l, uint32_t u) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4096;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v) {
            fprintf(stderr, "test_half: out of memory\n");
            exit(2);
        }
    }
    l->v[l->n++] = u;
}

// x, one float ulp either side (same sign), and the negatives of all three.
static void list_push_around(u32_list *l, uint32_t u) {
    for (int s = 0; s < 2; s++) {
        uint32_t v = u ^ (s ? 0x80000000u : 0);
        list_push(l, v);
        if (v & 0x7FFFFFFF) list_push(l, v - 1);
        list_push(l, v + 1);
    }
}

static const uint32_t special_bits[] = {
    0x00000000, 0x00000001, 0x00000002, 0x007FFFFF, 0x00800000, 0x00800001,  // zero, f32 subnormals
    0x3F800000, 0x7F7FFFFF, 0x7F800000,                                      // 1, FLT_MAX, Inf
    0x7F800001, 0x7F800002, 0x7F801FFF, 0x7F802000, 0x7F803FFF, 0x7F8000FF,  // NaN payloads
    0x7F80FFFF, 0x7F810000, 0x7FA00000, 0x7FBFFFFF, 0x7FC00000, 0x7FC00001,
    0x7FDFE000, 0x7FFFE000, 0x7FFFFFFF,
};

static const float special_values[] = {
    65504.0f, 65519.99f, 65520.0f, 65520.01f, 65536.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f,
    0x1p-14f, 0x1p-14f - 0x1p-25f, 0x1p-26f, 0.1f, 1.0f / 3.0f, 3.14159265f, 1e-8f, 1e30f,
};

static void push_specials(u32_list *l) {
    for (size_t i = 0; i < sizeof special_bits / sizeof special_bits[0]; i++)
        list_push_around(l, special_bits[i]);
    for (size_t i = 0; i < sizeof special_values / sizeof special_values[0]; i++)
        list_push_around(l, bits_of(special_values[i]));
}

static float_sampler fp16_sampler(void) {
    u32_list l = {0};
    push_specials(&l);
    for (size_t i = 0; i < sizeof fp16_encode_cases / sizeof fp16_encode_cases[0]; i++)
        list_push(&l, fp16_encode_cases[i].f32);
    for (int i = 0; i < 0x7C00; i++) {
        // Every half, and every halfway point up to 65520 (exact in float: 12 bits).
        list_push_around(&l, bits_of((float)half_mag[i]));
        list_push_around(&l, bits_of((float)((half_mag[i] + half_mag[i + 1]) / 2)));
    }
    int q = quick_mode();
    float_sampler s = {0};
    s.extra = l.v;
    s.n_extra = l.n;
    s.stride = q ? 971 : 97;  // ~44M floats over all patterns
    // Dense: positive floats in [2^-26, 2^16), the part that maps to finite halves.
    s.dense_lo = 0x32800000;
    s.dense_hi = 0x47800000;
    s.dense_stride = q ? 131 : 13;  // ~27M floats
    return s;
}

static float_sampler bf16_sampler(void) {
    u32_list l = {0};
    push_specials(&l);
    for (size_t i = 0; i < sizeof bf16_encode_cases / sizeof bf16_encode_cases[0]; i++)
        list_push(&l, bf16_encode_cases[i].f32);
    // For every finite BF16 magnitude: the pattern itself, the halfway point to
    // the next one, and one ulp either side of each.
    for (uint32_t m = 0; m < 0x7F80; m++) {
        list_push_around(&l, m << 16);
        list_push_around(&l, (m << 16) | 0x8000);
    }
    float_sampler s = {0};
    s.extra = l.v;
    s.n_extra = l.n;
    s.stride = quick_mode() ? 829 : 83;  // ~52M floats over all patterns
    return s;
}

static void sampler_free(float_sampler *s) {
    free(s->extra);
    s->extra = NULL;
}

// Fills buf with up to cap floats of the sample; returns how many (0 at the end).
static size_t sampler_next(float_sampler *s, float *buf, size_t cap) {
    size_t n = 0;
    while (n < cap) {
        uint32_t u;
        if (s->phase == 0) {
            if (s->pos >= s->n_extra) { s->phase = 1; s->pos = 0; continue; }
            u = s->extra[s->pos++];
        } else if (s->phase == 1) {
            if (s->pos >= (UINT64_C(1) << 32)) { s->phase = 2; s->pos = s->dense_lo; continue; }
            u = (uint32_t)s->pos;
            s->pos += s->stride;
        } else if (s->phase == 2) {
            if (!s->dense_stride || s->pos >= s->dense_hi) { s->phase = 3; continue; }
            u = (uint32_t)s->pos;
            s->pos += s->dense_stride;
        } else {
            break;
        }
        memcpy(&buf[n++], &u, sizeof u);  // bits travel untouched, signalling NaNs included
    }
    return n;
}

enum { CHUNK = 1000003 };  // odd, so every chunk also exercises a row tail

// ---------------------------------------------------------------------------
// F16

static void test_fp16_decode(void) {
    for (size_t i = 0; i < sizeof fp16_decode_cases / sizeof fp16_decode_cases[0]; i++) {
        const decode_case *c = &fp16_decode_cases[i];
        uint32_t got = bits_of(rg_fp16_to_fp32(c->h));
        RG_CHECK(got == c->want, "%s: 0x%04x -> 0x%08x, want 0x%08x", c->what, c->h, got, c->want);
    }
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        uint32_t got = bits_of(rg_fp16_to_fp32(h));
        double ref = ref_fp16_value(h);
        if (isnan(ref)) {
            int is_nan = (got & 0x7F800000) == 0x7F800000 && (got & 0x007FFFFF) != 0;
            RG_CHECK(is_nan && (got & 0x00400000) && (got >> 31) == (h >> 15),
                     "0x%04x -> 0x%08x: want a quiet NaN with the same sign", h, got);
        } else {
            uint32_t want = bits_of((float)ref);  // exact: halves fit in a float
            RG_CHECK(got == want, "0x%04x -> 0x%08x, want 0x%08x (%a)", h, got, want, ref);
        }
    }
}

static void test_fp16_encode(void) {
    for (size_t i = 0; i < sizeof fp16_encode_cases / sizeof fp16_encode_cases[0]; i++) {
        const encode_case *c = &fp16_encode_cases[i];
        uint16_t got = rg_fp32_to_fp16(float_of(c->f32)), ref = ref_fp32_to_fp16(c->f32);
        RG_CHECK(got == c->want && ref == c->want, "%s: 0x%08x -> 0x%04x (reference 0x%04x), want 0x%04x",
                 c->what, c->f32, got, ref, c->want);
    }

    // Round trip of every half.
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        int is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF);
        uint16_t want = is_nan ? (uint16_t)((h & 0x8000) | 0x7E00) : h;
        uint16_t got = rg_fp32_to_fp16(rg_fp16_to_fp32(h));
        RG_CHECK(got == want, "round trip 0x%04x -> 0x%04x, want 0x%04x", h, got, want);
    }

    // The float sample.
    float_sampler s = fp16_sampler();
    float *buf = malloc(CHUNK * sizeof *buf);
    uint16_t *out = malloc(CHUNK * sizeof *out);
    RG_REQUIRE(buf && out, "out of memory");
    size_t total = 0, n;
    while ((n = sampler_next(&s, buf, CHUNK)) > 0) {
        rg_fp32_to_fp16_row_scalar(buf, out, (int64_t)n);
        for (size_t i = 0; i < n; i++) {
            uint32_t u = bits_of(buf[i]);
            uint16_t want = ref_fp32_to_fp16(u);
            RG_CHECK(out[i] == want, "0x%08x (%a) -> 0x%04x, want 0x%04x", u, buf[i], out[i], want);
            if (out[i] != want) break;  // one per chunk is enough
        }
        total += n;
    }
    printf("    %zu floats checked against the reference\n", total);
    free(buf);
    free(out);
    sampler_free(&s);
}

// ---------------------------------------------------------------------------
// BF16

static void test_bf16_decode(void) {
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        uint32_t got = bits_of(rg_bf16_to_fp32(h));
        RG_CHECK(got == i << 16, "0x%04x -> 0x%08x, want 0x%08x", h, got, i << 16);
        double ref = ref_bf16_value(h);
        if (!isnan(ref)) {
            RG_CHECK(got == bits_of((float)ref), "0x%04x -> 0x%08x, reference value %a", h, got, ref);
        }
        // Round trip: only NaNs change (forced quiet).
        uint16_t want = isnan(ref) ? (uint16_t)(h | 0x0040) : h;
        uint16_t back = rg_fp32_to_bf16(rg_bf16_to_fp32(h));
        RG_CHECK(back == want, "round trip 0x%04x -> 0x%04x, want 0x%04x", h, back, want);
    }
}

static void test_bf16_encode(void) {
    for (size_t i = 0; i < sizeof bf16_encode_cases / sizeof bf16_encode_cases[0]; i++) {
        const encode_case *c = &bf16_encode_cases[i];
        uint16_t got = rg_fp32_to_bf16(float_of(c->f32)), ref = ref_fp32_to_bf16(c->f32);
        RG_CHECK(got == c->want && ref == c->want, "%s: 0x%08x -> 0x%04x (reference 0x%04x), want 0x%04x",
                 c->what, c->f32, got, ref, c->want);
    }

    float_sampler s = bf16_sampler();
    float *buf = malloc(CHUNK * sizeof *buf);
    uint16_t *out = malloc(CHUNK * sizeof *out);
    RG_REQUIRE(buf && out, "out of memory");
    size_t total = 0, n;
    while ((n = sampler_next(&s, buf, CHUNK)) > 0) {
        rg_fp32_to_bf16_row_scalar(buf, out, (int64_t)n);
        for (size_t i = 0; i < n; i++) {
            uint32_t u = bits_of(buf[i]);
            uint16_t want = ref_fp32_to_bf16(u);
            RG_CHECK(out[i] == want, "0x%08x (%a) -> 0x%04x, want 0x%04x", u, buf[i], out[i], want);
            if (out[i] != want) break;
        }
        total += n;
    }
    printf("    %zu floats checked against the reference\n", total);
    free(buf);
    free(out);
    sampler_free(&s);
}

// ---------------------------------------------------------------------------
// Dispatched rows == scalar rows

static const int64_t row_lengths[] = {0, 1, 7, 8, 9, 15, 16, 17, 1000003};
enum { N_LENGTHS = sizeof row_lengths / sizeof row_lengths[0], MAX_OFFSET = 3, GUARD = 16 };

typedef void decode_row_fn(const uint16_t *x, float *y, int64_t n);
typedef void encode_row_fn(const float *x, uint16_t *y, int64_t n);

// Runs the scalar and the dispatched decoder on x[0..n) and compares bits;
// also checks that nothing past y[n) was written.
static void compare_decode(const char *what, decode_row_fn *scalar, decode_row_fn *simd,
                           const uint16_t *x, int64_t n, float *ys, float *yd) {
    memset(ys, 0xA5, (size_t)(n + GUARD) * sizeof *ys);
    memset(yd, 0xA5, (size_t)(n + GUARD) * sizeof *yd);
    scalar(x, ys, n);
    simd(x, yd, n);
    for (int64_t i = 0; i < n + GUARD; i++) {
        uint32_t a = bits_of(ys[i]), b = bits_of(yd[i]);
        if (a != b) {
            RG_CHECK(a == b, "%s n=%lld: element %lld (0x%04x): scalar 0x%08x, dispatched 0x%08x%s", what,
                     (long long)n, (long long)i, i < n ? x[i] : 0, a, b, i >= n ? " (past the end)" : "");
            return;
        }
    }
}

static void compare_encode(const char *what, encode_row_fn *scalar, encode_row_fn *simd,
                           const float *x, int64_t n, uint16_t *ys, uint16_t *yd) {
    memset(ys, 0xA5, (size_t)(n + GUARD) * sizeof *ys);
    memset(yd, 0xA5, (size_t)(n + GUARD) * sizeof *yd);
    scalar(x, ys, n);
    simd(x, yd, n);
    for (int64_t i = 0; i < n + GUARD; i++) {
        if (ys[i] != yd[i]) {
            RG_CHECK(ys[i] == yd[i], "%s n=%lld: element %lld (0x%08x): scalar 0x%04x, dispatched 0x%04x%s", what,
                     (long long)n, (long long)i, i < n ? bits_of(x[i]) : 0, ys[i], yd[i],
                     i >= n ? " (past the end)" : "");
            return;
        }
    }
}

static void test_simd_decode_matches_scalar(void) {
    if (!rg_half_have_simd())
        RG_SKIP("no AVX2/F16C on this CPU (or half_avx2.c built without -mavx2 -mf16c): the rows are scalar");
    const int64_t n_max = CHUNK + MAX_OFFSET;
    uint16_t *x = malloc((size_t)n_max * sizeof *x);
    float *ys = malloc((size_t)(n_max + GUARD) * sizeof *ys);
    float *yd = malloc((size_t)(n_max + GUARD) * sizeof *yd);
    RG_REQUIRE(x && ys && yd, "out of memory");

    struct { const char *what; decode_row_fn *scalar, *simd; } kinds[] = {
        {"fp16", rg_fp16_to_fp32_row_scalar, rg_fp16_to_fp32_row},
        {"bf16", rg_bf16_to_fp32_row_scalar, rg_bf16_to_fp32_row},
    };
    for (int k = 0; k < 2; k++) {
        // All 65,536 patterns in order, in one row.
        for (int64_t i = 0; i < 65536; i++) x[i] = (uint16_t)i;
        compare_decode(kinds[k].what, kinds[k].scalar, kinds[k].simd, x, 65536, ys, yd);
        // All patterns again, shuffled (40503 is odd, so each block of 65,536 is a
        // permutation), at several lengths and start offsets.
        for (int64_t i = 0; i < n_max; i++) x[i] = (uint16_t)(i * 40503 + 12345);
        for (int li = 0; li < N_LENGTHS; li++)
            for (int off = 0; off <= MAX_OFFSET; off++)
                compare_decode(kinds[k].what, kinds[k].scalar, kinds[k].simd, x + off, row_lengths[li], ys, yd);
    }
    free(x);
    free(ys);
    free(yd);
}

static void test_simd_encode_matches_scalar(void) {
    if (!rg_half_have_simd())
        RG_SKIP("no AVX2/F16C on this CPU (or half_avx2.c built without -mavx2 -mf16c): the rows are scalar");
    float *x = malloc((CHUNK + MAX_OFFSET) * sizeof *x);
    uint16_t *ys = malloc((CHUNK + MAX_OFFSET + GUARD) * sizeof *ys);
    uint16_t *yd = malloc((CHUNK + MAX_OFFSET + GUARD) * sizeof *yd);
    RG_REQUIRE(x && ys && yd, "out of memory");

    struct { const char *what; encode_row_fn *scalar, *simd; float_sampler s; } kinds[] = {
        {"fp16", rg_fp32_to_fp16_row_scalar, rg_fp32_to_fp16_row, fp16_sampler()},
        {"bf16", rg_fp32_to_bf16_row_scalar, rg_fp32_to_bf16_row, bf16_sampler()},
    };
    for (int k = 0; k < 2; k++) {
        size_t total = 0, n;
        int first = 1;
        while ((n = sampler_next(&kinds[k].s, x, CHUNK)) > 0) {
            if (first) {
                // The first chunk starts with the specials and NaN payloads:
                // run it at every length and offset (the longest only at offset 0).
                for (int li = 0; li < N_LENGTHS; li++)
                    for (int off = 0; off <= MAX_OFFSET; off++)
                        if ((size_t)(row_lengths[li] + off) <= n)
                            compare_encode(kinds[k].what, kinds[k].scalar, kinds[k].simd, x + off, row_lengths[li],
                                           ys, yd);
                first = 0;
            }
            compare_encode(kinds[k].what, kinds[k].scalar, kinds[k].simd, x, (int64_t)n, ys, yd);
            total += n;
        }
        printf("    %s: %zu floats compared\n", kinds[k].what, total);
        sampler_free(&kinds[k].s);
    }
    free(x);
    free(ys);
    free(yd);
}

static const rg_test_case cases[] = {
    RG_TEST(test_fp16_decode),
    RG_TEST(test_fp16_encode),
    RG_TEST(test_bf16_decode),
    RG_TEST(test_bf16_encode),
    RG_TEST(test_simd_decode_matches_scalar),
    RG_TEST(test_simd_encode_matches_scalar),
    {0},
};

int main(int argc, char **argv) {
    init_half_mag();
    printf("test_half: %s rows, %s sample\n", rg_half_have_simd() ? "AVX2/F16C" : "scalar",
           quick_mode() ? "quick (RG_TEST_QUICK)" : "full");
    return rg_test_run(argc, argv, cases);
}
