// serve_agent.c - `retrograd serve --agent TOOLS.yaml`: the agent loop (agent/agent.h) behind the chat route. A
// chat request that brings no `tools` of its own (and does not say "agent": false) is one user turn of the agent:
// the server offers the tools file's tools, runs the calls the model makes (MCP servers, declared commands),
// feeds the results back and answers with the model's final reply, in OpenAI's chat.completion shape plus a
// `retrograd_agent` member listing the calls and the messages the turn added (to append to the conversation).
//
// Each generation of the turn is an ordinary chat request on the server's own engine (the request's sampling
// fields, model and adapters, with the turn's messages and the tools), so it takes a slot like any other and
// reuses the slot's prefix: a call cut back after a failure leaves the next prompt equal to an earlier one, which
// the engine rewinds to exactly. Calls run one at a time across the server (an MCP server is one conversation
// over its pipes). A request asking to stream gets the answer as one chunk of server-sent events.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/agent.h"
#include "agent/agent_tools.h"
#include "serve/server_internal.h"

rg_status server_agent_start(rg_server *s, rg_error *err) {
    if (!s->o.agent_tools_path) return RG_OK;
    rg_status st = rg_agent_tools_load(&s->agent_tools, s->o.agent_tools_path, err);
    if (!st) st = rg_agent_tools_start(s->agent_tools, NULL, err);
    if (st) return st;
    if (!s->have_tmpl)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "serve --agent: this model has no chat template this server can "
                                                "render (%s)", s->tmpl_error);
    pthread_mutex_init(&s->agent_mu, NULL);
    s->agent_mu_init = true;
    return RG_OK;
}

void server_agent_free(rg_server *s) {
    rg_agent_tools_free(s->agent_tools);
    if (s->agent_mu_init) pthread_mutex_destroy(&s->agent_mu);
}

bool server_agent_wants(rg_server *s, const rg_json *root) {
    const rg_json *a = rg_json_get(root, "agent");
    return s->agent_tools && !rg_json_get(root, "tools") && !(a && rg_json_is(a, RG_JSON_BOOL) && !rg_json_bool(a));
}

// One turn's state for the generator and the executor.
typedef struct agent_ctx {
    rg_server *s;
    const rg_json *req;          // the client's request object
    bool (*gone)(void *);
    void *gone_user;
    int64_t n_prompt, n_cached, n_gen;  // usage over the turn's generations
    int http;                    // a generation's refusal (its status), 0 when none
    char why[1024];
} agent_ctx;

// The request body of one generation: the client's fields but the conversation, tools and streaming.
static char *generation_body(const agent_ctx *c, const rg_chat_message *msgs, size_t n, const rg_json *tools,
                             size_t *len) {
    static const char *const skip[] = {"messages", "tools", "tool_choice", "stream", "stream_options", "agent", "n"};
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    for (size_t i = 0; i < rg_json_len(c->req); i++) {
        size_t kl;
        const char *k = rg_json_key_at(c->req, i, &kl);
        bool drop = false;
        for (size_t j = 0; j < sizeof skip / sizeof skip[0] && !drop; j++)
            drop = strlen(skip[j]) == kl && memcmp(skip[j], k, kl) == 0;
        if (drop) continue;
        char key[64];
        if (kl >= sizeof key) continue;  // no field of ours is that long
        memcpy(key, k, kl);
        key[kl] = 0;
        rg_jw_key(&w, key);
        rg_jw_value(&w, rg_json_value_at(c->req, i));
    }
    rg_jw_key(&w, "messages");
    rg_jw_arr(&w);
    for (size_t i = 0; i < n; i++) {
        rg_jw_obj(&w);
        rg_jw_key(&w, "role");
        rg_jw_strn(&w, msgs[i].role, msgs[i].role_len);
        rg_jw_key(&w, "content");
        rg_jw_strn(&w, msgs[i].content ? msgs[i].content : "", msgs[i].content ? msgs[i].content_len : 0);
        if (msgs[i].tool_calls) {
            rg_jw_key(&w, "tool_calls");
            rg_jw_value(&w, msgs[i].tool_calls);
        }
        if (msgs[i].name) {
            rg_jw_key(&w, "name");
            rg_jw_strn(&w, msgs[i].name, msgs[i].name_len);
        }
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    if (tools) {
        rg_jw_key(&w, "tools");
        rg_jw_value(&w, tools);
    }
    rg_jw_obj_end(&w);
    return rg_jw_take(&w, len);
}

// The generator (rg_agent_generate_fn): one chat request on the engine, its raw text back.
static rg_status agent_generate(void *user, const rg_chat_message *msgs, size_t n, const rg_json *tools,
                                rg_agent_gen *out, rg_error *err) {
    agent_ctx *c = user;
    rg_server *s = c->s;
    size_t len;
    char *body = generation_body(c, msgs, n, tools, &len);
    gen *g = body ? calloc(1, sizeof *g) : NULL;
    if (!g) {
        free(body);
        return rg_fail(err, RG_ERR_NOMEM, "serve --agent: out of memory");
    }
    g->srv = s;
    g->refs = 1;
    pthread_cond_init(&g->cv, NULL);
    rg_serve_error e;
    const bool ok = rg_serve_req_parse(&g->req, RG_SERVE_CHAT, body, len, &s->o.limits, &e) &&
                    !gen_prepare(s, g, &e) && server_submit(s, g, &e);
    free(body);
    if (!ok) {
        gen_free(g);
        c->http = e.http;
        snprintf(c->why, sizeof c->why, "%s", e.msg);
        return rg_fail(err, RG_ERR_ARG, "%s", e.msg);
    }
    g->gone = c->gone, g->gone_user = c->gone_user;
    rg_jw w;
    rg_jw_init(&w);
    while (gen_next(g, &w)) {
    }
    rg_jw_free(&w);
    rg_status st = RG_OK;
    if (!g->finish_reason) {  // the engine failed it, or the client left
        c->http = g->reply_http ? g->reply_http : 500;
        snprintf(c->why, sizeof c->why, "%s", g->error[0] ? g->error : "the generation did not finish");
        st = rg_fail(err, RG_ERR_IO, "%s", c->why);
    } else {
        out->text = malloc(g->text_len + 1);
        if (!out->text) st = rg_fail(err, RG_ERR_NOMEM, "serve --agent: out of memory");
        else {
            memcpy(out->text, g->text ? g->text : "", g->text_len);
            out->text[g->text_len] = 0;
            out->len = g->text_len;
            out->n_prompt = g->n_prompt;
            out->n_reused = g->n_cached;
            c->n_prompt += g->n_prompt, c->n_cached += g->n_cached, c->n_gen += g->n_gen;
        }
    }
    gen_release(g);
    return st;
}

// The executor: the tools file's tools, one call at a time across the server.
static rg_status agent_execute(void *user, const char *name, const char *arguments, char **result, size_t *len,
                               rg_error *err) {
    agent_ctx *c = user;
    pthread_mutex_lock(&c->s->agent_mu);
    const rg_status st = rg_agent_tools_call(c->s->agent_tools, name, arguments, result, len, err);
    pthread_mutex_unlock(&c->s->agent_mu);
    return st;
}

// The client's messages but the last into the agent's conversation (the last, a user message, is the turn's).
static bool seed_conversation(rg_agent *a, const rg_json *msgs, rg_serve_error *e) {
    const size_t n = rg_json_len(msgs);
    for (size_t i = 0; i + 1 < n; i++) {
        const rg_json *m = rg_json_at(msgs, i);
        size_t rl = 0, cl = 0;
        const char *role = rg_json_str(rg_json_get(m, "role"), &rl);
        const char *content = rg_json_str(rg_json_get(m, "content"), &cl);
        size_t nl = 0;
        const char *name = rg_json_str(rg_json_get(m, "name"), &nl);
        const char *call_id = rg_json_str(rg_json_get(m, "tool_call_id"), NULL);
        const rg_json *calls = rg_json_get(m, "tool_calls");
        if (!role)
            return rg_serve_fail(e, 400, "messages", "'messages[%zu].role' must be a string", i);
        if (!content && !calls)
            return rg_serve_fail(e, 400, "messages", "'messages[%zu].content' must be a string (the agent takes "
                                                     "text messages)", i);
        rg_error err;
        if (rg_agent_push(a, role, content ? content : "", cl, calls, call_id, name, &err))
            return rg_serve_fail(e, 400, "messages", "messages[%zu]: %s", i, err.msg);
    }
    return true;
}

static void write_reply(agent_ctx *c, const rg_agent *a, size_t n_before, const rg_agent_turn *t, bool stream,
                        rg_serve_response *out) {
    rg_server *s = c->s;
    static atomic_uint counter;
    char id[48];
    snprintf(id, sizeof id, "chatcmpl-agent-%lx-%u", (unsigned long)time(NULL), atomic_fetch_add(&counter, 1));
    const char *model = rg_json_str(rg_json_get(c->req, "model"), NULL);
    // A turn that ended without an answer says why in the content too, so a chat window shows it.
    const char *finish = t->end == RG_AGENT_ANSWERED ? "stop" : "agent_stopped";
    char stopped[1200];
    const char *answer = t->answer ? t->answer : "";
    size_t answer_len = t->answer ? t->answer_len : 0;
    if (t->end != RG_AGENT_ANSWERED) {
        answer_len = (size_t)snprintf(stopped, sizeof stopped, "The agent stopped (%s): %s", rg_agent_end_name(t->end),
                                      t->failure ? t->failure : "no answer");
        if (answer_len >= sizeof stopped) answer_len = sizeof stopped - 1;
        answer = stopped;
    }
    rg_jw w;
    rg_jw_init(&w);
    if (stream) rg_jw_text_append(&w, "data: ", 6);
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "id", id);
    rg_jw_kstr(&w, "object", stream ? "chat.completion.chunk" : "chat.completion");
    rg_jw_ki64(&w, "created", (int64_t)time(NULL));
    rg_jw_kstr(&w, "model", model ? model : s->alias);
    rg_jw_key(&w, "choices");
    rg_jw_arr(&w);
    rg_jw_obj(&w);
    rg_jw_ki64(&w, "index", 0);
    rg_jw_key(&w, stream ? "delta" : "message");
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "role", "assistant");
    rg_jw_key(&w, "content");
    rg_jw_strn(&w, answer, answer_len);
    rg_jw_obj_end(&w);
    rg_jw_kstr(&w, "finish_reason", finish);
    rg_jw_obj_end(&w);
    rg_jw_arr_end(&w);
    rg_jw_key(&w, "usage");
    rg_jw_obj(&w);
    rg_jw_ki64(&w, "prompt_tokens", c->n_prompt);
    rg_jw_ki64(&w, "completion_tokens", c->n_gen);
    rg_jw_ki64(&w, "total_tokens", c->n_prompt + c->n_gen);
    rg_jw_key(&w, "prompt_tokens_details");
    rg_jw_obj(&w);
    rg_jw_ki64(&w, "cached_tokens", c->n_cached);
    rg_jw_obj_end(&w);
    rg_jw_obj_end(&w);
    // What the turn did: its end, every call, and the messages it added (calls and results), to resend.
    rg_jw_key(&w, "retrograd_agent");
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "end", rg_agent_end_name(t->end));
    if (t->failure) rg_jw_kstr(&w, "failure", t->failure);
    rg_jw_key(&w, "calls");
    rg_jw_arr(&w);
    for (size_t i = 0; i < t->n_calls; i++) {
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "name", t->calls[i].name);
        rg_jw_kstr(&w, "arguments", t->calls[i].arguments);
        if (t->calls[i].result) rg_jw_kstr(&w, "result", t->calls[i].result);
        if (t->calls[i].error) rg_jw_kstr(&w, "error", t->calls[i].error);
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    size_t n;
    const rg_agent_msg *m = rg_agent_messages(a, &n);
    rg_jw_key(&w, "messages");
    rg_jw_arr(&w);
    for (size_t i = n_before; i < n; i++) {
        if (strcmp(m[i].role, "user") == 0 && i == n_before) continue;  // the client's own message
        if (strcmp(m[i].role, "assistant") == 0 && !m[i].tool_calls) continue;  // the answer: in choices
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "role", m[i].role);
        rg_jw_key(&w, "content");
        rg_jw_strn(&w, m[i].content, m[i].content_len);
        if (m[i].calls) {
            rg_jw_key(&w, "tool_calls");
            rg_jw_value(&w, rg_json_root(m[i].calls));
        }
        if (m[i].tool_call_id) rg_jw_kstr(&w, "tool_call_id", m[i].tool_call_id);
        if (m[i].name) rg_jw_kstr(&w, "name", m[i].name);
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    rg_jw_obj_end(&w);
    rg_jw_obj_end(&w);
    if (stream) rg_jw_text_append(&w, "\n\ndata: [DONE]\n\n", 16);
    server_json_response(200, &w, out);
    if (stream) out->content_type = "text/event-stream";
}

void server_agent_route(rg_server *s, const rg_json *req, bool (*gone)(void *), void *gone_user,
                        rg_serve_response *out) {
    rg_serve_error e;
    const rg_json *msgs = rg_json_get(req, "messages");
    const size_t n = rg_json_len(msgs);
    const rg_json *last = n ? rg_json_at(msgs, n - 1) : NULL;
    size_t ul = 0;
    const char *user = rg_json_str(rg_json_get(last, "content"), &ul);
    const char *role = rg_json_str(rg_json_get(last, "role"), NULL);
    if (!rg_json_is(msgs, RG_JSON_ARRAY) || !user || !role || strcmp(role, "user") != 0) {
        rg_serve_fail(&e, 400, "messages", "the agent runs one user turn: 'messages' must end with a user message "
                                           "whose content is a string");
        return server_fail_response(s, out, &e);
    }
    size_t tl;
    agent_ctx c = {.s = s, .req = req, .gone = gone, .gone_user = gone_user};
    const rg_agent_opts ao = {.family = s->tmpl.family, .tools_json = rg_agent_tools_json(s->agent_tools, &tl),
                              .generate = agent_generate, .generate_user = &c, .execute = agent_execute,
                              .execute_user = &c};
    rg_agent *a = NULL;
    rg_error err;
    if (rg_agent_create(&a, &ao, &err)) {
        rg_serve_fail(&e, 500, "", "serve --agent: %s", err.msg);
        return server_fail_response(s, out, &e);
    }
    rg_agent_turn t = {0};
    if (!seed_conversation(a, msgs, &e)) {
        rg_agent_free(a);
        return server_fail_response(s, out, &e);
    }
    size_t n_before;
    rg_agent_messages(a, &n_before);
    if (rg_agent_turn_run(a, user, ul, &t, &err)) {
        rg_serve_fail(&e, c.http ? c.http : 500, "", "%s", c.why[0] ? c.why : err.msg);
        rg_agent_free(a);
        return server_fail_response(s, out, &e);
    }
    const rg_json *st = rg_json_get(req, "stream");
    write_reply(&c, a, n_before, &t, st && rg_json_bool(st), out);
    rg_agent_turn_free(&t);
    rg_agent_free(a);
}
