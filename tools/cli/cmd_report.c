// cmd_report.c - `retrograd report [--json]`: what this build can run, and where.
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cuda/cuda.h"

int cmd_report(int argc, char **argv) {
    int json = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: retrograd report [--json]\n");
            return 0;
        } else {
            fprintf(stderr, "retrograd report: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    char reason[256] = "";
    int n = rg_cuda_device_count(reason, sizeof reason);
    rg_cuda_device_info info;
    rg_error err = {0};
    int have = n > 0 && rg_cuda_device_get(0, &info, &err) == RG_OK;
    if (!have && n > 0) snprintf(reason, sizeof reason, "%.200s", err.msg);
    if (json) {
        printf("{\n  \"cuda_compiled\": %s,\n  \"gpu_device\": ", rg_cuda_compiled() ? "true" : "false");
        if (have)
            printf("{\"name\": \"%s\", \"compute_capability\": \"%d.%d\", \"total_mem\": %zu, \"free_mem\": %zu}",
                   info.name, info.major, info.minor, info.total_mem, info.free_mem);
        else
            printf("null");
        printf(",\n  \"gpu_unavailable_reason\": ");
        json_str(stdout, have ? "" : reason, have ? 0 : strlen(reason));
        printf(",\n  \"cap_flash_attn_back\": false,\n  \"cap_device_sampling\": false,\n  \"ops\": []\n}\n");
    } else {
        printf("cuda compiled        %s\n", rg_cuda_compiled() ? "yes" : "no");
        if (have)
            printf("gpu_device           %s (compute %d.%d, %.1f GiB, %.1f GiB free)\n", info.name, info.major,
                   info.minor, info.total_mem / 1073741824.0, info.free_mem / 1073741824.0);
        else
            printf("gpu_device           none (%s)\n", reason);
        printf("cap_flash_attn_back  false\ncap_device_sampling  false\nops                  (the op table arrives with the graph engine)\n");
    }
    return 0;
}
