// quantize.c - see quantize.h.
#include "model/quantize.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/quantize_rules.h"
#include "tensor/quant/quant.h"

typedef struct plan_item {
    const rg_gguf_tensor *t;
    int layer;
} plan_item;

static int by_layer_then_name(const void *a, const void *b) {
    const plan_item *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

typedef struct convert_job {
    const rg_gguf_tensor *t;
    uint32_t out_type;
    float *rows_f32;  // scratch per thread: [n_threads][ne0]
    char *out;
    int64_t ne0, n_rows;
} convert_job;

// Each thread converts a contiguous range of rows: dequantize to F32 (when
// needed), then quantize to the output type.
static void convert_rows(void *p, int ith, int nth) {
    convert_job *j = p;
    int64_t r0, r1;
    rg_split_range(j->n_rows, ith, nth, &r0, &r1);
    const rg_quant_ops *in_ops = rg_quant_get(j->t->type), *out_ops = rg_quant_get(j->out_type);
    size_t in_row = rg_type_row_size(j->t->type, j->ne0), out_row = rg_type_row_size(j->out_type, j->ne0);
    float *tmp = j->rows_f32 + (size_t)ith * (size_t)j->ne0;
    for (int64_t r = r0; r < r1; r++) {
        const char *src = (const char *)j->t->data + (size_t)r * in_row;
        const float *f = (const float *)src;
        if (j->t->type != RG_TYPE_F32) {
            in_ops->dequant(src, tmp, j->ne0);
            f = tmp;
        }
        out_ops->quantize(f, j->out + (size_t)r * out_row, j->ne0, NULL);
    }
}

static void human(uint64_t b, char *buf, size_t cap) {
    if (b >= (1ull << 20)) snprintf(buf, cap, "%.2f MiB", (double)b / (1 << 20));
    else snprintf(buf, cap, "%.1f KiB", (double)b / 1024);
}

// The target's general.file_type, and general.quantization_version when its default type is quantized.
rg_status rg_quant_set_file_keys(rg_gguf *out, const rg_quant_target *target, rg_error *err) {
    rg_status s = rg_gguf_set_u32(out, "general.file_type", target->llama_ftype, err);
    if (!s && rg_type_get(target->default_type)->quantized) s = rg_gguf_set_u32(out, "general.quantization_version", 2, err);
    return s;
}

rg_status rg_quant_plan_types(const rg_gguf *in, const rg_quant_target *target, bool pure, uint32_t *types,
                              uint64_t *order, rg_error *err) {
    // What the rules need from the model: a known architecture's keys through its table (layer 0's value of a
    // per-layer array, as llama.cpp's n_head_kv() reads it), any other file's by their generic names.
    rg_quant_state st = {0};
    st.pure = pure;
    st.has_output = rg_gguf_find_tensor(in, "output.weight") != NULL;
    rg_gguf_str arch = {0, NULL};
    const rg_arch *a = NULL;
    if (rg_gguf_get_str(in, "general.architecture", &arch, NULL) == RG_OK && arch.len < 64) {
        a = rg_arch_find(arch.ptr, arch.len);
        rg_hparams hp;
        rg_layer *layers = NULL;
        char key[160];
        uint64_t v;
        if (a && rg_model_read_hparams(in, a, &hp, &layers, NULL) == RG_OK) {
            st.n_layer = (int)hp.n_layer, st.n_head = (int)layers[0].n_head, st.n_head_kv = (int)layers[0].n_head_kv;
        } else {
            snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
            if (rg_gguf_get_u64(in, key, &v, NULL) == RG_OK && v < 100000) st.n_layer = (int)v;
            snprintf(key, sizeof key, "%.*s.attention.head_count", (int)arch.len, arch.ptr);
            if (rg_gguf_get_u64(in, key, &v, NULL) == RG_OK && v < 100000) st.n_head = (int)v;
            snprintf(key, sizeof key, "%.*s.attention.head_count_kv", (int)arch.len, arch.ptr);
            st.n_head_kv = rg_gguf_get_u64(in, key, &v, NULL) == RG_OK && v < 100000 ? (int)v : st.n_head;
        }
        free(layers);
        snprintf(key, sizeof key, "%.*s.expert_count", (int)arch.len, arch.ptr);
        if (rg_gguf_get_u64(in, key, &v, NULL) == RG_OK && v < 100000) st.n_expert = (int)v;
    }
    plan_item *plan = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *plan);
    if (!plan) return rg_fail(err, RG_ERR_NOMEM, "quantize: out of memory");
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        plan[i].t = &in->tensors[i];
        plan[i].layer = rg_quant_layer_of(in->tensors[i].name);
        if (rg_quant_is_attn_v_like(in->tensors[i].name)) st.n_attention_wv++;
    }
    qsort(plan, in->n_tensors, sizeof *plan, by_layer_then_name);
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const rg_gguf_tensor *t = plan[i].t;
        const uint64_t k = (uint64_t)(t - in->tensors);
        if (order) order[i] = k;
        types[k] = t->type;
        if (!rg_quant_tensor_is_quantizable(t->name, (int)t->n_dims)) continue;
        // The architecture's small elementwise weights (conv kernels, the SSM's A and D) stay as they are: the
        // loader takes them in float only.
        int64_t il;
        const rg_arch_tensor *row = a ? rg_arch_tensor_of(a, t->name, &il) : NULL;
        if (row && (row->flags & RG_T_F32)) continue;
        int type = rg_quant_choose_type(target, &st, t->name, t->ne[0], err);
        if (type < 0) {
            free(plan);
            return RG_ERR_ARG;
        }
        types[k] = (uint32_t)type;
    }
    free(plan);
    return RG_OK;
}

rg_status rg_quantize_file(const char *in_path, const char *out_path, const char *target_name,
                           const rg_quantize_opts *opts, rg_quantize_summary *summary, rg_error *err) {
    memset(summary, 0, sizeof *summary);
    const rg_quant_target *target = NULL;
    rg_status s = rg_quant_target_lookup(target_name, &target, err);
    if (s) return s;
    rg_gguf *in = NULL, *out = NULL;
    rg_threadpool *pool = NULL;
    uint32_t *types = NULL;
    uint64_t *order = NULL;
    float *scratch = NULL;
    s = rg_gguf_open(&in, in_path, err);
    if (s) return s;
    s = rg_threadpool_create(&pool, opts->n_threads, err);
    if (s) goto done;
    types = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *types);
    order = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *order);
    if (!types || !order) {
        s = rg_fail(err, RG_ERR_NOMEM, "quantize: out of memory");
        goto done;
    }
    // Choose every type first, so a tensor that cannot be converted fails before any work.
    if ((s = rg_quant_plan_types(in, target, opts->pure, types, order, err))) goto done;
    int64_t max_ne0 = 0;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const rg_gguf_tensor *t = &in->tensors[i];
        if (types[i] == t->type) continue;
        // Dequantizing to F32 is exact: no flag. Any other type rounds the dequantized values again.
        if (rg_type_get(t->type)->quantized && types[i] != RG_TYPE_F32 && !opts->allow_requantize) {
            const char *from = rg_type_get(t->type)->name, *to = rg_type_get(types[i])->name;
            if (types[i] == RG_TYPE_F16 || types[i] == RG_TYPE_BF16)
                s = rg_fail(err, RG_ERR_ARG,
                            "%s: tensor '%s' is already %s: %s rounds its dequantized values again (not every %s value "
                            "is a %s value); F32 keeps them exactly (pass --allow-requantize to accept the loss)",
                            in_path, t->name, from, to, from, to);
            else
                s = rg_fail(err, RG_ERR_ARG,
                            "%s: tensor '%s' is already %s: re-quantizing to %s adds %s's rounding error to %s's "
                            "(quantize the original F32/F16/BF16 model instead, or pass --allow-requantize); F32 keeps "
                            "the values exactly",
                            in_path, t->name, from, to, to, from);
            goto done;
        }
        if ((s = rg_quant_check_convert(in_path, t, types[i], err))) goto done;
        if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
    }

    out = rg_gguf_new();
    if (!out) {
        s = rg_fail(err, RG_ERR_NOMEM, "quantize: out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < in->n_kv && !s; i++) s = rg_gguf_set_kv(out, &in->kv[i], err);
    if (!s) s = rg_quant_set_file_keys(out, target, err);
    if (s) goto done;

    int nth = rg_threadpool_size(pool);
    scratch = malloc(sizeof(float) * (size_t)(max_ne0 ? max_ne0 : 1) * (size_t)nth);
    if (!scratch) {
        s = rg_fail(err, RG_ERR_NOMEM, "quantize: out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const rg_gguf_tensor *t = &in->tensors[order[i]];
        const uint32_t type = types[order[i]];
        const void *data = t->data;
        int64_t n_rows = t->ne[1] * t->ne[2] * t->ne[3];
        uint64_t out_bytes = t->nbytes;
        if (type != t->type) {
            out_bytes = (uint64_t)rg_type_row_size(type, t->ne[0]) * (uint64_t)n_rows;
            char *buf = rg_arena_alloc(&out->arena, out_bytes ? out_bytes : 1, 64);
            if (!buf) {
                s = rg_fail(err, RG_ERR_NOMEM, "quantize: out of memory for tensor '%s' (%llu bytes)", t->name,
                            (unsigned long long)out_bytes);
                goto done;
            }
            convert_job j = {t, type, scratch, buf, t->ne[0], n_rows};
            rg_threadpool_run(pool, convert_rows, &j);
            data = buf;
            summary->n_quantized++;
        }
        s = rg_gguf_add_tensor(out, t->name, type, t->n_dims, t->ne, data, err);
        if (s) goto done;
        summary->n_tensors++;
        summary->bytes_in += t->nbytes;
        summary->bytes_out += out_bytes;
        summary->count_by_type[type]++;
        summary->bytes_by_type[type] += out_bytes;
        if (opts->progress) {
            char a[32], b[32];
            human(t->nbytes, a, sizeof a);
            human(out_bytes, b, sizeof b);
            fprintf(opts->progress, "[%4llu/%4llu] %-36s %-7s -> %-7s %10s -> %10s\n", (unsigned long long)i + 1,
                    (unsigned long long)in->n_tensors, t->name, rg_type_get(t->type)->name, rg_type_get(type)->name, a,
                    b);
        }
    }
    s = rg_gguf_write(out, out_path, err);
done:
    free(scratch);
    free(types);
    free(order);
    rg_threadpool_free(pool);
    rg_gguf_free(out);
    rg_gguf_free(in);
    return s;
}

rg_status rg_quant_check_convert(const char *path, const rg_gguf_tensor *t, uint32_t to_type, rg_error *err) {
    if (!rg_quant_get(t->type)->dequant)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: tensor '%s': cannot read type %s", path, t->name,
                       rg_type_get(t->type)->name);
    if (!rg_quant_get(to_type)->quantize || rg_quant_get(to_type)->quantize_needs_imatrix)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "tensor '%s': no quantizer for type %s", t->name,
                       rg_type_get(to_type)->name);
    return RG_OK;
}
