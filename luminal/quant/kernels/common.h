/* luminal.quant: shared parts of the packed-weight kernels.
 *
 * y[r, j] = sum_k x[r, k] * W[j, k] with W packed in a GGUF block format, one row of
 * whole blocks per output feature. By the number of activation rows m:
 *   m <  prefill_rows: one packed row against each activation row, unpacked in
 *                      registers: with `bits` 8 or 16, rows rounded to integers per
 *                      block of 32 (lq_acts) and integer dot products (AVX-512 VNNI
 *                      dpbusd, AVX2 maddubs: lq_dot_<fmt>, as llama.cpp's
 *                      vec_dot_*_q8_0); with 32, float activations and FMA (lq_fdot_<fmt>);
 *   m >= prefill_rows: panels of W are dequantised to float32 in a per-thread buffer
 *                      (lq_dequant_<fmt>) and multiplied with FMA, 4 x 4 outputs at a time.
 * luminal/quant/reference.py computes the same in numpy (the oracle). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#define LQ_QK 32
#define LQ_PANEL 16 /* weight rows dequantised together on the float path */

static inline float lq_f16(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1F;
    uint32_t mantissa = h & 0x3FF, bits;
    if (exponent == 0x1F) {
        bits = sign | 0x7F800000 | (mantissa << 13);
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while (!(mantissa & 0x400)) { mantissa <<= 1; shift++; }
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((mantissa & 0x3FF) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
#endif
}

/* ---------------------------------------------------------------- SIMD helpers */
#if defined(__AVX2__) && defined(__FMA__)
#define LQ_AVX2 1
static inline float lq_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* per 4-byte group: sum of u8 * s8 products, as 8 int32 lanes */
static inline __m256i lq_dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* the same for two signed operands: move x's sign onto y (llama.cpp's trick) */
static inline __m256i lq_dot_s8s8(__m256i x, __m256i y) {
    return lq_dot_u8s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

static inline __m256i lq_load32(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }
#endif

/* ---------------------------------------------------------------- activations */
/* Activation rows as integers per block of 32, in one of two precisions:
     8 bits (llama.cpp's Q8): d1 = max|x| / 127, q1 = rint(x / d1), x ~ d1 q1;
     16 bits, two 8-bit levels: also q2 = rint((x - d1 q1) * 256 / d1) clamped to
         [-127, 127] (|q2| <= 128 before; -128 would break AVX2's sign trick), so
         x ~ (d1 / 256)(256 q1 + q2), within max|x| / 32512 (about float16's precision).
   rint rounds to nearest even (the rounding mode); x - d1 q1 is one fused multiply-add.
   A block's integer dot product with the weights is then 256 dot(w, q1) + dot(w, q2)
   (or dot(w, q1)), times `scale` = d1 / 256 (or d1).
   `qi`/`q2i` hold q1/q2 regrouped for the 512-bit kernels: per group of 4 blocks, the
   first 16 values of each block, then the last 16 (Q4_0's low and high nibbles); a tail
   of fewer than 4 blocks stays in order. `qk`/`q2k`: per group of 8 blocks (a K-quant
   super-block), the first 16 values of blocks 0 2 4 6, their last 16, then the same of
   blocks 1 3 5 7 (Q4_K's low and high nibbles of its 4 chunks). */
typedef struct {
    const int8_t* q;      /* q1 in order */
    const int8_t* qi;     /* q1 regrouped by 4 */
    const int8_t* qk;     /* q1 regrouped by 8 */
    const int8_t* q2;     /* q2 in order; NULL with 8 bits */
    const int8_t* q2i;    /* q2 regrouped by 4; NULL with 8 bits */
    const int8_t* q2k;    /* q2 regrouped by 8; NULL with 8 bits */
    const float* d1;      /* per block */
    const float* scale;   /* per block: d1 / 256, or d1 */
    const int32_t* qsum;  /* per block: 256 sum(q1) + sum(q2), or sum(q1) */
} lq_acts;

/* block b (of nb) into the layouts regrouped by 4 and by 8 */
static inline void lq_regroup(int8_t* by4, int8_t* by8, const int8_t* qb, int b, int nb) {
    if (b < nb / 4 * 4) {
        int8_t* g = by4 + 4 * LQ_QK * (b / 4) + 16 * (b % 4);
        memcpy(g, qb, 16);
        memcpy(g + 64, qb + 16, 16);
    } else {
        memcpy(by4 + LQ_QK * b, qb, LQ_QK);
    }
    if (b < nb / 8 * 8) { /* even blocks' halves, then odd ones' */
        const int j = b % 8;
        int8_t* g = by8 + 8 * LQ_QK * (b / 8) + 128 * (j & 1) + 16 * (j >> 1);
        memcpy(g, qb, 16);
        memcpy(g + 64, qb + 16, 16);
    } else {
        memcpy(by8 + LQ_QK * b, qb, LQ_QK);
    }
}

/* one row of k floats into `out` (q1 its first 3k bytes: in order, by 4, by 8; q2 the
   next 3k if `two_levels`) and per-block d1, scale, qsum */
static void lq_quantize_row(const float* x, int k, int8_t* out, int two_levels, float* d1,
                            float* scale, int32_t* qsum) {
    const int nb = k / LQ_QK;
    int8_t *q = out, *q2 = two_levels ? out + 3 * k : NULL;
    for (int b = 0; b < nb; b++) {
        const float* xb = x + LQ_QK * b;
        int8_t* qb = q + LQ_QK * b;
        int8_t* q2b = q2 ? q2 + LQ_QK * b : NULL;
        int sum = 0, sum2 = 0;
#if defined(__AVX512F__)
        const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        const float db = amax / 127.0f, inverse = db != 0.0f ? 1.0f / db : 0.0f;
        const __m512 id = _mm512_set1_ps(inverse);
        const __m512i v0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id)); /* rint: nearest even */
        const __m512i v1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
        _mm_storeu_si128((__m128i*)qb, _mm512_cvtepi32_epi8(v0));
        _mm_storeu_si128((__m128i*)(qb + 16), _mm512_cvtepi32_epi8(v1));
        sum = _mm512_reduce_add_epi32(_mm512_add_epi32(v0, v1));
        if (q2b) {
            const __m512 d = _mm512_set1_ps(db), id2 = _mm512_set1_ps(inverse * 256.0f);
            const __m512 r0 = _mm512_fnmadd_ps(d, _mm512_cvtepi32_ps(v0), x0);
            const __m512 r1 = _mm512_fnmadd_ps(d, _mm512_cvtepi32_ps(v1), x1);
            const __m512i low = _mm512_set1_epi32(-127); /* not -128: AVX2's sign trick */
            const __m128i w0 = _mm512_cvtsepi32_epi8(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(r0, id2)), low));
            const __m128i w1 = _mm512_cvtsepi32_epi8(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(r1, id2)), low));
            _mm_storeu_si128((__m128i*)q2b, w0);
            _mm_storeu_si128((__m128i*)(q2b + 16), w1);
            sum2 = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_cvtepi8_epi32(w0), _mm512_cvtepi8_epi32(w1)));
        }
#else
        float amax = 0.0f;
        for (int i = 0; i < LQ_QK; i++) amax = fmaxf(amax, fabsf(xb[i]));
        const float db = amax / 127.0f, inverse = db != 0.0f ? 1.0f / db : 0.0f;
        for (int i = 0; i < LQ_QK; i++) {
            const int v = (int)nearbyintf(xb[i] * inverse);
            qb[i] = (int8_t)v;
            sum += v;
            if (q2b) {
                const int v2 = (int)nearbyintf(fmaf(-db, (float)v, xb[i]) * (inverse * 256.0f));
                q2b[i] = (int8_t)(v2 < -127 ? -127 : v2 > 127 ? 127 : v2);
                sum2 += q2b[i];
            }
        }
#endif
        d1[b] = db;
        scale[b] = q2b ? db / 256.0f : db;
        qsum[b] = q2b ? 256 * sum + sum2 : sum;
        lq_regroup(q + k, q + 2 * k, qb, b, nb);
        if (q2b) lq_regroup(q2 + k, q2 + 2 * k, q2b, b, nb);
    }
}

typedef float (*lq_dot_fn)(const uint8_t* w, const lq_acts* a, int k);
typedef float (*lq_fdot_fn)(const uint8_t* w, const float* x, const float* sx, int k);
typedef void (*lq_dequant_fn)(const uint8_t* w, float* out, int k);

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define LQ_VNNI512 1
/* 16 f16 scales at p, p + stride, ..., p + 15 stride, as floats */
static inline __m512 lq_f16x16(const uint8_t* p, int stride) {
    const __m512i offsets = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(stride));
    const __m512i words = _mm512_i32gather_epi32(offsets, (const void*)p, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
}

/* g[i] holds blocks 4i..4i+3 in 4 int32 lanes each -> 16 lanes, one per block */
static inline __m512i lq_sum16(const __m512i g[4]) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i ab = _mm512_add_epi32(_mm512_permutex2var_epi32(g[0], even, g[1]),
                                        _mm512_permutex2var_epi32(g[0], odd, g[1]));
    const __m512i cd = _mm512_add_epi32(_mm512_permutex2var_epi32(g[2], even, g[3]),
                                        _mm512_permutex2var_epi32(g[2], odd, g[3]));
    return _mm512_add_epi32(_mm512_permutex2var_epi32(ab, even, cd), _mm512_permutex2var_epi32(ab, odd, cd));
}

/* each byte's high nibble, as a byte: one affine bit-matrix op with GFNI */
static inline __m512i lq_high_nibbles(__m512i raw) {
#if defined(__GFNI__)
    return _mm512_gf2p8affine_epi64_epi8(raw, _mm512_set1_epi64(0x1020408000000000LL), 0);
#else
    return _mm512_and_si512(_mm512_srli_epi16(raw, 4), _mm512_set1_epi8(0x0F));
#endif
}

/* Software prefetch of packed rows LQ_PREFETCH bytes ahead, into L1. The hardware
   prefetchers stop at 4 KiB page boundaries, and a memory-mapped GGUF file is in 4 KiB
   pages; 4 KiB ahead is always the next page. Measured (1 thread, matrices streamed
   from 4 KiB pages, bytes per CPU-second over a plain read's, medians of 5, loaded
   machine): Q4_0 2048 x 5632 48 -> 88 %, 5632 x 2048 56 -> 80 %, 2048 x 2048 56 -> 75 %
   (1 KiB ahead: about half that gain; in cache 8 % slower). Q8_0 (-10 %) and Q4_K (flat),
   whose hardware prefetch keeps up, do without. Rows are contiguous, so reading past a
   row's end prefetches the next; past the matrix it is a harmless hint. */
#define LQ_PREFETCH 4096
static inline void lq_prefetch(const uint8_t* p, int bytes) {
    for (int at = 0; at < bytes; at += 64) _mm_prefetch((const char*)p + LQ_PREFETCH + at, _MM_HINT_T0);
}

/* x . q1 and x . q2 of one register's blocks as two independent chains, joined as
   256 (x . q1) + x . q2: shorter dependency chains than accumulating in place */
static inline __m512i lq_dot2_levels(__m512i first, __m512i second, const int8_t* q1, const int8_t* q2) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i one = _mm512_add_epi32(_mm512_dpbusd_epi32(z, first, _mm512_loadu_si512(q1)),
                                         _mm512_dpbusd_epi32(z, second, _mm512_loadu_si512(q1 + 64)));
    if (!q2) return one;
    const __m512i two = _mm512_add_epi32(_mm512_dpbusd_epi32(z, first, _mm512_loadu_si512(q2)),
                                         _mm512_dpbusd_epi32(z, second, _mm512_loadu_si512(q2 + 64)));
    return _mm512_add_epi32(_mm512_slli_epi32(one, 8), two);
}

/* four 16-byte pieces at p, p + stride, p + 2 stride, p + 3 stride in one register */
static inline __m512i lq_load4x16(const uint8_t* p, int stride) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)p));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i*)(p + stride)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i*)(p + 2 * stride)), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i*)(p + 3 * stride)), 3);
}
#endif

/* float activations, few rows: per block of 32, the sum of x (for formats with offsets) */
static void lq_matmul_rows(float* out, const float* x, const uint8_t* w, long long m, int n, int k,
                           long long row_bytes, lq_fdot_fn dot) {
    const int nb = k / LQ_QK;
    float* sx = (float*)malloc(sizeof(float) * (size_t)m * nb);
    for (long long r = 0; r < m * nb; r++) {
        float sum = 0.0f;
        for (int i = 0; i < LQ_QK; i++) sum += x[LQ_QK * r + i];
        sx[r] = sum;
    }
#pragma omp parallel for schedule(static)
    for (int j = 0; j < n; j++) {
        const uint8_t* row = w + (long long)j * row_bytes;
        for (long long r = 0; r < m; r++) out[r * n + j] = dot(row, x + r * k, sx + r * nb, k);
    }
    free(sx);
}

/* activation rows as integers (bits 8 or 16, see lq_acts), then integer dot products */
static void lq_matmul_quantized(float* out, const float* x, const uint8_t* w, long long m,
                                int n, int k, long long row_bytes, int bits, lq_dot_fn dot) {
    const int nb = k / LQ_QK, levels = bits == 16 ? 2 : 1;
    int8_t* q = (int8_t*)aligned_alloc(64, (size_t)(3 * levels * m * k + 64));
    float* f = (float*)malloc(sizeof(float) * 2 * (size_t)m * nb);
    int32_t* qsum = (int32_t*)malloc(sizeof(int32_t) * (size_t)m * nb);
    lq_acts* acts = (lq_acts*)malloc(sizeof(lq_acts) * (size_t)m);
    for (long long r = 0; r < m; r++) {
        int8_t* q1 = q + 3 * levels * r * k;
        int8_t* q2 = levels == 2 ? q1 + 3 * k : NULL;
        float* d1 = f + 2 * r * nb;
        lq_quantize_row(x + r * k, k, q1, levels == 2, d1, d1 + nb, qsum + r * nb);
        acts[r] = (lq_acts){q1, q1 + k, q1 + 2 * k, q2, q2 ? q2 + k : NULL, q2 ? q2 + 2 * k : NULL,
                            d1, d1 + nb, qsum + r * nb};
    }
#pragma omp parallel for schedule(static)
    for (int j = 0; j < n; j++) {
        const uint8_t* row = w + (long long)j * row_bytes;
        for (long long r = 0; r < m; r++) out[r * n + j] = dot(row, acts + r, k);
    }
    free(q);
    free(f);
    free(qsum);
    free(acts);
}

/* ---------------------------------------------------------------- float path */
static float lq_dot_f32(const float* a, const float* b, int k) {
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < k; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    return _mm512_reduce_add_ps(acc);
#else
    float acc = 0.0f;
    for (int i = 0; i < k; i++) acc += a[i] * b[i];
    return acc;
#endif
}

/* out[r0..r0+4, j..j+4] for 4 activation rows and 4 dequantised weight rows */
static void lq_block4x4(float* out, const float* x, const float* panel, int n, int k, long long r0,
                        int j) {
#if defined(__AVX512F__)
    __m512 acc[4][4];
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) acc[a][b] = _mm512_setzero_ps();
    for (int i = 0; i < k; i += 16) {
        __m512 wv[4];
        for (int b = 0; b < 4; b++) wv[b] = _mm512_loadu_ps(panel + (long long)b * k + i);
        for (int a = 0; a < 4; a++) {
            const __m512 xv = _mm512_loadu_ps(x + (r0 + a) * k + i);
            for (int b = 0; b < 4; b++) acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
        }
    }
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) out[(r0 + a) * n + j + b] = _mm512_reduce_add_ps(acc[a][b]);
#else
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            out[(r0 + a) * n + j + b] = lq_dot_f32(x + (r0 + a) * k, panel + (long long)b * k, k);
#endif
}

static void lq_matmul_float(float* out, const float* x, const uint8_t* w, long long m, int n,
                            int k, long long row_bytes, lq_dequant_fn dequant) {
#pragma omp parallel
    {
        float* panel = (float*)aligned_alloc(64, sizeof(float) * (size_t)LQ_PANEL * k);
#pragma omp for schedule(static)
        for (int j0 = 0; j0 < n; j0 += LQ_PANEL) {
            const int rows = n - j0 < LQ_PANEL ? n - j0 : LQ_PANEL;
            for (int b = 0; b < rows; b++) dequant(w + (long long)(j0 + b) * row_bytes, panel + (long long)b * k, k);
            long long r = 0;
            for (; r + 4 <= m; r += 4) {
                int b = 0;
                for (; b + 4 <= rows; b += 4) lq_block4x4(out, x, panel + (long long)b * k, n, k, r, j0 + b);
                for (; b < rows; b++)
                    for (int a = 0; a < 4; a++)
                        out[(r + a) * n + j0 + b] = lq_dot_f32(x + (r + a) * k, panel + (long long)b * k, k);
            }
            for (; r < m; r++)
                for (int b = 0; b < rows; b++)
                    out[r * n + j0 + b] = lq_dot_f32(x + r * k, panel + (long long)b * k, k);
        }
        free(panel);
    }
}

/* ---------------------------------------------------------------- integer tile path */
/* Prefill with llama.cpp's 8-bit activations (Q8_0, Q4_0): activation rows rounded once
   (lq_quantize_row), a panel of 16 weight rows repacked once into unsigned bytes w + 128
   interleaved by 4 (per block and group of 4 values: 16 rows x 4 bytes, one register),
   so one vpdpbusd with 4 broadcast activation bytes adds to 16 outputs' dots; per block,
   less 128 sum(q), times d_w (a vector over the panel) and the activation's d. Each
   repacked register serves LQ_TILE_ROWS activation rows. (Only with 8 bits: with 16, a
   float difference of an ulp upstream re-rounds ~1 % of the values, which moves outputs
   past CPUCompiler's check on many rows; 16-bit prefill stays on the float path.) */
typedef void (*lq_repack_fn)(const uint8_t* w, long long row_bytes, int rows, int k, uint8_t* bytes,
                             float* scales);
#if !defined(LQ_VNNI512)
/* without VNNI the 8-bit prefill loops the decode kernels (lq_matmul_quantized) */
static inline void lq_no_repack(const uint8_t* w, long long row_bytes, int rows, int k, uint8_t* bytes,
                                float* scales) {
    (void)w, (void)row_bytes, (void)rows, (void)k, (void)bytes, (void)scales;
}
#endif

#if defined(LQ_VNNI512)
#define LQ_TILE_ROWS 8
/* out[r0 + r, j0 .. j0 + cols] for R (1..LQ_TILE_ROWS) activation rows */
static inline __attribute__((always_inline)) void lq_tile(
    float* out, const uint8_t* bytes, const float* scales, const lq_acts* acts, long long r0,
    const int R, int n, int j0, int cols, int k) {
    __m512 facc[LQ_TILE_ROWS];
    for (int r = 0; r < R; r++) facc[r] = _mm512_setzero_ps();
    for (int b = 0; b < k / LQ_QK; b++) {
        const uint8_t* wb = bytes + (long long)b * 16 * LQ_QK;
        __m512i dot[LQ_TILE_ROWS];
        for (int r = 0; r < R; r++) dot[r] = _mm512_setzero_si512();
        for (int g = 0; g < LQ_QK / 4; g++) {
            const __m512i wv = _mm512_load_si512(wb + 64 * g);
            for (int r = 0; r < R; r++) {
                int32_t a;
                memcpy(&a, acts[r0 + r].q + LQ_QK * b + 4 * g, 4);
                dot[r] = _mm512_dpbusd_epi32(dot[r], wv, _mm512_set1_epi32(a));
            }
        }
        const __m512 dw = _mm512_load_ps(scales + 16 * b);
        for (int r = 0; r < R; r++) {
            const lq_acts* a = acts + r0 + r;
            const __m512i exact = _mm512_sub_epi32(dot[r], _mm512_set1_epi32(a->qsum[b] * 128));
            facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), _mm512_mul_ps(dw, _mm512_set1_ps(a->scale[b])), facc[r]);
        }
    }
    const __mmask16 keep = (__mmask16)((1u << cols) - 1u);
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(out + (r0 + r) * n + j0, keep, facc[r]);
}

static void lq_matmul_tiled(float* out, const float* x, const uint8_t* w, long long m, int n,
                            int k, long long row_bytes, lq_repack_fn repack) {
    const int nb = k / LQ_QK;
    int8_t* q = (int8_t*)aligned_alloc(64, (size_t)(3 * m * k + 64));
    float* f = (float*)malloc(sizeof(float) * 2 * (size_t)m * nb);
    int32_t* qsum = (int32_t*)malloc(sizeof(int32_t) * (size_t)m * nb);
    lq_acts* acts = (lq_acts*)malloc(sizeof(lq_acts) * (size_t)m);
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (long long r = 0; r < m; r++) {
            int8_t* q1 = q + 3 * r * k;
            float* d1 = f + 2 * r * nb;
            lq_quantize_row(x + r * k, k, q1, 0, d1, d1 + nb, qsum + r * nb);
            acts[r] = (lq_acts){q1, q1 + k, q1 + 2 * k, NULL, NULL, NULL, d1, d1 + nb, qsum + r * nb};
        }
        uint8_t* bytes = (uint8_t*)aligned_alloc(64, (size_t)16 * k);
        float* scales = (float*)aligned_alloc(64, sizeof(float) * 16 * (size_t)nb);
#pragma omp for schedule(static)
        for (int j0 = 0; j0 < n; j0 += 16) {
            const int cols = n - j0 < 16 ? n - j0 : 16;
            repack(w + (long long)j0 * row_bytes, row_bytes, cols, k, bytes, scales);
            long long r = 0;
            for (; r + LQ_TILE_ROWS <= m; r += LQ_TILE_ROWS) lq_tile(out, bytes, scales, acts, r, LQ_TILE_ROWS, n, j0, cols, k);
            for (; r < m; r++) lq_tile(out, bytes, scales, acts, r, 1, n, j0, cols, k);
        }
        free(bytes);
        free(scales);
    }
    free(q);
    free(f);
    free(qsum);
    free(acts);
}
#endif

/* bits: the activations' precision (8, 16: integer dots; 32: float) on the few-row path;
   8 with `repack` (Q8_0, Q4_0): on the prefill path too */
static inline void lq_matmul(float* out, const float* x, const uint8_t* w, long long m, int n,
                             int k, long long row_bytes, long long prefill_rows, int bits,
                             lq_dot_fn dot, lq_fdot_fn fdot, lq_dequant_fn dequant,
                             lq_repack_fn repack) {
    if (m <= 0) return;
    if (m >= prefill_rows && bits == 8 && repack) {
#if defined(LQ_VNNI512)
        lq_matmul_tiled(out, x, w, m, n, k, row_bytes, repack);
#else
        lq_matmul_quantized(out, x, w, m, n, k, row_bytes, bits, dot);
#endif
    } else if (m >= prefill_rows)
        lq_matmul_float(out, x, w, m, n, k, row_bytes, dequant);
    else if (bits == 8 || bits == 16)
        lq_matmul_quantized(out, x, w, m, n, k, row_bytes, bits, dot);
    else
        lq_matmul_rows(out, x, w, m, n, k, row_bytes, fdot);
}

/* rows (count, row_bytes) gathered from an embedding table -> (count, k) floats */
static inline void lq_dequant_rows(float* out, const uint8_t* rows, long long count, int k,
                                   long long row_bytes, lq_dequant_fn dequant) {
    for (long long r = 0; r < count; r++) dequant(rows + r * row_bytes, out + r * k, k);
}
