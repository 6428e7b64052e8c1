/* The ISA-specific part of conv_stem_f32.c, included once per ISA with:
 * SV (vector type), SL (lanes), SATTR (target attribute), SN(f) (per-ISA name), sload, sstore,
 * sset (broadcast), sfma(a, b, c) = a*b + c, sadd, smul, smax, smin;
 * SR_MAIN / SPV_MAIN: pixels and vectors of the main tile (SPV_MAIN * SL channels, whole
 * 16-channel panels or a part of one); optional (AVX-512): SR_WIDE pixels of a four-vector
 * (64-channel) tile, SR_ALT pixels of a
 * one-vector tile for a last single panel.
 *
 * A tile: R output pixels of one output row times PV vectors of output channels, its sums in
 * registers: the bias, every tap (kernel row by kernel row: a kernel row of kw * c taps is one
 * contiguous run of the NHWC input per pixel, so the inner loop broadcasts one input value per
 * pixel and multiplies it into PV weight vectors), then the residual and a clamp-type
 * activation, stored once. */

static inline SATTR SV SN(stem_act)(SV v, int act, SV c0, SV c1) {
    SV zero = sset(0.0f), one = sset(1.0f);
    switch (act) {
    case EI_U_RELU: return smax(v, zero);
    case EI_U_CLIP: return smin(smax(v, c0), c1);
    case EI_U_HSIGMOID: return smin(one, smax(zero, sadd(smul(v, c0), c1)));
    case EI_U_HSWISH: return smul(smin(one, smax(zero, sadd(smul(v, c0), c1))), v);
    default: return v;
    }
}

/* x: the first pixel's first tap of the first kernel row taken; xrow: floats from one kernel
 * row to the next in the input; nky kernel rows; run taps per kernel row; px: floats from one
 * pixel to the next; w: the weights of that first tap (16 floats per tap, wrow floats from one
 * kernel row to the next, wpanel from one 16-channel panel to the next); bias: PV * SL values
 * or NULL; z: residual (row stride ldz) or NULL; y: output (row stride ldy) */
/* the PV weight vectors of tap j: named registers (GCC kept an array of them on the stack and
 * fed every FMA from there: a load per FMA, 2x the loads of the tile); the scalar build's 16
 * lanes as an array */
#define STEM_WOFF(v) (wk + j * 16 + ((v) * SL / 16) * wpanel + ((v) * SL) % 16)
#ifdef STEM_SCALAR
#define STEM_WEIGHTS(PV) SV wv[PV]; for (int v = 0; v < PV; v++) wv[v] = sload(STEM_WOFF(v));
#define STEM_W(v) wv[v]
#else
#define STEM_WEIGHTS(PV)                                                                              \
    SV w0 = sload(STEM_WOFF(0)), w1 = PV > 1 ? sload(STEM_WOFF(1 % PV)) : w0;                          \
    SV w2 = PV > 2 ? sload(STEM_WOFF(2 % PV)) : w0, w3 = PV > 3 ? sload(STEM_WOFF(3 % PV)) : w0;
#define STEM_W(v) ((v) == 0 ? w0 : (v) == 1 ? w1 : (v) == 2 ? w2 : w3)
#endif

/* K: a suffix of the function's name; PXK: px fixed at compile time (0: the argument). With px
 * = 6 (3 channels at stride 2: every benchmark model's stem) the input offsets r * px + j are
 * constant displacements: AVX-512 folds each broadcast into its FMA ({1to16}) and no general
 * register holds a pixel's offset (the 12-pixel tile had needed 12). 1 thread, interleaved:
 * 3x3 3 -> 16 88.8 -> 82.0 us, 3 -> 32 152 -> 149, AVX2 3 -> 16 115 -> 111, 7x7 3 -> 64
 * 2318 -> 2191; AVX-512 7x7 unchanged */
#define STEM_TILE_KX(R, PV, K, PXK)                                                                   \
    static SATTR __attribute__((noinline)) void SN(stem_t##R##_##PV##K)(const float *x, int64_t xrow,  \
                                           int nky, int64_t run,                                      \
                                           int64_t px_, const float *w, int64_t wrow, int64_t wpanel, \
                                           const float *bias, const float *z, int64_t ldz, float *y,  \
                                           int64_t ldy, int act, float p0, float p1) {                \
        const int64_t px = PXK ? PXK : px_;                                                           \
        SV acc[R][PV];                                                                                \
        for (int v = 0; v < PV; v++) {                                                                \
            SV b = bias ? sload(bias + v * SL) : sset(0.0f);                                          \
            for (int r = 0; r < R; r++) acc[r][v] = b;                                                \
        }                                                                                             \
        for (int ky = 0; ky < nky; ky++) {                                                            \
            const float *xr = x + ky * xrow, *wk = w + ky * wrow;                                     \
            for (int64_t j = 0; j < run; j++) {                                                       \
                STEM_WEIGHTS(PV)                                                                      \
                _Pragma("GCC unroll 16")                                                              \
                for (int r = 0; r < R; r++) {                                                         \
                    SV xv = sset(xr[r * px + j]);                                                     \
                    _Pragma("GCC unroll 16")                                                          \
                    for (int v = 0; v < PV; v++) acc[r][v] = sfma(xv, STEM_W(v), acc[r][v]);         \
                }                                                                                     \
            }                                                                                         \
        }                                                                                             \
        SV c0 = sset(p0), c1 = sset(p1);                                                              \
        for (int r = 0; r < R; r++)                                                                   \
            for (int v = 0; v < PV; v++) {                                                            \
                SV t = acc[r][v];                                                                     \
                if (z) t = sadd(t, sload(z + r * ldz + v * SL));                                      \
                sstore(y + r * ldy + v * SL, SN(stem_act)(t, act, c0, c1));                           \
            }                                                                                         \
    }

/* (two levels, so that SR_MAIN and the like expand before they are pasted into a name) */
#define STEM_TILE_K(R, PV, K, PXK) STEM_TILE_KX(R, PV, K, PXK)
#define STEM_TILE(R, PV) STEM_TILE_K(R, PV, , 0)
STEM_TILE(SR_MAIN, SPV_MAIN)
STEM_TILE_K(SR_MAIN, SPV_MAIN, _px6, 6)
STEM_TILE(1, SPV_MAIN)
#ifdef SR_ALT
STEM_TILE(SR_ALT, 1)
STEM_TILE_K(SR_ALT, 1, _px6, 6)
STEM_TILE(1, 1)
#endif

#ifdef SR_WIDE
STEM_TILE(SR_WIDE, 4)
STEM_TILE_K(SR_WIDE, 4, _px6, 6)
STEM_TILE(1, 4)
#endif

#define STEM_CALLK_(R, PV, K) SN(stem_t##R##_##PV##K)(x, xrow, nky, run, px, w, wrow, wpanel, bias, z, ldz, y, ldy, act, p0, p1)
#define STEM_CALL_K(R, PV, K) STEM_CALLK_(R, PV, K)
#define STEM_CALL(R, PV) STEM_CALL_K(R, PV, )

/* a tile of cw channels at one pixel or, where avail >= the tile's pixel count (interior
 * pixels, kernel rows whole), at that many; returns the pixels done */
static inline SATTR int64_t SN(stem_tile)(int64_t cw, int64_t avail, const float *x, int64_t xrow, int nky,
                                          int64_t run, int64_t px, const float *w, int64_t wrow, int64_t wpanel,
                                          const float *bias, const float *z, int64_t ldz, float *y, int64_t ldy,
                                          int act, float p0, float p1) {
#ifdef SR_WIDE
    if (cw == 4 * SL) {
        if (avail >= SR_WIDE && px == 6) { STEM_CALL_K(SR_WIDE, 4, _px6); return SR_WIDE; }
        if (avail >= SR_WIDE) { STEM_CALL(SR_WIDE, 4); return SR_WIDE; }
        STEM_CALL(1, 4);
        return 1;
    }
#endif
#ifdef SR_ALT
    if (cw == SL) {
        if (avail >= SR_ALT && px == 6) { STEM_CALL_K(SR_ALT, 1, _px6); return SR_ALT; }
        if (avail >= SR_ALT) { STEM_CALL(SR_ALT, 1); return SR_ALT; }
        STEM_CALL(1, 1);
        return 1;
    }
#endif
    if (avail >= SR_MAIN && px == 6) { STEM_CALL_K(SR_MAIN, SPV_MAIN, _px6); return SR_MAIN; }
    if (avail >= SR_MAIN) { STEM_CALL(SR_MAIN, SPV_MAIN); return SR_MAIN; }
    STEM_CALL(1, SPV_MAIN);
    return 1;
}

/* the most pixels a tile takes (AVX-512's 12 x 16), for a partial tile's buffers */
#ifndef STEM_BUF_PIXELS
#define STEM_BUF_PIXELS 12
#endif

/* one output row (b, oy), every channel tile */
static SATTR void SN(stem_row)(const stem_plan *p, int64_t row) {
    const ei_conv_f32_args *a = p->a;
    const int64_t c = a->c, m = a->m, K = p->K, b = row / a->oh, oy = row % a->oh;
    int kylo, kyhi;
    ei_tap_range(oy, a->sh, a->pt, 1, a->kh, a->h, &kylo, &kyhi);
    const int nky = kyhi - kylo;
    const int64_t xrow = (int64_t)a->w * c, px = (int64_t)a->sw * c, wrow = (int64_t)a->kw * c * 16;
    const float *xb = a->x + ((b * a->h + oy * a->sh - a->pt + kylo) * a->w) * c;
    float *yrow = a->y + row * a->ow * m;
    const float *zrow = a->z ? a->z + row * a->ow * m : NULL;
    const int act = p->reg_act;
    float bbuf[64], ybuf[STEM_BUF_PIXELS * 64], zbuf[STEM_BUF_PIXELS * 64];
    for (int64_t c0 = 0; c0 < m; ) {
        const float *wp = a->wpack + (c0 / 16) * K * 16 + (int64_t)kylo * wrow;
        /* the tile's width: the widest whose channels exist (AVX-512: 64, 32, then 16 for a
         * last single panel) */
        int64_t cw = SPV_MAIN * SL;
#ifdef SR_WIDE
        if (m - c0 >= 4 * SL) cw = 4 * SL;
#endif
#ifdef SR_ALT
        if (m - c0 <= SL) cw = SL;
#endif
        const int partial = m - c0 < cw;
        const int64_t nr = partial ? m - c0 : cw;
        const float *bias = NULL;
        if (a->bias) {
            if (partial) {
                memset(bbuf, 0, sizeof bbuf);
                memcpy(bbuf, a->bias + c0, (size_t)nr * sizeof(float));
                bias = bbuf;
            } else bias = a->bias + c0;
        }
        for (int64_t ox = 0; ox < a->ow; ) {
            const float *zo = zrow ? zrow + ox * m + c0 : NULL;
            float *yo = yrow + ox * m + c0;
            const int interior = ox >= p->oxa && ox < p->oxb;
            const int64_t avail = interior ? p->oxb - ox : 1;
            /* a partial tile (fewer channels than its width: a 3 -> 8 stem on AVX-512) runs at
             * full width into buffers with its pixels cw apart (the panels' padding columns
             * are zero weights), and its nr channels are copied out */
            const float *zt = zo;
            float *yt = yo;
            int64_t ld = m;
            if (partial) {
                if (zo)
                    for (int64_t q = 0; q < EI_MIN(avail, STEM_BUF_PIXELS); q++)
                        memcpy(zbuf + q * cw, zo + q * m, (size_t)nr * sizeof(float));
                zt = zo ? zbuf : NULL;
                yt = ybuf;
                ld = cw;
            }
            int64_t done;
            if (interior) {
                const float *xo = xb + (ox * a->sw - a->pl) * c;
                done = SN(stem_tile)(cw, avail, xo, xrow, nky, a->kw * c, px, wp, wrow, K * 16, bias, zt, ld, yt, ld,
                                     act, a->p0, a->p1);
            } else {
                /* one pixel at the border: the kernel columns inside the input only */
                int kxlo, kxhi;
                ei_tap_range(ox, a->sw, a->pl, 1, a->kw, a->w, &kxlo, &kxhi);
                const float *xo = xb + (ox * a->sw - a->pl + kxlo) * c;
                const float *wo = wp + (int64_t)kxlo * c * 16;
                done = SN(stem_tile)(cw, 1, xo, xrow, nky, (int64_t)(kxhi - kxlo) * c, px, wo, wrow, K * 16, bias, zt,
                                     ld, yt, ld, act, a->p0, a->p1);
            }
            if (partial)
                for (int64_t q = 0; q < done; q++) memcpy(yo + q * m, ybuf + q * cw, (size_t)nr * sizeof(float));
            ox += done;
        }
        c0 += nr;
    }
    if (p->post_act) ei_unary_f32_range(p->post_act, yrow, yrow, a->ow * m, a->p0, a->p1);
}

#undef STEM_TILE
#undef STEM_TILE_K
#undef STEM_TILE_KX
#undef STEM_CALLK_
#undef STEM_CALL_K
#undef STEM_CALL
#undef STEM_WOFF
#undef STEM_WEIGHTS
#undef STEM_W
/* the instantiation's vocabulary, so the next ISA can define its own */
#undef SV
#undef SL
#undef SATTR
#undef SN
#undef sload
#undef sstore
#undef sset
#undef sfma
#undef sadd
#undef smul
#undef smax
#undef smin
#undef SR_MAIN
#undef SPV_MAIN
#ifdef SR_ALT
#undef SR_ALT
#endif
#ifdef SR_WIDE
#undef SR_WIDE
#endif
