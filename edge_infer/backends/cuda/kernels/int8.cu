// int8 kernels, bit-exact with the CPU backend's int8 kernels (TFLite integer semantics):
// int32 accumulation, MultiplyByQuantizedMultiplier (common.cuh), 256-entry lookup tables made
// on the host. Geometry arguments of the conv kernels as in conv.cu.
#include "common.cuh"

__device__ __forceinline__ i64 s8_in_index(int nhwc, i64 b, i64 ch, i64 yy, i64 xx, int c, int h, int w) {
    return nhwc ? ((b * h + yy) * w + xx) * c + ch : ((b * c + ch) * h + yy) * w + xx;
}

// Column matrix for the int8 GEMM, one (group, row, k) layout for both input layouts:
// cols[(g * rows + b * oh * ow + p) * kg + k], rows = n * oh * ow, kg = (c / group) * kh * kw,
// k = (ci * kh + ky) * kw + kx (the OIHW weight order); taps in the padding hold zp_x, the
// quantized real zero (so they add nothing once zp_x is subtracted in the GEMM).
extern "C" __global__ void im2col_s8(const i8* x, i8* cols, int n, int c, int h, int w, int oh, int ow, int kh,
                                     int kw, int sh, int sw, int ph, int pw, int dh, int dw, int nhwc, int group,
                                     int zp_x) {
    int cg = c / group;
    i64 kg = (i64)cg * kh * kw;
    i64 p_count = (i64)oh * ow;
    i64 rows = (i64)n * p_count;
    i64 total = (i64)group * rows * kg;
    GRID_STRIDE(i, total) {
        i64 k = i % kg;
        i64 t = i / kg;
        i64 r = t % rows;
        i64 g = t / rows;
        i64 b = r / p_count, p = r % p_count;
        int kx = (int)(k % kw), ky = (int)((k / kw) % kh);
        i64 ch = g * cg + k / ((i64)kw * kh);
        int ox = (int)(p % ow), oy = (int)(p / ow);
        int yy = oy * sh - ph + ky * dh, xx = ox * sw - pw + kx * dw;
        i8 v = (i8)zp_x;
        if (yy >= 0 && yy < h && xx >= 0 && xx < w) v = x[s8_in_index(nhwc, b, ch, yy, xx, c, h, w)];
        cols[i] = v;
    }
}

// The int8 output stage of every GEMM-like kernel: y = clamp(zp_y + MBQM(acc, q[c], shift[c])
// [+ ztable[z]], lo, hi); ztable maps the int8 residual z (index z + 128) to its requantized term.
__device__ __forceinline__ i8 s8_output(int acc, int qc, int shc, int zp_y, int has_res, i8 zv,
                                        const int* ztable, int lo, int hi) {
    int v = mbqm(acc, qc, shc) + zp_y;
    if (has_res) v += ztable[(int)zv + 128];
    return (i8)clamp_int(v, lo, hi);
}

// Tiled int8 GEMM, both operands K-contiguous ("NT"):
//   acc[r, c] = sum_k (A[r * lda + k] - za) * (B[c * ldb + k] - zb) + bias[cc],  cc = c + z * c_zoff
// for r < rows, c < cols, over blockIdx.z = z (groups of a conv, or a batch of matmuls:
// A, B, Y advanced by a_zs, b_zs, y_zs elements per z), then the output stage with per-column
// q[cc], shift[cc], written at
//   Y[z * y_zs + (r / rp) * y_sn + (r % rp) * y_sp + cc * y_sc]
// (conv: rp = output positions per image; NCHW: y_sn = M*P, y_sp = 1, y_sc = P; NHWC: y_sn =
// P*M, y_sp = M, y_sc = 1). The residual z_res is read at the same offset as Y.
// 256 threads (16 x 16) per 64 x 64 tile, each thread 4 x 4 outputs; K in steps of 16 through
// shared memory. All threads reach every __syncthreads (no early exit).
#define GT_M 64
#define GT_N 64
#define GT_K 16
extern "C" __global__ void gemm_s8_nt(const i8* a, const i8* b, const int* bias, const int* q, const int* shift,
                                      const i8* z_res, const int* ztable, i8* y, int rows, int cols, int k_len,
                                      int lda, int ldb, int za, int zb, int zp_y, int lo, int hi, int has_res,
                                      i64 a_zs, i64 b_zs, int c_zoff, i64 y_zs, int rp, i64 y_sn, i64 y_sp,
                                      i64 y_sc) {
    __shared__ int as[GT_K][GT_M + 1];
    __shared__ int bs[GT_K][GT_N + 1];
    int tid = threadIdx.x;
    int tx = tid % 16, ty = tid / 16;
    i64 r0 = (i64)blockIdx.y * GT_M, c0 = (i64)blockIdx.x * GT_N;
    i64 zi = blockIdx.z;
    const i8* az = a + zi * a_zs;
    const i8* bz = b + zi * b_zs;
    int acc[4][4];
    for (int u = 0; u < 4; ++u)
        for (int v = 0; v < 4; ++v) acc[u][v] = 0;
    for (int k0 = 0; k0 < k_len; k0 += GT_K) {
        for (int l = tid; l < GT_M * GT_K; l += 256) {
            int rr = l / GT_K, kk = l % GT_K;
            i64 r = r0 + rr;
            int k = k0 + kk;
            as[kk][rr] = (r < rows && k < k_len) ? (int)az[r * lda + k] - za : 0;
        }
        for (int l = tid; l < GT_N * GT_K; l += 256) {
            int cc = l / GT_K, kk = l % GT_K;
            i64 c = c0 + cc;
            int k = k0 + kk;
            bs[kk][cc] = (c < cols && k < k_len) ? (int)bz[c * ldb + k] - zb : 0;
        }
        __syncthreads();
        for (int kk = 0; kk < GT_K; ++kk) {
            int av[4], bv[4];
            for (int u = 0; u < 4; ++u) av[u] = as[kk][ty + 16 * u];
            for (int v = 0; v < 4; ++v) bv[v] = bs[kk][tx + 16 * v];
            for (int u = 0; u < 4; ++u)
                for (int v = 0; v < 4; ++v) acc[u][v] += av[u] * bv[v];
        }
        __syncthreads();
    }
    for (int u = 0; u < 4; ++u) {
        i64 r = r0 + ty + 16 * u;
        if (r >= rows) continue;
        for (int v = 0; v < 4; ++v) {
            i64 c = c0 + tx + 16 * v;
            if (c >= cols) continue;
            i64 cc = c + zi * c_zoff;
            i64 off = zi * y_zs + (r / rp) * y_sn + (r % rp) * y_sp + cc * y_sc;
            i8 zv = has_res ? z_res[off] : (i8)0;
            y[off] = s8_output(acc[u][v] + bias[cc], q[cc], shift[cc], zp_y, has_res, zv, ztable, lo, hi);
        }
    }
}

// int8 depthwise conv (group == c, channel multiplier mult = m / c), one output per thread;
// taps in the padding are skipped (a zp_x pad adds (zp_x - zp_x) * w = 0). wt: (m, 1, kh, kw).
extern "C" __global__ void depthwise_s8(const i8* x, const i8* wt, const int* bias, const int* q, const int* shift,
                                        const i8* z_res, const int* ztable, i8* y, int n, int c, int h, int w,
                                        int m, int oh, int ow, int kh, int kw, int sh, int sw, int ph, int pw,
                                        int dh, int dw, int nhwc, int zp_x, int zp_y, int lo, int hi,
                                        int has_res) {
    int mult = m / c;
    i64 total = (i64)n * m * oh * ow;
    GRID_STRIDE(i, total) {
        i64 b, co, oy, ox;
        if (nhwc) { co = i % m; i64 t = i / m; ox = t % ow; t /= ow; oy = t % oh; b = t / oh; }
        else { ox = i % ow; i64 t = i / ow; oy = t % oh; t /= oh; co = t % m; b = t / m; }
        i64 ch = co / mult;
        const i8* wrow = wt + co * (i64)kh * kw;
        int acc = 0;
        for (int ky = 0; ky < kh; ++ky) {
            int yy = (int)oy * sh - ph + ky * dh;
            if (yy < 0 || yy >= h) continue;
            for (int kx = 0; kx < kw; ++kx) {
                int xx = (int)ox * sw - pw + kx * dw;
                if (xx < 0 || xx >= w) continue;
                acc += ((int)x[s8_in_index(nhwc, b, ch, yy, xx, c, h, w)] - zp_x) * (int)wrow[ky * kw + kx];
            }
        }
        i8 zv = has_res ? z_res[i] : (i8)0;
        y[i] = s8_output(acc + bias[co], q[co], shift[co], zp_y, has_res, zv, ztable, lo, hi);
    }
}

// y = table[x + 128]: int8 activations, requantizing clamps, Concat inputs with other parameters.
extern "C" __global__ void lut_s8(const i8* x, i8* y, const i8* table, i64 n) {
    GRID_STRIDE(i, n) { y[i] = table[(int)x[i] + 128]; }
}

// int8 SOFTMAX over rows of `cols` (output fixed at 1/256, -128 as TFLite): e = table[max - x]
// (round(2^20 exp(-s_x d))), y = min(127, floor((512 e + sum) / (2 sum)) - 128): the CPU
// kernel's exact rounded quotient, so both backends agree bit for bit. One thread per row.
extern "C" __global__ void softmax_s8(const i8* x, i8* y, const int* table, i64 rows, i64 cols) {
    GRID_STRIDE(r, rows) {
        const i8* xr = x + r * cols;
        i8* yr = y + r * cols;
        int mx = -128;
        for (i64 c = 0; c < cols; c++) mx = (int)xr[c] > mx ? (int)xr[c] : mx;
        i64 tot = 0;
        for (i64 c = 0; c < cols; c++) tot += table[mx - (int)xr[c]];
        for (i64 c = 0; c < cols; c++) {
            i64 q = ((i64)table[mx - (int)xr[c]] * 512 + tot) / (2 * tot) - 128;
            yr[c] = (i8)(q < 127 ? q : 127);
        }
    }
}

// int8 ADD / SUB (TFLite integer_ops/add.h; SUB: q2 negated on the host):
//   v_k = MBQM((x_k - zp_k) << 20, q_k, sh_k); y = clamp(zp_y + MBQM(v_1 + v_2, qy, shy))
// MUL (op 1): y = clamp(zp_y + MBQM((x_1 - zp_1)(x_2 - zp_2), qy, shy)).
// Broadcasting as binary_f32: meta = [dims, a strides, b strides] unless contiguous.
extern "C" __global__ void binary_s8(const i8* a, const i8* b, i8* y, i64 n, int op, int rank, const i64* meta,
                                     int contiguous, int zp1, int q1, int sh1, int zp2, int q2, int sh2, int zp_y,
                                     int qy, int shy) {
    GRID_STRIDE(i, n) {
        i64 ia = i, ib = i;
        if (!contiguous) {
            ia = strided_offset(i, rank, meta, meta + rank);
            ib = strided_offset(i, rank, meta, meta + 2 * rank);
        }
        int x1 = (int)a[ia] - zp1, x2 = (int)b[ib] - zp2;
        int v;
        if (op == 0) {
            int v1 = mbqm(x1 * (1 << 20), q1, sh1);
            int v2 = mbqm(x2 * (1 << 20), q2, sh2);
            v = mbqm(v1 + v2, qy, shy);
        } else {
            v = mbqm(x1 * x2, qy, shy);
        }
        y[i] = (i8)clamp_int(v + zp_y, -128, 127);
    }
}

// int8 clamp at unchanged parameters (Relu, Clip).
extern "C" __global__ void clamp_s8(const i8* x, i8* y, i64 n, int lo, int hi) {
    GRID_STRIDE(i, n) { y[i] = (i8)clamp_int((int)x[i], lo, hi); }
}

// QuantizeLinear: y = saturate(rint(x / scale) + zp) in float32 (round half to even), per tensor
// (axis_len 1) or per axis: the parameter index is (i / inner) % axis_len. is_unsigned: uint8 out.
extern "C" __global__ void quantize_f32(const float* x, u8* y, const float* scale, const float* zp, i64 n,
                                        i64 inner, int axis_len, int is_unsigned) {
    float lo = is_unsigned ? 0.0f : -128.0f, hi = is_unsigned ? 255.0f : 127.0f;
    GRID_STRIDE(i, n) {
        int k = axis_len == 1 ? 0 : (int)((i / inner) % axis_len);
        float v = rintf(x[i] / scale[k]) + zp[k];
        v = fminf(fmaxf(v, lo), hi);
        y[i] = is_unsigned ? (u8)(int)v : (u8)(i8)(int)v;
    }
}

// DequantizeLinear: y = (x - zp) * scale in float32; x int8 / uint8 (in_kind 0 / 1) or int32 (2).
extern "C" __global__ void dequantize_f32(const u8* x, float* y, const float* scale, const float* zp, i64 n,
                                          i64 inner, int axis_len, int in_kind) {
    GRID_STRIDE(i, n) {
        int k = axis_len == 1 ? 0 : (int)((i / inner) % axis_len);
        float v;
        if (in_kind == 0) v = (float)(int)((const i8*)x)[i];
        else if (in_kind == 1) v = (float)(int)x[i];
        else v = (float)((const int*)x)[i];
        y[i] = (v - zp[k]) * scale[k];
    }
}

// y = MBQM(x, q[c], shift[c]) with c = (i / inner) % channels (channels 1: per tensor): int32
// requantization on its own, for checking the fixed point against the CPU bit for bit.
extern "C" __global__ void requantize_s32(const int* x, int* y, const int* q, const int* shift, i64 n, i64 inner,
                                          int channels) {
    GRID_STRIDE(i, n) {
        int c = channels == 1 ? 0 : (int)((i / inner) % channels);
        y[i] = mbqm(x[i], q[c], shift[c]);
    }
}

// int8 transposed convolution (2-D, any group), one output per thread: the gather of
// conv_transpose_f32 on (x - zp_x) * w in int32, + bias, then the conv output stage (per output
// channel MBQM), so it computes the CPU kernel's integers.
extern "C" __global__ void conv_transpose_s8(const i8* x, const i8* wt, const int* bias, const int* q,
                                             const int* shift, i8* y, int n, int c, int h, int w, int m, int oh,
                                             int ow, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw,
                                             int group, int nhwc, int zp_x, int zp_y) {
    int cg = c / group, mg = m / group;
    i64 total = (i64)n * m * oh * ow;
    GRID_STRIDE(i, total) {
        i64 b, co, oy, ox;
        if (nhwc) { co = i % m; i64 t = i / m; ox = t % ow; t /= ow; oy = t % oh; b = t / oh; }
        else { ox = i % ow; i64 t = i / ow; oy = t % oh; t /= oh; co = t % m; b = t / m; }
        i64 g = co / mg, cm = co % mg;
        int acc = 0;
        for (int ky = 0; ky < kh; ++ky) {
            int iy = deconv_source((int)oy, ph, ky, dh, sh, h);
            if (iy < 0) continue;
            for (int kx = 0; kx < kw; ++kx) {
                int ix = deconv_source((int)ox, pw, kx, dw, sw, w);
                if (ix < 0) continue;
                for (int ci = 0; ci < cg; ++ci) {
                    i64 ch = g * cg + ci;
                    acc += ((int)x[s8_in_index(nhwc, b, ch, iy, ix, c, h, w)] - zp_x)
                           * (int)wt[((ch * mg + cm) * kh + ky) * kw + kx];
                }
            }
        }
        y[i] = s8_output(acc + bias[co], q[co], shift[co], zp_y, 0, (i8)0, (const int*)0, -128, 127);
    }
}
