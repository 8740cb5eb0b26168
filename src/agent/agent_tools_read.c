// agent_tools_read.c - the tools file (agent_tools.h) read into at_mcp and at_cmd entries: YAML through
// libyaml's document API or JSON through base/json.h, both first turned into one small tree whose every value
// and key knows its line, then checked key by key so that every message can say FILE:LINE and the key.
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_tools_internal.h"
#include "base/error.h"
#include "base/json_write.h"

#ifdef RG_HAVE_YAML
#include <yaml.h>
#endif

// ---------------------------------------------------------------------------------------------------------------
// The tree

typedef enum cn_kind { CN_NULL, CN_BOOL, CN_NUMBER, CN_STRING, CN_SEQ, CN_MAP } cn_kind;

typedef struct cn {
    cn_kind kind;
    size_t line;
    char *text;        // scalars: the string's bytes, the number's text, "true" / "false"
    size_t len;
    struct cn *items;  // SEQ: its items; MAP: its values
    size_t n;
    char **keys;       // MAP: [n]
    size_t *key_lines; // MAP: [n]
} cn;

static void cn_free(cn *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) {
        cn_free(&c->items[i]);
        if (c->keys) free(c->keys[i]);
    }
    free(c->items);
    free(c->keys);
    free(c->key_lines);
    free(c->text);
}

static const char *cn_kind_name(cn_kind k) {
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "a list", "a mapping"};
    return names[k];
}

static bool cn_alloc(cn *c, size_t n, bool map) {
    c->n = n;
    c->items = calloc(n ? n : 1, sizeof *c->items);
    if (map) {
        c->keys = calloc(n ? n : 1, sizeof *c->keys);
        c->key_lines = calloc(n ? n : 1, sizeof *c->key_lines);
    }
    return c->items && (!map || (c->keys && c->key_lines));
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

// ---------------------------------------------------------------------------------------------------------------
// JSON: rg_json gives the values; a scan of the same (already valid) text, in the same order, gives the lines.

typedef struct jscan {
    const char *s;
    size_t n, i, line;
} jscan;

static void js_ws(jscan *j) {
    for (; j->i < j->n && strchr(" \t\r\n", j->s[j->i]); j->i++) j->line += j->s[j->i] == '\n';
}

static void js_skip_string(jscan *j) {
    for (j->i++; j->i < j->n && j->s[j->i] != '"'; j->i++)
        if (j->s[j->i] == '\\') j->i++;
    j->i++;
}

static void js_skip_scalar(jscan *j) {
    while (j->i < j->n && !strchr(",]} \t\r\n", j->s[j->i])) j->i++;
}

static rg_status from_json(cn *c, const rg_json *v, jscan *j, rg_error *err) {
    js_ws(j);
    c->line = j->line;
    const rg_json_type t = rg_json_type_of(v);
    if (t == RG_JSON_OBJECT || t == RG_JSON_ARRAY) {
        const bool map = t == RG_JSON_OBJECT;
        c->kind = map ? CN_MAP : CN_SEQ;
        if (!cn_alloc(c, rg_json_len(v), map)) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
        j->i++;  // { or [
        for (size_t k = 0; k < c->n; k++) {
            js_ws(j);
            if (map) {
                size_t kl;
                const char *key = rg_json_key_at(v, k, &kl);
                c->key_lines[k] = j->line;
                if (!(c->keys[k] = dup_n(key, kl))) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
                js_skip_string(j);
                js_ws(j);
                j->i++;  // :
            }
            rg_status st = from_json(&c->items[k], map ? rg_json_value_at(v, k) : rg_json_at(v, k), j, err);
            if (st) return st;
            js_ws(j);
            j->i++;  // , or the closing bracket
        }
        if (c->n == 0) {
            js_ws(j);
            j->i++;
        }
        return RG_OK;
    }
    size_t len = 0;
    const char *text = t == RG_JSON_STRING ? rg_json_str(v, &len)
                     : t == RG_JSON_NUMBER ? rg_json_num_text(v)
                     : t == RG_JSON_BOOL   ? (rg_json_bool(v) ? "true" : "false")
                                           : "null";
    if (t != RG_JSON_STRING) len = strlen(text);
    c->kind = t == RG_JSON_STRING ? CN_STRING : t == RG_JSON_NUMBER ? CN_NUMBER : t == RG_JSON_BOOL ? CN_BOOL : CN_NULL;
    if (!(c->text = dup_n(text, len))) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    c->len = len;
    if (t == RG_JSON_STRING) js_skip_string(j);
    else js_skip_scalar(j);
    return RG_OK;
}

static rg_status read_json(cn *root, const char *path, const char *text, size_t len, rg_error *err) {
    rg_json_doc *doc;
    rg_status st = rg_json_parse(&doc, text, len, NULL, err);
    if (st) {
        char inner[sizeof err->msg];
        memcpy(inner, err->msg, sizeof inner);
        return rg_fail(err, st, "%s: %s", path, inner);
    }
    jscan j = {.s = text, .n = len, .line = 1};
    st = from_json(root, rg_json_root(doc), &j, err);
    rg_json_free(doc);
    return st;
}

// ---------------------------------------------------------------------------------------------------------------
// YAML (the core schema's plain scalars: null, booleans, numbers as JSON writes them; everything else a string)

#ifdef RG_HAVE_YAML
static bool is_json_number(const char *s) {
    const char *p = s;
    if (*p == '-') p++;
    if (!isdigit((unsigned char)*p) || (*p == '0' && isdigit((unsigned char)p[1]))) return false;
    while (isdigit((unsigned char)*p)) p++;
    if (*p == '.') {
        if (!isdigit((unsigned char)*++p)) return false;
        while (isdigit((unsigned char)*p)) p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) return false;
        while (isdigit((unsigned char)*p)) p++;
    }
    return *p == '\0';
}

static rg_status from_yaml(cn *c, yaml_document_t *d, yaml_node_t *node, int depth, const char *path, rg_error *err) {
    c->line = node->start_mark.line + 1;
    if (depth > 32) return rg_fail(err, RG_ERR_FORMAT, "%s:%zu: nested deeper than 32 levels", path, c->line);
    if (node->type == YAML_SCALAR_NODE) {
        const char *v = (const char *)node->data.scalar.value;
        const size_t n = node->data.scalar.length;
        const bool plain = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        c->kind = CN_STRING;
        if (plain && (n == 0 || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL")))
            c->kind = CN_NULL, v = "null";
        else if (plain && (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "TRUE")))
            c->kind = CN_BOOL, v = "true";
        else if (plain && (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "FALSE")))
            c->kind = CN_BOOL, v = "false";
        else if (plain && is_json_number(v))
            c->kind = CN_NUMBER;
        c->len = c->kind == CN_STRING || c->kind == CN_NUMBER ? n : strlen(v);
        if (!(c->text = dup_n(v, c->len))) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
        return RG_OK;
    }
    const bool map = node->type == YAML_MAPPING_NODE;
    const size_t n = map ? (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start)
                         : (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    c->kind = map ? CN_MAP : CN_SEQ;
    if (!cn_alloc(c, n, map)) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < n; k++) {
        yaml_node_t *value;
        if (map) {
            yaml_node_pair_t *p = &node->data.mapping.pairs.start[k];
            yaml_node_t *key = yaml_document_get_node(d, p->key);
            value = yaml_document_get_node(d, p->value);
            c->key_lines[k] = key->start_mark.line + 1;
            if (key->type != YAML_SCALAR_NODE)
                return rg_fail(err, RG_ERR_FORMAT, "%s:%zu: a key must be a plain string", path, c->key_lines[k]);
            if (!(c->keys[k] = dup_n((const char *)key->data.scalar.value, key->data.scalar.length)))
                return rg_fail(err, RG_ERR_NOMEM, "out of memory");
            for (size_t q = 0; q < k; q++)
                if (!strcmp(c->keys[q], c->keys[k]))
                    return rg_fail(err, RG_ERR_FORMAT, "%s:%zu: the key '%s' is given twice (first on line %zu)", path,
                                   c->key_lines[k], c->keys[k], c->key_lines[q]);
        } else {
            value = yaml_document_get_node(d, node->data.sequence.items.start[k]);
        }
        rg_status st = from_yaml(&c->items[k], d, value, depth + 1, path, err);
        if (st) return st;
    }
    return RG_OK;
}

static rg_status read_yaml(cn *root, const char *path, const char *text, size_t len, rg_error *err) {
    yaml_parser_t p;
    yaml_document_t d;
    if (!yaml_parser_initialize(&p)) return rg_fail(err, RG_ERR_NOMEM, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    rg_status st = RG_OK;
    if (!yaml_parser_load(&p, &d)) {
        st = rg_fail(err, RG_ERR_FORMAT, "%s:%zu: YAML syntax error: %s%s%s", path, p.problem_mark.line + 1,
                     p.problem ? p.problem : "error", p.context ? ", " : "", p.context ? p.context : "");
        yaml_parser_delete(&p);
        return st;
    }
    yaml_node_t *top = yaml_document_get_root_node(&d);
    if (!top) st = rg_fail(err, RG_ERR_FORMAT, "%s: the file is empty: it must declare mcp servers or commands", path);
    else st = from_yaml(root, &d, top, 0, path, err);
    yaml_document_delete(&d);
    yaml_parser_delete(&p);
    return st;
}
#endif

// ---------------------------------------------------------------------------------------------------------------
// Checking the tree into entries

typedef struct reader {
    const char *path;
    rg_error *err;
} reader;

static rg_status bad(reader *r, size_t line, const char *fmt, const char *where, const char *what) {
    char msg[400];
    snprintf(msg, sizeof msg, fmt, where, what);
    return rg_fail(r->err, RG_ERR_FORMAT, "%s:%zu: %s", r->path, line, msg);
}

// The value of key in map (NULL when absent).
static const cn *member(const cn *map, const char *key) {
    for (size_t i = 0; i < map->n; i++)
        if (!strcmp(map->keys[i], key)) return &map->items[i];
    return NULL;
}

static rg_status check_keys(reader *r, const cn *map, const char *where, const char *const *known) {
    for (size_t i = 0; i < map->n; i++) {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++) ok = !strcmp(*k, map->keys[i]);
        if (ok) continue;
        char list[200] = "";
        for (const char *const *k = known; *k; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k == known ? "" : ", ", *k);
        char what[300];
        snprintf(what, sizeof what, "unknown key '%.60s' (known: %s)", map->keys[i], list);
        return bad(r, map->key_lines[i], "%s: %s", where, what);
    }
    return RG_OK;
}

static rg_status want_kind(reader *r, const cn *v, cn_kind k, const char *where) {
    if (v->kind == k) return RG_OK;
    char what[80];
    snprintf(what, sizeof what, "must be %s, not %s", cn_kind_name(k), cn_kind_name(v->kind));
    return bad(r, v->line, "%s %s", where, what);
}

static rg_status get_string(reader *r, const cn *map, const char *key, const char *where, bool required, char **out) {
    const cn *v = member(map, key);
    char w[120];
    snprintf(w, sizeof w, "%s.%s", where, key);
    if (!v) return required ? bad(r, map->line, "%s: the key '%s' is missing", where, key) : RG_OK;
    rg_status st = want_kind(r, v, CN_STRING, w);
    if (st) return st;
    if (memchr(v->text, 0, v->len)) return bad(r, v->line, "%s %s", w, "holds a NUL byte");
    if (required && v->len == 0) return bad(r, v->line, "%s %s", w, "is empty");
    if (!(*out = strdup(v->text))) return rg_fail(r->err, RG_ERR_NOMEM, "out of memory");
    return RG_OK;
}

// A positive integer in [1, hi]; absent: *out stays.
static rg_status get_count(reader *r, const cn *map, const char *key, const char *where, long long hi, long long *out) {
    const cn *v = member(map, key);
    if (!v) return RG_OK;
    char w[120];
    snprintf(w, sizeof w, "%s.%s", where, key);
    char *end;
    errno = 0;
    long long x = v->kind == CN_NUMBER ? strtoll(v->text, &end, 10) : 0;
    if (v->kind != CN_NUMBER || *end || errno || x < 1 || x > hi) {
        char what[80];
        snprintf(what, sizeof what, "must be a whole number from 1 to %lld", hi);
        return bad(r, v->line, "%s %s", w, what);
    }
    *out = x;
    return RG_OK;
}

// A non-empty list of strings, into a NULL-terminated array.
static rg_status get_argv(reader *r, const cn *map, const char *key, const char *where, char ***argv, size_t *argc) {
    const cn *v = member(map, key);
    char w[120];
    snprintf(w, sizeof w, "%s.%s", where, key);
    if (!v) return bad(r, map->line, "%s: the key '%s' is missing", where, key);
    rg_status st = want_kind(r, v, CN_SEQ, w);
    if (st) return st;
    if (v->n == 0) return bad(r, v->line, "%s %s", w, "is empty: it needs at least the program");
    if (!(*argv = calloc(v->n + 1, sizeof **argv))) return rg_fail(r->err, RG_ERR_NOMEM, "out of memory");
    *argc = v->n;
    for (size_t i = 0; i < v->n; i++) {
        const cn *a = &v->items[i];
        char wi[160];
        snprintf(wi, sizeof wi, "%s[%zu]", w, i);
        if (a->kind != CN_STRING && a->kind != CN_NUMBER) return want_kind(r, a, CN_STRING, wi);
        if (memchr(a->text, 0, a->len)) return bad(r, a->line, "%s %s", wi, "holds a NUL byte");
        if (!((*argv)[i] = strdup(a->text))) return rg_fail(r->err, RG_ERR_NOMEM, "out of memory");
    }
    return RG_OK;
}

static void write_cn(rg_jw *w, const cn *c) {
    switch (c->kind) {
    case CN_NULL: rg_jw_null(w); break;
    case CN_BOOL: rg_jw_bool(w, c->text[0] == 't'); break;
    case CN_NUMBER: rg_jw_raw(w, c->text, c->len); break;
    case CN_STRING: rg_jw_strn(w, c->text, c->len); break;
    case CN_SEQ:
        rg_jw_arr(w);
        for (size_t i = 0; i < c->n; i++) write_cn(w, &c->items[i]);
        rg_jw_arr_end(w);
        break;
    case CN_MAP:
        rg_jw_obj(w);
        for (size_t i = 0; i < c->n; i++) {
            rg_jw_key(w, c->keys[i]);
            write_cn(w, &c->items[i]);
        }
        rg_jw_obj_end(w);
        break;
    }
}

bool at_next_placeholder(const char *s, size_t *from, size_t *begin, size_t *end) {
    for (size_t i = *from; s[i]; i++) {
        if (s[i] != '{' || !(isalpha((unsigned char)s[i + 1]) || s[i + 1] == '_')) continue;
        size_t k = i + 1;
        while (isalnum((unsigned char)s[k]) || s[k] == '_') k++;
        if (s[k] != '}') continue;
        *begin = i;
        *end = k + 1;
        *from = k + 1;
        return true;
    }
    return false;
}

static rg_status read_parameters(reader *r, const cn *entry, const char *where, at_cmd *c) {
    const cn *p = member(entry, "parameters");
    char w[120];
    snprintf(w, sizeof w, "%s.parameters", where);
    rg_jw jw;
    rg_jw_init(&jw);
    if (p) {
        rg_status st = want_kind(r, p, CN_MAP, w);
        if (st) return st;
        const cn *props = member(p, "properties");
        if (props && props->kind != CN_MAP) return want_kind(r, props, CN_MAP, "parameters.properties");
        write_cn(&jw, p);
    } else {
        rg_jw_raw(&jw, "{\"type\":\"object\",\"properties\":{}}", 33);
    }
    size_t n;
    c->parameters = rg_jw_take(&jw, &n);
    if (!c->parameters) return rg_fail(r->err, RG_ERR_NOMEM, "out of memory");
    rg_status st = rg_json_parse(&c->params, c->parameters, n, NULL, r->err);
    if (st) return st;
    // every {NAME} of argv names a property
    const rg_json *props = rg_json_get(rg_json_root(c->params), "properties");
    const cn *argv_node = member(entry, "argv");
    for (size_t i = 0; i < c->argc; i++) {
        size_t from = 0, b, e;
        while (at_next_placeholder(c->argv[i], &from, &b, &e))
            if (!rg_json_getn(props, c->argv[i] + b + 1, e - b - 2)) {
                char what[200];
                snprintf(what, sizeof what, "names '%.*s', which is not one of parameters.properties",
                         (int)(e - b - 2 > 60 ? 60 : e - b - 2), c->argv[i] + b + 1);
                char wi[140];
                snprintf(wi, sizeof wi, "%s.argv[%zu]", where, i);
                return bad(r, argv_node->items[i].line, "%s %s", wi, what);
            }
    }
    return RG_OK;
}

static const char *const top_keys[] = {"mcp", "commands", NULL};
static const char *const mcp_keys[] = {"name", "command", "tools", "cwd", "timeout_s", NULL};
static const char *const cmd_keys[] = {"name", "description", "argv", "parameters", "cwd", "timeout_s", "max_output", NULL};

static rg_status read_mcp(reader *r, const cn *e, const char *where, at_mcp *m) {
    m->line = e->line;
    rg_status st = want_kind(r, e, CN_MAP, where);
    if (!st) st = check_keys(r, e, where, mcp_keys);
    if (!st) st = get_string(r, e, "name", where, true, &m->name);
    if (!st) st = get_argv(r, e, "command", where, &m->argv, &m->argc);
    if (!st && member(e, "tools")) {
        st = get_argv(r, e, "tools", where, &m->only, &m->n_only);
        m->only_line = member(e, "tools")->line;
    }
    if (!st) st = get_string(r, e, "cwd", where, false, &m->cwd);
    long long timeout_s = 60;
    if (!st) st = get_count(r, e, "timeout_s", where, 86400, &timeout_s);
    m->timeout_ms = (int)(timeout_s * 1000);
    return st;
}

static rg_status read_cmd(reader *r, const cn *e, const char *where, at_cmd *c) {
    c->line = e->line;
    rg_status st = want_kind(r, e, CN_MAP, where);
    if (!st) st = check_keys(r, e, where, cmd_keys);
    if (!st) st = get_string(r, e, "name", where, true, &c->name);
    if (!st) st = get_string(r, e, "description", where, false, &c->description);
    if (!st && !c->description && !(c->description = strdup(""))) st = rg_fail(r->err, RG_ERR_NOMEM, "out of memory");
    if (!st) st = get_argv(r, e, "argv", where, &c->argv, &c->argc);
    if (!st) st = get_string(r, e, "cwd", where, false, &c->cwd);
    long long timeout_s = 30, max_output = 65536;
    if (!st) st = get_count(r, e, "timeout_s", where, 86400, &timeout_s);
    if (!st) st = get_count(r, e, "max_output", where, 1LL << 30, &max_output);
    c->timeout_ms = (int)(timeout_s * 1000);
    c->max_output = (size_t)max_output;
    if (!st) st = read_parameters(r, e, where, c);
    return st;
}

// Two tools (or two servers) of one name.
static rg_status check_names(reader *r, const rg_agent_tools *t) {
    for (size_t i = 0; i < t->n_cmds; i++)
        for (size_t k = 0; k < i; k++)
            if (!strcmp(t->cmds[i].name, t->cmds[k].name))
                return rg_fail(r->err, RG_ERR_FORMAT, "%s:%zu: commands[%zu].name: '%s' is already the name of "
                               "commands[%zu] (line %zu)", r->path, t->cmds[i].line, i, t->cmds[i].name, k, t->cmds[k].line);
    for (size_t i = 0; i < t->n_mcp; i++)
        for (size_t k = 0; k < i; k++)
            if (!strcmp(t->mcp[i].name, t->mcp[k].name))
                return rg_fail(r->err, RG_ERR_FORMAT, "%s:%zu: mcp[%zu].name: '%s' is already the name of mcp[%zu] "
                               "(line %zu)", r->path, t->mcp[i].line, i, t->mcp[i].name, k, t->mcp[k].line);
    return RG_OK;
}

static rg_status read_entries(reader *r, const cn *root, rg_agent_tools *t) {
    rg_status st = want_kind(r, root, CN_MAP, "the file");
    if (!st) st = check_keys(r, root, "the file", top_keys);
    if (st) return st;
    const cn *mcp = member(root, "mcp"), *cmds = member(root, "commands");
    if (mcp && (st = want_kind(r, mcp, CN_SEQ, "mcp"))) return st;
    if (cmds && (st = want_kind(r, cmds, CN_SEQ, "commands"))) return st;
    if ((!mcp || !mcp->n) && (!cmds || !cmds->n))
        return bad(r, root->line, "%s %s", "the file", "declares no tools: give mcp servers or commands");
    if (mcp && mcp->n && !(t->mcp = calloc(mcp->n, sizeof *t->mcp))) return rg_fail(r->err, RG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; mcp && i < mcp->n; i++, t->n_mcp++) {
        char where[40];
        snprintf(where, sizeof where, "mcp[%zu]", i);
        if ((st = read_mcp(r, &mcp->items[i], where, &t->mcp[i]))) {
            t->n_mcp++;
            return st;
        }
    }
    if (cmds && cmds->n && !(t->cmds = calloc(cmds->n, sizeof *t->cmds)))
        return rg_fail(r->err, RG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; cmds && i < cmds->n; i++, t->n_cmds++) {
        char where[40];
        snprintf(where, sizeof where, "commands[%zu]", i);
        if ((st = read_cmd(r, &cmds->items[i], where, &t->cmds[i]))) {
            t->n_cmds++;
            return st;
        }
    }
    return check_names(r, t);
}

rg_status rg_agent_tools_parse(rg_agent_tools **out, const char *path, const char *text, size_t len, rg_error *err) {
    *out = NULL;
    size_t i = 0;
    while (i < len && strchr(" \t\r\n", text[i])) i++;
    const bool json = i < len && text[i] == '{';
    cn root = {0};
    rg_status st;
    if (json) {
        st = read_json(&root, path, text, len, err);
    } else {
#ifdef RG_HAVE_YAML
        st = read_yaml(&root, path, text, len, err);
#else
        return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: this build reads YAML tools files only with libyaml (not found at "
                       "build time); write the file as JSON", path);
#endif
    }
    rg_agent_tools *t = NULL;
    if (!st && !(t = calloc(1, sizeof *t))) st = rg_fail(err, RG_ERR_NOMEM, "out of memory");
    if (!st && !(t->path = strdup(path))) st = rg_fail(err, RG_ERR_NOMEM, "out of memory");
    if (!st) {
        reader r = {.path = path, .err = err};
        st = read_entries(&r, &root, t);
    }
    cn_free(&root);
    if (st) {
        rg_agent_tools_free(t);
        return st;
    }
    *out = t;
    return RG_OK;
}

rg_status rg_agent_tools_load(rg_agent_tools **out, const char *path, rg_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return rg_fail(err, RG_ERR_IO, "%s: cannot open the tools file: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *b = cap <= (64u << 20) ? realloc(text, cap) : NULL;
            if (!b) {
                free(text);
                fclose(f);
                return rg_fail(err, RG_ERR_FORMAT, "%s: the tools file is larger than 64 MiB", path);
            }
            text = b;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    const bool failed = ferror(f);
    fclose(f);
    rg_status st = failed ? rg_fail(err, RG_ERR_IO, "%s: cannot read the tools file", path)
                          : rg_agent_tools_parse(out, path, text, len, err);
    free(text);
    return st;
}
