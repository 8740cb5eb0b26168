// exec_profile.c - where a run's time goes (rg_exec_profile, exec.h) and, when a loss is
// not finite, the first node whose output is not (exec_internal.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "graph/exec_internal.h"

double rg_ex_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double weight_bytes(const rg_node *n) {
    const rg_tensor *w = &n->src[0]->t;
    return (double)rg_tensor_row_size(w) * (double)(rg_tensor_nelements(w) / (w->ne[0] > 0 ? w->ne[0] : 1));
}

// Adds the seconds `dt` of nodes grp[0..cnt) (one parallel section) to the profile.
void rg_ex_profile_add(rg_exec_profile *p, rg_node *const *grp, int cnt, double dt) {
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

// A node's output in host memory (a temporary copy for device-homed nodes): NULL when
// it cannot be read (not F32, not contiguous, no bytes).
static const float *host_values(rg_exec *ex, const rg_node *n, float **tmp) {
    *tmp = NULL;
    if (n->t.type != RG_TYPE_F32 || !rg_tensor_is_contiguous(&n->t) || !n->t.data) return NULL;
    if (n->backend == RG_BACKEND_CPU || !ex->dev) return n->t.data;
    const size_t bytes = rg_tensor_span(&n->t);
    rg_error e;
    *tmp = malloc(bytes ? bytes : 1);
    if (!*tmp || ex->dev->vt->download(ex->dev, *tmp, n->t.data, bytes, &e)) return NULL;
    return *tmp;
}

// The planner reuses bytes, so by the time the loss is seen the culprit's
// output may be gone. The graph is deterministic: run it again from the
// start, checking each node's output right after its kernel.
void rg_ex_first_non_finite(rg_exec *ex, int upto, char *buf, size_t cap) {
    rg_graph *g = ex->g;
    rg_exec_ctx ctx = {.pool = ex->pool, .scratch = ex->scratch, .scratch_size = ex->plan.scratch_bytes,
                       .int8_activations = ex->int8_activations, .bf16_products = ex->bf16_products,
                       .tiles_cache = ex->tiles_cache};
    rg_error ignored;
    ex->copy_cursor = 0;
    for (int i = 0; i <= upto; i++) {
        rg_node *n = g->nodes[i];
        const rg_op_def *def = &rg_op_defs[n->op];
        if (def->is_view) continue;
        if (n->op != RG_OP_NONE) {  // leaves run nothing, but a caller's NaN input is named too
            if (ex->dev && rg_ex_do_copies(ex, i, false, &ignored)) break;
            if (rg_ex_run_node(ex, &ctx, n, &ignored) != RG_OK) break;
            if (ex->dev && rg_ex_do_copies(ex, i, true, &ignored)) break;
        }
        float *tmp;
        const float *v = host_values(ex, n, &tmp);
        const int64_t count = rg_tensor_nelements(&n->t);
        int64_t k = 0;
        while (v && k < count && isfinite(v[k])) k++;
        if (v && k < count) {
            snprintf(buf, cap, "first non-finite value: node %d '%s' (%s, on the %s) element %lld = %g", i, n->t.name,
                     rg_op_name(n->op), rg_backend_name((rg_backend_id)n->backend), (long long)k, (double)v[k]);
            free(tmp);
            return;
        }
        free(tmp);
    }
    snprintf(buf, cap, "no node before it holds a non-finite value");
}
