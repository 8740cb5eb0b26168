// main.c - the retrograd command line: one binary, one subcommand per job.
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "retrograd.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"info", cmd_info, "info MODEL.gguf [--json [--full]]        metadata, tensors, types, sizes"},
    {"make-tiny", cmd_make_tiny, "make-tiny --arch qwen2 --type f32|f16|bf16 -o OUT.gguf [--seed S] [--twin-f32]"},
    {"quantize", cmd_quantize, "quantize IN.gguf OUT.gguf TYPE              Q4_0 ... Q6_K, Q4_K_M, IQ4_XS, ... (--help lists all)"},
    {"report", cmd_report, "report [--json] [--device cpu|cuda]       backend capabilities: gpu, ops and their types"},
    {"generate", cmd_generate, "generate -m MODEL.gguf (-p TEXT | -f FILE | --chat) [-n N] [--temp T] [--seed S] ... (--help lists all)"},
    {"train", cmd_train, "train -m MODEL.gguf -d DATA -o OUTDIR [--config F.yaml] [--set k=v]... [--resume OUTDIR] (--help lists keys)"},
    {"serve", cmd_serve, "serve -m MODEL.gguf [--host ADDR] [--port N] [--api-key K] [-np N]   an OpenAI-compatible server"},
    {"agent", cmd_agent, "agent -m MODEL.gguf --tools TOOLS.yaml [-p TEXT] [--keep FILE.jsonl]   a model that calls tools (MCP, commands)"},
    {"merge", cmd_merge, "merge -m BASE.gguf --lora A.gguf[:SCALE] -o OUT.gguf   fold a LoRA adapter into its base model"},
    {"perplexity", cmd_perplexity, "perplexity -m MODEL.gguf -f TEXT.txt [-c CTX] [--chunks N]"},
    {"tokenize", cmd_tokenize, "tokenize -m MODEL.gguf (-p TEXT | -f FILE) [--ids] [--no-bos] [--no-special] [--count]"},
};

static void usage(FILE *f) {
    fprintf(f, "retrograd %s - fine-tune and run GGUF language models\n\nusage:\n", RG_VERSION_STRING);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(f, "  retrograd %s\n", commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("retrograd %s\n", RG_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "retrograd: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
