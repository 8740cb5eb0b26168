// proc.c - spawning a program without a shell, and running it to completion under limits.
// (The long-lived child of proc.h is in proc_child.c; what both use is in proc_spawn.h.)
#define _GNU_SOURCE
#include "agent/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/proc_spawn.h"
#include "base/error.h"

extern char **environ;

int64_t rg_proc_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rg_proc_describe_status(int wstatus, char *buf, size_t n) {
    if (WIFEXITED(wstatus)) snprintf(buf, n, "exited with status %d", WEXITSTATUS(wstatus));
    else if (WIFSIGNALED(wstatus))
        snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
    else snprintf(buf, n, "ended with wait status 0x%x", (unsigned)wstatus);
}

// ---------------------------------------------------------------------------
// Spawning

ssize_t rg_proc_write_nosigpipe(int fd, const void *buf, size_t n) {
    // Blocking SIGPIPE in this thread turns a write to a closed pipe into EPIPE; a SIGPIPE that
    // became pending only because of this write is then consumed, so none is ever delivered.
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pending);
    bool was_pending = sigismember(&pending, SIGPIPE);
    ssize_t w = write(fd, buf, n);
    int e = errno;
    if (w < 0 && e == EPIPE && !was_pending) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return w;
}

static rg_status check_spawn_args(const char *const *argv, const char *cwd, rg_error *err) {
    if (!argv || !argv[0] || !argv[0][0]) return rg_fail(err, RG_ERR_ARG, "run: no program given (argv is empty)");
    if (cwd) {
        struct stat st;
        if (stat(cwd, &st) != 0)
            return rg_fail(err, RG_ERR_NOT_FOUND, "cannot run '%s': working directory '%s': %s", argv[0], cwd,
                           strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return rg_fail(err, RG_ERR_ARG, "cannot run '%s': working directory '%s' is not a directory", argv[0], cwd);
    }
    return RG_OK;
}

static rg_status spawn_error(int e, const char *prog, rg_error *err) {
    if (e == ENOENT && !strchr(prog, '/'))
        return rg_fail(err, RG_ERR_NOT_FOUND, "cannot run '%s': no such program in PATH", prog);
    if (e == ENOENT) return rg_fail(err, RG_ERR_NOT_FOUND, "cannot run '%s': no such file", prog);
    return rg_fail(err, e == ENOMEM ? RG_ERR_NOMEM : RG_ERR_IO, "cannot run '%s': %s", prog, strerror(e));
}

static int set_file_actions(posix_spawn_file_actions_t *fa, const char *cwd, int fd_in, int fd_out, int fd_err) {
    int rc = 0;
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 29)
    if (cwd) rc = posix_spawn_file_actions_addchdir_np(fa, cwd);
#else
    if (cwd) return ENOSYS;
#endif
    if (!rc) rc = posix_spawn_file_actions_adddup2(fa, fd_in, 0);
    if (!rc) rc = posix_spawn_file_actions_adddup2(fa, fd_out, 1);
    if (!rc) rc = posix_spawn_file_actions_adddup2(fa, fd_err, 2);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
    // fds another part of this process opened without O_CLOEXEC must not reach the child
    if (!rc) rc = posix_spawn_file_actions_addclosefrom_np(fa, 3);
#endif
    return rc;
}

static int set_attributes(posix_spawnattr_t *attr) {
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    int rc = posix_spawnattr_setflags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (!rc) rc = posix_spawnattr_setpgroup(attr, 0);  // a group of its own: a limit stops all of it
    if (!rc) rc = posix_spawnattr_setsigmask(attr, &none);
    if (!rc) rc = posix_spawnattr_setsigdefault(attr, &all);
    return rc;
}

rg_status rg_proc_spawn(const char *const *argv, const char *cwd, const char *const *env, int fd_in, int fd_out,
                        int fd_err, pid_t *pid, rg_error *err) {
    rg_status st = check_spawn_args(argv, cwd, err);
    if (st) return st;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    if (posix_spawn_file_actions_init(&fa)) return rg_fail(err, RG_ERR_NOMEM, "cannot run '%s': out of memory", argv[0]);
    if (posix_spawnattr_init(&attr)) {
        posix_spawn_file_actions_destroy(&fa);
        return rg_fail(err, RG_ERR_NOMEM, "cannot run '%s': out of memory", argv[0]);
    }
    int rc = set_file_actions(&fa, cwd, fd_in, fd_out, fd_err);
    if (!rc) rc = set_attributes(&attr);
    if (!rc)
        rc = posix_spawnp(pid, argv[0], &fa, &attr, (char *const *)argv, (char *const *)(env ? env : (const char *const *)environ));
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    return rc ? spawn_error(rc, argv[0], err) : RG_OK;
}

void rg_proc_close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

// ---------------------------------------------------------------------------
// rg_proc_run: one command to its end

// What came on one pipe. max_output + 1 bytes are reserved up front: pages the output never
// reaches are never touched, and the result is shrunk to its size at the end.
typedef struct capture {
    char *p;
    size_t len;
} capture;

typedef struct run_state {
    const rg_proc_opts *o;
    pid_t pid;
    int in_w, out_r, err_r;   // our ends; -1 once closed
    size_t in_done;           // stdin bytes written
    capture out, err;
    size_t max_output;
    int grace_ms;             // SIGTERM to SIGKILL
    bool exited;              // the child is a zombie (not reaped yet)
    bool stopping, killed;    // SIGTERM sent (a limit), SIGKILL sent
    int64_t stop_at, exit_at;
} run_state;

// Sends sig to the child's whole group (the child itself is still unreaped, so the id is ours).
static void signal_group(pid_t pid, int sig) {
    if (kill(-pid, sig) != 0) kill(pid, sig);
}

static void stop_child(run_state *s, int64_t now) {
    if (s->stopping || s->exited) return;
    s->stopping = true;
    s->stop_at = now;
    signal_group(s->pid, SIGTERM);
}

static bool child_exited(pid_t pid) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    // WNOWAIT leaves it a zombie: its pid (and group id) cannot be reused until we reap it.
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) return errno == ECHILD;
    return si.si_pid == pid;
}

// Reads what one pipe has; keeps bytes up to the shared limit, drops (and stops the child at) the rest.
static void drain(run_state *s, int *fd, capture *b, rg_proc_result *res, int64_t now) {
    char tmp[65536];
    ssize_t n = read(*fd, tmp, sizeof tmp);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
        rg_proc_close_fd(fd);
        return;
    }
    size_t room = s->max_output - (s->out.len + s->err.len);
    size_t keep = (size_t)n < room ? (size_t)n : room;
    memcpy(b->p + b->len, tmp, keep);
    b->len += keep;
    b->p[b->len] = 0;
    if ((size_t)n > keep) {
        res->output_truncated = true;
        stop_child(s, now);
    }
}

static void feed_stdin(run_state *s) {
    size_t left = s->o->stdin_len - s->in_done;
    if (left) {
        ssize_t w = rg_proc_write_nosigpipe(s->in_w, s->o->stdin_data + s->in_done, left > 65536 ? 65536 : left);
        if (w > 0) s->in_done += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EINTR) left = 0;  // EPIPE: it does not read stdin
    }
    if (!left || s->in_done == s->o->stdin_len) rg_proc_close_fd(&s->in_w);
}

// How long poll may wait: until the next deadline, and briefly while the child's exit is
// awaited (waitid is looked at between polls).
static int poll_wait_ms(const run_state *s, int64_t now, int64_t start, int backoff) {
    int64_t wait = 50;
    if (s->out_r < 0 && s->err_r < 0) wait = backoff;
    if (s->o->timeout_ms > 0 && !s->stopping) {
        int64_t left = start + s->o->timeout_ms - now;
        if (left < wait) wait = left;
    }
    if (s->stopping && !s->killed) {
        int64_t left = s->stop_at + s->grace_ms - now;
        if (left < wait) wait = left;
    }
    return wait < 0 ? 0 : (int)wait;
}

// One turn of the loop; false when the command is over (exited and its output read).
static bool run_step(run_state *s, rg_proc_result *res, int64_t start, int *backoff) {
    int64_t now = rg_proc_now_ms();
    if (!s->exited && child_exited(s->pid)) {
        s->exited = true;
        s->exit_at = now;
        signal_group(s->pid, SIGKILL);  // what it left in the background would hold the pipes open
    }
    if (s->exited && ((s->out_r < 0 && s->err_r < 0) || now - s->exit_at > 1000)) return false;
    if (!s->exited && s->o->timeout_ms > 0 && now - start >= s->o->timeout_ms && !s->stopping) {
        res->timed_out = true;
        stop_child(s, now);
    }
    if (s->stopping && !s->killed && !s->exited && now - s->stop_at >= s->grace_ms) {
        s->killed = true;
        signal_group(s->pid, SIGKILL);
    }
    struct pollfd p[3] = {{s->out_r, POLLIN, 0}, {s->err_r, POLLIN, 0}, {s->in_w, POLLOUT, 0}};
    int n = poll(p, 3, poll_wait_ms(s, now, start, *backoff));
    if (n <= 0) {
        *backoff = *backoff < 32 ? *backoff * 2 : 50;
        return true;
    }
    now = rg_proc_now_ms();
    if (p[0].revents) drain(s, &s->out_r, &s->out, res, now);
    if (p[1].revents) drain(s, &s->err_r, &s->err, res, now);
    if (p[2].revents & (POLLERR | POLLHUP)) rg_proc_close_fd(&s->in_w);
    else if (p[2].revents) feed_stdin(s);
    return true;
}

static rg_status open_pipe(int fds[2], const char *prog, rg_error *err) {
    if (pipe2(fds, O_CLOEXEC) == 0) return RG_OK;
    fds[0] = fds[1] = -1;
    return rg_fail(err, RG_ERR_IO, "cannot run '%s': pipe: %s", prog, strerror(errno));
}

// The child's stdin, stdout and stderr ends (child[]) and ours (s->in_w, out_r, err_r).
static rg_status open_run_pipes(run_state *s, int child[3], rg_error *err) {
    const char *prog = s->o->argv[0];
    int p_in[2] = {-1, -1}, p_out[2] = {-1, -1}, p_err[2] = {-1, -1};
    rg_status st = open_pipe(p_out, prog, err);
    if (!st && !s->o->merge_stderr) st = open_pipe(p_err, prog, err);
    if (!st && s->o->stdin_data) st = open_pipe(p_in, prog, err);
    if (!st && !s->o->stdin_data) {
        p_in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (p_in[0] < 0) st = rg_fail(err, RG_ERR_IO, "cannot run '%s': /dev/null: %s", prog, strerror(errno));
    }
    child[0] = p_in[0], child[1] = p_out[1], child[2] = s->o->merge_stderr ? p_out[1] : p_err[1];
    s->in_w = p_in[1], s->out_r = p_out[0], s->err_r = p_err[0];
    if (s->in_w >= 0) fcntl(s->in_w, F_SETFL, fcntl(s->in_w, F_GETFL) | O_NONBLOCK);
    if (st) {
        rg_proc_close_fd(&p_in[0]);
        rg_proc_close_fd(&p_out[1]);
        rg_proc_close_fd(&p_err[1]);
    }
    return st;
}

static void close_run_fds(run_state *s) {
    rg_proc_close_fd(&s->in_w);
    rg_proc_close_fd(&s->out_r);
    rg_proc_close_fd(&s->err_r);
}

static void fill_status(rg_proc_result *res, int wstatus) {
    res->exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    res->term_signal = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
}

static char *shrink(char *p, size_t len) {
    char *q = realloc(p, len + 1);
    return q ? q : p;
}

rg_status rg_proc_run(const rg_proc_opts *o, rg_proc_result *res, rg_error *err) {
    memset(res, 0, sizeof *res);
    if (!o) return rg_fail(err, RG_ERR_ARG, "run: no options");
    run_state s = {.o = o, .in_w = -1, .out_r = -1, .err_r = -1};
    s.max_output = o->max_output ? o->max_output : (size_t)1 << 20;
    s.grace_ms = o->kill_grace_ms > 0 ? o->kill_grace_ms : 500;
    rg_status st = check_spawn_args(o->argv, o->cwd, err);
    if (st) return st;
    s.out.p = s.max_output < SIZE_MAX ? malloc(s.max_output + 1) : NULL;
    s.err.p = s.max_output < SIZE_MAX ? malloc(o->merge_stderr ? 1 : s.max_output + 1) : NULL;
    if (!s.out.p || !s.err.p) st = rg_fail(err, RG_ERR_NOMEM, "cannot run '%s': no memory for %zu bytes of output",
                                           o->argv[0], s.max_output);
    int child[3] = {-1, -1, -1};
    if (!st) st = open_run_pipes(&s, child, err);
    int64_t start = rg_proc_now_ms();
    if (!st) st = rg_proc_spawn(o->argv, o->cwd, o->env, child[0], child[1], child[2], &s.pid, err);
    for (int i = 0; i < 3; i++)
        if (i < 2 || child[2] != child[1]) rg_proc_close_fd(&child[i]);
    if (st) {
        close_run_fds(&s);
        free(s.out.p);
        free(s.err.p);
        return st;
    }
    s.out.p[0] = s.err.p[0] = 0;
    int backoff = 1;
    while (run_step(&s, res, start, &backoff)) {}
    int wstatus = 0;
    while (waitpid(s.pid, &wstatus, 0) < 0 && errno == EINTR) {}
    close_run_fds(&s);
    fill_status(res, wstatus);
    res->elapsed_ms = rg_proc_now_ms() - start;
    res->out = shrink(s.out.p, s.out.len), res->out_len = s.out.len;
    res->err = shrink(s.err.p, s.err.len), res->err_len = s.err.len;
    return RG_OK;
}

void rg_proc_result_free(rg_proc_result *res) {
    if (!res) return;
    free(res->out);
    free(res->err);
    memset(res, 0, sizeof *res);
}
