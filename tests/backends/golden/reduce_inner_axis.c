/* golden source of tests/backends/golden_cases.py::reduce_inner_axis; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [3] */

/* sumreduce */
void lm_sumreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for if((2880) > 16384)
    for (long long i0_ = 0; i0_ < 6; i0_++) {
        for (long long i1_ = 0; i1_ < 12; i1_++) {
            b0[(12*i0_ + i1_)] = 0.0f;
        }
        for (long long r0_ = 0; r0_ < 40; r0_++) {
            for (long long i1_ = 0; i1_ < 12; i1_++) {
                b0[(12*i0_ + i1_)] = (b0[(12*i0_ + i1_)] + b1[(480*i0_ + i1_ + 12*r0_)]);
            }
        }
    }
}

/* ---- segment 0: nodes [4] */

/* maxreduce */
void lm_maxreduce_<hash>(float* restrict b0, const float* restrict b1, const long long* restrict d) {
    #pragma omp parallel for if((2880) > 16384)
    for (long long i0_ = 0; i0_ < 40; i0_++) {
        for (long long i1_ = 0; i1_ < 12; i1_++) {
            float acc = b1[(12*i0_ + i1_)];
            { const float v1 = b1[(12*i0_ + i1_ + 480)]; acc = lm_max_nan(acc, v1); }
            { const float v2 = b1[(12*i0_ + i1_ + 960)]; acc = lm_max_nan(acc, v2); }
            { const float v3 = b1[(12*i0_ + i1_ + 1440)]; acc = lm_max_nan(acc, v3); }
            { const float v4 = b1[(12*i0_ + i1_ + 1920)]; acc = lm_max_nan(acc, v4); }
            { const float v5 = b1[(12*i0_ + i1_ + 2400)]; acc = lm_max_nan(acc, v5); }
            b0[(12*i0_ + i1_)] = acc;
        }
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_sumreduce_<hash>();
void lm_maxreduce_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_sumreduce_<hash>(b[1], b[0], d); }
    if (!k[1]) { lm_maxreduce_<hash>(b[2], b[0], d); }
    return 0;
}
