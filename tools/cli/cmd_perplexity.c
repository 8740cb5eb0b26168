// cmd_perplexity.c - `retrograd perplexity -m MODEL.gguf -f TEXT.txt [-c CTX] [-t THREADS]
// [--chunks N] [--device cpu|cuda] [--exact] [--flash-attn auto|on|off] [--lora A.gguf[:SCALE]]...`: the perplexity of a model on a text, computed as
// llama.cpp's perplexity tool computes it, so that the numbers compare.
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
#include <limits.h>
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

static void usage(FILE *f) {
    fprintf(f, "usage: retrograd perplexity -m MODEL.gguf -f TEXT.txt [-c CTX] [-t THREADS] [--chunks N] [--device cpu|cuda]\n"
               "                                [--exact] [--flash-attn auto|on|off] [--lora A.gguf[:SCALE]]...\n"
               "  -m MODEL.gguf     the model\n"
               "  -f TEXT.txt       the text to score\n"
               "  -c CTX            tokens per chunk (default 512, or the model's context if smaller); the second\n"
               "                    half of each chunk is scored\n"
               "  -t THREADS        CPU threads (default: all cores)\n"
               "  --chunks N        use at most N chunks (default: all)\n"
               "  --device cpu|cuda where to run (default cpu)\n"
               "  --exact           F32 activations everywhere (slower; what a float reference on the dequantized\n"
               "                    weights computes): quantized weights otherwise multiply int8 activations\n"
               "  --flash-attn auto|on|off\n"
               "                    the batches through flash attention over the KV cache instead of the\n"
               "                    [n_kv, T, n_head] scores (default auto: when those would pass 256 MiB; CPU only)\n"
               "  --lora A.gguf[:SCALE]\n"
               "                    apply a LoRA adapter (llama.cpp's format) with SCALE x alpha/rank (default 1);\n"
               "                    repeat it to apply several (their terms are summed)\n");
}

// -log softmax(l)[target], in double.
static double nll_of(const float *l, int64_t n, int32_t target) {
    double mx = l[0];
    for (int64_t i = 1; i < n; i++)
        if (l[i] > mx) mx = l[i];
    double z = 0;
    for (int64_t i = 0; i < n; i++) z += exp((double)l[i] - mx);
    return -(((double)l[target] - mx) - log(z));
}

int cmd_perplexity(int argc, char **argv) {
    const char *C = "perplexity";
    const char *model_path = NULL, *file = NULL;
    int64_t n_ctx = 0, n_threads = 0, max_chunks = -1;
    rg_device device = RG_DEVICE_CPU;
    rg_flash_attn_mode flash = RG_FLASH_ATTN_AUTO;
    cli_loras loras = {0};
    bool exact = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--exact")) {
            exact = true;
            continue;
        }
        static const char *const with_value[] = {"-m", "-f", "-c", "--ctx-size", "-t", "--threads", "--chunks", "--device", "--lora",
                                                 "--flash-attn"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(a, with_value[k]);
        if (!known) {
            fprintf(stderr, "retrograd %s: unknown argument '%s'\n", C, a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "retrograd %s: %s needs a value\n", C, a);
            return 2;
        }
        const char *v = argv[++i];
        bool ok = true;
        if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "-f")) file = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) ok = cli_parse_i64(C, a, v, 4, INT32_MAX, &n_ctx);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = cli_parse_i64(C, a, v, 1, 512, &n_threads);
        else if (!strcmp(a, "--chunks")) ok = cli_parse_i64(C, a, v, -1, INT32_MAX, &max_chunks);
        else if (!strcmp(a, "--device")) ok = cli_parse_device(C, v, &device);
        else if (!strcmp(a, "--flash-attn")) ok = cli_parse_flash_attn(C, v, &flash);
        else if (!strcmp(a, "--lora")) ok = cli_loras_add(C, &loras, v);
        if (!ok) return 2;
    }
    if (!model_path || !file) {
        fprintf(stderr, "retrograd %s: %s is required\n", C, !model_path ? "-m MODEL.gguf" : "-f TEXT.txt");
        usage(stderr);
        return 2;
    }

    size_t len = 0;
    char *text = cli_read_file(file, &len);
    if (!text) {
        fprintf(stderr, "retrograd %s: %s: cannot read the file: %s\n", C, file, strerror(errno));
        return 1;
    }
    rg_error err = {0};
    rg_model *m = NULL;
    rg_tokenizer *tok = NULL;
    rg_session *s = NULL;
    rg_lora *lora = NULL;
    float lora_scale = 1.0f;
    int32_t *ids = NULL, *chunk = NULL;
    float *logits = NULL;
    int rc = 1;
    if (rg_model_load(&m, model_path, &err) || rg_tokenizer_load(&tok, m->file, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        goto done;
    }
    rc = cli_loras_load(C, &loras, m, &lora, &lora_scale);
    if (rc) goto done;
    rc = 1;
    if (n_ctx == 0) n_ctx = m->hp.n_ctx_train > 0 && m->hp.n_ctx_train < 512 ? m->hp.n_ctx_train : 512;
    size_t bad = rg_utf8_first_invalid(text, len);
    if (bad < len)
        fprintf(stderr, "retrograd %s: warning: %s is not valid UTF-8 (first invalid byte at offset %zu); it is "
                        "tokenized byte by byte\n", C, file, bad);
    if (m->hp.n_ctx_train > 0 && n_ctx > m->hp.n_ctx_train)
        fprintf(stderr, "retrograd %s: warning: -c %" PRId64 " is beyond the %" PRId64 " tokens the model was trained on\n",
                C, n_ctx, m->hp.n_ctx_train);
    size_t n_tok = 0;
    if (rg_tokenize_alloc(tok, text, len, true, false, &ids, &n_tok, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        goto done;
    }
    if ((int64_t)n_tok < n_ctx) {
        fprintf(stderr, "retrograd %s: %s: %zu tokens is too short for one chunk of -c %" PRId64 " tokens: use a "
                        "longer text or a smaller -c\n", C, file, n_tok, n_ctx);
        goto done;
    }
    int64_t n_chunk = (int64_t)n_tok / n_ctx;
    if (max_chunks >= 0 && max_chunks < n_chunk) n_chunk = max_chunks;
    if (n_chunk == 0) {
        fprintf(stderr, "retrograd %s: --chunks 0: nothing to score\n", C);
        goto done;
    }
    const rg_tokenizer_info *info = rg_tokenizer_get_info(tok);
    const bool add_bos = info->add_bos && info->bos >= 0;
    const int64_t V = m->hp.n_vocab, first = n_ctx / 2;
    // scored logits come in pieces of at most 256 positions and 128 MiB
    int64_t piece = (128ll << 20) / (V * (int64_t)sizeof(float));
    if (piece > 256) piece = 256;
    if (piece < 1) piece = 1;
    rg_session_opts so = {.n_ctx = n_ctx, .n_threads = (int)n_threads, .device = device, .lora = lora,
                          .lora_scale = lora_scale, .exact_activations = exact, .flash_attn = flash};
    chunk = malloc((size_t)n_ctx * sizeof *chunk);
    logits = malloc((size_t)(piece * V) * sizeof *logits);
    if (!chunk || !logits) {
        fprintf(stderr, "retrograd %s: out of memory\n", C);
        goto done;
    }
    if (rg_session_create(&s, m, &so, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        goto done;
    }
    fprintf(stderr, "perplexity: %zu tokens, %" PRId64 " chunks of %" PRId64 " (%" PRId64 " scored per chunk)%s\n",
            n_tok, n_chunk, n_ctx, n_ctx - 1 - first, add_bos ? ", BOS first" : "");
    double nll = 0, nll2 = 0, t0 = cli_now();
    int64_t count = 0;
    for (int64_t c = 0; c < n_chunk; c++) {
        memcpy(chunk, ids + c * n_ctx, (size_t)n_ctx * sizeof *chunk);
        if (add_bos) chunk[0] = info->bos;
        rg_session_truncate(s, 0);
        rg_status st = rg_session_eval(s, chunk, first, NULL, 0, &err);  // context only
        for (int64_t pos = first; !st && pos < n_ctx; pos += piece) {
            int64_t b = n_ctx - pos < piece ? n_ctx - pos : piece;
            st = rg_session_eval(s, chunk + pos, b, logits, 1, &err);
            for (int64_t j = 0; !st && j < b && pos + j <= n_ctx - 2; j++) {
                double x = nll_of(logits + j * V, V, chunk[pos + j + 1]);
                nll += x;
                nll2 += x * x;
                count++;
            }
        }
        if (st) {
            fprintf(stderr, "\nretrograd %s: chunk %" PRId64 ": %s\n", C, c + 1, err.msg);
            goto done;
        }
        if (c == 0) {
            double t = cli_now() - t0;
            fprintf(stderr, "perplexity: %.2f s per chunk, about %.1f s in all\n", t, t * (double)n_chunk);
        }
        printf("[%" PRId64 "]%.4f,", c + 1, exp(nll / (double)count));
        fflush(stdout);
    }
    double t = cli_now() - t0;
    double mean = nll / (double)count, ppl = exp(mean);
    double var = nll2 / (double)count - mean * mean;
    double unc = count > 1 && var > 0 ? ppl * sqrt(var / (double)(count - 1)) : 0.0;
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "perplexity: %" PRId64 " tokens scored in %.2f s (%.1f tok/s evaluated)\n", count, t,
            t > 0 ? (double)(n_chunk * n_ctx) / t : 0.0);
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, unc);
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    free(logits);
    free(chunk);
    free(ids);
    rg_session_free(s);
    rg_lora_free(lora);
    rg_tokenizer_free(tok);
    rg_model_free(m);
    free(text);
    return rc;
}
