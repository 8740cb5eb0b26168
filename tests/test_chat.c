// test_chat.c - chat templates by family (spec/architectures.md §5.5): the exact rendered text
// of each family, the byte spans of roles and contents, BOS handling when the rendered text is
// tokenized, and the errors for templates that are not supported.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "rg_test.h"
#include "text/chat.h"
#include "text/tokenizer.h"

#define DATA RG_SOURCE_DIR "/tests/data/tokenizer/"

typedef struct vocab {
    rg_gguf *g;
    rg_tokenizer *tok;
} vocab;

static bool open_vocab(const char *name, vocab *v) {
    char path[1024];
    snprintf(path, sizeof path, DATA "ggml-vocab-%s.gguf", name);
    rg_error err = {0};
    v->g = NULL;
    v->tok = NULL;
    if (rg_gguf_open(&v->g, path, &err) || rg_tokenizer_load(&v->tok, v->g, &err)) {
        printf("    %s\n", err.msg);
        rg_gguf_free(v->g);
        return false;
    }
    return true;
}

static void close_vocab(vocab *v) {
    rg_tokenizer_free(v->tok);
    rg_gguf_free(v->g);
}

static int32_t *tok_ids(const rg_tokenizer *tok, const char *s, size_t len, bool add_special, bool parse_special,
                        size_t *n) {
    int32_t *ids = NULL;
    rg_error err = {0};
    if (rg_tokenize_alloc(tok, s, len, add_special, parse_special, &ids, n, &err)) {
        printf("    tokenize failed: %s\n", err.msg);
        *n = 0;
        return NULL;
    }
    return ids;
}

// Templates as the models ship them (tokenizer_config.json chat_template, JSON-decoded).

static const char qwen25_template[] =
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\" }}\n"
    "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == "
    "\"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n";

static const char smollm2_template[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static const char lfm2_template[] =
    "{{- bos_token -}}\n{%- set system_prompt = \"\" -%}\n{%- set ns = namespace(system_prompt=\"\") -%}\n"
    "{%- if messages[0][\"role\"] == \"system\" -%}\n\t{%- set ns.system_prompt = messages[0][\"content\"] -%}\n"
    "\t{%- set messages = messages[1:] -%}\n{%- endif -%}\n{%- if tools -%}\n"
    "\t{%- set ns.system_prompt = ns.system_prompt + (\"\\n\" if ns.system_prompt else \"\") + \"List of tools: "
    "<|tool_list_start|>[\" -%}\n\t{%- set ns.system_prompt = ns.system_prompt + \"]<|tool_list_end|>\" -%}\n"
    "{%- endif -%}\n{%- if ns.system_prompt -%}\n"
    "\t{{- \"<|im_start|>system\\n\" + ns.system_prompt + \"<|im_end|>\\n\" -}}\n{%- endif -%}\n"
    "{%- for message in messages -%}\n\t{{- \"<|im_start|>\" + message[\"role\"] + \"\\n\" -}}\n"
    "\t{%- set content = message[\"content\"] -%}\n\t{%- if message[\"role\"] == \"tool\" -%}\n"
    "\t\t{%- set content = \"<|tool_response_start|>\" + content + \"<|tool_response_end|>\" -%}\n\t{%- endif -%}\n"
    "\t{{- content + \"<|im_end|>\\n\" -}}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n"
    "\t{{- \"<|im_start|>assistant\\n\" -}}\n{%- endif -%}\n";

static const char llama3_template[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

static const char llama32_template[] =
    "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n"
    "        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n"
    "        {%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{{- system_message }}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n";

#define MSG(r, c) {.role = r, .role_len = sizeof(r) - 1, .content = c, .content_len = sizeof(c) - 1}

static const rg_chat_message conv[] = {
    MSG("system", "You are terse."),
    MSG("user", "Hi there"),
    MSG("assistant", "Hello!"),
    MSG("user", "  What is 2+2?\n"),
};

static bool contains(const char *hay, size_t n, const char *needle, size_t m) {
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(hay + i, needle, m) == 0) return true;
    return false;
}

// Renders and compares the text; then checks every span against the messages.
static bool render_check(const rg_chat_template *t, const rg_chat_message *m, size_t n, bool gen, const char *date,
                         const char *want, rg_chat_rendered *r) {
    rg_error err = {0};
    rg_chat_options opt = {.add_generation_prompt = gen, .date_string = date};
    if (rg_chat_render(t, m, n, &opt, r, &err)) {
        printf("    render failed: %s\n", err.msg);
        return false;
    }
    bool ok = r->len == strlen(want) && strcmp(r->text, want) == 0;
    if (!ok) printf("    %s rendered:\n'%s'\n    wanted:\n'%s'\n", rg_chat_family_name(t->family), r->text, want);
    for (size_t i = 0; i < r->n_spans; i++) {
        const rg_chat_span *sp = &r->spans[i];
        if (!sp->rendered) continue;
        ok &= sp->begin <= sp->role_begin && sp->role_end <= sp->content_begin && sp->content_end <= sp->marker_end &&
              sp->marker_end <= sp->end && sp->end <= r->len;
        if (sp->message >= 0) {
            const rg_chat_message *msg = &m[sp->message];
            size_t clen = sp->content_end - sp->content_begin;
            // The content is the message's (trimmed for llama3) text.
            bool inside = clen <= msg->content_len &&
                          (clen == 0 || contains(msg->content, msg->content_len, r->text + sp->content_begin, clen));
            if (!inside) printf("    span %zu content '%.*s' is not message %d's\n", i, (int)clen, r->text + sp->content_begin, sp->message);
            ok &= inside;
        }
    }
    const size_t gen_len = t->family == RG_CHAT_GEMMA ? 21 : t->family >= RG_CHAT_LLAMA3 ? 47 : 22;
    ok &= r->prompt_begin == (gen ? r->len - gen_len : r->len);
    return ok;
}

static bool span_is(const rg_chat_rendered *r, size_t i, int32_t message, const char *role, const char *content) {
    if (i >= r->n_spans) return false;
    const rg_chat_span *s = &r->spans[i];
    bool ok = s->message == message && s->role_end - s->role_begin == strlen(role) &&
              memcmp(r->text + s->role_begin, role, strlen(role)) == 0 &&
              s->content_end - s->content_begin == strlen(content) &&
              memcmp(r->text + s->content_begin, content, strlen(content)) == 0;
    if (!ok)
        printf("    span %zu: message %d role '%.*s' content '%.*s'\n", i, s->message, (int)(s->role_end - s->role_begin),
               r->text + s->role_begin, (int)(s->content_end - s->content_begin), r->text + s->content_begin);
    return ok;
}

static void test_chat_chatml(void) {
    vocab q;
    RG_REQUIRE(open_vocab("qwen2", &q), "open");
    rg_chat_template t;
    rg_error err = {0};
    rg_chat_rendered r;
    // Qwen2 (the template stored in the vocabulary file): default system "You are a helpful assistant".
    RG_REQUIRE(rg_chat_template_from_tokenizer(&t, q.tok, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.family == RG_CHAT_CHATML && t.default_system && strcmp(t.default_system, "You are a helpful assistant") == 0,
             "qwen2 default system '%s'", t.default_system ? t.default_system : "(none)");
    RG_CHECK(render_check(&t, conv + 1, 1, true, NULL,
                          "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                          "<|im_start|>assistant\n", &r), "qwen2 user only");
    RG_CHECK(span_is(&r, 0, -1, "system", "You are a helpful assistant") && span_is(&r, 1, 0, "user", "Hi there"), "spans");
    RG_CHECK(r.spans[1].begin == 57 && r.spans[1].marker_end == 92 && r.spans[1].end == 93, "qwen2 block %zu %zu %zu",
             r.spans[1].begin, r.spans[1].marker_end, r.spans[1].end);
    // The rendered text tokenizes into the ChatML special tokens.
    size_t n;
    int32_t *ids = tok_ids(q.tok, r.text, r.len, true, true, &n);
    RG_CHECK(n > 4 && ids[0] == 151644 && ids[n - 3] == 151644 && ids[n - 2] == 77091 && ids[n - 1] == 198,
             "tokenized chat");
    free(ids);
    rg_chat_rendered_free(&r);
    RG_CHECK(render_check(&t, conv, 3, false, NULL,
                          "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                          "<|im_start|>assistant\nHello!<|im_end|>\n", &r), "qwen2 with system");
    RG_CHECK(r.n_spans == 3 && span_is(&r, 0, 0, "system", "You are terse.") && span_is(&r, 2, 2, "assistant", "Hello!"), "spans");
    rg_chat_rendered_free(&r);
    RG_CHECK(render_check(&t, NULL, 0, false, NULL, "", &r), "qwen2: no messages, nothing");
    rg_chat_rendered_free(&r);
    rg_chat_template_free(&t);
    close_vocab(&q);

    // Qwen2.5: its own default system prompt, also with no messages; tool results in user turns.
    RG_REQUIRE(rg_chat_template_parse(&t, qwen25_template, strlen(qwen25_template), NULL, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.default_system && strcmp(t.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.") == 0,
             "qwen2.5 default system");
    RG_CHECK(render_check(&t, conv + 1, 2, false, NULL,
                          "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                          "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n", &r), "qwen2.5");
    rg_chat_rendered_free(&r);
    RG_CHECK(render_check(&t, NULL, 0, true, NULL, "<|im_start|>assistant\n", &r), "qwen2.5 no messages");
    rg_chat_rendered_free(&r);
    static const rg_chat_message tools[] = {MSG("user", "Weather?"), MSG("assistant", "Checking."), MSG("tool", "sunny"),
                                            MSG("tool", "22 C"), MSG("assistant", "Sunny, 22 C.")};
    RG_CHECK(render_check(&t, tools, 5, false, NULL,
                          "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                          "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\nChecking.<|im_end|>\n"
                          "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n22 C\n</tool_response>"
                          "<|im_end|>\n<|im_start|>assistant\nSunny, 22 C.<|im_end|>\n", &r), "qwen2.5 tools");
    RG_CHECK(span_is(&r, 3, 2, "user", "sunny") && span_is(&r, 4, 3, "", "22 C"), "tool spans");
    rg_chat_rendered_free(&r);
    rg_chat_template_free(&t);

    // SmolLM2: the template's own default system prompt.
    RG_REQUIRE(rg_chat_template_parse(&t, smollm2_template, strlen(smollm2_template), NULL, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(render_check(&t, conv + 1, 1, true, NULL,
                          "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                          "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", &r), "smollm2");
    rg_chat_rendered_free(&r);
    rg_chat_template_free(&t);

    // A plain ChatML template without a default: nothing inserted.
    const char *plain = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                        "'<|im_end|>' + '\\n'}}{% endfor %}";
    RG_REQUIRE(rg_chat_template_parse(&t, plain, strlen(plain), NULL, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(!t.default_system, "plain chatml has no default");
    RG_CHECK(render_check(&t, conv + 1, 1, false, NULL, "<|im_start|>user\nHi there<|im_end|>\n", &r), "plain chatml");
    rg_chat_rendered_free(&r);
    rg_chat_template_free(&t);

    // ChatML that writes bos_token first (not LFM2: no tool wrapping, an empty system is kept).
    const char *with_bos = "{{ bos_token }}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
                           "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
    RG_REQUIRE(rg_chat_template_parse(&t, with_bos, strlen(with_bos), "<s>", &err) == RG_OK, "%s", err.msg);
    static const rg_chat_message empty_sys[] = {MSG("system", ""), MSG("user", "x")};
    RG_CHECK(t.family == RG_CHAT_CHATML && render_check(&t, empty_sys, 2, false, NULL,
                                                        "<s><|im_start|>system\n<|im_end|>\n<|im_start|>user\nx<|im_end|>\n", &r),
             "chatml with bos");
    rg_chat_rendered_free(&r);
    rg_chat_template_free(&t);
}

static void test_chat_lfm2(void) {
    rg_chat_template t;
    rg_error err = {0};
    rg_chat_rendered r;
    RG_REQUIRE(rg_chat_template_parse(&t, lfm2_template, strlen(lfm2_template), "<|startoftext|>", &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.family == RG_CHAT_LFM2 && !t.default_system && t.lfm2_tool_wrap, "lfm2 recognized");
    RG_CHECK(render_check(&t, conv, 4, true, NULL,
                          "<|startoftext|><|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                          "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n  What is 2+2?\n<|im_end|>\n"
                          "<|im_start|>assistant\n", &r), "lfm2");
    RG_CHECK(span_is(&r, 0, 0, "system", "You are terse.") && span_is(&r, 3, 3, "user", "  What is 2+2?\n"), "lfm2 spans");
    rg_chat_rendered_free(&r);
    static const rg_chat_message m[] = {MSG("system", ""), MSG("user", "x"), MSG("tool", "42")};
    RG_CHECK(render_check(&t, m, 3, false, NULL,
                          "<|startoftext|><|im_start|>user\nx<|im_end|>\n<|im_start|>tool\n<|tool_response_start|>42"
                          "<|tool_response_end|><|im_end|>\n", &r), "lfm2 empty system, tool");
    RG_CHECK(r.n_spans == 3 && !r.spans[0].rendered && span_is(&r, 2, 2, "tool", "42"), "lfm2 spans");
    rg_chat_rendered_free(&r);
    rg_chat_template_free(&t);
}

static void test_chat_llama3(void) {
    vocab l;
    RG_REQUIRE(open_vocab("llama-bpe", &l), "open");
    rg_chat_template t;
    rg_error err = {0};
    rg_chat_rendered r;
    RG_REQUIRE(rg_chat_template_parse(&t, llama3_template, strlen(llama3_template), "<|begin_of_text|>", &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.family == RG_CHAT_LLAMA3 && t.trim_content, "llama3 recognized");
    RG_CHECK(render_check(&t, conv, 4, true, NULL,
                          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\n", &r), "llama3");
    RG_CHECK(span_is(&r, 3, 3, "user", "What is 2+2?") && r.spans[0].begin == 17, "llama3 spans (content trimmed)");
    // The template writes the BOS, so the text is tokenized without add_special (as generate and
    // the training data do): one BOS. add_special would put a second one first, as llama.cpp does.
    size_t n;
    int32_t *ids = tok_ids(l.tok, r.text, r.len, false, true, &n);
    RG_CHECK(n > 3 && ids[0] == 128000 && ids[1] == 128006 && ids[n - 1] == 271, "one BOS, then a header (%d %d)", ids[0], ids[1]);
    free(ids);
    ids = tok_ids(l.tok, r.text, r.len, true, true, &n);
    RG_CHECK(n > 3 && ids[0] == 128000 && ids[1] == 128000 && ids[2] == 128006, "add_special: two BOS (%d %d)", ids[0], ids[1]);
    free(ids);
    rg_chat_rendered_free(&r);
    rg_chat_template_free(&t);

    RG_REQUIRE(rg_chat_template_parse(&t, llama32_template, strlen(llama32_template), "<|begin_of_text|>", &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.family == RG_CHAT_LLAMA31 && t.date_from_clock && strcmp(t.default_date, "26 Jul 2024") == 0, "llama3.2 recognized");
    RG_CHECK(render_check(&t, conv + 1, 2, false, "01 Jan 2025",
                          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                          "Today Date: 01 Jan 2025\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>", &r), "llama3.2 without system");
    RG_CHECK(span_is(&r, 0, -1, "system", "") && span_is(&r, 1, 0, "user", "Hi there"), "inserted system span");
    rg_chat_rendered_free(&r);
    RG_CHECK(render_check(&t, conv, 2, true, "01 Jan 2025",
                          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                          "Today Date: 01 Jan 2025\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                          "Hi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", &r), "llama3.2 with system");
    RG_CHECK(span_is(&r, 0, 0, "system", "You are terse."), "system span");
    rg_chat_rendered_free(&r);
    static const rg_chat_message tool[] = {MSG("user", "x"), MSG("tool", "y")};
    rg_chat_options opt = {0};
    RG_CHECK(rg_chat_render(&t, tool, 2, &opt, &r, &err) == RG_ERR_UNSUPPORTED && strstr(err.msg, "'tool'"), "tool refused: %s", err.msg);
    rg_chat_template_free(&t);
    close_vocab(&l);
}

// The template files the fuzzer renders (fuzz/templates/), read whole.
static char *read_template(const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, RG_SOURCE_DIR "/fuzz/templates/%s", name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 16);
    *len = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (buf) buf[*len] = '\0';
    return buf;
}

static void test_chat_gemma(void) {
    rg_chat_template t;
    rg_error err = {0};
    rg_chat_rendered r;
    size_t len;
    char *g3 = read_template("gemma3.jinja", &len);
    RG_REQUIRE(g3, "cannot read fuzz/templates/gemma3.jinja");
    RG_REQUIRE(rg_chat_template_parse(&t, g3, len, "<bos>", &err) == RG_OK, "%s", err.msg);
    free(g3);
    RG_CHECK(t.family == RG_CHAT_GEMMA && t.trim_content && t.gemma_system_prefix && !strcmp(t.bos_text, "<bos>"),
             "gemma3 recognized");
    // Gemma 3: the system message opens the first user turn, untrimmed, then "\n\n"; contents trimmed;
    // 'assistant' is written 'model'.
    RG_CHECK(render_check(&t, conv, 4, true, NULL,
                          "<bos><start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n"
                          "<start_of_turn>model\nHello!<end_of_turn>\n"
                          "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n", &r), "gemma3");
    RG_CHECK(span_is(&r, 0, 0, "user", "You are terse.") && span_is(&r, 1, 1, "", "Hi there") &&
                 span_is(&r, 2, 2, "model", "Hello!") && span_is(&r, 3, 3, "user", "What is 2+2?"),
             "gemma3 spans");
    RG_CHECK(r.spans[2].marker_end == r.spans[2].end - 1 && r.text[r.spans[2].marker_end - 1] == '>', "the model turn's marker");
    rg_chat_rendered_free(&r);
    RG_CHECK(render_check(&t, conv + 1, 2, false, NULL,
                          "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n", &r),
             "gemma3 without system");
    rg_chat_rendered_free(&r);
    // The template raises on roles that do not alternate (user first): refused, nothing rendered.
    static const rg_chat_message two_users[] = {MSG("user", "a"), MSG("user", "b")};
    static const rg_chat_message model_first[] = {MSG("assistant", "a")};
    static const rg_chat_message lone_system[] = {MSG("system", "s")};
    rg_chat_options opt = {0};
    RG_CHECK(rg_chat_render(&t, two_users, 2, &opt, &r, &err) == RG_ERR_UNSUPPORTED && strstr(err.msg, "message 1") &&
                 strstr(err.msg, "alternate") && !r.text,
             "two user turns refused: %s", err.msg);
    RG_CHECK(rg_chat_render(&t, model_first, 1, &opt, &r, &err) == RG_ERR_UNSUPPORTED && strstr(err.msg, "message 0"),
             "assistant first refused: %s", err.msg);
    RG_CHECK(rg_chat_render(&t, lone_system, 1, &opt, &r, &err) == RG_ERR_UNSUPPORTED, "a lone system message refused");
    rg_chat_template_free(&t);

    char *g2 = read_template("gemma2.jinja", &len);
    RG_REQUIRE(g2, "cannot read fuzz/templates/gemma2.jinja");
    RG_REQUIRE(rg_chat_template_parse(&t, g2, len, "<bos>", &err) == RG_OK, "%s", err.msg);
    free(g2);
    RG_CHECK(t.family == RG_CHAT_GEMMA && t.trim_content && !t.gemma_system_prefix, "gemma2 recognized");
    RG_CHECK(render_check(&t, conv + 1, 3, true, NULL,
                          "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                          "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n", &r), "gemma2");
    rg_chat_rendered_free(&r);
    RG_CHECK(rg_chat_render(&t, conv, 4, &opt, &r, &err) == RG_ERR_UNSUPPORTED && strstr(err.msg, "system"),
             "gemma2 refuses a system message: %s", err.msg);
    rg_chat_template_free(&t);
}

// The built-in layouts (for a model without a template) render as the recognized templates do.
static void test_chat_builtin(void) {
    static const struct {
        const char *name, *bos, *want;
    } cases[] = {
        {"gemma", "<bos>",
         "<bos><start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
         "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"},
        {"chatml", NULL,
         "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
         "Hello!<|im_end|>\n<|im_start|>user\n  What is 2+2?\n<|im_end|>\n<|im_start|>assistant\n"},
        {"llama3", "<|begin_of_text|>",
         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rg_chat_template t;
        rg_error err = {0};
        rg_chat_rendered r;
        RG_REQUIRE(rg_chat_template_builtin(&t, cases[i].name, cases[i].bos, &err) == RG_OK, "%s", err.msg);
        RG_CHECK(render_check(&t, conv, 4, true, NULL, cases[i].want, &r), "built-in %s", cases[i].name);
        rg_chat_rendered_free(&r);
        rg_chat_template_free(&t);
    }
    rg_chat_template t;
    rg_error err = {0};
    RG_REQUIRE(rg_chat_template_builtin(&t, "llama3.1", NULL, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.family == RG_CHAT_LLAMA31 && !strcmp(t.default_date, "26 Jul 2024") && !t.date_from_clock &&
                 !strcmp(t.bos_text, "<|begin_of_text|>"), "built-in llama3.1");
    rg_chat_template_free(&t);
    RG_REQUIRE(rg_chat_template_builtin(&t, "lfm2", NULL, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(t.family == RG_CHAT_LFM2 && t.lfm2_tool_wrap && !strcmp(t.bos_text, "<|startoftext|>"), "built-in lfm2");
    rg_chat_template_free(&t);
    RG_CHECK(rg_chat_template_builtin(&t, "jinja", NULL, &err) == RG_ERR_ARG && strstr(err.msg, "'jinja'") &&
                 strstr(err.msg, "gemma") && t.family == 0,
             "unknown name: %s", err.msg);
}

static void test_chat_unknown_template(void) {
    vocab p;
    RG_REQUIRE(open_vocab("phi-3", &p), "open");
    rg_chat_template t;
    rg_error err = {0};
    RG_CHECK(rg_chat_template_from_tokenizer(&t, p.tok, &err) == RG_ERR_UNSUPPORTED, "phi-3 template is not supported");
    RG_CHECK(strstr(err.msg, "'{{ bos_token }}{% for message in messages %}{% if (message['...'") != NULL &&
                 strstr(err.msg, "chatml") && strstr(err.msg, "llama3") && strstr(err.msg, "lfm2"),
             "message: %s", err.msg);
    close_vocab(&p);
    const char *think = "{%- for message in messages %}{{- '<|im_start|>' + message.role }}{%- if reasoning_content %}<think>{% endif %}";
    RG_CHECK(rg_chat_template_parse(&t, think, strlen(think), NULL, &err) == RG_ERR_UNSUPPORTED && strstr(err.msg, "think"),
             "thinking template: %s", err.msg);
    RG_CHECK(rg_chat_template_parse(&t, "", 0, NULL, &err) == RG_ERR_UNSUPPORTED, "empty template");
    // A Llama 3.1 template that ends right after "date_string = " (fuzz/regressions/chat/): the
    // byte after it is not the template's, so the quote is not looked for there (ASan builds
    // catch the read); the default date is used.
    static const char cut[] = "<|start_header_id|><|end_header_id|>Cutting Knowledge Date date_string = \"01 Jan 2000\"";
    char *exact = malloc(sizeof cut - 14);
    memcpy(exact, cut, sizeof cut - 14);  // through "date_string = ", no terminator
    RG_CHECK(rg_chat_template_parse(&t, exact, sizeof cut - 14, NULL, &err) == RG_OK && t.family == RG_CHAT_LLAMA31 &&
                 strcmp(t.default_date, "26 Jul 2024") == 0,
             "template cut after 'date_string = ': %s", err.msg);
    rg_chat_template_free(&t);
    free(exact);
    vocab g;
    RG_REQUIRE(open_vocab("gpt-2", &g), "open");
    RG_CHECK(rg_chat_template_from_tokenizer(&t, g.tok, &err) == RG_ERR_NOT_FOUND, "no template: %s", err.msg);
    close_vocab(&g);
}

static const rg_test_case test_cases[] = {
    RG_TEST(test_chat_chatml),
    RG_TEST(test_chat_lfm2),
    RG_TEST(test_chat_llama3),
    RG_TEST(test_chat_gemma),
    RG_TEST(test_chat_builtin),
    RG_TEST(test_chat_unknown_template),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, test_cases); }
