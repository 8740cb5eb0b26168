// sampler.c - see sampler.h.
//
// The work per draw is linear in the vocabulary except for sorting, which only touches the
// tokens a filter can keep: top-k selects its k with a heap; min-p keeps those within a
// factor of the top probability; top-p without either gathers the head of the distribution
// under a falling threshold until it holds more than top_p of the mass. With all filters off
// nothing is sorted and the draw walks the vocabulary in id order.
#include "infer/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "infer/sample_math.h"

#define det_exp rg_sample_exp

typedef struct cand {
    float logit;
    int32_t id;
    double e;  // exp(logit - max), where a filter needs it
} cand;

struct rg_sampler {
    rg_sampler_params p;
    int32_t n_vocab;
    int32_t *hist;        // accepted tokens; the window is the last min(hist_n, repeat_last_n)
    size_t hist_n, hist_cap;
    uint32_t *seen;       // [n_vocab] generation stamps: a token is penalized once per draw
    uint32_t seen_gen;
    cand *c;              // [n_vocab] working candidates
    double *w;            // [n_vocab] weights of the kept candidates after temperature
    int64_t n_keep;
    bool sorted;          // c[0..n_keep) in rank order
    double total;         // sum of w[0..n_keep)
    uint64_t step;
};

rg_sampler_params rg_sampler_defaults(void) {
    rg_sampler_params p = {
        .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
        .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 42,
    };
    return p;
}

rg_status rg_sampler_params_check(const rg_sampler_params *p, rg_error *err) {
    if (isnan(p->temp) || isinf(p->temp))
        return rg_fail(err, RG_ERR_ARG, "--temp %g is not valid: give a finite number (<= 0 means greedy)", (double)p->temp);
    if (p->top_k < 0)
        return rg_fail(err, RG_ERR_ARG, "--top-k %d is out of range: valid is 0 (off) or a positive number of tokens",
                       (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return rg_fail(err, RG_ERR_ARG, "--top-p %g is out of range: valid is (0, 1], 1 = off", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p < 1.0f))
        return rg_fail(err, RG_ERR_ARG, "--min-p %g is out of range: valid is [0, 1), 0 = off", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return rg_fail(err, RG_ERR_ARG, "--repeat-penalty %g is out of range: valid is a finite number > 0, 1 = off",
                       (double)p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return rg_fail(err, RG_ERR_ARG, "--repeat-last-n %d is out of range: valid is >= 0 tokens, 0 = off",
                       (int)p->repeat_last_n);
    return RG_OK;
}

rg_status rg_sampler_create(rg_sampler **out, const rg_sampler_params *p, int32_t n_vocab, rg_error *err) {
    *out = NULL;
    rg_status st = rg_sampler_params_check(p, err);
    if (st) return st;
    if (n_vocab <= 0) return rg_fail(err, RG_ERR_ARG, "sampler: the vocabulary size %d is not positive", (int)n_vocab);
    rg_sampler *s = calloc(1, sizeof *s);
    if (!s) return rg_fail(err, RG_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->seen = calloc((size_t)n_vocab, sizeof *s->seen);
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->w = malloc((size_t)n_vocab * sizeof *s->w);
    if (!s->seen || !s->c || !s->w) {
        rg_sampler_free(s);
        return rg_fail(err, RG_ERR_NOMEM, "sampler: out of memory for %d tokens", (int)n_vocab);
    }
    *out = s;
    return RG_OK;
}

void rg_sampler_free(rg_sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->seen);
    free(s->c);
    free(s->w);
    free(s);
}

void rg_sampler_reset(rg_sampler *s) {
    s->hist_n = 0;
    s->step = 0;
}

uint64_t rg_sampler_step(const rg_sampler *s) { return s->step; }
const rg_sampler_params *rg_sampler_get_params(const rg_sampler *s) { return &s->p; }
int32_t rg_sampler_n_vocab(const rg_sampler *s) { return s->n_vocab; }
void rg_sampler_advance(rg_sampler *s) { s->step++; }

// Runs body once for each distinct token id_ of the penalty window, in window order (stamping
// seen[] with a new generation), when the penalty is on.
#define FOR_PENALIZED(s, id_, body)                                                                  \
    do {                                                                                             \
        if ((s)->p.repeat_penalty != 1.0f && (s)->hist_n > 0) {                                      \
            if (++(s)->seen_gen == 0) {                                                              \
                memset((s)->seen, 0, (size_t)(s)->n_vocab * sizeof *(s)->seen);                      \
                (s)->seen_gen = 1;                                                                   \
            }                                                                                        \
            size_t win_ = (size_t)(s)->p.repeat_last_n, from_ = (s)->hist_n > win_ ? (s)->hist_n - win_ : 0; \
            for (size_t j_ = from_; j_ < (s)->hist_n; j_++) {                                        \
                int32_t id_ = (s)->hist[j_];                                                         \
                if ((s)->seen[id_] == (s)->seen_gen) continue;                                       \
                (s)->seen[id_] = (s)->seen_gen;                                                      \
                body;                                                                                \
            }                                                                                        \
        }                                                                                            \
    } while (0)

int64_t rg_sampler_penalized(rg_sampler *s, int32_t *ids, int64_t cap) {
    int64_t count = 0;
    FOR_PENALIZED(s, id, {
        if (count < cap) ids[count] = id;
        count++;
    });
    return count;
}

void rg_sampler_accept(rg_sampler *s, int32_t id) {
    size_t win = (size_t)s->p.repeat_last_n;
    if (id < 0 || id >= s->n_vocab || win == 0) return;
    if (s->hist_n == s->hist_cap) {
        // Keep the window, drop what is older, then grow if that freed nothing.
        if (s->hist_n > win) {
            memmove(s->hist, s->hist + (s->hist_n - win), win * sizeof *s->hist);
            s->hist_n = win;
        } else {
            size_t cap = s->hist_cap ? s->hist_cap * 2 : 64;  // stays below 2 * window + 64
            int32_t *h = realloc(s->hist, cap * sizeof *h);
            if (!h) {  // out of memory: forget the oldest token rather than fail
                if (s->hist_n == 0) return;
                memmove(s->hist, s->hist + 1, (s->hist_n - 1) * sizeof *s->hist);
                s->hist_n--;
            } else {
                s->hist = h;
                s->hist_cap = cap;
            }
        }
    }
    s->hist[s->hist_n++] = id;
}

// The rank order: larger logit first, then lower id.
static inline bool better(cand a, cand b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

static int cmp_rank(const void *pa, const void *pb) {
    cand a = *(const cand *)pa, b = *(const cand *)pb;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

// Keeps the k best of c[0..n) in c[0..k): a heap whose root is the worst kept.
static void select_top_k(cand *c, int64_t n, int64_t k) {
    // sift down in a heap ordered so that a parent is worse than its children
    #define SIFT(start)                                                          \
        do {                                                                     \
            int64_t i_ = (start);                                                \
            for (;;) {                                                           \
                int64_t l_ = 2 * i_ + 1, r_ = l_ + 1, m_ = i_;                   \
                if (l_ < k && better(c[m_], c[l_])) m_ = l_;                     \
                if (r_ < k && better(c[m_], c[r_])) m_ = r_;                     \
                if (m_ == i_) break;                                             \
                cand t_ = c[i_]; c[i_] = c[m_]; c[m_] = t_;                      \
                i_ = m_;                                                         \
            }                                                                    \
        } while (0)
    for (int64_t i = k / 2 - 1; i >= 0; i--) SIFT(i);
    for (int64_t i = k; i < n; i++) {
        if (better(c[i], c[0])) {
            c[0] = c[i];
            SIFT(0);
        }
    }
    #undef SIFT
}

// Moves the candidates with e >= t to the front, keeping their order; returns their count.
static int64_t gather(cand *c, int64_t n, double t) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (c[i].e >= t) {
            cand x = c[m];
            c[m++] = c[i];
            c[i] = x;
        }
    }
    return m;
}

// Runs the chain on logits: s->c[0..n_keep) and s->w hold the candidates and their weights.
static void prepare(rg_sampler *s, const float *logits) {
    const rg_sampler_params *p = &s->p;
    int64_t n = s->n_vocab;
    cand *c = s->c;
    for (int64_t i = 0; i < n; i++) {
        float l = logits[i];
        c[i].logit = isnan(l) ? -INFINITY : l;
        c[i].id = (int32_t)i;
    }
    // 1. repetition penalty, once per distinct token of the window
    FOR_PENALIZED(s, id, c[id].logit = rg_sample_penalize(c[id].logit, p->repeat_penalty));
    // the best token: the greedy answer, and the reference of every probability
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (c[i].logit > c[best].logit) best = i;
    float maxf = c[best].logit;
    // 2. greedy (and the degenerate case where every logit is -inf or NaN)
    if (p->temp <= 0.0f || maxf == -INFINITY) {
        c[0] = c[best];
        s->w[0] = 1.0;
        s->total = 1.0;
        s->n_keep = 1;
        s->sorted = true;
        return;
    }
    if (maxf == INFINITY) {  // the +inf tokens share the mass equally
        for (int64_t i = 0; i < n; i++) c[i].logit = c[i].logit == INFINITY ? 0.0f : -INFINITY;
        maxf = 0.0f;
    }
    const double max = maxf;
    bool sorted = false;
    // 3. top-k
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(c, n, p->top_k);
        n = p->top_k;
        qsort(c, (size_t)n, sizeof *c, cmp_rank);
        sorted = true;
    }
    // 4, 5. top-p and min-p each keep a prefix of the ranked list; the result is the shorter.
    // top-p's sums are over the softmax of what top-k kept; min-p is relative to the top.
    bool have_e = p->top_p < 1.0f || p->min_p > 0.0f;
    if (have_e) {
        double z = 0, zdone = 0, zpart = 0;  // the blocked order of sample_math.h
        for (int64_t i = 0; i < n; i++) {
            c[i].e = det_exp((double)c[i].logit - max);
            z = rg_sample_block_add(&zdone, &zpart, i, c[i].e);
        }
        if (p->min_p > 0.0f) {
            n = gather(c, n, (double)p->min_p);  // gathering keeps a sorted list sorted
        } else if (!sorted) {
            // the head of the distribution that surely holds the nucleus
            for (double cut = 8.0;; cut *= 2) {
                double t = cut > 700 ? 0.0 : det_exp(-cut);
                int64_t m = gather(c, n, t);
                double mass = 0;
                for (int64_t i = 0; i < m; i++) mass += c[i].e;
                if (t == 0.0 || mass / z > (double)p->top_p + 1e-6) {
                    n = m;
                    break;
                }
            }
        }
        if (!sorted) qsort(c, (size_t)n, sizeof *c, cmp_rank);
        sorted = true;
        if (p->top_p < 1.0f) {
            double done = 0, part = 0;
            for (int64_t i = 0; i < n; i++) {
                double cum = rg_sample_block_add(&done, &part, i, c[i].e / z);
                if (cum >= (double)p->top_p) {
                    n = i + 1;
                    break;
                }
            }
        }
    }
    // 6. temperature
    double total = 0, done = 0, part = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = p->temp != 1.0f ? det_exp(((double)c[i].logit - max) / (double)p->temp)
                   : have_e        ? c[i].e
                                   : det_exp((double)c[i].logit - max);
        s->w[i] = w;
        total = rg_sample_block_add(&done, &part, i, w);
    }
    s->n_keep = n;
    s->sorted = sorted;
    s->total = total;
}

int32_t rg_sampler_sample(rg_sampler *s, const float *logits) {
    prepare(s, logits);
    double u = (double)rg_rng_uniform(s->p.seed, RG_SAMPLER_STREAM, s->step++);
    double target = u * s->total, done = 0, part = 0;
    int64_t last = 0;
    for (int64_t i = 0; i < s->n_keep; i++) {
        double cum = rg_sample_block_add(&done, &part, i, s->w[i]);  // w = 0 adds nothing
        if (s->w[i] <= 0) continue;
        last = i;
        if (target < cum) return s->c[i].id;
    }
    return s->c[last].id;  // rounding: the sum fell short of target
}

int64_t rg_sampler_candidates(rg_sampler *s, const float *logits, int32_t *ids, double *probs, int64_t cap) {
    prepare(s, logits);
    int64_t n = s->n_keep;
    if (!s->sorted) {
        // rank order, weights in the same order (w is a function of the logit)
        qsort(s->c, (size_t)n, sizeof *s->c, cmp_rank);
        float top = s->c[0].logit;
        double total = 0, done = 0, part = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = (double)s->c[i].logit - (double)top;
            s->w[i] = s->p.temp == 1.0f ? det_exp(d) : det_exp(d / (double)s->p.temp);
            total = rg_sample_block_add(&done, &part, i, s->w[i]);
        }
        s->total = total;
    }
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        if (s->w[i] <= 0) continue;  // underflowed or -inf: never drawn
        if (count < cap) {
            if (ids) ids[count] = s->c[i].id;
            if (probs) probs[count] = s->w[i] / s->total;
        }
        count++;
    }
    return count;
}
