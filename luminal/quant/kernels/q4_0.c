/* Q4_0: blocks of 18 bytes, [d: f16][16 bytes]; low nibbles are values 0..15, high
   nibbles 16..31; w = d * (q - 8). */
#define LQ_Q4_0_BYTES 18

#if defined(LQ_AVX2)
static inline __m256i lq_q4_0_values(const uint8_t* blk) {
    const __m128i raw = _mm_loadu_si128((const __m128i*)(blk + 2));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}
#endif

static float lq_dot_q4_0(const uint8_t* w, const int8_t* q, const float* d, const float* s, int k) {
    (void)s;
    const int nb = k / LQ_QK;
    int b = 0;
    float sum = 0.0f;
#if defined(LQ_AVX2)
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
        const uint8_t* b0 = w + (long long)b * LQ_Q4_0_BYTES;
        const uint8_t* b1 = b0 + LQ_Q4_0_BYTES;
        const __m256 p0 = _mm256_cvtepi32_ps(lq_dot_s8s8(lq_q4_0_values(b0), lq_load32(q + LQ_QK * b)));
        const __m256 p1 = _mm256_cvtepi32_ps(lq_dot_s8s8(lq_q4_0_values(b1), lq_load32(q + LQ_QK * (b + 1))));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(lq_f16(b0) * d[b]), p0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(lq_f16(b1) * d[b + 1]), p1, acc1);
    }
    sum = lq_hsum8(_mm256_add_ps(acc0, acc1));
#endif
    for (; b < nb; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q4_0_BYTES;
        const int8_t* qb = q + LQ_QK * b;
        int isum = 0;
        for (int i = 0; i < LQ_QK / 2; i++) {
            isum += ((blk[2 + i] & 0x0F) - 8) * qb[i];
            isum += ((blk[2 + i] >> 4) - 8) * qb[i + LQ_QK / 2];
        }
        sum += lq_f16(blk) * d[b] * (float)isum;
    }
    return sum;
}

static void lq_dequant_q4_0(const uint8_t* w, float* out, int k) {
    for (int b = 0; b < k / LQ_QK; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q4_0_BYTES;
        const float d = lq_f16(blk);
        float* o = out + LQ_QK * b;
        for (int i = 0; i < LQ_QK / 2; i++) {
            o[i] = d * (float)((blk[2 + i] & 0x0F) - 8);
            o[i + LQ_QK / 2] = d * (float)((blk[2 + i] >> 4) - 8);
        }
    }
}

/* float activations: sum_b d_b * (sum_i q_i x_i - 8 sx_b), sx_b = the block's sum of x */
static float lq_fdot_q4_0(const uint8_t* w, const float* x, const float* sx, int k) {
    const int nb = k / LQ_QK;
    float offset = 0.0f;
#if defined(__AVX512F__)
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const __m128i mask = _mm_set1_epi8(0x0F);
    for (int b = 0; b < nb; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q4_0_BYTES;
        const __m128i raw = _mm_loadu_si128((const __m128i*)(blk + 2));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw, mask)));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), mask)));
        const __m512 t = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + LQ_QK * b + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(x + LQ_QK * b)));
        const float d = lq_f16(blk);
        offset += d * sx[b];
        if (b & 1) acc1 = _mm512_fmadd_ps(t, _mm512_set1_ps(d), acc1);
        else acc0 = _mm512_fmadd_ps(t, _mm512_set1_ps(d), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) - 8.0f * offset;
#else
    float sum = 0.0f;
    for (int b = 0; b < nb; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q4_0_BYTES;
        float part = 0.0f;
        for (int i = 0; i < LQ_QK / 2; i++)
            part += (float)(blk[2 + i] & 0x0F) * x[LQ_QK * b + i] + (float)(blk[2 + i] >> 4) * x[LQ_QK * b + i + 16];
        const float d = lq_f16(blk);
        sum += d * part;
        offset += d * sx[b];
    }
    return sum - 8.0f * offset;
#endif
}
