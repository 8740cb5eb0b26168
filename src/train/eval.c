// eval.c - see eval.h.
#include "train/eval.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "model/lora.h"
#include "text/chat.h"
#include "text/tokenizer.h"

rg_status rg_eval_load_data(rg_dataset **out, const rg_model *m, const char *path, const char *eval_path,
                            const rg_train_spec *spec, FILE *log, rg_error *err) {
    *out = NULL;
    const rg_train_config *c = &spec->cfg;
    rg_tokenizer *tok = NULL;
    rg_status st = rg_tokenizer_load(&tok, m->file, err);
    if (st) return st;
    rg_chat_template tmpl;
    rg_error e2 = {0};
    if (c->chat_template != RG_CHAT_TMPL_MODEL) {  // a built-in layout, with the model's BOS text
        const rg_tokenizer_info *in = rg_tokenizer_get_info(tok);
        st = rg_chat_template_builtin(&tmpl, rg_train_chat_template_name(c->chat_template),
                                      in->bos >= 0 ? rg_token_text(tok, in->bos, NULL) : NULL, err);
        if (st) {
            rg_tokenizer_free(tok);
            return st;
        }
    } else {
        st = rg_chat_template_from_tokenizer(&tmpl, tok, &e2);
    }
    const bool have_tmpl = st == RG_OK;
    if (st != RG_OK && st != RG_ERR_NOT_FOUND && log)
        fprintf(log, "note: the model's chat template is not usable: %s\n", e2.msg);
    rg_data_opts dopt = {.ctx = c->ctx,
                         .train_on = (rg_data_train_on)c->train_on,
                         .pack = c->pack,
                         .overlong = (rg_data_overlong)c->overlong,
                         .eval_split = eval_path ? 0.0 : c->eval_split,
                         .seed = c->seed};
    st = rg_dataset_load(out, path, tok, have_tmpl ? &tmpl : NULL, &dopt, err);
    rg_dataset *ev = NULL;
    if (!st && eval_path) st = rg_dataset_load(&ev, eval_path, tok, have_tmpl ? &tmpl : NULL, &dopt, err);
    if (!st && eval_path) st = rg_dataset_set_eval(*out, ev, eval_path, err);  // takes ev
    if (st) {
        rg_dataset_free(*out);
        *out = NULL;
    }
    if (have_tmpl) rg_chat_template_free(&tmpl);
    rg_tokenizer_free(tok);
    return st;
}

rg_status rg_eval_rows(rg_train_state *s, const rg_dataset *d, int split, int64_t max_rows, double *mean_loss,
                       int64_t *n_targets, rg_error *err) {
    *mean_loss = NAN;
    if (n_targets) *n_targets = 0;
    int64_t n = rg_dataset_n_rows(d, split);
    if (max_rows > 0 && n > max_rows) n = max_rows;
    if (n <= 0) return RG_OK;
    const size_t T = (size_t)s->ctx;
    int32_t *ids = malloc(4 * T), *labels = malloc(4 * T), *pos = malloc(4 * T), *seg = malloc(4 * T);
    rg_status st = ids && labels && pos && seg ? RG_OK : rg_fail(err, RG_ERR_NOMEM, "eval: out of memory");
    double sum = 0.0;
    int64_t cnt = 0;
    for (int64_t k = 0; k < n && !st; k++) {
        rg_dataset_row(d, split, 0, k, ids, labels, pos, seg);
        double l = 0;
        int64_t c = 0;
        st = rg_train_state_eval_row(s, ids, labels, pos, seg, &l, &c, err);
        if (!st && !isfinite(l))
            st = rg_fail(err, RG_ERR_NONFINITE, "eval: the loss of row %lld is not finite", (long long)k);
        sum += l, cnt += c;
    }
    free(ids), free(labels), free(pos), free(seg);
    if (st) return st;
    *mean_loss = cnt ? sum / (double)cnt : NAN;
    if (n_targets) *n_targets = cnt;
    return RG_OK;
}

rg_status rg_eval_file(const char *model_path, const char *adapter_path, float user_scale, const char *data_path,
                       const rg_train_spec *spec, double *mean_loss, int64_t *n_targets, rg_error *err) {
    *mean_loss = NAN;
    rg_train_spec sp = *spec;
    sp.cfg.eval_split = 0;  // in range: still a checked spec
    rg_model *m = NULL;
    rg_lora *l = NULL;
    rg_dataset *d = NULL;
    rg_train_state *s = NULL;
    rg_status st = rg_model_load(&m, model_path, err);
    if (!st && adapter_path) st = rg_lora_load(&l, adapter_path, m, err);
    if (!st) st = rg_eval_load_data(&d, m, data_path, NULL, &sp, NULL, err);
    if (!st) {
        st = rg_train_state_create_eval(&s, m, &sp, l, user_scale, err);  // owns l from here
        l = NULL;
    }
    if (!st) st = rg_eval_rows(s, d, 0, 0, mean_loss, n_targets, err);
    rg_train_state_free(s);
    rg_dataset_free(d);
    rg_lora_free(l);
    rg_model_free(m);
    return st;
}
