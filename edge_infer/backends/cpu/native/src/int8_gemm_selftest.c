/* Self-test of the int8 GEMM / convolution (int8_gemm.c): every micro-kernel kind this CPU
 * runs, with and without the constants made at prepare, against a direct int64 reference. */
#include "int8_gemm.h"
#include "selftest_rng.h"

#include <stdlib.h>
#include <string.h>


static void ref_conv(const ei_int8_conv_args *a, const int8_t *wt, int8_t *y) {
    int K = a->kh * a->kw * a->c, P = a->oh * a->ow;
    for (int b = 0; b < a->n; b++)
        for (int oy = 0; oy < a->oh; oy++)
            for (int ox = 0; ox < a->ow; ox++)
                for (int m = 0; m < a->m; m++) {
                    int64_t s = 0;
                    for (int ky = 0; ky < a->kh; ky++)
                        for (int kx = 0; kx < a->kw; kx++)
                            for (int ch = 0; ch < a->c; ch++) {
                                int iy = oy * a->sh - a->pt + ky * a->dh, ix = ox * a->sw - a->pl + kx * a->dw;
                                int v = a->zp_x;
                                if (iy >= 0 && iy < a->h && ix >= 0 && ix < a->w)
                                    v = a->in_nchw ? a->x[((b * a->c + ch) * a->h + iy) * a->w + ix]
                                                   : a->x[((b * a->h + iy) * a->w + ix) * a->c + ch];
                                s += (int64_t)v * wt[(int64_t)m * K + (ky * a->kw + kx) * a->c + ch];
                            }
                    int64_t off = a->out_nchw ? ((int64_t)b * a->m + m) * P + oy * a->ow + ox
                                              : ((int64_t)(b * P + oy * a->ow + ox)) * a->m + m;
                    int32_t zt = a->ztab ? a->ztab[(uint8_t)a->z[off]] : 0;
                    y[off] = ei_rq_one((int32_t)s + a->bias[m], a->mult[m], a->shift[m], a->zp_y, zt, a->lo, a->hi);
                }
}

EI_API int ei_selftest_int8_gemm(void) {
    int fails = 0;
    st_state = 777;
    for (int trial = 0; trial < 40; trial++) {
        ei_int8_conv_args a;
        memset(&a, 0, sizeof a);
        int big = trial % 10 == 9;
        a.n = 1 + (int)(st_rand() % 2);
        a.c = big ? 1100 + (int)(st_rand() % 40) : 1 + (int)(st_rand() % 37);
        a.h = 1 + (int)(st_rand() % 9); a.w = 1 + (int)(st_rand() % 9);
        a.kh = 1 + (int)(st_rand() % 3); a.kw = 1 + (int)(st_rand() % 3);
        if (big || trial % 4 == 0) a.kh = a.kw = 1;
        a.sh = 1 + (int)(st_rand() % 2); a.sw = 1 + (int)(st_rand() % 2);
        if (trial % 12 == 4 || trial == 19) a.sh = a.sw = 1;      /* NCHW 1x1 stride 1: nchw_rows_u8 */
        a.dh = a.dw = 1 + (trial % 7 == 3);
        a.pt = (int)(st_rand() % 2); a.pl = (int)(st_rand() % 2);
        if (trial % 4 == 0 || trial == 19) a.pt = a.pl = 0;
        int eh = a.h + 2 * a.pt - a.dh * (a.kh - 1), ew = a.w + 2 * a.pl - a.dw * (a.kw - 1);
        if (eh < 1 || ew < 1) { a.kh = a.kw = 1; a.dh = a.dw = 1; eh = a.h + 2 * a.pt; ew = a.w + 2 * a.pl; }
        a.oh = (eh - 1) / a.sh + 1; a.ow = (ew - 1) / a.sw + 1;
        a.m = 1 + (int)(st_rand() % 40);
        a.in_nchw = trial % 3 == 1; a.out_nchw = trial % 3 == 1;
        a.zp_x = (int32_t)(st_rand() % 256) - 128; a.zp_y = (int32_t)(st_rand() % 256) - 128;
        a.lo = -128 + (trial % 2) * 50; a.hi = 127 - (trial % 3 == 2) * 30;
        a.threads = 1 + trial % 3;
        int K = a.kh * a.kw * a.c;
        int64_t xs = (int64_t)a.n * a.c * a.h * a.w, ysz = (int64_t)a.n * a.m * a.oh * a.ow;
        int8_t *x = malloc(xs), *wt = malloc((size_t)a.m * K), *z = malloc(ysz), *y0 = malloc(ysz), *y1 = malloc(ysz);
        int32_t *bias = malloc(4 * a.m), *mult = malloc(4 * a.m), *shift = malloc(4 * a.m), ztab[256];
        for (int64_t i = 0; i < xs; i++) x[i] = (int8_t)st_rand();
        for (int64_t i = 0; i < (int64_t)a.m * K; i++) wt[i] = (int8_t)st_rand();
        for (int64_t i = 0; i < ysz; i++) z[i] = (int8_t)st_rand();
        for (int i = 0; i < 256; i++) ztab[i] = (int32_t)(st_rand() % 400) - 200;
        for (int i = 0; i < a.m; i++) {
            bias[i] = (int32_t)(st_rand() % 100000) - 50000;
            mult[i] = (int32_t)((1u << 30) + (st_rand() & ((1u << 30) - 1)));
            shift[i] = -(int32_t)(6 + st_rand() % 12) + (trial == 5);
            if (trial % 8 == 3) shift[i] = (int32_t)(st_rand() % 34) - 31;   /* 31 right .. 2 left */
            if (trial % 8 == 7) mult[i] = (int32_t)(st_rand() & 0x7fffffff);
        }
        a.x = x; a.bias = bias; a.mult = mult; a.shift = shift;
        if (trial % 2) { a.z = z; a.ztab = ztab; }
        ref_conv(&a, wt, y0);
        for (int kind = 0; kind < N_KINDS; kind++) {
            if (!ei_int8_kind_runs(kind)) continue;
            a.kind = kind;
            int64_t ps = ei_int8_pack_size(kind, a.m, K), ss = ei_int8_conv_scratch(&a);
            void *pk = malloc((size_t)ps), *scr = malloc((size_t)ss);
            ei_int8_pack_weights(kind, wt, a.m, K, pk);
            a.wpack = pk; a.scratch = scr; a.y = y1;
            memset(y1, 0, (size_t)ysz);
            a.consts = NULL;
            ei_int8_conv(&a);
            if (memcmp(y0, y1, (size_t)ysz) != 0) fails++;
            int64_t cs = ei_int8_conv_consts_size(&a);
            if (cs > 0) {                   /* again with the constants made at prepare */
                void *cb = aligned_alloc(64, (size_t)((cs + 63) / 64 * 64));
                ei_int8_conv_prepare(&a, cb);
                a.consts = cb;
                memset(y1, 0, (size_t)ysz);
                ei_int8_conv(&a);
                if (memcmp(y0, y1, (size_t)ysz) != 0) fails++;
                a.consts = NULL;
                free(cb);
            }
            free(pk); free(scr);
        }
        free(x); free(wt); free(z); free(y0); free(y1); free(bias); free(mult); free(shift);
    }
    return fails;
}
