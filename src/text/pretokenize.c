// pretokenize.c - regex-free pre-tokenizers for byte-level BPE (spec/architectures.md §5.3).
//
// Each family's regex is an ordered alternation; at every position the first alternative that
// matches wins (not the longest). Every matcher below returns the length, in code points, of
// what its regex would match starting exactly at i within the piece [i, e), or 0. The text is
// first decoded into code points with their Unicode flags; a byte that does not start
// well-formed UTF-8 becomes one code point of its own with no flags (neither letter, number
// nor space), so it falls into [^\s\p{L}\p{N}] and its byte is kept unchanged.
//
// Some families apply several regexes in turn (llama.cpp's `regex_exprs` lists): each one
// splits the pieces of the previous one, and the text between two matches is a piece too.
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"
#include "text/unicode_tables.h"

size_t rg_utf8_decode(const uint8_t *s, size_t n, size_t i, uint32_t *cp) {
    uint8_t c = s[i];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (no overlongs, surrogates, > U+10FFFF)
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (i + len > n) return 0;
    if (s[i + 1] < lo || s[i + 1] > hi) return 0;
    v = (v << 6) | (s[i + 1] & 0x3F);
    for (size_t k = 2; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i + k] & 0x3F);
    }
    *cp = v;
    return len;
}

size_t rg_utf8_first_invalid(const char *text, size_t len) {
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = rg_utf8_decode(s, len, i, &cp);
        if (!k) return i;
        i += k;
    }
    return len;
}

// ---------------------------------------------------------------------------
// Character classes over the decoded piece

typedef struct cps {
    const uint32_t *cp;
    const uint8_t *fl;
} cps;

static inline bool is_l(const cps *c, size_t i) { return c->fl[i] & RG_UC_LETTER; }
static inline bool is_n(const cps *c, size_t i) { return c->fl[i] & RG_UC_NUMBER; }
static inline bool is_ws(const cps *c, size_t i) { return c->fl[i] & RG_UC_WHITESPACE; }
static inline bool is_crlf(const cps *c, size_t i) { return c->cp[i] == '\r' || c->cp[i] == '\n'; }
// [^\s\p{L}\p{N}]
static inline bool is_other(const cps *c, size_t i) {
    return !(c->fl[i] & (RG_UC_LETTER | RG_UC_NUMBER | RG_UC_WHITESPACE));
}

static size_t run_of(const cps *c, size_t i, size_t e, bool (*pred)(const cps *, size_t)) {
    size_t j = i;
    while (j < e && pred(c, j)) j++;
    return j - i;
}

static inline uint32_t ascii_lower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }

// 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII case-insensitive (the Llama 3 / Qwen2 form
// (?i:...), which llama.cpp spells out as '[sS]|'[tT]|...).
static size_t m_contraction(const cps *c, size_t i, size_t e, bool fold) {
    if (c->cp[i] != '\'' || i + 1 >= e) return 0;
    uint32_t a = fold ? ascii_lower(c->cp[i + 1]) : c->cp[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= e) return 0;
    uint32_t b = fold ? ascii_lower(c->cp[i + 2]) : c->cp[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

// \s+(?!\S)|\s+ at a whitespace position: the whole run when it ends the piece or is one
// character long, otherwise all of it but the last character (which then prefixes the next
// word through an optional-leading-character alternative).
static size_t m_space_tail(const cps *c, size_t i, size_t e) {
    size_t run = run_of(c, i, e, is_ws);
    if (i + run == e || run == 1) return run;
    return run - 1;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
static size_t m_gpt2(const cps *c, size_t i, size_t e) {
    size_t n = m_contraction(c, i, e, false);
    if (n) return n;
    size_t j = (c->cp[i] == ' ' && i + 1 < e) ? i + 1 : i;  // the optional leading space
    if (is_l(c, j)) return (j - i) + run_of(c, j, e, is_l);
    if (is_l(c, i)) return run_of(c, i, e, is_l);
    if (is_n(c, j)) return (j - i) + run_of(c, j, e, is_n);
    if (is_n(c, i)) return run_of(c, i, e, is_n);
    if (is_other(c, j)) return (j - i) + run_of(c, j, e, is_other);
    if (is_other(c, i)) return run_of(c, i, e, is_other);
    return m_space_tail(c, i, e);  // only whitespace is left
}

// Llama 3 (max_digits 3) and Qwen2 (max_digits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*
// |\s*[\r\n]+|\s+(?!\S)|\s+
static size_t m_llama3(const cps *c, size_t i, size_t e, size_t max_digits) {
    size_t n = m_contraction(c, i, e, true);
    if (n) return n;
    // [^\r\n\p{L}\p{N}]?\p{L}+ : a letter run, or one non-CR/LF non-letter non-number character
    // (a space, a tab, punctuation, ...) directly in front of one.
    if (is_l(c, i)) return run_of(c, i, e, is_l);
    if (!is_crlf(c, i) && !is_n(c, i) && i + 1 < e && is_l(c, i + 1)) return 1 + run_of(c, i + 1, e, is_l);
    if (is_n(c, i)) {
        size_t run = run_of(c, i, e, is_n);
        return run < max_digits ? run : max_digits;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    size_t j = (c->cp[i] == ' ' && i + 1 < e && is_other(c, i + 1)) ? i + 1 : i;
    if (is_other(c, j)) {
        size_t k = j + run_of(c, j, e, is_other);
        k += run_of(c, k, e, is_crlf);
        return k - i;
    }
    // Whitespace from here on. \s*[\r\n]+ : backtracking makes it end just after the last
    // CR/LF of the whitespace run.
    size_t run = run_of(c, i, e, is_ws);
    for (size_t k = i + run; k > i; k--)
        if (is_crlf(c, k - 1)) return k - i;
    return m_space_tail(c, i, e);
}

static size_t m_qwen2(const cps *c, size_t i, size_t e) { return m_llama3(c, i, e, 1); }
static size_t m_llama3_3(const cps *c, size_t i, size_t e) { return m_llama3(c, i, e, 3); }

// \p{N}: one number character.
static size_t m_one_number(const cps *c, size_t i, size_t e) {
    (void)e;
    return is_n(c, i) ? 1 : 0;
}

// \p{N}+
static size_t m_numbers(const cps *c, size_t i, size_t e) { return run_of(c, i, e, is_n); }

// [0-9][0-9][0-9]
static size_t m_three_digits(const cps *c, size_t i, size_t e) {
    if (i + 3 > e) return 0;
    for (size_t k = i; k < i + 3; k++)
        if (c->cp[k] < '0' || c->cp[k] > '9') return 0;
    return 3;
}

// [\p{P}\$\+<=>\^~\|]+
static bool is_default_punct(const cps *c, size_t i) {
    if (c->fl[i] & RG_UC_PUNCT) return true;
    uint32_t cp = c->cp[i];
    return cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' || cp == '^' || cp == '~' || cp == '|';
}
static size_t m_default_punct(const cps *c, size_t i, size_t e) { return run_of(c, i, e, is_default_punct); }

typedef size_t (*matcher_fn)(const cps *, size_t, size_t);

typedef struct split_ctx {
    const cps *c;
    const uint32_t *off;
    const matcher_fn *stages;
    size_t n_stages;
    rg_piece_fn piece;
    void *ctx;
} split_ctx;

// Applies stage k to the piece [b, e): every match and every gap between matches goes on to
// stage k + 1, or out as a pre-token after the last stage.
static bool split_stage(const split_ctx *sc, size_t k, size_t b, size_t e) {
    if (b >= e) return true;
    if (k == sc->n_stages) return sc->piece(sc->ctx, sc->off[b], sc->off[e]);
    matcher_fn match = sc->stages[k];
    size_t gap = b;
    size_t i = b;
    while (i < e) {
        size_t m = match(sc->c, i, e);
        if (!m) {
            i++;
            continue;
        }
        if (gap < i && !split_stage(sc, k + 1, gap, i)) return false;
        if (!split_stage(sc, k + 1, i, i + m)) return false;
        i += m;
        gap = i;
    }
    return split_stage(sc, k + 1, gap, e);
}

bool rg_pretokenize(rg_pretok_kind kind, const char *text, size_t len, rg_tok_scratch *s, rg_piece_fn piece,
                    void *ctx) {
    if (len == 0) return true;
    if (len + 1 > s->cp_cap) {
        size_t cap = len + 1 > 2 * s->cp_cap ? len + 1 : 2 * s->cp_cap;
        uint32_t *cp = realloc(s->cp, cap * sizeof *cp);
        if (cp) s->cp = cp;
        uint32_t *off = realloc(s->off, cap * sizeof *off);
        if (off) s->off = off;
        uint8_t *fl = realloc(s->fl, cap);
        if (fl) s->fl = fl;
        if (!cp || !off || !fl) return false;
        s->cp_cap = cap;
    }
    const uint8_t *u = (const uint8_t *)text;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = rg_utf8_decode(u, len, i, &cp);
        s->off[n] = (uint32_t)i;
        if (k) {
            s->cp[n] = cp;
            s->fl[n] = rg_unicode_flags(cp);
            i += k;
        } else {
            s->cp[n] = RG_CP_INVALID | u[i];
            s->fl[n] = 0;
            i += 1;
        }
        n++;
    }
    s->off[n] = (uint32_t)len;

    static const matcher_fn gpt2[] = {m_gpt2};
    static const matcher_fn llama3[] = {m_llama3_3};
    static const matcher_fn qwen2[] = {m_qwen2};
    static const matcher_fn smollm[] = {m_one_number, m_gpt2};
    static const matcher_fn dflt[] = {m_default_punct, m_gpt2, m_numbers, m_three_digits};
    split_ctx sc = {.c = &(cps){s->cp, s->fl}, .off = s->off, .piece = piece, .ctx = ctx};
    switch (kind) {
    case RG_PRETOK_GPT2: sc.stages = gpt2; sc.n_stages = 1; break;
    case RG_PRETOK_LLAMA3: sc.stages = llama3; sc.n_stages = 1; break;
    case RG_PRETOK_QWEN2: sc.stages = qwen2; sc.n_stages = 1; break;
    case RG_PRETOK_SMOLLM: sc.stages = smollm; sc.n_stages = 2; break;
    default: sc.stages = dflt; sc.n_stages = 4; break;
    }
    return split_stage(&sc, 0, 0, n);
}
