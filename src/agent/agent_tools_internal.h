// agent_tools_internal.h - what the tools file reader (agent_tools_read.c) hands the executor (agent_tools.c).
#ifndef RG_AGENT_AGENT_TOOLS_INTERNAL_H
#define RG_AGENT_AGENT_TOOLS_INTERNAL_H

#include <stddef.h>

#include "agent/agent_tools.h"
#include "agent/mcp.h"
#include "base/json.h"

typedef struct at_mcp {
    char *name;
    char **argv;          // [argc + 1], NULL-terminated
    size_t argc;
    char *cwd;            // NULL: ours
    int timeout_ms;       // each tools/call
    char **only;          // [n_only]: the tools offered (the `tools` key), or NULL: all the server lists
    size_t n_only;
    size_t only_line;
    size_t line;          // where the entry starts in the file
    rg_mcp *conn;         // once started
    rg_mcp_tools tools;
} at_mcp;

typedef struct at_cmd {
    char *name;
    char *description;
    char **argv;          // [argc + 1], NULL-terminated, placeholders unreplaced
    size_t argc;
    char *parameters;     // the JSON Schema's JSON text
    rg_json_doc *params;  // the same, parsed
    char *cwd;
    int timeout_ms;
    size_t max_output;
    size_t line;
} at_cmd;

struct rg_agent_tools {
    char *path;
    at_mcp *mcp;
    size_t n_mcp;
    at_cmd *cmds;
    size_t n_cmds;
    char *json;           // the OpenAI tools array (rg_agent_tools_json)
    size_t json_len;
};

// The name of the next {NAME} placeholder in s at or after *from: *from moves past it and
// [*begin, *end) is the whole "{NAME}" in s. false when there is none.
bool at_next_placeholder(const char *s, size_t *from, size_t *begin, size_t *end);

#endif
