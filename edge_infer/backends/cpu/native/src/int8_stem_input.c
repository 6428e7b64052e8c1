/* The int8 stem's float input (ei_int8_stem_q, int8_stem.c): its rows quantized as the
 * QuantizeLinear kernels do (qdq.c, bit for bit) and, NCHW, interleaved into the NHWC line
 * buffers; with AVX-512 VBMI the VNNI kind's u8 lines in one pass (ei_stem_line_f32). */
#include "int8_stem.h"
#include "ei_quant.h"

#include <math.h>
#include <string.h>

/* ---- a float input's rows: quantized, then (NCHW) interleaved into NHWC order ---- */

/* the plane rows' stride in the quantized-row scratch (64-byte over-reads stay inside) */
static int64_t plane_stride(const ei_int8_conv_args *a) { return ((int64_t)a->w + 64 + 63) / 64 * 64; }

/* bytes after a slot's lines: the NHWC row (+ 64) and c quantized plane rows */
int64_t ei_stem_qrow_bytes(const ei_int8_conv_args *a) {
    return ((int64_t)a->w * a->c + 64 + 63) / 64 * 64 + (int64_t)a->c * plane_stride(a);
}

#if defined(__x86_64__)
/* the byte indices of interleave_vbmi for c channels, made once a call */
static void interleave_index(int c, stem_ilv *t) {
    const int P = 64 / c;
    t->hi = 0;
    for (int e = 0; e < 64; e++) {
        int px = e / c < P ? e / c : P - 1, ch = e % c;
        t->i01[e] = (uint8_t)((ch == 1 ? 64 : 0) + px);
        t->i23[e] = (uint8_t)((ch == 3 ? 64 : 0) + px);
        if (ch >= 2) t->hi |= 1ULL << e;
    }
}

/* d[p * c + ch] = planes[ch * ps + p] for p < n, c = 2 .. 4: 64 / c pixels a step, two
 * vpermt2b and a blend (the interleave of 3 planes: 1.5 instructions per 16 pixels) */
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static void interleave_vbmi(const stem_ilv *t8, const int8_t *planes, int64_t ps, int c, int64_t n, int8_t *d) {
    const int P = 64 / c;
    const uint64_t hi = t8->hi;
    const __m512i x01 = _mm512_loadu_si512(t8->i01), x23 = _mm512_loadu_si512(t8->i23);
    for (int64_t p0 = 0; p0 < n; p0 += P) {
        int np = (int)EI_MIN((int64_t)P, n - p0);
        __mmask64 lm = (1ULL << np) - 1, sm = np * c == 64 ? ~0ULL : (1ULL << (np * c)) - 1;
        __m512i s0 = _mm512_maskz_loadu_epi8(lm, planes + p0), s1 = _mm512_maskz_loadu_epi8(lm, planes + ps + p0);
        __m512i t = _mm512_permutex2var_epi8(s0, x01, s1);
        if (c > 2) {
            __m512i s2 = _mm512_maskz_loadu_epi8(lm, planes + 2 * ps + p0);
            __m512i s3 = c > 3 ? _mm512_maskz_loadu_epi8(lm, planes + 3 * ps + p0) : s2;
            t = _mm512_mask_blend_epi8(hi, t, _mm512_permutex2var_epi8(s2, x23, s3));
        }
        _mm512_mask_storeu_epi8(d + p0 * c, sm, t);
    }
}

int ei_stem_has_vbmi(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw"); }
    return v && ei_has(EI_AVX512);
}
#endif

#if defined(__x86_64__)
/* a VNNI line (u8) of row iy of image b of an NCHW float input in one pass: 16 pixels a step,
 * each plane's 16 values quantized in registers exactly as qdq.c's division (ei_quant.h: the
 * bracket test, vdivps for the steps it does not decide), packed with saturation as qdq.c
 * does (+ zp_x + 128 in int16 lanes, then to u8: the clamp and the flip to u8 at once), one
 * vpermb to NHWC order. As separate passes (quantize, interleave, flip) the row cost 10 us more
 * than the quantize and transpose steps it replaces (MobileNetV3 224, 1 thread). One function
 * per channel count (the planes in registers, the constants hoisted: the loop over c had kept
 * q[] on the stack and branched per plane). The steps the test did not decide went through
 * ei_quantize_row_s8 a plane at a time (its scalar division: 4% of the text classifier's stem
 * on random floats; on 8-bit pixels mapped to [-1, 1] with scale 1 / 127.5, all ties, 406 us
 * instead of 11.7). */
#define LINE_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vbmi")))

typedef struct {
    ei_q16 q;
    __m512i zp16, idx;
} line_consts;

/* n pixels of C planes (ps floats apart) into d (NHWC u8) */
LINE_TARGET __attribute__((always_inline))
static inline void line_f32_planes(const line_consts *k, const float *plane, int64_t ps, uint8_t *d, int64_t n,
                                   const int C, int64_t pf) {
    for (int64_t p0 = 0; p0 < n; p0 += 16) {
        const int np = (int)EI_MIN((int64_t)16, n - p0);
        const __mmask16 lm = np == 16 ? 0xFFFF : (__mmask16)((1u << np) - 1);
        __m512 x[4];
        __m512i q[4];
        __mmask16 ok = 0xFFFF;
        for (int ch = 0; ch < C; ch++) {
            if (pf) _mm_prefetch((const char *)(plane + ch * ps + p0 + pf), _MM_HINT_T0);
            x[ch] = _mm512_maskz_loadu_ps(lm, plane + ch * ps + p0);
            q[ch] = ei_q16_fast(&k->q, x[ch], &ok);
        }
        if (ok != 0xFFFF)               /* a near tie, NaN, inf or |t| >= 2^31: the division */
            for (int ch = 0; ch < C; ch++) q[ch] = ei_q16_exact(&k->q, x[ch]);
        /* byte 16 j + 4 ch + k: channel ch of pixel 4 j + k (the packs work per 128-bit lane) */
        __m512i lo = _mm512_adds_epi16(_mm512_packs_epi32(q[0], q[C > 1 ? 1 : 0]), k->zp16);
        __m512i hi = C > 2 ? _mm512_adds_epi16(_mm512_packs_epi32(q[2], q[C > 3 ? 3 : 2]), k->zp16) : lo;
        const __mmask64 sm = np * C == 64 ? ~0ULL : (1ULL << (np * C)) - 1;
        _mm512_mask_storeu_epi8(d + p0 * C, sm, _mm512_permutexvar_epi8(k->idx, _mm512_packus_epi16(lo, hi)));
    }
}

LINE_TARGET void ei_stem_line_f32(const stem_ctx *s, int64_t b, int64_t iy, uint8_t *d, int64_t n) {
    const ei_int8_conv_args *a = s->a;
    const int c = a->c;
    const float *plane = s->q->xf + ((b * c) * a->h + iy) * a->w;
    const int64_t ps = (int64_t)a->h * a->w;
    /* the row after next prefetched while this one is made, where the input is past L2's
     * share (MobileNetV3 224's 600 KB, in its plan: the stem 62 -> 59 us; the text
     * classifier's 110 KB lost 0.3 us to the prefetches) */
    const int64_t pf = iy + 2 < a->h && ps * c * 4 > (1 << 18) ? 2 * (int64_t)a->w : 0;
    line_consts k;
    ei_q16_prepare(&k.q, s->q->scale, a->zp_x);
    k.zp16 = _mm512_set1_epi16((short)(a->zp_x + 128));
    k.idx = _mm512_loadu_si512(s->ilv.i01);
    switch (c) {
    case 1: line_f32_planes(&k, plane, ps, d, n, 1, pf); break;
    case 2: line_f32_planes(&k, plane, ps, d, n, 2, pf); break;
    case 3: line_f32_planes(&k, plane, ps, d, n, 3, pf); break;
    default: line_f32_planes(&k, plane, ps, d, n, 4, pf); break;
    }
}
#endif

/* the byte index of ei_stem_line_f32: NHWC byte e (channel e % c of pixel e / c) from the packs */
static void pixel_index(int c, stem_ilv *t) {
    for (int e = 0; e < 64; e++) {
        int px = e < 16 * c ? e / c : 0, ch = e % c;
        t->i01[e] = (uint8_t)((px / 4) * 16 + ch * 4 + px % 4);
    }
}

static void interleave(const stem_ctx *s, const int8_t *planes, int64_t ps, int c, int64_t n, int8_t *d) {
    int64_t p = 0;
    (void)s;
#if defined(__x86_64__)
    if (c > 1 && ei_stem_has_vbmi()) { interleave_vbmi(&s->ilv, planes, ps, c, n, d); return; }
#elif defined(__aarch64__)
    if (ei_has(EI_NEON))            /* the structure stores interleave 16 pixels at once */
        for (; p + 16 <= n; p += 16) {
            const int8_t *s = planes + p;
            if (c == 2) vst2q_s8(d + 2 * p, (int8x16x2_t){ { vld1q_s8(s), vld1q_s8(s + ps) } });
            else if (c == 3) vst3q_s8(d + 3 * p, (int8x16x3_t){ { vld1q_s8(s), vld1q_s8(s + ps), vld1q_s8(s + 2 * ps) } });
            else if (c == 4)
                vst4q_s8(d + 4 * p, (int8x16x4_t){ { vld1q_s8(s), vld1q_s8(s + ps), vld1q_s8(s + 2 * ps), vld1q_s8(s + 3 * ps) } });
            else break;
        }
#endif
    for (; p < n; p++)
        for (int ch = 0; ch < c; ch++) d[p * c + ch] = planes[ch * ps + p];
}

/* row iy of image b of the float input, its first line_cols columns quantized into qrow (NHWC) */
const int8_t *ei_stem_quantized_row(const stem_ctx *s, int64_t b, int64_t iy, int8_t *qrow) {
    const ei_int8_conv_args *a = s->a;
    const ei_int8_stem_q_args *q = s->q;
    const int c = a->c;
    const int64_t n = line_cols(a, &s->g);
    if (!q->nchw || c == 1) {
        ei_quantize_row_s8(q->xf + ((b * a->h + iy) * a->w) * c, n * c, q->scale, q->zp, qrow);
        return qrow;
    }
    const int64_t ps = plane_stride(a);
    int8_t *planes = qrow + ((int64_t)a->w * c + 64 + 63) / 64 * 64;
    for (int ch = 0; ch < c; ch++)
        ei_quantize_row_s8(q->xf + (((b * c + ch) * a->h + iy) * a->w), n, q->scale, q->zp, planes + ch * ps);
    interleave(s, planes, ps, c, n, qrow);
    return qrow;
}

/* s->ilv and s->f32_vbmi for s->q (after s->kind) */
void ei_stem_input_prepare(stem_ctx *s) {
    const ei_int8_conv_args *a = s->a;
    const ei_int8_stem_q_args *q = s->q;
    s->f32_vbmi = 0;
#if defined(__x86_64__)
    if (q && q->nchw && a->c > 1) interleave_index(a->c, &s->ilv);
    if (q && q->nchw && s->kind == KIND_VNNI && ei_stem_has_vbmi() && fabsf(q->scale) > 0x1p-120f
        && fabsf(q->scale) < 0x1p120f) {
        s->f32_vbmi = 1;            /* 1 / scale normal: the bracket test holds (ei_quant.h) */
        pixel_index(a->c, &s->ilv);
    }
#else
    (void)a; (void)q;
#endif
}
