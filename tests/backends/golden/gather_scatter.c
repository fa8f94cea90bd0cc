/* golden source of tests/backends/golden_cases.py::gather_scatter; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [11] */

/* constant */
void lm_constant_<hash>(float* restrict b0, const long long* restrict d) {
    b0[0] = 0.0f;
}

/* ---- segment 0: nodes [3] */

/* constant */
void lm_constant_<hash>(float* restrict b0, const long long* restrict d) {
    b0[0] = 2.0f;
}

/* ---- segment 0: nodes [13] */
static inline void lm_fault_index(long long* f, long long index, long long rows) {
    __atomic_store_n(&f[1], index, __ATOMIC_RELAXED);
    __atomic_store_n(&f[2], rows, __ATOMIC_RELAXED);
    __atomic_store_n(&f[0], 1, __ATOMIC_RELAXED);
}

/* scatter */
void lm_scatter_<hash>(float* restrict b0, const float* restrict b1, const int* restrict b2, const float* restrict b3, const long long* restrict d, long long* restrict lm_fault) {
    const float h1 = b1[0];
    const float h2 = b3[0];
    #pragma omp parallel for if((60) > 16384)
    for (long long i0_ = 0; i0_ < 10; i0_++) {
        for (long long i1_ = 0; i1_ < 6; i1_++) {
            b0[(6*i0_ + i1_)] = h1;
        }
    }
    for (long long r0_ = 0; r0_ < 4; r0_++) {
        for (long long r1_ = 0; r1_ < 6; r1_++) {
            long long g0_ = (long long)(b2[r0_]);
            if (g0_ < 0 || g0_ >= 10) { lm_fault_index(lm_fault, g0_, 10); continue; }
            b0[(6*g0_ + r1_)] = (b0[(6*g0_ + r1_)] + h2);
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_constant_<hash>();
void lm_constant_<hash>();
void lm_scatter_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_constant_<hash>(b[1], d); }
    if (!k[1]) { lm_constant_<hash>(b[2], d); }
    if (!k[2]) { lm_scatter_<hash>(b[3], b[1], b[0], b[2], d, s); if (s[0]) { s[3] = 2; return 1; } }
    return 0;
}
