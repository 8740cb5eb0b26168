// mcp.h - a Model Context Protocol client over stdio: the server is a child process, and JSON-RPC 2.0
// messages go one per line both ways.
//
// rg_mcp_connect spawns the server and does the handshake: `initialize` (protocolVersion
// 2025-06-18, clientInfo {"name": "retrograd", "version"}, capabilities {}), a check that the
// server's protocolVersion is one we know (2024-11-05, 2025-03-26, 2025-06-18), then
// `notifications/initialized`. Then `tools/list` (every page, following nextCursor) and
// `tools/call`. While waiting for an answer the client ignores notifications and answers to ids it
// did not ask (or gave up on), answers a `ping` with {}, and answers any other request with
// "method not found". Every call has a deadline; a call that runs past it is reported and the
// server is sent `notifications/cancelled`.
//
// Errors name the server and the method: "mcp server 'time': tools/call 'get_current_time': ...";
// a JSON-RPC error object ("error -32602: Unknown tool"), a server that exits (how it ended and
// its stderr's last bytes), a line that is not JSON or not a JSON-RPC message, a line longer than
// max_line, no answer in time. After an error the connection can still be used (the late answer
// is ignored) unless the server is gone. One connection serves one thread at a time.
#ifndef RG_AGENT_MCP_H
#define RG_AGENT_MCP_H

#include <stdbool.h>
#include <stddef.h>

#include "retrograd.h"

struct rg_jw;

typedef struct rg_mcp_opts {
    const char *name;             // the server's name in messages ("time"); NULL: argv[0]
    const char *const *argv;      // the server's command (no shell)
    const char *const *env;       // NULL-terminated "KEY=VALUE" list replacing ours; NULL: ours
    const char *cwd;              // NULL: ours
    const char *stderr_path;      // append the server's stderr here; NULL: keep its tail for errors
    const char *client_version;   // clientInfo.version; NULL: "0"
    int init_timeout_ms;          // spawn + initialize; <= 0: 30000
    int call_timeout_ms;          // each request after that (tools/call can override); <= 0: 60000
    size_t max_line;              // longest message line read; 0: 16 MiB
} rg_mcp_opts;

typedef struct rg_mcp rg_mcp;

typedef struct rg_mcp_tool {
    char *name;
    char *description;            // "" when the server gave none
    char *input_schema;           // JSON text of inputSchema ({"type":"object"} when absent)
} rg_mcp_tool;

typedef struct rg_mcp_tools {
    rg_mcp_tool *items;
    size_t n;
} rg_mcp_tools;

typedef struct rg_mcp_result {
    char *text;                   // the text items of content joined by "\n" (others as a "[image ...]" note)
    bool is_error;                // the tool reported an error (isError): text says what
    char *structured;             // JSON text of structuredContent, or NULL
} rg_mcp_result;

// Spawns and initializes the server. On error nothing is left running.
rg_status rg_mcp_connect(rg_mcp **out, const rg_mcp_opts *opts, rg_error *err);
// Ends the server (closes its stdin, then SIGTERM, then SIGKILL) and frees m. NULL is a no-op.
void rg_mcp_close(rg_mcp *m);

const char *rg_mcp_name(const rg_mcp *m);
const char *rg_mcp_protocol_version(const rg_mcp *m);  // the version the server answered with
const char *rg_mcp_server_info(const rg_mcp *m);       // "name version" from serverInfo ("" when absent)

// Every tool the server lists (all pages). Free with rg_mcp_tools_free.
rg_status rg_mcp_list_tools(rg_mcp *m, rg_mcp_tools *tools, rg_error *err);
void rg_mcp_tools_free(rg_mcp_tools *tools);

// Calls a tool; arguments_json is a JSON object's text (NULL: {}); timeout_ms <= 0: the call
// timeout of the options. A tool that fails reports it in the result (is_error), not as an error.
rg_status rg_mcp_call_tool(rg_mcp *m, const char *name, const char *arguments_json, int timeout_ms,
                           rg_mcp_result *res, rg_error *err);
void rg_mcp_result_free(rg_mcp_result *res);

// One OpenAI tools entry {"type":"function","function":{"name","description","parameters"}} per tool,
// as items of an array the caller opened (several servers' tools can share one array).
void rg_mcp_tools_write_openai(struct rg_jw *w, const rg_mcp_tools *tools);
// The whole OpenAI `tools` array as JSON text (malloc'd; NULL when out of memory).
char *rg_mcp_tools_openai_json(const rg_mcp_tools *tools, size_t *len);

#endif
