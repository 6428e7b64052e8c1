/* The int8 stem convolution's internal declarations, shared by int8_stem.c (the kernel),
 * int8_stem_input.c (the rows of its float input) and int8_stem_selftest.c; not part of the
 * library's interface. */
#ifndef EI_INT8_STEM_H
#define EI_INT8_STEM_H

#include "int8_gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#define STEM_MAX_C 4
#define STEM_MAX_M 64          /* four 16-channel blocks: the epilogue constants stay on the stack */
#define STEM_MAX_KW 16

/* the stem on a float input (ei_int8_stem_q): xf quantized as QuantizeLinear does (per tensor:
 * rint(x / scale) + zp, clamped, NaN -> 0; qdq.c, bit for bit) while the line buffers are
 * filled, so a plan needs neither the int8 copy of its input nor the NHWC one. xf is
 * (n, c, h, w) with nchw, else (n, h, w, c); conv.x is not read, conv.zp_x == zp. */
typedef struct {
    ei_int8_conv_args conv;
    const float *xf;
    float scale, zp;
    int32_t nchw;
} ei_int8_stem_q_args;

/* qdq.c: n values quantized to int8 per tensor, exactly as the QuantizeLinear kernels */
void ei_quantize_row_s8(const float *x, int64_t n, float scale, float zp, int8_t *y);

/* interleave_vbmi's byte indices: channels 0 / 1 and 2 / 3 of the planes, the bytes of 2 / 3 */
typedef struct { uint8_t i01[64], i23[64]; uint64_t hi; } stem_ilv;

typedef struct {
    int kwc, kwc4, grow;       /* a kernel row's values, rounded up to 4, its 4-value groups */
    int groups, kp, mb;        /* groups of the whole kernel, padded K (kh * kwc4), 16-channel blocks */
    int64_t wn, lb;            /* line positions ((ow - 1) * sw + kw), one line's bytes (64-aligned) */
} stem_geo;

#if defined(__x86_64__)
/* an AMX tile configuration (ldtilecfg's 64 bytes, palette 1) */
typedef struct __attribute__((aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} stem_tiles;
#endif

typedef struct {
    const ei_int8_conv_args *a;
    stem_geo g;
    int kind, layout;          /* the rows run; the packed weights' kind */
    const ei_int8_stem_q_args *q;       /* a float input quantized into the lines, or NULL */
    stem_ilv ilv;
    int f32_vbmi;              /* the VNNI lines of an NCHW float input: ei_stem_line_f32 */
    int64_t slot_bytes;        /* a thread slot's scratch: line slots (+ the quantized row) */
    const int32_t *corr;
    const void *wp;
    int32_t bias[STEM_MAX_M], mult[STEM_MAX_M], shift[STEM_MAX_M];   /* padded to whole blocks */
#if defined(__x86_64__)
    /* the VNNI rows' requantization constants per 16-channel block, and the activation table
     * in four vectors where VBMI looks it up in registers (vbmi_lut), made once a call */
    ei_vq16 vq[STEM_MAX_M / 16];
    ei_vqc vc[STEM_MAX_M / 16];
    __m512i lut4[4];
    int vbmi_lut, clamp;       /* clamp: [lo, hi] narrower than int8's */
    /* the AMX rows (row_amx): their tile configuration; half: 8 channels or fewer, their
     * constants in lanes 0..7 and again in 8..15 (two pixels a vector) */
    int amx, half;
    stem_tiles tiles;
    /* pair: two pixels a tile row (pair_fits); held: the B tiles of every kernel row stay in
     * tiles 4.. for the whole call (one block, kh <= 4); the step's pixels (NPX, 2 NPX with
     * pair), A's row stride, B's bytes a kernel row and a block, and where B starts */
    int pair, held;
    int64_t npx, astep, bky, bblock;
    const int8_t *bw;
#endif
} stem_ctx;

/* the image columns a line takes: [0, line_cols) of a row (line positions pl ..) */
static inline int64_t line_cols(const ei_int8_conv_args *a, const stem_geo *g) {
    return EI_MAX((int64_t)0, EI_MIN(g->wn, (int64_t)a->pl + a->w) - a->pl);
}

/* int8_stem.c: whether the stem kernel computes these args at all; its entry points */
#pragma GCC visibility push(hidden)     /* internal: not in the library's export list */
int ei_stem_fits(const ei_int8_conv_args *a);
#pragma GCC visibility pop
EI_API int64_t ei_int8_stem_pack_size(const ei_int8_conv_args *a);
EI_API void ei_int8_stem_pack(const ei_int8_conv_args *a, const int8_t *w_mk, void *out);
EI_API int64_t ei_int8_stem_scratch(const ei_int8_conv_args *a);
EI_API void ei_int8_stem(const ei_int8_conv_args *a);
EI_API void ei_int8_stem_q(const ei_int8_stem_q_args *q);

/* int8_stem_input.c: bytes after a slot's lines for a float input's row; s->ilv and
 * s->f32_vbmi for s->q (after s->kind); row iy of image b of the float input, its first
 * line_cols columns quantized into qrow (NHWC) */
#pragma GCC visibility push(hidden)
int64_t ei_stem_qrow_bytes(const ei_int8_conv_args *a);
void ei_stem_input_prepare(stem_ctx *s);
const int8_t *ei_stem_quantized_row(const stem_ctx *s, int64_t b, int64_t iy, int8_t *qrow);
#if defined(__x86_64__)
int ei_stem_has_vbmi(void);
/* the VNNI line of row iy of image b of an NCHW float input (f32_vbmi), n pixels into d */
void ei_stem_line_f32(const stem_ctx *s, int64_t b, int64_t iy, uint8_t *d, int64_t n);
#endif
#pragma GCC visibility pop

#endif
