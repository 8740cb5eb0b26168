// test_session_state.c - a session's state saved to a file and loaded back (infer/session_state.h), on the tiny
// fixtures (llama, qwen2, lfm2, mamba2; F32 and Q8_0), on the CPU and on the CUDA device (a GPU, or the host
// execution of the CUDA code with RETRO_CUDA_HOST=1; skipped, and counted so, without one):
//   - a prompt batch and single tokens, saved; a session that had evaluated other tokens loads the file and
//     evaluates the continuation the saving session evaluates: the same logits, bit for bit, and after it both
//     save the same file, byte for byte
//   - the same saved after a prompt batch only, loaded by a fresh session
//   - loaded into a session with a smaller context: the bits of a session of that context that evaluated it all;
//     into one too small for the saved tokens: refused
//   - bad input, each refused with an error naming what is wrong, the session left as it was (its continuation
//     gives the same bits as without the attempt): a file from another model (another architecture, other
//     weights), truncated, a wrong magic, format or layout version, trailing bytes, a corrupt byte, a missing
//     file; a save to a directory that does not exist names the path, one onto a full disk (a file size limit)
//     the path and the bytes, leaving the file there as it was; a session whose recurrent state is lost is not
//     saved; an empty session's state loaded into a used one starts it over
//   - a LoRA adapter: the same adapter at the same scale loads, another scale, none, or a base model's file not.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "infer/session.h"
#include "infer/session_state.h"
#include "model/lora.h"
#include "model/quantize.h"
#include "model/tiny.h"
#include "rg_test.h"
#include "session_fixture.h"

enum { N_PROMPT = 9, N_SINGLE = 3, N_CONT = 5, N_CTX = 64 };

// The tokens: a prompt, single tokens after it, then the continuation (a batch of 2, then single tokens).
static int32_t prompt_ids[N_PROMPT], single_ids[N_SINGLE], cont_ids[N_CONT];

static void make_ids(int64_t V) {
    for (int i = 0; i < N_PROMPT; i++) prompt_ids[i] = (int32_t)((i * 37 + 11) % V);
    for (int i = 0; i < N_SINGLE; i++) single_ids[i] = (int32_t)((i * 53 + 7) % V);
    for (int i = 0; i < N_CONT; i++) cont_ids[i] = (int32_t)((i * 29 + 3) % V);
}

static rg_model *tiny_model(const char *arch, uint32_t type, uint64_t seed, char *path) {
    return sf_tiny_model(arch, type, seed, true, path, "state");
}

static rg_session *new_session(const rg_model *m, int64_t n_ctx, rg_device device) {
    rg_session *s = NULL;
    rg_error err = {0};
    rg_session_opts so = {.n_ctx = n_ctx, .n_threads = 2, .n_batch = 4, .device = device};
    if (rg_session_create(&s, m, &so, &err)) printf("    session: %s\n", err.msg);
    return s;
}

// The prompt in one call (batches of 4), then (singles) the single tokens one at a time.
static bool eval_prefix(rg_session *s, bool singles) {
    rg_error err = {0};
    rg_status st = rg_session_eval(s, prompt_ids, N_PROMPT, NULL, 0, &err);
    for (int i = 0; singles && !st && i < N_SINGLE; i++) st = rg_session_eval(s, &single_ids[i], 1, NULL, 0, &err);
    if (st) printf("    prefix: %s\n", err.msg);
    return !st;
}

// The continuation: 2 tokens in one batch (both logits), then one at a time; every logit into out[V * N_CONT].
static bool eval_cont(rg_session *s, float *out) { return sf_eval_cont(s, cont_ids, N_CONT, 2, out); }

static bool save(rg_session *s, const char *path) {
    rg_error err = {0};
    rg_status st = rg_session_state_save(s, path, &err);
    if (st) printf("    save: %s\n", err.msg);
    return !st;
}

static bool load(rg_session *s, const char *path) {
    rg_error err = {0};
    rg_status st = rg_session_state_load(s, path, &err);
    if (st) printf("    load: %s\n", err.msg);
    return !st;
}

static bool same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    unsigned char *x = sf_read_all(a, &na), *y = sf_read_all(b, &nb);
    bool same = x && y && na == nb && !memcmp(x, y, na);
    free(x), free(y);
    return same;
}

static void tmp_path(char *path, const char *tag) {
    snprintf(path, 64, "/tmp/rg_test_state_%s_XXXXXX", tag);
    close(mkstemp(path));
}

// The round trips on one fixture and device.
static void check_round_trip(const char *arch, uint32_t type, rg_device device) {
    char mpath[64], f_single[64], f_batch[64], f_a[64], f_b[64];
    rg_model *m = tiny_model(arch, type, 5, mpath);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab;
    make_ids(V);
    const size_t cont_bytes = sizeof(float) * (size_t)(V * N_CONT);
    float *ref = malloc(cont_bytes), *got = malloc(cont_bytes), *ref_small = malloc(cont_bytes);
    tmp_path(f_single, "single"), tmp_path(f_batch, "batch"), tmp_path(f_a, "a"), tmp_path(f_b, "b");
    const char *dev = device == RG_DEVICE_CUDA ? " on the cuda device" : "";

    // After a batch and single tokens: the saving session goes on; another one, which had evaluated other tokens
    // (on a device: its cache and recurrent state resident there, replaced by the load's upload), loads and goes
    // on the same way.
    rg_session *a = new_session(m, N_CTX, device), *b = new_session(m, N_CTX, device);
    RG_REQUIRE(a && b && eval_prefix(a, true) && save(a, f_single) && eval_cont(a, ref), "%s%s", arch, dev);
    RG_REQUIRE(eval_cont(b, got) && load(b, f_single), "%s%s", arch, dev);
    RG_CHECK(rg_session_n_past(b) == N_PROMPT + N_SINGLE, "n_past %lld after the load",
             (long long)rg_session_n_past(b));
    RG_REQUIRE(eval_cont(b, got), "%s", arch);
    RG_CHECK(!memcmp(got, ref, cont_bytes), "%s %s%s: after a load the continuation's logits differ",
             arch, rg_type_get(type)->name, dev);
    RG_CHECK(save(a, f_a) && save(b, f_b) && same_file(f_a, f_b), "%s%s: after the continuation the states differ",
             arch, dev);
    rg_session_free(a), rg_session_free(b);

    // After a prompt batch only.
    a = new_session(m, N_CTX, device), b = new_session(m, N_CTX, device);
    RG_REQUIRE(a && b && eval_prefix(a, false) && save(a, f_batch) && eval_cont(a, ref), "%s", arch);
    RG_REQUIRE(load(b, f_batch) && eval_cont(b, got), "%s", arch);
    RG_CHECK(rg_session_n_past(b) == N_PROMPT + N_CONT, "n_past %lld", (long long)rg_session_n_past(b));
    RG_CHECK(!memcmp(got, ref, cont_bytes), "%s%s: saved after a batch, the continuation's logits differ", arch, dev);
    rg_session_free(a), rg_session_free(b);

    // Into a smaller context (20: the 12 saved tokens fit): the bits of a session of 20 that evaluated it all.
    enum { SMALL = 20 };
    a = new_session(m, SMALL, device), b = new_session(m, SMALL, device);
    RG_REQUIRE(a && b && eval_prefix(a, true) && eval_cont(a, ref_small), "%s", arch);
    RG_REQUIRE(load(b, f_single) && eval_cont(b, got), "%s", arch);
    RG_CHECK(!memcmp(got, ref_small, cont_bytes), "%s%s: loaded into a context of %d, the logits differ", arch, dev,
             SMALL);
    rg_session_free(a), rg_session_free(b);
    // Into one of 10: refused, naming both numbers, the session untouched.
    b = new_session(m, 10, device);
    RG_REQUIRE(b, "session");
    rg_error err = {0};
    rg_status st = rg_session_state_load(b, f_single, &err);
    RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, "holds 12 tokens, more than this session's context of 10") &&
                 strstr(err.msg, f_single) && rg_session_n_past(b) == 0,
             "%s", st ? err.msg : "accepted");
    rg_session_free(b);
    printf("    %s %s%s: continuations after a load (after single tokens, after a batch, into a context of %d) "
           "compared bit for bit\n", arch, rg_type_get(type)->name, dev, SMALL);

    rg_model_free(m);
    unlink(mpath), unlink(f_single), unlink(f_batch), unlink(f_a), unlink(f_b);
    free(ref), free(got), free(ref_small);
}

// One bad file: the load fails with code want and a message containing each of needles; the session (after the
// prefix) keeps its position.
typedef struct bad_case {
    const char *what;
    rg_status want;
    const char *needle;
} bad_case;

static void expect_refused(rg_session *s, const char *path, const bad_case *c) {
    rg_error err = {0};
    rg_status st = rg_session_state_load(s, path, &err);
    printf("    %s: %s\n", c->what, st ? err.msg : "accepted");
    RG_CHECK(st == c->want && strstr(err.msg, c->needle) && strstr(err.msg, path), "%s: status %d, '%s' (want %d, '%s')",
             c->what, (int)st, err.msg, (int)c->want, c->needle);
    RG_CHECK(rg_session_n_past(s) == N_PROMPT + N_SINGLE, "%s: n_past %lld after the refusal", c->what,
             (long long)rg_session_n_past(s));
}

// Every refusal on one fixture; then the continuation gives the bits of a session that never saw them.
static void check_bad_inputs(const char *arch, const char *other_arch, rg_device device) {
    char mpath[64], opath[64], wpath[64], good[64], bad[64], other[64], other_w[64];
    rg_model *m = tiny_model(arch, RG_TYPE_F32, 5, mpath);
    rg_model *om = tiny_model(other_arch, RG_TYPE_F32, 5, opath);
    rg_model *wm = tiny_model(arch, RG_TYPE_F32, 6, wpath);  // the same shapes, other weights
    RG_REQUIRE(m && om && wm, "models");
    const int64_t V = m->hp.n_vocab;
    make_ids(V);
    const size_t cont_bytes = sizeof(float) * (size_t)(V * N_CONT);
    float *ref = malloc(cont_bytes), *got = malloc(cont_bytes);
    tmp_path(good, "good"), tmp_path(bad, "bad"), tmp_path(other, "other"), tmp_path(other_w, "otherw");
    rg_session *a = new_session(m, N_CTX, device), *s = new_session(m, N_CTX, device);
    rg_session *o = new_session(om, N_CTX, device), *w = new_session(wm, N_CTX, device);
    RG_REQUIRE(a && s && o && w, "sessions");
    RG_REQUIRE(eval_prefix(a, true) && save(a, good) && eval_cont(a, ref), "%s", arch);
    make_ids(om->hp.n_vocab);
    RG_REQUIRE(eval_prefix(o, true) && save(o, other), "%s", other_arch);
    make_ids(V);
    RG_REQUIRE(eval_prefix(w, true) && save(w, other_w), "%s", arch);
    RG_REQUIRE(eval_prefix(s, true), "%s", arch);

    size_t n = 0;
    unsigned char *bytes = sf_read_all(good, &n), *edit = malloc(n + 8);
    RG_REQUIRE(bytes && edit && n > 200, "read %s", good);
    const bad_case other_model = {"a file from another architecture", RG_ERR_ARG, "architecture is"};
    expect_refused(s, other, &other_model);
    const bad_case other_weights = {"a file from other weights", RG_ERR_ARG, "weights hash"};
    expect_refused(s, other_w, &other_weights);
    const bad_case missing = {"a missing file", RG_ERR_IO, "cannot open"};
    expect_refused(s, "/nonexistent-rg-dir/state.bin", &missing);
    // Edits of the good file: {offset, byte} changes, or a length.
    struct {
        bad_case c;
        long offset;   // < 0: none
        unsigned char byte;
        long length;   // the file's new length (< 0: as it was)
    } edits[] = {
        {{"truncated inside the data", RG_ERR_FORMAT, "truncated"}, -1, 0, (long)n - 9},
        {{"truncated inside the header", RG_ERR_FORMAT, "truncated"}, -1, 0, 100},
        {{"an empty file", RG_ERR_FORMAT, "not a retrograd state file"}, -1, 0, 0},
        {{"a wrong magic", RG_ERR_FORMAT, "magic at offset 0"}, 0, 'X', -1},
        {{"a wrong format version", RG_ERR_FORMAT, "format version 99 (offset 8); this build reads versions 1 to 2"},
         8, 99, -1},
        {{"a wrong layout version", RG_ERR_FORMAT, "state layout version 77 (offset 12)"}, 12, 77, -1},
        {{"trailing bytes", RG_ERR_FORMAT, "5 trailing bytes"}, -1, 0, (long)n + 5},
        {{"a corrupt byte in the data", RG_ERR_FORMAT, "checksum"}, (long)sf_state_end(bytes, n) - 40, 0x5a, -1},
        {{"n_past beyond this context", RG_ERR_FORMAT, "does not fit its context"}, 121, 0x10, -1},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        size_t len = edits[i].length < 0 ? n : (size_t)edits[i].length;
        memcpy(edit, bytes, n);
        if (len > n) memset(edit + n, 0xab, len - n);
        if (edits[i].offset >= 0) edit[edits[i].offset] = edit[edits[i].offset] == edits[i].byte ? edits[i].byte ^ 1u : edits[i].byte;
        sf_write_all(bad, edit, len);
        expect_refused(s, bad, &edits[i].c);
    }
    // A save where no file can be: the path named, nothing changed.
    rg_error err = {0};
    rg_status st = rg_session_state_save(s, "/nonexistent-rg-dir/state.bin", &err);
    printf("    a save into a missing directory: %s\n", st ? err.msg : "accepted");
    RG_CHECK(st == RG_ERR_IO && strstr(err.msg, "/nonexistent-rg-dir/state.bin"), "%s", st ? err.msg : "accepted");
    // A full disk, as a file size limit (RLIMIT_FSIZE: writes past 4 KiB fail with EFBIG, SIGXFSZ ignored): the
    // error names the path and the bytes, and the file already there keeps its bytes.
    struct rlimit old_limit;
    RG_REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0, "getrlimit");
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {4096, old_limit.rlim_max};
    RG_REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit");
    st = rg_session_state_save(s, good, &err);
    setrlimit(RLIMIT_FSIZE, &old_limit);
    signal(SIGXFSZ, old_handler);
    printf("    a save onto a full disk: %s\n", st ? err.msg : "accepted");
    size_t n_after = 0;
    unsigned char *after = sf_read_all(good, &n_after);
    RG_CHECK(st == RG_ERR_IO && strstr(err.msg, good) && strstr(err.msg, "failed after") && strstr(err.msg, "bytes"),
             "%s", st ? err.msg : "accepted");
    RG_CHECK(after && n_after == n && !memcmp(after, bytes, n), "the full disk changed %s", good);
    free(after);
    // After every refusal: the bits of the session that never saw them.
    RG_REQUIRE(eval_cont(s, got), "%s", arch);
    RG_CHECK(!memcmp(got, ref, cont_bytes), "%s: after the refused loads the continuation's logits differ", arch);
    // A recurrent state that matches no position is not saved.
    if (!strcmp(arch, "lfm2") || !strcmp(arch, "mamba2")) {
        rg_session_truncate(s, 4);
        st = rg_session_state_save(s, bad, &err);
        printf("    a lost recurrent state: %s\n", st ? err.msg : "saved");
        RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, "not saved") && strstr(err.msg, "recurrent state"), "%s",
                 st ? err.msg : "saved");
        // A load gives it a state again.
        RG_CHECK(load(s, good) && rg_session_n_past(s) == N_PROMPT + N_SINGLE && eval_cont(s, got) &&
                     !memcmp(got, ref, cont_bytes), "%s: a load after the state was lost", arch);
    }
    // An empty session's state (n_past 0) loaded into a used one starts it over: the prefix and the continuation
    // give the bits of a session that never saw anything else.
    rg_session *fresh = new_session(m, N_CTX, device);
    RG_CHECK(fresh && save(fresh, bad) && load(s, bad) && rg_session_n_past(s) == 0 && eval_prefix(s, true) &&
                 eval_cont(s, got) && !memcmp(got, ref, cont_bytes),
             "%s: an empty state loaded into a used session", arch);
    rg_session_free(fresh);
    free(bytes), free(edit), free(ref), free(got);
    rg_session_free(a), rg_session_free(s), rg_session_free(o), rg_session_free(w);
    rg_model_free(m), rg_model_free(om), rg_model_free(wm);
    unlink(mpath), unlink(opath), unlink(wpath), unlink(good), unlink(bad), unlink(other), unlink(other_w);
}

// Whether there is a CUDA device (a GPU, or the host execution); why not into why[256].
// A session applying a LoRA adapter (B made non-zero so it changes the state) saves and loads into one applying
// the same adapter with the continuation's bits; one without it, one at another scale, and a base model's file
// in the adapted session are refused by name.
static void test_lora(void) {
    char mpath[64], f_lora[64], f_base[64];
    rg_model *m = tiny_model("qwen2", RG_TYPE_F32, 5, mpath);
    RG_REQUIRE(m, "model");
    const int64_t V = m->hp.n_vocab;
    make_ids(V);
    rg_lora *l = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_lora_init(&l, m, 4, 8.0f, RG_LORA_TARGETS_ALL, 1, &err) == RG_OK, "%s", err.msg);
    int adapted = 0;
    for (int64_t i = 0; i < l->n_layer * RG_LORA_N_TARGETS; i++) {
        rg_lora_pair *p = &l->pairs[i];
        if (!p->a) continue;
        adapted++;
        for (int64_t k = 0; k < l->rank * p->n_out; k++) p->b[k] = 0.01f * (float)(k % 7 - 3);
    }
    RG_REQUIRE(adapted > 0, "the adapter adapts nothing");
    const size_t cont_bytes = sizeof(float) * (size_t)(V * N_CONT);
    float *ref = malloc(cont_bytes), *got = malloc(cont_bytes), *base = malloc(cont_bytes);
    tmp_path(f_lora, "lora"), tmp_path(f_base, "base");
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = 2, .n_batch = 4, .lora = l, .lora_scale = 1.0f};
    rg_session *a = NULL, *b = NULL, *half = NULL, *plain = new_session(m, N_CTX, RG_DEVICE_CPU);
    RG_REQUIRE(rg_session_create(&a, m, &so, &err) == RG_OK && rg_session_create(&b, m, &so, &err) == RG_OK, "%s",
               err.msg);
    so.lora_scale = 0.5f;
    RG_REQUIRE(rg_session_create(&half, m, &so, &err) == RG_OK && plain, "%s", err.msg);
    RG_REQUIRE(eval_prefix(a, true) && save(a, f_lora) && eval_cont(a, ref), "adapted");
    RG_REQUIRE(eval_prefix(plain, true) && save(plain, f_base) && eval_cont(plain, base), "base");
    RG_CHECK(memcmp(ref, base, cont_bytes), "the adapter changes nothing");
    RG_CHECK(load(b, f_lora) && eval_cont(b, got) && !memcmp(got, ref, cont_bytes),
             "with the same adapter the continuation's logits differ");
    struct {
        rg_session *s;
        const char *file, *needle;
    } refused[] = {
        {plain, f_lora, "saved with a LoRA adapter, this session applies none"},
        {half, f_lora, "saved with another LoRA adapter or scale than this session applies"},
        {half, f_base, "saved without a LoRA adapter, this session applies one"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        const int64_t n_past = rg_session_n_past(refused[i].s);
        rg_status st = rg_session_state_load(refused[i].s, refused[i].file, &err);
        printf("    %s\n", st ? err.msg : "accepted");
        RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, refused[i].needle) && rg_session_n_past(refused[i].s) == n_past,
                 "%s", st ? err.msg : "accepted");
    }
    rg_session_free(a), rg_session_free(b), rg_session_free(half), rg_session_free(plain);
    rg_lora_free(l);
    rg_model_free(m);
    unlink(mpath), unlink(f_lora), unlink(f_base);
    free(ref), free(got), free(base);
}

static bool have_cuda(char *why) { return rg_cuda_device_count(why, 256) > 0; }

#define ROUND_TRIP(name, arch, type)                                                                   \
    static void test_##name(void) { check_round_trip(arch, type, RG_DEVICE_CPU); }                     \
    static void test_cuda_##name(void) {                                                               \
        char why[256];                                                                                 \
        if (!have_cuda(why)) RG_SKIP("no CUDA device: %s", why);                                       \
        check_round_trip(arch, type, RG_DEVICE_CUDA);                                                  \
    }
ROUND_TRIP(llama_f32, "llama", RG_TYPE_F32)
ROUND_TRIP(llama_q8_0, "llama", RG_TYPE_Q8_0)
ROUND_TRIP(qwen2_f32, "qwen2", RG_TYPE_F32)
ROUND_TRIP(qwen2_q8_0, "qwen2", RG_TYPE_Q8_0)
ROUND_TRIP(lfm2_f32, "lfm2", RG_TYPE_F32)
ROUND_TRIP(lfm2_q8_0, "lfm2", RG_TYPE_Q8_0)
ROUND_TRIP(mamba2_f32, "mamba2", RG_TYPE_F32)
ROUND_TRIP(mamba2_q8_0, "mamba2", RG_TYPE_Q8_0)

static void test_bad_inputs_qwen2(void) { check_bad_inputs("qwen2", "llama", RG_DEVICE_CPU); }
static void test_bad_inputs_lfm2(void) { check_bad_inputs("lfm2", "mamba2", RG_DEVICE_CPU); }
static void test_bad_inputs_mamba2(void) { check_bad_inputs("mamba2", "lfm2", RG_DEVICE_CPU); }
static void test_cuda_bad_inputs_lfm2(void) {
    char why[256];
    if (!have_cuda(why)) RG_SKIP("no CUDA device: %s", why);
    check_bad_inputs("lfm2", "qwen2", RG_DEVICE_CUDA);
}

static const rg_test_case cases[] = {
    RG_TEST(test_llama_f32),       RG_TEST(test_llama_q8_0),       RG_TEST(test_qwen2_f32),
    RG_TEST(test_qwen2_q8_0),      RG_TEST(test_lfm2_f32),         RG_TEST(test_lfm2_q8_0),
    RG_TEST(test_mamba2_f32),      RG_TEST(test_mamba2_q8_0),      RG_TEST(test_bad_inputs_qwen2),
    RG_TEST(test_bad_inputs_lfm2), RG_TEST(test_bad_inputs_mamba2), RG_TEST(test_lora),
    RG_TEST(test_cuda_llama_f32),  RG_TEST(test_cuda_llama_q8_0),  RG_TEST(test_cuda_qwen2_f32),
    RG_TEST(test_cuda_qwen2_q8_0), RG_TEST(test_cuda_lfm2_f32),    RG_TEST(test_cuda_lfm2_q8_0),
    RG_TEST(test_cuda_mamba2_f32), RG_TEST(test_cuda_mamba2_q8_0), RG_TEST(test_cuda_bad_inputs_lfm2),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
