// test_gguf.c - the GGUF reader against hostile files, the writer against the
// spec's byte listing, round trips, and atomic replacement.
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/file.h"
#include "gguf/gguf.h"
#include "model/tiny.h"
#include "tensor/half.h"
#include "rg_test.h"

// ---------------------------------------------------------------------------
// A byte buffer for hand-built files.

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void u8(buf *b, uint8_t v) { put(b, &v, 1); }
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)), put(b, s, strlen(s)); }
static void zeros(buf *b, size_t n) { while (n--) u8(b, 0); }
static void pad(buf *b, size_t align) { zeros(b, (align - b->n % align) % align); }
static void header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    u32(b, RG_GGUF_MAGIC), u32(b, version), u64(b, n_tensors), u64(b, n_kv);
}
static void kv_u32(buf *b, const char *key, uint32_t v) { str(b, key), u32(b, RG_GGUF_U32), u32(b, v); }
static void tinfo(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    str(b, name), u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) u64(b, ne[i]);
    u32(b, type), u64(b, off);
}

// One f32 tensor "w" [4, 2] = 32 bytes, with a key: the base of most cases.
static buf valid_file(void) {
    buf b = {0};
    header(&b, 3, 1, 1);
    kv_u32(&b, "general.file_type", 0);
    tinfo(&b, "w", 2, (uint64_t[]){4, 2}, RG_TYPE_F32, 0);
    pad(&b, 32);
    for (int i = 0; i < 8; i++) {
        float f = (float)i;
        put(&b, &f, 4);
    }
    return b;
}

static rg_status open_buf(const buf *b, rg_gguf **g, rg_error *err) {
    return rg_gguf_open_memory(g, b->p, b->n, "case.gguf", err);
}

// ---------------------------------------------------------------------------
// Hostile files: each builder writes a file, the reader must refuse it with a
// message that names the file and contains `expect`.

typedef struct bad_case {
    const char *name;
    void (*build)(buf *b);
    const char *expect;
} bad_case;

static void b_empty(buf *b) { (void)b; }
static void b_short(buf *b) { u32(b, RG_GGUF_MAGIC), u32(b, 3); }
static void b_magic(buf *b) { put(b, "GGML", 4), u32(b, 3), u64(b, 0), u64(b, 0); }
static void b_v1(buf *b) { header(b, 1, 0, 0); }
static void b_v4(buf *b) { header(b, 4, 0, 0); }
static void b_swapped(buf *b) { header(b, 0x03000000, 0, 0); }
static void b_many_tensors(buf *b) { header(b, 3, UINT64_MAX, 0); }
static void b_many_kv(buf *b) { header(b, 3, 0, (uint64_t)1 << 40), zeros(b, 64); }
static void b_key_len_huge(buf *b) { header(b, 3, 0, 1), u64(b, (uint64_t)1 << 62), zeros(b, 16); }
static void b_key_len_past_end(buf *b) { header(b, 3, 0, 1), u64(b, 100), put(b, "general.a", 9), zeros(b, 8); }
static void b_key_empty(buf *b) { header(b, 3, 0, 1), u64(b, 0), u32(b, RG_GGUF_U32), u32(b, 1), zeros(b, 8); }
static void b_key_dup(buf *b) { header(b, 3, 0, 2), kv_u32(b, "a.b", 1), kv_u32(b, "a.b", 2); }
static void b_vtype_unknown(buf *b) { header(b, 3, 0, 1), str(b, "a.b"), u32(b, 13), u32(b, 0), zeros(b, 8); }
static void b_nested(buf *b) { header(b, 3, 0, 1), str(b, "a.b"), u32(b, RG_GGUF_ARRAY), u32(b, RG_GGUF_ARRAY), u64(b, 1), zeros(b, 16); }
static void b_arr_elem_unknown(buf *b) { header(b, 3, 0, 1), str(b, "a.b"), u32(b, RG_GGUF_ARRAY), u32(b, 77), u64(b, 1), zeros(b, 8); }
static void b_arr_count(buf *b) { header(b, 3, 0, 1), str(b, "a.b"), u32(b, RG_GGUF_ARRAY), u32(b, RG_GGUF_U32), u64(b, (uint64_t)1 << 61), zeros(b, 16); }
static void b_str_arr_count(buf *b) { header(b, 3, 0, 1), str(b, "a.b"), u32(b, RG_GGUF_ARRAY), u32(b, RG_GGUF_STRING), u64(b, 1000000), zeros(b, 64); }
static void b_arr_trunc(buf *b) { header(b, 3, 0, 1), str(b, "a.b"), u32(b, RG_GGUF_ARRAY), u32(b, RG_GGUF_STRING), u64(b, 2), str(b, "x"), u64(b, 5), put(b, "ab", 2); }
static void b_bool(buf *b) { header(b, 3, 0, 1), str(b, "a.b"), u32(b, RG_GGUF_BOOL), u8(b, 2), zeros(b, 8); }
static void b_align_type(buf *b) { header(b, 3, 0, 1), str(b, "general.alignment"), u32(b, RG_GGUF_U64), u64(b, 32); }
static void b_align_zero(buf *b) { header(b, 3, 0, 1), kv_u32(b, "general.alignment", 0); }
static void b_align_npot(buf *b) { header(b, 3, 0, 1), kv_u32(b, "general.alignment", 48); }
static void b_tname_empty(buf *b) { header(b, 3, 1, 0), tinfo(b, "", 1, (uint64_t[]){8}, 0, 0), pad(b, 32), zeros(b, 32); }
static void b_tname_long(buf *b) {
    char name[65];
    memset(name, 'x', 64), name[64] = 0;
    header(b, 3, 1, 0), tinfo(b, name, 1, (uint64_t[]){8}, 0, 0), pad(b, 32), zeros(b, 32);
}
static void b_tname_dup(buf *b) {
    header(b, 3, 2, 0), tinfo(b, "w", 1, (uint64_t[]){8}, 0, 0), tinfo(b, "w", 1, (uint64_t[]){8}, 0, 32);
    pad(b, 32), zeros(b, 64);
}
static void b_ndims(buf *b) { header(b, 3, 1, 0), tinfo(b, "w", 5, (uint64_t[]){1, 1, 1, 1, 1}, 0, 0), pad(b, 32), zeros(b, 32); }
static void b_dim_neg(buf *b) { header(b, 3, 1, 0), tinfo(b, "w", 2, (uint64_t[]){8, (uint64_t)-3}, 0, 0), pad(b, 32), zeros(b, 32); }
static void b_nel_overflow(buf *b) {
    header(b, 3, 1, 0), tinfo(b, "w", 3, (uint64_t[]){(uint64_t)1 << 32, (uint64_t)1 << 32, 4}, 0, 0), pad(b, 32), zeros(b, 32);
}
static void b_bytes_overflow(buf *b) {
    header(b, 3, 1, 0), tinfo(b, "w", 2, (uint64_t[]){(uint64_t)1 << 31, (uint64_t)1 << 31}, RG_TYPE_F64, 0), pad(b, 32), zeros(b, 32);
}
static void b_type_unknown(buf *b) { header(b, 3, 1, 0), tinfo(b, "w", 1, (uint64_t[]){8}, 99, 0), pad(b, 32), zeros(b, 32); }
static void b_type_removed(buf *b) { header(b, 3, 1, 0), tinfo(b, "w", 1, (uint64_t[]){32}, 4, 0), pad(b, 32), zeros(b, 32); }
static void b_type_q8_1(buf *b) { header(b, 3, 1, 0), tinfo(b, "w", 1, (uint64_t[]){32}, RG_TYPE_Q8_1, 0), pad(b, 32), zeros(b, 64); }
static void b_block(buf *b) { header(b, 3, 1, 0), tinfo(b, "w", 1, (uint64_t[]){33}, RG_TYPE_Q4_0, 0), pad(b, 32), zeros(b, 64); }
static void b_misaligned(buf *b) { header(b, 3, 1, 0), tinfo(b, "w", 1, (uint64_t[]){8}, 0, 4), pad(b, 32), zeros(b, 64); }
static void b_not_packed(buf *b) {
    header(b, 3, 2, 0), tinfo(b, "a", 1, (uint64_t[]){8}, 0, 0), tinfo(b, "b", 1, (uint64_t[]){8}, 0, 64);
    pad(b, 32), zeros(b, 128);
}
static void b_overlap(buf *b) {
    header(b, 3, 2, 0), tinfo(b, "a", 1, (uint64_t[]){16}, 0, 0), tinfo(b, "b", 1, (uint64_t[]){8}, 0, 32);
    pad(b, 32), zeros(b, 128);
}
static void b_data_past_end(buf *b) { header(b, 3, 1, 0), tinfo(b, "w", 1, (uint64_t[]){64}, 0, 0), pad(b, 32), zeros(b, 100); }
static void b_offset_huge(buf *b) { header(b, 3, 1, 0), tinfo(b, "w", 1, (uint64_t[]){8}, 0, UINT64_MAX - 31), pad(b, 32), zeros(b, 32); }
static void b_no_data_section(buf *b) { header(b, 3, 1, 0), tinfo(b, "w", 1, (uint64_t[]){8}, 0, 0); }
static void b_key_nul(buf *b) { header(b, 3, 0, 1), u64(b, 3), put(b, "a\0b", 3), u32(b, RG_GGUF_U32), u32(b, 1); }

static const bad_case bad_cases[] = {
    {"empty file", b_empty, "shorter than the 24-byte header"},
    {"short header", b_short, "shorter than the 24-byte header"},
    {"wrong magic", b_magic, "not a GGUF file"},
    {"version 1", b_v1, "version 1 is not supported"},
    {"version 4", b_v4, "version 4 is not supported"},
    {"byte-swapped", b_swapped, "big-endian"},
    {"absurd tensor count", b_many_tensors, "tensor count"},
    {"absurd key count", b_many_kv, "key count"},
    {"key length over the limit", b_key_len_huge, "over the limit"},
    {"key past the end", b_key_len_past_end, "truncated at offset 32"},
    {"empty key", b_key_empty, "is empty"},
    {"duplicate key", b_key_dup, "duplicate key 'a.b'"},
    {"unknown value type", b_vtype_unknown, "unknown value type 13"},
    {"nested array", b_nested, "array of arrays"},
    {"unknown array element type", b_arr_elem_unknown, "unknown array element type 77"},
    {"absurd array count", b_arr_count, "claims 2305843009213693952 array elements"},
    {"absurd string array count", b_str_arr_count, "claims 1000000 array elements"},
    {"truncated string array", b_arr_trunc, "truncated"},
    {"bool not 0 or 1", b_bool, "expected 0 or 1"},
    {"alignment not u32", b_align_type, "expected u32"},
    {"alignment zero", b_align_zero, "nonzero power of two"},
    {"alignment not a power of two", b_align_npot, "is 48"},
    {"empty tensor name", b_tname_empty, "tensor name is empty"},
    {"tensor name too long", b_tname_long, "at most 63 allowed"},
    {"duplicate tensor", b_tname_dup, "duplicate tensor name 'w'"},
    {"five dimensions", b_ndims, "5 dimensions"},
    {"negative dimension", b_dim_neg, "is negative"},
    {"element count overflow", b_nel_overflow, "element count overflows"},
    {"byte size overflow", b_bytes_overflow, "byte size overflows"},
    {"unknown tensor type", b_type_unknown, "unknown type id 99"},
    {"removed tensor type", b_type_removed, "q4_2 (removed)"},
    {"intermediate tensor type", b_type_q8_1, "intermediate type"},
    {"row not a multiple of the block", b_block, "not a multiple of the block size 32"},
    {"misaligned offset", b_misaligned, "not a multiple of the alignment 32"},
    {"offsets not packed", b_not_packed, "expected 32"},
    {"overlapping tensors", b_overlap, "expected 64"},
    {"data past the end", b_data_past_end, "needs bytes"},
    {"offset near 2^64", b_offset_huge, "expected 0"},
    {"no data section", b_no_data_section, "data section should start"},
    {"NUL inside a key", b_key_nul, "contains a NUL byte"},
};

static void test_hostile_files_are_refused_with_a_reason(void) {
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        buf b = {0};
        c->build(&b);
        rg_gguf *g = NULL;
        rg_error err = {0};
        rg_status s = open_buf(&b, &g, &err);
        RG_CHECK(s != RG_OK, "%s: accepted", c->name);
        RG_CHECK(g == NULL, "%s: handle returned on failure", c->name);
        RG_CHECK(strstr(err.msg, "case.gguf") != NULL, "%s: message does not name the file: %s", c->name, err.msg);
        RG_CHECK(strstr(err.msg, c->expect) != NULL, "%s: message '%s' lacks '%s'", c->name, err.msg, c->expect);
        rg_gguf_free(g);
        free(b.p);
    }
}

static void test_valid_base_file_reads(void) {
    buf b = valid_file();
    rg_gguf *g = NULL;
    rg_error err = {0};
    RG_REQUIRE(open_buf(&b, &g, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(g->version == 3 && g->n_kv == 1 && g->n_tensors == 1, "counts %llu %llu", (unsigned long long)g->n_kv,
             (unsigned long long)g->n_tensors);
    const rg_gguf_tensor *t = rg_gguf_find_tensor(g, "w");
    RG_REQUIRE(t, "tensor w missing");
    RG_CHECK(t->ne[0] == 4 && t->ne[1] == 2 && t->ne[2] == 1 && t->nbytes == 32, "shape");
    float v[8];
    memcpy(v, t->data, 32);
    RG_CHECK(v[7] == 7.0f, "value %g", v[7]);
    uint64_t ft = 99;
    RG_CHECK(rg_gguf_get_u64(g, "general.file_type", &ft, &err) == RG_OK && ft == 0, "file_type");
    RG_CHECK(rg_gguf_get_u64(g, "missing.key", &ft, &err) == RG_ERR_NOT_FOUND, "missing key found");
    RG_CHECK(strstr(err.msg, "'missing.key' is missing"), "%s", err.msg);
    rg_gguf_str s;
    RG_CHECK(rg_gguf_get_str(g, "general.file_type", &s, &err) == RG_ERR_FORMAT, "u32 read as string");
    rg_gguf_free(g);
    free(b.p);
}

// Every prefix of a valid file either fails cleanly or still holds all tensor data.
static void test_every_truncation_is_refused(void) {
    rg_gguf *full;
    rg_error err = {0};
    rg_tiny_config cfg = {.arch = "qwen2", .type = RG_TYPE_BF16, .seed = 3};
    RG_REQUIRE(rg_tiny_build(&cfg, &full, &err) == RG_OK, "%s", err.msg);
    char path[] = "/tmp/rg_test_truncXXXXXX";
    int fd = mkstemp(path);
    RG_REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    RG_REQUIRE(rg_gguf_write(full, path, &err) == RG_OK, "%s", err.msg);
    rg_gguf_free(full);
    FILE *f = fopen(path, "rb");
    RG_REQUIRE(f, "reopen");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *bytes = malloc((size_t)n);
    RG_REQUIRE(bytes && fread(bytes, 1, (size_t)n, f) == (size_t)n, "read");
    fclose(f);
    unlink(path);
    rg_gguf *g;
    RG_REQUIRE(rg_gguf_open_memory(&g, bytes, (size_t)n, "t", &err) == RG_OK, "%s", err.msg);
    const rg_gguf_tensor *last = &g->tensors[g->n_tensors - 1];
    uint64_t data_end = g->data_start + last->offset + last->nbytes, g_data_start = g->data_start;
    uint64_t n_ends = g->n_tensors;
    uint64_t *ends = malloc(n_ends * sizeof *ends);
    for (uint64_t t = 0; t < n_ends; t++) ends[t] = g->data_start + g->tensors[t].offset + g->tensors[t].nbytes;
    rg_gguf_free(g);
    long accepted_short = 0, refused = 0, tried = 0, expect_refused = 0;
    // Every prefix through the metadata and the start of the data; beyond that a
    // stride plus both sides of every tensor's end (the reader never reads data
    // bytes, so those are the lengths where its answer changes).
    for (long len = 0; len < n; len++) {
        int probe = (uint64_t)len <= g_data_start + 64 || len % 4093 == 0;
        for (uint64_t t = 0; t < n_ends && !probe; t++) probe = (uint64_t)len + 1 == ends[t] || (uint64_t)len == ends[t];
        if (!probe) continue;
        tried++;
        expect_refused += (uint64_t)len < data_end;
        // A copy of exactly len bytes, so the sanitizer sees any read past it.
        uint8_t *prefix = malloc(len ? (size_t)len : 1);
        memcpy(prefix, bytes, (size_t)len);
        err.msg[0] = 0;
        rg_status s = rg_gguf_open_memory(&g, prefix, (size_t)len, "t", &err);
        if (s == RG_OK) {
            if ((uint64_t)len < data_end) accepted_short++;
            rg_gguf_free(g);
        } else {
            refused++;
            RG_CHECK(err.msg[0] != 0, "no message at length %ld", len);
        }
        free(prefix);
    }
    RG_CHECK(accepted_short == 0, "%ld prefixes shorter than the data were accepted", accepted_short);
    RG_CHECK(refused == expect_refused, "refused %ld of %ld short prefixes (%ld lengths tried)", refused, expect_refused, tried);
    free(ends);
    free(bytes);
}

// Flipping any single header/metadata byte must never crash (the sanitizer build
// watches the reads); most flips are refused.
static void test_single_byte_corruptions_do_not_crash(void) {
    buf b = valid_file();
    for (size_t i = 0; i < b.n - 32; i++) {
        for (int v = 0; v < 256; v += 17) {
            uint8_t *copy = malloc(b.n);
            memcpy(copy, b.p, b.n);
            copy[i] = (uint8_t)(copy[i] ^ (v | 1));
            rg_gguf *g = NULL;
            rg_error err = {0};
            if (rg_gguf_open_memory(&g, copy, b.n, "c", &err) == RG_OK) {
                for (uint64_t t = 0; t < g->n_tensors; t++) {
                    const rg_gguf_tensor *ti = &g->tensors[t];
                    RG_CHECK(g->data_start + ti->offset + ti->nbytes <= b.n, "tensor past end at flip %zu", i);
                }
                rg_gguf_free(g);
            } else
                RG_CHECK(err.msg[0], "no message for flip at %zu", i);
            free(copy);
        }
    }
    free(b.p);
}

// The complete 256-byte example of spec §1.13, which ggml's writer produces.
static void test_writer_matches_the_spec_example(void) {
    buf want = {0};
    header(&want, 3, 1, 3);
    str(&want, "general.architecture"), u32(&want, RG_GGUF_STRING), str(&want, "llama");
    kv_u32(&want, "general.file_type", 2);
    kv_u32(&want, "general.quantization_version", 2);
    tinfo(&want, "w", 2, (uint64_t[]){32, 2}, RG_TYPE_Q4_0, 0);
    RG_CHECK(want.n == 0xbb, "listing offset %zx", want.n);
    pad(&want, 32);
    static const uint8_t blocks[36] = {0xd8, 0xa7, 0x89, 0x56, 0x72, 0x0e, 0xbb, 0x28, 0xf8, 0xfc, 0xf3, 0xa0,
                                       0x65, 0x39, 0x92, 0xe3, 0x38, 0x3e, 0x00, 0x80, 0x88, 0x88, 0x88, 0x88,
                                       0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88};
    put(&want, blocks, 36);
    pad(&want, 32);
    RG_REQUIRE(want.n == 256, "expected 256 bytes, built %zu", want.n);

    rg_gguf *g = rg_gguf_new();
    rg_error err = {0};
    RG_REQUIRE(rg_gguf_set_str(g, "general.architecture", "llama", &err) == RG_OK, "%s", err.msg);
    rg_gguf_set_u32(g, "general.file_type", 2, &err);
    rg_gguf_set_u32(g, "general.quantization_version", 2, &err);
    RG_REQUIRE(rg_gguf_add_tensor(g, "w", RG_TYPE_Q4_0, 2, (int64_t[]){32, 2}, blocks, &err) == RG_OK, "%s", err.msg);
    char path[] = "/tmp/rg_test_specXXXXXX";
    int fd = mkstemp(path);
    close(fd);
    RG_REQUIRE(rg_gguf_write(g, path, &err) == RG_OK, "%s", err.msg);
    rg_gguf_free(g);
    FILE *f = fopen(path, "rb");
    uint8_t got[512];
    size_t n = fread(got, 1, sizeof got, f);
    fclose(f);
    RG_CHECK(n == 256, "wrote %zu bytes, expected 256", n);
    for (size_t i = 0; i < n && i < 256; i++)
        if (got[i] != want.p[i]) {
            RG_CHECK(0, "byte %zu is %02x, expected %02x", i, got[i], want.p[i]);
            break;
        }
    // And it reads back as what was written.
    RG_REQUIRE(rg_gguf_open(&g, path, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(g->data_start == 192 && g->tensors[0].nbytes == 36, "data_start %llu", (unsigned long long)g->data_start);
    rg_gguf_free(g);
    unlink(path);
    free(want.p);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n ? *n : 1);
    if (p && fread(p, 1, *n, f) != *n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p;
}

// Read a file, write it back: the same bytes (every value type, several alignments).
static void test_read_write_round_trip_is_byte_identical(void) {
    static const uint32_t aligns[] = {32, 64, 8, 256};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
        rg_gguf *g = rg_gguf_new();
        rg_error err = {0};
        if (aligns[a] != 32) rg_gguf_set_u32(g, "general.alignment", aligns[a], &err);
        rg_gguf_set(g, "t.u8", RG_GGUF_U8, &(uint8_t){200}, &err);
        rg_gguf_set(g, "t.i8", RG_GGUF_I8, &(int8_t){-100}, &err);
        rg_gguf_set(g, "t.u16", RG_GGUF_U16, &(uint16_t){60000}, &err);
        rg_gguf_set(g, "t.i16", RG_GGUF_I16, &(int16_t){-30000}, &err);
        rg_gguf_set_u32(g, "t.u32", 4000000000u, &err);
        rg_gguf_set_i32(g, "t.i32", -2000000000, &err);
        rg_gguf_set_f32(g, "t.f32", 0.1f, &err);
        rg_gguf_set_bool(g, "t.bool", true, &err);
        rg_gguf_set_str(g, "t.str", "h\xc3\xa9llo \xf0\x9f\x99\x82", &err);
        rg_gguf_set_u64(g, "t.u64", UINT64_MAX, &err);
        rg_gguf_set(g, "t.i64", RG_GGUF_I64, &(int64_t){INT64_MIN}, &err);
        rg_gguf_set(g, "t.f64", RG_GGUF_F64, &(double){-1e300}, &err);
        const char *strs[] = {"a", "", "ccc"};
        rg_gguf_set_str_array(g, "t.strs", strs, 3, &err);
        int32_t ints[5] = {1, -2, 3, -4, 5};
        rg_gguf_set_array(g, "t.ints", RG_GGUF_I32, ints, 5, &err);
        rg_gguf_set_array(g, "t.empty", RG_GGUF_F32, NULL, 0, &err);
        uint8_t data[3 * 64];
        for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7);
        rg_gguf_add_tensor(g, "a", RG_TYPE_F32, 1, (int64_t[]){3}, data, &err);
        rg_gguf_add_tensor(g, "b", RG_TYPE_I8, 3, (int64_t[]){5, 1, 2}, data, &err);
        RG_REQUIRE(rg_gguf_add_tensor(g, "c", RG_TYPE_F16, 4, (int64_t[]){2, 2, 2, 2}, data, &err) == RG_OK, "%s",
                   err.msg);
        RG_REQUIRE(g->n_kv == 15 + (aligns[a] != 32), "kv count %llu", (unsigned long long)g->n_kv);
        char p1[] = "/tmp/rg_test_rt1XXXXXX", p2[] = "/tmp/rg_test_rt2XXXXXX";
        close(mkstemp(p1));
        close(mkstemp(p2));
        RG_REQUIRE(rg_gguf_write(g, p1, &err) == RG_OK, "%s", err.msg);
        rg_gguf_free(g);
        RG_REQUIRE(rg_gguf_open(&g, p1, &err) == RG_OK, "%s", err.msg);
        RG_CHECK(g->alignment == aligns[a], "alignment %u", g->alignment);
        int64_t i64;
        RG_CHECK(rg_gguf_kv_i64(rg_gguf_find(g, "t.i64"), 0, &i64) && i64 == INT64_MIN, "i64");
        RG_CHECK(rg_gguf_str_eq(rg_gguf_kv_str(rg_gguf_find(g, "t.strs"), 2), "ccc"), "string array");
        RG_CHECK(rg_gguf_find_tensor(g, "c")->offset % aligns[a] == 0, "tensor offset alignment");
        RG_REQUIRE(rg_gguf_write(g, p2, &err) == RG_OK, "%s", err.msg);
        rg_gguf_free(g);
        size_t n1, n2;
        uint8_t *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2);
        RG_CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0, "alignment %u: round trip differs (%zu vs %zu bytes)",
                 aligns[a], n1, n2);
        free(b1), free(b2);
        unlink(p1), unlink(p2);
    }
}

static void test_tiny_fixture_round_trip_and_determinism(void) {
    static const uint32_t types[] = {RG_TYPE_F32, RG_TYPE_F16, RG_TYPE_BF16};
    for (size_t i = 0; i < 3; i++) {
        rg_tiny_config cfg = {.arch = "qwen2", .type = types[i], .seed = 7};
        char p1[] = "/tmp/rg_test_tiny1XXXXXX", p2[] = "/tmp/rg_test_tiny2XXXXXX", p3[] = "/tmp/rg_test_tiny3XXXXXX";
        close(mkstemp(p1)), close(mkstemp(p2)), close(mkstemp(p3));
        rg_error err = {0};
        RG_REQUIRE(rg_tiny_write(&cfg, p1, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(rg_tiny_write(&cfg, p2, &err) == RG_OK, "%s", err.msg);
        rg_gguf *g;
        RG_REQUIRE(rg_gguf_open(&g, p1, &err) == RG_OK, "%s", err.msg);
        RG_REQUIRE(rg_gguf_write(g, p3, &err) == RG_OK, "%s", err.msg);
        const rg_gguf_tensor *q = rg_gguf_find_tensor(g, "blk.1.attn_q.weight");
        RG_CHECK(q && q->type == types[i], "matrix type");
        const rg_gguf_tensor *nrm = rg_gguf_find_tensor(g, "blk.0.attn_norm.weight");
        RG_CHECK(nrm && nrm->type == RG_TYPE_F32 && nrm->n_dims == 1, "norm stays f32");
        rg_gguf_free(g);
        size_t n1, n2, n3;
        uint8_t *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2), *b3 = slurp(p3, &n3);
        RG_CHECK(n1 == n2 && !memcmp(b1, b2, n1), "%s: same seed, different bytes", rg_type_get(types[i])->name);
        RG_CHECK(n1 == n3 && !memcmp(b1, b3, n1), "%s: read+write differs", rg_type_get(types[i])->name);
        free(b1), free(b2), free(b3);
        unlink(p1), unlink(p2), unlink(p3);
    }
}

// A large shape written as it is made (chunks of 32 MiB, 3 threads) holds the same bytes as
// the shape built in memory on one thread: SmolLM2's token_embd (54 MiB in F16) spans two
// chunks. The 1b shape's plan has Llama-3.2-1B's tensor table.
static void test_tiny_shape_streamed_equals_built(void) {
    rg_error err = {0};
    rg_gguf *plan;
    rg_tiny_config big = {.arch = "llama", .type = RG_TYPE_BF16, .seed = 42, .shape = "1b"};
    RG_REQUIRE(rg_tiny_plan(&big, &plan, &err) == RG_OK, "%s", err.msg);
    uint64_t params = 0;
    for (uint64_t t = 0; t < plan->n_tensors; t++) params += (uint64_t)(plan->tensors[t].ne[0] * plan->tensors[t].ne[1]);
    const rg_gguf_tensor *k = rg_gguf_find_tensor(plan, "blk.15.attn_k.weight");
    RG_CHECK(plan->n_tensors == 146 && params == 1235814400u && k && k->ne[0] == 2048 && k->ne[1] == 512 &&
                 k->type == RG_TYPE_BF16 && !k->data && !rg_gguf_find_tensor(plan, "output.weight"),
             "1b plan: %llu tensors, %llu parameters", (unsigned long long)plan->n_tensors, (unsigned long long)params);
    rg_gguf_free(plan);
    if (getenv("RG_TEST_QUICK")) RG_SKIP("RG_TEST_QUICK: the 270 MB shape is left to the full run");
    rg_tiny_config cfg = {.arch = "llama", .type = RG_TYPE_F16, .seed = 9, .shape = "smollm2", .n_threads = 1};
    rg_gguf *built, *read;
    RG_REQUIRE(rg_tiny_build(&cfg, &built, &err) == RG_OK, "%s", err.msg);
    char path[] = "/tmp/rg_test_shapeXXXXXX";
    close(mkstemp(path));
    cfg.n_threads = 3;
    RG_REQUIRE(rg_tiny_write(&cfg, path, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_gguf_open(&read, path, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(read->n_tensors == built->n_tensors && read->n_kv == built->n_kv, "tensor or key count differs");
    for (uint64_t t = 0; t < read->n_tensors && t < built->n_tensors; t++) {
        const rg_gguf_tensor *a = &built->tensors[t], *b = &read->tensors[t];
        RG_CHECK(a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes), "%s: streamed bytes differ", a->name);
    }
    rg_gguf_free(read);
    rg_gguf_free(built);
    unlink(path);
}

// The twin holds the half fixture's values exactly, in F32.
static void test_twin_holds_the_same_values(void) {
    rg_error err = {0};
    rg_gguf *half, *twin;
    rg_tiny_config c1 = {.arch = "qwen2", .type = RG_TYPE_F16, .seed = 11};
    rg_tiny_config c2 = c1;
    c2.twin_f32 = true;
    RG_REQUIRE(rg_tiny_build(&c1, &half, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_tiny_build(&c2, &twin, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(half->n_tensors == twin->n_tensors, "tensor counts");
    for (uint64_t t = 0; t < half->n_tensors; t++) {
        const rg_gguf_tensor *a = &half->tensors[t], *b = &twin->tensors[t];
        RG_CHECK(b->type == RG_TYPE_F32, "%s twin type", b->name);
        int64_t n = a->ne[0] * a->ne[1];
        for (int64_t i = 0; i < n; i++) {
            float va, vb;
            memcpy(&vb, (const uint8_t *)b->data + 4 * i, 4);
            if (a->type == RG_TYPE_F16) {
                uint16_t h;
                memcpy(&h, (const uint8_t *)a->data + 2 * i, 2);
                va = rg_fp16_to_fp32(h);
            } else
                memcpy(&va, (const uint8_t *)a->data + 4 * i, 4);
            if (va != vb) {
                RG_CHECK(0, "%s[%lld]: %g vs twin %g", a->name, (long long)i, va, vb);
                break;
            }
        }
    }
    rg_gguf_free(half);
    rg_gguf_free(twin);
}

static int count_temp_files(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

// A write that fails (here: the file size limit, as a full disk would) leaves the
// previous file intact and no temporary behind.
static void test_failed_write_keeps_the_old_file(void) {
    char dir[] = "/tmp/rg_test_atomicXXXXXX";
    RG_REQUIRE(mkdtemp(dir), "mkdtemp");
    char path[128];
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    rg_tiny_config cfg = {.arch = "qwen2", .type = RG_TYPE_F32, .seed = 1};
    rg_error err = {0};
    RG_REQUIRE(rg_tiny_write(&cfg, path, &err) == RG_OK, "%s", err.msg);
    size_t n_before;
    uint8_t *before = slurp(path, &n_before);

    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    struct rlimit lim = {100000, old.rlim_max};
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    cfg.seed = 2;
    rg_status s = rg_tiny_write(&cfg, path, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    RG_CHECK(s == RG_ERR_IO, "write past the size limit returned %d", s);
    RG_CHECK(strstr(err.msg, "model.gguf") && strstr(err.msg, "failed"), "message: %s", err.msg);
    size_t n_after;
    uint8_t *after = slurp(path, &n_after);
    RG_CHECK(after && n_after == n_before && !memcmp(before, after, n_before), "the old file was changed");
    RG_CHECK(count_temp_files(dir, "model.gguf") == 0, "a temporary file was left behind");

    // A directory that does not exist: an error naming the path, nothing created.
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no/such/dir.gguf", dir);
    RG_CHECK(rg_tiny_write(&cfg, missing, &err) == RG_ERR_IO && strstr(err.msg, "no/such/dir.gguf"), "%s", err.msg);
    free(before), free(after);
    unlink(path);
    rmdir(dir);
}

static void test_open_reports_missing_and_directory(void) {
    rg_gguf *g;
    rg_error err = {0};
    RG_CHECK(rg_gguf_open(&g, "/nonexistent/x.gguf", &err) == RG_ERR_IO && strstr(err.msg, "/nonexistent/x.gguf") &&
                 strstr(err.msg, "No such file"), "%s", err.msg);
    RG_CHECK(rg_gguf_open(&g, "/tmp", &err) == RG_ERR_IO && strstr(err.msg, "is a directory"), "%s", err.msg);
}

static void test_type_table(void) {
    int storage = 0;
    for (uint32_t t = 0; t < RG_TYPE_COUNT; t++) {
        const rg_type_traits *tt = rg_type_get(t);
        RG_CHECK(tt->name && tt->name[0], "type %u has no name", t);
        if (tt->role == RG_ROLE_INVALID) continue;
        storage += tt->role == RG_ROLE_STORAGE;
        RG_CHECK(tt->block_size > 0 && tt->type_size > 0, "type %s sizes", tt->name);
        RG_CHECK(rg_type_from_name(tt->name) == (int)t, "name lookup of %s", tt->name);
    }
    RG_CHECK(storage == 33, "%d storage types, expected 33", storage);
    RG_CHECK(rg_type_row_size(RG_TYPE_Q4_K, 512) == 288, "q4_K row");
    RG_CHECK(rg_type_row_size(RG_TYPE_Q4_0, 33) == 0, "q4_0 row of 33");
    RG_CHECK(rg_type_get(4)->role == RG_ROLE_INVALID && rg_type_get(1000)->role == RG_ROLE_INVALID, "invalid ids");
    RG_CHECK(rg_type_get(RG_TYPE_Q8_K)->role == RG_ROLE_INTERMEDIATE, "q8_K intermediate");
    RG_CHECK(rg_type_from_name("Q4_K") == RG_TYPE_Q4_K && rg_type_from_name("nope") == -1, "case-insensitive names");
    // Bits per weight from the spec table for a few.
    RG_CHECK(rg_type_get(RG_TYPE_IQ1_M)->type_size == 56 && rg_type_get(RG_TYPE_NVFP4)->block_size == 64, "iq1_m nvfp4");
}

// Resident pages of this process (/proc/self/statm, second field).
static long resident_pages(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = -1;
    if (f && fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
    if (f) fclose(f);
    return res;
}

// A released range leaves this process's resident set and reads back the same.
static void test_map_release_drops_pages(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/rg_test_release_%d.bin", (int)getpid());
    const size_t n = 16u << 20;
    uint8_t *buf = malloc(n);
    RG_REQUIRE(buf, "malloc");
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 2654435761u >> 13);
    FILE *f = fopen(path, "wb");
    RG_REQUIRE(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0, "write %s", path);
    rg_file_map m;
    rg_error err = {0};
    RG_REQUIRE(rg_file_map_open(&m, path, &err) == RG_OK, "%s", err.msg);
    unsigned sum = 0;
    for (size_t i = 0; i < n; i += 4096) sum += m.data[i];
    long before = resident_pages();
    rg_file_map_release(&m, m.data + 100, n - 200);  // the whole pages inside
    long after = resident_pages(), page = sysconf(_SC_PAGESIZE);
    RG_CHECK(before > 0 && (before - after) * page >= (long)(n - n / 16),
             "resident before %ld after %ld pages: released less than the range", before, after);
    RG_CHECK(memcmp(m.data, buf, n) == 0, "the mapping reads back differently after the release");
    rg_file_map_release(&m, buf, 4096);  // outside the mapping: nothing
    rg_file_map_release(&m, m.data + n - 10, 20);  // past its end: nothing
    RG_CHECK(m.data[n - 1] == buf[n - 1] && sum > 0, "last byte");
    rg_file_map_close(&m);
    unlink(path);
    free(buf);
}

// Files of 2 MiB or more are mapped at a 2 MiB boundary (so the kernel can map
// huge page-cache folios whole: base/file.c); smaller ones anywhere. Both read
// back the file's bytes, at the start, across the last page and at the end,
// and unmap cleanly (the reservation's slack is returned: ASan and a second
// mapping of the same size in the same place would show a leak or overlap).
static void test_map_alignment(void) {
    static const size_t sizes[] = {100, (2u << 20) - 1, 2u << 20, (3u << 20) + 123, (8u << 20) + 4096};
    char path[64];
    snprintf(path, sizeof path, "/tmp/rg_test_align_%d.bin", (int)getpid());
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const size_t n = sizes[si];
        uint8_t *buf = malloc(n);
        RG_REQUIRE(buf, "malloc");
        for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 2654435761u >> 11);
        FILE *f = fopen(path, "wb");
        RG_REQUIRE(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0, "write %s", path);
        for (int round = 0; round < 3; round++) {
            rg_file_map m;
            rg_error err = {0};
            RG_REQUIRE(rg_file_map_open(&m, path, &err) == RG_OK, "%s", err.msg);
            RG_CHECK(m.size == n, "size %zu, file %zu", m.size, n);
            if (n >= (2u << 20))
                RG_CHECK(((uintptr_t)m.data & ((2u << 20) - 1)) == 0, "%zu bytes mapped at %p: not 2 MiB aligned", n,
                         (const void *)m.data);
            RG_CHECK(memcmp(m.data, buf, n) == 0, "%zu bytes: the mapping reads back differently", n);
            rg_file_map_close(&m);
        }
        free(buf);
    }
    unlink(path);
}

static const rg_test_case cases[] = {
    RG_TEST(test_type_table),
    RG_TEST(test_valid_base_file_reads),
    RG_TEST(test_hostile_files_are_refused_with_a_reason),
    RG_TEST(test_every_truncation_is_refused),
    RG_TEST(test_single_byte_corruptions_do_not_crash),
    RG_TEST(test_writer_matches_the_spec_example),
    RG_TEST(test_read_write_round_trip_is_byte_identical),
    RG_TEST(test_tiny_fixture_round_trip_and_determinism),
    RG_TEST(test_tiny_shape_streamed_equals_built),
    RG_TEST(test_twin_holds_the_same_values),
    RG_TEST(test_failed_write_keeps_the_old_file),
    RG_TEST(test_open_reports_missing_and_directory),
    RG_TEST(test_map_release_drops_pages),
    RG_TEST(test_map_alignment),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
