/* The u8 im2col of the int8 GEMM (int8_gemm.c) on NHWC inputs, x86-64 with AVX-512: rows of
 * x + 128 (x ^ 0x80) zero-padded to k4 bytes, the layout its VNNI and AMX kernels read. */
#include "int8_gemm.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

/* n bytes of x ^ 0x80 / of v, n <= 64 in one masked load/store */
__attribute__((target("avx512f,avx512bw")))
static inline void xor80_short(uint8_t *d, const int8_t *s, int n) {
    if (n > 64) { ei_xor80(d, s, n); return; }
    __mmask64 m = n == 64 ? ~0ULL : ((1ULL << n) - 1);
    _mm512_mask_storeu_epi8(d, m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, s), _mm512_set1_epi8((char)0x80)));
}

__attribute__((target("avx512f,avx512bw")))
static inline void fill_short(uint8_t *d, uint8_t v, int n) {
    if (n > 64) { memset(d, v, (size_t)n); return; }
    _mm512_mask_storeu_epi8(d, n == 64 ? ~0ULL : ((1ULL << n) - 1), _mm512_set1_epi8((char)v));
}

static int has_vbmi(void) {
    static int v = -1;
    if (v < 0) { __builtin_cpu_init(); v = __builtin_cpu_supports("avx512vbmi"); }
    return v && ei_has(EI_AVX512);
}

/* im2col rows of n output pixels from column ox on, every tap inside the image (kh <= 3 rows
 * xrow, dilation 1, K <= 64: one 64-byte u8 row each): a 64-byte window of each input row
 * serves several pixels; a pixel's row is one vpermt2b over the first two windows' bytes and a
 * masked vpermb from the third, then x ^ 0x80 and the zero padding past K under a mask. The
 * copy tap row by tap row cost ~20 operations a pixel (the first layers of MobileNets: 60% of
 * their time was this copy). */
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static void im2col_small(const ei_int8_conv_args *a, const int8_t *const *xrow, int ox, int n, uint8_t *d, int64_t k4) {
    const int C = a->c, span = a->kw * C, step = a->sw * C, K = a->kh * span;
    const int64_t rowbytes = (int64_t)a->w * C;
    uint8_t i01[64], i2[64];
    for (int t = 0; t < 64; t++) {
        i01[t] = (uint8_t)(t < span ? t : (t < 2 * span ? 64 + t - span : 0));
        i2[t] = (uint8_t)(t >= 2 * span && t < 3 * span ? t - 2 * span : 0);
    }
    const __m512i b01 = _mm512_loadu_si512(i01), b2 = _mm512_loadu_si512(i2), k80 = _mm512_set1_epi8((char)0x80);
    const __mmask64 kmask = K == 64 ? ~0ULL : (1ULL << K) - 1;
    const __mmask64 m2 = a->kh == 3 ? kmask & ~((1ULL << 2 * span) - 1) : 0;
    const int per = (64 - span) / step + 1;             /* pixels one window serves */
    int64_t off = (int64_t)(ox * a->sw - a->pl) * C;
    for (int i = 0; i < n; off += (int64_t)per * step) {
        int64_t left = rowbytes - off;
        __mmask64 lm = left >= 64 ? ~0ULL : (1ULL << left) - 1;
        __m512i w0 = _mm512_maskz_loadu_epi8(lm, xrow[0] + off);
        __m512i w1 = a->kh > 1 ? _mm512_maskz_loadu_epi8(lm, xrow[1] + off) : w0;
        __m512i w2 = a->kh > 2 ? _mm512_maskz_loadu_epi8(lm, xrow[2] + off) : w0;
        for (int j = 0; j < per && i < n; j++, i++) {
            __m512i o = _mm512_set1_epi8((char)(j * step));
            __m512i v = _mm512_permutex2var_epi8(w0, _mm512_add_epi8(b01, o), w1);
            if (m2) v = _mm512_mask_permutexvar_epi8(v, m2, _mm512_add_epi8(b2, o), w2);
            _mm512_storeu_si512(d + i * k4, _mm512_maskz_mov_epi8(kmask, _mm512_xor_si512(v, k80)));
        }
    }
}

/* im2col of rows r0 .. r0 + nrows - 1 of an NHWC input straight into u8 (x + 128) rows of
 * stride k4 (zero-padded past K): a kernel row inside the image is kw * C contiguous bytes
 * (dilation 1), copied at once; the pixel position advances without divisions */
__attribute__((target("avx512f,avx512bw")))
void ei_im2col_u8_nhwc(const ei_int8_conv_args *a, int64_t P, int K, int64_t r0, int nrows, uint8_t *ub, int64_t k4) {
    int64_t b = r0 / P;
    int pix = (int)(r0 - b * P), oy = pix / a->ow, ox = pix - oy * a->ow;
    int C = a->c, span = a->kw * C;
    uint8_t pad = (uint8_t)(a->zp_x ^ 0x80);
    int padn = (int)(k4 - K);
    /* the input rows of an output row looked up once; a kernel row inside the image is
     * whole 64-byte blocks and one masked block (one masked load and store for the
     * small-channel 3x3 layers of detectors) */
    int nfull = (span - 1) / 64, tail = span - 64 * nfull;
    __mmask64 ms = tail == 64 ? ~0ULL : ((1ULL << tail) - 1), mp = padn == 64 ? ~0ULL : ((1ULL << padn) - 1);
    const __m512i k80 = _mm512_set1_epi8((char)0x80), vpad = _mm512_set1_epi8((char)pad);
    const int8_t *xrow[a->kh > 0 ? a->kh : 1];
    /* small windows (a first layer's 3x3 over 3 channels: K = 27 <= 64) by permutes */
    int small = K <= 64 && k4 == 64 && a->kh <= 3 && a->dw == 1 && has_vbmi();
    for (int i = 0; i < nrows;) {
        int run = EI_MIN(nrows - i, a->ow - ox);
        int rows_in = 1;
        for (int ky = 0; ky < a->kh; ky++) {
            int iy = oy * a->sh - a->pt + ky * a->dh;
            xrow[ky] = (iy < 0 || iy >= a->h) ? NULL : a->x + ((b * a->h + iy) * a->w) * (int64_t)C;
            rows_in &= xrow[ky] != NULL;
        }
        int ja = run, jb = run;             /* pixels [ja, jb) of this run go to im2col_small */
        if (small && rows_in) {
            /* output columns [oxa, oxb) read every kernel column inside the row */
            int oxa = (a->pl + a->sw - 1) / a->sw, lastx = a->w - a->kw + a->pl;
            int oxb = lastx < 0 ? 0 : lastx / a->sw + 1;
            ja = EI_MAX(0, oxa - ox); jb = EI_MIN(run, oxb - ox);
            if (ja >= jb) ja = jb = run;
        }
        for (int j = 0; j < run; j++, i++, ox++) {
            if (j == ja && ja < jb) {
                im2col_small(a, xrow, ox, jb - ja, ub + i * k4, k4);
                i += jb - ja - 1; ox += jb - ja - 1; j = jb - 1;
                continue;
            }
            uint8_t *d = ub + i * k4;
            int ix0 = ox * a->sw - a->pl;
            int inside = ix0 >= 0 && ix0 + (a->kw - 1) * a->dw < a->w && (a->dw == 1 || a->kw == 1);
            for (int ky = 0; ky < a->kh; ky++, d += span) {
                if (!xrow[ky]) {
                    for (int q = 0; q < nfull; q++) _mm512_storeu_si512(d + 64 * q, vpad);
                    _mm512_mask_storeu_epi8(d + 64 * nfull, ms, vpad);
                    continue;
                }
                if (inside) {
                    const int8_t *src = xrow[ky] + (int64_t)ix0 * C;
                    for (int q = 0; q < nfull; q++)
                        _mm512_storeu_si512(d + 64 * q, _mm512_xor_si512(_mm512_loadu_si512(src + 64 * q), k80));
                    __m512i v = _mm512_maskz_loadu_epi8(ms, src + 64 * nfull);
                    _mm512_mask_storeu_epi8(d + 64 * nfull, ms, _mm512_xor_si512(v, k80));
                    continue;
                }
                for (int kx = 0; kx < a->kw; kx++) {
                    int ix = ix0 + kx * a->dw;
                    if (ix < 0 || ix >= a->w) fill_short(d + kx * C, pad, C);
                    else xor80_short(d + kx * C, xrow[ky] + (int64_t)ix * C, C);
                }
            }
            if (padn) _mm512_mask_storeu_epi8(ub + i * k4 + K, mp, _mm512_setzero_si512());
        }
        if (ox == a->ow) { ox = 0; if (++oy == a->oh) { oy = 0; b++; } }
    }
}
#endif

