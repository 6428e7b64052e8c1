/* Convolution: direct (one work item per output value; depthwise, grouped, tiny reductions)
 * and im2col (column matrix for the tiled GEMM), NCHW or NHWC, float32 and int8.
 * geo = [N, C, H, W, M, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, group, cg, mg, last];
 * 1-D convolutions run as H = KH = OH = 1. Weights are OIHW (M, cg, KH, KW). */

#define GEO_DECL \
    int N = geo[0], C = geo[1], H = geo[2], W = geo[3], M = geo[4], OH = geo[5], OW = geo[6]; \
    int KH = geo[7], KW = geo[8], SH = geo[9], SW = geo[10], PH = geo[11], PW = geo[12]; \
    int DH = geo[13], DW = geo[14], CG = geo[16], MG = geo[17], LAST = geo[18]; \
    int xsc = LAST ? 1 : H * W, xsh = LAST ? W * C : W, xsw = LAST ? C : 1, xsn = C * H * W;

/* output index -> (n, m, oh, ow) in y's memory order */
#define OUT_DECOMPOSE(i) \
    int n, m, oh, ow; \
    if (LAST) { m = i % M; int r = i / M; ow = r % OW; r /= OW; oh = r % OH; n = r / OH; } \
    else { ow = i % OW; int r = i / OW; oh = r % OH; r /= OH; m = r % M; n = r / M; }

__kernel void conv_direct_f32(__global const float* x, int xo, __global const float* w,
                              __global const float* bias, __global const float* z, int zo,
                              __global float* y, int yo, __global const int* geo, int total,
                              int act, float p0, float p1, int flags) {
    int i = get_global_id(0);
    if (i >= total) return;
    GEO_DECL
    OUT_DECOMPOSE(i)
    int g = m / MG;
    float acc = 0.0f;
    int xb = xo + n * xsn + g * CG * xsc;
    int wb = m * CG * KH * KW;
    for (int ci = 0; ci < CG; ci++) {
        for (int kh = 0; kh < KH; kh++) {
            int ih = oh * SH - PH + kh * DH;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KW; kw++) {
                int iw = ow * SW - PW + kw * DW;
                if (iw < 0 || iw >= W) continue;
                acc += x[xb + ci * xsc + ih * xsh + iw * xsw] * w[wb + (ci * KH + kh) * KW + kw];
            }
        }
    }
    if (flags & 1) acc += bias[m];
    if (flags & 2) acc += z[zo + i];
    y[yo + i] = act_apply(acc, act, p0, p1);
}

/* int8: acc = sum (x - zp_x) w over taps inside the input (a zp_x pad contributes 0), + bias
 * (int64), requantized per output channel, + zp_y, + residual table[z], clamped. */
__kernel void conv_direct_i8(__global const char* x, int xo, int zp_x, __global const char* w,
                             __global const long* bias, __global const int* qm, __global const int* qs,
                             int zp_y, __global const char* z, int zo, __global const long* ztab,
                             __global char* y, int yo, __global const int* geo, int total,
                             int lo, int hi, int flags) {
    int i = get_global_id(0);
    if (i >= total) return;
    GEO_DECL
    OUT_DECOMPOSE(i)
    int g = m / MG;
    int acc = 0;
    int xb = xo + n * xsn + g * CG * xsc;
    int wb = m * CG * KH * KW;
    for (int ci = 0; ci < CG; ci++) {
        for (int kh = 0; kh < KH; kh++) {
            int ih = oh * SH - PH + kh * DH;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KW; kw++) {
                int iw = ow * SW - PW + kw * DW;
                if (iw < 0 || iw >= W) continue;
                acc += ((int)x[xb + ci * xsc + ih * xsh + iw * xsw] - zp_x) * (int)w[wb + (ci * KH + kh) * KW + kw];
            }
        }
    }
    long v = (long)acc + bias[m];
    v = mbqm(v, (long)qm[m], qs[m]) + zp_y;
    if (flags & 2) v += ztab[(int)z[zo + i] + 128];
    y[yo + i] = (char)clamp_i(v, lo, hi);
}

/* Column matrix for all (n, g): NCHW cols[n][g][k][p] with k = (ci, kh, kw) (matches OIHW
 * weights), NHWC cols[n][g][p][k] with k = (kh, kw, ci) (weights packed to match).
 * Outside the input: fill (0, or zp_x for int8). */
#define IM2COL_BODY(FILL) \
    int j = get_global_id(0); \
    GEO_DECL \
    int G = geo[15]; \
    int P = OH * OW, KK = CG * KH * KW; \
    if (j >= N * G * P * KK) return; \
    int k, p, r; \
    if (LAST) { k = j % KK; r = j / KK; p = r % P; r /= P; } \
    else { p = j % P; r = j / P; k = r % KK; r /= KK; } \
    int g = r % G, n = r / G; \
    int ci, kh, kw; \
    if (LAST) { ci = k % CG; int t = k / CG; kw = t % KW; kh = t / KW; } \
    else { kw = k % KW; int t = k / KW; kh = t % KH; ci = t / KH; } \
    int oh = p / OW, ow = p % OW; \
    int ih = oh * SH - PH + kh * DH, iw = ow * SW - PW + kw * DW; \
    cols[co + j] = (ih < 0 || ih >= H || iw < 0 || iw >= W) ? FILL \
        : x[xo + n * xsn + (g * CG + ci) * xsc + ih * xsh + iw * xsw];

__kernel void im2col_f32(__global const float* x, int xo, __global float* cols, int co,
                         __global const int* geo) {
    IM2COL_BODY(0.0f)
}

__kernel void im2col_i8(__global const char* x, int xo, __global char* cols, int co,
                        __global const int* geo, int fill) {
    IM2COL_BODY((char)fill)
}
