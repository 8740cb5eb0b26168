// test_ops.c - the op table's tests (DESIGN.md §4.1): every op's forward
// against a plain double-precision reference, and every gradient against
// central finite differences of that reference, for each type the op accepts.
//
// One row per rg_op in `entries` (indexed by the op; an op of rg_op_defs
// without a row fails test "table", so a newly declared op cannot go untested):
//   types   the types the op accepts (for MUL_MAT, OUT_PROD, GET_ROWS and CONT:
//           every weight type; quantized inputs are random F32 rows quantized
//           with the type's own quantizer, or random blocks with sane values
//           for the types whose quantizer needs an importance matrix, and the
//           reference reads their dequantized values),
//   gen     a case generator: shapes, op parameters and random inputs from a
//           fixed seed, one or more variants per type (broadcasts, masks, modes),
//   build   the graph, made with the public constructors,
//   ref     the forward in double (ref_fd: the function whose finite differences
//           the gradient must match, where the forward rounds on purpose: CPY),
//   metric and bound of the forward error.
// Then one loop per op, type and variant, printing one line per check:
//   fwd  rg_exec on 1 thread against the reference;
//   thr  2 threads: every thread count run twice gives identical bits, and the
//        2-thread result is within the forward bound of the 1-thread one;
//   bwd  for ops with a backward rule (rg_op_defs[op].backward): the inputs
//        marked trainable become rg_param, loss = sum(out * w) with a fixed
//        random w, rg_graph_backward, and each param->grad is compared with
//        central differences of the double reference.
//
// Forward error measures, each a maximum over the output elements:
//   maxrel   |y - r| / max|r|: ops a few rounded f32 operations away from the
//            exact value (elementwise ops, norms, rope, softmax, the losses).
//   absrel   |y - r| / r(|inputs|): sums of products (matmul, out_prod, the
//            reductions). A float sum of n terms errs by at most (n-1)*u*sum|term|
//            (u = 2^-24), and r(|inputs|) is exactly sum|term|.
//   elemrel  |y - r| / |r| per element: copies, casts and fills (bound 0: they
//            must be exact; casts round to nearest even) and the optimizer steps
//            (rtol 2e-6, training.md §1.2).
// Gradient measure: max|g - fd| / max(1, max|fd|) <= 1e-4 for every op. The
// finite differences are of the double reference with h = 1e-5 * max(1, |x|):
// truncation ~h^2 ~ 1e-10 and rounding ~1e-16/h ~ 1e-11, exact for this use.
// The graph's gradient is f32 with reductions of at most 256 terms, whose
// worst-case error is 256 * 2^-24 = 1.5e-5 relative (typically 1e-7), so
// 1e-4 has a margin of 6x on the worst case, while a wrong rule (a missing
// term, a sign, a wrong broadcast) is an O(1) relative error.
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "cpu/ssm_math.h"
#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "graph/ops.h"
#include "graph/pack.h"
#include "rg_test.h"
#include "tensor/quant/quant.h"

#define MAX_IN 6
#define MAX_OUT 3
#define TEND 0xffffffffu
#define BWD_TOL 1e-4

enum metric { M_NORM, M_ABS, M_ELEM };
static const char *const metric_name[] = {"maxrel", "absrel", "elemrel"};

// One input leaf of a case.
typedef struct tin {
    const char *name;
    uint32_t type;
    int64_t ne[4];
    bool param;      // trainable in the backward check
    double *val;     // the values the reference reads (dequantized); NULL for I32
    int32_t *ival;   // I32 inputs
    void *bytes;     // the leaf's bytes as generated
    void *work;      // the bytes bound to the leaf, restored from `bytes` before every run
    size_t nbytes;
} tin;

typedef struct tcase {
    char label[48];
    uint32_t type;   // the type under test
    uint64_t seed;
    int n_in;
    tin in[MAX_IN];
    int64_t ip[8];   // op parameters shared by the builder and the reference
    double fp[8];
    int64_t out_ne[4];  // shape of the first output
    int64_t n_out;      // reference outputs in all (the builder may return extra outputs)
    double fwd_tol;     // < 0: the entry's bound
} tcase;

typedef int (*gen_fn)(tcase *c, uint32_t type, int variant);  // 0: no such variant
typedef int (*build_fn)(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out);  // number of outputs
typedef void (*ref_fn)(const tcase *c, double *const *x, double *y);

typedef struct op_entry {
    const uint32_t *types;
    gen_fn gen;
    build_fn build;
    ref_fn ref;
    ref_fn ref_fd;   // NULL: ref
    int metric;
    double fwd_tol;
    bool cuda_bits;  // the CUDA kernel makes the CPU's operations in its order: cuda_parity wants equal bits
} op_entry;

static bool quick(void) {
    const char *q = getenv("RG_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

// ---------------------------------------------------------------------------
// Shapes and values in every type

static int64_t nel4(const int64_t ne[4]) { return ne[0] * ne[1] * ne[2] * ne[3]; }
static int64_t at4(const int64_t ne[4], int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3));
}
#define FOR4(ne, i0, i1, i2, i3)                  \
    for (int64_t i3 = 0; i3 < (ne)[3]; i3++)      \
        for (int64_t i2 = 0; i2 < (ne)[2]; i2++)  \
            for (int64_t i1 = 0; i1 < (ne)[1]; i1++) \
                for (int64_t i0 = 0; i0 < (ne)[0]; i0++)

static void set_ne(int64_t ne[4], int64_t a, int64_t b, int64_t c, int64_t d) { ne[0] = a, ne[1] = b, ne[2] = c, ne[3] = d; }

static bool is_float_type(uint32_t t) { return t == RG_TYPE_F32 || t == RG_TYPE_F16 || t == RG_TYPE_BF16; }

// Row length used for a type: a whole number of blocks, small for plain types.
static int64_t row_len(uint32_t type) {
    int64_t bs = rg_type_get(type)->block_size;
    return bs == 1 ? 16 : bs < 64 ? 64 : bs;
}

// x rounded to the nearest value with p significant bits, normal exponents
// down to emin (below: the subnormal grid), ties to even; |result| >= overflow
// becomes Inf. nearbyint rounds to nearest even in the default mode.
static double round_fmt(double x, int p, int emin, double overflow) {
    if (x == 0 || !isfinite(x)) return x;
    int e;
    frexp(x, &e);
    int lead = e - 1 < emin ? emin : e - 1;
    double ulp = ldexp(1.0, lead - (p - 1));
    double q = nearbyint(x / ulp) * ulp;
    return fabs(q) >= overflow ? copysign(INFINITY, x) : q;
}

static double round_to(uint32_t type, double x) {
    switch (type) {
    case RG_TYPE_F16: return round_fmt(x, 11, -14, 65536.0);
    case RG_TYPE_BF16: return round_fmt(x, 8, -126, ldexp(1.0, 128));
    case RG_TYPE_F32: return round_fmt(x, 24, -126, ldexp(1.0, 128));
    default: return x;
    }
}

static double f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}
static double bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// Bits of a value already representable in F16 / BF16.
static uint16_t f16_bits(double v) {
    uint16_t s = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    if (a == 0) return s;
    if (isinf(a)) return s | 0x7c00;
    int e;
    double f = frexp(a, &e);
    if (e - 1 < -14) return (uint16_t)(s | (uint16_t)(a * 16777216.0));
    return (uint16_t)(s | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(f * 2048.0 - 1024.0));
}
static uint16_t bf16_bits(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

// Random blocks for types without a usable quantizer: draws until the block
// dequantizes to finite values of a sane size.
static void random_blocks(uint32_t type, uint64_t seed, uint64_t stream, uint8_t *dst, int64_t n_blocks) {
    const rg_type_traits *tt = rg_type_get(type);
    const rg_quant_ops *ops = rg_quant_get(type);
    float *tmp = malloc(sizeof(float) * (size_t)tt->block_size);
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = dst + b * (int64_t)tt->type_size;
        bool ok = false;
        for (uint64_t attempt = 0; attempt < 100000 && !ok; attempt++) {
            for (size_t j = 0; j < tt->type_size; j++)
                blk[j] = (uint8_t)rg_rng_u64(seed, 0x10000 + stream, ((uint64_t)b << 32) + attempt * 4096 + j);
            ops->dequant_ref(blk, tmp, tt->block_size);
            double mx = 0;
            ok = true;
            for (int64_t i = 0; i < tt->block_size; i++) {
                if (!isfinite(tmp[i])) ok = false;
                else if (fabs(tmp[i]) > mx) mx = fabs(tmp[i]);
            }
            ok = ok && mx > 1e-3 && mx < 4.0;
        }
        if (!ok) memset(blk, 0, tt->type_size);
    }
    free(tmp);
}

static tin *new_in(tcase *c, const char *name, uint32_t type, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                   bool param) {
    tin *t = &c->in[c->n_in++];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->type = type;
    set_ne(t->ne, n0, n1, n2, n3);
    t->param = param;
    t->nbytes = rg_type_row_size(type, n0) * (size_t)(n1 * n2 * n3);
    size_t alloc = (t->nbytes + 63) / 64 * 64;
    t->bytes = calloc(1, alloc ? alloc : 64);
    t->work = aligned_alloc(64, alloc ? alloc : 64);
    if (type == RG_TYPE_I32) t->ival = (int32_t *)t->bytes;
    else t->val = calloc((size_t)nel4(t->ne), sizeof(double));
    return t;
}

// An input of `type` from normal values * scale (rounded or quantized to the type).
static tin *in_rand(tcase *c, const char *name, uint32_t type, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                    double scale, bool param) {
    uint64_t stream = (uint64_t)c->n_in;
    tin *t = new_in(c, name, type, n0, n1, n2, n3, param);
    const int64_t n = nel4(t->ne);
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * rg_rng_normal(c->seed, stream, (uint64_t)i));
    switch (type) {
    case RG_TYPE_F32:
        memcpy(t->bytes, x, sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) t->val[i] = x[i];
        break;
    case RG_TYPE_F16:
    case RG_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            t->val[i] = round_to(type, x[i]);
            ((uint16_t *)t->bytes)[i] = type == RG_TYPE_F16 ? f16_bits(t->val[i]) : bf16_bits(t->val[i]);
        }
        break;
    default: {
        const rg_quant_ops *ops = rg_quant_get(type);
        const size_t row = rg_type_row_size(type, n0);
        const int64_t rows = n / n0;
        if (ops->quantize && !ops->quantize_needs_imatrix) {
            for (int64_t r = 0; r < rows; r++) ops->quantize(x + r * n0, (char *)t->bytes + r * (int64_t)row, n0, NULL);
        } else {
            random_blocks(type, c->seed, stream, t->bytes, n / rg_type_get(type)->block_size);
        }
        for (int64_t r = 0; r < rows; r++) {
            ops->dequant_ref((char *)t->bytes + r * (int64_t)row, x + r * n0, n0);
            for (int64_t i = 0; i < n0; i++) t->val[r * n0 + i] = x[r * n0 + i];
        }
    }
    }
    free(x);
    return t;
}

static tin *in_i32(tcase *c, const char *name, int64_t n, const int32_t *v) {
    tin *t = new_in(c, name, RG_TYPE_I32, n, 1, 1, 1, false);
    memcpy(t->ival, v, sizeof(int32_t) * (size_t)n);
    return t;
}

// Overwrites element i of an F32 input.
static void set_f32(tin *t, int64_t i, double v) {
    float f = (float)v;
    ((float *)t->bytes)[i] = f;
    t->val[i] = f;
}

static void free_case(tcase *c) {
    for (int k = 0; k < c->n_in; k++) {
        free(c->in[k].bytes);
        free(c->in[k].work);
        free(c->in[k].val);
    }
    c->n_in = 0;
}

// Reads a tensor (any strides; block types row by row) as doubles in ggml order.
static void read_tensor(const rg_tensor *t, double *dst) {
    const int64_t ne0 = t->ne[0];
    const rg_quant_ops *ops = rg_quant_get(t->type);
    float *row = malloc(sizeof(float) * (size_t)(ne0 ? ne0 : 1));
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++) {
                const char *p = (const char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
                double *d = dst + ne0 * (i1 + t->ne[1] * (i2 + t->ne[2] * i3));
                for (int64_t i0 = 0; i0 < ne0 && rg_type_get(t->type)->block_size == 1; i0++) {
                    const char *q = p + i0 * (int64_t)t->nb[0];
                    uint16_t h;
                    float f;
                    int32_t v;
                    switch (t->type) {
                    case RG_TYPE_F32: memcpy(&f, q, 4), d[i0] = f; break;
                    case RG_TYPE_F16: memcpy(&h, q, 2), d[i0] = f16_value(h); break;
                    case RG_TYPE_BF16: memcpy(&h, q, 2), d[i0] = bf16_value(h); break;
                    case RG_TYPE_I32: memcpy(&v, q, 4), d[i0] = v; break;
                    case RG_TYPE_F64: memcpy(&d[i0], q, 8); break;
                    default: d[i0] = NAN;
                    }
                }
                if (rg_type_get(t->type)->block_size > 1) {
                    ops->dequant_ref(p, row, ne0);
                    for (int64_t i0 = 0; i0 < ne0; i0++) d[i0] = row[i0];
                }
            }
    free(row);
}

// ---------------------------------------------------------------------------
// Reference helpers

// Element (i0, i1, i2, i3) of input t, read through a transpose of dims 0 and 1 when trans.
static double get_t(const tin *t, const double *x, bool trans, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return trans ? x[at4(t->ne, i1, i0, i2, i3)] : x[at4(t->ne, i0, i1, i2, i3)];
}

static double sigmoid(double a) { return a >= 0 ? 1.0 / (1.0 + exp(-a)) : exp(a) / (1.0 + exp(a)); }

// ---------------------------------------------------------------------------
// Ops, one block each: generator, builder, reference. Type lists first.

static const uint32_t T_F32[] = {RG_TYPE_F32, TEND};
static const uint32_t T_FLOAT[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16, TEND};
static const uint32_t T_RESHAPE[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16, RG_TYPE_Q8_0, RG_TYPE_Q4_K, TEND};
static const uint32_t T_WEIGHTS[] = {
    RG_TYPE_F32,   RG_TYPE_F16,     RG_TYPE_BF16,   RG_TYPE_Q4_0,    RG_TYPE_Q4_1,  RG_TYPE_Q5_0,   RG_TYPE_Q5_1,
    RG_TYPE_Q8_0,  RG_TYPE_Q2_K,    RG_TYPE_Q3_K,   RG_TYPE_Q4_K,    RG_TYPE_Q5_K,  RG_TYPE_Q6_K,   RG_TYPE_IQ2_XXS,
    RG_TYPE_IQ2_XS, RG_TYPE_IQ2_S,  RG_TYPE_IQ3_XXS, RG_TYPE_IQ3_S,  RG_TYPE_IQ1_S, RG_TYPE_IQ1_M,  RG_TYPE_IQ4_NL,
    RG_TYPE_IQ4_XS, RG_TYPE_TQ1_0,  RG_TYPE_TQ2_0,  RG_TYPE_MXFP4,   RG_TYPE_NVFP4, RG_TYPE_Q1_0,   RG_TYPE_Q2_0,
    TEND};
// Under RG_TEST_QUICK (the sanitizer run) one type per family.
static const uint32_t T_WEIGHTS_QUICK[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16, RG_TYPE_Q4_1, RG_TYPE_Q8_0,
                                           RG_TYPE_Q4_K, RG_TYPE_IQ2_XXS, RG_TYPE_IQ4_XS, RG_TYPE_MXFP4, TEND};

// "big" variants: forward only, large enough (72000 elements) that every
// kernel splits its work between the threads (the kernels run small outputs
// on one thread), so the 2-thread checks mean something.
#define BIG0 300
#define BIG1 240

static void label(tcase *c, uint32_t type, const char *what) {
    snprintf(c->label, sizeof c->label, "%s%s%s", rg_type_get(type)->name, what[0] ? " " : "", what);
}

// NONE: a leaf read back as it was bound.
static int gen_leaf(tcase *c, uint32_t type, int v) {
    if (v > 0) return 0;
    label(c, type, "");
    in_rand(c, "a", type, 4, 3, 1, 1, 1.0, true);
    set_ne(c->out_ne, 4, 3, 1, 1);
    return 1;
}
static int build_leaf(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)g, (void)c;
    out[0] = in[0];
    return 1;
}
static void ref_copy(const tcase *c, double *const *x, double *y) {
    for (int64_t i = 0; i < nel4(c->out_ne); i++) y[i] = x[0][i];
}

// FILL: every element = fp[0] stored in the type.
static int gen_fill(tcase *c, uint32_t type, int v) {
    if (v > 2) return 0;
    c->fp[0] = v == 1 ? (double)1.0e-6f : (double)0.1f;  // 1e-6 is subnormal in F16
    label(c, type, v == 0 ? "0.1" : v == 1 ? "1e-6" : "big");
    if (v == 2) set_ne(c->out_ne, BIG0, BIG1, 1, 1);
    else set_ne(c->out_ne, 5, 3, 1, 1);
    return 1;
}
static int build_fill(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)in;
    out[0] = rg_fill(g, c->type, 2, c->out_ne, (float)c->fp[0]);
    return 1;
}
static void ref_fill(const tcase *c, double *const *x, double *y) {
    (void)x;
    for (int64_t i = 0; i < nel4(c->out_ne); i++) y[i] = round_to(c->type, c->fp[0]);
}

// GET_ROWS: table [L, 5] of any type, ids [4] with a repeat.
static int gen_get_rows(tcase *c, uint32_t type, int v) {
    if (v > 1) return 0;
    static const int32_t ids[4] = {3, 0, 3, 1};
    if (v == 1) {  // big: [256, 40] table, 160 ids
        int32_t many[160];
        for (int i = 0; i < 160; i++) many[i] = (i * 7 + i / 3) % 40;
        label(c, type, "big");
        in_rand(c, "table", type, 256, 40, 1, 1, 1.0, false);
        in_i32(c, "ids", 160, many);
        set_ne(c->out_ne, 256, 160, 1, 1);
        return 1;
    }
    const int64_t L = row_len(type);
    label(c, type, "");
    in_rand(c, "table", type, L, 5, 1, 1, 1.0, is_float_type(type));
    in_i32(c, "ids", 4, ids);
    set_ne(c->out_ne, L, 4, 1, 1);
    return 1;
}
static int build_get_rows(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_get_rows(g, in[0], in[1]);
    return 1;
}
static void ref_get_rows(const tcase *c, double *const *x, double *y) {
    const int64_t L = c->in[0].ne[0];
    for (int64_t t = 0; t < c->in[1].ne[0]; t++)
        for (int64_t i = 0; i < L; i++) y[i + L * t] = x[0][i + L * c->in[1].ival[t]];
}

// GET_ROWS_BACK: scatter-add of dy [6, 5] into 6 rows (three rows get nothing, one gets three).
static int gen_get_rows_back(tcase *c, uint32_t type, int v) {
    if (v > 1) return 0;
    static const int32_t ids[5] = {2, 0, 2, 4, 2};
    if (v == 1) {  // big: dy [256, 160] into 40 rows
        int32_t many[160];
        for (int i = 0; i < 160; i++) many[i] = (i * 7 + i / 3) % 40;
        label(c, type, "big");
        in_rand(c, "dy", type, 256, 160, 1, 1, 1.0, false);
        in_i32(c, "ids", 160, many);
        c->ip[0] = 40;
        set_ne(c->out_ne, 256, 40, 1, 1);
        return 1;
    }
    label(c, type, "");
    in_rand(c, "dy", type, 6, 5, 1, 1, 1.0, false);
    in_i32(c, "ids", 5, ids);
    c->ip[0] = 6;
    set_ne(c->out_ne, 6, 6, 1, 1);
    return 1;
}
static int build_get_rows_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_get_rows_back(g, in[0], in[1], c->ip[0]);
    return 1;
}
static void ref_get_rows_back(const tcase *c, double *const *x, double *y) {
    const int64_t n = c->in[0].ne[0];
    memset(y, 0, sizeof(double) * (size_t)nel4(c->out_ne));
    for (int64_t t = 0; t < c->in[1].ne[0]; t++)
        for (int64_t i = 0; i < n; i++) y[i + n * c->in[1].ival[t]] += x[0][i + n * t];
}

// MUL_MAT: W [K, M, b2] of any type times x [K, N, c2]; slice i2 of x uses
// slice i2 / (c2 / b2) of W (architectures.md §0.1, GQA). Weights whose dot
// product runs on 8-bit activations (vec_dot_type q8_*) carry that rounding:
// each activation moves by at most 1/254 of its block's maximum, bound 1e-2 of
// sum|w*x|; F32/F16/BF16 weights multiply F32 activations: K*u = 1.5e-5.
static int gen_mul_mat(tcase *c, uint32_t type, int v) {
    if (v > 3) return 0;
    const int64_t K = row_len(type) < 64 ? 64 : row_len(type);
    const bool trainable_w = is_float_type(type);
    static const char *const names[4] = {"N=3", "gqa N=2", "N=16", "gqa N=12"};
    label(c, type, names[v]);
    // Few columns take the dot products (8-bit activations for the quantized
    // types); 8 or more the SGEMM on dequantized weights and F32 activations.
    // x is trained where the FD cost allows (dX is the same graph for any N);
    // a float w always.
    const int64_t M = v < 2 ? 3 + (v == 0) : 8, N = v == 0 ? 3 : v == 1 ? 2 : v == 2 ? 16 : 12;
    const int64_t b2 = v % 2 ? 2 : 1, c2 = v % 2 ? 4 : 1;
    in_rand(c, "w", type, K, M, b2, 1, 0.5, trainable_w);
    in_rand(c, "x", RG_TYPE_F32, K, N, c2, 1, 1.0, v < 2 || (v == 2 && K == 64));
    set_ne(c->out_ne, M, N, c2, 1);
    c->fwd_tol = rg_quant_get(type)->vec_dot_type == RG_TYPE_F32 || v >= 2 ? 2e-5 : 1e-2;
    return 1;
}
static int build_mul_mat(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_mul_mat(g, in[0], in[1]);
    return 1;
}
static void ref_mul_mat(const tcase *c, double *const *x, double *y) {
    const tin *w = &c->in[0], *a = &c->in[1];
    const int64_t K = w->ne[0], r2 = a->ne[2] / w->ne[2], r3 = a->ne[3] / w->ne[3];
    FOR4(c->out_ne, m, n, i2, i3) {
        const double *wr = x[0] + at4(w->ne, 0, m, i2 / r2, i3 / r3), *xr = x[1] + at4(a->ne, 0, n, i2, i3);
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += wr[k] * xr[k];
        y[at4(c->out_ne, m, n, i2, i3)] = s;
    }
}

// OUT_PROD: out[i, j] = sum_k a[i, k] b[j, k], a [M, K, b2] of any type (rows
// of M, as W [K, M] is used for dX), b [N, K, c2] F32, also as a transposed
// view (the backward's transpose(dY)); slice i2 of b uses slice i2 / (c2 / b2)
// of a, as MUL_MAT. K = 5: bound 1e-5 of sum|a*b| (4u = 2.4e-7 in theory).
static int gen_out_prod(tcase *c, uint32_t type, int v) {
    if (v > 2) return 0;
    const int64_t M = row_len(type), K = 5, N = 3;
    label(c, type, v == 0 ? "" : v == 1 ? "b-transposed" : "bcast");
    c->ip[0] = v == 1;
    in_rand(c, "a", type, M, K, v == 2 ? 2 : 1, 1, 0.5, false);
    if (v == 1) in_rand(c, "bT", RG_TYPE_F32, K, N, 1, 1, 1.0, false);
    else in_rand(c, "b", RG_TYPE_F32, N, K, v == 2 ? 4 : 1, 1, 1.0, false);
    set_ne(c->out_ne, M, N, v == 2 ? 4 : 1, 1);
    return 1;
}
static int build_out_prod(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_out_prod(g, in[0], c->ip[0] ? rg_transpose(g, in[1]) : in[1]);
    return 1;
}
static void ref_out_prod(const tcase *c, double *const *x, double *y) {
    const tin *a = &c->in[0], *b = &c->in[1];
    const int64_t K = a->ne[1], r2 = c->out_ne[2] / a->ne[2], r3 = c->out_ne[3] / a->ne[3];
    FOR4(c->out_ne, i, j, i2, i3) {
        double s = 0;
        for (int64_t k = 0; k < K; k++)
            s += x[0][at4(a->ne, i, k, i2 / r2, i3 / r3)] * get_t(b, x[1], c->ip[0] != 0, j, k, i2, i3);
        y[at4(c->out_ne, i, j, i2, i3)] = s;
    }
}

// ADD, SUB, MUL: b broadcast into a [5, 4, 3] by tiling (b.ne[i] divides a.ne[i]).
static int gen_binary(tcase *c, uint32_t type, int v) {
    static const int64_t bne[5][4] = {{5, 4, 3, 1}, {5, 1, 1, 1}, {1, 4, 3, 1}, {5, 2, 1, 1}, {1, 1, 1, 1}};
    static const char *const names[6] = {"same", "row", "per-row", "tile", "scalar", "big row"};
    if (v > 5) return 0;
    label(c, type, names[v]);
    if (v == 5) {
        in_rand(c, "a", RG_TYPE_F32, BIG0, BIG1, 1, 1, 1.0, false);
        in_rand(c, "b", RG_TYPE_F32, BIG0, 1, 1, 1, 1.0, false);
        set_ne(c->out_ne, BIG0, BIG1, 1, 1);
        return 1;
    }
    in_rand(c, "a", RG_TYPE_F32, 5, 4, 3, 1, 1.0, true);
    in_rand(c, "b", RG_TYPE_F32, bne[v][0], bne[v][1], bne[v][2], bne[v][3], 1.0, true);
    set_ne(c->out_ne, 5, 4, 3, 1);
    return 1;
}
static int build_add(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_add(g, in[0], in[1]);
    return 1;
}
static int build_sub(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_sub(g, in[0], in[1]);
    return 1;
}
static int build_mul(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_mul(g, in[0], in[1]);
    return 1;
}
static void ref_binary(const tcase *c, double *const *x, double *y, char op) {
    const int64_t *bn = c->in[1].ne;
    FOR4(c->out_ne, i0, i1, i2, i3) {
        double a = x[0][at4(c->out_ne, i0, i1, i2, i3)];
        double b = x[1][at4(bn, i0 % bn[0], i1 % bn[1], i2 % bn[2], i3 % bn[3])];
        y[at4(c->out_ne, i0, i1, i2, i3)] = op == '+' ? a + b : op == '-' ? a - b : a * b;
    }
}
static void ref_add(const tcase *c, double *const *x, double *y) { ref_binary(c, x, y, '+'); }
static void ref_sub(const tcase *c, double *const *x, double *y) { ref_binary(c, x, y, '-'); }
static void ref_mul(const tcase *c, double *const *x, double *y) { ref_binary(c, x, y, '*'); }

// SCALE, also of a transposed view.
static int gen_scale(tcase *c, uint32_t type, int v) {
    if (v > 2) return 0;
    label(c, type, v == 0 ? "" : v == 1 ? "transposed" : "big transposed");
    c->ip[0] = v > 0;
    c->fp[0] = -1.75;
    if (v == 2) in_rand(c, "a", RG_TYPE_F32, BIG1, BIG0, 1, 1, 1.0, false), set_ne(c->out_ne, BIG0, BIG1, 1, 1);
    else in_rand(c, "a", RG_TYPE_F32, 6, 5, 1, 1, 1.0, true), set_ne(c->out_ne, v ? 5 : 6, v ? 6 : 5, 1, 1);
    return 1;
}
static int build_scale(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_scale(g, c->ip[0] ? rg_transpose(g, in[0]) : in[0], (float)c->fp[0]);
    return 1;
}
static void ref_scale(const tcase *c, double *const *x, double *y) {
    FOR4(c->out_ne, i0, i1, i2, i3)
    y[at4(c->out_ne, i0, i1, i2, i3)] = c->fp[0] * get_t(&c->in[0], x[0], c->ip[0] != 0, i0, i1, i2, i3);
}

// REPEAT: a tiled to like's shape; REPEAT_BACK: the sum of a's tiles into like's shape.
static int gen_repeat(tcase *c, uint32_t type, int v) {
    if (v > 2) return 0;
    label(c, type, v == 0 ? "[3,2]->[6,4,2]" : v == 1 ? "[1,4]->[5,4,3]" : "big [300,1]->[300,240]");
    if (v == 0) in_rand(c, "a", RG_TYPE_F32, 3, 2, 1, 1, 1.0, true), in_rand(c, "like", RG_TYPE_F32, 6, 4, 2, 1, 1.0, false);
    if (v == 1) in_rand(c, "a", RG_TYPE_F32, 1, 4, 1, 1, 1.0, true), in_rand(c, "like", RG_TYPE_F32, 5, 4, 3, 1, 1.0, false);
    if (v == 2) in_rand(c, "a", RG_TYPE_F32, BIG0, 1, 1, 1, 1.0, false), in_rand(c, "like", RG_TYPE_F32, BIG0, BIG1, 1, 1, 1.0, false);
    memcpy(c->out_ne, c->in[1].ne, sizeof c->out_ne);
    return 1;
}
static int build_repeat(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_repeat(g, in[0], in[1]);
    return 1;
}
static void ref_repeat(const tcase *c, double *const *x, double *y) {
    const int64_t *an = c->in[0].ne;
    FOR4(c->out_ne, i0, i1, i2, i3)
    y[at4(c->out_ne, i0, i1, i2, i3)] = x[0][at4(an, i0 % an[0], i1 % an[1], i2 % an[2], i3 % an[3])];
}
static int gen_repeat_back(tcase *c, uint32_t type, int v) {
    if (v > 2) return 0;
    label(c, type, v == 0 ? "[6,4,2]->[3,2]" : v == 1 ? "[5,4,3]->[1,4]" : "big [300,240]->[150,4]");
    if (v == 0) in_rand(c, "a", RG_TYPE_F32, 6, 4, 2, 1, 1.0, true), in_rand(c, "like", RG_TYPE_F32, 3, 2, 1, 1, 1.0, false);
    if (v == 1) in_rand(c, "a", RG_TYPE_F32, 5, 4, 3, 1, 1.0, true), in_rand(c, "like", RG_TYPE_F32, 1, 4, 1, 1, 1.0, false);
    if (v == 2) in_rand(c, "a", RG_TYPE_F32, BIG0, BIG1, 1, 1, 1.0, false), in_rand(c, "like", RG_TYPE_F32, 150, 4, 1, 1, 1.0, false);
    memcpy(c->out_ne, c->in[1].ne, sizeof c->out_ne);
    return 1;
}
static int build_repeat_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_repeat_back(g, in[0], in[1]);
    return 1;
}
static void ref_repeat_back(const tcase *c, double *const *x, double *y) {
    const int64_t *on = c->out_ne;
    memset(y, 0, sizeof(double) * (size_t)nel4(on));
    FOR4(c->in[0].ne, i0, i1, i2, i3)
    y[at4(on, i0 % on[0], i1 % on[1], i2 % on[2], i3 % on[3])] += x[0][at4(c->in[0].ne, i0, i1, i2, i3)];
}

// SUM, MEAN of a [7, 5, 3]; SUM_ROWS of a [9, 4, 2].
static int gen_reduce(tcase *c, uint32_t type, int v, int64_t n0, int64_t n1, int64_t n2, bool rows) {
    if (v > 1) return 0;
    label(c, type, v == 0 ? "" : "big");
    if (v == 1) n0 = BIG0, n1 = BIG1, n2 = 1;
    in_rand(c, "a", RG_TYPE_F32, n0, n1, n2, 1, 1.0, v == 0);
    set_ne(c->out_ne, 1, rows ? n1 : 1, rows ? n2 : 1, 1);
    return 1;
}
static int gen_sum(tcase *c, uint32_t type, int v) { return gen_reduce(c, type, v, 7, 5, 3, false); }
static int gen_sum_rows(tcase *c, uint32_t type, int v) { return gen_reduce(c, type, v, 9, 4, 2, true); }
static int build_sum(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_sum(g, in[0]);
    return 1;
}
static int build_mean(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_mean(g, in[0]);
    return 1;
}
static int build_sum_rows(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_sum_rows(g, in[0]);
    return 1;
}
static void ref_sum(const tcase *c, double *const *x, double *y) {
    double s = 0;
    for (int64_t i = 0; i < nel4(c->in[0].ne); i++) s += x[0][i];
    y[0] = s;
}
static void ref_mean(const tcase *c, double *const *x, double *y) {
    ref_sum(c, x, y);
    y[0] /= (double)nel4(c->in[0].ne);
}
static void ref_sum_rows(const tcase *c, double *const *x, double *y) {
    const int64_t n = c->in[0].ne[0];
    for (int64_t r = 0; r < nel4(c->out_ne); r++) {
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += x[0][r * n + i];
        y[r] = s;
    }
}

// RMS_NORM over rows; also with a large eps, and of a transposed view (the
// constructor inserts a CONT). RMS_NORM_BACK: training.md §5.1.
static int gen_rms_norm(tcase *c, uint32_t type, int v) {
    if (v > 2) return 0;
    label(c, type, v == 0 ? "" : v == 1 ? "eps=1e-3" : "transposed");
    c->ip[0] = v == 2;
    c->fp[0] = v == 1 ? (double)1e-3f : (double)1e-5f;
    if (v == 0) in_rand(c, "x", RG_TYPE_F32, 16, 3, 2, 1, 1.0, true), set_ne(c->out_ne, 16, 3, 2, 1);
    if (v == 1) in_rand(c, "x", RG_TYPE_F32, 16, 3, 1, 1, 0.02, true), set_ne(c->out_ne, 16, 3, 1, 1);
    if (v == 2) in_rand(c, "xT", RG_TYPE_F32, 3, 16, 1, 1, 1.0, true), set_ne(c->out_ne, 16, 3, 1, 1);
    return 1;
}
static int build_rms_norm(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_rms_norm(g, c->ip[0] ? rg_transpose(g, in[0]) : in[0], (float)c->fp[0]);
    return 1;
}
static void ref_rms_norm(const tcase *c, double *const *x, double *y) {
    const int64_t *ne = c->out_ne;
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                double ss = 0;
                for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                    double v = get_t(&c->in[0], x[0], c->ip[0] != 0, i0, i1, i2, i3);
                    ss += v * v;
                }
                double r = 1.0 / sqrt(ss / (double)ne[0] + c->fp[0]);
                for (int64_t i0 = 0; i0 < ne[0]; i0++)
                    y[at4(ne, i0, i1, i2, i3)] = r * get_t(&c->in[0], x[0], c->ip[0] != 0, i0, i1, i2, i3);
            }
}
static int gen_rms_norm_back(tcase *c, uint32_t type, int v) {
    if (v > 0) return 0;
    label(c, type, "");
    c->fp[0] = (double)1e-5f;
    in_rand(c, "dy", RG_TYPE_F32, 16, 3, 2, 1, 1.0, false);
    in_rand(c, "x", RG_TYPE_F32, 16, 3, 2, 1, 1.0, false);
    set_ne(c->out_ne, 16, 3, 2, 1);
    return 1;
}
static int build_rms_norm_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_rms_norm_back(g, in[0], in[1], (float)c->fp[0]);
    return 1;
}
static void ref_rms_norm_back(const tcase *c, double *const *x, double *y) {
    const int64_t n = c->out_ne[0];
    for (int64_t r = 0; r < nel4(c->out_ne) / n; r++) {
        const double *dy = x[0] + r * n, *xx = x[1] + r * n;
        double ss = 0, sdx = 0;
        for (int64_t i = 0; i < n; i++) ss += xx[i] * xx[i], sdx += dy[i] * xx[i];
        double rr = 1.0 / sqrt(ss / (double)n + c->fp[0]);
        for (int64_t i = 0; i < n; i++) y[r * n + i] = rr * dy[i] - rr * rr * rr / (double)n * xx[i] * sdx;
    }
}

// ROPE (training.md §5.2): pairs (2i, 2i+1) in mode 0, (i, i + n_rot/2) in mode 2,
// theta_i = pos * freq_scale * base^(-2i/n_rot); dims >= n_rot pass through.
// ROPE_BACK rotates by -theta.
static int gen_rope_case(tcase *c, uint32_t type, int hd, int n_rot, int mode, double base, double scale,
                         const char *what) {
    static const int32_t pos[4] = {0, 3, 7, 12};
    label(c, type, what);
    c->ip[0] = n_rot, c->ip[1] = mode;
    c->fp[0] = (double)(float)base, c->fp[1] = (double)(float)scale;
    in_rand(c, "x", RG_TYPE_F32, hd, 3, 4, 1, 1.0, true);
    in_i32(c, "pos", 4, pos);
    set_ne(c->out_ne, hd, 3, 4, 1);
    return 1;
}
static int gen_rope(tcase *c, uint32_t type, int v) {
    switch (v) {
    case 0: return gen_rope_case(c, type, 8, 8, 0, 10000.0, 1.0, "normal");
    case 1: return gen_rope_case(c, type, 8, 8, 2, 10000.0, 1.0, "neox");
    case 2: return gen_rope_case(c, type, 8, 4, 0, 500.0, 0.25, "normal n_rot=4 scale=0.25");
    case 3: return gen_rope_case(c, type, 10, 6, 2, 1e6, 1.0, "neox n_rot=6/10 base=1e6");
    default: return 0;
    }
}
static int gen_rope_back(tcase *c, uint32_t type, int v) {
    switch (v) {
    case 0: return gen_rope_case(c, type, 8, 8, 0, 10000.0, 1.0, "normal");
    case 1: return gen_rope_case(c, type, 10, 6, 2, 500.0, 0.5, "neox n_rot=6/10");
    default: return 0;
    }
}
static int build_rope(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_rope(g, in[0], in[1], (int)c->ip[0], (int)c->ip[1], (float)c->fp[0], (float)c->fp[1]);
    return 1;
}
static int build_rope_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_rope_back(g, in[0], in[1], (int)c->ip[0], (int)c->ip[1], (float)c->fp[0], (float)c->fp[1]);
    return 1;
}
static void ref_rope_sign(const tcase *c, double *const *x, double *y, double sign) {
    const int64_t *ne = c->out_ne, n_rot = c->ip[0], half = n_rot / 2;
    const bool neox = c->ip[1] == 2;
    for (int64_t t = 0; t < ne[2]; t++)
        for (int64_t h = 0; h < ne[1]; h++) {
            const double *a = x[0] + at4(ne, 0, h, t, 0);
            double *o = y + at4(ne, 0, h, t, 0);
            for (int64_t i = n_rot; i < ne[0]; i++) o[i] = a[i];
            for (int64_t i = 0; i < half; i++) {
                double th = c->in[1].ival[t] * c->fp[1] * pow(c->fp[0], -2.0 * (double)i / (double)n_rot);
                double cs = cos(th), sn = sign * sin(th);
                int64_t p = neox ? i : 2 * i, q = neox ? i + half : 2 * i + 1;
                o[p] = a[p] * cs - a[q] * sn;
                o[q] = a[p] * sn + a[q] * cs;
            }
        }
}
static void ref_rope(const tcase *c, double *const *x, double *y) { ref_rope_sign(c, x, y, 1.0); }
static void ref_rope_back(const tcase *c, double *const *x, double *y) { ref_rope_sign(c, x, y, -1.0); }

// SOFT_MAX over rows of a [n_kv, T, H] (training.md §5.3-5.4): z = scale*a,
// capped to softcap*tanh(z/softcap), plus mask[j, i], keys j > i + (n_kv - T)
// removed when causal, and those with (i + n_kv - T) - j >= window when there is
// a window (architectures.md §1.7); a row with every key removed is zeros.
static void softmax_rows(const int64_t ne[4], const double *a, const double *mask, bool causal, double scale,
                         double cap, int64_t window, double *y) {
    const int64_t n_kv = ne[0], T = ne[1];
    double *z = malloc(sizeof(double) * (size_t)n_kv);
    for (int64_t r = 0; r < ne[1] * ne[2] * ne[3]; r++) {
        const int64_t i = r % T;
        double mx = -INFINITY;
        for (int64_t j = 0; j < n_kv; j++) {
            double v = scale * a[r * n_kv + j];
            if (cap > 0) v = cap * tanh(v / cap);
            if (mask) v += mask[i * n_kv + j];
            if (causal && j > i + (n_kv - T)) v = -INFINITY;
            if (window > 0 && (i + n_kv - T) - j >= window) v = -INFINITY;
            z[j] = v;
            if (v > mx) mx = v;
        }
        double s = 0;
        for (int64_t j = 0; j < n_kv; j++) s += mx == -INFINITY ? 0 : exp(z[j] - mx);
        for (int64_t j = 0; j < n_kv; j++) y[r * n_kv + j] = mx == -INFINITY ? 0 : exp(z[j] - mx) / s;
    }
    free(z);
}
static int gen_soft_max(tcase *c, uint32_t type, int v) {
    static const char *const names[6] = {"scale=0.8", "mask", "causal", "softcap=3+mask", "causal+window=3",
                                         "window=2+softcap+mask"};
    if (v > 5) return 0;
    label(c, type, names[v]);
    const int64_t n_kv = 6, T = 4, H = 2;
    c->ip[0] = v == 2 || v >= 4;        // causal
    c->ip[1] = v == 1 || v == 3 || v == 5;  // mask
    c->ip[2] = v == 4 ? 3 : v == 5 ? 2 : 0;  // sliding window
    c->fp[0] = v == 0 ? (double)0.8f : v == 2 ? 0.5 : v == 3 || v == 5 ? (double)1.3f : 1.0;
    c->fp[1] = v == 3 || v == 5 ? 3.0 : 0.0;
    in_rand(c, "a", RG_TYPE_F32, n_kv, T, H, 1, 2.0, true);
    if (c->ip[1]) {
        tin *m = in_rand(c, "mask", RG_TYPE_F32, n_kv, T, 1, 1, 1.0, false);
        // Some keys removed, and in the mask variant one whole query row (3).
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < n_kv; j++)
                if ((i + 2 * j) % 5 == 0 || (v == 1 && i == 3)) set_f32(m, i * n_kv + j, -INFINITY);
    }
    set_ne(c->out_ne, n_kv, T, H, 1);
    return 1;
}
static int build_soft_max(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_soft_max_ext(g, in[0], c->ip[1] ? in[1] : NULL, c->ip[0] != 0, (float)c->fp[0], (float)c->fp[1],
                             c->ip[2]);
    return 1;
}
static void ref_soft_max(const tcase *c, double *const *x, double *y) {
    softmax_rows(c->out_ne, x[0], c->ip[1] ? x[1] : NULL, c->ip[0] != 0, c->fp[0], c->fp[1], c->ip[2], y);
}
static int gen_soft_max_back(tcase *c, uint32_t type, int v) {
    if (v > 1) return 0;
    label(c, type, v == 0 ? "scale=0.7" : "softcap=2.5 scale=1.2");
    const int64_t ne[4] = {6, 4, 2, 1};
    c->fp[0] = v == 0 ? (double)0.7f : (double)1.2f;
    c->fp[1] = v == 0 ? 0.0 : 2.5;
    in_rand(c, "dy", RG_TYPE_F32, 6, 4, 2, 1, 1.0, false);
    tin *y = in_rand(c, "y", RG_TYPE_F32, 6, 4, 2, 1, 1.0, false);
    tin *a = in_rand(c, "a", RG_TYPE_F32, 6, 4, 2, 1, 2.0, false);
    double *s = malloc(sizeof(double) * 48);
    softmax_rows(ne, a->val, NULL, false, c->fp[0], c->fp[1], 0, s);
    for (int i = 0; i < 48; i++) set_f32(y, i, s[i]);
    free(s);
    set_ne(c->out_ne, 6, 4, 2, 1);
    return 1;
}
static int build_soft_max_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_soft_max_back(g, in[0], in[1], c->fp[1] > 0 ? in[2] : NULL, (float)c->fp[0], (float)c->fp[1]);
    return 1;
}
static void ref_soft_max_back(const tcase *c, double *const *x, double *y) {
    const int64_t n = c->out_ne[0];
    const double scale = c->fp[0], cap = c->fp[1];
    for (int64_t r = 0; r < nel4(c->out_ne) / n; r++) {
        const double *dy = x[0] + r * n, *yy = x[1] + r * n, *a = x[2] + r * n;
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += yy[j] * dy[j];
        for (int64_t j = 0; j < n; j++) {
            double d = yy[j] * (dy[j] - s) * scale;
            if (cap > 0) {
                double t = tanh(scale * a[j] / cap);
                d *= 1 - t * t;
            }
            y[r * n + j] = d;
        }
    }
}

// SILU, SILU_BACK, SWIGLU (training.md §5.5), inputs over +-12.
static int gen_silu(tcase *c, uint32_t type, int v) {
    if (v > 1) return 0;
    const int64_t n0 = v ? BIG0 : 9, n1 = v ? BIG1 : 4;
    label(c, type, v ? "big" : "");
    in_rand(c, "a", RG_TYPE_F32, n0, n1, 1, 1, 4.0, v == 0);
    set_ne(c->out_ne, n0, n1, 1, 1);
    return 1;
}
static int gen_silu_back(tcase *c, uint32_t type, int v) {
    if (v > 1) return 0;
    const int64_t n0 = v ? BIG0 : 9, n1 = v ? BIG1 : 4;
    label(c, type, v ? "big" : "");
    in_rand(c, "dy", RG_TYPE_F32, n0, n1, 1, 1, 1.0, false);
    in_rand(c, "a", RG_TYPE_F32, n0, n1, 1, 1, 4.0, false);
    set_ne(c->out_ne, n0, n1, 1, 1);
    return 1;
}
static int gen_swiglu(tcase *c, uint32_t type, int v) {
    if (v > 1) return 0;
    const int64_t n0 = v ? BIG0 : 9, n1 = v ? BIG1 : 4;
    label(c, type, v ? "big" : "");
    in_rand(c, "gate", RG_TYPE_F32, n0, n1, 1, 1, 4.0, v == 0);
    in_rand(c, "up", RG_TYPE_F32, n0, n1, 1, 1, 1.0, v == 0);
    set_ne(c->out_ne, n0, n1, 1, 1);
    return 1;
}
static int build_silu(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_silu(g, in[0]);
    return 1;
}
static int build_silu_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_silu_back(g, in[0], in[1]);
    return 1;
}
static int build_swiglu(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_swiglu(g, in[0], in[1]);
    return 1;
}
static void ref_silu(const tcase *c, double *const *x, double *y) {
    for (int64_t i = 0; i < nel4(c->out_ne); i++) y[i] = x[0][i] * sigmoid(x[0][i]);
}
static void ref_silu_back(const tcase *c, double *const *x, double *y) {
    for (int64_t i = 0; i < nel4(c->out_ne); i++) {
        double a = x[1][i], s = sigmoid(a);
        y[i] = x[0][i] * s * (1 + a * (1 - s));
    }
}
static void ref_swiglu(const tcase *c, double *const *x, double *y) {
    for (int64_t i = 0; i < nel4(c->out_ne); i++) y[i] = x[0][i] * sigmoid(x[0][i]) * x[1][i];
}

// GELU (tanh approximation), SOFTCAP (fp[0] cap) and their backward (architectures.md §1.6, §1.7): inputs over
// +-8 (GELU) and +-4.5 cap (SOFTCAP, so the tanh saturates in places).
#define GELU_C 0.79788456080286535588  // sqrt(2 / pi)
#define GELU_K 0.044715
static double gelu_ref(double a) { return 0.5 * a * (1 + tanh(GELU_C * (a + GELU_K * a * a * a))); }
static int gen_gelu(tcase *c, uint32_t type, int v) {
    if (v > 1) return 0;
    const int64_t n0 = v ? BIG0 : 9, n1 = v ? BIG1 : 4;
    label(c, type, v ? "big" : "");
    in_rand(c, "a", RG_TYPE_F32, n0, n1, 1, 1, 2.5, v == 0);
    set_ne(c->out_ne, n0, n1, 1, 1);
    return 1;
}
static int gen_softcap(tcase *c, uint32_t type, int v) {
    if (v > 1) return 0;
    const int64_t n0 = v ? BIG0 : 9, n1 = v ? BIG1 : 4;
    label(c, type, v ? "big cap=30" : "cap=2.5");
    c->fp[0] = v ? 30.0 : 2.5;
    in_rand(c, "a", RG_TYPE_F32, n0, n1, 1, 1, 1.5 * c->fp[0], v == 0);
    set_ne(c->out_ne, n0, n1, 1, 1);
    return 1;
}
// The backward rows: dy and a; which function by the entry (gen_..._back share the shapes of the forward).
static int gen_unary_back(tcase *c, uint32_t type, int v, double a_scale, double cap) {
    if (v > 1) return 0;
    const int64_t n0 = v ? BIG0 : 9, n1 = v ? BIG1 : 4;
    label(c, type, v ? "big" : "");
    c->fp[0] = cap;
    in_rand(c, "dy", RG_TYPE_F32, n0, n1, 1, 1, 1.0, false);
    in_rand(c, "a", RG_TYPE_F32, n0, n1, 1, 1, a_scale, false);
    set_ne(c->out_ne, n0, n1, 1, 1);
    return 1;
}
static int gen_gelu_back(tcase *c, uint32_t type, int v) { return gen_unary_back(c, type, v, 2.5, 0.0); }
static int gen_softcap_back(tcase *c, uint32_t type, int v) { return gen_unary_back(c, type, v, 4.0, 2.5); }
static int build_gelu(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_gelu(g, in[0]);
    return 1;
}
static int build_gelu_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_gelu_back(g, in[0], in[1]);
    return 1;
}
static int build_softcap(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_softcap(g, in[0], (float)c->fp[0]);
    return 1;
}
static int build_softcap_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_softcap_back(g, in[0], in[1], (float)c->fp[0]);
    return 1;
}
static void ref_gelu(const tcase *c, double *const *x, double *y) {
    for (int64_t i = 0; i < nel4(c->out_ne); i++) y[i] = gelu_ref(x[0][i]);
}
static void ref_gelu_back(const tcase *c, double *const *x, double *y) {
    for (int64_t i = 0; i < nel4(c->out_ne); i++) {  // d/da of gelu_ref, in closed form
        const double a = x[1][i], t = tanh(GELU_C * (a + GELU_K * a * a * a));
        y[i] = x[0][i] * (0.5 * (1 + t) + 0.5 * a * (1 - t * t) * GELU_C * (1 + 3 * GELU_K * a * a));
    }
}
static void ref_softcap(const tcase *c, double *const *x, double *y) {
    for (int64_t i = 0; i < nel4(c->out_ne); i++) y[i] = c->fp[0] * tanh(x[0][i] / c->fp[0]);
}
static void ref_softcap_back(const tcase *c, double *const *x, double *y) {
    for (int64_t i = 0; i < nel4(c->out_ne); i++) {
        const double t = tanh(x[1][i] / c->fp[0]);
        y[i] = x[0][i] * (1 - t * t);
    }
}

// RESHAPE (same elements in the same order), also of block types (rows kept).
static int gen_reshape(tcase *c, uint32_t type, int v) {
    const bool blocks = rg_type_get(type)->block_size > 1;
    if (v > (blocks ? 0 : 1)) return 0;
    if (blocks) {
        const int64_t L = row_len(type);
        label(c, type, "[L,6]->[L,2,3]");
        in_rand(c, "a", type, L, 6, 1, 1, 1.0, false);
        set_ne(c->out_ne, L, 2, 3, 1);
    } else if (v == 0) {
        label(c, type, "[6,4]->[4,3,2]");
        in_rand(c, "a", type, 6, 4, 1, 1, 1.0, true);
        set_ne(c->out_ne, 4, 3, 2, 1);
    } else {
        label(c, type, "[2,3,4]->[24]");
        in_rand(c, "a", type, 2, 3, 4, 1, 1.0, true);
        set_ne(c->out_ne, 24, 1, 1, 1);
    }
    return 1;
}
static int build_reshape(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_reshape(g, in[0], 4, c->out_ne);
    return 1;
}

// VIEW: a window of shape win, element strides ip[0..2], offset ip[4] (bytes
// = elements * element size), ip[5] dimensions. VIEW_BACK writes dy (shaped
// like the window) into that window of a base of zeros.
static void view_window(tcase *c, int v, int64_t win[4]) {
    if (v == 2) {  // big: [200, 200] inside [300, 240] at (5, 20)
        set_ne(win, 200, 200, 1, 1);
        c->ip[0] = 1, c->ip[1] = BIG0, c->ip[2] = 0, c->ip[4] = 5 + 20 * BIG0, c->ip[5] = 2;
    } else if (v == 0) {  // [3, 4] inside [8, 6], rows of 8, at (1, 2)
        set_ne(win, 3, 4, 1, 1);
        c->ip[0] = 1, c->ip[1] = 8, c->ip[2] = 0, c->ip[4] = 17, c->ip[5] = 2;
    } else {       // [2, 3, 2] every other element of [6, 4, 3], from element 1
        set_ne(win, 2, 3, 2, 1);
        c->ip[0] = 2, c->ip[1] = 6, c->ip[2] = 24, c->ip[4] = 1, c->ip[5] = 3;
    }
}
static int gen_view(tcase *c, uint32_t type, int v) {
    if (v > 1) return 0;
    label(c, type, v == 0 ? "2-D window" : "3-D strided");
    if (v == 0) in_rand(c, "a", type, 8, 6, 1, 1, 1.0, true);
    else in_rand(c, "a", type, 6, 4, 3, 1, 1.0, true);
    view_window(c, v, c->out_ne);
    return 1;
}
static rg_node *make_view(rg_graph *g, rg_node *a, const tcase *c, const int64_t win[4]) {
    const size_t esz = rg_type_get(a->t.type)->type_size;
    size_t nb[4];
    for (int k = 0; k < 3; k++) nb[k] = (size_t)c->ip[k] * esz;
    nb[3] = 0;
    return rg_view(g, a, (int)c->ip[5], win, nb, (size_t)c->ip[4] * esz);
}
static int build_view(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = make_view(g, in[0], c, c->out_ne);
    return 1;
}
static void ref_view(const tcase *c, double *const *x, double *y) {
    FOR4(c->out_ne, i0, i1, i2, i3) {
        (void)i3;
        y[at4(c->out_ne, i0, i1, i2, 0)] = x[0][c->ip[4] + i0 * c->ip[0] + i1 * c->ip[1] + i2 * c->ip[2]];
    }
}
static int gen_view_back(tcase *c, uint32_t type, int v) {
    if (v > 2) return 0;
    int64_t win[4];
    label(c, type, v == 0 ? "2-D window" : v == 1 ? "3-D strided" : "big");
    view_window(c, v, win);
    in_rand(c, "dy", type, win[0], win[1], win[2], 1, 1.0, false);
    if (v == 0) in_rand(c, "base", type, 8, 6, 1, 1, 1.0, false);
    if (v == 1) in_rand(c, "base", type, 6, 4, 3, 1, 1.0, false);
    if (v == 2) in_rand(c, "base", type, BIG0, BIG1, 1, 1, 1.0, false);
    memcpy(c->out_ne, c->in[1].ne, sizeof c->out_ne);
    return 1;
}
static int build_view_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_view_back(g, in[0], make_view(g, in[1], c, c->in[0].ne));
    return 1;
}
static void ref_view_back(const tcase *c, double *const *x, double *y) {
    memset(y, 0, sizeof(double) * (size_t)nel4(c->out_ne));
    const int64_t *ne = c->in[0].ne;
    FOR4(ne, i0, i1, i2, i3) {
        (void)i3;
        y[c->ip[4] + i0 * c->ip[0] + i1 * c->ip[1] + i2 * c->ip[2]] = x[0][at4(ne, i0, i1, i2, 0)];
    }
}

// PERMUTE: dimension i of a becomes dimension axes[i] (ip[0..3]); TRANSPOSE
// swaps 0 and 1; CONT copies such a view into packed bytes (block types: a
// permutation that keeps dimension 0).
static int gen_permute_case(tcase *c, uint32_t type, const char *what, int64_t n0, int64_t n1, int64_t n2,
                            int64_t n3, int a0, int a1, int a2, int a3) {
    label(c, type, what);
    in_rand(c, "a", type, n0, n1, n2, n3, 1.0, is_float_type(type));
    c->ip[0] = a0, c->ip[1] = a1, c->ip[2] = a2, c->ip[3] = a3;
    for (int k = 0; k < 4; k++) c->out_ne[c->ip[k]] = c->in[0].ne[k];
    return 1;
}
static int gen_permute(tcase *c, uint32_t type, int v) {
    if (v == 0) return gen_permute_case(c, type, "(1,2,0,3)", 2, 3, 4, 5, 1, 2, 0, 3);
    if (v == 1) return gen_permute_case(c, type, "(3,0,2,1)", 2, 3, 4, 5, 3, 0, 2, 1);
    return 0;
}
static int gen_transpose(tcase *c, uint32_t type, int v) {
    if (v == 0) return gen_permute_case(c, type, "[5,3]", 5, 3, 1, 1, 1, 0, 2, 3);
    if (v == 1) return gen_permute_case(c, type, "[4,3,2]", 4, 3, 2, 1, 1, 0, 2, 3);
    return 0;
}
static int gen_cont(tcase *c, uint32_t type, int v) {
    if (v > 1) return 0;
    const bool blocks = rg_type_get(type)->block_size > 1;
    if (v == 1) {  // big, forward only
        int r = blocks ? gen_permute_case(c, type, "big permuted", 256, 150, 2, 1, 0, 2, 1, 3)
                       : gen_permute_case(c, type, "big transposed", BIG0, BIG1, 1, 1, 1, 0, 2, 3);
        c->in[0].param = false;
        return r;
    }
    if (blocks) return gen_permute_case(c, type, "permuted (0,2,1,3)", row_len(type), 3, 2, 1, 0, 2, 1, 3);
    return gen_permute_case(c, type, "transposed", 5, 3, 2, 1, 1, 0, 2, 3);
}
static int build_permute(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_permute(g, in[0], (int)c->ip[0], (int)c->ip[1], (int)c->ip[2], (int)c->ip[3]);
    return 1;
}
static int build_transpose(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    (void)c;
    out[0] = rg_transpose(g, in[0]);
    return 1;
}
static int build_cont(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_cont(g, rg_permute(g, in[0], (int)c->ip[0], (int)c->ip[1], (int)c->ip[2], (int)c->ip[3]));
    return 1;
}
static void ref_permute(const tcase *c, double *const *x, double *y) {
    FOR4(c->in[0].ne, i0, i1, i2, i3) {
        int64_t i[4] = {i0, i1, i2, i3}, j[4];
        for (int k = 0; k < 4; k++) j[c->ip[k]] = i[k];
        y[at4(c->out_ne, j[0], j[1], j[2], j[3])] = x[0][at4(c->in[0].ne, i0, i1, i2, i3)];
    }
}

// CPY between F32, F16 and BF16 (round to nearest even), also of a transposed
// view. Its gradient is the identity (the cast is a straight-through in the
// backward), so the finite differences are of the identity.
static int gen_cpy(tcase *c, uint32_t type, int v) {
    static const uint32_t dst[3] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16};
    if (v > 8 || (v >= 7 && type != RG_TYPE_F32)) return 0;
    if (v >= 7) {  // forward only: overflow, subnormals, ties to even, signed zero
        static const double edge[21] = {65504.0, 65519.99, 65520.0, -70000.0, 0x1p-24, 0x1p-25, 3 * 0x1p-25,
                                        1 + 0x1p-11, 1 + 3 * 0x1p-11, -0.0, 1e-10, 6.1e-5, 1 + 0x1p-8,
                                        1 + 3 * 0x1p-8, 3.0e38, 3.4028234e38, -1 - 0x1p-8, 0x1p-130, -0x1p-133,
                                        1.0 / 3.0, -2.0 / 3.0};
        const int d = v - 6;  // f16, bf16
        label(c, type, d == 1 ? "-> f16 edge values" : "-> bf16 edge values");
        c->ip[0] = dst[d];
        tin *a = in_rand(c, "a", type, 7, 3, 1, 1, 1.0, false);
        for (int i = 0; i < 21; i++) set_f32(a, i, edge[i]);
        set_ne(c->out_ne, 7, 3, 1, 1);
        return 1;
    }
    if (v == 6) {  // big, forward only: transposed, to the next type
        label(c, type, type == RG_TYPE_F32 ? "-> f16 big transposed" : "-> f32 big transposed");
        c->ip[0] = type == RG_TYPE_F32 ? RG_TYPE_F16 : RG_TYPE_F32;
        c->ip[1] = 1;
        in_rand(c, "a", type, BIG1, BIG0, 1, 1, 1.0, false);
        set_ne(c->out_ne, BIG0, BIG1, 1, 1);
        return 1;
    }
    char what[32];
    snprintf(what, sizeof what, "-> %s%s", rg_type_get(dst[v % 3])->name, v >= 3 ? " transposed" : "");
    label(c, type, what);
    c->ip[0] = dst[v % 3];
    c->ip[1] = v >= 3;
    // F32 sources span binades 2^-24 .. 2^13, F16 subnormals included (no
    // overflow here, the loss must stay finite: the edge variants have it)
    tin *a = in_rand(c, "a", type, v >= 3 ? 3 : 7, v >= 3 ? 7 : 3, 1, 1, 1.0, true);
    if (type == RG_TYPE_F32)
        for (int64_t i = 0; i < 21; i++) set_f32(a, i, a->val[i] * ldexp(1.0, (int)(i % 7) * 6 - 24));
    set_ne(c->out_ne, 7, 3, 1, 1);
    return 1;
}
static int build_cpy(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_cpy(g, c->ip[1] ? rg_transpose(g, in[0]) : in[0], (uint32_t)c->ip[0]);
    return 1;
}
static void ref_cpy(const tcase *c, double *const *x, double *y) {
    FOR4(c->out_ne, i0, i1, i2, i3)
    y[at4(c->out_ne, i0, i1, i2, i3)] =
        c->ip[2] ? round_to(RG_TYPE_F32, round_to(RG_TYPE_F32, 0.25 + get_t(&c->in[0], x[0], c->ip[1] != 0, i0, i1, i2, i3)) +
                                               get_t(&c->in[0], x[0], c->ip[1] != 0, i0, i1, i2, i3))
                 : round_to((uint32_t)c->ip[0], get_t(&c->in[0], x[0], c->ip[1] != 0, i0, i1, i2, i3));
}
static void ref_cpy_identity(const tcase *c, double *const *x, double *y) {
    FOR4(c->out_ne, i0, i1, i2, i3)
    y[at4(c->out_ne, i0, i1, i2, i3)] = get_t(&c->in[0], x[0], c->ip[1] != 0, i0, i1, i2, i3);
}

// CPY_INTO: a written into a window of a zeroed [9, 5] leaf of type ip[0], read
// back through CONT; the window starts at row 1, element 1 (so its edges matter).
static int gen_cpy_into(tcase *c, uint32_t type, int v) {
    static const uint32_t dst[3] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16};
    if (v > 7) return 0;
    char what[40];
    if (v >= 6) {  // rg_acc_into: added twice into an f32 window holding 0.25 (f32 sources only)
        if (type != RG_TYPE_F32) return 0;
        snprintf(what, sizeof what, "+= f32 window%s (acc_into)", v == 7 ? " transposed" : "");
    } else {
        snprintf(what, sizeof what, "-> %s window%s", rg_type_get(dst[v % 3])->name, v >= 3 ? " transposed" : "");
    }
    label(c, type, what);
    c->ip[0] = v >= 6 ? RG_TYPE_F32 : dst[v % 3];
    c->ip[1] = v == 7 || (v >= 3 && v < 6);
    c->ip[2] = v >= 6;
    in_rand(c, "a", type, c->ip[1] ? 3 : 7, c->ip[1] ? 7 : 3, 1, 1, 1.0, false);
    set_ne(c->out_ne, 7, 3, 1, 1);
    return 1;
}
static int build_cpy_into(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    uint32_t dt = (uint32_t)c->ip[0];
    size_t esz = rg_type_get(dt)->type_size;
    rg_node *buf = rg_leaf(g, "cache", dt, 2, (int64_t[]){9, 5}, NULL);
    rg_node *win = rg_view(g, buf, 2, (int64_t[]){7, 3}, (size_t[]){esz, 9 * esz}, (9 + 1) * esz);
    rg_node *a = c->ip[1] ? rg_transpose(g, in[0]) : in[0];
    rg_node *w;
    if (c->ip[2]) {
        // The window is set to 0.25, then a is added into it twice: 0.25 + a + a, each add reading the last
        // one's result. The cache is the caller's bytes here (a gradient accumulator is), so the plan never
        // places another tensor in it between the writes.
        static float cache[45];
        rg_node_bind(buf, cache);
        buf->flags |= RG_NODE_EXTERNAL;
        rg_node *put = rg_cpy_into(g, rg_fill(g, RG_TYPE_F32, 2, (int64_t[]){7, 3}, 0.25f), win);
        rg_node *once = rg_acc_into(g, a, win);
        if (put) put->flags |= RG_NODE_OUTPUT;  // writes no node reads: kept by their flag
        if (once) once->flags |= RG_NODE_OUTPUT;
        w = rg_acc_into(g, a, win);
    } else {
        w = rg_cpy_into(g, a, win);
    }
    out[0] = rg_cpy(g, rg_cont(g, w), RG_TYPE_F32);
    return 1;
}
static void ref_cpy_into(const tcase *c, double *const *x, double *y) {
    FOR4(c->out_ne, i0, i1, i2, i3) {
        const double a = get_t(&c->in[0], x[0], c->ip[1] != 0, i0, i1, i2, i3);
        // acc_into: (0.25 + a) + a, each add one f32 rounding
        y[at4(c->out_ne, i0, i1, i2, i3)] = c->ip[2] ? round_to(RG_TYPE_F32, round_to(RG_TYPE_F32, 0.25 + a) + a)
                                                     : round_to((uint32_t)c->ip[0], a);
    }
}

// CROSS_ENTROPY_LOSS (training.md §5.8): mean over labels != ignore_index (ip[0]).
static int gen_ce(tcase *c, uint32_t type, int v) {
    static const int32_t lab[4][6] = {{3, -100, 0, 10, -100, 5}, {1, 9, 4, 4, 0, 7},
                                      {-100, -100, -100, -100, -100, -100}, {-1, 2, -1, 6, 8, 0}};
    static const char *const names[4] = {"ignored labels", "logits+200 x5", "all ignored", "ignore_index=-1"};
    if (v > 3) return 0;
    label(c, type, names[v]);
    c->ip[0] = v == 3 ? -1 : -100;
    tin *z = in_rand(c, "logits", RG_TYPE_F32, 11, 6, 1, 1, v == 1 ? 5.0 : 1.5, true);
    if (v == 1)
        for (int64_t i = 0; i < 66; i++) set_f32(z, i, z->val[i] + 200.0);
    in_i32(c, "labels", 6, lab[v]);
    set_ne(c->out_ne, 1, 1, 1, 1);
    return 1;
}
static int build_ce(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_cross_entropy_loss(g, in[0], in[1], (int32_t)c->ip[0]);
    return 1;
}
// The per-token softmax and lse of logits column t.
static double ce_lse(const double *z, int64_t V) {
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int64_t v = 0; v < V; v++) s += exp(z[v] - mx);
    return mx + log(s);
}
static void ref_ce(const tcase *c, double *const *x, double *y) {
    const int64_t V = c->in[0].ne[0], T = c->in[0].ne[1];
    const int32_t *lab = c->in[1].ival;
    double s = 0;
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++) {
        if (lab[t] == c->ip[0]) continue;
        s += ce_lse(x[0] + t * V, V) - x[0][t * V + lab[t]];
        n++;
    }
    y[0] = n ? s / (double)n : 0.0;
}
static int gen_ce_back(tcase *c, uint32_t type, int v) {
    static const int32_t lab[6] = {3, -100, 0, 10, -100, 5};
    if (v > 0) return 0;
    label(c, type, "ignored labels");
    c->ip[0] = -100;
    tin *dl = in_rand(c, "dL", RG_TYPE_F32, 1, 1, 1, 1, 1.0, false);
    set_f32(dl, 0, 0.7);
    in_rand(c, "logits", RG_TYPE_F32, 11, 6, 1, 1, 1.5, false);
    in_i32(c, "labels", 6, lab);
    set_ne(c->out_ne, 11, 6, 1, 1);
    return 1;
}
static int build_ce_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_cross_entropy_loss_back(g, in[0], in[1], in[2], (int32_t)c->ip[0]);
    return 1;
}
static void ref_ce_back(const tcase *c, double *const *x, double *y) {
    const int64_t V = c->in[1].ne[0], T = c->in[1].ne[1];
    const int32_t *lab = c->in[2].ival;
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++) n += lab[t] != c->ip[0];
    for (int64_t t = 0; t < T; t++) {
        const double *z = x[1] + t * V;
        double lse = ce_lse(z, V);
        for (int64_t v = 0; v < V; v++)
            y[t * V + v] = lab[t] == c->ip[0] ? 0.0 : (exp(z[v] - lse) - (v == lab[t])) * x[0][0] / (double)n;
    }
}

// LINEAR_CE (training.md §7): the cross-entropy of Z = w^T h, w [d, V] of a
// float or quantized type, h [d, T] F32, by vocabulary chunks of ip[1] (0 =
// auto: the whole of this V). Outputs [T + 1]: the loss (fp[0] > 0: that
// scale, else the mean over valid tokens), then lse_t (0 for ignored t). V = 37
// and T = 13 are multiples of nothing; chunk 16 leaves a last chunk of 5,
// chunk 7 one of 2. "large logits": h x4, so the maxima move between chunks
// and the online merge rescales. Forward bound: the logits are f32 dot
// products of d <= 64 terms (d u = 4e-6 of sum|w h|, which is below 3 here),
// the lse a few ulp of them: 2e-6 of max|out| (seen: 8e-8). The backward rule (dh, dw
// through LINEAR_CE_BACK) is checked against finite differences of this
// reference, including the lse outputs' own gradient.
static const uint32_t T_ATTN[] = {RG_TYPE_F32, RG_TYPE_F16, TEND};
static const uint32_t T_LCE[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16, RG_TYPE_Q8_0, RG_TYPE_Q4_0, TEND};
static const int32_t lce_labels[3][13] = {{3, -100, 0, 36, 17, -100, 5, 31, 32, 16, -100, 2, 20},
                                         {36, 35, 0, 1, 15, 16, 17, 7, 8, 14, 21, 28, 29},
                                         {-100, -100, -100, -100, -100, -100, -100, -100, -100, -100, -100, -100, -100}};
static int64_t lce_d(uint32_t type) { return is_float_type(type) ? 24 : row_len(type); }

static int gen_linear_ce(tcase *c, uint32_t type, int v) {
    static const char *const names[3] = {"ignored, chunk 16", "large logits, chunk 7, scale 0.25", "all ignored"};
    if (v > 2) return 0;
    label(c, type, names[v]);
    const int64_t d = lce_d(type), V = 37, T = 13;
    c->ip[0] = -100;
    c->ip[1] = v == 0 ? 16 : v == 1 ? 7 : 0;
    c->fp[0] = v == 1 ? 0.25 : 0.0;
    in_rand(c, "w", type, d, V, 1, 1, 0.5, is_float_type(type));
    in_rand(c, "h", RG_TYPE_F32, d, T, 1, 1, v == 1 ? 4.0 / sqrt((double)d) : 1.0 / sqrt((double)d), true);
    in_i32(c, "labels", T, lce_labels[v]);
    set_ne(c->out_ne, T + 1, 1, 1, 1);
    return 1;
}
static int build_linear_ce(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_linear_ce(g, in[0], in[1], in[2], (int32_t)c->ip[0], c->ip[1]);
    if (out[0]) out[0]->fp[0] = (float)c->fp[0];
    return 1;
}
// lse_t of column t of Z = w^T h (double), and the logits themselves into z [V].
static double lce_column(int64_t d, int64_t V, const double *w, const double *h, int64_t t, double *z) {
    for (int64_t v = 0; v < V; v++) {
        double s = 0;
        for (int64_t k = 0; k < d; k++) s += w[v * d + k] * h[t * d + k];
        z[v] = s;
    }
    return ce_lse(z, V);
}
// The scale of the loss: fp[0], or 1 / (valid tokens).
static double lce_scale(const tcase *c, const int32_t *lab, int64_t T) {
    if (c->fp[0] > 0) return (double)(float)c->fp[0];
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++) n += lab[t] != c->ip[0];
    return n ? 1.0 / (double)n : 0.0;
}
static void ref_linear_ce(const tcase *c, double *const *x, double *y) {
    const int64_t V = c->in[0].ne[1], T = c->in[1].ne[1];
    const int32_t *lab = c->in[2].ival;
    double *z = malloc(sizeof(double) * (size_t)V), s = 0;
    for (int64_t t = 0; t < T; t++) {
        y[1 + t] = 0;
        if (lab[t] == c->ip[0]) continue;
        y[1 + t] = lce_column(c->in[1].ne[0], V, x[0], x[1], t, z);
        s += y[1 + t] - z[lab[t]];
    }
    y[0] = s * lce_scale(c, lab, T);
    free(z);
}

// LINEAR_CE_BACK: (dy [T + 1], w, h, labels) -> dh [d, T] and (ip[2]) dw [d, V]
// from one kernel (outputs dh, then dw); dy random, so the lse outputs' gradient is part of every
// case. dh and dw are sums of V (resp. T) products of the f32 gradient with
// w (resp. h); bound 2e-6 of max|out| (seen: 4e-7).
static int gen_linear_ce_back(tcase *c, uint32_t type, int v) {
    static const char *const names[3] = {"ignored, chunk 16", "dh only, chunk 7, scale 0.25", "auto chunk"};
    if (v > 2) return 0;
    label(c, type, names[v]);
    if (v != 1) strncat(c->label, is_float_type(type) ? ", dh+dw" : ", dh", sizeof c->label - strlen(c->label) - 1);
    const int64_t d = lce_d(type), V = 37, T = 13;
    c->ip[0] = -100;
    c->ip[1] = v == 0 ? 16 : v == 1 ? 7 : 0;
    c->ip[2] = v != 1 && is_float_type(type);
    c->fp[0] = v == 1 ? 0.25 : 0.0;
    tin *dy = in_rand(c, "dy", RG_TYPE_F32, T + 1, 1, 1, 1, 0.3, false);
    set_f32(dy, 0, 0.7);
    in_rand(c, "w", type, d, V, 1, 1, 0.5, false);
    in_rand(c, "h", RG_TYPE_F32, d, T, 1, 1, v == 1 ? 4.0 / sqrt((double)d) : 1.0 / sqrt((double)d), false);
    in_i32(c, "labels", T, lce_labels[v == 1 ? 1 : 0]);
    set_ne(c->out_ne, d, T, 1, 1);
    c->n_out = d * (T + (c->ip[2] ? V : 0));
    return 1;
}
static int build_linear_ce_back(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    rg_node *f = rg_linear_ce(g, in[1], in[2], in[3], (int32_t)c->ip[0], c->ip[1]);
    if (f) f->fp[0] = (float)c->fp[0];
    out[0] = rg_linear_ce_back(g, in[0], f, c->ip[2] != 0);
    if (!c->ip[2]) return 1;
    out[1] = rg_linear_ce_back_dw(g, out[0]);
    return 2;
}
static void ref_linear_ce_back(const tcase *c, double *const *x, double *y) {
    const int64_t d = c->in[2].ne[0], V = c->in[1].ne[1], T = c->in[2].ne[1];
    const int32_t *lab = c->in[3].ival;
    const double *dy = x[0], *w = x[1], *h = x[2];
    const double scale = lce_scale(c, lab, T);
    double *z = malloc(sizeof(double) * (size_t)V);
    double *dh = y, *dw = c->ip[2] ? y + d * T : NULL;
    memset(y, 0, sizeof(double) * (size_t)c->n_out);
    for (int64_t t = 0; t < T; t++) {
        if (lab[t] == c->ip[0]) continue;
        double lse = lce_column(d, V, w, h, t, z);
        for (int64_t v = 0; v < V; v++) {
            double p = exp(z[v] - lse);
            double gz = dy[0] * scale * (p - (v == lab[t])) + dy[1 + t] * p;
            for (int64_t k = 0; k < d; k++) {
                dh[t * d + k] += gz * w[v * d + k];
                if (dw) dw[v * d + k] += gz * h[t * d + k];
            }
        }
    }
    free(z);
}

// ADAMW and SGD: one step, against the double formula of training.md §1.2 /
// §1.3 with the host's f32 scalars. Parameters are kept away from 0 and m has
// the sign of g, so no output is a cancellation and a per-element rtol of
// 2e-6 is meaningful for theta, m and v alike.
static tin *in_f32_scalar(tcase *c, const char *name, double v);
static int gen_optim(tcase *c, uint32_t type, int v, bool adamw) {
    // the last variant: the first one with its clip read from an F32 [1] source (a CLIP_COEF's output)
    const int last = adamw ? 2 : 4;
    if (v > last) return 0;
    const bool clip_src = v == last;
    if (clip_src) v = 0;
    const int64_t n = 37;  // 32 for the vector loop, 5 for the tail
    tin *th = in_rand(c, "theta", RG_TYPE_F32, n, 1, 1, 1, 1.0, false);
    tin *g = in_rand(c, "grad", RG_TYPE_F32, n, 1, 1, 1, 1.0, false);
    for (int64_t i = 0; i < n; i++) set_f32(th, i, copysign(1.0 + fabs(th->val[i]), th->val[i]));
    set_ne(c->out_ne, n, 1, 1, 1);
    if (adamw) {
        tin *m = in_rand(c, "m", RG_TYPE_F32, n, 1, 1, 1, 0.01, false);
        tin *vv = in_rand(c, "v", RG_TYPE_F32, n, 1, 1, 1, 1e-3, false);
        for (int64_t i = 0; i < n; i++) {
            set_f32(m, i, v == 1 ? 0.0 : copysign(m->val[i], g->val[i]));
            set_f32(vv, i, v == 1 ? 0.0 : vv->val[i] * vv->val[i]);
        }
        // host scalars in double, cast once (§1.2): t = 3 with decay and clipping; t = 1 plain
        const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = v == 0 ? 0.1 : 0.0, clip = v == 0 ? 0.8 : 1.0;
        const int t = v == 0 ? 3 : 1;
        const double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        const double s[8] = {lr / bc1, 1 - b1, b2, 1 - b2, eps, 1 - lr * wd, sqrt(bc2), clip};
        for (int k = 0; k < 8; k++) c->fp[k] = (double)(float)s[k];
        label(c, type, clip_src ? "t=3 decay, clip from a source" : v == 0 ? "t=3 decay clip" : "t=1");
        c->n_out = 3 * n;
    } else {
        // v 2, 3: with a momentum buffer (mu 0.9), its first step (b = g) and a later one; the
        // buffer has the sign of the step's g, so b = mu b + g is no cancellation either.
        const int e = v % 2;
        const double s[5] = {e == 0 ? 0.1 : 0.05, e == 0 ? 0.01 : 0.0, e == 0 ? 0.5 : 1.0, v >= 2 ? 0.9 : 0.0,
                             v == 2 ? 1.0 : 0.0};
        for (int k = 0; k < 5; k++) c->fp[k] = (double)(float)s[k];
        if (v >= 2) {
            tin *b = in_rand(c, "buf", RG_TYPE_F32, n, 1, 1, 1, 0.1, false);
            for (int64_t i = 0; i < n; i++) {
                const double gi = g->val[i] * c->fp[2] + c->fp[1] * th->val[i];
                set_f32(b, i, copysign(fabs(b->val[i]), gi));
            }
            c->n_out = 2 * n;
        }
        static const char *const names[4] = {"decay clip", "plain", "momentum first step, decay clip",
                                             "momentum step 3, plain"};
        label(c, type, clip_src ? "decay, clip from a source" : names[v]);
    }
    if (clip_src) in_f32_scalar(c, "clip", c->fp[adamw ? 7 : 2]), c->ip[7] = 1;  // the node's own fp says 1
    return 1;
}
// An F32 [1] input of value v.
static tin *in_f32_scalar(tcase *c, const char *name, double v) {
    tin *t = new_in(c, name, RG_TYPE_F32, 1, 1, 1, 1, false);
    set_f32(t, 0, v);
    return t;
}
static int gen_adamw(tcase *c, uint32_t type, int v) { return gen_optim(c, type, v, true); }
static int gen_sgd(tcase *c, uint32_t type, int v) { return gen_optim(c, type, v, false); }
static int build_adamw(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    const rg_adamw_step s = {(float)c->fp[0], (float)c->fp[1], (float)c->fp[2], (float)c->fp[3],
                             (float)c->fp[4], (float)c->fp[5], (float)c->fp[6], c->ip[7] ? 1.0f : (float)c->fp[7]};
    out[0] = rg_adamw(g, in[0], in[1], in[2], in[3], &s);
    if (c->ip[7]) out[0] = rg_optim_set_clip(g, out[0], in[4]);
    out[1] = in[2], out[2] = in[3];
    return 3;
}
static int build_sgd(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_sgd(g, in[0], in[1], (float)c->fp[0], (float)c->fp[1], c->ip[7] ? 1.0f : (float)c->fp[2]);
    if (c->ip[7]) {
        out[0] = rg_optim_set_clip(g, out[0], in[2]);
        return 1;
    }
    if (c->n_in < 3) return 1;
    out[0] = rg_sgd_momentum(g, out[0], in[2], (float)c->fp[3]);
    if (out[0]) out[0]->fp[4] = (float)c->fp[4];
    out[1] = in[2];
    return 2;
}
static void ref_adamw(const tcase *c, double *const *x, double *y) {
    const int64_t n = c->out_ne[0];
    const double *f = c->fp;
    for (int64_t i = 0; i < n; i++) {
        double g = x[1][i] * f[7];
        double m = x[2][i] + f[1] * (g - x[2][i]);
        double v = f[2] * x[3][i] + f[3] * g * g;
        double den = sqrt(v) / f[6] + f[4];
        y[i] = x[0][i] * f[5] - f[0] * m / den;
        y[n + i] = m;
        y[2 * n + i] = v;
    }
}
static void ref_sgd(const tcase *c, double *const *x, double *y) {
    const int64_t n = c->out_ne[0];
    for (int64_t i = 0; i < n; i++) {
        double g = x[1][i] * c->fp[2] + c->fp[1] * x[0][i];
        if (c->n_in >= 3 && !c->ip[7]) g = c->fp[4] == 1.0 ? g : c->fp[3] * x[2][i] + g, y[n + i] = g;  // the buffer
        y[i] = x[0][i] - c->fp[0] * g;
    }
}

// SUMSQ: prev + sum a^2 against the double sum, over lengths that exercise the tail of the
// 16 lanes (37), a partial second block (5000, with a prev) and several blocks split between
// threads (3 * 4096 + 17, with a prev). The double sums of n positive terms: n 2^-53 relative.
static int gen_sumsq(tcase *c, uint32_t type, int v) {
    static const int64_t lens[3] = {37, 5000, 3 * 4096 + 17};
    if (v > 2) return 0;
    in_rand(c, "a", RG_TYPE_F32, lens[v], 1, 1, 1, v == 2 ? 3.0 : 1.0, false);
    if (v > 0) {
        tin *prev = new_in(c, "prev", RG_TYPE_F64, 1, 1, 1, 1, false);
        prev->val[0] = 2.5 * v;
        memcpy(prev->bytes, &prev->val[0], 8);
    }
    set_ne(c->out_ne, 1, 1, 1, 1);
    label(c, type, v == 0 ? "37, no prev" : v == 1 ? "5000 + prev" : "12305 + prev");
    return 1;
}
static int build_sumsq(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_sumsq(g, in[0], c->n_in > 1 ? in[1] : NULL);
    return 1;
}
static void ref_sumsq(const tcase *c, double *const *x, double *y) {
    double s = c->n_in > 1 ? x[1][0] : 0.0;
    for (int64_t i = 0; i < nel4(c->in[0].ne); i++) s += x[0][i] * x[0][i];
    y[0] = s;
}

// CLIP_COEF: min(1, max_norm / (sqrt(total) + 1e-6)) against the double formula: a clipped
// norm (total 9, max 1), an unclipped one (total 0.25), no clipping (max_norm 0), and a
// max_norm that f32 does not hold (0.3: ip[0] keeps its double bits).
static int gen_clip_coef(tcase *c, uint32_t type, int v) {
    static const double totals[4] = {9.0, 0.25, 9.0, 17.0}, maxes[4] = {1.0, 1.0, 0.0, 0.3};
    if (v > 3) return 0;
    tin *t = new_in(c, "total", RG_TYPE_F64, 1, 1, 1, 1, false);
    t->val[0] = totals[v];
    memcpy(t->bytes, &t->val[0], 8);
    c->fp[0] = maxes[v];
    set_ne(c->out_ne, 1, 1, 1, 1);
    static const char *const names[4] = {"clipped", "under the max", "max_norm 0", "max_norm 0.3"};
    label(c, type, names[v]);
    return 1;
}
static int build_clip_coef(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    out[0] = rg_clip_coef_node(g, in[0], c->fp[0]);
    return 1;
}
static void ref_clip_coef(const tcase *c, double *const *x, double *y) {
    const double coef = c->fp[0] / (sqrt(x[0][0]) + 1e-6);
    y[0] = c->fp[0] > 0 && coef < 1 ? coef : 1.0;
}

// ATTN_DECODE: q [Dh, H, T] against the first n_kv rows of a KV cache of C
// rows in the type under test (F32 or F16): keys [Dh, C, Hkv] and transposed
// values [C, Dh, Hkv], read through views with the cache's strides as
// forward.c makes them (the rows past n_kv are random and must not be read).
// Variants: GQA 3 heads per kv head over 150 keys (two chunks of the split,
// the second 22 long: not a multiple of 8); 3 tokens, causal, no GQA; Dh 20
// (not a multiple of 8) with 10 heads per kv head (passes of 3, 3, 3, 1);
// 2 tokens, 130 keys; 1100 keys over 9 chunks for 8 heads (the merge of the
// chunks then runs as its own parallel section); gemma's scores: a logit cap of 0.8
// (fp[1]; it bends the scores of these inputs), a sliding window of 100 keys (ip[2]) that
// starts inside the second chunk for 3 tokens over 300, a window of 7 with a cap for 2
// tokens over 260 (the first two chunks hold nothing the queries see).
static int gen_attn_decode(tcase *c, uint32_t type, int v) {
    static const int64_t shapes[8][8] = {  // Dh, H, Hkv, T, n_kv, C, window, softcap x 10
        {64, 6, 2, 1, 150, 160, 0, 0}, {16, 4, 4, 3, 77, 80, 0, 0},   {20, 20, 2, 1, 5, 9, 0, 0},
        {32, 4, 2, 2, 130, 131, 0, 0}, {16, 8, 2, 1, 1100, 1104, 0, 0}, {16, 4, 2, 3, 150, 152, 0, 8},
        {16, 4, 2, 3, 300, 300, 100, 0}, {32, 4, 1, 2, 260, 264, 7, 8}};
    static const char *const names[8] = {"gqa 3 n_kv=150", "T=3 causal n_kv=77", "Dh=20 gqa 10 n_kv=5",
                                         "T=2 gqa 2 n_kv=130", "gqa 4 n_kv=1100", "softcap 0.8 T=3 n_kv=150",
                                         "window 100 T=3 n_kv=300", "window 7 softcap 0.8 T=2 n_kv=260"};
    if (v > 7) return 0;
    const int64_t *sh = shapes[v], Dh = sh[0], H = sh[1], Hkv = sh[2], T = sh[3], C = sh[5];
    label(c, type, names[v]);
    c->ip[0] = sh[4], c->ip[1] = C, c->ip[2] = sh[6];
    c->fp[0] = (double)(1.0f / sqrtf((float)Dh));
    c->fp[1] = (double)((float)sh[7] / 10.0f);
    in_rand(c, "q", RG_TYPE_F32, Dh, H, T, 1, 1.5, false);
    in_rand(c, "cache_k", type, Dh, C, Hkv, 1, 1.5, false);
    in_rand(c, "cache_v", type, C, Dh, Hkv, 1, 1.0, false);
    set_ne(c->out_ne, Dh, H, T, 1);
    return 1;
}
static int build_attn_decode(rg_graph *g, rg_node *const *in, const tcase *c, rg_node **out) {
    const int64_t Dh = c->in[0].ne[0], Hkv = c->in[1].ne[2], n_kv = c->ip[0], C = c->ip[1];
    const size_t es = rg_type_get(c->in[1].type)->type_size;
    rg_node *k = rg_view(g, in[1], 3, (int64_t[]){Dh, n_kv, Hkv}, (size_t[]){es, Dh * es, Dh * C * es}, 0);
    rg_node *vt = rg_view(g, in[2], 3, (int64_t[]){n_kv, Dh, Hkv}, (size_t[]){es, C * es, Dh * C * es}, 0);
    out[0] = rg_attn_decode(g, in[0], k, vt, (float)c->fp[0], (float)c->fp[1], c->ip[2]);
    return 1;
}
static void ref_attn_decode(const tcase *c, double *const *x, double *y) {
    const int64_t *qn = c->in[0].ne, *kn = c->in[1].ne, *vn = c->in[2].ne;
    const int64_t Dh = qn[0], H = qn[1], T = qn[2], Hkv = kn[2], n_kv = c->ip[0];
    double *p = malloc(sizeof(double) * (size_t)n_kv);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t kvh = h / (H / Hkv), vis = n_kv - T + 1 + t;
            const int64_t lo = c->ip[2] > 0 && vis > c->ip[2] ? vis - c->ip[2] : 0;  // the window's first key
            double mx = -INFINITY, sum = 0;
            for (int64_t j = lo; j < vis; j++) {
                double s = 0;
                for (int64_t d = 0; d < Dh; d++) s += x[0][at4(qn, d, h, t, 0)] * x[1][at4(kn, d, j, kvh, 0)];
                p[j] = c->fp[0] * s;
                if (c->fp[1] > 0) p[j] = c->fp[1] * tanh(p[j] / c->fp[1]);
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int64_t j = lo; j < vis; j++) sum += p[j] = exp(p[j] - mx);
            for (int64_t d = 0; d < Dh; d++) {
                double o = 0;
                for (int64_t j = lo; j < vis; j++) o += p[j] * x[2][at4(vn, j, d, kvh, 0)];
                y[at4(c->out_ne, d, h, t, 0)] = o / sum;
            }
        }
    free(p);
}

#include "ops_ssm_rows.h"
#include "ops_flash_rows.h"

// ---------------------------------------------------------------------------
// The table: one row per op (u = 2^-24, the f32 unit roundoff).
//   types, case generator, builder, reference, FD reference, error measure, bound

static const op_entry entries[RG_OP_COUNT] = {
    // copies, gathers, casts and fills move or round values: exact
    [RG_OP_NONE] = {T_FLOAT, gen_leaf, build_leaf, ref_copy, NULL, M_ELEM, 0},
    [RG_OP_FILL] = {T_FLOAT, gen_fill, build_fill, ref_fill, NULL, M_ELEM, 0},
    [RG_OP_REPEAT] = {T_F32, gen_repeat, build_repeat, ref_repeat, NULL, M_ELEM, 0},
    [RG_OP_RESHAPE] = {T_RESHAPE, gen_reshape, build_reshape, ref_copy, NULL, M_ELEM, 0},
    [RG_OP_VIEW] = {T_FLOAT, gen_view, build_view, ref_view, NULL, M_ELEM, 0},
    [RG_OP_PERMUTE] = {T_FLOAT, gen_permute, build_permute, ref_permute, NULL, M_ELEM, 0},
    [RG_OP_TRANSPOSE] = {T_FLOAT, gen_transpose, build_transpose, ref_permute, NULL, M_ELEM, 0},
    [RG_OP_VIEW_BACK] = {T_F32, gen_view_back, build_view_back, ref_view_back, NULL, M_ELEM, 0},
    [RG_OP_CONT] = {T_WEIGHTS, gen_cont, build_cont, ref_permute, NULL, M_ELEM, 0},
    [RG_OP_CPY] = {T_FLOAT, gen_cpy, build_cpy, ref_cpy, ref_cpy_identity, M_ELEM, 0},
    // a gather through the type's dequantizer (the reference used dequant_ref)
    [RG_OP_GET_ROWS] = {T_WEIGHTS, gen_get_rows, build_get_rows, ref_get_rows, NULL, M_NORM, 1e-6},
    // one rounding of the exact result: <= u relative; 4u
    [RG_OP_ADD] = {T_F32, gen_binary, build_add, ref_add, NULL, M_NORM, 2.4e-7},
    [RG_OP_SUB] = {T_F32, gen_binary, build_sub, ref_sub, NULL, M_NORM, 2.4e-7},
    [RG_OP_MUL] = {T_F32, gen_binary, build_mul, ref_mul, NULL, M_NORM, 2.4e-7},
    [RG_OP_SCALE] = {T_F32, gen_scale, build_scale, ref_scale, NULL, M_NORM, 2.4e-7},
    // float sums of n terms: <= (n-1) u sum|term|; n <= 3 (scatter), <= 240 (tiles), <= 72000 (sums, in chunks)
    [RG_OP_GET_ROWS_BACK] = {T_F32, gen_get_rows_back, build_get_rows_back, ref_get_rows_back, NULL, M_ABS, 2.4e-7},
    [RG_OP_REPEAT_BACK] = {T_F32, gen_repeat_back, build_repeat_back, ref_repeat_back, NULL, M_ABS, 1e-6},
    [RG_OP_SUM] = {T_F32, gen_sum, build_sum, ref_sum, NULL, M_ABS, 1e-5},
    [RG_OP_MEAN] = {T_F32, gen_sum, build_mean, ref_mean, NULL, M_ABS, 1e-5},
    [RG_OP_SUM_ROWS] = {T_F32, gen_sum_rows, build_sum_rows, ref_sum_rows, NULL, M_ABS, 1e-5},
    // dot products of K <= 256: K u = 1.5e-5 (8-bit activations: 1e-2, set per case)
    [RG_OP_MUL_MAT] = {T_WEIGHTS, gen_mul_mat, build_mul_mat, ref_mul_mat, NULL, M_ABS, 2e-5},
    [RG_OP_OUT_PROD] = {T_WEIGHTS, gen_out_prod, build_out_prod, ref_out_prod, NULL, M_ABS, 1e-5},
    // a few f32 operations and libm/polynomial exp, tanh, cos, sin of <= 2 ulp each
    [RG_OP_RMS_NORM] = {T_F32, gen_rms_norm, build_rms_norm, ref_rms_norm, NULL, M_NORM, 1e-6},
    [RG_OP_RMS_NORM_BACK] = {T_F32, gen_rms_norm_back, build_rms_norm_back, ref_rms_norm_back, NULL, M_NORM, 2e-6},
    [RG_OP_ROPE] = {T_F32, gen_rope, build_rope, ref_rope, NULL, M_NORM, 1e-6},
    [RG_OP_ROPE_BACK] = {T_F32, gen_rope_back, build_rope_back, ref_rope_back, NULL, M_NORM, 1e-6},
    [RG_OP_SOFT_MAX] = {T_F32, gen_soft_max, build_soft_max, ref_soft_max, NULL, M_NORM, 2e-6},
    [RG_OP_SOFT_MAX_BACK] = {T_F32, gen_soft_max_back, build_soft_max_back, ref_soft_max_back, NULL, M_NORM, 2e-6},
    [RG_OP_SILU] = {T_F32, gen_silu, build_silu, ref_silu, NULL, M_NORM, 1e-6},
    [RG_OP_SILU_BACK] = {T_F32, gen_silu_back, build_silu_back, ref_silu_back, NULL, M_NORM, 2e-6},
    [RG_OP_SWIGLU] = {T_F32, gen_swiglu, build_swiglu, ref_swiglu, NULL, M_NORM, 1e-6},
    // one rounding of a double value (ops_gelu_softcap.c): u; 2u
    [RG_OP_GELU] = {T_F32, gen_gelu, build_gelu, ref_gelu, NULL, M_NORM, 1.2e-7},
    [RG_OP_GELU_BACK] = {T_F32, gen_gelu_back, build_gelu_back, ref_gelu_back, NULL, M_NORM, 1.2e-7},
    [RG_OP_SOFTCAP] = {T_F32, gen_softcap, build_softcap, ref_softcap, NULL, M_NORM, 1.2e-7},
    [RG_OP_SOFTCAP_BACK] = {T_F32, gen_softcap_back, build_softcap_back, ref_softcap_back, NULL, M_NORM, 1.2e-7},
    [RG_OP_CROSS_ENTROPY_LOSS] = {T_F32, gen_ce, build_ce, ref_ce, NULL, M_NORM, 1e-6},
    [RG_OP_CROSS_ENTROPY_LOSS_BACK] = {T_F32, gen_ce_back, build_ce_back, ref_ce_back, NULL, M_NORM, 1e-6},
    // one optimizer step: training.md's cross-implementation rtol
    [RG_OP_ADAMW] = {T_F32, gen_adamw, build_adamw, ref_adamw, NULL, M_ELEM, 2e-6},
    [RG_OP_SGD] = {T_F32, gen_sgd, build_sgd, ref_sgd, NULL, M_ELEM, 2e-6},
    [RG_OP_CPY_INTO] = {T_FLOAT, gen_cpy_into, build_cpy_into, ref_cpy_into, NULL, M_ELEM, 0},
    // chunked cross-entropy of w^T h: f32 dot products of d <= 64 terms, then the CE's few roundings
    [RG_OP_LINEAR_CE] = {T_LCE, gen_linear_ce, build_linear_ce, ref_linear_ce, NULL, M_NORM, 2e-6},
    [RG_OP_LINEAR_CE_BACK] = {T_LCE, gen_linear_ce_back, build_linear_ce_back, ref_linear_ce_back, NULL, M_NORM, 2e-6},
    // attention over a KV cache: f32 dot products of Dh <= 64 and n_kv <= 150 terms (the weights sum to 1), the 2-ulp exp
    [RG_OP_ATTN_DECODE] = {T_ATTN, gen_attn_decode, build_attn_decode, ref_attn_decode, NULL, M_NORM, 1e-5},
    // the state-space family (ops_ssm_rows.h): the conv's f32 sums of K <= 8 products (dc in double): (K-1) u;
    // step, decay, slope: one rounding of a double value; the scan: f32 recurrences over T <= 70 tokens
    [RG_OP_SSM_CONV] = {T_F32, gen_ssm_conv, build_ssm_conv, ref_ssm_conv, NULL, M_ABS, 1e-6, true},
    [RG_OP_SSM_CONV_BACK] = {T_F32, gen_ssm_conv_back, build_ssm_conv_back, ref_ssm_conv_back, NULL, M_ABS, 1e-6, true},
    // SSM_DT: CUDA's own f32 code, cuda_parity holds it to ssm_dt_ulps (ops_parity_bounds.h)
    [RG_OP_SSM_DT] = {T_F32, gen_ssm_dt, build_ssm_dt, ref_ssm_dt, NULL, M_ELEM, 2.4e-7, false},
    [RG_OP_SSM_SCAN] = {T_F32, gen_ssm_scan, build_ssm_scan, ref_ssm_scan, NULL, M_NORM, 2e-6, true},
    [RG_OP_SSM_SCAN_BACK] = {T_F32, gen_ssm_scan_back, build_ssm_scan_back, ref_ssm_scan_back, NULL, M_NORM, 2e-6, true},
    // a copy: exact, and the CUDA kernel's bits are the CPU's
    [RG_OP_CONV_RS_GATHER] = {T_F32, gen_conv_rs_gather, build_conv_rs_gather, ref_conv_rs_gather, NULL, M_ELEM, 0, true},
    // flash attention (ops_flash_rows.h): f32 dot products of Dh <= 512 terms in 8 lanes, the 2-ulp exp, sums of
    // Tk <= 200 weighted values (the weights sum to 1): o and lse 1e-6 (seen: 1.7e-7); the backward's sums of as
    // many products over the query rows and GQA heads: 2e-6 (seen: 5.2e-7). The CUDA kernels (ops_flash.cu) sum in
    // their own tile orders with fmaf: cuda_parity holds them to bounds from Tk and Dh (ops_parity_bounds.h), not to
    // the CPU's bits.
    // the global norm: double sums of <= 12305 positive terms (n 2^-53: 1.4e-12); the clip: one f32 rounding (u).
    // The CUDA kernels make the CPU's double operations in its order: the same bits (cuda_parity)
    [RG_OP_SUMSQ] = {T_F32, gen_sumsq, build_sumsq, ref_sumsq, NULL, M_ELEM, 2e-12, true},
    [RG_OP_CLIP_COEF] = {T_F32, gen_clip_coef, build_clip_coef, ref_clip_coef, NULL, M_ELEM, 6e-8, true},
    [RG_OP_FLASH_ATTN_EXT] = {T_ATTN, gen_flash_attn_ext, build_flash_attn_ext, ref_flash_attn_ext, NULL, M_NORM, 1e-6},
    [RG_OP_FLASH_ATTN_BACK] = {T_ATTN, gen_flash_attn_back, build_flash_attn_back, ref_flash_attn_back, NULL, M_NORM,
                               2e-6},
};

// ---------------------------------------------------------------------------
// The loop

static void restore_inputs(const tcase *c) {
    for (int k = 0; k < c->n_in; k++) memcpy(c->in[k].work, c->in[k].bytes, c->in[k].nbytes);
}

// Leaves for the inputs (trainable ones as rg_param when params), then the op.
static int build_case(rg_graph *g, const op_entry *e, const tcase *c, bool params, rg_node **leaf, rg_node **out) {
    for (int k = 0; k < c->n_in; k++) {
        const tin *t = &c->in[k];
        leaf[k] = params && t->param ? rg_param(g, t->name, t->type, 4, t->ne, t->work)
                                     : rg_leaf(g, t->name, t->type, 4, t->ne, t->work);
    }
    for (int k = 0; k < MAX_OUT; k++) out[k] = NULL;
    return e->build(g, leaf, c, out);
}

static int64_t outs_nel(rg_node *const *out, int n_out) {
    int64_t n = 0;
    for (int k = 0; k < n_out; k++) n += out[k] ? rg_tensor_nelements(&out[k]->t) : 0;
    return n;
}

static void read_outs(rg_node *const *out, int n_out, double *dst) {
    for (int k = 0; k < n_out; k++) {
        read_tensor(&out[k]->t, dst);
        dst += rg_tensor_nelements(&out[k]->t);
    }
}

// Runs g twice on n_threads (inputs restored before each run) into r0 and r1.
static rg_status run_twice(rg_graph *g, const tcase *c, int n_threads, rg_node *const *out, int n_out, double *r0,
                           double *r1, rg_error *err) {
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = n_threads};
    rg_status st = rg_exec_create(&ex, g, &o, err);
    for (int rep = 0; rep < 2 && !st; rep++) {
        restore_inputs(c);
        st = rg_exec_run(ex, 0, -1, err);
        if (!st) read_outs(out, n_out, rep ? r1 : r0);
    }
    rg_exec_free(ex);
    return st;
}

// The forward error of got against want, scaled by the reference ref (mag:
// the reference of |inputs|, for M_ABS).
static double fwd_error(int metric, const double *got, const double *want, const double *ref, const double *mag,
                        int64_t n) {
    double den = 0, e = 0;
    for (int64_t i = 0; i < n; i++) den = fabs(ref[i]) > den ? fabs(ref[i]) : den;
    for (int64_t i = 0; i < n; i++) {
        if (got[i] == want[i]) continue;  // also equal infinities
        double d = fabs(got[i] - want[i]);
        double s = metric == M_NORM ? den : metric == M_ABS ? fabs(mag[i]) : fabs(ref[i]);
        double r = s > 0 ? d / s : INFINITY;
        if (!(r <= e)) e = r;  // NaN stays NaN and fails
    }
    return e;
}

static bool same_bits(const double *a, const double *b, int64_t n) { return memcmp(a, b, sizeof(double) * (size_t)n) == 0; }

static void report(const char *op, const tcase *c, const char *check, const char *metric, double err, double tol,
                   const char *extra) {
    bool ok = err <= tol;
    printf("    %s %s %s %s %.1e <= %.1e%s%s\n", op, c->label, check, metric, err, tol, extra, ok ? "" : "  FAIL");
    RG_CHECK(ok, "%s %s %s: %s %.3e exceeds %.1e", op, c->label, check, metric, err, tol);
}

static void report_error(const char *op, const tcase *c, const char *check, const char *msg) {
    printf("    %s %s %s FAIL: %s\n", op, c->label, check, msg);
    RG_CHECK(0, "%s %s %s: %s", op, c->label, check, msg);
}

// Same shape as the case says the op makes (a constructor's shape rule).
static bool check_shape(const char *op, const tcase *c, const char *check, const rg_node *y) {
    if (!y) return false;
    if (memcmp(y->t.ne, c->out_ne, sizeof c->out_ne) == 0) return true;
    char msg[200];
    snprintf(msg, sizeof msg, "output shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]",
             (long long)y->t.ne[0], (long long)y->t.ne[1], (long long)y->t.ne[2], (long long)y->t.ne[3],
             (long long)c->out_ne[0], (long long)c->out_ne[1], (long long)c->out_ne[2], (long long)c->out_ne[3]);
    report_error(op, c, check, msg);
    return false;
}

static void check_forward(rg_op op, const op_entry *e, tcase *c) {
    const char *name = rg_op_name(op);
    double tol = c->fwd_tol >= 0 ? c->fwd_tol : e->fwd_tol;
    rg_error err = {0};
    rg_graph *g = rg_graph_new();
    rg_node *leaf[MAX_IN], *out[MAX_OUT];
    int n_out = build_case(g, e, c, false, leaf, out);
    if (rg_graph_error(g, &err) || !out[0]) {
        report_error(name, c, "fwd", err.msg[0] ? err.msg : "the builder made no node");
        rg_graph_free(g);
        return;
    }
    if (!check_shape(name, c, "fwd", out[0])) {
        rg_graph_free(g);
        return;
    }
    for (int k = 0; k < n_out; k++) out[k]->flags |= RG_NODE_OUTPUT;
    const int64_t n = outs_nel(out, n_out);
    RG_CHECK(n == c->n_out, "%s %s: %lld outputs, the reference makes %lld", name, c->label, (long long)n,
             (long long)c->n_out);
    double *r[4], *ref = calloc((size_t)c->n_out, sizeof(double)), *mag = calloc((size_t)c->n_out, sizeof(double));
    for (int k = 0; k < 4; k++) r[k] = calloc((size_t)n, sizeof(double));
    double *x[MAX_IN] = {0}, *ax[MAX_IN] = {0};
    for (int k = 0; k < c->n_in; k++) {
        x[k] = c->in[k].val;
        if (!x[k]) continue;
        ax[k] = malloc(sizeof(double) * (size_t)nel4(c->in[k].ne));
        for (int64_t i = 0; i < nel4(c->in[k].ne); i++) ax[k][i] = fabs(x[k][i]);
    }
    e->ref(c, x, ref);
    if (e->metric == M_ABS) e->ref(c, ax, mag);
    rg_status st = n == c->n_out ? run_twice(g, c, 1, out, n_out, r[0], r[1], &err) : RG_ERR_ARG;
    if (st) {
        report_error(name, c, "fwd", err.msg);
    } else {
        report(name, c, "fwd", metric_name[e->metric], fwd_error(e->metric, r[0], ref, ref, mag, n), tol, "");
        RG_CHECK(same_bits(r[0], r[1], n), "%s %s: two 1-thread runs differ", name, c->label);
        st = run_twice(g, c, 2, out, n_out, r[2], r[3], &err);
        if (st) {
            report_error(name, c, "thr", err.msg);
        } else {
            bool bits = same_bits(r[0], r[1], n) && same_bits(r[2], r[3], n);
            // the 2-thread result against the 1-thread one, scaled like the forward error
            double e2 = fwd_error(e->metric, r[2], r[0], ref, mag, n);
            report(name, c, "thr", "2t-vs-1t", e2, tol,
                   bits ? ", reruns bit-identical" : ", reruns DIFFER");
            RG_CHECK(bits, "%s %s: reruns with the same thread count differ", name, c->label);
        }
    }
    for (int k = 0; k < 4; k++) free(r[k]);
    for (int k = 0; k < MAX_IN; k++) free(ax[k]);
    free(ref), free(mag);
    rg_graph_free(g);
}

// loss = sum(out * w) for the double reference.
static double ref_loss(const op_entry *e, const tcase *c, double *const *x, const double *w, double *tmp) {
    (e->ref_fd ? e->ref_fd : e->ref)(c, x, tmp);
    double s = 0;
    for (int64_t i = 0; i < nel4(c->out_ne); i++) s += tmp[i] * w[i];
    return s;
}

// max over the trainable inputs of |grad - fd| / max(1, max|fd|); the names
// of the inputs into which. The graph has run.
static double grad_error(const op_entry *e, tcase *c, rg_node *const *leaf, const double *w, char *which,
                         size_t cap) {
    double worst = 0, *x[MAX_IN] = {0}, *tmp = malloc(sizeof(double) * (size_t)c->n_out);
    for (int k = 0; k < c->n_in; k++) x[k] = c->in[k].val;
    which[0] = 0;
    for (int k = 0; k < c->n_in; k++) {
        tin *t = &c->in[k];
        if (!t->param) continue;
        snprintf(which + strlen(which), cap - strlen(which), "%s%s", which[0] ? "," : "", t->name);
        if (!leaf[k]->grad) {
            worst = INFINITY;
            continue;
        }
        const int64_t m = nel4(t->ne);
        double *gr = malloc(sizeof(double) * (size_t)m), *fd = malloc(sizeof(double) * (size_t)m), fd_max = 0;
        read_tensor(&leaf[k]->grad->t, gr);
        for (int64_t i = 0; i < m; i++) {
            const double v = t->val[i], h = 1e-5 * fmax(1.0, fabs(v));
            t->val[i] = v + h;
            double lp = ref_loss(e, c, x, w, tmp);
            t->val[i] = v - h;
            double lm = ref_loss(e, c, x, w, tmp);
            t->val[i] = v;
            fd[i] = (lp - lm) / (2 * h);
            fd_max = fmax(fd_max, fabs(fd[i]));
        }
        for (int64_t i = 0; i < m; i++) {
            double d = fabs(gr[i] - fd[i]) / fmax(1.0, fd_max);
            if (!(d <= worst)) worst = d;
        }
        free(gr), free(fd);
    }
    free(tmp);
    return worst;
}

static void check_backward(rg_op op, const op_entry *e, tcase *c) {
    const char *name = rg_op_name(op);
    int n_params = 0;
    for (int k = 0; k < c->n_in; k++) n_params += c->in[k].param;
    if (!n_params) return;  // nothing trainable: a quantized table or weight is frozen
    rg_error err = {0};
    rg_graph *g = rg_graph_new();
    rg_node *leaf[MAX_IN], *out[MAX_OUT];
    build_case(g, e, c, true, leaf, out);
    const int64_t n = nel4(c->out_ne);
    float *wf = aligned_alloc(64, (sizeof(float) * (size_t)n + 63) / 64 * 64);
    double *w = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) wf[i] = rg_rng_normal(c->seed, 99, (uint64_t)i), w[i] = wf[i];
    rg_node *y = out[0];
    if (y && y->t.type != RG_TYPE_F32) y = rg_cpy(g, y, RG_TYPE_F32);  // the loss is F32
    rg_node *loss = rg_sum(g, rg_mul(g, y, rg_leaf(g, "w", RG_TYPE_F32, 4, c->out_ne, wf)));
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1};
    rg_status st = rg_graph_error(g, &err);
    if (!st && !check_shape(name, c, "bwd", out[0])) goto done;
    if (!st) st = rg_graph_backward(g, loss, &err);
    if (!st) restore_inputs(c), st = rg_exec_create(&ex, g, &o, &err);
    if (!st) st = rg_exec_run(ex, 0, -1, &err);
    if (st) {
        report_error(name, c, "bwd", err.msg);
    } else {
        char which[64], extra[80];
        double worst = grad_error(e, c, leaf, w, which, sizeof which);
        snprintf(extra, sizeof extra, " (d/d %s)", which);
        report(name, c, "bwd", "maxerr", worst, BWD_TOL, extra);
    }
done:
    rg_exec_free(ex);
    rg_graph_free(g);
    free(wf), free(w);
}

// Calls fn on every case of op: each type of `types` (TEND-ended) and each variant its
// generator makes, the seed fixed by (op, type, variant).
static void for_each_case(rg_op op, const uint32_t *types, void (*fn)(rg_op, const op_entry *, tcase *, void *),
                          void *arg) {
    const op_entry *e = &entries[op];
    for (const uint32_t *tp = types; *tp != TEND; tp++) {
        for (int v = 0;; v++) {
            tcase c;
            memset(&c, 0, sizeof c);
            c.type = *tp;
            c.seed = ((uint64_t)op << 24) ^ ((uint64_t)*tp << 8) ^ (uint64_t)v;
            c.fwd_tol = -1;
            if (!e->gen(&c, *tp, v)) {
                free_case(&c);
                break;
            }
            if (!c.n_out) c.n_out = nel4(c.out_ne);
            fn(op, e, &c, arg);
            free_case(&c);
        }
    }
}

static void check_case(rg_op op, const op_entry *e, tcase *c, void *arg) {
    (void)arg;
    check_forward(op, e, c);
    if (rg_op_defs[op].backward) check_backward(op, e, c);
}

static void run_op(rg_op op) {
    const op_entry *e = &entries[op];
    RG_REQUIRE(e->gen && e->build && e->ref && e->types, "op %s has no test entry", rg_op_name(op));
    for_each_case(op, e->types == T_WEIGHTS && quick() ? T_WEIGHTS_QUICK : e->types, check_case, NULL);
}

// ---------------------------------------------------------------------------
// The CUDA parity suite (the seed's cuda_backend test): the same table walked on the CUDA
// device (a GPU, or the host execution of the CUDA code under RETRO_CUDA_HOST=1), every
// op x every float type it accepts x every variant, the forward against the CPU's output
// on the same inputs with the op's forward metric and bound, and for differentiable ops
// the gradients of the same loss as "bwd" (the backward graph runs on the device too)
// against the CPU's within a bound derived from the op's rounding error (ops_parity_bounds.h:
// per op and type, stated there). One table line per row, with error / bound. An (op, type) the CUDA column
// does not take is a MISSING row and fails the suite: every op must have a CUDA kernel
// (a line in src/cuda/op_table.cu) for every type the CPU accepts, except quantized inputs
// of other ops than MUL_MAT and OUT_PROD (a later issue); those two take every quantized type
// the device decodes (test_cuda_quant_mm requires the issue's list of types). Rows marked
// cuda_bits must also give the CPU's bits exactly.

static bool is_quantized(uint32_t t) { return rg_type_get(t)->quantized; }

// Whether the device decodes quantized weights of `type`: its MUL_MAT cell takes one.
static bool cuda_decodes(uint32_t type) {
    static uint8_t q[1 << 12];
    static float f[256];
    rg_graph *g = rg_graph_new();
    rg_node *w = rg_leaf(g, "w", type, 2, (int64_t[]){256, 2}, q);
    rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){256, 1}, f);
    const bool yes = rg_op_cell_runs(RG_BACKEND_CUDA, rg_mul_mat(g, w, x));
    rg_graph_free(g);
    return yes;
}

#include "ops_parity_bounds.h"

// Runs g once on `device` (inputs restored first, so in-place ops start from the case's
// values) and reads the outputs (through rg_exec_read: device bytes are not host bytes).
static rg_status run_on(rg_graph *g, const tcase *c, rg_device device, rg_node *const *out, int n_out, double *dst,
                        rg_exec_stats *stats, rg_error *err) {
    restore_inputs(c);
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1, .device = device};
    rg_status st = rg_exec_create(&ex, g, &o, err);
    if (!st) st = rg_exec_run(ex, 0, -1, err);
    for (int k = 0; k < n_out && !st; k++) {
        const size_t span = rg_tensor_span(&out[k]->t);
        void *host = malloc(span ? span : 1);
        st = rg_exec_read(ex, out[k], host, span, err);
        rg_tensor t = out[k]->t;
        t.data = host;
        if (!st) read_tensor(&t, dst);
        dst += rg_tensor_nelements(&out[k]->t);
        free(host);
    }
    if (!st && stats) *stats = rg_exec_get_stats(ex);
    rg_exec_free(ex);
    return st;
}

typedef struct parity_tally {
    int rows, missing, failed;
    char missing_list[2048];
    int n_ratio;
    double ratio[1024];  // error / bound of the rows that differ from the CPU at all
} parity_tally;

// A row's line: its error, bound and their ratio (over 1 fails); the ratio kept for the headroom.
static void parity_line(parity_tally *tally, const char *op, const tcase *c, const char *check, double abs_err,
                        double err, double tol, const char *note) {
    const double ratio = err == 0 ? 0 : tol > 0 ? err / tol : INFINITY;
    const bool ok = ratio <= 1;
    printf("    %-24s %-28s %-4s max|d| %-9.2e err %-9.2e bound %-8.2e ratio %-7.2g %s%s\n", op, c->label, check, abs_err,
           err, tol, ratio, ok ? "ok" : "FAIL", note);
    RG_CHECK(ok, "cuda %s %s %s: %.3e exceeds its bound %.3e (ratio %.3g)", op, c->label, check, err, tol, ratio);
    tally->failed += !ok;
    if (err > 0 && tally->n_ratio < (int)(sizeof tally->ratio / sizeof tally->ratio[0]))
        tally->ratio[tally->n_ratio++] = ratio;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// The headroom (bound / error) of the rows that differ from the CPU: min, median, max.
static void parity_headroom(parity_tally *tally) {
    if (!tally->n_ratio) {
        printf("    headroom: every row gives the CPU's bits\n");
        return;
    }
    qsort(tally->ratio, (size_t)tally->n_ratio, sizeof(double), cmp_double);
    const int n = tally->n_ratio;
    printf("    headroom (bound / error) over the %d rows that differ from the CPU: min %.3g, median %.3g, max %.3g\n", n,
           1 / tally->ratio[n - 1], 1 / tally->ratio[n / 2], 1 / tally->ratio[0]);
}

// SSM_DT's forward, per element: |cuda - cpu| / |cpu| against ssm_dt_ulps ulps (2u each); an
// element allowed 0 ulps must be equal.
static double ssm_dt_error(const tcase *c, const double *const *x, const double *gpu, const double *cpu, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (gpu[i] == cpu[i]) continue;
        const double r = fabs(gpu[i] - cpu[i]) / (fabs(cpu[i]) * ssm_dt_ulps(c, x, i) * 2 * PARITY_U);
        if (!(r <= worst)) worst = r;  // NaN and 0 ulps stay over
    }
    return worst;
}

// Whether g holds an SSM_DT node: on CUDA its own f32 code (ops_ssm.cu, ssm_dt_f32), not the
// CPU's double rule, so the rows that read its values (the scans' backward, SSM_SCAN_BACK's)
// are held to their bounds, not to the CPU's bits.
static bool has_own_math(const rg_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == RG_OP_SSM_DT) return true;
    return false;
}

// An op whose CUDA kernel makes the CPU's operations in its order (op_entry.cuda_bits) must
// give the CPU's bits, within its tolerance or not (unless the graph holds own_math).
static void parity_bits(const op_entry *e, const rg_graph *g, const char *op, const tcase *c, const char *check,
                        double max_diff) {
    if (e->cuda_bits && !has_own_math(g)) RG_CHECK(max_diff == 0, "cuda %s %s %s: not the CPU's bits (max|d| %.3e)", op, c->label, check, max_diff);
}

static double max_abs_diff(const double *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i] && !(fabs(a[i] - b[i]) <= m)) m = fabs(a[i] - b[i]);
    return m;
}

// The unit roundoff of the tensor path (RETRO_CUDA_HALF_GEMM=tensor, the default; cuda.h)
// for this row, or 0. There a product with an F16/BF16 weight rounds its F32 operand to the
// weight's type, and the products of the rounded values are exact in F32, so an element
// differs from the CPU's F32 one by at most u sum |w x| (u = 2^-8 BF16, 2^-11 F16) plus the
// F32 sums: u on M_ABS's scale, the forward bound used (plus the F32 row's own). The
// backward also rounds the upstream gradient, and dW rounds both of its operands: at most
// 2u + u^2 per term; 4u is allowed on the gradient's scale. LINEAR_CE rounds h, so each
// logit is off by at most u S_t (S_t = sum_k |w h|) and the log-sum-exp by the largest of
// those: u on its scale. LINEAR_CE_BACK also rounds G, whose entries carry the logits' error
// through the softmax: 2u allowed (measured: 0.6u F16, 0.75u BF16).
// A quantized weight's wide products (MUL_MAT, OUT_PROD: ops_quant_mm.cu's sliced path) round
// the decoded weight and the F32 operand to BF16: 2u + u^2 per term, u = 2^-8.
static double tensor_path_unit(rg_op op, const tcase *c) {
    const bool product = op == RG_OP_MUL_MAT || op == RG_OP_OUT_PROD || op == RG_OP_LINEAR_CE || op == RG_OP_LINEAR_CE_BACK;
    if (!product || rg_cuda_half_gemm_env(NULL, 0) != RG_CUDA_HALF_GEMM_TENSOR) return 0;
    if (is_quantized(c->type) && (op == RG_OP_MUL_MAT || op == RG_OP_OUT_PROD)) return 2 * 0x1p-8 + 0x1p-16;
    const double u = c->type == RG_TYPE_BF16 ? 0x1p-8 : c->type == RG_TYPE_F16 ? 0x1p-11 : 0;
    return op == RG_OP_LINEAR_CE_BACK ? 2 * u : u;
}

static void parity_case(rg_op op, const op_entry *e, tcase *c, void *arg) {
    parity_tally *tally = arg;
    const char *name = rg_op_name(op);
    const double unit = tensor_path_unit(op, c);
    // The forward bound: derived in ops_parity_bounds.h (fwd_terms), or the op table's.
    const double k_fwd = fwd_terms(op, c);
    const double tol = (k_fwd >= 0 ? 2 * parity_gamma(k_fwd) : c->fwd_tol >= 0 ? c->fwd_tol : e->fwd_tol) + unit;
    rg_error err = {0};
    rg_graph *g = rg_graph_new();
    rg_node *leaf[MAX_IN], *out[MAX_OUT];
    const int n_out = build_case(g, e, c, false, leaf, out);
    if (rg_graph_error(g, &err) || !out[0]) {
        report_error(name, c, "cuda", err.msg[0] ? err.msg : "the builder made no node");
        rg_graph_free(g);
        return;
    }
    tally->rows++;
    if (!rg_op_cell_runs(RG_BACKEND_CUDA, out[0])) {
        tally->missing++;
        size_t len = strlen(tally->missing_list);
        if (len + 64 < sizeof tally->missing_list)
            snprintf(tally->missing_list + len, sizeof tally->missing_list - len, "%s%s %s", len ? ", " : "", name,
                     c->label);
        printf("    %-24s %-28s MISSING: the CUDA column does not take this node\n", name, c->label);
        rg_graph_free(g);
        return;
    }
    for (int k = 0; k < n_out; k++) out[k]->flags |= RG_NODE_OUTPUT;
    const int64_t n = outs_nel(out, n_out);
    double *cpu = calloc((size_t)n, sizeof(double)), *gpu = calloc((size_t)n, sizeof(double));
    double *ref = calloc((size_t)c->n_out, sizeof(double)), *mag = calloc((size_t)c->n_out, sizeof(double));
    double *x[MAX_IN] = {0}, *ax[MAX_IN] = {0};
    for (int k = 0; k < c->n_in; k++) {
        x[k] = c->in[k].val;
        if (!x[k]) continue;
        ax[k] = malloc(sizeof(double) * (size_t)nel4(c->in[k].ne));
        for (int64_t i = 0; i < nel4(c->in[k].ne); i++) ax[k][i] = fabs(x[k][i]);
    }
    e->ref(c, x, ref);
    if (e->metric == M_ABS) e->ref(c, ax, mag);
    rg_exec_stats st_gpu = {0};
    rg_status st = run_on(g, c, RG_DEVICE_CPU, out, n_out, cpu, NULL, &err);
    if (!st) st = run_on(g, c, RG_DEVICE_CUDA, out, n_out, gpu, &st_gpu, &err);
    if (st) {
        report_error(name, c, "cuda", err.msg);
        tally->failed++;
    } else {
        // The error of the device against the CPU, scaled as the op's forward error is.
        // SSM_DT: per element against its ulp bound (the bound is then 1).
        const bool dt_ulps = op == RG_OP_SSM_DT;
        const double fe = dt_ulps ? ssm_dt_error(c, (const double *const *)x, gpu, cpu, n)
                                  : fwd_error(e->metric, gpu, cpu, ref, mag, n);
        char note[96] = "";
        if (st_gpu.nodes_fallback) snprintf(note, sizeof note, " (%d nodes fell back)", st_gpu.nodes_fallback);
        const double d = max_abs_diff(gpu, cpu, n);
        if (unit) snprintf(note + strlen(note), sizeof note - strlen(note), " (tensor path: +%.1e)", unit);
        parity_line(tally, name, c, "fwd", d, fe, dt_ulps ? 1.0 : tol, note);
        parity_bits(e, g, name, c, "fwd", d);
    }
    for (int k = 0; k < MAX_IN; k++) free(ax[k]);
    free(cpu), free(gpu), free(ref), free(mag);
    rg_graph_free(g);
    if (st || !rg_op_defs[op].backward) return;
    // The backward: the gradients of loss = sum(out * w) on the device against the CPU's.
    int n_params = 0;
    for (int k = 0; k < c->n_in; k++) n_params += c->in[k].param;
    if (!n_params) return;
    g = rg_graph_new();
    build_case(g, e, c, true, leaf, out);
    const int64_t m = nel4(c->out_ne);
    float *wf = aligned_alloc(64, (sizeof(float) * (size_t)m + 63) / 64 * 64);
    for (int64_t i = 0; i < m; i++) wf[i] = rg_rng_normal(c->seed, 99, (uint64_t)i);
    rg_node *y = out[0]->t.type != RG_TYPE_F32 ? rg_cpy(g, out[0], RG_TYPE_F32) : out[0];
    rg_node *loss = rg_sum(g, rg_mul(g, y, rg_leaf(g, "w", RG_TYPE_F32, 4, c->out_ne, wf)));
    rg_node *grads[MAX_IN];
    int n_grads = 0;
    double u_grad = 0;  // a gradient stored in F16/BF16: its unit roundoff
    int64_t ng = 0;
    st = rg_graph_error(g, &err);
    if (!st) st = rg_graph_backward(g, loss, &err);
    for (int k = 0; k < c->n_in && !st; k++)
        if (c->in[k].param && leaf[k]->grad) {
            grads[n_grads++] = leaf[k]->grad, ng += rg_tensor_nelements(&leaf[k]->grad->t);
            const uint32_t gt = leaf[k]->grad->t.type;
            u_grad = fmax(u_grad, gt == RG_TYPE_BF16 ? 0x1p-8 : gt == RG_TYPE_F16 ? 0x1p-11 : 0);
        }
    double *gc = calloc((size_t)(ng ? ng : 1), sizeof(double)), *gg = calloc((size_t)(ng ? ng : 1), sizeof(double));
    if (!st) st = run_on(g, c, RG_DEVICE_CPU, grads, n_grads, gc, NULL, &err);
    if (!st) st = run_on(g, c, RG_DEVICE_CUDA, grads, n_grads, gg, &st_gpu, &err);
    if (st) {
        report_error(name, c, "cuda bwd", err.msg);
        tally->failed++;
    } else {
        double gmax = 0;
        for (int64_t i = 0; i < ng; i++) gmax = fmax(gmax, fabs(gc[i]));
        // norm-wise: the largest difference on the largest gradient; the bound is 2 gamma_K
        // of the op's backward (bwd_terms), an ulp of a half gradient, the tensor path's 4 unit
        const double d = max_abs_diff(gg, gc, ng), be = d == 0 ? 0 : gmax > 0 ? d / gmax : INFINITY;
        const double bwd_tol = 2 * parity_gamma(bwd_terms(op, c)) + 2 * u_grad + 4 * unit;
        char note[96] = "";
        if (st_gpu.nodes_fallback) snprintf(note, sizeof note, " (%d nodes fell back)", st_gpu.nodes_fallback);
        if (unit) snprintf(note + strlen(note), sizeof note - strlen(note), " (tensor path: +%.1e)", unit);
        parity_line(tally, name, c, "bwd", d, be, bwd_tol, note);
        parity_bits(e, g, name, c, "bwd", d);
    }
    free(gc), free(gg), free(wf);
    rg_graph_free(g);
}

static void test_cuda_parity(void) {
    char why[256];
    if (rg_cuda_device_count(why, sizeof why) <= 0) RG_SKIP("no CUDA device: %s", why);
    parity_tally tally = {0};
    char mode_why[160];
    const int mode = rg_cuda_half_gemm_env(mode_why, sizeof mode_why);
    RG_CHECK(mode >= 0, "%s", mode_why);
    printf("    F16/BF16 weights: RETRO_CUDA_HALF_GEMM=%s\n", rg_cuda_half_gemm_name(mode));
    printf("    %-24s %-28s %-4s %-16s %-13s %-14s %s\n", "op", "case", "", "worst |cuda-cpu|", "error", "bound",
           "error / bound");
    for (int op = RG_OP_NONE + 1; op < RG_OP_COUNT; op++) {
        if (rg_op_defs[op].is_view) continue;  // no kernel: views share their source's bytes on any backend
        uint32_t types[32];
        int nt = 0;
        for (const uint32_t *tp = entries[op].types; *tp != TEND && nt < 31; tp++)
            if (!is_quantized(*tp) || ((op == RG_OP_MUL_MAT || op == RG_OP_OUT_PROD) && cuda_decodes(*tp)))
                types[nt++] = *tp;  // quantized inputs of the other ops on CUDA: a later issue
        types[nt] = TEND;
        for_each_case((rg_op)op, types, parity_case, &tally);
    }
    printf("    %d rows: %d without a CUDA kernel, %d over their bound\n", tally.rows, tally.missing, tally.failed);
    parity_headroom(&tally);
    RG_CHECK(tally.missing == 0, "%d (op, type) rows have no CUDA kernel: %s", tally.missing, tally.missing_list);
}

// ---------------------------------------------------------------------------
// One test per op (the name filter picks ops), and the table's completeness.

#define OP_LIST(X)                                                                                                  \
    X(none, NONE) X(fill, FILL) X(get_rows, GET_ROWS) X(get_rows_back, GET_ROWS_BACK) X(mul_mat, MUL_MAT)          \
    X(out_prod, OUT_PROD) X(add, ADD) X(sub, SUB) X(mul, MUL) X(scale, SCALE) X(repeat, REPEAT)                    \
    X(repeat_back, REPEAT_BACK) X(sum, SUM) X(mean, MEAN) X(sum_rows, SUM_ROWS) X(rms_norm, RMS_NORM)              \
    X(rms_norm_back, RMS_NORM_BACK) X(rope, ROPE) X(rope_back, ROPE_BACK) X(soft_max, SOFT_MAX)                    \
    X(soft_max_back, SOFT_MAX_BACK) X(silu, SILU) X(silu_back, SILU_BACK) X(swiglu, SWIGLU) X(gelu, GELU)          \
    X(gelu_back, GELU_BACK) X(softcap, SOFTCAP) X(softcap_back, SOFTCAP_BACK) X(reshape, RESHAPE)                  \
    X(view, VIEW) X(permute, PERMUTE) X(transpose, TRANSPOSE) X(view_back, VIEW_BACK) X(cont, CONT) X(cpy, CPY)    \
    X(cross_entropy_loss, CROSS_ENTROPY_LOSS) X(cross_entropy_loss_back, CROSS_ENTROPY_LOSS_BACK)                  \
    X(adamw, ADAMW) X(sgd, SGD) X(cpy_into, CPY_INTO) X(linear_ce, LINEAR_CE) X(linear_ce_back, LINEAR_CE_BACK) \
    X(attn_decode, ATTN_DECODE) X(ssm_conv, SSM_CONV) X(ssm_conv_back, SSM_CONV_BACK) X(ssm_dt, SSM_DT)             \
    X(ssm_scan, SSM_SCAN) X(ssm_scan_back, SSM_SCAN_BACK) X(conv_rs_gather, CONV_RS_GATHER) X(flash_attn_ext, FLASH_ATTN_EXT)                       \
    X(flash_attn_back, FLASH_ATTN_BACK) X(sumsq, SUMSQ) X(clip_coef, CLIP_COEF)

#define X_FN(lc, UC) \
    static void test_##lc(void) { run_op(RG_OP_##UC); }
OP_LIST(X_FN)
#define X_COVER(lc, UC) [RG_OP_##UC] = true,
static const bool covered[RG_OP_COUNT] = {OP_LIST(X_COVER)};

// Every op of rg_op_defs has a row with its own name, the types its CPU kernel runs (the
// report's column), a fusion hook only with its runner and no kernel for a view; a test row
// and a test; every differentiable op's row marks some input trainable for at least one type.
static void test_table(void) {
    for (int op = 0; op < RG_OP_COUNT; op++) {
        const op_entry *e = &entries[op];
        const rg_op_def *d = &rg_op_defs[op];
        RG_CHECK(d->name != NULL, "op %d has no row in rg_op_defs", op);
        for (int other = 0; d->name && other < op; other++)
            RG_CHECK(!rg_op_defs[other].name || strcmp(rg_op_defs[other].name, d->name),
                     "ops %d and %d are both named '%s'", other, op, d->name);
        RG_CHECK(!d->cpu == !d->cpu_types, "op %s: a CPU kernel and its types go together (kernel %s, types %s)",
                 rg_op_name((rg_op)op), d->cpu ? "set" : "NULL", d->cpu_types ? d->cpu_types : "NULL");
        RG_CHECK(!d->cpu_group == !d->cpu_run_group, "op %s: a fusion hook needs both cpu_group and cpu_run_group",
                 rg_op_name((rg_op)op));
        RG_CHECK(!d->is_view || (!d->cpu && !d->extra_reads && !d->writes_src), "op %s: a view runs nothing",
                 rg_op_name((rg_op)op));
        RG_CHECK(e->gen && e->build && e->ref && e->types, "op %s (%d) has no test entry in test_ops.c",
                 rg_op_name((rg_op)op), op);
        RG_CHECK(covered[op], "op %s (%d) has no test function in OP_LIST", rg_op_name((rg_op)op), op);
        if (!e->gen || !rg_op_defs[op].backward) continue;
        tcase c;
        memset(&c, 0, sizeof c);
        bool any = false;
        if (e->gen(&c, e->types[0], 0))
            for (int k = 0; k < c.n_in; k++) any |= c.in[k].param;
        free_case(&c);
        RG_CHECK(any, "op %s has a backward rule but its first case trains no input", rg_op_name((rg_op)op));
    }
    printf("    %d ops in the table, every one with a test row\n", RG_OP_COUNT);
}

// The fused loss against the unfused one it replaces, MUL_MAT then
// CROSS_ENTROPY_LOSS, on a shape where the chunks matter: d = 64, V = 1000
// (chunks of 96: ten and a last of 40; and the automatic chunk, one here),
// T = 50 with 9 ignored labels, 2 threads. Both are f32 computations of the
// same sums in different orders (chunked vs whole-row lse, recomputed vs
// stored logits), so they agree to a few roundoff units, not bit for bit:
// loss within 1e-6 relative, dh and dw within 1e-5 of their largest element
// (seen: dh 7e-7, dw 5e-8); the fused results on 1 and 2 threads are the same
// bits (the token rows split between threads here). F32 w trains (dh and dw); a Q8_0 w is frozen (dh only).
static void compare_unfused(uint32_t type, int64_t chunk) {
    const int64_t d = 64, V = 1000, T = 50;
    tcase c;
    memset(&c, 0, sizeof c);
    c.seed = 0x1ce0 + type;
    const bool train_w = type == RG_TYPE_F32;
    tin *w = in_rand(&c, "w", type, d, V, 1, 1, 0.5, train_w);
    tin *h = in_rand(&c, "h", RG_TYPE_F32, d, T, 1, 1, 0.25, true);
    int32_t lab[50];
    for (int64_t t = 0; t < T; t++) lab[t] = t % 6 == 5 ? -100 : (int32_t)((t * 389 + 7) % V);
    tin *l = in_i32(&c, "labels", T, lab);
    restore_inputs(&c);
    double loss[3] = {0}, *gh[3] = {0}, *gw[3] = {0};
    for (int run = 0; run < 3; run++) {  // unfused, fused, fused on 1 thread (the same bits as on 2)
        const int fused = run > 0;
        rg_graph *g = rg_graph_new();
        rg_node *wn = train_w ? rg_param(g, "w", type, 2, w->ne, w->work) : rg_leaf(g, "w", type, 2, w->ne, w->work);
        rg_node *hn = rg_param(g, "h", RG_TYPE_F32, 2, h->ne, h->work);
        rg_node *ln = rg_leaf(g, "labels", RG_TYPE_I32, 1, l->ne, l->work);
        rg_node *lossn = fused ? rg_linear_ce_loss(g, rg_linear_ce(g, wn, hn, ln, -100, chunk))
                               : rg_cross_entropy_loss(g, rg_mul_mat(g, wn, hn), ln, -100);
        rg_error err = {0};
        rg_exec *ex = NULL;
        rg_exec_opts o = {.n_threads = run == 2 ? 1 : 2};
        rg_status st = rg_graph_backward(g, lossn, &err);
        if (!st) st = rg_exec_create(&ex, g, &o, &err);
        if (!st) st = rg_exec_run(ex, 0, -1, &err);
        RG_CHECK(st == RG_OK, "%s fused=%d: %s", rg_type_get(type)->name, fused, err.msg);
        if (!st) {
            loss[run] = *(const float *)lossn->t.data;
            gh[run] = malloc(sizeof(double) * (size_t)(d * T));
            read_tensor(&hn->grad->t, gh[run]);
            if (train_w) {
                gw[run] = malloc(sizeof(double) * (size_t)(d * V));
                read_tensor(&wn->grad->t, gw[run]);
            }
        }
        rg_exec_free(ex);
        rg_graph_free(g);
    }
    if (gh[0] && gh[1]) {
        double rel_loss = fabs(loss[1] - loss[0]) / fabs(loss[0]);
        double eh = 0, mh = 0, ew = 0, mw = 0;
        for (int64_t i = 0; i < d * T; i++) eh = fmax(eh, fabs(gh[1][i] - gh[0][i])), mh = fmax(mh, fabs(gh[0][i]));
        for (int64_t i = 0; train_w && i < d * V; i++)
            ew = fmax(ew, fabs(gw[1][i] - gw[0][i])), mw = fmax(mw, fabs(gw[0][i]));
        eh /= mh;
        if (train_w) ew /= mw;
        printf("    %s chunk %lld: loss %.7f vs %.7f (rel %.1e <= 1e-6), dh %.1e, dw %.1e (<= 1e-5 of max)\n",
               rg_type_get(type)->name, (long long)chunk, loss[1], loss[0], rel_loss, eh, ew);
        RG_CHECK(rel_loss <= 1e-6, "%s: fused loss %.9g vs unfused %.9g", rg_type_get(type)->name, loss[1], loss[0]);
        RG_CHECK(eh <= 1e-5 && ew <= 1e-5, "%s: fused gradients differ: dh %.3e, dw %.3e of max", rg_type_get(type)->name,
                 eh, ew);
        RG_CHECK(mh > 0 && (!train_w || mw > 0), "the gradients are zero");
    }
    if (gh[1] && gh[2]) {
        bool same = loss[1] == loss[2] && !memcmp(gh[1], gh[2], sizeof(double) * (size_t)(d * T)) &&
                    (!train_w || !memcmp(gw[1], gw[2], sizeof(double) * (size_t)(d * V)));
        printf("    %s chunk %lld: fused on 1 and 2 threads: %s\n", rg_type_get(type)->name, (long long)chunk,
               same ? "the same bits" : "DIFFERENT");
        RG_CHECK(same, "%s: the fused loss or gradients depend on the thread count", rg_type_get(type)->name);
    }
    for (int k = 0; k < 3; k++) free(gh[k]), free(gw[k]);
    free_case(&c);
}

static void test_linear_ce_unfused(void) {
    compare_unfused(RG_TYPE_F32, 96);
    compare_unfused(RG_TYPE_F32, 0);
    compare_unfused(RG_TYPE_Q8_0, 96);
}

#include "ops_perf.h"

#define X_CASE(lc, UC) {#lc, test_##lc},
static const rg_test_case cases[] = {RG_TEST(test_table),          OP_LIST(X_CASE) RG_TEST(test_linear_ce_unfused),
                                     RG_TEST(test_ssm_scan_sequential), RG_TEST(test_ssm_snapshots), RG_TEST(test_ssm_errors),
                                     RG_TEST(test_flash_attn_bits),      RG_TEST(test_flash_attn_materialized),
                                     RG_TEST(test_flash_attn_errors),    RG_TEST(test_perf_costs),
                                     RG_TEST(test_cuda_parity),          {0}};

// `test_ops perf [FILTER]` times the table's rows (ops_perf.h); anything else runs the tests.
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "perf")) return perf_main(argc > 2 ? argv[2] : NULL);
    return rg_test_run(argc, argv, cases);
}
