/* Q8_0: blocks of 34 bytes, [d: f16][q: 32 x int8]; w = d * q. */
#define LQ_Q8_0_BYTES 34

static float lq_dot_q8_0(const uint8_t* w, const int8_t* q, const float* d, const float* s, int k) {
    (void)s;
    const int nb = k / LQ_QK;
    int b = 0;
    float sum = 0.0f;
#if defined(LQ_AVX2)
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
        const uint8_t* b0 = w + (long long)b * LQ_Q8_0_BYTES;
        const uint8_t* b1 = b0 + LQ_Q8_0_BYTES;
        const __m256 p0 = _mm256_cvtepi32_ps(lq_dot_s8s8(lq_load32(b0 + 2), lq_load32(q + LQ_QK * b)));
        const __m256 p1 = _mm256_cvtepi32_ps(lq_dot_s8s8(lq_load32(b1 + 2), lq_load32(q + LQ_QK * (b + 1))));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(lq_f16(b0) * d[b]), p0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(lq_f16(b1) * d[b + 1]), p1, acc1);
    }
    sum = lq_hsum8(_mm256_add_ps(acc0, acc1));
#endif
    for (; b < nb; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q8_0_BYTES;
        const int8_t* wq = (const int8_t*)(blk + 2);
        int isum = 0;
        for (int i = 0; i < LQ_QK; i++) isum += wq[i] * q[LQ_QK * b + i];
        sum += lq_f16(blk) * d[b] * (float)isum;
    }
    return sum;
}

static void lq_dequant_q8_0(const uint8_t* w, float* out, int k) {
    for (int b = 0; b < k / LQ_QK; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q8_0_BYTES;
        const float d = lq_f16(blk);
        const int8_t* wq = (const int8_t*)(blk + 2);
        for (int i = 0; i < LQ_QK; i++) out[LQ_QK * b + i] = (float)wq[i] * d;
    }
}

/* float activations x (k) and per-block sums sx (unused here) */
static float lq_fdot_q8_0(const uint8_t* w, const float* x, const float* sx, int k) {
    (void)sx;
    const int nb = k / LQ_QK;
#if defined(__AVX512F__)
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q8_0_BYTES;
        const __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(blk + 2))));
        const __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(blk + 18))));
        const __m512 t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + LQ_QK * b + 16), _mm512_mul_ps(w0, _mm512_loadu_ps(x + LQ_QK * b)));
        if (b & 1) acc1 = _mm512_fmadd_ps(t, _mm512_set1_ps(lq_f16(blk)), acc1);
        else acc0 = _mm512_fmadd_ps(t, _mm512_set1_ps(lq_f16(blk)), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#else
    float sum = 0.0f;
    for (int b = 0; b < nb; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q8_0_BYTES;
        const int8_t* wq = (const int8_t*)(blk + 2);
        float part = 0.0f;
        for (int i = 0; i < LQ_QK; i++) part += (float)wq[i] * x[LQ_QK * b + i];
        sum += lq_f16(blk) * part;
    }
    return sum;
#endif
}
