// cmd_merge.c - `retrograd merge -m BASE.gguf --lora A.gguf[:SCALE] -o OUT.gguf`: a LoRA
// adapter folded into its base model (W += SCALE * alpha/rank * B·A per adapted tensor, in W's
// own type); every other tensor and key copied byte for byte; the output written atomically.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/lora.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: retrograd merge -m BASE.gguf --lora ADAPTER.gguf[:SCALE] -o OUT.gguf [options]\n"
            "  -m BASE.gguf          the base model (llama, qwen2, qwen3; any tensor type)\n"
            "  --lora A.gguf[:SCALE] a LoRA adapter in llama.cpp's format (adapter.gguf); SCALE multiplies\n"
            "                        alpha/rank as llama.cpp's --lora-scaled does (default 1)\n"
            "  -o OUT.gguf           the merged model: same keys, tensors, order and types as BASE\n"
            "  -t THREADS            CPU threads (default: all cores)\n"
            "  --quiet               no line per tensor\n"
            "  Each adapted weight is dequantized to F32, gets SCALE * alpha/rank * B·A (summed in double),\n"
            "  and is stored back in its own type (F16/BF16 rounded to nearest even, quantized types\n"
            "  re-quantized).\n");
}

int cmd_merge(int argc, char **argv) {
    const char *C = "merge";
    const char *base = NULL, *lora = NULL, *out = NULL;
    int64_t n_threads = 0;
    bool quiet = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (strcmp(a, "-m") && strcmp(a, "--lora") && strcmp(a, "-o") && strcmp(a, "-t") && strcmp(a, "--threads")) {
            fprintf(stderr, "retrograd %s: unknown argument '%s'\n", C, a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "retrograd %s: %s needs a value\n", C, a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m")) base = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--lora")) {
            if (lora) {
                fprintf(stderr, "retrograd %s: one --lora at a time (merge the result again for another)\n", C);
                return 2;
            }
            lora = v;
        } else if (!cli_parse_i64(C, a, v, 1, 512, &n_threads)) return 2;
    }
    if (!base || !lora || !out) {
        fprintf(stderr, "retrograd %s: -m BASE.gguf, --lora ADAPTER.gguf and -o OUT.gguf are required\n", C);
        usage(stderr);
        return 2;
    }
    char path[4096];
    float scale = 1.0f;
    if (!rg_lora_parse_spec(lora, path, sizeof path, &scale)) {
        fprintf(stderr, "retrograd %s: --lora '%s' is not ADAPTER.gguf[:SCALE]\n", C, lora);
        return 2;
    }
    rg_lora_merge_opts opts = {.n_threads = (int)n_threads, .progress = quiet ? NULL : stderr};
    rg_lora_merge_summary sum;
    rg_error err = {0};
    double t0 = cli_now();
    if (rg_lora_merge_ex(base, path, scale, out, &opts, &sum, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        return 1;
    }
    printf("wrote %s: %llu tensors, %llu merged (rank %lld, alpha %g, scale %g x alpha/rank = %g), %.2f MiB "
           "(adapter %.2f MiB), %.2f s\n",
           out, (unsigned long long)sum.n_tensors, (unsigned long long)sum.n_merged, (long long)sum.rank,
           (double)sum.alpha, (double)scale, (double)sum.scale, sum.bytes_out / 1048576.0, sum.bytes_adapter / 1048576.0,
           cli_now() - t0);
    return 0;
}
