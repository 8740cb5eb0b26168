// agent.c - the agent loop (agent.h): a turn's generations, calls, results and cut-backs over an owned
// conversation, and the conversation as a fine-tuning line.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "base/error.h"
#include "base/json_write.h"
#include "text/tool_calls.h"

struct rg_agent {
    rg_agent_opts o;
    char *tools_text;       // o.tools_json's copy
    char *system;
    rg_json_doc *tools;     // parsed, or NULL
    rg_agent_msg *msgs;
    size_t n, cap;
    size_t n_call_ids;      // the next call id's number
};

const char *rg_agent_end_name(rg_agent_end e) {
    static const char *const names[] = {"answered", "failed", "refused", "max_calls"};
    return (unsigned)e < 4 ? names[e] : "?";
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        if (n) memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static void msg_free(rg_agent_msg *m) {
    free(m->role);
    free(m->content);
    free(m->tool_calls);
    rg_json_free(m->calls);
    free(m->tool_call_id);
    free(m->name);
    *m = (rg_agent_msg){0};
}

// Drops messages [n, a->n) and the call ids they used.
static void cut_back(rg_agent *a, size_t n) {
    while (a->n > n) {
        rg_agent_msg *m = &a->msgs[--a->n];
        a->n_call_ids -= rg_json_len(m->calls ? rg_json_root(m->calls) : NULL);
        msg_free(m);
    }
}

// Appends a message (copies of everything); NULL when out of memory.
static rg_agent_msg *push(rg_agent *a, const char *role, const char *content, size_t len) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        rg_agent_msg *b = realloc(a->msgs, cap * sizeof *b);
        if (!b) return NULL;
        a->msgs = b;
        a->cap = cap;
    }
    rg_agent_msg *m = &a->msgs[a->n];
    *m = (rg_agent_msg){.role = strdup(role), .content = dup_n(content ? content : "", content ? len : 0),
                        .content_len = content ? len : 0};
    if (!m->role || !m->content) {
        msg_free(m);
        return NULL;
    }
    a->n++;
    return m;
}

rg_status rg_agent_create(rg_agent **out, const rg_agent_opts *opts, rg_error *err) {
    *out = NULL;
    if (!opts->generate || !opts->execute) return rg_fail(err, RG_ERR_ARG, "agent: a generator and an executor are needed");
    rg_agent *a = calloc(1, sizeof *a);
    if (!a) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    a->o = *opts;
    if (a->o.max_calls <= 0) a->o.max_calls = 8;
    rg_status st = RG_OK;
    if (opts->tools_json) {
        if (!(a->tools_text = strdup(opts->tools_json))) st = rg_fail(err, RG_ERR_NOMEM, "out of memory");
        if (!st) st = rg_json_parse(&a->tools, a->tools_text, strlen(a->tools_text), NULL, err);
        if (!st && !rg_json_is(rg_json_root(a->tools), RG_JSON_ARRAY))
            st = rg_fail(err, RG_ERR_FORMAT, "agent: the tools must be a JSON array");
    }
    if (!st && opts->system) {
        if (!(a->system = strdup(opts->system)) || !push(a, "system", opts->system, strlen(opts->system)))
            st = rg_fail(err, RG_ERR_NOMEM, "out of memory");
    }
    if (st) {
        rg_agent_free(a);
        return st;
    }
    a->o.tools_json = a->tools_text;
    a->o.system = a->system;
    *out = a;
    return RG_OK;
}

void rg_agent_free(rg_agent *a) {
    if (!a) return;
    cut_back(a, 0);
    free(a->msgs);
    rg_json_free(a->tools);
    free(a->tools_text);
    free(a->system);
    free(a);
}

rg_status rg_agent_push(rg_agent *a, const char *role, const char *content, size_t content_len,
                        const rg_json *tool_calls, const char *tool_call_id, const char *name, rg_error *err) {
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    bool known = false;
    for (size_t i = 0; i < 4 && role; i++) known = known || !strcmp(role, roles[i]);
    if (!known) return rg_fail(err, RG_ERR_ARG, "role '%.40s' is not system, user, assistant or tool", role ? role : "");
    if (rg_json_is(tool_calls, RG_JSON_NULL)) tool_calls = NULL;
    if (tool_calls && (strcmp(role, "assistant") != 0 || !rg_json_is(tool_calls, RG_JSON_ARRAY)))
        return rg_fail(err, RG_ERR_ARG, "tool_calls must be an array, and only in an assistant message");
    rg_agent_msg *m = push(a, role, content, content_len);
    if (!m) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    rg_status st = RG_OK;
    if ((tool_call_id && !(m->tool_call_id = strdup(tool_call_id))) || (name && !(m->name = strdup(name))))
        st = rg_fail(err, RG_ERR_NOMEM, "out of memory");
    if (!st && tool_calls && rg_json_len(tool_calls)) {
        rg_jw w;
        rg_jw_init(&w);
        rg_jw_value(&w, tool_calls);
        size_t n;
        m->tool_calls = rg_jw_take(&w, &n);
        st = m->tool_calls ? rg_json_parse(&m->calls, m->tool_calls, n, NULL, err)
                           : rg_fail(err, RG_ERR_NOMEM, "out of memory");
        if (!st) a->n_call_ids += rg_json_len(tool_calls);
    }
    if (st) {
        msg_free(m);
        a->n--;
    }
    return st;
}

const rg_agent_msg *rg_agent_messages(const rg_agent *a, size_t *n) {
    *n = a->n;
    return a->msgs;
}

void rg_agent_turn_free(rg_agent_turn *t) {
    free(t->answer);
    free(t->failure);
    for (size_t i = 0; i < t->n_calls; i++) {
        free(t->calls[i].name);
        free(t->calls[i].arguments);
        free(t->calls[i].result);
        free(t->calls[i].error);
    }
    free(t->calls);
    free(t->n_prompt);
    free(t->n_reused);
    *t = (rg_agent_turn){0};
}

static void emit(rg_agent *a, rg_agent_event_kind kind, const char *name, const char *args, const char *text) {
    if (a->o.on_event) a->o.on_event(a->o.event_user, &(rg_agent_event){kind, name, args, text});
}

// ---------------------------------------------------------------------------------------------------------------
// One generation

static rg_status generate(rg_agent *a, rg_agent_turn *t, rg_agent_gen *g, rg_error *err) {
    rg_chat_message *m = calloc(a->n ? a->n : 1, sizeof *m);
    int64_t *np = realloc(t->n_prompt, (t->n_gen + 1) * sizeof *np);
    if (np) t->n_prompt = np;
    int64_t *nr = np ? realloc(t->n_reused, (t->n_gen + 1) * sizeof *nr) : NULL;
    if (nr) t->n_reused = nr;
    if (!m || !np || !nr) {
        free(m);
        return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < a->n; i++) {
        const rg_agent_msg *s = &a->msgs[i];
        m[i] = (rg_chat_message){.role = s->role, .role_len = strlen(s->role), .content = s->content,
                                 .content_len = s->content_len, .tool_calls = s->calls ? rg_json_root(s->calls) : NULL,
                                 .name = s->name, .name_len = s->name ? strlen(s->name) : 0};
    }
    *g = (rg_agent_gen){.n_prompt = -1, .n_reused = -1};
    rg_status st = a->o.generate(a->o.generate_user, m, a->n, a->tools ? rg_json_root(a->tools) : NULL, g, err);
    free(m);
    if (st) {
        free(g->text);
        g->text = NULL;
        return st;
    }
    if (!g->text && !(g->text = strdup(""))) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    t->n_prompt[t->n_gen] = g->n_prompt;
    t->n_reused[t->n_gen] = g->n_reused;
    t->n_gen++;
    return RG_OK;
}

// ---------------------------------------------------------------------------------------------------------------
// Calls

static rg_status record_call(rg_agent_turn *t, const rg_tool_call *c) {
    rg_agent_call *b = realloc(t->calls, (t->n_calls + 1) * sizeof *b);
    if (!b) return RG_ERR_NOMEM;
    t->calls = b;
    b[t->n_calls] = (rg_agent_call){.name = strdup(c->name), .arguments = strdup(c->arguments)};
    t->n_calls++;
    return b[t->n_calls - 1].name && b[t->n_calls - 1].arguments ? RG_OK : RG_ERR_NOMEM;
}

// The assistant message with the calls (ids from a->n_call_ids).
static rg_status push_calls_message(rg_agent *a, const rg_tool_calls *tc, rg_error *err) {
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_arr(&w);
    for (size_t k = 0; k < tc->n_calls; k++) {
        char id[32];
        snprintf(id, sizeof id, "call_%zu", a->n_call_ids + k);
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "id", id);
        rg_jw_kstr(&w, "type", "function");
        rg_jw_key(&w, "function");
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "name", tc->calls[k].name);
        rg_jw_kstr(&w, "arguments", tc->calls[k].arguments);
        rg_jw_obj_end(&w);
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    size_t n;
    char *json = rg_jw_take(&w, &n);
    rg_agent_msg *m = json ? push(a, "assistant", tc->content, tc->content_len) : NULL;
    if (!m) {
        free(json);
        return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    }
    m->tool_calls = json;
    rg_status st = rg_json_parse(&m->calls, json, n, NULL, err);
    if (st) return st;
    a->n_call_ids += tc->n_calls;
    return RG_OK;
}

static rg_status push_result(rg_agent *a, size_t call_id, const char *name, const char *text, size_t len,
                             rg_error *err) {
    char id[32];
    snprintf(id, sizeof id, "call_%zu", call_id);
    rg_agent_msg *m = push(a, "tool", text, len);
    if (!m || !(m->tool_call_id = strdup(id)) || !(m->name = strdup(name))) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    return RG_OK;
}

static rg_status set_failure(rg_agent_turn *t, rg_agent_end end, const char *why) {
    t->end = end;
    free(t->failure);
    t->failure = strdup(why);
    return t->failure ? RG_OK : RG_ERR_NOMEM;
}

// Runs the calls of one reply (appended as a message at index at). *done: the turn ended (a failure cut back).
static rg_status run_calls(rg_agent *a, rg_agent_turn *t, const rg_tool_calls *tc, int *n_made, bool *done,
                           rg_error *err) {
    const size_t at = a->n, first_call = t->n_calls;
    *done = false;
    for (size_t k = 0; k < tc->n_calls; k++)
        if (record_call(t, &tc->calls[k])) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    char why[sizeof err->msg];
    if (*n_made + (int)tc->n_calls > a->o.max_calls) {
        snprintf(why, sizeof why, "the model asked for %d tool calls in this turn; at most %d are allowed (max_calls)",
                 *n_made + (int)tc->n_calls, a->o.max_calls);
        for (size_t k = 0; k < tc->n_calls; k++) t->calls[first_call + k].error = strdup(why);
        emit(a, RG_AGENT_EV_FAILED, tc->calls[0].name, tc->calls[0].arguments, why);
        *done = true;
        return set_failure(t, RG_AGENT_MAX_CALLS, why) ? rg_fail(err, RG_ERR_NOMEM, "out of memory") : RG_OK;
    }
    *n_made += (int)tc->n_calls;
    // ask before anything runs
    bool *refused = calloc(tc->n_calls, sizeof *refused);
    if (!refused) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    size_t n_refused = 0;
    for (size_t k = 0; k < tc->n_calls && a->o.confirm; k++) {
        refused[k] = !a->o.confirm(a->o.confirm_user, tc->calls[k].name, tc->calls[k].arguments, k, tc->n_calls);
        n_refused += refused[k];
    }
    const size_t id0 = a->n_call_ids;
    rg_status st = push_calls_message(a, tc, err);
    rg_agent_end end = RG_AGENT_ANSWERED;
    for (size_t k = 0; k < tc->n_calls && !st; k++) {
        const rg_tool_call *c = &tc->calls[k];
        rg_agent_call *rec = &t->calls[first_call + k];
        char *result = NULL;
        size_t len = 0;
        rg_error cerr = {0};
        if (end != RG_AGENT_ANSWERED && !a->o.failures_to_model) {
            rec->error = strdup("not run: an earlier call of the same reply failed or was refused");
            continue;
        }
        if (refused[k]) {
            snprintf(cerr.msg, sizeof cerr.msg, "tool '%s': the user refused this call", c->name);
        } else {
            emit(a, RG_AGENT_EV_CALL, c->name, c->arguments, NULL);
            if (a->o.execute(a->o.execute_user, c->name, c->arguments, &result, &len, &cerr) == RG_OK) {
                emit(a, RG_AGENT_EV_RESULT, c->name, c->arguments, result);
                rec->result = result;
                st = push_result(a, id0 + k, c->name, result, len, err);
                continue;
            }
            free(result);
        }
        emit(a, RG_AGENT_EV_FAILED, c->name, c->arguments, cerr.msg);
        rec->error = strdup(cerr.msg);
        if (end == RG_AGENT_ANSWERED) {
            end = refused[k] ? RG_AGENT_REFUSED : RG_AGENT_FAILED;
            memcpy(why, cerr.msg, sizeof why);
        }
        if (a->o.failures_to_model) {
            char text[sizeof cerr.msg + 16];
            snprintf(text, sizeof text, "error: %s", cerr.msg);
            st = push_result(a, id0 + k, c->name, text, strlen(text), err);
        }
    }
    free(refused);
    if (st) return st;
    if (end != RG_AGENT_ANSWERED && !a->o.failures_to_model) {
        cut_back(a, at);  // exactly the conversation before the reply that made the call
        *done = true;
        if (set_failure(t, end, why)) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    }
    return RG_OK;
}

rg_status rg_agent_turn_run(rg_agent *a, const char *user_text, size_t len, rg_agent_turn *t, rg_error *err) {
    *t = (rg_agent_turn){.end = RG_AGENT_ANSWERED};
    const size_t before = a->n;
    if (!push(a, "user", user_text, len)) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    int n_made = 0;
    rg_status st = RG_OK;
    for (bool done = false; !done && !st;) {
        rg_agent_gen g;
        st = generate(a, t, &g, err);
        if (st) break;
        rg_tool_calls tc;
        rg_error perr = {0};
        st = rg_tool_calls_parse(a->o.family, g.text, g.len, &tc, &perr);
        free(g.text);
        if (st) {
            rg_fail(err, st, "agent: %s", perr.msg);
            break;
        }
        if (tc.status == RG_TOOL_CALLS_NONE || (tc.status == RG_TOOL_CALLS_OK && tc.n_calls == 0)) {
            t->answer = dup_n(tc.content, tc.content_len);
            t->answer_len = tc.content_len;
            if (!t->answer || !push(a, "assistant", tc.content, tc.content_len)) st = rg_fail(err, RG_ERR_NOMEM, "out of memory");
            done = true;
        } else if (tc.status == RG_TOOL_CALLS_UNPARSABLE) {
            char why[sizeof perr.msg + 64];
            snprintf(why, sizeof why, "the model's tool call does not parse: %s", perr.msg);
            emit(a, RG_AGENT_EV_FAILED, "", "", why);
            if (set_failure(t, RG_AGENT_FAILED, why)) st = rg_fail(err, RG_ERR_NOMEM, "out of memory");
            done = true;
        } else {
            st = run_calls(a, t, &tc, &n_made, &done, err);
        }
        rg_tool_calls_free(&tc);
    }
    if (st) {
        cut_back(a, before);
        rg_agent_turn_free(t);
        return st;
    }
    if (!t->answer && !(t->answer = strdup(""))) {
        cut_back(a, before);
        rg_agent_turn_free(t);
        return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    }
    return RG_OK;
}

// ---------------------------------------------------------------------------------------------------------------
// Keeping

char *rg_agent_keep_line(const rg_agent *a, size_t *len) {
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_key(&w, "tools");
    if (a->tools) rg_jw_value(&w, rg_json_root(a->tools));
    else rg_jw_raw(&w, "[]", 2);
    rg_jw_key(&w, "messages");
    rg_jw_arr(&w);
    for (size_t i = 0; i < a->n; i++) {
        const rg_agent_msg *m = &a->msgs[i];
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "role", m->role);
        if (!m->calls || m->content_len) {
            rg_jw_key(&w, "content");
            rg_jw_strn(&w, m->content, m->content_len);
        }
        if (m->calls) {
            rg_jw_key(&w, "tool_calls");
            rg_jw_value(&w, rg_json_root(m->calls));
        }
        if (m->tool_call_id) rg_jw_kstr(&w, "tool_call_id", m->tool_call_id);
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    rg_jw_obj_end(&w);
    rg_jw_text_append(&w, "\n", 1);
    return rg_jw_take(&w, len);
}

rg_status rg_agent_keep_append(const rg_agent *a, const char *path, rg_error *err) {
    size_t len;
    char *line = rg_agent_keep_line(a, &len);
    if (!line) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(line);
        return rg_fail(err, RG_ERR_IO, "%s: cannot open the keep file: %s", path, strerror(errno));
    }
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, line + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += (size_t)n;
    }
    const int saved = errno;
    free(line);
    if (close(fd) != 0 || done < len)
        return rg_fail(err, RG_ERR_IO, "%s: cannot write the keep file: %s", path, strerror(done < len ? saved : errno));
    return RG_OK;
}
