/* The int8 graph's boundaries and pools: QuantizeLinear / DequantizeLinear per tensor
 * (float32 <-> int8 / uint8), int8 global average / max pooling and int8 2-D max pooling.
 *
 * Bit-exact with the numpy kernels (kernels/int8_qdq.py, int8_pool.py, pool.py):
 * quantize is float32 x / scale, rounded half to even, + zero point, clamped, as numpy's
 * divide, rint, add, clip (a NaN input gives 0 here; numpy's cast of NaN is undefined);
 * dequantize is ((float)x - zp) * scale, two float32 operations; the average is TFLite's
 * rounded integer mean (|sum| + n/2) / n with the sign put back; max commutes with the
 * monotone quantization; the 2-D average pool is the same rounded mean over the taps inside
 * the input. Threads split rows only where a tensor is large: these ops are a
 * few microseconds each and a wake-up would cost more.
 */
#pragma GCC optimize("fp-contract=off", "no-math-errno")
#include "simd_f32.h"

#include <math.h>
#include <string.h>

#define PAR_ELEMS 65536       /* below this an op runs on the calling thread */

/* ---- QuantizeLinear / DequantizeLinear ---- */

typedef struct {
    const void *x; void *y; int64_t n;
    float scale, zp;          /* zp as float32, as the numpy kernel adds it */
    int32_t is_u8, threads;
} ei_qdq_args;

static inline int32_t quantize_one(float v, float scale, float zp, float lo, float hi) {
    float t = rintf(v / scale) + zp;
    if (t != t) return 0;
    return (int32_t)(t < lo ? lo : t > hi ? hi : t);
}

static void quantize_scalar(const ei_qdq_args *a, int64_t b, int64_t e) {
    const float *x = (const float *)a->x;
    float lo = a->is_u8 ? 0.0f : -128.0f, hi = a->is_u8 ? 255.0f : 127.0f;
    for (int64_t i = b; i < e; i++) {
        int32_t q = quantize_one(x[i], a->scale, a->zp, lo, hi);
        if (a->is_u8) ((uint8_t *)a->y)[i] = (uint8_t)q;
        else ((int8_t *)a->y)[i] = (int8_t)q;
    }
}

static void dequantize_scalar(const ei_qdq_args *a, int64_t b, int64_t e) {
    float *y = (float *)a->y;
    if (a->is_u8) for (int64_t i = b; i < e; i++) y[i] = ((float)((const uint8_t *)a->x)[i] - a->zp) * a->scale;
    else for (int64_t i = b; i < e; i++) y[i] = ((float)((const int8_t *)a->x)[i] - a->zp) * a->scale;
}

#if defined(__x86_64__)
static VATTR void quantize_avx2(const ei_qdq_args *a, int64_t b, int64_t e) {
    const float *x = (const float *)a->x;
    __m256 s = vset(a->scale), z = vset(a->zp), zero = vset(0.0f);
    __m256 lo = vset(a->is_u8 ? 0.0f : -128.0f), hi = vset(a->is_u8 ? 255.0f : 127.0f);
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
        __m256 t = vadd(vrint(vdiv(vload(x + i), s)), z);
        t = vmin(hi, vmax(lo, t));                       /* NaN survives both clamps ... */
        t = vsel(visnan(t), zero, t);                    /* ... and becomes 0 */
        __m256i q = vcvt_i(t);
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        w = a->is_u8 ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w);
        _mm_storel_epi64((__m128i *)((char *)a->y + i), w);
    }
    quantize_scalar(a, i, e);
}

static VATTR void dequantize_avx2(const ei_qdq_args *a, int64_t b, int64_t e) {
    float *y = (float *)a->y;
    __m256 s = vset(a->scale), z = vset(a->zp);
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
        __m128i raw = _mm_loadl_epi64((const __m128i *)((const char *)a->x + i));
        __m256i v = a->is_u8 ? _mm256_cvtepu8_epi32(raw) : _mm256_cvtepi8_epi32(raw);
        vstore(y + i, vmul(vsub(vcvt_f(v), z), s));
    }
    dequantize_scalar(a, i, e);
}
#elif defined(__aarch64__)
static void quantize_neon(const ei_qdq_args *a, int64_t b, int64_t e) {
    const float *x = (const float *)a->x;
    float32x4_t s = vset(a->scale), z = vset(a->zp), zero = vset(0.0f);
    float32x4_t lo = vset(a->is_u8 ? 0.0f : -128.0f), hi = vset(a->is_u8 ? 255.0f : 127.0f);
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
        int32x4_t q[2];
        for (int h = 0; h < 2; h++) {
            float32x4_t t = vadd(vrndnq_f32(vdiv(vload(x + i + 4 * h), s)), z);
            t = vminq_f32(hi, vmaxq_f32(lo, t));
            t = vbslq_f32(vceqq_f32(t, t), t, zero);      /* NaN -> 0 */
            q[h] = vcvtnq_s32_f32(t);
        }
        int16x8_t w = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));   /* in range: plain narrowing */
        vst1_s8((int8_t *)a->y + i, vmovn_s16(w));
    }
    quantize_scalar(a, i, e);
}

static void dequantize_neon(const ei_qdq_args *a, int64_t b, int64_t e) {
    float *y = (float *)a->y;
    float32x4_t s = vset(a->scale), z = vset(a->zp);
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
        int16x8_t w = a->is_u8 ? vreinterpretq_s16_u16(vmovl_u8(vld1_u8((const uint8_t *)a->x + i)))
                               : vmovl_s8(vld1_s8((const int8_t *)a->x + i));
        vst1q_f32(y + i, vmulq_f32(vsubq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))), z), s));
        vst1q_f32(y + i + 4, vmulq_f32(vsubq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(w))), z), s));
    }
    dequantize_scalar(a, i, e);
}
#endif

static void quantize_range(void *ctx, int64_t b, int64_t e) {
    const ei_qdq_args *a = (const ei_qdq_args *)ctx;
#if defined(__x86_64__)
    if (ei_has(EI_AVX2)) { quantize_avx2(a, b, e); return; }
#elif defined(__aarch64__)
    if (ei_has(EI_NEON)) { quantize_neon(a, b, e); return; }
#endif
    quantize_scalar(a, b, e);
}

static void dequantize_range(void *ctx, int64_t b, int64_t e) {
    const ei_qdq_args *a = (const ei_qdq_args *)ctx;
#if defined(__x86_64__)
    if (ei_has(EI_AVX2)) { dequantize_avx2(a, b, e); return; }
#elif defined(__aarch64__)
    if (ei_has(EI_NEON)) { dequantize_neon(a, b, e); return; }
#endif
    dequantize_scalar(a, b, e);
}

/* The input quantize is usually a run's first step, when the pool's workers are asleep: a
 * wake-up costs more than half of an image's quantize (1x3x224x224: 43 us on one thread, 71 us
 * on two), so it splits only from 1M elements. */
#define QUANT_PAR_ELEMS (1 << 20)

EI_API void ei_quantize_f32(const ei_qdq_args *a) {
    int t = a->n >= QUANT_PAR_ELEMS ? a->threads : 1;
    ei_parallel_for(a->n, PAR_ELEMS / 2, quantize_range, (void *)a, t);
}

EI_API void ei_dequantize_f32(const ei_qdq_args *a) {
    int t = a->n >= PAR_ELEMS ? a->threads : 1;
    ei_parallel_for(a->n, PAR_ELEMS / 2, dequantize_range, (void *)a, t);
}

/* ---- int8 pools ---- */

typedef struct {
    const int8_t *x; int8_t *y;
    int64_t n, c, p;          /* batch, channels, spatial positions */
    int32_t op, nhwc, threads, pad_;     /* op: 0 max, 1 TFLite rounded mean */
} ei_global_pool_s8_args;

static inline int8_t rounded_mean(int64_t acc, int64_t n) {
    int64_t q = ((acc < 0 ? -acc : acc) + n / 2) / n;
    q = acc < 0 ? -q : q;
    return (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
}

#define CBLOCK 256
/* rows of (n, channel block): channels accumulate in int32 (p * 128 < 2^31 for p < 2^24) */
static void global_s8_range(void *ctx, int64_t b, int64_t e) {
    const ei_global_pool_s8_args *a = (const ei_global_pool_s8_args *)ctx;
    int64_t nb = (a->c + CBLOCK - 1) / CBLOCK;
    for (int64_t r = b; r < e; r++) {
        int64_t bi = r / nb, c0 = (r % nb) * CBLOCK, cn = EI_MIN(CBLOCK, a->c - c0);
        int32_t acc[CBLOCK];
        if (a->nhwc) {
            const int8_t *x = a->x + bi * a->p * a->c + c0;
            for (int64_t j = 0; j < cn; j++) acc[j] = a->op ? 0 : -128;
            for (int64_t q = 0; q < a->p; q++, x += a->c) {
                if (a->op) for (int64_t j = 0; j < cn; j++) acc[j] += x[j];
                else for (int64_t j = 0; j < cn; j++) acc[j] = x[j] > acc[j] ? x[j] : acc[j];
            }
        } else {
            for (int64_t j = 0; j < cn; j++) {
                const int8_t *x = a->x + (bi * a->c + c0 + j) * a->p;
                int32_t s = a->op ? 0 : -128;
                if (a->op) for (int64_t q = 0; q < a->p; q++) s += x[q];
                else for (int64_t q = 0; q < a->p; q++) s = x[q] > s ? x[q] : s;
                acc[j] = s;
            }
        }
        int8_t *y = a->y + bi * a->c + c0;
        for (int64_t j = 0; j < cn; j++) y[j] = a->op ? rounded_mean(acc[j], a->p) : (int8_t)acc[j];
    }
}

EI_API void ei_global_pool_s8(const ei_global_pool_s8_args *a) {
    int64_t rows = a->n * ((a->c + CBLOCK - 1) / CBLOCK);
    int t = a->n * a->c * a->p >= 4 * PAR_ELEMS ? a->threads : 1;
    ei_parallel_for(rows, 1, global_s8_range, (void *)a, t);
}

typedef struct {
    const int8_t *x; int8_t *y;
    int64_t n, c, h, w, oh, ow;
    int32_t kh, kw, sh, sw, dh, dw, pt, pl, nhwc, threads;
} ei_maxpool_s8_args;

/* [lo, hi) of taps k with 0 <= o*s - p + k*d < size: padding never wins a max */
static inline void taps_inside(int64_t o, int s, int p, int d, int k, int64_t size, int *lo, int *hi) {
    int64_t start = o * s - p;
    int a = 0, b = k;
    while (a < k && start + (int64_t)a * d < 0) a++;
    while (b > a && start + (int64_t)(b - 1) * d >= size) b--;
    *lo = a; *hi = b;
}

/* one output row (n, oy) in NHWC, or one (n, c) plane's row in NCHW */
static void maxpool_s8_range(void *ctx, int64_t b, int64_t e) {
    const ei_maxpool_s8_args *a = (const ei_maxpool_s8_args *)ctx;
    for (int64_t r = b; r < e; r++) {
        int64_t oy = r % a->oh, plane = r / a->oh;
        int ky0, ky1;
        taps_inside(oy, a->sh, a->pt, a->dh, a->kh, a->h, &ky0, &ky1);
        for (int64_t ox = 0; ox < a->ow; ox++) {
            int kx0, kx1;
            taps_inside(ox, a->sw, a->pl, a->dw, a->kw, a->w, &kx0, &kx1);
            int64_t iy0 = oy * a->sh - a->pt, ix0 = ox * a->sw - a->pl;
            if (a->nhwc) {
                int8_t *y = a->y + ((plane * a->oh + oy) * a->ow + ox) * a->c;
                memset(y, 0x80, (size_t)a->c);
                for (int ky = ky0; ky < ky1; ky++)
                    for (int kx = kx0; kx < kx1; kx++) {
                        const int8_t *x = a->x + ((plane * a->h + iy0 + ky * a->dh) * a->w + ix0 + kx * a->dw) * a->c;
                        for (int64_t j = 0; j < a->c; j++) y[j] = x[j] > y[j] ? x[j] : y[j];
                    }
            } else {
                const int8_t *x = a->x + plane * a->h * a->w;
                int8_t m = -128;
                for (int ky = ky0; ky < ky1; ky++)
                    for (int kx = kx0; kx < kx1; kx++) {
                        int8_t v = x[(iy0 + ky * a->dh) * a->w + ix0 + kx * a->dw];
                        m = v > m ? v : m;
                    }
                a->y[(plane * a->oh + oy) * a->ow + ox] = m;
            }
        }
    }
}

EI_API void ei_maxpool_s8(const ei_maxpool_s8_args *a) {
    int64_t rows = (a->nhwc ? a->n : a->n * a->c) * a->oh;
    int64_t work = a->n * a->c * a->oh * a->ow * a->kh * a->kw;
    ei_parallel_for(rows, 1, maxpool_s8_range, (void *)a, work >= 4 * PAR_ELEMS ? a->threads : 1);
}

/* 2-D int8 AveragePool at equal input/output parameters, count_include_pad=0: the TFLite
 * rounded mean over the taps inside the input (the pads are never counted, so ceil_mode's
 * overhang needs nothing). Same geometry struct as the max pool; int32 sums (k*k*128 < 2^31). */
/* rounded_mean in doubles, so a row of channels vectorizes (an integer divide is ~20 cycles
 * per value): truncating the correctly rounded u / n is exact for u < 2^31, n < 2^22 (a
 * non-integer quotient lies >= 1/n from the next integer, the rounding error is < 2^-22) */
static inline int8_t rounded_mean_f64(int32_t acc, double n, double half) {
    double u = acc < 0 ? -(double)acc : (double)acc;
    int32_t q = (int32_t)((u + half) / n);
    q = acc < 0 ? -q : q;
    return (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
}

static void avg_pixel_nhwc(const ei_maxpool_s8_args *a, int64_t plane, int64_t oy, int64_t ox,
                           int ky0, int ky1, int kx0, int kx1) {
    int64_t iy0 = oy * a->sh - a->pt, ix0 = ox * a->sw - a->pl, cnt = (int64_t)(ky1 - ky0) * (kx1 - kx0);
    int8_t *y = a->y + ((plane * a->oh + oy) * a->ow + ox) * a->c;
    for (int64_t c0 = 0; c0 < a->c; c0 += CBLOCK) {
        int64_t cn = EI_MIN(CBLOCK, a->c - c0);
        int32_t acc[CBLOCK] = {0};
        for (int ky = ky0; ky < ky1; ky++)
            for (int kx = kx0; kx < kx1; kx++) {
                const int8_t *x = a->x + ((plane * a->h + iy0 + ky * a->dh) * a->w + ix0 + kx * a->dw) * a->c + c0;
                for (int64_t j = 0; j < cn; j++) acc[j] += x[j];
            }
        double n = (double)cnt, half = (double)(cnt / 2);
        for (int64_t j = 0; j < cn; j++) y[c0 + j] = rounded_mean_f64(acc[j], n, half);
    }
}

static void avgpool_s8_range(void *ctx, int64_t b, int64_t e) {
    const ei_maxpool_s8_args *a = (const ei_maxpool_s8_args *)ctx;
    for (int64_t r = b; r < e; r++) {
        int64_t oy = r % a->oh, plane = r / a->oh;
        int ky0, ky1;
        taps_inside(oy, a->sh, a->pt, a->dh, a->kh, a->h, &ky0, &ky1);
        for (int64_t ox = 0; ox < a->ow; ox++) {
            int kx0, kx1;
            taps_inside(ox, a->sw, a->pl, a->dw, a->kw, a->w, &kx0, &kx1);
            if (a->nhwc) { avg_pixel_nhwc(a, plane, oy, ox, ky0, ky1, kx0, kx1); continue; }
            const int8_t *x = a->x + plane * a->h * a->w;
            int64_t iy0 = oy * a->sh - a->pt, ix0 = ox * a->sw - a->pl;
            int32_t acc = 0;
            for (int ky = ky0; ky < ky1; ky++)
                for (int kx = kx0; kx < kx1; kx++) acc += x[(iy0 + ky * a->dh) * a->w + ix0 + kx * a->dw];
            a->y[(plane * a->oh + oy) * a->ow + ox] = rounded_mean(acc, (int64_t)(ky1 - ky0) * (kx1 - kx0));
        }
    }
}

EI_API void ei_avgpool_s8(const ei_maxpool_s8_args *a) {
    int64_t rows = (a->nhwc ? a->n : a->n * a->c) * a->oh;
    int64_t work = a->n * a->c * a->oh * a->ow * a->kh * a->kw;
    ei_parallel_for(rows, 1, avgpool_s8_range, (void *)a, work >= 4 * PAR_ELEMS ? a->threads : 1);
}

/* ---- self-test: the SIMD quantize/dequantize against the scalar ones, bit for bit ---- */
EI_API int ei_selftest_int8_misc(void) {
    enum { N = 1037 };
    static float x[N], back[2][N];
    static int8_t q[2][N];
    int fails = 0;
    uint32_t st = 99;
    for (int trial = 0; trial < 6; trial++) {
        float scale = 0.003f * (float)(trial + 1), zp = (float)(trial * 37 % 200 - 100);
        for (int i = 0; i < N; i++) {
            st = st * 1664525u + 1013904223u;
            x[i] = ((float)(st >> 8) / 16777216.0f - 0.5f) * 300.0f * scale;
            if (i % 7 == 0) x[i] = (rintf(x[i] / scale) + 0.5f) * scale;      /* near ties */
        }
        x[3] = 1e30f; x[4] = -1e30f; x[5] = NAN;
        for (int u = 0; u < 2; u++) {
            ei_qdq_args a = { x, q[0], N, scale, u ? zp + 100.0f : zp, u, 1 };
            quantize_range(&a, 0, N);
            quantize_scalar(&(ei_qdq_args){ x, q[1], N, scale, a.zp, u, 1 }, 0, N);
            fails += memcmp(q[0], q[1], N) != 0;
            ei_qdq_args d = { q[0], back[0], N, scale, a.zp, u, 1 };
            dequantize_range(&d, 0, N);
            dequantize_scalar(&(ei_qdq_args){ q[0], back[1], N, scale, a.zp, u, 1 }, 0, N);
            fails += memcmp(back[0], back[1], sizeof back[0]) != 0;
        }
    }
    return fails;
}
