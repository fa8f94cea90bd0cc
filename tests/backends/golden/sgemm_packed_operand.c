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
void lm_sgemm(int, int, long long, long long, long long, const float*, long long, const float*, long long, float*, long long, long long, long long);
long long lm_sgemm_gather(int, long long, long long, long long, const float*, long long, const float*, const long long*, float*, long long, long long, long long);
/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    lm_sgemm(111, 112, 32, 24, 48, b1 + 0, 48, b2 + 0, 48, b0 + 0, 24, 24, 0);
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_constant_mul_exp2_<hash>();
void lm_sgemm_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_constant_mul_exp2_<hash>(b[2], b[1], d); }
    if (!k[1]) { lm_sgemm_<hash>(b[3], b[0], b[2], d); }
    return 0;
}
