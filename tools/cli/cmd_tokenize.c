// cmd_tokenize.c - `retrograd tokenize -m MODEL.gguf (-p TEXT | -f FILE) [--ids] [--no-bos]
// [--no-special] [--count]`: the model's own tokenization of a text (spec/architectures.md §5).
//
// Works with full model files and vocabulary-only GGUF files. By default BOS/EOS are added as
// the model asks and special-token text (<|im_start|>, ...) is recognized. Output: one line
// per token, `id<TAB>'piece'` with the piece's bytes escaped (\n, \t, \r, \\, \', \xHH for
// control bytes and for bytes that are not whole UTF-8 characters); --ids prints one JSON
// array; --count prints the number of tokens.
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "text/tokenizer.h"

// Writes a piece between single quotes with its special bytes escaped.
static void print_piece(FILE *f, const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    fputc('\'', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t k = 0;
        if (c >= 0x80) {
            k = rg_utf8_first_invalid(p + i, n - i) == 0 ? 0 : 1;  // a whole character starts here?
            if (k) {
                k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
                fwrite(s + i, 1, k, f);
                i += k;
                continue;
            }
            fprintf(f, "\\x%02X", c);
        } else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\\') fputs("\\\\", f);
        else if (c == '\'') fputs("\\'", f);
        else if (c < 0x20 || c == 0x7F) fprintf(f, "\\x%02X", c);
        else fputc(c, f);
        i++;
    }
    fputc('\'', f);
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool as_ids = false, count = false, no_bos = false, no_special = false;
    const cli_opt opts[] = {
        CLI_STR('m', "--model", "MODEL.gguf", "a model or vocabulary-only GGUF file", &model),
        CLI_STR('p', "--prompt", "TEXT", "the text to tokenize", &prompt),
        CLI_STR('f', "--file", "FILE", "tokenize the bytes of FILE", &file),
        CLI_FLAG(0, "--ids", "print the ids as one JSON array", &as_ids),
        CLI_FLAG(0, "--count", "print only the number of tokens", &count),
        CLI_FLAG(0, "--no-bos", "add no BOS/EOS (default: as the model asks)", &no_bos),
        CLI_FLAG(0, "--no-special", "treat special-token text such as <|im_end|> as plain text", &no_special),
    };
    const cli_command c = {"tokenize", "-m MODEL.gguf (-p TEXT | -f FILE) [--ids] [--no-bos] [--no-special] [--count]",
                           opts, CLI_N(opts), NULL, 0, NULL, NULL};
    int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    if (!model || (!prompt == !file)) {
        fprintf(stderr, "retrograd tokenize: give -m MODEL.gguf and one of -p TEXT or -f FILE\n");
        cli_args_help(&c, stderr);
        return 2;
    }
    const bool add_special = !no_bos, parse_special = !no_special;

    size_t len = 0;
    char *text = NULL;
    if (file) {
        text = cli_read_file(file, &len);
        if (!text) {
            fprintf(stderr, "retrograd tokenize: %s: cannot read the file: %s\n", file, strerror(errno));
            return 1;
        }
    }
    const char *input = file ? text : prompt;
    if (!file) len = strlen(prompt);

    rg_error err = {0};
    rg_gguf *g = NULL;
    rg_tokenizer *tok = NULL;
    rc = 1;
    if (rg_gguf_open(&g, model, &err) || rg_tokenizer_load(&tok, g, &err)) {
        fprintf(stderr, "retrograd tokenize: %s\n", err.msg);
        goto done;
    }
    size_t bad = rg_utf8_first_invalid(input, len);
    if (bad < len)
        fprintf(stderr, "retrograd tokenize: warning: the input is not valid UTF-8 (first invalid byte at offset %zu); "
                        "it is tokenized byte by byte\n", bad);
    int32_t *ids = NULL;
    size_t n = 0;
    if (rg_tokenize_alloc(tok, input, len, add_special, parse_special, &ids, &n, &err)) {
        fprintf(stderr, "retrograd tokenize: %s\n", err.msg);
        goto done;
    }
    if (count) {
        printf("%zu\n", n);
    } else if (as_ids) {
        putchar('[');
        for (size_t i = 0; i < n; i++) printf("%s%" PRId32, i ? ", " : "", ids[i]);
        printf("]\n");
    } else {
        size_t cap = rg_tokenizer_get_info(tok)->max_token_len * 2 + 16;
        char *piece = malloc(cap);
        for (size_t i = 0; piece && i < n; i++) {
            size_t m = rg_token_to_piece(tok, ids[i], true, piece, cap);
            printf("%" PRId32 "\t", ids[i]);
            print_piece(stdout, piece, m < cap ? m : cap - 1);
            putchar('\n');
        }
        free(piece);
    }
    free(ids);
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    rg_tokenizer_free(tok);
    rg_gguf_free(g);
    free(text);
    return rc;
}
