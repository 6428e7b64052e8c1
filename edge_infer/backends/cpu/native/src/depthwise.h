/* The argument struct of the depthwise kernels (depthwise.c: int8 and fp32 NCHW/NHWC in the
 * numpy kernels' order, and the dispatch; depthwise_quad.c: int8 NHWC on quads with AVX-512
 * VNNI + VBMI; depthwise_f32.c: the fp32 NHWC kernel with FMAs). Mirrored by DepthwiseArgs in
 * native/kernels.py: change both. Then the declarations these files share (not the library's
 * interface). */
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
 * where dws_fits and ei_dw_prepare made its constants (dwq_consts_bytes of depthwise_quad.c's quad
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

/* the library's entry points (depthwise.c, depthwise_quad.c), for the self-test */
EI_API int64_t ei_dw_scratch(const ei_dw_args *a);
EI_API int64_t ei_dw_consts_size(const ei_dw_args *a);
EI_API void ei_dw_prepare(const ei_dw_args *a, void *out);
EI_API void ei_depthwise(const ei_dw_args *a);

/* the most taps of the int8 NHWC kernels (tap pointers and quad-row slots on the stack) */
#define DW8_MAX_TAPS 64
/* the args depthwise_quad.c's kernels compute (where the CPU has AVX-512 VNNI + VBMI) */
#define DWQ_OK(a) ((a)->is_int8 && !(a)->nchw && (a)->dh == 1 && (a)->dw == 1 && (a)->kh * (a)->kw <= DW8_MAX_TAPS \
                   && ((a)->kw <= 4 || 4 % (a)->sw == 0))
/* how ei_dwq_rows builds its quad rows: from scratch; by a chain of shifts (dwq_build_shift); from
 * every 4 / sw-th quad (dwq_build_blocks). The shifts need VBMI2, stride 1 or 2 and 16 channels
 * or more (8: pixel pairs) */
enum { DWQ_SCRATCH, DWQ_CHAIN, DWQ_BLOCKS };

/* output rows [r0, r1) of a kernel, in a thread slot's scratch */
typedef void (*rows_fn)(const ei_dw_args *, int64_t, int64_t, char *);
typedef struct { const ei_dw_args *a; rows_fn fn; int64_t rows; int slots; int64_t per; } dw_ctx;

/* shared between the depthwise files only: hidden, so the library exports what it did before
 * the split */
#pragma GCC visibility push(hidden)
/* depthwise.c: the scalar rows (the self-test's reference); a dw_ctx's rows [r0, r1) in the
 * running thread slot's scratch, then the fused table (ei_parallel_for's body) */
void ei_dw_rows_scalar(const ei_dw_args *a, int64_t r0, int64_t r1, char *s);
void ei_dw_range(void *vctx, int64_t r0, int64_t r1);
/* depthwise_quad.c: the quad kernels' scratch bytes (0 where they do not run) */
int64_t ei_dwq_bytes(const ei_dw_args *a);
#if defined(__x86_64__)
/* depthwise.c: the per-tap int8 NHWC rows (AVX2; AVX-512 VNNI) and the CPU checks */
void ei_dw8_rows_avx2(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch);
void ei_dw8_rows_vnni(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch);
int ei_dw_has_vnni(void);
int ei_dw_has_vbmi(void);
/* depthwise_quad.c: the quad rows from scratch; by the build ei_dwq_build_of picks; by each shift
 * build (the self-test's); VBMI2 */
void ei_dwq_rows(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch);
void ei_dwq_rows_shift(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch);
void ei_dwq_rows_chain(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch);
void ei_dwq_rows_blocks(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch);
int ei_dwq_build_of(const ei_dw_args *a);
int ei_dw_has_vbmi2(void);
#endif
#pragma GCC visibility pop

#endif
