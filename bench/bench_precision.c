// bench_precision.c - the seed's precision tables, reproduced on our CPU
// (shared/spec/training.md §4; the seed's numbers are printed beside ours).
//
//   ./bench_precision [STEPS [ADAMW_LR [SGD_LR]]]   (defaults 2000, 1e-4, 0.02; the loss gap is read at step STEPS)
//   RG_BENCH_DEVICE=cuda ./bench_precision ...     the same tables with both runs on the CUDA device (the
//                                                  seed's f16_base_training CUDA column; scripts/gpu-check.sh)
//
// The half fixture (tiny qwen2, matrices in F16 or BF16) trains against its F32
// twin (the same values stored as F32) on the same batches (rows of 64 tokens
// of the repository's tiny corpus, in the dataset's seeded order), with the
// same schedule and seed. Three numbers per (storage, optimizer, mode):
//   grad gap   §4.1: after one forward/backward from identical weights, the
//              worst over trainable tensors of max|g_half - g_f32| / max|g_f32|
//              (N = their total element count);
//   off-grid   §4.2: teacher-forced at step k = 1: after one step from the same
//              state, the share of half-typed elements whose stored weight is
//              more than one grid point from the twin's F32 weight;
//   loss gap   §4.3: |L_half(STEPS) - L_f32(STEPS)| / L_f32(STEPS), and the
//              smoothed variant over the last 100 steps.
// Modes: in place (stochastic rounding) and with F32 master weights (RNE from
// the master). Constant schedule, no clipping, no weight decay.
// Last, activation recompute with the layer inputs kept in F16 / BF16
// (training.checkpoint_dtype, §9.4) on the F32 twin against keeping every
// activation: the §4.1 gradient gap on each of the first 10 batches (the
// seed: "about 1e-3 relative error").
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "precision_runs.h"

int main(int argc, char **argv) {
    int64_t steps = argc > 1 ? atoll(argv[1]) : 2000;
    if (steps < 100) steps = 100;
    prec_cfg pc = {.device = RG_DEVICE_CPU, .lr_adamw = 1e-4, .lr_sgd = 0.02, .ckpt_type = RG_TYPE_F32};
    if (argc > 2) pc.lr_adamw = atof(argv[2]);
    if (argc > 3) pc.lr_sgd = atof(argv[3]);
    const char *env_dev = getenv("RG_BENCH_DEVICE");
    if (env_dev && !strcmp(env_dev, "cuda")) pc.device = RG_DEVICE_CUDA;
    char dir[] = "/tmp/rg_bench_precision_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char paths[2][2][256];  // [f16, bf16][half, twin]
    bool made[2][2];
    const uint32_t types[2] = {RG_TYPE_F16, RG_TYPE_BF16};
    batches b = {0};
    if (prec_setup(NULL, dir, steps, paths, made, &b)) return 1;
    printf("bench_precision: tiny qwen2 (F16 / BF16 matrices) against its F32 twin, %s, %lld rows of %d tokens, %lld steps\n",
           pc.device == RG_DEVICE_CUDA ? "both on the CUDA device" : "CPU", (long long)b.n, CTX, (long long)steps);
    printf("AdamW lr %g, SGD lr %g, constant, no clipping; the seed's value in brackets (its CPU column for in place; "
           "it gives only a CUDA column for master weights)\n\n", pc.lr_adamw, pc.lr_sgd);

    static const char *opt_names[2] = {"AdamW", "SGD"};
    double t_start = bench_now();
    for (int opt = 0; opt < 2; opt++) {
        for (int mode = 0; mode < 2; mode++) {
            printf("%s, %s:\n", opt_names[opt], mode ? "F32 master weights" : "in place (stochastic rounding)");
            printf("  %-58s %-22s %-22s\n", "", "F16", "BF16");
            prec_cell cells[2];
            for (int t = 0; t < 2; t++)
                if (prec_measure(&pc, paths[t], opt, mode == 1, steps, &b, &cells[t])) return 1;
            char cell[2][64];
            for (int t = 0; t < 2; t++) snprintf(cell[t], 64, "%.1e [%.1e]", cells[t].grad, SEED[t][opt][mode].grad);
            char label[96];
            snprintf(label, sizeof label, "worst relative gradient gap, one step over %lld elements",
                     (long long)cells[0].n_elems);
            printf("  %-58s %-22s %-22s\n", label, cell[0], cell[1]);
            for (int t = 0; t < 2; t++) snprintf(cell[t], 64, "%.1e [%.1e]", cells[t].off, SEED[t][opt][mode].off);
            printf("  %-58s %-22s %-22s\n", "elements more than one grid point from the F32 trajectory", cell[0], cell[1]);
            for (int t = 0; t < 2; t++) snprintf(cell[t], 64, "%.1e [%.1e]", cells[t].loss, SEED[t][opt][mode].loss);
            snprintf(label, sizeof label, "relative loss gap after %lld steps", (long long)steps);
            printf("  %-58s %-22s %-22s\n", label, cell[0], cell[1]);
            for (int t = 0; t < 2; t++) snprintf(cell[t], 64, "%.1e", cells[t].smooth);
            printf("  %-58s %-22s %-22s\n", "  the same, mean over the last 100 steps", cell[0], cell[1]);
            for (int t = 0; t < 2; t++) snprintf(cell[t], 64, "%.4f", cells[t].final_loss);
            printf("  %-58s %-22s %-22s\n", "  (the F32 twin's loss at that step)", cell[0], cell[1]);
            printf("\n");
            fflush(stdout);
        }
    }
    printf("activation recompute, layer inputs stored in F16 / BF16, against keeping every activation (F32 twin):\n");
    printf("  %-58s %-22s %-22s\n", "", "F16", "BF16");
    double worst[2] = {0, 0}, mean[2] = {0, 0};
    int64_t n_elems = 0;
    for (int t = 0; t < 2; t++) {
        runner h, f;
        prec_cfg ck = pc;
        ck.ckpt_type = types[t];
        if (runner_make(&h, &ck, paths[0][1], RG_OPTIM_ADAMW, false, steps) ||
            runner_make(&f, &pc, paths[0][1], RG_OPTIM_ADAMW, false, steps))
            return 1;
        for (int64_t k = 0; k < 10; k++) {
            step(&h, &b, k, false);
            step(&f, &b, k, false);
            rg_train_state_discard(h.s);
            rg_train_state_discard(f.s);
            double g = grad_gap(&h, &f, &n_elems);
            worst[t] = g > worst[t] ? g : worst[t];
            mean[t] += g / 10;
        }
        runner_free(&h);
        runner_free(&f);
    }
    char cell[2][64], label[96];
    for (int t = 0; t < 2; t++) snprintf(cell[t], 64, "%.1e%s", mean[t], t ? "" : " [about 1e-3]");
    snprintf(label, sizeof label, "gradient gap, mean of 10 batches, %lld elements", (long long)n_elems);
    printf("  %-58s %-22s %-22s\n", label, cell[0], cell[1]);
    for (int t = 0; t < 2; t++) snprintf(cell[t], 64, "%.1e", worst[t]);
    printf("  %-58s %-22s %-22s\n", "  the worst of those batches", cell[0], cell[1]);
    printf("\ntotal %.1f s\n", bench_now() - t_start);
    prec_cleanup(dir, paths, made, &b);
    return 0;
}
