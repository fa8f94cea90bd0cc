/* luminal's float32 register tile, shared by the matrix product (`gemm.c`) and the
   fused Winograd convolution (`winograd.c`): each is compiled as its own unit after this
   one (gemm.py, winograd.py), so a graph without Winograd convolutions never pays gcc's
   time on winograd.c, and both multiply in the same tiles. Everything here is static. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define LM_VW 16 /* floats per vector */
#define LM_MR 8  /* rows of the register tile */
#define LM_NV 3  /* vectors per tile row: 8 x 48 floats, 24 of the 32 vector registers */
#else
#define LM_VW 8
#define LM_MR 6
#define LM_NV 2 /* 6 x 16 floats: 12 of the 16 vector registers */
#endif
#define LM_NR (LM_VW * LM_NV)

/* threads a product may use: 1 inside an active parallel region (a batch of products run
   as one OpenMP region, blas.py), where a nested region runs on one thread anyway, so
   tasks are not planned, nor B panels packed again, for threads that are not there */
static inline int lm_threads(void) { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

typedef float lm_vec __attribute__((vector_size(LM_VW * sizeof(float))));

static inline lm_vec lm_vload(const float* p) { lm_vec v; memcpy(&v, p, sizeof v); return v; }
static inline void lm_vstore(float* p, lm_vec v) { memcpy(p, &v, sizeof v); }

typedef float lm_v4 __attribute__((vector_size(4 * sizeof(float))));
typedef int lm_i4 __attribute__((vector_size(4 * sizeof(int))));
static inline lm_v4 lm_v4load(const float* p) { lm_v4 v; memcpy(&v, p, sizeof v); return v; }
static inline void lm_v4store(float* p, lm_v4 v) { memcpy(p, &v, sizeof v); }
typedef float lm_v8 __attribute__((vector_size(8 * sizeof(float))));
typedef int lm_v8i __attribute__((vector_size(8 * sizeof(int))));
static inline lm_v8 lm_v8load(const float* p) { lm_v8 v; memcpy(&v, p, sizeof v); return v; }
static inline void lm_v8store(float* p, lm_v8 v) { memcpy(p, &v, sizeof v); }

#define LM_ACT_NONE 0
#define LM_ACT_RELU 1 /* max(x, 0), NaN kept (as relu's max over (x, 0) keeps it) */
#define LM_ACT_GELU 2 /* x (erf(x / sqrt 2) / 2 + 1 / 2), erf as luminal/hl/unary.py builds it */

typedef int lm_ivec __attribute__((vector_size(LM_VW * sizeof(int))));

/* max(v, 0) per lane: negative lanes to 0, NaN kept (it is not negative) */
static inline lm_vec lm_vrelu(lm_vec v)
{
    const lm_ivec negative = v < 0.0f;
    return (lm_vec)((lm_ivec)v & ~negative);
}

/* GELU-erf of LM_VW values, the graph's formula op for op: t = x / sqrt 2 clamped to
   +-3.92 (NaN kept), erf(t) = t P(t^2) / Q(t^2) (ERF_NUMERATOR / ERF_DENOMINATOR by
   Horner's rule), exactly +-1 where |t| > 3.92 */
static inline lm_vec lm_vgelu(lm_vec v, float half)
{
    const lm_vec bound = (lm_vec){0} + 3.92f;
    const lm_vec t = v * 0.70710678118654752f;
    lm_vec x = t;
    lm_ivec below = x < -bound, above = x > bound;
    x = (lm_vec)(((lm_ivec)x & ~(below | above)) | ((lm_ivec)(-bound) & below) |
                 ((lm_ivec)bound & above));
    const lm_vec x2 = x * x;
    lm_vec num = x2 * 1.992147957707857e-08f + -1.994306558117387e-06f;
    num = num * x2 + 0.00014898755762260407f;
    num = num * x2 + 0.003972914069890976f;
    num = num * x2 + 0.051397331058979034f;
    num = num * x2 + 0.20611466467380524f;
    num = num * x2 + 1.1283787488937378f;
    lm_vec den = x2 * 0.0010241302661597729f + 0.014889256097376347f;
    den = den * x2 + 0.11756473779678345f;
    den = den * x2 + 0.5159931182861328f;
    den = den * x2 + 1.0f;
    lm_vec erf = x * num * (1.0f / den);
    const lm_vec one = (lm_vec){0} + 1.0f;
    const lm_ivec high = t > bound, low = t < -bound; /* NaN: neither */
    erf = (lm_vec)(((lm_ivec)erf & ~(high | low)) | ((lm_ivec)one & high) |
                   ((lm_ivec)(-one) & low));
    return v * (erf * half + half); /* half: 1/2, or 1/2 of the activation's scale */
}

/* what is applied to C's values as they are finally stored (the consumer of the product
   fused into it: a layer's bias, a residual add, an activation): + row_bias[i] on row i,
   + col_bias[j] on column j, + the residual's element at C's own offset (residual - c
   apart), then `act` (LM_ACT_*) times `scale` (an ONNX export's GELU may leave its 1/2 to
   a later op); each may be absent (null, LM_ACT_NONE, 1) */
typedef struct {
    const float* row_bias;
    const float* col_bias;
    const float* residual;
    int act;
    float scale;
} lm_ep;

/* where C's columns lie: blocks of `width` columns, `stride` apart; `ep` null when
   nothing is fused */
typedef struct {
    float* c;
    long long ldc, width, stride;
    const lm_ep* ep;
} lm_out;

static inline float* lm_out_at(const lm_out* out, long long i, long long j)
{
    return out->c + i * out->ldc + j / out->width * out->stride + j % out->width;
}

/* the epilogue on `count` values v of row i from column j (stored at q), in place */
static void lm_finish(const lm_out* out, long long i, long long j, const float* q,
                      float* v, int count)
{
    const lm_ep* ep = out->ep;
    if (ep->row_bias)
        for (int e = 0; e < count; e++) v[e] += ep->row_bias[i];
    if (ep->col_bias)
        for (int e = 0; e < count; e++) v[e] += ep->col_bias[j + e];
    if (ep->residual) {
        const float* r = ep->residual + (q - out->c);
        for (int e = 0; e < count; e++) v[e] += r[e];
    }
    if (ep->act == LM_ACT_RELU)
        for (int e = 0; e < count; e++) v[e] = v[e] < 0.0f ? 0.0f : v[e];
    if (ep->act == LM_ACT_GELU)
        for (int e = 0; e < count; e += LM_VW) { /* whole vectors, the last one partly */
            const int lanes = count - e < LM_VW ? count - e : LM_VW;
            lm_vec x = {0};
            memcpy(&x, v + e, (size_t)lanes * sizeof(float));
            x = lm_vgelu(x, 0.5f * ep->scale);
            memcpy(v + e, &x, (size_t)lanes * sizeof(float));
        }
    else if (ep->scale != 1.0f)
        for (int e = 0; e < count; e++) v[e] *= ep->scale;
}

/* the epilogue on row i of a register tile (nv vectors from column j, stored at q) */
static inline __attribute__((always_inline)) void lm_finish_row(const lm_out* out, long long i,
                                                                long long j, const float* q,
                                                                lm_vec* v, int nv)
{
    const lm_ep* ep = out->ep;
    if (ep->row_bias) {
        const float shift = ep->row_bias[i];
        for (int x = 0; x < nv; x++) v[x] += shift;
    }
    if (ep->col_bias)
        for (int x = 0; x < nv; x++) v[x] += lm_vload(ep->col_bias + j + x * LM_VW);
    if (ep->residual) {
        const float* r = ep->residual + (q - out->c);
        for (int x = 0; x < nv; x++) v[x] += lm_vload(r + x * LM_VW);
    }
    if (ep->act == LM_ACT_RELU)
        for (int x = 0; x < nv; x++) v[x] = lm_vrelu(v[x]);
    if (ep->act == LM_ACT_GELU)
        for (int x = 0; x < nv; x++) v[x] = lm_vgelu(v[x], 0.5f * ep->scale);
    else if (ep->scale != 1.0f)
        for (int x = 0; x < nv; x++) v[x] *= ep->scale;
}

/* lm_gemm_tile's body, A's element (p, r) at ap[p * a_step + r * a_ld], nv of the tile's
   NV vectors per row (a narrower tile for the last columns), mr of its MR rows (fewer
   for a last row panel of few rows): inlined once per A layout, nv and mr, so that each
   loop's addressing and length are fixed */
static inline __attribute__((always_inline)) void lm_tile_body(
    long long kc, const float* restrict ap, long long a_step, long long a_ld,
    const float* restrict bp, const long long* restrict rows_at, const lm_out* out, long long i,
    long long j, int rows, int cols, int add, int finish, int nv, int mr,
    const float* restrict next)
{
    const int width = nv * LM_VW;
    const int full = rows == LM_MR && cols == width && j % out->width + width <= out->width;
    if (full) {
        /* C's rows are ldc apart (no prefetcher fetches them), read back after the
           previous K block or written for the first time (a write reads the line first):
           asked for now, they arrive while the tile multiplies (36 products 65 x 1568 x
           64 of distinct operands, caches cold: 3.45 -> 3.22 ms) */
        const float* q = lm_out_at(out, i, j);
        for (int row = 0; row < LM_MR; row++)
            for (int x = 0; x < width; x += 64 / (int)sizeof(float))
                __builtin_prefetch(q + row * out->ldc + x, 1);
    }
    if (finish && full && out->ep->residual) {
        /* the residual's rows are ldc apart, so no prefetcher fetches them: asked for now,
           they arrive while the tile multiplies (waiting for them at the store cost a
           64 x 576 x 25088 convolution 0.8 ms, more than a kernel adding it after) */
        const float* r = out->ep->residual + (lm_out_at(out, i, j) - out->c);
        for (int row = 0; row < LM_MR; row++)
            for (int x = 0; x < width; x += 64 / (int)sizeof(float))
                __builtin_prefetch(r + row * out->ldc + x);
    }
    lm_vec acc[LM_MR][LM_NV];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = (lm_vec){0};
    for (long long p = 0; p < kc; p++) {
        if (next && p % 16 == 0) /* a line of each row of the next A panel, into L2 */
            for (int r = 0; r < LM_MR; r++) __builtin_prefetch(next + r * a_ld + p, 0, 2);
        const float* row = bp + (rows_at ? rows_at[p] : p * LM_NR);
        lm_vec b[LM_NV];
        for (int v = 0; v < nv; v++) b[v] = lm_vload(row + v * LM_VW);
        for (int r = 0; r < mr; r++) {
            const float a = ap[p * a_step + r * a_ld];
            for (int v = 0; v < nv; v++) acc[r][v] += a * b[v];
        }
    }
    if (full) {
        float* c = lm_out_at(out, i, j);
        for (int r = 0; r < LM_MR; r++) {
            float* q = c + r * out->ldc;
            if (add)
                for (int v = 0; v < nv; v++) acc[r][v] += lm_vload(q + v * LM_VW);
            if (finish) lm_finish_row(out, i + r, j, q, acc[r], nv);
            for (int v = 0; v < nv; v++) lm_vstore(q + v * LM_VW, acc[r][v]);
        }
        return;
    }
    float tile[LM_MR][LM_NR];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) lm_vstore(&tile[r][v * LM_VW], acc[r][v]);
    /* the tile's columns in runs, each inside one block of C's columns */
    for (int x = 0; x < cols;) {
        const long long within = (j + x) % out->width;
        const int run = (int)(cols - x < out->width - within ? cols - x : out->width - within);
        float* q = lm_out_at(out, i, j + x);
        for (int r = 0; r < rows; r++, q += out->ldc) {
            float* t = &tile[r][x];
            if (add)
                for (int e = 0; e < run; e++) t[e] += q[e];
            if (finish) lm_finish(out, i + r, j + x, q, t, run);
            memcpy(q, t, (size_t)run * sizeof(float));
        }
        x += run;
    }
}

/* C tile at (i, j) (rows x cols of MR x NR) = (or +=, when add) A panel times B panel
   (kc x NR): packed (row p at bp + p * NR), or with `rows_at` read in place (row p at
   bp + rows_at[p]); with `finish` (the last K block, something fused) the epilogue is
   applied as the tile is stored. The A panel is packed (kc x MR, `a_ld` 0) or A's rows read where they
   lie, `a_ld` apart (element (p, r) at ap[r * a_ld + p]): a broadcast reads one float
   either way, and packing A cost more than it saved (1 thread, 4096 x 384 x 1536:
   23.2-23.7 -> 20.4-20.8 ms read in place). With A in place, `next` (or null) is the A
   panel (rows a_ld apart) the caller multiplies next: a line of each of its rows is asked
   for, into L2, every 16 K steps, so that weights that come from memory or L3 (8 streams
   the prefetchers follow late) are there when its tile starts. */
static void lm_gemm_tile(long long kc, const float* restrict ap, long long a_ld,
                         const float* restrict bp, const long long* restrict rows_at,
                         const lm_out* out, long long i, long long j, int rows, int cols, int add,
                         int finish, const float* next)
{
    /* the last columns of a product whose n is not a multiple of NR in fewer vectors:
       n = 128 (a Winograd product of 8 images' 7 x 7 tiles) multiplies 128 of 144
       columns, not 96 + 48 */
    const int nv = (cols + LM_VW - 1) / LM_VW;
    /* and a last row panel of 1 or up to 4 rows (always packed) in as many: a Winograd
       product's rows are its channels and one more (a zero row against cache-set
       conflicts), 36 products 65 x 1568 x 64 of distinct operands 3.41 -> 3.20 ms */
    if (!a_ld && nv == LM_NV && rows == 1)
        lm_tile_body(kc, ap, LM_MR, 1, bp, rows_at, out, i, j, rows, cols, add, finish, LM_NV, 1, 0);
    else if (LM_MR > 4 && !a_ld && nv == LM_NV && rows <= 4)
        lm_tile_body(kc, ap, LM_MR, 1, bp, rows_at, out, i, j, rows, cols, add, finish, LM_NV, 4, 0);
    else if (a_ld && nv == LM_NV)
        lm_tile_body(kc, ap, 1, a_ld, bp, rows_at, out, i, j, rows, cols, add, finish, LM_NV, LM_MR, next);
    else if (nv == LM_NV)
        lm_tile_body(kc, ap, LM_MR, 1, bp, rows_at, out, i, j, rows, cols, add, finish, LM_NV, LM_MR, 0);
    else if (LM_NV > 2 && a_ld && nv == 2)
        lm_tile_body(kc, ap, 1, a_ld, bp, rows_at, out, i, j, rows, cols, add, finish, 2, LM_MR, next);
    else if (LM_NV > 2 && nv == 2)
        lm_tile_body(kc, ap, LM_MR, 1, bp, rows_at, out, i, j, rows, cols, add, finish, 2, LM_MR, 0);
    else if (a_ld)
        lm_tile_body(kc, ap, 1, a_ld, bp, rows_at, out, i, j, rows, cols, add, finish, 1, LM_MR, next);
    else
        lm_tile_body(kc, ap, LM_MR, 1, bp, rows_at, out, i, j, rows, cols, add, finish, 1, LM_MR, 0);
}
