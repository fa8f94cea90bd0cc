/* Q6_K: super-blocks of 256 values in 210 bytes, [ql: 128][qh: 64][16 x int8 scales]
   [d: f16]: two halves of 128; in half h, value 32g + l (g = 0..3) has its low 4 bits
   in ql[64h + l + 32(g & 1)] (low nibble for g < 2), its high 2 bits at bit 2g of
   qh[32h + l]; sub-blocks of 16 share a scale; w = (d * scale) * (q - 32). */
#define LQ_Q6_K_BYTES 210

static inline int lq_q6_k_value(const uint8_t* blk, int h, int g, int l) {
    const uint8_t low = blk[64 * h + l + 32 * (g & 1)];
    const int nibble = g < 2 ? (low & 0x0F) : (low >> 4);
    return (nibble | (((blk[128 + 32 * h + l] >> (2 * g)) & 3) << 4)) - 32;
}

static float lq_dot_q6_k(const uint8_t* w, const lq_acts* a, int k) {
    const int8_t* q = a->q;
    const float* d = a->d1;
    float sum = 0.0f;
#if defined(LQ_AVX2)
    __m256 acc = _mm256_setzero_ps();
    const __m256i mask4 = _mm256_set1_epi8(0x0F), mask2 = _mm256_set1_epi8(0x03);
    const __m256i offset = _mm256_set1_epi8(32);
#endif
    for (int sb = 0; sb < k / 256; sb++) {
        const uint8_t* blk = w + (long long)sb * LQ_Q6_K_BYTES;
        const int8_t* scales = (const int8_t*)(blk + 192);
        const float dd = lq_f16(blk + 208);
        for (int h = 0; h < 2; h++) {
#if defined(LQ_AVX2)
            const __m256i ql0 = lq_load32(blk + 64 * h), ql1 = lq_load32(blk + 64 * h + 32);
            const __m256i qh = lq_load32(blk + 128 + 32 * h);
            for (int g = 0; g < 4; g++) {
                const int b = 8 * sb + 4 * h + g; /* the activation block */
                const __m256i low_bytes = (g & 1) ? ql1 : ql0;
                const __m256i low = _mm256_and_si256(g < 2 ? low_bytes : _mm256_srli_epi16(low_bytes, 4), mask4);
                const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), mask2);
                const __m256i values = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), offset);
                const __m256 p = _mm256_cvtepi32_ps(lq_dot_s8s8(values, lq_load32(q + LQ_QK * b)));
                const float scale = dd * d[b];
                const int sub = 8 * h + 2 * g;
                const __m256 sv = _mm256_set_m128(_mm_set1_ps(scale * (float)scales[sub + 1]),
                                                  _mm_set1_ps(scale * (float)scales[sub]));
                acc = _mm256_fmadd_ps(sv, p, acc);
            }
#else
            for (int g = 0; g < 4; g++) {
                const int b = 8 * sb + 4 * h + g;
                int first = 0, second = 0;
                for (int l = 0; l < 16; l++) first += lq_q6_k_value(blk, h, g, l) * q[LQ_QK * b + l];
                for (int l = 16; l < 32; l++) second += lq_q6_k_value(blk, h, g, l) * q[LQ_QK * b + l];
                const int sub = 8 * h + 2 * g;
                sum += dd * d[b] * ((float)scales[sub] * (float)first + (float)scales[sub + 1] * (float)second);
            }
#endif
        }
    }
#if defined(LQ_AVX2)
    sum += lq_hsum8(acc);
#endif
    return sum;
}

static void lq_dequant_q6_k(const uint8_t* w, float* out, int k) {
    for (int sb = 0; sb < k / 256; sb++) {
        const uint8_t* blk = w + (long long)sb * LQ_Q6_K_BYTES;
        const int8_t* scales = (const int8_t*)(blk + 192);
        const float dd = lq_f16(blk + 208);
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 4; g++)
                for (int l = 0; l < 32; l++) {
                    const int position = 128 * h + 32 * g + l;
                    out[256 * sb + position] = dd * (float)scales[position / 16] * (float)lq_q6_k_value(blk, h, g, l);
                }
    }
}

/* float activations: per sub-block of 16, (d sc) sum((q - 32) x) */
static float lq_fdot_q6_k(const uint8_t* w, const float* x, const float* sx, int k) {
    (void)sx;
    float sum = 0.0f;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    const __m128i mask4 = _mm_set1_epi8(0x0F), mask2 = _mm_set1_epi8(0x03), offset = _mm_set1_epi8(32);
#endif
    for (int sb = 0; sb < k / 256; sb++) {
        const uint8_t* blk = w + (long long)sb * LQ_Q6_K_BYTES;
        const int8_t* scales = (const int8_t*)(blk + 192);
        const float dd = lq_f16(blk + 208);
        const float* xs = x + 256 * sb;
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 4; g++)
                for (int half = 0; half < 2; half++) { /* 16 values: l = 16 half .. */
                    const int l0 = 16 * half, sub = 8 * h + 2 * g + half;
#if defined(__AVX512F__)
                    const __m128i low_raw = _mm_loadu_si128((const __m128i*)(blk + 64 * h + l0 + 32 * (g & 1)));
                    const __m128i low = _mm_and_si128(g < 2 ? low_raw : _mm_srli_epi16(low_raw, 4), mask4);
                    const __m128i high_raw = _mm_loadu_si128((const __m128i*)(blk + 128 + 32 * h + l0));
                    const __m128i high = _mm_and_si128(_mm_srli_epi16(high_raw, 2 * g), mask2);
                    const __m128i q = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), offset);
                    const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
                    const __m512 t = _mm512_mul_ps(qf, _mm512_loadu_ps(xs + 128 * h + 32 * g + l0));
                    acc = _mm512_fmadd_ps(t, _mm512_set1_ps(dd * (float)scales[sub]), acc);
#else
                    float part = 0.0f;
                    for (int l = l0; l < l0 + 16; l++) part += (float)lq_q6_k_value(blk, h, g, l) * xs[128 * h + 32 * g + l];
                    sum += dd * (float)scales[sub] * part;
#endif
                }
    }
#if defined(__AVX512F__)
    sum += _mm512_reduce_add_ps(acc);
#endif
    return sum;
}
