// arena.c - chunked bump allocation; big requests get a chunk of their own.
#include "base/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct rg_arena_chunk {
    rg_arena_chunk *next;
    size_t size;  // usable bytes after the header
    size_t off;   // first free byte
    _Alignas(64) unsigned char data[];
};

void rg_arena_init(rg_arena *a, size_t chunk_size) {
    a->head = NULL;
    a->chunk_size = chunk_size ? chunk_size : (size_t)64 << 10;
    a->used = 0;
}

void *rg_arena_alloc(rg_arena *a, size_t size, size_t align) {
    if (align == 0) align = 1;
    if ((align & (align - 1)) || align > 4096) return NULL;
    if (size > SIZE_MAX / 2 - align) return NULL;
    rg_arena_chunk *c = a->head;
    if (c) {
        uintptr_t p = (uintptr_t)(c->data + c->off);
        size_t pad = (size_t)((align - (p & (align - 1))) & (align - 1));
        if (c->off + pad + size <= c->size) {
            void *out = c->data + c->off + pad;
            c->off += pad + size;
            a->used += size;
            return out;
        }
    }
    size_t need = size + align;
    size_t csize = need > a->chunk_size ? need : a->chunk_size;
    rg_arena_chunk *n = calloc(1, sizeof *n + csize);
    if (!n) return NULL;
    n->size = csize;
    // A request larger than a chunk goes behind the current head so the head keeps its free space.
    if (c && need > a->chunk_size) {
        n->next = c->next;
        c->next = n;
    } else {
        n->next = c;
        a->head = n;
    }
    uintptr_t p = (uintptr_t)n->data;
    size_t pad = (size_t)((align - (p & (align - 1))) & (align - 1));
    n->off = pad + size;
    a->used += size;
    return n->data + pad;
}

char *rg_arena_strndup(rg_arena *a, const char *s, size_t n) {
    if (n == SIZE_MAX) return NULL;
    char *out = rg_arena_alloc(a, n + 1, 1);
    if (!out) return NULL;
    if (n) memcpy(out, s, n);
    out[n] = 0;
    return out;
}

void rg_arena_free(rg_arena *a) {
    rg_arena_chunk *c = a->head;
    while (c) {
        rg_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}
