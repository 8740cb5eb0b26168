// lora_args.c - the repeatable `--lora A.gguf[:SCALE]` of generate and perplexity: parsed,
// loaded against the model, reported one line per adapter, and stacked into one adapter
// when there are several (model/lora_stack.h).
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "model/lora_stack.h"

bool cli_loras_add(const char *cmd, cli_loras *ls, const char *spec) {
    if (ls->n == CLI_MAX_LORAS) {
        fprintf(stderr, "retrograd %s: at most %d --lora adapters\n", cmd, CLI_MAX_LORAS);
        return false;
    }
    ls->spec[ls->n++] = spec;
    return true;
}

int cli_loras_load(const char *cmd, const cli_loras *ls, const rg_model *m, rg_lora **out, float *scale) {
    *out = NULL;
    *scale = 1.0f;
    if (ls->n == 0) return 0;
    rg_lora *loaded[CLI_MAX_LORAS] = {0};
    float scales[CLI_MAX_LORAS];
    rg_error err = {0};
    int rc = 0;
    for (int i = 0; i < ls->n && !rc; i++) {
        char path[4096];
        if (!rg_lora_parse_spec(ls->spec[i], path, sizeof path, &scales[i])) {
            fprintf(stderr, "retrograd %s: --lora '%s' is not ADAPTER.gguf[:SCALE]\n", cmd, ls->spec[i]);
            rc = 2;
        } else if (rg_lora_load(&loaded[i], path, m, &err)) {
            fprintf(stderr, "retrograd %s: %s\n", cmd, err.msg);
            rc = 1;
        } else {
            const rg_lora *l = loaded[i];
            int n_pairs = 0;
            for (int64_t p = 0; p < l->n_layer * RG_LORA_N_TARGETS; p++) n_pairs += l->pairs[p].a != NULL;
            fprintf(stderr, "retrograd %s: LoRA %s: %d tensor pairs, rank %lld, alpha %g, scale %g x alpha/rank = %g\n",
                    cmd, path, n_pairs, (long long)l->rank, (double)l->alpha, (double)scales[i],
                    (double)rg_lora_scale(l, scales[i]));
        }
    }
    if (!rc && ls->n == 1) {  // one adapter: used as it is (the graph's scale is its own)
        *out = loaded[0], *scale = scales[0];
        return 0;
    }
    if (!rc) {
        if (rg_lora_stack(out, loaded, scales, ls->n, &err)) {
            fprintf(stderr, "retrograd %s: %s\n", cmd, err.msg);
            rc = 1;
        } else {
            fprintf(stderr, "retrograd %s: %d adapters applied together (stacked rank %lld)\n", cmd, ls->n,
                    (long long)(*out)->rank);
        }
    }
    for (int i = 0; i < ls->n; i++) rg_lora_free(loaded[i]);
    return rc;
}
