// exec.c - see exec.h.
#include "graph/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda.h"
#include "graph/ops.h"

struct rg_exec {
    rg_graph *g;
    rg_plan plan;
    void *buffer;
    void *scratch;
    rg_threadpool *pool;
    rg_cuda_ctx *cuda;
    int nodes_cpu;
    bool own_pool;
    bool own_mem;  // buffer and scratch are this exec's (not an rg_exec_mem's)
    bool int8_activations;
    rg_exec_profile *prof;
};

// Grows *p (capacity *cap) to hold `need` bytes, 64-byte aligned; false when out of memory.
static bool mem_reserve(void **p, size_t *cap, size_t need) {
    if (need <= *cap && *p) return true;
    free(*p);
    *cap = 0;
    *p = aligned_alloc(64, (need + 63) / 64 * 64);
    if (*p) *cap = (need + 63) / 64 * 64;
    return *p != NULL;
}

void rg_exec_mem_free(rg_exec_mem *mem) {
    if (!mem) return;
    free(mem->buffer);
    free(mem->scratch);
    memset(mem, 0, sizeof *mem);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double weight_bytes(const rg_node *n) {
    const rg_tensor *w = &n->src[0]->t;
    return (double)rg_tensor_row_size(w) * (double)(rg_tensor_nelements(w) / (w->ne[0] > 0 ? w->ne[0] : 1));
}

// Adds the seconds `dt` of nodes grp[0..cnt) (one parallel section) to the profile.
static void profile_add(rg_exec_profile *p, rg_node *const *grp, int cnt, double dt) {
    if (grp[0]->op != RG_OP_MUL_MAT) {
        p->op_s[grp[0]->op] += dt;
        p->op_n[grp[0]->op] += 1;
        return;
    }
    double total = 0;
    for (int q = 0; q < cnt; q++) total += weight_bytes(grp[q]);
    for (int q = 0; q < cnt; q++) {
        const double share = total > 0 ? dt * weight_bytes(grp[q]) / total : dt / cnt;
        const uint32_t ty = grp[q]->src[0]->t.type;
        p->op_s[RG_OP_MUL_MAT] += share;
        p->op_n[RG_OP_MUL_MAT] += 1;
        if (ty < RG_TYPE_COUNT) {
            p->mm_s[ty] += share;
            p->mm_n[ty] += 1;
            p->mm_bytes[ty] += weight_bytes(grp[q]);
        }
    }
}

void rg_exec_profile_print(const rg_exec_profile *p, FILE *f) {
    const double runs = p->runs > 0 ? (double)p->runs : 1.0;
    double nodes_s = 0;
    for (int o = 0; o < RG_OP_COUNT; o++) nodes_s += p->op_s[o];
    fprintf(f, "profile: %lld runs, %.3f ms per run, %.3f ms of it in nodes\n", (long long)p->runs, 1e3 * p->run_s / runs,
            1e3 * nodes_s / runs);
    bool done[RG_OP_COUNT] = {false};
    for (;;) {  // ops by decreasing time
        int best = -1;
        for (int o = 0; o < RG_OP_COUNT; o++)
            if (!done[o] && p->op_n[o] && (best < 0 || p->op_s[o] > p->op_s[best])) best = o;
        if (best < 0) break;
        done[best] = true;
        fprintf(f, "  %-18s %6.0f nodes %8.3f ms %5.1f%%\n", rg_op_defs[best].name, p->op_n[best] / runs,
                1e3 * p->op_s[best] / runs, p->run_s > 0 ? 100 * p->op_s[best] / p->run_s : 0.0);
    }
    for (int t = 0; t < RG_TYPE_COUNT; t++) {
        if (!p->mm_n[t]) continue;
        const double s = p->mm_s[t] / runs, mb = p->mm_bytes[t] / runs / 1e6;
        fprintf(f, "  MUL_MAT %-10s %6.0f nodes %8.3f ms %7.2f MB %6.2f GB/s\n", rg_type_get((uint32_t)t)->name,
                p->mm_n[t] / runs, 1e3 * s, mb, s > 0 ? mb / 1e3 / s : 0.0);
    }
}

static rg_node *owner(rg_node *n) { return n->view_of ? n->view_of : n; }

rg_status rg_exec_create(rg_exec **out, rg_graph *g, const rg_exec_opts *opts, rg_error *err) {
    *out = NULL;
    rg_exec *ex = calloc(1, sizeof *ex);
    if (!ex) return rg_fail(err, RG_ERR_NOMEM, "exec: out of memory");
    ex->g = g;
    ex->prof = opts->profile;
    ex->int8_activations = opts->int8_activations;
    rg_status st = RG_OK;
    if (opts->pool) ex->pool = opts->pool;
    else {
        st = rg_threadpool_create(&ex->pool, opts->n_threads, err);
        ex->own_pool = true;
    }
    if (!st) st = rg_graph_plan(g, rg_threadpool_size(ex->pool), opts->budget, &ex->plan, err);
    if (!st && opts->device == RG_DEVICE_CUDA) st = rg_cuda_ctx_create(&ex->cuda, 0, err);
    if (!st && opts->mem) {
        rg_exec_mem *mem = opts->mem;
        bool ok = mem_reserve(&mem->buffer, &mem->buffer_cap, ex->plan.buffer_bytes ? ex->plan.buffer_bytes : 64) &&
                  (!ex->plan.scratch_bytes || mem_reserve(&mem->scratch, &mem->scratch_cap, ex->plan.scratch_bytes));
        ex->buffer = mem->buffer;
        ex->scratch = ex->plan.scratch_bytes ? mem->scratch : NULL;
        if (!ok)
            st = rg_fail(err, RG_ERR_NOMEM, "exec: cannot allocate the %.2f MiB the plan needs",
                         (ex->plan.buffer_bytes + ex->plan.scratch_bytes) / 1048576.0);
    } else if (!st) {
        ex->own_mem = true;
        ex->buffer = aligned_alloc(64, ex->plan.buffer_bytes ? ex->plan.buffer_bytes : 64);
        ex->scratch = ex->plan.scratch_bytes ? aligned_alloc(64, (ex->plan.scratch_bytes + 63) / 64 * 64) : NULL;
        if (!ex->buffer || (ex->plan.scratch_bytes && !ex->scratch))
            st = rg_fail(err, RG_ERR_NOMEM, "exec: cannot allocate the %.2f MiB the plan needs",
                         (ex->plan.buffer_bytes + ex->plan.scratch_bytes) / 1048576.0);
    }
    if (st) {
        rg_exec_free(ex);
        return st;
    }
    rg_exec_rebind(ex);
    // Leaves allocated in the buffer start as zeros, not as what a previous node left.
    for (int i = 0; i < g->n_nodes; i++) {
        rg_node *n = g->nodes[i];
        if (n->op == RG_OP_NONE && n->offset >= 0) memset(n->t.data, 0, rg_tensor_span(&n->t));
    }
    *out = ex;
    return RG_OK;
}

// Bind: planned nodes in the buffer, views and aliases on their owner (owners come first).
void rg_exec_rebind(rg_exec *ex) {
    rg_graph *g = ex->g;
    for (int i = 0; i < g->n_nodes; i++) {
        rg_node *n = g->nodes[i];
        if (n->view_of) n->t.data = (char *)owner(n)->t.data + n->t.view_offs;
        else if (n->offset >= 0) n->t.data = (char *)ex->buffer + n->offset;
    }
}

static bool all_finite(const rg_node *n) {
    if (n->t.type != RG_TYPE_F32 || !rg_tensor_is_contiguous(&n->t) || !n->t.data) return true;
    const float *v = n->t.data;
    int64_t count = rg_tensor_nelements(&n->t);
    for (int64_t k = 0; k < count; k++)
        if (!isfinite(v[k])) return false;
    return true;
}

// The planner reuses bytes, so by the time the loss is seen the culprit's
// output may be gone. The graph is deterministic: run it again from the
// start, checking each node's output right after its kernel.
static void first_non_finite(rg_exec *ex, int upto, char *buf, size_t cap) {
    rg_graph *g = ex->g;
    rg_exec_ctx ctx = {ex->pool, ex->scratch, ex->plan.scratch_bytes, ex->int8_activations};
    rg_error ignored;
    for (int i = 0; i <= upto; i++) {
        rg_node *n = g->nodes[i];
        const rg_op_def *def = &rg_op_defs[n->op];
        if (n->op != RG_OP_NONE && !def->is_view && def->cpu && def->cpu(&ctx, n, &ignored) != RG_OK) break;
        if (def->is_view) continue;
        if (!all_finite(n)) {
            const float *v = n->t.data;
            int64_t k = 0;
            while (isfinite(v[k])) k++;
            snprintf(buf, cap, "first non-finite value: node %d '%s' (%s) element %lld = %g", i, n->t.name,
                     rg_op_name(n->op), (long long)k, (double)v[k]);
            return;
        }
    }
    snprintf(buf, cap, "no node before it holds a non-finite value");
}

// MUL_MAT nodes after node i (up to `to`, views and leaves between them
// skipped: they run nothing) that read the same src[1] and no output of the
// group: q, k and v of a layer, gate and up. Returns the count (1: none
// follow) and the index of the last one.
#define GROUP_MAX 8
static int mul_mat_group(rg_graph *g, int i, int to, rg_node **grp, int *last) {
    rg_node *n = g->nodes[i];
    int cnt = 0;
    grp[cnt++] = n;
    *last = i;
    for (int k = i + 1; k < to && cnt < GROUP_MAX; k++) {
        rg_node *m = g->nodes[k];
        if (m->op == RG_OP_NONE || rg_op_defs[m->op].is_view) continue;
        if (m->op != RG_OP_MUL_MAT || m->src[1] != n->src[1] || (m->flags & RG_NODE_LOSS)) break;
        bool reads_group = false;
        for (int q = 0; q < cnt; q++)
            if (owner(m->src[0]) == grp[q] || owner(m->src[1]) == grp[q]) reads_group = true;
        if (reads_group) break;
        grp[cnt++] = m;
        *last = k;
    }
    return cnt;
}

rg_status rg_exec_run(rg_exec *ex, int from, int to, rg_error *err) {
    rg_graph *g = ex->g;
    if (to < 0 || to > g->n_nodes) to = g->n_nodes;
    rg_exec_ctx ctx = {ex->pool, ex->scratch, ex->plan.scratch_bytes, ex->int8_activations};
    const double t_run = ex->prof ? now_s() : 0;
    for (int i = from < 0 ? 0 : from; i < to; i++) {
        rg_node *n = g->nodes[i];
        const rg_op_def *def = &rg_op_defs[n->op];
        if (n->op == RG_OP_NONE || def->is_view) continue;
        rg_status st;
        const double t0 = ex->prof ? now_s() : 0;
        if (n->op == RG_OP_MUL_MAT && !ex->cuda && !(n->flags & RG_NODE_LOSS)) {
            // Several products of the same activations: one parallel section (ops_matmul.c).
            rg_node *grp[GROUP_MAX];
            int last, cnt = mul_mat_group(g, i, to, grp, &last);
            if (cnt > 1) {
                st = cpu_mul_mat_many(&ctx, grp, cnt, err);
                if (st) return st;
                if (ex->prof) profile_add(ex->prof, grp, cnt, now_s() - t0);
                ex->nodes_cpu += cnt;
                i = last;
                continue;
            }
        }
        if (ex->cuda && rg_cuda_op_supported(n)) {
            st = rg_cuda_op_run(ex->cuda, n, err);
        } else {
            if (!def->cpu || (def->cpu_supports && !def->cpu_supports(n)))
                return rg_fail(err, RG_ERR_UNSUPPORTED, "exec: no CPU kernel for %s ('%s') with these types", def->name,
                               n->t.name);
            st = def->cpu(&ctx, n, err);
            ex->nodes_cpu++;
        }
        if (st) return st;
        if (ex->prof) profile_add(ex->prof, &n, 1, now_s() - t0);
        if (n->flags & RG_NODE_LOSS) {
            float loss = *(const float *)n->t.data;
            if (!isfinite(loss)) {
                char where[256];
                first_non_finite(ex, i, where, sizeof where);
                return rg_fail(err, RG_ERR_NONFINITE, "exec: the loss '%s' is %g; %s", n->t.name, (double)loss, where);
            }
        }
    }
    if (ex->prof) {
        ex->prof->run_s += now_s() - t_run;
        ex->prof->runs += 1;
    }
    return RG_OK;
}

const rg_plan *rg_exec_plan(const rg_exec *ex) { return &ex->plan; }
rg_threadpool *rg_exec_pool(rg_exec *ex) { return ex->pool; }

rg_exec_stats rg_exec_get_stats(const rg_exec *ex) {
    rg_exec_stats s = {0};
    s.nodes_cpu = ex->nodes_cpu;
    if (ex->cuda) {
        const rg_cuda_stats *c = rg_cuda_ctx_stats(ex->cuda);
        s.nodes_gpu = (int)c->nodes;
        s.copies_to_device = c->copies_to_device, s.bytes_to_device = c->bytes_to_device;
        s.copies_to_host = c->copies_to_host, s.bytes_to_host = c->bytes_to_host;
    }
    return s;
}

void rg_exec_free(rg_exec *ex) {
    if (!ex) return;
    rg_cuda_ctx_free(ex->cuda);
    if (ex->own_pool) rg_threadpool_free(ex->pool);
    if (ex->own_mem) {
        free(ex->buffer);
        free(ex->scratch);
    }
    free(ex);
}
