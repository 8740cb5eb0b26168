// cmd_info.c - `retrograd info MODEL.gguf [--json [--full]]`: what a GGUF file holds.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tensor/half.h"

static const char *ftype_name(uint64_t v) {
    static const char *names[] = {
        [0] = "ALL_F32", [1] = "MOSTLY_F16", [2] = "MOSTLY_Q4_0", [3] = "MOSTLY_Q4_1", [7] = "MOSTLY_Q8_0",
        [8] = "MOSTLY_Q5_0", [9] = "MOSTLY_Q5_1", [10] = "MOSTLY_Q2_K", [11] = "MOSTLY_Q3_K_S",
        [12] = "MOSTLY_Q3_K_M", [13] = "MOSTLY_Q3_K_L", [14] = "MOSTLY_Q4_K_S", [15] = "MOSTLY_Q4_K_M",
        [16] = "MOSTLY_Q5_K_S", [17] = "MOSTLY_Q5_K_M", [18] = "MOSTLY_Q6_K", [19] = "MOSTLY_IQ2_XXS",
        [20] = "MOSTLY_IQ2_XS", [21] = "MOSTLY_Q2_K_S", [22] = "MOSTLY_IQ3_XS", [23] = "MOSTLY_IQ3_XXS",
        [24] = "MOSTLY_IQ1_S", [25] = "MOSTLY_IQ4_NL", [26] = "MOSTLY_IQ3_S", [27] = "MOSTLY_IQ3_M",
        [28] = "MOSTLY_IQ2_S", [29] = "MOSTLY_IQ2_M", [30] = "MOSTLY_IQ4_XS", [31] = "MOSTLY_IQ1_M",
        [32] = "MOSTLY_BF16", [36] = "MOSTLY_TQ1_0", [37] = "MOSTLY_TQ2_0", [38] = "MOSTLY_MXFP4_MOE",
        [39] = "MOSTLY_NVFP4", [40] = "MOSTLY_Q1_0", [41] = "MOSTLY_Q2_0",
    };
    if (v == 1024) return "GUESSED";
    if (v < sizeof names / sizeof names[0] && names[v]) return names[v];
    return "unknown";
}

static int64_t tensor_nelements(const rg_gguf_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

static uint64_t fnv1a64(const uint8_t *p, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

// Sum of the values in double, for plain types; false for quantized ones.
static int tensor_sum(const rg_gguf_tensor *t, double *out) {
    const uint8_t *p = t->data;
    int64_t n = tensor_nelements(t);
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        switch (t->type) {
        case RG_TYPE_F32: { float v; memcpy(&v, p + 4 * i, 4); s += v; break; }
        case RG_TYPE_F64: { double v; memcpy(&v, p + 8 * i, 8); s += v; break; }
        case RG_TYPE_F16: { uint16_t h; memcpy(&h, p + 2 * i, 2); s += rg_fp16_to_fp32(h); break; }
        case RG_TYPE_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); s += rg_bf16_to_fp32(h); break; }
        case RG_TYPE_I8: s += (int8_t)p[i]; break;
        case RG_TYPE_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); s += v; break; }
        case RG_TYPE_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); s += v; break; }
        case RG_TYPE_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); s += (double)v; break; }
        default: return 0;
        }
    }
    *out = s;
    return 1;
}

static void print_shape(FILE *f, const rg_gguf_tensor *t, char *buf, size_t cap) {
    (void)f;
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (uint32_t d = 0; d < t->n_dims && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static void human_bytes(uint64_t b, char *buf, size_t cap) {
    if (b >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, cap, "%.2f MiB", (double)b / (1ull << 20));
    else if (b >= (1ull << 10)) snprintf(buf, cap, "%.2f KiB", (double)b / (1ull << 10));
    else snprintf(buf, cap, "%" PRIu64 " B", b);
}

static void print_json(const rg_gguf *g, int full) {
    FILE *f = stdout;
    uint64_t params = 0, bytes = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        params += (uint64_t)tensor_nelements(&g->tensors[i]);
        bytes += g->tensors[i].nbytes;
    }
    fprintf(f, "{\n  \"file\": ");
    json_str(f, g->path, strlen(g->path));
    fprintf(f, ",\n  \"version\": %u,\n  \"alignment\": %u,\n  \"file_size\": %" PRIu64 ",\n  \"data_start\": %" PRIu64,
            g->version, g->alignment, g->file_size, g->data_start);
    fprintf(f, ",\n  \"n_parameters\": %" PRIu64 ",\n  \"tensor_bytes\": %" PRIu64, params, bytes);
    fprintf(f, ",\n  \"metadata\": [");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const rg_gguf_kv *kv = &g->kv[i];
        fprintf(f, "%s\n    {\"key\": ", i ? "," : "");
        json_str(f, kv->key.ptr, (size_t)kv->key.len);
        fprintf(f, ", \"type\": \"%s\"", rg_gguf_vtype_name(kv->type));
        if (kv->type == RG_GGUF_ARRAY) fprintf(f, ", \"elem_type\": \"%s\"", rg_gguf_vtype_name(kv->arr_type));
        fprintf(f, ", \"value\": ");
        json_kv_value(f, kv, full);
        fputc('}', f);
    }
    fprintf(f, "\n  ],\n  \"tensors\": [");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const rg_gguf_tensor *t = &g->tensors[i];
        fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
        json_str(f, t->name, strlen(t->name));
        fprintf(f, ", \"type\": \"%s\", \"type_id\": %u, \"shape\": [", rg_type_get(t->type)->name, t->type);
        for (uint32_t d = 0; d < t->n_dims; d++) fprintf(f, "%s%" PRId64, d ? ", " : "", t->ne[d]);
        fprintf(f, "], \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64, t->offset, t->nbytes);
        if (full) {
            fprintf(f, ", \"fnv1a64\": \"%016" PRIx64 "\"", fnv1a64(t->data, t->nbytes));
            double s;
            if (tensor_sum(t, &s)) {
                fprintf(f, ", \"sum\": ");
                json_f64(f, s);
            }
        }
        fputc('}', f);
    }
    fprintf(f, "\n  ]\n}\n");
}

static void print_str_key(const rg_gguf *g, const char *label, const char *key) {
    const rg_gguf_kv *kv = rg_gguf_find(g, key);
    if (!kv || kv->type != RG_GGUF_STRING) return;
    rg_gguf_str s = rg_gguf_kv_str(kv, 0);
    printf("%-22s %.*s\n", label, (int)(s.len > 200 ? 200 : s.len), s.ptr);
}

static void print_value_text(const rg_gguf_kv *kv) {
    if (kv->type == RG_GGUF_STRING) {
        rg_gguf_str s = rg_gguf_kv_str(kv, 0);
        int n = s.len > 60 ? 60 : (int)s.len;
        printf("\"");
        for (int i = 0; i < n; i++) putchar(s.ptr[i] == '\n' ? ' ' : s.ptr[i]);
        printf("\"%s", s.len > 60 ? "..." : "");
    } else if (kv->type == RG_GGUF_ARRAY) {
        printf("[%s x %" PRIu64 "]", rg_gguf_vtype_name(kv->arr_type), kv->n);
    } else json_kv_value(stdout, kv, 0);
}

void cli_info_text(const rg_gguf *g, const char *file_label) {
    uint64_t params = 0, bytes = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        params += (uint64_t)tensor_nelements(&g->tensors[i]);
        bytes += g->tensors[i].nbytes;
    }
    char hb[32];
    printf("%-22s %s\n", "file", file_label ? file_label : g->path);
    printf("%-22s %u\n", "gguf version", g->version);
    printf("%-22s %u\n", "alignment", g->alignment);
    rg_gguf_str arch = {0, NULL};
    const rg_gguf_kv *akv = rg_gguf_find(g, "general.architecture");
    if (akv && akv->type == RG_GGUF_STRING) arch = rg_gguf_kv_str(akv, 0);
    printf("%-22s %.*s\n", "architecture", arch.ptr ? (int)arch.len : 9, arch.ptr ? arch.ptr : "(missing)");
    print_str_key(g, "name", "general.name");
    const rg_gguf_kv *ft = rg_gguf_find(g, "general.file_type");
    uint64_t ftv;
    if (ft && rg_gguf_kv_u64(ft, 0, &ftv)) printf("%-22s %" PRIu64 " (%s)\n", "file type", ftv, ftype_name(ftv));
    human_bytes(bytes, hb, sizeof hb);
    printf("%-22s %" PRIu64 " (%.2f M)\n", "parameters", params, (double)params / 1e6);
    printf("%-22s %" PRIu64 " (%s)\n", "tensor bytes", bytes, hb);

    if (arch.ptr) {
        printf("\nhyperparameters\n");
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const rg_gguf_kv *kv = &g->kv[i];
            if (kv->key.len > arch.len && memcmp(kv->key.ptr, arch.ptr, arch.len) == 0 && kv->key.ptr[arch.len] == '.') {
                printf("  %-44s ", kv->key.ptr + arch.len + 1);
                print_value_text(kv);
                printf("\n");
            }
        }
    }
    const rg_gguf_kv *tok = rg_gguf_find(g, "tokenizer.ggml.tokens");
    const rg_gguf_kv *merges = rg_gguf_find(g, "tokenizer.ggml.merges");
    const rg_gguf_kv *model = rg_gguf_find(g, "tokenizer.ggml.model");
    if (tok || model) {
        printf("\ntokenizer\n");
        if (model && model->type == RG_GGUF_STRING) {
            rg_gguf_str m = rg_gguf_kv_str(model, 0);
            printf("  %-20s %.*s\n", "model", (int)m.len, m.ptr);
        }
        const rg_gguf_kv *pre = rg_gguf_find(g, "tokenizer.ggml.pre");
        if (pre && pre->type == RG_GGUF_STRING) {
            rg_gguf_str m = rg_gguf_kv_str(pre, 0);
            printf("  %-20s %.*s\n", "pre-tokenizer", (int)m.len, m.ptr);
        }
        if (tok) printf("  %-20s %" PRIu64 "\n", "tokens", tok->n);
        if (merges) printf("  %-20s %" PRIu64 "\n", "merges", merges->n);
        static const char *ids[] = {"bos", "eos", "eot", "padding", "unknown"};
        for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
            char key[64];
            snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", ids[i]);
            const rg_gguf_kv *kv = rg_gguf_find(g, key);
            uint64_t id;
            if (!kv || !rg_gguf_kv_u64(kv, 0, &id)) continue;
            rg_gguf_str text = tok ? rg_gguf_kv_str(tok, id) : (rg_gguf_str){0, NULL};
            printf("  %-20s %" PRIu64 " %.*s\n", ids[i], id, (int)text.len, text.ptr ? text.ptr : "");
        }
        const rg_gguf_kv *bos = rg_gguf_find(g, "tokenizer.ggml.add_bos_token");
        if (bos && bos->type == RG_GGUF_BOOL) printf("  %-20s %s\n", "add bos", *(const uint8_t *)bos->data ? "yes" : "no");
        const rg_gguf_kv *tmpl = rg_gguf_find(g, "tokenizer.chat_template");
        if (tmpl && tmpl->type == RG_GGUF_STRING) {
            rg_gguf_str t = rg_gguf_kv_str(tmpl, 0);
            int chatml = 0;
            for (uint64_t i = 0; i + 12 <= t.len; i++)
                if (memcmp(t.ptr + i, "<|im_start|>", 12) == 0) chatml = 1;
            printf("  %-20s %" PRIu64 " bytes%s\n", "chat template", t.len, chatml ? " (ChatML markers)" : "");
        }
    }
    printf("\nmetadata: %" PRIu64 " keys\n", g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const rg_gguf_kv *kv = &g->kv[i];
        printf("  %-44s %-7s ", kv->key.ptr, rg_gguf_vtype_name(kv->type));
        print_value_text(kv);
        printf("\n");
    }
    printf("\ntensors: %" PRIu64 "\n", g->n_tensors);
    printf("  %-36s %-8s %-22s %12s\n", "name", "type", "shape", "bytes");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const rg_gguf_tensor *t = &g->tensors[i];
        char shape[96];
        print_shape(stdout, t, shape, sizeof shape);
        printf("  %-36s %-8s %-22s %12" PRIu64 "\n", t->name, rg_type_get(t->type)->name, shape, t->nbytes);
    }
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool json = false, full = false;
    int n_pos = 0;
    const cli_opt opts[] = {
        CLI_FLAG(0, "--json", "machine-readable output", &json),
        CLI_FLAG(0, "--full", "with --json: every array in full, and per tensor a checksum and value sum", &full),
    };
    const cli_command c = {"info", "MODEL.gguf [--json [--full]]", opts, CLI_N(opts), &path, 1, &n_pos, NULL};
    int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    if (!path) {
        fprintf(stderr, "retrograd info: MODEL.gguf is required\n");
        cli_args_help(&c, stderr);
        return 2;
    }
    rg_error err = {0};
    rg_gguf *g;
    if (rg_gguf_open(&g, path, &err)) {
        fprintf(stderr, "retrograd info: %s\n", err.msg);
        return 1;
    }
    if (json) print_json(g, full);
    else cli_info_text(g, NULL);
    rg_gguf_free(g);
    return 0;
}
