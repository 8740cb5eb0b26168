// test_lora.c - LoRA adapters on the tiny qwen2 (f32, q8_0, q4_k_m): a B = 0
// adapter leaves the logits unchanged bit for bit; a nonzero adapter applied
// through the graph (full pass and KV session) agrees with the merged model;
// merge keeps every type, shape, key and untouched tensor; save -> load is
// bit-exact; bad adapters are refused with messages naming the fault; the
// gradients of A and B match central finite differences.
//
// `test_lora --write-adapter MODEL.gguf OUT.gguf` writes a rank-4 adapter with
// a nonzero B for the CLI test (tests/cli/test_cli_lora.sh).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/rng.h"
#include "graph/exec.h"
#include "infer/session.h"
#include "model/forward.h"
#include "model/lora.h"
#include "model/lora_stack.h"
#include "model/quantize.h"
#include "model/tiny.h"
#include "full_pass.h"
#include "rg_test.h"
#include "tensor/half.h"
#include "tensor/quant/quant.h"
#include "train/philox.h"

// The targets a llama-family layer has: q, k, v, o, gate, up, down (in_proj and out_proj are
// lfm2's and mamba2's mixers').
enum { LLAMA_TARGETS = 7 };

enum { T = 12 };

static bool quick(void) {
    const char *q = getenv("RG_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

static void tmp_path(char *path, const char *tag) {
    snprintf(path, 64, "/tmp/rg_test_lora_%sXXXXXX", tag);
    close(mkstemp(path));
}

// The tiny qwen2 in `target` ("F32", "F16", "BF16", "Q8_0", "Q4_K_M"), written to path.
static rg_status make_tiny(const char *target, char *path, rg_error *err) {
    tmp_path(path, "model");
    bool half = !strcmp(target, "F16") || !strcmp(target, "BF16");
    rg_tiny_config cfg = {.arch = "qwen2", .type = !strcmp(target, "F16") ? RG_TYPE_F16 : !strcmp(target, "BF16") ? RG_TYPE_BF16 : RG_TYPE_F32, .seed = 5};
    if (half || !strcmp(target, "F32")) return rg_tiny_write(&cfg, path, err);
    char f32[64];
    tmp_path(f32, "f32");
    rg_status s = rg_tiny_write(&cfg, f32, err);
    rg_quantize_opts o = {.n_threads = 2};
    rg_quantize_summary sum;
    if (!s) s = rg_quantize_file(f32, path, target, &o, &sum, err);
    unlink(f32);
    return s;
}

static rg_model *load_tiny(const char *target, char *path) {
    rg_error err = {0};
    rg_model *m = NULL;
    if (make_tiny(target, path, &err) || rg_model_load(&m, path, &err)) {
        printf("    %s: %s\n", target, err.msg);
        return NULL;
    }
    return m;
}

// Uniform in [-amp, amp) from the project's counter RNG (stream per pair).
static void random_b(rg_lora *l, uint64_t seed, float amp) {
    for (int64_t i = 0; i < l->n_layer * RG_LORA_N_TARGETS; i++) {
        rg_lora_pair *p = &l->pairs[i];
        if (!p->a) continue;
        for (int64_t j = 0; j < l->rank * p->n_out; j++)
            p->b[j] = amp * (2.0f * rg_rng_uniform(seed, (uint64_t)i, (uint64_t)j) - 1.0f);
    }
}

static void make_ids(int32_t *ids, int64_t V) {
    for (int i = 0; i < T; i++) ids[i] = (i * 37 + 11) % (int32_t)V;
}

// Logits [V, T] of one full pass, with the adapter attached when l != NULL.
static rg_status full_logits(const rg_model *m, const rg_lora *l, float scale, const int32_t *ids, float *logits,
                             rg_error *err) {
    return rg_test_full_logits(m, l, scale, ids, T, logits, err);
}

static int count_nodes(const rg_model *m, const rg_lora *l, float scale) {
    rg_graph *g = rg_graph_new();
    rg_model_nodes w;
    rg_error err;
    rg_model_leaf_nodes(g, m, &w, &err);
    if (l) rg_lora_attach(g, l, &w, scale, false, &err);
    int64_t n = T;
    rg_model_forward(g, m, &w, rg_leaf(g, "ids", RG_TYPE_I32, 1, &n, NULL), rg_leaf(g, "pos", RG_TYPE_I32, 1, &n, NULL), NULL);
    int c = g->n_nodes;
    rg_graph_free(g);
    return c;
}

static double max_rel(const float *a, const float *b, int64_t n) {
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / (scale > 0 ? scale : 1));
    return worst;
}

// ---------------------------------------------------------------------------

static void test_init(void) {
    char path[64];
    rg_model *m = load_tiny("F32", path);
    RG_REQUIRE(m, "model");
    rg_error err = {0};
    rg_lora *l = NULL, *l2 = NULL, *l3 = NULL;
    uint32_t mask = (1u << RG_LORA_TARGET_Q) | (1u << RG_LORA_TARGET_V) | (1u << RG_LORA_TARGET_DOWN);
    RG_REQUIRE(rg_lora_init(&l, m, 4, 8.0f, mask, 42, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(l->rank == 4 && l->alpha == 8.0f && l->targets == mask && l->n_layer == m->hp.n_layer, "header");
    double sum = 0, bound_max = 0;
    int64_t n_all = 0;
    bool b_zero = true, in_bound = true;
    for (int64_t il = 0; il < l->n_layer; il++)
        for (int t = 0; t < RG_LORA_N_TARGETS; t++) {
            rg_lora_pair *p = &l->pairs[il * RG_LORA_N_TARGETS + t];
            bool want = mask & (1u << t);
            RG_CHECK(!p->a == !want && !p->b == !want, "layer %lld target %d: pair present %d, wanted %d", (long long)il, t,
                     p->a != NULL, want);
            if (!p->a) continue;
            double bound = 1.0 / sqrt((double)p->n_in);
            for (int64_t i = 0; i < p->n_in * l->rank; i++) {
                in_bound &= fabs(p->a[i]) <= bound;
                sum += p->a[i] / bound;
                bound_max = fmax(bound_max, fabs(p->a[i]) / bound);
                n_all++;
            }
            for (int64_t i = 0; i < p->n_out * l->rank; i++) b_zero &= p->b[i] == 0.0f;
            // One element recomputed from the spec's formula (training.md §5.9).
            int64_t idx = 7 * 64 + 3;
            uint32_t r = rg_rand_u32(42, 0, RG_RAND_PURPOSE_LORA_INIT, (uint32_t)(il * 7 + t), (uint64_t)idx);
            double u = (double)(r >> 8) / 16777216.0;
            double want_a = bound * (2 * u - 1);
            RG_CHECK(fabs(p->a[idx] - want_a) <= 1e-7 * bound, "%s: A[%lld] = %.9g, spec formula %.9g", p->name,
                     (long long)idx, p->a[idx], want_a);
        }
    RG_CHECK(in_bound && bound_max > 0.99, "A outside U(-1/sqrt(n_in), 1/sqrt(n_in)) (max |A|/bound %.4f)", bound_max);
    RG_CHECK(fabs(sum / (double)n_all) < 0.02, "mean of A/bound %.4f is not ~0 over %lld draws", sum / (double)n_all,
             (long long)n_all);
    RG_CHECK(b_zero, "B is not zero");
    RG_REQUIRE(rg_lora_init(&l2, m, 4, 8.0f, mask, 42, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_lora_init(&l3, m, 4, 8.0f, mask, 43, &err) == RG_OK, "%s", err.msg);
    const rg_lora_pair *p = &l->pairs[RG_LORA_TARGET_Q];
    size_t nb = sizeof(float) * (size_t)(p->n_in * 4);
    RG_CHECK(!memcmp(p->a, l2->pairs[RG_LORA_TARGET_Q].a, nb), "same seed, different A");
    RG_CHECK(memcmp(p->a, l3->pairs[RG_LORA_TARGET_Q].a, nb), "another seed, same A");
    RG_CHECK(memcmp(p->a, l->pairs[RG_LORA_N_TARGETS + RG_LORA_TARGET_Q].a, nb), "layers 0 and 1 share A");
    rg_lora *bad = NULL;
    RG_CHECK(rg_lora_init(&bad, m, 0, 8.0f, mask, 1, &err) == RG_ERR_ARG && strstr(err.msg, "rank 0"), "%s", err.msg);
    RG_CHECK(rg_lora_init(&bad, m, 4, 8.0f, 0, 1, &err) == RG_ERR_ARG && strstr(err.msg, "mask"), "%s", err.msg);
    RG_CHECK(rg_lora_init(&bad, m, 4, NAN, mask, 1, &err) == RG_ERR_ARG && strstr(err.msg, "alpha"), "%s", err.msg);
    uint32_t parsed = 0;
    RG_CHECK(rg_lora_parse_targets("attn_q,attn_v,ffn_down", &parsed, &err) == RG_OK && parsed == mask, "mask 0x%x", parsed);
    RG_CHECK(rg_lora_parse_targets("all", &parsed, &err) == RG_OK && parsed == RG_LORA_TARGETS_ALL, "mask 0x%x", parsed);
    RG_CHECK(rg_lora_parse_targets("attn_q,q_proj", &parsed, &err) == RG_ERR_ARG && strstr(err.msg, "'q_proj'"), "%s",
             err.msg);
    char sp[64];
    float sc;
    RG_CHECK(rg_lora_parse_spec("a.gguf:0.5", sp, sizeof sp, &sc) && !strcmp(sp, "a.gguf") && sc == 0.5f, "%s %g", sp, sc);
    RG_CHECK(rg_lora_parse_spec("dir:x/a.gguf", sp, sizeof sp, &sc) && !strcmp(sp, "dir:x/a.gguf") && sc == 1.0f, "%s %g",
             sp, sc);
    RG_CHECK(!rg_lora_parse_spec(":2", sp, sizeof sp, &sc), "an empty path was accepted");
    rg_lora_free(l), rg_lora_free(l2), rg_lora_free(l3);
    rg_model_free(m);
    unlink(path);
}

// B = 0: the same logits bit for bit (full pass and session), for f32 and q8_0;
// no LoRA: exactly the plain graph's node count.
static void zero_b(const char *target) {
    char path[64];
    rg_model *m = load_tiny(target, path);
    RG_REQUIRE(m, "model");
    rg_error err = {0};
    rg_lora *l = NULL;
    RG_REQUIRE(rg_lora_init(&l, m, 4, 16.0f, RG_LORA_TARGETS_ALL, 7, &err) == RG_OK, "%s", err.msg);
    const int64_t V = m->hp.n_vocab;
    int32_t ids[T];
    make_ids(ids, V);
    float *base = malloc(sizeof(float) * V * T), *with = malloc(sizeof(float) * V * T);
    RG_REQUIRE(full_logits(m, NULL, 0, ids, base, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(full_logits(m, l, 1.0f, ids, with, &err) == RG_OK, "%s", err.msg);
    int64_t diff = 0;
    for (int64_t i = 0; i < V * T; i++) diff += base[i] != with[i];
    RG_CHECK(diff == 0, "%s: %lld of %lld logits changed with B = 0", target, (long long)diff, (long long)(V * T));
    // The session path, too.
    rg_session *s0 = NULL, *s1 = NULL;
    rg_session_opts so = {.n_ctx = 32, .n_threads = 2};
    RG_REQUIRE(rg_session_create(&s0, m, &so, &err) == RG_OK, "%s", err.msg);
    so.lora = l, so.lora_scale = 1.0f;
    RG_REQUIRE(rg_session_create(&s1, m, &so, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_session_eval(s0, ids, T, base, 1, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_session_eval(s1, ids, T, with, 1, &err) == RG_OK, "%s", err.msg);
    diff = 0;
    for (int64_t i = 0; i < V * T; i++) diff += base[i] != with[i];
    RG_CHECK(diff == 0, "%s session: %lld logits changed with B = 0", target, (long long)diff);
    int n_plain = count_nodes(m, NULL, 0), n_zero_scale = count_nodes(m, l, 0.0f), n_lora = count_nodes(m, l, 1.0f);
    int want_extra = (int)m->hp.n_layer * LLAMA_TARGETS * 6;  // A, B leaves; 2 MUL_MAT, SCALE, ADD
    RG_CHECK(n_zero_scale == n_plain && n_lora == n_plain + want_extra, "nodes: plain %d, scale 0 %d, lora %d (want +%d)",
             n_plain, n_zero_scale, n_lora, want_extra);
    printf("    %s: B = 0 leaves %lld logits identical (full pass and session); graph %d nodes, +%d with LoRA\n", target,
           (long long)(V * T), n_plain, n_lora - n_plain);
    rg_session_free(s0), rg_session_free(s1);
    free(base), free(with);
    rg_lora_free(l);
    rg_model_free(m);
    unlink(path);
}

static void test_zero_b_f32(void) { zero_b("F32"); }
static void test_zero_b_q8_0(void) { zero_b("Q8_0"); }

// A nonzero adapter through the graph (full pass and KV session) against the
// F32-merged model: the base's weights in F32 (dequantized when quantized) plus
// s B·A. T = 12 tokens take the SGEMM path (F32 activations, weights
// dequantized exactly), so only rounding separates the two: bound 1e-4 of the
// largest logit. A quantized base merged into its own type is printed too: it
// carries a fresh quantization error (test_merge_* bounds it per tensor).
static void runtime_vs_merged(const char *target) {
    char path[64], apath[64], f32path[64], mpath[64], qpath[64];
    rg_model *m = load_tiny(target, path);
    RG_REQUIRE(m, "model");
    const bool quantized = strcmp(target, "F32") != 0;
    rg_error err = {0};
    rg_lora *l = NULL;
    const float user = 0.75f;
    RG_REQUIRE(rg_lora_init(&l, m, 4, 8.0f, RG_LORA_TARGETS_ALL, 11, &err) == RG_OK, "%s", err.msg);
    random_b(l, 12, 0.05f);
    tmp_path(apath, "adapter");
    tmp_path(mpath, "merged");
    tmp_path(qpath, "merged_q");
    snprintf(f32path, sizeof f32path, "%s", path);
    RG_REQUIRE(rg_lora_save(l, m, apath, &err) == RG_OK, "%s", err.msg);
    if (quantized) {  // the base in F32: every tensor dequantized
        tmp_path(f32path, "deq");
        rg_quantize_opts qo = {.n_threads = 2, .allow_requantize = true};
        rg_quantize_summary qs;
        RG_REQUIRE(rg_quantize_file(path, f32path, "F32", &qo, &qs, &err) == RG_OK, "%s", err.msg);
    }
    rg_lora_merge_summary sum;
    rg_lora_merge_opts mo = {.n_threads = 2};
    RG_REQUIRE(rg_lora_merge_ex(f32path, apath, user, mpath, &mo, &sum, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(sum.n_merged == (uint64_t)(m->hp.n_layer * LLAMA_TARGETS) && sum.rank == 4 && sum.scale == 1.5f,
             "summary: %llu merged, rank %lld, scale %g", (unsigned long long)sum.n_merged, (long long)sum.rank,
             (double)sum.scale);
    rg_model *mm = NULL, *mq = NULL;
    RG_REQUIRE(rg_model_load(&mm, mpath, &err) == RG_OK, "%s", err.msg);
    for (int64_t il = 0; il < mm->hp.n_layer; il++)
        RG_CHECK(mm->layers[il].t[RG_ROLE_ATTN_Q]->type == RG_TYPE_F32 && mm->layers[il].t[RG_ROLE_FFN_DOWN]->type == RG_TYPE_F32,
                 "the F32-merged model has a %s weight", rg_type_get(mm->layers[il].t[RG_ROLE_FFN_DOWN]->type)->name);
    const int64_t V = m->hp.n_vocab;
    int32_t ids[T];
    make_ids(ids, V);
    float *base = malloc(sizeof(float) * V * T), *run = malloc(sizeof(float) * V * T);
    float *merged = malloc(sizeof(float) * V * T), *sess = malloc(sizeof(float) * V * T);
    RG_REQUIRE(full_logits(m, NULL, 0, ids, base, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(full_logits(m, l, user, ids, run, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(full_logits(mm, NULL, 0, ids, merged, &err) == RG_OK, "%s", err.msg);
    // The session keeps the adapter over several evaluations (batches of 5 for F32;
    // one batch with F32 activations for quantized bases, whose small-N dot products and
    // default prompts quantize activations, as the full pass here does not).
    rg_session *s = NULL;
    rg_session_opts so = {.n_ctx = 32, .n_threads = 2, .n_batch = quantized ? T : 5, .lora = l, .lora_scale = user,
                          .exact_activations = true};
    RG_REQUIRE(rg_session_create(&s, m, &so, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_session_eval(s, ids, T, sess, 1, &err) == RG_OK, "%s", err.msg);
    double effect = max_rel(run, base, V * T), e_merge = max_rel(run, merged, V * T), e_sess = max_rel(sess, run, V * T);
    printf("    %s: adapter moves logits by %.3e; runtime vs F32-merged %.2e (bound 1e-4); session vs full %.2e "
           "(bound 1e-3, F16 cache)", target, effect, e_merge, e_sess);
    if (quantized) {
        RG_REQUIRE(rg_lora_merge(path, apath, user, qpath, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(rg_model_load(&mq, qpath, &err) == RG_OK, "%s", err.msg);
        float *mql = malloc(sizeof(float) * V * T);
        RG_REQUIRE(full_logits(mq, NULL, 0, ids, mql, &err) == RG_OK, "%s", err.msg);
        printf("; merged into %s itself %.2e (re-quantized)", target, max_rel(mql, run, V * T));
        free(mql);
    }
    printf("\n");
    RG_CHECK(effect > 0.05, "the adapter barely changes the logits (%.3e)", effect);
    RG_CHECK(e_merge < 1e-4, "runtime adapter and F32-merged model differ by %.3e", e_merge);
    RG_CHECK(e_sess < 1e-3, "session with adapter differs from the full pass by %.3e", e_sess);
    rg_session_free(s);
    free(base), free(run), free(merged), free(sess);
    rg_model_free(mm), rg_model_free(mq);
    rg_lora_free(l);
    rg_model_free(m);
    unlink(path), unlink(apath), unlink(mpath), unlink(qpath);
    if (quantized) unlink(f32path);
}

static void test_runtime_vs_merged_f32(void) { runtime_vs_merged("F32"); }
static void test_runtime_vs_merged_q8_0(void) { runtime_vs_merged("Q8_0"); }
static void test_runtime_vs_merged_q4_k_m(void) { runtime_vs_merged("Q4_K_M"); }

// Merge into each storage type: types, shapes, keys and untouched tensors kept;
// merged values equal (W + s B·A) re-encoded: exact for F16/BF16 up to one step
// of the type (the double sum's order), within the quantizer's error otherwise.
// Float bases keep their types by default; a quantized base is merged with
// type = its own target (Q8_0 is also the default for a quantized base).
static void merge_types(const char *target, double rel_rmse_bound) {
    char path[64], apath[64], mpath[64];
    rg_model *m = load_tiny(target, path);
    RG_REQUIRE(m, "model");
    rg_error err = {0};
    rg_lora *l = NULL;
    uint32_t mask = (1u << RG_LORA_TARGET_K) | (1u << RG_LORA_TARGET_O) | (1u << RG_LORA_TARGET_UP);
    RG_REQUIRE(rg_lora_init(&l, m, 2, 4.0f, mask, 21, &err) == RG_OK, "%s", err.msg);
    random_b(l, 22, 0.05f);
    tmp_path(apath, "adapter");
    tmp_path(mpath, "merged");
    RG_REQUIRE(rg_lora_save(l, m, apath, &err) == RG_OK, "%s", err.msg);
    const float user = 1.25f;
    const bool quantized = strcmp(target, "F32") && strcmp(target, "F16") && strcmp(target, "BF16");
    rg_lora_merge_opts mo = {.n_threads = 2, .type = quantized ? target : NULL};
    RG_REQUIRE(rg_lora_merge_ex(path, apath, user, mpath, &mo, NULL, &err) == RG_OK, "%s", err.msg);
    const double s = (double)user * 4.0 / 2.0;
    rg_gguf *a = m->file, *b = NULL;
    RG_REQUIRE(rg_gguf_open(&b, mpath, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(a->n_kv == b->n_kv && a->n_tensors == b->n_tensors, "kv %llu vs %llu, tensors %llu vs %llu",
             (unsigned long long)a->n_kv, (unsigned long long)b->n_kv, (unsigned long long)a->n_tensors,
             (unsigned long long)b->n_tensors);
    for (uint64_t i = 0; i < a->n_kv && i < b->n_kv; i++)
        RG_CHECK(a->kv[i].key.len == b->kv[i].key.len && !memcmp(a->kv[i].key.ptr, b->kv[i].key.ptr, a->kv[i].key.len) &&
                     a->kv[i].type == b->kv[i].type && a->kv[i].n == b->kv[i].n,
                 "key %llu differs", (unsigned long long)i);
    int n_same = 0, n_merged = 0;
    double worst_rmse = 0, worst_half = 0;
    for (uint64_t i = 0; i < a->n_tensors && i < b->n_tensors; i++) {
        const rg_gguf_tensor *ta = &a->tensors[i], *tb = &b->tensors[i];
        RG_CHECK(!strcmp(ta->name, tb->name) && ta->type == tb->type && ta->n_dims == tb->n_dims &&
                     !memcmp(ta->ne, tb->ne, sizeof ta->ne) && ta->nbytes == tb->nbytes,
                 "tensor %llu: '%s' %s vs '%s' %s", (unsigned long long)i, ta->name, rg_type_get(ta->type)->name, tb->name,
                 rg_type_get(tb->type)->name);
        const rg_lora_pair *p = NULL;
        for (int64_t k = 0; k < l->n_layer * RG_LORA_N_TARGETS; k++)
            if (l->pairs[k].a && !strcmp(l->pairs[k].name, ta->name)) p = &l->pairs[k];
        if (!p) {
            n_same += ta->nbytes == tb->nbytes && !memcmp(ta->data, tb->data, ta->nbytes);
            continue;
        }
        n_merged++;
        int64_t n = p->n_in * p->n_out;
        float *wa = malloc(sizeof(float) * n), *wb = malloc(sizeof(float) * n);
        rg_dequantize(ta->type, ta->data, wa, n, "base", &err);
        rg_dequantize(tb->type, tb->data, wb, n, "merged", &err);
        double se = 0, ss = 0;
        for (int64_t o = 0; o < p->n_out; o++) {
            double d[1024] = {0};
            for (int64_t k = 0; k < l->rank; k++)  // k outer: another order than the library's
                for (int64_t i = 0; i < p->n_in; i++) d[i] += (double)p->a[i + k * p->n_in] * p->b[k + o * l->rank];
            for (int64_t i = 0; i < p->n_in; i++) {
                double want = (double)(float)((double)wa[o * p->n_in + i] + s * d[i]);
                double got = wb[o * p->n_in + i];
                se += (got - want) * (got - want);
                ss += want * want;
                if (ta->type == RG_TYPE_F16 || ta->type == RG_TYPE_BF16) {
                    // one step of the type at this magnitude
                    double step = ldexp(1.0, (int)floor(log2(fabs(want) + 1e-30)) - (ta->type == RG_TYPE_F16 ? 10 : 7));
                    if (ta->type == RG_TYPE_F16 && step < ldexp(1.0, -24)) step = ldexp(1.0, -24);
                    worst_half = fmax(worst_half, fabs(got - want) / step);
                }
            }
        }
        worst_rmse = fmax(worst_rmse, sqrt(se / (ss > 0 ? ss : 1)));
        free(wa), free(wb);
    }
    int want_merged = (int)m->hp.n_layer * 3;
    RG_CHECK(n_merged == want_merged && n_same == (int)a->n_tensors - want_merged,
             "%d merged (want %d), %d of the other %d byte-identical", n_merged, want_merged, n_same,
             (int)a->n_tensors - want_merged);
    printf("    %s: %d tensors merged, %d copied byte for byte; relative RMS error vs W + sBA %.2e (bound %.0e)", target,
           n_merged, n_same, worst_rmse, rel_rmse_bound);
    if (worst_half > 0 || !strcmp(target, "F16") || !strcmp(target, "BF16")) printf("; worst %.2f steps of the type", worst_half);
    printf("\n");
    RG_CHECK(worst_rmse <= rel_rmse_bound, "merged W differs from W + sBA by %.3e (relative RMS)", worst_rmse);
    RG_CHECK(worst_half <= 0.5 + 1e-9, "F16/BF16 merged value more than half a step (RNE) away: %.3f", worst_half);
    rg_gguf_free(b);
    rg_lora_free(l);
    rg_model_free(m);
    unlink(path), unlink(apath), unlink(mpath);
}

static void test_merge_f32(void) { merge_types("F32", 1e-7); }
static void test_merge_f16(void) { merge_types("F16", 1e-3); }
static void test_merge_bf16(void) { merge_types("BF16", 4e-3); }
static void test_merge_q8_0(void) { merge_types("Q8_0", 1e-2); }
static void test_merge_q4_k_m(void) { merge_types("Q4_K_M", 8e-2); }

// What survives of B·A (summary.kept): a change far below half a Q4_1 step, merged back into the Q4_1 base
// whose values sit on that grid, rounds away (kept near 0, every tensor counted as lost); the default for a
// quantized base (Q8_0 for every quantizable tensor) keeps it; an F32 merge keeps it exactly.
static void test_merge_kept(void) {
    static const struct {
        const char *type;      // NULL: the default
        const char *written;   // summary.type
        uint32_t w_type;       // the type of blk.0.attn_k.weight in the output
        double kept_lo, kept_hi;
        bool all_lost;
    } cases[] = {
        {"Q4_1", "Q4_1", RG_TYPE_Q4_1, -0.1, 0.3, true},
        {NULL, "Q8_0", RG_TYPE_Q8_0, 0.97, 1.03, false},
        {"F32", "F32", RG_TYPE_F32, 1.0 - 1e-6, 1.0 + 1e-6, false},
    };
    char path[64], apath[64], mpath[64];
    rg_model *m = load_tiny("Q4_1", path);
    RG_REQUIRE(m, "model");
    rg_error err = {0};
    rg_lora *l = NULL;
    RG_REQUIRE(rg_lora_init(&l, m, 4, 4.0f, RG_LORA_TARGETS_ALL, 31, &err) == RG_OK, "%s", err.msg);
    random_b(l, 32, 2e-4f);  // |s B·A| ~ 1e-4, against a Q4_1 step of ~7e-3 here
    tmp_path(apath, "adapter");
    tmp_path(mpath, "merged");
    RG_REQUIRE(rg_lora_save(l, m, apath, &err) == RG_OK, "%s", err.msg);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rg_lora_merge_opts mo = {.n_threads = 2, .type = cases[c].type};
        rg_lora_merge_summary sum;
        RG_REQUIRE(rg_lora_merge_ex(path, apath, 1.0f, mpath, &mo, &sum, &err) == RG_OK, "%s", err.msg);
        rg_gguf *g = NULL;
        RG_REQUIRE(rg_gguf_open(&g, mpath, &err) == RG_OK, "%s", err.msg);
        const rg_gguf_tensor *w = rg_gguf_find_tensor(g, "blk.0.attn_k.weight");
        printf("    %-7s -> %-5s kept %6.1f%%, |M-W|/|D| %.3f, %llu of %llu tensors below half\n",
               cases[c].type ? cases[c].type : "default", sum.type, 100 * sum.kept, sum.rel_norm,
               (unsigned long long)sum.n_lost, (unsigned long long)sum.n_merged);
        RG_CHECK(!strcmp(sum.type, cases[c].written), "%s: written as '%s', want %s", cases[c].type, sum.type,
                 cases[c].written);
        RG_CHECK(w && w->type == cases[c].w_type, "%s: blk.0.attn_k.weight is %s", cases[c].written,
                 w ? rg_type_get(w->type)->name : "missing");
        RG_CHECK(sum.kept >= cases[c].kept_lo && sum.kept <= cases[c].kept_hi, "%s: kept %.4f, want [%g, %g]",
                 cases[c].written, sum.kept, cases[c].kept_lo, cases[c].kept_hi);
        RG_CHECK(sum.n_merged == 14 && (sum.n_lost == sum.n_merged) == cases[c].all_lost &&
                     (cases[c].all_lost || sum.n_lost == 0),
                 "%s: %llu of %llu lost", cases[c].written, (unsigned long long)sum.n_lost,
                 (unsigned long long)sum.n_merged);
        rg_gguf_free(g);
    }
    rg_lora_merge_opts bad = {.type = "Q9_9"};
    RG_CHECK(rg_lora_merge_ex(path, apath, 1.0f, mpath, &bad, NULL, &err) == RG_ERR_ARG &&
                 strstr(err.msg, "unknown type or mixture 'Q9_9' (valid: F32"),
             "unknown type: %s", err.msg);
    rg_lora_free(l);
    rg_model_free(m);
    unlink(path), unlink(apath), unlink(mpath);
}

static bool same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = false;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void test_save_load_roundtrip(void) {
    char path[64], a1[64], a2[64];
    rg_model *m = load_tiny("F32", path);
    RG_REQUIRE(m, "model");
    rg_error err = {0};
    rg_lora *l = NULL, *r = NULL;
    uint32_t mask = (1u << RG_LORA_TARGET_Q) | (1u << RG_LORA_TARGET_GATE) | (1u << RG_LORA_TARGET_DOWN);
    RG_REQUIRE(rg_lora_init(&l, m, 3, 6.5f, mask, 31, &err) == RG_OK, "%s", err.msg);
    random_b(l, 32, 0.1f);
    tmp_path(a1, "a1");
    tmp_path(a2, "a2");
    RG_REQUIRE(rg_lora_save(l, m, a1, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_lora_load(&r, a1, m, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(r->rank == 3 && r->alpha == 6.5f && r->targets == mask && r->n_layer == l->n_layer, "rank %lld alpha %g mask 0x%x",
             (long long)r->rank, (double)r->alpha, r->targets);
    for (int64_t i = 0; i < l->n_layer * RG_LORA_N_TARGETS; i++) {
        const rg_lora_pair *p = &l->pairs[i], *q = &r->pairs[i];
        RG_CHECK(!p->a == !q->a, "pair %lld presence", (long long)i);
        if (!p->a || !q->a) continue;
        RG_CHECK(!strcmp(p->name, q->name) && p->n_in == q->n_in && p->n_out == q->n_out, "pair %lld: %s vs %s",
                 (long long)i, p->name, q->name);
        RG_CHECK(!memcmp(p->a, q->a, sizeof(float) * (size_t)(p->n_in * 3)) &&
                     !memcmp(p->b, q->b, sizeof(float) * (size_t)(p->n_out * 3)),
                 "%s: values changed in the round trip", p->name);
    }
    RG_REQUIRE(rg_lora_save(r, m, a2, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(same_file(a1, a2), "save(load(save(x))) is not byte-identical to save(x)");
    // The file as llama.cpp reads it.
    rg_gguf *f = NULL;
    RG_REQUIRE(rg_gguf_open(&f, a1, &err) == RG_OK, "%s", err.msg);
    rg_gguf_str str;
    double alpha = 0;
    RG_CHECK(!rg_gguf_get_str(f, "general.type", &str, &err) && rg_gguf_str_eq(str, "adapter"), "general.type");
    RG_CHECK(!rg_gguf_get_str(f, "adapter.type", &str, &err) && rg_gguf_str_eq(str, "lora"), "adapter.type");
    RG_CHECK(!rg_gguf_get_str(f, "general.architecture", &str, &err) && rg_gguf_str_eq(str, "qwen2"), "arch");
    const rg_gguf_kv *kv = rg_gguf_find(f, "adapter.lora.alpha");
    RG_CHECK(kv && kv->type == RG_GGUF_F32 && !rg_gguf_get_f64(f, "adapter.lora.alpha", &alpha, &err) && alpha == 6.5,
             "adapter.lora.alpha must be an f32 6.5");
    const rg_gguf_tensor *ta = rg_gguf_find_tensor(f, "blk.1.ffn_down.weight.lora_a");
    const rg_gguf_tensor *tb = rg_gguf_find_tensor(f, "blk.1.ffn_down.weight.lora_b");
    RG_CHECK(ta && ta->type == RG_TYPE_F32 && ta->n_dims == 2 && ta->ne[0] == RG_TINY_N_FF && ta->ne[1] == 3,
             "lora_a of ffn_down must be F32 [n_ff=512, rank=3]");
    RG_CHECK(tb && tb->type == RG_TYPE_F32 && tb->n_dims == 2 && tb->ne[0] == 3 && tb->ne[1] == RG_TINY_N_EMBD,
             "lora_b of ffn_down must be F32 [rank=3, n_embd=256]");
    RG_CHECK(f->n_tensors == (uint64_t)(m->hp.n_layer * 3 * 2), "%llu tensors", (unsigned long long)f->n_tensors);
    rg_gguf_free(f);
    rg_lora_free(r);
    r = NULL;
    // F16 tensors and no alpha key (alpha = rank, llama.cpp's rule): read and widened exactly.
    rg_gguf *g = rg_gguf_new();
    rg_gguf_set_str(g, "general.architecture", "qwen2", &err);
    rg_gguf_set_str(g, "general.type", "adapter", &err);
    rg_gguf_set_str(g, "adapter.type", "lora", &err);
    uint16_t ha[256 * 2], hb[2 * 128];
    for (int i = 0; i < 512; i++) ha[i] = rg_fp32_to_fp16((float)(i - 256) / 1024.0f);
    for (int i = 0; i < 256; i++) hb[i] = rg_fp32_to_bf16((float)(i - 128) / 512.0f);
    rg_gguf_add_tensor(g, "blk.0.attn_v.weight.lora_a", RG_TYPE_F16, 2, (int64_t[]){256, 2}, ha, &err);
    rg_gguf_add_tensor(g, "blk.0.attn_v.weight.lora_b", RG_TYPE_BF16, 2, (int64_t[]){2, 128}, hb, &err);
    rg_gguf_add_tensor(g, "blk.0.attn_norm.weight", RG_TYPE_F32, 1, (int64_t[]){256}, ha, &err);  // skipped, as llama.cpp
    RG_REQUIRE(rg_gguf_write(g, a2, &err) == RG_OK, "%s", err.msg);
    rg_gguf_free(g);
    RG_REQUIRE(rg_lora_load(&r, a2, m, &err) == RG_OK, "%s", err.msg);
    const rg_lora_pair *pv = &r->pairs[RG_LORA_TARGET_V];
    RG_CHECK(r->rank == 2 && r->alpha == 2.0f && r->targets == (1u << RG_LORA_TARGET_V) && pv->a && pv->n_out == 128,
             "rank %lld alpha %g targets 0x%x", (long long)r->rank, (double)r->alpha, r->targets);
    bool exact = pv->a && pv->b;
    for (int i = 0; exact && i < 512; i++) exact = pv->a[i] == (float)(i - 256) / 1024.0f;
    for (int i = 0; exact && i < 256; i++) exact = pv->b[i] == (float)(i - 128) / 512.0f;
    RG_CHECK(exact, "F16/BF16 lora tensors were not widened exactly");
    RG_CHECK(rg_lora_scale(r, 1.0f) == 1.0f, "no alpha: scale %g, llama.cpp uses the user's scale alone",
             (double)rg_lora_scale(r, 1.0f));
    rg_lora_free(r);
    rg_lora_free(l);
    rg_model_free(m);
    unlink(path), unlink(a1), unlink(a2);
}

// An adapter file from parts: arch, general.type, and tensors (name, ne0, ne1).
typedef struct tspec {
    const char *name;
    int64_t ne0, ne1;
} tspec;

static rg_status write_adapter(const char *path, const char *arch, const char *type, const tspec *ts, int n,
                               rg_error *err) {
    static float zeros[256 * 256];
    rg_gguf *g = rg_gguf_new();
    rg_status s = rg_gguf_set_str(g, "general.architecture", arch, err);
    if (!s && type) s = rg_gguf_set_str(g, "general.type", type, err);
    if (!s) s = rg_gguf_set_str(g, "adapter.type", "lora", err);
    if (!s) s = rg_gguf_set_f32(g, "adapter.lora.alpha", 8.0f, err);
    for (int i = 0; i < n && !s; i++) s = rg_gguf_add_tensor(g, ts[i].name, RG_TYPE_F32, 2, (int64_t[]){ts[i].ne0, ts[i].ne1}, zeros, err);
    if (!s) s = rg_gguf_write(g, path, err);
    rg_gguf_free(g);
    return s;
}

static void test_load_errors(void) {
    char path[64], ap[64];
    rg_model *m = load_tiny("F32", path);
    RG_REQUIRE(m, "model");
    tmp_path(ap, "bad");
    static const struct {
        const char *what, *arch, *type;
        tspec t[3];
        int n;
        rg_status want;
        const char *msg[3];
    } cases[] = {
        {"wrong arch", "llama", "adapter", {{"blk.0.attn_q.weight.lora_a", 256, 4}, {"blk.0.attn_q.weight.lora_b", 4, 256}}, 2,
         RG_ERR_ARG, {"architecture 'llama'", "model is 'qwen2'"}},
        {"not an adapter", "qwen2", "model", {{"blk.0.attn_q.weight.lora_a", 256, 4}, {"blk.0.attn_q.weight.lora_b", 4, 256}}, 2,
         RG_ERR_FORMAT, {"general.type is \"model\"", "expected \"adapter\""}},
        {"no general.type", "qwen2", NULL, {{"blk.0.attn_q.weight.lora_a", 256, 4}}, 1, RG_ERR_FORMAT,
         {"general.type is missing"}},
        {"missing base tensor", "qwen2", "adapter", {{"blk.9.attn_q.weight.lora_a", 256, 4}, {"blk.9.attn_q.weight.lora_b", 4, 256}}, 2,
         RG_ERR_ARG, {"'blk.9.attn_q.weight.lora_a'", "base tensor 'blk.9.attn_q.weight' does not exist"}},
        {"wrong lora_a shape", "qwen2", "adapter", {{"blk.0.attn_k.weight.lora_a", 255, 4}, {"blk.0.attn_k.weight.lora_b", 4, 128}}, 2,
         RG_ERR_ARG, {"'blk.0.attn_k.weight.lora_a' has shape [255, 4]", "expected [256, rank]", "[256, 128]"}},
        {"wrong lora_b shape", "qwen2", "adapter", {{"blk.1.ffn_down.weight.lora_a", 512, 4}, {"blk.1.ffn_down.weight.lora_b", 4, 512}}, 2,
         RG_ERR_ARG, {"'blk.1.ffn_down.weight.lora_b' has shape [4, 512]", "expected [rank, 256]"}},
        {"ranks within a pair", "qwen2", "adapter", {{"blk.0.attn_q.weight.lora_a", 256, 4}, {"blk.0.attn_q.weight.lora_b", 8, 256}}, 2,
         RG_ERR_ARG, {"'blk.0.attn_q.weight.lora_b' [8, 256] has rank 8", "has rank 4", "ranks must be equal"}},
        {"ranks across pairs", "qwen2", "adapter",
         {{"blk.0.attn_q.weight.lora_a", 256, 4}, {"blk.0.attn_q.weight.lora_b", 4, 256}, {"blk.0.attn_v.weight.lora_a", 256, 8}}, 3,
         RG_ERR_ARG, {"'blk.0.attn_v.weight.lora_a' [256, 8] has rank 8", "ranks must be equal"}},
        {"half a pair", "qwen2", "adapter", {{"blk.0.attn_q.weight.lora_a", 256, 4}}, 1, RG_ERR_FORMAT,
         {"'blk.0.attn_q.weight.lora_a' has no matching 'blk.0.attn_q.weight.lora_b'"}},
        {"unsupported target", "qwen2", "adapter", {{"token_embd.weight.lora_a", 4, 512}, {"token_embd.weight.lora_b", 256, 4}}, 2,
         RG_ERR_UNSUPPORTED, {"LoRA on 'token_embd.weight' is not supported"}},
        {"foreign tensor", "qwen2", "adapter", {{"blk.0.attn_q.weight", 256, 256}}, 1, RG_ERR_FORMAT,
         {"'blk.0.attn_q.weight' is not a LoRA tensor"}},
        {"no tensors", "qwen2", "adapter", {{0}}, 0, RG_ERR_FORMAT, {"no .lora_a/.lora_b tensors"}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rg_error err = {0};
        RG_REQUIRE(write_adapter(ap, cases[c].arch, cases[c].type, cases[c].t, cases[c].n, &err) == RG_OK, "%s", err.msg);
        rg_lora *l = NULL;
        rg_status s = rg_lora_load(&l, ap, m, &err);
        RG_CHECK(s == cases[c].want && !l, "%s: status %s, wanted %s (%s)", cases[c].what, rg_status_name(s),
                 rg_status_name(cases[c].want), err.msg);
        RG_CHECK(strstr(err.msg, ap) != NULL, "%s: the message does not name the file: %s", cases[c].what, err.msg);
        for (int k = 0; k < 3 && cases[c].msg[k]; k++)
            RG_CHECK(strstr(err.msg, cases[c].msg[k]), "%s: message lacks \"%s\": %s", cases[c].what, cases[c].msg[k],
                     err.msg);
        rg_lora_free(l);
    }
    rg_error err = {0};
    rg_lora *l = NULL;
    {  // a NaN in B
        float a[256 * 2] = {0}, b[2 * 256] = {0};
        b[300] = NAN;
        rg_gguf *g = rg_gguf_new();
        rg_gguf_set_str(g, "general.architecture", "qwen2", &err);
        rg_gguf_set_str(g, "general.type", "adapter", &err);
        rg_gguf_set_str(g, "adapter.type", "lora", &err);
        rg_gguf_add_tensor(g, "blk.0.attn_q.weight.lora_a", RG_TYPE_F32, 2, (int64_t[]){256, 2}, a, &err);
        rg_gguf_add_tensor(g, "blk.0.attn_q.weight.lora_b", RG_TYPE_F32, 2, (int64_t[]){2, 256}, b, &err);
        RG_REQUIRE(rg_gguf_write(g, ap, &err) == RG_OK, "%s", err.msg);
        rg_gguf_free(g);
        RG_CHECK(rg_lora_load(&l, ap, m, &err) == RG_ERR_FORMAT && !l &&
                     strstr(err.msg, "'blk.0.attn_q.weight.lora_b' holds a non-finite value at element 300"), "%s", err.msg);
    }
    RG_CHECK(rg_lora_load(&l, "/nonexistent/a.gguf", m, &err) == RG_ERR_IO && strstr(err.msg, "/nonexistent/a.gguf"), "%s",
             err.msg);
    RG_CHECK(rg_lora_merge(path, "/nonexistent/a.gguf", 1.0f, "/tmp/rg_never_written.gguf", &err) == RG_ERR_IO &&
                 access("/tmp/rg_never_written.gguf", F_OK) != 0, "%s", err.msg);
    rg_model_free(m);
    unlink(path), unlink(ap);
}

// dLoss/dA and dLoss/dB by the graph's backward against central differences of
// the same f32 forward, h = 0.02 (A's elements are up to 1/16, B's 0.05). Per
// checked element: |fd - an| <= 0.02 |an| + 0.01 max|an| over the tensor (the f32
// loss's rounding, ~5e-7, over 2h is ~1e-5, under 1% of the largest gradients).
static void gradient_vs_fd(const char *target) {
    char path[64];
    rg_model *m = load_tiny(target, path);
    RG_REQUIRE(m, "model");
    rg_error err = {0};
    rg_lora *l = NULL;
    RG_REQUIRE(rg_lora_init(&l, m, 2, 4.0f, RG_LORA_TARGETS_ALL, 41, &err) == RG_OK, "%s", err.msg);
    random_b(l, 42, 0.05f);
    const int64_t V = m->hp.n_vocab;
    rg_graph *g = rg_graph_new();
    rg_model_nodes w;
    RG_REQUIRE(rg_model_leaf_nodes(g, m, &w, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_lora_attach(g, l, &w, 1.0f, true, &err) == RG_OK, "%s", err.msg);
    int64_t n = T;
    rg_node *idn = rg_leaf(g, "ids", RG_TYPE_I32, 1, &n, NULL), *pn = rg_leaf(g, "pos", RG_TYPE_I32, 1, &n, NULL);
    rg_node *lab = rg_leaf(g, "labels", RG_TYPE_I32, 1, &n, NULL);
    rg_node *logits = rg_model_forward(g, m, &w, idn, pn, NULL);
    rg_node *loss = rg_cross_entropy_loss(g, logits, lab, -100);
    RG_REQUIRE(loss, "forward: %s", g->err.msg);
    RG_REQUIRE(rg_graph_backward(g, loss, &err) == RG_OK, "%s", err.msg);
    rg_exec *ex = NULL;
    rg_exec_opts eo = {.n_threads = 2};
    RG_REQUIRE(rg_exec_create(&ex, g, &eo, &err) == RG_OK, "%s", err.msg);
    int32_t ids[T];
    make_ids(ids, V);
    memcpy(idn->t.data, ids, sizeof ids);
    for (int i = 0; i < T; i++) {
        ((int32_t *)pn->t.data)[i] = i;
        ((int32_t *)lab->t.data)[i] = i + 1 < T ? ids[i + 1] : -100;
    }
    RG_REQUIRE(rg_exec_run(ex, 0, -1, &err) == RG_OK, "%s", err.msg);
    const int n_fwd = g->n_forward;
    // The backward's buffers are reused by the forward, so keep the gradients before any re-run.
    rg_node *chk[10][2];
    float *grads[10][2];
    static const struct { int il, t; } picks[] = {
        {0, RG_LORA_TARGET_Q}, {1, RG_LORA_TARGET_V}, {0, RG_LORA_TARGET_O}, {1, RG_LORA_TARGET_GATE}, {0, RG_LORA_TARGET_DOWN},
    };
    const int n_picks = quick() ? 2 : (int)(sizeof picks / sizeof picks[0]);
    for (int pi = 0; pi < n_picks; pi++)
        for (int ab = 0; ab < 2; ab++) {
            rg_layer_nodes *N = &w.layers[picks[pi].il];
            rg_node *node = ab ? N->lora_b[picks[pi].t] : N->lora_a[picks[pi].t];
            RG_REQUIRE(node && node->grad, "no gradient for %s", node ? node->t.name : "?");
            int64_t ne = rg_tensor_nelements(&node->t);
            chk[pi][ab] = node;
            grads[pi][ab] = malloc(sizeof(float) * (size_t)ne);
            memcpy(grads[pi][ab], node->grad->t.data, sizeof(float) * (size_t)ne);
        }
    double worst = 0;
    int checked = 0;
    for (int pi = 0; pi < n_picks; pi++) {
        for (int ab = 0; ab < 2; ab++) {
            rg_node *node = chk[pi][ab];
            int64_t ne = rg_tensor_nelements(&node->t);
            const float *gr = grads[pi][ab];
            float *val = node->t.data;
            // the element with the largest gradient and three others
            int64_t idx[4] = {0, ne / 3, ne / 2 + 1, ne - 5};
            double gmax = 0;
            for (int64_t i = 0; i < ne; i++)
                if (fabs(gr[i]) > gmax) gmax = fabs(gr[i]), idx[0] = i;
            RG_CHECK(gmax > 1e-4, "%s: gradient is ~0 (max %.3e)", node->t.name, gmax);
            for (int k = 0; k < 4; k++) {
                float an = gr[idx[k]];
                float keep = val[idx[k]];
                const float h = 2e-2f;
                val[idx[k]] = keep + h;
                RG_REQUIRE(rg_exec_run(ex, 0, n_fwd, &err) == RG_OK, "%s", err.msg);
                double lp = *(float *)loss->t.data;
                val[idx[k]] = keep - h;
                RG_REQUIRE(rg_exec_run(ex, 0, n_fwd, &err) == RG_OK, "%s", err.msg);
                double lm = *(float *)loss->t.data;
                val[idx[k]] = keep;
                double fd = (lp - lm) / (2.0 * (double)h);
                double e = fabs(fd - an) / (0.02 * fabs(an) + 0.01 * gmax);
                worst = fmax(worst, e);
                checked++;
                RG_CHECK(e <= 1.0, "%s[%lld]: backward %.6e, finite differences %.6e (max |grad| %.3e)", node->t.name,
                         (long long)idx[k], an, fd, gmax);
            }
        }
    }
    for (int pi = 0; pi < n_picks; pi++) free(grads[pi][0]), free(grads[pi][1]);
    printf("    %s base: %d elements of A and B: worst |fd - backward| / (0.02|g| + 0.01 max|g|) = %.3f (pass <= 1)\n",
           target, checked, worst);
    rg_exec_free(ex);
    rg_graph_free(g);
    rg_lora_free(l);
    rg_model_free(m);
    unlink(path);
}

static void test_gradient_vs_finite_differences(void) { gradient_vs_fd("F32"); }
// A quantized frozen W: the backward needs only its dX (T = 12 runs the SGEMM path, smooth in A and B).
static void test_gradient_vs_finite_differences_q4_k_m(void) { gradient_vs_fd("Q4_K_M"); }


// The delta s B(A x) of one projection, as a dense [n_in, n_out] matrix (out-major), in double.
static void pair_delta(const rg_lora_pair *p, int64_t rank, double s, double *d) {
    for (int64_t o = 0; o < p->n_out; o++)
        for (int64_t i = 0; i < p->n_in; i++) {
            double acc = 0;
            for (int64_t k = 0; k < rank; k++) acc += (double)p->b[o * rank + k] * p->a[k * p->n_in + i];
            d[o * p->n_in + i] += s * acc;
        }
}

// Two adapters of different ranks and targets, stacked: every projection's delta is the sum of theirs
// (s1 B1 A1 + s2 B2 A2), a projection only one adapter has gets only its delta, and a shape mismatch is refused.
static void test_stack(void) {
    char path[64];
    rg_model *m = load_tiny("F32", path);
    RG_REQUIRE(m, "model");
    rg_error err = {0};
    rg_lora *l[2] = {0}, *st = NULL;
    uint32_t mask1 = (1u << RG_LORA_TARGET_Q) | (1u << RG_LORA_TARGET_DOWN), mask2 = (1u << RG_LORA_TARGET_Q) | (1u << RG_LORA_TARGET_UP);
    RG_REQUIRE(rg_lora_init(&l[0], m, 4, 8.0f, mask1, 1, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_lora_init(&l[1], m, 2, 3.0f, mask2, 2, &err) == RG_OK, "%s", err.msg);
    random_b(l[0], 3, 0.05f);
    random_b(l[1], 4, 0.05f);
    const float scales[2] = {0.5f, 1.5f};
    RG_REQUIRE(rg_lora_stack(&st, l, scales, 2, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(st->rank == 6 && rg_lora_scale(st, 1.0f) == 1.0f && st->targets == (mask1 | mask2), "rank %lld targets 0x%x",
             (long long)st->rank, st->targets);
    double worst = 0;
    for (int64_t i = 0; i < st->n_layer * RG_LORA_N_TARGETS; i++) {
        const rg_lora_pair *p = &st->pairs[i];
        bool want = l[0]->pairs[i].a || l[1]->pairs[i].a;
        RG_CHECK(!p->a == !want, "pair %lld present %d, wanted %d", (long long)i, p->a != NULL, want);
        if (!p->a) continue;
        size_t n = (size_t)(p->n_in * p->n_out);
        double *want_d = calloc(n, sizeof(double)), *got = calloc(n, sizeof(double));
        RG_REQUIRE(want_d && got, "oom");
        for (int j = 0; j < 2; j++)
            if (l[j]->pairs[i].a) pair_delta(&l[j]->pairs[i], l[j]->rank, rg_lora_scale(l[j], scales[j]), want_d);
        pair_delta(p, st->rank, 1.0, got);
        double mx = 0;
        for (size_t k = 0; k < n; k++) mx = fmax(mx, fabs(want_d[k]));
        for (size_t k = 0; k < n; k++) worst = fmax(worst, fabs(got[k] - want_d[k]) / (mx > 0 ? mx : 1));
        free(want_d);
        free(got);
    }
    printf("    stacked delta vs the sum of the two: worst %.2e of max|delta| (pass <= 1e-6)\n", worst);
    RG_CHECK(worst <= 1e-6, "stacked delta off by %.3g", worst);
    // A pair whose shape disagrees names the tensor and both adapters.
    l[1]->pairs[RG_LORA_TARGET_Q].n_in += 1;
    rg_lora *bad = NULL;
    RG_CHECK(rg_lora_stack(&bad, l, scales, 2, &err) != RG_OK && strstr(err.msg, "blk.0.attn_q.weight") &&
                 strstr(err.msg, "adapter 2"), "%s", err.msg);
    l[1]->pairs[RG_LORA_TARGET_Q].n_in -= 1;
    rg_lora_free(st);
    rg_lora_free(l[0]);
    rg_lora_free(l[1]);
    rg_model_free(m);
    unlink(path);
}

static const rg_test_case cases[] = {
    RG_TEST(test_init),
    RG_TEST(test_zero_b_f32),
    RG_TEST(test_zero_b_q8_0),
    RG_TEST(test_runtime_vs_merged_f32),
    RG_TEST(test_runtime_vs_merged_q8_0),
    RG_TEST(test_runtime_vs_merged_q4_k_m),
    RG_TEST(test_merge_f32),
    RG_TEST(test_merge_f16),
    RG_TEST(test_merge_bf16),
    RG_TEST(test_merge_q8_0),
    RG_TEST(test_merge_q4_k_m),
    RG_TEST(test_merge_kept),
    RG_TEST(test_save_load_roundtrip),
    RG_TEST(test_load_errors),
    RG_TEST(test_stack),
    RG_TEST(test_gradient_vs_finite_differences),
    RG_TEST(test_gradient_vs_finite_differences_q4_k_m),
    {0},
};

// The CLI test's helper: a rank-4 adapter over every target with B ~ U(-0.05, 0.05).
static int write_cli_adapter(const char *model_path, const char *out) {
    rg_error err = {0};
    rg_model *m = NULL;
    rg_lora *l = NULL;
    if (rg_model_load(&m, model_path, &err) || rg_lora_init(&l, m, 4, 8.0f, RG_LORA_TARGETS_ALL, 1, &err)) {
        fprintf(stderr, "test_lora: %s\n", err.msg);
        rg_model_free(m);
        return 1;
    }
    random_b(l, 2, 0.05f);
    rg_status s = rg_lora_save(l, m, out, &err);
    if (s) fprintf(stderr, "test_lora: %s\n", err.msg);
    else printf("wrote %s\n", out);
    rg_lora_free(l);
    rg_model_free(m);
    return s ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--write-adapter")) return write_cli_adapter(argv[2], argv[3]);
    return rg_test_run(argc, argv, cases);
}
