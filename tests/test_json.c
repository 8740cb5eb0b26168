// test_json.c - the strict JSON reader (src/base/json.h): a table of valid documents with the
// value each must give (written back in a canonical form), a table of invalid documents with
// the line, column and message each must give, the accessors, numbers at and beyond the
// int64/double ranges, and a robustness loop over random and mutated input (never a crash;
// whatever parses writes back to a document that parses to the same canonical form).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "rg_test.h"

static bool quick_mode(void) {
    const char *q = getenv("RG_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

// ---------------------------------------------------------------------------
// Canonical form: no whitespace, keys in document order, numbers as written, strings with
// only " \ and control characters escaped (\u00XX), other bytes raw.

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = realloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void dump_string(sbuf *b, const char *s, size_t n) {
    puts_(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') puts_(b, "\\\"");
        else if (c == '\\') puts_(b, "\\\\");
        else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04X", c);
            puts_(b, e);
        } else put(b, (const char *)&c, 1);
    }
    puts_(b, "\"");
}

static void dump(sbuf *b, const rg_json *v) {
    switch (rg_json_type_of(v)) {
    case RG_JSON_NULL: puts_(b, "null"); break;
    case RG_JSON_BOOL: puts_(b, rg_json_bool(v) ? "true" : "false"); break;
    case RG_JSON_NUMBER: puts_(b, rg_json_num_text(v)); break;
    case RG_JSON_STRING: {
        size_t n;
        const char *s = rg_json_str(v, &n);
        dump_string(b, s, n);
        break;
    }
    case RG_JSON_ARRAY:
        puts_(b, "[");
        for (size_t i = 0; i < rg_json_len(v); i++) {
            if (i) puts_(b, ",");
            dump(b, rg_json_at(v, i));
        }
        puts_(b, "]");
        break;
    case RG_JSON_OBJECT:
        puts_(b, "{");
        for (size_t i = 0; i < rg_json_len(v); i++) {
            if (i) puts_(b, ",");
            size_t kn;
            const char *k = rg_json_key_at(v, i, &kn);
            dump_string(b, k, kn);
            puts_(b, ":");
            dump(b, rg_json_value_at(v, i));
        }
        puts_(b, "}");
        break;
    }
}

// ---------------------------------------------------------------------------
// Valid documents

typedef struct valid_case {
    const char *text;
    size_t len;        // 0: strlen(text)
    const char *want;  // canonical form
    size_t want_len;   // 0: strlen(want)
} valid_case;

#define V(t, w) {t, sizeof(t) - 1, w, sizeof(w) - 1}

static const valid_case valid_cases[] = {
    V("null", "null"),
    V(" \t\r\n true \n", "true"),
    V("false", "false"),
    V("0", "0"),
    V("-0", "-0"),
    V("123", "123"),
    V("-1.5e+10", "-1.5e+10"),
    V("1E-2", "1E-2"),
    V("0.000", "0.000"),
    V("\"abc\"", "\"abc\""),
    V("\"\"", "\"\""),
    // every escape
    V("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\\"\\\\/\\u0008\\u000C\\u000A\\u000D\\u0009\""),
    // \u escapes to UTF-8: 1, 2, 3 bytes, a surrogate pair to 4 bytes; hex digits in both cases
    V("\"\\u0041\\u00e9\\u20AC\\uD83D\\uDE00\\udbff\\udfff\"",
      "\"A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\""),
    // NUL inside a string
    V("\"a\\u0000b\"", "\"a\\u0000b\""),
    // raw UTF-8, 2/3/4 bytes, the largest code point
    V("\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\"", "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\""),
    // DEL (0x7F) is not a control character for JSON
    V("\"\x7F\"", "\"\x7F\""),
    V("[]", "[]"),
    V("{}", "{}"),
    V("[ ]", "[]"),
    V("{ }", "{}"),
    V("[1,[2,[3,[]]]]", "[1,[2,[3,[]]]]"),
    V("{\"a\" : {\"b\":[true , null,\"x\"]},\"c\":-2}", "{\"a\":{\"b\":[true,null,\"x\"]},\"c\":-2}"),
    // keys that differ only after a NUL, an empty key
    V("{\"k\\u0000a\":1,\"k\\u0000b\":2,\"\":3}", "{\"k\\u0000a\":1,\"k\\u0000b\":2,\"\":3}"),
    // huge and tiny numbers are valid JSON
    V("1e400", "1e400"),
    V("-1e400", "-1e400"),
    V("1e-400", "1e-400"),
    V("123456789012345678901234567890", "123456789012345678901234567890"),
};

static void test_valid_documents(void) {
    for (size_t c = 0; c < sizeof valid_cases / sizeof *valid_cases; c++) {
        const valid_case *vc = &valid_cases[c];
        rg_json_doc *doc = NULL;
        rg_error err = {0};
        if (rg_json_parse(&doc, vc->text, vc->len, NULL, &err)) {
            RG_CHECK(0, "case %zu '%s' refused: %s", c, vc->text, err.msg);
            continue;
        }
        sbuf b = {0};
        dump(&b, rg_json_root(doc));
        RG_CHECK(b.n == vc->want_len && memcmp(b.p, vc->want, b.n) == 0, "case %zu '%s' gave '%s', want '%s'", c, vc->text,
                 b.p, vc->want);
        free(b.p);
        rg_json_free(doc);
    }
}

// ---------------------------------------------------------------------------
// Invalid documents: the whole message must be exactly this.

typedef struct invalid_case {
    const char *text;
    size_t len;
    const char *want;
} invalid_case;

#define I(t, w) {t, sizeof(t) - 1, w}

static const invalid_case invalid_cases[] = {
    I("", "line 1, column 1: expected a value, found end of input"),
    I("   \n ", "line 2, column 2: expected a value, found end of input"),
    I("[1,]", "line 1, column 4: expected a value after ',' (trailing commas are not allowed), found ']'"),
    I("{\"a\":1,}", "line 1, column 8: expected a string key after ',' (trailing commas are not allowed), found '}'"),
    I("[,1]", "line 1, column 2: expected a value (object, array, string, number, true, false or null), found ','"),
    I("01", "line 1, column 2: leading zeros are not allowed in numbers"),
    I("-01", "line 1, column 3: leading zeros are not allowed in numbers"),
    I("[00]", "line 1, column 3: leading zeros are not allowed in numbers"),
    I("-", "line 1, column 2: expected a digit after '-', found end of input"),
    I("-a", "line 1, column 2: expected a digit after '-', found 'a'"),
    I("1.", "line 1, column 3: expected a digit after the decimal point, found end of input"),
    I("1.e5", "line 1, column 3: expected a digit after the decimal point, found 'e'"),
    I(".5", "line 1, column 1: expected a value (object, array, string, number, true, false or null), found '.'"),
    I("+1", "line 1, column 1: expected a value (object, array, string, number, true, false or null), found '+'"),
    I("1e", "line 1, column 3: expected a digit in the exponent, found end of input"),
    I("1e+", "line 1, column 4: expected a digit in the exponent, found end of input"),
    I("NaN", "line 1, column 1: expected a value (object, array, string, number, true, false or null), found 'N'"),
    I("Infinity", "line 1, column 1: expected a value (object, array, string, number, true, false or null), found 'I'"),
    I("tru", "line 1, column 1: invalid literal (expected true)"),
    I("nul", "line 1, column 1: invalid literal (expected null)"),
    I("True", "line 1, column 1: expected a value (object, array, string, number, true, false or null), found 'T'"),
    I("\"a\x01" "b\"", "line 1, column 3: control character U+0001 in a string (write it as an escape)"),
    I("\"a\nb\"", "line 1, column 3: control character U+000A in a string (write it as an escape)"),
    I("\"\t\"", "line 1, column 2: control character U+0009 in a string (write it as an escape)"),
    I("\"\\x\"", "line 1, column 3: invalid escape (expected one of \" \\ / b f n r t u after '\\'), found 'x'"),
    I("\"\\'\"", "line 1, column 3: invalid escape (expected one of \" \\ / b f n r t u after '\\'), found \"'\""),
    I("\"\\", "line 1, column 3: expected an escape character after '\\', found end of input"),
    I("\"\\u12\"", "line 1, column 2: expected 4 hex digits after '\\u'"),
    I("\"\\u12G4\"", "line 1, column 2: expected 4 hex digits after '\\u'"),
    I("\"\\uD800\"", "line 1, column 2: lone high surrogate \\uD800 (expected a \\uDC00-\\uDFFF escape after it)"),
    I("\"\\uD800\\u0041\"", "line 1, column 2: lone high surrogate \\uD800 (expected a \\uDC00-\\uDFFF escape after it)"),
    I("\"\\uDBFF\\uD800\"", "line 1, column 2: lone high surrogate \\uDBFF (expected a \\uDC00-\\uDFFF escape after it)"),
    I("\"x\\uDC00\"", "line 1, column 3: lone low surrogate \\uDC00 (it must follow a \\uD800-\\uDBFF escape)"),
    I("\"\\uD83D\\uDE00\\uDE00\"", "line 1, column 14: lone low surrogate \\uDE00 (it must follow a \\uD800-\\uDBFF escape)"),
    I("\"\xC3\x28\"", "line 1, column 2: invalid UTF-8 in a string, found byte 0xC3"),
    I("\"\xC0\xAF\"", "line 1, column 2: invalid UTF-8 in a string, found byte 0xC0"),          // overlong
    I("\"\xE0\x80\xAF\"", "line 1, column 2: invalid UTF-8 in a string, found byte 0xE0"),      // overlong
    I("\"\xED\xA0\x80\"", "line 1, column 2: invalid UTF-8 in a string, found byte 0xED"),      // encoded surrogate
    I("\"\xF4\x90\x80\x80\"", "line 1, column 2: invalid UTF-8 in a string, found byte 0xF4"),  // above U+10FFFF
    I("\"\xE2\x82\"", "line 1, column 2: invalid UTF-8 in a string, found byte 0xE2"),          // truncated
    I("\"\x80\"", "line 1, column 2: invalid UTF-8 in a string, found byte 0x80"),              // stray continuation
    I("\"\xFF\"", "line 1, column 2: invalid UTF-8 in a string, found byte 0xFF"),
    I("\"\xC3\xA9\xFF\"", "line 1, column 3: invalid UTF-8 in a string, found byte 0xFF"),      // columns count characters
    I("[\"\xC3\xA9\", x]", "line 1, column 7: expected a value (object, array, string, number, true, false or null), found 'x'"),
    I("[1 2]", "line 1, column 4: expected ',' or ']' after an array item, found '2'"),
    I("[1", "line 1, column 3: expected ',' or ']' after an array item, found end of input"),
    I("[", "line 1, column 2: expected a value, found end of input"),
    I("{", "line 1, column 2: expected a string key or '}', found end of input"),
    I("{\"a\" 1}", "line 1, column 6: expected ':' after an object key, found '1'"),
    I("{1:2}", "line 1, column 2: expected a string key or '}', found '1'"),
    I("{'a':1}", "line 1, column 2: expected a string key or '}', found \"'\""),
    I("{\"a\":1 \"b\":2}", "line 1, column 8: expected ',' or '}' after an object member, found '\"'"),
    I("{\"a\":1,\"a\":2}", "line 1, column 8: duplicate key \"a\" in an object"),
    I("{\"b\":0,\"a\":1,\"c\":{},\"a\":2,\"b\":3}", "line 1, column 21: duplicate key \"a\" in an object"),
    I("\"abc", "line 1, column 5: expected '\"' to end the string that begins at line 1, column 1, found end of input"),
    I("[1] x", "line 1, column 5: unexpected characters after the JSON value, found 'x'"),
    I("1 2", "line 1, column 3: unexpected characters after the JSON value, found '2'"),
    I("{}{}", "line 1, column 3: unexpected characters after the JSON value, found '{'"),
    I("\"a\"\x00", "line 1, column 4: unexpected characters after the JSON value, found byte 0x00"),
    I("\xEF\xBB\xBF{}", "line 1, column 1: a byte order mark is not allowed at the start of JSON text"),
    I("{\n  \"a\": 1,\n  \"b\" 2\n}", "line 3, column 7: expected ':' after an object key, found '2'"),
    I("// comment\n1", "line 1, column 1: expected a value (object, array, string, number, true, false or null), found '/'"),
    I("[1,\n\n  2,\r\n  ]", "line 4, column 3: expected a value after ',' (trailing commas are not allowed), found ']'"),
    I("\f1", "line 1, column 1: expected a value (object, array, string, number, true, false or null), found byte 0x0C"),
};

static void test_invalid_documents(void) {
    for (size_t c = 0; c < sizeof invalid_cases / sizeof *invalid_cases; c++) {
        const invalid_case *ic = &invalid_cases[c];
        rg_json_doc *doc = NULL;
        rg_error err = {0};
        rg_status st = rg_json_parse(&doc, ic->text, ic->len, NULL, &err);
        RG_CHECK(st == RG_ERR_FORMAT && doc == NULL, "case %zu '%s' accepted (status %d)", c, ic->text, (int)st);
        RG_CHECK(strcmp(err.msg, ic->want) == 0, "case %zu '%s':\n      got  '%s'\n      want '%s'", c, ic->text, err.msg,
                 ic->want);
        rg_json_free(doc);
    }
}

// ---------------------------------------------------------------------------
// Limits: depth and size

static char *nest(int depth, bool object) {
    // [[[...1...]]] or {"a":{"a":...1...}}
    size_t cap = (size_t)depth * 6 + 8, n = 0;
    char *s = malloc(cap);
    for (int d = 0; d < depth; d++) n += (size_t)sprintf(s + n, object ? "{\"a\":" : "[");
    s[n++] = '1';
    for (int d = 0; d < depth; d++) s[n++] = object ? '}' : ']';
    s[n] = 0;
    return s;
}

static void test_limits(void) {
    for (int object = 0; object < 2; object++) {
        for (int depth = 63; depth <= 65; depth++) {
            char *s = nest(depth, object);
            rg_json_doc *doc = NULL;
            rg_error err = {0};
            rg_status st = rg_json_parse(&doc, s, strlen(s), NULL, &err);
            if (depth <= 64) {
                RG_CHECK(st == RG_OK, "depth %d (%s) refused: %s", depth, object ? "objects" : "arrays", err.msg);
                // Walk down to the 1.
                const rg_json *v = rg_json_root(doc);
                for (int d = 0; d < depth; d++) v = object ? rg_json_get(v, "a") : rg_json_at(v, 0);
                RG_CHECK(rg_json_is(v, RG_JSON_NUMBER) && rg_json_num(v) == 1.0, "depth %d: innermost value lost", depth);
            } else {
                char want[128];
                snprintf(want, sizeof want, "line 1, column %d: nesting deeper than 64 levels", object ? 1 + 5 * 64 : 65);
                RG_CHECK(st == RG_ERR_FORMAT && strcmp(err.msg, want) == 0, "depth %d: '%s', want '%s'", depth, err.msg,
                         want);
            }
            rg_json_free(doc);
            free(s);
        }
    }
    // Deep input far beyond the limit does not recurse without bound.
    size_t n = 1000000;
    char *deep = malloc(n);
    memset(deep, '[', n);
    rg_json_doc *doc = NULL;
    rg_error err = {0};
    RG_CHECK(rg_json_parse(&doc, deep, n, NULL, &err) == RG_ERR_FORMAT && strstr(err.msg, "column 65: nesting"),
             "a million '[': %s", err.msg);
    // A custom depth.
    rg_json_limits lim = {.max_depth = 3};
    RG_CHECK(rg_json_parse(&doc, "[[[1]]]", 7, &lim, &err) == RG_OK, "depth 3 with limit 3: %s", err.msg);
    rg_json_free(doc);
    RG_CHECK(rg_json_parse(&doc, "[[[[1]]]]", 9, &lim, &err) == RG_ERR_FORMAT &&
                 strcmp(err.msg, "line 1, column 4: nesting deeper than 3 levels") == 0,
             "depth 4 with limit 3: %s", err.msg);
    free(deep);
    // Size limit.
    lim = (rg_json_limits){.max_bytes = 10};
    RG_CHECK(rg_json_parse(&doc, "\"123456789\"", 11, &lim, &err) == RG_ERR_FORMAT &&
                 strcmp(err.msg, "JSON text of 11 bytes is longer than the limit of 10 bytes") == 0,
             "size limit: %s", err.msg);
    RG_CHECK(rg_json_parse(&doc, "\"12345678\"", 10, &lim, &err) == RG_OK, "10 bytes with limit 10: %s", err.msg);
    rg_json_free(doc);
}

// ---------------------------------------------------------------------------
// Numbers

typedef struct num_case {
    const char *text;
    double value;     // exact expected double
    bool is_int64;
    int64_t i64;
} num_case;

static void test_numbers(void) {
    const num_case cases[] = {
        {"0", 0.0, true, 0},
        {"-0", -0.0, true, 0},
        {"42", 42.0, true, 42},
        {"-17", -17.0, true, -17},
        {"1.5", 1.5, false, 0},
        {"2e3", 2000.0, false, 0},
        {"-2.5E-1", -0.25, false, 0},
        {"9223372036854775807", 9223372036854775807.0, true, INT64_MAX},
        {"-9223372036854775808", -9223372036854775808.0, true, INT64_MIN},
        {"9223372036854775808", 9223372036854775808.0, false, 0},
        {"-9223372036854775809", -9223372036854775808.0, false, 0},
        {"123456789012345678901234567890", 1.2345678901234568e29, false, 0},
        {"1e400", INFINITY, false, 0},
        {"-1e400", -INFINITY, false, 0},
        {"1e-400", 0.0, false, 0},
        {"0.1", 0.1, false, 0},
        {"1.7976931348623157e308", 1.7976931348623157e308, false, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rg_json_doc *doc = NULL;
        rg_error err = {0};
        if (rg_json_parse(&doc, cases[c].text, strlen(cases[c].text), NULL, &err)) {
            RG_CHECK(0, "'%s' refused: %s", cases[c].text, err.msg);
            continue;
        }
        const rg_json *v = rg_json_root(doc);
        double got = rg_json_num(v);
        RG_CHECK(got == cases[c].value && signbit(got) == signbit(cases[c].value), "'%s': %.17g, want %.17g",
                 cases[c].text, got, cases[c].value);
        int64_t i = 12345;
        bool is = rg_json_int64(v, &i);
        RG_CHECK(is == cases[c].is_int64 && (!is || i == cases[c].i64), "'%s': int64 %d %lld, want %d %lld", cases[c].text,
                 is, (long long)i, cases[c].is_int64, (long long)cases[c].i64);
        RG_CHECK(strcmp(rg_json_num_text(v), cases[c].text) == 0, "'%s': text '%s'", cases[c].text, rg_json_num_text(v));
        rg_json_free(doc);
    }
}

// ---------------------------------------------------------------------------
// Accessors

static void test_accessors(void) {
    const char text[] = "{\"text\":\"hi\\u0000there\",\"n\":[1,\"two\",false,null,{}],\"k\\u0000\":true,\"t\":true}";
    rg_json_doc *doc = NULL;
    rg_error err = {0};
    RG_REQUIRE(rg_json_parse(&doc, text, sizeof text - 1, NULL, &err) == RG_OK, "%s", err.msg);
    const rg_json *root = rg_json_root(doc);
    RG_CHECK(rg_json_type_of(root) == RG_JSON_OBJECT && rg_json_len(root) == 4, "root type %d len %zu",
             (int)rg_json_type_of(root), rg_json_len(root));
    size_t n = 0;
    const char *s = rg_json_str(rg_json_get(root, "text"), &n);
    RG_CHECK(s && n == 8 && memcmp(s, "hi\0there", 9) == 0, "text with NUL: len %zu", n);
    const rg_json *arr = rg_json_get(root, "n");
    RG_CHECK(rg_json_len(arr) == 5, "array len %zu", rg_json_len(arr));
    RG_CHECK(rg_json_num(rg_json_at(arr, 0)) == 1.0, "n[0]");
    RG_CHECK(strcmp(rg_json_str(rg_json_at(arr, 1), NULL), "two") == 0, "n[1]");
    RG_CHECK(rg_json_is(rg_json_at(arr, 2), RG_JSON_BOOL) && !rg_json_bool(rg_json_at(arr, 2)), "n[2]");
    RG_CHECK(rg_json_is(rg_json_at(arr, 3), RG_JSON_NULL), "n[3]");
    RG_CHECK(rg_json_is(rg_json_at(arr, 4), RG_JSON_OBJECT) && rg_json_len(rg_json_at(arr, 4)) == 0, "n[4]");
    RG_CHECK(rg_json_at(arr, 5) == NULL, "n[5] should be NULL");
    RG_CHECK(rg_json_get(root, "k") == NULL, "'k' must not match the key 'k\\0'");
    RG_CHECK(rg_json_bool(rg_json_getn(root, "k\0", 2)), "getn with a NUL in the key");
    RG_CHECK(rg_json_bool(rg_json_get(root, "t")), "t");
    RG_CHECK(rg_json_get(root, "missing") == NULL, "missing key");
    size_t kl = 0;
    RG_CHECK(strcmp(rg_json_key_at(root, 1, &kl), "n") == 0 && kl == 1, "key_at(1)");
    RG_CHECK(rg_json_key_at(root, 4, &kl) == NULL && rg_json_value_at(root, 4) == NULL, "key_at out of range");
    // Wrong types and NULL answer "nothing".
    RG_CHECK(rg_json_get(arr, "x") == NULL && rg_json_at(root, 0) == NULL, "get on an array / at on an object");
    RG_CHECK(rg_json_str(arr, &n) == NULL && rg_json_num(root) == 0.0 && !rg_json_bool(root), "wrong-type accessors");
    RG_CHECK(rg_json_len(NULL) == 0 && rg_json_get(NULL, "a") == NULL && rg_json_type_of(NULL) == RG_JSON_NULL &&
                 rg_json_num_text(root) == NULL && !rg_json_int64(root, NULL),
             "NULL accessors");
    RG_CHECK(strcmp(rg_json_type_name(RG_JSON_OBJECT), "object") == 0 &&
                 strcmp(rg_json_type_name(RG_JSON_BOOL), "boolean") == 0,
             "type names");
    rg_json_free(doc);
    rg_json_free(NULL);
}

// ---------------------------------------------------------------------------
// Robustness: random bytes and mutations of valid documents never crash; an accepted document
// writes back to one that parses to the same canonical form; a refused one has a positioned message.

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static int check_one(const char *s, size_t n, int *n_ok) {
    rg_json_doc *doc = NULL;
    rg_error err = {0};
    rg_status st = rg_json_parse(&doc, s, n, NULL, &err);
    int bad = 0;
    if (st == RG_OK) {
        (*n_ok)++;
        sbuf a = {0}, b = {0};
        dump(&a, rg_json_root(doc));
        rg_json_doc *doc2 = NULL;
        if (rg_json_parse(&doc2, a.p, a.n, NULL, &err) != RG_OK) {
            bad = 1;
            printf("    canonical form '%s' refused: %s\n", a.p, err.msg);
        } else {
            dump(&b, rg_json_root(doc2));
            if (a.n != b.n || memcmp(a.p, b.p, a.n) != 0) bad = 1, printf("    round trip differs: '%s' vs '%s'\n", a.p, b.p);
        }
        rg_json_free(doc2);
        free(a.p);
        free(b.p);
    } else if (st != RG_ERR_FORMAT || strncmp(err.msg, "line ", 5) != 0) {
        bad = 1;
        printf("    status %d message '%s'\n", (int)st, err.msg);
    }
    rg_json_free(doc);
    return bad;
}

static void test_random_robustness(void) {
    static const char alphabet[] = "{}[],:\"\\ \n\t0123456789-+.eEtrufalsn\\u\"abcdDF";
    const char *seeds[] = {"{\"a\":[1,2.5e3,{\"b\":\"x\\u00e9\\uD83D\\uDE00\"}],\"c\":null,\"d\":true}",
                           "[\"\xC3\xA9\xE2\x82\xAC\",-0.1,[[[]]],{}]", "\"\\n\\t\\\"\\\\\\/\""};
    int iters = quick_mode() ? 20000 : 300000, failures = 0, n_ok = 0;
    char buf[96];
    for (int it = 0; it < iters && failures < 5; it++) {
        size_t n;
        uint32_t mode = next_u32() % 3;
        if (mode == 0) {  // random bytes
            n = next_u32() % sizeof buf;
            for (size_t i = 0; i < n; i++) buf[i] = (char)next_u32();
        } else if (mode == 1) {  // random JSON-ish characters
            n = next_u32() % sizeof buf;
            for (size_t i = 0; i < n; i++) buf[i] = alphabet[next_u32() % (sizeof alphabet - 1)];
        } else {  // a valid document with 1-3 byte edits
            const char *s = seeds[next_u32() % 3];
            n = strlen(s);
            memcpy(buf, s, n);
            int edits = 1 + (int)(next_u32() % 3);
            for (int e = 0; e < edits; e++) {
                size_t at = n ? next_u32() % n : 0;
                uint32_t kind = next_u32() % 3;
                char byte = next_u32() % 2 ? alphabet[next_u32() % (sizeof alphabet - 1)] : (char)next_u32();
                if (kind == 0 && n) buf[at] = byte;
                else if (kind == 1 && n) memmove(buf + at, buf + at + 1, n - at - 1), n--;
                else if (n + 1 < sizeof buf) memmove(buf + at + 1, buf + at, n - at), buf[at] = byte, n++;
            }
        }
        // Parse from an exact-size heap copy so ASan sees any read past the end.
        char *copy = malloc(n ? n : 1);
        memcpy(copy, buf, n);
        failures += check_one(copy, n, &n_ok);
        free(copy);
    }
    RG_CHECK(failures == 0, "%d inputs misbehaved", failures);
    RG_CHECK(n_ok > iters / 100, "only %d of %d inputs parsed: the generator is not exercising the accept path", n_ok,
             iters);
    printf("    %d inputs, %d accepted\n", iters, n_ok);
}

static const rg_test_case cases[] = {
    RG_TEST(test_valid_documents),
    RG_TEST(test_invalid_documents),
    RG_TEST(test_limits),
    RG_TEST(test_numbers),
    RG_TEST(test_accessors),
    RG_TEST(test_random_robustness),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
