// cmd_quantize.c - `retrograd quantize IN.gguf OUT.gguf TYPE`.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/quantize.h"
#include "model/quantize_rules.h"

static void usage(FILE *f) {
    fprintf(f, "usage: retrograd quantize IN.gguf OUT.gguf TYPE [--threads N] [--pure] [--allow-requantize] [--quiet]\n"
               "  TYPE is a single type or a mixture:\n   ");
    for (const rg_quant_target *t = rg_quant_targets; t->name; t++)
        fprintf(f, " %s%s", t->name, t->mixture ? "*" : "");
    fprintf(f, "\n  (* mixtures: some attention and feed-forward tensors get a higher-precision type, as llama-quantize does)\n"
               "  Norms, biases, 1-D tensors and conv kernels are copied unchanged. The output is written atomically.\n"
               "  A quantized input converts to F32 as it is (dequantizing is exact); to F16, BF16 or another\n"
               "  quantized type it is rounded a second time, which --allow-requantize accepts.\n");
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {0};
    int n_pos = 0;
    rg_quantize_opts opts = {.n_threads = 0, .progress = stderr};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--pure")) opts.pure = true;
        else if (!strcmp(a, "--allow-requantize")) opts.allow_requantize = true;
        else if (!strcmp(a, "--quiet")) opts.progress = NULL;
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            char *end;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || v < 1 || v > 512) {
                fprintf(stderr, "retrograd quantize: %s needs a thread count in 1..512\n", a);
                return 2;
            }
            opts.n_threads = (int)v;
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "retrograd quantize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (n_pos < 3) pos[n_pos++] = a;
        else {
            fprintf(stderr, "retrograd quantize: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (n_pos != 3) {
        usage(stderr);
        return 2;
    }
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
