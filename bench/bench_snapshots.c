// bench_snapshots.c - what exact rewind of recurrent state costs (RETRO_RECURRENT_ROLLBACK=auto,
// infer/session_snap.c), and speculative decoding on a hybrid model, at the LFM2-350M shape (make-tiny
// --shape lfm2-350m: random weights of the real dimensions; the Mamba-2 130M shape with
// RG_BENCH_ARCH=mamba2). Rows, interleaved rounds, median and spread:
//   - memory: the snapshots a session plans (rg_session_snapshot_bytes) against the recurrent state of 16
//     positions (16 x the per-sequence state), for a verification batch of 17 (draft-max 16);
//   - time per verification batch (rg_session_eval_exact of 9 and 17 tokens) with snapshots off and on,
//     and a rewind into the batch (the restore);
//   - generation tokens/s without a draft (snapshots off, the default) and speculative (draft-max 8, snapshots
//     on) with drafts from an oracle: the target's own greedy continuation (recorded first), every draft at
//     a position p with p % c == c - 1 replaced by another token (c = 0: none; 4; 2), with the acceptance rate
//     and whether greedy tokens are the same. Random weights give prompt lookup nothing to find, and no real
//     LFM2 file is installable here: this measures the machinery (exact verification batches, rewinds through
//     the snapshots) at set acceptance rates, not a drafter.
//
//   ./build/bench_snapshots
//
// Optional environment: RG_BENCH_ARCH=lfm2|mamba2 (default lfm2), RG_BENCH_TYPE=F16 (the weights' type),
// RG_BENCH_REPS=5 (rounds), RG_BENCH_THREADS (default: all cores), RG_BENCH_CACHE=/tmp/dir (keep the
// made model there).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "infer/session.h"
#include "infer/speculative.h"
#include "model/state.h"
#include "model/tiny.h"

enum { N_CTX = 1024, N_PROMPT = 96, N_GEN = 96, MAX_REPS = 15 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A session made with RETRO_RECURRENT_ROLLBACK as `rollback` (read when the session is made).
static rg_session *session(const rg_model *m, const char *rollback, int threads, rg_error *err) {
    setenv("RETRO_RECURRENT_ROLLBACK", rollback, 1);
    rg_session *s = NULL;
    rg_session_opts so = {.n_ctx = N_CTX, .n_threads = threads, .n_batch = 256, .snapshot_tokens = 17};
    if (rg_session_create(&s, m, &so, err)) return NULL;
    return s;
}

// Seconds of one exact batch of n tokens after the prompt (the session starts over and takes the prompt first,
// untimed); with rewind, the seconds of a rewind to the batch's middle are added to *rewind_s.
static double batch_secs(rg_session *s, const int32_t *prompt, int n, double *rewind_s, rg_error *err) {
    if (rg_session_rewind(s, 0, err) || rg_session_eval(s, prompt, N_PROMPT, NULL, 0, err)) return -1;
    double t0 = bench_now();
    if (rg_session_eval_exact(s, prompt, n, NULL, err)) return -1;
    double t = bench_now() - t0;
    if (rewind_s) {
        t0 = bench_now();
        if (rg_session_rewind(s, N_PROMPT + n / 2, err)) return -1;
        *rewind_s += bench_now() - t0;
    }
    return t;
}

// One greedy generation of N_GEN tokens after the prompt; tokens/s and the tokens in out. With ref (the plain
// run's tokens): speculative, draft-max 8, the drafts at out[i]'s turn ref[i + 1 ..], each at a position p with
// p % corrupt == corrupt - 1 (corrupt > 0) replaced by another id; the decoder's stats in *ss.
static double generate(rg_session *s, const int32_t *prompt, const int32_t *ref, int corrupt, int32_t *out,
                       rg_spec_stats *ss, rg_error *err) {
    const int64_t V = rg_session_model(s)->hp.n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)V);
    rg_sampler *smp = NULL;
    rg_spec *sp = NULL;
    rg_sampler_params p = rg_sampler_defaults();
    p.temp = 0;
    int32_t q[9], d[8];
    rg_spec_opts o = {.kind = RG_DRAFT_NGRAM, .draft_max = 8};
    rg_status st = rg_session_rewind(s, 0, err);
    if (!st) st = rg_sampler_create(&smp, &p, (int32_t)V, err);
    if (!st && ref) st = rg_spec_create(&sp, s, &o, err);
    if (!st) st = rg_session_eval(s, prompt, N_PROMPT, logits, 0, err);
    if (!st && sp) st = rg_spec_push(sp, prompt, N_PROMPT, err);
    double t0 = bench_now();
    int64_t n_q = 0, i_q = 0;
    for (int i = 0; !st && i < N_GEN; i++) {
        bool in_history = false;
        if (i == 0 || !sp) out[i] = rg_sampler_sample(smp, logits);
        else out[i] = q[i_q++], in_history = i_q < n_q;
        if (!in_history) rg_sampler_accept(smp, out[i]);
        if (i + 1 == N_GEN) break;
        if (!sp) {
            st = rg_session_eval(s, &out[i], 1, logits, 0, err);
        } else if (i_q == n_q) {
            const int k = N_GEN - i - 2 < 8 ? N_GEN - i - 2 : 8;
            for (int j = 0; j < k; j++) {
                const int pos = i + 1 + j;
                d[j] = corrupt > 0 && pos % corrupt == corrupt - 1 ? (int32_t)((ref[pos] + 1) % V) : ref[pos];
            }
            st = rg_spec_verify(sp, out[i], d, k, smp, q, &n_q, err);
            i_q = 0;
        }
    }
    double secs = bench_now() - t0;
    if (sp) *ss = rg_spec_get_stats(sp);
    rg_spec_free(sp);
    rg_sampler_free(smp);
    free(logits);
    return st ? -1 : (N_GEN - 1) / secs;
}

int main(void) {
    const char *arch = getenv("RG_BENCH_ARCH") ? getenv("RG_BENCH_ARCH") : "lfm2";
    const char *shape = strcmp(arch, "mamba2") == 0 ? "mamba2-130m" : "lfm2-350m";
    const char *tname = getenv("RG_BENCH_TYPE") ? getenv("RG_BENCH_TYPE") : "F16";
    const char *cache = getenv("RG_BENCH_CACHE");
    const int threads = bench_env_int("RG_BENCH_THREADS", 0);
    int reps = bench_env_int("RG_BENCH_REPS", 5);
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;
    const int ti = rg_type_from_name(tname);
    if (ti < 0) {
        fprintf(stderr, "bench_snapshots: RG_BENCH_TYPE=%s is not a type\n", tname);
        return 1;
    }
    const uint32_t type = (uint32_t)ti;
    char path[512];
    if (cache) snprintf(path, sizeof path, "%s/%s-%s.gguf", cache, shape, rg_type_get(type)->name);
    else snprintf(path, sizeof path, "/tmp/bench_snapshots_%d.gguf", (int)getpid());
    rg_error err = {0};
    rg_tiny_config cfg = {.arch = arch, .type = type, .seed = 7, .shape = shape, .n_threads = threads};
    rg_model *m = NULL;
    rg_status st = cache && access(path, R_OK) == 0 ? RG_OK : rg_tiny_write(&cfg, path, &err);
    if (!st) st = rg_model_load(&m, path, &err);
    rg_session *off = m ? session(m, "off", threads, &err) : NULL, *on = off ? session(m, "auto", threads, &err) : NULL;
    rg_model_state ms;
    if (!st && on) st = rg_model_state_init(&ms, m, 1, RG_TYPE_F16, &err);
    if (st || !on) {
        fprintf(stderr, "bench_snapshots: %s\n", err.msg);
        return 1;
    }
    const int64_t V = m->hp.n_vocab;
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (int32_t)(((i % 24) * 7919 + 13) % V);
    printf("%s shape (%s, random weights), %s; %d interleaved rounds\n", shape, arch, rg_type_get(type)->name, reps);
    const double snap = (double)rg_session_snapshot_bytes(on), seq16 = 16.0 * (double)ms.seq_bytes;
    printf("memory: snapshots %.2f MiB (a batch of 17 and the ring of 16), recurrent state of 16 positions %.2f MiB: "
           "%.2fx\n", snap / 1048576.0, seq16 / 1048576.0, snap / seq16);
    rg_model_state_free(&ms);

    // time per verification batch, snapshots off and on, interleaved
    double t9[2][MAX_REPS], t17[2][MAX_REPS], rw = 0;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < 2; k++) {
            rg_session *s = k ? on : off;
            t9[k][r] = batch_secs(s, prompt, 9, k ? &rw : NULL, &err);
            t17[k][r] = batch_secs(s, prompt, 17, k ? &rw : NULL, &err);
            if (t9[k][r] < 0 || t17[k][r] < 0) {
                fprintf(stderr, "bench_snapshots: %s\n", err.msg);
                return 1;
            }
        }
    for (int n = 9; n <= 17; n += 8) {
        double (*t)[MAX_REPS] = n == 9 ? t9 : t17, ratio[MAX_REPS];
        for (int r = 0; r < reps; r++) ratio[r] = t[1][r] / t[0][r];
        const double lo_on = median(t[0], reps), hi_on = median(t[1], reps), rm = median(ratio, reps);
        printf("exact batch of %2d: %.2f ms without snapshots, %.2f ms with (median of rounds' ratios %.3fx, %.3f-%.3fx)\n",
               n, lo_on * 1e3, hi_on * 1e3, rm, ratio[0], ratio[reps - 1]);
    }
    printf("rewind into the batch (a restore): %.3f ms on average\n", rw / (2.0 * reps) * 1e3);

    // speculative decoding on the hybrid model (snapshots on: a rejected draft is rewound), oracle drafts
    static const int corrupt[3] = {0, 4, 2};
    double tp[MAX_REPS], tn[3][MAX_REPS], rr[3][MAX_REPS];
    int32_t ref[N_GEN], out[N_GEN];
    rg_spec_stats ss[3] = {{0}};
    bool same = true;
    for (int r = 0; r < reps; r++) {
        tp[r] = generate(off, prompt, NULL, 0, ref, NULL, &err);
        for (int c = 0; c < 3 && tp[r] > 0; c++) {
            tn[c][r] = generate(on, prompt, ref, corrupt[c], out, &ss[c], &err);
            if (tn[c][r] < 0) break;
            rr[c][r] = tn[c][r] / tp[r];
            same = same && !memcmp(ref, out, sizeof ref);
        }
        if (tp[r] < 0 || tn[0][r] < 0 || tn[1][r] < 0 || tn[2][r] < 0) {
            fprintf(stderr, "bench_snapshots: %s\n", err.msg);
            return 1;
        }
    }
    printf("generation of %d tokens without a draft: %.1f tok/s (snapshots off)\n", N_GEN, median(tp, reps));
    for (int c = 0; c < 3; c++) {
        const double mn = median(tn[c], reps), mr = median(rr[c], reps);
        char what[32];
        if (corrupt[c]) snprintf(what, sizeof what, "one in %d wrong", corrupt[c]);
        else snprintf(what, sizeof what, "all right");
        printf("  oracle drafts, %-15s %6.1f tok/s, %.2fx (rounds %.2f-%.2fx); %lld of %lld accepted (%.1f%%) in "
               "%lld batches\n", what, mn, mr, rr[c][0], rr[c][reps - 1], (long long)ss[c].n_accepted,
               (long long)ss[c].n_drafted, ss[c].n_drafted ? 100.0 * (double)ss[c].n_accepted / (double)ss[c].n_drafted : 0.0,
               (long long)ss[c].n_steps);
    }
    printf("greedy tokens with speculation: %s\n", same ? "identical" : "DIFFER");
    rg_session_free(off), rg_session_free(on);
    rg_model_free(m);
    if (!cache) unlink(path);
    return same ? 0 : 1;
}
