// gguf.h - GGUF files in memory: read (validated, memory-mapped), build, write.
//
// One struct serves both directions. rg_gguf_open maps a file and validates
// every byte it will ever hand out (spec §1.10); values and tensor data then
// point into the mapping. rg_gguf_new starts an empty file to which keys and
// tensors are added; rg_gguf_write writes either kind atomically. Reading a
// valid file and writing it back gives the same bytes.
#ifndef RG_GGUF_H
#define RG_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/file.h"
#include "retrograd.h"

#define RG_GGUF_MAGIC 0x46554747u          // "GGUF" read as a little-endian u32
#define RG_GGUF_DEFAULT_ALIGNMENT 32u
#define RG_GGUF_MAX_NAME 63                // longest tensor name ggml accepts
#define RG_GGUF_MAX_DIMS 4
#define RG_GGUF_MAX_STRING ((uint64_t)1 << 30)  // ggml's cap on string lengths and array counts

typedef enum rg_gguf_vtype {
    RG_GGUF_U8 = 0, RG_GGUF_I8 = 1, RG_GGUF_U16 = 2, RG_GGUF_I16 = 3,
    RG_GGUF_U32 = 4, RG_GGUF_I32 = 5, RG_GGUF_F32 = 6, RG_GGUF_BOOL = 7,
    RG_GGUF_STRING = 8, RG_GGUF_ARRAY = 9, RG_GGUF_U64 = 10, RG_GGUF_I64 = 11,
    RG_GGUF_F64 = 12,
    RG_GGUF_VTYPE_COUNT = 13,
} rg_gguf_vtype;

// A GGUF string: bytes and a length, not NUL-terminated when it points into a file.
typedef struct rg_gguf_str {
    uint64_t len;
    const char *ptr;
} rg_gguf_str;

typedef struct rg_gguf_kv {
    rg_gguf_str key;
    uint32_t type;      // rg_gguf_vtype
    uint32_t arr_type;  // element type when type == RG_GGUF_ARRAY
    uint64_t n;         // number of elements: 1 for a scalar
    // Numeric and bool: n packed little-endian elements, possibly unaligned (read them
    // with the accessors). STRING, or ARRAY of STRING: rg_gguf_str[n].
    const void *data;
    uint64_t file_offset;  // where the pair starts in the file; 0 for a built one
} rg_gguf_kv;

typedef struct rg_gguf_tensor {
    char name[RG_GGUF_MAX_NAME + 1];
    uint32_t n_dims;
    int64_t ne[RG_GGUF_MAX_DIMS];  // ne[0] innermost; missing dims are 1
    uint32_t type;                 // rg_type
    uint64_t offset;               // from the start of the data section
    uint64_t nbytes;
    const void *data;              // in the mapping, or the caller's buffer for a built file
    uint64_t info_offset;          // where its info record starts in the file; 0 when built
} rg_gguf_tensor;

typedef struct rg_gguf {
    char *path;          // for messages: the file, or a name given to a memory buffer
    uint32_t version;    // 2 or 3 when read; 3 when built
    uint32_t alignment;  // from general.alignment, or 32
    uint64_t n_kv, cap_kv;
    rg_gguf_kv *kv;
    uint64_t n_tensors, cap_tensors;
    rg_gguf_tensor *tensors;
    uint64_t data_start;  // file offset of the data section (read files)
    uint64_t file_size;
    rg_file_map map;      // empty for built files and memory buffers
    rg_arena arena;       // everything owned: keys, values, tables
} rg_gguf;

// Size in bytes of one scalar of a value type; 0 for STRING, ARRAY and unknown ids.
size_t rg_gguf_vtype_size(uint32_t type);
const char *rg_gguf_vtype_name(uint32_t type);

// Reading. Every failure names the file, the byte offset and what was expected.
rg_status rg_gguf_open(rg_gguf **out, const char *path, rg_error *err);
// The same checks over a buffer that must outlive the result (fuzzing, tests).
rg_status rg_gguf_open_memory(rg_gguf **out, const void *data, size_t size, const char *name, rg_error *err);
void rg_gguf_free(rg_gguf *g);

// Lookups. Keys and tensors are few; a linear scan is what they need.
const rg_gguf_kv *rg_gguf_find(const rg_gguf *g, const char *key);
const rg_gguf_tensor *rg_gguf_find_tensor(const rg_gguf *g, const char *name);
// Typed getters that accept any integer (or float) width and range-check the value.
// RG_ERR_NOT_FOUND when the key is absent, RG_ERR_FORMAT when it has the wrong type.
rg_status rg_gguf_get_u64(const rg_gguf *g, const char *key, uint64_t *out, rg_error *err);
rg_status rg_gguf_get_f64(const rg_gguf *g, const char *key, double *out, rg_error *err);
rg_status rg_gguf_get_bool(const rg_gguf *g, const char *key, bool *out, rg_error *err);
rg_status rg_gguf_get_str(const rg_gguf *g, const char *key, rg_gguf_str *out, rg_error *err);
// Element i of a numeric scalar or array value, converted; false when not numeric.
bool rg_gguf_kv_i64(const rg_gguf_kv *kv, uint64_t i, int64_t *out);
bool rg_gguf_kv_u64(const rg_gguf_kv *kv, uint64_t i, uint64_t *out);
bool rg_gguf_kv_f64(const rg_gguf_kv *kv, uint64_t i, double *out);
// Element i of a STRING value or string array; {0, NULL} when not a string.
rg_gguf_str rg_gguf_kv_str(const rg_gguf_kv *kv, uint64_t i);
bool rg_gguf_str_eq(rg_gguf_str s, const char *c);

// Building. Setting a key that exists replaces its value in place (order is kept).
// Values are copied; tensor data is not (it must live until rg_gguf_write returns).
rg_gguf *rg_gguf_new(void);
rg_status rg_gguf_set(rg_gguf *g, const char *key, uint32_t type, const void *value, rg_error *err);
rg_status rg_gguf_set_u32(rg_gguf *g, const char *key, uint32_t v, rg_error *err);
rg_status rg_gguf_set_i32(rg_gguf *g, const char *key, int32_t v, rg_error *err);
rg_status rg_gguf_set_u64(rg_gguf *g, const char *key, uint64_t v, rg_error *err);
rg_status rg_gguf_set_f32(rg_gguf *g, const char *key, float v, rg_error *err);
rg_status rg_gguf_set_bool(rg_gguf *g, const char *key, bool v, rg_error *err);
rg_status rg_gguf_set_str(rg_gguf *g, const char *key, const char *v, rg_error *err);
// A numeric or bool array of n elements of elem_type, packed little-endian.
rg_status rg_gguf_set_array(rg_gguf *g, const char *key, uint32_t elem_type, const void *data, uint64_t n,
                            rg_error *err);
rg_status rg_gguf_set_str_array(rg_gguf *g, const char *key, const char *const *strs, uint64_t n, rg_error *err);
// Copies a pair from another file (any type), replacing a pair of the same key.
rg_status rg_gguf_set_kv(rg_gguf *g, const rg_gguf_kv *kv, rg_error *err);
rg_status rg_gguf_remove(rg_gguf *g, const char *key);
// ne has n_dims entries (1..4), ne[0] innermost. The name must be new and 1..63 bytes.
rg_status rg_gguf_add_tensor(rg_gguf *g, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                             const void *data, rg_error *err);

// Writes header, pairs, tensor infos (offsets packed in order), padding and data,
// to a temporary file that is synced and renamed over path only when complete.
rg_status rg_gguf_write(const rg_gguf *g, const char *path, rg_error *err);

// The bytes [offset, offset + n) of tensor `index`'s data, written into dst: how
// rg_gguf_write_filled asks for the data of tensors added with data == NULL. offset and
// n are whole blocks of the tensor's type; n is at most RG_GGUF_FILL_CHUNK bytes.
typedef rg_status (*rg_gguf_fill_fn)(void *ctx, uint64_t index, uint64_t offset, void *dst, size_t n, rg_error *err);
#define RG_GGUF_FILL_CHUNK ((size_t)32 << 20)
// rg_gguf_write, except that a tensor without data is produced by fill chunk by chunk
// into one buffer of RG_GGUF_FILL_CHUNK bytes and written as it comes: a file larger
// than memory is never held whole (make-tiny's large shapes).
rg_status rg_gguf_write_filled(const rg_gguf *g, const char *path, rg_gguf_fill_fn fill, void *ctx, rg_error *err);

#endif
