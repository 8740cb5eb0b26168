// agent.h - the agent loop as a library: a conversation, a model that may answer with tool calls, and tools
// that execute them, independent of how the text is generated (the CLI's engine: agent_engine.h; a server's own
// engine; a test's script) and of what executes a call (the tools file: agent_tools.h; a test's fake).
//
// One user turn (rg_agent_turn_run):
//   1. the user's message is appended and the generator is asked for the assistant's reply to the whole
//      conversation, with the tools;
//   2. the reply is parsed for tool calls with the template family's rules (text/tool_calls.h);
//   3. no call: the reply is the answer, appended as an assistant message; the turn ends (RG_AGENT_ANSWERED);
//   4. calls: each is offered to the confirm callback (if any), all of them before any runs, then executed in
//      order; the assistant message with the calls (OpenAI's shape: tool_calls [{id, type, function: {name,
//      arguments as JSON text}}], ids "call_K", K counting the conversation's calls from 0) and one 'tool'
//      message per call (tool_call_id, the tool's name, the result as content) are appended; back to 1 without a
//      new user message, at most max_calls calls in the turn.
//
// A call that fails (the executor's error), is refused (the confirm callback), would pass max_calls, or a reply
// whose call markers do not parse (UNPARSABLE), ends the turn:
//   - by default (failures_to_model false) the conversation is cut back to just before the assistant message
//     that made the call: what the model generated and every result of that message are dropped, so the next
//     generation's prompt is exactly the earlier prompt plus whatever comes next (the engine's prefix cache then
//     rewinds to it: the reused tokens are those of the conversation before the call). The failure is reported to
//     the user in the turn (end, failure) and the turn has no answer. Calls of earlier messages in the turn and
//     their results stay.
//     Why the default: a demanding user wants the context to hold only what worked. An error fed back to a small
//     model tends to make it retry the same call or talk about the error, it spends context, and it would go into
//     --keep's fine-tuning data as an example to learn; the user who sees the failure decides what comes next
//     (rephrase, fix the tools file, or turn failures_to_model on).
//   - with failures_to_model the failed or refused call stays and its 'tool' message says "error: ..." (the
//     refusal: "error: the user refused this call"), as OpenAI-style agents do, and the loop goes on so that the
//     model can recover by itself (still within max_calls). An unparsable reply and max_calls end the turn as in
//     the default: there is no call to answer.
// A generator error ends the turn with that error and cuts the conversation back to before the user's message.
//
// The conversation is owned by the agent (rg_agent_msg: copies of every string). rg_agent_keep_append writes it
// as one JSON Lines line {"tools": [...], "messages": [...]} in OpenAI's fine-tuning format.
#ifndef RG_AGENT_AGENT_H
#define RG_AGENT_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/json.h"
#include "retrograd.h"
#include "text/chat.h"

// What a generation gives back: the assistant's reply text (malloc'd, the agent takes it; it is parsed for
// calls as it is) and, when the generator knows, how many prompt tokens it had and how many of them its
// cache already held (-1 when it does not know).
typedef struct rg_agent_gen {
    char *text;
    size_t len;
    int64_t n_prompt;
    int64_t n_reused;
} rg_agent_gen;

// Generates the assistant's reply to msgs[0..n_msgs) (the last is a 'user' or 'tool' message), rendering the
// tools (an OpenAI tools array; NULL: none) and the generation prompt as the model's template does. out is
// zeroed before the call (n_prompt and n_reused preset to -1).
typedef rg_status (*rg_agent_generate_fn)(void *user, const rg_chat_message *msgs, size_t n_msgs,
                                          const rg_json *tools, rg_agent_gen *out, rg_error *err);
// Executes a call: RG_OK with *result (malloc'd) or an error whose message is the failure.
typedef rg_status (*rg_agent_execute_fn)(void *user, const char *name, const char *arguments, char **result,
                                         size_t *len, rg_error *err);
// Whether call index (of n in one assistant message) may run: false refuses it.
typedef bool (*rg_agent_confirm_fn)(void *user, const char *name, const char *arguments, size_t index, size_t n);

typedef enum rg_agent_event_kind {
    RG_AGENT_EV_CALL,     // a call is about to run (name, arguments)
    RG_AGENT_EV_RESULT,   // it gave text
    RG_AGENT_EV_FAILED,   // it failed, was refused or was not allowed (text: why)
} rg_agent_event_kind;

typedef struct rg_agent_event {
    rg_agent_event_kind kind;
    const char *name, *arguments, *text;
} rg_agent_event;

typedef struct rg_agent_opts {
    rg_chat_family family;          // the template family the replies are parsed with
    const char *tools_json;         // the OpenAI tools array offered every generation (NULL: none)
    const char *system;             // a system message put first (NULL: none)
    int max_calls;                  // calls one turn may make; <= 0: 8
    bool failures_to_model;         // see above (default false: cut back and tell the user)
    rg_agent_generate_fn generate;
    void *generate_user;
    rg_agent_execute_fn execute;
    void *execute_user;
    rg_agent_confirm_fn confirm;    // NULL: every call runs
    void *confirm_user;
    void (*on_event)(void *user, const rg_agent_event *ev);  // NULL: none
    void *event_user;
} rg_agent_opts;

// One message of the conversation. Every string is owned, NUL-terminated.
typedef struct rg_agent_msg {
    char *role;           // "system", "user", "assistant", "tool"
    char *content;        // may be ""
    size_t content_len;
    char *tool_calls;     // assistant: OpenAI tool_calls JSON text, or NULL
    rg_json_doc *calls;   // the same, parsed
    char *tool_call_id;   // tool: the call it answers
    char *name;           // tool: the tool's name
} rg_agent_msg;

typedef enum rg_agent_end {
    RG_AGENT_ANSWERED = 0,  // the model answered
    RG_AGENT_FAILED,        // a call failed (or a reply's calls did not parse)
    RG_AGENT_REFUSED,       // the confirm callback refused a call
    RG_AGENT_MAX_CALLS,     // the model asked for more calls than max_calls
} rg_agent_end;

const char *rg_agent_end_name(rg_agent_end e);  // "answered", "failed", "refused", "max_calls"

typedef struct rg_agent_call {
    char *name, *arguments;  // arguments: JSON text
    char *result;            // the tool's text, or NULL when it failed or did not run
    char *error;             // why it failed or did not run, or NULL
} rg_agent_call;

// What one turn did (free with rg_agent_turn_free).
typedef struct rg_agent_turn {
    rg_agent_end end;
    char *answer;             // ANSWERED: the reply; "" otherwise
    size_t answer_len;
    char *failure;            // otherwise: what failed, naming the tool; NULL when answered
    rg_agent_call *calls;     // every call the model made this turn, in order (kept or cut back)
    size_t n_calls;
    int64_t *n_prompt, *n_reused;  // [n_gen]: each generation's counts (rg_agent_gen)
    size_t n_gen;
} rg_agent_turn;

void rg_agent_turn_free(rg_agent_turn *t);

typedef struct rg_agent rg_agent;

// The tools JSON is parsed here (RG_ERR_FORMAT when it is not an array).
rg_status rg_agent_create(rg_agent **out, const rg_agent_opts *opts, rg_error *err);
void rg_agent_free(rg_agent *a);

// Runs one user turn (see above). RG_OK whatever the turn's end; an error only when the generator failed or
// memory ran out (the conversation is then as it was before the turn).
rg_status rg_agent_turn_run(rg_agent *a, const char *user_text, size_t len, rg_agent_turn *turn, rg_error *err);

// Appends a message of an earlier conversation (a server seeding the agent with a request's history): role is
// system, user, assistant or tool; tool_calls (assistant only; NULL or JSON null: none) an OpenAI tool_calls array,
// copied; tool_call_id and name (tool; may be NULL) copied. The calls count toward the ids of new calls ("call_K"
// goes on from the number of calls so far). RG_ERR_ARG names what is wrong.
rg_status rg_agent_push(rg_agent *a, const char *role, const char *content, size_t content_len,
                        const rg_json *tool_calls, const char *tool_call_id, const char *name, rg_error *err);

// The conversation so far (valid until the next call on a).
const rg_agent_msg *rg_agent_messages(const rg_agent *a, size_t *n);

// The conversation as one line {"tools": [...], "messages": [...]} (OpenAI's fine-tuning format: an
// assistant's tool_calls with arguments as JSON text and no content when it has none, 'tool' messages with
// tool_call_id and content), "\n"-terminated; malloc'd, NULL when out of memory.
char *rg_agent_keep_line(const rg_agent *a, size_t *len);
// Appends that line to path (created when missing) with one write.
rg_status rg_agent_keep_append(const rg_agent *a, const char *path, rg_error *err);

#endif
