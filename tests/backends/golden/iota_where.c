/* golden source of tests/backends/golden_cases.py::iota_where; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [1, 2] */
static inline void lm_fault_index(long long* f, long long index, long long rows) {
    __atomic_store_n(&f[1], index, __ATOMIC_RELAXED);
    __atomic_store_n(&f[2], rows, __ATOMIC_RELAXED);
    __atomic_store_n(&f[0], 1, __ATOMIC_RELAXED);
}

/* iota_gather */
void lm_iota_gather_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d, long long* restrict lm_fault) {
    #pragma omp parallel for if((64) > 16384)
    for (long long i0_ = 0; i0_ < 64; i0_++) {
        long long g0_ = (long long)(((int)((i0_ - 64*((-(i0_ / 8) + (i0_ % 8)) < 1) + 64))));
        if (g0_ < 0 || g0_ >= 128) { lm_fault_index(lm_fault, g0_, 128); g0_ = 0; }
        b0[i0_] = ((g0_ < 64) ? b1[g0_] : 0.0f);
    }
}

/* ---- segment 0: nodes [3, 4] */

/* iota_cast */
void lm_iota_cast_<hash>(float* restrict b0, const long long* restrict d) {
    #pragma omp parallel for if((8) > 16384)
    for (long long i0_ = 0; i0_ < 8; i0_++) {
        b0[i0_] = ((float)(((int)(i0_))));
    }
}

/* ---- segment 0: nodes [10] */

/* add */
void lm_add_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    #pragma omp parallel for if((64) > 16384)
    for (long long i0_ = 0; i0_ < 8; i0_++) {
        for (long long i1_ = 0; i1_ < 8; i1_++) {
            b0[(8*i0_ + i1_)] = (b1[(8*i0_ + i1_)] + b2[i1_]);
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_iota_gather_<hash>();
void lm_iota_cast_<hash>();
void lm_add_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_iota_gather_<hash>(b[1], b[0], d, s); if (s[0]) { s[3] = 0; return 1; } }
    if (!k[1]) { lm_iota_cast_<hash>(b[2], d); }
    if (!k[2]) { lm_add_<hash>(b[3], b[1], b[2], d); }
    return 0;
}
