// bench_train_memory.c - the planned memory of a LoRA training step of SmolLM2-135M at long
// contexts: flash attention + layer recompute + the fused cross-entropy, against the
// materialized attention (with the same recompute and fused loss, and with neither), at
// ctx 1024, 4096 and 8192. The planner knows a step's peak before anything runs
// (rg_train_state_plan: the step built and planned as training would, nothing of its size
// allocated), so the 8192 rows cost a plan, not a step. What flash, recompute and the fused
// loss are for: the activations per token stay flat as the context grows, where the
// materialized attention's [ctx, ctx] scores (per layer with recompute, every layer without)
// and the [n_vocab, ctx] logits grow with it.
//
//   ./build/bench_train_memory   RG_SMOLLM2=F.gguf (the real Q4_1 file, scripts/smollm2.sh) or
//                                random weights with SmolLM2-135M's shape (make-tiny --shape
//                                smollm2, BF16, made in memory); RG_BENCH_MEM_CTX=1024,4096,8192;
//                                RG_BENCH_MEM_RUN=0 skips the confirming step at ctx 1024;
//                                RG_BENCH_THREADS=N
//
// LoRA rank 16, alpha 32, the seven projections, layer inputs kept in BF16 (with recompute),
// one row per step. Columns (MiB): the trainer's memory line's parts (weights, gradients, optimizer
// state, activations, scratch, total), then activations per token (KiB) and its ratio to
// the first context's. At ctx 1024 (unless RG_BENCH_MEM_RUN=0) the flash row is also created
// for real and one step run: its memory report must equal the plan, and the process's
// resident memory grows by about the plan's buffer and scratch (pages the step touches; with
// a file, also its mapped weights, read the first time).
//
// Measured (random BF16 weights, 2 cores shared with other jobs): activations per token with
// flash + recompute + fused CE 81.8, 79.6, 79.8 KiB at ctx 1024, 4096, 8192 (totals 419, 662,
// 994 MiB); the materialized attention with the same recompute and loss 167, 499, 947 KiB
// (totals 504 MiB, 2.3 GiB, 7.7 GiB); with neither 2.4, 5.6, 10.0 MiB per token (80 GiB at
// 8192). The step at 1024: 23 s, its report equal to the plan. The real Q4_1 file: the same
// activations, weights 110.7 MiB, totals 255 / 492 / 811 MiB with flash (14 s for the step).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "bench_util.h"
#include "model/tiny.h"
#include "train/train_state.h"

static double mib(size_t b) { return (double)b / 1048576.0; }

typedef struct mem_row {
    const char *what;
    rg_flash_attn_mode flash;
    rg_recompute recompute;
    rg_fused_ce fused;
} mem_row;

static const mem_row rows[] = {
    {"flash + recompute + fused CE", RG_FLASH_ATTN_ON, RG_RECOMPUTE_LAYER, RG_FUSED_CE_ON},
    {"materialized + recompute + fused CE", RG_FLASH_ATTN_OFF, RG_RECOMPUTE_LAYER, RG_FUSED_CE_ON},
    {"materialized, no recompute, unfused", RG_FLASH_ATTN_OFF, RG_RECOMPUTE_NONE, RG_FUSED_CE_OFF},
};

static rg_train_config row_config(const mem_row *r, int64_t ctx, int threads) {
    rg_train_config c;
    rg_train_config_defaults(&c);
    c.method = RG_TRAIN_LORA;
    c.lora_rank = 16;
    c.lora_alpha = 32;
    c.lora_targets = RG_LORA_Q | RG_LORA_K | RG_LORA_V | RG_LORA_O | RG_LORA_GATE | RG_LORA_UP | RG_LORA_DOWN;
    c.checkpoint_dtype = r->recompute == RG_RECOMPUTE_LAYER ? RG_TYPE_BF16 : RG_TYPE_F32;  // no inputs kept without it
    c.ctx = ctx;
    c.eval_split = 0;
    c.threads = threads;
    c.steps = 1;
    c.flash_attn = r->flash;
    c.recompute = r->recompute;
    c.fused_ce = r->fused;
    return c;
}

// The process's resident memory (VmRSS), bytes; 0 when /proc cannot say.
static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = (size_t)strtoull(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb * 1024;
}

// One real step of row r at ctx: the created state's report against the plan p.
static int confirm_step(const rg_model *m, const mem_row *r, int64_t ctx, int threads, const rg_train_memory *p) {
    rg_train_config c = row_config(r, ctx, threads);
    rg_error err = {0};
    rg_train_state *s = NULL;
    const size_t rss0 = rss_bytes();
    rg_train_spec sp;
    if (rg_train_config_validate(&c, &sp, &err) || rg_train_state_create(&s, m, &sp, 1, &err)) {
        printf("confirm at ctx %lld: %s\n", (long long)ctx, err.msg);
        return 1;
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)ctx * 4), *labels = ids + ctx, *pos = labels + ctx, *seg = pos + ctx;
    for (int64_t i = 0; i < ctx; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % m->hp.n_vocab), labels[i] = (int32_t)((i * 7919 + 7932) % m->hp.n_vocab),
        pos[i] = (int32_t)i, seg[i] = 0;
    const double t0 = bench_now();
    double loss, norm, lr;
    bool skipped;
    rg_status st = rg_train_state_micro(s, ids, labels, pos, seg, 1.0 / (double)ctx, &loss, &err);
    if (!st) st = rg_train_state_step(s, &norm, &lr, &skipped, &err);
    const double secs = bench_now() - t0;
    const rg_train_memory q = rg_train_state_memory(s);
    const size_t rss1 = rss_bytes();
    const bool same = q.weights == p->weights && q.gradients == p->gradients && q.optimizer == p->optimizer &&
                      q.activations == p->activations && q.scratch == p->scratch && q.flash_attn == p->flash_attn;
    if (st) printf("confirm at ctx %lld: %s\n", (long long)ctx, err.msg);
    else
        printf("confirmed at ctx %lld (%s): one step ran in %.1f s, loss %.4f; the run's report %s the plan (total %.1f "
               "MiB); resident memory grew %.1f MiB (the plan's buffer + scratch + optimizer: %.1f MiB, and a mapped "
               "file's weights as the step first reads them)\n",
               (long long)ctx, r->what, secs, loss, same ? "equals" : "DIFFERS FROM", mib(q.total), mib(rss1 - rss0),
               mib(q.gradients + q.activations + q.scratch + q.optimizer));
    free(ids);
    rg_train_state_free(s);
    return st || !same;
}

int main(void) {
    int threads = getenv("RG_BENCH_THREADS") ? atoi(getenv("RG_BENCH_THREADS")) : rg_cpu_count();
    if (threads < 1) threads = rg_cpu_count();
    int64_t ctxs[8] = {1024, 4096, 8192};
    int n_ctx = 3;
    const char *list = getenv("RG_BENCH_MEM_CTX");
    if (list && *list) {
        n_ctx = 0;
        for (char *end; *list && n_ctx < 8; list = *end ? end + 1 : end) {
            const long long v = strtoll(list, &end, 10);
            if (end == list) break;
            if (v > 0) ctxs[n_ctx++] = v;
        }
    }
    const char *run = getenv("RG_BENCH_MEM_RUN");
    const bool confirm = !run || strcmp(run, "0");
    rg_error err = {0};
    rg_model *m = NULL;
    const char *smol = getenv("RG_SMOLLM2");
    const char *what;
    if (smol && *smol) {
        if (rg_model_load(&m, smol, &err)) {
            fprintf(stderr, "bench_train_memory: %s\n", err.msg);
            return 1;
        }
        what = "SmolLM2-135M (RG_SMOLLM2)";
    } else {
        rg_tiny_config tc = {.arch = "llama", .type = RG_TYPE_BF16, .seed = 42, .shape = "smollm2", .n_threads = threads};
        rg_gguf *g = NULL;
        const double t0 = bench_now();
        if (rg_tiny_build(&tc, &g, &err) || rg_model_from_gguf(&m, g, &err)) {
            fprintf(stderr, "bench_train_memory: %s\n", err.msg);
            rg_gguf_free(g);
            return 1;
        }
        printf("(made make-tiny --shape smollm2 --type bf16 in memory in %.1f s)\n", bench_now() - t0);
        what = "SmolLM2-135M's shape, random BF16 weights";
    }
    printf("bench_train_memory: %s: %lld layers, n_embd %lld, %lld/%lld heads, vocabulary %lld; LoRA r16 on the seven "
           "projections, layer inputs in bf16, one row per step; planned, %d threads\n",
           what, (long long)m->hp.n_layer, (long long)m->hp.n_embd, (long long)m->hp.n_head, (long long)m->hp.n_head_kv,
           (long long)m->hp.n_vocab, threads);
    printf("%5s  %-36s | %8s %8s %8s %10s %8s %9s | %9s %6s\n", "ctx", "attention, activations", "weights", "grads",
           "optim", "activ", "scratch", "total", "KiB/token", "vs 1st");
    const int n_rows = (int)(sizeof rows / sizeof rows[0]);
    double first[8] = {0};
    int rc = 0;
    rg_train_memory confirm_plan = {0};
    for (int ci = 0; ci < n_ctx; ci++)
        for (int r = 0; r < n_rows; r++) {
            rg_train_config c = row_config(&rows[r], ctxs[ci], threads);
            rg_train_memory p;
            const double t0 = bench_now();
            rg_train_spec sp;
            if (rg_train_config_validate(&c, &sp, &err) || rg_train_state_plan(m, &sp, &p, &err)) {
                printf("%5lld  %-36s | %s\n", (long long)ctxs[ci], rows[r].what, err.msg);
                rc = 1;
                continue;
            }
            const double plan_s = bench_now() - t0;
            const double per_tok = (double)p.activations / (double)ctxs[ci] / 1024.0;
            if (ci == 0) first[r] = per_tok;
            if (ci == 0 && r == 0) confirm_plan = p;
            printf("%5lld  %-36s | %8.1f %8.1f %8.1f %10.1f %8.1f %9.1f | %9.2f %5.2fx  (planned in %.2f s)\n",
                   (long long)ctxs[ci], rows[r].what, mib(p.weights), mib(p.gradients), mib(p.optimizer),
                   mib(p.activations), mib(p.scratch), mib(p.total), per_tok, first[r] > 0 ? per_tok / first[r] : 0.0,
                   plan_s);
        }
    printf("KiB/token: activations / ctx; vs 1st: against the same row at ctx %lld\n", (long long)ctxs[0]);
    if (confirm && n_ctx > 0 && ctxs[0] <= 1024 && confirm_plan.total) rc |= confirm_step(m, &rows[0], ctxs[0], threads, &confirm_plan);
    rg_model_free(m);
    return rc;
}
