// tool_calls.c - tool calls parsed out of generated text, and checked against the request
// (see tool_calls.h).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/json_write.h"
#include "text/pyjson.h"
#include "text/tool_calls.h"

typedef struct markers {
    const char *open, *close;
} markers;

static const markers hermes = {"<tool_call>", "</tool_call>"};
static const markers lfm2 = {"<|tool_call_start|>", "<|tool_call_end|>"};

static const markers *markers_of(rg_chat_family f) {
    return f == RG_CHAT_CHATML ? &hermes : f == RG_CHAT_LFM2 ? &lfm2 : NULL;
}

static const char *find(const char *t, size_t len, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; n <= len && i <= len - n; i++)
        if (t[i] == needle[0] && memcmp(t + i, needle, n) == 0) return t + i;
    return NULL;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void rg_tool_calls_free(rg_tool_calls *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_calls; i++) {
        free(c->calls[i].name);
        free(c->calls[i].arguments);
    }
    free(c->calls);
    free(c->content);
    free(c->text);
    memset(c, 0, sizeof *c);
}

// ---------------------------------------------------------------------------
// Streaming

size_t rg_tool_calls_safe_len(rg_chat_family f, const char *text, size_t len) {
    const markers *m = markers_of(f);
    if (!m) return len;
    const char *at = find(text, len, m->open);
    if (at) return (size_t)(at - text);
    size_t n = strlen(m->open);
    for (size_t k = n - 1 < len ? n - 1 : len; k > 0; k--)  // the longest end that starts the marker
        if (memcmp(text + len - k, m->open, k) == 0) return len - k;
    return len;
}

bool rg_tool_calls_may_start(rg_chat_family f, const char *text, size_t len) {
    return rg_tool_calls_safe_len(f, text, len) < len;
}

// ---------------------------------------------------------------------------
// Parsing

typedef enum call_result { CALL_OK, CALL_BAD, CALL_NOMEM } call_result;

static call_result add_call(rg_tool_calls *out, size_t *cap, const char *name, size_t name_len, char *args,
                            size_t args_len) {
    if (out->n_calls == *cap) {
        size_t c = *cap ? 2 * *cap : 4;
        rg_tool_call *p = realloc(out->calls, c * sizeof *p);
        if (!p) return free(args), CALL_NOMEM;
        out->calls = p;
        *cap = c;
    }
    char *n = dup_n(name, name_len);
    if (!n) return free(args), CALL_NOMEM;
    out->calls[out->n_calls++] = (rg_tool_call){n, name_len, args, args_len};
    return CALL_OK;
}

// A JSON writer's text taken as a call's arguments, after checking that it reads back as one
// object (duplicate keyword arguments would not).
static call_result take_arguments(rg_tool_calls *out, size_t *cap, const char *name, size_t name_len, rg_jw *w,
                                  char *why, size_t why_cap) {
    size_t n;
    char *args = rg_jw_take(w, &n);
    if (!args) return CALL_NOMEM;
    rg_json_doc *doc = NULL;
    rg_error perr = {0};
    if (rg_json_parse(&doc, args, n, NULL, &perr)) {
        snprintf(why, why_cap, "its arguments %.100s are not one JSON object (%.300s)", args, perr.msg);
        free(args);
        return perr.status == RG_ERR_NOMEM ? CALL_NOMEM : CALL_BAD;
    }
    bool object = rg_json_is(rg_json_root(doc), RG_JSON_OBJECT);
    rg_json_free(doc);
    if (!object) {
        snprintf(why, why_cap, "its arguments are not an object");
        free(args);
        return CALL_BAD;
    }
    return add_call(out, cap, name, name_len, args, n);
}

// {"name": "NAME", "arguments": {...}} (arguments may be a string holding the object).
static call_result call_from_object(const rg_json *root, rg_tool_calls *out, size_t *cap, char *why, size_t why_cap) {
    size_t name_len;
    const char *name = rg_json_str(rg_json_get(root, "name"), &name_len);
    if (!rg_json_is(root, RG_JSON_OBJECT) || !name || name_len == 0 || strlen(name) != name_len) {
        snprintf(why, why_cap, "it is not an object with a \"name\" string");
        return CALL_BAD;
    }
    const rg_json *args = rg_json_get(root, "arguments");
    rg_json_doc *inner = NULL;
    size_t n;
    const char *s = rg_json_str(args, &n);
    if (s) {
        rg_error perr = {0};
        if (rg_json_parse(&inner, s, n, NULL, &perr)) {
            snprintf(why, why_cap, "its \"arguments\" string is not JSON: %.400s", perr.msg);
            return CALL_BAD;
        }
        args = rg_json_root(inner);
    }
    if (!rg_json_is(args, RG_JSON_OBJECT)) {
        snprintf(why, why_cap, "its \"arguments\" is %s, not an object", args ? rg_json_type_name(rg_json_type_of(args)) : "missing");
        rg_json_free(inner);
        return CALL_BAD;
    }
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_value(&w, args);
    rg_json_free(inner);
    return take_arguments(out, cap, name, name_len, &w, why, why_cap);
}

// Hermes: the text between <tool_call> and </tool_call> is one JSON object.
static call_result hermes_block(const char *t, size_t b, size_t e, rg_tool_calls *out, size_t *cap, char *why,
                                size_t why_cap) {
    rg_json_doc *doc = NULL;
    rg_error perr = {0};
    if (rg_json_parse(&doc, t + b, e - b, NULL, &perr)) {
        snprintf(why, why_cap, "the JSON from byte %zu does not parse: %.400s", b, perr.msg);
        return perr.status == RG_ERR_NOMEM ? CALL_NOMEM : CALL_BAD;
    }
    call_result r = call_from_object(rg_json_root(doc), out, cap, why, why_cap);
    rg_json_free(doc);
    return r;
}

typedef struct cursor {
    const char *t;
    size_t i, end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->i < c->end && space(c->t[c->i])) c->i++;
}

// The longest name at the cursor (rg_pyjson_is_name).
static size_t ident(cursor *c) {
    size_t b = c->i;
    while (c->i < c->end && rg_pyjson_name_byte((unsigned char)c->t[c->i], c->i == b)) c->i++;
    return c->i - b;
}

static call_result expected(cursor *c, const char *what, char *why, size_t why_cap) {
    if (c->i < c->end) snprintf(why, why_cap, "byte %zu: %s, found '%c'", c->i, what, c->t[c->i]);
    else snprintf(why, why_cap, "byte %zu: %s, found the end of the call", c->i, what);
    return CALL_BAD;
}

// Whether a name (rg_pyjson_is_name: no quote, backslash or control byte) is well-formed UTF-8,
// as a JSON string must be: base/json.h decides.
static bool utf8_name(const char *name, size_t n) {
    char *q = malloc(n + 2);
    if (!q) return false;
    q[0] = q[n + 1] = '"';
    memcpy(q + 1, name, n);
    rg_json_doc *doc = NULL;
    rg_error err = {0};
    bool ok = rg_json_parse(&doc, q, n + 2, NULL, &err) == RG_OK;
    rg_json_free(doc);
    free(q);
    return ok;
}

// name(key=value, ...) with Python-literal values, as a JSON object of arguments.
static call_result lfm2_call(cursor *c, rg_tool_calls *out, size_t *cap, char *why, size_t why_cap) {
    size_t name_at = c->i, name_len = ident(c);
    if (!name_len) return expected(c, "a function name", why, why_cap);
    if (!utf8_name(c->t + name_at, name_len)) {
        snprintf(why, why_cap, "byte %zu: the function name is not well-formed UTF-8", name_at);
        return CALL_BAD;
    }
    skip_ws(c);
    if (c->i >= c->end || c->t[c->i] != '(') return expected(c, "'(' after the function name", why, why_cap);
    c->i++;
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    for (;;) {
        skip_ws(c);
        if (c->i < c->end && c->t[c->i] == ')') break;
        size_t key_at = c->i, key_len = ident(c);
        skip_ws(c);
        if (!key_len || c->i >= c->end || c->t[c->i] != '=')
            return rg_jw_free(&w), expected(c, key_len ? "'=' after an argument name" : "an argument name (key=value)", why, why_cap);
        c->i++;
        char *key = dup_n(c->t + key_at, key_len);
        if (!key) return rg_jw_free(&w), CALL_NOMEM;
        rg_jw_key(&w, key);
        free(key);
        if (!rg_pyjson_read_literal(&w, c->t, c->end, &c->i, why, why_cap)) return rg_jw_free(&w), CALL_BAD;
        skip_ws(c);
        if (c->i < c->end && c->t[c->i] == ',') c->i++;
        else if (c->i >= c->end || c->t[c->i] != ')') return rg_jw_free(&w), expected(c, "',' or ')'", why, why_cap);
    }
    c->i++;
    rg_jw_obj_end(&w);
    call_result r = take_arguments(out, cap, c->t + name_at, name_len, &w, why, why_cap);
    rg_jw_free(&w);
    return r;
}

// A {"name", "arguments"} dict written as a Python literal.
static call_result lfm2_dict(cursor *c, rg_tool_calls *out, size_t *cap, char *why, size_t why_cap) {
    rg_jw w;
    rg_jw_init(&w);
    if (!rg_pyjson_read_literal(&w, c->t, c->end, &c->i, why, why_cap)) return rg_jw_free(&w), CALL_BAD;
    size_t n;
    const char *json = rg_jw_text(&w, &n);
    if (!json) return rg_jw_free(&w), CALL_NOMEM;
    rg_json_doc *doc = NULL;
    rg_error perr = {0};
    call_result r = CALL_BAD;
    if (rg_json_parse(&doc, json, n, NULL, &perr)) snprintf(why, why_cap, "the call dict is not JSON: %.400s", perr.msg);
    else r = call_from_object(rg_json_root(doc), out, cap, why, why_cap);
    rg_json_free(doc);
    rg_jw_free(&w);
    return r;
}

// LFM2: [call, call, ...] between <|tool_call_start|> and <|tool_call_end|>.
static call_result lfm2_block(const char *t, size_t b, size_t e, rg_tool_calls *out, size_t *cap, char *why,
                              size_t why_cap) {
    cursor c = {t, b, e};
    skip_ws(&c);
    if (c.i >= c.end || t[c.i] != '[') return expected(&c, "'[' opening the list of calls", why, why_cap);
    c.i++;
    for (;;) {
        skip_ws(&c);
        if (c.i < c.end && t[c.i] == ']') break;
        call_result r = c.i < c.end && t[c.i] == '{' ? lfm2_dict(&c, out, cap, why, why_cap)
                                                      : lfm2_call(&c, out, cap, why, why_cap);
        if (r != CALL_OK) return r;
        skip_ws(&c);
        if (c.i < c.end && t[c.i] == ',') c.i++;
        else if (c.i >= c.end || t[c.i] != ']') return expected(&c, "',' or ']' after a call", why, why_cap);
    }
    c.i++;
    skip_ws(&c);
    if (c.i < c.end) return expected(&c, "the end of the calls after ']'", why, why_cap);
    return CALL_OK;
}

// The parse failed: no calls, the whole text as content, err saying why.
static rg_status unparsable(rg_tool_calls *out, rg_error *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static rg_status unparsable(rg_tool_calls *out, rg_error *err, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < out->n_calls; i++) {
        free(out->calls[i].name);
        free(out->calls[i].arguments);
    }
    free(out->calls);
    free(out->content);
    out->calls = NULL;
    out->n_calls = 0;
    out->status = RG_TOOL_CALLS_UNPARSABLE;
    out->content = dup_n(out->text, out->text_len);
    out->content_len = out->text_len;
    if (!out->content) return rg_fail(err, RG_ERR_NOMEM, "tool calls: out of memory");
    rg_fail(err, RG_ERR_FORMAT, "%s", msg);
    return RG_OK;
}

static rg_status nomem(rg_tool_calls *out, rg_error *err) {
    rg_tool_calls_free(out);
    return rg_fail(err, RG_ERR_NOMEM, "tool calls: out of memory");
}

// Content: the text outside the calls, trimmed at both ends.
static rg_status set_content(rg_tool_calls *out, const char *s, size_t n) {
    while (n && space(s[0])) s++, n--;
    while (n && space(s[n - 1])) n--;
    out->content = dup_n(s, n);
    out->content_len = n;
    return out->content ? RG_OK : RG_ERR_NOMEM;
}

rg_status rg_tool_calls_parse(rg_chat_family f, const char *text, size_t len, rg_tool_calls *out, rg_error *err) {
    memset(out, 0, sizeof *out);
    const markers *m = markers_of(f);
    if (!m)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "tool calls: %s templates have no tool calls (only chatml and lfm2)",
                       rg_chat_family_name(f));
    if (!(out->text = dup_n(text, len))) return nomem(out, err);
    out->text_len = len;
    if (!find(text, len, m->open)) {
        if (!(out->content = dup_n(text, len))) return nomem(out, err);
        out->content_len = len;
        return RG_OK;
    }
    size_t open_len = strlen(m->open), close_len = strlen(m->close), pos = 0, cap = 0;
    rg_jw content;
    rg_jw_init(&content);
    const char *at;
    for (size_t k = 0; (at = find(text + pos, len - pos, m->open)) != NULL; k++) {
        size_t b = (size_t)(at - text) + open_len;
        rg_jw_text_append(&content, text + pos, (size_t)(at - text) - pos);
        const char *close = find(text + b, len - b, m->close);
        if (!close) {
            rg_jw_free(&content);
            return unparsable(out, err, "tool call %zu at byte %zu: no %s after %s", k, b - open_len, m->close, m->open);
        }
        size_t e = (size_t)(close - text);
        char why[512] = "";
        call_result r = f == RG_CHAT_CHATML ? hermes_block(text, b, e, out, &cap, why, sizeof why)
                                            : lfm2_block(text, b, e, out, &cap, why, sizeof why);
        if (r != CALL_OK) {
            rg_jw_free(&content);
            if (r == CALL_NOMEM) return nomem(out, err);
            return unparsable(out, err, "tool call %zu at byte %zu: %s", k, b - open_len, why);
        }
        pos = e + close_len;
    }
    rg_jw_text_append(&content, text + pos, len - pos);
    size_t n;
    const char *c = rg_jw_text(&content, &n);
    rg_status st = c ? set_content(out, c, n) : RG_ERR_NOMEM;
    rg_jw_free(&content);
    if (st) return nomem(out, err);
    out->status = RG_TOOL_CALLS_OK;
    return RG_OK;
}

// ---------------------------------------------------------------------------
// The request's rules

static const char *tool_name(const rg_json *tool, size_t *len) {
    return rg_json_str(rg_json_get(rg_json_get(tool, "function"), "name"), len);
}

static const rg_json *tool_named(const rg_json *tools, const char *name, size_t len) {
    for (size_t i = 0; i < rg_json_len(tools); i++) {
        size_t n;
        const char *s = tool_name(rg_json_at(tools, i), &n);
        if (s && n == len && memcmp(s, name, len) == 0) return rg_json_at(tools, i);
    }
    return NULL;
}

static bool str_is(const rg_json *v, const char *s) {
    size_t n;
    const char *t = rg_json_str(v, &n);
    return t && n == strlen(s) && memcmp(t, s, n) == 0;
}

static rg_status check_tools(const rg_json *tools, rg_error *err) {
    if (!rg_json_is(tools, RG_JSON_ARRAY))
        return rg_fail(err, RG_ERR_ARG, "tools must be an array, not %s", rg_json_type_name(rg_json_type_of(tools)));
    for (size_t i = 0; i < rg_json_len(tools); i++) {
        const rg_json *tool = rg_json_at(tools, i);
        size_t n;
        const char *name = tool_name(tool, &n);
        if (!str_is(rg_json_get(tool, "type"), "function"))
            return rg_fail(err, RG_ERR_ARG, "tools[%zu]: \"type\" must be \"function\"", i);
        if (!rg_json_is(rg_json_get(tool, "function"), RG_JSON_OBJECT) || !name || n == 0)
            return rg_fail(err, RG_ERR_ARG, "tools[%zu]: needs \"function\": {\"name\": a non-empty string}", i);
        if (tool_named(tools, name, n) != tool)
            return rg_fail(err, RG_ERR_ARG, "tools[%zu]: the function name '%.*s' is used twice", i, (int)n, name);
    }
    return RG_OK;
}

rg_status rg_tool_choice_parse(const rg_json *tools, const rg_json *choice, rg_tool_choice *out, rg_error *err) {
    memset(out, 0, sizeof *out);
    if (tools) {
        rg_status st = check_tools(tools, err);
        if (st) return st;
    }
    if (!choice || str_is(choice, "auto")) return RG_OK;
    if (str_is(choice, "none")) {
        out->mode = RG_TOOL_CHOICE_NONE;
        return RG_OK;
    }
    if (str_is(choice, "required")) {
        out->mode = RG_TOOL_CHOICE_REQUIRED;
    } else if (rg_json_is(choice, RG_JSON_OBJECT)) {
        out->name = tool_name(choice, &out->name_len);
        if (!str_is(rg_json_get(choice, "type"), "function") || !out->name)
            return rg_fail(err, RG_ERR_ARG, "tool_choice: an object must be {\"type\": \"function\", \"function\": "
                                            "{\"name\": \"...\"}}");
        out->mode = RG_TOOL_CHOICE_FUNCTION;
        if (!tool_named(tools, out->name, out->name_len))
            return rg_fail(err, RG_ERR_ARG, "tool_choice: the function '%.*s' is not one of tools", (int)out->name_len,
                           out->name);
    } else {
        return rg_fail(err, RG_ERR_ARG, "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": "
                                        "\"function\", \"function\": {\"name\": ...}}");
    }
    if (rg_json_len(tools) == 0)
        return rg_fail(err, RG_ERR_ARG, "tool_choice: \"%s\" needs a non-empty tools array",
                       out->mode == RG_TOOL_CHOICE_REQUIRED ? "required" : "function");
    return RG_OK;
}

rg_status rg_tool_calls_check(rg_tool_calls *calls, const rg_json *tools, const rg_tool_choice *choice, rg_error *err) {
    if (calls->status == RG_TOOL_CALLS_UNPARSABLE) return RG_OK;
    rg_tool_choice_mode mode = choice ? choice->mode : RG_TOOL_CHOICE_AUTO;
    if (calls->n_calls == 0) {
        if (mode == RG_TOOL_CHOICE_REQUIRED || mode == RG_TOOL_CHOICE_FUNCTION)
            return unparsable(calls, err, "no tool call, but tool_choice requires one");
        return RG_OK;
    }
    for (size_t i = 0; i < calls->n_calls; i++) {
        const rg_tool_call *c = &calls->calls[i];
        if (mode == RG_TOOL_CHOICE_NONE)
            return unparsable(calls, err, "tool call %zu (%s): tool_choice is \"none\"", i, c->name);
        if (!tool_named(tools, c->name, c->name_len))
            return unparsable(calls, err, "tool call %zu names '%s', which is not one of the request's tools", i, c->name);
        if (mode == RG_TOOL_CHOICE_FUNCTION && (c->name_len != choice->name_len || memcmp(c->name, choice->name, c->name_len)))
            return unparsable(calls, err, "tool call %zu names '%s', but tool_choice asks for '%.*s'", i, c->name,
                              (int)choice->name_len, choice->name);
        if (c->arguments_len == 0 || c->arguments[0] != '{')
            return unparsable(calls, err, "tool call %zu (%s): the arguments are not an object", i, c->name);
    }
    return RG_OK;
}
