// chat_tools.c - tool lists and tool calls as the chat templates write them (see chat_tools.h).
#include <string.h>

#include "base/error.h"
#include "text/chat_tools.h"
#include "text/pyjson.h"

static void text(rg_jw *w, const char *s) { rg_jw_text_append(w, s, strlen(s)); }

rg_status rg_chat_tools_count(const rg_json *tools, size_t *n, rg_error *err) {
    *n = 0;
    if (!tools) return RG_OK;
    if (!rg_json_is(tools, RG_JSON_ARRAY))
        return rg_fail(err, RG_ERR_ARG, "chat: tools must be an array, not %s",
                       rg_json_type_name(rg_json_type_of(tools)));
    *n = rg_json_len(tools);
    return RG_OK;
}

rg_status rg_chat_calls_count(const rg_json *calls, size_t message, size_t *n, rg_error *err) {
    *n = 0;
    if (!calls) return RG_OK;
    if (!rg_json_is(calls, RG_JSON_ARRAY))
        return rg_fail(err, RG_ERR_ARG, "chat: message %zu: tool_calls must be an array, not %s", message,
                       rg_json_type_name(rg_json_type_of(calls)));
    *n = rg_json_len(calls);
    return RG_OK;
}

void rg_chat_hermes_tools(rg_jw *w, const rg_json *tools) {
    text(w, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (size_t i = 0; i < rg_json_len(tools); i++) {
        text(w, "\n");
        rg_pyjson_dumps(w, rg_json_at(tools, i));
    }
    text(w, "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call>");
}

void rg_chat_lfm2_tools(rg_jw *w, const rg_json *tools) {
    text(w, "List of tools: <|tool_list_start|>[");
    for (size_t i = 0; i < rg_json_len(tools); i++) {
        const rg_json *tool = rg_json_at(tools, i);
        size_t n;
        const char *s = rg_json_str(tool, &n);
        if (i) text(w, ", ");
        if (s) rg_jw_text_append(w, s, n);  // the template writes a string tool as it is
        else rg_pyjson_dumps(w, tool);
    }
    text(w, "]<|tool_list_end|>");
}

// One call's name and arguments: {"function": {"name", "arguments"}} or, as the Qwen template
// also takes, {"name", "arguments"}. arguments as a string is JSON text (OpenAI's form; servers
// parse it before the template sees it), which *doc then owns.
static rg_status call_parts(const rg_json *call, size_t message, size_t index, const char **name, size_t *name_len,
                            const rg_json **args, rg_json_doc **doc, rg_error *err) {
    const rg_json *fn = rg_json_get(call, "function");
    if (!fn) fn = call;
    *doc = NULL;
    *name = rg_json_str(rg_json_get(fn, "name"), name_len);
    if (!*name)
        return rg_fail(err, RG_ERR_ARG, "chat: message %zu: tool call %zu has no function name string", message,
                       index);
    *args = rg_json_get(fn, "arguments");
    if (!*args)
        return rg_fail(err, RG_ERR_ARG, "chat: message %zu: tool call %zu (%.*s) has no arguments", message, index,
                       (int)*name_len, *name);
    size_t n;
    const char *s = rg_json_str(*args, &n);
    if (!s) return RG_OK;
    rg_error perr = {0};
    if (rg_json_parse(doc, s, n, NULL, &perr))
        return rg_fail(err, RG_ERR_ARG, "chat: message %zu: tool call %zu (%.*s): arguments are not JSON: %s",
                       message, index, (int)*name_len, *name, perr.msg);
    *args = rg_json_root(*doc);
    return RG_OK;
}

// Writes one call (index i of the message's calls).
typedef rg_status (*write_call)(rg_jw *w, size_t i, const char *name, size_t name_len, const rg_json *args,
                                size_t message, rg_error *err);

static rg_status each_call(rg_jw *w, const rg_json *calls, size_t message, write_call fn, rg_error *err) {
    for (size_t i = 0; i < rg_json_len(calls); i++) {
        const char *name;
        size_t name_len;
        const rg_json *args;
        rg_json_doc *doc;
        rg_status st = call_parts(rg_json_at(calls, i), message, i, &name, &name_len, &args, &doc, err);
        if (!st) st = fn(w, i, name, name_len, args, message, err);
        rg_json_free(doc);
        if (st) return st;
    }
    return RG_OK;
}

static rg_status hermes_call(rg_jw *w, size_t i, const char *name, size_t name_len, const rg_json *args,
                             size_t message, rg_error *err) {
    (void)i, (void)message, (void)err;
    text(w, "\n<tool_call>\n{\"name\": \"");
    rg_jw_text_append(w, name, name_len);
    text(w, "\", \"arguments\": ");
    rg_pyjson_dumps(w, args);
    text(w, "}\n</tool_call>");
    return RG_OK;
}

rg_status rg_chat_hermes_calls(rg_jw *w, const rg_json *calls, size_t message, rg_error *err) {
    return each_call(w, calls, message, hermes_call, err);
}

static rg_status lfm2_call(rg_jw *w, size_t i, const char *name, size_t name_len, const rg_json *args, size_t message,
                           rg_error *err) {
    if (!rg_json_is(args, RG_JSON_OBJECT))
        return rg_fail(err, RG_ERR_ARG, "chat: message %zu: tool call %zu (%.*s): arguments must be an object for "
                       "LFM2's name(key=value) calls", message, i, (int)name_len, name);
    if (i) text(w, ", ");
    bool names = rg_pyjson_is_name(name, name_len);
    for (size_t k = 0; names && k < rg_json_len(args); k++) {
        size_t kn;
        const char *key = rg_json_key_at(args, k, &kn);
        names = rg_pyjson_is_name(key, kn);
    }
    if (!names) {  // not writable as name(key=value): the {"name", "arguments"} form, which LFM2's parser takes too
        text(w, "{\"name\": ");
        rg_pyjson_string(w, name, name_len);
        text(w, ", \"arguments\": ");
        rg_pyjson_literal(w, args);
        text(w, "}");
        return RG_OK;
    }
    rg_jw_text_append(w, name, name_len);
    text(w, "(");
    rg_pyjson_kwargs(w, args);
    text(w, ")");
    return RG_OK;
}

rg_status rg_chat_lfm2_calls(rg_jw *w, const rg_json *calls, size_t message, rg_error *err) {
    text(w, "<|tool_call_start|>[");
    rg_status st = each_call(w, calls, message, lfm2_call, err);
    text(w, "]<|tool_call_end|>");
    return st;
}
