/* Depthwise convolution, int8 NHWC on quads of kernel columns with AVX-512 VNNI + VBMI: the
 * kernels depthwise.c's dispatch picks for those args (DWQ_OK), their constants (ei_dw_prepare)
 * and the builds of their quad rows. */
#include "ei_int8.h"
#include "depthwise.h"

#include <string.h>

/* ---- int8 NHWC depthwise with vpdpbusd on quads of kernel columns (AVX-512 VNNI + VBMI) ----
 *
 * vpdpbusd sums four u8 x s8 products per int32 lane: lane c gets taps (kx, kx+1, kx+2, kx+3)
 * of one kernel row for channel c when the four input bytes x + 128 of those taps sit in the
 * lane. Such a "quad" of 16 channels is four 16-byte loads and one vpermb (4 x 16 -> 16 x 4),
 * and depends only on the input row and the output column: it is built once per input row and
 * used by every output row whose window covers that row (kh / sh of them). Per output pixel
 * and 16 channels a 3x3 stride-1 layer then costs 3 vpdpbusd and one quad row's build where
 * the per-tap kernel (ei_dw8_rows_vnni) widened and multiplied nine taps; 5x5: 10 and one build
 * (two quads a row, the last three taps with zero weights) against 25. Measured (CPU time,
 * loaded machine, per-tap -> quads): 112x112x32 3x3 237 -> 198 us, 14x14x576 5x5 126 -> 103,
 * 56x56x72 5x5 stride 2 74 -> 60, 48x48x8 3x3 36 -> 22; 3x3 stride 2 146 -> 170 then (since
 * then faster: see pick). The requantization epilogue is now about 40% of the time (a cheap one
 * measured 237 -> 157 us on the first).
 * With VBMI2 most quads come from other quads by byte shifts instead (ei_dwq_build_of: a chain
 * across the row, or every 4 / sw-th quad from scratch and one vpshrdd for each between), and
 * layers whose window of quad rows is far bigger than L1 run in bands of output rows (dwq_band).
 * The u8 offset: sum_taps (x + 128) w = sum x w + 128 sum w; the second term comes off the
 * bias. Padding reads zp_x as everywhere. Exactly the integers of the per-tap kernels.
 *
 * Scratch after the vq16 constants: packed weights [kh][nq][group] (64 bytes: 16 channels x 4
 * taps, zero past kw), 16 corrections a group, and a ring of kh quad rows
 * [quad column j][group] (DWQ_COLS), slot iy mod kh (dilation 1: the kh rows of one window fall in distinct slots). */
/* (DWQ_OK in depthwise.h: the args these kernels compute) */
/* quad columns of one input row: quad j holds input columns j sw - pl .. j sw - pl + 3, and
 * output column ox reads quads ox + k 4 / sw (k < nq): a 5x5 layer's second quad of ox is the
 * first of ox + 4 / sw, built once (one quad per (output column, k) built 5x5 rows twice) */
#define DWQ_COLS(a) ((a)->ow + ((a)->kw + 3) / 4 * 4 / (a)->sw - 4 / (a)->sw)
/* 8 channels, kw <= 4 (one quad): a quad is 32 bytes, stored 32 apart, so that one 64-byte load
 * holds two neighbouring pixels' quads and one vector computes and requantizes both (16
 * contiguous outputs; the constants and weights are replicated in lanes 8..15). One pixel a
 * vector left half the lanes and one epilogue per 8 outputs idle: a detector's 320x320x8
 * layer ran 2x slower than the fp32 kernel. */
#define DWQ_PAIRS(a) ((a)->c == 8 && (a)->kw <= 4)

/* output rows a pass of ei_dwq_rows computes channel group by channel group (a band): where the
 * quad rows of one output row's window far exceed L1, each output row read them all from L2
 * (207 KB a row at 14x14x576 5x5); a band's quad rows of one group stay in L1 across its
 * output rows. Up to 512 KB of quad rows, 16 output rows. Measured (1 thread, min us, loaded
 * machine, one row a pass -> bands): 14x14x576 5x5 69.5 -> 62.9, 7x7x576 5x5 20.0 -> 18.9;
 * windows of 43-86 KB gained nothing (14x14x240 5x5 26.6 -> 26.5) or lost, since a band's
 * freshly built quad rows left L1 before their first use (112x112x32 3x3 97 -> 112, 112x112x96
 * 3x3 stride 2 108 -> 122 with bands above 32 KB). One thread only: at 2, each thread's run of 3-4
 * rows of a 7x7x576 layer measured 12.7-12.9 -> 13.2-13.4 us with bands. */
#define DWQ_MAX_BAND 16
static int dwq_band(const ei_dw_args *a) {
    const int64_t rowb = (int64_t)DWQ_COLS(a) * ((a->c + 15) / 16) * 64;
    if (DWQ_PAIRS(a) || a->kh * rowb <= 96 * 1024 || a->sh > 4 || a->threads > 1) return 1;
    return (int)EI_MAX(1, EI_MIN(EI_MIN(DWQ_MAX_BAND, a->oh), ((1 << 19) / rowb - a->kh) / a->sh + 1));
}
/* quad rows in the ring: a band's windows, every row in its own slot */
#define DWQ_SLOTS(a) ((dwq_band(a) - 1) * (a)->sh + (a)->kh)

int64_t ei_dwq_bytes(const ei_dw_args *a) {
#if defined(__x86_64__)
    if (!DWQ_OK(a)) return 0;
    int64_t ng = (a->c + 15) / 16, nq = (a->kw + 3) / 4;
    return (int64_t)a->kh * nq * ng * 64 + ng * 64 + ((int64_t)DWQ_SLOTS(a) * DWQ_COLS(a) + 1) * ng * 64 + 64;
#else
    (void)a;
    return 0;
#endif
}

#if defined(__x86_64__)
/* the constants of ei_dwq_rows: ng ei_vq16 (the bias less 128 sum w), then the packed weights,
 * then the corrections */
int64_t dwq_consts_bytes(const ei_dw_args *a) {
    int64_t ng = (a->c + 15) / 16, nq = (a->kw + 3) / 4;
    return ng * (int64_t)sizeof(ei_vq16) + (int64_t)a->kh * nq * ng * 64 + ng * 64;
}

__attribute__((target("avx512f,avx512bw")))
static void dwq_consts(const ei_dw_args *a, char *out) {
    const int C = a->c, ng = (C + 15) / 16, nq = (a->kw + 3) / 4, kh = a->kh, kw = a->kw;
    const int16_t *w = (const int16_t *)a->wt;
    ei_vq16 *vq = (ei_vq16 *)out;
    int8_t *wq = (int8_t *)(vq + ng);                                   /* [ky][q][g][16][4] */
    int32_t *corr = (int32_t *)(wq + (int64_t)kh * nq * ng * 64);       /* [g][16] */
    memset(wq, 0, (size_t)kh * nq * ng * 64);
    memset(corr, 0, (size_t)ng * 64);
    for (int ky = 0; ky < kh; ky++)
        for (int kx = 0; kx < kw; kx++) {
            const int16_t *wr = w + (int64_t)(ky * kw + kx) * C;
            int8_t *d = wq + ((int64_t)ky * nq + kx / 4) * ng * 64 + kx % 4;
            for (int c = 0; c < C; c++) {
                d[(int64_t)(c / 16) * 64 + 4 * (c % 16)] = (int8_t)wr[c];
                corr[c] -= 128 * wr[c];
            }
        }
    if (DWQ_PAIRS(a)) {         /* lanes 8..15: channels 0..7 again (the next pixel's) */
        int32_t b[16], cr[16], q[16], sh[16];
        for (int l = 0; l < 16; l++) {
            b[l] = ((const int32_t *)a->bias)[l % 8]; cr[l] = corr[l % 8];
            q[l] = a->mult[l % 8]; sh[l] = a->shift[l % 8];
        }
        for (int ky = 0; ky < kh; ky++) memcpy(wq + (int64_t)ky * 64 + 32, wq + (int64_t)ky * 64, 32);
        ei_vq16_prepare(&vq[0], b, cr, q, sh, 16);
        return;
    }
    for (int g = 0; g < ng; g++)
        ei_vq16_prepare(&vq[g], (const int32_t *)a->bias + 16 * g, corr + 16 * g, a->mult + 16 * g,
                        a->shift + 16 * g, EI_MIN(16, C - 16 * g));
}
#endif

/* bytes of ei_dw_prepare's constants for these args (0: the kernel makes none) */
EI_API int64_t ei_dw_consts_size(const ei_dw_args *a) {
#if defined(__x86_64__)
    if (DWQ_OK(a) && ei_dw_has_vbmi()) return dwq_consts_bytes(a) + dws_consts_bytes(a);
#endif
    (void)a;
    return 0;
}

/* out (64-byte aligned, ei_dw_consts_size bytes): the constants, from the args' weights, bias,
 * mult and shift; set a->consts = out afterwards (without them the kernel makes them per call) */
EI_API void ei_dw_prepare(const ei_dw_args *a, void *out) {
#if defined(__x86_64__)
    if (ei_dw_consts_size(a) > 0) dwq_consts(a, (char *)out);
    if (ei_dw_consts_size(a) > 0 && dws_fits(a)) dws_prepare(a, (char *)out + dwq_consts_bytes(a));
#else
    (void)a; (void)out;
#endif
}

#if defined(__x86_64__)
/* two or three vectors of the same 16 channels (P of them), no residual: as ei_vq_store4 */
__attribute__((target("avx512f,avx512bw"))) static inline __attribute__((always_inline))
void dwq_store_n(const ei_vqc *c, const ei_vq16 *k, __mmask16 m, __m512i a0, __m512i a1, __m512i a2, int P,
                 int8_t *y, ptrdiff_t ys) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i p = ei_vq_pack4(c, ei_vq_mbqm(a0, k, c->left), ei_vq_mbqm(a1, k, c->left),
                            P > 2 ? ei_vq_mbqm(a2, k, c->left) : zero, zero);
    __m128i q[3] = { _mm512_castsi512_si128(p), _mm512_extracti32x4_epi32(p, 1), _mm512_extracti32x4_epi32(p, 2) };
    for (int i = 0; i < P; i++) {
        if (m == 0xFFFF) _mm_storeu_si128((__m128i *)(y + i * ys), q[i]);
        else _mm512_mask_storeu_epi8(y + i * ys, (__mmask64)m, _mm512_castsi128_si512(q[i]));
    }
}

/* the accumulators of P <= 4 output columns (quads at off, off + qb, ..) of one group; the
 * weights from wv (hoist) or wg */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline __attribute__((always_inline))
void dwq_acc(__m512i *acc, __m512i bias, const __m512i *wv, int hoist, const int8_t *wg, const uint8_t *const *slot,
             int64_t off, int64_t qb, int qstep, int ng, const int kh, const int nq, const int P) {
    acc[0] = acc[1] = acc[2] = acc[3] = bias;
    for (int ky = 0; ky < kh; ky++)
        for (int k = 0; k < nq; k++) {
            __m512i w = hoist ? wv[ky * nq + k] : _mm512_loadu_si512(wg + ((int64_t)ky * nq + k) * ng * 64);
            const uint8_t *qp = slot[ky] + off + (int64_t)k * qstep * qb;
            for (int j = 0; j < P; j++) acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_load_si512(qp + j * qb), w);
        }
}

/* one output row of one channel group g, four columns at a time. The weights and epilogue
 * constants are copied to locals first: the int8 stores may alias anything, so read through
 * pointers they were loaded again for every four columns */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline __attribute__((always_inline))
void dwq_group_row(const ei_dw_args *a, const ei_vqc *vcp, const ei_vq16 *kp, const int8_t *wq,
                   const uint8_t *const *slot, int64_t opix0, int g, __mmask16 m, int64_t qb, int qstep, int ng,
                   const int kh, const int nq) {
    const ei_vqc vc = *vcp;
    const ei_vq16 k = *kp;
    const int C = a->c, nt = kh * nq, hoist = nt <= 16;
    const int8_t *wg = wq + 64 * g;
    __m512i wv[16];
    if (hoist)
        for (int i = 0; i < nt; i++) wv[i] = _mm512_loadu_si512(wg + (int64_t)i * ng * 64);
    const uint8_t *sl[DW8_MAX_TAPS];
    for (int ky = 0; ky < kh; ky++) sl[ky] = slot[ky];
    const int ow = a->ow;
    int8_t *const y0 = (int8_t *)a->y + opix0 * C + 16 * g;
    const int8_t *const z0 = a->z ? (const int8_t *)a->z + opix0 * C + 16 * g : NULL;
    for (int ox = 0; ox < ow; ox += 4) {
        const int P = EI_MIN(4, ow - ox);
        int8_t *y = y0 + (int64_t)ox * C;
        const int8_t *z = z0 ? z0 + (int64_t)ox * C : NULL;
        const int64_t off = (int64_t)ox * qb + 64 * g;
        __m512i acc[4];
        if (P == 4) dwq_acc(acc, k.bias, wv, hoist, wg, sl, off, qb, qstep, ng, kh, nq, 4);
        else dwq_acc(acc, k.bias, wv, hoist, wg, sl, off, qb, qstep, ng, kh, nq, P);
        if (P == 4 && !vc.ztab) {
            ei_vq_store4(&vc, &k, m, acc[0], acc[1], acc[2], acc[3], y, C);
            continue;
        }
        if (P > 1 && !vc.ztab) {        /* a row's last 2 or 3 columns (7 and 14 wide) */
            dwq_store_n(&vc, &k, m, acc[0], acc[1], acc[2], P, y, C);
            continue;
        }
        for (int j = 0; j < P; j++) ei_vq_store(&vc, &k, m, acc[j], y + (int64_t)j * C, z ? z + (int64_t)j * C : NULL);
    }
}

int ei_dw_has_vbmi2(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vbmi2"); }
    return v && ei_dw_has_vbmi();
}

/* the u8 bytes of input column ix, channels c.. (16, or the tail's under m) of a quad row:
 * the padding where ix falls outside the row (lim 0: a padding row) */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __attribute__((always_inline))
__m128i dwq_col(const int8_t *xrow, const int8_t *pad, int ix, unsigned lim, int C, int64_t c, __mmask16 m,
                const int masked) {
    const int8_t *p = (unsigned)ix < lim ? xrow + (int64_t)ix * C + c : pad + c;
    return masked ? _mm_maskz_loadu_epi8(m, p) : _mm_loadu_si128((const __m128i *)p);
}

/* one channel group's quads across a quad row (stride 1 or 2), each from the one before: lane c
 * of quad j holds bytes x[j sw - pl + t][c], t = 0..3, so quad j + 1 is quad j shifted right by
 * sw bytes with the sw new columns' bytes in on top: one vpshrdd of the quad and those bytes
 * (zero-extended, stride 1; two columns' bytes paired by a vpermb, stride 2). Three or four
 * ops a quad against four loads, three inserts, a vpermb and a xor for a quad from scratch.
 * Quads j0 .. j1 - 1 read only columns inside the row: one pointer, no checks. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2"))) static inline __attribute__((always_inline))
void dwq_shift_group(const ei_dw_args *a, const int8_t *xrow, const int8_t *pad, uint8_t *d, int nj, int j0, int j1,
                     int64_t qb, int64_t c, __mmask16 m, __m512i vpair, const int masked) {
    const int C = a->c, sw = a->sw;
    const unsigned lim = xrow ? (unsigned)a->w : 0;
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    __m512i v = _mm512_setzero_si512();
    /* quad j's new columns start at ix = j sw - pl + 4 - sw; the prologue (j = -1, and -2, -3
     * at stride 1) shifts in the first quad's other columns */
    /* macros, not functions: the second column's bytes p1 are loaded at stride 2 only (at stride
     * 1 they may lie past the input's end) */
#define DWQ_NEW(p0, p1) do {                                                                                 \
        if (sw == 1) v = _mm512_shrdi_epi32(v, _mm512_cvtepu8_epi32(p0), 8);                                  \
        else v = _mm512_shrdi_epi32(                                                                          \
            v, _mm512_permutexvar_epi8(vpair, _mm512_inserti32x4(_mm512_castsi128_si512(p0), (p1), 1)), 16);  \
    } while (0)
#define DWQ_CHECKED(j) do {                                                                                  \
        const int ix_ = (j) * sw - a->pl + 4 - sw;                                                            \
        DWQ_NEW(dwq_col(xrow, pad, ix_, lim, C, c, m, masked), dwq_col(xrow, pad, ix_ + 1, lim, C, c, m, masked)); \
    } while (0)
    for (int j = -4 / sw + 1; j < 0; j++) DWQ_CHECKED(j);
    int j = 0;
    for (; j < j0; j++) {
        DWQ_CHECKED(j);
        _mm512_store_si512(d + j * qb, _mm512_xor_si512(v, k80));
    }
    const int8_t *p = j < j1 ? xrow + ((int64_t)j * sw - a->pl + 4 - sw) * C + c : pad;
    for (; j < j1; j++, p += sw * C) {
        if (C == 16 && sw == 2)         /* the two columns are 32 contiguous bytes: one load */
            v = _mm512_shrdi_epi32(
                v, _mm512_permutexvar_epi8(vpair, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p))), 16);
        else if (masked) DWQ_NEW(_mm_maskz_loadu_epi8(m, p), _mm_maskz_loadu_epi8(m, p + C));
        else DWQ_NEW(_mm_loadu_si128((const __m128i *)p), _mm_loadu_si128((const __m128i *)(p + C)));
        _mm512_store_si512(d + j * qb, _mm512_xor_si512(v, k80));
    }
    for (; j < nj; j++) {
        DWQ_CHECKED(j);
        _mm512_store_si512(d + j * qb, _mm512_xor_si512(v, k80));
    }
#undef DWQ_CHECKED
#undef DWQ_NEW
}

/* a quad row (the ring layout [j][group][64]) by shifts: stride 1 or 2, 16 channels or more */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2"))) __attribute__((noinline))
static void dwq_build_shift(const ei_dw_args *a, const int8_t *xrow, const int8_t *pad, uint8_t *q, int nj,
                            int64_t qb) {
    const int full = a->c / 16;
    const __mmask16 tm = (__mmask16)((1u << (a->c - 16 * full)) - 1);
    static const uint8_t pi[64] = {     /* lane c: bytes c and 16 + c (the two columns) in its low half */
#define P2(c) c, 16 + c, 0, 0
        P2(0), P2(1), P2(2), P2(3), P2(4), P2(5), P2(6), P2(7), P2(8), P2(9), P2(10), P2(11), P2(12), P2(13), P2(14), P2(15)
#undef P2
    };
    const __m512i vpair = _mm512_loadu_si512(pi);
    /* quads [j0, j1) read columns j sw - pl + 4 - sw .. j sw - pl + 3, all inside the row */
    const int sw = a->sw, off = 4 - sw - a->pl;
    const int last = a->w - 3 + a->pl;                  /* quad j reads inside the row while j sw < last */
    int j0 = off >= 0 ? 0 : (-off + sw - 1) / sw, j1 = xrow ? EI_MIN(nj, last / sw + (last % sw > 0)) : 0;
    if (!xrow || j1 < j0) j0 = j1 = nj;
    for (int g = 0; g < full; g++) dwq_shift_group(a, xrow, pad, q + 64 * g, nj, j0, j1, qb, 16 * g, 0xFFFF, vpair, 0);
    if (tm) dwq_shift_group(a, xrow, pad, q + 64 * full, nj, j0, j1, qb, 16 * full, tm, vpair, 1);
}

static const uint8_t dwq_perm[64] = {   /* byte 4c + k of a quad = byte 16k + c of four 16-byte loads */
#define P4(c) c, 16 + c, 32 + c, 48 + c
    P4(0), P4(1), P4(2), P4(3), P4(4), P4(5), P4(6), P4(7), P4(8), P4(9), P4(10), P4(11), P4(12), P4(13), P4(14), P4(15)
#undef P4
};
static const uint8_t dwq_perm8[64] = {  /* 8 channels: byte 4c + k = byte 8k + c of one 32-byte load */
#define P4(c) c, 8 + c, 16 + c, 24 + c
    P4(0), P4(1), P4(2), P4(3), P4(4), P4(5), P4(6), P4(7)
#undef P4
};

/* the from-scratch quads of input columns ix0 .. ix0 + 3, every channel group, at d (groups 64
 * apart; pixel pairs: 32 bytes): four 16-byte loads (the padding's outside the row) and one
 * vpermb a group; 8 or 16 channels inside the row: the four taps are 4 C contiguous bytes, one
 * load */
/* (C, w, pairs: the args' channels, width and DWQ_PAIRS, as values: read through the args they
 * were loaded again after every quad's stores, which may alias them: 160x160x8 3x3 116 -> 154 us) */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"))) static inline __attribute__((always_inline))
void dwq_quad(const int C, const int w, const int pairs, const int8_t *xrow, const int8_t *pad, int ix0, uint8_t *d) {
    const int full = C / 16;
    const __mmask16 tm = (__mmask16)((1u << (C - 16 * full)) - 1);
    const __m512i k80 = _mm512_set1_epi8((char)0x80), vperm = _mm512_loadu_si512(dwq_perm);
    const int8_t *src[4];
    if (xrow && ix0 >= 0 && ix0 + 3 < w) {
        src[0] = xrow + (int64_t)ix0 * C;
        if (C == 16 || C == 8) {
            const __m512i v = _mm512_xor_si512(
                _mm512_permutexvar_epi8(C == 16 ? vperm : _mm512_loadu_si512(dwq_perm8),
                                        _mm512_maskz_loadu_epi8(C == 16 ? ~0ULL : 0xFFFFFFFFULL, src[0])), k80);
            if (pairs) _mm256_storeu_si256((__m256i *)d, _mm512_castsi512_si256(v));
            else _mm512_store_si512(d, v);
            return;
        }
        src[1] = src[0] + C; src[2] = src[1] + C; src[3] = src[2] + C;
    } else {
        for (int t = 0; t < 4; t++) {
            int ix = ix0 + t;
            src[t] = (xrow && ix >= 0 && ix < w) ? xrow + (int64_t)ix * C : pad;
        }
    }
    for (int g = 0; g < full; g++) {
        int c = 16 * g;
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(src[0] + c)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(src[1] + c)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(src[2] + c)), 2);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(src[3] + c)), 3);
        _mm512_store_si512(d + 64 * g, _mm512_xor_si512(_mm512_permutexvar_epi8(vperm, v), k80));
    }
    if (tm) {
        int c = 16 * full;
        __m512i v = _mm512_castsi128_si512(_mm_maskz_loadu_epi8(tm, src[0] + c));
        v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(tm, src[1] + c), 1);
        v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(tm, src[2] + c), 2);
        v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(tm, src[3] + c), 3);
        v = _mm512_xor_si512(_mm512_permutexvar_epi8(vperm, v), k80);
        if (pairs) _mm256_storeu_si256((__m256i *)d, _mm512_castsi512_si256(v));
        else _mm512_store_si512(d + 64 * full, v);
    }
}

/* a quad row from scratch (dwq_quad for each quad column), in a function of its own: inlined in
 * dwq_rows_impl the 8 / 16-channel one-load quads rebuilt their constants and reloaded their
 * flags from the stack at every quad (160x160x8 3x3: 128-133 us against 117-123 before the
 * shift builds); here the interior quads' loop keeps them in registers */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"))) __attribute__((noinline))
static void dwq_build_scratch(const int C, const int w, const int pairs, const int sw, const int pl, const int8_t *xrow,
                              const int8_t *pad, uint8_t *q, int nj, int64_t qb) {
    int j = 0;
    if (xrow && (C == 8 || C == 16)) {
        const __m512i k80 = _mm512_set1_epi8((char)0x80), vp = _mm512_loadu_si512(C == 16 ? dwq_perm : dwq_perm8);
        const __mmask64 lm = C == 16 ? ~0ULL : 0xFFFFFFFFULL;
        /* the quads left of the first interior one (padding), then the interior ones */
        for (; j < nj && j * sw - pl < 0; j++) dwq_quad(C, w, pairs, xrow, pad, j * sw - pl, q + (int64_t)j * qb);
        for (; j < nj && j * sw - pl + 3 < w; j++) {
            const __m512i v = _mm512_xor_si512(
                _mm512_permutexvar_epi8(vp, _mm512_maskz_loadu_epi8(lm, xrow + (int64_t)(j * sw - pl) * C)), k80);
            uint8_t *d = q + (int64_t)j * qb;
            if (pairs) _mm256_storeu_si256((__m256i *)d, _mm512_castsi512_si256(v));
            else _mm512_store_si512(d, v);
        }
    }
    for (; j < nj; j++) dwq_quad(C, w, pairs, xrow, pad, j * sw - pl, q + (int64_t)j * qb);
}

/* a quad row from every (4 / sw)-th quad: quad j + 4 / sw holds the four input columns after
 * quad j's, built from scratch; the quads between, j + k, are bytes k sw .. 3 of quad j's lanes
 * then bytes 0 .. k sw - 1 of quad j + 4 / sw's: one vpshrdd each. At stride 1 two ops a quad
 * (a from-scratch build and three shifts per four quads), three at stride 2, against five,
 * and no chain of shifts from quad to quad. tmp: the last from-scratch quad where it lies past
 * the row's nj. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2"))) __attribute__((noinline))
static void dwq_build_blocks(const ei_dw_args *a, const int8_t *xrow, const int8_t *pad, uint8_t *q, uint8_t *tmp,
                             int nj, int64_t qb) {
    const int sw = a->sw, S = 4 / sw, ng = (a->c + 15) / 16, C = a->c, w = a->w, pl = a->pl, pairs = DWQ_PAIRS(a);
    dwq_quad(C, w, pairs, xrow, pad, -pl, q);
    for (int j = 0; j + 1 < nj; j += S) {
        const int jn = j + S, kend = EI_MIN(S, nj - j);
        uint8_t *dn = jn < nj ? q + (int64_t)jn * qb : tmp;
        const uint8_t *d0 = q + (int64_t)j * qb;
        dwq_quad(C, w, pairs, xrow, pad, jn * sw - pl, dn);
        for (int g = 0; g < ng; g++) {
            const __m512i va = _mm512_load_si512(d0 + 64 * g), vb = _mm512_load_si512(dn + 64 * g);
            uint8_t *d = q + (int64_t)(j + 1) * qb + 64 * g;
            if (sw == 2) {
                _mm512_store_si512(d, _mm512_shrdi_epi32(va, vb, 16));
                continue;
            }
            _mm512_store_si512(d, _mm512_shrdi_epi32(va, vb, 8));
            if (kend > 2) _mm512_store_si512(d + qb, _mm512_shrdi_epi32(va, vb, 16));
            if (kend > 3) _mm512_store_si512(d + 2 * qb, _mm512_shrdi_epi32(va, vb, 24));
        }
    }
}

/* the build that measured fastest for these args (1 thread, loaded machine, min us, scratch ->
 * chain -> blocks): blocks at stride 1 above 32 channels (28x28x88 3x3 23.3 -> 21.6 -> 20.9,
 * 56x56x144 3x3 137 -> 124 -> 121, 14x14x144 5x5 15.6 -> 15.3 -> 14.8, 7x7x576 5x5 19.4 ->
 * 19.5 -> 19.2); the chain for 3x3 and rows 14 or more wide otherwise (112x112x16 3x3 stride 2
 * 21.0 -> 17.1 -> 26.2, 112x112x32 3x3 123 -> 102 -> 112, 56x56x72 stride 2 26.3 -> 23.2 ->
 * 26.6: the blocks' one 64-byte load at 16 channels straddles cache lines, and at stride 2
 * they save one op in four); from scratch for 7-wide 5x5 at stride 2 (vpshrdd runs on port 0
 * beside the ten vpdpbusd a pixel) */
int ei_dwq_build_of(const ei_dw_args *a) {
    if (!ei_dw_has_vbmi2() || DWQ_PAIRS(a) || (a->sw != 1 && a->sw != 2)) return DWQ_SCRATCH;
    if (a->sw == 1 && a->c > 32) return DWQ_BLOCKS;
    return a->kw <= 4 || a->ow >= 14 ? DWQ_CHAIN : DWQ_SCRATCH;
}

/* output rows [r0, r1), every channel group of 16, quad rows built as build says; one_row: bands
 * of one row, compiled apart (the band loop's unknown bounds had cost 14x14x288 5x5 stride 2
 * 6.6 -> 7.0 us at 2 threads) */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi"))) static inline __attribute__((always_inline))
void dwq_rows_impl(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch, int build, const int one_row) {
    const int C = a->c, ng = (C + 15) / 16, full = C / 16, nq = (a->kw + 3) / 4, kh = a->kh;
    const int W = a->w, SW = a->sw, PL = a->pl;         /* the from-scratch builds read these per quad */
    const __mmask16 tm = (__mmask16)((1u << (C - 16 * full)) - 1);
    char *base = (char *)(((uintptr_t)scratch + ((int64_t)C * 4 + 63) / 64 * 64 + 63) & ~(uintptr_t)63);
    const char *cs = (const char *)a->consts;
    if (!cs) {
        dwq_consts(a, base);
        cs = base;
    }
    const ei_vq16 *vq = (const ei_vq16 *)cs;
    const int8_t *wq = (const int8_t *)(vq + ng);
    uint8_t *ring = (uint8_t *)base + dwq_consts_bytes(a);             /* [slot][j][g][64] */
    const int pairs = DWQ_PAIRS(a);
    const int64_t qb = pairs ? 32 : (int64_t)ng * 64;                  /* bytes per quad column */
    const int nj = DWQ_COLS(a), qstep = nq > 1 ? 4 / a->sw : 0;       /* quad k of ox: column ox + k qstep */
    const int64_t qrow = (int64_t)nj * qb;
    int left = ei_rq_flag(a->shift, C);
    ei_vqc vc;
    ei_vqc_prepare(&vc, a->ztab, a->zp_y, a->lo, a->hi, left);
    const int band = one_row ? 1 : dwq_band(a), ns = (band - 1) * a->sh + kh;
    /* variable-length: fixed arrays for 16 rows of 64 taps (8 KB of stack a call) had made
     * 14x14x288 5x5 stride 2 at 2 threads 6.6 -> 7.5 us */
    int64_t tag[ns];                                    /* (b, iy) built in each slot; -1: none */
    for (int i = 0; i < ns; i++) tag[i] = -1;
    const int8_t *pad = (const int8_t *)a->pad;
    const uint8_t *slots[band * kh];                    /* [output row of the band][ky] */
    int64_t opixs[band];
    for (int64_t row0 = r0, nb; row0 < r1; row0 += nb) {
        nb = EI_MIN(EI_MIN((int64_t)band, r1 - row0), (row0 / a->oh + 1) * a->oh - row0);   /* one image */
        /* the band's quad rows (those not in the ring yet), then its output rows */
        for (int bi = 0; bi < nb; bi++) {
            const int64_t row = row0 + bi;
            int b = (int)(row / a->oh), oy = (int)(row % a->oh);
            const uint8_t **slot = slots + bi * kh;
            for (int ky = 0; ky < kh; ky++) {
                int iy = oy * a->sh - a->pt + ky;
                int s = ((iy % ns) + ns) % ns;
                /* the input row a slot holds: b * h + iy; every padding row is the same (all zp_x) */
                int64_t key = (iy < 0 || iy >= a->h) ? -2 : (int64_t)b * a->h + iy;
                uint8_t *q = ring + s * qrow;
                slot[ky] = q;
                if (tag[s] == key) continue;
                tag[s] = key;
                const int8_t *xrow = (iy >= 0 && iy < a->h) ? (const int8_t *)a->x + ((int64_t)b * a->h + iy) * a->w * C : NULL;
                if (build == DWQ_BLOCKS) {
                    dwq_build_blocks(a, xrow, pad, q, ring + ns * qrow, nj, qb);
                    continue;
                }
                if (build == DWQ_CHAIN) {
                    dwq_build_shift(a, xrow, pad, q, nj, qb);
                    continue;
                }
                dwq_build_scratch(C, W, pairs, SW, PL, xrow, pad, q, nj, qb);
            }
            opixs[bi] = ((int64_t)b * a->oh + oy) * a->ow;
        }
        for (int bi = 0; bi < nb && pairs; bi++) {      /* (a band of one row) */
            const uint8_t *const *slot = slots + bi * kh;
            const int64_t opix0 = opixs[bi];
            for (int ox = 0; ox < a->ow; ox += 8) {
                const int nv = (EI_MIN(8, a->ow - ox) + 1) / 2;
                __m512i acc[4] = { vq[0].bias, vq[0].bias, vq[0].bias, vq[0].bias };
                for (int ky = 0; ky < kh; ky++) {
                    __m512i wv = _mm512_loadu_si512(wq + (int64_t)ky * 64);
                    const uint8_t *qp = slot[ky] + (int64_t)ox * 32;
                    for (int j = 0; j < nv; j++) {          /* a last odd column: its half only */
                        __mmask64 lm = ox + 2 * j + 1 < a->ow ? ~0ULL : 0xFFFFFFFFULL;
                        acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_maskz_loadu_epi8(lm, qp + 64 * j), wv);
                    }
                }
                int8_t *y = (int8_t *)a->y + (opix0 + ox) * 8;
                const int8_t *z = a->z ? (const int8_t *)a->z + (opix0 + ox) * 8 : NULL;
                if (nv == 4 && ox + 7 < a->ow && !vc.ztab) {       /* 8 whole columns: one 64-byte store */
                    ei_vq_store4(&vc, &vq[0], (__mmask16)0xFFFF, acc[0], acc[1], acc[2], acc[3], y, 16);
                    continue;
                }
                for (int j = 0; j < nv; j++)
                    ei_vq_store(&vc, &vq[0], ox + 2 * j + 1 < a->ow ? (__mmask16)0xFFFF : (__mmask16)0xFF, acc[j],
                                y + 16 * j, z ? z + 16 * j : NULL);
            }
        }
        if (pairs) continue;
        /* one group's quads of the band's rows across the rows, then the next group's: those stay
         * in L1 (the whole ring of a 240-channel 5x5 layer does not), and quad k = 1 of one block
         * of four columns is quad k = 0 of the next */
        for (int g = 0; g < ng; g++) {
            const __mmask16 m = g < full ? (__mmask16)0xFFFF : tm;
            /* MobileNet's 3x3 and 5x5 with constant trip counts: unrolled, the addresses constant
             * offsets from the kh row pointers */
            for (int bi = 0; bi < nb; bi++) {
                const uint8_t *const *slot = slots + bi * kh;
                const int64_t opix0 = opixs[bi];
                if (kh == 3 && nq == 1) dwq_group_row(a, &vc, &vq[g], wq, slot, opix0, g, m, qb, qstep, ng, 3, 1);
                else if (kh == 5 && nq == 2) dwq_group_row(a, &vc, &vq[g], wq, slot, opix0, g, m, qb, qstep, ng, 5, 2);
                else dwq_group_row(a, &vc, &vq[g], wq, slot, opix0, g, m, qb, qstep, ng, kh, nq);
            }
        }
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
static void dwq_rows_one(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch, int build) {
    dwq_rows_impl(a, r0, r1, scratch, build, 1);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
static void dwq_rows_band(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch, int build) {
    dwq_rows_impl(a, r0, r1, scratch, build, 0);
}
static void dwq_run(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch, int build) {
    if (dwq_band(a) == 1) dwq_rows_one(a, r0, r1, scratch, build);
    else dwq_rows_band(a, r0, r1, scratch, build);
}
void ei_dwq_rows(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    dwq_run(a, r0, r1, scratch, DWQ_SCRATCH);
}
void ei_dwq_rows_shift(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    dwq_run(a, r0, r1, scratch, ei_dwq_build_of(a));
}
/* the self-test's: each shift build wherever it can run */
void ei_dwq_rows_chain(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    dwq_run(a, r0, r1, scratch, DWQ_PAIRS(a) || a->sw > 2 ? DWQ_SCRATCH : DWQ_CHAIN);
}
void ei_dwq_rows_blocks(const ei_dw_args *a, int64_t r0, int64_t r1, char *scratch) {
    dwq_run(a, r0, r1, scratch, DWQ_PAIRS(a) || a->sw > 2 ? DWQ_SCRATCH : DWQ_BLOCKS);
}
#endif
