// test_serve_request.c - the server's pure pieces: OpenAI request bodies read and range-checked
// (serve/serve_request.h), the JSON writer (base/json_write.h), and the Host header check (serve/serve_http.h).
#include <math.h>
#include <string.h>

#include "base/json.h"
#include "base/json_write.h"
#include "rg_test.h"
#include "serve/serve_http.h"
#include "serve/serve_request.h"

static bool parse(rg_serve_req *r, rg_serve_kind k, const char *body, rg_serve_error *e) {
    const rg_serve_limits lim = {.max_body = 4096, .max_tokens = 512, .max_messages = 8};
    return rg_serve_req_parse(r, k, body, strlen(body), &lim, e);
}

static void test_chat_fields(void) {
    rg_serve_req r;
    rg_serve_error e;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"bc\"}]}],"
                       "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"max_tokens\":7,\"temperature\":0,"
                       "\"top_p\":0.5,\"seed\":-3,\"stop\":[\"x\",\"yz\"],\"logprobs\":true,\"top_logprobs\":3,"
                       "\"user\":\"ignored\",\"unknown_vendor_field\":{}}";
    RG_REQUIRE(parse(&r, RG_SERVE_CHAT, body, &e), "%s", e.msg);
    RG_CHECK(r.n_messages == 2 && strcmp(r.messages[0].role, "system") == 0, "developer reads as system");
    RG_CHECK(r.messages[1].content_len == 3 && memcmp(r.messages[1].content, "abc", 3) == 0, "parts joined: %.*s",
             (int)r.messages[1].content_len, r.messages[1].content);
    RG_CHECK(r.stream && r.include_usage && r.max_tokens == 7, "stream %d usage %d max %lld", r.stream,
             r.include_usage, (long long)r.max_tokens);
    RG_CHECK(r.sampling.temp == 0 && r.sampling.top_p == 0.5f && r.sampling.top_k == 0 && r.sampling.min_p == 0,
             "sampling read, top_k and min_p off by default");
    RG_CHECK(r.seed_given && r.sampling.seed == (uint64_t)-3, "seed");
    RG_CHECK(r.n_stop == 2 && r.stop_len[1] == 2 && memcmp(r.stop[1], "yz", 2) == 0, "stop strings");
    RG_CHECK(r.logprobs && r.top_logprobs == 3, "logprobs");
    rg_serve_req_free(&r);
}

static void test_completion_prompts(void) {
    rg_serve_req r;
    rg_serve_error e;
    RG_REQUIRE(parse(&r, RG_SERVE_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"once\"],\"logprobs\":2}", &e), "%s", e.msg);
    RG_CHECK(r.prompt_len == 4 && r.logprobs && r.top_logprobs == 2, "a list of one prompt; logprobs as a count");
    rg_serve_req_free(&r);
    RG_REQUIRE(parse(&r, RG_SERVE_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,2,3]}", &e), "%s", e.msg);
    RG_CHECK(r.n_prompt_tokens == 3 && r.prompt_tokens[2] == 3, "token prompt");
    rg_serve_req_free(&r);
}

// Each body is refused with this param named and a message containing want.
static void refused(rg_serve_kind k, const char *body, int http, const char *param, const char *want) {
    rg_serve_req r;
    rg_serve_error e;
    if (parse(&r, k, body, &e)) {
        rg_serve_req_free(&r);
        RG_CHECK(0, "accepted: %s", body);
        return;
    }
    RG_CHECK(e.http == http, "%s: http %d, want %d", body, e.http, http);
    RG_CHECK(strcmp(e.param, param) == 0, "%s: param '%s', want '%s'", body, e.param, param);
    RG_CHECK(strstr(e.msg, want) != NULL, "%s: message '%s' lacks '%s'", body, e.msg, want);
    RG_CHECK(e.type && strcmp(e.type, http == 413 ? "invalid_request_error" : "invalid_request_error") == 0, "type");
}

static void test_refusals(void) {
    const rg_serve_kind C = RG_SERVE_CHAT, P = RG_SERVE_COMPLETION;
    refused(C, "", 400, "", "not valid JSON");
    refused(C, "[]", 400, "", "JSON object");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "model", "required");
    refused(C, "{\"model\":\"m\",\"messages\":[]}", 400, "messages", "non-empty");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"king\",\"content\":\"x\"}]}", 400, "messages[0]", "king");
    // (a client's string echoed in a message keeps it one line: control bytes become spaces)
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"a\\nb\\u0001\",\"content\":\"x\"}]}", 400,
            "messages[0]", "is 'a b '");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400,
            "messages[0].content", "image_url");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":2.5}", 400,
            "temperature", "[0, 2]");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", 400,
            "temperature", "number");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}", 400, "top_p",
            "(0, 1]");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":513}", 400,
            "max_tokens", "[1, 512]");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}", 400,
            "max_tokens", "integer");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", 400, "n", "[1, 1]");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frequency_penalty\":0.5}",
            400, "frequency_penalty", "not supported");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
            400, "stop", "at most 4");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":21,\"logprobs\":true}",
            400, "top_logprobs", "[0, 20]");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", 400,
            "top_logprobs", "logprobs");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
            400, "tool_choice", "needs a non-empty tools array");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"web\"}]}",
            400, "tools", "tools[0]");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"lora\":[{\"id\":-1}]}", 400,
            "lora", "lora[0]");
    refused(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
            400, "response_format", "json_object");
    refused(C, "{\"model\":\"m\",\"messages\":[1,2,3,4,5,6,7,8,9]}", 400, "messages", "at most 8");
    refused(P, "{\"model\":\"m\",\"prompt\":\"\"}", 400, "prompt", "empty");
    refused(P, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", 400, "prompt", "one per request");
    refused(P, "{\"model\":\"m\",\"prompt\":[1,-2]}", 400, "prompt", "prompt[1]");
    refused(P, "{\"model\":\"m\",\"prompt\":\"x\",\"echo\":true}", 400, "echo", "not supported");
    refused(P, "{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":6}", 400, "logprobs", "[0, 5]");
    char big[5000];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = 0;
    rg_serve_req r;
    rg_serve_error e;
    RG_CHECK(!parse(&r, C, big, &e) && e.http == 413, "a body over max_body: http %d", e.http);
}

static void test_json_write(void) {
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "s", "q\"\\\n\x01");
    rg_jw_key(&w, "bad");
    rg_jw_strn(&w, "a\xff" "b\xe2\x82", 5);  // invalid and truncated UTF-8
    rg_jw_key(&w, "a");
    rg_jw_arr(&w);
    rg_jw_i64(&w, -5);
    rg_jw_f64(&w, 0.1);
    rg_jw_f64(&w, NAN);
    rg_jw_bool(&w, true);
    rg_jw_null(&w);
    rg_jw_arr_end(&w);
    rg_jw_obj_end(&w);
    size_t n;
    const char *t = rg_jw_text(&w, &n);
    const char *want = "{\"s\":\"q\\\"\\\\\\n\\u0001\",\"bad\":\"a\\ufffdb\\ufffd\\ufffd\",\"a\":[-5,0.1,null,true,null]}";
    RG_CHECK(t && strcmp(t, want) == 0, "got %s", t ? t : "(null)");
    // What the writer writes, the strict reader reads back.
    rg_json_doc *d;
    rg_error err;
    RG_CHECK(rg_json_parse(&d, t, n, NULL, &err) == RG_OK, "reads back: %s", err.msg);
    rg_jw w2;
    rg_jw_init(&w2);
    rg_jw_value(&w2, rg_json_root(d));
    const char *want2 = "{\"s\":\"q\\\"\\\\\\n\\u0001\",\"bad\":\"a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd\","
                        "\"a\":[-5,0.1,null,true,null]}";  // U+FFFD now read, written as its bytes
    RG_CHECK(strcmp(rg_jw_text(&w2, NULL), want2) == 0, "rg_jw_value round trip: %s", rg_jw_text(&w2, NULL));
    rg_json_free(d);
    rg_jw_free(&w2);
    rg_jw_free(&w);
}

static void test_host_header(void) {
    RG_CHECK(rg_serve_host_allowed("127.0.0.1", "127.0.0.1:8080"), "ip:port");
    RG_CHECK(rg_serve_host_allowed("127.0.0.1", "localhost"), "localhost");
    RG_CHECK(rg_serve_host_allowed("127.0.0.1", "LOCALHOST:1"), "case");
    RG_CHECK(rg_serve_host_allowed("127.0.0.1", "[::1]:8080"), "[::1]");
    RG_CHECK(!rg_serve_host_allowed("127.0.0.1", "evil.example:8080"), "a rebound name");
    RG_CHECK(!rg_serve_host_allowed("127.0.0.1", "127.0.0.1:80x"), "a bad port");
    RG_CHECK(!rg_serve_host_allowed("127.0.0.1", NULL), "no Host");
    RG_CHECK(!rg_serve_host_allowed("127.0.0.1", "[::1"), "unclosed bracket");
    RG_CHECK(rg_serve_host_allowed("10.1.2.3", "10.1.2.3:9"), "named address");
    RG_CHECK(!rg_serve_host_allowed("10.1.2.3", "localhost"), "named address, other host");
    RG_CHECK(rg_serve_host_allowed("0.0.0.0", "anything"), "any address");
    RG_CHECK(rg_serve_host_is_loopback("127.3.4.5") && !rg_serve_host_is_loopback("10.0.0.1"), "loopback");
}

static const rg_test_case cases[] = {
    RG_TEST(test_chat_fields), RG_TEST(test_completion_prompts), RG_TEST(test_refusals),
    RG_TEST(test_json_write),  RG_TEST(test_host_header),        {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
