// trainer.c - see trainer.h. rg_train_run, at the end, reads as the run: OUTDIR, inputs, state, start or resume,
// then train_step per step (data, micro-steps, optimizer step, eval, progress, checkpoint), then finish; each job
// is one function above it, in that order, after the outputs they share (plot, report, start lines).
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"
#include "cpu/tiles_cache.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/config_resume.h"
#include "train/data.h"
#include "train/eval.h"
#include "train/progress.h"
#include "train/train_state.h"

#define EVAL_MAX_ROWS 128  // an eval pass reads at most this many held-out rows
#define KEEP_CHECKPOINTS 2

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double mib(size_t b) { return (double)b / 1048576.0; }

// The effective config as text (what a checkpoint stores and a resume compares).
static void config_text(const rg_train_config *c, char *buf, size_t cap) {
    char *p = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&p, &n);
    if (!f) {
        buf[0] = 0;
        return;
    }
    rg_train_config_write(c, f);
    fclose(f);
    snprintf(buf, cap, "%s", p ? p : "");
    free(p);
}

static rg_status prepare_out_dir(const char *dir, rg_error *err) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return rg_fail(err, RG_ERR_IO, "train: cannot create OUTDIR %s: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return rg_fail(err, RG_ERR_IO, "train: OUTDIR %s is not a directory", dir);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.write-test-%d", dir, (int)getpid());
    FILE *f = fopen(probe, "w");
    if (!f) return rg_fail(err, RG_ERR_IO, "train: OUTDIR %s is not writable: %s", dir, strerror(errno));
    fclose(f);
    unlink(probe);
    return RG_OK;
}

// model.gguf of a full fine-tune: every key and tensor of the input, the trained ones from memory.
static rg_status save_model(const rg_train_state *s, const char *path, rg_error *err) {
    const rg_gguf *in = s->model->file;
    rg_gguf *g = rg_gguf_new();
    if (!g) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    rg_status st = RG_OK;
    for (uint64_t i = 0; !st && i < in->n_kv; i++) st = rg_gguf_set_kv(g, &in->kv[i], err);
    for (uint64_t i = 0; !st && i < in->n_tensors; i++) {
        const rg_gguf_tensor *t = &in->tensors[i];
        const void *data = t->data;
        for (int k = 0; k < s->n_tensors; k++)
            if (!strcmp(s->tensors[k].name, t->name)) data = s->tensors[k].w;
        st = rg_gguf_add_tensor(g, t->name, t->type, t->n_dims ? t->n_dims : 1, t->ne, data, err);
    }
    if (!st) st = rg_gguf_write(g, path, err);
    rg_gguf_free(g);
    return st;
}

// One run: its inputs, its state, where it stands (meta: what a checkpoint stores) and its outputs.
typedef struct run {
    const rg_train_opts *o;
    const rg_train_spec *spec;  // &o->spec, checked at the edge
    const rg_train_config *c;   // &spec->cfg
    FILE *log;
    rg_train_summary *sum;
    rg_model *model;
    rg_dataset *data;
    rg_train_state *s;
    rg_train_memory mem;        // the report made when the state was created
    int64_t n_train_rows, total_steps;
    int32_t *ids, *labels, *pos, *seg;  // [rows_per_step * ctx]: the step's rows
    rg_ckpt_meta meta;          // steps done, skipped, tokens seen, time: the position a checkpoint keeps
    FILE *jsonl;                // train.jsonl, open while steps run
    rg_progress prog;
    bool prog_open;             // prog shows a line to end
    bool saved_last;            // the last step done is checkpointed
    int64_t iter0;              // meta.iter when this process began
    double t_start, elapsed0;   // this process's start (now_s), and the time of the run before it (a resume)
    char jsonl_path[4200], plot_path[4200];
} run;

// The progress line ended and train.jsonl closed: before the run's last words, or on a failure.
static void close_progress(run *r) {
    if (r->prog_open) rg_progress_end(&r->prog);
    r->prog_open = false;
    if (r->jsonl) fclose(r->jsonl);
    r->jsonl = NULL;
}

static void run_free(run *r) {
    close_progress(r);
    rg_train_state_free(r->s);
    rg_dataset_free(r->data);
    rg_model_free(r->model);
    free(r->ids), free(r->labels), free(r->pos), free(r->seg);
}

static void write_plot(run *r) {
    int64_t *it = NULL;
    double *loss = NULL, *ev = NULL;
    int64_t n = rg_jsonl_read_losses(r->jsonl_path, &it, &loss, &ev);
    if (n > 0) {
        char title[256];
        const char *base = strrchr(r->o->model_path, '/');
        snprintf(title, sizeof title, "retrograd train: %s (%s)", base ? base + 1 : r->o->model_path,
                 r->c->method == RG_TRAIN_LORA ? "LoRA" : "full");
        rg_error e2 = {0};
        if (rg_loss_plot_write(r->plot_path, it, loss, ev, n, title, &e2))
            fprintf(r->log, "warning: %s\n", e2.msg);
    }
    free(it), free(loss), free(ev);
}

static rg_status write_report(run *r, const rg_train_summary *sum, const rg_train_memory *mem, const char *result,
                              rg_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/report.json", r->o->out_dir);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    rg_data_stats ds = rg_dataset_stats(r->data);
    fprintf(f, "{\n  \"model\": \"%s\",\n  \"data\": \"%s\",\n  \"method\": \"%s\",\n  \"result\": \"%s\",\n", r->o->model_path,
            r->o->data_path, r->c->method == RG_TRAIN_LORA ? "lora" : "full", result);
    if (r->o->eval_data_path) fprintf(f, "  \"eval_data\": \"%s\",\n", r->o->eval_data_path);
    fprintf(f, "  \"steps\": %lld,\n  \"skipped_steps\": %lld,\n  \"tokens\": %lld,\n", (long long)sum->steps,
            (long long)sum->skipped, (long long)sum->tokens);
    fprintf(f, "  \"first_loss\": %.9g,\n  \"last_loss\": %.9g,\n", sum->first_loss, sum->last_loss);
    if (isfinite(sum->eval_loss)) fprintf(f, "  \"eval_loss\": %.9g,\n", sum->eval_loss);
    else fprintf(f, "  \"eval_loss\": null,\n");
    fprintf(f, "  \"seconds\": %.3f,\n  \"tokens_per_s\": %.3f,\n  \"peak_rss_mib\": %.1f,\n", sum->seconds, sum->tokens_per_s,
            sum->peak_rss_mib);
    fprintf(f, "  \"memory_mib\": {\"weights\": %.1f, \"gradients\": %.1f, \"optimizer\": %.1f, \"activations\": %.1f, "
               "\"scratch\": %.1f, \"total\": %.1f},\n",
            mib(mem->weights), mib(mem->gradients), mib(mem->optimizer), mib(mem->activations), mib(mem->scratch),
            mib(mem->total));
    if (mem->on_device)
        fprintf(f, "  \"device_memory_mib\": {\"scratch_weights\": %.1f, \"scratch_gradients\": %.1f, "
                   "\"scratch_optimizer\": %.1f, \"scratch_activations\": %.1f, \"scratch_scratch\": %.1f, "
                   "\"scratch_total\": %.1f, \"device_used\": %.1f, \"device_free\": %.1f},\n",
                mib(mem->scratch_weights), mib(mem->scratch_gradients), mib(mem->scratch_optimizer),
                mib(mem->scratch_activations), mib(mem->scratch_scratch), mib(mem->scratch_total), mib(mem->device_used),
                mib(mem->device_free));
    fprintf(f, "  \"data_stats\": {\"format\": \"%s\", \"samples\": %lld, \"train_samples\": %lld, \"eval_samples\": %lld, "
               "\"truncated\": %lld, \"dropped\": %lld, \"train_rows\": %lld, \"eval_rows\": %lld, \"target_tokens\": %lld},\n",
            ds.format ? ds.format : "", (long long)ds.n_samples, (long long)ds.n_train_samples, (long long)ds.n_eval_samples,
            (long long)ds.n_truncated, (long long)ds.n_dropped, (long long)ds.n_train_rows, (long long)ds.n_eval_rows,
            (long long)ds.n_target_tokens);
    fprintf(f, "  \"compute_dtype\": \"%s\",\n  \"products\": \"%s\",\n",  // where: plain words, no quotes
            r->s->products.dtype == RG_COMPUTE_BF16 ? "bf16" : "f32", r->s->products.where);
    if (r->s->tiles) {  // the frozen weights' BF16 tiles (cpu/tiles_cache.h)
        const rg_tiles_cache_stats ts = rg_tiles_cache_get_stats(r->s->tiles);
        fprintf(f, "  \"bf16_tiles\": {\"wanted_mib\": %.1f, \"cap_mib\": %.1f, \"held_mib\": %.1f, \"entries\": %lld, "
                   "\"packs\": %lld, \"hits\": %lld, \"refused\": %lld},\n",
                mib(mem->tiles_wanted), mib(ts.cap), mib(ts.bytes), (long long)ts.entries, (long long)ts.packs,
                (long long)ts.hits, (long long)ts.refused);
    }
    fprintf(f, "  \"threads\": %d\n}\n", rg_threadpool_size(r->s->pool));
    fclose(f);
    rg_status st = rg_atomic_write_file(path, buf, len, err);
    free(buf);
    return st;
}

static void print_start(run *r, const rg_train_memory *mem) {
    const rg_train_config *c = r->c;
    rg_data_stats ds = rg_dataset_stats(r->data);
    const rg_hparams *hp = &r->model->hp;
    int64_t n_trainable = 0;
    for (int k = 0; k < r->s->n_tensors; k++) n_trainable += r->s->tensors[k].nel;
    fprintf(r->log, "model: %s (%s, %lld layers, n_embd %lld, vocab %lld)\n", r->o->model_path, hp->arch_name,
            (long long)hp->n_layer, (long long)hp->n_embd, (long long)hp->n_vocab);
    if (c->method == RG_TRAIN_LORA)
        fprintf(r->log, "method: LoRA rank %lld alpha %g, %d tensors, %lld trainable parameters\n", (long long)c->lora_rank,
                c->lora_alpha, r->s->n_tensors, (long long)n_trainable);
    else
        fprintf(r->log, "method: full fine-tuning in place (%s), %d tensors, %lld parameters%s\n",
                rg_type_get(r->s->tensors[0].type)->name, r->s->n_tensors, (long long)n_trainable,
                c->master_weights ? ", F32 master weights" : "");
    fprintf(r->log, "data: %s (%s): %lld samples (%lld train, %lld eval), %lld truncated, %lld dropped; %lld train rows of %lld tokens, %lld target tokens\n",
            r->o->data_path, ds.format ? ds.format : "?", (long long)ds.n_samples, (long long)ds.n_train_samples,
            (long long)ds.n_eval_samples, (long long)ds.n_truncated, (long long)ds.n_dropped, (long long)ds.n_train_rows,
            (long long)c->ctx, (long long)ds.n_target_tokens);
    if (r->o->eval_data_path)
        fprintf(r->log, "eval data: %s: the %lld eval samples (%lld rows)\n", r->o->eval_data_path,
                (long long)ds.n_eval_samples, (long long)ds.n_eval_rows);
    fprintf(r->log, "steps: %lld (%lld rows each: batch %lld x accum %lld), %s lr %.3g, %s schedule, warmup %lld, %d thread%s\n",
            (long long)r->total_steps, (long long)r->spec->rows_per_step, (long long)c->batch_size, (long long)c->grad_accum,
            c->optimizer == RG_OPTIM_ADAMW ? "adamw" : "sgd", r->s->lr,
            c->schedule == RG_SCHED_COSINE ? "cosine" : c->schedule == RG_SCHED_LINEAR ? "linear" : "constant",
            (long long)c->warmup_steps, rg_threadpool_size(r->s->pool), rg_threadpool_size(r->s->pool) == 1 ? "" : "s");
    char recompute[128] = "";
    const char *flash = mem->flash_attn ? "; flash attention" : "";
    if (mem->recompute)
        snprintf(recompute, sizeof recompute, " (layer recompute, inputs kept in %s%s%s)", rg_type_get(mem->checkpoint_type)->name,
                 mem->fused_ce ? "; fused cross-entropy" : "", flash);
    else if (mem->fused_ce || mem->flash_attn)
        snprintf(recompute, sizeof recompute, " (%s%s)", mem->fused_ce ? "fused cross-entropy" : "flash attention",
                 mem->fused_ce && mem->flash_attn ? "; flash attention" : "");
    fprintf(r->log, "memory: weights %.1f MiB, gradients %.1f MiB, optimizer state %.1f MiB, activations %.1f MiB%s, scratch %.1f MiB; total %.1f MiB\n",
            mib(mem->weights), mib(mem->gradients), mib(mem->optimizer), mib(mem->activations), recompute,
            mib(mem->scratch), mib(mem->total));
    // Which products run where (training.compute_dtype, train/compute.h).
    fprintf(r->log, "products: %s (%s)\n", r->s->products.where, r->s->products.why);
    if (mem->tiles_wanted)  // cpu/tiles_cache.h: a frozen base packed once for the run, when memory allows
        fprintf(r->log, "frozen weights as bf16 tiles: %.1f MiB wanted, held within %.1f MiB%s\n", mib(mem->tiles_wanted),
                mib(mem->tiles_cap), mem->tiles_cap < mem->tiles_wanted ? " (the rest packed per product; RG_TILES_CACHE_MB)" : "");
    if (mem->on_device)
        fprintf(r->log, "device memory (this run): weights %.1f MiB, gradients %.1f MiB, optimizer state %.1f MiB, "
                        "activations %.1f MiB, scratch %.1f MiB; total %.1f MiB; the device: %.1f MiB used, %.1f MiB free\n",
                mib(mem->scratch_weights), mib(mem->scratch_gradients), mib(mem->scratch_optimizer),
                mib(mem->scratch_activations), mib(mem->scratch_scratch), mib(mem->scratch_total), mib(mem->device_used),
                mib(mem->device_free));
}

// OUTDIR writable, and for a fresh run free of an earlier run's checkpoints.
static rg_status open_out_dir(run *r, rg_error *err) {
    const rg_train_opts *o = r->o;
    rg_status st = prepare_out_dir(o->out_dir, err);
    if (st) return st;
    if (!o->resume) {
        // A fresh run never mixes with an earlier one: its checkpoints would be taken for ours by --resume.
        char dir[4200];
        rg_error e2 = {0};
        if (rg_checkpoint_find_latest(o->out_dir, dir, sizeof dir, &e2) == RG_OK)
            return rg_fail(err, RG_ERR_ARG, "train: OUTDIR %s already holds a run (%s); continue it with --resume %s, "
                                            "or choose another OUTDIR (or remove this one)", o->out_dir, dir, o->out_dir);
    }
    snprintf(r->jsonl_path, sizeof r->jsonl_path, "%s/train.jsonl", o->out_dir);
    snprintf(r->plot_path, sizeof r->plot_path, "%s/loss.svg", o->out_dir);
    return RG_OK;
}

// The model, the data, how many steps they make and the buffers of a step's rows.
static rg_status load_inputs(run *r, rg_error *err) {
    const rg_train_opts *o = r->o;
    const rg_train_config *c = r->c;
    rg_status st = rg_model_load(&r->model, o->model_path, err);
    if (st) return st;
    if ((st = rg_eval_load_data(&r->data, r->model, o->data_path, o->eval_data_path, r->spec, r->log, err))) return st;
    r->n_train_rows = rg_dataset_n_rows(r->data, 0);
    if (r->n_train_rows <= 0)
        return rg_fail(err, RG_ERR_ARG, "train: %s gives no training rows (every sample went to the eval split or was dropped)",
                       o->data_path);
    const int64_t R = r->spec->rows_per_step;
    if (c->steps > 0) r->total_steps = c->steps;
    else {
        double steps = floor(c->epochs * (double)r->n_train_rows / (double)R);
        r->total_steps = steps < 1 ? 1 : (int64_t)steps;
    }
    size_t n = (size_t)(R * c->ctx);
    r->ids = malloc(n * 4), r->labels = malloc(n * 4), r->pos = malloc(n * 4), r->seg = malloc(n * 4);
    if (!r->ids || !r->labels || !r->pos || !r->seg) return rg_fail(err, RG_ERR_NOMEM, "train: out of memory");
    return RG_OK;
}

// The train state on the chosen device, and the lines saying what the run is.
static rg_status create_state(run *r, rg_error *err) {
    rg_status st = rg_train_state_create_on(&r->s, r->model, r->spec, r->total_steps, (rg_device)r->o->device, err);
    if (st) return st;
    r->mem = rg_train_state_memory(r->s);
    print_start(r, &r->mem);
    return RG_OK;
}

// Continues from OUTDIR's newest checkpoint: its weights and optimizer state, and its position in r->meta;
// refused when the config or the data differ from the checkpoint's.
static rg_status resume(run *r, rg_error *err) {
    char dir[4200];
    rg_ckpt_meta saved;
    rg_ckpt_meta *meta = &r->meta;
    rg_status st;
    if ((st = rg_checkpoint_find_latest(r->o->out_dir, dir, sizeof dir, err)) ||
        (st = rg_checkpoint_load(r->s, dir, &saved, err)) || (st = rg_train_state_refresh_device(r->s, err)))
        return st;
    if ((st = rg_train_resume_config_check(saved.config, meta->config, r->s->products.where, dir, err))) return st;
    if (saved.data_hash != meta->data_hash)
        return rg_fail(err, RG_ERR_ARG, "resume: the data (%s) is not what %s was trained on (hash %016llx, checkpoint %016llx)",
                       r->o->data_path, dir, (unsigned long long)meta->data_hash, (unsigned long long)saved.data_hash);
    if (saved.threads != meta->threads)
        fprintf(r->log, "warning: the checkpoint ran with %d threads, this run has %d: it continues correctly, but not "
                        "bit for bit as the uninterrupted run would have\n", saved.threads, meta->threads);
    if (saved.fused_ce >= 0 && saved.fused_ce != meta->fused_ce)
        fprintf(r->log, "warning: the checkpoint's step graph %s the fused cross-entropy and this run's %s "
                        "(training.fused_ce=auto decides by the memory limit): it continues correctly, but not bit "
                        "for bit; set training.fused_ce=%s to match\n",
                saved.fused_ce ? "used" : "did not use", meta->fused_ce ? "does" : "does not",
                saved.fused_ce ? "on" : "off");
    meta->t = saved.t, meta->iter = saved.iter, meta->n_skipped = saved.n_skipped;
    meta->skipped_in_row = saved.skipped_in_row, meta->tokens_seen = saved.tokens_seen, meta->elapsed_s = saved.elapsed_s;
    if ((st = rg_jsonl_truncate(r->jsonl_path, meta->iter, err))) return st;
    fprintf(r->log, "resume: %s (step %lld of %lld)\n", dir, (long long)meta->iter, (long long)r->total_steps);
    return RG_OK;
}

// Where the run starts: step 0 with an empty train.jsonl, or the checkpoint's position with --resume; then
// train.jsonl open for the steps' records and the progress line begun.
static rg_status start(run *r, rg_error *err) {
    rg_ckpt_meta *meta = &r->meta;
    memset(meta, 0, sizeof *meta);
    meta->seed = r->c->seed;
    meta->data_hash = rg_dataset_hash(r->data);
    meta->threads = rg_threadpool_size(r->s->pool);
    meta->fused_ce = r->s->fused_ce;
    config_text(r->c, meta->config, sizeof meta->config);
    rg_train_config_text_resolve(meta->config, sizeof meta->config, r->s->products.dtype);
    rg_status st;
    if (r->o->resume) {
        if ((st = resume(r, err))) return st;
    } else {
        unlink(r->jsonl_path);
    }
    r->jsonl = fopen(r->jsonl_path, "a");
    if (!r->jsonl) return rg_fail(err, RG_ERR_IO, "train: cannot open %s: %s", r->jsonl_path, strerror(errno));
    const int p = r->o->progress;
    rg_progress_init(&r->prog, r->log, p == 0 ? (isatty(fileno(r->log)) ? 1 : 2) : p == 3 ? 0 : p, r->total_steps);
    r->prog_open = true;
    r->t_start = now_s(), r->elapsed0 = meta->elapsed_s;
    r->iter0 = meta->iter;
    return RG_OK;
}

// Data: the rows of the next step into the row buffers (a pure function of the step count, trainer.h), and the
// record of that step with its tokens and targets (the loss is normalised by the whole step's targets).
static rg_step_record next_rows(run *r) {
    const int64_t T = r->c->ctx, R = r->spec->rows_per_step, iter = r->meta.iter;
    int64_t targets = 0, epoch = 0;
    for (int64_t j = 0; j < R; j++) {
        int64_t row = iter * R + j;
        epoch = row / r->n_train_rows;
        rg_dataset_row(r->data, 0, epoch, row % r->n_train_rows, r->ids + j * T, r->labels + j * T, r->pos + j * T,
                       r->seg + j * T);
        for (int64_t i = 0; i < T; i++) targets += r->labels[j * T + i] != -100;
    }
    return (rg_step_record){.iter = iter + 1, .epoch = epoch, .tokens = R * T, .targets = targets, .eval_loss = NAN};
}

// Micro-steps: each row's forward and backward, its gradient added to the step's; *loss is the step's mean target
// loss. A row whose loss is not finite drops the step's gradients and sets *bad.
static rg_status micro_steps(run *r, const rg_step_record *rec, double *loss, bool *bad, rg_error *err) {
    const int64_t T = r->c->ctx, R = r->spec->rows_per_step;
    *loss = 0.0, *bad = false;
    if (rec->targets == 0) {
        fprintf(r->log, "\nwarning: step %lld has no target tokens; nothing to learn\n", (long long)rec->iter);
        return RG_OK;
    }
    for (int64_t j = 0; j < R; j++) {
        double l = 0;
        rg_status st = rg_train_state_micro(r->s, r->ids + j * T, r->labels + j * T, r->pos + j * T, r->seg + j * T,
                                            1.0 / (double)rec->targets, &l, err);
        if (st == RG_ERR_NONFINITE) {
            *bad = true;
            rg_train_state_discard(r->s);
            return RG_OK;
        }
        if (st) return st;
        *loss += l;
    }
    return RG_OK;
}

// A skipped step (a loss or gradient norm not finite) counted; the run stops when skipping is off, or when too
// many were skipped in a row.
static rg_status count_skipped(run *r, const rg_step_record *rec, bool bad_loss, rg_error *err) {
    rg_ckpt_meta *meta = &r->meta;
    meta->n_skipped++, meta->skipped_in_row++;
    if (!r->c->skip_nonfinite)
        return rg_fail(err, RG_ERR_NONFINITE, "train: step %lld: the %s is not finite (training.skip_nonfinite=false)",
                       (long long)rec->iter, bad_loss ? "loss" : "gradient norm");
    if (meta->skipped_in_row > r->c->max_skipped)
        return rg_fail(err, RG_ERR_NONFINITE,
                       "train: %lld steps in a row had a NaN or Inf loss or gradient (training.max_skipped=%lld); "
                       "lower training.lr or check the data",
                       (long long)meta->skipped_in_row, (long long)r->c->max_skipped);
    return RG_OK;
}

// Optimizer step: norm, clip, schedule and update after the rows (none when a row's loss was not finite, bad),
// the record's loss, lr and norm, and the run's position one step on.
static rg_status optimizer_step(run *r, rg_step_record *rec, double loss, bool bad, rg_error *err) {
    bool skipped = bad;
    rg_status st;
    if (!bad) {
        if ((st = rg_train_state_step(r->s, &rec->grad_norm, &rec->lr, &skipped, err))) return st;
    } else {
        rec->grad_norm = NAN;
        rec->lr = r->s->lr * rg_schedule_factor((int)r->c->schedule, r->s->t, r->c->warmup_steps, r->total_steps);
    }
    rec->loss = bad ? NAN : loss;
    rec->skipped = skipped;
    r->meta.iter++;
    r->meta.t = r->s->t;
    r->meta.tokens_seen += rec->tokens;
    if (skipped) return count_skipped(r, rec, bad, err);
    r->meta.skipped_in_row = 0;
    if (isnan(r->sum->first_loss)) r->sum->first_loss = loss;
    r->sum->last_loss = loss;
    return RG_OK;
}

// Eval: the held-out loss every training.eval_every steps and after the last (NaN, not an error, when not finite).
static rg_status eval_if_due(run *r, rg_step_record *rec, bool last, rg_error *err) {
    if (!((r->c->eval_every > 0 && r->meta.iter % r->c->eval_every == 0) || last)) return RG_OK;
    rg_status st = rg_eval_rows(r->s, r->data, 1, EVAL_MAX_ROWS, &rec->eval_loss, NULL, err);
    if (st == RG_ERR_NONFINITE) return RG_OK;  // rec->eval_loss stays NaN
    if (st) return st;
    if (isfinite(rec->eval_loss)) r->sum->eval_loss = rec->eval_loss;
    return RG_OK;
}

// Progress: the step's timing and memory into its record, the record into train.jsonl, the progress line.
static void record_step(run *r, rg_step_record *rec, double t0) {
    const double t1 = now_s();
    rec->tokens_per_s = (double)rec->tokens / (t1 - t0);
    r->meta.elapsed_s = r->elapsed0 + (t1 - r->t_start);
    rec->elapsed_s = r->meta.elapsed_s;
    rec->t = r->meta.t;
    rec->rss_mib = rg_rss_mib();
    rg_step_record_write(r->jsonl, rec);
    fflush(r->jsonl);
    double per_step = (t1 - r->t_start) / (double)(r->meta.iter - r->iter0);
    rg_progress_step(&r->prog, rec, per_step * (double)(r->total_steps - r->meta.iter));
}

// Checkpoint: every training.save_every steps and after the last, with train.jsonl on disk first and the plot after.
static rg_status checkpoint_if_due(run *r, bool last, rg_error *err) {
    r->saved_last = false;
    if (!((r->c->save_every > 0 && r->meta.iter % r->c->save_every == 0) || last)) return RG_OK;
    fsync(fileno(r->jsonl));
    rg_status st;
    if ((st = rg_train_state_sync_host(r->s, err)) ||
        (st = rg_checkpoint_save(r->s, &r->meta, r->o->out_dir, KEEP_CHECKPOINTS, err)))
        return st;
    write_plot(r);
    r->saved_last = true;
    return RG_OK;
}

// One step of the run, each of its jobs in order.
static rg_status train_step(run *r, rg_error *err) {
    const double t0 = now_s();
    rg_step_record rec = next_rows(r);
    double loss;
    bool bad;
    rg_status st = micro_steps(r, &rec, &loss, &bad, err);
    if (!st) st = optimizer_step(r, &rec, loss, bad, err);
    const bool last = r->meta.iter == r->total_steps;
    if (!st) st = eval_if_due(r, &rec, last, err);
    if (st) return st;
    record_step(r, &rec, t0);
    return checkpoint_if_due(r, last, err);
}

// The end: the trained tensors back in host memory (from the device, when there is one), the last checkpoint,
// the result (adapter.gguf or model.gguf), the plot, the summary and report.json.
static rg_status finish(run *r, rg_error *err) {
    close_progress(r);
    rg_train_state *s = r->s;
    rg_ckpt_meta *meta = &r->meta;
    rg_status st;
    if ((st = rg_train_state_sync_host(s, err))) return st;
    if (!r->saved_last && meta->iter > 0 && (st = rg_checkpoint_save(s, meta, r->o->out_dir, KEEP_CHECKPOINTS, err)))
        return st;
    char result[4200];
    snprintf(result, sizeof result, "%s/%s", r->o->out_dir, r->c->method == RG_TRAIN_LORA ? "adapter.gguf" : "model.gguf");
    st = r->c->method == RG_TRAIN_LORA ? rg_lora_save(s->lora, r->model, result, err) : save_model(s, result, err);
    if (st) return st;
    write_plot(r);
    rg_train_summary *sum = r->sum;
    sum->steps = meta->iter;
    sum->skipped = meta->n_skipped;
    sum->tokens = meta->tokens_seen;
    sum->seconds = meta->elapsed_s;
    const double this_run = now_s() - r->t_start;
    const int64_t tokens_per_step = r->spec->rows_per_step * r->c->ctx;
    sum->tokens_per_s = this_run > 0 ? (double)((meta->iter - r->iter0) * tokens_per_step) / this_run : 0;
    sum->peak_rss_mib = rg_peak_rss_mib();
    if ((st = write_report(r, sum, &r->mem, result, err))) return st;
    fprintf(r->log, "done: %lld steps (%lld skipped), loss %.4f -> %.4f, %.0f tokens/s; wrote %s, %s, %s/train.jsonl\n",
            (long long)sum->steps, (long long)sum->skipped, sum->first_loss, sum->last_loss, sum->tokens_per_s, result,
            r->plot_path, r->o->out_dir);
    if (isfinite(sum->eval_loss)) fprintf(r->log, "eval loss: %.4f\n", sum->eval_loss);
    if (r->s->tiles) {
        const rg_tiles_cache_stats ts = rg_tiles_cache_get_stats(r->s->tiles);
        fprintf(r->log, "bf16 tiles: %lld frozen weights held (%.1f MiB), each packed once; %lld products read them, "
                        "%lld packed their own (over the cap)\n",
                (long long)ts.entries, mib(ts.bytes), (long long)ts.hits, (long long)ts.refused);
    }
    return RG_OK;
}

rg_status rg_train_run(const rg_train_opts *o, rg_train_summary *sum, rg_error *err) {
    memset(sum, 0, sizeof *sum);
    sum->first_loss = sum->last_loss = sum->eval_loss = NAN;
    run r;
    memset(&r, 0, sizeof r);
    r.o = o, r.spec = &o->spec, r.c = &o->spec.cfg, r.sum = sum;
    r.log = o->log ? o->log : stderr;
    rg_status st = open_out_dir(&r, err);
    if (!st) st = load_inputs(&r, err);
    if (!st) st = create_state(&r, err);
    if (!st) st = start(&r, err);
    while (!st && r.meta.iter < r.total_steps) st = train_step(&r, err);
    if (!st) st = finish(&r, err);
    run_free(&r);
    return st;
}
