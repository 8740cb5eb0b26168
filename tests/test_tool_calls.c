// test_tool_calls.c - tools and tool calls through the chat templates (src/text/chat.c,
// chat_tools.c, pyjson.c) and tool calls parsed out of generated text (src/text/tool_calls.c):
// the exact render of tool lists, calls and results per family, json.dumps-style JSON, the
// parse of good, partial and malformed calls, the streaming hold-back, and tool_choice.
//
// `test_tool_calls --render` reads one JSON request on stdin ({"template", "bos",
// "add_generation_prompt", "messages": [{"role", "content", "tool_calls", "name"}], "tools"}) and
// prints the render: tests/python/test_chat_tools_reference.py compares it with jinja2's.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "rg_test.h"
#include "text/chat.h"
#include "text/pyjson.h"
#include "text/tool_calls.h"

#define TEMPLATES RG_SOURCE_DIR "/tests/data/templates/"
#define FUZZ_TEMPLATES RG_SOURCE_DIR "/fuzz/templates/"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

static bool load_template(const char *path, const char *bos, rg_chat_template *t) {
    size_t len;
    char *text = read_file(path, &len);
    rg_error err = {0};
    bool ok = text && rg_chat_template_parse(t, text, len, bos, &err) == RG_OK;
    if (!ok) printf("    %s: %s\n", path, text ? err.msg : "cannot read");
    free(text);
    return ok;
}

static rg_json_doc *J(const char *s) {
    rg_json_doc *d = NULL;
    rg_error err = {0};
    if (rg_json_parse(&d, s, strlen(s), NULL, &err)) printf("    bad test JSON: %s\n", err.msg);
    return d;
}

#define MSG(r, c) {.role = r, .role_len = sizeof(r) - 1, .content = c, .content_len = sizeof(c) - 1}

static const char weather_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather in a city\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
    "[\"city\"]}}}, {\"type\":\"function\",\"function\":{\"name\":\"now\",\"parameters\":{}}}]";
static const char two_calls[] =
    "[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
    "\"{\\\"city\\\":\\\"Z\\u00fcrich\\\",\\\"days\\\":2}\"}}, {\"id\": \"c2\", \"type\": \"function\", \"function\": "
    "{\"name\": \"now\", \"arguments\": \"{}\"}}]";

static const char hermes_tool_text[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather in a city\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
    "[\"city\"]}}}\n{\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {}}}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    "XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";

static const char hermes_turns[] =
    "<|im_start|>user\nWeather in Z\xC3\xBCrich?<|im_end|>\n"
    "<|im_start|>assistant\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Z\xC3\xBCrich\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n{\"t\": 21}\n</tool_response>\n<tool_response>\n12:00\n</tool_response>"
    "<|im_end|>\n<|im_start|>assistant\nSunny.<|im_end|>\n<|im_start|>assistant\n";

// The conversation every family renders: a question, two calls, their results, the answer.
static void conversation(rg_chat_message *m, const rg_json *calls) {
    const rg_chat_message base[] = {MSG("user", "Weather in Z\xC3\xBCrich?"), MSG("assistant", "Let me check."),
                                    MSG("tool", "{\"t\": 21}"), MSG("tool", "12:00"), MSG("assistant", "Sunny.")};
    memcpy(m, base, sizeof base);
    m[1].tool_calls = calls;
    m[2].name = "get_weather", m[2].name_len = 11;
}

static void check_render(const rg_chat_template *t, const rg_chat_message *m, size_t n, const rg_json *tools,
                         const char *want) {
    rg_chat_options opt = {.add_generation_prompt = true, .tools = tools};
    rg_chat_rendered r;
    rg_error err = {0};
    rg_status st = rg_chat_render(t, m, n, &opt, &r, &err);
    RG_REQUIRE(st == RG_OK, "render failed: %s", err.msg);
    RG_CHECK(r.len == strlen(want) && memcmp(r.text, want, r.len) == 0, "render\n%s\n--- want\n%s", r.text, want);
    rg_chat_rendered_free(&r);
}

static void test_render_qwen25_tools(void) {
    rg_chat_template t;
    RG_REQUIRE(load_template(TEMPLATES "qwen2.5-instruct.jinja", NULL, &t), "template");
    rg_json_doc *tools = J(weather_tools), *calls = J(two_calls);
    rg_chat_message m[6];
    conversation(m, rg_json_root(calls));
    char want[4096];
    snprintf(want, sizeof want, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
             "assistant.\n\n%s<|im_end|>\n%s", hermes_tool_text, hermes_turns);
    check_render(&t, m, 5, rg_json_root(tools), want);
    // A system message replaces the default one; an empty one still gets its blank line.
    m[5] = m[4];
    memmove(m + 1, m, 5 * sizeof *m);
    m[0] = (rg_chat_message)MSG("system", "Be brief.");
    snprintf(want, sizeof want, "<|im_start|>system\nBe brief.\n\n%s<|im_end|>\n%s", hermes_tool_text, hermes_turns);
    check_render(&t, m, 6, rg_json_root(tools), want);
    m[0] = (rg_chat_message)MSG("system", "");
    snprintf(want, sizeof want, "<|im_start|>system\n\n\n%s<|im_end|>\n%s", hermes_tool_text, hermes_turns);
    check_render(&t, m, 6, rg_json_root(tools), want);
    rg_json_free(tools);
    rg_json_free(calls);
    rg_chat_template_free(&t);
}

// SmolLM2's and plain ChatML's templates have no tool section: the Hermes layout, with the
// template's default system prompt or none.
static void test_render_chatml_without_tool_section(void) {
    rg_chat_template smol, plain;
    RG_REQUIRE(load_template(FUZZ_TEMPLATES "smollm2.jinja", NULL, &smol), "smollm2");
    RG_REQUIRE(load_template(FUZZ_TEMPLATES "chatml.jinja", NULL, &plain), "chatml");
    rg_json_doc *tools = J(weather_tools), *calls = J(two_calls);
    rg_chat_message m[5];
    conversation(m, rg_json_root(calls));
    char want[4096];
    snprintf(want, sizeof want, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
             "Face\n\n%s<|im_end|>\n%s", hermes_tool_text, hermes_turns);
    check_render(&smol, m, 5, rg_json_root(tools), want);
    snprintf(want, sizeof want, "<|im_start|>system\n%s<|im_end|>\n%s", hermes_tool_text, hermes_turns);
    check_render(&plain, m, 5, rg_json_root(tools), want);
    // Calls without tools still use the Hermes layout for calls and results.
    const char *no_tools = strstr(hermes_turns, "<|im_start|>user");
    check_render(&plain, m, 5, NULL, no_tools);
    // Zero-initialized messages render as before: a 'tool' message is a plain ChatML turn.
    const rg_chat_message plain_tool[] = {MSG("user", "x"), MSG("tool", "y")};
    check_render(&plain, plain_tool, 2, NULL,
                 "<|im_start|>user\nx<|im_end|>\n<|im_start|>tool\ny<|im_end|>\n<|im_start|>assistant\n");
    rg_json_free(tools);
    rg_json_free(calls);
    rg_chat_template_free(&smol);
    rg_chat_template_free(&plain);
}

static void test_render_lfm2_tools(void) {
    rg_chat_template t;
    RG_REQUIRE(load_template(TEMPLATES "lfm2.jinja", "<|startoftext|>", &t), "template");
    rg_json_doc *tools = J(weather_tools);
    rg_json_doc *calls = J("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
                           "\"{\\\"city\\\": \\\"Z\\u00fcrich\\\", \\\"q\\\": \\\"say \\\\\\\"hi\\\\\\\"\\\", \\\"n\\\": "
                           "1.50, \\\"on\\\": true, \\\"x\\\": null, \\\"l\\\": [1, \\\"a\\\"]}\"}}, {\"function\": "
                           "{\"name\": \"now\", \"arguments\": {}}}]");
    rg_chat_message m[6];
    conversation(m + 1, rg_json_root(calls));
    m[0] = (rg_chat_message)MSG("system", "Be brief.");
    static const char list[] =
        "List of tools: <|tool_list_start|>[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
        "\"description\": \"Weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
        "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": "
        "\"now\", \"parameters\": {}}}]<|tool_list_end|>";
    static const char turns[] =
        "<|im_start|>user\nWeather in Z\xC3\xBCrich?<|im_end|>\n<|im_start|>assistant\n<|tool_call_start|>["
        "get_weather(city=\"Z\xC3\xBCrich\", q=\"say \\\"hi\\\"\", n=1.5, on=True, x=None, l=[1, \"a\"]), now()]"
        "<|tool_call_end|>Let me check.<|im_end|>\n<|im_start|>tool\n<|tool_response_start|>{\"t\": 21}"
        "<|tool_response_end|><|im_end|>\n<|im_start|>tool\n<|tool_response_start|>12:00<|tool_response_end|>"
        "<|im_end|>\n<|im_start|>assistant\nSunny.<|im_end|>\n<|im_start|>assistant\n";
    char want[4096];
    snprintf(want, sizeof want, "<|startoftext|><|im_start|>system\nBe brief.\n%s<|im_end|>\n%s", list, turns);
    check_render(&t, m, 6, rg_json_root(tools), want);
    snprintf(want, sizeof want, "<|startoftext|><|im_start|>system\n%s<|im_end|>\n%s", list, turns);
    check_render(&t, m + 1, 5, rg_json_root(tools), want);
    m[0] = (rg_chat_message)MSG("system", "");
    check_render(&t, m, 6, rg_json_root(tools), want);
    rg_json_free(tools);
    rg_json_free(calls);
    rg_chat_template_free(&t);
}

// What cannot be rendered: tools with families that have no tool layout, calls that are not
// OpenAI's shape, arguments that are not JSON.
static void test_render_refusals(void) {
    static const char *const builtin[] = {"llama3", "llama3.1", "gemma"};
    rg_json_doc *tools = J(weather_tools), *calls = J(two_calls);
    rg_chat_message m[5];
    conversation(m, rg_json_root(calls));
    rg_chat_rendered r;
    rg_error err = {0};
    for (size_t i = 0; i < 3; i++) {
        rg_chat_template t;
        RG_REQUIRE(rg_chat_template_builtin(&t, builtin[i], NULL, &err) == RG_OK, "%s", err.msg);
        rg_chat_options opt = {.tools = rg_json_root(tools)};
        const rg_chat_message user = MSG("user", "x");
        rg_status st = rg_chat_render(&t, &user, 1, &opt, &r, &err);
        RG_CHECK(st == RG_ERR_UNSUPPORTED && strstr(err.msg, builtin[i]), "%s tools: %d %s", builtin[i], st, err.msg);
        st = rg_chat_render(&t, m, 2, NULL, &r, &err);
        RG_CHECK(st == RG_ERR_UNSUPPORTED && strstr(err.msg, builtin[i]), "%s calls: %d %s", builtin[i], st, err.msg);
        rg_chat_template_free(&t);
    }
    static const struct {
        const char *calls, *tools, *want;
    } bad[] = {
        {"{\"function\": {}}", NULL, "tool_calls must be an array"},
        {"[{\"function\": {\"arguments\": \"{}\"}}]", NULL, "has no function name"},
        {"[{\"function\": {\"name\": \"f\"}}]", NULL, "has no arguments"},
        {"[{\"function\": {\"name\": \"f\", \"arguments\": \"{oops\"}}]", NULL, "arguments are not JSON"},
        {"[]", "{\"type\": \"function\"}", "tools must be an array"},
    };
    rg_chat_template t;
    RG_REQUIRE(rg_chat_template_builtin(&t, "chatml", NULL, &err) == RG_OK, "%s", err.msg);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rg_json_doc *c = J(bad[i].calls), *tl = bad[i].tools ? J(bad[i].tools) : NULL;
        m[1].tool_calls = rg_json_root(c);
        rg_chat_options opt = {.tools = tl ? rg_json_root(tl) : NULL};
        rg_status st = rg_chat_render(&t, m, 2, &opt, &r, &err);
        RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, bad[i].want), "case %zu: %d %s", i, st, err.msg);
        rg_json_free(c);
        rg_json_free(tl);
    }
    rg_chat_template_free(&t);
    // LFM2 writes name(key=value): the arguments must be an object.
    RG_REQUIRE(rg_chat_template_builtin(&t, "lfm2", NULL, &err) == RG_OK, "%s", err.msg);
    rg_json_doc *c = J("[{\"function\": {\"name\": \"f\", \"arguments\": \"[1]\"}}]");
    m[1].tool_calls = rg_json_root(c);
    rg_status st = rg_chat_render(&t, m, 2, NULL, &r, &err);
    RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, "must be an object"), "lfm2: %d %s", st, err.msg);
    m[0].tool_calls = rg_json_root(calls);  // calls on a user message
    st = rg_chat_render(&t, m, 1, NULL, &r, &err);
    RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, "message 0"), "user calls: %d %s", st, err.msg);
    rg_json_free(c);
    rg_chat_template_free(&t);
    rg_json_free(tools);
    rg_json_free(calls);
}

// LFM2: a call whose argument names are not Python-style names is written in the dict form.
static void test_render_lfm2_dict_form(void) {
    rg_chat_template t;
    rg_error err = {0};
    RG_REQUIRE(rg_chat_template_builtin(&t, "lfm2", NULL, &err) == RG_OK, "%s", err.msg);
    rg_json_doc *calls = J("[{\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a b\\\": [true]}\"}}, "
                           "{\"function\": {\"name\": \"g\", \"arguments\": {\"k\": 1}}}]");
    rg_chat_message m[] = {MSG("user", "x"), MSG("assistant", "")};
    m[1].tool_calls = rg_json_root(calls);
    rg_chat_options opt = {0};
    rg_chat_rendered r;
    RG_REQUIRE(rg_chat_render(&t, m, 2, &opt, &r, &err) == RG_OK, "%s", err.msg);
    static const char want[] = "<|startoftext|><|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<|tool_call_start|>"
                               "[{\"name\": \"f\", \"arguments\": {\"a b\": [True]}}, g(k=1)]<|tool_call_end|><|im_end|>\n";
    RG_CHECK(strcmp(r.text, want) == 0, "%s", r.text);
    rg_chat_rendered_free(&r);
    rg_json_free(calls);
    rg_chat_template_free(&t);
}

// json.dumps(x, ensure_ascii=False) as transformers' tojson writes it.
static void test_pyjson_dumps(void) {
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"{\"a\":1,\"b\":[true,false,null],\"c\":{}}", "{\"a\": 1, \"b\": [true, false, null], \"c\": {}}"},
        {"[1.0, 1.50, 1e16, 1E5, 1.5e-5, 0.0001, -0.0, 123456789012345678.0, 2.5e300, 1e999]",
         "[1.0, 1.5, 1e+16, 100000.0, 1.5e-05, 0.0001, -0.0, 1.2345678901234568e+17, 2.5e+300, Infinity]"},
        {"[-0, 123456789012345678901234567890]", "[0, 123456789012345678901234567890]"},
        {"\"\\u00e9\\u4e2d\\ud83d\\ude00 \\\" \\\\ / \\b\\f\\n\\r\\t \\u0001\\u001f\\u007f\"",
         "\"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80 \\\" \\\\ / \\b\\f\\n\\r\\t \\u0001\\u001f\x7F\""},
        {"[[], {\"k\": [{}]}]", "[[], {\"k\": [{}]}]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rg_json_doc *d = J(cases[i].in);
        rg_jw w;
        rg_jw_init(&w);
        rg_pyjson_dumps(&w, rg_json_root(d));
        const char *got = rg_jw_text(&w, NULL);
        RG_CHECK(got && strcmp(got, cases[i].want) == 0, "case %zu: %s, want %s", i, got, cases[i].want);
        rg_jw_free(&w);
        rg_json_free(d);
    }
}

// One parse case: the text, then what must come out (calls as "name args;" pairs).
typedef struct parse_case {
    const char *text;
    rg_tool_calls_status status;
    const char *content;  // NULL: the text itself
    const char *calls;    // "name ARGS\n" per call
    const char *err;      // a substring of the error (UNPARSABLE)
} parse_case;

static void run_parse_cases(rg_chat_family f, const parse_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const parse_case *c = &cases[i];
        rg_tool_calls out;
        rg_error err = {0};
        rg_status st = rg_tool_calls_parse(f, c->text, strlen(c->text), &out, &err);
        RG_CHECK(st == RG_OK, "case %zu: %s", i, err.msg);
        RG_CHECK(out.status == c->status, "case %zu: status %d, want %d (%s)", i, out.status, c->status, err.msg);
        const char *want_content = c->content ? c->content : c->text;
        RG_CHECK(out.content && strcmp(out.content, want_content) == 0, "case %zu: content '%s', want '%s'", i,
                 out.content, want_content);
        char got[2048] = "";
        for (size_t k = 0; k < out.n_calls; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s %s\n", out.calls[k].name, out.calls[k].arguments);
        RG_CHECK(strcmp(got, c->calls ? c->calls : "") == 0, "case %zu: calls\n%s--- want\n%s", i, got,
                 c->calls ? c->calls : "");
        if (c->err) RG_CHECK(strstr(err.msg, c->err) != NULL, "case %zu: error '%s', want '%s'", i, err.msg, c->err);
        rg_tool_calls_free(&out);
    }
}

static void test_parse_hermes(void) {
    static const parse_case cases[] = {
        {"Just text.\n", RG_TOOL_CALLS_NONE, NULL, NULL, NULL},
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
         RG_TOOL_CALLS_OK, "", "get_weather {\"city\":\"Paris\"}\n", NULL},
        {"Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2.5e3, null]}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n",
         RG_TOOL_CALLS_OK, "Let me check.", "a {\"x\":[1,2.5e3,null]}\nb {}\n", NULL},
        {"<tool_call>{\"name\": \"a\", \"arguments\": {\"s\": \"\\u00e9\\n\\\"q\\\" \\ud83d\\ude00\"}}</tool_call> after",
         RG_TOOL_CALLS_OK, "after", "a {\"s\":\"\xC3\xA9\\n\\\"q\\\" \xF0\x9F\x98\x80\"}\n", NULL},
        {"<tool_call>\n{\"name\": \"a\", \"arguments\": \"{\\\"k\\\": 1}\"}\n</tool_call>", RG_TOOL_CALLS_OK, "",
         "a {\"k\":1}\n", NULL},
        {"<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": 1}\n", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL,
         "tool call 0 at byte 0: no </tool_call> after <tool_call>"},
        {"x <tool_call>\n{\"name\": \"a\", \"arguments\": {'k': 1}}\n</tool_call>", RG_TOOL_CALLS_UNPARSABLE, NULL,
         NULL, "tool call 0 at byte 2: the JSON from byte 13 does not parse: line 2, column 29"},
        {"<tool_call>{\"arguments\": {}}</tool_call>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "\"name\" string"},
        {"<tool_call>{\"name\": \"a\", \"arguments\": [1]}</tool_call>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL,
         "is array, not an object"},
        {"<tool_call>{\"name\": \"a\"}</tool_call>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "is missing"},
        {"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": 1}"
         "</tool_call>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "tool call 1 at byte 53: its \"arguments\" is number"},
    };
    run_parse_cases(RG_CHAT_CHATML, cases, sizeof cases / sizeof cases[0]);
}

static void test_parse_lfm2(void) {
    static const parse_case cases[] = {
        {"No calls here.", RG_TOOL_CALLS_NONE, NULL, NULL, NULL},
        {"<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|>Checking.", RG_TOOL_CALLS_OK, "Checking.",
         "get_weather {\"city\":\"Paris\"}\n", NULL},
        {"<|tool_call_start|>[f(a='it\\'s', b=\"\\u00e9\\n\\x41\", n=-3, x=1.5, y=1., z=.5, e=2e3, t=True, "
         "u=false, v=None, l=[1, 'a', (2, 3)], d={'k': {\"j\": null}},), now()]<|tool_call_end|>",
         RG_TOOL_CALLS_OK, "",
         "f {\"a\":\"it's\",\"b\":\"\xC3\xA9\\nA\",\"n\":-3,\"x\":1.5,\"y\":1,\"z\":0.5,\"e\":2e3,\"t\":true,"
         "\"u\":false,\"v\":null,\"l\":[1,\"a\",[2,3]],\"d\":{\"k\":{\"j\":null}}}\nnow {}\n", NULL},
        {"Sure. <|tool_call_start|>[a(x=1)]<|tool_call_end|> and <|tool_call_start|>[b(y='\xF0\x9F\x98\x80')]"
         "<|tool_call_end|> done", RG_TOOL_CALLS_OK, "Sure.  and  done", "a {\"x\":1}\nb {\"y\":\"\xF0\x9F\x98\x80\"}\n",
         NULL},
        {"<|tool_call_start|>[{\"name\": \"a\", \"arguments\": {\"k\": True}}]<|tool_call_end|>", RG_TOOL_CALLS_OK,
         "", "a {\"k\":true}\n", NULL},
        {"<|tool_call_start|>[]<|tool_call_end|>", RG_TOOL_CALLS_OK, "", NULL, NULL},
        {"<|tool_call_start|>[a(x=1)", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "no <|tool_call_end|>"},
        {"<|tool_call_start|>[a(x=1]<|tool_call_end|>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL,
         "byte 25: ',' or ')', found ']'"},
        {"<|tool_call_start|>[a(1)]<|tool_call_end|>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "an argument name"},
        {"<|tool_call_start|>[a(s='open)]<|tool_call_end|>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "a closing"},
        {"<|tool_call_start|>[a(x=1, x=2)]<|tool_call_end|>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "duplicate"},
        {"<|tool_call_start|>[a(x=nope)]<|tool_call_end|>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "a value"},
        {"<|tool_call_start|>a(x=1)<|tool_call_end|>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "'[' opening"},
        {"<|tool_call_start|>[a(x={1: 2})]<|tool_call_end|>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "a string key"},
        {"<|tool_call_start|>[a(x=1)] junk<|tool_call_end|>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "the end of"},
        {"<|tool_call_start|>[a(s='\\ud800')]<|tool_call_end|>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL, "code point"},
        {"<|tool_call_start|>[ab\xE8" "c()]<|tool_call_end|>", RG_TOOL_CALLS_UNPARSABLE, NULL, NULL,
         "byte 20: the function name is not well-formed UTF-8"},
        {"<|tool_call_start|>[caf\xC3\xA9(n\xC3\xBC=1)]<|tool_call_end|>", RG_TOOL_CALLS_OK, "",
         "caf\xC3\xA9 {\"n\xC3\xBC\":1}\n", NULL},
    };
    run_parse_cases(RG_CHAT_LFM2, cases, sizeof cases / sizeof cases[0]);
    rg_tool_calls out;
    rg_error err = {0};
    RG_CHECK(rg_tool_calls_parse(RG_CHAT_GEMMA, "x", 1, &out, &err) == RG_ERR_UNSUPPORTED &&
                 strstr(err.msg, "gemma"), "gemma: %s", err.msg);
}

// A rendered call parses back to the same call (Hermes and LFM2 write what they read).
static void test_render_parse_roundtrip(void) {
    static const char *const families[] = {"chatml", "lfm2"};
    rg_json_doc *calls = J(two_calls);
    for (size_t i = 0; i < 2; i++) {
        rg_chat_template t;
        rg_error err = {0};
        RG_REQUIRE(rg_chat_template_builtin(&t, families[i], NULL, &err) == RG_OK, "%s", err.msg);
        rg_chat_message m[5];
        conversation(m, rg_json_root(calls));
        rg_chat_rendered r;
        RG_REQUIRE(rg_chat_render(&t, m, 2, NULL, &r, &err) == RG_OK, "%s", err.msg);
        const char *b = r.text + r.spans[1].role_end + 1, *e = r.text + r.spans[1].marker_end - strlen("<|im_end|>");
        rg_tool_calls out;
        RG_CHECK(rg_tool_calls_parse(t.family, b, (size_t)(e - b), &out, &err) == RG_OK, "%s", err.msg);
        RG_CHECK(out.status == RG_TOOL_CALLS_OK && out.n_calls == 2 && strcmp(out.content, "Let me check.") == 0,
                 "%s: status %d, %zu calls, content '%s' (%s)", families[i], out.status, out.n_calls, out.content, err.msg);
        if (out.n_calls == 2)
            RG_CHECK(!strcmp(out.calls[0].arguments, "{\"city\":\"Z\xC3\xBCrich\",\"days\":2}") &&
                         !strcmp(out.calls[1].name, "now") && !strcmp(out.calls[1].arguments, "{}"),
                     "%s: %s %s", families[i], out.calls[0].arguments, out.calls[1].arguments);
        rg_tool_calls_free(&out);
        rg_chat_rendered_free(&r);
        rg_chat_template_free(&t);
    }
    rg_json_free(calls);
}

static void test_stream_hold_back(void) {
    static const struct {
        rg_chat_family f;
        const char *text;
        size_t safe;
    } cases[] = {
        {RG_CHAT_CHATML, "Hello", 5},           {RG_CHAT_CHATML, "Hello <", 6},
        {RG_CHAT_CHATML, "Hello <tool_c", 6},   {RG_CHAT_CHATML, "a <tool_call>\n{\"na", 2},
        {RG_CHAT_CHATML, "a <b>", 5},           {RG_CHAT_CHATML, "<tool_call", 0},
        {RG_CHAT_LFM2, "x <|tool_call_s", 2},   {RG_CHAT_LFM2, "x <|tool_response", 17},
        {RG_CHAT_LFM2, "<|tool_call_start|>[", 0}, {RG_CHAT_LLAMA3, "<tool_call>", 11},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].text), safe = rg_tool_calls_safe_len(cases[i].f, cases[i].text, n);
        RG_CHECK(safe == cases[i].safe, "case %zu '%s': safe %zu, want %zu", i, cases[i].text, safe, cases[i].safe);
        RG_CHECK(rg_tool_calls_may_start(cases[i].f, cases[i].text, n) == (cases[i].safe < n), "case %zu", i);
    }
}

static void test_tool_choice(void) {
    rg_json_doc *tools = J(weather_tools);
    static const struct {
        const char *choice;  // NULL: absent
        rg_status st;
        rg_tool_choice_mode mode;
        const char *err;
    } cases[] = {
        {NULL, RG_OK, RG_TOOL_CHOICE_AUTO, NULL},
        {"\"auto\"", RG_OK, RG_TOOL_CHOICE_AUTO, NULL},
        {"\"none\"", RG_OK, RG_TOOL_CHOICE_NONE, NULL},
        {"\"required\"", RG_OK, RG_TOOL_CHOICE_REQUIRED, NULL},
        {"{\"type\": \"function\", \"function\": {\"name\": \"now\"}}", RG_OK, RG_TOOL_CHOICE_FUNCTION, NULL},
        {"{\"type\": \"function\", \"function\": {\"name\": \"nope\"}}", RG_ERR_ARG, 0, "'nope' is not one of tools"},
        {"\"sometimes\"", RG_ERR_ARG, 0, "tool_choice must be"},
        {"{\"function\": {\"name\": \"now\"}}", RG_ERR_ARG, 0, "an object must be"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rg_json_doc *c = cases[i].choice ? J(cases[i].choice) : NULL;
        rg_tool_choice tc;
        rg_error err = {0};
        rg_status st = rg_tool_choice_parse(rg_json_root(tools), c ? rg_json_root(c) : NULL, &tc, &err);
        RG_CHECK(st == cases[i].st && (st || tc.mode == cases[i].mode), "case %zu: %d mode %d (%s)", i, st, tc.mode,
                 err.msg);
        if (cases[i].err) RG_CHECK(strstr(err.msg, cases[i].err) != NULL, "case %zu: %s", i, err.msg);
        rg_json_free(c);
    }
    static const char *const bad_tools[][2] = {
        {"{}", "tools must be an array"},
        {"[{\"type\": \"function\"}]", "tools[0]: needs \"function\""},
        {"[{\"function\": {\"name\": \"a\"}}]", "tools[0]: \"type\""},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"a\"}}, {\"type\": \"function\", \"function\": "
         "{\"name\": \"a\"}}]", "tools[1]: the function name 'a' is used twice"},
    };
    for (size_t i = 0; i < 4; i++) {
        rg_json_doc *t = J(bad_tools[i][0]);
        rg_tool_choice tc;
        rg_error err = {0};
        rg_status st = rg_tool_choice_parse(rg_json_root(t), NULL, &tc, &err);
        RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, bad_tools[i][1]), "bad tools %zu: %d %s", i, st, err.msg);
        rg_json_free(t);
    }
    rg_json_doc *req = J("\"required\"");
    rg_tool_choice tc;
    rg_error err = {0};
    RG_CHECK(rg_tool_choice_parse(NULL, rg_json_root(req), &tc, &err) == RG_ERR_ARG, "required without tools");
    rg_json_free(req);
    rg_json_free(tools);
}

// Parsed calls against the request's tools and tool_choice.
static void test_tool_calls_check(void) {
    rg_json_doc *tools = J(weather_tools);
    static const struct {
        const char *text;
        rg_tool_choice choice;
        rg_tool_calls_status status;
        const char *err;
    } cases[] = {
        {"<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>", {RG_TOOL_CHOICE_AUTO, NULL, 0},
         RG_TOOL_CALLS_OK, NULL},
        {"<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>", {RG_TOOL_CHOICE_AUTO, NULL, 0},
         RG_TOOL_CALLS_UNPARSABLE, "tool call 0 names 'rm', which is not one of the request's tools"},
        {"<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>", {RG_TOOL_CHOICE_NONE, NULL, 0},
         RG_TOOL_CALLS_UNPARSABLE, "\"none\""},
        {"plain", {RG_TOOL_CHOICE_REQUIRED, NULL, 0}, RG_TOOL_CALLS_UNPARSABLE, "requires one"},
        {"plain", {RG_TOOL_CHOICE_AUTO, NULL, 0}, RG_TOOL_CALLS_NONE, NULL},
        {"<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>", {RG_TOOL_CHOICE_FUNCTION, "get_weather", 11},
         RG_TOOL_CALLS_UNPARSABLE, "tool_choice asks for 'get_weather'"},
        {"<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>", {RG_TOOL_CHOICE_FUNCTION, "now", 3},
         RG_TOOL_CALLS_OK, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rg_tool_calls out;
        rg_error err = {0};
        RG_REQUIRE(rg_tool_calls_parse(RG_CHAT_CHATML, cases[i].text, strlen(cases[i].text), &out, &err) == RG_OK,
                   "%s", err.msg);
        RG_CHECK(rg_tool_calls_check(&out, rg_json_root(tools), &cases[i].choice, &err) == RG_OK, "%s", err.msg);
        RG_CHECK(out.status == cases[i].status, "case %zu: status %d (%s)", i, out.status, err.msg);
        if (cases[i].err) RG_CHECK(strstr(err.msg, cases[i].err) != NULL, "case %zu: %s", i, err.msg);
        if (out.status == RG_TOOL_CALLS_UNPARSABLE)
            RG_CHECK(out.n_calls == 0 && strcmp(out.content, cases[i].text) == 0, "case %zu: content %s", i, out.content);
        rg_tool_calls_free(&out);
    }
    rg_json_free(tools);
}

// --render: one request on stdin, its render on stdout (for the jinja2 comparison).
static int render_stdin(void) {
    size_t len, cap = 1 << 16;
    char *in = malloc(cap);
    for (len = 0; in && !feof(stdin);) {
        len += fread(in + len, 1, cap - len, stdin);
        if (len == cap) in = realloc(in, cap *= 2);
    }
    rg_json_doc *doc = NULL;
    rg_error err = {0};
    if (!in || rg_json_parse(&doc, in, len, NULL, &err)) return fprintf(stderr, "request: %s\n", err.msg), 1;
    const rg_json *req = rg_json_root(doc), *msgs = rg_json_get(req, "messages");
    size_t tl;
    const char *tmpl = rg_json_str(rg_json_get(req, "template"), &tl);
    rg_chat_template t;
    if (rg_chat_template_parse(&t, tmpl, tl, rg_json_str(rg_json_get(req, "bos"), NULL), &err))
        return fprintf(stderr, "template: %s\n", err.msg), 1;
    size_t n = rg_json_len(msgs);
    rg_chat_message *m = calloc(n + 1, sizeof *m);
    for (size_t i = 0; i < n; i++) {
        const rg_json *j = rg_json_at(msgs, i);
        m[i].role = rg_json_str(rg_json_get(j, "role"), &m[i].role_len);
        m[i].content = rg_json_str(rg_json_get(j, "content"), &m[i].content_len);
        m[i].name = rg_json_str(rg_json_get(j, "name"), &m[i].name_len);
        m[i].tool_calls = rg_json_get(j, "tool_calls");
    }
    rg_chat_options opt = {.add_generation_prompt = rg_json_bool(rg_json_get(req, "add_generation_prompt")),
                           .tools = rg_json_get(req, "tools")};
    rg_chat_rendered r;
    int rc = 0;
    if (rg_chat_render(&t, m, n, &opt, &r, &err)) {
        fprintf(stderr, "render: %s\n", err.msg);
        rc = 1;
    } else {
        fwrite(r.text, 1, r.len, stdout);
        rg_chat_rendered_free(&r);
    }
    free(m);
    rg_chat_template_free(&t);
    rg_json_free(doc);
    free(in);
    return rc;
}

static const rg_test_case cases[] = {
    RG_TEST(test_render_qwen25_tools),
    RG_TEST(test_render_chatml_without_tool_section),
    RG_TEST(test_render_lfm2_tools),
    RG_TEST(test_render_refusals),
    RG_TEST(test_render_lfm2_dict_form),
    RG_TEST(test_pyjson_dumps),
    RG_TEST(test_parse_hermes),
    RG_TEST(test_parse_lfm2),
    RG_TEST(test_render_parse_roundtrip),
    RG_TEST(test_stream_hold_back),
    RG_TEST(test_tool_choice),
    RG_TEST(test_tool_calls_check),
    {0},
};

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--render") == 0) return render_stdin();
    return rg_test_run(argc, argv, cases);
}
