// precision_runs.h - the seed's precision tables (shared/spec/training.md section 4) as
// functions: bench_precision prints them for 2000 steps, test_f16_base_training checks them
// over a short run with a CPU, a CPU-tiles and a CUDA column. A half fixture (tiny qwen2, matrices in F16
// or BF16) trains beside its F32 twin (the same values stored as F32) on the same rows, with
// the same schedule and seed. Each function here is static: one copy per program.
//
// The columns: CPU (training.compute_dtype=f32: the half weights widened exactly, the seed's CPU
// column), CPU-tiles (issue 25: the half run with compute_dtype=bf16, its products on the CPU's
// matrix unit with both operands rounded to BF16, AMX, AVX512_BF16 or the emulated tiles under
// RG_TILES_EMULATE=1; its twin with f32 products: the reference), and CUDA (the device's default
// path, RETRO_CUDA_HALF_GEMM=tensor). The seed has no CPU-tiles column: it is held to the seed's
// CUDA column, the one whose forward also rounds the activations.
#ifndef RG_BENCH_PRECISION_RUNS_H
#define RG_BENCH_PRECISION_RUNS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "model/model.h"
#include "model/tiny.h"
#include "tensor/half.h"
#include "text/tiny_corpus.h"
#include "text/tokenizer.h"
#include "train/data.h"
#include "train/train_state.h"

#define CTX 64

// What a run of the tables uses: the device both runs train on, the learning rates, and
// training.checkpoint_dtype (recompute when not F32).
typedef struct prec_cfg {
    rg_device device;
    double lr_adamw, lr_sgd;
    uint32_t ckpt_type;
    int compute_dtype;  // training.compute_dtype of the half run (enum rg_compute_dtype); its twin: f32 when this is bf16
} prec_cfg;

typedef struct seed_cells {
    double grad, off, loss;  // < 0: the seed gives no figure there
} seed_cells;

// The seed's status page (shared/seed's "Base weights in F16 and BF16"), every column it gives:
// SEED[column cpu/cuda][storage f16/bf16][optimizer adamw/sgd][mode in place/master]. It measured
// the CPU in place only; with master weights it gives the CUDA column alone.
enum { SEED_CPU = 0, SEED_CUDA = 1 };
#define SEED_NONE {-1, -1, -1}
static const seed_cells SEED[2][2][2][2] = {
    {   // CPU
        {{{5.5e-4, 1.2e-3, 2.1e-4}, SEED_NONE}, {{5.5e-4, 5.7e-4, 2.2e-3}, SEED_NONE}},  // F16: AdamW, SGD
        {{{5.5e-3, 2.3e-3, 5.9e-3}, SEED_NONE}, {{5.5e-3, 8.5e-4, 6.3e-3}, SEED_NONE}},  // BF16
    },
    {   // CUDA (an RTX 4090, its forward on the tensor cores)
        {{{1.7e-3, 2.1e-3, 7.9e-4}, {1.7e-3, 1.9e-3, 1.9e-4}}, {{1.7e-3, 3.3e-3, 2.3e-5}, {1.7e-3, 2.6e-3, 5.8e-3}}},
        {{{4.9e-3, 2.2e-3, 1.5e-3}, {4.9e-3, 2.0e-3, 2.0e-3}}, {{4.9e-3, 6.5e-4, 5.0e-3}, {4.9e-3, 7.3e-4, 5.2e-3}}},
    },
};
#undef SEED_NONE

// §4.2: ord of a half bit pattern, and the piecewise-linear extension o(y).
static int32_t ord16(uint16_t h) { return (h & 0x8000) ? -(int32_t)(h & 0x7FFF) : (int32_t)(h & 0x7FFF); }

static float half_val(uint32_t type, uint16_t h) { return type == RG_TYPE_F16 ? rg_fp16_to_fp32(h) : rg_bf16_to_fp32(h); }

static double o_of(uint32_t type, float y) {
    float a = fabsf(y);
    uint16_t h = type == RG_TYPE_F16 ? rg_fp32_to_fp16(a) : rg_fp32_to_bf16(a);
    const uint16_t maxf = type == RG_TYPE_F16 ? 0x7BFF : 0x7F7F;
    if (h > maxf) h = maxf;  // above the largest finite: extrapolate with the top spacing
    while (h > 0 && half_val(type, h) > a) h--;
    double lo = half_val(type, h), hi = h < maxf ? half_val(type, (uint16_t)(h + 1)) : lo + (lo - half_val(type, (uint16_t)(h - 1)));
    double o = (double)(h & 0x7FFF) + ((double)a - lo) / (hi - lo);
    return y < 0 ? -o : o;
}

typedef struct runner {
    rg_model *model;
    rg_train_state *s;
    rg_device device;
} runner;

// twin: the F32 reference of the pair, whose products are F32 when the half run's are BF16.
static int runner_make(runner *r, const prec_cfg *pc, const char *path, int optimizer, bool master, int64_t steps,
                       bool twin) {
    rg_error err = {0};
    memset(r, 0, sizeof *r);
    if (rg_model_load(&r->model, path, &err)) {
        printf("load %s: %s\n", path, err.msg);
        return 1;
    }
    rg_train_config c;
    rg_train_config_defaults(&c);
    c.method = RG_TRAIN_FULL;
    c.optimizer = optimizer;
    c.lr = optimizer == RG_OPTIM_ADAMW ? pc->lr_adamw : pc->lr_sgd;
    c.schedule = RG_SCHED_CONSTANT;
    c.clip_grad_norm = 0;
    c.ctx = CTX;
    c.eval_split = 0;
    c.master_weights = master;
    c.checkpoint_dtype = pc->ckpt_type;
    c.compute_dtype = twin && pc->compute_dtype == RG_COMPUTE_BF16 ? RG_COMPUTE_F32 : pc->compute_dtype;
    c.steps = steps;
    c.seed = 7;
    c.threads = 1;  // a tiny model: one thread is fastest, and immune to a busy machine
    r->device = pc->device;
    rg_train_spec sp;
    if (rg_train_config_validate(&c, &sp, &err) || rg_train_state_create_on(&r->s, r->model, &sp, steps, pc->device, &err)) {
        printf("setup %s: %s\n", path, err.msg);
        return 1;
    }
    return 0;
}

static void runner_free(runner *r) {
    rg_train_state_free(r->s);
    rg_model_free(r->model);
}

typedef struct batches {
    int64_t n;
    int32_t *ids, *labels, *pos, *seg;  // [n][CTX]
} batches;

static double step(runner *r, const batches *b, int64_t k, bool apply) {
    const int64_t i = k % b->n;
    int64_t targets = 0;
    for (int j = 0; j < CTX; j++) targets += b->labels[i * CTX + j] != -100;
    double loss = 0, gn = 0, lr = 0;
    bool skipped = false;
    rg_error err = {0};
    if (rg_train_state_micro(r->s, b->ids + i * CTX, b->labels + i * CTX, b->pos + i * CTX, b->seg + i * CTX,
                             1.0 / (double)targets, &loss, &err) ||
        (apply && rg_train_state_step(r->s, &gn, &lr, &skipped, &err))) {
        printf("step: %s\n", err.msg);
        exit(1);
    }
    if (skipped) {
        printf("step %lld was skipped: the comparison is invalid (spec §4.3)\n", (long long)k);
        exit(1);
    }
    // On a device the gradients and weights the metrics read are there: bring them back.
    if (r->device != RG_DEVICE_CPU && rg_train_state_sync_host(r->s, &err)) {
        printf("sync: %s\n", err.msg);
        exit(1);
    }
    return loss;
}

// §4.1 over every trainable tensor.
static double grad_gap(const runner *h, const runner *f, int64_t *n_elems) {
    double worst = 0;
    *n_elems = 0;
    for (int k = 0; k < h->s->n_tensors; k++) {
        const rg_train_tensor *a = &h->s->tensors[k], *b = &f->s->tensors[k];
        double md = 0, mg = 0;
        for (int64_t i = 0; i < a->nel; i++) {
            double d = fabs((double)a->grad[i] - b->grad[i]);
            md = d > md ? d : md;
            mg = fabs(b->grad[i]) > mg ? fabs(b->grad[i]) : mg;
        }
        double gap = mg > 0 ? md / mg : (md > 0 ? INFINITY : 0);
        worst = gap > worst ? gap : worst;
        *n_elems += a->nel;
    }
    return worst;
}

// §4.2 after one step from the same state (the twin starts as the half run's exact upcast).
static double off_grid(const runner *h, const runner *f) {
    int64_t off = 0, n = 0;
    for (int k = 0; k < h->s->n_tensors; k++) {
        const rg_train_tensor *a = &h->s->tensors[k], *b = &f->s->tensors[k];
        if (a->type == RG_TYPE_F32) continue;
        for (int64_t i = 0; i < a->nel; i++) {
            uint16_t w = ((const uint16_t *)a->w)[i];
            float y = ((const float *)b->w)[i];
            if (!isfinite(y) || !isfinite(half_val(a->type, w))) return INFINITY;
            off += fabs((double)ord16(w) - o_of(a->type, y)) > 1.0;
            n++;
        }
    }
    return n ? (double)off / (double)n : 0;
}

// About n_words words of "The <colour> <animal> of <name> saw <count> <things> near the <place>." with
// the parts drawn from a fixed LCG: the same text on every machine.
static void write_sentences(FILE *f, int64_t n_words) {
    static const char *colour[] = {"red", "blue", "green", "grey", "white", "black", "golden", "brown"};
    static const char *animal[] = {"fox", "cat", "dog", "horse", "owl", "heron", "goat", "mouse", "bear", "crow"};
    static const char *name[] = {"Anna", "Tom", "Lena", "Omar", "Ivy", "Paul", "Mira", "Jon", "Sara", "Emil", "Rosa", "Theo"};
    static const char *things[] = {"apples", "boats", "stones", "birds", "lamps", "books", "trees", "clouds"};
    static const char *place[] = {"river", "market", "bridge", "school", "forest", "harbour", "mill", "church"};
    uint64_t x = 2024;
#define PICK(a) (x = x * 6364136223846793005ull + 1442695040888963407ull, a[(x >> 33) % (sizeof a / sizeof a[0])])
    for (int64_t w = 0; w < n_words; w += 12) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int count = (int)((x >> 33) % 20) + 2;
        const char *c = PICK(colour), *a = PICK(animal), *nm = PICK(name), *t = PICK(things), *pl = PICK(place);
        fprintf(f, "The %s %s of %s saw %d %s near the %s.%s", c, a, nm, count, t, pl, w % 96 == 84 ? "\n" : " ");
    }
#undef PICK
    fprintf(f, "\n");
}


// Writes the F16 and BF16 fixtures and their F32 twins under dir (paths[type][twin]), unless
// each is given by the environment (the seed's RETRO_TINY_F16_FIXTURE with its twin
// RETRO_TINY_FIXTURE, RETRO_TINY_BF16_FIXTURE with RETRO_TINY_BF16_CONTROL_FIXTURE), and the
// rows: CTX tokens each, the tiny corpus then templated sentences, in the dataset's seeded
// order. arch: make-tiny's architecture (NULL: qwen2, the seed's fixtures; the environment's
// files stand in for qwen2 only). 0 on success.
static int prec_setup(const char *arch, const char *dir, int64_t steps, char paths[2][2][256], bool made[2][2],
                      batches *b) {
    if (!arch) arch = "qwen2";
    static const char *const env[2][2] = {{"RETRO_TINY_F16_FIXTURE", "RETRO_TINY_FIXTURE"},
                                          {"RETRO_TINY_BF16_FIXTURE", "RETRO_TINY_BF16_CONTROL_FIXTURE"}};
    const uint32_t types[2] = {RG_TYPE_F16, RG_TYPE_BF16};
    rg_error err = {0};
    for (int t = 0; t < 2; t++)
        for (int tw = 0; tw < 2; tw++) {
            const char *given = strcmp(arch, "qwen2") ? NULL : getenv(env[t][tw]);
            made[t][tw] = !(given && *given);
            if (!made[t][tw]) {
                snprintf(paths[t][tw], 256, "%s", given);
                continue;
            }
            snprintf(paths[t][tw], 256, "%s/tiny-%s-%s%s.gguf", dir, arch, t ? "bf16" : "f16", tw ? "-twin" : "");
            rg_tiny_config tc = {.arch = arch, .type = types[t], .seed = 42, .twin_f32 = tw == 1};
            if (rg_tiny_write(&tc, paths[t][tw], &err)) {
                printf("make tiny: %s\n", err.msg);
                return 1;
            }
        }
    // A stream the model learns but cannot memorise in the run, so the loss stays well above
    // zero and a relative gap means something.
    char corpus[300];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    FILE *cf = fopen(corpus, "w");
    if (!cf) return 1;
    fwrite(rg_tiny_corpus, 1, rg_tiny_corpus_len, cf);
    write_sentences(cf, (steps > 100 ? steps : 100) * CTX / 3);
    fclose(cf);
    rg_model *m0 = NULL;
    rg_tokenizer *tok = NULL;
    rg_dataset *d = NULL;
    rg_data_opts dopt = {.ctx = CTX, .pack = true, .seed = 7};
    if (rg_model_load(&m0, paths[0][1], &err) || rg_tokenizer_load(&tok, m0->file, &err) ||
        rg_dataset_load(&d, corpus, tok, NULL, &dopt, &err)) {
        printf("data: %s\n", err.msg);
        return 1;
    }
    b->n = rg_dataset_n_rows(d, 0);
    b->ids = malloc(sizeof(int32_t) * CTX * b->n), b->labels = malloc(sizeof(int32_t) * CTX * b->n);
    b->pos = malloc(sizeof(int32_t) * CTX * b->n), b->seg = malloc(sizeof(int32_t) * CTX * b->n);
    for (int64_t k = 0; k < b->n; k++)
        rg_dataset_row(d, 0, 0, k, b->ids + k * CTX, b->labels + k * CTX, b->pos + k * CTX, b->seg + k * CTX);
    rg_dataset_free(d);
    rg_tokenizer_free(tok);
    rg_model_free(m0);
    unlink(corpus);
    return 0;
}

static void prec_cleanup(const char *dir, char paths[2][2][256], bool made[2][2], batches *b) {
    for (int t = 0; t < 2; t++)
        for (int tw = 0; tw < 2; tw++)
            if (made[t][tw]) unlink(paths[t][tw]);
    rmdir(dir);
    free(b->ids), free(b->labels), free(b->pos), free(b->seg);
}

// One cell of the tables: storage half/twin (paths), optimizer, mode (master or in place).
typedef struct prec_cell {
    double grad, off, loss, smooth, final_loss;
    int64_t n_elems;
} prec_cell;

static int prec_measure(const prec_cfg *pc, char paths[2][256], int opt, bool master, int64_t steps,
                        const batches *b, prec_cell *out) {
    runner h, f;
    rg_error err = {0};
    if (runner_make(&h, pc, paths[0], opt, master, steps, false) || runner_make(&f, pc, paths[1], opt, false, steps, true))
        return 1;
    // section 4.1 and 4.2 on batch 0 from the identical initial weights
    step(&h, b, 0, false);
    step(&f, b, 0, false);
    out->grad = grad_gap(&h, &f, &out->n_elems);
    double gn, lr;
    bool sk;
    if (rg_train_state_step(h.s, &gn, &lr, &sk, &err) || rg_train_state_step(f.s, &gn, &lr, &sk, &err) ||
        rg_train_state_sync_host(h.s, &err) || rg_train_state_sync_host(f.s, &err)) {
        printf("step: %s\n", err.msg);
        return 1;
    }
    out->off = off_grid(&h, &f);
    runner_free(&h);
    runner_free(&f);
    // section 4.3: two free runs over the same batches
    if (runner_make(&h, pc, paths[0], opt, master, steps, false) || runner_make(&f, pc, paths[1], opt, false, steps, true))
        return 1;
    double lh = 0, lf = 0, sh = 0, sf = 0;
    const int64_t tail = steps < 100 ? steps / 4 + 1 : 100;
    for (int64_t k = 0; k < steps; k++) {
        lh = step(&h, b, k, true);
        lf = step(&f, b, k, true);
        if (k >= steps - tail) sh += lh, sf += lf;
    }
    out->loss = fabs(lh - lf) / lf;
    out->final_loss = lf;
    out->smooth = fabs(sh - sf) / sf;
    runner_free(&h);
    runner_free(&f);
    return 0;
}

// One column of the tables: where its runs trained and what they measured.
typedef struct prec_column {
    const char *name;         // "CPU", "CPU-tiles", "CUDA" (a GPU), "cuda-host" (the host execution of the CUDA code)
    rg_device device;
    int compute_dtype;        // the half runs' training.compute_dtype (0: f32 on the CPU, auto on a device)
    int seed_col;             // the seed's column printed beside it: SEED_CPU or SEED_CUDA
    int64_t steps;            // of the loss gap's runs
    int n_opt;                // optimizers measured: AdamW, then SGD
    prec_cell cell[2][2][2];  // [f16, bf16][adamw, sgd][in place, master]
} prec_column;

// The CUDA column's name: "CUDA" on a GPU, "cuda-host" on the host execution of the CUDA code
// (RETRO_CUDA_HOST=1), NULL when there is no device (why says so).
static const char *prec_cuda_name(char *why, size_t cap) {
    if (rg_cuda_device_count(why, cap) <= 0) return NULL;
    rg_cuda_device_info info;
    rg_error err = {0};
    if (rg_cuda_device_get(0, &info, &err)) {
        snprintf(why, cap, "%.200s", err.msg);
        return NULL;
    }
    return strstr(info.name, "host execution") ? "cuda-host" : "CUDA";
}

// Measures every cell of a column (the tables' runs on col->device).
static int prec_run_column(prec_column *col, const prec_cfg *base, char paths[2][2][256], const batches *b) {
    prec_cfg pc = *base;
    pc.device = col->device;
    pc.compute_dtype = col->compute_dtype ? col->compute_dtype
                       : col->device == RG_DEVICE_CPU ? RG_COMPUTE_F32 : RG_COMPUTE_AUTO;
    for (int t = 0; t < 2; t++)
        for (int opt = 0; opt < col->n_opt; opt++)
            for (int mode = 0; mode < 2; mode++)
                if (prec_measure(&pc, paths[t], opt == 0 ? RG_OPTIM_ADAMW : RG_OPTIM_SGD, mode == 1, col->steps, b,
                                 &col->cell[t][opt][mode]))
                    return 1;
    return 0;
}

// One table (optimizer opt, mode in place / master) with the columns side by side, F16's then
// BF16's, as the seed lays them out; with_seed: each cell followed by the seed's figure of the
// same column in brackets ([-]: the seed gives none there). bench_rows adds the smoothed loss
// gap and the twin's loss. A "-" cell: that optimizer was not run in that column.
static void prec_print_table(const prec_column *cols, int n_cols, int opt, int mode, bool with_seed, bool bench_rows,
                             const char *indent) {
    static const char *const rows[5] = {"worst relative gradient gap, one step", "elements > 1 grid point off after 1 step",
                                        "relative loss gap after the run's steps", "  the same, mean over the last steps",
                                        "  (the F32 twin's loss at that step)"};
    printf("%s%s, %s (%lld elements; the loss gap after", indent, opt ? "SGD" : "AdamW",
           mode ? "F32 master weights" : "in place (stochastic rounding)", (long long)cols[0].cell[0][0][0].n_elems);
    for (int k = 0; k < n_cols; k++) printf("%s %lld steps %s", k ? "," : "", (long long)cols[k].steps, cols[k].name);
    printf("%s):\n", with_seed ? "; [the seed's figure for the same column, after 2000 steps]" : "");
    printf("%s  %-40s", indent, "");
    char head[64];
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < n_cols; k++) {
            snprintf(head, sizeof head, "%s %s", t ? "BF16" : "F16", cols[k].name);
            printf(" %-19s", head);
        }
    printf("\n");
    for (int r = 0; r < (bench_rows ? 5 : 3); r++) {
        printf("%s  %-40s", indent, rows[r]);
        for (int t = 0; t < 2; t++)
            for (int k = 0; k < n_cols; k++) {
                const prec_column *c = &cols[k];
                char cell[64] = "-";
                if (opt < c->n_opt) {
                    const prec_cell *v = &c->cell[t][opt][mode];
                    const double x = r == 0 ? v->grad : r == 1 ? v->off : r == 2 ? v->loss : r == 3 ? v->smooth : v->final_loss;
                    const seed_cells *sd = &SEED[c->seed_col][t][opt][mode];
                    const double y = r == 0 ? sd->grad : r == 1 ? sd->off : sd->loss;
                    int len = snprintf(cell, sizeof cell, r == 4 ? "%.4f" : "%.1e", x);
                    if (with_seed && r < 3) {
                        if (y < 0) snprintf(cell + len, sizeof cell - (size_t)len, " [-]");
                        else snprintf(cell + len, sizeof cell - (size_t)len, " [%.1e]", y);
                    }
                }
                printf(" %-19s", cell);
            }
        printf("\n");
    }
}

#endif
