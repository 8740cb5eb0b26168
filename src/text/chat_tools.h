// chat_tools.h - the tool pieces of a rendered conversation (chat.c's helpers; see chat.h):
// the tool list of the system turn and the calls of an assistant turn, in the Hermes layout
// (chatml) and in LFM2's. Each appends text to w; the error names the message and the call.
#ifndef RG_TEXT_CHAT_TOOLS_H
#define RG_TEXT_CHAT_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/json.h"
#include "base/json_write.h"
#include "retrograd.h"

// The OpenAI `tools` value: NULL or an empty array is no tools (Jinja's `if tools`); anything
// but an array is RG_ERR_ARG.
rg_status rg_chat_tools_count(const struct rg_json *tools, size_t *n, rg_error *err);
// An assistant message's `tool_calls`: NULL or empty is none; anything but an array is RG_ERR_ARG.
rg_status rg_chat_calls_count(const struct rg_json *calls, size_t message, size_t *n, rg_error *err);

// "# Tools\n\nYou may call ... </tool_call>" with one json.dumps'd tool per line.
void rg_chat_hermes_tools(rg_jw *w, const struct rg_json *tools);
// "\n<tool_call>\n{\"name\": \"NAME\", \"arguments\": ARGS}\n</tool_call>" per call.
rg_status rg_chat_hermes_calls(rg_jw *w, const struct rg_json *calls, size_t message, rg_error *err);
// "List of tools: <|tool_list_start|>[TOOL, TOOL]<|tool_list_end|>" (a string tool as it is).
void rg_chat_lfm2_tools(rg_jw *w, const struct rg_json *tools);
// "<|tool_call_start|>[name(arg=value, ...), ...]<|tool_call_end|>".
rg_status rg_chat_lfm2_calls(rg_jw *w, const struct rg_json *calls, size_t message, rg_error *err);

#endif
