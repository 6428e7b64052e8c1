// fp32 convolution kernels (2-D; 1-D convs run as 2-D with H = 1): im2col for the cuBLAS GEMM
// path, and a direct kernel (grouped and depthwise convs) with the fused epilogue.
//
// Geometry arguments, shared by every conv and pool kernel here and in int8.cu / pool.cu:
//   n, c, h, w: input batch, channels, height, width; oh, ow: output height, width;
//   kh, kw: kernel; sh, sw: strides; ph, pw: top/left pads; dh, dw: dilations;
//   nhwc: input and output are channels-last (N, H, W, C), else (N, C, H, W).
#include "common.cuh"

__device__ __forceinline__ i64 in_index(int nhwc, i64 b, i64 ch, i64 yy, i64 xx, int c, int h, int w) {
    return nhwc ? ((b * h + yy) * w + xx) * c + ch : ((b * c + ch) * h + yy) * w + xx;
}

__device__ __forceinline__ i64 out_index(int nhwc, i64 b, i64 ch, i64 yy, i64 xx, int m, int oh, int ow) {
    return nhwc ? ((b * oh + yy) * ow + xx) * m + ch : ((b * m + ch) * oh + yy) * ow + xx;
}

// cols[b * cs_n + k * cs_k + p * cs_p] = x_pad[b, ch, oy*sh - ph + ky*dh, ox*sw - pw + kx*dw]
// with k = (ch * kh + ky) * kw + kx (the row order of OIHW weights) and p = oy * ow + ox;
// taps in the padding read 0.
extern "C" __global__ void im2col_f32(const float* x, float* cols, int n, int c, int h, int w, int oh, int ow,
                                      int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int nhwc,
                                      i64 cs_n, i64 cs_k, i64 cs_p) {
    i64 p_count = (i64)oh * ow;
    i64 k_count = (i64)c * kh * kw;
    i64 total = (i64)n * k_count * p_count;
    int p_fastest = cs_p == 1;
    GRID_STRIDE(i, total) {
        // consecutive threads write consecutive columns: i enumerates (b, k, p) with p fastest
        // for the (K, P) layout (NCHW: neighbouring threads also read neighbouring x), else
        // (b, p, k) with k fastest (NHWC: neighbouring channels)
        i64 k, p, b;
        if (p_fastest) { p = i % p_count; i64 t = i / p_count; k = t % k_count; b = t / k_count; }
        else { k = i % k_count; i64 t = i / k_count; p = t % p_count; b = t / p_count; }
        int kx = (int)(k % kw), ky = (int)((k / kw) % kh);
        i64 ch = k / ((i64)kw * kh);
        int ox = (int)(p % ow), oy = (int)(p / ow);
        int yy = oy * sh - ph + ky * dh, xx = ox * sw - pw + kx * dw;
        float v = 0.0f;
        if (yy >= 0 && yy < h && xx >= 0 && xx < w) v = x[in_index(nhwc, b, ch, yy, xx, c, h, w)];
        cols[b * cs_n + k * cs_k + p * cs_p] = v;
    }
}

// Direct convolution, one output per thread (grid-stride), any group count:
// y = act(sum over (ci, ky, kx) of x * w[co, ci, ky, kx] + bias[co] + z).
// wt is OIHW: (m, c / group, kh, kw).
extern "C" __global__ void conv_direct_f32(const float* x, const float* wt, const float* bias, const float* z,
                                           float* y, int n, int c, int h, int w, int m, int oh, int ow,
                                           int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw,
                                           int group, int nhwc, int has_bias, int has_res, int act, float p0,
                                           float p1) {
    int cg = c / group, mg = m / group;
    i64 total = (i64)n * m * oh * ow;
    GRID_STRIDE(i, total) {
        i64 b, co, oy, ox;
        if (nhwc) { co = i % m; i64 t = i / m; ox = t % ow; t /= ow; oy = t % oh; b = t / oh; }
        else { ox = i % ow; i64 t = i / ow; oy = t % oh; t /= oh; co = t % m; b = t / m; }
        i64 g = co / mg;
        float acc = 0.0f;
        const float* wrow = wt + co * (i64)cg * kh * kw;
        for (int ci = 0; ci < cg; ++ci) {
            i64 ch = g * cg + ci;
            for (int ky = 0; ky < kh; ++ky) {
                int yy = (int)oy * sh - ph + ky * dh;
                if (yy < 0 || yy >= h) continue;
                for (int kx = 0; kx < kw; ++kx) {
                    int xx = (int)ox * sw - pw + kx * dw;
                    if (xx < 0 || xx >= w) continue;
                    acc += x[in_index(nhwc, b, ch, yy, xx, c, h, w)] * wrow[((i64)ci * kh + ky) * kw + kx];
                }
            }
        }
        if (has_bias) acc += bias[co];
        if (has_res) acc += z[i];
        y[i] = act_f32(acc, act, p0, p1);
    }
}

// Transposed convolution (2-D), one output per thread, gathering the input pixels whose taps
// reach it: oy = iy * sh - ph + ky * dh, so iy = (oy + ph - ky * dh) / sh where that divides.
// wt is ONNX's (C, M / group, kh, kw); no col2im buffer and no atomics.
extern "C" __global__ void conv_transpose_f32(const float* x, const float* wt, const float* bias, float* y,
                                              int n, int c, int h, int w, int m, int oh, int ow, int kh, int kw,
                                              int sh, int sw, int ph, int pw, int dh, int dw, int group,
                                              int nhwc, int has_bias) {
    int cg = c / group, mg = m / group;
    i64 total = (i64)n * m * oh * ow;
    GRID_STRIDE(i, total) {
        i64 b, co, oy, ox;
        if (nhwc) { co = i % m; i64 t = i / m; ox = t % ow; t /= ow; oy = t % oh; b = t / oh; }
        else { ox = i % ow; i64 t = i / ow; oy = t % oh; t /= oh; co = t % m; b = t / m; }
        i64 g = co / mg, cm = co % mg;
        float acc = has_bias ? bias[co] : 0.0f;
        for (int ky = 0; ky < kh; ++ky) {
            int iy = deconv_source((int)oy, ph, ky, dh, sh, h);
            if (iy < 0) continue;
            for (int kx = 0; kx < kw; ++kx) {
                int ix = deconv_source((int)ox, pw, kx, dw, sw, w);
                if (ix < 0) continue;
                for (int ci = 0; ci < cg; ++ci) {
                    i64 ch = g * cg + ci;
                    acc += x[in_index(nhwc, b, ch, iy, ix, c, h, w)] * wt[((ch * mg + cm) * kh + ky) * kw + kx];
                }
            }
        }
        y[i] = acc;
    }
}
