/* Argument structs and op codes of the fp32 element-wise, softmax, copy and pooling kernels
 * (elementwise.c, pool.c). Mirrored by ctypes Structures in native/ops.py: change both. */
#ifndef EI_ELEMENTWISE_H
#define EI_ELEMENTWISE_H

#include "edge_native.h"
#include "ei_activations.h"

#define EI_MAX_RANK 6

/* unary ops (also the activation epilogue of binary ops): the codes of the one activation
 * table (ei_activations.h, generated from edge_infer/ops/activations.py); p0, p1 per op:
 * LEAKY alpha; CLIP lo, hi; HSIGMOID/HSWISH alpha, beta */
enum {
    EI_U_COPY = EI_ACT_NONE, EI_U_RELU = EI_ACT_RELU, EI_U_LEAKY = EI_ACT_LEAKYRELU, EI_U_CLIP = EI_ACT_CLIP,
    EI_U_SIGMOID = EI_ACT_SIGMOID, EI_U_TANH = EI_ACT_TANH, EI_U_HSIGMOID = EI_ACT_HARDSIGMOID,
    EI_U_HSWISH = EI_ACT_HARDSWISH, EI_U_SILU = EI_ACT_SILU, EI_U_GELU = EI_ACT_GELU,
    EI_U_GELU_TANH = EI_ACT_GELUTANH, EI_U_EXP = EI_ACT_EXP, EI_U_NEG = EI_ACT_NEG, EI_U_ABS = EI_ACT_ABS,
    EI_U_SQRT = EI_ACT_SQRT, EI_U_RECIP = EI_ACT_RECIPROCAL, EI_U_FLOOR = EI_ACT_FLOOR,
    EI_U_CEIL = EI_ACT_CEIL, EI_U_ROUND = EI_ACT_ROUND
};
/* the unary ops the C kernels implement */
#define EI_U_OPS { EI_U_COPY, EI_U_RELU, EI_U_LEAKY, EI_U_CLIP, EI_U_SIGMOID, EI_U_TANH, EI_U_HSIGMOID, \
                   EI_U_HSWISH, EI_U_SILU, EI_U_GELU, EI_U_GELU_TANH, EI_U_EXP, EI_U_NEG, EI_U_ABS, \
                   EI_U_SQRT, EI_U_RECIP, EI_U_FLOOR, EI_U_CEIL, EI_U_ROUND }
/* binary ops; PRELU: a > 0 ? a : a * b */
enum { EI_B_ADD = 0, EI_B_SUB, EI_B_MUL, EI_B_DIV, EI_B_MAX, EI_B_MIN, EI_B_PRELU, EI_B_COUNT };

typedef struct {
    const float *x; float *y; int64_t n;
    int32_t op, threads;
    float p0, p1;
} ei_unary_f32_args;

/* y (contiguous, shape) = act(a op b); sa/sb: element strides of a and b per dim (0 where
 * broadcast). Python collapses dims first, so the innermost dim decides the loop. */
typedef struct {
    const float *a, *b; float *y;
    int32_t op, act;
    float p0, p1;              /* of act */
    int32_t rank, threads;
    int64_t shape[EI_MAX_RANK], sa[EI_MAX_RANK], sb[EI_MAX_RANK];
} ei_binary_f32_args;

typedef struct {
    const float *x; float *y; int64_t rows, cols; int32_t threads, pad_;
} ei_softmax_f32_args;

/* one strided copy: dst[i] = src[i] over shape, byte strides per dim */
typedef struct {
    const char *src; char *dst;
    int32_t rank, elsize;
    int64_t shape[EI_MAX_RANK], ss[EI_MAX_RANK], ds[EI_MAX_RANK];
} ei_copy_desc;

typedef struct { const ei_copy_desc *descs; int64_t count; } ei_copy_args;

/* 2-D max / average pool, NCHW or NHWC; pads top, left, bottom, right */
enum { EI_POOL_MAX = 0, EI_POOL_AVG = 1 };
typedef struct {
    const float *x; float *y;
    int64_t n, c, h, w, oh, ow;
    int32_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
    int32_t op, count_include_pad, nhwc, threads;
} ei_pool2d_f32_args;

/* global average / max over p spatial positions: x (n, c, p) or (n, p, c) when nhwc */
typedef struct {
    const float *x; float *y; int64_t n, c, p; int32_t op, nhwc, threads, pad_;
} ei_global_pool_f32_args;

/* a sequence of steps as one step (a fused kernel made of native parts) */
typedef struct { const ei_step *steps; int64_t n; } ei_seq_args;

EI_API void ei_seq(const ei_seq_args *a);
EI_API void ei_unary_f32(const ei_unary_f32_args *a);
EI_API void ei_binary_f32(const ei_binary_f32_args *a);
EI_API void ei_softmax_f32(const ei_softmax_f32_args *a);
EI_API void ei_copy(const ei_copy_args *a);
EI_API void ei_pool2d_f32(const ei_pool2d_f32_args *a);
EI_API void ei_global_pool_f32(const ei_global_pool_f32_args *a);
EI_API int ei_selftest_elementwise(void);
/* ei_copy on `threads` threads: chunk u of the pool's job copies the same fraction of the outer
 * rows of every desc (a Concat's inputs: the same pixels of each, as the layers around cut
 * their work) */
typedef struct { ei_copy_args c; int64_t threads; } ei_copy_par_args;
EI_API void ei_copy_par(const ei_copy_par_args *a);

/* shared with pool.c */
float ei_expf(float x);
void ei_unary_f32_range(int op, const float *x, float *y, int64_t n, float p0, float p1);

#endif
