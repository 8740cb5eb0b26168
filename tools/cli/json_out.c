// json_out.c - just enough JSON writing for `info --json` and `report --json`.
#include <inttypes.h>
#include <math.h>
#include <stdint.h>

#include "base/json_write.h"
#include "cli.h"

void json_str(FILE *f, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            i++;
        } else if (c == '\n') fputs("\\n", f), i++;
        else if (c == '\t') fputs("\\t", f), i++;
        else if (c == '\r') fputs("\\r", f), i++;
        else if (c < 0x20 || c == 0x7F) fprintf(f, "\\u%04x", c), i++;
        else {
            size_t len = rg_utf8_seq_len(s + i, n - i);
            if (len == 0) {
                fputs("\\ufffd", f);
                i++;
            } else {
                fwrite(s + i, 1, len, f);
                i += len;
            }
        }
    }
    fputc('"', f);
}

void json_f64(FILE *f, double v) {
    if (isnan(v)) fputs("\"nan\"", f);
    else if (isinf(v)) fputs(v > 0 ? "\"inf\"" : "\"-inf\"", f);
    else fprintf(f, "%.17g", v);
}

static void json_elem(FILE *f, const rg_gguf_kv *kv, uint32_t t, uint64_t i) {
    if (t == RG_GGUF_STRING) {
        rg_gguf_str s = rg_gguf_kv_str(kv, i);
        json_str(f, s.ptr, (size_t)s.len);
    } else if (t == RG_GGUF_BOOL) {
        uint64_t u = 0;
        rg_gguf_kv_u64(kv, i, &u);
        fputs(u ? "true" : "false", f);
    } else if (t == RG_GGUF_F32 || t == RG_GGUF_F64) {
        double d = 0;
        rg_gguf_kv_f64(kv, i, &d);
        if (t == RG_GGUF_F32 && isfinite(d)) fprintf(f, "%.9g", d);  // enough digits to round-trip a float
        else json_f64(f, d);
    } else if (t == RG_GGUF_I8 || t == RG_GGUF_I16 || t == RG_GGUF_I32 || t == RG_GGUF_I64) {
        int64_t v = 0;
        rg_gguf_kv_i64(kv, i, &v);
        fprintf(f, "%" PRId64, v);
    } else {
        uint64_t u = 0;
        rg_gguf_kv_u64(kv, i, &u);
        fprintf(f, "%" PRIu64, u);
    }
}

void json_kv_value(FILE *f, const rg_gguf_kv *kv, int full) {
    if (kv->type != RG_GGUF_ARRAY) {
        json_elem(f, kv, kv->type, 0);
        return;
    }
    if (!full && kv->n > 16) {
        fprintf(f, "{\"array_of\": \"%s\", \"count\": %" PRIu64 "}", rg_gguf_vtype_name(kv->arr_type), kv->n);
        return;
    }
    fputc('[', f);
    for (uint64_t i = 0; i < kv->n; i++) {
        if (i) fputs(", ", f);
        json_elem(f, kv, kv->arr_type, i);
    }
    fputc(']', f);
}
