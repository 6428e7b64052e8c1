// Resize / Upsample, one separable stage per resized axis. The source coordinates, tap indices
// and weights of each axis come from the CPU backend's functions (made once on the host), so the
// rounding of coordinates matches it exactly. x is viewed as (outer, in_len, inner) and y as
// (outer, out_len, inner).
#include "common.cuh"

// Nearest: y[o, j, t] = x[o, idx[j], t] for any element size (1 or 4 bytes).
#define GATHER_AXIS(NAME, T)                                                                      \
    extern "C" __global__ void NAME(const T* x, T* y, const int* idx, i64 outer, int in_len, int out_len, \
                                    i64 inner) {                                                  \
        i64 total = outer * out_len * inner;                                                      \
        GRID_STRIDE(i, total) {                                                                   \
            i64 t = i % inner;                                                                    \
            i64 j = (i / inner) % out_len;                                                        \
            i64 o = i / (inner * out_len);                                                        \
            y[i] = x[(o * in_len + idx[j]) * inner + t];                                          \
        }                                                                                         \
    }
GATHER_AXIS(gather_axis_b1, u8)
GATHER_AXIS(gather_axis_b4, int)

// Linear / cubic: y[o, j, t] = sum_k w[j * taps + k] * x[o, idx[j * taps + k], t].
extern "C" __global__ void resize_axis_f32(const float* x, float* y, const int* idx, const float* wts, int taps,
                                           i64 outer, int in_len, int out_len, i64 inner) {
    i64 total = outer * out_len * inner;
    GRID_STRIDE(i, total) {
        i64 t = i % inner;
        i64 j = (i / inner) % out_len;
        i64 o = i / (inner * out_len);
        float acc = 0.0f;
        for (int k = 0; k < taps; ++k) acc += wts[j * taps + k] * x[(o * in_len + idx[j * taps + k]) * inner + t];
        y[i] = acc;
    }
}
