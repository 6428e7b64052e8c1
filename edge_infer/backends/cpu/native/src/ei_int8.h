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
 */
#ifndef EI_INT8_H
#define EI_INT8_H

#include "edge_native.h"

#define EI_RQ_LIMIT (1 << 30)

typedef struct {
    const int32_t *bias;    /* per channel, or NULL */
    const int32_t *mult;    /* per channel q */
    const int32_t *shift;   /* per channel TFLite shift */
    const int32_t *ztab;    /* residual table indexed by (uint8_t)z, or NULL */
    int32_t zp_y, lo, hi;
} ei_rq;

static inline int32_t ei_mbqm(int32_t x, int32_t q, int32_t shift) {
    int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    x = (int32_t)((uint32_t)x << left);
    int32_t h = (int32_t)(((int64_t)x * q + (1LL << 30)) >> 31);
    int32_t mask = (int32_t)((1u << right) - 1u);
    int32_t rem = h & mask, thr = (mask >> 1) + (h < 0);
    return (h >> right) + (rem > thr);
}

/* one output value from its accumulator (bias already added) */
static inline int8_t ei_rq_one(int32_t acc, int32_t q, int32_t shift, int32_t zp_y, int32_t zt,
                               int32_t lo, int32_t hi) {
    int32_t v = ei_mbqm(acc, q, shift);
    v = v > EI_RQ_LIMIT ? EI_RQ_LIMIT : (v < -EI_RQ_LIMIT ? -EI_RQ_LIMIT : v);
    v += zp_y + zt;
    return (int8_t)(v < lo ? lo : (v > hi ? hi : v));
}

/* y[i * ys] = epilogue(acc[i]) for channels ch0 .. ch0 + n - 1; z (residual, same layout as y)
 * read at z[i * ys] when rq->ztab. simd: use the SIMD path of this machine (0: scalar). */
void ei_rq_run(int simd, const ei_rq *rq, const int32_t *acc, int ch0, int n, int8_t *y,
               ptrdiff_t ys, const int8_t *z);

/* the SIMD flag kernels pass to ei_rq_run, from the current ISA mask */
int ei_rq_simd(void);

#endif
