// pyjson.c - json.dumps-style text and Python literals for chat templates (see pyjson.h).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/pyjson.h"

static void text(rg_jw *w, const char *s) { rg_jw_text_append(w, s, strlen(s)); }

void rg_pyjson_string(rg_jw *w, const char *s, size_t n) {
    text(w, "\"");
    size_t run = 0;  // bytes [i - run, i) written as they are, together
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
                esc = ubuf;
            }
        }
        if (!esc) {
            run++;
            continue;
        }
        rg_jw_text_append(w, s + i - run, run);
        run = 0;
        text(w, esc);
    }
    rg_jw_text_append(w, s + n - run, run);
    text(w, "\"");
}

// Python's repr(float): the shortest digits that read back as v, fixed notation for decimal
// exponents -4..15 (with ".0" when there is no fraction), else d.ddde+XX.
static void py_float(rg_jw *w, double v) {
    if (isnan(v) || isinf(v)) {
        text(w, isnan(v) ? "NaN" : v < 0 ? "-Infinity" : "Infinity");
        return;
    }
    char sci[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(sci, sizeof sci, "%.*e", prec - 1, v);
        if (strtod(sci, NULL) == v) break;
    }
    // sci is [-]d[.ddd]e[+-]XX: collect the digits and the exponent.
    char digits[24];
    size_t nd = 0;
    const char *p = sci;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out[o++] = '0', out[o++] = '.';
            for (int i = -1; i > exp10; i--) out[o++] = '0';
            for (size_t i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp10; i++) out[o++] = (size_t)i < nd ? digits[i] : '0';
            out[o++] = '.';
            if ((size_t)exp10 + 1 >= nd) out[o++] = '0';
            for (size_t i = (size_t)exp10 + 1; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    text(w, out);
}

// A JSON number as Python prints what json.loads made of it: an int keeps its digits
// (arbitrary precision; -0 is 0), anything with a fraction or an exponent is a float.
static void py_number(rg_jw *w, const rg_json *v) {
    const char *t = rg_json_num_text(v);
    if (strpbrk(t, ".eE")) py_float(w, rg_json_num(v));
    else text(w, strcmp(t, "-0") == 0 ? "0" : t);
}

typedef struct spelling {
    const char *t, *f, *null;
} spelling;

static void write_value(rg_jw *w, const rg_json *v, const spelling *sp);

bool rg_pyjson_name_byte(unsigned char c, bool first) {
    bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
    return letter || (!first && ((c >= '0' && c <= '9') || c == '.' || c == '-'));
}

bool rg_pyjson_is_name(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!rg_pyjson_name_byte((unsigned char)s[i], i == 0)) return false;
    return n > 0;
}

// An object's members: "key": value, or as keyword arguments key=value (the key as it is).
static void write_members(rg_jw *w, const rg_json *v, const spelling *sp, bool kwargs) {
    for (size_t i = 0; i < rg_json_len(v); i++) {
        size_t kn;
        const char *k = rg_json_key_at(v, i, &kn);
        if (i) text(w, ", ");
        if (kwargs) rg_jw_text_append(w, k, kn);
        else rg_pyjson_string(w, k, kn);
        text(w, kwargs ? "=" : ": ");
        write_value(w, rg_json_value_at(v, i), sp);
    }
}

static void write_value(rg_jw *w, const rg_json *v, const spelling *sp) {
    switch (rg_json_type_of(v)) {
    case RG_JSON_NULL: text(w, sp->null); break;
    case RG_JSON_BOOL: text(w, rg_json_bool(v) ? sp->t : sp->f); break;
    case RG_JSON_NUMBER: py_number(w, v); break;
    case RG_JSON_STRING: {
        size_t n;
        const char *s = rg_json_str(v, &n);
        rg_pyjson_string(w, s, n);
        break;
    }
    case RG_JSON_ARRAY:
        text(w, "[");
        for (size_t i = 0; i < rg_json_len(v); i++) {
            if (i) text(w, ", ");
            write_value(w, rg_json_at(v, i), sp);
        }
        text(w, "]");
        break;
    case RG_JSON_OBJECT:
        text(w, "{");
        write_members(w, v, sp, false);
        text(w, "}");
        break;
    }
}

void rg_pyjson_dumps(rg_jw *w, const rg_json *v) {
    static const spelling json = {"true", "false", "null"};
    write_value(w, v, &json);
}

static const spelling python = {"True", "False", "None"};

void rg_pyjson_literal(rg_jw *w, const rg_json *v) { write_value(w, v, &python); }

void rg_pyjson_kwargs(rg_jw *w, const rg_json *object) { write_members(w, object, &python, true); }

// ---------------------------------------------------------------------------
// Reading Python literals (LFM2's call arguments) as JSON

typedef struct pyreader {
    const char *s;
    size_t n, i;
    int depth;
    char *why;
    size_t why_cap;
} pyreader;

static bool fail_at(pyreader *r, const char *what) {
    if (r->i < r->n) snprintf(r->why, r->why_cap, "byte %zu: %s, found '%c'", r->i, what, r->s[r->i]);
    else snprintf(r->why, r->why_cap, "byte %zu: %s, found the end", r->i, what);
    return false;
}

static void skip_space(pyreader *r) {
    while (r->i < r->n && (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

static bool starts(const pyreader *r, const char *word) {
    size_t k = strlen(word);
    return r->n - r->i >= k && memcmp(r->s + r->i, word, k) == 0;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static bool hex_digits(pyreader *r, size_t k, uint32_t *out) {
    uint32_t v = 0;
    for (size_t j = 0; j < k; j++) {
        char c = r->i + j < r->n ? r->s[r->i + j] : '\0';
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail_at(r, "a hex digit of an escape");
        v = v << 4 | (uint32_t)d;
    }
    r->i += k;
    *out = v;
    return true;
}

// The escape after a backslash (r->i at the character after it), decoded into o; *k bytes.
static bool string_escape(pyreader *r, char *o, size_t *k) {
    static const char plain[] = "\\\\''\"\"n\nt\tr\rb\bf\fa\av\v";  // pairs: escape letter, byte
    char c = r->s[r->i];
    for (size_t j = 0; plain[j]; j += 2)
        if (plain[j] == c) {
            o[0] = plain[j + 1];
            *k = 1;
            r->i++;
            return true;
        }
    if (c == '0' || c == '\n') {  // NUL, or a line continuation (nothing)
        o[0] = '\0';
        *k = c == '0' ? 1 : 0;
        r->i++;
        return true;
    }
    size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (!digits) {  // Python keeps an unknown escape as it is
        o[0] = '\\', o[1] = c;
        *k = 2;
        r->i++;
        return true;
    }
    r->i++;
    uint32_t cp;
    if (!hex_digits(r, digits, &cp)) return false;
    if (cp >= 0xD800 && cp <= 0xDBFF && starts(r, "\\u")) {  // a surrogate pair written as two escapes
        size_t back = r->i;
        uint32_t lo;
        r->i += 2;
        if (hex_digits(r, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        else r->i = back;
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return fail_at(r, "a code point that UTF-8 can hold");
    *k = put_utf8(o, cp);
    return true;
}

// A quoted string, decoded; *out is malloc'd and NUL-terminated.
static bool read_string(pyreader *r, char **out, size_t *out_len) {
    char quote = r->s[r->i++];
    char *buf = malloc(r->n - r->i + 8);  // decoding never grows the text by more than a few bytes
    if (!buf) return snprintf(r->why, r->why_cap, "out of memory"), false;
    size_t o = 0;
    while (r->i < r->n && r->s[r->i] != quote) {
        char c = r->s[r->i];
        if (c == '\n') break;  // not in a one-line string
        if (c != '\\') {
            buf[o++] = c;
            r->i++;
            continue;
        }
        r->i++;
        size_t k;
        if (r->i >= r->n || !string_escape(r, buf + o, &k)) {
            free(buf);
            return r->i >= r->n ? fail_at(r, "an escape after '\\'") : false;
        }
        o += k;
    }
    if (r->i >= r->n || r->s[r->i] != quote) {
        free(buf);
        return fail_at(r, quote == '"' ? "a closing '\"'" : "a closing \"'\"");
    }
    r->i++;
    buf[o] = '\0';
    *out = buf;
    *out_len = o;
    return true;
}

// Whether t[0..n) is a JSON number (RFC 8259 grammar).
static bool json_number(const char *t, size_t n) {
    size_t i = 0;
    if (i < n && t[i] == '-') i++;
    if (i < n && t[i] == '0') i++;
    else if (i < n && t[i] >= '1' && t[i] <= '9') while (i < n && t[i] >= '0' && t[i] <= '9') i++;
    else return false;
    if (i < n && t[i] == '.') {
        size_t d = ++i;
        while (i < n && t[i] >= '0' && t[i] <= '9') i++;
        if (i == d) return false;
    }
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        if (i < n && (t[i] == '+' || t[i] == '-')) i++;
        size_t d = i;
        while (i < n && t[i] >= '0' && t[i] <= '9') i++;
        if (i == d) return false;
    }
    return i == n;
}

// A number: as written when it is JSON already, else the double Python would read (+1, 1., .5).
static bool read_number(pyreader *r, rg_jw *w) {
    size_t b = r->i;
    while (r->i < r->n && strchr("0123456789+-.eE", r->s[r->i])) r->i++;
    size_t n = r->i - b;
    if (json_number(r->s + b, n)) {
        rg_jw_raw(w, r->s + b, n);
        return true;
    }
    char buf[64];
    char *end;
    if (n == 0 || n >= sizeof buf) return r->i = b, fail_at(r, "a value");
    memcpy(buf, r->s + b, n);
    buf[n] = '\0';
    double v = strtod(buf, &end);
    if (*end || !isfinite(v) || (buf[0] == '+' && buf[1] == '-')) return r->i = b, fail_at(r, "a number");
    rg_jw_f64(w, v);
    return true;
}

static bool read_value(pyreader *r, rg_jw *w);

// [a, b] or (a, b) as an array; {k: v} as an object with string keys. A trailing comma is fine.
static bool read_container(pyreader *r, rg_jw *w) {
    char open = r->s[r->i++];
    char close = open == '[' ? ']' : open == '(' ? ')' : '}';
    if (++r->depth > 64) return fail_at(r, "at most 64 nested containers");
    if (open == '{') rg_jw_obj(w);
    else rg_jw_arr(w);
    for (;;) {
        skip_space(r);
        if (r->i < r->n && r->s[r->i] == close) break;
        if (open == '{') {
            if (r->i >= r->n || (r->s[r->i] != '"' && r->s[r->i] != '\'')) return fail_at(r, "a string key");
            char *key;
            size_t key_len;
            if (!read_string(r, &key, &key_len)) return false;
            bool nul = strlen(key) != key_len;
            if (!nul) rg_jw_key(w, key);
            free(key);
            if (nul) return fail_at(r, "a key without NUL characters");
            skip_space(r);
            if (r->i >= r->n || r->s[r->i] != ':') return fail_at(r, "':' after a key");
            r->i++;
        }
        if (!read_value(r, w)) return false;
        skip_space(r);
        if (r->i < r->n && r->s[r->i] == ',') r->i++;
        else if (r->i >= r->n || r->s[r->i] != close) return fail_at(r, open == '{' ? "',' or '}'" : "',' or a closing bracket");
    }
    r->i++;
    r->depth--;
    if (open == '{') rg_jw_obj_end(w);
    else rg_jw_arr_end(w);
    return true;
}

static bool read_value(pyreader *r, rg_jw *w) {
    skip_space(r);
    if (r->i >= r->n) return fail_at(r, "a value");
    char c = r->s[r->i];
    static const struct { const char *word; int kind; } words[] = {
        {"True", 1}, {"true", 1}, {"False", 0}, {"false", 0}, {"None", 2}, {"null", 2},
    };
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
        size_t wl = strlen(words[k].word);
        if (!starts(r, words[k].word)) continue;
        char next = r->i + wl < r->n ? r->s[r->i + wl] : ' ';
        if ((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9') || next == '_')
            break;
        r->i += wl;
        if (words[k].kind == 2) rg_jw_null(w);
        else rg_jw_bool(w, words[k].kind == 1);
        return true;
    }
    if (c == '"' || c == '\'') {
        char *s;
        size_t n;
        if (!read_string(r, &s, &n)) return false;
        rg_jw_strn(w, s, n);
        free(s);
        return true;
    }
    if (c == '[' || c == '(' || c == '{') return read_container(r, w);
    return read_number(r, w);
}

bool rg_pyjson_read_literal(rg_jw *w, const char *text, size_t len, size_t *pos, char *why, size_t why_cap) {
    pyreader r = {.s = text, .n = len, .i = *pos, .why = why, .why_cap = why_cap};
    bool ok = read_value(&r, w);
    *pos = r.i;
    return ok;
}
