// test_train_hybrid.c - training graphs of the recurrent architectures (lfm2's
// short conv, mamba2's SSM) on the tiny models, full F32:
//   - packed documents: the loss of a row holding two documents equals the
//     losses of each document alone (the document ids restart the conv and the
//     scan, training.md §8.4), and without those ids it does not;
//   - the step's gradients against central finite differences of the loss,
//     through every conv and SSM tensor (and the layer norms around them);
//   - layer recompute from F32 inputs: the same loss and gradients bit for bit.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "train_rows.h"
#include "train/train_state.h"

enum { T = 32, SPLIT = 13 };

static const char *const ARCHS[] = {"lfm2", "mamba2"};
enum { N_ARCHS = sizeof ARCHS / sizeof ARCHS[0] };

static char model_path[256];

static rg_model *tiny(const char *arch) {
    snprintf(model_path, sizeof model_path, "/tmp/rg_test_hybrid_%d.gguf", (int)getpid());
    rg_tiny_config tc = {.arch = arch, .type = RG_TYPE_F32, .seed = 7};
    rg_error err = {0};
    rg_model *m = tt_tiny(model_path, &tc, RG_TYPE_F32, &err);
    RG_CHECK(m, "tiny %s: %s", arch, err.msg);
    return m;
}

// Runs check on each architecture's tiny model.
static void for_each_arch(void (*check)(const rg_model *m, const char *arch)) {
    for (int a = 0; a < N_ARCHS; a++) {
        rg_model *m = tiny(ARCHS[a]);
        if (m) check(m, ARCHS[a]);
        rg_model_free(m);
        unlink(model_path);
    }
}

// A full F32 training state of m (T tokens); NULL with the failure recorded.
static rg_train_state *full_state(const rg_model *m, const char *arch, rg_recompute rc) {
    rg_train_config c = tt_config(RG_TRAIN_FULL, T);
    c.recompute = rc;
    c.checkpoint_dtype = RG_TYPE_F32;
    rg_error err = {0};
    rg_train_state *s = tt_state(m, &c, 0, &err);
    RG_CHECK(s, "%s: %s", arch, err.msg);
    return s;
}

// Two documents split at SPLIT, a target at every position but each document's last.
static const tt_rows ROWS = {.T = T, .split = SPLIT, .mod = 1000, .rem = 999, .mul = 0x9E3779B9u, .add = 1};

// The summed target loss of one row.
static double row_loss(rg_train_state *s, const int32_t *ids, const int32_t *labels, const int32_t *pos,
                       const int32_t *seg) {
    double sum = 0;
    int64_t n = 0;
    rg_error err = {0};
    RG_CHECK(rg_train_state_eval_row(s, ids, labels, pos, seg, &sum, &n, &err) == RG_OK, "eval: %s", err.msg);
    return sum;
}

// Document `doc` of the packed row alone at the start of a row, the rest padding (no targets, a later document).
static void alone(const int32_t *ids, const int32_t *labels, const int32_t *seg, int doc, int32_t *a_ids,
                  int32_t *a_labels, int32_t *a_pos, int32_t *a_seg) {
    int n = 0;
    for (int i = 0; i < T; i++)
        if (seg[i] == doc) a_ids[n] = ids[i], a_labels[n] = labels[i], n++;
    for (int i = 0; i < T; i++) {
        a_pos[i] = i < n ? i : i - n;
        a_seg[i] = i < n ? 0 : 1;
        if (i >= n) a_ids[i] = ids[i], a_labels[i] = -100;
    }
}

static void packed_documents(const rg_model *m, const char *arch) {
    rg_train_state *s = full_state(m, arch, RG_RECOMPUTE_NONE);
    if (!s) return;
    int32_t ids[T], labels[T], pos[T], seg[T], x_ids[T], x_labels[T], x_pos[T], x_seg[T];
    tt_make_row(&ROWS, 0, ids, labels, pos, seg);
    const double packed = row_loss(s, ids, labels, pos, seg);
    alone(ids, labels, seg, 0, x_ids, x_labels, x_pos, x_seg);
    double parts = row_loss(s, x_ids, x_labels, x_pos, x_seg);
    alone(ids, labels, seg, 1, x_ids, x_labels, x_pos, x_seg);
    parts += row_loss(s, x_ids, x_labels, x_pos, x_seg);
    // One document id for the whole row: the second document sees the first.
    int32_t one[T] = {0};
    const double joined = row_loss(s, ids, labels, pos, one);
    const double rel = fabs(packed - parts) / parts, rel_joined = fabs(joined - parts) / parts;
    printf("    %s: packed row %.9g, documents alone %.9g (rel %.2e <= 1e-6); without document ids %.9g "
           "(rel %.2e > 1e-4)\n", arch, packed, parts, rel, joined, rel_joined);
    RG_CHECK(rel <= 1e-6, "%s: the packed row's loss is not its documents' losses", arch);
    RG_CHECK(rel_joined > 1e-4, "%s: the document ids change nothing", arch);
    rg_train_state_free(s);
}
static void test_packed_documents_restart(void) { for_each_arch(packed_documents); }

// Per trainable tensor of a conv/SSM layer and the norms, its largest-gradient element against a central
// difference (h = 1e-2) of the row's summed loss. Bound: 2e-2 of the gradient (the difference's truncation) plus the
// F32 loss's rounding over 2h (4 units of 6e-8 of the loss).
static void finite_differences(const rg_model *m, const char *arch) {
    rg_train_state *s = full_state(m, arch, RG_RECOMPUTE_NONE);
    if (!s) return;
    int32_t ids[T], labels[T], pos[T], seg[T];
    tt_make_row(&ROWS, 0, ids, labels, pos, seg);
    double loss;
    rg_error err = {0};
    RG_CHECK(rg_train_state_micro(s, ids, labels, pos, seg, 1.0, &loss, &err) == RG_OK, "micro: %s", err.msg);
    // Each tensor's largest gradient, read before the evaluations reuse the step graph's buffers.
    enum { MAX_TENSORS = 64 };
    int64_t at[MAX_TENSORS] = {0};
    double gmax[MAX_TENSORS] = {0}, gat[MAX_TENSORS] = {0};
    const int n = s->n_tensors < MAX_TENSORS ? s->n_tensors : MAX_TENSORS;
    for (int k = 0; k < n; k++) {
        for (int64_t i = 0; i < s->tensors[k].nel; i++)
            if (fabs(s->tensors[k].grad[i]) > gmax[k]) gmax[k] = fabs(s->tensors[k].grad[i]), at[k] = i;
        gat[k] = s->tensors[k].grad[at[k]];
    }
    int checked = 0, worst_k = 0;
    double worst = 0;
    const double noise = 4.0 * 6e-8 * loss;
    for (int k = 0; k < n && !err.status; k++) {
        rg_train_tensor *t = &s->tensors[k];
        if (!strstr(t->name, "shortconv") && !strstr(t->name, "ssm") && !strstr(t->name, "norm")) continue;
        float *w = t->w, w0 = w[at[k]];
        const float h = 1e-2f * fmaxf(1.0f, fabsf(w0));
        w[at[k]] = w0 + h;
        const double up = row_loss(s, ids, labels, pos, seg);
        w[at[k]] = w0 - h;
        const double down = row_loss(s, ids, labels, pos, seg);
        w[at[k]] = w0;
        const double fd = (up - down) / (2.0 * (double)h), g = gat[k];
        if (fabs(fd - g) / fabs(g) > worst) worst = fabs(fd - g) / fabs(g), worst_k = k;
        RG_CHECK(fabs(fd - g) <= 2e-2 * fabs(g) + noise / h, "%s: %s[%lld]: gradient %.6g, finite difference %.6g",
                 arch, t->name, (long long)at[k], g, fd);
        checked++;
    }
    printf("    %s: %d tensors, worst |fd - g| / |g| %.2e (%s)\n", arch, checked, worst, s->tensors[worst_k].name);
    RG_CHECK(checked >= 4 && n == s->n_tensors, "%s: %d of %d tensors checked", arch, checked, s->n_tensors);
    rg_train_state_free(s);
}
static void test_gradients_finite_differences(void) { for_each_arch(finite_differences); }

static void recompute_same_bits(const rg_model *m, const char *arch) {
    rg_train_state *sa = full_state(m, arch, RG_RECOMPUTE_NONE), *sb = full_state(m, arch, RG_RECOMPUTE_LAYER);
    double la = 0, lb = 1;
    rg_error err = {0};
    if (sa && sb && tt_micro(&ROWS, sa, 1, &la, &err) == RG_OK && tt_micro(&ROWS, sb, 1, &lb, &err) == RG_OK) {
        int differ = 0;
        for (int k = 0; k < sa->n_tensors; k++)
            differ += memcmp(sa->tensors[k].grad, sb->tensors[k].grad, (size_t)sa->tensors[k].nel * 4) != 0;
        printf("    %s: loss %.9g and %.9g with layer recompute; %d of %d gradients differ\n", arch, la, lb, differ,
               sa->n_tensors);
        RG_CHECK(sb->recompute && !memcmp(&la, &lb, sizeof la) && differ == 0, "%s: recompute changes the step", arch);
    } else {
        RG_CHECK(0, "%s: micro: %s", arch, err.msg);
    }
    rg_train_state_free(sa);
    rg_train_state_free(sb);
}
static void test_recompute_same_bits(void) { for_each_arch(recompute_same_bits); }

static const rg_test_case cases[] = {
    RG_TEST(test_packed_documents_restart),
    RG_TEST(test_gradients_finite_differences),
    RG_TEST(test_recompute_same_bits),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
