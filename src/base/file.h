// file.h - read-only memory maps and atomic (temp + fsync + rename) writes.
#ifndef RG_BASE_FILE_H
#define RG_BASE_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "retrograd.h"

typedef struct rg_file_map {
    const uint8_t *data;  // NULL for an empty file
    size_t size;
} rg_file_map;

// Maps a regular file read-only. A missing file, a directory, a device or an
// unreadable file is an RG_ERR_IO naming the path and the reason.
rg_status rg_file_map_open(rg_file_map *m, const char *path, rg_error *err);
void rg_file_map_close(rg_file_map *m);
// Drops the whole pages of [p, p + n) (inside m) from this process's memory:
// they are read again from the file if touched later. For data copied out of
// the mapping (a full fine-tune trains copies), so the process does not hold
// both. Does nothing outside the mapping.
void rg_file_map_release(const rg_file_map *m, const void *p, size_t n);

// A file written under a temporary name beside its final path and renamed over
// it only by rg_atomic_commit, after an fsync: a crash or an error leaves the
// final path untouched (either absent or the previous complete file).
typedef struct rg_atomic_file {
    FILE *f;
    char *final_path;
    char *tmp_path;
    uint64_t written;   // bytes accepted so far
    rg_status failed;   // first error, sticky: later writes do nothing
} rg_atomic_file;

rg_status rg_atomic_open(rg_atomic_file *af, const char *path, rg_error *err);
// Writes n bytes; after a failure every later call returns the same status.
rg_status rg_atomic_write(rg_atomic_file *af, const void *buf, size_t n, rg_error *err);
// Writes n zero bytes.
rg_status rg_atomic_write_zeros(rg_atomic_file *af, size_t n, rg_error *err);
// Flushes, fsyncs, renames over the final path and fsyncs the directory.
// On any failure the temporary file is removed and the final path is untouched.
rg_status rg_atomic_commit(rg_atomic_file *af, rg_error *err);
// Drops the temporary file (safe to call after commit or on a zeroed struct).
void rg_atomic_abort(rg_atomic_file *af);
// The whole of a buffer written as path, atomically (open, write, commit).
rg_status rg_atomic_write_file(const char *path, const void *buf, size_t n, rg_error *err);

#endif
