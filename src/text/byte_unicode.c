// byte_unicode.c - GPT-2's byte-to-unicode table and its inverse (see byte_unicode.h).
#include "text/byte_unicode.h"

// The 188 bytes that are printable in Latin-1 and not a space keep their own code point.
static int is_identity_byte(uint32_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// The 68 other bytes are numbered in increasing byte order from U+0100: 0x00-0x20 take
// U+0100..U+0120, 0x7F-0xA0 take U+0121..U+0142 and 0xAD takes U+0143. Computing this instead
// of storing a table keeps the two directions obviously consistent.
uint32_t rg_byte_to_cp(uint8_t b) {
    if (is_identity_byte(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b <= 0xA0) return 0x121u + (uint32_t)(b - 0x7F);
    return 0x143u;  // 0xAD, the soft hyphen, is the only one left
}

int rg_cp_to_byte(uint32_t cp) {
    if (cp <= 0xFF) return is_identity_byte(cp) ? (int)cp : -1;
    if (cp <= 0x120) return (int)(cp - 0x100u);
    if (cp <= 0x142) return (int)(0x7Fu + (cp - 0x121u));
    if (cp == 0x143) return 0xAD;
    return -1;
}

// Every table code point is below U+0800, so one or two UTF-8 bytes suffice.
static size_t cp_utf8(uint32_t cp, char buf[2]) {
    if (cp < 0x80) {
        buf[0] = (char)cp;
        return 1;
    }
    buf[0] = (char)(0xC0 | (cp >> 6));
    buf[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

size_t rg_bytes_to_bpe_text(const uint8_t *in, size_t n, char *out, size_t cap) {
    size_t need = 0;
    size_t written = 0;
    int full = 0;  // set once a character did not fit: later, shorter ones must not follow it
    for (size_t i = 0; i < n; i++) {
        char buf[2];
        size_t k = cp_utf8(rg_byte_to_cp(in[i]), buf);
        if (!full && cap > 0 && written + k <= cap - 1) {
            for (size_t j = 0; j < k; j++) out[written + j] = buf[j];
            written += k;
        } else {
            full = 1;
        }
        need += k;
    }
    if (cap > 0) out[written] = '\0';
    return need;
}

int64_t rg_bpe_text_to_bytes(const char *text, size_t len, uint8_t *out, size_t cap) {
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0;
    int64_t n = 0;
    while (i < len) {
        uint32_t cp;
        uint8_t c = s[i];
        if (c < 0x80) {
            cp = c;
            i += 1;
        } else if (c >= 0xC2 && c <= 0xDF) {
            // C0/C1 would be overlong; longer sequences encode code points above U+07FF, which
            // are outside the table whether or not they are well formed.
            if (i + 1 >= len || (s[i + 1] & 0xC0) != 0x80) return -1;
            cp = ((uint32_t)(c & 0x1F) << 6) | (uint32_t)(s[i + 1] & 0x3F);
            i += 2;
        } else {
            return -1;
        }
        int b = rg_cp_to_byte(cp);
        if (b < 0) return -1;
        if ((size_t)n < cap) out[n] = (uint8_t)b;
        n++;
    }
    return n;
}
