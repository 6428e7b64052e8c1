/* fp32 packed SGEMM micro-kernels (sgemm.c) and the NHWC convolution / GEMM driver on them
 * (conv_f32.c).
 *
 * B (the weights) is packed once at prepare into panels of EI_SG_NR = 16 output channels:
 * panel j holds rows k = 0..K-1 of 16 consecutive columns, contiguous (K x 16 floats), zero
 * padded past the last column. The panel width is the same for every ISA, so a plan packed
 * under one ISA runs under any other (the tests flip the ISA mask after prepare); only the
 * number of rows a micro-kernel computes at once (mr) differs: AVX2 6, AVX-512 12 (14 for
 * layers of few rows: conv_f32.c make_plan), NEON 6, scalar 6. A (activation rows) is read
 * row-major with a row stride: straight from the input for 1x1 stride-1 convs and GEMMs,
 * from a per-thread im2col tile otherwise. */
#ifndef EI_SGEMM_H
#define EI_SGEMM_H

#include "edge_native.h"

#include <string.h>

/* n floats from s to d: memcpy for a run worth a call, a loop for the short ones (channel tails) */
static inline void ei_copy_floats(float *d, const float *s, int64_t n) {
    if (n > 16) { memcpy(d, s, (size_t)n * sizeof(float)); return; }
    for (int64_t i = 0; i < n; i++) d[i] = s[i];
}

/* the K block of a GEMM over K rows: at most kc_max, the blocks as even as possible */
static inline int64_t ei_k_block(int64_t K, int64_t kc_max) {
    int64_t nb = (K + kc_max - 1) / kc_max;
    return nb ? (K + nb - 1) / nb : 1;
}

#define EI_SG_NR 16
#define EI_SG_MR_MAX 14

/* what a micro-kernel applies to its tile: set C (or add onto it with load_c), bias per column
 * (first K block only), then on the last K block a residual z and a clamp */
typedef struct {
    const float *bias;          /* EI_SG_NR values of this panel, or NULL */
    const float *z;             /* residual rows (row stride ldz), or NULL */
    int64_t ldz;
    float lo, hi;               /* clamp when clamp != 0 */
    int32_t load_c, clamp;
    /* the weights the caller computes with next (panel rows, stride EI_SG_NR; the two-panel
     * kernel also pf + bstride), prefetched into L2 a row per k step; NULL: the kernel's own
     * rows SG_PF2 steps ahead. Only the AVX-512 two-panel kernel reads it (a hint) */
    const float *pf;
} ei_sg_ep;

/* c[i][0..nr) (= or +=) sum_k a[i*lda + k] * b[k*16 + j] for i < mr (mr <= the kernel's MR,
 * nr <= 16), then the epilogue */
typedef void (*ei_sg_ukr)(int mr, int64_t kc, const float *a, int64_t lda, const float *b,
                          float *c, int64_t ldc, int nr, const ei_sg_ep *ep);

/* the same over two adjacent panels (32 columns: b and b + bstride; the second has nr2 <= 16
 * columns, the first 16; bias, z and c cover both), or NULL where the ISA has none */
typedef void (*ei_sg_ukr2)(int mr, int64_t kc, const float *a, int64_t lda, const float *b, int64_t bstride,
                           float *c, int64_t ldc, int nr2, const ei_sg_ep *ep);

/* indirect ("implicit GEMM" of conv_f32.c): A is not a matrix but ntap taps of kc values each;
 * row i of tap t starts at ap[t * EI_SG_MR_MAX + i] (a pixel's channels in the NHWC input, or
 * a zero row for a tap in the padding), and B holds the ntap * kc rows in that order. np
 * panels (1: the first with nr columns; 2: b and b + bstride, the second with nr columns,
 * the first 16). Sums, epilogue and k order as the ukr2 kernel's over the same rows */
typedef void (*ei_sg_ikr)(int mr, int np, int ntap, int64_t kc, const float *const *ap, const float *b,
                          int64_t bstride, float *c, int64_t ldc, int nr, const ei_sg_ep *ep);

/* mr: the rows of a micro-tile by default; mr_max: the most rows fn and fn2 take (AVX-512: 12
 * and 14; conv_f32.c's make_plan picks per layer); ifn: the indirect kernel (mr_max rows at
 * most), or NULL where the ISA has none (conv_f32.c then copies im2col tiles) */
typedef struct { ei_sg_ukr fn; int mr; const char *name; ei_sg_ukr2 fn2; int mr_max; ei_sg_ikr ifn; } ei_sg_kernel;

/* the time the pool takes to finish n items of these costs on t <= EI_MAX_THREADS threads
 * (conv_f32.c) */
double ei_pool_makespan(const double *cost, int64_t n, int t);

/* the micro-kernel for the current ISA mask */
ei_sg_kernel ei_sg_pick(void);
/* the scalar one (self-tests) */
ei_sg_kernel ei_sg_scalar(void);

/* the arguments of the NHWC conv / GEMM of conv_f32.c and the Winograd conv of winograd_f32.c */
typedef struct {
    const float *x;         /* (n, h, w, c) */
    float *y;               /* (n, oh, ow, m) */
    const float *z;         /* residual like y, or NULL */
    const float *wpack;     /* group, panel, K, 16 (Winograd: 36, panel, c, 16) */
    const float *bias;      /* m, or NULL */
    float *scratch;         /* ei_conv_f32_scratch (ei_winograd_f32_scratch) bytes */
    int32_t n, c, h, w, m, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, group;
    int32_t act;            /* EI_U_* (0: none) */
    float p0, p1;
    int32_t threads;
    /* the work split ei_conv_f32_plan chose at prepare for this micro-kernel's rows and these
     * threads: row blocks, panels per column block (0: chosen at each run) */
    int32_t split_mr, split_threads, split_rows, split_panels;
} ei_conv_f32_args;

#endif
