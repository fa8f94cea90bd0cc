/* luminal's float32 matrix product, linked into every compiled graph's library.

   lm_sgemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, width, stride): C (m x n) = op(A) op(B),
   op(X) = X or X transposed (ta/tb 111 or 112, as in CBLAS). C's rows are ldc apart; its
   columns come in blocks of `width` (n itself, or a divisor of n), block q at q * stride:
   a convolution of several images writes (image, channel, position) this way, the
   images' positions being one matrix dimension. Products large
   enough to fill the register tiles run in lm_gemm below, a packed, register-blocked
   kernel (GotoBLAS-style) threaded with the same OpenMP runtime as the other kernels, in
   small tasks handed out dynamically, so a thread the OS delays holds up only its task;
   small products, and those with a small output and a long K (split across threads),
   call the BLAS (LM_BLAS_SGEMM: MKL's or OpenBLAS's cblas_sgemm, defined by the build).
   Measured on the AMD EPYC (AVX-512) this was written on, one thread: 64 x 576 x 25088
   (a ResNet-18 3x3 convolution of 8 images) 11.2 ms against MKL's 22.2 ms. The register
   tile (lm_gemm_tile and what it needs) is gemm_tile.c, compiled before this file. */
void LM_BLAS_SGEMM(int, int, int, int, int, int, float, const float*, int, const float*, int,
                   float, float*, int);

#define LM_KC 384 /* K per block at most, blocks of equal size: a K of 384 (MiniLM) is one
                     block, C written once (blocks of 256 + 128 read C back: 4096 x 1536 x
                     384 21.4-22.5 -> 19.8-20.1 ms), a task's B block (8 panels) in L2 */
#define LM_WHOLE_K_BYTES (3LL << 20) /* B of all of K for a task (lm_whole_k_task) at most:
                                        4096 x 384 x 1536 (8 panels, 2.4 MiB, from L3 with
                                        the K blocks' C tiles in L1) 22.1-23.0 -> 20.3 ms,
                                        capped at 640 KiB (2 panels, in L2) 21.2-21.3 */
#define LM_PREFETCH_ROWS 160 /* gathered panels of at most this many K rows prefetch */
#define LM_TASK_PANELS 8         /* at most 8 column panels per task (B block in L2) */
#define LM_MIN_WORK (1LL << 18)  /* below m * n * k of this, the BLAS call is as fast */
#define LM_MIN_ROWS 4 /* from 4 rows (a tile's rows past m are zeros) faster than MKL: 6 x
                         50176 x 25 (LeNet's first convolution) 0.45 -> 0.16-0.25 ms */
#define LM_SPLIT_K_OUTPUT 4096   /* a product with at most this many outputs */
#define LM_SPLIT_K_MIN_K 4096    /* and at least this K splits K over threads */
#define LM_DOT_MIN_K 2048        /* lm_dots from this K: 6x25x50176 0.42 (MKL) -> 0.25 ms */
#define LM_DOT_KB 4096           /* lm_dots: K per block */
#define LM_DIRECT_PANELS 4        /* up to this many row panels, B is read where it lies */
#define LM_SHARED_B_BYTES (8LL << 20) /* B packed once for all tasks up to this size */
#define LM_NO_TRANS 111
#define LM_TRANS 112

/* element (i, p) of op(X) for X row-major with leading dimension ld */
static inline float lm_at(const float* x, long long ld, int trans, long long i, long long p)
{
    return trans == LM_TRANS ? x[p * ld + i] : x[i * ld + p];
}

/* 4 rows of X (x, ld apart) over kc columns into 4 columns of out (rows width apart):
   rows read along memory, 4 x 4 blocks transposed in registers (a float at a time was
   3x slower: 16 x 150 x 6400 with B transposed 0.82 -> 0.32 ms) */
static void lm_pack_4_rows(const float* x, long long ld, long long kc, float* out, long long width)
{
    long long p = 0;
    for (; p + 4 <= kc; p += 4) {
        const lm_v4 r0 = lm_v4load(x + p), r1 = lm_v4load(x + ld + p);
        const lm_v4 r2 = lm_v4load(x + 2 * ld + p), r3 = lm_v4load(x + 3 * ld + p);
        const lm_v4 t0 = __builtin_shuffle(r0, r1, (lm_i4){0, 4, 1, 5});
        const lm_v4 t1 = __builtin_shuffle(r0, r1, (lm_i4){2, 6, 3, 7});
        const lm_v4 t2 = __builtin_shuffle(r2, r3, (lm_i4){0, 4, 1, 5});
        const lm_v4 t3 = __builtin_shuffle(r2, r3, (lm_i4){2, 6, 3, 7});
        float* q = out + p * width;
        lm_v4store(q, __builtin_shuffle(t0, t2, (lm_i4){0, 1, 4, 5}));
        lm_v4store(q + width, __builtin_shuffle(t0, t2, (lm_i4){2, 3, 6, 7}));
        lm_v4store(q + 2 * width, __builtin_shuffle(t1, t3, (lm_i4){0, 1, 4, 5}));
        lm_v4store(q + 3 * width, __builtin_shuffle(t1, t3, (lm_i4){2, 3, 6, 7}));
    }
    for (; p < kc; p++)
        for (int g = 0; g < 4; g++) out[p * width + g] = x[g * ld + p];
}

/* rows [i0, i0 + MR) of op(A), K range [p0, p0 + kc), as a kc x MR panel (rows past m: 0) */
static void lm_pack_a(int ta, const float* a, long long lda, long long m, long long i0,
                      long long p0, long long kc, float* restrict out)
{
    const long long rows = m - i0 < LM_MR ? m - i0 : LM_MR;
    if (ta == LM_NO_TRANS && rows == LM_MR && LM_MR % 4 == 0) {
        for (long long r = 0; r < LM_MR; r += 4)
            lm_pack_4_rows(a + (i0 + r) * lda + p0, lda, kc, out + r, LM_MR);
        return;
    }
    for (long long p = 0; p < kc; p++)
        for (long long r = 0; r < LM_MR; r++)
            out[p * LM_MR + r] = r < rows ? lm_at(a, lda, ta, i0 + r, p0 + p) : 0.0f;
}

/* packed A panel t of `packed` (row panels from `first`, K blocks of kb): K block t /
   packed, row panel first + t % packed, at its place in ap (block q's panels one after
   another from q * kb * packed * MR) */
static void lm_pack_a_panel(int ta, const float* a, long long lda, long long m, long long k,
                            long long kb, long long first, long long packed, long long t,
                            float* ap)
{
    const long long q = t / packed, panel = first + t % packed;
    const long long p0 = q * kb, kc = k - p0 < kb ? k - p0 : kb;
    lm_pack_a(ta, a, lda, m, panel * LM_MR, p0, kc,
              ap + p0 * packed * LM_MR + (panel - first) * LM_MR * kc);
}

/* op(B): a matrix (b, ldb, tb), or with `gather` a tensor whose K index runs over
   gather's first axes and whose column index over the rest (see lm_sgemm_gather) */
typedef struct {
    int tb;
    const float* b;
    long long ldb;
    const long long* gather;
} lm_in;

#define LM_GATHER_AXES 8

/* offsets in the gathered tensor of `count` consecutive indices from `first` over
   `axes` (size, stride) pairs, outermost first */
static void lm_gather_offsets(const long long* axes, long long naxes, long long first,
                              long long count, long long* out)
{
    long long digit[LM_GATHER_AXES], offset = 0, rest = first;
    for (long long a = naxes - 1; a >= 0; a--) {
        digit[a] = rest % axes[2 * a];
        rest /= axes[2 * a];
        offset += digit[a] * axes[2 * a + 1];
    }
    for (long long i = 0; i < count; i++) {
        out[i] = offset;
        for (long long a = naxes - 1; a >= 0; a--) { /* odometer: next index */
            offset += axes[2 * a + 1];
            if (++digit[a] < axes[2 * a]) break;
            offset -= digit[a] * axes[2 * a + 1];
            digit[a] = 0;
        }
    }
}

/* d[e] = s[2 e] for e < count: pairs of vectors, even elements kept; the last vector ends
   at count (overlapping the one before) and starts one element early in its second half,
   so that nothing past s[2 (count - 1)] is read; runs of 8 to 15 as two overlapping
   8-float halves (a 28- or 14-column output row at stride 2 left up to 15 elements to a
   scalar loop) */
static inline void lm_copy_even(float* restrict d, const float* restrict s, int count)
{
    lm_ivec even, tail;
    for (int e = 0; e < LM_VW; e++) {
        even[e] = 2 * e;
        tail[e] = e < LM_VW / 2 ? 2 * e : 2 * e + 1;
    }
    if (count >= LM_VW) {
        for (int e = 0; e + LM_VW < count; e += LM_VW)
            lm_vstore(d + e, __builtin_shuffle(lm_vload(s + 2 * e), lm_vload(s + 2 * e + LM_VW),
                                               even));
        const int e = count - LM_VW;
        const lm_vec low = lm_vload(s + 2 * e), high = lm_vload(s + 2 * e + LM_VW - 1);
        lm_vstore(d + e, __builtin_shuffle(low, high, tail));
        return;
    }
    if (count >= 8) {
        const lm_v8i half_tail = {0, 2, 4, 6, 9, 11, 13, 15};
        for (int e = 0;; e = count - 8) {
            const lm_v8 low = lm_v8load(s + 2 * e), high = lm_v8load(s + 2 * e + 7);
            lm_v8store(d + e, __builtin_shuffle(low, high, half_tail));
            if (e == count - 8) break;
        }
        return;
    }
    for (int e = 0; e < count; e++) d[e] = s[2 * e];
}

/* d0[e] = s[2 e] and d1[e] = s[2 e + 1] for e < count (>= LM_VW): two K rows one element
   apart (a stride-2 convolution's neighbouring kernel columns) from the same vector pairs,
   half the loads of two lm_copy_even calls; the last pair ends at s[2 count - 1], which
   d1's row reads anyway */
static inline void lm_copy_even_odd(float* restrict d0, float* restrict d1,
                                    const float* restrict s, int count)
{
    lm_ivec even, odd;
    for (int e = 0; e < LM_VW; e++) {
        even[e] = 2 * e;
        odd[e] = 2 * e + 1;
    }
    for (int e = 0;; e += LM_VW) {
        if (e + LM_VW > count) e = count - LM_VW;
        const lm_vec low = lm_vload(s + 2 * e), high = lm_vload(s + 2 * e + LM_VW);
        lm_vstore(d0 + e, __builtin_shuffle(low, high, even));
        lm_vstore(d1 + e, __builtin_shuffle(low, high, odd));
        if (e + LM_VW >= count) return;
    }
}

/* d[e] = s[e] for e < count, inline: whole vectors, the last one ending at count (it may
   overlap the one before), halves and quarters of one for short runs (memcpy's call was
   most of a run's cost: a 56-column image row gives runs of 8 to 56) */
static inline void lm_copy_run(float* restrict d, const float* restrict s, int count)
{
    if (count >= LM_VW) {
        for (int e = 0; e + LM_VW < count; e += LM_VW) lm_vstore(d + e, lm_vload(s + e));
        lm_vstore(d + count - LM_VW, lm_vload(s + count - LM_VW));
    } else if (count >= 8) {
        memcpy(d, s, 8 * sizeof(float));
        memcpy(d + count - 8, s + count - 8, 8 * sizeof(float));
    } else if (count >= 4) {
        lm_v4store(d, lm_v4load(s));
        lm_v4store(d + count - 4, lm_v4load(s + count - 4));
    } else {
        for (int e = 0; e < count; e++) d[e] = s[e];
    }
}

/* a gathered panel: element (p, j) at b[row[p] + column(j)] (`row`: the K rows' offsets,
   the same for every panel of a K block) */
static void lm_pack_gather(const lm_in* in, long long n, long long j0, const long long* row,
                           long long kc, float* restrict out)
{
    const long long* desc = in->gather;
    const long long nk = desc[0], nn = desc[1 + 2 * nk];
    const long long* n_axes = desc + 2 + 2 * nk;
    const long long cols = n - j0 < LM_NR ? n - j0 : LM_NR;
    long long column[LM_NR];
    lm_gather_offsets(n_axes, nn, j0, cols, column);
    for (long long x = cols; x < LM_NR; x++) column[x] = column[0];
    /* runs of columns 1 apart (along an image row at stride 1) are copied whole, runs 2
       apart (stride 2) as even elements of vector pairs */
    int start[LM_NR + 1], step[LM_NR], runs = 0;
    for (int x = 0; x < cols;) {
        const long long gap = x + 1 < cols ? column[x + 1] - column[x] : 1;
        const int s = gap == 1 || gap == 2 ? (int)gap : 0;
        int end = x + 1;
        while (s && end < cols && column[end] - column[end - 1] == s) end++;
        start[runs] = x;
        step[runs++] = s ? s : 1;
        x = end;
    }
    start[runs] = (int)cols;
    int pairs = runs <= LM_NR / 8; /* every run at stride 2 and at least a vector long */
    for (int r = 0; r < runs; r++)
        pairs &= step[r] == 2 && start[r + 1] - start[r] >= LM_VW;
    /* with few K rows (few input channels, where packing is a large share of the
       product), the input lines of the panel two panels on are asked for as each new input
       row starts: the K rows read many input rows at once (21 for a 7x7 window over 3
       channels), more streams than the prefetchers follow. ResNet-18's stem product
       (K 147) 4.60-4.70 -> 4.43-4.49 ms, a 3x3 convolution over 16 channels (K 144)
       2.27-2.32 -> 2.23-2.25; from 32 channels (K 288) 1 % slower, so not there */
    const long long ahead = 2 * LM_NR * step[0], span = LM_NR * step[0];
    const int prefetch = kc <= LM_PREFETCH_ROWS;
    for (long long p = 0; p < kc; p++) {
        const float* src = in->b + row[p];
        float* panel = out + p * LM_NR;
        if (prefetch && (p == 0 || row[p] - row[p - 1] > span))
            for (long long l = 0; l < span; l += 64 / (long long)sizeof(float))
                __builtin_prefetch(src + column[0] + ahead + l);
        if (pairs && p + 1 < kc && row[p + 1] == row[p] + 1) {
            for (int r = 0; r < runs; r++)
                lm_copy_even_odd(panel + start[r], panel + LM_NR + start[r],
                                 src + column[start[r]], start[r + 1] - start[r]);
            for (long long x = cols; x < LM_NR; x++) panel[x] = panel[LM_NR + x] = 0.0f;
            p++;
            continue;
        }
        if (runs <= LM_NR / 8) {
            for (int r = 0; r < runs; r++) {
                const int count = start[r + 1] - start[r];
                if (step[r] == 1)
                    lm_copy_run(panel + start[r], src + column[start[r]], count);
                else
                    lm_copy_even(panel + start[r], src + column[start[r]], count);
            }
        } else {
            for (long long x = 0; x < LM_NR; x++) panel[x] = src[column[x]];
        }
        for (long long x = cols; x < LM_NR; x++) panel[x] = 0.0f;
    }
}

/* columns [j0, j0 + NR) of op(B), K range [p0, p0 + kc), as a kc x NR panel (`row`: the
   K rows' offsets from lm_b_rows, used by a gathered B) */
static void lm_pack_b(const lm_in* in, long long n, long long j0, long long p0, long long kc,
                      const long long* row, float* restrict out)
{
    if (in->gather) {
        lm_pack_gather(in, n, j0, row, kc, out);
        return;
    }
    const int tb = in->tb;
    const float* b = in->b;
    const long long ldb = in->ldb;
    const long long cols = n - j0 < LM_NR ? n - j0 : LM_NR;
    if (tb == LM_NO_TRANS && cols == LM_NR) {
        for (long long p = 0; p < kc; p++)
            memcpy(out + p * LM_NR, b + (p0 + p) * ldb + j0, LM_NR * sizeof(float));
        return;
    }
    if (tb == LM_NO_TRANS) {
        for (long long p = 0; p < kc; p++)
            for (long long j = 0; j < LM_NR; j++)
                out[p * LM_NR + j] = j < cols ? b[(p0 + p) * ldb + j0 + j] : 0.0f;
        return;
    }
    /* B transposed: column j is B's row j0 + j */
    long long j = 0;
    for (; j + 4 <= cols; j += 4)
        lm_pack_4_rows(b + (j0 + j) * ldb + p0, ldb, kc, out + j, LM_NR);
    for (; j < cols; j++)
        for (long long p = 0; p < kc; p++) out[p * LM_NR + j] = b[(j0 + j) * ldb + p0 + p];
    for (long long p = 0; p < kc && cols < LM_NR; p++)
        for (long long x = cols; x < LM_NR; x++) out[p * LM_NR + x] = 0.0f;
}

/* B's K rows [p0, p0 + kc) as offsets (of their first column), computed once per K block:
   a gathered tensor's (packing and reading in place use them), or a row-major matrix's
   (for reading in place). 0 when B is a transposed matrix (never read in place). */
static int lm_b_rows(const lm_in* in, long long p0, long long kc, long long* rows_at)
{
    if (in->gather) {
        lm_gather_offsets(in->gather + 1, in->gather[0], p0, kc, rows_at);
        return 1;
    }
    if (in->tb != LM_NO_TRANS) return 0;
    for (long long p = 0; p < kc; p++) rows_at[p] = (p0 + p) * in->ldb;
    return 1;
}

/* where panel j0's first column lies when its NR columns are consecutive, else null */
static const float* lm_direct_panel(const lm_in* in, long long n, long long j0)
{
    if (n - j0 < LM_NR) return 0;
    if (!in->gather) return in->b + j0;
    const long long nk = in->gather[0], nn = in->gather[1 + 2 * nk];
    long long column[LM_NR];
    lm_gather_offsets(in->gather + 2 + 2 * nk, nn, j0, LM_NR, column);
    for (int x = 1; x < LM_NR; x++)
        if (column[x] != column[0] + x) return 0;
    return in->b + column[0];
}

/* row panel ip of C (+)= its A panel for K block [p0, p0 + kc) times the chunk's B panels
   [first, last): panel jp read in place at direct[jp - first] (with `rows_at`) when that
   is set, else packed at b_block + (jp - first) * NR * kc */
static void lm_row_panel(const float* a, long long lda, const float* ap, long long packed_from,
                         long long m, long long n, long long ip, long long p0, long long kc,
                         long long first, long long last, const float* b_block,
                         const float* const* direct, const long long* rows_at, const lm_out* out,
                         int add, int finish)
{
    const long long m_panels = (m + LM_MR - 1) / LM_MR, packed = m_panels - packed_from;
    const long long rows = m - ip * LM_MR < LM_MR ? m - ip * LM_MR : LM_MR;
    const int direct_a = ip < packed_from;
    const float* panel = direct_a ? a + ip * LM_MR * lda + p0
                                  : ap + p0 * packed * LM_MR + (ip - packed_from) * LM_MR * kc;
    for (long long jp = first; jp < last; jp++) {
        const long long cols = n - jp * LM_NR < LM_NR ? n - jp * LM_NR : LM_NR;
        const float* b = direct ? direct[jp - first] : 0;
        lm_gemm_tile(kc, panel, direct_a ? lda : 0, b ? b : b_block + (jp - first) * LM_NR * kc,
                     b ? rows_at : 0, out, ip * LM_MR, jp * LM_NR, (int)rows, (int)cols, add,
                     finish, 0);
    }
}

/* row panels [i0, i1) of C, each through every K block before the next, so that a C tile
   is read back from L1 (K block by K block over all the row panels, 4096 x 384 x 1536
   read C back from L3), times the chunk's B panels [first, last) packed for all of K:
   block q (from p0 * panels * NR) holds `panels` panels, the chunk's from panel `from` */
static void lm_rows_through_k(long long m, long long n, long long k, long long kb,
                              long long k_blocks, const float* a, long long lda,
                              const float* ap, long long packed_from, const lm_out* out,
                              long long first, long long last, long long i0, long long i1,
                              const float* bp, long long panels, long long from)
{
    for (long long ip = i0; ip < i1; ip++)
        for (long long q = 0; q < k_blocks; q++) {
            const long long p0 = q * kb, kc = k - p0 < kb ? k - p0 : kb;
            lm_row_panel(a, lda, ap, packed_from, m, n, ip, p0, kc, first, last,
                         bp + p0 * panels * LM_NR + from * LM_NR * kc, 0, 0, out, q > 0,
                         out->ep && q == k_blocks - 1);
        }
}

/* a task of lm_gemm with m > n and several K blocks: its chunk's B panels packed for all
   of K at once (block q from p0 * chunk * NR), then lm_rows_through_k */
static void lm_whole_k_task(long long m, long long n, long long k, long long kb,
                            long long k_blocks, const float* a, long long lda, const float* ap,
                            long long packed_from, const lm_in* in, const lm_out* out,
                            long long first, long long last, long long chunk, long long i0,
                            long long i1, float* bp, long long* rows_at)
{
    for (long long q = 0; q < k_blocks; q++) {
        const long long p0 = q * kb, kc = k - p0 < kb ? k - p0 : kb;
        lm_b_rows(in, p0, kc, rows_at);
        for (long long jp = first; jp < last; jp++)
            lm_pack_b(in, n, jp * LM_NR, p0, kc, rows_at,
                      bp + p0 * chunk * LM_NR + (jp - first) * LM_NR * kc);
    }
    lm_rows_through_k(m, n, k, kb, k_blocks, a, lda, ap, packed_from, out, first, last, i0, i1,
                      bp, chunk, 0);
}

/* The packed product; 0, or the bytes it could not allocate (A's packed panels or the
   shared B: nothing written; a thread's B panels: that thread's tasks left unwritten). With
   few row panels (m up to LM_DIRECT_PANELS * MR) a B panel is used by so few tiles that
   packing it costs about as much as multiplying: panels whose columns are consecutive
   are then read in place. */
static long long lm_gemm(int ta, long long m, long long n, long long k, const float* a,
                         long long lda, const lm_in* in, const lm_out* out)
{
    const long long m_panels = (m + LM_MR - 1) / LM_MR, n_panels = (n + LM_NR - 1) / LM_NR;
    const long long k_blocks = (k + LM_KC - 1) / LM_KC, mp = m_panels * LM_MR;
    const long long kb = (k + k_blocks - 1) / k_blocks; /* K per block (the last: the rest) */
    /* A's full row panels are read in place when its rows lie along K; the others (all of
       op(A) when transposed) are packed once: block q (K from q * kb) holds them one after
       another */
    const int a_in_place = ta == LM_NO_TRANS;
    const long long packed_from = a_in_place ? m / LM_MR : 0; /* first packed panel */
    const long long ap_bytes = ((mp - packed_from * LM_MR) * k + 1) * (long long)sizeof(float);
    float* ap = (float*)malloc((size_t)ap_bytes);
    if (!ap) return ap_bytes;
    const int threads = lm_threads();
    /* tasks: column chunks of TASK_PANELS panels (a task packs its chunk's B panels once
       and multiplies every row panel by them), at least 4 per thread. Each row part packs
       the chunk's B panels again, each narrower chunk re-reads A: with m <= n (a
       convolution, whose gathered columns are costly to pack next to 64-256 rows of
       products) chunks narrow first and rows are split only past one panel per chunk; with
       m > n chunks narrow only while chunks times row panels are too few. One thread:
       one task per chunk. */
    const long long wanted = threads > 1 ? 4LL * threads : 1;
    const long long row_tasks = m > n ? m_panels : 1;
    long long chunk = n_panels < LM_TASK_PANELS ? n_panels : LM_TASK_PANELS;
    /* m > n, several K blocks, a B panel of all of K within LM_WHOLE_K_BYTES: tasks
       walk each row panel through all of K (lm_whole_k_task), chunks narrowed to fit */
    const long long whole_k_panels = LM_WHOLE_K_BYTES / (LM_NR * k * (long long)sizeof(float));
    const int whole_k = k_blocks > 1 && m > n && m_panels > LM_DIRECT_PANELS && whole_k_panels;
    if (whole_k && chunk > whole_k_panels) chunk = whole_k_panels;
    while (chunk > 1 && (n_panels + chunk - 1) / chunk * row_tasks < wanted) chunk--;
    const long long n_chunks = (n_panels + chunk - 1) / chunk;
    long long m_parts = n_chunks >= wanted ? 1 : (wanted + n_chunks - 1) / n_chunks;
    m_parts = m_parts > m_panels ? m_panels : m_parts;
    const long long tasks = n_chunks * m_parts;
    /* rows split between tasks (each part packed its chunk's B panels again: ResNet-18's
       7x7 stride-2 convolution, 512 x 392 x 2304 gathered, packed its B four times on 2
       threads) and B small enough: all of B packed once, shared, by all the threads
       (one barrier), before the tasks multiply */
    const long long b_floats = n_panels * LM_NR * k;
    float* shared_b = 0;
    if (m_parts > 1 && m_panels > LM_DIRECT_PANELS &&
        b_floats * (long long)sizeof(float) <= LM_SHARED_B_BYTES) {
        shared_b = (float*)malloc((size_t)b_floats * sizeof(float));
        if (!shared_b) {
            free(ap);
            return b_floats * (long long)sizeof(float);
        }
    }
    int failed = 0;
    /* A's packed panels: with A in place only the partial last row panel, packed here
       before the threads start; else all, by the threads, with a barrier after (under
       load a barrier waits for a descheduled thread: one fewer per product) */
    const long long packed = m_panels - packed_from;
    if (a_in_place)
        for (long long t = 0; t < k_blocks * packed; t++)
            lm_pack_a_panel(ta, a, lda, m, k, kb, packed_from, packed, t, ap);
    #pragma omp parallel num_threads(threads) if (threads > 1 && tasks > 1) reduction(| : failed)
    {
        if (!a_in_place) {
            #pragma omp for schedule(static)
            for (long long t = 0; t < k_blocks * packed; t++)
                lm_pack_a_panel(ta, a, lda, m, k, kb, packed_from, packed, t, ap);
        }
        float* bp = shared_b ? 0
                             : (float*)malloc((size_t)(chunk * LM_NR * (whole_k ? k : kb)) *
                                              sizeof(float));
        failed |= !shared_b && bp == 0;
        long long rows_at[LM_KC];
        const float* direct[LM_TASK_PANELS];
        if (shared_b) { /* K block q's panels from p0 * n_panels * NR, NR * kc floats each */
            long long rows_q = -1; /* the K block rows_at holds */
            #pragma omp for schedule(static)
            for (long long t = 0; t < k_blocks * n_panels; t++) {
                const long long q = t / n_panels, jp = t % n_panels;
                const long long p0 = q * kb, kc = k - p0 < kb ? k - p0 : kb;
                if (q != rows_q) lm_b_rows(in, p0, kc, rows_at);
                rows_q = q;
                lm_pack_b(in, n, jp * LM_NR, p0, kc, rows_at,
                          shared_b + p0 * n_panels * LM_NR + jp * LM_NR * kc);
            }
        }
        #pragma omp for schedule(dynamic, 1) nowait /* the region's end joins */
        for (long long t = 0; t < tasks; t++) {
            if (!bp && !shared_b) continue;
            const long long first = t / m_parts * chunk, part = t % m_parts;
            const long long last = first + chunk < n_panels ? first + chunk : n_panels;
            const long long i0 = m_panels * part / m_parts, i1 = m_panels * (part + 1) / m_parts;
            if (shared_b) {
                lm_rows_through_k(m, n, k, kb, k_blocks, a, lda, ap, packed_from, out, first,
                                  last, i0, i1, shared_b, n_panels, first);
                continue;
            }
            if (whole_k) {
                lm_whole_k_task(m, n, k, kb, k_blocks, a, lda, ap, packed_from, in, out, first,
                                last, chunk, i0, i1, bp, rows_at);
                continue;
            }
            for (long long q = 0; q < k_blocks; q++) {
                const long long p0 = q * kb, kc = k - p0 < kb ? k - p0 : kb;
                const int rows_known = lm_b_rows(in, p0, kc, rows_at);
                const int in_place = rows_known && m_panels <= LM_DIRECT_PANELS;
                for (long long jp = first; jp < last; jp++) {
                    direct[jp - first] = in_place ? lm_direct_panel(in, n, jp * LM_NR) : 0;
                    if (!direct[jp - first])
                        lm_pack_b(in, n, jp * LM_NR, p0, kc, rows_at,
                                  bp + (jp - first) * LM_NR * kc);
                }
                for (long long ip = i0; ip < i1; ip++)
                    lm_row_panel(a, lda, ap, packed_from, m, n, ip, p0, kc, first, last, bp,
                                 direct, rows_at, out, q > 0, out->ep && q == k_blocks - 1);
            }
        }
        free(bp);
    }
    free(shared_b);
    free(ap);
    return failed ? chunk * LM_NR * (whole_k ? k : kb) * (long long)sizeof(float) : 0;
}

/* C (m x n) = A B^T with A and B's rows along K (m, n >= 1): a small output, a long K
   (a convolution's weight gradient, 6 x 25 over batch * 784): 2 x 4 outputs at a time,
   each a vector sum along K, K in blocks whose rows stay in L2 */
static void lm_dots(long long m, long long n, long long k, const float* a, long long lda,
                    const float* b, long long ldb, float* c, long long ldc)
{
    for (long long i = 0; i < m; i++)
        for (long long j = 0; j < n; j++) c[i * ldc + j] = 0.0f;
    for (long long p0 = 0; p0 < k; p0 += LM_DOT_KB) {
        const long long kb = k - p0 < LM_DOT_KB ? k - p0 : LM_DOT_KB, kv = kb / LM_VW * LM_VW;
        for (long long i = 0; i < m; i += 2)
            for (long long j = 0; j < n; j += 4) {
                const float* ar[2];
                const float* br[4];
                for (int r = 0; r < 2; r++) ar[r] = a + (i + r < m ? i + r : i) * lda + p0;
                for (int x = 0; x < 4; x++) br[x] = b + (j + x < n ? j + x : j) * ldb + p0;
                lm_vec acc[2][4];
                for (int r = 0; r < 2; r++)
                    for (int x = 0; x < 4; x++) acc[r][x] = (lm_vec){0};
                for (long long p = 0; p < kv; p += LM_VW) {
                    const lm_vec a0 = lm_vload(ar[0] + p), a1 = lm_vload(ar[1] + p);
                    for (int x = 0; x < 4; x++) {
                        const lm_vec bx = lm_vload(br[x] + p);
                        acc[0][x] += a0 * bx;
                        acc[1][x] += a1 * bx;
                    }
                }
                for (int r = 0; r < 2 && i + r < m; r++)
                    for (int x = 0; x < 4 && j + x < n; x++) {
                        float total = 0.0f;
                        for (int e = 0; e < LM_VW; e++) total += acc[r][x][e];
                        for (long long p = kv; p < kb; p++) total += ar[r][p] * br[x][p];
                        c[(i + r) * ldc + j + x] += total;
                    }
            }
    }
}

static void lm_blas_sgemm(int ta, int tb, long long m, long long n, long long k, const float* a,
                          long long lda, const float* b, long long ldb, float* c, long long ldc)
{
    if (ta == LM_NO_TRANS && tb == LM_TRANS && m * n <= LM_SPLIT_K_OUTPUT && k >= LM_DOT_MIN_K) {
        lm_dots(m, n, k, a, lda, b, ldb, c, ldc);
        return;
    }
    LM_BLAS_SGEMM(101, ta, tb, (int)m, (int)n, (int)k, 1.0f, a, (int)(lda > 1 ? lda : 1), b,
                  (int)(ldb > 1 ? ldb : 1), 0.0f, c, (int)(ldc > 1 ? ldc : 1));
}

/* Several threads, a small output and a long K (a convolution's weight gradient: 6 x 25
   outputs summed over batch * 784 positions): each thread multiplies a slice of K into a
   private matrix, then the matrices are added. 1 when the private matrices could not be
   allocated (nothing written). Along a row of a stored op(X) = X the K index is the
   column; for a transposed one it is the row. */
static int lm_sgemm_split_k(int ta, int tb, long long m, long long n, long long k,
                            const float* a, long long lda, const float* b, long long ldb,
                            float* c, long long ldc)
{
    const int nt = lm_threads();
    float* part = (float*)calloc((size_t)(nt * m * n), sizeof(float));
    if (!part) return 1;
    #pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), count = omp_get_num_threads();
        const long long k0 = k * t / count, k1 = k * (t + 1) / count;
        const float* a0 = a + (ta == LM_NO_TRANS ? k0 : k0 * lda);
        const float* b0 = b + (tb == LM_NO_TRANS ? k0 * ldb : k0);
        float* mine = part + (long long)t * m * n;
        /* a slice that fills the register tiles runs in the packed kernel (on this thread:
           the region is already parallel), faster than lm_dots' 2 x 4 dot products:
           16 x 150 x 3200 (LeNet conv2's weight gradient, half its K) 0.24 -> 0.14 ms */
        const lm_in in = {tb, b0, ldb, 0};
        const lm_out slice = {mine, n, n, 0, 0};
        if (m < LM_MIN_ROWS || n < LM_NR || m * n * (k1 - k0) < LM_MIN_WORK ||
            lm_gemm(ta, m, n, k1 - k0, a0, lda, &in, &slice))
            lm_blas_sgemm(ta, tb, m, n, k1 - k0, a0, lda, b0, ldb, mine, n);
    }
    for (long long r = 0; r < m; r++)
        for (long long j = 0; j < n; j++) {
            float total = 0.0f;
            for (int t = 0; t < nt; t++) total += part[(t * m + r) * n + j];
            c[r * ldc + j] = total;
        }
    free(part);
    return 0;
}

/* C = 0 when K is 0 (then the epilogue, if any) */
static void lm_zero(const lm_out* out, long long m, long long n)
{
    for (long long i = 0; i < m; i++)
        for (long long j = 0; j < n; j++) *lm_out_at(out, i, j) = 0.0f;
}

/* the epilogue over all of C, after the BLAS or the zeros of K = 0 wrote the product */
static void lm_finish_all(const lm_out* out, long long m, long long n)
{
    if (!out->ep) return;
    for (long long i = 0; i < m; i++)
        for (long long j0 = 0; j0 < n; j0 += out->width) {
            float* q = lm_out_at(out, i, j0);
            lm_finish(out, i, j0, q, q, (int)out->width);
        }
}

/* the epilogue's arguments as an lm_ep, or null when nothing is fused */
static const lm_ep* lm_epilogue(lm_ep* ep, const float* row_bias, const float* col_bias,
                                const float* residual, int act, float scale)
{
    *ep = (lm_ep){row_bias, col_bias, residual, act, scale};
    return row_bias || col_bias || residual || act != LM_ACT_NONE || scale != 1.0f ? ep : 0;
}

/* the epilogue (see lm_ep) over a C another routine computed: gemv.c's few-row products */
void lm_sgemm_finish(long long m, long long n, float* c, long long ldc, long long width,
                     long long stride, const float* row_bias, const float* col_bias,
                     const float* residual, int act, float scale)
{
    if (width <= 0 || width > n) width = n;
    lm_ep fused;
    const lm_out out = {c, ldc, width, stride,
                        lm_epilogue(&fused, row_bias, col_bias, residual, act, scale)};
    lm_finish_all(&out, m, n);
}

/* lm_sgemm whose stored values get an epilogue (see lm_ep): its consumer (bias,
   residual, activation) computed while the product's tiles are still in registers */
void lm_sgemm_ep(int ta, int tb, long long m, long long n, long long k, const float* a,
                 long long lda, const float* b, long long ldb, float* c, long long ldc,
                 long long width, long long stride, const float* row_bias, const float* col_bias,
                 const float* residual, int act, float scale)
{
    if (m <= 0 || n <= 0) return;
    if (width <= 0 || width > n) width = n;
    lm_ep fused;
    const lm_out out = {c, ldc, width, stride,
                        lm_epilogue(&fused, row_bias, col_bias, residual, act, scale)};
    if (k <= 0) {
        lm_zero(&out, m, n);
        lm_finish_all(&out, m, n);
        return;
    }
    if (m >= LM_MIN_ROWS && n >= LM_NR && m * n * k >= LM_MIN_WORK &&
        !(lm_threads() > 1 && m * n <= LM_SPLIT_K_OUTPUT && k >= LM_SPLIT_K_MIN_K)) {
        const lm_in in = {tb, b, ldb, 0};
        if (!lm_gemm(ta, m, n, k, a, lda, &in, &out)) return;
    }
    /* the BLAS, one call per block of columns (op(B)'s columns of the block) */
    for (long long j0 = 0; j0 < n; j0 += width) {
        const float* bj = b + (tb == LM_NO_TRANS ? j0 : j0 * ldb);
        float* cj = c + j0 / width * stride;
        if (lm_threads() > 1 && m * width <= LM_SPLIT_K_OUTPUT && k >= LM_SPLIT_K_MIN_K &&
            !lm_sgemm_split_k(ta, tb, m, width, k, a, lda, bj, ldb, cj, ldc))
            continue;
        lm_blas_sgemm(ta, tb, m, width, k, a, lda, bj, ldb, cj, ldc);
    }
    lm_finish_all(&out, m, n);
}

void lm_sgemm(int ta, int tb, long long m, long long n, long long k, const float* a,
              long long lda, const float* b, long long ldb, float* c, long long ldc,
              long long width, long long stride)
{
    lm_sgemm_ep(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, width, stride, 0, 0, 0, LM_ACT_NONE,
                1.0f);
}

/* lm_sgemm_ep with op(B) gathered from a tensor x: `desc` is {nk, (size, stride) x nk,
   nn, (size, stride) x nn}; B's row p is p's position over the first nk axes, its column
   j j's over the other nn (sizes multiplying to k and n), element (p, j) at x[row offset
   + column offset]. A convolution's im2col columns are read this way from the padded
   input, never copied. Returns 0, or the bytes it could not allocate (lm_gemm). */
long long lm_sgemm_gather_ep(int ta, long long m, long long n, long long k, const float* a,
                             long long lda, const float* x, const long long* desc, float* c,
                             long long ldc, long long width, long long stride,
                             const float* row_bias, const float* col_bias, const float* residual,
                             int act, float scale)
{
    if (m <= 0 || n <= 0) return 0;
    if (width <= 0 || width > n) width = n;
    lm_ep fused;
    const lm_out out = {c, ldc, width, stride,
                        lm_epilogue(&fused, row_bias, col_bias, residual, act, scale)};
    if (k <= 0) {
        lm_zero(&out, m, n);
        lm_finish_all(&out, m, n);
        return 0;
    }
    const lm_in in = {LM_NO_TRANS, x, 0, desc};
    return lm_gemm(ta, m, n, k, a, lda, &in, &out);
}

long long lm_sgemm_gather(int ta, long long m, long long n, long long k, const float* a,
                          long long lda, const float* x, const long long* desc, float* c,
                          long long ldc, long long width, long long stride)
{
    return lm_sgemm_gather_ep(ta, m, n, k, a, lda, x, desc, c, ldc, width, stride, 0, 0, 0,
                              LM_ACT_NONE, 1.0f);
}
