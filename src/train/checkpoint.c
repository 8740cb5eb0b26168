// checkpoint.c - see checkpoint.h.
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "gguf/gguf.h"
#include "tensor/half.h"

rg_status rg_sync_dir(const char *dir, rg_error *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return rg_fail(err, RG_ERR_IO, "cannot open directory %s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL) return rg_fail(err, RG_ERR_IO, "cannot sync directory %s: %s", dir, strerror(e));
    return RG_OK;
}

// Removes a directory and the plain files in it (checkpoint directories hold nothing else).
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

// step-N directory names: N, or -1 for anything else.
static int64_t step_of(const char *name) {
    if (strncmp(name, "step-", 5) != 0 || !name[5]) return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(name + 5, &end, 10);
    if (errno || *end || v < 0) return -1;
    return v;
}

// The step numbers of the complete checkpoints, ascending.
static int list_steps(const char *ck_dir, int64_t *steps, int cap) {
    DIR *d = opendir(ck_dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap) {
        int64_t s = step_of(e->d_name);
        if (s >= 0) steps[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && steps[j - 1] > steps[j]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1], steps[j - 1] = t;
        }
    return n;
}

static rg_status set_i64(rg_gguf *g, const char *key, int64_t v, rg_error *err) {
    return rg_gguf_set(g, key, 11 /* INT64 */, &v, err);
}

rg_status rg_checkpoint_save(const rg_train_state *s, const rg_ckpt_meta *meta, const char *out_dir, int keep,
                             rg_error *err) {
    char ck_dir[3900], tmp[4000], final[4000], path[4100];
    snprintf(ck_dir, sizeof ck_dir, "%s/checkpoints", out_dir);
    if (mkdir(ck_dir, 0755) != 0 && errno != EEXIST)
        return rg_fail(err, RG_ERR_IO, "checkpoint: cannot create %s: %s", ck_dir, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s/.step-%lld.tmp", ck_dir, (long long)meta->iter);
    snprintf(final, sizeof final, "%s/step-%lld", ck_dir, (long long)meta->iter);
    remove_tree(tmp);  // a leftover of a crashed write
    if (mkdir(tmp, 0755) != 0) return rg_fail(err, RG_ERR_IO, "checkpoint: cannot create %s: %s", tmp, strerror(errno));

    rg_status st = RG_OK;
    rg_gguf *g = rg_gguf_new();
    if (!g) {
        remove_tree(tmp);
        return rg_fail(err, RG_ERR_NOMEM, "checkpoint: out of memory");
    }
    if (!st) st = rg_gguf_set_str(g, "general.type", "retrograd-checkpoint", err);
    if (!st) st = rg_gguf_set_u32(g, "retrograd.ckpt.version", 1, err);
    if (!st) st = set_i64(g, "retrograd.ckpt.t", meta->t, err);
    if (!st) st = set_i64(g, "retrograd.ckpt.iter", meta->iter, err);
    if (!st) st = set_i64(g, "retrograd.ckpt.n_skipped", meta->n_skipped, err);
    if (!st) st = set_i64(g, "retrograd.ckpt.skipped_in_row", meta->skipped_in_row, err);
    if (!st) st = set_i64(g, "retrograd.ckpt.tokens_seen", meta->tokens_seen, err);
    if (!st) st = rg_gguf_set(g, "retrograd.ckpt.elapsed_s", 12 /* FLOAT64 */, &meta->elapsed_s, err);
    if (!st) st = rg_gguf_set_u64(g, "retrograd.ckpt.seed", meta->seed, err);
    if (!st) st = rg_gguf_set_u64(g, "retrograd.ckpt.data_hash", meta->data_hash, err);
    if (!st) st = rg_gguf_set_i32(g, "retrograd.ckpt.threads", meta->threads, err);
    if (!st) st = rg_gguf_set_i32(g, "retrograd.ckpt.fused_ce", meta->fused_ce, err);
    if (!st) st = rg_gguf_set_str(g, "retrograd.ckpt.config", meta->config, err);
    for (int k = 0; !st && k < s->n_tensors; k++) {
        const rg_train_tensor *t = &s->tensors[k];
        char name[96];
        st = rg_gguf_add_tensor(g, t->name, t->type, (uint32_t)t->n_dims, t->ne, t->w, err);
        if (!st && t->master) {
            snprintf(name, sizeof name, "%s.master", t->name);
            st = rg_gguf_add_tensor(g, name, RG_TYPE_F32, (uint32_t)t->n_dims, t->ne, t->master, err);
        }
        if (!st && t->m) {
            snprintf(name, sizeof name, "%s.m", t->name);
            st = rg_gguf_add_tensor(g, name, RG_TYPE_F32, (uint32_t)t->n_dims, t->ne, t->m, err);
        }
        if (!st && t->v) {
            snprintf(name, sizeof name, "%s.v", t->name);
            st = rg_gguf_add_tensor(g, name, RG_TYPE_F32, (uint32_t)t->n_dims, t->ne, t->v, err);
        }
    }
    snprintf(path, sizeof path, "%s/state.gguf", tmp);
    if (!st) st = rg_gguf_write(g, path, err);
    rg_gguf_free(g);
    if (!st && s->lora) {
        snprintf(path, sizeof path, "%s/adapter.gguf", tmp);
        st = rg_lora_save(s->lora, s->model, path, err);
    }
    if (!st) {
        snprintf(path, sizeof path, "%s/config.yaml", tmp);
        FILE *f = fopen(path, "w");
        if (!f) st = rg_fail(err, RG_ERR_IO, "checkpoint: cannot write %s: %s", path, strerror(errno));
        else {
            bool ok = fputs(meta->config, f) >= 0;
            ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
            ok = fclose(f) == 0 && ok;
            if (!ok) st = rg_fail(err, RG_ERR_IO, "checkpoint: cannot write %s: %s", path, strerror(errno));
        }
    }
    if (!st) st = rg_sync_dir(tmp, err);
    if (!st) {
        remove_tree(final);  // the same step written again (a resumed run that saves where it resumed)
        if (rename(tmp, final) != 0)
            st = rg_fail(err, RG_ERR_IO, "checkpoint: cannot rename %s to %s: %s", tmp, final, strerror(errno));
    }
    if (!st) st = rg_sync_dir(ck_dir, err);
    if (st) {
        remove_tree(tmp);
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        return rg_fail(err, st, "%s (the previous checkpoint, if any, is intact)", msg);
    }
    // Prune: keep the newest `keep`.
    int64_t steps[4096];
    int n = list_steps(ck_dir, steps, 4096);
    for (int i = 0; i + (keep > 0 ? keep : 1) < n; i++) {
        snprintf(path, sizeof path, "%s/step-%lld", ck_dir, (long long)steps[i]);
        remove_tree(path);
    }
    return RG_OK;
}

rg_status rg_checkpoint_find_latest(const char *out_dir, char *path, size_t cap, rg_error *err) {
    char ck_dir[4096];
    snprintf(ck_dir, sizeof ck_dir, "%s/checkpoints", out_dir);
    int64_t steps[4096];
    int n = list_steps(ck_dir, steps, 4096);
    for (int i = n - 1; i >= 0; i--) {
        snprintf(path, cap, "%s/step-%lld", ck_dir, (long long)steps[i]);
        char state[4200];
        snprintf(state, sizeof state, "%s/state.gguf", path);
        if (access(state, R_OK) == 0) return RG_OK;
    }
    return rg_fail(err, RG_ERR_NOT_FOUND, "resume: no checkpoint in %s (a run saves one every training.save_every steps)",
                   ck_dir);
}

static rg_status get_i64(const rg_gguf *g, const char *key, int64_t *out, rg_error *err) {
    const rg_gguf_kv *kv = rg_gguf_find(g, key);
    if (!kv || !rg_gguf_kv_i64(kv, 0, out)) return rg_fail(err, RG_ERR_FORMAT, "%s: missing or bad %s", g->path, key);
    return RG_OK;
}

static rg_status load_tensor(const rg_gguf *g, const char *name, uint32_t type, const rg_train_tensor *t, void *dst,
                             rg_error *err) {
    const rg_gguf_tensor *gt = rg_gguf_find_tensor(g, name);
    if (!gt) return rg_fail(err, RG_ERR_FORMAT, "%s: tensor '%s' is missing", g->path, name);
    bool shape_ok = gt->type == type;
    for (int d = 0; d < 4; d++) shape_ok = shape_ok && gt->ne[d] == t->ne[d];
    if (!shape_ok)
        return rg_fail(err, RG_ERR_FORMAT, "%s: tensor '%s' is %s [%lld, %lld, %lld, %lld], the run expects %s [%lld, %lld, %lld, %lld]",
                       g->path, name, rg_type_get(gt->type)->name, (long long)gt->ne[0], (long long)gt->ne[1],
                       (long long)gt->ne[2], (long long)gt->ne[3], rg_type_get(type)->name, (long long)t->ne[0],
                       (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    memcpy(dst, gt->data, gt->nbytes);
    return RG_OK;
}

rg_status rg_checkpoint_load(rg_train_state *s, const char *dir, rg_ckpt_meta *meta, rg_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/state.gguf", dir);
    rg_gguf *g = NULL;
    rg_status st = rg_gguf_open(&g, path, err);
    if (st) return st;
    memset(meta, 0, sizeof *meta);
    int64_t v = 0;
    if (!st) st = get_i64(g, "retrograd.ckpt.version", &v, err);
    if (!st && v != 1) st = rg_fail(err, RG_ERR_UNSUPPORTED, "%s: checkpoint version %lld, this build reads 1", path, (long long)v);
    if (!st) st = get_i64(g, "retrograd.ckpt.t", &meta->t, err);
    if (!st) st = get_i64(g, "retrograd.ckpt.iter", &meta->iter, err);
    if (!st) st = get_i64(g, "retrograd.ckpt.n_skipped", &meta->n_skipped, err);
    if (!st) st = get_i64(g, "retrograd.ckpt.skipped_in_row", &meta->skipped_in_row, err);
    if (!st) st = get_i64(g, "retrograd.ckpt.tokens_seen", &meta->tokens_seen, err);
    if (!st && (st = get_i64(g, "retrograd.ckpt.threads", &v, err)) == RG_OK) meta->threads = (int32_t)v;
    meta->fused_ce = -1;
    if (!st && get_i64(g, "retrograd.ckpt.fused_ce", &v, NULL) == RG_OK) meta->fused_ce = (int32_t)v;
    if (!st) {
        const rg_gguf_kv *kv = rg_gguf_find(g, "retrograd.ckpt.elapsed_s");
        double e = 0;
        if (kv && rg_gguf_kv_f64(kv, 0, &e)) meta->elapsed_s = e;
        uint64_t u = 0;
        kv = rg_gguf_find(g, "retrograd.ckpt.seed");
        if (!kv || !rg_gguf_kv_u64(kv, 0, &u)) st = rg_fail(err, RG_ERR_FORMAT, "%s: missing retrograd.ckpt.seed", path);
        meta->seed = u;
        kv = rg_gguf_find(g, "retrograd.ckpt.data_hash");
        if (!st && (!kv || !rg_gguf_kv_u64(kv, 0, &u)))
            st = rg_fail(err, RG_ERR_FORMAT, "%s: missing retrograd.ckpt.data_hash", path);
        meta->data_hash = u;
        kv = rg_gguf_find(g, "retrograd.ckpt.config");
        rg_gguf_str cs = kv ? rg_gguf_kv_str(kv, 0) : (rg_gguf_str){0, NULL};
        if (!st && !cs.ptr) st = rg_fail(err, RG_ERR_FORMAT, "%s: missing retrograd.ckpt.config", path);
        if (!st) snprintf(meta->config, sizeof meta->config, "%.*s", (int)cs.len, cs.ptr);
    }
    char name[96];
    for (int k = 0; !st && k < s->n_tensors; k++) {
        rg_train_tensor *t = &s->tensors[k];
        st = load_tensor(g, t->name, t->type, t, t->w, err);
        if (!st && t->master) {
            snprintf(name, sizeof name, "%s.master", t->name);
            st = load_tensor(g, name, RG_TYPE_F32, t, t->master, err);
            // every stored element must be its master rounded once (RNE)
            for (int64_t i = 0; !st && i < t->nel; i++) {
                uint16_t want = t->type == RG_TYPE_F16 ? rg_fp32_to_fp16(t->master[i]) : rg_fp32_to_bf16(t->master[i]);
                if (((const uint16_t *)t->w)[i] != want)
                    st = rg_fail(err, RG_ERR_FORMAT, "%s: '%s' element %lld is %04x, but its master rounds to %04x", path,
                                 t->name, (long long)i, ((const uint16_t *)t->w)[i], want);
            }
        }
        if (!st && t->m) {
            snprintf(name, sizeof name, "%s.m", t->name);
            st = load_tensor(g, name, RG_TYPE_F32, t, t->m, err);
        }
        if (!st && t->v) {
            snprintf(name, sizeof name, "%s.v", t->name);
            st = load_tensor(g, name, RG_TYPE_F32, t, t->v, err);
        }
    }
    rg_gguf_free(g);
    if (!st) s->t = meta->t;
    return st;
}
