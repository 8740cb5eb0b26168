// cli.h - the subcommands of the retrograd binary.
#ifndef RG_CLI_H
#define RG_CLI_H

#include <stdio.h>

#include "gguf/gguf.h"

int cmd_info(int argc, char **argv);
int cmd_make_tiny(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

// JSON output helpers (json_out.c).
void json_str(FILE *f, const char *s, size_t n);  // quoted, escaped; invalid UTF-8 becomes U+FFFD
void json_f64(FILE *f, double v);                 // numbers; NaN and Inf as strings
// One metadata value: scalars as JSON values, arrays as lists (or a summary when
// full is 0 and the array has more than 16 elements).
void json_kv_value(FILE *f, const rg_gguf_kv *kv, int full);

#endif
