// support.h - what the libFuzzer targets (fuzz/fuzz_*.c) share: checks that say what broke,
// files of the source tree found from any working directory, the test vocabularies, and a
// reader that cuts one fuzz input into fields.
//
// Linked into every target by CMakeLists.txt (fuzz/support.c). RG_SOURCE_DIR is the source
// tree the targets were configured from, so a target finds tests/data/ wherever it runs.
#ifndef RG_FUZZ_SUPPORT_H
#define RG_FUZZ_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "retrograd.h"
#include "text/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// A broken promise: prints file, line, the condition and the message, then aborts (libFuzzer
// saves the input as a crash-* artifact).
#define FZ_CHECK(cond, ...) \
    do { if (!(cond)) fz_fail_(__FILE__, __LINE__, #cond, __VA_ARGS__); } while (0)
_Noreturn void fz_fail_(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// A failed call's error: the status is the expected one (any of `allowed`, a bit mask of
// 1u << status), err->status agrees, and the message is one non-empty NUL-terminated line.
void fz_check_error(rg_status st, const rg_error *err, uint32_t allowed, const char *what);
#define FZ_STATUS(s) (1u << (s))

// A file of the source tree (path relative to it), malloc'd and NUL-terminated; exits the
// process with a message when it cannot be read (a target without its data cannot run).
char *fz_read_source_file(const char *rel_path, size_t *len);

// The tokenizer of tests/data/tokenizer/ggml-vocab-NAME.gguf (exits when it cannot be loaded).
rg_tokenizer *fz_load_vocab(const char *name);

// Cuts an input into pieces: single bytes for choices, and fields up to a separator byte.
typedef struct fz_reader {
    const uint8_t *p;
    size_t n;
} fz_reader;

// The next byte, or 0 when the input is used up.
uint8_t fz_byte(fz_reader *r);
// The bytes up to the next `sep` (consumed, not included) or to the end; NULL when nothing is left.
const char *fz_field(fz_reader *r, uint8_t sep, size_t *len);

// memmem for byte strings; NULL when needle does not occur (an empty needle is at hay).
const char *fz_find(const char *hay, size_t n, const char *needle, size_t m);

#endif
