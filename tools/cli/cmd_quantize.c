// cmd_quantize.c - `retrograd quantize IN.gguf OUT.gguf TYPE`.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/quantize.h"
#include "model/quantize_rules.h"

// After the options in --help: the types and what happens to each tensor.
static void epilog(FILE *f) {
    fprintf(f, "\nTYPE is a single type or a mixture:\n ");
    for (const rg_quant_target *t = rg_quant_targets; t->name; t++) fprintf(f, " %s%s", t->name, t->mixture ? "*" : "");
    fprintf(f, "\n(* mixtures: some attention and feed-forward tensors get a higher-precision type, as llama-quantize does)\n"
               "Norms, biases, 1-D tensors and conv kernels are copied unchanged. The output is written atomically.\n"
               "A quantized input converts to F32 as it is (dequantizing is exact); to F16, BF16 or another\n"
               "quantized type it is rounded a second time, which --allow-requantize accepts.\n");
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {0};
    int n_pos = 0;
    int64_t n_threads = 0;
    bool quiet = false;
    rg_quantize_opts opts = {.n_threads = 0, .progress = stderr};
    const cli_opt table[] = {
        CLI_I64('t', "--threads", "N", "CPU threads (default: all cores)", 1, 512, &n_threads),
        CLI_FLAG(0, "--pure", "no mixture rules: every quantizable tensor takes TYPE", &opts.pure),
        CLI_FLAG(0, "--allow-requantize", "accept a quantized input rounded a second time (to F16, BF16 or another "
                 "quantized type)", &opts.allow_requantize),
        CLI_FLAG(0, "--quiet", "no line per tensor", &quiet),
    };
    const cli_command c = {"quantize", "IN.gguf OUT.gguf TYPE [options]", table, CLI_N(table), pos, 3, &n_pos, epilog};
    int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    if (n_pos != 3) {
        fprintf(stderr, "retrograd quantize: IN.gguf, OUT.gguf and TYPE are required (%d given)\n", n_pos);
        cli_args_help(&c, stderr);
        return 2;
    }
    opts.n_threads = (int)n_threads;
    if (quiet) opts.progress = NULL;
    if (!rg_quant_target_find(pos[2])) {
        fprintf(stderr, "retrograd quantize: unknown type or mixture '%s'; valid:", pos[2]);
        for (const rg_quant_target *t = rg_quant_targets; t->name; t++) fprintf(stderr, " %s", t->name);
        fprintf(stderr, "\n");
        return 2;
    }
    rg_quantize_summary sum;
    rg_error err = {0};
    if (rg_quantize_file(pos[0], pos[1], pos[2], &opts, &sum, &err)) {
        fprintf(stderr, "retrograd quantize: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s: %llu tensors (%llu converted), %.2f MiB -> %.2f MiB (%.1f%%)\n", pos[1],
           (unsigned long long)sum.n_tensors, (unsigned long long)sum.n_quantized, sum.bytes_in / 1048576.0,
           sum.bytes_out / 1048576.0, sum.bytes_in ? 100.0 * sum.bytes_out / sum.bytes_in : 0.0);
    for (int t = 0; t < RG_TYPE_COUNT; t++)
        if (sum.count_by_type[t])
            printf("  %-8s %5llu tensors %10.2f MiB\n", rg_type_get((uint32_t)t)->name,
                   (unsigned long long)sum.count_by_type[t], sum.bytes_by_type[t] / 1048576.0);
    return 0;
}
