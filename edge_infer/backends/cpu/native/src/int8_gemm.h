/* The int8 GEMM / convolution of int8_gemm.c (its VNNI and AMX kernels in int8_gemm_vnni.c and
 * int8_gemm_amx.c): its argument struct (Int8ConvArgs in native/kernels.py mirrors it),
 * micro-kernel kinds and entry points. */
#ifndef EI_INT8_GEMM_H
#define EI_INT8_GEMM_H

#include "ei_int8.h"

/* micro-kernel kinds (int8_gemm.c's header comment); the packed weights belong to one */
enum { KIND_SCALAR = 0, KIND_AVX2 = 1, KIND_NEON = 2, KIND_DOT = 3, KIND_VNNI = 4, KIND_AMX = 5, N_KINDS = 6 };

typedef struct {
    const int8_t *x;
    int8_t *y;
    const int8_t *z;            /* residual, y's layout, or NULL */
    const void *wpack;          /* ei_int8_pack_weights output */
    const int32_t *bias;        /* folded bias per output channel */
    const int32_t *mult, *shift;
    const int32_t *ztab;        /* residual table or NULL */
    void *scratch;              /* ei_int8_conv_scratch() bytes (every slot's) */
    const void *consts;         /* ei_int8_conv_prepare's per-panel requantization constants, or NULL */
    int32_t zp_x, zp_y, lo, hi;
    int32_t kind;
    int32_t in_nchw, out_nchw;
    int32_t n, c, h, w;         /* input */
    int32_t m, oh, ow;          /* output */
    int32_t kh, kw, sh, sw, dh, dw, pt, pl;
    int32_t threads;
    const int8_t *lut;          /* 256-entry activation table applied to each requantized output,
                                 * clamped to [lo, hi] first: y = lut[(uint8_t)q] (ei_lut.h), or NULL */
    int32_t weights_cached;     /* the plan's weights stay in cache from run to run (they fit in
                                 * half an L2): reading a layer's weights costs no memory streaming */
} ei_int8_conv_args;

EI_API int ei_int8_gemm_kind(void);
EI_API int64_t ei_int8_pack_size(int kind, int M, int K);
EI_API void ei_int8_pack_weights(int kind, const int8_t *w, int M, int K, void *out);
EI_API int64_t ei_int8_conv_consts_size(const ei_int8_conv_args *a);
EI_API void ei_int8_conv_prepare(const ei_int8_conv_args *a, void *out);
EI_API int64_t ei_int8_conv_scratch(const ei_int8_conv_args *a);
EI_API void ei_int8_conv(const ei_int8_conv_args *a);
/* how ei_int8_conv runs these args (with their consts) on this machine, for plan notes: NULL
 * for the packed panels, else a phrase ("narrow ...", "implicit ...") */
EI_API const char *ei_int8_conv_path(const ei_int8_conv_args *a);
/* nonzero when this CPU, under the ISA mask, runs micro-kernel kind */
int ei_int8_kind_runs(int kind);

#if defined(__x86_64__)
/* dst[0 .. n) = src ^ 0x80 (AVX-512) */
void ei_xor80(uint8_t *dst, const int8_t *src, int64_t n);
/* rows r0 .. r0 + nrows - 1 (P output pixels an image, K = kh * kw * c) of the NHWC input as
 * u8 im2col rows of k4 bytes (int8_im2col.c) */
void ei_im2col_u8_nhwc(const ei_int8_conv_args *a, int64_t P, int K, int64_t r0, int nrows, uint8_t *ub, int64_t k4);
#endif

#endif
