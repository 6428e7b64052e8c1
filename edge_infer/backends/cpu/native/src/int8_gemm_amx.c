/* The AMX path of the int8 GEMM / convolution (int8_gemm.c: kinds, packing, plan, driver):
 * 32-row tiles multiplied by tdpbusd and requantized through a 32 x 32 int32 buffer, and the
 * implicit convolution, whose interior pixels are read in place from the input. x86-64 only. */
#include "int8_gemm_internal.h"

#if defined(__x86_64__)

/* ---- AMX: tiles 0-3 the 2 x 2 int32 accumulators (16 x 16 each), 4-5 two 16-row blocks of
 * A (u8 rows, 64 bytes = 16 k-groups), 6-7 two 16-channel halves of the packed panel (16
 * k-groups x 16 channels x 4). The configuration is per thread: loaded at the start of a
 * task, released at its end (an idle tile state costs nothing at a context switch). */
typedef struct __attribute__((aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* a constant in memory: GCC drops the stores into a local one, ldtilecfg not counting as a read */
static const amx_cfg AMX_CFG = { 1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16} };

__attribute__((target("amx-tile")))
void ei_gemm_amx_config(void) { _tile_loadconfig(&AMX_CFG); }

__attribute__((target("amx-tile")))
void ei_gemm_amx_release(void) { _tile_release(); }

/* the int32 products of a tile's rows 0..15 (and 16..31 if two_r) by channels 0..15 (and
 * 16..31 if two_c) of a panel b into cbuf (row stride 32), corrections not included; at: the
 * tile's u8 rows, stride lda, allocated for 32 rows */
__attribute__((target("amx-tile,amx-int8")))
void ei_gemm_amx_tile(const uint8_t *at, int64_t lda, const int8_t *b, int kg, int two_r, int two_c, int32_t *cbuf) {
    _tile_zero(0);
    if (two_c) _tile_zero(1);
    if (two_r) _tile_zero(2);
    if (two_r && two_c) _tile_zero(3);
    for (int g = 0; g < kg; g += 16) {
        _tile_loadd(6, b + (int64_t)g * 128, 128);
        _tile_loadd(4, at + 4 * (int64_t)g, lda);
        _tile_dpbusd(0, 4, 6);
        if (two_c) { _tile_loadd(7, b + (int64_t)g * 128 + 64, 128); _tile_dpbusd(1, 4, 7); }
        if (two_r) {
            _tile_loadd(5, at + 16 * lda + 4 * (int64_t)g, lda);
            _tile_dpbusd(2, 5, 6);
            if (two_c) _tile_dpbusd(3, 5, 7);
        }
    }
    _tile_stored(0, cbuf, 128);
    if (two_c) _tile_stored(1, cbuf + 16, 128);
    if (two_r) _tile_stored(2, cbuf + 16 * 32, 128);
    if (two_r && two_c) _tile_stored(3, cbuf + 16 * 32 + 16, 128);
}

/* rows 0, 1 .. of a panel's int32 tile (c: 32 channels a row, stride ldc; bias not yet added)
 * through ei_vq_pack4 (no residual): y + r * ys gets row r's channels under v->m; two rows at
 * a time, four when the panel has at most 16 channels. Returns the rows done (the last odd
 * ones are left to ei_vq_store). */
__attribute__((target("avx512f,avx512bw")))
static int store_pairs(const vq_panel *v, const int32_t *c, int64_t ldc, int nrow, int8_t *y, int64_t ys) {
    const int left = v->c.left;
    int r = 0;
#define ACC(p, h) _mm512_add_epi32(_mm512_loadu_si512(p), v->v[h].bias)
#define RQ(p, h) ei_vq_mbqm(ACC(p, h), &v->v[h], left)
    if (!v->m[1]) {
        for (; r + 4 <= nrow; r += 4) {
            const int32_t *c0 = c + r * ldc;
            ei_vq_store4(&v->c, &v->v[0], v->m[0], ACC(c0, 0), ACC(c0 + ldc, 0), ACC(c0 + 2 * ldc, 0),
                         ACC(c0 + 3 * ldc, 0), y + r * ys, ys);
        }
        return r;
    }
    for (; r + 2 <= nrow; r += 2) {
        const int32_t *c0 = c + r * ldc, *c1 = c0 + ldc;
        vq_rows2(ei_vq_pack4(&v->c, RQ(c0, 0), RQ(c0 + 16, 1), RQ(c1, 0), RQ(c1 + 16, 1)), v, y + r * ys, ys);
    }
#undef RQ
#undef ACC
    return r;
}

/* rows 0, 1 .. of a panel's int32 tile (as store_pairs) with the residual z (zfast), in pairs;
 * returns the rows done (an odd last one is left to ei_vq_store) */
__attribute__((target("avx512f,avx512bw")))
static int store_pairs_res(const vq_panel *v, const int32_t *c, int64_t ldc, int nrow, int8_t *y, int64_t ys,
                           const int8_t *z) {
    const int left = v->c.left;
    int r = 0;
#define RQ(p, h) ei_vq_mbqm(_mm512_add_epi32(_mm512_loadu_si512(p), v->v[h].bias), &v->v[h], left)
    for (; r + 2 <= nrow; r += 2) {
        const int32_t *c0 = c + r * ldc, *c1 = c0 + ldc;
        ei_gemm_vq_res_rows2(v, RQ(c0, 0), RQ(c0 + 16, 1), RQ(c1, 0), RQ(c1 + 16, 1), z + r * ys, ys, y + r * ys, ys);
    }
#undef RQ
    return r;
}

/* one panel (32 channels from ch0) of rows r0 .. r0 + nrows - 1: u8 rows ub (stride lda,
 * kg * 4 bytes each, allocated for whole 32-row tiles), requantized through cbuf (32 x 32 int32) */

__attribute__((target("avx512f,avx512bw,avx512vnni,amx-tile,amx-int8")))
void ei_gemm_amx_panel(const ei_int8_conv_args *a, const vq_panel *v, const uint8_t *ub, int64_t lda, const void *bp,
                       int kg, int64_t r0, int nrows, int ch0, int32_t *cbuf) {
    const int8_t *b = (const int8_t *)bp;
    for (int t = 0; t < nrows; t += 32) {
        int nrow = EI_MIN(32, nrows - t);
        int64_t off = (r0 + t) * a->m + ch0;
        int8_t *y = a->y + off;
        const int8_t *z = a->z ? a->z + off : NULL;
        const uint8_t *at = ub + t * lda;
        if (nrow <= 8) {            /* a mostly empty tile: the VNNI kernels */
            const uint8_t *rows[8];
            for (int r = 0; r < 8; r++) rows[r] = at + EI_MIN(r, nrow - 1) * lda;
            if (nrow <= 2) {
                for (int r = 0; r < nrow; r++)
                    ei_gemm_mk_vnni_rq1(rows[r], bp, kg, v, y + r * a->m, z ? z + r * a->m : NULL);
            } else {
                ei_gemm_mk_vnni_rq(rows, bp, kg, v, nrow, y, a->m, z);
            }
            continue;
        }
        ei_gemm_amx_tile(at, lda, b, kg, nrow > 16, v->m[1] != 0, cbuf);
        int r = 0;
        if (!v->c.ztab) r = store_pairs(v, cbuf, 32, nrow, y, a->m);
        else if (v->zfast && z) r = store_pairs_res(v, cbuf, 32, nrow, y, a->m, z);
        for (; r < nrow; r++) {
            const int32_t *c = cbuf + r * 32;
            ei_vq_store(&v->c, &v->v[0], v->m[0], _mm512_add_epi32(_mm512_loadu_si512(c), v->v[0].bias),
                        y + r * a->m, z ? z + r * a->m : NULL);
            if (v->m[1])
                ei_vq_store(&v->c, &v->v[1], v->m[1], _mm512_add_epi32(_mm512_loadu_si512(c + 16), v->v[1].bias),
                            y + r * a->m + 16, z ? z + r * a->m + 16 : NULL);
        }
    }
}

/* ---- implicit AMX convolution (interior pixels read in place) ----
 * A stride-1 NHWC conv whose kernel rows span kw * C >= 64 contiguous input bytes (3x3
 * detector heads: the im2col copied kh kw C bytes a pixel and cost as much as the tiles'
 * multiplies) multiplies its interior output pixels (every tap inside the image, rows of at
 * least 64 of them) straight from x: for 32 pixels of one output row and each kernel row, the 16-row A tiles are 64-byte
 * chunks of that row's span, read at the pixels themselves, C bytes apart (the last chunk
 * moved back to end at the span's end, its weights zero where an earlier chunk covered), with
 * tdpbssd (s8 x s8: no x + 128, no correction). The weights are repacked at prepare per
 * (kernel row, chunk) and panel; the border pixels go through the im2col path. Bit-exact:
 * the same int32 sums. */
int ei_gemm_implicit_ok(const ei_int8_conv_args *a) {
    if (a->kind != KIND_AMX || a->in_nchw || a->out_nchw || a->sh != 1 || a->sw != 1 || a->dh != 1 || a->dw != 1
        || a->kw * a->c < 64 || a->c % 4 || !ei_gemm_has_amx())
        return 0;
    int ixb = EI_MIN(a->ow, a->w - a->kw + a->pl + 1), iyb = EI_MIN(a->oh, a->h - a->kh + a->pt + 1);
    return ixb - a->pl >= 64 && iyb > a->pt;      /* 40-pixel rows measured slower than the im2col */
}

/* one panel's implicit constants: its vq_panel without the u8 corrections, then the weights
 * [kernel row][chunk][16 k-groups][32 channels][4] */
int64_t ei_gemm_implicit_panel_bytes(const ei_int8_conv_args *a) {
    return (int64_t)sizeof(vq_panel) + (int64_t)a->kh * ((a->kw * a->c + 63) / 64) * 2048;
}

/* where chunk q of nq starts in a kernel row's span */
static inline int implicit_chunk(int q, int nq, int span) {
    return (q < nq - 1 || span % 64 == 0) ? 64 * q : span - 64;
}

__attribute__((target("avx512f,avx512bw,avx512vnni")))
void ei_gemm_implicit_prepare(const ei_int8_conv_args *a, char *out) {
    const int span = a->kw * a->c, nq = (span + 63) / 64, npan = (a->m + 31) / 32;
    const int K = a->kh * span;
    const int64_t pb = ei_gemm_panel_bytes(a->kind, K), ipb = ei_gemm_implicit_panel_bytes(a);
    static const int32_t zero[32];
    for (int j = 0; j < npan; j++) {
        char *o = out + j * ipb;
        ei_gemm_vq_prepare((vq_panel *)o, a, zero, 32 * j, EI_MIN(32, a->m - 32 * j));
        const int8_t *pan = (const int8_t *)a->wpack + j * pb;
        int8_t *bq = (int8_t *)(o + sizeof(vq_panel));
        for (int t = 0; t < a->kh; t++)
            for (int q = 0; q < nq; q++) {
                int base = implicit_chunk(q, nq, span);
                for (int gg = 0; gg < 16; gg++)
                    for (int ch = 0; ch < 32; ch++)
                        for (int kk = 0; kk < 4; kk++) {
                            int c = base + 4 * gg + kk;             /* byte of the span */
                            int64_t k = (int64_t)t * span + c;
                            bq[((((int64_t)t * nq + q) * 16 + gg) * 32 + ch) * 4 + kk] =
                                c >= 64 * q ? pan[((k / 4) * 32 + ch) * 4 + k % 4] : 0;
                        }
            }
    }
}

/* output pixels ox0 .. ox0 + n - 1 of output row oy of image b, all interior, on panels
 * j0 .. j1 - 1; cbuf: 32 x 32 int32 */
__attribute__((target("avx512f,avx512bw,avx512vnni,amx-tile,amx-int8")))
void ei_gemm_implicit_rows(const ei_int8_conv_args *a, const plan_t *p, int j0, int j1, int64_t b, int oy, int ox0,
                           int n, int32_t *cbuf) {
    const int C = a->c, span = a->kw * C, nq = (span + 63) / 64;
    const int ixa = a->pl, ixb = EI_MIN(a->ow, a->w - a->kw + a->pl + 1);
    const int64_t ipb = ei_gemm_implicit_panel_bytes(a);
    const char *base = (const char *)a->consts + (int64_t)p->npan * sizeof(vq_panel);
    ei_gemm_amx_config();
    for (int j = j0; j < j1; j++) {
        const vq_panel *v = (const vq_panel *)(base + j * ipb);
        const int8_t *bw = (const int8_t *)(base + j * ipb + sizeof(vq_panel));
        const int ch0 = 32 * j;
        for (int s = ox0; s < ox0 + n; s += 32) {
            const int two = ox0 + n - s > 16;                      /* 32 pixels, else 16 */
            const int t0 = EI_MAX(ixa, EI_MIN(s, ixb - (two ? 32 : 16)));   /* whole tiles inside the interior */
            _tile_zero(0); _tile_zero(1);
            if (two) { _tile_zero(2); _tile_zero(3); }
            for (int ky = 0; ky < a->kh; ky++) {
                const int8_t *xp = a->x + ((b * a->h + oy - a->pt + ky) * a->w + (t0 - a->pl)) * (int64_t)C;
                const int8_t *bq = bw + (int64_t)ky * nq * 2048;
                for (int q = 0; q < nq; q++, bq += 2048) {
                    const int off = implicit_chunk(q, nq, span);
                    _tile_loadd(4, xp + off, C);
                    _tile_loadd(6, bq, 128);
                    _tile_loadd(7, bq + 64, 128);
                    _tile_dpbssd(0, 4, 6); _tile_dpbssd(1, 4, 7);
                    if (two) {
                        _tile_loadd(5, xp + 16 * (int64_t)C + off, C);
                        _tile_dpbssd(2, 5, 6); _tile_dpbssd(3, 5, 7);
                    }
                }
            }
            _tile_stored(0, cbuf, 128); _tile_stored(1, cbuf + 16, 128);
            if (two) { _tile_stored(2, cbuf + 16 * 32, 128); _tile_stored(3, cbuf + 16 * 32 + 16, 128); }
            const int e = EI_MIN(s + 32, ox0 + n);
            int px = s;
            const int64_t o0 = ((b * a->oh + oy) * a->ow + s) * (int64_t)a->m + ch0;
            if (!v->c.ztab)
                px += store_pairs(v, cbuf + (s - t0) * 32, 32, e - s, a->y + o0, a->m);
            else if (v->zfast && a->z)
                px += store_pairs_res(v, cbuf + (s - t0) * 32, 32, e - s, a->y + o0, a->m, a->z + o0);
            for (; px < e; px++) {
                const int32_t *c = cbuf + (px - t0) * 32;
                int64_t off = ((b * a->oh + oy) * a->ow + px) * (int64_t)a->m + ch0;
                ei_vq_store(&v->c, &v->v[0], v->m[0], _mm512_add_epi32(_mm512_loadu_si512(c), v->v[0].bias),
                            a->y + off, a->z ? a->z + off : NULL);
                if (v->m[1])
                    ei_vq_store(&v->c, &v->v[1], v->m[1], _mm512_add_epi32(_mm512_loadu_si512(c + 16), v->v[1].bias),
                                a->y + off + 16, a->z ? a->z + off + 16 : NULL);
            }
        }
    }
    ei_gemm_amx_release();
}
#endif
