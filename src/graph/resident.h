// resident.h - what the executor (exec*.c) uses of the device copies that outlive an exec
// (resident.c; the public side is exec.h's rg_resident_*).
#ifndef RG_GRAPH_RESIDENT_H
#define RG_GRAPH_RESIDENT_H

#include <stdbool.h>
#include <stddef.h>

#include "graph/exec.h"

// The device copy of [host, host + bytes): found (*fresh = false) or made (*fresh = true: the
// caller uploads it).
rg_status rg_resident_get(rg_resident *r, const void *host, size_t bytes, void **dev, bool *fresh, rg_error *err);
// The scheduler's pin callback (ctx: the rg_resident): a leaf whose bytes already have a device
// copy lives on the device in this exec too (the copy may be newer than the host bytes).
bool rg_resident_pins(void *ctx, const rg_node *leaf);
// The device wrote the copy of [host, host + bytes) (no-op when r is NULL or has none).
void rg_resident_mark_dirty(rg_resident *r, const void *host, size_t bytes);

#endif
