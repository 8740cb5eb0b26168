// agent_tools.c - the tools of a tools file (agent_tools.h) at work: MCP servers started and listed, the
// OpenAI tools array, and a call by name executed as tools/call or as a command (argv with its {NAME}
// placeholders replaced, run by rg_proc_run under its limits). The file itself: agent_tools_read.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_tools_internal.h"
#include "agent/proc.h"
#include "base/error.h"
#include "base/json_write.h"

static void free_argv(char **argv, size_t argc) {
    for (size_t i = 0; argv && i < argc; i++) free(argv[i]);
    free(argv);
}

void rg_agent_tools_free(rg_agent_tools *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_mcp; i++) {
        at_mcp *m = &t->mcp[i];
        rg_mcp_close(m->conn);
        rg_mcp_tools_free(&m->tools);
        free(m->name);
        free_argv(m->argv, m->argc);
        free_argv(m->only, m->n_only);
        free(m->cwd);
    }
    for (size_t i = 0; i < t->n_cmds; i++) {
        at_cmd *c = &t->cmds[i];
        free(c->name);
        free(c->description);
        free_argv(c->argv, c->argc);
        free(c->parameters);
        rg_json_free(c->params);
        free(c->cwd);
    }
    free(t->mcp);
    free(t->cmds);
    free(t->json);
    free(t->path);
    free(t);
}

size_t rg_agent_tools_count(const rg_agent_tools *t) {
    size_t n = t->n_cmds;
    for (size_t i = 0; i < t->n_mcp; i++) n += t->mcp[i].tools.n;
    return n;
}

// The server whose tool this is and the tool, or the command; all NULL when there is none.
static void find_tool(rg_agent_tools *t, const char *name, at_mcp **server, at_cmd **cmd) {
    *server = NULL;
    *cmd = NULL;
    for (size_t i = 0; i < t->n_mcp; i++)
        for (size_t k = 0; k < t->mcp[i].tools.n; k++)
            if (!strcmp(t->mcp[i].tools.items[k].name, name)) {
                *server = &t->mcp[i];
                return;
            }
    for (size_t i = 0; i < t->n_cmds; i++)
        if (!strcmp(t->cmds[i].name, name)) {
            *cmd = &t->cmds[i];
            return;
        }
}

// Keeps the tools the entry's `tools` names, in the server's order; each name must be one the server lists.
static rg_status keep_only(rg_agent_tools *t, at_mcp *m, rg_error *err) {
    if (!m->only) return RG_OK;
    for (size_t i = 0; i < m->n_only; i++) {
        bool found = false;
        for (size_t k = 0; k < m->tools.n && !found; k++) found = !strcmp(m->tools.items[k].name, m->only[i]);
        if (!found)
            return rg_fail(err, RG_ERR_NOT_FOUND, "%s:%zu: mcp server '%s' has no tool '%s' (it lists %zu)", t->path,
                           m->only_line, m->name, m->only[i], m->tools.n);
    }
    size_t kept = 0;
    for (size_t k = 0; k < m->tools.n; k++) {
        bool keep = false;
        for (size_t i = 0; i < m->n_only && !keep; i++) keep = !strcmp(m->tools.items[k].name, m->only[i]);
        if (keep) {
            m->tools.items[kept++] = m->tools.items[k];
        } else {  // the fields rg_mcp_tools_free would free
            free(m->tools.items[k].name);
            free(m->tools.items[k].description);
            free(m->tools.items[k].input_schema);
        }
    }
    m->tools.n = kept;
    return RG_OK;
}

rg_status rg_agent_tools_start(rg_agent_tools *t, const rg_agent_tools_opts *opts, rg_error *err) {
    const rg_agent_tools_opts none = {0};
    if (!opts) opts = &none;
    for (size_t i = 0; i < t->n_mcp; i++) {
        at_mcp *m = &t->mcp[i];
        if (m->conn) continue;
        rg_mcp_opts o = {.name = m->name, .argv = (const char *const *)m->argv, .cwd = m->cwd,
                         .stderr_path = opts->mcp_stderr_path, .client_version = RG_VERSION_STRING,
                         .init_timeout_ms = opts->mcp_init_timeout_ms > 0 ? opts->mcp_init_timeout_ms : 60000,
                         .call_timeout_ms = m->timeout_ms};
        rg_status st = rg_mcp_connect(&m->conn, &o, err);
        if (!st) st = rg_mcp_list_tools(m->conn, &m->tools, err);
        if (!st && m->only) {
            st = keep_only(t, m, err);
            if (st) return st;
        }
        if (st) {
            char inner[sizeof err->msg];
            memcpy(inner, err->msg, sizeof inner);
            return rg_fail(err, st, "%s:%zu: %s", t->path, m->line, inner);
        }
        // a tool name two servers (or a server and a command) share would be ambiguous
        for (size_t k = 0; k < m->tools.n; k++) {
            const char *name = m->tools.items[k].name;
            for (size_t j = 0; j < t->n_cmds; j++)
                if (!strcmp(t->cmds[j].name, name))
                    return rg_fail(err, RG_ERR_FORMAT, "%s:%zu: commands[%zu]: the MCP server '%s' has a tool named "
                                   "'%s' too", t->path, t->cmds[j].line, j, m->name, name);
            for (size_t s = 0; s <= i; s++)
                for (size_t q = 0; q < (s == i ? k : t->mcp[s].tools.n); q++)
                    if (!strcmp(t->mcp[s].tools.items[q].name, name))
                        return rg_fail(err, RG_ERR_FORMAT, "%s:%zu: the MCP servers '%s' and '%s' both have a tool "
                                       "named '%s'", t->path, m->line, t->mcp[s].name, m->name, name);
        }
    }
    free(t->json);
    t->json = NULL;
    return RG_OK;
}

const char *rg_agent_tools_json(rg_agent_tools *t, size_t *len) {
    if (t->json) {
        if (len) *len = t->json_len;
        return t->json;
    }
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_arr(&w);
    for (size_t i = 0; i < t->n_mcp; i++) rg_mcp_tools_write_openai(&w, &t->mcp[i].tools);
    for (size_t i = 0; i < t->n_cmds; i++) {
        const at_cmd *c = &t->cmds[i];
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "type", "function");
        rg_jw_key(&w, "function");
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "name", c->name);
        rg_jw_kstr(&w, "description", c->description);
        rg_jw_key(&w, "parameters");
        rg_jw_raw(&w, c->parameters, strlen(c->parameters));
        rg_jw_obj_end(&w);
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    t->json = rg_jw_take(&w, &t->json_len);
    if (len) *len = t->json ? t->json_len : 0;
    return t->json;
}

// ---------------------------------------------------------------------------------------------------------------
// Calls

static rg_status call_mcp(at_mcp *m, const char *name, const char *args, char **result, size_t *len, rg_error *err) {
    rg_mcp_result r;
    rg_status st = rg_mcp_call_tool(m->conn, name, args, m->timeout_ms, &r, err);
    if (st) {
        char inner[sizeof err->msg];
        memcpy(inner, err->msg, sizeof inner);
        return rg_fail(err, st, "tool '%s': %s", name, inner);
    }
    if (r.is_error) {
        st = rg_fail(err, RG_ERR_ARG, "tool '%s': the tool reported an error: %.600s", name, r.text ? r.text : "");
        rg_mcp_result_free(&r);
        return st;
    }
    *result = r.text;
    *len = strlen(r.text);
    r.text = NULL;
    rg_mcp_result_free(&r);
    return RG_OK;
}

// Checks the arguments against the command's parameters: every one declared, the required ones given, each of
// its property's type.
static rg_status check_args(const at_cmd *c, const rg_json *args, rg_error *err) {
    const rg_json *schema = rg_json_root(c->params), *props = rg_json_get(schema, "properties");
    const rg_json *req = rg_json_get(schema, "required");
    for (size_t i = 0; i < rg_json_len(args); i++) {
        size_t kl;
        const char *key = rg_json_key_at(args, i, &kl);
        const rg_json *p = rg_json_getn(props, key, kl), *v = rg_json_value_at(args, i);
        if (!p)
            return rg_fail(err, RG_ERR_ARG, "tool '%s': bad arguments: '%.*s' is not one of its parameters", c->name,
                           (int)(kl > 80 ? 80 : kl), key);
        const char *type = rg_json_str(rg_json_get(p, "type"), NULL);
        const rg_json_type vt = rg_json_type_of(v);
        int64_t i64;
        bool ok = !type || (!strcmp(type, "string") && vt == RG_JSON_STRING) ||
                  (!strcmp(type, "number") && vt == RG_JSON_NUMBER) ||
                  (!strcmp(type, "integer") && rg_json_int64(v, &i64)) ||
                  (!strcmp(type, "boolean") && vt == RG_JSON_BOOL) || (!strcmp(type, "array") && vt == RG_JSON_ARRAY) ||
                  (!strcmp(type, "object") && vt == RG_JSON_OBJECT) || vt == RG_JSON_NULL;
        if (!ok)
            return rg_fail(err, RG_ERR_ARG, "tool '%s': bad arguments: '%s' must be %s %s, not %s", c->name, key,
                           strchr("aeiou", type[0]) ? "an" : "a", type, rg_json_type_name(vt));
    }
    for (size_t i = 0; i < rg_json_len(req); i++) {
        size_t kl;
        const char *key = rg_json_str(rg_json_at(req, i), &kl);
        const rg_json *v = key ? rg_json_getn(args, key, kl) : NULL;
        if (key && (!v || rg_json_is(v, RG_JSON_NULL)))
            return rg_fail(err, RG_ERR_ARG, "tool '%s': bad arguments: the required '%s' is missing", c->name, key);
    }
    return RG_OK;
}

// argv[i] with its placeholders replaced into *out (NULL: the element is left out: an argument it names is
// absent).
static rg_status substitute(const at_cmd *c, const char *elem, const rg_json *args, char **out, rg_error *err) {
    *out = NULL;
    rg_jw w;
    rg_jw_init(&w);
    size_t from = 0, at = 0, b, e;
    while (at_next_placeholder(elem, &from, &b, &e)) {
        const char *key = elem + b + 1;
        const size_t kl = e - b - 2;
        const rg_json *v = rg_json_getn(args, key, kl);
        if (!v || rg_json_is(v, RG_JSON_NULL)) {
            rg_jw_free(&w);
            return RG_OK;
        }
        size_t n = 0;
        const char *text = rg_json_is(v, RG_JSON_STRING) ? rg_json_str(v, &n)
                         : rg_json_is(v, RG_JSON_NUMBER) ? rg_json_num_text(v)
                         : rg_json_is(v, RG_JSON_BOOL)   ? (rg_json_bool(v) ? "true" : "false")
                                                         : NULL;
        if (!text) {
            rg_jw_free(&w);
            return rg_fail(err, RG_ERR_ARG, "tool '%s': bad arguments: '%.*s' is %s; an argv placeholder takes a "
                           "string, a number or a boolean", c->name, (int)kl, key, rg_json_type_name(rg_json_type_of(v)));
        }
        if (!rg_json_is(v, RG_JSON_STRING)) n = strlen(text);
        if (memchr(text, 0, n)) {
            rg_jw_free(&w);
            return rg_fail(err, RG_ERR_ARG, "tool '%s': bad arguments: '%.*s' holds a NUL byte, which no argument "
                           "can", c->name, (int)kl, key);
        }
        rg_jw_text_append(&w, elem + at, b - at);
        rg_jw_text_append(&w, text, n);
        at = e;
    }
    rg_jw_text_append(&w, elem + at, strlen(elem + at));
    size_t n;
    *out = w.buf ? rg_jw_take(&w, &n) : strdup("");
    if (!*out) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    return RG_OK;
}

// The last bytes of a command's output for a message: its stderr's, else its stdout's.
static const char *tail_of(const rg_proc_result *r, size_t max, int *n) {
    const char *s = r->err_len ? r->err : r->out;
    size_t len = r->err_len ? r->err_len : r->out_len;
    while (len && (s[len - 1] == '\n' || s[len - 1] == '\r')) len--;
    const size_t from = len > max ? len - max : 0;
    *n = (int)(len - from);
    return s + from;
}

static rg_status call_cmd(at_cmd *c, const rg_json *args, char **result, size_t *len, rg_error *err) {
    rg_status st = check_args(c, args, err);
    if (st) return st;
    char **argv = calloc(c->argc + 1, sizeof *argv);
    if (!argv) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    size_t argc = 0;
    for (size_t i = 0; i < c->argc && !st; i++) {
        st = substitute(c, c->argv[i], args, &argv[argc], err);
        argc += argv[argc] != NULL;
    }
    if (!st && argc == 0) st = rg_fail(err, RG_ERR_ARG, "tool '%s': bad arguments: the program's own element was "
                                       "left out (its placeholder's argument is missing)", c->name);
    rg_proc_result r = {0};
    if (!st) {
        rg_proc_opts o = {.argv = (const char *const *)argv, .cwd = c->cwd, .timeout_ms = c->timeout_ms,
                          .max_output = c->max_output};
        st = rg_proc_run(&o, &r, err);
        if (st) {
            char inner[sizeof err->msg];
            memcpy(inner, err->msg, sizeof inner);
            st = rg_fail(err, st, "tool '%s': %s", c->name, inner);
        }
    }
    free_argv(argv, argc);
    if (st) return st;
    int tn;
    const char *tail = tail_of(&r, 400, &tn);
    if (r.timed_out)
        st = rg_fail(err, RG_ERR_IO, "tool '%s': ran past its time limit of %d s and was stopped", c->name,
                     c->timeout_ms / 1000);
    else if (r.output_truncated)
        st = rg_fail(err, RG_ERR_IO, "tool '%s': wrote more than its output limit of %zu bytes and was stopped",
                     c->name, c->max_output);
    else if (r.exit_code != 0 || r.term_signal != 0) {
        char how[96];
        rg_proc_describe_status(r.term_signal ? r.term_signal : r.exit_code << 8, how, sizeof how);
        st = rg_fail(err, RG_ERR_IO, "tool '%s': the command %s%s%.*s", c->name, how, tn ? ": " : "", tn, tail);
    }
    if (!st) {
        *result = r.out;
        *len = r.out_len;
        r.out = NULL;
    }
    rg_proc_result_free(&r);
    return st;
}

rg_status rg_agent_tools_call(rg_agent_tools *t, const char *name, const char *arguments_json, char **result,
                              size_t *len, rg_error *err) {
    *result = NULL;
    *len = 0;
    at_mcp *server;
    at_cmd *cmd;
    find_tool(t, name, &server, &cmd);
    if (!server && !cmd) {
        char list[300] = "";
        for (size_t i = 0; i < t->n_mcp; i++)
            for (size_t k = 0; k < t->mcp[i].tools.n; k++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? ", " : "",
                         t->mcp[i].tools.items[k].name);
        for (size_t i = 0; i < t->n_cmds; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? ", " : "", t->cmds[i].name);
        return rg_fail(err, RG_ERR_NOT_FOUND, "tool '%.100s': there is no such tool (the tools: %s)", name, list);
    }
    const char *args = arguments_json && *arguments_json ? arguments_json : "{}";
    rg_json_doc *doc;
    rg_status st = rg_json_parse(&doc, args, strlen(args), NULL, err);
    if (st) {
        char inner[sizeof err->msg];
        memcpy(inner, err->msg, sizeof inner);
        return rg_fail(err, RG_ERR_ARG, "tool '%s': bad arguments: not JSON: %s", name, inner);
    }
    if (!rg_json_is(rg_json_root(doc), RG_JSON_OBJECT)) {
        rg_json_free(doc);
        return rg_fail(err, RG_ERR_ARG, "tool '%s': bad arguments: they must be a JSON object", name);
    }
    st = server ? call_mcp(server, name, args, result, len, err) : call_cmd(cmd, rg_json_root(doc), result, len, err);
    rg_json_free(doc);
    return st;
}
