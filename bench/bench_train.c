// bench_train.c - training throughput: tokens/s and model FLOP utilisation of
// one optimizer step (forward, backward, AdamW), and peak memory beside the
// sum of what must be resident.
//
// A row "x4" accumulates 4 sequences per optimizer step (the AdamW step, ~0.2 s
// of memory traffic over 135M parameters, is then paid once per 1024 tokens).
//
//   ./bench_train [STEPS [FILTER]]   (only rows whose name contains FILTER; RG_SMOLLM2 = the SmolLM2-135M Q4_1 GGUF, for the SmolLM2 rows)
//
// One file instead of the rows (what the peer comparisons run, tools/reference/*_compare.py):
//   RG_BENCH_TRAIN_MODEL=F.gguf   train this file (any type): one row "file full" or "file lora r16"
//   RG_BENCH_TRAIN_METHOD=full    or lora (rank 16, alpha 32, all seven projections)
//   RG_BENCH_TRAIN_CTX=256        tokens per sequence (default 256, or the model's context if smaller)
//   RG_BENCH_THREADS=2            threads (default: all cores)
// and a line "step seconds: ..." with every timed step, so a script can take their median.
//
// On the CUDA device (train_device.c; scripts/gpu-check.sh runs this on a lent GPU):
//   RG_BENCH_DEVICE=cuda          every row trains on the device; MFU is then against the device's
//                                 BF16 dense tensor peak (a table of known devices by name below,
//                                 or RG_BENCH_PEAK_TFLOPS=989 to state it). Rows the device does not
//                                 train yet (F16/BF16 full fine-tuning) print the refusal. Under the
//                                 host execution of the CUDA code (RETRO_CUDA_HOST=1) the rows only
//                                 show that they run: those figures are CPU timings, never GPU ones.
//
// Rows: the tiny qwen2 fixture (F32 full), and SmolLM2-135M at context 256:
// F32, F16 and BF16 full fine-tuning (converted from the Q4_1 file with our
// quantizer, so the values are the same model's) and LoRA (rank 16, all seven
// projections) on the Q4_1 file itself; F32 full with layer recompute (inputs
// kept in F32, and in F16); F32 full and LoRA with the fused cross-entropy
// (training.fused_ce=on: no [49152, 256] logits). One sequence of 256 tokens per step,
// batch 1, all cores. Each row: one warm-up step, then the mean of STEPS
// timed steps (default 3).
//
// Model FLOPs per step (the convention of the issue): full fine-tuning
// 6 x parameters x tokens + attention (QK^T and PV: 2 matmuls x 2 FLOP x T^2 x
// H x Dh per layer, x3 for forward and backward); LoRA 4 x base parameters x
// tokens (forward and dX, no dW) + 6 x adapter parameters x tokens +
// attention. MFU = model FLOPs/s over the FMA peak of the cores used (32
// FLOP/cycle/core at the measured clock). No peer's figure is printed here: llama.cpp's
// finetune and PyTorch are measured beside this bench, in the same run, by
// tools/reference/llama_finetune_compare.py and torch_train_compare.py.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/threadpool.h"
#include "cuda/cuda.h"
#include "bench_util.h"
#include "model/model.h"
#include "model/quantize.h"
#include "model/tiny.h"
#include "train/progress.h"
#include "train/train_state.h"

typedef struct bench_row {
    const char *name;
    const char *path;
    rg_train_method method;
    int rows;  // rows of 256 tokens per optimizer step (gradient accumulation); 0 = 1
    rg_recompute recompute;  // training.recompute (0: auto, which keeps every activation when it fits)
    uint32_t ckpt;           // training.checkpoint_dtype (0: f32)
    rg_fused_ce fused;       // training.fused_ce (0: auto, which keeps the logits when they fit)
} bench_row;

static double model_flops(const rg_train_state *s, int64_t T) {
    const rg_hparams *hp = &s->model->hp;
    double attn = 3.0 * 2.0 * 2.0 * (double)T * (double)T * (double)hp->n_head * (double)hp->head_dim * (double)hp->n_layer;
    double n_base = 0, n_train = 0;
    const rg_gguf *f = s->model->file;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        double ne = 1;
        for (uint32_t d = 0; d < (f->tensors[i].n_dims ? f->tensors[i].n_dims : 1); d++) ne *= (double)f->tensors[i].ne[d];
        n_base += ne;
    }
    for (int k = 0; k < s->n_tensors; k++) n_train += (double)s->tensors[k].nel;
    if (s->cfg.method == RG_TRAIN_FULL) return 6.0 * n_base * (double)T + attn;
    return 4.0 * n_base * (double)T + 6.0 * n_train * (double)T + attn;
}

static const char *row_filter;
static int64_t row_ctx = 256;  // tokens per sequence (RG_BENCH_TRAIN_CTX)
static rg_device bench_device = RG_DEVICE_CPU;  // RG_BENCH_DEVICE

// The BF16 dense tensor-core peak (TFLOP/s, without sparsity) of the devices we know, by name.
static double device_bf16_peak_tflops(const char *name) {
    static const struct {
        const char *key;
        double tflops;
    } known[] = {{"H200", 989.4}, {"H100 SXM", 989.4}, {"H100 NVL", 835.0}, {"H100 PCIe", 756.0}, {"H100", 756.0},
                 {"A100", 312.0}, {"L40S", 362.1},    {"L4", 121.0},        {"RTX 4090", 165.2}, {"A10", 125.0}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strstr(name, known[i].key)) return known[i].tflops;
    return 0;
}
static bool print_steps;       // a line with every timed step's seconds (the one-file mode)

static int run_row(const bench_row *row, int steps, double peak_gflops, int threads) {
    if (row_filter && !strstr(row->name, row_filter)) return 0;
    rg_error err = {0};
    rg_model *m = NULL;
    if (rg_model_load(&m, row->path, &err)) {
        printf("%-22s  load failed: %s\n", row->name, err.msg);
        return 1;
    }
    rg_train_config c;
    rg_train_config_defaults(&c);
    c.method = row->method;
    c.recompute = row->recompute;
    c.checkpoint_dtype = row->ckpt;
    c.fused_ce = row->fused;
    c.ctx = m->hp.n_ctx_train < row_ctx ? m->hp.n_ctx_train : row_ctx;
    c.eval_split = 0;
    c.threads = threads;
    c.steps = steps + 1;
    const int rows = row->rows > 0 ? row->rows : 1;
    c.grad_accum = rows;
    rg_train_state *s = NULL;
    double rss0 = rg_rss_mib();
    if (rg_train_state_create_on(&s, m, &c, steps + 1, 0, bench_device, &err)) {
        printf("%-22s  setup failed: %s\n", row->name, err.msg);
        rg_model_free(m);
        return 1;
    }
    const int64_t T = c.ctx;
    int32_t *ids = malloc(sizeof(int32_t) * T), *labels = malloc(sizeof(int32_t) * T), *pos = malloc(sizeof(int32_t) * T),
            *seg = malloc(sizeof(int32_t) * T);
    uint64_t x = 12345;
    for (int64_t i = 0; i < T; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)m->hp.n_vocab);
        pos[i] = (int32_t)i, seg[i] = 0;
    }
    for (int64_t i = 0; i < T; i++) labels[i] = i + 1 < T ? ids[i + 1] : -100;
    double best = 1e30, total = 0, *step_s = calloc((size_t)steps + 1, sizeof *step_s);
    int rc = 0;
    for (int k = 0; k <= steps; k++) {
        double t0 = bench_now(), loss = 0, gn = 0, lr = 0;
        bool skipped = false;
        bool fail = false;
        for (int rr = 0; rr < rows && !fail; rr++)
            fail = rg_train_state_micro(s, ids, labels, pos, seg, 1.0 / (double)(rows * (T - 1)), &loss, &err) != RG_OK;
        if (fail || rg_train_state_step(s, &gn, &lr, &skipped, &err)) {
            printf("%-22s  step failed: %s\n", row->name, err.msg);
            rc = 1;
            break;
        }
        double dt = bench_now() - t0;
        if (k > 0) total += dt, best = dt < best ? dt : best, step_s[k] = dt;
    }
    if (!rc && getenv("RG_BENCH_OPS") && bench_device == RG_DEVICE_CPU) {
        // Where a step goes: every node run alone (rg_exec_run over [i, i+1)), summed per op.
        double op_s[RG_OP_COUNT] = {0};
        int op_n[RG_OP_COUNT] = {0};
        rg_graph *g = s->g;
        double t_all = bench_now();
        double *node_s = calloc((size_t)g->n_nodes, sizeof *node_s);
        for (int i = 0; i < g->n_nodes; i++) {
            double t0 = bench_now();
            if (rg_exec_run(s->ex, i, i + 1, &err)) break;
            node_s[i] = bench_now() - t0;
            op_s[g->nodes[i]->op] += node_s[i];
            op_n[g->nodes[i]->op]++;
        }
        t_all = bench_now() - t_all;
        double t_norm = bench_now();
        rg_grad_global_norm(s->tensors, s->n_tensors, s->pool);  // the part of the step before the update
        t_norm = bench_now() - t_norm;
        double t_opt = bench_now(), gn = 0, lr = 0;
        bool sk = false;
        rg_train_state_step(s, &gn, &lr, &sk, &err);
        t_opt = bench_now() - t_opt;
        printf("  per op (forward + backward %.3f s; optimizer step %.3f s, of which the global norm %.3f s):\n", t_all,
               t_opt, t_norm);
        for (int o = 0; o < RG_OP_COUNT; o++)
            if (op_n[o] && op_s[o] > 0.002)
                printf("    %-26s %4d nodes %8.3f s %5.1f%%\n", rg_op_name((rg_op)o), op_n[o], op_s[o], 100.0 * op_s[o] / t_all);
        // the slowest single nodes, with their sources' shapes and types
        for (int rank = 0; rank < 12; rank++) {
            int best = -1;
            for (int i = 0; i < g->n_nodes; i++)
                if (node_s[i] > 0 && (best < 0 || node_s[i] > node_s[best])) best = i;
            if (best < 0) break;
            const rg_node *n = g->nodes[best];
            char sh[3][64] = {"", "", ""};
            rg_tensor_shape_str(&n->t, sh[0], 64);
            for (int k = 0; k < 2; k++)
                if (n->src[k]) rg_tensor_shape_str(&n->src[k]->t, sh[k + 1], 64);
            printf("      %.4f s  %-10s %-28.28s out %s  src0 %s %s  src1 %s %s\n", node_s[best], rg_op_name(n->op), n->t.name,
                   sh[0], n->src[0] ? rg_type_get(n->src[0]->t.type)->name : "", sh[1],
                   n->src[1] ? rg_type_get(n->src[1]->t.type)->name : "", sh[2]);
            node_s[best] = 0;
        }
        free(node_s);
    }
    if (!rc) {
        double mean = total / steps, flops = model_flops(s, T) * rows;
        rg_train_memory mem = rg_train_state_memory(s);
        double peak = rg_peak_rss_mib(), need = (double)mem.total / 1048576.0;
        double tps = (double)(rows * T) / mean;
        printf("%-26s  %8.1f tok/s  (best %7.1f)  %6.1f GFLOP/s  MFU %5.1f%%  activations %6.1f MiB  peak RSS %7.1f MiB vs "
               "resident sum %7.1f MiB (%.2fx)",
               row->name, tps, (double)(rows * T) / best, flops / mean * 1e-9, 100.0 * flops / mean * 1e-9 / peak_gflops,
               (double)mem.activations / 1048576.0, peak, need + rss0, peak / (need + rss0));
        printf("\n");
        if (print_steps) {
            printf("step seconds (%lld tokens each):", (long long)(rows * T));
            for (int k = 1; k <= steps; k++) printf(" %.4f", step_s[k]);
            printf("\n");
        }
    }
    free(ids), free(labels), free(pos), free(seg), free(step_s);
    rg_train_state_free(s);
    rg_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    if (steps < 1) steps = 1;
    row_filter = argc > 2 ? argv[2] : NULL;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *env_threads = getenv("RG_BENCH_THREADS"), *env_ctx = getenv("RG_BENCH_TRAIN_CTX");
    if (env_threads && atoi(env_threads) > 0) threads = atoi(env_threads);
    if (env_ctx && atoi(env_ctx) > 1) row_ctx = atoi(env_ctx);
    double mhz = bench_measured_mhz();
    double peak = 32.0 * mhz * 1e-3 * threads;
    const char *env_dev = getenv("RG_BENCH_DEVICE");
    if (env_dev && !strcmp(env_dev, "cuda")) {
        bench_device = RG_DEVICE_CUDA;
        rg_cuda_device_info info;
        rg_error derr = {0};
        char why[256];
        if (rg_cuda_device_count(why, sizeof why) <= 0 || rg_cuda_device_get(0, &info, &derr)) {
            printf("bench_train: RG_BENCH_DEVICE=cuda but there is no CUDA device: %s\n", derr.msg[0] ? derr.msg : why);
            return 1;
        }
        const char *env_peak = getenv("RG_BENCH_PEAK_TFLOPS");
        const double tflops = env_peak && atof(env_peak) > 0 ? atof(env_peak) : device_bf16_peak_tflops(info.name);
        const bool host = strstr(info.name, "host execution") != NULL;
        peak = tflops * 1e3;
        printf("bench_train: on %s (compute %d.%d, %zu MiB); MFU against its BF16 dense peak of %.1f TFLOP/s%s; context %lld, "
               "batch 1, AdamW; %d timed steps after one warm-up\n",
               info.name, info.major, info.minor, info.total_mem >> 20, tflops,
               host ? " (a nominal figure: the host execution is the CPU, so tokens/s and MFU here are CPU timings, not GPU "
                      "results; the rows only show that they run)"
               : tflops > 0 ? "" : " (unknown device: set RG_BENCH_PEAK_TFLOPS; MFU prints as 0)",
               (long long)row_ctx, steps);
        if (peak <= 0) peak = 1e30;
    } else {
        printf("bench_train: %d threads, clock %.0f MHz measured, FMA peak %.1f GFLOP/s; context %lld (tiny: its own), batch "
               "1, AdamW; %d timed steps after one warm-up\n", threads, mhz, peak, (long long)row_ctx, steps);
    }
    const char *one = getenv("RG_BENCH_TRAIN_MODEL");
    if (one && *one) {
        const char *method = getenv("RG_BENCH_TRAIN_METHOD");
        bool lora = method && !strcmp(method, "lora");
        if (method && !lora && strcmp(method, "full")) {
            printf("RG_BENCH_TRAIN_METHOD '%s' is not full or lora\n", method);
            return 2;
        }
        print_steps = true;
        return run_row(&(bench_row){.name = lora ? "file lora r16" : "file full", .path = one,
                                    .method = lora ? RG_TRAIN_LORA : RG_TRAIN_FULL, .rows = 1}, steps, peak, threads);
    }
    printf("(each row is a separate process state; peak RSS is the process's high-water mark so far, so later rows "
           "include earlier peaks)\n");
    char dir[] = "/tmp/rg_bench_train_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char tiny[256], f32[256], f16[256], bf16[256];
    snprintf(tiny, sizeof tiny, "%s/tiny.gguf", dir);
    rg_error err = {0};
    rg_tiny_config tc = {.arch = "qwen2", .type = RG_TYPE_F32, .seed = 42};
    if (rg_tiny_write(&tc, tiny, &err)) {
        printf("tiny: %s\n", err.msg);
        return 1;
    }
    int rc = run_row(&(bench_row){.name = "tiny qwen2 f32 full", .path = tiny, .method = RG_TRAIN_FULL, .rows = 1}, steps * 4, peak, threads);
    const char *smol = getenv("RG_SMOLLM2");
    if (!smol || !*smol) {
        printf("smollm2 rows: skipped (set RG_SMOLLM2 to the SmolLM2-135M-Instruct Q4_1 GGUF; scripts/smollm2.sh prints it)\n");
    } else {
        snprintf(f32, sizeof f32, "%s/smol-f32.gguf", dir);
        snprintf(f16, sizeof f16, "%s/smol-f16.gguf", dir);
        snprintf(bf16, sizeof bf16, "%s/smol-bf16.gguf", dir);
        const char *outs[3] = {f32, f16, bf16};
        const char *types[3] = {"F32", "F16", "BF16"};
        const char *names[3] = {"smollm2 f32 full", "smollm2 f16 full", "smollm2 bf16 full"};
        for (int i = 0; i < 3; i++) {
            if (row_filter && !strstr(names[i], row_filter)) continue;
            rg_quantize_opts qo;
            memset(&qo, 0, sizeof qo);
            qo.allow_requantize = true;
            rg_quantize_summary qs;
            if (rg_quantize_file(smol, outs[i], types[i], &qo, &qs, &err)) {
                printf("convert to %s: %s\n", types[i], err.msg);
                return 1;
            }
            rc |= run_row(&(bench_row){.name = names[i], .path = outs[i], .method = RG_TRAIN_FULL, .rows = 1}, steps, peak, threads);
            if (i == 0) {  // the AdamW step shared by 4 rows (gradient accumulation 4); activation recompute
                rc |= run_row(&(bench_row){.name = "smollm2 f32 full x4", .path = outs[i], .method = RG_TRAIN_FULL, .rows = 4}, steps, peak, threads);
                rc |= run_row(&(bench_row){.name = "smollm2 f32 full recompute", .path = outs[i], .method = RG_TRAIN_FULL,
                                           .rows = 1, .recompute = RG_RECOMPUTE_LAYER},
                              steps, peak, threads);
                rc |= run_row(&(bench_row){.name = "smollm2 f32 full ckpt f16", .path = outs[i], .method = RG_TRAIN_FULL,
                                           .rows = 1, .recompute = RG_RECOMPUTE_LAYER, .ckpt = RG_TYPE_F16}, steps, peak, threads);
                rc |= run_row(&(bench_row){.name = "smollm2 f32 full fused", .path = outs[i], .method = RG_TRAIN_FULL,
                                           .rows = 1, .fused = RG_FUSED_CE_ON}, steps, peak, threads);
            }
            unlink(outs[i]);
        }
        rc |= run_row(&(bench_row){.name = "smollm2 q4_1 lora r16", .path = smol, .method = RG_TRAIN_LORA, .rows = 1}, steps, peak, threads);
        rc |= run_row(&(bench_row){.name = "smollm2 q4_1 lora fused", .path = smol, .method = RG_TRAIN_LORA, .rows = 1,
                                   .fused = RG_FUSED_CE_ON}, steps, peak, threads);
    }
    unlink(tiny);
    rmdir(dir);
    return rc;
}
