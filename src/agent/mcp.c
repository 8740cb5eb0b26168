// mcp.c - the Model Context Protocol client over stdio (see mcp.h): JSON-RPC requests and the
// wait for their answers, the handshake, tools/list and tools/call, and the OpenAI tools array.
#include "agent/mcp.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/proc.h"
#include "base/error.h"
#include "base/json.h"
#include "base/json_write.h"

#define MCP_PROTOCOL_VERSION "2025-06-18"
#define MCP_MAX_PAGES 10000

static const char *const known_versions[] = {"2024-11-05", "2025-03-26", "2025-06-18"};

struct rg_mcp {
    char *name;
    rg_child *child;
    int call_timeout_ms;
    size_t max_line;
    int64_t next_id;
    char protocol_version[32];
    char *server_info;
};

const char *rg_mcp_name(const rg_mcp *m) { return m->name; }
const char *rg_mcp_protocol_version(const rg_mcp *m) { return m->protocol_version; }
const char *rg_mcp_server_info(const rg_mcp *m) { return m->server_info ? m->server_info : ""; }

// ---------------------------------------------------------------------------
// Messages out

// Sends the writer's JSON as one line.
static rg_status send_message(rg_mcp *m, rg_jw *w, int timeout_ms, rg_error *err) {
    rg_jw_text_append(w, "\n", 1);
    size_t len;
    const char *text = rg_jw_text(w, &len);
    if (!text) return rg_fail(err, RG_ERR_NOMEM, "out of memory writing a message");
    return rg_child_write(m->child, text, len, timeout_ms, err);
}

static void begin_message(rg_jw *w) {
    rg_jw_init(w);
    rg_jw_obj(w);
    rg_jw_kstr(w, "jsonrpc", "2.0");
}

// Answers a request of the server: ping with {}, anything else with "method not found".
static void answer_server_request(rg_mcp *m, const rg_json *msg, const char *method, int timeout_ms) {
    rg_jw w;
    begin_message(&w);
    rg_jw_key(&w, "id");
    rg_jw_value(&w, rg_json_get(msg, "id"));
    if (strcmp(method, "ping") == 0) {
        rg_jw_key(&w, "result");
        rg_jw_obj(&w);
        rg_jw_obj_end(&w);
    } else {
        rg_jw_key(&w, "error");
        rg_jw_obj(&w);
        rg_jw_ki64(&w, "code", -32601);
        rg_jw_kstr(&w, "message", "Method not found");
        rg_jw_obj_end(&w);
    }
    rg_jw_obj_end(&w);
    rg_error ignored;
    send_message(m, &w, timeout_ms, &ignored);  // a failed answer shows up as the next read's error
    rg_jw_free(&w);
}

static void send_cancelled(rg_mcp *m, int64_t id) {
    rg_jw w;
    begin_message(&w);
    rg_jw_kstr(&w, "method", "notifications/cancelled");
    rg_jw_key(&w, "params");
    rg_jw_obj(&w);
    rg_jw_ki64(&w, "requestId", id);
    rg_jw_kstr(&w, "reason", "timed out");
    rg_jw_obj_end(&w);
    rg_jw_obj_end(&w);
    rg_error ignored;
    send_message(m, &w, 1000, &ignored);
    rg_jw_free(&w);
}

// ---------------------------------------------------------------------------
// Waiting for an answer

static rg_status rpc_error(const rg_json *e, rg_error *err) {
    int64_t code = 0;
    rg_json_int64(rg_json_get(e, "code"), &code);
    const char *msg = rg_json_str(rg_json_get(e, "message"), NULL);
    rg_status st = code == -32601 ? RG_ERR_NOT_FOUND : code == -32602 ? RG_ERR_ARG : RG_ERR_IO;
    return rg_fail(err, st, "error %" PRId64 ": %s", code, msg ? msg : "(no message)");
}

// "the first 80 bytes..." of a line, for messages about it.
static void excerpt(const char *line, size_t len, char *out, size_t n) {
    size_t k = len < n - 4 ? len : n - 4;
    for (size_t i = 0; i < k; i++) out[i] = (unsigned char)line[i] < 0x20 ? ' ' : line[i];
    strcpy(out + k, len > k ? "..." : "");
}

// One line read: RG_OK with *answer set when it is the answer to id (*doc owns it), RG_OK with
// *answer NULL when it was something else (handled or ignored), an error for a bad line.
static rg_status take_line(rg_mcp *m, const char *line, size_t len, int64_t id, int timeout_ms, rg_json_doc **doc,
                           const rg_json **answer, rg_error *err) {
    *answer = NULL;
    if (len == 0) return RG_OK;
    rg_error pe;
    char ex[84];
    if (rg_json_parse(doc, line, len, NULL, &pe) != RG_OK) {
        excerpt(line, len, ex, sizeof ex);
        return rg_fail(err, RG_ERR_FORMAT, "the server wrote a line that is not JSON (%s): '%s'", pe.msg, ex);
    }
    const rg_json *msg = rg_json_root(*doc);
    const char *method = rg_json_str(rg_json_get(msg, "method"), NULL);
    const rg_json *msg_id = rg_json_get(msg, "id");
    int64_t got = 0;
    if (!rg_json_is(msg, RG_JSON_OBJECT) || (!method && !msg_id)) {
        excerpt(line, len, ex, sizeof ex);
        rg_json_free(*doc);
        *doc = NULL;
        return rg_fail(err, RG_ERR_FORMAT, "the server wrote a line that is not a JSON-RPC message: '%s'", ex);
    }
    if (method && msg_id) answer_server_request(m, msg, method, timeout_ms);
    if (!method && rg_json_int64(msg_id, &got) && got == id) {
        *answer = msg;
        return RG_OK;
    }
    rg_json_free(*doc);  // a notification, or an answer to a request we gave up on
    *doc = NULL;
    return RG_OK;
}

// Reads lines until the answer to id; on RG_OK *doc holds it and *result is its "result".
static rg_status await_answer(rg_mcp *m, int64_t id, int64_t deadline, int timeout_ms, bool cancel, rg_json_doc **doc,
                              const rg_json **result, rg_error *err) {
    for (;;) {
        int64_t left = deadline - rg_proc_now_ms();
        if (left <= 0) {
            if (cancel && !rg_child_eof(m->child)) send_cancelled(m, id);
            return rg_fail(err, RG_ERR_IO, "no answer within %d ms", timeout_ms);
        }
        char *line;
        size_t len;
        rg_status st = rg_child_read_line(m->child, &line, &len, m->max_line, (int)left, err);
        if (st && !rg_child_eof(m->child) && st != RG_ERR_FORMAT) continue;  // the deadline: said above
        if (st) return st;
        const rg_json *answer;
        st = take_line(m, line, len, id, (int)left, doc, &answer, err);
        if (st) return st;
        if (!answer) continue;
        const rg_json *e = rg_json_get(answer, "error");
        *result = rg_json_get(answer, "result");
        if (e || !*result) {
            st = e ? rpc_error(e, err) : rg_fail(err, RG_ERR_FORMAT, "the answer has neither result nor error");
            rg_json_free(*doc);
            *doc = NULL;
        }
        return st;
    }
}

// Sends method(params) and waits for the answer. what names the call in messages. params_json
// is a JSON object's text or NULL.
static rg_status request(rg_mcp *m, const char *method, const char *what, const char *params_json, int timeout_ms,
                         rg_json_doc **doc, const rg_json **result, rg_error *err) {
    *doc = NULL;
    int64_t id = ++m->next_id;
    int64_t deadline = rg_proc_now_ms() + timeout_ms;
    rg_jw w;
    begin_message(&w);
    rg_jw_ki64(&w, "id", id);
    rg_jw_kstr(&w, "method", method);
    if (params_json) {
        rg_jw_key(&w, "params");
        rg_jw_raw(&w, params_json, strlen(params_json));
    }
    rg_jw_obj_end(&w);
    rg_error e;
    rg_status st = send_message(m, &w, timeout_ms, &e);
    rg_jw_free(&w);
    bool cancel = strcmp(method, "initialize") != 0;  // initialize must never be cancelled
    if (!st) st = await_answer(m, id, deadline, timeout_ms, cancel, doc, result, &e);
    if (st) return rg_fail(err, st, "mcp server '%s': %s: %s", m->name, what ? what : method, e.msg);
    return RG_OK;
}

// ---------------------------------------------------------------------------
// The handshake

static rg_status send_initialize(rg_mcp *m, const char *client_version, int timeout_ms, rg_error *err) {
    rg_jw p;
    rg_jw_init(&p);
    rg_jw_obj(&p);
    rg_jw_kstr(&p, "protocolVersion", MCP_PROTOCOL_VERSION);
    rg_jw_key(&p, "capabilities");
    rg_jw_obj(&p);
    rg_jw_obj_end(&p);
    rg_jw_key(&p, "clientInfo");
    rg_jw_obj(&p);
    rg_jw_kstr(&p, "name", "retrograd");
    rg_jw_kstr(&p, "version", client_version ? client_version : "0");
    rg_jw_obj_end(&p);
    rg_jw_obj_end(&p);
    rg_json_doc *doc;
    const rg_json *result;
    const char *params = rg_jw_text(&p, NULL);
    rg_status st = params ? request(m, "initialize", NULL, params, timeout_ms, &doc, &result, err)
                          : rg_fail(err, RG_ERR_NOMEM, "mcp server '%s': initialize: out of memory", m->name);
    rg_jw_free(&p);
    if (st) return st;
    const char *version = rg_json_str(rg_json_get(result, "protocolVersion"), NULL);
    bool known = false;
    for (size_t i = 0; version && i < sizeof known_versions / sizeof *known_versions; i++)
        known = known || strcmp(version, known_versions[i]) == 0;
    if (known) {
        snprintf(m->protocol_version, sizeof m->protocol_version, "%s", version);
        const rg_json *info = rg_json_get(result, "serverInfo");
        const char *sname = rg_json_str(rg_json_get(info, "name"), NULL), *sver = rg_json_str(rg_json_get(info, "version"), NULL);
        size_t n = (sname ? strlen(sname) : 0) + (sver ? strlen(sver) : 0) + 2;
        if ((m->server_info = malloc(n))) snprintf(m->server_info, n, "%s%s%s", sname ? sname : "", sname && sver ? " " : "", sver ? sver : "");
    } else if (version) {
        st = rg_fail(err, RG_ERR_UNSUPPORTED, "mcp server '%s': initialize: the server speaks protocol version '%.64s'; "
                     "retrograd knows 2024-11-05, 2025-03-26 and 2025-06-18", m->name, version);
    } else {
        st = rg_fail(err, RG_ERR_FORMAT, "mcp server '%s': initialize: the answer has no protocolVersion string", m->name);
    }
    rg_json_free(doc);
    return st;
}

static rg_status send_initialized(rg_mcp *m, int timeout_ms, rg_error *err) {
    rg_jw w;
    begin_message(&w);
    rg_jw_kstr(&w, "method", "notifications/initialized");
    rg_jw_obj_end(&w);
    rg_error e;
    rg_status st = send_message(m, &w, timeout_ms, &e);
    rg_jw_free(&w);
    return st ? rg_fail(err, st, "mcp server '%s': notifications/initialized: %s", m->name, e.msg) : RG_OK;
}

rg_status rg_mcp_connect(rg_mcp **out, const rg_mcp_opts *o, rg_error *err) {
    *out = NULL;
    if (!o || !o->argv || !o->argv[0]) return rg_fail(err, RG_ERR_ARG, "mcp server: no command given");
    const char *name = o->name ? o->name : o->argv[0];
    rg_mcp *m = calloc(1, sizeof *m);
    if (m) m->name = strdup(name);
    if (!m || !m->name) {
        free(m);
        return rg_fail(err, RG_ERR_NOMEM, "mcp server '%s': out of memory", name);
    }
    m->call_timeout_ms = o->call_timeout_ms > 0 ? o->call_timeout_ms : 60000;
    m->max_line = o->max_line ? o->max_line : (size_t)16 << 20;
    int init_ms = o->init_timeout_ms > 0 ? o->init_timeout_ms : 30000;
    rg_child_opts co = {.argv = o->argv, .cwd = o->cwd, .env = o->env, .stderr_path = o->stderr_path};
    rg_error e;
    rg_status st = rg_child_spawn(&m->child, &co, &e);
    if (st) st = rg_fail(err, st, "mcp server '%s': %s", m->name, e.msg);
    if (!st) st = send_initialize(m, o->client_version, init_ms, err);
    if (!st) st = send_initialized(m, init_ms, err);
    if (st) {
        rg_mcp_close(m);
        return st;
    }
    *out = m;
    return RG_OK;
}

void rg_mcp_close(rg_mcp *m) {
    if (!m) return;
    rg_child_close(m->child, 1000, NULL);
    free(m->server_info);
    free(m->name);
    free(m);
}

// ---------------------------------------------------------------------------
// tools/list

static char *dup_str(const char *s) { return strdup(s ? s : ""); }

// A parsed value written back as JSON text (malloc'd), or NULL when out of memory.
static char *value_text(const rg_json *v) {
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_value(&w, v);
    return rg_jw_take(&w, NULL);
}

static rg_status add_tool(rg_mcp *m, rg_mcp_tools *t, const rg_json *item, rg_error *err) {
    const char *name = rg_json_str(rg_json_get(item, "name"), NULL);
    if (!name) return rg_fail(err, RG_ERR_FORMAT, "mcp server '%s': tools/list: tool %zu has no name", m->name, t->n);
    const rg_json *schema = rg_json_get(item, "inputSchema");
    if (schema && !rg_json_is(schema, RG_JSON_OBJECT))
        return rg_fail(err, RG_ERR_FORMAT, "mcp server '%s': tools/list: tool '%s': inputSchema is a %s, not an object",
                       m->name, name, rg_json_type_name(rg_json_type_of(schema)));
    rg_mcp_tool *items = realloc(t->items, (t->n + 1) * sizeof *items);
    if (!items) return rg_fail(err, RG_ERR_NOMEM, "mcp server '%s': tools/list: out of memory", m->name);
    t->items = items;
    rg_mcp_tool *tool = &items[t->n++];
    tool->name = strdup(name);
    tool->description = dup_str(rg_json_str(rg_json_get(item, "description"), NULL));
    tool->input_schema = schema ? value_text(schema) : strdup("{\"type\":\"object\"}");
    if (!tool->name || !tool->description || !tool->input_schema)
        return rg_fail(err, RG_ERR_NOMEM, "mcp server '%s': tools/list: out of memory", m->name);
    return RG_OK;
}

// {"cursor": cursor} or NULL for the first page (malloc'd into *params).
static rg_status page_params(const char *cursor, char **params) {
    *params = NULL;
    if (!cursor) return RG_OK;
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "cursor", cursor);
    rg_jw_obj_end(&w);
    *params = rg_jw_take(&w, NULL);
    return *params ? RG_OK : RG_ERR_NOMEM;
}

// One page: its tools added to t; *next gets nextCursor (malloc'd) or NULL on the last page.
static rg_status list_page(rg_mcp *m, rg_mcp_tools *t, const char *cursor, char **next, rg_error *err) {
    *next = NULL;
    char *params;
    if (page_params(cursor, &params)) return rg_fail(err, RG_ERR_NOMEM, "mcp server '%s': tools/list: out of memory", m->name);
    rg_json_doc *doc;
    const rg_json *result;
    rg_status st = request(m, "tools/list", NULL, params, m->call_timeout_ms, &doc, &result, err);
    free(params);
    if (st) return st;
    const rg_json *tools = rg_json_get(result, "tools");
    if (!rg_json_is(tools, RG_JSON_ARRAY))
        st = rg_fail(err, RG_ERR_FORMAT, "mcp server '%s': tools/list: the result has no tools array", m->name);
    for (size_t i = 0; !st && i < rg_json_len(tools); i++) st = add_tool(m, t, rg_json_at(tools, i), err);
    const char *nc = rg_json_str(rg_json_get(result, "nextCursor"), NULL);
    if (!st && nc && cursor && strcmp(nc, cursor) == 0)
        st = rg_fail(err, RG_ERR_FORMAT, "mcp server '%s': tools/list: nextCursor '%.64s' repeats the cursor asked for",
                     m->name, nc);
    if (!st && nc && !(*next = strdup(nc))) st = rg_fail(err, RG_ERR_NOMEM, "mcp server '%s': out of memory", m->name);
    rg_json_free(doc);
    return st;
}

rg_status rg_mcp_list_tools(rg_mcp *m, rg_mcp_tools *tools, rg_error *err) {
    memset(tools, 0, sizeof *tools);
    char *cursor = NULL;
    rg_status st = RG_OK;
    for (int page = 0; !st; page++) {
        if (page == MCP_MAX_PAGES) {
            st = rg_fail(err, RG_ERR_FORMAT, "mcp server '%s': tools/list: more than %d pages", m->name, MCP_MAX_PAGES);
            break;
        }
        char *next;
        st = list_page(m, tools, cursor, &next, err);
        free(cursor);
        cursor = next;
        if (!cursor) break;
    }
    free(cursor);
    if (st) rg_mcp_tools_free(tools);
    return st;
}

void rg_mcp_tools_free(rg_mcp_tools *tools) {
    if (!tools) return;
    for (size_t i = 0; i < tools->n; i++) {
        free(tools->items[i].name);
        free(tools->items[i].description);
        free(tools->items[i].input_schema);
    }
    free(tools->items);
    memset(tools, 0, sizeof *tools);
}

// ---------------------------------------------------------------------------
// tools/call

// One content item as text: a text item's text, an embedded resource's text, else a short note.
static void content_text(rg_jw *out, const rg_json *item) {
    const char *type = rg_json_str(rg_json_get(item, "type"), NULL);
    size_t n;
    const char *text = rg_json_str(rg_json_get(item, "text"), &n);
    const rg_json *resource = rg_json_get(item, "resource");
    if (type && strcmp(type, "resource") == 0 && !text) text = rg_json_str(rg_json_get(resource, "text"), &n);
    if (text) {
        rg_jw_text_append(out, text, n);
        return;
    }
    const char *mime = rg_json_str(rg_json_get(item, "mimeType"), NULL);
    const char *uri = rg_json_str(rg_json_get(item, "uri"), NULL);
    if (!uri) uri = rg_json_str(rg_json_get(resource, "uri"), NULL);
    char note[512];
    snprintf(note, sizeof note, "[%s content%s%s%s%s]", type ? type : "unknown", mime ? " " : "", mime ? mime : "",
             uri ? " " : "", uri ? uri : "");
    rg_jw_text_append(out, note, strlen(note));
}

static rg_status read_call_result(const rg_json *result, rg_mcp_result *res) {
    const rg_json *content = rg_json_get(result, "content");
    rg_jw text;
    rg_jw_init(&text);
    for (size_t i = 0; i < rg_json_len(content); i++) {
        if (i) rg_jw_text_append(&text, "\n", 1);
        content_text(&text, rg_json_at(content, i));
    }
    res->text = rg_jw_take(&text, NULL);
    res->is_error = rg_json_bool(rg_json_get(result, "isError"));
    const rg_json *sc = rg_json_get(result, "structuredContent");
    if (sc) res->structured = value_text(sc);
    return res->text && (!sc || res->structured) ? RG_OK : RG_ERR_NOMEM;
}

// {"name": name, "arguments": arguments} (arguments checked to be an object) into *params.
static rg_status call_params(const char *name, const char *arguments_json, char **params, rg_error *err) {
    rg_json_doc *args = NULL;
    const char *text = arguments_json ? arguments_json : "{}";
    rg_status st = rg_json_parse(&args, text, strlen(text), NULL, err);
    if (st) return st;
    rg_json_type type = rg_json_type_of(rg_json_root(args));
    if (type != RG_JSON_OBJECT) {
        rg_json_free(args);
        return rg_fail(err, RG_ERR_ARG, "the arguments must be a JSON object (got %s)", rg_json_type_name(type));
    }
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "name", name);
    rg_jw_key(&w, "arguments");
    rg_jw_value(&w, rg_json_root(args));
    rg_jw_obj_end(&w);
    rg_json_free(args);
    *params = rg_jw_take(&w, NULL);
    return *params ? RG_OK : rg_fail(err, RG_ERR_NOMEM, "out of memory");
}

rg_status rg_mcp_call_tool(rg_mcp *m, const char *name, const char *arguments_json, int timeout_ms,
                           rg_mcp_result *res, rg_error *err) {
    memset(res, 0, sizeof *res);
    char what[160];
    snprintf(what, sizeof what, "tools/call '%.100s'", name ? name : "");
    if (!name) return rg_fail(err, RG_ERR_ARG, "mcp server '%s': %s: no tool name", m->name, what);
    char *params = NULL;
    rg_error e;
    if (call_params(name, arguments_json, &params, &e))
        return rg_fail(err, e.status, "mcp server '%s': %s: arguments: %s", m->name, what, e.msg);
    rg_json_doc *doc;
    const rg_json *result;
    rg_status st = request(m, "tools/call", what, params, timeout_ms > 0 ? timeout_ms : m->call_timeout_ms, &doc,
                           &result, err);
    free(params);
    if (st) return st;
    st = read_call_result(result, res);
    rg_json_free(doc);
    if (st) {
        rg_mcp_result_free(res);
        return rg_fail(err, st, "mcp server '%s': %s: out of memory", m->name, what);
    }
    return RG_OK;
}

void rg_mcp_result_free(rg_mcp_result *res) {
    if (!res) return;
    free(res->text);
    free(res->structured);
    memset(res, 0, sizeof *res);
}

// ---------------------------------------------------------------------------
// The OpenAI tools array

void rg_mcp_tools_write_openai(rg_jw *w, const rg_mcp_tools *tools) {
    for (size_t i = 0; i < tools->n; i++) {
        const rg_mcp_tool *t = &tools->items[i];
        rg_jw_obj(w);
        rg_jw_kstr(w, "type", "function");
        rg_jw_key(w, "function");
        rg_jw_obj(w);
        rg_jw_kstr(w, "name", t->name);
        rg_jw_kstr(w, "description", t->description ? t->description : "");
        rg_jw_key(w, "parameters");
        rg_jw_raw(w, t->input_schema, strlen(t->input_schema));  // written by rg_jw_value: valid JSON
        rg_jw_obj_end(w);
        rg_jw_obj_end(w);
    }
}

char *rg_mcp_tools_openai_json(const rg_mcp_tools *tools, size_t *len) {
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_arr(&w);
    rg_mcp_tools_write_openai(&w, tools);
    rg_jw_arr_end(&w);
    return rg_jw_take(&w, len);
}
