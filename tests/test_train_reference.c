// test_train_reference.c - our trainer against PyTorch + transformers on the
// tiny fixtures (tools/reference/train_reference.py; its README section
// describes the fixture files byte by byte).
//
//   train-grads.ref  the loss and every parameter's gradient on one batch
//                    (per tensor: L2 norm, max |g|, 65 sampled elements);
//   train-grads-llama.ref, train-grads-qwen3.ref: the same for the tiny llama
//                    (gradients of attn_q/attn_k in the GGUF's permuted row
//                    order) and the tiny qwen3 (with attn_{q,k}_norm);
//   train-grads-lfm2.ref, train-grads-mamba2.ref: the same for the tiny lfm2
//                    (a short-conv and an attention layer) and mamba2 (the
//                    SSM mixer; A frozen on both sides);
//   train-adamw.ref  10 AdamW steps (decay on 2-D tensors, clip 1.0, cosine
//                    with 3 warmup steps): per-step loss, pre-clip norm, lr;
//                    then per tensor the norm of (final - initial) and 65
//                    sampled final weights;
//   train-sgd.ref    the same with SGD lr 0.05, no clipping, constant lr;
//   train-adamw-lfm2.ref, train-adamw-mamba2.ref: the AdamW trajectory on the
//                    hybrids (no decay on their conv kernels, norms and D);
//   train-{grads,adamw}-gemma{2,3}.ref: the same two for the tiny gemma2 and gemma3.
//
// Tolerances (stated once, here). The reference itself is float32; its own
// distance from float64, measured when the references were made (loss 1e-7, norms 1e-6, AdamW
// samples up to 2.1e-3 of the tensor's max |delta|). Ours sums in other
// orders, so:
//   loss, per step:                 relative 1e-6 (measured worst 1.1e-7 over the four
//                                   trajectories)
//   pre-clip global norm:           relative 1e-4 (measured worst 4e-6)
//   lr:                             relative 1e-9 (host double)
//   gradient norm per tensor:       relative 1e-3
//   gradient samples:               |ours - ref| <= 2e-3 * max|g| of the tensor
//   delta norm per tensor (steps):  relative 1e-3 (measured worst 2.3e-5)
//   final weight samples:           |ours - ref| <= 1e-2 * max|delta| of the tensor + 1e-7 |ref|
//                                   (measured worst 1.7e-3: qwen2's attn_k.bias, whose tiny
//                                   gradients Adam normalizes to full-size steps)
// The references once let nn.Embedding's padding_idx drop the pad token's input-side
// gradient (transformers sets it from the file's padding_token_id); the loss's true gradient
// has it, and the script now clears padding_idx: that is what the 5e-5 / 1e-3 bounds hid.
#include "model/model.h"
#include "model/tiny.h"
#include "train/train_state.h"

#include "rg_test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef RG_SOURCE_DIR
#define RG_SOURCE_DIR "."
#endif

typedef struct ref_tensor {
    char name[64];
    int64_t ne0, ne1;
    double norm, maxabs;
    int n_samples;
    int64_t idx[80];
    double val[80];
} ref_tensor;

typedef struct ref_file {
    char kind[16];
    char arch[16];  // the make-tiny architecture the fixture was made from
    uint64_t fnv;
    char hp_keys[32][32];
    char hp_vals[32][32];
    int n_hp;
    int nb, B, T;
    int32_t *ids, *labels;  // [nb][B][T]
    double loss, gnorm;
    int64_t valid;
    int n_steps;
    double step_loss[32], step_gnorm[32], step_lr[32];
    int n_tensors;
    ref_tensor *t;
} ref_file;

static void ref_free(ref_file *r) {
    free(r->ids), free(r->labels), free(r->t);
    memset(r, 0, sizeof *r);
}

static const char *hp(const ref_file *r, const char *key) {
    for (int i = 0; i < r->n_hp; i++)
        if (!strcmp(r->hp_keys[i], key)) return r->hp_vals[i];
    return NULL;
}
static double hpd(const ref_file *r, const char *key) {
    const char *v = hp(r, key);
    return v ? strtod(v, NULL) : NAN;
}

// Reads a fixture; returns false with a message on any line it does not expect.
static bool ref_read(const char *name, ref_file *r, char *why, size_t cap) {
    memset(r, 0, sizeof *r);
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/reference/%s", RG_SOURCE_DIR, name);
    FILE *f = fopen(path, "r");
    if (!f) return snprintf(why, cap, "cannot open %s", path), false;
    static char line[1 << 16];
    int line_no = 0;
    ref_tensor *cur = NULL;
    bool ok = true, ended = false;
    while (ok && fgets(line, sizeof line, f)) {
        line_no++;
        char *save = NULL, *tok = strtok_r(line, " \n", &save);
        if (!tok) continue;
#define NEXT() strtok_r(NULL, " \n", &save)
        if (!strcmp(tok, "rgtrain")) {
            NEXT();
            snprintf(r->kind, sizeof r->kind, "%s", NEXT());
        } else if (!strcmp(tok, "model")) {
            const char *arch = NEXT();
            snprintf(r->arch, sizeof r->arch, "%s", arch ? arch : "");
            for (int i = 0; i < 3; i++) NEXT();
            NEXT();  // "fnv1a64"
            r->fnv = strtoull(NEXT(), NULL, 16);
        } else if (!strcmp(tok, "hparam") && r->n_hp < 32) {
            snprintf(r->hp_keys[r->n_hp], 32, "%s", NEXT());
            snprintf(r->hp_vals[r->n_hp], 32, "%s", NEXT());
            r->n_hp++;
        } else if (!strcmp(tok, "batches")) {
            r->nb = atoi(NEXT()), r->B = atoi(NEXT()), r->T = atoi(NEXT());
            size_t n = (size_t)r->nb * r->B * r->T;
            r->ids = calloc(n, sizeof *r->ids), r->labels = calloc(n, sizeof *r->labels);
        } else if (!strcmp(tok, "ids") || !strcmp(tok, "labels")) {
            int k = atoi(NEXT()), b = atoi(NEXT());
            if (!r->ids || k >= r->nb || b >= r->B) {
                ok = false;
                break;
            }
            int32_t *dst = (!strcmp(tok, "ids") ? r->ids : r->labels) + ((size_t)k * r->B + b) * r->T;
            for (int i = 0; i < r->T; i++) {
                char *v = NEXT();
                if (!v) {
                    ok = false;
                    break;
                }
                dst[i] = atoi(v);
            }
        } else if (!strcmp(tok, "loss")) {
            r->loss = strtod(NEXT(), NULL);
        } else if (!strcmp(tok, "valid")) {
            r->valid = atoll(NEXT());
        } else if (!strcmp(tok, "gnorm")) {
            r->gnorm = strtod(NEXT(), NULL);
        } else if (!strcmp(tok, "step")) {
            int k = atoi(NEXT());
            if (k >= 32) {
                ok = false;
                break;
            }
            r->step_loss[k] = strtod(NEXT(), NULL);
            r->step_gnorm[k] = strtod(NEXT(), NULL);
            r->step_lr[k] = strtod(NEXT(), NULL);
            if (k + 1 > r->n_steps) r->n_steps = k + 1;
        } else if (!strcmp(tok, "tensors")) {
            r->t = calloc((size_t)atoi(NEXT()), sizeof *r->t);
        } else if (!strcmp(tok, "tensor")) {
            cur = &r->t[r->n_tensors++];
            snprintf(cur->name, sizeof cur->name, "%s", NEXT());
            cur->ne0 = atoll(NEXT()), cur->ne1 = atoll(NEXT());
            NEXT(), cur->norm = strtod(NEXT(), NULL);
            NEXT(), cur->maxabs = strtod(NEXT(), NULL);
        } else if (!strcmp(tok, "sample") && cur && cur->n_samples < 80) {
            cur->idx[cur->n_samples] = atoll(NEXT());
            cur->val[cur->n_samples] = strtod(NEXT(), NULL);
            cur->n_samples++;
        } else if (!strcmp(tok, "end")) {
            ended = true;
        } else {
            ok = false;
        }
#undef NEXT
    }
    fclose(f);
    if (!ok || !ended) {
        snprintf(why, cap, "%s: unexpected content at line %d%s", path, line_no, ended ? "" : " (or no 'end')");
        ref_free(r);
        return false;
    }
    return true;
}

static uint64_t fnv1a64_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint64_t h = 0xCBF29CE484222325ull;
    int c;
    while ((c = fgetc(f)) != EOF) h = (h ^ (uint64_t)(unsigned char)c) * 0x100000001B3ull;
    fclose(f);
    return h;
}

// The tiny f32 fixture of the reference's architecture, written the way the script made it.
static rg_model *tiny_model(const char *arch, uint64_t want_fnv, char *path, size_t cap) {
    snprintf(path, cap, "/tmp/rg_train_ref_%d.gguf", (int)getpid());
    rg_tiny_config tc = {.arch = arch, .type = RG_TYPE_F32, .seed = 42};  // make-tiny's defaults
    rg_error err = {0};
    if (rg_tiny_write(&tc, path, &err)) {
        RG_CHECK(0, "make tiny: %s", err.msg);
        return NULL;
    }
    uint64_t h = fnv1a64_file(path);
    RG_CHECK(h == want_fnv, "the tiny fixture drifted: fnv1a64 %016llx, the reference was made from %016llx",
             (unsigned long long)h, (unsigned long long)want_fnv);
    rg_model *m = NULL;
    if (rg_model_load(&m, path, &err)) RG_CHECK(0, "load: %s", err.msg);
    return m;
}

static rg_train_config ref_config(const ref_file *r, int optimizer) {
    rg_train_config c;
    rg_train_config_defaults(&c);
    c.method = RG_TRAIN_FULL;
    c.optimizer = optimizer;
    c.ctx = r->T;
    c.batch_size = r->B;
    c.grad_accum = 1;
    c.threads = 2;
    c.eval_split = 0;
    if (r->n_steps) {
        c.lr = hpd(r, "lr");
        c.weight_decay = optimizer == RG_OPTIM_ADAMW ? hpd(r, "weight_decay") : 0.0;
        c.beta1 = hp(r, "beta1") ? hpd(r, "beta1") : 0.9;
        c.beta2 = hp(r, "beta2") ? hpd(r, "beta2") : 0.999;
        c.eps = hp(r, "eps") ? hpd(r, "eps") : 1e-8;
        c.clip_grad_norm = hpd(r, "max_grad_norm");
        const char *sched = hp(r, "schedule");
        c.schedule = sched && !strcmp(sched, "cosine") ? RG_SCHED_COSINE : RG_SCHED_CONSTANT;
        c.warmup_steps = hp(r, "warmup_steps") ? (int64_t)hpd(r, "warmup_steps") : 0;
        c.steps = r->n_steps;
    }
    return c;
}

static void pos_seg(int T, int32_t *pos, int32_t *seg) {
    for (int i = 0; i < T; i++) pos[i] = i, seg[i] = 0;
}

static int64_t valid_of(const ref_file *r, int k) {
    int64_t n = 0;
    for (int i = 0; i < r->B * r->T; i++) n += r->labels[(size_t)k * r->B * r->T + i] != -100;
    return n;
}

// One step's rows; returns the step loss.
static double run_rows(rg_train_state *s, const ref_file *r, int k, rg_error *err, rg_status *st) {
    int32_t pos[1024], seg[1024];
    pos_seg(r->T, pos, seg);
    double inv_n = 1.0 / (double)valid_of(r, k), loss = 0.0;
    for (int b = 0; b < r->B; b++) {
        double l = 0.0;
        size_t off = ((size_t)k * r->B + b) * r->T;
        *st = rg_train_state_micro(s, r->ids + off, r->labels + off, pos, seg, inv_n, &l, err);
        if (*st) return NAN;
        loss += l;
    }
    return loss;
}

static const rg_train_tensor *find_tensor(const rg_train_state *s, const char *name) {
    for (int k = 0; k < s->n_tensors; k++)
        if (!strcmp(s->tensors[k].name, name)) return &s->tensors[k];
    return NULL;
}

static double f32_at(const void *data, int64_t i) { return (double)((const float *)data)[i]; }

static void check_gradients(const char *file) {
    ref_file r;
    char why[600], path[256];
    if (!ref_read(file, &r, why, sizeof why)) RG_REQUIRE(0, "%s", why);
    rg_model *m = tiny_model(r.arch, r.fnv, path, sizeof path);
    if (!m) {
        ref_free(&r);
        return;
    }
    rg_train_config c = ref_config(&r, RG_OPTIM_ADAMW);
    c.steps = 1;
    rg_train_state *s = NULL;
    rg_error err = {0};
    rg_train_spec sp;
    rg_status st = rg_train_config_validate(&c, &sp, &err);
    if (!st) st = rg_train_state_create(&s, m, &sp, 1, &err);
    RG_CHECK(st == RG_OK, "create: %s", err.msg);
    if (st == RG_OK) {
        RG_CHECK(valid_of(&r, 0) == r.valid, "valid targets %lld, fixture %lld", (long long)valid_of(&r, 0), (long long)r.valid);
        double loss = run_rows(s, &r, 0, &err, &st);
        RG_CHECK(st == RG_OK, "micro: %s", err.msg);
        RG_CHECK(fabs(loss - r.loss) <= 2e-5 * fabs(r.loss), "loss %.9g, torch %.9g", loss, r.loss);
        double gn = rg_grad_global_norm(s->tensors, s->n_tensors, NULL);
        RG_CHECK(fabs(gn - r.gnorm) <= 1e-4 * r.gnorm, "global grad norm %.9g, torch %.9g", gn, r.gnorm);
        RG_CHECK(s->n_tensors == r.n_tensors, "%d trainable tensors, the reference has %d", s->n_tensors, r.n_tensors);
        double worst_norm = 0, worst_sample = 0;
        for (int i = 0; i < r.n_tensors; i++) {
            const ref_tensor *rt = &r.t[i];
            const rg_train_tensor *t = find_tensor(s, rt->name);
            if (!t) {
                RG_CHECK(0, "no trainable tensor '%s'", rt->name);
                continue;
            }
            RG_CHECK(t->ne[0] == rt->ne0 && t->ne[1] == rt->ne1, "%s: shape [%lld, %lld], reference [%lld, %lld]", rt->name,
                     (long long)t->ne[0], (long long)t->ne[1], (long long)rt->ne0, (long long)rt->ne1);
            double ss = 0;
            for (int64_t e = 0; e < t->nel; e++) ss += (double)t->grad[e] * t->grad[e];
            double rel = fabs(sqrt(ss) - rt->norm) / rt->norm;
            if (rel > worst_norm) worst_norm = rel;
            RG_CHECK(rel <= 1e-3, "%s: gradient norm %.9g, torch %.9g (rel %.2e)", rt->name, sqrt(ss), rt->norm, rel);
            for (int j = 0; j < rt->n_samples; j++) {
                double v = f32_at(t->grad, rt->idx[j]), d = fabs(v - rt->val[j]) / rt->maxabs;
                if (d > worst_sample) worst_sample = d;
                RG_CHECK(d <= 2e-3, "%s[%lld]: gradient %.9g, torch %.9g (%.2e of max|g|)", rt->name, (long long)rt->idx[j], v,
                         rt->val[j], d);
            }
        }
        printf("    %s (%s): loss %.9g (torch %.9g), grad norm %.9g (torch %.9g); worst tensor-norm gap %.2e, "
               "worst sample gap %.2e of max|g|\n", file, r.arch, loss, r.loss, gn, r.gnorm, worst_norm, worst_sample);
    }
    rg_train_state_free(s);
    rg_model_free(m);
    unlink(path);
    ref_free(&r);
}

static void check_trajectory(const char *file, int optimizer) {
    ref_file r;
    char why[600], path[256];
    if (!ref_read(file, &r, why, sizeof why)) RG_REQUIRE(0, "%s", why);
    rg_model *m = tiny_model(r.arch, r.fnv, path, sizeof path);
    if (!m) {
        ref_free(&r);
        return;
    }
    rg_train_config c = ref_config(&r, optimizer);
    rg_train_state *s = NULL;
    rg_error err = {0};
    rg_train_spec sp;
    rg_status st = rg_train_config_validate(&c, &sp, &err);
    if (!st) st = rg_train_state_create(&s, m, &sp, r.n_steps, &err);
    RG_CHECK(st == RG_OK, "create: %s", err.msg);
    // initial weights, to form (final - initial)
    float **init = calloc((size_t)(s ? s->n_tensors : 0) + 1, sizeof *init);
    for (int k = 0; s && k < s->n_tensors; k++) {
        init[k] = malloc(sizeof(float) * (size_t)s->tensors[k].nel);
        memcpy(init[k], s->tensors[k].w, sizeof(float) * (size_t)s->tensors[k].nel);
    }
    double worst_loss = 0;
    int worst_step = -1;
    for (int k = 0; st == RG_OK && k < r.n_steps; k++) {
        double loss = run_rows(s, &r, k, &err, &st);
        RG_CHECK(st == RG_OK, "step %d: %s", k, err.msg);
        if (st) break;
        double gn = 0, lr = 0;
        bool skipped = false;
        st = rg_train_state_step(s, &gn, &lr, &skipped, &err);
        RG_CHECK(st == RG_OK && !skipped, "step %d: %s", k, st ? err.msg : "skipped");
        double rl = fabs(loss - r.step_loss[k]) / fabs(r.step_loss[k]);
        if (rl > worst_loss) worst_loss = rl, worst_step = k;
        RG_CHECK(rl <= 1e-6, "step %d: loss %.9g, torch %.9g", k, loss, r.step_loss[k]);
        RG_CHECK(fabs(gn - r.step_gnorm[k]) <= 1e-4 * r.step_gnorm[k], "step %d: grad norm %.9g, torch %.9g", k, gn,
                 r.step_gnorm[k]);
        RG_CHECK(fabs(lr - r.step_lr[k]) <= 1e-9 * fabs(r.step_lr[k]) + 1e-15, "step %d: lr %.12g, torch %.12g", k, lr,
                 r.step_lr[k]);
    }
    double worst_delta = 0, worst_sample = 0;
    const char *where_delta = "-", *where_sample = "-";
    for (int i = 0; st == RG_OK && i < r.n_tensors; i++) {
        const ref_tensor *rt = &r.t[i];
        const rg_train_tensor *t = find_tensor(s, rt->name);
        if (!t) {
            RG_CHECK(0, "no trainable tensor '%s'", rt->name);
            continue;
        }
        const float *w0 = init[t - s->tensors];
        double ss = 0;
        for (int64_t e = 0; e < t->nel; e++) {
            double d = (double)((const float *)t->w)[e] - w0[e];
            ss += d * d;
        }
        double rel = rt->norm > 0 ? fabs(sqrt(ss) - rt->norm) / rt->norm : sqrt(ss);
        if (rel > worst_delta) worst_delta = rel, where_delta = rt->name;
        RG_CHECK(rel <= 1e-3, "%s: |final - initial| %.9g, torch %.9g (rel %.2e)", rt->name, sqrt(ss), rt->norm, rel);
        for (int j = 0; j < rt->n_samples; j++) {
            double v = f32_at(t->w, rt->idx[j]);
            double d = fabs(v - rt->val[j]);
            double tol = 1e-2 * rt->maxabs + 1e-7 * fabs(rt->val[j]);
            if (rt->maxabs > 0 && d / rt->maxabs > worst_sample) worst_sample = d / rt->maxabs, where_sample = rt->name;
            RG_CHECK(d <= tol, "%s[%lld]: final %.9g, torch %.9g (|diff| %.2e, max|delta| %.2e)", rt->name,
                     (long long)rt->idx[j], v, rt->val[j], d, rt->maxabs);
        }
    }
    printf("    %s: %d steps, worst loss gap %.2e (step %d), worst delta-norm gap %.2e (%s), worst final-weight gap %.2e of "
           "max|delta| (%s)\n", file, r.n_steps, worst_loss, worst_step, worst_delta, where_delta, worst_sample, where_sample);
    for (int k = 0; s && k < s->n_tensors; k++) free(init[k]);
    free(init);
    rg_train_state_free(s);
    rg_model_free(m);
    unlink(path);
    ref_free(&r);
}

static void test_reference_gradients(void) { check_gradients("train-grads.ref"); }
static void test_reference_gradients_llama(void) { check_gradients("train-grads-llama.ref"); }
static void test_reference_gradients_qwen3(void) { check_gradients("train-grads-qwen3.ref"); }
// lfm2 (short conv: SSM_CONV's backward) and mamba2 (SSM_CONV, SSM_SCAN and SSM_DT's backward, A frozen on both sides).
static void test_reference_gradients_lfm2(void) { check_gradients("train-grads-lfm2.ref"); }
static void test_reference_gradients_mamba2(void) { check_gradients("train-grads-mamba2.ref"); }
static void test_reference_adamw(void) { check_trajectory("train-adamw.ref", RG_OPTIM_ADAMW); }
static void test_reference_sgd(void) { check_trajectory("train-sgd.ref", RG_OPTIM_SGD); }
// 10 AdamW steps through the hybrids' conv and scan backward, with the decay rule on their
// conv kernels, norms and D (no decay, as torch's 2-D rule leaves HF's 3-D/1-D tensors).
static void test_reference_adamw_lfm2(void) { check_trajectory("train-adamw-lfm2.ref", RG_OPTIM_ADAMW); }
static void test_reference_adamw_mamba2(void) { check_trajectory("train-adamw-mamba2.ref", RG_OPTIM_ADAMW); }

// gemma2 (attention and logit caps, the sliding window of 8 inside the 64-token rows, GeGLU, post norms; the head
// falls back to the unfused loss, which the cap needs) and gemma3 (q/k norms, five sliding layers with their own
// RoPE base): the gradients and 10 AdamW steps. HF's norm weights are the file's minus 1: the script compares and
// writes them in the file's terms.
static void test_reference_gradients_gemma2(void) { check_gradients("train-grads-gemma2.ref"); }
static void test_reference_gradients_gemma3(void) { check_gradients("train-grads-gemma3.ref"); }
static void test_reference_adamw_gemma2(void) { check_trajectory("train-adamw-gemma2.ref", RG_OPTIM_ADAMW); }
static void test_reference_adamw_gemma3(void) { check_trajectory("train-adamw-gemma3.ref", RG_OPTIM_ADAMW); }

static const rg_test_case cases[] = {
    RG_TEST(test_reference_gradients),
    RG_TEST(test_reference_gradients_llama),
    RG_TEST(test_reference_gradients_qwen3),
    RG_TEST(test_reference_gradients_lfm2),
    RG_TEST(test_reference_gradients_mamba2),
    RG_TEST(test_reference_adamw),
    RG_TEST(test_reference_sgd),
    RG_TEST(test_reference_adamw_lfm2),
    RG_TEST(test_reference_adamw_mamba2),
    RG_TEST(test_reference_gradients_gemma2),
    RG_TEST(test_reference_gradients_gemma3),
    RG_TEST(test_reference_adamw_gemma2),
    RG_TEST(test_reference_adamw_gemma3),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
