/* A whole Winograd convolution F(m x m, 3x3) in one call (`ops.WinogradConv`), appended
   to gemm.c's translation unit so that its products run in gemm.c's register tiles.

   The graph computes the same convolution as four kernels (`nn/winograd.py`): the input
   windows copied (2.25x the input for F(4x4)), their transform V = B^T d B, alpha^2
   products M = U V, the output transform Y = A^T M A. Each step reads and writes
   buffers of several MB: ResNet-18's 56 x 56 x 64 convolutions of 8 images moved about
   100 MB per convolution, and on two threads that traffic, not the multiplications, set
   the time. Here the tiles go through all four steps in blocks of at most LM_NR tiles
   (one register tile's width), so a block's transformed input and products (alpha^2 x
   (C + K) x LM_NR floats) stay in L2: the input is read once and the output written
   once.

   Per block: V for every input channel (the tiles of one row of tiles are a segment: a
   window's rows are read as `tile` phases, element tile * l + r of a row at phase r,
   lane l, so that every step below runs along unit-stride lanes, one lane per tile),
   then for each of the alpha^2 positions the product M_q (K x tiles) = U_q (K x C) V_q
   (C x tiles) in lm_gemm_tile (U's rows read in place), then Y for every output channel,
   stored into the output's rows. */

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define LM_WG_ALPHA 6 /* the largest window handled: F(4x4, 3x3) */
/* V's rows: a register tile's width and one vector more, which a segment's last vector
   of lanes may fill */
#define LM_WG_LDV (LM_NR + LM_VW)
#define LM_WG_Q (LM_WG_ALPHA * LM_WG_ALPHA)

/* one segment: `count` tiles side by side in one row of tiles, lane l at column
   tile * l of the rows that start at `row` (rows `x_h` apart) */
typedef struct {
    const float* row;
    float* out; /* the segment's first output element (row 0 of tile 0) */
    long long lane; /* the segment's first column in the block */
    int count;
} lm_wg_segment;

/* Lanes: LM_VW tiles side by side. A window row's elements tile * l + b (lane l, b <
   alpha) are taken from the row's floats by two-source shuffles (vpermt2ps with
   AVX-512), and a tile row's outputs are interleaved back the same way. */
typedef struct {
    lm_ivec phases[2]; /* from two vectors: lanes e < n / 2 <- phases (0, 1) (tile 4) or
                          all lanes <- phase 0 / 1 (tile 2) of element tile * e + phase */
    lm_ivec join[2];   /* halves (first, second) of two vectors joined */
    lm_ivec shift[2];  /* lanes 1.. of a vector, then lane 0 / 1 of the next */
    lm_ivec pair[2];   /* lanes (2e, 2e + 1) <- lane e of two vectors: first, second half */
    lm_ivec quad[2];   /* lanes (4e .. 4e + 3) <- lane pairs e of two pair-interleaved */
} lm_wg_masks;

static void lm_wg_make_masks(int tile, lm_wg_masks* mk)
{
    const int n = LM_VW, h = LM_VW / 2;
    for (int e = 0; e < n; e++) {
        for (int k = 0; k < 2; k++) /* tile 4: phases (2k, 2k + 1) in the two halves */
            mk->phases[k][e] = tile == 2 ? 2 * e + k : 4 * (e % h) + 2 * k + e / h;
        mk->join[0][e] = e < h ? e : n + e - h;
        mk->join[1][e] = mk->join[0][e] + h;
        mk->shift[0][e] = e + 1;
        mk->shift[1][e] = e + 1 + (e == n - 1);
        mk->pair[0][e] = (e % 2 ? n : 0) + e / 2;
        mk->pair[1][e] = mk->pair[0][e] + n / 2;
        mk->quad[0][e] = ((e / 2) % 2 ? n : 0) + 2 * (e / 4) + e % 2;
        mk->quad[1][e] = mk->quad[0][e] + n / 2;
    }
}

/* the LM_VW floats at p, of which only the first `avail` may be read (zeros after) */
static inline __attribute__((always_inline)) lm_vec lm_wg_load(const float* p, int avail)
{
    if (avail >= LM_VW) return lm_vload(p);
    lm_vec v = (lm_vec){0};
#if defined(__AVX512F__)
    if (avail > 0) v = (lm_vec)_mm512_maskz_loadu_ps((__mmask16)((1u << avail) - 1), p);
#else
    for (int e = 0; e < avail; e++) v[e] = p[e];
#endif
    return v;
}

/* the first `count` floats of v stored at p */
static inline __attribute__((always_inline)) void lm_wg_store(float* p, lm_vec v, int count)
{
    if (count >= LM_VW) {
        lm_vstore(p, v);
        return;
    }
#if defined(__AVX512F__)
    if (count > 0) _mm512_mask_storeu_ps(p, (__mmask16)((1u << count) - 1), (__m512)v);
#else
    for (int e = 0; e < count; e++) p[e] = v[e];
#endif
}

/* d[b] lane l = x[tile * l + b] for b < alpha (tile + 2), l < LM_VW, of the floats at x
   of which `avail` may be read: the row's `tile` phases from its first tile * LM_VW
   floats, the last two b the first two phases a lane further on */
static inline __attribute__((always_inline)) void lm_wg_row(const float* x, int avail, int tile,
                                                             const lm_wg_masks* mk, lm_vec* d)
{
    const lm_vec a = lm_wg_load(x, avail), b = lm_wg_load(x + LM_VW, avail - LM_VW);
    const lm_vec next = lm_wg_load(x + tile * LM_VW, avail - tile * LM_VW);
    if (tile == 2) {
        d[0] = __builtin_shuffle(a, b, mk->phases[0]);
        d[1] = __builtin_shuffle(a, b, mk->phases[1]);
    } else {
        const lm_vec c = lm_wg_load(x + 2 * LM_VW, avail - 2 * LM_VW);
        const lm_vec e = lm_wg_load(x + 3 * LM_VW, avail - 3 * LM_VW);
        const lm_vec ab01 = __builtin_shuffle(a, b, mk->phases[0]);
        const lm_vec ab23 = __builtin_shuffle(a, b, mk->phases[1]);
        const lm_vec ce01 = __builtin_shuffle(c, e, mk->phases[0]);
        const lm_vec ce23 = __builtin_shuffle(c, e, mk->phases[1]);
        d[0] = __builtin_shuffle(ab01, ce01, mk->join[0]);
        d[1] = __builtin_shuffle(ab01, ce01, mk->join[1]);
        d[2] = __builtin_shuffle(ab23, ce23, mk->join[0]);
        d[3] = __builtin_shuffle(ab23, ce23, mk->join[1]);
    }
    d[tile] = __builtin_shuffle(d[0], next, mk->shift[0]);
    d[tile + 1] = __builtin_shuffle(d[1], next, mk->shift[1]);
}

/* V_q[c][lane + l] for `count` <= LM_VW tiles of channel c whose window rows start at
   `row` (x_h apart): B^T d B, separable, first along the windows' columns, then rows */
static inline __attribute__((always_inline)) void lm_wg_input(
    int tile, int alpha, const float* restrict bt, const float* restrict row, long long x_h,
    int count, float* restrict v, long long v_q, const lm_wg_masks* mk)
{
    const int used = tile * count + alpha - tile; /* floats of a window row the tiles read */
    lm_vec h[LM_WG_ALPHA][LM_WG_ALPHA];
    #pragma GCC unroll 8
    for (int a = 0; a < alpha; a++) {
        const float* line = row + a * x_h;
        lm_vec d[LM_WG_ALPHA];
        lm_wg_row(line, used, tile, mk, d);
        #pragma GCC unroll 8
        for (int j = 0; j < alpha; j++) {
            lm_vec acc = (lm_vec){0};
            #pragma GCC unroll 8
            for (int b = 0; b < alpha; b++) {
                const float w = bt[j * alpha + b];
                if (w != 0.0f) acc += w * d[b];
            }
            h[a][j] = acc;
        }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < alpha; i++)
        #pragma GCC unroll 8
        for (int j = 0; j < alpha; j++) {
            lm_vec acc = (lm_vec){0};
            #pragma GCC unroll 8
            for (int a = 0; a < alpha; a++) {
                const float w = bt[i * alpha + a];
                if (w != 0.0f) acc += w * h[a][j];
            }
            /* all lanes: the next segment's tiles, written later, or the row's spare
               LM_VW floats */
            lm_vstore(v + (i * alpha + j) * v_q, acc);
        }
}

/* what is applied to one output channel's values as they are stored (the consumer of
   the convolution fused into it, as gemm.c's lm_ep): + bias, + the residual's element at
   the output's own offset (`residual` - `out` apart, null when none), then ReLU */
typedef struct {
    float bias;
    const float* residual;
    int relu;
} lm_wg_ep;

/* the output tiles of one channel for `count` <= LM_VW tiles: A^T M A from
   M_q[lane + l] (`m`, positions m_q apart; read LM_VW lanes, the buffer has room), row i
   of the tiles stored at out + i * y_i, tile l's column j at tile * l + j, `ep` applied */
static inline __attribute__((always_inline)) void lm_wg_output(
    int tile, int alpha, const float* restrict at, const float* restrict m, long long m_q,
    int count, float* restrict out, long long y_i, const lm_wg_masks* mk, const lm_wg_ep* ep)
{
    lm_vec p[LM_WG_ALPHA - 2][LM_WG_ALPHA];
    #pragma GCC unroll 8
    for (int i = 0; i < tile; i++)
        #pragma GCC unroll 8
        for (int b = 0; b < alpha; b++) p[i][b] = (lm_vec){0};
    #pragma GCC unroll 8
    for (int a = 0; a < alpha; a++)
        #pragma GCC unroll 8
        for (int b = 0; b < alpha; b++) {
            const lm_vec x = lm_vload(m + (a * alpha + b) * m_q);
            #pragma GCC unroll 8
            for (int i = 0; i < tile; i++) {
                const float w = at[i * alpha + a];
                if (w != 0.0f) p[i][b] += w * x;
            }
        }
    #pragma GCC unroll 8
    for (int i = 0; i < tile; i++) {
        lm_vec y[LM_WG_ALPHA - 2];
        #pragma GCC unroll 8
        for (int j = 0; j < tile; j++) {
            lm_vec acc = (lm_vec){0};
            #pragma GCC unroll 8
            for (int b = 0; b < alpha; b++) {
                const float w = at[j * alpha + b];
                if (w != 0.0f) acc += w * p[i][b];
            }
            y[j] = acc + ep->bias;
        }
        /* the tile row: lane tile * l + j <- y[j][l] */
        lm_vec row[LM_WG_ALPHA - 2];
        if (tile == 2) {
            row[0] = __builtin_shuffle(y[0], y[1], mk->pair[0]);
            row[1] = __builtin_shuffle(y[0], y[1], mk->pair[1]);
        } else {
            const lm_vec lo01 = __builtin_shuffle(y[0], y[1], mk->pair[0]);
            const lm_vec hi01 = __builtin_shuffle(y[0], y[1], mk->pair[1]);
            const lm_vec lo23 = __builtin_shuffle(y[2], y[3], mk->pair[0]);
            const lm_vec hi23 = __builtin_shuffle(y[2], y[3], mk->pair[1]);
            row[0] = __builtin_shuffle(lo01, lo23, mk->quad[0]);
            row[1] = __builtin_shuffle(lo01, lo23, mk->quad[1]);
            row[2] = __builtin_shuffle(hi01, hi23, mk->quad[0]);
            row[3] = __builtin_shuffle(hi01, hi23, mk->quad[1]);
        }
        float* r = out + i * y_i;
        #pragma GCC unroll 8
        for (int o = 0; o < tile; o++) {
            const int left = tile * count - o * LM_VW;
            if (ep->residual) row[o] += lm_wg_load(r + (ep->residual - out) + o * LM_VW, left);
            if (ep->relu) { /* negative lanes to 0; NaN is not negative */
                const lm_ivec negative = row[o] < 0.0f;
                row[o] = (lm_vec)((lm_ivec)row[o] & ~negative);
            }
            lm_wg_store(r + o * LM_VW, row[o], left);
        }
    }
}

/* the segments of tiles [t0, t1) (tiles numbered image by image, row by row); returns
   how many */
static int lm_wg_segments(long long t0, long long t1, long long rows, long long cols,
                          const float* x, long long x_n, long long x_th, long long tile,
                          float* y, long long y_n, long long y_th, lm_wg_segment* seg)
{
    int count = 0;
    for (long long t = t0; t < t1;) {
        const long long image = t / (rows * cols), th = t / cols % rows, tw = t % cols;
        const long long run = cols - tw < t1 - t ? cols - tw : t1 - t;
        seg[count].row = x + image * x_n + th * x_th + tw * tile;
        seg[count].out = y + image * y_n + th * y_th + tw * tile;
        seg[count].lane = t - t0;
        seg[count].count = (int)run;
        count++;
        t += run;
    }
    return count;
}

/* Y = conv(x, g) by F(tile x tile, 3x3), tile 4 or 2 (alpha = tile + 2), with the
   transforms of `nn/winograd.py` (B^T: LM_WG_BT4 / LM_WG_BT2, A^T: LM_WG_AT4 /
   LM_WG_AT2, row-major, defined before this file from those matrices):
   - the input windows: image n, channel c, tile row th, column tw start at
     x + n * x_n + c * x_c + th * x_th + tw * tile, their rows x_h apart, unit-stride
     (a padded input: every window lies inside it); x_size floats from x may be read;
   - u: the transformed weights, U_q[k][c] at u + q * u_q + k * u_k + c;
   - the output tiles: row i of tile (n, k, th, tw) at y + n * y_n + k * y_k + th * y_th +
     i * y_i + tw * tile (unit-stride);
   - lm_winograd_ep: the fused consumer, relu(Y + bias[k] + residual): `bias` per output
     channel and `residual` laid out as Y may be null.
   Returns 0, or the bytes it could not allocate (nothing written). */
long long lm_winograd_ep(long long tile, long long images, long long rows, long long cols,
                         long long channels, long long outs, const float* x, long long x_n,
                         long long x_c, long long x_h, long long x_th, long long x_size,
                         const float* u, long long u_q, long long u_k, float* y, long long y_n,
                         long long y_k, long long y_th, long long y_i, const float* bias,
                         const float* residual, long long relu)
{
    const int alpha = (int)tile + 2, q_count = alpha * alpha;
    const long long tiles = images * rows * cols;
    const float* x_end = x + x_size;
    const int threads = lm_threads();
    /* blocks of LM_NR tiles (whole register tiles) */
    const long long block = LM_NR, blocks = (tiles + block - 1) / block;
    const long long full_panels = outs / LM_MR, last_rows = outs % LM_MR;
    /* the alpha^2 positions' blocks of V and of M one cache line more than their rows
       apart: 64 x 64 floats apart (16 KB) put the input transform's 36 stores, and the
       output transform's 36 loads, in one L1 set */
    const long long v_q = channels * LM_WG_LDV + 64 / (long long)sizeof(float);
    const long long m_q = outs * LM_NR + 64 / (long long)sizeof(float);
    const size_t v_floats = (size_t)(q_count * v_q), m_floats = (size_t)(q_count * m_q);
    const size_t a_floats = (size_t)(last_rows ? q_count * channels * LM_MR : 0);
    const size_t bytes = (v_floats + m_floats + a_floats) * sizeof(float);
    /* the last partial panel of U's rows, packed (zero rows past K): the register tile
       reads LM_MR rows */
    float* packed = a_floats ? (float*)calloc(a_floats, sizeof(float)) : 0;
    if (a_floats && !packed) return (long long)(a_floats * sizeof(float));
    for (int q = 0; q < q_count && last_rows; q++)
        for (long long c = 0; c < channels; c++)
            for (long long r = 0; r < last_rows; r++)
                packed[(q * channels + c) * LM_MR + r] =
                    u[q * u_q + (full_panels * LM_MR + r) * u_k + c];
    lm_wg_masks masks;
    lm_wg_make_masks((int)tile, &masks);
    int failed = 0;
    #pragma omp parallel num_threads(threads) if (threads > 1 && blocks > 1) reduction(| : failed)
    {
        /* zeroed: the register tiles multiply all LM_NR columns of V, a block's unused
           ones included */
        float* v = (float*)calloc(v_floats + m_floats + LM_VW, sizeof(float));
        float* m = v + v_floats;
        long long* rows_at = (long long*)malloc((size_t)channels * sizeof(long long));
        failed |= v == 0 || rows_at == 0;
        for (long long c = 0; rows_at && c < channels; c++) rows_at[c] = c * LM_WG_LDV;
        lm_wg_segment seg[LM_NR];
        #pragma omp for schedule(dynamic, 1)
        for (long long b = 0; b < blocks; b++) {
            if (!v || !rows_at) continue;
            const long long t0 = b * block, t1 = t0 + block < tiles ? t0 + block : tiles;
            if (t0 >= t1) continue;
            const int width = (int)(t1 - t0);
            const int segments = lm_wg_segments(t0, t1, rows, cols, x, x_n, x_th, tile, y,
                                                y_n, y_th, seg);
            for (int s = 0; s < segments; s++)
                for (int l0 = 0; l0 < seg[s].count; l0 += LM_VW) {
                    const int count = seg[s].count - l0 < LM_VW ? seg[s].count - l0 : LM_VW;
                    const float* row = seg[s].row + l0 * tile;
                    float* vc = v + seg[s].lane + l0;
                    for (long long c = 0; c < channels; c++) {
                        const float* rc = row + c * x_c;
                        float* vcc = vc + c * LM_WG_LDV;
                        /* constant sizes and matrices: every loop unrolled, zero terms
                           dropped, whole vectors unmasked */
                        /* whole vectors where they stay inside x (the lanes past
                           `count` read the next tiles or row: their columns of V are
                           never stored in Y), masked loads only at its end */
                        const int whole = count == LM_VW ||
                                          rc + (alpha - 1) * x_h + tile * LM_VW + alpha <= x_end;
                        if (tile == 4 && whole)
                            lm_wg_input(4, 6, LM_WG_BT4, rc, x_h, LM_VW, vcc, v_q, &masks);
                        else if (tile == 4)
                            lm_wg_input(4, 6, LM_WG_BT4, rc, x_h, count, vcc, v_q, &masks);
                        else if (whole)
                            lm_wg_input(2, 4, LM_WG_BT2, rc, x_h, LM_VW, vcc, v_q, &masks);
                        else
                            lm_wg_input(2, 4, LM_WG_BT2, rc, x_h, count, vcc, v_q, &masks);
                    }
                }
            for (int q = 0; q < q_count; q++) {
                const lm_out out = {m + q * m_q, LM_NR, LM_NR, 0, 0};
                const float* uq = u + q * u_q;
                for (long long ip = 0; ip < full_panels; ip++)
                    lm_gemm_tile(channels, uq + ip * LM_MR * u_k, u_k, v + q * v_q, rows_at, &out,
                                 ip * LM_MR, 0, LM_MR, width, 0, 0);
                if (last_rows)
                    lm_gemm_tile(channels, packed + q * channels * LM_MR, 0, v + q * v_q, rows_at,
                                 &out, full_panels * LM_MR, 0, (int)last_rows, width, 0, 0);
            }
            for (int s = 0; s < segments; s++)
                for (int l0 = 0; l0 < seg[s].count; l0 += LM_VW) {
                    const int count = seg[s].count - l0 < LM_VW ? seg[s].count - l0 : LM_VW;
                    const float* ml = m + seg[s].lane + l0;
                    float* yl = seg[s].out + l0 * tile;
                    for (long long k = 0; k < outs; k++) {
                        const float* mk = ml + k * LM_NR;
                        float* yk = yl + k * y_k;
                        const lm_wg_ep ek = {bias ? bias[k] : 0.0f,
                                             residual ? residual + (yk - y) : 0, relu};
                        if (tile == 4 && count == LM_VW)
                            lm_wg_output(4, 6, LM_WG_AT4, mk, m_q, LM_VW, yk, y_i, &masks, &ek);
                        else if (tile == 4)
                            lm_wg_output(4, 6, LM_WG_AT4, mk, m_q, count, yk, y_i, &masks, &ek);
                        else if (count == LM_VW)
                            lm_wg_output(2, 4, LM_WG_AT2, mk, m_q, LM_VW, yk, y_i, &masks, &ek);
                        else
                            lm_wg_output(2, 4, LM_WG_AT2, mk, m_q, count, yk, y_i, &masks, &ek);
                    }
                }
        }
        free(v);
        free(rows_at);
    }
    free(packed);
    return failed ? (long long)bytes : 0;
}

long long lm_winograd(long long tile, long long images, long long rows, long long cols,
                      long long channels, long long outs, const float* x, long long x_n,
                      long long x_c, long long x_h, long long x_th, long long x_size,
                      const float* u, long long u_q, long long u_k, float* y, long long y_n,
                      long long y_k, long long y_th, long long y_i)
{
    return lm_winograd_ep(tile, images, rows, cols, channels, outs, x, x_n, x_c, x_h, x_th,
                          x_size, u, u_q, u_k, y, y_n, y_k, y_th, y_i, 0, 0, 0);
}
