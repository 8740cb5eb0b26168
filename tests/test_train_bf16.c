// test_train_bf16.c - training.compute_dtype=bf16 (train/compute.h): the step's products on the
// BF16 path of cpu/gemm_tiles.h, on tiny llama models in BF16 and F32 and a Q4_K base with LoRA.
//
//   - auto resolves by the weights: bf16 for the BF16 model, f32 for the F32 model and the Q4_K base;
//   - only a weight's products round: the attention's MUL_MAT and OUT_PROD of two activations keep the
//     F32 kernel's bits under bf16;
//   - one MUL_MAT and one OUT_PROD of the step graph (a BF16 weight, a Q4_K weight decoded to BF16,
//     an F32 operand) give exactly rg_gemm_tiles_ref's bits with bf16, and exactly the F32 SGEMM's
//     with f32 (and the two differ: the check can fail);
//   - bf16 trains: over 4 steps on one row the loss falls, and each step's loss and gradient norm is
//     within 4u = 1.6e-2 relative (u = 2^-8, BF16's unit roundoff) of the f32 run's, the bound the
//     CUDA tensor path is held to (test_train_device); also with the fused cross-entropy (LINEAR_CE);
//   - f32 gives the bits of a run without the key (auto resolving to f32) for the F32 model and
//     the Q4_K base;
//   - bf16's losses, norms and weights are the same bits on 1 and 2 threads;
//   - the Q4_K base's frozen weights held as BF16 tiles (cpu/tiles_cache.h) give the bits of the run
//     without them, whole or over a cap, each packed once and read by every later step.
// RG_TEST_QUICK (the sanitizer runs): 2 training steps instead of 4.
// main sets RG_TILES_EMULATE=1 before anything asks for the path, so a CPU without AMX or
// AVX512_BF16 runs the emulated tiles (the AMX order; slow); a CPU with one runs its own path,
// held to the reference of that path.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/gemm.h"
#include "cpu/gemm_tiles.h"
#include "cpu/tiles_cache.h"
#include "cpu/cpu_ops.h"
#include "graph/ops.h"
#include "model/model.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "train/compute.h"
#include "train_rows.h"

enum { T = 32, STEPS = 4 };

// Two packed documents, some positions without a target.
static const tt_rows ROWS = {.T = T, .split = 20, .mod = 7, .rem = 3, .mul = 0x9E3779B9u, .add = 3};

typedef enum { M_BF16, M_F32, M_Q4K } model_kind;
static const char *const kind_name[] = {"bf16 llama", "f32 llama", "q4_K llama"};

static char model_path[256];

static rg_model *tiny(model_kind k) {
    snprintf(model_path, sizeof model_path, "/tmp/rg_test_train_bf16_%d_%d.gguf", (int)getpid(), (int)k);
    rg_tiny_config tc = {.arch = "llama", .type = k == M_BF16 ? RG_TYPE_BF16 : RG_TYPE_F32, .seed = 9};
    rg_error err = {0};
    rg_model *m = tt_tiny(model_path, &tc, k == M_Q4K ? RG_TYPE_Q4_K : RG_TYPE_F32, &err);
    RG_CHECK(m, "tiny %s: %s", kind_name[k], err.msg);
    return m;
}

static void done_model(rg_model *m) {
    rg_model_free(m);
    unlink(model_path);
}

// Full fine-tuning of the BF16 and F32 models, LoRA on the Q4_K base; `dtype` the key (-1: left at its default).
static rg_train_config config(model_kind k, int dtype, int threads) {
    rg_train_config c = tt_config(k == M_Q4K ? RG_TRAIN_LORA : RG_TRAIN_FULL, T);
    c.flash_attn = RG_FLASH_ATTN_OFF;  // the materialized attention: its products are MUL_MATs too
    c.fused_ce = RG_FUSED_CE_OFF;
    c.threads = threads;
    if (k == M_Q4K) c.lr = 3e-3;       // LoRA starts from B = 0: a larger step to see the loss move
    if (dtype >= 0) c.compute_dtype = dtype;
    return c;
}

static rg_train_state *state(const rg_model *m, const rg_train_config *c) {
    rg_error err = {0};
    rg_train_state *s = tt_state(m, c, 0, &err);
    RG_CHECK(s, "state: %s", err.msg);
    return s;
}

// `steps` optimizer steps, each on row 0 (so the loss must fall); losses and norms out.
static bool run_steps(rg_train_state *s, int steps, double *loss, double *norm) {
    rg_error err = {0};
    for (int i = 0; i < steps; i++) {
        double lr;
        bool skipped;
        if (tt_micro(&ROWS, s, 0, &loss[i], &err) || rg_train_state_step(s, &norm[i], &lr, &skipped, &err) || skipped) {
            RG_CHECK(0, "step %d: %s (skipped %d)", i, err.msg, (int)skipped);
            return false;
        }
    }
    return true;
}

static bool same_weights(const rg_train_state *a, const rg_train_state *b) {
    for (int k = 0; k < a->n_tensors; k++) {
        const rg_train_tensor *x = &a->tensors[k], *y = &b->tensors[k];
        if (memcmp(x->w, y->w, (size_t)x->nel * rg_type_get(x->type)->type_size)) return false;
    }
    return true;
}

// ------------------------------------------------------------------ auto ---

static void test_auto_by_weights(void) {
    static const struct {
        model_kind k;
        uint32_t type;
        int dtype;
    } rows[] = {{M_BF16, RG_TYPE_BF16, RG_COMPUTE_BF16}, {M_F32, RG_TYPE_F32, RG_COMPUTE_F32},
                {M_Q4K, RG_TYPE_Q4_K, RG_COMPUTE_F32}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        rg_model *m = tiny(rows[i].k);
        if (!m) continue;
        const uint32_t wt = rg_train_product_weight_type(m);
        rg_train_config c = config(rows[i].k, -1, 2);
        rg_train_state *s = state(m, &c);
        if (s) {
            char want[64];
            snprintf(want, sizeof want, "bf16 on %s", rg_tile_path_name(rg_gemm_tiles_path()));
            const char *where = rows[i].dtype == RG_COMPUTE_BF16 ? want : "f32";
            printf("    %s: weights %s, products: %s (%s)\n", kind_name[rows[i].k], rg_type_get(wt)->name,
                   s->products.where, s->products.why);
            RG_CHECK(wt == rows[i].type && s->products.dtype == rows[i].dtype && !strcmp(s->products.where, where) &&
                         s->products.bf16_cpu == (rows[i].dtype == RG_COMPUTE_BF16),
                     "%s: weights %s, resolved %d '%s', want %s and '%s'", kind_name[rows[i].k], rg_type_get(wt)->name,
                     s->products.dtype, s->products.where, rg_type_get(rows[i].type)->name, where);
        }
        rg_train_state_free(s);
        done_model(m);
    }
}

// ---------------------------------------------------- one node's products ---

// A MUL_MAT or OUT_PROD node (2-D operands) as a gemm.h batch, writing C into `out` ([M rows, N], rows of N).
typedef struct node_gemm {
    const rg_node *n;
    float *out;
} node_gemm;

static int64_t fl(size_t nb) { return (int64_t)(nb / sizeof(float)); }

static void node_get(const void *ctx, int64_t p, rg_gemm_problem *prob) {
    const node_gemm *g = ctx;
    const rg_tensor *w = &g->n->src[0]->t, *x = &g->n->src[1]->t;
    (void)p;
    memset(prob, 0, sizeof *prob);
    prob->b.type = w->type;
    if (g->n->op == RG_OP_MUL_MAT) {  // C(n, m) = sum_k x[k, n] w[k, m]
        prob->a = x->data, prob->a_rs = fl(x->nb[1]), prob->a_cs = fl(x->nb[0]);
        prob->c = g->out, prob->ldc = w->ne[1];
        if (w->type == RG_TYPE_F32) prob->b.data = w->data, prob->b.rs = fl(w->nb[0]), prob->b.cs = fl(w->nb[1]);
        else prob->b.data = w->data, prob->b.row_stride = w->nb[1], prob->b.rows_along_k = true;
    } else {  // OUT_PROD: C(j, i) = sum_k b[j, k] a[i, k]
        prob->a = x->data, prob->a_rs = fl(x->nb[0]), prob->a_cs = fl(x->nb[1]);
        prob->c = g->out, prob->ldc = w->ne[0];
        if (w->type == RG_TYPE_F32) prob->b.data = w->data, prob->b.rs = fl(w->nb[1]), prob->b.cs = fl(w->nb[0]);
        else prob->b.data = w->data, prob->b.row_stride = w->nb[1], prob->b.rows_along_k = false;
    }
}

static rg_gemm_batch node_batch(const node_gemm *g) {
    const rg_tensor *w = &g->n->src[0]->t, *x = &g->n->src[1]->t;
    rg_gemm_batch bt = {0};
    bt.n_problems = 1, bt.get = node_get, bt.ctx = g, bt.b_type = w->type;
    if (g->n->op == RG_OP_MUL_MAT) bt.M = x->ne[1], bt.N = w->ne[1], bt.K = w->ne[0], bt.b_rows_along_k = true;
    else bt.M = x->ne[0], bt.N = w->ne[0], bt.K = w->ne[1];
    return bt;
}

static bool two_d(const rg_node *n) {
    for (int i = 0; i < 2; i++)
        if (n->src[i]->t.ne[2] != 1 || n->src[i]->t.ne[3] != 1) return false;
    return n->src[1]->t.type == RG_TYPE_F32 && n->t.nb[0] == sizeof(float);
}

// The first node of `op` whose src[0] has type wtype (2-D), or -1.
static int find_node(const rg_graph *g, rg_op op, uint32_t wtype) {
    for (int i = 0; i < g->n_nodes; i++) {
        const rg_node *n = g->nodes[i];
        if (n->op == op && n->src[0]->t.type == wtype && two_d(n)) return i;
    }
    return -1;
}

// Row 0 into the step graph's inputs (as rg_train_state_micro binds a row).
static void bind_row0(rg_train_state *s) {
    int32_t ids[T], labels[T], pos[T], seg[T];
    tt_make_row(&ROWS, 0, ids, labels, pos, seg);
    int64_t n = 0;
    for (int i = 0; i < T; i++) n += labels[i] != -100;
    memcpy(rg_exec_input(s->ex, s->ids), ids, sizeof ids);
    memcpy(rg_exec_input(s->ex, s->labels), labels, sizeof labels);
    memcpy(rg_exec_input(s->ex, s->pos), pos, sizeof pos);
    float *mask = s->mask ? rg_exec_input(s->ex, s->mask) : NULL;
    for (int q = 0; mask && q < T; q++)
        for (int k = 0; k < T; k++) mask[q * T + k] = seg[k] == seg[q] ? 0.0f : -INFINITY;
    if (s->seg) memcpy(rg_exec_input(s->ex, s->seg), seg, sizeof seg);
    s->ce->fp[0] = s->loss_back->fp[0] = (float)(1.0 / (double)n);
}

// Runs the step graph up to node `idx` and holds its output to the path's product of its own
// inputs: bf16: rg_gemm_tiles_ref of the tile path; f32: the F32 SGEMM (RG_SGEMM_AUTO). Returns
// how many elements differ from the other path's product (so a test sees that the two differ).
static int64_t check_node(rg_train_state *s, int idx, bool bf16, const char *what) {
    rg_error err = {0};
    bind_row0(s);
    RG_CHECK(rg_exec_run(s->ex, 0, idx + 1, &err) == RG_OK, "%s: run: %s", what, err.msg);
    const rg_node *n = s->g->nodes[idx];
    node_gemm g = {n, NULL};
    rg_gemm_batch bt = node_batch(&g);
    const size_t cnt = (size_t)(bt.M * bt.N);
    float *ref = malloc(cnt * sizeof(float)), *f32 = malloc(cnt * sizeof(float));
    rg_threadpool *pool = NULL;
    if (!ref || !f32 || rg_threadpool_create(&pool, 2, &err) != RG_OK) {
        RG_CHECK(0, "%s: setup: %s", what, err.msg);
        free(ref), free(f32);
        return 0;
    }
    g.out = ref;
    RG_CHECK(rg_gemm_tiles_ref(rg_gemm_tiles_path(), &bt, &err) == RG_OK, "%s: ref: %s", what, err.msg);
    g.out = f32;
    const size_t ws = rg_gemm_work_size(RG_SGEMM_AUTO, &bt, 2);
    void *work = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
    RG_CHECK(rg_gemm_run(pool, RG_SGEMM_AUTO, &bt, work, ws, &err) == RG_OK, "%s: sgemm: %s", what, err.msg);
    const float *want = bf16 ? ref : f32, *other = bf16 ? f32 : ref;
    int64_t off = 0, differ = 0;
    const float *y = n->t.data;
    const int64_t ldy = fl(n->t.nb[1]);
    for (int64_t i = 0; i < bt.M; i++)      // C(i, j) = y[j, i]
        for (int64_t j = 0; j < bt.N; j++) {
            const float v = y[i * ldy + j];
            off += memcmp(&v, &want[i * bt.N + j], sizeof v) != 0;
            differ += memcmp(&v, &other[i * bt.N + j], sizeof v) != 0;
        }
    printf("    %s '%s' [%lld x %lld, K %lld, %s B]: %s; %lld of %zu elements differ from the %s product\n", what,
           n->t.name[0] ? n->t.name : "(unnamed)", (long long)bt.M, (long long)bt.N, (long long)bt.K, rg_type_get(bt.b_type)->name,
           off ? "NOT the expected bits" : bf16 ? "the BF16 reference's bits" : "the F32 SGEMM's bits", (long long)differ,
           cnt, bf16 ? "F32" : "BF16");
    RG_CHECK(off == 0, "%s: %lld of %zu elements differ from the %s product", what, (long long)off, cnt,
             bf16 ? "BF16 reference" : "F32 SGEMM");
    free(ref), free(f32), free(work);
    rg_threadpool_free(pool);
    return differ;
}

// Both dtypes on one model: the first MUL_MAT and OUT_PROD with a weight of the model's type, and
// the first OUT_PROD with an F32 `a`.
static void node_products(model_kind k, uint32_t wtype) {
    rg_model *m = tiny(k);
    if (!m) return;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        rg_train_config c = config(k, bf16 ? RG_COMPUTE_BF16 : RG_COMPUTE_F32, 2);
        rg_train_state *s = state(m, &c);
        if (!s) continue;
        const struct {
            rg_op op;
            uint32_t type;
        } pick[] = {{RG_OP_MUL_MAT, wtype}, {RG_OP_OUT_PROD, wtype}, {RG_OP_OUT_PROD, RG_TYPE_F32}};
        for (int p = 0; p < (wtype == RG_TYPE_F32 ? 2 : 3); p++) {
            const int idx = find_node(s->g, pick[p].op, pick[p].type);
            char what[96];
            snprintf(what, sizeof what, "%s %s, %s %s", kind_name[k], bf16 ? "bf16" : "f32", rg_op_name(pick[p].op),
                     rg_type_get(pick[p].type)->name);
            RG_CHECK(idx >= 0, "%s: no such node in the step graph", what);
            if (idx < 0) continue;
            const int64_t differ = check_node(s, idx, bf16, what);
            RG_CHECK(differ > 0, "%s: the BF16 and F32 products are the same bits: the check cannot tell them apart", what);
        }
        rg_train_state_free(s);
    }
    done_model(m);
}

// Under bf16 only a weight's products round (ops_matmul.c's node_bf16): the first MUL_MAT and OUT_PROD
// of two activations (the materialized attention's) give exactly the F32 kernel's bits on the same
// inputs, and the first weight's MUL_MAT does not (so the check can fail).
static void test_activation_products_keep_f32(void) {
    rg_model *m = tiny(M_BF16);
    if (!m) return;
    rg_train_config c = config(M_BF16, RG_COMPUTE_BF16, 2);
    rg_train_state *s = state(m, &c);
    int pick[3] = {-1, -1, -1};  // attention MUL_MAT, attention OUT_PROD, weight MUL_MAT
    for (int i = 0; s && i < s->g->n_nodes; i++) {
        const rg_node *n = s->g->nodes[i];
        const rg_node *a = n->src[0] && n->src[0]->view_of ? n->src[0]->view_of : n->src[0];
        if (n->op != RG_OP_MUL_MAT && n->op != RG_OP_OUT_PROD) continue;
        const bool leaf = a->op == RG_OP_NONE, marked = n->op == RG_OP_OUT_PROD && n->ip[1] == RG_OUT_PROD_WEIGHT_GRAD;
        const int k = n->op == RG_OP_MUL_MAT ? (leaf ? 2 : 0) : (!leaf && !marked ? 1 : -1);
        if (k >= 0 && pick[k] < 0) pick[k] = i;
    }
    for (int k = 0; s && k < 3; k++) {
        static const char *const what[3] = {"attention MUL_MAT", "attention OUT_PROD", "weight MUL_MAT"};
        RG_CHECK(pick[k] >= 0, "no %s in the step graph", what[k]);
        if (pick[k] < 0) continue;
        rg_error err = {0};
        bind_row0(s);
        RG_CHECK(rg_exec_run(s->ex, 0, pick[k] + 1, &err) == RG_OK, "%s: run: %s", what[k], err.msg);
        rg_node *n = s->g->nodes[pick[k]];
        const size_t bytes = rg_tensor_span(&n->t);
        void *got = malloc(bytes);
        const bool mm = n->op == RG_OP_MUL_MAT;
        const size_t ws = mm ? cpu_mul_mat_work(n, rg_threadpool_size(s->pool)) : cpu_out_prod_work(n, rg_threadpool_size(s->pool));
        void *work = aligned_alloc(64, (ws + 64) / 64 * 64);
        memcpy(got, n->t.data, bytes);
        rg_exec_ctx f32 = {s->pool, work, ws, false, NULL, NULL, false, NULL};
        RG_CHECK((mm ? cpu_mul_mat(&f32, n, &err) : cpu_out_prod(&f32, n, &err)) == RG_OK, "%s: f32 kernel: %s", what[k], err.msg);
        const bool same = !memcmp(got, n->t.data, bytes);
        printf("    %s '%s' under bf16: %s the F32 kernel's bits\n", what[k], n->t.name, same ? "exactly" : "not");
        RG_CHECK(same == (k < 2), "%s under bf16: %s the F32 kernel's bits", what[k], same ? "unexpectedly" : "not");
        free(got), free(work);
    }
    rg_train_state_free(s);
    done_model(m);
}

static void test_nodes_bf16_model(void) { node_products(M_BF16, RG_TYPE_BF16); }
static void test_nodes_q4k_base(void) { node_products(M_Q4K, RG_TYPE_Q4_K); }
static void test_nodes_f32_model(void) { node_products(M_F32, RG_TYPE_F32); }

// -------------------------------------------------------------- training ---

// 4u: a step's loss and gradient norm with every product's operands rounded to BF16.
#define REL_BOUND (4.0 * 0x1p-8)

static void trains(model_kind k, bool fused) {
    rg_model *m = tiny(k);
    if (!m) return;
    const int steps = getenv("RG_TEST_QUICK") ? 2 : STEPS;
    double loss[2][STEPS], norm[2][STEPS];
    bool ok = true;
    for (int bf16 = 0; bf16 < 2 && ok; bf16++) {
        rg_train_config c = config(k, bf16 ? RG_COMPUTE_BF16 : RG_COMPUTE_F32, 2);
        if (fused) c.fused_ce = RG_FUSED_CE_ON;
        rg_train_state *s = state(m, &c);
        ok = s && s->fused_ce == fused && run_steps(s, steps, loss[bf16], norm[bf16]);
        rg_train_state_free(s);
    }
    if (ok) {
        double worst_l = 0, worst_n = 0;
        bool any_differs = false;
        for (int i = 0; i < steps; i++) {
            const double el = fabs(loss[1][i] - loss[0][i]) / fabs(loss[0][i]);
            const double en = fabs(norm[1][i] - norm[0][i]) / norm[0][i];
            printf("    %s%s step %d: loss f32 %.7f bf16 %.7f (rel %.1e), grad norm %.6f vs %.6f (rel %.1e)\n",
                   kind_name[k], fused ? " fused CE" : "", i, loss[0][i], loss[1][i], el, norm[0][i], norm[1][i], en);
            worst_l = fmax(worst_l, el), worst_n = fmax(worst_n, en);
            any_differs |= loss[0][i] != loss[1][i];
        }
        RG_CHECK(loss[1][steps - 1] < loss[1][0], "bf16: the loss did not fall: %.7f -> %.7f", loss[1][0],
                 loss[1][steps - 1]);
        RG_CHECK(worst_l <= REL_BOUND && worst_n <= REL_BOUND, "bf16 vs f32: losses %.2e, norms %.2e relative (bound %.2e)",
                 worst_l, worst_n, REL_BOUND);
        RG_CHECK(any_differs, "bf16's losses are f32's bits: the products did not change");
    }
    done_model(m);
}

static void test_trains_bf16_model(void) { trains(M_BF16, false); }
static void test_trains_bf16_model_fused_ce(void) { trains(M_BF16, true); }
static void test_trains_f32_model(void) { trains(M_F32, false); }
static void test_trains_q4k_base_lora(void) { trains(M_Q4K, false); }

// f32 against the key left out: auto is f32 for these weights, and the bits are the same.
static void f32_same_bits(model_kind k) {
    rg_model *m = tiny(k);
    if (!m) return;
    rg_train_config cf = config(k, RG_COMPUTE_F32, 2), cd = config(k, -1, 2);
    rg_train_state *a = state(m, &cf), *b = a ? state(m, &cd) : NULL;
    double la[2], lb[2], na[2], nb[2];
    if (a && b && run_steps(a, 2, la, na) && run_steps(b, 2, lb, nb)) {
        RG_CHECK(b->products.dtype == RG_COMPUTE_F32, "%s: auto resolved to %s", kind_name[k], b->products.where);
        RG_CHECK(!memcmp(la, lb, sizeof la) && !memcmp(na, nb, sizeof na) && same_weights(a, b),
                 "%s: compute_dtype=f32 and the default differ (losses %.9g %.9g vs %.9g %.9g)", kind_name[k], la[0],
                 la[1], lb[0], lb[1]);
    }
    rg_train_state_free(a);
    rg_train_state_free(b);
    done_model(m);
}

static void test_f32_same_bits_f32_model(void) { f32_same_bits(M_F32); }
static void test_f32_same_bits_q4k_base(void) { f32_same_bits(M_Q4K); }

// bf16 on 1 and 2 threads: the same losses, norms and weights.
static void threads_same_bits(model_kind k) {
    rg_model *m = tiny(k);
    if (!m) return;
    rg_train_config c1 = config(k, RG_COMPUTE_BF16, 1), c2 = config(k, RG_COMPUTE_BF16, 2);
    rg_train_state *a = state(m, &c1), *b = a ? state(m, &c2) : NULL;
    double la[2], lb[2], na[2], nb[2];
    if (a && b && run_steps(a, 2, la, na) && run_steps(b, 2, lb, nb)) {
        printf("    %s bf16: losses %.9g %.9g on 1 thread, %.9g %.9g on 2\n", kind_name[k], la[0], la[1], lb[0], lb[1]);
        RG_CHECK(!memcmp(la, lb, sizeof la) && !memcmp(na, nb, sizeof na) && same_weights(a, b),
                 "%s: bf16 on 1 and 2 threads differ", kind_name[k]);
    }
    rg_train_state_free(a);
    rg_train_state_free(b);
    done_model(m);
}

static void test_threads_bf16_model(void) { threads_same_bits(M_BF16); }
static void test_threads_q4k_base(void) { threads_same_bits(M_Q4K); }

// ----------------------------------------------------------- tiles cache ---

// The Q4_K base's frozen weights held as packed BF16 tiles (cpu/tiles_cache.h) against the same run
// with the cache off (RG_TILES_CACHE_MB=0), and with a cap that holds only some of them: the same
// losses, norms and LoRA weights to the bit; every entry packed once, read by every later step's
// products; over the cap, products pack their own and nothing held exceeds it.
static void tiles_cache_same_bits(bool fused) {
    rg_model *m = tiny(M_Q4K);
    if (!m) return;
    const int steps = 3;
    rg_train_config c = config(M_Q4K, RG_COMPUTE_BF16, 2);
    if (fused) c.fused_ce = RG_FUSED_CE_ON;
    const char *caps[3] = {"0", NULL, "0.25"};  // off, the default, 0.25 MiB
    rg_train_state *s[3] = {NULL, NULL, NULL};
    double loss[3][3], norm[3][3];
    bool ok = true;
    for (int v = 0; v < 3 && ok; v++) {
        if (caps[v]) setenv("RG_TILES_CACHE_MB", caps[v], 1);
        else unsetenv("RG_TILES_CACHE_MB");
        s[v] = state(m, &c);
        ok = s[v] && run_steps(s[v], steps, loss[v], norm[v]);
    }
    unsetenv("RG_TILES_CACHE_MB");
    if (ok) {
        const rg_tiles_cache_stats full = rg_tiles_cache_get_stats(s[1]->tiles), part = rg_tiles_cache_get_stats(s[2]->tiles);
        const rg_train_memory mem = rg_train_state_memory(s[1]);
        printf("    q4_K LoRA%s: off: no cache; default: %lld entries, %.3f MiB held of %.3f wanted, %lld packs, %lld hits; "
               "0.25 MiB: %lld entries (%.3f MiB), %lld hits, %lld refused\n",
               fused ? " fused CE" : "", (long long)full.entries, full.bytes / 1048576.0, mem.tiles_wanted / 1048576.0,
               (long long)full.packs, (long long)full.hits, (long long)part.entries, part.bytes / 1048576.0,
               (long long)part.hits, (long long)part.refused);
        RG_CHECK(s[0]->tiles == NULL, "RG_TILES_CACHE_MB=0 made a cache");
        RG_CHECK(s[1]->tiles && full.packs > 0 && full.entries == full.packs && full.refused == 0,
                 "default cap: %lld packs, %lld entries, %lld refused", (long long)full.packs, (long long)full.entries,
                 (long long)full.refused);
        RG_CHECK(full.bytes == mem.tiles_wanted,  // (the fixture's head chunks are whole tiles: no padding apart)
                 "held %zu bytes but the plan wanted %zu", full.bytes, mem.tiles_wanted);
        RG_CHECK(full.hits >= full.packs * (steps - 1), "%lld hits for %lld entries over %d steps", (long long)full.hits,
                 (long long)full.packs, steps);
        RG_CHECK(s[2]->tiles && part.bytes <= part.cap && part.cap == (size_t)(0.25 * 1048576) && part.refused > 0 &&
                     part.entries > 0,
                 "0.25 MiB cap: %zu held of %zu, %lld entries, %lld refused", part.bytes, part.cap,
                 (long long)part.entries, (long long)part.refused);
        for (int v = 1; v < 3; v++)
            RG_CHECK(!memcmp(loss[0], loss[v], sizeof loss[0]) && !memcmp(norm[0], norm[v], sizeof norm[0]) &&
                         same_weights(s[0], s[v]),
                     "cap %s: not the bits of the run without the cache (loss %.9g vs %.9g)", caps[v] ? caps[v] : "default",
                     loss[v][steps - 1], loss[0][steps - 1]);
    }
    for (int v = 0; v < 3; v++) rg_train_state_free(s[v]);
    done_model(m);
}

static void test_tiles_cache_q4k_base(void) { tiles_cache_same_bits(false); }
static void test_tiles_cache_q4k_base_fused_ce(void) { tiles_cache_same_bits(true); }

static const rg_test_case cases[] = {
    RG_TEST(test_auto_by_weights),
    RG_TEST(test_nodes_bf16_model),
    RG_TEST(test_activation_products_keep_f32),
    RG_TEST(test_nodes_q4k_base),
    RG_TEST(test_nodes_f32_model),
    RG_TEST(test_trains_bf16_model),
    RG_TEST(test_trains_bf16_model_fused_ce),
    RG_TEST(test_trains_f32_model),
    RG_TEST(test_trains_q4k_base_lora),
    RG_TEST(test_f32_same_bits_f32_model),
    RG_TEST(test_f32_same_bits_q4k_base),
    RG_TEST(test_threads_bf16_model),
    RG_TEST(test_threads_q4k_base),
    RG_TEST(test_tiles_cache_q4k_base),
    RG_TEST(test_tiles_cache_q4k_base_fused_ce),
    {0},
};

int main(int argc, char **argv) {
    // Before anything asks for the path (asked once): the emulated tiles where the CPU has no BF16 path.
    setenv("RG_TILES_EMULATE", "1", 1);
    return rg_test_run(argc, argv, cases);
}
