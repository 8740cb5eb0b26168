// lora_stack.c - several adapters folded into one of the summed rank (see lora_stack.h).
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/lora_stack.h"

rg_status rg_lora_stack(rg_lora **out, rg_lora *const *ls, const float *scales, int n, rg_error *err) {
    *out = NULL;
    if (n < 1) return rg_fail(err, RG_ERR_ARG, "lora: no adapter to stack");
    const int64_t n_layer = ls[0]->n_layer;
    int64_t rank = 0;
    uint32_t targets = 0;
    for (int i = 0; i < n; i++) {
        if (ls[i]->n_layer != n_layer)
            return rg_fail(err, RG_ERR_ARG, "lora: adapter %d has %lld layers, adapter 1 has %lld", i + 1,
                           (long long)ls[i]->n_layer, (long long)n_layer);
        if (ls[i]->arch != ls[0]->arch)
            return rg_fail(err, RG_ERR_ARG, "lora: adapter %d is for %s, adapter 1 for %s", i + 1,
                           ls[i]->arch ? ls[i]->arch->name : "?", ls[0]->arch ? ls[0]->arch->name : "?");
        rank += ls[i]->rank;
        targets |= ls[i]->targets;
    }
    // Each pair's shape comes from the first adapter that has it; the others must agree.
    const int64_t n_pair = n_layer * RG_LORA_N_TARGETS;
    for (int64_t p = 0; p < n_pair; p++) {
        const rg_lora_pair *first = NULL;
        int first_i = 0;
        for (int i = 0; i < n; i++) {
            const rg_lora_pair *q = &ls[i]->pairs[p];
            if (!q->a) continue;
            if (!first) {
                first = q, first_i = i;
            } else if (q->n_in != first->n_in || q->n_out != first->n_out) {
                return rg_fail(err, RG_ERR_ARG, "lora: '%s' is [%lld, %lld] in adapter %d but [%lld, %lld] in adapter %d",
                               q->name, (long long)first->n_in, (long long)first->n_out, first_i + 1,
                               (long long)q->n_in, (long long)q->n_out, i + 1);
            }
        }
    }
    rg_lora *l = calloc(1, sizeof *l);
    if (l) l->pairs = calloc((size_t)(n_pair > 0 ? n_pair : 1), sizeof *l->pairs);
    if (!l || !l->pairs) {
        free(l);
        return rg_fail(err, RG_ERR_NOMEM, "lora: out of memory stacking %d adapters", n);
    }
    l->rank = rank, l->alpha = (float)rank, l->targets = targets, l->n_layer = n_layer, l->arch = ls[0]->arch;
    for (int64_t p = 0; p < n_pair; p++) {
        const rg_lora_pair *shape = NULL;
        for (int i = 0; i < n && !shape; i++)
            if (ls[i]->pairs[p].a) shape = &ls[i]->pairs[p];
        if (!shape) continue;
        rg_lora_pair *d = &l->pairs[p];
        memcpy(d->name, shape->name, sizeof d->name);
        d->n_in = shape->n_in, d->n_out = shape->n_out;
        d->a = calloc((size_t)(d->n_in * rank), sizeof(float));  // [n_in, rank]: rank rows of n_in
        d->b = calloc((size_t)(rank * d->n_out), sizeof(float));  // [rank, n_out]: n_out rows of rank
        if (!d->a || !d->b) {
            rg_lora_free(l);
            return rg_fail(err, RG_ERR_NOMEM, "lora: out of memory stacking '%s'", shape->name);
        }
        int64_t r0 = 0;  // first stacked rank row of adapter i
        for (int i = 0; i < n; i++) {
            const rg_lora_pair *q = &ls[i]->pairs[p];
            const int64_t r = ls[i]->rank;
            if (q->a) {
                const float s = rg_lora_scale(ls[i], scales[i]);
                memcpy(d->a + r0 * d->n_in, q->a, sizeof(float) * (size_t)(r * d->n_in));
                for (int64_t o = 0; o < d->n_out; o++)
                    for (int64_t k = 0; k < r; k++) d->b[o * rank + r0 + k] = s * q->b[o * r + k];
            }
            r0 += r;
        }
    }
    *out = l;
    return RG_OK;
}
