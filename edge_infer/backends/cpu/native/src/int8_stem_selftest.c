/* Self-test of the int8 stem convolution (int8_stem.c, int8_stem_input.c). */
#include "int8_stem.h"
#include "selftest_rng.h"

#include <math.h>
#include <string.h>

/* ---- self-test: the dispatched kind (and every layout read by the scalar rows) against a
 * plain direct convolution + ei_rq_one + table, seeded random cases ---- */

EI_API int ei_selftest_int8_stem(void) {
    int fails = 0;
    st_state = 1717;
    enum { XN = 2 * 4 * 19 * 23, YN = 2 * 12 * 23 * 40, WN = 40 * 5 * 5 * 4 };
    static int8_t x[XN], xq[XN], y0[YN], y1[YN], w[WN], lut[256];
    static float xf[XN], xh[XN];        /* the float input, NCHW and NHWC (ei_int8_stem_q) */
    static int32_t bias[40], mult[40], shift[40];
    static char pack[1 << 16] __attribute__((aligned(64))), scratch[1 << 16] __attribute__((aligned(64)));
    for (int i = 0; i < 256; i++) lut[i] = (int8_t)st_rand();
    for (int trial = 0; trial < 24; trial++) {
        ei_int8_conv_args a;
        memset(&a, 0, sizeof a);
        a.n = 1 + trial % 2; a.c = 1 + trial % 4; a.h = st_int(1, 19); a.w = st_int(1, 23);
        a.m = (int[]){ 16, 5, 24, 40, 8, 33 }[trial % 6];
        a.kh = st_int(1, 5); a.kw = st_int(1, 5); a.sh = st_int(1, 3); a.sw = st_int(1, 3); a.dh = st_int(1, 2); a.dw = 1;
        a.pt = st_int(0, 2); a.pl = st_int(0, 2);
        int pb = st_int(0, 2), pr = st_int(0, 2);
        int64_t eh = (int64_t)a.h + a.pt + pb - (int64_t)a.dh * (a.kh - 1) - 1, ew = (int64_t)a.w + a.pl + pr - a.kw;
        if (eh < 0 || ew < 0) continue;
        a.oh = (int32_t)(eh / a.sh + 1); a.ow = (int32_t)(ew / a.sw + 1);
        a.zp_x = st_int(-128, 127); a.zp_y = st_int(-128, 127);
        a.lo = trial % 3 == 0 ? a.zp_y : -128; a.hi = 127;
        a.threads = 1 + trial % 2;
        a.lut = trial % 2 ? lut : NULL;
        int K = a.kh * a.kw * a.c;
        /* x: a float input quantized (scale 0.02, zp_x; ties, out-of-range values, NaN) */
        int nx = a.n * a.h * a.w * a.c;
        for (int i = 0; i < nx; i++) {
            xf[i] = ((float)st_rand() / 4294967296.0f - 0.5f) * 6.0f;
            if (i % 7 == 3) xf[i] = (float)st_int(-150, 150) * 0.02f + 0.01f;
        }
        if (nx > 4) { xf[1] = NAN; xf[2] = 1e30f; xf[3] = -INFINITY; }
        ei_quantize_row_s8(xf, nx, 0.02f, (float)a.zp_x, xq);
        for (int b = 0; b < a.n; b++)           /* NCHW -> NHWC, floats and quantized values */
            for (int ch = 0; ch < a.c; ch++)
                for (int i = 0; i < a.h * a.w; i++) {
                    x[(b * a.h * a.w + i) * a.c + ch] = xq[(b * a.c + ch) * a.h * a.w + i];
                    xh[(b * a.h * a.w + i) * a.c + ch] = xf[(b * a.c + ch) * a.h * a.w + i];
                }
        for (int i = 0; i < a.m * K; i++) w[i] = (int8_t)(st_int(-127, 127));
        for (int i = 0; i < a.m; i++) {
            bias[i] = st_int(-100000, 100000);
            mult[i] = (int32_t)((1u << 30) + (st_rand() & ((1u << 30) - 1)));
            shift[i] = st_int(-12, 1);
        }
        a.x = x; a.bias = bias; a.mult = mult; a.shift = shift;
        for (int64_t b = 0; b < a.n; b++)
            for (int64_t oy = 0; oy < a.oh; oy++)
                for (int64_t ox = 0; ox < a.ow; ox++)
                    for (int mm = 0; mm < a.m; mm++) {
                        int32_t acc = bias[mm];
                        for (int ky = 0; ky < a.kh; ky++)
                            for (int kx = 0; kx < a.kw; kx++)
                                for (int ci = 0; ci < a.c; ci++) {
                                    int64_t iy = oy * a.sh - a.pt + ky * a.dh, ix = ox * a.sw - a.pl + kx;
                                    int32_t v = iy >= 0 && iy < a.h && ix >= 0 && ix < a.w
                                        ? x[((b * a.h + iy) * a.w + ix) * a.c + ci] : a.zp_x;
                                    acc += v * w[mm * K + (ky * a.kw + kx) * a.c + ci];
                                }
                        int8_t q = ei_rq_one(acc, mult[mm], shift[mm], a.zp_y, 0, a.lo, a.hi);
                        y0[((b * a.oh + oy) * a.ow + ox) * a.m + mm] = a.lut ? lut[(uint8_t)q] : q;
                    }
        size_t ny = (size_t)a.n * a.oh * a.ow * a.m;
        if (!ei_stem_fits(&a) || ei_int8_stem_pack_size(&a) > (int64_t)sizeof pack
            || (ei_int8_stem_scratch(&a) + ei_stem_qrow_bytes(&a)) * a.threads > (int64_t)sizeof scratch) { fails++; continue; }
        /* each kind under an ISA mask that runs it (where this CPU has it; else the scalar rows
         * read its layout) */
        static const int modes[6][2] = { { KIND_VNNI, -1 }, { KIND_VNNI, ~EI_AMX }, { KIND_AVX2, EI_AVX2 },
                                         { KIND_DOT, EI_NEON | EI_DOTPROD }, { KIND_NEON, EI_NEON }, { KIND_SCALAR, 0 } };
        int cur = ei_set_isa_mask(-1);
        ei_set_isa_mask(cur);
        for (int j = 0; j < 6; j++) {
            ei_set_isa_mask(cur & modes[j][1]);
            a.kind = modes[j][0];
            ei_int8_stem_pack(&a, w, pack);
            a.wpack = pack; a.scratch = scratch; a.y = y1;
            memset(y1, 0, ny);
            ei_int8_stem(&a);
            fails += memcmp(y0, y1, ny) != 0;
            for (int nchw = 0; nchw < 2; nchw++) {       /* the float input, quantized in the lines */
                ei_int8_stem_q_args q = { a, nchw ? xf : xh, 0.02f, (float)a.zp_x, nchw };
                q.conv.x = NULL;
                memset(y1, 0, ny);
                ei_int8_stem_q(&q);
                fails += memcmp(y0, y1, ny) != 0;
            }
            ei_set_isa_mask(cur);
        }
    }
    return fails;
}
