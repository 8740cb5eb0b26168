// arch.c - see arch.h: the list of architectures, shape rules, row lookups and
// the checks the attention architectures share.
#include "model/arch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model.h"

extern const rg_arch rg_arch_llama, rg_arch_qwen2, rg_arch_qwen3, rg_arch_lfm2, rg_arch_mamba2, rg_arch_gemma2,
    rg_arch_gemma3;

const rg_arch *const rg_archs[] = {&rg_arch_llama, &rg_arch_qwen2, &rg_arch_qwen3, &rg_arch_lfm2, &rg_arch_mamba2,
                                   &rg_arch_gemma2, &rg_arch_gemma3, NULL};
const char *const rg_model_archs = "llama, qwen2, qwen3, lfm2, mamba2, gemma2, gemma3";

const rg_arch *rg_arch_find(const char *name, size_t len) {
    for (int i = 0; rg_archs[i]; i++)
        if (strlen(rg_archs[i]->name) == len && !memcmp(rg_archs[i]->name, name, len)) return rg_archs[i];
    return NULL;
}

int64_t rg_arch_dim(rg_dim d, const rg_hparams *hp, const rg_layer *L) {
    const int64_t G = hp->ssm_groups, N = hp->ssm_state;
    switch (d) {
    case RG_DIM_NONE: case RG_DIM_ONE: return 1;
    case RG_DIM_EMBD: return hp->n_embd;
    case RG_DIM_EMBD_X3: return 3 * hp->n_embd;
    case RG_DIM_VOCAB: return hp->n_vocab;
    case RG_DIM_Q: return (L ? L->n_head : hp->n_head) * hp->head_dim;
    case RG_DIM_KV: return (L ? L->n_head_kv : hp->n_head_kv) * hp->head_dim;
    case RG_DIM_HEAD: return hp->head_dim;
    case RG_DIM_FF: return L ? L->n_ff : hp->n_ff;
    case RG_DIM_CONV: return hp->n_conv;
    case RG_DIM_SSM_IN: return 2 * hp->ssm_inner + 2 * G * N + hp->ssm_heads;
    case RG_DIM_SSM_CONV_CH: return hp->ssm_inner + 2 * G * N;
    case RG_DIM_SSM_HEADS: return hp->ssm_heads;
    case RG_DIM_SSM_INNER: return hp->ssm_inner;
    case RG_DIM_SSM_GROUP: return G > 0 ? hp->ssm_inner / G : 0;
    case RG_DIM_SSM_GROUPS: return G;
    }
    return 0;
}

const char *rg_arch_dim_name(rg_dim d) {
    switch (d) {
    case RG_DIM_NONE: return "";
    case RG_DIM_ONE: return "1";
    case RG_DIM_EMBD: return "n_embd";
    case RG_DIM_EMBD_X3: return "3*n_embd";
    case RG_DIM_VOCAB: return "n_vocab";
    case RG_DIM_Q: return "n_head*head_dim";
    case RG_DIM_KV: return "n_head_kv*head_dim";
    case RG_DIM_HEAD: return "head_dim";
    case RG_DIM_FF: return "n_ff";
    case RG_DIM_CONV: return "conv_kernel";
    case RG_DIM_SSM_IN: return "2*ssm.inner_size+2*ssm.group_count*ssm.state_size+ssm.time_step_rank";
    case RG_DIM_SSM_CONV_CH: return "ssm.inner_size+2*ssm.group_count*ssm.state_size";
    case RG_DIM_SSM_HEADS: return "ssm.time_step_rank";
    case RG_DIM_SSM_INNER: return "ssm.inner_size";
    case RG_DIM_SSM_GROUP: return "ssm.inner_size/ssm.group_count";
    case RG_DIM_SSM_GROUPS: return "ssm.group_count";
    }
    return "?";
}

int rg_arch_shape(const rg_arch_tensor *t, const rg_hparams *hp, const rg_layer *L, int64_t ne[4]) {
    int n = 0;
    for (int d = 0; d < 4; d++) ne[d] = 1;
    while (n < 3 && t->dims[n] != RG_DIM_NONE) {
        ne[n] = rg_arch_dim((rg_dim)t->dims[n], hp, L);
        n++;
    }
    return n;
}

void rg_arch_shape_str(const rg_arch_tensor *t, const rg_hparams *hp, const rg_layer *L, char *buf, size_t cap) {
    int64_t ne[4];
    int n = rg_arch_shape(t, hp, L, ne);
    char vals[96] = "", names[256] = "";
    size_t a = 0, b = 0;
    for (int d = 0; d < n; d++) {
        a += (size_t)snprintf(vals + a, sizeof vals - a, "%s%lld", d ? ", " : "", (long long)ne[d]);
        b += (size_t)snprintf(names + b, sizeof names - b, "%s%s", d ? ", " : "", rg_arch_dim_name((rg_dim)t->dims[d]));
        if (a >= sizeof vals || b >= sizeof names) break;
    }
    snprintf(buf, cap, "[%s] = [%s]", vals, names);
}

bool rg_arch_tensor_in_layer(const rg_arch_tensor *t, const rg_layer *L) {
    return (t->kinds & RG_KIND_BIT(L->mixer)) || (L->ffn != RG_KIND_NONE && (t->kinds & RG_KIND_BIT(L->ffn)));
}

bool rg_arch_tensor_required(const rg_arch *a, const rg_arch_tensor *t) { return (a->features & t->required) != 0; }

// Whether name is pattern with its one %d replaced by a decimal layer number (stored in *il), or equal to it.
static bool name_matches(const char *pattern, const char *name, int64_t *il) {
    const char *pc = strstr(pattern, "%d");
    if (!pc) return *il = -1, !strcmp(pattern, name);
    size_t pre = (size_t)(pc - pattern);
    if (strncmp(pattern, name, pre) != 0) return false;
    const char *p = name + pre;
    int64_t v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 7) v = v * 10 + (*p++ - '0'), digits++;
    if (!digits || (digits > 1 && name[pre] == '0')) return false;
    *il = v;
    return !strcmp(p, pc + 2);
}

const rg_arch_tensor *rg_arch_tensor_of(const rg_arch *a, const char *name, int64_t *il) {
    for (int i = 0; i < a->n_global; i++) {
        const rg_arch_tensor *t = &a->global[i];
        if (name_matches(t->name, name, il) || (t->alt_name && name_matches(t->alt_name, name, il))) return t;
    }
    for (int i = 0; i < a->n_tensors; i++)
        if (name_matches(a->tensors[i].name, name, il)) return &a->tensors[i];
    return NULL;
}

const rg_arch_tensor *rg_arch_role(const rg_arch *a, rg_role role) {
    const rg_arch_tensor *rows = role < RG_ROLE_N_GLOBAL ? a->global : a->tensors;
    const int n = role < RG_ROLE_N_GLOBAL ? a->n_global : a->n_tensors;
    for (int i = 0; i < n; i++)
        if (rows[i].role == role) return &rows[i];
    return NULL;
}

int rg_arch_lora_target(const rg_arch *a, rg_role role) {
    const rg_arch_tensor *t = rg_arch_role(a, role);
    return t ? t->lora : -1;
}

const rg_arch_tensor *rg_arch_lora_row(const rg_arch *a, int target) {
    for (int i = 0; i < a->n_tensors; i++)
        if (a->tensors[i].lora == target && target >= 0) return &a->tensors[i];
    return NULL;
}

rg_status rg_arch_check_attention(const char *path, rg_hparams *hp, rg_layer *layers, rg_error *err) {
    for (int64_t il = 0; il < hp->n_layer; il++)
        if (layers[il].n_head_kv < 0) layers[il].n_head_kv = layers[il].n_head;
    if (hp->n_head_kv < 0) hp->n_head_kv = hp->n_head;
    if (hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_ff <= 0)
        return rg_fail(err, RG_ERR_FORMAT, "%s: hyperparameters do not fit together (n_embd %lld, n_layer %lld, n_head %lld, "
                       "n_head_kv %lld, n_ff %lld)", path, (long long)hp->n_embd, (long long)hp->n_layer,
                       (long long)hp->n_head, (long long)hp->n_head_kv, (long long)hp->n_ff);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const rg_layer *L = &layers[il];
        if (L->mixer == RG_KIND_ATTN && (L->n_head <= 0 || L->n_head_kv <= 0 || L->n_head % L->n_head_kv))
            return rg_fail(err, RG_ERR_FORMAT, "%s: layer %lld is an attention layer with %s.attention.head_count %lld and "
                           "head_count_kv %lld, which do not fit together", path, (long long)il, hp->arch_name,
                           (long long)L->n_head, (long long)L->n_head_kv);
        if (L->ffn == RG_KIND_FFN && L->n_ff <= 0)
            return rg_fail(err, RG_ERR_FORMAT, "%s: layer %lld has an FFN but %s.feed_forward_length %lld", path,
                           (long long)il, hp->arch_name, (long long)L->n_ff);
    }
    if (hp->head_dim < 0) hp->head_dim = hp->n_embd / hp->n_head;
    if (hp->value_length < 0) hp->value_length = hp->head_dim;
    if (hp->head_dim != hp->value_length || hp->head_dim <= 0)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: key_length %lld and value_length %lld must be equal", path,
                       (long long)hp->head_dim, (long long)hp->value_length);
    if (hp->n_rot < 0) hp->n_rot = hp->head_dim;
    if (hp->n_rot != hp->head_dim)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: rope.dimension_count %lld differs from the head size %lld", path,
                       (long long)hp->n_rot, (long long)hp->head_dim);
    hp->rope_freq_scale = hp->rope_scale_factor > 0 ? 1.0f / hp->rope_scale_factor : 1.0f;
    if (hp->attn_scale == 0) hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        layers[il].window = 0;
        layers[il].rope_freq_base = hp->rope_freq_base, layers[il].rope_freq_scale = hp->rope_freq_scale;
    }
    return RG_OK;
}

rg_status rg_arch_check_conv_kernel(const char *path, const char *key, int64_t n_conv, rg_error *err) {
    if (n_conv < RG_CONV_KERNEL_MIN || n_conv > RG_CONV_KERNEL_MAX)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: %s is %lld: conv kernels of %d to %d taps are supported", path, key,
                       (long long)n_conv, RG_CONV_KERNEL_MIN, RG_CONV_KERNEL_MAX);
    return RG_OK;
}
