/* Depthwise convolution (group == channels, multiplier 1), int8 and fp32, NHWC and NCHW,
 * any kernel size, stride and dilation (the numpy kernels' geometry), fused epilogues:
 *   fp32: y = act(sum_taps x*w + bias [+ z])   act: Relu, Clip, HardSwish, HardSigmoid, LeakyRelu
 *   int8: y = requant(sum_taps x*w + folded bias [, residual], clamp)   (ei_int8.h)
 *
 * fp32 follows the numpy kernel's arithmetic exactly: tap products added one tap at a time in
 * (kernel row, kernel column) order, separately rounded (fp-contract off: no FMA), then the
 * bias, the residual, the activation as kernels/fused.py evaluates it; padding reads 0 (fp32)
 * or zp_x (int8, whose zero-point term is folded into the bias at prepare).
 *
 * The loops run over contiguous channels (NHWC) or output columns (NCHW) so that they
 * vectorize; each body is compiled three times: scalar (vectorizer off: the reference),
 * AVX2 (x86-64, chosen at run time) and baseline NEON (aarch64). The vectorized instances do
 * the same IEEE operations per element, so they agree with the scalar one bit for bit.
 */
#pragma GCC optimize("fp-contract=off")
#include "ei_int8.h"
#include "ei_activations.h"
#include "depthwise.h"
#include "ei_lut.h"
#include "selftest_rng.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#define DW_VQ_BYTES ((int64_t)sizeof(ei_vq16))
#else
#define DW_VQ_BYTES 0
#endif

/* NHWC int8: the accumulators of one pixel, and (AVX-512) the epilogue constants of every 16
 * channels; a multiple of 64 bytes (each thread slot's part stays 64-byte aligned) */
static int64_t dwq_bytes(const ei_dw_args *a);

EI_API int64_t ei_dw_scratch(const ei_dw_args *a) {
    if (!a->is_int8) return 64;
    if (a->nchw) return ((int64_t)a->ow * 16 + 127) / 64 * 64;
    return ((int64_t)a->c * 4 + 63) / 64 * 64 + 64 + ((int64_t)a->c + 15) / 16 * DW_VQ_BYTES + dwq_bytes(a)
           + dws_scratch(a);
}

#define INLINE static inline __attribute__((always_inline))

/* fp32 epilogue on n values at stride 1: v = act(v + b[i] + z[i]); bias/z may be NULL;
 * bias_one: a single bias value for all (NCHW rows) when bias_vec is NULL */
INLINE void f32_epilogue(float *y, int n, const float *bias_vec, float bias_one, int has_bias,
                         const float *z, int act, float a0, float a1) {
    if (has_bias) {
        if (bias_vec) for (int i = 0; i < n; i++) y[i] = y[i] + bias_vec[i];
        else for (int i = 0; i < n; i++) y[i] = y[i] + bias_one;
    }
    if (z) for (int i = 0; i < n; i++) y[i] = y[i] + z[i];
    switch (act) {
    case ACT_RELU:
        for (int i = 0; i < n; i++) { float v = y[i]; y[i] = 0.0f > v ? 0.0f : v; }
        break;
    case ACT_CLIP:
        for (int i = 0; i < n; i++) { float v = y[i]; v = a0 > v ? a0 : v; y[i] = a1 < v ? a1 : v; }
        break;
    case ACT_HARDSWISH:
        for (int i = 0; i < n; i++) {
            float v = y[i], t = v * (float)(1.0 / 6.0);
            t = t + 0.5f;
            t = 0.0f > t ? 0.0f : t;
            t = 1.0f < t ? 1.0f : t;
            y[i] = t * v;
        }
        break;
    case ACT_HARDSIGMOID:
        for (int i = 0; i < n; i++) {
            float t = y[i] * a0;
            t = t + a1;
            t = 0.0f > t ? 0.0f : t;
            y[i] = 1.0f < t ? 1.0f : t;
        }
        break;
    case ACT_LEAKYRELU:
        if (a0 <= 1.0f) for (int i = 0; i < n; i++) { float v = y[i], t = v * a0; y[i] = v >= t ? v : t; }
        else for (int i = 0; i < n; i++) { float v = y[i], t = v * a0; y[i] = v <= t ? v : t; }
        break;
    default:
        break;
    }
}

/* one output row (b, oy) of an NHWC depthwise conv */
INLINE void dw_row_nhwc(const ei_dw_args *a, int64_t row, char *scratch, int simd) {
    int b = (int)(row / a->oh), oy = (int)(row % a->oh), C = a->c;
    int taps = a->kh * a->kw;
    for (int ox = 0; ox < a->ow; ox++) {
        int64_t opix = ((int64_t)b * a->oh + oy) * a->ow + ox;
        if (a->is_int8) {
            int32_t *acc = (int32_t *)scratch;
            const int16_t *w = (const int16_t *)a->wt;
            for (int t = 0; t < taps; t++) {
                int ky = t / a->kw, kx = t % a->kw;
                int iy = oy * a->sh - a->pt + ky * a->dh, ix = ox * a->sw - a->pl + kx * a->dw;
                const int8_t *xr = (iy < 0 || iy >= a->h || ix < 0 || ix >= a->w) ? (const int8_t *)a->pad
                    : (const int8_t *)a->x + (((int64_t)b * a->h + iy) * a->w + ix) * C;
                const int16_t *wr = w + (int64_t)t * C;
                if (t == 0) for (int ch = 0; ch < C; ch++) acc[ch] = (int32_t)(int16_t)(xr[ch] * wr[ch]);
                else for (int ch = 0; ch < C; ch++) acc[ch] += (int32_t)(int16_t)(xr[ch] * wr[ch]);
            }
            ei_rq rq = { (const int32_t *)a->bias, a->mult, a->shift, a->ztab, a->zp_y, a->lo, a->hi };
            ei_rq_run(simd, &rq, acc, 0, C, (int8_t *)a->y + opix * C, 1,
                      a->z ? (const int8_t *)a->z + opix * C : NULL);
        } else {
            float *y = (float *)a->y + opix * C;
            const float *w = (const float *)a->wt;
            for (int t = 0; t < taps; t++) {
                int ky = t / a->kw, kx = t % a->kw;
                int iy = oy * a->sh - a->pt + ky * a->dh, ix = ox * a->sw - a->pl + kx * a->dw;
                const float *xr = (iy < 0 || iy >= a->h || ix < 0 || ix >= a->w) ? (const float *)a->pad
                    : (const float *)a->x + (((int64_t)b * a->h + iy) * a->w + ix) * C;
                const float *wr = w + (int64_t)t * C;
                if (t == 0) for (int ch = 0; ch < C; ch++) y[ch] = xr[ch] * wr[ch];
                else for (int ch = 0; ch < C; ch++) y[ch] = y[ch] + xr[ch] * wr[ch];
            }
            f32_epilogue(y, C, (const float *)a->bias, 0.0f, a->bias != NULL,
                         a->z ? (const float *)a->z + opix * C : NULL, a->act, a->a0, a->a1);
        }
    }
}

/* one output row (b, ch, oy) of an NCHW depthwise conv: taps outer, output columns inner */
INLINE void dw_row_nchw(const ei_dw_args *a, int64_t row, char *scratch, int simd) {
    int oy = (int)(row % a->oh);
    int64_t plane = row / a->oh;                 /* b * C + ch */
    int ch = (int)(plane % a->c), OW = a->ow, taps = a->kh * a->kw;
    int64_t in_off = plane * a->h * a->w, out_off = (plane * a->oh + oy) * (int64_t)OW;
    /* columns [ox0, ox1) read inside the image for kernel column kx */
    for (int t = 0; t < taps; t++) {
        int ky = t / a->kw, kx = t % a->kw;
        int iy = oy * a->sh - a->pt + ky * a->dh;
        int rowvalid = iy >= 0 && iy < a->h;
        int off = kx * a->dw - a->pl;            /* ix = ox * sw + off */
        int ox0 = off >= 0 ? 0 : (-off + a->sw - 1) / a->sw;
        int ox1 = a->w - off <= 0 ? 0 : (a->w - off + a->sw - 1) / a->sw;
        if (!rowvalid || ox0 > OW) ox0 = OW;
        if (ox1 > OW) ox1 = OW;
        if (ox1 < ox0) ox1 = ox0;
        if (a->is_int8) {
            int32_t *acc = (int32_t *)scratch;
            int32_t wv = ((const int16_t *)a->wt)[(int64_t)ch * taps + t];
            int32_t pz = a->zp_x * wv;
            const int8_t *xr = (const int8_t *)a->x + in_off + (int64_t)(rowvalid ? iy : 0) * a->w + off;
            if (t == 0) {
                for (int ox = 0; ox < ox0; ox++) acc[ox] = pz;
                for (int ox = ox0; ox < ox1; ox++) acc[ox] = xr[ox * a->sw] * wv;
                for (int ox = ox1; ox < OW; ox++) acc[ox] = pz;
            } else {
                for (int ox = 0; ox < ox0; ox++) acc[ox] += pz;
                for (int ox = ox0; ox < ox1; ox++) acc[ox] += xr[ox * a->sw] * wv;
                for (int ox = ox1; ox < OW; ox++) acc[ox] += pz;
            }
        } else {
            float *y = (float *)a->y + out_off;
            float wv = ((const float *)a->wt)[(int64_t)ch * taps + t], pz = 0.0f * wv;
            const float *xr = (const float *)a->x + in_off + (int64_t)(rowvalid ? iy : 0) * a->w + off;
            if (t == 0) {
                for (int ox = 0; ox < ox0; ox++) y[ox] = pz;
                for (int ox = ox0; ox < ox1; ox++) y[ox] = xr[ox * a->sw] * wv;
                for (int ox = ox1; ox < OW; ox++) y[ox] = pz;
            } else {
                for (int ox = 0; ox < ox0; ox++) y[ox] = y[ox] + pz;
                for (int ox = ox0; ox < ox1; ox++) y[ox] = y[ox] + xr[ox * a->sw] * wv;
                for (int ox = ox1; ox < OW; ox++) y[ox] = y[ox] + pz;
            }
        }
    }
    if (a->is_int8) {
        int32_t *acc = (int32_t *)scratch, *q = acc + OW, *s = q + OW, *bb = s + OW;
        for (int ox = 0; ox < OW; ox++) {
            q[ox] = a->mult[ch]; s[ox] = a->shift[ch]; bb[ox] = ((const int32_t *)a->bias)[ch];
        }
        ei_rq rq = { bb, q, s, a->ztab, a->zp_y, a->lo, a->hi };
        ei_rq_run(simd, &rq, acc, 0, OW, (int8_t *)a->y + out_off, 1,
                  a->z ? (const int8_t *)a->z + out_off : NULL);
    } else {
        float bias = a->bias ? ((const float *)a->bias)[ch] : 0.0f;
        f32_epilogue((float *)a->y + out_off, OW, NULL, bias, a->bias != NULL,
                     a->z ? (const float *)a->z + out_off : NULL, a->act, a->a0, a->a1);
    }
}

INLINE void dw_rows(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch, int simd) {
    if (a->nchw) for (int64_t r = r0; r < r1; r++) dw_row_nchw(a, r, scratch, simd);
    else for (int64_t r = r0; r < r1; r++) dw_row_nhwc(a, r, scratch, simd);
}

__attribute__((optimize("no-tree-vectorize")))
static void dw_rows_scalar(const ei_dw_args *a, int64_t r0, int64_t r1, char *s) { dw_rows(a, r0, r1, s, 0); }

#if defined(__x86_64__)
__attribute__((target("avx2,fma")))
static void dw_rows_avx2(const ei_dw_args *a, int64_t r0, int64_t r1, char *s) { dw_rows(a, r0, r1, s, 1); }
#elif defined(__aarch64__)
static void dw_rows_neon(const ei_dw_args *a, int64_t r0, int64_t r1, char *s) { dw_rows(a, r0, r1, s, 1); }
#endif

/* int8 NHWC with explicit SIMD: a pixel's accumulators for 16 channels stay in registers over
 * all taps (initialized with the folded bias), then requantize and store; same integers as
 * dw_row_nhwc + ei_rq_run. */
#define DW8_MAX_TAPS 64

static inline void dw8_tap_rows(const ei_dw_args *a, int b, int oy, int ox, const int8_t **ptr) {
    int t = 0;
    for (int ky = 0; ky < a->kh; ky++) {
        int iy = oy * a->sh - a->pt + ky * a->dh;
        const int8_t *xrow = (const int8_t *)a->x + ((int64_t)b * a->h + iy) * a->w * a->c;
        int rowok = iy >= 0 && iy < a->h;
        for (int kx = 0; kx < a->kw; kx++, t++) {
            int ix = ox * a->sw - a->pl + kx * a->dw;
            ptr[t] = (rowok && ix >= 0 && ix < a->w) ? xrow + (int64_t)ix * a->c : (const int8_t *)a->pad;
        }
    }
}

static inline void dw8_tail(const ei_dw_args *a, const int8_t **ptr, int c, int8_t *y, const int8_t *z) {
    const int16_t *w = (const int16_t *)a->wt;
    const int32_t *bias = (const int32_t *)a->bias;
    for (; c < a->c; c++) {
        int32_t s = bias[c];
        for (int t = 0; t < a->kh * a->kw; t++) s += ptr[t][c] * w[(int64_t)t * a->c + c];
        int32_t zt = a->ztab ? a->ztab[(uint8_t)z[c]] : 0;
        y[c] = ei_rq_one(s, a->mult[c], a->shift[c], a->zp_y, zt, a->lo, a->hi);
    }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma")))
static void dw8_rows_avx2(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    (void)scratch;
    const int8_t *ptr[DW8_MAX_TAPS];
    const int16_t *w = (const int16_t *)a->wt;
    const int32_t *bias = (const int32_t *)a->bias;
    int C = a->c, taps = a->kh * a->kw;
    ei_rq rq = { NULL, a->mult, a->shift, a->ztab, a->zp_y, a->lo, a->hi };
    for (int64_t row = r0; row < r1; row++) {
        int b = (int)(row / a->oh), oy = (int)(row % a->oh);
        for (int ox = 0; ox < a->ow; ox++) {
            int64_t opix = ((int64_t)b * a->oh + oy) * a->ow + ox;
            int8_t *y = (int8_t *)a->y + opix * C;
            const int8_t *z = a->z ? (const int8_t *)a->z + opix * C : NULL;
            dw8_tap_rows(a, b, oy, ox, ptr);
            int c = 0;
            for (; c + 16 <= C; c += 16) {
                __m256i lo = _mm256_loadu_si256((const __m256i *)(bias + c));
                __m256i hi = _mm256_loadu_si256((const __m256i *)(bias + c + 8));
                const int16_t *wc = w + c;
                for (int t = 0; t < taps; t++, wc += C) {
                    __m256i xv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(ptr[t] + c)));
                    __m256i p = _mm256_mullo_epi16(xv, _mm256_loadu_si256((const __m256i *)wc));
                    lo = _mm256_add_epi32(lo, _mm256_cvtepi16_epi32(_mm256_castsi256_si128(p)));
                    hi = _mm256_add_epi32(hi, _mm256_cvtepi16_epi32(_mm256_extracti128_si256(p, 1)));
                }
                __m128i q0 = ei_rq8_avx2(&rq, lo, c, z ? z + c : NULL, 1);
                __m128i q1 = ei_rq8_avx2(&rq, hi, c + 8, z ? z + c + 8 : NULL, 1);
                _mm_storeu_si128((__m128i *)(y + c), _mm_unpacklo_epi64(q0, q1));
            }
            for (; c + 8 <= C; c += 8) {
                __m256i acc = _mm256_loadu_si256((const __m256i *)(bias + c));
                const int16_t *wc = w + c;
                for (int t = 0; t < taps; t++, wc += C) {
                    __m128i xv = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(ptr[t] + c)));
                    __m128i p = _mm_mullo_epi16(xv, _mm_loadu_si128((const __m128i *)wc));
                    acc = _mm256_add_epi32(acc, _mm256_cvtepi16_epi32(p));
                }
                _mm_storel_epi64((__m128i *)(y + c), ei_rq8_avx2(&rq, acc, c, z ? z + c : NULL, 1));
            }
            dw8_tail(a, ptr, c, y, z);
        }
    }
}
#endif

#if defined(__x86_64__)
static int has_vnni(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"); }
    return v && ei_has(EI_AVX512);
}

/* AVX-512 VNNI: 16 channels per vector; each tap is one vpdpwssd of x (int8 sign-extended to
 * int32: high half 0 or -1) by w (int16 zero-extended: high half 0), i.e. x * w exactly; the
 * epilogue in registers (ei_vq_store). Output pixels go in blocks of up to DW8_PIX: each tap's
 * weight vector is widened once for the block, and the block's accumulators are independent
 * dependency chains (one pixel at a time waited on vpdpwssd's latency tap after tap: slower
 * than the fp32 kernel, 5x on MobileNetV3's 8-channel layers). The channel tail runs under
 * masks. Every tap of a pixel has its own pointer (the padding row where the tap falls
 * outside), so border pixels go through the same blocks. */
#define DW8_PIX 4

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline __attribute__((always_inline))
void dw8_block_vnni(const ei_dw_args *a, const int8_t *(*pp)[DW8_MAX_TAPS], const int P, const ei_vq16 *vq,
                    const ei_vqc *vc, int8_t *y, const int8_t *z) {
    const int16_t *w = (const int16_t *)a->wt;
    const int C = a->c, taps = a->kh * a->kw, full = C / 16;
    const __mmask16 tm = (__mmask16)((1u << (C - 16 * full)) - 1);
    for (int g = 0; g < full + (tm != 0); g++) {
        const int c = 16 * g;
        const __mmask16 m = g < full ? (__mmask16)0xFFFF : tm;
        __m512i acc[DW8_PIX];
        for (int j = 0; j < P; j++) acc[j] = vq[g].bias;
        for (int t = 0; t < taps; t++) {
            const int16_t *wt = w + (int64_t)t * C + c;
            if (m == 0xFFFF) {
                __m512i wv = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)wt));
                for (int j = 0; j < P; j++)
                    acc[j] = _mm512_dpwssd_epi32(acc[j], _mm512_cvtepi8_epi32(
                                 _mm_loadu_si128((const __m128i *)(pp[j][t] + c))), wv);
            } else {
                __m512i wv = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16((__mmask32)m, wt)));
                for (int j = 0; j < P; j++)
                    acc[j] = _mm512_dpwssd_epi32(acc[j], _mm512_cvtepi8_epi32(_mm512_castsi512_si128(
                                 _mm512_maskz_loadu_epi8((__mmask64)m, pp[j][t] + c))), wv);
            }
        }
        int j = 0;
        if (!vc->ztab)
            for (; j + 4 <= P; j += 4)
                ei_vq_store4(vc, &vq[g], m, acc[j], acc[j + 1], acc[j + 2], acc[j + 3], y + (int64_t)j * C + c, C);
        for (; j < P; j++)
            ei_vq_store(vc, &vq[g], m, acc[j], y + (int64_t)j * C + c, z ? z + (int64_t)j * C + c : NULL);
    }
}

__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void dw8_rows_vnni(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    const int8_t *pp[DW8_PIX][DW8_MAX_TAPS];
    const int32_t *bias = (const int32_t *)a->bias;
    int C = a->c, taps = a->kh * a->kw, ng = (C + 15) / 16;
    ei_vq16 *vq = (ei_vq16 *)(((uintptr_t)scratch + ((int64_t)C * 4 + 63) / 64 * 64 + 63) & ~(uintptr_t)63);
    int left = 0;
    for (int g = 0; g < ng; g++)
        left |= ei_vq16_prepare(&vq[g], bias + 16 * g, NULL, a->mult + 16 * g, a->shift + 16 * g, EI_MIN(16, C - 16 * g));
    ei_vqc vc;
    ei_vqc_prepare(&vc, a->ztab, a->zp_y, a->lo, a->hi, left);
    /* output columns [oxa, oxb) read every kernel column inside the image: there a tap's
     * pointer advances by a fixed step per column (0 on rows of padding) */
    int oxa = (a->pl + a->sw - 1) / a->sw, lastx = a->w - 1 - (a->kw - 1) * a->dw + a->pl;
    int oxb = lastx < 0 ? 0 : EI_MIN(a->ow, lastx / a->sw + 1);
    if (oxa > a->ow) oxa = a->ow;
    if (oxb < oxa) oxb = oxa;
    int64_t step[DW8_MAX_TAPS];
    for (int64_t row = r0; row < r1; row++) {
        int b = (int)(row / a->oh), oy = (int)(row % a->oh);
        for (int t = 0; t < taps; t++) {
            int iy = oy * a->sh - a->pt + (t / a->kw) * a->dh;
            step[t] = iy >= 0 && iy < a->h ? (int64_t)a->sw * C : 0;
        }
        for (int ox = 0; ox < a->ow; ox += DW8_PIX) {
            int P = EI_MIN(DW8_PIX, a->ow - ox);
            for (int j = 0; j < P; j++) {
                int x = ox + j;
                if (x > oxa && x < oxb) {           /* x - 1 is interior too: step from it */
                    const int8_t *const *prev = pp[(j + DW8_PIX - 1) % DW8_PIX];
                    for (int t = 0; t < taps; t++) pp[j][t] = prev[t] + step[t];
                } else {
                    dw8_tap_rows(a, b, oy, x, pp[j]);
                }
            }
            int64_t opix = ((int64_t)b * a->oh + oy) * a->ow + ox;
            int8_t *y = (int8_t *)a->y + opix * C;
            const int8_t *z = a->z ? (const int8_t *)a->z + opix * C : NULL;
            switch (P) {
            case 4: dw8_block_vnni(a, pp, 4, vq, &vc, y, z); break;
            case 3: dw8_block_vnni(a, pp, 3, vq, &vc, y, z); break;
            case 2: dw8_block_vnni(a, pp, 2, vq, &vc, y, z); break;
            default: dw8_block_vnni(a, pp, 1, vq, &vc, y, z); break;
            }
        }
    }
}

static int has_vbmi(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vl"); }
    return v && has_vnni();
}
#endif

/* ---- int8 NHWC depthwise with vpdpbusd on quads of kernel columns (AVX-512 VNNI + VBMI) ----
 *
 * vpdpbusd sums four u8 x s8 products per int32 lane: lane c gets taps (kx, kx+1, kx+2, kx+3)
 * of one kernel row for channel c when the four input bytes x + 128 of those taps sit in the
 * lane. Such a "quad" of 16 channels is four 16-byte loads and one vpermb (4 x 16 -> 16 x 4),
 * and depends only on the input row and the output column: it is built once per input row and
 * used by every output row whose window covers that row (kh / sh of them). Per output pixel
 * and 16 channels a 3x3 stride-1 layer then costs 3 vpdpbusd and one quad row's build where
 * the per-tap kernel (dw8_rows_vnni) widened and multiplied nine taps; 5x5: 10 and one build
 * (two quads a row, the last three taps with zero weights) against 25. Measured (CPU time,
 * loaded machine, per-tap -> quads): 112x112x32 3x3 237 -> 198 us, 14x14x576 5x5 126 -> 103,
 * 56x56x72 5x5 stride 2 74 -> 60, 48x48x8 3x3 36 -> 22; 3x3 stride 2 146 -> 170 then (since
 * then faster: see pick). The requantization epilogue is now about 40% of the time (a cheap one
 * measured 237 -> 157 us on the first).
 * With VBMI2 most quads come from other quads by byte shifts instead (dwq_build_of: a chain
 * across the row, or every 4 / sw-th quad from scratch and one vpshrdd for each between), and
 * layers whose window of quad rows is far bigger than L1 run in bands of output rows (dwq_band).
 * The u8 offset: sum_taps (x + 128) w = sum x w + 128 sum w; the second term comes off the
 * bias. Padding reads zp_x as everywhere. Exactly the integers of the per-tap kernels.
 *
 * Scratch after the vq16 constants: packed weights [kh][nq][group] (64 bytes: 16 channels x 4
 * taps, zero past kw), 16 corrections a group, and a ring of kh quad rows
 * [quad column j][group] (DWQ_COLS), slot iy mod kh (dilation 1: the kh rows of one window fall in distinct slots). */
#define DWQ_OK(a) ((a)->is_int8 && !(a)->nchw && (a)->dh == 1 && (a)->dw == 1 && (a)->kh * (a)->kw <= DW8_MAX_TAPS \
                   && ((a)->kw <= 4 || 4 % (a)->sw == 0))
/* quad columns of one input row: quad j holds input columns j sw - pl .. j sw - pl + 3, and
 * output column ox reads quads ox + k 4 / sw (k < nq): a 5x5 layer's second quad of ox is the
 * first of ox + 4 / sw, built once (one quad per (output column, k) built 5x5 rows twice) */
#define DWQ_COLS(a) ((a)->ow + ((a)->kw + 3) / 4 * 4 / (a)->sw - 4 / (a)->sw)
/* 8 channels, kw <= 4 (one quad): a quad is 32 bytes, stored 32 apart, so that one 64-byte load
 * holds two neighbouring pixels' quads and one vector computes and requantizes both (16
 * contiguous outputs; the constants and weights are replicated in lanes 8..15). One pixel a
 * vector left half the lanes and one epilogue per 8 outputs idle: a detector's 320x320x8
 * layer ran 2x slower than the fp32 kernel. */
#define DWQ_PAIRS(a) ((a)->c == 8 && (a)->kw <= 4)

/* output rows a pass of dwq_rows computes channel group by channel group (a band): where the
 * quad rows of one output row's window far exceed L1, each output row read them all from L2
 * (207 KB a row at 14x14x576 5x5); a band's quad rows of one group stay in L1 across its
 * output rows. Up to 512 KB of quad rows, 16 output rows. Measured (1 thread, min us, loaded
 * machine, one row a pass -> bands): 14x14x576 5x5 69.5 -> 62.9, 7x7x576 5x5 20.0 -> 18.9;
 * windows of 43-86 KB gained nothing (14x14x240 5x5 26.6 -> 26.5) or lost, since a band's
 * freshly built quad rows left L1 before their first use (112x112x32 3x3 97 -> 112, 112x112x96
 * 3x3 stride 2 108 -> 122 with bands above 32 KB). One thread only: at 2, each thread's run of 3-4
 * rows of a 7x7x576 layer measured 12.7-12.9 -> 13.2-13.4 us with bands. */
#define DWQ_MAX_BAND 16
static int dwq_band(const ei_dw_args *a) {
    const int64_t rowb = (int64_t)DWQ_COLS(a) * ((a->c + 15) / 16) * 64;
    if (DWQ_PAIRS(a) || a->kh * rowb <= 96 * 1024 || a->sh > 4 || a->threads > 1) return 1;
    return (int)EI_MAX(1, EI_MIN(EI_MIN(DWQ_MAX_BAND, a->oh), ((1 << 19) / rowb - a->kh) / a->sh + 1));
}
/* quad rows in the ring: a band's windows, every row in its own slot */
#define DWQ_SLOTS(a) ((dwq_band(a) - 1) * (a)->sh + (a)->kh)

static int64_t dwq_bytes(const ei_dw_args *a) {
#if defined(__x86_64__)
    if (!DWQ_OK(a)) return 0;
    int64_t ng = (a->c + 15) / 16, nq = (a->kw + 3) / 4;
    return (int64_t)a->kh * nq * ng * 64 + ng * 64 + ((int64_t)DWQ_SLOTS(a) * DWQ_COLS(a) + 1) * ng * 64 + 64;
#else
    (void)a;
    return 0;
#endif
}

#if defined(__x86_64__)
/* the constants of dwq_rows: ng ei_vq16 (the bias less 128 sum w), then the packed weights,
 * then the corrections */
int64_t dwq_consts_bytes(const ei_dw_args *a) {
    int64_t ng = (a->c + 15) / 16, nq = (a->kw + 3) / 4;
    return ng * (int64_t)sizeof(ei_vq16) + (int64_t)a->kh * nq * ng * 64 + ng * 64;
}

__attribute__((target("avx512f,avx512bw")))
static void dwq_consts(const ei_dw_args *a, char *out) {
    const int C = a->c, ng = (C + 15) / 16, nq = (a->kw + 3) / 4, kh = a->kh, kw = a->kw;
    const int16_t *w = (const int16_t *)a->wt;
    ei_vq16 *vq = (ei_vq16 *)out;
    int8_t *wq = (int8_t *)(vq + ng);                                   /* [ky][q][g][16][4] */
    int32_t *corr = (int32_t *)(wq + (int64_t)kh * nq * ng * 64);       /* [g][16] */
    memset(wq, 0, (size_t)kh * nq * ng * 64);
    memset(corr, 0, (size_t)ng * 64);
    for (int ky = 0; ky < kh; ky++)
        for (int kx = 0; kx < kw; kx++) {
            const int16_t *wr = w + (int64_t)(ky * kw + kx) * C;
            int8_t *d = wq + ((int64_t)ky * nq + kx / 4) * ng * 64 + kx % 4;
            for (int c = 0; c < C; c++) {
                d[(int64_t)(c / 16) * 64 + 4 * (c % 16)] = (int8_t)wr[c];
                corr[c] -= 128 * wr[c];
            }
        }
    if (DWQ_PAIRS(a)) {         /* lanes 8..15: channels 0..7 again (the next pixel's) */
        int32_t b[16], cr[16], q[16], sh[16];
        for (int l = 0; l < 16; l++) {
            b[l] = ((const int32_t *)a->bias)[l % 8]; cr[l] = corr[l % 8];
            q[l] = a->mult[l % 8]; sh[l] = a->shift[l % 8];
        }
        for (int ky = 0; ky < kh; ky++) memcpy(wq + (int64_t)ky * 64 + 32, wq + (int64_t)ky * 64, 32);
        ei_vq16_prepare(&vq[0], b, cr, q, sh, 16);
        return;
    }
    for (int g = 0; g < ng; g++)
        ei_vq16_prepare(&vq[g], (const int32_t *)a->bias + 16 * g, corr + 16 * g, a->mult + 16 * g,
                        a->shift + 16 * g, EI_MIN(16, C - 16 * g));
}
#endif

/* bytes of ei_dw_prepare's constants for these args (0: the kernel makes none) */
EI_API int64_t ei_dw_consts_size(const ei_dw_args *a) {
#if defined(__x86_64__)
    if (DWQ_OK(a) && has_vbmi()) return dwq_consts_bytes(a) + dws_consts_bytes(a);
#endif
    (void)a;
    return 0;
}

/* out (64-byte aligned, ei_dw_consts_size bytes): the constants, from the args' weights, bias,
 * mult and shift; set a->consts = out afterwards (without them the kernel makes them per call) */
EI_API void ei_dw_prepare(const ei_dw_args *a, void *out) {
#if defined(__x86_64__)
    if (ei_dw_consts_size(a) > 0) dwq_consts(a, (char *)out);
    if (ei_dw_consts_size(a) > 0 && dws_fits(a)) dws_prepare(a, (char *)out + dwq_consts_bytes(a));
#else
    (void)a; (void)out;
#endif
}

#if defined(__x86_64__)
/* two or three vectors of the same 16 channels (P of them), no residual: as ei_vq_store4 */
__attribute__((target("avx512f,avx512bw"))) static inline __attribute__((always_inline))
void dwq_store_n(const ei_vqc *c, const ei_vq16 *k, __mmask16 m, __m512i a0, __m512i a1, __m512i a2, int P,
                 int8_t *y, ptrdiff_t ys) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i p = ei_vq_pack4(c, ei_vq_mbqm(a0, k, c->left), ei_vq_mbqm(a1, k, c->left),
                            P > 2 ? ei_vq_mbqm(a2, k, c->left) : zero, zero);
    __m128i q[3] = { _mm512_castsi512_si128(p), _mm512_extracti32x4_epi32(p, 1), _mm512_extracti32x4_epi32(p, 2) };
    for (int i = 0; i < P; i++) {
        if (m == 0xFFFF) _mm_storeu_si128((__m128i *)(y + i * ys), q[i]);
        else _mm512_mask_storeu_epi8(y + i * ys, (__mmask64)m, _mm512_castsi128_si512(q[i]));
    }
}

/* the accumulators of P <= 4 output columns (quads at off, off + qb, ..) of one group; the
 * weights from wv (hoist) or wg */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline __attribute__((always_inline))
void dwq_acc(__m512i *acc, __m512i bias, const __m512i *wv, int hoist, const int8_t *wg, const uint8_t *const *slot,
             int64_t off, int64_t qb, int qstep, int ng, const int kh, const int nq, const int P) {
    acc[0] = acc[1] = acc[2] = acc[3] = bias;
    for (int ky = 0; ky < kh; ky++)
        for (int k = 0; k < nq; k++) {
            __m512i w = hoist ? wv[ky * nq + k] : _mm512_loadu_si512(wg + ((int64_t)ky * nq + k) * ng * 64);
            const uint8_t *qp = slot[ky] + off + (int64_t)k * qstep * qb;
            for (int j = 0; j < P; j++) acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_load_si512(qp + j * qb), w);
        }
}

/* one output row of one channel group g, four columns at a time. The weights and epilogue
 * constants are copied to locals first: the int8 stores may alias anything, so read through
 * pointers they were loaded again for every four columns */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline __attribute__((always_inline))
void dwq_group_row(const ei_dw_args *a, const ei_vqc *vcp, const ei_vq16 *kp, const int8_t *wq,
                   const uint8_t *const *slot, int64_t opix0, int g, __mmask16 m, int64_t qb, int qstep, int ng,
                   const int kh, const int nq) {
    const ei_vqc vc = *vcp;
    const ei_vq16 k = *kp;
    const int C = a->c, nt = kh * nq, hoist = nt <= 16;
    const int8_t *wg = wq + 64 * g;
    __m512i wv[16];
    if (hoist)
        for (int i = 0; i < nt; i++) wv[i] = _mm512_loadu_si512(wg + (int64_t)i * ng * 64);
    const uint8_t *sl[DW8_MAX_TAPS];
    for (int ky = 0; ky < kh; ky++) sl[ky] = slot[ky];
    const int ow = a->ow;
    int8_t *const y0 = (int8_t *)a->y + opix0 * C + 16 * g;
    const int8_t *const z0 = a->z ? (const int8_t *)a->z + opix0 * C + 16 * g : NULL;
    for (int ox = 0; ox < ow; ox += 4) {
        const int P = EI_MIN(4, ow - ox);
        int8_t *y = y0 + (int64_t)ox * C;
        const int8_t *z = z0 ? z0 + (int64_t)ox * C : NULL;
        const int64_t off = (int64_t)ox * qb + 64 * g;
        __m512i acc[4];
        if (P == 4) dwq_acc(acc, k.bias, wv, hoist, wg, sl, off, qb, qstep, ng, kh, nq, 4);
        else dwq_acc(acc, k.bias, wv, hoist, wg, sl, off, qb, qstep, ng, kh, nq, P);
        if (P == 4 && !vc.ztab) {
            ei_vq_store4(&vc, &k, m, acc[0], acc[1], acc[2], acc[3], y, C);
            continue;
        }
        if (P > 1 && !vc.ztab) {        /* a row's last 2 or 3 columns (7 and 14 wide) */
            dwq_store_n(&vc, &k, m, acc[0], acc[1], acc[2], P, y, C);
            continue;
        }
        for (int j = 0; j < P; j++) ei_vq_store(&vc, &k, m, acc[j], y + (int64_t)j * C, z ? z + (int64_t)j * C : NULL);
    }
}

static int has_vbmi2(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vbmi2"); }
    return v && has_vbmi();
}

/* the u8 bytes of input column ix, channels c.. (16, or the tail's under m) of a quad row:
 * the padding where ix falls outside the row (lim 0: a padding row) */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __attribute__((always_inline))
__m128i dwq_col(const int8_t *xrow, const int8_t *pad, int ix, unsigned lim, int C, int64_t c, __mmask16 m,
                const int masked) {
    const int8_t *p = (unsigned)ix < lim ? xrow + (int64_t)ix * C + c : pad + c;
    return masked ? _mm_maskz_loadu_epi8(m, p) : _mm_loadu_si128((const __m128i *)p);
}

/* one channel group's quads across a quad row (stride 1 or 2), each from the one before: lane c
 * of quad j holds bytes x[j sw - pl + t][c], t = 0..3, so quad j + 1 is quad j shifted right by
 * sw bytes with the sw new columns' bytes in on top: one vpshrdd of the quad and those bytes
 * (zero-extended, stride 1; two columns' bytes paired by a vpermb, stride 2). Three or four
 * ops a quad against four loads, three inserts, a vpermb and a xor for a quad from scratch.
 * Quads j0 .. j1 - 1 read only columns inside the row: one pointer, no checks. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2"))) static inline __attribute__((always_inline))
void dwq_shift_group(const ei_dw_args *a, const int8_t *xrow, const int8_t *pad, uint8_t *d, int nj, int j0, int j1,
                     int64_t qb, int64_t c, __mmask16 m, __m512i vpair, const int masked) {
    const int C = a->c, sw = a->sw;
    const unsigned lim = xrow ? (unsigned)a->w : 0;
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    __m512i v = _mm512_setzero_si512();
    /* quad j's new columns start at ix = j sw - pl + 4 - sw; the prologue (j = -1, and -2, -3
     * at stride 1) shifts in the first quad's other columns */
    /* macros, not functions: the second column's bytes p1 are loaded at stride 2 only (at stride
     * 1 they may lie past the input's end) */
#define DWQ_NEW(p0, p1) do {                                                                                 \
        if (sw == 1) v = _mm512_shrdi_epi32(v, _mm512_cvtepu8_epi32(p0), 8);                                  \
        else v = _mm512_shrdi_epi32(                                                                          \
            v, _mm512_permutexvar_epi8(vpair, _mm512_inserti32x4(_mm512_castsi128_si512(p0), (p1), 1)), 16);  \
    } while (0)
#define DWQ_CHECKED(j) do {                                                                                  \
        const int ix_ = (j) * sw - a->pl + 4 - sw;                                                            \
        DWQ_NEW(dwq_col(xrow, pad, ix_, lim, C, c, m, masked), dwq_col(xrow, pad, ix_ + 1, lim, C, c, m, masked)); \
    } while (0)
    for (int j = -4 / sw + 1; j < 0; j++) DWQ_CHECKED(j);
    int j = 0;
    for (; j < j0; j++) {
        DWQ_CHECKED(j);
        _mm512_store_si512(d + j * qb, _mm512_xor_si512(v, k80));
    }
    const int8_t *p = j < j1 ? xrow + ((int64_t)j * sw - a->pl + 4 - sw) * C + c : pad;
    for (; j < j1; j++, p += sw * C) {
        if (C == 16 && sw == 2)         /* the two columns are 32 contiguous bytes: one load */
            v = _mm512_shrdi_epi32(
                v, _mm512_permutexvar_epi8(vpair, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p))), 16);
        else if (masked) DWQ_NEW(_mm_maskz_loadu_epi8(m, p), _mm_maskz_loadu_epi8(m, p + C));
        else DWQ_NEW(_mm_loadu_si128((const __m128i *)p), _mm_loadu_si128((const __m128i *)(p + C)));
        _mm512_store_si512(d + j * qb, _mm512_xor_si512(v, k80));
    }
    for (; j < nj; j++) {
        DWQ_CHECKED(j);
        _mm512_store_si512(d + j * qb, _mm512_xor_si512(v, k80));
    }
#undef DWQ_CHECKED
#undef DWQ_NEW
}

/* a quad row (the ring layout [j][group][64]) by shifts: stride 1 or 2, 16 channels or more */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2"))) __attribute__((noinline))
static void dwq_build_shift(const ei_dw_args *a, const int8_t *xrow, const int8_t *pad, uint8_t *q, int nj,
                            int64_t qb) {
    const int full = a->c / 16;
    const __mmask16 tm = (__mmask16)((1u << (a->c - 16 * full)) - 1);
    static const uint8_t pi[64] = {     /* lane c: bytes c and 16 + c (the two columns) in its low half */
#define P2(c) c, 16 + c, 0, 0
        P2(0), P2(1), P2(2), P2(3), P2(4), P2(5), P2(6), P2(7), P2(8), P2(9), P2(10), P2(11), P2(12), P2(13), P2(14), P2(15)
#undef P2
    };
    const __m512i vpair = _mm512_loadu_si512(pi);
    /* quads [j0, j1) read columns j sw - pl + 4 - sw .. j sw - pl + 3, all inside the row */
    const int sw = a->sw, off = 4 - sw - a->pl;
    const int last = a->w - 3 + a->pl;                  /* quad j reads inside the row while j sw < last */
    int j0 = off >= 0 ? 0 : (-off + sw - 1) / sw, j1 = xrow ? EI_MIN(nj, last / sw + (last % sw > 0)) : 0;
    if (!xrow || j1 < j0) j0 = j1 = nj;
    for (int g = 0; g < full; g++) dwq_shift_group(a, xrow, pad, q + 64 * g, nj, j0, j1, qb, 16 * g, 0xFFFF, vpair, 0);
    if (tm) dwq_shift_group(a, xrow, pad, q + 64 * full, nj, j0, j1, qb, 16 * full, tm, vpair, 1);
}

static const uint8_t dwq_perm[64] = {   /* byte 4c + k of a quad = byte 16k + c of four 16-byte loads */
#define P4(c) c, 16 + c, 32 + c, 48 + c
    P4(0), P4(1), P4(2), P4(3), P4(4), P4(5), P4(6), P4(7), P4(8), P4(9), P4(10), P4(11), P4(12), P4(13), P4(14), P4(15)
#undef P4
};
static const uint8_t dwq_perm8[64] = {  /* 8 channels: byte 4c + k = byte 8k + c of one 32-byte load */
#define P4(c) c, 8 + c, 16 + c, 24 + c
    P4(0), P4(1), P4(2), P4(3), P4(4), P4(5), P4(6), P4(7)
#undef P4
};

/* the from-scratch quads of input columns ix0 .. ix0 + 3, every channel group, at d (groups 64
 * apart; pixel pairs: 32 bytes): four 16-byte loads (the padding's outside the row) and one
 * vpermb a group; 8 or 16 channels inside the row: the four taps are 4 C contiguous bytes, one
 * load */
/* (C, w, pairs: the args' channels, width and DWQ_PAIRS, as values: read through the args they
 * were loaded again after every quad's stores, which may alias them: 160x160x8 3x3 116 -> 154 us) */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"))) static inline __attribute__((always_inline))
void dwq_quad(const int C, const int w, const int pairs, const int8_t *xrow, const int8_t *pad, int ix0, uint8_t *d) {
    const int full = C / 16;
    const __mmask16 tm = (__mmask16)((1u << (C - 16 * full)) - 1);
    const __m512i k80 = _mm512_set1_epi8((char)0x80), vperm = _mm512_loadu_si512(dwq_perm);
    const int8_t *src[4];
    if (xrow && ix0 >= 0 && ix0 + 3 < w) {
        src[0] = xrow + (int64_t)ix0 * C;
        if (C == 16 || C == 8) {
            const __m512i v = _mm512_xor_si512(
                _mm512_permutexvar_epi8(C == 16 ? vperm : _mm512_loadu_si512(dwq_perm8),
                                        _mm512_maskz_loadu_epi8(C == 16 ? ~0ULL : 0xFFFFFFFFULL, src[0])), k80);
            if (pairs) _mm256_storeu_si256((__m256i *)d, _mm512_castsi512_si256(v));
            else _mm512_store_si512(d, v);
            return;
        }
        src[1] = src[0] + C; src[2] = src[1] + C; src[3] = src[2] + C;
    } else {
        for (int t = 0; t < 4; t++) {
            int ix = ix0 + t;
            src[t] = (xrow && ix >= 0 && ix < w) ? xrow + (int64_t)ix * C : pad;
        }
    }
    for (int g = 0; g < full; g++) {
        int c = 16 * g;
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(src[0] + c)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(src[1] + c)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(src[2] + c)), 2);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(src[3] + c)), 3);
        _mm512_store_si512(d + 64 * g, _mm512_xor_si512(_mm512_permutexvar_epi8(vperm, v), k80));
    }
    if (tm) {
        int c = 16 * full;
        __m512i v = _mm512_castsi128_si512(_mm_maskz_loadu_epi8(tm, src[0] + c));
        v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(tm, src[1] + c), 1);
        v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(tm, src[2] + c), 2);
        v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(tm, src[3] + c), 3);
        v = _mm512_xor_si512(_mm512_permutexvar_epi8(vperm, v), k80);
        if (pairs) _mm256_storeu_si256((__m256i *)d, _mm512_castsi512_si256(v));
        else _mm512_store_si512(d + 64 * full, v);
    }
}

/* a quad row from scratch (dwq_quad for each quad column), in a function of its own: inlined in
 * dwq_rows_impl the 8 / 16-channel one-load quads rebuilt their constants and reloaded their
 * flags from the stack at every quad (160x160x8 3x3: 128-133 us against 117-123 before the
 * shift builds); here the interior quads' loop keeps them in registers */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"))) __attribute__((noinline))
static void dwq_build_scratch(const int C, const int w, const int pairs, const int sw, const int pl, const int8_t *xrow,
                              const int8_t *pad, uint8_t *q, int nj, int64_t qb) {
    int j = 0;
    if (xrow && (C == 8 || C == 16)) {
        const __m512i k80 = _mm512_set1_epi8((char)0x80), vp = _mm512_loadu_si512(C == 16 ? dwq_perm : dwq_perm8);
        const __mmask64 lm = C == 16 ? ~0ULL : 0xFFFFFFFFULL;
        /* the quads left of the first interior one (padding), then the interior ones */
        for (; j < nj && j * sw - pl < 0; j++) dwq_quad(C, w, pairs, xrow, pad, j * sw - pl, q + (int64_t)j * qb);
        for (; j < nj && j * sw - pl + 3 < w; j++) {
            const __m512i v = _mm512_xor_si512(
                _mm512_permutexvar_epi8(vp, _mm512_maskz_loadu_epi8(lm, xrow + (int64_t)(j * sw - pl) * C)), k80);
            uint8_t *d = q + (int64_t)j * qb;
            if (pairs) _mm256_storeu_si256((__m256i *)d, _mm512_castsi512_si256(v));
            else _mm512_store_si512(d, v);
        }
    }
    for (; j < nj; j++) dwq_quad(C, w, pairs, xrow, pad, j * sw - pl, q + (int64_t)j * qb);
}

/* a quad row from every (4 / sw)-th quad: quad j + 4 / sw holds the four input columns after
 * quad j's, built from scratch; the quads between, j + k, are bytes k sw .. 3 of quad j's lanes
 * then bytes 0 .. k sw - 1 of quad j + 4 / sw's: one vpshrdd each. At stride 1 two ops a quad
 * (a from-scratch build and three shifts per four quads), three at stride 2, against five,
 * and no chain of shifts from quad to quad. tmp: the last from-scratch quad where it lies past
 * the row's nj. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2"))) __attribute__((noinline))
static void dwq_build_blocks(const ei_dw_args *a, const int8_t *xrow, const int8_t *pad, uint8_t *q, uint8_t *tmp,
                             int nj, int64_t qb) {
    const int sw = a->sw, S = 4 / sw, ng = (a->c + 15) / 16, C = a->c, w = a->w, pl = a->pl, pairs = DWQ_PAIRS(a);
    dwq_quad(C, w, pairs, xrow, pad, -pl, q);
    for (int j = 0; j + 1 < nj; j += S) {
        const int jn = j + S, kend = EI_MIN(S, nj - j);
        uint8_t *dn = jn < nj ? q + (int64_t)jn * qb : tmp;
        const uint8_t *d0 = q + (int64_t)j * qb;
        dwq_quad(C, w, pairs, xrow, pad, jn * sw - pl, dn);
        for (int g = 0; g < ng; g++) {
            const __m512i va = _mm512_load_si512(d0 + 64 * g), vb = _mm512_load_si512(dn + 64 * g);
            uint8_t *d = q + (int64_t)(j + 1) * qb + 64 * g;
            if (sw == 2) {
                _mm512_store_si512(d, _mm512_shrdi_epi32(va, vb, 16));
                continue;
            }
            _mm512_store_si512(d, _mm512_shrdi_epi32(va, vb, 8));
            if (kend > 2) _mm512_store_si512(d + qb, _mm512_shrdi_epi32(va, vb, 16));
            if (kend > 3) _mm512_store_si512(d + 2 * qb, _mm512_shrdi_epi32(va, vb, 24));
        }
    }
}

/* how dwq_rows builds its quad rows: from scratch; by a chain of shifts (dwq_build_shift); from
 * every 4 / sw-th quad (dwq_build_blocks). The shifts need VBMI2, stride 1 or 2 and 16 channels
 * or more (8: pixel pairs) */
enum { DWQ_SCRATCH, DWQ_CHAIN, DWQ_BLOCKS };

/* the build that measured fastest for these args (1 thread, loaded machine, min us, scratch ->
 * chain -> blocks): blocks at stride 1 above 32 channels (28x28x88 3x3 23.3 -> 21.6 -> 20.9,
 * 56x56x144 3x3 137 -> 124 -> 121, 14x14x144 5x5 15.6 -> 15.3 -> 14.8, 7x7x576 5x5 19.4 ->
 * 19.5 -> 19.2); the chain for 3x3 and rows 14 or more wide otherwise (112x112x16 3x3 stride 2
 * 21.0 -> 17.1 -> 26.2, 112x112x32 3x3 123 -> 102 -> 112, 56x56x72 stride 2 26.3 -> 23.2 ->
 * 26.6: the blocks' one 64-byte load at 16 channels straddles cache lines, and at stride 2
 * they save one op in four); from scratch for 7-wide 5x5 at stride 2 (vpshrdd runs on port 0
 * beside the ten vpdpbusd a pixel) */
static int dwq_build_of(const ei_dw_args *a) {
    if (!has_vbmi2() || DWQ_PAIRS(a) || (a->sw != 1 && a->sw != 2)) return DWQ_SCRATCH;
    if (a->sw == 1 && a->c > 32) return DWQ_BLOCKS;
    return a->kw <= 4 || a->ow >= 14 ? DWQ_CHAIN : DWQ_SCRATCH;
}

/* output rows [r0, r1), every channel group of 16, quad rows built as build says; one_row: bands
 * of one row, compiled apart (the band loop's unknown bounds had cost 14x14x288 5x5 stride 2
 * 6.6 -> 7.0 us at 2 threads) */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi"))) static inline __attribute__((always_inline))
void dwq_rows_impl(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch, int build, const int one_row) {
    const int C = a->c, ng = (C + 15) / 16, full = C / 16, nq = (a->kw + 3) / 4, kh = a->kh;
    const int W = a->w, SW = a->sw, PL = a->pl;         /* the from-scratch builds read these per quad */
    const __mmask16 tm = (__mmask16)((1u << (C - 16 * full)) - 1);
    char *base = (char *)(((uintptr_t)scratch + ((int64_t)C * 4 + 63) / 64 * 64 + 63) & ~(uintptr_t)63);
    const char *cs = (const char *)a->consts;
    if (!cs) {
        dwq_consts(a, base);
        cs = base;
    }
    const ei_vq16 *vq = (const ei_vq16 *)cs;
    const int8_t *wq = (const int8_t *)(vq + ng);
    uint8_t *ring = (uint8_t *)base + dwq_consts_bytes(a);             /* [slot][j][g][64] */
    const int pairs = DWQ_PAIRS(a);
    const int64_t qb = pairs ? 32 : (int64_t)ng * 64;                  /* bytes per quad column */
    const int nj = DWQ_COLS(a), qstep = nq > 1 ? 4 / a->sw : 0;       /* quad k of ox: column ox + k qstep */
    const int64_t qrow = (int64_t)nj * qb;
    int left = ei_rq_flag(a->shift, C);
    ei_vqc vc;
    ei_vqc_prepare(&vc, a->ztab, a->zp_y, a->lo, a->hi, left);
    const int band = one_row ? 1 : dwq_band(a), ns = (band - 1) * a->sh + kh;
    /* variable-length: fixed arrays for 16 rows of 64 taps (8 KB of stack a call) had made
     * 14x14x288 5x5 stride 2 at 2 threads 6.6 -> 7.5 us */
    int64_t tag[ns];                                    /* (b, iy) built in each slot; -1: none */
    for (int i = 0; i < ns; i++) tag[i] = -1;
    const int8_t *pad = (const int8_t *)a->pad;
    const uint8_t *slots[band * kh];                    /* [output row of the band][ky] */
    int64_t opixs[band];
    for (int64_t row0 = r0, nb; row0 < r1; row0 += nb) {
        nb = EI_MIN(EI_MIN((int64_t)band, r1 - row0), (row0 / a->oh + 1) * a->oh - row0);   /* one image */
        /* the band's quad rows (those not in the ring yet), then its output rows */
        for (int bi = 0; bi < nb; bi++) {
            const int64_t row = row0 + bi;
            int b = (int)(row / a->oh), oy = (int)(row % a->oh);
            const uint8_t **slot = slots + bi * kh;
            for (int ky = 0; ky < kh; ky++) {
                int iy = oy * a->sh - a->pt + ky;
                int s = ((iy % ns) + ns) % ns;
                /* the input row a slot holds: b * h + iy; every padding row is the same (all zp_x) */
                int64_t key = (iy < 0 || iy >= a->h) ? -2 : (int64_t)b * a->h + iy;
                uint8_t *q = ring + s * qrow;
                slot[ky] = q;
                if (tag[s] == key) continue;
                tag[s] = key;
                const int8_t *xrow = (iy >= 0 && iy < a->h) ? (const int8_t *)a->x + ((int64_t)b * a->h + iy) * a->w * C : NULL;
                if (build == DWQ_BLOCKS) {
                    dwq_build_blocks(a, xrow, pad, q, ring + ns * qrow, nj, qb);
                    continue;
                }
                if (build == DWQ_CHAIN) {
                    dwq_build_shift(a, xrow, pad, q, nj, qb);
                    continue;
                }
                dwq_build_scratch(C, W, pairs, SW, PL, xrow, pad, q, nj, qb);
            }
            opixs[bi] = ((int64_t)b * a->oh + oy) * a->ow;
        }
        for (int bi = 0; bi < nb && pairs; bi++) {      /* (a band of one row) */
            const uint8_t *const *slot = slots + bi * kh;
            const int64_t opix0 = opixs[bi];
            for (int ox = 0; ox < a->ow; ox += 8) {
                const int nv = (EI_MIN(8, a->ow - ox) + 1) / 2;
                __m512i acc[4] = { vq[0].bias, vq[0].bias, vq[0].bias, vq[0].bias };
                for (int ky = 0; ky < kh; ky++) {
                    __m512i wv = _mm512_loadu_si512(wq + (int64_t)ky * 64);
                    const uint8_t *qp = slot[ky] + (int64_t)ox * 32;
                    for (int j = 0; j < nv; j++) {          /* a last odd column: its half only */
                        __mmask64 lm = ox + 2 * j + 1 < a->ow ? ~0ULL : 0xFFFFFFFFULL;
                        acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_maskz_loadu_epi8(lm, qp + 64 * j), wv);
                    }
                }
                int8_t *y = (int8_t *)a->y + (opix0 + ox) * 8;
                const int8_t *z = a->z ? (const int8_t *)a->z + (opix0 + ox) * 8 : NULL;
                if (nv == 4 && ox + 7 < a->ow && !vc.ztab) {       /* 8 whole columns: one 64-byte store */
                    ei_vq_store4(&vc, &vq[0], (__mmask16)0xFFFF, acc[0], acc[1], acc[2], acc[3], y, 16);
                    continue;
                }
                for (int j = 0; j < nv; j++)
                    ei_vq_store(&vc, &vq[0], ox + 2 * j + 1 < a->ow ? (__mmask16)0xFFFF : (__mmask16)0xFF, acc[j],
                                y + 16 * j, z ? z + 16 * j : NULL);
            }
        }
        if (pairs) continue;
        /* one group's quads of the band's rows across the rows, then the next group's: those stay
         * in L1 (the whole ring of a 240-channel 5x5 layer does not), and quad k = 1 of one block
         * of four columns is quad k = 0 of the next */
        for (int g = 0; g < ng; g++) {
            const __mmask16 m = g < full ? (__mmask16)0xFFFF : tm;
            /* MobileNet's 3x3 and 5x5 with constant trip counts: unrolled, the addresses constant
             * offsets from the kh row pointers */
            for (int bi = 0; bi < nb; bi++) {
                const uint8_t *const *slot = slots + bi * kh;
                const int64_t opix0 = opixs[bi];
                if (kh == 3 && nq == 1) dwq_group_row(a, &vc, &vq[g], wq, slot, opix0, g, m, qb, qstep, ng, 3, 1);
                else if (kh == 5 && nq == 2) dwq_group_row(a, &vc, &vq[g], wq, slot, opix0, g, m, qb, qstep, ng, 5, 2);
                else dwq_group_row(a, &vc, &vq[g], wq, slot, opix0, g, m, qb, qstep, ng, kh, nq);
            }
        }
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
static void dwq_rows_one(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch, int build) {
    dwq_rows_impl(a, r0, r1, scratch, build, 1);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
static void dwq_rows_band(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch, int build) {
    dwq_rows_impl(a, r0, r1, scratch, build, 0);
}
static void dwq_run(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch, int build) {
    if (dwq_band(a) == 1) dwq_rows_one(a, r0, r1, scratch, build);
    else dwq_rows_band(a, r0, r1, scratch, build);
}
static void dwq_rows(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    dwq_run(a, r0, r1, scratch, DWQ_SCRATCH);
}
static void dwq_rows_shift(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    dwq_run(a, r0, r1, scratch, dwq_build_of(a));
}
/* the self-test's: each shift build wherever it can run */
static void dwq_rows_chain(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    dwq_run(a, r0, r1, scratch, DWQ_PAIRS(a) || a->sw > 2 ? DWQ_SCRATCH : DWQ_CHAIN);
}
static void dwq_rows_blocks(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    dwq_run(a, r0, r1, scratch, DWQ_PAIRS(a) || a->sw > 2 ? DWQ_SCRATCH : DWQ_BLOCKS);
}
#endif

#if defined(__aarch64__)
static void dw8_rows_neon(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    (void)scratch;
    const int8_t *ptr[DW8_MAX_TAPS];
    const int16_t *w = (const int16_t *)a->wt;
    const int32_t *bias = (const int32_t *)a->bias;
    int C = a->c, taps = a->kh * a->kw;
    ei_rq rq = { NULL, a->mult, a->shift, a->ztab, a->zp_y, a->lo, a->hi };
    for (int64_t row = r0; row < r1; row++) {
        int b = (int)(row / a->oh), oy = (int)(row % a->oh);
        for (int ox = 0; ox < a->ow; ox++) {
            int64_t opix = ((int64_t)b * a->oh + oy) * a->ow + ox;
            int8_t *y = (int8_t *)a->y + opix * C;
            const int8_t *z = a->z ? (const int8_t *)a->z + opix * C : NULL;
            dw8_tap_rows(a, b, oy, ox, ptr);
            int c = 0;
            for (; c + 16 <= C; c += 16) {
                int32x4_t s0 = vld1q_s32(bias + c), s1 = vld1q_s32(bias + c + 4);
                int32x4_t s2 = vld1q_s32(bias + c + 8), s3 = vld1q_s32(bias + c + 12);
                const int16_t *wc = w + c;
                for (int t = 0; t < taps; t++, wc += C) {
                    int8x16_t xv = vld1q_s8(ptr[t] + c);
                    int16x8_t xl = vmovl_s8(vget_low_s8(xv)), xh = vmovl_high_s8(xv);
                    int16x8_t w0 = vld1q_s16(wc), w1 = vld1q_s16(wc + 8);
                    s0 = vmlal_s16(s0, vget_low_s16(xl), vget_low_s16(w0)); s1 = vmlal_high_s16(s1, xl, w0);
                    s2 = vmlal_s16(s2, vget_low_s16(xh), vget_low_s16(w1)); s3 = vmlal_high_s16(s3, xh, w1);
                }
                int8x8_t q0 = ei_rq8_neon(&rq, s0, s1, c, z ? z + c : NULL, 1);
                int8x8_t q1 = ei_rq8_neon(&rq, s2, s3, c + 8, z ? z + c + 8 : NULL, 1);
                vst1q_s8(y + c, vcombine_s8(q0, q1));
            }
            for (; c + 8 <= C; c += 8) {
                int32x4_t s0 = vld1q_s32(bias + c), s1 = vld1q_s32(bias + c + 4);
                const int16_t *wc = w + c;
                for (int t = 0; t < taps; t++, wc += C) {
                    int16x8_t xl = vmovl_s8(vld1_s8(ptr[t] + c)), w0 = vld1q_s16(wc);
                    s0 = vmlal_s16(s0, vget_low_s16(xl), vget_low_s16(w0)); s1 = vmlal_high_s16(s1, xl, w0);
                }
                vst1_s8(y + c, ei_rq8_neon(&rq, s0, s1, c, z ? z + c : NULL, 1));
            }
            dw8_tail(a, ptr, c, y, z);
        }
    }
}
#endif

typedef void (*rows_fn)(const ei_dw_args *, int64_t, int64_t, char *);
typedef struct { const ei_dw_args *a; rows_fn fn; int64_t rows; int slots; int64_t per; } dw_ctx;

/* rows [r0, r1), handed out by the pool in chunks; scratch: the running thread slot's */
static void dw_range(void *vctx, int64_t r0, int64_t r1) {
    const dw_ctx *c = (const dw_ctx *)vctx;
    const ei_dw_args *a = c->a;
    c->fn(a, r0, r1, (char *)a->scratch + (int64_t)ei_pool_slot() * c->per);
    /* the fused activation over the rows just stored (contiguous), unless the kernel applied it */
    if (a->is_int8 && a->lut && !(c->fn == dws_rows && dws_lut_in_regs(a))) {
        int64_t row = (int64_t)a->ow * (a->nchw ? 1 : a->c);
        ei_lut_inplace(a->lut, (int8_t *)a->y + r0 * row, (r1 - r0) * row, 1, 0);
    }
}

static rows_fn pick(const ei_dw_args *a) {
    int dw8 = a->is_int8 && !a->nchw && a->kh * a->kw <= DW8_MAX_TAPS;
#if defined(__x86_64__)
    /* quads pay off where a built quad row serves several output rows (stride 1 or 2), replaces
     * many taps (5x5) or is one load (8 or 16 channels); 3x3 stride 2 on 72 channels measured
     * 37 -> 31-33 us (loaded machine) since the compute loop keeps one channel group's quads in
     * L1 (it had measured slower than tap by tap before) */
    /* small images (made at prepare: needs the constants) */
    if (dw8 && DWQ_OK(a) && has_vbmi() && dws_fits(a) && a->consts) return dws_rows;
    if (dw8 && DWQ_OK(a) && has_vbmi() && dws_pairs_fits(a) && a->consts) return dws_pairs_rows;
    if (dw8 && DWQ_OK(a) && has_vbmi() && (a->sw <= 2 || a->kw > 3 || a->c == 8 || a->c == 16))
        return dwq_build_of(a) != DWQ_SCRATCH ? dwq_rows_shift : dwq_rows;
    if (dw8 && has_vnni()) return dw8_rows_vnni;
    if (ei_has(EI_AVX2)) return dw8 ? dw8_rows_avx2 : dw_rows_avx2;
#elif defined(__aarch64__)
    if (ei_has(EI_NEON)) return dw8 ? dw8_rows_neon : dw_rows_neon;
#endif
    (void)dw8;
    return dw_rows_scalar;
}

/* the kernel ei_depthwise runs for these args under the current ISA mask (plan notes) */
EI_API const char *ei_dw_kernel_name(const ei_dw_args *a) {
    rows_fn f = pick(a);
#if defined(__x86_64__)
    if (f == dws_rows) return "AVX-512 VNNI vpdpbusd on 4-tap quads, small image";
    if (f == dws_pairs_rows) return "AVX-512 VNNI vpdpbusd on pixel pairs' quads in registers";
    if (f == dwq_rows) return "AVX-512 VNNI vpdpbusd on 4-tap quads";
    if (f == dwq_rows_shift) return "AVX-512 VNNI vpdpbusd on 4-tap quads (VBMI2 shifts)";
    if (f == dw8_rows_vnni) return "AVX-512 VNNI vpdpwssd";
    if (f == dw8_rows_avx2 || f == dw_rows_avx2) return "AVX2";
#elif defined(__aarch64__)
    if (f == dw8_rows_neon || f == dw_rows_neon) return "NEON";
#endif
    (void)f;
    return "scalar";
}

EI_API void ei_depthwise(const ei_dw_args *a) {
    EI_CHECK(a->n >= 0 && a->c >= 1 && a->h >= 0 && a->w >= 0 && a->oh >= 0 && a->ow >= 0);
    EI_CHECK(a->kh >= 1 && a->kw >= 1 && a->sh >= 1 && a->sw >= 1 && a->dh >= 1 && a->dw >= 1);
    EI_CHECK(a->pt >= 0 && a->pl >= 0);
    EI_CHECK(!a->is_int8 || (a->zp_x >= -128 && a->zp_x <= 127 && a->zp_y >= -128 && a->zp_y <= 127
                             && a->lo <= a->hi && a->mult != NULL && a->shift != NULL));
    EI_CHECK(a->x != NULL && a->y != NULL && a->wt != NULL);
    dw_ctx c = { a, pick(a), (int64_t)a->n * (a->nchw ? a->c : 1) * a->oh, 1, ei_dw_scratch(a) };
    int t = a->threads < 1 ? 1 : a->threads;
    /* at least ~2^16 taps per slot in int8 graphs (all native: the pool's workers are awake);
     * 2^20 in fp32 ones, where the layer sits between BLAS calls whose spinning threads hold
     * the other cores, and waking ours costs more (measured on MobileNet-v2, 2 threads) */
    int64_t work = (int64_t)a->n * a->c * a->oh * a->ow * a->kh * a->kw;
    c.slots = (int)EI_MIN(EI_MIN((int64_t)t, c.rows), EI_MAX(work >> (a->is_int8 ? 16 : 20), (int64_t)1));
    if (c.slots < 1) return;
    /* int8: chunks of at least a kernel height of output rows, since each chunk builds its
     * own input rows (quads, tap pointers): 1-row chunks of a 7- or 14-row layer rebuilt kh rows
     * per output row and 2 threads barely beat 1 (MobileNetV3, measured). Few rows a slot
     * (MobileNetV3's 5x5 layers at 14x14 and 7x7, its stride-2 ones to 14x14): one equal run of
     * rows a slot. Chunks of kh rows left one slot a third chunk (14 rows, 5x5), and splitting
     * such layers by channel blocks instead ran no faster on two threads than on one (both
     * threads read every input pixel's lines and wrote into the same output lines): 14x14x144
     * 5x5 17.6 -> 12.9 us, 14x14x240 26.5 -> 21.8, 28x28x96 stride 2 14.8 -> 10.1 (2 threads,
     * best of 40, loaded machine). Otherwise two chunks a slot (the pool still evens out a late
     * worker), not four: each chunk rebuilds kh - 1 input rows, and a worker's chunk reads input
     * rows the other core wrote: 28x28x88 3x3 17.3 -> 13.9 us, 56x56x72 stride 2 17.7 -> 14.8,
     * 112x112x16 stride 2 14.5 -> 13.6 (2 threads; one chunk a slot measured no better) */
    int64_t grain = 1;
    if (a->is_int8 && !a->nchw)
        grain = c.rows < 4 * a->kh * c.slots ? (c.rows + c.slots - 1) / c.slots
                                             : EI_MAX((int64_t)a->kh, (c.rows + 2 * c.slots - 1) / (2 * c.slots));
    ei_parallel_for(c.rows, grain, dw_range, &c, c.slots);
}

/* ---- self-test: the SIMD instance vs the scalar one, bit for bit ---- */

#if defined(__x86_64__)
/* depthwise_small.c's kernels where they fit (small images; 8-channel pixel pairs), on the
 * constants ei_dw_prepare makes, rows in two runs [0, cut) and [cut, rows) (a fused table
 * through dw_range): 1 when it differs from want */
static int st_small(ei_dw_args *a, const int8_t *want, int8_t *y, int64_t ys, int64_t cut) {
    if (!DWQ_OK(a) || !has_vbmi() || !(dws_fits(a) || dws_pairs_fits(a))) return 0;
    int64_t cs = ei_dw_consts_size(a), rows = (int64_t)a->n * a->oh;
    char *consts = aligned_alloc(64, (size_t)(cs + 63) / 64 * 64);
    ei_dw_prepare(a, consts);
    a->consts = consts;
    void *y_old = a->y;
    a->y = y;
    memset(y, 0, ys);
    dw_ctx c = { a, dws_fits(a) ? dws_rows : dws_pairs_rows, rows, 1, ei_dw_scratch(a) };
    dw_range(&c, 0, cut);
    dw_range(&c, cut, rows);
    a->consts = NULL;
    a->y = y_old;
    free(consts);
    return memcmp(want, y, ys) != 0;
}

/* the quad kernels (from scratch and by shifts) on int8 NHWC geometries of their own: kernels
 * 3, 5 and 7 wide, strides 1 and 2, the channel counts whose quad builds differ (8: pixel
 * pairs; 16: one load; 24, 72: a masked tail group; 576; random), rows 1 to 20 wide and
 * padding 0 to k - 1 a side, whole and in two runs of rows; against the scalar instance */
static int st_quads(void) {
    static const int cs[] = {8, 16, 24, 72, 576, 0};
    int fails = 0;
    if (!has_vbmi()) return 0;
    for (int trial = 0; trial < 96; trial++) {
        ei_dw_args a;
        memset(&a, 0, sizeof a);
        a.is_int8 = 1; a.n = 1 + (trial % 7 == 3);
        a.c = cs[trial % 6] ? cs[trial % 6] : 1 + (int)(st_rand() % 100);
        a.kh = a.kw = 3 + 2 * (int)(st_rand() % 3);
        a.sh = a.sw = 1 + (trial / 6) % 2; a.dh = a.dw = 1;
        a.pt = (int)(st_rand() % a.kh); a.pl = (int)(st_rand() % a.kw);
        a.h = a.kh + (int)(st_rand() % 6); a.w = 1 + (int)(st_rand() % 20);
        if (a.w + 2 * a.pl < a.kw) a.w = a.kw;
        int pr = (int)(st_rand() % a.kw), pb = (int)(st_rand() % a.kh);          /* right / bottom */
        a.oh = (a.h + a.pt + pb - a.kh) / a.sh + 1; a.ow = (a.w + a.pl + pr - a.kw) / a.sw + 1;
        a.zp_x = (int32_t)(st_rand() % 256) - 128; a.zp_y = (int32_t)(st_rand() % 256) - 128;
        a.lo = -128 + (trial % 3 == 1) * 30; a.hi = 127; a.threads = 1;
        int taps = a.kh * a.kw, C = a.c;
        int64_t xs = (int64_t)a.n * C * a.h * a.w, ys = (int64_t)a.n * C * a.oh * a.ow;
        int8_t *x = malloc(xs), *z = malloc(ys), *y0 = malloc(ys), *y1 = malloc(ys), *pad = malloc(C);
        int16_t *wt = malloc((size_t)taps * C * 2);
        int32_t *bias = malloc(4 * (size_t)C), *mult = malloc(4 * (size_t)C), *shift = malloc(4 * (size_t)C), ztab[256];
        for (int i = 0; i < 256; i++) ztab[i] = (int32_t)(st_rand() % 300) - 150;
        for (int64_t i = 0; i < xs; i++) x[i] = (int8_t)st_rand();
        for (int64_t i = 0; i < ys; i++) z[i] = (int8_t)st_rand();
        for (int i = 0; i < taps * C; i++) wt[i] = (int16_t)((int32_t)(st_rand() % 255) - 127);
        for (int i = 0; i < C; i++) {
            bias[i] = (int32_t)(st_rand() % 40000) - 20000; pad[i] = (int8_t)a.zp_x;
            mult[i] = (int32_t)((1u << 30) + (st_rand() & ((1u << 30) - 1)));
            shift[i] = -(int32_t)(7 + st_rand() % 6);
        }
        a.x = x; a.wt = wt; a.bias = bias; a.mult = mult; a.shift = shift; a.pad = pad;
        if (trial % 4 == 2) { a.z = z; a.ztab = ztab; }
        char *scr = malloc((size_t)ei_dw_scratch(&a));
        a.scratch = scr;
        int64_t rows = (int64_t)a.n * a.oh, cut = (int64_t)(st_rand() % (uint32_t)rows);
        memset(y0, 0, ys);
        a.y = y0;
        dw_rows_scalar(&a, 0, rows, scr);
        static const rows_fn fns[4] = { dwq_rows, dwq_rows_shift, dwq_rows_chain, dwq_rows_blocks };
        for (int f = 0; f < (has_vbmi2() ? 4 : 1); f++) {
            if (!DWQ_OK(&a)) break;
            memset(y1, 0, ys);
            a.y = y1;
            fns[f](&a, 0, cut, scr);
            fns[f](&a, cut, rows, scr);
            if (memcmp(y0, y1, ys) != 0) fails++;
        }
        fails += st_small(&a, y0, y1, ys, cut);
        free(x); free(z); free(y0); free(y1); free(pad); free(wt); free(bias); free(mult); free(shift); free(scr);
    }
    return fails;
}
#endif

EI_API int ei_selftest_depthwise(void) {
    int fails = 0;
    st_state = 4242;
    if (!ei_rq_simd()) return 0;
#if defined(__x86_64__)
    fails += st_quads();
#endif
    for (int trial = 0; trial < 48; trial++) {
        ei_dw_args a;
        memset(&a, 0, sizeof a);
        a.is_int8 = trial & 1; a.nchw = (trial >> 1) & 1;
        a.n = 1 + (int)(st_rand() % 2); a.c = 1 + (int)(st_rand() % 41);
        a.h = 1 + (int)(st_rand() % 12); a.w = 1 + (int)(st_rand() % 12);
        a.kh = a.kw = (trial % 3 == 2) ? 5 : 3;
        a.sh = a.sw = 1 + (int)(st_rand() % 2); a.dh = a.dw = 1 + (trial % 6 == 1);
        a.pt = a.pl = a.kh / 2;
        a.oh = (a.h + 2 * a.pt - a.dh * (a.kh - 1) - 1) / a.sh + 1; a.ow = (a.w + 2 * a.pl - a.dw * (a.kw - 1) - 1) / a.sw + 1;
        if (a.h + 2 * a.pt - a.dh * (a.kh - 1) < 1 || a.w + 2 * a.pl - a.dw * (a.kw - 1) < 1) continue;
        static const int acts[] = {ACT_NONE, ACT_RELU, ACT_CLIP, ACT_HARDSWISH, ACT_HARDSIGMOID, ACT_LEAKYRELU};
        a.act = acts[st_rand() % 6]; a.a0 = 0.0f; a.a1 = 6.0f;
        if (a.act == ACT_HARDSIGMOID) { a.a0 = 0.2f; a.a1 = 0.5f; }
        if (a.act == ACT_LEAKYRELU) a.a0 = 0.1f;
        a.zp_x = (int32_t)(st_rand() % 256) - 128; a.zp_y = (int32_t)(st_rand() % 256) - 128;
        a.lo = -128 + (trial % 3 == 1) * 40; a.hi = 127 - (trial % 4) * 10;
        a.threads = 1 + trial % 3;
        int taps = a.kh * a.kw, C = a.c;
        int64_t xs = (int64_t)a.n * C * a.h * a.w, ys = (int64_t)a.n * C * a.oh * a.ow;
        size_t es = a.is_int8 ? 1 : 4;
        char *x = malloc(xs * es), *z = malloc(ys * es), *y0 = malloc(ys * es), *y1 = malloc(ys * es);
        char *wt = malloc((size_t)taps * C * 4), *bias = malloc((size_t)C * 4), *pad = malloc((size_t)C * 4);
        int32_t *mult = malloc(4 * C), *shift = malloc(4 * C), ztab[256];
        for (int i = 0; i < 256; i++) ztab[i] = (int32_t)(st_rand() % 300) - 150;
        for (int64_t i = 0; i < xs; i++) {
            if (a.is_int8) ((int8_t *)x)[i] = (int8_t)st_rand();
            else ((float *)x)[i] = (float)((int32_t)(st_rand() % 20001) - 10000) * 1e-3f;
        }
        for (int64_t i = 0; i < ys; i++) {
            if (a.is_int8) ((int8_t *)z)[i] = (int8_t)st_rand();
            else ((float *)z)[i] = (float)((int32_t)(st_rand() % 2001) - 1000) * 1e-3f;
        }
        for (int i = 0; i < taps * C; i++) {
            if (a.is_int8) ((int16_t *)wt)[i] = (int16_t)((int32_t)(st_rand() % 255) - 127);
            else ((float *)wt)[i] = (float)((int32_t)(st_rand() % 2001) - 1000) * 1e-3f;
        }
        for (int i = 0; i < C; i++) {
            if (a.is_int8) { ((int32_t *)bias)[i] = (int32_t)(st_rand() % 40000) - 20000; ((int8_t *)pad)[i] = (int8_t)a.zp_x; }
            else { ((float *)bias)[i] = (float)((int32_t)(st_rand() % 2001) - 1000) * 1e-3f; ((float *)pad)[i] = 0.0f; }
            mult[i] = (int32_t)((1u << 30) + (st_rand() & ((1u << 30) - 1)));
            shift[i] = -(int32_t)(5 + st_rand() % 10);
            if (trial % 8 == 5) shift[i] = (int32_t)(st_rand() % 34) - 31;    /* 31 right .. 2 left */
        }
        a.x = x; a.wt = wt; a.bias = (trial % 5 == 4 && !a.is_int8) ? NULL : bias; a.mult = mult; a.shift = shift;
        a.pad = pad;
        if (trial % 4 >= 2) { a.z = z; if (a.is_int8) a.ztab = ztab; }
        char *scr = malloc((size_t)(ei_dw_scratch(&a) * a.threads));
        a.scratch = scr;
        memset(y0, 0, ys * es); memset(y1, 0, ys * es);
        a.y = y0;
        dw_ctx c = { &a, dw_rows_scalar, (int64_t)a.n * (a.nchw ? a.c : 1) * a.oh, 1, ei_dw_scratch(&a) };
        dw_range(&c, 0, c.rows);
        /* a fused activation table (int8, every other trial of four): the reference applies it
         * in a plain loop, the kernels through ei_lut_inplace (VBMI / NEON / scalar) */
        int8_t lut[256];
        for (int i = 0; i < 256; i++) lut[i] = (int8_t)((i * 73 + 41 + trial) & 0xFF);
        if (a.is_int8 && (trial / 4) % 2 == 1) {
            for (int64_t i = 0; i < ys; i++) ((int8_t *)y0)[i] = lut[(uint8_t)((int8_t *)y0)[i]];
            a.lut = lut;
        }
        a.y = y1;
        ei_depthwise(&a);
        if (memcmp(y0, y1, ys * es) != 0) fails++;
#if defined(__x86_64__)
        if (a.is_int8 && !a.nchw && ei_has(EI_AVX2)) {     /* the AVX2 kernel too where VNNI took over */
            memset(y1, 0, ys * es);
            dw_ctx c2 = { &a, dw8_rows_avx2, c.rows, 1, c.per };
            dw_range(&c2, 0, c2.rows);
            if (memcmp(y0, y1, ys * es) != 0) fails++;
        }
        /* both AVX-512 kernels, whichever the dispatch picks for this geometry */
        if (a.is_int8 && !a.nchw && has_vnni()) {
            memset(y1, 0, ys * es);
            dw_ctx c3 = { &a, dw8_rows_vnni, c.rows, 1, c.per };
            dw_range(&c3, 0, c3.rows);
            if (memcmp(y0, y1, ys * es) != 0) fails++;
        }
        if (DWQ_OK(&a) && has_vbmi()) {
            memset(y1, 0, ys * es);
            dw_ctx c4 = { &a, dwq_rows, c.rows, 1, c.per };
            dw_range(&c4, 0, c4.rows);
            if (memcmp(y0, y1, ys * es) != 0) fails++;
        }
        if (DWQ_OK(&a) && has_vbmi2()) {
            memset(y1, 0, ys * es);
            dw_ctx c5 = { &a, dwq_rows_shift, c.rows, 1, c.per };
            dw_range(&c5, 0, c5.rows);
            if (memcmp(y0, y1, ys * es) != 0) fails++;
        }
        if (a.is_int8) fails += st_small(&a, (const int8_t *)y0, (int8_t *)y1, ys, c.rows / 2);
#endif
        free(x); free(z); free(y0); free(y1); free(wt); free(bias); free(pad); free(mult); free(shift); free(scr);
    }
    return fails;
}
