// byte_unicode.h - GPT-2's byte-to-unicode table, used by byte-level BPE vocabularies.
//
// Byte-level BPE tokenizers (GGUF `tokenizer.ggml.model` = "gpt2") store every token and merge
// as text in which each raw byte has been replaced by one printable code point, so that
// whitespace and control bytes survive as ordinary characters and merges can use a plain space
// as their separator. Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF map to themselves (188 bytes);
// the other 68 bytes, in increasing order, map to U+0100..U+0143. Space becomes U+0120 "Ġ",
// "\n" becomes U+010A "Ċ". See spec/architectures.md §5.4.
#ifndef RG_TEXT_BYTE_UNICODE_H
#define RG_TEXT_BYTE_UNICODE_H

#include <stddef.h>
#include <stdint.h>

// The code point that stands for byte b (always in 0x21..0x143).
uint32_t rg_byte_to_cp(uint8_t b);

// The byte that code point cp stands for, or -1 when cp is not one of the 256 table entries
// (for example U+0020: a raw space never appears in byte-level text).
int rg_cp_to_byte(uint32_t cp);

// Writes the UTF-8 of the mapped code points of in[0..n) into out. Returns the number of bytes
// the full text needs, not counting a terminator (at most 2*n). Behaves like snprintf: when
// cap > needed the whole text and a NUL are written; when 0 < cap <= needed, as many whole
// characters as fit in cap-1 bytes are written, then a NUL; when cap == 0 nothing is written
// and out may be NULL.
size_t rg_bytes_to_bpe_text(const uint8_t *in, size_t n, char *out, size_t cap);

// The inverse: decodes the UTF-8 in text[0..len) and maps every character back to its byte.
// Returns the number of bytes (one per character), writing the first min(that, cap) of them
// to out (no terminator; out may be NULL when cap == 0). Returns -1 when text is not valid
// UTF-8 or holds a character outside the table; out may then hold a partial result.
int64_t rg_bpe_text_to_bytes(const char *text, size_t len, uint8_t *out, size_t cap);

#endif
