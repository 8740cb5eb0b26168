// fuzz_agent_tools.c - libFuzzer target for the agent's tools file (src/agent/agent_tools_read.c): the whole
// input is a tools file (YAML, or JSON when its first non-blank byte is '{') read by rg_agent_tools_parse.
// Nothing is started and nothing is run: no MCP server, no command.
//
// What agent_tools.h promises and this checks:
//   - a refused file is RG_ERR_FORMAT (RG_ERR_UNSUPPORTED: YAML in a build without libyaml), one line naming
//     the file ("fuzz-tools.yaml:LINE: ..." with a line the text has, or the file alone);
//   - reading is deterministic: the same text gives the same tools JSON;
//   - a read file offers its commands (no MCP tool before start): rg_agent_tools_count of them, as an OpenAI
//     `tools` array that parses, each {"type": "function", "function": {"name", "description", "parameters"}},
//     the names distinct and non-empty, the parameters an object;
//   - every {NAME} placeholder of a command's argv names a property of its parameters, no argv is empty;
//   - a call of a name no tool has, or with arguments that are not a JSON object, is refused before anything
//     runs, the message beginning "tool 'NAME': ".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_tools.h"
#include "agent/agent_tools_internal.h"
#include "base/json.h"
#include "support.h"

static const char *const path = "fuzz-tools.yaml";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return 0;
}

// The refusal names the file, and a line of it that exists.
static void check_refusal(rg_status st, const rg_error *err, const char *text, size_t len) {
    fz_check_error(st, err, FZ_STATUS(RG_ERR_FORMAT) | FZ_STATUS(RG_ERR_UNSUPPORTED), "parse");
    const size_t pl = strlen(path);
    FZ_CHECK(!strncmp(err->msg, path, pl) && (err->msg[pl] == ':' || err->msg[pl] == ' '),
             "the error does not begin with the file's name: %s", err->msg);
    long line = 0;
    if (sscanf(err->msg + pl, ":%ld:", &line) == 1) {
        size_t lines = 1;
        for (size_t i = 0; i < len; i++) lines += text[i] == '\n' || text[i] == '\r';
        FZ_CHECK(line >= 1 && (size_t)line <= lines + 1, "line %ld of a text of %zu lines: %s", line, lines, err->msg);
    }
}

static void check_tools_json(rg_agent_tools *t) {
    size_t n;
    const char *json = rg_agent_tools_json(t, &n);
    FZ_CHECK(json, "no tools JSON");
    rg_json_doc *doc = NULL;
    rg_error err = {0};
    FZ_CHECK(rg_json_parse(&doc, json, n, NULL, &err) == RG_OK, "the tools JSON does not parse: %s: %.200s", err.msg,
             json);
    const rg_json *arr = rg_json_root(doc);
    FZ_CHECK(rg_json_is(arr, RG_JSON_ARRAY) && rg_json_len(arr) == rg_agent_tools_count(t),
             "%zu tools listed, %zu counted", rg_json_len(arr), rg_agent_tools_count(t));
    FZ_CHECK(rg_agent_tools_count(t) == t->n_cmds, "%zu tools before any server started, %zu commands",
             rg_agent_tools_count(t), t->n_cmds);
    for (size_t i = 0; i < rg_json_len(arr); i++) {
        const rg_json *e = rg_json_at(arr, i), *f = rg_json_get(e, "function");
        size_t tl, nl;
        const char *type = rg_json_str(rg_json_get(e, "type"), &tl);
        const char *name = rg_json_str(rg_json_get(f, "name"), &nl);
        FZ_CHECK(type && !strcmp(type, "function") && name && nl > 0 &&
                     rg_json_is(rg_json_get(f, "description"), RG_JSON_STRING) &&
                     rg_json_is(rg_json_get(f, "parameters"), RG_JSON_OBJECT),
                 "tool %zu is not {type: function, function: {name, description, parameters}}", i);
        for (size_t k = 0; k < i; k++) {
            size_t ol;
            const char *other = rg_json_str(rg_json_get(rg_json_get(rg_json_at(arr, k), "function"), "name"), &ol);
            FZ_CHECK(!(ol == nl && !memcmp(other, name, nl)), "two tools named %.*s", (int)nl, name);
        }
    }
    rg_json_free(doc);
}

static void check_placeholders(const rg_agent_tools *t) {
    for (size_t i = 0; i < t->n_cmds; i++) {
        const at_cmd *c = &t->cmds[i];
        FZ_CHECK(c->argc >= 1 && c->argv[0] && c->argv[c->argc] == NULL, "command %s: an empty argv", c->name);
        const rg_json *props = rg_json_get(rg_json_root(c->params), "properties");
        for (size_t a = 0; a < c->argc; a++) {
            size_t from = 0, b, e;
            while (at_next_placeholder(c->argv[a], &from, &b, &e))
                FZ_CHECK(rg_json_getn(props, c->argv[a] + b + 1, e - b - 2), "command %s: argv[%zu] %s names no "
                         "property", c->name, a, c->argv[a]);
        }
    }
}

static void check_refused_calls(rg_agent_tools *t) {
    char *result = NULL;
    size_t len = 0;
    rg_error err = {0};
    static const char *const nobody = "no-tool-is-named-so";
    rg_status st = rg_agent_tools_call(t, nobody, "{}", &result, &len, &err);
    FZ_CHECK(st == RG_ERR_NOT_FOUND && !result && !strncmp(err.msg, "tool 'no-tool-is-named-so': ", 28),
             "an unknown tool: status %d: %s", st, err.msg);
    if (t->n_cmds == 0) return;
    const char *name = t->cmds[0].name;
    char want[160];
    snprintf(want, sizeof want, "tool '%s': ", name);
    st = rg_agent_tools_call(t, name, "[1, 2]", &result, &len, &err);
    FZ_CHECK(st == RG_ERR_ARG && !result && !strncmp(err.msg, want, strlen(want)), "arguments not an object: "
             "status %d: %s", st, err.msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    rg_agent_tools *t = NULL;
    rg_error err = {0};
    const rg_status st = rg_agent_tools_parse(&t, path, text, size, &err);
    if (st != RG_OK) {
        FZ_CHECK(!t, "a refused file gave tools");
        check_refusal(st, &err, text, size);
        return 0;
    }
    FZ_CHECK(t, "RG_OK without tools");
    check_tools_json(t);
    check_placeholders(t);
    // deterministic: a second read gives the same JSON
    rg_agent_tools *t2 = NULL;
    FZ_CHECK(rg_agent_tools_parse(&t2, path, text, size, &err) == RG_OK, "a second read refused: %s", err.msg);
    size_t n1, n2;
    const char *j1 = rg_agent_tools_json(t, &n1), *j2 = rg_agent_tools_json(t2, &n2);
    FZ_CHECK(n1 == n2 && !memcmp(j1, j2, n1), "two reads of one text gave different tools");
    rg_agent_tools_free(t2);
    check_refused_calls(t);
    rg_agent_tools_free(t);
    return 0;
}
