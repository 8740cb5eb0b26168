// cli_args.c - the one option parser and --help printer of every command (cli_args.h).
#include "cli_args.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum {
    HELP_COLUMN_MAX = 26,  // the help text starts here (or two spaces after a longer option)
    HELP_WIDTH = 100,      // wrap the help text before this column
};

// ---------------------------------------------------------------------------
// Finding an option

// The row whose long name is the text before any '=' in arg (its length: name_len), or whose short name is arg.
static const cli_opt *find_opt(const cli_command *c, const char *arg, size_t name_len) {
    for (size_t i = 0; i < c->n_opts; i++) {
        const cli_opt *o = &c->opts[i];
        if (o->name && strlen(o->name) == name_len && !strncmp(o->name, arg, name_len)) return o;
        if (o->short_name && name_len == 2 && arg[0] == '-' && arg[1] == o->short_name) return o;
    }
    return NULL;
}

// Edit distance (insert, delete, substitute) between a and b, for names of at most 63 characters.
static size_t edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63) return (size_t)-1;
    size_t row[64];
    for (size_t j = 0; j <= nb; j++) row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

// The known long name closest to arg: one arg is the start of, or one within a third of its
// length in edits (at least 2); NULL when none is that close.
static const char *closest_name(const cli_command *c, const char *arg) {
    const char *best = NULL;
    size_t best_d = strlen(arg) / 3 > 2 ? strlen(arg) / 3 : 2;
    for (size_t i = 0; i < c->n_opts; i++) {
        const char *n = c->opts[i].name;
        if (!n) continue;
        if (strlen(arg) > 2 && !strncmp(n, arg, strlen(arg))) return n;  // a prefix: --ctx for --ctx-size
        size_t d = edit_distance(arg, n);
        if (d <= best_d) best = n, best_d = d;
    }
    return best;
}

static void unknown_option(const cli_command *c, const char *arg) {
    char name[64];
    size_t n = strcspn(arg, "=");
    snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), arg);
    const char *near = closest_name(c, name);
    if (near) fprintf(stderr, "retrograd %s: unknown option '%s' (did you mean %s?)\n", c->name, name, near);
    else fprintf(stderr, "retrograd %s: unknown option '%s' (retrograd %s --help lists them)\n", c->name, name, c->name);
}

// ---------------------------------------------------------------------------
// Storing a value

static bool parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-') {
        fprintf(stderr, "retrograd %s: %s '%s' is not a non-negative integer\n", cmd, opt, s);
        return false;
    }
    *out = v;
    return true;
}

// Writes value (NULL for a flag) where o says; false with a message when it is refused.
static bool store(const cli_command *c, const cli_opt *o, const char *spelled, const char *value) {
    switch (o->kind) {
    case CLI_KIND_FLAG: *(bool *)o->dst = true; return true;
    case CLI_KIND_STR: *(const char **)o->dst = value; return true;
    case CLI_KIND_I64: return cli_parse_i64(c->name, spelled, value, o->lo, o->hi, (int64_t *)o->dst);
    case CLI_KIND_U64: return parse_u64(c->name, spelled, value, (uint64_t *)o->dst);
    case CLI_KIND_F32: return cli_parse_f32(c->name, spelled, value, (float *)o->dst);
    case CLI_KIND_CALL: return o->fn(c->name, spelled, value, o->dst);
    }
    abort();  // a row with a kind this switch does not know: a broken table
}

// ---------------------------------------------------------------------------
// The parser

int cli_args_parse(const cli_command *c, int argc, char **argv) {
    if (c->n_pos) *c->n_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli_args_help(c, stdout);
            return CLI_ARGS_HELP;
        }
        if (a[0] != '-' || !a[1]) {  // a positional argument ("-" included: stdin's usual name)
            if (c->n_pos && *c->n_pos < c->max_pos) {
                c->pos[(*c->n_pos)++] = a;
                continue;
            }
            if (c->max_pos == 0)
                fprintf(stderr, "retrograd %s: unexpected argument '%s' (the command takes only options; quote a "
                                "value that has spaces)\n", c->name, a);
            else
                fprintf(stderr, "retrograd %s: unexpected argument '%s' (at most %d besides the options)\n", c->name, a,
                        c->max_pos);
            return CLI_ARGS_ERROR;
        }
        // --name=VALUE, for long names only
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_opt *o = find_opt(c, a, name_len);
        if (!o) {
            unknown_option(c, a);
            return CLI_ARGS_ERROR;
        }
        char spelled[64];  // the option as given, without its =VALUE, for the messages
        snprintf(spelled, sizeof spelled, "%.*s", (int)(name_len < sizeof spelled ? name_len : sizeof spelled - 1), a);
        const char *value = NULL;
        if (!o->metavar) {
            if (eq) {
                fprintf(stderr, "retrograd %s: %s takes no value (given '%s')\n", c->name, spelled, eq + 1);
                return CLI_ARGS_ERROR;
            }
        } else if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            fprintf(stderr, "retrograd %s: %s needs a value: %s %s\n", c->name, spelled, spelled, o->metavar);
            return CLI_ARGS_ERROR;
        }
        if (!store(c, o, spelled, value)) return CLI_ARGS_ERROR;
    }
    return CLI_ARGS_OK;
}

// ---------------------------------------------------------------------------
// --help

// "-x, --name META", "--name META" or "-x META" into buf; its length.
static size_t opt_label(const cli_opt *o, char *buf, size_t cap) {
    char s[3] = {'-', o->short_name, 0};
    int n = snprintf(buf, cap, "%s%s%s%s%s", o->short_name ? s : "", o->short_name && o->name ? ", " : "",
                     o->name ? o->name : "", o->metavar ? " " : "", o->metavar ? o->metavar : "");
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

// Writes text from column col, breaking at spaces before HELP_WIDTH; continuation lines start at indent.
static void wrap(FILE *f, const char *text, size_t col, size_t indent) {
    const char *p = text;
    if (!*p) fputc('\n', f);
    while (*p) {
        size_t room = HELP_WIDTH > col + 20 ? HELP_WIDTH - col : 20;
        size_t n = strlen(p);
        if (n > room) {
            size_t cut = room;
            while (cut > 0 && p[cut] != ' ') cut--;
            if (cut == 0) cut = strcspn(p, " ");  // one word longer than the room: on its own line
            n = cut;
        }
        fprintf(f, "%.*s\n", (int)n, p);
        p += n;
        while (*p == ' ') p++;
        if (*p) fprintf(f, "%*s", (int)indent, ""), col = indent;
    }
}

void cli_args_help(const cli_command *c, FILE *f) {
    fprintf(f, "usage: retrograd %s %s\n", c->name, c->synopsis);
    char label[128];
    size_t column = 0;
    for (size_t i = 0; i < c->n_opts; i++) {
        size_t n = opt_label(&c->opts[i], label, sizeof label) + 4;  // two spaces either side
        if (n > column && n <= HELP_COLUMN_MAX) column = n;
    }
    if (column < 14) column = 14;  // "  -h, --help  "
    for (size_t i = 0; i < c->n_opts; i++) {
        size_t n = opt_label(&c->opts[i], label, sizeof label);
        fprintf(f, "  %s  ", label);
        if (n + 4 < column) fprintf(f, "%*s", (int)(column - n - 4), "");
        wrap(f, c->opts[i].help, n + 4 > column ? n + 4 : column, column);
    }
    fprintf(f, "  -h, --help");
    fprintf(f, "%*s", (int)(column - 12), "");
    fprintf(f, "print this help\n");
    if (c->epilog) c->epilog(f);
}
