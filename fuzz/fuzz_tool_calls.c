// fuzz_tool_calls.c - libFuzzer target for tool calls out of generated text
// (src/text/tool_calls.c, and the renders of src/text/chat_tools.c it feeds).
//
// Input: one control byte, then the generated text.
//   bit 0      the family: chatml (Hermes <tool_call>) or lfm2 (<|tool_call_start|>[f(a=1)]...)
//   bits 1-2   tool_choice for rg_tool_calls_check: auto, none, required, or the function "now"
//              (the request's tools are get_weather and now)
//
// What tool_calls.h promises and this checks:
//   - parsing fails only for a family without tool calls; status NONE means the text holds no
//     call marker and content is the text; UNPARSABLE means content is the text, no calls, and
//     an RG_ERR_FORMAT message; OK means every call has a non-empty name and arguments that
//     re-parse as one JSON object, and content has no white space at either end;
//   - the streaming hold-back ends at the first marker, or within a marker's length of the end
//     when there is none;
//   - after rg_tool_calls_check every remaining call names one of the tools, as tool_choice allows;
//   - OK calls rendered into an assistant turn of the family (builtin template) parse back to the
//     same names and the same arguments (compared as json.dumps writes them), when the content
//     holds no opening marker, no name or argument holds the closing one, and (Hermes, which
//     writes the name unescaped) the name is a plain name: the formats themselves cannot tell
//     "a</tool_call>" from an end.
#include <stdlib.h>
#include <string.h>

#include "base/json_write.h"
#include "support.h"
#include "text/chat.h"
#include "text/pyjson.h"
#include "text/tool_calls.h"

static rg_chat_template templates[2];
static rg_json_doc *tools;
static const char tools_json[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {}}}]";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    rg_error err = {0};
    if (rg_chat_template_builtin(&templates[0], "chatml", NULL, &err) ||
        rg_chat_template_builtin(&templates[1], "lfm2", NULL, &err) ||
        rg_json_parse(&tools, tools_json, strlen(tools_json), NULL, &err)) {
        fprintf(stderr, "fuzz_tool_calls: %s\n", err.msg);
        exit(1);
    }
    return 0;
}

static const char *open_marker(rg_chat_family f) { return f == RG_CHAT_CHATML ? "<tool_call>" : "<|tool_call_start|>"; }

// json.dumps of the arguments text, or NULL when they do not parse (malloc'd).
static char *normalized(const char *args, size_t n) {
    rg_json_doc *d = NULL;
    rg_error err = {0};
    if (rg_json_parse(&d, args, n, NULL, &err)) return NULL;
    FZ_CHECK(rg_json_is(rg_json_root(d), RG_JSON_OBJECT), "arguments %s are not an object", args);
    rg_jw w;
    rg_jw_init(&w);
    rg_pyjson_dumps(&w, rg_json_root(d));
    rg_json_free(d);
    return rg_jw_take(&w, NULL);
}

// checked: after rg_tool_calls_check, which may make any result UNPARSABLE.
static void check_parsed(rg_chat_family f, const char *text, size_t len, const rg_tool_calls *out, const rg_error *err,
                         bool checked) {
    const char *marker = open_marker(f);
    bool marked = fz_find(text, len, marker, strlen(marker)) != NULL;
    FZ_CHECK(out->text_len == len && memcmp(out->text, text, len) == 0, "text not kept");
    if (out->status != RG_TOOL_CALLS_OK) {
        FZ_CHECK(out->n_calls == 0 && out->content_len == len && memcmp(out->content, text, len) == 0,
                 "status %d: content is not the text", out->status);
        FZ_CHECK(out->status == RG_TOOL_CALLS_UNPARSABLE || !marked, "NONE with a marker");
        if (out->status == RG_TOOL_CALLS_UNPARSABLE) {
            FZ_CHECK(marked || checked, "UNPARSABLE without a marker");
            fz_check_error(RG_ERR_FORMAT, err, FZ_STATUS(RG_ERR_FORMAT), "unparsable calls");
        }
        return;
    }
    FZ_CHECK(marked, "OK without a marker");
    if (out->content_len) {
        char a = out->content[0], z = out->content[out->content_len - 1];
        FZ_CHECK(!memchr(" \t\n\r", a, 4) && !memchr(" \t\n\r", z, 4), "content not trimmed: '%s'", out->content);
    }
    for (size_t i = 0; i < out->n_calls; i++) {
        const rg_tool_call *c = &out->calls[i];
        FZ_CHECK(c->name_len > 0 && strlen(c->name) == c->name_len, "call %zu: name", i);
        char *norm = normalized(c->arguments, c->arguments_len);
        FZ_CHECK(norm, "call %zu: arguments %s do not re-parse", i, c->arguments);
        free(norm);
    }
}

static void check_stream(rg_chat_family f, const char *text, size_t len) {
    const char *marker = open_marker(f);
    size_t m = strlen(marker), safe = rg_tool_calls_safe_len(f, text, len);
    const char *at = fz_find(text, len, marker, m);
    FZ_CHECK(safe <= len, "safe_len past the end");
    if (at) FZ_CHECK(safe == (size_t)(at - text), "safe_len %zu, first marker at %zu", safe, (size_t)(at - text));
    else FZ_CHECK(safe + m > len || safe == len, "safe_len %zu holds more than a marker's length of %zu", safe, len);
    FZ_CHECK(rg_tool_calls_may_start(f, text, len) == (safe < len), "may_start disagrees with safe_len");
}

// The calls rendered as an assistant turn, then parsed back from its content span.
static void check_roundtrip(rg_chat_family f, const rg_tool_calls *out) {
    const char *marker = open_marker(f);
    const char *close = f == RG_CHAT_CHATML ? "</tool_call>" : "<|tool_call_end|>";
    if (fz_find(out->content, out->content_len, marker, strlen(marker)) || out->n_calls == 0) return;
    for (size_t i = 0; i < out->n_calls; i++) {
        const rg_tool_call *c = &out->calls[i];
        // Hermes writes the name into its JSON as it is; a string holding the end marker ends the call early.
        if ((f == RG_CHAT_CHATML && !rg_pyjson_is_name(c->name, c->name_len)) ||
            fz_find(c->name, c->name_len, close, strlen(close)) || fz_find(c->arguments, c->arguments_len, close, strlen(close)))
            return;
    }
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_arr(&w);
    for (size_t i = 0; i < out->n_calls; i++) {
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "type", "function");
        rg_jw_key(&w, "function");
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "name", out->calls[i].name);
        rg_jw_key(&w, "arguments");
        rg_jw_strn(&w, out->calls[i].arguments, out->calls[i].arguments_len);
        rg_jw_obj_end(&w);
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    size_t n;
    const char *calls_text = rg_jw_text(&w, &n);
    rg_json_doc *calls = NULL;
    rg_error err = {0};
    FZ_CHECK(calls_text && rg_json_parse(&calls, calls_text, n, NULL, &err) == RG_OK, "calls JSON: %s", err.msg);
    rg_jw_free(&w);
    rg_chat_message m = {.role = "assistant", .role_len = 9, .content = out->content, .content_len = out->content_len,
                         .tool_calls = rg_json_root(calls)};
    rg_chat_rendered r;
    FZ_CHECK(rg_chat_render(&templates[f == RG_CHAT_LFM2], &m, 1, NULL, &r, &err) == RG_OK, "render: %s", err.msg);
    const rg_chat_span *sp = &r.spans[r.n_spans - 1];
    size_t b = sp->role_end + (f == RG_CHAT_LFM2 || out->content_len ? 1 : 0), e = sp->marker_end - strlen("<|im_end|>");
    rg_tool_calls back;
    FZ_CHECK(rg_tool_calls_parse(f, r.text + b, e - b, &back, &err) == RG_OK, "parse back: %s", err.msg);
    // Numbers past a double's range render as Infinity (as json.dumps writes them), which JSON cannot read back.
    // (The text may hold NUL bytes from the content: searched by length, not as a C string.)
    if (!fz_find(r.text, r.len, "Infinity", strlen("Infinity"))) {
        FZ_CHECK(back.status == RG_TOOL_CALLS_OK && back.n_calls == out->n_calls, "round trip: status %d, %zu calls "
                 "of %zu (%s) in %s", back.status, back.n_calls, out->n_calls, err.msg, r.text);
        for (size_t i = 0; i < out->n_calls; i++) {
            char *x = normalized(out->calls[i].arguments, out->calls[i].arguments_len);
            char *y = normalized(back.calls[i].arguments, back.calls[i].arguments_len);
            FZ_CHECK(!strcmp(out->calls[i].name, back.calls[i].name) && x && y && !strcmp(x, y),
                     "call %zu: %s %s came back as %s %s", i, out->calls[i].name, x, back.calls[i].name, y);
            free(x);
            free(y);
        }
    }
    rg_tool_calls_free(&back);
    rg_chat_rendered_free(&r);
    rg_json_free(calls);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    rg_chat_family f = data[0] & 1 ? RG_CHAT_LFM2 : RG_CHAT_CHATML;
    rg_tool_choice choice = {.mode = (rg_tool_choice_mode)(data[0] >> 1 & 3)};
    if (choice.mode == RG_TOOL_CHOICE_FUNCTION) choice.name = "now", choice.name_len = 3;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    rg_tool_calls out;
    rg_error err = {0};
    FZ_CHECK(rg_tool_calls_parse(f, text, len, &out, &err) == RG_OK, "parse: %s", err.msg);
    check_parsed(f, text, len, &out, &err, false);
    check_stream(f, text, len);
    if (out.status == RG_TOOL_CALLS_OK) check_roundtrip(f, &out);
    FZ_CHECK(rg_tool_calls_check(&out, rg_json_root(tools), &choice, &err) == RG_OK, "check: %s", err.msg);
    check_parsed(f, text, len, &out, &err, true);
    for (size_t i = 0; i < out.n_calls; i++) {
        bool known = !strcmp(out.calls[i].name, "now") || !strcmp(out.calls[i].name, "get_weather");
        FZ_CHECK(known && choice.mode != RG_TOOL_CHOICE_NONE, "call %s passed the check", out.calls[i].name);
        FZ_CHECK(choice.mode != RG_TOOL_CHOICE_FUNCTION || !strcmp(out.calls[i].name, "now"), "not the chosen function");
    }
    rg_tool_calls_free(&out);
    return 0;
}
