// cli_args.h - every command's options as one table: the parser and the --help text both
// read it, so an option cannot be parsed without being documented, or documented without
// being parsed.
//
// A command declares its table beside its locals (each row names where its value goes):
//
//   const cli_opt opts[] = {
//       CLI_STR('m', "--model", "MODEL.gguf", "the model", &model_path),
//       CLI_I64('n', "--n-predict", "N", "tokens to generate (default 128)", -1, INT64_MAX, &n_predict),
//       CLI_FLAG(0, "--raw", "use the text as is", &raw),
//   };
//   const cli_command c = {"generate", "-m MODEL.gguf -p TEXT [options]", opts, CLI_N(opts)};
//   int rc = cli_args_parse(&c, argc, argv);
//   if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
//
// Accepted forms: -x VALUE, --name VALUE, --name=VALUE; -h/--help anywhere prints the help.
// A value is taken as it is, even when it starts with '-' (-n -1). Errors go to stderr as
// "retrograd CMD: ..." naming the option: an unknown one with the closest known name, a
// missing value with the option's metavariable.
//
// --help prints, to stdout, the shape the docs checker reads:
//   usage: retrograd CMD SYNOPSIS
//     -x, --name VALUE  help        (one line per option; long help wraps onto lines
//     --name VALUE      help         indented past the option column)
//   then the command's epilog, if any.
#ifndef RG_CLI_ARGS_H
#define RG_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_kind {
    CLI_KIND_FLAG,  // bool *: set to true; takes no value
    CLI_KIND_STR,   // const char **: the value (the last one given wins)
    CLI_KIND_I64,   // int64_t *: an integer in [lo, hi]
    CLI_KIND_U64,   // uint64_t *: a non-negative integer
    CLI_KIND_F32,   // float *: a finite number
    CLI_KIND_CALL,  // fn(cmd, spelling, value, dst): repeatable options, choices, anything else
} cli_kind;

// A handler: false when the value is refused, after printing "retrograd CMD: ..." to stderr.
// opt is the option as the user spelled it; value is NULL for an option without a metavariable.
typedef bool (*cli_handler)(const char *cmd, const char *opt, const char *value, void *dst);

typedef struct cli_opt {
    char short_name;      // 'm' for -m, or 0
    const char *name;     // "--model", or NULL for an option with only a short name
    const char *metavar;  // "MODEL.gguf"; NULL: a flag (FLAG, or a CALL that takes no value)
    const char *help;     // one sentence; the --help text wraps it
    cli_kind kind;
    void *dst;            // where the value goes (typed by the CLI_* macros below)
    int64_t lo, hi;       // CLI_KIND_I64's range
    cli_handler fn;       // CLI_KIND_CALL
} cli_opt;

// Typed doors to cli_opt.dst: a wrong pointer type is a compile error, not a wrong write.
static inline void *cli_dst_bool(bool *p) { return p; }
static inline void *cli_dst_str(const char **p) { return p; }
static inline void *cli_dst_i64(int64_t *p) { return p; }
static inline void *cli_dst_u64(uint64_t *p) { return p; }
static inline void *cli_dst_f32(float *p) { return p; }

#define CLI_FLAG(s, name, help, p) {s, name, NULL, help, CLI_KIND_FLAG, cli_dst_bool(p), 0, 0, NULL}
#define CLI_STR(s, name, meta, help, p) {s, name, meta, help, CLI_KIND_STR, cli_dst_str(p), 0, 0, NULL}
#define CLI_I64(s, name, meta, help, lo, hi, p) {s, name, meta, help, CLI_KIND_I64, cli_dst_i64(p), lo, hi, NULL}
#define CLI_U64(s, name, meta, help, p) {s, name, meta, help, CLI_KIND_U64, cli_dst_u64(p), 0, 0, NULL}
#define CLI_F32(s, name, meta, help, p) {s, name, meta, help, CLI_KIND_F32, cli_dst_f32(p), 0, 0, NULL}
#define CLI_CALL(s, name, meta, help, fn, p) {s, name, meta, help, CLI_KIND_CALL, p, 0, 0, fn}
#define CLI_N(a) (sizeof(a) / sizeof((a)[0]))

typedef struct cli_command {
    const char *name;      // "generate"
    const char *synopsis;  // after "usage: retrograd NAME "
    const cli_opt *opts;
    size_t n_opts;
    // Positional arguments (info's MODEL.gguf, quantize's IN OUT TYPE): up to max_pos of them
    // into pos[] (count in *n_pos); max_pos 0: the command takes none.
    const char **pos;
    int max_pos;
    int *n_pos;
    void (*epilog)(FILE *f);  // printed after the options by --help (train's keys, quantize's types)
} cli_command;

enum { CLI_ARGS_OK = 0, CLI_ARGS_HELP = 1, CLI_ARGS_ERROR = 2 };

// Parses argv[0..argc) against c's table, writing each value where its row says.
// CLI_ARGS_HELP: --help was printed to stdout (exit 0); CLI_ARGS_ERROR: a message naming the
// argument was printed to stderr (exit 2).
int cli_args_parse(const cli_command *c, int argc, char **argv);

// The help text: the usage line, one line per option (and -h, --help), then the epilog.
void cli_args_help(const cli_command *c, FILE *f);

#endif
