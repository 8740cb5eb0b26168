// gemm_openblas.c - gemm.c's OpenBLAS route (gemm_openblas.h).
//
// cblas_sgemm's bits for an element depend on the shape of the call (its edge
// kernels and blocking differ), so the tiles are a function of (M, N) alone
// and the result is the same for every thread count. Rows are split into
// parts of at most OB_TM (rounded to 24), then columns into enough parts of 64
// to OB_TN columns (rounded to 16) to make about OB_TILES tiles, so 1, 2, 3, 4
// or 6 threads share them evenly.
#include "cpu/gemm_openblas.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifdef RG_HAVE_OPENBLAS
#include <cblas.h>
#endif

// The OpenBLAS route copies (dequantizes) B, and A when it has no unit stride,
// in slices of at most OB_KB rows of depth; see ob_grid for the tiles.
#define OB_KB 1024

#define OB_TM 512
#define OB_TN 768
#define OB_TILES 12

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }
// Floats rounded up to whole 64-byte lines, so every buffer starts aligned (as gemm.c's).
static int64_t lines(int64_t n_floats) { return round_up(n_floats, 16); }

bool rg_sgemm_have_openblas(void) {
#ifdef RG_HAVE_OPENBLAS
    return true;
#else
    return false;
#endif
}

#ifdef RG_HAVE_OPENBLAS
static pthread_once_t ob_once = PTHREAD_ONCE_INIT;
static char ob_name[96];  // "openblas (Zen)", written once under ob_once
// Our pool splits the work; OpenBLAS's own threads would fight it for the cores.
static void ob_init(void) {
    openblas_set_num_threads(1);
    snprintf(ob_name, sizeof ob_name, "openblas (%s)", openblas_get_corename());
}
#endif

void rg_gemm_ob_init(void) {
#ifdef RG_HAVE_OPENBLAS
    pthread_once(&ob_once, ob_init);
#endif
}

const char *rg_gemm_ob_name(void) {
#ifdef RG_HAVE_OPENBLAS
    pthread_once(&ob_once, ob_init);
    return ob_name;
#else
    return "openblas (not built)";
#endif
}

static void ob_grid(int64_t M, int64_t N, int64_t *tm, int64_t *tn, int64_t *n_tiles) {
    int64_t pm = max64(1, ceil_div(M, OB_TM));
    *tm = max64(1, round_up(ceil_div(M, pm), 24));
    int64_t rows = ceil_div(M, *tm);
    int64_t pn = max64(ceil_div(N, OB_TN), min64(ceil_div(OB_TILES, rows), N / 64));
    pn = max64(1, pn);
    *tn = max64(1, round_up(ceil_div(N, pn), 16));
    *n_tiles = rows * ceil_div(N, *tn);
    if (M == 0 || N == 0) *n_tiles = 0;
}

rg_gemm_ob_sizes rg_gemm_ob_plan(const rg_gemm_batch *bt) {
    rg_gemm_ob_sizes s;
    ob_grid(bt->M, bt->N, &s.tm, &s.tn, &s.n_tiles);
    s.kb = max64(1, min64(OB_KB, bt->K));
    int64_t bs = bt->b_type == RG_TYPE_F32 ? 1 : max64(1, rg_type_get(bt->b_type)->block_size);
    // A weight with rows along k is dequantized whole rows at a time.
    int64_t brow = bt->b_type != RG_TYPE_F32 && bt->b_rows_along_k ? lines(bt->K) : s.kb;
    s.floats = lines(brow * s.tn) + lines(s.tn + 2 * bs) + lines(s.tm * s.kb);
    return s;
}

#ifdef RG_HAVE_OPENBLAS
static bool a_direct(const rg_gemm_problem *p, int64_t m, int64_t k, enum CBLAS_TRANSPOSE *tr, int64_t *lda) {
    if (p->a_cs == 1 && (p->a_rs >= k || m == 1)) {
        *tr = CblasNoTrans, *lda = m == 1 ? max64(1, k) : p->a_rs;
        return true;
    }
    if (p->a_rs == 1 && (p->a_cs >= m || k == 1)) {
        *tr = CblasTrans, *lda = k == 1 ? max64(1, m) : p->a_cs;
        return true;
    }
    return false;
}

static bool b_direct(const rg_gemm_b *b, int64_t k, int64_t n, enum CBLAS_TRANSPOSE *tr, int64_t *ldb) {
    if (b->type != RG_TYPE_F32) return false;
    if (b->cs == 1 && (b->rs >= n || k == 1)) {
        *tr = CblasNoTrans, *ldb = k == 1 ? max64(1, n) : b->rs;
        return true;
    }
    if (b->rs == 1 && (b->cs >= k || n == 1)) {
        *tr = CblasTrans, *ldb = n == 1 ? max64(1, k) : b->cs;
        return true;
    }
    return false;
}
#endif

// One tile of one problem: C[i0:i0+m, j0:j0+n].
void rg_gemm_ob_tile(const rg_gemm_ob_ctx *oc, const rg_gemm_batch *bt, const rg_gemm_problem *p, int64_t i0, int64_t m,
                    int64_t j0, int64_t n, float *ws) {
#ifdef RG_HAVE_OPENBLAS
    float *c = p->c + i0 * p->ldc + j0;
    if (bt->K == 0) {
        if (!bt->accumulate)
            for (int64_t i = 0; i < m; i++) memset(c + i * p->ldc, 0, sizeof(float) * (size_t)n);
        return;
    }
    const rg_gemm_b *b = &p->b;
    enum CBLAS_TRANSPOSE ta, tb;
    int64_t lda, ldb;
    // Plain operands go to one call over the whole depth.
    if (a_direct(p, m, bt->K, &ta, &lda) && b_direct(b, bt->K, n, &tb, &ldb)) {
        const float *a = p->a + i0 * p->a_rs;
        const float *bb = (const float *)b->data + j0 * b->cs;
        cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)bt->K, 1.0f, a, (int)lda, bb, (int)ldb,
                    bt->accumulate ? 1.0f : 0.0f, c, (int)p->ldc);
        return;
    }
    const rg_gemm_ob_sizes *sz = &oc->sz;
    int64_t brow = b->type != RG_TYPE_F32 && b->rows_along_k ? lines(bt->K) : sz->kb;
    float *bcopy = ws;                              // [kb][n] or, rows along k, [n][K]
    float *seg = bcopy + lines(brow * sz->tn);      // one dequantized row segment
    float *acopy = seg + lines(sz->tn + 2 * oc->bs);  // [m][kb]
    if (b->type != RG_TYPE_F32 && b->rows_along_k) {
        // Each row of the weight is a column of B: dequantize the n rows whole, once.
        for (int64_t j = 0; j < n; j++)
            oc->dequant((const char *)b->data + (size_t)(j0 + j) * b->row_stride, bcopy + j * brow, bt->K);
    }
    for (int64_t pc = 0; pc < bt->K; pc += sz->kb) {
        int64_t kb = min64(sz->kb, bt->K - pc);
        const float *a;
        const float *bb;
        if (a_direct(p, m, kb, &ta, &lda)) {
            a = p->a + i0 * p->a_rs + pc * p->a_cs;
        } else {
            for (int64_t i = 0; i < m; i++)
                for (int64_t k = 0; k < kb; k++) acopy[i * kb + k] = p->a[(i0 + i) * p->a_rs + (pc + k) * p->a_cs];
            a = acopy, ta = CblasNoTrans, lda = kb;
        }
        if (b->type != RG_TYPE_F32 && b->rows_along_k) {
            bb = bcopy + pc, tb = CblasTrans, ldb = brow;
        } else if (b_direct(b, kb, n, &tb, &ldb)) {
            bb = (const float *)b->data + pc * b->rs + j0 * b->cs;
        } else if (b->type == RG_TYPE_F32) {
            const float *s = (const float *)b->data;
            for (int64_t k = 0; k < kb; k++)
                for (int64_t j = 0; j < n; j++) bcopy[k * n + j] = s[(pc + k) * b->rs + (j0 + j) * b->cs];
            bb = bcopy, tb = CblasNoTrans, ldb = n;
        } else {
            int64_t lo = j0 - j0 % oc->bs, hi = min64(round_up(j0 + n, oc->bs), bt->N);
            size_t boff = (size_t)(lo / oc->bs) * oc->type_size;
            for (int64_t k = 0; k < kb; k++) {
                oc->dequant((const char *)b->data + (size_t)(pc + k) * b->row_stride + boff, seg, hi - lo);
                memcpy(bcopy + k * n, seg + (j0 - lo), sizeof(float) * (size_t)n);
            }
            bb = bcopy, tb = CblasNoTrans, ldb = n;
        }
        cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)kb, 1.0f, a, (int)lda, bb, (int)ldb,
                    (bt->accumulate || pc > 0) ? 1.0f : 0.0f, c, (int)p->ldc);
    }
#else
    (void)oc, (void)bt, (void)p, (void)i0, (void)m, (void)j0, (void)n, (void)ws;
#endif
}

