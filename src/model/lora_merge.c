// lora_merge.c - see lora.h: a LoRA adapter folded into its base model. Each adapted W is read into F32, gets
// s * B·A (summed in double) and is encoded once, in the type the output asks for: the base's own types, or a type
// or mixture of `retrograd quantize` with its per-tensor rules (the other tensors converted by the same rules, or
// copied byte for byte where their type stays). The merged values are read back to measure how much of B·A the
// file still carries: a value that sits on a quantized grid can round back to where it was.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "model/lora.h"
#include "model/quantize.h"
#include "tensor/quant/quant.h"

// One tensor's rows, converted on the pool. With an adapter pair p, row o of W [n_in, n_out] gets
// D = s * sum_k A[i,k] B[k,o] before it is encoded, and acc gathers <M - W, D>, |D|^2 and |M - W|^2 where M is the
// encoded row read back; without one the row is only converted.
typedef struct merge_job {
    const rg_lora_pair *p;  // NULL: a plain conversion
    int64_t rank, n_in, n_rows;
    double scale;
    uint32_t in_type, out_type;
    const void *src;        // the base's bytes
    char *dst;              // the output's bytes
    float *scratch;         // [nth][3 * n_in]: W, D, M
    double *acc;            // [nth][3]
} merge_job;

static void merge_rows(void *arg, int ith, int nth) {
    const merge_job *j = arg;
    const rg_lora_pair *p = j->p;
    const int64_t n_in = j->n_in, r = j->rank;
    int64_t r0, r1;
    rg_split_range(j->n_rows, ith, nth, &r0, &r1);
    const rg_quant_ops *in_ops = rg_quant_get(j->in_type), *out_ops = rg_quant_get(j->out_type);
    const size_t in_row = rg_type_row_size(j->in_type, n_in), out_row = rg_type_row_size(j->out_type, n_in);
    float *w = j->scratch + (size_t)ith * 3 * (size_t)n_in, *d = w + n_in, *m = d + n_in;
    double dm = 0, dd = 0, mm = 0;
    for (int64_t o = r0; o < r1; o++) {
        in_ops->dequant((const char *)j->src + (size_t)o * in_row, w, n_in);
        char *out = j->dst + (size_t)o * out_row;
        if (!p) {
            out_ops->quantize(w, out, n_in, NULL);
            continue;
        }
        const float *b = p->b + o * r;
        for (int64_t i = 0; i < n_in; i++) {
            double s = 0;
            for (int64_t k = 0; k < r; k++) s += (double)p->a[i + k * n_in] * (double)b[k];
            s *= j->scale;
            d[i] = (float)s;
            m[i] = (float)((double)w[i] + s);  // the exact sum, rounded once
        }
        out_ops->quantize(m, out, n_in, NULL);
        out_ops->dequant(out, m, n_in);
        for (int64_t i = 0; i < n_in; i++) {
            const double e = (double)m[i] - (double)w[i];
            dm += e * (double)d[i], dd += (double)d[i] * (double)d[i], mm += e * e;
        }
    }
    j->acc[3 * ith] = dm, j->acc[3 * ith + 1] = dd, j->acc[3 * ith + 2] = mm;
}

static void human(uint64_t b, char *buf, size_t cap) {
    if (b >= (1ull << 20)) snprintf(buf, cap, "%.2f MiB", (double)b / (1 << 20));
    else snprintf(buf, cap, "%.1f KiB", (double)b / 1024);
}

static const rg_lora_pair *pair_of(const rg_lora *l, const char *name) {
    for (int64_t i = 0; i < l->n_layer * RG_LORA_N_TARGETS; i++)
        if (l->pairs[i].a && !strcmp(l->pairs[i].name, name)) return &l->pairs[i];
    return NULL;
}

const char *rg_lora_merge_default_type(const rg_model *m, const rg_lora *l) {
    for (int64_t i = 0; i < l->n_layer * RG_LORA_N_TARGETS; i++) {
        const rg_lora_pair *p = &l->pairs[i];
        const rg_gguf_tensor *t = p->a ? rg_gguf_find_tensor(m->file, p->name) : NULL;
        if (t && rg_type_get(t->type)->quantized) return RG_LORA_MERGE_QUANTIZED_DEFAULT;
    }
    return NULL;
}

rg_status rg_lora_merge(const char *base_path, const char *adapter_path, float user_scale, const char *out_path,
                        rg_error *err) {
    rg_lora_merge_opts o = {0};
    return rg_lora_merge_ex(base_path, adapter_path, user_scale, out_path, &o, NULL, err);
}

rg_status rg_lora_merge_ex(const char *base_path, const char *adapter_path, float user_scale, const char *out_path,
                           const rg_lora_merge_opts *opts, rg_lora_merge_summary *summary, rg_error *err) {
    static const rg_lora_merge_opts no_opts = {0};
    if (!opts) opts = &no_opts;
    rg_lora_merge_summary sum = {0};
    sum.kept = sum.min_kept = 1.0;
    if (!isfinite(user_scale)) return rg_fail(err, RG_ERR_ARG, "merge: the scale %g is not finite", (double)user_scale);
    const rg_quant_target *target = NULL;
    if (opts->type) {
        rg_status s = rg_quant_target_lookup(opts->type, &target, err);
        if (s) return s;
    }
    rg_model *m = NULL;
    rg_lora *l = NULL;
    rg_gguf *out = NULL;
    rg_threadpool *pool = NULL;
    uint32_t *types = NULL;
    float *scratch = NULL;
    double *acc = NULL;
    rg_status s = rg_model_load(&m, base_path, err);
    if (!s) s = rg_lora_load(&l, adapter_path, m, err);
    if (!s) s = rg_threadpool_create(&pool, opts->n_threads, err);
    if (s) goto done;
    const rg_gguf *in = m->file;
    if (!target) {
        const char *def = rg_lora_merge_default_type(m, l);
        if (def) target = rg_quant_target_find(def);
    }
    types = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *types);
    if (!types) {
        s = rg_fail(err, RG_ERR_NOMEM, "merge: out of memory");
        goto done;
    }
    if (target) {
        if ((s = rg_quant_plan_types(in, target, false, types, NULL, err))) goto done;
    } else {
        for (uint64_t i = 0; i < in->n_tensors; i++) types[i] = in->tensors[i].type;
    }
    // Check every tensor that is rewritten before any work.
    int64_t max_in = 1;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const rg_gguf_tensor *t = &in->tensors[i];
        if (types[i] == t->type && !pair_of(l, t->name)) continue;
        if ((s = rg_quant_check_convert(base_path, t, types[i], err))) goto done;
        if (t->ne[0] > max_in) max_in = t->ne[0];
    }
    out = rg_gguf_new();
    if (!out) {
        s = rg_fail(err, RG_ERR_NOMEM, "merge: out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < in->n_kv && !s; i++) s = rg_gguf_set_kv(out, &in->kv[i], err);
    if (!s && target) s = rg_quant_set_file_keys(out, target, err);
    if (s) goto done;
    const int nth = rg_threadpool_size(pool);
    scratch = malloc(sizeof(float) * 3 * (size_t)max_in * (size_t)nth);
    acc = calloc(3 * (size_t)nth, sizeof *acc);
    if (!scratch || !acc) {
        s = rg_fail(err, RG_ERR_NOMEM, "merge: out of memory");
        goto done;
    }
    if (target) snprintf(sum.type, sizeof sum.type, "%s", target->name);
    sum.rank = l->rank, sum.alpha = l->alpha, sum.scale = rg_lora_scale(l, user_scale);
    const double scale = (double)user_scale * (double)l->alpha / (double)l->rank;
    double all_dm = 0, all_dd = 0, all_mm = 0;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const rg_gguf_tensor *t = &in->tensors[i];
        const rg_lora_pair *p = pair_of(l, t->name);
        const int64_t n_rows = t->ne[1] * t->ne[2] * t->ne[3];
        const void *data = t->data;
        uint64_t out_bytes = t->nbytes;
        double dm = 0, dd = 0, mm = 0;
        if (p || types[i] != t->type) {
            out_bytes = (uint64_t)rg_type_row_size(types[i], t->ne[0]) * (uint64_t)n_rows;
            char *buf = rg_arena_alloc(&out->arena, out_bytes ? out_bytes : 1, 64);
            if (!buf) {
                s = rg_fail(err, RG_ERR_NOMEM, "merge: out of memory for tensor '%s' (%llu bytes)", t->name,
                            (unsigned long long)out_bytes);
                goto done;
            }
            merge_job j = {p, l->rank, t->ne[0], n_rows, scale, t->type, types[i], t->data, buf, scratch, acc};
            memset(acc, 0, 3 * (size_t)nth * sizeof *acc);
            rg_threadpool_run(pool, merge_rows, &j);
            for (int k = 0; k < nth; k++) dm += acc[3 * k], dd += acc[3 * k + 1], mm += acc[3 * k + 2];
            data = buf;
            if (!p) sum.n_converted++;
        }
        if (p) {
            sum.n_merged++;
            sum.bytes_adapter += sizeof(float) * (uint64_t)(l->rank * (p->n_in + p->n_out));
            all_dm += dm, all_dd += dd, all_mm += mm;
            const double kept = dd > 0 ? dm / dd : 1.0;
            if (kept < 0.5) sum.n_lost++;
            if (kept < sum.min_kept || sum.n_merged == 1) {
                sum.min_kept = kept;
                snprintf(sum.min_kept_tensor, sizeof sum.min_kept_tensor, "%s", t->name);
            }
        }
        s = rg_gguf_add_tensor(out, t->name, types[i], t->n_dims, t->ne, data, err);
        if (s) goto done;
        sum.n_tensors++;
        sum.bytes_base += t->nbytes;
        sum.bytes_out += out_bytes;
        if (opts->progress) {
            char a[32], what[96];
            human(out_bytes, a, sizeof a);
            if (p && dd > 0)
                snprintf(what, sizeof what, "merged: kept %5.1f%% of B·A, |merged-base|/|B·A| %.3f", 100.0 * dm / dd,
                         sqrt(mm / dd));
            else snprintf(what, sizeof what, "%s", p ? "merged: B·A = 0" : data == t->data ? "copied" : "converted");
            fprintf(opts->progress, "[%4llu/%4llu] %-36s %-7s -> %-7s %10s  %s\n", (unsigned long long)i + 1,
                    (unsigned long long)in->n_tensors, t->name, rg_type_get(t->type)->name,
                    rg_type_get(types[i])->name, a, what);
        }
    }
    if (all_dd > 0) sum.kept = all_dm / all_dd, sum.rel_norm = sqrt(all_mm / all_dd);
    s = rg_gguf_write(out, out_path, err);
done:
    if (summary) *summary = sum;
    free(scratch);
    free(acc);
    free(types);
    rg_threadpool_free(pool);
    rg_gguf_free(out);
    rg_lora_free(l);
    rg_model_free(m);
    return s;
}
