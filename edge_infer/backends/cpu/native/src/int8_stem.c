/* int8 "stem" convolution: a network's first conv, few input channels (c <= 4), NHWC in and
 * out, any kernel and stride (dilation 1 along the width), up to 64 output channels. Bit-exact
 * with the int8 GEMM (int8_gemm.c) and the numpy kernel (kernels/int8_conv.py): the same int32
 * sums, the same epilogue (ei_int8.h), then the optional 256-entry activation table (lut).
 *
 * Why a kernel of its own: with K = kh * kw * c = 27 the GEMM's im2col rows cost as much as
 * their multiply-adds, and the rows are built again for every 32-channel panel. Here each
 * output row reads kh "line buffers": the input rows its taps touch, padded with zp_x on both
 * sides (and whole zp_x rows above / below the image), converted once per output row to the
 * operand type of the kind. A pixel's kernel row ky is then kw * c contiguous values of line ky
 * at ox * sw * c; it is rounded up to kwc4 (a multiple of 4) values whose extra weights are 0,
 * so every 4-value group is one unaligned 32-bit load and broadcast: no im2col at all.
 *
 * Kinds (chosen at prepare, recorded in the args' kind with the packed weights' layout):
 *   AVX-512 VNNI  u8 lines (x ^ 0x80), vpdpbusd against [block][group][16 ch][4] int8 weights,
 *                 8 pixels x 16 channels in registers, requantized in registers (ei_vq_*);
 *                 the extra 128 * sum_k w[m, k] is taken off the bias at prepare
 *   AVX2          int16 lines, vpmaddwd of value pairs against [block][pair][16 ch][2] int16
 *   NEON sdot     int8 lines, vdotq_s32 against the VNNI layout (no offset)
 *   NEON / scalar int16 lines, [block][k][16 ch] int16 weights, vmlal_n_s16 / plain loops
 * Rows of output are split over the thread pool; each thread slot has its own line buffers.
 */
#include "int8_stem.h"
#include "ei_lut.h"

#include <math.h>
#include <string.h>

/* a row split's slots: ~7 ns an output pixel per 16-channel block (MobileNetV3-small 224:
 * 6.6 ns, the 48x192 text classifier's 8 channels: 7.2 ns, half its lanes idle), one slot per
 * 4 us as the int8 conv's (int8_gemm.c SLOT_NS). The output-bytes threshold before (32 KB)
 * kept the text classifier's 16.6 us stem, 18 KB of output, on one thread. The AMX rows on a
 * float input: ~5 ns (MobileNetV3 224, in its plan), ~3 ns with two pixels a tile row (the
 * text classifier, 7.4 us: at 2 threads its split runs took 14 us, the worker not yet
 * spinning at a plan's first step, and the pool ran it alone in 93% of runs anyway). */
#define STEM_PIXEL_NS 7
#define STEM_AMX_PIXEL_NS 5
#define STEM_PAIR_PIXEL_NS 3
#define STEM_SLOT_NS 4000

static stem_geo stem_geometry(const ei_int8_conv_args *a) {
    stem_geo g;
    g.kwc = a->kw * a->c;
    g.kwc4 = (g.kwc + 3) & ~3;
    g.grow = g.kwc4 / 4;
    g.groups = a->kh * g.grow;
    g.kp = a->kh * g.kwc4;
    g.mb = (a->m + 15) / 16;
    g.wn = (int64_t)(a->ow > 0 ? a->ow - 1 : 0) * a->sw + a->kw;
    /* int16 values; the last pixel's rounded-up row and a 16-byte over-read stay inside */
    g.lb = ((g.wn * a->c + g.kwc4 + 16) * 2 + 63) / 64 * 64;
    return g;
}

static int stem_kind_runs(int kind) {
#if defined(__x86_64__)
    if (kind == KIND_AVX2 || kind == KIND_VNNI) return ei_int8_kind_runs(kind);
#elif defined(__aarch64__)
    if (kind == KIND_NEON) return ei_has(EI_NEON);
    if (kind == KIND_DOT) return ei_int8_kind_runs(KIND_DOT);
#endif
    return kind == KIND_SCALAR;
}

/* whether the stem kernel computes these args at all */
int ei_stem_fits(const ei_int8_conv_args *a) {
    if (a->in_nchw || a->out_nchw || a->z || a->c < 1 || a->c > STEM_MAX_C || a->m < 1 || a->m > STEM_MAX_M)
        return 0;
    if (a->kh < 1 || a->kh > 64 || a->kw < 1 || a->kw > STEM_MAX_KW || a->sh < 1 || a->sw < 1 || a->dh < 1 || a->dw != 1
        || a->pt < 0 || a->pl < 0 || a->n < 1 || a->oh < 1 || a->ow < 1)
        return 0;
    return (int64_t)(a->kh - 1) * a->dh + 1 + a->sh <= 64;     /* line_slots */
}

/* the kind this machine runs the stem with now (ISA mask included), or -1 when the stem kernel
 * does not take these args or the GEMM is faster here (the GEMM serves) */
EI_API int ei_int8_stem_kind(const ei_int8_conv_args *a) {
    if (!ei_stem_fits(a)) return -1;
#if defined(__x86_64__)
    /* where the GEMM runs on AMX (K >= 17, kernels.AMX_MIN_K) its tiles take the multiplies off
     * the vector ports: from 32 channels on it beat these rows (1 thread, loaded machine,
     * 3 -> 32 3x3/2 at 320: 251 against 328 us; 3 -> 16 at 224: 90 against 81 us; without AMX
     * the VNNI GEMM took 420 and 230 us, AVX2 1895 and 779 against the stem's 885 and 235).
     * With these rows on AMX tiles too (row_amx), on an int8 input 3 -> 32 and 3 -> 48 at 320
     * are a draw (274 and 415 us against the GEMM's 270 and 413; 32 at 224: 138 / 140), 16
     * channels the stem's (640: 520 against 736 us), 64 the GEMM's (578 against 483). On the
     * graph's float input the stem also takes the QuantizeLinear (and NCHW Transpose) steps
     * in (ei_int8_stem_q), which the GEMM cannot: the GEMM keeps more than 48 channels. */
    if (a->m > 48 && a->kh * a->kw * a->c >= 17 && ei_int8_kind_runs(KIND_AMX)) return -1;
    if (stem_kind_runs(KIND_VNNI)) return KIND_VNNI;
    if (stem_kind_runs(KIND_AVX2)) return KIND_AVX2;
#elif defined(__aarch64__)
    if (stem_kind_runs(KIND_DOT)) return KIND_DOT;
    if (stem_kind_runs(KIND_NEON)) return KIND_NEON;
#endif
    return KIND_SCALAR;
}

static int pair_fits(const ei_int8_conv_args *a);

/* the rows ei_int8_stem runs args of a->kind (as ei_int8_stem_kind chose it) with on this
 * machine now, ISA mask included, for plan notes and tests */
EI_API const char *ei_int8_stem_path(const ei_int8_conv_args *a) {
    static const char *const names[] = { "scalar", "AVX2 vpmaddwd", "NEON smlal", "NEON sdot", "AVX-512 VNNI vpdpbusd" };
    int kind = stem_kind_runs(a->kind) ? a->kind : KIND_SCALAR;
#if defined(__x86_64__)
    if (kind == KIND_VNNI && ei_int8_kind_runs(KIND_AMX))
        return pair_fits(a) ? "AMX tdpbusd, two pixels a tile row" : a->m <= 8 ? "AMX tdpbusd, 8-channel tiles"
                                                                           : "AMX tdpbusd";
#endif
    return kind >= 0 && kind <= KIND_VNNI ? names[kind] : names[0];
}

/* packed weights: int32 bias correction per channel (mb * 16), then the kind's layout */
static int64_t corr_bytes(const stem_geo *g) { return (int64_t)g->mb * 16 * 4; }

static int w8_layout(int kind) { return kind == KIND_VNNI || kind == KIND_DOT; }

/* The AMX rows of 8 channels or fewer take two pixels a tile row (row_amx, s->pair): a kernel
 * row's A row is the pair's bytes, from the first pixel's taps through the second's (sw c +
 * kw c values, rounded up to 4: at most 64), and its B columns 0..7 the first pixel's channels,
 * 8..15 the second's (the same weights sw c bytes further on). 32 pixels a step in every tile
 * operation's 16 rows, no idle B or C columns, against 16 pixels of 8 columns. */
static int pair_cols(const ei_int8_conv_args *a) { return (a->sw * a->c + a->kw * a->c + 3) & ~3; }

static int pair_fits(const ei_int8_conv_args *a) {
    return a->kind == KIND_VNNI && a->m <= 8 && pair_cols(a) <= 64;
}

/* the pair layout's bytes, after the VNNI layout: per kernel row, pair_cols / 4 k-group rows
 * of 16 columns x 4 bytes */
static int64_t pair_bytes(const ei_int8_conv_args *a) {
    return pair_fits(a) ? (int64_t)a->kh * pair_cols(a) * 16 : 0;
}

static void pair_pack(const ei_int8_conv_args *a, const int8_t *w_mk, int8_t *out) {
    const int kwc = a->kw * a->c, step = a->sw * a->c, cols = pair_cols(a), K = a->kh * kwc;
    for (int ky = 0; ky < a->kh; ky++)
        for (int v = 0; v < cols; v++)
            for (int n = 0; n < 16; n++) {
                int ch = n % 8, at = n < 8 ? v : v - step;
                int8_t w = ch < a->m && at >= 0 && at < kwc ? w_mk[(int64_t)ch * K + ky * kwc + at] : 0;
                out[(((int64_t)ky * cols / 4 + v / 4) * 16 + n) * 4 + v % 4] = w;
            }
}

EI_API int64_t ei_int8_stem_pack_size(const ei_int8_conv_args *a) {
    stem_geo g = stem_geometry(a);
    return corr_bytes(&g) + (int64_t)g.mb * g.kp * 16 * (w8_layout(a->kind) ? 1 : 2) + pair_bytes(a);
}

/* weight of channel j of block b at padded tap kk (ky * kwc4 + value), from any kind's layout */
static int32_t w_at(int kind, const stem_geo *g, const void *wp, int b, int kk, int j) {
    if (w8_layout(kind)) return ((const int8_t *)wp)[(((int64_t)b * g->groups + kk / 4) * 16 + j) * 4 + kk % 4];
    const int16_t *w = (const int16_t *)wp;
    if (kind == KIND_AVX2) return w[(((int64_t)b * g->kp / 2 + kk / 2) * 16 + j) * 2 + kk % 2];
    return w[((int64_t)b * g->kp + kk) * 16 + j];
}

/* w_mk: (m, kh * kw * c) int8, K ordered (kernel row, kernel column, input channel) */
EI_API void ei_int8_stem_pack(const ei_int8_conv_args *a, const int8_t *w_mk, void *out) {
    stem_geo g = stem_geometry(a);
    int32_t *corr = (int32_t *)out;
    char *wp = (char *)out + corr_bytes(&g);
    memset(out, 0, (size_t)ei_int8_stem_pack_size(a));
    int K = a->kh * g.kwc;
    for (int mm = 0; mm < g.mb * 16; mm++) {
        int b = mm / 16, j = mm % 16;
        int64_t sum = 0;
        for (int kk = 0; kk < g.kp; kk++) {
            int ky = kk / g.kwc4, v = kk % g.kwc4;
            int8_t w = mm < a->m && v < g.kwc ? w_mk[(int64_t)mm * K + ky * g.kwc + v] : 0;
            sum += w;
            if (w8_layout(a->kind)) wp[(((int64_t)b * g.groups + kk / 4) * 16 + j) * 4 + kk % 4] = w;
            else if (a->kind == KIND_AVX2) ((int16_t *)wp)[(((int64_t)b * g.kp / 2 + kk / 2) * 16 + j) * 2 + kk % 2] = w;
            else ((int16_t *)wp)[((int64_t)b * g.kp + kk) * 16 + j] = w;
        }
        corr[mm] = a->kind == KIND_VNNI ? (int32_t)(-128 * sum) : 0;     /* u8 = x + 128 */
    }
    if (pair_fits(a)) pair_pack(a, w_mk, (int8_t *)wp + (int64_t)g.mb * g.kp * 16);
}

/* line slots a thread keeps: an output row's kh lines span (kh - 1) dh + 1 input rows and the
 * next row's start sh further, so lines built for one row are still there for the next
 * (a 3x3 stride-2 stem builds 1.5 lines a row instead of 3) */
static int64_t line_slots(const ei_int8_conv_args *a) { return (int64_t)(a->kh - 1) * a->dh + 1 + a->sh; }

EI_API int64_t ei_int8_stem_scratch(const ei_int8_conv_args *a) {
    stem_geo g = stem_geometry(a);
    return line_slots(a) * g.lb;
}

/* ---- line buffers ---- */

enum { LINE_I16 = 0, LINE_U8 = 1, LINE_S8 = 2 };

static int line_type(int kind) { return kind == KIND_VNNI ? LINE_U8 : kind == KIND_DOT ? LINE_S8 : LINE_I16; }

#if defined(__x86_64__)
/* d[0 .. n) = s ^ 0x80, 64 bytes a step */
__attribute__((target("avx512f,avx512bw")))
static void xor80_avx512(uint8_t *d, const int8_t *s, int64_t n) {
    const __m512i f = _mm512_set1_epi8((char)0x80);
    for (int64_t i = 0; i < n; i += 64) {
        __mmask64 m = n - i >= 64 ? ~0ULL : (1ULL << (n - i)) - 1;
        _mm512_mask_storeu_epi8(d + i, m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, s + i), f));
    }
}
#endif

/* line position p holds input column p - pl of the row src (int8 NHWC from column 0; NULL: a
 * row outside the image), zp_x outside the image */
static void build_line(const ei_int8_conv_args *a, const stem_geo *g, const int8_t *src, int type, void *dst) {
    const int c = a->c;
    const int64_t n = g->wn * c, total = n + g->kwc4 + 16;
    int64_t x0 = 0, x1 = 0;                  /* [x0, x1): line values taken from the image */
    if (src && line_cols(a, g) > 0) { x0 = (int64_t)a->pl * c; x1 = x0 + line_cols(a, g) * c; }
    if (type == LINE_I16) {
        int16_t *d = (int16_t *)dst;
        for (int64_t i = 0; i < x0; i++) d[i] = (int16_t)a->zp_x;
        for (int64_t i = x0; i < x1; i++) d[i] = src[i - x0];
        for (int64_t i = x1; i < total; i++) d[i] = (int16_t)a->zp_x;
    } else {
        uint8_t flip = type == LINE_U8 ? 0x80 : 0, fill = (uint8_t)((uint8_t)a->zp_x ^ flip);
        uint8_t *d = (uint8_t *)dst;
        memset(d, fill, (size_t)x0);
#if defined(__x86_64__)
        if (flip && ei_has(EI_AVX512)) {        /* the VNNI rows' lines: x86 with AVX-512 */
            xor80_avx512(d + x0, src, x1 - x0);
            memset(d + x1, fill, (size_t)(total - x1));
            return;
        }
#endif
        memcpy(d + x0, src, (size_t)(x1 - x0));
        if (flip) {                 /* 8 bytes a word (the byte loop was a third of the conv) */
            int64_t i = x0;
            for (; i + 8 <= x1; i += 8) {
                uint64_t v;
                memcpy(&v, d + i, 8);
                v ^= 0x8080808080808080ULL;
                memcpy(d + i, &v, 8);
            }
            for (; i < x1; i++) d[i] ^= 0x80;
        }
        memset(d + x1, fill, (size_t)(total - x1));
    }
}

/* ---- per-kind rows: out = the output row (ow * m int8), lines = kh line buffers ---- */

static void row_scalar(const stem_ctx *s, const void *const *lines, int8_t *out) {
    const ei_int8_conv_args *a = s->a;
    const stem_geo *g = &s->g;
    for (int64_t ox = 0; ox < a->ow; ox++) {
        for (int b = 0; b < g->mb; b++) {
            int32_t acc[16];
            for (int j = 0; j < 16; j++) acc[j] = s->bias[16 * b + j];
            for (int kk = 0; kk < g->kp; kk++) {
                int32_t v = ((const int16_t *)lines[kk / g->kwc4])[ox * a->sw * a->c + kk % g->kwc4];
                for (int j = 0; j < 16; j++) acc[j] += v * w_at(s->layout, g, s->wp, b, kk, j);
            }
            for (int j = 0; j < 16 && 16 * b + j < a->m; j++) {
                int ch = 16 * b + j;
                out[ox * a->m + ch] = ei_rq_one(acc[j], s->mult[ch], s->shift[ch], a->zp_y, 0, a->lo, a->hi);
            }
        }
    }
}

static inline int32_t load32(const void *p) { int32_t v; memcpy(&v, p, 4); return v; }

#if defined(__x86_64__)
#define NPX 16                 /* pixels in registers a step: 16 accumulators, one weight vector */
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* acc += x (u8) . w (s8), in place: with the intrinsic GCC 12 copied each of the accumulators
 * to another register and back around every vpdpbusd (two moves a multiply-add) */
VNNI_TARGET __attribute__((always_inline))
static inline __m512i dpbusd(__m512i acc, __m512i x, __m512i w) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
    return acc;
}

VNNI_TARGET static void vnni_prepare(stem_ctx *s) {
    const ei_int8_conv_args *a = s->a;
    for (int b = 0; b < s->g.mb; b++) {
        int32_t bias[16], corr[16], mult[16], shift[16];
        for (int j = 0; j < 16; j++) {      /* a half block: channel j % 8 in lane j */
            int ch = 16 * b + (s->half ? j % 8 : j);
            bias[j] = s->bias[ch]; corr[j] = s->corr[ch]; mult[j] = s->mult[ch]; shift[j] = s->shift[ch];
        }
        int left = ei_vq16_prepare(&s->vq[b], bias, corr, mult, shift, 16);
        ei_vqc_prepare(&s->vc[b], NULL, a->zp_y, a->lo, a->hi, left);
    }
    s->vbmi_lut = a->lut && ei_stem_has_vbmi();
    s->clamp = a->lo > -128 || a->hi < 127;
    for (int i = 0; i < 4; i++) s->lut4[i] = a->lut ? _mm512_loadu_si512(a->lut + 64 * i) : _mm512_setzero_si512();
}

/* the epilogue of n (a multiple of 4) accumulators of block b (its bias included), the VNNI
 * and the AMX rows': requantized and packed, p[h] holding acc[4h] .. acc[4h + 3]'s bytes */
VNNI_TARGET __attribute__((always_inline))
static inline void vnni_requant(const stem_ctx *s, int b, const __m512i *acc, int n, __m512i *p) {
    const ei_vq16 *k = &s->vq[b];
    const ei_vqc *vc = &s->vc[b];
    const int left = vc->left;
    for (int h = 0; h < n / 4; h++) {
        p[h] = ei_vq_pack4_full(vc, ei_vq_mbqm(acc[4 * h], k, left), ei_vq_mbqm(acc[4 * h + 1], k, left),
                                ei_vq_mbqm(acc[4 * h + 2], k, left), ei_vq_mbqm(acc[4 * h + 3], k, left));
        if (s->clamp) p[h] = _mm512_min_epi8(_mm512_max_epi8(p[h], vc->lo8), vc->hi8);
    }
}

/* NPX pixels' 16 channels of block b from the bias, requantized and packed: pixel i's tap
 * group gi is 4 bytes at gp[gi] + at + min(i, last) * step; p[h] holds pixels 4h .. 4h + 3.
 * Inlined with step a constant (the common stems), the 16 addresses are one register plus
 * displacements: a group costs 16 broadcast loads and 16 vpdpbusd, the accumulators stay in
 * registers (8 pixels at runtime offsets before, GCC moving each accumulator twice around
 * every vpdpbusd: 85 us for MobileNetV3's 224 stem). Now the requantization is most of it:
 * per 9 groups x 16 vpdpbusd, 16 vectors of ~14 instructions each. */
VNNI_TARGET __attribute__((always_inline))
static inline void vnni_block(const stem_ctx *s, int b, const uint8_t *const *gp, int64_t at, int64_t step,
                              int last, __m512i *p) {
    const __m512i *w = (const __m512i *)s->wp + (int64_t)b * s->g.groups;
    __m512i acc[NPX];
    for (int i = 0; i < NPX; i++) acc[i] = s->vq[b].bias;
    for (int gi = 0; gi < s->g.groups; gi++) {
        const __m512i wv = _mm512_load_si512(w + gi);
        const uint8_t *x = gp[gi] + at;
        __asm__("" : "+r"(x));          /* one base register: GCC would keep 16 offsets instead */
#pragma GCC unroll 16
        for (int i = 0; i < NPX; i++)
            acc[i] = dpbusd(acc[i], _mm512_set1_epi32(load32(x + EI_MIN(i, last) * step)), wv);
    }
    vnni_requant(s, b, acc, NPX, p);
}

/* pixels first .. first + np - 1 of p (block b's 16 channels each) into the output row y */
VNNI_TARGET __attribute__((always_inline))
static inline void vnni_store(const stem_ctx *s, int b, const __m512i *p, int64_t first, int np, int8_t *y) {
    const int64_t m = s->a->m;
    if (m == 16) {                      /* 4 pixels = 64 contiguous output bytes */
        for (int h = 0; h < NPX / 4 && 4 * h < np; h++) {
            int n4 = EI_MIN(4, np - 4 * h);
            _mm512_mask_storeu_epi8(y + (first + 4 * h) * 16, n4 == 4 ? ~0ULL : (1ULL << (16 * n4)) - 1, p[h]);
        }
        return;
    }
    __mmask64 cm = (1ULL << EI_MIN((int64_t)16, m - 16 * b)) - 1;
    int8_t tmp[NPX * 16];
    for (int h = 0; h < NPX / 4; h++) _mm512_storeu_si512(tmp + 64 * h, p[h]);
    for (int i = 0; i < np; i++)
        _mm512_mask_storeu_epi8(y + (first + i) * m + 16 * b, cm,
                                _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(tmp + 16 * i))));
}

/* v = lut[(uint8_t)v] for 64 bytes in registers (ei_lut_inplace's VBMI lookup, without the trip
 * through memory and a call a row: 4.6 of the 224 stem's 75 us) */
#define VBMI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi")))
VBMI_TARGET __attribute__((always_inline))
static inline __m512i lut64(const __m512i *t, __m512i v) {
    __m512i lo = _mm512_permutex2var_epi8(t[0], v, t[1]), hi = _mm512_permutex2var_epi8(t[2], v, t[3]);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
}

/* one step of NPX pixels: block b's output pixels first .. first + np - 1 of row y */
typedef void (*vnni_step_fn)(const stem_ctx *, int, const uint8_t *const *, int64_t, int, int8_t *);

/* the steps for a constant pixel step S (sw * c) or any (NPX - 1 = last: a row of NPX or more),
 * without and with the table looked up in registers */
#define VNNI_STEPS(NAME, S, LAST)                                                                              \
    VNNI_TARGET static void vnni_##NAME(const stem_ctx *s, int b, const uint8_t *const *gp, int64_t first,     \
                                        int np, int8_t *y) {                                                   \
        __m512i p[NPX / 4];                                                                                    \
        vnni_block(s, b, gp, first * (S), (S), (LAST), p);                                                     \
        vnni_store(s, b, p, first, np, y);                                                                     \
    }                                                                                                          \
    VBMI_TARGET static void vnni_##NAME##_lut(const stem_ctx *s, int b, const uint8_t *const *gp, int64_t first, \
                                              int np, int8_t *y) {                                             \
        __m512i p[NPX / 4];                                                                                    \
        vnni_block(s, b, gp, first * (S), (S), (LAST), p);                                                     \
        for (int h = 0; h < NPX / 4; h++) p[h] = lut64(s->lut4, p[h]);                                         \
        vnni_store(s, b, p, first, np, y);                                                                     \
    }
VNNI_STEPS(3, 3, NPX - 1)
VNNI_STEPS(4, 4, NPX - 1)
VNNI_STEPS(6, 6, NPX - 1)
VNNI_STEPS(8, 8, NPX - 1)
VNNI_STEPS(any, (int64_t)s->a->sw * s->a->c, (int)EI_MIN((int64_t)NPX, s->a->ow) - 1)

VNNI_TARGET
static void row_vnni(const stem_ctx *s, const void *const *lines, int8_t *out) {
    const ei_int8_conv_args *a = s->a;
    const stem_geo *g = &s->g;
    const int64_t step = (int64_t)a->sw * a->c, ow = a->ow;
    const uint8_t *gp[64 * STEM_MAX_KW * STEM_MAX_C / 4];    /* each group's bytes for pixel 0 */
    for (int ky = 0; ky < a->kh; ky++)
        for (int gi = 0; gi < g->grow; gi++) gp[ky * g->grow + gi] = (const uint8_t *)lines[ky] + 4 * gi;
    static const vnni_step_fn by_step[2][9] = {
        { [3] = vnni_3, [4] = vnni_4, [6] = vnni_6, [8] = vnni_8 },
        { [3] = vnni_3_lut, [4] = vnni_4_lut, [6] = vnni_6_lut, [8] = vnni_8_lut } };
    vnni_step_fn fn = ow >= NPX && step <= 8 ? by_step[s->vbmi_lut][step] : NULL;
    if (!fn) fn = s->vbmi_lut ? vnni_any_lut : vnni_any;
    for (int b = 0; b < g->mb; b++)
        for (int64_t ox0 = 0; ox0 < ow; ox0 += NPX) {
            /* the last step: the NPX pixels ending at the row's end (recomputed ones store the
             * same bytes again); a row narrower than NPX repeats its last pixel */
            int64_t first = ow >= NPX ? EI_MIN(ox0, ow - NPX) : 0;
            fn(s, b, gp, first, (int)EI_MIN((int64_t)NPX, ow - first), out);
        }
}

/* ---- AMX rows: the line buffers are the A tiles ----
 * For NPX pixels from `first`, kernel row ky's u8 values are NPX rows of kwc4 bytes, step
 * (sw * c) apart, in line ky: one tileloadd; its weights are grow 64-byte k-group rows of the
 * VNNI pack. C (16 pixels x 16 channels int32) = sum over ky of A_ky . B_ky (tdpbusd), stored
 * to a buffer, then + the bias and the VNNI rows' epilogue (vnni_requant, the table,
 * vnni_store): the 144 vpdpbusd and broadcast loads of a 3x3x3 block of 16 pixels become 3
 * tdpbusd. A stem of 8 channels or fewer (s->half) has 8-channel tiles (32-byte rows): its 16
 * pixels are 8 vectors of two pixels each, half the requantization of 16 lanes; where the
 * pair's taps fit a 64-byte row (pair_fits) its tile rows hold two pixels instead, 32 pixels
 * a step in 16 vectors.
 * Every tile operation costs about a cycle a tile row whatever its K or N (tileloadd,
 * tdpbusd, tilestored: ~10 to 13 TSC ticks each for 16 rows, measured alone), and they hardly
 * overlap the vector epilogue, so the rows count tile operations: per step kh A loads, kh
 * tdpbusd, a zero and a store, the B tiles held for the call where they fit (s->held: 7 steps
 * of 16 pixels, 3x3 kernel, 362 -> 271 ticks). (A tiles built from the lines with the kernel
 * rows side by side, one load and one tdpbusd a step, cost more: the vector stores and the
 * tileloadd waiting on them.)
 * The steps (16 pixels of one block) are pipelined: a step's tiles are computed into one of two
 * C tiles and buffers while the previous step's sums are requantized from the other.
 * Tiles: 0, 1 the sums of even / odd steps, 2, 3 A of even / odd kernel rows, 4, 5 their
 * weights (4 .. 3 + kh held). */
#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi,amx-tile,amx-int8")))

AMX_TARGET static void amx_tiles_load(const stem_tiles *t) { _tile_loadconfig(t); }

AMX_TARGET static void amx_tiles_release(void) { _tile_release(); }

/* the AMX rows' geometry in s (pair, held and the strides) and their tile configuration */
static void amx_prepare(stem_ctx *s, const ei_int8_conv_args *a) {
    s->pair = pair_fits(a);
    s->held = a->kh <= 4 && (s->pair || s->g.mb == 1);
    s->npx = s->pair ? 2 * NPX : NPX;
    const int64_t step = (int64_t)a->sw * a->c;
    const int acols = s->pair ? pair_cols(a) : s->g.kwc4, cb = s->half && !s->pair ? 32 : 64;
    s->astep = s->pair ? 2 * step : step;
    s->bky = (int64_t)acols / 4 * 64;
    s->bblock = (int64_t)s->g.groups * 64;
    s->bw = (const int8_t *)s->wp + (s->pair ? (int64_t)s->g.mb * s->g.kp * 16 : 0);
    const int r = (int)(s->pair ? (EI_MIN(s->npx, (int64_t)a->ow) + 1) / 2 : EI_MIN((int64_t)NPX, (int64_t)a->ow));
    stem_tiles *t = &s->tiles;
    memset(t, 0, sizeof *t);
    t->palette = 1;
    for (int i = 0; i < 8; i++) {
        t->rows[i] = (uint8_t)(i < 4 ? r : acols / 4);
        t->colsb[i] = (uint16_t)(i == 2 || i == 3 ? acols : cb);
    }
}

/* the held B tiles (4 + ky) of block 0 */
AMX_TARGET static void amx_hold_weights(const stem_ctx *s) {
    const int kh = s->a->kh;
    _tile_loadd(4, s->bw, 64);
    if (kh > 1) _tile_loadd(5, s->bw + s->bky, 64);
    if (kh > 2) _tile_loadd(6, s->bw + 2 * s->bky, 64);
    if (kh > 3) _tile_loadd(7, s->bw + 3 * s->bky, 64);
}

/* tile C = sum over kernel rows of A . B, stored to cbuf (rows of cb bytes); reads amx_sums'
 * kh, lines, at, as, w, bky */
#define AMX_KROWS(C)                                                                             \
    do {                                                                                         \
        _tile_zero(C);                                                                           \
        int ky = 0;                                                                              \
        for (; ky + 1 < kh; ky += 2) {                                                           \
            _tile_loadd(2, lines[ky] + at, as);                                                  \
            _tile_loadd(4, w + ky * bky, 64);                                                    \
            _tile_dpbusd(C, 2, 4);                                                               \
            _tile_loadd(3, lines[ky + 1] + at, as);                                              \
            _tile_loadd(5, w + (ky + 1) * bky, 64);                                              \
            _tile_dpbusd(C, 3, 5);                                                               \
        }                                                                                        \
        if (ky < kh) {                                                                           \
            _tile_loadd(2, lines[ky] + at, as);                                                  \
            _tile_loadd(4, w + ky * bky, 64);                                                    \
            _tile_dpbusd(C, 2, 4);                                                               \
        }                                                                                        \
        _tile_stored(C, cbuf, cb);                                                               \
    } while (0)

/* the same against the held B tiles */
#define AMX_HELD(C)                                                                              \
    do {                                                                                         \
        _tile_zero(C);                                                                           \
        _tile_loadd(2, lines[0] + at, as);                                                       \
        _tile_dpbusd(C, 2, 4);                                                                   \
        if (kh > 1) {                                                                            \
            _tile_loadd(3, lines[1] + at, as);                                                   \
            _tile_dpbusd(C, 3, 5);                                                               \
        }                                                                                        \
        if (kh > 2) {                                                                            \
            _tile_loadd(2, lines[2] + at, as);                                                   \
            _tile_dpbusd(C, 2, 6);                                                               \
        }                                                                                        \
        if (kh > 3) {                                                                            \
            _tile_loadd(3, lines[3] + at, as);                                                   \
            _tile_dpbusd(C, 3, 7);                                                               \
        }                                                                                        \
        _tile_stored(C, cbuf, cb);                                                               \
    } while (0)

/* the int32 sums of block b's channels for a step's pixels at line offset at into cbuf,
 * through C tile odd */
AMX_TARGET static inline void amx_sums(const stem_ctx *s, const uint8_t *const *lines, int b, int64_t at, int odd,
                                       int32_t *cbuf) {
    const int64_t as = s->astep, bky = s->bky, cb = s->half && !s->pair ? 32 : 64;
    const int kh = s->a->kh;
    if (s->held) {
        if (odd) AMX_HELD(1);
        else AMX_HELD(0);
        return;
    }
    const int8_t *w = s->bw + (int64_t)b * s->bblock;
    if (odd) AMX_KROWS(1);
    else AMX_KROWS(0);
}

/* pixels first .. first + np - 1 of block b from their sums in cbuf (nv vectors: NPX pixels of
 * 16 channels, or 2 nv pixels of 8 with s->half) into the output row y */
AMX_TARGET static inline void amx_epilogue(const stem_ctx *s, int b, const int32_t *cbuf, int64_t first, int np,
                                           int8_t *y, int nv) {
    const __m512i bias = s->vq[b].bias;
    __m512i acc[NPX], p[NPX / 4];
    const int np4 = nv / 4;
    for (int i = 0; i < nv; i++) acc[i] = _mm512_add_epi32(bias, _mm512_load_si512(cbuf + 16 * i));
    vnni_requant(s, b, acc, nv, p);
    if (s->vbmi_lut)
        for (int h = 0; h < np4; h++) p[h] = lut64(s->lut4, p[h]);
    if (!s->half) { vnni_store(s, b, p, first, np, y); return; }
    const int64_t m = s->a->m;          /* p[0]: pixels 0..7, p[1]: 8..15, .., 8 channels each */
    if (m == 8) {                       /* 8 pixels = 64 contiguous output bytes */
        for (int h = 0; h < np4 && 8 * h < np; h++) {
            int n8 = EI_MIN(8, np - 8 * h);
            _mm512_mask_storeu_epi8(y + (first + 8 * h) * 8, n8 == 8 ? ~0ULL : (1ULL << (8 * n8)) - 1, p[h]);
        }
        return;
    }
    int8_t tmp[NPX * 16];
    for (int h = 0; h < np4; h++) _mm512_storeu_si512(tmp + 64 * h, p[h]);
    for (int i = 0; i < np; i++)
        _mm512_mask_storeu_epi8(y + (first + i) * m, (1ULL << m) - 1,
                                _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(tmp + 8 * i))));
}

AMX_TARGET
static void row_amx(const stem_ctx *s, const void *const *lines_v, int8_t *out) {
    const uint8_t *const *lines = (const uint8_t *const *)lines_v;
    const int64_t step = (int64_t)s->a->sw * s->a->c, ow = s->a->ow, P = s->npx, nsteps = (ow + P - 1) / P;
    const int64_t items = (s->pair ? 1 : s->g.mb) * nsteps;
    const int nv = s->half && !s->pair ? NPX / 2 : NPX;
    int32_t cbuf[2][NPX * 16] __attribute__((aligned(64)));
    if (ow < P) memset(cbuf, 0, sizeof cbuf);           /* rows past the tiles' are requantized too */
    /* item j: block j / nsteps, its step j % nsteps; the last step: the P pixels ending at the
     * row's end, as row_vnni */
#define AMX_FIRST(j) (ow >= P ? EI_MIN(((j) % nsteps) * P, ow - P) : 0)
    amx_sums(s, lines, 0, 0, 0, cbuf[0]);
    for (int64_t j = 0; j < items; j++) {
        if (j + 1 < items)
            amx_sums(s, lines, (int)((j + 1) / nsteps), AMX_FIRST(j + 1) * step, (int)((j + 1) & 1), cbuf[(j + 1) & 1]);
        int64_t first = AMX_FIRST(j);
        amx_epilogue(s, (int)(j / nsteps), cbuf[j & 1], first, (int)EI_MIN(P, ow - first), out, nv);
    }
#undef AMX_FIRST
}

__attribute__((target("avx2,fma")))
static void row_avx2(const stem_ctx *s, const void *const *lines, int8_t *out) {
    const ei_int8_conv_args *a = s->a;
    const stem_geo *g = &s->g;
    const int64_t step = (int64_t)a->sw * a->c, m = a->m;
    const int prow = g->kwc4 / 2;
    ei_rq rq = { NULL, s->mult, s->shift, NULL, a->zp_y, a->lo, a->hi };
    for (int b = 0; b < g->mb; b++) {
        const __m256i *w = (const __m256i *)s->wp + (int64_t)b * (g->kp / 2) * 2;
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)(s->bias + 16 * b));
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(s->bias + 16 * b + 8));
        int nch = (int)EI_MIN((int64_t)16, m - 16 * b);
        for (int64_t ox0 = 0; ox0 < a->ow; ox0 += 4) {
            int np = (int)EI_MIN((int64_t)4, a->ow - ox0);
            int64_t off[4];
            for (int i = 0; i < 4; i++) off[i] = EI_MIN(ox0 + i, (int64_t)a->ow - 1) * step;
            __m256i acc[4][2];
            for (int i = 0; i < 4; i++) { acc[i][0] = b0; acc[i][1] = b1; }
            for (int ky = 0; ky < a->kh; ky++) {
                const int16_t *l = (const int16_t *)lines[ky];
                for (int pi = 0; pi < prow; pi++) {
                    __m256i w0 = _mm256_load_si256(w + 2 * (ky * prow + pi)), w1 = _mm256_load_si256(w + 2 * (ky * prow + pi) + 1);
                    for (int i = 0; i < 4; i++) {
                        __m256i xv = _mm256_set1_epi32(load32(l + off[i] + 2 * pi));
                        acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(xv, w0));
                        acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(xv, w1));
                    }
                }
            }
            for (int i = 0; i < np; i++) {
                int8_t tmp[16];
                _mm_storel_epi64((__m128i *)tmp, ei_rq8_avx2(&rq, acc[i][0], 16 * b, NULL, 0));
                _mm_storel_epi64((__m128i *)(tmp + 8), ei_rq8_avx2(&rq, acc[i][1], 16 * b + 8, NULL, 0));
                memcpy(out + (ox0 + i) * m + 16 * b, tmp, (size_t)nch);
            }
        }
    }
}
#endif

#if defined(__aarch64__)
/* the requantized 16 channels of one pixel (two pairs of int32x4) into out, nch of them */
static inline void neon_store(const ei_rq *rq, const int32x4_t *acc, int ch, int nch, int8_t *out) {
    int8_t tmp[16];
    vst1_s8(tmp, ei_rq8_neon(rq, acc[0], acc[1], ch, NULL, 0));
    vst1_s8(tmp + 8, ei_rq8_neon(rq, acc[2], acc[3], ch + 8, NULL, 0));
    memcpy(out, tmp, (size_t)nch);
}

/* two pixels a step (eight accumulator chains: one pixel's four waited on the multiply-add
 * latency); a last odd pixel computes its neighbour again and stores itself alone */
static void row_neon(const stem_ctx *s, const void *const *lines, int8_t *out) {
    const ei_int8_conv_args *a = s->a;
    const stem_geo *g = &s->g;
    const int64_t step = (int64_t)a->sw * a->c, m = a->m;
    ei_rq rq = { NULL, s->mult, s->shift, NULL, a->zp_y, a->lo, a->hi };
    for (int b = 0; b < g->mb; b++) {
        const int16_t *w = (const int16_t *)s->wp + (int64_t)b * g->kp * 16;
        int nch = (int)EI_MIN((int64_t)16, m - 16 * b);
        for (int64_t ox = 0; ox < a->ow; ox += 2) {
            int64_t o1 = EI_MIN(ox + 1, (int64_t)a->ow - 1);
            int32x4_t acc[2][4];
            for (int q = 0; q < 4; q++) acc[0][q] = acc[1][q] = vld1q_s32(s->bias + 16 * b + 4 * q);
            for (int ky = 0; ky < a->kh; ky++) {
                const int16_t *l0 = (const int16_t *)lines[ky] + ox * step, *l1 = (const int16_t *)lines[ky] + o1 * step;
                const int16_t *wk = w + (int64_t)ky * g->kwc4 * 16;
                for (int v = 0; v < g->kwc; v++) {
                    int16x8_t w0 = vld1q_s16(wk + 16 * v), w1 = vld1q_s16(wk + 16 * v + 8);
                    acc[0][0] = vmlal_n_s16(acc[0][0], vget_low_s16(w0), l0[v]);
                    acc[0][1] = vmlal_high_n_s16(acc[0][1], w0, l0[v]);
                    acc[0][2] = vmlal_n_s16(acc[0][2], vget_low_s16(w1), l0[v]);
                    acc[0][3] = vmlal_high_n_s16(acc[0][3], w1, l0[v]);
                    acc[1][0] = vmlal_n_s16(acc[1][0], vget_low_s16(w0), l1[v]);
                    acc[1][1] = vmlal_high_n_s16(acc[1][1], w0, l1[v]);
                    acc[1][2] = vmlal_n_s16(acc[1][2], vget_low_s16(w1), l1[v]);
                    acc[1][3] = vmlal_high_n_s16(acc[1][3], w1, l1[v]);
                }
            }
            neon_store(&rq, acc[0], 16 * b, nch, out + ox * m + 16 * b);
            if (o1 > ox) neon_store(&rq, acc[1], 16 * b, nch, out + o1 * m + 16 * b);
        }
    }
}

__attribute__((target("arch=armv8.2-a+dotprod")))
static void row_dot(const stem_ctx *s, const void *const *lines, int8_t *out) {
    const ei_int8_conv_args *a = s->a;
    const stem_geo *g = &s->g;
    const int64_t step = (int64_t)a->sw * a->c, m = a->m;
    ei_rq rq = { NULL, s->mult, s->shift, NULL, a->zp_y, a->lo, a->hi };
    for (int b = 0; b < g->mb; b++) {
        const int8_t *w = (const int8_t *)s->wp + (int64_t)b * g->groups * 64;
        int nch = (int)EI_MIN((int64_t)16, m - 16 * b);
        for (int64_t ox = 0; ox < a->ow; ox += 2) {
            int64_t o1 = EI_MIN(ox + 1, (int64_t)a->ow - 1);
            int32x4_t acc[2][4];
            for (int q = 0; q < 4; q++) acc[0][q] = acc[1][q] = vld1q_s32(s->bias + 16 * b + 4 * q);
            for (int ky = 0; ky < a->kh; ky++) {
                const int8_t *l0 = (const int8_t *)lines[ky] + ox * step, *l1 = (const int8_t *)lines[ky] + o1 * step;
                for (int gi = 0; gi < g->grow; gi++) {
                    int8x16_t x0 = vreinterpretq_s8_s32(vdupq_n_s32(load32(l0 + 4 * gi)));
                    int8x16_t x1 = vreinterpretq_s8_s32(vdupq_n_s32(load32(l1 + 4 * gi)));
                    const int8_t *wg = w + (int64_t)(ky * g->grow + gi) * 64;
                    for (int q = 0; q < 4; q++) {
                        int8x16_t wq = vld1q_s8(wg + 16 * q);
                        acc[0][q] = vdotq_s32(acc[0][q], wq, x0);
                        acc[1][q] = vdotq_s32(acc[1][q], wq, x1);
                    }
                }
            }
            neon_store(&rq, acc[0], 16 * b, nch, out + ox * m + 16 * b);
            if (o1 > ox) neon_store(&rq, acc[1], 16 * b, nch, out + o1 * m + 16 * b);
        }
    }
}
#endif

typedef void (*row_fn)(const stem_ctx *, const void *const *, int8_t *);

static row_fn row_kernel(int kind) {
#if defined(__x86_64__)
    if (kind == KIND_VNNI) return row_vnni;
    if (kind == KIND_AVX2) return row_avx2;
#elif defined(__aarch64__)
    if (kind == KIND_DOT) return row_dot;
    if (kind == KIND_NEON) return row_neon;
#endif
    return row_scalar;
}

static void stem_rows(void *vctx, int64_t r0, int64_t r1) {
    const stem_ctx *s = (const stem_ctx *)vctx;
    const ei_int8_conv_args *a = s->a;
    const int64_t slots = line_slots(a);
    char *scr = (char *)a->scratch + (int64_t)ei_pool_slot() * s->slot_bytes;
    int8_t *qrow = (int8_t *)(scr + slots * s->g.lb);     /* the float input's row, quantized */
    const void *lines[64];
    int64_t held[64];                           /* per slot: the line's (b, iy + pt), or -1 */
    char filled[64] = { 0 };                    /* per slot: zp_x written around the image */
    (void)filled;                               /* (x86 only: the VBMI lines) */
    for (int64_t i = 0; i < slots; i++) held[i] = -1;
    int type = line_type(s->kind);
    row_fn fn = row_kernel(s->kind);
#if defined(__x86_64__)
    if (s->amx) {                   /* this thread's tiles, for this range of rows */
        fn = row_amx;
        amx_tiles_load(&s->tiles);
        if (s->held) amx_hold_weights(s);
    }
#endif
    for (int64_t r = r0; r < r1; r++) {
        int64_t b = r / a->oh, oy = r % a->oh;
        for (int ky = 0; ky < a->kh; ky++) {
            int64_t iy = oy * a->sh - a->pt + (int64_t)ky * a->dh;
            int64_t tag = (b << 32) | (iy + a->pt), slot = (iy + a->pt) % slots;     /* iy >= -pt */
            void *l = scr + slot * s->g.lb;
            if (held[slot] != tag && s->f32_vbmi && iy >= 0 && iy < a->h) {
#if defined(__x86_64__)
                /* zp_x everywhere once, then the image's columns: the padding on either side
                 * keeps its zp_x (every line writer leaves it or rewrites it so) */
                if (!filled[slot]) build_line(a, &s->g, NULL, type, l);
                filled[slot] = 1;
                ei_stem_line_f32(s, b, iy, (uint8_t *)l + (int64_t)a->pl * a->c, line_cols(a, &s->g));
                held[slot] = tag;
#endif
            }
            if (held[slot] != tag) {
                const int8_t *src = NULL;
                if (iy >= 0 && iy < a->h)
                    src = s->q ? ei_stem_quantized_row(s, b, iy, qrow) : a->x + ((b * a->h + iy) * a->w) * a->c;
                build_line(a, &s->g, src, type, l);
                held[slot] = tag;
            }
            lines[ky] = l;
        }
        int8_t *out = a->y + r * a->ow * a->m;
        fn(s, lines, out);
#if defined(__x86_64__)
        if (s->vbmi_lut && s->kind == KIND_VNNI) continue;        /* applied in registers */
#endif
        if (a->lut) ei_lut_inplace(a->lut, out, a->ow * a->m, 1, 0);
    }
#if defined(__x86_64__)
    if (s->amx) amx_tiles_release();
#endif
}

static void stem_run(const ei_int8_conv_args *a, const ei_int8_stem_q_args *q) {
    EI_CHECK(ei_stem_fits(a));
    stem_ctx s;
    s.a = a;
    s.q = q;
    s.slot_bytes = line_slots(a) * stem_geometry(a).lb + (q ? ei_stem_qrow_bytes(a) : 0);
    s.g = stem_geometry(a);
    /* weights packed for a kind this CPU (under the ISA mask) cannot run: the scalar rows read
     * any layout (the u8 bias correction is the VNNI rows' alone) */
    s.kind = stem_kind_runs(a->kind) ? a->kind : KIND_SCALAR;
    s.layout = a->kind;
    s.corr = (const int32_t *)a->wpack;
    s.wp = (const char *)a->wpack + corr_bytes(&s.g);
    for (int i = 0; i < s.g.mb * 16; i++) {
        int ok = i < a->m;
        s.bias[i] = ok ? a->bias[i] : 0; s.mult[i] = ok ? a->mult[i] : 0; s.shift[i] = ok ? a->shift[i] : 0;
    }
#if defined(__x86_64__)
    s.vbmi_lut = 0;
    /* the VNNI kind's rows on AMX tiles where this CPU (under the ISA mask) has them */
    s.amx = s.kind == KIND_VNNI && ei_int8_kind_runs(KIND_AMX);
    s.half = s.amx && a->m <= 8;
    s.pair = s.held = 0;
    if (s.amx) amx_prepare(&s, a);
    if (s.kind == KIND_VNNI) vnni_prepare(&s);
#endif
    ei_stem_input_prepare(&s);         /* (after s.kind) */
    int64_t rows = (int64_t)a->n * a->oh;
    int pixel_ns = STEM_PIXEL_NS;
#if defined(__x86_64__)
    if (s.amx) pixel_ns = s.pair ? STEM_PAIR_PIXEL_NS : STEM_AMX_PIXEL_NS;
#endif
    int64_t slots = rows * a->ow * s.g.mb * pixel_ns / STEM_SLOT_NS;
    int64_t grain = EI_MAX((int64_t)1, 4096 / EI_MAX((int64_t)a->ow * a->m, (int64_t)1));
    ei_parallel_for(rows, grain, stem_rows, &s, (int)EI_MAX((int64_t)1, EI_MIN((int64_t)a->threads, slots)));
}

/* wpack: ei_int8_stem_pack's output for a->kind; scratch: threads * ei_int8_stem_scratch bytes */
EI_API void ei_int8_stem(const ei_int8_conv_args *a) { stem_run(a, NULL); }

/* a thread slot's scratch for ei_int8_stem_q: the lines and a quantized row */
EI_API int64_t ei_int8_stem_q_scratch(const ei_int8_stem_q_args *q) {
    return ei_int8_stem_scratch(&q->conv) + ei_stem_qrow_bytes(&q->conv);
}

/* the stem on q->xf (float32), quantized with q->scale / q->zp as its line buffers fill;
 * q->conv as for ei_int8_stem (its x unused), scratch: threads * ei_int8_stem_q_scratch bytes */
EI_API void ei_int8_stem_q(const ei_int8_stem_q_args *q) {
    EI_CHECK(q->xf != NULL && (float)q->conv.zp_x == q->zp);
    stem_run(&q->conv, q);
}
