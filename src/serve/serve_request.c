// serve_request.c - see serve_request.h.
#include "serve/serve_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool rg_serve_fail(rg_serve_error *e, int http, const char *param, const char *fmt, ...) {
    e->http = http;
    e->type = http == 401 ? "authentication_error"
              : http == 404 ? "not_found_error"
              : http == 429 ? "rate_limit_error"
              : http >= 500 ? "server_error"
                            : "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->code = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    for (char *c = e->msg; *c; c++)  // client strings echoed in the message: one line, no control bytes (logs)
        if ((unsigned char)*c < 0x20 || *c == 0x7F) *c = ' ';
    return false;
}

// A member that must be of type t when present: false (e filled) when it is there with another type.
static bool typed(const rg_json *o, const char *key, rg_json_type t, const rg_json **out, rg_serve_error *e) {
    const rg_json *v = rg_json_get(o, key);
    *out = NULL;
    if (!v || (rg_json_is(v, RG_JSON_NULL) && t != RG_JSON_NULL)) return true;  // null reads as absent
    if (!rg_json_is(v, t))
        return rg_serve_fail(e, 400, key, "'%s' must be a %s, not a %s", key, rg_json_type_name(t),
                             rg_json_type_name(rg_json_type_of(v)));
    *out = v;
    return true;
}

// A number field in [lo, hi] (open ends where lo_open / hi_open).
static bool num_in(const rg_json *o, const char *key, double lo, bool lo_open, double hi, bool hi_open, double *out,
                   rg_serve_error *e) {
    const rg_json *v;
    if (!typed(o, key, RG_JSON_NUMBER, &v, e)) return false;
    if (!v) return true;
    const double x = rg_json_num(v);
    if (!isfinite(x) || (lo_open ? x <= lo : x < lo) || (hi_open ? x >= hi : x > hi))
        return rg_serve_fail(e, 400, key, "'%s' is %s; it must be in %c%g, %g%c", key, rg_json_num_text(v),
                             lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
    *out = x;
    return true;
}

static bool int_in(const rg_json *o, const char *key, int64_t lo, int64_t hi, int64_t *out, rg_serve_error *e) {
    const rg_json *v;
    if (!typed(o, key, RG_JSON_NUMBER, &v, e)) return false;
    if (!v) return true;
    int64_t x;
    if (!rg_json_int64(v, &x))
        return rg_serve_fail(e, 400, key, "'%s' is %s; it must be an integer", key, rg_json_num_text(v));
    if (x < lo || x > hi)
        return rg_serve_fail(e, 400, key, "'%s' is %lld; it must be in [%lld, %lld]", key, (long long)x,
                             (long long)lo, (long long)hi);
    *out = x;
    return true;
}

static bool flag(const rg_json *o, const char *key, bool *out, rg_serve_error *e) {
    const rg_json *v;
    if (!typed(o, key, RG_JSON_BOOL, &v, e)) return false;
    if (v) *out = rg_json_bool(v);
    return true;
}

// Appends n bytes to r->owned (which grows); the offset where they start.
static bool own_append(rg_serve_req *r, size_t *used, size_t *cap, const char *s, size_t n) {
    if (*used + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *used + n + 1) c *= 2;
        char *b = realloc(r->owned, c);
        if (!b) return false;
        r->owned = b, *cap = c;
    }
    memcpy(r->owned + *used, s, n);
    *used += n;
    r->owned[*used] = 0;
    return true;
}

// A message's content: a string, null (an assistant message with tool calls), or an array of text parts joined.
// Joined parts are stored in r->owned and given as offsets in *content until every message is read (r->owned may
// move), so the offset is carried in content_len's partner: *joined_at.
static bool message_content(rg_serve_req *r, const rg_json *c, size_t i, rg_serve_message *m, size_t *joined_at,
                            size_t *used, size_t *cap, rg_serve_error *e) {
    char p[48];
    snprintf(p, sizeof p, "messages[%zu].content", i);
    *joined_at = SIZE_MAX;
    if (!c || rg_json_is(c, RG_JSON_NULL)) {
        m->content = "", m->content_len = 0;
        return true;
    }
    if (rg_json_is(c, RG_JSON_STRING)) {
        m->content = rg_json_str(c, &m->content_len);
        return true;
    }
    if (!rg_json_is(c, RG_JSON_ARRAY))
        return rg_serve_fail(e, 400, p, "'%s' must be a string or an array of text parts, not a %s", p,
                             rg_json_type_name(rg_json_type_of(c)));
    const size_t start = *used;
    for (size_t k = 0; k < rg_json_len(c); k++) {
        const rg_json *part = rg_json_at(c, k);
        const char *type = rg_json_str(rg_json_get(part, "type"), NULL);
        if (!type || strcmp(type, "text") != 0)
            return rg_serve_fail(e, 400, p, "'%s[%zu]' is a part of type '%s'; only text parts are supported", p,
                                 k, type ? type : "(none)");
        size_t n;
        const char *t = rg_json_str(rg_json_get(part, "text"), &n);
        if (!t) return rg_serve_fail(e, 400, p, "'%s[%zu].text' must be a string", p, k);
        if (!own_append(r, used, cap, t, n)) return rg_serve_fail(e, 500, p, "out of memory");
    }
    *joined_at = start;
    m->content_len = *used - start;
    return true;
}

static bool read_messages(rg_serve_req *r, const rg_json *root, const rg_serve_limits *lim, rg_serve_error *e) {
    const rg_json *ms;
    if (!typed(root, "messages", RG_JSON_ARRAY, &ms, e)) return false;
    if (!ms || rg_json_len(ms) == 0) return rg_serve_fail(e, 400, "messages", "'messages' must be a non-empty array");
    const size_t n = rg_json_len(ms);
    if (lim && lim->max_messages && n > lim->max_messages)
        return rg_serve_fail(e, 400, "messages", "%zu messages; this server takes at most %zu", n, lim->max_messages);
    r->messages = calloc(n, sizeof *r->messages);
    size_t *joined = malloc(n * sizeof *joined);
    if (!r->messages || !joined) {
        free(joined);
        return rg_serve_fail(e, 500, "messages", "out of memory");
    }
    size_t used = 0, cap = 0;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        const rg_json *m = rg_json_at(ms, i);
        rg_serve_message *out = &r->messages[i];
        char p[48];
        snprintf(p, sizeof p, "messages[%zu]", i);
        if (!rg_json_is(m, RG_JSON_OBJECT)) {
            ok = rg_serve_fail(e, 400, p, "'%s' must be an object", p);
            break;
        }
        const char *role = rg_json_str(rg_json_get(m, "role"), NULL);
        if (!role) {
            ok = rg_serve_fail(e, 400, p, "'%s.role' must be a string", p);
            break;
        }
        if (strcmp(role, "developer") == 0) role = "system";
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool")) {
            ok = rg_serve_fail(e, 400, p, "'%s.role' is '%s'; it must be system, developer, user, assistant or tool",
                               p, role);
            break;
        }
        out->role = role;
        ok = message_content(r, rg_json_get(m, "content"), i, out, &joined[i], &used, &cap, e);
        if (!ok) break;
        const rg_json *tc = rg_json_get(m, "tool_calls");
        if (tc && !rg_json_is(tc, RG_JSON_NULL)) {
            if (strcmp(role, "assistant") != 0 || !rg_json_is(tc, RG_JSON_ARRAY)) {
                ok = rg_serve_fail(e, 400, p, "'%s.tool_calls' must be an array on an assistant message", p);
                break;
            }
            out->tool_calls = tc;
        }
        out->tool_call_id = rg_json_str(rg_json_get(m, "tool_call_id"), NULL);
        out->name = rg_json_str(rg_json_get(m, "name"), NULL);
    }
    for (size_t i = 0; ok && i < n; i++)
        if (joined[i] != SIZE_MAX) r->messages[i].content = r->owned + joined[i];
    free(joined);
    r->n_messages = n;
    return ok;
}

static bool read_prompt(rg_serve_req *r, const rg_json *root, rg_serve_error *e) {
    const rg_json *p = rg_json_get(root, "prompt");
    if (rg_json_is(p, RG_JSON_STRING)) {
        r->prompt = rg_json_str(p, &r->prompt_len);
        if (r->prompt_len == 0) return rg_serve_fail(e, 400, "prompt", "'prompt' is empty");
        return true;
    }
    if (rg_json_is(p, RG_JSON_ARRAY) && rg_json_len(p) == 1 && rg_json_is(rg_json_at(p, 0), RG_JSON_STRING)) {
        r->prompt = rg_json_str(rg_json_at(p, 0), &r->prompt_len);  // the openai client's list of one prompt
        if (r->prompt_len == 0) return rg_serve_fail(e, 400, "prompt", "'prompt' is empty");
        return true;
    }
    if (rg_json_is(p, RG_JSON_ARRAY) && rg_json_len(p) > 0 && rg_json_is(rg_json_at(p, 0), RG_JSON_NUMBER)) {
        const size_t n = rg_json_len(p);
        r->prompt_tokens = malloc(n * sizeof(int32_t));
        if (!r->prompt_tokens) return rg_serve_fail(e, 500, "prompt", "out of memory");
        for (size_t i = 0; i < n; i++) {
            int64_t t;
            if (!rg_json_int64(rg_json_at(p, i), &t) || t < 0 || t > INT32_MAX)
                return rg_serve_fail(e, 400, "prompt", "'prompt[%zu]' must be a token id (a non-negative integer)", i);
            r->prompt_tokens[i] = (int32_t)t;
        }
        r->n_prompt_tokens = n;
        return true;
    }
    if (rg_json_is(p, RG_JSON_ARRAY) && rg_json_len(p) > 1)
        return rg_serve_fail(e, 400, "prompt", "'prompt' holds %zu prompts; this server takes one per request",
                             rg_json_len(p));
    return rg_serve_fail(e, 400, "prompt", "'prompt' must be a non-empty string or an array of token ids");
}

static bool read_stop(rg_serve_req *r, const rg_json *root, rg_serve_error *e) {
    const rg_json *s = rg_json_get(root, "stop");
    if (!s || rg_json_is(s, RG_JSON_NULL)) return true;
    if (rg_json_is(s, RG_JSON_STRING)) {
        r->stop[0] = rg_json_str(s, &r->stop_len[0]);
        r->n_stop = r->stop_len[0] > 0;
        return true;
    }
    if (!rg_json_is(s, RG_JSON_ARRAY))
        return rg_serve_fail(e, 400, "stop", "'stop' must be a string or an array of strings");
    if (rg_json_len(s) > RG_SERVE_MAX_STOP)
        return rg_serve_fail(e, 400, "stop", "'stop' holds %zu strings; at most %d", rg_json_len(s), RG_SERVE_MAX_STOP);
    for (size_t i = 0; i < rg_json_len(s); i++) {
        size_t n;
        const char *t = rg_json_str(rg_json_at(s, i), &n);
        if (!t) return rg_serve_fail(e, 400, "stop", "'stop[%zu]' must be a string", i);
        if (n == 0) return rg_serve_fail(e, 400, "stop", "'stop[%zu]' is empty", i);
        r->stop[r->n_stop] = t, r->stop_len[r->n_stop++] = n;
    }
    return true;
}

static bool read_sampling(rg_serve_req *r, const rg_json *root, rg_serve_error *e) {
    rg_sampler_params *sp = &r->sampling;
    double temp = 1.0, top_p = 1.0, min_p = 0.0, rep = 1.0, fp = 0, pp = 0;
    int64_t top_k = 0, last_n = 64, seed = 0;
    if (!num_in(root, "temperature", 0, false, 2, false, &temp, e) || !num_in(root, "top_p", 0, true, 1, false, &top_p, e) ||
        !num_in(root, "min_p", 0, false, 1, true, &min_p, e) || !int_in(root, "top_k", 0, 1 << 20, &top_k, e) ||
        !num_in(root, "repeat_penalty", 0, true, 10, false, &rep, e) ||
        !int_in(root, "repeat_last_n", 0, 1 << 20, &last_n, e) ||
        !num_in(root, "frequency_penalty", -2, false, 2, false, &fp, e) ||
        !num_in(root, "presence_penalty", -2, false, 2, false, &pp, e))
        return false;
    if (fp != 0)
        return rg_serve_fail(e, 400, "frequency_penalty",
                             "'frequency_penalty' %g is not supported (only 0); use repeat_penalty", fp);
    if (pp != 0)
        return rg_serve_fail(e, 400, "presence_penalty",
                             "'presence_penalty' %g is not supported (only 0); use repeat_penalty", pp);
    const rg_json *sv = rg_json_get(root, "seed");
    if (sv && !rg_json_is(sv, RG_JSON_NULL)) {
        if (!int_in(root, "seed", INT64_MIN, INT64_MAX, &seed, e)) return false;
        r->seed_given = true;
    }
    *sp = rg_sampler_defaults();
    sp->temp = (float)temp, sp->top_p = (float)top_p, sp->min_p = (float)min_p, sp->top_k = (int32_t)top_k;
    sp->repeat_penalty = (float)rep, sp->repeat_last_n = (int32_t)last_n, sp->seed = (uint64_t)seed;
    return true;
}

static bool read_logprobs(rg_serve_req *r, const rg_json *root, rg_serve_error *e) {
    const rg_json *lp = rg_json_get(root, "logprobs");
    if ((!lp || rg_json_is(lp, RG_JSON_NULL)) && r->kind == RG_SERVE_CHAT && rg_json_get(root, "top_logprobs") &&
        !rg_json_is(rg_json_get(root, "top_logprobs"), RG_JSON_NULL))
        return rg_serve_fail(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (!lp || rg_json_is(lp, RG_JSON_NULL)) return true;
    if (r->kind == RG_SERVE_COMPLETION) {  // completions: logprobs is the number of alternatives, 0..5
        int64_t k = 0;
        if (!int_in(root, "logprobs", 0, 5, &k, e)) return false;
        r->logprobs = true, r->top_logprobs = (int)k;
        return true;
    }
    if (!flag(root, "logprobs", &r->logprobs, e)) return false;
    int64_t k = 0;
    if (!int_in(root, "top_logprobs", 0, 20, &k, e)) return false;
    if (k > 0 && !r->logprobs) return rg_serve_fail(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r->top_logprobs = (int)k;
    return true;
}

static bool read_tools(rg_serve_req *r, const rg_json *root, rg_serve_error *e) {
    const rg_json *tools = rg_json_get(root, "tools"), *tc = rg_json_get(root, "tool_choice");
    if (rg_json_is(tools, RG_JSON_NULL)) tools = NULL;
    if (rg_json_is(tc, RG_JSON_NULL)) tc = NULL;
    rg_error err;
    if (rg_tool_choice_parse(tools, tc, &r->tool_choice, &err))
        return rg_serve_fail(e, 400, strstr(err.msg, "tool_choice") ? "tool_choice" : "tools", "%s", err.msg);
    r->tools = tools && rg_json_len(tools) ? tools : NULL;
    return true;
}

static bool read_lora(rg_serve_req *r, const rg_json *root, rg_serve_error *e) {
    const rg_json *ls;
    if (!typed(root, "lora", RG_JSON_ARRAY, &ls, e)) return false;
    if (!ls) return true;
    r->lora_given = true;
    if (rg_json_len(ls) > RG_SERVE_MAX_LORA)
        return rg_serve_fail(e, 400, "lora", "'lora' lists %zu adapters; at most %d", rg_json_len(ls), RG_SERVE_MAX_LORA);
    for (size_t i = 0; i < rg_json_len(ls); i++) {
        const rg_json *l = rg_json_at(ls, i);
        int64_t id = -1;
        double scale = 1.0;
        if (!rg_json_is(l, RG_JSON_OBJECT) || !rg_json_int64(rg_json_get(l, "id"), &id) || id < 0)
            return rg_serve_fail(e, 400, "lora", "'lora[%zu]' must be {\"id\": N, \"scale\": S} with N >= 0", i);
        if (!num_in(l, "scale", -16, false, 16, false, &scale, e)) return false;
        r->lora[r->n_lora++] = (rg_serve_lora){id, (float)scale};
    }
    return true;
}

static bool read_fields(rg_serve_req *r, const rg_json *root, const rg_serve_limits *lim, rg_serve_error *e) {
    if (!rg_json_is(root, RG_JSON_OBJECT)) return rg_serve_fail(e, 400, "", "the request body must be a JSON object");
    r->model = rg_json_str(rg_json_get(root, "model"), NULL);
    if (!r->model && r->kind != RG_SERVE_TEMPLATE) return rg_serve_fail(e, 400, "model", "'model' (a string) is required");
    if (r->kind != RG_SERVE_COMPLETION ? !read_messages(r, root, lim, e) : !read_prompt(r, root, e)) return false;
    const rg_json *so;
    if (!flag(root, "stream", &r->stream, e) || !typed(root, "stream_options", RG_JSON_OBJECT, &so, e) ||
        !flag(so, "include_usage", &r->include_usage, e))
        return false;
    const int64_t max_hi = lim && lim->max_tokens > 0 ? lim->max_tokens : INT32_MAX;
    int64_t n = 1;
    bool echo = false;
    if (!int_in(root, "max_tokens", 1, max_hi, &r->max_tokens, e) ||
        !int_in(root, "max_completion_tokens", 1, max_hi, &r->max_tokens, e) || !int_in(root, "n", 1, 1, &n, e) ||
        !flag(root, "echo", &echo, e))
        return false;
    if (echo) return rg_serve_fail(e, 400, "echo", "'echo': true is not supported");
    const rg_json *rf;
    if (!typed(root, "response_format", RG_JSON_OBJECT, &rf, e)) return false;
    const char *rft = rf ? rg_json_str(rg_json_get(rf, "type"), NULL) : "text";
    if (!rft || strcmp(rft, "text") != 0)
        return rg_serve_fail(e, 400, "response_format", "'response_format' type '%s' is not supported (only text)",
                             rft ? rft : "(none)");
    return read_sampling(r, root, e) && read_stop(r, root, e) && read_logprobs(r, root, e) &&
           (r->kind == RG_SERVE_COMPLETION || read_tools(r, root, e)) && read_lora(r, root, e);
}

bool rg_serve_req_parse(rg_serve_req *out, rg_serve_kind kind, const char *body, size_t len,
                        const rg_serve_limits *lim, rg_serve_error *e) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    if (lim && lim->max_body && len > lim->max_body)
        return rg_serve_fail(e, 413, "", "the request body is %zu bytes; this server takes at most %zu", len,
                             lim->max_body);
    rg_error jerr;
    rg_json_limits jl = {.max_depth = 64, .max_bytes = len + 1};
    if (rg_json_parse(&out->doc, body, len, &jl, &jerr))
        return rg_serve_fail(e, 400, "", "the request body is not valid JSON: %s", jerr.msg);
    if (!read_fields(out, rg_json_root(out->doc), lim, e)) {
        rg_serve_req_free(out);
        return false;
    }
    return true;
}

void rg_serve_req_free(rg_serve_req *r) {
    rg_json_free(r->doc);
    free(r->messages);
    free(r->prompt_tokens);
    free(r->owned);
    memset(r, 0, sizeof *r);
}
