/* QuantizeLinear / DequantizeLinear (float32 <-> int8 / uint8), per tensor or per axis (one
 * scale and zero point per channel of one axis).
 *
 * Bit-exact with kernels/int8_qdq.py, which broadcasts the same float32 operations:
 * quantize is x / scale[c], rounded half to even, + (float)zp[c], clamped (a NaN gives 0; numpy's
 * cast of NaN is undefined); dequantize is ((float)x - (float)zp[c]) * scale[c]. No FMA contraction, so
 * the two roundings of dequantize stay two.
 *
 * The tensor is viewed as (outer, c, inner). With inner > 1 a row is one channel's inner run
 * (scale broadcast); with inner == 1 (the last axis) a row is one outer index's c channels,
 * and the scales are loaded as vectors next to the data.
 */
#pragma GCC optimize("fp-contract=off", "no-math-errno")
#include "simd_f32.h"
#include "ei_quant.h"

#include <math.h>
#include <string.h>

#define QDQ_PAR_ELEMS 65536   /* below this one thread: a wake-up costs more than the op */

typedef struct {
    const void *x; void *y;
    const float *scale, *zp;  /* c each; zp already float32, as the numpy kernel adds it */
    int64_t outer, c, inner;
    int32_t is_u8, threads;
} ei_qdq_axis_args;

/* one row: n elements from element `off`; channel params advance by `step` (0 or 1) per element */
typedef struct { int64_t off, n; const float *s, *z; int step; } qdq_span;

static qdq_span row_span(const ei_qdq_axis_args *a, int64_t r) {
    if (a->inner == 1) return (qdq_span){ r * a->c, a->c, a->scale, a->zp, 1 };
    int64_t ch = r % a->c;
    return (qdq_span){ r * a->inner, a->inner, a->scale + ch, a->zp + ch, 0 };
}

static int64_t row_count(const ei_qdq_axis_args *a) {
    return a->inner == 1 ? a->outer : a->outer * a->c;
}

static void quant_span_scalar(const ei_qdq_axis_args *a, qdq_span sp, int64_t i0) {
    const float *x = (const float *)a->x + sp.off;
    float lo = a->is_u8 ? 0.0f : -128.0f, hi = a->is_u8 ? 255.0f : 127.0f;
    for (int64_t i = i0; i < sp.n; i++) {
        float t = rintf(x[i] / sp.s[i * sp.step]) + sp.z[i * sp.step];
        int32_t q = t != t ? 0 : (int32_t)(t < lo ? lo : t > hi ? hi : t);
        if (a->is_u8) ((uint8_t *)a->y)[sp.off + i] = (uint8_t)q;
        else ((int8_t *)a->y)[sp.off + i] = (int8_t)q;
    }
}

static void dequant_span_scalar(const ei_qdq_axis_args *a, qdq_span sp, int64_t i0) {
    float *y = (float *)a->y + sp.off;
    for (int64_t i = i0; i < sp.n; i++) {
        float v = a->is_u8 ? (float)((const uint8_t *)a->x)[sp.off + i] : (float)((const int8_t *)a->x)[sp.off + i];
        y[i] = (v - sp.z[i * sp.step]) * sp.s[i * sp.step];
    }
}

/* VW int32 lanes (already clamped to the output range) -> VW bytes, and back */
#if defined(__x86_64__)
static inline VATTR void store_bytes(void *p, __m256i q, int u8) {
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    w = u8 ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w);
    _mm_storel_epi64((__m128i *)p, w);
}

static inline VATTR __m256i load_bytes(const void *p, int u8) {
    __m128i raw = _mm_loadl_epi64((const __m128i *)p);
    return u8 ? _mm256_cvtepu8_epi32(raw) : _mm256_cvtepi8_epi32(raw);
}
#elif defined(__aarch64__)
static inline void store_bytes(void *p, int32x4_t q, int u8) {
    (void)u8;                 /* in range: the low byte is the int8 / uint8 value either way */
    int16x4_t h = vmovn_s32(q);
    int8x8_t b = vmovn_s16(vcombine_s16(h, h));
    uint32_t w = vget_lane_u32(vreinterpret_u32_s8(b), 0);
    memcpy(p, &w, 4);
}

static inline int32x4_t load_bytes(const void *p, int u8) {
    uint32_t w;
    memcpy(&w, p, 4);
    uint8x8_t b = vreinterpret_u8_u32(vdup_n_u32(w));
    int16x8_t h = u8 ? vreinterpretq_s16_u16(vmovl_u8(b)) : vmovl_s8(vreinterpret_s8_u8(b));
    return vmovl_s16(vget_low_s16(h));
}
#endif

#if defined(EI_SIMD_READY)
static VATTR void quant_span_simd(const ei_qdq_axis_args *a, qdq_span sp) {
    const float *x = (const float *)a->x + sp.off;
    char *y = (char *)a->y + sp.off;
    VF lo = vset(a->is_u8 ? 0.0f : -128.0f), hi = vset(a->is_u8 ? 255.0f : 127.0f), zero = vset(0.0f);
    VF s = vset(sp.s[0]), z = vset(sp.z[0]);
    int64_t i = 0;
    for (; i + VW <= sp.n; i += VW) {
        if (sp.step) { s = vload(sp.s + i); z = vload(sp.z + i); }
        VF t = vadd(vrint(vdiv(vload(x + i), s)), z);
        t = vmin(hi, vmax(lo, t));                      /* NaN survives both clamps ... */
        store_bytes(y + i, vcvt_i(vsel(visnan(t), zero, t)), a->is_u8);   /* ... and becomes 0 */
    }
    quant_span_scalar(a, sp, i);
}

static VATTR void dequant_span_simd(const ei_qdq_axis_args *a, qdq_span sp) {
    const char *x = (const char *)a->x + sp.off;
    float *y = (float *)a->y + sp.off;
    VF s = vset(sp.s[0]), z = vset(sp.z[0]);
    int64_t i = 0;
    for (; i + VW <= sp.n; i += VW) {
        if (sp.step) { s = vload(sp.s + i); z = vload(sp.z + i); }
        vstore(y + i, vmul(vsub(vcvt_f(load_bytes(x + i, a->is_u8)), z), s));
    }
    dequant_span_scalar(a, sp, i);
}
#endif

#if defined(__x86_64__)
/* One scale (per tensor, or a channel's inner run) with AVX-512: rint(x / s) exactly, 16 lanes
 * by ei_quant.h's bracket test (x times the two floats around 1 / s convert to one integer);
 * 64 values whose lanes do not all pass (NaN, inf, |t| >= 2^31, and the few near ties whose
 * two products straddle a half-integer) go through vdivps (ei_q16_exact). The zero point is
 * added in saturating int16 lanes and the int8 / uint8 narrowing saturates: the clamp, for
 * free. (MobileNetV3's 1x3x224x224 input: 34 us with AVX2 division; 26 us with the per-lane
 * distance test and float clamps, then ~16 us with a distance test whose failures, every
 * exact tie, went to the scalar division: 638 us on 8-bit pixels mapped to [-1, 1] at scale
 * 1 / 127.5, all ties; now 12.8 us, 30 on those ties, whose blocks still take the division
 * where a lane's two products straddle the half-integer; 1x3x48x192: 2.6, ties 6.4 us, was
 * 3.4 and 116.) The scale must keep 1 / s normal (the caller checks). */
__attribute__((target("avx512f,avx512bw,avx512dq")))
static void quant_span_avx512(const ei_qdq_axis_args *a, qdq_span sp) {
    const float *x = (const float *)a->x + sp.off;
    char *y = (char *)a->y + sp.off;
    ei_q16 k;
    ei_q16_prepare(&k, sp.s[0], (int32_t)sp.z[0]);
    const __m512i zp16 = _mm512_set1_epi16((short)sp.z[0]);
    /* the packs work per 128-bit lane: dword 4j + i of the result holds vector i's values 4j .. 4j + 3 */
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    int64_t i = 0;
    for (; i + 64 <= sp.n; i += 64) {
        __m512 v[4];
        __m512i q[4];
        __mmask16 ok = 0xFFFF;
        for (int j = 0; j < 4; j++) {
            v[j] = _mm512_loadu_ps(x + i + 16 * j);
            q[j] = ei_q16_fast(&k, v[j], &ok);
        }
        if (ok != 0xFFFF)
            for (int j = 0; j < 4; j++) q[j] = ei_q16_exact(&k, v[j]);
        __m512i lo = _mm512_adds_epi16(_mm512_packs_epi32(q[0], q[1]), zp16);
        __m512i hi = _mm512_adds_epi16(_mm512_packs_epi32(q[2], q[3]), zp16);
        __m512i p = a->is_u8 ? _mm512_packus_epi16(lo, hi) : _mm512_packs_epi16(lo, hi);
        _mm512_storeu_si512(y + i, _mm512_permutexvar_epi32(order, p));
    }
    /* the last < 64 values 16 lanes at a time under a mask (the scalar division took 32 of a
     * 224-wide row's values: most of a row's time, where the int8 stem quantizes row by row) */
    const __m512i zp32 = _mm512_set1_epi32((int)sp.z[0]), lim_lo = _mm512_set1_epi32(-1024),
                  lim_hi = _mm512_set1_epi32(1024);
    for (; i < sp.n; i += 16) {
        __mmask16 m = sp.n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (sp.n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __mmask16 ok = 0xFFFF;
        __m512i q = ei_q16_fast(&k, v, &ok);
        if (ok != 0xFFFF) q = ei_q16_exact(&k, v);
        /* the bracket passes any |q| < 2^31: limited first, so that + zp cannot wrap */
        q = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lim_lo), lim_hi), zp32);
        __m128i b = a->is_u8 ? _mm512_cvtusepi32_epi8(_mm512_max_epi32(q, _mm512_setzero_si512()))
                             : _mm512_cvtsepi32_epi8(q);
        _mm512_mask_storeu_epi8(y + i, (__mmask64)m, _mm512_castsi128_si512(b));
    }
}
#endif

static void quant_span(const ei_qdq_axis_args *a, qdq_span sp) {
#if defined(__x86_64__)
    float s0 = fabsf(sp.s[0]);
    if (!sp.step && s0 > 0x1p-120f && s0 < 0x1p120f && ei_has(EI_AVX512)) { quant_span_avx512(a, sp); return; }
#endif
#if defined(EI_SIMD_READY)
    if (ei_has(EI_SIMD_ISA)) { quant_span_simd(a, sp); return; }
#endif
    quant_span_scalar(a, sp, 0);
}

/* n values quantized to int8 with one scale and zero point, the same bytes as the per-tensor
 * quantize: the int8 stem's float input, quantized row by row into its line buffers
 * (int8_stem.c ei_int8_stem_q), instead of a QuantizeLinear step and a layout copy */
void ei_quantize_row_s8(const float *x, int64_t n, float scale, float zp, int8_t *y) {
    ei_qdq_axis_args a = { x, y, &scale, &zp, 1, 1, n, 0, 1 };
    quant_span(&a, (qdq_span){ 0, n, &scale, &zp, 0 });
}

static void dequant_span(const ei_qdq_axis_args *a, qdq_span sp) {
#if defined(EI_SIMD_READY)
    if (ei_has(EI_SIMD_ISA)) { dequant_span_simd(a, sp); return; }
#endif
    dequant_span_scalar(a, sp, 0);
}

static void quant_rows(void *ctx, int64_t b, int64_t e) {
    const ei_qdq_axis_args *a = (const ei_qdq_axis_args *)ctx;
    for (int64_t r = b; r < e; r++) quant_span(a, row_span(a, r));
}

static void dequant_rows(void *ctx, int64_t b, int64_t e) {
    const ei_qdq_axis_args *a = (const ei_qdq_axis_args *)ctx;
    for (int64_t r = b; r < e; r++) dequant_span(a, row_span(a, r));
}

static void run_rows(const ei_qdq_axis_args *a, ei_range_fn fn) {
    int64_t total = a->outer * a->c * a->inner, rows = row_count(a), len = total / EI_MAX(rows, 1);
    int t = total >= QDQ_PAR_ELEMS ? a->threads : 1;
    ei_parallel_for(rows, EI_MAX(1, QDQ_PAR_ELEMS / 2 / EI_MAX(len, 1)), fn, (void *)a, t);
}

EI_API void ei_quantize_axis_f32(const ei_qdq_axis_args *a) { run_rows(a, quant_rows); }

EI_API void ei_dequantize_axis_f32(const ei_qdq_axis_args *a) { run_rows(a, dequant_rows); }

/* ---- per tensor: one span over a range of elements, the parameters held still ---- */
typedef struct {
    const void *x; void *y; int64_t n;
    float scale, zp;          /* zp as float32, as the numpy kernel adds it */
    int32_t is_u8, threads;
} ei_qdq_args;

static ei_qdq_axis_args as_axis(const ei_qdq_args *t) {
    return (ei_qdq_axis_args){ t->x, t->y, &t->scale, &t->zp, 1, 1, t->n, t->is_u8, t->threads };
}

static void quant_tensor_range(void *ctx, int64_t b, int64_t e) {
    const ei_qdq_args *t = (const ei_qdq_args *)ctx;
    ei_qdq_axis_args a = as_axis(t);
    quant_span(&a, (qdq_span){ b, e - b, &t->scale, &t->zp, 0 });
}

static void dequant_tensor_range(void *ctx, int64_t b, int64_t e) {
    const ei_qdq_args *t = (const ei_qdq_args *)ctx;
    ei_qdq_axis_args a = as_axis(t);
    dequant_span(&a, (qdq_span){ b, e - b, &t->scale, &t->zp, 0 });
}

/* The input quantize is usually a run's first step, when the pool's workers are asleep: a
 * wake-up costs more than half of an image's quantize (1x3x224x224: 43 us on one thread, 71 us
 * on two), so it splits only from 1M elements. */
#define QUANT_PAR_ELEMS (1 << 20)

EI_API void ei_quantize_f32(const ei_qdq_args *a) {
    int t = a->n >= QUANT_PAR_ELEMS ? a->threads : 1;
    ei_parallel_for(a->n, QDQ_PAR_ELEMS / 2, quant_tensor_range, (void *)a, t);
}

EI_API void ei_dequantize_f32(const ei_qdq_args *a) {
    int t = a->n >= QDQ_PAR_ELEMS ? a->threads : 1;
    ei_parallel_for(a->n, QDQ_PAR_ELEMS / 2, dequant_tensor_range, (void *)a, t);
}

/* ---- self-test: the SIMD spans against the scalar ones, bit for bit, every row layout ---- */
static int selftest_geometry(int64_t outer, int64_t c, int64_t inner, uint32_t *st) {
    enum { N = 2048, C = 64 };
    static float x[N], back[2][N], scale[C], zp[C];
    static uint8_t q[2][N];
    int64_t n = outer * c * inner;
    int fails = 0;
    for (int64_t j = 0; j < c; j++) {
        *st = *st * 1664525u + 1013904223u;
        scale[j] = 0.001f + (float)(*st >> 12) / 1048576.0f * 0.05f;
        zp[j] = (float)((int)(*st % 200) - 100);
    }
    for (int64_t i = 0; i < n; i++) {
        *st = *st * 1664525u + 1013904223u;
        float s = scale[(i / inner) % c];
        x[i] = ((float)(*st >> 8) / 16777216.0f - 0.5f) * 300.0f * s;
        if (i % 5 == 0) x[i] = (rintf(x[i] / s) + 0.5f) * s;       /* near ties */
    }
    if (n > 5) { x[1] = 1e30f; x[2] = -1e30f; x[3] = NAN; x[4] = INFINITY; }
    for (int u = 0; u < 2; u++) {
        if (u) for (int64_t j = 0; j < c; j++) zp[j] += 100.0f;
        ei_qdq_axis_args a = { x, q[0], scale, zp, outer, c, inner, u, 1 };
        ei_qdq_axis_args s = a;
        s.y = q[1];
        quant_rows(&a, 0, row_count(&a));
        for (int64_t r = 0; r < row_count(&s); r++) quant_span_scalar(&s, row_span(&s, r), 0);
        fails += memcmp(q[0], q[1], (size_t)n) != 0;
        ei_qdq_axis_args d = { q[0], back[0], scale, zp, outer, c, inner, u, 1 };
        ei_qdq_axis_args ds = d;
        ds.y = back[1];
        dequant_rows(&d, 0, row_count(&d));
        for (int64_t r = 0; r < row_count(&ds); r++) dequant_span_scalar(&ds, row_span(&ds, r), 0);
        fails += memcmp(back[0], back[1], (size_t)n * sizeof(float)) != 0;
    }
    return fails;
}

/* the per-tensor entry points (spans at an offset, threads) against the scalar span */
static int selftest_tensor(uint32_t *st) {
    enum { N = 1037 };
    static float x[N], back[2][N];
    static uint8_t q[2][N];
    int fails = 0;
    for (int trial = 0; trial < 6; trial++) {
        float scale = 0.003f * (float)(trial + 1), zp = (float)(trial * 37 % 200 - 100);
        for (int i = 0; i < N; i++) {
            *st = *st * 1664525u + 1013904223u;
            x[i] = ((float)(*st >> 8) / 16777216.0f - 0.5f) * 300.0f * scale;
            if (i % 7 == 0) x[i] = (rintf(x[i] / scale) + 0.5f) * scale;      /* near ties */
        }
        x[3] = 1e30f; x[4] = -1e30f; x[5] = NAN;
        for (int u = 0; u < 2; u++) {
            ei_qdq_args t = { x, q[0], N, scale, u ? zp + 100.0f : zp, u, 2 };
            ei_qdq_axis_args s = as_axis(&t);
            ei_quantize_f32(&t);
            s.y = q[1];
            quant_span_scalar(&s, (qdq_span){ 0, N, &t.scale, &t.zp, 0 }, 0);
            fails += memcmp(q[0], q[1], N) != 0;
            ei_qdq_args d = { q[0], back[0], N, scale, t.zp, u, 2 };
            ei_dequantize_f32(&d);
            s = as_axis(&d);
            s.y = back[1];
            dequant_span_scalar(&s, (qdq_span){ 0, N, &d.scale, &d.zp, 0 }, 0);
            fails += memcmp(back[0], back[1], sizeof back[0]) != 0;
        }
    }
    return fails;
}

EI_API int ei_selftest_qdq(void) {
    static const int64_t geo[][3] = { {1, 3, 97}, {2, 5, 1}, {3, 64, 1}, {4, 7, 3}, {1, 2, 1}, {2, 13, 9}, {1, 1, 1} };
    uint32_t st = 7;
    int fails = 0;
    for (size_t g = 0; g < sizeof geo / sizeof geo[0]; g++) fails += selftest_geometry(geo[g][0], geo[g][1], geo[g][2], &st);
    return fails + selftest_tensor(&st);
}
