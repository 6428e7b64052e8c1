/* The AVX-512 VNNI micro-kernels of the int8 GEMM / convolution (int8_gemm.c: kinds, packing,
 * plan, driver): the 8 x 32 tile (vpdpbusd on u8 rows x + 128) with its requantization epilogue
 * fused in registers (NHWC output), the tiles of panels with few channels or rows, the narrow
 * layers' path (M <= 8, several rows a vector), and the NCHW output of VNNI / AMX tiles. */
#include "int8_gemm_internal.h"

#if defined(__x86_64__)
/* The 8 x 32 tile's K loop: rows[r] + 4g: four u8 (x + 128) of row r; b: int8 weights, 16
 * channels x 4 k, twice; accumulators start at s0 (channels 0..15) and s1 (16..31) */
#define VNNI_TILE(rows, s0, s1, bp, kg) \
    const __m512i *b = (const __m512i *)(bp); \
    const uint8_t *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3], *r4 = rows[4], \
                  *r5 = rows[5], *r6 = rows[6], *r7 = rows[7]; \
    __m512i c00 = s0, c01 = s1, c10 = s0, c11 = s1, c20 = s0, c21 = s1, c30 = s0, c31 = s1, \
            c40 = s0, c41 = s1, c50 = s0, c51 = s1, c60 = s0, c61 = s1, c70 = s0, c71 = s1; \
    for (int g = 0; g < (kg); g++, b += 2) { \
        __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 1), x; \
        int64_t o = 4 * (int64_t)g; \
        VNNI_DP(r0, c00, c01); VNNI_DP(r1, c10, c11); VNNI_DP(r2, c20, c21); VNNI_DP(r3, c30, c31); \
        VNNI_DP(r4, c40, c41); VNNI_DP(r5, c50, c51); VNNI_DP(r6, c60, c61); VNNI_DP(r7, c70, c71); \
    }
#define VNNI_DP(rp, v0, v1) x = _mm512_set1_epi32(*(const int32_t *)(rp + o)); \
    v0 = _mm512_dpbusd_epi32(v0, x, b0); v1 = _mm512_dpbusd_epi32(v1, x, b1)

/* the tile as int32 into c (row stride ldc); corr: the panel's 32 corrections */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void ei_gemm_mk_vnni(const uint8_t *const *rows, const int32_t *corr, const void *bp, int kg, int32_t *c, int ldc) {
    __m512i s0 = _mm512_loadu_si512(corr), s1 = _mm512_loadu_si512(corr + 16);
    VNNI_TILE(rows, s0, s1, bp, kg)
#define ST(r, v0, v1) _mm512_storeu_si512(c + (r) * ldc, v0); _mm512_storeu_si512(c + (r) * ldc + 16, v1)
    ST(0, c00, c01); ST(1, c10, c11); ST(2, c20, c21); ST(3, c30, c31);
    ST(4, c40, c41); ST(5, c50, c51); ST(6, c60, c61); ST(7, c70, c71);
#undef ST
}

static int has_vbmi(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vbmi"); }
    return v && ei_gemm_has_vnni();
}

/* the residual's terms MBQM(z - zp_z, s_z / s_y) as int16 byte planes (index: z's bit pattern),
 * when every one is within +-2^14: then ei_vq_pack4's int16 saturating arithmetic adds them
 * exactly (ei_gemm_vq_res_rows2) */
__attribute__((target("avx512f,avx512bw")))
static void zfast_prepare(vq_panel *v, const int32_t *ztab) {
    v->zfast = 0;
    if (!ztab || !has_vbmi()) return;
    uint8_t lo[256], hi[256];
    for (int i = 0; i < 256; i++) {
        if (ztab[i] < -(1 << 14) || ztab[i] > (1 << 14)) return;
        lo[i] = (uint8_t)(ztab[i] & 0xFF);
        hi[i] = (uint8_t)((ztab[i] >> 8) & 0xFF);
    }
    for (int q = 0; q < 4; q++) {
        v->zlo[q] = _mm512_loadu_si512(lo + 64 * q);
        v->zhi[q] = _mm512_loadu_si512(hi + 64 * q);
    }
    v->zfast = 1;
}

__attribute__((target("avx512f,avx512bw,avx512vnni")))
void ei_gemm_vq_prepare(vq_panel *v, const ei_int8_conv_args *a, const int32_t *corr, int ch0, int nch) {
    int left = 0;
    for (int h = 0; h < 2; h++) {
        int n = EI_MAX(0, EI_MIN(16, nch - 16 * h));
        left |= ei_vq16_prepare(&v->v[h], a->bias + ch0 + 16 * h, corr + 16 * h, a->mult + ch0 + 16 * h,
                                a->shift + ch0 + 16 * h, n);
        v->m[h] = (__mmask16)((1u << n) - 1);
    }
    ei_vqc_prepare(&v->c, a->ztab, a->zp_y, a->lo, a->hi, left);
    zfast_prepare(v, a->ztab);
}

/* Two rows of a panel with a residual (zfast): r0, r1 row 0's channels 0..15, 16..31 and r2, r3
 * row 1's (ei_vq_mbqm's, before zp_y); z, z + zs the rows' residual values. The residual's terms
 * come from the byte planes by vpermi2b (the per-lane table gather cost ~1 ns an output: the
 * projection convs' epilogue), in the word order of ei_vq_pack4's int16 packs, and join there:
 * packs(r) +sat term +sat zp_y, packs to int8, clamp. Exact: with |term| <= 2^14 a saturated
 * pack stays beyond [-255, 255] after both adds, on the side of the int32 sum (which clamps
 * there too), and an unsaturated one is the int32 sum itself. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"), noinline))
void ei_gemm_vq_res_rows2(const vq_panel *v, __m512i r0, __m512i r1, __m512i r2, __m512i r3, const int8_t *z,
                          int64_t zs, int8_t *y, int64_t ys) {
    /* packs_epi32 lane j holds words of channels 4j .. 4j + 3 then 16 + 4j .. 16 + 4j + 3; the
     * residual bytes are put in that order (row 0 in bytes 0..7 of each lane, row 1 in 8..15),
     * so unpacklo / unpackhi of the two planes give the terms of packs(r0, r1) / packs(r2, r3) */
    static const uint8_t ord[64] = { 0, 1, 2, 3, 16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51,
                                     4, 5, 6, 7, 20, 21, 22, 23, 36, 37, 38, 39, 52, 53, 54, 55,
                                     8, 9, 10, 11, 24, 25, 26, 27, 40, 41, 42, 43, 56, 57, 58, 59,
                                     12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63 };
    const __mmask32 m = (__mmask32)v->m[0] | (__mmask32)v->m[1] << 16;
    __m512i zb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(m, z)),
                                    _mm256_maskz_loadu_epi8(m, z + zs), 1);
    zb = _mm512_permutexvar_epi8(_mm512_loadu_si512(ord), zb);
    const __mmask64 top = _mm512_movepi8_mask(zb);
    __m512i lo = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(v->zlo[0], zb, v->zlo[1]),
                                        _mm512_permutex2var_epi8(v->zlo[2], zb, v->zlo[3]));
    __m512i hi = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(v->zhi[0], zb, v->zhi[1]),
                                        _mm512_permutex2var_epi8(v->zhi[2], zb, v->zhi[3]));
    const ei_vqc *c = &v->c;
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    __m512i a = _mm512_adds_epi16(_mm512_adds_epi16(_mm512_packs_epi32(r0, r1), _mm512_unpacklo_epi8(lo, hi)), c->zp16);
    __m512i b = _mm512_adds_epi16(_mm512_adds_epi16(_mm512_packs_epi32(r2, r3), _mm512_unpackhi_epi8(lo, hi)), c->zp16);
    __m512i p = _mm512_permutexvar_epi32(order, _mm512_packs_epi16(a, b));
    vq_rows2(_mm512_min_epi8(_mm512_max_epi8(p, c->lo8), c->hi8), v, y, ys);
}

/* every panel's vq_panel, made once at prepare (a conv call would otherwise make each panel's
 * again for every row block) */
int ei_gemm_has_consts(const ei_int8_conv_args *a) {
    return (a->kind == KIND_VNNI || a->kind == KIND_AMX) && !a->out_nchw && ei_gemm_has_vnni();
}

void ei_gemm_consts_prepare(const ei_int8_conv_args *a, void *out) {
    const kind_t *k = &KINDS[a->kind];
    int npan = (a->m + k->nr - 1) / k->nr;
    const int32_t *corr = (const int32_t *)((const char *)a->wpack
                                            + npan * ei_gemm_panel_bytes(a->kind, a->kh * a->kw * a->c));
    vq_panel *v = (vq_panel *)out;
    for (int j = 0; j < npan; j++)
        ei_gemm_vq_prepare(&v[j], a, corr + j * k->nr, j * k->nr, EI_MIN(k->nr, a->m - j * k->nr));
}

/* Narrow layers (M = 1, 2, 4 or 8 output channels: a detector's first pointwise convs, the
 * taps of a one-channel ConvTranspose): a 32-channel panel would leave 24..31 of its lanes
 * and one of its two epilogues idle per row. Instead one 16-lane vector holds R = 16 / M
 * consecutive rows x M channels, which is 16 contiguous outputs of the NHWC y: a k-group's
 * lanes are gathered from the R rows' u8 words by one vpermt2d (R * row stride <= 32 words,
 * checked in make_plan), multiplied by the weights replicated R times, and requantized once
 * per 16 outputs with the channel constants replicated the same way. */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void ei_gemm_sm_prepare(const ei_int8_conv_args *a, int kgr, sm_consts *s) {
    int M = a->m, K = a->kh * a->kw * a->c;
    const int32_t *pk = (const int32_t *)a->wpack;                   /* [g][32 channels] words */
    const int32_t *corr = (const int32_t *)((const char *)a->wpack + ei_gemm_panel_bytes(a->kind, K));
    int32_t b[16], c[16], q[16], sh[16], w[16];
    for (int l = 0; l < 16; l++) {
        int ch = l % M;
        b[l] = a->bias[ch]; c[l] = corr[ch]; q[l] = a->mult[ch]; sh[l] = a->shift[ch];
    }
    int left = ei_vq16_prepare(&s->v, b, c, q, sh, 16);
    ei_vqc_prepare(&s->c, a->ztab, a->zp_y, a->lo, a->hi, left);
    for (int g = 0; g < 16; g++) {
        for (int l = 0; l < 16; l++) w[l] = g < kgr ? pk[g * 32 + l % M] : 0;
        s->w[g] = _mm512_loadu_si512(w);
    }
}

/* the accumulators of one vector's rows: nd (<= 32) words of u8 rows at blk, permuted to the
 * lanes by idx0 + k-group, times the k-groups' weights */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static inline __m512i sm_acc(const sm_consts *s, const int32_t *blk, int nd, int kgr, __m512i idx0) {
    __m512i b0 = _mm512_maskz_loadu_epi32(nd >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nd) - 1), blk);
    __m512i b1 = nd > 16 ? _mm512_maskz_loadu_epi32((__mmask16)((1u << (nd - 16)) - 1), blk + 16)
                         : _mm512_setzero_si512();
    const __m512i one = _mm512_set1_epi32(1);
    __m512i acc = s->v.bias, idx = idx0;
    for (int g = 0; g < kgr; g++, idx = _mm512_add_epi32(idx, one))
        acc = _mm512_dpbusd_epi32(acc, _mm512_permutex2var_epi32(b0, idx, b1), s->w[g]);
    return acc;
}

/* rows r0 .. r0 + nrows - 1 from the u8 rows ub (stride kgs words, kgr k-groups each);
 * gather: R * kgs > 32 words (M = 1 over K = 16: a YOLO head's DFL conv), each k-group's
 * lanes gathered from the rows */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void ei_gemm_sm_rows(const ei_int8_conv_args *a, const sm_consts *s, int R, const uint8_t *ub, int kgs, int kgr,
                     int64_t r0, int nrows, int gather) {
    const int M = a->m;
    int32_t ix[16];
    for (int l = 0; l < 16; l++) ix[l] = (l / M) * kgs;
    const __m512i idx0 = _mm512_loadu_si512(ix), one = _mm512_set1_epi32(1);
    for (int i = 0; gather && i < nrows; i += R) {
        int nr = EI_MIN(R, nrows - i);
        __mmask16 m = nr == R ? (__mmask16)0xFFFF : (__mmask16)((1u << (nr * M)) - 1);
        const int32_t *blk = (const int32_t *)(ub + (int64_t)i * kgs * 4);
        __m512i acc = s->v.bias, idx = idx0;
        for (int g = 0; g < kgr; g++, idx = _mm512_add_epi32(idx, one))
            acc = _mm512_dpbusd_epi32(acc, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, blk, 4),
                                      s->w[g]);
        int64_t off = (r0 + i) * M;
        ei_vq_store(&s->c, &s->v, m, acc, a->y + off, a->z ? a->z + off : NULL);
    }
    int i4 = 0;                 /* no residual: 4 whole vectors (4R rows) at a time through ei_vq_pack4 */
    for (; !gather && !a->z && !s->c.ztab && nrows - i4 >= 4 * R; i4 += 4 * R) {
        __m512i acc[4];
        for (int q = 0; q < 4; q++)
            acc[q] = sm_acc(s, (const int32_t *)(ub + (int64_t)(i4 + q * R) * kgs * 4), R * kgs, kgr, idx0);
        const int l = s->c.left;
        _mm512_storeu_si512(a->y + (r0 + i4) * M, ei_vq_pack4(&s->c, ei_vq_mbqm(acc[0], &s->v, l),
                            ei_vq_mbqm(acc[1], &s->v, l), ei_vq_mbqm(acc[2], &s->v, l), ei_vq_mbqm(acc[3], &s->v, l)));
    }
    for (int i = i4; !gather && i < nrows; i += R) {
        int nr = EI_MIN(R, nrows - i);
        __m512i acc = sm_acc(s, (const int32_t *)(ub + (int64_t)i * kgs * 4), nr * kgs, kgr, idx0);
        __mmask16 m = nr == R ? (__mmask16)0xFFFF : (__mmask16)((1u << (nr * M)) - 1);
        int64_t off = (r0 + i) * M;
        ei_vq_store(&s->c, &s->v, m, acc, a->y + off, a->z ? a->z + off : NULL);
    }
}

/* ei_gemm_mk_vnni with the fused epilogue: rows 0 .. nrow - 1 of the tile go to y + r * ys (int8,
 * channels-last), residual z at the same offsets */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void ei_gemm_mk_vnni_rq(const uint8_t *const *rows, const void *bp, int kg, const vq_panel *v, int nrow, int8_t *y,
                        int64_t ys, const int8_t *z) {
    VNNI_TILE(rows, v->v[0].bias, v->v[1].bias, bp, kg)
    if (!v->c.ztab) {                  /* row pairs through ei_vq_pack4, an odd last row below */
        const int l = v->c.left;
#define PR(r, a0, a1, b0, b1) if (r + 1 < nrow) vq_rows2(ei_vq_pack4(&v->c, ei_vq_mbqm(a0, &v->v[0], l), \
        ei_vq_mbqm(a1, &v->v[1], l), ei_vq_mbqm(b0, &v->v[0], l), ei_vq_mbqm(b1, &v->v[1], l)), v, y + r * ys, ys);
        PR(0, c00, c01, c10, c11); PR(2, c20, c21, c30, c31); PR(4, c40, c41, c50, c51); PR(6, c60, c61, c70, c71);
#undef PR
        if (!(nrow & 1)) return;
        __m512i l0 = nrow == 1 ? c00 : nrow == 3 ? c20 : nrow == 5 ? c40 : c60;
        __m512i l1 = nrow == 1 ? c01 : nrow == 3 ? c21 : nrow == 5 ? c41 : c61;
        int8_t *yl = y + (nrow - 1) * ys;
        ei_vq_store(&v->c, &v->v[0], v->m[0], l0, yl, NULL);
        ei_vq_store(&v->c, &v->v[1], v->m[1], l1, yl + 16, NULL);
        return;
    }
    int done = 0;                      /* rows stored in pairs (zfast) */
    if (v->zfast && z) {
        const int l = v->c.left;
#define PR(r, a0, a1, b0, b1) if (r + 1 < nrow) { ei_gemm_vq_res_rows2(v, ei_vq_mbqm(a0, &v->v[0], l), \
        ei_vq_mbqm(a1, &v->v[1], l), ei_vq_mbqm(b0, &v->v[0], l), ei_vq_mbqm(b1, &v->v[1], l), z + r * ys, ys, \
        y + r * ys, ys); done = r + 2; }
        PR(0, c00, c01, c10, c11); PR(2, c20, c21, c30, c31); PR(4, c40, c41, c50, c51); PR(6, c60, c61, c70, c71);
#undef PR
    }
#define ST(r, v0, v1) if (r >= done && r < nrow) { \
        ei_vq_store(&v->c, &v->v[0], v->m[0], v0, y + r * ys, z ? z + r * ys : NULL); \
        ei_vq_store(&v->c, &v->v[1], v->m[1], v1, y + r * ys + 16, z ? z + r * ys + 16 : NULL); }
    ST(0, c00, c01); ST(1, c10, c11); ST(2, c20, c21); ST(3, c30, c31);
    ST(4, c40, c41); ST(5, c50, c51); ST(6, c60, c61); ST(7, c70, c71);
#undef ST
}

/* A panel of at most 16 channels (M = 16, 48, the 8 of 72 past two whole panels): 16 rows x 16
 * channels, one vector a row, on the panel's first 16 channels' weights. The 8 x 32 tile
 * multiplied and requantized channels 16..31 of such a panel for nothing: half its work at M =
 * 16 (MobileNetV3's 56x56 16 -> 16 projection). No residual. Rows nrow .. 15 of rows[] must
 * point at readable rows (their results are not stored). */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void ei_gemm_mk_vnni_rq16(const uint8_t *const *rows, const void *bp, int kg, const vq_panel *v, int nrow, int8_t *y,
                          int64_t ys) {
    const __m512i *b = (const __m512i *)bp;
    __m512i c[16];
    for (int r = 0; r < 16; r++) c[r] = v->v[0].bias;
    for (int g = 0; g < kg; g++, b += 2) {
        const __m512i w = _mm512_loadu_si512(b);
        const int64_t o = 4 * (int64_t)g;
        for (int r = 0; r < 16; r++)
            c[r] = _mm512_dpbusd_epi32(c[r], _mm512_set1_epi32(*(const int32_t *)(rows[r] + o)), w);
    }
    int r = 0;
    for (; r + 4 <= nrow; r += 4)
        ei_vq_store4(&v->c, &v->v[0], v->m[0], c[r], c[r + 1], c[r + 2], c[r + 3], y + r * ys, ys);
    for (; r < nrow; r++) ei_vq_store(&v->c, &v->v[0], v->m[0], c[r], y + r * ys, NULL);
}

/* A panel of at most 8 channels (the last 8 of M = 72, 40, 104): two rows a vector, row 2i in
 * lanes 0..7 and row 2i + 1 in lanes 8..15 (their k-group words broadcast into the two halves),
 * on weights and constants whose lanes 8..15 repeat channels 0..7: half the multiplies and
 * requantizations of ei_gemm_mk_vnni_rq16, whose lanes 8..15 were idle there. Up to 32 rows, no
 * residual; rows nrow .. of rows[] (up to the next even count) must be readable. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
void ei_gemm_mk_vnni_rq8x2(const uint8_t *const *rows, const void *bp, int kg, const vq_panel *v, int nrow, int8_t *y,
                           int64_t ys) {
    const __m512i *b = (const __m512i *)bp;
    const int nv = (nrow + 1) / 2;
#define REP(f) k.f = _mm512_shuffle_i64x2(v->v[0].f, v->v[0].f, 0x44)
    ei_vq16 k;
    REP(bias); REP(q); REP(qo); REP(left); REP(ce); REP(co); REP(de); REP(dO); REP(se); REP(so);
#undef REP
    const __m512i lo8 = _mm512_set_epi32(7, 6, 5, 4, 3, 2, 1, 0, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512i c[16];
    for (int i = 0; i < 16; i++) c[i] = k.bias;
    for (int g = 0; g < kg; g++, b += 2) {
        const __m512i w = _mm512_permutexvar_epi32(lo8, _mm512_loadu_si512(b));
        const int64_t o = 4 * (int64_t)g;
        for (int i = 0; i < nv; i++) {
            __m512i x = _mm512_mask_set1_epi32(_mm512_set1_epi32(*(const int32_t *)(rows[2 * i] + o)), (__mmask16)0xFF00,
                                               *(const int32_t *)(rows[2 * i + 1] + o));
            c[i] = _mm512_dpbusd_epi32(c[i], x, w);
        }
    }
    const __mmask16 m8 = (__mmask16)(v->m[0] & 0xFF);
    for (int i = 0; i < nv; i += 4) {
        __m512i p = ei_vq_pack4(&v->c, ei_vq_mbqm(c[i], &k, v->c.left), ei_vq_mbqm(c[i + 1], &k, v->c.left),
                                ei_vq_mbqm(c[i + 2], &k, v->c.left), ei_vq_mbqm(c[i + 3], &k, v->c.left));
        const __m128i qs[4] = { _mm512_castsi512_si128(p), _mm512_extracti32x4_epi32(p, 1),
                                _mm512_extracti32x4_epi32(p, 2), _mm512_extracti32x4_epi32(p, 3) };
        for (int j = 0; j < 4 && 2 * (i + j) < nrow; j++) {
            const __m128i qj = qs[j];
            const int r = 2 * (i + j);
            _mm_mask_storeu_epi8(y + r * ys, (__mmask16)m8, qj);
            if (r + 1 < nrow) _mm_mask_storeu_epi8(y + (r + 1) * ys, (__mmask16)m8, _mm_srli_si128(qj, 8));
        }
    }
}

/* one row of the tile (a batch-1 fully-connected layer, the last row of a 7x7 map): the
 * 8-row tile would do 8x the work; two interleaved K halves keep 4 dpbusd chains in flight */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void ei_gemm_mk_vnni_rq1(const uint8_t *row, const void *bp, int kg, const vq_panel *v, int8_t *y,
                         const int8_t *z) {
    const __m512i *b = (const __m512i *)bp;
    __m512i a0 = v->v[0].bias, a1 = v->v[1].bias, e0 = _mm512_setzero_si512(), e1 = e0;
    int g = 0;
    for (; g + 2 <= kg; g += 2, b += 4) {
        __m512i x0 = _mm512_set1_epi32(*(const int32_t *)(row + 4 * (int64_t)g));
        __m512i x1 = _mm512_set1_epi32(*(const int32_t *)(row + 4 * (int64_t)g + 4));
        a0 = _mm512_dpbusd_epi32(a0, x0, _mm512_loadu_si512(b));
        a1 = _mm512_dpbusd_epi32(a1, x0, _mm512_loadu_si512(b + 1));
        e0 = _mm512_dpbusd_epi32(e0, x1, _mm512_loadu_si512(b + 2));
        e1 = _mm512_dpbusd_epi32(e1, x1, _mm512_loadu_si512(b + 3));
    }
    if (g < kg) {
        __m512i x0 = _mm512_set1_epi32(*(const int32_t *)(row + 4 * (int64_t)g));
        a0 = _mm512_dpbusd_epi32(a0, x0, _mm512_loadu_si512(b));
        a1 = _mm512_dpbusd_epi32(a1, x0, _mm512_loadu_si512(b + 1));
    }
    ei_vq_store(&v->c, &v->v[0], v->m[0], _mm512_add_epi32(a0, e0), y, z);
    ei_vq_store(&v->c, &v->v[1], v->m[1], _mm512_add_epi32(a1, e1), y + 16, z ? z + 16 : NULL);
}

/* dst[0 .. n) = src ^ 0x80 (int8 -> u8 x + 128) */
__attribute__((target("avx512f,avx512bw")))
void ei_xor80(uint8_t *dst, const int8_t *src, int64_t n) {
    const __m512i k = _mm512_set1_epi8((char)0x80);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        _mm512_storeu_si512(dst + i, _mm512_xor_si512(_mm512_loadu_si512(src + i), k));
    if (i < n) {
        __mmask64 m = (n - i) >= 64 ? ~0ULL : ((1ULL << (n - i)) - 1);
        _mm512_mask_storeu_epi8(dst + i, m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, src + i), k));
    }
}

/* NCHW output of VNNI / AMX tiles (acc: nrows x 32 int32; corr: the panel's corrections when
 * acc does not include them (AMX), else NULL):
 * per channel, 16 consecutive pixels of one image read down the tile's column and requantized
 * with that channel's constants in every lane, stored as 16 contiguous bytes of its plane (the
 * per-row epilogue wrote one byte per plane per row) */
__attribute__((target("avx512f,avx512bw")))
void ei_gemm_nchw_store(const ei_int8_conv_args *a, const plan_t *p, const int32_t *acc, int64_t r0, int nrows,
                        int ch0, int nch, const int32_t *corr) {
    int left = ei_rq_flag(a->shift + ch0, nch);
    ei_vqc vc;
    ei_vqc_prepare(&vc, a->ztab, a->zp_y, a->lo, a->hi, left);
    const __m512i lane32 = _mm512_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480);
    for (int c = 0; c < nch; c++) {
        int ch = ch0 + c;
        int32_t bb[16], qq[16], ss[16];
        for (int l = 0; l < 16; l++) {
            bb[l] = (int32_t)((uint32_t)a->bias[ch] + (uint32_t)(corr ? corr[c] : 0));
            qq[l] = a->mult[ch]; ss[l] = a->shift[ch];
        }
        ei_vq16 v;
        ei_vq16_prepare(&v, bb, NULL, qq, ss, 16);
        for (int i = 0; i < nrows;) {
            int64_t r = r0 + i, b = r / p->P, pix = r - b * p->P;
            int len = (int)EI_MIN((int64_t)EI_MIN(16, nrows - i), p->P - pix);
            __mmask16 m = len == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << len) - 1);
            __m512i x = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m,
                                                    _mm512_add_epi32(lane32, _mm512_set1_epi32(i * 32 + c)), acc, 4);
            int64_t off = (b * a->m + ch) * p->P + pix;
            ei_vq_store(&vc, &v, m, _mm512_add_epi32(x, v.bias), a->y + off, a->z ? a->z + off : NULL);
            i += len;
        }
    }
}
#endif
