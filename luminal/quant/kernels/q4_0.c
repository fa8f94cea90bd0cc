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

#if defined(LQ_VNNI512)
/* 4 blocks from p: their 4 x 16 bytes of nibbles in one register; `head` gets the first
   64 bytes, which hold the 4 scales (16-bit words 0, 9, 18, 27). */
static inline __m512i lq_q4_0_group(const uint8_t* p, __m512i* head) {
    *head = _mm512_loadu_si512(p);
#if defined(__AVX512VBMI__)
    /* byte 16 j + i is at 2 + 18 j + i: from head below 64, else from p + 8 */
    const __m512i index = _mm512_set_epi8(
        127, 126, 125, 124, 123, 122, 121, 120, 63, 62, 61, 60, 59, 58, 57, 56,
        53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39, 38,
        35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20,
        17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2);
    return _mm512_permutex2var_epi8(*head, index, _mm512_loadu_si512(p + 8));
#else
    return lq_load4x16(p + 2, LQ_Q4_0_BYTES);
#endif
}

/* the 16 scales of 4 groups' heads, as floats */
static inline __m512 lq_q4_0_scales16(const __m512i head[4]) {
    const __m512i pick = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0, 0, 0, 0, 0, 0, 0, 0, 59, 50, 41, 32, 27, 18, 9, 0);
    const __m512i join = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          39, 38, 37, 36, 35, 34, 33, 32, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i first = _mm512_permutex2var_epi16(head[0], pick, head[1]);
    const __m512i second = _mm512_permutex2var_epi16(head[2], pick, head[3]);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(first, join, second)));
}
#endif

static inline int lq_q4_0_block_dot(const uint8_t* blk, const int8_t* q) {
#if defined(LQ_AVX2)
    const __m256i p = lq_dot_s8s8(lq_q4_0_values(blk), lq_load32(q));
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 0xB1)));
#else
    int isum = 0;
    for (int i = 0; i < LQ_QK / 2; i++) {
        isum += ((blk[2 + i] & 0x0F) - 8) * q[i];
        isum += ((blk[2 + i] >> 4) - 8) * q[i + LQ_QK / 2];
    }
    return isum;
#endif
}

/* integer dots (see lq_acts); with VNNI, nibbles (unsigned) times q, less 8 * sum(q) */
static float lq_dot_q4_0(const uint8_t* w, const lq_acts* a, int k) {
    const int nb = k / LQ_QK;
    int b = 0;
    float sum = 0.0f;
#if defined(LQ_VNNI512)
    const __m512i mask = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    for (; b + 16 <= nb; b += 16) {
        const uint8_t* p = w + (long long)b * LQ_Q4_0_BYTES;
        lq_prefetch(p, 16 * LQ_Q4_0_BYTES);
        __m512i g[4], head[4];
        for (int i = 0; i < 4; i++) {
            const __m512i raw = lq_q4_0_group(p + 4 * i * LQ_Q4_0_BYTES, &head[i]);
            const long long at = LQ_QK * (b + 4 * i);
            g[i] = lq_dot2_levels(_mm512_and_si512(raw, mask), lq_high_nibbles(raw), a->qi + at,
                                  a->q2i ? a->q2i + at : NULL);
        }
        const __m512i offset = _mm512_slli_epi32(_mm512_loadu_si512(a->qsum + b), 3);
        const __m512 dots = _mm512_cvtepi32_ps(_mm512_sub_epi32(lq_sum16(g), offset));
        const __m512 scales = _mm512_mul_ps(lq_q4_0_scales16(head), _mm512_loadu_ps(a->scale + b));
        acc = _mm512_fmadd_ps(scales, dots, acc);
    }
    sum = _mm512_reduce_add_ps(acc);
#endif
    for (; b < nb; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q4_0_BYTES;
        int isum = lq_q4_0_block_dot(blk, a->q + LQ_QK * b);
        if (a->q2) isum = 256 * isum + lq_q4_0_block_dot(blk, a->q2 + LQ_QK * b);
        sum += lq_f16(blk) * a->scale[b] * (float)isum;
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

#if defined(LQ_VNNI512)
/* `rows` (<= 16) packed rows -> the tile path's interleaved bytes and per-block scales
   (rows past `rows`: scale 0). Each register gathers one 4-byte word of the 16 rows'
   nibbles: its low nibbles are values 4p.., its high ones 16 + 4p.. (as q - 8 + 128).
   (Q8_0's 8 gathers a block were slower than its scalar copy: 6.0 vs 7.5 ms for
   5632 x 2048 x 128 rows at 1 thread; Q4_0's 4 gathers: 10.8 -> 6.2 ms.) */
static void lq_repack_q4_0(const uint8_t* w, long long row_bytes, int rows, int k, uint8_t* bytes,
                           float* scales) {
    const __mmask16 live = (__mmask16)((1u << rows) - 1u);
    const __m512i offsets = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((int)row_bytes));
    const __m512i mask = _mm512_set1_epi8(0x0F), bias = _mm512_set1_epi8(120), z = _mm512_setzero_si512();
    for (int b = 0; b < k / LQ_QK; b++) {
        const uint8_t* blk = w + (long long)b * LQ_Q4_0_BYTES;
        uint8_t* dst = bytes + (long long)b * 16 * LQ_QK;
        const __m512i head = _mm512_mask_i32gather_epi32(z, live, offsets, (const void*)blk, 1);
        _mm512_store_ps(scales + 16 * b, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head)));
        for (int p = 0; p < 4; p++) {
            const __m512i v = _mm512_mask_i32gather_epi32(z, live, offsets, (const void*)(blk + 2 + 4 * p), 1);
            _mm512_store_si512(dst + 64 * p, _mm512_add_epi8(_mm512_and_si512(v, mask), bias));
            _mm512_store_si512(dst + 64 * (p + 4), _mm512_add_epi8(lq_high_nibbles(v), bias));
        }
    }
}
#else
#define lq_repack_q4_0 lq_no_repack
#endif
