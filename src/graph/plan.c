// plan.c - see plan.h. A best-fit allocator over one address range, walked in
// node order: a node's block is taken before the blocks of the sources whose
// last reader it is are released, so an op never writes into its own inputs
// (except the in-place case, chosen explicitly).
#include "graph/plan.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "graph/backend.h"
#include "graph/ops.h"

#define ALIGN 64

typedef struct block {
    size_t offset, size;
} block;

typedef struct allocator {
    block *free;  // sorted by offset, coalesced
    int n_free, cap_free;
    size_t end;   // high-water mark: the buffer size
} allocator;

static size_t round_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static int alloc_block(allocator *a, size_t size, size_t *offset) {
    int best = -1;
    for (int i = 0; i < a->n_free; i++)
        if (a->free[i].size >= size && (best < 0 || a->free[i].size < a->free[best].size)) best = i;
    if (best >= 0) {
        *offset = a->free[best].offset;
        a->free[best].offset += size;
        a->free[best].size -= size;
        if (a->free[best].size == 0) {
            memmove(&a->free[best], &a->free[best + 1], (size_t)(a->n_free - best - 1) * sizeof(block));
            a->n_free--;
        }
        return 0;
    }
    // Grow the end, absorbing a free block that touches it.
    if (a->n_free && a->free[a->n_free - 1].offset + a->free[a->n_free - 1].size == a->end) {
        *offset = a->free[a->n_free - 1].offset;
        a->end = *offset + size;
        a->n_free--;
        return 0;
    }
    *offset = a->end;
    a->end += size;
    return 0;
}

static int free_block(allocator *a, size_t offset, size_t size) {
    int i = 0;
    while (i < a->n_free && a->free[i].offset < offset) i++;
    if (a->n_free == a->cap_free) {
        int cap = a->cap_free ? 2 * a->cap_free : 64;
        block *p = realloc(a->free, (size_t)cap * sizeof *p);
        if (!p) return -1;
        a->free = p;
        a->cap_free = cap;
    }
    memmove(&a->free[i + 1], &a->free[i], (size_t)(a->n_free - i) * sizeof(block));
    a->free[i] = (block){offset, size};
    a->n_free++;
    // Coalesce with the neighbours.
    if (i + 1 < a->n_free && a->free[i].offset + a->free[i].size == a->free[i + 1].offset) {
        a->free[i].size += a->free[i + 1].size;
        memmove(&a->free[i + 1], &a->free[i + 2], (size_t)(a->n_free - i - 2) * sizeof(block));
        a->n_free--;
    }
    if (i > 0 && a->free[i - 1].offset + a->free[i - 1].size == a->free[i].offset) {
        a->free[i - 1].size += a->free[i].size;
        memmove(&a->free[i], &a->free[i + 1], (size_t)(a->n_free - i - 1) * sizeof(block));
        a->n_free--;
    }
    return 0;
}

static rg_node *owner(rg_node *n) { return n->view_of ? n->view_of : n; }

static size_t node_bytes(const rg_node *n) { return round_up(rg_tensor_span(&n->t) ? rg_tensor_span(&n->t) : 1); }

// Nodes whose bytes come from outside the plan.
// (Not `data != NULL`: a previous plan's binding must not make a planned leaf external.)
static bool is_external(const rg_node *n) { return n->op == RG_OP_NONE && (n->flags & RG_NODE_EXTERNAL); }
static bool keeps_to_end(const rg_node *n) {
    return (n->flags & (RG_NODE_OUTPUT | RG_NODE_LOSS | RG_NODE_GRAD)) || n->op == RG_OP_NONE;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

rg_status rg_graph_plan(rg_graph *g, int n_threads, size_t budget, rg_plan *out, rg_error *err) {
    return rg_graph_plan_backend(g, RG_BACKEND_CPU, n_threads, budget, out, err);
}

rg_status rg_graph_plan_backend(rg_graph *g, int backend, int n_threads, size_t budget, rg_plan *out, rg_error *err) {
    memset(out, 0, sizeof *out);
    rg_status st = rg_graph_error(g, err);
    if (st) return st;
    const int n = g->n_nodes;
    for (int i = 0; i < n; i++) {
        rg_node *x = g->nodes[i];
        x->first_use = i;
        x->last_use = keeps_to_end(x) ? INT_MAX : i;
        if (x->backend == backend) {
            x->offset = -1;
            x->inplace_of = NULL;
        }
    }
    for (int i = 0; i < n; i++) {
        rg_node *x = g->nodes[i];
        if (x->view_of && owner(x)->last_use < i) owner(x)->last_use = i;
        for (int s = 0; s < RG_MAX_SRC; s++) {
            if (!x->src[s]) continue;
            rg_node *o = owner(x->src[s]);
            if (o->last_use < i) o->last_use = i;
        }
        // A view that is an output keeps its owner alive to the end.
        if (x->view_of && keeps_to_end(x)) owner(x)->last_use = INT_MAX;
    }
    // Nodes to release after step i, bucketed by last_use.
    int *free_head = malloc(sizeof(int) * (size_t)(n + 1)), *free_next = malloc(sizeof(int) * (size_t)(n + 1));
    if (!free_head || !free_next) {
        free(free_head), free(free_next);
        return rg_fail(err, RG_ERR_NOMEM, "plan: out of memory");
    }
    for (int i = 0; i <= n; i++) free_head[i] = -1;
    for (int i = 0; i < n; i++) {
        rg_node *x = g->nodes[i];
        if (x->view_of || is_external(x) || x->last_use == INT_MAX || x->backend != backend) continue;
        free_next[i] = free_head[x->last_use];
        free_head[x->last_use] = i;
    }
    allocator a = {0};
    for (int i = 0; i < n; i++) {
        rg_node *x = g->nodes[i];
        const rg_op_def *def = &rg_op_defs[x->op];
        if (x->backend != backend) continue;  // planned in its own backend's buffer
        if (is_external(x)) {
            out->external_bytes += rg_tensor_span(&x->t);
            if (x->flags & RG_NODE_PARAM) out->param_bytes += rg_tensor_span(&x->t);
        }
        if (x->view_of || is_external(x)) continue;
        size_t bytes = node_bytes(x);
        out->naive_bytes += bytes;
        out->n_planned++;
        rg_node *s0 = x->src[0];
        // In place only when no other source reads src[0]'s bytes (through a view) at this node.
        bool other_reader = false;
        for (int s = 1; s < RG_MAX_SRC; s++)
            if (x->src[s] && s0 && owner(x->src[s]) == s0) other_reader = true;
        if (def->inplace_ok && s0 && !other_reader && !s0->view_of && s0->backend == backend && s0->offset >= 0 &&
            s0->last_use == i &&
            node_bytes(s0) == bytes && s0->t.type == x->t.type && rg_tensor_is_contiguous(&s0->t) && !keeps_to_end(s0)) {
            // Take over the source's block: it is not released at this step.
            x->offset = s0->offset;
            x->inplace_of = s0;
            s0->last_use = -1;  // marks the block as handed over
            out->n_inplace++;
        } else {
            size_t off;
            alloc_block(&a, bytes, &off);
            x->offset = (int64_t)off;
        }
        if (x->flags & RG_NODE_GRAD) out->grad_bytes += bytes;
        else if (keeps_to_end(x)) out->output_bytes += bytes;
        for (int j = free_head[i]; j >= 0; j = free_next[j]) {
            rg_node *d = g->nodes[j];
            if (d->last_use != i) continue;  // handed over in place
            if (free_block(&a, (size_t)d->offset, node_bytes(d))) {
                free(a.free), free(free_head), free(free_next);
                return rg_fail(err, RG_ERR_NOMEM, "plan: out of memory");
            }
        }
    }
    out->buffer_bytes = a.end;
    for (int i = 0; i < n; i++) {
        if (g->nodes[i]->backend != backend) continue;
        const rg_op_col c = rg_op_cell((rg_backend_id)backend, g->nodes[i]->op);
        if (c.work) {
            size_t w = c.work(g->nodes[i], n_threads > 0 ? n_threads : 1);
            if (w > out->scratch_bytes) out->scratch_bytes = w;
        }
    }
    free(a.free);
    free(free_head);
    free(free_next);
    size_t total = out->buffer_bytes + out->scratch_bytes + out->external_bytes;
    if (budget && total > budget)
        return rg_fail(err, RG_ERR_NOMEM,
                       "plan: the graph needs %.2f MiB (buffer %.2f MiB of which gradients %.2f MiB, scratch %.2f MiB, "
                       "bound weights and inputs %.2f MiB) but the budget is %.2f MiB",
                       mib(total), mib(out->buffer_bytes), mib(out->grad_bytes), mib(out->scratch_bytes),
                       mib(out->external_bytes), mib(budget));
    return RG_OK;
}

void rg_plan_print(const rg_plan *p, FILE *f) {
    fprintf(f, "memory plan: %.2f MiB buffer (%.2f MiB without reuse, %d nodes, %d in place), %.2f MiB scratch, "
               "%.2f MiB bound from outside (%.2f MiB parameters), gradients %.2f MiB, other outputs %.2f MiB\n",
            mib(p->buffer_bytes), mib(p->naive_bytes), p->n_planned, p->n_inplace, mib(p->scratch_bytes),
            mib(p->external_bytes), mib(p->param_bytes), mib(p->grad_bytes), mib(p->output_bytes));
}
