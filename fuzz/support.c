// support.c - the helpers of support.h.
#include "support.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

#ifndef RG_SOURCE_DIR
#error "RG_SOURCE_DIR must name the source tree (CMakeLists.txt defines it for the fuzz targets)"
#endif

void fz_fail_(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "\n%s:%d: broken promise: %s: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

void fz_check_error(rg_status st, const rg_error *err, uint32_t allowed, const char *what) {
    FZ_CHECK(st != RG_OK && (unsigned)st < 32 && (allowed & FZ_STATUS(st)), "%s: unexpected status %d (%s): %.300s",
             what, (int)st, rg_status_name(st), err->msg);
    FZ_CHECK(err->status == st, "%s: returned %d but err.status is %d", what, (int)st, (int)err->status);
    size_t n = strnlen(err->msg, sizeof err->msg);
    FZ_CHECK(n > 0 && n < sizeof err->msg, "%s: the message is empty or not terminated", what);
}

char *fz_read_source_file(const char *rel_path, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", RG_SOURCE_DIR, rel_path);
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long size = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)size + 1)) && fread(buf, 1, (size_t)size, f) == (size_t)size) {
        fclose(f);
        buf[size] = '\0';
        if (len) *len = (size_t)size;
        return buf;
    }
    fprintf(stderr, "fuzz: cannot read %s\n", path);
    exit(1);
}

rg_tokenizer *fz_load_vocab(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/tokenizer/ggml-vocab-%s.gguf", RG_SOURCE_DIR, name);
    rg_gguf *g = NULL;
    rg_tokenizer *tok = NULL;
    rg_error err = {0};
    if (rg_gguf_open(&g, path, &err) || rg_tokenizer_load(&tok, g, &err)) {
        fprintf(stderr, "fuzz: cannot load the tokenizer of %s: %s\n", path, err.msg);
        exit(1);
    }
    rg_gguf_free(g);
    return tok;
}

uint8_t fz_byte(fz_reader *r) {
    if (r->n == 0) return 0;
    r->n--;
    return *r->p++;
}

const char *fz_field(fz_reader *r, uint8_t sep, size_t *len) {
    if (r->n == 0) {
        *len = 0;
        return NULL;
    }
    const uint8_t *start = r->p, *end = memchr(r->p, sep, r->n);
    size_t n = end ? (size_t)(end - start) : r->n;
    *len = n;
    r->p += n + (end != NULL);
    r->n -= n + (end != NULL);
    return (const char *)start;
}

const char *fz_find(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0) return hay;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}
