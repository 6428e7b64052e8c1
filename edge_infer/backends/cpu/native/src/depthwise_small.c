/* int8 NHWC depthwise convolution on small images (AVX-512 VNNI + VBMI): the quads of
 * depthwise_quad.c (vpdpbusd on four kernel columns' x + 128 of 16 channels, transposed by vpermb),
 * laid out for layers whose whole input fits a few KB a channel group, as MobileNetV3's late
 * layers (3x12, 2x6 at the text classifier's 48x192; 7x7, 14x14 at 224).
 *
 * There the ring of depthwise_quad.c cost more than the multiply-adds: each output row built its
 * window's quad rows channel group by channel group (padding rows included, 3 of the 5 rows
 * of a 2x6 5x5 layer's windows), and a small row (6 or 12 columns) paid a row's setup per
 * group. Here each channel group goes once over the rows [r0, r1): its quad rows of the input
 * rows those read are built first into a group-local buffer (<= DWS_MAX_QUADS quads, in L1),
 * then every output row of the group is computed from them. Kernel rows that fall on padding
 * rows are not multiplied at all: their product with the padding quads, (zp_x + 128) times the
 * row's weight sums, is a constant of (kernel row, channel) added to the accumulator's start
 * (made at prepare, `padsum`), the same integers as the quads' vpdpbusd would add.
 * Also here: 8 channels with kernels up to 4 wide at any size (dws_pairs_rows, below), two
 * pixels' quads a vector made in registers, never stored.
 *
 * Tried and dropped: 16-32 channels with kernels up to 4 wide, each pixel's quads made in
 * registers from its 4 C contiguous bytes (two loads, a vpermt2b a group) instead of the ring's
 * stored quad rows: slower everywhere (12x48x24 3x3 stride 2 1450 -> 1590 ns, 6x24x32 1100 ->
 * 1410, 56x56x16 9.4 -> 16.6 us): the ring builds a quad once for kh / sh rows.
 *
 * Exactly the integers of the per-tap kernels (depthwise_selftest.c and
 * tests/test_native_kernels.py compare them bit for bit with the scalar instance).
 */
#include "depthwise.h"
#include "ei_int8.h"

#include <string.h>

/* quads of one channel group's input rows: 256 x 64 bytes = 16 KB. Measured (1 thread, loaded
 * machine, min ns, ring -> this, quads by shifts in both): 3x12x88 5x5 1690 -> 1320, 2x6x200
 * 5x5 1900 -> 1210, 3x12x104 5x5 stride 2 1010 -> 830, 6x24x32 5x5 stride 2 935 -> 640, 14x14x240
 * 5x5 21.6 -> 19.5 us, 14x14x576 5x5 55-56 -> 46-47 (the ring in bands); a larger input lost
 * (28x28x96 5x5 stride 2, 448 quads a group, 10.0 -> 11.7 us), and 3x3 kernels measured level
 * (12x48x24 stride 2, 6x24x32, 14x14x72) */
#define DWS_MAX_QUADS 256

/* quad columns of one input row, as depthwise_quad.c's DWQ_COLS: quad j holds input columns
 * j sw - pl .. j sw - pl + 3; output column ox reads quads ox + k 4 / sw, k < nq */
static int dws_cols(const ei_dw_args *a) {
    return a->ow + (a->kw + 3) / 4 * 4 / a->sw - 4 / a->sw;
}

int dws_fits(const ei_dw_args *a) {
    if (!a->is_int8 || a->nchw || a->dh != 1 || a->dw != 1 || a->c <= 8 || a->sw > 2 || a->sh > 2) return 0;
    if (a->kh > 16 || a->kh * ((a->kw + 3) / 4) > 16 || (a->kw > 4 && 4 % a->sw)) return 0;
    /* kernels of up to 4 columns: one quad a pixel and row, as many quads as the ring builds
     * (before the shifts here: 12x48x24 3x3 stride 2 1480 ring, 1780 ns this) */
    if (a->kw <= 4) return 0;
    return (int64_t)a->h * dws_cols(a) <= DWS_MAX_QUADS;
}

/* dws_rows applies a fused table itself, in registers, where there is no residual (with one the
 * caller's pass over the stored rows does, ei_lut_inplace): 14x14x240 5x5 with a table 20.7-21.3
 * -> 19.7-20.0 us (1 thread, loaded machine, min); level on the text classifier's 2x6 to 6x24 */
int dws_lut_in_regs(const ei_dw_args *a) {
    return a->lut != NULL && a->ztab == NULL;
}

/* a thread slot's quad buffer (none where the kernel cannot run) */
int64_t dws_scratch(const ei_dw_args *a) {
#if defined(__x86_64__)
    return dws_fits(a) ? (int64_t)a->h * dws_cols(a) * 64 + 64 : 0;
#else
    (void)a;
    return 0;
#endif
}

int64_t dws_consts_bytes(const ei_dw_args *a) {
    return dws_fits(a) ? (int64_t)a->kh * ((a->c + 15) / 16) * 64 : 0;
}

/* padsum[ky][group][16]: (zp_x + 128) times the sum of kernel row ky's weights, per channel */
void dws_prepare(const ei_dw_args *a, char *out) {
    const int C = a->c, ng = (C + 15) / 16;
    const int16_t *w = (const int16_t *)a->wt;
    int32_t *ps = (int32_t *)out;
    memset(ps, 0, (size_t)a->kh * ng * 64);
    for (int ky = 0; ky < a->kh; ky++)
        for (int c = 0; c < C; c++) {
            int32_t s = 0;
            for (int kx = 0; kx < a->kw; kx++) s += (int8_t)w[(int64_t)(ky * a->kw + kx) * C + c];
            ps[(int64_t)ky * ng * 16 + c] = (a->zp_x + 128) * s;
        }
}

#if defined(__x86_64__)
static const uint8_t dws_perm[64] = {   /* byte 4c + k of a quad = byte 16k + c of four 16-byte loads */
#define P4(c) c, 16 + c, 32 + c, 48 + c
    P4(0), P4(1), P4(2), P4(3), P4(4), P4(5), P4(6), P4(7), P4(8), P4(9), P4(10), P4(11), P4(12), P4(13), P4(14), P4(15)
#undef P4
};

#define DWS_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))

#define DWS_T2 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx512vbmi2")))

/* the quad of input columns ix0 .. ix0 + 3, channels c.. (16, or the tail's under m): four loads
 * (one at 16 channels), columns outside the row read padv (zp_x), one vpermb, x + 128 */
DWS_T static inline __attribute__((always_inline))
__m512i dws_quad(const int8_t *xrow, int W, int C, int c, __mmask16 m, int ix0, __m128i padv, __m512i vperm,
                 const int masked) {
    __m512i v;
    if (ix0 >= 0 && ix0 + 3 < W) {
        const int8_t *p = xrow + (int64_t)ix0 * C + c;
        if (C == 16) {
            v = _mm512_loadu_si512(p);
        } else if (masked) {
            v = _mm512_castsi128_si512(_mm_maskz_loadu_epi8(m, p));
            v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(m, p + C), 1);
            v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(m, p + 2 * C), 2);
            v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(m, p + 3 * C), 3);
        } else {
            v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + C)), 1);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 * C)), 2);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 3 * C)), 3);
        }
    } else {
        __m128i col[4];
        for (int t = 0; t < 4; t++) {
            const int ix = ix0 + t;
            col[t] = (unsigned)ix < (unsigned)W ? _mm_maskz_loadu_epi8(m, xrow + (int64_t)ix * C + c) : padv;
        }
        v = _mm512_castsi128_si512(col[0]);
        v = _mm512_inserti32x4(v, col[1], 1);
        v = _mm512_inserti32x4(v, col[2], 2);
        v = _mm512_inserti32x4(v, col[3], 3);
    }
    return _mm512_xor_si512(_mm512_permutexvar_epi8(vperm, v), _mm512_set1_epi8((char)0x80));
}

/* one input row's nj quads of channels c.. at q, 64 bytes apart, each from its four columns */
DWS_T static inline __attribute__((always_inline))
void dws_build_row(const int8_t *xrow, int W, int C, int c, __mmask16 m, int sw, int pl, int nj, __m128i padv,
                   uint8_t *q, const int masked) {
    const __m512i vperm = _mm512_loadu_si512(dws_perm);
    for (int j = 0; j < nj; j++)
        _mm512_store_si512(q + (int64_t)j * 64, dws_quad(xrow, W, C, c, m, j * sw - pl, padv, vperm, masked));
}

/* the same quads with VBMI2, stride 1 or 2: every (4 / sw)-th from its columns, the ones between
 * from those two by one vpshrdd each (lane c of quad j + k: bytes k sw .. 3 of quad j's lane, then
 * bytes 0 .. k sw - 1 of quad j + 4 / sw's), as depthwise_quad.c's dwq_build_blocks */
DWS_T2 static __attribute__((noinline))
void dws_build_row_shifts(const int8_t *xrow, int W, int C, int c, __mmask16 m, const int sw, int pl, int nj,
                          __m128i padv, uint8_t *q, const int masked) {
    const __m512i vperm = _mm512_loadu_si512(dws_perm);
    const int S = 4 / sw;
    __m512i prev = dws_quad(xrow, W, C, c, m, -pl, padv, vperm, masked);
    _mm512_store_si512(q, prev);
    for (int j = 0; j + 1 < nj; j += S) {
        const __m512i next = dws_quad(xrow, W, C, c, m, (j + S) * sw - pl, padv, vperm, masked);
        if (j + S < nj) _mm512_store_si512(q + (int64_t)(j + S) * 64, next);
        uint8_t *d = q + (int64_t)(j + 1) * 64;
        if (sw == 2) {
            _mm512_store_si512(d, _mm512_shrdi_epi32(prev, next, 16));
        } else {
            _mm512_store_si512(d, _mm512_shrdi_epi32(prev, next, 8));
            if (j + 2 < nj) _mm512_store_si512(d + 64, _mm512_shrdi_epi32(prev, next, 16));
            if (j + 3 < nj) _mm512_store_si512(d + 128, _mm512_shrdi_epi32(prev, next, 24));
        }
        prev = next;
    }
}

/* a fused activation's 256-entry table (ei_lut.h) in four vectors, looked up in registers */
typedef struct { __m512i t0, t1, t2, t3; } dws_lut;

DWS_T static inline __attribute__((always_inline)) __m512i dws_lut64(const dws_lut *L, __m512i v) {
    const __m512i lo = _mm512_permutex2var_epi8(L->t0, v, L->t1), hi = _mm512_permutex2var_epi8(L->t2, v, L->t3);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
}

/* P = 1 to 4 vectors of the same 16 channels, no residual: requantized as ei_vq_store4, the table
 * L (or NULL) applied, stored under m at y, y + ys, .. */
DWS_T static inline __attribute__((always_inline))
void dws_store_n(const ei_vqc *c, const ei_vq16 *k, __mmask16 m, const __m512i *acc, int P, int8_t *y, ptrdiff_t ys,
                 const dws_lut *L) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i p = ei_vq_pack4(c, ei_vq_mbqm(acc[0], k, c->left), P > 1 ? ei_vq_mbqm(acc[1], k, c->left) : zero,
                            P > 2 ? ei_vq_mbqm(acc[2], k, c->left) : zero, P > 3 ? ei_vq_mbqm(acc[3], k, c->left) : zero);
    if (L) p = dws_lut64(L, p);
    if (P == 4 && ys == 16 && m == 0xFFFF) { _mm512_storeu_si512(y, p); return; }
    const __m128i q[4] = { _mm512_castsi512_si128(p), _mm512_extracti32x4_epi32(p, 1), _mm512_extracti32x4_epi32(p, 2),
                           _mm512_extracti32x4_epi32(p, 3) };
    for (int i = 0; i < P; i++) {
        if (m == 0xFFFF) _mm_storeu_si128((__m128i *)(y + i * ys), q[i]);
        else _mm512_mask_storeu_epi8(y + i * ys, (__mmask64)m, _mm512_castsi128_si512(q[i]));
    }
}

/* output rows oy0 .. oy1 - 1 of image b, channel group g (its quads of input rows iy0.. at Q) */
DWS_T static inline __attribute__((always_inline))
void dws_group_rows(const ei_dw_args *a, const ei_vqc *vcp, const ei_vq16 *kp, const int8_t *wq, const int32_t *padsum,
                    const uint8_t *Q, int iy0, int nj, int64_t b, int oy0, int oy1, int g, __mmask16 m,
                    const dws_lut *L, const int kh, const int nq) {
    const ei_vqc vc = *vcp;
    const ei_vq16 k = *kp;
    const int C = a->c, ng = (C + 15) / 16, ow = a->ow, qstep = nq > 1 ? 4 / a->sw : 0;
    __m512i wv[16];
    for (int i = 0; i < kh * nq; i++) wv[i] = _mm512_loadu_si512(wq + ((int64_t)i * ng + g) * 64);
    for (int oy = oy0; oy < oy1; oy++) {
        const int top = oy * a->sh - a->pt;                     /* input row of kernel row 0 */
        const int ky0 = top < 0 ? -top : 0, ky1 = EI_MIN(kh, a->h - top);
        __m512i init = k.bias;
        for (int ky = 0; ky < kh; ky++)
            if (ky < ky0 || ky >= ky1) init = _mm512_add_epi32(init, _mm512_loadu_si512(padsum + ((int64_t)ky * ng + g) * 16));
        const int64_t opix0 = (b * a->oh + oy) * ow;
        int8_t *const y0 = (int8_t *)a->y + opix0 * C + 16 * g;
        const int8_t *const z0 = a->z ? (const int8_t *)a->z + opix0 * C + 16 * g : NULL;
        for (int ox = 0; ox < ow; ox += 4) {
            const int P = EI_MIN(4, ow - ox);
            __m512i acc[4] = { init, init, init, init };
            for (int ky = ky0; ky < ky1; ky++)
                for (int kq = 0; kq < nq; kq++) {
                    const __m512i w = wv[ky * nq + kq];
                    const uint8_t *qp = Q + ((int64_t)(top - iy0 + ky) * nj + ox + kq * qstep) * 64;
                    if (P == 4) {
                        for (int j = 0; j < 4; j++) acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_load_si512(qp + 64 * j), w);
                    } else {
                        for (int j = 0; j < P; j++) acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_load_si512(qp + 64 * j), w);
                    }
                }
            int8_t *y = y0 + (int64_t)ox * C;
            if (!vc.ztab && P == 4) dws_store_n(&vc, &k, m, acc, 4, y, C, L);
            else if (!vc.ztab) dws_store_n(&vc, &k, m, acc, P, y, C, L);
            else
                for (int j = 0; j < P; j++)
                    ei_vq_store(&vc, &k, m, acc[j], y + (int64_t)j * C, z0 ? z0 + (int64_t)(ox + j) * C : NULL);
        }
    }
}

static int dws_vbmi2(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vbmi2"); }
    return v;
}

/* rows [r0, r1); shifts: the quads between every (4 / sw)-th by vpshrdd (VBMI2, stride 1 or 2) */
DWS_T static inline __attribute__((always_inline))
void dws_rows_impl(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch, const int shifts) {
    const int C = a->c, ng = (C + 15) / 16, full = C / 16, nq = (a->kw + 3) / 4, kh = a->kh, nj = dws_cols(a);
    const __mmask16 tm = (__mmask16)((1u << (C - 16 * full)) - 1);
    const ei_vq16 *vq = (const ei_vq16 *)a->consts;
    const int8_t *wq = (const int8_t *)(vq + ng);
    const int32_t *padsum = (const int32_t *)((const char *)a->consts + dwq_consts_bytes(a));
    uint8_t *Q = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const __m128i padv = _mm_set1_epi8((char)a->zp_x);
    ei_vqc vc;
    ei_vqc_prepare(&vc, a->ztab, a->zp_y, a->lo, a->hi, ei_rq_flag(a->shift, C));
    dws_lut lut, *L = NULL;
    if (dws_lut_in_regs(a)) {
        lut.t0 = _mm512_loadu_si512(a->lut); lut.t1 = _mm512_loadu_si512(a->lut + 64);
        lut.t2 = _mm512_loadu_si512(a->lut + 128); lut.t3 = _mm512_loadu_si512(a->lut + 192);
        L = &lut;
    }
    for (int64_t row = r0, nr; row < r1; row += nr) {
        const int64_t b = row / a->oh;
        const int oy0 = (int)(row % a->oh), oy1 = (int)EI_MIN((int64_t)a->oh, oy0 + (r1 - row));
        nr = oy1 - oy0;
        /* the input rows these output rows read */
        const int iy0 = EI_MAX(0, oy0 * a->sh - a->pt), iy1 = EI_MIN(a->h, (oy1 - 1) * a->sh - a->pt + kh);
        const int8_t *xb = (const int8_t *)a->x + b * a->h * a->w * C;
        for (int g = 0; g < ng; g++) {
            const __mmask16 m = g < full ? (__mmask16)0xFFFF : tm;
            for (int iy = iy0; iy < iy1; iy++) {
                uint8_t *q = Q + (int64_t)(iy - iy0) * nj * 64;
                const int8_t *xrow = xb + (int64_t)iy * a->w * C;
                const int masked = g >= full;
                if (shifts && a->sw == 1) dws_build_row_shifts(xrow, a->w, C, 16 * g, m, 1, a->pl, nj, padv, q, masked);
                else if (shifts) dws_build_row_shifts(xrow, a->w, C, 16 * g, m, 2, a->pl, nj, padv, q, masked);
                else dws_build_row(xrow, a->w, C, 16 * g, m, a->sw, a->pl, nj, padv, q, masked);
            }
            if (kh == 3 && nq == 1) dws_group_rows(a, &vc, &vq[g], wq, padsum, Q, iy0, nj, b, oy0, oy1, g, m, L, 3, 1);
            else if (kh == 5 && nq == 2) dws_group_rows(a, &vc, &vq[g], wq, padsum, Q, iy0, nj, b, oy0, oy1, g, m, L, 5, 2);
            else dws_group_rows(a, &vc, &vq[g], wq, padsum, Q, iy0, nj, b, oy0, oy1, g, m, L, kh, nq);
        }
    }
}

DWS_T static void dws_rows_shifts(const ei_dw_args *a, int64_t r0, int64_t r1, char *s) { dws_rows_impl(a, r0, r1, s, 1); }
DWS_T static void dws_rows_scratch(const ei_dw_args *a, int64_t r0, int64_t r1, char *s) { dws_rows_impl(a, r0, r1, s, 0); }

void dws_rows(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    if (dws_vbmi2() && (a->sw == 1 || a->sw == 2)) dws_rows_shifts(a, r0, r1, scratch);
    else dws_rows_scratch(a, r0, r1, scratch);
}

/* ---- 8 channels, kernels up to 4 columns: two output pixels a vector, quads made in registers ----
 * A pair of output columns (ox, ox + 1) of one kernel row reads input columns ox sw - pl ..
 * ox sw - pl + sw + 3: at most 64 bytes of 8 channels, one load; one vpermb puts pixel ox's four
 * taps in lanes 0..7 and pixel ox + 1's in lanes 8..15 (depthwise_quad.c's pixel-pair layout, whose
 * constants it uses: weights and epilogue repeated in lanes 8..15), then one vpdpbusd. The ring
 * stored every quad and read it back (one load, vpermb, xor and store a quad, a quad row per
 * input row): 24x96x8 3x3 stride 2 took longer than the fp32 kernel. Padding columns come from
 * the masked load's merge with zp_x, padding rows are the constant padding quad. */
int dws_pairs_fits(const ei_dw_args *a) {
    return a->is_int8 && !a->nchw && a->c == 8 && a->kw <= 4 && a->dh == 1 && a->dw == 1 && a->sw <= 4
           && a->kh <= 16;
}

DWS_T void dws_pairs_rows(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    (void)scratch;
    const int sw = a->sw, W = a->w, kh = a->kh, ow = a->ow;
    const ei_vq16 k = *(const ei_vq16 *)a->consts;
    const int8_t *wq = (const int8_t *)((const ei_vq16 *)a->consts + 1);     /* [ky][64] */
    uint8_t idx[64];
    for (int l = 0; l < 16; l++)
        for (int t = 0; t < 4; t++) idx[4 * l + t] = (uint8_t)(((l >= 8 ? sw : 0) + t) * 8 + (l & 7));
    const __m512i vperm = _mm512_loadu_si512(idx), k80 = _mm512_set1_epi8((char)0x80);
    const __m512i padv = _mm512_set1_epi8((char)a->zp_x), padq = _mm512_xor_si512(padv, k80);
    __m512i wv[16];
    for (int ky = 0; ky < kh; ky++) wv[ky] = _mm512_loadu_si512(wq + (int64_t)ky * 64);
    ei_vqc vc;
    ei_vqc_prepare(&vc, a->ztab, a->zp_y, a->lo, a->hi, ei_rq_flag(a->shift, 8));
    const int span = 8 * (sw + 4);                          /* bytes a pair reads: sw + 4 columns */
    const __mmask64 need = span >= 64 ? ~0ULL : ((1ULL << span) - 1);
    for (int64_t row = r0; row < r1; row++) {
        const int64_t b = row / a->oh;
        const int oy = (int)(row % a->oh), top = oy * a->sh - a->pt;
        const int8_t *xb = (const int8_t *)a->x + b * a->h * W * 8;
        int8_t *y = (int8_t *)a->y + row * ow * 8;
        const int8_t *z = a->z ? (const int8_t *)a->z + row * ow * 8 : NULL;
        for (int ox = 0; ox < ow; ox += 8) {
            const int np = (EI_MIN(8, ow - ox) + 1) / 2;     /* pairs; a last odd column: half a pair */
            __m512i acc[4] = { k.bias, k.bias, k.bias, k.bias };
            for (int ky = 0; ky < kh; ky++) {
                const int iy = top + ky;
                if ((unsigned)iy >= (unsigned)a->h) {
                    for (int j = 0; j < np; j++) acc[j] = _mm512_dpbusd_epi32(acc[j], padq, wv[ky]);
                    continue;
                }
                const int8_t *xrow = xb + (int64_t)iy * W * 8;
                for (int j = 0; j < np; j++) {
                    const int ix0 = (ox + 2 * j) * sw - a->pl;      /* first column the pair reads */
                    __m512i v;
                    if (ix0 >= 0 && ix0 + sw + 3 < W) {
                        v = _mm512_maskz_loadu_epi8(need, xrow + (int64_t)ix0 * 8);
                    } else {        /* the bytes of columns inside the row, zp_x elsewhere */
                        const int lo = EI_MAX(0, -ix0), hi = EI_MIN(sw + 3, W - 1 - ix0);   /* columns lo..hi */
                        __mmask64 m = hi < lo ? 0 : (need >> (8 * lo)) << (8 * lo);
                        if (hi < lo) m = 0;
                        else if (8 * (hi + 1) < 64) m &= (1ULL << (8 * (hi + 1))) - 1;
                        v = _mm512_mask_loadu_epi8(padv, m, xrow + (int64_t)ix0 * 8);
                    }
                    acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_xor_si512(_mm512_permutexvar_epi8(vperm, v), k80), wv[ky]);
                }
            }
            int8_t *yo = y + (int64_t)ox * 8;
            if (np == 4 && ox + 7 < ow && !vc.ztab) {           /* 8 whole columns: one 64-byte store */
                ei_vq_store4(&vc, &k, (__mmask16)0xFFFF, acc[0], acc[1], acc[2], acc[3], yo, 16);
                continue;
            }
            for (int j = 0; j < np; j++)
                ei_vq_store(&vc, &k, ox + 2 * j + 1 < ow ? (__mmask16)0xFFFF : (__mmask16)0xFF, acc[j], yo + 16 * j,
                            z ? z + (int64_t)(ox + 2 * j) * 8 : NULL);
        }
    }
}
#else
void dws_rows(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) { (void)a; (void)r0; (void)r1; (void)scratch; }
int dws_pairs_fits(const ei_dw_args *a) { (void)a; return 0; }
void dws_pairs_rows(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) { (void)a; (void)r0; (void)r1; (void)scratch; }
#endif
