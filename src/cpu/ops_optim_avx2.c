// ops_optim_avx2.c - 8-lane AdamW and SGD updates for ops_optim.c.
//
// The build compiles every *_avx2.c with -mavx2 -mf16c -mfma. Each lane does
// exactly the scalar canonical sequence of training.md §1.2/§1.3, and every
// instruction rounds like its scalar counterpart: _mm256_fmadd_ps and
// _mm256_fnmadd_ps round once like fmaf (fnmadd(a, b, c) = fma(-a, b, c): the
// product's sign flip is exact), and _mm256_mul/sub/add/div/sqrt_ps are IEEE
// with the default MXCSR rounding, as are their scalar forms. So the bits equal
// the scalar loop's for every input, and which elements go through this path
// (it does the first n - n % 8 of each thread's range) changes nothing.
//
// Built without those flags, the functions do nothing and return 0, and
// rg_optim_avx2_built = 0 keeps ops_optim.c on its scalar loops.
#include <stdint.h>

extern const int rg_optim_avx2_built;
int64_t rg_adamw_avx2(float *theta_out, const float *theta, const float *grad, float *m, float *v, int64_t n,
                      const float fp[8]);
int64_t rg_sgd_avx2(float *theta_out, const float *theta, const float *grad, int64_t n, const float fp[8]);
void rg_sumsq_lanes_avx2(const float *x, int64_t n, double lanes[16]);

#if defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

const int rg_optim_avx2_built = 1;

// Prefetch distance of the AdamW loop, in floats (a prefetch past the end of an
// array is a hint and never faults).
enum { PF_AHEAD = 256 };

// fp as in cpu_adamw: step, omb1, b2, omb2, eps, decay, bc2s, clip.
int64_t rg_adamw_avx2(float *theta_out, const float *theta, const float *grad, float *m, float *v, int64_t n,
                      const float fp[8]) {
    const __m256 step = _mm256_set1_ps(fp[0]), omb1 = _mm256_set1_ps(fp[1]), b2 = _mm256_set1_ps(fp[2]);
    const __m256 omb2 = _mm256_set1_ps(fp[3]), eps = _mm256_set1_ps(fp[4]), decay = _mm256_set1_ps(fp[5]);
    const __m256 bc2s = _mm256_set1_ps(fp[6]), clip = _mm256_set1_ps(fp[7]);
    const int do_clip = fp[7] != 1.0f, do_decay = fp[5] != 1.0f;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if ((i & 15) == 0) {
            // Four read streams and long divide/sqrt chains: the hardware prefetcher alone
            // leaves the loop waiting on memory (1.7 ns/element streaming vs 0.6 in cache).
            _mm_prefetch((const char *)(grad + i + PF_AHEAD), _MM_HINT_T0);
            _mm_prefetch((const char *)(m + i + PF_AHEAD), _MM_HINT_T0);
            _mm_prefetch((const char *)(v + i + PF_AHEAD), _MM_HINT_T0);
            _mm_prefetch((const char *)(theta + i + PF_AHEAD), _MM_HINT_T0);
        }
        __m256 g = _mm256_loadu_ps(grad + i);  // [8]
        if (do_clip) g = _mm256_mul_ps(g, clip);
        __m256 mm = _mm256_loadu_ps(m + i), vv = _mm256_loadu_ps(v + i);
        mm = _mm256_fmadd_ps(omb1, _mm256_sub_ps(g, mm), mm);                 // fma(omb1, g - m, m)
        vv = _mm256_fmadd_ps(omb2, _mm256_mul_ps(g, g), _mm256_mul_ps(b2, vv));  // fma(omb2, g*g, b2*v)
        __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), bc2s), eps);  // sqrt(v)/bc2s + eps
        __m256 th = _mm256_loadu_ps(theta + i);
        if (do_decay) th = _mm256_mul_ps(th, decay);
        th = _mm256_fnmadd_ps(step, _mm256_div_ps(mm, den), th);  // fma(-step, m/den, theta)
        _mm256_storeu_ps(m + i, mm);
        _mm256_storeu_ps(v + i, vv);
        _mm256_storeu_ps(theta_out + i, th);
    }
    return i;
}

// lanes[l] += x[i]^2 in double for i = l mod 16 in increasing i (n a multiple of 16):
// four vectors of four doubles, one per group of lanes; the product and the
// sum round like the scalar (double)x * (double)x and +.
void rg_sumsq_lanes_avx2(const float *x, int64_t n, double lanes[16]) {
    __m256d s0 = _mm256_loadu_pd(lanes), s1 = _mm256_loadu_pd(lanes + 4);
    __m256d s2 = _mm256_loadu_pd(lanes + 8), s3 = _mm256_loadu_pd(lanes + 12);
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);  // [8] [8]
        const __m256d a0 = _mm256_cvtps_pd(_mm256_castps256_ps128(a)), a1 = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
        const __m256d b0 = _mm256_cvtps_pd(_mm256_castps256_ps128(b)), b1 = _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1));
        s0 = _mm256_add_pd(s0, _mm256_mul_pd(a0, a0));
        s1 = _mm256_add_pd(s1, _mm256_mul_pd(a1, a1));
        s2 = _mm256_add_pd(s2, _mm256_mul_pd(b0, b0));
        s3 = _mm256_add_pd(s3, _mm256_mul_pd(b1, b1));
    }
    _mm256_storeu_pd(lanes, s0), _mm256_storeu_pd(lanes + 4, s1);
    _mm256_storeu_pd(lanes + 8, s2), _mm256_storeu_pd(lanes + 12, s3);
}

// fp as in cpu_sgd: lr, weight decay, clip.
int64_t rg_sgd_avx2(float *theta_out, const float *theta, const float *grad, int64_t n, const float fp[8]) {
    const __m256 lr = _mm256_set1_ps(fp[0]), wd = _mm256_set1_ps(fp[1]), clip = _mm256_set1_ps(fp[2]);
    const int do_clip = fp[2] != 1.0f, do_wd = fp[1] != 0.0f;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(grad + i), th = _mm256_loadu_ps(theta + i);  // [8]
        if (do_clip) g = _mm256_mul_ps(g, clip);
        if (do_wd) g = _mm256_fmadd_ps(wd, th, g);                  // fma(wd, theta, g)
        _mm256_storeu_ps(theta_out + i, _mm256_fnmadd_ps(lr, g, th));  // fma(-lr, g, theta)
    }
    return i;
}

#else

const int rg_optim_avx2_built = 0;

int64_t rg_adamw_avx2(float *theta_out, const float *theta, const float *grad, float *m, float *v, int64_t n,
                      const float fp[8]) {
    (void)theta_out, (void)theta, (void)grad, (void)m, (void)v, (void)n, (void)fp;
    return 0;
}

int64_t rg_sgd_avx2(float *theta_out, const float *theta, const float *grad, int64_t n, const float fp[8]) {
    (void)theta_out, (void)theta, (void)grad, (void)n, (void)fp;
    return 0;
}

void rg_sumsq_lanes_avx2(const float *x, int64_t n, double lanes[16]) { (void)x, (void)n, (void)lanes; }

#endif
