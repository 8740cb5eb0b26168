// tensor.h - typed n-d arrays in ggml order: ne[0] is the innermost,
// contiguous dimension; nb[i] is the stride of dimension i in bytes.
//
// A tensor either owns its bytes (allocated in an arena) or is a view of
// another tensor: a reshape, a permutation, a transpose or a strided window.
// Views share the bytes of their source; no data moves until an op copies it.
#ifndef RG_TENSOR_H
#define RG_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "retrograd.h"

#define RG_MAX_DIMS 4

typedef struct rg_tensor {
    uint32_t type;             // rg_type
    int64_t ne[RG_MAX_DIMS];   // elements per dimension, unused dimensions are 1
    size_t nb[RG_MAX_DIMS];    // bytes per step; nb[0] is the block size in bytes
    void *data;
    struct rg_tensor *view_src;  // the tensor that owns the bytes, NULL when this one does
    size_t view_offs;            // byte offset of data inside view_src
    char name[64];
} rg_tensor;

// A new contiguous tensor with zeroed bytes from the arena (64-byte aligned).
// Errors: a type that cannot hold data, ne[0] not a multiple of the block
// size, a negative dimension, a size that overflows.
rg_tensor *rg_tensor_new(rg_arena *a, uint32_t type, int n_dims, const int64_t *ne, rg_error *err);
// A tensor header over bytes someone else owns (a mapped GGUF tensor).
rg_tensor *rg_tensor_wrap(rg_arena *a, uint32_t type, int n_dims, const int64_t *ne, void *data, rg_error *err);

int64_t rg_tensor_nelements(const rg_tensor *t);
int64_t rg_tensor_nrows(const rg_tensor *t);  // ne[1] * ne[2] * ne[3]
size_t rg_tensor_row_size(const rg_tensor *t); // bytes of one row of ne[0] elements
// Bytes from the first to one past the last element (a strided view spans gaps).
size_t rg_tensor_span(const rg_tensor *t);
// Whether elements are packed in order with no gaps (ggml_is_contiguous).
bool rg_tensor_is_contiguous(const rg_tensor *t);
// Whether rows are packed (dims 1..3 may be strided, but each row is contiguous).
bool rg_tensor_rows_contiguous(const rg_tensor *t);
bool rg_tensor_is_transposed(const rg_tensor *t);  // nb[0] > nb[1]
bool rg_tensor_same_shape(const rg_tensor *a, const rg_tensor *b);
// "[64, 512]" written into buf.
const char *rg_tensor_shape_str(const rg_tensor *t, char *buf, size_t cap);

// Views. Each checks that the window lies inside the source and fails with a
// message naming both shapes otherwise.
rg_tensor *rg_tensor_view(rg_arena *a, rg_tensor *src, int n_dims, const int64_t *ne, const size_t *nb, size_t offset,
                          rg_error *err);
// Same elements, new shape; the source must be contiguous and the counts equal.
rg_tensor *rg_tensor_reshape(rg_arena *a, rg_tensor *src, int n_dims, const int64_t *ne, rg_error *err);
// Dimension i of the source becomes dimension axes[i] of the result (ggml_permute).
rg_tensor *rg_tensor_permute(rg_arena *a, rg_tensor *src, const int axes[RG_MAX_DIMS], rg_error *err);
rg_tensor *rg_tensor_transpose(rg_arena *a, rg_tensor *src, rg_error *err);  // swaps dims 0 and 1

// Address of element (i0, i1, i2, i3) for plain (block size 1) types.
static inline void *rg_tensor_at(const rg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return (char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

#endif
