/* golden source of tests/backends/golden_cases.py::integer_ops; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [5, 6, 8, 9, 10, 11, 12, 13, 17, 26, 29, 47, 48, 56, 65, 66, 67, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 91] */

/* mod_add_cast_recip */
void lm_mod_add_cast_recip_<hash>(int* restrict b0, const int* restrict b1, const int* restrict b2, const long long* restrict d) {
    #pragma omp parallel for if((32) > 16384)
    for (long long i0_ = 0; i0_ < 4; i0_++) {
        for (long long j0_ = 0; j0_ < 8; j0_++) {
            const int c1 = b1[(8*i0_ + j0_)];
            const int c2 = lm_iadd(lm_imul(lm_iadd(((c1 < (0)) ? 1 : 0), (((0) < c1) ? 1 : 0)), (-1)), (1));
            const int c3 = lm_iadd(c2, c1);
            const float c4 = (1.0f / ((float)(c3)));
            const int c5 = b2[(8*i0_ + j0_)];
            const int c6 = lm_float_to_int((c4 * ((float)(c5))));
            const int c7 = lm_iadd(lm_imul(lm_imul(c3, c6), (-1)), c5);
            const int c8 = lm_iadd(lm_imul((1024), (-1)), lm_float_to_int(((c4 * ((float)(c7))) + 1024.5f)));
            const int c9 = lm_imod_floor(c5, c3);
            const int c10 = lm_iadd(c7, lm_imul(lm_imul(c8, c3), (-1)));
            b0[(8*i0_ + j0_)] = lm_imul(lm_iadd(lm_iadd(c8, c6), lm_imul(lm_iadd(((c9 < c10) ? 1 : 0), ((c10 < c9) ? 1 : 0)), (-1))), lm_iadd(lm_imul(c2, (-1)), (1)));
        }
    }
}

/* ---- segment 0: nodes [51, 52, 53] */

/* mul_add_mod */
void lm_mul_add_mod_<hash>(int* restrict b0, const int* restrict b1, const int* restrict b2, const long long* restrict d) {
    #pragma omp parallel for if((32) > 16384)
    for (long long i0_ = 0; i0_ < 4; i0_++) {
        for (long long i1_ = 0; i1_ < 8; i1_++) {
            const int c1 = b1[(8*i0_ + i1_)];
            const int c2 = b2[(8*i0_ + i1_)];
            b0[(8*i0_ + i1_)] = lm_imod_floor(lm_iadd(lm_imul(c1, c2), c1), c2);
        }
    }
}

/* ---- segment 0: nodes [92] */

/* sumreduce */
void lm_sumreduce_<hash>(int* restrict b0, const int* restrict b1, const long long* restrict d) {
    #pragma omp parallel for if((32) > 16384)
    for (long long i0_ = 0; i0_ < 4; i0_++) {
        int acc = b1[8*i0_];
        acc = lm_iadd(acc, b1[(8*i0_ + 1)]);
        acc = lm_iadd(acc, b1[(8*i0_ + 2)]);
        acc = lm_iadd(acc, b1[(8*i0_ + 3)]);
        acc = lm_iadd(acc, b1[(8*i0_ + 4)]);
        acc = lm_iadd(acc, b1[(8*i0_ + 5)]);
        acc = lm_iadd(acc, b1[(8*i0_ + 6)]);
        acc = lm_iadd(acc, b1[(8*i0_ + 7)]);
        b0[i0_] = acc;
    }
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_mod_add_cast_recip_<hash>();
void lm_mul_add_mod_<hash>();
void lm_sumreduce_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_mod_add_cast_recip_<hash>(b[2], b[0], b[1], d); }
    if (!k[1]) { lm_mul_add_mod_<hash>(b[3], b[1], b[0], d); }
    if (!k[2]) { lm_sumreduce_<hash>(b[4], b[1], d); }
    return 0;
}
