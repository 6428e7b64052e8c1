/* The fp32 NHWC depthwise rows of depthwise_f32.c, compiled once per ISA: depthwise_f32.c
 * includes this file with DWF_NAME(f) (function-name suffix), DWF_ATTR (target attribute),
 * DWF_V (lanes), DWF_T (vector type) and DWF_LOAD / STORE / SET / FMA (a*b + c) / ADD / MUL /
 * MAX / MIN defined (MAX/MIN(c, v) return v when v is NaN, like numpy's clip).
 *
 * One output row, channels [c0, c1) in steps of DWF_V: interior output columns (every kernel
 * column inside the input) eight, then four pixels at a time, each tap's weight vector loaded
 * once for them; border columns (and interior ones left over) one pixel at a time over the
 * taps inside the input, four channel vectors at a time. The bias is
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

/* one output pixel over the taps inside the input, channels [c0, c1) in steps of DWF_V: four
 * vectors of channels at a time (four independent FMA chains: one chain per pixel waited out
 * the FMA latency on every tap, 2x slower on 7x7 maps where every pixel is a border pixel) */
DWF_ATTR static void DWF_NAME(pixel)(const ei_dw_args *a, const float *xb, int oy, int ky0, int ky1,
                                     int64_t obase, int ox, int c0, int c1) {
    const int64_t C = a->c, W = a->w;
    const float *wt = (const float *)a->wt, *bias = (const float *)a->bias;
    int kx0, kx1;
    ei_tap_range(ox, a->sw, a->pl, a->dw, a->kw, W, &kx0, &kx1);
    const int64_t xs = (int64_t)a->dw * C;
    int c = c0;
    for (; c + 4 * DWF_V <= c1; c += 4 * DWF_V) {
        DWF_T s0, s1, s2, s3;
        if (bias) {
            s0 = DWF_LOAD(bias + c); s1 = DWF_LOAD(bias + c + DWF_V);
            s2 = DWF_LOAD(bias + c + 2 * DWF_V); s3 = DWF_LOAD(bias + c + 3 * DWF_V);
        } else s0 = s1 = s2 = s3 = DWF_SET(0.0f);
        for (int ky = ky0; ky < ky1; ky++) {
            int64_t iy = (int64_t)oy * a->sh - a->pt + (int64_t)ky * a->dh;
            const float *xr = xb + (iy * W + (int64_t)ox * a->sw - a->pl + (int64_t)kx0 * a->dw) * C + c;
            const float *wr = wt + ((int64_t)ky * a->kw + kx0) * C + c;
            for (int kx = kx0; kx < kx1; kx++, xr += xs, wr += C) {
                s0 = DWF_FMA(DWF_LOAD(xr), DWF_LOAD(wr), s0);
                s1 = DWF_FMA(DWF_LOAD(xr + DWF_V), DWF_LOAD(wr + DWF_V), s1);
                s2 = DWF_FMA(DWF_LOAD(xr + 2 * DWF_V), DWF_LOAD(wr + 2 * DWF_V), s2);
                s3 = DWF_FMA(DWF_LOAD(xr + 3 * DWF_V), DWF_LOAD(wr + 3 * DWF_V), s3);
            }
        }
        int64_t o = obase + ox * C + c;
        DWF_NAME(put)(a, s0, o);
        DWF_NAME(put)(a, s1, o + DWF_V);
        DWF_NAME(put)(a, s2, o + 2 * DWF_V);
        DWF_NAME(put)(a, s3, o + 3 * DWF_V);
    }
    for (; c < c1; c += DWF_V) {
        DWF_T acc = bias ? DWF_LOAD(bias + c) : DWF_SET(0.0f);
        for (int ky = ky0; ky < ky1; ky++) {
            int64_t iy = (int64_t)oy * a->sh - a->pt + (int64_t)ky * a->dh;
            const float *xr = xb + (iy * W + (int64_t)ox * a->sw - a->pl + (int64_t)kx0 * a->dw) * C + c;
            const float *wr = wt + ((int64_t)ky * a->kw + kx0) * C + c;
            for (int kx = kx0; kx < kx1; kx++, xr += xs, wr += C) acc = DWF_FMA(DWF_LOAD(xr), DWF_LOAD(wr), acc);
        }
        DWF_NAME(put)(a, acc, obase + ox * C + c);
    }
}

/* interior output columns [ox, ox + 8 * groups8 + 4 * groups4) of channels [c, c + DWF_V):
 * eight pixels' accumulators per group of eight (eight FMA chains hide the FMA latency; four
 * left the FMA units half idle), then groups of four; each tap's weight vector is loaded once
 * per group */
DWF_ATTR static void DWF_NAME(interior)(const ei_dw_args *a, const float *xb, int oy, int ky0, int ky1,
                                        int64_t obase, int ox, int groups8, int groups4, int c) {
    const int64_t C = a->c, W = a->w;
    const int kw = a->kw, sw = a->sw, dw = a->dw, pl = a->pl;
    const float *wt = (const float *)a->wt, *bias = (const float *)a->bias;
    const DWF_T bv = bias ? DWF_LOAD(bias + c) : DWF_SET(0.0f);
    const int64_t ps = (int64_t)sw * C;
    for (int g = 0; g < groups8; g++, ox += 8) {
        DWF_T s0 = bv, s1 = bv, s2 = bv, s3 = bv, s4 = bv, s5 = bv, s6 = bv, s7 = bv;
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
                s4 = DWF_FMA(DWF_LOAD(xr + 4 * ps), wv, s4);
                s5 = DWF_FMA(DWF_LOAD(xr + 5 * ps), wv, s5);
                s6 = DWF_FMA(DWF_LOAD(xr + 6 * ps), wv, s6);
                s7 = DWF_FMA(DWF_LOAD(xr + 7 * ps), wv, s7);
            }
        }
        int64_t o = obase + ox * C + c;
        DWF_NAME(put)(a, s0, o);
        DWF_NAME(put)(a, s1, o + C);
        DWF_NAME(put)(a, s2, o + 2 * C);
        DWF_NAME(put)(a, s3, o + 3 * C);
        DWF_NAME(put)(a, s4, o + 4 * C);
        DWF_NAME(put)(a, s5, o + 5 * C);
        DWF_NAME(put)(a, s6, o + 6 * C);
        DWF_NAME(put)(a, s7, o + 7 * C);
    }
    for (int g = 0; g < groups4; g++, ox += 4) {
        DWF_T s0 = bv, s1 = bv, s2 = bv, s3 = bv;
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
}

DWF_ATTR static void DWF_NAME(rows)(const ei_dw_args *a, int64_t r0, int64_t r1, int c0, int c1) {
    const int64_t C = a->c, W = a->w;
    const int kw = a->kw, sw = a->sw, dw = a->dw, pl = a->pl;
    /* output columns [oxa, oxb) read every kernel column inside the input */
    int oxa = (pl + sw - 1) / sw, lastx = a->w - 1 - (kw - 1) * dw + pl;
    int oxb = lastx < 0 ? 0 : EI_MIN(a->ow, lastx / sw + 1);
    if (oxa > a->ow) oxa = a->ow;
    if (oxb < oxa) oxb = oxa;
    /* the interior in groups of eight and four pixels; the rest (borders, and under four
     * interior pixels left) one pixel at a time across the channels */
    int groups8 = (oxb - oxa) / 8, groups4 = (oxb - oxa) % 8 / 4, oxe = oxa + 8 * groups8 + 4 * groups4;
    /* the interior in segments of `seg` groups of eight, every channel vector over a segment
     * before the next segment: the segment's kh input rows (all channels) stay in L1 */
    int seg = (int)EI_MAX((int64_t)1, (int64_t)(24 << 10) / EI_MAX((int64_t)a->kh * sw * C * 4 * 8, (int64_t)1));
    for (int64_t row = r0; row < r1; row++) {
        int b = (int)(row / a->oh), oy = (int)(row % a->oh), ky0, ky1;
        ei_tap_range(oy, a->sh, a->pt, a->dh, a->kh, a->h, &ky0, &ky1);
        const float *xb = (const float *)a->x + (int64_t)b * a->h * W * C;
        const int64_t obase = ((int64_t)b * a->oh + oy) * a->ow * C;
        for (int g0 = 0; oxe > oxa; g0 += seg) {
            int last = g0 + seg >= groups8, n8 = last ? groups8 - g0 : seg, n4 = last ? groups4 : 0;
            for (int c = c0; c < c1; c += DWF_V)
                DWF_NAME(interior)(a, xb, oy, ky0, ky1, obase, oxa + 8 * g0, n8, n4, c);
            if (last) break;
        }
        /* a block of four channel vectors over every such pixel of the row before the next
         * block: its weights stay in L1 (a 5x5 kernel's over 576 channels are 57 KB) */
        for (int c = c0; c < c1; c += 4 * DWF_V) {
            int ce = EI_MIN(c1, c + 4 * DWF_V);
            for (int ox = 0; ox < oxa; ox++) DWF_NAME(pixel)(a, xb, oy, ky0, ky1, obase, ox, c, ce);
            for (int ox = oxe; ox < a->ow; ox++) DWF_NAME(pixel)(a, xb, oy, ky0, ky1, obase, ox, c, ce);
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
