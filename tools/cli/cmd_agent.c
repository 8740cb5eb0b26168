// cmd_agent.c - `retrograd agent`: a model that calls tools (MCP servers over stdio and declared commands,
// src/agent/agent_tools.h) in the agent loop (src/agent/agent.h) on a one-slot engine (src/agent/agent_engine.h).
//
//   retrograd agent -m MODEL.gguf --tools TOOLS.yaml [-p PROMPT] [--keep FILE.jsonl] [options]
//
// -p: one turn; the answer goes to stdout, each call, result and failure to stderr; the exit code is 0 when the
// model answered, 1 when the turn ended in a failed or refused call (or max_calls). Without -p: user lines from
// stdin ("> " on stderr), /exit or the end of input stops. --json: each turn as one JSON line on stdout instead
// of the answer: {"end", "answer", "failure", "calls": [{"name", "arguments", "result" | "error"}],
// "generations": [{"prompt_tokens", "reused_tokens"}]}. --keep appends the conversation after each answered turn
// (asked first with --confirm). docs/AGENT.md has the tools file and the rules.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "agent/agent.h"
#include "agent/agent_engine.h"
#include "agent/agent_tools.h"
#include "base/error.h"
#include "base/json_write.h"
#include "cli.h"
#include "model/lora.h"

typedef struct agent_args {
    const char *model_path, *tools_path, *prompt, *keep, *system, *tmpl_name;
    cli_loras loras;
    bool confirm, tell_model, json;
    int64_t max_calls, n_ctx, n_threads, n_predict, top_k;
    rg_device device;
    rg_sampler_params sp;
} agent_args;

static const char C[] = "agent";

static void agent_epilog(FILE *f) {
    fputs("\nThe tools file (YAML or JSON) declares MCP servers (mcp: [{name, command: [argv]}]) and commands\n"
          "(commands: [{name, description, argv: [prog, \"{param}\"], parameters, cwd, timeout_s, max_output}]).\n"
          "A failed or refused call cuts the conversation back to before the reply that made it (the engine rewinds\n"
          "exactly) and is reported here; --tell-model gives the model the error as the call's result instead.\n"
          "docs/AGENT.md has the details.\n",
          f);
}

// -1 when a holds a valid command line; otherwise the exit code (0 after --help).
static int parse_args(agent_args *a, int argc, char **argv) {
    *a = (agent_args){.max_calls = 8, .n_predict = 1024, .device = RG_DEVICE_CPU, .sp = rg_sampler_defaults()};
    a->top_k = a->sp.top_k;
    const cli_opt opts[] = {
        CLI_STR('m', "--model", "MODEL.gguf", "the model", &a->model_path),
        CLI_STR(0, "--tools", "TOOLS.yaml", "the tools file: MCP servers and commands (YAML or JSON)", &a->tools_path),
        CLI_CALL(0, "--lora", "A.gguf[:SCALE]", "apply a LoRA adapter (repeatable; their terms are summed)",
                 cli_opt_lora, &a->loras),
        CLI_STR('p', "--prompt", "TEXT", "one user turn; without it, user lines are read from stdin", &a->prompt),
        CLI_STR(0, "--system", "TEXT", "a system message first in the conversation", &a->system),
        CLI_STR(0, "--keep", "FILE.jsonl", "append the conversation after each answered turn, as a fine-tuning line "
                "{\"tools\", \"messages\"} (retrograd train reads it)", &a->keep),
        CLI_I64(0, "--max-calls", "N", "tool calls one turn may make (default 8)", 1, 1000, &a->max_calls),
        CLI_FLAG(0, "--confirm", "ask on stderr before each call runs (and before --keep writes a turn); the answer "
                 "is read from stdin", &a->confirm),
        CLI_FLAG(0, "--tell-model", "a failed or refused call's error becomes its result for the model, which goes "
                 "on, instead of cutting the conversation back", &a->tell_model),
        CLI_FLAG(0, "--json", "print each turn as a JSON line (calls, results, answer, reused tokens)", &a->json),
        CLI_I64('n', "--n-predict", "N", "the most tokens of one reply (default 1024)", 1, INT32_MAX, &a->n_predict),
        CLI_F32(0, "--temp", "T", "temperature (default 0.8; <= 0: greedy)", &a->sp.temp),
        CLI_I64(0, "--top-k", "K", "keep the K most likely tokens (default 40; 0: off)", 0, INT32_MAX, &a->top_k),
        CLI_F32(0, "--top-p", "P", "keep the smallest set with probability >= P (default 0.95)", &a->sp.top_p),
        CLI_U64(0, "--seed", "S", "seed of the draws (default 42)", &a->sp.seed),
        CLI_I64('c', "--ctx-size", "CTX", "context length in tokens (default 4096, or the model's if smaller)", 1,
                INT32_MAX, &a->n_ctx),
        CLI_I64('t', "--threads", "THREADS", "CPU threads (default: all cores)", 1, 512, &a->n_threads),
        CLI_CALL(0, "--device", "cpu|cuda", "where to run (default cpu)", cli_opt_device, &a->device),
        CLI_STR(0, "--chat-template", "NAME", "render with a built-in layout instead of the model's template: chatml "
                "or lfm2 (the families with tools)", &a->tmpl_name),
    };
    const cli_command c = {C, "-m MODEL.gguf --tools TOOLS.yaml [-p TEXT] [--keep FILE.jsonl] [options]", opts,
                           CLI_N(opts), .epilog = agent_epilog};
    int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    if (!a->model_path || !a->tools_path) {
        fprintf(stderr, "retrograd %s: %s is required\n", C, !a->model_path ? "-m MODEL.gguf" : "--tools TOOLS.yaml");
        return 2;
    }
    a->sp.top_k = (int32_t)a->top_k;
    rg_error err = {0};
    if (rg_sampler_params_check(&a->sp, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        return 2;
    }
    return -1;
}

// ---------------------------------------------------------------------------------------------------------------
// What the loop calls back

typedef struct agent_cli {
    agent_args *a;
    rg_agent_tools *tools;
    rg_agent *agent;
    rg_agent_engine *engine;
    rg_model *model;
    rg_tokenizer *tok;
    rg_chat_template tmpl;
    bool have_tmpl;
    rg_lora *lora;
    float lora_scale;
} agent_cli;

static rg_status execute(void *user, const char *name, const char *args, char **result, size_t *len, rg_error *err) {
    return rg_agent_tools_call(user, name, args, result, len, err);
}

// A y/n answer from stdin; false at the end of input.
static bool ask_yes(const char *question) {
    fprintf(stderr, "%s [y/N] ", question);
    fflush(stderr);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return false;
    return line[0] == 'y' || line[0] == 'Y';
}

static bool confirm(void *user, const char *name, const char *args, size_t index, size_t n) {
    (void)user;
    char q[600];
    snprintf(q, sizeof q, "retrograd agent: run %s %.500s%s?", name, args, n > 1 ? (index + 1 < n ? " (more follow)" : "")
                                                                           : "");
    return ask_yes(q);
}

// Text for stderr: at most max bytes, on one line.
static void print_short(const char *s, size_t max) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n && i < max; i++) fputc(s[i] == '\n' || s[i] == '\r' ? ' ' : s[i], stderr);
    if (n > max) fprintf(stderr, " ... (%zu bytes)", n);
    fputc('\n', stderr);
}

static void on_event(void *user, const rg_agent_event *ev) {
    (void)user;
    if (ev->kind == RG_AGENT_EV_CALL) {
        fprintf(stderr, "[call] %s %s\n", ev->name, ev->arguments);
    } else {
        fputs(ev->kind == RG_AGENT_EV_RESULT ? "[result] " : "[failed] ", stderr);
        print_short(ev->text, 600);
    }
}

// ---------------------------------------------------------------------------------------------------------------

static void print_json(const rg_agent_turn *t) {
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "end", rg_agent_end_name(t->end));
    rg_jw_key(&w, "answer");
    rg_jw_strn(&w, t->answer, t->answer_len);
    rg_jw_kstr(&w, "failure", t->failure);
    rg_jw_key(&w, "calls");
    rg_jw_arr(&w);
    for (size_t i = 0; i < t->n_calls; i++) {
        const rg_agent_call *c = &t->calls[i];
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "name", c->name);
        rg_jw_kstr(&w, "arguments", c->arguments);
        if (c->result) rg_jw_kstr(&w, "result", c->result);
        if (c->error) rg_jw_kstr(&w, "error", c->error);
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    rg_jw_key(&w, "generations");
    rg_jw_arr(&w);
    for (size_t i = 0; i < t->n_gen; i++) {
        rg_jw_obj(&w);
        rg_jw_ki64(&w, "prompt_tokens", t->n_prompt[i]);
        rg_jw_ki64(&w, "reused_tokens", t->n_reused[i]);
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    rg_jw_obj_end(&w);
    size_t len;
    const char *text = rg_jw_text(&w, &len);
    if (text) printf("%s\n", text);
    fflush(stdout);
    rg_jw_free(&w);
}

// One user turn, reported; the exit code.
static int run_turn(agent_cli *ac, const char *text, size_t len) {
    rg_agent_turn t;
    rg_error err = {0};
    if (rg_agent_turn_run(ac->agent, text, len, &t, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        return 1;
    }
    if (ac->a->json) print_json(&t);
    else if (t.end == RG_AGENT_ANSWERED) printf("%s\n", t.answer);
    fflush(stdout);
    if (t.end != RG_AGENT_ANSWERED)
        fprintf(stderr, "retrograd %s: the turn ended without an answer (%s): %s; the conversation is back to before "
                "the call\n", C, rg_agent_end_name(t.end), t.failure);
    int rc = t.end == RG_AGENT_ANSWERED ? 0 : 1;
    if (!rc && ac->a->keep && (!ac->a->confirm || ask_yes("retrograd agent: keep this turn?"))) {
        if (rg_agent_keep_append(ac->agent, ac->a->keep, &err)) {
            fprintf(stderr, "retrograd %s: --keep: %s\n", C, err.msg);
            rc = 1;
        }
    }
    rg_agent_turn_free(&t);
    return rc;
}

static int interactive(agent_cli *ac) {
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        fputs("> ", stderr);
        fflush(stderr);
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) {
            fputc('\n', stderr);
            break;
        }
        size_t n = (size_t)got;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        line[n] = '\0';
        if (!strcmp(line, "/exit")) break;
        if (n == 0) continue;
        run_turn(ac, line, n);  // a failed turn is reported; the conversation goes on
    }
    free(line);
    return 0;
}

// The tools (servers started), the model, its template, the adapters, the engine and the agent; the exit code.
static int open_all(agent_cli *ac) {
    agent_args *a = ac->a;
    rg_error err = {0};
    if (rg_agent_tools_load(&ac->tools, a->tools_path, &err) || rg_agent_tools_start(ac->tools, NULL, &err)) {
        fprintf(stderr, "retrograd %s: --tools %s\n", C, err.msg);
        return 1;
    }
    fprintf(stderr, "retrograd %s: %zu tools from %s\n", C, rg_agent_tools_count(ac->tools), a->tools_path);
    if (rg_model_load(&ac->model, a->model_path, &err) || rg_tokenizer_load(&ac->tok, ac->model->file, &err)) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        return 1;
    }
    const rg_tokenizer_info *info = rg_tokenizer_get_info(ac->tok);
    const char *bos = info->bos >= 0 ? rg_token_text(ac->tok, info->bos, NULL) : NULL;
    rg_status st = a->tmpl_name ? rg_chat_template_builtin(&ac->tmpl, a->tmpl_name, bos, &err)
                                : rg_chat_template_from_tokenizer(&ac->tmpl, ac->tok, &err);
    ac->have_tmpl = st == RG_OK;
    if (st) {
        fprintf(stderr, "retrograd %s: the agent needs a chat template with tools: %s\n", C, err.msg);
        return 1;
    }
    if (ac->tmpl.family != RG_CHAT_CHATML && ac->tmpl.family != RG_CHAT_LFM2) {
        fprintf(stderr, "retrograd %s: the model's chat template is %s, which has no tool calls here (chatml and lfm2 "
                "do; --chat-template NAME picks one)\n", C, rg_chat_family_name(ac->tmpl.family));
        return 1;
    }
    int rc = cli_loras_load(C, &a->loras, ac->model, &ac->lora, &ac->lora_scale);
    if (rc) return rc;
    rg_agent_engine_opts eo = {.model = ac->model, .tok = ac->tok, .tmpl = &ac->tmpl, .lora = ac->lora,
                               .lora_scale = ac->lora_scale, .sampling = a->sp,
                               .n_ctx = a->n_ctx > 0 ? a->n_ctx : cli_default_ctx(ac->model),
                               .max_tokens = a->n_predict, .n_threads = (int)a->n_threads, .device = a->device};
    const char *tools_json = rg_agent_tools_json(ac->tools, NULL);
    rg_agent_opts ao = {.family = ac->tmpl.family, .tools_json = tools_json, .system = a->system,
                        .max_calls = (int)a->max_calls, .failures_to_model = a->tell_model,
                        .generate = rg_agent_engine_generate, .execute = execute, .execute_user = ac->tools,
                        .confirm = a->confirm ? confirm : NULL, .on_event = on_event};
    if (!tools_json) st = rg_fail(&err, RG_ERR_NOMEM, "out of memory");
    if (!st) st = rg_agent_engine_create(&ac->engine, &eo, &err);
    ao.generate_user = ac->engine;
    if (!st) st = rg_agent_create(&ac->agent, &ao, &err);
    if (st) {
        fprintf(stderr, "retrograd %s: %s\n", C, err.msg);
        return 1;
    }
    return 0;
}

int cmd_agent(int argc, char **argv) {
    agent_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc >= 0) return rc;
    agent_cli ac = {.a = &a, .lora_scale = 1.0f};
    rc = open_all(&ac);
    if (!rc) rc = a.prompt ? run_turn(&ac, a.prompt, strlen(a.prompt)) : interactive(&ac);
    rg_agent_free(ac.agent);
    rg_agent_engine_free(ac.engine);
    rg_lora_free(ac.lora);
    if (ac.have_tmpl) rg_chat_template_free(&ac.tmpl);
    rg_tokenizer_free(ac.tok);
    rg_model_free(ac.model);
    rg_agent_tools_free(ac.tools);
    return rc;
}
