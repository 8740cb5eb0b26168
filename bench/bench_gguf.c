// bench_gguf.c - opening a GGUF with a real-sized vocabulary: 151,936 token
// strings, 151,387 merges and a 151,936-entry type array (Qwen2's sizes), plus
// 300 tensor infos. Reports the open+validate time and metadata MB/s, against
// the time to read the same bytes with read(2) (the ratio base: I/O alone).
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "gguf/gguf.h"

int main(void) {
    enum { N_TOKENS = 151936, N_MERGES = 151387, N_TENSORS = 300 };
    rg_gguf *g = rg_gguf_new();
    rg_error err = {0};
    char **tok = malloc(N_TOKENS * sizeof *tok);
    int32_t *types = malloc(N_TOKENS * sizeof *types);
    for (int i = 0; i < N_TOKENS; i++) {
        tok[i] = malloc(24);
        snprintf(tok[i], 24, "tok%06d\xc4\xa0x", i);
        types[i] = 1;
    }
    rg_gguf_set_str(g, "general.architecture", "qwen2", &err);
    rg_gguf_set_str_array(g, "tokenizer.ggml.tokens", (const char *const *)tok, N_TOKENS, &err);
    rg_gguf_set_array(g, "tokenizer.ggml.token_type", RG_GGUF_I32, types, N_TOKENS, &err);
    for (int i = 0; i < N_MERGES; i++) snprintf(tok[i], 24, "t%06d m%06d", i, N_MERGES - i);
    rg_gguf_set_str_array(g, "tokenizer.ggml.merges", (const char *const *)tok, N_MERGES, &err);
    static float data[64];
    for (int i = 0; i < N_TENSORS; i++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.w", i);
        rg_gguf_add_tensor(g, name, RG_TYPE_F32, 2, (int64_t[]){8, 8}, data, &err);
    }
    const char *path = "/tmp/rg_bench_gguf.gguf";
    if (rg_gguf_write(g, path, &err)) {
        fprintf(stderr, "bench_gguf: %s\n", err.msg);
        return 1;
    }
    rg_gguf_free(g);
    for (int i = 0; i < N_TOKENS; i++) free(tok[i]);
    free(tok), free(types);

    double best_open = 1e30, best_read = 1e30;
    size_t size = 0;
    for (int t = 0; t < 7; t++) {
        double t0 = bench_now();
        rg_gguf *r;
        if (rg_gguf_open(&r, path, &err)) {
            fprintf(stderr, "bench_gguf: %s\n", err.msg);
            return 1;
        }
        double dt = bench_now() - t0;
        size = (size_t)r->data_start;
        rg_gguf_free(r);
        if (dt < best_open) best_open = dt;
        t0 = bench_now();
        int fd = open(path, O_RDONLY);
        char *buf = malloc(size);
        ssize_t got = read(fd, buf, size);
        close(fd);
        free(buf);
        dt = bench_now() - t0;
        if (got > 0 && dt < best_read) best_read = dt;
    }
    printf("bench_gguf: open+validate of %zu metadata bytes (%d tokens, %d merges, %d tensors)\n", size, N_TOKENS,
           N_MERGES, N_TENSORS);
    printf("  open+validate %8.2f ms  %8.1f MB/s\n", best_open * 1e3, size / best_open / 1e6);
    printf("  read(2) alone %8.2f ms  %8.1f MB/s\n", best_read * 1e3, size / best_read / 1e6);
    printf("  ratio open / read: %.2f\n", best_open / best_read);
    unlink(path);
    return 0;
}
