/* golden source of tests/backends/golden_cases.py::layer_norm; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [3, 4, 5, 6, 15, 26, 27, 28, 29, 30, 32, 33, 34, 35, 36, 37] */

/* recip_contract_add_mul */
void lm_recip_contract_add_mul_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const float* restrict b3, const long long* restrict d) {
    #pragma omp parallel for if((384) > 16384)
    for (long long i0_ = 0; i0_ < 8; i0_++) {
        float s1 = 0.0f;
        #pragma omp simd reduction(+:s1)
        for (long long j0_ = 0; j0_ < 48; j0_++) {
            const float v = b1[(48*i0_ + j0_)];
            s1 += v;
        }
        const float s2 = ((1.0f / 48.0f) * s1);
        float s3 = 0.0f;
        #pragma omp simd reduction(+:s3)
        for (long long j0_ = 0; j0_ < 48; j0_++) {
            const float c1 = ((s2 * -1.0f) + b1[(48*i0_ + j0_)]);
            const float v = (c1 * c1);
            s3 += v;
        }
        const float s4 = (1.0f / sqrtf((((1.0f / 48.0f) * s3) + 1e-05f)));
        for (long long j0_ = 0; j0_ < 48; j0_++) {
            b0[(48*i0_ + j0_)] = (((((s2 * -1.0f) + b1[(48*i0_ + j0_)]) * s4) * b2[j0_]) + b3[j0_]);
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_recip_contract_add_mul_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_recip_contract_add_mul_<hash>(b[3], b[1], b[0], b[2], d); }
    return 0;
}
