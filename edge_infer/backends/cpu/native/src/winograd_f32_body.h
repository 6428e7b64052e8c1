/* The Winograd F(4x4, 3x3) and F(2x2, 3x3) tile transforms of winograd_f32.c, compiled once per ISA:
 * winograd_f32.c includes this file with WGF_NAME(f) (function-name suffix), WGF_ATTR (target
 * attribute), WGF_V (lanes), WGF_T (vector type) and WGF_LOAD / STORE / SET / ADD / SUB /
 * FMA (a*b + c) / MAX / MIN defined (MAX/MIN(c, v) return v when v is NaN, like the SGEMM
 * clamp). Vectors run along the NHWC channels, so every lane is one channel's tile.
 *
 * B^T (input), A^T (output) of F(4x4, 3x3) on the points 0, +-1, +-2, infinity:
 *   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
 *   A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
 * and of F(2x2, 3x3) on the points 0, +-1, infinity (coefficients 0 and +-1 only):
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]     A^T = [1 1 1 0; 0 1 -1 -1] */

/* o[0..5] = B^T d[0..5] (strides in vectors) */
WGF_ATTR static inline void WGF_NAME(bt)(const WGF_T *d, int sd, WGF_T *o, int so) {
    WGF_T d0 = d[0], d1 = d[sd], d2 = d[2 * sd], d3 = d[3 * sd], d4 = d[4 * sd], d5 = d[5 * sd];
    o[0] = WGF_FMA(d0, WGF_SET(4.0f), WGF_FMA(d2, WGF_SET(-5.0f), d4));
    o[so] = WGF_FMA(WGF_ADD(d1, d2), WGF_SET(-4.0f), WGF_ADD(d3, d4));
    o[2 * so] = WGF_FMA(WGF_SUB(d1, d2), WGF_SET(4.0f), WGF_SUB(d4, d3));
    o[3 * so] = WGF_FMA(WGF_SUB(d3, d1), WGF_SET(2.0f), WGF_SUB(d4, d2));
    o[4 * so] = WGF_FMA(WGF_SUB(d1, d3), WGF_SET(2.0f), WGF_SUB(d4, d2));
    o[5 * so] = WGF_FMA(d1, WGF_SET(4.0f), WGF_FMA(d3, WGF_SET(-5.0f), d5));
}

/* o[0..3] = A^T m[0..5] */
WGF_ATTR static inline void WGF_NAME(at)(const WGF_T *m, int sm, WGF_T *o, int so) {
    WGF_T a = WGF_ADD(m[sm], m[2 * sm]), b = WGF_SUB(m[sm], m[2 * sm]);
    WGF_T c = WGF_ADD(m[3 * sm], m[4 * sm]), d = WGF_SUB(m[3 * sm], m[4 * sm]);
    o[0] = WGF_ADD(WGF_ADD(m[0], a), c);
    o[so] = WGF_FMA(d, WGF_SET(2.0f), b);
    o[2 * so] = WGF_FMA(c, WGF_SET(4.0f), a);
    o[3 * so] = WGF_ADD(WGF_FMA(d, WGF_SET(8.0f), b), m[5 * sm]);
}

/* d[i * n + j] = the n x n input tile at (iy0, ix0) of one channel vector (x: the image at
 * that channel), zeros outside the image; inside: the whole tile is in it */
WGF_ATTR static inline __attribute__((always_inline)) void WGF_NAME(gather)(
    const float *x, int64_t iy0, int64_t ix0, int64_t H, int64_t W, int64_t C, int inside, const int n, WGF_T *d) {
    if (inside) {
        const float *px = x + (iy0 * W + ix0) * C;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) d[i * n + j] = WGF_LOAD(px + (i * W + j) * C);
        return;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            int64_t iy = iy0 + i, ix = ix0 + j;
            d[i * n + j] = iy >= 0 && iy < H && ix >= 0 && ix < W ? WGF_LOAD(x + (iy * W + ix) * C) : WGF_SET(0.0f);
        }
}

/* o[0..3] = B^T d[0..3] of F(2x2, 3x3) (strides in vectors) */
WGF_ATTR static inline void WGF_NAME(bt2)(const WGF_T *d, int sd, WGF_T *o, int so) {
    WGF_T d0 = d[0], d1 = d[sd], d2 = d[2 * sd], d3 = d[3 * sd];
    o[0] = WGF_SUB(d0, d2);
    o[so] = WGF_ADD(d1, d2);
    o[2 * so] = WGF_SUB(d2, d1);
    o[3 * so] = WGF_SUB(d1, d3);
}

/* o[0..1] = A^T m[0..3] of F(2x2, 3x3) */
WGF_ATTR static inline void WGF_NAME(at2)(const WGF_T *m, int sm, WGF_T *o, int so) {
    o[0] = WGF_ADD(WGF_ADD(m[0], m[sm]), m[2 * sm]);
    o[so] = WGF_SUB(WGF_SUB(m[sm], m[2 * sm]), m[3 * sm]);
}

/* F(R x R, 3x3), R = 4 or 2 (a constant once inlined), n = R + 2 input rows and columns:
 * tiles [t0, t0 + nt) (numbers over the whole output), channels [c0, c1) in steps of WGF_V:
 * V[xi][r][c] = (B^T d B)[xi] of tile t0 + r at dst + (xi * tb + r) * C + c, xi = row * n + col */
WGF_ATTR static inline __attribute__((always_inline)) void WGF_NAME(input_r)(
    const int R, const wg_plan *p, int64_t t0, int64_t nt, int64_t c0, int64_t c1, float *dst, int64_t tb) {
    const ei_conv_f32_args *a = p->a;
    const int64_t C = a->c, H = a->h, W = a->w;
    const int n = R + 2;
    for (int64_t r = 0; r < nt; r++) {
        int64_t t = t0 + r, b = t / p->tiles_img, q = t - b * p->tiles_img;
        int64_t iy0 = q / p->tiles_x * R - a->pt, ix0 = q % p->tiles_x * R - a->pl;
        const float *xb = a->x + b * H * W * C;
        int inside = iy0 >= 0 && iy0 + n <= H && ix0 >= 0 && ix0 + n <= W;
        for (int64_t c = c0; c + WGF_V <= c1; c += WGF_V) {
            WGF_T d[36], s[36];
            WGF_NAME(gather)(xb + c, iy0, ix0, H, W, C, inside, n, d);
            for (int i = 0; i < n; i++) {                                           /* rows */
                if (R == 4) WGF_NAME(bt)(d + i * n, 1, s + i * n, 1);
                else WGF_NAME(bt2)(d + i * n, 1, s + i * n, 1);
            }
            for (int j = 0; j < n; j++) {                                           /* columns */
                if (R == 4) WGF_NAME(bt)(s + j, n, d + j, n);
                else WGF_NAME(bt2)(s + j, n, d + j, n);
            }
            float *o = dst + r * C + c;
            for (int xi = 0; xi < n * n; xi++) WGF_STORE(o + xi * tb * C, d[xi]);
        }
    }
}

WGF_ATTR static void WGF_NAME(input)(const wg_plan *p, int64_t t0, int64_t nt, int64_t c0, int64_t c1,
                                     float *dst, int64_t tb) {
    WGF_NAME(input_r)(4, p, t0, nt, c0, c1, dst, tb);
}

WGF_ATTR static void WGF_NAME(input2)(const wg_plan *p, int64_t t0, int64_t nt, int64_t c0, int64_t c1,
                                      float *dst, int64_t tb) {
    WGF_NAME(input_r)(2, p, t0, nt, c0, c1, dst, tb);
}

/* F(R x R, 3x3): the outputs of tiles [t0, t0 + nt) for the columns [j0, j1) of the
 * transform-domain block mb (mb[(xi * tb + r) * ldm + j], j = output channel - col0) in steps
 * of WGF_V: A^T M A, then bias, residual and the clamp (Relu / Clip) in registers, stored for
 * the tile's pixels inside the output (partial tiles at the bottom and right edges) */
WGF_ATTR static inline __attribute__((always_inline)) void WGF_NAME(output_r)(
    const int R, const wg_plan *p, const float *mb, int64_t ldm, int64_t tb, int64_t t0, int64_t nt, int64_t j0,
    int64_t j1, int64_t col0) {
    const ei_conv_f32_args *a = p->a;
    const int64_t M = a->m, OH = a->oh, OW = a->ow;
    const int n = R + 2;
    int clamp = a->act == EI_U_RELU || a->act == EI_U_CLIP;
    WGF_T lo = WGF_SET(a->act == EI_U_RELU ? 0.0f : a->p0), hi = WGF_SET(a->act == EI_U_RELU ? INFINITY : a->p1);
    for (int64_t r = 0; r < nt; r++) {
        int64_t t = t0 + r, b = t / p->tiles_img, q = t - b * p->tiles_img;
        int64_t oy0 = q / p->tiles_x * R, ox0 = q % p->tiles_x * R;
        int vy = (int)EI_MIN((int64_t)R, OH - oy0), vx = (int)EI_MIN((int64_t)R, OW - ox0);
        for (int64_t j = j0; j + WGF_V <= j1; j += WGF_V) {
            WGF_T m[36], s[24], o[16];
            const float *src = mb + r * ldm + j;
            for (int xi = 0; xi < n * n; xi++) m[xi] = WGF_LOAD(src + xi * tb * ldm);
            for (int col = 0; col < n; col++) {                                     /* R x n */
                if (R == 4) WGF_NAME(at)(m + col, n, s + col, n);
                else WGF_NAME(at2)(m + col, n, s + col, n);
            }
            for (int row = 0; row < R; row++) {
                if (R == 4) WGF_NAME(at)(s + row * n, 1, o + row * R, 1);
                else WGF_NAME(at2)(s + row * n, 1, o + row * R, 1);
            }
            WGF_T bv = a->bias ? WGF_LOAD(a->bias + col0 + j) : WGF_SET(0.0f);
            for (int yy = 0; yy < vy; yy++)
                for (int xx = 0; xx < vx; xx++) {
                    int64_t off = ((b * OH + oy0 + yy) * OW + ox0 + xx) * M + col0 + j;
                    WGF_T v = WGF_ADD(o[yy * R + xx], bv);
                    if (a->z) v = WGF_ADD(v, WGF_LOAD(a->z + off));
                    if (clamp) v = WGF_MIN(hi, WGF_MAX(lo, v));
                    WGF_STORE(a->y + off, v);
                }
        }
    }
}

WGF_ATTR static void WGF_NAME(output)(const wg_plan *p, const float *mb, int64_t ldm, int64_t tb, int64_t t0,
                                      int64_t nt, int64_t j0, int64_t j1, int64_t col0) {
    WGF_NAME(output_r)(4, p, mb, ldm, tb, t0, nt, j0, j1, col0);
}

WGF_ATTR static void WGF_NAME(output2)(const wg_plan *p, const float *mb, int64_t ldm, int64_t tb, int64_t t0,
                                       int64_t nt, int64_t j0, int64_t j1, int64_t col0) {
    WGF_NAME(output_r)(2, p, mb, ldm, tb, t0, nt, j0, j1, col0);
}

#undef WGF_NAME
#undef WGF_ATTR
#undef WGF_V
#undef WGF_T
#undef WGF_LOAD
#undef WGF_STORE
#undef WGF_SET
#undef WGF_ADD
#undef WGF_SUB
#undef WGF_FMA
#undef WGF_MAX
#undef WGF_MIN
