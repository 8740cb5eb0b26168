// bench_precision.c - the seed's precision tables, our CPU, CPU-tiles and CUDA columns side by
// side with the seed's (shared/spec/training.md §4; the seed's figure for the same column in
// brackets: it gives CPU and CUDA columns in place, a CUDA column alone for master weights).
//
//   ./bench_precision [STEPS [ADAMW_LR [SGD_LR]]]   (defaults 2000, 1e-4, 0.02; the loss gap is read at step STEPS)
//   RG_BENCH_DEVICE=cpu    the CPU column alone; =cuda: a CUDA device is required (scripts/gpu-check.sh);
//                          unset: the CUDA column whenever a device is usable
//   RG_BENCH_HOST_STEPS=4  the loss gap's steps of the CUDA column on the host execution of the CUDA
//                          code (RETRO_CUDA_HOST=1, labelled cuda-host: a step there is about a second, so
//                          it shows the column runs; its figures are not a GPU's)
//   RG_BENCH_TILE_STEPS=4  the loss gap's steps of the CPU-tiles column on the emulated tiles
//                          (RG_TILES_EMULATE=1 on a CPU without AMX or AVX512_BF16: slow)
//
// The CPU-tiles column (issue 25): the half runs with training.compute_dtype=bf16 (products on the
// CPU's matrix unit, both operands rounded to BF16), each against its twin with F32 products; the
// seed's CUDA figures beside it (the seed has no such column; its CUDA forward also rounds the
// activations). Where rg_gemm_tiles_path() is NONE the column is left out with the reason.
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
#include "cpu/gemm_tiles.h"
#include "precision_runs.h"

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // lines reach a log as they come, also when a timeout kills the run
    int64_t steps = argc > 1 ? atoll(argv[1]) : 2000;
    if (steps < 4) steps = 4;
    prec_cfg pc = {.device = RG_DEVICE_CPU, .lr_adamw = 1e-4, .lr_sgd = 0.02, .ckpt_type = RG_TYPE_F32};
    if (argc > 2) pc.lr_adamw = atof(argv[2]);
    if (argc > 3) pc.lr_sgd = atof(argv[3]);
    const char *env_dev = getenv("RG_BENCH_DEVICE"), *env_host = getenv("RG_BENCH_HOST_STEPS");
    const char *env_tile = getenv("RG_BENCH_TILE_STEPS");
    prec_column cols[3] = {
        {.name = "CPU", .device = RG_DEVICE_CPU, .seed_col = SEED_CPU, .steps = steps, .n_opt = 2},
        {.name = "CPU-tiles", .device = RG_DEVICE_CPU, .seed_col = SEED_CUDA, .steps = steps, .n_opt = 2,
         .compute_dtype = RG_COMPUTE_BF16},
        {.name = "CUDA", .device = RG_DEVICE_CUDA, .seed_col = SEED_CUDA, .steps = steps, .n_opt = 2}};
    int n_cols = 1;
    const rg_tile_path tiles = rg_gemm_tiles_path();
    if (tiles != RG_TILES_NONE) {
        if (tiles == RG_TILES_EMULATED) {
            const int64_t ts = env_tile && atoll(env_tile) > 0 ? atoll(env_tile) : 4;
            cols[1].steps = ts < steps ? ts : steps;
        }
        n_cols = 2;
    }
    char why[256] = "";
    const char *cuda = env_dev && !strcmp(env_dev, "cpu") ? NULL : prec_cuda_name(why, sizeof why);
    if (cuda) {
        cols[n_cols] = cols[2];
        cols[n_cols].name = cuda;
        if (!strcmp(cuda, "cuda-host")) {
            const int64_t hs = env_host && atoll(env_host) > 0 ? atoll(env_host) : 4;
            cols[n_cols].steps = hs < steps ? hs : steps;
        }
        n_cols++;
    } else if (env_dev && !strcmp(env_dev, "cuda")) {
        printf("bench_precision: RG_BENCH_DEVICE=cuda but there is no CUDA device: %s\n", why);
        return 1;
    }
    char dir[] = "/tmp/rg_bench_precision_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char paths[2][2][256];  // [f16, bf16][half, twin]
    bool made[2][2];
    const uint32_t types[2] = {RG_TYPE_F16, RG_TYPE_BF16};
    batches b = {0};
    if (prec_setup(NULL, dir, steps, paths, made, &b)) return 1;
    printf("bench_precision: tiny qwen2 (F16 / BF16 matrices) against its F32 twin, %lld rows of %d tokens; columns: CPU "
           "(%lld steps, compute_dtype f32)", (long long)b.n, CTX, (long long)steps);
    if (tiles == RG_TILES_NONE)
        printf("; no CPU-tiles column: %s", rg_gemm_tiles_missing());
    else
        printf(", CPU-tiles (compute_dtype bf16 on the %s path, %lld steps%s)", rg_tile_path_name(tiles),
               (long long)cols[1].steps, tiles == RG_TILES_EMULATED ? "; emulated: the same bits as AMX, slow" : "");
    const prec_column *dev = cuda ? &cols[n_cols - 1] : NULL;
    if (dev && !strcmp(dev->name, "cuda-host"))
        printf(", cuda-host (host execution of the CUDA code, not a GPU; %lld steps: its figures are not a GPU's)",
               (long long)dev->steps);
    else if (dev) printf(", CUDA (the device, %lld steps)", (long long)dev->steps);
    else printf("; no CUDA column: %s", why[0] ? why : "RG_BENCH_DEVICE=cpu");
    printf("\nAdamW lr %g, SGD lr %g, constant, no clipping; after each figure the seed's for the same column in brackets "
           "([-]: the seed gives none: it measured master weights on CUDA only)\n\n", pc.lr_adamw, pc.lr_sgd);

    double t_start = bench_now();
    for (int k = 0; k < n_cols; k++) {
        const double t0 = bench_now();
        if (prec_run_column(&cols[k], &pc, paths, &b)) return 1;
        printf("(%s column: %.1f s)\n", cols[k].name, bench_now() - t0);
    }
    printf("\n");
    for (int opt = 0; opt < 2; opt++)
        for (int mode = 0; mode < 2; mode++) {
            prec_print_table(cols, n_cols, opt, mode, true, true, "");
            printf("\n");
        }
    // The recompute rows on each column but the host execution's (minutes there).
    for (int k = 0; k < n_cols; k++) {
        if (!strcmp(cols[k].name, "cuda-host") || cols[k].compute_dtype == RG_COMPUTE_BF16) continue;
        prec_cfg base = pc;
        base.device = cols[k].device;
        base.compute_dtype = cols[k].device == RG_DEVICE_CPU ? RG_COMPUTE_F32 : RG_COMPUTE_AUTO;
        printf("%s: activation recompute, layer inputs stored in F16 / BF16, against keeping every activation (F32 twin):\n",
               cols[k].name);
        printf("  %-58s %-22s %-22s\n", "", "F16", "BF16");
        double worst[2] = {0, 0}, mean[2] = {0, 0};
        int64_t n_elems = 0;
        for (int t = 0; t < 2; t++) {
            runner h, f;
            prec_cfg ck = base;
            ck.ckpt_type = types[t];
            if (runner_make(&h, &ck, paths[0][1], RG_OPTIM_ADAMW, false, steps, false) ||
                runner_make(&f, &base, paths[0][1], RG_OPTIM_ADAMW, false, steps, true))
                return 1;
            for (int64_t i = 0; i < 10; i++) {
                step(&h, &b, i, false);
                step(&f, &b, i, false);
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
        printf("  %-58s %-22s %-22s\n\n", "  the worst of those batches", cell[0], cell[1]);
    }
    printf("total %.1f s\n", bench_now() - t_start);
    prec_cleanup(dir, paths, made, &b);
    return 0;
}
