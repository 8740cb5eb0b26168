// cmd_generate.c - `retrograd generate`: text from a prompt, or an interactive chat, with a
// KV-cached session and the seeded sampler chain (infer/sampler.h).
//
//   retrograd generate -m MODEL.gguf (-p TEXT | -f FILE | --chat) [options]   (the options: the table below)
//
// The prompt is a user message rendered with the model's chat template and its generation
// prompt (--raw: the text as is; a model without a chat template is used raw, with a
// warning; --chat-template NAME: a built-in family's layout instead, rg_chat_template_builtin).
// Special-token text in the prompt is recognized, by llama.cpp's rules
// (text/tokenizer.h), as llama-cli recognizes it. BOS is put first when the model asks for
// it, unless the tokens already start with BOS: a template that writes bos_token (llama.cpp's
// chat gives one BOS there too) or a raw prompt that begins with the BOS text (llama-cli
// would give two). No EOS is added; --no-bos: never a BOS. Decoded text streams to stdout
// token by token (a UTF-8 character split over tokens is printed when complete); generation
// stops after -n tokens (-1: no limit), at an end-of-generation token, or when the context
// is full; then one line of timings goes to stderr.
//
// --lora applies a LoRA adapter (llama.cpp's adapter.gguf) through the graph on any base type,
// y = W x + SCALE * alpha/rank * B(A x); the session keeps it for every evaluation. Repeated, the
// adapters' terms are summed, as llama.cpp's repeated --lora does (stacked: model/lora_stack.h).
//
// With --device cuda the draws run on the device too (src/cuda/sampling.cu: the same tokens as the
// CPU's sampler for the same logits); only each token's id comes back. RETRO_DEVICE_SAMPLING=0
// draws on the CPU from logits read back instead, for comparison.
//
// --state-load FILE puts a saved session state (infer/session_state.h) in the cache before the prompt, whose
// tokens are then appended after the loaded ones (no BOS: the sequence goes on; --raw continues text as it is);
// --state-save FILE saves the session after generating: the prompt and every generated token but the last one
// drawn (drawn, printed, never evaluated). Only the cache is in the file: the sampler starts afresh (its penalty
// window sees this run's tokens only). One-shot prompts only, not --chat.
//
// --draft ngram|model speculates (infer/speculative.h): a drafter proposes up to --draft-max tokens (default 8),
// the model verifies them with the last drawn token in one batch and rewinds past the first one it would not
// have drawn. ngram: prompt lookup (drafts copied from where the context's last tokens occurred before);
// --draft-model SMALL.gguf (implies model): a small model with the same vocabulary drafts greedily in its own
// session. Greedy output is the tokens of generation without it, bit for bit (the verification batch is exact:
// rg_session_eval_exact); with sampling the draws keep the sampler's distribution (speculative sampling) and a
// seed gives the same text, other text than without --draft. With --chat the drafters see the whole conversation.
//
// --chat reads user lines from stdin ("> " on stderr), answers each, and keeps the
// conversation in the KV cache: each turn evaluates only the text the template adds after
// the previous answer. /exit or end of input stops it (generate_chat.c).
//
// This file: the options, the model, template, adapters and session set up, then one turn
// (generate_turn.c) or the chat.
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "generate.h"
#include "infer/session_state.h"
#include "infer/speculative.h"
#include "model/lora.h"

// What the command line asks for.
typedef struct gen_args {
    const char *model_path, *prompt, *file, *tmpl_name, *state_load, *state_save, *draft, *draft_model;
    cli_loras loras;
    bool chat, raw, no_bos, truncate, verbose, profile;
    int64_t n_predict, n_ctx, n_threads, repeat_last_n, top_k, draft_max;
    rg_device device;
    rg_flash_attn_mode flash;
    rg_sampler_params sp;
} gen_args;

// What the command owns besides gen's session: freed by close_all.
typedef struct gen_owned {
    char *text;  // -f's file
    rg_chat_template tmpl;
    bool have_tmpl;
    rg_lora *lora;
    float lora_scale;
    rg_exec_profile prof;
    rg_model *draft_model;  // --draft-model's, with its tokenizer and session
    rg_tokenizer *draft_tok;
    rg_session *draft_sess;
} gen_owned;

// -1 when a holds a valid command line; otherwise the exit code (0 after --help).
static int parse_args(gen_args *a, int argc, char **argv) {
    const char *C = "generate";
    *a = (gen_args){.n_predict = 128, .repeat_last_n = 64, .device = RG_DEVICE_CPU, .flash = RG_FLASH_ATTN_AUTO,
                    .sp = rg_sampler_defaults(), .draft_max = 8};
    a->top_k = a->sp.top_k;
    const cli_opt opts[] = {
        CLI_STR('m', "--model", "MODEL.gguf", "the model", &a->model_path),
        CLI_STR('p', "--prompt", "TEXT", "the prompt", &a->prompt),
        CLI_STR('f', "--file", "FILE", "the prompt, read from FILE", &a->file),
        CLI_FLAG(0, "--chat", "interactive: user lines from stdin, /exit or end of input stops", &a->chat),
        CLI_I64('n', "--n-predict", "N", "tokens to generate (default 128; -1: until the end or a full context)", -1,
                INT64_MAX, &a->n_predict),
        CLI_F32(0, "--temp", "T", "temperature (default 0.8; <= 0: greedy)", &a->sp.temp),
        CLI_I64(0, "--top-k", "K", "keep the K most likely tokens (default 40; 0: off)", INT32_MIN, INT32_MAX, &a->top_k),
        CLI_F32(0, "--top-p", "P", "keep the smallest set with probability >= P, in (0, 1] (default 0.95; 1: off)",
                &a->sp.top_p),
        CLI_F32(0, "--min-p", "M", "keep tokens with probability >= M x the top one, in [0, 1) (default 0.05; 0: off)",
                &a->sp.min_p),
        CLI_F32(0, "--repeat-penalty", "R", "penalty of recently seen tokens, > 0 (default 1.0: off)",
                &a->sp.repeat_penalty),
        CLI_I64(0, "--repeat-last-n", "N", "how many recent tokens it looks at (default 64; 0: off; -1: the context)",
                -1, INT32_MAX, &a->repeat_last_n),
        CLI_U64(0, "--seed", "S", "seed of the draws (default 42): same seed, same text", &a->sp.seed),
        CLI_I64('c', "--ctx-size", "CTX", "context length in tokens (default 4096, or the model's if smaller)", 1,
                INT32_MAX, &a->n_ctx),
        CLI_I64('t', "--threads", "THREADS", "CPU threads (default: all cores)", 1, 512, &a->n_threads),
        CLI_CALL(0, "--device", "cpu|cuda", "where to run (default cpu)", cli_opt_device, &a->device),
        CLI_CALL(0, "--flash-attn", "auto|on|off", "prompt batches through flash attention over the KV cache instead "
                 "of the [n_kv, T, n_head] scores (default auto: when those would pass 256 MiB; CPU only)",
                 cli_opt_flash_attn, &a->flash),
        CLI_CALL(0, "--lora", "A.gguf[:SCALE]", "apply a LoRA adapter (llama.cpp's format) with SCALE x alpha/rank "
                 "(default 1); repeat it to apply several (their terms are summed)", cli_opt_lora, &a->loras),
        CLI_STR(0, "--state-load", "FILE", "before the prompt, load a session state saved by --state-save (the same "
                "model): the prompt's tokens follow the loaded ones, without a BOS", &a->state_load),
        CLI_STR(0, "--state-save", "FILE", "after generating, save the session's state (the prompt and the tokens "
                "generated, but the last) to FILE", &a->state_save),
        CLI_STR(0, "--draft", "ngram|model", "speculative decoding: drafts by prompt lookup (ngram) or by --draft-model, "
                "verified in one batch", &a->draft),
        CLI_STR(0, "--draft-model", "SMALL.gguf", "the draft model (same vocabulary; implies --draft model)", &a->draft_model),
        CLI_I64(0, "--draft-max", "N", "tokens drafted per verification (default 8)", 1, 256, &a->draft_max),
        CLI_FLAG(0, "--no-bos", "never put a BOS token first", &a->no_bos),
        CLI_FLAG(0, "--raw", "use the text as is, without the chat template", &a->raw),
        CLI_STR(0, "--chat-template", "NAME", "render with a built-in layout instead of the model's template (or for a "
                "model without one): chatml, llama3, llama3.1, lfm2, gemma", &a->tmpl_name),
        CLI_FLAG(0, "--truncate", "keep the end of a prompt longer than the context instead of failing", &a->truncate),
        CLI_FLAG(0, "--verbose-prompt", "print the tokens evaluated (each turn) to stderr", &a->verbose),
        CLI_FLAG(0, "--profile", "at the end, print to stderr where the time went per op and weight type", &a->profile),
    };
    const cli_command c = {C, "-m MODEL.gguf (-p TEXT | -f FILE | --chat) [options]", opts, CLI_N(opts), NULL, 0, NULL,
                           NULL};
    int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    if (!a->model_path || (a->prompt != NULL) + (a->file != NULL) + a->chat != 1) {
        fprintf(stderr, "retrograd %s: %s\n", C,
                !a->model_path ? "-m MODEL.gguf is required" : "give exactly one of -p TEXT, -f FILE or --chat");
        cli_args_help(&c, stderr);
        return 2;
    }
    if (a->chat && (a->state_load || a->state_save)) {
        fprintf(stderr, "retrograd %s: --state-load and --state-save work with -p or -f, not --chat\n", C);
        return 2;
    }
    if (a->draft_model && !a->draft) a->draft = "model";
    const char *bad = NULL;
    if (a->draft && strcmp(a->draft, "ngram") != 0 && strcmp(a->draft, "model") != 0)
        bad = "--draft takes ngram or model";
    else if (a->draft && !strcmp(a->draft, "model") && !a->draft_model)
        bad = "--draft model needs --draft-model SMALL.gguf";
    else if (a->draft_model && strcmp(a->draft, "model") != 0)
        bad = "--draft-model drafts with a model: not with --draft ngram";
    else if (a->draft_model && a->state_load)
        bad = "--draft-model cannot follow --state-load (the draft model would not have seen the loaded tokens); "
              "--draft ngram can";
    if (bad) {
        fprintf(stderr, "retrograd %s: %s\n", C, bad);
        return 2;
    }
    a->sp.top_k = (int32_t)a->top_k;
    a->sp.repeat_last_n = a->repeat_last_n < 0 ? 0 : (int32_t)a->repeat_last_n;  // -1: the context, once known
    rg_error err = {0};
    if (rg_sampler_params_check(&a->sp, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        return 2;
    }
    return -1;
}

// The prompt's text: -p's, or -f's file read into own->text; a warning when it is not UTF-8.
static bool read_prompt(const gen_args *a, gen_owned *own, const char **input, size_t *len) {
    *input = a->prompt;
    *len = a->prompt ? strlen(a->prompt) : 0;
    if (a->file) {
        own->text = cli_read_file(a->file, len);
        if (!own->text) {
            fprintf(stderr, "retrograd generate: %s: cannot read the file: %s\n", a->file, strerror(errno));
            return false;
        }
        *input = own->text;
    }
    size_t bad = *input ? rg_utf8_first_invalid(*input, *len) : *len;
    if (bad < *len)
        fprintf(stderr, "retrograd generate: warning: the prompt is not valid UTF-8 (first invalid byte at offset %zu); "
                        "it is tokenized byte by byte\n", bad);
    return true;
}

// The chat template (--chat-template's, or the model's): false (message printed) when one is needed and
// there is none; without --chat a model without one is used raw, with a warning.
static bool load_template(gen *g, const gen_args *a, gen_owned *own) {
    if (a->raw && !a->chat) return true;
    rg_error err = {0};
    const char *bos = g->info->bos >= 0 ? rg_token_text(g->tok, g->info->bos, NULL) : NULL;
    rg_status st = a->tmpl_name ? rg_chat_template_builtin(&own->tmpl, a->tmpl_name, bos, &err)
                                : rg_chat_template_from_tokenizer(&own->tmpl, g->tok, &err);
    own->have_tmpl = st == RG_OK;
    if (!st) return true;
    if (a->tmpl_name) fprintf(stderr, "retrograd %s: --chat-template: %s\n", g->cmd, err.msg);
    else if (a->chat) fprintf(stderr, "retrograd %s: --chat needs the model's chat template: %s\n", g->cmd, err.msg);
    else fprintf(stderr, "retrograd %s: warning: %s; the prompt is used as is (as with --raw)\n", g->cmd, err.msg);
    return !a->tmpl_name && !a->chat;
}

// The model, its tokenizer, the context and the template; the exit code (0: ready).
static int open_model(gen *g, gen_args *a, gen_owned *own) {
    rg_error err = {0};
    if (rg_model_load(&g->model, a->model_path, &err) || rg_tokenizer_load(&g->tok, g->model->file, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", g->cmd, err.msg);
        return 1;
    }
    g->info = rg_tokenizer_get_info(g->tok);
    g->add_bos = g->info->add_bos && !a->no_bos;
    g->n_vocab = g->model->hp.n_vocab;
    g->n_ctx = a->n_ctx > 0 ? a->n_ctx : cli_default_ctx(g->model);
    if (a->n_ctx > 0 && g->model->hp.n_ctx_train > 0 && a->n_ctx > g->model->hp.n_ctx_train)
        fprintf(stderr, "retrograd %s: warning: -c %" PRId64 " is beyond the %" PRId64 " tokens the model was trained on\n",
                g->cmd, a->n_ctx, g->model->hp.n_ctx_train);
    if (a->repeat_last_n < 0) a->sp.repeat_last_n = (int32_t)g->n_ctx;
    return load_template(g, a, own) ? 0 : 1;
}

// --draft: the draft model (its vocabulary checked against the model's) and its session, and the speculative
// decoder; the exit code (0: ready).
static int open_draft(gen *g, const gen_args *a, gen_owned *own) {
    rg_error err = {0};
    rg_spec_opts o = {.kind = RG_DRAFT_NGRAM, .draft_max = a->draft_max};
    if (a->draft_model) {
        rg_session_opts so = {.n_ctx = g->n_ctx, .n_threads = (int)a->n_threads, .device = a->device,
                              .flash_attn = a->flash};
        if (rg_model_load(&own->draft_model, a->draft_model, &err) ||
            rg_tokenizer_load(&own->draft_tok, own->draft_model->file, &err) ||
            rg_spec_vocab_check(g->tok, g->n_vocab, own->draft_tok, own->draft_model->hp.n_vocab, &err) ||
            rg_session_create(&own->draft_sess, own->draft_model, &so, &err)) {
            fprintf(stderr, "retrograd %s: --draft-model %s: %s\n", g->cmd, a->draft_model, err.msg);
            return 1;
        }
        o.kind = RG_DRAFT_MODEL;
        o.draft = own->draft_sess;
    }
    g->spec_out = malloc((size_t)(a->draft_max + 1) * sizeof *g->spec_out);
    if (!g->spec_out || rg_spec_create(&g->spec, g->sess, &o, &err)) {
        fprintf(stderr, "retrograd %s: --draft: %s\n", g->cmd, g->spec_out ? err.msg : "out of memory");
        return 1;
    }
    return 0;
}

// The adapters, the session, the sampler and the buffers; the exit code (0: ready).
static int open_session(gen *g, const gen_args *a, gen_owned *own) {
    int rc = cli_loras_load(g->cmd, &a->loras, g->model, &own->lora, &own->lora_scale);
    if (rc) return rc;
    rg_error err = {0};
    rg_session_opts so = {.n_ctx = g->n_ctx, .n_threads = (int)a->n_threads, .device = a->device, .lora = own->lora,
                          .lora_scale = own->lora_scale, .profile = a->profile ? &own->prof : NULL,
                          .flash_attn = a->flash};
    if (rg_session_create(&g->sess, g->model, &so, &err) ||
        rg_sampler_create(&g->smp, &a->sp, (int32_t)g->n_vocab, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", g->cmd, err.msg);
        return 1;
    }
    if (a->state_load && rg_session_state_load(g->sess, a->state_load, &err)) {
        fprintf(stderr, "retrograd %s: --state-load: %s\n", g->cmd, err.msg);
        return 1;
    }
    if (a->draft && open_draft(g, a, own)) return 1;
    g->piece_cap = rg_detok_stream_max_out(g->tok);
    g->piece = malloc(g->piece_cap);
    if (!g->piece) {
        fprintf(stderr, "retrograd %s: out of memory\n", g->cmd);
        return 1;
    }
    return 0;
}

static void close_all(gen *g, gen_owned *own) {
    if (own->have_tmpl) rg_chat_template_free(&own->tmpl);
    free(g->piece);
    rg_spec_free(g->spec);
    free(g->spec_out);
    rg_session_free(own->draft_sess);
    rg_tokenizer_free(own->draft_tok);
    rg_model_free(own->draft_model);
    rg_sampler_free(g->smp);
    rg_session_free(g->sess);
    rg_lora_free(own->lora);
    rg_tokenizer_free(g->tok);
    rg_model_free(g->model);
    free(own->text);
}

int cmd_generate(int argc, char **argv) {
    gen_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc >= 0) return rc;
    gen_owned own = {.lora_scale = 1.0f};
    const char *input = NULL;
    size_t len = 0;
    if (!read_prompt(&a, &own, &input, &len)) return 1;
    gen g = {.cmd = "generate", .n_predict = a.n_predict, .truncate = a.truncate, .last_newline = true,
             .verbose_prompt = a.verbose};
    rc = open_model(&g, &a, &own);
    if (!rc) rc = open_session(&g, &a, &own);
    if (!rc) {
        rc = a.chat ? gen_chat(&g, &own.tmpl) : gen_one_shot(&g, input, len, own.have_tmpl ? &own.tmpl : NULL);
        rg_error err = {0};
        if (!rc && a.state_save && rg_session_state_save(g.sess, a.state_save, &err)) {
            fprintf(stderr, "retrograd %s: --state-save: %s\n", g.cmd, err.msg);
            rc = 1;
        }
        if (a.profile) {
            fprintf(stderr, "retrograd %s: ", g.cmd);
            rg_exec_profile_print(&own.prof, stderr);
        }
    }
    close_all(&g, &own);
    return rc;
}
