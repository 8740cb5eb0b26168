// cmd_make_tiny.c - `retrograd make-tiny`: write a tiny deterministic test model (or a real model's shape
// with random weights), or list it with --dry-run.
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/quantize.h"
#include "model/quantize_rules.h"
#include "model/tiny.h"

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
    int64_t groups = 0;
    const cli_opt opts[] = {
        CLI_STR(0, "--arch", "ARCH", "architecture: llama, qwen2, qwen3, lfm2, mamba2, gemma2 or gemma3", &cfg.arch),
        CLI_STR(0, "--type", "TYPE", "storage type of the weight matrices: f32 (default), f16, bf16, or any type or "
                "mixture of `retrograd quantize` (q4_0, q4_k_m, iq4_xs, ...), applied to the f32 model; norms and "
                "biases stay f32", &type),
        CLI_STR('o', "--output", "OUT.gguf", "output file (written atomically)", &out),
        CLI_STR(0, "--shape", "SHAPE", "dimensions: tiny (default: the test fixtures), or a real model's with random "
                "weights and the tiny tokenizer padded to its vocabulary, tied as the model is: smollm2 (SmolLM2-135M), "
                "1b (Llama-3.2-1B: 1.24 G parameters, 2.5 GB in bf16); with --arch lfm2: lfm2-350m (LFM2-350M, "
                "attention at layers 2 5 8 10 12 14); with --arch mamba2: mamba2-130m (state 128, heads of 64, inner "
                "1536); with --arch gemma3: gemma3-270m (Gemma-3-270M: heads of 256, window 512)", &cfg.shape),
        CLI_U64(0, "--seed", "S", "seed of the weights (default 42)", &cfg.seed),
        CLI_FLAG(0, "--twin-f32", "the same values (rounded to TYPE) stored as f32: the twin of a half fixture",
                 &cfg.twin_f32),
        CLI_FLAG(0, "--tied", "no output.weight: the head reuses token_embd.weight", &cfg.tied),
        CLI_I64(0, "--groups", "G", "mamba2: G groups of heads sharing B and C (default 1; G divides the heads)", 1,
                INT32_MAX, &groups),
        CLI_FLAG(0, "--dry-run", "print what `info` would show for the file, without making or writing it", &dry),
    };
    const cli_command c = {"make-tiny", "--arch ARCH --type TYPE -o OUT.gguf [options]", opts, CLI_N(opts), NULL, 0,
                           NULL, NULL};
    int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    if (!cfg.arch || !out) {
        fprintf(stderr, "retrograd make-tiny: %s is required\n", !cfg.arch ? "--arch" : "-o");
        cli_args_help(&c, stderr);
        return 2;
    }
    cfg.ssm_groups = groups;
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
