// generate_chat.c - `retrograd generate --chat`: user lines from stdin ("> " on stderr), each
// answered, the conversation kept in the KV cache: each turn evaluates only the text the
// template adds after the previous answer. /exit or end of input stops it (generate.h).
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cli.h"
#include "generate.h"

typedef struct msg_list {
    rg_chat_message *m;
    size_t n, cap;
} msg_list;

static bool msgs_push(msg_list *l, const char *role, const char *content, size_t len) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        rg_chat_message *b = realloc(l->m, cap * sizeof *b);
        if (!b) return false;
        l->m = b;
        l->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return false;
    memcpy(c, content, len);
    c[len] = '\0';
    l->m[l->n++] = (rg_chat_message){.role = role, .role_len = strlen(role), .content = c, .content_len = len};
    return true;
}

static void msgs_free(msg_list *l) {
    for (size_t i = 0; i < l->n; i++) free((char *)l->m[i].content);
    free(l->m);
}

// The end of the content of message idx in the rendered text.
static size_t content_end_of(const rg_chat_rendered *r, size_t idx) {
    for (size_t i = 0; i < r->n_spans; i++)
        if (r->spans[i].message == (int32_t)idx) return r->spans[i].content_end;
    return r->len;
}

// The next user line without its line end (empty lines skipped): false at /exit or the end of input.
static bool read_user_line(char **line, size_t *cap, size_t *len) {
    for (;;) {
        fputs("> ", stderr);
        fflush(stderr);
        ssize_t got = getline(line, cap, stdin);
        if (got < 0) {
            fputc('\n', stderr);
            return false;
        }
        size_t n = (size_t)got;
        while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) n--;
        (*line)[n] = '\0';
        if (!strcmp(*line, "/exit")) return false;
        if (n > 0) {
            *len = n;
            return true;
        }
    }
}

// The tokens this turn evaluates, the user's message being the last of msgs. The cache holds
// everything up to the previous answer's content (but its last token, pending, when that did
// not end the answer): that token and the template's text after the answer.
static rg_status turn_ids(gen *g, const rg_chat_template *tmpl, const msg_list *msgs, int32_t pending, int32_t **ids,
                          size_t *n, rg_error *err) {
    const bool first = msgs->n == 1;
    rg_chat_rendered r = {0};
    rg_chat_options o = {.add_generation_prompt = true};
    rg_status st = rg_chat_render(tmpl, msgs->m, msgs->n, &o, &r, err);
    if (st) return st;
    size_t from = first ? 0 : content_end_of(&r, msgs->n - 2);
    st = gen_tokenize(g, r.text + from, r.len - from, first && g->add_bos, ids, n, err);
    rg_chat_rendered_free(&r);
    if (!st && pending >= 0) {
        int32_t *b = realloc(*ids, (*n + 1) * sizeof *b);
        if (!b) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
        *ids = b;
        memmove(b + 1, b, *n * sizeof *b);
        b[0] = pending;
        (*n)++;
    }
    if (!st && rg_session_n_past(g->sess) + (int64_t)*n >= g->n_ctx)
        st = rg_fail(err, RG_ERR_ARG,
                     "the conversation (%" PRId64 " tokens so far, %zu more for this turn) no longer fits the "
                     "context of %" PRId64 " tokens: start again with a larger -c",
                     rg_session_n_past(g->sess), *n, g->n_ctx);
    return st;
}

// One exchange: the user's line answered, the answer added to msgs; *pending updated.
static rg_status chat_turn(gen *g, const rg_chat_template *tmpl, msg_list *msgs, const char *line, size_t len,
                           int32_t *pending, rg_error *err) {
    if (rg_utf8_first_invalid(line, len) < len)
        fprintf(stderr, "retrograd %s: warning: the line is not valid UTF-8; it is tokenized byte by byte\n", g->cmd);
    if (!msgs_push(msgs, "user", line, len)) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    int32_t *ids = NULL;
    size_t n = 0;
    turn_stats ts = {0};
    rg_status st = turn_ids(g, tmpl, msgs, *pending, &ids, &n, err);
    if (!st) st = gen_run_turn(g, ids, (int64_t)n, *pending >= 0 ? 1 : 0, true, &ts, err);
    free(ids);
    if (st) return st;
    if (!g->last_newline) gen_emit(g, "\n", 1);  // the answer on lines of its own
    gen_print_stats(g, &ts);
    bool ok = msgs_push(msgs, "assistant", ts.reply, ts.reply_len);
    free(ts.reply);
    if (!ok) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    if (ts.ctx_full) return rg_fail(err, RG_ERR_ARG, "the conversation fills the context; start again with a larger -c");
    *pending = ts.eog || ts.last < 0 ? -1 : ts.last;
    return RG_OK;
}

int gen_chat(gen *g, const rg_chat_template *tmpl) {
    msg_list msgs = {0};
    char *line = NULL;
    size_t line_cap = 0, len = 0;
    int rc = 0;
    rg_error err = {0};
    int32_t pending = -1;  // the last token of the previous answer, drawn but not evaluated
    while (read_user_line(&line, &line_cap, &len)) {
        if (chat_turn(g, tmpl, &msgs, line, len, &pending, &err)) {
            if (!g->last_newline) fputc('\n', stderr);
            fprintf(stderr, "retrograd %s: %s\n", g->cmd, err.msg);
            rc = 1;
            break;
        }
    }
    free(line);
    msgs_free(&msgs);
    return rc;
}
