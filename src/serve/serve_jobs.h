// serve_jobs.h - a fine-tuning job as the files of the jobs API share it: serve_job_state.c (its object, its
// job.json and events.jsonl), serve_job_run.c (its training child and the worker thread that runs jobs one at a
// time) and serve_jobs.c (the routes, the request mapped onto train's settings). Internal to src/serve; every
// function taking a job expects the serve_ft's mu held unless it says otherwise.
#ifndef RG_SERVE_JOBS_H
#define RG_SERVE_JOBS_H

#include <stdarg.h>
#include <sys/types.h>

#include "base/json_write.h"
#include "serve/serve_ft.h"

#define FT_MAX_SETS 64

struct ft_job {
    char id[40];                 // ftjob-HEX
    char model[256];             // the base model's id
    char training_file[40], validation_file[40];
    char suffix[72];
    char method[8];              // "lora" or "full"
    char status[24];             // validating_files, queued, running, succeeded, failed, cancelled
    int64_t created_at, finished_at, trained_tokens, seed;
    int64_t created_us;          // microseconds, for the order of jobs made in the same second
    char n_epochs[40], batch_size[40], lr_mult[40];  // JSON values as the job reports them ("auto" quoted)
    char fine_tuned_model[600];
    char result_path[4300];
    char error_code[48], error_msg[1024], error_param[40];
    char *sets[FT_MAX_SETS];     // train's --set key=value, in order
    int n_sets;
    // --- the worker's while the job runs (under mu)
    pid_t pid;
    bool cancel;
};

bool ft_job_is_final(const ft_job *j);  // succeeded, failed or cancelled
void ft_job_free(ft_job *j);
// The job's folder (sub NULL) or a path in it.
void ft_job_dir(const serve_ft *f, const ft_job *j, const char *sub, char *buf, size_t cap);
// The job object in OpenAI's shape, with our "retrograd" member (method, suffix, output_dir, set).
void ft_job_json(const serve_ft *f, const ft_job *j, rg_jw *w);
void ft_job_save(const serve_ft *f, const ft_job *j);  // job.json, atomically
// One event appended to events.jsonl: a message, or (step > 0) a step's metrics.
void ft_job_event(const serve_ft *f, const ft_job *j, const char *level, int64_t step, int64_t total, double loss,
                  const char *fmt, ...) __attribute__((format(printf, 7, 8)));
// A job read back from DIR/jobs/NAME/job.json; NULL when missing or not a job (no lock needed).
ft_job *ft_job_load(const serve_ft *f, const char *name);
// Ends the job: status, the error (fmt non-NULL: failed with code), finished_at, the event, job.json.
void ft_job_finish(serve_ft *f, ft_job *j, const char *status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// The worker thread (arg: the serve_ft): serves the adapters of jobs that succeeded before, then runs the queued
// jobs one at a time until quit.
void *ft_jobs_worker(void *arg);

#endif
