// proc.h - running user-declared commands and long-lived helper processes, without a shell.
//
// Both halves start the program with posix_spawnp (argv[0] is looked up in PATH when it has no
// '/'), in a process group of its own, with default signal dispositions and an empty signal
// mask, and with no file descriptor of ours but its stdin, stdout and stderr. When the command
// ends (or is stopped), the rest of its process group is killed too, so a background process it
// left behind cannot hold the pipes open. Every pipe is close-on-exec in this process, every
// child is reaped, and writing to a child that is gone never raises SIGPIPE here.
//
// rg_proc_run: one command to completion, with a wall-clock limit and an output limit.
// rg_child_*:  a server that lives across many requests (the MCP client): lines in, lines out.
#ifndef RG_AGENT_PROC_H
#define RG_AGENT_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "retrograd.h"

// Milliseconds on the monotonic clock (for deadlines).
int64_t rg_proc_now_ms(void);

// "exited with status 3", "killed by signal 9 (Killed)" for a waitpid status.
void rg_proc_describe_status(int wstatus, char *buf, size_t n);

typedef struct rg_proc_opts {
    const char *const *argv;   // NULL-terminated; argv[0] is the program
    const char *cwd;           // working directory (a relative argv[0] is found from it); NULL: ours
    const char *const *env;    // NULL-terminated "KEY=VALUE" list replacing ours; NULL: ours
    int timeout_ms;            // wall-clock limit; <= 0: none
    size_t max_output;         // bytes of stdout + stderr kept together; 0: 1 MiB (reserved, touched as used)
    int kill_grace_ms;         // after SIGTERM on a limit, this long before SIGKILL; <= 0: 500
    bool merge_stderr;         // stderr into the stdout pipe (one interleaved stream), as 2>&1 would
    const char *stdin_data;    // bytes fed to stdin, which is then closed; NULL: stdin is /dev/null
    size_t stdin_len;
} rg_proc_opts;

typedef struct rg_proc_result {
    int exit_code;             // the exit status when the program exited; -1 when a signal ended it
    int term_signal;           // the signal that ended it (ours on a limit), 0 when it exited
    bool timed_out;            // timeout_ms passed and the process group was stopped
    bool output_truncated;     // more than max_output bytes came; the rest was dropped and the group stopped
    char *out;                 // stdout bytes, NUL-terminated (malloc'd, never NULL after RG_OK)
    size_t out_len;
    char *err;                 // stderr bytes, NUL-terminated (empty with merge_stderr)
    size_t err_len;
    int64_t elapsed_ms;
} rg_proc_result;

// Runs the command to its end. RG_OK whenever the program ran, whatever its exit status, a
// timeout or a truncation (the result says which); an error when it could not start: no such
// program ("cannot run 'x': no such program in PATH"), not executable, no such working
// directory, out of pipes or memory. res is zeroed first; free it with rg_proc_result_free.
rg_status rg_proc_run(const rg_proc_opts *opts, rg_proc_result *res, rg_error *err);
void rg_proc_result_free(rg_proc_result *res);

// ---------------------------------------------------------------------------
// A long-lived child: stdin and stdout are pipes of ours; stderr is drained into a tail kept for
// error messages (the last 4 KiB) or appended to a log file.

typedef struct rg_child rg_child;

typedef struct rg_child_opts {
    const char *const *argv;   // as rg_proc_opts
    const char *cwd;
    const char *const *env;
    const char *stderr_path;   // append the child's stderr here; NULL: drain it into the tail
} rg_child_opts;

rg_status rg_child_spawn(rg_child **out, const rg_child_opts *opts, rg_error *err);

// Writes all n bytes to the child's stdin within timeout_ms (<= 0: no limit), reading its
// stdout into the line buffer meanwhile (a child blocked on a full stdout never deadlocks us).
rg_status rg_child_write(rg_child *c, const char *data, size_t n, int timeout_ms, rg_error *err);

// The next line of the child's stdout, without its "\n" (or "\r\n"), NUL-terminated; *line stays
// valid until the next call on c. Errors: no line within timeout_ms (<= 0: no limit; what came of
// the line is kept for the next call); the child closed its stdout (the message says how it
// ended and ends with its stderr tail); a line longer than max_len bytes (RG_ERR_FORMAT: the
// rest of that line is skipped, so the next call reads the line after it).
rg_status rg_child_read_line(rg_child *c, char **line, size_t *len, size_t max_len, int timeout_ms,
                             rg_error *err);

// true once the child's stdout reached its end.
bool rg_child_eof(const rg_child *c);
pid_t rg_child_pid(const rg_child *c);
// The last bytes of the child's stderr (empty when it goes to a file), NUL-terminated.
const char *rg_child_stderr_tail(const rg_child *c);

// Waits up to timeout_ms (0: just looks) for the child to exit and reaps it; true and its
// waitpid status in *wstatus (may be NULL) once it has.
bool rg_child_wait(rg_child *c, int timeout_ms, int *wstatus);

// Ends the child: closes its stdin, gives it grace_ms (<= 0: 1000) to exit, then SIGTERM to its
// group and grace_ms more, then SIGKILL; reaps it, closes every fd and frees c. *wstatus (may be
// NULL) gets its waitpid status. NULL is a no-op.
void rg_child_close(rg_child *c, int grace_ms, int *wstatus);

#endif
