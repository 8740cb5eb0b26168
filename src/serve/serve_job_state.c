// serve_job_state.c - a fine-tuning job's object in OpenAI's shape and its files: job.json (rewritten atomically
// at every change, read back at a restart) and events.jsonl (appended). See serve_jobs.h.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/file.h"
#include "base/json.h"
#include "serve/serve_jobs.h"

bool ft_job_is_final(const ft_job *j) {
    return !strcmp(j->status, "succeeded") || !strcmp(j->status, "failed") || !strcmp(j->status, "cancelled");
}

void ft_job_free(ft_job *j) {
    if (!j) return;
    for (int i = 0; i < j->n_sets; i++) free(j->sets[i]);
    free(j);
}

void ft_job_dir(const serve_ft *f, const ft_job *j, const char *sub, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s%s%s", f->jobs_dir, j->id, sub ? "/" : "", sub ? sub : "");
}

void ft_job_json(const serve_ft *f, const ft_job *j, rg_jw *w) {
    char out_dir[4300];
    ft_job_dir(f, j, "out", out_dir, sizeof out_dir);
    rg_jw_obj(w);
    rg_jw_kstr(w, "id", j->id);
    rg_jw_kstr(w, "object", "fine_tuning.job");
    rg_jw_kstr(w, "model", j->model);
    rg_jw_ki64(w, "created_at", j->created_at);
    rg_jw_key(w, "finished_at");
    if (j->finished_at) rg_jw_i64(w, j->finished_at);
    else rg_jw_null(w);
    rg_jw_kstr(w, "fine_tuned_model", j->fine_tuned_model[0] ? j->fine_tuned_model : NULL);
    rg_jw_kstr(w, "organization_id", "retrograd");
    rg_jw_kstr(w, "status", j->status);
    rg_jw_ki64(w, "trained_tokens", j->trained_tokens);
    rg_jw_kstr(w, "training_file", j->training_file);
    rg_jw_kstr(w, "validation_file", j->validation_file[0] ? j->validation_file : NULL);
    rg_jw_key(w, "hyperparameters");
    rg_jw_obj(w);
    rg_jw_key(w, "n_epochs");
    rg_jw_raw(w, j->n_epochs, strlen(j->n_epochs));
    rg_jw_key(w, "batch_size");
    rg_jw_raw(w, j->batch_size, strlen(j->batch_size));
    rg_jw_key(w, "learning_rate_multiplier");
    rg_jw_raw(w, j->lr_mult, strlen(j->lr_mult));
    rg_jw_obj_end(w);
    rg_jw_key(w, "method");
    rg_jw_obj(w);
    rg_jw_kstr(w, "type", "supervised");
    rg_jw_obj_end(w);
    rg_jw_ki64(w, "seed", j->seed);
    rg_jw_key(w, "result_files");
    rg_jw_arr(w);
    if (j->result_path[0]) rg_jw_str(w, j->result_path);
    rg_jw_arr_end(w);
    rg_jw_key(w, "error");
    if (j->error_msg[0]) {
        rg_jw_obj(w);
        rg_jw_kstr(w, "code", j->error_code);
        rg_jw_kstr(w, "message", j->error_msg);
        rg_jw_kstr(w, "param", j->error_param[0] ? j->error_param : NULL);
        rg_jw_obj_end(w);
    } else {
        rg_jw_null(w);
    }
    rg_jw_kstr(w, "user_provided_suffix", j->suffix[0] ? j->suffix : NULL);
    rg_jw_key(w, "retrograd");  // our own: what train was told and where its run is
    rg_jw_obj(w);
    rg_jw_kstr(w, "method", j->method);
    rg_jw_kstr(w, "suffix", j->suffix);
    rg_jw_kstr(w, "output_dir", out_dir);
    rg_jw_ki64(w, "created_us", j->created_us);
    rg_jw_key(w, "set");
    rg_jw_arr(w);
    for (int i = 0; i < j->n_sets; i++) rg_jw_str(w, j->sets[i]);
    rg_jw_arr_end(w);
    if (!strcmp(j->method, "full") && j->result_path[0])
        rg_jw_kstr(w, "note", "a full fine-tune is a model of its own: serve it with `retrograd serve -m` on the "
                              "file in result_files");
    rg_jw_obj_end(w);
    rg_jw_obj_end(w);
}

// job.json rewritten atomically (mu held).
void ft_job_save(const serve_ft *f, const ft_job *j) {
    char path[4300];
    ft_job_dir(f, j, "job.json", path, sizeof path);
    rg_jw w;
    rg_jw_init(&w);
    ft_job_json(f, j, &w);
    size_t n;
    const char *t = rg_jw_text(&w, &n);
    rg_error err;
    if (!t || rg_atomic_write_file(path, t, n, &err))
        fprintf(stderr, "retrograd serve: cannot save %s: %s\n", path, t ? err.msg : "out of memory");
    rg_jw_free(&w);
}

void ft_job_event(const serve_ft *f, const ft_job *j, const char *level, int64_t step, int64_t total, double loss,
                  const char *fmt, ...) {
    char msg[1200], id[48], path[4300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    serve_ft_new_id(id, sizeof id, "ftevent-");
    rg_jw w;
    rg_jw_init(&w);
    rg_jw_obj(&w);
    rg_jw_kstr(&w, "id", id);
    rg_jw_kstr(&w, "object", "fine_tuning.job.event");
    rg_jw_ki64(&w, "created_at", (int64_t)time(NULL));
    rg_jw_kstr(&w, "level", level);
    rg_jw_kstr(&w, "message", msg);
    rg_jw_kstr(&w, "type", step > 0 ? "metrics" : "message");
    rg_jw_key(&w, "data");
    if (step > 0) {
        rg_jw_obj(&w);
        rg_jw_ki64(&w, "step", step);
        if (total > 0) rg_jw_ki64(&w, "total_steps", total);
        rg_jw_key(&w, "train_loss");
        if (isfinite(loss)) rg_jw_f64(&w, loss);
        else rg_jw_null(&w);
        rg_jw_obj_end(&w);
    } else {
        rg_jw_obj(&w);
        rg_jw_obj_end(&w);
    }
    rg_jw_obj_end(&w);
    rg_jw_text_append(&w, "\n", 1);
    size_t n;
    const char *t = rg_jw_text(&w, &n);
    ft_job_dir(f, j, "events.jsonl", path, sizeof path);
    FILE *fp = fopen(path, "ab");
    if (fp && t) fwrite(t, 1, n, fp);
    if (fp) fclose(fp);
    rg_jw_free(&w);
}

static void copy_str(char *dst, size_t cap, const rg_json *v) {
    const char *s = rg_json_str(v, NULL);
    snprintf(dst, cap, "%s", s ? s : "");
}

// A JSON value ("auto", a number) as the text the job object writes.
static void value_text(char *dst, size_t cap, const rg_json *v) {
    if (rg_json_is(v, RG_JSON_NUMBER)) snprintf(dst, cap, "%s", rg_json_num_text(v));
    else snprintf(dst, cap, "\"auto\"");
}

// A job read back from its job.json; NULL when the file is missing or not a job.
ft_job *ft_job_load(const serve_ft *f, const char *name) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s/job.json", f->jobs_dir, name);
    size_t n;
    char *text = serve_ft_read(path, &n);
    if (!text) return NULL;
    rg_json_doc *doc = NULL;
    rg_error err;
    rg_json_limits jl = {.max_depth = 16, .max_bytes = n + 1};
    ft_job *j = NULL;
    if (!rg_json_parse(&doc, text, n, &jl, &err) && (j = calloc(1, sizeof *j))) {
        const rg_json *r = rg_json_root(doc), *h = rg_json_get(r, "hyperparameters"), *e = rg_json_get(r, "error");
        const rg_json *x = rg_json_get(r, "retrograd");
        copy_str(j->id, sizeof j->id, rg_json_get(r, "id"));
        copy_str(j->model, sizeof j->model, rg_json_get(r, "model"));
        copy_str(j->training_file, sizeof j->training_file, rg_json_get(r, "training_file"));
        copy_str(j->validation_file, sizeof j->validation_file, rg_json_get(r, "validation_file"));
        copy_str(j->status, sizeof j->status, rg_json_get(r, "status"));
        copy_str(j->fine_tuned_model, sizeof j->fine_tuned_model, rg_json_get(r, "fine_tuned_model"));
        copy_str(j->result_path, sizeof j->result_path, rg_json_at(rg_json_get(r, "result_files"), 0));
        rg_json_int64(rg_json_get(r, "created_at"), &j->created_at);
        rg_json_int64(rg_json_get(r, "finished_at"), &j->finished_at);
        rg_json_int64(rg_json_get(r, "trained_tokens"), &j->trained_tokens);
        rg_json_int64(rg_json_get(r, "seed"), &j->seed);
        value_text(j->n_epochs, sizeof j->n_epochs, rg_json_get(h, "n_epochs"));
        value_text(j->batch_size, sizeof j->batch_size, rg_json_get(h, "batch_size"));
        value_text(j->lr_mult, sizeof j->lr_mult, rg_json_get(h, "learning_rate_multiplier"));
        if (rg_json_is(e, RG_JSON_OBJECT)) {
            copy_str(j->error_code, sizeof j->error_code, rg_json_get(e, "code"));
            copy_str(j->error_msg, sizeof j->error_msg, rg_json_get(e, "message"));
            copy_str(j->error_param, sizeof j->error_param, rg_json_get(e, "param"));
        }
        copy_str(j->method, sizeof j->method, rg_json_get(x, "method"));
        copy_str(j->suffix, sizeof j->suffix, rg_json_get(x, "suffix"));
        if (!rg_json_int64(rg_json_get(x, "created_us"), &j->created_us)) j->created_us = j->created_at * 1000000;
        const rg_json *sets = rg_json_get(x, "set");
        for (size_t i = 0; i < rg_json_len(sets) && j->n_sets < FT_MAX_SETS; i++) {
            const char *s = rg_json_str(rg_json_at(sets, i), NULL);
            if (s && (j->sets[j->n_sets] = strdup(s))) j->n_sets++;
        }
        if (strcmp(j->id, name) != 0 || !j->status[0]) {
            ft_job_free(j);
            j = NULL;
        }
    }
    rg_json_free(doc);
    free(text);
    return j;
}
