// serve_job_run.c - running fine-tuning jobs (see serve_jobs.h): one at a time, oldest first, each as a child
// `retrograd train` in a process group of its own in the idle scheduling class (SCHED_IDLE, and nice +10), its log and records read as it goes.
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "serve/serve_jobs.h"
#include "serve/server_internal.h"

#ifndef SCHED_IDLE
#define SCHED_IDLE 5  // Linux's idle class (sched.h declares it only with _GNU_SOURCE)
#endif

#define KILL_GRACE_MS 3000  // after SIGTERM, this long before SIGKILL

// The last non-empty line of a file (at most cap - 1 bytes of it), or "".
static void last_line(const char *path, char *buf, size_t cap) {
    buf[0] = 0;
    size_t n;
    char *t = serve_ft_read(path, &n);
    if (!t) return;
    while (n && isspace((unsigned char)t[n - 1])) t[--n] = 0;
    const char *p = strrchr(t, '\n');
    p = p ? p + 1 : t;
    const char *cr = strrchr(p, '\r');  // a progress bar's last redraw
    if (cr) p = cr + 1;
    snprintf(buf, cap, "%s", p);
    free(t);
}

// The total of steps, from the last "step N/M" line train wrote to its log (0 when none yet).
static int64_t total_steps(const char *log_path) {
    char *t = serve_ft_read(log_path, NULL);
    if (!t) return 0;
    long long step, m, total = 0;
    for (const char *p = t; (p = strstr(p, "step ")); p += 5)
        if ((p == t || p[-1] == '\n') && sscanf(p, "step %lld/%lld", &step, &m) == 2) total = m;
    free(t);
    return total;
}

// New complete records of train.jsonl since *off: events, and the tokens trained.
static void read_records(serve_ft *f, ft_job *j, const char *jsonl, const char *log_path, long *off) {
    FILE *fp = fopen(jsonl, "rb");
    if (!fp) return;
    if (fseek(fp, *off, SEEK_SET) != 0) {
        fclose(fp);
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t total = -1;
    while ((n = getline(&line, &cap, fp)) > 0 && line[n - 1] == '\n') {
        *off += (long)n;
        rg_json_doc *doc;
        rg_error err;
        rg_json_limits jl = {.max_depth = 4, .max_bytes = (size_t)n + 1};
        if (rg_json_parse(&doc, line, (size_t)n, &jl, &err)) continue;
        const rg_json *r = rg_json_root(doc);
        int64_t iter = 0, tokens = 0;
        rg_json_int64(rg_json_get(r, "iter"), &iter);
        rg_json_int64(rg_json_get(r, "tokens"), &tokens);
        const rg_json *l = rg_json_get(r, "loss"), *el = rg_json_get(r, "eval_loss");
        const double loss = rg_json_is(l, RG_JSON_NUMBER) ? rg_json_num(l) : NAN;
        char valid[64] = "";  // OpenAI's wording where the step measured the validation file (or held-out split)
        if (rg_json_is(el, RG_JSON_NUMBER)) snprintf(valid, sizeof valid, ", validation loss=%.4f", rg_json_num(el));
        rg_json_free(doc);
        if (total < 0) total = total_steps(log_path);
        pthread_mutex_lock(&f->mu);
        j->trained_tokens += tokens;
        if (total > 0)
            ft_job_event(f, j, "info", iter, total, loss, "Step %lld/%lld: training loss=%.4f%s", (long long)iter,
                      (long long)total, loss, valid);
        else
            ft_job_event(f, j, "info", iter, total, loss, "Step %lld: training loss=%.4f%s", (long long)iter, loss, valid);
        pthread_mutex_unlock(&f->mu);
    }
    free(line);
    fclose(fp);
}

static void describe_status(int ws, char *buf, size_t cap) {
    if (WIFEXITED(ws)) snprintf(buf, cap, "exited with status %d", WEXITSTATUS(ws));
    else if (WIFSIGNALED(ws)) snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
    else snprintf(buf, cap, "ended with wait status %d", ws);
}

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// The child: its own process group at nice +10, stdout and stderr to the log, stdin /dev/null, no fd of ours.
static pid_t spawn_train(char *const *argv, const char *log_path, const char *exe, rg_error *err) {
    long max_fd = sysconf(_SC_OPEN_MAX);
    if (max_fd < 0 || max_fd > 65536) max_fd = 65536;
    const int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
        rg_fail(err, RG_ERR_IO, "cannot write %s: %s", log_path, strerror(errno));
        return -1;
    }
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {  // async-signal-safe calls only until exec
        setpgid(0, 0);
        // A server that dies (even by SIGKILL) takes its training child with it: the worker thread that forks
        // lives as long as the server.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        // Serving first: the idle scheduling class runs the training only on cores serving leaves idle (its
        // threads inherit it); where that class is refused, nice +10 still ranks it below.
        const struct sched_param idle = {0};
        if (sched_setscheduler(0, SCHED_IDLE, &idle) != 0) {
        }
        if (setpriority(PRIO_PROCESS, 0, 10) != 0) {
        }
        const int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        dup2(log_fd, 1);
        dup2(log_fd, 2);
        for (int fd = 3; fd < max_fd; fd++) close(fd);
        execv(exe, argv);
        static const char msg[] = "retrograd serve: cannot run the training program\n";
        if (write(2, msg, sizeof msg - 1) < 0) {
        }
        _exit(127);
    }
    close(log_fd);
    if (pid < 0) {
        rg_fail(err, RG_ERR_IO, "cannot start the training process: %s", strerror(errno));
        return -1;
    }
    setpgid(pid, pid);  // also here, so a kill of the group never misses it
    return pid;
}

void ft_job_finish(serve_ft *f, ft_job *j, const char *status, const char *code, const char *fmt, ...) {
    snprintf(j->status, sizeof j->status, "%s", status);
    j->finished_at = (int64_t)time(NULL);
    j->pid = 0;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->error_msg, sizeof j->error_msg, fmt, ap);
        va_end(ap);
        snprintf(j->error_code, sizeof j->error_code, "%s", code);
        ft_job_event(f, j, "error", 0, 0, NAN, "Fine-tuning job failed: %s", j->error_msg);
    } else if (!strcmp(status, "cancelled")) {
        ft_job_event(f, j, "info", 0, 0, NAN, "Fine-tuning job cancelled");
    } else {
        ft_job_event(f, j, "info", 0, 0, NAN, "The job has successfully completed");
    }
    ft_job_save(f, j);
}

// Serves a succeeded LoRA job's adapter as ft:BASE:SUFFIX:JOBID (mu not held: the server takes its own). Its
// adapter id, or -1 with msg.
static int job_serve_adapter(serve_ft *f, ft_job *j, char *msg, size_t cap) {
    rg_serve_error e = {0};
    const int id = server_adapter_add(f->srv, j->result_path, j->fine_tuned_model, &e);
    if (id < 0) snprintf(msg, cap, "the adapter %.400s cannot be served: %.500s", j->result_path, e.msg);
    return id;
}

// Test hook: RG_TEST_JOB_SERVE_DELAY_MS holds a job between its training's end and serving its adapter (a cancel
// in that window must end it cancelled, its adapter never left served).
static void test_serve_delay(void) {
    const char *v = getenv("RG_TEST_JOB_SERVE_DELAY_MS");
    const long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms > 0 && ms <= 60000) nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000L}, NULL);
}

// Runs j (queued) to its end. Called by the worker with mu held; returns with it held.
static void run_job(serve_ft *f, ft_job *j) {
    char out_dir[4300], log_path[4400], jsonl[4400], data[4200], valid[4200], model_path[4200];
    ft_job_dir(f, j, "out", out_dir, sizeof out_dir);
    snprintf(log_path, sizeof log_path, "%s/train.log", out_dir);
    snprintf(jsonl, sizeof jsonl, "%s/train.jsonl", out_dir);
    snprintf(model_path, sizeof model_path, "%s", f->srv->o.model_path);
    if (!serve_files_path(f, j->training_file, data, sizeof data))
        return ft_job_finish(f, j, "failed", "invalid_training_file", "the training file %s was deleted before the "
                                                                   "job ran", j->training_file);
    if (j->validation_file[0] && !serve_files_path(f, j->validation_file, valid, sizeof valid))
        return ft_job_finish(f, j, "failed", "invalid_validation_file", "the validation file %s was deleted before the "
                             "job ran", j->validation_file);
    mkdir(out_dir, 0755);
    const char *argv[18 + 2 * FT_MAX_SETS] = {f->exe, "train", "-m", model_path, "-d", data, "-o", out_dir,
                                           "--progress", "lines"};
    int argc = 10;
    // the validation file's loss every training.eval_every steps (its rows in place of a held-out split)
    if (j->validation_file[0]) argv[argc++] = "--eval-data", argv[argc++] = valid;
    if (f->srv->o.device == RG_DEVICE_CUDA) argv[argc++] = "--device", argv[argc++] = "cuda";  // the server's device
    for (int i = 0; i < j->n_sets; i++) argv[argc++] = "--set", argv[argc++] = j->sets[i];
    argv[argc] = NULL;
    rg_error err = {0};
    const pid_t pid = spawn_train((char *const *)argv, log_path, f->exe, &err);
    if (pid < 0) return ft_job_finish(f, j, "failed", "server_error", "%s", err.msg);
    j->pid = pid;
    snprintf(j->status, sizeof j->status, "running");
    ft_job_event(f, j, "info", 0, 0, NAN, "Fine-tuning job started (pid %d, idle scheduling class, log %s)", (int)pid, log_path);
    ft_job_save(f, j);
    long off = 0;
    int ws = 0;
    int64_t term_at = 0;
    for (;;) {
        const bool stop = j->cancel || f->quit;
        if (stop && !term_at) {
            kill(-pid, SIGTERM);
            term_at = now_ms();
        } else if (stop && now_ms() - term_at > KILL_GRACE_MS) {
            kill(-pid, SIGKILL);
        }
        pthread_mutex_unlock(&f->mu);
        read_records(f, j, jsonl, log_path, &off);
        const pid_t w = waitpid(pid, &ws, WNOHANG);
        pthread_mutex_lock(&f->mu);
        if (w == pid || (w < 0 && errno == ECHILD)) break;
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += 250 * 1000 * 1000;
        if (deadline.tv_nsec >= 1000000000) deadline.tv_sec++, deadline.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&f->cv, &f->mu, &deadline);
    }
    kill(-pid, SIGKILL);  // whatever of its group is left
    j->pid = 0;           // reaped: a cancel from here on marks j->cancel for the steps below
    pthread_mutex_unlock(&f->mu);
    read_records(f, j, jsonl, log_path, &off);
    pthread_mutex_lock(&f->mu);
    if (j->cancel) return ft_job_finish(f, j, "cancelled", NULL, NULL);
    if (f->quit) return ft_job_finish(f, j, "failed", "server_stopped", "the server stopped while the job ran");
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        char how[128], last[900];
        describe_status(ws, how, sizeof how);
        last_line(log_path, last, sizeof last);
        return ft_job_finish(f, j, "failed", "training_failed", "%s%s(the training process %s; log %s)", last,
                          last[0] ? " " : "", how, log_path);
    }
    const bool lora = strcmp(j->method, "full") != 0;
    snprintf(j->result_path, sizeof j->result_path, "%.4200s/%s", out_dir, lora ? "adapter.gguf" : "model.gguf");
    if (!lora) return ft_job_finish(f, j, "succeeded", NULL, NULL);
    snprintf(j->fine_tuned_model, sizeof j->fine_tuned_model, "ft:%s:%s:%s", j->model, j->suffix, j->id);
    ft_job_event(f, j, "info", 0, 0, NAN, "Training completed; serving the adapter %s", j->result_path);
    pthread_mutex_unlock(&f->mu);
    test_serve_delay();
    pthread_mutex_lock(&f->mu);
    const bool cancelled = j->cancel;
    pthread_mutex_unlock(&f->mu);
    char msg[1024];
    const int id = cancelled ? -1 : job_serve_adapter(f, j, msg, sizeof msg);
    pthread_mutex_lock(&f->mu);
    if (j->cancel) {  // cancelled while it finished: the client was told cancelled, so it is
        const bool served = id >= 0;
        j->fine_tuned_model[0] = 0;
        pthread_mutex_unlock(&f->mu);
        if (served) server_adapter_remove(f->srv, id);
        pthread_mutex_lock(&f->mu);
        return ft_job_finish(f, j, "cancelled", NULL, NULL);
    }
    if (id < 0) {
        j->fine_tuned_model[0] = 0;
        return ft_job_finish(f, j, "failed", "adapter_load_failed", "%s", msg);
    }
    ft_job_event(f, j, "info", 0, 0, NAN, "New fine-tuned model created: %s (served now)", j->fine_tuned_model);
    ft_job_finish(f, j, "succeeded", NULL, NULL);
}

void *ft_jobs_worker(void *arg) {
    serve_ft *f = arg;
    if (rg_server_wait_ready(f->srv) == 1) {  // the adapters of jobs that succeeded before a restart, served again
        pthread_mutex_lock(&f->mu);
        for (int i = 0; i < f->n_jobs && !f->quit; i++) {
            ft_job *j = f->jobs[i];
            if (strcmp(j->status, "succeeded") != 0 || !j->fine_tuned_model[0]) continue;
            pthread_mutex_unlock(&f->mu);
            char msg[1024];
            if (job_serve_adapter(f, j, msg, sizeof msg) < 0) fprintf(stderr, "retrograd serve: %s: %s\n", j->id, msg);
            pthread_mutex_lock(&f->mu);
        }
    } else {
        pthread_mutex_lock(&f->mu);
    }
    while (!f->quit) {
        ft_job *next = NULL;
        for (int i = 0; i < f->n_jobs && !next; i++)
            if (!strcmp(f->jobs[i]->status, "queued")) next = f->jobs[i];
        if (!next) {
            pthread_cond_wait(&f->cv, &f->mu);
            continue;
        }
        if (rg_server_state(f->srv) != 1) {
            ft_job_finish(f, next, "failed", "server_error", "the served model failed to load");
            continue;
        }
        run_job(f, next);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}
