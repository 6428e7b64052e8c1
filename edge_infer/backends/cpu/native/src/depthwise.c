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
 *
 * Here: those bodies, the per-tap int8 NHWC kernels (AVX2, AVX-512 VNNI, NEON) and the
 * dispatch (pick, ei_depthwise: threads and chunks). The int8 NHWC kernels on quads of kernel
 * columns (AVX-512 VNNI + VBMI) and their constants (ei_dw_prepare): depthwise_quad.c; small
 * images: depthwise_small.c; the self-test: depthwise_selftest.c.
 */
#pragma GCC optimize("fp-contract=off")
#include "ei_int8.h"
#include "ei_activations.h"
#include "depthwise.h"
#include "ei_lut.h"

#if defined(__x86_64__)
#define DW_VQ_BYTES ((int64_t)sizeof(ei_vq16))
#else
#define DW_VQ_BYTES 0
#endif

/* NHWC int8: the accumulators of one pixel, and (AVX-512) the epilogue constants of every 16
 * channels; a multiple of 64 bytes (each thread slot's part stays 64-byte aligned) */

EI_API int64_t ei_dw_scratch(const ei_dw_args *a) {
    if (!a->is_int8) return 64;
    if (a->nchw) return ((int64_t)a->ow * 16 + 127) / 64 * 64;
    return ((int64_t)a->c * 4 + 63) / 64 * 64 + 64 + ((int64_t)a->c + 15) / 16 * DW_VQ_BYTES + ei_dwq_bytes(a)
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
void ei_dw_rows_scalar(const ei_dw_args *a, int64_t r0, int64_t r1, char *s) { dw_rows(a, r0, r1, s, 0); }

#if defined(__x86_64__)
__attribute__((target("avx2,fma")))
static void dw_rows_avx2(const ei_dw_args *a, int64_t r0, int64_t r1, char *s) { dw_rows(a, r0, r1, s, 1); }
#elif defined(__aarch64__)
static void dw_rows_neon(const ei_dw_args *a, int64_t r0, int64_t r1, char *s) { dw_rows(a, r0, r1, s, 1); }
#endif

/* int8 NHWC with explicit SIMD: a pixel's accumulators for 16 channels stay in registers over
 * all taps (initialized with the folded bias), then requantize and store; same integers as
 * dw_row_nhwc + ei_rq_run. */
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
void ei_dw8_rows_avx2(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
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
int ei_dw_has_vnni(void) {
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
void ei_dw8_rows_vnni(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
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

int ei_dw_has_vbmi(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vl"); }
    return v && ei_dw_has_vnni();
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

/* rows [r0, r1), handed out by the pool in chunks; scratch: the running thread slot's */
void ei_dw_range(void *vctx, int64_t r0, int64_t r1) {
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
    if (dw8 && DWQ_OK(a) && ei_dw_has_vbmi() && dws_fits(a) && a->consts) return dws_rows;
    if (dw8 && DWQ_OK(a) && ei_dw_has_vbmi() && dws_pairs_fits(a) && a->consts) return dws_pairs_rows;
    if (dw8 && DWQ_OK(a) && ei_dw_has_vbmi() && (a->sw <= 2 || a->kw > 3 || a->c == 8 || a->c == 16))
        return ei_dwq_build_of(a) != DWQ_SCRATCH ? ei_dwq_rows_shift : ei_dwq_rows;
    if (dw8 && ei_dw_has_vnni()) return ei_dw8_rows_vnni;
    if (ei_has(EI_AVX2)) return dw8 ? ei_dw8_rows_avx2 : dw_rows_avx2;
#elif defined(__aarch64__)
    if (ei_has(EI_NEON)) return dw8 ? dw8_rows_neon : dw_rows_neon;
#endif
    (void)dw8;
    return ei_dw_rows_scalar;
}

/* the kernel ei_depthwise runs for these args under the current ISA mask (plan notes) */
EI_API const char *ei_dw_kernel_name(const ei_dw_args *a) {
    rows_fn f = pick(a);
#if defined(__x86_64__)
    if (f == dws_rows) return "AVX-512 VNNI vpdpbusd on 4-tap quads, small image";
    if (f == dws_pairs_rows) return "AVX-512 VNNI vpdpbusd on pixel pairs' quads in registers";
    if (f == ei_dwq_rows) return "AVX-512 VNNI vpdpbusd on 4-tap quads";
    if (f == ei_dwq_rows_shift) return "AVX-512 VNNI vpdpbusd on 4-tap quads (VBMI2 shifts)";
    if (f == ei_dw8_rows_vnni) return "AVX-512 VNNI vpdpwssd";
    if (f == ei_dw8_rows_avx2 || f == dw_rows_avx2) return "AVX2";
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
    ei_parallel_for(c.rows, grain, ei_dw_range, &c, c.slots);
}
