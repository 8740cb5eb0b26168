// proc_child.c - a long-lived child process (an MCP server): lines to its stdin, lines from its
// stdout under a deadline, its stderr drained, and an orderly end.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/proc.h"
#include "agent/proc_spawn.h"
#include "base/error.h"

#define TAIL_BYTES 4096

struct rg_child {
    char *prog;                  // argv[0], for messages
    pid_t pid;
    bool reaped;
    int wstatus;
    int in_w, out_r, err_r;      // our ends; -1 once closed
    char *buf;                   // stdout bytes not yet handed out: buf[start..len)
    size_t start, len, cap;
    bool eof;                    // stdout reached its end
    bool skipping;               // dropping the rest of a line that was too long
    bool drop_output;            // closing: stdout bytes are not kept
    char tail[TAIL_BYTES + 1];   // the last stderr bytes, NUL-terminated
    size_t tail_len;
};

// ---------------------------------------------------------------------------
// Taking what the pipes have

static void set_nonblock(int fd) {
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void tail_append(rg_child *c, const char *s, size_t n) {
    if (n >= TAIL_BYTES) {
        memcpy(c->tail, s + n - TAIL_BYTES, TAIL_BYTES);
        c->tail_len = TAIL_BYTES;
    } else {
        size_t drop = c->tail_len + n > TAIL_BYTES ? c->tail_len + n - TAIL_BYTES : 0;
        memmove(c->tail, c->tail + drop, c->tail_len - drop);
        memcpy(c->tail + c->tail_len - drop, s, n);
        c->tail_len += n - drop;
    }
    c->tail[c->tail_len] = 0;
}

static void read_stderr(rg_child *c) {
    char tmp[8192];
    ssize_t n = read(c->err_r, tmp, sizeof tmp);
    if (n > 0) tail_append(c, tmp, (size_t)n);
    else if (n == 0 || (errno != EAGAIN && errno != EINTR)) rg_proc_close_fd(&c->err_r);
}

// Moves the unread bytes to the front and makes room for want more (plus a NUL).
static bool make_room(rg_child *c, size_t want) {
    if (c->start) {
        memmove(c->buf, c->buf + c->start, c->len - c->start);
        c->len -= c->start;
        c->start = 0;
    }
    if (c->len + want + 1 <= c->cap) return true;
    size_t cap = c->cap ? c->cap : 65536;
    while (cap < c->len + want + 1) cap *= 2;
    char *p = realloc(c->buf, cap);
    if (!p) return false;
    c->buf = p;
    c->cap = cap;
    return true;
}

static void read_stdout(rg_child *c) {
    if (c->drop_output) c->start = c->len = 0;
    if (!make_room(c, 65536)) return;  // retried on the next poll; the caller's deadline bounds it
    ssize_t n = read(c->out_r, c->buf + c->len, c->cap - c->len - 1);
    if (n > 0) c->len += (size_t)n;
    else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        rg_proc_close_fd(&c->out_r);
        c->eof = true;
    }
}

// Waits up to wait_ms (< 0: no limit) for the pipes and takes what came. *writable (when not
// NULL) says whether stdin can take bytes now (or is broken: the write tells which).
static void pump(rg_child *c, int wait_ms, bool *writable) {
    struct pollfd p[3] = {{c->out_r, POLLIN, 0}, {c->err_r, POLLIN, 0}, {writable ? c->in_w : -1, POLLOUT, 0}};
    if (writable) *writable = false;
    if (poll(p, 3, wait_ms) <= 0) return;
    if (p[0].revents) read_stdout(c);
    if (p[1].revents) read_stderr(c);
    if (writable && p[2].revents) *writable = true;
}

static int remaining_ms(int64_t deadline) {
    if (deadline < 0) return -1;
    int64_t left = deadline - rg_proc_now_ms();
    return left < 0 ? 0 : left > 1 << 30 ? 1 << 30 : (int)left;
}

static int64_t deadline_after(int timeout_ms) { return timeout_ms > 0 ? rg_proc_now_ms() + timeout_ms : -1; }

// ---------------------------------------------------------------------------
// Spawning and ending

static rg_status child_pipes(rg_child *c, const rg_child_opts *o, int child[3], rg_error *err) {
    int p_in[2], p_out[2], p_err[2] = {-1, -1};
    if (pipe2(p_in, O_CLOEXEC) != 0)
        return rg_fail(err, RG_ERR_IO, "cannot run '%s': pipe: %s", c->prog, strerror(errno));
    if (pipe2(p_out, O_CLOEXEC) != 0) {
        int e = errno;
        close(p_in[0]), close(p_in[1]);
        return rg_fail(err, RG_ERR_IO, "cannot run '%s': pipe: %s", c->prog, strerror(e));
    }
    int e = 0;
    if (o->stderr_path) {
        p_err[1] = open(o->stderr_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (p_err[1] < 0) e = errno;
    } else if (pipe2(p_err, O_CLOEXEC) != 0) e = errno;
    c->in_w = p_in[1], c->out_r = p_out[0], c->err_r = p_err[0];
    child[0] = p_in[0], child[1] = p_out[1], child[2] = p_err[1];
    if (!e) return RG_OK;
    for (int i = 0; i < 2; i++) rg_proc_close_fd(&child[i]);
    return rg_fail(err, RG_ERR_IO, "cannot run '%s': %s: %s", c->prog, o->stderr_path ? o->stderr_path : "pipe",
                   strerror(e));
}

static void child_free(rg_child *c) {
    rg_proc_close_fd(&c->in_w);
    rg_proc_close_fd(&c->out_r);
    rg_proc_close_fd(&c->err_r);
    free(c->buf);
    free(c->prog);
    free(c);
}

rg_status rg_child_spawn(rg_child **out, const rg_child_opts *o, rg_error *err) {
    *out = NULL;
    if (!o || !o->argv || !o->argv[0]) return rg_fail(err, RG_ERR_ARG, "run: no program given (argv is empty)");
    rg_child *c = calloc(1, sizeof *c);
    if (c) c->prog = strdup(o->argv[0]);
    if (!c || !c->prog) {
        free(c);
        return rg_fail(err, RG_ERR_NOMEM, "cannot run '%s': out of memory", o->argv[0]);
    }
    c->in_w = c->out_r = c->err_r = -1;
    int child[3] = {-1, -1, -1};
    rg_status st = child_pipes(c, o, child, err);
    if (!st) st = rg_proc_spawn(o->argv, o->cwd, o->env, child[0], child[1], child[2], &c->pid, err);
    for (int i = 0; i < 3; i++) rg_proc_close_fd(&child[i]);
    if (st) {
        child_free(c);
        return st;
    }
    set_nonblock(c->in_w);
    set_nonblock(c->out_r);
    set_nonblock(c->err_r);
    *out = c;
    return RG_OK;
}

// Reaps the child when it has exited; first kills what it left in its group (the unreaped
// zombie keeps the group id from being reused).
static bool try_reap(rg_child *c) {
    if (c->reaped) return true;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno == EINTR) return false;
        c->reaped = true;  // ECHILD: reaped behind our back (SIGCHLD ignored); its status is lost
        return true;
    }
    if (si.si_pid != c->pid) return false;
    kill(-c->pid, SIGKILL);
    while (waitpid(c->pid, &c->wstatus, 0) < 0 && errno == EINTR) {}
    c->reaped = true;
    return true;
}

bool rg_child_wait(rg_child *c, int timeout_ms, int *wstatus) {
    int64_t deadline = rg_proc_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    int backoff = 1;
    while (!try_reap(c)) {
        int left = remaining_ms(deadline);
        if (left <= 0) return false;
        pump(c, left < backoff ? left : backoff, NULL);  // a child blocked on a full pipe cannot exit
        if (backoff < 32) backoff *= 2;
    }
    if (wstatus) *wstatus = c->wstatus;
    return true;
}

void rg_child_close(rg_child *c, int grace_ms, int *wstatus) {
    if (!c) return;
    if (grace_ms <= 0) grace_ms = 1000;
    c->drop_output = true;
    rg_proc_close_fd(&c->in_w);  // a stdio server ends when its input does
    if (!rg_child_wait(c, grace_ms, NULL)) {
        kill(-c->pid, SIGTERM);
        if (!rg_child_wait(c, grace_ms, NULL)) {
            kill(-c->pid, SIGKILL);
            while (!rg_child_wait(c, 1000, NULL)) {}
        }
    }
    if (wstatus) *wstatus = c->wstatus;
    child_free(c);
}

// ---------------------------------------------------------------------------
// Lines in and out

// "'prog' closed its output (exited with status 1); its stderr ends: ..." into err.
static rg_status fail_gone(rg_child *c, const char *what, rg_error *err) {
    char how[128] = "still running";
    int ws;
    if (rg_child_wait(c, 500, &ws)) rg_proc_describe_status(ws, how, sizeof how);
    const char *t = c->tail;
    size_t n = c->tail_len;
    while (n && (t[n - 1] == '\n' || t[n - 1] == '\r')) n--;
    size_t from = n > 400 ? n - 400 : 0;
    char tail[401];
    for (size_t i = from; i < n; i++) tail[i - from] = t[i] == '\n' || t[i] == '\r' ? ' ' : t[i];
    tail[n - from] = 0;
    if (n) return rg_fail(err, RG_ERR_IO, "'%s' %s (%s); its stderr ends: %s%s", c->prog, what, how, from ? "..." : "", tail);
    return rg_fail(err, RG_ERR_IO, "'%s' %s (%s)", c->prog, what, how);
}

rg_status rg_child_write(rg_child *c, const char *data, size_t n, int timeout_ms, rg_error *err) {
    int64_t deadline = deadline_after(timeout_ms);
    size_t done = 0;
    while (done < n) {
        if (c->in_w < 0) return fail_gone(c, "closed its input", err);
        ssize_t w = rg_proc_write_nosigpipe(c->in_w, data + done, n - done);
        if (w > 0) {
            done += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EPIPE) {
            rg_proc_close_fd(&c->in_w);
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return rg_fail(err, RG_ERR_IO, "'%s': writing its input: %s", c->prog, strerror(errno));
        int left = remaining_ms(deadline);
        if (left == 0)
            return rg_fail(err, RG_ERR_IO, "'%s' took no input for %d ms (%zu of %zu bytes written)", c->prog, timeout_ms,
                           done, n);
        bool writable;
        pump(c, left, &writable);
    }
    return RG_OK;
}

// The line at buf[start..nl) handed out (NUL-terminated, "\r" dropped); start moves past it.
static void take_line(rg_child *c, size_t nl, char **line, size_t *len) {
    size_t n = nl - c->start;
    if (n && c->buf[c->start + n - 1] == '\r') n--;
    c->buf[c->start + n] = 0;
    *line = c->buf + c->start;
    if (len) *len = n;
    c->start = nl < c->len ? nl + 1 : nl;
}

rg_status rg_child_read_line(rg_child *c, char **line, size_t *len, size_t max_len, int timeout_ms, rg_error *err) {
    int64_t deadline = deadline_after(timeout_ms);
    *line = NULL;
    if (len) *len = 0;
    for (;;) {
        char *from = c->buf + c->start;
        char *nl = c->len > c->start ? memchr(from, '\n', c->len - c->start) : NULL;
        if (c->skipping) {
            c->start = nl ? (size_t)(nl - c->buf) + 1 : c->len;
            c->skipping = !nl;
            if (nl) continue;
        } else if (nl && (size_t)(nl - from) > max_len) {
            c->start = (size_t)(nl - c->buf) + 1;
            return rg_fail(err, RG_ERR_FORMAT, "'%s' wrote a line of %zu bytes (the limit is %zu)", c->prog,
                           (size_t)(nl - from), max_len);
        } else if (nl) {
            take_line(c, (size_t)(nl - c->buf), line, len);
            return RG_OK;
        } else if (c->len - c->start > max_len) {
            c->start = c->len;
            c->skipping = true;
            return rg_fail(err, RG_ERR_FORMAT, "'%s' wrote a line of more than %zu bytes (the limit)", c->prog, max_len);
        }
        if (c->eof && c->len > c->start) {  // a last line without "\n"
            take_line(c, c->len, line, len);
            return RG_OK;
        }
        if (c->eof) return fail_gone(c, "closed its output", err);
        int left = remaining_ms(deadline);
        if (left == 0) return rg_fail(err, RG_ERR_IO, "'%s' wrote no line within %d ms", c->prog, timeout_ms);
        pump(c, left, NULL);
    }
}

bool rg_child_eof(const rg_child *c) { return c->eof; }
pid_t rg_child_pid(const rg_child *c) { return c->pid; }
const char *rg_child_stderr_tail(const rg_child *c) { return c->tail; }
