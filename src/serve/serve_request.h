// serve_request.h - OpenAI request bodies read into what the server runs (POST /v1/chat/completions and
// POST /v1/completions), every field type- and range-checked, so that nothing a client sends reaches the engine
// unchecked. Pure: no model, no I/O (the fuzz target fuzz/fuzz_serve_request.c drives it on arbitrary bytes).
//
// Fields read (OpenAI's names; anything else is ignored as OpenAI's own API ignores nothing - it refuses unknown
// fields - but clients send vendor extensions, so unknown keys pass):
//   model (string, required), messages (chat, required) / prompt (completions: a string, or one array of token
//   ids), stream, stream_options.include_usage, max_tokens / max_completion_tokens, temperature [0, 2],
//   top_p (0, 1], top_k >= 0 and min_p [0, 1) (llama.cpp's extensions), repeat_penalty / repeat_last_n,
//   frequency_penalty and presence_penalty (only 0: the sampler has llama.cpp's multiplicative repeat penalty
//   instead; a non-zero value is refused rather than ignored), seed (an integer: the draws are a pure function of
//   it), stop (a string or up to 4), n (only 1), logprobs (chat: a boolean with top_logprobs 0..20;
//   completions: an integer 0..5), echo (completions: only false), tools, tool_choice, response_format (only
//   {"type":"text"}), lora ([{"id", "scale"}]), user (ignored).
// An error names the field (param) as OpenAI's errors do.
#ifndef RG_SERVE_REQUEST_H
#define RG_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/json.h"
#include "infer/sampler.h"
#include "text/tool_calls.h"

#define RG_SERVE_MAX_STOP 4
#define RG_SERVE_MAX_LORA 8

// RG_SERVE_TEMPLATE: POST /apply-template, a chat request whose model may be left out.
typedef enum rg_serve_kind { RG_SERVE_CHAT = 1, RG_SERVE_COMPLETION = 2, RG_SERVE_TEMPLATE = 3 } rg_serve_kind;

// An OpenAI-shaped error: HTTP status, type ("invalid_request_error", ...), the field at fault, a code.
typedef struct rg_serve_error {
    int http;
    const char *type;
    char param[64];
    const char *code;  // NULL or e.g. "context_length_exceeded", "model_not_found"
    char msg[512];
} rg_serve_error;

// Fills e and returns false, for one-line refusals: return rg_serve_fail(e, 400, "temperature", "...", ...).
bool rg_serve_fail(rg_serve_error *e, int http, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

typedef struct rg_serve_message {
    const char *role;  // system, user, assistant, tool ("developer" is read as system)
    const char *content;
    size_t content_len;
    const rg_json *tool_calls;  // an assistant message's tool_calls array, or NULL
    const char *tool_call_id;   // a tool message's, or NULL
    const char *name;           // a tool message's function name, or NULL
} rg_serve_message;

typedef struct rg_serve_lora {
    int64_t id;
    float scale;
} rg_serve_lora;

typedef struct rg_serve_req {
    rg_json_doc *doc;  // owns every string and value below
    rg_serve_kind kind;
    const char *model;
    rg_serve_message *messages;  // chat
    size_t n_messages;
    const char *prompt;          // completions: a string prompt, or NULL when prompt_tokens
    size_t prompt_len;
    int32_t *prompt_tokens;      // completions: the token-id prompt (ids are checked against the vocabulary later)
    size_t n_prompt_tokens;
    bool stream, include_usage;
    int64_t max_tokens;          // 0: until a stop token or the context's end
    rg_sampler_params sampling;
    bool seed_given;
    const char *stop[RG_SERVE_MAX_STOP];
    size_t stop_len[RG_SERVE_MAX_STOP];
    int n_stop;
    bool logprobs;
    int top_logprobs;
    const rg_json *tools;        // the tools array (chat), or NULL
    rg_tool_choice tool_choice;  // text/tool_calls.h (auto when absent)
    rg_serve_lora lora[RG_SERVE_MAX_LORA];
    int n_lora;
    bool lora_given;             // the request says which adapters (an empty list: none)
    char *owned;                 // joined content parts (chat messages given as arrays of text parts)
} rg_serve_req;

// Limits the server sets (a request over one is refused with the field named).
typedef struct rg_serve_limits {
    size_t max_body;        // bytes
    int64_t max_tokens;     // the most a request may ask for
    size_t max_messages;
} rg_serve_limits;

// Reads body[0..len) as a request of this kind. On failure e says why (HTTP 400 unless stated) and *out holds
// nothing to free.
bool rg_serve_req_parse(rg_serve_req *out, rg_serve_kind kind, const char *body, size_t len,
                        const rg_serve_limits *lim, rg_serve_error *e);
void rg_serve_req_free(rg_serve_req *r);

#endif
