// cli_common.c - what several commands share: the clock, reading a file whole, the parsers
// of numbers and of --device / --flash-attn values, the option handlers built on them, and
// the default context.
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

double cli_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *bigger = realloc(buf, cap * 2 + 1);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

bool cli_parse_i64(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "retrograd %s: %s '%s' is not valid: give an integer in %" PRId64 "..%" PRId64 "\n", cmd, opt, s,
                lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_f32(const char *cmd, const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || fabs(v) > 3e38) {
        fprintf(stderr, "retrograd %s: %s '%s' is not a number\n", cmd, opt, s);
        return false;
    }
    *out = (float)v;
    return true;
}

bool cli_parse_device(const char *cmd, const char *s, rg_device *out) {
    if (!strcmp(s, "cpu")) *out = RG_DEVICE_CPU;
    else if (!strcmp(s, "cuda")) *out = RG_DEVICE_CUDA;
    else {
        fprintf(stderr, "retrograd %s: --device must be cpu or cuda, not '%s'\n", cmd, s);
        return false;
    }
    return true;
}

bool cli_parse_flash_attn(const char *cmd, const char *s, rg_flash_attn_mode *out) {
    if (!strcmp(s, "auto")) *out = RG_FLASH_ATTN_AUTO;
    else if (!strcmp(s, "on")) *out = RG_FLASH_ATTN_ON;
    else if (!strcmp(s, "off")) *out = RG_FLASH_ATTN_OFF;
    else {
        fprintf(stderr, "retrograd %s: --flash-attn must be auto, on or off, not '%s'\n", cmd, s);
        return false;
    }
    return true;
}

int64_t cli_default_ctx(const rg_model *m) {
    int64_t train = m->hp.n_ctx_train;
    return train > 0 && train < 4096 ? train : 4096;
}

// ---------------------------------------------------------------------------
// Option handlers (cli_args.h's CLI_CALL rows)

bool cli_opt_device(const char *cmd, const char *opt, const char *value, void *dst) {
    (void)opt;
    return cli_parse_device(cmd, value, (rg_device *)dst);
}

bool cli_opt_flash_attn(const char *cmd, const char *opt, const char *value, void *dst) {
    (void)opt;
    return cli_parse_flash_attn(cmd, value, (rg_flash_attn_mode *)dst);
}

bool cli_opt_lora(const char *cmd, const char *opt, const char *value, void *dst) {
    (void)opt;
    return cli_loras_add(cmd, (cli_loras *)dst, value);
}
