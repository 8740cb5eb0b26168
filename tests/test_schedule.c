// test_schedule.c - the scheduling pass and the executor's device side (graph/schedule.h,
// graph/exec.c), on every machine: a stand-in device backend runs the CPU kernels of a
// few ops on memory of its own, a mapping that is PROT_NONE except inside its own calls
// (kernels, copies). A node bound to the wrong side, a copy the schedule forgot, or host
// code touching "device" bytes crashes or fails a check here as it would on a GPU.
//
//   - a graph the device runs whole: the CPU's bits, leaves uploaded once, no copy inside
//     the run, outputs read with rg_exec_read;
//   - a fallback (an op the device lacks): the exact copies, counted; the resident guard
//     (require_resident, RETRO_REQUIRE_GPU_RESIDENT=1) refuses it naming the op;
//   - in-place writers across backends (CPY_INTO on the CPU into a device-homed cache read
//     by a device node): copy there, write back;
//   - INPUT leaves on the device through rg_exec_input, two runs with different inputs;
//   - an optimizer step on the device and rg_exec_download_leaves;
//   - device copies shared by execs (rg_resident): uploaded once, synchronized back on request;
//   - a run that does not fit the device's memory is refused with the numbers;
//   - a NaN on the device is named.
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/error.h"
#include "base/rng.h"
#include "graph/backend.h"
#include "graph/exec.h"
#include "graph/ops.h"
#include "graph/schedule.h"
#include "rg_test.h"

// ---------------------------------------------------------------------------
// The stand-in device

enum { DEV_BYTES = 64 << 20 };
static unsigned char *dev_base;
static size_t dev_used;
static size_t dev_free_report = DEV_BYTES;  // what mem_info says is free
static int dev_kernels, dev_uploads, dev_downloads;
static bool dev_has_op[RG_OP_COUNT];
static int dev_bad_pointer;  // a device kernel saw a pointer outside device memory

static void dev_open(void) { mprotect(dev_base, DEV_BYTES, PROT_READ | PROT_WRITE); }
static void dev_close(void) { mprotect(dev_base, DEV_BYTES, PROT_NONE); }
static bool on_dev(const void *p) { return (const unsigned char *)p >= dev_base && (const unsigned char *)p < dev_base + DEV_BYTES; }

static rg_status dev_run(rg_exec_ctx *ctx, rg_node *n, rg_error *err) {
    if (!on_dev(n->t.data)) dev_bad_pointer++;
    rg_node *r[RG_MAX_SRC + 2];
    const int k = rg_node_reads(n, r);
    for (int q = 0; q < k; q++)
        if (!on_dev(r[q]->t.data)) dev_bad_pointer++;
    rg_exec_ctx c = *ctx;
    c.backend = NULL;
    c.pool = NULL;
    dev_open();
    rg_status st = rg_op_cell(RG_BACKEND_CPU, n->op).run(&c, n, err);
    dev_close();
    dev_kernels++;
    return st;
}

static rg_op_col dev_cell(int op) {
    rg_op_col c = rg_op_cell(RG_BACKEND_CPU, op);
    if (!dev_has_op[op] || !c.run) return (rg_op_col){0};
    c.run = dev_run;
    c.work = NULL;  // scratch-free ops only in this stand-in
    c.types = "f32";
    return c;
}

static rg_status dev_alloc(rg_backend *b, size_t bytes, void **out, rg_error *err) {
    (void)b;
    bytes = (bytes + 63) / 64 * 64;
    if (dev_used + bytes > DEV_BYTES) return rg_fail(err, RG_ERR_NOMEM, "stand-in device: out of memory");
    *out = dev_base + dev_used;
    dev_used += bytes;
    return RG_OK;
}
static void dev_release(rg_backend *b, void *p) { (void)b, (void)p; }
static rg_status dev_upload(rg_backend *b, void *dst, const void *src, size_t bytes, rg_error *err) {
    (void)b, (void)err;
    if (!on_dev(dst) || on_dev(src)) dev_bad_pointer++;
    dev_open();
    memcpy(dst, src, bytes);
    dev_close();
    dev_uploads++;
    return RG_OK;
}
static rg_status dev_download(rg_backend *b, void *dst, const void *src, size_t bytes, rg_error *err) {
    (void)b, (void)err;
    if (on_dev(dst) || !on_dev(src)) dev_bad_pointer++;
    dev_open();
    memcpy(dst, src, bytes);
    dev_close();
    dev_downloads++;
    return RG_OK;
}
static rg_status dev_zero(rg_backend *b, void *dst, size_t bytes, rg_error *err) {
    (void)b, (void)err;
    dev_open();
    memset(dst, 0, bytes);
    dev_close();
    return RG_OK;
}
static rg_status dev_sync(rg_backend *b, rg_error *err) { return (void)b, (void)err, RG_OK; }
static rg_status dev_mem_info(rg_backend *b, size_t *fr, size_t *tot, rg_error *err) {
    (void)b, (void)err;
    *fr = dev_free_report, *tot = DEV_BYTES;
    return RG_OK;
}
static void dev_destroy(rg_backend *b) { (void)b; }

static const rg_backend_vt dev_vt = {.id = RG_BACKEND_CUDA,  .cell = dev_cell,    .alloc = dev_alloc,
                                     .release = dev_release, .upload = dev_upload, .download = dev_download,
                                     .zero = dev_zero,       .sync = dev_sync,     .mem_info = dev_mem_info,
                                     .destroy = dev_destroy};
static rg_backend dev_backend = {&dev_vt, NULL, false, "stand-in device"};

// A fresh device with these ops (RG_OP_NONE ends the list).
static void dev_reset(const rg_op *ops) {
    if (!dev_base) {
        dev_base = mmap(NULL, DEV_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (dev_base == MAP_FAILED) abort();
    }
    dev_used = 0, dev_kernels = dev_uploads = dev_downloads = dev_bad_pointer = 0;
    dev_free_report = DEV_BYTES;
    memset(dev_has_op, 0, sizeof dev_has_op);
    for (; *ops != RG_OP_NONE; ops++) dev_has_op[*ops] = true;
}

// ---------------------------------------------------------------------------
// Helpers

static float *randn(int64_t n, uint64_t stream) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = rg_rng_normal(11, stream, (uint64_t)i);
    return p;
}

// Runs g on the CPU alone or on the stand-in device, reads `out` into y.
static rg_status run(rg_graph *g, bool device, rg_node *out, float *y, rg_exec_stats *stats, rg_error *err) {
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1, .backend = device ? &dev_backend : NULL};
    rg_status st = rg_exec_create(&ex, g, &o, err);
    if (!st) st = rg_exec_run(ex, 0, -1, err);
    if (!st) st = rg_exec_read(ex, out, y, (size_t)rg_tensor_nelements(&out->t) * 4, err);
    if (stats) *stats = rg_exec_get_stats(ex);
    rg_exec_free(ex);
    return st;
}

// [M, N] = softmax(w x + b), with rms_norm(x) first when `norm`.
typedef struct mlp {
    rg_graph *g;
    rg_node *x, *w, *b, *out;
    float *xv, *wv, *bv;
} mlp;
enum { K = 24, M = 16, N = 3 };

static mlp mlp_make(bool norm) {
    mlp m = {rg_graph_new(), NULL, NULL, NULL, NULL, randn(K * N, 1), randn(K * M, 2), randn(M, 3)};
    m.x = rg_leaf(m.g, "x", RG_TYPE_F32, 2, (int64_t[]){K, N}, m.xv);
    m.w = rg_leaf(m.g, "w", RG_TYPE_F32, 2, (int64_t[]){K, M}, m.wv);
    m.b = rg_leaf(m.g, "b", RG_TYPE_F32, 1, (int64_t[]){M}, m.bv);
    rg_node *h = norm ? rg_rms_norm(m.g, m.x, 1e-5f) : m.x;
    m.out = rg_soft_max(m.g, rg_add(m.g, rg_mul_mat(m.g, m.w, h), m.b), NULL, false, 0.7f, 0.0f);
    rg_node_set_name(m.out, "probs");
    m.out->flags |= RG_NODE_OUTPUT;
    return m;
}
static void mlp_free(mlp *m) {
    rg_graph_free(m->g);
    free(m->xv), free(m->wv), free(m->bv);
}

static const rg_op mlp_ops[] = {RG_OP_MUL_MAT, RG_OP_ADD, RG_OP_SOFT_MAX, RG_OP_NONE};

// ---------------------------------------------------------------------------

static void test_device_runs_whole_graph(void) {
    dev_reset(mlp_ops);
    mlp m = mlp_make(false);
    float cpu[M * N], dev[M * N];
    rg_error err = {0};
    rg_exec_stats s;
    RG_REQUIRE(run(m.g, false, m.out, cpu, NULL, &err) == RG_OK, "cpu: %s", err.msg);
    RG_REQUIRE(run(m.g, true, m.out, dev, &s, &err) == RG_OK, "device: %s", err.msg);
    RG_CHECK(memcmp(cpu, dev, sizeof cpu) == 0, "the device's bits differ from the CPU's (same kernels)");
    RG_CHECK(dev_bad_pointer == 0, "%d device accesses outside device memory", dev_bad_pointer);
    RG_CHECK(s.nodes_gpu == 3 && s.nodes_cpu == 0 && s.nodes_fallback == 0, "nodes: device %d cpu %d fallback %d",
             s.nodes_gpu, s.nodes_cpu, s.nodes_fallback);
    RG_CHECK(s.copies_scheduled == 0 && s.copies_to_device == 0 && s.copies_to_host == 0, "copies inside the run: %d",
             s.copies_scheduled);
    RG_CHECK(s.setup_copies == 3 && s.setup_bytes == (K * N + K * M + M) * 4, "setup uploads %llu (%llu bytes)",
             (unsigned long long)s.setup_copies, (unsigned long long)s.setup_bytes);
    RG_CHECK(s.output_copies == 1, "output reads %llu", (unsigned long long)s.output_copies);
    // The leaves have their host bytes back after the exec, and run on the CPU again.
    RG_CHECK(m.x->t.data == m.xv && m.w->t.data == m.wv, "leaves not restored to the caller's bytes");
    RG_CHECK(run(m.g, false, m.out, dev, NULL, &err) == RG_OK && !memcmp(cpu, dev, sizeof cpu), "cpu again: %s", err.msg);
    mlp_free(&m);
}

static void test_fallback_copies_and_resident_guard(void) {
    dev_reset(mlp_ops);
    mlp m = mlp_make(true);  // rms_norm has no device kernel
    float cpu[M * N], dev[M * N];
    rg_error err = {0};
    rg_exec_stats s;
    RG_REQUIRE(run(m.g, false, m.out, cpu, NULL, &err) == RG_OK, "cpu: %s", err.msg);
    RG_REQUIRE(run(m.g, true, m.out, dev, &s, &err) == RG_OK, "device: %s", err.msg);
    RG_CHECK(memcmp(cpu, dev, sizeof cpu) == 0, "the mixed run's bits differ from the CPU's");
    RG_CHECK(dev_bad_pointer == 0, "%d device accesses outside device memory", dev_bad_pointer);
    printf("    mixed: device %d, cpu %d, fallback %d, copies %d (%llu bytes up), setup %llu\n", s.nodes_gpu, s.nodes_cpu,
           s.nodes_fallback, s.copies_scheduled, (unsigned long long)s.bytes_to_device,
           (unsigned long long)s.setup_copies);
    RG_CHECK(s.nodes_gpu == 3 && s.nodes_cpu == 1 && s.nodes_fallback == 1, "nodes: device %d cpu %d fallback %d",
             s.nodes_gpu, s.nodes_cpu, s.nodes_fallback);
    // x stays on the CPU (only rms_norm reads it); rms_norm's output goes up once.
    RG_CHECK(s.copies_scheduled == 1 && s.copies_to_device == 1 && s.bytes_to_device == K * N * 4 && s.copies_to_host == 0,
             "copies: %d scheduled, %llu up (%llu bytes), %llu down", s.copies_scheduled,
             (unsigned long long)s.copies_to_device, (unsigned long long)s.bytes_to_device,
             (unsigned long long)s.copies_to_host);
    RG_CHECK(s.setup_copies == 2, "setup uploads %llu, expected 2 (w, b)", (unsigned long long)s.setup_copies);

    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1, .backend = &dev_backend, .require_resident = true};
    rg_status st = rg_exec_create(&ex, m.g, &o, &err);
    printf("    guard: %s\n", err.msg);
    RG_CHECK(st == RG_ERR_UNSUPPORTED && !ex && strstr(err.msg, "rms_norm") && strstr(err.msg, "would run on the CPU"),
             "require_resident: %d '%s'", st, err.msg);
    // The environment variable does the same for every exec.
    setenv("RETRO_REQUIRE_GPU_RESIDENT", "1", 1);
    o.require_resident = false;
    st = rg_exec_create(&ex, m.g, &o, &err);
    unsetenv("RETRO_REQUIRE_GPU_RESIDENT");
    RG_CHECK(st == RG_ERR_UNSUPPORTED && !ex && strstr(err.msg, "RETRO_REQUIRE_GPU_RESIDENT=1"), "env guard: %d '%s'", st,
             err.msg);
    rg_exec_free(ex);
    // A graph the device runs whole passes the guard.
    mlp w = mlp_make(false);
    o.require_resident = true;
    st = rg_exec_create(&ex, w.g, &o, &err);
    RG_CHECK(st == RG_OK, "a resident graph was refused: %s", err.msg);
    rg_exec_free(ex);
    mlp_free(&w);
    mlp_free(&m);
}

// A cache leaf the device reads, written by CPY_INTO on the CPU (the device has no CPY_INTO
// here): the cache's bytes go to the CPU, the window is written there, and come back.
static void test_in_place_writer_on_the_other_backend(void) {
    static const rg_op ops[] = {RG_OP_ADD, RG_OP_NONE};
    dev_reset(ops);
    enum { L = 8, W = 3 };
    float cache_v[L * 2], xv[W * 2], yv[L * 2];
    for (int i = 0; i < L * 2; i++) cache_v[i] = (float)i, yv[i] = 100.0f * (float)i;
    for (int i = 0; i < W * 2; i++) xv[i] = -1.0f - (float)i;
    float expect[L * 2], got[L * 2];
    for (int pass = 0; pass < 2; pass++) {
        float cache[L * 2];
        memcpy(cache, cache_v, sizeof cache);
        rg_graph *g = rg_graph_new();
        rg_node *c = rg_leaf(g, "cache", RG_TYPE_F32, 2, (int64_t[]){2, L}, cache);
        rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){2, W}, xv);
        rg_node *y = rg_leaf(g, "y", RG_TYPE_F32, 2, (int64_t[]){2, L}, yv);
        rg_node *win = rg_view(g, c, 2, (int64_t[]){2, W}, (size_t[]){4, 8}, 2 * 8);  // rows 2..4
        rg_node *put = rg_cpy_into(g, x, win);
        rg_node *sum = rg_add(g, y, c);  // reads the whole cache after the write (creation order)
        (void)put;
        sum->flags |= RG_NODE_OUTPUT;
        rg_error err = {0};
        rg_exec_stats s;
        RG_REQUIRE(run(g, pass == 1, sum, pass ? got : expect, &s, &err) == RG_OK, "pass %d: %s", pass, err.msg);
        if (pass == 1) {
            printf("    cpy_into on the cpu into a device cache: %d copies (%llu up, %llu down)\n", s.copies_scheduled,
                   (unsigned long long)s.copies_to_device, (unsigned long long)s.copies_to_host);
            RG_CHECK(s.copies_to_host == 1 && s.copies_to_device == 1, "copies %llu down, %llu up; expected 1 and 1",
                     (unsigned long long)s.copies_to_host, (unsigned long long)s.copies_to_device);
            RG_CHECK(dev_bad_pointer == 0, "%d device accesses outside device memory", dev_bad_pointer);
        }
        rg_graph_free(g);
    }
    RG_CHECK(memcmp(expect, got, sizeof got) == 0, "the cache written on the CPU did not reach the device's add");
    RG_CHECK(expect[2 * 2] == yv[4] + xv[0], "the window was not written (%g)", (double)expect[4]);
}

static void test_inputs_through_staging(void) {
    dev_reset(mlp_ops);
    rg_graph *g = rg_graph_new();
    float *wv = randn(K * M, 4);
    rg_node *w = rg_leaf(g, "w", RG_TYPE_F32, 2, (int64_t[]){K, M}, wv);
    rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){K, N}, NULL);  // planned: bytes from the exec
    x->flags |= RG_NODE_INPUT;
    rg_node *y = rg_mul_mat(g, w, x);
    y->flags |= RG_NODE_OUTPUT;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1, .backend = &dev_backend};
    rg_error err = {0};
    RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
    float *in = rg_exec_input(ex, x);
    RG_REQUIRE(in && !(in >= (float *)dev_base && in < (float *)(dev_base + DEV_BYTES)), "input staging is not host memory");
    float out[2][M * N];
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < K * N; i++) in[i] = (float)(r + 1) * (float)(i % 7);
        RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK, "run %d: %s", r, err.msg);
        RG_REQUIRE(rg_exec_read(ex, y, out[r], sizeof out[r], &err) == RG_OK, "%s", err.msg);
    }
    rg_exec_stats s = rg_exec_get_stats(ex);
    RG_CHECK(s.input_copies == 2, "inputs uploaded %llu times, expected 2", (unsigned long long)s.input_copies);
    int bad = 0;
    for (int i = 0; i < M * N; i++) bad += out[1][i] != 2.0f * out[0][i];  // linear in the input, exactly (x2 is exact)
    RG_CHECK(bad == 0, "%d outputs of the second run are not twice the first's", bad);
    rg_exec_free(ex);
    rg_graph_free(g);
    free(wv);
}

static void test_optimizer_on_device_and_download(void) {
    static const rg_op ops[] = {RG_OP_SGD, RG_OP_NONE};
    dev_reset(ops);
    enum { P = 37 };
    float *p0 = randn(P, 5), *gv = randn(P, 6), pc[P], pd[P];
    for (int dev = 0; dev < 2; dev++) {
        float *p = dev ? pd : pc;
        memcpy(p, p0, sizeof pc);
        rg_graph *g = rg_graph_new();
        rg_node *param = rg_param(g, "p", RG_TYPE_F32, 1, (int64_t[]){P}, p);
        rg_node *grad = rg_leaf(g, "g", RG_TYPE_F32, 1, (int64_t[]){P}, gv);
        rg_node *step = rg_sgd(g, param, grad, 0.1f, 0.01f, 1.0f);
        step->flags |= RG_NODE_OUTPUT;
        rg_exec *ex = NULL;
        rg_exec_opts o = {.n_threads = 1, .backend = dev ? &dev_backend : NULL};
        rg_error err = {0};
        RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK && rg_exec_run(ex, 0, -1, &err) == RG_OK, "%s", err.msg);
        if (dev) {
            RG_CHECK(memcmp(pd, p0, sizeof pd) == 0, "the host copy changed before rg_exec_download_leaves");
            RG_CHECK(rg_exec_download_leaves(ex, &err) == RG_OK, "%s", err.msg);
            RG_CHECK(rg_exec_get_stats(ex).copies_scheduled == 0, "the step copied inside the run");
        }
        rg_exec_free(ex);
        rg_graph_free(g);
    }
    RG_CHECK(memcmp(pc, pd, sizeof pc) == 0, "two SGD steps on the device differ from the CPU's");
    RG_CHECK(memcmp(pc, p0, sizeof pc) != 0, "the steps changed nothing");
    free(p0), free(gv);
}

// Device copies shared by execs (a session's weights, a trainer's parameters): the second
// exec uploads nothing, what the device wrote reaches the host at rg_resident_sync_host.
static void test_resident_copies_outlive_an_exec(void) {
    static const rg_op ops[] = {RG_OP_SGD, RG_OP_NONE};
    dev_reset(ops);
    enum { P = 19 };
    float *p0 = randn(P, 8), *gv = randn(P, 9), p[P], pc[P];
    memcpy(p, p0, sizeof p), memcpy(pc, p0, sizeof pc);
    rg_resident *res = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_resident_create(&res, &dev_backend, &err) == RG_OK, "%s", err.msg);
    for (int round = 0; round < 3; round++) {
        for (int dev = 0; dev < 2; dev++) {  // the CPU's reference step, then the device's
            rg_graph *g = rg_graph_new();
            rg_node *param = rg_param(g, "p", RG_TYPE_F32, 1, (int64_t[]){P}, dev ? p : pc);
            rg_node *grad = rg_leaf(g, "g", RG_TYPE_F32, 1, (int64_t[]){P}, gv);
            rg_sgd(g, param, grad, 0.1f, 0.0f, 1.0f)->flags |= RG_NODE_OUTPUT;
            rg_exec *ex = NULL;
            rg_exec_opts o = {.n_threads = 1, .backend = dev ? &dev_backend : NULL, .resident = dev ? res : NULL};
            RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
            RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK, "%s", err.msg);
            if (dev) {
                rg_exec_stats s = rg_exec_get_stats(ex);
                RG_CHECK(s.setup_copies == (round == 0 ? 2u : 0u), "round %d: %llu uploads", round,
                         (unsigned long long)s.setup_copies);
            }
            rg_exec_free(ex);
            rg_graph_free(g);
        }
    }
    RG_CHECK(memcmp(p, p0, sizeof p) == 0, "the host bytes changed before the sync");
    RG_CHECK(rg_resident_sync_host(res, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(memcmp(p, pc, sizeof p) == 0, "three steps through resident copies differ from the CPU's three");
    RG_CHECK(rg_resident_bytes(res) == 2 * P * 4, "resident bytes %zu", rg_resident_bytes(res));
    rg_resident_free(res);
    free(p0), free(gv);
}

static void test_refused_when_device_memory_is_short(void) {
    dev_reset(mlp_ops);
    dev_free_report = 1000;  // bytes
    mlp m = mlp_make(false);
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1, .backend = &dev_backend};
    rg_error err = {0};
    rg_status st = rg_exec_create(&ex, m.g, &o, &err);
    printf("    refusal: %s\n", err.msg);
    RG_CHECK(st == RG_ERR_NOMEM && !ex && strstr(err.msg, "stand-in device") && strstr(err.msg, "weights") &&
                 strstr(err.msg, "free") && strstr(err.msg, "recompute"),
             "%d '%s'", st, err.msg);
    RG_CHECK(dev_used == 0, "%zu bytes of device memory were allocated before the refusal", dev_used);
    mlp_free(&m);
}

static void test_non_finite_on_device_is_named(void) {
    static const rg_op ops[] = {RG_OP_SCALE, RG_OP_SUM, RG_OP_NONE};
    dev_reset(ops);
    float xv[5] = {1, 2, 3, 4, 5};
    rg_graph *g = rg_graph_new();
    rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 1, (int64_t[]){5}, xv);
    rg_node *big = rg_scale(g, x, 3e38f);
    rg_node_set_name(big, "overflow");
    rg_node *loss = rg_sum(g, big);
    loss->flags |= RG_NODE_LOSS;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1, .backend = &dev_backend};
    rg_error err = {0};
    RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
    rg_status st = rg_exec_run(ex, 0, -1, &err);
    printf("    %s\n", err.msg);
    RG_CHECK(st == RG_ERR_NONFINITE && strstr(err.msg, "'overflow'") && strstr(err.msg, "cuda"), "%d '%s'", st, err.msg);
    rg_exec_free(ex);
    rg_graph_free(g);
}

static const rg_test_case cases[] = {
    RG_TEST(test_device_runs_whole_graph),
    RG_TEST(test_fallback_copies_and_resident_guard),
    RG_TEST(test_in_place_writer_on_the_other_backend),
    RG_TEST(test_inputs_through_staging),
    RG_TEST(test_optimizer_on_device_and_download),
    RG_TEST(test_resident_copies_outlive_an_exec),
    RG_TEST(test_refused_when_device_memory_is_short),
    RG_TEST(test_non_finite_on_device_is_named),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
