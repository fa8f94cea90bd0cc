/* golden source of tests/backends/golden_cases.py::row_dot; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [4] */

/* contract */
void lm_contract_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    #pragma omp parallel for if((1536) > 16384)
    for (long long i0_ = 0; i0_ < 16; i0_++) {
        float acc = 0.0f;
        #pragma omp simd reduction(+:acc)
        for (long long r0_ = 0; r0_ < 96; r0_++) {
            const float v = (b1[(96*i0_ + r0_)] * b2[(96*i0_ + r0_)]);
            acc += v;
        }
        b0[i0_] = acc;
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_contract_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_contract_<hash>(b[2], b[0], b[1], d); }
    return 0;
}
