/* The Winograd F(4x4, 3x3) tile transforms of winograd_f32.c, compiled once per ISA:
 * winograd_f32.c includes this file with WGF_NAME(f) (function-name suffix), WGF_ATTR (target
 * attribute), WGF_V (lanes), WGF_T (vector type) and WGF_LOAD / STORE / SET / ADD / SUB /
 * FMA (a*b + c) / MAX / MIN defined (MAX/MIN(c, v) return v when v is NaN, like the SGEMM
 * clamp). Vectors run along the NHWC channels, so every lane is one channel's tile.
 *
 * B^T (input), A^T (output) of F(4x4, 3x3) on the points 0, +-1, +-2, infinity:
 *   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
 *   A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1] */

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

/* tiles [t0, t0 + nt) (numbers over the whole output), channels [c0, c1) in steps of WGF_V:
 * V[xi][r][c] = (B^T d B)[xi] of tile t0 + r at dst + (xi * tb + r) * C + c, xi = row * 6 + col */
WGF_ATTR static void WGF_NAME(input)(const wg_plan *p, int64_t t0, int64_t nt, int64_t c0, int64_t c1,
                                     float *dst, int64_t tb) {
    const ei_conv_f32_args *a = p->a;
    const int64_t C = a->c, H = a->h, W = a->w;
    for (int64_t r = 0; r < nt; r++) {
        int64_t t = t0 + r, b = t / p->tiles_img, q = t - b * p->tiles_img;
        int64_t iy0 = q / p->tiles_x * 4 - a->pt, ix0 = q % p->tiles_x * 4 - a->pl;
        const float *xb = a->x + b * H * W * C;
        int inside = iy0 >= 0 && iy0 + 6 <= H && ix0 >= 0 && ix0 + 6 <= W;
        for (int64_t c = c0; c + WGF_V <= c1; c += WGF_V) {
            WGF_T d[36], s[36];
            if (inside) {
                const float *px = xb + (iy0 * W + ix0) * C + c;
                for (int i = 0; i < 6; i++)
                    for (int j = 0; j < 6; j++) d[i * 6 + j] = WGF_LOAD(px + (i * W + j) * C);
            } else {
                for (int i = 0; i < 6; i++)
                    for (int j = 0; j < 6; j++) {
                        int64_t iy = iy0 + i, ix = ix0 + j;
                        d[i * 6 + j] = iy >= 0 && iy < H && ix >= 0 && ix < W
                                       ? WGF_LOAD(xb + (iy * W + ix) * C + c) : WGF_SET(0.0f);
                    }
            }
            for (int i = 0; i < 6; i++) WGF_NAME(bt)(d + i * 6, 1, s + i * 6, 1);     /* rows */
            for (int j = 0; j < 6; j++) WGF_NAME(bt)(s + j, 6, d + j, 6);             /* columns */
            float *o = dst + r * C + c;
            for (int xi = 0; xi < 36; xi++) WGF_STORE(o + xi * tb * C, d[xi]);
        }
    }
}

/* the outputs of tiles [t0, t0 + nt) for the columns [j0, j1) of the transform-domain block
 * mb (mb[(xi * tb + r) * ldm + j], j = output channel - col0) in steps of WGF_V: A^T M A, then
 * bias, residual and the clamp (Relu / Clip) in registers, stored for the tile's pixels inside
 * the output (partial tiles at the bottom and right edges) */
WGF_ATTR static void WGF_NAME(output)(const wg_plan *p, const float *mb, int64_t ldm, int64_t tb, int64_t t0,
                                      int64_t nt, int64_t j0, int64_t j1, int64_t col0) {
    const ei_conv_f32_args *a = p->a;
    const int64_t M = a->m, OH = a->oh, OW = a->ow;
    int clamp = a->act == EI_U_RELU || a->act == EI_U_CLIP;
    WGF_T lo = WGF_SET(a->act == EI_U_RELU ? 0.0f : a->p0), hi = WGF_SET(a->act == EI_U_RELU ? INFINITY : a->p1);
    for (int64_t r = 0; r < nt; r++) {
        int64_t t = t0 + r, b = t / p->tiles_img, q = t - b * p->tiles_img;
        int64_t oy0 = q / p->tiles_x * 4, ox0 = q % p->tiles_x * 4;
        int vy = (int)EI_MIN((int64_t)4, OH - oy0), vx = (int)EI_MIN((int64_t)4, OW - ox0);
        for (int64_t j = j0; j + WGF_V <= j1; j += WGF_V) {
            WGF_T m[36], s[24], o[16];
            const float *src = mb + r * ldm + j;
            for (int xi = 0; xi < 36; xi++) m[xi] = WGF_LOAD(src + xi * tb * ldm);
            for (int col = 0; col < 6; col++) WGF_NAME(at)(m + col, 6, s + col, 6);   /* 4 x 6 */
            for (int row = 0; row < 4; row++) WGF_NAME(at)(s + row * 6, 1, o + row * 4, 1);
            WGF_T bv = a->bias ? WGF_LOAD(a->bias + col0 + j) : WGF_SET(0.0f);
            for (int yy = 0; yy < vy; yy++)
                for (int xx = 0; xx < vx; xx++) {
                    int64_t off = ((b * OH + oy0 + yy) * OW + ox0 + xx) * M + col0 + j;
                    WGF_T v = WGF_ADD(o[yy * 4 + xx], bv);
                    if (a->z) v = WGF_ADD(v, WGF_LOAD(a->z + off));
                    if (clamp) v = WGF_MIN(hi, WGF_MAX(lo, v));
                    WGF_STORE(a->y + off, v);
                }
        }
    }
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
