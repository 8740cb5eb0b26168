// cmd_train.c - `retrograd train`: fine-tune a GGUF model on a data file.
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "train/config.h"
#include "train/trainer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: retrograd train -m MODEL.gguf -d DATA(.txt|.jsonl) -o OUTDIR [--config FILE.yaml] [--set key=value]...\n"
            "                       [--resume OUTDIR] [--device cpu|cuda] [--progress auto|bar|lines|none]\n"
            "\n"
            "Fine-tunes MODEL on DATA: LoRA (any weight type; writes OUTDIR/adapter.gguf, which llama.cpp loads with\n"
            "--lora) or full fine-tuning of an F32/F16/BF16 model in its own type (writes OUTDIR/model.gguf).\n"
            "OUTDIR also gets train.jsonl (one record per step), loss.svg, report.json and checkpoints/step-N/.\n"
            "--resume OUTDIR continues a stopped run from its newest checkpoint, bit for bit (same settings and threads).\n"
            "\n"
            "DATA: plain text (cut into windows of training.ctx tokens), or JSONL with one object per line:\n"
            "  {\"text\": ...} | {\"messages\": [{\"role\": ..., \"content\": ...}, ...]} | {\"prompt\": ..., \"completion\": ...}\n"
            "\n"
            "Settings: keys from --config (YAML; nested or dotted) and then --set, later ones win.\n\n");
    rg_train_config_print_help(f);
}

int cmd_train(int argc, char **argv) {
    rg_train_opts o;
    memset(&o, 0, sizeof o);
    rg_train_config cfg;
    rg_train_config_defaults(&cfg);
    const char *config_path = NULL, *resume_dir = NULL;
    const char *sets[256];
    int n_sets = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = !strcmp(a, "-m") || !strcmp(a, "-d") || !strcmp(a, "-o") || !strcmp(a, "--config") ||
                     !strcmp(a, "--set") || !strcmp(a, "--resume") || !strcmp(a, "--device") || !strcmp(a, "--progress");
        if (!takes) {
            fprintf(stderr, "retrograd train: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!next) {
            fprintf(stderr, "retrograd train: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m")) o.model_path = next;
        else if (!strcmp(a, "-d")) o.data_path = next;
        else if (!strcmp(a, "-o")) o.out_dir = next;
        else if (!strcmp(a, "--config")) config_path = next;
        else if (!strcmp(a, "--resume")) resume_dir = next;
        else if (!strcmp(a, "--set")) {
            if (n_sets == 256) {
                fprintf(stderr, "retrograd train: more than 256 --set options\n");
                return 2;
            }
            sets[n_sets++] = next;
        } else if (!strcmp(a, "--device")) {
            if (!strcmp(next, "cpu")) o.device = RG_DEVICE_CPU;
            else if (!strcmp(next, "cuda")) o.device = RG_DEVICE_CUDA;
            else {
                fprintf(stderr, "retrograd train: --device '%s': expected cpu or cuda\n", next);
                return 2;
            }
        } else if (!strcmp(a, "--progress")) {
            if (!strcmp(next, "auto")) o.progress = 0;
            else if (!strcmp(next, "bar")) o.progress = 1;
            else if (!strcmp(next, "lines")) o.progress = 2;
            else if (!strcmp(next, "none")) o.progress = 3;
            else {
                fprintf(stderr, "retrograd train: --progress '%s': expected auto, bar, lines or none\n", next);
                return 2;
            }
        }
    }
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
    for (int i = 0; i < n_sets; i++)
        if (rg_train_config_set_kv(&cfg, sets[i], &err)) {
            fprintf(stderr, "retrograd train: %s\n", err.msg);
            return 2;
        }
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
