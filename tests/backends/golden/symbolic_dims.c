/* golden source of tests/backends/golden_cases.py::symbolic_dims; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [17] */
#include <stdlib.h>
#include <omp.h>
void LM_SGEMM(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
/* C (m x n, row-major, ldc) = op(A) op(B) */
static void lm_sgemm_split_k(int ta, int tb, long long m, long long n, long long k,
        const float* a, long long lda, const float* b, long long ldb, float* c, long long ldc)
{
    const int nt = omp_get_max_threads();
    const int split = nt > 1 && m * n <= 4096 && k >= 4096;
    /* the partial sums' memory; without it (calloc failed) one plain call does the work */
    float* part = split ? (float*)calloc((size_t)(nt * m * n), sizeof(float)) : 0;
    if (!part) {
        LM_SGEMM(101, ta, tb, (int)m, (int)n, (int)k, 1.0f, a, (int)(lda > 1 ? lda : 1),
            b, (int)(ldb > 1 ? ldb : 1), 0.0f, c, (int)(ldc > 1 ? ldc : 1));
        return;
    }
    #pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), count = omp_get_num_threads();
        const long long k0 = k * t / count, k1 = k * (t + 1) / count;
        const float* a0 = a + (ta == 111 ? k0 : k0 * lda);
        const float* b0 = b + (tb == 111 ? k0 * ldb : k0);
        LM_SGEMM(101, ta, tb, (int)m, (int)n, (int)(k1 - k0), 1.0f, a0, (int)lda, b0,
            (int)ldb, 0.0f, part + (long long)t * m * n, (int)n);
    }
    for (long long r = 0; r < m; r++) {
        for (long long j = 0; j < n; j++) {
            float total = 0.0f;
            for (int t = 0; t < nt; t++) total += part[(t * m + r) * n + j];
            c[r * ldc + j] = total;
        }
    }
    free(part);
}

/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    const long long dim_batch = d[0]; (void)dim_batch;
    lm_sgemm_split_k(111, 111, dim_batch, 8, 16, b1 + 0, 16, b2 + 0, 8, b0 + 0, 8);
}

/* ---- segment 0: nodes [8, 18, 19, 20, 21, 23, 24, 25, 26, 27] */

/* recip_sumreduce_exp2_maxreduce */
void lm_recip_sumreduce_exp2_maxreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    const long long dim_batch = d[0]; (void)dim_batch;
    #pragma omp parallel for if((8*dim_batch) > 16384)
    for (long long i0_ = 0; i0_ < dim_batch; i0_++) {
        float s18 = (-INFINITY);
        int s18_nan = 0;
        #pragma omp simd reduction(max:s18) reduction(|:s18_nan)
        for (long long j0_ = 0; j0_ < 8; j0_++) {
            const float v = b1[(8*i0_ + j0_)];
            s18 = v > s18 ? v : s18;
            s18_nan |= (v != v);
        }
        if (s18_nan) s18 = NAN;
        float s25 = 0.0f;
        #pragma omp simd reduction(+:s25)
        for (long long j0_ = 0; j0_ < 8; j0_++) {
            const float v = exp2f(((b1[(8*i0_ + j0_)] + (s18 * -1.0f)) * 1.4426950408889634f));
            b0[(8*i0_ + j0_)] = v;
            s25 += v;
        }
        const float s26 = (1.0f / s25);
        for (long long j0_ = 0; j0_ < 8; j0_++) {
            b0[(8*i0_ + j0_)] = (b0[(8*i0_ + j0_)] * s26);
        }
    }
}

/* ---- segment 0: nodes [14] */

/* sumreduce */
void lm_sumreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    const long long dim_batch = d[0]; (void)dim_batch;
    #pragma omp parallel for if((16*dim_batch) > 16384)
    for (long long i0_ = 0; i0_ < 16; i0_++) {
        float acc = 0.0f;
        #pragma omp simd reduction(+:acc)
        for (long long r0_ = 0; r0_ < dim_batch; r0_++) {
            const float v = b1[(i0_ + 16*r0_)];
            acc += v;
        }
        b0[i0_] = acc;
    }
}

/* ---- segment 0: nodes [15, 30] */

/* constant_mul */
void lm_constant_mul_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    const long long dim_batch = d[0]; (void)dim_batch;
    #pragma omp parallel for if((16) > 16384)
    for (long long i0_ = 0; i0_ < 16; i0_++) {
        b0[i0_] = (b1[i0_] * 0.5f);
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_sgemm_<hash>();
void lm_recip_sumreduce_exp2_maxreduce_<hash>();
void lm_sumreduce_<hash>();
void lm_constant_mul_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s) {
    s[0] = 0;
    lm_sgemm_<hash>(b[2], b[0], b[1], d);
    lm_recip_sumreduce_exp2_maxreduce_<hash>(b[3], b[2], d);
    lm_sumreduce_<hash>(b[4], b[0], d);
    lm_constant_mul_<hash>(b[5], b[4], d);
    return 0;
}
