/* int8 GEMM / convolution with packed weights, int32 accumulation and the fused
 * requantization epilogue (ei_int8.h). Bit-exact with kernels/int8_conv.py and int8_gemm.py.
 *
 * out[r, m] = sum_k A[r, k] * W[m, k], r over output pixels (or GEMM rows), m over output
 * channels, k over (tap, input channel). A's rows are the input itself (NHWC 1x1 convs, GEMM)
 * or an im2col of one row block into per-thread scratch (padding reads zp_x: the zero-point
 * term is folded into the bias at prepare, as in the numpy kernels).
 *
 * Packing ("kinds"): W is packed once at prepare into panels of NR channels,
 * [k-group][channel][KR], and each block of A into micro-panels of MR rows, [k-group][row][KR]:
 *   scalar     MR 4, NR 4,  KR 1, int8
 *   AVX2       MR 6, NR 16, KR 2, int16   _mm256_madd_epi16: (a0 w0 + a1 w1) per channel, exact
 *   NEON       MR 8, NR 8,  KR 1, int16   vmlal_laneq_s16 (Cortex-A72, no dot product)
 *   NEON sdot  MR 8, NR 8,  KR 4, int8    vdotq_laneq_s32
 *   AVX-512    MR 8, NR 32, KR 4, int8    VNNI vpdpbusd (x + 128) x w, requantized in registers (below)
 *   AMX        MR 32, NR 32, KR 4, int8   tdpbusd on 2 x 2 tiles of 16 x 16; the VNNI layout with K
 *                                         padded to whole tiles (16 groups of 4), A's u8 rows read
 *                                         as tiles in place; rows <= 8 of a tile go to the VNNI kernel
 * The kind is chosen at prepare (ei_int8_gemm_kind) and recorded in the args, so the packed
 * weights and the micro-kernel always agree. Work is split over (row block, channel range)
 * tasks on the thread pool; each thread slot has its own scratch.
 */
#include "int8_gemm.h"
#include "ei_lut.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif


typedef struct { int mr, nr, kr, es; } kind_t;
static const kind_t KINDS[N_KINDS] = { {4, 4, 1, 1}, {6, 16, 2, 2}, {8, 8, 1, 2}, {8, 8, 4, 1}, {8, 32, 4, 1}, {32, 32, 4, 1} };

/* AVX-512 VNNI (vpdpbusd: u8 x s8, four products summed into int32, no saturation) multiplies
 * A's rows as u8 = x + 128 (x ^ 0x80, copied so into per-thread scratch, K padded to a multiple
 * of 4 with zeros) by the int8 weights; the extra 128 * sum_k w[m, k] is a per-channel constant,
 * stored after the packed panels and taken off the accumulators' start. The int32 sums wrap
 * modulo 2^32 at worst and end exactly on the true accumulator (it fits in int32). */
#if defined(__x86_64__)
static int has_vnni(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"); }
    return v && ei_has(EI_AVX512);
}

static int has_amx(void) { return has_vnni() && ei_has(EI_AMX); }
#endif


EI_API int ei_int8_gemm_kind(void) {
#if defined(__x86_64__)
    if (has_amx()) return KIND_AMX;
    if (has_vnni()) return KIND_VNNI;
    if (ei_has(EI_AVX2)) return KIND_AVX2;
#elif defined(__aarch64__)
    if (ei_has(EI_DOTPROD)) return KIND_DOT;
    if (ei_has(EI_NEON)) return KIND_NEON;
#endif
    return KIND_SCALAR;
}

static int kind_ok(int kind) {
    if (kind < 0 || kind >= N_KINDS) return 0;
#if defined(__x86_64__)
    return kind == KIND_SCALAR || kind == KIND_AVX2 || kind == KIND_VNNI || kind == KIND_AMX;
#elif defined(__aarch64__)
    return kind == KIND_SCALAR || kind == KIND_NEON || kind == KIND_DOT;
#else
    return kind == KIND_SCALAR;
#endif
}

int ei_int8_kind_runs(int kind) {
    if (!kind_ok(kind)) return 0;
#if defined(__x86_64__)
    if (kind == KIND_AVX2) return ei_has(EI_AVX2);
    if (kind == KIND_VNNI) return has_vnni();
    if (kind == KIND_AMX) return has_amx();
#elif defined(__aarch64__)
    if (kind == KIND_DOT) return ei_has(EI_DOTPROD);
#endif
    return 1;
}

/* k-groups of KR in the packed panels (AMX: whole tiles of 16 groups, zero-padded) */
static int kgroups(int kind, int K) {
    int kg = (K + KINDS[kind].kr - 1) / KINDS[kind].kr;
    return kind == KIND_AMX ? (kg + 15) / 16 * 16 : kg;
}

static int64_t panel_bytes(int kind, int K) {
    const kind_t *k = &KINDS[kind];
    return (int64_t)kgroups(kind, K) * k->nr * k->kr * k->es;
}

static int u8_rows(int kind) { return kind == KIND_VNNI || kind == KIND_AMX; }

EI_API int64_t ei_int8_pack_size(int kind, int M, int K) {
    if (!kind_ok(kind)) return -1;
    const kind_t *k = &KINDS[kind];
    int64_t np = (M + k->nr - 1) / k->nr;
    return np * panel_bytes(kind, K) + (u8_rows(kind) ? np * k->nr * 4 : 0);
}

/* w: (M, K) int8 row-major */
EI_API void ei_int8_pack_weights(int kind, const int8_t *w, int M, int K, void *out) {
    const kind_t *k = &KINDS[kind];
    int kg = kgroups(kind, K), np = (M + k->nr - 1) / k->nr;
    int8_t *o8 = (int8_t *)out;
    int16_t *o16 = (int16_t *)out;
    int64_t idx = 0;
    for (int j = 0; j < np; j++)
        for (int g = 0; g < kg; g++)
            for (int n = 0; n < k->nr; n++)
                for (int kk = 0; kk < k->kr; kk++, idx++) {
                    int ch = j * k->nr + n, kx = g * k->kr + kk;
                    int8_t v = (ch < M && kx < K) ? w[(int64_t)ch * K + kx] : 0;
                    if (k->es == 1) o8[idx] = v; else o16[idx] = v;
                }
    if (u8_rows(kind)) {            /* per channel -128 * sum_k w (0 past M) */
        int32_t *corr = (int32_t *)(o8 + idx);
        for (int ch = 0; ch < np * k->nr; ch++) {
            int32_t sw = 0;
            for (int kx = 0; ch < M && kx < K; kx++) sw += w[(int64_t)ch * K + kx];
            corr[ch] = (int32_t)((uint32_t)sw * (uint32_t)-128);
        }
    }
}

/* A micro-panel of MR rows (rows[r] NULL: a zero padding row) */
static void pack_a(const kind_t *k, const int8_t *const *rows, int K, void *out) {
    int kg = (K + k->kr - 1) / k->kr, mr = k->mr, kr = k->kr;
    if (k->es == 1) {
        int8_t *o = (int8_t *)out;
        for (int r = 0; r < mr; r++) {
            const int8_t *s = rows[r];
            for (int g = 0; g < kg; g++)
                for (int kk = 0; kk < kr; kk++) {
                    int kx = g * kr + kk;
                    o[((int64_t)g * mr + r) * kr + kk] = (s && kx < K) ? s[kx] : 0;
                }
        }
        return;
    }
    int16_t *o = (int16_t *)out;
    for (int r = 0; r < mr; r++) {
        const int8_t *s = rows[r];
        if (!s) {
            for (int g = 0; g < kg; g++)
                for (int kk = 0; kk < kr; kk++) o[((int64_t)g * mr + r) * kr + kk] = 0;
            continue;
        }
        if (kr == 2) {
            int full = K / 2;
            for (int g = 0; g < full; g++) {
                o[((int64_t)g * mr + r) * 2] = s[2 * g];
                o[((int64_t)g * mr + r) * 2 + 1] = s[2 * g + 1];
            }
            if (K & 1) { o[((int64_t)full * mr + r) * 2] = s[K - 1]; o[((int64_t)full * mr + r) * 2 + 1] = 0; }
        } else {
            for (int g = 0; g < kg; g++) o[(int64_t)g * mr + r] = s[g];
        }
    }
}

/* ---- micro-kernels: c[r * ldc + n] = sum over kg groups, MR x NR int32 ---- */

static void mk_scalar(const void *ap, const void *bp, int kg, int32_t *c, int ldc, const int32_t *comp) {
    (void)comp;
    const int8_t *a = (const int8_t *)ap, *b = (const int8_t *)bp;
    int32_t acc[4][4] = {{0}};
    for (int g = 0; g < kg; g++, a += 4, b += 4)
        for (int r = 0; r < 4; r++)
            for (int n = 0; n < 4; n++) acc[r][n] += (int32_t)a[r] * b[n];
    for (int r = 0; r < 4; r++)
        for (int n = 0; n < 4; n++) c[r * ldc + n] = acc[r][n];
}

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
static void mk_vnni(const uint8_t *const *rows, const int32_t *corr, const void *bp, int kg, int32_t *c, int ldc) {
    __m512i s0 = _mm512_loadu_si512(corr), s1 = _mm512_loadu_si512(corr + 16);
    VNNI_TILE(rows, s0, s1, bp, kg)
#define ST(r, v0, v1) _mm512_storeu_si512(c + (r) * ldc, v0); _mm512_storeu_si512(c + (r) * ldc + 16, v1)
    ST(0, c00, c01); ST(1, c10, c11); ST(2, c20, c21); ST(3, c30, c31);
    ST(4, c40, c41); ST(5, c50, c51); ST(6, c60, c61); ST(7, c70, c71);
#undef ST
}

/* The requantization epilogue fused into mk_vnni (NHWC output): the 8 x 32 tile is
 * requantized in registers (ei_vq16, ei_int8.h) and stored as int8, with no int32 round trip. */
typedef struct {
    ei_vq16 v[2];
    ei_vqc c;
    __m512i zlo[4], zhi[4];         /* zfast: the residual table's int16 terms as two byte planes */
    __mmask16 m[2];                 /* channels of the panel that exist */
    int zfast;                      /* the residual's rows in pairs through vq_res_rows2 (VBMI) */
} vq_panel;

static int has_vbmi(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vbmi"); }
    return v && has_vnni();
}

/* the residual's terms MBQM(z - zp_z, s_z / s_y) as int16 byte planes (index: z's bit pattern),
 * when every one is within +-2^14: then ei_vq_pack4's int16 saturating arithmetic adds them
 * exactly (vq_res_rows2) */
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
static void vq_prepare(vq_panel *v, const ei_int8_conv_args *a, const int32_t *corr, int ch0, int nch) {
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

/* ei_vq_pack4's 64 bytes as two rows of the panel's 32 channels (y, y + ys) */
__attribute__((target("avx512f,avx512bw")))
static inline void vq_rows2(__m512i p, const vq_panel *v, int8_t *y, int64_t ys) {
    const __mmask64 m = (__mmask64)v->m[0] | (__mmask64)v->m[1] << 16;
    __m256i hi = _mm512_extracti64x4_epi64(p, 1);
    if (m == 0xFFFFFFFFULL) {
        _mm256_storeu_si256((__m256i *)y, _mm512_castsi512_si256(p));
        _mm256_storeu_si256((__m256i *)(y + ys), hi);
    } else {
        _mm512_mask_storeu_epi8(y, m, p);
        _mm512_mask_storeu_epi8(y + ys, m, _mm512_castsi256_si512(hi));
    }
}

/* Two rows of a panel with a residual (zfast): r0, r1 row 0's channels 0..15, 16..31 and r2, r3
 * row 1's (ei_vq_mbqm's, before zp_y); z, z + zs the rows' residual values. The residual's terms
 * come from the byte planes by vpermi2b (the per-lane table gather cost ~1 ns an output: the
 * projection convs' epilogue), in the word order of ei_vq_pack4's int16 packs, and join there:
 * packs(r) +sat term +sat zp_y, packs to int8, clamp. Exact: with |term| <= 2^14 a saturated
 * pack stays beyond [-255, 255] after both adds, on the side of the int32 sum (which clamps
 * there too), and an unsaturated one is the int32 sum itself. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"), noinline))
static void vq_res_rows2(const vq_panel *v, __m512i r0, __m512i r1, __m512i r2, __m512i r3, const int8_t *z,
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
        vq_res_rows2(v, RQ(c0, 0), RQ(c0 + 16, 1), RQ(c1, 0), RQ(c1 + 16, 1), z + r * ys, ys, y + r * ys, ys);
    }
#undef RQ
    return r;
}

/* every panel's vq_panel, made once at prepare (a conv call would otherwise make each panel's
 * again for every row block) */
static int has_consts(const ei_int8_conv_args *a) {
    return (a->kind == KIND_VNNI || a->kind == KIND_AMX) && !a->out_nchw && has_vnni();
}

static void consts_prepare(const ei_int8_conv_args *a, void *out) {
    const kind_t *k = &KINDS[a->kind];
    int npan = (a->m + k->nr - 1) / k->nr;
    const int32_t *corr = (const int32_t *)((const char *)a->wpack + npan * panel_bytes(a->kind, a->kh * a->kw * a->c));
    vq_panel *v = (vq_panel *)out;
    for (int j = 0; j < npan; j++) vq_prepare(&v[j], a, corr + j * k->nr, j * k->nr, EI_MIN(k->nr, a->m - j * k->nr));
}

/* Narrow layers (M = 1, 2, 4 or 8 output channels: a detector's first pointwise convs, the
 * taps of a one-channel ConvTranspose): a 32-channel panel would leave 24..31 of its lanes
 * and one of its two epilogues idle per row. Instead one 16-lane vector holds R = 16 / M
 * consecutive rows x M channels, which is 16 contiguous outputs of the NHWC y: a k-group's
 * lanes are gathered from the R rows' u8 words by one vpermt2d (R * row stride <= 32 words,
 * checked in make_plan), multiplied by the weights replicated R times, and requantized once
 * per 16 outputs with the channel constants replicated the same way. */
typedef struct {
    ei_vq16 v;
    ei_vqc c;
    __m512i w[16];                  /* k-group g: lane l = channel l % M's 4 weights */
} sm_consts;

__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void sm_prepare(const ei_int8_conv_args *a, int kgr, sm_consts *s) {
    int M = a->m, K = a->kh * a->kw * a->c;
    const int32_t *pk = (const int32_t *)a->wpack;                   /* [g][32 channels] words */
    const int32_t *corr = (const int32_t *)((const char *)a->wpack + panel_bytes(a->kind, K));
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
static void sm_rows(const ei_int8_conv_args *a, const sm_consts *s, int R, const uint8_t *ub, int kgs, int kgr,
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

/* mk_vnni with the fused epilogue: rows 0 .. nrow - 1 of the tile go to y + r * ys (int8,
 * channels-last), residual z at the same offsets */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void mk_vnni_rq(const uint8_t *const *rows, const void *bp, int kg, const vq_panel *v, int nrow, int8_t *y,
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
#define PR(r, a0, a1, b0, b1) if (r + 1 < nrow) { vq_res_rows2(v, ei_vq_mbqm(a0, &v->v[0], l), \
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
static void mk_vnni_rq16(const uint8_t *const *rows, const void *bp, int kg, const vq_panel *v, int nrow, int8_t *y,
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
 * requantizations of mk_vnni_rq16, whose lanes 8..15 were idle there. Up to 32 rows, no
 * residual; rows nrow .. of rows[] (up to the next even count) must be readable. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
static void mk_vnni_rq8x2(const uint8_t *const *rows, const void *bp, int kg, const vq_panel *v, int nrow, int8_t *y,
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
static void mk_vnni_rq1(const uint8_t *row, const void *bp, int kg, const vq_panel *v, int8_t *y,
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

__attribute__((target("avx2,fma")))
static void mk_avx2(const void *ap, const void *bp, int kg, int32_t *c, int ldc, const int32_t *comp) {
    (void)comp;
    const int32_t *a = (const int32_t *)ap;       /* (a[2g], a[2g+1]) int16 pairs per row */
    const __m256i *b = (const __m256i *)bp;
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
            c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int g = 0; g < kg; g++, a += 6, b += 2) {
        __m256i b0 = _mm256_loadu_si256(b), b1 = _mm256_loadu_si256(b + 1), x;
        x = _mm256_set1_epi32(a[0]);
        c00 = _mm256_add_epi32(c00, _mm256_madd_epi16(x, b0)); c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(x, b1));
        x = _mm256_set1_epi32(a[1]);
        c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(x, b0)); c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(x, b1));
        x = _mm256_set1_epi32(a[2]);
        c20 = _mm256_add_epi32(c20, _mm256_madd_epi16(x, b0)); c21 = _mm256_add_epi32(c21, _mm256_madd_epi16(x, b1));
        x = _mm256_set1_epi32(a[3]);
        c30 = _mm256_add_epi32(c30, _mm256_madd_epi16(x, b0)); c31 = _mm256_add_epi32(c31, _mm256_madd_epi16(x, b1));
        x = _mm256_set1_epi32(a[4]);
        c40 = _mm256_add_epi32(c40, _mm256_madd_epi16(x, b0)); c41 = _mm256_add_epi32(c41, _mm256_madd_epi16(x, b1));
        x = _mm256_set1_epi32(a[5]);
        c50 = _mm256_add_epi32(c50, _mm256_madd_epi16(x, b0)); c51 = _mm256_add_epi32(c51, _mm256_madd_epi16(x, b1));
    }
#define ST(r, v0, v1) _mm256_storeu_si256((__m256i *)(c + (r) * ldc), v0); \
                      _mm256_storeu_si256((__m256i *)(c + (r) * ldc + 8), v1)
    ST(0, c00, c01); ST(1, c10, c11); ST(2, c20, c21); ST(3, c30, c31); ST(4, c40, c41); ST(5, c50, c51);
#undef ST
}
#endif

#if defined(__aarch64__)
static void mk_neon(const void *ap, const void *bp, int kg, int32_t *c, int ldc, const int32_t *comp) {
    (void)comp;
    const int16_t *a = (const int16_t *)ap, *b = (const int16_t *)bp;
    int32x4_t acc[8][2];
    for (int r = 0; r < 8; r++) acc[r][0] = acc[r][1] = vdupq_n_s32(0);
    for (int g = 0; g < kg; g++, a += 8, b += 8) {
        int16x8_t wv = vld1q_s16(b), xv = vld1q_s16(a);
        int16x4_t wl = vget_low_s16(wv);
#define ML(r) acc[r][0] = vmlal_laneq_s16(acc[r][0], wl, xv, r); acc[r][1] = vmlal_high_laneq_s16(acc[r][1], wv, xv, r)
        ML(0); ML(1); ML(2); ML(3); ML(4); ML(5); ML(6); ML(7);
#undef ML
    }
    for (int r = 0; r < 8; r++) { vst1q_s32(c + r * ldc, acc[r][0]); vst1q_s32(c + r * ldc + 4, acc[r][1]); }
}

__attribute__((target("arch=armv8.2-a+dotprod")))
static void mk_dot(const void *ap, const void *bp, int kg, int32_t *c, int ldc, const int32_t *comp) {
    (void)comp;
    const int8_t *a = (const int8_t *)ap, *b = (const int8_t *)bp;
    int32x4_t acc[8][2];
    for (int r = 0; r < 8; r++) acc[r][0] = acc[r][1] = vdupq_n_s32(0);
    for (int g = 0; g < kg; g++, a += 32, b += 32) {
        int8x16_t w0 = vld1q_s8(b), w1 = vld1q_s8(b + 16), x0 = vld1q_s8(a), x1 = vld1q_s8(a + 16);
#define DT(r, xv, l) acc[r][0] = vdotq_laneq_s32(acc[r][0], w0, xv, l); acc[r][1] = vdotq_laneq_s32(acc[r][1], w1, xv, l)
        DT(0, x0, 0); DT(1, x0, 1); DT(2, x0, 2); DT(3, x0, 3);
        DT(4, x1, 0); DT(5, x1, 1); DT(6, x1, 2); DT(7, x1, 3);
#undef DT
    }
    for (int r = 0; r < 8; r++) { vst1q_s32(c + r * ldc, acc[r][0]); vst1q_s32(c + r * ldc + 4, acc[r][1]); }
}
#endif

typedef void (*mk_fn)(const void *, const void *, int, int32_t *, int, const int32_t *);

static mk_fn kernel_of(int kind) {
    switch (kind) {
#if defined(__x86_64__)
    case KIND_AVX2: return mk_avx2;
#endif
#if defined(__aarch64__)
    case KIND_NEON: return mk_neon;
    case KIND_DOT: return mk_dot;
#endif
    default: return mk_scalar;
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
#if defined(__x86_64__)
static int has_amx(void);
static int implicit_ok(const ei_int8_conv_args *a) {
    if (a->kind != KIND_AMX || a->in_nchw || a->out_nchw || a->sh != 1 || a->sw != 1 || a->dh != 1 || a->dw != 1
        || a->kw * a->c < 64 || a->c % 4 || !has_amx())
        return 0;
    int ixb = EI_MIN(a->ow, a->w - a->kw + a->pl + 1), iyb = EI_MIN(a->oh, a->h - a->kh + a->pt + 1);
    return ixb - a->pl >= 64 && iyb > a->pt;      /* 40-pixel rows measured slower than the im2col */
}

/* one panel's implicit constants: its vq_panel without the u8 corrections, then the weights
 * [kernel row][chunk][16 k-groups][32 channels][4] */
static int64_t implicit_panel_bytes(const ei_int8_conv_args *a) {
    return (int64_t)sizeof(vq_panel) + (int64_t)a->kh * ((a->kw * a->c + 63) / 64) * 2048;
}

/* where chunk q of nq starts in a kernel row's span */
static inline int implicit_chunk(int q, int nq, int span) {
    return (q < nq - 1 || span % 64 == 0) ? 64 * q : span - 64;
}

static void implicit_prepare(const ei_int8_conv_args *a, char *out);
#endif

/* ---- plan: blocking and per-thread scratch ---- */

typedef struct {
    kind_t k;
    int K, kg, R, P, mb, nrb, npan, ncb, ntasks, direct;
    int direct_nchw;            /* 1x1, stride 1, no padding, NCHW input: rows read along the planes */
    int sm;                     /* narrow (sm_rows below): rows per 16-lane vector, else 0 */
    int sm_gather;              /* narrow rows too long for one vpermt2d: gathered */
    int implicit;               /* AMX straight from the input on interior pixels (implicit_block) */
    int kgr;                    /* k-groups holding K (kg without the AMX tile padding) */
    int64_t k4;                 /* bytes between the u8 rows of A (VNNI / AMX) */
    int64_t off_rows, off_apack, off_acc, per_thread;
} plan_t;

static int64_t align64(int64_t v) { return (v + 63) & ~(int64_t)63; }

static int64_t conv_slots(const ei_int8_conv_args *a, const plan_t *p);
/* the least estimated work (ns) a thread slot pays for (conv_slots) */
#define SLOT_NS 4000
static double conv_ns(const ei_int8_conv_args *a, const plan_t *p);

static void make_plan(const ei_int8_conv_args *a, plan_t *p) {
    p->k = KINDS[a->kind];
    const kind_t *k = &p->k;
    p->K = a->kh * a->kw * a->c;
    p->kg = kgroups(a->kind, p->K);
    p->P = a->oh * a->ow;
    p->R = a->n * p->P;
    p->direct = !a->in_nchw && a->kh == 1 && a->kw == 1 && a->pt == 0 && a->pl == 0 &&
                (int64_t)(a->oh - 1) * a->sh < a->h && (int64_t)(a->ow - 1) * a->sw < a->w;
    p->direct_nchw = a->in_nchw && a->kh == 1 && a->kw == 1 && a->sh == 1 && a->sw == 1 && a->pt == 0 &&
                     a->pl == 0 && a->oh == a->h && a->ow == a->w;
    int64_t arow = (int64_t)p->kg * k->kr * k->es;          /* packed bytes per row of A */
    int64_t mb = (96 * 1024) / (arow > 0 ? arow : 1);
    mb = mb / k->mr * k->mr;
    if (mb < k->mr) mb = k->mr;
    if (mb > 16 * k->mr) mb = (a->kind == KIND_VNNI ? EI_MIN(mb, 64 * k->mr) : 16 * k->mr);
    int64_t rpad = (p->R + k->mr - 1) / k->mr * k->mr;
    if (mb > rpad) mb = rpad;
    /* AMX rows that fit one block, of a layer that pays for two slots (conv_ns): two blocks of
     * whole tiles, so that the slots split the rows (each stages only its own) and not the
     * channel panels (each staged every row and set up its tiles, no faster than one slot):
     * MobileNetV3's 14x14 40 -> 240 expansion 11.1 -> 8.2 us at 2 threads (loaded machine) */
    if (a->kind == KIND_AMX && a->threads >= 2 && p->R >= 128 && mb >= p->R && conv_ns(a, p) >= 2 * SLOT_NS)
        mb = ((p->R + 1) / 2 + 31) / 32 * 32;
    p->mb = (int)mb;
    p->nrb = (p->R + p->mb - 1) / p->mb;
    p->npan = (a->m + k->nr - 1) / k->nr;
    /* the channel blocks for the slots the run uses, not for every thread: a layer run on one
     * slot split in two blocks staged its rows and set up its tiles twice (AMX, 14x14: +2.5 us) */
    int t = (int)EI_MIN((int64_t)(a->threads < 1 ? 1 : a->threads), conv_slots(a, p));
    p->ncb = 1;
    if (p->nrb < t) p->ncb = EI_MIN(p->npan, (t + p->nrb - 1) / p->nrb);
    p->ntasks = p->nrb * p->ncb;
    p->off_rows = 0;
    p->off_apack = align64(p->direct ? 0 : (int64_t)k->mr * p->K);   /* one micro-panel's rows, packed at once */
    p->off_acc = p->off_apack + align64((int64_t)p->mb * arow);
    if (u8_rows(a->kind)) {         /* u8 rows, stride 4 kg; no packed A */
        p->off_apack = align64((int64_t)p->mb * p->kg * 4);
        p->off_acc = p->off_apack;
    }
    /* the int32 sums: a row block's (mb x nr) where the panels store them before the epilogue
     * (the scalar / AVX2 / NEON kernels, NCHW output); VNNI into NHWC requantizes in registers
     * and needs none, AMX one 32 x 32 tile store */
    int64_t acc = (int64_t)p->mb * k->nr * 4;
    if (u8_rows(a->kind) && !a->out_nchw) acc = a->kind == KIND_AMX ? 32 * 32 * 4 : 0;
    p->per_thread = p->off_acc + align64(acc) + 64;     /* + the im2col's 64-byte stores */
    p->kgr = (p->K + 3) / 4;
    p->k4 = (int64_t)p->kg * 4;
    p->sm = 0;
    p->sm_gather = 0;
    p->implicit = 0;
#if defined(__x86_64__)
    p->implicit = implicit_ok(a);
    if (has_consts(a) && (a->m == 1 || a->m == 2 || a->m == 4 || a->m == 8)) {
        int R = 16 / a->m;
        if (R * p->kg <= 32) p->sm = R;                                   /* keep the padded rows */
        else if (R * p->kgr <= 32) { p->sm = R; p->k4 = (int64_t)p->kgr * 4; }
        else if (p->kgr <= 16) { p->sm = R; p->sm_gather = 1; }
    }
    if (p->sm) p->implicit = 0;
#endif
}

/* bytes of ei_int8_conv_prepare's constants for these args (0: the kernel needs none) */
EI_API int64_t ei_int8_conv_consts_size(const ei_int8_conv_args *a) {
    if (!kind_ok(a->kind)) return -1;
#if defined(__x86_64__)
    if (has_consts(a)) {
        plan_t p;
        make_plan(a, &p);
        if (p.sm) return (int64_t)sizeof(sm_consts);
        int64_t npan = (a->m + KINDS[a->kind].nr - 1) / KINDS[a->kind].nr;
        return npan * (int64_t)sizeof(vq_panel) + (p.implicit ? npan * implicit_panel_bytes(a) : 0);
    }
#endif
    return 0;
}

/* out (64-byte aligned, ei_int8_conv_consts_size bytes): the constants, from the args'
 * bias, mult, shift, ztab, zp_y, lo, hi and packed weights; set a->consts = out afterwards */
EI_API void ei_int8_conv_prepare(const ei_int8_conv_args *a, void *out) {
#if defined(__x86_64__)
    if (kind_ok(a->kind) && has_consts(a)) {
        plan_t p;
        make_plan(a, &p);
        if (p.sm) sm_prepare(a, p.kgr, (sm_consts *)out);
        else consts_prepare(a, out);
        if (p.implicit) implicit_prepare(a, (char *)out + (int64_t)p.npan * sizeof(vq_panel));
    }
#else
    (void)a; (void)out;
#endif
}

static int conv_nslots(const ei_int8_conv_args *a, const plan_t *p);

/* the scratch of every thread slot the conv runs on (conv_nslots: a conv too small to split
 * runs on one), each slot's per_thread bytes */
EI_API int64_t ei_int8_conv_scratch(const ei_int8_conv_args *a) {
    if (!kind_ok(a->kind)) return -1;
    plan_t p;
    make_plan(a, &p);
    return (int64_t)conv_nslots(a, &p) * p.per_thread;
}

/* row r of A as a pointer into x (direct) or im2col'ed into buf */
static const int8_t *a_row(const ei_int8_conv_args *a, const plan_t *p, int64_t r, int8_t *buf) {
    if (p->direct && a->sh == 1 && a->sw == 1 && a->oh == a->h && a->ow == a->w)
        return a->x + r * a->c;                          /* the rows of x themselves */
    int64_t b = r / p->P;
    int pix = (int)(r - b * p->P), oy = pix / a->ow, ox = pix - oy * a->ow;   /* 32-bit divisions */
    if (p->direct)
        return a->x + (((b * a->h) + (int64_t)oy * a->sh) * a->w + (int64_t)ox * a->sw) * a->c;
    int8_t *d = buf;
    for (int ky = 0; ky < a->kh; ky++) {
        int iy = oy * a->sh - a->pt + ky * a->dh;
        for (int kx = 0; kx < a->kw; kx++, d += a->c) {
            int ix = ox * a->sw - a->pl + kx * a->dw;
            if (iy < 0 || iy >= a->h || ix < 0 || ix >= a->w) {
                if (a->c < 16) for (int ch = 0; ch < a->c; ch++) d[ch] = (int8_t)a->zp_x;
                else memset(d, a->zp_x, (size_t)a->c);
            } else if (!a->in_nchw) {
                const int8_t *s = a->x + ((b * a->h + iy) * a->w + ix) * a->c;
                if (a->c < 16) for (int ch = 0; ch < a->c; ch++) d[ch] = s[ch];    /* first layers: C = 1..4 */
                else memcpy(d, s, (size_t)a->c);
            } else {
                const int8_t *s = a->x + (b * a->c * a->h + iy) * a->w + ix;
                int64_t plane = (int64_t)a->h * a->w;
                for (int ch = 0; ch < a->c; ch++) d[ch] = s[ch * plane];
            }
        }
    }
    return buf;
}

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
static void amx_config(void) { _tile_loadconfig(&AMX_CFG); }

__attribute__((target("amx-tile")))
static void amx_release(void) { _tile_release(); }

/* the int32 products of a tile's rows 0..15 (and 16..31 if two_r) by channels 0..15 (and
 * 16..31 if two_c) of a panel b into cbuf (row stride 32), corrections not included; at: the
 * tile's u8 rows, stride lda, allocated for 32 rows */
__attribute__((target("amx-tile,amx-int8")))
static void amx_tile(const uint8_t *at, int64_t lda, const int8_t *b, int kg, int two_r, int two_c, int32_t *cbuf) {
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

static int store_pairs(const vq_panel *v, const int32_t *c, int64_t ldc, int nrow, int8_t *y, int64_t ys);

/* one panel (32 channels from ch0) of rows r0 .. r0 + nrows - 1: u8 rows ub (stride lda,
 * kg * 4 bytes each, allocated for whole 32-row tiles), requantized through cbuf (32 x 32 int32) */

__attribute__((target("avx512f,avx512bw,avx512vnni,amx-tile,amx-int8")))
static void amx_panel(const ei_int8_conv_args *a, const vq_panel *v, const uint8_t *ub, int64_t lda, const void *bp,
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
                    mk_vnni_rq1(rows[r], bp, kg, v, y + r * a->m, z ? z + r * a->m : NULL);
            } else {
                mk_vnni_rq(rows, bp, kg, v, nrow, y, a->m, z);
            }
            continue;
        }
        amx_tile(at, lda, b, kg, nrow > 16, v->m[1] != 0, cbuf);
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
#endif

#if defined(__x86_64__)
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

__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void implicit_prepare(const ei_int8_conv_args *a, char *out) {
    const int span = a->kw * a->c, nq = (span + 63) / 64, npan = (a->m + 31) / 32;
    const int K = a->kh * span;
    const int64_t pb = panel_bytes(a->kind, K), ipb = implicit_panel_bytes(a);
    static const int32_t zero[32];
    for (int j = 0; j < npan; j++) {
        char *o = out + j * ipb;
        vq_prepare((vq_panel *)o, a, zero, 32 * j, EI_MIN(32, a->m - 32 * j));
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
static void implicit_rows(const ei_int8_conv_args *a, const plan_t *p, int j0, int j1, int64_t b, int oy, int ox0,
                          int n, int32_t *cbuf) {
    const int C = a->c, span = a->kw * C, nq = (span + 63) / 64;
    const int ixa = a->pl, ixb = EI_MIN(a->ow, a->w - a->kw + a->pl + 1);
    const int64_t ipb = implicit_panel_bytes(a);
    const char *base = (const char *)a->consts + (int64_t)p->npan * sizeof(vq_panel);
    amx_config();
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
    amx_release();
}
#endif

/* rows r0 .. r0 + nrows - 1 of a 1x1, stride-1, unpadded conv on an NCHW input (ConvTranspose's
 * phases in NCHW graphs) as u8 rows: row r's channel c is x[b][c][pixel], read along the
 * plane, four channels at a time written as one 32-bit word (the per-row gather it replaces
 * read one byte per plane per row) */
static void nchw_rows_u8(const ei_int8_conv_args *a, const plan_t *p, int64_t r0, int nrows, uint8_t *ub, int64_t k4) {
    int C = a->c;
    for (int i = 0; i < nrows;) {
        int64_t b = (r0 + i) / p->P, pix = r0 + i - b * p->P;
        int len = (int)EI_MIN((int64_t)(nrows - i), p->P - pix);
        const uint8_t *x0 = (const uint8_t *)a->x + b * (int64_t)C * p->P + pix;
        uint8_t *d0 = ub + (int64_t)i * k4;
        int c = 0;
        for (; c + 4 <= C; c += 4) {
            const uint8_t *s0 = x0 + (int64_t)c * p->P, *s1 = s0 + p->P, *s2 = s1 + p->P, *s3 = s2 + p->P;
            for (int j = 0; j < len; j++) {
                uint32_t v = ((uint32_t)s0[j] | (uint32_t)s1[j] << 8 | (uint32_t)s2[j] << 16 | (uint32_t)s3[j] << 24) ^ 0x80808080u;
                memcpy(d0 + (int64_t)j * k4 + c, &v, 4);
            }
        }
        for (; c < C; c++) {
            const uint8_t *s0 = x0 + (int64_t)c * p->P;
            for (int j = 0; j < len; j++) d0[(int64_t)j * k4 + c] = (uint8_t)(s0[j] ^ 0x80);
        }
        if (k4 > C)
            for (int j = 0; j < len; j++) memset(d0 + (int64_t)j * k4 + C, 0, (size_t)(k4 - C));
        i += len;
    }
}

#if defined(__x86_64__)
/* NCHW output of VNNI / AMX tiles (acc: nrows x 32 int32; corr: the panel's corrections when
 * acc does not include them (AMX), else NULL):
 * per channel, 16 consecutive pixels of one image read down the tile's column and requantized
 * with that channel's constants in every lane, stored as 16 contiguous bytes of its plane (the
 * per-row epilogue wrote one byte per plane per row) */
__attribute__((target("avx512f,avx512bw")))
static void nchw_store(const ei_int8_conv_args *a, const plan_t *p, const int32_t *acc, int64_t r0, int nrows,
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

typedef struct { const ei_int8_conv_args *a; plan_t p; mk_fn mk; int simd; int nslots; } conv_ctx;

/* rows r0 .. r0 + nrows - 1 (at most one row block) on the panels of channel block cb */
#if defined(__x86_64__)
/* vrows[i] = ub + i * k4 for the rows, then row 0 up to whole blocks of 32 rows (mk_vnni_rq8x2;
 * 16 in mk_vnni_rq16), eight pointers a store: one pointer a store had cost ~14% of a 12x48
 * 8 -> 24 conv's time (perf, 576 rows a block) */
__attribute__((target("avx512f")))
static void fill_rows(const uint8_t **vrows, const uint8_t *ub, int64_t k4, int nrows) {
    int64_t first[8];
    for (int j = 0; j < 8; j++) first[j] = (int64_t)(uintptr_t)(ub + j * k4);
    __m512i p = _mm512_loadu_si512(first);
    const __m512i step = _mm512_set1_epi64(8 * k4);
    int i = 0;
    for (; i + 8 <= nrows; i += 8, p = _mm512_add_epi64(p, step)) _mm512_storeu_si512((void *)(vrows + i), p);
    for (; i < nrows; i++) vrows[i] = ub + i * k4;
    for (const int end = (nrows + 31) / 32 * 32; i < end; i++) vrows[i] = ub;
}
#endif

static void run_block(const conv_ctx *cx, int cb, int64_t r0, int nrows, char *scratch) {
    const ei_int8_conv_args *a = cx->a;
    const plan_t *p = &cx->p;
    const kind_t *k = &p->k;
    int8_t *rowbuf = (int8_t *)(scratch + p->off_rows);
    char *apack = scratch + p->off_apack;
    int32_t *acc = (int32_t *)(scratch + p->off_acc);
    int64_t mp_bytes = (int64_t)p->kg * k->mr * k->kr * k->es;
    int nmp = (nrows + k->mr - 1) / k->mr;
    const int8_t *rows[16];
    const uint8_t *vrows[64 * 8];
    int vnni = u8_rows(a->kind);
    if (vnni) {
#if defined(__x86_64__)
        int64_t k4 = p->k4;
        uint8_t *ub = (uint8_t *)rowbuf;
        if (p->direct && k4 == p->K && a->sh == 1 && a->sw == 1 && a->oh == a->h && a->ow == a->w) {
            ei_xor80(ub, a->x + r0 * p->K, (int64_t)nrows * p->K);          /* contiguous rows */
        } else if (!a->in_nchw) {
            ei_im2col_u8_nhwc(a, p->P, p->K, r0, nrows, ub, k4);
        } else if (p->direct_nchw) {
            nchw_rows_u8(a, p, r0, nrows, ub, k4);
        } else {
            for (int i = 0; i < nrows; i++) {
                int8_t *buf = rowbuf + i * k4;
                ei_xor80(ub + i * k4, a_row(a, p, r0 + i, buf), p->K);
                if (k4 > p->K) memset(buf + p->K, 0, (size_t)(k4 - p->K));
            }
        }
        if (p->sm && a->consts) {
            sm_rows(a, (const sm_consts *)a->consts, p->sm, ub, (int)(k4 / 4), p->kgr, r0, nrows, p->sm_gather);
            return;
        }
        fill_rows(vrows, ub, k4, nrows);
#endif
    } else {
        for (int mp = 0; mp < nmp; mp++) {
            for (int r = 0; r < k->mr; r++) {
                int i = mp * k->mr + r;
                rows[r] = i < nrows ? a_row(a, p, r0 + i, rowbuf + (int64_t)r * p->K) : NULL;   /* packed next */
            }
            pack_a(k, rows, p->K, apack + mp * mp_bytes);
        }
    }
    ei_rq rq = { a->bias, a->mult, a->shift, a->ztab, a->zp_y, a->lo, a->hi };
    int j0 = (int)((int64_t)p->npan * cb / p->ncb), j1 = (int)((int64_t)p->npan * (cb + 1) / p->ncb);
    int64_t pb = panel_bytes(a->kind, p->K);
    const int32_t *corr = (const int32_t *)((const char *)a->wpack + p->npan * pb);     /* VNNI only */
    (void)corr; (void)vrows;                 /* unused where there is no VNNI (aarch64) */
#if defined(__x86_64__)
    /* tiles: NCHW output, or a tile of more than 8 rows (amx_panel gives smaller ones to VNNI);
     * the implicit path's border pixels come one or two at a time */
    const int tiles = a->kind == KIND_AMX && (a->out_nchw || nrows > 8);
    if (tiles) amx_config();
#endif
    for (int j = j0; j < j1; j++) {
        const char *bp = (const char *)a->wpack + j * pb;
        int ch0 = j * k->nr, nch = EI_MIN(k->nr, a->m - ch0);
#if defined(__x86_64__)
        if (vnni && !a->out_nchw) {
            vq_panel vl;
            const vq_panel *vp = a->consts ? (const vq_panel *)a->consts + j : &vl;
            if (!a->consts) vq_prepare(&vl, a, corr + ch0, ch0, nch);
            if (a->kind == KIND_AMX) {
                amx_panel(a, vp, (const uint8_t *)rowbuf, (int64_t)p->kg * 4, bp, p->kg, r0, nrows, ch0, acc);
                continue;
            }
            /* a panel of <= 16 channels without a residual (the 8 x 32 tile adds one by its pairs'
             * byte planes), while more than 8 rows are left: <= 8 channels over K <= 16 two rows a
             * vector, 32 rows a call (over K = 32 its merged broadcasts cost what it saved: 16 -> 72
             * at 56x56 57 -> 54 us, 32 -> 72 66 -> 66-68), else 16 rows x 16 channels a tile */
            int i = 0;
            for (; nch <= 8 && p->kg <= 4 && !a->z && nrows - i > 8; i += 32)
                mk_vnni_rq8x2(vrows + i, bp, p->kg, vp, EI_MIN(32, nrows - i), a->y + (r0 + i) * a->m + ch0, a->m);
            for (; nch <= 16 && !a->z && nrows - i > 8; i += 16)
                mk_vnni_rq16(vrows + i, bp, p->kg, vp, EI_MIN(16, nrows - i), a->y + (r0 + i) * a->m + ch0, a->m);
            for (int mp = EI_MIN(i / 8, nmp); mp < nmp; mp++) {
                int64_t off = (r0 + mp * 8) * a->m + ch0;
                int nrow = EI_MIN(8, nrows - mp * 8);
                if (nrow <= 2) {        /* row by row is cheaper than a mostly empty tile */
                    for (int r = 0; r < nrow; r++)
                        mk_vnni_rq1(vrows[mp * 8 + r], bp, p->kg, vp, a->y + off + r * a->m,
                                    a->z ? a->z + off + r * a->m : NULL);
                    continue;
                }
                mk_vnni_rq(vrows + mp * 8, bp, p->kg, vp, nrow, a->y + off, a->m, a->z ? a->z + off : NULL);
            }
            continue;
        }
#endif
#if defined(__x86_64__)
        if (vnni && a->out_nchw) {  /* NCHW output: tiles into acc, then down its columns */
            if (a->kind == KIND_AMX) {
                for (int t = 0; t < nrows; t += 32)
                    amx_tile((const uint8_t *)rowbuf + (int64_t)t * p->kg * 4, (int64_t)p->kg * 4, (const int8_t *)bp,
                             p->kg, nrows - t > 16, nch > 16, acc + (int64_t)t * 32);
                nchw_store(a, p, acc, r0, nrows, ch0, nch, corr + ch0);
            } else {
                for (int mp = 0; mp < (nrows + 7) / 8; mp++)
                    mk_vnni(vrows + mp * 8, corr + ch0, bp, p->kg, acc + mp * 8 * k->nr, k->nr);
                nchw_store(a, p, acc, r0, nrows, ch0, nch, NULL);
            }
            continue;
        }
#endif
        for (int mp = 0; mp < nmp; mp++)
            cx->mk(apack + mp * mp_bytes, bp, p->kg, acc + mp * k->mr * k->nr, k->nr, NULL);
        for (int i = 0; i < nrows; i++) {
            int64_t r = r0 + i, off, ys;
            if (a->out_nchw) { int64_t b = r / p->P; off = (b * a->m + ch0) * p->P + r % p->P; ys = p->P; }
            else { off = r * a->m + ch0; ys = 1; }
            ei_rq_run(cx->simd, &rq, acc + i * k->nr, ch0, nch, a->y + off, ys, a->z ? a->z + off : NULL);
        }
    }
#if defined(__x86_64__)
    if (tiles) amx_release();
#endif
}

#if defined(__x86_64__)
/* a row block of an implicit conv: border pixels (rows and columns some tap falls outside)
 * by run_block, the interior ones by implicit_rows */
static void implicit_block(const conv_ctx *cx, int cb, int64_t r0, int nrows, char *scratch) {
    const ei_int8_conv_args *a = cx->a;
    const plan_t *p = &cx->p;
    const int ixa = a->pl, ixb = EI_MIN(a->ow, a->w - a->kw + a->pl + 1);
    const int iya = a->pt, iyb = EI_MIN(a->oh, a->h - a->kh + a->pt + 1);
    const int j0 = (int)((int64_t)p->npan * cb / p->ncb), j1 = (int)((int64_t)p->npan * (cb + 1) / p->ncb);
    int32_t *cbuf = (int32_t *)(scratch + p->off_acc);
    for (int64_t r = r0, end = r0 + nrows; r < end;) {
        int64_t b = r / p->P;
        int pix = (int)(r - b * p->P), oy = pix / a->ow, ox = pix - oy * a->ow;
        int len = (int)EI_MIN(end - r, (int64_t)(a->ow - ox));
        if (oy < iya || oy >= iyb) { run_block(cx, cb, r, len, scratch); r += len; continue; }
        if (ox < ixa) {
            int k = EI_MIN(len, ixa - ox);
            run_block(cx, cb, r, k, scratch);
            r += k; ox += k; len -= k;
        }
        if (len > 0 && ox < ixb) {
            int k = EI_MIN(len, ixb - ox);
            implicit_rows(a, p, j0, j1, b, oy, ox, k, cbuf);
            r += k; len -= k;
        }
        if (len > 0) { run_block(cx, cb, r, len, scratch); r += len; }
    }
}
#endif

/* the fused activation table (a->lut) over the outputs one task stored (rows r0 .. r0 + nrows - 1,
 * the channels of block cb), while they are in cache: after every epilogue kind (VNNI, AMX,
 * implicit, narrow, AVX2, NEON, scalar) and after the residual, so y = lut[(uint8_t)clamped q] */
static void lut_task(const ei_int8_conv_args *a, const plan_t *p, int cb, int64_t r0, int nrows) {
    int j0 = (int)((int64_t)p->npan * cb / p->ncb), j1 = (int)((int64_t)p->npan * (cb + 1) / p->ncb);
    int c0 = p->ncb == 1 ? 0 : j0 * p->k.nr, c1 = p->ncb == 1 ? a->m : EI_MIN(a->m, j1 * p->k.nr);
    if (c1 <= c0) return;
    if (!a->out_nchw) {
        if (c0 == 0 && c1 == a->m) ei_lut_inplace(a->lut, a->y + r0 * a->m, (int64_t)nrows * a->m, 1, 0);
        else ei_lut_inplace(a->lut, a->y + r0 * a->m + c0, c1 - c0, nrows, a->m);
        return;
    }
    for (int64_t r = r0, end = r0 + nrows; r < end;) {      /* NCHW: per image, the channels' plane runs */
        int64_t b = r / p->P, pix = r - b * p->P, len = EI_MIN(end - r, p->P - pix);
        ei_lut_inplace(a->lut, a->y + (b * a->m + c0) * p->P + pix, len, c1 - c0, p->P);
        r += len;
    }
}

static void run_task(const conv_ctx *cx, int t, char *scratch) {
    const plan_t *p = &cx->p;
    int rb = t / p->ncb, cb = t % p->ncb;
    int64_t r0 = (int64_t)rb * p->mb;
    int nrows = (int)EI_MIN((int64_t)p->mb, p->R - r0);
#if defined(__x86_64__)
    if (p->implicit && cx->a->consts) implicit_block(cx, cb, r0, nrows, scratch);
    else
#endif
    run_block(cx, cb, r0, nrows, scratch);
    if (cx->a->lut) lut_task(cx->a, p, cb, r0, nrows);
}

/* tasks [t0, t1), handed out by the pool in chunks (a descheduled thread's are taken by the
 * others); scratch: the running thread slot's */
static void conv_tasks(void *vctx, int64_t t0, int64_t t1) {
    const conv_ctx *cx = (const conv_ctx *)vctx;
    char *scratch = (char *)cx->a->scratch + (int64_t)ei_pool_slot() * cx->p.per_thread;
    for (int64_t t = t0; t < t1; t++) run_task(cx, (int)t, scratch);
}

EI_API const char *ei_int8_conv_path(const ei_int8_conv_args *a) {
    if (!kind_ok(a->kind) || !a->consts) return NULL;
    plan_t p;
    make_plan(a, &p);
    if (p.sm) return p.sm_gather ? "narrow: 16 / M rows a vector, gathered" : "narrow: 16 / M rows a vector, vpermt2d";
    if (p.implicit) return "implicit: interior pixels read in place by tdpbssd";
    return NULL;
}

/* How many thread slots the layer's work pays for: its estimated time over SLOT_NS, the least
 * share that beats a worker's hand-out and join (a 6 us pointwise conv ran 6.1 us on one thread,
 * 7.9 on two: MobileNetV3). The estimate, fitted on MobileNetV3-small's int8 layers at one
 * thread (1x1 convs, 3x3 im2col, the classifier; within ~30%): the multiply-adds at the kind's
 * rate, the requantization per output (most of a pointwise layer's time; with a residual
 * ~2.3x more: its add runs in the VBMI epilogue now, 0.3-0.6 ns an output measured on the
 * 14x14 and 7x7 projections, where 1.6 had given them 2-4 slots for a 5-8 us layer), and the
 * weights streamed once (a batch-1 fully-connected layer reads 0.6-1 MB of them: 23-40 us,
 * bound by memory, which two cores' loads share). An AMX layer also pays ~2.5 us of tile setup
 * and row staging on every slot it runs on, which a split does not divide: left out. */
static double conv_ns(const ei_int8_conv_args *a, const plan_t *p) {
    static const double mac_per_ns[N_KINDS] = { 2, 60, 15, 40, 150, 1500 };   /* by kind */
    double outs = (double)p->R * a->m;
    double rate = a->kind >= 0 && a->kind < N_KINDS ? mac_per_ns[a->kind] : 2;
    return (double)p->R * a->m * p->K / rate + outs * (a->z ? 0.45 : 0.2)
           + (a->weights_cached ? 0.0 : (double)a->m * p->K * 0.04);
}

static int64_t conv_slots(const ei_int8_conv_args *a, const plan_t *p) {
    double ns = conv_ns(a, p);
    /* AMX with every row in one block: a split divides the channels, and each slot stages all
     * the rows and sets up its tiles again (~2.5 us). MobileNetV3's 14x14 and 7x7 expansions
     * (AMX, 10-16 us at one thread) ran no faster on two at the best of 40 runs (VNNI layers of
     * that size: 1.3x; AMX row splits: 1.25x), so such a slot has to pay for three. */
    double per = a->kind == KIND_AMX && p->nrb < 2 ? 3.0 * SLOT_NS : SLOT_NS;
    int64_t slots = (int64_t)(ns / per);
    return slots > 1 ? slots : 1;
}

/* the thread slots a run uses (the pool hands chunks to slots 0 .. nslots - 1 at most) */
static int conv_nslots(const ei_int8_conv_args *a, const plan_t *p) {
    int t = a->threads < 1 ? 1 : a->threads;
    if (p->R <= 0) return 1;
    return (int)EI_MIN(EI_MIN((int64_t)t, (int64_t)p->ntasks), conv_slots(a, p));
}

EI_API void ei_int8_conv(const ei_int8_conv_args *a) {
    EI_CHECK(a->n >= 0 && a->c >= 1 && a->h >= 0 && a->w >= 0 && a->m >= 1 && a->oh >= 0 && a->ow >= 0);
    EI_CHECK(a->kh >= 1 && a->kw >= 1 && a->sh >= 1 && a->sw >= 1 && a->dh >= 1 && a->dw >= 1);
    EI_CHECK(a->pt >= 0 && a->pl >= 0);
    EI_CHECK(a->zp_x >= -128 && a->zp_x <= 127 && a->zp_y >= -128 && a->zp_y <= 127);
    EI_CHECK(a->lo >= -128 && a->lo <= a->hi && a->hi <= 127);
    EI_CHECK(a->x != NULL && a->y != NULL && a->wpack != NULL && a->bias != NULL && a->mult != NULL
             && a->shift != NULL);
    conv_ctx cx;
    cx.a = a;
    make_plan(a, &cx.p);
    if (cx.p.R <= 0 || a->m <= 0) return;
    if (cx.p.sm && !a->consts) { cx.p.sm = 0; cx.p.k4 = (int64_t)cx.p.kg * 4; }    /* the panel kernels' rows */
    cx.mk = kernel_of(a->kind);
    cx.simd = ei_rq_simd();
    cx.nslots = conv_nslots(a, &cx.p);
    ei_parallel_for(cx.p.ntasks, 1, conv_tasks, &cx, cx.nslots);
}
