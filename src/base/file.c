// file.c - mapping files for reading and replacing them atomically.

#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

// Files of at least 2 MiB are mapped at a 2 MiB-aligned address and advised
// for huge pages. A generated token streams every weight once; with 4 KiB
// pages each page costs a TLB miss and restarts the hardware prefetchers.
// When the file is not in the page cache yet, MADV_HUGEPAGE has the kernel
// read it into 2 MiB folios (Linux 6.x, file systems with large folios: ext4,
// xfs), which an aligned mapping then maps with one TLB entry each: still the
// file's own pages, used in place. Measured on SmolLM2 F32 generation: 38.8-39.5
// tokens/s from such pages against 32.0-33.1 from 4 KiB ones (interleaved).
// Pages already cached in small folios stay as they are; the advice and the
// alignment are best effort (a plain mapping when either fails).
static void *map_aligned(int fd, size_t size) {
    const size_t huge = (size_t)2 << 20;
    if (size < huge) return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    long ps = sysconf(_SC_PAGESIZE);
    const uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    const size_t span = size + huge;
    uint8_t *area = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (area == MAP_FAILED) return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    uint8_t *at = (uint8_t *)(((uintptr_t)area + huge - 1) & ~(uintptr_t)(huge - 1));
    void *p = mmap(at, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        munmap(area, span);
        return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    }
    // The reservation's slack before and after the file's pages.
    uint8_t *end = at + (size + page - 1) / page * page, *area_end = area + (span + page - 1) / page * page;
    if (at > area) munmap(area, (size_t)(at - area));
    if (area_end > end) munmap(end, (size_t)(area_end - end));
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE);  // advice: without it the pages are 4 KiB, nothing else changes
#endif
    return p;
}

rg_status rg_file_map_open(rg_file_map *m, const char *path, rg_error *err) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rg_fail(err, RG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return rg_fail(err, RG_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return rg_fail(err, RG_ERR_IO, "%s: is a directory, expected a file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return rg_fail(err, RG_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return rg_fail(err, RG_ERR_IO, "%s: too large to map (%lld bytes)", path, (long long)st.st_size);
    }
    if (st.st_size > 0) {
        void *p = map_aligned(fd, (size_t)st.st_size);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return rg_fail(err, RG_ERR_IO, "%s: cannot map %lld bytes: %s", path, (long long)st.st_size,
                           strerror(e));
        }
        m->data = p;
        m->size = (size_t)st.st_size;
    }
    close(fd);  // the mapping keeps the file alive
    return RG_OK;
}

void rg_file_map_close(rg_file_map *m) {
    if (m->data) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

void rg_file_map_release(const rg_file_map *m, const void *p, size_t n) {
    const uint8_t *b = p;
    if (!m->data || !p || b < m->data || n > m->size || b - m->data > (ptrdiff_t)(m->size - n)) return;
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    uintptr_t lo = ((uintptr_t)b + page - 1) / page * page, hi = ((uintptr_t)b + n) / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);  // advice: a failure costs only memory
}

rg_status rg_atomic_open(rg_atomic_file *af, const char *path, rg_error *err) {
    memset(af, 0, sizeof *af);
    size_t n = strlen(path);
    af->final_path = strdup(path);
    af->tmp_path = malloc(n + 16);
    if (!af->final_path || !af->tmp_path) {
        rg_atomic_abort(af);
        return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", path);
    }
    // The temporary sits in the same directory so that rename() is atomic.
    snprintf(af->tmp_path, n + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(af->tmp_path);
    if (fd < 0) {
        int e = errno;
        free(af->tmp_path);
        af->tmp_path = NULL;
        rg_atomic_abort(af);
        return rg_fail(err, RG_ERR_IO, "%s: cannot create a temporary file beside it: %s", path, strerror(e));
    }
    fchmod(fd, 0644);
    af->f = fdopen(fd, "wb");
    if (!af->f) {
        int e = errno;
        close(fd);
        rg_atomic_abort(af);
        return rg_fail(err, RG_ERR_IO, "%s: fdopen: %s", path, strerror(e));
    }
    return RG_OK;
}

rg_status rg_atomic_write(rg_atomic_file *af, const void *buf, size_t n, rg_error *err) {
    if (af->failed) return af->failed;
    if (n && fwrite(buf, 1, n, af->f) != n) {
        af->failed = RG_ERR_IO;
        return rg_fail(err, RG_ERR_IO, "%s: write failed after %llu bytes: %s", af->final_path,
                       (unsigned long long)af->written, strerror(errno));
    }
    af->written += n;
    return RG_OK;
}

rg_status rg_atomic_write_zeros(rg_atomic_file *af, size_t n, rg_error *err) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        rg_status s = rg_atomic_write(af, zeros, k, err);
        if (s) return s;
        n -= k;
    }
    return RG_OK;
}

rg_status rg_atomic_commit(rg_atomic_file *af, rg_error *err) {
    if (af->failed) {
        rg_atomic_abort(af);
        return af->failed;
    }
    const char *what = NULL;
    if (fflush(af->f) != 0) what = "flush";
    else if (fsync(fileno(af->f)) != 0) what = "fsync";
    if (what) {
        int e = errno;
        rg_fail(err, RG_ERR_IO, "%s: %s failed after %llu bytes: %s", af->final_path, what,
                (unsigned long long)af->written, strerror(e));
        rg_atomic_abort(af);
        return RG_ERR_IO;
    }
    FILE *f = af->f;
    af->f = NULL;
    if (fclose(f) != 0) {
        int e = errno;
        rg_fail(err, RG_ERR_IO, "%s: close failed: %s", af->final_path, strerror(e));
        rg_atomic_abort(af);
        return RG_ERR_IO;
    }
    if (rename(af->tmp_path, af->final_path) != 0) {
        int e = errno;
        rg_fail(err, RG_ERR_IO, "%s: cannot rename the temporary file into place: %s", af->final_path,
                strerror(e));
        rg_atomic_abort(af);
        return RG_ERR_IO;
    }
    // Persist the rename itself.
    char *dir_copy = strdup(af->final_path);
    if (dir_copy) {
        int dfd = open(dirname(dir_copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir_copy);
    }
    free(af->tmp_path);
    af->tmp_path = NULL;
    free(af->final_path);
    af->final_path = NULL;
    return RG_OK;
}

void rg_atomic_abort(rg_atomic_file *af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    if (af->tmp_path) unlink(af->tmp_path);
    free(af->tmp_path);
    free(af->final_path);
    af->tmp_path = NULL;
    af->final_path = NULL;
}

rg_status rg_atomic_write_file(const char *path, const void *buf, size_t n, rg_error *err) {
    rg_atomic_file af;
    rg_status st = rg_atomic_open(&af, path, err);
    if (st) return st;
    if ((st = rg_atomic_write(&af, buf, n, err)) == RG_OK) st = rg_atomic_commit(&af, err);
    if (st) rg_atomic_abort(&af);
    return st;
}
