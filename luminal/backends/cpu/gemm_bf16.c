/* luminal's half-precision matrix products, linked into every compiled graph's library.

   lm_gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, width, stride): C (m x n, bfloat16)
   = op(A) op(B) (bfloat16 operands, op as in CBLAS: ta/tb 111 or 112), summed in float32
   and rounded to bfloat16 once, at the store (PyTorch's bf16 matmul on CPU does the
   same). C's rows are ldc apart; its columns come in blocks of `width`, block q at
   q * stride (as lm_sgemm's, gemm.c).

   With AVX512-BF16 (`-march=native` on a CPU that has it: Zen 4, Sapphire Rapids) both
   operands are packed as pairs along K, and an 8 x 48 register tile accumulates with
   vdpbf16ps (two products per float32 lane per instruction, twice an FMA's rate);
   elsewhere the operands are widened to float32 and multiplied by plain loops the
   compiler vectorises. The choice is made when the unit is compiled, on the machine that
   runs it, so one wheel serves both.

   lm_gemm_f16: the same for float16 operands and output. No CPU here multiplies float16
   faster than float32, so both operands are widened (exactly) into float32 and handed
   to lm_sgemm (gemm.c); C is rounded to float16 once, at the store. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LM_BF_NO_TRANS 111

typedef unsigned short lm_bf16;

static inline float lm_bf_load(lm_bf16 v)
{
    uint32_t bits = ((uint32_t)v) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline lm_bf16 lm_bf_round(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if (f != f) return (lm_bf16)((bits >> 16) | 0x40);
    bits += 0x7fff + ((bits >> 16) & 1);
    return (lm_bf16)(bits >> 16);
}

/* element (i, p) of op(A), and (p, j) of op(B) */
static inline lm_bf16 lm_bf_a(int ta, const lm_bf16* a, long long lda, long long i, long long p)
{
    return ta == LM_BF_NO_TRANS ? a[i * lda + p] : a[p * lda + i];
}

static inline lm_bf16 lm_bf_b(int tb, const lm_bf16* b, long long ldb, long long p, long long j)
{
    return tb == LM_BF_NO_TRANS ? b[p * ldb + j] : b[j * ldb + p];
}

static inline lm_bf16* lm_bf_out(lm_bf16* c, long long ldc, long long width, long long stride,
                                 long long i, long long j)
{
    return c + i * ldc + j / width * stride + j % width;
}

/* scratch memory (packed operands, widened rows): grown, never shrunk, one block per
   calling thread; a fresh malloc of a few hundred KiB per call is an mmap, and its page
   faults cost more than the product at the sizes of an MLP's training step */
static __thread void* lm_bf_space;
static __thread long long lm_bf_space_bytes;

static void* lm_bf_workspace(long long bytes)
{
    if (bytes > lm_bf_space_bytes) {
        free(lm_bf_space);
        lm_bf_space = aligned_alloc(64, (size_t)(bytes + 63) / 64 * 64);
        lm_bf_space_bytes = lm_bf_space == NULL ? 0 : bytes;
    }
    return lm_bf_space;
}

/* the product without packing: float32 rows, one per output row (small products, a
   failed allocation, CPUs without AVX512-BF16); exported so tests reach it everywhere */
void lm_gemm_bf16_rows(int ta, int tb, long long m, long long n, long long k,
                              const lm_bf16* a, long long lda, const lm_bf16* b, long long ldb,
                              lm_bf16* c, long long ldc, long long width, long long stride)
{
    float* wide = lm_bf_workspace((long long)sizeof(float) * (k * n + 1));
    if (wide != NULL) /* op(B) widened once, row-major (k x n) */
        for (long long p = 0; p < k; p++)
            for (long long j = 0; j < n; j++) wide[p * n + j] = lm_bf_load(lm_bf_b(tb, b, ldb, p, j));
#pragma omp parallel for schedule(static) if (m * n * k > (1LL << 16))
    for (long long i = 0; i < m; i++) {
        float row[256];
        for (long long j0 = 0; j0 < n; j0 += 256) {
            long long cols = n - j0 < 256 ? n - j0 : 256;
            for (long long j = 0; j < cols; j++) row[j] = 0.0f;
            for (long long p = 0; p < k; p++) {
                const float x = lm_bf_load(lm_bf_a(ta, a, lda, i, p));
                if (wide != NULL) {
                    const float* w = wide + p * n + j0;
#pragma omp simd
                    for (long long j = 0; j < cols; j++) row[j] += x * w[j];
                } else {
                    for (long long j = 0; j < cols; j++)
                        row[j] += x * lm_bf_load(lm_bf_b(tb, b, ldb, p, j0 + j));
                }
            }
            for (long long j = 0; j < cols; j++)
                *lm_bf_out(c, ldc, width, stride, i, j0 + j) = lm_bf_round(row[j]);
        }
    }
}

#if defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512VL__)
#include <immintrin.h>

#define LM_BF_MR 8              /* rows of the register tile */
#define LM_BF_NV 3              /* vectors of 16 float32 lanes per tile row */
#define LM_BF_NR (16 * LM_BF_NV) /* 8 x 48 floats: 24 of the 32 vector registers */
#define LM_BF_MIN_WORK (1LL << 15) /* below m * n * k of this, lm_gemm_bf16_rows */

static inline uint32_t lm_bf_pair(lm_bf16 lo, lm_bf16 hi) { return lo | ((uint32_t)hi << 16); }

/* A's rows [i0, i0 + MR) packed as K pairs: word q * MR + r holds (A[i0+r][2q],
   A[i0+r][2q+1]) (low half first), zero past m and k. Untransposed, a pair is one word
   of A's row; transposed, two rows of A interleave. */
static void lm_bf_pack_a(int ta, const lm_bf16* a, long long lda, long long m, long long k,
                         long long i0, uint32_t* restrict ap)
{
    const long long full = k / 2;
    const int rows = m - i0 < LM_BF_MR ? (int)(m - i0) : LM_BF_MR;
    if (ta == LM_BF_NO_TRANS) {
        for (int r = 0; r < rows; r++) {
            const lm_bf16* row = a + (i0 + r) * lda;
            for (long long q = 0; q < full; q++)
                ap[q * LM_BF_MR + r] = lm_bf_pair(row[2 * q], row[2 * q + 1]);
        }
    } else {
        for (long long q = 0; q < full; q++) {
            const lm_bf16* even = a + 2 * q * lda + i0;
            for (int r = 0; r < rows; r++) ap[q * LM_BF_MR + r] = lm_bf_pair(even[r], even[r + lda]);
        }
    }
    for (long long q = 0; q < full; q++)
        for (int r = rows; r < LM_BF_MR; r++) ap[q * LM_BF_MR + r] = 0;
    if (k % 2)
        for (int r = 0; r < LM_BF_MR; r++)
            ap[full * LM_BF_MR + r] = r < rows ? lm_bf_a(ta, a, lda, i0 + r, k - 1) : 0;
}

/* B's columns [j0, j0 + NR) packed as K pairs: word q * NR + (j - j0) holds (B[2q][j],
   B[2q+1][j]), zero past n and k. Transposed, a pair is one word of B's row;
   untransposed, two rows of B interleave. */
static void lm_bf_pack_b(int tb, const lm_bf16* b, long long ldb, long long n, long long k,
                         long long j0, uint32_t* restrict bp)
{
    const long long full = k / 2;
    const int cols = n - j0 < LM_BF_NR ? (int)(n - j0) : LM_BF_NR;
    if (tb == LM_BF_NO_TRANS) {
        for (long long q = 0; q < full; q++) {
            const lm_bf16* even = b + 2 * q * ldb + j0;
            for (int c = 0; c < cols; c++) bp[q * LM_BF_NR + c] = lm_bf_pair(even[c], even[c + ldb]);
        }
    } else {
        for (int c = 0; c < cols; c++) {
            const lm_bf16* row = b + (j0 + c) * ldb;
            for (long long q = 0; q < full; q++)
                bp[q * LM_BF_NR + c] = lm_bf_pair(row[2 * q], row[2 * q + 1]);
        }
    }
    for (long long q = 0; q < full; q++)
        for (int c = cols; c < LM_BF_NR; c++) bp[q * LM_BF_NR + c] = 0;
    if (k % 2)
        for (int c = 0; c < LM_BF_NR; c++)
            bp[full * LM_BF_NR + c] = c < cols ? lm_bf_b(tb, b, ldb, k - 1, j0 + c) : 0;
}

/* one MR x NR tile of C from packed panels; `rows`/`cols` of it are in C */
static void lm_bf_tile(long long pairs, const uint32_t* restrict ap, const uint32_t* restrict bp,
                       lm_bf16* c, long long ldc, long long width, long long stride, long long i,
                       long long j, int rows, int cols)
{
    __m512 acc[LM_BF_MR][LM_BF_NV];
    for (int r = 0; r < LM_BF_MR; r++)
        for (int v = 0; v < LM_BF_NV; v++) acc[r][v] = _mm512_setzero_ps();
    for (long long q = 0; q < pairs; q++) {
        __m512bh bv[LM_BF_NV];
        for (int v = 0; v < LM_BF_NV; v++)
            bv[v] = (__m512bh)_mm512_loadu_si512(bp + q * LM_BF_NR + 16 * v);
        for (int r = 0; r < LM_BF_MR; r++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)ap[q * LM_BF_MR + r]);
            for (int v = 0; v < LM_BF_NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
        }
    }
    if (cols == LM_BF_NR && j % width + LM_BF_NR <= width) {
        for (int r = 0; r < rows; r++) {
            lm_bf16* out = lm_bf_out(c, ldc, width, stride, i + r, j);
            for (int v = 0; v < LM_BF_NV; v++)
                _mm256_storeu_si256((__m256i*)(out + 16 * v),
                                    (__m256i)_mm512_cvtneps_pbh(acc[r][v]));
        }
        return;
    }
    float tile[LM_BF_MR][LM_BF_NR];
    for (int r = 0; r < LM_BF_MR; r++)
        for (int v = 0; v < LM_BF_NV; v++) _mm512_storeu_ps(&tile[r][16 * v], acc[r][v]);
    for (int r = 0; r < rows; r++)
        for (int jj = 0; jj < cols; jj++)
            *lm_bf_out(c, ldc, width, stride, i + r, j + jj) = lm_bf_round(tile[r][jj]);
}

#define LM_BF_FEW_ROWS 8 /* up to this many rows of A, B is streamed (decode), not packed */
#define LM_BF_DOT_ROWS 4 /* rows of A and */
#define LM_BF_DOT_COLS 4 /* rows of B per block: 16 independent accumulators */

/* C = A B^T for at most LM_BF_FEW_ROWS rows of A, A's rows and B's rows along memory (a
   linear layer's x @ W.T at decode): dot products, 32 pairs per vdpbf16ps, W read where
   it lies (packing it would triple the memory traffic), 4 of its rows at a time, each
   against up to 4 rows of A (a second group of A's rows finds them in cache) */
static void lm_bf_dots(long long m, long long n, long long k, const lm_bf16* a, long long lda,
                       const lm_bf16* b, long long ldb, lm_bf16* c, long long ldc,
                       long long width, long long stride)
{
    const long long blocks = (n + LM_BF_DOT_COLS - 1) / LM_BF_DOT_COLS;
#pragma omp parallel for schedule(static) if (n * k > (1LL << 16))
    for (long long block = 0; block < blocks; block++) {
        const long long j0 = block * LM_BF_DOT_COLS;
        const int cols = n - j0 < LM_BF_DOT_COLS ? (int)(n - j0) : LM_BF_DOT_COLS;
        for (long long i0 = 0; i0 < m; i0 += LM_BF_DOT_ROWS) {
            const int rows = m - i0 < LM_BF_DOT_ROWS ? (int)(m - i0) : LM_BF_DOT_ROWS;
            __m512 acc[LM_BF_DOT_ROWS][LM_BF_DOT_COLS];
            for (int i = 0; i < LM_BF_DOT_ROWS; i++)
                for (int j = 0; j < LM_BF_DOT_COLS; j++) acc[i][j] = _mm512_setzero_ps();
            for (long long p = 0; p < k; p += 32) {
                const __mmask32 lanes = k - p >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << (k - p)) - 1;
                __m512bh wv[LM_BF_DOT_COLS];
                for (int j = 0; j < cols; j++)
                    wv[j] = (__m512bh)_mm512_maskz_loadu_epi16(lanes, b + (j0 + j) * ldb + p);
                for (int i = 0; i < rows; i++) {
                    const __m512bh xv =
                        (__m512bh)_mm512_maskz_loadu_epi16(lanes, a + (i0 + i) * lda + p);
                    for (int j = 0; j < cols; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
                }
            }
            for (int i = 0; i < rows; i++)
                for (int j = 0; j < cols; j++)
                    *lm_bf_out(c, ldc, width, stride, i0 + i, j0 + j) =
                        lm_bf_round(_mm512_reduce_add_ps(acc[i][j]));
        }
    }
}

void lm_gemm_bf16(int ta, int tb, long long m, long long n, long long k, const lm_bf16* a,
                  long long lda, const lm_bf16* b, long long ldb, lm_bf16* c, long long ldc,
                  long long width, long long stride)
{
    if (m <= 0 || n <= 0) return;
    if (width <= 0) width = n;
    if (m <= LM_BF_FEW_ROWS && ta == LM_BF_NO_TRANS && tb != LM_BF_NO_TRANS) {
        lm_bf_dots(m, n, k, a, lda, b, ldb, c, ldc, width, stride);
        return;
    }
    const long long pairs = (k + 1) / 2;
    const long long row_panels = (m + LM_BF_MR - 1) / LM_BF_MR;
    const long long col_panels = (n + LM_BF_NR - 1) / LM_BF_NR;
    const long long a_words = (row_panels * LM_BF_MR * pairs + 15) / 16 * 16;
    uint32_t* ap = m * n * k < LM_BF_MIN_WORK
                       ? NULL
                       : lm_bf_workspace(4 * (a_words + col_panels * LM_BF_NR * pairs + 1));
    if (ap == NULL) {
        lm_gemm_bf16_rows(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, width, stride);
        return;
    }
    uint32_t* bp = ap + a_words;
    const long long panels = row_panels + col_panels;
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1)
        for (long long t = 0; t < panels; t++) {
            if (t < row_panels)
                lm_bf_pack_a(ta, a, lda, m, k, t * LM_BF_MR, ap + t * LM_BF_MR * pairs);
            else
                lm_bf_pack_b(tb, b, ldb, n, k, (t - row_panels) * LM_BF_NR,
                             bp + (t - row_panels) * LM_BF_NR * pairs);
        }
#pragma omp for collapse(2) schedule(static)
        for (long long jp = 0; jp < col_panels; jp++)
            for (long long ip = 0; ip < row_panels; ip++) {
                const long long i = ip * LM_BF_MR, j = jp * LM_BF_NR;
                const int rows = m - i < LM_BF_MR ? (int)(m - i) : LM_BF_MR;
                const int cols = n - j < LM_BF_NR ? (int)(n - j) : LM_BF_NR;
                lm_bf_tile(pairs, ap + ip * LM_BF_MR * pairs, bp + jp * LM_BF_NR * pairs, c,
                           ldc, width, stride, i, j, rows, cols);
            }
    }
}
#else
void lm_gemm_bf16(int ta, int tb, long long m, long long n, long long k, const lm_bf16* a,
                  long long lda, const lm_bf16* b, long long ldb, lm_bf16* c, long long ldc,
                  long long width, long long stride)
{
    if (m <= 0 || n <= 0) return;
    lm_gemm_bf16_rows(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, width <= 0 ? n : width, stride);
}
#endif

/* float16 ----------------------------------------------------------------------------- */
void lm_sgemm(int, int, long long, long long, long long, const float*, long long, const float*,
              long long, float*, long long, long long, long long);

#if defined(__AVX512F__)
#include <immintrin.h>
#define LM_F16_VECTOR 16 /* halves converted per instruction (gcc converts one at a time) */
#endif

/* n halves widened to float32 */
static inline void lm_f16_to_float(const _Float16* x, float* out, long long n)
{
    long long q = 0;
#if defined(LM_F16_VECTOR)
    for (; q + LM_F16_VECTOR <= n; q += LM_F16_VECTOR)
        _mm512_storeu_ps(out + q, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + q))));
#endif
    for (; q < n; q++) out[q] = (float)x[q];
}

/* n floats rounded to float16 (to nearest even, as the (_Float16) cast) */
static inline void lm_float_to_f16(const float* x, _Float16* out, long long n)
{
    long long q = 0;
#if defined(LM_F16_VECTOR)
    for (; q + LM_F16_VECTOR <= n; q += LM_F16_VECTOR)
        _mm256_storeu_si256((__m256i*)(out + q),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + q), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; q < n; q++) out[q] = (_Float16)x[q];
}

/* rows x cols of `x` (rows `ld` apart), widened into dense float32 `out` */
static void lm_f16_widen(const _Float16* x, long long ld, long long rows, long long cols,
                         float* out)
{
#pragma omp parallel for schedule(static) if (rows * cols > (1LL << 16))
    for (long long r = 0; r < rows; r++) lm_f16_to_float(x + r * ld, out + r * cols, cols);
}

void lm_gemm_f16(int ta, int tb, long long m, long long n, long long k, const _Float16* a,
                 long long lda, const _Float16* b, long long ldb, _Float16* c, long long ldc,
                 long long width, long long stride)
{
    if (m <= 0 || n <= 0) return;
    if (width <= 0) width = n;
    if (k <= 0) {
        for (long long i = 0; i < m; i++)
            for (long long j = 0; j < n; j++) c[i * ldc + j / width * stride + j % width] = 0;
        return;
    }
    const long long a_rows = ta == LM_BF_NO_TRANS ? m : k, a_cols = ta == LM_BF_NO_TRANS ? k : m;
    const long long b_rows = tb == LM_BF_NO_TRANS ? k : n, b_cols = tb == LM_BF_NO_TRANS ? n : k;
    const long long a_size = (m * k + 15) / 16 * 16, b_size = (k * n + 15) / 16 * 16;
    float* wa = lm_bf_workspace((long long)sizeof(float) * (a_size + b_size + m * n + 1));
    if (wa == NULL) { /* no memory for the widened copies: one float32 sum per element */
        for (long long i = 0; i < m; i++)
            for (long long j = 0; j < n; j++) {
                float acc = 0.0f;
                for (long long p = 0; p < k; p++)
                    acc += (float)(ta == LM_BF_NO_TRANS ? a[i * lda + p] : a[p * lda + i]) *
                           (float)(tb == LM_BF_NO_TRANS ? b[p * ldb + j] : b[j * ldb + p]);
                c[i * ldc + j / width * stride + j % width] = (_Float16)acc;
            }
        return;
    }
    float* wb = wa + a_size;
    float* wc = wb + b_size;
    lm_f16_widen(a, lda, a_rows, a_cols, wa);
    lm_f16_widen(b, ldb, b_rows, b_cols, wb);
    lm_sgemm(ta, tb, m, n, k, wa, a_cols, wb, b_cols, wc, n, n, 0);
#pragma omp parallel for schedule(static) if (m * n > (1LL << 16))
    for (long long i = 0; i < m; i++) {
        if (width == n)
            lm_float_to_f16(wc + i * n, c + i * ldc, n);
        else
            for (long long j = 0; j < n; j++)
                c[i * ldc + j / width * stride + j % width] = (_Float16)wc[i * n + j];
    }
}
