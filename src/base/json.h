// json.h - a small strict JSON reader (RFC 8259), for training data and configs.
//
// What it accepts is exactly RFC 8259's grammar:
//   - one value (object, array, string, number, true, false, null) with optional whitespace
//     (space, tab, LF, CR) around it; anything after it is an error ("trailing characters");
//   - strings with the escapes \" \\ \/ \b \f \n \r \t \uXXXX; a \uD800-\uDBFF escape must be
//     followed by a \uDC00-\uDFFF escape and the pair becomes one code point; lone surrogates
//     are errors; \u0000 is allowed (strings carry their length and may contain NUL bytes);
//     raw control characters (< 0x20) are errors; raw bytes must be well-formed UTF-8 (no
//     overlong forms, no encoded surrogates, nothing above U+10FFFF). Strings are decoded to UTF-8.
//   - numbers -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?: no leading zeros, no '+', no bare
//     '.', no NaN/Infinity. A number too large for a double reads as +-infinity (the text is
//     kept; rg_json_int64 tells whether it is an exact 64-bit integer).
// Refused although some readers take them: trailing commas, comments, single quotes, a byte
// order mark, duplicate keys in one object (ambiguous: readers disagree on which one wins).
// Limits: nesting depth (default 64) and input size (default 1 GiB, at most 4 GiB - 1).
//
// Errors are RG_ERR_FORMAT with a message "line L, column C: <what was expected>, found <what>";
// L and C are 1-based, C counts characters (UTF-8 code points) from the start of the line. The
// caller prefixes the file name (and, for JSON Lines, the line of the file).
//
// A parsed document owns all its memory (one arena, freed by rg_json_free); values point into
// it and stay valid until then. A document is immutable, so readers may share it across threads.
#ifndef RG_BASE_JSON_H
#define RG_BASE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "retrograd.h"

typedef enum rg_json_type {
    RG_JSON_NULL = 0,
    RG_JSON_BOOL = 1,
    RG_JSON_NUMBER = 2,
    RG_JSON_STRING = 3,
    RG_JSON_ARRAY = 4,
    RG_JSON_OBJECT = 5,
} rg_json_type;

typedef struct rg_json rg_json;          // one value
typedef struct rg_json_doc rg_json_doc;  // a parsed document (owns every value in it)

typedef struct rg_json_limits {
    int max_depth;     // containers nested deeper than this are refused; <= 0: 64
    size_t max_bytes;  // longer input is refused; 0: 1 GiB (never more than 4 GiB - 1)
} rg_json_limits;

// Parses text[0..len) (not NUL-terminated; may contain anything). limits may be NULL.
rg_status rg_json_parse(rg_json_doc **out, const char *text, size_t len, const rg_json_limits *limits,
                        rg_error *err);
void rg_json_free(rg_json_doc *doc);
const rg_json *rg_json_root(const rg_json_doc *doc);

// Every accessor accepts NULL (and a value of another type) and then answers "nothing":
// NULL, 0 or false.
rg_json_type rg_json_type_of(const rg_json *v);  // RG_JSON_NULL for NULL
const char *rg_json_type_name(rg_json_type t);    // "null", "boolean", "number", "string", "array", "object"
bool rg_json_is(const rg_json *v, rg_json_type t);

// Array items, object members or string bytes; 0 for other types.
size_t rg_json_len(const rg_json *v);
const rg_json *rg_json_at(const rg_json *array, size_t i);
// Object members in document order.
const char *rg_json_key_at(const rg_json *object, size_t i, size_t *key_len);
const rg_json *rg_json_value_at(const rg_json *object, size_t i);
// The member with this key (compared byte for byte), or NULL.
const rg_json *rg_json_get(const rg_json *object, const char *key);
const rg_json *rg_json_getn(const rg_json *object, const char *key, size_t key_len);

// String bytes (NUL-terminated; len, when not NULL, gets the length, which counts any NUL
// bytes inside). NULL when v is not a string.
const char *rg_json_str(const rg_json *v, size_t *len);
// The number's value as a double (nearest; +-inf when out of range); 0 when not a number.
double rg_json_num(const rg_json *v);
// The number's text as written in the document (NUL-terminated), or NULL.
const char *rg_json_num_text(const rg_json *v);
// true when v is a number written as an integer (no fraction, no exponent) in int64 range.
bool rg_json_int64(const rg_json *v, int64_t *out);
// The boolean's value; false for anything else.
bool rg_json_bool(const rg_json *v);

#endif
