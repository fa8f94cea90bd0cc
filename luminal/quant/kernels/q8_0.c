/* Q8_0: blocks of 34 bytes, [d: f16][q: 32 x int8]; w = d * q. */
#define LQ_Q8_0_BYTES 34

static inline int lq_q8_0_block_dot(const uint8_t* blk, const int8_t* q) {
#if defined(LQ_AVX2)
    const __m256i p = lq_dot_s8s8(lq_load32(blk + 2), lq_load32(q));
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 0xB1)));
#else
    const int8_t* wq = (const int8_t*)(blk + 2);
    int isum = 0;
    for (int i = 0; i < LQ_QK; i++) isum += wq[i] * q[i];
    return isum;
#endif
}

/* integer dots (see lq_acts); with VNNI, w + 128 (unsigned) times q, less 128 * sum(q) */
static float lq_dot_q8_0(const uint8_t* w, const lq_acts* a, int k) {
    const int nb = k / LQ_QK;
    int b = 0;
    float sum = 0.0f;
#if defined(LQ_VNNI512)
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512 acc = _mm512_setzero_ps();
    for (; b + 16 <= nb; b += 16) {
        const uint8_t* p = w + (long long)b * LQ_Q8_0_BYTES;
        __m512i g[4];
        for (int i = 0; i < 4; i++) {
            const uint8_t* blk = p + 4 * i * LQ_Q8_0_BYTES;
            const long long at = LQ_QK * (b + 4 * i);
            const __m512i first = _mm512_xor_si512(lq_load4x16(blk + 2, LQ_Q8_0_BYTES), bias);
            const __m512i second = _mm512_xor_si512(lq_load4x16(blk + 18, LQ_Q8_0_BYTES), bias);
            g[i] = lq_dot2_levels(first, second, a->qi + at, a->q2i ? a->q2i + at : NULL);
        }
        const __m512i offset = _mm512_slli_epi32(_mm512_loadu_si512(a->qsum + b), 7);
        const __m512 dots = _mm512_cvtepi32_ps(_mm512_sub_epi32(lq_sum16(g), offset));
        const __m512 scales = _mm512_mul_ps(lq_f16x16(p, LQ_Q8_0_BYTES), _mm512_loadu_ps(a->scale + b));
        acc = _mm512_fmadd_ps(scales, dots, acc);
    }
    sum = _mm512_reduce_add_ps(acc);
#endif
    for (; b < nb; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q8_0_BYTES;
        int isum = lq_q8_0_block_dot(blk, a->q + LQ_QK * b);
        if (a->q2) isum = 256 * isum + lq_q8_0_block_dot(blk, a->q2 + LQ_QK * b);
        sum += lq_f16(blk) * a->scale[b] * (float)isum;
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

#if defined(LQ_VNNI512)
/* `rows` (<= 16) packed rows -> the tile path's interleaved bytes (q + 128) and per-block
   scales (rows past `rows`: scale 0) */
static void lq_repack_q8_0(const uint8_t* w, long long row_bytes, int rows, int k, uint8_t* bytes,
                           float* scales) {
    uint8_t values[16][LQ_QK];
    memset(values, 0, sizeof(values));
    for (int b = 0; b < k / LQ_QK; b++) {
        for (int c = 0; c < 16; c++) {
            const uint8_t* blk = w + c * row_bytes + (long long)b * LQ_Q8_0_BYTES;
            scales[16 * b + c] = c < rows ? lq_f16(blk) : 0.0f;
            if (c < rows)
                for (int i = 0; i < LQ_QK; i++) values[c][i] = (uint8_t)(blk[2 + i] ^ 0x80);
        }
        uint8_t* dst = bytes + (long long)b * 16 * LQ_QK;
        for (int g = 0; g < LQ_QK / 4; g++)
            for (int c = 0; c < 16; c++) memcpy(dst + 64 * g + 4 * c, values[c] + 4 * g, 4);
    }
}
#else
#define lq_repack_q8_0 lq_no_repack
#endif
