// fuzz_serve_request.c - libFuzzer target for what `retrograd serve` reads from the network before any model
// sees it: OpenAI request bodies (src/serve/serve_request.c, and through it src/base/json.c), the error replies
// written for them (src/base/json_write.c), and the Host header check (src/serve/serve_http.c).
//
// Input: a control byte, then the body. Control bits: 0 the kind (chat / completions), 1-2 the limits (max_body
// 64 KiB / 256 bytes, max_tokens 0 / 16 / 4096, max_messages 0 / 2), 3 the Host check on the body's first line.
//
// Promises: a parsed request holds a model, at least one message (chat) or a non-empty prompt (completions),
// roles from the five known, at most 4 non-empty stop strings, max_tokens within the limit, sampling settings
// that rg_sampler_params_check accepts, top_logprobs in range; a refusal has an HTTP status of 400, 413 or 500,
// a one-line message and a param that is a field name or empty; every reply the writer makes for either reads
// back with the strict JSON reader.
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/json_write.h"
#include "serve/serve_http.h"
#include "serve/serve_request.h"
#include "serve/server.h"
#include "support.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return 0;
}

static void reads_back(const rg_jw *w, const char *what) {
    size_t n;
    const char *t = rg_jw_text(w, &n);
    FZ_CHECK(t != NULL, "%s: the writer failed", what);
    rg_json_doc *d;
    rg_error err;
    FZ_CHECK(rg_json_parse(&d, t, n, NULL, &err) == RG_OK, "%s does not read back: %s: %s", what, err.msg, t);
    rg_json_free(d);
}

static void check_request(const rg_serve_req *r, const rg_serve_limits *lim) {
    FZ_CHECK(r->model != NULL, "no model");
    if (r->kind == RG_SERVE_CHAT) {
        FZ_CHECK(r->n_messages >= 1 && (!lim->max_messages || r->n_messages <= lim->max_messages), "%zu messages",
                 r->n_messages);
        for (size_t i = 0; i < r->n_messages; i++) {
            const char *role = r->messages[i].role;
            FZ_CHECK(!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant") ||
                         !strcmp(role, "tool"), "role %s", role);
            FZ_CHECK(r->messages[i].content != NULL, "message %zu has no content pointer", i);
        }
    } else {
        FZ_CHECK((r->prompt && r->prompt_len > 0) || r->n_prompt_tokens > 0, "an empty prompt");
    }
    FZ_CHECK(r->n_stop >= 0 && r->n_stop <= RG_SERVE_MAX_STOP, "%d stops", r->n_stop);
    for (int i = 0; i < r->n_stop; i++) FZ_CHECK(r->stop_len[i] > 0, "an empty stop string");
    FZ_CHECK(r->max_tokens >= 0 && (!lim->max_tokens || r->max_tokens <= lim->max_tokens), "max_tokens %lld",
             (long long)r->max_tokens);
    rg_error err;
    FZ_CHECK(rg_sampler_params_check(&r->sampling, &err) == RG_OK, "sampling refused later: %s", err.msg);
    FZ_CHECK(r->top_logprobs >= 0 && r->top_logprobs <= 20, "top_logprobs %d", r->top_logprobs);
    FZ_CHECK(r->n_lora >= 0 && r->n_lora <= RG_SERVE_MAX_LORA, "%d adapters", r->n_lora);
    // The request's tools and messages written back (what the chat template and logs see) read back.
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_key(&w, "tools");
    if (r->tools) rg_jw_value(&w, r->tools);
    else rg_jw_null(&w);
    rg_jw_key(&w, "messages");
    rg_jw_arr(&w);
    for (size_t i = 0; i < r->n_messages; i++) {
        rg_jw_strn(&w, r->messages[i].content, r->messages[i].content_len);
        if (r->messages[i].tool_calls) rg_jw_value(&w, r->messages[i].tool_calls);
    }
    rg_jw_arr_end(&w);
    rg_jw_obj_end(&w);
    reads_back(&w, "the request written back");
    rg_jw_free(&w);
}

static void check_refusal(const rg_serve_error *e) {
    FZ_CHECK(e->http == 400 || e->http == 413 || e->http == 500, "http %d", e->http);
    FZ_CHECK(e->msg[0] && !strchr(e->msg, '\n'), "message '%s'", e->msg);
    FZ_CHECK(strlen(e->param) < sizeof e->param, "param");
    rg_serve_response resp;
    rg_server_error_response(e, &resp);
    FZ_CHECK(resp.status == e->http && resp.body, "the error reply: status %d", resp.status);
    rg_json_doc *d;
    rg_error err;
    FZ_CHECK(rg_json_parse(&d, resp.body, resp.len, NULL, &err) == RG_OK, "the error reply does not read back: %s",
             err.msg);
    rg_json_free(d);
    rg_serve_response_free(&resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t ctl = data[0];
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    static const int64_t max_tokens[4] = {0, 16, 4096, 0};
    const rg_serve_limits lim = {.max_body = (ctl & 2) ? 256 : 65536, .max_tokens = max_tokens[(ctl >> 1) & 3],
                                 .max_messages = (ctl & 4) ? 2 : 0};
    const rg_serve_kind kind = (ctl & 1) ? RG_SERVE_COMPLETION : RG_SERVE_CHAT;
    rg_serve_req r;
    rg_serve_error e;
    if (rg_serve_req_parse(&r, kind, body, len, &lim, &e)) {
        check_request(&r, &lim);
        rg_serve_req_free(&r);
    } else {
        check_refusal(&e);
    }
    if (ctl & 8) {  // the body's first line as a Host header, against a loopback and a named address
        size_t n = 0;
        while (n < len && n < 300 && body[n] != '\n' && body[n] != 0) n++;
        char host[301];
        memcpy(host, body, n);
        host[n] = 0;
        const bool lo = rg_serve_host_allowed("127.0.0.1", host), named = rg_serve_host_allowed("10.0.0.7", host);
        FZ_CHECK(!(lo && named), "'%s' passes as both loopback and 10.0.0.7", host);
        FZ_CHECK(rg_serve_host_allowed("0.0.0.0", host), "any address takes any Host");
    }
    return 0;
}
