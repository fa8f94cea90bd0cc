/* Matrix products with a few rows (decoding: one row per sequence), linked into every
   compiled graph's library beside gemm.c.

   lm_sgemm_rows has lm_sgemm's signature. C (m x n) = A (m x k, rows lda apart) times
   op(B) with op(B) = B transposed, B stored (n x k) with rows ldb apart: a linear layer's
   x @ W^T with W in PyTorch's (out, in) layout, a language model's head reading the
   embedding table. With m <= LM_GEMV_ROWS, every output is a dot product of an A row
   with a B row, and B (the weights) is read once, streamed by all threads over
   chunks of its rows: a decode step is bound by the bytes of weights it reads.
   Anything else goes to lm_sgemm. The A rows (a few KB) stay in L1 while B streams.
   Measured on the AMD EPYC here (one thread, CPU time, loaded machine): ~30 GB/s of B
   for 4864 x 896, against ~18 GB/s for MKL's sgemm or sgemv at M = 1; interleaving 2 or
   4 B rows (several streams) was slower than one row with 4 accumulators, prefetching
   ahead made no difference. */
#include <omp.h>
#include <string.h>

void lm_sgemm_ep(int, int, long long, long long, long long, const float*, long long,
                 const float*, long long, float*, long long, long long, long long, const float*,
                 const float*, const float*, int, float);
void lm_sgemm_finish(long long, long long, float*, long long, long long, long long,
                     const float*, const float*, const float*, int, float);

#if defined(__AVX512F__)
#define LM_GV_VW 16
#else
#define LM_GV_VW 8
#endif
#define LM_GEMV_ROWS 4           /* at most this many A rows take the streaming path */
#define LM_GEMV_BAND 16          /* chunks of B hold a multiple of this many rows */
#define LM_GEMV_CHUNK_BYTES 131072 /* B per chunk a thread takes, at least */
#define LM_GEMV_CHUNKS 16        /* and at most this many chunks per thread (a 545 MB
                                    head: 16 MB chunks, not 4,000 taken one by one) */
#define LM_GEMV_MIN_BYTES 262144 /* below this much B (~8 us of streaming on one core),
                                    one thread: no fork/join */
#define LM_GV_NO_TRANS 111
#define LM_GV_TRANS 112

typedef float lm_gv_vec __attribute__((vector_size(LM_GV_VW * sizeof(float))));

static inline lm_gv_vec lm_gv_load(const float* p)
{
    lm_gv_vec v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float lm_gv_sum(lm_gv_vec v)
{
    float total = 0.0f;
    for (int l = 0; l < LM_GV_VW; l++) total += v[l];
    return total;
}

/* dot(x, w) over k floats: four independent accumulators, one sequential stream of w */
static inline float lm_gv_dot(const float* restrict x, const float* restrict w, long long k)
{
    const long long step = 4 * LM_GV_VW, k4 = k - k % step, kv = k - k % LM_GV_VW;
    lm_gv_vec s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    long long p = 0;
    for (; p < k4; p += step) {
        s0 += lm_gv_load(x + p) * lm_gv_load(w + p);
        s1 += lm_gv_load(x + p + LM_GV_VW) * lm_gv_load(w + p + LM_GV_VW);
        s2 += lm_gv_load(x + p + 2 * LM_GV_VW) * lm_gv_load(w + p + 2 * LM_GV_VW);
        s3 += lm_gv_load(x + p + 3 * LM_GV_VW) * lm_gv_load(w + p + 3 * LM_GV_VW);
    }
    for (; p < kv; p += LM_GV_VW) s0 += lm_gv_load(x + p) * lm_gv_load(w + p);
    float total = lm_gv_sum((s0 + s1) + (s2 + s3));
    for (; p < k; p++) total += x[p] * w[p];
    return total;
}

/* c[i * ldc + j] = dot(a row i, b row j) for rows j0 <= j < j1: B row by row (one
   sequential stream, which the prefetchers follow best), each against every A row */
static void lm_gemv_band(long long m, long long j0, long long j1, long long k, const float* a,
                         long long lda, const float* b, long long ldb, float* c, long long ldc)
{
    for (long long j = j0; j < j1; j++)
        for (long long i = 0; i < m; i++) c[i * ldc + j] = lm_gv_dot(a + i * lda, b + j * ldb, k);
}

/* all threads, B's rows in chunks of at least LM_GEMV_CHUNK_BYTES handed out dynamically:
   a thread the OS delays holds up only its chunk (a static split in halves ran at half
   the speed on the loaded 2-core machine); inside an active parallel region (a batch of
   products run as one region) a nested region has one thread: one band, as gemm.c's
   lm_threads() plans */
static void lm_gemv(long long m, long long n, long long k, const float* a, long long lda,
                    const float* b, long long ldb, float* c, long long ldc)
{
    const long long bytes = n * k * (long long)sizeof(float);
    if (bytes < LM_GEMV_MIN_BYTES || omp_get_max_threads() == 1 || omp_in_parallel()) {
        lm_gemv_band(m, 0, n, k, a, lda, b, ldb, c, ldc);
        return;
    }
    long long chunk = bytes / (LM_GEMV_CHUNKS * omp_get_max_threads());
    chunk = chunk < LM_GEMV_CHUNK_BYTES ? LM_GEMV_CHUNK_BYTES : chunk;
    long long rows = chunk / (k * (long long)sizeof(float));
    rows = rows < LM_GEMV_BAND ? LM_GEMV_BAND : rows - rows % LM_GEMV_BAND;
    const long long chunks = (n + rows - 1) / rows;
    #pragma omp parallel for schedule(dynamic, 1)
    for (long long q = 0; q < chunks; q++) {
        const long long j0 = q * rows, j1 = j0 + rows < n ? j0 + rows : n;
        lm_gemv_band(m, j0, j1, k, a, lda, b, ldb, c, ldc);
    }
}

/* lm_sgemm_rows with lm_sgemm_ep's epilogue (bias, residual, activation: a linear layer's
   reader fused into its product); on the few-row path applied to C once the dots are
   done (C is a few rows, still in cache) */
void lm_sgemm_rows_ep(int ta, int tb, long long m, long long n, long long k, const float* a,
                      long long lda, const float* b, long long ldb, float* c, long long ldc,
                      long long width, long long stride, const float* row_bias,
                      const float* col_bias, const float* residual, int act, float scale)
{
    if (ta == LM_GV_NO_TRANS && tb == LM_GV_TRANS && m > 0 && m <= LM_GEMV_ROWS && k > 0 &&
        n > 0 && (width <= 0 || width >= n)) {
        lm_gemv(m, n, k, a, lda, b, ldb, c, ldc);
        lm_sgemm_finish(m, n, c, ldc, width, stride, row_bias, col_bias, residual, act, scale);
        return;
    }
    lm_sgemm_ep(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, width, stride, row_bias, col_bias,
                residual, act, scale);
}

void lm_sgemm_rows(int ta, int tb, long long m, long long n, long long k, const float* a,
                   long long lda, const float* b, long long ldb, float* c, long long ldc,
                   long long width, long long stride)
{
    /* nothing fused: no biases, no residual, LM_ACT_NONE, scale 1 */
    lm_sgemm_rows_ep(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, width, stride, 0, 0, 0, 0, 1.0f);
}
