/* Self-test of the depthwise convolution (depthwise.c, depthwise_quad.c, depthwise_small.c). */
#include "ei_int8.h"
#include "depthwise.h"
#include "selftest_rng.h"

#include <stdlib.h>
#include <string.h>

/* ---- self-test: the SIMD instance vs the scalar one, bit for bit ---- */

#if defined(__x86_64__)
/* depthwise_small.c's kernels where they fit (small images; 8-channel pixel pairs), on the
 * constants ei_dw_prepare makes, rows in two runs [0, cut) and [cut, rows) (a fused table
 * through ei_dw_range): 1 when it differs from want */
static int st_small(ei_dw_args *a, const int8_t *want, int8_t *y, int64_t ys, int64_t cut) {
    if (!DWQ_OK(a) || !ei_dw_has_vbmi() || !(dws_fits(a) || dws_pairs_fits(a))) return 0;
    int64_t cs = ei_dw_consts_size(a), rows = (int64_t)a->n * a->oh;
    char *consts = aligned_alloc(64, (size_t)(cs + 63) / 64 * 64);
    ei_dw_prepare(a, consts);
    a->consts = consts;
    void *y_old = a->y;
    a->y = y;
    memset(y, 0, ys);
    dw_ctx c = { a, dws_fits(a) ? dws_rows : dws_pairs_rows, rows, 1, ei_dw_scratch(a) };
    ei_dw_range(&c, 0, cut);
    ei_dw_range(&c, cut, rows);
    a->consts = NULL;
    a->y = y_old;
    free(consts);
    return memcmp(want, y, ys) != 0;
}

/* the quad kernels (from scratch and by shifts) on int8 NHWC geometries of their own: kernels
 * 3, 5 and 7 wide, strides 1 and 2, the channel counts whose quad builds differ (8: pixel
 * pairs; 16: one load; 24, 72: a masked tail group; 576; random), rows 1 to 20 wide and
 * padding 0 to k - 1 a side, whole and in two runs of rows; against the scalar instance */
static int st_quads(void) {
    static const int cs[] = {8, 16, 24, 72, 576, 0};
    int fails = 0;
    if (!ei_dw_has_vbmi()) return 0;
    for (int trial = 0; trial < 96; trial++) {
        ei_dw_args a;
        memset(&a, 0, sizeof a);
        a.is_int8 = 1; a.n = 1 + (trial % 7 == 3);
        a.c = cs[trial % 6] ? cs[trial % 6] : 1 + (int)(st_rand() % 100);
        a.kh = a.kw = 3 + 2 * (int)(st_rand() % 3);
        a.sh = a.sw = 1 + (trial / 6) % 2; a.dh = a.dw = 1;
        a.pt = (int)(st_rand() % a.kh); a.pl = (int)(st_rand() % a.kw);
        a.h = a.kh + (int)(st_rand() % 6); a.w = 1 + (int)(st_rand() % 20);
        if (a.w + 2 * a.pl < a.kw) a.w = a.kw;
        int pr = (int)(st_rand() % a.kw), pb = (int)(st_rand() % a.kh);          /* right / bottom */
        a.oh = (a.h + a.pt + pb - a.kh) / a.sh + 1; a.ow = (a.w + a.pl + pr - a.kw) / a.sw + 1;
        a.zp_x = (int32_t)(st_rand() % 256) - 128; a.zp_y = (int32_t)(st_rand() % 256) - 128;
        a.lo = -128 + (trial % 3 == 1) * 30; a.hi = 127; a.threads = 1;
        int taps = a.kh * a.kw, C = a.c;
        int64_t xs = (int64_t)a.n * C * a.h * a.w, ys = (int64_t)a.n * C * a.oh * a.ow;
        int8_t *x = malloc(xs), *z = malloc(ys), *y0 = malloc(ys), *y1 = malloc(ys), *pad = malloc(C);
        int16_t *wt = malloc((size_t)taps * C * 2);
        int32_t *bias = malloc(4 * (size_t)C), *mult = malloc(4 * (size_t)C), *shift = malloc(4 * (size_t)C), ztab[256];
        for (int i = 0; i < 256; i++) ztab[i] = (int32_t)(st_rand() % 300) - 150;
        for (int64_t i = 0; i < xs; i++) x[i] = (int8_t)st_rand();
        for (int64_t i = 0; i < ys; i++) z[i] = (int8_t)st_rand();
        for (int i = 0; i < taps * C; i++) wt[i] = (int16_t)((int32_t)(st_rand() % 255) - 127);
        for (int i = 0; i < C; i++) {
            bias[i] = (int32_t)(st_rand() % 40000) - 20000; pad[i] = (int8_t)a.zp_x;
            mult[i] = (int32_t)((1u << 30) + (st_rand() & ((1u << 30) - 1)));
            shift[i] = -(int32_t)(7 + st_rand() % 6);
        }
        a.x = x; a.wt = wt; a.bias = bias; a.mult = mult; a.shift = shift; a.pad = pad;
        if (trial % 4 == 2) { a.z = z; a.ztab = ztab; }
        char *scr = malloc((size_t)ei_dw_scratch(&a));
        a.scratch = scr;
        int64_t rows = (int64_t)a.n * a.oh, cut = (int64_t)(st_rand() % (uint32_t)rows);
        memset(y0, 0, ys);
        a.y = y0;
        ei_dw_rows_scalar(&a, 0, rows, scr);
        static const rows_fn fns[4] = { ei_dwq_rows, ei_dwq_rows_shift, ei_dwq_rows_chain, ei_dwq_rows_blocks };
        for (int f = 0; f < (ei_dw_has_vbmi2() ? 4 : 1); f++) {
            if (!DWQ_OK(&a)) break;
            memset(y1, 0, ys);
            a.y = y1;
            fns[f](&a, 0, cut, scr);
            fns[f](&a, cut, rows, scr);
            if (memcmp(y0, y1, ys) != 0) fails++;
        }
        fails += st_small(&a, y0, y1, ys, cut);
        free(x); free(z); free(y0); free(y1); free(pad); free(wt); free(bias); free(mult); free(shift); free(scr);
    }
    return fails;
}
#endif

EI_API int ei_selftest_depthwise(void) {
    int fails = 0;
    st_state = 4242;
    if (!ei_rq_simd()) return 0;
#if defined(__x86_64__)
    fails += st_quads();
#endif
    for (int trial = 0; trial < 48; trial++) {
        ei_dw_args a;
        memset(&a, 0, sizeof a);
        a.is_int8 = trial & 1; a.nchw = (trial >> 1) & 1;
        a.n = 1 + (int)(st_rand() % 2); a.c = 1 + (int)(st_rand() % 41);
        a.h = 1 + (int)(st_rand() % 12); a.w = 1 + (int)(st_rand() % 12);
        a.kh = a.kw = (trial % 3 == 2) ? 5 : 3;
        a.sh = a.sw = 1 + (int)(st_rand() % 2); a.dh = a.dw = 1 + (trial % 6 == 1);
        a.pt = a.pl = a.kh / 2;
        a.oh = (a.h + 2 * a.pt - a.dh * (a.kh - 1) - 1) / a.sh + 1; a.ow = (a.w + 2 * a.pl - a.dw * (a.kw - 1) - 1) / a.sw + 1;
        if (a.h + 2 * a.pt - a.dh * (a.kh - 1) < 1 || a.w + 2 * a.pl - a.dw * (a.kw - 1) < 1) continue;
        static const int acts[] = {ACT_NONE, ACT_RELU, ACT_CLIP, ACT_HARDSWISH, ACT_HARDSIGMOID, ACT_LEAKYRELU};
        a.act = acts[st_rand() % 6]; a.a0 = 0.0f; a.a1 = 6.0f;
        if (a.act == ACT_HARDSIGMOID) { a.a0 = 0.2f; a.a1 = 0.5f; }
        if (a.act == ACT_LEAKYRELU) a.a0 = 0.1f;
        a.zp_x = (int32_t)(st_rand() % 256) - 128; a.zp_y = (int32_t)(st_rand() % 256) - 128;
        a.lo = -128 + (trial % 3 == 1) * 40; a.hi = 127 - (trial % 4) * 10;
        a.threads = 1 + trial % 3;
        int taps = a.kh * a.kw, C = a.c;
        int64_t xs = (int64_t)a.n * C * a.h * a.w, ys = (int64_t)a.n * C * a.oh * a.ow;
        size_t es = a.is_int8 ? 1 : 4;
        char *x = malloc(xs * es), *z = malloc(ys * es), *y0 = malloc(ys * es), *y1 = malloc(ys * es);
        char *wt = malloc((size_t)taps * C * 4), *bias = malloc((size_t)C * 4), *pad = malloc((size_t)C * 4);
        int32_t *mult = malloc(4 * C), *shift = malloc(4 * C), ztab[256];
        for (int i = 0; i < 256; i++) ztab[i] = (int32_t)(st_rand() % 300) - 150;
        for (int64_t i = 0; i < xs; i++) {
            if (a.is_int8) ((int8_t *)x)[i] = (int8_t)st_rand();
            else ((float *)x)[i] = (float)((int32_t)(st_rand() % 20001) - 10000) * 1e-3f;
        }
        for (int64_t i = 0; i < ys; i++) {
            if (a.is_int8) ((int8_t *)z)[i] = (int8_t)st_rand();
            else ((float *)z)[i] = (float)((int32_t)(st_rand() % 2001) - 1000) * 1e-3f;
        }
        for (int i = 0; i < taps * C; i++) {
            if (a.is_int8) ((int16_t *)wt)[i] = (int16_t)((int32_t)(st_rand() % 255) - 127);
            else ((float *)wt)[i] = (float)((int32_t)(st_rand() % 2001) - 1000) * 1e-3f;
        }
        for (int i = 0; i < C; i++) {
            if (a.is_int8) { ((int32_t *)bias)[i] = (int32_t)(st_rand() % 40000) - 20000; ((int8_t *)pad)[i] = (int8_t)a.zp_x; }
            else { ((float *)bias)[i] = (float)((int32_t)(st_rand() % 2001) - 1000) * 1e-3f; ((float *)pad)[i] = 0.0f; }
            mult[i] = (int32_t)((1u << 30) + (st_rand() & ((1u << 30) - 1)));
            shift[i] = -(int32_t)(5 + st_rand() % 10);
            if (trial % 8 == 5) shift[i] = (int32_t)(st_rand() % 34) - 31;    /* 31 right .. 2 left */
        }
        a.x = x; a.wt = wt; a.bias = (trial % 5 == 4 && !a.is_int8) ? NULL : bias; a.mult = mult; a.shift = shift;
        a.pad = pad;
        if (trial % 4 >= 2) { a.z = z; if (a.is_int8) a.ztab = ztab; }
        char *scr = malloc((size_t)(ei_dw_scratch(&a) * a.threads));
        a.scratch = scr;
        memset(y0, 0, ys * es); memset(y1, 0, ys * es);
        a.y = y0;
        dw_ctx c = { &a, ei_dw_rows_scalar, (int64_t)a.n * (a.nchw ? a.c : 1) * a.oh, 1, ei_dw_scratch(&a) };
        ei_dw_range(&c, 0, c.rows);
        /* a fused activation table (int8, every other trial of four): the reference applies it
         * in a plain loop, the kernels through ei_lut_inplace (VBMI / NEON / scalar) */
        int8_t lut[256];
        for (int i = 0; i < 256; i++) lut[i] = (int8_t)((i * 73 + 41 + trial) & 0xFF);
        if (a.is_int8 && (trial / 4) % 2 == 1) {
            for (int64_t i = 0; i < ys; i++) ((int8_t *)y0)[i] = lut[(uint8_t)((int8_t *)y0)[i]];
            a.lut = lut;
        }
        a.y = y1;
        ei_depthwise(&a);
        if (memcmp(y0, y1, ys * es) != 0) fails++;
#if defined(__x86_64__)
        if (a.is_int8 && !a.nchw && ei_has(EI_AVX2)) {     /* the AVX2 kernel too where VNNI took over */
            memset(y1, 0, ys * es);
            dw_ctx c2 = { &a, ei_dw8_rows_avx2, c.rows, 1, c.per };
            ei_dw_range(&c2, 0, c2.rows);
            if (memcmp(y0, y1, ys * es) != 0) fails++;
        }
        /* both AVX-512 kernels, whichever the dispatch picks for this geometry */
        if (a.is_int8 && !a.nchw && ei_dw_has_vnni()) {
            memset(y1, 0, ys * es);
            dw_ctx c3 = { &a, ei_dw8_rows_vnni, c.rows, 1, c.per };
            ei_dw_range(&c3, 0, c3.rows);
            if (memcmp(y0, y1, ys * es) != 0) fails++;
        }
        if (DWQ_OK(&a) && ei_dw_has_vbmi()) {
            memset(y1, 0, ys * es);
            dw_ctx c4 = { &a, ei_dwq_rows, c.rows, 1, c.per };
            ei_dw_range(&c4, 0, c4.rows);
            if (memcmp(y0, y1, ys * es) != 0) fails++;
        }
        if (DWQ_OK(&a) && ei_dw_has_vbmi2()) {
            memset(y1, 0, ys * es);
            dw_ctx c5 = { &a, ei_dwq_rows_shift, c.rows, 1, c.per };
            ei_dw_range(&c5, 0, c5.rows);
            if (memcmp(y0, y1, ys * es) != 0) fails++;
        }
        if (a.is_int8) fails += st_small(&a, (const int8_t *)y0, (int8_t *)y1, ys, c.rows / 2);
#endif
        free(x); free(z); free(y0); free(y1); free(wt); free(bias); free(pad); free(mult); free(shift); free(scr);
    }
    return fails;
}
