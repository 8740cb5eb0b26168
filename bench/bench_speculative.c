// bench_speculative.c - generation tokens/s with and without speculative decoding
// (infer/speculative.h) on a task that repeats its input: SmolLM2-135M-Instruct asked to
// repeat a paragraph word for word, greedy, up to the end-of-generation token or RG_BENCH_TG
// tokens (as `generate` stops). Rows: no draft, --draft ngram (prompt lookup) at draft-max
// RG_BENCH_DRAFT_MAX and at twice that, and a draft model (the Q4_0 copy drafting for the
// target); each with its acceptance rate, the median and the worst of interleaved rounds, the
// ratio to no draft, and whether its greedy tokens are those of no draft (the verification
// batches are exact, rg_session_eval_exact: they must be).
//
//   RG_SMOLLM2=path/to/SmolLM2-135M-Instruct.Q4_1.gguf ./build/bench_speculative
//
// The target is the F16 file made from the Q4_1 one (retrograd quantize --allow-requantize), the
// draft model the Q4_0 one. Without RG_SMOLLM2 the tiny qwen2 fixture (F32, its Q4_0 copy) stands in:
// a smoke run, not a measurement (its text is gibberish).
//
// Optional environment:
//   RG_BENCH_TARGET=F32       the target's type (default F16)
//   RG_BENCH_CACHE=/tmp/dir   keep the made files there and reuse them (smollm2-f16.gguf, smollm2-q4_0.gguf)
//   RG_BENCH_REPS=5           interleaved rounds (default 3)
//   RG_BENCH_TG=128           the most tokens generated per run (default 128)
//   RG_BENCH_DRAFT_MAX=8      drafts per verification (default 8; the second ngram row twice that)
//   RG_BENCH_THREADS=1        threads (default: all cores)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "infer/session.h"
#include "infer/speculative.h"
#include "model/quantize.h"
#include "model/tiny.h"
#include "text/chat.h"
#include "text/tokenizer.h"

enum { MODE_PLAIN, MODE_NGRAM, MODE_NGRAM2, MODE_MODEL, N_MODES };
static const char *mode_names[N_MODES] = {"no draft", "--draft ngram", "--draft ngram (2x max)", "--draft-model q4_0"};

typedef struct bench {
    rg_model *target, *draft;
    rg_session *ts, *ds;
    rg_tokenizer *tok;  // the target's: its end-of-generation tokens stop a run
    int32_t *prompt;
    size_t n_prompt;
    int tg, draft_max;
} bench;

// One greedy run of up to b->tg tokens after the prompt (not timed), stopping after an end-of-generation token;
// the generation's seconds, its tokens in out (*n_out of them) and the drafter's stats.
static rg_status run(bench *b, int mode, int32_t *out, int *n_out, double *secs, rg_spec_stats *stats, rg_error *err) {
    const int64_t V = b->target->hp.n_vocab;
    const int draft_max = mode == MODE_NGRAM2 ? 2 * b->draft_max : b->draft_max;
    float *logits = malloc(sizeof(float) * V);
    int32_t *q = malloc(sizeof(int32_t) * (size_t)(draft_max + 1));
    rg_sampler *smp = NULL;
    rg_spec *sp = NULL;
    rg_sampler_params p = rg_sampler_defaults();
    p.temp = 0;
    rg_status st = rg_session_rewind(b->ts, 0, err);
    if (!st && b->ds) st = rg_session_rewind(b->ds, 0, err);
    if (!st) st = rg_sampler_create(&smp, &p, (int32_t)V, err);
    rg_spec_opts o = {.kind = mode == MODE_MODEL ? RG_DRAFT_MODEL : RG_DRAFT_NGRAM, .draft_max = draft_max,
                      .draft = b->ds};
    if (!st && mode != MODE_PLAIN) st = rg_spec_create(&sp, b->ts, &o, err);
    for (size_t i = 0; !st && i < b->n_prompt; i++) rg_sampler_accept(smp, b->prompt[i]);
    if (!st) st = rg_session_eval(b->ts, b->prompt, (int64_t)b->n_prompt, logits, 0, err);
    if (!st && sp) st = rg_spec_push(sp, b->prompt, (int64_t)b->n_prompt, err);
    if (!st && mode == MODE_MODEL) st = rg_session_eval(b->ds, b->prompt, (int64_t)b->n_prompt, NULL, 0, err);
    double t0 = bench_now();
    int64_t n_q = 0, i_q = 0;
    *n_out = 0;
    for (int i = 0; !st && i < b->tg; i++) {
        bool in_history = false;
        if (i == 0) out[i] = rg_sampler_sample(smp, logits);
        else if (sp) out[i] = q[i_q++], in_history = i_q < n_q;
        else out[i] = rg_sampler_sample(smp, logits);
        if (!in_history) rg_sampler_accept(smp, out[i]);
        *n_out = i + 1;
        if (i + 1 == b->tg || rg_token_is_eog(b->tok, out[i])) break;
        if (!sp) st = rg_session_eval(b->ts, &out[i], 1, logits, 0, err);
        else if (i_q == n_q) st = rg_spec_step(sp, out[i], smp, b->tg - i - 2, q, &n_q, err), i_q = 0;
    }
    *secs = bench_now() - t0;
    *stats = sp ? rg_spec_get_stats(sp) : (rg_spec_stats){0};
    rg_spec_free(sp);
    rg_sampler_free(smp);
    free(logits), free(q);
    return st;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// path: src quantized to type (allow_requantize), made once into RG_BENCH_CACHE when set.
static rg_status make_type(const char *src, const char *type, const char *cache, const char *stem, char *path,
                           rg_error *err) {
    if (cache) snprintf(path, 512, "%s/%s-%s.gguf", cache, stem, type);
    else snprintf(path, 512, "/tmp/bench_spec_%d_%s.gguf", (int)getpid(), type);
    if (cache && access(path, R_OK) == 0) return RG_OK;
    rg_quantize_opts qo = {.n_threads = 0, .pure = false, .allow_requantize = true};
    rg_quantize_summary qs;
    return rg_quantize_file(src, path, type, &qo, &qs, err);
}

// The prompt: the paragraph with an instruction to repeat it, through the model's chat template when it has one.
static rg_status make_prompt(bench *b, rg_error *err) {
    rg_tokenizer *tok = NULL;
    rg_status st = rg_tokenizer_load(&tok, b->target->file, err);
    if (st) return st;
    char text[2048];
    snprintf(text, sizeof text, "Repeat the following text exactly, word for word:\n\n%s", bench_paragraph());
    rg_chat_template tmpl;
    rg_chat_rendered r = {0};
    const char *in = text;
    size_t len = strlen(text);
    if (rg_chat_template_from_tokenizer(&tmpl, tok, err) == RG_OK) {
        rg_chat_message msg = {.role = "user", .role_len = 4, .content = text, .content_len = len};
        rg_chat_options co = {.add_generation_prompt = true};
        st = rg_chat_render(&tmpl, &msg, 1, &co, &r, err);
        rg_chat_template_free(&tmpl);
        if (!st) in = r.text, len = r.len;
    }
    if (!st) st = rg_tokenize_alloc(tok, in, len, true, true, &b->prompt, &b->n_prompt, err);
    rg_chat_rendered_free(&r);
    b->tok = tok;
    return st;
}

int main(void) {
    rg_error err = {0};
    bench b = {.tg = bench_env_int("RG_BENCH_TG", 128), .draft_max = bench_env_int("RG_BENCH_DRAFT_MAX", 8)};
    const int reps = bench_env_int("RG_BENCH_REPS", 3) > 0 ? bench_env_int("RG_BENCH_REPS", 3) : 1;
    const char *smol = getenv("RG_SMOLLM2"), *cache = getenv("RG_BENCH_CACHE");
    const char *ttype = getenv("RG_BENCH_TARGET") ? getenv("RG_BENCH_TARGET") : "F16";
    char tpath[512], dpath[512], tiny[512] = "";
    rg_status st;
    if (smol && *smol) {
        st = make_type(smol, ttype, cache, "smollm2", tpath, &err);
        if (!st) st = make_type(smol, "Q4_0", cache, "smollm2", dpath, &err);
    } else {
        printf("RG_SMOLLM2 not set: the tiny qwen2 fixture (F32, its Q4_0 copy), a smoke run, not a measurement\n");
        snprintf(tiny, sizeof tiny, "/tmp/bench_spec_%d_tiny.gguf", (int)getpid());
        rg_tiny_config cfg = {.arch = "qwen2", .type = RG_TYPE_F32, .seed = 5};
        st = rg_tiny_write(&cfg, tiny, &err);
        snprintf(tpath, sizeof tpath, "%s", tiny);
        if (!st) st = make_type(tiny, "Q4_0", NULL, "tiny", dpath, &err);
    }
    rg_session_opts so = {.n_ctx = 1024, .n_threads = bench_env_int("RG_BENCH_THREADS", 0)};
    if (!st) st = rg_model_load(&b.target, tpath, &err);
    if (!st) st = rg_model_load(&b.draft, dpath, &err);
    if (!st) st = rg_session_create(&b.ts, b.target, &so, &err);
    if (!st) st = rg_session_create(&b.ds, b.draft, &so, &err);
    if (!st) st = make_prompt(&b, &err);
    if (st) {
        fprintf(stderr, "bench_speculative: %s\n", err.msg);
        return 1;
    }
    printf("target %s, draft %s; prompt %zu tokens, up to %d generated greedily (to the end of generation), "
           "draft-max %d, %d interleaved rounds\n", tpath, dpath, b.n_prompt, b.tg, b.draft_max, reps);
    double *tps = calloc((size_t)(N_MODES * reps), sizeof *tps);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(N_MODES * b.tg));
    rg_spec_stats stats[N_MODES] = {{0}};
    bool same[N_MODES] = {true, true, true, true};
    int n_gen[N_MODES] = {0};
    for (int r = 0; r < reps && !st; r++)
        for (int mode = 0; mode < N_MODES && !st; mode++) {
            int32_t *out = toks + (size_t)mode * b.tg;
            double secs;
            st = run(&b, mode, out, &n_gen[mode], &secs, &stats[mode], &err);
            tps[mode * reps + r] = (n_gen[mode] - 1) / secs;  // the first token comes from the prompt's logits
            if (mode && (n_gen[mode] != n_gen[0] || memcmp(out, toks, sizeof(int32_t) * (size_t)n_gen[0]) != 0))
                same[mode] = false;
        }
    if (st) {
        fprintf(stderr, "bench_speculative: %s\n", err.msg);
        return 1;
    }
    // per round: each mode's speed over no draft's in the same round (the machine drifts between rounds)
    double *ratio = calloc((size_t)(N_MODES * reps), sizeof *ratio);
    for (int mode = 0; mode < N_MODES; mode++)
        for (int r = 0; r < reps; r++) ratio[mode * reps + r] = tps[mode * reps + r] / tps[r];
    for (int mode = 0; mode < N_MODES; mode++) qsort(ratio + mode * reps, (size_t)reps, sizeof *ratio, cmp_double);
    double plain_med = 0;
    printf("%d tokens generated without speculation\n", n_gen[0]);
    printf("%-24s %12s %12s %8s %15s %12s %10s\n", "mode", "median tok/s", "worst tok/s", "ratio", "rounds' ratios",
           "accepted", "greedy");
    for (int mode = 0; mode < N_MODES; mode++) {
        double *v = tps + mode * reps;
        qsort(v, (size_t)reps, sizeof *v, cmp_double);
        double med = reps % 2 ? v[reps / 2] : 0.5 * (v[reps / 2 - 1] + v[reps / 2]);
        if (mode == MODE_PLAIN) plain_med = med;
        char acc[32] = "-";
        if (mode != MODE_PLAIN && stats[mode].n_drafted)
            snprintf(acc, sizeof acc, "%.1f%%", 100.0 * (double)stats[mode].n_accepted / (double)stats[mode].n_drafted);
        char rr[32];
        snprintf(rr, sizeof rr, "%.2f-%.2fx", ratio[mode * reps], ratio[mode * reps + reps - 1]);
        printf("%-24s %12.1f %12.1f %7.2fx %15s %12s %10s\n", mode_names[mode], med, v[0], med / plain_med, rr, acc,
               mode == MODE_PLAIN ? "-" : same[mode] ? "identical" : "DIFFERS");
    }
    rg_session_free(b.ts), rg_session_free(b.ds);
    rg_model_free(b.target), rg_model_free(b.draft);
    rg_tokenizer_free(b.tok);
    free(b.prompt), free(tps), free(toks), free(ratio);
    if (tiny[0]) unlink(tiny);
    if (!cache) {
        if (smol && *smol) unlink(tpath);
        unlink(dpath);
    }
    return 0;
}
