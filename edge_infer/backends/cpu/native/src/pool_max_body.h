/* NHWC max pooling, included once per ISA by pool.c with: MV (vector), ML (lanes), MATTR,
 * MN(f) (per-ISA name), mload, mstore, mset, and the NaN-keeping accumulation:
 * MNAN_T (the NaN flags' type), MNAN_ZERO, MACC(x, acc, flags) (acc = max(x, acc); note a NaN
 * of x in flags), MFINISH(acc, flags) (a NaN where one was seen). Max is order-free, so this
 * is exact against the scalar kernel and numpy: NaN anywhere in a window gives NaN.
 *
 * One output row at a time; per output pixel, the channels in blocks of four vectors (four
 * independent max chains: one chain of 9 dependent maxes per vector left a 3x3 window
 * latency-bound), then single vectors, then a scalar tail. The kernel rows inside the input
 * are found once per output row, the kernel columns once per pixel only at the borders. */
static MATTR void MN(max_nhwc_rows)(const ei_pool2d_f32_args *a, int64_t rb, int64_t re) {
    const int64_t C = a->c, rs = (int64_t)a->w * C, cstep = (int64_t)a->dw * C;
    /* output columns whose window lies inside the input */
    const int64_t oxa = EI_MIN((int64_t)a->ow, ((int64_t)a->pl + a->sw - 1) / a->sw);
    const int64_t lastx = (int64_t)a->w - 1 - (int64_t)(a->kw - 1) * a->dw + a->pl;
    const int64_t oxb = lastx < 0 ? 0 : EI_MIN((int64_t)a->ow, lastx / a->sw + 1);
    const MV ninf = mset(NEG_INF);
    for (int64_t r = rb; r < re; r++) {
        const int64_t n = r / a->oh, oy = r % a->oh;
        int y0, y1;
        ei_tap_range(oy, a->sh, a->pt, a->dh, a->kh, a->h, &y0, &y1);
        const float *xr0 = a->x + (n * a->h + oy * a->sh - a->pt + (int64_t)y0 * a->dh) * rs;
        const int64_t ystep = (int64_t)a->dh * rs;
        const int nky = y1 - y0;
        float *yrow = a->y + r * a->ow * C;
        for (int64_t ox = 0; ox < a->ow; ox++) {
            int x0 = 0, x1 = a->kw;
            if (ox < oxa || ox >= oxb) ei_tap_range(ox, a->sw, a->pl, a->dw, a->kw, a->w, &x0, &x1);
            const float *xp = xr0 + (ox * a->sw - a->pl + (int64_t)x0 * a->dw) * C;
            const int nkx = x1 - x0;
            float *y = yrow + ox * C;
            int64_t c = 0;
            for (; c + 4 * ML <= C; c += 4 * ML) {
                MV m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
                MNAN_T f0 = MNAN_ZERO, f1 = MNAN_ZERO, f2 = MNAN_ZERO, f3 = MNAN_ZERO;
                for (int ky = 0; ky < nky; ky++) {
                    const float *p = xp + ky * ystep + c;
                    for (int kx = 0; kx < nkx; kx++, p += cstep) {
                        MACC(mload(p), m0, f0);
                        MACC(mload(p + ML), m1, f1);
                        MACC(mload(p + 2 * ML), m2, f2);
                        MACC(mload(p + 3 * ML), m3, f3);
                    }
                }
                mstore(y + c, MFINISH(m0, f0));
                mstore(y + c + ML, MFINISH(m1, f1));
                mstore(y + c + 2 * ML, MFINISH(m2, f2));
                mstore(y + c + 3 * ML, MFINISH(m3, f3));
            }
            for (; c + ML <= C; c += ML) {
                MV m0 = ninf;
                MNAN_T f0 = MNAN_ZERO;
                for (int ky = 0; ky < nky; ky++) {
                    const float *p = xp + ky * ystep + c;
                    for (int kx = 0; kx < nkx; kx++, p += cstep) MACC(mload(p), m0, f0);
                }
                mstore(y + c, MFINISH(m0, f0));
            }
            for (; c < C; c++) {        /* channel tail */
                float m = NEG_INF;
                for (int ky = 0; ky < nky; ky++) {
                    const float *p = xp + ky * ystep + c;
                    for (int kx = 0; kx < nkx; kx++, p += cstep) m = fmaxn(*p, m);
                }
                y[c] = m;
            }
        }
    }
}

/* the instantiation's vocabulary, so the next ISA can define its own */
#undef MV
#undef ML
#undef MATTR
#undef MN
#undef mload
#undef mstore
#undef mset
#undef MNAN_T
#undef MNAN_ZERO
#undef MACC
#undef MFINISH
