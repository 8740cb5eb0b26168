// cli.h - the subcommands of the retrograd binary.
#ifndef RG_CLI_H
#define RG_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli_args.h"
#include "gguf/gguf.h"
#include "graph/exec.h"
#include "model/model.h"

int cmd_info(int argc, char **argv);
int cmd_make_tiny(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_agent(int argc, char **argv);

// What `info` prints for a file (cmd_info.c), with file_label in place of its path when not
// NULL: also `make-tiny --dry-run`'s listing of a file it has not written.
void cli_info_text(const rg_gguf *g, const char *file_label);

// Helpers several commands share (cli_common.c). The parsers print
// "retrograd CMD: OPT 'VALUE' ..." to stderr and return false on bad input.
double cli_now(void);                                    // monotonic seconds
char *cli_read_file(const char *path, size_t *len);      // whole file, NUL-terminated; NULL + errno
bool cli_parse_i64(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_f32(const char *cmd, const char *opt, const char *s, float *out);
bool cli_parse_device(const char *cmd, const char *s, rg_device *out);
// --flash-attn auto|on|off (generate, perplexity: rg_session_opts.flash_attn); false with a message otherwise.
bool cli_parse_flash_attn(const char *cmd, const char *s, rg_flash_attn_mode *out);
int64_t cli_default_ctx(const rg_model *m);              // 4096, or the model's context if smaller
// CLI_CALL handlers (cli_args.h): --device into an rg_device, --flash-attn into an
// rg_flash_attn_mode, the repeatable --lora into a cli_loras.
bool cli_opt_device(const char *cmd, const char *opt, const char *value, void *dst);
bool cli_opt_flash_attn(const char *cmd, const char *opt, const char *value, void *dst);
bool cli_opt_lora(const char *cmd, const char *opt, const char *value, void *dst);

// The repeatable --lora A.gguf[:SCALE] of generate and perplexity (lora_args.c).
#define CLI_MAX_LORAS 16
typedef struct cli_loras {
    const char *spec[CLI_MAX_LORAS];
    int n;
} cli_loras;
struct rg_lora;
bool cli_loras_add(const char *cmd, cli_loras *ls, const char *spec);  // false (message printed) past the limit
// Loads every adapter against m (one line each on stderr); *out is the one adapter with its own *scale, or the
// stacked adapters with *scale 1; NULL when there are none. Returns 0, 1 (a file's error) or 2 (a bad spec).
int cli_loras_load(const char *cmd, const cli_loras *ls, const rg_model *m, struct rg_lora **out, float *scale);

// JSON output helpers (json_out.c).
void json_str(FILE *f, const char *s, size_t n);  // quoted, escaped; invalid UTF-8 becomes U+FFFD
void json_f64(FILE *f, double v);                 // numbers; NaN and Inf as strings
// One metadata value: scalars as JSON values, arrays as lists (or a summary when
// full is 0 and the array has more than 16 elements).
void json_kv_value(FILE *f, const rg_gguf_kv *kv, int full);

#endif
