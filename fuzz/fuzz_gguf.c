// fuzz_gguf.c - libFuzzer target for the GGUF reader (src/gguf/gguf_read.c).
//
// Parses the input with rg_gguf_open_memory and, when the reader accepts it,
// touches everything the reader promised is valid: every element of every
// value through the accessors, every byte range of every tensor's data (first
// and last byte), and a few lookups. ASan/UBSan then catch any promise broken.
//
// A file the reader accepts then goes to the tokenizer loader and the chat-template recognizer,
// as a model's file does: a tokenizer that loads encodes and decodes a short text (every id in
// range, byte-level vocabularies give the text back), and a template that is recognized renders
// a short conversation. Refusals must be errors of the expected kinds.
//
// Build and run: scripts/fuzz.sh gguf [SECONDS] (configures build-fuzz with clang and
// -DRG_FUZZ=ON; the CMake build links every fuzz/fuzz_*.c with -fsanitize=fuzzer).
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "support.h"
#include "text/chat.h"
#include "text/tokenizer.h"

// Keeps the compiler from dropping reads whose results are otherwise unused.
static volatile uint64_t sink;

static void touch_bytes(const void *p, uint64_t n) {
    if (n == 0) return;
    const volatile uint8_t *b = p;
    sink += b[0];
    sink += b[n - 1];
}

static void walk_kv(const rg_gguf_kv *kv) {
    sink += kv->key.len;
    touch_bytes(kv->key.ptr, kv->key.len);
    if (strlen(kv->key.ptr) != kv->key.len) __builtin_trap();  // keys are NUL-terminated copies
    uint32_t t = kv->type == RG_GGUF_ARRAY ? kv->arr_type : kv->type;
    sink += (uint64_t)(uintptr_t)rg_gguf_vtype_name(kv->type) + (uint64_t)(uintptr_t)rg_gguf_vtype_name(t);
    if (kv->type != RG_GGUF_ARRAY && kv->n != 1) __builtin_trap();  // a scalar holds one element
    for (uint64_t i = 0; i < kv->n; i++) {
        if (t == RG_GGUF_STRING) {
            rg_gguf_str s = rg_gguf_kv_str(kv, i);
            if (!s.ptr && s.len) __builtin_trap();
            touch_bytes(s.ptr, s.len);
            sink += s.len;
        } else {
            uint64_t u;
            int64_t v;
            double d;
            bool okf = rg_gguf_kv_f64(kv, i, &d);
            if (rg_gguf_kv_u64(kv, i, &u)) sink += u;
            if (rg_gguf_kv_i64(kv, i, &v)) sink += (uint64_t)v;
            if (!okf) __builtin_trap();  // every numeric or bool element converts to double
            sink += (uint64_t)(d == d);
        }
    }
    // One past the end must be refused, not read.
    uint64_t u;
    if (t != RG_GGUF_STRING && rg_gguf_kv_u64(kv, kv->n, &u)) __builtin_trap();
    if (t == RG_GGUF_STRING && rg_gguf_kv_str(kv, kv->n).ptr) __builtin_trap();
}

static void walk_tensor(const rg_gguf *g, const rg_gguf_tensor *t, const uint8_t *file) {
    sink += strlen(t->name) + t->n_dims + t->type + t->offset;
    for (int d = 0; d < RG_GGUF_MAX_DIMS; d++) sink += (uint64_t)t->ne[d];
    if (t->nbytes > 0) {
        const uint8_t *p = t->data;
        // The data lies inside the buffer: [data_start + offset, + nbytes) within file_size.
        if (p != file + g->data_start + t->offset || g->data_start + t->offset + t->nbytes > g->file_size)
            __builtin_trap();
        touch_bytes(p, t->nbytes);
    }
    if (rg_gguf_find_tensor(g, t->name) != t) __builtin_trap();  // names are unique
}

// The model's tokenizer and chat template, as the CLI loads them from an accepted file.
static void check_tokenizer(const rg_gguf *g) {
    rg_tokenizer *tok = NULL;
    rg_error err = {0};
    rg_status st = rg_tokenizer_load(&tok, g, &err);
    if (st) {
        FZ_CHECK(!tok, "a failed tokenizer load returned a tokenizer");
        fz_check_error(st, &err, FZ_STATUS(RG_ERR_FORMAT) | FZ_STATUS(RG_ERR_UNSUPPORTED) | FZ_STATUS(RG_ERR_NOT_FOUND),
                       "rg_tokenizer_load");
        return;
    }
    static const char text[] = "Hi <|im_start|>\xC3\xA9 \xFF 12345 <s>";
    const rg_tokenizer_info *in = rg_tokenizer_get_info(tok);
    for (int parse = 0; parse < 2; parse++) {
        int32_t *ids = NULL;
        size_t n = 0;
        FZ_CHECK(rg_tokenize_alloc(tok, text, sizeof text - 1, parse, parse, &ids, &n, &err) == RG_OK,
                 "tokenize: %s", err.msg);
        for (size_t i = 0; i < n; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < in->n_tokens, "id %d out of range", ids[i]);
        size_t len = rg_detokenize(tok, ids, n, true, NULL, 0);
        char *back = malloc(len + 1);
        FZ_CHECK(back && rg_detokenize(tok, ids, n, true, back, len + 1) == len, "detokenize");
        free(back);
        free(ids);
    }
    rg_chat_template t;
    st = rg_chat_template_from_tokenizer(&t, tok, &err);
    if (st) {
        fz_check_error(st, &err, FZ_STATUS(RG_ERR_UNSUPPORTED) | FZ_STATUS(RG_ERR_NOT_FOUND), "chat template");
    } else {
        static const rg_chat_message m[] = {{.role = "user", .role_len = 4, .content = "Hi", .content_len = 2},
                                            {.role = "assistant", .role_len = 9, .content = "Hello", .content_len = 5}};
        rg_chat_options opt = {.add_generation_prompt = true, .date_string = "01 Jan 2025"};
        rg_chat_rendered r;
        FZ_CHECK(rg_chat_render(&t, m, 2, &opt, &r, &err) == RG_OK && r.n_spans >= 2, "render: %s", err.msg);
        rg_chat_rendered_free(&r);
        rg_chat_template_free(&t);
    }
    rg_tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rg_gguf *g = NULL;
    rg_error err = {0};
    if (rg_gguf_open_memory(&g, data, size, "fuzz", &err) != RG_OK) {
        if (g) __builtin_trap();  // a failed open leaves nothing behind
        sink += strlen(err.msg);
        return 0;
    }
    if (g->alignment == 0 || (g->alignment & (g->alignment - 1))) __builtin_trap();
    if (g->file_size != size || (g->n_tensors && g->data_start > size)) __builtin_trap();
    for (uint64_t i = 0; i < g->n_kv; i++) walk_kv(&g->kv[i]);
    for (uint64_t i = 0; i < g->n_tensors; i++) walk_tensor(g, &g->tensors[i], data);

    static const char *const keys[] = {"general.architecture", "general.alignment", "general.file_type",
                                       "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "no.such.key"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const rg_gguf_kv *kv = rg_gguf_find(g, keys[k]);
        if (kv) sink += kv->n;
        uint64_t u;
        double d;
        bool b;
        rg_gguf_str s;
        rg_error e2 = {0};
        if (rg_gguf_get_u64(g, keys[k], &u, &e2) == RG_OK) sink += u;
        if (rg_gguf_get_f64(g, keys[k], &d, &e2) == RG_OK) sink += (uint64_t)(d == d);
        if (rg_gguf_get_bool(g, keys[k], &b, &e2) == RG_OK) sink += b;
        if (rg_gguf_get_str(g, keys[k], &s, &e2) == RG_OK) touch_bytes(s.ptr, s.len);
    }
    if (g->n_tensors) sink += (uint64_t)(uintptr_t)rg_gguf_find_tensor(g, g->tensors[g->n_tensors - 1].name);
    check_tokenizer(g);
    rg_gguf_free(g);
    return 0;
}
