/* Q4_K: super-blocks of 256 values in 144 bytes, [d: f16][dmin: f16][12 bytes of 6-bit
   scales and mins][128 bytes]: 8 sub-blocks of 32; byte chunk c holds sub-block 2c in
   its low nibbles and 2c+1 in its high ones; w = (d * scale_j) * q - dmin * min_j. */
#define LQ_Q4_K_BYTES 144

static inline void lq_q4_k_scales(const uint8_t* p, uint8_t* scales, uint8_t* mins) {
    for (int j = 0; j < 4; j++) {
        scales[j] = p[j] & 63;
        mins[j] = p[j + 4] & 63;
        scales[j + 4] = (p[j + 8] & 0x0F) | ((p[j] >> 6) << 4);
        mins[j + 4] = (p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4);
    }
}

static float lq_dot_q4_k(const uint8_t* w, const lq_acts* a, int k) {
    const int8_t* q = a->q;
    const float* d = a->d1;
    const float* s = a->s;
    const int nsb = k / 256;
    float sum = 0.0f, offset = 0.0f;
#if defined(LQ_AVX2)
    __m256 acc = _mm256_setzero_ps();
    const __m256i mask = _mm256_set1_epi8(0x0F);
#endif
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t* blk = w + (long long)sb * LQ_Q4_K_BYTES;
        const float dd = lq_f16(blk), dmin = lq_f16(blk + 2);
        uint8_t scales[8], mins[8];
        lq_q4_k_scales(blk + 4, scales, mins);
        const int8_t* qx = q + 256 * sb;
        const float* dx = d + 8 * sb;
        float min_sum = 0.0f;
        for (int j = 0; j < 8; j++) min_sum += (float)mins[j] * s[8 * sb + j];
        offset += dmin * min_sum;
#if defined(LQ_AVX2)
        for (int c = 0; c < 4; c++) {
            const __m256i raw = lq_load32(blk + 16 + 32 * c);
            const __m256i lo = _mm256_and_si256(raw, mask);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
            const __m256 p0 = _mm256_cvtepi32_ps(lq_dot_u8s8(lo, lq_load32(qx + 64 * c)));
            const __m256 p1 = _mm256_cvtepi32_ps(lq_dot_u8s8(hi, lq_load32(qx + 64 * c + 32)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd * (float)scales[2 * c] * dx[2 * c]), p0, acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd * (float)scales[2 * c + 1] * dx[2 * c + 1]), p1, acc);
        }
#else
        for (int c = 0; c < 4; c++) {
            int lo = 0, hi = 0;
            for (int i = 0; i < 32; i++) {
                const uint8_t byte = blk[16 + 32 * c + i];
                lo += (byte & 0x0F) * qx[64 * c + i];
                hi += (byte >> 4) * qx[64 * c + 32 + i];
            }
            sum += dd * (float)scales[2 * c] * dx[2 * c] * (float)lo;
            sum += dd * (float)scales[2 * c + 1] * dx[2 * c + 1] * (float)hi;
        }
#endif
    }
#if defined(LQ_AVX2)
    sum += lq_hsum8(acc);
#endif
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
