// json_write.c - see json_write.h.
#include "base/json_write.h"

#include "base/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rg_jw_init(rg_jw *w) {
    memset(w, 0, sizeof *w);
    w->first[0] = true;
}

void rg_jw_free(rg_jw *w) {
    free(w->buf);
    rg_jw_init(w);
}

void rg_jw_reset(rg_jw *w) {
    char *b = w->buf;
    size_t cap = w->cap;
    rg_jw_init(w);
    w->buf = b;
    w->cap = cap;
    if (b) b[0] = 0;
}

const char *rg_jw_text(const rg_jw *w, size_t *len) {
    if (len) *len = w->failed ? 0 : w->len;
    if (w->failed) return NULL;
    return w->buf ? w->buf : "";
}

char *rg_jw_take(rg_jw *w, size_t *len) {
    char *b = w->failed ? NULL : w->buf;
    if (!w->failed && !b) b = calloc(1, 1);
    if (len) *len = b ? w->len : 0;
    if (w->failed) free(w->buf);
    rg_jw_init(w);
    return b;
}

bool rg_jw_failed(const rg_jw *w) { return w->failed; }

static void put(rg_jw *w, const char *s, size_t n) {
    if (w->failed) return;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n + 1) {
            if (cap > SIZE_MAX / 2) {
                w->failed = true;
                return;
            }
            cap *= 2;
        }
        char *b = realloc(w->buf, cap);
        if (!b) {
            w->failed = true;
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = 0;
}

void rg_jw_text_append(rg_jw *w, const char *s, size_t n) { put(w, s, n); }

// Before any value: the comma that separates it from the previous item (not after a key).
static void value_begins(rg_jw *w) {
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (!w->first[w->depth] && w->depth > 0) put(w, ",", 1);  // top-level values are separate documents
    w->first[w->depth] = false;
}

static void open(rg_jw *w, char c) {
    value_begins(w);
    put(w, &c, 1);
    if (w->depth + 1 >= RG_JW_MAX_DEPTH) {
        w->failed = true;
        return;
    }
    w->first[++w->depth] = true;
}

static void close_(rg_jw *w, char c) {
    if (w->depth > 0) w->depth--;
    put(w, &c, 1);
}

void rg_jw_obj(rg_jw *w) { open(w, '{'); }
void rg_jw_obj_end(rg_jw *w) { close_(w, '}'); }
void rg_jw_arr(rg_jw *w) { open(w, '['); }
void rg_jw_arr_end(rg_jw *w) { close_(w, ']'); }

size_t rg_utf8_seq_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

static void string_body(rg_jw *w, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    put(w, "\"", 1);
    size_t run = 0;  // bytes [i - run, i) that need no escape, written together
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        const char *esc = NULL;
        char ubuf[8];
        size_t len = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20 || c == 0x7F) {
            snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
            esc = ubuf;
        } else if (c >= 0x80) {
            len = rg_utf8_seq_len(s + i, n - i);
            if (len == 0) esc = "\\ufffd", len = 1;
        }
        if (esc) {
            put(w, (const char *)s + i - run, run);
            run = 0;
            put(w, esc, strlen(esc));
        } else {
            run += len;
        }
        i += len;
    }
    put(w, (const char *)s + n - run, run);
    put(w, "\"", 1);
}

void rg_jw_key(rg_jw *w, const char *key) {
    value_begins(w);
    string_body(w, key, strlen(key));
    put(w, ":", 1);
    w->after_key = true;
}

void rg_jw_strn(rg_jw *w, const char *s, size_t n) {
    value_begins(w);
    string_body(w, s, n);
}

void rg_jw_str(rg_jw *w, const char *s) {
    if (!s) rg_jw_null(w);
    else rg_jw_strn(w, s, strlen(s));
}

void rg_jw_i64(rg_jw *w, int64_t v) {
    char b[32];
    int n = snprintf(b, sizeof b, "%" PRId64, v);
    value_begins(w);
    put(w, b, (size_t)n);
}

void rg_jw_f64(rg_jw *w, double v) {
    if (!isfinite(v)) {
        rg_jw_null(w);
        return;
    }
    char b[40];
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {  // the shortest of %.15g..%.17g that reads back exactly
        n = snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    value_begins(w);
    put(w, b, (size_t)n);
}

void rg_jw_bool(rg_jw *w, bool v) {
    value_begins(w);
    put(w, v ? "true" : "false", v ? 4 : 5);
}

void rg_jw_null(rg_jw *w) {
    value_begins(w);
    put(w, "null", 4);
}

void rg_jw_raw(rg_jw *w, const char *json, size_t n) {
    value_begins(w);
    put(w, json, n);
}

void rg_jw_kstr(rg_jw *w, const char *key, const char *s) {
    rg_jw_key(w, key);
    rg_jw_str(w, s);
}
void rg_jw_ki64(rg_jw *w, const char *key, int64_t v) {
    rg_jw_key(w, key);
    rg_jw_i64(w, v);
}
void rg_jw_kf64(rg_jw *w, const char *key, double v) {
    rg_jw_key(w, key);
    rg_jw_f64(w, v);
}
void rg_jw_kbool(rg_jw *w, const char *key, bool v) {
    rg_jw_key(w, key);
    rg_jw_bool(w, v);
}

void rg_jw_value(rg_jw *w, const rg_json *v) {
    switch (rg_json_type_of(v)) {
    case RG_JSON_NULL: rg_jw_null(w); break;
    case RG_JSON_BOOL: rg_jw_bool(w, rg_json_bool(v)); break;
    case RG_JSON_NUMBER: {
        const char *t = rg_json_num_text(v);
        rg_jw_raw(w, t, strlen(t));
        break;
    }
    case RG_JSON_STRING: {
        size_t n;
        const char *s = rg_json_str(v, &n);
        rg_jw_strn(w, s, n);
        break;
    }
    case RG_JSON_ARRAY:
        rg_jw_arr(w);
        for (size_t i = 0; i < rg_json_len(v); i++) rg_jw_value(w, rg_json_at(v, i));
        rg_jw_arr_end(w);
        break;
    case RG_JSON_OBJECT:
        rg_jw_obj(w);
        for (size_t i = 0; i < rg_json_len(v); i++) {
            size_t kn;
            const char *k = rg_json_key_at(v, i, &kn);
            value_begins(w);
            string_body(w, k, kn);
            put(w, ":", 1);
            w->after_key = true;
            rg_jw_value(w, rg_json_value_at(v, i));
        }
        rg_jw_obj_end(w);
        break;
    }
}
