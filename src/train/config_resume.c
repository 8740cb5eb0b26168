// config_resume.c - see config_resume.h.
#include "train/config_resume.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "train/config.h"

#define COMPUTE_LINE "training.compute_dtype: "

// The line of text that starts with prefix, or NULL.
static const char *find_line(const char *text, const char *prefix) {
    const size_t n = strlen(prefix);
    for (const char *l = text; l && *l;) {
        if (strncmp(l, prefix, n) == 0) return l;
        l = strchr(l, '\n');
        if (l) l++;
    }
    return NULL;
}

void rg_train_config_text_resolve(char *text, size_t cap, int resolved_dtype) {
    char *l = (char *)find_line(text, COMPUTE_LINE);
    if (!l) return;
    const char *end = strchr(l, '\n');
    char *rest = strdup(end ? end : "");
    if (!rest) return;
    snprintf(l, cap - (size_t)(l - text), COMPUTE_LINE "%s%s", resolved_dtype == RG_COMPUTE_BF16 ? "bf16" : "f32",
             rest);
    free(rest);
}

// The first line that differs between two config texts.
static void first_difference(const char *a, const char *b, char *out, size_t cap) {
    while (*a || *b) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
        if (la != lb || memcmp(a, b, la) != 0) {
            snprintf(out, cap, "checkpoint has '%.*s', this run has '%.*s'", (int)la, a, (int)lb, b);
            return;
        }
        a += la + (ea ? 1 : 0), b += lb + (eb ? 1 : 0);
    }
    snprintf(out, cap, "no difference");
}

rg_status rg_train_resume_config_check(const char *saved, const char *now, const char *products, const char *dir,
                                       rg_error *err) {
    const char *line = find_line(now, COMPUTE_LINE);
    char *cmp = NULL;
    if (line && !find_line(saved, COMPUTE_LINE)) {  // written before training.compute_dtype: F32 products
        if (strncmp(line + strlen(COMPUTE_LINE), "f32\n", 4) != 0)
            return rg_fail(err, RG_ERR_ARG,
                           "resume: %s was written with F32 products (before training.compute_dtype), this run's are "
                           "%s; resume with training.compute_dtype=f32 (or train --exact)",
                           dir, products);
        cmp = strdup(now);  // compare without the line the checkpoint cannot have
        if (!cmp) return rg_fail(err, RG_ERR_NOMEM, "resume: no memory to compare the configs");
        char *l = cmp + (line - now), *end = strchr(l, '\n');
        memmove(l, end + 1, strlen(end + 1) + 1);
        now = cmp;
    }
    rg_status st = RG_OK;
    if (strcmp(saved, now) != 0) {
        char diff[600];
        first_difference(saved, now, diff, sizeof diff);
        st = rg_fail(err, RG_ERR_ARG, "resume: the config differs from the checkpoint's (%s); resume with the same "
                                      "settings, or start a new OUTDIR", diff);
    }
    free(cmp);
    return st;
}
