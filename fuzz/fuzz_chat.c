// fuzz_chat.c - libFuzzer target for the chat templates (src/text/chat.c): arbitrary template
// text through the recognizer, and arbitrary conversations through the renderer of every
// family and variant it knows (the templates of fuzz/templates/ and Qwen2's own, read from
// tests/data/tokenizer/ggml-vocab-qwen2.gguf).
//
// Input: one control byte, then
//   bit 0 = 0  recognize: the rest is template text (bit 1: pass "<s>" as the BOS text, else
//              NULL); a recognized template then renders a few fixed conversations;
//   bit 0 = 1  render: bits 1-4 pick the template (modulo their number), bit 5 adds the
//              generation prompt, bit 6 takes the date string from the first field (else
//              the template's own date, or the clock where it asks for it); the rest is
//              messages separated by 0x1E, each one role byte (system, user, assistant,
//              tool, ipython, an empty role; 0xF0 and above: the role is the text up to the
//              first 0x1F) and then its content.
//
// What chat.h promises and this checks:
//   - recognition either fails with RG_ERR_UNSUPPORTED, an error that quotes the template,
//     and a zeroed template, or gives a family with the fields that family uses (and none it
//     does not); it reads only the len bytes it is given; it is deterministic;
//   - rendering fails only for 'tool'/'ipython' messages with a Llama 3.1 template and for a
//     gemma conversation that does not alternate user and assistant (user first, after a
//     leading system message where Gemma 3 takes one), and then leaves the output empty;
//     otherwise the spans are one per message (after one inserted message where the family
//     inserts one), in order, each laid out as
//     header role separator content marker line-end with the family's fixed pieces between,
//     and together with the BOS text in front and the generation prompt at the end they
//     tile the text; roles and contents are the messages' own (Llama 3 and gemma contents
//     trimmed; gemma writes 'assistant' as 'model').
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "text/chat.h"

static const char *const template_files[] = {
    "chatml.jinja", "chatml-bos.jinja", "qwen2.5.jinja", "smollm2.jinja", "lfm2.jinja",
    "llama3.jinja", "llama3.1.jinja",   "llama3.2.jinja", "gemma3.jinja", "gemma2.jinja",
};
#define N_FILES (sizeof template_files / sizeof template_files[0])
#define N_TEMPLATES (N_FILES + 1)  // and Qwen2's, from its vocabulary file
static rg_chat_template templates[N_TEMPLATES];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    rg_error err = {0};
    for (size_t i = 0; i < N_FILES; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "fuzz/templates/%s", template_files[i]);
        size_t len;
        char *text = fz_read_source_file(rel, &len);
        const char *bos = strstr(template_files[i], "llama")   ? "<|begin_of_text|>"
                          : strstr(template_files[i], "gemma") ? "<bos>"
                                                               : "<|startoftext|>";
        if (rg_chat_template_parse(&templates[i], text, len, bos, &err)) {
            fprintf(stderr, "fuzz_chat: %s: %s\n", rel, err.msg);
            exit(1);
        }
        free(text);
    }
    rg_tokenizer *qwen2 = fz_load_vocab("qwen2");
    if (rg_chat_template_from_tokenizer(&templates[N_FILES], qwen2, &err)) {
        fprintf(stderr, "fuzz_chat: qwen2: %s\n", err.msg);
        exit(1);
    }
    rg_tokenizer_free(qwen2);
    return 0;
}

static bool role_is(const rg_chat_message *m, const char *r) {
    return m->role_len == strlen(r) && memcmp(m->role, r, m->role_len) == 0;
}

static bool bytes_are(const rg_chat_rendered *r, size_t begin, size_t end, const char *want) {
    return end - begin == strlen(want) && memcmp(r->text + begin, want, end - begin) == 0;
}

// Bytes that Jinja's trim may remove at an end: ASCII white space, U+001C..U+001F, and every
// byte of a multi-byte character (some of those are white space too).
static bool maybe_trimmed(unsigned char c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c >= 0x80;
}

// The content of span k is message msg's, or with trim its trimmed middle.
static void check_content(const rg_chat_rendered *r, const rg_chat_span *sp, const rg_chat_message *msg, bool trimmed,
                          size_t k) {
    size_t clen = sp->content_end - sp->content_begin;
    const char *got = r->text + sp->content_begin;
    if (trimmed) {
        const char *at = clen <= msg->content_len ? fz_find(msg->content, msg->content_len, got, clen) : NULL;
        FZ_CHECK(at, "span %zu: the trimmed content is not inside message %d's", k, sp->message);
        bool plain_ends = msg->content_len > 0 && !maybe_trimmed((unsigned char)msg->content[0]) &&
                          !maybe_trimmed((unsigned char)msg->content[msg->content_len - 1]);
        FZ_CHECK(!plain_ends || clen == msg->content_len, "span %zu: content without white space at its ends was trimmed",
                 k);
    } else {
        FZ_CHECK(clen == msg->content_len && memcmp(got, msg->content, clen) == 0, "span %zu: the content is not message "
                 "%d's", k, sp->message);
    }
}

// Gemma: <start_of_turn>{user|model}\n{content|trim}<end_of_turn>\n; Gemma 3's leading system
// message is the first user turn's header, role "user", its content untrimmed and "\n\n"; the
// user message after it has no header, role or separator.
static void check_gemma_span(const rg_chat_template *t, const rg_chat_rendered *r, const rg_chat_span *sp,
                             const rg_chat_message *m, size_t k) {
    const rg_chat_message *msg = &m[sp->message];
    bool system = role_is(msg, "system");
    bool after_system = sp->message == 1 && role_is(&m[0], "system");
    const char *role = after_system ? "" : role_is(msg, "assistant") ? "model" : "user";
    FZ_CHECK(bytes_are(r, sp->role_begin, sp->role_end, role), "span %zu: role is not '%s'", k, role);
    FZ_CHECK(bytes_are(r, sp->begin, sp->role_begin, after_system ? "" : "<start_of_turn>"), "span %zu: header", k);
    FZ_CHECK(bytes_are(r, sp->role_end, sp->content_begin, after_system ? "" : "\n"), "span %zu: separator", k);
    check_content(r, sp, msg, t->trim_content && !system, k);
    if (system) {
        FZ_CHECK(bytes_are(r, sp->content_end, sp->marker_end, "\n\n") && sp->marker_end == sp->end,
                 "span %zu: the system prefix's end", k);
        return;
    }
    FZ_CHECK(bytes_are(r, sp->content_end, sp->marker_end, "<end_of_turn>"), "span %zu: marker", k);
    FZ_CHECK(bytes_are(r, sp->marker_end, sp->end, "\n"), "span %zu: line end", k);
}

// Whether a gemma template refuses the conversation: user and assistant alternate, user first,
// after a leading system message where the template takes one (Gemma 3) and a user follows it.
static bool gemma_refuses(const rg_chat_template *t, const rg_chat_message *m, size_t n) {
    size_t first = n > 0 && role_is(&m[0], "system");
    if (first && (!t->gemma_system_prefix || n < 2)) return true;
    for (size_t i = first; i < n; i++)
        if (!role_is(&m[i], (i - first) % 2 == 0 ? "user" : "assistant")) return true;
    return false;
}

// date: the Llama 3.1 "Today Date" as rendered, NULL when it came from the clock.
static void check_span_text(const rg_chat_template *t, const rg_chat_rendered *r, const rg_chat_span *sp,
                            const rg_chat_message *m, size_t n, size_t k, const char *date) {
    bool llama = t->family == RG_CHAT_LLAMA3 || t->family == RG_CHAT_LLAMA31;
    const rg_chat_message *msg = sp->message >= 0 ? &m[sp->message] : NULL;
    bool qwen_tool = t->qwen_tool_turns && msg && role_is(msg, "tool");
    bool lfm2_tool = t->lfm2_tool_wrap && msg && role_is(msg, "tool");
    size_t i = (size_t)sp->message;
    bool first_tool = qwen_tool && (i == 0 || !role_is(&m[i - 1], "tool"));
    bool last_tool = qwen_tool && (i + 1 == n || !role_is(&m[i + 1], "tool"));
    if (t->family == RG_CHAT_GEMMA) {
        check_gemma_span(t, r, sp, m, k);
        return;
    }

    // The role as written.
    const char *role = !msg ? "system" : qwen_tool ? (first_tool ? "user" : "") : NULL;
    if (role)
        FZ_CHECK(bytes_are(r, sp->role_begin, sp->role_end, role), "span %zu: role is not '%s'", k, role);
    else
        FZ_CHECK(sp->role_end - sp->role_begin == msg->role_len &&
                     memcmp(r->text + sp->role_begin, msg->role, msg->role_len) == 0,
                 "span %zu: the role is not message %d's", k, sp->message);

    // The content: the message's, or for Llama 3 its trimmed middle.
    const char *content = msg ? msg->content : t->family == RG_CHAT_CHATML ? t->default_system : "";
    size_t content_len = msg ? msg->content_len : strlen(content);
    size_t clen = sp->content_end - sp->content_begin;
    const char *got = r->text + sp->content_begin;
    if (t->trim_content && llama) {
        const char *at = clen <= content_len ? fz_find(content, content_len, got, clen) : NULL;
        FZ_CHECK(at, "span %zu: the trimmed content is not inside message %d's", k, sp->message);
        bool plain_ends = content_len > 0 && !maybe_trimmed((unsigned char)content[0]) &&
                          !maybe_trimmed((unsigned char)content[content_len - 1]);
        FZ_CHECK(!plain_ends || clen == content_len, "span %zu: content without white space at its ends was trimmed", k);
    } else {
        FZ_CHECK(clen == content_len && memcmp(got, content, clen) == 0, "span %zu: the content is not message %d's", k,
                 sp->message);
    }

    // The fixed pieces around them.
    if (llama) {
        FZ_CHECK(bytes_are(r, sp->begin, sp->role_begin, "<|start_header_id|>"), "span %zu: header", k);
        size_t sep = sp->content_begin - sp->role_end;
        FZ_CHECK(sep >= 19 && memcmp(r->text + sp->role_end, "<|end_header_id|>\n\n", 19) == 0, "span %zu: separator", k);
        // Llama 3.1 writes its knowledge and date lines in front of the system content.
        bool dated = t->family == RG_CHAT_LLAMA31 && (sp->message == -1 || (sp->message == 0 && role_is(msg, "system")));
        FZ_CHECK(dated || sep == 19, "span %zu: %zu bytes between the role and the content", k, sep);
        if (dated) {
            const char *p = r->text + sp->role_end + 19, *end = r->text + sp->content_begin;
            size_t kl = strlen(t->knowledge_line);
            FZ_CHECK((size_t)(end - p) >= kl + 14 && memcmp(p, t->knowledge_line, kl) == 0 &&
                         memcmp(p + kl, "Today Date: ", 12) == 0 && memcmp(end - 2, "\n\n", 2) == 0,
                     "span %zu: not the knowledge and date lines", k);
            FZ_CHECK(!date || ((size_t)(end - p) == kl + 14 + strlen(date) && memcmp(p + kl + 12, date, strlen(date)) == 0),
                     "span %zu: the date is not '%s'", k, date);
        }
        FZ_CHECK(bytes_are(r, sp->content_end, sp->marker_end, "<|eot_id|>") && sp->marker_end == sp->end,
                 "span %zu: marker", k);
        return;
    }
    FZ_CHECK(bytes_are(r, sp->begin, sp->role_begin, qwen_tool && !first_tool ? "" : "<|im_start|>"),
             "span %zu: header", k);
    static const char *const seps[] = {"\n", "\n<tool_response>\n", "\n<|tool_response_start|>"};
    static const char *const markers[] = {"<|im_end|>", "\n</tool_response>", "\n</tool_response><|im_end|>",
                                          "<|tool_response_end|><|im_end|>"};
    const char *want_sep = qwen_tool ? seps[1] : lfm2_tool ? seps[2] : seps[0];
    const char *want_marker = qwen_tool ? markers[last_tool ? 2 : 1] : lfm2_tool ? markers[3] : markers[0];
    FZ_CHECK(bytes_are(r, sp->role_end, sp->content_begin, want_sep), "span %zu: separator", k);
    FZ_CHECK(bytes_are(r, sp->content_end, sp->marker_end, want_marker), "span %zu: marker", k);
    FZ_CHECK(bytes_are(r, sp->marker_end, sp->end, qwen_tool && !last_tool ? "" : "\n"), "span %zu: line end", k);
}

// Renders m[0..n) with t and checks everything chat.h says about the result.
static void check_render(const rg_chat_template *t, const rg_chat_message *m, size_t n, bool gen, const char *date) {
    rg_chat_options opt = {.add_generation_prompt = gen, .date_string = date};
    rg_chat_rendered r;
    rg_error err = {0};
    rg_status st = rg_chat_render(t, m, n, &opt, &r, &err);
    bool refused = false;
    for (size_t i = 0; i < n && t->family == RG_CHAT_LLAMA31; i++) refused |= role_is(&m[i], "tool") || role_is(&m[i], "ipython");
    if (t->family == RG_CHAT_GEMMA) refused = gemma_refuses(t, m, n);
    if (st) {
        fz_check_error(st, &err, FZ_STATUS(RG_ERR_UNSUPPORTED), "rg_chat_render");
        FZ_CHECK(refused, "rendering %zu messages with %s failed: %s", n, rg_chat_family_name(t->family), err.msg);
        FZ_CHECK(!r.text && !r.spans && r.len == 0 && r.n_spans == 0, "a failed render left output behind");
        return;
    }
    FZ_CHECK(!refused, "a conversation its %s template refuses rendered", rg_chat_family_name(t->family));
    FZ_CHECK(r.text && r.text[r.len] == '\0' && r.prompt_begin <= r.len, "text not terminated or prompt_begin out of it");

    // One span per message, after the one the template inserts.
    bool inserted = (t->family == RG_CHAT_CHATML && t->default_system && n > 0 && !role_is(&m[0], "system")) ||
                    (t->family == RG_CHAT_LLAMA31 && (n == 0 || !role_is(&m[0], "system")));
    FZ_CHECK(r.n_spans == n + inserted, "%zu spans for %zu messages (inserted %d)", r.n_spans, n, inserted);

    // What comes before the first block: the BOS text where the family writes one.
    const char *bos = t->family == RG_CHAT_LLAMA3 ? (n > 0 ? t->bos_text : "") : t->bos_text ? t->bos_text : "";
    size_t at = strlen(bos);
    FZ_CHECK(at <= r.len && memcmp(r.text, bos, at) == 0, "the text does not start with the BOS text '%s'", bos);
    for (size_t k = 0; k < r.n_spans; k++) {
        const rg_chat_span *sp = &r.spans[k];
        FZ_CHECK(sp->message == (int32_t)k - (int32_t)inserted, "span %zu is of message %d", k, sp->message);
        if (!sp->rendered) {
            FZ_CHECK(t->family == RG_CHAT_LFM2 && k == 0 && role_is(&m[0], "system") && m[0].content_len == 0,
                     "span %zu left out", k);
            continue;
        }
        FZ_CHECK(sp->begin == at, "span %zu begins at %zu, the previous one ended at %zu", k, sp->begin, at);
        FZ_CHECK(sp->begin <= sp->role_begin && sp->role_begin <= sp->role_end && sp->role_end <= sp->content_begin &&
                     sp->content_begin <= sp->content_end && sp->content_end <= sp->marker_end &&
                     sp->marker_end <= sp->end && sp->end <= r.prompt_begin,
                 "span %zu: its offsets are out of order", k);
        check_span_text(t, &r, sp, m, n, k, date ? date : t->date_from_clock ? NULL : t->default_date);
        at = sp->end;
    }
    FZ_CHECK(at == r.prompt_begin, "the blocks end at %zu, the prompt begins at %zu", at, r.prompt_begin);
    const char *prompt = !gen                                                          ? ""
                         : t->family == RG_CHAT_LLAMA3 || t->family == RG_CHAT_LLAMA31 ? "<|start_header_id|>assistant<|end_header_id|>\n\n"
                         : t->family == RG_CHAT_GEMMA                                   ? "<start_of_turn>model\n"
                                                                                        : "<|im_start|>assistant\n";
    FZ_CHECK(bytes_are(&r, r.prompt_begin, r.len, prompt), "the text does not end with the generation prompt");

    // The same conversation renders the same (unless the date comes from the clock).
    if (date || !t->date_from_clock) {
        rg_chat_rendered again;
        FZ_CHECK(rg_chat_render(t, m, n, &opt, &again, &err) == RG_OK && again.len == r.len &&
                     memcmp(again.text, r.text, r.len) == 0 && again.n_spans == r.n_spans &&
                     memcmp(again.spans, r.spans, r.n_spans * sizeof *r.spans) == 0,
                 "a second render differs");
        rg_chat_rendered_free(&again);
    }
    rg_chat_rendered_free(&r);
}

#define MSG(r, c) {.role = r, .role_len = sizeof(r) - 1, .content = c, .content_len = sizeof(c) - 1}
static const rg_chat_message conv_system[] = {MSG("system", " Be brief. "), MSG("user", "Hi"), MSG("assistant", "Hello")};
static const rg_chat_message conv_tools[] = {MSG("user", "Weather?"), MSG("assistant", ""), MSG("tool", "sunny"),
                                             MSG("tool", "22 C"), MSG("assistant", "Sunny.")};
static const rg_chat_message conv_empty_system[] = {MSG("system", ""), MSG("tool", "x")};

static bool same_str(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

static void check_recognize(const char *text, size_t len, const char *bos) {
    rg_chat_template t;
    rg_error err = {0};
    rg_status st = rg_chat_template_parse(&t, text, len, bos, &err);
    if (st) {
        fz_check_error(st, &err, FZ_STATUS(RG_ERR_UNSUPPORTED), "rg_chat_template_parse");
        FZ_CHECK(strstr(err.msg, "chat template '"), "the error does not quote the template: %s", err.msg);
        static const rg_chat_template zero;
        FZ_CHECK(memcmp(&t, &zero, sizeof t) == 0, "a failed parse left a template behind");
        return;
    }
    bool llama = t.family == RG_CHAT_LLAMA3 || t.family == RG_CHAT_LLAMA31;
    bool gemma = t.family == RG_CHAT_GEMMA;
    FZ_CHECK(llama || gemma || t.family == RG_CHAT_CHATML || t.family == RG_CHAT_LFM2, "family %d", (int)t.family);
    const char *marker = llama ? "<|start_header_id|>" : gemma ? "<start_of_turn>" : "<|im_start|>";
    FZ_CHECK(fz_find(text, len, marker, strlen(marker)), "%s recognized in a template without its markers",
             rg_chat_family_name(t.family));
    FZ_CHECK(!t.gemma_system_prefix || gemma, "a system prefix outside gemma");
    FZ_CHECK(!t.default_system || (t.family == RG_CHAT_CHATML && t.default_system[0]), "default system prompt");
    FZ_CHECK(!t.qwen_tool_turns || t.family == RG_CHAT_CHATML, "tool turns outside chatml");
    FZ_CHECK(!t.lfm2_tool_wrap || t.family == RG_CHAT_LFM2, "tool wrapping outside lfm2");
    FZ_CHECK(!t.trim_content || llama || gemma, "trimming outside llama3 and gemma");
    FZ_CHECK((t.family == RG_CHAT_LLAMA31) == (t.knowledge_line && t.default_date), "knowledge line and date");
    FZ_CHECK(!t.date_from_clock || t.family == RG_CHAT_LLAMA31, "clock date outside llama3.1");
    FZ_CHECK(t.family == RG_CHAT_CHATML || t.bos_text, "%s without a BOS text", rg_chat_family_name(t.family));

    rg_chat_template again;
    FZ_CHECK(rg_chat_template_parse(&again, text, len, bos, &err) == RG_OK && again.family == t.family &&
                 same_str(again.default_system, t.default_system) && same_str(again.bos_text, t.bos_text) &&
                 same_str(again.knowledge_line, t.knowledge_line) && same_str(again.default_date, t.default_date) &&
                 again.qwen_tool_turns == t.qwen_tool_turns && again.lfm2_tool_wrap == t.lfm2_tool_wrap &&
                 again.trim_content == t.trim_content && again.date_from_clock == t.date_from_clock &&
                 again.gemma_system_prefix == t.gemma_system_prefix,
             "a second parse differs");
    rg_chat_template_free(&again);

    check_render(&t, NULL, 0, true, NULL);
    check_render(&t, conv_system, 3, false, "01 Jan 2025");
    check_render(&t, conv_tools, 5, true, NULL);
    check_render(&t, conv_empty_system, 2, false, NULL);
    rg_chat_template_free(&t);
}

static const char *const roles[] = {"system", "user", "assistant", "tool", "ipython", ""};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_reader in = {data, size};
    uint8_t ctl = fz_byte(&in);
    if (!(ctl & 1)) {
        check_recognize((const char *)in.p, in.n, ctl & 2 ? "<s>" : NULL);
        return 0;
    }
    const rg_chat_template *t = &templates[(ctl >> 1 & 15) % N_TEMPLATES];
    bool gen = ctl & 32;
    char *date = NULL;
    if (ctl & 64) {
        size_t len;
        const char *d = fz_field(&in, 0x1E, &len);
        date = strndup(d ? d : "", len);
        FZ_CHECK(date, "out of memory");
    }
    rg_chat_message *m = calloc(in.n + 1, sizeof *m);  // no tool calls, no names
    FZ_CHECK(m, "out of memory");
    size_t n = 0, len;
    for (const char *field; (field = fz_field(&in, 0x1E, &len));) {
        rg_chat_message *msg = &m[n++];
        unsigned char r = len ? (unsigned char)field[0] : 0;
        const char *body = field + (len > 0);
        size_t body_len = len - (len > 0);
        if (r < 0xF0) {
            msg->role = roles[r % (sizeof roles / sizeof roles[0])];
            msg->role_len = strlen(msg->role);
        } else {
            const char *end = memchr(body, 0x1F, body_len);
            msg->role = body;
            msg->role_len = end ? (size_t)(end - body) : body_len;
            body += msg->role_len + (end != NULL);
            body_len -= msg->role_len + (end != NULL);
        }
        msg->content = body;
        msg->content_len = body_len;
    }
    check_render(t, m, n, gen, date);
    free(m);
    free(date);
    return 0;
}
