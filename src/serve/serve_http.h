// serve_http.h - the server behind HTTP (libmicrohttpd, Debian's libmicrohttpd-dev): one thread per connection
// (a connection's thread blocks while its generation runs; the engine thread batches them all), the security
// checks before any route, and streamed replies pulled from the generation as its tokens arrive.
//
// Checks, in order, each refused in OpenAI's error shape:
//   - Host: on a loopback address the Host header must name localhost, 127.0.0.1 or [::1] (with any port), so a
//     web page that rebinds its DNS name to 127.0.0.1 cannot reach the server (421); on a named address, that
//     address; on 0.0.0.0 or :: (any address, which needs an API key), any Host.
//   - the API key (Authorization: Bearer KEY) on every route but /health (401), compared in constant time;
//   - the body size (413): a Content-Length over the limit is refused before the body is read, and a body that
//     grows past it is discarded.
// A connection over the limit of parallel connections is refused by the library before any of this.
// Without libmicrohttpd at build time, rg_serve_http_run returns RG_ERR_UNSUPPORTED saying so.
#ifndef RG_SERVE_HTTP_H
#define RG_SERVE_HTTP_H

#include <signal.h>

#include "serve/server.h"

typedef struct rg_serve_http_opts {
    const char *host;     // address to bind (default 127.0.0.1)
    int port;             // 0: any free port (printed)
    const char *api_key;  // NULL: none (only allowed on a loopback address)
    int max_connections;  // parallel connections (<= 0: 64)
    int timeout_s;        // an idle connection is closed after this (<= 0: 600)
} rg_serve_http_opts;

// True when host is a loopback address (127.0.0.0/8, ::1, localhost).
bool rg_serve_host_is_loopback(const char *host);
// Whether a Host header value is acceptable for a server bound to bound_host (see above).
bool rg_serve_host_allowed(const char *bound_host, const char *host_header);

// Listens until *stop becomes non-zero or the model fails to load (checked every 100 ms), then stops. On listening it prints
// "retrograd serve: listening on http://HOST:PORT" to stderr.
rg_status rg_serve_http_run(rg_server *s, const rg_serve_http_opts *o, volatile sig_atomic_t *stop, rg_error *err);

#endif
