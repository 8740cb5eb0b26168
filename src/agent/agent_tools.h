// agent_tools.h - the tools an agent may call (`retrograd agent --tools FILE`): MCP servers over stdio and
// commands the user declares, read from one file, offered to the model as OpenAI `tools` and executed by name.
//
// The file is YAML (when built with libyaml, RG_HAVE_YAML) or JSON (always; a file whose first non-blank byte is
// '{' is read as JSON). Its shape, every key but those marked optional required:
//
//   mcp:                                   # optional: MCP servers, each one child process
//     - name: time                         #   the server's name in messages
//       command: [python3, -m, mcp_server_time, --local-timezone, UTC]   # argv, no shell
//       tools: [get_current_time]          #   optional: offer only these of its tools (each must be listed)
//       cwd: /tmp                          #   optional: its working directory
//       timeout_s: 30                      #   optional: each tools/call's limit (default 60)
//   commands:                              # optional: programs run once per call
//     - name: list_files                   #   the tool's name the model calls
//       description: List the files of a folder        # optional ("")
//       argv: [ls, -1, "{path}"]           #   the program and its arguments, no shell
//       parameters: {type: object, properties: {path: {type: string}}, required: [path]}  # optional JSON Schema
//       cwd: /tmp                          #   optional: its working directory (default: ours)
//       timeout_s: 10                      #   optional: wall-clock limit (default 30)
//       max_output: 65536                  #   optional: bytes of stdout + stderr allowed (default 65536)
//
// A command's argv element may hold {NAME} placeholders, each naming a property of its parameters; a call
// replaces them with the argument's value inside that one element (a string as it is, a number as written,
// a boolean as true/false). The element stays one argv element whatever the value holds (spaces, ';', quotes,
// '$(...)': nothing is interpreted, there is no shell). An element whose placeholder's argument is absent (an
// optional parameter) is left out whole, so "--depth={depth}" disappears when depth is not given. A value
// that starts with '-' reaches the program as such: put "--" in argv before it when the program reads options.
//
// Refused when loading, with file:line and the key: an unknown key (anywhere above except inside
// `parameters`), a value of the wrong type, a missing required key, an empty argv or command, a placeholder that
// names no property, two tools with one name (MCP tools included, once the servers list theirs: then the
// error comes from rg_agent_tools_start, as does a `tools` name the server does not list).
//
// A call (rg_agent_tools_call) fails - the message says which and why, naming the tool - for: an unknown tool,
// arguments that are not a JSON object, an argument not declared, a required one missing, a value of the wrong
// type (string, number, integer or boolean per the property's "type") or an array or object for a placeholder;
// a command that cannot start, runs past timeout_s, writes more than max_output bytes or exits non-zero (its
// output's tail in the message); an MCP server that errs, dies or does not answer in time, or a tool result
// with isError. The result of a command is its stdout; of an MCP tool, the text of its content.
#ifndef RG_AGENT_AGENT_TOOLS_H
#define RG_AGENT_AGENT_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "retrograd.h"

typedef struct rg_agent_tools rg_agent_tools;

typedef struct rg_agent_tools_opts {
    const char *mcp_stderr_path;  // append the MCP servers' stderr here; NULL: keep its tail for messages
    int mcp_init_timeout_ms;      // each server's spawn + initialize + tools/list; <= 0: 60000
} rg_agent_tools_opts;

// Reads and checks a tools file (nothing started). RG_ERR_FORMAT "FILE:LINE: ..." for a bad file,
// RG_ERR_UNSUPPORTED for YAML in a build without libyaml, RG_ERR_IO when it cannot be read.
rg_status rg_agent_tools_load(rg_agent_tools **out, const char *path, rg_error *err);
// The same from text in memory (path names it in messages).
rg_status rg_agent_tools_parse(rg_agent_tools **out, const char *path, const char *text, size_t len, rg_error *err);
// Starts every MCP server and lists its tools (an error names the server). opts may be NULL.
rg_status rg_agent_tools_start(rg_agent_tools *t, const rg_agent_tools_opts *opts, rg_error *err);
// Ends the servers and frees t. NULL is a no-op.
void rg_agent_tools_free(rg_agent_tools *t);

// How many tools there are (the commands, plus the MCP servers' once started).
size_t rg_agent_tools_count(const rg_agent_tools *t);
// The OpenAI `tools` array as JSON text: the MCP servers' tools in file order, then the commands. Owned by t,
// valid until the next rg_agent_tools_start or rg_agent_tools_free; NULL when out of memory.
const char *rg_agent_tools_json(rg_agent_tools *t, size_t *len);

// Executes one call. RG_OK: *result (malloc'd, NUL-terminated) holds what the tool gave. Otherwise the call
// failed: err says why, beginning with "tool 'NAME': ", and *result is NULL.
rg_status rg_agent_tools_call(rg_agent_tools *t, const char *name, const char *arguments_json, char **result,
                              size_t *len, rg_error *err);

#endif
