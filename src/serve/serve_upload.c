// serve_upload.c - see serve_upload.h.
#include "serve/serve_upload.h"

#ifdef RG_HAVE_MHD

#include <microhttpd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "serve/serve_ft.h"
#include "serve/server_internal.h"

struct serve_upload {
    serve_ft *f;
    struct MHD_PostProcessor *pp;
    char tmp_path[4200];
    FILE *fp;              // the file part, while it streams
    int64_t bytes;         // of the file part
    char filename[256];
    char purpose[64];
    int n_files;           // "file" parts seen (one is expected)
    int refused_http;      // 0, or the status of the refusal
    char refused_msg[500];
    const char *refused_param;
};

static void refuse(serve_upload *u, int http, const char *param, const char *msg) {
    if (u->refused_http) return;
    u->refused_http = http;
    u->refused_param = param;
    snprintf(u->refused_msg, sizeof u->refused_msg, "%.490s", msg);
    if (u->fp) fclose(u->fp);
    u->fp = NULL;
    if (u->tmp_path[0]) unlink(u->tmp_path);
}

static void refuse_size(serve_upload *u) {
    char msg[160];
    snprintf(msg, sizeof msg, "the file is larger than this server takes (--max-upload %lld bytes)",
             (long long)u->f->max_upload);
    refuse(u, 413, "file", msg);
}

static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                               const char *content_type, const char *transfer_encoding, const char *data,
                               uint64_t off, size_t size) {
    (void)kind, (void)content_type, (void)transfer_encoding;
    serve_upload *u = cls;
    if (u->refused_http) return MHD_YES;  // read to the end, discarded
    if (key && strcmp(key, "purpose") == 0) {
        const size_t have = strlen(u->purpose);
        if (have + size < sizeof u->purpose) {
            memcpy(u->purpose + have, data, size);
            u->purpose[have + size] = 0;
        }
        return MHD_YES;
    }
    if (!key || strcmp(key, "file") != 0) return MHD_YES;  // other fields are ignored, as OpenAI's are
    if (off == 0 && !u->fp) {
        if (++u->n_files > 1) {
            refuse(u, 400, "file", "the upload holds more than one 'file' part");
            return MHD_YES;
        }
        snprintf(u->filename, sizeof u->filename, "%s", filename ? filename : "");
        rg_error err;
        if (serve_ft_make_dirs(u->f, &err)) {
            refuse(u, 500, "", err.msg);
            return MHD_YES;
        }
        char id[40];
        serve_ft_new_id(id, sizeof id, "upload-");
        snprintf(u->tmp_path, sizeof u->tmp_path, "%s/.%s.tmp", u->f->files_dir, id);
        u->fp = fopen(u->tmp_path, "wbx");
        if (!u->fp) {
            u->tmp_path[0] = 0;
            refuse(u, 500, "", "cannot write the upload in the files folder (--files-dir)");
            return MHD_YES;
        }
    }
    if (!u->fp) return MHD_YES;
    if (u->bytes + (int64_t)size > u->f->max_upload) {
        refuse_size(u);
        return MHD_YES;
    }
    if (size && fwrite(data, 1, size, u->fp) != size) refuse(u, 500, "", "writing the upload failed (disk full?)");
    u->bytes += (int64_t)size;
    return MHD_YES;
}

serve_upload *serve_upload_begin(rg_server *s, struct MHD_Connection *c, const char *method, const char *url) {
    if (strcmp(method, "POST") != 0 || (strcmp(url, "/v1/files") != 0 && strcmp(url, "/files") != 0)) return NULL;
    serve_upload *u = calloc(1, sizeof *u);
    if (!u) return NULL;
    u->f = s->ft;
    if (!u->f) {
        refuse(u, 404, "", "fine-tuning is off in this server");
        return u;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoll(cl, NULL, 10) > u->f->max_upload + (1 << 20)) {  // the parts' headers have room
        refuse_size(u);
        return u;
    }
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0) {
        refuse(u, 400, "file", "POST /v1/files takes multipart/form-data with the fields 'purpose' and 'file'");
        return u;
    }
    u->pp = MHD_create_post_processor(c, 64 * 1024, on_part, u);
    if (!u->pp) refuse(u, 400, "file", "the multipart body's Content-Type has no boundary");
    return u;
}

bool serve_upload_refused(const serve_upload *u) { return u->refused_http != 0; }

void serve_upload_feed(serve_upload *u, const char *data, size_t n) {
    if (u->refused_http || !u->pp) return;
    if (MHD_post_process(u->pp, data, n) != MHD_YES) refuse(u, 400, "file", "the multipart body does not parse");
}

void serve_upload_finish(serve_upload *u, rg_serve_response *out) {
    if (u->pp) MHD_destroy_post_processor(u->pp);
    u->pp = NULL;
    if (!u->refused_http && !u->fp) refuse(u, 400, "file", "the upload has no 'file' part");
    if (u->fp && fclose(u->fp) != 0) {
        u->fp = NULL;
        refuse(u, 500, "", "writing the upload failed (disk full?)");
    }
    u->fp = NULL;
    if (u->refused_http) {
        rg_serve_error e = {.http = u->refused_http,
                            .type = u->refused_http >= 500 ? "server_error" : "invalid_request_error"};
        snprintf(e.param, sizeof e.param, "%s", u->refused_param ? u->refused_param : "");
        snprintf(e.msg, sizeof e.msg, "%s", u->refused_msg);
        e.code = u->refused_http == 413 ? "file_too_large" : NULL;
        return rg_server_error_response(&e, out);
    }
    if (rg_server_state(u->f->srv) != 1) {
        refuse(u, 503, "", "the model is loading: files are checked with its chat template; retry when it is in");
        return serve_upload_finish(u, out);
    }
    serve_files_add(u->f, u->tmp_path, u->filename, u->purpose[0] ? u->purpose : NULL, u->bytes, out);
    u->tmp_path[0] = 0;  // stored or removed
}

const char *serve_upload_list_url(struct MHD_Connection *c, const char *url, char *buf, size_t cap) {
    const char *p = strncmp(url, "/v1/", 4) == 0 ? url + 3 : url;
    if (strncmp(p, "/files", 6) != 0 && strncmp(p, "/fine_tuning/", 13) != 0) return url;
    const char *after = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after");
    const char *limit = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    if (!after && !limit) return url;
    const int n = snprintf(buf, cap, "%s?after=%.64s&limit=%.16s", url, after ? after : "", limit ? limit : "20");
    return n > 0 && (size_t)n < cap ? buf : url;
}

void serve_upload_free(serve_upload *u) {
    if (!u) return;
    if (u->pp) MHD_destroy_post_processor(u->pp);
    if (u->fp) fclose(u->fp);
    if (u->tmp_path[0]) unlink(u->tmp_path);
    free(u);
}

#endif
