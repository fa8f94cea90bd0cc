/* golden source of tests/backends/golden_cases.py::concat_pad; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [7, 12, 14, 15, 16, 17, 18, 19] */

/* constant_mul_add_exp2 */
void lm_constant_mul_add_exp2_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    #pragma omp parallel for if((48) > 16384)
    for (long long i0_ = 0; i0_ < 4; i0_++) {
        for (long long i1_ = 0; i1_ < 12; i1_++) {
            b0[(12*i0_ + i1_)] = exp2f((((i1_ >= 6) ? ((((((((i1_ - 6) < 4) && ((i1_ - 6) >= 1)) ? 1.0f : 0.0f) * -1.0f) + 1.0f) * -1.0f) + ((((i1_ - 6) < 4) && ((i1_ - 6) >= 1)) ? b2[(3*i0_ + i1_ - 7)] : 0.0f)) : 0.0f) + ((i1_ < 6) ? b1[(6*i0_ + i1_)] : 0.0f)));
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_constant_mul_add_exp2_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_constant_mul_add_exp2_<hash>(b[2], b[0], b[1], d); }
    return 0;
}
