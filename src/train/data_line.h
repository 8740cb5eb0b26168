// data_line.h - one JSONL line of training data: parsed, its fields checked and a "messages" line rendered with
// the chat template (data_line.c). The loader (data.c) and rg_data_check_line share it, so both accept and
// refuse the same lines with the same words. Internal to src/train.
#ifndef RG_TRAIN_DATA_LINE_H
#define RG_TRAIN_DATA_LINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/json.h"
#include "retrograd.h"
#include "text/chat.h"

enum { KIND_TEXT = 1, KIND_MESSAGES = 2, KIND_PROMPT = 4 };

// Where a line is, for messages ("PATH:LINE: ...").
typedef struct where {
    const char *path;
    int64_t line;
    rg_error *err;
} where;

// A JSONL line as the loader reads it.
typedef struct parsed_line {
    rg_json_doc *doc;
    int kind;                  // KIND_TEXT, KIND_MESSAGES or KIND_PROMPT
    const char *a, *b;         // text: the text; prompt/completion: the prompt and the completion
    size_t a_len, b_len;
    rg_chat_message *msgs;     // messages: the messages,
    bool *target;              // whether each one's assistant span is a target (weight 1),
    char **joined;             // a content given as text parts: the parts joined (malloc'd), else NULL,
    size_t n_msgs;
    rg_chat_rendered r;        // and the rendering (no generation prompt)
} parsed_line;

static inline bool data_role_is(const rg_chat_message *m, const char *role) {
    size_t n = strlen(role);
    return m->role_len == n && memcmp(m->role, role, n) == 0;
}

// Parses, checks and (for "messages") renders one non-blank line; on failure *p holds nothing.
rg_status data_parse_line(const where *w, const rg_chat_template *tmpl, const char *text, size_t len, parsed_line *p);
void data_parsed_line_free(parsed_line *p);
// Only spaces, tabs and CRs.
bool data_is_blank(const char *text, size_t len);

#endif
