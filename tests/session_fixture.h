// session_fixture.h - what the session tests share: a tiny fixture written (F32, F16 or BF16, or
// written in F32 and quantized, every matrix in the type) and loaded, a file read whole or written, and two
// sessions' state files compared (their state, or the whole files with the snapshots they keep).
#ifndef RG_TESTS_SESSION_FIXTURE_H
#define RG_TESTS_SESSION_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "infer/session.h"
#include "infer/session_state.h"
#include "model/model.h"
#include "model/quantize.h"
#include "model/tiny.h"

// The tiny `arch` model in `type` (seed, tied head), its file at path (a 64-byte buffer, made here);
// NULL with the reason printed.
static inline rg_model *sf_tiny_model(const char *arch, uint32_t type, uint64_t seed, bool tied, char *path,
                                      const char *tag) {
    snprintf(path, 64, "/tmp/rg_test_%s_XXXXXX", tag);
    close(mkstemp(path));
    const bool quantized = rg_type_get(type)->quantized;  // written in F32, then quantized
    rg_tiny_config cfg = {.arch = arch, .type = quantized ? RG_TYPE_F32 : type, .seed = seed, .tied = tied};
    rg_error err = {0};
    rg_model *m = NULL;
    rg_quantize_opts qo = {.n_threads = 1, .pure = true};  // every matrix in the type (no Q6_K head)
    rg_quantize_summary qs;
    if (rg_tiny_write(&cfg, path, &err) ||
        (quantized && rg_quantize_file(path, path, rg_type_get(type)->name, &qo, &qs, &err)) ||
        rg_model_load(&m, path, &err)) {
        printf("    %s %s: %s\n", arch, rg_type_get(type)->name, err.msg);
        return NULL;
    }
    return m;
}

// A continuation: ids[0..first) in one batch with every logit, then the rest one at a time; every
// logit into out[n_vocab * n].
static inline bool sf_eval_cont(rg_session *s, const int32_t *ids, int n, int first, float *out) {
    const int64_t V = rg_session_model(s)->hp.n_vocab;
    rg_error err = {0};
    rg_status st = rg_session_eval(s, ids, first, out, 1, &err);
    for (int i = first; !st && i < n; i++) st = rg_session_eval(s, &ids[i], 1, out + (size_t)i * V, 0, &err);
    if (st) printf("    continuation: %s\n", err.msg);
    return !st;
}

// A case's tag: "[cuda ]arch type:".
static inline void sf_tag(char *tag, size_t n, rg_device d, const char *arch, uint32_t type) {
    snprintf(tag, n, "%s%s %s:", d == RG_DEVICE_CUDA ? "cuda " : "", arch, rg_type_get(type)->name);
}

// A test case fn running `call` on the CUDA device (a GPU, or the host execution of the CUDA code with
// RETRO_CUDA_HOST=1) with the test's device variable set to it for the call; skipped without one (rg_test.h).
#define SF_CUDA_CASE(fn, device_var, call)                                                   \
    static void fn(void) {                                                                   \
        char why[256];                                                                       \
        if (rg_cuda_device_count(why, sizeof why) <= 0) RG_SKIP("no CUDA device: %s", why); \
        device_var = RG_DEVICE_CUDA;                                                         \
        call;                                                                                \
        device_var = RG_DEVICE_CPU;                                                          \
    }

// The whole file (malloc'd, *n bytes), or NULL.
static inline unsigned char *sf_read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = size >= 0 ? malloc((size_t)size + 1) : NULL;
    *n = b ? fread(b, 1, (size_t)size, f) : 0;
    fclose(f);
    return b;
}

static inline void sf_write_all(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(b, 1, n, f);
    fclose(f);
}

// Where a state file's state ends: before its snapshot section (format version 2: the last 16 bytes hold its size
// S and the checksum, session_state.c) or its checksum (version 1). Two sessions that reached one state along other
// paths keep other snapshots: their files agree up to here.
static inline size_t sf_state_end(const unsigned char *b, size_t n) {
    uint32_t version = 0;
    uint64_t s = 0;
    if (n < 16) return n;
    memcpy(&version, b + 8, 4);
    memcpy(&s, b + n - 16, 8);
    return version < 2 ? n - 8 : s <= n - 16 ? n - 16 - (size_t)s : n;
}

// Whether sequence sa of a and sequence sb of b save the same state files (infer/session_state.h): the state
// (snapshots: false), or the whole files, the recurrent-state snapshots they keep included (true).
static inline bool sf_same_saved_seq(rg_session *a, int sa, rg_session *b, int sb, bool snapshots) {
    char pa[64] = "/tmp/rg_test_state_aXXXXXX", pb[64] = "/tmp/rg_test_state_bXXXXXX";
    close(mkstemp(pa)), close(mkstemp(pb));
    rg_error err = {0};
    bool same = false;
    if (rg_session_state_save_seq(a, sa, pa, &err) || rg_session_state_save_seq(b, sb, pb, &err)) {
        printf("    save: %s\n", err.msg);
    } else {
        size_t na = 0, nb = 0;
        unsigned char *x = sf_read_all(pa, &na), *y = sf_read_all(pb, &nb);
        if (x && y && !snapshots) na = sf_state_end(x, na), nb = sf_state_end(y, nb);
        same = x && y && na == nb && !memcmp(x, y, na);
        free(x), free(y);
    }
    unlink(pa), unlink(pb);
    return same;
}

static inline bool sf_same_saved(rg_session *a, rg_session *b, bool snapshots) {
    return sf_same_saved_seq(a, 0, b, 0, snapshots);
}

// The state alone (sf_same_saved).
static inline bool sf_same_state(rg_session *a, rg_session *b) { return sf_same_saved(a, b, false); }

#endif
