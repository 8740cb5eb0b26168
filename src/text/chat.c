// chat.c - chat templates by family, without a Jinja engine (see chat.h; spec §5.5, §6.2).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/json.h"
#include "base/json_write.h"
#include "text/chat.h"
#include "text/chat_tools.h"
#include "text/unicode_tables.h"

static const char supported_families[] =
    "chatml (Qwen2, Qwen2.5, SmolLM2), lfm2 (LFM2), llama3 (Llama 3), llama3.1 (Llama 3.1/3.2/3.3), gemma (Gemma 2, "
    "Gemma 3)";

const char rg_chat_builtin_names[] = "chatml, llama3, llama3.1, lfm2, gemma";

const char *rg_chat_family_name(rg_chat_family f) {
    switch (f) {
    case RG_CHAT_CHATML: return "chatml";
    case RG_CHAT_LFM2: return "lfm2";
    case RG_CHAT_LLAMA3: return "llama3";
    case RG_CHAT_LLAMA31: return "llama3.1";
    case RG_CHAT_GEMMA: return "gemma";
    }
    return "unknown";
}

// ---------------------------------------------------------------------------
// Reading the template text

static const char *find(const char *t, size_t len, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0 || n > len) return NULL;
    for (size_t i = 0; i + n <= len; i++)
        if (t[i] == needle[0] && memcmp(t + i, needle, n) == 0) return t + i;
    return NULL;
}

static bool has(const char *t, size_t len, const char *needle) { return find(t, len, needle) != NULL; }

// Decodes the Jinja string literal whose opening quote is at q (' or "), with the usual
// backslash escapes. Returns a malloc'd NUL-terminated string, or NULL (unterminated, no memory).
static char *literal_at(const char *t, size_t len, const char *q) {
    char quote = *q;
    const char *end = t + len;
    char *out = malloc((size_t)(end - q) + 1);
    if (!out) return NULL;
    size_t n = 0;
    for (const char *p = q + 1; p < end; p++) {
        if (*p == quote) {
            out[n] = '\0';
            return out;
        }
        if (*p == '\\' && p + 1 < end) {
            p++;
            switch (*p) {
            case 'n': out[n++] = '\n'; break;
            case 't': out[n++] = '\t'; break;
            case 'r': out[n++] = '\r'; break;
            default: out[n++] = *p; break;  // \\ \' \" and anything else: the character itself
            }
        } else {
            out[n++] = *p;
        }
    }
    free(out);
    return NULL;
}

// The first string literal of the template whose text starts with prefix (decoded), or NULL.
static char *literal_starting(const char *t, size_t len, const char *prefix) {
    for (const char *p = t; (p = find(p, len - (size_t)(p - t), prefix)) != NULL; p++) {
        if (p > t && (p[-1] == '\'' || p[-1] == '"')) {
            char *lit = literal_at(t, len, p - 1);
            if (lit) return lit;
        }
    }
    return NULL;
}

// ChatML default system prompt: a literal "<|im_start|>system\n{text}<|im_end|>..." with
// non-empty text (Qwen2, Qwen2.5, SmolLM2 write exactly this in their no-system branch).
static rg_status find_default_system(const char *t, size_t len, char **out) {
    static const char head[] = "<|im_start|>system";
    *out = NULL;
    for (const char *p = t; (p = find(p, len - (size_t)(p - t), head)) != NULL; p++) {
        if (p == t || (p[-1] != '\'' && p[-1] != '"')) continue;
        char *lit = literal_at(t, len, p - 1);
        if (!lit) continue;
        char *body = lit + strlen(head);
        char *end = strstr(body, "<|im_end|>");
        if (*body == '\n' && end && end > body + 1) {
            size_t n = (size_t)(end - body - 1);
            memmove(lit, body + 1, n);
            lit[n] = '\0';
            *out = lit;
            return RG_OK;
        }
        free(lit);
    }
    return RG_OK;
}

void rg_chat_template_free(rg_chat_template *t) {
    if (!t) return;
    free(t->default_system);
    free(t->bos_text);
    free(t->knowledge_line);
    free(t->default_date);
    memset(t, 0, sizeof *t);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

// The start of the template for messages: its first 60 characters, on one line.
static void template_head(const char *t, size_t len, char *buf, size_t cap) {
    size_t o = 0, chars = 0;
    bool cut = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)t[i];
        if ((c & 0xC0) != 0x80) {  // a new character starts
            if (chars == 60) {
                cut = true;
                break;
            }
            chars++;
        }
        if (o + 8 >= cap) break;
        if (c == '\n') o += (size_t)snprintf(buf + o, cap - o, "\\n");
        else if (c == '\t') o += (size_t)snprintf(buf + o, cap - o, "\\t");
        else if (c < 0x20) o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
        else buf[o++] = (char)c;
    }
    buf[o] = '\0';
    if (cut) snprintf(buf + o, cap - o, "...");
}

static rg_status unsupported(const char *t, size_t len, const char *why, rg_error *err) {
    char head[512];
    template_head(t, len, head, sizeof head);
    return rg_fail(err, RG_ERR_UNSUPPORTED, "%s chat template '%s': supported families are %s", why, head,
                   supported_families);
}

rg_status rg_chat_template_parse(rg_chat_template *out, const char *t, size_t len, const char *bos_text,
                                 rg_error *err) {
    memset(out, 0, sizeof *out);
    rg_status st = RG_OK;
    if (has(t, len, "<|start_header_id|>") && has(t, len, "<|end_header_id|>")) {
        out->trim_content = has(t, len, "| trim") || has(t, len, "|trim");
        if (has(t, len, "bos_token")) out->bos_text = dup_str(bos_text ? bos_text : "<|begin_of_text|>");
        else out->bos_text = dup_str("");
        if (has(t, len, "Cutting Knowledge Date")) {
            out->family = RG_CHAT_LLAMA31;
            out->knowledge_line = literal_starting(t, len, "Cutting Knowledge Date");
            if (!out->knowledge_line) out->knowledge_line = dup_str("Cutting Knowledge Date: December 2023\n");
            // The quote after "date_string = " is read only when the template goes on after it.
            const char *d = find(t, len, "date_string = ");
            if (d && d + 14 < t + len && (d[14] == '"' || d[14] == '\''))
                out->default_date = literal_at(t, len, d + 14);
            if (!out->default_date) out->default_date = dup_str("26 Jul 2024");
            out->date_from_clock = has(t, len, "strftime_now");
            if (!out->knowledge_line || !out->default_date) st = RG_ERR_NOMEM;
        } else {
            out->family = RG_CHAT_LLAMA3;
        }
        if (!out->bos_text) st = RG_ERR_NOMEM;
    } else if (has(t, len, "<start_of_turn>") && has(t, len, "<end_of_turn>")) {
        out->family = RG_CHAT_GEMMA;
        out->trim_content = has(t, len, "| trim") || has(t, len, "|trim");
        out->gemma_system_prefix = has(t, len, "first_user_prefix");  // Gemma 3; Gemma 2 raises on a system role
        out->bos_text = dup_str(has(t, len, "bos_token") ? (bos_text ? bos_text : "<bos>") : "");
        if (!out->bos_text) st = RG_ERR_NOMEM;
    } else if (has(t, len, "<|im_start|>")) {
        if (has(t, len, "<think>") || has(t, len, "reasoning_content"))
            return unsupported(t, len, "thinking (<think>) templates are not supported yet:", err);
        if (has(t, len, "bos_token") && (has(t, len, "ns.system_prompt") || has(t, len, "<|tool_response_start|>"))) {
            out->family = RG_CHAT_LFM2;
            out->bos_text = dup_str(bos_text ? bos_text : "<|startoftext|>");
            out->lfm2_tool_wrap = has(t, len, "<|tool_response_start|>");
            if (!out->bos_text) st = RG_ERR_NOMEM;
        } else {
            out->family = RG_CHAT_CHATML;
            st = find_default_system(t, len, &out->default_system);
            out->qwen_tool_turns = has(t, len, "<tool_response>");
            if (!st && has(t, len, "bos_token") && !(out->bos_text = dup_str(bos_text ? bos_text : ""))) st = RG_ERR_NOMEM;
        }
    } else {
        return unsupported(t, len, "unrecognized", err);
    }
    if (st) {
        rg_chat_template_free(out);
        return rg_fail(err, RG_ERR_NOMEM, "chat template: out of memory");
    }
    return RG_OK;
}

rg_status rg_chat_template_from_tokenizer(rg_chat_template *out, const rg_tokenizer *tok, rg_error *err) {
    const rg_tokenizer_info *in = rg_tokenizer_get_info(tok);
    memset(out, 0, sizeof *out);
    if (!in->chat_template) return rg_fail(err, RG_ERR_NOT_FOUND, "the model has no tokenizer.chat_template");
    const char *bos = in->bos >= 0 ? rg_token_text(tok, in->bos, NULL) : NULL;
    return rg_chat_template_parse(out, in->chat_template, in->chat_template_len, bos, err);
}

rg_status rg_chat_template_builtin(rg_chat_template *out, const char *name, const char *bos_text, rg_error *err) {
    memset(out, 0, sizeof *out);
    bool ok = true;
    if (!strcmp(name, "chatml")) {
        out->family = RG_CHAT_CHATML;
    } else if (!strcmp(name, "lfm2")) {
        out->family = RG_CHAT_LFM2;
        out->lfm2_tool_wrap = true;
        ok = (out->bos_text = dup_str(bos_text ? bos_text : "<|startoftext|>")) != NULL;
    } else if (!strcmp(name, "llama3") || !strcmp(name, "llama3.1")) {
        out->family = name[6] ? RG_CHAT_LLAMA31 : RG_CHAT_LLAMA3;
        out->trim_content = true;
        ok = (out->bos_text = dup_str(bos_text ? bos_text : "<|begin_of_text|>")) != NULL;
        if (ok && out->family == RG_CHAT_LLAMA31)
            ok = (out->knowledge_line = dup_str("Cutting Knowledge Date: December 2023\n")) &&
                 (out->default_date = dup_str("26 Jul 2024"));
    } else if (!strcmp(name, "gemma")) {
        out->family = RG_CHAT_GEMMA;
        out->trim_content = out->gemma_system_prefix = true;
        ok = (out->bos_text = dup_str(bos_text ? bos_text : "<bos>")) != NULL;
    } else {
        return rg_fail(err, RG_ERR_ARG, "unknown chat template name '%s': the built-in ones are %s", name,
                       rg_chat_builtin_names);
    }
    if (!ok) {
        rg_chat_template_free(out);
        return rg_fail(err, RG_ERR_NOMEM, "chat template: out of memory");
    }
    return RG_OK;
}

// ---------------------------------------------------------------------------
// Rendering

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool ok;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (!b->ok) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->ok = false;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static bool role_is(const rg_chat_message *m, const char *r) {
    return m->role_len == strlen(r) && memcmp(m->role, r, m->role_len) == 0;
}

// Python's str.strip() (Jinja's trim): Unicode White_Space and U+001C..U+001F at both ends.
static bool strip_char(uint32_t cp) { return (rg_unicode_flags(cp) & RG_UC_WHITESPACE) || (cp >= 0x1C && cp <= 0x1F); }

static size_t utf8_at(const unsigned char *s, size_t n, size_t i, uint32_t *cp) {
    unsigned char c = s[i];
    size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (k == 0 || i + k > n) return 0;
    uint32_t v = k == 1 ? c : (uint32_t)(c & (0x7F >> k));
    for (size_t j = 1; j < k; j++) {
        if ((s[i + j] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i + j] & 0x3F);
    }
    *cp = v;
    return k;
}

static void trim(const char *s, size_t n, size_t *b, size_t *e) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, j = n;
    uint32_t cp;
    size_t k;
    while (i < j && (k = utf8_at(u, n, i, &cp)) && strip_char(cp)) i += k;
    while (j > i) {
        size_t start = j - 1;  // find the start of the last character
        while (start > i && (u[start] & 0xC0) == 0x80 && j - start < 4) start--;
        if (!(k = utf8_at(u, n, start, &cp)) || start + k != j || !strip_char(cp)) break;
        j = start;
    }
    *b = i;
    *e = j;
}

typedef struct renderer {
    sbuf b;
    rg_chat_span *spans;
    size_t n_spans;
    const rg_json *tools;  // NULL when the conversation has none (or an empty array)
    bool uses_tools;       // tools given or any message with calls
    rg_jw piece;           // scratch for the tool pieces (chat_tools.h)
} renderer;

static rg_chat_span *new_span(renderer *r, int32_t message) {
    rg_chat_span *s = &r->spans[r->n_spans++];
    memset(s, 0, sizeof *s);
    s->message = message;
    s->rendered = true;
    s->begin = s->end = s->role_begin = s->role_end = s->content_begin = s->content_end = s->marker_end = r->b.n;
    return s;
}

static void put_role(renderer *r, rg_chat_span *s, const char *role, size_t n) {
    s->role_begin = r->b.n;
    put(&r->b, role, n);
    s->role_end = r->b.n;
}

static void put_content(renderer *r, rg_chat_span *s, const char *c, size_t n) {
    s->content_begin = r->b.n;
    put(&r->b, c, n);
    s->content_end = r->b.n;
}

// <|im_end|>, then the line end: the close of every ChatML turn.
static void end_turn(renderer *r, rg_chat_span *s) {
    puts_(&r->b, "<|im_end|>");
    s->marker_end = r->b.n;
    puts_(&r->b, "\n");
    s->end = r->b.n;
}

// <|im_start|>{role}\n{content}<|im_end|>\n
static void chatml_block(renderer *r, int32_t index, const char *role, size_t role_len, const char *content,
                         size_t content_len, const char *wrap_open, const char *wrap_close) {
    rg_chat_span *s = new_span(r, index);
    puts_(&r->b, "<|im_start|>");
    put_role(r, s, role, role_len);
    puts_(&r->b, "\n");
    if (wrap_open) puts_(&r->b, wrap_open);
    put_content(r, s, content, content_len);
    if (wrap_close) puts_(&r->b, wrap_close);
    end_turn(r, s);
}

// The text of r->piece appended to the output, and the piece emptied.
static void put_piece(renderer *r) {
    size_t n;
    const char *p = rg_jw_text(&r->piece, &n);
    if (!p) r->b.ok = false;
    else put(&r->b, p, n);
    rg_jw_reset(&r->piece);
}

// A system turn ending with the tool list: <|im_start|>system\n[{system}{sep}]{tools}<|im_end|>\n
// (Hermes: sep "\n\n" and {system} message 0's content or the default prompt; LFM2: sep "\n"
// after a non-empty system). Without system text (NULL) the turn is an inserted message whose
// content is the tool list.
static void tool_system(renderer *r, int32_t index, const char *system, size_t system_len, const char *sep,
                        rg_chat_family f) {
    rg_chat_span *s = new_span(r, index);
    puts_(&r->b, "<|im_start|>");
    put_role(r, s, "system", 6);
    puts_(&r->b, "\n");
    s->content_begin = r->b.n;
    if (system) {
        put(&r->b, system, system_len);
        s->content_end = r->b.n;
        puts_(&r->b, sep);
    }
    if (f == RG_CHAT_LFM2) rg_chat_lfm2_tools(&r->piece, r->tools);
    else rg_chat_hermes_tools(&r->piece, r->tools);
    put_piece(r);
    if (!system) s->content_end = r->b.n;
    end_turn(r, s);
}

// An assistant turn with calls. Hermes (Qwen2.5's): <|im_start|>assistant[\n{content}]{calls}<|im_end|>\n;
// LFM2: <|im_start|>assistant\n<|tool_call_start|>[...]<|tool_call_end|>{content}<|im_end|>\n.
static rg_status calls_turn(renderer *r, const rg_chat_message *m, size_t index, rg_chat_family f, rg_error *err) {
    rg_status st = f == RG_CHAT_LFM2 ? rg_chat_lfm2_calls(&r->piece, m->tool_calls, index, err)
                                     : rg_chat_hermes_calls(&r->piece, m->tool_calls, index, err);
    if (st) return st;
    rg_chat_span *s = new_span(r, (int32_t)index);
    puts_(&r->b, "<|im_start|>");
    put_role(r, s, m->role, m->role_len);
    if (f == RG_CHAT_LFM2 || m->content_len) puts_(&r->b, "\n");
    if (f == RG_CHAT_LFM2) put_piece(r);
    put_content(r, s, m->content, m->content_len);
    if (f != RG_CHAT_LFM2) put_piece(r);
    end_turn(r, s);
    return RG_OK;
}

static bool has_calls(const rg_chat_message *m) { return m->tool_calls && rg_json_len(m->tool_calls) > 0; }

// Qwen2.5: consecutive tool results share one user turn.
static void tool_response_turn(renderer *r, const rg_chat_message *m, size_t n, size_t i) {
    bool first = i == 0 || !role_is(&m[i - 1], "tool");
    bool last = i + 1 == n || !role_is(&m[i + 1], "tool");
    rg_chat_span *s = new_span(r, (int32_t)i);
    if (first) {
        puts_(&r->b, "<|im_start|>");
        put_role(r, s, "user", 4);
    } else {
        s->role_begin = s->role_end = r->b.n;
    }
    puts_(&r->b, "\n<tool_response>\n");
    put_content(r, s, m[i].content, m[i].content_len);
    puts_(&r->b, "\n</tool_response>");
    if (last) puts_(&r->b, "<|im_end|>");
    s->marker_end = r->b.n;
    if (last) puts_(&r->b, "\n");
    s->end = r->b.n;
}

static rg_status render_chatml(const rg_chat_template *t, const rg_chat_message *m, size_t n, renderer *r,
                               rg_error *err) {
    if (t->bos_text) puts_(&r->b, t->bos_text);
    size_t first = 0;
    bool lead_system = n > 0 && role_is(&m[0], "system");
    if (r->tools) {
        const char *sys = lead_system ? m[0].content : t->default_system;
        size_t sys_len = lead_system ? m[0].content_len : sys ? strlen(sys) : 0;
        if (lead_system && !sys) sys = "";  // an empty system message still gets its "\n\n"
        tool_system(r, lead_system ? 0 : -1, sys, sys_len, "\n\n", RG_CHAT_CHATML);
        first = lead_system ? 1 : 0;
    } else if (t->default_system && n > 0 && !lead_system) {
        chatml_block(r, -1, "system", 6, t->default_system, strlen(t->default_system), NULL, NULL);
    }
    bool tool_turns = t->qwen_tool_turns || r->uses_tools;
    for (size_t i = first; i < n; i++) {
        if (tool_turns && role_is(&m[i], "tool")) {
            tool_response_turn(r, m, n, i);
        } else if (role_is(&m[i], "assistant") && has_calls(&m[i])) {
            rg_status st = calls_turn(r, &m[i], i, RG_CHAT_CHATML, err);
            if (st) return st;
        } else {
            chatml_block(r, (int32_t)i, m[i].role, m[i].role_len, m[i].content, m[i].content_len, NULL, NULL);
        }
    }
    return RG_OK;
}

static rg_status render_lfm2(const rg_chat_template *t, const rg_chat_message *m, size_t n, renderer *r,
                             rg_error *err) {
    puts_(&r->b, t->bos_text);
    size_t first = n > 0 && role_is(&m[0], "system") ? 1 : 0;
    if (r->tools) {
        const char *sys = first ? (m[0].content ? m[0].content : "") : NULL;
        size_t sys_len = first ? m[0].content_len : 0;
        tool_system(r, first ? 0 : -1, sys, sys_len, sys_len ? "\n" : "", RG_CHAT_LFM2);
    } else if (first && m[0].content_len > 0) {
        chatml_block(r, 0, "system", 6, m[0].content, m[0].content_len, NULL, NULL);
    } else if (first) {
        rg_chat_span *s = new_span(r, 0);  // an empty system prompt is left out
        s->rendered = false;
    }
    for (size_t i = first; i < n; i++) {
        bool wrap = t->lfm2_tool_wrap && role_is(&m[i], "tool");
        if (role_is(&m[i], "assistant") && has_calls(&m[i])) {
            rg_status st = calls_turn(r, &m[i], i, RG_CHAT_LFM2, err);
            if (st) return st;
            continue;
        }
        chatml_block(r, (int32_t)i, m[i].role, m[i].role_len, m[i].content, m[i].content_len,
                     wrap ? "<|tool_response_start|>" : NULL, wrap ? "<|tool_response_end|>" : NULL);
    }
    return RG_OK;
}

// <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
static void llama3_block(const rg_chat_template *t, renderer *r, int32_t index, const char *role, size_t role_len,
                         const char *content, size_t content_len, const char *prefix) {
    rg_chat_span *s = new_span(r, index);
    puts_(&r->b, "<|start_header_id|>");
    put_role(r, s, role, role_len);
    puts_(&r->b, "<|end_header_id|>\n\n");
    if (prefix) puts_(&r->b, prefix);
    size_t cb = 0, ce = content_len;
    if (t->trim_content) trim(content, content_len, &cb, &ce);
    put_content(r, s, content + cb, ce - cb);
    puts_(&r->b, "<|eot_id|>");
    s->marker_end = s->end = r->b.n;
}

static rg_status render_llama3(const rg_chat_template *t, const rg_chat_message *m, size_t n,
                               const rg_chat_options *opt, renderer *r, rg_error *err) {
    size_t first = 0;
    if (t->family == RG_CHAT_LLAMA31) {
        puts_(&r->b, t->bos_text);
        char today[64];
        const char *date = opt->date_string;
        if (!date && t->date_from_clock) {
            time_t now = time(NULL);
            struct tm tm;
            if (localtime_r(&now, &tm) && strftime(today, sizeof today, "%d %b %Y", &tm)) date = today;
        }
        if (!date) date = t->default_date;
        sbuf pre = {.ok = true};
        puts_(&pre, t->knowledge_line);
        puts_(&pre, "Today Date: ");
        puts_(&pre, date);
        puts_(&pre, "\n\n");
        if (!pre.ok) return rg_fail(err, RG_ERR_NOMEM, "chat: out of memory");
        if (n > 0 && role_is(&m[0], "system")) {
            first = 1;
            llama3_block(t, r, 0, "system", 6, m[0].content, m[0].content_len, pre.p);
        } else {
            llama3_block(t, r, -1, "system", 6, "", 0, pre.p);
        }
        free(pre.p);
    }
    for (size_t i = first; i < n; i++) {
        if (t->family == RG_CHAT_LLAMA31 && (role_is(&m[i], "tool") || role_is(&m[i], "ipython")))
            return rg_fail(err, RG_ERR_UNSUPPORTED, "chat: message %zu: role '%.*s' is not supported with llama3.1 templates",
                           i, (int)m[i].role_len, m[i].role);
        const char *bos = t->family == RG_CHAT_LLAMA3 && i == 0 ? t->bos_text : NULL;
        if (bos) puts_(&r->b, bos);
        llama3_block(t, r, (int32_t)i, m[i].role, m[i].role_len, m[i].content, m[i].content_len, NULL);
    }
    return RG_OK;
}

// Gemma: {bos}, then <start_of_turn>{user|model}\n{content|trim}<end_of_turn>\n per message, the
// roles alternating user, model, user, ... (the template raises otherwise). Gemma 3 writes a leading
// system message's content and "\n\n" at the start of the first user turn (its first_user_prefix,
// untrimmed): that span has the header and the role "user", its content, and "\n\n" as its marker;
// the user message's span then has no header or role, its content, <end_of_turn> and the line end.
static rg_status render_gemma(const rg_chat_template *t, const rg_chat_message *m, size_t n, renderer *r,
                              rg_error *err) {
    puts_(&r->b, t->bos_text);
    size_t first = 0;
    bool prefix = false;
    if (n > 0 && role_is(&m[0], "system")) {
        if (!t->gemma_system_prefix)
            return rg_fail(err, RG_ERR_UNSUPPORTED, "chat: message 0: this gemma template has no system role");
        if (n < 2 || !role_is(&m[1], "user"))
            return rg_fail(err, RG_ERR_UNSUPPORTED, "chat: message 1: a gemma system message must be followed by a "
                                                    "user message");
        rg_chat_span *s = new_span(r, 0);
        puts_(&r->b, "<start_of_turn>");
        put_role(r, s, "user", 4);
        puts_(&r->b, "\n");
        put_content(r, s, m[0].content, m[0].content_len);
        puts_(&r->b, "\n\n");
        s->marker_end = s->end = r->b.n;
        first = 1;
        prefix = true;
    }
    for (size_t i = first; i < n; i++) {
        bool user_turn = (i - first) % 2 == 0;
        if (!role_is(&m[i], user_turn ? "user" : "assistant"))
            return rg_fail(err, RG_ERR_UNSUPPORTED, "chat: message %zu: role '%.*s' where a gemma template needs '%s' "
                                                    "(user and assistant alternate, user first)",
                           i, (int)m[i].role_len, m[i].role, user_turn ? "user" : "assistant");
        rg_chat_span *s = new_span(r, (int32_t)i);
        if (i == first && prefix) {
            s->role_begin = s->role_end = r->b.n;  // the system span wrote the header
        } else {
            puts_(&r->b, "<start_of_turn>");
            put_role(r, s, user_turn ? "user" : "model", user_turn ? 4 : 5);
            puts_(&r->b, "\n");
        }
        size_t cb = 0, ce = m[i].content_len;
        if (t->trim_content) trim(m[i].content, m[i].content_len, &cb, &ce);
        put_content(r, s, m[i].content + cb, ce - cb);
        puts_(&r->b, "<end_of_turn>");
        s->marker_end = r->b.n;
        puts_(&r->b, "\n");
        s->end = r->b.n;
    }
    return RG_OK;
}

// Whether the conversation uses tools, checked against what the family can write.
static rg_status tool_state(const rg_chat_template *t, const rg_chat_message *m, size_t n, const rg_chat_options *opt,
                            renderer *r, rg_error *err) {
    size_t n_tools, n_calls = 0;
    rg_status st = rg_chat_tools_count(opt->tools, &n_tools, err);
    for (size_t i = 0; !st && i < n; i++) {
        size_t k = 0;
        st = rg_chat_calls_count(m[i].tool_calls, i, &k, err);
        if (!st && k && !role_is(&m[i], "assistant"))
            st = rg_fail(err, RG_ERR_ARG, "chat: message %zu: tool_calls on a '%.*s' message (only assistant "
                         "messages carry calls)", i, (int)m[i].role_len, m[i].role);
        n_calls += k;
    }
    if (st) return st;
    r->tools = n_tools ? opt->tools : NULL;
    r->uses_tools = n_tools || n_calls;
    if (r->uses_tools && t->family != RG_CHAT_CHATML && t->family != RG_CHAT_LFM2)
        return rg_fail(err, RG_ERR_UNSUPPORTED, "chat: tools and tool calls are not supported with %s templates "
                       "(only chatml and lfm2)", rg_chat_family_name(t->family));
    return RG_OK;
}

void rg_chat_rendered_free(rg_chat_rendered *r) {
    if (!r) return;
    free(r->text);
    free(r->spans);
    memset(r, 0, sizeof *r);
}

rg_status rg_chat_render(const rg_chat_template *t, const rg_chat_message *msgs, size_t n_msgs,
                         const rg_chat_options *opt, rg_chat_rendered *out, rg_error *err) {
    static const rg_chat_options no_options = {0};
    if (!opt) opt = &no_options;
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < n_msgs; i++)
        if ((!msgs[i].role && msgs[i].role_len) || (!msgs[i].content && msgs[i].content_len))
            return rg_fail(err, RG_ERR_ARG, "chat: message %zu has a NULL role or content", i);
    renderer r = {.b = {.ok = true}};
    rg_status st = tool_state(t, msgs, n_msgs, opt, &r, err);
    if (st) return st;
    r.spans = calloc(n_msgs + 1, sizeof *r.spans);
    if (!r.spans) return rg_fail(err, RG_ERR_NOMEM, "chat: out of memory");
    rg_jw_init(&r.piece);
    const char *gen = "<|im_start|>assistant\n";
    switch (t->family) {
    case RG_CHAT_CHATML: st = render_chatml(t, msgs, n_msgs, &r, err); break;
    case RG_CHAT_LFM2: st = render_lfm2(t, msgs, n_msgs, &r, err); break;
    case RG_CHAT_LLAMA3:
    case RG_CHAT_LLAMA31:
        st = render_llama3(t, msgs, n_msgs, opt, &r, err);
        gen = "<|start_header_id|>assistant<|end_header_id|>\n\n";
        break;
    case RG_CHAT_GEMMA:
        st = render_gemma(t, msgs, n_msgs, &r, err);
        gen = "<start_of_turn>model\n";
        break;
    default: st = rg_fail(err, RG_ERR_ARG, "chat: template not parsed");
    }
    size_t prompt_begin = r.b.n;
    if (!st && opt->add_generation_prompt) puts_(&r.b, gen);
    put(&r.b, "", 0);  // a terminated (possibly empty) text
    rg_jw_free(&r.piece);
    if (!st && !r.b.ok) st = rg_fail(err, RG_ERR_NOMEM, "chat: out of memory");
    if (st) {
        free(r.b.p);
        free(r.spans);
        return st;
    }
    out->text = r.b.p;
    out->len = r.b.n;
    out->spans = r.spans;
    out->n_spans = r.n_spans;
    out->prompt_begin = opt->add_generation_prompt ? prompt_begin : out->len;
    return RG_OK;
}
