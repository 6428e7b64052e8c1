/* Shared pieces of the int8 kernels: TFLite fixed-point requantization (bit-exact with
 * edge_infer/backends/cpu/kernels/int8_common.py) and the output epilogue.
 *
 * MultiplyByQuantizedMultiplier(x, q, shift), q in [0, 2^31), shift = TFLite's (left > 0):
 *   x <<= max(shift, 0)                      (int32, wrapping)
 *   h  = SaturatingRoundingDoublingHighMul(x, q) = (x*q + 2^30) >> 31   (q != INT32_MIN: the
 *        nudge and C's truncating division collapse to one floor; see int8_common.Requantizer)
 *   RoundingDivideByPOT(h, e = max(-shift, 0)) = (h >> e) + ((h & mask) > (mask >> 1) + (h < 0))
 *
 * The epilogue adds the folded bias (int32: Python checks at prepare that |bias| + K*2^14
 * stays below 2^31, so the int32 accumulator equals the numpy kernels' int64 one), requantizes
 * per channel, adds zp_y and an optional residual term (a 256-entry int32 table of z's int8
 * value, |entry| <= 2^29, checked at prepare), clamps to [lo, hi] and stores int8. The
 * requantized value is clamped to +-2^30 before the additions: that cannot change the final
 * clamp (|residual| <= 2^29 cannot bring it back into [-128, 127]) and keeps the SIMD int32
 * sums from overflowing.
 *
 * A float32 multiplier (requantization mode "fp32", onnxruntime's and XNNPACK's): shift ==
 * EI_RQ_FP32 and q holds the bits of s, a float32 in [2^-32, 1): MBQM is then rint(float(x) * s),
 * float32 arithmetic rounded half to even, one rounding instead of TFLite's two. |x| < 2^31 and
 * s < 1 keep the product inside int32. A node's channels are all of one mode; a channel that
 * only fills a vector (q = 0, shift 0) gives 0 either way.
 */
#ifndef EI_INT8_H
#define EI_INT8_H

#include <math.h>
#include "edge_native.h"

#define EI_RQ_LIMIT (1 << 30)
#define EI_RQ_FP32 64           /* the shift of a float32 multiplier (q: its bits) */
#define EI_VQ_FP32 2            /* ei_vq16_prepare's flag: the 16 channels' q are float32 */

typedef struct {
    const int32_t *bias;    /* per channel, or NULL */
    const int32_t *mult;    /* per channel q */
    const int32_t *shift;   /* per channel TFLite shift */
    const int32_t *ztab;    /* residual table indexed by (uint8_t)z, or NULL */
    int32_t zp_y, lo, hi;
} ei_rq;

static inline int32_t ei_mbqm(int32_t x, int32_t q, int32_t shift) {
    if (shift == EI_RQ_FP32) {
        union { int32_t i; float f; } s = { q };
        return (int32_t)lrintf((float)x * s.f);
    }
    int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    x = (int32_t)((uint32_t)x << left);
    int32_t h = (int32_t)(((int64_t)x * q + (1LL << 30)) >> 31);
    int32_t mask = (int32_t)((1u << right) - 1u);
    int32_t rem = h & mask, thr = (mask >> 1) + (h < 0);
    return (h >> right) + (rem > thr);
}

/* the flag ei_vq_mbqm takes for channels with these shifts (see ei_vq16_prepare) */
static inline int ei_rq_flag(const int32_t *shift, int n) {
    int left = 0;
    for (int c = 0; c < n; c++) {
        if (shift[c] == EI_RQ_FP32) return EI_VQ_FP32;
        left |= shift[c] > 0;
    }
    return left;
}

/* one output value from its accumulator (bias already added) */
static inline int8_t ei_rq_one(int32_t acc, int32_t q, int32_t shift, int32_t zp_y, int32_t zt,
                               int32_t lo, int32_t hi) {
    int32_t v = ei_mbqm(acc, q, shift);
    v = v > EI_RQ_LIMIT ? EI_RQ_LIMIT : (v < -EI_RQ_LIMIT ? -EI_RQ_LIMIT : v);
    v += zp_y + zt;
    return (int8_t)(v < lo ? lo : (v > hi ? hi : v));
}

#if defined(__x86_64__)
#include <immintrin.h>
/* 8 channels: MBQM exactly as ei_mbqm, in 32/64-bit lanes */
__attribute__((target("avx2,fma")))
static inline __m256i mbqm8(__m256i x, __m256i q, __m256i shift) {
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(shift, _mm256_set1_epi32(EI_RQ_FP32))))
        return _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_cvtepi32_ps(x), _mm256_castsi256_ps(q)));
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
    const __m256i nudge = _mm256_set1_epi64x(1LL << 30);
    __m256i left = _mm256_max_epi32(shift, zero), right = _mm256_max_epi32(_mm256_sub_epi32(zero, shift), zero);
    x = _mm256_sllv_epi32(x, left);
    __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(x, q), nudge);
    __m256i po = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(q, 32)), nudge);
    /* bits 31..62 of each product: low half of pe >> 31, high half of po << 1 */
    __m256i h = _mm256_blend_epi32(_mm256_srli_epi64(pe, 31), _mm256_slli_epi64(po, 1), 0xAA);
    __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, right), one);
    __m256i rem = _mm256_and_si256(h, mask);
    __m256i thr = _mm256_sub_epi32(_mm256_srli_epi32(mask, 1), _mm256_cmpgt_epi32(zero, h));
    return _mm256_sub_epi32(_mm256_srav_epi32(h, right), _mm256_cmpgt_epi32(rem, thr));
}

/* 8 channels ch..ch+7 of accumulators (bias included) -> int8 in the low 8 bytes; z: the
 * residual's first value (stride zs) when rq->ztab */
__attribute__((target("avx2,fma")))
static inline __m128i ei_rq8_avx2(const ei_rq *rq, __m256i a, int ch, const int8_t *z, ptrdiff_t zs) {
    __m256i v = mbqm8(a, _mm256_loadu_si256((const __m256i *)(rq->mult + ch)),
                      _mm256_loadu_si256((const __m256i *)(rq->shift + ch)));
    v = _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(EI_RQ_LIMIT)), _mm256_set1_epi32(-EI_RQ_LIMIT));
    v = _mm256_add_epi32(v, _mm256_set1_epi32(rq->zp_y));
    if (rq->ztab) {
        __m256i idx;
        if (zs == 1) {
            idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)z));
        } else {
            int32_t t[8];
            for (int j = 0; j < 8; j++) t[j] = (uint8_t)z[j * zs];
            idx = _mm256_loadu_si256((const __m256i *)t);
        }
        v = _mm256_add_epi32(v, _mm256_i32gather_epi32(rq->ztab, idx, 4));
    }
    v = _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(rq->hi)), _mm256_set1_epi32(rq->lo));
    __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return _mm_packs_epi16(p16, p16);
}

/* AVX-512: 16 channels' epilogue on accumulators in registers (the int8 GEMM and depthwise
 * kernels with VNNI). MBQM and the rounding divide are done as ONE 64-bit floor: with
 * p = (x << left) * q (exact in int64) and e the right shift,
 *   h = floor((p + 2^30) / 2^31),  RoundingDivideByPOT(h, e) = floor((h + nud) / 2^e)
 * where nud = 2^(e-1) (h >= 0), 2^(e-1) - 1 (h < 0), 0 (e = 0); nud is an integer, so the two
 * floors merge: result = (p + 2^30 + nud * 2^31) >> (31 + e). The sign test may use p < 0
 * instead of h < 0: for -2^30 <= p < 0 both constants give 0. |p| < 2^62: nothing overflows.
 * The constants of 16 channels sit in one ei_vq16: even channels in the even 64-bit lanes'
 * terms (*e), odd channels in the odd ones' (*o). */
typedef struct {
    __m512i bias, q, qo, left;      /* int32 per channel: bias (+ a kernel's correction), q, left
                                     * shift; qo: q of the odd channels in the even dwords */
    __m512i ce, co, de, dO, se, so; /* int64: 2^30 + nud(h >= 0) * 2^31, the h < 0 difference, 31 + e */
} ei_vq16;

typedef struct {
    __m512i lo, hi, zp, lim;        /* lo/hi: clamp bounds (minus zp_y when there is no residual) */
    int left;                       /* some channel shifts left */
    const int32_t *ztab;
    __m512i zp16, lo8, hi8;         /* ei_vq_pack4: zp_y in int16 lanes, lo and hi in int8 lanes */
} ei_vqc;

/* one channel's shift as ei_vq16's terms: its left shift l, and for the right shift e the
 * rounding constant ce (2^30 + nud(h >= 0) * 2^31), the h < 0 difference dd and the total shift ss */
static inline void ei_vq_shift_terms(int32_t sh, int32_t *l, int64_t *ce, int64_t *dd, int64_t *ss) {
    int e = sh > 0 ? 0 : -sh;
    *l = sh > 0 ? sh : 0;
    *ce = (1LL << 30) + (e > 0 ? (1LL << (30 + e)) : 0);
    *dd = e > 0 ? -(1LL << 31) : 0;
    *ss = 31 + e;
}

/* channels 0 .. n - 1 (n <= 16) of bias (or NULL), corr (added to the bias, or NULL), mult and
 * shift; the others get neutral constants. Returns 1 when a channel shifts left, EI_VQ_FP32
 * when the multipliers are float32 (q: their bits), else 0: the flag ei_vq_mbqm takes. */
__attribute__((target("avx512f,avx512bw")))
static inline int ei_vq16_prepare(ei_vq16 *o, const int32_t *bias, const int32_t *corr, const int32_t *mult,
                                  const int32_t *shift, int n) {
    int32_t b[16], q[16], l[16], qo[16];
    int64_t ce[16], dd[16], ss[16], te[8], to[8], de[8], dO[8], se[8], so[8];
    int left = 0, fp32 = ei_rq_flag(shift, n) == EI_VQ_FP32;
    for (int i = 0; i < 16; i++) {
        int ok = i < n;
        b[i] = (int32_t)((uint32_t)(ok && bias ? bias[i] : 0) + (uint32_t)(corr ? corr[i] : 0));
        q[i] = ok ? mult[i] : 0;
        ei_vq_shift_terms(ok && !fp32 ? shift[i] : 0, &l[i], &ce[i], &dd[i], &ss[i]);
        left |= l[i];
    }
    for (int j = 0; j < 8; j++) {
        te[j] = ce[2 * j]; to[j] = ce[2 * j + 1]; de[j] = dd[2 * j]; dO[j] = dd[2 * j + 1];
        se[j] = ss[2 * j]; so[j] = ss[2 * j + 1];
        qo[2 * j] = q[2 * j + 1]; qo[2 * j + 1] = 0;
    }
    o->bias = _mm512_loadu_si512(b); o->q = _mm512_loadu_si512(q);
    o->qo = _mm512_loadu_si512(qo); o->left = _mm512_loadu_si512(l);
    o->ce = _mm512_loadu_si512(te); o->co = _mm512_loadu_si512(to);
    o->de = _mm512_loadu_si512(de); o->dO = _mm512_loadu_si512(dO);
    o->se = _mm512_loadu_si512(se); o->so = _mm512_loadu_si512(so);
    return fp32 ? EI_VQ_FP32 : left != 0;
}

/* ei_vq16_prepare with one multiplier and shift in all 16 lanes and no bias (a tensor-wide
 * requantization: the gate Mul, the requantized mean), from broadcasts: the per-lane arrays
 * stored one by one and reloaded cost a store-forwarding stall per vector on every call */
__attribute__((target("avx512f,avx512bw")))
static inline int ei_vq16_prepare1(ei_vq16 *o, int32_t mult, int32_t shift) {
    int fp32 = shift == EI_RQ_FP32;
    int32_t l;
    int64_t ce, dd, ss;
    ei_vq_shift_terms(fp32 ? 0 : shift, &l, &ce, &dd, &ss);
    o->bias = _mm512_setzero_si512();
    o->q = _mm512_set1_epi32(mult);
    o->qo = _mm512_set1_epi64((int64_t)(uint32_t)mult);
    o->left = _mm512_set1_epi32(l);
    o->ce = o->co = _mm512_set1_epi64(ce);
    o->de = o->dO = _mm512_set1_epi64(dd);
    o->se = o->so = _mm512_set1_epi64(ss);
    return fp32 ? EI_VQ_FP32 : l != 0;
}

__attribute__((target("avx512f,avx512bw")))
static inline void ei_vqc_prepare(ei_vqc *c, const int32_t *ztab, int32_t zp_y, int32_t lo, int32_t hi, int left) {
    c->ztab = ztab;
    c->left = left;
    c->zp = _mm512_set1_epi32(zp_y);
    c->lim = _mm512_set1_epi32(EI_RQ_LIMIT);
    c->lo = _mm512_set1_epi32(ztab ? lo : lo - zp_y);
    c->hi = _mm512_set1_epi32(ztab ? hi : hi - zp_y);
    c->zp16 = _mm512_set1_epi16((short)zp_y);
    c->lo8 = _mm512_set1_epi8((char)lo);
    c->hi8 = _mm512_set1_epi8((char)hi);
}

/* 16 accumulators (bias included) -> requantized int32 (before zp_y), as ei_mbqm */
__attribute__((target("avx512f,avx512bw")))
static inline __m512i ei_vq_mbqm(__m512i x, const ei_vq16 *k, int left) {
    if (left & EI_VQ_FP32)
        return _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(x), _mm512_castsi512_ps(k->q)));
    const __m512i zero = _mm512_setzero_si512();
    if (left) x = _mm512_sllv_epi32(x, k->left);
    __m512i pe = _mm512_mul_epi32(x, k->q), po = _mm512_mul_epi32(_mm512_srli_epi64(x, 32), k->qo);
    __mmask8 ne = _mm512_cmplt_epi64_mask(pe, zero), no = _mm512_cmplt_epi64_mask(po, zero);
    pe = _mm512_add_epi64(pe, k->ce); po = _mm512_add_epi64(po, k->co);
    pe = _mm512_mask_add_epi64(pe, ne, pe, k->de); po = _mm512_mask_add_epi64(po, no, po, k->dO);
    pe = _mm512_srav_epi64(pe, k->se); po = _mm512_srav_epi64(po, k->so);
    return _mm512_mask_shuffle_epi32(pe, (__mmask16)0xAAAA, po, _MM_PERM_CDAB);
}

/* 16 channels: requantize, add zp_y (and the residual z's table value), clamp, store int8 under
 * mask m (z read under the same mask) */
__attribute__((target("avx512f,avx512bw")))
static inline void ei_vq_store(const ei_vqc *c, const ei_vq16 *k, __mmask16 m, __m512i acc, int8_t *y,
                               const int8_t *z) {
    __m512i r = ei_vq_mbqm(acc, k, c->left);
    if (c->ztab) {
        r = _mm512_max_epi32(_mm512_min_epi32(r, c->lim), _mm512_sub_epi32(_mm512_setzero_si512(), c->lim));
        __m512i zi = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(_mm512_maskz_loadu_epi8((__mmask64)m, z)));
        r = _mm512_add_epi32(_mm512_add_epi32(r, c->zp), _mm512_i32gather_epi32(zi, c->ztab, 4));
        r = _mm512_max_epi32(_mm512_min_epi32(r, c->hi), c->lo);
    } else {
        r = _mm512_add_epi32(_mm512_max_epi32(_mm512_min_epi32(r, c->hi), c->lo), c->zp);
    }
    __m128i b = _mm512_cvtepi32_epi8(r);        /* the register form: vpmovdb to memory is slow on Zen 4 */
    if (m == 0xFFFF) _mm_storeu_si128((__m128i *)y, b);
    else _mm512_mask_storeu_epi8(y, (__mmask64)m, _mm512_castsi128_si512(b));
}

/* Four requantized vectors (ei_vq_mbqm's, before zp_y) -> 64 int8: r0's 16 values, then r1's,
 * r2's, r3's, with zp_y added and clamped to [lo, hi] (no residual: c->ztab NULL). The same
 * bytes as ei_vq_store's clamp-add-narrow, in a third of its instructions per value: saturating
 * packs to int16, + zp_y saturating, packs to int8, then [lo, hi] in int8 lanes. A value the
 * int16 pack saturates stays outside [-128, 127] after adding |zp_y| <= 128, as it would in
 * int32, so both clamp it alike. (The requantization is most of a pointwise conv's time.)
 * ei_vq_pack4_full: without the [lo, hi] clamp, for [lo, hi] = [-128, 127]. */
__attribute__((target("avx512f,avx512bw")))
static inline __m512i ei_vq_pack4_full(const ei_vqc *c, __m512i r0, __m512i r1, __m512i r2, __m512i r3) {
    /* the packs work per 128-bit lane: dword 4j + i of the result is r_i's values 4j .. 4j + 3 */
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    __m512i a = _mm512_adds_epi16(_mm512_packs_epi32(r0, r1), c->zp16);
    __m512i b = _mm512_adds_epi16(_mm512_packs_epi32(r2, r3), c->zp16);
    return _mm512_permutexvar_epi32(order, _mm512_packs_epi16(a, b));
}

__attribute__((target("avx512f,avx512bw")))
static inline __m512i ei_vq_pack4(const ei_vqc *c, __m512i r0, __m512i r1, __m512i r2, __m512i r3) {
    return _mm512_min_epi8(_mm512_max_epi8(ei_vq_pack4_full(c, r0, r1, r2, r3), c->lo8), c->hi8);
}

/* four vectors with the same 16 channels' constants (k), no residual: requantized and stored
 * under mask m at y, y + ys, y + 2 ys, y + 3 ys (four pixels of a depthwise row) */
__attribute__((target("avx512f,avx512bw")))
static inline void ei_vq_store4(const ei_vqc *c, const ei_vq16 *k, __mmask16 m, __m512i a0, __m512i a1,
                                __m512i a2, __m512i a3, int8_t *y, ptrdiff_t ys) {
    __m512i p = ei_vq_pack4(c, ei_vq_mbqm(a0, k, c->left), ei_vq_mbqm(a1, k, c->left), ei_vq_mbqm(a2, k, c->left),
                            ei_vq_mbqm(a3, k, c->left));
    if (ys == 16 && m == 0xFFFF) { _mm512_storeu_si512(y, p); return; }
    __m128i q[4] = { _mm512_castsi512_si128(p), _mm512_extracti32x4_epi32(p, 1), _mm512_extracti32x4_epi32(p, 2),
                     _mm512_extracti32x4_epi32(p, 3) };
    for (int i = 0; i < 4; i++) {
        if (m == 0xFFFF) _mm_storeu_si128((__m128i *)(y + i * ys), q[i]);
        else _mm512_mask_storeu_epi8(y + i * ys, (__mmask64)m, _mm512_castsi128_si512(q[i]));
    }
}
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
static inline int32x4_t mbqm4(int32x4_t x, int32x4_t q, int32x4_t shift) {
    if (vmaxvq_u32(vceqq_s32(shift, vdupq_n_s32(EI_RQ_FP32))))
        return vcvtnq_s32_f32(vmulq_f32(vcvtq_f32_s32(x), vreinterpretq_f32_s32(q)));
    const int32x4_t zero = vdupq_n_s32(0), one = vdupq_n_s32(1);
    int32x4_t left = vmaxq_s32(shift, zero), right = vmaxq_s32(vnegq_s32(shift), zero);
    x = vshlq_s32(x, left);
    int32x4_t h = vqrdmulhq_s32(x, q);        /* SaturatingRoundingDoublingHighMul */
    int32x4_t mask = vsubq_s32(vshlq_s32(one, right), one);
    int32x4_t rem = vandq_s32(h, mask);
    int32x4_t thr = vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(mask), 1)),
                              vreinterpretq_s32_u32(vcltq_s32(h, zero)));
    int32x4_t r = vshlq_s32(h, vnegq_s32(right));
    return vsubq_s32(r, vreinterpretq_s32_u32(vcgtq_s32(rem, thr)));
}

/* 8 channels (two int32x4, bias included) -> int8x8 (see ei_rq8_avx2) */
static inline int8x8_t ei_rq8_neon(const ei_rq *rq, int32x4_t a0, int32x4_t a1, int ch, const int8_t *z,
                                   ptrdiff_t zs) {
    int32x4_t v[2], a[2] = { a0, a1 };
    for (int h = 0; h < 2; h++) {
        int32x4_t r = mbqm4(a[h], vld1q_s32(rq->mult + ch + 4 * h), vld1q_s32(rq->shift + ch + 4 * h));
        r = vaddq_s32(vmaxq_s32(vminq_s32(r, vdupq_n_s32(EI_RQ_LIMIT)), vdupq_n_s32(-EI_RQ_LIMIT)),
                      vdupq_n_s32(rq->zp_y));
        if (rq->ztab) {
            int32_t t[4];
            for (int j = 0; j < 4; j++) t[j] = rq->ztab[(uint8_t)z[(4 * h + j) * zs]];
            r = vaddq_s32(r, vld1q_s32(t));
        }
        v[h] = vmaxq_s32(vminq_s32(r, vdupq_n_s32(rq->hi)), vdupq_n_s32(rq->lo));
    }
    return vqmovn_s16(vcombine_s16(vqmovn_s32(v[0]), vqmovn_s32(v[1])));
}
#endif

/* y[i * ys] = epilogue(acc[i]) for channels ch0 .. ch0 + n - 1; z (residual, same layout as y)
 * read at z[i * ys] when rq->ztab. simd: use the SIMD path of this machine (0: scalar). */
void ei_rq_run(int simd, const ei_rq *rq, const int32_t *acc, int ch0, int n, int8_t *y,
               ptrdiff_t ys, const int8_t *z);

/* the SIMD flag kernels pass to ei_rq_run, from the current ISA mask */
int ei_rq_simd(void);

/* pieces of the int8 global average pool (int8_misc.c) and broadcast Mul (int8_ops.c) that the
 * fused squeeze-excite step (se.c) runs in its own thread shares; args: the steps' own structs */
void ei_global_pool_s8_sums(const void *args, int64_t q0, int64_t q1, int32_t *acc);
void ei_global_pool_s8_store(const void *args, const int32_t *acc);
void ei_int8_bcast_rows(const void *args, int64_t r0, int64_t r1);


#endif
