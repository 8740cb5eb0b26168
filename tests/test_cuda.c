// test_cuda.c - the CUDA backend on a real device, against the CPU. Every case
// that needs a GPU skips with the reason where there is none (or no CUDA in
// the build); the support table and the no-GPU refusal run everywhere.
//
// Parity: each op CUDA supports runs in a small graph through the executor
// twice, with .device = RG_DEVICE_CPU and RG_DEVICE_CUDA, and the outputs are
// compared (one table line per op, type and shape):
//   ADD       exact (one IEEE add per element on both sides)
//   MUL_MAT   |gpu - cpu| <= 1e-5 * sum_k |w_k x_k| per element (f16/bf16
//             weights are widened exactly on both sides; only the order of
//             the F32 sums differs)
//   SOFT_MAX  |gpu - cpu| <= 1e-6 (CUDA's expf/tanhf are within 2 ulp)
// While a CPU kernel is still a placeholder ("not written yet") the CPU side
// is a plain C reference here instead, and the table line says so.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"

static char why[256];

static int have_gpu(void) { return rg_cuda_device_count(why, sizeof why) > 0; }

static void test_cuda_device_is_detected(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    rg_cuda_device_info info;
    rg_error err = {0};
    RG_REQUIRE(rg_cuda_device_get(0, &info, &err) == RG_OK, "%s", err.msg);
    printf("    device 0: %s, compute %d.%d, %zu MiB total, %zu MiB free, %d SMs\n", info.name, info.major, info.minor,
           info.total_mem >> 20, info.free_mem >> 20, info.multiprocessors);
    RG_CHECK(info.name[0] != 0, "empty device name");
    RG_CHECK(info.major >= 7, "compute capability %d.%d is below what this build targets", info.major, info.minor);
    RG_CHECK(info.total_mem > 0 && info.free_mem <= info.total_mem, "memory %zu / %zu", info.free_mem, info.total_mem);
    // The clocks and bus width the perf mode's peaks are built on (test_ops perf): every device this
    // build targets reports them (the host execution's are made up).
    printf("    SM clock %d MHz, memory clock %d MHz x %d bits\n", info.clock_khz / 1000, info.mem_clock_khz / 1000,
           info.mem_bus_bits);
    RG_CHECK(info.clock_khz > 0 && info.mem_clock_khz > 0 && info.mem_bus_bits > 0, "clock %d kHz, memory %d kHz x %d bits",
             info.clock_khz, info.mem_clock_khz, info.mem_bus_bits);
    RG_CHECK(rg_cuda_device_get(9999, &info, &err) != RG_OK && strstr(err.msg, "9999"), "bad index: %s", err.msg);
}

static void test_cuda_add_matches_cpu(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    enum { N = 1000003 };  // not a multiple of the block size
    static float a[N], b[N], y[N];
    for (int i = 0; i < N; i++) {
        a[i] = rg_rng_normal(1, 0, (uint64_t)i);
        b[i] = rg_rng_normal(1, 1, (uint64_t)i);
        y[i] = -1.0f;
    }
    rg_error err = {0};
    RG_REQUIRE(rg_cuda_add_f32(0, a, b, y, N, &err) == RG_OK, "%s", err.msg);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != a[i] + b[i];  // one IEEE add: bit-exact on both sides
    RG_CHECK(bad == 0, "%d of %d elements differ from the CPU", bad, N);
}

// ---------------------------------------------------------------------------
// Helpers

static int64_t numel(const int64_t ne[4]) { return ne[0] * ne[1] * ne[2] * ne[3]; }

// n normal values times `scale`, from stream `stream` (the caller frees them).
static float *randn(int64_t n, uint64_t stream, float scale) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    for (int64_t i = 0; p && i < n; i++) p[i] = scale * rg_rng_normal(7, stream, (uint64_t)i);
    return p;
}

// The same values stored as `type` (f32, f16 or bf16).
static void *as_type(const float *x, int64_t n, uint32_t type) {
    if (type == RG_TYPE_F32) {
        float *p = malloc((size_t)n * 4);
        if (p) memcpy(p, x, (size_t)n * 4);
        return p;
    }
    uint16_t *h = malloc((size_t)n * 2);
    for (int64_t i = 0; h && i < n; i++) h[i] = type == RG_TYPE_F16 ? rg_fp32_to_fp16(x[i]) : rg_fp32_to_bf16(x[i]);
    return h;
}

static double elem(const rg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const char *p = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
    uint16_t h;
    float f;
    switch (t->type) {
    case RG_TYPE_F16: memcpy(&h, p, 2); return rg_fp16_to_fp32(h);
    case RG_TYPE_BF16: memcpy(&h, p, 2); return rg_bf16_to_fp32(h);
    default: memcpy(&f, p, 4); return f;
    }
}

// v rounded to `type` (RNE) and widened back.
static double rounded(double v, uint32_t type) {
    const float f = (float)v;
    return type == RG_TYPE_F16 ? rg_fp16_to_fp32(rg_fp32_to_fp16(f)) : type == RG_TYPE_BF16 ? rg_bf16_to_fp32(rg_fp32_to_bf16(f)) : f;
}

static int is_placeholder(const rg_error *e) {
    return e->status == RG_ERR_UNSUPPORTED && strstr(e->msg, "not written yet") != NULL;
}

static const char *type_name(uint32_t t) { return rg_type_get(t)->name; }

// Plans and runs g on `dev`, copies the (contiguous f32) output into y.
static rg_status run_graph(rg_graph *g, rg_device dev, rg_node *out, float *y, rg_exec_stats *stats, rg_error *err) {
    rg_status st = rg_graph_error(g, err);
    if (st) return st;
    out->flags |= RG_NODE_OUTPUT;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 2, .budget = 0, .device = dev};
    st = rg_exec_create(&ex, g, &o, err);
    if (st) return st;
    st = rg_exec_run(ex, 0, -1, err);
    if (!st) st = rg_exec_read(ex, out, y, (size_t)rg_tensor_nelements(&out->t) * sizeof(float), err);
    if (stats) *stats = rg_exec_get_stats(ex);
    rg_exec_free(ex);
    return st;
}

// Runs g on the CUDA backend and on the CPU. When the CPU kernel is still a
// placeholder, *cpu_ok is 0 and the caller fills cpu[] from its C reference.
// Returns 0 when the case cannot go on (the failure is recorded).
static int run_both(rg_graph *g, rg_node *out, float *gpu, float *cpu, int *cpu_ok, rg_exec_stats *gs) {
    rg_error err = {0};
    rg_status st = run_graph(g, RG_DEVICE_CUDA, out, gpu, gs, &err);
    if (st) {
        rg_test_fail_(__FILE__, __LINE__, "cuda run", "%s", err.msg);
        return 0;
    }
    st = run_graph(g, RG_DEVICE_CPU, out, cpu, NULL, &err);
    *cpu_ok = st == RG_OK;
    if (st && !is_placeholder(&err)) {
        rg_test_fail_(__FILE__, __LINE__, "cpu run", "%s", err.msg);
        return 0;
    }
    return 1;
}

static void table_line(const char *op, const char *type, const char *shape, int cpu_ok, double maxd, const char *tol,
                       int ok) {
    printf("    %-8s %-5s %-50s vs %-6s max|d| %-10.3g tol %-18s %s\n", op, type, shape, cpu_ok ? "cpu" : "C ref",
           maxd, tol, ok ? "ok" : "FAIL");
}

// One op on the GPU, nothing on the CPU: its n_up leaves uploaded once when the exec was
// made, n_down reads of the output, and no copy inside the run.
static void check_one_node_stats(const rg_exec_stats *s, int n_up, int n_down) {
    RG_CHECK(s->nodes_gpu == 1 && s->nodes_cpu == 0 && s->nodes_fallback == 0, "nodes gpu %d cpu %d fallback %d, expected 1, 0, 0",
             s->nodes_gpu, s->nodes_cpu, s->nodes_fallback);
    RG_CHECK(s->setup_copies == (uint64_t)n_up && s->output_copies == (uint64_t)n_down,
             "uploads at setup %llu (expected %d), output reads %llu (expected %d)", (unsigned long long)s->setup_copies,
             n_up, (unsigned long long)s->output_copies, n_down);
    RG_CHECK(s->copies_scheduled == 0 && s->copies_to_device == 0 && s->copies_to_host == 0,
             "copies inside the run: %d scheduled, %llu to device, %llu to host, expected none", s->copies_scheduled,
             (unsigned long long)s->copies_to_device, (unsigned long long)s->copies_to_host);
}

// ---------------------------------------------------------------------------
// ADD

typedef struct add_case {
    const char *what;
    int64_t a[4], b[4];
    int transposed_a;  // a is the transpose of a leaf shaped [a1, a0, a2, a3]
} add_case;

static void test_cuda_add_parity(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const add_case cases[] = {
        {"same shape", {67, 33, 3, 2}, {67, 33, 3, 2}, 0},
        {"bias over rows", {67, 33, 3, 2}, {67, 1, 1, 1}, 0},
        {"tiled b", {67, 33, 3, 2}, {1, 33, 1, 2}, 0},
        {"b tiled along dim 0", {64, 5, 2, 1}, {16, 5, 1, 1}, 0},
        {"transposed a", {67, 33, 1, 1}, {67, 1, 1, 1}, 1},
        {"1M elements", {1000003, 1, 1, 1}, {1000003, 1, 1, 1}, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const add_case *k = &cases[c];
        const int64_t na = numel(k->a), nb = numel(k->b);
        float *a = randn(na, 10 + c, 1.0f), *b = randn(nb, 20 + c, 1.0f);
        float *gpu = malloc((size_t)na * 4), *cpu = malloc((size_t)na * 4);
        rg_graph *g = rg_graph_new();
        rg_node *la;
        if (k->transposed_a) {
            int64_t ne[4] = {k->a[1], k->a[0], k->a[2], k->a[3]};
            la = rg_transpose(g, rg_leaf(g, "a", RG_TYPE_F32, 4, ne, a));
        } else {
            la = rg_leaf(g, "a", RG_TYPE_F32, 4, k->a, a);
        }
        rg_node *lb = rg_leaf(g, "b", RG_TYPE_F32, 4, k->b, b);
        rg_node *y = rg_add(g, la, lb);
        int cpu_ok = 0;
        rg_exec_stats s = {0};
        if (run_both(g, y, gpu, cpu, &cpu_ok, &s)) {
            if (!cpu_ok) {  // C reference: b tiled over a
                for (int64_t i3 = 0; i3 < k->a[3]; i3++)
                    for (int64_t i2 = 0; i2 < k->a[2]; i2++)
                        for (int64_t i1 = 0; i1 < k->a[1]; i1++)
                            for (int64_t i0 = 0; i0 < k->a[0]; i0++) {
                                int64_t o = ((i3 * k->a[2] + i2) * k->a[1] + i1) * k->a[0] + i0;
                                float av = (float)elem(&la->t, i0, i1, i2, i3);
                                float bv = (float)elem(&lb->t, i0 % k->b[0], i1 % k->b[1], i2 % k->b[2], i3 % k->b[3]);
                                cpu[o] = av + bv;
                            }
            }
            int64_t bad = 0;
            double maxd = 0;
            for (int64_t i = 0; i < na; i++) {
                if (memcmp(&gpu[i], &cpu[i], 4)) bad++;
                double d = fabs((double)gpu[i] - cpu[i]);
                if (d > maxd) maxd = d;
            }
            char shape[96];
            snprintf(shape, sizeof shape, "%s [%lld,%lld,%lld,%lld]+[%lld,%lld,%lld,%lld]", k->what,
                     (long long)k->a[0], (long long)k->a[1], (long long)k->a[2], (long long)k->a[3],
                     (long long)k->b[0], (long long)k->b[1], (long long)k->b[2], (long long)k->b[3]);
            table_line("add", "f32", shape, cpu_ok, maxd, "0 (bits)", bad == 0);
            RG_CHECK(bad == 0, "add %s: %lld of %lld elements differ", k->what, (long long)bad, (long long)na);
            check_one_node_stats(&s, 2, 1);
            RG_CHECK(s.output_bytes == (uint64_t)na * 4, "bytes read back %llu", (unsigned long long)s.output_bytes);
        }
        rg_graph_free(g);
        free(a), free(b), free(gpu), free(cpu);
    }
}

// ---------------------------------------------------------------------------
// MUL_MAT

typedef struct mm_case {
    const char *what;
    int64_t K, M, N, b2, b3, c2, c3;
    int64_t w_pad;     // weight rows are a view with this many extra elements per row
    int64_t x_pad;     // x columns are a view with this many extra floats per column
    int64_t x_gap;     // extra floats between x slices (dims 2)
    int budget_mb;     // RETRO_CUDA_DEQUANT_BUDGET_MB for this case (0: default)
} mm_case;

static void test_cuda_mul_mat_parity(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const mm_case cases[] = {
        {"plain", 129, 67, 33, 1, 1, 1, 1, 0, 0, 0, 0},
        {"one column", 256, 300, 1, 1, 1, 1, 1, 0, 0, 0, 0},
        {"batched", 48, 20, 7, 3, 2, 3, 2, 0, 0, 0, 0},
        {"broadcast r2=3 r3=2", 64, 40, 9, 2, 1, 6, 2, 0, 0, 0, 0},
        {"broadcast, one column", 64, 40, 1, 2, 1, 6, 1, 0, 0, 0, 0},
        {"strided w and x", 70, 31, 12, 2, 1, 4, 1, 5, 7, 3, 0},
        {"sliced widening", 256, 4100, 3, 1, 1, 1, 1, 0, 0, 0, 1},
    };
    static const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16};
    const char *mode_env = getenv("RETRO_CUDA_HALF_GEMM");
    char *saved_mode = mode_env ? strdup(mode_env) : NULL;
    // Half weights run in both modes of RETRO_CUDA_HALF_GEMM (cuda.h): `tensor` (x rounded to
    // the weight's type; compared with the double sum of w times the rounded x, whose only
    // error is the F32 summation's) and `f32` (the weight widened; compared with the CPU).
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t t = 0; t < 5; t++) {
            const mm_case *k = &cases[c];
            const uint32_t wt = types[(t + 1) / 2];
            const bool tensor = t == 1 || t == 3;
            if (wt != RG_TYPE_F32) setenv("RETRO_CUDA_HALF_GEMM", tensor ? "tensor" : "f32", 1);
            const size_t esz = wt == RG_TYPE_F32 ? 4 : 2;
            // The weight leaf: [K + w_pad, M, b2, b3]; x's: [K + x_pad, N, c2] slices plus gaps.
            const int64_t wK = k->K + k->w_pad, xK = k->K + k->x_pad;
            const int64_t nw = wK * k->M * k->b2 * k->b3;
            const int64_t xslice = xK * k->N + k->x_gap, nx = xslice * k->c2 * k->c3;
            const int64_t ny = k->M * k->N * k->c2 * k->c3;
            float *wf = randn(nw, 30 + c, 1.0f), *xf = randn(nx, 40 + c, 1.0f);
            void *w = as_type(wf, nw, wt);
            float *gpu = malloc((size_t)ny * 4), *cpu = malloc((size_t)ny * 4);
            rg_graph *g = rg_graph_new();
            int64_t wne[4] = {wK, k->M, k->b2, k->b3};
            rg_node *lw = rg_leaf(g, "w", wt, 4, wne, w);
            if (k->w_pad) {
                int64_t ne[4] = {k->K, k->M, k->b2, k->b3};
                size_t nb[4] = {esz, wK * esz, wK * esz * k->M, wK * esz * k->M * k->b2};
                lw = rg_view(g, lw, 4, ne, nb, 0);
            }
            int64_t xne[1] = {nx};
            rg_node *lx = rg_leaf(g, "x", RG_TYPE_F32, 1, xne, xf);
            {
                int64_t ne[4] = {k->K, k->N, k->c2, k->c3};
                size_t nb[4] = {4, xK * 4, xslice * 4, xslice * 4 * k->c2};
                lx = rg_view(g, lx, 4, ne, nb, 0);
            }
            rg_node *y = rg_mul_mat(g, lw, lx);
            if (k->budget_mb) {
                char v[16];
                snprintf(v, sizeof v, "%d", k->budget_mb);
                setenv("RETRO_CUDA_DEQUANT_BUDGET_MB", v, 1);
            }
            int cpu_ok = 0;
            rg_exec_stats s = {0};
            int ran = run_both(g, y, gpu, cpu, &cpu_ok, &s);
            if (k->budget_mb) unsetenv("RETRO_CUDA_DEQUANT_BUDGET_MB");
            if (ran) {
                // The reference (double) and the per-element bound sum_k |w x|.
                const int64_t r2 = k->c2 / k->b2, r3 = k->c3 / k->b3;
                double maxd = 0, worst = 0;
                int64_t bad = 0;
                for (int64_t i3 = 0; i3 < k->c3; i3++)
                    for (int64_t i2 = 0; i2 < k->c2; i2++)
                        for (int64_t n = 0; n < k->N; n++)
                            for (int64_t m = 0; m < k->M; m++) {
                                double ref = 0, mag = 0;
                                for (int64_t kk = 0; kk < k->K; kk++) {
                                    double xv = elem(&lx->t, kk, n, i2, i3);
                                    if (tensor) xv = rounded(xv, wt);
                                    double p = elem(&lw->t, kk, m, i2 / r2, i3 / r3) * xv;
                                    ref += p, mag += fabs(p);
                                }
                                const int64_t o = ((i3 * k->c2 + i2) * k->N + n) * k->M + m;
                                if (!cpu_ok || tensor) cpu[o] = (float)ref;
                                const double d = fabs((double)gpu[o] - (tensor ? ref : cpu[o]));
                                if (d > maxd) maxd = d;
                                if (mag > 0 && d / mag > worst) worst = d / mag;
                                if (!(d <= 1e-5 * mag + 1e-30)) bad++;
                            }
                char shape[128], tol[32];
                snprintf(shape, sizeof shape, "%s w[%lld,%lld,%lld,%lld] x[%lld,%lld,%lld,%lld]", k->what,
                         (long long)k->K, (long long)k->M, (long long)k->b2, (long long)k->b3, (long long)k->K,
                         (long long)k->N, (long long)k->c2, (long long)k->c3);
                snprintf(tol, sizeof tol, "1e-5 rel (%.1e)", worst);
                if (tensor) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " tensor path");
                table_line("mul_mat", type_name(wt), shape, cpu_ok && !tensor, maxd, tol, bad == 0);
                RG_CHECK(bad == 0, "mul_mat %s %s: %lld of %lld outputs beyond 1e-5 * sum|w x| (worst %.3g)", k->what,
                         type_name(wt), (long long)bad, (long long)ny, worst);
                check_one_node_stats(&s, 2, 1);
            }
            rg_graph_free(g);
            free(wf), free(xf), free(w), free(gpu), free(cpu);
        }
    if (saved_mode) setenv("RETRO_CUDA_HALF_GEMM", saved_mode, 1);
    else unsetenv("RETRO_CUDA_HALF_GEMM");
    free(saved_mode);
}

// ---------------------------------------------------------------------------
// SOFT_MAX

typedef struct sm_case {
    const char *what;
    int64_t ne[4];
    int64_t mask_rows;  // 0: no mask; else a mask [n_kv, mask_rows] (>= T)
    int causal;
    float scale, softcap;
    int masked_row;     // >= 0: this mask row is all -inf (a fully masked query)
} sm_case;

// The CPU's rule (ops_softmax_loss.c) in plain C.
static void soft_max_ref(const float *a, const float *mask, int64_t mask_ld, float *y, const sm_case *k) {
    const int64_t n_kv = k->ne[0], T = k->ne[1], rows = k->ne[1] * k->ne[2] * k->ne[3];
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = r % T;
        const float *ar = a + r * n_kv;
        float *yr = y + r * n_kv;
        int64_t end = n_kv;
        if (k->causal) {
            int64_t lim = i + (n_kv - T) + 1;
            end = lim < 0 ? 0 : lim < n_kv ? lim : n_kv;
        }
        float mx = -INFINITY;
        for (int64_t j = 0; j < end; j++) {
            float z = k->scale * ar[j];
            if (k->softcap > 0) z = k->softcap * tanhf(z / k->softcap);
            if (mask) z += mask[i * mask_ld + j];
            yr[j] = z;
            if (z > mx) mx = z;
        }
        if (mx == -INFINITY) {
            for (int64_t j = 0; j < n_kv; j++) yr[j] = 0;
            continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < end; j++) {
            yr[j] = expf(yr[j] - mx);
            sum += yr[j];
        }
        for (int64_t j = 0; j < end; j++) yr[j] = (float)(yr[j] * (1.0 / sum));
        for (int64_t j = end; j < n_kv; j++) yr[j] = 0;
    }
}

static void test_cuda_soft_max_parity(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    static const sm_case cases[] = {
        {"plain", {37, 5, 3, 1}, 0, 0, 1.0f, 0.0f, -1},
        {"tall mask", {37, 5, 3, 1}, 8, 0, 0.125f, 0.0f, -1},
        {"causal", {37, 5, 3, 1}, 0, 1, 0.3f, 0.0f, -1},
        {"causal+mask+softcap", {37, 5, 3, 1}, 5, 1, 1.7f, 30.0f, -1},
        {"fully masked row", {16, 16, 2, 1}, 16, 1, 1.0f, 0.0f, 2},
        {"long rows", {4099, 2, 2, 1}, 0, 1, 0.05f, 0.0f, -1},
        {"4-d", {16, 4, 2, 3}, 4, 0, 1.0f, 5.0f, -1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const sm_case *k = &cases[c];
        const int64_t n = numel(k->ne), n_kv = k->ne[0];
        float *a = randn(n, 50 + c, 3.0f);
        float *mask = NULL;
        if (k->mask_rows) {
            mask = randn(n_kv * k->mask_rows, 60 + c, 1.0f);
            for (int64_t i = 0; i < n_kv * k->mask_rows; i += 7) mask[i] = -INFINITY;  // some keys removed
            if (k->masked_row >= 0)
                for (int64_t j = 0; j < n_kv; j++) mask[k->masked_row * n_kv + j] = -INFINITY;
        }
        float *gpu = malloc((size_t)n * 4), *cpu = malloc((size_t)n * 4);
        rg_graph *g = rg_graph_new();
        rg_node *la = rg_leaf(g, "scores", RG_TYPE_F32, 4, k->ne, a);
        rg_node *lm = NULL;
        if (mask) {
            int64_t mne[2] = {n_kv, k->mask_rows};
            lm = rg_leaf(g, "mask", RG_TYPE_F32, 2, mne, mask);
        }
        rg_node *y = rg_soft_max(g, la, lm, k->causal, k->scale, k->softcap);
        int cpu_ok = 0;
        rg_exec_stats s = {0};
        if (run_both(g, y, gpu, cpu, &cpu_ok, &s)) {
            if (!cpu_ok) soft_max_ref(a, mask, n_kv, cpu, k);
            double maxd = 0;
            int64_t bad = 0;
            int zero_row_ok = 1;
            for (int64_t i = 0; i < n; i++) {
                double d = fabs((double)gpu[i] - cpu[i]);
                if (!(d <= 1e-6)) bad++;
                if (d > maxd || d != d) maxd = d;
            }
            if (k->masked_row >= 0)  // the fully masked query gives zeros in every head
                for (int64_t h = 0; h < k->ne[2] * k->ne[3]; h++)
                    for (int64_t j = 0; j < n_kv; j++)
                        if (gpu[(h * k->ne[1] + k->masked_row) * n_kv + j] != 0.0f) zero_row_ok = 0;
            char shape[96];
            snprintf(shape, sizeof shape, "%s [%lld,%lld,%lld,%lld]", k->what, (long long)k->ne[0],
                     (long long)k->ne[1], (long long)k->ne[2], (long long)k->ne[3]);
            table_line("soft_max", "f32", shape, cpu_ok, maxd, "1e-6 abs", bad == 0 && zero_row_ok);
            RG_CHECK(bad == 0, "soft_max %s: %lld of %lld beyond 1e-6 (max %.3g)", k->what, (long long)bad,
                     (long long)n, maxd);
            RG_CHECK(zero_row_ok, "soft_max %s: the fully masked row is not all zeros", k->what);
            check_one_node_stats(&s, mask ? 2 : 1, 1);
        }
        rg_graph_free(g);
        free(a), free(mask), free(gpu), free(cpu);
    }
}

// ---------------------------------------------------------------------------
// A graph that mixes GPU ops with one the GPU does not take (MUL_MAT of a Q8_0
// weight with a transposed x: the CUDA cells take packed activation rows only): the scheduler must run that
// one on the CPU, copy its output to the device once for the next product, and
// count every copy; RETRO_REQUIRE_GPU_RESIDENT refuses the graph.

static void test_cuda_fallback_and_copies(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    // The F16 product compared with the CPU's at 1e-5: the weight widened, not the tensor path.
    setenv("RETRO_CUDA_HALF_GEMM", "f32", 1);
    enum { K = 64, M = 48, N = 5 };
    float *x = randn(K * N, 70, 1.0f), *wf = randn(K * M, 71, 0.2f), *bias = randn(M, 72, 0.5f);
    float *xt = malloc(sizeof(float) * K * N);  // x [K, N] stored as its transpose [N, K]
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) xt[k * N + n] = x[n * K + k];
    float *qf = randn(K * K, 73, 0.2f);
    uint16_t *w = as_type(wf, K * M, RG_TYPE_F16);
    uint8_t *wq = malloc(rg_type_row_size(RG_TYPE_Q8_0, K) * K);
    rg_error qerr = {0};
    RG_REQUIRE(wq && rg_quantize(RG_TYPE_Q8_0, qf, wq, K, K, NULL, "wq", &qerr) == RG_OK, "%s", qerr.msg);
    float gpu[M * N], cpu[M * N];
    rg_graph *g = rg_graph_new();
    int64_t xne[2] = {N, K}, wne[2] = {K, M}, qne[2] = {K, K}, bne[1] = {M};
    rg_node *lx = rg_transpose(g, rg_leaf(g, "xt", RG_TYPE_F32, 2, xne, xt));
    rg_node *lq = rg_leaf(g, "wq", RG_TYPE_Q8_0, 2, qne, wq);
    rg_node *lw = rg_leaf(g, "w", RG_TYPE_F16, 2, wne, w);
    rg_node *lb = rg_leaf(g, "bias", RG_TYPE_F32, 1, bne, bias);
    rg_node *h = rg_mul_mat(g, lq, lx);  // [K, N] on the CPU
    rg_node *mm = rg_mul_mat(g, lw, h);
    rg_node *z = rg_add(g, mm, lb);
    rg_node *p = rg_soft_max(g, z, NULL, false, 0.5f, 0.0f);
    rg_error err = {0};
    rg_exec_stats s = {0};
    rg_status st = run_graph(g, RG_DEVICE_CUDA, p, gpu, &s, &err);
    if (st && is_placeholder(&err)) {
        rg_graph_free(g);
        free(x), free(xt), free(wf), free(bias), free(w), free(qf), free(wq);
        RG_SKIP("the CPU kernel of the fallback op is not written yet: %s", err.msg);
    }
    RG_CHECK(st == RG_OK, "cuda run: %s", err.msg);
    if (st == RG_OK) {
        printf("    mixed graph: gpu nodes %d, cpu nodes %d, to device %llu copies %llu bytes, to host %llu copies %llu "
               "bytes\n",
               s.nodes_gpu, s.nodes_cpu, (unsigned long long)s.copies_to_device, (unsigned long long)s.bytes_to_device,
               (unsigned long long)s.copies_to_host, (unsigned long long)s.bytes_to_host);
        RG_CHECK(s.nodes_gpu == 3, "nodes on the GPU: %d, expected 3 (mul_mat, add, soft_max)", s.nodes_gpu);
        RG_CHECK(s.nodes_cpu == 1 && s.nodes_fallback == 1, "nodes on the CPU: %d (fallbacks %d), expected 1 (mul_mat q8_0)",
                 s.nodes_cpu, s.nodes_fallback);
        // x and wq stay on the CPU (only the q8_0 product reads them); w and bias go up once; h, its
        // output, is the one copy inside the run; the output is read once.
        RG_CHECK(s.copies_scheduled == 1 && s.copies_to_device == 1 && s.bytes_to_device == (uint64_t)K * N * 4,
                 "to device inside the run: %d scheduled, %llu copies %llu bytes, expected 1 of %d bytes", s.copies_scheduled,
                 (unsigned long long)s.copies_to_device, (unsigned long long)s.bytes_to_device, K * N * 4);
        RG_CHECK(s.copies_to_host == 0, "to host inside the run: %llu copies", (unsigned long long)s.copies_to_host);
        RG_CHECK(s.setup_copies == 2 && s.setup_bytes == (uint64_t)K * M * 2 + M * 4, "uploads at setup: %llu (%llu bytes)",
                 (unsigned long long)s.setup_copies, (unsigned long long)s.setup_bytes);
        RG_CHECK(s.output_copies == 1, "output reads: %llu", (unsigned long long)s.output_copies);
        {  // the resident guard names the op and the tensor, before anything runs
            rg_exec *ex = NULL;
            rg_exec_opts o = {.n_threads = 1, .device = RG_DEVICE_CUDA, .require_resident = true};
            rg_error e2 = {0};
            rg_status s2 = rg_exec_create(&ex, g, &o, &e2);
            printf("    resident guard: %s\n", e2.msg);
            RG_CHECK(s2 != RG_OK && ex == NULL && strstr(e2.msg, "mul_mat") && strstr(e2.msg, "q8_0") &&
                         strstr(e2.msg, "CPU"),
                     "require_resident: status %d, '%s'", s2, e2.msg);
            rg_exec_free(ex);
        }
        // Each softmax column sums to 1.
        for (int n = 0; n < N; n++) {
            double sum = 0;
            for (int m = 0; m < M; m++) sum += gpu[n * M + m];
            RG_CHECK(fabs(sum - 1) < 1e-5, "column %d sums to %.9g", n, sum);
        }
        st = run_graph(g, RG_DEVICE_CPU, p, cpu, NULL, &err);
        if (st && is_placeholder(&err)) {
            printf("    mixed graph vs cpu: skipped, %s\n", err.msg);
        } else {
            RG_CHECK(st == RG_OK, "cpu run: %s", err.msg);
            double maxd = 0;
            for (int i = 0; st == RG_OK && i < M * N; i++)
                if (fabs((double)gpu[i] - cpu[i]) > maxd) maxd = fabs((double)gpu[i] - cpu[i]);
            printf("    mixed graph vs cpu: max|d| %.3g (tol 1e-5)\n", maxd);
            RG_CHECK(maxd <= 1e-5, "mixed graph differs from the CPU by %.3g", maxd);
        }
    }
    rg_graph_free(g);
    free(x), free(xt), free(wf), free(bias), free(w), free(qf), free(wq);
    unsetenv("RETRO_CUDA_HALF_GEMM");
}

// ---------------------------------------------------------------------------
// CUDA Graphs (RETRO_CUDA_GRAPHS=1): a graph the device runs whole, its input changed at
// every run, is run node by node once, captured at the second run and replayed after that;
// a changed op parameter (the softmax scale) drops the graph and captures again. Every
// run's output has the same bits as the same run without graphs.

static rg_graph *graphs_case(rg_node **x, rg_node **out, float *w, float *bias) {
    enum { K = 40, M = 24, N = 3 };
    rg_graph *g = rg_graph_new();
    rg_node *lw = rg_leaf(g, "w", RG_TYPE_F32, 2, (int64_t[]){K, M}, w);
    rg_node *lb = rg_leaf(g, "bias", RG_TYPE_F32, 1, (int64_t[]){M}, bias);
    *x = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){K, N}, NULL);  // planned: written through rg_exec_input
    *out = rg_soft_max(g, rg_add(g, rg_mul_mat(g, lw, *x), lb), NULL, false, 0.5f, 0.0f);
    (*out)->flags |= RG_NODE_OUTPUT;
    return g;
}

static void test_cuda_graphs_same_bits(void) {
    if (!have_gpu()) RG_SKIP("no GPU: %s", why);
    enum { K = 40, M = 24, N = 3, RUNS = 7 };
    float *w = randn(K * M, 80, 0.3f), *bias = randn(M, 81, 0.5f);
    float out[2][RUNS][M * N];
    rg_exec_stats st_g = {0};
    for (int graphs = 0; graphs < 2; graphs++) {
        if (graphs) setenv("RETRO_CUDA_GRAPHS", "1", 1);
        rg_node *x, *y;
        rg_graph *g = graphs_case(&x, &y, w, bias);
        rg_exec *ex = NULL;
        rg_exec_opts o = {.n_threads = 1, .device = RG_DEVICE_CUDA};
        rg_error err = {0};
        rg_status st = rg_exec_create(&ex, g, &o, &err);
        if (graphs) unsetenv("RETRO_CUDA_GRAPHS");
        RG_REQUIRE(st == RG_OK, "%s", err.msg);
        for (int r = 0; r < RUNS; r++) {
            float *in = rg_exec_input(ex, x);
            for (int i = 0; i < K * N; i++) in[i] = rg_rng_normal(82, (uint64_t)r, (uint64_t)i);
            if (r == 4) y->fp[0] = 0.8f;  // a new softmax scale: the captured graph no longer applies
            RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK, "run %d: %s", r, err.msg);
            RG_REQUIRE(rg_exec_read(ex, y, out[graphs][r], sizeof out[graphs][r], &err) == RG_OK, "%s", err.msg);
        }
        if (graphs) st_g = rg_exec_get_stats(ex);
        rg_exec_free(ex);
        rg_graph_free(g);
    }
    int bad = 0;
    for (int r = 0; r < RUNS; r++) bad += memcmp(out[0][r], out[1][r], sizeof out[0][r]) != 0;
    printf("    graphs: %llu captures, %llu replays of %d runs; %d runs differ from the runs without graphs\n",
           (unsigned long long)st_g.graph_captures, (unsigned long long)st_g.graph_launches, RUNS, bad);
    RG_CHECK(bad == 0, "%d of %d runs differ with RETRO_CUDA_GRAPHS=1", bad, RUNS);
    // runs 0 and 4 node by node; captured at 1 and 5; replayed at 1-3 and 5-6
    RG_CHECK(st_g.graph_captures == 2 && st_g.graph_launches == 5, "captures %llu (expected 2), replays %llu (expected 5)",
             (unsigned long long)st_g.graph_captures, (unsigned long long)st_g.graph_launches);
    RG_CHECK(memcmp(out[1][0], out[1][1], sizeof out[1][0]) != 0, "the input did not change the output");
    free(w), free(bias);
}

// ---------------------------------------------------------------------------
// Host-side checks: run with or without a GPU.

// Which nodes the scheduler would send to the GPU, decided from types and
// strides alone (no device needed; a build without CUDA says no to all).
static void test_cuda_support_table(void) {
    static float f[4096], out[4096];
    static uint16_t h[4096];
    static uint8_t q[4096];
    rg_graph *g = rg_graph_new();
    int64_t ne_w[2] = {64, 8}, ne_x[2] = {64, 4}, ne_xt[2] = {4, 64}, ne_b[1] = {8}, ne_s[3] = {16, 4, 2};
    rg_node *w32 = rg_leaf(g, "w32", RG_TYPE_F32, 2, ne_w, f);
    rg_node *w16 = rg_leaf(g, "w16", RG_TYPE_F16, 2, ne_w, h);
    rg_node *wbf = rg_leaf(g, "wbf", RG_TYPE_BF16, 2, ne_w, h);
    rg_node *wq8 = rg_leaf(g, "wq8", RG_TYPE_Q8_0, 2, ne_w, q);
    rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, ne_x, f);
    rg_node *xt = rg_transpose(g, rg_leaf(g, "xt", RG_TYPE_F32, 2, ne_xt, f));
    rg_node *b = rg_leaf(g, "b", RG_TYPE_F32, 1, ne_b, f);
    rg_node *sc = rg_leaf(g, "scores", RG_TYPE_F32, 3, ne_s, f);
    struct {
        const char *what;
        rg_node *n;
        bool gpu;
    } rows[] = {
        {"mul_mat f32", rg_mul_mat(g, w32, x), true},
        {"mul_mat f16", rg_mul_mat(g, w16, x), true},
        {"mul_mat bf16", rg_mul_mat(g, wbf, x), true},
        {"mul_mat q8_0", rg_mul_mat(g, wq8, x), true},
        {"mul_mat q8_0, transposed x", rg_mul_mat(g, wq8, xt), false},
        {"mul_mat transposed x", rg_mul_mat(g, w32, xt), false},
        {"add", rg_add(g, rg_mul_mat(g, w32, x), b), true},
        {"sub", rg_sub(g, rg_mul_mat(g, w32, x), b), true},
        {"soft_max", rg_soft_max(g, sc, NULL, true, 0.5f, 0.0f), true},
        {"rms_norm", rg_rms_norm(g, x, 1e-5f), true},
    };
    rg_error err = {0};
    RG_REQUIRE(rg_graph_error(g, &err) == RG_OK, "%s", err.msg);
    const int compiled = rg_cuda_compiled();
    (void)out;
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        rg_node *n = rows[i].n;
        bool want = compiled && rows[i].gpu;
        bool got = rg_op_cell_runs(RG_BACKEND_CUDA, n);  // types, shapes and strides: no bytes needed
        printf("    %-22s %s\n", rows[i].what, got ? "gpu" : "cpu");
        RG_CHECK(got == want, "%s: the CUDA cell says %d, expected %d", rows[i].what, got, want);
    }
    RG_CHECK(!rg_op_cell_runs(RG_BACKEND_CUDA, NULL), "a NULL node is not supported");
    const char *mm = rg_op_cell(RG_BACKEND_CUDA, RG_OP_MUL_MAT).types;
    if (compiled) {
        // the float types, then the quantized types the device decodes (test_cuda_quant_mm)
        RG_CHECK(mm && !strncmp(mm, "f32, f16, bf16, ", 16) && strstr(mm, ", q8_0"), "mul_mat types %s", mm ? mm : "(null)");
        RG_CHECK(rg_op_cell(RG_BACKEND_CUDA, RG_OP_ADD).types && rg_op_cell(RG_BACKEND_CUDA, RG_OP_SOFT_MAX).types,
                 "add and soft_max list types");
    }
    rg_graph_free(g);
}

// Without a device, asking the executor for CUDA fails with the reason; with
// one (a GPU, or the host execution under RETRO_CUDA_HOST=1) the same request
// succeeds and the graph's one ADD runs there.
static void test_cuda_exec_refuses_without_gpu(void) {
    static float a[8];
    rg_graph *g = rg_graph_new();
    int64_t ne[1] = {8};
    rg_node *y = rg_add(g, rg_leaf(g, "a", RG_TYPE_F32, 1, ne, a), rg_leaf(g, "b", RG_TYPE_F32, 1, ne, a));
    y->flags |= RG_NODE_OUTPUT;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1, .device = RG_DEVICE_CUDA};
    rg_error err = {0};
    rg_status st = rg_exec_create(&ex, g, &o, &err);
    if (have_gpu()) {
        RG_CHECK(st == RG_OK && ex != NULL, "exec with CUDA and a device: %s", err.msg);
        if (st == RG_OK) {
            st = rg_exec_run(ex, 0, -1, &err);
            RG_CHECK(st == RG_OK && rg_exec_get_stats(ex).nodes_gpu == 1, "the ADD did not run on the device: %s",
                     err.msg);
            printf("    a device is present: the ADD ran there\n");
        }
    } else {
        printf("    refusal: %s\n", err.msg);
        RG_CHECK(st != RG_OK && ex == NULL, "exec with CUDA and no GPU returned %d", st);
        RG_CHECK(err.msg[0] != 0, "the refusal has no message");
    }
    rg_exec_free(ex);
    rg_graph_free(g);
}

static const rg_test_case cases[] = {
    RG_TEST(test_cuda_device_is_detected),
    RG_TEST(test_cuda_add_matches_cpu),
    RG_TEST(test_cuda_support_table),
    RG_TEST(test_cuda_exec_refuses_without_gpu),
    RG_TEST(test_cuda_add_parity),
    RG_TEST(test_cuda_mul_mat_parity),
    RG_TEST(test_cuda_soft_max_parity),
    RG_TEST(test_cuda_fallback_and_copies),
    RG_TEST(test_cuda_graphs_same_bits),
    {0},
};

int main(int argc, char **argv) {
    printf("cuda compiled: %s\n", rg_cuda_compiled() ? "yes" : "no");
    return rg_test_run(argc, argv, cases);
}
