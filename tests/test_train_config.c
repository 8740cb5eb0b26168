// test_train_config.c - the training keys (src/train/config.c).
//
//   - defaults, each key's text and the struct fields they land in, auto lr;
//   - every key set from text and read back with get(); diff() names exactly
//     that key, so each row writes its own field;
//   - good spellings (bool words, "1e3" integers, choice case, target groups)
//     and every kind of bad value, each refused with the key, the value, what
//     is expected and the source, leaving the struct unchanged;
//   - unknown keys with and without a suggestion; set_kv; validate's checks;
//   - diff() and its cut list; --help lists every key;
//   - write() read back (by set() line by line, and by the YAML loader) gives
//     the same bits for every key, including awkward doubles;
//   - YAML: nested, flat and mixed forms agree; flow and block lists; empty
//     files; errors with file and line (syntax, list for a scalar key, mapping
//     for a key, duplicates naming both lines, unknown keys, bad values,
//     anchors, tags, two documents, a missing file, a directory);
//   - training.compute_dtype resolved (train/compute.h): auto's rule by weight type and BF16 path,
//     the CUDA device's rules by RETRO_CUDA_HALF_GEMM, and bf16 refused where the CPU has no BF16
//     path, naming the key and the missing instructions (run with RG_TILES_EMULATE unset: main
//     clears it; on a CPU with AMX or AVX512_BF16 that case is a SKIP).
// Without libyaml at build time the YAML cases print SKIP, and one case
// checks that loading is refused with RG_ERR_UNSUPPORTED.
#include "train/config.h"
#include "train/config_resume.h"

#include "cpu/gemm_tiles.h"
#include "rg_test.h"
#include "train/compute.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef RG_HAVE_YAML
#define NEED_YAML() ((void)0)
#else
#define NEED_YAML() RG_SKIP("built without libyaml (RG_HAVE_YAML unset): YAML case not run")
#endif

static char tmp_dir[256];

// Writes content to tmp_dir/name; the path goes to buf.
static void tmp_file(char *buf, size_t cap, const char *name, const char *content) {
    snprintf(buf, cap, "%s/%s", tmp_dir, name);
    FILE *f = fopen(buf, "wb");
    if (!f) {
        printf("    cannot create %s\n", buf);
        return;
    }
    fputs(content, f);
    fclose(f);
}

static char *write_text(const rg_train_config *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    rg_train_config_write(c, f);
    fclose(f);
    return text;
}

static char *help_text(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    rg_train_config_print_help(f);
    fclose(f);
    return text;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// ------------------------------------------------------------ defaults ---

// Every key and its default as get() prints it; also the list of all keys.
static const struct {
    const char *key, *text;
} defaults[] = {
    {"training.method", "lora"},        {"training.optimizer", "adamw"},   {"training.lr", "auto"},
    {"training.schedule", "linear"},    {"training.warmup_steps", "0"},    {"training.steps", "0"},
    {"training.epochs", "1"},           {"training.batch_size", "1"},      {"training.grad_accum", "1"},
    {"training.ctx", "512"},            {"training.weight_decay", "0"},    {"training.beta1", "0.9"},
    {"training.beta2", "0.999"},        {"training.eps", "1e-08"},         {"training.momentum", "0"},
    {"training.clip_grad_norm", "1"},   {"training.seed", "42"},           {"training.master_weights", "false"},
    {"training.checkpoint_dtype", "f32"}, {"training.recompute", "auto"}, {"training.fused_ce", "auto"}, {"training.flash_attn", "auto"},
    {"training.compute_dtype", "auto"}, {"training.save_every", "100"},  {"training.eval_every", "50"},
    {"training.eval_split", "0.05"},    {"training.threads", "0"},         {"training.skip_nonfinite", "true"},
    {"training.max_skipped", "10"},     {"training.memory_limit_gb", "0"}, {"lora.rank", "16"},
    {"lora.alpha", "32"},               {"lora.targets", "q,k,v,o,gate,up,down,in,out"},
    {"data.train_on", "assistant"},     {"data.pack", "true"},             {"data.overlong", "truncate"},
    {"data.chat_template", "model"},
};
#define N_DEFAULTS (int)(sizeof defaults / sizeof defaults[0])

static void test_defaults(void) {
    rg_train_config c;
    memset(&c, 0xA5, sizeof c);
    rg_train_config_defaults(&c);
    char buf[256];
    for (int i = 0; i < N_DEFAULTS; i++) {
        bool ok = rg_train_config_get(&c, defaults[i].key, buf, sizeof buf);
        RG_CHECK(ok && strcmp(buf, defaults[i].text) == 0, "%s: got '%s' (ok=%d) want '%s'", defaults[i].key, buf, ok,
                 defaults[i].text);
    }
    // The fields themselves (the spec values, not through the table).
    RG_CHECK(c.method == RG_TRAIN_LORA && c.optimizer == RG_OPTIM_ADAMW && c.schedule == RG_SCHED_LINEAR, "enums %d %d %d",
             c.method, c.optimizer, c.schedule);
    RG_CHECK(c.lr == 0 && c.epochs == 1 && c.weight_decay == 0 && c.clip_grad_norm == 1.0, "lr %g epochs %g wd %g clip %g",
             c.lr, c.epochs, c.weight_decay, c.clip_grad_norm);
    RG_CHECK(c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 && c.momentum == 0, "betas %g %g eps %g mom %g", c.beta1,
             c.beta2, c.eps, c.momentum);
    RG_CHECK(c.warmup_steps == 0 && c.steps == 0 && c.batch_size == 1 && c.grad_accum == 1 && c.ctx == 512,
             "ints %lld %lld %lld %lld %lld", (long long)c.warmup_steps, (long long)c.steps, (long long)c.batch_size,
             (long long)c.grad_accum, (long long)c.ctx);
    RG_CHECK(c.seed == 42 && !c.master_weights && c.checkpoint_dtype == RG_TYPE_F32, "seed %llu mw %d dtype %u",
             (unsigned long long)c.seed, c.master_weights, c.checkpoint_dtype);
    RG_CHECK(c.save_every == 100 && c.eval_every == 50 && c.eval_split == 0.05 && c.threads == 0, "save %lld eval %lld %g",
             (long long)c.save_every, (long long)c.eval_every, c.eval_split);
    RG_CHECK(c.skip_nonfinite && c.max_skipped == 10 && c.memory_limit_gb == 0, "skip %d max %lld mem %g",
             c.skip_nonfinite, (long long)c.max_skipped, c.memory_limit_gb);
    RG_CHECK(c.lora_rank == 16 && c.lora_alpha == 32 && c.lora_targets == 511, "rank %lld alpha %g targets %u",
             (long long)c.lora_rank, c.lora_alpha, c.lora_targets);
    RG_CHECK(c.train_on == RG_TRAIN_ON_ASSISTANT && c.pack && c.overlong == RG_OVERLONG_TRUNCATE, "data %d %d %d",
             c.train_on, c.pack, c.overlong);
    RG_CHECK(c.compute_dtype == RG_COMPUTE_AUTO, "compute_dtype %d", c.compute_dtype);
    rg_error err = {0};
    rg_train_spec sp;
    RG_CHECK(rg_train_config_validate(&c, &sp, &err) == RG_OK, "defaults do not validate: %s", err.msg);

    // What validation resolves: the lr (auto by method), the limit in bytes, rows per step.
    RG_CHECK(sp.lr == 2e-4, "auto lora lr %g", sp.lr);
    RG_CHECK(sp.memory_limit == 0 && sp.rows_per_step == 1, "limit %zu rows %lld", sp.memory_limit,
             (long long)sp.rows_per_step);
    c.method = RG_TRAIN_FULL;
    RG_CHECK(rg_train_config_validate(&c, &sp, &err) == RG_OK && sp.lr == 5e-5, "auto full lr %g", sp.lr);
    c.lr = 1e-3;
    c.memory_limit_gb = 1.5;
    c.batch_size = 3, c.grad_accum = 4;
    RG_CHECK(rg_train_config_validate(&c, &sp, &err) == RG_OK && sp.lr == 1e-3, "explicit lr %g", sp.lr);
    RG_CHECK(sp.memory_limit == 1610612736u && sp.rows_per_step == 12, "limit %zu rows %lld", sp.memory_limit,
             (long long)sp.rows_per_step);
    RG_CHECK(memcmp(&sp.cfg, &c, sizeof c) == 0, "the spec's config is not the one validated");
    // A refused config leaves the spec as it was.
    rg_train_spec before = sp;
    c.ctx = 4;
    RG_CHECK(rg_train_config_validate(&c, &sp, &err) == RG_ERR_ARG && memcmp(&sp, &before, sizeof sp) == 0,
             "a refused config changed the spec");

    // The table above names every key write() prints, and no other.
    rg_train_config_defaults(&c);
    char *text = write_text(&c);
    RG_REQUIRE(text, "open_memstream failed");
    RG_CHECK(count_lines(text) == N_DEFAULTS, "write() has %d lines, the test knows %d keys", count_lines(text),
             N_DEFAULTS);
    for (int i = 0; i < N_DEFAULTS; i++) {
        char line[300];
        snprintf(line, sizeof line, "%s: ", defaults[i].key);
        RG_CHECK(strstr(text, line) != NULL, "write() lacks %s", defaults[i].key);
    }
    free(text);
}

// ---------------------------------------------------- set every key ---

// A value for every key (each differs from the default) and how get() prints it.
static const struct {
    const char *key, *in, *out;
} every_key[] = {
    {"training.method", "FULL", "full"},
    {"training.optimizer", "sgd", "sgd"},
    {"training.lr", "3e-4", "0.0003"},
    {"training.schedule", "Cosine", "cosine"},
    {"training.warmup_steps", "25", "25"},
    {"training.steps", "1e3", "1000"},
    {"training.epochs", "2.5", "2.5"},
    {"training.batch_size", "4", "4"},
    {"training.grad_accum", "8", "8"},
    {"training.ctx", "2048", "2048"},
    {"training.weight_decay", "0.01", "0.01"},
    {"training.beta1", "0.8", "0.8"},
    {"training.beta2", "0.95", "0.95"},
    {"training.eps", "1e-6", "1e-06"},
    {"training.momentum", "0.9", "0.9"},
    {"training.clip_grad_norm", "0", "0"},
    {"training.seed", "18446744073709551615", "18446744073709551615"},
    {"training.master_weights", "yes", "true"},
    {"training.checkpoint_dtype", "BF16", "bf16"},
    {"training.recompute", "Layer", "layer"},
    {"training.fused_ce", "ON", "on"},
    {"training.flash_attn", "Off", "off"},
    {"training.compute_dtype", "BF16", "bf16"},
    {"training.save_every", "0", "0"},
    {"training.eval_every", "10", "10"},
    {"training.eval_split", "0.5", "0.5"},
    {"training.threads", "2", "2"},
    {"training.skip_nonfinite", "off", "false"},
    {"training.max_skipped", "3", "3"},
    {"training.memory_limit_gb", "12.5", "12.5"},
    {"lora.rank", "64", "64"},
    {"lora.alpha", "16", "16"},
    {"lora.targets", "[V, q]", "q,v"},
    {"data.train_on", "completion", "completion"},
    {"data.pack", "0", "false"},
    {"data.overlong", "error", "error"},
    {"data.chat_template", "gemma", "gemma"},
};
#define N_EVERY (int)(sizeof every_key / sizeof every_key[0])

// A config whose every key differs from the default.
static void all_changed(rg_train_config *c) {
    rg_train_config_defaults(c);
    for (int i = 0; i < N_EVERY; i++) {
        rg_error err = {0};
        if (rg_train_config_set(c, every_key[i].key, every_key[i].in, "--set", &err) != RG_OK)
            printf("    all_changed: %s\n", err.msg);
    }
}

static void test_set_every_key(void) {
    RG_CHECK(N_EVERY == N_DEFAULTS, "%d keys set, %d known", N_EVERY, N_DEFAULTS);
    rg_train_config d;
    rg_train_config_defaults(&d);
    for (int i = 0; i < N_EVERY; i++) {
        rg_train_config c = d;
        rg_error err = {0};
        rg_status st = rg_train_config_set(&c, every_key[i].key, every_key[i].in, "--set", &err);
        RG_CHECK(st == RG_OK, "%s=%s: %s", every_key[i].key, every_key[i].in, err.msg);
        char buf[256], names[512];
        bool ok = rg_train_config_get(&c, every_key[i].key, buf, sizeof buf);
        RG_CHECK(ok && strcmp(buf, every_key[i].out) == 0, "%s=%s: get '%s' want '%s'", every_key[i].key,
                 every_key[i].in, buf, every_key[i].out);
        int n = rg_train_config_diff(&d, &c, names, sizeof names);
        RG_CHECK(n == 1 && strcmp(names, every_key[i].key) == 0, "%s: diff %d '%s'", every_key[i].key, n, names);
    }
    // The fields, directly.
    rg_train_config c;
    all_changed(&c);
    RG_CHECK(c.method == RG_TRAIN_FULL && c.optimizer == RG_OPTIM_SGD && c.schedule == RG_SCHED_COSINE, "enums");
    RG_CHECK(c.lr == 3e-4 && c.steps == 1000 && c.epochs == 2.5 && c.eps == 1e-6, "lr %g steps %lld", c.lr,
             (long long)c.steps);
    RG_CHECK(c.seed == UINT64_MAX && c.checkpoint_dtype == RG_TYPE_BF16, "seed %llu dtype %u",
             (unsigned long long)c.seed, c.checkpoint_dtype);
    RG_CHECK(c.lora_targets == (RG_LORA_Q | RG_LORA_V) && c.lora_rank == 64 && c.lora_alpha == 16, "targets %u",
             c.lora_targets);
    RG_CHECK(c.train_on == RG_TRAIN_ON_COMPLETION && !c.pack && c.overlong == RG_OVERLONG_ERROR && !c.skip_nonfinite &&
                 c.master_weights,
             "data/bools");
    rg_train_config d2;
    rg_train_config_defaults(&d2);
    char names[2048];
    int n = rg_train_config_diff(&d2, &c, names, sizeof names);
    RG_CHECK(n == N_DEFAULTS, "all changed: diff %d of %d: %s", n, N_DEFAULTS, names);
}

// Other good spellings.
static const struct {
    const char *key, *in, *out;
} good_values[] = {
    {"data.pack", "TRUE", "true"},        {"data.pack", "On", "true"},       {"data.pack", "1", "true"},
    {"data.pack", "no", "false"},         {"data.pack", "OFF", "false"},     {"data.pack", "false", "false"},
    {"training.steps", "+5", "5"},        {"training.steps", "  7\t", "7"},  {"training.steps", "2.0", "2"},
    {"training.steps", "1E2", "100"},     {"training.steps", "-0", "0"},     {"training.seed", "0", "0"},
    {"training.seed", "1e3", "1000"},     {"training.lr", "1E-4", "0.0001"}, {"training.lr", "AUTO", "auto"},
    {"training.lr", "0", "auto"},         {"training.lr", ".5", "0.5"},      {"training.lr", "0.1", "0.1"},
    {"lora.targets", "attn", "q,k,v,o"},  {"lora.targets", "mlp", "gate,up,down"},
    {"lora.targets", "ALL", "q,k,v,o,gate,up,down,in,out"},                         {"lora.targets", "q, attn", "q,k,v,o"},
    {"lora.targets", "down,up", "up,down"}, {"lora.targets", "out,in", "in,out"}, {"lora.targets", "mixer", "in,out"}, {"lora.targets", "[ k ]", "k"}, {"training.optimizer", "AdamW", "adamw"},
    {"training.checkpoint_dtype", "F16", "f16"}, {"data.overlong", "Drop", "drop"},
    {"data.chat_template", "Llama3.1", "llama3.1"},
    {"training.eval_split", "0", "0"},    {"training.beta1", "0", "0"},      {"training.eps", "1", "1"},
};

static void test_good_values(void) {
    for (size_t i = 0; i < sizeof good_values / sizeof good_values[0]; i++) {
        rg_train_config c;
        rg_train_config_defaults(&c);
        rg_error err = {0};
        rg_status st = rg_train_config_set(&c, good_values[i].key, good_values[i].in, NULL, &err);
        char buf[256] = "";
        rg_train_config_get(&c, good_values[i].key, buf, sizeof buf);
        RG_CHECK(st == RG_OK && strcmp(buf, good_values[i].out) == 0, "%s='%s': st %d get '%s' want '%s' (%s)",
                 good_values[i].key, good_values[i].in, st, buf, good_values[i].out, err.msg);
    }
}

// ---------------------------------------------------------- bad values ---

static const struct {
    const char *key, *value, *want;  // want: a part of the message (the key and "(--set)" are checked too)
} bad_values[] = {
    {"training.steps", "ten", "training.steps: 'ten' is not an integer (--set)"},
    {"training.steps", "1.5", "'1.5' is not an integer"},
    {"training.steps", "10x", "'10x' is not an integer"},
    {"training.steps", "0x10", "is not an integer"},
    {"training.steps", "99999999999999999999", "out of range for a 64-bit integer"},
    {"training.steps", "1e30", "out of range for a 64-bit integer"},
    {"training.steps", "nan", "is not an integer"},
    {"training.steps", "-1", "training.steps: -1 is out of range >= 0"},
    {"training.beta1", "1.5", "training.beta1: 1.5 is out of range [0, 1) (--set)"},
    {"training.beta1", "1", "out of range [0, 1)"},
    {"training.beta2", "-0.1", "out of range [0, 1)"},
    {"training.eps", "0", "out of range (0, 1]"},
    {"training.ctx", "4", "training.ctx: 4 is out of range [8, 16777216]"},
    {"training.eval_split", "0.6", "out of range [0, 0.5]"},
    {"training.grad_accum", "0", "out of range >= 1"},
    {"training.batch_size", "0", "out of range >= 1"},
    {"training.threads", "5000", "out of range [0, 1024]"},
    {"lora.rank", "0", "out of range [1, 65536]"},
    {"lora.alpha", "0", "lora.alpha: 0 is out of range > 0"},
    {"training.lr", "nan", "'nan' is not a finite number"},
    {"training.lr", "inf", "is not a finite number"},
    {"training.lr", "-Infinity", "is not a finite number"},
    {"training.lr", "1e999", "is not a finite number"},
    {"training.lr", "1e-4x", "'1e-4x' is not a number or auto"},
    {"training.lr", "-1e-4", "out of range [0, 10]"},
    {"training.epochs", "two", "'two' is not a number"},
    {"training.lr", "", "training.lr: empty value"},
    {"training.lr", "   ", "training.lr: empty value"},
    {"training.master_weights", "maybe", "'maybe' is not a boolean; expected true|false|yes|no|on|off|1|0"},
    {"data.pack", "2", "is not a boolean"},
    {"training.optimizer", "adam", "training.optimizer: 'adam' is not one of adamw|sgd"},
    {"training.schedule", "step", "is not one of constant|linear|cosine"},
    {"training.checkpoint_dtype", "q8_0", "is not one of f32|f16|bf16"},
    {"training.recompute", "full", "training.recompute: 'full' is not one of auto|none|layer"},
    {"training.fused_ce", "yes", "training.fused_ce: 'yes' is not one of auto|on|off"},
    {"training.flash_attn", "fa2", "training.flash_attn: 'fa2' is not one of auto|on|off"},
    {"training.compute_dtype", "fp16", "training.compute_dtype: 'fp16' is not one of auto|f32|bf16 (--set)"},
    {"training.compute_dtype", "amx", "training.compute_dtype: 'amx' is not one of auto|f32|bf16"},
    {"data.train_on", "assist", "is not one of all|assistant|completion"},
    {"data.overlong", "wrap", "is not one of truncate|drop|error"},
    {"data.chat_template", "gemma2", "data.chat_template: 'gemma2' is not one of model|chatml|llama3|llama3.1|lfm2|gemma"},
    {"training.method", "qlora", "is not one of full|lora"},
    {"lora.targets", "q,x", "'x' is not a target"},
    {"lora.targets", "[]", "is an empty list"},
    {"lora.targets", "q,,v", "has an empty item"},
    {"lora.targets", "q,", "has an empty item"},
    {"training.seed", "-1", "'-1' is not an unsigned integer"},
    {"training.seed", "18446744073709551616", "out of range for an unsigned 64-bit integer"},
    {"training.seed", "1.5", "is not an unsigned integer"},
};

static void test_bad_values(void) {
    rg_train_config d;
    rg_train_config_defaults(&d);
    for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++) {
        rg_train_config c = d;
        rg_error err = {0};
        rg_status st = rg_train_config_set(&c, bad_values[i].key, bad_values[i].value, "--set", &err);
        RG_CHECK(st == RG_ERR_ARG, "%s='%s': status %d, want RG_ERR_ARG", bad_values[i].key, bad_values[i].value, st);
        RG_CHECK(strstr(err.msg, bad_values[i].want) && strstr(err.msg, bad_values[i].key) && strstr(err.msg, "(--set)"),
                 "%s='%s': message '%s' lacks '%s'", bad_values[i].key, bad_values[i].value, err.msg,
                 bad_values[i].want);
        char names[256];
        RG_CHECK(rg_train_config_diff(&d, &c, names, sizeof names) == 0, "%s: a failed set changed %s",
                 bad_values[i].key, names);
    }
    // A value too long to be real, and the source named in the message.
    char big[700];
    memset(big, '1', sizeof big - 1);
    big[sizeof big - 1] = 0;
    rg_train_config c = d;
    rg_error err = {0};
    RG_CHECK(rg_train_config_set(&c, "training.steps", big, "--set", &err) == RG_ERR_ARG && strstr(err.msg, "too long"),
             "long value: %s", err.msg);
    RG_CHECK(rg_train_config_set(&c, "lora.rank", "x", "cfg.yaml:12", &err) == RG_ERR_ARG &&
                 strcmp(err.msg, "lora.rank: 'x' is not an integer (cfg.yaml:12)") == 0,
             "where: %s", err.msg);
}

// ---------------------------------------------------------- unknown keys ---

static const struct {
    const char *key, *suggestion;  // NULL: no suggestion
} unknown_keys[] = {
    {"training.lrr", "training.lr"},
    {"training.lR", "training.lr"},
    {"Training.LR", "training.lr"},
    {"lora.rnak", "lora.rank"},
    {"training.warmup_step", "training.warmup_steps"},
    {"training.warmup", "training.warmup_steps"},
    {"lr", "training.lr"},
    {"training.rank", "lora.rank"},
    {"data.train-on", "data.train_on"},
    {"foo.bar", NULL},
    {"training", NULL},
    {"training.learning_rate_schedule_type", NULL},
};

static void test_unknown_keys(void) {
    for (size_t i = 0; i < sizeof unknown_keys / sizeof unknown_keys[0]; i++) {
        rg_train_config c;
        rg_train_config_defaults(&c);
        rg_error err = {0};
        rg_status st = rg_train_config_set(&c, unknown_keys[i].key, "1", "--set", &err);
        char want[256];
        snprintf(want, sizeof want, "unknown key '%s' (--set)", unknown_keys[i].key);
        RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, want), "%s: st %d '%s'", unknown_keys[i].key, st, err.msg);
        if (unknown_keys[i].suggestion) {
            snprintf(want, sizeof want, "did you mean '%s'?", unknown_keys[i].suggestion);
            RG_CHECK(strstr(err.msg, want) != NULL, "%s: '%s' lacks %s", unknown_keys[i].key, err.msg, want);
        } else {
            RG_CHECK(strstr(err.msg, "did you mean") == NULL, "%s: unexpected suggestion '%s'", unknown_keys[i].key,
                     err.msg);
        }
    }
    rg_train_config c;
    rg_train_config_defaults(&c);
    rg_error err = {0};
    rg_train_config_set(&c, "training.lrr", "1e-4", "--set", &err);
    RG_CHECK(strcmp(err.msg, "unknown key 'training.lrr' (--set); did you mean 'training.lr'?") == 0, "exact: %s",
             err.msg);
    char buf[64] = "x";
    RG_CHECK(!rg_train_config_get(&c, "training.lrr", buf, sizeof buf) && buf[0] == 0, "get of an unknown key: '%s'",
             buf);
    RG_CHECK(!rg_train_config_get(&c, "lora.targets", buf, 4), "get into a short buffer succeeded: '%s'", buf);
}

// --------------------------------------------------------------- set_kv ---

static void test_set_kv(void) {
    static const struct {
        const char *kv;
        rg_status st;
        const char *key, *value, *want;  // after success: key reads value; on failure: a part of the message
    } cases[] = {
        {"training.lr=1e-4", RG_OK, "training.lr", "0.0001", NULL},
        {" lora.rank = 8 ", RG_OK, "lora.rank", "8", NULL},
        {"lora.targets=q,v", RG_OK, "lora.targets", "q,v", NULL},
        {"lora.targets=[gate, up]", RG_OK, "lora.targets", "gate,up", NULL},
        {"training.lr", RG_ERR_ARG, NULL, NULL, "--set 'training.lr': expected key=value"},
        {"", RG_ERR_ARG, NULL, NULL, "expected key=value"},
        {"=5", RG_ERR_ARG, NULL, NULL, "the key before '=' is empty"},
        {"training.lr=", RG_ERR_ARG, NULL, NULL, "training.lr: empty value (--set)"},
        {"training.steps=5=6", RG_ERR_ARG, NULL, NULL, "'5=6' is not an integer"},
        {"training.lrr=1", RG_ERR_ARG, NULL, NULL, "unknown key 'training.lrr' (--set); did you mean 'training.lr'?"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rg_train_config c;
        rg_train_config_defaults(&c);
        rg_error err = {0};
        rg_status st = rg_train_config_set_kv(&c, cases[i].kv, &err);
        RG_CHECK(st == cases[i].st, "'%s': status %d want %d (%s)", cases[i].kv, st, cases[i].st, err.msg);
        if (cases[i].st == RG_OK) {
            char buf[128] = "";
            rg_train_config_get(&c, cases[i].key, buf, sizeof buf);
            RG_CHECK(strcmp(buf, cases[i].value) == 0, "'%s': %s = '%s' want '%s'", cases[i].kv, cases[i].key, buf,
                     cases[i].value);
        } else {
            RG_CHECK(strstr(err.msg, cases[i].want) != NULL, "'%s': '%s' lacks '%s'", cases[i].kv, err.msg,
                     cases[i].want);
        }
    }
    // Later ones win.
    rg_train_config c;
    rg_train_config_defaults(&c);
    rg_error err = {0};
    rg_train_config_set_kv(&c, "lora.rank=4", &err);
    rg_train_config_set_kv(&c, "lora.rank=32", &err);
    RG_CHECK(c.lora_rank == 32, "rank %lld", (long long)c.lora_rank);
}

// ------------------------------------------------------------- validate ---

static void v_ok(rg_train_config *c) { (void)c; }
static void v_warmup_over(rg_train_config *c) { c->steps = 100, c->warmup_steps = 200; }
static void v_warmup_epochs(rg_train_config *c) { c->steps = 0, c->warmup_steps = 200; }
static void v_warmup_equal(rg_train_config *c) { c->steps = 100, c->warmup_steps = 100; }
static void v_no_length(rg_train_config *c) { c->steps = 0, c->epochs = 0; }
static void v_steps_no_epochs(rg_train_config *c) { c->steps = 10, c->epochs = 0; }
static void v_grad_accum(rg_train_config *c) { c->grad_accum = 0; }
static void v_ctx(rg_train_config *c) { c->ctx = 4; }
static void v_batch(rg_train_config *c) { c->batch_size = -3; }
static void v_method(rg_train_config *c) { c->method = (rg_train_method)7; }
static void v_dtype(rg_train_config *c) { c->checkpoint_dtype = RG_TYPE_Q4_0; }
static void v_f16_no_recompute(rg_train_config *c) { c->checkpoint_dtype = RG_TYPE_F16, c->recompute = RG_RECOMPUTE_NONE; }
static void v_bf16_layer(rg_train_config *c) { c->checkpoint_dtype = RG_TYPE_BF16, c->recompute = RG_RECOMPUTE_LAYER; }
static void v_targets0(rg_train_config *c) { c->lora_targets = 0; }
static void v_targets_bad(rg_train_config *c) { c->lora_targets = 512 | RG_LORA_Q; }
static void v_lr_nan(rg_train_config *c) { c->lr = NAN; }
static void v_beta2(rg_train_config *c) { c->beta2 = 1.0; }
static void v_split(rg_train_config *c) { c->eval_split = 0.75; }
static void v_step_overflow(rg_train_config *c) { c->batch_size = INT64_C(1) << 62, c->grad_accum = 2; }

static void test_validate(void) {
    static const struct {
        const char *name;
        void (*change)(rg_train_config *);
        const char *want;  // NULL: valid
    } cases[] = {
        {"defaults", v_ok, NULL},
        {"warmup > steps", v_warmup_over, "training.warmup_steps (200) is more than training.steps (100)"},
        {"warmup with epochs", v_warmup_epochs, NULL},
        {"warmup == steps", v_warmup_equal, NULL},
        {"no steps, no epochs", v_no_length, "training.epochs is 0 and training.steps is 0"},
        {"steps without epochs", v_steps_no_epochs, NULL},
        {"grad_accum 0", v_grad_accum, "training.grad_accum: 0 is out of range >= 1"},
        {"ctx 4", v_ctx, "training.ctx: 4 is out of range [8, 16777216]"},
        {"batch -3", v_batch, "training.batch_size: -3"},
        {"method 7", v_method, "training.method: 7 is not one of full|lora"},
        {"dtype q4_0", v_dtype, "training.checkpoint_dtype: 2 is not one of f32|f16|bf16"},
        {"f16 checkpoints without recompute", v_f16_no_recompute,
         "training.checkpoint_dtype=f16 stores the layer inputs that recompute starts from, but training.recompute is none"},
        {"bf16 checkpoints, layer recompute", v_bf16_layer, NULL},
        {"no targets", v_targets0, "lora.targets"},
        {"unknown target bit", v_targets_bad, "lora.targets"},
        {"lr NaN", v_lr_nan, "training.lr"},
        {"beta2 1", v_beta2, "training.beta2: 1 is out of range [0, 1)"},
        {"eval_split 0.75", v_split, "training.eval_split"},
        {"a step too large to count", v_step_overflow,
         "training.batch_size (4611686018427387904) times training.grad_accum (2) times training.ctx (512) tokens per "
         "step do not fit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rg_train_config c;
        rg_train_config_defaults(&c);
        cases[i].change(&c);
        rg_error err = {0};
        rg_train_spec sp;
        rg_status st = rg_train_config_validate(&c, &sp, &err);
        if (!cases[i].want)
            RG_CHECK(st == RG_OK, "%s: refused: %s", cases[i].name, err.msg);
        else
            RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, cases[i].want), "%s: status %d '%s' lacks '%s'", cases[i].name,
                     st, err.msg, cases[i].want);
    }
}

// ------------------------------------------------------------ diff, help ---

static void test_diff(void) {
    rg_train_config a, b;
    rg_train_config_defaults(&a);
    b = a;
    char buf[256] = "x";
    RG_CHECK(rg_train_config_diff(&a, &b, buf, sizeof buf) == 0 && buf[0] == 0, "equal: '%s'", buf);
    rg_error err = {0};
    rg_train_config_set(&b, "lora.rank", "8", NULL, &err);
    rg_train_config_set(&b, "training.lr", "1e-4", NULL, &err);
    rg_train_config_set(&b, "data.pack", "false", NULL, &err);
    int n = rg_train_config_diff(&a, &b, buf, sizeof buf);
    RG_CHECK(n == 3 && strcmp(buf, "training.lr, lora.rank, data.pack") == 0, "three: %d '%s'", n, buf);
    // Doubles are compared by bits: 0.1 + 0.2 is not 0.3.
    rg_train_config c = a, d = a;
    c.weight_decay = 0.1 + 0.2;
    d.weight_decay = 0.3;
    n = rg_train_config_diff(&c, &d, buf, sizeof buf);
    RG_CHECK(n == 1 && strcmp(buf, "training.weight_decay") == 0, "0.1+0.2 vs 0.3: %d '%s'", n, buf);
    // A short buffer: the count stays right, the list ends with "...".
    char small[16];
    n = rg_train_config_diff(&a, &b, small, sizeof small);
    RG_CHECK(n == 3 && strlen(small) < sizeof small && strstr(small, "..."), "short: %d '%s'", n, small);
    char tiny[4];
    n = rg_train_config_diff(&a, &b, tiny, sizeof tiny);
    RG_CHECK(n == 3 && strlen(tiny) < sizeof tiny, "tiny: %d '%s'", n, tiny);
    RG_CHECK(rg_train_config_diff(&a, &b, NULL, 0) == 3, "no buffer");
}

static void test_help(void) {
    char *help = help_text();
    RG_REQUIRE(help, "open_memstream failed");
    for (int i = 0; i < N_DEFAULTS; i++) RG_CHECK(strstr(help, defaults[i].key) != NULL, "help lacks %s", defaults[i].key);
    static const char *const parts[] = {
        "\ntraining:\n", "\nlora:\n", "\ndata:\n", "auto (2e-4 lora, 5e-5 full)", "adamw|sgd", "constant|linear|cosine",
        "f32|f16|bf16", "all|assistant|completion", "truncate|drop|error", "number [0, 1)", "integer [8, 16777216]",
        "default 512", "default true", "bool", "--set key=value",
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        RG_CHECK(strstr(help, parts[i]) != NULL, "help lacks '%s'", parts[i]);
    // The sections come in the order training, lora, data, each once.
    const char *t = strstr(help, "\ntraining:\n"), *l = strstr(help, "\nlora:\n"), *d = strstr(help, "\ndata:\n");
    RG_CHECK(t && l && d && t < l && l < d && !strstr(t + 1, "\ntraining:\n"), "sections out of order");
    free(help);
}

// --------------------------------------------------------- write, reload ---

// Awkward values on top of all_changed(): doubles that need 17 digits, a
// subnormal, the largest seed.
static void awkward(rg_train_config *c) {
    all_changed(c);
    c->lr = 0.1 + 0.2;              // 0.30000000000000004
    c->weight_decay = 1e-300;
    c->memory_limit_gb = 1.0 / 3.0;
    c->eps = 4.9406564584124654e-324;  // the smallest subnormal
    c->lora_alpha = 123456789.125;
    c->epochs = 1e6;
    c->lora_targets = RG_LORA_K | RG_LORA_O | RG_LORA_DOWN;
}

static void test_write_reload_by_set(void) {
    rg_train_config a, b;
    awkward(&a);
    rg_train_config_defaults(&b);
    char *text = write_text(&a);
    RG_REQUIRE(text, "open_memstream failed");
    // Each line is "key: value"; set() reads the value (lists as "[k, o, down]").
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        char *colon = strstr(line, ": ");
        RG_REQUIRE(colon, "line without ': ': '%s'", line);
        *colon = 0;
        rg_error err = {0};
        RG_CHECK(rg_train_config_set(&b, line, colon + 2, "write()", &err) == RG_OK, "%s", err.msg);
    }
    free(text);
    char names[2048];
    int n = rg_train_config_diff(&a, &b, names, sizeof names);
    RG_CHECK(lines == N_DEFAULTS && n == 0, "%d lines; %d keys differ after reading write() back: %s", lines, n, names);
}

static void test_write_reload_yaml(void) {
    NEED_YAML();
    rg_train_config a, b;
    awkward(&a);
    rg_train_config_defaults(&b);
    char *text = write_text(&a);
    RG_REQUIRE(text, "open_memstream failed");
    char path[512];
    tmp_file(path, sizeof path, "written.yaml", text);
    rg_error err = {0};
    rg_status st = rg_train_config_load_yaml(&b, path, &err);
    RG_CHECK(st == RG_OK, "load of write(): %s", err.msg);
    char names[2048];
    int n = rg_train_config_diff(&a, &b, names, sizeof names);
    RG_CHECK(n == 0, "%d keys differ after write -> load_yaml: %s", n, names);
    char *again = write_text(&b);
    RG_CHECK(again && strcmp(text, again) == 0, "write() of the reloaded config differs");
    free(again);
    free(text);
    // Defaults too (auto lr, all targets).
    rg_train_config_defaults(&a);
    all_changed(&b);
    text = write_text(&a);
    tmp_file(path, sizeof path, "defaults.yaml", text ? text : "");
    free(text);
    st = rg_train_config_load_yaml(&b, path, &err);
    n = rg_train_config_diff(&a, &b, names, sizeof names);
    RG_CHECK(st == RG_OK && n == 0, "defaults: %s; %d differ: %s", st ? err.msg : "ok", n, names);
}

// ------------------------------------------------------------------ YAML ---

static const char *const same_config[] = {
    // nested
    "# a comment\n"
    "training:\n"
    "  lr: 1e-4\n"
    "  steps: 200\n"
    "  warmup_steps: 10   # trailing comment\n"
    "  optimizer: SGD\n"
    "  master_weights: yes\n"
    "lora:\n"
    "  rank: 8\n"
    "  targets: [q, v]\n"
    "data:\n"
    "  train_on: all\n",
    // flat
    "training.lr: 1e-4\n"
    "training.steps: 200\n"
    "training.warmup_steps: 10\n"
    "training.optimizer: sgd\n"
    "training.master_weights: true\n"
    "lora.rank: 8\n"
    "lora.targets: q,v\n"
    "data.train_on: all\n",
    // mixed, quoted values, flow mapping, block list
    "---\n"
    "training:\n"
    "  lr: \"1e-4\"\n"
    "  steps: '200'\n"
    "training.warmup_steps: 10\n"
    "training.optimizer: sgd\n"
    "training.master_weights: on\n"
    "lora: {rank: 8}\n"
    "lora.targets:\n"
    "  - V\n"
    "  - q\n"
    "data.train_on: all\n"
    "...\n",
};

static void test_yaml_forms(void) {
    NEED_YAML();
    rg_train_config d, first;
    rg_train_config_defaults(&d);
    for (size_t i = 0; i < sizeof same_config / sizeof same_config[0]; i++) {
        char path[512], name[32];
        snprintf(name, sizeof name, "form%zu.yaml", i);
        tmp_file(path, sizeof path, name, same_config[i]);
        rg_train_config c = d;
        rg_error err = {0};
        rg_status st = rg_train_config_load_yaml(&c, path, &err);
        RG_CHECK(st == RG_OK, "form %zu: %s", i, err.msg);
        RG_CHECK(c.lr == 1e-4 && c.steps == 200 && c.warmup_steps == 10 && c.optimizer == RG_OPTIM_SGD &&
                     c.master_weights && c.lora_rank == 8 && c.lora_targets == (RG_LORA_Q | RG_LORA_V) &&
                     c.train_on == RG_TRAIN_ON_ALL,
                 "form %zu: lr %g steps %lld warmup %lld opt %d mw %d rank %lld targets %u train_on %d", i, c.lr,
                 (long long)c.steps, (long long)c.warmup_steps, c.optimizer, c.master_weights, (long long)c.lora_rank,
                 c.lora_targets, c.train_on);
        char names[1024];
        int n = rg_train_config_diff(&d, &c, names, sizeof names);
        RG_CHECK(n == 8, "form %zu: %d keys changed: %s", i, n, names);
        if (i == 0) {
            first = c;
        } else {
            n = rg_train_config_diff(&first, &c, names, sizeof names);
            RG_CHECK(n == 0, "form %zu differs from the nested form in %s", i, names);
        }
    }
}

// The same texts from memory: the file's name only in messages.
static void test_yaml_text(void) {
    NEED_YAML();
    rg_train_config d, from_file, from_text;
    rg_train_config_defaults(&d);
    for (size_t i = 0; i < sizeof same_config / sizeof same_config[0]; i++) {
        char path[512];
        tmp_file(path, sizeof path, "text.yaml", same_config[i]);
        rg_error err = {0};
        from_file = from_text = d;
        RG_CHECK(rg_train_config_load_yaml(&from_file, path, &err) == RG_OK, "form %zu from a file: %s", i, err.msg);
        RG_CHECK(rg_train_config_load_yaml_text(&from_text, "mem.yaml", same_config[i], strlen(same_config[i]), &err) ==
                     RG_OK,
                 "form %zu from memory: %s", i, err.msg);
        char names[512];
        RG_CHECK(rg_train_config_diff(&from_file, &from_text, names, sizeof names) == 0, "form %zu: %s differ", i, names);
    }
    // Not NUL-terminated: only len bytes are read; errors name the given name.
    static const char text[] = "training.steps: 12junk";
    rg_train_config c = d;
    rg_error err = {0};
    RG_CHECK(rg_train_config_load_yaml_text(&c, "mem.yaml", text, 18, &err) == RG_OK && c.steps == 12, "%s", err.msg);
    c = d;
    RG_CHECK(rg_train_config_load_yaml_text(&c, "mem.yaml", text, sizeof text - 1, &err) == RG_ERR_ARG &&
                 strstr(err.msg, "(mem.yaml:1)") && rg_train_config_diff(&c, &d, NULL, 0) == 0,
             "bad value from memory: %s", err.msg);
}

static void test_yaml_lists_and_empty(void) {
    NEED_YAML();
    static const struct {
        const char *text;
        uint32_t targets;  // 0: targets stay at the default
    } cases[] = {
        {"lora:\n  targets:\n    - gate\n    - up\n    - down\n", RG_LORA_GATE | RG_LORA_UP | RG_LORA_DOWN},
        {"lora:\n  targets:\n  - attn\n  - mlp\n", RG_LORA_ALL & ~(RG_LORA_IN | RG_LORA_OUT)},
        {"lora:\n  targets: [mixer, q]\n", RG_LORA_IN | RG_LORA_OUT | RG_LORA_Q},
        {"lora.targets: [attn]\n", RG_LORA_Q | RG_LORA_K | RG_LORA_V | RG_LORA_O},
        {"lora.targets: \"q,k\"\n", RG_LORA_Q | RG_LORA_K},
        {"lora:\n  targets: [o, q, o]\n", RG_LORA_Q | RG_LORA_O},
        {"", 0},
        {"# only a comment\n", 0},
        {"---\n", 0},
        {"training:\n", 0},
        {"training:\nlora:\n  # nothing\n", 0},
        {"{}\n", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        tmp_file(path, sizeof path, "list.yaml", cases[i].text);
        rg_train_config c;
        rg_train_config_defaults(&c);
        c.lora_targets = RG_LORA_DOWN;  // a marker: empty files leave it
        rg_error err = {0};
        rg_status st = rg_train_config_load_yaml(&c, path, &err);
        uint32_t want = cases[i].targets ? cases[i].targets : RG_LORA_DOWN;
        RG_CHECK(st == RG_OK && c.lora_targets == want, "case %zu '%s': %s; targets %u want %u", i, cases[i].text,
                 st ? err.msg : "ok", c.lora_targets, want);
    }
}

// Each file is refused; the message holds every listed part ("@" stands for
// the file's path) and the struct is untouched.
static const struct {
    const char *name, *text;
    rg_status st;
    const char *parts[3];
} yaml_errors[] = {
    {"syntax: bad indent", "training:\n  lr: 1e-4\n  steps: 10\n    oops: 1\n", RG_ERR_FORMAT,
     {"@:4: YAML syntax error", "mapping values are not allowed", NULL}},
    {"syntax: unclosed list", "lora:\n  rank: 4\n  targets: [q, v\ndata.pack: true\n", RG_ERR_FORMAT,
     {"@:4: YAML syntax error", "did not find expected ','", NULL}},
    {"syntax: tab", "training:\n\tlr: 1\n", RG_ERR_FORMAT, {"@:2: YAML syntax error", NULL, NULL}},
    {"syntax: dedent", "training:\n  lr: 1\n x: 2\n", RG_ERR_FORMAT,
     {"@:3: YAML syntax error", "did not find expected key", NULL}},
    {"syntax: open quote", "training:\n  lr: 1\ndata.overlong: \"drop\n", RG_ERR_FORMAT,
     {"YAML syntax error", "quoted scalar", NULL}},
    {"syntax after a bad value", "lora.rank: many\nlora: [\n", RG_ERR_FORMAT, {"@:", "YAML syntax error", NULL}},
    // No final newline: libyaml puts its mark one line past the text; the message names the last line.
    {"syntax at the end, no final newline", "training:\n  lr: 1e-4\nlora", RG_ERR_FORMAT,
     {"@:3: YAML syntax error", "(at the end of the file, while scanning a simple key)", NULL}},
    {"unclosed list at the end", "data.pack: true\nlora.targets: [q,", RG_ERR_FORMAT,
     {"@:2: YAML syntax error", "at the end of the file", NULL}},
    {"list for a scalar key", "training:\n  steps: 3\n  lr: [1, 2]\n", RG_ERR_ARG,
     {"training.lr: a list is not allowed here", "(@:3)", NULL}},
    {"block list for a scalar key", "training.steps:\n  - 1\n", RG_ERR_ARG,
     {"training.steps: a list is not allowed here; expected integer >= 0", "(@:1)", NULL}},
    {"mapping for a key", "training:\n  lr:\n    value: 1\n", RG_ERR_ARG,
     {"training.lr: a mapping is not allowed here", "(@:2)", NULL}},
    {"duplicate flat", "training.lr: 1e-4\ntraining.steps: 5\ntraining.lr: 2e-4\n", RG_ERR_FORMAT,
     {"@:3: duplicate key 'training.lr'", "first at line 1", NULL}},
    {"duplicate nested and flat", "training:\n  lr: 1e-4\ntraining.lr: 2e-4\n", RG_ERR_FORMAT,
     {"@:3: duplicate key 'training.lr'", "first at line 2", NULL}},
    {"duplicate section", "training:\n  lr: 1e-4\nlora:\n  rank: 4\ntraining:\n  steps: 5\n", RG_ERR_FORMAT,
     {"@:5: duplicate key 'training'", "first at line 1", NULL}},
    {"duplicate in a flow mapping", "lora: {rank: 4, rank: 8}\n", RG_ERR_FORMAT,
     {"duplicate key 'lora.rank'", "@:1", NULL}},
    {"unknown key", "training:\n  steps: 3\n  lrr: 1\n", RG_ERR_ARG,
     {"unknown key 'training.lrr' (@:3); did you mean 'training.lr'?", NULL, NULL}},
    {"unknown section", "trainng:\n  lr: 1\n", RG_ERR_ARG,
     {"unknown key 'trainng.lr' (@:2); did you mean 'training.lr'?", NULL, NULL}},
    {"bad value", "lora:\n  rank: many\n", RG_ERR_ARG, {"lora.rank: 'many' is not an integer (@:2)", NULL, NULL}},
    {"out of range", "training.beta1: 1.5\n", RG_ERR_ARG, {"training.beta1: 1.5 is out of range [0, 1) (@:1)", NULL, NULL}},
    {"empty value", "training.steps: 4\ntraining.lr:\n", RG_ERR_ARG, {"training.lr: empty value (@:2)", NULL, NULL}},
    {"null value", "training.lr: ~\n", RG_ERR_ARG, {"training.lr: '~' is not a number", "(@:1)", NULL}},
    {"bad list item", "lora:\n  targets:\n    - q\n    - qq\n", RG_ERR_ARG,
     {"lora.targets: 'qq' is not a target", "(@:4)", NULL}},
    {"empty list", "lora.targets: []\n", RG_ERR_ARG, {"lora.targets", "empty list", "(@:1)"}},
    {"nested list", "lora.targets: [[q]]\n", RG_ERR_ARG, {"lora.targets: list items must be plain words", "@:1", NULL}},
    {"anchor", "training:\n  lr: &x 1e-4\n  eps: *x\n", RG_ERR_UNSUPPORTED, {"@:2: YAML anchors (&x)", NULL, NULL}},
    {"tag", "training.lr: !!float 1e-4\n", RG_ERR_UNSUPPORTED, {"@:1: YAML tags", NULL, NULL}},
    {"top-level scalar", "just text\n", RG_ERR_FORMAT, {"@:1: the top level must be a mapping", NULL, NULL}},
    {"top-level list", "- training.lr: 1\n", RG_ERR_FORMAT, {"@:1: the top level must be a mapping", NULL, NULL}},
    {"two documents", "training.lr: 1e-4\n---\ntraining.steps: 3\n", RG_ERR_FORMAT,
     {"@:2: more than one YAML document", NULL, NULL}},
    {"list as a key", "[a, b]: 1\n", RG_ERR_FORMAT, {"@:1: keys must be plain text", NULL, NULL}},
    {"empty key", "training:\n  \"\": 1\n", RG_ERR_FORMAT, {"@:2: empty key", NULL, NULL}},
};

static void test_yaml_errors(void) {
    NEED_YAML();
    rg_train_config base;
    rg_train_config_defaults(&base);
    base.lr = 1e-3;
    base.steps = 77;
    for (size_t i = 0; i < sizeof yaml_errors / sizeof yaml_errors[0]; i++) {
        char path[512];
        tmp_file(path, sizeof path, "bad.yaml", yaml_errors[i].text);
        rg_train_config c = base;
        rg_error err = {0};
        rg_status st = rg_train_config_load_yaml(&c, path, &err);
        RG_CHECK(st == yaml_errors[i].st, "%s: status %d want %d (%s)", yaml_errors[i].name, st, yaml_errors[i].st,
                 err.msg);
        for (int p = 0; p < 3 && yaml_errors[i].parts[p]; p++) {
            char want[1024];  // "@" -> the path
            const char *src = yaml_errors[i].parts[p], *at = strchr(src, '@');
            if (at)
                snprintf(want, sizeof want, "%.*s%s%s", (int)(at - src), src, path, at + 1);
            else
                snprintf(want, sizeof want, "%s", src);
            RG_CHECK(strstr(err.msg, want) != NULL, "%s: '%s' lacks '%s'", yaml_errors[i].name, err.msg, want);
        }
        char names[512];
        RG_CHECK(rg_train_config_diff(&base, &c, names, sizeof names) == 0, "%s: a failed load changed %s",
                 yaml_errors[i].name, names);
    }
    // A missing file and a directory.
    char path[512];
    snprintf(path, sizeof path, "%s/no-such.yaml", tmp_dir);
    rg_train_config c = base;
    rg_error err = {0};
    RG_CHECK(rg_train_config_load_yaml(&c, path, &err) == RG_ERR_IO && strstr(err.msg, path) &&
                 strstr(err.msg, "No such file"),
             "missing file: %s", err.msg);
    RG_CHECK(rg_train_config_load_yaml(&c, tmp_dir, &err) == RG_ERR_IO && strstr(err.msg, "not a regular file"),
             "directory: %s", err.msg);
}

// Loading a file over --set values, then --set again: the order the CLI uses.
static void test_yaml_then_set(void) {
    NEED_YAML();
    char path[512];
    tmp_file(path, sizeof path, "layer.yaml", "training:\n  lr: 1e-4\n  steps: 50\n");
    rg_train_config c;
    rg_train_config_defaults(&c);
    rg_error err = {0};
    RG_REQUIRE(rg_train_config_load_yaml(&c, path, &err) == RG_OK, "%s", err.msg);
    RG_REQUIRE(rg_train_config_set_kv(&c, "training.lr=3e-4", &err) == RG_OK, "%s", err.msg);
    RG_CHECK(c.lr == 3e-4 && c.steps == 50, "lr %g steps %lld", c.lr, (long long)c.steps);
}

static void test_yaml_build_state(void) {
#ifdef RG_HAVE_YAML
    char path[512];
    tmp_file(path, sizeof path, "state.yaml", "data.pack: false\n");
    rg_train_config c;
    rg_train_config_defaults(&c);
    rg_error err = {0};
    RG_CHECK(rg_train_config_load_yaml(&c, path, &err) == RG_OK && !c.pack, "with libyaml: %s", err.msg);
    printf("    built with libyaml\n");
#else
    char path[512];
    tmp_file(path, sizeof path, "state.yaml", "data.pack: false\n");
    rg_train_config c;
    rg_train_config_defaults(&c);
    rg_error err = {0};
    rg_status st = rg_train_config_load_yaml(&c, path, &err);
    RG_CHECK(st == RG_ERR_UNSUPPORTED && strstr(err.msg, "no YAML support") && strstr(err.msg, "--set key=value") &&
                 c.pack,
             "without libyaml: status %d '%s'", st, err.msg);
    printf("    built without libyaml: loading is refused as expected\n");
#endif
}

// ------------------------------------------------ training.compute_dtype ---

// auto's rule and the explicit choices on the CPU, for this machine's BF16 path (none here
// without RG_TILES_EMULATE; amx or avx512_bf16 on CPUs that have them): what each resolves to.
static void test_compute_resolve_cpu(void) {
    const bool path = rg_gemm_tiles_path() != RG_TILES_NONE;
    static const struct {
        int asked;
        uint32_t weights;
        int with_path, without_path;  // the resolved dtype; -1: refused
    } rows[] = {
        {RG_COMPUTE_AUTO, RG_TYPE_BF16, RG_COMPUTE_BF16, RG_COMPUTE_F32},
        {RG_COMPUTE_AUTO, RG_TYPE_F32, RG_COMPUTE_F32, RG_COMPUTE_F32},
        {RG_COMPUTE_AUTO, RG_TYPE_F16, RG_COMPUTE_F32, RG_COMPUTE_F32},
        {RG_COMPUTE_AUTO, RG_TYPE_Q4_K, RG_COMPUTE_F32, RG_COMPUTE_F32},
        {RG_COMPUTE_F32, RG_TYPE_BF16, RG_COMPUTE_F32, RG_COMPUTE_F32},
        {RG_COMPUTE_F32, RG_TYPE_Q8_0, RG_COMPUTE_F32, RG_COMPUTE_F32},
        {RG_COMPUTE_BF16, RG_TYPE_BF16, RG_COMPUTE_BF16, -1},
        {RG_COMPUTE_BF16, RG_TYPE_F32, RG_COMPUTE_BF16, -1},
        {RG_COMPUTE_BF16, RG_TYPE_Q4_K, RG_COMPUTE_BF16, -1},
    };
    printf("    this CPU's BF16 path: %s\n", rg_tile_path_name(rg_gemm_tiles_path()));
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const int want = path ? rows[i].with_path : rows[i].without_path;
        rg_train_products p;
        memset(&p, 0x5A, sizeof p);
        rg_error err = {0};
        rg_status st = rg_train_products_resolve(rows[i].asked, rows[i].weights, RG_DEVICE_CPU, &p, &err);
        const char *wt = rg_type_get(rows[i].weights)->name;
        if (want < 0) {
            RG_CHECK(st == RG_ERR_UNSUPPORTED, "row %zu (%d, %s): status %d, want refused", i, rows[i].asked, wt, st);
            continue;
        }
        RG_CHECK(st == RG_OK, "row %zu (%d, %s): %s", i, rows[i].asked, wt, err.msg);
        if (st) continue;
        char where[64];
        snprintf(where, sizeof where, "bf16 on %s", rg_tile_path_name(rg_gemm_tiles_path()));
        RG_CHECK(p.dtype == want && p.bf16_cpu == (want == RG_COMPUTE_BF16) &&
                     !strcmp(p.where, want == RG_COMPUTE_BF16 ? where : "f32") && strstr(p.why, "training.compute_dtype="),
                 "row %zu (%d, %s): dtype %d (want %d), bf16_cpu %d, where '%s', why '%s'", i, rows[i].asked, wt,
                 p.dtype, want, p.bf16_cpu, p.where, p.why);
    }
    rg_train_products p;
    rg_error err = {0};
    RG_CHECK(rg_train_products_resolve(7, RG_TYPE_BF16, RG_DEVICE_CPU, &p, &err) == RG_ERR_ARG &&
                 strstr(err.msg, "training.compute_dtype: 7 is not one of auto|f32|bf16"),
             "an out-of-range value: '%s'", err.msg);
    // auto with BF16 weights and no path says why it stays f32.
    if (!path) {
        RG_CHECK(rg_train_products_resolve(RG_COMPUTE_AUTO, RG_TYPE_BF16, RG_DEVICE_CPU, &p, &err) == RG_OK &&
                     strstr(p.why, "bf16 weights, but") && strstr(p.why, "AMX-BF16"),
                 "auto, no path: why '%s'", p.why);
    }
}

// The refusal: bf16 asked on a CPU with neither AMX-BF16 nor AVX512_BF16, before anything runs.
static void test_compute_bf16_refused_without_path(void) {
    if (rg_gemm_tiles_path() != RG_TILES_NONE)
        RG_SKIP("this CPU has a BF16 path (%s): the refusal cannot happen here", rg_tile_path_name(rg_gemm_tiles_path()));
    rg_train_products p;
    memset(&p, 0x5A, sizeof p);
    const rg_train_products before = p;
    rg_error err = {0};
    rg_status st = rg_train_products_resolve(RG_COMPUTE_BF16, RG_TYPE_BF16, RG_DEVICE_CPU, &p, &err);
    printf("    %s\n", err.msg);
    RG_CHECK(st == RG_ERR_UNSUPPORTED && !strncmp(err.msg, "training.compute_dtype=bf16: ", 29) &&
                 strstr(err.msg, "AMX-BF16") && strstr(err.msg, "AVX512_BF16") && strstr(err.msg, rg_gemm_tiles_missing()),
             "status %d, '%s'", st, err.msg);
    RG_CHECK(memcmp(&p, &before, sizeof p) == 0, "a refusal changed *out");
}

// On a CUDA device the key does not change the device's mode (RETRO_CUDA_HALF_GEMM): auto
// takes it, f32 and bf16 are accepted where it does what they say and refused otherwise.
static void test_compute_resolve_cuda(void) {
    static const struct {
        const char *mode;
        int asked;
        uint32_t weights;
        int want;              // -1: refused
        const char *words;     // in `where`, or in the refusal
    } rows[] = {
        {"tensor", RG_COMPUTE_AUTO, RG_TYPE_BF16, RG_COMPUTE_BF16, "bf16 on the cuda tensor cores"},
        {"tensor", RG_COMPUTE_AUTO, RG_TYPE_F16, RG_COMPUTE_F32, "f16 on the cuda tensor cores"},
        {"tensor", RG_COMPUTE_AUTO, RG_TYPE_F32, RG_COMPUTE_F32, "f32"},
        {"tensor", RG_COMPUTE_BF16, RG_TYPE_Q4_K, RG_COMPUTE_BF16, "bf16 on the cuda tensor cores"},
        {"tensor", RG_COMPUTE_BF16, RG_TYPE_F32, -1, "this model's weights are f32"},
        {"tensor", RG_COMPUTE_F32, RG_TYPE_BF16, -1, "set RETRO_CUDA_HALF_GEMM=f32"},
        {"tensor", RG_COMPUTE_F32, RG_TYPE_F32, RG_COMPUTE_F32, "f32"},
        {"f32", RG_COMPUTE_AUTO, RG_TYPE_BF16, RG_COMPUTE_F32, "f32"},
        {"f32", RG_COMPUTE_F32, RG_TYPE_BF16, RG_COMPUTE_F32, "f32"},
        {"f32", RG_COMPUTE_BF16, RG_TYPE_BF16, -1, "RETRO_CUDA_HALF_GEMM=f32 is set"},
        {"fast", RG_COMPUTE_AUTO, RG_TYPE_BF16, -2, "RETRO_CUDA_HALF_GEMM=fast"},
    };
    const char *env = getenv("RETRO_CUDA_HALF_GEMM");
    char *saved = env ? strdup(env) : NULL;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        setenv("RETRO_CUDA_HALF_GEMM", rows[i].mode, 1);
        rg_train_products p;
        memset(&p, 0, sizeof p);
        rg_error err = {0};
        rg_status st = rg_train_products_resolve(rows[i].asked, rows[i].weights, RG_DEVICE_CUDA, &p, &err);
        if (rows[i].want < 0) {
            RG_CHECK(st == (rows[i].want == -2 ? RG_ERR_ARG : RG_ERR_UNSUPPORTED) && strstr(err.msg, rows[i].words) &&
                         strstr(err.msg, "training.compute_dtype"),
                     "row %zu (%s): status %d '%s', want refused naming '%s'", i, rows[i].mode, st, err.msg, rows[i].words);
            continue;
        }
        RG_CHECK(st == RG_OK && p.dtype == rows[i].want && !p.bf16_cpu && !strcmp(p.where, rows[i].words),
                 "row %zu (%s): status %d '%s', dtype %d want %d, bf16_cpu %d, where '%s'", i, rows[i].mode, st, err.msg,
                 p.dtype, rows[i].want, p.bf16_cpu, p.where);
    }
    if (saved) setenv("RETRO_CUDA_HALF_GEMM", saved, 1);
    else unsetenv("RETRO_CUDA_HALF_GEMM");
    free(saved);
}


// The config text a checkpoint stores has compute_dtype resolved (never auto); a resume compares
// resolved texts, so a run resolved differently (auto on a CPU with a matrix unit against a
// checkpoint made without one) is refused by name, and a checkpoint from before the key (no line:
// F32 products) resumes exactly where this run's products are F32.
static void test_resume_config_text(void) {
    char now[256], saved[256];
    snprintf(now, sizeof now, "training.lr: 0.001\ntraining.compute_dtype: auto\ntraining.steps: 5\n");
    rg_train_config_text_resolve(now, sizeof now, RG_COMPUTE_F32);
    RG_CHECK(strcmp(now, "training.lr: 0.001\ntraining.compute_dtype: f32\ntraining.steps: 5\n") == 0, "resolved: %s", now);
    rg_error err = {0};
    RG_CHECK(rg_train_resume_config_check(now, now, "f32", "ck", &err) == RG_OK, "same text refused: %s", err.msg);
    // a checkpoint from before the key
    snprintf(saved, sizeof saved, "training.lr: 0.001\ntraining.steps: 5\n");
    RG_CHECK(rg_train_resume_config_check(saved, now, "f32", "ck", &err) == RG_OK, "pre-key checkpoint refused: %s", err.msg);
    char bf[256];
    snprintf(bf, sizeof bf, "%s", now);
    rg_train_config_text_resolve(bf, sizeof bf, RG_COMPUTE_BF16);
    RG_CHECK(strstr(bf, "training.compute_dtype: bf16\n") != NULL, "bf16 text: %s", bf);
    rg_status st = rg_train_resume_config_check(saved, bf, "bf16 on amx", "ck/step-5", &err);
    RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, "F32 products") && strstr(err.msg, "bf16 on amx") &&
                 strstr(err.msg, "training.compute_dtype=f32") && strstr(err.msg, "ck/step-5"),
             "pre-key checkpoint against bf16: %d %s", (int)st, err.msg);
    // resolved differently: named
    st = rg_train_resume_config_check(now, bf, "bf16 on amx", "ck", &err);
    RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, "checkpoint has 'training.compute_dtype: f32', this run has "
                                                 "'training.compute_dtype: bf16'"),
             "f32 checkpoint against bf16: %d %s", (int)st, err.msg);
    // a pre-key checkpoint with another difference still names it
    snprintf(saved, sizeof saved, "training.lr: 0.002\ntraining.steps: 5\n");
    st = rg_train_resume_config_check(saved, now, "f32", "ck", &err);
    RG_CHECK(st == RG_ERR_ARG && strstr(err.msg, "'training.lr: 0.002', this run has 'training.lr: 0.001'"), "lr: %s",
             err.msg);
    // text without the line (a caller's own) is left alone
    snprintf(saved, sizeof saved, "a: 1\n");
    rg_train_config_text_resolve(saved, sizeof saved, RG_COMPUTE_BF16);
    RG_CHECK(strcmp(saved, "a: 1\n") == 0, "no line: %s", saved);
}

static const rg_test_case cases[] = {
    RG_TEST(test_defaults),
    RG_TEST(test_set_every_key),
    RG_TEST(test_good_values),
    RG_TEST(test_bad_values),
    RG_TEST(test_unknown_keys),
    RG_TEST(test_set_kv),
    RG_TEST(test_validate),
    RG_TEST(test_diff),
    RG_TEST(test_help),
    RG_TEST(test_write_reload_by_set),
    RG_TEST(test_write_reload_yaml),
    RG_TEST(test_yaml_forms),
    RG_TEST(test_yaml_text),
    RG_TEST(test_yaml_lists_and_empty),
    RG_TEST(test_yaml_errors),
    RG_TEST(test_yaml_then_set),
    RG_TEST(test_yaml_build_state),
    RG_TEST(test_compute_resolve_cpu),
    RG_TEST(test_compute_bf16_refused_without_path),
    RG_TEST(test_compute_resolve_cuda),
    RG_TEST(test_resume_config_text),
    {0},
};

// Removes the files the cases wrote, then the directory.
static void remove_tmp_dir(void) {
    DIR *d = opendir(tmp_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char path[600];
            snprintf(path, sizeof path, "%s/%s", tmp_dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(tmp_dir);
}

int main(int argc, char **argv) {
    // The BF16 path is this CPU's own: the emulated tiles would hide the refusal (asked once, from here on).
    unsetenv("RG_TILES_EMULATE");
    const char *base = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/rg_test_train_config_XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = rg_test_run(argc, argv, cases);
    remove_tmp_dir();
    return rc;
}
