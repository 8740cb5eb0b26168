// cmd_merge.c - `retrograd merge -m BASE.gguf --lora A.gguf[:SCALE] -o OUT.gguf [--type TYPE] [--check DATA]`: a
// LoRA adapter folded into its base model (W += SCALE * alpha/rank * B·A per adapted tensor, computed in F32 and
// encoded once, in the base's own float type or in a type or mixture of `retrograd quantize`); how much of B·A the
// file keeps, with a warning when most of it is lost; optionally the loss of base + adapter and of the merged file
// on a data file. The output is written atomically.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/lora.h"
#include "model/quantize_rules.h"
#include "train/config.h"
#include "train/eval.h"

// After the options in --help: the types --type takes, and what merge keeps of an adapter.
static void epilog(FILE *f) {
    fprintf(f, "\n--type takes any name `retrograd quantize` takes, with its per-tensor rules (norms stay F32; the\n"
               "mixtures' attn_v/ffn_down/head rules):\n ");
    for (const rg_quant_target *t = rg_quant_targets; t->name; t++) fprintf(f, " %s%s", t->name, t->mixture ? "*" : "");
    fprintf(f,
            "\n"
            "Default: the base's own types for an F32/F16/BF16 base, %s for a quantized one. A quantized\n"
            "base's values sit on its type's grid and most of a LoRA change is smaller than half a step: stored\n"
            "back in the same type (or one that holds the same grid, as Q4_K holds Q4_1's) it rounds back to the\n"
            "same points. The demo's adapter on SmolLM2 Q4_1 (docs/MODELS.md): merged into Q4_1 it keeps 8.8%% of B·A and\n"
            "0 of 3 answers; into Q8_0 100.0%% in every tensor, 3 of 3 answers, a loss 0.0002 from base + adapter's,\n"
            "138 MiB (the base is 94). %s keeps it (99.5%% in the worst tensor; 98.9%% into a Q8_0 base) and adds\n"
            "almost no rounding noise; Q5_0 (100 MiB) and Q4_K_M (101 MiB) kept the answers too, but round the\n"
            "base a second time at 4-5 bits, and Q4_K_M's Q4_K tensors lose the change (5.7%% kept).\n"
            "\n"
            "Each adapted weight is read into F32, gets SCALE * alpha/rank * B·A (summed in double) and is encoded\n"
            "once (F16/BF16 rounded to nearest even, quantized types with the reference quantizer, no imatrix);\n"
            "tensors whose type stays are copied byte for byte, the others converted through F32. For each adapted\n"
            "tensor merge reports how much of B·A the file keeps: kept = <M-W, B·A>/|B·A|^2 (W the base, M the\n"
            "merged values, both read back) and |M-W|/|B·A|; below 50%% kept overall it warns.\n",
            RG_LORA_MERGE_QUANTIZED_DEFAULT, RG_LORA_MERGE_QUANTIZED_DEFAULT);
}

// --lora: one adapter (a second is refused: merge the result again for another).
static bool one_lora(const char *cmd, const char *opt, const char *value, void *dst) {
    const char **lora = dst;
    if (*lora) {
        fprintf(stderr, "retrograd %s: one %s at a time (merge the result again for another)\n", cmd, opt);
        return false;
    }
    *lora = value;
    return true;
}

// --check: the loss of one model (+ adapter) on the data, or a line naming what failed.
static bool check_loss(const char *C, const char *model, const char *adapter, float scale, const char *data,
                       const rg_train_spec *spec, double *loss, int64_t *n) {
    rg_error err = {0};
    if (rg_eval_file(model, adapter, scale, data, spec, loss, n, &err)) {
        fprintf(stderr, "retrograd %s: --check %s: %s\n", C, data, err.msg);
        return false;
    }
    return true;
}

int cmd_merge(int argc, char **argv) {
    const char *C = "merge";
    const char *base = NULL, *lora = NULL, *out = NULL, *type = NULL, *check = NULL, *config = NULL;
    int64_t n_threads = 0;
    bool quiet = false;
    const cli_opt table[] = {
        CLI_STR('m', "--model", "BASE.gguf", "the base model (any supported architecture, any tensor type)", &base),
        CLI_CALL(0, "--lora", "A.gguf[:SCALE]", "a LoRA adapter in llama.cpp's format (adapter.gguf); SCALE multiplies "
                 "alpha/rank as llama.cpp's --lora-scaled does (default 1)", one_lora, &lora),
        CLI_STR('o', "--output", "OUT.gguf", "the merged model: the base's keys and tensors, in its order", &out),
        CLI_STR(0, "--type", "TYPE", "the output's types (below; default: the base's own for a float base, "
                RG_LORA_MERGE_QUANTIZED_DEFAULT " for a quantized one)", &type),
        CLI_STR(0, "--check", "DATA", "after merging, the loss (nats per target token) on DATA (.txt or .jsonl, read as "
                "`retrograd train` reads it) of the base, the base + adapter, and the merged file", &check),
        CLI_STR(0, "--config", "FILE.yaml", "for --check: the training config (training.ctx, data.*) to read DATA with",
                &config),
        CLI_I64('t', "--threads", "THREADS", "CPU threads (default: all cores)", 1, 512, &n_threads),
        CLI_FLAG(0, "--quiet", "no line per tensor", &quiet),
    };
    const cli_command c = {"merge", "-m BASE.gguf --lora ADAPTER.gguf[:SCALE] -o OUT.gguf [options]", table, CLI_N(table),
                           NULL, 0, NULL, epilog};
    int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    if (!base || !lora || !out) {
        fprintf(stderr, "retrograd %s: -m BASE.gguf, --lora ADAPTER.gguf and -o OUT.gguf are required\n", C);
        cli_args_help(&c, stderr);
        return 2;
    }
    if (config && !check) {
        fprintf(stderr, "retrograd %s: --config is for --check DATA (how to read the data); give --check too\n", C);
        return 2;
    }
    rg_error err = {0};
    const rg_quant_target *target = NULL;
    if (type && rg_quant_target_lookup(type, &target, &err)) {
        fprintf(stderr, "retrograd %s: --type: %s\n", C, err.msg);
        return 2;
    }
    char path[4096];
    float scale = 1.0f;
    if (!rg_lora_parse_spec(lora, path, sizeof path, &scale)) {
        fprintf(stderr, "retrograd %s: --lora '%s' is not ADAPTER.gguf[:SCALE]\n", C, lora);
        return 2;
    }
    // The check's settings are read before the merge, so a bad config costs no merge.
    rg_train_config cfg;
    rg_train_config_defaults(&cfg);
    cfg.threads = n_threads;
    if (config && rg_train_config_load_yaml(&cfg, config, &err)) {
        fprintf(stderr, "retrograd %s: --config: %s\n", C, err.msg);
        return 2;
    }
    cfg.threads = n_threads;
    rg_train_spec spec;
    if (check && rg_train_config_validate(&cfg, &spec, &err)) {  // the edge: rg_eval_file trusts spec
        fprintf(stderr, "retrograd %s: --check %s: %s\n", C, check, err.msg);
        return 1;
    }
    // The base's loss first: a data file that cannot be read fails before the merge.
    double l_base = NAN, l_lora = NAN, l_merged = NAN;
    int64_t n_targets = 0;
    if (check && !check_loss(C, base, NULL, 0.0f, check, &spec, &l_base, &n_targets)) return 1;
    rg_lora_merge_opts opts = {.n_threads = (int)n_threads, .progress = quiet ? NULL : stderr, .type = type};
    rg_lora_merge_summary sum;
    double t0 = cli_now();
    if (rg_lora_merge_ex(base, path, scale, out, &opts, &sum, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        return 1;
    }
    printf("wrote %s: %llu tensors, %llu merged (rank %lld, alpha %g, scale %g x alpha/rank = %g), %llu converted, "
           "as %s, %.2f MiB (base %.2f MiB, adapter %.2f MiB), %.2f s\n",
           out, (unsigned long long)sum.n_tensors, (unsigned long long)sum.n_merged, (long long)sum.rank,
           (double)sum.alpha, (double)scale, (double)sum.scale, (unsigned long long)sum.n_converted,
           sum.type[0] ? sum.type : "the base's types", sum.bytes_out / 1048576.0, sum.bytes_base / 1048576.0,
           sum.bytes_adapter / 1048576.0, cli_now() - t0);
    printf("adapter kept: %.1f%% of B·A over %llu tensors (|merged-base|/|B·A| %.3f); least %.1f%% in %s; "
           "%llu tensor%s below 50%%\n",
           100.0 * sum.kept, (unsigned long long)sum.n_merged, sum.rel_norm, 100.0 * sum.min_kept, sum.min_kept_tensor,
           (unsigned long long)sum.n_lost, sum.n_lost == 1 ? "" : "s");
    if (sum.kept < 0.5)
        fprintf(stderr,
                "retrograd %s: warning: %s keeps only %.1f%% of the adapter's change: the base's values round back to "
                "their own grid points and the fine-tune is mostly lost; merge with --type %s (or F16), or use the "
                "adapter as it is (generate --lora %s)\n",
                C, out, 100.0 * sum.kept, RG_LORA_MERGE_QUANTIZED_DEFAULT, lora);
    else if (sum.n_lost)
        fprintf(stderr, "retrograd %s: note: %llu of %llu adapted tensors keep less than half of their change (least: %s, "
                        "%.1f%%)\n",
                C, (unsigned long long)sum.n_lost, (unsigned long long)sum.n_merged, sum.min_kept_tensor,
                100.0 * sum.min_kept);
    if (!check) return 0;
    if (!check_loss(C, base, path, scale, check, &spec, &l_lora, &n_targets) ||
        !check_loss(C, out, NULL, 0.0f, check, &spec, &l_merged, &n_targets))
        return 1;
    printf("check on %s (%lld target tokens, ctx %lld): loss base %.4f, base + adapter %.4f, merged %.4f "
           "(%+.4f against base + adapter)\n",
           check, (long long)n_targets, (long long)cfg.ctx, l_base, l_lora, l_merged, l_merged - l_lora);
    return 0;
}
