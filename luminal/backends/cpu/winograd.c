/* A whole Winograd convolution F(m x m, 3x3) in one call (`ops.WinogradConv`), its own
   unit after gemm_tile.c, so that its products run in gemm.c's register tiles (and a
   graph without one never compiles it).

   The graph computes the same convolution as four kernels (`nn/winograd.py`): the input
   windows copied (2.25x the input for F(4x4)), their transform V = B^T d B, alpha^2
   products M = U V, the output transform Y = A^T M A. Each step reads and writes
   buffers of several MB: ResNet-18's 56 x 56 x 64 convolutions of 8 images moved about
   100 MB per convolution, and on two threads that traffic, not the multiplications, set
   the time. Here the tiles go through all four steps in blocks of at most LM_NR tiles
   (one register tile's width), so a block's transformed input and products (alpha^2 x
   (C + K) x LM_NR floats: about 1 MB at 64 channels, 2 MB at 128) stay in cache: the
   input is read once and the output written once.

   Per block: V for every input channel (the tiles of one row of tiles are a segment: a
   window's rows are read as `tile` phases, element tile * l + r of a row at phase r,
   lane l, so that every step below runs along unit-stride lanes, one lane per tile),
   then, a chunk of output channels at a time (LM_WG_M_BYTES), for each of the alpha^2
   positions the product M_q (K x tiles) = U_q (K x C) V_q (C x tiles) in lm_gemm_tile
   (U's rows read in place), then Y for those channels, stored into the output's rows.
   Rows of at most half a vector of tiles share one vector
   of lanes, two or four segments side by side (`lm_wg_group_rows`): the transforms cost
   per vector, and 14 x 14 maps filled 4 of 16 lanes (ResNet-18's 28 x 28 x 128, 14 x 14
   x 256 and 7 x 7 x 512 by F(2x2) at batch 8, 1 thread: 2.98 -> 2.54, 3.93 -> 3.21,
   6.50 -> 5.96 ms). */

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define LM_WG_ALPHA 6 /* the largest window handled: F(4x4, 3x3) */
/* V's rows: a register tile's width and one vector more, which a segment's last vector
   of lanes may fill */
#define LM_WG_LDV (LM_NR + LM_VW)
/* a block's output channels go through the products and the output transform in chunks
   whose M (alpha^2 x channels x LM_NR floats) is at most LM_WG_M_BYTES, so that it stays
   in L2 between the two (64 channels by F(4x4), 144 by F(2x2) on AVX-512): all of 256
   channels' M (1.8 MB) went to L3, and to memory when another tenant shares it (cold
   caches, 2 threads: 14x14x256 2.71 -> 2.41 ms, 7x7x512 by F(2x2) 3.40-3.46 -> 3.20-3.23
   in chunks of 64, 3.06-3.33 -> 2.93-3.20 in chunks of 128 rather than 64; 64 and 128
   channels by F(4x4) unchanged) */
#define LM_WG_M_BYTES (448LL << 10)
/* transformed weights larger than this (a core's L2 here) are multiplied with the next
   row panel of U asked for, into L2, while a panel multiplies (lm_gemm_tile's `next`):
   every block reads all of U again, from L3 or memory, in 8 row streams that the
   prefetchers pick up late. ResNet-18 at batch 8, 2 threads, whole model, processes
   alternated, minima: 40.4-42.6 -> 37.1-39.4 ms on a quiet machine, 47.3-49.1 -> 43.9-46.1
   while another tenant shares the L3 (stages 2-4's U: 2.4, 9.4 and 16.8 MB); a 4 MiB
   limit (stages 3-4 only) 0.5 ms slower contended; alone, 28x28x128 3 % slower, 7x7x512
   by F(2x2) 5-8 % faster. Asking for A's next panel in gemm.c's products too (their
   weights, 0.3-4.7 MB) measured -1.6 to +1.35 ms on the model: not done there. */
#define LM_WG_STREAM_U_BYTES (1LL << 20)

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
    lm_ivec quad[2];   /* lanes (4e .. 4e + 3) <- lane pairs e of two pair-interleaved */
    /* short rows of tiles (`lm_wg_group_rows`): `rows` rows share a vector, each row's
       lanes after the previous row's */
    int rows;
    /* d[b] of two rows, the first `split` tiles long, from their phase vectors */
    lm_ivec gather[LM_VW / 2 + 1][LM_WG_ALPHA];
    lm_ivec halves;            /* lanes of rows (0, 1) | rows (2, 3), rows `cols` long */
    /* lanes (2e, 2e + 1) <- lane o + e of two vectors, for each first lane o */
    lm_ivec pair_from[LM_VW];
} lm_wg_masks;

/* how many rows of `cols` tiles share a vector of lanes (1: each row alone), so that
   maps of few tiles a row (28 x 28 by F(4x4): 7 of 16 lanes) fill the transforms' vectors:
   every row's window row fits in two vectors and a column's elements (lane l + 1 at most)
   stay in the phase's half of a phase vector. Four rows only when blocks of LM_NR tiles
   hold whole rows; two may be parts of rows (a block's ends: one mask set per length of
   the first). Blocks of whole rows instead, 42 tiles of 7-tile rows, made 28 x 28 x 128
   slower: the products' register tiles run LM_NR columns whatever the width. */
static int lm_wg_group_rows(int tile, long long cols)
{
    const long long most = tile == 4 ? LM_VW / 2 - 1 : LM_VW / 2;
    if (cols > most) return 1;
    return 4 * cols <= LM_VW && LM_NR % cols == 0 ? 4 : 2;
}

static void lm_wg_make_masks(int tile, long long cols, lm_wg_masks* mk)
{
    const int n = LM_VW, h = LM_VW / 2;
    mk->rows = lm_wg_group_rows(tile, cols);
    const int w = (int)cols;
    for (int e = 0; e < n; e++) {
        for (int split = 1; split <= h && split <= w; split++)
            for (int b = 0; b < tile + 2; b++) {
                /* element tile * l + b: phase b % tile, lane l (+ 1 for the last two b) of
                   phase vector (b % tile) / 2 (tile 4: the phase's half) or b % tile */
                const int l = (e < split ? e : e - split) + b / tile, ph = b % tile;
                const int at = tile == 4 ? (ph % 2) * h + (l < h ? l : 0) : l % n;
                mk->gather[split][b][e] = e < split ? at : n + at;
            }
        mk->halves[e] = e < 2 * w ? e : n + (e - 2 * w) % n;
        for (int o = 0; o < n; o++) mk->pair_from[o][e] = (e % 2 ? n : 0) + (e / 2 + o) % n;
        for (int k = 0; k < 2; k++) /* tile 4: phases (2k, 2k + 1) in the two halves */
            mk->phases[k][e] = tile == 2 ? 2 * e + k : 4 * (e % h) + 2 * k + e / h;
        mk->join[0][e] = e < h ? e : n + e - h;
        mk->join[1][e] = mk->join[0][e] + h;
        mk->shift[0][e] = e + 1;
        mk->shift[1][e] = e + 1 + (e == n - 1);
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

/* d[b] for `rows` (2 or 4) short rows of tiles sharing the lanes (row r's after row r -
   1's: `gather` joins two rows, the first as long as `gather`'s split, and mk->halves two
   pairs of rows `cols` long) from their window rows at x[r], avail[r] floats of each
   readable: a row's phases from two loads (its window row fits), then per column b one
   shuffle joins two rows' lanes and, for 4 rows, one more the two pairs */
static inline __attribute__((always_inline)) void lm_wg_rows(const float* const* x, int rows,
                                                              const int* avail, int tile,
                                                              const lm_ivec* gather,
                                                              const lm_wg_masks* mk, lm_vec* d)
{
    lm_vec p[4][2];
    #pragma GCC unroll 4
    for (int r = 0; r < rows; r++) {
        const lm_vec a = lm_wg_load(x[r], avail[r]);
        const lm_vec b = lm_wg_load(x[r] + LM_VW, avail[r] - LM_VW);
        p[r][0] = __builtin_shuffle(a, b, mk->phases[0]);
        p[r][1] = __builtin_shuffle(a, b, mk->phases[1]);
    }
    #pragma GCC unroll 8
    for (int b = 0; b < tile + 2; b++) {
        const int from = tile == 4 ? b % 4 / 2 : b % 2; /* the phase vector of column b */
        d[b] = __builtin_shuffle(p[0][from], p[1][from], gather[b]);
        if (rows == 4)
            d[b] = __builtin_shuffle(d[b], __builtin_shuffle(p[2][from], p[3][from], gather[b]),
                                     mk->halves);
    }
}


/* sum over b < alpha of w[b] x[b * step], the transforms' zero weights skipped (their
   matrices are compiled in: constant, so the test costs nothing) */
static inline __attribute__((always_inline)) lm_vec lm_wg_dot(const float* w, const lm_vec* x,
                                                                int alpha, int step)
{
    lm_vec acc = (lm_vec){0};
    #pragma GCC unroll 8
    for (int b = 0; b < alpha; b++)
        if (w[b] != 0.0f) acc += w[b] * x[b * step];
    return acc;
}

/* V_q[c][lane + l] for the LM_VW lanes of channel c: one row's tiles (`rows` 1) or several
   short rows' (lm_wg_rows, joined by `gather`), window rows starting at row[r] (x_h
   apart), avail[r] floats of each window row readable: B^T d B, separable, first along
   the windows' columns, then rows */
static inline __attribute__((always_inline)) void lm_wg_input(
    int tile, int alpha, const float* restrict bt, const float* const* row, int rows,
    long long x_h, const int* avail, const lm_ivec* gather, float* restrict v, long long v_q,
    const lm_wg_masks* mk)
{
    lm_vec h[LM_WG_ALPHA][LM_WG_ALPHA];
    #pragma GCC unroll 8
    for (int a = 0; a < alpha; a++) {
        lm_vec d[LM_WG_ALPHA];
        if (rows == 1)
            lm_wg_row(row[0] + a * x_h, avail[0], tile, mk, d);
        else {
            const float* lines[4];
            #pragma GCC unroll 4
            for (int r = 0; r < rows; r++) lines[r] = row[r] + a * x_h;
            lm_wg_rows(lines, rows, avail, tile, gather, mk, d);
        }
        #pragma GCC unroll 8
        for (int j = 0; j < alpha; j++) h[a][j] = lm_wg_dot(bt + j * alpha, d, alpha, 1);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < alpha; i++)
        #pragma GCC unroll 8
        for (int j = 0; j < alpha; j++) /* all lanes: the next segment's tiles, written
                                           later, or the row's spare LM_VW floats */
            lm_vstore(v + (i * alpha + j) * v_q,
                      lm_wg_dot(bt + i * alpha, &h[0][j], alpha, LM_WG_ALPHA));
}

/* what is applied to one output channel's values as they are stored (the consumer of
   the convolution fused into it, as gemm.c's lm_ep): + bias, + the residual's element at
   the output's own offset (`residual` - `out` apart, null when none), then ReLU */
typedef struct {
    float bias;
    const float* residual;
    int relu;
} lm_wg_ep;

/* the `floats` output values of a tile row from its vectors `row`, stored at `out` (the
   residual's values at `res`, null when none: a pointer, not a distance from `out`, as
   an input array need not be float-aligned against the output), `ep` applied */
static inline __attribute__((always_inline)) void lm_wg_put(float* out, lm_vec* row, int vectors,
                                                             int floats, const float* res,
                                                             const lm_wg_ep* ep)
{
    #pragma GCC unroll 8
    for (int o = 0; o < vectors; o++) {
        const int left = floats - o * LM_VW;
        if (res) row[o] += lm_wg_load(res + o * LM_VW, left);
        if (ep->relu) row[o] = lm_vrelu(row[o]);
        lm_wg_store(out + o * LM_VW, row[o], left);
    }
}

/* tile / 2 vectors of a tile row, lane tile * l + j <- y[j][l + from's first lane]
   (`from`: mk->pair_from of that lane, interleaving pairs of y) */
static inline __attribute__((always_inline)) void lm_wg_interleave(const lm_vec* y, int tile,
                                                                    lm_ivec from,
                                                                    const lm_wg_masks* mk,
                                                                    lm_vec* row)
{
    if (tile == 2) {
        row[0] = __builtin_shuffle(y[0], y[1], from);
        return;
    }
    const lm_vec lo01 = __builtin_shuffle(y[0], y[1], from);
    const lm_vec lo23 = __builtin_shuffle(y[2], y[3], from);
    row[0] = __builtin_shuffle(lo01, lo23, mk->quad[0]);
    row[1] = __builtin_shuffle(lo01, lo23, mk->quad[1]);
}

/* the output tiles of one channel from A^T M A of the LM_VW lanes M_q[lane + l] (`m`,
   positions m_q apart; read LM_VW lanes, the buffer has room): one row's count[0] tiles
   (`group` 0) or `rows` short rows of count[r] <= LM_VW / 2 tiles from lane first[r] on;
   tile row i of row r stored at out[r] + i * y_i, tile l's column j at tile * l + j, `ep`
   applied (its residual is out[0]'s) */
static inline __attribute__((always_inline)) void lm_wg_output(
    int tile, int alpha, const float* restrict at, const float* restrict m, long long m_q,
    int group, int rows, const int* first, const int* count, float* const* out, long long y_i,
    const lm_wg_masks* mk, const lm_wg_ep* ep)
{
    lm_vec x[LM_WG_ALPHA][LM_WG_ALPHA], p[LM_WG_ALPHA - 2][LM_WG_ALPHA];
    #pragma GCC unroll 8
    for (int a = 0; a < alpha; a++)
        #pragma GCC unroll 8
        for (int b = 0; b < alpha; b++) x[a][b] = lm_vload(m + (a * alpha + b) * m_q);
    #pragma GCC unroll 8
    for (int i = 0; i < tile; i++)
        #pragma GCC unroll 8
        for (int b = 0; b < alpha; b++)
            p[i][b] = lm_wg_dot(at + i * alpha, &x[0][b], alpha, LM_WG_ALPHA);
    #pragma GCC unroll 8
    for (int i = 0; i < tile; i++) {
        lm_vec y[LM_WG_ALPHA - 2];
        #pragma GCC unroll 8
        for (int j = 0; j < tile; j++) y[j] = lm_wg_dot(at + j * alpha, p[i], alpha, 1) + ep->bias;
        /* the tile row: lane tile * l + j <- y[j][l] (of row r: y[j][first[r] + l]) */
        lm_vec row[LM_WG_ALPHA - 2];
        if (group) { /* at most two vectors a row */
            for (int r = 0; r < rows; r++) {
                lm_wg_interleave(y, tile, mk->pair_from[first[r]], mk, row);
                lm_wg_put(out[r] + i * y_i, row, tile / 2, tile * count[r],
                          ep->residual ? ep->residual + (out[r] - out[0]) + i * y_i : 0, ep);
            }
            continue;
        }
        lm_wg_interleave(y, tile, mk->pair_from[0], mk, row);
        lm_wg_interleave(y, tile, mk->pair_from[LM_VW / 2], mk, row + tile / 2);
        lm_wg_put(out[0] + i * y_i, row, tile, tile * count[0],
                  ep->residual ? ep->residual + i * y_i : 0, ep);
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

/* how many parts a block's output channels are split into (each part computes the block's
   V again): few blocks on several threads left threads idle (14 x 14 x 256 at batch 8:
   128 tiles, 3 blocks on 2 threads: 2.08 -> 1.81 ms; 7 x 7 x 512 by F(2x2) 3.69 -> 2.99).
   The cost of a thread's share, ceil(blocks * parts / threads) items of an input
   transform (about 0.15 of a block) and 1 / parts of the rest, is taken at its least. */
static int lm_wg_parts(long long blocks, int threads, long long panels)
{
    int best = 1;
    double least = 0;
    for (int parts = 1; parts <= 4 && parts <= panels; parts++) {
        const long long rounds = (blocks * parts + threads - 1) / threads;
        const double cost = (double)rounds * (0.15 + 0.85 / parts);
        if (parts == 1 || cost < least) least = cost, best = parts;
    }
    return best;
}

/* the calling thread's scratch, kept from call to call (a fresh block of 1-2 MB per
   thread each call was an allocation and a memset every convolution), zeroed when it
   grows: the register tiles multiply all LM_NR columns of V, and the lanes a block leaves
   unwritten hold zeros or values of earlier blocks, never uninitialised memory. Null
   when it cannot grow. Thread-local: graphs run from several threads keep apart. */
static float* lm_wg_scratch(size_t floats)
{
    static __thread float* memory;
    static __thread size_t capacity;
    if (floats > capacity) {
        float* grown = (float*)calloc(floats, sizeof(float));
        if (!grown) return 0;
        free(memory);
        memory = grown;
        capacity = floats;
    }
    return memory;
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
    lm_wg_masks masks;
    lm_wg_make_masks((int)tile, cols, &masks);
    /* blocks of LM_NR tiles (whole register tiles) */
    const long long block = LM_NR;
    const long long blocks = (tiles + block - 1) / block;
    const long long full_panels = outs / LM_MR, last_rows = outs % LM_MR;
    /* the alpha^2 positions' blocks of V and of M one cache line more than their rows
       apart: 64 x 64 floats apart (16 KB) put the input transform's 36 stores, and the
       output transform's 36 loads, in one L1 set */
    const long long v_q = channels * LM_WG_LDV + 64 / (long long)sizeof(float);
    const long long panel_bytes = q_count * LM_MR * LM_NR * (long long)sizeof(float);
    const long long chunk = LM_WG_M_BYTES / panel_bytes > 1 ? LM_WG_M_BYTES / panel_bytes : 1;
    const long long chunk_rows = outs < chunk * LM_MR ? outs : chunk * LM_MR;
    const long long m_q = chunk_rows * LM_NR + 64 / (long long)sizeof(float);
    const size_t v_floats = (size_t)(q_count * v_q), m_floats = (size_t)(q_count * m_q);
    const size_t a_floats = (size_t)(last_rows ? q_count * channels * LM_MR : 0);
    /* each thread's V and M (one vector more: M's last lanes are read whole), whole
       cache lines: every thread's as aligned as the first's */
    const size_t per_thread = (v_floats + m_floats + LM_VW + 15) / 16 * 16;
    /* the last partial panel of U's rows, packed (zero rows past K): the register tile
       reads LM_MR rows */
    float* packed = a_floats ? (float*)calloc(a_floats, sizeof(float)) : 0;
    /* all the threads' scratch before any is started, so that a failure writes nothing */
    float* scratch = lm_wg_scratch(per_thread * (size_t)threads);
    /* V's rows for lm_gemm_tile, the same for every thread */
    long long* rows_at = (long long*)malloc((size_t)channels * sizeof(long long));
    if ((a_floats && !packed) || !scratch || !rows_at) {
        free(packed);
        free(rows_at);
        return (long long)((a_floats + per_thread * (size_t)threads) * sizeof(float) +
                           (size_t)channels * sizeof(long long));
    }
    for (long long c = 0; c < channels; c++) rows_at[c] = c * LM_WG_LDV;
    for (int q = 0; q < q_count && last_rows; q++)
        for (long long c = 0; c < channels; c++)
            for (long long r = 0; r < last_rows; r++)
                packed[(q * channels + c) * LM_MR + r] =
                    u[q * u_q + (full_panels * LM_MR + r) * u_k + c];
    const int parts = lm_wg_parts(blocks, threads, full_panels + (last_rows != 0));
    /* U larger than a core's L2 (LM_WG_STREAM_U_BYTES) comes from L3 or memory: each row
       panel's tile asks for the next panel's rows as it multiplies */
    const int stream_u = (long long)q_count * outs * channels * (long long)sizeof(float) >
                         LM_WG_STREAM_U_BYTES;
    const long long items = blocks * parts;
    #pragma omp parallel num_threads(threads) if (threads > 1 && items > 1)
    {
        float* v = scratch + per_thread * (size_t)omp_get_thread_num();
        float* m = v + v_floats;
        lm_wg_segment seg[LM_NR];
        #pragma omp for schedule(dynamic, 1)
        for (long long item = 0; item < items; item++) {
            /* block b's output channels: panels [p0, p1) of LM_MR */
            const long long b = item / parts, part = item % parts;
            const long long panels = full_panels + (last_rows != 0);
            const long long p0 = panels * part / parts, p1 = panels * (part + 1) / parts;
            const long long t0 = b * block, t1 = t0 + block < tiles ? t0 + block : tiles;
            if (t0 >= t1) continue;
            const int width = (int)(t1 - t0);
            const int segments = lm_wg_segments(t0, t1, rows, cols, x, x_n, x_th, tile, y,
                                                y_n, y_th, seg);
            /* short rows: `group` segments share a vector (four: whole rows; two: the
               first's length picks the masks) */
            const int group = masks.rows;
            for (int s = 0; group > 1 && s < segments; s += group) {
                const int valid = segments - s < group ? segments - s : group;
                /* all lanes computed: a missing row (the block's end) repeats the last */
                const float* first[4];
                int used[4]; /* floats a window row reads */
                for (int r = 0; r < 4; r++) {
                    const lm_wg_segment* sr = &seg[s + (r < valid ? r : valid - 1)];
                    first[r] = sr->row;
                    used[r] = (int)(tile * sr->count + 2);
                }
                const int full[4] = {2 * LM_VW, 2 * LM_VW, 2 * LM_VW, 2 * LM_VW};
                const lm_ivec* gather = masks.gather[group == 4 ? cols : seg[s].count];
                float* vc = v + seg[s].lane;
                for (long long c = 0; c < channels; c++) {
                    const float* rc[4];
                    for (int r = 0; r < 4; r++) rc[r] = first[r] + c * x_c;
                    /* two whole vectors a window row where they stay inside x */
                    const int* avail =
                        rc[3] + (alpha - 1) * x_h + 2 * LM_VW <= x_end ? full : used;
                    float* vcc = vc + c * LM_WG_LDV;
                    if (tile == 4 && group == 4)
                        lm_wg_input(4, 6, LM_WG_BT4, rc, 4, x_h, avail, gather, vcc, v_q, &masks);
                    else if (tile == 4)
                        lm_wg_input(4, 6, LM_WG_BT4, rc, 2, x_h, avail, gather, vcc, v_q, &masks);
                    else if (group == 4)
                        lm_wg_input(2, 4, LM_WG_BT2, rc, 4, x_h, avail, gather, vcc, v_q, &masks);
                    else
                        lm_wg_input(2, 4, LM_WG_BT2, rc, 2, x_h, avail, gather, vcc, v_q, &masks);
                }
            }
            for (int s = 0; group == 1 && s < segments; s++)
                for (int l0 = 0; l0 < seg[s].count; l0 += LM_VW) {
                    const int count = seg[s].count - l0 < LM_VW ? seg[s].count - l0 : LM_VW;
                    const float* row = seg[s].row + l0 * tile;
                    float* vc = v + seg[s].lane + l0;
                    for (long long c = 0; c < channels; c++) {
                        const float* rc[1] = {row + c * x_c};
                        float* vcc = vc + c * LM_WG_LDV;
                        /* constant sizes and matrices: every loop unrolled, zero terms
                           dropped, the phases' vectors unmasked (the last two columns'
                           vector a lane on stays masked to its 2 floats) */
                        /* whole vectors where they stay inside x (the lanes past
                           `count` read the next tiles or row: their columns of V are
                           never stored in Y), masked loads only at its end */
                        const int whole = count == LM_VW ||
                                          rc[0] + (alpha - 1) * x_h + tile * LM_VW + alpha <= x_end;
                        /* floats a window row reads */
                        const int used[1] = {(int)(tile * count + 2)};
                        const int all4[1] = {4 * LM_VW + 2}, all2[1] = {2 * LM_VW + 2};
                        if (tile == 4 && whole)
                            lm_wg_input(4, 6, LM_WG_BT4, rc, 1, x_h, all4, 0, vcc, v_q, &masks);
                        else if (tile == 4)
                            lm_wg_input(4, 6, LM_WG_BT4, rc, 1, x_h, used, 0, vcc, v_q, &masks);
                        else if (whole)
                            lm_wg_input(2, 4, LM_WG_BT2, rc, 1, x_h, all2, 0, vcc, v_q, &masks);
                        else
                            lm_wg_input(2, 4, LM_WG_BT2, rc, 1, x_h, used, 0, vcc, v_q, &masks);
                    }
                }
            /* the block's output channels `chunk` row panels at a time (M holds one chunk) */
            for (long long c0 = p0; c0 < p1; c0 += chunk) {
                const long long c1 = c0 + chunk < p1 ? c0 + chunk : p1;
                const long long kk0 = c0 * LM_MR, kk1 = c1 * LM_MR < outs ? c1 * LM_MR : outs;
                for (int q = 0; q < q_count; q++) {
                    const lm_out out = {m + q * m_q, LM_NR, LM_NR, 0, 0};
                    const float* uq = u + q * u_q;
                    const long long in_place = c1 < full_panels ? c1 : full_panels;
                    for (long long ip = c0; ip < in_place; ip++) {
                        /* the panel multiplied next: this position's next, or the next
                           position's first */
                        const float* next = ip + 1 < in_place ? uq + (ip + 1) * LM_MR * u_k
                                            : q + 1 < q_count ? uq + u_q + c0 * LM_MR * u_k
                                                              : 0;
                        lm_gemm_tile(channels, uq + ip * LM_MR * u_k, u_k, v + q * v_q, rows_at,
                                     &out, (ip - c0) * LM_MR, 0, LM_MR, width, 0, 0,
                                     stream_u ? next : 0);
                    }
                    if (last_rows && c1 == panels)
                        lm_gemm_tile(channels, packed + q * channels * LM_MR, 0, v + q * v_q,
                                     rows_at, &out, (full_panels - c0) * LM_MR, 0,
                                     (int)last_rows, width, 0, 0, 0);
                }
                for (int s = 0; group > 1 && s < segments; s += group) {
                    const int valid = segments - s < group ? segments - s : group;
                    int first[4], count[4];
                    for (int r = 0; r < valid; r++) {
                        first[r] = (int)(seg[s + r].lane - seg[s].lane);
                        count[r] = seg[s + r].count;
                    }
                    const float* ml = m + seg[s].lane;
                    for (long long k = kk0; k < kk1; k++) {
                        const float* mk = ml + (k - kk0) * LM_NR;
                        float* yk[4];
                        for (int r = 0; r < valid; r++) yk[r] = seg[s + r].out + k * y_k;
                        const lm_wg_ep ek = {bias ? bias[k] : 0.0f,
                                             residual ? residual + (yk[0] - y) : 0, relu};
                        if (tile == 4)
                            lm_wg_output(4, 6, LM_WG_AT4, mk, m_q, 1, valid, first, count, yk, y_i,
                                         &masks, &ek);
                        else
                            lm_wg_output(2, 4, LM_WG_AT2, mk, m_q, 1, valid, first, count, yk, y_i,
                                         &masks, &ek);
                    }
                }
                for (int s = 0; group == 1 && s < segments; s++)
                    for (int l0 = 0; l0 < seg[s].count; l0 += LM_VW) {
                        const int count = seg[s].count - l0 < LM_VW ? seg[s].count - l0 : LM_VW;
                        const float* ml = m + seg[s].lane + l0;
                        float* yl = seg[s].out + l0 * tile;
                        for (long long k = kk0; k < kk1; k++) {
                            const float* mk = ml + (k - kk0) * LM_NR;
                            float* yk[1] = {yl + k * y_k};
                            const int none[1] = {0}, part[1] = {count}, all[1] = {LM_VW};
                            const lm_wg_ep ek = {bias ? bias[k] : 0.0f,
                                                 residual ? residual + (yk[0] - y) : 0, relu};
                            if (tile == 4 && count == LM_VW)
                                lm_wg_output(4, 6, LM_WG_AT4, mk, m_q, 0, 1, none, all, yk, y_i,
                                             &masks, &ek);
                            else if (tile == 4)
                                lm_wg_output(4, 6, LM_WG_AT4, mk, m_q, 0, 1, none, part, yk, y_i,
                                             &masks, &ek);
                            else if (count == LM_VW)
                                lm_wg_output(2, 4, LM_WG_AT2, mk, m_q, 0, 1, none, all, yk, y_i,
                                             &masks, &ek);
                            else
                                lm_wg_output(2, 4, LM_WG_AT2, mk, m_q, 0, 1, none, part, yk, y_i,
                                             &masks, &ek);
                        }
                    }
            }
        }
    }
    free(rows_at);
    free(packed);
    return 0;
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
