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
 *   AVX-512    MR 8, NR 32, KR 4, int8    VNNI vpdpbusd (x + 128) x w, requantized in registers (int8_gemm_vnni.c)
 *   AMX        MR 32, NR 32, KR 4, int8   tdpbusd on 2 x 2 tiles of 16 x 16; the VNNI layout with K
 *                                         padded to whole tiles (16 groups of 4), A's u8 rows read
 *                                         as tiles in place; rows <= 8 of a tile go to the VNNI kernel
 * The kind is chosen at prepare (ei_int8_gemm_kind) and recorded in the args, so the packed
 * weights and the micro-kernel always agree. Work is split over (row block, channel range)
 * tasks on the thread pool; each thread slot has its own scratch.
 *
 * This file: the kinds, the packing, the portable micro-kernels (scalar, AVX2, NEON), the plan
 * and the driver (row staging, thread tasks, entry points). The AVX-512 VNNI micro-kernels and
 * their fused epilogue are in int8_gemm_vnni.c, the AMX tiles and the implicit convolution in
 * int8_gemm_amx.c; the declarations they share in int8_gemm_internal.h.
 */
#include "int8_gemm_internal.h"
#include "ei_lut.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif


/* AVX-512 VNNI (vpdpbusd: u8 x s8, four products summed into int32, no saturation) multiplies
 * A's rows as u8 = x + 128 (x ^ 0x80, copied so into per-thread scratch, K padded to a multiple
 * of 4 with zeros) by the int8 weights; the extra 128 * sum_k w[m, k] is a per-channel constant,
 * stored after the packed panels and taken off the accumulators' start. The int32 sums wrap
 * modulo 2^32 at worst and end exactly on the true accumulator (it fits in int32). */
#if defined(__x86_64__)
int ei_gemm_has_vnni(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"); }
    return v && ei_has(EI_AVX512);
}

int ei_gemm_has_amx(void) { return ei_gemm_has_vnni() && ei_has(EI_AMX); }
#endif


EI_API int ei_int8_gemm_kind(void) {
#if defined(__x86_64__)
    if (ei_gemm_has_amx()) return KIND_AMX;
    if (ei_gemm_has_vnni()) return KIND_VNNI;
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
    if (kind == KIND_VNNI) return ei_gemm_has_vnni();
    if (kind == KIND_AMX) return ei_gemm_has_amx();
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

int64_t ei_gemm_panel_bytes(int kind, int K) {
    const kind_t *k = &KINDS[kind];
    return (int64_t)kgroups(kind, K) * k->nr * k->kr * k->es;
}

static int u8_rows(int kind) { return kind == KIND_VNNI || kind == KIND_AMX; }

EI_API int64_t ei_int8_pack_size(int kind, int M, int K) {
    if (!kind_ok(kind)) return -1;
    const kind_t *k = &KINDS[kind];
    int64_t np = (M + k->nr - 1) / k->nr;
    return np * ei_gemm_panel_bytes(kind, K) + (u8_rows(kind) ? np * k->nr * 4 : 0);
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

/* ---- plan: blocking and per-thread scratch ---- */

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
    p->implicit = ei_gemm_implicit_ok(a);
    if (ei_gemm_has_consts(a) && (a->m == 1 || a->m == 2 || a->m == 4 || a->m == 8)) {
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
    if (ei_gemm_has_consts(a)) {
        plan_t p;
        make_plan(a, &p);
        if (p.sm) return (int64_t)sizeof(sm_consts);
        int64_t npan = (a->m + KINDS[a->kind].nr - 1) / KINDS[a->kind].nr;
        return npan * (int64_t)sizeof(vq_panel) + (p.implicit ? npan * ei_gemm_implicit_panel_bytes(a) : 0);
    }
#endif
    return 0;
}

/* out (64-byte aligned, ei_int8_conv_consts_size bytes): the constants, from the args'
 * bias, mult, shift, ztab, zp_y, lo, hi and packed weights; set a->consts = out afterwards */
EI_API void ei_int8_conv_prepare(const ei_int8_conv_args *a, void *out) {
#if defined(__x86_64__)
    if (kind_ok(a->kind) && ei_gemm_has_consts(a)) {
        plan_t p;
        make_plan(a, &p);
        if (p.sm) ei_gemm_sm_prepare(a, p.kgr, (sm_consts *)out);
        else ei_gemm_consts_prepare(a, out);
        if (p.implicit) ei_gemm_implicit_prepare(a, (char *)out + (int64_t)p.npan * sizeof(vq_panel));
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

typedef struct { const ei_int8_conv_args *a; plan_t p; mk_fn mk; int simd; int nslots; } conv_ctx;

/* rows r0 .. r0 + nrows - 1 (at most one row block) on the panels of channel block cb */
#if defined(__x86_64__)
/* vrows[i] = ub + i * k4 for the rows, then row 0 up to whole blocks of 32 rows (ei_gemm_mk_vnni_rq8x2;
 * 16 in ei_gemm_mk_vnni_rq16), eight pointers a store: one pointer a store had cost ~14% of a 12x48
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
            ei_gemm_sm_rows(a, (const sm_consts *)a->consts, p->sm, ub, (int)(k4 / 4), p->kgr, r0, nrows, p->sm_gather);
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
    int64_t pb = ei_gemm_panel_bytes(a->kind, p->K);
    const int32_t *corr = (const int32_t *)((const char *)a->wpack + p->npan * pb);     /* VNNI only */
    (void)corr; (void)vrows;                 /* unused where there is no VNNI (aarch64) */
#if defined(__x86_64__)
    /* tiles: NCHW output, or a tile of more than 8 rows (ei_gemm_amx_panel gives smaller ones to VNNI);
     * the implicit path's border pixels come one or two at a time */
    const int tiles = a->kind == KIND_AMX && (a->out_nchw || nrows > 8);
    if (tiles) ei_gemm_amx_config();
#endif
    for (int j = j0; j < j1; j++) {
        const char *bp = (const char *)a->wpack + j * pb;
        int ch0 = j * k->nr, nch = EI_MIN(k->nr, a->m - ch0);
#if defined(__x86_64__)
        if (vnni && !a->out_nchw) {
            vq_panel vl;
            const vq_panel *vp = a->consts ? (const vq_panel *)a->consts + j : &vl;
            if (!a->consts) ei_gemm_vq_prepare(&vl, a, corr + ch0, ch0, nch);
            if (a->kind == KIND_AMX) {
                ei_gemm_amx_panel(a, vp, (const uint8_t *)rowbuf, (int64_t)p->kg * 4, bp, p->kg, r0, nrows, ch0, acc);
                continue;
            }
            /* a panel of <= 16 channels without a residual (the 8 x 32 tile adds one by its pairs'
             * byte planes), while more than 8 rows are left: <= 8 channels over K <= 16 two rows a
             * vector, 32 rows a call (over K = 32 its merged broadcasts cost what it saved: 16 -> 72
             * at 56x56 57 -> 54 us, 32 -> 72 66 -> 66-68), else 16 rows x 16 channels a tile */
            int i = 0;
            for (; nch <= 8 && p->kg <= 4 && !a->z && nrows - i > 8; i += 32)
                ei_gemm_mk_vnni_rq8x2(vrows + i, bp, p->kg, vp, EI_MIN(32, nrows - i), a->y + (r0 + i) * a->m + ch0,
                                      a->m);
            for (; nch <= 16 && !a->z && nrows - i > 8; i += 16)
                ei_gemm_mk_vnni_rq16(vrows + i, bp, p->kg, vp, EI_MIN(16, nrows - i), a->y + (r0 + i) * a->m + ch0,
                                     a->m);
            for (int mp = EI_MIN(i / 8, nmp); mp < nmp; mp++) {
                int64_t off = (r0 + mp * 8) * a->m + ch0;
                int nrow = EI_MIN(8, nrows - mp * 8);
                if (nrow <= 2) {        /* row by row is cheaper than a mostly empty tile */
                    for (int r = 0; r < nrow; r++)
                        ei_gemm_mk_vnni_rq1(vrows[mp * 8 + r], bp, p->kg, vp, a->y + off + r * a->m,
                                            a->z ? a->z + off + r * a->m : NULL);
                    continue;
                }
                ei_gemm_mk_vnni_rq(vrows + mp * 8, bp, p->kg, vp, nrow, a->y + off, a->m, a->z ? a->z + off : NULL);
            }
            continue;
        }
#endif
#if defined(__x86_64__)
        if (vnni && a->out_nchw) {  /* NCHW output: tiles into acc, then down its columns */
            if (a->kind == KIND_AMX) {
                for (int t = 0; t < nrows; t += 32)
                    ei_gemm_amx_tile((const uint8_t *)rowbuf + (int64_t)t * p->kg * 4, (int64_t)p->kg * 4,
                                     (const int8_t *)bp, p->kg, nrows - t > 16, nch > 16, acc + (int64_t)t * 32);
                ei_gemm_nchw_store(a, p, acc, r0, nrows, ch0, nch, corr + ch0);
            } else {
                for (int mp = 0; mp < (nrows + 7) / 8; mp++)
                    ei_gemm_mk_vnni(vrows + mp * 8, corr + ch0, bp, p->kg, acc + mp * 8 * k->nr, k->nr);
                ei_gemm_nchw_store(a, p, acc, r0, nrows, ch0, nch, NULL);
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
    if (tiles) ei_gemm_amx_release();
#endif
}

#if defined(__x86_64__)
/* a row block of an implicit conv: border pixels (rows and columns some tap falls outside)
 * by run_block, the interior ones by ei_gemm_implicit_rows */
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
            ei_gemm_implicit_rows(a, p, j0, j1, b, oy, ox, k, cbuf);
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
