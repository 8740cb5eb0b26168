// config.h - the settings of `retrograd train`: one struct, one table of dotted keys.
//
// Keys are the same in a YAML file (--config FILE.yaml, nested mappings flatten
// to dotted keys) and on the command line (--set key=value; later ones win, the
// command line after the file). Names: shared/DESIGN.md §2; optimizer and
// schedule semantics: shared/spec/training.md §1.
//
// Values are text parsed by the key's type:
//   bool     true/false/yes/no/on/off/1/0 (any case)
//   integer  decimal, no fraction, no trailing junk, no overflow; "1e3" only
//            when it is an exact integer
//   number   strtod over the whole text; NaN and Inf are refused
//   choice   one of the listed words (any case); the error lists them
//   list     lora.targets: q,k,v,o,gate,up,down or attn (q,k,v,o), mlp
//            (gate,up,down), all; "q,v", "[q, v]" or a YAML sequence
// Every error names the key, the value and the source ("--set", "cfg.yaml:12").
// A failed set or load leaves the struct unchanged.
#ifndef RG_TRAIN_CONFIG_H
#define RG_TRAIN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "graph/graph.h"  // rg_flash_attn_mode
#include "retrograd.h"

typedef enum { RG_OPTIM_ADAMW = 0, RG_OPTIM_SGD = 1 } rg_optim_kind;
typedef enum { RG_SCHED_CONSTANT = 0, RG_SCHED_LINEAR = 1, RG_SCHED_COSINE = 2 } rg_sched_kind;
typedef enum { RG_TRAIN_FULL = 0, RG_TRAIN_LORA = 1 } rg_train_method;
typedef enum { RG_TRAIN_ON_ALL = 0, RG_TRAIN_ON_ASSISTANT = 1, RG_TRAIN_ON_COMPLETION = 2 } rg_train_on;
typedef enum { RG_RECOMPUTE_AUTO = 0, RG_RECOMPUTE_NONE = 1, RG_RECOMPUTE_LAYER = 2 } rg_recompute;
typedef enum { RG_FUSED_CE_AUTO = 0, RG_FUSED_CE_ON = 1, RG_FUSED_CE_OFF = 2 } rg_fused_ce;
typedef enum { RG_OVERLONG_TRUNCATE = 0, RG_OVERLONG_DROP = 1, RG_OVERLONG_ERROR = 2 } rg_overlong;
// data.chat_template: the model's own, or a built-in family's layout (rg_chat_template_builtin)
typedef enum {
    RG_CHAT_TMPL_MODEL = 0, RG_CHAT_TMPL_CHATML = 1, RG_CHAT_TMPL_LLAMA3 = 2, RG_CHAT_TMPL_LLAMA31 = 3,
    RG_CHAT_TMPL_LFM2 = 4, RG_CHAT_TMPL_GEMMA = 5
} rg_chat_tmpl_choice;
// training.compute_dtype: how the step's products (MUL_MAT, OUT_PROD, LINEAR_CE) multiply. auto: bf16 when the
// weights the products read are BF16 and the CPU has a BF16 path (cpu/gemm_tiles.h), f32 otherwise; f32: the
// exact widening (every operand in F32, the bits of runs before the key existed); bf16: both operands rounded to
// BF16, F32 accumulation (train/compute.h resolves it against the model and the machine).
enum rg_compute_dtype { RG_COMPUTE_AUTO = 0, RG_COMPUTE_F32 = 1, RG_COMPUTE_BF16 = 2 };
// lora target bits, in this order: q, k, v, o, gate, up, down
enum { RG_LORA_Q = 1, RG_LORA_K = 2, RG_LORA_V = 4, RG_LORA_O = 8, RG_LORA_GATE = 16, RG_LORA_UP = 32, RG_LORA_DOWN = 64,
       RG_LORA_IN = 128, RG_LORA_OUT = 256 };  // in, out: a recurrent mixer's projections (lfm2, mamba2)
#define RG_LORA_ALL 511u

typedef struct rg_train_config {
    // training.*
    rg_train_method method;   // training.method: full|lora                  default lora
    rg_optim_kind optimizer;  // training.optimizer: adamw|sgd               default adamw
    double lr;                // training.lr: 0 or "auto" = 2e-4 for lora, 5e-5 for full  default auto
    rg_sched_kind schedule;   // training.schedule: constant|linear|cosine   default linear (HF Trainer)
    int64_t warmup_steps;     // training.warmup_steps                       default 0
    int64_t steps;            // training.steps (0 = from epochs)            default 0
    double epochs;            // training.epochs                             default 1
    int64_t batch_size;       // training.batch_size (sequences per micro-batch) default 1
    int64_t grad_accum;       // training.grad_accum                         default 1
    int64_t ctx;              // training.ctx (tokens per sequence)          default 512
    double weight_decay;      // training.weight_decay                       default 0 (HF)
    double beta1, beta2, eps; // training.beta1/beta2/eps                    0.9, 0.999, 1e-8
    double momentum;          // training.momentum (SGD)                     default 0
    double clip_grad_norm;    // training.clip_grad_norm (0 = off)           default 1.0
    uint64_t seed;            // training.seed                               default 42
    bool master_weights;      // training.master_weights                     default false
    uint32_t checkpoint_dtype;// training.checkpoint_dtype: f32|f16|bf16 (RG_TYPE_F32/F16/BF16) default f32
    rg_recompute recompute;   // training.recompute: auto|none|layer         default auto (layer only when needed)
    rg_fused_ce fused_ce;     // training.fused_ce: auto|on|off              default auto (on only when needed)
    rg_flash_attn_mode flash_attn; // training.flash_attn: auto|on|off       default auto (on from ctx 2048)
    int compute_dtype;        // training.compute_dtype: auto|f32|bf16 (enum rg_compute_dtype) default auto
    int64_t save_every;       // training.save_every (0 = only at the end)   default 100
    int64_t eval_every;       // training.eval_every (0 = only at the end)   default 50
    double eval_split;        // training.eval_split in [0, 0.5]             default 0.05
    int64_t threads;          // training.threads (0 = all cores)            default 0
    bool skip_nonfinite;      // training.skip_nonfinite: skip a step whose loss/grads hold NaN/Inf  default true
    int64_t max_skipped;      // training.max_skipped: stop after this many skipped steps in a row  default 10
    double memory_limit_gb;   // training.memory_limit_gb (0 = physical RAM) default 0
    // lora.*
    int64_t lora_rank;        // lora.rank                                   default 16
    double lora_alpha;        // lora.alpha                                  default 32
    uint32_t lora_targets;    // lora.targets (RG_LORA_* bits)               default all seven
    // data.*
    rg_train_on train_on;     // data.train_on: all|assistant|completion     default assistant
    bool pack;                // data.pack                                   default true
    rg_overlong overlong;     // data.overlong: truncate|drop|error          default truncate
    rg_chat_tmpl_choice chat_template;  // data.chat_template: model|chatml|llama3|llama3.1|lfm2|gemma  default model
} rg_train_config;

// data.chat_template's name ("model", "chatml", ...).
const char *rg_train_chat_template_name(rg_chat_tmpl_choice c);

// Every key at its default.
void rg_train_config_defaults(rg_train_config *c);

// Sets one key from text. `where` names the source for messages ("--set",
// "cfg.yaml:12"). Unknown key: RG_ERR_ARG "unknown key 'training.lrr' (--set);
// did you mean 'training.lr'?" (the suggestion only when one is close). Wrong
// type or range: RG_ERR_ARG naming the key, the value and what is expected
// ("training.steps: 'ten' is not an integer (--set)").
rg_status rg_train_config_set(rg_train_config *c, const char *key, const char *value, const char *where,
                              rg_error *err);
// The "key=value" form of --set (an error when there is no '=').
rg_status rg_train_config_set_kv(rg_train_config *c, const char *kv, rg_error *err);
// Applies every key of a YAML file over c. Errors name the file, the line and
// the key: syntax errors, unknown keys, bad values, a list for a scalar key,
// duplicate keys (both lines), anchors/aliases/tags (refused). Without libyaml
// at build time: RG_ERR_UNSUPPORTED.
rg_status rg_train_config_load_yaml(rg_train_config *c, const char *path, rg_error *err);
// The same from YAML text in memory (len bytes, not NUL-terminated); path names it in messages.
rg_status rg_train_config_load_yaml_text(rg_train_config *c, const char *path, const char *text, size_t len,
                                        rg_error *err);
// A checked config: what the library takes. rg_train_config_validate is the only maker; every library
// function that takes one (rg_train_run, the train state's create functions and plan, eval) trusts it and checks
// nothing again. Change a key after validating and the spec is no longer checked: validate again instead.
typedef struct rg_train_spec {
    rg_train_config cfg;    // every key in its range, the cross-key rules hold
    double lr;              // the base learning rate used: training.lr, or for auto 2e-4 with LoRA, 5e-5 full
    size_t memory_limit;    // training.memory_limit_gb in bytes (0: none given; the machine or the device decides)
    int64_t rows_per_step;  // rows per optimizer step: batch_size * grad_accum
} rg_train_spec;

// The edge: checks every key's range again (the struct may have been filled by
// code) and the cross-key rules (warmup_steps <= steps when steps > 0, epochs > 0
// when steps == 0, at least one LoRA target, a 16-bit checkpoint_dtype only with
// recompute), then fills *out. Errors name the key and the value. *out is
// untouched on failure.
rg_status rg_train_config_validate(const rg_train_config *c, rg_train_spec *out, rg_error *err);
// The --help text: every key with its type or choices, default and meaning, by section.
void rg_train_config_print_help(FILE *f);
// The config as YAML: every key, flat dotted, one per line, in table order;
// numbers in the shortest text that reads back to the same bits.
void rg_train_config_write(const rg_train_config *c, FILE *f);
// Keys whose values differ between a and b (doubles compared bit for bit),
// ", "-separated into buf ("" when equal; cut with "..." when cap is short);
// returns how many differ.
int rg_train_config_diff(const rg_train_config *a, const rg_train_config *b, char *buf, size_t cap);
// The value of one key as text, in the form set() reads (lora.targets as
// "q,k,v"); false for an unknown key or when the text does not fit in cap.
bool rg_train_config_get(const rg_train_config *c, const char *key, char *buf, size_t cap);

#endif
