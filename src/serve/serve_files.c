// serve_files.c - OpenAI's files API for fine-tuning data (see serve_ft.h): POST /v1/files (the multipart body is
// read by serve_upload.c, which hands the finished file to serve_files_add), GET /v1/files, GET /v1/files/{id},
// GET /v1/files/{id}/content and DELETE /v1/files/{id}. A file is kept only when its purpose is "fine-tune" and
// every line is a training example the training data reader takes (rg_data_check_line); a refusal names the line.
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/file.h"
#include "serve/serve_ft.h"
#include "serve/server_internal.h"
#include "train/data.h"

// ---------------------------------------------------------------------------------------------------------------
// Helpers shared with serve_jobs.c

char *serve_ft_read(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t k; buf; n += k) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
        }
        k = fread(buf + n, 1, cap - n - 1, fp);
        if (k == 0) break;
    }
    fclose(fp);
    if (!buf) return NULL;
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

void serve_ft_new_id(char *out, size_t cap, const char *prefix) {
    unsigned char r[8] = {0};
    const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, r, sizeof r) != (ssize_t)sizeof r) {  // no urandom: the clock and a counter
        static _Atomic unsigned long counter;
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        const unsigned long long v = (unsigned long long)t.tv_nsec ^ ((unsigned long long)t.tv_sec << 30) ^ ++counter;
        for (int i = 0; i < 8; i++) r[i] = (unsigned char)(v >> (8 * i));
    }
    if (fd >= 0) close(fd);
    snprintf(out, cap, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

bool serve_ft_query(const char *path, const char *key, char *buf, size_t cap) {
    const char *q = strchr(path, '?');
    const size_t kn = strlen(key);
    while (q) {
        q++;
        if (strncmp(q, key, kn) == 0 && q[kn] == '=') {
            const char *v = q + kn + 1;
            const size_t n = strcspn(v, "&");
            if (n >= cap) return false;
            memcpy(buf, v, n);
            buf[n] = 0;
            return true;
        }
        q = strchr(q, '&');
    }
    return false;
}

void serve_ft_fail(serve_ft *f, rg_serve_response *out, int http, const char *param, const char *code,
                   const char *fmt, ...) {
    rg_serve_error e = {.http = http, .type = http >= 500 ? "server_error" : "invalid_request_error", .code = code};
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    server_fail_response(f->srv, out, &e);
}

// ---------------------------------------------------------------------------------------------------------------
// Files

// "file-" and 16 lower-case hex digits: the only names that reach the file system.
static bool is_file_id(const char *id) {
    if (strncmp(id, "file-", 5) != 0 || strlen(id) != 21) return false;
    for (const char *p = id + 5; *p; p++)
        if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p)) return false;
    return true;
}

bool serve_files_path(serve_ft *f, const char *id, char *path, size_t cap) {
    if (!is_file_id(id)) return false;
    snprintf(path, cap, "%s/%s.jsonl", f->files_dir, id);
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void file_object(rg_jw *w, const char *id, int64_t bytes, int64_t created, const char *filename) {
    rg_jw_obj(w);
    rg_jw_kstr(w, "id", id);
    rg_jw_kstr(w, "object", "file");
    rg_jw_ki64(w, "bytes", bytes);
    rg_jw_ki64(w, "created_at", created);
    rg_jw_kstr(w, "filename", filename);
    rg_jw_kstr(w, "purpose", "fine-tune");
    rg_jw_kstr(w, "status", "processed");
    rg_jw_key(w, "status_details");
    rg_jw_null(w);
    rg_jw_obj_end(w);
}

// Checks every line of the file at path; false with msg naming the first bad one.
static bool check_jsonl(serve_ft *f, const char *path, const char *filename, char *msg, size_t cap) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(msg, cap, "the uploaded file cannot be read back");
        return false;
    }
    rg_server *s = f->srv;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t n;
    int64_t no = 0, examples = 0;
    bool ok = true;
    while (ok && (n = getline(&line, &lcap, fp)) >= 0) {
        no++;
        size_t len = (size_t)n;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (no == 1 && len >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) memmove(line, line + 3, len -= 3);
        size_t k = 0;
        while (k < len && isspace((unsigned char)line[k])) k++;
        if (k == len) continue;  // blank lines are skipped, as the reader skips them
        rg_error err = {0};
        if (rg_data_check_line(s->have_tmpl ? &s->tmpl : NULL, filename, no, line, len, &err)) {
            snprintf(msg, cap, "the file is not valid fine-tuning JSONL (line %lld): %.500s", (long long)no, err.msg);
            ok = false;
        }
        examples++;
    }
    free(line);
    fclose(fp);
    if (ok && examples == 0) {
        snprintf(msg, cap, "the file has no training example (one JSON object per line: {\"messages\": [...]}, "
                           "{\"prompt\", \"completion\"} or {\"text\"})");
        ok = false;
    }
    return ok;
}

// A client's file name without directories or control bytes, for the object only.
static void clean_name(char *dst, size_t cap, const char *src) {
    const char *b = strrchr(src, '/');
    b = b ? b + 1 : src;
    size_t n = 0;
    for (; *b && n + 1 < cap; b++)
        if ((unsigned char)*b >= 0x20 && *b != '\\') dst[n++] = *b;
    dst[n] = 0;
    if (!n) snprintf(dst, cap, "upload.jsonl");
}

void serve_files_add(serve_ft *f, const char *tmp_path, const char *filename, const char *purpose, int64_t bytes,
                     rg_serve_response *out) {
    char msg[600];
    if (!purpose || strcmp(purpose, "fine-tune") != 0) {
        unlink(tmp_path);
        return serve_ft_fail(f, out, 400, "purpose", "invalid_purpose",
                             "purpose '%s': this server keeps only files for 'fine-tune'", purpose ? purpose : "");
    }
    char name[256];
    clean_name(name, sizeof name, filename ? filename : "");
    if (!check_jsonl(f, tmp_path, name, msg, sizeof msg)) {
        unlink(tmp_path);
        return serve_ft_fail(f, out, 400, "file", "invalid_file_format", "%s", msg);
    }
    char id[40], path[4200], meta[4200];
    serve_ft_new_id(id, sizeof id, "file-");
    snprintf(path, sizeof path, "%s/%s.jsonl", f->files_dir, id);
    snprintf(meta, sizeof meta, "%s/%s.json", f->files_dir, id);
    const int64_t created = (int64_t)time(NULL);
    rg_jw w;
    rg_jw_init(&w);
    file_object(&w, id, bytes, created, name);
    size_t n;
    const char *text = rg_jw_text(&w, &n);
    rg_error err = {0};
    if (rename(tmp_path, path) != 0 || !text || rg_atomic_write_file(meta, text, n, &err)) {
        unlink(tmp_path);
        unlink(path);
        rg_jw_free(&w);
        return serve_ft_fail(f, out, 500, "", NULL, "cannot store the file in %s: %s", f->files_dir,
                             err.msg[0] ? err.msg : "rename failed");
    }
    server_json_response(200, &w, out);
}

// The stored object of id (its JSON text), or NULL.
static char *file_meta(serve_ft *f, const char *id) {
    if (!is_file_id(id)) return NULL;
    char meta[4200];
    snprintf(meta, sizeof meta, "%s/%s.json", f->files_dir, id);
    return serve_ft_read(meta, NULL);
}

typedef struct listed_file {
    char id[24];
    int64_t made_ns;  // the object's file's mtime: when the upload was stored
} listed_file;

static int cmp_newest(const void *a, const void *b) {
    const listed_file *x = a, *y = b;
    return x->made_ns != y->made_ns ? (x->made_ns < y->made_ns ? 1 : -1) : strcmp(x->id, y->id);
}

// GET /v1/files: newest first, as OpenAI lists them.
static void route_list(serve_ft *f, rg_serve_response *out) {
    DIR *d = opendir(f->files_dir);
    int n = 0, cap = 0;
    listed_file *files = NULL;
    for (struct dirent *de; d && (de = readdir(d));) {
        const size_t len = strlen(de->d_name);
        if (len != 26 || strcmp(de->d_name + 21, ".json") != 0) continue;
        if (n == cap) {
            listed_file *nf = realloc(files, sizeof *nf * (size_t)(cap = cap ? 2 * cap : 64));
            if (!nf) break;
            files = nf;
        }
        listed_file *lf = &files[n];
        memcpy(lf->id, de->d_name, 21);
        lf->id[21] = 0;
        char meta[4200];
        struct stat sb;
        snprintf(meta, sizeof meta, "%s/%s", f->files_dir, de->d_name);
        if (!is_file_id(lf->id) || stat(meta, &sb) != 0) continue;
        lf->made_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
        n++;
    }
    if (d) closedir(d);
    if (n) qsort(files, (size_t)n, sizeof *files, cmp_newest);
    rg_jw w;
    server_list_open(&w);
    for (int i = 0; i < n; i++) {
        size_t len;
        char *m = file_meta(f, files[i].id);
        if (m && (len = strlen(m)) > 0) rg_jw_raw(&w, m, len);
        free(m);
    }
    free(files);
    rg_jw_arr_end(&w);
    rg_jw_kbool(&w, "has_more", false);
    rg_jw_obj_end(&w);
    server_json_response(200, &w, out);
}

void serve_files_route(serve_ft *f, const char *method, const char *path, rg_serve_response *out) {
    const bool get = strcmp(method, "GET") == 0, del = strcmp(method, "DELETE") == 0;
    const char *rest = path + strlen("/files");  // (path without its /v1)
    if (*rest == 0 || *rest == '?') {
        if (get) return route_list(f, out);
        return serve_ft_fail(f, out, 405, "", NULL, "%s /v1/files: use GET (list) or POST (multipart upload)",
                             method);
    }
    char id[64];
    const size_t n = strcspn(rest + 1, "/?");
    snprintf(id, sizeof id, "%.*s", (int)(n < sizeof id ? n : sizeof id - 1), rest + 1);
    const char *tail = rest + 1 + n;
    char *meta = file_meta(f, id);
    if (!meta) return serve_ft_fail(f, out, 404, "file_id", "file_not_found", "no file '%s'", id);
    if (strncmp(tail, "/content", 8) == 0 && get) {
        free(meta);
        char p[4200];
        size_t len;
        snprintf(p, sizeof p, "%s/%s.jsonl", f->files_dir, id);
        char *body = serve_ft_read(p, &len);
        if (!body) return serve_ft_fail(f, out, 500, "", NULL, "file '%s' cannot be read", id);
        memset(out, 0, sizeof *out);
        out->status = 200;
        out->content_type = "application/octet-stream";
        out->body = body, out->len = len;
        return;
    }
    if (*tail && *tail != '?') {
        free(meta);
        return serve_ft_fail(f, out, 404, "", NULL, "no route %s %s", method, path);
    }
    rg_jw w;
    rg_jw_init(&w);
    if (get) {
        rg_jw_raw(&w, meta, strlen(meta));
    } else if (del) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s.jsonl", f->files_dir, id);
        unlink(p);
        snprintf(p, sizeof p, "%s/%s.json", f->files_dir, id);
        unlink(p);
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "id", id);
        rg_jw_kstr(&w, "object", "file");
        rg_jw_kbool(&w, "deleted", true);
        rg_jw_obj_end(&w);
    } else {
        free(meta);
        rg_jw_free(&w);
        return serve_ft_fail(f, out, 405, "", NULL, "%s %s: use GET or DELETE", method, path);
    }
    free(meta);
    server_json_response(200, &w, out);
}
