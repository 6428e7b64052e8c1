/* fp32 SGEMM micro-kernels on packed 16-column weight panels (see sgemm.h): scalar 6x16,
 * AVX2+FMA 6x16, AVX-512 up to 14x16 and 14x32 (two panels), NEON 6x16, chosen at run time.
 *
 * Each ISA has a "core" that computes an MR x 16 tile with the accumulators in registers (the
 * loops over rows and vectors have constant bounds and are unrolled, so the arrays below live
 * in registers). AVX-512, AVX2 and NEON instantiate the core once per row count, so a partial
 * tile (the last rows of a layer, a 1-row GEMV) computes only its own rows; AVX-512 and AVX2
 * take fewer than 16 columns through masked loads and stores. What is left (scalar partial
 * tiles, NEON column tails) goes through a staging tile on the stack, reading A rows through
 * clamped row pointers (rows past mr re-read the last valid row: never out of bounds). Every
 * instance sums each output in the same k order, so results do not depend on the tile an
 * output falls in.
 *
 * The accumulators start at zero in every K block; C (a later K block) or the bias (the
 * first) is added after the block's products: each block's sum is then a short chain of its
 * own, which rounds about as a pairwise sum of the blocks does (continuing one chain through
 * C carried K-long rounding: ResNet-50's 1x1 convs had 4x onnxruntime's error against
 * float64, same cost either way; starting the accumulators at the bias instead, which saves
 * 2 x MR adds a tile, rounded every product at the bias's magnitude: ResNet-50's output
 * against onnxruntime 1.7e-7 -> 4.3e-6; holding the bias in two registers spilled
 * accumulators at 14 rows). AVX-512 skips the min of a Relu clamp (hi = +inf): at K = 64
 * the epilogue is a large share of a tile's vector operations. */
#include "sgemm.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

typedef void (*sg_core)(int mr, int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                        int64_t ldc, const ei_sg_ep *ep);

/* a partial tile: computed into a 16-wide staging tile, copied out */
static void sg_staged(sg_core core, int mr, int64_t kc, const float *a, int64_t lda, const float *b,
                      float *c, int64_t ldc, int nr, const ei_sg_ep *ep) {
    float t[EI_SG_MR_MAX * EI_SG_NR], tz[EI_SG_MR_MAX * EI_SG_NR], tb[EI_SG_NR];
    ei_sg_ep e = *ep;
    memset(t, 0, sizeof t);
    if (e.bias) {               /* the cores load 16 bias values: pad this panel's nr */
        memset(tb, 0, sizeof tb);
        memcpy(tb, e.bias, (size_t)nr * sizeof(float));
        e.bias = tb;
    }
    if (e.load_c)
        for (int i = 0; i < mr; i++) memcpy(t + i * EI_SG_NR, c + i * ldc, (size_t)nr * sizeof(float));
    if (e.z) {
        memset(tz, 0, sizeof tz);
        for (int i = 0; i < mr; i++) memcpy(tz + i * EI_SG_NR, e.z + i * e.ldz, (size_t)nr * sizeof(float));
        e.z = tz;
        e.ldz = EI_SG_NR;
    }
    core(mr, kc, a, lda, b, t, EI_SG_NR, &e);
    for (int i = 0; i < mr; i++) memcpy(c + i * ldc, t + i * EI_SG_NR, (size_t)nr * sizeof(float));
}

/* ---- scalar ---- */
#define S_MR 6
static void core_scalar(int mr, int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                        int64_t ldc, const ei_sg_ep *ep) {
    float acc[S_MR][EI_SG_NR];
    const float *ar[S_MR];
    for (int i = 0; i < S_MR; i++) ar[i] = a + (int64_t)(i < mr ? i : mr - 1) * lda;
    for (int i = 0; i < S_MR; i++)
        for (int j = 0; j < EI_SG_NR; j++) acc[i][j] = 0.0f;
    for (int64_t k = 0; k < kc; k++, b += EI_SG_NR)
        for (int i = 0; i < S_MR; i++) {
            float av = ar[i][k];
            for (int j = 0; j < EI_SG_NR; j++) acc[i][j] += av * b[j];
        }
    for (int i = 0; i < S_MR; i++)
        for (int j = 0; j < EI_SG_NR; j++) {
            float v = acc[i][j];
            if (ep->load_c) v += c[i * ldc + j];
            else if (ep->bias) v += ep->bias[j];
            if (ep->z) v += ep->z[i * ep->ldz + j];
            /* clamp keeps NaN, like the vector max/min below and numpy's clip */
            if (ep->clamp) { v = v < ep->lo ? ep->lo : v; v = v > ep->hi ? ep->hi : v; }
            c[i * ldc + j] = v;
        }
}

static void ukr_scalar(int mr, int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                       int64_t ldc, int nr, const ei_sg_ep *ep) {
    if (mr == S_MR && nr == EI_SG_NR) core_scalar(mr, kc, a, lda, b, c, ldc, ep);
    else sg_staged(core_scalar, mr, kc, a, lda, b, c, ldc, nr, ep);
}

/* ---- AVX2 + FMA: up to 6 rows x 2 vectors = 12 accumulators; one core per row count (as
 * AVX-512 below), fewer than 16 columns through maskload/maskstore ---- */
#if defined(__x86_64__)
#define X_MR 6
static inline __attribute__((always_inline, target("avx2,fma")))
void core_avx2_n(const int MR, int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                 int64_t ldc, int nr, const ei_sg_ep *ep) {
    __m256 acc[X_MR][2];
    const float *ar[X_MR];
    /* lane masks of the two 8-column halves: lane j on when j (+ 8) < nr */
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lanes);
    const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8), lanes);
    const int full = nr == EI_SG_NR;
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) ar[i] = a + (int64_t)i * lda;
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) { acc[i][0] = _mm256_setzero_ps(); acc[i][1] = _mm256_setzero_ps(); }
    for (int64_t k = 0; k < kc; k++, b += EI_SG_NR) {
        __m256 w0 = _mm256_loadu_ps(b), w1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m256 av = _mm256_broadcast_ss(ar[i] + k);
            acc[i][0] = _mm256_fmadd_ps(av, w0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, w1, acc[i][1]);
        }
    }
    if (ep->load_c) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            acc[i][0] = _mm256_add_ps(acc[i][0], full ? _mm256_loadu_ps(c + i * ldc) : _mm256_maskload_ps(c + i * ldc, m0));
            acc[i][1] = _mm256_add_ps(acc[i][1], full ? _mm256_loadu_ps(c + i * ldc + 8)
                                                      : _mm256_maskload_ps(c + i * ldc + 8, m1));
        }
    } else if (ep->bias) {
        __m256 b0 = _mm256_maskload_ps(ep->bias, m0), b1 = _mm256_maskload_ps(ep->bias + 8, m1);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) { acc[i][0] = _mm256_add_ps(acc[i][0], b0); acc[i][1] = _mm256_add_ps(acc[i][1], b1); }
    }
    if (ep->z) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_maskload_ps(ep->z + i * ep->ldz, m0));
            acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_maskload_ps(ep->z + i * ep->ldz + 8, m1));
        }
    }
    if (ep->clamp) {
        /* max(lo, v) / min(hi, v) return v when v is NaN (maxps returns its second operand) */
        __m256 lo = _mm256_set1_ps(ep->lo), hi = _mm256_set1_ps(ep->hi);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            acc[i][0] = _mm256_min_ps(hi, _mm256_max_ps(lo, acc[i][0]));
            acc[i][1] = _mm256_min_ps(hi, _mm256_max_ps(lo, acc[i][1]));
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (full) {
            _mm256_storeu_ps(c + i * ldc, acc[i][0]);
            _mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
        } else {
            _mm256_maskstore_ps(c + i * ldc, m0, acc[i][0]);
            _mm256_maskstore_ps(c + i * ldc + 8, m1, acc[i][1]);
        }
    }
}

#define X_CORE(R) \
    __attribute__((target("avx2,fma"))) static void core_avx2_##R(int64_t kc, const float *a, int64_t lda, \
        const float *b, float *c, int64_t ldc, int nr, const ei_sg_ep *ep) { \
        core_avx2_n(R, kc, a, lda, b, c, ldc, nr, ep); }
X_CORE(1) X_CORE(2) X_CORE(3) X_CORE(4) X_CORE(5) X_CORE(6)
#undef X_CORE

__attribute__((target("avx2,fma")))
static void ukr_avx2(int mr, int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                     int64_t ldc, int nr, const ei_sg_ep *ep) {
    typedef void (*xcore)(int64_t, const float *, int64_t, const float *, float *, int64_t, int, const ei_sg_ep *);
    static const xcore cores[X_MR] = { core_avx2_1, core_avx2_2, core_avx2_3, core_avx2_4, core_avx2_5, core_avx2_6 };
    cores[mr - 1](kc, a, lda, b, c, ldc, nr, ep);
}

/* ---- AVX-512: up to 14 rows x 1 vector (compiled here, selected only where the CPU has it).
 * Tiles of 12 rows by default, 14 where conv_f32.c asks (mr_max: layers of few rows on one
 * thread, where each B row then feeds more rows). One core per row count (1..14, the count a
 * constant in each), so a partial tile computes
 * its own rows only: the last rows of a 49-pixel layer or a 1-row GEMM (a GEMV) cost what
 * they compute, not a full tile; fewer than 16 columns go through masked loads and
 * stores instead of the staging tile. Each row's sum runs in the same k order as the full
 * tile's, so results do not depend on where a row falls. ---- */
#define Z_MR 14
#define SG_PF 8         /* k steps ahead that the B rows are prefetched into L1 */
#define SG_PF2 64       /* and into L2 (where the caller gives no ep->pf): weights come from
                         * memory on a layer's first micro-tile (each layer's are read once a
                         * run); 64 steps (4 KB of a panel) ahead: cold-cache bench of
                         * ResNet-50's conv shapes 3% faster, 32 or 128 steps less */
static inline __attribute__((always_inline, target("avx512f")))
void core_avx512_n(const int MR, int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                   int64_t ldc, int nr, const ei_sg_ep *ep) {
    __m512 acc[Z_MR];
    const __mmask16 m = (__mmask16)((1u << nr) - 1);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) acc[i] = _mm512_setzero_ps();
    /* rows through five base pointers stepped with k and row offsets of 0, 1 or 2 lda (twelve
     * row pointers did not fit the registers: two were reloaded from the stack every k), the
     * B row SG_PF steps ahead prefetched (measured 1 thread, interleaved: 1x1 and 3x3 convs
     * of ResNet-50 1-7% faster; 4, 8 or 16 steps alike) */
    const float *q0 = a, *q3 = a + 3 * lda, *q6 = a + 6 * lda, *q9 = a + 9 * lda, *q12 = a + 12 * lda;
    for (int64_t k = 0; k < kc; k++, b += EI_SG_NR, q0++, q3++, q6++, q9++, q12++) {
        __m512 w = _mm512_loadu_ps(b);
        _mm_prefetch((const char *)(b + SG_PF * EI_SG_NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + SG_PF2 * EI_SG_NR), _MM_HINT_T1);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            const float *q = i < 3 ? q0 : i < 6 ? q3 : i < 9 ? q6 : i < 12 ? q9 : q12;
            acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(q[(i % 3) * lda]), w, acc[i]);
        }
    }
    __m512 lo = _mm512_set1_ps(ep->lo), hi = _mm512_set1_ps(ep->hi);
    const int upper = ep->hi < INFINITY;      /* Relu: no min */
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        if (ep->load_c) acc[i] = _mm512_add_ps(acc[i], _mm512_maskz_loadu_ps(m, c + i * ldc));
        else if (ep->bias) acc[i] = _mm512_add_ps(acc[i], _mm512_maskz_loadu_ps(m, ep->bias));
        if (ep->z) acc[i] = _mm512_add_ps(acc[i], _mm512_maskz_loadu_ps(m, ep->z + i * ep->ldz));
        if (ep->clamp) acc[i] = _mm512_max_ps(lo, acc[i]);
        if (ep->clamp && upper) acc[i] = _mm512_min_ps(hi, acc[i]);
        if (nr == EI_SG_NR) _mm512_storeu_ps(c + i * ldc, acc[i]);
        else _mm512_mask_storeu_ps(c + i * ldc, m, acc[i]);
    }
}

/* two panels at once: 2 x MR accumulators (28 of the 32 registers at 14 rows), so each
 * broadcast A element feeds two FMAs (half the A loads per multiply-add of one panel) */
static inline __attribute__((always_inline, target("avx512f")))
void core2_avx512_n(const int MR, int64_t kc, const float *a, int64_t lda, const float *b, int64_t bstride,
                    float *c, int64_t ldc, int nr2, const ei_sg_ep *ep) {
    __m512 acc[Z_MR], acc2[Z_MR];
    const float *b2 = b + bstride;
    const __mmask16 m2 = (__mmask16)((1u << nr2) - 1);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        acc[i] = _mm512_setzero_ps();
        acc2[i] = _mm512_setzero_ps();
    }
    /* (as core_avx512_n) */
    const float *q0 = a, *q3 = a + 3 * lda, *q6 = a + 6 * lda, *q9 = a + 9 * lda, *q12 = a + 12 * lda;
    const float *pf = ep->pf ? ep->pf : b + SG_PF2 * EI_SG_NR;
    for (int64_t k = 0; k < kc; k++, b += EI_SG_NR, b2 += EI_SG_NR, q0++, q3++, q6++, q9++, q12++, pf += EI_SG_NR) {
        __m512 w = _mm512_loadu_ps(b), w2 = _mm512_loadu_ps(b2);
        _mm_prefetch((const char *)(b + SG_PF * EI_SG_NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b2 + SG_PF * EI_SG_NR), _MM_HINT_T0);
        _mm_prefetch((const char *)pf, _MM_HINT_T1);
        _mm_prefetch((const char *)(pf + bstride), _MM_HINT_T1);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            const float *q = i < 3 ? q0 : i < 6 ? q3 : i < 9 ? q6 : i < 12 ? q9 : q12;
            __m512 av = _mm512_set1_ps(q[(i % 3) * lda]);
            acc[i] = _mm512_fmadd_ps(av, w, acc[i]);
            acc2[i] = _mm512_fmadd_ps(av, w2, acc2[i]);
        }
    }
    __m512 lo = _mm512_set1_ps(ep->lo), hi = _mm512_set1_ps(ep->hi);
    const int upper = ep->hi < INFINITY;      /* Relu: no min */
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        if (ep->load_c) {
            acc[i] = _mm512_add_ps(acc[i], _mm512_loadu_ps(c + i * ldc));
            acc2[i] = _mm512_add_ps(acc2[i], _mm512_maskz_loadu_ps(m2, c + i * ldc + EI_SG_NR));
        } else if (ep->bias) {
            acc[i] = _mm512_add_ps(acc[i], _mm512_loadu_ps(ep->bias));
            acc2[i] = _mm512_add_ps(acc2[i], _mm512_maskz_loadu_ps(m2, ep->bias + EI_SG_NR));
        }
        if (ep->z) {
            acc[i] = _mm512_add_ps(acc[i], _mm512_loadu_ps(ep->z + i * ep->ldz));
            acc2[i] = _mm512_add_ps(acc2[i], _mm512_maskz_loadu_ps(m2, ep->z + i * ep->ldz + EI_SG_NR));
        }
        if (ep->clamp) {
            acc[i] = _mm512_max_ps(lo, acc[i]);
            acc2[i] = _mm512_max_ps(lo, acc2[i]);
            if (upper) {
                acc[i] = _mm512_min_ps(hi, acc[i]);
                acc2[i] = _mm512_min_ps(hi, acc2[i]);
            }
        }
        _mm512_storeu_ps(c + i * ldc, acc[i]);
        _mm512_mask_storeu_ps(c + i * ldc + EI_SG_NR, m2, acc2[i]);
    }
}

#define Z_CORE(R) \
    __attribute__((target("avx512f"))) static void core_avx512_##R(int64_t kc, const float *a, int64_t lda, \
        const float *b, float *c, int64_t ldc, int nr, const ei_sg_ep *ep) { \
        core_avx512_n(R, kc, a, lda, b, c, ldc, nr, ep); } \
    __attribute__((target("avx512f"))) static void core2_avx512_##R(int64_t kc, const float *a, int64_t lda, \
        const float *b, int64_t bs, float *c, int64_t ldc, int nr2, const ei_sg_ep *ep) { \
        core2_avx512_n(R, kc, a, lda, b, bs, c, ldc, nr2, ep); }
Z_CORE(1) Z_CORE(2) Z_CORE(3) Z_CORE(4) Z_CORE(5) Z_CORE(6) Z_CORE(7) Z_CORE(8) Z_CORE(9) Z_CORE(10)
Z_CORE(11) Z_CORE(12) Z_CORE(13) Z_CORE(14)
#undef Z_CORE

__attribute__((target("avx512f")))
static void ukr_avx512(int mr, int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                       int64_t ldc, int nr, const ei_sg_ep *ep) {
    typedef void (*zcore)(int64_t, const float *, int64_t, const float *, float *, int64_t, int, const ei_sg_ep *);
    static const zcore cores[Z_MR] = { core_avx512_1, core_avx512_2, core_avx512_3, core_avx512_4,
                                       core_avx512_5, core_avx512_6, core_avx512_7, core_avx512_8,
                                       core_avx512_9, core_avx512_10, core_avx512_11, core_avx512_12,
                                       core_avx512_13, core_avx512_14 };
    cores[mr - 1](kc, a, lda, b, c, ldc, nr, ep);
}

__attribute__((target("avx512f")))
static void ukr2_avx512(int mr, int64_t kc, const float *a, int64_t lda, const float *b, int64_t bstride,
                        float *c, int64_t ldc, int nr2, const ei_sg_ep *ep) {
    typedef void (*zcore2)(int64_t, const float *, int64_t, const float *, int64_t, float *, int64_t, int,
                           const ei_sg_ep *);
    static const zcore2 cores[Z_MR] = { core2_avx512_1, core2_avx512_2, core2_avx512_3, core2_avx512_4,
                                        core2_avx512_5, core2_avx512_6, core2_avx512_7, core2_avx512_8,
                                        core2_avx512_9, core2_avx512_10, core2_avx512_11, core2_avx512_12,
                                        core2_avx512_13, core2_avx512_14 };
    cores[mr - 1](kc, a, lda, b, bstride, c, ldc, nr2, ep);
}
/* indirect: the rows of each tap through its pointers (ei_sg_ikr), np (1 or 2) panels. The
 * row pointers of a tap are loaded once per tap and indexed by k: twelve of them, k, b and
 * bstride fill the general registers, so the weights are prefetched at fixed offsets from b
 * (its own rows ahead) and ep->pf is not read (a pointer of its own was kept in a vector
 * register and moved back every k step, on an FMA port) */
static inline __attribute__((always_inline, target("avx512f")))
void icore_avx512_n(const int MR, const int NP, int ntap, int64_t kc, const float *const *ap, const float *b,
                    int64_t bstride, float *c, int64_t ldc, int nr, const ei_sg_ep *ep) {
    __m512 acc[Z_MR], acc2[Z_MR];
    const __mmask16 m1 = NP == 1 ? (__mmask16)((1u << nr) - 1) : (__mmask16)0xFFFF;
    const __mmask16 m2 = (__mmask16)((1u << nr) - 1);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        acc[i] = _mm512_setzero_ps();
        if (NP == 2) acc2[i] = _mm512_setzero_ps();
    }
    for (int t = 0; t < ntap; t++, ap += EI_SG_MR_MAX) {
        const float *q[Z_MR];
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) q[i] = ap[i];
        for (int64_t k = 0; k < kc; k++, b += EI_SG_NR) {
            __m512 w = _mm512_loadu_ps(b), w2 = NP == 2 ? _mm512_loadu_ps(b + bstride) : w;
            _mm_prefetch((const char *)(b + SG_PF * EI_SG_NR), _MM_HINT_T0);
            if (NP == 2) _mm_prefetch((const char *)(b + bstride + SG_PF * EI_SG_NR), _MM_HINT_T0);
#pragma GCC unroll 16
            for (int i = 0; i < MR; i++) {
                __m512 av = _mm512_set1_ps(q[i][k]);
                acc[i] = _mm512_fmadd_ps(av, w, acc[i]);
                if (NP == 2) acc2[i] = _mm512_fmadd_ps(av, w2, acc2[i]);
            }
        }
    }
    __m512 lo = _mm512_set1_ps(ep->lo), hi = _mm512_set1_ps(ep->hi);
    const int upper = ep->hi < INFINITY;      /* Relu: no min */
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        if (ep->load_c) {
            acc[i] = _mm512_add_ps(acc[i], _mm512_maskz_loadu_ps(m1, c + i * ldc));
            if (NP == 2) acc2[i] = _mm512_add_ps(acc2[i], _mm512_maskz_loadu_ps(m2, c + i * ldc + EI_SG_NR));
        } else if (ep->bias) {
            acc[i] = _mm512_add_ps(acc[i], _mm512_maskz_loadu_ps(m1, ep->bias));
            if (NP == 2) acc2[i] = _mm512_add_ps(acc2[i], _mm512_maskz_loadu_ps(m2, ep->bias + EI_SG_NR));
        }
        if (ep->z) {
            acc[i] = _mm512_add_ps(acc[i], _mm512_maskz_loadu_ps(m1, ep->z + i * ep->ldz));
            if (NP == 2) acc2[i] = _mm512_add_ps(acc2[i], _mm512_maskz_loadu_ps(m2, ep->z + i * ep->ldz + EI_SG_NR));
        }
        if (ep->clamp) {
            acc[i] = _mm512_max_ps(lo, acc[i]);
            if (NP == 2) acc2[i] = _mm512_max_ps(lo, acc2[i]);
            if (upper) {
                acc[i] = _mm512_min_ps(hi, acc[i]);
                if (NP == 2) acc2[i] = _mm512_min_ps(hi, acc2[i]);
            }
        }
        _mm512_mask_storeu_ps(c + i * ldc, m1, acc[i]);
        if (NP == 2) _mm512_mask_storeu_ps(c + i * ldc + EI_SG_NR, m2, acc2[i]);
    }
}

typedef void (*zicore)(int, int64_t, const float *const *, const float *, int64_t, float *, int64_t, int,
                       const ei_sg_ep *);
#define ZI_CORE(R) \
    __attribute__((target("avx512f"))) static void icore1_avx512_##R(int ntap, int64_t kc, const float *const *ap, \
        const float *b, int64_t bs, float *c, int64_t ldc, int nr, const ei_sg_ep *ep) { \
        icore_avx512_n(R, 1, ntap, kc, ap, b, bs, c, ldc, nr, ep); } \
    __attribute__((target("avx512f"))) static void icore2_avx512_##R(int ntap, int64_t kc, const float *const *ap, \
        const float *b, int64_t bs, float *c, int64_t ldc, int nr, const ei_sg_ep *ep) { \
        icore_avx512_n(R, 2, ntap, kc, ap, b, bs, c, ldc, nr, ep); }
ZI_CORE(1) ZI_CORE(2) ZI_CORE(3) ZI_CORE(4) ZI_CORE(5) ZI_CORE(6) ZI_CORE(7) ZI_CORE(8) ZI_CORE(9) ZI_CORE(10)
ZI_CORE(11) ZI_CORE(12) ZI_CORE(13) ZI_CORE(14)
#undef ZI_CORE

static void ikr_avx512(int mr, int np, int ntap, int64_t kc, const float *const *ap, const float *b,
                       int64_t bstride, float *c, int64_t ldc, int nr, const ei_sg_ep *ep) {
    static const zicore one[Z_MR] = { icore1_avx512_1, icore1_avx512_2, icore1_avx512_3, icore1_avx512_4,
                                      icore1_avx512_5, icore1_avx512_6, icore1_avx512_7, icore1_avx512_8,
                                      icore1_avx512_9, icore1_avx512_10, icore1_avx512_11, icore1_avx512_12,
                                      icore1_avx512_13, icore1_avx512_14 };
    static const zicore two[Z_MR] = { icore2_avx512_1, icore2_avx512_2, icore2_avx512_3, icore2_avx512_4,
                                      icore2_avx512_5, icore2_avx512_6, icore2_avx512_7, icore2_avx512_8,
                                      icore2_avx512_9, icore2_avx512_10, icore2_avx512_11, icore2_avx512_12,
                                      icore2_avx512_13, icore2_avx512_14 };
    (np == 2 ? two : one)[mr - 1](ntap, kc, ap, b, bstride, c, ldc, nr, ep);
}
#endif


/* ---- NEON: 6 rows x 4 vectors = 24 accumulators (of 32 registers) ---- */
#if defined(__aarch64__)
#define N_MR 6
/* MR rows (a constant in each instance); rows past mr re-read row mr - 1 (the staging tile's use) */
static inline __attribute__((always_inline))
void core_neon_n(const int MR, int mr, int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                 int64_t ldc, const ei_sg_ep *ep) {
    float32x4_t acc[N_MR][4];
    const float *ar[N_MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) ar[i] = a + (int64_t)(i < mr ? i : mr - 1) * lda;
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            acc[i][v] = vdupq_n_f32(0.0f);
    for (int64_t k = 0; k < kc; k++, b += EI_SG_NR) {
        float32x4_t w0 = vld1q_f32(b), w1 = vld1q_f32(b + 4), w2 = vld1q_f32(b + 8), w3 = vld1q_f32(b + 12);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            float32x4_t av = vld1q_dup_f32(ar[i] + k);
            acc[i][0] = vfmaq_f32(acc[i][0], av, w0);
            acc[i][1] = vfmaq_f32(acc[i][1], av, w1);
            acc[i][2] = vfmaq_f32(acc[i][2], av, w2);
            acc[i][3] = vfmaq_f32(acc[i][3], av, w3);
        }
    }
    float32x4_t lo = vdupq_n_f32(ep->lo), hi = vdupq_n_f32(ep->hi);
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            float32x4_t r = acc[i][v];
            if (ep->load_c) r = vaddq_f32(r, vld1q_f32(c + i * ldc + 4 * v));
            else if (ep->bias) r = vaddq_f32(r, vld1q_f32(ep->bias + 4 * v));
            if (ep->z) r = vaddq_f32(r, vld1q_f32(ep->z + i * ep->ldz + 4 * v));
            if (ep->clamp) {
                /* bsl keeps a NaN (fmax/fmin would propagate it too, but spell the numpy rule) */
                r = vbslq_f32(vcltq_f32(r, lo), lo, r);
                r = vbslq_f32(vcgtq_f32(r, hi), hi, r);
            }
            vst1q_f32(c + i * ldc + 4 * v, r);
        }
}

static void core_neon(int mr, int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                      int64_t ldc, const ei_sg_ep *ep) {
    core_neon_n(N_MR, mr, kc, a, lda, b, c, ldc, ep);
}

/* full 16-column tiles: one core per row count, so partial tiles compute their own rows only */
#define N_CORE(R) \
    static void core_neon_##R(int64_t kc, const float *a, int64_t lda, const float *b, float *c, int64_t ldc, \
                              const ei_sg_ep *ep) { core_neon_n(R, R, kc, a, lda, b, c, ldc, ep); }
N_CORE(1) N_CORE(2) N_CORE(3) N_CORE(4) N_CORE(5) N_CORE(6)
#undef N_CORE

static void ukr_neon(int mr, int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                     int64_t ldc, int nr, const ei_sg_ep *ep) {
    typedef void (*ncore)(int64_t, const float *, int64_t, const float *, float *, int64_t, const ei_sg_ep *);
    static const ncore cores[N_MR] = { core_neon_1, core_neon_2, core_neon_3, core_neon_4, core_neon_5, core_neon_6 };
    if (nr == EI_SG_NR) cores[mr - 1](kc, a, lda, b, c, ldc, ep);
    else sg_staged(core_neon, mr, kc, a, lda, b, c, ldc, nr, ep);
}
#endif

ei_sg_kernel ei_sg_scalar(void) {
    ei_sg_kernel k = { ukr_scalar, S_MR, "scalar", NULL, S_MR, NULL };
    return k;
}

ei_sg_kernel ei_sg_pick(void) {
#if defined(__x86_64__)
    if (ei_has(EI_AVX512)) { ei_sg_kernel k = { ukr_avx512, 12, "AVX-512", ukr2_avx512, Z_MR, ikr_avx512 }; return k; }
    if (ei_has(EI_AVX2)) { ei_sg_kernel k = { ukr_avx2, X_MR, "AVX2", NULL, X_MR, NULL }; return k; }
#elif defined(__aarch64__)
    if (ei_has(EI_NEON)) { ei_sg_kernel k = { ukr_neon, N_MR, "NEON", NULL, N_MR, NULL }; return k; }
#endif
    return ei_sg_scalar();
}
