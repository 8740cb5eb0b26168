// serve_ft.h - fine-tuning in OpenAI's shape inside `retrograd serve`: uploaded training files
// (serve_files.c; the multipart reader in serve_upload.c) and fine-tuning jobs, each run as a child
// `retrograd train` process (serve_jobs.c), so a crash or an out-of-memory in training never takes the
// server down. Internal to src/serve.
//
// On disk, under --files-dir DIR (made when missing):
//   DIR/file-HEX.jsonl, DIR/file-HEX.json      an uploaded file and its object (ids are the server's own:
//                                              only names of that form ever reach the file system)
//   DIR/jobs/ftjob-HEX/job.json                a job's object, rewritten at every change of status
//   DIR/jobs/ftjob-HEX/events.jsonl            its events, appended
//   DIR/jobs/ftjob-HEX/out/                    train's OUTDIR: train.log (its stderr), train.jsonl,
//                                              checkpoints/step-N/, adapter.gguf or model.gguf
#ifndef RG_SERVE_FT_H
#define RG_SERVE_FT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/json_write.h"
#include "serve/server.h"

typedef struct ft_job ft_job;

typedef struct serve_ft {
    rg_server *srv;
    char files_dir[2048];
    char jobs_dir[2100];
    char exe[4096];       // this executable (/proc/self/exe): the training child runs `EXE train ...`
    int64_t max_upload;   // bytes of one uploaded file
    int job_threads;      // the child's training.threads (0: all cores)
    // --- under mu
    pthread_mutex_t mu;
    pthread_cond_t cv;    // the worker's: a job queued, a cancellation, or quit
    ft_job **jobs;        // oldest first
    int n_jobs, cap_jobs;
    bool quit;
    pthread_t worker;
    bool worker_started;
} serve_ft;

// Reads back the jobs found in DIR/jobs (one found running is marked failed "the server
// restarted"; queued ones run again) and starts the worker thread that runs jobs one at a time.
rg_status serve_ft_create(serve_ft **out, rg_server *s, const char *files_dir, int64_t max_upload, int job_threads,
                          rg_error *err);
// Makes DIR and DIR/jobs when missing (at the first upload or job, so a server that never fine-tunes leaves
// nothing behind).
rg_status serve_ft_make_dirs(serve_ft *f, rg_error *err);
// Stops the worker: a running child is killed (its job marked failed "the server stopped").
void serve_ft_free(serve_ft *f);

// Answers /v1/files... and /v1/fine_tuning/... (path with its query string); false when path is not theirs.
bool serve_ft_route(rg_server *s, serve_ft *f, const char *method, const char *path, const char *body, size_t len,
                    rg_serve_response *out);

// serve_files.c
// A finished upload at tmp_path (bytes long): checked (purpose fine-tune, JSONL line by line as the training
// data reader reads it), stored under a new id, answered with its file object; tmp_path is removed on refusal.
void serve_files_add(serve_ft *f, const char *tmp_path, const char *filename, const char *purpose, int64_t bytes,
                     rg_serve_response *out);
// GET /files, GET|DELETE /files/{id}, GET /files/{id}/content (path without its /v1 prefix).
void serve_files_route(serve_ft *f, const char *method, const char *path, rg_serve_response *out);
// The stored file's content path when id is a file here (false otherwise).
bool serve_files_path(serve_ft *f, const char *id, char *path, size_t cap);

// Small shared helpers.
char *serve_ft_read(const char *path, size_t *len);     // the whole file, NUL-terminated; NULL when unreadable
void serve_ft_new_id(char *out, size_t cap, const char *prefix);  // prefix + 16 random hex digits
// The value of query argument key in path ("...?a=1&b=2"), copied into buf; false when absent.
bool serve_ft_query(const char *path, const char *key, char *buf, size_t cap);
void serve_ft_fail(serve_ft *f, rg_serve_response *out, int http, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif
