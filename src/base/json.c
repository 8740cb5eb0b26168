// json.c - the strict JSON reader of json.h: recursive descent with a depth limit, children
// gathered on a scratch stack and copied into the document's arena when their container closes.
#include "base/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/error.h"

typedef struct rg_json_member rg_json_member;

struct rg_json {
    rg_json_type type;
    uint32_t len;  // string bytes, array items, object members
    bool b;
    double num;
    union {
        const char *str;  // string bytes, or the number's text
        const rg_json *items;
        const rg_json_member *members;
    } p;
};

struct rg_json_member {
    const char *key;
    uint32_t key_len;
    rg_json value;
};

struct rg_json_doc {
    rg_arena arena;  // holds this struct too
    rg_json root;
};

// A child waiting on the scratch stack for its container to close.
typedef struct pending {
    rg_json_member m;  // key is NULL for array items
    size_t at;         // byte offset of the key (for the duplicate-key message)
} pending;

typedef struct parser {
    const unsigned char *s;
    size_t n, i;
    int depth, max_depth;
    rg_arena *arena;
    pending *stack;
    size_t sp, cap;
    char *buf;  // string decoding scratch
    size_t buf_len, buf_cap;
    rg_error *err;
    bool failed;
} parser;

// ---------------------------------------------------------------------------
// Errors: "line L, column C: what, found X"

static void position(const parser *p, size_t at, size_t *line, size_t *col) {
    size_t l = 1, start = 0;
    for (size_t k = 0; k < at && k < p->n; k++)
        if (p->s[k] == '\n') l++, start = k + 1;
    size_t c = 1;
    for (size_t k = start; k < at && k < p->n; k++)
        if ((p->s[k] & 0xC0) != 0x80) c++;
    *line = l;
    *col = c;
}

static void describe(const parser *p, size_t at, char *out, size_t cap) {
    if (at >= p->n) {
        snprintf(out, cap, "end of input");
        return;
    }
    unsigned c = p->s[at];
    if (c == '\'') snprintf(out, cap, "\"'\"");
    else if (c > 0x20 && c < 0x7F) snprintf(out, cap, "'%c'", (char)c);
    else if (c == ' ') snprintf(out, cap, "a space");
    else if (c == '\n') snprintf(out, cap, "a line feed");
    else if (c == '\t') snprintf(out, cap, "a tab");
    else snprintf(out, cap, "byte 0x%02X", c);
}

// Fails at byte offset `at`; with_found appends ", found <the byte at `at`>".
static rg_status fail_at(parser *p, size_t at, bool with_found, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static rg_status fail_at(parser *p, size_t at, bool with_found, const char *fmt, ...) {
    if (p->failed) return RG_ERR_FORMAT;
    p->failed = true;
    char what[512], found[32] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (with_found) describe(p, at, found, sizeof found);
    size_t line, col;
    position(p, at, &line, &col);
    return rg_fail(p->err, RG_ERR_FORMAT, "line %zu, column %zu: %s%s%s", line, col, what,
                   with_found ? ", found " : "", found);
}

static rg_status fail_nomem(parser *p) {
    p->failed = true;
    return rg_fail(p->err, RG_ERR_NOMEM, "JSON: out of memory");
}

// ---------------------------------------------------------------------------
// Scanning helpers

static void skip_ws(parser *p) {
    while (p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

static int peek(const parser *p) { return p->i < p->n ? p->s[p->i] : -1; }

static bool buf_put(parser *p, const void *bytes, size_t k) {
    if (p->buf_len + k > p->buf_cap) {
        size_t cap = p->buf_cap ? p->buf_cap : 256;
        while (cap < p->buf_len + k) cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b) return false;
        p->buf = b;
        p->buf_cap = cap;
    }
    memcpy(p->buf + p->buf_len, bytes, k);
    p->buf_len += k;
    return true;
}

static bool put_utf8(parser *p, uint32_t cp) {
    unsigned char u[4];
    size_t k;
    if (cp < 0x80) u[0] = (unsigned char)cp, k = 1;
    else if (cp < 0x800) u[0] = (unsigned char)(0xC0 | cp >> 6), u[1] = (unsigned char)(0x80 | (cp & 0x3F)), k = 2;
    else if (cp < 0x10000)
        u[0] = (unsigned char)(0xE0 | cp >> 12), u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
        u[2] = (unsigned char)(0x80 | (cp & 0x3F)), k = 3;
    else
        u[0] = (unsigned char)(0xF0 | cp >> 18), u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)),
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (unsigned char)(0x80 | (cp & 0x3F)), k = 4;
    return buf_put(p, u, k);
}

// Length of the well-formed UTF-8 sequence at s[0..n) (a non-ASCII lead byte), or 0.
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k;
    uint32_t min, cp;
    if (c >= 0xC2 && c <= 0xDF) k = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) k = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) k = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (n < k) return 0;
    for (size_t j = 1; j < k; j++) {
        if ((s[j] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[j] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

static int hex4(const parser *p, size_t at) {
    if (at + 4 > p->n) return -1;
    int v = 0;
    for (size_t j = 0; j < 4; j++) {
        int c = p->s[at + j], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v << 4 | d;
    }
    return v;
}

// ---------------------------------------------------------------------------
// Values

static rg_status parse_value(parser *p, rg_json *out);

// The string starting at the '"' at p->i, decoded into the arena.
static rg_status parse_string(parser *p, const char **str, uint32_t *len) {
    size_t open = p->i++;
    p->buf_len = 0;
    for (;;) {
        if (p->i >= p->n) {
            size_t line, col;
            position(p, open, &line, &col);
            return fail_at(p, p->i, true, "expected '\"' to end the string that begins at line %zu, column %zu", line, col);
        }
        unsigned char c = p->s[p->i];
        if (c == '"') break;
        if (c == '\\') {
            size_t esc = p->i;
            if (esc + 1 >= p->n) return fail_at(p, esc + 1, true, "expected an escape character after '\\'");
            unsigned char e = p->s[esc + 1];
            char one = 0;
            switch (e) {
            case '"': one = '"'; break;
            case '\\': one = '\\'; break;
            case '/': one = '/'; break;
            case 'b': one = '\b'; break;
            case 'f': one = '\f'; break;
            case 'n': one = '\n'; break;
            case 'r': one = '\r'; break;
            case 't': one = '\t'; break;
            case 'u': break;
            default: return fail_at(p, esc + 1, true, "invalid escape (expected one of \" \\ / b f n r t u after '\\')");
            }
            if (e != 'u') {
                if (!buf_put(p, &one, 1)) return fail_nomem(p);
                p->i += 2;
                continue;
            }
            int u = hex4(p, esc + 2);
            if (u < 0) return fail_at(p, esc, false, "expected 4 hex digits after '\\u'");
            uint32_t cp = (uint32_t)u;
            p->i = esc + 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail_at(p, esc, false, "lone low surrogate \\u%04X (it must follow a \\uD800-\\uDBFF escape)", cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                int lo = (p->i + 1 < p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') ? hex4(p, p->i + 2) : -1;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return fail_at(p, esc, false, "lone high surrogate \\u%04X (expected a \\uDC00-\\uDFFF escape after it)",
                                   cp);
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                p->i += 6;
            }
            if (!put_utf8(p, cp)) return fail_nomem(p);
            continue;
        }
        if (c < 0x20) return fail_at(p, p->i, false, "control character U+%04X in a string (write it as an escape)", c);
        if (c < 0x80) {
            if (!buf_put(p, &c, 1)) return fail_nomem(p);
            p->i++;
            continue;
        }
        size_t k = utf8_seq(p->s + p->i, p->n - p->i);
        if (!k) return fail_at(p, p->i, true, "invalid UTF-8 in a string");
        if (!buf_put(p, p->s + p->i, k)) return fail_nomem(p);
        p->i += k;
    }
    p->i++;  // the closing quote
    char *s = rg_arena_strndup(p->arena, p->buf ? p->buf : "", p->buf_len);
    if (!s) return fail_nomem(p);
    *str = s;
    *len = (uint32_t)p->buf_len;
    return RG_OK;
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

static rg_status parse_number(parser *p, rg_json *out) {
    size_t start = p->i;
    if (peek(p) == '-') p->i++;
    if (peek(p) == '0') {
        p->i++;
        if (is_digit(peek(p))) return fail_at(p, p->i, false, "leading zeros are not allowed in numbers");
    } else if (is_digit(peek(p))) {
        while (is_digit(peek(p))) p->i++;
    } else {
        return fail_at(p, p->i, true, "expected a digit after '-'");
    }
    if (peek(p) == '.') {
        p->i++;
        if (!is_digit(peek(p))) return fail_at(p, p->i, true, "expected a digit after the decimal point");
        while (is_digit(peek(p))) p->i++;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        p->i++;
        if (peek(p) == '+' || peek(p) == '-') p->i++;
        if (!is_digit(peek(p))) return fail_at(p, p->i, true, "expected a digit in the exponent");
        while (is_digit(peek(p))) p->i++;
    }
    char *text = rg_arena_strndup(p->arena, (const char *)p->s + start, p->i - start);
    if (!text) return fail_nomem(p);
    out->type = RG_JSON_NUMBER;
    out->p.str = text;
    out->len = (uint32_t)(p->i - start);
    // The grammar above is a subset of strtod's; the "C" locale is assumed (the library never
    // calls setlocale). Out of range gives +-HUGE_VAL (infinity) or a denormal/zero.
    out->num = strtod(text, NULL);
    return RG_OK;
}

static rg_status parse_literal(parser *p, rg_json *out) {
    static const struct { const char *word; rg_json_type type; bool b; } lits[] = {
        {"true", RG_JSON_BOOL, true}, {"false", RG_JSON_BOOL, false}, {"null", RG_JSON_NULL, false}};
    for (size_t k = 0; k < 3; k++) {
        size_t L = strlen(lits[k].word);
        if (p->s[p->i] == (unsigned char)lits[k].word[0]) {
            if (p->n - p->i < L || memcmp(p->s + p->i, lits[k].word, L) != 0)
                return fail_at(p, p->i, false, "invalid literal (expected %s)", lits[k].word);
            p->i += L;
            out->type = lits[k].type;
            out->b = lits[k].b;
            return RG_OK;
        }
    }
    return fail_at(p, p->i, true, "expected a value (object, array, string, number, true, false or null)");
}

static bool push(parser *p, const pending *e) {
    if (p->sp == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        pending *s = realloc(p->stack, cap * sizeof *s);
        if (!s) return false;
        p->stack = s;
        p->cap = cap;
    }
    p->stack[p->sp++] = *e;
    return true;
}

static int cmp_pending(const void *a, const void *b) {
    const pending *x = *(const pending *const *)a, *y = *(const pending *const *)b;
    size_t n = x->m.key_len < y->m.key_len ? x->m.key_len : y->m.key_len;
    int c = memcmp(x->m.key, y->m.key, n);
    if (c) return c;
    if (x->m.key_len != y->m.key_len) return x->m.key_len < y->m.key_len ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

// Refuses an object whose members (stack[base..sp)) repeat a key.
static rg_status check_duplicates(parser *p, size_t base) {
    size_t count = p->sp - base;
    if (count < 2) return RG_OK;
    const pending **order = malloc(count * sizeof *order);
    if (!order) return fail_nomem(p);
    for (size_t k = 0; k < count; k++) order[k] = &p->stack[base + k];
    qsort(order, count, sizeof *order, cmp_pending);
    const pending *dup = NULL;
    for (size_t k = 1; k < count; k++) {
        if (order[k - 1]->m.key_len == order[k]->m.key_len &&
            memcmp(order[k - 1]->m.key, order[k]->m.key, order[k]->m.key_len) == 0) {
            if (!dup || order[k]->at < dup->at) dup = order[k];
        }
    }
    free(order);
    if (!dup) return RG_OK;
    return fail_at(p, dup->at, false, "duplicate key \"%.*s\" in an object", dup->m.key_len > 60 ? 60 : (int)dup->m.key_len,
                   dup->m.key);
}

static rg_status parse_container(parser *p, rg_json *out, bool object) {
    const char close = object ? '}' : ']';
    if (++p->depth > p->max_depth)
        return fail_at(p, p->i, false, "nesting deeper than %d levels", p->max_depth);
    p->i++;
    size_t base = p->sp;
    skip_ws(p);
    if (peek(p) == close) {
        p->i++;
    } else {
        for (;;) {
            skip_ws(p);
            pending e = {0};
            if (object) {
                if (peek(p) != '"') {
                    bool after_comma = p->sp > base;
                    if (after_comma && peek(p) == '}')
                        return fail_at(p, p->i, true, "expected a string key after ',' (trailing commas are not allowed)");
                    return fail_at(p, p->i, true, after_comma ? "expected a string key after ','"
                                                              : "expected a string key or '}'");
                }
                e.at = p->i;
                if (parse_string(p, &e.m.key, &e.m.key_len)) return RG_ERR_FORMAT;
                skip_ws(p);
                if (peek(p) != ':') return fail_at(p, p->i, true, "expected ':' after an object key");
                p->i++;
                skip_ws(p);
            } else if (peek(p) == ']' && p->sp > base) {
                return fail_at(p, p->i, true, "expected a value after ',' (trailing commas are not allowed)");
            }
            rg_status st = parse_value(p, &e.m.value);
            if (st) return st;
            if (!push(p, &e)) return fail_nomem(p);
            skip_ws(p);
            int c = peek(p);
            if (c == ',') {
                p->i++;
                continue;
            }
            if (c == close) {
                p->i++;
                break;
            }
            return fail_at(p, p->i, true, object ? "expected ',' or '}' after an object member"
                                                  : "expected ',' or ']' after an array item");
        }
    }
    p->depth--;
    size_t count = p->sp - base;
    if (count > UINT32_MAX) return fail_at(p, p->i, false, "too many items in one container");
    out->type = object ? RG_JSON_OBJECT : RG_JSON_ARRAY;
    out->len = (uint32_t)count;
    if (object) {
        rg_status st = check_duplicates(p, base);
        if (st) return st;
        rg_json_member *m = count ? rg_arena_alloc(p->arena, count * sizeof *m, _Alignof(rg_json_member)) : NULL;
        if (count && !m) return fail_nomem(p);
        for (size_t k = 0; k < count; k++) m[k] = p->stack[base + k].m;
        out->p.members = m;
    } else {
        rg_json *v = count ? rg_arena_alloc(p->arena, count * sizeof *v, _Alignof(rg_json)) : NULL;
        if (count && !v) return fail_nomem(p);
        for (size_t k = 0; k < count; k++) v[k] = p->stack[base + k].m.value;
        out->p.items = v;
    }
    p->sp = base;
    return RG_OK;
}

static rg_status parse_value(parser *p, rg_json *out) {
    memset(out, 0, sizeof *out);
    skip_ws(p);
    int c = peek(p);
    if (c < 0) return fail_at(p, p->i, true, "expected a value");
    if (c == '{') return parse_container(p, out, true);
    if (c == '[') return parse_container(p, out, false);
    if (c == '"') {
        out->type = RG_JSON_STRING;
        return parse_string(p, &out->p.str, &out->len);
    }
    if (c == '-' || is_digit(c)) return parse_number(p, out);
    return parse_literal(p, out);
}

// ---------------------------------------------------------------------------
// Documents

rg_status rg_json_parse(rg_json_doc **out, const char *text, size_t len, const rg_json_limits *limits,
                        rg_error *err) {
    *out = NULL;
    size_t max_bytes = limits && limits->max_bytes ? limits->max_bytes : (size_t)1 << 30;
    if (max_bytes > UINT32_MAX - 1) max_bytes = UINT32_MAX - 1;
    int max_depth = limits && limits->max_depth > 0 ? limits->max_depth : 64;
    if (max_depth > 4096) max_depth = 4096;  // recursion bound
    if (len > max_bytes)
        return rg_fail(err, RG_ERR_FORMAT, "JSON text of %zu bytes is longer than the limit of %zu bytes", len, max_bytes);
    if (!text && len) return rg_fail(err, RG_ERR_ARG, "JSON: NULL text");

    rg_arena arena;
    size_t chunk = 2 * len + 256;
    rg_arena_init(&arena, chunk < 1024 ? 1024 : chunk > ((size_t)1 << 20) ? (size_t)1 << 20 : chunk);
    rg_json_doc *doc = rg_arena_alloc(&arena, sizeof *doc, _Alignof(rg_json_doc));
    if (!doc) return rg_fail(err, RG_ERR_NOMEM, "JSON: out of memory");

    parser p = {.s = (const unsigned char *)(text ? text : ""), .n = len, .max_depth = max_depth, .arena = &arena,
                .err = err};
    rg_status st = RG_OK;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        st = fail_at(&p, 0, false, "a byte order mark is not allowed at the start of JSON text");
    } else {
        st = parse_value(&p, &doc->root);
        if (!st) {
            skip_ws(&p);
            if (p.i < p.n) st = fail_at(&p, p.i, true, "unexpected characters after the JSON value");
        }
    }
    free(p.stack);
    free(p.buf);
    if (st) {
        rg_arena_free(&arena);
        return st;
    }
    doc->arena = arena;
    *out = doc;
    return RG_OK;
}

void rg_json_free(rg_json_doc *doc) {
    if (!doc) return;
    rg_arena a = doc->arena;  // the document lives in its own arena
    rg_arena_free(&a);
}

const rg_json *rg_json_root(const rg_json_doc *doc) { return doc ? &doc->root : NULL; }

// ---------------------------------------------------------------------------
// Accessors

rg_json_type rg_json_type_of(const rg_json *v) { return v ? v->type : RG_JSON_NULL; }

const char *rg_json_type_name(rg_json_type t) {
    switch (t) {
    case RG_JSON_NULL: return "null";
    case RG_JSON_BOOL: return "boolean";
    case RG_JSON_NUMBER: return "number";
    case RG_JSON_STRING: return "string";
    case RG_JSON_ARRAY: return "array";
    case RG_JSON_OBJECT: return "object";
    }
    return "?";
}

bool rg_json_is(const rg_json *v, rg_json_type t) { return v && v->type == t; }

size_t rg_json_len(const rg_json *v) {
    if (!v) return 0;
    return v->type == RG_JSON_STRING || v->type == RG_JSON_ARRAY || v->type == RG_JSON_OBJECT ? v->len : 0;
}

const rg_json *rg_json_at(const rg_json *array, size_t i) {
    return rg_json_is(array, RG_JSON_ARRAY) && i < array->len ? &array->p.items[i] : NULL;
}

const char *rg_json_key_at(const rg_json *object, size_t i, size_t *key_len) {
    if (!rg_json_is(object, RG_JSON_OBJECT) || i >= object->len) return NULL;
    if (key_len) *key_len = object->p.members[i].key_len;
    return object->p.members[i].key;
}

const rg_json *rg_json_value_at(const rg_json *object, size_t i) {
    return rg_json_is(object, RG_JSON_OBJECT) && i < object->len ? &object->p.members[i].value : NULL;
}

const rg_json *rg_json_getn(const rg_json *object, const char *key, size_t key_len) {
    if (!rg_json_is(object, RG_JSON_OBJECT) || !key) return NULL;
    for (uint32_t k = 0; k < object->len; k++) {
        const rg_json_member *m = &object->p.members[k];
        if (m->key_len == key_len && memcmp(m->key, key, key_len) == 0) return &m->value;
    }
    return NULL;
}

const rg_json *rg_json_get(const rg_json *object, const char *key) {
    return key ? rg_json_getn(object, key, strlen(key)) : NULL;
}

const char *rg_json_str(const rg_json *v, size_t *len) {
    if (!rg_json_is(v, RG_JSON_STRING)) return NULL;
    if (len) *len = v->len;
    return v->p.str;
}

double rg_json_num(const rg_json *v) { return rg_json_is(v, RG_JSON_NUMBER) ? v->num : 0.0; }

const char *rg_json_num_text(const rg_json *v) { return rg_json_is(v, RG_JSON_NUMBER) ? v->p.str : NULL; }

bool rg_json_int64(const rg_json *v, int64_t *out) {
    if (!rg_json_is(v, RG_JSON_NUMBER)) return false;
    const char *s = v->p.str;
    bool neg = *s == '-';
    if (neg) s++;
    uint64_t mag = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; *s; s++) {
        if (!is_digit(*s)) return false;  // a fraction or an exponent
        unsigned d = (unsigned)(*s - '0');
        if (mag > (limit - d) / 10) return false;
        mag = mag * 10 + d;
    }
    if (out) *out = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    return true;
}

bool rg_json_bool(const rg_json *v) { return rg_json_is(v, RG_JSON_BOOL) && v->b; }
