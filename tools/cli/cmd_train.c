// cmd_train.c - `retrograd train`: fine-tune a GGUF model on a data file.
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "train/config.h"
#include "train/trainer.h"

// After the options in --help: what the run writes, the data's forms, and every config key.
static void epilog(FILE *f) {
    fprintf(f,
            "\n"
            "Fine-tunes MODEL on DATA: LoRA (any weight type; writes OUTDIR/adapter.gguf, which llama.cpp loads with\n"
            "--lora) or full fine-tuning of an F32/F16/BF16 model in its own type (writes OUTDIR/model.gguf).\n"
            "OUTDIR also gets train.jsonl (one record per step), loss.svg, report.json and checkpoints/step-N/.\n"
            "--resume OUTDIR continues a stopped run from its newest checkpoint, bit for bit (same settings and threads).\n"
            "Products (training.compute_dtype): BF16 weights multiply in BF16 on the CPU's matrix unit (AMX, AVX512_BF16)\n"
            "where it has one; --exact (= --set training.compute_dtype=f32) keeps every product in F32, exactly.\n"
            "\n"
            "DATA: plain text (cut into windows of training.ctx tokens), or JSONL with one object per line:\n"
            "  {\"text\": ...} | {\"messages\": [{\"role\": ..., \"content\": ...}, ...]} | {\"prompt\": ..., \"completion\": ...}\n"
            "\n"
            "Settings: keys from --config (YAML; nested or dotted) and then --set, later ones win.\n\n");
    rg_train_config_print_help(f);
}

// The repeatable --set key=value, applied after --config.
typedef struct set_list {
    const char *kv[256];
    int n;
} set_list;

static bool add_set(const char *cmd, const char *opt, const char *value, void *dst) {
    set_list *l = dst;
    if (l->n == 256) {
        fprintf(stderr, "retrograd %s: more than 256 %s options\n", cmd, opt);
        return false;
    }
    l->kv[l->n++] = value;
    return true;
}

// --progress auto|bar|lines|none into rg_train_opts.progress (0..3).
static bool parse_progress(const char *cmd, const char *opt, const char *value, void *dst) {
    static const char *const names[] = {"auto", "bar", "lines", "none"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(value, names[i])) {
            *(int *)dst = i;
            return true;
        }
    fprintf(stderr, "retrograd %s: %s '%s': expected auto, bar, lines or none\n", cmd, opt, value);
    return false;
}

int cmd_train(int argc, char **argv) {
    rg_train_opts o;
    memset(&o, 0, sizeof o);
    rg_train_config cfg;
    rg_train_config_defaults(&cfg);
    const char *config_path = NULL, *resume_dir = NULL;
    set_list sets = {{0}, 0};
    rg_device device = RG_DEVICE_CPU;
    bool exact = false;
    const cli_opt opts[] = {
        CLI_STR('m', "--model", "MODEL.gguf", "the model to fine-tune", &o.model_path),
        CLI_STR('d', "--data", "DATA", "the training data: .txt or .jsonl (below)", &o.data_path),
        CLI_STR(0, "--eval-data", "DATA", "a separate evaluation file (.txt or .jsonl): its rows are the eval split, "
                "in place of training.eval_split's held-out samples", &o.eval_data_path),
        CLI_STR('o', "--output", "OUTDIR", "where the run, its checkpoints and the result go", &o.out_dir),
        CLI_STR(0, "--config", "FILE.yaml", "settings (YAML; nested or dotted keys, listed below)", &config_path),
        CLI_CALL(0, "--set", "key=value", "one setting, after --config (repeatable; later ones win)", add_set, &sets),
        CLI_STR(0, "--resume", "OUTDIR", "continue the stopped run in OUTDIR from its newest checkpoint", &resume_dir),
        CLI_CALL(0, "--device", "cpu|cuda", "where to run (default cpu)", cli_opt_device, &device),
        CLI_FLAG(0, "--exact", "every product in F32, exactly (training.compute_dtype=f32): no BF16 products",
                 &exact),
        CLI_CALL(0, "--progress", "auto|bar|lines|none", "progress on stderr: a bar on a terminal, lines otherwise "
                 "(default auto)", parse_progress, &o.progress),
    };
    const cli_command c = {"train", "-m MODEL.gguf -d DATA(.txt|.jsonl) -o OUTDIR [--config FILE.yaml] [--set key=value]... "
                           "[--exact] [options]", opts, CLI_N(opts), NULL, 0, NULL, epilog};
    int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    o.device = (int)device;
    if (resume_dir) {
        if (o.out_dir && strcmp(o.out_dir, resume_dir) != 0) {
            fprintf(stderr, "retrograd train: --resume %s and -o %s name different directories\n", resume_dir, o.out_dir);
            return 2;
        }
        o.out_dir = resume_dir;
        o.resume = true;
    }
    if (!o.model_path || !o.data_path || !o.out_dir) {
        fprintf(stderr, "retrograd train: -m MODEL, -d DATA and -o OUTDIR (or --resume OUTDIR) are required (see --help)\n");
        return 2;
    }
    rg_error err = {0};
    if (config_path && rg_train_config_load_yaml(&cfg, config_path, &err)) {
        fprintf(stderr, "retrograd train: %s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < sets.n; i++)
        if (rg_train_config_set_kv(&cfg, sets.kv[i], &err)) {
            fprintf(stderr, "retrograd train: %s\n", err.msg);
            return 2;
        }
    if (exact && cfg.compute_dtype == RG_COMPUTE_BF16) {
        fprintf(stderr, "retrograd train: --exact asks for F32 products but training.compute_dtype is bf16; drop one\n");
        return 2;
    }
    if (exact) cfg.compute_dtype = RG_COMPUTE_F32;
    if (rg_train_config_validate(&cfg, &o.spec, &err)) {  // the edge: the library trusts o.spec from here
        fprintf(stderr, "retrograd train: %s\n", err.msg);
        return 2;
    }
    rg_train_summary sum;
    if (rg_train_run(&o, &sum, &err)) {
        fprintf(stderr, "retrograd train: %s\n", err.msg);
        return 1;
    }
    return 0;
}
