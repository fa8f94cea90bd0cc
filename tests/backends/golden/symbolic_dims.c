/* golden source of tests/backends/golden_cases.py::symbolic_dims; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [17] */
void lm_sgemm(int, int, long long, long long, long long, const float*, long long, const float*, long long, float*, long long, long long, long long);
long long lm_sgemm_gather(int, long long, long long, long long, const float*, long long, const float*, const long long*, float*, long long, long long, long long);
/* sgemm */
void lm_sgemm_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const long long* restrict d) {
    const long long dim_batch = d[0]; (void)dim_batch;
    lm_sgemm(111, 111, dim_batch, 8, 16, b1 + 0, 16, b2 + 0, 8, b0 + 0, 8, 8, 0);
}

/* ---- segment 0: nodes [8, 18, 19, 20, 21, 23, 24, 25, 26, 27] */

/* recip_sumreduce_exp2_maxreduce */
void lm_recip_sumreduce_exp2_maxreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    const long long dim_batch = d[0]; (void)dim_batch;
    #pragma omp parallel for if((8*dim_batch) > 16384)
    for (long long i0_ = 0; i0_ < dim_batch; i0_++) {
        float s1 = (-INFINITY);
        int s1_nan = 0;
        #pragma omp simd reduction(max:s1) reduction(|:s1_nan)
        for (long long j0_ = 0; j0_ < 8; j0_++) {
            const float v = b1[(8*i0_ + j0_)];
            s1 = v > s1 ? v : s1;
            s1_nan |= (v != v);
        }
        if (s1_nan) s1 = NAN;
        float s2 = 0.0f;
        #pragma omp simd reduction(+:s2)
        for (long long j0_ = 0; j0_ < 8; j0_++) {
            const float v = exp2f((((s1 * -1.0f) + b1[(8*i0_ + j0_)]) * 1.4426950408889634f));
            b0[(8*i0_ + j0_)] = v;
            s2 += v;
        }
        const float s3 = (1.0f / s2);
        for (long long j0_ = 0; j0_ < 8; j0_++) {
            b0[(8*i0_ + j0_)] = (b0[(8*i0_ + j0_)] * s3);
        }
    }
}

/* ---- segment 0: nodes [14] */

/* sumreduce */
void lm_sumreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    const long long dim_batch = d[0]; (void)dim_batch;
    for (long long i0_ = 0; i0_ < 16; i0_++) {
        b0[i0_] = 0.0f;
    }
    for (long long r0_ = 0; r0_ < dim_batch; r0_++) {
        for (long long i0_ = 0; i0_ < 16; i0_++) {
            b0[i0_] = (b0[i0_] + b1[(i0_ + 16*r0_)]);
        }
    }
}

/* ---- segment 0: nodes [15, 30] */

/* constant_mul */
void lm_constant_mul_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    const long long dim_batch = d[0]; (void)dim_batch;
    #pragma omp parallel for if((16) > 16384)
    for (long long i0_ = 0; i0_ < 16; i0_++) {
        b0[i0_] = (b1[i0_] * 0.5f);
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_sgemm_<hash>();
void lm_recip_sumreduce_exp2_maxreduce_<hash>();
void lm_sumreduce_<hash>();
void lm_constant_mul_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_sgemm_<hash>(b[2], b[0], b[1], d); }
    if (!k[1]) { lm_recip_sumreduce_exp2_maxreduce_<hash>(b[3], b[2], d); }
    if (!k[2]) { lm_sumreduce_<hash>(b[4], b[0], d); }
    if (!k[3]) { lm_constant_mul_<hash>(b[5], b[4], d); }
    return 0;
}
