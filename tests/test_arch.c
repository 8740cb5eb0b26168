// test_arch.c - the architecture tables (model/arch.h): lfm2, mamba2, gemma2 and gemma3 files
// load with their hyperparameters, layer kinds and tensors; hostile files
// (built from the fixtures with the project's GGUF writer, one key or tensor
// changed) are refused naming the key or tensor and what was expected; each
// layer's state is what its kinds describe; short-conv and SSM layers build
// through the forward, a session and training; make-tiny writes every architecture
// deterministically, in every type quantize makes.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/exec.h"
#include "infer/session.h"
#include "model/forward.h"
#include "model/lora.h"
#include "model/quantize.h"
#include "model/quantize_rules.h"
#include "model/state.h"
#include "model/tiny.h"
#include "train/train_state.h"
#include "full_pass.h"
#include "rg_test.h"

static bool quick(void) { return getenv("RG_TEST_QUICK") != NULL; }

static void tmp_path(char *path, const char *tag) {
    snprintf(path, 64, "/tmp/rg_test_arch_%sXXXXXX", tag);
    close(mkstemp(path));
}

static rg_model *load_tiny(const char *arch, uint32_t type, char *path) {
    tmp_path(path, arch);
    rg_tiny_config cfg = {.arch = arch, .type = type, .seed = 3, .n_threads = 2};
    rg_error err = {0};
    rg_model *m = NULL;
    if (rg_tiny_write(&cfg, path, &err) || rg_model_load(&m, path, &err)) {
        printf("    %s: %s\n", arch, err.msg);
        return NULL;
    }
    return m;
}

// ---------------------------------------------------------------------------
// Well-formed files

static void test_lfm2_loads(void) {
    char path[64];
    rg_model *m = load_tiny("lfm2", RG_TYPE_F16, path);
    RG_REQUIRE(m, "load");
    const rg_hparams *hp = &m->hp;
    RG_CHECK(m->arch == rg_arch_find("lfm2", 4) && hp->n_layer == 2 && hp->n_embd == 256 && hp->n_head == 4 &&
                 hp->n_head_kv == 2 && hp->head_dim == 64 && hp->n_conv == 3 && hp->rope_mode == 2 && hp->tied &&
                 hp->n_vocab == 512,
             "hparams: layers %lld embd %lld heads %lld/%lld Dh %lld L %lld rope %d tied %d", (long long)hp->n_layer,
             (long long)hp->n_embd, (long long)hp->n_head, (long long)hp->n_head_kv, (long long)hp->head_dim,
             (long long)hp->n_conv, hp->rope_mode, hp->tied);
    const rg_layer *L0 = &m->layers[0], *L1 = &m->layers[1];
    RG_CHECK(L0->mixer == RG_KIND_SHORTCONV && L0->ffn == RG_KIND_FFN && L0->n_head_kv == 0, "layer 0 is short conv");
    RG_CHECK(L1->mixer == RG_KIND_ATTN && L1->ffn == RG_KIND_FFN && L1->n_head_kv == 2, "layer 1 is attention");
    RG_CHECK(L0->t[RG_ROLE_CONV_IN] && L0->t[RG_ROLE_CONV_KERNEL] && L0->t[RG_ROLE_CONV_OUT] && !L0->t[RG_ROLE_ATTN_Q],
             "layer 0 has the conv tensors only");
    RG_CHECK(L0->t[RG_ROLE_CONV_KERNEL]->type == RG_TYPE_F32 && L0->t[RG_ROLE_CONV_IN]->type == RG_TYPE_F16,
             "the conv kernel stays f32, in_proj is f16");
    RG_CHECK(L1->t[RG_ROLE_ATTN_Q_NORM] && L1->t[RG_ROLE_ATTN_K_NORM] && !L1->t[RG_ROLE_CONV_IN] &&
                 L1->t[RG_ROLE_ATTN_K]->ne[1] == 128,
             "layer 1 has per-head q/k norms and kv [256, 128]");
    RG_CHECK(m->out_norm && !strcmp(m->out_norm->name, "token_embd_norm.weight") && m->output == m->tok_embd,
             "final norm %s, tied head", m->out_norm ? m->out_norm->name : "-");
    for (int i = 0; i < 2; i++)
        RG_CHECK(m->layers[i].t[RG_ROLE_ATTN_NORM] && m->layers[i].t[RG_ROLE_FFN_DOWN], "layer %d: norm and ffn", i);
    rg_model_free(m);
    unlink(path);
}

static void test_mamba2_loads(void) {
    char path[64];
    rg_model *m = load_tiny("mamba2", RG_TYPE_BF16, path);
    RG_REQUIRE(m, "load");
    const rg_hparams *hp = &m->hp;
    RG_CHECK(hp->n_conv == 4 && hp->ssm_inner == 512 && hp->ssm_state == 16 && hp->ssm_heads == 8 &&
                 hp->ssm_groups == 1 && hp->head_dim == 64 && hp->rope_mode == -1 && hp->tied,
             "hparams: K %lld D_in %lld N %lld nh %lld G %lld P %lld", (long long)hp->n_conv, (long long)hp->ssm_inner,
             (long long)hp->ssm_state, (long long)hp->ssm_heads, (long long)hp->ssm_groups, (long long)hp->head_dim);
    static const struct { rg_role role; int64_t ne0, ne1; } want[] = {
        {RG_ROLE_SSM_IN, 256, 2 * 512 + 2 * 16 + 8}, {RG_ROLE_SSM_CONV, 4, 512 + 32}, {RG_ROLE_SSM_CONV_B, 544, 1},
        {RG_ROLE_SSM_DT_B, 8, 1}, {RG_ROLE_SSM_A, 1, 8}, {RG_ROLE_SSM_D, 1, 8}, {RG_ROLE_SSM_NORM, 512, 1},
        {RG_ROLE_SSM_OUT, 512, 256},
    };
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const rg_layer *L = &m->layers[il];
        RG_CHECK(L->mixer == RG_KIND_SSM && L->ffn == RG_KIND_NONE && !L->t[RG_ROLE_FFN_NORM], "layer %lld: ssm, no ffn",
                 (long long)il);
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const rg_gguf_tensor *t = L->t[want[i].role];
            RG_CHECK(t && t->ne[0] == want[i].ne0 && t->ne[1] == want[i].ne1, "layer %lld role %d: %s [%lld, %lld]",
                     (long long)il, want[i].role, t ? t->name : "missing", t ? (long long)t->ne[0] : -1,
                     t ? (long long)t->ne[1] : -1);
        }
        RG_CHECK(L->t[RG_ROLE_SSM_A] && !strcmp(L->t[RG_ROLE_SSM_A]->name, il ? "blk.1.ssm_a" : "blk.0.ssm_a"),
                 "ssm_a has no suffix");
    }
    const float *a = m->layers[0].t[RG_ROLE_SSM_A]->data;
    RG_CHECK(a[0] < 0 && a[7] < 0, "A = -exp(A_log) is negative: %g %g", (double)a[0], (double)a[7]);
    RG_CHECK(!strcmp(m->out_norm->name, "output_norm.weight"), "final norm %s", m->out_norm->name);
    rg_model_free(m);
    unlink(path);
}

// ---------------------------------------------------------------------------
// gemma2: sandwich norms, GeGLU, the caps and the window on layer 0; gemma3: six layers, five sliding with the local
// RoPE base, per-head q/k norms, head_dim 128 (architectures.md §1.6-1.8).
static void test_gemma_loads(void) {
    char path[64];
    rg_model *m = load_tiny("gemma2", RG_TYPE_F16, path);
    RG_REQUIRE(m, "load gemma2");
    const rg_hparams *hp = &m->hp;
    RG_CHECK(hp->n_layer == 2 && hp->head_dim == 64 && hp->rope_mode == 2 && hp->tied && hp->ffn_gelu &&
                 hp->embd_scale == 16.0f && hp->attn_softcap == 0.5f && hp->final_softcap == 3.0f &&
                 hp->attn_window == 8 && fabsf(hp->attn_scale - 0.125f) < 1e-7f,
             "gemma2 hparams: layers %lld Dh %lld caps %g %g window %lld scale %g", (long long)hp->n_layer,
             (long long)hp->head_dim, (double)hp->attn_softcap, (double)hp->final_softcap, (long long)hp->attn_window,
             (double)hp->attn_scale);
    RG_CHECK(m->layers[0].window == 8 && m->layers[1].window == 0 && m->layers[0].rope_freq_base == 10000.0f,
             "gemma2: layer 0 slides (window %lld), layer 1 is global (%lld)", (long long)m->layers[0].window,
             (long long)m->layers[1].window);
    for (int il = 0; il < 2; il++) {
        const rg_layer *L = &m->layers[il];
        RG_CHECK(L->t[RG_ROLE_ATTN_POST_NORM] && L->t[RG_ROLE_FFN_POST_NORM] && !L->t[RG_ROLE_ATTN_Q_NORM] &&
                     L->t[RG_ROLE_FFN_POST_NORM]->type == RG_TYPE_F32 && L->t[RG_ROLE_ATTN_Q]->type == RG_TYPE_F16,
                 "gemma2 layer %d: post norms (f32), no q norm", il);
    }
    rg_model_free(m);
    unlink(path);
    m = load_tiny("gemma3", RG_TYPE_F32, path);
    RG_REQUIRE(m, "load gemma3");
    hp = &m->hp;
    RG_CHECK(hp->n_layer == 6 && hp->head_dim == 128 && hp->attn_softcap == 0 && hp->final_softcap == 0 &&
                 hp->rope_freq_base == 1e6f && hp->rope_freq_base_swa == 1e4f && hp->ffn_gelu,
             "gemma3 hparams: layers %lld Dh %lld base %g / %g", (long long)hp->n_layer, (long long)hp->head_dim,
             (double)hp->rope_freq_base, (double)hp->rope_freq_base_swa);
    for (int il = 0; il < 6; il++) {
        const rg_layer *L = &m->layers[il];
        const bool global = il == 5;
        RG_CHECK(L->window == (global ? 0 : 8) && L->rope_freq_base == (global ? 1e6f : 1e4f) &&
                     L->t[RG_ROLE_ATTN_Q_NORM] && L->t[RG_ROLE_ATTN_K_NORM] && L->t[RG_ROLE_ATTN_Q]->ne[1] == 512,
                 "gemma3 layer %d: window %lld base %g", il, (long long)L->window, (double)L->rope_freq_base);
    }
    rg_model_free(m);
    unlink(path);
}

// ---------------------------------------------------------------------------
// Hostile files: a fixture with one key and up to three tensors changed.

enum { KEY_NONE, KEY_DROP, KEY_U32, KEY_ARRAY, KEY_STR, KEY_F32 };
enum { T_DROP = 1, T_SHAPE, T_RENAME, T_TYPE };

typedef struct tensor_edit {
    const char *name;
    int op;
    int64_t ne0, ne1;        // T_SHAPE: the new shape (a tensor not in the file is added, zeros)
    const char *rename;      // T_RENAME
    uint32_t type;           // T_TYPE (zeros of that type)
} tensor_edit;

#define DROP(n) {.name = n, .op = T_DROP}
#define SHAPE(n, a, b) {.name = n, .op = T_SHAPE, .ne0 = a, .ne1 = b}
#define RENAME(n, to) {.name = n, .op = T_RENAME, .rename = to}
#define RETYPE(n, ty) {.name = n, .op = T_TYPE, .type = ty}

typedef struct hostile_case {
    const char *what;
    const char *arch;        // the fixture
    const char *key;
    int key_op;
    double v;                // KEY_U32 (a whole number), KEY_F32
    int32_t arr[4];          // KEY_ARRAY: n_arr values, INT32 as llama.cpp writes them
    int n_arr;
    tensor_edit t[3];
    rg_status want;          // RG_OK: it must load
    const char *msg[2];      // substrings of the error
} hostile_case;

#define GEMMA_U32(what_, arch_, key_, u_, want_, msg_) \
    {.what = what_, .arch = arch_, .key = key_, .key_op = KEY_U32, .v = u_, .want = want_, .msg = {msg_, NULL}}
#define GEMMA_F32(what_, arch_, key_, f_, want_, msg_) \
    {.what = what_, .arch = arch_, .key = key_, .key_op = KEY_F32, .v = f_, .want = want_, .msg = {msg_, NULL}}
#define GEMMA_NOKEY(what_, arch_, key_, want_, msg_) \
    {.what = what_, .arch = arch_, .key = key_, .key_op = KEY_DROP, .want = want_, .msg = {msg_, NULL}}
#define GEMMA_DROP(what_, arch_, tensor_, msg_) \
    {.what = what_, .arch = arch_, .key_op = KEY_NONE, .t = {DROP(tensor_)}, .want = RG_ERR_FORMAT, .msg = {msg_, NULL}}

static const hostile_case hostile[] = {
    {"lfm2: a conv kernel is missing", "lfm2", NULL, KEY_NONE, 0, {0}, 0, {DROP("blk.0.shortconv.conv.weight")},
     RG_ERR_FORMAT, {"tensor 'blk.0.shortconv.conv.weight' is missing", "expected [3, 256] = [conv_kernel, n_embd]"}},
    {"lfm2: in_proj has the wrong shape", "lfm2", NULL, KEY_NONE, 0, {0}, 0,
     {SHAPE("blk.0.shortconv.in_proj.weight", 256, 512)}, RG_ERR_FORMAT,
     {"tensor 'blk.0.shortconv.in_proj.weight' has shape [256, 512, 1, 1]", "expected [256, 768] = [n_embd, 3*n_embd]"}},
    {"lfm2: head_count_kv of the wrong length", "lfm2", "lfm2.attention.head_count_kv", KEY_ARRAY, 0, {0, 2, 2}, 3, {{0}},
     RG_ERR_FORMAT, {"key 'lfm2.attention.head_count_kv' has 3 values but lfm2.block_count is 2"}},
    {"lfm2: a 9-tap conv kernel", "lfm2", "lfm2.shortconv.l_cache", KEY_U32, 9, {0}, 0, {{0}}, RG_ERR_UNSUPPORTED,
     {"lfm2.shortconv.l_cache is 9: conv kernels of 2 to 8 taps are supported"}},
    {"lfm2: a 1-tap conv kernel", "lfm2", "lfm2.shortconv.l_cache", KEY_U32, 1, {0}, 0, {{0}}, RG_ERR_UNSUPPORTED,
     {"lfm2.shortconv.l_cache is 1"}},
    {"lfm2: no l_cache", "lfm2", "lfm2.shortconv.l_cache", KEY_DROP, 0, {0}, 0, {{0}}, RG_ERR_FORMAT,
     {"required key 'lfm2.shortconv.l_cache' is missing"}},
    {"lfm2: no head_count_kv", "lfm2", "lfm2.attention.head_count_kv", KEY_DROP, 0, {0}, 0, {{0}}, RG_ERR_FORMAT,
     {"required key 'lfm2.attention.head_count_kv' is missing"}},
    {"lfm2: an attention layer without its q norm", "lfm2", NULL, KEY_NONE, 0, {0}, 0,
     {DROP("blk.1.attn_q_norm.weight")}, RG_ERR_FORMAT,
     {"tensor 'blk.1.attn_q_norm.weight' is missing (expected [64] = [head_dim])"}},
    {"lfm2: the final norm as ollama names it", "lfm2", NULL, KEY_NONE, 0, {0}, 0,
     {RENAME("token_embd_norm.weight", "output_norm.weight")}, RG_OK, {NULL}},
    {"lfm2: no final norm", "lfm2", NULL, KEY_NONE, 0, {0}, 0, {DROP("token_embd_norm.weight")}, RG_ERR_FORMAT,
     {"tensor 'token_embd_norm.weight' (or 'output_norm.weight') is missing (expected [256] = [n_embd])"}},
    {"lfm2: an untied head", "lfm2", NULL, KEY_NONE, 0, {0}, 0, {SHAPE("output.weight", 256, 512)}, RG_OK, {NULL}},
    {"lfm2: the head of the wrong shape", "lfm2", NULL, KEY_NONE, 0, {0}, 0, {SHAPE("output.weight", 256, 511)},
     RG_ERR_FORMAT, {"'output.weight' has shape [256, 511, 1, 1], expected [256, 512] = [n_embd, n_vocab]"}},
    {"lfm2: more kv heads than the tensors hold", "lfm2", "lfm2.attention.head_count_kv", KEY_ARRAY, 0, {0, 4}, 2, {{0}},
     RG_ERR_FORMAT, {"'blk.1.attn_k.weight' has shape [256, 128, 1, 1], expected [256, 256] = [n_embd, n_head_kv*head_dim]"}},
    {"lfm2: kv heads that do not divide the heads", "lfm2", "lfm2.attention.head_count_kv", KEY_ARRAY, 0, {0, 3}, 2,
     {{0}}, RG_ERR_FORMAT, {"layer 1 is an attention layer with lfm2.attention.head_count 4 and head_count_kv 3"}},
    {"lfm2: a conv layer read as attention", "lfm2", "lfm2.attention.head_count_kv", KEY_ARRAY, 0, {2, 2}, 2, {{0}},
     RG_ERR_FORMAT, {"tensor 'blk.0.attn_q.weight' is missing (expected [256, 256] = [n_embd, n_head*head_dim])"}},
    {"lfm2: a sliding window", "lfm2", "lfm2.attention.sliding_window", KEY_U32, 512, {0}, 0, {{0}}, RG_ERR_UNSUPPORTED,
     {"lfm2.attention.sliding_window is 512: sliding-window attention is not supported"}},
    {"lfm2: a conv kernel in f16 is taken", "lfm2", NULL, KEY_NONE, 0, {0}, 0,
     {RETYPE("blk.0.shortconv.conv.weight", RG_TYPE_F16)}, RG_OK, {NULL}},
    {"mamba2: a state size the tensors disagree with", "mamba2", "mamba2.ssm.state_size", KEY_U32, 32, {0}, 0, {{0}},
     RG_ERR_FORMAT,
     {"mamba2.ssm.state_size is 32 but tensor 'blk.0.ssm_conv1d.weight' has 544 channels", "a state size of 16"}},
    {"mamba2: a 1-tap conv kernel", "mamba2", "mamba2.ssm.conv_kernel", KEY_U32, 1, {0}, 0, {{0}}, RG_ERR_UNSUPPORTED,
     {"mamba2.ssm.conv_kernel is 1: conv kernels of 2 to 8 taps are supported"}},
    {"mamba2: heads that do not divide the inner size", "mamba2", "mamba2.ssm.time_step_rank", KEY_U32, 7, {0}, 0, {{0}},
     RG_ERR_FORMAT, {"mamba2.ssm.inner_size 512 is not a multiple of mamba2.ssm.time_step_rank 7"}},
    {"mamba2: groups that do not divide the heads", "mamba2", "mamba2.ssm.group_count", KEY_U32, 3, {0}, 0, {{0}},
     RG_ERR_FORMAT, {"mamba2.ssm.time_step_rank 8 (the head count) is not a multiple of mamba2.ssm.group_count 3"}},
    {"mamba2: no group count", "mamba2", "mamba2.ssm.group_count", KEY_DROP, 0, {0}, 0, {{0}}, RG_ERR_FORMAT,
     {"required key 'mamba2.ssm.group_count' is missing"}},
    {"mamba2: a state size of 0", "mamba2", "mamba2.ssm.state_size", KEY_U32, 0, {0}, 0, {{0}}, RG_ERR_FORMAT,
     {"mamba2.ssm.state_size is 0, must be positive"}},
    {"mamba2: A stored 1-D", "mamba2", NULL, KEY_NONE, 0, {0}, 0, {SHAPE("blk.1.ssm_a", 8, 1)}, RG_ERR_FORMAT,
     {"tensor 'blk.1.ssm_a' has shape [8, 1, 1, 1], expected [1, 8] = [1, ssm.time_step_rank]"}},
    {"mamba2: no dt bias", "mamba2", NULL, KEY_NONE, 0, {0}, 0, {DROP("blk.1.ssm_dt.bias")}, RG_ERR_FORMAT,
     {"tensor 'blk.1.ssm_dt.bias' is missing (expected [8] = [ssm.time_step_rank])"}},
    {"mamba2: in_proj of the wrong width", "mamba2", NULL, KEY_NONE, 0, {0}, 0, {SHAPE("blk.0.ssm_in.weight", 256, 1000)},
     RG_ERR_FORMAT, {"'blk.0.ssm_in.weight' has shape [256, 1000, 1, 1], expected [256, 1064]",
                     "[n_embd, 2*ssm.inner_size+2*ssm.group_count*ssm.state_size+ssm.time_step_rank]"}},
    {"mamba2: a quantized gated-norm weight", "mamba2", NULL, KEY_NONE, 0, {0}, 0,
     {RETYPE("blk.0.ssm_norm.weight", RG_TYPE_Q8_0)}, RG_ERR_UNSUPPORTED,
     {"tensor 'blk.0.ssm_norm.weight' is q8_0; an elementwise weight must be f32, f16 or bf16"}},
    {"mamba2: the norm weight in groups of the wrong size", "mamba2", "mamba2.ssm.group_count", KEY_U32, 2, {0}, 0,
     {{0}}, RG_ERR_FORMAT, {"mamba2.ssm.state_size is 16 but tensor 'blk.0.ssm_conv1d.weight' has 544 channels",
                            "a state size of 8"}},
    {"qwen2: head_count_kv of the wrong length", "qwen2", "qwen2.attention.head_count_kv", KEY_ARRAY, 0, {2, 2, 2}, 3,
     {{0}}, RG_ERR_FORMAT, {"key 'qwen2.attention.head_count_kv' has 3 values but qwen2.block_count is 2"}},
    {"qwen2: per-layer kv heads are read", "qwen2", "qwen2.attention.head_count_kv", KEY_ARRAY, 0, {2, 1}, 2,
     {SHAPE("blk.1.attn_k.weight", 256, 64), SHAPE("blk.1.attn_v.weight", 256, 64),
      SHAPE("blk.1.attn_k.bias", 64, 1)},
     RG_ERR_FORMAT, {"tensor 'blk.1.attn_v.bias' has shape [128, 1, 1, 1], expected [64] = [n_head_kv*head_dim]"}},
    {"qwen2: an attention layer with no kv heads", "qwen2", "qwen2.attention.head_count_kv", KEY_ARRAY, 0, {2, 0}, 2,
     {{0}}, RG_ERR_FORMAT, {"layer 1 is an attention layer with qwen2.attention.head_count 4 and head_count_kv 0"}},
    {"qwen2: a context length that varies per layer", "qwen2", "qwen2.context_length", KEY_ARRAY, 0, {256, 128}, 2,
     {{0}}, RG_ERR_UNSUPPORTED, {"key 'qwen2.context_length' varies per layer"}},
    {"llama: no feed_forward_length", "llama", "llama.feed_forward_length", KEY_DROP, 0, {0}, 0, {{0}}, RG_ERR_FORMAT,
     {"required key 'llama.feed_forward_length' is missing"}},
    {"qwen3: no k norm", "qwen3", NULL, KEY_NONE, 0, {0}, 0, {DROP("blk.0.attn_k_norm.weight")}, RG_ERR_FORMAT,
     {"tensor 'blk.0.attn_k_norm.weight' is missing (expected [128] = [head_dim])"}},
    {"an architecture no table describes", "qwen2", "general.architecture", KEY_STR, 0, {0}, 0, {{0}},
     RG_ERR_UNSUPPORTED,
     {"architecture 'gpt9' is not supported (supported: llama, qwen2, qwen3, lfm2, mamba2, gemma2, gemma3)"}},
    GEMMA_F32("gemma2: a negative attention cap", "gemma2", "gemma2.attn_logit_softcapping", -50.0f, RG_ERR_FORMAT,
              "gemma2.attn_logit_softcapping is -50, must be positive"),
    GEMMA_F32("gemma2: a zero final cap", "gemma2", "gemma2.final_logit_softcapping", 0.0f, RG_ERR_FORMAT,
              "gemma2.final_logit_softcapping is 0, must be positive"),
    GEMMA_F32("gemma2: a NaN final cap", "gemma2", "gemma2.final_logit_softcapping", NAN, RG_ERR_FORMAT,
              "key 'gemma2.final_logit_softcapping' is not finite"),
    GEMMA_U32("gemma2: a zero window", "gemma2", "gemma2.attention.sliding_window", 0, RG_ERR_FORMAT,
              "gemma2.attention.sliding_window is 0: the sliding layers need a window"),
    GEMMA_NOKEY("gemma2: the caps and window absent take llama.cpp's defaults", "gemma2", "gemma2.attn_logit_softcapping",
                RG_OK, NULL),
    GEMMA_NOKEY("gemma3: no sliding window", "gemma3", "gemma3.attention.sliding_window", RG_ERR_FORMAT,
                "required key 'gemma3.attention.sliding_window' is missing"),
    GEMMA_F32("gemma3: a final cap is taken", "gemma3", "gemma3.final_logit_softcapping", 30.0f, RG_OK, NULL),
    GEMMA_F32("gemma3: a negative final cap", "gemma3", "gemma3.final_logit_softcapping", -1.0f, RG_ERR_FORMAT,
              "gemma3.final_logit_softcapping is -1, must be positive (or absent)"),
    GEMMA_F32("gemma3: a NaN local RoPE base", "gemma3", "gemma3.rope.freq_base_swa", NAN, RG_ERR_FORMAT,
              "key 'gemma3.rope.freq_base_swa' is not finite"),
    GEMMA_F32("gemma3: a negative local RoPE base", "gemma3", "gemma3.rope.freq_base_swa", -1.0f, RG_ERR_FORMAT,
              "gemma3.rope.freq_base_swa is -1, must be positive"),
    GEMMA_DROP("gemma2: no post-FFN norm", "gemma2", "blk.1.post_ffw_norm.weight",
               "tensor 'blk.1.post_ffw_norm.weight' is missing (expected [256] = [n_embd])"),
    GEMMA_DROP("gemma2: no post-attention norm", "gemma2", "blk.0.post_attention_norm.weight",
               "tensor 'blk.0.post_attention_norm.weight' is missing (expected [256] = [n_embd])"),
    GEMMA_DROP("gemma3: no q norm", "gemma3", "blk.5.attn_q_norm.weight",
               "tensor 'blk.5.attn_q_norm.weight' is missing (expected [128] = [head_dim])"),
};

// The fixture with c's edits, written to path; the zero buffers it needs are kept in *keep (freed by the caller).
static rg_status write_hostile(const hostile_case *c, const char *path, void **keep, rg_error *err) {
    rg_tiny_config cfg = {.arch = c->arch, .type = RG_TYPE_F32, .seed = 9, .n_threads = 2};
    rg_gguf *base = NULL, *out = rg_gguf_new();
    if (!out) return RG_ERR_NOMEM;
    rg_status s = rg_tiny_build(&cfg, &base, err);
    for (uint64_t i = 0; !s && i < base->n_kv; i++) s = rg_gguf_set_kv(out, &base->kv[i], err);
    if (!s && c->key_op == KEY_DROP) rg_gguf_remove(out, c->key);
    if (!s && c->key_op == KEY_U32) s = rg_gguf_set_u32(out, c->key, (uint32_t)c->v, err);
    if (!s && c->key_op == KEY_ARRAY) s = rg_gguf_set_array(out, c->key, RG_GGUF_I32, c->arr, (uint64_t)c->n_arr, err);
    if (!s && c->key_op == KEY_STR) s = rg_gguf_set_str(out, c->key, "gpt9", err);
    if (!s && c->key_op == KEY_F32) s = rg_gguf_set_f32(out, c->key, (float)c->v, err);
    int n_keep = 0;
    for (uint64_t i = 0; !s && i < base->n_tensors; i++) {
        const rg_gguf_tensor *t = &base->tensors[i];
        const tensor_edit *e = NULL;
        for (int k = 0; k < 3; k++)
            if (c->t[k].name && !strcmp(c->t[k].name, t->name)) e = &c->t[k];
        if (e && e->op == T_DROP) continue;
        if (e && (e->op == T_SHAPE || e->op == T_TYPE)) continue;  // added below
        s = rg_gguf_add_tensor(out, e && e->op == T_RENAME ? e->rename : t->name, t->type, t->n_dims, t->ne, t->data, err);
    }
    for (int k = 0; !s && k < 3; k++) {
        const tensor_edit *e = &c->t[k];
        if (!e->name || (e->op != T_SHAPE && e->op != T_TYPE)) continue;
        const rg_gguf_tensor *t = rg_gguf_find_tensor(base, e->name);
        const int64_t ne[2] = {e->op == T_SHAPE ? e->ne0 : t->ne[0], e->op == T_SHAPE ? e->ne1 : t->ne[1]};
        const uint32_t type = e->op == T_TYPE ? e->type : RG_TYPE_F32;
        keep[n_keep] = calloc(1, rg_type_row_size(type, ne[0]) * (size_t)ne[1]);
        s = rg_gguf_add_tensor(out, e->name, type, ne[1] > 1 || (t && t->n_dims == 2) ? 2 : 1, ne, keep[n_keep++], err);
    }
    if (!s) s = rg_gguf_write(out, path, err);
    rg_gguf_free(base);
    rg_gguf_free(out);
    return s;
}

static void test_hostile_files(void) {
    const size_t n = sizeof hostile / sizeof hostile[0];
    for (size_t i = 0; i < n; i++) {
        const hostile_case *c = &hostile[i];
        char path[64];
        tmp_path(path, "hostile");
        void *keep[3] = {NULL, NULL, NULL};
        rg_error err = {0};
        rg_status ws = write_hostile(c, path, keep, &err);
        RG_CHECK(ws == RG_OK, "%s: writing the file: %s", c->what, err.msg);
        rg_model *m = NULL;
        memset(&err, 0, sizeof err);
        rg_status s = ws ? ws : rg_model_load(&m, path, &err);
        if (!ws && c->want == RG_OK) {
            RG_CHECK(s == RG_OK, "%s: refused: %s", c->what, err.msg);
        } else if (!ws) {
            RG_CHECK(s == c->want, "%s: status %d, want %d (%s)", c->what, s, c->want, err.msg);
            RG_CHECK(strstr(err.msg, path) != NULL, "%s: the message does not name the file: %s", c->what, err.msg);
            for (int k = 0; k < 2 && c->msg[k]; k++)
                RG_CHECK(strstr(err.msg, c->msg[k]) != NULL, "%s: '%s' lacks '%s'", c->what, err.msg, c->msg[k]);
        }
        if (!strcmp(c->what, "lfm2: an untied head"))
            RG_CHECK(m && !m->hp.tied && m->output != m->tok_embd, "%s: the head is its own tensor", c->what);
        if (!strcmp(c->what, "gemma2: the caps and window absent take llama.cpp's defaults"))
            RG_CHECK(m && m->hp.attn_softcap == 50.0f && m->hp.final_softcap == 3.0f, "%s: caps %g %g", c->what,
                     m ? (double)m->hp.attn_softcap : 0.0, m ? (double)m->hp.final_softcap : 0.0);
        if (!strcmp(c->what, "gemma3: a final cap is taken"))
            RG_CHECK(m && m->hp.final_softcap == 30.0f && m->hp.attn_softcap == 0.0f, "%s", c->what);
        if (!strcmp(c->what, "lfm2: the final norm as ollama names it"))
            RG_CHECK(m && !strcmp(m->out_norm->name, "output_norm.weight"), "%s: final norm", c->what);
        rg_model_free(m);
        for (int k = 0; k < 3; k++) free(keep[k]);
        unlink(path);
    }
    printf("    %zu hostile and edited files\n", n);
}

// ---------------------------------------------------------------------------
// State, builders, LoRA, training

static void test_state_per_layer(void) {
    static const struct {
        const char *arch;
        int layer, n_bufs;
        bool per_token;
        size_t bytes[2];   // at n_ctx 32, F16 KV cache
    } want[] = {
        {"qwen2", 0, 2, true, {64 * 2 * 32 * 2, 64 * 2 * 32 * 2}},   // k, v: head_dim * n_head_kv per token
        {"lfm2", 0, 1, false, {2 * 256 * 4, 0}},                        // conv: (L-1) * n_embd floats
        {"lfm2", 1, 2, true, {64 * 2 * 32 * 2, 64 * 2 * 32 * 2}},
        {"mamba2", 1, 2, false, {3 * 544 * 4, 16 * 512 * 4}},           // conv (K-1) * (D_in + 2GN), ssm N * D_in
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[64];
        rg_model *m = load_tiny(want[i].arch, RG_TYPE_F32, path);
        RG_REQUIRE(m, "load");
        rg_model_state st;
        rg_error err = {0};
        RG_REQUIRE(rg_model_state_init(&st, m, 32, RG_TYPE_F16, &err) == RG_OK, "%s", err.msg);
        const rg_layer_state *ls = &st.layers[want[i].layer];
        RG_CHECK(ls->n_bufs == want[i].n_bufs, "%s layer %d: %d buffers", want[i].arch, want[i].layer, ls->n_bufs);
        for (int j = 0; j < ls->n_bufs && j < 2; j++)
            RG_CHECK(ls->bytes[j] == want[i].bytes[j] && ls->per_token[j] == want[i].per_token &&
                         ls->type[j] == (want[i].per_token ? RG_TYPE_F16 : RG_TYPE_F32),
                     "%s layer %d buffer %d: %zu bytes (want %zu), per token %d", want[i].arch, want[i].layer, j,
                     ls->bytes[j], want[i].bytes[j], ls->per_token[j]);
        RG_CHECK(rg_model_state_recurrent(&st) == (strcmp(want[i].arch, "qwen2") != 0), "%s: recurrent", want[i].arch);
        // save, scribble, restore: the per-sequence buffers come back; reset zeroes them and only them
        float *seq = NULL;
        uint16_t *tok = NULL;
        for (int64_t il = 0; il < st.n_layer; il++)
            for (int j = 0; j < st.layers[il].n_bufs; j++) {
                if (!st.layers[il].per_token[j] && !seq) seq = st.layers[il].buf[j];
                if (st.layers[il].per_token[j] && !tok) tok = st.layers[il].buf[j];
            }
        if (seq) {
            seq[0] = 1.5f;
            RG_REQUIRE(rg_model_state_save(&st, &err) == RG_OK, "%s", err.msg);
            seq[0] = -7.0f;
            rg_model_state_restore(&st);
            RG_CHECK(seq[0] == 1.5f, "%s: restored %g", want[i].arch, (double)seq[0]);
        }
        if (tok) tok[0] = 0x3c00;
        rg_model_state_reset(&st);
        RG_CHECK(!seq || seq[0] == 0.0f, "%s: reset zeroes the recurrent state", want[i].arch);
        RG_CHECK(!tok || tok[0] == 0x3c00, "%s: reset keeps the cached tokens", want[i].arch);
        rg_model_state_free(&st);
        rg_model_free(m);
        unlink(path);
    }
}

// The short-conv and SSM layers build through the forward, a session and training: finite logits from the
// forward, a session's evaluation moving n_past, a training state made (test_session and test_train_hybrid check
// their numbers).
// A train state of c over total_steps steps, validated first as the CLI does.
static rg_status train_state(rg_train_state **ts, const rg_model *m, const rg_train_config *c, int64_t total_steps,
                             rg_error *err) {
    rg_train_spec sp;
    rg_status st = rg_train_config_validate(c, &sp, err);
    return st ? st : rg_train_state_create(ts, m, &sp, total_steps, err);
}

static void test_recurrent_kinds_build(void) {
    static const char *const archs[] = {"lfm2", "mamba2"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        char path[64];
        rg_model *m = load_tiny(archs[i], RG_TYPE_F32, path);
        RG_REQUIRE(m, "load");
        rg_error err = {0};
        rg_graph *g = rg_graph_new();
        rg_model_nodes w;
        RG_REQUIRE(rg_model_leaf_nodes(g, m, &w, &err) == RG_OK, "%s", err.msg);
        int64_t n = 4;
        rg_node *out = rg_model_forward(g, m, &w, rg_leaf(g, "ids", RG_TYPE_I32, 1, &n, NULL),
                                        rg_leaf(g, "pos", RG_TYPE_I32, 1, &n, NULL), NULL);
        RG_CHECK(out && out->t.ne[0] == m->hp.n_vocab && out->t.ne[1] == n, "%s forward: %s", archs[i],
                 rg_graph_error(g, &err) ? err.msg : "wrong shape");
        rg_graph_free(g);
        rg_session *s = NULL;
        rg_session_opts so = {.n_ctx = 16, .n_threads = 1};
        RG_REQUIRE(rg_session_create(&s, m, &so, &err) == RG_OK, "%s", err.msg);
        const int32_t ids[2] = {5, 6};
        float *logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
        RG_CHECK(rg_session_eval(s, ids, 2, logits, 0, &err) == RG_OK && rg_session_eval(s, ids, 1, logits, 0, &err) ==
                     RG_OK && rg_session_n_past(s) == 3 && isfinite(logits[0]),
                 "%s session: %s", archs[i], err.msg);
        free(logits);
        rg_session_free(s);
        rg_train_config c;
        rg_train_config_defaults(&c);
        c.method = RG_TRAIN_FULL, c.ctx = 16, c.threads = 1;
        rg_train_state *ts = NULL;
        RG_CHECK(train_state(&ts, m, &c, 1, &err) == RG_OK, "%s training: %s", archs[i], err.msg);
        rg_train_state_free(ts);
        rg_model_free(m);
        unlink(path);
    }
}

// LoRA targets come from the table: lfm2's attention projections exist on its attention layers only, its
// short conv's in_proj/out_proj on the conv layers; mamba2's mixer has ssm_in/ssm_out and nothing else.
static void test_lora_targets(void) {
    char path[64];
    rg_model *m = load_tiny("lfm2", RG_TYPE_F32, path);
    RG_REQUIRE(m, "load");
    rg_lora *l = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_lora_init(&l, m, 2, 4.0f, RG_LORA_TARGETS_ALL, 1, &err) == RG_OK, "%s", err.msg);
    int n0 = 0, n1 = 0;
    for (int t = 0; t < RG_LORA_N_TARGETS; t++) n0 += l->pairs[t].a != NULL, n1 += l->pairs[RG_LORA_N_TARGETS + t].a != NULL;
    RG_CHECK(n0 == 5 && n1 == 7 && !strcmp(l->pairs[RG_LORA_N_TARGETS].name, "blk.1.attn_q.weight") &&
                 !strcmp(l->pairs[RG_LORA_TARGET_IN].name, "blk.0.shortconv.in_proj.weight") &&
                 !strcmp(l->pairs[RG_LORA_TARGET_OUT].name, "blk.0.shortconv.out_proj.weight") &&
                 !l->pairs[RG_LORA_N_TARGETS + RG_LORA_TARGET_IN].a,
             "lfm2 pairs: layer 0 %d (conv in/out, ffn), layer 1 %d (attention, ffn)", n0, n1);
    rg_lora_free(l);
    l = NULL;
    RG_CHECK(rg_lora_init(&l, m, 2, 4.0f, 1u << RG_LORA_TARGET_Q, 1, &err) == RG_OK && l->pairs[RG_LORA_N_TARGETS].a &&
                 !l->pairs[0].a,
             "attn_q only: %s", err.msg);
    rg_lora_free(l);
    rg_model_free(m);
    unlink(path);
    m = load_tiny("mamba2", RG_TYPE_F32, path);
    RG_REQUIRE(m, "load");
    l = NULL;
    RG_REQUIRE(rg_lora_init(&l, m, 2, 4.0f, RG_LORA_TARGETS_ALL, 1, &err) == RG_OK, "mamba2: %s", err.msg);
    int n = 0;
    for (int64_t i = 0; i < l->n_layer * RG_LORA_N_TARGETS; i++) n += l->pairs[i].a != NULL;
    RG_CHECK(n == 2 * l->n_layer && !strcmp(l->pairs[RG_LORA_TARGET_IN].name, "blk.0.ssm_in.weight") &&
                 !strcmp(l->pairs[RG_LORA_TARGET_OUT].name, "blk.0.ssm_out.weight"),
             "mamba2 pairs: %d (ssm_in and ssm_out per layer)", n);
    rg_lora_free(l);
    l = NULL;
    RG_CHECK(rg_lora_init(&l, m, 2, 4.0f, 1u << RG_LORA_TARGET_Q, 1, &err) == RG_ERR_ARG &&
                 strstr(err.msg, "this mamba2 model has none of the targeted projections") &&
                 strstr(err.msg, "in_proj, out_proj"),
             "mamba2 with attn_q only: %s", err.msg);
    rg_lora_free(l);
    rg_model_free(m);
    unlink(path);
}

// The full fine-tune's tensor order is the table's: the globals, then each layer's rows in slot order.
static void test_full_tensor_order(void) {
    char path[64];
    rg_model *m = load_tiny("qwen2", RG_TYPE_F32, path);
    RG_REQUIRE(m, "load");
    rg_train_config c;
    rg_train_config_defaults(&c);
    c.method = RG_TRAIN_FULL, c.ctx = 16, c.threads = 1;
    rg_train_state *ts = NULL;
    rg_error err = {0};
    RG_REQUIRE(train_state(&ts, m, &c, 1, &err) == RG_OK, "%s", err.msg);
    static const char *const want[] = {"token_embd.weight", "output_norm.weight", "output.weight",
                                       "blk.0.attn_norm.weight", "blk.0.attn_q.weight", "blk.0.attn_q.bias",
                                       "blk.0.attn_k.weight", "blk.0.attn_k.bias", "blk.0.attn_v.weight",
                                       "blk.0.attn_v.bias", "blk.0.attn_output.weight", "blk.0.ffn_norm.weight",
                                       "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"};
    const int n = (int)(sizeof want / sizeof want[0]);
    RG_CHECK(ts->n_tensors == 3 + 2 * 12, "%d tensors", ts->n_tensors);
    for (int k = 0; k < n && k < ts->n_tensors; k++)
        RG_CHECK(!strcmp(ts->tensors[k].name, want[k]) && ts->tensors[k].id == (uint32_t)k, "tensor %d: %s, want %s", k,
                 ts->tensors[k].name, want[k]);
    rg_train_state_free(ts);
    rg_model_free(m);
    unlink(path);
}

// Logits [n_vocab] of token ids[k] at position k, after positions 0..k-1 went through the F32 KV cache st one
// graph at a time (the prompt's first n_prompt in one graph, then one token each): rg_model_forward_kv as a
// session builds it, without the F16 cache's rounding.
static rg_status cached_f32_logits(rg_model *m, rg_model_state *st, const int32_t *ids, int64_t n_past, int64_t n,
                                   float *logits, rg_error *err) {
    rg_graph *g = rg_graph_new();
    rg_model_nodes w;
    rg_status rs = rg_model_leaf_nodes(g, m, &w, err);
    rg_node *idn = rg_leaf(g, "ids", RG_TYPE_I32, 1, &n, NULL), *pn = rg_leaf(g, "pos", RG_TYPE_I32, 1, &n, NULL);
    rg_node *out = rs ? NULL : rg_model_forward_kv(g, m, &w, idn, pn, st, n_past, true);
    rg_exec *ex = NULL;
    if (!rs && !out) rs = rg_graph_error(g, err);
    if (!rs) {
        out->flags |= RG_NODE_OUTPUT;
        rg_exec_opts o = {.n_threads = 2};
        rs = rg_exec_create(&ex, g, &o, err);
    }
    if (!rs) {
        memcpy(idn->t.data, ids + n_past, sizeof(int32_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) ((int32_t *)pn->t.data)[i] = (int32_t)(n_past + i);
        rs = rg_exec_run(ex, 0, -1, err);
    }
    if (!rs) memcpy(logits, out->t.data, sizeof(float) * (size_t)m->hp.n_vocab);
    rg_exec_free(ex);
    rg_graph_free(g);
    return rs;
}

// gemma2 and gemma3 through the cache. With an F32 cache, a prompt of 5 tokens and then one token at a time past
// the window of 8 (the single-token graphs of the sliding layers take the windowed SOFT_MAX, not ATTN_DECODE) give
// the full pass's logits at every position within float rounding. A session (its F16 cache) fed the same way
// agrees with one call of all 20 tokens and with the full pass within the F16 cache's rounding (1e-3, as
// test_session's bound: a token's keys and values computed alone differ from the batch's in their last f32 bits,
// and a few then round to the other F16 neighbour in the cache; direct F16-cache graphs give the session's
// token-by-token logits exactly, so the decode graph adds nothing). Training states (full
// and LoRA) build and take a step on a packed row.
static void test_gemma_cache_and_training(void) {
    static const char *const archs[] = {"gemma2", "gemma3"};
    enum { N = 20, PROMPT = 5 };
    for (int i = 0; i < 2; i++) {
        char path[64];
        rg_model *m = load_tiny(archs[i], RG_TYPE_F32, path);
        RG_REQUIRE(m, "load");
        const int64_t V = m->hp.n_vocab;
        int32_t ids[N];
        for (int k = 0; k < N; k++) ids[k] = (k * 37 + 11) % 509;
        float *full = malloc(sizeof(float) * (size_t)(V * N)), *batch = malloc(sizeof(float) * (size_t)(V * N));
        float *step = malloc(sizeof(float) * (size_t)V);
        rg_error err = {0};
        RG_REQUIRE(rg_test_full_logits(m, NULL, 0.0f, ids, N, full, &err) == RG_OK, "%s full pass: %s", archs[i], err.msg);
        rg_session *s = NULL;
        rg_session_opts so = {.n_ctx = 32, .n_threads = 2, .exact_activations = true};
        RG_REQUIRE(rg_session_create(&s, m, &so, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(rg_session_eval(s, ids, N, batch, 1, &err) == RG_OK, "%s batch: %s", archs[i], err.msg);
        rg_session_truncate(s, 0);
        double worst = 0;
        RG_CHECK(rg_session_eval(s, ids, PROMPT, step, 0, &err) == RG_OK, "%s prompt: %s", archs[i], err.msg);
        for (int k = PROMPT - 1; k < N; k++) {
            if (k >= PROMPT && rg_session_eval(s, ids + k, 1, step, 0, &err) != RG_OK) {
                RG_CHECK(0, "%s token %d: %s", archs[i], k, err.msg);
                break;
            }
            worst = fmax(worst, rg_test_max_rel(step, batch + k * V, V));
        }
        const double cache_gap = rg_test_max_rel(batch, full, V * N);
        RG_CHECK(worst <= 1e-3, "%s: token-by-token logits differ from one call's by %.2e of max|logit|", archs[i], worst);
        RG_CHECK(cache_gap <= 2e-3, "%s: the cached logits differ from the full pass by %.2e", archs[i], cache_gap);
        printf("    %s: session (F16 cache), %d positions token by token against one call %.2e, one call against the "
               "full pass %.2e\n",
               archs[i], N - PROMPT + 1, worst, cache_gap);
        rg_session_free(s);
        rg_model_state st;
        RG_REQUIRE(rg_model_state_init(&st, m, 32, RG_TYPE_F32, &err) == RG_OK, "%s", err.msg);
        double exact = 0;
        for (int k = PROMPT - 1; k < N; k++) {
            const int64_t past = k < PROMPT ? 0 : k, n = k < PROMPT ? PROMPT : 1;
            if (cached_f32_logits(m, &st, ids, past, n, step, &err) != RG_OK) {
                RG_CHECK(0, "%s f32 cache at %d: %s", archs[i], k, err.msg);
                break;
            }
            exact = fmax(exact, rg_test_max_rel(step, full + k * V, V));
        }
        rg_model_state_free(&st);
        RG_CHECK(exact <= 1e-5, "%s: the F32 cache's logits differ from the full pass by %.2e", archs[i], exact);
        printf("    %s: F32 cache token by token against the full pass %.2e\n", archs[i], exact);
        free(full), free(batch), free(step);
        for (int method = 0; method < 2; method++) {
            rg_train_config c;
            rg_train_config_defaults(&c);
            c.method = method ? RG_TRAIN_LORA : RG_TRAIN_FULL, c.ctx = 16, c.threads = 2;
            rg_train_state *ts = NULL;
            int32_t pos[16], seg[16], lab[16];
            for (int k = 0; k < 16; k++)  // two documents: the second restarts its positions
                pos[k] = k < 10 ? k : k - 10, seg[k] = k < 10 ? 0 : 1, lab[k] = k < 15 && k != 9 ? ids[k + 1] : -100;
            double loss = NAN, gn = 0, lr = 0;
            bool skipped = false;
            rg_status st = train_state(&ts, m, &c, 1, &err);
            if (!st) st = rg_train_state_micro(ts, ids, lab, pos, seg, 1.0 / 14, &loss, &err);
            if (!st) st = rg_train_state_step(ts, &gn, &lr, &skipped, &err);
            RG_CHECK(st == RG_OK && isfinite(loss) && loss > 0 && isfinite(gn) && gn > 0 && !skipped,
                     "%s %s training: %s (loss %g, grad norm %g)", archs[i], method ? "lora" : "full",
                     st ? err.msg : "", loss, gn);
            rg_train_state_free(ts);
        }
        rg_model_free(m);
        unlink(path);
    }
}

// ---------------------------------------------------------------------------
// make-tiny

static bool same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    for (int ca = 0, cb = 0; same && ca != EOF;) {
        ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void test_make_tiny_deterministic(void) {
    static const char *const archs[] = {"lfm2", "mamba2", "gemma2", "gemma3"};
    for (int i = 0; i < 4; i++) {
        char a[64], b[64], c[64];
        tmp_path(a, "det"), tmp_path(b, "det"), tmp_path(c, "det");
        rg_tiny_config cfg = {.arch = archs[i], .type = RG_TYPE_BF16, .seed = 4, .n_threads = 1};
        rg_error err = {0};
        RG_REQUIRE(rg_tiny_write(&cfg, a, &err) == RG_OK, "%s", err.msg);
        cfg.n_threads = 2;
        RG_REQUIRE(rg_tiny_write(&cfg, b, &err) == RG_OK, "%s", err.msg);
        cfg.seed = 5;
        RG_REQUIRE(rg_tiny_write(&cfg, c, &err) == RG_OK, "%s", err.msg);
        RG_CHECK(same_file(a, b), "%s: the same seed on 1 and 2 threads gives other bytes", archs[i]);
        RG_CHECK(!same_file(a, c), "%s: another seed gives the same bytes", archs[i]);
        rg_gguf *g = NULL;
        cfg.seed = 4;
        RG_REQUIRE(rg_tiny_build(&cfg, &g, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(rg_gguf_write(g, c, &err) == RG_OK, "%s", err.msg);
        RG_CHECK(same_file(a, c), "%s: rg_tiny_build and rg_tiny_write disagree", archs[i]);
        rg_gguf_free(g);
        unlink(a), unlink(b), unlink(c);
    }
}

// Every type `quantize` makes (make-tiny --type: the f32 fixture, then quantize) loads, with the elementwise weights
// kept in f32.
static void test_make_tiny_every_type(void) {
    static const char *const archs[] = {"lfm2", "mamba2", "gemma2", "gemma3"};
    int n_files = 0;
    for (int i = 0; i < 4; i++) {
        char f32[64], out[64];
        tmp_path(f32, "f32"), tmp_path(out, "q");
        rg_tiny_config cfg = {.arch = archs[i], .type = RG_TYPE_F32, .seed = 42, .n_threads = 2};
        rg_error err = {0};
        RG_REQUIRE(rg_tiny_write(&cfg, f32, &err) == RG_OK, "%s", err.msg);
        for (const rg_quant_target *t = rg_quant_targets; t->name; t++) {
            if (quick() && t != rg_quant_target_find("Q4_K_M")) continue;
            rg_quantize_opts qo = {.n_threads = 2};
            rg_quantize_summary qs;
            rg_model *m = NULL;
            memset(&err, 0, sizeof err);
            rg_status s = rg_quantize_file(f32, out, t->name, &qo, &qs, &err);
            if (!s) s = rg_model_load(&m, out, &err);
            RG_CHECK(s == RG_OK, "%s %s: %s", archs[i], t->name, err.msg);
            if (!m) continue;
            n_files++;
            const rg_layer *L = &m->layers[0];
            // lfm2's layer 0 is a short conv, mamba2's an SSM, gemma's attention with post norms
            const rg_role small = i == 0 ? RG_ROLE_CONV_KERNEL : i == 1 ? RG_ROLE_SSM_CONV : RG_ROLE_FFN_POST_NORM;
            const rg_role big = i == 0 ? RG_ROLE_CONV_IN : i == 1 ? RG_ROLE_SSM_IN : RG_ROLE_FFN_GATE;
            const rg_gguf_tensor *kernel = L->t[small], *proj = L->t[big];
            RG_CHECK(kernel->type == RG_TYPE_F32, "%s %s: %s is %s", archs[i], t->name, kernel->name,
                     rg_type_get(kernel->type)->name);
            RG_CHECK(!rg_type_get(t->default_type)->quantized || rg_type_get(proj->type)->quantized,
                     "%s %s: the in projection is %s", archs[i], t->name, rg_type_get(proj->type)->name);
            if (i == 1) RG_CHECK(L->t[RG_ROLE_SSM_A]->type == RG_TYPE_F32 && L->t[RG_ROLE_SSM_NORM]->type == RG_TYPE_F32,
                            "mamba2 %s: A and the gated norm stay f32", t->name);
            rg_model_free(m);
        }
        unlink(f32), unlink(out);
    }
    printf("    %d quantized files loaded\n", n_files);
}

static const rg_test_case cases[] = {
    RG_TEST(test_lfm2_loads),
    RG_TEST(test_mamba2_loads),
    RG_TEST(test_gemma_loads),
    RG_TEST(test_hostile_files),
    RG_TEST(test_state_per_layer),
    RG_TEST(test_recurrent_kinds_build),
    RG_TEST(test_lora_targets),
    RG_TEST(test_full_tensor_order),
    RG_TEST(test_gemma_cache_and_training),
    RG_TEST(test_make_tiny_deterministic),
    RG_TEST(test_make_tiny_every_type),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
