// json_write.h - writing JSON into a growing buffer (the server's replies, JSON-RPC messages, events).
//
// The writer places the commas itself: call rg_jw_key before each member of an object and write values in
// order. Strings are escaped per RFC 8259; bytes that are not well-formed UTF-8 become U+FFFD, so the output is
// always valid JSON whatever a token's bytes are. Numbers that are NaN or infinite are written as null (JSON has
// no spelling for them). Out of memory is sticky: rg_jw_failed says so, and the text is then incomplete.
#ifndef RG_BASE_JSON_WRITE_H
#define RG_BASE_JSON_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RG_JW_MAX_DEPTH 64

typedef struct rg_jw {
    char *buf;                            // NUL-terminated text so far (malloc'd; take it or rg_jw_free)
    size_t len, cap;
    bool failed;                          // an allocation failed or nesting went past RG_JW_MAX_DEPTH
    int depth;
    bool first[RG_JW_MAX_DEPTH];          // no member or item written yet at this depth
    bool after_key;                       // the next value follows a key (no comma before it)
} rg_jw;

void rg_jw_init(rg_jw *w);
void rg_jw_free(rg_jw *w);
// Forgets the text (keeps the buffer) for the next document.
void rg_jw_reset(rg_jw *w);
// The text; NULL when the writer failed. The writer keeps owning it.
const char *rg_jw_text(const rg_jw *w, size_t *len);
// Hands the buffer to the caller (NULL when the writer failed) and resets the writer to empty.
char *rg_jw_take(rg_jw *w, size_t *len);
bool rg_jw_failed(const rg_jw *w);

void rg_jw_obj(rg_jw *w);      // {
void rg_jw_obj_end(rg_jw *w);  // }
void rg_jw_arr(rg_jw *w);      // [
void rg_jw_arr_end(rg_jw *w);  // ]
void rg_jw_key(rg_jw *w, const char *key);
void rg_jw_str(rg_jw *w, const char *s);                 // NULL writes null
void rg_jw_strn(rg_jw *w, const char *s, size_t n);      // n bytes, which may hold NUL
void rg_jw_i64(rg_jw *w, int64_t v);
void rg_jw_f64(rg_jw *w, double v);                      // shortest text that reads back as v
void rg_jw_bool(rg_jw *w, bool v);
void rg_jw_null(rg_jw *w);
// Already-valid JSON text written as one value (the caller answers for it).
void rg_jw_raw(rg_jw *w, const char *json, size_t n);
// A parsed value (base/json.h) written back: members in document order, strings re-escaped, numbers as written.
struct rg_json;
void rg_jw_value(rg_jw *w, const struct rg_json *v);
// Plain text appended outside the JSON structure (SSE framing: "data: ", "\n\n").
void rg_jw_text_append(rg_jw *w, const char *s, size_t n);

// The length of the well-formed UTF-8 sequence at s (at most n bytes, n >= 1), 0 when it is not one.
size_t rg_utf8_seq_len(const unsigned char *s, size_t n);

// Shorthands for a member: key and value.
void rg_jw_kstr(rg_jw *w, const char *key, const char *s);
void rg_jw_ki64(rg_jw *w, const char *key, int64_t v);
void rg_jw_kf64(rg_jw *w, const char *key, double v);
void rg_jw_kbool(rg_jw *w, const char *key, bool v);

#endif
