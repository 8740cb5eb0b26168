// data_line.c - see data_line.h: one JSONL line of training data, checked and rendered.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "train/data.h"
#include "text/tokenizer.h"
#include "train/data_line.h"

// RG_ERR_FORMAT with "PATH:LINE: " in front of the formatted text.
static rg_status bad(const where *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static rg_status bad(const where *w, const char *fmt, ...) {
    char msg[sizeof w->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rg_fail(w->err, RG_ERR_FORMAT, "%s:%lld: %s", w->path, (long long)w->line, msg);
}

static rg_status nomem(const where *w, const char *msg) {
    return rg_fail(w->err, RG_ERR_NOMEM, "%s:%lld: %s", w->path, (long long)w->line, msg);
}

static const char *type_article(rg_json_type t) {
    switch (t) {
    case RG_JSON_NULL: return "null";
    case RG_JSON_BOOL: return "a boolean";
    case RG_JSON_NUMBER: return "a number";
    case RG_JSON_STRING: return "a string";
    case RG_JSON_ARRAY: return "an array";
    case RG_JSON_OBJECT: return "an object";
    }
    return "?";
}

static const char *article_of(const rg_json *v) { return type_article(rg_json_type_of(v)); }

// The string member `key` of obj, or an error naming the line and what it is instead.
static rg_status get_string(const where *w, const rg_json *obj, const char *key, const char *what, const char **s,
                            size_t *n) {
    const rg_json *v = rg_json_get(obj, key);
    if (!v) return bad(w, "%s is missing", what);
    *s = rg_json_str(v, n);
    if (!*s) return bad(w, "%s is %s, expected a string", what, article_of(v));
    return RG_OK;
}

// An optional string member: absent is fine, anything but a string is not.
static rg_status opt_string(const where *w, const rg_json *obj, const char *key, const char *what, const char **s,
                            size_t *n) {
    *s = NULL;
    *n = 0;
    return rg_json_get(obj, key) ? get_string(w, obj, key, what, s, n) : RG_OK;
}

// A non-empty string member (a tool's or a call's function name).
static rg_status get_name(const where *w, const rg_json *obj, const char *what) {
    const char *s;
    size_t n;
    rg_status st = get_string(w, obj, "name", what, &s, &n);
    if (!st && n == 0) st = bad(w, "%s is empty", what);
    return st;
}

// The object member `key` of obj (what names it in errors).
static rg_status get_object(const where *w, const rg_json *obj, const char *key, const char *what,
                            const rg_json **out) {
    *out = rg_json_get(obj, key);
    if (!*out) return bad(w, "%s is missing", what);
    if (!rg_json_is(*out, RG_JSON_OBJECT)) return bad(w, "%s is %s, expected an object", what, article_of(*out));
    return RG_OK;
}

// "type", when given, must be "function" (OpenAI's only kind of tool and call).
static rg_status check_function_type(const where *w, const rg_json *obj, const char *what, bool required) {
    const rg_json *t = rg_json_get(obj, "type");
    size_t n;
    const char *s = rg_json_str(t, &n);
    if (!t && !required) return RG_OK;
    if (!s || n != 8 || memcmp(s, "function", 8) != 0) return bad(w, "%s.type must be \"function\"", what);
    return RG_OK;
}

// The line's "tools": [{"type": "function", "function": {"name", "description", "parameters"}}].
static rg_status check_tools(const where *w, const rg_json *tools) {
    if (!rg_json_is(tools, RG_JSON_ARRAY))
        return bad(w, "'tools' is %s, expected an array of {\"type\": \"function\", \"function\": {\"name\", ...}} "
                   "objects", article_of(tools));
    for (size_t i = 0; i < rg_json_len(tools); i++) {
        const rg_json *tool = rg_json_at(tools, i), *fn;
        char what[80];
        snprintf(what, sizeof what, "tools[%zu]", i);
        if (!rg_json_is(tool, RG_JSON_OBJECT)) return bad(w, "%s is %s, expected an object", what, article_of(tool));
        rg_status st = check_function_type(w, tool, what, true);
        snprintf(what, sizeof what, "tools[%zu].function", i);
        if (!st) st = get_object(w, tool, "function", what, &fn);
        snprintf(what, sizeof what, "tools[%zu].function.name", i);
        if (!st) st = get_name(w, fn, what);
        const rg_json *params = st ? NULL : rg_json_get(fn, "parameters");
        if (params && !rg_json_is(params, RG_JSON_OBJECT))
            st = bad(w, "tools[%zu].function.parameters is %s, expected an object", i, article_of(params));
        if (st) return st;
    }
    return RG_OK;
}

// One call of an assistant message: {"id", "type": "function", "function": {"name", "arguments"}}
// with arguments as JSON text of an object (OpenAI's form) or that object itself.
static rg_status check_call(const where *w, const rg_json *call, size_t i, size_t j) {
    char what[96];
    snprintf(what, sizeof what, "messages[%zu].tool_calls[%zu]", i, j);
    if (!rg_json_is(call, RG_JSON_OBJECT)) return bad(w, "%s is %s, expected an object", what, article_of(call));
    const rg_json *fn, *id = rg_json_get(call, "id");
    if (id && !rg_json_is(id, RG_JSON_STRING)) return bad(w, "%s.id is %s, expected a string", what, article_of(id));
    rg_status st = check_function_type(w, call, what, false);
    snprintf(what, sizeof what, "messages[%zu].tool_calls[%zu].function", i, j);
    if (!st) st = get_object(w, call, "function", what, &fn);
    snprintf(what, sizeof what, "messages[%zu].tool_calls[%zu].function.name", i, j);
    if (!st) st = get_name(w, fn, what);
    if (st) return st;
    const rg_json *args = rg_json_get(fn, "arguments");
    snprintf(what, sizeof what, "messages[%zu].tool_calls[%zu].function.arguments", i, j);
    if (!args) return bad(w, "%s is missing", what);
    size_t n;
    const char *s = rg_json_str(args, &n);
    rg_json_doc *doc = NULL;
    if (s) {
        rg_error e = {0};
        if (rg_json_parse(&doc, s, n, NULL, &e)) {
            if (e.status == RG_ERR_NOMEM) return nomem(w, e.msg);
            return bad(w, "%s is not valid JSON text: %s", what, e.msg);
        }
        args = rg_json_root(doc);
    }
    st = rg_json_is(args, RG_JSON_OBJECT) ? RG_OK
                                          : bad(w, "%s is %s%s, expected a JSON object", what, s ? "JSON text of " : "",
                                                article_of(args));
    rg_json_free(doc);
    return st;
}

// An assistant message's "tool_calls" (null: none); *n gets the number of calls.
static rg_status check_calls(const where *w, const rg_json *calls, size_t i, size_t *n) {
    *n = 0;
    if (!calls || rg_json_is(calls, RG_JSON_NULL)) return RG_OK;
    if (!rg_json_is(calls, RG_JSON_ARRAY))
        return bad(w, "messages[%zu].tool_calls is %s, expected an array of {\"type\": \"function\", \"function\": "
                   "{\"name\", \"arguments\"}} objects", i, article_of(calls));
    for (size_t j = 0; j < rg_json_len(calls); j++) {
        rg_status st = check_call(w, rg_json_at(calls, j), i, j);
        if (st) return st;
    }
    *n = rg_json_len(calls);
    return RG_OK;
}

// OpenAI's per-message weight (assistant messages only): 0 leaves the message out of the targets.
static rg_status check_weight(const where *w, const rg_json *item, const rg_chat_message *m, size_t i, bool *target) {
    const rg_json *v = rg_json_get(item, "weight");
    *target = true;
    if (!v) return RG_OK;
    if (!data_role_is(m, "assistant")) return bad(w, "messages[%zu].weight is only for assistant messages", i);
    double x = rg_json_num(v);
    if (!rg_json_is(v, RG_JSON_NUMBER) || (x != 0.0 && x != 1.0)) {
        const char *num = rg_json_num_text(v);
        return bad(w, "messages[%zu].weight is %s, expected 0 or 1", i, num ? num : article_of(v));
    }
    *target = x == 1.0;
    return RG_OK;
}

// A content: a string, or OpenAI's array of text parts ({"type": "text", "text": ...}), joined into *joined.
static rg_status get_content(const where *w, const rg_json *item, const char *what, rg_chat_message *m, char **joined) {
    const rg_json *c = rg_json_get(item, "content");
    if (!rg_json_is(c, RG_JSON_ARRAY)) return get_string(w, item, "content", what, &m->content, &m->content_len);
    size_t total = 0;
    for (size_t k = 0; k < rg_json_len(c); k++) {
        const rg_json *part = rg_json_at(c, k);
        const char *type = rg_json_str(rg_json_get(part, "type"), NULL);
        if (!type || strcmp(type, "text") != 0)
            return bad(w, "%s[%zu] is a part of type '%s'; only text parts can be trained on", what, k,
                       type ? type : "(none)");
        size_t n;
        if (!rg_json_str(rg_json_get(part, "text"), &n))
            return bad(w, "%s[%zu].text is %s, expected a string", what, k, article_of(rg_json_get(part, "text")));
        total += n;
    }
    if (!(*joined = malloc(total + 1))) return nomem(w, "out of memory");
    size_t at = 0;
    for (size_t k = 0; k < rg_json_len(c); k++) {
        size_t n;
        const char *t = rg_json_str(rg_json_get(rg_json_at(c, k), "text"), &n);
        memcpy(*joined + at, t, n);
        at += n;
    }
    (*joined)[at] = 0;
    m->content = *joined, m->content_len = at;
    return RG_OK;
}

// One message: role, content (null or absent when an assistant message has tool_calls), the
// calls, a tool message's name and tool_call_id, the weight; the legacy function fields refused.
static rg_status check_message(const where *w, const rg_json *item, size_t i, rg_chat_message *m, bool *target,
                               char **joined) {
    char what[64];
    if (!rg_json_is(item, RG_JSON_OBJECT))
        return bad(w, "messages[%zu] is %s, expected an object with 'role' and 'content'", i, article_of(item));
    snprintf(what, sizeof what, "messages[%zu].role", i);
    rg_status st = get_string(w, item, "role", what, &m->role, &m->role_len);
    if (st) return st;
    if (data_role_is(m, "function"))
        return bad(w, "messages[%zu].role 'function' is the legacy function-calling format: use 'tool' messages "
                   "(and 'tool_calls' in assistant messages)", i);
    if (rg_json_get(item, "function_call"))
        return bad(w, "messages[%zu].function_call is the legacy function-calling format: use 'tool_calls'", i);
    const rg_json *calls = rg_json_get(item, "tool_calls"), *content = rg_json_get(item, "content");
    size_t n_calls = 0;
    if (calls && !rg_json_is(calls, RG_JSON_NULL) && !data_role_is(m, "assistant"))
        return bad(w, "messages[%zu].tool_calls is only for assistant messages, not '%.*s'", i, (int)m->role_len,
                   m->role);
    if ((st = check_calls(w, calls, i, &n_calls))) return st;
    if (n_calls) m->tool_calls = calls;
    snprintf(what, sizeof what, "messages[%zu].content", i);
    if (n_calls && (!content || rg_json_is(content, RG_JSON_NULL))) m->content = "", m->content_len = 0;
    else if ((st = get_content(w, item, what, m, joined))) return st;
    if (data_role_is(m, "tool")) {
        const char *id;
        size_t id_len;
        snprintf(what, sizeof what, "messages[%zu].tool_call_id", i);
        st = opt_string(w, item, "tool_call_id", what, &id, &id_len);
        snprintf(what, sizeof what, "messages[%zu].name", i);
        if (!st) st = opt_string(w, item, "name", what, &m->name, &m->name_len);
        if (st) return st;
    }
    return check_weight(w, item, m, i, target);
}

void data_parsed_line_free(parsed_line *p) {
    rg_chat_rendered_free(&p->r);
    for (size_t i = 0; p->joined && i < p->n_msgs; i++) free(p->joined[i]);
    free(p->joined);
    free(p->msgs);
    free(p->target);
    rg_json_free(p->doc);
    memset(p, 0, sizeof *p);
}

static rg_status parse_messages(const where *w, const rg_chat_template *tmpl, const rg_json *root, parsed_line *p) {
    const rg_json *msgs = rg_json_get(root, "messages"), *tools = rg_json_get(root, "tools");
    if (!rg_json_is(msgs, RG_JSON_ARRAY))
        return bad(w, "'messages' is %s, expected an array of {role, content} objects", article_of(msgs));
    size_t n = rg_json_len(msgs);
    if (n == 0) return bad(w, "'messages' is empty");
    if (!tmpl)
        return bad(w, "'messages' needs a chat template and the model has none (set data.chat_template to one of "
                   "chatml, llama3, llama3.1, lfm2, gemma)");
    if (tools && rg_json_is(tools, RG_JSON_NULL)) tools = NULL;
    rg_status st = tools ? check_tools(w, tools) : RG_OK;
    if (st) return st;
    p->msgs = calloc(n, sizeof *p->msgs);
    p->target = calloc(n, sizeof *p->target);
    p->joined = calloc(n, sizeof *p->joined);
    if (!p->msgs || !p->target || !p->joined) return nomem(w, "out of memory");
    p->n_msgs = n;
    for (size_t i = 0; i < n && !st; i++)
        st = check_message(w, rg_json_at(msgs, i), i, &p->msgs[i], &p->target[i], &p->joined[i]);
    if (st) return st;
    rg_chat_options copt = {.add_generation_prompt = false, .tools = tools};
    rg_error e = {0};
    st = rg_chat_render(tmpl, p->msgs, n, &copt, &p->r, &e);
    if (st) rg_fail(w->err, st, "%s:%lld: %s", w->path, (long long)w->line, e.msg);
    return st;
}

static rg_status parse_fields(const where *w, const rg_chat_template *tmpl, const rg_json *root, parsed_line *p) {
    if (!rg_json_is(root, RG_JSON_OBJECT)) return bad(w, "expected a JSON object, found %s", article_of(root));
    const rg_json *t = rg_json_get(root, "text"), *msgs = rg_json_get(root, "messages"),
                  *prompt = rg_json_get(root, "prompt"), *completion = rg_json_get(root, "completion");
    int n_kinds = (t != NULL) + (msgs != NULL) + (prompt != NULL || completion != NULL);
    if (n_kinds == 0) return bad(w, "no 'text', 'messages' or 'prompt'/'completion' field");
    if (n_kinds > 1) return bad(w, "more than one of 'text', 'messages' and 'prompt'/'completion'");
    if (rg_json_get(root, "functions"))
        return bad(w, "'functions' is the legacy function-calling format: give 'tools' (and 'tool_calls' in "
                   "assistant messages)");
    const rg_json *tools = rg_json_get(root, "tools");
    if (!msgs && tools && !rg_json_is(tools, RG_JSON_NULL)) return bad(w, "'tools' is only read with 'messages'");
    if (msgs) {
        p->kind = KIND_MESSAGES;
        return parse_messages(w, tmpl, root, p);
    }
    if (t) {
        p->kind = KIND_TEXT;
        return get_string(w, root, "text", "'text'", &p->a, &p->a_len);
    }
    p->kind = KIND_PROMPT;
    if (!prompt) return bad(w, "'completion' without 'prompt'");
    if (!completion) return bad(w, "'prompt' without 'completion'");
    rg_status st = get_string(w, root, "prompt", "'prompt'", &p->a, &p->a_len);
    if (!st) st = get_string(w, root, "completion", "'completion'", &p->b, &p->b_len);
    return st;
}

rg_status data_parse_line(const where *w, const rg_chat_template *tmpl, const char *text, size_t len,
                            parsed_line *p) {
    memset(p, 0, sizeof *p);
    rg_error e = {0};
    if (rg_json_parse(&p->doc, text, len, NULL, &e)) {
        if (e.status == RG_ERR_NOMEM) return nomem(w, e.msg);
        return bad(w, "not valid JSON: %s", e.msg);
    }
    rg_status st = parse_fields(w, tmpl, rg_json_root(p->doc), p);
    if (st) data_parsed_line_free(p);
    return st;
}

bool data_is_blank(const char *text, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r') return false;
    return true;
}

rg_status rg_data_check_line(const rg_chat_template *tmpl, const char *path, int64_t line, const char *text, size_t len,
                             rg_error *err) {
    if (!path || (!text && len)) return rg_fail(err, RG_ERR_ARG, "data: a name and the line's bytes are required");
    where w = {.path = path, .line = line, .err = err};
    if (line == 1 && len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) text += 3, len -= 3;  // byte order mark
    if (data_is_blank(text, len)) return RG_OK;
    size_t at = rg_utf8_first_invalid(text, len);
    if (at < len) return bad(&w, "invalid UTF-8 at byte %zu of the line (byte 0x%02X)", at, (unsigned char)text[at]);
    parsed_line p;
    rg_status st = data_parse_line(&w, tmpl, text, len, &p);
    if (!st) data_parsed_line_free(&p);
    return st;
}

