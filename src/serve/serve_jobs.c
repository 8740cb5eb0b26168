// serve_jobs.c - OpenAI's fine-tuning jobs (see serve_ft.h): POST /v1/fine_tuning/jobs, GET /v1/fine_tuning/jobs
// (after, limit), GET /v1/fine_tuning/jobs/{id}, POST .../{id}/cancel, GET .../{id}/events, GET .../{id}/checkpoints,
// and the jobs' life (read back at start, the worker started and stopped). A job's object and files are in
// serve_job_state.c, its training child in serve_job_run.c (serve_jobs.h).
//
// A job's request is mapped onto `retrograd train` settings (--set) once, when it is created, and kept with it:
//   method.type (or retrograd.method)  "supervised" and "lora": training.method=lora; "full": training.method=full
//   hyperparameters.n_epochs           training.epochs          ("auto": train's default, 1)
//   hyperparameters.batch_size         training.batch_size      ("auto": 1)
//   hyperparameters.learning_rate_multiplier   training.lr = multiplier x train's default (2e-4 lora, 5e-5 full)
//   seed                               training.seed            (absent: one is drawn and reported)
//   retrograd.{steps, rank, alpha, ctx, lr, save_every, eval_split, eval_every}   training.steps, lora.rank,
//                                      lora.alpha, training.ctx, training.lr, training.save_every,
//                                      training.eval_split, training.eval_every
//   validation_file                    train --eval-data FILE: its loss every training.eval_every steps and at the
//                                      end ("validation loss=" in the step's event, valid_loss in checkpoints),
//                                      in place of training.eval_split's held-out samples
//   retrograd.set {"key": value}       any other train key, as --set key=value (train checks it)
//   the server's --job-threads N       training.threads=N, last, so a request cannot change it
// Jobs run one at a time, oldest first, each as a child process `EXE train -m MODEL -d FILE -o OUTDIR --progress
// lines [--eval-data VALIDATION_FILE] [--device cuda] --set ...` (on the server's device) in a process group of its own, in the idle scheduling
// class (serving keeps the cores it needs first), its stdout and stderr in OUTDIR/train.log, killed if the server dies. The
// worker thread polls the child every 250 ms: each new record of OUTDIR/train.jsonl becomes an event
// "Step N/M: training loss=L[, validation loss=V]"; an exit status 0 makes the job succeeded and its adapter a model of the running
// server named ft:BASE:SUFFIX:JOBID (server_adapter_add); any other end (a crash, a kill, out of memory, a setting
// train refuses) makes it failed with train.log's last line. A cancel sends SIGTERM to the group and SIGKILL 3 s
// later; the checkpoints already written stay listed.
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "serve/serve_jobs.h"
#include "serve/server_internal.h"
#include "train/progress.h"

// ---------------------------------------------------------------------------------------------------------------
// Routes

// A job by id (mu held), or NULL.
static ft_job *find_job(serve_ft *f, const char *id) {
    for (int i = 0; i < f->n_jobs; i++)
        if (!strcmp(f->jobs[i]->id, id)) return f->jobs[i];
    return NULL;
}

static bool add_set(ft_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool add_set(ft_job *j, const char *fmt, ...) {
    if (j->n_sets == FT_MAX_SETS) return false;
    char buf[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return (j->sets[j->n_sets] = strdup(buf)) != NULL && ++j->n_sets;
}

// One hyperparameter: absent or "auto" (nothing set), or a number in [lo, hi] (integer when integral).
static bool hyper(const rg_json *h, const char *name, char *text, size_t cap, double lo, double hi,
                  bool integral, double *v, rg_serve_error *e) {
    const rg_json *x = rg_json_get(h, name);
    snprintf(text, cap, "\"auto\"");
    *v = NAN;
    if (!x || rg_json_is(x, RG_JSON_NULL)) return true;
    const char *s = rg_json_str(x, NULL);
    if (s && !strcmp(s, "auto")) return true;
    const double d = rg_json_is(x, RG_JSON_NUMBER) ? rg_json_num(x) : NAN;
    if (!(d >= lo && d <= hi) || (integral && d != floor(d)))
        return rg_serve_fail(e, 400, "hyperparameters", "hyperparameters.%s: expected \"auto\" or %s in [%g, %g]", name,
                             integral ? "an integer" : "a number", lo, hi);
    *v = d;
    snprintf(text, cap, "%s", rg_json_num_text(x));
    return true;
}

static bool suffix_ok(const char *s) {
    if (strlen(s) > 64) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_') return false;
    return true;
}

// A retrograd.set key: lower-case dotted name (train checks that it exists).
static bool key_ok(const char *k, size_t n) {
    if (!n || n > 100) return false;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)k[i]) && k[i] != '.' && k[i] != '_' && !isdigit((unsigned char)k[i])) return false;
    return true;
}

// The request read into j (which owns nothing of doc); false with e.
static bool parse_job(serve_ft *f, const rg_json *r, ft_job *j, rg_serve_error *e) {
    rg_server *s = f->srv;
    const char *model = rg_json_str(rg_json_get(r, "model"), NULL);
    if (!model) return rg_serve_fail(e, 400, "model", "'model' (a string) is required");
    if (strcmp(model, s->alias) != 0) {
        rg_serve_fail(e, 404, "model", "model '%s' cannot be fine-tuned here: this server fine-tunes its own model "
                                       "'%s'", model, s->alias);
        e->code = "model_not_found";
        return false;
    }
    snprintf(j->model, sizeof j->model, "%s", s->alias);
    const char *tf = rg_json_str(rg_json_get(r, "training_file"), NULL);
    char path[4200];
    if (!tf)
        return rg_serve_fail(e, 400, "training_file", "'training_file' (a file id from POST /v1/files) is required");
    if (!serve_files_path(f, tf, path, sizeof path)) {
        rg_serve_fail(e, 400, "training_file", "no file '%s' (upload it with POST /v1/files, purpose fine-tune)", tf);
        e->code = "invalid_training_file";
        return false;
    }
    snprintf(j->training_file, sizeof j->training_file, "%s", tf);
    const rg_json *vf = rg_json_get(r, "validation_file");
    if (vf && !rg_json_is(vf, RG_JSON_NULL)) {
        const char *v = rg_json_str(vf, NULL);
        if (!v || !serve_files_path(f, v, path, sizeof path)) {
            rg_serve_fail(e, 400, "validation_file", "no file '%s'", v ? v : "(not a string)");
            e->code = "invalid_validation_file";
            return false;
        }
        snprintf(j->validation_file, sizeof j->validation_file, "%s", v);
    }
    const rg_json *sx = rg_json_get(r, "suffix");
    if (sx && !rg_json_is(sx, RG_JSON_NULL)) {
        const char *sf = rg_json_str(sx, NULL);
        if (!sf || !suffix_ok(sf))
            return rg_serve_fail(e, 400, "suffix", "'suffix': at most 64 characters of [a-zA-Z0-9_-]");
        snprintf(j->suffix, sizeof j->suffix, "%s", sf);
    }
    const rg_json *sd = rg_json_get(r, "seed");
    if (sd && !rg_json_is(sd, RG_JSON_NULL)) {
        if (!rg_json_int64(sd, &j->seed) || j->seed < 0 || j->seed > 2147483647)
            return rg_serve_fail(e, 400, "seed", "'seed': an integer in [0, 2147483647]");
    } else {
        char id[40];
        serve_ft_new_id(id, sizeof id, "");
        j->seed = (int64_t)(strtoull(id, NULL, 16) & 0x7fffffff);
    }
    // method: OpenAI's {type: supervised, supervised: {hyperparameters}}, ours lora | full, or retrograd.method
    const rg_json *m = rg_json_get(r, "method"), *x = rg_json_get(r, "retrograd");
    const char *type = m ? rg_json_str(rg_json_get(m, "type"), NULL) : NULL;
    const char *xm = rg_json_str(rg_json_get(x, "method"), NULL);
    if (m && !type) return rg_serve_fail(e, 400, "method", "'method.type' is required with 'method'");
    if (type && strcmp(type, "supervised") && strcmp(type, "lora") && strcmp(type, "full"))
        return rg_serve_fail(e, 400, "method", "method '%s': this server runs supervised fine-tuning, as a LoRA "
                                               "('supervised' or 'lora') or of every weight ('full')", type);
    if (xm && strcmp(xm, "lora") && strcmp(xm, "full"))
        return rg_serve_fail(e, 400, "retrograd.method", "retrograd.method '%s': expected lora or full", xm);
    snprintf(j->method, sizeof j->method, "%s", xm ? xm : type && !strcmp(type, "full") ? "full" : "lora");
    const rg_json *h = rg_json_get(r, "hyperparameters");
    if (!h && type) h = rg_json_get(rg_json_get(m, type), "hyperparameters");
    if (h && !rg_json_is(h, RG_JSON_OBJECT))
        return rg_serve_fail(e, 400, "hyperparameters", "'hyperparameters' must be an object");
    double epochs, batch, mult;
    if (!hyper(h, "n_epochs", j->n_epochs, sizeof j->n_epochs, 1, 1000, true, &epochs, e) ||
        !hyper(h, "batch_size", j->batch_size, sizeof j->batch_size, 1, 256, true, &batch, e) ||
        !hyper(h, "learning_rate_multiplier", j->lr_mult, sizeof j->lr_mult, 1e-6, 100, false, &mult, e))
        return false;
    bool ok = add_set(j, "training.method=%s", j->method) && add_set(j, "training.seed=%lld", (long long)j->seed);
    if (ok && !isnan(epochs)) ok = add_set(j, "training.epochs=%.0f", epochs);
    if (ok && !isnan(batch)) ok = add_set(j, "training.batch_size=%.0f", batch);
    if (ok && !isnan(mult)) ok = add_set(j, "training.lr=%.9g", mult * (strcmp(j->method, "full") ? 2e-4 : 5e-5));
    static const struct {
        const char *name, *key;
    } ext[] = {{"steps", "training.steps"}, {"rank", "lora.rank"}, {"alpha", "lora.alpha"}, {"ctx", "training.ctx"},
               {"lr", "training.lr"}, {"save_every", "training.save_every"}, {"eval_split", "training.eval_split"},
               {"eval_every", "training.eval_every"}};
    for (size_t i = 0; ok && i < sizeof ext / sizeof ext[0]; i++) {
        const rg_json *v = rg_json_get(x, ext[i].name);
        if (!v) continue;
        if (!rg_json_is(v, RG_JSON_NUMBER))
            return rg_serve_fail(e, 400, "retrograd", "retrograd.%s: expected a number", ext[i].name);
        ok = add_set(j, "%s=%s", ext[i].key, rg_json_num_text(v));
    }
    const rg_json *set = rg_json_get(x, "set");
    if (set && !rg_json_is(set, RG_JSON_OBJECT))
        return rg_serve_fail(e, 400, "retrograd", "retrograd.set: expected an object of train keys and values");
    for (size_t i = 0; ok && i < rg_json_len(set); i++) {
        size_t kn, vn = 0;
        const char *k = rg_json_key_at(set, i, &kn);
        const rg_json *v = rg_json_value_at(set, i);
        const char *vs = rg_json_is(v, RG_JSON_NUMBER) ? rg_json_num_text(v) : rg_json_str(v, &vn);
        if (rg_json_is(v, RG_JSON_BOOL)) vs = rg_json_bool(v) ? "true" : "false";
        if (!key_ok(k, kn) || !vs || strchr(vs, '\n') || strlen(vs) > 400)
            return rg_serve_fail(e, 400, "retrograd", "retrograd.set: '%.*s' is not a train key with a one-line value",
                                 (int)(kn < 100 ? kn : 100), k);
        ok = add_set(j, "%.*s=%s", (int)kn, k, vs);
    }
    if (ok && f->job_threads > 0) ok = add_set(j, "training.threads=%d", f->job_threads);
    if (!ok) return rg_serve_fail(e, 400, "retrograd", "too many settings (at most %d)", FT_MAX_SETS);
    return true;
}

static void route_create(serve_ft *f, const char *body, size_t len, rg_serve_response *out) {
    rg_serve_error e = {0};
    rg_json_doc *doc;
    rg_error jerr;
    rg_json_limits jl = {.max_depth = 16, .max_bytes = len + 1};
    if (rg_json_parse(&doc, body, len, &jl, &jerr))
        return serve_ft_fail(f, out, 400, "", NULL, "the request body is not valid JSON: %s", jerr.msg);
    ft_job *j = calloc(1, sizeof *j);
    if (!j) {
        rg_json_free(doc);
        return serve_ft_fail(f, out, 500, "", NULL, "out of memory");
    }
    const rg_json *root = rg_json_root(doc);
    const bool ok = rg_json_is(root, RG_JSON_OBJECT) ? parse_job(f, root, j, &e)
                                                     : rg_serve_fail(&e, 400, "", "the body must be a JSON object");
    rg_json_free(doc);
    if (!ok) {
        ft_job_free(j);
        return server_fail_response(f->srv, out, &e);
    }
    serve_ft_new_id(j->id, sizeof j->id, "ftjob-");
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    j->created_at = (int64_t)now.tv_sec;
    j->created_us = (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
    snprintf(j->status, sizeof j->status, "validating_files");
    char dir[4300];
    ft_job_dir(f, j, NULL, dir, sizeof dir);
    rg_error derr;
    if (serve_ft_make_dirs(f, &derr)) {
        ft_job_free(j);
        return serve_ft_fail(f, out, 500, "", NULL, "%s", derr.msg);
    }
    if (mkdir(dir, 0755) != 0) {
        ft_job_free(j);
        return serve_ft_fail(f, out, 500, "", NULL, "cannot make %s: %s", dir, strerror(errno));
    }
    pthread_mutex_lock(&f->mu);
    if (f->n_jobs == f->cap_jobs) {
        const int cap = f->cap_jobs ? 2 * f->cap_jobs : 16;
        ft_job **nj = realloc(f->jobs, sizeof *nj * (size_t)cap);
        if (!nj) {
            pthread_mutex_unlock(&f->mu);
            ft_job_free(j);
            return serve_ft_fail(f, out, 500, "", NULL, "out of memory");
        }
        f->jobs = nj, f->cap_jobs = cap;
    }
    f->jobs[f->n_jobs++] = j;
    ft_job_event(f, j, "info", 0, 0, NAN, "Validating training file: %s%s%s", j->training_file,
              j->validation_file[0] ? " and validation file: " : "", j->validation_file);
    ft_job_event(f, j, "info", 0, 0, NAN, "Created fine-tuning job: %s (train --set %d settings, method %s)", j->id,
              j->n_sets, j->method);
    snprintf(j->status, sizeof j->status, "queued");  // the files were checked line by line when uploaded
    ft_job_event(f, j, "info", 0, 0, NAN, "Files validated, moving job to queued state");
    ft_job_save(f, j);
    pthread_cond_broadcast(&f->cv);
    rg_jw w;
    rg_jw_init(&w);
    ft_job_json(f, j, &w);
    pthread_mutex_unlock(&f->mu);
    server_json_response(200, &w, out);
}

// limit (1..100, default 20) and after of a list request.
static int list_limit(const char *path) {
    char v[32];
    if (!serve_ft_query(path, "limit", v, sizeof v)) return 20;
    const long n = strtol(v, NULL, 10);
    return n < 1 ? 1 : n > 100 ? 100 : (int)n;
}

static void route_list(serve_ft *f, const char *path, rg_serve_response *out) {
    char after[64] = "";
    serve_ft_query(path, "after", after, sizeof after);
    const int limit = list_limit(path);
    rg_jw w;
    server_list_open(&w);
    pthread_mutex_lock(&f->mu);
    int i = f->n_jobs - 1, n = 0;
    if (after[0]) {  // the jobs older than after
        while (i >= 0 && strcmp(f->jobs[i]->id, after) != 0) i--;
        i--;
    }
    for (; i >= 0 && n < limit; i--, n++) ft_job_json(f, f->jobs[i], &w);
    pthread_mutex_unlock(&f->mu);
    rg_jw_arr_end(&w);
    rg_jw_kbool(&w, "has_more", i >= 0);
    rg_jw_obj_end(&w);
    server_json_response(200, &w, out);
}

static void route_cancel(serve_ft *f, ft_job *j, rg_serve_response *out) {
    if (ft_job_is_final(j)) {
        pthread_mutex_unlock(&f->mu);
        return serve_ft_fail(f, out, 400, "fine_tuning_job_id", NULL, "job %s is already %s: only a queued or running "
                             "job can be cancelled", j->id, j->status);
    }
    if (!strcmp(j->status, "running")) {  // the worker's: it ends it (SIGKILL after the grace) and marks it cancelled
        j->cancel = true;
        if (j->pid > 0) kill(-j->pid, SIGTERM);  // (0: training has ended; the worker drops its adapter)
        snprintf(j->status, sizeof j->status, "cancelled");
        ft_job_save(f, j);
        pthread_cond_broadcast(&f->cv);
    } else {
        ft_job_finish(f, j, "cancelled", NULL, NULL);
    }
    rg_jw w;
    rg_jw_init(&w);
    ft_job_json(f, j, &w);
    pthread_mutex_unlock(&f->mu);
    server_json_response(200, &w, out);
}

// GET .../events: newest first, after an event id, limit.
static void route_events(serve_ft *f, ft_job *j, const char *path, rg_serve_response *out) {
    char p[4300], after[64] = "";
    ft_job_dir(f, j, "events.jsonl", p, sizeof p);
    pthread_mutex_unlock(&f->mu);
    serve_ft_query(path, "after", after, sizeof after);
    const int limit = list_limit(path);
    size_t n = 0;
    char *t = serve_ft_read(p, &n);
    // the lines' starts, oldest first
    size_t cap = 64, k = 0;
    size_t *starts = malloc(sizeof *starts * cap);
    for (size_t i = 0; t && starts && i < n; i = (size_t)(strchr(t + i, '\n') - t) + 1) {
        if (!strchr(t + i, '\n')) break;
        if (k == cap) {
            size_t *ns = realloc(starts, sizeof *ns * (cap *= 2));
            if (!ns) break;
            starts = ns;
        }
        starts[k++] = i;
    }
    rg_jw w;
    server_list_open(&w);
    long i = (long)k - 1;
    if (after[0]) {
        char key[96];
        snprintf(key, sizeof key, "\"id\":\"%s\"", after);
        for (; i >= 0; i--) {
            const char *line = t + starts[i], *m = strstr(line, key);
            if (m && m < line + strcspn(line, "\n")) break;
        }
        i--;
    }
    for (int m = 0; i >= 0 && m < limit; i--, m++) {
        const char *line = t + starts[i];
        rg_jw_raw(&w, line, strcspn(line, "\n"));
    }
    rg_jw_arr_end(&w);
    rg_jw_kbool(&w, "has_more", i >= 0);
    rg_jw_obj_end(&w);
    free(starts);
    free(t);
    server_json_response(200, &w, out);
}

// The loss and eval_loss of step in train.jsonl's series (rg_jsonl_read_losses), NAN where it has none.
static void step_metrics(const int64_t *iters, const double *losses, const double *evals, int64_t n, int64_t step,
                         double *loss, double *eval_loss) {
    *loss = *eval_loss = NAN;
    for (int64_t i = 0; i < n; i++)
        if (iters[i] == step) {
            *loss = losses[i], *eval_loss = evals[i];
            return;
        }
}

static int cmp_i64_desc(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// GET .../checkpoints: OUTDIR/checkpoints/step-N (train keeps the newest few), newest first.
static void route_checkpoints(serve_ft *f, ft_job *j, const char *path, rg_serve_response *out) {
    char dir[4400], jsonl[4400], base[700];
    ft_job_dir(f, j, "out/checkpoints", dir, sizeof dir);
    ft_job_dir(f, j, "out/train.jsonl", jsonl, sizeof jsonl);
    snprintf(base, sizeof base, "ft:%s:%s:%s", j->model, j->suffix, j->id);
    char id[40];
    snprintf(id, sizeof id, "%s", j->id);
    pthread_mutex_unlock(&f->mu);
    const int limit = list_limit(path);
    int64_t steps[256];
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d)) && n < 256;) {
        char *end;
        if (strncmp(de->d_name, "step-", 5) != 0) continue;
        const long long v = strtoll(de->d_name + 5, &end, 10);
        if (end != de->d_name + 5 && !*end && v > 0) steps[n++] = v;
    }
    if (d) closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_i64_desc);
    int64_t *iters;
    double *losses, *evals;
    const int64_t n_rec = rg_jsonl_read_losses(jsonl, &iters, &losses, &evals);
    rg_jw w;
    server_list_open(&w);
    for (int i = 0; i < n && i < limit; i++) {
        char p[4500], name[800], cid[96];
        snprintf(p, sizeof p, "%s/step-%lld", dir, (long long)steps[i]);
        snprintf(name, sizeof name, "%s:ckpt-step-%lld", base, (long long)steps[i]);
        snprintf(cid, sizeof cid, "ftckpt-%s-%lld", id + 6, (long long)steps[i]);
        struct stat sb;
        double loss, eval_loss;
        step_metrics(iters, losses, evals, n_rec, steps[i], &loss, &eval_loss);
        rg_jw_obj(&w);
        rg_jw_kstr(&w, "id", cid);
        rg_jw_kstr(&w, "object", "fine_tuning.job.checkpoint");
        rg_jw_ki64(&w, "created_at", stat(p, &sb) == 0 ? (int64_t)sb.st_mtime : 0);
        rg_jw_kstr(&w, "fine_tuned_model_checkpoint", name);
        rg_jw_kstr(&w, "fine_tuning_job_id", id);
        rg_jw_ki64(&w, "step_number", steps[i]);
        rg_jw_key(&w, "metrics");
        rg_jw_obj(&w);
        rg_jw_kf64(&w, "step", (double)steps[i]);
        if (isfinite(loss)) rg_jw_kf64(&w, "train_loss", loss);
        if (isfinite(eval_loss)) rg_jw_kf64(&w, "valid_loss", eval_loss);
        rg_jw_obj_end(&w);
        rg_jw_kstr(&w, "path", p);  // ours: train --resume takes this run's folder
        rg_jw_obj_end(&w);
    }
    rg_jw_arr_end(&w);
    rg_jw_kbool(&w, "has_more", n > limit);
    rg_jw_obj_end(&w);
    free(iters), free(losses), free(evals);
    server_json_response(200, &w, out);
}

static void route_jobs(serve_ft *f, const char *method, const char *path, const char *body, size_t len,
                       rg_serve_response *out) {
    const bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    const char *rest = strstr(path, "/fine_tuning/jobs") + strlen("/fine_tuning/jobs");
    if (*rest == 0 || *rest == '?') {
        if (post) return route_create(f, body, len, out);
        if (get) return route_list(f, path, out);
        return serve_ft_fail(f, out, 405, "", NULL, "%s %s: use GET (list) or POST (create)", method, path);
    }
    char id[64];
    const size_t n = strcspn(rest + 1, "/?");
    snprintf(id, sizeof id, "%.*s", (int)(n < sizeof id ? n : sizeof id - 1), rest + 1);
    const char *tail = rest + 1 + n;
    const size_t tn = strcspn(tail, "?");
    pthread_mutex_lock(&f->mu);
    ft_job *j = find_job(f, id);
    if (!j) {
        pthread_mutex_unlock(&f->mu);
        return serve_ft_fail(f, out, 404, "fine_tuning_job_id", "fine_tuning_job_not_found", "no fine-tuning job '%s'",
                             id);
    }
    if (get && tn == 0) {
        rg_jw w;
        rg_jw_init(&w);
        ft_job_json(f, j, &w);
        pthread_mutex_unlock(&f->mu);
        return server_json_response(200, &w, out);
    }
    if (post && tn == 7 && !strncmp(tail, "/cancel", 7)) return route_cancel(f, j, out);
    if (get && tn == 7 && !strncmp(tail, "/events", 7)) return route_events(f, j, path, out);
    if (get && tn == 12 && !strncmp(tail, "/checkpoints", 12)) return route_checkpoints(f, j, path, out);
    pthread_mutex_unlock(&f->mu);
    serve_ft_fail(f, out, 404, "", NULL, "no route %s %s (a job has GET, POST .../cancel, GET .../events, "
                                         "GET .../checkpoints)", method, path);
}

bool serve_ft_route(rg_server *s, serve_ft *f, const char *method, const char *path, const char *body, size_t len,
                    rg_serve_response *out) {
    const char *p = strncmp(path, "/v1/", 4) == 0 ? path + 3 : path;
    const bool files = !strncmp(p, "/files", 6) && (p[6] == 0 || p[6] == '/' || p[6] == '?');
    const bool jobs = !strncmp(p, "/fine_tuning/jobs", 17) && (p[17] == 0 || p[17] == '/' || p[17] == '?');
    if (!files && !jobs) return false;
    if (!f) {
        rg_serve_error e;
        rg_serve_fail(&e, 404, "", "fine-tuning is off in this server");
        server_fail_response(s, out, &e);
        return true;
    }
    if (files && !strcmp(method, "POST") && (p[6] == 0 || p[6] == '?'))
        serve_ft_fail(f, out, 400, "file", NULL, "POST /v1/files takes multipart/form-data with the fields 'purpose' "
                                                 "and 'file'");
    else if (files) serve_files_route(f, method, p, out);
    else route_jobs(f, method, path, body, len, out);
    return true;
}

// ---------------------------------------------------------------------------------------------------------------
// Life

static int cmp_job(const void *a, const void *b) {
    const ft_job *x = *(ft_job *const *)a, *y = *(ft_job *const *)b;
    return x->created_us != y->created_us ? (x->created_us < y->created_us ? -1 : 1) : strcmp(x->id, y->id);
}

static rg_status mkdir_p(const char *path, rg_error *err) {
    char tmp[2200];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return rg_fail(err, RG_ERR_IO, "cannot make the files folder %s (--files-dir): %s", path, strerror(errno));
    return RG_OK;
}

rg_status serve_ft_make_dirs(serve_ft *f, rg_error *err) {
    rg_status st = mkdir_p(f->files_dir, err);
    return st ? st : mkdir_p(f->jobs_dir, err);
}

rg_status serve_ft_create(serve_ft **out, rg_server *s, const char *files_dir, int64_t max_upload, int job_threads,
                          rg_error *err) {
    *out = NULL;
    if (strlen(files_dir) > 2000) return rg_fail(err, RG_ERR_ARG, "serve: --files-dir is longer than 2000 bytes");
    serve_ft *f = calloc(1, sizeof *f);
    if (!f) return rg_fail(err, RG_ERR_NOMEM, "serve: out of memory");
    f->srv = s;
    f->max_upload = max_upload > 0 ? max_upload : (int64_t)100 << 20;
    f->job_threads = job_threads;
    snprintf(f->files_dir, sizeof f->files_dir, "%s", files_dir);
    snprintf(f->jobs_dir, sizeof f->jobs_dir, "%s/jobs", files_dir);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    const ssize_t n = readlink("/proc/self/exe", f->exe, sizeof f->exe - 1);
    rg_status st = n > 0 ? RG_OK : rg_fail(err, RG_ERR_IO, "serve: cannot read /proc/self/exe (the training child "
                                                           "runs this executable): %s", strerror(errno));
    if (!st) f->exe[n] = 0;
    DIR *d = st ? NULL : opendir(f->jobs_dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (strncmp(de->d_name, "ftjob-", 6) != 0) continue;
        ft_job *j = ft_job_load(f, de->d_name);
        if (!j) continue;
        if (f->n_jobs == f->cap_jobs) {
            const int cap = f->cap_jobs ? 2 * f->cap_jobs : 16;
            ft_job **nj = realloc(f->jobs, sizeof *nj * (size_t)cap);
            if (!nj) {
                ft_job_free(j);
                break;
            }
            f->jobs = nj, f->cap_jobs = cap;
        }
        f->jobs[f->n_jobs++] = j;
        if (!strcmp(j->status, "running") || !strcmp(j->status, "validating_files"))
            ft_job_finish(f, j, "failed", "server_restarted", "the server restarted while the job ran");
    }
    if (d) closedir(d);
    if (f->n_jobs) qsort(f->jobs, (size_t)f->n_jobs, sizeof *f->jobs, cmp_job);
    if (!st && pthread_create(&f->worker, NULL, ft_jobs_worker, f) != 0)
        st = rg_fail(err, RG_ERR_NOMEM, "serve: cannot start the fine-tuning worker thread");
    if (st) {
        serve_ft_free(f);
        return st;
    }
    f->worker_started = true;
    *out = f;
    return RG_OK;
}

void serve_ft_free(serve_ft *f) {
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    f->quit = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (f->worker_started) pthread_join(f->worker, NULL);
    for (int i = 0; i < f->n_jobs; i++) ft_job_free(f->jobs[i]);
    free(f->jobs);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}
