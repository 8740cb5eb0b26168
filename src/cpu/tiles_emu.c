// tiles_emu.c - the AMX tile instructions in C (tiles.h): a register file per thread (8 tiles of
// 16 rows x 64 bytes and the configuration), the hardware's refusals checked on every
// instruction, TDPBF16PS and TDPBUSD computed as the Intel SDM's pseudo-code does.
#include "cpu/tiles.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WINDOWS 16

typedef struct emu_window {
    uintptr_t lo, hi;  // [lo, hi)
} emu_window;

typedef struct emu_state {
    int configured;
    uint8_t rows[RG_TILE_COUNT];
    uint16_t colsb[RG_TILE_COUNT];
    int n_windows;
    emu_window win[MAX_WINDOWS];
    _Alignas(64) uint8_t t[RG_TILE_COUNT][RG_TILE_MAX_ROWS][RG_TILE_MAX_COLSB];
} emu_state;

static _Thread_local emu_state st;

// ---------------------------------------------------------------------------
// Refusals.

static void default_hook(void *user, const char *file, int line, rg_tile_rule rule, const char *message) {
    (void)user;
    fprintf(stderr, "%s:%d: emulated AMX tiles refuse this (%s): %s\n", file, line, rg_tile_rule_name(rule), message);
    abort();
}

static _Atomic(rg_tile_fault_fn) hook_fn = default_hook;
static _Atomic(void *) hook_user = NULL;

void rg_tile_set_fault_hook(rg_tile_fault_fn fn, void *user) {
    atomic_store(&hook_user, user);
    atomic_store(&hook_fn, fn ? fn : default_hook);
}

const char *rg_tile_rule_name(rg_tile_rule rule) {
    static const char *names[RG_TILE_RULE_COUNT] = {
        "none", "palette", "reserved", "shape", "unconfigured", "tile_unused", "register", "dp_same",
        "dp_colsb", "dp_rows", "dp_k", "dp_n", "bounds", "reconfig", "release", "not_released"};
    return (unsigned)rule < RG_TILE_RULE_COUNT ? names[rule] : "?";
}

static void fault(const char *file, int line, rg_tile_rule rule, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rg_tile_fault_fn fn = atomic_load(&hook_fn);
    fn(atomic_load(&hook_user), file, line, rule, msg);
}

// A tile operand: the number in range, a configuration held, the tile configured (not 0 x 0).
static int tile_ok(int t, const char *what, const char *file, int line) {
    if (t < 0 || t >= RG_TILE_COUNT) {
        fault(file, line, RG_TILE_RULE_REGISTER, "%s: tmm%d does not exist (tmm0-tmm7)", what, t);
        return 0;
    }
    if (!st.configured) {
        fault(file, line, RG_TILE_RULE_UNCONFIGURED, "%s tmm%d with no tile configuration loaded", what, t);
        return 0;
    }
    if (st.rows[t] == 0) {
        fault(file, line, RG_TILE_RULE_TILE_UNUSED, "%s tmm%d, which the configuration leaves at 0 rows", what, t);
        return 0;
    }
    return 1;
}

// Every row [base + r * stride, + colsb) of tile t inside some declared window (none declared:
// nothing to check).
static int bounds_ok(int t, const void *base, size_t stride, const char *what, const char *file, int line) {
    if (st.n_windows == 0) return 1;
    for (int r = 0; r < st.rows[t]; r++) {
        const uintptr_t lo = (uintptr_t)base + (uintptr_t)r * stride, hi = lo + st.colsb[t];
        int inside = 0;
        for (int w = 0; w < st.n_windows && !inside; w++) inside = lo >= st.win[w].lo && hi <= st.win[w].hi;
        if (!inside) {
            fault(file, line, RG_TILE_RULE_BOUNDS,
                  "%s tmm%d: row %d (bytes %p..+%u, stride %zu) lies outside every declared buffer", what, t, r,
                  (void *)lo, (unsigned)st.colsb[t], stride);
            return 0;
        }
    }
    return 1;
}

static void zero_tiles(void) { memset(st.t, 0, sizeof st.t); }

// ---------------------------------------------------------------------------
// Configuration.

void rg_tile_emu_loadconfig(const void *cfgp, const char *file, int line) {
    rg_tile_config cfg;
    memcpy(&cfg, cfgp, sizeof cfg);
    if (st.configured) {
        fault(file, line, RG_TILE_RULE_RECONFIG, "LDTILECFG while a configuration is held (no TILERELEASE since)");
        return;
    }
    if (cfg.palette_id == 0) return;  // the init state: nothing configured, nothing held
    if (cfg.palette_id != 1) {
        fault(file, line, RG_TILE_RULE_PALETTE, "LDTILECFG with palette %u (only 1 exists)", (unsigned)cfg.palette_id);
        return;
    }
    if (cfg.start_row != 0) {
        fault(file, line, RG_TILE_RULE_RESERVED, "LDTILECFG with start_row %u (our kernels never restart a load)",
              (unsigned)cfg.start_row);
        return;
    }
    for (int i = 0; i < 14; i++)
        if (cfg.reserved[i]) {
            fault(file, line, RG_TILE_RULE_RESERVED, "LDTILECFG with reserved byte %d = %u", i + 2,
                  (unsigned)cfg.reserved[i]);
            return;
        }
    for (int t = RG_TILE_COUNT; t < 16; t++)
        if (cfg.rows[t] || cfg.colsb[t]) {
            fault(file, line, RG_TILE_RULE_RESERVED, "LDTILECFG configures tile %d (palette 1 has 8)", t);
            return;
        }
    for (int t = 0; t < RG_TILE_COUNT; t++) {
        if (cfg.rows[t] > RG_TILE_MAX_ROWS || cfg.colsb[t] > RG_TILE_MAX_COLSB || (cfg.rows[t] == 0) != (cfg.colsb[t] == 0)) {
            fault(file, line, RG_TILE_RULE_SHAPE, "LDTILECFG: tmm%d of %u rows x %u bytes (at most 16 x 64, both 0 or neither)",
                  t, (unsigned)cfg.rows[t], (unsigned)cfg.colsb[t]);
            return;
        }
    }
    for (int t = 0; t < RG_TILE_COUNT; t++) st.rows[t] = cfg.rows[t], st.colsb[t] = cfg.colsb[t];
    st.configured = 1;
    st.n_windows = 0;
    zero_tiles();
}

void rg_tile_emu_release(const char *file, int line) {
    if (!st.configured) {
        fault(file, line, RG_TILE_RULE_RELEASE, "TILERELEASE with no configuration held");
        return;
    }
    st.configured = 0;
    st.n_windows = 0;
    zero_tiles();
}

void rg_tile_emu_check_released(const char *file, int line) {
    if (st.configured) {
        fault(file, line, RG_TILE_RULE_NOT_RELEASED, "the kernel returned holding a tile configuration (no TILERELEASE)");
        st.configured = 0;
        st.n_windows = 0;
    }
}

int rg_tile_emu_configured(void) { return st.configured; }

void rg_tile_emu_bounds(const void *base, size_t bytes, const char *file, int line) {
    if (!st.configured) {
        fault(file, line, RG_TILE_RULE_UNCONFIGURED, "a buffer declared with no tile configuration loaded");
        return;
    }
    if (st.n_windows == MAX_WINDOWS) {
        fault(file, line, RG_TILE_RULE_BOUNDS, "more than %d buffers declared", MAX_WINDOWS);
        return;
    }
    st.win[st.n_windows++] = (emu_window){(uintptr_t)base, (uintptr_t)base + bytes};
}

// ---------------------------------------------------------------------------
// Loads and stores: rows of colsb bytes; the rest of the tile reads as zero.

void rg_tile_emu_zero(int t, const char *file, int line) {
    if (!tile_ok(t, "TILEZERO", file, line)) return;
    memset(st.t[t], 0, sizeof st.t[t]);
}

void rg_tile_emu_loadd(int t, const void *base, size_t stride, const char *file, int line) {
    if (!tile_ok(t, "TILELOADD", file, line) || !bounds_ok(t, base, stride, "TILELOADD", file, line)) return;
    memset(st.t[t], 0, sizeof st.t[t]);
    for (int r = 0; r < st.rows[t]; r++) memcpy(st.t[t][r], (const uint8_t *)base + (size_t)r * stride, st.colsb[t]);
}

void rg_tile_emu_stored(int t, void *base, size_t stride, const char *file, int line) {
    if (!tile_ok(t, "TILESTORED", file, line) || !bounds_ok(t, base, stride, "TILESTORED", file, line)) return;
    for (int r = 0; r < st.rows[t]; r++) memcpy((uint8_t *)base + (size_t)r * stride, st.t[t][r], st.colsb[t]);
}

// ---------------------------------------------------------------------------
// Dot products.

// The shape rules of TDPBF16PS and TDPBUSD (the same for both).
static int dp_ok(int c, int a, int b, const char *what, const char *file, int line) {
    if (!tile_ok(c, what, file, line) || !tile_ok(a, what, file, line) || !tile_ok(b, what, file, line)) return 0;
    if (c == a || c == b || a == b) {
        fault(file, line, RG_TILE_RULE_DP_SAME, "%s tmm%d, tmm%d, tmm%d names one tile twice", what, c, a, b);
        return 0;
    }
    if (st.colsb[c] % 4 || st.colsb[a] % 4 || st.colsb[b] % 4) {
        fault(file, line, RG_TILE_RULE_DP_COLSB, "%s: colsb %u, %u, %u (c, a, b) must be multiples of 4", what,
              (unsigned)st.colsb[c], (unsigned)st.colsb[a], (unsigned)st.colsb[b]);
        return 0;
    }
    if (st.rows[c] != st.rows[a]) {
        fault(file, line, RG_TILE_RULE_DP_ROWS, "%s: c has %u rows, a has %u", what, (unsigned)st.rows[c],
              (unsigned)st.rows[a]);
        return 0;
    }
    if (st.colsb[a] != 4 * st.rows[b]) {
        fault(file, line, RG_TILE_RULE_DP_K, "%s: a's %u bytes a row are not 4 x b's %u rows", what,
              (unsigned)st.colsb[a], (unsigned)st.rows[b]);
        return 0;
    }
    if (st.colsb[c] != st.colsb[b]) {
        fault(file, line, RG_TILE_RULE_DP_N, "%s: c has %u bytes a row, b has %u", what, (unsigned)st.colsb[c],
              (unsigned)st.colsb[b]);
        return 0;
    }
    return 1;
}

// A BF16 element read as F32, denormals as zero.
static inline float bf16_daz(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7F800000u) == 0) u &= 0x80000000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float ftz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }
static inline float daz(float x) { return ftz(x); }

// fl(s + x y) with the product exact, s and the result with denormals as zero. x and y are BF16
// values (8-bit significands), so x y is exact in double; when it is also a normal float (or 0),
// the sum of two floats rounded in double and then to float is the sum rounded once (53 >= 2 x 24 + 2
// bits), so plain double arithmetic gives fmaf's bits. Products outside that range (underflow,
// overflow, Inf, NaN) take fmaf.
static inline float mac(float x, float y, float s) {
    const double p = (double)x * (double)y, ap = fabs(p);
    const float r = (ap >= FLT_MIN && ap <= FLT_MAX) || p == 0.0 ? (float)((double)s + p) : fmaf(x, y, s);
    return ftz(r);
}

void rg_tile_emu_dpbf16ps(int c, int a, int b, const char *file, int line) {
    if (!dp_ok(c, a, b, "TDPBF16PS", file, line)) return;
    const int M = st.rows[c], K = st.colsb[a] / 4, N = st.colsb[c] / 4;
    float av[RG_TILE_MAX_ROWS][32], bv[RG_TILE_MAX_ROWS][32];  // a: [m][2k + lane], b: [k][2n + lane]
    for (int r = 0; r < M; r++)
        for (int i = 0; i < 2 * K; i++) {
            uint16_t h;
            memcpy(&h, st.t[a][r] + 2 * i, 2);
            av[r][i] = bf16_daz(h);
        }
    for (int k = 0; k < K; k++)
        for (int i = 0; i < 2 * N; i++) {
            uint16_t h;
            memcpy(&h, st.t[b][k] + 2 * i, 2);
            bv[k][i] = bf16_daz(h);
        }
    for (int m = 0; m < M; m++) {
        float e[16] = {0}, o[16] = {0};
        for (int k = 0; k < K; k++) {
            const float a0 = av[m][2 * k], a1 = av[m][2 * k + 1];
            const float *bk = bv[k];
            for (int n = 0; n < N; n++) {
                e[n] = mac(a0, bk[2 * n], e[n]);
                o[n] = mac(a1, bk[2 * n + 1], o[n]);
            }
        }
        for (int n = 0; n < N; n++) {
            float cv;
            memcpy(&cv, st.t[c][m] + 4 * n, 4);
            cv = ftz(daz(cv) + ftz(e[n] + o[n]));
            memcpy(st.t[c][m] + 4 * n, &cv, 4);
        }
    }
}

void rg_tile_emu_dpbusd(int c, int a, int b, const char *file, int line) {
    if (!dp_ok(c, a, b, "TDPBUSD", file, line)) return;
    const int M = st.rows[c], K = st.colsb[a] / 4, N = st.colsb[c] / 4;
    for (int m = 0; m < M; m++) {
        const uint8_t *ar = st.t[a][m];
        for (int n = 0; n < N; n++) {
            uint32_t acc;
            memcpy(&acc, st.t[c][m] + 4 * n, 4);
            for (int k = 0; k < K; k++) {
                const int8_t *bq = (const int8_t *)(st.t[b][k] + 4 * n);
                const uint8_t *aq = ar + 4 * k;
                const int32_t dot = (int32_t)aq[0] * bq[0] + (int32_t)aq[1] * bq[1] + (int32_t)aq[2] * bq[2] +
                                    (int32_t)aq[3] * bq[3];
                acc += (uint32_t)dot;  // wraps as the hardware's dword adds do
            }
            memcpy(st.t[c][m] + 4 * n, &acc, 4);
        }
    }
}
