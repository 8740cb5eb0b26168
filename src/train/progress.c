// progress.c - see progress.h.
#include "train/progress.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"

static void fmt_time(char *buf, size_t cap, double s) {
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

void rg_progress_init(rg_progress *p, FILE *f, int mode, int64_t total_steps) {
    memset(p, 0, sizeof *p);
    p->f = f;
    p->mode = mode;
    p->total = total_steps;
    p->every = total_steps > 50 ? total_steps / 50 : 1;
}

void rg_progress_step(rg_progress *p, const rg_step_record *r, double eta_s) {
    if (!p->mode || !p->f) return;
    if (!r->skipped && isfinite(r->loss)) {
        p->ema_loss = p->have_ema ? 0.9 * p->ema_loss + 0.1 * r->loss : r->loss;
        p->have_ema = true;
    }
    char eta[32], el[32], ev[48] = "";
    fmt_time(eta, sizeof eta, eta_s);
    fmt_time(el, sizeof el, r->elapsed_s);
    if (isfinite(r->eval_loss)) snprintf(ev, sizeof ev, " eval %.4f", r->eval_loss);
    if (p->mode == 1) {
        const int width = 24;
        int filled = p->total > 0 ? (int)((double)width * (double)r->iter / (double)p->total) : 0;
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
        bar[width] = 0;
        fprintf(p->f, "\r\033[K%lld/%lld [%s] loss %.4f (avg %.4f)%s lr %.2e %.0f tok/s %s ETA %s%s",
                (long long)r->iter, (long long)p->total, bar, r->loss, p->ema_loss, ev, r->lr, r->tokens_per_s, el, eta,
                r->skipped ? " SKIPPED" : "");
        if (isfinite(r->eval_loss)) fprintf(p->f, "\n");
        fflush(p->f);
    } else if (r->iter % p->every == 0 || r->iter == p->total || r->iter == 1 || r->skipped || isfinite(r->eval_loss)) {
        fprintf(p->f, "step %lld/%lld loss %.4f%s lr %.3e grad_norm %.3f %.0f tok/s elapsed %s ETA %s%s\n",
                (long long)r->iter, (long long)p->total, r->loss, ev, r->lr, r->grad_norm, r->tokens_per_s, el, eta,
                r->skipped ? " (skipped: loss or gradient not finite)" : "");
        fflush(p->f);
    }
}

void rg_progress_end(rg_progress *p) {
    if (p->mode == 1 && p->f) {
        fprintf(p->f, "\n");
        fflush(p->f);
    }
}

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fprintf(f, "null");
}

void rg_step_record_write(FILE *f, const rg_step_record *r) {
    fprintf(f, "{\"iter\":%lld,\"step\":%lld,\"epoch\":%lld,\"loss\":", (long long)r->iter, (long long)r->t,
            (long long)r->epoch);
    json_num(f, r->loss);
    fprintf(f, ",\"lr\":");
    json_num(f, r->lr);
    fprintf(f, ",\"grad_norm\":");
    json_num(f, r->grad_norm);
    fprintf(f, ",\"tokens\":%lld,\"targets\":%lld,\"tokens_per_s\":", (long long)r->tokens, (long long)r->targets);
    json_num(f, r->tokens_per_s);
    fprintf(f, ",\"elapsed_s\":");
    json_num(f, r->elapsed_s);
    fprintf(f, ",\"rss_mib\":");
    json_num(f, r->rss_mib);
    fprintf(f, ",\"skipped\":%s", r->skipped ? "true" : "false");
    if (isfinite(r->eval_loss)) {
        fprintf(f, ",\"eval_loss\":");
        json_num(f, r->eval_loss);
    }
    fprintf(f, "}\n");
}

// The integer after "key": in a line, or -1.
static int64_t line_int(const char *line, const char *key) {
    const char *p = strstr(line, key);
    return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

static double line_num(const char *line, const char *key) {
    const char *p = strstr(line, key);
    if (!p) return NAN;
    p += strlen(key);
    if (!strncmp(p, "null", 4)) return NAN;
    return strtod(p, NULL);
}

rg_status rg_jsonl_truncate(const char *path, int64_t iter, rg_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? RG_OK : rg_fail(err, RG_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long keep = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] != '\n') break;  // a torn last line (the run was killed mid-write)
        int64_t it = line_int(line, "\"iter\":");
        if (it < 0 || it > iter) break;
        keep = ftell(f);
    }
    free(line);
    fclose(f);
    if (truncate(path, keep) != 0) return rg_fail(err, RG_ERR_IO, "cannot truncate %s: %s", path, strerror(errno));
    return RG_OK;
}

int64_t rg_jsonl_read_losses(const char *path, int64_t **iters, double **loss, double **eval_loss) {
    *iters = NULL, *loss = NULL, *eval_loss = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    int64_t n = 0, n_cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (n == n_cap) {
            n_cap = n_cap ? 2 * n_cap : 256;
            int64_t *i2 = realloc(*iters, sizeof **iters * (size_t)n_cap);
            if (i2) *iters = i2;
            double *l2 = realloc(*loss, sizeof **loss * (size_t)n_cap);
            if (l2) *loss = l2;
            double *e2 = realloc(*eval_loss, sizeof **eval_loss * (size_t)n_cap);
            if (e2) *eval_loss = e2;
            if (!i2 || !l2 || !e2) break;
        }
        (*iters)[n] = line_int(line, "\"iter\":");
        (*loss)[n] = line_num(line, "\"loss\":");
        (*eval_loss)[n] = line_num(line, "\"eval_loss\":");
        n++;
    }
    free(line);
    fclose(f);
    return n;
}

// ---------------------------------------------------------------------------
// The plot: a 720x400 SVG, steps on x, loss on y (linear), a polyline for the
// training loss and dots for the eval loss.
static double nice_step(double range) {
    double e = pow(10.0, floor(log10(range > 0 ? range : 1.0)));
    double f = range / e;
    return (f < 2 ? 0.2 : f < 5 ? 0.5 : 1.0) * e;
}

rg_status rg_loss_plot_write(const char *path, const int64_t *iters, const double *loss, const double *eval_loss, int64_t n,
                             const char *title, rg_error *err) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return rg_fail(err, RG_ERR_NOMEM, "loss plot: out of memory");
    const double W = 720, H = 400, L = 60, R = 20, T = 40, B = 50;
    double lo = INFINITY, hi = -INFINITY;
    int64_t x0 = INT64_MAX, x1 = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            double v = k ? eval_loss[i] : loss[i];
            if (isfinite(v)) lo = v < lo ? v : lo, hi = v > hi ? v : hi;
        }
        x0 = iters[i] < x0 ? iters[i] : x0, x1 = iters[i] > x1 ? iters[i] : x1;
    }
    if (!isfinite(lo)) lo = 0, hi = 1;
    if (hi - lo < 1e-6) hi = lo + 1e-3, lo -= 1e-3;
    if (x0 == INT64_MAX) x0 = 0, x1 = 1;
    if (x1 == x0) x1 = x0 + 1;
    double ys = nice_step((hi - lo) / 5), xs = nice_step((double)(x1 - x0) / 6);
    lo = floor(lo / ys) * ys, hi = ceil(hi / ys) * ys;
#define PX(x) (L + ((double)(x) - (double)x0) / (double)(x1 - x0) * (W - L - R))
#define PY(y) (T + (hi - (y)) / (hi - lo) * (H - T - B))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">", W / 2);
    for (const char *c = title; c && *c; c++) {
        if (*c == '<') fputs("&lt;", f);
        else if (*c == '&') fputs("&amp;", f);
        else fputc(*c, f);
    }
    fprintf(f, "</text>\n");
    for (double y = lo; y <= hi + ys / 2; y += ys)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n",
                L, PY(y), W - R, PY(y), L - 6, PY(y) + 4, y);
    for (double x = ceil((double)x0 / xs) * xs; x <= (double)x1; x += xs)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n",
                PX(x), T, PX(x), H - B, PX(x), H - B + 16, x);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n", (L + W - R) / 2, H - 12);
    fprintf(f, "<text x=\"14\" y=\"%.0f\" transform=\"rotate(-90 14 %.0f)\" text-anchor=\"middle\">loss</text>\n", (T + H - B) / 2,
            (T + H - B) / 2);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"");
    for (int64_t i = 0; i < n; i++)
        if (isfinite(loss[i])) fprintf(f, "%.1f,%.1f ", PX(iters[i]), PY(loss[i]));
    fprintf(f, "\"/>\n");
    for (int64_t i = 0; i < n; i++)
        if (isfinite(eval_loss[i]))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#d62728\"/>\n", PX(iters[i]), PY(eval_loss[i]));
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#1f77b4\">train loss</text><text x=\"%.0f\" y=\"%.0f\" fill=\"#d62728\">eval loss</text>\n",
            W - R - 170, T + 14, W - R - 80, T + 14);
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    fclose(f);
    rg_status st = rg_atomic_write_file(path, buf, len, err);
    free(buf);
    return st;
}

double rg_rss_mib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long size = 0, rss = 0;
    int ok = fscanf(f, "%ld %ld", &size, &rss) == 2;
    fclose(f);
    return ok ? (double)rss * (double)sysconf(_SC_PAGE_SIZE) / 1048576.0 : 0;
}

double rg_peak_rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0;  // KiB on Linux
}
