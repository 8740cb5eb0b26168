// server.h - what `retrograd serve` runs, apart from HTTP: the model, its tokenizer and chat template, one
// engine (infer/engine.h) on its own thread decoding every slot together, and the routes of the OpenAI API
// answered from request bytes to response bytes. serve_http.c puts it behind libmicrohttpd; the tests can call
// rg_server_handle directly.
//
// Threads: any number of connection threads call rg_server_handle (and read streams) at once; only the engine
// thread touches the engine. A request's generation is handed to the engine thread through a queue and its
// tokens come back through the generation's own event queue, so a slow client never slows the others: its
// tokens wait in its queue while the batch goes on.
#ifndef RG_SERVE_SERVER_H
#define RG_SERVE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"
#include "graph/exec.h"
#include "model/model.h"
#include "serve/serve_request.h"

typedef struct rg_server rg_server;
typedef struct rg_serve_stream rg_serve_stream;

typedef struct rg_server_opts {
    const char *model_path;
    const char *alias;        // the model's id in /v1/models (NULL: the file's name without .gguf)
    int n_slots;              // -np: sequences decoded together
    int64_t n_ctx;            // tokens per slot (<= 0: the model's, capped at 4096)
    int n_threads;
    rg_device device;
    rg_serve_limits limits;   // body, max_tokens, messages
    int max_queue;            // generations waiting for a slot beyond which a request gets 429 (<= 0: 64)
    bool load_in_background;  // rg_server_create returns at once; /health answers 503 until the model is in
    const char *slot_save_path;     // the folder of slot files (POST /slots/N?action=save|restore); NULL: refused
    const char *agent_tools_path;   // serve --agent: chat requests without tools of their own run the agent loop
                                    // with this tools file's tools (serve_agent.c); NULL: off
    const char *lora_dir;           // the folder POST /lora-adapters/load takes adapter files from (plain names only); NULL: refused
    const char *const *lora_paths;  // adapters loaded at launch (ids 0..n_lora-1), at most RG_SERVE_MAX_LORA
    const float *lora_scales;       // their default scales
    int n_lora;
    // Fine-tuning (serve_ft.h): uploaded files and jobs under files_dir (NULL: the /v1/files and
    // /v1/fine_tuning routes answer 404), files up to max_upload bytes (<= 0: 100 MiB), each training child
    // with job_threads threads (0: all cores).
    const char *files_dir;
    int64_t max_upload;
    int job_threads;
} rg_server_opts;

rg_status rg_server_create(rg_server **out, const rg_server_opts *o, rg_error *err);
// Stops the engine thread (ending every generation) and frees everything. Streams must be freed first.
void rg_server_free(rg_server *s);
// 0 while loading, 1 ready, -1 the load failed (rg_server_load_error says why).
int rg_server_state(rg_server *s);
const char *rg_server_load_error(rg_server *s);
// Blocks until the model is loaded or failed.
int rg_server_wait_ready(rg_server *s);

typedef struct rg_serve_response {
    int status;
    const char *content_type;  // static
    char *body;                // malloc'd (NULL with a stream)
    size_t len;
    rg_serve_stream *stream;   // a server-sent-event stream to pull with rg_serve_stream_read, or NULL
} rg_serve_response;

// Answers one request (path without the query string). Blocks for a whole (non-streamed) generation.
void rg_server_handle(rg_server *s, const char *method, const char *path, const char *body, size_t len,
                      rg_serve_response *out);
// The same, for a connection that can tell whether its client has gone: gone(user) is asked every 200 ms while a
// whole (non-streamed) generation runs, and true cancels it (its slot goes to the next request at once).
void rg_server_handle_watch(rg_server *s, const char *method, const char *path, const char *body, size_t len,
                            bool (*gone)(void *user), void *user, rg_serve_response *out);
// An error response in OpenAI's shape.
void rg_server_error_response(const rg_serve_error *e, rg_serve_response *out);
void rg_serve_response_free(rg_serve_response *r);

// The next bytes of a stream (blocking until there are some); 0 when it has ended, -1 on a failure.
ssize_t rg_serve_stream_read(rg_serve_stream *st, char *buf, size_t cap);
// Ends the stream: a generation still running is cancelled (the client went away) and its slot freed.
void rg_serve_stream_free(rg_serve_stream *st);

#endif
