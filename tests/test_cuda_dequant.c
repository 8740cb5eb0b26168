// test_cuda_dequant.c - the device decoders (src/cuda/dequant.cuh, dequant.cu) against the
// CPU's dequantization, bit for bit, for every type the device decodes.
//
// For each type: 11 rows of 1536 elements of random blocks (random bytes, every f16 / e8m0
// scale replaced by a finite value: f16 exponents 0..20, subnormals included; e8m0 0..160),
// among them blocks that sweep every grid index and every sign pattern of the IQ types, and
// blocks whose K-quant scale bytes are all 0x00 or all 0xFF (6-bit scales and mins 0 and 63).
// Rows are `row_bytes` apart with padding after each (a strided tensor); the cases decode the
// whole row and the sub-range [256, 1536) into an output with a leading dimension past K.
//   F32 output:        the bits of rg_dequantize (the CPU's dispatched rg_dequant_row_<type>)
//   BF16 / F16 output: those F32 values rounded by the CPU's rg_fp32_to_bf16 / rg_fp32_to_fp16
//   rg_cu_decode32:    a kernel that calls it per 32 elements (rg_cuda_dequant_decode32), the
//                      same bits as rg_dequantize over consecutive blocks
// and the output's padding (between K and ld) keeps its sentinel. A type the device does not
// decode (Q8_K, I32) is reported so, and rg_cuda_dequant_rows refuses it naming the type and the
// node. Cases need a CUDA device: without one they skip (RETRO_CUDA_HOST=1 runs them on the CPU
// through the host execution of the CUDA code).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cuda/cuda.h"
#include "graph/graph.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

static char why[256];

static int have_gpu(void) { return rg_cuda_device_count(why, sizeof why) > 0; }

// Every type the device decodes.
static const uint32_t device_types[] = {
    RG_TYPE_F32,     RG_TYPE_F16,    RG_TYPE_BF16,    RG_TYPE_Q4_0,    RG_TYPE_Q4_1,   RG_TYPE_Q5_0,   RG_TYPE_Q5_1,
    RG_TYPE_Q8_0,    RG_TYPE_Q2_K,   RG_TYPE_Q3_K,    RG_TYPE_Q4_K,    RG_TYPE_Q5_K,   RG_TYPE_Q6_K,   RG_TYPE_IQ1_S,
    RG_TYPE_IQ1_M,   RG_TYPE_IQ2_XXS, RG_TYPE_IQ2_XS, RG_TYPE_IQ2_S,   RG_TYPE_IQ3_XXS, RG_TYPE_IQ3_S, RG_TYPE_IQ4_NL,
    RG_TYPE_IQ4_XS,  RG_TYPE_TQ1_0,  RG_TYPE_TQ2_0,   RG_TYPE_MXFP4,   RG_TYPE_NVFP4,  RG_TYPE_Q1_0,   RG_TYPE_Q2_0,
};
enum { N_TYPES = sizeof device_types / sizeof device_types[0] };

enum { ROWS = 11, ROW_ELEMS = 1536, ROW_PAD = 13 };

static const char *type_name(uint32_t t) { return rg_type_get(t)->name; }

// ---------------------------------------------------------------------------
// Blocks

static uint64_t rnd(uint64_t stream, uint64_t i) { return rg_rng_u64(24, stream, i); }

// A finite f16 bit pattern: random sign and mantissa, exponent field 0..20 (0: subnormal or
// zero), so |value| < 64 and every decoder's products stay finite.
static uint16_t finite_f16(uint64_t r) { return (uint16_t)((r & 0x83FF) | ((r >> 16) % 21) << 10); }

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }

// The byte offsets of a type's f16 scale fields (-1 ends the list).
static const int *f16_fields(uint32_t type) {
    static const int at0[] = {0, -1}, at02[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1}, q6k[] = {208, -1},
                     tq1[] = {52, -1}, tq2[] = {64, -1}, none[] = {-1};
    switch (type) {
    case RG_TYPE_Q4_1: case RG_TYPE_Q5_1: case RG_TYPE_Q4_K: case RG_TYPE_Q5_K: return at02;
    case RG_TYPE_Q2_K: return q2k;
    case RG_TYPE_Q3_K: return q3k;
    case RG_TYPE_Q6_K: return q6k;
    case RG_TYPE_TQ1_0: return tq1;
    case RG_TYPE_TQ2_0: return tq2;
    case RG_TYPE_IQ1_M: case RG_TYPE_MXFP4: case RG_TYPE_NVFP4: return none;  // handled apart / no f16 field
    default: return at0;
    }
}

// Sweep block c of an IQ type: its grid indices and sign patterns are 32 c + 4 ib + l (or
// 64 c + 8 ib + m for the 8-index types), so blocks 0..63 hit every index and every pattern.
static void sweep_iq(uint32_t type, uint8_t *b, uint64_t c) {
    for (int ib = 0; ib < 8; ib++)
        for (int l = 0; l < 4; l++) {
            const uint32_t k = (uint32_t)(32 * c + 4 * (uint64_t)ib + (uint64_t)l);
            switch (type) {
            case RG_TYPE_IQ2_XXS: {  // a0 bytes: 8-bit index; a1: four 7-bit sign fields
                b[2 + 8 * ib + l] = (uint8_t)k;
                uint32_t a1 = (uint32_t)b[6 + 8 * ib] | (uint32_t)b[7 + 8 * ib] << 8 | (uint32_t)b[8 + 8 * ib] << 16 |
                              (uint32_t)b[9 + 8 * ib] << 24;
                a1 = (a1 & ~(127u << (7 * l))) | (k & 127) << (7 * l);
                for (int i = 0; i < 4; i++) b[6 + 8 * ib + i] = (uint8_t)(a1 >> (8 * i));
                break;
            }
            case RG_TYPE_IQ2_XS:  // u16: 9-bit index | 7-bit sign pattern << 9
                put16(b + 2 + 2 * (4 * ib + l), (uint16_t)((k & 511) | (k & 127) << 9));
                break;
            case RG_TYPE_IQ2_S:  // qs 8 bits + 2 bits of qh; a full sign byte
                b[2 + 4 * ib + l] = (uint8_t)k;
                b[66 + ib] = (uint8_t)((b[66 + ib] & ~(3u << (2 * l))) | ((k >> 8) & 3) << (2 * l));
                b[34 + 4 * ib + l] = (uint8_t)k;
                break;
            case RG_TYPE_IQ3_XXS: {  // 8 byte indices per sub-block; four 7-bit sign fields in a
                b[2 + 8 * ib + 2 * l] = (uint8_t)(2 * k), b[2 + 8 * ib + 2 * l + 1] = (uint8_t)(2 * k + 1);
                uint32_t a = (uint32_t)b[66 + 4 * ib] | (uint32_t)b[67 + 4 * ib] << 8 | (uint32_t)b[68 + 4 * ib] << 16 |
                             (uint32_t)b[69 + 4 * ib] << 24;
                a = (a & ~(127u << (7 * l))) | (k & 127) << (7 * l);
                for (int i = 0; i < 4; i++) b[66 + 4 * ib + i] = (uint8_t)(a >> (8 * i));
                break;
            }
            case RG_TYPE_IQ3_S:  // 9-bit indices (qs + a bit of qh), a full sign byte
                for (int i = 0; i < 2; i++) {
                    const uint32_t e = 2 * k + (uint32_t)i, m = (uint32_t)(2 * l + i);
                    b[2 + 8 * ib + m] = (uint8_t)e;
                    b[66 + ib] = (uint8_t)((b[66 + ib] & ~(1u << m)) | ((e >> 8) & 1) << m);
                }
                b[74 + 4 * ib + l] = (uint8_t)k;
                break;
            case RG_TYPE_IQ1_S: {  // 11-bit index: qs + 3 bits of the u16 h
                b[2 + 4 * ib + l] = (uint8_t)k;
                uint16_t h = (uint16_t)(b[34 + 2 * ib] | b[35 + 2 * ib] << 8);
                h = (uint16_t)((h & ~(7u << (3 * l))) | ((k >> 8) & 7) << (3 * l));
                put16(b + 34 + 2 * ib, h);
                break;
            }
            case RG_TYPE_IQ1_M: {  // 11-bit index: qs + the low 3 bits of a qh nibble
                b[4 * ib + l] = (uint8_t)k;
                uint8_t *q = &b[32 + 2 * ib + l / 2];
                const int sh = 4 * (l % 2);
                *q = (uint8_t)((*q & ~(7u << sh)) | ((k >> 8) & 7) << sh);
                break;
            }
            default:
                return;
            }
        }
}

// `n` blocks of `type` at dst, block i drawn from (stream, first + i).
static void make_blocks(uint32_t type, uint8_t *dst, int64_t n, uint64_t stream, uint64_t first) {
    const rg_type_traits *tt = rg_type_get(type);
    for (int64_t i = 0; i < n; i++) {
        uint8_t *b = dst + i * (int64_t)tt->type_size;
        const uint64_t id = first + (uint64_t)i;
        for (size_t j = 0; j < tt->type_size; j++) b[j] = (uint8_t)rnd(stream, 4096 * id + j);
        if (tt->block_size == 1) {  // a float element: finite
            if (type == RG_TYPE_F16) put16(b, finite_f16(rnd(stream + 1, id)));
            if (type == RG_TYPE_BF16 && (b[1] & 0x7F) == 0x7F && (b[0] & 0x80)) b[1] &= 0xBF;  // exponent < 255
            if (type == RG_TYPE_F32 && (b[3] & 0x7F) == 0x7F && (b[2] & 0x80)) b[3] &= 0xBF;
            continue;
        }
        sweep_iq(type, b, id % 64);
        // K-quants: every 7th block has its scale bytes all 0x00, every 7th + 3 all 0xFF.
        const int ext = id % 7 == 0 ? 0x00 : id % 7 == 3 ? 0xFF : -1;
        if (ext >= 0) {
            if (type == RG_TYPE_Q2_K) memset(b, ext, 16);
            if (type == RG_TYPE_Q3_K) memset(b + 96, ext, 12);
            if (type == RG_TYPE_Q4_K || type == RG_TYPE_Q5_K) memset(b + 4, ext, 12);
            if (type == RG_TYPE_Q6_K) memset(b + 192, ext, 16);
            if (type == RG_TYPE_IQ4_XS) memset(b + 2, ext, 6);
        }
        for (const int *f = f16_fields(type); *f >= 0; f++) put16(b + *f, finite_f16(rnd(stream + 1, id)));
        if (type == RG_TYPE_IQ1_M) {  // the f16 d in the top nibbles of the four scale words
            const uint16_t d = finite_f16(rnd(stream + 1, id));
            for (int k = 0; k < 4; k++) b[49 + 2 * k] = (uint8_t)((b[49 + 2 * k] & 0x0F) | ((d >> (4 * k)) & 15) << 4);
        }
        if (type == RG_TYPE_MXFP4) b[0] = id % 11 == 0 ? (uint8_t)(id % 2) : (uint8_t)(rnd(stream + 1, id) % 161);
    }
}

// ---------------------------------------------------------------------------
// Device helpers

static void *dev_upload(rg_cuda_ctx *ctx, const void *host, size_t bytes, rg_error *err) {
    void *p = NULL;
    if (rg_cuda_mem_alloc(ctx, bytes, &p, err) != RG_OK) return NULL;
    if (rg_cuda_copy_h2d(ctx, p, host, bytes, err) != RG_OK) {
        rg_cuda_mem_free(ctx, p);
        return NULL;
    }
    return p;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// The CPU's values of `rows` rows of `type` (row r at host + r * row_bytes, ROW_ELEMS each).
static float *cpu_rows(uint32_t type, const uint8_t *host, int64_t row_bytes, int64_t rows) {
    float *ref = malloc((size_t)(rows * ROW_ELEMS) * sizeof *ref);
    for (int64_t r = 0; ref && r < rows; r++) {
        rg_error err = {0};
        if (rg_dequantize(type, host + r * row_bytes, ref + r * ROW_ELEMS, ROW_ELEMS, type_name(type), &err) != RG_OK) {
            printf("    cpu dequantize %s: %s\n", type_name(type), err.msg);
            free(ref);
            return NULL;
        }
    }
    return ref;
}

// ---------------------------------------------------------------------------
// Cases

static void test_cuda_dequant_supported(void) {
    if (!have_gpu()) RG_SKIP("no CUDA device: %s", why);
    for (int i = 0; i < N_TYPES; i++)
        RG_CHECK(rg_cuda_dequant_supported(device_types[i]), "%s is not reported as decoded on the device",
                 type_name(device_types[i]));
    static const uint32_t not_decoded[] = {RG_TYPE_Q8_K, RG_TYPE_Q8_1, RG_TYPE_I8, RG_TYPE_I32, RG_TYPE_F64, 31, 99};
    for (size_t i = 0; i < sizeof not_decoded / sizeof not_decoded[0]; i++)
        RG_CHECK(!rg_cuda_dequant_supported(not_decoded[i]), "type id %u is reported as decoded on the device",
                 not_decoded[i]);
}

// One type, rows decoded on the device into (dst_type, k0, K, ld) and compared with the CPU.
static int check_rows(rg_cuda_ctx *ctx, uint32_t type, uint32_t dst_type, int64_t k0, int64_t K) {
    const rg_type_traits *tt = rg_type_get(type);
    const int64_t row_used = ROW_ELEMS / tt->block_size * (int64_t)tt->type_size;
    const int64_t row_bytes = row_used + ROW_PAD + (tt->block_size == 1 ? (int64_t)tt->type_size - ROW_PAD % (int64_t)tt->type_size : 0);
    const int64_t ld = K + 7, esz = (int64_t)rg_type_get(dst_type)->type_size;
    uint8_t *host = malloc((size_t)(ROWS * row_bytes));
    for (int64_t r = 0; r < ROWS; r++) {
        make_blocks(type, host + r * row_bytes, ROW_ELEMS / tt->block_size, type, (uint64_t)(r * (ROW_ELEMS / tt->block_size)));
        memset(host + r * row_bytes + row_used, 0xA5, (size_t)(row_bytes - row_used));
    }
    float *ref = cpu_rows(type, host, row_bytes, ROWS);
    const size_t out_bytes = (size_t)(ROWS * ld * esz);
    uint8_t *out = malloc(out_bytes), *sentinel = malloc(out_bytes);
    memset(sentinel, 0x5A, out_bytes);
    int bad = 0;
    rg_error err = {0};
    void *dsrc = dev_upload(ctx, host, (size_t)(ROWS * row_bytes), &err);
    void *ddst = dev_upload(ctx, sentinel, out_bytes, &err);
    rg_status st = dsrc && ddst ? RG_OK : RG_ERR_IO;
    if (!st) st = rg_cuda_dequant_rows(ctx, NULL, type, dsrc, row_bytes, ROWS, k0, K, dst_type, ddst, ld, &err);
    if (!st) st = rg_cuda_copy_d2h(ctx, out, ddst, out_bytes, &err);
    RG_CHECK(st == RG_OK && ref, "%s -> %s: %s", type_name(type), type_name(dst_type), err.msg);
    for (int64_t r = 0; !st && ref && r < ROWS; r++)
        for (int64_t k = 0; k < ld; k++) {
            const uint8_t *got = out + (r * ld + k) * esz;
            if (k >= K) {  // the padding between K and ld is never written
                if (memcmp(got, sentinel, (size_t)esz) && bad++ < 3)
                    RG_CHECK(0, "%s -> %s: row %lld, padding element %lld was written", type_name(type),
                             type_name(dst_type), (long long)r, (long long)k);
                continue;
            }
            const float want = ref[r * ROW_ELEMS + k0 + k];
            uint32_t w, g;
            if (dst_type == RG_TYPE_F32) w = f32_bits(want), memcpy(&g, got, 4);
            else {
                w = dst_type == RG_TYPE_BF16 ? rg_fp32_to_bf16(want) : rg_fp32_to_fp16(want);
                g = (uint32_t)got[0] | (uint32_t)got[1] << 8;
            }
            if (w != g && bad++ < 3)
                RG_CHECK(0, "%s -> %s: row %lld element %lld: device 0x%08x, cpu 0x%08x (%.9g)", type_name(type),
                         type_name(dst_type), (long long)r, (long long)(k0 + k), g, w, (double)want);
        }
    if (dsrc) rg_cuda_mem_free(ctx, dsrc);
    if (ddst) rg_cuda_mem_free(ctx, ddst);
    free(host), free(ref), free(out), free(sentinel);
    return st == RG_OK && ref && !bad;
}

static void rows_case(uint32_t dst_type) {
    if (!have_gpu()) RG_SKIP("no CUDA device: %s", why);
    rg_cuda_ctx *ctx = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_cuda_ctx_create(&ctx, 0, &err) == RG_OK, "%s", err.msg);
    // k0, K: the whole row, and [256, 1536) (40 groups: a warp and a part of one)
    static const int64_t ranges[][2] = {{0, ROW_ELEMS}, {256, ROW_ELEMS - 256}};
    printf("    %-8s %s, %d rows of %d elements, row_bytes past the row, ld = K + 7\n", "type", type_name(dst_type), ROWS,
           ROW_ELEMS);
    for (int i = 0; i < N_TYPES; i++) {
        int ok = 1;
        for (int r = 0; r < 2; r++) ok &= check_rows(ctx, device_types[i], dst_type, ranges[r][0], ranges[r][1]);
        printf("    %-8s %s\n", type_name(device_types[i]), ok ? "bits equal" : "FAIL");
    }
    rg_cuda_ctx_free(ctx);
}

static void test_cuda_dequant_rows_f32(void) { rows_case(RG_TYPE_F32); }
static void test_cuda_dequant_rows_bf16(void) { rows_case(RG_TYPE_BF16); }
static void test_cuda_dequant_rows_f16(void) { rows_case(RG_TYPE_F16); }

// rg_cu_decode32 through a kernel: consecutive blocks (the sweep included) against rg_dequantize.
static void test_cuda_dequant_decode32(void) {
    if (!have_gpu()) RG_SKIP("no CUDA device: %s", why);
    rg_cuda_ctx *ctx = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_cuda_ctx_create(&ctx, 0, &err) == RG_OK, "%s", err.msg);
    for (int i = 0; i < N_TYPES; i++) {
        const uint32_t type = device_types[i];
        const rg_type_traits *tt = rg_type_get(type);
        if (tt->block_size == 1) {
            RG_CHECK(rg_cuda_dequant_decode32(ctx, type, NULL, 1, NULL, &err) == RG_ERR_UNSUPPORTED,
                     "decode32 of %s (no 32-element blocks) was not refused", tt->name);
            continue;
        }
        const int64_t n_blocks = 64 + 5, n = n_blocks * tt->block_size;
        uint8_t *host = malloc((size_t)n_blocks * tt->type_size);
        float *ref = malloc((size_t)n * sizeof *ref), *got = malloc((size_t)n * sizeof *got);
        make_blocks(type, host, n_blocks, 100 + type, 0);
        rg_status st = rg_dequantize(type, host, ref, n, tt->name, &err);
        void *dsrc = NULL, *ddst = NULL;
        if (!st) st = (dsrc = dev_upload(ctx, host, (size_t)n_blocks * tt->type_size, &err)) ? RG_OK : RG_ERR_IO;
        if (!st) st = rg_cuda_mem_alloc(ctx, (size_t)n * sizeof(float), &ddst, &err);
        if (!st) st = rg_cuda_dequant_decode32(ctx, type, dsrc, n_blocks, ddst, &err);
        if (!st) st = rg_cuda_copy_d2h(ctx, got, ddst, (size_t)n * sizeof(float), &err);
        RG_CHECK(st == RG_OK, "decode32 %s: %s", tt->name, err.msg);
        int64_t bad = 0, first = -1;
        for (int64_t k = 0; !st && k < n; k++)
            if (f32_bits(got[k]) != f32_bits(ref[k])) bad++, first = first < 0 ? k : first;
        RG_CHECK(!bad, "decode32 %s: %lld of %lld elements differ, the first at %lld: device %.9g, cpu %.9g", tt->name,
                 (long long)bad, (long long)n, (long long)first, first >= 0 ? (double)got[first] : 0.0,
                 first >= 0 ? (double)ref[first] : 0.0);
        printf("    decode32 %-8s %lld blocks %s\n", tt->name, (long long)n_blocks, !st && !bad ? "bits equal" : "FAIL");
        if (dsrc) rg_cuda_mem_free(ctx, dsrc);
        if (ddst) rg_cuda_mem_free(ctx, ddst);
        free(host), free(ref), free(got);
    }
    rg_cuda_ctx_free(ctx);
}

// The tables are uploaded once per context, at the first type that reads them, and counted in
// the context's device memory.
static void test_cuda_dequant_tables_once(void) {
    if (!have_gpu()) RG_SKIP("no CUDA device: %s", why);
    rg_cuda_ctx *ctx = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_cuda_ctx_create(&ctx, 0, &err) == RG_OK, "%s", err.msg);
    const rg_type_traits *tt = rg_type_get(RG_TYPE_IQ2_XXS);
    uint8_t host[66];
    make_blocks(RG_TYPE_IQ2_XXS, host, 1, 7, 0);
    void *dsrc = dev_upload(ctx, host, sizeof host, &err), *ddst = NULL;
    RG_REQUIRE(dsrc && rg_cuda_mem_alloc(ctx, 256 * sizeof(float), &ddst, &err) == RG_OK, "%s", err.msg);
    const size_t before = rg_cuda_ctx_bytes(ctx);
    size_t after[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        RG_CHECK(rg_cuda_dequant_rows(ctx, NULL, RG_TYPE_IQ2_XXS, dsrc, (int64_t)tt->type_size, 1, 0, 256, RG_TYPE_F32,
                                      ddst, 256, &err) == RG_OK,
                 "%s", err.msg);
        RG_CHECK(rg_cuda_sync(ctx, &err) == RG_OK, "%s", err.msg);
        after[i] = rg_cuda_ctx_bytes(ctx);
    }
    printf("    context bytes %zu, after the first IQ decode %zu, after the second %zu\n", before, after[0], after[1]);
    RG_CHECK(after[0] > before && after[0] - before < 64 * 1024, "the tables took %zu bytes",
             after[0] - before);
    RG_CHECK(after[1] == after[0], "a second decode allocated %zu more bytes", after[1] - after[0]);
    rg_cuda_mem_free(ctx, dsrc), rg_cuda_mem_free(ctx, ddst);
    rg_cuda_ctx_free(ctx);
}

// A type without a device decoder is refused naming the type and the node; so are ranges
// that cut a block and outputs that are not a float type.
static void test_cuda_dequant_refusals(void) {
    if (!have_gpu()) RG_SKIP("no CUDA device: %s", why);
    rg_cuda_ctx *ctx = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_cuda_ctx_create(&ctx, 0, &err) == RG_OK, "%s", err.msg);
    void *buf = NULL;
    RG_REQUIRE(rg_cuda_mem_alloc(ctx, 4096, &buf, &err) == RG_OK, "%s", err.msg);
    rg_node node;
    memset(&node, 0, sizeof node);
    node.op = RG_OP_MUL_MAT, node.id = 42;
    snprintf(node.t.name, sizeof node.t.name, "blk.3.ffn_down.weight");
    static const uint32_t refused[] = {RG_TYPE_Q8_K, RG_TYPE_I32};
    for (int i = 0; i < 2; i++) {
        memset(&err, 0, sizeof err);
        const rg_status st = rg_cuda_dequant_rows(ctx, &node, refused[i], buf, 292, 1, 0, 256, RG_TYPE_F32, buf, 256, &err);
        printf("    %s: %s\n", type_name(refused[i]), err.msg);
        RG_CHECK(st == RG_ERR_UNSUPPORTED, "%s: status %d", type_name(refused[i]), (int)st);
        RG_CHECK(strstr(err.msg, type_name(refused[i])) && strstr(err.msg, "blk.3.ffn_down.weight") &&
                     strstr(err.msg, "node 42"),
                 "the refusal of %s does not name the type and the node: %s", type_name(refused[i]), err.msg);
    }
    struct {
        uint32_t type, dst_type;
        int64_t k0, K, ld;
    } bad[] = {
        {RG_TYPE_Q4_K, RG_TYPE_F32, 32, 256, 256},   // k0 inside a block
        {RG_TYPE_Q4_K, RG_TYPE_F32, 0, 128, 256},    // K not whole blocks
        {RG_TYPE_Q4_0, RG_TYPE_F32, 0, 64, 32},      // ld below K
        {RG_TYPE_Q4_0, RG_TYPE_Q8_0, 0, 32, 32},     // not a float output
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        const rg_status st = rg_cuda_dequant_rows(ctx, &node, bad[i].type, buf, 144, 1, bad[i].k0, bad[i].K,
                                                  bad[i].dst_type, buf, bad[i].ld, &err);
        RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, "blk.3.ffn_down.weight"), "case %zu: status %d: %s", i, (int)st,
                 err.msg);
    }
    rg_cuda_mem_free(ctx, buf);
    rg_cuda_ctx_free(ctx);
}

static const rg_test_case cases[] = {
    RG_TEST(test_cuda_dequant_supported),
    RG_TEST(test_cuda_dequant_rows_f32),
    RG_TEST(test_cuda_dequant_rows_bf16),
    RG_TEST(test_cuda_dequant_rows_f16),
    RG_TEST(test_cuda_dequant_decode32),
    RG_TEST(test_cuda_dequant_tables_once),
    RG_TEST(test_cuda_dequant_refusals),
    {0},
};

int main(int argc, char **argv) {
    printf("cuda compiled: %s\n", rg_cuda_compiled() ? "yes" : "no");
    return rg_test_run(argc, argv, cases);
}
