/* golden source of tests/backends/golden_cases.py::pooling; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [3, 4, 5, 12] */

/* constant_recip_sumreduce_mul */
void lm_constant_recip_sumreduce_mul_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for collapse(2) if((96) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 8; i1_++) {
            for (long long i2_ = 0; i2_ < 6; i2_++) {
                b0[(48*i0_ + 6*i1_ + i2_)] = ((b1[(64*i0_ + 8*i1_ + i2_)] + b1[(64*i0_ + 8*i1_ + i2_ + 1)] + b1[(64*i0_ + 8*i1_ + i2_ + 2)]) * (1.0f / 3.0f));
            }
        }
    }
}

/* ---- segment 0: nodes [1] */

/* maxreduce */
void lm_maxreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for collapse(2) if((128) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 8; i1_++) {
            for (long long i2_ = 0; i2_ < 4; i2_++) {
                float acc = b1[(64*i0_ + 8*i1_ + 2*i2_)];
                { const float v1 = b1[(64*i0_ + 8*i1_ + 2*i2_ + 1)]; acc = lm_max_nan(acc, v1); }
                b0[(32*i0_ + 4*i1_ + i2_)] = acc;
            }
        }
    }
}

/* ---- segment 0: nodes [8] */

/* maxreduce */
void lm_maxreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for collapse(2) if((64) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 4; i1_++) {
            for (long long i2_ = 0; i2_ < 4; i2_++) {
                float acc = b1[(32*i0_ + i1_ + 8*i2_)];
                { const float v1 = b1[(32*i0_ + i1_ + 8*i2_ + 4)]; acc = lm_max_nan(acc, v1); }
                b0[(16*i0_ + 4*i1_ + i2_)] = acc;
            }
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_constant_recip_sumreduce_mul_<hash>();
void lm_maxreduce_<hash>();
void lm_maxreduce_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_constant_recip_sumreduce_mul_<hash>(b[1], b[0], d); }
    if (!k[1]) { lm_maxreduce_<hash>(b[2], b[0], d); }
    if (!k[2]) { lm_maxreduce_<hash>(b[3], b[2], d); }
    return 0;
}
