// retrograd.h - the public interface of libretrograd.
//
// Every call that can fail returns an rg_status and, when given an rg_error,
// fills it with one line that names the file, tensor, key or byte offset at
// fault. Handles are opaque; free what a function hands you with its _free.
#ifndef RETROGRAD_H
#define RETROGRAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RG_VERSION_STRING "0.1.0"

typedef enum rg_status {
    RG_OK = 0,
    RG_ERR_IO = 1,        // open/read/write/sync/rename failed
    RG_ERR_FORMAT = 2,    // the input is not what it claims to be (bad GGUF, bad value)
    RG_ERR_ARG = 3,       // the caller asked for something impossible
    RG_ERR_NOMEM = 4,     // an allocation failed
    RG_ERR_UNSUPPORTED = 5,
    RG_ERR_NOT_FOUND = 6, // a key or tensor that is not there
    RG_ERR_NONFINITE = 7, // a loss or gradient came out NaN or Inf
} rg_status;

// One line of explanation. Functions write into it only when they fail.
typedef struct rg_error {
    rg_status status;
    char msg[1024];
} rg_error;

const char *rg_status_name(rg_status s);

// ---------------------------------------------------------------------------
// Tensor types (ggml type ids, as stored in GGUF files)

typedef enum rg_type {
    RG_TYPE_F32 = 0, RG_TYPE_F16 = 1, RG_TYPE_Q4_0 = 2, RG_TYPE_Q4_1 = 3,
    RG_TYPE_Q5_0 = 6, RG_TYPE_Q5_1 = 7, RG_TYPE_Q8_0 = 8, RG_TYPE_Q8_1 = 9,
    RG_TYPE_Q2_K = 10, RG_TYPE_Q3_K = 11, RG_TYPE_Q4_K = 12, RG_TYPE_Q5_K = 13,
    RG_TYPE_Q6_K = 14, RG_TYPE_Q8_K = 15, RG_TYPE_IQ2_XXS = 16, RG_TYPE_IQ2_XS = 17,
    RG_TYPE_IQ3_XXS = 18, RG_TYPE_IQ1_S = 19, RG_TYPE_IQ4_NL = 20, RG_TYPE_IQ3_S = 21,
    RG_TYPE_IQ2_S = 22, RG_TYPE_IQ4_XS = 23, RG_TYPE_I8 = 24, RG_TYPE_I16 = 25,
    RG_TYPE_I32 = 26, RG_TYPE_I64 = 27, RG_TYPE_F64 = 28, RG_TYPE_IQ1_M = 29,
    RG_TYPE_BF16 = 30, RG_TYPE_TQ1_0 = 34, RG_TYPE_TQ2_0 = 35, RG_TYPE_MXFP4 = 39,
    RG_TYPE_NVFP4 = 40, RG_TYPE_Q1_0 = 41, RG_TYPE_Q2_0 = 42,
    RG_TYPE_COUNT = 43,
} rg_type;

typedef enum rg_type_role {
    RG_ROLE_INVALID = 0,      // removed or never assigned id: refused in files
    RG_ROLE_STORAGE = 1,      // may appear in model files
    RG_ROLE_INTERMEDIATE = 2, // only used at run time (Q8_1, Q8_K): refused in files
} rg_type_role;

typedef struct rg_type_traits {
    const char *name;     // ggml's type_name ("f32", "q4_K", ...)
    int64_t block_size;   // elements per block (1 for plain types), 0 when invalid
    size_t type_size;     // bytes per block
    rg_type_role role;
    bool quantized;
} rg_type_traits;

// Traits for any 32-bit id; ids outside the table get a static "invalid" entry.
const rg_type_traits *rg_type_get(uint32_t type);
// Bytes of one row of ne0 elements; 0 when ne0 is not a multiple of the block size.
size_t rg_type_row_size(uint32_t type, int64_t ne0);
// The type id for a name ("q4_K", "Q4_K", "bf16"), or -1.
int rg_type_from_name(const char *name);

#ifdef __cplusplus
}
#endif
#endif
