/* The argument struct of the depthwise kernels (depthwise.c: int8 and fp32 NCHW/NHWC in the
 * numpy kernels' order; depthwise_f32.c: the fp32 NHWC kernel with FMAs). Mirrored by
 * DepthwiseArgs in native/kernels.py: change both. */
#ifndef EI_DEPTHWISE_H
#define EI_DEPTHWISE_H

#include "edge_native.h"
#include "ei_activations.h"

/* the fused activations of these kernels: codes of the one activation table (ei_activations.h) */
enum { ACT_NONE = EI_ACT_NONE, ACT_RELU = EI_ACT_RELU, ACT_CLIP = EI_ACT_CLIP, ACT_HARDSWISH = EI_ACT_HARDSWISH,
       ACT_HARDSIGMOID = EI_ACT_HARDSIGMOID, ACT_LEAKYRELU = EI_ACT_LEAKYRELU };

typedef struct {
    const void *x;
    void *y;
    const void *z;              /* residual (y's shape and layout) or NULL */
    const void *wt;             /* int8: int16 weights; fp32: float. NHWC (taps, C); NCHW (C, taps) */
    const void *bias;           /* int8: folded int32; fp32: float or NULL */
    const int32_t *mult, *shift, *ztab;
    const void *pad;            /* NHWC: one row of C pad values (zp_x int8 / 0.0f) */
    void *scratch;              /* threads * ei_dw_scratch() bytes */
    int32_t is_int8, nchw, n, c, h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
    int32_t zp_x, zp_y, lo, hi, act, threads;
    float a0, a1;               /* Clip min/max, HardSigmoid alpha/beta, LeakyRelu alpha */
    const void *consts;         /* int8 NHWC: ei_dw_prepare's constants, or NULL (made per call) */
    const int8_t *lut;          /* 256-entry activation table applied to each requantized output,
                                 * clamped to [lo, hi] first: y = lut[(uint8_t)q] (ei_lut.h), or NULL */
} ei_dw_args;

/* depthwise_small.c: int8 NHWC layers on small images (AVX-512 VNNI + VBMI); depthwise.c picks it
 * where dws_fits and ei_dw_prepare made its constants (dwq_consts_bytes of depthwise.c's quad
 * constants, then dws_consts_bytes of its own) */
int dws_fits(const ei_dw_args *a);
int64_t dws_scratch(const ei_dw_args *a);
int64_t dws_consts_bytes(const ei_dw_args *a);
void dws_prepare(const ei_dw_args *a, char *out);
void dws_rows(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch);
int dws_lut_in_regs(const ei_dw_args *a);
int64_t dwq_consts_bytes(const ei_dw_args *a);
int dws_pairs_fits(const ei_dw_args *a);
void dws_pairs_rows(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch);

#endif
