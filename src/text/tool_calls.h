// tool_calls.h - tool calls out of a model's generated text, and the checks an OpenAI-style
// server makes with them (`tools`, `tool_choice` of /v1/chat/completions).
//
// What the model writes is what its chat template taught it (chat.h):
//   chatml  Hermes: <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>, possibly
//           several, usually after some text; the JSON is strict (base/json.h), and "arguments"
//           must be an object (or a string holding one, which some models write).
//   lfm2    <|tool_call_start|>[name(key="v", n=1), other()]<|tool_call_end|>: Python calls with
//           keyword arguments whose values are Python literals (strings in ' or " with Python's
//           escapes, numbers, True/False/None and true/false/null, lists, tuples, dicts with
//           string keys), converted to JSON; an item may also be a {"name", "arguments"} dict.
// Other families have no tool calls: RG_ERR_UNSUPPORTED (chat.h refuses to render tools for them).
//
// The result's status says what the text was:
//   RG_TOOL_CALLS_NONE        no call marker: content is the text, unchanged;
//   RG_TOOL_CALLS_OK          every marked call parsed: content is the text outside the calls with
//                             white space trimmed at both ends (the template writes it so), and the
//                             calls in order, arguments as compact JSON object text (what OpenAI
//                             puts in function.arguments);
//   RG_TOOL_CALLS_UNPARSABLE  a marker is there but a call does not parse (or, after
//                             rg_tool_calls_check, breaks the request's rules): content is the whole
//                             text, no calls, and err says what was wrong and where (err->status
//                             RG_ERR_FORMAT). A server answers with the text as content.
// The functions return RG_OK in all three cases; only RG_ERR_NOMEM and RG_ERR_UNSUPPORTED fail.
#ifndef RG_TEXT_TOOL_CALLS_H
#define RG_TEXT_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/json.h"
#include "retrograd.h"
#include "text/chat.h"

typedef enum rg_tool_calls_status {
    RG_TOOL_CALLS_NONE = 0,
    RG_TOOL_CALLS_OK = 1,
    RG_TOOL_CALLS_UNPARSABLE = 2,
} rg_tool_calls_status;

typedef struct rg_tool_call {
    char *name;  // NUL-terminated, malloc'd
    size_t name_len;
    char *arguments;  // compact JSON object text, NUL-terminated, malloc'd
    size_t arguments_len;
} rg_tool_call;

typedef struct rg_tool_calls {
    rg_tool_calls_status status;
    char *content;  // NUL-terminated, malloc'd (see above)
    size_t content_len;
    rg_tool_call *calls;
    size_t n_calls;
    char *text;  // the whole generated text (what content becomes when a check fails)
    size_t text_len;
} rg_tool_calls;

rg_status rg_tool_calls_parse(rg_chat_family f, const char *text, size_t len, rg_tool_calls *out, rg_error *err);
void rg_tool_calls_free(rg_tool_calls *c);

// Streaming: how many leading bytes of the text so far cannot belong to a call (they may be sent
// as content now). The rest is a call marker and what follows it, or an end of the text that
// could grow into a marker ("<tool_c"), and is held until more text decides it.
size_t rg_tool_calls_safe_len(rg_chat_family f, const char *text, size_t len);
// Whether the text holds a call marker or ends with the start of one (safe_len < len).
bool rg_tool_calls_may_start(rg_chat_family f, const char *text, size_t len);

// tool_choice: "auto" (or absent), "none", "required", or {"type": "function", "function": {"name"}}.
typedef enum rg_tool_choice_mode {
    RG_TOOL_CHOICE_AUTO = 0,
    RG_TOOL_CHOICE_NONE = 1,
    RG_TOOL_CHOICE_REQUIRED = 2,
    RG_TOOL_CHOICE_FUNCTION = 3,
} rg_tool_choice_mode;

typedef struct rg_tool_choice {
    rg_tool_choice_mode mode;
    const char *name;  // RG_TOOL_CHOICE_FUNCTION: the function (points into the request)
    size_t name_len;
} rg_tool_choice;

// Validates a request's `tools` (NULL: none; else an array of {"type": "function", "function":
// {"name": non-empty string, ...}} with distinct names) and `tool_choice` (NULL: "auto"; a named
// function must be one of tools; "required" or a function needs tools). RG_ERR_ARG names the
// field and the item at fault (a server's 400).
rg_status rg_tool_choice_parse(const rg_json *tools, const rg_json *tool_choice, rg_tool_choice *out, rg_error *err);
// Checks parsed calls against the request: each name is one of tools' functions and its arguments
// an object; "none" allows no call, "required" at least one, a named function only calls to it
// (and at least one). A broken rule turns calls into RG_TOOL_CALLS_UNPARSABLE (see above) with err
// naming the call and the rule. Calls already UNPARSABLE are left as they are.
rg_status rg_tool_calls_check(rg_tool_calls *calls, const rg_json *tools, const rg_tool_choice *choice, rg_error *err);

#endif
