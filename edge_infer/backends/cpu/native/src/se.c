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
    int32_t m, k, zp_y, lo, hi, pad_;
} ei_se_gemv;

typedef struct {
    ei_step_fn pool_fn; const void *pool;      /* the mean: GlobalAveragePool's step */
    ei_step_fn mul_fn; const void *mul;        /* the gated Mul's step */
    ei_se_gemv g1, g2;
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

/* xu: the k inputs + 128 as u8, padded to whole quads (the padding meets zero weights) */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void gemv_vnni(const ei_se_gemv *g, const uint8_t *xu, int32_t *acc) {
    int32_t kq = (g->k + 3) / 4;
    const int32_t *xq = (const int32_t *)xu;
    for (int32_t ob = 0; ob * 16 < g->m; ob++) {
        const int8_t *w = g->wp + (int64_t)ob * kq * 64;
        __m512i s0 = _mm512_setzero_si512(), s1 = s0;
        int32_t q = 0;
        for (; q + 2 <= kq; q += 2, w += 128) {
            s0 = _mm512_dpbusd_epi32(s0, _mm512_set1_epi32(xq[q]), _mm512_loadu_si512(w));
            s1 = _mm512_dpbusd_epi32(s1, _mm512_set1_epi32(xq[q + 1]), _mm512_loadu_si512(w + 64));
        }
        if (q < kq) s0 = _mm512_dpbusd_epi32(s0, _mm512_set1_epi32(xq[q]), _mm512_loadu_si512(w));
        int left = g->m - ob * 16;
        __mmask16 mk = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        __m512i c = _mm512_maskz_loadu_epi32(mk, g->corr + ob * 16);
        _mm512_mask_storeu_epi32(acc + ob * 16, mk, _mm512_add_epi32(_mm512_add_epi32(s0, s1), c));
    }
}
#endif

/* y = table(clamp(zp_y + MBQM(acc))): the int8 conv's epilogue for m outputs of one pixel */
static void gemv_run(const ei_se_gemv *g, int simd) {
    int32_t acc[SE_MAX_K + 16];
    _Alignas(64) int8_t xs[SE_MAX_K + 4];
    int32_t kp = (g->k + 3) / 4 * 4;
#if defined(__x86_64__)
    if (has_vnni()) {
        for (int32_t i = 0; i < g->k; i++) xs[i] = (int8_t)((uint8_t)g->x[i] ^ 0x80);
        for (int32_t i = g->k; i < kp; i++) xs[i] = 0;
        gemv_vnni(g, (const uint8_t *)xs, acc);
    } else
#endif
    {
        memcpy(xs, g->x, (size_t)g->k);
        for (int32_t i = g->k; i < kp; i++) xs[i] = 0;
        gemv_plain(g, xs, acc);
    }
    ei_rq rq = { NULL, g->mult, g->shift, NULL, g->zp_y, g->lo, g->hi };
    ei_rq_run(simd, &rq, acc, 0, g->m, g->y, 1, NULL);
    if (g->lut) ei_lut_inplace(g->lut, g->y, g->m, 1, g->m);
}

EI_API void ei_se_s8(const ei_se_s8_args *a) {
    EI_CHECK(a->g1.k >= 1 && a->g1.k <= SE_MAX_K && a->g1.m >= 1 && a->g1.m <= SE_MAX_K);
    EI_CHECK(a->g2.k == a->g1.m && a->g2.m >= 1 && a->g2.m <= SE_MAX_K);
    int simd = ei_rq_simd();
    a->pool_fn(a->pool);
    gemv_run(&a->g1, simd);
    gemv_run(&a->g2, simd);
    a->mul_fn(a->mul);
}

/* the GEMV path under the current ISA mask (plan notes) */
EI_API int ei_se_isa(void) {
#if defined(__x86_64__)
    if (has_vnni()) return 1;
#endif
    return 0;
}
