// resident.c - device copies that outlive an exec (exec.h's rg_resident): one per (host
// bytes, length), made at the first exec that reads them on the device and reused by the next
// ones; the exec's side of it is resident.h.
#include "graph/resident.h"

#include <stdint.h>
#include <stdlib.h>

#include "base/error.h"
#include "graph/backend.h"

typedef struct resident_entry {
    const void *host;
    size_t bytes;
    void *dev;
    bool dirty;  // the device wrote it since it was uploaded or synchronized
} resident_entry;

struct rg_resident {
    rg_backend *dev;
    resident_entry *e;
    int n, cap;
    size_t bytes;
};

rg_status rg_resident_create(rg_resident **out, rg_backend *dev, rg_error *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return rg_fail(err, RG_ERR_NOMEM, "exec: out of memory");
    (*out)->dev = dev;
    return RG_OK;
}

static resident_entry *resident_find(rg_resident *r, const void *host, size_t bytes) {
    for (int k = 0; k < r->n; k++)
        if (r->e[k].host == host && r->e[k].bytes == bytes) return &r->e[k];
    return NULL;
}

// The device copy of [host, host + bytes): found (fresh = false) or made (fresh = true: the
// caller uploads it).
rg_status rg_resident_get(rg_resident *r, const void *host, size_t bytes, void **dev, bool *fresh, rg_error *err) {
    resident_entry *e = resident_find(r, host, bytes);
    if (e) {
        *dev = e->dev, *fresh = false;
        return RG_OK;
    }
    if (r->n == r->cap) {
        int nc = r->cap ? 2 * r->cap : 64;
        resident_entry *p = realloc(r->e, sizeof *p * (size_t)nc);
        if (!p) return rg_fail(err, RG_ERR_NOMEM, "exec: out of memory");
        r->e = p, r->cap = nc;
    }
    rg_status st = r->dev->vt->alloc(r->dev, bytes ? bytes : 1, dev, err);
    if (st) return st;
    r->e[r->n++] = (resident_entry){host, bytes, *dev, false};
    r->bytes += bytes;
    *fresh = true;
    return RG_OK;
}

// A leaf whose bytes already have a device copy lives on the device in this exec too: the
// copy may be newer than the host bytes (another exec wrote it).
bool rg_resident_pins(void *ctx, const rg_node *leaf) {
    return (leaf->flags & RG_NODE_EXTERNAL) && leaf->t.data && resident_find(ctx, leaf->t.data, rg_tensor_span(&leaf->t));
}

void rg_resident_mark_dirty(rg_resident *r, const void *host, size_t bytes) {
    resident_entry *e = r ? resident_find(r, host, bytes) : NULL;
    if (e) e->dirty = true;
}

rg_status rg_resident_sync_host(rg_resident *r, rg_error *err) {
    for (int k = 0; r && k < r->n; k++) {
        resident_entry *e = &r->e[k];
        if (!e->dirty) continue;
        rg_status st = r->dev->vt->download(r->dev, (void *)e->host, e->dev, e->bytes, err);
        if (st) return st;
        e->dirty = false;
    }
    return RG_OK;
}

// The host bytes of e sent to its device copy (which is then current).
static rg_status upload_entry(rg_resident *r, resident_entry *e, rg_error *err) {
    e->dirty = false;
    return r->dev->vt->upload(r->dev, e->dev, e->host, e->bytes, err);
}

rg_status rg_resident_refresh(rg_resident *r, const void *host, size_t bytes, rg_error *err) {
    resident_entry *e = r ? resident_find(r, host, bytes) : NULL;
    return e ? upload_entry(r, e, err) : RG_OK;
}

rg_status rg_resident_refresh_within(rg_resident *r, const void *host, size_t bytes, rg_error *err) {
    const uintptr_t lo = (uintptr_t)host, hi = lo + bytes;  // as integers: the entries are other objects
    for (int k = 0; r && k < r->n; k++) {
        resident_entry *e = &r->e[k];
        const uintptr_t p = (uintptr_t)e->host;
        if (p < lo || p + e->bytes > hi) continue;
        rg_status st = upload_entry(r, e, err);
        if (st) return st;
    }
    return RG_OK;
}

size_t rg_resident_bytes(const rg_resident *r) { return r ? r->bytes : 0; }

void rg_resident_free(rg_resident *r) {
    if (!r) return;
    rg_error ignored;
    if (r->n) r->dev->vt->sync(r->dev, &ignored);
    for (int k = 0; k < r->n; k++) r->dev->vt->release(r->dev, r->e[k].dev);
    free(r->e);
    free(r);
}

