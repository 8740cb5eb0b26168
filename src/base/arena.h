// arena.h - a bump allocator for memory that lives and dies together
// (the metadata of one GGUF file, the tensors of one step).
#ifndef RG_BASE_ARENA_H
#define RG_BASE_ARENA_H

#include <stddef.h>

typedef struct rg_arena_chunk rg_arena_chunk;

typedef struct rg_arena {
    rg_arena_chunk *head;  // newest chunk first
    size_t chunk_size;     // default size of a new chunk (bytes)
    size_t used;           // bytes handed out, for reports
} rg_arena;

// chunk_size 0 picks 64 KiB. No memory is taken until the first allocation.
void rg_arena_init(rg_arena *a, size_t chunk_size);
// Aligned to `align` (a power of two, at most 4096); zeroed. NULL when out of memory
// or when size + align would overflow.
void *rg_arena_alloc(rg_arena *a, size_t size, size_t align);
// Copies n bytes and appends a NUL.
char *rg_arena_strndup(rg_arena *a, const char *s, size_t n);
void rg_arena_free(rg_arena *a);

#endif
