// cmd_make_tiny.c - `retrograd make-tiny`: write a tiny deterministic test model.
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/quantize.h"
#include "model/quantize_rules.h"
#include "model/tiny.h"

static void usage(FILE *f) {
    fprintf(f, "usage: retrograd make-tiny --arch ARCH --type TYPE -o OUT.gguf [--shape SHAPE] [--seed S] [--twin-f32]\n"
               "                          [--tied] [--groups G] [--dry-run]\n"
               "  --arch ARCH    architecture: llama, qwen2, qwen3, lfm2, mamba2, gemma2 or gemma3\n"
               "  --type TYPE    storage type of the weight matrices: f32, f16, bf16, or any type or mixture of\n"
               "                 `retrograd quantize` (q4_0, q4_k_m, iq4_xs, ...), applied to the f32 model;\n"
               "                 norms and biases stay f32\n"
               "  -o PATH        output file (written atomically)\n"
               "  --shape SHAPE  dimensions: tiny (default: the test fixtures), or a real model's with random\n"
               "                 weights and the tiny tokenizer padded to its vocabulary, tied as the model is:\n"
               "                 smollm2 (SmolLM2-135M), 1b (Llama-3.2-1B: 1.24 G parameters, 2.5 GB in bf16);\n"
               "                 with --arch lfm2: lfm2-350m (LFM2-350M, attention at layers 2 5 8 10 12 14);\n"
               "                 with --arch mamba2: mamba2-130m (state 128, heads of 64, inner 1536);\n"
               "                 with --arch gemma3: gemma3-270m (Gemma-3-270M: heads of 256, window 512)\n"
               "  --seed S       seed of the weights (default 42)\n"
               "  --twin-f32     the same values (rounded to TYPE) stored as f32: the twin of a half fixture\n"
               "  --tied         no output.weight: the head reuses token_embd.weight\n"
               "  --groups G     mamba2: G groups of heads sharing B and C (default 1; G divides the heads)\n"
               "  --dry-run      print what `info` would show for the file, without making or writing it\n");
}

// An option's value; false (message printed) when it is not a non-negative integer.
static bool parse_number(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || s[0] == '-' || !s[0]) {
        fprintf(stderr, "retrograd make-tiny: %s '%s' is not a non-negative integer\n", opt, s);
        return false;
    }
    *out = v;
    return true;
}

// The file's listing, as `info` prints it, from the plan alone: no value is made.
static int dry_run(const rg_tiny_config *cfg, const char *out) {
    rg_error err = {0};
    rg_gguf *g;
    if (rg_tiny_plan(cfg, &g, &err)) {
        fprintf(stderr, "retrograd make-tiny: %s\n", err.msg);
        return 1;
    }
    char label[4096];
    snprintf(label, sizeof label, "%s (not written: --dry-run)", out);
    cli_info_text(g, label);
    rg_gguf_free(g);
    return 0;
}

int cmd_make_tiny(int argc, char **argv) {
    rg_tiny_config cfg = {.arch = NULL, .type = RG_TYPE_F32, .seed = 42};
    const char *out = NULL, *type = "f32";
    bool dry = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--twin-f32")) cfg.twin_f32 = true;
        else if (!strcmp(a, "--tied")) cfg.tied = true;
        else if (!strcmp(a, "--dry-run")) dry = true;
        else if (!strcmp(a, "--arch") || !strcmp(a, "--type") || !strcmp(a, "-o") || !strcmp(a, "--seed") ||
                 !strcmp(a, "--shape") || !strcmp(a, "--groups")) {
            if (!next) {
                fprintf(stderr, "retrograd make-tiny: %s needs a value\n", a);
                return 2;
            }
            i++;
            if (!strcmp(a, "--arch")) cfg.arch = next;
            else if (!strcmp(a, "--type")) type = next;
            else if (!strcmp(a, "-o")) out = next;
            else if (!strcmp(a, "--shape")) cfg.shape = next;
            else if (!strcmp(a, "--groups")) {
                uint64_t v;
                if (!parse_number(a, next, &v) || v == 0) return 2;
                cfg.ssm_groups = (int64_t)v;
            } else if (!parse_number(a, next, &cfg.seed)) return 2;
        } else {
            fprintf(stderr, "retrograd make-tiny: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!cfg.arch || !out) {
        fprintf(stderr, "retrograd make-tiny: %s is required\n", !cfg.arch ? "--arch" : "-o");
        usage(stderr);
        return 2;
    }
    if (!rg_tiny_shape_find(cfg.shape)) {
        fprintf(stderr, "retrograd make-tiny: --shape '%s' is not one of:", cfg.shape);
        for (const rg_tiny_shape *sh = rg_tiny_shapes; sh->name; sh++) fprintf(stderr, " %s", sh->name);
        fprintf(stderr, "\n");
        return 2;
    }
    int t = rg_type_from_name(type);
    const rg_quant_target *target = NULL;
    if (t != RG_TYPE_F32 && t != RG_TYPE_F16 && t != RG_TYPE_BF16) {
        target = rg_quant_target_find(type);
        if (!target) {
            fprintf(stderr, "retrograd make-tiny: --type '%s' is not supported (f32, f16, bf16 or a quantize type:", type);
            for (const rg_quant_target *q = rg_quant_targets; q->name; q++) fprintf(stderr, " %s", q->name);
            fprintf(stderr, ")\n");
            return 2;
        }
        if (cfg.twin_f32) {
            fprintf(stderr, "retrograd make-tiny: --twin-f32 applies to f16 and bf16 only\n");
            return 2;
        }
        t = RG_TYPE_F32;
    }
    cfg.type = (uint32_t)t;
    if (dry) {
        if (target) {
            fprintf(stderr, "retrograd make-tiny: --dry-run lists f32, f16 and bf16 files (a %s file is quantized from "
                            "the f32 one)\n", target->name);
            return 2;
        }
        return dry_run(&cfg, out);
    }
    rg_error err = {0};
    if (target) {
        // The f32 model, then the same conversion `retrograd quantize` makes.
        size_t n = strlen(out) + 16;
        char *tmp = malloc(n);
        if (!tmp) return 1;
        snprintf(tmp, n, "%s.f32.tmp", out);
        rg_quantize_opts opts = {.n_threads = 0, .progress = NULL};
        rg_quantize_summary sum;
        int rc = 0;
        if (rg_tiny_write(&cfg, tmp, &err) || rg_quantize_file(tmp, out, target->name, &opts, &sum, &err)) {
            fprintf(stderr, "retrograd make-tiny: %s\n", err.msg);
            rc = 1;
        }
        remove(tmp);
        free(tmp);
        if (!rc) printf("wrote %s (%s %s, seed %" PRIu64 ")\n", out, cfg.arch, target->name, cfg.seed);
        return rc;
    }
    if (rg_tiny_write(&cfg, out, &err)) {
        fprintf(stderr, "retrograd make-tiny: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s (%s%s%s %s%s, seed %" PRIu64 ")\n", out, cfg.shape ? cfg.shape : "", cfg.shape ? " shape " : "",
           cfg.arch, rg_type_get(cfg.type)->name, cfg.twin_f32 ? ", f32 twin" : "", cfg.seed);
    return 0;
}
