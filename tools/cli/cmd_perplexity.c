// cmd_perplexity.c - `retrograd perplexity -m MODEL.gguf -f TEXT.txt [options]`: the perplexity
// of a model on a text, computed as llama.cpp's perplexity tool computes it, so that the
// numbers compare.
//
//   - The whole file is tokenized once, as llama.cpp's perplexity does: BOS first (and EOS
//     last) when the model adds them, special-token text not recognized (user-defined tokens
//     still are, text/tokenizer.h).
//   - The tokens are cut into chunks of CTX (default 512, llama.cpp's usual, or the model's
//     context when smaller); the remainder is dropped; --chunks
//     caps how many are used.
//   - Each chunk is evaluated from an empty cache, its first token replaced by BOS when the
//     model adds BOS. The first CTX/2 positions are context only: the logits at positions
//     CTX/2 .. CTX-2 are scored against the token that follows, i.e. CTX - 1 - CTX/2 tokens
//     per chunk.
//   - nll = -log softmax(logits)[next] in double, summed over every scored token; after each
//     chunk the running estimate exp(mean nll) is printed as [i]PPL, (stdout).
//   - Final estimate: PPL = exp(mean nll) +/- PPL * sqrt((mean(nll^2) - mean(nll)^2) / (N - 1))
//     with N scored tokens: the standard error of the mean nll, propagated through exp to
//     first order (llama.cpp's formula; 0 when N < 2).
//   - --exact keeps every activation in F32 (the session's exact_activations: no Q8 or BF16
//     rounding of the activations that multiply quantized or BF16 weights): slower, and what a
//     float reference on the dequantized weights (transformers) computes.
//   - --lora applies adapters through the graph as generate does (repeatable, llama.cpp's
//     --lora): the perplexity of base + adapter, which equals that of the model merged in F32.
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cli.h"
#include "infer/session.h"
#include "model/lora.h"
#include "model/model.h"
#include "text/tokenizer.h"

static const char *const C = "perplexity";

// -log softmax(l)[target], in double.
static double nll_of(const float *l, int64_t n, int32_t target) {
    double mx = l[0];
    for (int64_t i = 1; i < n; i++)
        if (l[i] > mx) mx = l[i];
    double z = 0;
    for (int64_t i = 0; i < n; i++) z += exp((double)l[i] - mx);
    return -(((double)l[target] - mx) - log(z));
}

// What the command line asks for.
typedef struct ppl_args {
    const char *model_path, *file;
    int64_t n_ctx, n_threads, max_chunks;
    rg_device device;
    rg_flash_attn_mode flash;
    cli_loras loras;
    bool exact;
} ppl_args;

// The loaded model and the text's tokens: freed by ppl_close.
typedef struct ppl {
    rg_model *model;
    rg_tokenizer *tok;
    rg_lora *lora;
    float lora_scale;
    rg_session *sess;
    int32_t *ids;  // [n_tok]: the whole text
    size_t n_tok;
    int32_t *chunk;  // [n_ctx]
    float *logits;   // [piece, n_vocab]
} ppl;

// The running sums of the scored tokens' nll.
typedef struct nll_sums {
    double nll, nll2;
    int64_t count;
} nll_sums;

// -1 when a holds a valid command line; otherwise the exit code (0 after --help).
static int parse_args(ppl_args *a, int argc, char **argv) {
    *a = (ppl_args){.max_chunks = -1, .device = RG_DEVICE_CPU, .flash = RG_FLASH_ATTN_AUTO};
    const cli_opt opts[] = {
        CLI_STR('m', "--model", "MODEL.gguf", "the model", &a->model_path),
        CLI_STR('f', "--file", "TEXT.txt", "the text to score", &a->file),
        CLI_I64('c', "--ctx-size", "CTX", "tokens per chunk (default 512, or the model's context if smaller); the "
                "second half of each chunk is scored", 4, INT32_MAX, &a->n_ctx),
        CLI_I64('t', "--threads", "THREADS", "CPU threads (default: all cores)", 1, 512, &a->n_threads),
        CLI_I64(0, "--chunks", "N", "use at most N chunks (default: all)", -1, INT32_MAX, &a->max_chunks),
        CLI_CALL(0, "--device", "cpu|cuda", "where to run (default cpu)", cli_opt_device, &a->device),
        CLI_FLAG(0, "--exact", "F32 activations everywhere (slower; what a float reference on the dequantized weights "
                 "computes): quantized weights otherwise multiply int8 activations", &a->exact),
        CLI_CALL(0, "--flash-attn", "auto|on|off", "the batches through flash attention over the KV cache instead of "
                 "the [n_kv, T, n_head] scores (default auto: when those would pass 256 MiB; CPU only)",
                 cli_opt_flash_attn, &a->flash),
        CLI_CALL(0, "--lora", "A.gguf[:SCALE]", "apply a LoRA adapter (llama.cpp's format) with SCALE x alpha/rank "
                 "(default 1); repeat it to apply several (their terms are summed)", cli_opt_lora, &a->loras),
    };
    const cli_command c = {C, "-m MODEL.gguf -f TEXT.txt [options]", opts, CLI_N(opts), NULL, 0, NULL, NULL};
    int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    if (!a->model_path || !a->file) {
        fprintf(stderr, "retrograd %s: %s is required\n", C, !a->model_path ? "-m MODEL.gguf" : "-f TEXT.txt");
        cli_args_help(&c, stderr);
        return 2;
    }
    return -1;
}

// The model, its adapters and the text's tokens (a->n_ctx resolved); the exit code (0: loaded).
static int load(ppl *p, ppl_args *a) {
    size_t len = 0;
    char *text = cli_read_file(a->file, &len);
    if (!text) {
        fprintf(stderr, "retrograd %s: %s: cannot read the file: %s\n", C, a->file, strerror(errno));
        return 1;
    }
    rg_error err = {0};
    int rc = 1;
    if (rg_model_load(&p->model, a->model_path, &err) || rg_tokenizer_load(&p->tok, p->model->file, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        goto done;
    }
    rc = cli_loras_load(C, &a->loras, p->model, &p->lora, &p->lora_scale);
    if (rc) goto done;
    rc = 1;
    const int64_t n_train = p->model->hp.n_ctx_train;
    if (a->n_ctx == 0) a->n_ctx = n_train > 0 && n_train < 512 ? n_train : 512;
    size_t bad = rg_utf8_first_invalid(text, len);
    if (bad < len)
        fprintf(stderr, "retrograd %s: warning: %s is not valid UTF-8 (first invalid byte at offset %zu); it is "
                        "tokenized byte by byte\n", C, a->file, bad);
    if (n_train > 0 && a->n_ctx > n_train)
        fprintf(stderr, "retrograd %s: warning: -c %" PRId64 " is beyond the %" PRId64 " tokens the model was trained on\n",
                C, a->n_ctx, n_train);
    if (rg_tokenize_alloc(p->tok, text, len, true, false, &p->ids, &p->n_tok, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        goto done;
    }
    if ((int64_t)p->n_tok < a->n_ctx) {
        fprintf(stderr, "retrograd %s: %s: %zu tokens is too short for one chunk of -c %" PRId64 " tokens: use a "
                        "longer text or a smaller -c\n", C, a->file, p->n_tok, a->n_ctx);
        goto done;
    }
    rc = 0;
done:
    free(text);
    return rc;
}

// The session and the buffers for chunks of n_ctx and logits of `piece` positions; false with a message.
static bool open_session(ppl *p, const ppl_args *a, int64_t piece) {
    rg_error err = {0};
    rg_session_opts so = {.n_ctx = a->n_ctx, .n_threads = (int)a->n_threads, .device = a->device, .lora = p->lora,
                          .lora_scale = p->lora_scale, .exact_activations = a->exact, .flash_attn = a->flash};
    p->chunk = malloc((size_t)a->n_ctx * sizeof *p->chunk);
    p->logits = malloc((size_t)(piece * p->model->hp.n_vocab) * sizeof *p->logits);
    if (!p->chunk || !p->logits) {
        fprintf(stderr, "retrograd %s: out of memory\n", C);
        return false;
    }
    if (rg_session_create(&p->sess, p->model, &so, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        return false;
    }
    return true;
}

// Chunk c from an empty cache: its first half as context, then the nll of each next token
// in the second half, the logits read `piece` positions at a time.
static rg_status score_chunk(ppl *p, int64_t c, int64_t n_ctx, int64_t piece, bool add_bos, nll_sums *sum,
                             rg_error *err) {
    const int64_t V = p->model->hp.n_vocab, first = n_ctx / 2;
    memcpy(p->chunk, p->ids + c * n_ctx, (size_t)n_ctx * sizeof *p->chunk);
    if (add_bos) p->chunk[0] = rg_tokenizer_get_info(p->tok)->bos;
    rg_session_truncate(p->sess, 0);
    rg_status st = rg_session_eval(p->sess, p->chunk, first, NULL, 0, err);  // context only
    for (int64_t pos = first; !st && pos < n_ctx; pos += piece) {
        int64_t b = n_ctx - pos < piece ? n_ctx - pos : piece;
        st = rg_session_eval(p->sess, p->chunk + pos, b, p->logits, 1, err);
        for (int64_t j = 0; !st && j < b && pos + j <= n_ctx - 2; j++) {
            double x = nll_of(p->logits + j * V, V, p->chunk[pos + j + 1]);
            sum->nll += x;
            sum->nll2 += x * x;
            sum->count++;
        }
    }
    return st;
}

// The final line: PPL = exp(mean nll) and its standard error, through exp to first order.
static int print_estimate(const nll_sums *s, int64_t n_evaluated, double t) {
    double mean = s->nll / (double)s->count, ppl = exp(mean);
    double var = s->nll2 / (double)s->count - mean * mean;
    double unc = s->count > 1 && var > 0 ? ppl * sqrt(var / (double)(s->count - 1)) : 0.0;
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "perplexity: %" PRId64 " tokens scored in %.2f s (%.1f tok/s evaluated)\n", s->count, t,
            t > 0 ? (double)n_evaluated / t : 0.0);
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, unc);
    return fflush(stdout) == 0 ? 0 : 1;
}

// Scores every chunk, printing the running estimate after each; the exit code.
static int score_all(ppl *p, const ppl_args *a) {
    const int64_t n_ctx = a->n_ctx;
    int64_t n_chunk = (int64_t)p->n_tok / n_ctx;
    if (a->max_chunks >= 0 && a->max_chunks < n_chunk) n_chunk = a->max_chunks;
    if (n_chunk == 0) {
        fprintf(stderr, "retrograd %s: --chunks 0: nothing to score\n", C);
        return 1;
    }
    const rg_tokenizer_info *info = rg_tokenizer_get_info(p->tok);
    const bool add_bos = info->add_bos && info->bos >= 0;
    // scored logits come in pieces of at most 256 positions and 128 MiB
    int64_t piece = (128ll << 20) / (p->model->hp.n_vocab * (int64_t)sizeof(float));
    if (piece > 256) piece = 256;
    if (piece < 1) piece = 1;
    if (!open_session(p, a, piece)) return 1;
    fprintf(stderr, "perplexity: %zu tokens, %" PRId64 " chunks of %" PRId64 " (%" PRId64 " scored per chunk)%s\n",
            p->n_tok, n_chunk, n_ctx, n_ctx - 1 - n_ctx / 2, add_bos ? ", BOS first" : "");
    nll_sums sum = {0, 0, 0};
    double t0 = cli_now();
    rg_error err = {0};
    for (int64_t c = 0; c < n_chunk; c++) {
        if (score_chunk(p, c, n_ctx, piece, add_bos, &sum, &err)) {
            fprintf(stderr, "\nretrograd %s: chunk %" PRId64 ": %s\n", C, c + 1, err.msg);
            return 1;
        }
        if (c == 0) {
            double t = cli_now() - t0;
            fprintf(stderr, "perplexity: %.2f s per chunk, about %.1f s in all\n", t, t * (double)n_chunk);
        }
        printf("[%" PRId64 "]%.4f,", c + 1, exp(sum.nll / (double)sum.count));
        fflush(stdout);
    }
    return print_estimate(&sum, n_chunk * n_ctx, cli_now() - t0);
}

static void ppl_close(ppl *p) {
    free(p->logits);
    free(p->chunk);
    free(p->ids);
    rg_session_free(p->sess);
    rg_lora_free(p->lora);
    rg_tokenizer_free(p->tok);
    rg_model_free(p->model);
}

int cmd_perplexity(int argc, char **argv) {
    ppl_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc >= 0) return rc;
    ppl p = {.lora_scale = 1.0f};
    rc = load(&p, &a);
    if (!rc) rc = score_all(&p, &a);
    ppl_close(&p);
    return rc;
}
