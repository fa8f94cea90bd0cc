/* golden source of tests/backends/golden_cases.py::elementwise_views; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [2, 3, 4, 5, 6, 7, 15] */

/* constant_mul_exp2_add */
void lm_constant_mul_exp2_add_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    #pragma omp parallel for if((20) > 16384)
    for (long long i0_ = 0; i0_ < 5; i0_++) {
        const float h1 = b2[i0_];
        for (long long i1_ = 0; i1_ < 4; i1_++) {
            b0[(4*i0_ + i1_)] = sqrtf((exp2f(((b1[(4*i0_ + i1_ + 4)] * h1) * 1.4426950408889634f)) + 1.0f));
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_constant_mul_exp2_add_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_constant_mul_exp2_add_<hash>(b[2], b[0], b[1], d); }
    return 0;
}
