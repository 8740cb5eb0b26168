// server_internal.h - the server's state shared by server.c (routes, the engine thread) and serve_gen.c (one
// generation: its events, stop strings, the replies it writes).
#ifndef RG_SERVE_SERVER_INTERNAL_H
#define RG_SERVE_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/json.h"
#include "base/json_write.h"
#include "infer/engine.h"
#include "serve/server.h"
#include "text/chat.h"
#include "text/tokenizer.h"

// One event from the engine, as the generation's queue keeps it.
typedef struct gen_event {
    int32_t token;  // -1 with the end
    rg_finish finish;
    float logprob;
    int n_top;
    int32_t top_id[RG_ENGINE_MAX_TOP_LOGPROBS];
    float top_logprob[RG_ENGINE_MAX_TOP_LOGPROBS];
} gen_event;

#define RG_SERVE_MAX_ENGINES 4

// The engine's events of one call, gathered for dispatch (eng: which engine each came from).
typedef struct step_events {
    rg_engine_event *ev;
    char (*err)[1024];
    int *eng;
    int n, cap;
} step_events;

// An adapter: loaded at launch (--lora, ids 0..n-1 in order), by POST /lora-adapters/load, or by a finished
// fine-tuning job (then with a model name). id = its index; an unloaded one leaves its index empty (lora NULL)
// for the next load. Written under the mutex; lora is freed by the engine thread only (server_reap_adapters).
typedef struct serve_adapter {
    char *path;
    char *name;       // a model id of its own ("ft:BASE:SUFFIX:JOB"): requests naming it run with it at 1; or NULL
    struct rg_lora *lora;
    float scale;      // the default scale of requests that do not say (POST /lora-adapters; under the mutex)
    bool unloading;   // refused to new requests; freed once no engine or queued request uses it
    uint64_t serial;  // which load this is: a request prepared for an adapter since unloaded, its place loaded
                      // again, is refused at submission rather than run on the newcomer
} serve_adapter;

// One engine per adapter configuration in use (the scale of every adapter; all 0 = the base model): a request
// runs on its configuration's engine, so it never sees another's adapters. Created when first needed; an idle
// one is replaced when all RG_SERVE_MAX_ENGINES are taken. Engine-thread only.
typedef struct serve_engine {
    int index;
    bool used;
    float scales[RG_SERVE_MAX_LORA];
    struct rg_lora *stacked;  // owned, when several adapters apply
    rg_engine *engine;
    uint64_t last_used;
} serve_engine;

// A slot operation (POST /slots/N?action=...) the engine thread runs between steps for a connection waiting on
// the server's ops_cv.
typedef enum { SLOT_OP_SAVE, SLOT_OP_RESTORE, SLOT_OP_ERASE } slot_op_kind;
typedef struct slot_op {
    slot_op_kind kind;
    int slot;
    char path[4096];
    rg_status st;
    char msg[1024];
    int64_t n_tokens;
    bool done;
    struct slot_op *next;
} slot_op;

// One request's generation. Two owners (refs): the connection that asked and the engine thread; the last one
// frees it. Fields under "shared" are read and written with the server's mutex held.
typedef struct gen {
    rg_server *srv;
    // --- shared
    int refs;
    gen_event *evs;  // FIFO [head, n)
    int n_evs, head, cap_evs;
    bool ended;      // the end event is queued (or the submission failed: error holds why)
    char error[1024];
    int error_http;  // the HTTP status of a submission the engine thread refused (0: a 500)
    int64_t n_prompt, n_cached;
    bool cancel;     // the connection wants it stopped
    pthread_cond_t cv;
    struct gen *next_submit;
    float scales[RG_SERVE_MAX_LORA];  // the adapter configuration it runs with
    uint64_t serials[RG_SERVE_MAX_LORA];  // the loads of the adapters it uses (serve_adapter.serial)
    // --- the engine thread's
    int engine_id;
    serve_engine *eng;
    rg_engine_request er;
    struct gen *next_active;
    // --- the connection's
    rg_serve_req req;
    const char *model_id;  // the model its replies name: the server's id, or a fine-tuned model's
    bool (*gone)(void *user);  // a whole reply's client: asked while waiting; true cancels (NULL: never asked)
    void *gone_user;
    double gone_checked;       // when gone was last asked (seconds, CLOCK_REALTIME)
    int32_t *prompt;
    size_t n_prompt_tokens;
    char id[40];
    int64_t created;
    rg_detok_stream ds;
    char *piece;       // [piece_cap]
    size_t piece_cap;
    char *text;        // everything decoded so far [text_len]
    size_t text_len, text_cap, sent;  // sent: bytes already given to the client
    int64_t n_gen;     // token events taken
    bool done;         // the final reply is written
    int reply_http;    // a whole reply that is an error: its status
    bool buffered;     // tools: the whole reply is parsed at the end instead of streamed
    const char *finish_reason;
    gen_event *lps;    // with logprobs: every token's event [n_lps]; lp_sent of them reported
    int n_lps, cap_lps, lp_sent;
    bool started;      // a chat stream's first chunk (the role) is written
    struct rg_tool_calls *calls;  // buffered: the parsed tool calls, or NULL
    char calls_error[1024];       // why the text did not parse as calls (finish_reason "tool_calls_unparsable")
} gen;

struct rg_server {
    rg_server_opts o;
    char *alias;
    rg_model *model;
    rg_tokenizer *tok;
    rg_chat_template tmpl;
    bool have_tmpl;
    char tmpl_error[1024];
    int32_t *eog;  // the end-of-generation tokens
    int n_eog;
    serve_adapter adapters[RG_SERVE_MAX_LORA];
    uint64_t adapter_serial;
    int n_adapters;       // adapter places in use or emptied (ids < n_adapters); under the mutex
    serve_engine engines[RG_SERVE_MAX_ENGINES];
    uint64_t engine_clock;
    int64_t n_ctx;
    int64_t created;
    struct rg_agent_tools *agent_tools;  // serve --agent: the tools (NULL: off); calls under agent_mu
    pthread_mutex_t agent_mu;
    bool agent_mu_init;
    // --- under mu
    pthread_mutex_t mu;
    pthread_cond_t work;  // the engine thread's: a submission, a cancellation, or quit
    gen *submit_head, *submit_tail;
    slot_op *ops;         // waiting for the engine thread
    pthread_cond_t ops_cv;
    int n_inflight;       // generations submitted and not ended (those beyond n_slots wait for a slot)
    bool quit;
    bool reap;            // an adapter is being unloaded: the engine thread frees it when it can
    int state;            // 0 loading, 1 ready, -1 failed
    pthread_cond_t ready_cv;
    char load_error[1024];
    // --- engine-thread only
    gen *active;
    step_events se;
    int n_slots;
    pthread_t loader, engine_thread;
    bool loader_started, engine_started;
    // --- metrics (atomic: read by /metrics without the lock)
    atomic_llong m_requests, m_errors, m_prompt_tokens, m_cached_tokens, m_gen_tokens, m_steps;
    atomic_llong m_slots, m_busy;  // over every adapter configuration's engine (the engine thread counts them)
    struct serve_ft *ft;  // files and fine-tuning jobs (serve_ft.h), or NULL
};

// serve_engines.c
rg_status server_load_adapters(rg_server *s, rg_error *err);
// Loads the adapter at path as a model of its own named name (listed in /v1/models; a request with "model": name
// runs with it at scale 1), or unnamed (name NULL: used through "lora" and the default scales, which start at 0).
// Any thread (takes the mutex). Returns its id, or -1 with e (400 a file that is not an adapter of this model, 409
// a name in use, 507 every one of the RG_SERVE_MAX_LORA places taken).
int server_adapter_add(rg_server *s, const char *path, const char *name, rg_serve_error *e);
// Unloads adapter id (any thread; takes the mutex): new requests are refused it at once, the running ones finish
// with it, then the engine thread frees it. False when id names no loaded adapter.
bool server_adapter_remove(rg_server *s, int64_t id);
// The engine thread, mutex held: frees the adapters being unloaded whose engines have no work left.
void server_reap_adapters(rg_server *s);
// The adapter configuration of a request (mutex taken): model is the request's model (an adapter's name puts that
// adapter at 1); lora (n, NULL when the request has no "lora") the request's own scales, else the defaults. False
// with e when it names an adapter that is not loaded.
bool server_request_scales(rg_server *s, const char *model, const rg_serve_req *r, float *scales, uint64_t *serials,
                           rg_serve_error *e);
// Under the mutex: whether the adapters of a configuration are still the loads serials names.
bool server_adapters_current(rg_server *s, const float *scales, const uint64_t *serials);
// The name of a loaded adapter equal to model (mutex taken).
bool server_adapter_named(rg_server *s, const char *model);
// /v1/models' entries of the named adapters (after the base model's).
void server_models_json(rg_server *s, rg_jw *w);
// The engine of g's configuration: found, made, or made in place of an idle one; NULL with err when every
// engine is busy with another configuration (or making one failed).
serve_engine *server_engine_for(rg_server *s, const float *scales, rg_error *err);
void server_engines_free(rg_server *s);
void server_on_event(void *user, const rg_engine_event *ev);  // the engines' callback (user: a serve_engine)
// GET and POST /lora-adapters, POST /lora-adapters/load and /lora-adapters/unload.
void route_lora_adapters(rg_server *s, const char *path, bool post, const char *body, size_t len,
                         rg_serve_response *out);
// server.c helpers the routes share.
void server_json_response(int status, rg_jw *w, rg_serve_response *out);
// Starts w as an OpenAI list: {"object": "list", "data": [ (the caller closes the array and the object).
void server_list_open(rg_jw *w);
void server_fail_response(rg_server *s, rg_serve_response *out, rg_serve_error *e);
// A request body as JSON of type want (object or array): false with e (400) when it is not.
bool server_parse_body(rg_json_doc **doc, const char *body, size_t len, rg_json_type want, rg_serve_error *e);

// serve_agent.c: serve --agent.
rg_status server_agent_start(rg_server *s, rg_error *err);  // loads the tools file, starts its MCP servers
void server_agent_free(rg_server *s);
bool server_agent_wants(rg_server *s, const rg_json *request);  // a chat request the agent answers
void server_agent_route(rg_server *s, const rg_json *request, bool (*gone)(void *), void *gone_user,
                        rg_serve_response *out);

// serve_slots.c: POST /slots/N?action=save|restore|erase, and the engine thread's side.
void route_slots(rg_server *s, const char *path, const char *body, size_t len, rg_serve_response *out);
void server_run_slot_ops(rg_server *s);  // engine thread, mutex held (released while an op runs)

// serve_gen.c
// A chat request's messages (and tools) through the model's template, with the generation prompt.
rg_status gen_render_chat(rg_server *s, const rg_serve_req *r, rg_chat_rendered *out, rg_serve_error *e);
rg_status gen_prepare(rg_server *s, gen *g, rg_serve_error *e);  // the prompt tokens and the engine request
void gen_release(gen *g);                                       // drops one ref (locks the mutex itself)
void gen_free(gen *g);                                          // the last ref's end (no lock taken)
// The next piece of reply: false when the reply is complete. Writes SSE chunks (stream) or the whole JSON.
bool gen_next(gen *g, rg_jw *out);
// The replies of serve_gen.c that serve_tools.c also writes: one SSE chunk with text [a, b) (and the logprobs not
// yet sent), and the whole (non-streamed) reply.
void gen_sse_chunk(gen *g, rg_jw *w, size_t a, size_t b, const char *finish, bool role);
void gen_whole_reply(gen *g, rg_jw *w);
void gen_head(gen *g, rg_jw *w, bool chunk);                   // id, object, created, model, fingerprint
void gen_choice_open(gen *g, rg_jw *w, bool chunk);            // [data: ]{head, "choices": [{"index": 0,
void gen_choice_close(gen *g, rg_jw *w, const char *finish, bool chunk);  // finish_reason}], [usage]}[\n\n]
void gen_usage_json(gen *g, rg_jw *w);                         // "usage": {...}
void gen_logprobs_json(gen *g, rg_jw *w, int from, int to);    // "logprobs": ... of tokens [from, to)
void gen_sse_usage(gen *g, rg_jw *w);                          // the stream's usage chunk
// serve_tools.c: a buffered (tools) reply: the text parsed into tool calls at the end (g->finish_reason may
// become "tool_calls"), then written whole or as the stream's last chunk.
void gen_tool_calls(gen *g);
void gen_tool_reply(gen *g, rg_jw *w);
void gen_tool_chunks(gen *g, rg_jw *w);
// Hands g to the engine thread (adds the engine's ref); false with e filled when the queue is full.
bool server_submit(rg_server *s, gen *g, rg_serve_error *e);
void server_cancel(rg_server *s, gen *g);

#endif
