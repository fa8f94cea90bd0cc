/* golden source of tests/backends/golden_cases.py::conv_backward; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [2] */

/* contiguous */
void lm_contiguous_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for collapse(2) if((1944) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 6; i1_++) {
            for (long long i2_ = 0; i2_ < 6; i2_++) {
                for (long long i3_ = 0; i3_ < 3; i3_++) {
                    for (long long i4_ = 0; i4_ < 3; i4_++) {
                        for (long long i5_ = 0; i5_ < 3; i5_++) {
                            b0[(972*i0_ + 162*i1_ + 27*i2_ + 9*i3_ + 3*i4_ + i5_)] = b1[(192*i0_ + 8*i1_ + i2_ + 64*i3_ + 8*i4_ + i5_)];
                        }
                    }
                }
            }
        }
    }
}

/* ---- segment 0: nodes [24] */
void lm_sgemm(int, int, long long, long long, long long, const float*, long long, const float*, long long, float*, long long, long long, long long);
long long lm_sgemm_gather(int, long long, long long, long long, const float*, long long, const float*, const long long*, float*, long long, long long, long long);
/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    lm_sgemm(111, 112, 72, 4, 27, b1 + 0, 27, b2 + 0, 27, b0 + 0, 4, 4, 0);
}

/* ---- segment 0: nodes [25] */

/* add */
void lm_add_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for collapse(2) if((288) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 36; i1_++) {
            for (long long i2_ = 0; i2_ < 4; i2_++) {
                const float c1 = b1[(144*i0_ + 4*i1_ + i2_)];
                b0[(144*i0_ + 4*i1_ + i2_)] = (c1 + c1);
            }
        }
    }
}

/* ---- segment 0: nodes [26] */
void lm_sgemm(int, int, long long, long long, long long, const float*, long long, const float*, long long, float*, long long, long long, long long);
long long lm_sgemm_gather(int, long long, long long, long long, const float*, long long, const float*, const long long*, float*, long long, long long, long long);
/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    lm_sgemm(112, 111, 4, 27, 72, b1 + 0, 4, b2 + 0, 27, b0 + 0, 27, 27, 0);
}

/* ---- segment 0: nodes [27] */
void lm_sgemm(int, int, long long, long long, long long, const float*, long long, const float*, long long, float*, long long, long long, long long);
long long lm_sgemm_gather(int, long long, long long, long long, const float*, long long, const float*, const long long*, float*, long long, long long, long long);
/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    lm_sgemm(111, 111, 72, 27, 4, b1 + 0, 4, b2 + 0, 27, b0 + 0, 27, 27, 0);
}

/* ---- segment 0: nodes [28, 29] */

/* add */
void lm_add_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for collapse(2) if((864) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 3; i1_++) {
            for (long long i2_ = 0; i2_ < 8; i2_++) {
                for (long long i3_ = 0; i3_ < 6; i3_++) {
                    for (long long i4_ = 0; i4_ < 3; i4_++) {
                        b0[(432*i0_ + 144*i1_ + 18*i2_ + 3*i3_ + i4_)] = (((((i2_ < 7) && (i2_ >= 1)) ? b1[(972*i0_ + 9*i1_ + 162*i2_ + 27*i3_ + i4_ - 159)] : 0.0f) + ((i2_ < 6) ? b1[(972*i0_ + 9*i1_ + 162*i2_ + 27*i3_ + i4_)] : 0.0f)) + ((i2_ >= 2) ? b1[(972*i0_ + 9*i1_ + 162*i2_ + 27*i3_ + i4_ - 318)] : 0.0f));
                    }
                }
            }
        }
    }
}

/* ---- segment 0: nodes [30, 31] */

/* add */
void lm_add_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for collapse(2) if((384) > 16384)
    for (long long i0_ = 0; i0_ < 2; i0_++) {
        for (long long i1_ = 0; i1_ < 3; i1_++) {
            for (long long i2_ = 0; i2_ < 8; i2_++) {
                for (long long i3_ = 0; i3_ < 8; i3_++) {
                    b0[(192*i0_ + 64*i1_ + 8*i2_ + i3_)] = (((((i3_ < 7) && (i3_ >= 1)) ? b1[(432*i0_ + 144*i1_ + 18*i2_ + 3*i3_ - 2)] : 0.0f) + ((i3_ < 6) ? b1[(432*i0_ + 144*i1_ + 18*i2_ + 3*i3_)] : 0.0f)) + ((i3_ >= 2) ? b1[(432*i0_ + 144*i1_ + 18*i2_ + 3*i3_ - 4)] : 0.0f));
                }
            }
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_contiguous_<hash>();
void lm_sgemm_<hash>();
void lm_add_<hash>();
void lm_sgemm_<hash>();
void lm_sgemm_<hash>();
void lm_add_<hash>();
void lm_add_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_contiguous_<hash>(b[2], b[0], d); }
    if (!k[1]) { lm_sgemm_<hash>(b[3], b[2], b[1], d); }
    if (!k[2]) { lm_add_<hash>(b[4], b[3], d); }
    if (!k[3]) { lm_sgemm_<hash>(b[5], b[4], b[2], d); }
    if (!k[4]) { lm_sgemm_<hash>(b[6], b[4], b[1], d); }
    if (!k[5]) { lm_add_<hash>(b[7], b[6], d); }
    if (!k[6]) { lm_add_<hash>(b[8], b[7], d); }
    return 0;
}
