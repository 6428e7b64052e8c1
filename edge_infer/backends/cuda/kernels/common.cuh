// Shared device helpers of the CUDA backend: integer types, grid-stride loops, TFLite fixed
// point, activations. Compiled at run time by NVRTC (through CuPy), by nvcc in the tests, and by
// the host C++ compiler for the CPU emulator (emulator.py, host_shim.h).
//
// Conventions every kernel follows (the host side relies on them):
// * kernel signatures use only: pointers to float / int / i8 / u8 / i64, and scalars int, i64,
//   float (emulator.py parses them and checks every launch's arguments against them);
// * element counts and offsets are i64; loops are grid-stride, so any grid size is correct;
// * kernels with __syncthreads never return early (every thread reaches every barrier).
#pragma once

typedef long long i64;
typedef signed char i8;
typedef unsigned char u8;

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)   // NVRTC has no math.h
#endif

#define INT32_MIN_ (-2147483647 - 1)
#define INT32_MAX_ 2147483647

#define GRID_STRIDE(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

// -- TFLite fixed point (tensorflow/lite/kernels/internal/common.h, no single rounding) ---------

// SaturatingRoundingDoublingHighMul: (a * b * 2 + 2^31 rounding) >> 32, saturating INT32_MIN^2.
__device__ __forceinline__ int srdhm(int a, int b) {
    if (a == b && a == INT32_MIN_) return INT32_MAX_;
    i64 ab = (i64)a * (i64)b;
    i64 nudge = ab >= 0 ? (1LL << 30) : (1LL - (1LL << 30));
    return (int)((ab + nudge) / (1LL << 31));          // C division: truncation toward zero
}

// RoundingDivideByPOT: x / 2^e rounded half away from zero, 0 <= e <= 31.
__device__ __forceinline__ int rdbpot(int x, int e) {
    if (e == 0) return x;
    int mask = (int)((1LL << e) - 1);
    int rem = x & mask;
    int threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + (rem > threshold ? 1 : 0);
}

// MultiplyByQuantizedMultiplier(x, q, shift); the left shift wraps in int32 as C++ does on
// two's complement hardware (done in unsigned arithmetic: no signed-overflow UB).
__device__ __forceinline__ int mbqm(int x, int q, int shift) {
    if (shift == 64) {          // a float32 multiplier (ops/qmath.py FP32_SHIFT; q: its bits)
        union { int i; float f; } s;
        s.i = q;
        return (int)rintf((float)x * s.f);      // one rounding, half to even
    }
    int left = shift > 0 ? shift : 0;
    int right = shift > 0 ? 0 : -shift;
    int xs = (int)((unsigned)x << left);
    return rdbpot(srdhm(xs, q), right);
}

__device__ __forceinline__ int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// -- activations (codes shared with ops.py ACT) ------------------------------------------------

#include "activations.cuh"     // the one activation table, generated from edge_infer/ops/activations.py

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float softplusf_(float x) {
    return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

// f(v) for an activation code; p0, p1: Clip (min, max), LeakyRelu (alpha), HardSigmoid
// (alpha, beta), Elu/Celu (alpha), Selu (alpha, gamma).
__device__ __forceinline__ float act_f32(float v, int op, float p0, float p1) {
    switch (op) {
    case ACT_NONE: return v;
    case ACT_RELU: return v > 0.0f ? v : (v == v ? 0.0f : v);       // NaN stays NaN
    case ACT_CLIP: return fminf(fmaxf(v, p0), p1);
    case ACT_SIGMOID: return sigmoidf_(v);
    case ACT_TANH: return tanhf(v);
    case ACT_HARDSIGMOID: return fminf(fmaxf(v * p0 + p1, 0.0f), 1.0f);
    case ACT_LEAKYRELU: return v >= 0.0f ? v : v * p0;
    case ACT_HARDSWISH: return v * fminf(fmaxf(v * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f);
    case ACT_SILU: return v * sigmoidf_(v);
    case ACT_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case ACT_GELUTANH: {
        float t = tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v));
        return 0.5f * v * (1.0f + t);
    }
    case ACT_ELU: return v > 0.0f ? v : p0 * expm1f(v);
    case ACT_CELU: return v > 0.0f ? v : p0 * expm1f(v / p0);
    case ACT_SELU: return p1 * (v > 0.0f ? v : p0 * expm1f(v));
    case ACT_SOFTPLUS: return softplusf_(v);
    case ACT_SOFTSIGN: return v / (1.0f + fabsf(v));
    case ACT_MISH: return v * tanhf(softplusf_(v));
    case ACT_EXP: return expf(v);
    case ACT_LOG: return logf(v);
    case ACT_ABS: return fabsf(v);
    case ACT_NEG: return -v;
    case ACT_SQRT: return sqrtf(v);
    case ACT_RECIPROCAL: return 1.0f / v;
    case ACT_FLOOR: return floorf(v);
    case ACT_CEIL: return ceilf(v);
    case ACT_ERF: return erff(v);
    default: return v;
    }
}

// Offset of element i (row-major over dims) in a tensor with strides st (elements).
// The input coordinate from which a transposed conv's tap k reaches output coordinate o
// (o = i * s - p + k * d), or -1 where no input pixel does (off the stride grid or outside [0, n)).
__device__ __forceinline__ int deconv_source(int o, int p, int k, int d, int s, int n) {
    int t = o + p - k * d;
    if (t < 0 || t % s) return -1;
    t /= s;
    return t < n ? t : -1;
}

__device__ __forceinline__ i64 strided_offset(i64 i, int rank, const i64* dims, const i64* st) {
    i64 off = 0;
    for (int d = rank - 1; d >= 0; --d) {
        i64 q = i / dims[d];
        off += (i - q * dims[d]) * st[d];
        i = q;
    }
    return off;
}
