// test_sampler.c - the sampler chain: greedy, temperature, top-k, top-p, min-p, repetition
// penalty, the distribution of draws, reproducibility and the checks on settings; and the
// device's sampler (src/cuda/sampling.cu) against this one, token for token (test_cuda_*: a GPU,
// or the host execution of the CUDA code with RETRO_CUDA_HOST=1).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cuda/cuda.h"
#include "infer/sampler.h"
#include "rg_test.h"

// Settings with every filter off, at temperature 1.
static rg_sampler_params plain(void) {
    rg_sampler_params p = rg_sampler_defaults();
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = 7;
    return p;
}

static rg_sampler *make(const rg_sampler_params *p, int32_t n_vocab) {
    rg_sampler *s = NULL;
    rg_error err = {0};
    rg_status st = rg_sampler_create(&s, p, n_vocab, &err);
    RG_CHECK(st == RG_OK, "create: %s", err.msg);
    return s;
}

static void random_logits(float *l, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) l[i] = 3.0f * rg_rng_normal(seed, 1, (uint64_t)i);
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

// The kept set as a bit mask over a small vocabulary (and the probabilities, ranked).
static unsigned kept_mask(rg_sampler *s, const float *l, double *probs, int64_t *count) {
    int32_t ids[32];
    double pr[32];
    int64_t n = rg_sampler_candidates(s, l, ids, pr, 32);
    unsigned m = 0;
    for (int64_t i = 0; i < n && i < 32; i++) {
        m |= 1u << ids[i];
        if (probs) probs[i] = pr[i];
    }
    if (count) *count = n;
    return m;
}

static void test_defaults(void) {
    rg_sampler_params p = rg_sampler_defaults();
    RG_CHECK(p.temp == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f, "defaults");
    RG_CHECK(p.repeat_penalty == 1.0f && p.seed == 42 && p.repeat_last_n == 64, "defaults");
    rg_error err = {0};
    RG_CHECK(rg_sampler_params_check(&p, &err) == RG_OK, "%s", err.msg);
}

static void test_greedy_argmax(void) {
    enum { N = 1000 };
    float l[N];
    for (float t = -1.0f; t <= 0.0f; t += 1.0f) {
        rg_sampler_params p = rg_sampler_defaults();
        p.temp = t;
        rg_sampler *s = make(&p, N);
        if (!s) return;
        for (uint64_t k = 0; k < 50; k++) {
            random_logits(l, N, k);
            int32_t got = rg_sampler_sample(s, l);
            RG_CHECK(got == argmax(l, N), "temp %g seed %llu: %d vs %d", (double)t, (unsigned long long)k, got,
                     argmax(l, N));
        }
        // ties go to the lowest id
        for (int i = 0; i < N; i++) l[i] = 0.0f;
        l[700] = l[300] = l[500] = 5.0f;
        RG_CHECK(rg_sampler_sample(s, l) == 300, "tie -> lowest id");
        int32_t id;
        double pr;
        RG_CHECK(rg_sampler_candidates(s, l, &id, &pr, 1) == 1 && id == 300 && pr == 1.0, "greedy candidate");
        rg_sampler_free(s);
    }
}

static void test_temperature_to_zero_is_greedy(void) {
    enum { N = 500 };
    float l[N];
    for (int t = 0; t < 4; t++) {
        rg_sampler_params p = plain();
        p.temp = (float)pow(10.0, -3 - t);
        rg_sampler *s = make(&p, N);
        if (!s) return;
        for (uint64_t k = 0; k < 40; k++) {
            random_logits(l, N, 100 + k);
            RG_CHECK(rg_sampler_sample(s, l) == argmax(l, N), "temp %g", (double)p.temp);
        }
        rg_sampler_free(s);
    }
    // and the probabilities sharpen monotonically toward the argmax
    float l4[4] = {1.0f, 2.0f, 0.5f, 1.9f};
    double prev = 0;
    for (float t = 2.0f; t > 0.01f; t /= 2) {
        rg_sampler_params p = plain();
        p.temp = t;
        rg_sampler *s = make(&p, 4);
        if (!s) return;
        int32_t id[4];
        double pr[4];
        rg_sampler_candidates(s, l4, id, pr, 4);
        RG_CHECK(id[0] == 1 && pr[0] > prev, "temp %g: top %d p %g (prev %g)", (double)t, id[0], pr[0], prev);
        prev = pr[0];
        rg_sampler_free(s);
    }
    RG_CHECK(prev > 0.99, "p at the lowest temperature %g", prev);
}

static void test_top_k_1_is_greedy(void) {
    enum { N = 2000 };
    float l[N];
    rg_sampler_params p = plain();
    p.top_k = 1;
    p.temp = 1.5f;
    rg_sampler *s = make(&p, N);
    if (!s) return;
    for (uint64_t k = 0; k < 50; k++) {
        random_logits(l, N, 1000 + k);
        RG_CHECK(rg_sampler_sample(s, l) == argmax(l, N), "draw %llu", (unsigned long long)k);
    }
    for (int i = 0; i < N; i++) l[i] = 1.0f;  // all tied: lowest id
    RG_CHECK(rg_sampler_sample(s, l) == 0, "ties");
    rg_sampler_free(s);

    // top-k = 3 keeps the three largest, renormalized
    float l5[5] = {0.1f, 3.0f, 2.0f, -1.0f, 2.5f};
    p = plain();
    p.top_k = 3;
    s = make(&p, 5);
    if (!s) return;
    double pr[5];
    int64_t n;
    unsigned m = kept_mask(s, l5, pr, &n);
    RG_CHECK(m == ((1u << 1) | (1u << 2) | (1u << 4)) && n == 3, "mask %x n %lld", m, (long long)n);
    double z = exp(3.0) + exp(2.0) + exp(2.5);
    RG_CHECK(fabs(pr[0] - exp(3.0) / z) < 1e-6 && fabs(pr[1] - exp(2.5) / z) < 1e-6, "renormalized");
    rg_sampler_free(s);
}

// Logits whose softmax is exactly probs (up to rounding).
static void logits_of(float *l, const double *probs, int n) {
    for (int i = 0; i < n; i++) l[i] = (float)log(probs[i]);
}

static void test_top_p_sets(void) {
    const double probs[6] = {0.05, 0.40, 0.25, 0.15, 0.10, 0.05};
    float l[6];
    logits_of(l, probs, 6);
    struct { float top_p; unsigned want; } cases[] = {
        {0.30f, 1u << 1},                                        // 0.40 >= 0.30
        {0.60f, (1u << 1) | (1u << 2)},                          // 0.65
        {0.70f, (1u << 1) | (1u << 2) | (1u << 3)},              // 0.80
        {0.85f, (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4)},  // 0.90
        {0.93f, 0x1f},                                           // 0.95: of the tied 0.05s, id 0 comes first
        {1.00f, 0x3f},
        {0.01f, 1u << 1},                                        // at least one
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        rg_sampler_params p = plain();
        p.top_p = cases[k].top_p;
        rg_sampler *s = make(&p, 6);
        if (!s) return;
        double pr[6];
        int64_t n;
        unsigned m = kept_mask(s, l, pr, &n);
        RG_CHECK(m == cases[k].want, "top_p %g: kept %x, want %x", (double)cases[k].top_p, m, cases[k].want);
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += pr[i];
        RG_CHECK(fabs(sum - 1.0) < 1e-12, "probabilities sum to %g", sum);
        rg_sampler_free(s);
    }
    // 0.93: the 0.05 tie is broken by id: id 0 goes in, id 5 stays out
    {
        rg_sampler_params p = plain();
        p.top_p = 0.93f;
        rg_sampler *s = make(&p, 6);
        if (!s) return;
        int32_t ids[6];
        int64_t n = rg_sampler_candidates(s, l, ids, NULL, 6);
        RG_CHECK(n == 5 && ids[4] == 0, "tie order: n %lld, last %d", (long long)n, ids[4]);
        rg_sampler_free(s);
    }
    // top-p sums over what top-k kept: top-k 3 leaves 0.40/0.80, 0.25/0.80 -> 0.8125 >= 0.8
    {
        rg_sampler_params p = plain();
        p.top_k = 3;
        p.top_p = 0.80f;
        rg_sampler *s = make(&p, 6);
        if (!s) return;
        unsigned m = kept_mask(s, l, NULL, NULL);
        RG_CHECK(m == ((1u << 1) | (1u << 2)), "top-k then top-p: %x", m);
        rg_sampler_free(s);
    }
}

// Brute force: rank all, keep the prefix reaching top_p.
static int64_t ref_top_p(const float *l, int n, double top_p, int32_t *order) {
    double mx = l[argmax(l, n)], z = 0;
    for (int i = 0; i < n; i++) z += exp((double)l[i] - mx);
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) {  // insertion sort, rank order
        int32_t x = order[i];
        int j = i - 1;
        while (j >= 0 && (l[order[j]] < l[x] || (l[order[j]] == l[x] && order[j] > x))) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = x;
    }
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += exp((double)l[order[i]] - mx) / z;
        if (cum >= top_p) return i + 1;
    }
    return n;
}

static void test_top_p_large_vocab(void) {
    enum { N = 3000 };
    static float l[N];
    static int32_t order[N], ids[N];
    const float tps[] = {0.5f, 0.9f, 0.99f, 0.999f};
    for (uint64_t k = 0; k < 6; k++) {
        random_logits(l, N, 500 + k);
        if (k & 1)
            for (int i = 0; i < N; i++) l[i] *= 0.2f;  // flat: the nucleus is most of the vocabulary
        for (size_t t = 0; t < sizeof tps / sizeof tps[0]; t++) {
            rg_sampler_params p = plain();
            p.top_p = tps[t];
            rg_sampler *s = make(&p, N);
            if (!s) return;
            int64_t want = ref_top_p(l, N, tps[t], order);
            int64_t got = rg_sampler_candidates(s, l, ids, NULL, N);
            RG_CHECK(got == want, "k %llu top_p %g: %lld vs %lld", (unsigned long long)k, (double)tps[t],
                     (long long)got, (long long)want);
            for (int64_t i = 0; i < got && i < want; i++)
                if (ids[i] != order[i]) {
                    RG_CHECK(0, "rank %lld: %d vs %d", (long long)i, ids[i], order[i]);
                    break;
                }
            rg_sampler_free(s);
        }
    }
}

static void test_min_p_sets(void) {
    const double probs[5] = {0.10, 0.40, 0.25, 0.15, 0.10};
    float l[5];
    logits_of(l, probs, 5);
    struct { float min_p; unsigned want; } cases[] = {
        {0.00f, 0x1f},
        {0.20f, 0x1f},                              // >= 0.08
        {0.30f, (1u << 1) | (1u << 2) | (1u << 3)}, // >= 0.12
        {0.50f, (1u << 1) | (1u << 2)},             // >= 0.20
        {0.70f, 1u << 1},                           // >= 0.28
        {0.99f, 1u << 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        rg_sampler_params p = plain();
        p.min_p = cases[k].min_p;
        rg_sampler *s = make(&p, 5);
        if (!s) return;
        double pr[5];
        int64_t n;
        unsigned m = kept_mask(s, l, pr, &n);
        RG_CHECK(m == cases[k].want, "min_p %g: kept %x, want %x", (double)cases[k].min_p, m, cases[k].want);
        if (cases[k].want == ((1u << 1) | (1u << 2)))
            RG_CHECK(fabs(pr[0] - 0.40 / 0.65) < 1e-6 && fabs(pr[1] - 0.25 / 0.65) < 1e-6, "renormalized %g %g", pr[0],
                     pr[1]);
        rg_sampler_free(s);
    }
    // with top-p: the shorter of the two prefixes (top-p 0.6 keeps 2, min-p 0.3 keeps 3)
    rg_sampler_params p = plain();
    p.min_p = 0.30f;
    p.top_p = 0.60f;
    rg_sampler *s = make(&p, 5);
    if (!s) return;
    RG_CHECK(kept_mask(s, l, NULL, NULL) == ((1u << 1) | (1u << 2)), "min-p and top-p");
    rg_sampler_free(s);
    // min-p is relative to the top at temperature 1, before temperature reshapes
    p = plain();
    p.min_p = 0.30f;
    p.temp = 5.0f;
    s = make(&p, 5);
    if (!s) return;
    RG_CHECK(kept_mask(s, l, NULL, NULL) == ((1u << 1) | (1u << 2) | (1u << 3)), "min-p before temperature");
    rg_sampler_free(s);
}

static void test_repeat_penalty(void) {
    float l[5] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    rg_sampler_params p = plain();
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 64;
    rg_sampler *s = make(&p, 5);
    if (!s) return;
    rg_sampler_accept(s, 0);
    rg_sampler_accept(s, 1);
    rg_sampler_accept(s, 0);  // twice in the window: penalized once
    rg_sampler_accept(s, 4);  // 0 * 2 = 0
    rg_sampler_accept(s, 77); // out of range: ignored
    // penalized: {1, -4, 1, 0.5, 0}
    const double want_l[5] = {1.0, -4.0, 1.0, 0.5, 0.0};
    double z = 0;
    for (int i = 0; i < 5; i++) z += exp(want_l[i]);
    int32_t ids[5];
    double pr[5];
    int64_t n = rg_sampler_candidates(s, l, ids, pr, 5);
    RG_REQUIRE(n == 5, "n %lld", (long long)n);
    RG_CHECK(ids[0] == 0 && ids[1] == 2, "tie 1 = 1 keeps id order: %d %d", ids[0], ids[1]);
    for (int i = 0; i < 5; i++)
        RG_CHECK(fabs(pr[i] - exp(want_l[ids[i]]) / z) < 1e-6, "id %d: %g vs %g", ids[i], pr[i], exp(want_l[ids[i]]) / z);
    rg_sampler_free(s);

    // the window: only the last repeat_last_n accepted tokens count
    p.repeat_last_n = 1;
    p.temp = 0.0f;
    float g[3] = {2.0f, 1.5f, 1.0f};
    s = make(&p, 3);
    if (!s) return;
    rg_sampler_accept(s, 0);
    RG_CHECK(rg_sampler_sample(s, g) == 1, "2/2 = 1 < 1.5: greedy moves to 1");
    rg_sampler_accept(s, 2);  // 0 leaves the window
    RG_CHECK(rg_sampler_sample(s, g) == 0, "0 out of the window");
    for (int i = 0; i < 1000; i++) rg_sampler_accept(s, i % 2);  // history compaction
    RG_CHECK(rg_sampler_sample(s, g) == 0, "last accepted is 1: 0 wins");
    rg_sampler_reset(s);
    RG_CHECK(rg_sampler_sample(s, g) == 0, "reset forgets");
    rg_sampler_free(s);

    // penalty < 1 boosts; repeat_last_n 0 disables
    p = plain();
    p.temp = 0.0f;
    p.repeat_penalty = 0.5f;
    s = make(&p, 3);
    if (!s) return;
    rg_sampler_accept(s, 1);
    RG_CHECK(rg_sampler_sample(s, g) == 1, "1.5 / 0.5 = 3 > 2");
    rg_sampler_free(s);
    p.repeat_last_n = 0;
    s = make(&p, 3);
    if (!s) return;
    rg_sampler_accept(s, 1);
    RG_CHECK(rg_sampler_sample(s, g) == 0, "window 0: no penalty");
    rg_sampler_free(s);
}

static void check_histogram(const float *l, int n, float temp, int draws, uint64_t seed) {
    rg_sampler_params p = plain();
    p.temp = temp;
    p.seed = seed;
    rg_sampler *s = make(&p, n);
    if (!s) return;
    int counts[16] = {0};
    for (int i = 0; i < draws; i++) {
        int32_t id = rg_sampler_sample(s, l);
        RG_REQUIRE(id >= 0 && id < n, "id %d", id);
        counts[id]++;
    }
    double mx = l[argmax(l, n)], z = 0;
    for (int i = 0; i < n; i++) z += exp(((double)l[i] - mx) / temp);
    for (int i = 0; i < n; i++) {
        double pi = exp(((double)l[i] - mx) / temp) / z, mean = draws * pi, sd = sqrt(draws * pi * (1 - pi));
        RG_CHECK(fabs(counts[i] - mean) <= 3 * sd, "temp %g token %d: %d draws, expected %.1f +- %.1f", (double)temp, i,
                 counts[i], mean, sd);
    }
    RG_CHECK(rg_sampler_step(s) == (uint64_t)draws, "step %llu", (unsigned long long)rg_sampler_step(s));
    rg_sampler_free(s);
}

static void test_distribution_matches_softmax(void) {
    const float l[8] = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f, -3.0f, 1.5f, 0.2f};
    check_histogram(l, 8, 1.0f, 20000, 42);
    check_histogram(l, 8, 1.0f, 20000, 12345);
    check_histogram(l, 8, 0.7f, 20000, 9);
}

static void test_determinism(void) {
    enum { N = 300, T = 200 };
    static float l[N];
    int32_t a[T], b[T], c[T];
    rg_sampler_params p = rg_sampler_defaults();  // the whole default chain
    p.repeat_penalty = 1.1f;
    int32_t *outs[3] = {a, b, c};
    uint64_t seeds[3] = {42, 42, 43};
    for (int r = 0; r < 3; r++) {
        p.seed = seeds[r];
        rg_sampler *s = make(&p, N);
        if (!s) return;
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < N; i++) l[i] = 0.5f * rg_rng_normal(99, (uint64_t)t, (uint64_t)i);
            outs[r][t] = rg_sampler_sample(s, l);
            rg_sampler_accept(s, outs[r][t]);
        }
        rg_sampler_free(s);
    }
    RG_CHECK(memcmp(a, b, sizeof a) == 0, "same seed, same tokens");
    int differ = 0;
    for (int t = 0; t < T; t++) differ += a[t] != c[t];
    RG_CHECK(differ > T / 4, "different seeds: only %d of %d tokens differ", differ, T);
    // candidates do not consume draws; reset restarts the counter
    p.seed = 5;
    p.repeat_penalty = 1.0f;
    rg_sampler *s = make(&p, N);
    if (!s) return;
    for (int i = 0; i < N; i++) l[i] = rg_rng_normal(3, 0, (uint64_t)i);
    int32_t first = rg_sampler_sample(s, l);
    rg_sampler_candidates(s, l, NULL, NULL, 0);
    RG_CHECK(rg_sampler_step(s) == 1, "candidates advanced the step");
    rg_sampler_reset(s);
    RG_CHECK(rg_sampler_sample(s, l) == first, "reset replays");
    rg_sampler_free(s);
}

static void test_nonfinite_logits(void) {
    float l[4] = {NAN, -INFINITY, 1.0f, NAN};
    rg_sampler_params p = plain();
    rg_sampler *s = make(&p, 4);
    if (!s) return;
    for (int i = 0; i < 50; i++) RG_CHECK(rg_sampler_sample(s, l) == 2, "only 2 is finite");
    float inf2[4] = {1.0f, INFINITY, 0.0f, INFINITY};
    int seen[4] = {0};
    for (int i = 0; i < 400; i++) seen[rg_sampler_sample(s, inf2)]++;
    RG_CHECK(seen[0] == 0 && seen[2] == 0 && seen[1] > 100 && seen[3] > 100, "+inf share: %d %d", seen[1], seen[3]);
    float none[4] = {NAN, -INFINITY, NAN, -INFINITY};
    int32_t id = rg_sampler_sample(s, none);
    RG_CHECK(id >= 0 && id < 4, "all -inf still gives a token: %d", id);
    rg_sampler_free(s);
}

static void expect_bad(rg_sampler_params p, const char *want1, const char *want2) {
    rg_error err = {0};
    rg_sampler *s = NULL;
    rg_status st = rg_sampler_create(&s, &p, 10, &err);
    RG_CHECK(st == RG_ERR_ARG && !s, "accepted (want %s)", want1);
    RG_CHECK(strstr(err.msg, want1) && strstr(err.msg, want2), "message '%s' lacks '%s' / '%s'", err.msg, want1, want2);
    rg_sampler_free(s);
}

static void test_invalid_settings(void) {
    rg_sampler_params p;
    p = rg_sampler_defaults(); p.top_p = 0.0f;           expect_bad(p, "--top-p 0", "(0, 1]");
    p = rg_sampler_defaults(); p.top_p = 1.5f;           expect_bad(p, "--top-p 1.5", "(0, 1]");
    p = rg_sampler_defaults(); p.top_p = NAN;            expect_bad(p, "--top-p", "(0, 1]");
    p = rg_sampler_defaults(); p.min_p = 1.0f;           expect_bad(p, "--min-p 1", "[0, 1)");
    p = rg_sampler_defaults(); p.min_p = -0.1f;          expect_bad(p, "--min-p -0.1", "[0, 1)");
    p = rg_sampler_defaults(); p.top_k = -1;             expect_bad(p, "--top-k -1", "0 (off)");
    p = rg_sampler_defaults(); p.repeat_penalty = 0.0f;  expect_bad(p, "--repeat-penalty 0", "> 0");
    p = rg_sampler_defaults(); p.repeat_penalty = -1.0f; expect_bad(p, "--repeat-penalty -1", "> 0");
    p = rg_sampler_defaults(); p.repeat_last_n = -2;     expect_bad(p, "--repeat-last-n -2", ">= 0");
    p = rg_sampler_defaults(); p.temp = NAN;             expect_bad(p, "--temp", "finite");
    // the edges that are allowed
    rg_error err = {0};
    p = rg_sampler_defaults(); p.top_p = 1.0f; p.min_p = 0.0f; p.temp = -5.0f; p.top_k = 0;
    RG_CHECK(rg_sampler_params_check(&p, &err) == RG_OK, "%s", err.msg);
    rg_sampler *s = NULL;
    RG_CHECK(rg_sampler_create(&s, &p, 0, &err) == RG_ERR_ARG && strstr(err.msg, "vocabulary"), "%s", err.msg);
    // top-k larger than the vocabulary: everything
    p = plain();
    p.top_k = 100;
    s = make(&p, 4);
    if (!s) return;
    float l[4] = {0, 1, 2, 3};
    RG_CHECK(rg_sampler_candidates(s, l, NULL, NULL, 0) == 4, "top-k 100 of 4");
    rg_sampler_free(s);
}

// A vocabulary of Qwen's size through the default chain: fast enough per token.
static void test_large_vocab_speed(void) {
    enum { N = 151936 };
    float *l = malloc(N * sizeof *l);
    RG_REQUIRE(l, "oom");
    random_logits(l, N, 77);
    rg_sampler_params cfgs[3] = {rg_sampler_defaults(), plain(), plain()};
    cfgs[2].top_p = 0.9f;
    for (int c = 0; c < 3; c++) {
        rg_sampler *s = make(&cfgs[c], N);
        if (!s) break;
        for (int i = 0; i < 20; i++) {
            int32_t id = rg_sampler_sample(s, l);
            RG_CHECK(id >= 0 && id < N, "id %d", id);
        }
        rg_sampler_free(s);
    }
    free(l);
}


// ---------------------------------------------------------------------------
// The device sampler against rg_sampler_sample: the same logits, settings, penalty window and
// draw index must give the same token, every draw.

typedef struct dev_case {
    const char *name;
    float temp;
    int32_t top_k;
    float top_p, min_p, penalty;
    int32_t last_n;
} dev_case;

static const dev_case dev_cases[] = {
    {"greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f, 0},
    {"greedy, penalty", -1.0f, 40, 0.9f, 0.1f, 1.5f, 8},
    {"temperature 1, no filter", 1.0f, 0, 1.0f, 0.0f, 1.0f, 0},
    {"temperature 0.7, no filter", 0.7f, 0, 1.0f, 0.0f, 1.0f, 0},
    {"top-k 5", 1.0f, 5, 1.0f, 0.0f, 1.0f, 0},
    {"top-k 300, temperature 1.3", 1.3f, 300, 1.0f, 0.0f, 1.0f, 0},
    {"top-p 0.9", 1.0f, 0, 0.9f, 0.0f, 1.0f, 0},
    {"top-p 0.5, temperature 0.6", 0.6f, 0, 0.5f, 0.0f, 1.0f, 0},
    {"top-p 0.999", 1.0f, 0, 0.999f, 0.0f, 1.0f, 0},
    {"min-p 0.05", 1.0f, 0, 1.0f, 0.05f, 1.0f, 0},
    {"min-p 0.001, temperature 2", 2.0f, 0, 1.0f, 0.001f, 1.0f, 0},
    {"top-p 0.8, min-p 0.02", 0.9f, 0, 0.8f, 0.02f, 1.0f, 0},
    {"the default chain", 0.8f, 40, 0.95f, 0.05f, 1.0f, 0},
    {"the default chain, penalty 1.3 over 16", 0.8f, 40, 0.95f, 0.05f, 1.3f, 16},
    {"penalty 0.7 over 64, no filter", 1.0f, 0, 1.0f, 0.0f, 0.7f, 64},
    {"top-k 300, top-p 0.9, penalty 1.1 over 32", 1.1f, 300, 0.9f, 0.0f, 1.1f, 32},
    {"top-k 2000, top-p 0.95, min-p 0.01", 1.0f, 2000, 0.95f, 0.01f, 1.0f, 0},  // past the one-block tail
};

// Logits of draw t: normal, tied (half steps, signed zeros), with NaN / -inf / +inf, nearly flat,
// wide (most weights underflow), and now and then nothing finite at all.
static void dev_logits(float *l, int n, uint64_t seed, int t) {
    const int kind = t % 37 == 36 ? 5 : t % 5;
    for (int i = 0; i < n; i++) {
        const float z = rg_rng_normal(seed, (uint64_t)t, (uint64_t)i);
        const uint64_t r = rg_rng_u64(seed ^ 0x5eed, (uint64_t)t, (uint64_t)i);
        switch (kind) {
        case 0: l[i] = 3.0f * z; break;
        case 1: l[i] = (float)(int)(2.0f * z) * 0.5f; if (l[i] == 0.0f && (r & 1)) l[i] = -0.0f; break;
        case 2:
            l[i] = 2.0f * z;
            if (r % 23 == 0) l[i] = NAN;
            else if (r % 29 == 0) l[i] = -INFINITY;
            else if (r % 997 == 0 && t % 3 == 0) l[i] = INFINITY;
            break;
        case 3: l[i] = r % 7 == 0 ? 1.0f + 0.01f * z : 1.0f; break;
        case 4: l[i] = 40.0f * z; break;
        default: l[i] = r & 1 ? NAN : -INFINITY; break;
        }
    }
}

typedef struct dev_fixture {
    rg_cuda_ctx *ctx;
    rg_cuda_sampler *ds;
    float *d_logits;
} dev_fixture;

static bool dev_open(dev_fixture *f, int32_t n_vocab) {
    rg_error err = {0};
    memset(f, 0, sizeof *f);
    RG_CHECK(rg_cuda_ctx_create(&f->ctx, 0, &err) == RG_OK, "context: %s", err.msg);
    if (!f->ctx) return false;
    RG_CHECK(rg_cuda_sampler_create(f->ctx, n_vocab, 64, &f->ds, &err) == RG_OK, "sampler: %s", err.msg);
    void *p = NULL;
    RG_CHECK(f->ds && rg_cuda_mem_alloc(f->ctx, (size_t)n_vocab * sizeof(float), &p, &err) == RG_OK, "logits: %s",
             err.msg);
    f->d_logits = p;
    return f->ds && f->d_logits;
}

static void dev_close(dev_fixture *f) {
    if (f->ctx) rg_cuda_mem_free(f->ctx, f->d_logits);
    rg_cuda_sampler_free(f->ds);
    rg_cuda_ctx_free(f->ctx);
}

// Draws `draws` tokens per case on a vocabulary of n, both samplers on the same logits; the CPU's
// token goes into the history of both. Returns the number of mismatches.
static int dev_compare(int32_t n, int draws, uint64_t seed) {
    dev_fixture f;
    if (!dev_open(&f, n)) {
        dev_close(&f);
        return 1;
    }
    float *l = malloc((size_t)n * sizeof *l);
    int32_t pen[64];
    int bad = 0;
    for (size_t c = 0; c < sizeof dev_cases / sizeof dev_cases[0]; c++) {
        const dev_case *dc = &dev_cases[c];
        rg_sampler_params p = rg_sampler_defaults();
        p.temp = dc->temp, p.top_k = dc->top_k, p.top_p = dc->top_p, p.min_p = dc->min_p;
        p.repeat_penalty = dc->penalty, p.repeat_last_n = dc->last_n, p.seed = seed + c;
        rg_sampler *s = make(&p, n);
        if (!s) break;
        int case_bad = 0, distinct = 0;
        int32_t prev = -1;
        for (int t = 0; t < draws; t++) {
            dev_logits(l, n, seed * 31 + c, t);
            rg_error err = {0};
            rg_cuda_sample_args a = {.p = p, .step = rg_sampler_step(s), .penalized = pen};
            a.n_penalized = rg_sampler_penalized(s, pen, 64);
            int32_t got = -1;
            rg_status st = rg_cuda_copy_h2d(f.ctx, f.d_logits, l, (size_t)n * sizeof *l, &err);
            if (!st) st = rg_cuda_sample(f.ds, f.d_logits, &a, &got, &err);
            const int32_t want = rg_sampler_sample(s, l);
            if (st || got != want) {
                if (case_bad++ == 0)
                    printf("    %s, n_vocab %d, draw %d (logits kind %d): device %d, cpu %d %s\n", dc->name, (int)n, t,
                           t % 37 == 36 ? 5 : t % 5, (int)got, (int)want, st ? err.msg : "");
            }
            distinct += want != prev;
            prev = want;
            rg_sampler_accept(s, want);
        }
        RG_CHECK(case_bad == 0, "%s, n_vocab %d: %d of %d draws differ", dc->name, (int)n, case_bad, draws);
        RG_CHECK(dc->temp <= 0.0f || distinct > draws / 4, "%s: the draws barely change (%d changes)", dc->name, distinct);
        bad += case_bad;
        rg_sampler_free(s);
    }
    free(l);
    dev_close(&f);
    return bad;
}

static bool have_device(char *why, size_t cap) { return rg_cuda_device_count(why, cap) > 0; }

// One summation block and less: the plain left-to-right sums.
static void test_cuda_small_vocab(void) {
    char why[256];
    if (!have_device(why, sizeof why)) RG_SKIP("no CUDA device: %s", why);
    dev_compare(200, 200, 11);
}

// Several blocks, the last one partial: the blocked order, top-k 300 across blocks.
static void test_cuda_blocked_vocab(void) {
    char why[256];
    if (!have_device(why, sizeof why)) RG_SKIP("no CUDA device: %s", why);
    dev_compare(1000, 200, 23);
}

// A vocabulary past 4096: the sort and the radix select over a larger list, fewer draws.
static void test_cuda_large_vocab(void) {
    char why[256];
    if (!have_device(why, sizeof why)) RG_SKIP("no CUDA device: %s", why);
    dev_compare(5003, 40, 5);
}

static const rg_test_case cases[] = {
    RG_TEST(test_defaults),
    RG_TEST(test_greedy_argmax),
    RG_TEST(test_temperature_to_zero_is_greedy),
    RG_TEST(test_top_k_1_is_greedy),
    RG_TEST(test_top_p_sets),
    RG_TEST(test_top_p_large_vocab),
    RG_TEST(test_min_p_sets),
    RG_TEST(test_repeat_penalty),
    RG_TEST(test_distribution_matches_softmax),
    RG_TEST(test_determinism),
    RG_TEST(test_nonfinite_logits),
    RG_TEST(test_invalid_settings),
    RG_TEST(test_large_vocab_speed),
    RG_TEST(test_cuda_small_vocab),
    RG_TEST(test_cuda_blocked_vocab),
    RG_TEST(test_cuda_large_vocab),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
