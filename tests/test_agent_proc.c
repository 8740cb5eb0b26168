// test_agent_proc.c - running commands without a shell (src/agent/proc.h): a table of commands
// with the exit, signal, limits and output each must give; programs and directories that do not
// exist; a hang stopped by the time limit (also one that ignores SIGTERM); 10 MB of output cut
// at the limit; stdin fed and refused; the working directory; background processes left behind;
// no fd of ours reaching the child. Then the long-lived child: lines both ways, a deadline, a line
// over the limit, a child that dies, a stderr log file, a child that will not end. Every case
// leaves no fd open and no child unreaped (checked at the end).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/proc.h"
#include "agent_checks.h"
#include "rg_test.h"

static char tmp_dir[] = "/tmp/rg_agent_proc_XXXXXX";

// ---------------------------------------------------------------------------
// rg_proc_run: the table

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

typedef struct run_case {
    const char *what;
    const char *const *argv;
    const char *stdin_data;
    int timeout_ms, grace_ms;
    size_t max_output;
    bool merge_stderr;
    int exit_code, term_signal;     // expected (not checked when truncated)
    bool timed_out, truncated;
    const char *out, *err;          // expected exactly (NULL: not checked)
    int max_ms;                     // the command must end within this long
} run_case;

static const run_case run_cases[] = {
    {"exit 0 with output", ARGV("echo", "hello"), .out = "hello\n", .err = "", .max_ms = 5000},
    {"exit 3 with stderr", ARGV("sh", "-c", "echo oops >&2; exit 3"), .exit_code = 3, .out = "", .err = "oops\n", .max_ms = 5000},
    {"stdin fed", ARGV("cat"), .stdin_data = "abc\ndef", .out = "abc\ndef", .max_ms = 5000},
    {"stdin is /dev/null by default", ARGV("cat"), .out = "", .max_ms = 5000},
    {"stdin refused (closed unread)", ARGV("sh", "-c", "exec 0<&-; sleep 0.1; echo x"), .stdin_data = "y", .out = "x\n", .max_ms = 5000},
    {"merged stderr", ARGV("sh", "-c", "echo a; echo b >&2"), .merge_stderr = true, .out = "a\nb\n", .err = "", .max_ms = 5000},
    {"killed by a signal", ARGV("sh", "-c", "kill -9 $$"), .exit_code = -1, .term_signal = SIGKILL, .max_ms = 5000},
    {"hang: time limit", ARGV("sleep", "30"), .timeout_ms = 200, .exit_code = -1, .term_signal = SIGTERM, .timed_out = true, .max_ms = 3000},
    {"hang ignoring SIGTERM", ARGV("sh", "-c", "trap '' TERM; echo started; sleep 30"), .timeout_ms = 200, .grace_ms = 200,
     .exit_code = -1, .term_signal = SIGKILL, .timed_out = true, .out = "started\n", .max_ms = 3000},
    {"10 MB cut at 1 MiB", ARGV("head", "-c", "10000000", "/dev/zero"), .max_output = 1 << 20, .truncated = true, .max_ms = 5000},
    {"10 MB within the limit", ARGV("head", "-c", "10000000", "/dev/zero"), .max_output = 16 << 20, .max_ms = 5000},
    {"a background process left behind", ARGV("sh", "-c", "sleep 30 & echo done"), .out = "done\n", .max_ms = 3000},
    {"limit shared by stdout and stderr", ARGV("sh", "-c", "echo 12345; echo 67890 >&2"), .max_output = 8, .truncated = true, .max_ms = 5000},
};

static void check_run_case(const run_case *c) {
    rg_proc_opts o = {.argv = c->argv, .timeout_ms = c->timeout_ms, .kill_grace_ms = c->grace_ms,
                      .max_output = c->max_output, .merge_stderr = c->merge_stderr, .stdin_data = c->stdin_data,
                      .stdin_len = c->stdin_data ? strlen(c->stdin_data) : 0};
    rg_proc_result r;
    rg_error err = {0};
    rg_status st = rg_proc_run(&o, &r, &err);
    RG_REQUIRE(st == RG_OK, "%s: status %d: %s", c->what, st, err.msg);
    if (!c->truncated) {  // a cut command is stopped with SIGTERM, unless it ended first
        RG_CHECK(r.exit_code == c->exit_code, "%s: exit %d, want %d", c->what, r.exit_code, c->exit_code);
        RG_CHECK(r.term_signal == c->term_signal, "%s: signal %d, want %d", c->what, r.term_signal, c->term_signal);
    }
    RG_CHECK(r.timed_out == c->timed_out, "%s: timed_out %d", c->what, r.timed_out);
    RG_CHECK(r.output_truncated == c->truncated, "%s: truncated %d", c->what, r.output_truncated);
    RG_CHECK(r.elapsed_ms < c->max_ms, "%s: took %lld ms", c->what, (long long)r.elapsed_ms);
    RG_CHECK(r.out && r.err && !r.out[r.out_len] && !r.err[r.err_len], "%s: buffers not NUL-terminated", c->what);
    if (c->out) RG_CHECK(r.out_len == strlen(c->out) && !memcmp(r.out, c->out, r.out_len), "%s: out '%s'", c->what, r.out);
    if (c->err) RG_CHECK(r.err_len == strlen(c->err) && !memcmp(r.err, c->err, r.err_len), "%s: err '%s'", c->what, r.err);
    if (c->max_output) {
        size_t total = r.out_len + r.err_len;
        size_t want = c->truncated ? c->max_output : 10000000;
        RG_CHECK(total == want, "%s: kept %zu bytes, want %zu", c->what, total, want);
    }
    rg_proc_result_free(&r);
}

static void test_run_table(void) {
    for (size_t i = 0; i < sizeof run_cases / sizeof *run_cases; i++) check_run_case(&run_cases[i]);
}

// 4 MiB through cat: stdin and stdout both fill their pipes at once and must not deadlock.
static void test_run_big_stdin(void) {
    size_t n = 4 << 20;
    char *in = malloc(n);
    RG_REQUIRE(in, "malloc");
    for (size_t i = 0; i < n; i++) in[i] = (char)('a' + i % 26);
    rg_proc_opts o = {.argv = ARGV("cat"), .stdin_data = in, .stdin_len = n, .max_output = 8 << 20, .timeout_ms = 20000};
    rg_proc_result r;
    rg_error err = {0};
    rg_status st = rg_proc_run(&o, &r, &err);
    RG_CHECK(st == RG_OK, "%s", err.msg);
    RG_CHECK(st || (r.out_len == n && !memcmp(r.out, in, n)), "cat gave %zu bytes back of %zu", r.out_len, n);
    rg_proc_result_free(&r);
    free(in);
}

// Writes a script into the temp dir with this mode; its path into path.
static bool write_script(const char *name, const char *text, mode_t mode, char *path, size_t n) {
    snprintf(path, n, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok && chmod(path, mode) == 0;
}

static void test_run_cwd(void) {
    rg_proc_opts o = {.argv = ARGV("pwd"), .cwd = tmp_dir};
    rg_proc_result r;
    rg_error err = {0};
    RG_REQUIRE(rg_proc_run(&o, &r, &err) == RG_OK, "%s", err.msg);
    char want[512];
    snprintf(want, sizeof want, "%s\n", tmp_dir);
    RG_CHECK(strcmp(r.out, want) == 0, "pwd printed '%s', want '%s'", r.out, want);
    rg_proc_result_free(&r);
    // a relative program path is found from the working directory
    char path[512];
    RG_REQUIRE(write_script("hello.sh", "#!/bin/sh\necho from-script\n", 0755, path, sizeof path), "cannot write %s", path);
    o.argv = ARGV("./hello.sh");
    RG_REQUIRE(rg_proc_run(&o, &r, &err) == RG_OK, "%s", err.msg);
    RG_CHECK(strcmp(r.out, "from-script\n") == 0, "./hello.sh printed '%s'", r.out);
    rg_proc_result_free(&r);
}

typedef struct error_case {
    const char *what;
    const char *const *argv;
    const char *cwd;
    rg_status status;
    const char *msg;  // a part of the message
} error_case;

static void test_run_errors(void) {
    char noexec[512];
    RG_REQUIRE(write_script("noexec.sh", "#!/bin/sh\necho no\n", 0644, noexec, sizeof noexec), "cannot write %s", noexec);
    const error_case cases[] = {
        {"no such program", ARGV("rg-no-such-program"), NULL, RG_ERR_NOT_FOUND, "cannot run 'rg-no-such-program': no such program in PATH"},
        {"no such file", ARGV("/nonexistent/prog"), NULL, RG_ERR_NOT_FOUND, "cannot run '/nonexistent/prog': no such file"},
        {"not executable", ARGV(noexec), NULL, RG_ERR_IO, "Permission denied"},
        {"no such directory", ARGV("true"), "/nonexistent/dir", RG_ERR_NOT_FOUND, "working directory '/nonexistent/dir'"},
        {"directory is a file", ARGV("true"), "/etc/passwd", RG_ERR_ARG, "is not a directory"},
        {"empty argv", (const char *const[]){NULL}, NULL, RG_ERR_ARG, "no program"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const error_case *c = &cases[i];
        rg_proc_opts o = {.argv = c->argv, .cwd = c->cwd};
        rg_proc_result r;
        rg_error err = {0};
        rg_status st = rg_proc_run(&o, &r, &err);
        RG_CHECK(st == c->status, "%s: status %d, want %d (%s)", c->what, st, c->status, err.msg);
        RG_CHECK(strstr(err.msg, c->msg), "%s: message '%s' lacks '%s'", c->what, err.msg, c->msg);
        RG_CHECK(!r.out && !r.err, "%s: a result on failure", c->what);
        rg_child *child = NULL;
        rg_child_opts co = {.argv = c->argv, .cwd = c->cwd};
        st = rg_child_spawn(&child, &co, &err);
        RG_CHECK(st == c->status && !child, "%s: child status %d (%s)", c->what, st, err.msg);
    }
}

// An fd of ours opened without O_CLOEXEC must not reach the child.
static void test_run_fds_not_inherited(void) {
    int fd = open("/dev/null", O_RDONLY);
    RG_REQUIRE(fd >= 0, "open /dev/null");
    char script[64];
    snprintf(script, sizeof script, "test -e /proc/$$/fd/%d && echo leaked || echo clean", fd);
    rg_proc_opts o = {.argv = ARGV("sh", "-c", script)};
    rg_proc_result r;
    rg_error err = {0};
    rg_status st = rg_proc_run(&o, &r, &err);
    close(fd);
    RG_REQUIRE(st == RG_OK, "%s", err.msg);
    RG_CHECK(strcmp(r.out, "clean\n") == 0, "fd %d reached the child: '%s'", fd, r.out);
    rg_proc_result_free(&r);
}

// ---------------------------------------------------------------------------
// The long-lived child

static rg_child *spawn(const char *const *argv, const char *stderr_path) {
    rg_child *c = NULL;
    rg_child_opts o = {.argv = argv, .stderr_path = stderr_path};
    rg_error err = {0};
    if (rg_child_spawn(&c, &o, &err) != RG_OK) printf("    spawn: %s\n", err.msg);
    return c;
}

static void test_child_lines(void) {
    rg_child *c = spawn(ARGV("cat"), NULL);
    RG_REQUIRE(c, "cannot spawn cat");
    rg_error err = {0};
    RG_CHECK(rg_child_write(c, "one\ntwo\r\nthree", 14, 1000, &err) == RG_OK, "%s", err.msg);
    const char *want[] = {"one", "two"};
    for (int i = 0; i < 2; i++) {
        char *line;
        size_t len;
        rg_status st = rg_child_read_line(c, &line, &len, 100, 5000, &err);
        RG_CHECK(st == RG_OK && len == strlen(want[i]) && strcmp(line, want[i]) == 0, "line %d: '%s' (%s)", i,
                 st ? "" : line, st ? err.msg : "");
    }
    // "three" has no newline yet: the deadline passes, and it is kept for later
    char *line;
    size_t len;
    int64_t t0 = rg_proc_now_ms();
    rg_status st = rg_child_read_line(c, &line, &len, 100, 200, &err);
    int64_t took = rg_proc_now_ms() - t0;
    RG_CHECK(st == RG_ERR_IO && strstr(err.msg, "no line within 200 ms"), "status %d: %s", st, err.msg);
    RG_CHECK(took >= 150 && took < 3000, "the 200 ms deadline took %lld ms", (long long)took);
    RG_CHECK(rg_child_write(c, "\n", 1, 1000, &err) == RG_OK, "%s", err.msg);
    st = rg_child_read_line(c, &line, &len, 100, 5000, &err);
    RG_CHECK(st == RG_OK && strcmp(line, "three") == 0, "the kept line: '%s'", st ? err.msg : line);
    int ws = -1;
    rg_child_close(c, 1000, &ws);
    RG_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "cat ended with status 0x%x", ws);
}

static void test_child_long_line(void) {
    rg_child *c = spawn(ARGV("sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo; echo next"), NULL);
    RG_REQUIRE(c, "cannot spawn");
    char *line;
    size_t len;
    rg_error err = {0};
    rg_status st = rg_child_read_line(c, &line, &len, 1000, 5000, &err);
    RG_CHECK(st == RG_ERR_FORMAT && strstr(err.msg, "the limit"), "status %d: %s", st, err.msg);
    st = rg_child_read_line(c, &line, &len, 1000, 5000, &err);
    RG_CHECK(st == RG_OK && strcmp(line, "next") == 0, "after the long line: '%s'", st ? err.msg : line);
    rg_child_close(c, 1000, NULL);
}

static void test_child_dies(void) {
    rg_child *c = spawn(ARGV("sh", "-c", "echo last; echo boom >&2; exit 4"), NULL);
    RG_REQUIRE(c, "cannot spawn");
    char *line;
    size_t len;
    rg_error err = {0};
    rg_status st = rg_child_read_line(c, &line, &len, 1000, 5000, &err);
    RG_CHECK(st == RG_OK && strcmp(line, "last") == 0, "'%s'", st ? err.msg : line);
    st = rg_child_read_line(c, &line, &len, 1000, 5000, &err);
    RG_CHECK(st == RG_ERR_IO && rg_child_eof(c), "status %d", st);
    RG_CHECK(strstr(err.msg, "closed its output") && strstr(err.msg, "exited with status 4") && strstr(err.msg, "boom"),
             "message: %s", err.msg);
    st = rg_child_write(c, "x\n", 2, 1000, &err);
    RG_CHECK(st == RG_ERR_IO && strstr(err.msg, "closed its input"), "write to a dead child: %d %s", st, err.msg);
    int ws = -1;
    rg_child_close(c, 1000, &ws);
    RG_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 4, "status 0x%x", ws);
}

static void test_child_stderr_log(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/server.log", tmp_dir);
    rg_child *c = spawn(ARGV("sh", "-c", "echo log-line >&2; echo ok"), path);
    RG_REQUIRE(c, "cannot spawn");
    char *line;
    size_t len;
    rg_error err = {0};
    rg_status st = rg_child_read_line(c, &line, &len, 1000, 5000, &err);
    RG_CHECK(st == RG_OK && strcmp(line, "ok") == 0, "'%s'", st ? err.msg : line);
    rg_child_close(c, 1000, NULL);
    FILE *f = fopen(path, "r");
    RG_REQUIRE(f, "no log file %s", path);
    char got[64] = {0};
    RG_CHECK(fgets(got, sizeof got, f) && strcmp(got, "log-line\n") == 0, "log file holds '%s'", got);
    fclose(f);
}

// A child that ignores both its stdin closing and SIGTERM: SIGKILL after the grace.
static void test_child_stubborn(void) {
    rg_child *c = spawn(ARGV("sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"), NULL);
    RG_REQUIRE(c, "cannot spawn");
    char *line;
    size_t len;
    rg_error err = {0};
    RG_CHECK(rg_child_read_line(c, &line, &len, 100, 5000, &err) == RG_OK, "%s", err.msg);
    int64_t t0 = rg_proc_now_ms();
    int ws = -1;
    rg_child_close(c, 100, &ws);
    int64_t took = rg_proc_now_ms() - t0;
    RG_CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "status 0x%x", ws);
    RG_CHECK(took < 3000, "close took %lld ms", (long long)took);
}

static const rg_test_case cases[] = {
    RG_TEST(test_run_table),
    RG_TEST(test_run_big_stdin),
    RG_TEST(test_run_cwd),
    RG_TEST(test_run_errors),
    RG_TEST(test_run_fds_not_inherited),
    RG_TEST(test_child_lines),
    RG_TEST(test_child_long_line),
    RG_TEST(test_child_dies),
    RG_TEST(test_child_stderr_log),
    RG_TEST(test_child_stubborn),
    RG_TEST(test_no_leaks),  // last: nothing left behind
    {0},
};

static void remove_tmp(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmp_dir);
}

int main(int argc, char **argv) {
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    agent_fds_at_start = agent_count_fds();
    int rc = rg_test_run(argc, argv, cases);
    remove_tmp();
    return rc;
}
