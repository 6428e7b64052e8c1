/* int8 pools: global average / max pooling and 2-D max / average pooling.
 *
 * Bit-exact with the numpy kernels (kernels/int8_pool.py, pool.py): the average is TFLite's
 * rounded integer mean (|sum| + n/2) / n with the sign put back, over the taps inside the
 * input; max commutes with the monotone quantization, and padding never wins it. Threads
 * split rows only where a tensor is large: these ops are a few microseconds each and a
 * wake-up would cost more. (QuantizeLinear / DequantizeLinear are in qdq.c.)
 */
#pragma GCC optimize("fp-contract=off", "no-math-errno")
#include "edge_native.h"
#include "ei_int8.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#define PAR_ELEMS 65536       /* below this an op runs on the calling thread */

/* ---- int8 pools ---- */

typedef struct {
    const int8_t *x; int8_t *y;
    int64_t n, c, p;          /* batch, channels, spatial positions */
    int32_t op, nhwc, threads, pad_;     /* op: 0 max, 1 TFLite rounded mean, 2 requantized mean */
    int32_t mult, shift, zp_x, zp_y;     /* op 2: zp_y + MBQM(sum - p zp_x, s_x / (p s_y)) */
} ei_global_pool_s8_args;

/* op 2: the mean to other output parameters, one rounding (kernels/int8_pool._requant_mean_step) */
static inline int8_t requant_mean(const ei_global_pool_s8_args *a, int32_t acc) {
    int64_t v = (int64_t)ei_mbqm(acc - (int32_t)(a->p * a->zp_x), a->mult, a->shift) + a->zp_y;
    return (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
}

static inline int8_t rounded_mean(int64_t acc, int64_t n) {
    int64_t q = ((acc < 0 ? -acc : acc) + n / 2) / n;
    q = acc < 0 ? -q : q;
    return (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
}

/* floor(u / n) for every u < 2^32 as (u * m) >> s, m = ceil(2^s / n), s = 32 + ceil(log2 n):
 * m n - 2^s < n <= 2^(s - 32), so u m / 2^s exceeds u / n by less than 1 / n, never reaching
 * the next integer (a division per channel cost as much as summing 49 positions) */
typedef struct { uint64_t m; int s; } ei_divn;

static inline ei_divn divn_make(int64_t n) {
    int l = 0;
    while ((1LL << l) < n) l++;
    ei_divn d = { (uint64_t)((((__uint128_t)1 << (32 + l)) + (uint64_t)n - 1) / (uint64_t)n), 32 + l };
    return d;
}

/* rounded_mean with the division by n as divn's multiply: |acc| + n / 2 < 2^32 (p < 2^24) */
static inline int8_t rounded_mean_d(int64_t acc, int64_t n, ei_divn d) {
    uint64_t u = (uint64_t)(acc < 0 ? -acc : acc) + (uint64_t)(n / 2);
    int64_t q = (int64_t)(((__uint128_t)u * d.m) >> d.s);
    q = acc < 0 ? -q : q;
    return (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
}

#if defined(__x86_64__)
/* the int16 sums of 64 channels' bytes (lo: channels 0-31, hi: 32-63) added into the int32
 * sums s[0..3], 16 channels each */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static inline void flush_s16(__m512i s[4], __m512i lo, __m512i hi) {
    s[0] = _mm512_add_epi32(s[0], _mm512_cvtepi16_epi32(_mm512_castsi512_si256(lo)));
    s[1] = _mm512_add_epi32(s[1], _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(lo, 1)));
    s[2] = _mm512_add_epi32(s[2], _mm512_cvtepi16_epi32(_mm512_castsi512_si256(hi)));
    s[3] = _mm512_add_epi32(s[3], _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(hi, 1)));
}

/* acc[j] = sum over p positions (stride c bytes) of x[j], j < cn: 64 channels a load, widened
 * to int16 and summed in int16 lanes (two vectors of 32 channels), flushed to int32 every 256
 * positions (256 * 128 = 2^15: |partial sum| <= 32768 with -128, which int16 holds only as
 * -32768, so at most 256 values of -128 a lane). Twice the channels per instruction of an
 * int32 sum (16 a vector, the int32 loop took 2x the fp32 mean's time per byte) */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static void sum_s8_avx512(const int8_t *x, int64_t c, int64_t p, int64_t cn, int32_t *acc) {
    for (int64_t j = 0; j < cn; j += 64) {
        __mmask64 m = cn - j >= 64 ? ~0ULL : ((1ULL << (cn - j)) - 1);
        __m512i s[4] = { _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                         _mm512_setzero_si512() };
        const int8_t *xp = x + j;
        for (int64_t q0 = 0; q0 < p; q0 += 256) {
            int64_t q1 = EI_MIN(p, q0 + 256);
            __m512i lo = _mm512_setzero_si512(), hi = lo;
            for (int64_t q = q0; q < q1; q++, xp += c) {
                __m512i v = _mm512_maskz_loadu_epi8(m, xp);
                lo = _mm512_add_epi16(lo, _mm512_cvtepi8_epi16(_mm512_castsi512_si256(v)));
                hi = _mm512_add_epi16(hi, _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(v, 1)));
            }
            flush_s16(s, lo, hi);
        }
        for (int v = 0; v < 4 && j + 16 * v < cn; v++) {
            int64_t left = cn - j - 16 * v;
            _mm512_mask_storeu_epi32(acc + j + 16 * v, left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1),
                                     s[v]);
        }
    }
}

/* c divides 64 (all channels): the p positions are one run of p c bytes, summed 64 bytes
 * (64 / c positions) a load in int16 lanes as above; lane l holds channel l % c (the
 * per-position loop used a quarter or half of each load: MobileNetV3's 56x56x16 mean; an
 * eighth with the text classifier's 12x48x8 gate) */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static void sum_s8_run_avx512(const int8_t *x, int64_t c, int64_t p, int32_t *acc) {
    const int64_t n = p * c;
    __m512i s[4] = { _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512() };
    for (int64_t i0 = 0; i0 < n; i0 += 256 * 64) {
        int64_t i1 = EI_MIN(n, i0 + 256 * 64);
        __m512i lo = _mm512_setzero_si512(), hi = lo;
        for (int64_t i = i0; i < i1; i += 64) {     /* n is a multiple of c, the tail a mask */
            __mmask64 m = i1 - i >= 64 ? ~0ULL : ((1ULL << (i1 - i)) - 1);
            __m512i v = _mm512_maskz_loadu_epi8(m, x + i);
            lo = _mm512_add_epi16(lo, _mm512_cvtepi8_epi16(_mm512_castsi512_si256(v)));
            hi = _mm512_add_epi16(hi, _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(v, 1)));
        }
        flush_s16(s, lo, hi);
    }
    __m512i t = _mm512_add_epi32(_mm512_add_epi32(s[0], s[1]), _mm512_add_epi32(s[2], s[3]));   /* c = 16 */
    if (c == 32) {
        _mm512_storeu_si512(acc, _mm512_add_epi32(s[0], s[2]));
        _mm512_storeu_si512(acc + 16, _mm512_add_epi32(s[1], s[3]));
    } else if (c == 16) {
        _mm512_storeu_si512(acc, t);
    } else {                    /* c = 1, 2, 4 or 8: lane l of t holds channel l % c */
        int32_t u[16];
        _mm512_storeu_si512(u, t);
        for (int64_t j = 0; j < c; j++) {
            int32_t v = 0;
            for (int64_t l = j; l < 16; l += c) v += u[l];
            acc[j] = v;
        }
    }
}

/* the epilogue of 16 channels at a time: op 2 requantizes acc - p zp_x (one MBQM, the
 * constants of ei_vq16 in every lane, as requant_mean), op 1 rounds |acc| / p (rounded_mean:
 * the quotient from a double product, then corrected by one integer test each way) */
__attribute__((target("avx512f,avx512bw")))
static void mean_store_avx512(const ei_global_pool_s8_args *a, const int32_t *acc, int64_t cn, int8_t *y) {
    if (a->op == 2) {
        ei_vq16 k;
        ei_vqc vc;
        ei_vqc_prepare(&vc, NULL, a->zp_y, -128, 127, ei_vq16_prepare1(&k, a->mult, a->shift));
        const __m512i off = _mm512_set1_epi32((int32_t)(a->p * a->zp_x));
        for (int64_t j = 0; j < cn; j += 16) {
            __mmask16 m = cn - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cn - j)) - 1);
            ei_vq_store(&vc, &k, m, _mm512_sub_epi32(_mm512_maskz_loadu_epi32(m, acc + j), off), y + j, NULL);
        }
        return;
    }
    const __m512i n = _mm512_set1_epi32((int32_t)a->p), half = _mm512_set1_epi32((int32_t)(a->p / 2));
    const __m512d inv = _mm512_set1_pd(1.0 / (double)a->p);
    const __m512i one = _mm512_set1_epi32(1);
    for (int64_t j = 0; j < cn; j += 16) {
        __mmask16 m = cn - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cn - j)) - 1);
        __m512i v = _mm512_maskz_loadu_epi32(m, acc + j);
        __m512i u = _mm512_add_epi32(_mm512_abs_epi32(v), half);          /* < 2^31: p < 2^23 */
        __m256i q0 = _mm512_cvttpd_epi32(_mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(u)), inv));
        __m256i q1 = _mm512_cvttpd_epi32(_mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(u, 1)), inv));
        __m512i qv = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
        __m512i r = _mm512_sub_epi32(u, _mm512_mullo_epi32(qv, n));       /* the estimate is off by <= 1 */
        qv = _mm512_mask_sub_epi32(qv, _mm512_cmplt_epi32_mask(r, _mm512_setzero_si512()), qv, one);
        qv = _mm512_mask_add_epi32(qv, _mm512_cmpge_epi32_mask(r, n), qv, one);
        qv = _mm512_mask_sub_epi32(qv, _mm512_cmplt_epi32_mask(v, _mm512_setzero_si512()), _mm512_setzero_si512(), qv);
        qv = _mm512_max_epi32(_mm512_min_epi32(qv, _mm512_set1_epi32(127)), _mm512_set1_epi32(-128));
        _mm512_mask_storeu_epi8(y + j, (__mmask64)m, _mm512_castsi128_si512(_mm512_cvtepi32_epi8(qv)));
    }
}
#endif

#define CBLOCK 256

/* acc[j] = the sum of x[q c + j] over np positions q, j < cn: NHWC sums, exact in int32 (np 128 <
 * 2^31), the AVX-512 kernels' int16 lanes where they run */
static void nhwc_sums(const int8_t *x, int64_t c, int64_t np, int64_t cn, int32_t *acc) {
#if defined(__x86_64__)
    if (ei_has(EI_AVX512)) {
        if (c <= 32 && 64 % c == 0 && cn == c) sum_s8_run_avx512(x, c, np, acc);
        else sum_s8_avx512(x, c, np, cn, acc);
        return;
    }
#endif
    for (int64_t j = 0; j < cn; j++) acc[j] = 0;
    for (int64_t q = 0; q < np; q++, x += c)
        for (int64_t j = 0; j < cn; j++) acc[j] += x[j];
}

/* y[j] = the average (op 1) or requantized mean (op 2) of the sums acc[j], j < cn */
static void store_means(const ei_global_pool_s8_args *a, const int32_t *acc, int64_t cn, int8_t *y, const ei_divn *dn) {
#if defined(__x86_64__)
    /* op 1: |acc| + p / 2 < 2^31 for the int32 lanes (the Python side allows p < 2^24) */
    if ((a->op == 2 || a->p < (1 << 22)) && ei_has(EI_AVX512)) {
        mean_store_avx512(a, acc, cn, y);
        return;
    }
#endif
    for (int64_t j = 0; j < cn; j++) y[j] = a->op == 2 ? requant_mean(a, acc[j]) : rounded_mean_d(acc[j], a->p, *dn);
}

/* rows of (n, channel block): channels accumulate in int32 (p * 128 < 2^31 for p < 2^24) */
static void global_s8_range(void *ctx, int64_t b, int64_t e) {
    const ei_global_pool_s8_args *a = (const ei_global_pool_s8_args *)ctx;
    int64_t nb = (a->c + CBLOCK - 1) / CBLOCK;
    ei_divn dn = divn_make(a->p > 0 ? a->p : 1);
    for (int64_t r = b; r < e; r++) {
        int64_t bi = r / nb, c0 = (r % nb) * CBLOCK, cn = EI_MIN(CBLOCK, a->c - c0);
        int32_t acc[CBLOCK];
        int8_t *y = a->y + bi * a->c + c0;
        if (a->nhwc && a->op) {         /* averages */
            nhwc_sums(a->x + bi * a->p * a->c + c0, a->c, a->p, cn, acc);
            store_means(a, acc, cn, y, &dn);
            continue;
        }
        if (a->nhwc) {                  /* max */
            const int8_t *x = a->x + bi * a->p * a->c + c0;
            for (int64_t j = 0; j < cn; j++) acc[j] = -128;
            for (int64_t q = 0; q < a->p; q++, x += a->c)
                for (int64_t j = 0; j < cn; j++) acc[j] = x[j] > acc[j] ? x[j] : acc[j];
        } else {
            for (int64_t j = 0; j < cn; j++) {
                const int8_t *x = a->x + (bi * a->c + c0 + j) * a->p;
                int32_t s = a->op ? 0 : -128;
                if (a->op) for (int64_t q = 0; q < a->p; q++) s += x[q];
                else for (int64_t q = 0; q < a->p; q++) s = x[q] > s ? x[q] : s;
                acc[j] = s;
            }
        }
        for (int64_t j = 0; j < cn; j++)
            y[j] = a->op == 2 ? requant_mean(a, acc[j]) : a->op ? rounded_mean_d(acc[j], a->p, dn) : (int8_t)acc[j];
    }
}

EI_API void ei_global_pool_s8(const ei_global_pool_s8_args *a) {
    int64_t rows = a->n * ((a->c + CBLOCK - 1) / CBLOCK);
    int t = a->n * a->c * a->p >= 4 * PAR_ELEMS ? a->threads : 1;
    ei_parallel_for(rows, 1, global_s8_range, (void *)a, t);
}

/* The mean in two halves, for the fused squeeze-excite step (se.c), which sums each thread's
 * share of positions where the layer before wrote it and adds the shares: an NHWC average
 * (op 1 or 2) of batch 1. acc[j] = sum of x[q][j] over positions q0 .. q1 - 1, all c channels */
void ei_global_pool_s8_sums(const void *args, int64_t q0, int64_t q1, int32_t *acc) {
    const ei_global_pool_s8_args *a = (const ei_global_pool_s8_args *)args;
    nhwc_sums(a->x + q0 * a->c, a->c, q1 - q0, a->c, acc);
}

/* y = the mean of the sums acc (all positions, c channels), as global_s8_range stores it */
void ei_global_pool_s8_store(const void *args, const int32_t *acc) {
    const ei_global_pool_s8_args *a = (const ei_global_pool_s8_args *)args;
    ei_divn dn = divn_make(a->p > 0 ? a->p : 1);
    store_means(a, acc, a->c, a->y, &dn);
}

typedef struct {
    const int8_t *x; int8_t *y;
    int64_t n, c, h, w, oh, ow;
    int32_t kh, kw, sh, sw, dh, dw, pt, pl, nhwc, threads;
} ei_maxpool_s8_args;

typedef void (*pixel_fn)(const ei_maxpool_s8_args *a, int64_t plane, int64_t oy, int64_t ox,
                         int ky0, int ky1, int kx0, int kx1);

/* rows b..e of outputs: (n, oy) in NHWC, one (n, c) plane's row in NCHW; each output pixel
 * with the taps of its window that lie inside the input */
static void pool_rows(const ei_maxpool_s8_args *a, int64_t b, int64_t e, pixel_fn pixel) {
    for (int64_t r = b; r < e; r++) {
        int64_t oy = r % a->oh, plane = r / a->oh;
        int ky0, ky1;
        ei_tap_range(oy, a->sh, a->pt, a->dh, a->kh, a->h, &ky0, &ky1);
        for (int64_t ox = 0; ox < a->ow; ox++) {
            int kx0, kx1;
            ei_tap_range(ox, a->sw, a->pl, a->dw, a->kw, a->w, &kx0, &kx1);
            pixel(a, plane, oy, ox, ky0, ky1, kx0, kx1);
        }
    }
}

static void run_pool(const ei_maxpool_s8_args *a, ei_range_fn rows_fn) {
    int64_t rows = (a->nhwc ? a->n : a->n * a->c) * a->oh;
    int64_t work = a->n * a->c * a->oh * a->ow * a->kh * a->kw;
    ei_parallel_for(rows, 1, rows_fn, (void *)a, work >= 4 * PAR_ELEMS ? a->threads : 1);
}

/* NHWC max of one output pixel, a block of channels held in registers over all taps (the
 * plain loop below stores y after every tap, and its int8 pointers may alias a->c, so GCC
 * neither vectorizes nor hoists it). x0: the window's first row and column; rs, ps: row and
 * pixel strides in bytes (dilation included) */
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw")))
static void max_taps_avx512(int8_t *y, const int8_t *x0, int64_t c, int64_t rs, int64_t ps, int nky, int nkx) {
    for (int64_t j = 0; j < c; j += 64) {
        __mmask64 m = c - j >= 64 ? ~0ULL : ((1ULL << (c - j)) - 1);
        __m512i acc = _mm512_set1_epi8(-128);
        for (int ky = 0; ky < nky; ky++)
            for (int kx = 0; kx < nkx; kx++)
                acc = _mm512_max_epi8(acc, _mm512_maskz_loadu_epi8(m, x0 + ky * rs + kx * ps + j));
        _mm512_mask_storeu_epi8(y + j, m, acc);
    }
}

__attribute__((target("avx2")))
static void max_taps_avx2(int8_t *y, const int8_t *x0, int64_t c, int64_t rs, int64_t ps, int nky, int nkx) {
    int64_t j = 0;
    for (; j + 32 <= c; j += 32) {
        __m256i acc = _mm256_set1_epi8(-128);
        for (int ky = 0; ky < nky; ky++)
            for (int kx = 0; kx < nkx; kx++)
                acc = _mm256_max_epi8(acc, _mm256_loadu_si256((const __m256i *)(x0 + ky * rs + kx * ps + j)));
        _mm256_storeu_si256((__m256i *)(y + j), acc);
    }
    for (; j < c; j++) {
        int8_t m = -128;
        for (int ky = 0; ky < nky; ky++)
            for (int kx = 0; kx < nkx; kx++) { int8_t v = x0[ky * rs + kx * ps + j]; m = v > m ? v : m; }
        y[j] = m;
    }
}
#elif defined(__aarch64__)
static void max_taps_neon(int8_t *y, const int8_t *x0, int64_t c, int64_t rs, int64_t ps, int nky, int nkx) {
    int64_t j = 0;
    for (; j + 16 <= c; j += 16) {
        int8x16_t acc = vdupq_n_s8(-128);
        for (int ky = 0; ky < nky; ky++)
            for (int kx = 0; kx < nkx; kx++) acc = vmaxq_s8(acc, vld1q_s8(x0 + ky * rs + kx * ps + j));
        vst1q_s8(y + j, acc);
    }
    for (; j < c; j++) {
        int8_t m = -128;
        for (int ky = 0; ky < nky; ky++)
            for (int kx = 0; kx < nkx; kx++) { int8_t v = x0[ky * rs + kx * ps + j]; m = v > m ? v : m; }
        y[j] = m;
    }
}
#endif

typedef void (*max_taps_fn)(int8_t *, const int8_t *, int64_t, int64_t, int64_t, int, int);

static max_taps_fn max_taps_simd(void) {
#if defined(__x86_64__)
    if (ei_has(EI_AVX512)) return max_taps_avx512;
    if (ei_has(EI_AVX2)) return max_taps_avx2;
#elif defined(__aarch64__)
    if (ei_has(EI_NEON)) return max_taps_neon;
#endif
    return NULL;
}

typedef struct { const ei_maxpool_s8_args *a; max_taps_fn fn; } max_simd_ctx;

static void maxpool_s8_simd_range(void *vctx, int64_t b, int64_t e) {
    const max_simd_ctx *cx = (const max_simd_ctx *)vctx;
    const ei_maxpool_s8_args *a = cx->a;
    int64_t rs = a->w * a->c * a->dh, ps = a->c * a->dw;
    for (int64_t r = b; r < e; r++) {
        int64_t oy = r % a->oh, plane = r / a->oh;
        int ky0, ky1;
        ei_tap_range(oy, a->sh, a->pt, a->dh, a->kh, a->h, &ky0, &ky1);
        int64_t iy = oy * a->sh - a->pt + (int64_t)ky0 * a->dh;
        for (int64_t ox = 0; ox < a->ow; ox++) {
            int kx0, kx1;
            ei_tap_range(ox, a->sw, a->pl, a->dw, a->kw, a->w, &kx0, &kx1);
            int64_t ix = ox * a->sw - a->pl + (int64_t)kx0 * a->dw;
            cx->fn(a->y + ((plane * a->oh + oy) * a->ow + ox) * a->c, a->x + ((plane * a->h + iy) * a->w + ix) * a->c,
                   a->c, rs, ps, ky1 - ky0, kx1 - kx0);
        }
    }
}

static void max_pixel(const ei_maxpool_s8_args *a, int64_t plane, int64_t oy, int64_t ox,
                      int ky0, int ky1, int kx0, int kx1) {
    int64_t iy0 = oy * a->sh - a->pt, ix0 = ox * a->sw - a->pl;
    if (a->nhwc) {
        int8_t *y = a->y + ((plane * a->oh + oy) * a->ow + ox) * a->c;
        memset(y, 0x80, (size_t)a->c);
        for (int ky = ky0; ky < ky1; ky++)
            for (int kx = kx0; kx < kx1; kx++) {
                const int8_t *x = a->x + ((plane * a->h + iy0 + ky * a->dh) * a->w + ix0 + kx * a->dw) * a->c;
                for (int64_t j = 0; j < a->c; j++) y[j] = x[j] > y[j] ? x[j] : y[j];
            }
        return;
    }
    const int8_t *x = a->x + plane * a->h * a->w;
    int8_t m = -128;
    for (int ky = ky0; ky < ky1; ky++)
        for (int kx = kx0; kx < kx1; kx++) {
            int8_t v = x[(iy0 + ky * a->dh) * a->w + ix0 + kx * a->dw];
            m = v > m ? v : m;
        }
    a->y[(plane * a->oh + oy) * a->ow + ox] = m;
}

static void maxpool_s8_range(void *ctx, int64_t b, int64_t e) {
    pool_rows((const ei_maxpool_s8_args *)ctx, b, e, max_pixel);
}

EI_API void ei_maxpool_s8(const ei_maxpool_s8_args *a) {
    max_simd_ctx cx = { a, max_taps_simd() };
    if (!a->nhwc || !cx.fn) { run_pool(a, maxpool_s8_range); return; }
    int64_t work = a->n * a->c * a->oh * a->ow * a->kh * a->kw;
    ei_parallel_for(a->n * a->oh, 1, maxpool_s8_simd_range, &cx, work >= 4 * PAR_ELEMS ? a->threads : 1);
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

static void avg_pixel(const ei_maxpool_s8_args *a, int64_t plane, int64_t oy, int64_t ox,
                      int ky0, int ky1, int kx0, int kx1) {
    int64_t iy0 = oy * a->sh - a->pt, ix0 = ox * a->sw - a->pl, cnt = (int64_t)(ky1 - ky0) * (kx1 - kx0);
    if (!a->nhwc) {
        const int8_t *x = a->x + plane * a->h * a->w;
        int32_t acc = 0;
        for (int ky = ky0; ky < ky1; ky++)
            for (int kx = kx0; kx < kx1; kx++) acc += x[(iy0 + ky * a->dh) * a->w + ix0 + kx * a->dw];
        a->y[(plane * a->oh + oy) * a->ow + ox] = rounded_mean(acc, cnt);
        return;
    }
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
    pool_rows((const ei_maxpool_s8_args *)ctx, b, e, avg_pixel);
}

EI_API void ei_avgpool_s8(const ei_maxpool_s8_args *a) { run_pool(a, avgpool_s8_range); }
