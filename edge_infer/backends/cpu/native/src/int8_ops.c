/* int8 element-wise and data-movement kernels of the MobileNetV3 / detector families:
 *
 *   ei_lut_s8            256-entry lookup tables (activations, requantizing Relu/Clip/Concat
 *                        inputs, per-channel PRelu): AVX-512 VBMI vpermi2b, AVX2 pshufb over 16
 *                        sub-tables, NEON tbl/tbx over four 64-byte quarters, scalar
 *   ei_int8_bcast        broadcast int8 Add (TFLite ADD: per-value terms from two tables, summed,
 *                        requantized) and Mul (TFLite MUL: (a - zp1)(b - zp2) requantized)
 *   ei_runs_s8           byte-run gathers (nearest Resize: runs of contiguous source bytes)
 *   ei_bilinear_s8       TFLite's integer bilinear Resize (10-bit weights, rounded / 2^20)
 *   ei_softmax_s8        int8 Softmax: integer exp table by distance to the row max, int64 sums,
 *                        exact rounded quotients (rows of <= 64, YOLO's DFL bins: AVX-512)
 *   ei_d2s_s8            the taps of a kernel = stride ConvTranspose into place (depth to space):
 *                        AVX-512 VBMI vpermt2b for runs that tile 64 bytes, else run copies
 *
 * Bit-exact with the numpy kernels (kernels/int8_elementwise.py, int8_spatial.py): tables and
 * multipliers are made there, at prepare; everything here is integer arithmetic.
 */
#include "ei_int8.h"
#include "ei_lut.h"
#include "selftest_rng.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#define PAR_BYTES 65536       /* below this an op runs on the calling thread */
#define CHUNK 16384           /* bytes of one row a thread task covers */

/* ---- lookup tables ---- */

typedef struct {
    const int8_t *x; int8_t *y;
    const int8_t *tab;          /* ntab tables of 256 entries, indexed by x's uint8 bit pattern */
    int64_t rows, inner;        /* rows of `inner` contiguous values */
    int64_t xs, ys;             /* row strides (elements) */
    int32_t ntab, per_col;      /* table of row r: r % ntab; per_col: of element j: j % ntab */
    int32_t threads, pad_;
} ei_lut_s8_args;

static void lut_scalar(const int8_t *t, const int8_t *x, int8_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = t[(uint8_t)x[i]];
}

#if defined(__x86_64__)
static int has_vbmi(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw"); }
    return v && ei_has(EI_AVX512);
}

__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static void lut_vbmi(const int8_t *t, const int8_t *x, int8_t *y, int64_t n) {
    __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
    __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
    int64_t i = 0;
    for (; i < n; i += 64) {
        __mmask64 m = n - i >= 64 ? ~0ULL : ((1ULL << (n - i)) - 1);
        __m512i u = _mm512_maskz_loadu_epi8(m, x + i);
        __m512i lo = _mm512_permutex2var_epi8(t0, u, t1), hi = _mm512_permutex2var_epi8(t2, u, t3);
        __m512i r = _mm512_mask_blend_epi8(_mm512_movepi8_mask(u), lo, hi);
        _mm512_mask_storeu_epi8(y + i, m, r);
    }
}

/* rows of n < 64 bytes (a Concat input of a few channels written into its slice): the tables
 * loaded once for all rows; row by row through lut_vbmi each short row paid the four table
 * loads and the call (80x80 rows of 24 channels: as slow at 2 threads as at 1) */
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static void lut_rows_vbmi(const int8_t *t, const int8_t *x, int64_t xs, int8_t *y, int64_t ys, int64_t n,
                          int64_t rows) {
    __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
    __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
    const __mmask64 m = (1ULL << n) - 1;
    for (int64_t r = 0; r < rows; r++, x += xs, y += ys) {
        __m512i u = _mm512_maskz_loadu_epi8(m, x);
        __m512i lo = _mm512_permutex2var_epi8(t0, u, t1), hi = _mm512_permutex2var_epi8(t2, u, t3);
        _mm512_mask_storeu_epi8(y, m, _mm512_mask_blend_epi8(_mm512_movepi8_mask(u), lo, hi));
    }
}

__attribute__((target("avx2")))
static void lut_avx2(const int8_t *t, const int8_t *x, int8_t *y, int64_t n) {
    __m256i sub[16];
    for (int k = 0; k < 16; k++) sub[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(t + 16 * k)));
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
        __m256i lo = _mm256_and_si256(u, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(u, 4), lo4);
        __m256i r = _mm256_setzero_si256();
        for (int k = 0; k < 16; k++) {
            __m256i m = _mm256_cmpeq_epi8(hi, _mm256_set1_epi8((char)k));
            r = _mm256_or_si256(r, _mm256_and_si256(m, _mm256_shuffle_epi8(sub[k], lo)));
        }
        _mm256_storeu_si256((__m256i *)(y + i), r);
    }
    lut_scalar(t, x + i, y + i, n - i);
}
#endif

#if defined(__aarch64__)
static void lut_neon(const int8_t *t, const int8_t *x, int8_t *y, int64_t n) {
    uint8x16x4_t q[4];
    for (int k = 0; k < 4; k++) q[k] = vld1q_u8_x4((const uint8_t *)t + 64 * k);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint8x16_t u = vld1q_u8((const uint8_t *)x + i);
        uint8x16_t r = vqtbl4q_u8(q[0], u);
        r = vqtbx4q_u8(r, q[1], vsubq_u8(u, vdupq_n_u8(64)));
        r = vqtbx4q_u8(r, q[2], vsubq_u8(u, vdupq_n_u8(128)));
        r = vqtbx4q_u8(r, q[3], vsubq_u8(u, vdupq_n_u8(192)));
        vst1q_u8((uint8_t *)y + i, r);
    }
    lut_scalar(t, x + i, y + i, n - i);
}
#endif

typedef void (*lut_fn)(const int8_t *tab, const int8_t *x, int8_t *y, int64_t n);

static lut_fn lut_kernel(void) {
#if defined(__x86_64__)
    if (has_vbmi()) return lut_vbmi;
    if (ei_has(EI_AVX2)) return lut_avx2;
#elif defined(__aarch64__)
    if (ei_has(EI_NEON)) return lut_neon;
#endif
    return lut_scalar;
}

/* the fused activation of the conv epilogues (ei_lut.h): rows of n bytes, ys apart, in place */
void ei_lut_inplace(const int8_t *lut, int8_t *y, int64_t n, int64_t rows, int64_t ys) {
    if (n <= 0 || rows <= 0) return;
    if (rows == 1 || ys == n) { lut_kernel()(lut, y, y, n * rows); return; }
#if defined(__x86_64__)
    if (n < 64 && lut_kernel() == lut_vbmi) { lut_rows_vbmi(lut, y, ys, y, ys, n, rows); return; }
#endif
    lut_fn f = lut_kernel();
    for (int64_t r = 0; r < rows; r++, y += ys) f(lut, y, y, n);
}

/* the SIMD the LUT kernel uses under the current ISA mask (for the plan notes) */
EI_API int ei_lut_isa(void) {
    lut_fn f = lut_kernel();
#if defined(__x86_64__)
    if (f == lut_vbmi) return 3;
    if (f == lut_avx2) return 1;
#elif defined(__aarch64__)
    if (f == lut_neon) return 2;
#endif
    return 0;
}

typedef struct { const ei_lut_s8_args *a; lut_fn fn; int64_t nchunk; } lut_ctx;

static void lut_range(void *vctx, int64_t b, int64_t e) {
    const lut_ctx *c = (const lut_ctx *)vctx;
    const ei_lut_s8_args *a = c->a;
#if defined(__x86_64__)
    if (c->fn == lut_vbmi && !a->per_col && a->ntab == 1 && a->inner < 64) {    /* nchunk 1: items are rows */
        lut_rows_vbmi(a->tab, a->x + b * a->xs, a->xs, a->y + b * a->ys, a->ys, a->inner, e - b);
        return;
    }
#endif
    for (int64_t it = b; it < e; it++) {
        int64_t r = it / c->nchunk, j0 = (it % c->nchunk) * CHUNK, len = EI_MIN((int64_t)CHUNK, a->inner - j0);
        const int8_t *x = a->x + r * a->xs + j0;
        int8_t *y = a->y + r * a->ys + j0;
        if (a->per_col) {
            for (int64_t j = 0; j < len; j++) y[j] = a->tab[((j0 + j) % a->ntab) * 256 + (uint8_t)x[j]];
        } else {
            c->fn(a->tab + (r % a->ntab) * 256, x, y, len);
        }
    }
}

EI_API void ei_lut_s8(const ei_lut_s8_args *a) {
    if (a->rows <= 0 || a->inner <= 0) return;
    lut_ctx c = { a, lut_kernel(), (a->inner + CHUNK - 1) / CHUNK };
    int64_t items = a->rows * c.nchunk;
    int t = a->rows * a->inner >= 4 * PAR_BYTES ? a->threads : 1;
    ei_parallel_for(items, 1, lut_range, &c, t);
}

/* ---- broadcast Add / Mul ---- */

typedef struct {
    const int8_t *a, *b; int8_t *y;
    const int32_t *t1, *t2;             /* Add: MBQM((v - zp_i) << 20, M_i) per value; Mul: NULL */
    int64_t shape[4], sa[4], sb[4];     /* collapsed dims (outermost first), element strides; y dense */
    int32_t op;                         /* 0 Add, 1 Mul */
    int32_t zp1, zp2, q, shift, zp_y, lo, hi, threads, pad_;
} ei_int8_bcast_args;

typedef struct { const ei_int8_bcast_args *a; int simd; } bcast_ctx;

static void bcast_range(void *vctx, int64_t r0, int64_t r1) {
    const bcast_ctx *c = (const bcast_ctx *)vctx;
    const ei_int8_bcast_args *a = c->a;
    enum { BLK = 256 };
    int32_t acc[BLK], sh[BLK], q[BLK];
    for (int i = 0; i < BLK; i++) { sh[i] = a->shift; q[i] = a->q; }
    ei_rq rq = { NULL, q, sh, NULL, a->zp_y, a->lo, a->hi };
    int64_t n = a->shape[3], s3a = a->sa[3], s3b = a->sb[3];
    for (int64_t r = r0; r < r1; r++) {
        int64_t i2 = r % a->shape[2], i1 = (r / a->shape[2]) % a->shape[1], i0 = r / (a->shape[2] * a->shape[1]);
        const int8_t *pa = a->a + i0 * a->sa[0] + i1 * a->sa[1] + i2 * a->sa[2];
        const int8_t *pb = a->b + i0 * a->sb[0] + i1 * a->sb[1] + i2 * a->sb[2];
        int8_t *y = a->y + r * n;
        for (int64_t s = 0; s < n; s += BLK) {
            int len = (int)EI_MIN((int64_t)BLK, n - s);
            const int8_t *xa = pa + s * s3a, *xb = pb + s * s3b;
            if (a->op == 0) {
                if (s3b == 0) { int32_t tb = a->t2[(uint8_t)xb[0]]; for (int i = 0; i < len; i++) acc[i] = a->t1[(uint8_t)xa[i * s3a]] + tb; }
                else if (s3a == 0) { int32_t ta = a->t1[(uint8_t)xa[0]]; for (int i = 0; i < len; i++) acc[i] = ta + a->t2[(uint8_t)xb[i * s3b]]; }
                else for (int i = 0; i < len; i++) acc[i] = a->t1[(uint8_t)xa[i * s3a]] + a->t2[(uint8_t)xb[i * s3b]];
            } else {
                if (s3a == 1 && s3b == 1) for (int i = 0; i < len; i++) acc[i] = (xa[i] - a->zp1) * (xb[i] - a->zp2);
                else if (s3a == 1 && s3b == 0) { int32_t vb = xb[0] - a->zp2; for (int i = 0; i < len; i++) acc[i] = (xa[i] - a->zp1) * vb; }
                else if (s3a == 0 && s3b == 1) { int32_t va = xa[0] - a->zp1; for (int i = 0; i < len; i++) acc[i] = va * (xb[i] - a->zp2); }
                else for (int i = 0; i < len; i++) acc[i] = (xa[i * s3a] - a->zp1) * (xb[i * s3b] - a->zp2);
            }
            ei_rq_run(c->simd, &rq, acc, 0, len, y + s, 1, NULL);
        }
    }
}

#if defined(__x86_64__)
/* Mul with AVX-512, inner strides 0 or 1 (a squeeze-excite gate: (H*W, C) x (1, C), or the
 * same shapes): 16 products (a - zp1)(b - zp2) in registers (|factors| <= 255: one vpmaddwd
 * of int16 lanes against the other factor's low halves), requantized by ei_vq_store with
 * the tensor's multiplier in every lane: the same integers as ei_rq_one. (The generic loop
 * above went through a 256-entry buffer per row: with C = 16 a row cost as much as 16
 * rows' arithmetic, 7x slower than the fp32 Mul on MobileNetV3's first gate.) */
#define GATE_VECS 64             /* gates up to 1024 channels kept in registers / on the stack */

__attribute__((target("avx512f,avx512bw")))
static void mul_rows_avx512(const ei_int8_bcast_args *a, int64_t r0, int64_t r1) {
    ei_vq16 k;
    int left = ei_vq16_prepare1(&k, a->q, a->shift);
    ei_vqc vc;
    ei_vqc_prepare(&vc, NULL, a->zp_y, a->lo, a->hi, left);
    const __m512i za = _mm512_set1_epi32(a->zp1), zb = _mm512_set1_epi32(a->zp2);
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    int64_t n = a->shape[3], s3a = a->sa[3], s3b = a->sb[3];
    int gate_b = s3a == 1 && a->sa[2] == n && s3b == 1 && a->sb[2] == 0;
    int gate_a = s3b == 1 && a->sb[2] == n && s3a == 1 && a->sa[2] == 0;
    if (n <= 16 * GATE_VECS && a->shape[0] * a->shape[1] == 1 && (gate_a || gate_b)) {
        /* a gate of any width: its vectors made once, then per 16 values of a row one load of
         * x and the product (the general loop below also re-read the gate). Gates of 1, 2, 4
         * or 8 channels have period 1 (their own path stored 16 values a store; with this one and
         * the mean's run path the text classifier's 12x48x8 SE step went 1.3 -> 0.8 us) */
        const int8_t *px = gate_b ? a->a : a->b, *pg = gate_b ? a->b : a->a;
        const __m512i zg = gate_b ? zb : za, zx = gate_b ? za : zb;
        __m512i gv[GATE_VECS + 3];              /* + the first 3 again: gv[v + i], i < 4, without a modulo */
        int nv = (int)((n + 15) / 16);
        /* the gate's period in vectors over a run of whole rows: n / gcd(n, 16) (n = 120: 15) */
        int64_t low = n & -n;                   /* the largest power of 2 dividing n */
        int period = (int)(n / (low < 16 ? low : 16));
        __mmask16 tail = (__mmask16)(n % 16 ? (1u << (n % 16)) - 1 : 0xFFFF);
        int64_t r = r0;
        if (period <= GATE_VECS) {
            /* rows r0 .. r1 - 1 are one run of bytes (every row starts at channel 0), vector i
             * of it takes gate vector i % period (lane l: channel (16 i + l) % n); four at a
             * time through ei_vq_pack4, one 64-byte store (with n = 120 the per-row loop below
             * spent a masked vector per row: 0.35 ns a value against 0.18) */
            /* the period's 16 period = lcm(n, 16) bytes: the gate repeated (16 / gcd(n, 16)
             * copies), then one load a vector (lanes filled one by one and the vector reloaded
             * took ~a sixth of the text classifier's 2x6x200 gate Mul: a store-forwarding stall
             * per vector) */
            _Alignas(64) int8_t rep[16 * GATE_VECS];
            const int8_t *src = pg;
            if (n % 16) {
                for (int64_t o = 0; o < 16 * (int64_t)period; o += n) memcpy(rep + o, pg, (size_t)n);
                src = rep;
            }
            for (int v = 0; v < period; v++)
                gv[v] = _mm512_and_si512(_mm512_sub_epi32(_mm512_cvtepi8_epi32(
                            _mm_loadu_si128((const __m128i *)(src + 16 * v))), zg), low16);
            nv = period;
            for (int v = nv; v < nv + 3; v++) gv[v] = gv[v % nv];
            const int8_t *pa = px + r0 * n;
            int8_t *y = a->y + r0 * n;
            int64_t len = (r1 - r0) * n, s = 0;
            /* v: the gate vector of the first of four, kept in [0, nv) by one subtraction of a
             * step 4 % nv (a modulo per vector, an integer division each: 56x56x16 9.9 -> 8.7 us) */
            int v = 0, step4 = 4 % nv;
#define GV(i) _mm512_madd_epi16(_mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(pa + s + 16 * (i)))), zx), \
                                gv[v + (i)])
            for (; s + 64 <= len; s += 64) {
                _mm512_storeu_si512(y + s, ei_vq_pack4(&vc, ei_vq_mbqm(GV(0), &k, vc.left), ei_vq_mbqm(GV(1), &k, vc.left),
                                                        ei_vq_mbqm(GV(2), &k, vc.left), ei_vq_mbqm(GV(3), &k, vc.left)));
                v += step4;
                v -= v >= nv ? nv : 0;
            }
            for (; s + 16 <= len; s += 16) {
                ei_vq_store(&vc, &k, (__mmask16)0xFFFF, GV(0), y + s, NULL);
                v = v + 1 == nv ? 0 : v + 1;
            }
#undef GV
            if (s < len) {              /* the run's last values (n not a multiple of 16) */
                __mmask16 m = (__mmask16)((1u << (len - s)) - 1);
                __m512i va = _mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm512_castsi512_si128(
                                 _mm512_maskz_loadu_epi8((__mmask64)m, pa + s))), zx);
                ei_vq_store(&vc, &k, m, _mm512_madd_epi16(va, gv[v]), y + s, NULL);
            }
            return;
        }
        for (int v = 0; v < nv; v++) {          /* a long period: per row, per vector */
            __mmask16 m = v == nv - 1 ? tail : (__mmask16)0xFFFF;
            gv[v] = _mm512_and_si512(_mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm512_castsi512_si128(
                        _mm512_maskz_loadu_epi8((__mmask64)m, pg + 16 * v))), zg), low16);
        }
        for (; r < r1; r++) {
            const int8_t *pa = px + r * n;
            int8_t *y = a->y + r * n;
            for (int v = 0; v < nv; v++) {
                __mmask16 m = v == nv - 1 ? tail : (__mmask16)0xFFFF;
                __m512i va = _mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm512_castsi512_si128(
                                 _mm512_maskz_loadu_epi8((__mmask64)m, pa + 16 * v))), zx);
                ei_vq_store(&vc, &k, m, _mm512_madd_epi16(va, gv[v]), y + 16 * v, NULL);
            }
        }
        return;
    }
    int64_t i2 = r0 % a->shape[2], i1 = (r0 / a->shape[2]) % a->shape[1], i0 = r0 / (a->shape[2] * a->shape[1]);
    for (int64_t r = r0; r < r1; r++) {
        const int8_t *pa = a->a + i0 * a->sa[0] + i1 * a->sa[1] + i2 * a->sa[2];
        const int8_t *pb = a->b + i0 * a->sb[0] + i1 * a->sb[1] + i2 * a->sb[2];
        int8_t *y = a->y + r * n;
        __m512i ca = _mm512_sub_epi32(_mm512_set1_epi32(pa[0]), za);
        __m512i cb = _mm512_and_si512(_mm512_sub_epi32(_mm512_set1_epi32(pb[0]), zb), low16);
        for (int64_t s = 0; s < n; s += 16) {
            __mmask16 m = n - s >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - s)) - 1);
            __m512i va = s3a ? _mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm512_castsi512_si128(
                                   _mm512_maskz_loadu_epi8((__mmask64)m, pa + s))), za) : ca;
            __m512i vb = s3b ? _mm512_and_si512(_mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm512_castsi512_si128(
                                   _mm512_maskz_loadu_epi8((__mmask64)m, pb + s))), zb), low16) : cb;
            ei_vq_store(&vc, &k, m, _mm512_madd_epi16(va, vb), y + s, NULL);
        }
        if (++i2 == a->shape[2]) { i2 = 0; if (++i1 == a->shape[1]) { i1 = 0; i0++; } }
    }
}

static void mul_range_avx512(void *vctx, int64_t r0, int64_t r1) {
    mul_rows_avx512(((const bcast_ctx *)vctx)->a, r0, r1);
}
#endif

/* the row kernel of these args under the current ISA mask */
static ei_range_fn bcast_fn(const ei_int8_bcast_args *a) {
#if defined(__x86_64__)
    if (a->op == 1 && ei_has(EI_AVX512) && a->sa[3] >= 0 && a->sa[3] <= 1 && a->sb[3] >= 0 && a->sb[3] <= 1)
        return mul_range_avx512;
#endif
    return bcast_range;
}

/* rows r0 .. r1 - 1 (of the collapsed outer dims) of ei_int8_bcast, on the calling thread: the
 * fused squeeze-excite step (se.c) runs the gated Mul in its own row shares */
void ei_int8_bcast_rows(const void *args, int64_t r0, int64_t r1) {
    const ei_int8_bcast_args *a = (const ei_int8_bcast_args *)args;
    bcast_ctx c = { a, ei_rq_simd() };
    if (r1 > r0) bcast_fn(a)(&c, r0, r1);
}

EI_API void ei_int8_bcast(const ei_int8_bcast_args *a) {
    bcast_ctx c = { a, ei_rq_simd() };
    ei_range_fn fn = bcast_fn(a);
    int64_t rows = a->shape[0] * a->shape[1] * a->shape[2], total = rows * a->shape[3];
    if (total <= 0) return;
    int64_t grain = EI_MAX((int64_t)1, 4096 / EI_MAX(a->shape[3], (int64_t)1));
    /* a squeeze-excite gate Mul costs ~0.15 ns a value with AVX-512 (the table Add more): from
     * 32K values (MobileNetV3's 56x56x16 and 14x14x240 gates) a half is worth a worker's join */
    int64_t par = fn == bcast_range ? 2 * PAR_BYTES : PAR_BYTES / 2;
    ei_parallel_for(rows, grain, fn, &c, total >= par ? a->threads : 1);
}

/* ---- byte-run gathers ---- */

typedef struct {
    const int8_t *x; int8_t *y;
    const int64_t *seg;         /* nseg triples (dst offset, src offset, length), per lead block */
    int64_t nseg, lead, x_lead, y_lead;
    int32_t threads, pad_;
} ei_runs_s8_args;

static void runs_range(void *vctx, int64_t b, int64_t e) {
    const ei_runs_s8_args *a = (const ei_runs_s8_args *)vctx;
    for (int64_t it = b; it < e; it++) {
        int64_t l = it / a->nseg, s = it % a->nseg;
        const int64_t *g = a->seg + 3 * s;
        memcpy(a->y + l * a->y_lead + g[0], a->x + l * a->x_lead + g[1], (size_t)g[2]);
    }
}

EI_API void ei_runs_s8(const ei_runs_s8_args *a) {
    int64_t items = a->lead * a->nseg;
    int t = a->lead * a->y_lead >= 4 * PAR_BYTES ? a->threads : 1;
    ei_parallel_for(items, 64, runs_range, (void *)a, t);
}

/* ---- TFLite integer bilinear Resize ---- */

typedef struct {
    const int8_t *x; int8_t *y;
    const int32_t *ry, *rx;     /* per output row / column: lower index, upper index, offset d */
    int64_t n, c, h, w, oh, ow;
    int32_t nhwc, threads;
} ei_bilinear_s8_args;

/* (v + sign(v) 2^19) / 2^20, C division (TFLite without single rounding) */
static inline int8_t bl_round(int32_t v) {
    int32_t r = (v + (v > 0 ? (1 << 19) : -(1 << 19))) / (1 << 20);
    return (int8_t)(r < -128 ? -128 : r > 127 ? 127 : r);
}

static void bilinear_range(void *vctx, int64_t b, int64_t e) {
    const ei_bilinear_s8_args *a = (const ei_bilinear_s8_args *)vctx;
    for (int64_t r = b; r < e; r++) {          /* r: (n, oy) in NHWC; (n, c, oy) in NCHW */
        int64_t oy = r % a->oh, plane = r / a->oh;
        int32_t y0 = a->ry[3 * oy], y1 = a->ry[3 * oy + 1], dy = a->ry[3 * oy + 2];
        int32_t wy0 = (1 << 10) - dy, wy1 = dy;
        if (a->nhwc) {
            const int8_t *r0 = a->x + (plane * a->h + y0) * a->w * a->c, *r1 = a->x + (plane * a->h + y1) * a->w * a->c;
            int8_t *out = a->y + (plane * a->oh + oy) * a->ow * a->c;
            for (int64_t ox = 0; ox < a->ow; ox++, out += a->c) {
                int32_t x0 = a->rx[3 * ox], x1 = a->rx[3 * ox + 1], dx = a->rx[3 * ox + 2];
                int32_t w00 = wy0 * ((1 << 10) - dx), w01 = wy0 * dx, w10 = wy1 * ((1 << 10) - dx), w11 = wy1 * dx;
                const int8_t *p00 = r0 + x0 * a->c, *p01 = r0 + x1 * a->c, *p10 = r1 + x0 * a->c, *p11 = r1 + x1 * a->c;
                for (int64_t ch = 0; ch < a->c; ch++)
                    out[ch] = bl_round(p00[ch] * w00 + p10[ch] * w10 + p01[ch] * w01 + p11[ch] * w11);
            }
        } else {
            const int8_t *xp = a->x + plane * a->h * a->w;
            int8_t *out = a->y + (plane * a->oh + oy) * a->ow;
            for (int64_t ox = 0; ox < a->ow; ox++) {
                int32_t x0 = a->rx[3 * ox], x1 = a->rx[3 * ox + 1], dx = a->rx[3 * ox + 2];
                int32_t v = xp[y0 * a->w + x0] * (wy0 * ((1 << 10) - dx)) + xp[y1 * a->w + x0] * (wy1 * ((1 << 10) - dx))
                          + xp[y0 * a->w + x1] * (wy0 * dx) + xp[y1 * a->w + x1] * (wy1 * dx);
                out[ox] = bl_round(v);
            }
        }
    }
}

EI_API void ei_bilinear_s8(const ei_bilinear_s8_args *a) {
    int64_t rows = (a->nhwc ? a->n : a->n * a->c) * a->oh;
    int64_t total = a->n * a->c * a->oh * a->ow;
    ei_parallel_for(rows, 1, bilinear_range, (void *)a, total >= 2 * PAR_BYTES ? a->threads : 1);
}

/* ---- int8 Softmax over the last axis ---- */

typedef struct {
    const int8_t *x; int8_t *y;
    const int32_t *etab;        /* 256: round(2^20 exp(-beta s d)) for d = max - x */
    int64_t rows, cols;
    int32_t threads, pad_;
} ei_softmax_s8_args;

#if defined(__x86_64__)
/* one row of 1..64 columns: the max reduced in registers, the table read by a gather, the
 * sum in int32 (64 * 2^20 < 2^31), the quotients as in softmax_s8_range's reciprocal path
 * (fused or not, the multiply-add stays within its error bound: the same floors) */
__attribute__((target("avx512f,avx512bw,avx512dq")))
static void softmax_row_avx512(const int32_t *etab, const int8_t *x, int8_t *y, int cols) {
    __mmask64 m = cols == 64 ? ~0ULL : ((1ULL << cols) - 1);
    __m512i xv = _mm512_mask_loadu_epi8(_mm512_set1_epi8(-128), m, x);
    __m256i h = _mm256_max_epi8(_mm512_castsi512_si256(xv), _mm512_extracti64x4_epi64(xv, 1));
    __m128i q = _mm_max_epi8(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    q = _mm_max_epi8(q, _mm_srli_si128(q, 8)); q = _mm_max_epi8(q, _mm_srli_si128(q, 4));
    q = _mm_max_epi8(q, _mm_srli_si128(q, 2)); q = _mm_max_epi8(q, _mm_srli_si128(q, 1));
    __m512i mx = _mm512_set1_epi32((int8_t)_mm_cvtsi128_si32(q));
    __m512i ev[4], sum = _mm512_setzero_si512();
    int nc = (cols + 15) / 16;
    for (int c = 0; c < nc; c++) {
        __mmask16 cm = (__mmask16)(m >> (16 * c));
        __m512i xi = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)&((const int8_t *)&xv)[16 * c]));
        ev[c] = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), cm, _mm512_sub_epi32(mx, xi), etab, 4);
        sum = _mm512_add_epi32(sum, ev[c]);
    }
    int32_t s = _mm512_reduce_add_epi32(sum);
    __m512d inv = _mm512_set1_pd(1.0 / (double)(2 * (int64_t)s)), nudge = _mm512_set1_pd(1.0 / (double)(1LL << 38));
    __m512i sv = _mm512_set1_epi32(s), c128 = _mm512_set1_epi32(128), c127 = _mm512_set1_epi32(127);
    for (int c = 0; c < nc; c++) {
        __m512i num = _mm512_add_epi32(_mm512_slli_epi32(ev[c], 9), sv);
        __m256i lo = _mm512_cvttpd_epi32(_mm512_add_pd(_mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(num)), inv), nudge));
        __m256i hi = _mm512_cvttpd_epi32(_mm512_add_pd(_mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(num, 1)), inv), nudge));
        __m512i v = _mm512_min_epi32(_mm512_sub_epi32(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), c128), c127);
        _mm512_mask_storeu_epi8(y + 16 * c, (__mmask64)(uint16_t)(m >> (16 * c)), _mm512_castsi128_si512(_mm512_cvtepi32_epi8(v)));
    }
}
#endif

static void softmax_s8_range(void *vctx, int64_t b, int64_t e) {
    const ei_softmax_s8_args *a = (const ei_softmax_s8_args *)vctx;
#if defined(__x86_64__)
    if (a->cols >= 1 && a->cols <= 64 && ei_has(EI_AVX512)) {
        for (int64_t r = b; r < e; r++)
            softmax_row_avx512(a->etab, a->x + r * a->cols, a->y + r * a->cols, (int)a->cols);
        return;
    }
#endif
    for (int64_t r = b; r < e; r++) {
        const int8_t *x = a->x + r * a->cols;
        int8_t *y = a->y + r * a->cols;
        int32_t mx = -128;
        for (int64_t j = 0; j < a->cols; j++) mx = x[j] > mx ? x[j] : mx;
        int64_t sum = 0;
        for (int64_t j = 0; j < a->cols; j++) sum += a->etab[mx - x[j]];
        if (sum > 0 && sum < (1LL << 30)) {
            /* floor(num / den) as floor(num * (1 / den) + 2^-38), no integer division: den =
             * 2 sum < 2^31, so a quotient k - d below an integer k has d >= 2^-31, while the
             * product's error is below 2^-44 (num / den <= 257, two roundings): the nudge
             * lifts an exact k that came out just below it and can move nothing else */
            double inv = 1.0 / (double)(2 * sum), nudge = 1.0 / (double)(1LL << 38);
            for (int64_t j = 0; j < a->cols; j++) {
                int32_t v = (int32_t)((double)(512 * (int64_t)a->etab[mx - x[j]] + sum) * inv + nudge) - 128;
                y[j] = (int8_t)(v > 127 ? 127 : v);
            }
            continue;
        }
        for (int64_t j = 0; j < a->cols; j++) {
            int64_t v = (512 * (int64_t)a->etab[mx - x[j]] + sum) / (2 * sum) - 128;
            y[j] = (int8_t)(v > 127 ? 127 : v);
        }
    }
}

EI_API void ei_softmax_s8(const ei_softmax_s8_args *a) {
    int64_t grain = EI_MAX((int64_t)1, 2048 / EI_MAX(a->cols, (int64_t)1));
    ei_parallel_for(a->rows, grain, softmax_s8_range, (void *)a, a->rows * a->cols >= PAR_BYTES ? a->threads : 1);
}

/* ---- depth to space: a kernel = stride int8 ConvTranspose's taps into place ----
 * x: rows (image rows of the input) of w pixels, each kh * seg bytes (tap row ky's seg = kw * m
 * bytes at ky * seg); y: rows * kh rows of w * seg bytes, y row r * kh + ky = the pixels' tap
 * row ky runs one after another. The generic strided copy spent most of DB's one-channel 2x2
 * head (runs of 2 bytes) on per-run overhead; here 64 output bytes are one vpermt2b over the
 * 128 source bytes they come from (kh 2, seg dividing 64), other shapes copy run by run. */
typedef struct {
    const int8_t *x; int8_t *y;
    int64_t rows, w, kh, seg;
    int32_t threads, pad_;
} ei_d2s_s8_args;

static void d2s_row_runs(const int8_t *x, int8_t *y, int64_t w, int64_t kh, int64_t seg) {
    const int64_t xs = kh * seg;
    if (seg == 2) {
        for (int64_t i = 0; i < w; i++) memcpy(y + 2 * i, x + i * xs, 2);
    } else if (seg % 16 == 0) {
        for (int64_t i = 0; i < w; i++)
            for (int64_t j = 0; j < seg; j += 16) memcpy(y + i * seg + j, x + i * xs + j, 16);
    } else {
        for (int64_t i = 0; i < w; i++) memcpy(y + i * seg, x + i * xs, (size_t)seg);
    }
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static void d2s_row_vbmi(const int8_t *x, int8_t *y, int64_t w, int64_t seg, int64_t ky) {
    uint8_t ix[64];
    for (int o = 0; o < 64; o++) ix[o] = (uint8_t)((o / seg) * 2 * seg + ky * seg + o % seg);
    const __m512i idx = _mm512_loadu_si512(ix);
    const int64_t n = w * seg;                              /* output bytes; source: 2 n from x */
    for (int64_t o = 0; o < n; o += 64) {
        int64_t left = 2 * (n - o);                         /* source bytes from x + 2 o on */
        __mmask64 m0 = left >= 64 ? ~0ULL : (1ULL << left) - 1;
        __mmask64 m1 = left >= 128 ? ~0ULL : (left > 64 ? (1ULL << (left - 64)) - 1 : 0);
        __m512i a = _mm512_maskz_loadu_epi8(m0, x + 2 * o), b = _mm512_maskz_loadu_epi8(m1, x + 2 * o + 64);
        __mmask64 ms = n - o >= 64 ? ~0ULL : (1ULL << (n - o)) - 1;
        _mm512_mask_storeu_epi8(y + o, ms, _mm512_permutex2var_epi8(a, idx, b));
    }
}
#endif

static void d2s_range(void *vctx, int64_t b, int64_t e) {
    const ei_d2s_s8_args *a = (const ei_d2s_s8_args *)vctx;
    for (int64_t q = b; q < e; q++) {                       /* output row q = r * kh + ky */
        int64_t r = q / a->kh, ky = q - r * a->kh;
        const int8_t *x = a->x + r * a->w * a->kh * a->seg + ky * a->seg;
        int8_t *y = a->y + q * a->w * a->seg;
#if defined(__x86_64__)
        if (a->kh == 2 && 64 % a->seg == 0 && has_vbmi()) {
            d2s_row_vbmi(x - ky * a->seg, y, a->w, a->seg, ky);
            continue;
        }
#endif
        d2s_row_runs(x, y, a->w, a->kh, a->seg);
    }
}

EI_API void ei_d2s_s8(const ei_d2s_s8_args *a) {
    EI_CHECK(a->rows >= 0 && a->w >= 0 && a->kh >= 1 && a->seg >= 1);
    int64_t items = a->rows * a->kh, bytes = items * a->w * a->seg;
    int t = bytes >= 2 * PAR_BYTES ? a->threads : 1;
    ei_parallel_for(items, EI_MAX(1, items * (PAR_BYTES / 4) / EI_MAX(bytes, 1)), d2s_range, (void *)a, t);
}

/* ---- self-test: the dispatched paths vs plain loops, seeded random data ---- */

EI_API int ei_selftest_int8_ops(void) {
    int fails = 0;
    st_state = 4242;
    enum { N = 3 * 4096 + 77 };
    static int8_t x[N], b[N], y0[N], y1[N], tab[3 * 256];
    for (int i = 0; i < N; i++) { x[i] = (int8_t)st_rand(); b[i] = (int8_t)st_rand(); }
    for (int i = 0; i < 3 * 256; i++) tab[i] = (int8_t)st_rand();
    /* LUT: one table, rows with strides, per-row and per-column tables */
    for (int mode = 0; mode < 3; mode++) {
        int64_t rows = mode == 0 ? 1 : 7, inner = mode == 0 ? N : 1000 + mode;
        ei_lut_s8_args a = { x, y1, tab, rows, inner, inner + (mode ? 3 : 0), inner + (mode ? 5 : 0), mode == 0 ? 1 : 3, mode == 2, 2, 0 };
        memset(y0, 0, N); memset(y1, 0, N);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < inner; j++) {
                int t = mode == 2 ? (int)(j % 3) : (int)(r % a.ntab);
                y0[r * a.ys + j] = tab[t * 256 + (uint8_t)x[r * a.xs + j]];
            }
        if ((rows - 1) * EI_MAX(a.xs, a.ys) + inner > N) return fails + 1000;
        ei_lut_s8(&a);
        fails += memcmp(y0, y1, N) != 0;
    }
    /* broadcast Add / Mul: (R, C) x (1, C) and (R, C) x (R, 1) */
    int32_t t1[256], t2[256];
    for (int i = 0; i < 256; i++) { t1[i] = (int32_t)(st_rand() % 2000000) - 1000000; t2[i] = (int32_t)(st_rand() % 2000000) - 1000000; }
    for (int trial = 0; trial < 64; trial++) {
        /* the gate rows of MobileNetV3 sizes; 32, 48 and 240: 2, 3 and 15 whole vectors; 9 and
         * 120: a gate period of 9 and 15 vectors, a masked last one; 300: a period too long */
        static const int64_t widths[8] = { 300, 16, 9, 8, 32, 48, 240, 120 };
        int64_t R = 37, C = widths[(trial >> 2) & 7];
        int col = trial & 1, op = (trial >> 1) & 1, swap = trial >> 5;      /* swap: the gate is input a */
        ei_int8_bcast_args a;
        memset(&a, 0, sizeof a);
        a.a = swap ? b : x; a.b = swap ? x : b; a.y = y1; a.t1 = t1; a.t2 = t2; a.op = op;
        a.shape[0] = a.shape[1] = 1; a.shape[2] = R; a.shape[3] = C;
        int64_t *sx = swap ? a.sb : a.sa, *sg = swap ? a.sa : a.sb;
        sx[2] = C; sx[3] = 1;
        sg[2] = col ? 0 : 1; sg[3] = col ? 1 : 0;
        a.zp1 = (int32_t)(st_rand() % 256) - 128; a.zp2 = (int32_t)(st_rand() % 256) - 128;
        a.q = (int32_t)((1u << 30) + (st_rand() & ((1u << 30) - 1))); a.shift = op ? 2 - (int32_t)(st_rand() % 12) : -20;
        a.zp_y = (int32_t)(st_rand() % 256) - 128; a.lo = -128; a.hi = 127; a.threads = 2;
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < C; j++) {
                int8_t vx = x[r * C + j], vg = col ? b[j] : b[r];
                int8_t va = swap ? vg : vx, vb = swap ? vx : vg;
                int32_t acc = op ? (va - a.zp1) * (vb - a.zp2) : t1[(uint8_t)va] + t2[(uint8_t)vb];
                y0[r * C + j] = ei_rq_one(acc, a.q, a.shift, a.zp_y, 0, -128, 127);
            }
        ei_int8_bcast(&a);
        fails += memcmp(y0, y1, (size_t)(R * C)) != 0;
    }
    return fails;
}
