/* luminal.quant: shared parts of the packed-weight kernels.
 *
 * y[r, j] = sum_k x[r, k] * W[j, k] with W packed in a GGUF block format, one row of
 * whole blocks per output feature. By the number of activation rows m:
 *   m <  prefill_rows: one packed row against each activation row, unpacked in
 *                      registers (lq_fdot_<fmt>: float activations, FMA), or, with
 *                      quantized activations, rows rounded to 8 bits per block of 32
 *                      (d = max|x| / 127, q = rint(x / d)) and integer dot products
 *                      (AVX-512 VNNI / AVX-VNNI dpbusd, AVX2 maddubs: lq_dot_<fmt>,
 *                      llama.cpp's vec_dot_*_q8_0);
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
/* One row of k floats -> k int8 values, k/32 scales d and k/32 sums d * sum(q). */
static void lq_quantize_row(const float* x, int k, int8_t* q, float* d, float* s) {
    for (int b = 0; b < k / LQ_QK; b++) {
        const float* xb = x + LQ_QK * b;
        float amax = 0.0f;
        for (int i = 0; i < LQ_QK; i++) amax = fmaxf(amax, fabsf(xb[i]));
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        int sum = 0;
        for (int i = 0; i < LQ_QK; i++) {
            const int v = (int)nearbyintf(xb[i] * id);
            q[LQ_QK * b + i] = (int8_t)v;
            sum += v;
        }
        d[b] = db;
        s[b] = db * (float)sum;
    }
}

typedef float (*lq_dot_fn)(const uint8_t* w, const int8_t* q, const float* d, const float* s,
                           int k);
typedef float (*lq_fdot_fn)(const uint8_t* w, const float* x, const float* sx, int k);
typedef void (*lq_dequant_fn)(const uint8_t* w, float* out, int k);

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

static void lq_matmul_quantized(float* out, const float* x, const uint8_t* w, long long m,
                                int n, int k, long long row_bytes, lq_dot_fn dot) {
    const int nb = k / LQ_QK;
    int8_t* q = (int8_t*)malloc((size_t)m * k);
    float* d = (float*)malloc(sizeof(float) * (size_t)m * nb);
    float* s = (float*)malloc(sizeof(float) * (size_t)m * nb);
    for (long long r = 0; r < m; r++) lq_quantize_row(x + r * k, k, q + r * k, d + r * nb, s + r * nb);
#pragma omp parallel for schedule(static)
    for (int j = 0; j < n; j++) {
        const uint8_t* row = w + (long long)j * row_bytes;
        for (long long r = 0; r < m; r++)
            out[r * n + j] = dot(row, q + r * k, d + r * nb, s + r * nb, k);
    }
    free(q);
    free(d);
    free(s);
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

static inline void lq_matmul(float* out, const float* x, const uint8_t* w, long long m, int n,
                             int k, long long row_bytes, long long prefill_rows,
                             int quantized_activations, lq_dot_fn dot, lq_fdot_fn fdot,
                             lq_dequant_fn dequant) {
    if (m <= 0) return;
    if (m >= prefill_rows)
        lq_matmul_float(out, x, w, m, n, k, row_bytes, dequant);
    else if (quantized_activations)
        lq_matmul_quantized(out, x, w, m, n, k, row_bytes, dot);
    else
        lq_matmul_rows(out, x, w, m, n, k, row_bytes, fdot);
}

/* rows (count, row_bytes) gathered from an embedding table -> (count, k) floats */
static inline void lq_dequant_rows(float* out, const uint8_t* rows, long long count, int k,
                                   long long row_bytes, lq_dequant_fn dequant) {
    for (long long r = 0; r < count; r++) dequant(rows + r * row_bytes, out + r * k, k);
}
