/* golden source of tests/backends/golden_cases.py::sgemm_packed_operand; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [2, 3, 4] */

/* constant_mul_exp2 */
void lm_constant_mul_exp2_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for if((1152) > 16384)
    for (long long i0_ = 0; i0_ < 24; i0_++) {
        for (long long i1_ = 0; i1_ < 48; i1_++) {
            b0[(48*i0_ + i1_)] = exp2f((b1[(48*i0_ + i1_)] * 1.4426950408889634f));
        }
    }
}

/* ---- segment 0: nodes [10] */
#include <stdlib.h>
#include <omp.h>
void LM_SGEMM(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    {
    const long long m_ = 32, n_ = 24, k_ = 48;
    const int nt_ = omp_get_max_threads();
    const int split_ = nt_ > 1 && m_ * n_ <= 4096 && k_ >= 4096;
    /* the partial sums' memory; without it (calloc failed) one plain call does the work */
    float* part_ = split_ ? (float*)calloc((size_t)(nt_ * m_ * n_), sizeof(float)) : 0;
    if (part_) {
        #pragma omp parallel num_threads(nt_)
        {
            const int t_ = omp_get_thread_num(), count_ = omp_get_num_threads();
            const long long k0_ = k_ * t_ / count_, k1_ = k_ * (t_ + 1) / count_;
            LM_SGEMM(101, 111, 112, (int)m_, (int)n_, (int)(k1_ - k0_), 1.0f, b1 + 0 + k0_, (int)(48), b2 + 0 + k0_, (int)(48), 0.0f, part_ + (long long)t_ * m_ * n_, (int)n_);
        }
        for (long long r_ = 0; r_ < m_; r_++) {
            for (long long c_ = 0; c_ < n_; c_++) {
                float total_ = 0.0f;
                for (int t_ = 0; t_ < nt_; t_++) total_ += part_[(t_ * m_ + r_) * n_ + c_];
                b0[0 + r_ * (long long)(24) + c_] = total_;
            }
        }
        free(part_);
    } else {
    LM_SGEMM(101, 111, 112, (int)(32), (int)(24), (int)(48), 1.0f, b1 + 0, (int)((48) > 1 ? (48) : 1), b2 + 0, (int)((48) > 1 ? (48) : 1), 0.0f, b0 + 0, (int)((24) > 1 ? (24) : 1));
    }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_constant_mul_exp2_<hash>();
void lm_sgemm_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s) {
    s[0] = 0;
    lm_constant_mul_exp2_<hash>(b[2], b[1], d);
    lm_sgemm_<hash>(b[3], b[0], b[2], d);
    return 0;
}
