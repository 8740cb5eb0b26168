// pyjson.h - JSON values written the way the Python side of a chat template writes them.
//
// Hugging Face templates serialize tool definitions and call arguments with Jinja's `tojson`,
// which transformers replaces by json.dumps(x, ensure_ascii=False): ", " and ": " separators,
// members in document order, non-ASCII characters as they are, \" \\ \n \r \t \b \f escaped and
// the other control characters as \u00xx (lower-case hex); integers as written, other numbers as
// Python's repr of the float (1.5, 1e+16, 1e-05, Infinity). The same value as a Python literal
// (True, False, None instead of true, false, null; strings as JSON strings, which Python reads
// alike) is how LFM2 writes call arguments: get_weather(city="Paris", days=3).
#ifndef RG_TEXT_PYJSON_H
#define RG_TEXT_PYJSON_H

#include <stdbool.h>

#include "base/json.h"
#include "base/json_write.h"

// Appends json.dumps(v, ensure_ascii=False) to w (as plain text: w's comma bookkeeping is not used).
void rg_pyjson_dumps(rg_jw *w, const rg_json *v);
// Appends v as a Python literal (see above).
void rg_pyjson_literal(rg_jw *w, const rg_json *v);
// Whether s[0..n) can stand as a function or keyword name in a Python-style call: letters, '_',
// bytes of non-ASCII characters (Python 3 identifiers), and after the first also digits, '.' and
// '-' (tool names use them).
bool rg_pyjson_is_name(const char *s, size_t n);
// One byte of such a name (first: the name's first byte).
bool rg_pyjson_name_byte(unsigned char c, bool first);
// Appends an object's members as keyword arguments: key=literal, key=literal (the keys as they are).
void rg_pyjson_kwargs(rg_jw *w, const rg_json *object);
// Appends s as json.dumps writes a str (quotes included).
void rg_pyjson_string(rg_jw *w, const char *s, size_t n);

// Reads one Python literal at text[*pos] (white space first is skipped) and writes it to w as
// JSON (rg_jw values: w's commas apply); *pos ends just after it. False when there is none, with
// why saying what was expected at which byte (a partial value may then be in w).
bool rg_pyjson_read_literal(rg_jw *w, const char *text, size_t len, size_t *pos, char *why, size_t why_cap);

#endif
