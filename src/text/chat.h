// chat.h - rendering conversations with the model's own chat template (spec/architectures.md
// §5.5, §6.2).
//
// There is no Jinja engine: the template text (tokenizer.chat_template) is recognized as one
// of the common families and that family's layout is written directly, with the details the
// template text itself states (its default system prompt, its date, whether it trims).
//
//   chatml   Qwen2, Qwen2.5, SmolLM2 and plain ChatML:
//              <|im_start|>{role}\n{content}<|im_end|>\n   per message
//            A default system message is inserted when the template has one and there are
//            messages, the first of which is not 'system' (Qwen2: "You are a helpful
//            assistant", Qwen2.5: "You are Qwen, created by Alibaba Cloud. You are a helpful
//            assistant.", SmolLM2: "You are a helpful AI assistant named SmolLM, trained by
//            Hugging Face"); it is taken from the template's own string literal. Qwen2.5's 'tool' messages become
//            <|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n, with
//            consecutive tool messages sharing one user turn. A ChatML template that writes
//            bos_token first gets the BOS text first.
//   lfm2     {bos}, then <|im_start|>system\n{content}<|im_end|>\n only when the first message
//            is a non-empty system message, then ChatML; 'tool' content is wrapped in
//            <|tool_response_start|>...<|tool_response_end|>.
//   llama3   Llama 3: {bos} before the first message,
//            <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>
//   llama3.1 Llama 3.1 / 3.2 / 3.3: {bos}<|start_header_id|>system<|end_header_id|>\n\n
//            Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n{system|trim}<|eot_id|>
//            always, then the Llama 3 blocks for the other messages.
//   gemma    Gemma 2 and Gemma 3: {bos}<start_of_turn>{role}\n{content|trim}<end_of_turn>\n with
//            'assistant' written as 'model'; user and assistant must alternate, user first (the
//            templates raise otherwise: refused here). Gemma 3 writes a leading system
//            message as "{system}\n\n" at the start of the first user turn; Gemma 2 refuses it.
// The generation prompt is <|im_start|>assistant\n (chatml, lfm2),
// <|start_header_id|>assistant<|end_header_id|>\n\n (llama3*) or <start_of_turn>model\n (gemma).
//
// Tools (rg_chat_options.tools, the OpenAI `tools` array) and tool calls (an assistant message's
// `tool_calls`, OpenAI's form; arguments as JSON text are parsed, as servers do before the
// template sees them), JSON written as transformers' `tojson` does (json.dumps, pyjson.h):
//   chatml   the Hermes layout of Qwen2.5's template, also for ChatML templates without a tool
//            section of their own (SmolLM2, plain ChatML): the system turn is
//            <|im_start|>system\n{system}\n\n# Tools\n\nYou may call one or more functions ...
//            <tools>\n{tool}\n{tool}\n</tools>\n\nFor each function call, ...</tool_call><|im_end|>\n
//            where {system} is the leading system message, else the template's default system
//            prompt; with neither the turn starts at "# Tools" (Qwen3's form). An assistant
//            message with calls is <|im_start|>assistant[\n{content}] then per call
//            \n<tool_call>\n{"name": "NAME", "arguments": {json}}\n</tool_call>, then <|im_end|>\n;
//            'tool' messages take the <tool_response> user turns whenever the conversation uses
//            tools (tools given or any calls), whatever the template.
//   lfm2     the system turn is {system}\nList of tools: <|tool_list_start|>[{tool}, {tool}]
//            <|tool_list_end|> ("\n" only after a non-empty system); LFM2's template has no
//            tool_calls branch, so calls are written in front of the content the way LFM2
//            generates them: <|tool_call_start|>[name(key="v", n=1, flag=True)]<|tool_call_end|>
//            (arguments must then be objects; values as Python literals); a call whose name or
//            argument names are not Python-style names is written {"name": "n", "arguments": {...}}
//            in the list instead (a form the parser reads too).
// A 'tool' message's name is carried but no supported template writes it. An empty tools array
// or empty tool_calls is the same as none (the templates test them with `if`).
//
// Not supported (refused with an error rather than rendered differently): tools or tool calls
// with llama3, llama3.1 or gemma templates (RG_ERR_UNSUPPORTED naming the family), LFM2 templates
// that write the tool list without <|tool_list_start|> (rendered with it), Qwen3/thinking
// templates (<think>, reasoning_content), 'tool'/'ipython' messages with Llama 3.1 templates,
// gemma conversations that do not alternate user and assistant, and every other template family.
#ifndef RG_TEXT_CHAT_H
#define RG_TEXT_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "retrograd.h"
#include "text/tokenizer.h"

struct rg_json;  // base/json.h

typedef enum rg_chat_family {
    RG_CHAT_CHATML = 1,
    RG_CHAT_LFM2 = 2,
    RG_CHAT_LLAMA3 = 3,
    RG_CHAT_LLAMA31 = 4,
    RG_CHAT_GEMMA = 5,
} rg_chat_family;

typedef struct rg_chat_template {
    rg_chat_family family;
    char *default_system;        // chatml: inserted system content, NULL when the template has none
    bool qwen_tool_turns;        // chatml: 'tool' messages in <tool_response> user turns (Qwen2.5)
    bool lfm2_tool_wrap;         // lfm2: 'tool' content in <|tool_response_start|>...<|tool_response_end|>
    bool trim_content;           // llama3*, gemma: message content | trim
    bool gemma_system_prefix;    // gemma: a leading system message opens the first user turn (Gemma 3)
    char *bos_text;              // the text of bos_token where the template writes it, else NULL
    char *knowledge_line;        // llama3.1: "Cutting Knowledge Date: ...\n" from the template
    char *default_date;          // llama3.1: the template's fallback date string ("26 Jul 2024")
    bool date_from_clock;        // llama3.2+: the template asks for today's date (strftime_now)
} rg_chat_template;

// Recognizes template text (any bytes, not NUL-terminated). bos_text is the model's BOS token
// text (NULL: the family's usual one). An unrecognized template gives RG_ERR_UNSUPPORTED with
// its first 60 characters and the supported families.
rg_status rg_chat_template_parse(rg_chat_template *out, const char *tmpl, size_t len, const char *bos_text,
                                 rg_error *err);
// The model's template (tokenizer.chat_template) with its BOS text; RG_ERR_NOT_FOUND when the
// model has none.
rg_status rg_chat_template_from_tokenizer(rg_chat_template *out, const rg_tokenizer *tok, rg_error *err);
// A family's layout without the model's template text, for a model that has none (`generate
// --chat-template NAME`, `data.chat_template`): chatml (no default system prompt), llama3,
// llama3.1 (its knowledge line and default date), lfm2, gemma (Gemma 3's: a system message opens
// the first user turn). bos_text: the model's BOS text (NULL: the family's usual one). An unknown
// name is RG_ERR_ARG naming the built-in ones (rg_chat_builtin_names).
rg_status rg_chat_template_builtin(rg_chat_template *out, const char *name, const char *bos_text, rg_error *err);
extern const char rg_chat_builtin_names[];
void rg_chat_template_free(rg_chat_template *t);
const char *rg_chat_family_name(rg_chat_family f);

typedef struct rg_chat_message {
    const char *role;
    size_t role_len;
    const char *content;
    size_t content_len;
    const struct rg_json *tool_calls;  // assistant: OpenAI `tool_calls` ([{"id", "type", "function":
                                       // {"name", "arguments": JSON text}}]); NULL: none
    const char *name;                  // 'tool': the tool's name (optional, not rendered); NULL: none
    size_t name_len;
} rg_chat_message;

// Where one message landed in the rendered text (byte offsets, half-open ranges).
typedef struct rg_chat_span {
    int32_t message;              // index into the input, or -1 for a message the template inserted
    bool rendered;                // false when the template leaves the message out (LFM2 empty system)
    size_t begin, end;            // the whole block, header to the end of its line
    size_t role_begin, role_end;  // the role name as written (empty when not written)
    size_t content_begin, content_end;
    size_t marker_end;            // just after the message's end-of-turn marker (<|im_end|>, <|eot_id|>)
} rg_chat_span;

typedef struct rg_chat_options {
    bool add_generation_prompt;
    const char *date_string;  // llama3.1 "Today Date"; NULL: today when the template asks for it, else its default
    const struct rg_json *tools;  // OpenAI `tools` ([{"type": "function", "function": {"name", "description",
                                  // "parameters"}}], base/json.h); NULL: none
} rg_chat_options;

typedef struct rg_chat_rendered {
    char *text;                   // NUL-terminated, malloc'd
    size_t len;
    rg_chat_span *spans;          // an inserted message first (if any), then one per input message
    size_t n_spans;
    size_t prompt_begin;          // where the generation prompt starts; len when there is none
} rg_chat_rendered;

rg_status rg_chat_render(const rg_chat_template *t, const rg_chat_message *msgs, size_t n_msgs,
                         const rg_chat_options *opt, rg_chat_rendered *out, rg_error *err);
void rg_chat_rendered_free(rg_chat_rendered *r);

#endif
