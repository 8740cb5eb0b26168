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
//                                 BF16 dense tensor peak (bench_util.h's table of known devices by
//                                 name, or RG_BENCH_PEAK_TFLOPS=989 to state it). Rows the device does
//                                 not train yet (F16/BF16 full fine-tuning) print the refusal and do
//                                 not fail the bench. After its timed steps each row runs one more
//                                 step with the executor's profile (which synchronizes the device
//                                 after every node) and prints the step's time per op, the ops that
//                                 fell back to the CPU and the bytes the step copied. Under the host
//                                 execution of the CUDA code (RETRO_CUDA_HOST=1) the rows only show
//                                 that they run: the tiny-shape rows, one timed step at context 32;
//                                 the smollm2 and 1b shapes are skipped with a line (minutes to hours
//                                 there); those figures are CPU timings, never GPU ones.
//
// Quantized rows (issue 24; FILTER must name "q4_k_m", e.g. "smollm2-shape q4_k_m"): the shape's
// BF16 file quantized to Q4_K_M (SHAPE-Q4_K_M.gguf, as `retrograd quantize F OUT Q4_K_M`), LoRA r16
// with the default loss ("q4_k_m lora r16"), the fused cross-entropy ("fused-ce") and the
// materialized logits ("unfused-ce"). On a device the MFU is against the dense BF16 peak measured at
// the start (bench_gpu_peak.h: a BF16 GEMM through MUL_MAT on the device; RG_BENCH_PEAK_TFLOPS
// overrides) and each row also prints it against the card's nominal peak, its device memory by part
// beside the sum the plan says must be resident, and the loss's logits and dh sizes. Under
// RETRO_REQUIRE_GPU_RESIDENT=1 a step with an op the device cannot run is refused, naming the node.
//
// Shape rows (make-tiny --arch llama --shape: random weights, tied; the GPU check's rows, since it
// has no download): "tiny-shape" (the tiny llama: a step's fixed costs) at context 256,
// "smollm2-shape" (SmolLM2-135M's dimensions) at 1024 and "1b-shape" (Llama-3.2-1B's) at 2048
// (RG_BENCH_TRAIN_CTX overrides), each F32 full fine-tuning, LoRA r16 (seven projections) on the
// BF16 file, BF16 and F16 full fine-tuning. They run by default on the device; on the CPU only
// when FILTER names them (FILTER shape: all of them; a 1b step is minutes on two cores). Files are
// made on first use into RG_BENCH_SHAPES=DIR as SHAPE-TYPE.gguf and kept there (reused by later
// runs), or into the bench's temporary folder and removed after their rows.
//
// Mixed-precision rows (issue 25: products in BF16 on the CPU's matrix unit, training.compute_dtype;
// CPU only, when FILTER names "mixed", e.g. "1b-shape mixed" or "1b-shape mixed q4_k_m lora r16
// @bf16 c256"): "SHAPE-shape mixed FILE METHOD @COMPUTE cCTX". LoRA r16 (seven projections) on the
// BF16, Q4_K_M and F32 files of the 1b shape at context 256 and 1024, each with compute_dtype bf16
// and f32; full fine-tuning of the smollm2 shape at 256 from BF16 and F32, each @bf16 and @f32;
// the tiny shape's c256 rows of both as a smoke run. A row @bf16 where rg_gemm_tiles_path() is NONE prints
// "needs a matrix unit" and why, and is no failure. Every row's MFU is printed twice: against the
// FP32 FMA peak and against the tile peak measured at the start of the same run (a
// register-resident TDPBF16PS loop on the row's threads, bench_tile_peak.h; "-" without AMX).
// Under RG_TILES_EMULATE=1 the @bf16 rows run on the emulated tiles: labelled "emulated, not a
// matrix-unit result" (the tiny shape's rows only show that they run).
//   RG_BENCH_TRAIN_COMPUTE=auto   the one-file mode's training.compute_dtype (auto, f32, bf16)
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
// FLOP/cycle/core at the measured clock, 64 where two 512-bit FMA pipes are measured). No peer's figure is printed here: llama.cpp's
// finetune and PyTorch are measured beside this bench, in the same run, by
// tools/reference/llama_finetune_compare.py and torch_train_compare.py.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/threadpool.h"
#include "cpu/gemm_tiles.h"
#include "cpu/tiles_cache.h"
#include "cuda/cuda.h"
#include "bench_gpu_peak.h"
#include "bench_tile_peak.h"
#include "bench_util.h"
#include "graph/backend.h"
#include "graph/ops.h"
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
    int64_t ctx;             // tokens per sequence (0: RG_BENCH_TRAIN_CTX's, default 256)
    int compute;             // training.compute_dtype (enum rg_compute_dtype; 0: auto)
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
static bool row_ctx_given;     // RG_BENCH_TRAIN_CTX was set: it applies to the shape rows too
static rg_device bench_device = RG_DEVICE_CPU;  // RG_BENCH_DEVICE
static bool device_is_host;    // the device is the host execution of the CUDA code, not a GPU
static bool print_steps;       // a line with every timed step's seconds (the one-file mode)
static double peak_nominal_gflops;  // on a device: the card's nominal dense BF16 peak, when the MFU is against a measured one
static double tile_peak_gflops;     // on the CPU: the TDPBF16PS peak of the threads used, measured at the start (0: none)

static const char *compute_name(int compute) {
    return compute == RG_COMPUTE_BF16 ? "bf16" : compute == RG_COMPUTE_F32 ? "f32" : "auto";
}

// One sequence's tokens (random ids; labels the next id).
typedef struct row_input {
    int32_t *ids, *labels, *pos, *seg;
} row_input;

static bool row_input_make(row_input *in, int64_t T, int64_t n_vocab) {
    in->ids = malloc(sizeof(int32_t) * T), in->labels = malloc(sizeof(int32_t) * T);
    in->pos = malloc(sizeof(int32_t) * T), in->seg = malloc(sizeof(int32_t) * T);
    if (!in->ids || !in->labels || !in->pos || !in->seg) return false;
    uint64_t x = 12345;
    for (int64_t i = 0; i < T; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        in->ids[i] = (int32_t)((x >> 33) % (uint64_t)n_vocab);
        in->pos[i] = (int32_t)i, in->seg[i] = 0;
    }
    for (int64_t i = 0; i < T; i++) in->labels[i] = i + 1 < T ? in->ids[i + 1] : -100;
    return true;
}

static void row_input_free(row_input *in) { free(in->ids), free(in->labels), free(in->pos), free(in->seg); }

// One optimizer step over `rows` copies of the sequence.
static rg_status one_step(rg_train_state *s, const row_input *in, int rows, int64_t T, rg_error *err) {
    double loss = 0, gn = 0, lr = 0;
    bool skipped = false;
    for (int r = 0; r < rows; r++) {
        rg_status st = rg_train_state_micro(s, in->ids, in->labels, in->pos, in->seg, 1.0 / (double)(rows * (T - 1)),
                                            &loss, err);
        if (st) return st;
    }
    return rg_train_state_step(s, &gn, &lr, &skipped, err);
}

// Where a step goes on the CPU: every node run alone (rg_exec_run over [i, i+1)), summed per op (RG_BENCH_OPS=1;
// RG_BENCH_OPS=shapes also per op and shapes).
static void cpu_ops_table(rg_train_state *s) {
    double op_s[RG_OP_COUNT] = {0};
    int op_n[RG_OP_COUNT] = {0};
    rg_graph *g = s->g;
    rg_error err = {0};
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
    rg_exec_run(s->oex, 0, s->og.seg_norm, &err);  // the optimizer graph's norm segment: the step before the update
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
    // RG_BENCH_OPS=shapes: the time summed over the nodes of one op and the same shapes and
    // types (out, src0, src1), the 20 largest groups: where the small products of LoRA go
    const char *mode = getenv("RG_BENCH_OPS");
    if (mode && !strcmp(mode, "shapes")) {
        enum { SIG = 160 };
        char(*sig)[SIG] = calloc((size_t)g->n_nodes, SIG);
        double *grp_s = calloc((size_t)g->n_nodes, sizeof *grp_s);
        int *grp_n = calloc((size_t)g->n_nodes, sizeof *grp_n), n_grp = 0;
        int *grp_of = calloc((size_t)g->n_nodes, sizeof *grp_of);
        for (int i = 0; sig && grp_s && grp_n && grp_of && i < g->n_nodes; i++) {
            if (!(node_s[i] > 0)) continue;
            const rg_node *n = g->nodes[i];
            char sh[3][48] = {"", "", ""};
            rg_tensor_shape_str(&n->t, sh[0], 48);
            for (int k = 0; k < 2; k++)
                if (n->src[k]) rg_tensor_shape_str(&n->src[k]->t, sh[k + 1], 48);
            char one[SIG];
            snprintf(one, SIG, "%-10s out %s  src0 %s  src1 %s", rg_op_name(n->op), sh[0], sh[1], sh[2]);
            int gi = 0;
            while (gi < n_grp && strcmp(sig[grp_of[gi]], one)) gi++;
            if (gi == n_grp) grp_of[n_grp++] = i, memcpy(sig[i], one, SIG);
            grp_s[gi] += node_s[i], grp_n[gi]++;
        }
        printf("  per op and shape (the 20 largest groups):\n");
        for (int rank = 0; rank < 20 && grp_s; rank++) {
            int best = -1;
            for (int gi = 0; gi < n_grp; gi++)
                if (grp_s[gi] > 0 && (best < 0 || grp_s[gi] > grp_s[best])) best = gi;
            if (best < 0) break;
            printf("    %8.3f s %5.1f%%  x%-4d %s\n", grp_s[best], 100.0 * grp_s[best] / t_all, grp_n[best],
                   sig[grp_of[best]]);
            grp_s[best] = 0;
        }
        free(sig), free(grp_s), free(grp_n), free(grp_of);
    }
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

// The step graph's nodes the scheduler put on the CPU although the device was asked for, per op.
static void print_fallbacks(const rg_graph *g) {
    int n_op[RG_OP_COUNT] = {0}, total = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const rg_node *n = g->nodes[i];
        if (n->op == RG_OP_NONE || rg_op_defs[n->op].is_view || n->backend != RG_BACKEND_CPU) continue;
        n_op[n->op]++, total++;
    }
    printf("  step graph: %d of %d nodes fall back to the CPU%s", total, g->n_nodes, total ? ":" : "");
    for (int o = 0; o < RG_OP_COUNT; o++)
        if (n_op[o]) printf(" %s x%d", rg_op_name((rg_op)o), n_op[o]);
    printf("\n");
}

// One more step with the executor's profile on (the device synchronized after every node, so it
// is not one of the timed steps): where the step's time goes per op, what fell back, what it copied.
static int device_profile(rg_train_state *s, const row_input *in, int rows, int64_t T) {
    static rg_exec_profile prof;
    memset(&prof, 0, sizeof prof);
    rg_error err = {0};
    const rg_exec_stats before = rg_exec_get_stats(s->ex);
    rg_train_state_set_profile(s, &prof);
    const double t0 = bench_now();
    rg_status st = one_step(s, in, rows, T, &err);
    const double dt = bench_now() - t0;
    rg_train_state_set_profile(s, NULL);
    if (st) {
        printf("  profiled step failed: %s\n", err.msg);
        return 1;
    }
    const rg_exec_stats after = rg_exec_get_stats(s->ex);
    print_fallbacks(s->g);
    printf("  the step's copies between the CPU and the device: %.1f MiB in, %.1f MiB out (%llu + %llu copies); inputs "
           "%.3f MiB\n", (double)(after.bytes_to_device - before.bytes_to_device) / 1048576.0,
           (double)(after.bytes_to_host - before.bytes_to_host) / 1048576.0,
           (unsigned long long)(after.copies_to_device - before.copies_to_device),
           (unsigned long long)(after.copies_to_host - before.copies_to_host),
           (double)(after.input_bytes - before.input_bytes) / 1048576.0);
    // The whole step (its graph's runs and the optimizer's) as one run, so the shares are of the step.
    prof.runs = 1, prof.run_s = dt;
    printf("  one profiled step, %.3f s (the device synchronized after every node; the step's graph and optimizer runs "
           "counted as one run):\n  ", dt);
    rg_exec_profile_print(&prof, stdout);
    return 0;
}

// A device row's memory: what this process holds on the device by part, beside the sum the plan
// says must be resident (weights + adapters + gradients + optimizer state + activations + scratch,
// the trainer's memory line), the whole device's use (the CUDA context and other processes
// included), and the loss's reference sizes: the [n_vocab, T] F32 logits the fused cross-entropy
// never holds, and dh [n_embd, T], what it holds instead with one vocabulary chunk.
static void print_device_memory(const rg_train_memory *mem, const rg_model *m, int64_t T) {
    const double M = 1048576.0;
    printf("  device memory: this process %.1f MiB (weights %.1f, gradients %.1f, optimizer %.1f, activations %.1f, "
           "scratch %.1f); the whole device uses %.1f MiB, %.1f free\n",
           (double)mem->scratch_total / M, (double)mem->scratch_weights / M, (double)mem->scratch_gradients / M,
           (double)mem->scratch_optimizer / M, (double)mem->scratch_activations / M, (double)mem->scratch_scratch / M,
           (double)mem->device_used / M, (double)mem->device_free / M);
    // What must be resident: the file's tensors as stored and the adapters (the host report's weights,
    // not what the device holds), and the device plans' gradients, optimizer state, activations and scratch.
    const size_t need = mem->weights + mem->scratch_gradients + mem->scratch_optimizer + mem->scratch_activations +
                        mem->scratch_scratch;
    printf("  must be resident by the plan: %.1f MiB = weights as stored and adapters %.1f + gradients %.1f + optimizer "
           "%.1f + activations %.1f + scratch %.1f (this process / that: %.2fx)\n", (double)need / M,
           (double)mem->weights / M, (double)mem->scratch_gradients / M, (double)mem->scratch_optimizer / M,
           (double)mem->scratch_activations / M, (double)mem->scratch_scratch / M,
           need ? (double)mem->scratch_total / (double)need : 0.0);
    printf("  loss: %s; the [n_vocab, T] = [%lld, %lld] F32 logits are %.1f MiB, dh [%lld, %lld] F32 %.1f MiB%s%s\n",
           mem->fused_ce ? "the fused cross-entropy (LINEAR_CE, by vocabulary chunks)" : "materialized logits",
           (long long)m->hp.n_vocab, (long long)T, (double)m->hp.n_vocab * (double)T * 4 / M, (long long)m->hp.n_embd,
           (long long)T, (double)m->hp.n_embd * (double)T * 4 / M, mem->recompute ? "; layer recompute" : "",
           mem->flash_attn ? "; flash attention" : "");
}

static int run_row(const bench_row *row, int steps, double peak_gflops, int threads) {
    if (row_filter && !strstr(row->name, row_filter)) return 0;
    const rg_tile_path tiles = rg_gemm_tiles_path();
    if (row->compute == RG_COMPUTE_BF16 && bench_device == RG_DEVICE_CPU && tiles == RG_TILES_NONE) {
        printf("%-26s  needs a matrix unit (training.compute_dtype=bf16): %s\n", row->name, rg_gemm_tiles_missing());
        return print_steps ? 3 : 0;  // the one-file mode: no step line, a status the compare scripts read
    }
    rg_error err = {0};
    rg_model *m = NULL;
    if (rg_model_load(&m, row->path, &err)) {
        printf("%-26s  load failed: %s\n", row->name, err.msg);
        return 1;
    }
    rg_train_config c;
    rg_train_config_defaults(&c);
    c.method = row->method;
    c.recompute = row->recompute;
    c.checkpoint_dtype = row->ckpt;
    c.fused_ce = row->fused;
    c.compute_dtype = row->compute;
    const int64_t want = row->ctx > 0 && !row_ctx_given ? row->ctx : row_ctx;
    c.ctx = m->hp.n_ctx_train < want ? m->hp.n_ctx_train : want;
    c.eval_split = 0;
    c.threads = threads;
    c.steps = steps + (bench_device != RG_DEVICE_CPU ? 2 : 1);  // the warm-up, the timed steps, on a device the profiled one
    const int rows = row->rows > 0 ? row->rows : 1;
    c.grad_accum = rows;
    rg_train_state *s = NULL;
    double rss0 = rg_rss_mib();
    rg_train_spec sp;
    rg_status st = rg_train_config_validate(&c, &sp, &err);
    if (!st) st = rg_train_state_create_on(&s, m, &sp, c.steps, bench_device, &err);
    if (st == RG_ERR_UNSUPPORTED && bench_device != RG_DEVICE_CPU) {
        printf("%-26s  refused by the device (a limit of the device backend or RETRO_REQUIRE_GPU_RESIDENT=1's refusal, "
               "not a failure of the bench): %s\n", row->name, err.msg);
        rg_model_free(m);
        return 0;
    }
    if (st) {
        printf("%-26s  setup failed: %s\n", row->name, err.msg);
        rg_model_free(m);
        return 1;
    }
    const int64_t T = c.ctx;
    row_input in;
    double best = 1e30, total = 0, *step_s = calloc((size_t)steps + 1, sizeof *step_s);
    int rc = row_input_make(&in, T, m->hp.n_vocab) && step_s ? 0 : 1;
    for (int k = 0; k <= steps && !rc; k++) {
        double t0 = bench_now();
        if (one_step(s, &in, rows, T, &err)) {
            printf("%-26s  step failed: %s\n", row->name, err.msg);
            rc = 1;
            break;
        }
        double dt = bench_now() - t0;
        if (k > 0) total += dt, best = dt < best ? dt : best, step_s[k] = dt;
    }
    if (!rc && getenv("RG_BENCH_OPS") && bench_device == RG_DEVICE_CPU) cpu_ops_table(s);
    if (!rc) {
        double mean = total / steps, flops = model_flops(s, T) * rows;
        rg_train_memory mem = rg_train_state_memory(s);
        double peak = rg_peak_rss_mib(), need = (double)mem.total / 1048576.0;
        double tps = (double)(rows * T) / mean;
        printf("%-26s  %8.1f tok/s  (best %7.1f)  %6.1f GFLOP/s  MFU %5.1f%%  activations %6.1f MiB  peak RSS %7.1f MiB vs "
               "resident sum %7.1f MiB (%.2fx)",
               row->name, tps, (double)(rows * T) / best, flops / mean * 1e-9, 100.0 * flops / mean * 1e-9 / peak_gflops,
               (double)mem.activations / 1048576.0, peak, need + rss0, peak / (need + rss0));
        if (bench_device == RG_DEVICE_CPU) {
            if (tile_peak_gflops > 0)
                printf("  MFU of the tile peak %5.1f%%", 100.0 * flops / mean * 1e-9 / tile_peak_gflops);
            else
                printf("  MFU of the tile peak -");
            if (row->compute != RG_COMPUTE_AUTO) printf("  compute_dtype %s", compute_name(row->compute));
            if (row->compute == RG_COMPUTE_BF16 && tiles == RG_TILES_EMULATED)
                printf(" (emulated, not a matrix-unit result)");
            else if (row->compute == RG_COMPUTE_AUTO && tiles == RG_TILES_EMULATED)
                printf("  (RG_TILES_EMULATE=1: auto picks the emulated tiles for BF16 weights: not a matrix-unit result)");
            if (s->tiles) {  // the frozen base as BF16 tiles (cpu/tiles_cache.h): held once, not counted in the resident sum
                const rg_tiles_cache_stats tc = rg_tiles_cache_get_stats(s->tiles);
                printf("  bf16 tiles held %.1f of %.1f MiB wanted (%lld refused)", (double)tc.bytes / 1048576.0,
                       (double)mem.tiles_wanted / 1048576.0, (long long)tc.refused);
            }
        }
        if (row->ctx > 0 || row_ctx_given) printf("  context %lld", (long long)T);
        if (bench_device != RG_DEVICE_CPU && peak_nominal_gflops > 0)
            printf("  MFU %.1f%% of the nominal %.0f TFLOP/s", 100.0 * flops / mean * 1e-9 / peak_nominal_gflops,
                   peak_nominal_gflops * 1e-3);
        printf("\n");
        if (mem.on_device) print_device_memory(&mem, m, T);
        if (print_steps) {
            printf("step seconds (%lld tokens each):", (long long)(rows * T));
            for (int k = 1; k <= steps; k++) printf(" %.4f", step_s[k]);
            printf("\n");
        }
        fflush(stdout);
    }
    if (!rc && bench_device != RG_DEVICE_CPU) rc = device_profile(s, &in, rows, T);
    row_input_free(&in);
    free(step_s);
    rg_train_state_free(s);
    rg_model_free(m);
    return rc;
}

// The shape rows: every variant of every shape, in this order (a file's rows together; the
// refused variants last, so a device run spends its time on the rows it trains first).
static const struct shape_size {
    const char *shape;
    int64_t ctx;
} shape_sizes[] = {{"tiny", 256}, {"smollm2", 1024}, {"1b", 2048}};

// The quantized LoRA variants run only when FILTER contains "q4_k_m" (scripts/gpu-check.sh's step
// with RETRO_REQUIRE_GPU_RESIDENT=1): their file is the BF16 one quantized as `retrograd quantize
// F Q4_K_M` does. The three differ in the loss only: the default (training.fused_ce=auto), the
// fused cross-entropy (LINEAR_CE: never the [n_vocab, T] logits) and the materialized one.
static const struct shape_variant {
    const char *what;
    uint32_t type;            // the file: make-tiny's type, or with quant the BF16 file it is quantized from
    const char *quant;        // retrograd quantize's target name (NULL: make-tiny's file as it is)
    rg_train_method method;
    rg_fused_ce fused;
    int compute;              // training.compute_dtype; set only in the mixed-precision rows (CPU only)
    int64_t ctx;              // the mixed rows' context (0: the shape's)
    const char *shapes;       // the shapes it runs at, space-separated (NULL: every shape)
} shape_variants[] = {
    {"f32 full", RG_TYPE_F32, NULL, RG_TRAIN_FULL, RG_FUSED_CE_AUTO, 0, 0, NULL},
    {"bf16 lora r16", RG_TYPE_BF16, NULL, RG_TRAIN_LORA, RG_FUSED_CE_AUTO, 0, 0, NULL},
    {"bf16 full", RG_TYPE_BF16, NULL, RG_TRAIN_FULL, RG_FUSED_CE_AUTO, 0, 0, NULL},
    {"f16 full", RG_TYPE_F16, NULL, RG_TRAIN_FULL, RG_FUSED_CE_AUTO, 0, 0, NULL},
    {"q4_k_m lora r16", RG_TYPE_BF16, "Q4_K_M", RG_TRAIN_LORA, RG_FUSED_CE_AUTO, 0, 0, NULL},
    {"q4_k_m lora fused-ce", RG_TYPE_BF16, "Q4_K_M", RG_TRAIN_LORA, RG_FUSED_CE_ON, 0, 0, NULL},
    {"q4_k_m lora unfused-ce", RG_TYPE_BF16, "Q4_K_M", RG_TRAIN_LORA, RG_FUSED_CE_OFF, 0, 0, NULL},
    // issue 25's mixed-precision rows: products in BF16 on the matrix unit (@bf16) against F32 (@f32)
#define MIXED_LORA_CTX(file, type, quant, ctx, shapes)                                                              \
    {"mixed " file " lora r16 @bf16 c" #ctx, type, quant, RG_TRAIN_LORA, RG_FUSED_CE_AUTO, RG_COMPUTE_BF16, ctx, shapes}, \
    {"mixed " file " lora r16 @f32 c" #ctx, type, quant, RG_TRAIN_LORA, RG_FUSED_CE_AUTO, RG_COMPUTE_F32, ctx, shapes}
// (the tiny shape's context is 256: its rows are a smoke run)
#define MIXED_LORA(file, type, quant) MIXED_LORA_CTX(file, type, quant, 256, "tiny 1b"), MIXED_LORA_CTX(file, type, quant, 1024, "1b")
    MIXED_LORA("bf16", RG_TYPE_BF16, NULL),
    MIXED_LORA("q4_k_m", RG_TYPE_BF16, "Q4_K_M"),
    MIXED_LORA("f32", RG_TYPE_F32, NULL),
#undef MIXED_LORA
#undef MIXED_LORA_CTX
    {"mixed bf16 full @bf16 c256", RG_TYPE_BF16, NULL, RG_TRAIN_FULL, RG_FUSED_CE_AUTO, RG_COMPUTE_BF16, 256, "tiny smollm2"},
    {"mixed bf16 full @f32 c256", RG_TYPE_BF16, NULL, RG_TRAIN_FULL, RG_FUSED_CE_AUTO, RG_COMPUTE_F32, 256, "tiny smollm2"},
    {"mixed f32 full @bf16 c256", RG_TYPE_F32, NULL, RG_TRAIN_FULL, RG_FUSED_CE_AUTO, RG_COMPUTE_BF16, 256, "tiny smollm2"},
    {"mixed f32 full @f32 c256", RG_TYPE_F32, NULL, RG_TRAIN_FULL, RG_FUSED_CE_AUTO, RG_COMPUTE_F32, 256, "tiny smollm2"},
};

// Whether a space-separated list holds the word.
static bool list_has(const char *list, const char *word) {
    const size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
    return false;
}

// Whether FILTER selects a variant's row at a shape: the quantized ones only when it names
// q4_k_m, the mixed-precision ones only on the CPU and when it names "mixed".
static bool variant_selected(const struct shape_variant *va, const char *shape, const char *name) {
    if (va->shapes && !list_has(va->shapes, shape)) return false;
    if (va->compute) {
        if (bench_device != RG_DEVICE_CPU || !(row_filter && strstr(row_filter, "mixed"))) return false;
        return strstr(name, row_filter) != NULL;
    }
    if (va->quant && !(row_filter && strstr(row_filter, "q4_k_m"))) return false;
    return !row_filter || strstr(name, row_filter);
}

// The file of a shape in a type under dir (made when missing); false (line printed) when it cannot be made.
static bool shape_file(const char *shape, uint32_t type, const char *dir, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s-%s.gguf", dir, shape, rg_type_get(type)->name);
    if (access(path, R_OK) == 0) return true;
    rg_tiny_config tc = {.arch = "llama", .type = type, .seed = 42, .shape = shape};
    rg_error err = {0};
    const double t0 = bench_now();
    if (rg_tiny_write(&tc, path, &err)) {
        printf("make-tiny --shape %s --type %s failed: %s\n", shape, rg_type_get(type)->name, err.msg);
        return false;
    }
    printf("(made %s: make-tiny --shape %s --type %s in %.1f s)\n", path, shape, rg_type_get(type)->name, bench_now() - t0);
    return true;
}

// A variant's file: make-tiny's, or that quantized (SHAPE-Q4_K_M.gguf beside it, made when missing).
static bool variant_file(const char *shape, const struct shape_variant *va, const char *dir, char *path, size_t cap) {
    if (!shape_file(shape, va->type, dir, path, cap)) return false;
    if (!va->quant) return true;
    char src[4096];
    snprintf(src, sizeof src, "%s", path);
    snprintf(path, cap, "%s/%s-%s.gguf", dir, shape, va->quant);
    if (access(path, R_OK) == 0) return true;
    rg_quantize_opts qo;
    memset(&qo, 0, sizeof qo);
    rg_quantize_summary qs;
    rg_error err = {0};
    const double t0 = bench_now();
    if (rg_quantize_file(src, path, va->quant, &qo, &qs, &err)) {
        printf("quantize %s %s failed: %s\n", src, va->quant, err.msg);
        return false;
    }
    printf("(made %s: retrograd quantize %s %s in %.1f s)\n", path, src, va->quant, bench_now() - t0);
    return true;
}

static void shape_row_name(const struct shape_size *sz, const struct shape_variant *va, char *name, size_t cap) {
    snprintf(name, cap, "%s-shape %s", sz->shape, va->what);
}

// Whether FILTER selects any row of the shape.
static bool shape_selected(const struct shape_size *sz) {
    char name[64];
    for (size_t v = 0; v < sizeof shape_variants / sizeof shape_variants[0]; v++) {
        shape_row_name(sz, &shape_variants[v], name, sizeof name);
        if (variant_selected(&shape_variants[v], sz->shape, name)) return true;
    }
    return false;
}

// A shape's selected rows; the files are made into dir, and removed after use when dir is the bench's own.
static int run_shape(const struct shape_size *sz, const char *dir, bool own_dir, int steps, double peak, int threads) {
    int rc = 0;
    char name[64], path[4096], made[4096] = "";
    for (size_t v = 0; v < sizeof shape_variants / sizeof shape_variants[0]; v++) {
        const struct shape_variant *va = &shape_variants[v];
        shape_row_name(sz, va, name, sizeof name);
        if (!variant_selected(va, sz->shape, name)) continue;
        if (!variant_file(sz->shape, va, dir, path, sizeof path)) {
            rc = 1;
            continue;
        }
        if (own_dir && made[0] && strcmp(made, path)) unlink(made);  // the previous file's rows are done
        if (own_dir && va->quant) {  // the BF16 file it was quantized from
            char src[4096];
            snprintf(src, sizeof src, "%s/%s-%s.gguf", dir, sz->shape, rg_type_get(va->type)->name);
            unlink(src);
        }
        snprintf(made, sizeof made, "%s", path);
        const int64_t ctx = device_is_host ? 32 : va->ctx > 0 ? va->ctx : sz->ctx;
        rc |= run_row(&(bench_row){.name = name, .path = path, .method = va->method, .rows = 1, .fused = va->fused,
                                   .ctx = ctx, .compute = va->compute},
                      device_is_host ? 1 : steps, peak, threads);
    }
    if (own_dir && made[0]) unlink(made);
    return rc;
}

static int run_shape_rows(const char *tmp_dir, int steps, double peak, int threads) {
    if (bench_device == RG_DEVICE_CPU && !(row_filter && strstr(row_filter, "shape"))) {
        printf("shape rows: skipped on the CPU (FILTER shape, smollm2-shape or 1b-shape runs them; RG_BENCH_DEVICE=cuda "
               "runs them by default)\n");
        return 0;
    }
    const char *keep = getenv("RG_BENCH_SHAPES");
    const bool own = !keep || !*keep;
    int rc = 0;
    for (size_t i = 0; i < sizeof shape_sizes / sizeof shape_sizes[0]; i++) {
        const struct shape_size *sz = &shape_sizes[i];
        if (!shape_selected(sz)) continue;
        if (device_is_host && strcmp(sz->shape, "tiny")) {
            printf("%s-shape rows: skipped on the host execution of the CUDA code (far too slow there: two LoRA steps of "
                   "the smollm2 shape at context 16 ran more than 7 minutes); they run on a GPU\n", sz->shape);
            continue;
        }
        rc |= run_shape(sz, own ? tmp_dir : keep, own, steps, peak, threads);
    }
    return rc;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // lines reach a log as they come, also when a timeout kills the run
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    if (steps < 1) steps = 1;
    row_filter = argc > 2 ? argv[2] : NULL;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *env_threads = getenv("RG_BENCH_THREADS"), *env_ctx = getenv("RG_BENCH_TRAIN_CTX");
    if (env_threads && atoi(env_threads) > 0) threads = atoi(env_threads);
    if (env_ctx && atoi(env_ctx) > 1) row_ctx = atoi(env_ctx), row_ctx_given = true;
    double mhz = bench_measured_mhz();
    double peak = bench_fma_flop_per_cycle(mhz) * mhz * 1e-3 * threads;
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
        device_is_host = strstr(info.name, "host execution") != NULL;
        // The peak: RG_BENCH_PEAK_TFLOPS when given, else measured here (a GPU), else the card's
        // nominal figure by name, else the SM count x clock x the architecture's tensor rate.
        const double nominal = bench_device_peak_of(info.name).bf16_tflops, from_sms = bench_gpu_bf16_tflops_from_sms(&info);
        char what[512] = "";
        // On the host execution the measurement runs at n = 256 only to show that it runs: a CPU
        // timing, printed and never used as the peak.
        double measured = bench_gpu_bf16_tflops_measured(device_is_host ? 256 : 8192, device_is_host ? 1 : 5, what, sizeof what);
        const double measured_host = device_is_host ? measured : 0;
        if (device_is_host) measured = 0;
        double tflops = nominal > 0 ? nominal : from_sms;
        const char *peak_src = nominal > 0 ? "the card's nominal figure" : "the SM count x clock";
        if (env_peak && atof(env_peak) > 0) tflops = atof(env_peak), peak_src = "RG_BENCH_PEAK_TFLOPS";
        else if (measured > 0) tflops = measured, peak_src = "measured here", peak_nominal_gflops = (nominal > 0 ? nominal : from_sms) * 1e3;
        peak = tflops * 1e3;
        printf("bench_train: on %s (compute %d.%d, %d SMs at %.0f MHz, %zu MiB); MFU against a dense BF16 peak of %.1f TFLOP/s "
               "(%s)%s; context %lld, batch 1, AdamW; %d timed steps after one warm-up\n",
               info.name, info.major, info.minor, info.multiprocessors, info.clock_khz * 1e-3, info.total_mem >> 20, tflops,
               peak_src,
               device_is_host ? " (a nominal figure: the host execution is the CPU, so tokens/s and MFU here are CPU timings, "
                                "not GPU results; the rows only show that they run)"
               : tflops > 0 ? "" : " (unknown device: set RG_BENCH_PEAK_TFLOPS; MFU prints as 0)",
               (long long)row_ctx, steps);
        printf("peaks: nominal by name %.1f TFLOP/s; SM count x clock x %.0f FLOP/clock/SM %.1f TFLOP/s; measured %.1f "
               "TFLOP/s (%s)\n", nominal, bench_sm_bf16_flop_per_clock(info.major, info.minor), from_sms, measured, what);
        if (device_is_host)
            printf("peaks: on the host execution the measurement is a CPU timing, not used: %.4f TFLOP/s\n", measured_host);
        printf("model FLOPs per step: full fine-tuning 6 x parameters x T + attention; LoRA 4 x base parameters x T + 6 x "
               "adapter parameters x T + attention; attention 12 x n_layer x n_head x head_dim x T^2 (QK^T and PV, 2 FLOP a "
               "multiply-add, forward + backward = 3x; the causal half not subtracted); base parameters: every tensor of "
               "the file, the tied embedding once\n");
        if (peak <= 0) peak = 1e30;
    } else {
        printf("bench_train: %d threads, clock %.0f MHz measured, FMA peak %.1f GFLOP/s; context %lld (tiny: its own), batch "
               "1, AdamW; %d timed steps after one warm-up\n", threads, mhz, peak, (long long)row_ctx, steps);
        // The tile peak on the rows' threads, measured now (the second MFU of every row).
        rg_threadpool *tp = NULL;
        rg_error perr = {0};
        char why[256] = "";
        if (threads > 1 && rg_threadpool_create(&tp, threads, &perr)) {
            printf("bench_train: %s\n", perr.msg);
            return 1;
        }
        tile_peak_gflops = bench_tile_peak_gflops(tp, why, sizeof why);
        rg_threadpool_free(tp);
        const rg_tile_path tiles = rg_gemm_tiles_path();
        if (tile_peak_gflops > 0)
            printf("tile peak: TDPBF16PS register-resident loop %.1f GFLOP/s on %d threads (%.1fx the FMA peak), measured "
                   "now: each row's second MFU\n", tile_peak_gflops, threads, tile_peak_gflops / peak);
        else
            printf("tile peak: %s: each row's second MFU is -\n", why);
        printf("BF16 products (training.compute_dtype=bf16): %s%s%s\n", rg_tile_path_name(tiles),
               tiles == RG_TILES_NONE ? ": " : "", tiles == RG_TILES_NONE ? rg_gemm_tiles_missing()
               : tiles == RG_TILES_EMULATED ? " (RG_TILES_EMULATE=1: emulated, not a matrix-unit result)" : "");
    }
    const char *one = getenv("RG_BENCH_TRAIN_MODEL");
    if (one && *one) {
        const char *method = getenv("RG_BENCH_TRAIN_METHOD");
        bool lora = method && !strcmp(method, "lora");
        if (method && !lora && strcmp(method, "full")) {
            printf("RG_BENCH_TRAIN_METHOD '%s' is not full or lora\n", method);
            return 2;
        }
        const char *cd = getenv("RG_BENCH_TRAIN_COMPUTE");
        int compute = RG_COMPUTE_AUTO;
        if (cd && *cd) {
            if (!strcmp(cd, "bf16")) compute = RG_COMPUTE_BF16;
            else if (!strcmp(cd, "f32")) compute = RG_COMPUTE_F32;
            else if (strcmp(cd, "auto")) {
                printf("RG_BENCH_TRAIN_COMPUTE '%s' is not auto, f32 or bf16\n", cd);
                return 2;
            }
        }
        print_steps = true;
        return run_row(&(bench_row){.name = lora ? "file lora r16" : "file full", .path = one,
                                    .method = lora ? RG_TRAIN_LORA : RG_TRAIN_FULL, .rows = 1, .compute = compute},
                       steps, peak, threads);
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
    rc |= run_shape_rows(dir, steps, peak, threads);
    unlink(tiny);
    rmdir(dir);
    return rc;
}
