/* golden source of tests/backends/golden_cases.py::matmul_epilogue; accept changes with
   LUMINAL_ACCEPT_GOLDEN=1 .venv/bin/pytest tests/backends/test_golden_kernels.py */

/* ---- segment 0: nodes [7, 8, 9] */
/* luminal matmul lm_matmul_epilogue_<hash>_mm: C 24x16 (ldc=16) = relu(a @ b + bias[N])
 * A 24x40 lda=40; B 40x16 stored transposed (ldb=40).
 * schedule mr8_nr32_mc128_nc512_kc256_v512_u2_par-n_pack-B
 *   register tile 8x32 (2 x 512-bit vectors per row), cache tiles mc=24 nc=32 kc=40,
 *   k loop unrolled 2, OpenMP over n, A read in place, B packed */
#include <stdlib.h>
#include <omp.h>

typedef float lm_matmul_epilogue_<hash>_mm_vf __attribute__((vector_size(64)));
typedef float lm_matmul_epilogue_<hash>_mm_vfu __attribute__((vector_size(64), aligned(4)));
typedef int lm_matmul_epilogue_<hash>_mm_vi __attribute__((vector_size(64)));

/* relu that keeps NaN: clear the lanes that compare below zero */
static inline lm_matmul_epilogue_<hash>_mm_vf lm_matmul_epilogue_<hash>_mm_relu(lm_matmul_epilogue_<hash>_mm_vf x)
{
    lm_matmul_epilogue_<hash>_mm_vi negative = x < (lm_matmul_epilogue_<hash>_mm_vf){0};
    return (lm_matmul_epilogue_<hash>_mm_vf)((lm_matmul_epilogue_<hash>_mm_vi)x & ~negative);
}

/* one A micro-panel: rows i0..i0+rows of A, k = pc..pc+kc, stored k-major
   (dst[p * 8 + r]) with rows past `rows` zero */
static void lm_matmul_epilogue_<hash>_mm_pack_a(float* restrict dst, const float* restrict a, long i0,
        long rows, long pc, long kc)
{
    for (long p = 0; p < kc; p++) {
        for (long r = 0; r < rows; r++) dst[p * 8 + r] = a[(i0 + r) * 40 + (pc + p)];
        for (long r = rows; r < 8; r++) dst[p * 8 + r] = 0.0f;
    }
}

/* dst[r * ldd + c] = src[c * lds + r] for a 16x16 block */
static inline void lm_matmul_epilogue_<hash>_mm_transpose(float* restrict dst, long ldd,
        const float* restrict src, long lds)
{
    lm_matmul_epilogue_<hash>_mm_vf r0 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 0 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r1 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 1 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r2 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 2 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r3 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 3 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r4 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 4 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r5 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 5 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r6 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 6 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r7 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 7 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r8 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 8 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r9 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 9 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r10 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 10 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r11 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 11 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r12 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 12 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r13 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 13 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r14 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 14 * lds);
    lm_matmul_epilogue_<hash>_mm_vf r15 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(src + 15 * lds);
    lm_matmul_epilogue_<hash>_mm_vf t;
    /* swap bit 8 of row and column: rows i and i + 8 exchange halves */
    const lm_matmul_epilogue_<hash>_mm_vi low8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    const lm_matmul_epilogue_<hash>_mm_vi high8 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
    t = r0; r0 = __builtin_shuffle(t, r8, low8);
    r8 = __builtin_shuffle(t, r8, high8);
    t = r1; r1 = __builtin_shuffle(t, r9, low8);
    r9 = __builtin_shuffle(t, r9, high8);
    t = r2; r2 = __builtin_shuffle(t, r10, low8);
    r10 = __builtin_shuffle(t, r10, high8);
    t = r3; r3 = __builtin_shuffle(t, r11, low8);
    r11 = __builtin_shuffle(t, r11, high8);
    t = r4; r4 = __builtin_shuffle(t, r12, low8);
    r12 = __builtin_shuffle(t, r12, high8);
    t = r5; r5 = __builtin_shuffle(t, r13, low8);
    r13 = __builtin_shuffle(t, r13, high8);
    t = r6; r6 = __builtin_shuffle(t, r14, low8);
    r14 = __builtin_shuffle(t, r14, high8);
    t = r7; r7 = __builtin_shuffle(t, r15, low8);
    r15 = __builtin_shuffle(t, r15, high8);
    /* swap bit 4 of row and column: rows i and i + 4 exchange halves */
    const lm_matmul_epilogue_<hash>_mm_vi low4 = {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27};
    const lm_matmul_epilogue_<hash>_mm_vi high4 = {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31};
    t = r0; r0 = __builtin_shuffle(t, r4, low4);
    r4 = __builtin_shuffle(t, r4, high4);
    t = r1; r1 = __builtin_shuffle(t, r5, low4);
    r5 = __builtin_shuffle(t, r5, high4);
    t = r2; r2 = __builtin_shuffle(t, r6, low4);
    r6 = __builtin_shuffle(t, r6, high4);
    t = r3; r3 = __builtin_shuffle(t, r7, low4);
    r7 = __builtin_shuffle(t, r7, high4);
    t = r8; r8 = __builtin_shuffle(t, r12, low4);
    r12 = __builtin_shuffle(t, r12, high4);
    t = r9; r9 = __builtin_shuffle(t, r13, low4);
    r13 = __builtin_shuffle(t, r13, high4);
    t = r10; r10 = __builtin_shuffle(t, r14, low4);
    r14 = __builtin_shuffle(t, r14, high4);
    t = r11; r11 = __builtin_shuffle(t, r15, low4);
    r15 = __builtin_shuffle(t, r15, high4);
    /* swap bit 2 of row and column: rows i and i + 2 exchange halves */
    const lm_matmul_epilogue_<hash>_mm_vi low2 = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
    const lm_matmul_epilogue_<hash>_mm_vi high2 = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};
    t = r0; r0 = __builtin_shuffle(t, r2, low2);
    r2 = __builtin_shuffle(t, r2, high2);
    t = r1; r1 = __builtin_shuffle(t, r3, low2);
    r3 = __builtin_shuffle(t, r3, high2);
    t = r4; r4 = __builtin_shuffle(t, r6, low2);
    r6 = __builtin_shuffle(t, r6, high2);
    t = r5; r5 = __builtin_shuffle(t, r7, low2);
    r7 = __builtin_shuffle(t, r7, high2);
    t = r8; r8 = __builtin_shuffle(t, r10, low2);
    r10 = __builtin_shuffle(t, r10, high2);
    t = r9; r9 = __builtin_shuffle(t, r11, low2);
    r11 = __builtin_shuffle(t, r11, high2);
    t = r12; r12 = __builtin_shuffle(t, r14, low2);
    r14 = __builtin_shuffle(t, r14, high2);
    t = r13; r13 = __builtin_shuffle(t, r15, low2);
    r15 = __builtin_shuffle(t, r15, high2);
    /* swap bit 1 of row and column: rows i and i + 1 exchange halves */
    const lm_matmul_epilogue_<hash>_mm_vi low1 = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
    const lm_matmul_epilogue_<hash>_mm_vi high1 = {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31};
    t = r0; r0 = __builtin_shuffle(t, r1, low1);
    r1 = __builtin_shuffle(t, r1, high1);
    t = r2; r2 = __builtin_shuffle(t, r3, low1);
    r3 = __builtin_shuffle(t, r3, high1);
    t = r4; r4 = __builtin_shuffle(t, r5, low1);
    r5 = __builtin_shuffle(t, r5, high1);
    t = r6; r6 = __builtin_shuffle(t, r7, low1);
    r7 = __builtin_shuffle(t, r7, high1);
    t = r8; r8 = __builtin_shuffle(t, r9, low1);
    r9 = __builtin_shuffle(t, r9, high1);
    t = r10; r10 = __builtin_shuffle(t, r11, low1);
    r11 = __builtin_shuffle(t, r11, high1);
    t = r12; r12 = __builtin_shuffle(t, r13, low1);
    r13 = __builtin_shuffle(t, r13, high1);
    t = r14; r14 = __builtin_shuffle(t, r15, low1);
    r15 = __builtin_shuffle(t, r15, high1);
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 0 * ldd) = r0;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 1 * ldd) = r1;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 2 * ldd) = r2;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 3 * ldd) = r3;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 4 * ldd) = r4;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 5 * ldd) = r5;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 6 * ldd) = r6;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 7 * ldd) = r7;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 8 * ldd) = r8;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 9 * ldd) = r9;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 10 * ldd) = r10;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 11 * ldd) = r11;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 12 * ldd) = r12;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 13 * ldd) = r13;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 14 * ldd) = r14;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(dst + 15 * ldd) = r15;
}

/* one B micro-panel: columns j0..j0+cols of B, k = pc..pc+kc, stored k-major
   (dst[p * 32 + j]) with columns past `cols` zero */
static void lm_matmul_epilogue_<hash>_mm_pack_b(float* restrict dst, const float* restrict b, long j0,
        long cols, long pc, long kc)
{
    if (cols == 32) {
        long p0 = 0;
        for (; p0 + 16 <= kc; p0 += 16)
            for (long g = 0; g < 32; g += 16)
                lm_matmul_epilogue_<hash>_mm_transpose(dst + p0 * 32 + g, 32, b + (j0 + g) * 40 + pc + p0, 40);
        for (long p = p0; p < kc; p++)
            for (long j = 0; j < 32; j++) dst[p * 32 + j] = b[(j0 + j) * 40 + (pc + p)];
        return;
    }
    for (long p = 0; p < kc; p++) {
        for (long j = 0; j < cols; j++) dst[p * 32 + j] = b[(j0 + j) * 40 + (pc + p)];
        for (long j = cols; j < 32; j++) dst[p * 32 + j] = 0.0f;
    }
}

/* 8x32 tile; A in place, B packed */
static inline __attribute__((always_inline)) void lm_matmul_epilogue_<hash>_mm_micro_dp(long kc,
        const float* restrict ap, const float* restrict bp, float* restrict c, long ldc,
        int first, int last, const float* restrict bias, const float* restrict res)
{
    lm_matmul_epilogue_<hash>_mm_vf c0_0 = {0}; lm_matmul_epilogue_<hash>_mm_vf c0_1 = {0};
    lm_matmul_epilogue_<hash>_mm_vf c1_0 = {0}; lm_matmul_epilogue_<hash>_mm_vf c1_1 = {0};
    lm_matmul_epilogue_<hash>_mm_vf c2_0 = {0}; lm_matmul_epilogue_<hash>_mm_vf c2_1 = {0};
    lm_matmul_epilogue_<hash>_mm_vf c3_0 = {0}; lm_matmul_epilogue_<hash>_mm_vf c3_1 = {0};
    lm_matmul_epilogue_<hash>_mm_vf c4_0 = {0}; lm_matmul_epilogue_<hash>_mm_vf c4_1 = {0};
    lm_matmul_epilogue_<hash>_mm_vf c5_0 = {0}; lm_matmul_epilogue_<hash>_mm_vf c5_1 = {0};
    lm_matmul_epilogue_<hash>_mm_vf c6_0 = {0}; lm_matmul_epilogue_<hash>_mm_vf c6_1 = {0};
    lm_matmul_epilogue_<hash>_mm_vf c7_0 = {0}; lm_matmul_epilogue_<hash>_mm_vf c7_1 = {0};
    #pragma GCC unroll 2
    for (long p = 0; p < kc; p++) {
        const lm_matmul_epilogue_<hash>_mm_vf b0 = *(const lm_matmul_epilogue_<hash>_mm_vf*)(bp + p * 32 + 0);
        const lm_matmul_epilogue_<hash>_mm_vf b1 = *(const lm_matmul_epilogue_<hash>_mm_vf*)(bp + p * 32 + 16);
        const float a0 = ap[p + 0];
        c0_0 += a0 * b0; c0_1 += a0 * b1;
        const float a1 = ap[p + 40];
        c1_0 += a1 * b0; c1_1 += a1 * b1;
        const float a2 = ap[p + 80];
        c2_0 += a2 * b0; c2_1 += a2 * b1;
        const float a3 = ap[p + 120];
        c3_0 += a3 * b0; c3_1 += a3 * b1;
        const float a4 = ap[p + 160];
        c4_0 += a4 * b0; c4_1 += a4 * b1;
        const float a5 = ap[p + 200];
        c5_0 += a5 * b0; c5_1 += a5 * b1;
        const float a6 = ap[p + 240];
        c6_0 += a6 * b0; c6_1 += a6 * b1;
        const float a7 = ap[p + 280];
        c7_0 += a7 * b0; c7_1 += a7 * b1;
    }
    if (!first) {
        c0_0 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 0 * ldc + 0);
        c0_1 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 0 * ldc + 16);
        c1_0 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 1 * ldc + 0);
        c1_1 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 1 * ldc + 16);
        c2_0 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 2 * ldc + 0);
        c2_1 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 2 * ldc + 16);
        c3_0 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 3 * ldc + 0);
        c3_1 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 3 * ldc + 16);
        c4_0 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 4 * ldc + 0);
        c4_1 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 4 * ldc + 16);
        c5_0 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 5 * ldc + 0);
        c5_1 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 5 * ldc + 16);
        c6_0 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 6 * ldc + 0);
        c6_1 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 6 * ldc + 16);
        c7_0 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 7 * ldc + 0);
        c7_1 += *(const lm_matmul_epilogue_<hash>_mm_vfu*)(c + 7 * ldc + 16);
    }
    if (last) {
        const lm_matmul_epilogue_<hash>_mm_vf bias0 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(bias + 0);
        const lm_matmul_epilogue_<hash>_mm_vf bias1 = *(const lm_matmul_epilogue_<hash>_mm_vfu*)(bias + 16);
        c0_0 += bias0; c0_1 += bias1;
        c1_0 += bias0; c1_1 += bias1;
        c2_0 += bias0; c2_1 += bias1;
        c3_0 += bias0; c3_1 += bias1;
        c4_0 += bias0; c4_1 += bias1;
        c5_0 += bias0; c5_1 += bias1;
        c6_0 += bias0; c6_1 += bias1;
        c7_0 += bias0; c7_1 += bias1;
        c0_0 = lm_matmul_epilogue_<hash>_mm_relu(c0_0); c0_1 = lm_matmul_epilogue_<hash>_mm_relu(c0_1);
        c1_0 = lm_matmul_epilogue_<hash>_mm_relu(c1_0); c1_1 = lm_matmul_epilogue_<hash>_mm_relu(c1_1);
        c2_0 = lm_matmul_epilogue_<hash>_mm_relu(c2_0); c2_1 = lm_matmul_epilogue_<hash>_mm_relu(c2_1);
        c3_0 = lm_matmul_epilogue_<hash>_mm_relu(c3_0); c3_1 = lm_matmul_epilogue_<hash>_mm_relu(c3_1);
        c4_0 = lm_matmul_epilogue_<hash>_mm_relu(c4_0); c4_1 = lm_matmul_epilogue_<hash>_mm_relu(c4_1);
        c5_0 = lm_matmul_epilogue_<hash>_mm_relu(c5_0); c5_1 = lm_matmul_epilogue_<hash>_mm_relu(c5_1);
        c6_0 = lm_matmul_epilogue_<hash>_mm_relu(c6_0); c6_1 = lm_matmul_epilogue_<hash>_mm_relu(c6_1);
        c7_0 = lm_matmul_epilogue_<hash>_mm_relu(c7_0); c7_1 = lm_matmul_epilogue_<hash>_mm_relu(c7_1);
    }
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 0 * ldc + 0) = c0_0; *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 0 * ldc + 16) = c0_1;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 1 * ldc + 0) = c1_0; *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 1 * ldc + 16) = c1_1;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 2 * ldc + 0) = c2_0; *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 2 * ldc + 16) = c2_1;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 3 * ldc + 0) = c3_0; *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 3 * ldc + 16) = c3_1;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 4 * ldc + 0) = c4_0; *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 4 * ldc + 16) = c4_1;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 5 * ldc + 0) = c5_0; *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 5 * ldc + 16) = c5_1;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 6 * ldc + 0) = c6_0; *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 6 * ldc + 16) = c6_1;
    *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 7 * ldc + 0) = c7_0; *(lm_matmul_epilogue_<hash>_mm_vfu*)(c + 7 * ldc + 16) = c7_1;
}

/* register tiles of the block rows ic..ic+mc, columns jc+jr0..jc+jr1, k = pc..pc+kc */
static void lm_matmul_epilogue_<hash>_mm_block(float* restrict c, const float* restrict a,
        const float* restrict b, const float* restrict apack,
        const float* restrict bpack,
        long ic, long mc, long jc, long nc, long jr0, long jr1, long pc, long kc,
        int first, int last, const float* bias, const float* res)
{
    (void)a; (void)b; (void)bias; (void)res; (void)nc;
    for (long ir = 0; ir < mc; ir += 8) {
        const long rows = mc - ir < 8 ? mc - ir : 8;
        const long i = ic + ir;
        const float* ap = rows < 8 ? apack + ir * kc : a + (i) * 40 + (pc);
        for (long jr = jr0; jr < jr1; jr += 32) {
            const long cols = jr1 - jr < 32 ? jr1 - jr : 32;
            const long j = jc + jr;
            const float* bp = bpack + jr * kc;
            float* ct = c + i * 16 + j;
            if (rows == 8 && cols == 32) {
                lm_matmul_epilogue_<hash>_mm_micro_dp(kc, ap, bp, ct, 16, first, last, bias + j, 0);
                continue;
            }
            float tile[256] __attribute__((aligned(64)));
            lm_matmul_epilogue_<hash>_mm_micro_dp(kc, ap, bp, tile, 32, 1, 0, 0, 0);
            for (long r = 0; r < rows; r++) {
                for (long q = 0; q < cols; q++) {
                    float v = tile[r * 32 + q];
                    if (!first) v += ct[r * 16 + q];
                    if (last) {
                        v += bias[j + q];
                        v = v < 0.0f ? 0.0f : v;
                    }
                    ct[r * 16 + q] = v;
                }
            }
        }
    }
}

long long lm_matmul_epilogue_<hash>_mm(float* restrict c, const float* restrict a, const float* restrict b,
        const float* bias, const float* residual)
{
    float* bpack = (float*)aligned_alloc(64, 5120);
    float* apacks = 0;
    if (!bpack) {
        free(apacks); free(bpack); return (long long)(5120);
    }
    #pragma omp parallel
    {
        float* apack = apacks;
        for (long jc = 0; jc < 16; jc += 32) {
            const long nc = 16 - jc < 32 ? 16 - jc : 32;
            const long panels = (nc + 31) / 32;
            const long t = omp_get_thread_num(), threads = omp_get_num_threads();
            const long lo = panels * t / threads * 32;
            const long hi_ = panels * (t + 1) / threads * 32, hi = hi_ < nc ? hi_ : nc;
            for (long pc = 0; pc < 40; pc += 40) {
                const long kc = 40 - pc < 40 ? 40 - pc : 40;
                const int first = pc == 0, last = pc + kc == 40;
                for (long q = lo; q < hi; q += 32) {
                    const long cols = nc - q < 32 ? nc - q : 32;
                    lm_matmul_epilogue_<hash>_mm_pack_b(bpack + q * kc, b, jc + q, cols, pc, kc);
                }
                for (long ic = 0; ic < 24; ic += 24) {
                    const long mc = 24 - ic < 24 ? 24 - ic : 24;
                    lm_matmul_epilogue_<hash>_mm_block(c, a, b, apack, bpack, ic, mc, jc, nc, lo, hi, pc, kc,
                            first, last, bias, residual);
                    #pragma omp barrier
                }
            }
        }
    }
    free(apacks);
    free(bpack);
    return 0;
}

/* matmul_epilogue */
void lm_matmul_epilogue_<hash>(float* restrict b0, const float* restrict b1, const float* restrict b2, const float* restrict b3, const long long* restrict d, long long* restrict lm_fault) {
    const long long failed_ = lm_matmul_epilogue_<hash>_mm(b0 + 0, b1 + 0, b2 + 0, b3 + 0, 0);
    if (failed_) lm_fault_alloc(lm_fault, failed_);
}

/* ---- runners */
typedef void (*lm_kernel_fn)(void);
void lm_matmul_epilogue_<hash>();
int lm_run_segment_0(void** b, const long long* d, long long* s, const unsigned char* k) {
    s[0] = 0;
    if (!k[0]) { lm_matmul_epilogue_<hash>(b[3], b[0], b[1], b[2], d, s); if (s[0]) { s[3] = 0; return 1; } }
    return 0;
}
