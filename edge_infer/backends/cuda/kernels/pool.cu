// Pooling kernels, fp32 and int8, both layouts (geometry arguments as in conv.cu): windowed max
// and average pools, one output per thread; global pools, one (batch, channel) per thread.
// Windows skip taps outside the input, which is the same as padding with -inf (max) or with
// uncounted zeros (average, count_include_pad=0); with count_include_pad=1 the divisor counts
// taps inside input + explicit pads (pad_h_end / pad_w_end: bottom/right pads).
#include "common.cuh"

__device__ __forceinline__ void pool_coords(i64 i, int nhwc, int c, int oh, int ow, i64* b, i64* ch, i64* oy,
                                            i64* ox) {
    if (nhwc) { *ch = i % c; i64 t = i / c; *ox = t % ow; t /= ow; *oy = t % oh; *b = t / oh; }
    else { *ox = i % ow; i64 t = i / ow; *oy = t % oh; t /= oh; *ch = t % c; *b = t / c; }
}

__device__ __forceinline__ i64 pool_in(int nhwc, i64 b, i64 ch, i64 yy, i64 xx, int c, int h, int w) {
    return nhwc ? ((b * h + yy) * w + xx) * c + ch : ((b * c + ch) * h + yy) * w + xx;
}

#define MAXPOOL(NAME, T, LOWEST)                                                                        \
    extern "C" __global__ void NAME(const T* x, T* y, int n, int c, int h, int w, int oh, int ow, int kh,   \
                                    int kw, int sh, int sw, int ph, int pw, int dh, int dw, int nhwc) {     \
        i64 total = (i64)n * c * oh * ow;                                                               \
        GRID_STRIDE(i, total) {                                                                         \
            i64 b, ch, oy, ox;                                                                          \
            pool_coords(i, nhwc, c, oh, ow, &b, &ch, &oy, &ox);                                         \
            T best = LOWEST;                                                                            \
            for (int ky = 0; ky < kh; ++ky) {                                                           \
                i64 yy = oy * sh - ph + (i64)ky * dh;                                                   \
                if (yy < 0 || yy >= h) continue;                                                        \
                for (int kx = 0; kx < kw; ++kx) {                                                       \
                    i64 xx = ox * sw - pw + (i64)kx * dw;                                               \
                    if (xx < 0 || xx >= w) continue;                                                    \
                    T v = x[pool_in(nhwc, b, ch, yy, xx, c, h, w)];                                     \
                    if (v > best || v != v) best = v;                                                   \
                }                                                                                       \
            }                                                                                           \
            y[i] = best;                                                                                \
        }                                                                                               \
    }
MAXPOOL(maxpool_f32, float, -INFINITY)
MAXPOOL(maxpool_s8, i8, (i8)-128)

// Taps of a window that count toward an average pool's divisor, and the sum of those inside
// the input (as int, exact for int8, or float).
__device__ __forceinline__ int avg_count(i64 oy, i64 ox, int h, int w, int kh, int kw, int sh, int sw, int ph,
                                         int pw, int dh, int dw, int include_pad, int ph_end, int pw_end) {
    int lo_y = include_pad ? -ph : 0, hi_y = include_pad ? h + ph_end : h;
    int lo_x = include_pad ? -pw : 0, hi_x = include_pad ? w + pw_end : w;
    int cy = 0, cx = 0;
    for (int ky = 0; ky < kh; ++ky) { i64 yy = oy * sh - ph + (i64)ky * dh; cy += (yy >= lo_y && yy < hi_y); }
    for (int kx = 0; kx < kw; ++kx) { i64 xx = ox * sw - pw + (i64)kx * dw; cx += (xx >= lo_x && xx < hi_x); }
    return cy * cx;
}

extern "C" __global__ void avgpool_f32(const float* x, float* y, int n, int c, int h, int w, int oh, int ow,
                                       int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int nhwc,
                                       int include_pad, int ph_end, int pw_end) {
    i64 total = (i64)n * c * oh * ow;
    GRID_STRIDE(i, total) {
        i64 b, ch, oy, ox;
        pool_coords(i, nhwc, c, oh, ow, &b, &ch, &oy, &ox);
        float s = 0.0f;
        for (int ky = 0; ky < kh; ++ky) {
            i64 yy = oy * sh - ph + (i64)ky * dh;
            if (yy < 0 || yy >= h) continue;
            for (int kx = 0; kx < kw; ++kx) {
                i64 xx = ox * sw - pw + (i64)kx * dw;
                if (xx < 0 || xx >= w) continue;
                s += x[pool_in(nhwc, b, ch, yy, xx, c, h, w)];
            }
        }
        int cnt = avg_count(oy, ox, h, w, kh, kw, sh, sw, ph, pw, dh, dw, include_pad, ph_end, pw_end);
        y[i] = s * (1.0f / (float)cnt);
    }
}

// int8 average pool. same_params != 0: TFLite's rounded mean of raw values,
//   y = (acc + sign(acc) * cnt/2) / cnt (C division), clamped;
// else the mean is requantized: y = zp_y + MBQM(acc - cnt * zp_x, q[cnt], shift[cnt]) with one
// multiplier per possible count (s_x / (cnt s_y), made on the host).
// Pads counted by include_pad hold zp_x, the quantized real zero.
extern "C" __global__ void avgpool_s8(const i8* x, i8* y, int n, int c, int h, int w, int oh, int ow, int kh,
                                      int kw, int sh, int sw, int ph, int pw, int dh, int dw, int nhwc,
                                      int include_pad, int ph_end, int pw_end, int same_params, int zp_x,
                                      int zp_y, const int* q, const int* shift) {
    i64 total = (i64)n * c * oh * ow;
    GRID_STRIDE(i, total) {
        i64 b, ch, oy, ox;
        pool_coords(i, nhwc, c, oh, ow, &b, &ch, &oy, &ox);
        int acc = 0, inside = 0;
        for (int ky = 0; ky < kh; ++ky) {
            i64 yy = oy * sh - ph + (i64)ky * dh;
            if (yy < 0 || yy >= h) continue;
            for (int kx = 0; kx < kw; ++kx) {
                i64 xx = ox * sw - pw + (i64)kx * dw;
                if (xx < 0 || xx >= w) continue;
                acc += (int)x[pool_in(nhwc, b, ch, yy, xx, c, h, w)];
                inside += 1;
            }
        }
        int cnt = avg_count(oy, ox, h, w, kh, kw, sh, sw, ph, pw, dh, dw, include_pad, ph_end, pw_end);
        acc += (cnt - inside) * zp_x;                  // counted pads hold zp_x
        int v;
        if (same_params) {
            int half = cnt / 2;
            v = acc >= 0 ? (acc + half) / cnt : -((-acc + half) / cnt);
        } else {
            v = zp_y + mbqm(acc - cnt * zp_x, q[cnt], shift[cnt]);
        }
        y[i] = (i8)clamp_int(v, -128, 127);
    }
}

// Global pools: one output (b, ch) per thread over p positions; mode 0 mean, 1 max.
extern "C" __global__ void global_pool_f32(const float* x, float* y, int n, int c, i64 p, int nhwc, int mode) {
    i64 total = (i64)n * c;
    GRID_STRIDE(i, total) {
        i64 b = i / c, ch = i % c;
        const float* base = nhwc ? x + b * p * c + ch : x + i * p;
        i64 step = nhwc ? c : 1;
        float acc = mode ? -INFINITY : 0.0f;
        for (i64 k = 0; k < p; ++k) {
            float v = base[k * step];
            acc = mode ? ((v > acc || v != v) ? v : acc) : acc + v;
        }
        y[i] = mode ? acc : acc / (float)p;
    }
}

// int8 global average pool: the rounded mean (same parameters) or requantized mean (q, shift).
extern "C" __global__ void global_avgpool_s8(const i8* x, i8* y, int n, int c, i64 p, int nhwc, int same_params,
                                             int zp_x, int zp_y, int q, int shift) {
    i64 total = (i64)n * c;
    GRID_STRIDE(i, total) {
        i64 b = i / c, ch = i % c;
        const i8* base = nhwc ? x + b * p * c + ch : x + i * p;
        i64 step = nhwc ? c : 1;
        i64 acc = 0;
        for (i64 k = 0; k < p; ++k) acc += (int)base[k * step];
        int v;
        if (same_params) {
            i64 half = p / 2;
            v = (int)(acc >= 0 ? (acc + half) / p : -((-acc + half) / p));
        } else {
            v = zp_y + mbqm((int)(acc - p * (i64)zp_x), q, shift);
        }
        y[i] = (i8)clamp_int(v, -128, 127);
    }
}
