/* Per-tensor QuantizeLinear of 16 floats in AVX-512 registers, exactly as the scalar division
 * rint(x / scale) (qdq.c's reference loop, kernels/int8_qdq.py), shared by qdq.c and the int8
 * stem's line buffers (int8_stem.c).
 *
 * With r_lo <= 1 / scale <= r_hi adjacent floats (equal when 1 / scale is one), x r_lo and
 * x r_hi bracket x / scale, and rounding being monotonic, so do fl(x r_lo) and fl(x r_hi)
 * bracket fl(x / scale). Where both convert (round half to even) to one integer q, that is
 * rint(fl(x / scale)), ties included, unless q is the conversion's 0x80000000 (NaN, infinities,
 * |t| >= 2^31). Lanes that fail the test go through vdivps (ei_q16_exact). Two products, two
 * conversions and two compares a vector; the distance test used before (t - rint(t) against
 * 0.5 - 2^-21 |t|) failed on every exact tie, and 8-bit pixels mapped to [-1, 1] by p / 127.5
 * - 1 with scale 1 / 127.5 are all ties: their QuantizeLinear took 116 instead of 3.4 us
 * (1x3x48x192), 638 instead of 15 us (1x3x224x224), through the scalar division (now 6.4 and
 * 30 us; 2.6 and 12.8 on random floats).
 * The caller keeps 1 / scale normal (2^-120 < |scale| < 2^120). */
#ifndef EI_QUANT_H
#define EI_QUANT_H

#include <math.h>
#include <stdint.h>

/* the adjacent floats around 1 / s: r s compared with 1 in double (exact: 24 + 24 bits) */
static inline void ei_recip_bracket(float s, float *lo, float *hi) {
    float r = 1.0f / s;
    double e = (double)r * (double)s;
    int above = s > 0 ? e > 1.0 : e < 1.0;          /* r > 1 / s */
    *lo = *hi = r;
    if (e != 1.0) {
        if (above) *lo = nextafterf(r, -INFINITY);
        else *hi = nextafterf(r, INFINITY);
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

typedef struct {
    __m512 r_lo, r_hi, s, lo, hi;
    __m512i bad, nan_q;
} ei_q16;

/* the constants for scale s and zero point zp (a NaN gives -zp here: 0 once zp is added) */
__attribute__((target("avx512f")))
static inline void ei_q16_prepare(ei_q16 *k, float s, int32_t zp) {
    float lo, hi;
    ei_recip_bracket(s, &lo, &hi);
    k->r_lo = _mm512_set1_ps(lo);
    k->r_hi = _mm512_set1_ps(hi);
    k->s = _mm512_set1_ps(s);
    k->lo = _mm512_set1_ps(-1024.0f);
    k->hi = _mm512_set1_ps(1024.0f);
    k->bad = _mm512_set1_epi32(INT32_MIN);
    k->nan_q = _mm512_set1_epi32(-zp);
}

/* rint(x / s) where the bracket decides it; lanes where it does not are cleared from *ok */
__attribute__((target("avx512f"), always_inline))
static inline __m512i ei_q16_fast(const ei_q16 *k, __m512 x, __mmask16 *ok) {
    const int rn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(x, k->r_lo), rn);
    __m512i q2 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(x, k->r_hi), rn);
    *ok = _mm512_mask_cmpneq_epi32_mask(_mm512_mask_cmpeq_epi32_mask(*ok, q, q2), q, k->bad);
    return q;
}

/* rint(x / s) by the division, limited to +-1024 (the int8 / uint8 clamp decides past it), a
 * NaN -> -zp */
__attribute__((target("avx512f"), always_inline))
static inline __m512i ei_q16_exact(const ei_q16 *k, __m512 x) {
    __m512 t = _mm512_roundscale_ps(_mm512_div_ps(x, k->s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    t = _mm512_min_ps(_mm512_max_ps(t, k->lo), k->hi);          /* NaN -> lo, replaced below */
    return _mm512_mask_mov_epi32(_mm512_cvtps_epi32(t), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), k->nan_q);
}
#endif

#endif
