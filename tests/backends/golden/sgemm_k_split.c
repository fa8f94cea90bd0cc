/* golden source of tests/backends/golden_cases.py::sgemm_k_split; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [4] */
#include <stdlib.h>
#include <omp.h>
void LM_SGEMM(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    {
    const long long m_ = 6, n_ = 5, k_ = 8192;
    const int nt_ = omp_get_max_threads();
    const int split_ = nt_ > 1 && m_ * n_ <= 4096 && k_ >= 4096;
    /* the partial sums' memory; without it (calloc failed) one plain call does the work */
    float* part_ = split_ ? (float*)calloc((size_t)(nt_ * m_ * n_), sizeof(float)) : 0;
    if (part_) {
        #pragma omp parallel num_threads(nt_)
        {
            const int t_ = omp_get_thread_num(), count_ = omp_get_num_threads();
            const long long k0_ = k_ * t_ / count_, k1_ = k_ * (t_ + 1) / count_;
            LM_SGEMM(101, 111, 111, (int)m_, (int)n_, (int)(k1_ - k0_), 1.0f, b1 + 0 + k0_, (int)(8192), b2 + 0 + k0_ * (long long)(5), (int)(5), 0.0f, part_ + (long long)t_ * m_ * n_, (int)n_);
        }
        for (long long r_ = 0; r_ < m_; r_++) {
            for (long long c_ = 0; c_ < n_; c_++) {
                float total_ = 0.0f;
                for (int t_ = 0; t_ < nt_; t_++) total_ += part_[(t_ * m_ + r_) * n_ + c_];
                b0[0 + r_ * (long long)(5) + c_] = total_;
            }
        }
        free(part_);
    } else {
    LM_SGEMM(101, 111, 111, (int)(6), (int)(5), (int)(8192), 1.0f, b1 + 0, (int)((8192) > 1 ? (8192) : 1), b2 + 0, (int)((5) > 1 ? (5) : 1), 0.0f, b0 + 0, (int)((5) > 1 ? (5) : 1));
    }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_sgemm_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s) {
    s[0] = 0;
    lm_sgemm_<hash>(b[2], b[0], b[1], d);
    return 0;
}
