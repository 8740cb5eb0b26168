// bench_seqs.c - several sequences decoding together (rg_session_eval_seqs: one graph, the weights read once
// for every sequence's next token, what a server's continuous batching runs each step) against the same
// sequences decoded one token at a time each (rg_session_eval_seq, each sequence's own single-token graph).
// SmolLM2-135M-Instruct, greedy, N sequences with different prompts (slices of one paragraph), RG_BENCH_TG
// tokens each after the prompt (not timed).
//
// Rows per N (1, 2, 4, 8): "one at a time"; "batched exact" (exact = true: every token the bits of a
// single-token step, so each sequence's greedy tokens must be those of one at a time); "batched" (the prompt
// paths over the batch: other bits, the tokens compared and counted). Tokens/s summed over the sequences, the
// median and the range of interleaved rounds, the ratio to one at a time in the same round.
//
//   RG_SMOLLM2=path/to/SmolLM2-135M-Instruct.Q4_1.gguf ./build/bench_seqs
//
// Optional environment:
//   RG_BENCH_TYPE=F16        the weights' type, made from the file (retrograd quantize --allow-requantize;
//                            default: the file as it is)
//   RG_BENCH_CACHE=/tmp/dir  keep the made file there and reuse it (smollm2-TYPE.gguf)
//   RG_BENCH_REPS=3          interleaved rounds (default 3)
//   RG_BENCH_TG=32           tokens generated per sequence (default 32)
//   RG_BENCH_THREADS=2       threads (default: all cores)
// Without RG_SMOLLM2 the tiny llama fixture stands in: a smoke run, not a measurement.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "bench_util.h"
#include "infer/session.h"
#include "model/quantize.h"
#include "model/tiny.h"
#include "text/tokenizer.h"

enum { MAX_SEQ = 8, PROMPT = 24, N_ROWS = 3 };
static const int seq_counts[] = {1, 2, 4, 8};
static const char *row_names[N_ROWS] = {"one at a time", "batched exact", "batched"};

static int32_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// One run of row `row` with n sequences: each sequence rewound to 0 and fed its prompt (not timed), then tg
// greedy tokens each; the timed seconds, the tokens into out [n][tg].
static rg_status run(rg_session *s, const int32_t *text, int n, int row, int tg, int32_t *out, double *secs,
                     rg_error *err) {
    const int64_t V = rg_session_model(s)->hp.n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)(V * MAX_SEQ));
    int32_t next[MAX_SEQ];
    rg_status st = logits ? RG_OK : RG_ERR_NOMEM;
    for (int k = 0; !st && k < n; k++) {
        st = rg_session_rewind_seq(s, k, 0, err);
        if (!st) st = rg_session_eval_seq(s, k, text + 7 * k, PROMPT, logits, 0, err);
        next[k] = argmax(logits, V);
    }
    const double t0 = bench_now();
    for (int i = 0; !st && i < tg; i++) {
        for (int k = 0; k < n; k++) out[k * tg + i] = next[k];
        if (row == 0) {
            for (int k = 0; !st && k < n; k++) {
                st = rg_session_eval_seq(s, k, &next[k], 1, logits + (size_t)k * V, 0, err);
            }
        } else {
            rg_seq_tokens b[MAX_SEQ];
            for (int k = 0; k < n; k++) b[k] = (rg_seq_tokens){k, &next[k], 1};
            st = rg_session_eval_seqs(s, b, n, logits, 1, row == 1, err);
        }
        for (int k = 0; !st && k < n; k++) next[k] = argmax(logits + (size_t)k * V, V);
    }
    *secs = bench_now() - t0;
    free(logits);
    return st;
}

int main(void) {
    rg_error err = {0};
    const int reps = bench_env_int("RG_BENCH_REPS", 3) > 0 ? bench_env_int("RG_BENCH_REPS", 3) : 1;
    const int tg = bench_env_int("RG_BENCH_TG", 32) > 0 ? bench_env_int("RG_BENCH_TG", 32) : 1;
    const char *smol = getenv("RG_SMOLLM2"), *type = getenv("RG_BENCH_TYPE"), *cache = getenv("RG_BENCH_CACHE");
    char path[512], tiny[512] = "";
    rg_status st = RG_OK;
    if (smol && *smol && type && *type) {
        if (cache) snprintf(path, sizeof path, "%s/smollm2-%s.gguf", cache, type);
        else snprintf(path, sizeof path, "/tmp/bench_seqs_%d_%s.gguf", (int)getpid(), type);
        if (!cache || access(path, R_OK) != 0) {
            rg_quantize_opts qo = {.n_threads = 0, .pure = false, .allow_requantize = true};
            rg_quantize_summary qs;
            st = rg_quantize_file(smol, path, type, &qo, &qs, &err);
        }
    } else if (smol && *smol) {
        snprintf(path, sizeof path, "%s", smol);
    } else {
        printf("RG_SMOLLM2 not set: the tiny llama fixture (F32), a smoke run, not a measurement\n");
        snprintf(tiny, sizeof tiny, "/tmp/bench_seqs_%d_tiny.gguf", (int)getpid());
        rg_tiny_config cfg = {.arch = "llama", .type = RG_TYPE_F32, .seed = 5};
        st = rg_tiny_write(&cfg, tiny, &err);
        snprintf(path, sizeof path, "%s", tiny);
    }
    rg_model *m = NULL;
    rg_session *s = NULL;
    rg_tokenizer *tok = NULL;
    int32_t *text = NULL;
    size_t n_text = 0;
    rg_session_opts so = {.n_ctx = 256, .n_threads = bench_env_int("RG_BENCH_THREADS", 0), .n_seq = MAX_SEQ};
    if (!st) st = rg_model_load(&m, path, &err);
    if (!st) st = rg_session_create(&s, m, &so, &err);
    if (!st && smol && *smol) {
        st = rg_tokenizer_load(&tok, m->file, &err);
        const char *para = bench_paragraph();
        if (!st) st = rg_tokenize_alloc(tok, para, strlen(para), true, false, &text, &n_text, &err);
    } else if (!st) {  // the fixture's ids, not text
        text = malloc(sizeof(int32_t) * 128);
        n_text = 128;
        for (size_t i = 0; text && i < n_text; i++) text[i] = (int32_t)((i * 37 + 11) % (size_t)m->hp.n_vocab);
    }
    if (!st && n_text < (size_t)(7 * (MAX_SEQ - 1) + PROMPT))
        st = rg_fail(&err, RG_ERR_ARG, "the paragraph has %zu tokens, fewer than the prompts need", n_text);
    if (st) {
        fprintf(stderr, "bench_seqs: %s\n", err.msg);
        return 1;
    }
    printf("model %s; %d sequences at most, prompts of %d tokens, %d greedy tokens each, %d interleaved rounds\n",
           path, MAX_SEQ, PROMPT, tg, reps);
    printf("%4s %-15s %14s %24s %8s %16s %8s\n", "seqs", "row", "median tok/s", "rounds' tok/s", "ratio",
           "rounds' ratios", "greedy");
    const int n_counts = (int)(sizeof seq_counts / sizeof *seq_counts);
    double tps[N_ROWS][8], ratio[N_ROWS][8];
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(N_ROWS * MAX_SEQ * tg));
    for (int c = 0; c < n_counts && !st; c++) {
        const int n = seq_counts[c];
        int same[N_ROWS] = {0};
        for (int r = 0; r < reps && r < 8 && !st; r++)
            for (int row = 0; row < N_ROWS && !st; row++) {
                int32_t *out = toks + (size_t)row * MAX_SEQ * tg;
                double secs = 0;
                st = run(s, text, n, row, tg, out, &secs, &err);
                tps[row][r] = n * tg / secs;
                ratio[row][r] = tps[row][r] / tps[0][r];
                int agree = 0;
                for (int k = 0; k < n * tg; k++) agree += out[k] == toks[k];
                same[row] = agree;
            }
        for (int row = 0; row < N_ROWS && !st; row++) {
            const int k = reps < 8 ? reps : 8;
            double t[8], q[8];
            memcpy(t, tps[row], sizeof(double) * (size_t)k), memcpy(q, ratio[row], sizeof(double) * (size_t)k);
            qsort(t, (size_t)k, sizeof *t, cmp_double), qsort(q, (size_t)k, sizeof *q, cmp_double);
            char tr[32], qr[32], g[24];
            snprintf(tr, sizeof tr, "%.1f-%.1f", t[0], t[k - 1]);
            snprintf(qr, sizeof qr, "%.2f-%.2fx", q[0], q[k - 1]);
            snprintf(g, sizeof g, "%d/%d", same[row], n * tg);
            printf("%4d %-15s %14.1f %24s %7.2fx %16s %8s\n", n, row_names[row], t[k / 2], tr, q[k / 2], qr, g);
        }
    }
    if (st) fprintf(stderr, "bench_seqs: %s\n", err.msg);
    free(toks);
    free(text);
    rg_tokenizer_free(tok);
    rg_session_free(s);
    rg_model_free(m);
    if (*tiny) unlink(tiny);
    if (type && !cache && smol) unlink(path);
    return st ? 1 : 0;
}
