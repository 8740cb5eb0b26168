// test_graph.c - the graph machinery: gradients of reused nodes, frozen
// leaves, construction errors, the memory planner (reuse, in-place, budgets),
// non-finite losses, determinism, views, and misuse of the backward.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "graph/exec.h"
#include "graph/ops.h"
#include "graph/plan.h"
#include "rg_test.h"

static bool quick(void) {
    const char *q = getenv("RG_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

static float *random_f32(int64_t n, uint64_t stream, float scale) {
    float *p = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
    for (int64_t i = 0; i < n; i++) p[i] = scale * rg_rng_normal(42, stream, (uint64_t)i);
    return p;
}

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

static const float *f32_of(const rg_node *n) { return (const float *)n->t.data; }

// (1) A node used twice gets the sum of both gradients: y = x*x + x, so
// dy/dx = 2x + 1, exact for these x (every partial sum is representable).
static void test_gradient_of_reused_input_is_summed(void) {
    float x[6] = {-2.0f, -0.5f, 0.0f, 1.25f, 3.0f, 0.75f};
    rg_graph *g = rg_graph_new();
    rg_error err = {0};
    rg_node *xn = rg_param(g, "x", RG_TYPE_F32, 1, (int64_t[]){6}, x);
    rg_node *loss = rg_sum(g, rg_add(g, rg_mul(g, xn, xn), xn));
    RG_REQUIRE(rg_graph_backward(g, loss, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(xn->grad, "x has no gradient");
    int adds = 0;  // gradient contributions joined by ADD in the backward part
    for (int i = g->n_forward; i < g->n_nodes; i++) adds += g->nodes[i]->op == RG_OP_ADD;
    RG_CHECK(adds >= 2, "x is used three times (twice by mul, once by add): %d gradient ADDs", adds);
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1};
    RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK, "%s", err.msg);
    for (int i = 0; i < 6; i++)
        RG_CHECK(f32_of(xn->grad)[i] == 2.0f * x[i] + 1.0f, "dy/dx[%d] = %g, expected %g", i,
                 (double)f32_of(xn->grad)[i], (double)(2.0f * x[i] + 1.0f));
    printf("    y = x*x + x: dy/dx == 2x + 1 exactly for 6 values, %d gradient ADDs\n", adds);
    rg_exec_free(ex);
    rg_graph_free(g);
}

// (2) Frozen leaves get no gradient node and no gradient bytes: the plan's
// grad_bytes are exactly the parameters' gradients.
static void test_frozen_leaves_get_no_gradient(void) {
    float *w = random_f32(64 * 32, 1, 0.1f), *x = random_f32(64 * 8, 2, 1.0f);
    float *b = random_f32(32, 3, 1.0f), *hb = random_f32(64, 4, 1.0f);
    rg_graph *g = rg_graph_new();
    rg_error err = {0};
    rg_node *W = rg_leaf(g, "w (frozen)", RG_TYPE_F32, 2, (int64_t[]){64, 32}, w);
    rg_node *X = rg_leaf(g, "x (input)", RG_TYPE_F32, 2, (int64_t[]){64, 8}, x);
    rg_node *B = rg_param(g, "b", RG_TYPE_F32, 1, (int64_t[]){32}, b);
    rg_node *HB = rg_param(g, "hb", RG_TYPE_F32, 2, (int64_t[]){64, 1}, hb);
    rg_node *h = rg_add(g, X, HB);                   // needs a gradient: dX flows through the matmul
    rg_node *y = rg_add(g, rg_mul_mat(g, W, h), B);  // [32, 8]
    RG_REQUIRE(rg_graph_backward(g, rg_sum(g, rg_silu(g, y)), &err) == RG_OK, "%s", err.msg);
    RG_CHECK(!W->grad, "the frozen weight got a gradient node");
    RG_CHECK(!X->grad, "the frozen input got a gradient node");
    RG_CHECK(B->grad && HB->grad, "a parameter has no gradient");
    int out_prods = 0, w_shaped = 0, grads = 0;
    for (int i = g->n_forward; i < g->n_nodes; i++) {
        const rg_node *n = g->nodes[i];
        out_prods += n->op == RG_OP_OUT_PROD;
        w_shaped += rg_tensor_same_shape(&n->t, &W->t);
        grads += (n->flags & RG_NODE_GRAD) != 0;
    }
    RG_CHECK(out_prods == 1, "%d OUT_PROD nodes: only dX = out_prod(W, dY^T) is needed, never dW", out_prods);
    RG_CHECK(w_shaped == 0, "%d backward nodes are shaped like the frozen weight", w_shaped);
    RG_CHECK(grads == 2, "%d nodes flagged as gradients, expected the 2 parameters'", grads);
    rg_plan plan;
    RG_REQUIRE(rg_graph_plan(g, 1, 0, &plan, &err) == RG_OK, "%s", err.msg);
    const size_t expect = round64(32 * 4) + round64(64 * 4);
    RG_CHECK(plan.grad_bytes == expect, "plan.grad_bytes = %zu, expected %zu (b and hb only)", plan.grad_bytes, expect);
    RG_CHECK(plan.param_bytes == (32 + 64) * 4, "plan.param_bytes = %zu", plan.param_bytes);
    printf("    frozen weight and input: no gradient node, %d OUT_PROD (dX only); grad_bytes %zu = b + hb\n", out_prods,
           plan.grad_bytes);
    rg_graph_free(g);
    free(w), free(x), free(b), free(hb);
}

// A parameter used through a reshape gets a gradient that is a view (a reshape
// of a computed node); its bytes are gradient bytes all the same.
static void test_grad_bytes_count_view_gradients(void) {
    float *p = random_f32(8 * 32, 5, 1.0f), *q = random_f32(32 * 8, 6, 1.0f);
    rg_graph *g = rg_graph_new();
    rg_error err = {0};
    rg_node *P = rg_param(g, "p", RG_TYPE_F32, 2, (int64_t[]){8, 32}, p);
    rg_node *Q = rg_param(g, "q", RG_TYPE_F32, 2, (int64_t[]){32, 8}, q);
    rg_node *y = rg_mul(g, Q, rg_reshape(g, P, 2, (int64_t[]){32, 8}));
    RG_REQUIRE(rg_graph_backward(g, rg_sum(g, y), &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(P->grad && Q->grad, "a parameter has no gradient");
    rg_plan plan;
    RG_REQUIRE(rg_graph_plan(g, 1, 0, &plan, &err) == RG_OK, "%s", err.msg);
    const size_t expect = 2 * round64(8 * 32 * 4);
    printf("    p's gradient is a %s node; grad_bytes %zu, expected %zu\n", rg_op_name(P->grad->op), plan.grad_bytes,
           expect);
    RG_CHECK(plan.grad_bytes == expect, "plan.grad_bytes = %zu, expected %zu: the gradient of p (a %s) is not counted",
             plan.grad_bytes, expect, rg_op_name(P->grad->op));
    rg_graph_free(g);
    free(p), free(q);
}

// (3) Shape mismatches are errors at build time naming the op and both shapes;
// the first error sticks, and every constructor after it returns NULL.
static void expect_error(rg_graph *g, const char *what, const char *op, const char *s1, const char *s2) {
    rg_error err = {0};
    RG_CHECK(rg_graph_error(g, &err) != RG_OK, "%s: no error recorded", what);
    RG_CHECK(strstr(err.msg, op) && strstr(err.msg, s1) && strstr(err.msg, s2),
             "%s: the message must name %s, %s and %s: \"%s\"", what, op, s1, s2, err.msg);
    printf("    %s: \"%s\"\n", what, err.msg);
}

static void test_shape_errors_name_op_and_shapes(void) {
    rg_graph *g = rg_graph_new();
    rg_node *a = rg_leaf(g, "a", RG_TYPE_F32, 2, (int64_t[]){3, 2}, NULL);
    rg_node *b = rg_leaf(g, "b", RG_TYPE_F32, 2, (int64_t[]){4, 2}, NULL);
    RG_CHECK(rg_add(g, a, b) == NULL, "add of [3, 2] and [4, 2] made a node");
    expect_error(g, "add [3,2] + [4,2]", "add", "[3, 2]", "[4, 2]");
    // The first error sticks: a second mismatch does not replace it.
    rg_node *w = rg_leaf(g, "w", RG_TYPE_F32, 2, (int64_t[]){8, 4}, NULL);
    rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){6, 3}, NULL);
    RG_CHECK(rg_mul_mat(g, w, x) == NULL, "mul_mat with wrong ne0 made a node");
    expect_error(g, "after a second error", "add", "[3, 2]", "[4, 2]");
    // Every constructor with a NULL source returns NULL without crashing.
    rg_node *p = rg_param(g, "p", RG_TYPE_F32, 1, (int64_t[]){4}, NULL);
    const int64_t ne[2] = {2, 2};
    const size_t nb[2] = {4, 8};
    const rg_adamw_step s = {1, 1, 1, 1, 1, 1, 1, 1};
    rg_node *made[] = {
        rg_get_rows(g, NULL, NULL), rg_get_rows_back(g, NULL, NULL, 3), rg_mul_mat(g, NULL, x), rg_out_prod(g, w, NULL),
        rg_add(g, NULL, a), rg_sub(g, a, NULL), rg_mul(g, NULL, NULL), rg_scale(g, NULL, 2.0f),
        rg_repeat(g, NULL, a), rg_repeat_back(g, a, NULL), rg_sum(g, NULL), rg_mean(g, NULL), rg_sum_rows(g, NULL),
        rg_rms_norm(g, NULL, 1e-5f), rg_rms_norm_back(g, NULL, a, 1e-5f), rg_rope(g, NULL, NULL, 2, 0, 1e4f, 1.0f),
        rg_rope_back(g, a, NULL, 2, 0, 1e4f, 1.0f), rg_soft_max(g, NULL, NULL, true, 1.0f, 0.0f),
        rg_soft_max_back(g, NULL, a, NULL, 1.0f, 0.0f), rg_silu(g, NULL), rg_silu_back(g, a, NULL),
        rg_swiglu(g, NULL, a), rg_reshape(g, NULL, 2, ne), rg_view(g, NULL, 2, ne, nb, 0),
        rg_permute(g, NULL, 1, 0, 2, 3), rg_transpose(g, NULL), rg_view_back(g, NULL, NULL), rg_cont(g, NULL),
        rg_cpy(g, NULL, RG_TYPE_F16), rg_cross_entropy_loss(g, NULL, NULL, -100),
        rg_cross_entropy_loss_back(g, NULL, a, NULL, -100), rg_adamw(g, NULL, p, p, p, &s),
        rg_sgd(g, p, NULL, 0.1f, 0.0f, 1.0f),
    };
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++)
        RG_CHECK(made[i] == NULL, "constructor %zu made a node from a NULL source", i);
    rg_error err = {0};
    RG_CHECK(rg_graph_backward(g, NULL, &err) != RG_OK, "backward of NULL succeeded");
    rg_plan plan;
    RG_CHECK(rg_graph_plan(g, 1, 0, &plan, &err) != RG_OK, "a graph with an error was planned");
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1};
    memset(&err, 0, sizeof err);
    RG_CHECK(rg_exec_create(&ex, g, &o, &err) != RG_OK && !ex, "a graph with an error was made runnable");
    RG_CHECK(strstr(err.msg, "add") != NULL, "exec_create reports \"%s\", not the first error", err.msg);
    rg_graph_free(g);

    g = rg_graph_new();
    w = rg_leaf(g, "w", RG_TYPE_F32, 2, (int64_t[]){8, 4}, NULL);
    x = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){6, 3}, NULL);
    RG_CHECK(rg_mul_mat(g, w, x) == NULL, "mul_mat with wrong ne0 made a node");
    expect_error(g, "mul_mat [8,4] x [6,3]", "mul_mat", "[8, 4]", "[6, 3]");
    rg_graph_free(g);

    g = rg_graph_new();
    rg_node *z = rg_leaf(g, "logits", RG_TYPE_F32, 2, (int64_t[]){5, 4}, NULL);
    rg_node *lab = rg_leaf(g, "labels", RG_TYPE_I32, 1, (int64_t[]){3}, NULL);
    RG_CHECK(rg_cross_entropy_loss(g, z, lab, -100) == NULL, "cross-entropy with 3 labels for 4 tokens made a node");
    expect_error(g, "cross_entropy_loss [5,4] with 3 labels", "cross_entropy_loss", "[5, 4]", "[3]");
    rg_graph_free(g);
}

// (4) The planner reuses memory: 100 elementwise ops on [1024, 64] (256 KiB
// each) need a small fraction of the naive sum, mostly in place; the result
// is still right.
static void test_planner_reuses_memory(void) {
    const int64_t n0 = 1024, n1 = 64, n = n0 * n1;
    float *x = random_f32(n, 6, 1.0f), *b = random_f32(n0, 7, 0.1f);
    rg_graph *g = rg_graph_new();
    rg_error err = {0};
    rg_node *h = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){n0, n1}, x);
    rg_node *bn = rg_leaf(g, "b", RG_TYPE_F32, 2, (int64_t[]){n0, 1}, b);
    for (int i = 0; i < 100; i++) {
        switch (i % 4) {
        case 0: h = rg_add(g, h, bn); break;
        case 1: h = rg_scale(g, h, 0.75f); break;
        case 2: h = rg_silu(g, h); break;
        default: h = rg_sub(g, h, bn); break;
        }
    }
    RG_REQUIRE(h, "building the chain failed");
    h->flags |= RG_NODE_OUTPUT;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 2};
    RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
    const rg_plan *p = rg_exec_plan(ex);
    printf("    100 ops on [1024, 64]: buffer %zu bytes, naive %zu (%.2f%%), %d of %d planned nodes in place\n",
           p->buffer_bytes, p->naive_bytes, 100.0 * (double)p->buffer_bytes / (double)p->naive_bytes, p->n_inplace,
           p->n_planned);
    RG_CHECK(p->naive_bytes >= (size_t)100 * n * 4, "naive bytes %zu below 100 outputs", p->naive_bytes);
    RG_CHECK(p->buffer_bytes * 20 < p->naive_bytes, "buffer %zu is not below 5%% of the naive %zu", p->buffer_bytes,
             p->naive_bytes);
    RG_CHECK(p->n_inplace > 0, "no node ran in place");
    RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK, "%s", err.msg);
    double worst = 0, top = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], c = b[i % n0];
        for (int k = 0; k < 100; k++)
            v = k % 4 == 0 ? v + c : k % 4 == 1 ? v * 0.75 : k % 4 == 2 ? v / (1 + exp(-v)) : v - c;
        worst = fmax(worst, fabs(f32_of(h)[i] - v));
        top = fmax(top, fabs(v));
    }
    RG_CHECK(worst <= 1e-5 * top, "the chain computed in place is off by %.3e (max %.3e)", worst, top);
    rg_exec_free(ex);
    rg_graph_free(g);
    free(x), free(b);
}

// An op that takes over its first source's bytes must not do so while it
// still reads those bytes through another source (a view of the same node).
static void test_inplace_respects_views_of_the_source(void) {
    const int64_t n = 8;
    float *x = random_f32(n * n, 8, 1.0f);
    rg_graph *g = rg_graph_new();
    rg_error err = {0};
    rg_node *xn = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){n, n}, x);
    rg_node *a = rg_scale(g, xn, 2.0f);                     // planned in the buffer
    rg_node *y = rg_mul(g, a, rg_transpose(g, a));         // a dies here; y = a * a^T elementwise
    y->flags |= RG_NODE_OUTPUT;
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1};
    RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK, "%s", err.msg);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            float want = (2.0f * x[i + n * j]) * (2.0f * x[j + n * i]);
            bad += f32_of(y)[i + n * j] != want;
        }
    printf("    y = a * transpose(a), a dying at y: y %s a's bytes, %d of %lld elements wrong\n",
           y->inplace_of == a ? "took over" : "did not take over", bad, (long long)(n * n));
    RG_CHECK(bad == 0, "%d elements wrong: y was computed in a's bytes while reading a through a transpose", bad);
    rg_exec_free(ex);
    rg_graph_free(g);
    free(x);
}

// (5) A budget below the plan is refused by rg_exec_create, before anything
// runs, with both numbers in the message; the exact size is accepted.
static void test_budget_refused_with_numbers(void) {
    float *x = random_f32(1024 * 256, 9, 1.0f);
    rg_graph *g = rg_graph_new();
    rg_error err = {0};
    rg_node *xn = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){1024, 256}, x);
    rg_node *h = rg_silu(g, rg_scale(g, xn, 0.5f));
    h = rg_add(g, h, rg_silu(g, xn));
    h->flags |= RG_NODE_OUTPUT;
    rg_plan plan;
    RG_REQUIRE(rg_graph_plan(g, 1, 0, &plan, &err) == RG_OK, "%s", err.msg);
    const size_t total = plan.buffer_bytes + plan.scratch_bytes + plan.external_bytes;
    rg_exec *ex = (rg_exec *)1;
    rg_exec_opts o = {.n_threads = 1, .budget = total / 2};
    RG_CHECK(rg_exec_create(&ex, g, &o, &err) == RG_ERR_NOMEM, "a budget of half the plan was not refused");
    RG_CHECK(ex == NULL, "a refused exec was handed out");
    char need[32], have[32];
    snprintf(need, sizeof need, "%.2f MiB", (double)total / 1048576.0);
    snprintf(have, sizeof have, "%.2f MiB", (double)(total / 2) / 1048576.0);
    RG_CHECK(strstr(err.msg, need) && strstr(err.msg, have), "the message must hold %s and %s: \"%s\"", need, have,
             err.msg);
    printf("    budget %zu of %zu bytes: \"%s\"\n", total / 2, total, err.msg);
    o.budget = total - 1;
    RG_CHECK(rg_exec_create(&ex, g, &o, &err) == RG_ERR_NOMEM && !ex, "a budget one byte short was accepted");
    o.budget = total;
    RG_CHECK(rg_exec_create(&ex, g, &o, &err) == RG_OK, "the exact budget was refused: %s", err.msg);
    if (ex) RG_CHECK(rg_exec_run(ex, 0, -1, &err) == RG_OK, "%s", err.msg);
    rg_exec_free(ex);
    rg_graph_free(g);
    free(x);
}

// (6) A non-finite loss fails the run with a message naming the first node
// holding a non-finite value: an input leaf, or a node in the middle.
static void test_non_finite_loss_names_first_node(void) {
    float bad[8] = {1, 2, 3, NAN, 5, 6, 7, 8}, p[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    rg_graph *g = rg_graph_new();
    rg_error err = {0};
    rg_node *pn = rg_param(g, "p", RG_TYPE_F32, 1, (int64_t[]){8}, p);
    rg_node *b = rg_leaf(g, "bad_input", RG_TYPE_F32, 1, (int64_t[]){8}, bad);
    rg_node *h = rg_mul(g, pn, rg_scale(g, b, 2.0f));
    RG_REQUIRE(rg_graph_backward(g, rg_sum(g, h), &err) == RG_OK, "%s", err.msg);
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1};
    RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(rg_exec_run(ex, 0, -1, &err) != RG_OK, "a NaN loss did not fail the run");
    RG_CHECK(strstr(err.msg, "'bad_input'") != NULL, "the message does not name 'bad_input': \"%s\"", err.msg);
    printf("    NaN input: \"%s\"\n", err.msg);
    rg_exec_free(ex);
    rg_graph_free(g);

    // Mid-graph: 3e38 * 10 overflows to Inf in 'overflow', then Inf - Inf is NaN.
    float big[4] = {1.0f, 2.0f, 3e38f, 4.0f};
    g = rg_graph_new();
    pn = rg_param(g, "p", RG_TYPE_F32, 1, (int64_t[]){4}, p);
    h = rg_scale(g, rg_leaf(g, "big", RG_TYPE_F32, 1, (int64_t[]){4}, big), 10.0f);
    rg_node_set_name(h, "overflow");
    h = rg_sub(g, h, h);
    RG_REQUIRE(rg_graph_backward(g, rg_sum(g, rg_mul(g, h, pn)), &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(rg_exec_run(ex, 0, -1, &err) != RG_OK, "an Inf - Inf loss did not fail the run");
    RG_CHECK(strstr(err.msg, "'overflow'") != NULL, "the message does not name 'overflow': \"%s\"", err.msg);
    printf("    overflow: \"%s\"\n", err.msg);
    rg_exec_free(ex);
    rg_graph_free(g);

    // The first non-finite node must be found as it was when it ran: here
    // 'finite' (at most 6e37) dies at 'overflow' (x100, Inf), which may take
    // over its bytes; 'finite' must not be blamed for what 'overflow' wrote.
    float big2[4] = {1.0f, 2.0f, 3e37f, 4.0f};
    g = rg_graph_new();
    pn = rg_param(g, "p", RG_TYPE_F32, 1, (int64_t[]){4}, p);
    rg_node *fin = rg_scale(g, rg_leaf(g, "big", RG_TYPE_F32, 1, (int64_t[]){4}, big2), 2.0f);
    rg_node_set_name(fin, "finite");
    h = rg_scale(g, fin, 100.0f);
    rg_node_set_name(h, "overflow");
    RG_REQUIRE(rg_graph_backward(g, rg_sum(g, rg_mul(g, h, pn)), &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(rg_exec_run(ex, 0, -1, &err) != RG_OK, "an Inf loss did not fail the run");
    RG_CHECK(strstr(err.msg, "'overflow'") != NULL && !strstr(err.msg, "'finite'"),
             "the message must name 'overflow' ('finite' holds 6e37 at most; 'overflow' %s its bytes): \"%s\"",
             h->inplace_of == fin ? "took over" : "did not take over", err.msg);
    printf("    overflow in place of a finite node: \"%s\"\n", err.msg);
    rg_exec_free(ex);
    rg_graph_free(g);
}

// (7) Determinism: a small training graph (norm, matmul, softmax, SwiGLU,
// cross-entropy and their backward) gives identical bits run twice, in a new
// exec, and twice on 3 threads.
typedef struct det_graph {
    rg_graph *g;
    rg_node *loss, *params[4];
    int n_params;
} det_graph;

static void det_build(det_graph *d, float *const *bufs, int32_t *labels, int64_t T) {
    const int64_t D = 256, F = 64, V = 48;
    rg_graph *g = d->g = rg_graph_new();
    rg_node *x = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){D, T}, bufs[0]);
    rg_node *nw = d->params[0] = rg_param(g, "norm", RG_TYPE_F32, 1, (int64_t[]){D}, bufs[1]);
    rg_node *wg = d->params[1] = rg_param(g, "gate", RG_TYPE_F32, 2, (int64_t[]){D, F}, bufs[2]);
    rg_node *wu = d->params[2] = rg_param(g, "up", RG_TYPE_F32, 2, (int64_t[]){D, F}, bufs[3]);
    rg_node *wo = d->params[3] = rg_param(g, "out", RG_TYPE_F32, 2, (int64_t[]){F, V}, bufs[4]);
    d->n_params = 4;
    rg_node *h = rg_mul(g, rg_rms_norm(g, x, 1e-5f), nw);
    rg_node *a = rg_swiglu(g, rg_mul_mat(g, wg, h), rg_mul_mat(g, wu, h));      // [F, T]
    rg_node *s = rg_soft_max(g, rg_reshape(g, a, 3, (int64_t[]){F, T / 4, 4}), NULL, false, 0.5f, 0.0f);
    rg_node *z = rg_mul_mat(g, wo, rg_add(g, rg_reshape(g, s, 2, (int64_t[]){F, T}), a));  // [V, T]
    d->loss = rg_cross_entropy_loss(g, z, rg_leaf(g, "labels", RG_TYPE_I32, 1, (int64_t[]){T}, labels), -100);
}

static void det_run(det_graph *d, int n_threads, float *out, rg_error *err, rg_status *st) {
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = n_threads};
    *st = rg_exec_create(&ex, d->g, &o, err);
    if (!*st) *st = rg_exec_run(ex, 0, -1, err);
    if (!*st) {
        *out++ = f32_of(d->loss)[0];
        for (int k = 0; k < d->n_params; k++) {
            int64_t m = rg_tensor_nelements(&d->params[k]->grad->t);
            memcpy(out, d->params[k]->grad->t.data, sizeof(float) * (size_t)m);
            out += m;
        }
    }
    rg_exec_free(ex);
}

static void test_determinism(void) {
    const int64_t T = quick() ? 64 : 320, D = 256, F = 64, V = 48;
    float *bufs[5] = {random_f32(D * T, 10, 1.0f), random_f32(D, 11, 1.0f), random_f32(D * F, 12, 0.06f),
                      random_f32(D * F, 13, 0.06f), random_f32(F * V, 14, 0.1f)};
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)T);
    for (int64_t t = 0; t < T; t++) labels[t] = t % 7 == 3 ? -100 : (int32_t)(rg_rng_u64(42, 15, (uint64_t)t) % V);
    det_graph d;
    det_build(&d, bufs, labels, T);
    rg_error err = {0};
    RG_REQUIRE(rg_graph_backward(d.g, d.loss, &err) == RG_OK, "%s", err.msg);
    const size_t n = 1 + D + 2 * D * F + F * V;
    float *r[5];
    rg_status st[5];
    for (int k = 0; k < 5; k++) r[k] = calloc(n, sizeof(float));
    for (int k = 0; k < 5; k++) {
        det_run(&d, k < 3 ? 1 : 3, r[k], &err, &st[k]);  // 0, 1: one exec each; 2: a third
        RG_CHECK(st[k] == RG_OK, "run %d: %s", k, err.msg);
    }
    // one exec, two runs, on 1 and on 3 threads
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 3};
    float *twice = calloc(n, sizeof(float));
    bool same3 = false;
    if (rg_exec_create(&ex, d.g, &o, &err) == RG_OK && rg_exec_run(ex, 0, -1, &err) == RG_OK) {
        float l0 = f32_of(d.loss)[0];
        memcpy(twice, d.params[1]->grad->t.data, sizeof(float) * D * F);
        same3 = rg_exec_run(ex, 0, -1, &err) == RG_OK && f32_of(d.loss)[0] == l0 &&
                memcmp(twice, d.params[1]->grad->t.data, sizeof(float) * D * F) == 0;
    }
    rg_exec_free(ex);
    bool same1 = memcmp(r[0], r[1], n * 4) == 0 && memcmp(r[0], r[2], n * 4) == 0;
    bool same3b = memcmp(r[3], r[4], n * 4) == 0;
    double d13 = 0;
    for (size_t i = 0; i < n; i++) d13 = fmax(d13, fabs((double)r[0][i] - r[3][i]));
    RG_CHECK(same1, "1 thread: runs in three execs differ");
    RG_CHECK(same3b && same3, "3 threads: two runs differ");
    RG_CHECK(d13 <= 1e-5, "1 and 3 threads differ by %.3e", d13);
    printf("    loss %.6f and %zu gradient values: 1 thread x3 %s, 3 threads x2 %s (same exec %s), 1 vs 3 threads max diff %.1e\n",
           (double)r[0][0], n - 1, same1 ? "identical" : "DIFFER", same3b ? "identical" : "DIFFER",
           same3 ? "identical" : "DIFFER", d13);
    for (int k = 0; k < 5; k++) free(r[k]), free(bufs[k]);
    free(twice), free(labels);
    rg_graph_free(d.g);
}

// (8) Views of a leaf read the right elements, directly through their strides
// and through a CONT of each.
typedef struct view_case {
    const char *what;
    rg_node *v, *c;
    int64_t ne0, ne1, ne2;
    int64_t (*expect)(int64_t j0, int64_t j1, int64_t j2);  // index into a [4, 3, 2]
} view_case;

static int64_t e_reshape(int64_t j0, int64_t j1, int64_t j2) { return j0 + 6 * j1 + 0 * j2; }
static int64_t e_permute(int64_t j0, int64_t j1, int64_t j2) { return j2 + 4 * j0 + 12 * j1; }
static int64_t e_transpose(int64_t j0, int64_t j1, int64_t j2) { return j1 + 6 * j0 + 0 * j2; }
static int64_t e_window(int64_t j0, int64_t j1, int64_t j2) { return 5 + j0 + 4 * j1 + 0 * j2; }
static int64_t e_view_t(int64_t j0, int64_t j1, int64_t j2) { return 1 + j1 + 4 * j0 + 0 * j2; }
static int64_t e_perm_of_reshape(int64_t j0, int64_t j1, int64_t j2) { return j2 + 2 * j0 + 8 * j1; }

static void test_views_read_the_right_elements(void) {
    float a[24];
    for (int i = 0; i < 24; i++) a[i] = (float)i;
    rg_graph *g = rg_graph_new();
    rg_error err = {0};
    rg_node *an = rg_leaf(g, "a", RG_TYPE_F32, 3, (int64_t[]){4, 3, 2}, a);
    rg_node *r64 = rg_reshape(g, an, 2, (int64_t[]){6, 4});
    view_case vc[] = {
        {"reshape [4,3,2] -> [6,4]", r64, NULL, 6, 4, 1, e_reshape},
        {"permute (2,0,1,3) -> [3,2,4]", rg_permute(g, an, 2, 0, 1, 3), NULL, 3, 2, 4, e_permute},
        {"transpose of the reshape -> [4,6]", rg_transpose(g, r64), NULL, 4, 6, 1, e_transpose},
        {"view [2,2] at (1,1), rows of 4", rg_view(g, an, 2, (int64_t[]){2, 2}, (size_t[]){4, 16}, 20), NULL, 2, 2, 1,
         e_window},
        {"transpose of a view [2,3] at 1", rg_transpose(g, rg_view(g, an, 2, (int64_t[]){2, 3}, (size_t[]){4, 16}, 4)),
         NULL, 3, 2, 1, e_view_t},
        {"permute (2,0,1,3) of reshape [2,4,3]",
         rg_permute(g, rg_reshape(g, an, 3, (int64_t[]){2, 4, 3}), 2, 0, 1, 3), NULL, 4, 3, 2, e_perm_of_reshape},
    };
    const int nv = (int)(sizeof vc / sizeof vc[0]);
    for (int k = 0; k < nv; k++) {
        RG_REQUIRE(vc[k].v, "%s: %s", vc[k].what, rg_graph_error(g, &err) ? err.msg : "no node");
        vc[k].v->flags |= RG_NODE_OUTPUT;
        vc[k].c = rg_cont(g, vc[k].v);
        vc[k].c->flags |= RG_NODE_OUTPUT;
    }
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 1};
    RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK, "%s", err.msg);
    for (int k = 0; k < nv; k++) {
        const rg_tensor *t = &vc[k].v->t, *ct = &vc[k].c->t;
        RG_CHECK(t->ne[0] == vc[k].ne0 && t->ne[1] == vc[k].ne1 && t->ne[2] == vc[k].ne2,
                 "%s: shape [%lld, %lld, %lld]", vc[k].what, (long long)t->ne[0], (long long)t->ne[1],
                 (long long)t->ne[2]);
        int wrong = 0, wrong_c = 0;
        for (int64_t j2 = 0; j2 < vc[k].ne2; j2++)
            for (int64_t j1 = 0; j1 < vc[k].ne1; j1++)
                for (int64_t j0 = 0; j0 < vc[k].ne0; j0++) {
                    float want = a[vc[k].expect(j0, j1, j2)];
                    wrong += *(const float *)rg_tensor_at(t, j0, j1, j2, 0) != want;
                    wrong_c += f32_of(vc[k].c)[j0 + vc[k].ne0 * (j1 + vc[k].ne1 * j2)] != want;
                }
        RG_CHECK(wrong == 0 && wrong_c == 0 && rg_tensor_is_contiguous(ct),
                 "%s: %d elements wrong through the view, %d through its cont", vc[k].what, wrong, wrong_c);
        printf("    %-38s %s\n", vc[k].what, wrong || wrong_c ? "WRONG" : "right elements (view and cont)");
    }
    rg_exec_free(ex);
    rg_graph_free(g);
}

// (9) Backward of a loss that does not depend on a parameter is an error, and
// so is a second backward.
static void test_backward_misuse_is_an_error(void) {
    float x[4] = {1, 2, 3, 4}, p[4] = {1, 1, 1, 1};
    rg_graph *g = rg_graph_new();
    rg_error err = {0};
    rg_node *pn = rg_param(g, "p", RG_TYPE_F32, 1, (int64_t[]){4}, p);
    rg_node *xn = rg_leaf(g, "x", RG_TYPE_F32, 1, (int64_t[]){4}, x);
    rg_node *l0 = rg_sum(g, rg_scale(g, xn, 2.0f));
    rg_node_set_name(l0, "loss without params");
    RG_CHECK(rg_graph_backward(g, l0, &err) != RG_OK, "backward of a loss that needs no parameter succeeded");
    RG_CHECK(strstr(err.msg, "loss without params") != NULL, "the message does not name the loss: \"%s\"", err.msg);
    printf("    independent loss: \"%s\"\n", err.msg);
    rg_node *vec = rg_mul(g, xn, pn);
    RG_CHECK(rg_graph_backward(g, vec, &err) != RG_OK, "backward of a [4] loss succeeded");
    printf("    non-scalar loss: \"%s\"\n", err.msg);
    rg_node *l1 = rg_sum(g, vec);
    RG_CHECK(rg_graph_backward(g, l1, &err) == RG_OK, "%s", err.msg);
    int n_after_first = g->n_nodes;
    RG_CHECK(rg_graph_backward(g, l1, &err) != RG_OK, "a second backward succeeded");
    RG_CHECK(g->n_nodes == n_after_first, "the failed second backward added %d nodes", g->n_nodes - n_after_first);
    printf("    second backward: \"%s\"\n", err.msg);
    rg_graph_free(g);
}

// (12) The profile counts every node once per run, a group of products sharing
// one section as its members (split by weight bytes), by op and weight type,
// and its times add up to no more than the runs took.
static void test_profile_counts_nodes(void) {
    rg_graph *g = rg_graph_new();
    rg_error err = {0};
    float *w1 = random_f32(64 * 32, 1, 1.0f), *w2 = random_f32(64 * 16, 2, 1.0f), *x = random_f32(64, 3, 1.0f);
    uint16_t w3[64 * 8] = {0};
    rg_node *xn = rg_leaf(g, "x", RG_TYPE_F32, 2, (int64_t[]){64, 1}, x);
    rg_node *a = rg_mul_mat(g, rg_leaf(g, "w1", RG_TYPE_F32, 2, (int64_t[]){64, 32}, w1), xn);  // [32, 1]
    rg_node *b = rg_mul_mat(g, rg_leaf(g, "w2", RG_TYPE_F32, 2, (int64_t[]){64, 16}, w2), xn);  // [16, 1]
    rg_node *c = rg_mul_mat(g, rg_leaf(g, "w3", RG_TYPE_F16, 2, (int64_t[]){64, 8}, w3), xn);   // [8, 1]
    rg_node *y = rg_add(g, rg_add(g, rg_sum(g, a), rg_sum(g, b)), rg_sum(g, c));
    RG_REQUIRE(y && rg_graph_error(g, &err) == RG_OK, "graph: %s", err.msg);
    rg_exec_profile prof = {0};
    rg_exec *ex = NULL;
    rg_exec_opts o = {.n_threads = 2, .profile = &prof};
    RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
    for (int r = 0; r < 3; r++) RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(prof.runs == 3, "runs %lld, expected 3", (long long)prof.runs);
    RG_CHECK(prof.op_n[RG_OP_MUL_MAT] == 9, "MUL_MAT counted %lld times, expected 9", (long long)prof.op_n[RG_OP_MUL_MAT]);
    RG_CHECK(prof.op_n[RG_OP_SUM] == 9 && prof.op_n[RG_OP_ADD] == 6, "SUM %lld, ADD %lld: expected 9 and 6",
             (long long)prof.op_n[RG_OP_SUM], (long long)prof.op_n[RG_OP_ADD]);
    RG_CHECK(prof.mm_n[RG_TYPE_F32] == 6 && prof.mm_n[RG_TYPE_F16] == 3, "MUL_MAT by type: F32 %lld, F16 %lld",
             (long long)prof.mm_n[RG_TYPE_F32], (long long)prof.mm_n[RG_TYPE_F16]);
    RG_CHECK(prof.mm_bytes[RG_TYPE_F32] == 3.0 * 4 * 64 * 48 && prof.mm_bytes[RG_TYPE_F16] == 3.0 * 2 * 64 * 8,
             "weight bytes F32 %.0f, F16 %.0f", prof.mm_bytes[RG_TYPE_F32], prof.mm_bytes[RG_TYPE_F16]);
    double sum = 0, mm = 0;
    for (int op = 0; op < RG_OP_COUNT; op++) sum += prof.op_s[op];
    for (int t = 0; t < RG_TYPE_COUNT; t++) mm += prof.mm_s[t];
    RG_CHECK(sum > 0 && sum <= prof.run_s, "node seconds %.3g against %.3g for the runs", sum, prof.run_s);
    RG_CHECK(fabs(mm - prof.op_s[RG_OP_MUL_MAT]) <= 1e-12 + 1e-9 * mm, "MUL_MAT by type %.9g, by op %.9g", mm,
             prof.op_s[RG_OP_MUL_MAT]);
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    RG_REQUIRE(f, "fmemopen");
    rg_exec_profile_print(&prof, f);
    fclose(f);
    RG_CHECK(strstr(buf, "3 runs") && strstr(buf, "mul_mat") && strstr(buf, "MUL_MAT f16"), "printed:\n%s", buf);
    rg_exec_free(ex);
    rg_graph_free(g);
    free(w1), free(w2), free(x);
}

// (13) Execs sharing an rg_exec_mem, one after another: the memory grows to
// the largest plan and is kept; a leaf without data starts as zeros even when
// the previous exec left other bytes there; results equal an exec's own memory.
static rg_graph *scaled_sum_graph(int64_t n, float *x, rg_node **acc, rg_node **out) {
    rg_graph *g = rg_graph_new();
    rg_node *xn = rg_leaf(g, "x", RG_TYPE_F32, 1, (int64_t[]){n}, x);
    *acc = rg_leaf(g, "acc", RG_TYPE_F32, 1, (int64_t[]){n}, NULL);  // bytes in the buffer, zeroed
    *out = rg_add(g, rg_scale(g, xn, 3.0f), *acc);
    (*out)->flags |= RG_NODE_OUTPUT;
    return g;
}

static void test_exec_mem_is_reused(void) {
    rg_exec_mem mem = {0};
    rg_error err = {0};
    size_t caps[3];
    static const int64_t ns[3] = {4096, 65536, 1024};
    for (int r = 0; r < 3; r++) {
        const int64_t n = ns[r];
        float *x = random_f32(n, 20 + (uint64_t)r, 1.0f);
        rg_node *acc, *out;
        rg_graph *g = scaled_sum_graph(n, x, &acc, &out);
        rg_exec *ex = NULL;
        rg_exec_opts o = {.n_threads = 2, .mem = &mem};
        RG_REQUIRE(rg_exec_create(&ex, g, &o, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK, "%s", err.msg);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) bad += f32_of(out)[i] != 3.0f * x[i];
        RG_CHECK(bad == 0, "n = %lld: %d outputs differ from 3x (the zeroed leaf held old bytes?)", (long long)n, bad);
        caps[r] = mem.buffer_cap;
        RG_CHECK(mem.buffer_cap >= rg_exec_plan(ex)->buffer_bytes, "capacity %zu below the plan's %zu", mem.buffer_cap,
                 rg_exec_plan(ex)->buffer_bytes);
        memset(mem.buffer, 0x7f, mem.buffer_cap);  // garbage for the next exec to find
        rg_exec_free(ex);
        RG_CHECK(mem.buffer != NULL, "the memory was freed with the exec");
        rg_graph_free(g);
        free(x);
    }
    RG_CHECK(caps[1] > caps[0] && caps[2] == caps[1], "capacities %zu, %zu, %zu: expected growth, then kept", caps[0],
             caps[1], caps[2]);
    rg_exec_mem_free(&mem);
    RG_CHECK(!mem.buffer && !mem.buffer_cap, "rg_exec_mem_free left memory behind");
}

static const rg_test_case cases[] = {
    RG_TEST(test_gradient_of_reused_input_is_summed),
    RG_TEST(test_frozen_leaves_get_no_gradient),
    RG_TEST(test_grad_bytes_count_view_gradients),
    RG_TEST(test_shape_errors_name_op_and_shapes),
    RG_TEST(test_planner_reuses_memory),
    RG_TEST(test_inplace_respects_views_of_the_source),
    RG_TEST(test_budget_refused_with_numbers),
    RG_TEST(test_non_finite_loss_names_first_node),
    RG_TEST(test_determinism),
    RG_TEST(test_views_read_the_right_elements),
    RG_TEST(test_backward_misuse_is_an_error),
    RG_TEST(test_profile_counts_nodes),
    RG_TEST(test_exec_mem_is_reused),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
