/* golden source of tests/backends/golden_cases.py::sgemm_in_place; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [4] */
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
    lm_sgemm_split_k(111, 112, 32, 16, 48, b1 + 0, 48, b2 + 0, 48, b0 + 0, 16);
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_sgemm_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s) {
    s[0] = 0;
    lm_sgemm_<hash>(b[2], b[0], b[1], d);
    return 0;
}
