// generate.h - the pieces of `retrograd generate` (cmd_generate.c): a loaded session with
// its sampler and streaming output, one turn of prompt + generation (generate_turn.c), and
// the interactive chat over it (generate_chat.c).
#ifndef RG_CLI_GENERATE_H
#define RG_CLI_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "infer/sampler.h"
#include "infer/session.h"
#include "model/model.h"
#include "text/chat.h"
#include "text/tokenizer.h"

typedef struct gen {
    const char *cmd;
    rg_model *model;
    rg_tokenizer *tok;
    const rg_tokenizer_info *info;
    rg_session *sess;
    rg_sampler *smp;
    int64_t n_vocab, n_ctx, n_predict;
    bool add_bos, truncate;
    rg_detok_stream stream;
    char *piece;  // [piece_cap]: one streamed piece of text
    size_t piece_cap;
    bool last_newline;  // the last byte written to stdout was '\n' (or nothing was written)
    bool verbose_prompt;
    struct rg_spec *spec;  // --draft: the speculative decoder (infer/speculative.h), or NULL
    int32_t *spec_out;     // [draft_max + 1]: the tokens of its last verification
} gen;

typedef struct turn_stats {
    int64_t n_prompt, n_gen;
    double t_prompt, t_gen;
    int32_t last;     // the last token drawn
    bool eog;         // stopped at an end-of-generation token
    bool ctx_full;    // stopped because the context is full
    char *reply;      // the decoded text (chat mode), malloc'd
    size_t reply_len;
} turn_stats;

// Writes n bytes of generated text to stdout, flushed.
void gen_emit(gen *g, const char *p, int64_t n);

// Tokenizes text for the session: special-token text recognized, BOS first when bos and the
// tokens do not already start with it.
rg_status gen_tokenize(gen *g, const char *text, size_t len, bool bos, int32_t **ids, size_t *n, rg_error *err);

// Evaluates ids after the cache, then draws up to n_predict tokens, streaming them out. The
// last drawn token is not evaluated (ts->last; the chat evaluates it before the next turn
// unless it ended the answer). ids[0..skip) are already in the sampler's history.
// keep_reply: ts->reply gets the decoded answer.
rg_status gen_run_turn(gen *g, const int32_t *ids, int64_t n, int64_t skip, bool keep_reply, turn_stats *ts,
                       rg_error *err);

// The turn's timings on a line of their own on stderr (and a note when the context filled).
void gen_print_stats(gen *g, const turn_stats *ts);

// One prompt (rendered with tmpl when not NULL) and its continuation; the exit code.
int gen_one_shot(gen *g, const char *text, size_t len, const rg_chat_template *tmpl);

// The interactive chat on stdin (generate_chat.c); the exit code.
int gen_chat(gen *g, const rg_chat_template *tmpl);

#endif
