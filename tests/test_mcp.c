// test_mcp.c - the MCP client (src/agent/mcp.h) against a fake server this test writes (a Python
// script: the handshake it checks, tools over pages, and tools that misbehave on purpose), then
// against the real `mcp-server-time` (PyPI) when it is installed: loud SKIP without it, FAIL when
// RG_REQUIRE_MCP=1 (CI installs it from tests/python/requirements.txt).
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/mcp.h"
#include "agent/proc.h"
#include "base/json.h"
#include "agent_checks.h"
#include "rg_test.h"

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

// The fake server. argv[1] is its mode: "ok", "paged" (one tool a page), "badversion",
// "oldversion", "die_at_init". It answers initialize with an error when the client's params are
// not what the spec asks, and tools/list before notifications/initialized with an error.
static const char fake_server_py[] =
    "import json, os, sys, time\n"
    "mode = sys.argv[1]\n"
    "def send(obj):\n"
    "    sys.stdout.write(json.dumps(obj) + '\\n'); sys.stdout.flush()\n"
    "def recv():\n"
    "    line = sys.stdin.readline()\n"
    "    if not line: sys.exit(0)\n"
    "    return json.loads(line)\n"
    "def text(s): return {'content': [{'type': 'text', 'text': s}]}\n"
    "TOOLS = [\n"
    "    {'name': 'echo', 'description': 'Echo the text back',\n"
    "     'inputSchema': {'type': 'object', 'properties': {'text': {'type': 'string'}}, 'required': ['text']}},\n"
    "    {'name': 'add', 'description': 'Add a and b', 'inputSchema': {'type': 'object', 'properties':\n"
    "     {'a': {'type': 'number'}, 'b': {'type': 'number'}}}},\n"
    "    {'name': 'nodesc', 'inputSchema': {'type': 'object'}},\n"
    "]\n"
    "initialized = False\n"
    "cancelled = []\n"
    "def check_init(msg):\n"
    "    p = msg.get('params', {})\n"
    "    bad = []\n"
    "    if msg.get('jsonrpc') != '2.0': bad.append('jsonrpc')\n"
    "    if p.get('protocolVersion') != '2025-06-18': bad.append('protocolVersion')\n"
    "    if p.get('capabilities') != {}: bad.append('capabilities')\n"
    "    ci = p.get('clientInfo', {})\n"
    "    if ci.get('name') != 'retrograd' or not isinstance(ci.get('version'), str): bad.append('clientInfo')\n"
    "    return bad\n"
    "def server_requests():\n"
    "    # a notification, an answer to an id never asked, a ping and an unknown request\n"
    "    send({'jsonrpc': '2.0', 'method': 'notifications/message', 'params': {'level': 'info', 'data': 'hi'}})\n"
    "    send({'jsonrpc': '2.0', 'id': 999, 'result': {}})\n"
    "    send({'jsonrpc': '2.0', 'id': 'srv-1', 'method': 'ping'})\n"
    "    r = recv()\n"
    "    if r != {'jsonrpc': '2.0', 'id': 'srv-1', 'result': {}}: return 'bad ping answer: ' + json.dumps(r)\n"
    "    send({'jsonrpc': '2.0', 'id': 7, 'method': 'roots/list'})\n"
    "    r = recv()\n"
    "    if r.get('id') != 7 or r.get('error', {}).get('code') != -32601: return 'bad roots/list answer: ' + json.dumps(r)\n"
    "    return 'server requests answered'\n"
    "def call(name, args, mid):\n"
    "    if name == 'echo': return text(args['text'])\n"
    "    if name == 'add':\n"
    "        s = args['a'] + args['b']\n"
    "        return {'content': [{'type': 'text', 'text': str(s)}], 'structuredContent': {'sum': s}}\n"
    "    if name == 'fail': return {'content': [{'type': 'text', 'text': 'it failed'}], 'isError': True}\n"
    "    if name == 'multi': return {'content': [{'type': 'text', 'text': 'one'},\n"
    "        {'type': 'image', 'data': 'AAAA', 'mimeType': 'image/png'}, {'type': 'text', 'text': 'two'}]}\n"
    "    if name == 'requests': return text(server_requests())\n"
    "    if name == 'getenv': return text(os.environ.get('RG_FAKE_VAR', '(unset)'))\n"
    "    if name == 'cancelled': return text('cancelled: ' + ','.join(str(c) for c in cancelled))\n"
    "    if name == 'sleep':\n"
    "        time.sleep(args['seconds']); return text('slept')\n"
    "    if name == 'garbage':\n"
    "        sys.stdout.write('this is not json\\n'); sys.stdout.flush(); return text('after garbage')\n"
    "    if name == 'huge': return text('x' * 2000000)\n"
    "    if name == 'die':\n"
    "        sys.stderr.write('crashed hard\\n'); sys.stderr.flush(); os._exit(3)\n"
    "    return None\n"
    "while True:\n"
    "    msg = recv()\n"
    "    method, mid = msg.get('method'), msg.get('id')\n"
    "    if method == 'initialize':\n"
    "        if mode == 'die_at_init':\n"
    "            sys.stderr.write('fatal: cannot start\\n'); sys.exit(7)\n"
    "        bad = check_init(msg)\n"
    "        if bad:\n"
    "            send({'jsonrpc': '2.0', 'id': mid, 'error': {'code': -32602, 'message': 'bad ' + ','.join(bad)}})\n"
    "            continue\n"
    "        v = {'badversion': '1999-01-01', 'oldversion': '2024-11-05'}.get(mode, '2025-06-18')\n"
    "        send({'jsonrpc': '2.0', 'id': mid, 'result': {'protocolVersion': v, 'capabilities': {'tools': {}},\n"
    "              'serverInfo': {'name': 'fake', 'version': '1.2'}}})\n"
    "    elif method == 'notifications/initialized':\n"
    "        initialized = True\n"
    "    elif method == 'notifications/cancelled':\n"
    "        cancelled.append(msg['params']['requestId'])\n"
    "    elif not initialized:\n"
    "        send({'jsonrpc': '2.0', 'id': mid, 'error': {'code': -32002, 'message': 'not initialized'}})\n"
    "    elif method == 'tools/list':\n"
    "        if mode != 'paged':\n"
    "            send({'jsonrpc': '2.0', 'id': mid, 'result': {'tools': TOOLS}}); continue\n"
    "        page = int(msg.get('params', {}).get('cursor', 'p0')[1:])\n"
    "        res = {'tools': TOOLS[page:page + 1]}\n"
    "        if page + 1 < len(TOOLS): res['nextCursor'] = 'p%d' % (page + 1)\n"
    "        send({'jsonrpc': '2.0', 'id': mid, 'result': res})\n"
    "    elif method == 'tools/call':\n"
    "        p = msg['params']\n"
    "        r = call(p['name'], p.get('arguments', {}), mid)\n"
    "        if r is None:\n"
    "            send({'jsonrpc': '2.0', 'id': mid, 'error': {'code': -32602, 'message': 'Unknown tool: ' + p['name']}})\n"
    "        else:\n"
    "            send({'jsonrpc': '2.0', 'id': mid, 'result': r})\n"
    "    elif mid is not None:\n"
    "        send({'jsonrpc': '2.0', 'id': mid, 'error': {'code': -32601, 'message': 'Method not found'}})\n";

static char tmp_dir[] = "/tmp/rg_test_mcp_XXXXXX";
static char server_path[600];
static rg_mcp *connect_fake(const char *mode, size_t max_line, rg_error *err) {
    rg_mcp_opts o = {.name = "fake", .argv = ARGV("python3", server_path, mode), .client_version = "0.1",
                     .init_timeout_ms = 20000, .call_timeout_ms = 20000, .max_line = max_line};
    rg_mcp *m = NULL;
    rg_mcp_connect(&m, &o, err);
    return m;
}

// Calls a tool that must succeed; its text (malloc'd) or NULL after a failed check.
static char *call_text(rg_mcp *m, const char *tool, const char *args, bool *is_error) {
    rg_mcp_result r;
    rg_error err = {0};
    rg_status st = rg_mcp_call_tool(m, tool, args, 0, &r, &err);
    RG_CHECK(st == RG_OK, "%s %s: %s", tool, args, err.msg);
    if (st) return NULL;
    if (is_error) *is_error = r.is_error;
    char *t = r.text;
    r.text = NULL;
    rg_mcp_result_free(&r);
    return t;
}

static void check_text(rg_mcp *m, const char *tool, const char *args, const char *want) {
    char *t = call_text(m, tool, args, NULL);
    RG_CHECK(t && strcmp(t, want) == 0, "%s %s gave '%s', want '%s'", tool, args, t ? t : "(error)", want);
    free(t);
}

// ---------------------------------------------------------------------------
// Against the fake server

static const char *const fake_names[] = {"echo", "add", "nodesc"};
static const char *const fake_descriptions[] = {"Echo the text back", "Add a and b", ""};

static void check_fake_tools(const rg_mcp_tools *t) {
    RG_REQUIRE(t->n == 3, "%zu tools, want 3", t->n);
    for (size_t i = 0; i < 3; i++) {
        RG_CHECK(strcmp(t->items[i].name, fake_names[i]) == 0, "tool %zu is '%s'", i, t->items[i].name);
        RG_CHECK(strcmp(t->items[i].description, fake_descriptions[i]) == 0, "tool %zu: '%s'", i, t->items[i].description);
    }
    RG_CHECK(strcmp(t->items[2].input_schema, "{\"type\":\"object\"}") == 0, "schema '%s'", t->items[2].input_schema);
    RG_CHECK(strstr(t->items[0].input_schema, "\"required\":[\"text\"]"), "schema '%s'", t->items[0].input_schema);
}

static void test_mcp_protocol(void) {
    rg_error err = {0};
    rg_mcp *m = connect_fake("ok", 0, &err);
    RG_REQUIRE(m, "connect: %s", err.msg);
    RG_CHECK(strcmp(rg_mcp_protocol_version(m), "2025-06-18") == 0, "version %s", rg_mcp_protocol_version(m));
    RG_CHECK(strcmp(rg_mcp_server_info(m), "fake 1.2") == 0, "server info '%s'", rg_mcp_server_info(m));
    RG_CHECK(strcmp(rg_mcp_name(m), "fake") == 0, "name '%s'", rg_mcp_name(m));
    rg_mcp_tools t;
    RG_CHECK(rg_mcp_list_tools(m, &t, &err) == RG_OK, "tools/list: %s", err.msg);
    check_fake_tools(&t);
    rg_mcp_tools_free(&t);
    check_text(m, "echo", "{\"text\":\"h\\u00e9llo \\\"q\\\"\\n\"}", "h\xc3\xa9llo \"q\"\n");
    // a notification, an answer to an unknown id, a ping and roots/list while the call waits
    check_text(m, "requests", NULL, "server requests answered");
    check_text(m, "echo", "{\"text\":\"still in step\"}", "still in step");
    rg_mcp_close(m);
}

static void test_mcp_pagination(void) {
    rg_error err = {0};
    rg_mcp *m = connect_fake("paged", 0, &err);
    RG_REQUIRE(m, "connect: %s", err.msg);
    rg_mcp_tools t;
    RG_CHECK(rg_mcp_list_tools(m, &t, &err) == RG_OK, "tools/list: %s", err.msg);
    check_fake_tools(&t);
    rg_mcp_tools_free(&t);
    rg_mcp_close(m);
}

static void test_mcp_results(void) {
    rg_error err = {0};
    rg_mcp *m = connect_fake("ok", 0, &err);
    RG_REQUIRE(m, "connect: %s", err.msg);
    rg_mcp_result r;
    RG_REQUIRE(rg_mcp_call_tool(m, "add", "{\"a\":2,\"b\":3}", 0, &r, &err) == RG_OK, "add: %s", err.msg);
    RG_CHECK(strcmp(r.text, "5") == 0 && !r.is_error, "add gave '%s' (is_error %d)", r.text, r.is_error);
    RG_CHECK(r.structured && strcmp(r.structured, "{\"sum\":5}") == 0, "structured '%s'", r.structured ? r.structured : "NULL");
    rg_mcp_result_free(&r);
    bool is_error = false;
    char *t = call_text(m, "fail", "{}", &is_error);
    RG_CHECK(t && strcmp(t, "it failed") == 0 && is_error, "fail gave '%s' is_error %d", t ? t : "", is_error);
    free(t);
    check_text(m, "multi", "{}", "one\n[image content image/png]\ntwo");
    rg_mcp_close(m);
}

typedef struct call_error_case {
    const char *tool, *args;
    rg_status status;
    const char *msg;  // a part of the message
} call_error_case;

static void test_mcp_call_errors(void) {
    rg_error err = {0};
    rg_mcp *m = connect_fake("ok", 1 << 20, &err);
    RG_REQUIRE(m, "connect: %s", err.msg);
    const call_error_case cases[] = {
        {"nope", "{}", RG_ERR_ARG, "mcp server 'fake': tools/call 'nope': error -32602: Unknown tool: nope"},
        {"echo", "[1]", RG_ERR_ARG, "tools/call 'echo': arguments: the arguments must be a JSON object (got array)"},
        {"echo", "{\"text\":", RG_ERR_FORMAT, "tools/call 'echo': arguments: line 1"},
        {"garbage", "{}", RG_ERR_FORMAT, "mcp server 'fake': tools/call 'garbage': the server wrote a line that is not JSON"},
        {"huge", "{}", RG_ERR_FORMAT, "mcp server 'fake': tools/call 'huge': 'python3' wrote a line of more than 1048576 bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const call_error_case *c = &cases[i];
        rg_mcp_result r;
        rg_status st = rg_mcp_call_tool(m, c->tool, c->args, 0, &r, &err);
        RG_CHECK(st == c->status, "%s %s: status %d, want %d (%s)", c->tool, c->args, st, c->status, err.msg);
        RG_CHECK(strstr(err.msg, c->msg), "%s %s: message '%s' lacks '%s'", c->tool, c->args, err.msg, c->msg);
        RG_CHECK(!r.text && !r.structured, "a result on failure");
        // the connection still works: the late or broken answer is skipped
        check_text(m, "echo", "{\"text\":\"after\"}", "after");
    }
    rg_mcp_close(m);
}

static void test_mcp_timeout(void) {
    rg_error err = {0};
    rg_mcp *m = connect_fake("ok", 0, &err);
    RG_REQUIRE(m, "connect: %s", err.msg);
    rg_mcp_result r;
    int64_t t0 = rg_proc_now_ms();
    rg_status st = rg_mcp_call_tool(m, "sleep", "{\"seconds\":1.5}", 300, &r, &err);
    int64_t took = rg_proc_now_ms() - t0;
    RG_CHECK(st == RG_ERR_IO && strstr(err.msg, "mcp server 'fake': tools/call 'sleep': no answer within 300 ms"),
             "status %d: %s", st, err.msg);
    RG_CHECK(took >= 250 && took < 1400, "a 300 ms deadline took %lld ms", (long long)took);
    // the server was told (notifications/cancelled for the sleep's id), and its late answer is skipped
    char *t = call_text(m, "cancelled", "{}", NULL);
    RG_CHECK(t && strncmp(t, "cancelled: ", 11) == 0 && isdigit((unsigned char)t[11]), "'%s'", t ? t : "");
    free(t);
    rg_mcp_close(m);
}

static void test_mcp_server_dies(void) {
    rg_error err = {0};
    rg_mcp *m = connect_fake("ok", 0, &err);
    RG_REQUIRE(m, "connect: %s", err.msg);
    rg_mcp_result r;
    rg_status st = rg_mcp_call_tool(m, "die", "{}", 0, &r, &err);
    RG_CHECK(st == RG_ERR_IO, "status %d: %s", st, err.msg);
    RG_CHECK(strstr(err.msg, "mcp server 'fake': tools/call 'die'") && strstr(err.msg, "exited with status 3") &&
             strstr(err.msg, "crashed hard"), "message: %s", err.msg);
    st = rg_mcp_call_tool(m, "echo", "{\"text\":\"x\"}", 0, &r, &err);
    RG_CHECK(st == RG_ERR_IO && strstr(err.msg, "mcp server 'fake'"), "a call after the end: %d %s", st, err.msg);
    rg_mcp_close(m);
}

typedef struct connect_case {
    const char *what;
    const char *const *argv;
    rg_status status;            // RG_OK: connects
    const char *msg;             // a part of the message, or the protocol version when it connects
} connect_case;

static void test_mcp_connect_errors(void) {
    const connect_case cases[] = {
        {"older version", ARGV("python3", server_path, "oldversion"), RG_OK, "2024-11-05"},
        {"unknown version", ARGV("python3", server_path, "badversion"), RG_ERR_UNSUPPORTED,
         "mcp server 'fake': initialize: the server speaks protocol version '1999-01-01'"},
        {"dies at initialize", ARGV("python3", server_path, "die_at_init"), RG_ERR_IO, "exited with status 7"},
        {"no such program", ARGV("rg-no-such-mcp-server"), RG_ERR_NOT_FOUND,
         "mcp server 'fake': cannot run 'rg-no-such-mcp-server': no such program in PATH"},
        {"not a server", ARGV("sh", "-c", "echo hello; cat >/dev/null"), RG_ERR_FORMAT, "not JSON"},
        {"silent", ARGV("sleep", "10"), RG_ERR_IO, "initialize: no answer within 500 ms"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const connect_case *c = &cases[i];
        rg_mcp_opts o = {.name = "fake", .argv = c->argv, .init_timeout_ms = strcmp(c->argv[0], "sleep") ? 20000 : 500};
        rg_mcp *m = NULL;
        rg_error err = {0};
        rg_status st = rg_mcp_connect(&m, &o, &err);
        RG_CHECK(st == c->status, "%s: status %d, want %d (%s)", c->what, st, c->status, err.msg);
        if (st == RG_OK)
            RG_CHECK(strcmp(rg_mcp_protocol_version(m), c->msg) == 0, "%s: version %s", c->what, rg_mcp_protocol_version(m));
        else RG_CHECK(strstr(err.msg, c->msg) && !m, "%s: message '%s' lacks '%s'", c->what, err.msg, c->msg);
        if (i == 2) RG_CHECK(strstr(err.msg, "fatal: cannot start"), "%s: no stderr in '%s'", c->what, err.msg);
        rg_mcp_close(m);
    }
}

static void test_mcp_env(void) {
    char path_var[4096];
    snprintf(path_var, sizeof path_var, "PATH=%s", getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    rg_mcp_opts o = {.name = "fake", .argv = ARGV("python3", server_path, "ok"),
                     .env = (const char *const[]){path_var, "RG_FAKE_VAR=forty-two", NULL}, .cwd = tmp_dir};
    rg_mcp *m = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_mcp_connect(&m, &o, &err) == RG_OK, "%s", err.msg);
    check_text(m, "getenv", "{}", "forty-two");
    rg_mcp_close(m);
}

static void test_mcp_openai_tools(void) {
    rg_error err = {0};
    rg_mcp *m = connect_fake("ok", 0, &err);
    RG_REQUIRE(m, "connect: %s", err.msg);
    rg_mcp_tools t;
    RG_REQUIRE(rg_mcp_list_tools(m, &t, &err) == RG_OK, "tools/list: %s", err.msg);
    rg_mcp_close(m);
    size_t len;
    char *json = rg_mcp_tools_openai_json(&t, &len);
    RG_REQUIRE(json, "out of memory");
    rg_json_doc *doc;
    RG_REQUIRE(rg_json_parse(&doc, json, len, NULL, &err) == RG_OK, "not JSON (%s): %s", err.msg, json);
    const rg_json *arr = rg_json_root(doc);
    RG_CHECK(rg_json_is(arr, RG_JSON_ARRAY) && rg_json_len(arr) == 3, "%s", json);
    for (size_t i = 0; i < rg_json_len(arr) && i < 3; i++) {
        const rg_json *item = rg_json_at(arr, i), *fn = rg_json_get(item, "function");
        const char *type = rg_json_str(rg_json_get(item, "type"), NULL);
        const char *name = rg_json_str(rg_json_get(fn, "name"), NULL);
        const char *desc = rg_json_str(rg_json_get(fn, "description"), NULL);
        RG_CHECK(type && strcmp(type, "function") == 0, "item %zu type", i);
        RG_CHECK(name && strcmp(name, fake_names[i]) == 0, "item %zu name", i);
        RG_CHECK(desc && strcmp(desc, fake_descriptions[i]) == 0, "item %zu description", i);
        const char *ptype = rg_json_str(rg_json_get(rg_json_get(fn, "parameters"), "type"), NULL);
        RG_CHECK(ptype && strcmp(ptype, "object") == 0, "item %zu parameters", i);
    }
    const char *want = "{\"type\":\"function\",\"function\":{\"name\":\"nodesc\",\"description\":\"\","
                       "\"parameters\":{\"type\":\"object\"}}}]";
    RG_CHECK(len > strlen(want) && strcmp(json + len - strlen(want), want) == 0, "ends '%s'", json);
    rg_json_free(doc);
    free(json);
    rg_mcp_tools_free(&t);
    rg_mcp_tools none = {0};
    json = rg_mcp_tools_openai_json(&none, &len);
    RG_CHECK(json && strcmp(json, "[]") == 0, "no tools gave '%s'", json ? json : "NULL");
    free(json);
}

// ---------------------------------------------------------------------------
// Against the real mcp-server-time (PyPI)

static bool mcp_server_time_installed(void) {
    rg_proc_opts o = {.argv = ARGV("python3", "-m", "mcp_server_time", "--help"), .timeout_ms = 30000};
    rg_proc_result r;
    rg_error err = {0};
    bool ok = rg_proc_run(&o, &r, &err) == RG_OK && r.exit_code == 0;
    rg_proc_result_free(&r);
    return ok;
}

// "2026-01-02T03:04" somewhere in s
static bool has_datetime(const char *s) {
    const char *pat = "dddd-dd-ddTdd:dd";
    for (; *s; s++) {
        size_t i = 0;
        for (; pat[i] && s[i]; i++)
            if (pat[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != pat[i]) break;
        if (!pat[i]) return true;
    }
    return false;
}

static void test_mcp_real_time_server(void) {
    if (!mcp_server_time_installed()) {
        const char *req = getenv("RG_REQUIRE_MCP");
        printf("    SKIP SKIP SKIP: mcp-server-time is not installed (python3 -m pip install mcp-server-time); "
               "the real MCP server is NOT tested\n");
        RG_REQUIRE(!(req && strcmp(req, "1") == 0), "RG_REQUIRE_MCP=1 and mcp-server-time is not importable");
        RG_SKIP("mcp-server-time not installed");
    }
    rg_mcp_opts o = {.name = "time", .argv = ARGV("python3", "-m", "mcp_server_time"), .client_version = "0.1",
                     .init_timeout_ms = 60000, .call_timeout_ms = 30000};
    rg_mcp *m = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_mcp_connect(&m, &o, &err) == RG_OK, "%s", err.msg);
    rg_mcp_tools t;
    RG_CHECK(rg_mcp_list_tools(m, &t, &err) == RG_OK, "tools/list: %s", err.msg);
    bool found = false;
    for (size_t i = 0; i < t.n; i++) found = found || strcmp(t.items[i].name, "get_current_time") == 0;
    RG_CHECK(found, "tools/list has no get_current_time (%zu tools)", t.n);
    rg_mcp_tools_free(&t);
    bool is_error = true;
    char *text = call_text(m, "get_current_time", "{\"timezone\":\"Asia/Tokyo\"}", &is_error);
    RG_CHECK(text && !is_error && strstr(text, "Asia/Tokyo") && has_datetime(text), "get_current_time gave '%s'",
             text ? text : "(error)");
    free(text);
    rg_mcp_close(m);
}

// ---------------------------------------------------------------------------

static const rg_test_case cases[] = {
    RG_TEST(test_mcp_protocol),
    RG_TEST(test_mcp_pagination),
    RG_TEST(test_mcp_results),
    RG_TEST(test_mcp_call_errors),
    RG_TEST(test_mcp_timeout),
    RG_TEST(test_mcp_server_dies),
    RG_TEST(test_mcp_connect_errors),
    RG_TEST(test_mcp_env),
    RG_TEST(test_mcp_openai_tools),
    RG_TEST(test_mcp_real_time_server),
    RG_TEST(test_no_leaks),  // last: nothing left behind
    {0},
};

int main(int argc, char **argv) {
    return agent_test_main(argc, argv, cases, tmp_dir, fake_server_py, server_path, sizeof server_path);
}
