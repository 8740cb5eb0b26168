// test_agent.c - the agent (src/agent/agent.h, agent_tools.h): the tools file read and refused with its line, a
// command's argv substitution, limits and failures, the loop on a scripted generator (calls and results in
// OpenAI's shape, a failed or refused call cut back to exactly the messages before it, max_calls, failures told to
// the model, the keep line's exact JSON), MCP tools through a fake server this test writes, and the real
// mcp-server-time when it is installed (loud SKIP without it, FAIL when RG_REQUIRE_MCP=1).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/agent_tools.h"
#include "agent/proc.h"
#include "base/error.h"
#include "base/json.h"
#include "agent_checks.h"
#include "rg_test.h"

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

static char tmp_dir[] = "/tmp/rg_test_agent_XXXXXX";
static char server_path[600];

static const char fake_server_py[] =
    "import json, sys\n"
    "def send(o): sys.stdout.write(json.dumps(o) + '\\n'); sys.stdout.flush()\n"
    "TOOLS = [{'name': 'echo', 'description': 'Echo the text back', 'inputSchema': {'type': 'object',\n"
    "          'properties': {'text': {'type': 'string'}}, 'required': ['text']}},\n"
    "         {'name': 'fail', 'description': 'Always fails', 'inputSchema': {'type': 'object'}}]\n"
    "for line in sys.stdin:\n"
    "    m = json.loads(line); mid = m.get('id'); meth = m.get('method')\n"
    "    if meth == 'initialize':\n"
    "        send({'jsonrpc': '2.0', 'id': mid, 'result': {'protocolVersion': '2025-06-18', 'capabilities': {},\n"
    "              'serverInfo': {'name': 'fake', 'version': '1'}}})\n"
    "    elif meth == 'tools/list': send({'jsonrpc': '2.0', 'id': mid, 'result': {'tools': TOOLS}})\n"
    "    elif meth == 'tools/call':\n"
    "        p = m['params']\n"
    "        if p['name'] == 'echo': r = {'content': [{'type': 'text', 'text': 'echo: ' + p['arguments']['text']}]}\n"
    "        else: r = {'content': [{'type': 'text', 'text': 'it broke'}], 'isError': True}\n"
    "        send({'jsonrpc': '2.0', 'id': mid, 'result': r})\n"
    "    elif mid is not None: send({'jsonrpc': '2.0', 'id': mid, 'error': {'code': -32601, 'message': 'no'}})\n";

static rg_agent_tools *parse_tools(const char *name, const char *text, rg_error *err) {
    rg_agent_tools *t = NULL;
    rg_agent_tools_parse(&t, name, text, strlen(text), err);
    return t;
}

// ---------------------------------------------------------------------------------------------------------------
// The tools file

static const char good_json[] =
    "{\n"
    "  \"commands\": [\n"
    "    {\"name\": \"list_files\", \"description\": \"List the files of a folder\", \"argv\": [\"ls\", \"-1\", \"{path}\"],\n"
    "     \"parameters\": {\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}}, \"required\": [\"path\"]},\n"
    "     \"cwd\": \"/tmp\", \"timeout_s\": 10, \"max_output\": 65536},\n"
    "    {\"name\": \"now\", \"argv\": [\"date\"]}\n"
    "  ]\n"
    "}\n";

static const char good_yaml[] =
    "# the same tools\n"
    "commands:\n"
    "  - name: list_files\n"
    "    description: List the files of a folder\n"
    "    argv: [ls, -1, \"{path}\"]\n"
    "    parameters: {type: object, properties: {path: {type: string}}, required: [path]}\n"
    "    cwd: /tmp\n"
    "    timeout_s: 10\n"
    "    max_output: 65536\n"
    "  - name: now\n"
    "    argv: [date]\n";

static const char want_tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"list_files\",\"description\":\"List the files of a folder\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\",\"description\":\"\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{}}}}]";

static void check_good(const char *name, const char *text) {
    rg_error err = {0};
    rg_agent_tools *t = parse_tools(name, text, &err);
    RG_REQUIRE(t, "%s: %s", name, err.msg);
    RG_CHECK(rg_agent_tools_count(t) == 2, "%s: %zu tools", name, rg_agent_tools_count(t));
    const char *json = rg_agent_tools_json(t, NULL);
    RG_CHECK(json && strcmp(json, want_tools_json) == 0, "%s: tools\n  got  %s\n  want %s", name, json, want_tools_json);
    rg_agent_tools_free(t);
}

static void test_tools_file_good(void) {
    check_good("good.json", good_json);
#ifdef RG_HAVE_YAML
    check_good("good.yaml", good_yaml);
#else
    printf("    (built without libyaml: the YAML file is not read)\n");
#endif
}

typedef struct bad_case {
    const char *text;
    const char *msg;  // a part of the message (which starts with the file name and line)
} bad_case;

static void check_bad(const char *name, const bad_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        rg_error err = {0};
        rg_agent_tools *t = parse_tools(name, cases[i].text, &err);
        RG_CHECK(!t && err.status == RG_ERR_FORMAT && strstr(err.msg, cases[i].msg),
                 "case %zu: status %d, message '%s' lacks '%s'", i, err.status, err.msg, cases[i].msg);
        rg_agent_tools_free(t);
    }
}

static void test_tools_file_bad_json(void) {
    static const bad_case cases[] = {
        {"{\"comands\": []}", "t.json:1: the file: unknown key 'comands' (known: mcp, commands)"},
        {"{\n\"commands\": [\n {\"name\": \"a\", \"argv\": [\"ls\"],\n  \"timeout\": 3}]}",
         "t.json:4: commands[0]: unknown key 'timeout' (known: name, description, argv, parameters, cwd, timeout_s, "
         "max_output)"},
        {"{\"commands\": [{\"name\": \"a\", \"argv\": \"ls\"}]}", "t.json:1: commands[0].argv must be a list, not a string"},
        {"{\"commands\": [\n{\"name\": \"a\"}]}", "t.json:2: commands[0]: the key 'argv' is missing"},
        {"{\"commands\": [{\"name\": \"a\", \"argv\": []}]}", "commands[0].argv is empty"},
        {"{\"commands\": [{\"name\": 5, \"argv\": [\"ls\"]}]}", "commands[0].name must be a string, not a number"},
        {"{\"commands\": [{\"name\": \"a\",\n \"argv\": [\"ls\",\n \"{dir}\"]}]}",
         "t.json:3: commands[0].argv[1] names 'dir', which is not one of parameters.properties"},
        {"{\"commands\": [{\"name\": \"a\", \"argv\": [\"ls\"], \"timeout_s\": 0}]}",
         "commands[0].timeout_s must be a whole number from 1 to 86400"},
        {"{\"commands\": [{\"name\": \"a\", \"argv\": [\"ls\"], \"max_output\": \"big\"}]}",
         "commands[0].max_output must be a whole number"},
        {"{\"commands\": [{\"name\": \"a\", \"argv\": [\"ls\"], \"parameters\": [1]}]}",
         "commands[0].parameters must be a mapping, not a list"},
        {"{\"commands\": [{\"name\": \"a\", \"argv\": [\"ls\"]},\n {\"name\": \"a\", \"argv\": [\"ls\"]}]}",
         "t.json:2: commands[1].name: 'a' is already the name of commands[0] (line 1)"},
        {"{\"mcp\": [{\"name\": \"time\"}]}", "mcp[0]: the key 'command' is missing"},
        {"{\"mcp\": [{\"name\": \"time\", \"command\": [\"x\"], \"env\": {}}]}", "mcp[0]: unknown key 'env'"},
        {"{\"mcp\": [], \"commands\": []}", "t.json:1: the file declares no tools"},
        {"{\"commands\": [}", "t.json: line 1, column 15"},
        {"{\"commands\": {}}", "commands must be a list, not a mapping"},
    };
    check_bad("t.json", cases, sizeof cases / sizeof *cases);
}

static void test_tools_file_bad_yaml(void) {
#ifndef RG_HAVE_YAML
    rg_error err = {0};
    RG_CHECK(!parse_tools("t.yaml", good_yaml, &err) && err.status == RG_ERR_UNSUPPORTED, "%s", err.msg);
    RG_SKIP("built without libyaml: YAML tools files are refused (checked)");
#else
    static const bad_case cases[] = {
        {"commands:\n  - name: a\n    argv: [ls]\n    timout_s: 3\n", "t.yaml:4: commands[0]: unknown key 'timout_s'"},
        {"mcp:\n  - name: time\n    command: python3\n", "t.yaml:3: mcp[0].command must be a list, not a string"},
        {"commands:\n  - name: a\n    argv: [ls]\n    parameters: {type: object}\n  - argv: [ls]\n",
         "t.yaml:5: commands[1]: the key 'name' is missing"},
        {"commands:\n  - name: a\n    argv: [ls, \"{x}\"]\n    parameters: {properties: {y: {type: string}}}\n",
         "t.yaml:3: commands[0].argv[1] names 'x'"},
        {"commands:\n  - name: a\n    argv: [ls]\n    timeout_s: ten\n", "t.yaml:4: commands[0].timeout_s must be a whole"},
        {"commands:\n  - name: a\n    argv: [ls]\n    name: b\n", "t.yaml:4: the key 'name' is given twice (first on line 2)"},
        {"commands: [\n", "t.yaml:2: YAML syntax error"},
        {"", "t.yaml: the file is empty"},
        {"- a\n- b\n", "t.yaml:1: the file must be a mapping, not a list"},
    };
    check_bad("t.yaml", cases, sizeof cases / sizeof *cases);
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// Commands

static const char exec_json[] =
    "{\"commands\": [\n"
    " {\"name\": \"say\", \"argv\": [\"printf\", \"[%s]\", \"{text}\", \"--n={n}\", \"{flag}\"],\n"
    "  \"parameters\": {\"type\": \"object\", \"properties\": {\"text\": {\"type\": \"string\"},\n"
    "    \"n\": {\"type\": \"integer\"}, \"flag\": {\"type\": \"boolean\"}}, \"required\": [\"text\"]}},\n"
    " {\"name\": \"nap\", \"argv\": [\"sleep\", \"{s}\"], \"timeout_s\": 1,\n"
    "  \"parameters\": {\"type\": \"object\", \"properties\": {\"s\": {\"type\": \"number\"}}}},\n"
    " {\"name\": \"flood\", \"argv\": [\"head\", \"-c\", \"100000\", \"/dev/zero\"], \"max_output\": 1000},\n"
    " {\"name\": \"oops\", \"argv\": [\"sh\", \"-c\", \"echo bad thing >&2; exit 3\"]},\n"
    " {\"name\": \"where\", \"argv\": [\"pwd\"], \"cwd\": \"/\"}\n"
    "]}\n";

typedef struct exec_case {
    const char *tool, *args;
    const char *result;  // the output, or NULL when the call fails
    const char *msg;     // the failure's message (a part)
} exec_case;

static void test_command_exec(void) {
    rg_error err = {0};
    rg_agent_tools *t = parse_tools("exec.json", exec_json, &err);
    RG_REQUIRE(t, "%s", err.msg);
    const exec_case cases[] = {
        // one argv element whatever the value holds; an absent optional argument leaves its element out
        {"say", "{\"text\": \"a b; rm -rf /tmp/x $(id) 'q'\"}", "[a b; rm -rf /tmp/x $(id) 'q']", NULL},
        {"say", "{\"text\": \"x\", \"n\": 3, \"flag\": true}", "[x][--n=3][true]", NULL},
        {"say", "{\"text\": \"\"}", "[]", NULL},
        {"where", "{}", "/\n", NULL},
        {"where", "", "/\n", NULL},
        {"say", "{}", NULL, "tool 'say': bad arguments: the required 'text' is missing"},
        {"say", "{\"text\": 1}", NULL, "tool 'say': bad arguments: 'text' must be a string, not number"},
        {"say", "{\"text\": \"x\", \"n\": 1.5}", NULL, "'n' must be an integer, not number"},
        {"say", "{\"text\": \"x\", \"color\": \"red\"}", NULL, "bad arguments: 'color' is not one of its parameters"},
        {"say", "[1]", NULL, "tool 'say': bad arguments: they must be a JSON object"},
        {"say", "{\"text\":", NULL, "tool 'say': bad arguments: not JSON"},
        {"nope", "{}", NULL, "tool 'nope': there is no such tool (the tools: say, nap, flood, oops, where)"},
        {"nap", "{\"s\": 5}", NULL, "tool 'nap': ran past its time limit of 1 s and was stopped"},
        {"flood", "{}", NULL, "tool 'flood': wrote more than its output limit of 1000 bytes and was stopped"},
        {"oops", "{}", NULL, "tool 'oops': the command exited with status 3: bad thing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const exec_case *c = &cases[i];
        char *result = NULL;
        size_t len = 0;
        rg_status st = rg_agent_tools_call(t, c->tool, c->args, &result, &len, &err);
        if (c->result) {
            RG_CHECK(st == RG_OK && result && strcmp(result, c->result) == 0 && len == strlen(c->result),
                     "%s %s: got '%s' (%s), want '%s'", c->tool, c->args, result ? result : "", st ? err.msg : "ok",
                     c->result);
        } else {
            RG_CHECK(st != RG_OK && !result && strstr(err.msg, c->msg), "%s %s: status %d '%s', want '%s'", c->tool,
                     c->args, st, err.msg, c->msg);
        }
        free(result);
    }
    rg_agent_tools_free(t);
}

// ---------------------------------------------------------------------------------------------------------------
// The loop on a scripted generator

typedef struct script {
    const char *const *replies;  // what each generation returns, in order
    size_t n, next;
    char seen[8][2048];          // each generation's conversation: "role:content|..." (calls as role+calls)
    size_t n_seen;
} script;

static rg_status scripted(void *user, const rg_chat_message *msgs, size_t n_msgs, const rg_json *tools,
                          rg_agent_gen *out, rg_error *err) {
    script *s = user;
    (void)tools;
    if (s->next >= s->n) return rg_fail(err, RG_ERR_ARG, "the script ran out (generation %zu)", s->next);
    if (s->n_seen < 8) {
        char *p = s->seen[s->n_seen++];
        size_t cap = sizeof s->seen[0], used = 0;
        p[0] = '\0';
        for (size_t i = 0; i < n_msgs; i++)
            used += (size_t)snprintf(p + used, used < cap ? cap - used : 0, "%.*s%s:%.*s|", (int)msgs[i].role_len,
                                     msgs[i].role, msgs[i].tool_calls ? "+calls" : "", (int)msgs[i].content_len,
                                     msgs[i].content);
    }
    const char *r = s->replies[s->next++];
    out->text = strdup(r);
    out->len = strlen(r);
    out->n_prompt = 100 + (int64_t)s->next;
    out->n_reused = (int64_t)s->next;
    return RG_OK;
}

// A fake executor: "broken" fails, anything else answers "NAME(ARGS)".
static rg_status fake_exec(void *user, const char *name, const char *args, char **result, size_t *len, rg_error *err) {
    (void)user;
    if (!strcmp(name, "broken")) return rg_fail(err, RG_ERR_IO, "tool 'broken': it broke");
    char buf[512];
    snprintf(buf, sizeof buf, "%s(%s)", name, args);
    *result = strdup(buf);
    *len = strlen(buf);
    return RG_OK;
}

static bool refuse_broken_too(void *user, const char *name, const char *args, size_t index, size_t n) {
    (void)user, (void)args, (void)index, (void)n;
    return strcmp(name, "danger") != 0;
}

#define CALL(name, args) "<tool_call>\n{\"name\": \"" name "\", \"arguments\": " args "}\n</tool_call>"

static const char loop_tools[] = "[{\"type\":\"function\",\"function\":{\"name\":\"lookup\",\"description\":\"\","
                                 "\"parameters\":{\"type\":\"object\"}}}]";

static rg_agent *make_agent(script *s, int max_calls, bool to_model, rg_agent_confirm_fn confirm) {
    rg_agent_opts o = {.family = RG_CHAT_CHATML, .tools_json = loop_tools, .system = "Be brief.",
                       .max_calls = max_calls, .failures_to_model = to_model, .generate = scripted, .generate_user = s,
                       .execute = fake_exec, .confirm = confirm};
    rg_agent *a = NULL;
    rg_error err = {0};
    RG_CHECK(rg_agent_create(&a, &o, &err) == RG_OK, "%s", err.msg);
    return a;
}

// The conversation as "role:content|" with "+calls=JSON" and "@id" marks.
static void conversation(const rg_agent *a, char *buf, size_t cap) {
    size_t n, used = 0;
    const rg_agent_msg *m = rg_agent_messages(a, &n);
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(buf + used, used < cap ? cap - used : 0, "%s%s%s%s%s:%s|", m[i].role,
                                 m[i].tool_calls ? "+calls=" : "", m[i].tool_calls ? m[i].tool_calls : "",
                                 m[i].tool_call_id ? "@" : "", m[i].tool_call_id ? m[i].tool_call_id : "", m[i].content);
}

static void check_conversation(const rg_agent *a, const char *want) {
    char got[4096];
    conversation(a, got, sizeof got);
    RG_CHECK(strcmp(got, want) == 0, "conversation\n  got  %s\n  want %s", got, want);
}

static void test_loop_call_and_answer(void) {
    const char *const replies[] = {"Let me look.\n" CALL("lookup", "{\"q\": \"tokyo\"}"), "It is 9:41 in Tokyo."};
    script s = {.replies = replies, .n = 2};
    rg_agent *a = make_agent(&s, 0, false, NULL);
    RG_REQUIRE(a, "no agent");
    rg_agent_turn t;
    rg_error err = {0};
    RG_REQUIRE(rg_agent_turn_run(a, "What time is it?", 16, &t, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.end == RG_AGENT_ANSWERED && strcmp(t.answer, "It is 9:41 in Tokyo.") == 0 && !t.failure, "end %s '%s'",
             rg_agent_end_name(t.end), t.answer);
    RG_CHECK(t.n_calls == 1 && !strcmp(t.calls[0].name, "lookup") && !strcmp(t.calls[0].arguments, "{\"q\":\"tokyo\"}") &&
             t.calls[0].result && !strcmp(t.calls[0].result, "lookup({\"q\":\"tokyo\"})") && !t.calls[0].error,
             "calls %zu", t.n_calls);
    RG_CHECK(t.n_gen == 2 && t.n_prompt[1] == 102 && t.n_reused[1] == 2, "generations %zu", t.n_gen);
    check_conversation(a, "system:Be brief.|user:What time is it?|"
                          "assistant+calls=[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"lookup\","
                          "\"arguments\":\"{\\\"q\\\":\\\"tokyo\\\"}\"}}]:Let me look.|"
                          "tool@call_0:lookup({\"q\":\"tokyo\"})|assistant:It is 9:41 in Tokyo.|");
    RG_CHECK(!strcmp(s.seen[1], "system:Be brief.|user:What time is it?|assistant+calls:Let me look.|"
                                "tool:lookup({\"q\":\"tokyo\"})|"), "the second generation saw %s", s.seen[1]);
    // the keep line, exactly
    size_t len;
    char *line = rg_agent_keep_line(a, &len);
    const char *want =
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"lookup\",\"description\":\"\",\"parameters\":"
        "{\"type\":\"object\"}}}],\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
        "\"content\":\"What time is it?\"},{\"role\":\"assistant\",\"content\":\"Let me look.\",\"tool_calls\":"
        "[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"lookup\",\"arguments\":"
        "\"{\\\"q\\\":\\\"tokyo\\\"}\"}}]},{\"role\":\"tool\",\"content\":\"lookup({\\\"q\\\":\\\"tokyo\\\"})\","
        "\"tool_call_id\":\"call_0\"},{\"role\":\"assistant\",\"content\":\"It is 9:41 in Tokyo.\"}]}\n";
    RG_CHECK(line && strcmp(line, want) == 0 && len == strlen(want), "keep line\n  got  %s  want %s", line, want);
    free(line);
    // appended to a file, twice: two lines
    char path[700];
    snprintf(path, sizeof path, "%s/kept.jsonl", tmp_dir);
    RG_CHECK(rg_agent_keep_append(a, path, &err) == RG_OK && rg_agent_keep_append(a, path, &err) == RG_OK, "%s", err.msg);
    FILE *f = fopen(path, "r");
    char buf[4096];
    int lines = 0;
    while (f && fgets(buf, sizeof buf, f)) lines += strcmp(buf, want) == 0;
    if (f) fclose(f);
    unlink(path);
    RG_CHECK(lines == 2, "%d good lines in the keep file", lines);
    rg_agent_turn_free(&t);
    rg_agent_free(a);
}

static void test_loop_failed_call_cuts_back(void) {
    // turn 1: a call that works, then one that fails: the conversation keeps the first call and loses the second
    const char *const replies[] = {CALL("lookup", "{}"), "Checking.\n" CALL("broken", "{\"x\": 1}"),
                                   CALL("lookup", "{\"again\": true}"), "Done."};
    script s = {.replies = replies, .n = 4};
    rg_agent *a = make_agent(&s, 0, false, NULL);
    RG_REQUIRE(a, "no agent");
    rg_agent_turn t;
    rg_error err = {0};
    RG_REQUIRE(rg_agent_turn_run(a, "Go", 2, &t, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.end == RG_AGENT_FAILED && t.failure && !strcmp(t.failure, "tool 'broken': it broke") && !strcmp(t.answer, ""),
             "end %s failure %s", rg_agent_end_name(t.end), t.failure);
    RG_CHECK(t.n_calls == 2 && t.calls[1].error && !t.calls[1].result, "calls %zu", t.n_calls);
    const char *before = "system:Be brief.|user:Go|assistant+calls=[{\"id\":\"call_0\",\"type\":\"function\",\"function\":"
                         "{\"name\":\"lookup\",\"arguments\":\"{}\"}}]:|tool@call_0:lookup({})|";
    check_conversation(a, before);
    RG_CHECK(!strcmp(s.seen[1], "system:Be brief.|user:Go|assistant+calls:|tool:lookup({})|"), "%s", s.seen[1]);
    rg_agent_turn_free(&t);
    // the next turn's generation sees exactly that conversation and the new line; ids go on from call_1
    RG_REQUIRE(rg_agent_turn_run(a, "Try again", 9, &t, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(!strcmp(s.seen[2], "system:Be brief.|user:Go|assistant+calls:|tool:lookup({})|user:Try again|"), "%s",
             s.seen[2]);
    RG_CHECK(t.end == RG_AGENT_ANSWERED && !strcmp(t.answer, "Done."), "end %s", rg_agent_end_name(t.end));
    char got[4096];
    conversation(a, got, sizeof got);
    RG_CHECK(strstr(got, "\"id\":\"call_1\"") && strstr(got, "tool@call_1:"), "ids: %s", got);
    rg_agent_turn_free(&t);
    rg_agent_free(a);
}

static void test_loop_refused(void) {
    const char *const replies[] = {CALL("lookup", "{}") "\n" CALL("danger", "{}")};
    script s = {.replies = replies, .n = 1};
    rg_agent *a = make_agent(&s, 0, false, refuse_broken_too);
    RG_REQUIRE(a, "no agent");
    rg_agent_turn t;
    rg_error err = {0};
    RG_REQUIRE(rg_agent_turn_run(a, "Go", 2, &t, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.end == RG_AGENT_REFUSED && t.failure && strstr(t.failure, "tool 'danger': the user refused this call"),
             "end %s failure %s", rg_agent_end_name(t.end), t.failure);
    // the whole reply is cut: the first call's result too
    check_conversation(a, "system:Be brief.|user:Go|");
    RG_CHECK(t.n_calls == 2 && t.calls[0].result && t.calls[1].error, "calls %zu", t.n_calls);
    rg_agent_turn_free(&t);
    rg_agent_free(a);
}

static void test_loop_failures_to_model(void) {
    const char *const replies[] = {CALL("broken", "{}"), "Sorry, the tool is down."};
    script s = {.replies = replies, .n = 2};
    rg_agent *a = make_agent(&s, 0, true, NULL);
    RG_REQUIRE(a, "no agent");
    rg_agent_turn t;
    rg_error err = {0};
    RG_REQUIRE(rg_agent_turn_run(a, "Go", 2, &t, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.end == RG_AGENT_ANSWERED && !strcmp(t.answer, "Sorry, the tool is down."), "end %s",
             rg_agent_end_name(t.end));
    check_conversation(a, "system:Be brief.|user:Go|assistant+calls=[{\"id\":\"call_0\",\"type\":\"function\","
                          "\"function\":{\"name\":\"broken\",\"arguments\":\"{}\"}}]:|"
                          "tool@call_0:error: tool 'broken': it broke|assistant:Sorry, the tool is down.|");
    rg_agent_turn_free(&t);
    rg_agent_free(a);
}

static void test_loop_max_calls(void) {
    const char *const replies[] = {CALL("lookup", "{\"n\": 1}"), CALL("lookup", "{\"n\": 2}"), CALL("lookup", "{\"n\": 3}")};
    script s = {.replies = replies, .n = 3};
    rg_agent *a = make_agent(&s, 2, false, NULL);
    RG_REQUIRE(a, "no agent");
    rg_agent_turn t;
    rg_error err = {0};
    RG_REQUIRE(rg_agent_turn_run(a, "Go", 2, &t, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.end == RG_AGENT_MAX_CALLS && t.failure && strstr(t.failure, "at most 2"), "end %s: %s",
             rg_agent_end_name(t.end), t.failure);
    RG_CHECK(t.n_calls == 3 && t.calls[1].result && !t.calls[2].result && t.calls[2].error, "calls %zu", t.n_calls);
    char got[4096];
    conversation(a, got, sizeof got);
    RG_CHECK(strstr(got, "tool@call_1:lookup({\"n\":2})|") && !strstr(got, "call_2"), "%s", got);
    rg_agent_turn_free(&t);
    rg_agent_free(a);
}

static void test_loop_unparsable_and_errors(void) {
    const char *const replies[] = {"<tool_call>\n{\"name\": \"lookup\", \"arguments\": {oops}}\n</tool_call>"};
    script s = {.replies = replies, .n = 1};
    rg_agent *a = make_agent(&s, 0, false, NULL);
    RG_REQUIRE(a, "no agent");
    rg_agent_turn t;
    rg_error err = {0};
    RG_REQUIRE(rg_agent_turn_run(a, "Go", 2, &t, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.end == RG_AGENT_FAILED && t.failure && strstr(t.failure, "the model's tool call does not parse"), "%s",
             t.failure);
    check_conversation(a, "system:Be brief.|user:Go|");
    rg_agent_turn_free(&t);
    // a generator that fails: an error, and the conversation as before the turn
    RG_CHECK(rg_agent_turn_run(a, "Again", 5, &t, &err) == RG_ERR_ARG && strstr(err.msg, "the script ran out"), "%s",
             err.msg);
    check_conversation(a, "system:Be brief.|user:Go|");
    rg_agent_free(a);
}

static void test_loop_seeded(void) {
    // a server's request history pushed first: a call of its own, its result; new ids go on after it
    const char *const replies[] = {CALL("lookup", "{}"), "Both done."};
    script s = {.replies = replies, .n = 2};
    rg_agent *a = make_agent(&s, 0, false, NULL);
    RG_REQUIRE(a, "no agent");
    rg_error err = {0};
    const char *calls_text = "[{\"id\":\"abc\",\"type\":\"function\",\"function\":{\"name\":\"lookup\","
                             "\"arguments\":\"{}\"}}]";
    rg_json_doc *calls;
    RG_REQUIRE(rg_json_parse(&calls, calls_text, strlen(calls_text), NULL, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(rg_agent_push(a, "user", "First", 5, NULL, NULL, NULL, &err) == RG_OK &&
             rg_agent_push(a, "assistant", "", 0, rg_json_root(calls), NULL, NULL, &err) == RG_OK &&
             rg_agent_push(a, "tool", "one", 3, NULL, "abc", "lookup", &err) == RG_OK, "%s", err.msg);
    RG_CHECK(rg_agent_push(a, "robot", "x", 1, NULL, NULL, NULL, &err) == RG_ERR_ARG && strstr(err.msg, "role 'robot'"),
             "%s", err.msg);
    RG_CHECK(rg_agent_push(a, "user", "x", 1, rg_json_root(calls), NULL, NULL, &err) == RG_ERR_ARG, "calls on a user");
    rg_json_free(calls);
    rg_agent_turn t;
    RG_REQUIRE(rg_agent_turn_run(a, "Second", 6, &t, &err) == RG_OK, "%s", err.msg);
    check_conversation(a, "system:Be brief.|user:First|assistant+calls=" "[{\"id\":\"abc\",\"type\":\"function\","
                          "\"function\":{\"name\":\"lookup\",\"arguments\":\"{}\"}}]:|tool@abc:one|user:Second|"
                          "assistant+calls=[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
                          "\"lookup\",\"arguments\":\"{}\"}}]:|tool@call_1:lookup({})|assistant:Both done.|");
    rg_agent_turn_free(&t);
    rg_agent_free(a);
}

// ---------------------------------------------------------------------------------------------------------------
// MCP tools

static void test_mcp_tools_fake(void) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"mcp\": [{\"name\": \"fake\", \"command\": [\"python3\", \"%s\"], \"timeout_s\": 20}],\n"
             " \"commands\": [{\"name\": \"where\", \"argv\": [\"pwd\"], \"cwd\": \"/\"}]}\n", server_path);
    rg_error err = {0};
    rg_agent_tools *t = parse_tools("mcp.json", text, &err);
    RG_REQUIRE(t, "%s", err.msg);
    RG_CHECK(rg_agent_tools_count(t) == 1, "%zu tools before the start", rg_agent_tools_count(t));
    RG_REQUIRE(rg_agent_tools_start(t, NULL, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(rg_agent_tools_count(t) == 3, "%zu tools", rg_agent_tools_count(t));
    const char *json = rg_agent_tools_json(t, NULL);
    RG_CHECK(json && strstr(json, "{\"type\":\"function\",\"function\":{\"name\":\"echo\",\"description\":\"Echo the "
                                  "text back\",\"parameters\":{\"type\":\"object\"") &&
             strstr(json, "\"name\":\"where\""), "tools %s", json);
    char *r = NULL;
    size_t len;
    RG_CHECK(rg_agent_tools_call(t, "echo", "{\"text\":\"hi there\"}", &r, &len, &err) == RG_OK && r &&
             !strcmp(r, "echo: hi there"), "echo: %s", r ? r : err.msg);
    free(r);
    RG_CHECK(rg_agent_tools_call(t, "fail", "{}", &r, &len, &err) != RG_OK &&
             strstr(err.msg, "tool 'fail': the tool reported an error: it broke"), "%s", err.msg);
    RG_CHECK(rg_agent_tools_call(t, "where", "{}", &r, &len, &err) == RG_OK && r && !strcmp(r, "/\n"), "where");
    free(r);
    rg_agent_tools_free(t);
    // `tools` offers a part of the server's tools, and each must be one it lists
    snprintf(text, sizeof text, "{\"mcp\": [{\"name\": \"fake\", \"command\": [\"python3\", \"%s\"],\n"
             " \"tools\": [\"fail\"]}]}", server_path);
    RG_REQUIRE((t = parse_tools("only.json", text, &err)), "%s", err.msg);
    RG_CHECK(rg_agent_tools_start(t, NULL, &err) == RG_OK && rg_agent_tools_count(t) == 1, "%s", err.msg);
    json = rg_agent_tools_json(t, NULL);
    RG_CHECK(json && strstr(json, "\"name\":\"fail\"") && !strstr(json, "echo"), "tools %s", json);
    RG_CHECK(rg_agent_tools_call(t, "echo", "{\"text\":\"x\"}", &r, &len, &err) == RG_ERR_NOT_FOUND &&
             strstr(err.msg, "tool 'echo': there is no such tool (the tools: fail)"), "%s", err.msg);
    rg_agent_tools_free(t);
    snprintf(text, sizeof text, "{\"mcp\": [{\"name\": \"fake\", \"command\": [\"python3\", \"%s\"],\n"
             " \"tools\": [\"echo\", \"clock\"]}]}", server_path);
    RG_REQUIRE((t = parse_tools("only.json", text, &err)), "%s", err.msg);
    RG_CHECK(rg_agent_tools_start(t, NULL, &err) == RG_ERR_NOT_FOUND &&
             strstr(err.msg, "only.json:2: mcp server 'fake' has no tool 'clock' (it lists 2)"), "%s", err.msg);
    rg_agent_tools_free(t);
    // a server that cannot start: the error names the file's line and the server
    rg_agent_tools *bad = parse_tools("bad.json", "{\n\"mcp\": [{\"name\": \"gone\", \"command\": [\"rg-no-such-server\"]}]}",
                                      &err);
    RG_REQUIRE(bad, "%s", err.msg);
    RG_CHECK(rg_agent_tools_start(bad, NULL, &err) != RG_OK && strstr(err.msg, "bad.json:2: mcp server 'gone'"), "%s",
             err.msg);
    rg_agent_tools_free(bad);
}

static bool mcp_server_time_installed(void) {
    rg_proc_opts o = {.argv = ARGV("python3", "-m", "mcp_server_time", "--help"), .timeout_ms = 30000};
    rg_proc_result r;
    rg_error err = {0};
    bool ok = rg_proc_run(&o, &r, &err) == RG_OK && r.exit_code == 0;
    rg_proc_result_free(&r);
    return ok;
}

static rg_status tools_exec(void *user, const char *name, const char *args, char **result, size_t *len, rg_error *err) {
    return rg_agent_tools_call(user, name, args, result, len, err);
}

static void test_mcp_real_time_server(void) {
    if (!mcp_server_time_installed()) {
        const char *req = getenv("RG_REQUIRE_MCP");
        printf("    SKIP SKIP SKIP: mcp-server-time is not installed (python3 -m pip install mcp-server-time); "
               "the real MCP server is NOT tested\n");
        RG_REQUIRE(!(req && strcmp(req, "1") == 0), "RG_REQUIRE_MCP=1 and mcp-server-time is not importable");
        RG_SKIP("mcp-server-time not installed");
    }
    const char *text = "{\"mcp\": [{\"name\": \"time\", \"command\": [\"python3\", \"-m\", \"mcp_server_time\", "
                       "\"--local-timezone\", \"UTC\"]}]}";
    rg_error err = {0};
    rg_agent_tools *t = parse_tools("time.json", text, &err);
    RG_REQUIRE(t, "%s", err.msg);
    RG_REQUIRE(rg_agent_tools_start(t, NULL, &err) == RG_OK, "%s", err.msg);
    const char *json = rg_agent_tools_json(t, NULL);
    RG_CHECK(json && strstr(json, "\"name\":\"get_current_time\""), "tools %s", json);
    // the loop over the real tool: a scripted model calls it
    const char *const replies[] = {CALL("get_current_time", "{\"timezone\": \"Asia/Tokyo\"}"), "Here it is."};
    script s = {.replies = replies, .n = 2};
    rg_agent_opts o = {.family = RG_CHAT_CHATML, .tools_json = json, .generate = scripted, .generate_user = &s,
                       .execute = tools_exec, .execute_user = t};
    rg_agent *a = NULL;
    RG_REQUIRE(rg_agent_create(&a, &o, &err) == RG_OK, "%s", err.msg);
    rg_agent_turn turn;
    RG_REQUIRE(rg_agent_turn_run(a, "Time in Tokyo?", 14, &turn, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(turn.end == RG_AGENT_ANSWERED && turn.n_calls == 1 && turn.calls[0].result &&
             strstr(turn.calls[0].result, "\"timezone\": \"Asia/Tokyo\"") && strstr(turn.calls[0].result, "datetime"),
             "end %s result %s", rg_agent_end_name(turn.end), turn.n_calls ? turn.calls[0].result : "");
    rg_agent_turn_free(&turn);
    rg_agent_free(a);
    rg_agent_tools_free(t);
}

// ---------------------------------------------------------------------------------------------------------------

static const rg_test_case cases[] = {
    RG_TEST(test_tools_file_good),
    RG_TEST(test_tools_file_bad_json),
    RG_TEST(test_tools_file_bad_yaml),
    RG_TEST(test_command_exec),
    RG_TEST(test_loop_call_and_answer),
    RG_TEST(test_loop_failed_call_cuts_back),
    RG_TEST(test_loop_refused),
    RG_TEST(test_loop_failures_to_model),
    RG_TEST(test_loop_max_calls),
    RG_TEST(test_loop_unparsable_and_errors),
    RG_TEST(test_loop_seeded),
    RG_TEST(test_mcp_tools_fake),
    RG_TEST(test_mcp_real_time_server),
    RG_TEST(test_no_leaks),  // last: nothing left behind
    {0},
};

int main(int argc, char **argv) {
    return agent_test_main(argc, argv, cases, tmp_dir, fake_server_py, server_path, sizeof server_path);
}
