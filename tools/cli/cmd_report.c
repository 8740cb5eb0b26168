// cmd_report.c - `retrograd report [--json] [--device cpu|cuda]`: what this
// build can run, and where: the GPU (or why there is none), the capability
// flags, and for every op in the op table the backend that runs it and for
// which types. Ops the GPU does not take run on the CPU, per node, with the
// copies counted by the executor. The CPU's matrix unit: which unit BF16 products run on
// (cpu_matrix_unit), why AMX is not used when it is not, and the path
// training.compute_dtype=bf16 takes (cpu/gemm_tiles.h: amx, avx512_bf16, emulated, none).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "cli.h"
#include "cpu/gemm_tiles.h"
#include "cuda/cuda.h"
#include "graph/backend.h"
#include "graph/ops.h"

// The types of an op's cell on a backend, as the op table's columns say (graph/backend.h).
static const char *cell_types(rg_backend_id b, rg_op op) { return rg_op_cell(b, (int)op).types; }
static const char *cpu_types(rg_op op) {
    if (rg_op_defs[op].is_view) return "view (no kernel)";
    const char *t = cell_types(RG_BACKEND_CPU, op);
    return t ? t : "none";
}

// Which backend runs the op: "cuda" (for its CUDA types; other types and
// layouts fall back to the CPU), "cpu", or "none" (views, ops with no kernel).
static const char *backend_of(rg_op op, int use_cuda) {
    const rg_op_def *d = &rg_op_defs[op];
    if (d->is_view) return "none";
    if (use_cuda && cell_types(RG_BACKEND_CUDA, op)) return "cuda";
    return cell_types(RG_BACKEND_CPU, op) ? "cpu" : "none";
}

// The capability flags, from the device and the op table: each needs a device that can run it
// (flash attention's backward: compute capability 8.0 or later, for its shared-memory tiles)
// and a CUDA kernel in this build; why not, when not.
typedef struct caps {
    bool flash_attn_back, device_sampling;
    const char *why_flash, *why_sampling;
} caps;

// use_cuda: the device the report describes (the GPU when there is one, or --device).
static caps device_caps(int use_cuda, int have, const rg_cuda_device_info *info) {
    caps c = {false, false, NULL, NULL};
    if (!use_cuda) {  // the CPU column of the op table has FLASH_ATTN_EXT and FLASH_ATTN_BACK
        c.flash_attn_back = true;
        c.why_flash = "the CPU kernels (cpu/ops_flash.c): head_dim any, K/V f32 or f16, GQA, softcap, windows, documents; "
                      "sinks take the materialized backward";
        c.why_sampling = have ? "the report is for the cpu" : "no CUDA device";
        return c;
    }
    // FLASH_ATTN_EXT/BACK: the CUDA cells of cuda/ops_flash.cu when this build has them (the nvcc build or the
    // host execution); sampling: cuda/sampling.cu, in every build of the CUDA code.
    const bool kernels = cell_types(RG_BACKEND_CUDA, RG_OP_FLASH_ATTN_EXT) && cell_types(RG_BACKEND_CUDA, RG_OP_FLASH_ATTN_BACK);
    c.flash_attn_back = kernels && info->major >= 8;
    c.why_flash = info->major < 8 ? "the device's compute capability is below 8.0"
                  : !kernels      ? "this build has no CUDA kernel for FLASH_ATTN_BACK (the op runs on the CPU)"
                                  : "the CUDA kernels (cuda/ops_flash.cu): FlashAttention-2 in f32, head_dim buckets 128, "
                                    "256, 512 (wider: the CPU), K/V f32 or f16, GQA, softcap, windows, documents; "
                                    "deterministic backward (no atomics); sinks take the materialized backward";
    const char *ds = getenv("RETRO_DEVICE_SAMPLING");
    c.device_sampling = rg_cuda_compiled() != 0;
    c.why_sampling = !c.device_sampling ? "this build samples on the host (no sampling kernel)"
                     : ds && !strcmp(ds, "0")
                         ? "the CUDA kernels (cuda/sampling.cu), but RETRO_DEVICE_SAMPLING=0: generate draws on the CPU"
                         : "the CUDA kernels (cuda/sampling.cu): repetition penalty, top-k, top-p, min-p, temperature "
                           "and the seeded draw on the device, the CPU sampler's tokens; only the id comes back "
                           "(RETRO_DEVICE_SAMPLING=0: the CPU draws)";
    return c;
}

// The BF16 products' path in words: the path, and what it means or why there is none.
static const char *bf16_path_note(rg_tile_path path) {
    switch (path) {
    case RG_TILES_AMX: return "TDPBF16PS on the AMX tiles";
    case RG_TILES_AVX512: return "VDPBF16PS on AVX-512 registers";
    case RG_TILES_EMULATED: return "RG_TILES_EMULATE=1: the AMX kernel on emulated tiles, slow, not a matrix-unit speed";
    default: return rg_gemm_tiles_missing();
    }
}

// --device cpu|cuda, kept as the name (NULL: the GPU when there is one).
static bool want_device(const char *cmd, const char *opt, const char *value, void *dst) {
    rg_device d;
    (void)opt;
    if (!cli_parse_device(cmd, value, &d)) return false;
    *(const char **)dst = value;
    return true;
}

int cmd_report(int argc, char **argv) {
    bool json = false;
    const char *want = NULL;  // NULL: the GPU when there is one
    const cli_opt opts[] = {
        CLI_FLAG(0, "--json", "machine-readable output", &json),
        CLI_CALL(0, "--device", "cpu|cuda", "the device to report on (default: the GPU when there is one)", want_device,
                 &want),
    };
    const cli_command c = {"report", "[--json] [--device cpu|cuda]", opts, CLI_N(opts), NULL, 0, NULL, NULL};
    int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    char reason[512] = "";
    int n = rg_cuda_device_count(reason, sizeof reason);
    rg_cuda_device_info info;
    rg_error err = {0};
    int have = n > 0 && rg_cuda_device_get(0, &info, &err) == RG_OK;
    if (!have && n > 0) snprintf(reason, sizeof reason, "%.500s", err.msg);
    const int use_cuda = have && (!want || !strcmp(want, "cuda"));
    const char *device = use_cuda ? "cuda" : "cpu";
    char note[600] = "";
    if (want && !strcmp(want, "cuda") && !have)
        snprintf(note, sizeof note, "cuda requested but unavailable (%.500s): every op runs on the cpu", reason);

    if (json) {
        printf("{\n  \"cuda_compiled\": %s,\n  \"gpu_device\": ", rg_cuda_compiled() ? "true" : "false");
        if (have) {
            printf("{\"name\": ");
            json_str(stdout, info.name, strlen(info.name));
            printf(", \"compute_capability\": \"%d.%d\", \"total_mem\": %zu, \"free_mem\": %zu, \"multiprocessors\": %d, "
                   "\"driver\": \"%d.%d\", \"runtime\": \"%d.%d\"}",
                   info.major, info.minor, info.total_mem, info.free_mem, info.multiprocessors, info.driver_version / 1000,
                   info.driver_version % 1000 / 10, info.runtime_version / 1000, info.runtime_version % 1000 / 10);
        } else {
            printf("null");
        }
        printf(",\n  \"gpu_unavailable_reason\": ");
        json_str(stdout, have ? "" : reason, have ? 0 : strlen(reason));
        printf(",\n  \"device\": \"%s\",\n  \"device_note\": ", device);
        json_str(stdout, note, strlen(note));
        const caps cp = device_caps(use_cuda, have, &info);
        printf(",\n  \"cap_flash_attn_back\": %s,\n  \"cap_flash_attn_back_reason\": ", cp.flash_attn_back ? "true" : "false");
        json_str(stdout, cp.why_flash, strlen(cp.why_flash));
        printf(",\n  \"cap_device_sampling\": %s,\n  \"cap_device_sampling_reason\": ", cp.device_sampling ? "true" : "false");
        json_str(stdout, cp.why_sampling, strlen(cp.why_sampling));
        char hw[160];
        const int hmode = rg_cuda_half_gemm_env(hw, sizeof hw);
        printf(",\n  \"cuda_half_gemm\": ");
        if (hmode < 0) json_str(stdout, hw, strlen(hw));
        else printf("\"%s\"", hmode == RG_CUDA_HALF_GEMM_F32 ? "f32" : "tensor");
        const rg_tile_path tp = rg_gemm_tiles_path();
        printf(",\n  \"cpu_matrix_unit\": \"%s\",\n  \"cpu_amx_reason\": ", rg_cpu_matrix_unit());
        json_str(stdout, rg_cpu_amx_reason(), strlen(rg_cpu_amx_reason()));
        printf(",\n  \"bf16_product_path\": \"%s\",\n  \"bf16_product_path_reason\": ", rg_tile_path_name(tp));
        json_str(stdout, bf16_path_note(tp), strlen(bf16_path_note(tp)));
        printf(",\n  \"ops\": [");
        int first = 1;
        for (int op = RG_OP_NONE + 1; op < RG_OP_COUNT; op++) {
            const rg_op_def *d = &rg_op_defs[op];
            const char *ct = cell_types(RG_BACKEND_CUDA, (rg_op)op);
            printf("%s\n    {\"op\": ", first ? "" : ",");
            first = 0;
            json_str(stdout, d->name, strlen(d->name));
            printf(", \"backend\": \"%s\", \"cpu_kernel\": %s, \"cpu_types\": ", backend_of((rg_op)op, use_cuda),
                   d->cpu ? "true" : "false");
            json_str(stdout, cpu_types((rg_op)op), strlen(cpu_types((rg_op)op)));
            printf(", \"cuda_types\": ");
            if (ct) json_str(stdout, ct, strlen(ct));
            else printf("null");
            // Where the rest goes: on the GPU path, other types and layouts run on the CPU.
            printf(", \"fallback\": %s}", use_cuda && ct && d->cpu ? "\"cpu\"" : "null");
        }
        printf("\n  ]\n}\n");
        return 0;
    }

    printf("cuda compiled        %s\n", rg_cuda_compiled() ? "yes" : "no");
    if (have)
        printf("gpu_device           %s (compute %d.%d, %.1f GiB total, %.1f GiB free, %d SMs, driver %d.%d, runtime "
               "%d.%d)\n",
               info.name, info.major, info.minor, info.total_mem / 1073741824.0, info.free_mem / 1073741824.0,
               info.multiprocessors, info.driver_version / 1000, info.driver_version % 1000 / 10,
               info.runtime_version / 1000, info.runtime_version % 1000 / 10);
    else
        printf("gpu_device           none (%s)\n", reason);
    printf("device               %s%s%s\n", device, note[0] ? ": " : "", note);
    const caps cp = device_caps(use_cuda, have, &info);
    printf("cap_flash_attn_back  %s (%s)\ncap_device_sampling  %s (%s)\n", cp.flash_attn_back ? "true" : "false",
           cp.why_flash, cp.device_sampling ? "true" : "false", cp.why_sampling);
    char hw[160];
    const int hmode = rg_cuda_half_gemm_env(hw, sizeof hw);
    printf("cuda_half_gemm       %s\n", hmode < 0 ? hw : rg_cuda_half_gemm_name(hmode));
    const char *amx_off = rg_cpu_amx_reason();
    printf("cpu_matrix_unit      %s%s%s%s\n", rg_cpu_matrix_unit(), amx_off[0] ? " (AMX: " : "", amx_off,
           amx_off[0] ? ")" : "");
    const rg_tile_path tp = rg_gemm_tiles_path();
    printf("bf16_products        %s (%s; training.compute_dtype=bf16)\n\n", rg_tile_path_name(tp), bf16_path_note(tp));
    printf("%-26s %-8s %-18s %s\n", "op", "backend", "cpu types", "cuda types");
    for (int op = RG_OP_NONE + 1; op < RG_OP_COUNT; op++) {
        const rg_op_def *d = &rg_op_defs[op];
        const char *ct = cell_types(RG_BACKEND_CUDA, (rg_op)op);
        char cuda_col[96];
        if (d->is_view) snprintf(cuda_col, sizeof cuda_col, "view (no kernel)");
        else if (ct) snprintf(cuda_col, sizeof cuda_col, "%s%s", ct, d->cpu ? " (others: cpu fallback)" : "");
        else snprintf(cuda_col, sizeof cuda_col, "cpu fallback");
        printf("%-26s %-8s %-18s %s\n", d->name, backend_of((rg_op)op, use_cuda), cpu_types((rg_op)op), cuda_col);
    }
    return 0;
}
