// serve_tools.c - replies to chat requests with tools: the generated text is held back to the end, parsed with
// the model's template family (text/tool_calls.h) and checked against the request's tools and tool_choice. Calls
// that parse become the message's tool_calls (finish_reason "tool_calls", ids "call_<request id>_<k>"); text
// without calls is an ordinary reply; text whose call markers do not parse, or whose calls break the request's
// rules, comes back as content with finish_reason "tool_calls_unparsable" and the reason in the message's
// "tool_calls_error" - never a server error.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/server_internal.h"
#include "text/tool_calls.h"

void gen_tool_calls(gen *g) {
    rg_tool_calls *c = calloc(1, sizeof *c);
    if (!c) return;  // out of memory: the text goes back as it is
    rg_error err = {0};
    const rg_chat_family f = g->srv->tmpl.family;
    if (rg_tool_calls_parse(f, g->text ? g->text : "", g->text_len, c, &err) ||
        rg_tool_calls_check(c, g->req.tools, &g->req.tool_choice, &err)) {
        snprintf(g->calls_error, sizeof g->calls_error, "%s", err.msg);
        rg_tool_calls_free(c);
        free(c);
        g->finish_reason = "tool_calls_unparsable";
        return;
    }
    g->calls = c;
    if (c->status == RG_TOOL_CALLS_UNPARSABLE) {
        snprintf(g->calls_error, sizeof g->calls_error, "%s", err.msg);
        g->finish_reason = "tool_calls_unparsable";
    } else if (c->status == RG_TOOL_CALLS_OK && c->n_calls > 0) {
        g->finish_reason = "tool_calls";
    }
}

// The message's content (text outside the calls, or the whole text) and its length.
static const char *content_of(gen *g, size_t *n) {
    if (g->calls && g->calls->status == RG_TOOL_CALLS_OK) {
        *n = g->calls->content_len;
        return g->calls->content;
    }
    *n = g->text_len;
    return g->text ? g->text : "";
}

static bool have_calls(const gen *g) { return g->calls && g->calls->status == RG_TOOL_CALLS_OK && g->calls->n_calls; }

// tool_calls items; with_index: a stream's deltas carry "index".
static void calls_json(gen *g, rg_jw *w, bool with_index) {
    rg_jw_key(w, "tool_calls");
    rg_jw_arr(w);
    for (size_t k = 0; k < g->calls->n_calls; k++) {
        const rg_tool_call *c = &g->calls->calls[k];
        char id[96];
        snprintf(id, sizeof id, "call_%s_%zu", g->id, k);
        rg_jw_obj(w);
        if (with_index) rg_jw_ki64(w, "index", (int64_t)k);
        rg_jw_kstr(w, "id", id);
        rg_jw_kstr(w, "type", "function");
        rg_jw_key(w, "function");
        rg_jw_obj(w);
        rg_jw_key(w, "name"), rg_jw_strn(w, c->name, c->name_len);
        rg_jw_key(w, "arguments"), rg_jw_strn(w, c->arguments, c->arguments_len);
        rg_jw_obj_end(w);
        rg_jw_obj_end(w);
    }
    rg_jw_arr_end(w);
}

static void message_body(gen *g, rg_jw *w, bool stream) {
    size_t n;
    const char *content = content_of(g, &n);
    if (!stream) rg_jw_kstr(w, "role", "assistant");
    rg_jw_key(w, "content");
    if (have_calls(g) && n == 0) rg_jw_null(w);
    else rg_jw_strn(w, content, n);
    if (have_calls(g)) calls_json(g, w, stream);
    if (g->calls_error[0]) rg_jw_kstr(w, "tool_calls_error", g->calls_error);
}

void gen_tool_reply(gen *g, rg_jw *w) {
    gen_choice_open(g, w, false);
    rg_jw_key(w, "message");
    rg_jw_obj(w);
    message_body(g, w, false);
    rg_jw_obj_end(w);
    gen_logprobs_json(g, w, 0, g->n_lps);
    gen_choice_close(g, w, g->finish_reason, false);
}

// A stream of a held-back reply: one chunk with the role, the content and the calls, then the finish chunk.
void gen_tool_chunks(gen *g, rg_jw *w) {
    gen_choice_open(g, w, true);
    rg_jw_key(w, "delta");
    rg_jw_obj(w);
    rg_jw_kstr(w, "role", "assistant");
    message_body(g, w, true);
    rg_jw_obj_end(w);
    gen_logprobs_json(g, w, 0, g->n_lps);
    gen_choice_close(g, w, NULL, true);
    g->lp_sent = g->n_lps;
    gen_choice_open(g, w, true);
    rg_jw_key(w, "delta");
    rg_jw_obj(w);
    rg_jw_obj_end(w);
    rg_jw_key(w, "logprobs"), rg_jw_null(w);
    gen_choice_close(g, w, g->finish_reason, true);
}
