// ops_perf.h - test_ops' perf mode, `test_ops perf [FILTER]` (as ggml's test-backend-ops
// has one): every op x type x shape row of the table (the rows the other modes walk; FILTER
// picks ops whose name contains it, any case) timed on each backend there is: the CPU, and
// the CUDA device when one is usable. Under RETRO_CUDA_HOST=1 that device is the host
// execution of the CUDA code: its lines are CPU timings, never GPU results, and each says so.
//
// One line per row and backend, '|'-separated so scripts can sort them (scripts/gpu-check.sh):
//   backend | op | case | output shape | time per run (median) x runs | GB/s | % of peak | GFLOP/s | % of peak
// The node alone is timed (the whole graph runs once first to make its sources), the median
// of several runs after a warm-up, the run count sized to about RG_PERF_TARGET_MS (default
// 20, 5 with RG_TEST_QUICK=1) per row so the whole table stays within minutes. Bytes and
// FLOPs come from ops_perf_cost.h. The peaks: on the CPU the measured FMA rate (clock x FP32
// FLOP per cycle, bench/bench_util.h) and plain read rate (bench/bench_memrate.h) on the same
// threads; on a GPU the device's properties (SMs x clock x FP32 lanes x 2; memory clock x bus
// width x 2), which the host execution fakes (labelled). Shares are of the FP32 peak: a
// tensor-core product may pass 100%.
//
// Not a test of speed: a row passes when it ran, fails when it errs; a backend without a
// kernel for a row is skipped. Ends with "N passed, N failed, N skipped". Only with `perf`:
// timings never run in the default (timed) suite. Included by test_ops.c, whose tcase,
// for_each_case, build_case and restore_inputs it uses.
#ifndef RG_TESTS_OPS_PERF_H
#define RG_TESTS_OPS_PERF_H

#include <ctype.h>

#include "../bench/bench_memrate.h"
#include "ops_perf_cost.h"

#define PERF_MAX_RUNS 1000

typedef struct perf_peak {
    double gflops, gbs;  // 0: unknown
    char what[640];      // how they were found, printed in the header
} perf_peak;

typedef struct perf_ctx {
    const char *filter;  // lower case, or NULL
    int threads;         // the CPU's exec threads (every core)
    bool cuda, cuda_host;
    perf_peak cpu, gpu;
    double target_s;     // timed seconds per row and backend, about
    int passed, failed, skipped;
} perf_ctx;

static void perf_cpu_peak(perf_peak *p, int threads) {
    const double mhz = bench_measured_mhz();
    const int fpc = bench_fma_flop_per_cycle(mhz);
    p->gflops = (double)fpc * mhz * 1e-3 * threads;
    p->gbs = plain_read_gbs(threads);
    snprintf(p->what, sizeof p->what,
             "cpu: %.1f GFLOP/s = %d threads x %.0f MHz (measured) x %d FP32 FLOP/cycle (measured FMA width); "
             "%.1f GB/s (a plain read of 512 MiB on %d threads)",
             p->gflops, threads, mhz, fpc, p->gbs, threads);
}

// FP32 lanes (FMAs per clock) of one SM, by compute capability (CUDA C++ Programming Guide,
// arithmetic instruction throughput): 64 on sm_60, sm_7x and sm_80; 128 on the others we know.
static int perf_fp32_lanes(int major, int minor) {
    if ((major == 6 && minor == 0) || major == 7 || (major == 8 && minor == 0)) return 64;
    return 128;
}

static void perf_gpu_peak(perf_peak *p, bool host) {
    rg_cuda_device_info info;
    rg_error err = {0};
    if (rg_cuda_device_get(0, &info, &err)) {
        snprintf(p->what, sizeof p->what, "cuda: no peaks (%.300s)", err.msg);
        return;
    }
    const int lanes = perf_fp32_lanes(info.major, info.minor);
    p->gflops = (double)info.multiprocessors * info.clock_khz * 1e3 * lanes * 2 * 1e-9;
    p->gbs = (double)info.mem_clock_khz * 1e3 * (info.mem_bus_bits / 8.0) * 2 * 1e-9;
    snprintf(p->what, sizeof p->what,
             "cuda: %.160s (sm_%d%d): %.1f GFLOP/s = %d SMs x %.0f MHz x %d FP32 lanes x 2; %.1f GB/s = %.0f MHz x %d "
             "bits x 2%s",
             info.name, info.major, info.minor, p->gflops, info.multiprocessors, info.clock_khz * 1e-3, lanes, p->gbs,
             info.mem_clock_khz * 1e-3, info.mem_bus_bits,
             host ? " (FAKE: the host execution's made-up properties; its shares mean nothing)" : "");
}

static bool perf_wanted(const perf_ctx *p, rg_op op) {
    if (!p->filter) return true;
    char name[64];
    size_t i = 0;
    for (const char *s = rg_op_name(op); *s && i + 1 < sizeof name; s++) name[i++] = (char)tolower((unsigned char)*s);
    name[i] = 0;
    return strstr(name, p->filter) != NULL;
}

static int perf_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// The median seconds of node `i` run alone: the whole graph once (the node's sources), one
// run of the node to warm it and size the count, then the timed runs (at least 3 unless one
// run takes 5 targets: the host execution's slowest rows).
static rg_status perf_time_node(rg_exec *ex, int i, double target_s, double *median, int *runs, rg_error *err) {
    static double t[PERF_MAX_RUNS];
    rg_status st = rg_exec_run(ex, 0, -1, err);
    double t0 = bench_now();
    if (!st) st = rg_exec_run(ex, i, i + 1, err);
    const double once = bench_now() - t0;
    int n = once > 0 ? (int)(target_s / once) : PERF_MAX_RUNS;
    if (n > PERF_MAX_RUNS) n = PERF_MAX_RUNS;
    if (n < 3) n = once > 5 * target_s ? 1 : 3;  // one run only when it is far over (a stall can double one)
    for (int r = 0; r < n && !st; r++) {
        t0 = bench_now();
        st = rg_exec_run(ex, i, i + 1, err);
        t[r] = bench_now() - t0;
    }
    if (st) return st;
    qsort(t, (size_t)n, sizeof t[0], perf_cmp);
    *median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    *runs = n;
    return RG_OK;
}

// "   1.23 GB/s |  4.5%" (or "-" where there is no count or no peak).
static void perf_rate(char *buf, size_t cap, double amount, double s, double peak, const char *unit) {
    if (!(amount > 0) || !(s > 0)) {  // no count, or nothing done (a fused CE with every label ignored)
        snprintf(buf, cap, "%10s %-7s | %6s", "-", unit, "-");
        return;
    }
    const double rate = amount / s * 1e-9;  // three significant digits: a launch-bound GPU row is 1e-5 of the peak
    if (peak > 0) snprintf(buf, cap, "%10.4g %-7s | %5.3g%%", rate, unit, 100 * rate / peak);
    else snprintf(buf, cap, "%10.4g %-7s | %6s", rate, unit, "-");
}

// One line: `node` (the row's op, in g) timed on `dev`; it moved `bytes` and made `flops` (< 0: no count).
static void perf_backend(perf_ctx *p, const char *op, const tcase *c, rg_graph *g, rg_node *node, rg_device dev,
                         double bytes, double flops) {
    const bool cuda = dev == RG_DEVICE_CUDA;
    const char *be = cuda ? (p->cuda_host ? "cuda-host" : "cuda") : "cpu";
    char shape[48];
    rg_tensor_shape_str(&node->t, shape, sizeof shape);
    if (cuda && !rg_op_cell_runs(RG_BACKEND_CUDA, node)) {
        printf("  %-9s | %-24s | %-30s | %-18s | skipped: no CUDA kernel for this row\n", be, op, c->label, shape);
        p->skipped++;
        return;
    }
    restore_inputs(c);
    rg_error err = {0};
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = cuda ? 1 : p->threads, .device = dev};
    double s = 0;
    int runs = 0;
    rg_status st = rg_exec_create(&ex, g, &o, &err);
    if (!st) st = perf_time_node(ex, node->id, p->target_s, &s, &runs, &err);
    const bool fell_back = cuda && !st && node->backend == RG_BACKEND_CPU;
    rg_exec_free(ex);
    if (st) {
        printf("  %-9s | %-24s | %-30s | %-18s | FAIL: %s\n", be, op, c->label, shape, err.msg);
        p->failed++;
        return;
    }
    const perf_peak *pk = cuda ? &p->gpu : &p->cpu;
    char gbs[64], gfl[64];
    perf_rate(gbs, sizeof gbs, bytes, s, pk->gbs, "GB/s");
    perf_rate(gfl, sizeof gfl, flops, s, pk->gflops, "GFLOP/s");
    printf("  %-9s | %-24s | %-30s | %-18s | %12.3f us x %-4d | %s | %s%s%s\n", be, op, c->label, shape, s * 1e6, runs,
           gbs, gfl, fell_back ? " | FELL BACK: the node ran on the CPU" : "",
           cuda && p->cuda_host ? " | host execution: a CPU timing, not a GPU result" : "");
    p->passed++;
}

static void perf_case(rg_op op, const op_entry *e, tcase *c, void *arg) {
    perf_ctx *p = arg;
    const char *name = rg_op_name(op);
    rg_error err = {0};
    rg_graph *g = rg_graph_new();
    rg_node *leaf[MAX_IN], *out[MAX_OUT];
    const int n_out = build_case(g, e, c, false, leaf, out);
    rg_node *node = NULL;  // the row's op: the last node of that op (views of a packed output follow it)
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == op) node = g->nodes[i];
    if (rg_graph_error(g, &err) || !out[0] || !node) {
        printf("  %-9s | %-24s | %-30s | FAIL: %s\n", "cpu", name, c->label,
               err.msg[0] ? err.msg : "the builder made no node of this op");
        p->failed++;
        rg_graph_free(g);
        return;
    }
    for (int k = 0; k < n_out; k++) out[k]->flags |= RG_NODE_OUTPUT;
    restore_inputs(c);
    const double bytes = perf_node_bytes(node), flops = perf_node_flops(node);  // before an exec rebinds leaves
    perf_backend(p, name, c, g, node, RG_DEVICE_CPU, bytes, flops);
    if (p->cuda) perf_backend(p, name, c, g, node, RG_DEVICE_CUDA, bytes, flops);
    rg_graph_free(g);
}

// The cost model on shapes worked by hand (part of the default suite: no timing): the visible
// pairs of each mask, a product's FLOPs and bytes, a copy without a FLOP count, and the fused
// CE counting its labelled tokens only.
static void test_perf_costs(void) {
    RG_CHECK(perf_attn_pairs(4, 4, false, 0) == 16, "non-causal 4x4: %g pairs", perf_attn_pairs(4, 4, false, 0));
    RG_CHECK(perf_attn_pairs(4, 4, true, 0) == 10, "causal 4x4: %g pairs", perf_attn_pairs(4, 4, true, 0));
    RG_CHECK(perf_attn_pairs(4, 4, true, 2) == 7, "causal window 2: %g pairs (1 + 2 + 2 + 2)",
             perf_attn_pairs(4, 4, true, 2));
    RG_CHECK(perf_attn_pairs(2, 5, true, 0) == 9, "2 queries after a 3-key prefix: %g pairs (4 + 5)",
             perf_attn_pairs(2, 5, true, 0));
    rg_graph *g = rg_graph_new();
    const int64_t ne_w[2] = {8, 4}, ne_x[2] = {8, 3}, ne_l[1] = {5};
    const int32_t labels[5] = {1, -100, 2, -100, 3};
    rg_node *w = rg_leaf(g, "w", RG_TYPE_F32, 2, ne_w, NULL), *x = rg_leaf(g, "x", RG_TYPE_F32, 2, ne_x, NULL);
    rg_node *y = rg_mul_mat(g, w, x), *c = rg_cpy(g, x, RG_TYPE_F16);
    const int64_t ne_h[2] = {8, 5};
    rg_node *h = rg_leaf(g, "h", RG_TYPE_F32, 2, ne_h, NULL);
    rg_node *l = rg_leaf(g, "labels", RG_TYPE_I32, 1, ne_l, (void *)labels);
    rg_node *ce = rg_linear_ce(g, w, h, l, -100, 0);
    rg_error err = {0};
    RG_REQUIRE(!rg_graph_error(g, &err), "%s", err.msg);
    RG_CHECK(perf_node_flops(y) == 2 * 8 * 4 * 3, "MUL_MAT [8,4] x [8,3]: %g FLOPs, not 2 K M N = 192",
             perf_node_flops(y));
    RG_CHECK(perf_node_bytes(y) == 4 * (32 + 24 + 12), "MUL_MAT: %g bytes, not w + x + y = 272", perf_node_bytes(y));
    RG_CHECK(perf_node_flops(c) < 0 && perf_node_bytes(c) == 4 * 24 + 2 * 24, "CPY: %g FLOPs (none), %g bytes (144)",
             perf_node_flops(c), perf_node_bytes(c));
    RG_CHECK(perf_node_flops(ce) == 3 * (2.0 * 8 * 4 + 4.0 * 4), "LINEAR_CE with 3 of 5 tokens labelled: %g FLOPs",
             perf_node_flops(ce));
    rg_graph_free(g);
}

// `test_ops perf [FILTER]`: returns the exit status (1 when a row failed).
static int perf_main(const char *filter) {
    perf_ctx p = {.threads = rg_cpu_count(), .target_s = quick() ? 5e-3 : 20e-3};
    const char *ms = getenv("RG_PERF_TARGET_MS");
    if (ms && atof(ms) > 0) p.target_s = atof(ms) * 1e-3;
    char low[64] = "";
    for (size_t i = 0; filter && filter[i] && i + 1 < sizeof low; i++) low[i] = (char)tolower((unsigned char)filter[i]);
    p.filter = low[0] ? low : NULL;
    char why[256] = "";
    p.cuda = rg_cuda_device_count(why, sizeof why) > 0;
    const char *host = getenv("RETRO_CUDA_HOST");
    p.cuda_host = p.cuda && host && !strcmp(host, "1");
    const double t_start = bench_now();
    perf_cpu_peak(&p.cpu, p.threads);
    printf("perf: every op x type x shape row%s%s; the median of runs of about %.0f ms in all per row and backend\n",
           p.filter ? " of ops matching " : "", p.filter ? p.filter : "", p.target_s * 1e3);
    printf("peak %s\n", p.cpu.what);
    if (p.cuda) perf_gpu_peak(&p.gpu, p.cuda_host);
    else snprintf(p.gpu.what, sizeof p.gpu.what, "cuda: not timed: %s", why);
    printf("peak %s\n", p.gpu.what);
    if (p.cuda_host)
        printf("RETRO_CUDA_HOST=1: the cuda-host rows are the host execution of the CUDA code on this CPU: CPU "
               "timings, never GPU results\n");
    printf("(the rows are the parity shapes, small enough to stay in the caches: a GB/s share over 100%% means the "
           "bytes came from a cache, not from memory)\n");
    printf("  %-9s | %-24s | %-30s | %-18s | %22s | %18s | %6s | %18s | %6s\n", "backend", "op", "case", "output",
           "median time x runs", "bytes rate", "peak", "FLOP rate", "peak");
    for (int op = RG_OP_NONE + 1; op < RG_OP_COUNT; op++) {
        if (rg_op_defs[op].is_view || !perf_wanted(&p, (rg_op)op)) continue;  // views: no kernel to time
        const op_entry *e = &entries[op];
        for_each_case((rg_op)op, e->types == T_WEIGHTS && quick() ? T_WEIGHTS_QUICK : e->types, perf_case, &p);
    }
    printf("perf: %d lines timed in %.1f s%s\n", p.passed, bench_now() - t_start,
           p.cuda_host ? " (the cuda-host lines: CPU timings of the host execution, not GPU results)" : "");
    printf("%d passed, %d failed, %d skipped\n", p.passed, p.failed, p.skipped);
    return p.failed ? 1 : 0;
}

#endif
