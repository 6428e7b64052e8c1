/* fp32 NHWC depthwise convolution (multiplier 1, any kernel, stride, dilation, padding) with
 * fused multiply-adds, bias, residual and activation (Relu, Clip, HardSwish, HardSigmoid,
 * LeakyRelu) in registers: AVX-512 (16 channels a vector), AVX2 (8), NEON (4), scalar (the
 * channels no vector covers, and every channel under a cleared ISA mask). The body is
 * depthwise_f32_body.h, compiled once per ISA (it undefines the DWF_ macros at its end).
 *
 * depthwise.c's fp32 kernel adds the tap products one tap at a time through memory in the
 * numpy kernel's order (no FMA, bit-exact with it); this one keeps four output pixels'
 * accumulators in registers over all taps and reuses each tap's weight vector for the four
 * (MobileNet-v2, 1 thread, loaded machine: the 17 depthwise layers went from 2.7 to 1.2 ms). Its results
 * differ from the numpy kernel's by rounding only (FMA, bias added first); the self-test checks
 * every instance against a double-precision reference. Eight interior pixels at a time, in
 * segments of the row whose kh input rows fit ~24 KB, every channel vector over a segment before
 * the next; the border pixels four channel vectors at a time, each block over the row's border
 * pixels before the next (the 19 MobileNet-v2/V3 depthwise shapes, 1 thread, one-process A/B
 * against four pixels, whole rows and one vector per border pixel: 0.925x in all, 7x7x576 5x5
 * 0.77x, 14x14x144-240 5x5 0.8x, 112x112x96 stride 2 0.86x, none slower beyond noise). */
#include "depthwise.h"
#include "selftest_rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

/* ---- scalar ---- */
#define DWF_NAME(f) dwf_##f##_scalar
#define DWF_ATTR
#define DWF_V 1
#define DWF_T float
#define DWF_LOAD(p) (*(p))
#define DWF_STORE(p, v) (*(p) = (v))
#define DWF_SET(c) (c)
#define DWF_FMA(a, b, c) ((a) * (b) + (c))
#define DWF_ADD(a, b) ((a) + (b))
#define DWF_MUL(a, b) ((a) * (b))
#define DWF_MAX(c, v) ((c) > (v) ? (c) : (v))
#define DWF_MIN(c, v) ((c) < (v) ? (c) : (v))
#include "depthwise_f32_body.h"

#if defined(__x86_64__)
/* ---- AVX2 + FMA ---- */
#define DWF_NAME(f) dwf_##f##_avx2
#define DWF_ATTR __attribute__((target("avx2,fma")))
#define DWF_V 8
#define DWF_T __m256
#define DWF_LOAD(p) _mm256_loadu_ps(p)
#define DWF_STORE(p, v) _mm256_storeu_ps((p), (v))
#define DWF_SET(c) _mm256_set1_ps(c)
#define DWF_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define DWF_ADD(a, b) _mm256_add_ps((a), (b))
#define DWF_MUL(a, b) _mm256_mul_ps((a), (b))
#define DWF_MAX(c, v) _mm256_max_ps((c), (v))
#define DWF_MIN(c, v) _mm256_min_ps((c), (v))
#include "depthwise_f32_body.h"

/* ---- AVX-512 ---- */
#define DWF_NAME(f) dwf_##f##_avx512
#define DWF_ATTR __attribute__((target("avx512f")))
#define DWF_V 16
#define DWF_T __m512
#define DWF_LOAD(p) _mm512_loadu_ps(p)
#define DWF_STORE(p, v) _mm512_storeu_ps((p), (v))
#define DWF_SET(c) _mm512_set1_ps(c)
#define DWF_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define DWF_ADD(a, b) _mm512_add_ps((a), (b))
#define DWF_MUL(a, b) _mm512_mul_ps((a), (b))
#define DWF_MAX(c, v) _mm512_max_ps((c), (v))
#define DWF_MIN(c, v) _mm512_min_ps((c), (v))
#include "depthwise_f32_body.h"
#endif

#if defined(__aarch64__)
/* ---- NEON ---- (vmaxq/vminq propagate NaN, as a clamp of NaN should) */
#define DWF_NAME(f) dwf_##f##_neon
#define DWF_ATTR
#define DWF_V 4
#define DWF_T float32x4_t
#define DWF_LOAD(p) vld1q_f32(p)
#define DWF_STORE(p, v) vst1q_f32((p), (v))
#define DWF_SET(c) vdupq_n_f32(c)
#define DWF_FMA(a, b, c) vfmaq_f32((c), (a), (b))
#define DWF_ADD(a, b) vaddq_f32((a), (b))
#define DWF_MUL(a, b) vmulq_f32((a), (b))
#define DWF_MAX(c, v) vmaxq_f32((c), (v))
#define DWF_MIN(c, v) vminq_f32((c), (v))
#include "depthwise_f32_body.h"
#endif

/* rows [r0, r1): the widest vectors over as many channels as they cover, then narrower ones */
static void dwf_rows(const ei_dw_args *a, int64_t r0, int64_t r1) {
    int c = 0, C = a->c;
#if defined(__x86_64__)
    if (ei_has(EI_AVX512) && C >= 16) { dwf_rows_avx512(a, r0, r1, 0, C / 16 * 16); c = C / 16 * 16; }
    if (ei_has(EI_AVX2) && C - c >= 8) { int e = c + (C - c) / 8 * 8; dwf_rows_avx2(a, r0, r1, c, e); c = e; }
#elif defined(__aarch64__)
    if (ei_has(EI_NEON) && C >= 4) { dwf_rows_neon(a, r0, r1, 0, C / 4 * 4); c = C / 4 * 4; }
#endif
    if (c < C) dwf_rows_scalar(a, r0, r1, c, C);
}

static void dwf_range(void *ctx, int64_t r0, int64_t r1) { dwf_rows((const ei_dw_args *)ctx, r0, r1); }

/* a->is_int8 == 0 and a->nchw == 0 (Python routes only those here) */
EI_API void ei_depthwise_f32(const ei_dw_args *a) {
    int64_t rows = (int64_t)a->n * a->oh;
    int64_t work = rows * a->ow * a->c * a->kh * a->kw;
    int t = a->threads < 1 ? 1 : a->threads;
    /* ~2^17 multiply-adds per thread at least: smaller layers are not worth a hand-off */
    int slots = (int)EI_MIN(EI_MIN((int64_t)t, rows), EI_MAX(work >> 17, (int64_t)1));
    if (rows <= 0 || a->c <= 0) return;
    ei_parallel_for(rows, 1, dwf_range, (void *)a, slots);
}

/* the widest vectors the kernel uses under the current ISA mask */
EI_API const char *ei_depthwise_f32_isa(void) {
#if defined(__x86_64__)
    if (ei_has(EI_AVX512)) return "AVX-512";
    if (ei_has(EI_AVX2)) return "AVX2";
#elif defined(__aarch64__)
    if (ei_has(EI_NEON)) return "NEON";
#endif
    return "scalar";
}

/* ---- self-test: random geometries (strides, dilations, pads, borders, channel tails,
 * every activation, residual, bias or none) against a double-precision reference ---- */

static float st_act(double v, const ei_dw_args *a) {
    switch (a->act) {
    case ACT_RELU: return v > 0 ? (float)v : 0.0f;
    case ACT_CLIP: return (float)(v < a->a0 ? a->a0 : v > a->a1 ? a->a1 : v);
    case ACT_HARDSWISH: { double t = v / 6 + 0.5; t = t < 0 ? 0 : t > 1 ? 1 : t; return (float)(t * v); }
    case ACT_HARDSIGMOID: { double t = v * a->a0 + a->a1; return (float)(t < 0 ? 0 : t > 1 ? 1 : t); }
    case ACT_LEAKYRELU: return (float)(v >= 0 ? v : v * a->a0);
    default: return (float)v;
    }
}

EI_API int ei_selftest_depthwise_f32(void) {
    int fails = 0;
    st_state = 9090;
    for (int trial = 0; trial < 90; trial++) {
        ei_dw_args a;
        memset(&a, 0, sizeof a);
        a.n = st_int(1, 2);
        /* every third of the last 30: four or more vectors of channels (the border pixels'
         * blocks of four) and rows wide enough for groups of eight and four interior pixels */
        int wide = trial >= 60 && trial % 3 != 0;
        a.c = trial % 3 == 0 ? st_int(1, 70) : wide ? st_int(60, 150) : 8 * st_int(1, 6);
        a.h = st_int(1, 14); a.w = wide ? st_int(9, 40) : st_int(1, 17);
        a.kh = trial % 4 == 3 ? 5 : 3; a.kw = trial % 5 == 4 ? 1 : a.kh;
        a.sh = st_int(1, 2); a.sw = st_int(1, 2); a.dh = a.dw = 1 + (trial % 7 == 6);
        a.pt = st_int(0, 2); a.pl = st_int(0, 2);
        int pb = st_int(0, 2), pr = st_int(0, 2);
        a.oh = (a.h + a.pt + pb - (a.kh - 1) * a.dh - 1) / a.sh + 1;
        a.ow = (a.w + a.pl + pr - (a.kw - 1) * a.dw - 1) / a.sw + 1;
        if (a.oh <= 0 || a.ow <= 0 || a.h + a.pt + pb < (a.kh - 1) * a.dh + 1 || a.w + a.pl + pr < (a.kw - 1) * a.dw + 1)
            continue;
        a.act = trial % 6;
        a.a0 = a.act == ACT_CLIP ? -0.3f : a.act == ACT_HARDSIGMOID ? 0.2f : a.act == ACT_LEAKYRELU ? (trial % 2 ? 0.1f : 3.0f) : 0.0f;
        a.a1 = a.act == ACT_CLIP ? 0.4f : a.act == ACT_HARDSIGMOID ? 0.5f : 0.0f;
        a.threads = 1 + trial % 3;
        int C = a.c, taps = a.kh * a.kw;
        int64_t nx = (int64_t)a.n * a.h * a.w * C, ny = (int64_t)a.n * a.oh * a.ow * C;
        float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * taps * C), *bias = malloc(sizeof(float) * C);
        float *z = malloc(sizeof(float) * ny), *y = malloc(sizeof(float) * ny);
        for (int64_t i = 0; i < nx; i++) x[i] = st_unif();
        for (int64_t i = 0; i < (int64_t)taps * C; i++) w[i] = st_unif();
        for (int i = 0; i < C; i++) bias[i] = st_unif();
        for (int64_t i = 0; i < ny; i++) z[i] = st_unif();
        a.x = x; a.wt = w; a.y = y;
        a.bias = trial % 3 == 1 ? NULL : bias;
        a.z = trial % 2 ? z : NULL;
        ei_depthwise_f32(&a);
        for (int64_t q = 0; q < ny && fails < 1000; q++) {
            int64_t ch = q % C, pix = q / C, b = pix / ((int64_t)a.oh * a.ow), oy = pix / a.ow % a.oh, ox = pix % a.ow;
            double s = a.bias ? bias[ch] : 0.0, mag = fabs(s);
            for (int ky = 0; ky < a.kh; ky++)
                for (int kx = 0; kx < a.kw; kx++) {
                    int64_t iy = oy * a.sh - a.pt + ky * a.dh, ix = ox * a.sw - a.pl + kx * a.dw;
                    if (iy < 0 || iy >= a.h || ix < 0 || ix >= a.w) continue;
                    double t = (double)x[((b * a.h + iy) * a.w + ix) * C + ch] * w[(ky * a.kw + kx) * C + ch];
                    s += t;
                    mag += fabs(t);
                }
            if (a.z) { s += z[q]; mag += fabs(z[q]); }
            float ref = st_act(s, &a);
            if (fabs(y[q] - ref) > 1e-5 * (mag + 1.0) * (a.act == ACT_LEAKYRELU ? 3.0 : 1.0)) fails++;
        }
        free(x); free(w); free(bias); free(z); free(y);
    }
    return fails;
}
