// fuzz_config.c - libFuzzer target for the training config (src/train/config.c, config_yaml.c):
// arbitrary YAML text through rg_train_config_load_yaml_text and arbitrary `--set` strings
// through rg_train_config_set_kv.
//
// Input: one control byte, then
//   bit 0 = 0  the rest is a YAML file, loaded over the defaults;
//   bit 0 = 1  the rest is --set strings, one per line, applied in order (the first 16).
//
// What config.h promises and this checks:
//   - a failed set or load leaves the config unchanged; its error names the source ("--set",
//     "fuzz.yaml", with a line of the file that exists);
//   - a loaded or set config reads back: rg_train_config_write's YAML loads over the defaults
//     to the same config, and every key's rg_train_config_get text sets the same value;
//   - loading is deterministic; rg_train_config_validate either accepts or explains;
//   - `--set key=value` and the YAML line `"key": "value"` (value escaped as a double-quoted
//     scalar) set the same thing.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "train/config.h"

static rg_train_config defaults;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    rg_train_config_defaults(&defaults);
    return 0;
}

static void check_same(const rg_train_config *a, const rg_train_config *b, const char *what) {
    char keys[512];
    int n = rg_train_config_diff(a, b, keys, sizeof keys);
    FZ_CHECK(n == 0, "%s: %d keys differ: %s", what, n, keys);
}

// The most lines a YAML reader may count in text: every line break YAML knows, plus one.
static size_t yaml_lines(const char *t, size_t n) {
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        lines += c == '\n' || c == '\r' || (c == 0xC2 && i + 1 < n && (unsigned char)t[i + 1] == 0x85) ||
                 (c == 0xE2 && i + 2 < n && (unsigned char)t[i + 1] == 0x80 && ((unsigned char)t[i + 2] & 0xFE) == 0xA8);
    }
    return lines;
}

static void check_error(rg_status st, const rg_error *err, const char *source, const char *text, size_t len) {
    fz_check_error(st, err, FZ_STATUS(RG_ERR_ARG) | FZ_STATUS(RG_ERR_FORMAT) | FZ_STATUS(RG_ERR_UNSUPPORTED),
                   source);
    const char *at = strstr(err->msg, source);
    FZ_CHECK(at, "the error does not name %s: %s", source, err->msg);
    unsigned long line;
    if (text && at[strlen(source)] == ':' && sscanf(at + strlen(source) + 1, "%lu", &line) == 1)
        FZ_CHECK(line >= 1 && line <= yaml_lines(text, len), "the error names line %lu of %zu: %s", line,
                 yaml_lines(text, len), err->msg);
}

// The config written as YAML, read back over the defaults; and each key's value set from its
// rg_train_config_get text.
static void check_reads_back(const rg_train_config *c) {
    char *yaml = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&yaml, &len);
    FZ_CHECK(f, "open_memstream");
    rg_train_config_write(c, f);
    fclose(f);
    rg_train_config back = defaults;
    rg_error err = {0};
    rg_status st = rg_train_config_load_yaml_text(&back, "written.yaml", yaml, len, &err);
    FZ_CHECK(st == RG_OK, "the written config does not load: %s\n%s", err.msg, yaml);
    check_same(&back, c, "written and loaded again");

    rg_train_config set = defaults;
    for (char *line = yaml; *line;) {
        char *nl = strchr(line, '\n'), *colon = strstr(line, ": ");
        FZ_CHECK(nl && colon && colon < nl, "a line of the written config is not 'key: value'");
        *colon = '\0';
        char value[1024];
        FZ_CHECK(rg_train_config_get(c, line, value, sizeof value), "no value for key '%s'", line);
        FZ_CHECK(rg_train_config_set(&set, line, value, "get", &err) == RG_OK, "%s: '%s' from get does not set: %s",
                 line, value, err.msg);
        line = nl + 1;
    }
    check_same(&set, c, "set from get");
    free(yaml);
}

// `"key": "value"` with the value as a YAML double-quoted scalar.
static char *yaml_line(const char *key, const char *value) {
    size_t cap = 16 + 4 * (strlen(key) + strlen(value)), n = 0;
    char *y = malloc(cap);
    FZ_CHECK(y, "out of memory");
    const char *parts[2] = {key, value};
    for (int p = 0; p < 2; p++) {
        y[n++] = '"';
        for (const unsigned char *s = (const unsigned char *)parts[p]; *s; s++) {
            if (*s == '"' || *s == '\\') y[n++] = '\\', y[n++] = (char)*s;
            else if (*s < 0x20 || *s == 0x7F) n += (size_t)sprintf(y + n, "\\x%02X", *s);
            else y[n++] = (char)*s;
        }
        y[n++] = '"';
        if (p == 0) y[n++] = ':', y[n++] = ' ';
    }
    y[n++] = '\n';
    y[n] = '\0';
    return y;
}

static bool valid_utf8(const char *s) {
    size_t n = strlen(s);
    return rg_utf8_first_invalid(s, n) == n;
}

static void check_set_line(rg_train_config *c, const char *kv) {
    rg_train_config before = *c;
    rg_error err = {0};
    rg_status st = rg_train_config_set_kv(c, kv, &err);
    if (st) {
        check_same(c, &before, "after a failed --set");
        check_error(st, &err, "--set", NULL, 0);
        return;
    }
    // The key as set_kv read it: before '=', without white space around it.
    const char *eq = strchr(kv, '=');
    FZ_CHECK(eq, "--set '%s' without '=' succeeded", kv);
    size_t b = 0, e = (size_t)(eq - kv);
    while (b < e && strchr(" \t\n\r", kv[b])) b++;
    while (e > b && strchr(" \t\n\r", kv[e - 1])) e--;
    char key[256];
    FZ_CHECK(e - b < sizeof key, "a key of %zu bytes was accepted", e - b);
    memcpy(key, kv + b, e - b);
    key[e - b] = '\0';
    char value[1024];
    FZ_CHECK(rg_train_config_get(c, key, value, sizeof value), "no value for the key just set: '%s'", key);
    rg_train_config again = before;
    FZ_CHECK(rg_train_config_set(&again, key, value, "get", &err) == RG_OK, "%s: '%s' from get does not set: %s", key,
             value, err.msg);
    check_same(&again, c, "--set, then set from get");

    // The same key and value as YAML (libyaml reads only UTF-8).
    if (valid_utf8(eq + 1)) {
        char *y = yaml_line(key, eq + 1);
        rg_train_config from_yaml = before;
        FZ_CHECK(rg_train_config_load_yaml_text(&from_yaml, "set.yaml", y, strlen(y), &err) == RG_OK,
                 "--set '%s' works but its YAML does not: %s\n%s", kv, err.msg, y);
        check_same(&from_yaml, c, "--set and the same key in YAML");
        free(y);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_reader in = {data, size};
    uint8_t ctl = fz_byte(&in);
    rg_train_config c = defaults;
    rg_error err = {0};
    if (!(ctl & 1)) {
        const char *text = (const char *)in.p;
        rg_status st = rg_train_config_load_yaml_text(&c, "fuzz.yaml", text, in.n, &err);
        if (st) {
            check_same(&c, &defaults, "after a failed load");
            check_error(st, &err, "fuzz.yaml", text, in.n);
            return 0;
        }
        rg_train_config again = defaults;
        FZ_CHECK(rg_train_config_load_yaml_text(&again, "fuzz.yaml", text, in.n, &err) == RG_OK,
                 "a second load failed: %s", err.msg);
        check_same(&again, &c, "loaded twice");
    } else {
        // At most 16 lines: an unknown key costs an edit distance to every key, which coverage
        // instrumentation makes slow enough to halve the inputs tried per second.
        size_t len, n_lines = 0;
        for (const char *line; n_lines++ < 16 && (line = fz_field(&in, '\n', &len));) {
            char *kv = strndup(line, len);
            FZ_CHECK(kv, "out of memory");
            check_set_line(&c, kv);
            free(kv);
        }
    }
    rg_train_spec sp;
    rg_status st = rg_train_config_validate(&c, &sp, &err);
    if (st) fz_check_error(st, &err, FZ_STATUS(RG_ERR_ARG), "rg_train_config_validate");
    else FZ_CHECK(memcmp(&sp.cfg, &c, sizeof c) == 0 && sp.lr > 0 && sp.rows_per_step >= 1, "a bad spec from a valid config");
    check_reads_back(&c);
    return 0;
}
