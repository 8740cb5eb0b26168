// bench_generate.c - prompt and generation tokens/s for SmolLM2-135M in F32,
// F16, BF16, Q8_0, Q4_0, Q4_1 and Q4_K_M, on all cores, beside llama.cpp's
// numbers on this machine class (2 threads, 128-token prompt / 32 generated).
//
//   RG_SMOLLM2=path/to/SmolLM2-135M-Instruct.Q4_1.gguf ./build/bench_generate
//
// The other types are made from the Q4_1 file with `retrograd quantize
// --allow-requantize` (same shapes; the weights are the Q4_1 values), so the
// speeds are what each storage type costs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu.h"
#include "bench_util.h"
#include "infer/session.h"
#include "model/quantize.h"

static const struct {
    const char *target;  // retrograd quantize name, NULL: the file as shipped
    const char *label;
    double llama_pp, llama_tg;  // llama.cpp tokens/s, 2 threads (the bar)
} types[] = {
    {"F32", "f32", 465, 47},   {"F16", "f16", 549, 71},     {"BF16", "bf16", 0, 0}, {"Q8_0", "q8_0", 463, 133},
    {"Q4_0", "q4_0", 572, 183}, {NULL, "q4_1 (shipped)", 0, 0}, {"Q4_K_M", "q4_k_m", 409, 135},
};

int main(void) {
    const char *src = getenv("RG_SMOLLM2");
    if (!src || access(src, R_OK)) {
        fprintf(stderr, "bench_generate: set RG_SMOLLM2 to SmolLM2-135M-Instruct.Q4_1.gguf (scripts/smollm2.sh prints it)\n");
        return 2;
    }
    enum { PP = 128, TG = 32 };
    int threads = rg_cpu_count();
    printf("bench_generate: SmolLM2-135M, prompt %d tokens, %d generated (greedy), %d threads\n", PP, TG, threads);
    printf("%-16s %12s %12s %14s %14s\n", "type", "prompt tok/s", "gen tok/s", "llama.cpp pp", "llama.cpp tg");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char path[] = "/tmp/rg_bench_genXXXXXX";
        const char *file = src;
        rg_error err = {0};
        if (types[i].target) {
            close(mkstemp(path));
            rg_quantize_opts qo = {.allow_requantize = true};
            rg_quantize_summary sum;
            if (rg_quantize_file(src, path, types[i].target, &qo, &sum, &err)) {
                printf("%-16s %s\n", types[i].label, err.msg);
                continue;
            }
            file = path;
        }
        rg_model *m;
        rg_session *s;
        rg_session_opts so = {.n_ctx = PP + TG, .n_threads = threads, .n_batch = PP};
        if (rg_model_load(&m, file, &err) || rg_session_create(&s, m, &so, &err)) {
            printf("%-16s %s\n", types[i].label, err.msg);
            continue;
        }
        int64_t V = m->hp.n_vocab;
        int32_t prompt[PP];
        for (int k = 0; k < PP; k++) prompt[k] = (int32_t)((k * 7919 + 13) % (V - 100)) + 50;
        float *logits = malloc(sizeof(float) * (size_t)V);
        double best_pp = 1e30, best_tg = 1e30;
        for (int rep = 0; rep < 2; rep++) {
            rg_session_truncate(s, 0);
            double t0 = bench_now();
            rg_session_eval(s, prompt, PP, logits, 0, &err);
            double t1 = bench_now();
            for (int k = 0; k < TG; k++) {
                int32_t best = 0;
                for (int64_t v = 1; v < V; v++)
                    if (logits[v] > logits[best]) best = (int32_t)v;
                rg_session_eval(s, &best, 1, logits, 0, &err);
            }
            double t2 = bench_now();
            if (t1 - t0 < best_pp) best_pp = t1 - t0;
            if (t2 - t1 < best_tg) best_tg = t2 - t1;
        }
        char lp[32] = "-", lt[32] = "-";
        if (types[i].llama_pp > 0) snprintf(lp, sizeof lp, "%.0f (%.2fx)", types[i].llama_pp, PP / best_pp / types[i].llama_pp);
        if (types[i].llama_tg > 0) snprintf(lt, sizeof lt, "%.0f (%.2fx)", types[i].llama_tg, TG / best_tg / types[i].llama_tg);
        printf("%-16s %12.1f %12.1f %14s %14s\n", types[i].label, PP / best_pp, TG / best_tg, lp, lt);
        fflush(stdout);
        free(logits);
        rg_session_free(s);
        rg_model_free(m);
        if (types[i].target) unlink(path);
    }
    printf("(ratios in parentheses: ours / llama.cpp)\n");
    return 0;
}
