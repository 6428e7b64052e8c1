/* The int8 squeeze-excite block of MobileNetV3-style networks as one step:
 *
 *   mean = GlobalAveragePool(x)            (the pool step's own kernel, ei_global_pool_s8)
 *   hid  = conv1(mean)  [+ Relu/Clip, + table]    1x1 conv on one pixel: a GEMV, M = 1
 *   gate = conv2(hid)   [+ table: HardSigmoid]    the second GEMV
 *   y    = x * gate                        (the Mul step's own kernel, ei_int8_bcast)
 *
 * The plan (backends/cpu/fuse_int8_se.py) prepares the four steps as it would unfused and
 * hands their argument structs here, so the mean and the gated Mul are the same code, and the
 * GEMVs compute the int8 conv's integers: acc = folded bias + sum_k w[o][k] x[k] (int32, exact:
 * the prepare checks |bias| + K 2^14 < 2^31), MBQM per output channel, + zp_y, the clamp, then
 * the fused activation's 256-entry table (ei_rq_run and ei_lut_inplace, the conv epilogues'
 * own). The mean, hidden and gate tensors are written where the unfused plan writes them.
 * At 2+ threads (parts > 1, decided at prepare by fuse_int8_se.py) the mean and the Mul run as
 * two jobs over row shares instead (below).
 *
 * GEMV weights are packed at prepare (Python) in blocks of 16 output channels x 4 inputs:
 * wp[ob][kq][l][j] = w[16 ob + l][4 kq + j] (zero padded), so with AVX-512 VNNI one vpdpbusd
 * adds 4 inputs into 16 outputs (x as u8 = x + 128; corr[o] = bias[o] - 128 sum_k w[o][k]
 * takes the offset back out), without a horizontal sum; elsewhere the same layout in plain
 * loops. Gains over four steps: no GEMM plan for a one-pixel conv (panels, tile dispatch,
 * epilogue setup per call) and one step instead of four in the compiled loop.
 */
#include "ei_int8.h"
#include "ei_lut.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define SE_MAX_K 4096        /* inputs of one GEMV (the x copy lives on the stack) */

typedef struct {
    const int8_t *x; int8_t *y;
    const int8_t *wp;           /* packed weights, (ceil(m / 16), ceil(k / 4), 16, 4) */
    const int32_t *corr;        /* per output: folded bias - 128 sum_k w (the x + 128 offset) */
    const int32_t *bias;        /* per output: folded bias (bias - zp_x sum_k w) */
    const int32_t *mult, *shift;
    const int8_t *lut;          /* a fused activation's table, or NULL */
    const void *consts;         /* AVX-512: ceil(m / 16) ei_vq16, the MBQM constants (ei_se_prepare) */
    int32_t m, k, zp_y, lo, hi, left;   /* left: some output channel shifts left */
} ei_se_gemv;

typedef struct {
    ei_step_fn pool_fn; const void *pool;      /* the mean: GlobalAveragePool's step */
    ei_step_fn mul_fn; const void *mul;        /* the gated Mul's step */
    ei_se_gemv g1, g2;
    int32_t *sums;              /* parts > 1: parts x g1.k int32, the shares' channel sums (scratch) */
    int64_t rows, cols;         /* parts > 1: x's image rows and columns (NHWC, batch 1) */
    int32_t threads, parts;     /* parts > 1: the mean and the Mul in that many row shares */
} ei_se_s8_args;

static void gemv_plain(const ei_se_gemv *g, const int8_t *x, int32_t *acc) {
    int32_t kq = (g->k + 3) / 4;
    for (int32_t ob = 0; ob * 16 < g->m; ob++) {
        int32_t s[16] = {0};
        const int8_t *w = g->wp + (int64_t)ob * kq * 64;
        for (int32_t q = 0; q < kq; q++, w += 64)
            for (int l = 0; l < 16; l++)
                for (int j = 0; j < 4; j++) s[l] += w[4 * l + j] * x[4 * q + j];
        for (int l = 0; l < 16 && ob * 16 + l < g->m; l++) acc[ob * 16 + l] = s[l] + g->bias[ob * 16 + l];
    }
}

#if defined(__x86_64__)
static int has_vnni(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vnni"); }
    return v && ei_has(EI_AVX512);
}

/* output blocks ob0 .. ob1 - 1; xu: the k inputs + 128 as u8, padded to whole quads (the
 * padding meets zero weights). Four output blocks at a time, two accumulators each (even and
 * odd quads): eight independent vpdpbusd chains (two chains of one block were latency-bound,
 * 5 cycles a step: slower than the GEMM's panels on 576 -> 144); each block's 16 sums
 * requantized in registers with the constants made at prepare (ei_vq_store: the GEMM
 * epilogue's MBQM, clamp and zp_y; ei_rq_run's 8-lane one took as long as the products) */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void gemv_vnni(const ei_se_gemv *g, const ei_vqc *vc, const uint8_t *xu, int8_t *y, int32_t ob0, int32_t ob1) {
    int32_t kq = (g->k + 3) / 4;
    const int32_t *xq = (const int32_t *)xu;
    const int64_t bs = (int64_t)kq * 64;                /* bytes of one block's weights */
    for (int32_t ob = ob0; ob < ob1; ob += 4) {
        int nb = (int)EI_MIN(4, ob1 - ob);
        const int8_t *w = g->wp + ob * bs;
        __m512i s[8];
        for (int i = 0; i < 8; i++) s[i] = _mm512_setzero_si512();
        int32_t q = 0;
        if (nb == 4) {
            for (; q + 2 <= kq; q += 2) {
                __m512i b0 = _mm512_set1_epi32(xq[q]), b1 = _mm512_set1_epi32(xq[q + 1]);
                const int8_t *wq = w + (int64_t)q * 64;
                s[0] = _mm512_dpbusd_epi32(s[0], b0, _mm512_loadu_si512(wq));
                s[1] = _mm512_dpbusd_epi32(s[1], b0, _mm512_loadu_si512(wq + bs));
                s[2] = _mm512_dpbusd_epi32(s[2], b0, _mm512_loadu_si512(wq + 2 * bs));
                s[3] = _mm512_dpbusd_epi32(s[3], b0, _mm512_loadu_si512(wq + 3 * bs));
                s[4] = _mm512_dpbusd_epi32(s[4], b1, _mm512_loadu_si512(wq + 64));
                s[5] = _mm512_dpbusd_epi32(s[5], b1, _mm512_loadu_si512(wq + bs + 64));
                s[6] = _mm512_dpbusd_epi32(s[6], b1, _mm512_loadu_si512(wq + 2 * bs + 64));
                s[7] = _mm512_dpbusd_epi32(s[7], b1, _mm512_loadu_si512(wq + 3 * bs + 64));
            }
        }
        if (nb < 4) {                   /* the last 1-3 blocks: each with four chains over the quads */
            for (int i = 0; i < nb; i++) {
                const int8_t *wi = w + i * bs;
                __m512i t0 = _mm512_setzero_si512(), t1 = t0, t2 = t0, t3 = t0;
                int32_t r = 0;
                for (; r + 4 <= kq; r += 4) {
                    t0 = _mm512_dpbusd_epi32(t0, _mm512_set1_epi32(xq[r]), _mm512_loadu_si512(wi + (int64_t)r * 64));
                    t1 = _mm512_dpbusd_epi32(t1, _mm512_set1_epi32(xq[r + 1]), _mm512_loadu_si512(wi + (int64_t)r * 64 + 64));
                    t2 = _mm512_dpbusd_epi32(t2, _mm512_set1_epi32(xq[r + 2]), _mm512_loadu_si512(wi + (int64_t)r * 64 + 128));
                    t3 = _mm512_dpbusd_epi32(t3, _mm512_set1_epi32(xq[r + 3]), _mm512_loadu_si512(wi + (int64_t)r * 64 + 192));
                }
                for (; r < kq; r++)
                    t0 = _mm512_dpbusd_epi32(t0, _mm512_set1_epi32(xq[r]), _mm512_loadu_si512(wi + (int64_t)r * 64));
                s[i] = _mm512_add_epi32(t0, t1);
                s[i + 4] = _mm512_add_epi32(t2, t3);
            }
            q = kq;
        }
        for (; q < kq; q++) {           /* four blocks: the odd last quad */
            __m512i b0 = _mm512_set1_epi32(xq[q]);
            for (int i = 0; i < 4; i++)
                s[i] = _mm512_dpbusd_epi32(s[i], b0, _mm512_loadu_si512(w + i * bs + (int64_t)q * 64));
        }
        for (int i = 0; i < nb; i++) {
            int32_t o = (ob + i) * 16, left = g->m - o;
            __mmask16 mk = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
            __m512i c = _mm512_maskz_loadu_epi32(mk, g->corr + o);
            ei_vq_store(vc, (const ei_vq16 *)g->consts + ob + i, mk, _mm512_add_epi32(_mm512_add_epi32(s[i], s[i + 4]), c),
                        y + o, NULL);
        }
    }
}
#endif

#if defined(__x86_64__)
typedef struct { const ei_se_gemv *g; const uint8_t *xu; } gemv_ctx;

__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void gemv_range(void *vctx, int64_t b, int64_t e) {     /* items: groups of four blocks */
    const gemv_ctx *c = (const gemv_ctx *)vctx;
    ei_vqc vc;
    ei_vqc_prepare(&vc, NULL, c->g->zp_y, c->g->lo, c->g->hi, c->g->left);
    int32_t nblk = (c->g->m + 15) / 16;
    gemv_vnni(c->g, &vc, c->xu, c->g->y, (int32_t)(4 * b), (int32_t)EI_MIN(4 * e, nblk));
}
#endif

/* y = table(clamp(zp_y + MBQM(acc))): the int8 conv's epilogue for m outputs of one pixel;
 * GEMVs of at least 256 KB of weights split over the threads by output blocks (each streams
 * its share of the weights: they come from memory or L3 once a run). From 64 KB, MobileNetV3's
 * 576 -> 144 -> 576 blocks (83 KB each) ran slower on 2 threads than on 1 (12.7 against 11.9
 * us, best of 40, loaded machine): the join and the hidden vector's trip between cores cost
 * more than half of a 3 us GEMV */
#define SE_PAR_BYTES 262144
static void gemv_run(const ei_se_gemv *g, int simd, int threads) {
    _Alignas(64) int8_t xs[SE_MAX_K + 4];
    int32_t kp = (g->k + 3) / 4 * 4;
#if defined(__x86_64__)
    if (has_vnni() && g->consts) {
        for (int32_t i = 0; i < g->k; i++) xs[i] = (int8_t)((uint8_t)g->x[i] ^ 0x80);
        for (int32_t i = g->k; i < kp; i++) xs[i] = 0;
        gemv_ctx c = { g, (const uint8_t *)xs };
        int64_t groups = ((g->m + 15) / 16 + 3) / 4;
        int t = (int64_t)g->m * kp >= SE_PAR_BYTES && groups > 1 ? threads : 1;
        ei_parallel_for(groups, 1, gemv_range, &c, t);
        if (g->lut) ei_lut_inplace(g->lut, g->y, g->m, 1, g->m);
        return;
    }
#endif
    int32_t acc[SE_MAX_K + 16];
    memcpy(xs, g->x, (size_t)g->k);
    for (int32_t i = g->k; i < kp; i++) xs[i] = 0;
    gemv_plain(g, xs, acc);
    ei_rq rq = { NULL, g->mult, g->shift, NULL, g->zp_y, g->lo, g->hi };
    ei_rq_run(simd, &rq, acc, 0, g->m, g->y, 1, NULL);
    if (g->lut) ei_lut_inplace(g->lut, g->y, g->m, 1, g->m);
}

/* Row shares at 2+ threads: the depthwise conv before the block split x's rows into equal runs,
 * one a thread (src/depthwise.c; the pool's slot s takes share s first, runtime.c), so each
 * thread sums and gates the rows in its own L2: share i is rows rows i / parts .. rows (i + 1) /
 * parts, the depthwise's runs whenever its chunks are a multiple of the threads. The mean is
 * the shares' int32 sums added (exact) and divided on the caller as ei_global_pool_s8 does; the
 * GEMVs run on the caller between the two jobs (the hidden vector and the gate are tiny).
 * The mean's job is what lets the Mul's pay: with the mean on the caller (it reads the worker's
 * rows, and they move to the caller's core) the Mul in row shares measured no faster than on
 * one thread (MobileNetV3 at 2 threads, the step's phases timed in place, min of ~400 runs:
 * 56x56x16 Mul 9.1 us alone, 9.4 split after a caller's mean, 5.2 after the mean's job; the
 * mean's job costs ~0.2-0.4 us more than the caller's mean). */
static void share_of(const ei_se_s8_args *a, int64_t i, int64_t *q0, int64_t *q1) {
    *q0 = a->cols * (a->rows * i / a->parts);
    *q1 = a->cols * (a->rows * (i + 1) / a->parts);
}

static void mean_shares(void *ctx, int64_t b, int64_t e) {
    const ei_se_s8_args *a = (const ei_se_s8_args *)ctx;
    for (int64_t i = b; i < e; i++) {
        int64_t q0, q1;
        share_of(a, i, &q0, &q1);
        ei_global_pool_s8_sums(a->pool, q0, q1, a->sums + i * a->g1.k);
    }
}

static void mul_shares(void *ctx, int64_t b, int64_t e) {     /* the Mul's rows are x's pixels */
    const ei_se_s8_args *a = (const ei_se_s8_args *)ctx;
    for (int64_t i = b; i < e; i++) {
        int64_t q0, q1;
        share_of(a, i, &q0, &q1);
        ei_int8_bcast_rows(a->mul, q0, q1);
    }
}

EI_API void ei_se_s8(const ei_se_s8_args *a) {
    EI_CHECK(a->g1.k >= 1 && a->g1.k <= SE_MAX_K && a->g1.m >= 1 && a->g1.m <= SE_MAX_K);
    EI_CHECK(a->g2.k == a->g1.m && a->g2.m >= 1 && a->g2.m <= SE_MAX_K);
    EI_CHECK(a->parts <= 1 || (a->sums != NULL && a->parts <= a->rows && a->cols >= 1));
    int simd = ei_rq_simd();
    if (a->parts > 1) {
        ei_parallel_for(a->parts, 1, mean_shares, (void *)a, a->parts);
        const int64_t c = a->g1.k;
        for (int64_t i = 1; i < a->parts; i++)
            for (int64_t j = 0; j < c; j++) a->sums[j] += a->sums[i * c + j];
        ei_global_pool_s8_store(a->pool, a->sums);
    } else {
        a->pool_fn(a->pool);
    }
    gemv_run(&a->g1, simd, a->threads);
    gemv_run(&a->g2, simd, a->threads);
    if (a->parts > 1) ei_parallel_for(a->parts, 1, mul_shares, (void *)a, a->parts);
    else a->mul_fn(a->mul);
}

/* bytes of the AVX-512 requantization constants of both GEMVs (0: none are used here) */
EI_API int64_t ei_se_consts_size(const ei_se_s8_args *a) {
#if defined(__x86_64__)
    return (int64_t)((a->g1.m + 15) / 16 + (a->g2.m + 15) / 16) * (int64_t)sizeof(ei_vq16);
#else
    (void)a;
    return 0;
#endif
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw")))
static void prepare_gemv(ei_se_gemv *g, ei_vq16 *k) {
    int left = 0;
    for (int32_t o = 0; o < g->m; o += 16)
        left |= ei_vq16_prepare(k + o / 16, NULL, NULL, g->mult + o, g->shift + o, (int)EI_MIN(16, g->m - o));
    g->consts = k;
    g->left = left;
}
#endif

/* once at prepare, with consts of ei_se_consts_size bytes, 64-byte aligned: the per-channel
 * MBQM constants of both GEMVs in ei_vq16 blocks (where the CPU has AVX-512) */
EI_API void ei_se_prepare(ei_se_s8_args *a, void *consts) {
    a->g1.consts = a->g2.consts = NULL;
#if defined(__x86_64__)
    if (!consts || !(ei_cpu_features() & EI_AVX512)) return;
    ei_vq16 *k = (ei_vq16 *)consts;
    prepare_gemv(&a->g1, k);
    prepare_gemv(&a->g2, k + (a->g1.m + 15) / 16);
#else
    (void)consts;
#endif
}

/* the GEMV path under the current ISA mask (plan notes) */
EI_API int ei_se_isa(void) {
#if defined(__x86_64__)
    if (has_vnni()) return 1;
#endif
    return 0;
}
