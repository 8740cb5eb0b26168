// ops_parity_bounds.h - the bounds of test_ops' cuda_parity (test_ops.c): how far the CUDA
// kernels may be from the CPU's on each row, derived from the op's rounding error instead of
// one number for all backward rows. Included by test_ops.c after the rows (it uses tcase).
//
// Both backends compute in f32 from the same inputs and each is within the op's error bound
// of the exact value, so they differ by at most twice that bound:
//   a sum of K terms        |err| <= gamma_K sum|t|, gamma_K = K u / (1 - K u), u = 2^-24
//                           (Higham, Accuracy and Stability, 3.1); a product of two such
//                           sums (a dot, then a sum of those) adds the lengths;
//   one rounded operation   u relative (+, -, *, /, sqrt, fma: one rounding each);
//   a CUDA math function    its maximum ulp error against the correctly rounded value (CUDA
//                           C Programming Guide, "Mathematical Functions", single precision:
//                           expf 2, logf 1, log1pf 1, tanhf 2, erff 2), plus the half ulp of
//                           that rounding; glibc's float functions are within 1 ulp.
// A chain of such steps adds up: an op's bound is "K units of u", K written per op below
// (bwd_terms, fwd_terms), beside the reasoning. The backward rows are measured norm-wise, the
// largest |g_cuda - g_cpu| over the largest |g_cpu| (a gradient element of a sum with
// cancellation is small against the terms; the norm-wise scale keeps the bound from
// vanishing there). A gradient stored in F16/BF16 adds one ulp of its type (2u_half: the two
// backends' f32 values may round to neighbours).
//
// The rows print error / bound ("ratio"), fail above 1, and the suite prints the headroom
// (bound / error) over the rows, so a bound that has become loose or tight shows.
#ifndef RG_TESTS_OPS_PARITY_BOUNDS_H
#define RG_TESTS_OPS_PARITY_BOUNDS_H

#define PARITY_U 0x1p-24  // the f32 unit roundoff

// The CUDA math library's maximum ulp errors (CUDA C Programming Guide), plus the half ulp of
// the correctly rounded value they are measured from, plus glibc's 1 ulp on the CPU side: the
// most two implementations of the function differ, in ulps (1 ulp <= 2u relative).
#define ULPS_EXPF (2.0 + 0.5 + 1.0)
#define ULPS_LOGF (1.0 + 0.5 + 1.0)
#define ULPS_LOG1PF (1.0 + 0.5 + 1.0)
#define ULPS_TANHF (2.0 + 0.5 + 1.0)
#define ULPS_ERFF (2.0 + 0.5 + 1.0)

static double parity_gamma(double k) { return k * PARITY_U / (1 - k * PARITY_U); }

static int64_t pb_nel(const tin *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
static int64_t pb_out_nel(const tcase *c) { return c->out_ne[0] * c->out_ne[1] * c->out_ne[2] * c->out_ne[3]; }

// The most output elements that one element of a trained input reaches (a broadcast's
// gradient sums that many terms): out elements / the smallest trained input.
static double pb_fan_in(const tcase *c) {
    double f = 1;
    for (int k = 0; k < c->n_in; k++)
        if (c->in[k].param && pb_nel(&c->in[k]) > 0) f = fmax(f, (double)pb_out_nel(c) / (double)pb_nel(&c->in[k]));
    return f;
}

// FLASH_ATTN_EXT / _BACK's lengths: head dim, keys, and the queries one key meets (T G).
static void pb_flash_dims(const tcase *c, double *Dh, double *Tk, double *TG) {
    const int first = c->ip[5] > 0 ? (int)c->ip[5] : 0;  // FLASH_ATTN_BACK: d is input 0
    const tin *q = &c->in[first], *k = &c->in[first + 1];
    *Dh = (double)k->ne[0], *Tk = (double)k->ne[1];
    *TG = (double)pb_nel(q) * *Tk / (double)pb_nel(k);
}

// K of the backward rows: the units of u in one gradient element, on the gradient's scale.
static double bwd_terms(rg_op op, const tcase *c) {
    const double row = (double)c->out_ne[0], fan = pb_fan_in(c);
    switch (op) {
    case RG_OP_MUL_MAT:  // dX sums M = out rows' length, dW sums N (and the broadcast) terms
        return fmax(row, (double)pb_out_nel(c) / row) + 2;
    case RG_OP_RMS_NORM:  // sum of x^2 and of x dy over the row (2 row), rsqrt, 6 ops a term
        return 2 * row + 10;
    case RG_OP_ROPE:  // a rotation: 2 products and a sum per element, cos/sin rounded once
        return 6;
    case RG_OP_SOFT_MAX:  // y = exp / sum (row, expf), dx = y (dy - sum y dy) (row); softcap: tanhf
        return 2 * row + ULPS_EXPF + ULPS_TANHF + 8;
    case RG_OP_SILU: case RG_OP_SWIGLU: case RG_OP_GELU: case RG_OP_SOFTCAP:
        // sigmoid / erf / tanh (<= 3.5 ulp each, twice: the value and the slope) and ~6 products
        return 2 * (ULPS_EXPF + ULPS_ERFF + ULPS_TANHF) + 12;
    case RG_OP_CROSS_ENTROPY_LOSS:  // log-sum-exp over the row, softmax - one-hot, mean over rows
        return 2 * row + ULPS_EXPF + ULPS_LOGF + (double)c->out_ne[1] + 8;
    case RG_OP_LINEAR_CE: {  // logits: dots of d; lse over V; dh sums V terms, dW sums T terms
        const double d = (double)c->in[1].ne[0], V = (double)c->in[0].ne[1], T = (double)c->in[1].ne[1];
        return d + 2 * V + T + ULPS_EXPF + ULPS_LOGF + 8;
    }
    case RG_OP_FLASH_ATTN_EXT: {  // scores (Dh), P = exp(s - lse), dS = P (dO.v (Dh) - D (Dh)),
        double Dh, Tk, TG;        // dQ sums Tk keys, dK and dV sum T G queries; softcap: tanhf
        pb_flash_dims(c, &Dh, &Tk, &TG);
        return fmax(Tk, TG) + 3 * Dh + ULPS_EXPF + ULPS_TANHF + 8;
    }
    case RG_OP_SSM_CONV:  // dc sums tokens x sequences, dx the K taps
    case RG_OP_SSM_SCAN:  // the recurrence: each state's error carried through every token
        return fan * (double)c->out_ne[1] + row + 8;
    default:  // additive ops, copies, sums, repeats, get_rows: the gradient of an element sums
              // the outputs it reaches (a broadcast), times w, a scale or 1/n
        return fan + 2;
    }
}

// K of the forward rows whose bound is derived here (< 0: the op table's bound stands).
static double fwd_terms(rg_op op, const tcase *c) {
    double Dh, Tk, TG;
    switch (op) {
    case RG_OP_FLASH_ATTN_EXT:  // s = scale q.k (Dh), exp (and tanhf), l sums Tk, o = P v / l (Tk)
        pb_flash_dims(c, &Dh, &Tk, &TG);
        return 2 * Tk + Dh + ULPS_EXPF + ULPS_LOGF + ULPS_TANHF + 4;
    case RG_OP_ATTN_DECODE: {  // like flash: scores of Dh, exp, sums of n_kv (cache_k: [Dh, C, Hkv], ip[0] n_kv)
        const double n_kv = (double)c->ip[0], dh = (double)c->in[0].ne[0];
        return 2 * n_kv + dh + ULPS_EXPF + ULPS_LOGF + 4;
    }
    case RG_OP_SOFT_MAX:  // scale, mask, softcap (tanhf), - max, expf, a sum of the row, one division
        return (double)c->in[0].ne[0] + ULPS_EXPF + ULPS_TANHF + 4;
    case RG_OP_LINEAR_CE: {  // logits: dots of d; lse: expf over V, logf; the loss: the mean over T
        const double d = (double)c->in[1].ne[0], V = (double)c->in[0].ne[1], T = (double)c->in[1].ne[1];
        return d + V + T + ULPS_EXPF + ULPS_LOGF + 4;
    }
    case RG_OP_FLASH_ATTN_BACK:  // the EXT backward's chain (bwd_terms above)
        pb_flash_dims(c, &Dh, &Tk, &TG);
        return fmax(Tk, TG) + 3 * Dh + ULPS_EXPF + ULPS_TANHF + 8;
    default:
        return -1;
    }
}

// SSM_DT, per element in ulps (the CUDA kernel's own f32 code, ops_ssm.cu ssm_dt_f32, against
// the CPU's double rule rounded once): step = log1pf(expf(dt)) carries expf's and log1pf's
// (d log1p(y) / log1p(y) <= dy / y); slope = 1 / (1 + expf(-dt)) expf's plus 2 roundings (or
// e / (1 + e): e's twice, the sum's and the division's); decay = expf(step A) expf's plus the
// product's and |step A| times step's (exp's argument carries step's relative error as an
// absolute one). Above 20 step and slope are exact. dt and A are the row's inputs 0 and 1.
static double ssm_dt_ulps(const tcase *c, const double *const *x, int64_t i) {
    const int64_t H = c->out_ne[0], HTS = H * c->out_ne[1] * c->out_ne[2];
    const int64_t j = i % HTS, part = i / HTS, h = j % H;
    const double dt = x[0][j], A = x[1][h];
    const double step_ulps = dt > 20 ? 0 : ULPS_EXPF + ULPS_LOG1PF + 1;
    if (part == 0) return step_ulps;
    if (part == 2) return dt > 20 ? 0 : 2 * ULPS_EXPF + 3;
    const double s = dt > 20 ? dt : log1p(exp(dt));
    return ULPS_EXPF + 1 + fabs(s * A) * (step_ulps + 1);
}

#endif
