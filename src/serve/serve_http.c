// serve_http.c - see serve_http.h.
#include "serve/serve_http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "serve/server_internal.h"
#include "serve/serve_upload.h"

bool rg_serve_host_is_loopback(const char *host) {
    if (!host) return true;
    if (strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 || strcmp(host, "[::1]") == 0) return true;
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

static bool any_address(const char *host) { return strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0; }

bool rg_serve_host_allowed(const char *bound, const char *hdr) {
    if (!bound) bound = "127.0.0.1";
    if (any_address(bound)) return true;
    if (!hdr || !*hdr) return false;
    // The name without its port: "[::1]:8080" -> "[::1]", "localhost:8080" -> "localhost".
    char name[256];
    size_t n = strlen(hdr);
    if (n >= sizeof name) return false;
    memcpy(name, hdr, n + 1);
    char *port = name[0] == '[' ? strchr(name, ']') : strchr(name, ':');
    if (name[0] == '[') {  // "[v6]" or "[v6]:port"
        if (!port) return false;
        port++;
        if (*port && *port != ':') return false;
    }
    if (port && *port) {
        for (const char *p = port + 1; *p; p++)
            if (!isdigit((unsigned char)*p)) return false;
        *port = 0;
    }
    for (char *p = name; *p; p++) *p = (char)tolower((unsigned char)*p);
    if (rg_serve_host_is_loopback(bound))
        return strcmp(name, "localhost") == 0 || strcmp(name, "[::1]") == 0 || rg_serve_host_is_loopback(name);
    const size_t bn = strlen(bound);
    if (bound[0] != '[' && strchr(bound, ':'))  // a bare IPv6 address is written in brackets in Host
        return name[0] == '[' && strlen(name) == bn + 2 && strncasecmp(name + 1, bound, bn) == 0;
    return strcasecmp(name, bound) == 0;
}

#ifndef RG_HAVE_MHD

rg_status rg_serve_http_run(rg_server *s, const rg_serve_http_opts *o, volatile sig_atomic_t *stop, rg_error *err) {
    (void)s, (void)o, (void)stop;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "serve: this build has no HTTP server (libmicrohttpd was not found at "
                                            "build time: install libmicrohttpd-dev and rebuild)");
}

#else

#include <microhttpd.h>

typedef struct http_ctx {
    const rg_serve_http_opts *o;
    rg_server *s;
} http_ctx;

typedef struct conn_body {
    char *buf;
    size_t len, cap;
    bool too_big;
    serve_upload *upload;  // POST /v1/files: its multipart reader (serve_upload.h), or NULL
} conn_body;

// Constant-time comparison of the Authorization header with "Bearer KEY".
static bool key_ok(const char *hdr, const char *key) {
    if (!hdr || strncmp(hdr, "Bearer ", 7) != 0) return false;
    hdr += 7;
    const size_t a = strlen(hdr), b = strlen(key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(i < a ? hdr[i] : 0) ^ (unsigned char)key[i];
    return diff == 0;
}

static enum MHD_Result send_response(struct MHD_Connection *c, rg_serve_response *r);

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    const ssize_t n = rg_serve_stream_read(cls, buf, max);
    return n > 0 ? n : n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_done(void *cls) { rg_serve_stream_free(cls); }

static enum MHD_Result send_response(struct MHD_Connection *c, rg_serve_response *r) {
    struct MHD_Response *resp;
    if (r->stream) {
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, r->stream, stream_done);
        if (!resp) {
            rg_serve_response_free(r);
            return MHD_NO;
        }
        r->stream = NULL;  // the response owns it now
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
    } else {
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            rg_serve_response_free(r);
            return MHD_NO;
        }
        r->body = NULL;
    }
    MHD_add_response_header(resp, "Content-Type", r->content_type ? r->content_type : "application/json");
    const enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result refuse(struct MHD_Connection *c, int http, const char *fmt, const char *arg) {
    rg_serve_error e;
    rg_serve_fail(&e, http, "", fmt, arg);
    if (http == 421) e.type = "invalid_request_error";
    rg_serve_response r;
    rg_server_error_response(&e, &r);
    return send_response(c, &r);
}

// Whether the client of a connection waiting for a whole reply has closed it: its socket reads as ended (or
// fails). Only this connection's thread reads the socket, and it is here, so a peek disturbs nothing.
static bool client_gone(void *user) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(user, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR)) return true;
    char byte;
    const ssize_t n = recv(ci->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    http_ctx *h = cls;
    conn_body *b = *con_cls;
    const size_t max_body = h->s->o.limits.max_body ? h->s->o.limits.max_body : (size_t)8 << 20;
    if (!b) {  // the headers are in: check them before reading any body
        b = calloc(1, sizeof *b);
        if (!b) return MHD_NO;
        *con_cls = b;
        const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        if (!rg_serve_host_allowed(h->o->host, host)) {
            b->too_big = true;  // (the body, if any, is discarded)
            return refuse(c, 421, "the Host header '%s' does not name this server's address (DNS rebinding "
                                  "protection)", host ? host : "");
        }
        if (h->o->api_key && strcmp(url, "/health") != 0 &&
            !key_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION), h->o->api_key)) {
            b->too_big = true;
            return refuse(c, 401, "%s", "a valid API key is required (Authorization: Bearer KEY)");
        }
        if ((b->upload = serve_upload_begin(h->s, c, method, url)) != NULL) {  // --max-upload, not --max-body
            if (!serve_upload_refused(b->upload)) return MHD_YES;
            b->too_big = true;
            rg_serve_response r;
            serve_upload_finish(b->upload, &r);
            return send_response(c, &r);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > max_body) {
            b->too_big = true;
            char msg[128];
            snprintf(msg, sizeof msg, "%zu", max_body);
            return refuse(c, 413, "the request body is larger than this server takes (%s bytes)", msg);
        }
        return MHD_YES;
    }
    if (b->upload && !b->too_big) {  // the file streams to disk; its end is answered by serve_upload.c
        rg_serve_response r;
        if (*upload_size) {
            serve_upload_feed(b->upload, upload, *upload_size);
            *upload_size = 0;
            return MHD_YES;
        }
        serve_upload_finish(b->upload, &r);
        return send_response(c, &r);
    }
    if (*upload_size) {
        if (!b->too_big && b->len + *upload_size > max_body) {
            b->too_big = true;
            free(b->buf);
            b->buf = NULL;
            b->len = b->cap = 0;
        }
        if (!b->too_big) {
            if (b->len + *upload_size + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 4096;
                while (cap < b->len + *upload_size + 1) cap *= 2;
                char *nb = realloc(b->buf, cap);
                if (!nb) return MHD_NO;
                b->buf = nb, b->cap = cap;
            }
            memcpy(b->buf + b->len, upload, *upload_size);
            b->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (b->too_big) {
        char msg[32];
        snprintf(msg, sizeof msg, "%zu", max_body);
        return refuse(c, 413, "the request body is larger than this server takes (%s bytes)", msg);
    }
    rg_serve_response r;
    const char *action = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action");
    char path[512];
    if (action && strlen(url) + strlen(action) + 9 < sizeof path) {  // the one query argument a route reads
        snprintf(path, sizeof path, "%s?action=%s", url, action);
        url = path;
    }
    char list_url[640];  // ?after=&limit= of the fine-tuning lists
    url = serve_upload_list_url(c, url, list_url, sizeof list_url);
    rg_server_handle_watch(h->s, method, url, b->buf ? b->buf : "", b->len, client_gone, c, &r);
    return send_response(c, &r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn_body *b = *con_cls;
    if (b) free(b->buf);
    if (b) serve_upload_free(b->upload);
    free(b);
    *con_cls = NULL;
}

rg_status rg_serve_http_run(rg_server *s, const rg_serve_http_opts *o, volatile sig_atomic_t *stop, rg_error *err) {
    const char *host = o->host ? o->host : "127.0.0.1";
    if (!rg_serve_host_is_loopback(host) && !o->api_key)
        return rg_fail(err, RG_ERR_ARG, "serve: listening on %s (not a loopback address) needs an API key "
                                        "(--api-key K or --api-key-file F)", host);
    if (o->port < 0 || o->port > 65535) return rg_fail(err, RG_ERR_ARG, "serve: --port %d is not in [0, 65535]", o->port);
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)o->port)};
    const char *h = strcmp(host, "localhost") == 0 ? "127.0.0.1" : host;
    const bool v6 = strchr(h, ':') != NULL;
    if (v6 ? inet_pton(AF_INET6, h, &a6.sin6_addr) != 1 : inet_pton(AF_INET, h, &a4.sin_addr) != 1)
        return rg_fail(err, RG_ERR_ARG, "serve: --host '%s' is not an IPv4 or IPv6 address", host);
    http_ctx ctx = {.o = o, .s = s};
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (v6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, on_request, &ctx, MHD_OPTION_SOCK_ADDR,
        v6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(o->max_connections > 0 ? o->max_connections : 64), MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)(o->timeout_s > 0 ? o->timeout_s : 600), MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_END);
    if (!d) return rg_fail(err, RG_ERR_IO, "serve: cannot listen on %s port %d (in use, or not an address here?)", host, o->port);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "retrograd serve: listening on http://%s%s%s:%u\n", v6 ? "[" : "", host, v6 ? "]" : "",
            info ? (unsigned)info->port : (unsigned)o->port);
    fflush(stderr);
    while (!*stop && rg_server_state(s) >= 0) {  // a model that fails to load ends the server (the caller says why)
        struct timespec t = {0, 100 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    MHD_stop_daemon(d);
    return RG_OK;
}

#endif
