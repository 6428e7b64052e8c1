/* Pools: windowed max / average (NCHW or NHWC), global average / max, float32 and int8.
 * geo = [N, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, last, ph_end, pw_end];
 * taps outside the input are skipped (max: as -inf padding; average: not summed, and
 * counted only with count_include_pad inside input + explicit pads). */

#define POOL_DECL \
    int N = geo[0], C = geo[1], H = geo[2], W = geo[3], OH = geo[4], OW = geo[5]; \
    int KH = geo[6], KW = geo[7], SH = geo[8], SW = geo[9], PH = geo[10], PW = geo[11]; \
    int DH = geo[12], DW = geo[13], LAST = geo[14], PHE = geo[15], PWE = geo[16]; \
    int xsc = LAST ? 1 : H * W, xsh = LAST ? W * C : W, xsw = LAST ? C : 1, xsn = C * H * W; \
    int c, oh, ow, n; \
    if (LAST) { c = i % C; int r = i / C; ow = r % OW; r /= OW; oh = r % OH; n = r / OH; } \
    else { ow = i % OW; int r = i / OW; oh = r % OH; r /= OH; c = r % C; n = r / C; } \
    int xb = xo + n * xsn + c * xsc;

#define POOL_LOOP(BODY) \
    for (int kh = 0; kh < KH; kh++) { \
        int ih = oh * SH - PH + kh * DH; \
        for (int kw = 0; kw < KW; kw++) { \
            int iw = ow * SW - PW + kw * DW; \
            int inside = ih >= 0 && ih < H && iw >= 0 && iw < W; \
            int counted = include_pad ? (ih >= -PH && ih < H + PHE && iw >= -PW && iw < W + PWE) : inside; \
            BODY \
        } \
    }

__kernel void maxpool_f32(__global const float* x, int xo, __global float* y, int yo,
                          __global const int* geo, int total) {
    int i = get_global_id(0);
    if (i >= total) return;
    int include_pad = 0;
    POOL_DECL
    float v = -INFINITY;
    POOL_LOOP(if (inside) v = fmax(v, x[xb + ih * xsh + iw * xsw]); (void)counted;)
    y[yo + i] = v;
}

__kernel void maxpool_i8(__global const char* x, int xo, __global char* y, int yo,
                         __global const int* geo, int total) {
    int i = get_global_id(0);
    if (i >= total) return;
    int include_pad = 0;
    POOL_DECL
    int v = -128;
    POOL_LOOP(if (inside) v = max(v, (int)x[xb + ih * xsh + iw * xsw]); (void)counted;)
    y[yo + i] = (char)v;
}

__kernel void avgpool_f32(__global const float* x, int xo, __global float* y, int yo,
                          __global const int* geo, int total, int include_pad) {
    int i = get_global_id(0);
    if (i >= total) return;
    POOL_DECL
    float s = 0.0f;
    int cnt = 0;
    POOL_LOOP(if (inside) s += x[xb + ih * xsh + iw * xsw]; cnt += counted;)
    y[yo + i] = s * (1.0f / (float)cnt);
}

/* int8, output parameters equal to the input's: TFLite's rounded mean of raw values
 * (a counted pad holds zp_x); else (qm, qs indexed by the count): zp_y + MBQM(sum(x - zp_x)). */
__kernel void avgpool_i8(__global const char* x, int xo, __global char* y, int yo,
                         __global const int* geo, int total, int include_pad, int zp_x,
                         int requant, __global const int* qm, __global const int* qs, int zp_y) {
    int i = get_global_id(0);
    if (i >= total) return;
    POOL_DECL
    long s = 0;
    int cnt = 0;
    POOL_LOOP(if (inside) s += x[xb + ih * xsh + iw * xsw]; else if (counted) s += zp_x; cnt += counted;)
    long v;
    if (requant) {
        v = mbqm(s - (long)cnt * zp_x, (long)qm[cnt], qs[cnt]) + zp_y;
    } else {
        long h = cnt / 2;
        v = s >= 0 ? (s + h) / cnt : -((-s + h) / cnt);
    }
    y[yo + i] = (char)clamp_i(v, -128, 127);
}

/* one work item per (n, c): reduce P positions with stride sp (NCHW: 1, NHWC: C) */
__kernel void global_pool_f32(__global const float* x, int xo, __global float* y, int yo,
                              int C, int P, int last, int is_max) {
    int i = get_global_id(0);
    int n = i / C, c = i % C;
    int base = xo + (last ? n * P * C + c : i * P);
    int sp = last ? C : 1;
    float acc = is_max ? -INFINITY : 0.0f;
    for (int p = 0; p < P; p++) {
        float v = x[base + p * sp];
        acc = is_max ? fmax(acc, v) : acc + v;
    }
    y[yo + i] = is_max ? acc : acc / (float)P;
}

__kernel void global_pool_i8(__global const char* x, int xo, __global char* y, int yo,
                             int C, int P, int last, int is_max, int zp_x,
                             int requant, int qm, int qs, int zp_y) {
    int i = get_global_id(0);
    int n = i / C, c = i % C;
    int base = xo + (last ? n * P * C + c : i * P);
    int sp = last ? C : 1;
    long s = 0;
    int mx = -128;
    for (int p = 0; p < P; p++) {
        int v = x[base + p * sp];
        s += v;
        mx = max(mx, v);
    }
    long v;
    if (is_max) v = mx;
    else if (requant) v = mbqm(s - (long)P * zp_x, (long)qm, qs) + zp_y;
    else { long h = P / 2; v = s >= 0 ? (s + h) / P : -((-s + h) / P); }
    y[yo + i] = (char)clamp_i(v, -128, 127);
}
