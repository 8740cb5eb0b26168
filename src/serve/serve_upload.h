// serve_upload.h - POST /v1/files as the openai client sends it (multipart/form-data with the fields "purpose"
// and "file"), read with libmicrohttpd's own post processor as the body arrives: the file part streams to a
// temporary file in --files-dir (never held in memory), at most --max-upload bytes (over it: 413 in OpenAI's
// shape, the part discarded), then serve_files_add checks and stores it. serve_http.c's connection handler
// calls these four; without libmicrohttpd they are absent.
#ifndef RG_SERVE_UPLOAD_H
#define RG_SERVE_UPLOAD_H

#include <stdbool.h>
#include <stddef.h>

#include "serve/server.h"

struct MHD_Connection;
typedef struct serve_upload serve_upload;

// An upload reader when the request is POST /v1/files (its headers just read), else NULL (the body is then read
// as any other). When it is refused already (a Content-Length over the limit, not multipart, no files dir),
// serve_upload_finish answers at once.
serve_upload *serve_upload_begin(rg_server *s, struct MHD_Connection *c, const char *method, const char *url);
bool serve_upload_refused(const serve_upload *u);
// The next bytes of the body.
void serve_upload_feed(serve_upload *u, const char *data, size_t n);
// The body has ended (or the upload is refused): the response.
void serve_upload_finish(serve_upload *u, rg_serve_response *out);
// Removes the temporary file if it is still there. NULL is a no-op.
void serve_upload_free(serve_upload *u);
// The url with the list arguments (after, limit) of a files or fine-tuning route put back as a query string
// (libmicrohttpd hands them apart), in buf; other urls are returned as they are.
const char *serve_upload_list_url(struct MHD_Connection *c, const char *url, char *buf, size_t cap);

#endif
