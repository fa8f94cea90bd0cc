/* Q4_K: super-blocks of 256 values in 144 bytes, [d: f16][dmin: f16][12 bytes of 6-bit
   scales and mins][128 bytes]: 8 sub-blocks of 32; byte chunk c holds sub-block 2c in
   its low nibbles and 2c+1 in its high ones; w = (d * scale_j) * q - dmin * min_j. */
#define LQ_Q4_K_BYTES 144

/* llama.cpp's word-wise unpacking of the 12 bytes: the 8 scales are the bytes of u[0],
   u[1]; the 8 mins those of u[2], u[3] */
static inline void lq_q4_k_words(const uint8_t* p, uint32_t u[4]) {
    memcpy(u, p, 12);
    u[3] = ((u[2] >> 4) & 0x0F0F0F0F) | (((u[1] >> 6) & 0x03030303) << 4);
    const uint32_t low_mins = u[1] & 0x3F3F3F3F;
    u[1] = (u[2] & 0x0F0F0F0F) | (((u[0] >> 6) & 0x03030303) << 4);
    u[2] = low_mins;
    u[0] &= 0x3F3F3F3F;
}

static inline void lq_q4_k_scales(const uint8_t* p, uint8_t* scales, uint8_t* mins) {
    uint32_t u[4];
    lq_q4_k_words(p, u);
    memcpy(scales, u, 8);
    memcpy(mins, u + 2, 8);
}

/* sum of nibbles (low or high ones of 32 bytes) times 32 activations */
static inline int lq_q4_k_sub_dot(const uint8_t* qs, int high, const int8_t* q) {
#if defined(LQ_AVX2)
    const __m256i raw = lq_load32(qs);
    const __m256i nibbles = _mm256_and_si256(high ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(0x0F));
    const __m256i p = lq_dot_u8s8(nibbles, lq_load32(q));
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 0xB1)));
#else
    int isum = 0;
    for (int i = 0; i < 32; i++) isum += (high ? qs[i] >> 4 : qs[i] & 0x0F) * q[i];
    return isum;
#endif
}

/* integer dots (see lq_acts): per sub-block j, (d sc_j) * scale * dot - (dmin m_j) * scale * qsum */
static float lq_dot_q4_k(const uint8_t* w, const lq_acts* a, int k) {
    const int nsb = k / 256;
    float sum = 0.0f, offset = 0.0f;
    int sb = 0;
#if defined(LQ_VNNI512)
    const __m512i mask = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps(), offsets = _mm512_setzero_ps();
    for (; sb + 2 <= nsb; sb += 2) {
        __m512i g[4];
        uint32_t words[2][4];
        float dd[2], dmin[2];
        for (int u = 0; u < 2; u++) {
            const uint8_t* blk = w + (long long)(sb + u) * LQ_Q4_K_BYTES;
            dd[u] = lq_f16(blk);
            dmin[u] = lq_f16(blk + 2);
            lq_q4_k_words(blk + 4, words[u]);
            /* first and last 16 bytes of the 4 chunks: low nibbles are sub-blocks 0 2 4 6,
               high ones 1 3 5 7 */
            const __m512i z0 = _mm512_loadu_si512(blk + 16), z1 = _mm512_loadu_si512(blk + 80);
            const __m512i first = _mm512_shuffle_i64x2(z0, z1, _MM_SHUFFLE(2, 0, 2, 0));
            const __m512i last = _mm512_shuffle_i64x2(z0, z1, _MM_SHUFFLE(3, 1, 3, 1));
            const int8_t* q = a->qk + 256LL * (sb + u);
            const __m512i parts[4] = {_mm512_and_si512(first, mask), _mm512_and_si512(last, mask),
                                      lq_high_nibbles(first), lq_high_nibbles(last)};
            for (int h = 0; h < 2; h++) {
                const int8_t* q2 = a->q2k ? a->q2k + 256LL * (sb + u) + 128 * h : NULL;
                g[2 * u + h] = lq_dot2_levels(parts[2 * h], parts[2 * h + 1], q + 128 * h, q2);
            }
        }
        /* lanes: sub-blocks 0 2 4 6 1 3 5 7 of each super-block -> in order */
        const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
        const __m512 dots = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(order, lq_sum16(g)));
        const __m512 scale = _mm512_loadu_ps(a->scale + 8 * sb);
        const __m128i sc8 = _mm_set_epi32((int)words[1][1], (int)words[1][0], (int)words[0][1], (int)words[0][0]);
        const __m128i mn8 = _mm_set_epi32((int)words[1][3], (int)words[1][2], (int)words[0][3], (int)words[0][2]);
        const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc8));
        const __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn8));
        const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(dd[0]), _mm256_set1_ps(dd[1]), 1);
        const __m512 m = _mm512_insertf32x8(_mm512_set1_ps(dmin[0]), _mm256_set1_ps(dmin[1]), 1);
        const __m512 qsum = _mm512_cvtepi32_ps(_mm512_loadu_si512(a->qsum + 8 * sb));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(d, sc), scale), dots, acc);
        offsets = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(m, mn), scale), qsum, offsets);
    }
    sum = _mm512_reduce_add_ps(acc);
    offset = _mm512_reduce_add_ps(offsets);
#endif
    for (; sb < nsb; sb++) {
        const uint8_t* blk = w + (long long)sb * LQ_Q4_K_BYTES;
        const float dd = lq_f16(blk), dmin = lq_f16(blk + 2);
        uint8_t scales[8], mins[8];
        lq_q4_k_scales(blk + 4, scales, mins);
        for (int j = 0; j < 8; j++) {
            const int b = 8 * sb + j;
            const uint8_t* qs = blk + 16 + 32 * (j / 2);
            int isum = lq_q4_k_sub_dot(qs, j & 1, a->q + LQ_QK * b);
            if (a->q2) isum = 256 * isum + lq_q4_k_sub_dot(qs, j & 1, a->q2 + LQ_QK * b);
            sum += dd * (float)scales[j] * a->scale[b] * (float)isum;
            offset += dmin * (float)mins[j] * a->scale[b] * (float)a->qsum[b];
        }
    }
    return sum - offset;
}

static void lq_dequant_q4_k(const uint8_t* w, float* out, int k) {
    for (int sb = 0; sb < k / 256; sb++) {
        const uint8_t* blk = w + (long long)sb * LQ_Q4_K_BYTES;
        const float dd = lq_f16(blk), dmin = lq_f16(blk + 2);
        uint8_t scales[8], mins[8];
        lq_q4_k_scales(blk + 4, scales, mins);
        float* o = out + 256 * sb;
        for (int c = 0; c < 4; c++) {
            const float s0 = dd * (float)scales[2 * c], m0 = dmin * (float)mins[2 * c];
            const float s1 = dd * (float)scales[2 * c + 1], m1 = dmin * (float)mins[2 * c + 1];
            for (int i = 0; i < 32; i++) {
                const uint8_t byte = blk[16 + 32 * c + i];
                o[64 * c + i] = s0 * (float)(byte & 0x0F) - m0;
                o[64 * c + 32 + i] = s1 * (float)(byte >> 4) - m1;
            }
        }
    }
}

/* float activations: per sub-block j, (d sc_j) sum(q x) - (dmin m_j) sx_j */
static float lq_fdot_q4_k(const uint8_t* w, const float* x, const float* sx, int k) {
    float sum = 0.0f, offset = 0.0f;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    const __m128i mask = _mm_set1_epi8(0x0F);
#endif
    for (int sb = 0; sb < k / 256; sb++) {
        const uint8_t* blk = w + (long long)sb * LQ_Q4_K_BYTES;
        const float dd = lq_f16(blk), dmin = lq_f16(blk + 2);
        uint8_t scales[8], mins[8];
        lq_q4_k_scales(blk + 4, scales, mins);
        const float* xs = x + 256 * sb;
        for (int j = 0; j < 8; j++) offset += dmin * (float)mins[j] * sx[8 * sb + j];
        for (int c = 0; c < 4; c++) {
            const uint8_t* qs = blk + 16 + 32 * c;
#if defined(__AVX512F__)
            __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
            for (int half = 0; half < 2; half++) {
                const __m128i raw = _mm_loadu_si128((const __m128i*)(qs + 16 * half));
                const __m512 ql = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw, mask)));
                const __m512 qh = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), mask)));
                lo = _mm512_fmadd_ps(ql, _mm512_loadu_ps(xs + 64 * c + 16 * half), lo);
                hi = _mm512_fmadd_ps(qh, _mm512_loadu_ps(xs + 64 * c + 32 + 16 * half), hi);
            }
            acc = _mm512_fmadd_ps(lo, _mm512_set1_ps(dd * (float)scales[2 * c]), acc);
            acc = _mm512_fmadd_ps(hi, _mm512_set1_ps(dd * (float)scales[2 * c + 1]), acc);
#else
            float lo = 0.0f, hi = 0.0f;
            for (int i = 0; i < 32; i++) {
                lo += (float)(qs[i] & 0x0F) * xs[64 * c + i];
                hi += (float)(qs[i] >> 4) * xs[64 * c + 32 + i];
            }
            sum += dd * (float)scales[2 * c] * lo + dd * (float)scales[2 * c + 1] * hi;
#endif
        }
    }
#if defined(__AVX512F__)
    sum += _mm512_reduce_add_ps(acc);
#endif
    return sum - offset;
}
