/* golden source of tests/backends/golden_cases.py::half_precision; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [1, 2, 3, 4, 5, 6, 7, 8, 9, 20] */

/* constant_cast_mul_exp2 */
void lm_constant_cast_mul_exp2_<hash>(unsigned short* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for if((128) > 16384)
    for (long long i0_ = 0; i0_ < 8; i0_++) {
        float acc = 0.0f;
        #pragma omp simd reduction(+:acc)
        for (long long r0_ = 0; r0_ < 16; r0_++) {
            const float v = lm_bf16_load(lm_bf16_store(lm_bf16_load(lm_bf16_store(((float)(_Float16)((((float)(_Float16)(2.0f)) * ((float)(_Float16)(((float)(_Float16)(exp2f((((float)(_Float16)(((float)(_Float16)(b1[(16*i0_ + r0_)])))) * 1.4426950408889634f)))))))))))));
            acc += v;
        }
        b0[i0_] = lm_bf16_store(acc);
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_constant_cast_mul_exp2_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_constant_cast_mul_exp2_<hash>(b[1], b[0], d); }
    return 0;
}
