/* golden source of tests/backends/golden_cases.py::softmax_rows; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [1, 5, 12, 13, 14, 16, 17, 18, 19, 20] */

/* recip_sumreduce_exp2_maxreduce */
void lm_recip_sumreduce_exp2_maxreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for if((512) > 16384)
    for (long long i0_ = 0; i0_ < 8; i0_++) {
        float s1 = (-INFINITY);
        int s1_nan = 0;
        #pragma omp simd reduction(max:s1) reduction(|:s1_nan)
        for (long long j0_ = 0; j0_ < 64; j0_++) {
            const float v = b1[(64*i0_ + j0_)];
            s1 = v > s1 ? v : s1;
            s1_nan |= (v != v);
        }
        if (s1_nan) s1 = NAN;
        float s2 = 0.0f;
        #pragma omp simd reduction(+:s2)
        for (long long j0_ = 0; j0_ < 64; j0_++) {
            const float v = exp2f((((s1 * -1.0f) + b1[(64*i0_ + j0_)]) * 1.4426950408889634f));
            b0[(64*i0_ + j0_)] = v;
            s2 += v;
        }
        const float s3 = (1.0f / s2);
        for (long long j0_ = 0; j0_ < 64; j0_++) {
            b0[(64*i0_ + j0_)] = (b0[(64*i0_ + j0_)] * s3);
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_recip_sumreduce_exp2_maxreduce_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_recip_sumreduce_exp2_maxreduce_<hash>(b[1], b[0], d); }
    return 0;
}
