/* The fp32 NHWC depthwise rows of depthwise_f32.c, compiled once per ISA: depthwise_f32.c
 * includes this file with DWF_NAME(f) (function-name suffix), DWF_ATTR (target attribute),
 * DWF_V (lanes), DWF_T (vector type) and DWF_LOAD / STORE / SET / FMA (a*b + c) / ADD / MUL /
 * MAX / MIN defined (MAX/MIN(c, v) return v when v is NaN, like numpy's clip).
 *
 * One output row, channels [c0, c1) in steps of DWF_V: interior output columns (every kernel
 * column inside the input) four pixels at a time, each tap's weight vector loaded once for
 * the four; border columns one pixel at a time over the taps inside the input. The bias is
 * the accumulators' initial value; the residual and the activation are applied in registers
 * before the one store. */

DWF_ATTR static inline DWF_T DWF_NAME(act)(DWF_T v, int act, float a0, float a1) {
    switch (act) {
    case ACT_RELU: return DWF_MAX(DWF_SET(0.0f), v);
    case ACT_CLIP: return DWF_MIN(DWF_SET(a1), DWF_MAX(DWF_SET(a0), v));
    case ACT_HARDSWISH: {
        DWF_T t = DWF_ADD(DWF_MUL(v, DWF_SET((float)(1.0 / 6.0))), DWF_SET(0.5f));
        return DWF_MUL(DWF_MIN(DWF_SET(1.0f), DWF_MAX(DWF_SET(0.0f), t)), v);
    }
    case ACT_HARDSIGMOID: {
        DWF_T t = DWF_ADD(DWF_MUL(v, DWF_SET(a0)), DWF_SET(a1));
        return DWF_MIN(DWF_SET(1.0f), DWF_MAX(DWF_SET(0.0f), t));
    }
    case ACT_LEAKYRELU: {
        DWF_T t = DWF_MUL(v, DWF_SET(a0));
        return a0 <= 1.0f ? DWF_MAX(t, v) : DWF_MIN(t, v);
    }
    default: return v;
    }
}

/* residual, activation, store of one pixel's vector */
DWF_ATTR static inline void DWF_NAME(put)(const ei_dw_args *a, DWF_T acc, int64_t off) {
    if (a->z) acc = DWF_ADD(acc, DWF_LOAD((const float *)a->z + off));
    DWF_STORE((float *)a->y + off, DWF_NAME(act)(acc, a->act, a->a0, a->a1));
}

/* output columns [ox0, ox1) one pixel at a time, over the taps inside the input */
DWF_ATTR static void DWF_NAME(pixels)(const ei_dw_args *a, const float *xb, int oy, int ky0, int ky1,
                                      int c, DWF_T bv, int64_t obase, int ox0, int ox1) {
    const int64_t C = a->c, W = a->w;
    const float *wt = (const float *)a->wt;
    for (int ox = ox0; ox < ox1; ox++) {
        int kx0, kx1;
        ei_tap_range(ox, a->sw, a->pl, a->dw, a->kw, W, &kx0, &kx1);
        DWF_T acc = bv;
        for (int ky = ky0; ky < ky1; ky++) {
            int64_t iy = (int64_t)oy * a->sh - a->pt + (int64_t)ky * a->dh;
            const float *xr = xb + (iy * W + (int64_t)ox * a->sw - a->pl) * C + c;
            const float *wr = wt + (int64_t)ky * a->kw * C + c;
            for (int kx = kx0; kx < kx1; kx++)
                acc = DWF_FMA(DWF_LOAD(xr + (int64_t)kx * a->dw * C), DWF_LOAD(wr + kx * C), acc);
        }
        DWF_NAME(put)(a, acc, obase + ox * C + c);
    }
}

DWF_ATTR static void DWF_NAME(rows)(const ei_dw_args *a, int64_t r0, int64_t r1, int c0, int c1) {
    const int64_t C = a->c, W = a->w;
    const int kw = a->kw, sw = a->sw, dw = a->dw, pl = a->pl;
    const float *wt = (const float *)a->wt, *bias = (const float *)a->bias;
    /* output columns [oxa, oxb) read every kernel column inside the input */
    int oxa = (pl + sw - 1) / sw, lastx = a->w - 1 - (kw - 1) * dw + pl;
    int oxb = lastx < 0 ? 0 : EI_MIN(a->ow, lastx / sw + 1);
    if (oxa > a->ow) oxa = a->ow;
    if (oxb < oxa) oxb = oxa;
    for (int64_t row = r0; row < r1; row++) {
        int b = (int)(row / a->oh), oy = (int)(row % a->oh), ky0, ky1;
        ei_tap_range(oy, a->sh, a->pt, a->dh, a->kh, a->h, &ky0, &ky1);
        const float *xb = (const float *)a->x + (int64_t)b * a->h * W * C;
        const int64_t obase = ((int64_t)b * a->oh + oy) * a->ow * C;
        for (int c = c0; c < c1; c += DWF_V) {
            const DWF_T bv = bias ? DWF_LOAD(bias + c) : DWF_SET(0.0f);
            int ox = oxa;
            DWF_NAME(pixels)(a, xb, oy, ky0, ky1, c, bv, obase, 0, oxa);
            for (; ox + 4 <= oxb; ox += 4) {
                DWF_T s0 = bv, s1 = bv, s2 = bv, s3 = bv;
                const int64_t ps = (int64_t)sw * C;
                for (int ky = ky0; ky < ky1; ky++) {
                    int64_t iy = (int64_t)oy * a->sh - a->pt + (int64_t)ky * a->dh;
                    const float *xr = xb + (iy * W + (int64_t)ox * sw - pl) * C + c;
                    const float *wr = wt + (int64_t)ky * kw * C + c;
                    for (int kx = 0; kx < kw; kx++, xr += dw * C, wr += C) {
                        DWF_T wv = DWF_LOAD(wr);
                        s0 = DWF_FMA(DWF_LOAD(xr), wv, s0);
                        s1 = DWF_FMA(DWF_LOAD(xr + ps), wv, s1);
                        s2 = DWF_FMA(DWF_LOAD(xr + 2 * ps), wv, s2);
                        s3 = DWF_FMA(DWF_LOAD(xr + 3 * ps), wv, s3);
                    }
                }
                int64_t o = obase + ox * C + c;
                DWF_NAME(put)(a, s0, o);
                DWF_NAME(put)(a, s1, o + C);
                DWF_NAME(put)(a, s2, o + 2 * C);
                DWF_NAME(put)(a, s3, o + 3 * C);
            }
            DWF_NAME(pixels)(a, xb, oy, ky0, ky1, c, bv, obase, ox, a->ow);
        }
    }
}

/* the instantiation's parameters, undefined for the next one */
#undef DWF_NAME
#undef DWF_ATTR
#undef DWF_V
#undef DWF_T
#undef DWF_LOAD
#undef DWF_STORE
#undef DWF_SET
#undef DWF_FMA
#undef DWF_ADD
#undef DWF_MUL
#undef DWF_MAX
#undef DWF_MIN
