// fp32 element-wise kernels: unary activations, broadcasting binary ops, the conv/GEMM epilogue
// (bias + residual + activation), per-channel affine (BatchNormalization), and strided copies
// (Transpose, Concat, Slice, Expand, Reshape) for 1-, 4- and 8-byte elements.
#include "common.cuh"

// y = act(x): every unary op with an ACT_* code.
extern "C" __global__ void unary_f32(const float* x, float* y, i64 n, int op, float p0, float p1) {
    GRID_STRIDE(i, n) { y[i] = act_f32(x[i], op, p0, p1); }
}

#define BIN_ADD 0
#define BIN_SUB 1
#define BIN_MUL 2
#define BIN_DIV 3
#define BIN_MAX 4
#define BIN_MIN 5
#define BIN_POW 6
#define BIN_PRELU 7

__device__ __forceinline__ float binary_op(float a, float b, int op) {
    switch (op) {
    case BIN_ADD: return a + b;
    case BIN_SUB: return a - b;
    case BIN_MUL: return a * b;
    case BIN_DIV: return a / b;
    case BIN_MAX: return (a != a || b != b) ? a + b : fmaxf(a, b);     // NaN propagates, as numpy
    case BIN_MIN: return (a != a || b != b) ? a + b : fminf(a, b);
    case BIN_POW: return powf(a, b);
    case BIN_PRELU: return a < 0.0f ? a * b : a;
    default: return a;
    }
}

// y[i] = a[off_a(i)] op b[off_b(i)]; meta = [dims(rank), a strides(rank), b strides(rank)]
// (broadcast dims have stride 0). contiguous != 0: both operands are y-shaped (no meta read).
extern "C" __global__ void binary_f32(const float* a, const float* b, float* y, i64 n, int op, int rank,
                                      const i64* meta, int contiguous) {
    GRID_STRIDE(i, n) {
        i64 ia = i, ib = i;
        if (!contiguous) {
            ia = strided_offset(i, rank, meta, meta + rank);
            ib = strided_offset(i, rank, meta, meta + 2 * rank);
        }
        y[i] = binary_op(a[ia], b[ib], op);
    }
}

// The epilogue of Conv / Gemm / MatMul: y = act(y + bias[c] + z) with c the channel of element i:
// i % m when channels are last (NHWC, GEMM rows), else (i / inner) % m (NCHW).
extern "C" __global__ void epilogue_f32(float* y, const float* bias, const float* z, i64 n, int m, i64 inner,
                                        int channels_last, int has_bias, int has_res, int act, float p0,
                                        float p1) {
    GRID_STRIDE(i, n) {
        float v = y[i];
        if (has_bias) {
            i64 c = channels_last ? i % m : (i / inner) % m;
            v += bias[c];
        }
        if (has_res) v += z[i];
        y[i] = act_f32(v, act, p0, p1);
    }
}

// y = x * scale[c] + shift[c] (inference BatchNormalization with folded statistics).
extern "C" __global__ void channel_affine_f32(const float* x, float* y, const float* scale, const float* shift,
                                              i64 n, int m, i64 inner, int channels_last) {
    GRID_STRIDE(i, n) {
        i64 c = channels_last ? i % m : (i / inner) % m;
        y[i] = x[i] * scale[c] + shift[c];
    }
}

// y[off_y(i)] = x[off_x(i)], i over the n elements of dims; meta = [dims, x strides, y strides].
#define COPY_ND(NAME, T)                                                                       \
    extern "C" __global__ void NAME(const T* x, T* y, i64 n, int rank, const i64* meta) {      \
        GRID_STRIDE(i, n) {                                                                    \
            y[strided_offset(i, rank, meta, meta + 2 * rank)] = x[strided_offset(i, rank, meta, meta + rank)]; \
        }                                                                                      \
    }
COPY_ND(copy_nd_b1, u8)
COPY_ND(copy_nd_b4, int)
COPY_ND(copy_nd_b8, i64)

// Softmax (log_softmax != 0: LogSoftmax) over the middle axis of x viewed as (outer, len, inner):
// one block per (outer, inner) row, a shared-memory tree reduction for the max and the sum.
#define SOFTMAX_THREADS 256
extern "C" __global__ void softmax_f32(const float* x, float* y, i64 rows, i64 len, i64 inner, int log_softmax) {
    __shared__ float red[SOFTMAX_THREADS];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {       // uniform across the block
        i64 o = row / inner, in = row - o * inner;
        const float* xr = x + o * len * inner + in;
        float* yr = y + o * len * inner + in;
        float m = -INFINITY;
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) m = fmaxf(m, xr[k * inner]);
        red[threadIdx.x] = m;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if ((int)threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
            __syncthreads();
        }
        m = red[0];
        __syncthreads();
        float sum = 0.0f;
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) {
            float e = expf(xr[k * inner] - m);
            sum += e;
            if (!log_softmax) yr[k * inner] = e;
        }
        red[threadIdx.x] = sum;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
            __syncthreads();
        }
        sum = red[0];
        __syncthreads();
        if (log_softmax) {
            float ls = logf(sum);
            for (i64 k = threadIdx.x; k < len; k += blockDim.x) yr[k * inner] = xr[k * inner] - m - ls;
        } else {
            float inv = 1.0f / sum;
            for (i64 k = threadIdx.x; k < len; k += blockDim.x) yr[k * inner] = yr[k * inner] * inv;
        }
    }
}

// LRN across channels: y = x / (bias + alpha/size * sum of x^2 over [c - before, c + after]) ^ beta.
extern "C" __global__ void lrn_f32(const float* x, float* y, i64 n, int c_count, i64 inner, int channels_last,
                                   int size, float alpha_over_size, float beta, float bias) {
    int before = (size - 1) / 2, after = size - 1 - before;
    GRID_STRIDE(i, n) {
        i64 c, cstride;
        if (channels_last) { c = i % c_count; cstride = 1; }
        else { c = (i / inner) % c_count; cstride = inner; }
        i64 base = i - c * cstride;
        i64 lo = c - before < 0 ? 0 : c - before;
        i64 hi = c + after > c_count - 1 ? c_count - 1 : c + after;
        float ss = 0.0f;
        for (i64 k = lo; k <= hi; ++k) { float v = x[base + k * cstride]; ss += v * v; }
        y[i] = x[i] * powf(ss * alpha_over_size + bias, -beta);
    }
}
