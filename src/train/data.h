// data.h - training data: read a file, tokenize, mark targets, pack into rows, shuffle, split.
//
// Formats (chosen by the file name):
//   *.jsonl  JSON Lines: one JSON object per line, blank lines skipped. Each object has exactly one of
//              "text": "..."                                   all tokens are targets
//              "messages": [{"role": "...", "content": "..."}, ...]  rendered with the chat template
//              "prompt": "...", "completion": "..."            the completion is the target
//            Other members are ignored. An object with more than one of the three is refused (ambiguous).
//            A "messages" line may use tools as OpenAI's fine-tuning chat format writes them:
//              "tools": [{"type": "function", "function": {"name", "description", "parameters"}}]
//                         next to "messages", rendered by the template (rg_chat_options.tools);
//                         null is none; with "text" or "prompt" it is refused
//              assistant  "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]
//                         (arguments: JSON text of an object, or the object); "content" may then
//                         be null or absent; "weight": 0 or 1 (OpenAI's), 0: not a target
//              'tool'     "content" (a string) and optional "tool_call_id" and "name"
//            The legacy "functions" (line) and "function_call" (message) and the 'function' role
//            are refused with a pointer to tools/tool_calls. A malformed call, tool or weight is an
//            error naming the field: "data.jsonl:4: messages[2].tool_calls[0].function.name is missing".
//            rg_data_check_line runs these checks (and the rendering) on one line.
//   other    plain text: the whole file is one token stream.
// A UTF-8 byte order mark at the start of the file is skipped. The whole file must be valid UTF-8;
// the error names the line and the byte offset of the first bad byte.
//
// Tokens. Text is tokenized with special-token parsing on (as Hugging Face tokenizers do), so
// "<|im_end|>" written in data is that token. BOS follows the model's rule (tokenizer add_bos and
// the BOS id): added in front unless the sample's first token already is BOS; the model's add_eos
// is not used, EOS is added explicitly where stated below, and never twice.
//   plain text   BOS rule + the whole file, cut into windows of ctx+1 tokens overlapping by one
//                (window w covers tokens w*ctx .. w*ctx+ctx): ctx inputs, each predicting the next
//                token, so every token after the first is a target exactly once. A short last window
//                is kept when it has >= 2 tokens. No EOS at the end of the file.
//   text         BOS rule + text + EOS (so the model learns to stop).
//   messages     rg_chat_render without a generation prompt; the rendered text is tokenized piece by
//                piece, cut at the bounds of each assistant message's content_begin .. marker_end
//                (from the start of the call text when the template writes the calls before the
//                content, as LFM2 does), so no token straddles a bound; BOS rule in front; nothing
//                appended.
//   prompt/completion   BOS rule + prompt (tokenized alone) + completion (tokenized alone) + EOS.
// Targets (a token is a target when the model is trained to predict it from the tokens before it):
//   RG_DATA_TRAIN_ON_ALL: every token but a sample's first. ASSISTANT and COMPLETION (synonyms): the
//   tokens of assistant messages from content_begin through their end-of-turn marker (so not the
//   "<|im_start|>assistant\n" header, not the newline after <|im_end|>, not system/user/tool text);
//   with tool calls that span holds the calls as rendered ("<tool_call>...</tool_call>", LFM2's
//   "<|tool_call_start|>[...]<|tool_call_end|>"), while the tools block of the system turn and the
//   tool results ("<tool_response>") are not targets; the completion and its EOS; every token of
//   plain text and "text" lines. An assistant message with "weight": 0 is never a target, with
//   ALL too.
//   Known limit: with SentencePiece vocabularies that add a space prefix, a piece tokenized alone
//   gets its own prefix (the completion, each message piece).
//
// Samples. A sample occupies n_in positions of a row: a document's n_in is its token count; a
// plain-text window holds ctx+1 tokens in ctx positions (its last token is only a label). A document
// longer than ctx is, per opts.overlong: TRUNCATE, cut to its first ctx tokens as inputs, the last of
// which still predicts the document's next token (counted in n_truncated); DROP (counted in
// n_dropped); ERROR ("data.jsonl:5: sample has 812 tokens, more than training.ctx 512 (set
// data.overlong=truncate or drop)"). A sample with no target token at all (a conversation without
// an assistant turn, an empty text with no BOS) is dropped before the overlong rule applies, and
// counted in n_no_target; so is a truncated sample whose targets were all cut off.
//
// Split. With eval_split > 0 and at least 2 samples, n_eval = round(eval_split * n) clamped to
// [1, n-1] samples are held out; eval_split must be in [0, 1). A seeded permutation P of the samples
// (Fisher-Yates, Philox purpose RG_RAND_PURPOSE_DATA, tensor 1, step 0) decides: the first n_eval of P
// are eval samples (kept in file order), the rest are train samples in the order of P.
//
// Rows. Each row is exactly ctx positions. pack = true: first-fit in that order (each sample goes to
// the first row with room for it, else a new row), so a row holds whole samples only and documents
// never share positions; pack = false: one sample per row. The rest of a row is padding. Train and
// eval are packed separately. The train order of epoch e is a permutation of the train rows
// (Fisher-Yates keyed by (seed, purpose DATA, tensor 2, step e), e < 2^32), a pure function of
// (seed, e); eval rows keep their packing order.
//
// Memory: tokens stored once (int32, plain-text windows share theirs) with one target byte per
// token; samples are (offset, counts); rows are lists of sample indices.
#ifndef RG_TRAIN_DATA_H
#define RG_TRAIN_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "retrograd.h"
#include "text/chat.h"
#include "text/tokenizer.h"

typedef enum { RG_DATA_TRAIN_ON_ALL = 0, RG_DATA_TRAIN_ON_ASSISTANT = 1, RG_DATA_TRAIN_ON_COMPLETION = 2 } rg_data_train_on;
typedef enum { RG_DATA_OVERLONG_TRUNCATE = 0, RG_DATA_OVERLONG_DROP = 1, RG_DATA_OVERLONG_ERROR = 2 } rg_data_overlong;

typedef struct rg_data_opts {
    int64_t ctx;                // tokens per row, 1 .. 2^24
    rg_data_train_on train_on;  // see above
    bool pack;                  // several samples per row (documents never attend across each other)
    rg_data_overlong overlong;  // a sample longer than ctx: truncate, drop or error
    double eval_split;          // fraction of samples held out for eval, in [0, 1)
    uint64_t seed;
} rg_data_opts;

typedef struct rg_dataset rg_dataset;

typedef struct rg_data_stats {
    int64_t n_samples;                     // kept: n_train_samples + n_eval_samples
    int64_t n_train_samples, n_eval_samples;
    int64_t n_truncated, n_dropped;        // overlong samples truncated / dropped
    int64_t n_no_target;                   // samples dropped because no token was a target
    int64_t n_tokens, n_target_tokens;     // row positions and labels != -100, after truncation, train+eval
    int64_t n_train_rows, n_eval_rows, n_pad_tokens;
    const char *format;  // "text", "jsonl:text", "jsonl:messages", "jsonl:prompt_completion", "jsonl:mixed"
} rg_data_stats;

// Loads and prepares path. tmpl may be NULL when no line has "messages" (a line that does is an
// error naming it). Every error names the file and, where there is one, the 1-based line:
// "data.jsonl:17: not valid JSON: line 1, column 9: ...", "data.jsonl:3: no 'text', 'messages' or
// 'prompt'/'completion' field", invalid UTF-8 (with its byte offset), a role or content that is
// not a string, an empty file or no samples. Bad options are RG_ERR_ARG, bad data RG_ERR_FORMAT.
rg_status rg_dataset_load(rg_dataset **out, const char *path, const rg_tokenizer *tok, const rg_chat_template *tmpl,
                          const rg_data_opts *opts, rg_error *err);
// The same from len bytes in memory (not NUL-terminated; not kept after the call): path names
// them in messages and picks the format by its ending, as a file's path does.
rg_status rg_dataset_load_memory(rg_dataset **out, const char *path, const void *data, size_t len,
                                 const rg_tokenizer *tok, const rg_chat_template *tmpl, const rg_data_opts *opts,
                                 rg_error *err);
// Checks one JSONL line as the loader reads it (the same field checks and the same chat rendering,
// no tokenizer): RG_OK, or an error "PATH:LINE: ..." naming the field. tmpl may be NULL (then a
// "messages" line is refused as the loader refuses it). Blank lines are RG_OK.
rg_status rg_data_check_line(const rg_chat_template *tmpl, const char *path, int64_t line,
                             const char *text, size_t len, rg_error *err);
// A separate evaluation file (a fine-tuning job's validation_file, `train --eval-data`): eval, loaded with
// eval_split 0 and d's ctx, becomes d's eval split (its rows in packing order); d must hold out none of its own.
// Takes eval (freed on error too); the stats and the hash count both files. RG_ERR_ARG naming eval_path.
rg_status rg_dataset_set_eval(rg_dataset *d, rg_dataset *eval, const char *eval_path, rg_error *err);
void rg_dataset_free(rg_dataset *d);
rg_data_stats rg_dataset_stats(const rg_dataset *d);
// FNV-1a (64-bit) over the file bytes, the options and the resulting tokens and targets, so a
// changed file, option, tokenizer or template changes it (for resume checks).
uint64_t rg_dataset_hash(const rg_dataset *d);

// Rows of exactly ctx positions. split 0 = train, 1 = eval. For the train split, row k of epoch e
// is row perm_e[k]; the eval split ignores epoch. Writes ctx entries to each array that is not NULL:
//   ids[i]     token id; padding: the EOS id (0 when the model has none)
//   labels[i]  the next token of the same document when that token is a target, else -100
//              (padding, a document's last token, masked prompt tokens)
//   pos[i]     position within its document (0 at each document's start); padding continues
//              counting from the row's last document
//   seg[i]     document index within the row (0, 1, ...); padding -1
// k outside [0, n_rows) or a bad split gives an all-padding row. Safe to call from several threads.
int64_t rg_dataset_n_rows(const rg_dataset *d, int split);
void rg_dataset_row(const rg_dataset *d, int split, int64_t epoch, int64_t k, int32_t *ids, int32_t *labels,
                    int32_t *pos, int32_t *seg);

#endif
