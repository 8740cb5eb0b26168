// config.c - the training settings: one table row per key (name, type, field,
// default, range, help) and everything driven by it: parsing a value from
// text, checking ranges, --help, writing the effective config as YAML,
// diffing two configs, and reading a YAML file with libyaml's event API.
#include "train/config.h"
#include "train/config_keys.h"

#include "base/error.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>



typedef enum { K_BOOL, K_INT, K_U64, K_NUM, K_CHOICE, K_TARGETS } key_kind;

typedef struct choice {
    const char *name;
    int32_t value;
} choice;

typedef struct key_def {
    const char *name;
    key_kind kind;
    size_t offset;
    const char *def;        // the default, as text set() reads
    const char *def_shown;  // in --help, when it says more than def
    const choice *choices;  // K_CHOICE: ends with a NULL name
    double lo, hi;          // K_INT / K_NUM range (hi = INFINITY: none)
    bool lo_open, hi_open;  // exclusive bounds
    bool auto_zero;         // "auto" reads as 0 and 0 prints as "auto"
    const char *help;
} key_def;

// Choice fields are C enums or uint32_t; both are stored as 4 bytes.
_Static_assert(sizeof(rg_train_method) == 4 && sizeof(rg_optim_kind) == 4 && sizeof(rg_sched_kind) == 4 &&
                   sizeof(rg_train_on) == 4 && sizeof(rg_overlong) == 4 && sizeof(rg_recompute) == 4 &&
                   sizeof(rg_fused_ce) == 4 && sizeof(rg_flash_attn_mode) == 4 && sizeof(rg_chat_tmpl_choice) == 4 &&
                   sizeof(int) == 4,
               "choice fields are stored as 4-byte integers");

static const choice method_choices[] = {{"full", RG_TRAIN_FULL}, {"lora", RG_TRAIN_LORA}, {NULL, 0}};
static const choice optim_choices[] = {{"adamw", RG_OPTIM_ADAMW}, {"sgd", RG_OPTIM_SGD}, {NULL, 0}};
static const choice sched_choices[] = {
    {"constant", RG_SCHED_CONSTANT}, {"linear", RG_SCHED_LINEAR}, {"cosine", RG_SCHED_COSINE}, {NULL, 0}};
static const choice dtype_choices[] = {
    {"f32", RG_TYPE_F32}, {"f16", RG_TYPE_F16}, {"bf16", RG_TYPE_BF16}, {NULL, 0}};
static const choice recompute_choices[] = {
    {"auto", RG_RECOMPUTE_AUTO}, {"none", RG_RECOMPUTE_NONE}, {"layer", RG_RECOMPUTE_LAYER}, {NULL, 0}};
static const choice fused_ce_choices[] = {
    {"auto", RG_FUSED_CE_AUTO}, {"on", RG_FUSED_CE_ON}, {"off", RG_FUSED_CE_OFF}, {NULL, 0}};
static const choice flash_attn_choices[] = {
    {"auto", RG_FLASH_ATTN_AUTO}, {"on", RG_FLASH_ATTN_ON}, {"off", RG_FLASH_ATTN_OFF}, {NULL, 0}};
static const choice compute_dtype_choices[] = {
    {"auto", RG_COMPUTE_AUTO}, {"f32", RG_COMPUTE_F32}, {"bf16", RG_COMPUTE_BF16}, {NULL, 0}};
static const choice train_on_choices[] = {
    {"all", RG_TRAIN_ON_ALL}, {"assistant", RG_TRAIN_ON_ASSISTANT}, {"completion", RG_TRAIN_ON_COMPLETION}, {NULL, 0}};
static const choice chat_template_choices[] = {
    {"model", RG_CHAT_TMPL_MODEL}, {"chatml", RG_CHAT_TMPL_CHATML}, {"llama3", RG_CHAT_TMPL_LLAMA3},
    {"llama3.1", RG_CHAT_TMPL_LLAMA31}, {"lfm2", RG_CHAT_TMPL_LFM2}, {"gemma", RG_CHAT_TMPL_GEMMA}, {NULL, 0}};
static const choice overlong_choices[] = {
    {"truncate", RG_OVERLONG_TRUNCATE}, {"drop", RG_OVERLONG_DROP}, {"error", RG_OVERLONG_ERROR}, {NULL, 0}};

// LoRA targets: the seven bits in order, then the group words.
static const choice target_names[] = {  // the single bits first, in bit order (format_targets)
    {"q", RG_LORA_Q},       {"k", RG_LORA_K},   {"v", RG_LORA_V},       {"o", RG_LORA_O},
    {"gate", RG_LORA_GATE}, {"up", RG_LORA_UP}, {"down", RG_LORA_DOWN}, {"in", RG_LORA_IN}, {"out", RG_LORA_OUT},
    {"attn", RG_LORA_Q | RG_LORA_K | RG_LORA_V | RG_LORA_O}, {"mlp", RG_LORA_GATE | RG_LORA_UP | RG_LORA_DOWN},
    {"mixer", RG_LORA_IN | RG_LORA_OUT}, {"all", (int32_t)RG_LORA_ALL}, {NULL, 0}};
#define N_TARGET_BITS 9

#define OFF(f) offsetof(rg_train_config, f)
#define INTK(key, f, d, l, h, text) \
    {.name = key, .kind = K_INT, .offset = OFF(f), .def = d, .lo = l, .hi = h, .help = text}
#define NUMK(key, f, d, l, lopen, h, hopen, text) \
    {.name = key, .kind = K_NUM, .offset = OFF(f), .def = d, .lo = l, .lo_open = lopen, .hi = h, .hi_open = hopen, .help = text}
#define BOOLK(key, f, d, text) {.name = key, .kind = K_BOOL, .offset = OFF(f), .def = d, .help = text}
#define CHOICEK(key, f, d, ch, text) \
    {.name = key, .kind = K_CHOICE, .offset = OFF(f), .def = d, .choices = ch, .help = text}

static const key_def keys[] = {
    CHOICEK("training.method", method, "lora", method_choices,
            "lora: train a low-rank adapter, the model stays frozen; full: train every weight in place"),
    CHOICEK("training.optimizer", optimizer, "adamw", optim_choices, "AdamW (decoupled decay) or SGD (L2 decay, momentum)"),
    {.name = "training.lr", .kind = K_NUM, .offset = OFF(lr), .def = "auto", .def_shown = "auto (2e-4 lora, 5e-5 full)",
     .lo = 0, .hi = 10, .auto_zero = true, .help = "peak learning rate; 0 or auto picks by training.method"},
    CHOICEK("training.schedule", schedule, "linear", sched_choices,
            "learning-rate multiplier after warmup: flat, linear to 0, or half a cosine to 0"),
    INTK("training.warmup_steps", warmup_steps, "0", 0, INFINITY, "optimizer steps of linear warmup from lr 0"),
    INTK("training.steps", steps, "0", 0, INFINITY, "optimizer steps to run; 0 = from training.epochs"),
    NUMK("training.epochs", epochs, "1", 0, false, 1e6, false, "passes over the data when training.steps is 0"),
    INTK("training.batch_size", batch_size, "1", 1, INFINITY, "sequences per micro-batch"),
    INTK("training.grad_accum", grad_accum, "1", 1, INFINITY, "micro-batches summed into one optimizer step"),
    INTK("training.ctx", ctx, "512", 8, 16777216, "tokens per sequence"),
    NUMK("training.weight_decay", weight_decay, "0", 0, false, 10, false,
         "decay of matrices and embeddings (AdamW: decoupled; SGD: L2)"),
    NUMK("training.beta1", beta1, "0.9", 0, false, 1, true, "AdamW first-moment decay"),
    NUMK("training.beta2", beta2, "0.999", 0, false, 1, true, "AdamW second-moment decay"),
    NUMK("training.eps", eps, "1e-8", 0, true, 1, false, "AdamW epsilon, added to sqrt(v) after bias correction"),
    NUMK("training.momentum", momentum, "0", 0, false, 1, true, "SGD momentum (0 = plain SGD)"),
    NUMK("training.clip_grad_norm", clip_grad_norm, "1", 0, false, INFINITY, false,
         "clip the global gradient L2 norm to this; 0 = off"),
    {.name = "training.seed", .kind = K_U64, .offset = OFF(seed), .def = "42",
     .help = "seed of the data order, the eval split, LoRA init and stochastic rounding"},
    BOOLK("training.master_weights", master_weights, "false", "keep F32 master copies of F16/BF16 weights"),
    CHOICEK("training.checkpoint_dtype", checkpoint_dtype, "f32", dtype_choices,
            "type of the layer inputs kept for recompute; f16/bf16 halve them, for a relative gradient gap of about 5e-4 / 4e-3"),
    CHOICEK("training.recompute", recompute, "auto", recompute_choices,
            "layer: keep only each layer's input and recompute the layer before its backward (about +20% time, a "
            "fraction of the activation memory); none: keep every activation; auto: layer when checkpoint_dtype is "
            "not f32 or when the run would not fit otherwise"),
    CHOICEK("training.fused_ce", fused_ce, "auto", fused_ce_choices,
            "on: compute the loss from the last hidden states and the output matrix by vocabulary chunks, never "
            "holding the logits [n_vocab, ctx] or their gradient (a little more compute); off: materialize them; "
            "auto: on when the run would not fit otherwise"),
    CHOICEK("training.flash_attn", flash_attn, "auto", flash_attn_choices,
            "on: attention layers train through FLASH_ATTN_EXT/BACK (FlashAttention-2: never holding the [ctx, ctx] "
            "scores and probabilities of each layer, documents as ids); off: the materialized scores, softmax and "
            "mask; auto: on from training.ctx 2048, where it is also faster on the CPU (bench_flash_attn), or when the "
            "run would not fit otherwise (after recompute and fused_ce auto); the same on a CUDA device "
            "(cuda/ops_flash.cu; head_dim above 512 runs those nodes on the CPU)"),
    CHOICEK("training.compute_dtype", compute_dtype, "auto", compute_dtype_choices,
            "how the step's products (MUL_MAT, OUT_PROD, LINEAR_CE: forward, backward, eval) multiply. bf16: both "
            "operands rounded to BF16, F32 accumulation, on the CPU's matrix unit (AMX tiles, else AVX512_BF16; "
            "RG_TILES_EMULATE=1 emulates the tiles, slowly); weights, master weights and optimizer state keep their "
            "types (an F32 model trains as under PyTorch's autocast); refused where the CPU has neither. f32: every "
            "operand widened to F32, exact (the bits of earlier versions; `train --exact`). auto: bf16 for BF16 "
            "weights where the CPU has a matrix unit, f32 otherwise. On --device cuda the device's products follow "
            "RETRO_CUDA_HALF_GEMM: auto takes them as they are, f32 and bf16 are refused where they differ"),
    INTK("training.save_every", save_every, "100", 0, INFINITY, "checkpoint every N optimizer steps; 0 = only at the end"),
    INTK("training.eval_every", eval_every, "50", 0, INFINITY, "evaluate every N optimizer steps; 0 = only at the end"),
    NUMK("training.eval_split", eval_split, "0.05", 0, false, 0.5, false, "fraction of the data held out for evaluation"),
    INTK("training.threads", threads, "0", 0, 1024, "CPU threads; 0 = all cores"),
    BOOLK("training.skip_nonfinite", skip_nonfinite, "true", "skip a step whose loss or gradients hold NaN/Inf"),
    INTK("training.max_skipped", max_skipped, "10", 1, INFINITY, "stop with an error after this many skipped steps in a row"),
    NUMK("training.memory_limit_gb", memory_limit_gb, "0", 0, false, INFINITY, false,
         "refuse a plan whose peak exceeds this (GiB); 0 = physical RAM"),
    INTK("lora.rank", lora_rank, "16", 1, 65536, "rank r of each adapter"),
    NUMK("lora.alpha", lora_alpha, "32", 0, true, INFINITY, false, "adapter scale is alpha / rank"),
    {.name = "lora.targets", .kind = K_TARGETS, .offset = OFF(lora_targets), .def = "all",
     .def_shown = "all",
     .help = "projections that get an adapter: q,k,v,o,gate,up,down, in,out (lfm2's shortconv and mamba2's ssm "
             "in/out projections), attn (q,k,v,o), mlp (gate,up,down), mixer (in,out), all; "
             "written q,v or [q, v] or as a YAML list"},
    CHOICEK("data.train_on", train_on, "assistant", train_on_choices,
            "tokens that carry loss: all, assistant turns of chats, or completions"),
    BOOLK("data.pack", pack, "true", "pack several examples into one sequence"),
    CHOICEK("data.overlong", overlong, "truncate", overlong_choices, "an example longer than training.ctx"),
    CHOICEK("data.chat_template", chat_template, "model", chat_template_choices,
            "how 'messages' are rendered: the model's own tokenizer.chat_template, or a built-in family's layout "
            "for a model without one (or to override it): chatml, llama3, llama3.1, lfm2, gemma"),
};
#define N_KEYS (sizeof keys / sizeof keys[0])

// ------------------------------------------------------------- helpers ---

static const key_def *find_key(const char *name) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].name, name) == 0) return &keys[i];
    return NULL;
}

static int32_t get_i32(const rg_train_config *c, const key_def *k) {
    int32_t v;
    memcpy(&v, (const char *)c + k->offset, sizeof v);
    return v;
}

static size_t field_size(const key_def *k) {
    switch (k->kind) {
    case K_BOOL: return sizeof(bool);
    case K_INT: return sizeof(int64_t);
    case K_U64: return sizeof(uint64_t);
    case K_NUM: return sizeof(double);
    case K_CHOICE: return sizeof(int32_t);
    case K_TARGETS: return sizeof(uint32_t);
    }
    return 0;
}

// The shortest %g text that reads back to the same double.
static void format_double(char *buf, size_t cap, double v) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

// "[0, 1)", "[8, 16777216]", or ">= 1" / "> 0" when there is no upper bound.
static void format_range(char *buf, size_t cap, const key_def *k) {
    char lo[32], hi[32];
    format_double(lo, sizeof lo, k->lo);
    format_double(hi, sizeof hi, k->hi);
    if (isinf(k->hi))
        snprintf(buf, cap, "%s %s", k->lo_open ? ">" : ">=", lo);
    else
        snprintf(buf, cap, "%s%s, %s%s", k->lo_open ? "(" : "[", lo, hi, k->hi_open ? ")" : "]");
}

static bool in_range(const key_def *k, double v) {
    if (k->lo_open ? !(v > k->lo) : !(v >= k->lo)) return false;
    if (k->hi_open ? !(v < k->hi) : !(v <= k->hi)) return false;
    return true;
}

static void format_choices(char *buf, size_t cap, const choice *ch) {
    size_t n = 0;
    buf[0] = 0;
    for (; ch->name; ch++) {
        int w = snprintf(buf + n, cap - n, "%s%s", n ? "|" : "", ch->name);
        if (w < 0 || (size_t)w >= cap - n) return;
        n += (size_t)w;
    }
}

// q,k,v,... with `sep` between names; the bits in table order.
static void format_targets(char *buf, size_t cap, uint32_t bits, const char *sep) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < N_TARGET_BITS; i++) {
        if (!(bits & (uint32_t)target_names[i].value)) continue;
        int w = snprintf(buf + n, cap - n, "%s%s", n ? sep : "", target_names[i].name);
        if (w < 0 || (size_t)w >= cap - n) return;
        n += (size_t)w;
    }
}

// Levenshtein distance of two short strings, ignoring case (longer ones count as far apart).
static size_t edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 64 || nb > 64) return SIZE_MAX;
    size_t prev[65], cur[65];
    for (size_t j = 0; j <= nb; j++) prev[j] = j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t sub = prev[j - 1] + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (nb + 1) * sizeof prev[0]);
    }
    return prev[nb];
}

static const char *leaf_of(const char *key) {
    const char *dot = strrchr(key, '.');
    return dot ? dot + 1 : key;
}

// The nearest key when it is close: a small edit distance (a quarter of the
// length, at least 2), the one key that starts with it ("training.warmup"), or
// the same last component in another section ("lr", "training.rank").
static const char *suggest_key(const char *key) {
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < N_KEYS; i++) {
        size_t d = edit_distance(key, keys[i].name);
        if (d < best_d) best_d = d, best = keys[i].name;
    }
    size_t len = strlen(key), limit = len / 4 > 2 ? len / 4 : 2;
    if (best && best_d <= limit) return best;
    const char *prefixed = NULL;
    int n_prefixed = 0;
    for (size_t i = 0; i < N_KEYS; i++)
        if (strncmp(keys[i].name, key, len) == 0) prefixed = keys[i].name, n_prefixed++;
    if (n_prefixed == 1 && strchr(key, '.')) return prefixed;
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcasecmp(leaf_of(key), leaf_of(keys[i].name)) == 0) return keys[i].name;
    return NULL;
}

static rg_status fail_unknown_key(const char *key, const char *where, rg_error *err) {
    const char *s = suggest_key(key);
    if (s) return rg_fail(err, RG_ERR_ARG, "unknown key '%.200s' (%s); did you mean '%s'?", key, where, s);
    return rg_fail(err, RG_ERR_ARG, "unknown key '%.200s' (%s); `retrograd train --help` lists the keys", key, where);
}

// --------------------------------------------------------- value parsing ---

static bool parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = true, true;
        if (strcasecmp(s, no[i]) == 0) return *out = false, true;
    }
    return false;
}

// Whole-string strtod; false on junk. The result may be NaN/Inf.
static bool parse_double_text(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end) return false;
    *out = v;
    return true;
}

// Only digits, signs, '.' and exponents: what an integer written as "1e3" uses.
static bool is_decimal(const char *s) { return s[strspn(s, "0123456789+-.eE")] == 0; }

// Returns NULL on success, else why the text is not a signed 64-bit integer.
static const char *parse_int(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end != s && !*end) {
        if (errno == ERANGE) return "is out of range for a 64-bit integer";
        *out = (int64_t)v;
        return NULL;
    }
    double d;  // "1e3", "2.0": allowed when exactly an integer (decimal only, not "0x10")
    if (!is_decimal(s) || !parse_double_text(s, &d) || !isfinite(d) || d != floor(d)) return "is not an integer";
    if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return "is out of range for a 64-bit integer";
    *out = (int64_t)d;
    return NULL;
}

static const char *parse_u64(const char *s, uint64_t *out) {
    if (s[0] == '-') return "is not an unsigned integer";
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end != s && !*end) {
        if (errno == ERANGE) return "is out of range for an unsigned 64-bit integer";
        *out = (uint64_t)v;
        return NULL;
    }
    double d;
    if (!is_decimal(s) || !parse_double_text(s, &d) || !isfinite(d) || d != floor(d) || d < 0) return "is not an unsigned integer";
    if (d >= 18446744073709551616.0) return "is out of range for an unsigned 64-bit integer";
    *out = (uint64_t)d;
    return NULL;
}

static const char *skip_space(const char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    return s;
}

// Copies s without surrounding white space into buf; false when it does not fit.
static bool trim_copy(char *buf, size_t cap, const char *s) {
    s = skip_space(s);
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
    if (n >= cap) return false;
    memcpy(buf, s, n);
    buf[n] = 0;
    return true;
}

// "q, v", "[q,v]", "attn,mlp": the union of the named bits.
static rg_status parse_targets(const key_def *k, const char *text, const char *where, uint32_t *out, rg_error *err) {
    char buf[VALUE_MAX];
    snprintf(buf, sizeof buf, "%s", text);
    char *s = buf;
    size_t n = strlen(s);
    if (n >= 2 && s[0] == '[' && s[n - 1] == ']') s[n - 1] = 0, s++;
    uint32_t bits = 0;
    int items = 0;
    for (char *item = s;; items++) {
        char *comma = strchr(item, ',');
        if (comma) *comma = 0;
        char word[64];
        if (!trim_copy(word, sizeof word, item))
            return rg_fail(err, RG_ERR_ARG, "%s: '%.40s...' is not a target (%s)", k->name, skip_space(item), where);
        if (!word[0]) {
            if (!comma && items == 0)
                return rg_fail(err, RG_ERR_ARG, "%s: '%.80s' is an empty list; name at least one of "
                               "q|k|v|o|gate|up|down|in|out|attn|mlp|mixer|all (%s)", k->name, text, where);
            return rg_fail(err, RG_ERR_ARG, "%s: '%.80s' has an empty item (%s)", k->name, text, where);
        }
        const choice *ch = target_names;
        while (ch->name && strcasecmp(ch->name, word) != 0) ch++;
        if (!ch->name)
            return rg_fail(err, RG_ERR_ARG, "%s: '%s' is not a target; expected a list of "
                           "q|k|v|o|gate|up|down|in|out|attn|mlp|mixer|all (%s)", k->name, word, where);
        bits |= (uint32_t)ch->value;
        if (!comma) break;
        item = comma + 1;
    }
    *out = bits;
    return RG_OK;
}

// ------------------------------------------------------------ the API ---

rg_status rg_train_config_set(rg_train_config *c, const char *key, const char *value, const char *where,
                              rg_error *err) {
    if (!where) where = "--set";
    if (!key || !key[0]) return rg_fail(err, RG_ERR_ARG, "empty key (%s)", where);
    const key_def *k = find_key(key);
    if (!k) return fail_unknown_key(key, where, err);
    char text[VALUE_MAX];
    if (!trim_copy(text, sizeof text, value ? value : ""))
        return rg_fail(err, RG_ERR_ARG, "%s: value '%.40s...' is too long (%s)", k->name, skip_space(value), where);
    if (!text[0]) return rg_fail(err, RG_ERR_ARG, "%s: empty value (%s)", k->name, where);

    char *field = (char *)c + k->offset;
    char range[80];
    switch (k->kind) {
    case K_BOOL: {
        bool b;
        if (!parse_bool(text, &b))
            return rg_fail(err, RG_ERR_ARG, "%s: '%.80s' is not a boolean; expected true|false|yes|no|on|off|1|0 (%s)",
                           k->name, text, where);
        memcpy(field, &b, sizeof b);
        return RG_OK;
    }
    case K_INT: {
        int64_t v;
        const char *why = parse_int(text, &v);
        if (why) return rg_fail(err, RG_ERR_ARG, "%s: '%.80s' %s (%s)", k->name, text, why, where);
        if (!in_range(k, (double)v)) {
            format_range(range, sizeof range, k);
            return rg_fail(err, RG_ERR_ARG, "%s: %.80s is out of range %s (%s)", k->name, text, range, where);
        }
        memcpy(field, &v, sizeof v);
        return RG_OK;
    }
    case K_U64: {
        uint64_t v;
        const char *why = parse_u64(text, &v);
        if (why) return rg_fail(err, RG_ERR_ARG, "%s: '%.80s' %s (%s)", k->name, text, why, where);
        memcpy(field, &v, sizeof v);
        return RG_OK;
    }
    case K_NUM: {
        double v;
        if (k->auto_zero && strcasecmp(text, "auto") == 0) {
            v = 0;
        } else {
            if (!parse_double_text(text, &v))
                return rg_fail(err, RG_ERR_ARG, "%s: '%.80s' is not a number%s (%s)", k->name, text,
                               k->auto_zero ? " or auto" : "", where);
            if (!isfinite(v))
                return rg_fail(err, RG_ERR_ARG, "%s: '%.80s' is not a finite number (%s)", k->name, text, where);
            if (!in_range(k, v)) {
                format_range(range, sizeof range, k);
                return rg_fail(err, RG_ERR_ARG, "%s: %.80s is out of range %s (%s)", k->name, text, range, where);
            }
        }
        memcpy(field, &v, sizeof v);
        return RG_OK;
    }
    case K_CHOICE: {
        const choice *ch = k->choices;
        while (ch->name && strcasecmp(ch->name, text) != 0) ch++;
        if (!ch->name) {
            char list[128];
            format_choices(list, sizeof list, k->choices);
            return rg_fail(err, RG_ERR_ARG, "%s: '%.80s' is not one of %s (%s)", k->name, text, list, where);
        }
        memcpy(field, &ch->value, sizeof ch->value);
        return RG_OK;
    }
    case K_TARGETS: {
        uint32_t bits = 0;
        rg_status st = parse_targets(k, text, where, &bits, err);
        if (st != RG_OK) return st;
        memcpy(field, &bits, sizeof bits);
        return RG_OK;
    }
    }
    return rg_fail(err, RG_ERR_ARG, "%s: internal: unknown key kind", k->name);
}

rg_status rg_train_config_set_kv(rg_train_config *c, const char *kv, rg_error *err) {
    const char *eq = kv ? strchr(kv, '=') : NULL;
    if (!eq) return rg_fail(err, RG_ERR_ARG, "--set '%.200s': expected key=value", kv ? kv : "");
    char key[KEY_MAX + 1], raw[KEY_MAX + 1];
    size_t n = (size_t)(eq - kv);
    if (n > KEY_MAX) return rg_fail(err, RG_ERR_ARG, "--set '%.60s...': the key is too long", kv);
    memcpy(raw, kv, n);
    raw[n] = 0;
    trim_copy(key, sizeof key, raw);
    if (!key[0]) return rg_fail(err, RG_ERR_ARG, "--set '%.200s': the key before '=' is empty", kv);
    return rg_train_config_set(c, key, eq + 1, "--set", err);
}

void rg_train_config_defaults(rg_train_config *c) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < N_KEYS; i++) {
        rg_error err;
        if (rg_train_config_set(c, keys[i].name, keys[i].def, "default", &err) != RG_OK) {
            fprintf(stderr, "retrograd: internal error: bad default in the key table: %s\n", err.msg);
            abort();
        }
    }
}

// The value as text; `list_sep` separates target names.
static bool format_value(const rg_train_config *c, const key_def *k, char *buf, size_t cap, const char *list_sep) {
    if (cap == 0) return false;
    const char *field = (const char *)c + k->offset;
    char tmp[VALUE_MAX];
    switch (k->kind) {
    case K_BOOL: {
        bool b;
        memcpy(&b, field, sizeof b);
        snprintf(tmp, sizeof tmp, "%s", b ? "true" : "false");
        break;
    }
    case K_INT: {
        int64_t v;
        memcpy(&v, field, sizeof v);
        snprintf(tmp, sizeof tmp, "%" PRId64, v);
        break;
    }
    case K_U64: {
        uint64_t v;
        memcpy(&v, field, sizeof v);
        snprintf(tmp, sizeof tmp, "%" PRIu64, v);
        break;
    }
    case K_NUM: {
        double v;
        memcpy(&v, field, sizeof v);
        if (k->auto_zero && v == 0 && !signbit(v))
            snprintf(tmp, sizeof tmp, "auto");
        else
            format_double(tmp, sizeof tmp, v);
        break;
    }
    case K_CHOICE: {
        int32_t v = get_i32(c, k);
        const choice *ch = k->choices;
        while (ch->name && ch->value != v) ch++;
        if (ch->name)
            snprintf(tmp, sizeof tmp, "%s", ch->name);
        else
            snprintf(tmp, sizeof tmp, "%" PRId32, v);  // out of the enum: shown, refused by validate
        break;
    }
    case K_TARGETS: {
        uint32_t v;
        memcpy(&v, field, sizeof v);
        format_targets(tmp, sizeof tmp, v, list_sep);
        break;
    }
    }
    int w = snprintf(buf, cap, "%s", tmp);
    return w >= 0 && (size_t)w < cap;
}

bool rg_train_config_get(const rg_train_config *c, const char *key, char *buf, size_t cap) {
    const key_def *k = key ? find_key(key) : NULL;
    if (!k) {
        if (cap) buf[0] = 0;
        return false;
    }
    return format_value(c, k, buf, cap, ",");
}

void rg_train_config_write(const rg_train_config *c, FILE *f) {
    for (size_t i = 0; i < N_KEYS; i++) {
        char v[VALUE_MAX];
        format_value(c, &keys[i], v, sizeof v, ", ");
        if (keys[i].kind == K_TARGETS)
            fprintf(f, "%s: [%s]\n", keys[i].name, v);
        else
            fprintf(f, "%s: %s\n", keys[i].name, v);
    }
}

int rg_train_config_diff(const rg_train_config *a, const rg_train_config *b, char *buf, size_t cap) {
    int count = 0;
    size_t n = 0;
    bool cut = false;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < N_KEYS; i++) {
        const key_def *k = &keys[i];
        if (memcmp((const char *)a + k->offset, (const char *)b + k->offset, field_size(k)) == 0) continue;
        count++;
        if (cut || cap == 0) continue;
        int w = snprintf(buf + n, cap - n, "%s%s", count > 1 ? ", " : "", k->name);
        if (w >= 0 && (size_t)w < cap - n) {
            n += (size_t)w;
            continue;
        }
        // Does not fit: end with "..." (over the last names when there is no room).
        cut = true;
        if (cap >= 4) memcpy(buf + (n + 3 < cap ? n : cap - 4), "...", 4);
    }
    return count;
}

static void type_text(const key_def *k, char *buf, size_t cap) {
    char range[80];
    switch (k->kind) {
    case K_BOOL: snprintf(buf, cap, "bool"); return;
    case K_INT: format_range(range, sizeof range, k); snprintf(buf, cap, "integer %s", range); return;
    case K_U64: snprintf(buf, cap, "integer >= 0"); return;
    case K_NUM:
        format_range(range, sizeof range, k);
        snprintf(buf, cap, "%snumber %s", k->auto_zero ? "auto or " : "", range);
        return;
    case K_CHOICE: format_choices(buf, cap, k->choices); return;
    case K_TARGETS: snprintf(buf, cap, "list of projections"); return;
    }
}

void rg_train_config_print_help(FILE *f) {
    fprintf(f, "Training keys: in a YAML file (--config FILE.yaml; nested sections or dotted keys)\n"
               "or on the command line (--set key=value; later ones win, the command line after the file).\n");
    size_t prev_len = 0;
    const char *prev = "";
    for (size_t i = 0; i < N_KEYS; i++) {
        const key_def *k = &keys[i];
        size_t sec_len = (size_t)(strchr(k->name, '.') - k->name);
        if (sec_len != prev_len || strncmp(prev, k->name, sec_len) != 0)
            fprintf(f, "\n%.*s:\n", (int)sec_len, k->name);
        prev = k->name, prev_len = sec_len;
        char type[160];
        type_text(k, type, sizeof type);
        fprintf(f, "  %-26s %-28s default %s\n      %s\n", k->name, type, k->def_shown ? k->def_shown : k->def,
                k->help);
    }
}

// The keys one at a time: each in its type's range.
static rg_status check_ranges(const rg_train_config *c, rg_error *err) {
    char range[80];
    for (size_t i = 0; i < N_KEYS; i++) {
        const key_def *k = &keys[i];
        const char *field = (const char *)c + k->offset;
        switch (k->kind) {
        case K_BOOL:
        case K_U64: break;
        case K_INT: {
            int64_t v;
            memcpy(&v, field, sizeof v);
            if (!in_range(k, (double)v)) {
                format_range(range, sizeof range, k);
                return rg_fail(err, RG_ERR_ARG, "%s: %" PRId64 " is out of range %s", k->name, v, range);
            }
            break;
        }
        case K_NUM: {
            double v;
            memcpy(&v, field, sizeof v);
            if (!isfinite(v) || !in_range(k, v)) {
                format_range(range, sizeof range, k);
                return rg_fail(err, RG_ERR_ARG, "%s: %g is out of range %s", k->name, v, range);
            }
            break;
        }
        case K_CHOICE: {
            int32_t v = get_i32(c, k);
            const choice *ch = k->choices;
            while (ch->name && ch->value != v) ch++;
            if (!ch->name) {
                char list[128];
                format_choices(list, sizeof list, k->choices);
                return rg_fail(err, RG_ERR_ARG, "%s: %" PRId32 " is not one of %s", k->name, v, list);
            }
            break;
        }
        case K_TARGETS: {
            uint32_t v;
            memcpy(&v, field, sizeof v);
            if (v == 0 || (v & ~RG_LORA_ALL))
                return rg_fail(err, RG_ERR_ARG, "%s: 0x%" PRIx32 " is not a non-empty set of q,k,v,o,gate,up,down",
                               k->name, v);
            break;
        }
        }
    }
    return RG_OK;
}

// The rules between keys.
static rg_status check_cross_keys(const rg_train_config *c, rg_error *err) {
    // A step's tokens (rows times ctx) are counted and allocated as one number.
    if (c->grad_accum > INT64_MAX / c->batch_size || c->batch_size * c->grad_accum > INT64_MAX / 4 / c->ctx)
        return rg_fail(err, RG_ERR_ARG,
                       "training.batch_size (%" PRId64 ") times training.grad_accum (%" PRId64 ") times training.ctx (%"
                       PRId64 ") tokens per step do not fit in memory",
                       c->batch_size, c->grad_accum, c->ctx);
    if (c->steps > 0 && c->warmup_steps > c->steps)
        return rg_fail(err, RG_ERR_ARG, "training.warmup_steps (%" PRId64 ") is more than training.steps (%" PRId64 ")",
                       c->warmup_steps, c->steps);
    if (c->checkpoint_dtype != RG_TYPE_F32 && c->recompute == RG_RECOMPUTE_NONE)
        return rg_fail(err, RG_ERR_ARG,
                       "training.checkpoint_dtype=%s stores the layer inputs that recompute starts from, but "
                       "training.recompute is none; set training.recompute to layer or auto, or checkpoint_dtype to f32",
                       c->checkpoint_dtype == RG_TYPE_F16 ? "f16" : "bf16");
    if (c->steps == 0 && !(c->epochs > 0))
        return rg_fail(err, RG_ERR_ARG, "training.epochs is %g and training.steps is 0: set one of them above 0",
                       c->epochs);
    return RG_OK;
}

rg_status rg_train_config_validate(const rg_train_config *c, rg_train_spec *out, rg_error *err) {
    rg_status st;
    if ((st = check_ranges(c, err)) || (st = check_cross_keys(c, err))) return st;
    rg_train_spec sp = {.cfg = *c};
    sp.lr = c->lr > 0 ? c->lr : c->method == RG_TRAIN_LORA ? 2e-4 : 5e-5;
    const double bytes = c->memory_limit_gb * 1073741824.0;  // finite and >= 0: checked above
    sp.memory_limit = bytes >= (double)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
    sp.rows_per_step = c->batch_size * c->grad_accum;
    *out = sp;
    return RG_OK;
}

// ------------------------------------------- for the YAML reader (config_keys.h) ---

bool rg_config_is_key(const char *key) { return find_key(key) != NULL; }

bool rg_config_is_section(const char *prefix) {
    size_t n = strlen(prefix);
    for (size_t i = 0; i < N_KEYS; i++)
        if (strncmp(keys[i].name, prefix, n) == 0 && keys[i].name[n] == '.') return true;
    return false;
}

bool rg_config_key_takes_list(const char *key) {
    const key_def *k = find_key(key);
    return k && k->kind == K_TARGETS;
}

void rg_config_key_type(const char *key, char *buf, size_t cap) {
    const key_def *k = find_key(key);
    if (k) type_text(k, buf, cap);
    else snprintf(buf, cap, "?");
}

rg_status rg_config_unknown_key(const char *key, const char *where, rg_error *err) { return fail_unknown_key(key, where, err); }

rg_status rg_config_check_list_item(const char *key, const char *item, const char *where, rg_error *err) {
    const key_def *k = find_key(key);
    if (!k) return fail_unknown_key(key, where, err);
    uint32_t bits = 0;
    return parse_targets(k, item, where, &bits, err);
}

const char *rg_train_chat_template_name(rg_chat_tmpl_choice c) {
    for (const choice *ch = chat_template_choices; ch->name; ch++)
        if (ch->value == (int32_t)c) return ch->name;
    return "model";
}
