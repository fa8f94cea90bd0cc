/* golden source of tests/backends/golden_cases.py::conv_forward; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [2] */

/* contiguous */
void lm_contiguous_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for collapse(2) if((3456) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 8; i1_++) {
            for (long long i2_ = 0; i2_ < 8; i2_++) {
                for (long long i3_ = 0; i3_ < 3; i3_++) {
                    for (long long i4_ = 0; i4_ < 3; i4_++) {
                        for (long long i5_ = 0; i5_ < 3; i5_++) {
                            b0[(1728*i0_ + 216*i1_ + 27*i2_ + 9*i3_ + 3*i4_ + i5_)] = b1[(300*i0_ + 10*i1_ + i2_ + 100*i3_ + 10*i4_ + i5_)];
                        }
                    }
                }
            }
        }
    }
}

/* ---- segment 0: nodes [7] */
void lm_sgemm(int, int, long long, long long, long long, const float*, long long, const float*, long long, float*, long long, long long, long long);
long long lm_sgemm_gather(int, long long, long long, long long, const float*, long long, const float*, const long long*, float*, long long, long long, long long);
/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    lm_sgemm(111, 112, 128, 4, 27, b1 + 0, 27, b2 + 0, 27, b0 + 0, 4, 4, 0);
}

/* ---- segment 0: nodes [8] */

/* maxreduce */
void lm_maxreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for collapse(2) if((1024) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 4; i1_++) {
            for (long long i2_ = 0; i2_ < 8; i2_++) {
                for (long long i3_ = 0; i3_ < 8; i3_++) {
                    float acc = b1[(256*i0_ + i1_ + 32*i2_ + 4*i3_)];
                    { const float v1 = 0.0f; acc = lm_max_nan(acc, v1); }
                    b0[(256*i0_ + 64*i1_ + 8*i2_ + i3_)] = acc;
                }
            }
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_contiguous_<hash>();
void lm_sgemm_<hash>();
void lm_maxreduce_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_contiguous_<hash>(b[2], b[0], d); }
    if (!k[1]) { lm_sgemm_<hash>(b[3], b[2], b[1], d); }
    if (!k[2]) { lm_maxreduce_<hash>(b[4], b[3], d); }
    return 0;
}
