/* golden source of tests/backends/golden_cases.py::conv_forward; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [2] */

/* contiguous */
void lm_contiguous_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for if((3456) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 8; i1_++) {
            for (long long i2_ = 0; i2_ < 8; i2_++) {
                for (long long i3_ = 0; i3_ < 3; i3_++) {
                    for (long long i4_ = 0; i4_ < 3; i4_++) {
                        for (long long i5_ = 0; i5_ < 3; i5_++) {
                            b0[(1728*i0_ + 216*i1_ + 27*i2_ + 9*i3_ + 3*i4_ + i5_)] = b1[(300*i0_ + 10*i1_ + i2_ + 100*i3_ + 10*i4_ + i5_)];
                        }
                    }
                }
            }
        }
    }
}

/* ---- segment 0: nodes [7] */
#include <stdlib.h>
#include <omp.h>
void LM_SGEMM(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    {
    const long long m_ = 128, n_ = 4, k_ = 27;
    const int nt_ = omp_get_max_threads();
    const int split_ = nt_ > 1 && m_ * n_ <= 4096 && k_ >= 4096;
    /* the partial sums' memory; without it (calloc failed) one plain call does the work */
    float* part_ = split_ ? (float*)calloc((size_t)(nt_ * m_ * n_), sizeof(float)) : 0;
    if (part_) {
        #pragma omp parallel num_threads(nt_)
        {
            const int t_ = omp_get_thread_num(), count_ = omp_get_num_threads();
            const long long k0_ = k_ * t_ / count_, k1_ = k_ * (t_ + 1) / count_;
            LM_SGEMM(101, 111, 112, (int)m_, (int)n_, (int)(k1_ - k0_), 1.0f, b1 + 0 + k0_, (int)(27), b2 + 0 + k0_, (int)(27), 0.0f, part_ + (long long)t_ * m_ * n_, (int)n_);
        }
        for (long long r_ = 0; r_ < m_; r_++) {
            for (long long c_ = 0; c_ < n_; c_++) {
                float total_ = 0.0f;
                for (int t_ = 0; t_ < nt_; t_++) total_ += part_[(t_ * m_ + r_) * n_ + c_];
                b0[0 + r_ * (long long)(4) + c_] = total_;
            }
        }
        free(part_);
    } else {
    LM_SGEMM(101, 111, 112, (int)(128), (int)(4), (int)(27), 1.0f, b1 + 0, (int)((27) > 1 ? (27) : 1), b2 + 0, (int)((27) > 1 ? (27) : 1), 0.0f, b0 + 0, (int)((4) > 1 ? (4) : 1));
    }
    }
}

/* ---- segment 0: nodes [8] */

/* maxreduce */
void lm_maxreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for if((1024) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 4; i1_++) {
            for (long long i2_ = 0; i2_ < 8; i2_++) {
                for (long long i3_ = 0; i3_ < 8; i3_++) {
                    float acc = b1[(256*i0_ + i1_ + 32*i2_ + 4*i3_)];
                    { const float v1 = 0.0f; acc = (v1 > acc || v1 != v1) ? v1 : acc; }
                    b0[(256*i0_ + 64*i1_ + 8*i2_ + i3_)] = acc;
                }
            }
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_contiguous_<hash>();
void lm_sgemm_<hash>();
void lm_maxreduce_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s) {
    s[0] = 0;
    lm_contiguous_<hash>(b[2], b[0], d);
    lm_sgemm_<hash>(b[3], b[2], b[1], d);
    lm_maxreduce_<hash>(b[4], b[3], d);
    return 0;
}
