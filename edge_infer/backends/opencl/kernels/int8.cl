/* int8 element-wise kernels, bit-exact with backends/cpu/kernels/int8_*.py (TFLite integer
 * ADD / SUB / MUL, QuantizeLinear / DequantizeLinear, clamps). Broadcast meta as in
 * elementwise.cl: [ndim, dims, a strides, b strides], ndim 0 = same shape. */

#define BCAST_INDEX \
    int nd = meta[0]; int ia = i, ib = i; \
    if (nd) { int r = i; ia = 0; ib = 0; \
        for (int d = nd - 1; d >= 0; d--) { int k = r % meta[1 + d]; r /= meta[1 + d]; \
            ia += k * meta[1 + nd + d]; ib += k * meta[1 + 2 * nd + d]; } }

/* ADD / SUB: v_i = MBQM((x_i - zp_i) << 20, M_i); y = clamp(zp_y + MBQM(v_1 + v_2, M_y)) */
__kernel void add_i8(__global const char* a, int ao, __global const char* b, int bo,
                     __global char* y, int yo, int n, __global const int* meta,
                     int zp1, int q1, int s1, int zp2, int q2, int s2, int qy, int sy, int zp_y) {
    int i = get_global_id(0);
    if (i >= n) return;
    BCAST_INDEX
    long v1 = mbqm(((long)a[ao + ia] - zp1) * (1L << 20), (long)q1, s1);
    long v2 = mbqm(((long)b[bo + ib] - zp2) * (1L << 20), (long)q2, s2);
    long v = mbqm(v1 + v2, (long)qy, sy) + zp_y;
    y[yo + i] = (char)clamp_i(v, -128, 127);
}

/* MUL: y = clamp(zp_y + MBQM((x_1 - zp_1)(x_2 - zp_2), M)) */
__kernel void mul_i8(__global const char* a, int ao, __global const char* b, int bo,
                     __global char* y, int yo, int n, __global const int* meta,
                     int zp1, int zp2, int q, int s, int zp_y) {
    int i = get_global_id(0);
    if (i >= n) return;
    BCAST_INDEX
    long v = mbqm(((long)a[ao + ia] - zp1) * ((long)b[bo + ib] - zp2), (long)q, s) + zp_y;
    y[yo + i] = (char)clamp_i(v, -128, 127);
}

/* y = clamp(x, lo, hi) (Relu / Clip with the input's own parameters) */
__kernel void clamp_i8(__global const char* x, int xo, __global char* y, int yo, int n, int lo, int hi) {
    int i = get_global_id(0);
    if (i < n) y[yo + i] = (char)clamp_i(x[xo + i], lo, hi);
}

/* QuantizeLinear: y = saturate(rint(x / s) + zp) in float32 (scale per (i / inner) % C) */
__kernel void quantize_i8(__global const float* x, int xo, __global char* y, int yo, int n,
                          __global const float* scale, __global const float* zp, int C, int inner) {
    int i = get_global_id(0);
    if (i >= n) return;
    int c = (i / inner) % C;
    float t = rint(x[xo + i] / scale[c]) + zp[c];
    t = fmin(fmax(t, -128.0f), 127.0f);
    y[yo + i] = (char)(int)t;
}

/* DequantizeLinear: y = (x - zp) * s in float32 */
__kernel void dequantize_i8(__global const char* x, int xo, __global float* y, int yo, int n,
                            __global const float* scale, __global const float* zp, int C, int inner) {
    int i = get_global_id(0);
    if (i >= n) return;
    int c = (i / inner) % C;
    y[yo + i] = ((float)x[xo + i] - zp[c]) * scale[c];
}

/* int8 SOFTMAX over rows of `cols` (output 1/256, -128): e = table[max - x] (round(2^20 exp(-s_x d))),
 * y = min(127, floor((512 e + sum) / (2 sum)) - 128), as the CPU kernel, bit for bit */
__kernel void softmax_i8(__global const char* x, int xo, __global char* y, int yo, int rows, int cols,
                         __global const int* table) {
    int r = get_global_id(0);
    if (r >= rows) return;
    __global const char* xr = x + xo + (long)r * cols;
    __global char* yr = y + yo + (long)r * cols;
    int mx = -128;
    for (int c = 0; c < cols; c++) mx = max(mx, (int)xr[c]);
    long tot = 0;
    for (int c = 0; c < cols; c++) tot += table[mx - (int)xr[c]];
    for (int c = 0; c < cols; c++) {
        long q = ((long)table[mx - (int)xr[c]] * 512 + tot) / (2 * tot) - 128;
        yr[c] = (char)(q < 127 ? q : 127);
    }
}
