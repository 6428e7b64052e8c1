/* fp32 2-D max / average pooling (NCHW and NHWC) and global average / max pooling.
 *
 * The taps of a window are summed in kernels/pool.py's order (each column of kernel rows
 * first, then the columns left to right; padding contributes nothing), and the average is
 * sum * (float)(1 / count) as there, so average pooling is bit-identical to the numpy kernel;
 * max is order-free. NHWC vectorizes over channels (AVX2 / NEON), NCHW runs scalar per plane.
 * Threads split output rows (NHWC: n*oh) or planes (NCHW: n*c).
 */
#pragma GCC optimize("fp-contract=off", "no-math-errno")
#include "simd_f32.h"
#include "elementwise.h"

#include <string.h>

#define NEG_INF (-__builtin_inff())

static inline float fmaxn(float a, float b) { return (a != a || a > b) ? a : b; }

/* the divisor count of one output position along one dim (kernels/pool.py _window_counts) */
static inline int64_t tap_count(int64_t o, int s, int p, int pe, int d, int k, int64_t size, int include_pad) {
    int64_t start = o * s - p, lo = include_pad ? -p : 0, hi = include_pad ? size + pe : size, c = 0;
    for (int t = 0; t < k; t++) {
        int64_t i = start + (int64_t)t * d;
        c += i >= lo && i < hi;
    }
    return c;
}

static inline float avg_scale(const ei_pool2d_f32_args *a, int64_t oy, int64_t ox) {
    int64_t ch = tap_count(oy, a->sh, a->pt, a->pb, a->dh, a->kh, a->h, a->count_include_pad);
    int64_t cw = tap_count(ox, a->sw, a->pl, a->pr, a->dw, a->kw, a->w, a->count_include_pad);
    return (float)(1.0 / (double)(ch * cw));
}

/* NCHW, separable as kernels/pool.py: per output row, reduce the kernel's input rows into one
 * row (contiguous, vectorized), then reduce each window of that row; the same order of
 * additions as the numpy kernel. tmp holds one input row. */
static void vpass_scalar(int avg, const float *x, int64_t w, int64_t rstride, int nrows, float *tmp) {
    if (nrows == 0) { for (int64_t i = 0; i < w; i++) tmp[i] = avg ? 0.0f : NEG_INF; return; }
    memcpy(tmp, x, (size_t)w * 4);
    for (int k = 1; k < nrows; k++) {
        const float *r = x + k * rstride;
        if (avg) for (int64_t i = 0; i < w; i++) tmp[i] = tmp[i] + r[i];
        else for (int64_t i = 0; i < w; i++) tmp[i] = fmaxn(r[i], tmp[i]);
    }
}

#ifdef EI_SIMD_READY
static VATTR void VNAME(vpass)(int avg, const float *x, int64_t w, int64_t rstride, int nrows, float *tmp) {
    if (nrows == 0) { vpass_scalar(avg, x, w, rstride, nrows, tmp); return; }
    memcpy(tmp, x, (size_t)w * 4);
    for (int k = 1; k < nrows; k++) {
        const float *r = x + k * rstride;
        int64_t i = 0;
        if (avg) {
            for (; i + VW <= w; i += VW) vstore(tmp + i, vadd(vload(tmp + i), vload(r + i)));
            for (; i < w; i++) tmp[i] = tmp[i] + r[i];
        } else {
            for (; i + VW <= w; i += VW) vstore(tmp + i, vmaxn(vload(r + i), vload(tmp + i)));
            for (; i < w; i++) tmp[i] = fmaxn(r[i], tmp[i]);
        }
    }
}
#endif

#define ROW_MAX 4096      /* widest input row (and output row) through the stack buffers */

/* one output row from the reduced input row tmp; x0/x1: tap ranges per ox, inv: divisors */
static void hpass_scalar(const ei_pool2d_f32_args *a, const float *tmp, const short *x0, const short *x1,
                         const float *inv, float *y, int64_t ob, int64_t oe) {
    int avg = a->op == EI_POOL_AVG;
    for (int64_t ox = ob; ox < oe; ox++) {
        const float *t = tmp + ox * a->sw - a->pl;
        float acc;
        if (x0[ox] == x1[ox]) acc = avg ? 0.0f : NEG_INF;
        else {
            acc = t[(int64_t)x0[ox] * a->dw];
            for (int kx = x0[ox] + 1; kx < x1[ox]; kx++)
                acc = avg ? acc + t[(int64_t)kx * a->dw] : fmaxn(t[(int64_t)kx * a->dw], acc);
        }
        y[ox] = avg ? acc * inv[ox] : acc;
    }
}

#ifdef EI_SIMD_READY
/* stride 1: vectors over ox where the whole window is inside the row, scalar at the edges */
static VATTR void VNAME(hpass1)(const ei_pool2d_f32_args *a, const float *tmp, const short *x0, const short *x1,
                                const float *inv, float *y) {
    int avg = a->op == EI_POOL_AVG, kw = a->kw;
    int64_t ox = 0, ow = a->ow;
    while (ox < ow && (x0[ox] != 0 || x1[ox] != kw)) ox++;          /* first interior output */
    int64_t lo = ox, hi = lo;
    while (hi < ow && x0[hi] == 0 && x1[hi] == kw) hi++;
    hpass_scalar(a, tmp, x0, x1, inv, y, 0, lo);                      /* left edge */
    for (ox = lo; ox + VW <= hi; ox += VW) {
        const float *t = tmp + ox - a->pl;
        VF acc = vload(t);
        for (int kx = 1; kx < kw; kx++) {
            VF v = vload(t + (int64_t)kx * a->dw);
            acc = avg ? vadd(acc, v) : vmaxn(v, acc);
        }
        vstore(y + ox, avg ? vmul(acc, vload(inv + ox)) : acc);
    }
    hpass_scalar(a, tmp, x0, x1, inv, y, ox, ow);                     /* right edge */
}
#endif

static void pool_nchw_planes(const ei_pool2d_f32_args *a, int64_t pb, int64_t pe) {
    int avg = a->op == EI_POOL_AVG;
    float tmp[ROW_MAX], inv[ROW_MAX];
    short xlo[ROW_MAX], xhi[ROW_MAX];
    int cw[ROW_MAX];
    for (int64_t ox = 0; ox < a->ow; ox++) {
        int l, h;
        ei_tap_range(ox, a->sw, a->pl, a->dw, a->kw, a->w, &l, &h);
        xlo[ox] = (short)l; xhi[ox] = (short)h;
        cw[ox] = (int)tap_count(ox, a->sw, a->pl, a->pr, a->dw, a->kw, a->w, a->count_include_pad);
    }
#ifdef EI_SIMD_READY
    int simd = ei_has(EI_SIMD_ISA);
#endif
    for (int64_t pl = pb; pl < pe; pl++) {
        const float *x = a->x + pl * a->h * a->w;
        float *y = a->y + pl * a->oh * a->ow;
        for (int64_t oy = 0; oy < a->oh; oy++) {
            int y0, y1;
            ei_tap_range(oy, a->sh, a->pt, a->dh, a->kh, a->h, &y0, &y1);
            if (avg) {      /* the numpy kernel's divisor: float32 of 1 / (count_h * count_w) */
                int64_t ch = tap_count(oy, a->sh, a->pt, a->pb, a->dh, a->kh, a->h, a->count_include_pad);
                for (int64_t ox = 0; ox < a->ow; ox++) inv[ox] = (float)(1.0 / (double)(ch * cw[ox]));
            }
            const float *r0 = x + (oy * a->sh - a->pt + (int64_t)y0 * a->dh) * a->w;
#ifdef EI_SIMD_READY
            if (simd) {
                VNAME(vpass)(avg, r0, a->w, (int64_t)a->dh * a->w, y1 - y0, tmp);
                if (a->sw == 1) VNAME(hpass1)(a, tmp, xlo, xhi, inv, y + oy * a->ow);
                else hpass_scalar(a, tmp, xlo, xhi, inv, y + oy * a->ow, 0, a->ow);
                continue;
            }
#endif
            vpass_scalar(avg, r0, a->w, (int64_t)a->dh * a->w, y1 - y0, tmp);
            hpass_scalar(a, tmp, xlo, xhi, inv, y + oy * a->ow, 0, a->ow);
        }
    }
}

/* NCHW rows wider than ROW_MAX: direct window loops */
static void pool_nchw_direct(const ei_pool2d_f32_args *a, int64_t pb, int64_t pe) {
    int avg = a->op == EI_POOL_AVG;
    for (int64_t pl = pb; pl < pe; pl++) {
        const float *x = a->x + pl * a->h * a->w;
        float *y = a->y + pl * a->oh * a->ow;
        for (int64_t oy = 0; oy < a->oh; oy++) {
            int y0, y1;
            ei_tap_range(oy, a->sh, a->pt, a->dh, a->kh, a->h, &y0, &y1);
            int64_t iy0 = oy * a->sh - a->pt;
            for (int64_t ox = 0; ox < a->ow; ox++) {
                int x0, x1;
                ei_tap_range(ox, a->sw, a->pl, a->dw, a->kw, a->w, &x0, &x1);
                int64_t ix0 = ox * a->sw - a->pl;
                float acc = avg ? 0.0f : NEG_INF;
                for (int kx = x0; kx < x1; kx++) {
                    const float *col = x + ix0 + (int64_t)kx * a->dw;
                    if (avg) {
                        float s = 0.0f;
                        for (int ky = y0; ky < y1; ky++) s += col[(iy0 + (int64_t)ky * a->dh) * a->w];
                        acc += s;
                    } else {
                        for (int ky = y0; ky < y1; ky++) acc = fmaxn(col[(iy0 + (int64_t)ky * a->dh) * a->w], acc);
                    }
                }
                y[oy * a->ow + ox] = avg ? acc * avg_scale(a, oy, ox) : acc;
            }
        }
    }
}

/* NHWC, scalar: one output row (n, oy) at a time, channels innermost */
static void pool_nhwc_rows_scalar(const ei_pool2d_f32_args *a, int64_t rb, int64_t re) {
    int avg = a->op == EI_POOL_AVG;
    int64_t C = a->c;
    for (int64_t r = rb; r < re; r++) {
        int64_t n = r / a->oh, oy = r % a->oh;
        int y0, y1;
        ei_tap_range(oy, a->sh, a->pt, a->dh, a->kh, a->h, &y0, &y1);
        int64_t iy0 = oy * a->sh - a->pt;
        const float *xn = a->x + n * a->h * a->w * C;
        for (int64_t ox = 0; ox < a->ow; ox++) {
            int x0, x1;
            ei_tap_range(ox, a->sw, a->pl, a->dw, a->kw, a->w, &x0, &x1);
            int64_t ix0 = ox * a->sw - a->pl;
            float *y = a->y + ((n * a->oh + oy) * a->ow + ox) * C;
            float sc = avg ? avg_scale(a, oy, ox) : 1.0f;
            for (int64_t c = 0; c < C; c++) {
                float acc = avg ? 0.0f : NEG_INF;
                for (int kx = x0; kx < x1; kx++) {
                    const float *col = xn + (ix0 + (int64_t)kx * a->dw) * C + c;
                    if (avg) {
                        float s = 0.0f;
                        for (int ky = y0; ky < y1; ky++) s += col[(iy0 + (int64_t)ky * a->dh) * a->w * C];
                        acc += s;
                    } else {
                        for (int ky = y0; ky < y1; ky++) acc = fmaxn(col[(iy0 + (int64_t)ky * a->dh) * a->w * C], acc);
                    }
                }
                y[c] = avg ? acc * sc : acc;
            }
        }
    }
}

#ifdef EI_SIMD_READY
static VATTR void VNAME(pool_nhwc_rows)(const ei_pool2d_f32_args *a, int64_t rb, int64_t re) {
    int avg = a->op == EI_POOL_AVG;
    int64_t C = a->c, cv = C / VW * VW;
    int64_t row_stride = a->w * C;
    for (int64_t r = rb; r < re; r++) {
        int64_t n = r / a->oh, oy = r % a->oh;
        int y0, y1;
        ei_tap_range(oy, a->sh, a->pt, a->dh, a->kh, a->h, &y0, &y1);
        int64_t iy0 = oy * a->sh - a->pt;
        const float *xn = a->x + n * a->h * row_stride;
        for (int64_t ox = 0; ox < a->ow; ox++) {
            int x0, x1;
            ei_tap_range(ox, a->sw, a->pl, a->dw, a->kw, a->w, &x0, &x1);
            int64_t ix0 = ox * a->sw - a->pl;
            float *y = a->y + ((n * a->oh + oy) * a->ow + ox) * C;
            float sc = avg ? avg_scale(a, oy, ox) : 1.0f;
            for (int64_t c = 0; c < cv; c += VW) {
                VF acc = avg ? vset(0.0f) : vset(NEG_INF);
                for (int kx = x0; kx < x1; kx++) {
                    const float *col = xn + (ix0 + (int64_t)kx * a->dw) * C + c;
                    if (avg) {
                        VF s = vset(0.0f);
                        for (int ky = y0; ky < y1; ky++) s = vadd(s, vload(col + (iy0 + (int64_t)ky * a->dh) * row_stride));
                        acc = vadd(acc, s);
                    } else {
                        for (int ky = y0; ky < y1; ky++) acc = vmaxn(vload(col + (iy0 + (int64_t)ky * a->dh) * row_stride), acc);
                    }
                }
                vstore(y + c, avg ? vmul(acc, vset(sc)) : acc);
            }
            for (int64_t c = cv; c < C; c++) {     /* channel tail */
                float acc = avg ? 0.0f : NEG_INF;
                for (int kx = x0; kx < x1; kx++) {
                    const float *col = xn + (ix0 + (int64_t)kx * a->dw) * C + c;
                    if (avg) {
                        float s = 0.0f;
                        for (int ky = y0; ky < y1; ky++) s += col[(iy0 + (int64_t)ky * a->dh) * row_stride];
                        acc += s;
                    } else {
                        for (int ky = y0; ky < y1; ky++) acc = fmaxn(col[(iy0 + (int64_t)ky * a->dh) * row_stride], acc);
                    }
                }
                y[c] = avg ? acc * sc : acc;
            }
        }
    }
}
#endif

#if defined(__x86_64__)
/* ---- NHWC max: AVX-512 and AVX2 (pool_max_body.h) ---- */
#define MV __m512
#define ML 16
#define MATTR __attribute__((target("avx512f")))
#define MN(f) f##_avx512
#define mload(p) _mm512_loadu_ps(p)
#define mstore(p, v) _mm512_storeu_ps((p), (v))
#define mset(c) _mm512_set1_ps(c)
#define MNAN_T __mmask16
#define MNAN_ZERO 0
#define MACC(x, acc, f) do { MV x_ = (x); acc = _mm512_max_ps(x_, acc); f |= _mm512_cmp_ps_mask(x_, x_, _CMP_UNORD_Q); } while (0)
#define MFINISH(acc, f) _mm512_mask_mov_ps((acc), (f), _mm512_set1_ps(__builtin_nanf("")))
#include "pool_max_body.h"
#endif

#ifdef EI_SIMD_READY
/* AVX2 (NEON): the vector vocabulary of simd_f32.h; x86's maxps keeps its second operand on a
 * NaN, so a NaN of x is flagged apart (NEON's fmax propagates it: no flags) */
#define MV VF
#define ML VW
#define MATTR VATTR
#define MN(f) VNAME(f)
#define mload(p) vload(p)
#define mstore(p, v) vstore((p), (v))
#define mset(c) vset(c)
#if defined(__x86_64__)
#define MNAN_T __m256
#define MNAN_ZERO _mm256_setzero_ps()
#define MACC(x, acc, f) do { MV x_ = (x); acc = _mm256_max_ps(x_, acc); f = _mm256_or_ps(f, _mm256_cmp_ps(x_, x_, _CMP_UNORD_Q)); } while (0)
#define MFINISH(acc, f) _mm256_blendv_ps((acc), _mm256_set1_ps(__builtin_nanf("")), (f))
#else
#define MNAN_T int
#define MNAN_ZERO 0
#define MACC(x, acc, f) do { (void)(f); acc = vmaxq_f32((x), acc); } while (0)
#define MFINISH(acc, f) (acc)
#endif
#include "pool_max_body.h"
#endif

static void pool_range(void *ctx, int64_t b, int64_t e) {
    const ei_pool2d_f32_args *a = (const ei_pool2d_f32_args *)ctx;
    if (!a->nhwc) {
        if (a->w <= ROW_MAX && a->ow <= ROW_MAX && a->kw < 32768) pool_nchw_planes(a, b, e);
        else pool_nchw_direct(a, b, e);
        return;
    }
#if defined(__x86_64__)
    if (a->op == EI_POOL_MAX && ei_has(EI_AVX512)) { max_nhwc_rows_avx512(a, b, e); return; }
#endif
#ifdef EI_SIMD_READY
    if (a->op == EI_POOL_MAX && ei_has(EI_SIMD_ISA)) { VNAME(max_nhwc_rows)(a, b, e); return; }
    if (ei_has(EI_SIMD_ISA)) { VNAME(pool_nhwc_rows)(a, b, e); return; }
#endif
    pool_nhwc_rows_scalar(a, b, e);
}

void ei_pool2d_f32(const ei_pool2d_f32_args *a) {
    EI_CHECK(a->n >= 0 && a->c >= 0 && a->h >= 0 && a->w >= 0 && a->oh >= 0 && a->ow >= 0);
    EI_CHECK(a->kh >= 1 && a->kw >= 1 && a->sh >= 1 && a->sw >= 1 && a->dh >= 1 && a->dw >= 1);
    EI_CHECK(a->pt >= 0 && a->pl >= 0 && a->pb >= 0 && a->pr >= 0);
    EI_CHECK(a->op == EI_POOL_MAX || a->op == EI_POOL_AVG);
    /* every output window starts inside the padded input */
    EI_CHECK(a->oh == 0 || (a->oh - 1) * (int64_t)a->sh < a->h + a->pt + a->pb);
    EI_CHECK(a->ow == 0 || (a->ow - 1) * (int64_t)a->sw < a->w + a->pl + a->pr);
    EI_CHECK(a->x != NULL && a->y != NULL);
    int64_t units = a->nhwc ? a->n * a->oh : a->n * a->c;
    int64_t per = a->nhwc ? a->ow * a->c : a->oh * a->ow;
    int64_t work = units * per * a->kh * a->kw;
    if (units <= 0 || per <= 0) return;
    if (a->threads <= 1 || work < 65536) { pool_range((void *)a, 0, units); return; }
    ei_parallel_for(units, EI_MAX(1, 65536 / EI_MAX(per * a->kh * a->kw, 1)), pool_range, (void *)a, a->threads);
}

/* ---- global pools -------------------------------------------------------------------- */

static void global_nchw(const ei_global_pool_f32_args *a, int64_t b, int64_t e) {
    int64_t P = a->p;
    for (int64_t pl = b; pl < e; pl++) {
        const float *x = a->x + pl * P;
        float r;
        if (a->op == EI_POOL_AVG) {
            float s[8] = {0};
            int64_t i = 0;
            for (; i + 8 <= P; i += 8)
                for (int k = 0; k < 8; k++) s[k] += x[i + k];
            for (; i < P; i++) s[0] += x[i];
            r = (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) / (float)P;
        } else {
            r = x[0];
            for (int64_t i = 1; i < P; i++) r = fmaxn(r, x[i]);
        }
        a->y[pl] = r;
    }
}

/* NHWC: accumulate the P channel rows in order, as numpy's reduction over axis 1 does */
static void global_nhwc_scalar(const ei_global_pool_f32_args *a, int64_t b, int64_t e) {
    int64_t C = a->c, P = a->p;
    for (int64_t n = b; n < e; n++) {
        const float *x = a->x + n * P * C;
        float *y = a->y + n * C;
        memcpy(y, x, (size_t)C * 4);
        for (int64_t p = 1; p < P; p++)
            for (int64_t c = 0; c < C; c++)
                y[c] = a->op == EI_POOL_AVG ? y[c] + x[p * C + c] : fmaxn(y[c], x[p * C + c]);
        if (a->op == EI_POOL_AVG)
            for (int64_t c = 0; c < C; c++) y[c] = y[c] / (float)P;
    }
}

#ifdef EI_SIMD_READY
static VATTR void VNAME(global_nhwc)(const ei_global_pool_f32_args *a, int64_t b, int64_t e) {
    int64_t C = a->c, P = a->p, cv = C / VW * VW;
    int avg = a->op == EI_POOL_AVG;
    for (int64_t n = b; n < e; n++) {
        const float *x = a->x + n * P * C;
        float *y = a->y + n * C;
        VF inv = vset((float)P);
        for (int64_t c = 0; c < cv; c += VW) {
            VF acc = vload(x + c);
            for (int64_t p = 1; p < P; p++) {
                VF v = vload(x + p * C + c);
                acc = avg ? vadd(acc, v) : vmaxn(acc, v);
            }
            vstore(y + c, avg ? vdiv(acc, inv) : acc);
        }
        for (int64_t c = cv; c < C; c++) {
            float acc = x[c];
            for (int64_t p = 1; p < P; p++) acc = avg ? acc + x[p * C + c] : fmaxn(acc, x[p * C + c]);
            y[c] = avg ? acc / (float)P : acc;
        }
    }
}
#endif

static void global_range(void *ctx, int64_t b, int64_t e) {
    const ei_global_pool_f32_args *a = (const ei_global_pool_f32_args *)ctx;
    if (!a->nhwc) { global_nchw(a, b, e); return; }
#ifdef EI_SIMD_READY
    if (ei_has(EI_SIMD_ISA)) { VNAME(global_nhwc)(a, b, e); return; }
#endif
    global_nhwc_scalar(a, b, e);
}

void ei_global_pool_f32(const ei_global_pool_f32_args *a) {
    EI_CHECK(a->op == EI_POOL_MAX || a->op == EI_POOL_AVG);
    EI_CHECK(a->n <= 0 || a->c <= 0 || a->p <= 0 || (a->x != NULL && a->y != NULL));
    if (a->n <= 0 || a->c <= 0 || a->p <= 0) return;
    int64_t units = a->nhwc ? a->n : a->n * a->c;
    if (a->threads <= 1 || a->n * a->c * a->p < 65536 || units < 2) { global_range((void *)a, 0, units); return; }
    ei_parallel_for(units, 1, global_range, (void *)a, a->threads);
}

/* ---- self-test ---------------------------------------------------------------------- */

static int same(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float d = a[i] - b[i];
        if (d < 0) d = -d;
        float m = a[i] < 0 ? -a[i] : a[i];
        if (!(d <= 1e-5f * m + 1e-6f)) return 0;
    }
    return 1;
}

int ei_selftest_pool_internal(void) {
    enum { H = 9, W = 11, C = 13, N = 2 };
    static float x[N * C * H * W], y[N * C * H * W], ref[N * C * H * W];
    uint32_t st = 777u;
    for (int i = 0; i < N * C * H * W; i++) {
        st = st * 1664525u + 1013904223u;
        x[i] = (float)(st >> 8) * (1.0f / 8388608.0f) - 1.0f;
    }
    int fails = 0;
    for (int op = 0; op < 2; op++) {
        for (int inc = 0; inc < 2; inc++) {
            /* 3x3 stride 2 pad 1, and 2x3 stride 1 dilation 2 asymmetric pads */
            ei_pool2d_f32_args cases[2] = {
                {x, y, N, C, H, W, 5, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 1},
                {x, y, N, C, H, W, 7, 9, 2, 3, 1, 1, 2, 2, 0, 1, 0, 1, 0, 0, 1},
            };
            for (int k = 0; k < 4; k++) {
                ei_pool2d_f32_args a = cases[k / 2];
                a.op = op; a.count_include_pad = inc; a.nhwc = k % 2;
                int64_t n = a.n * a.oh * a.ow * a.c;
                int old = ei_set_isa_mask(0);
                ei_pool2d_f32(&a);
                memcpy(ref, y, (size_t)n * 4);
                ei_set_isa_mask(old);
                ei_pool2d_f32(&a);
                fails += !same(y, ref, n);
            }
        }
        ei_global_pool_f32_args g = {x, y, N, C, H * W, op, 1, 1, 0};
        int old = ei_set_isa_mask(0);
        ei_global_pool_f32(&g);
        memcpy(ref, y, (size_t)N * C * 4);
        ei_set_isa_mask(old);
        ei_global_pool_f32(&g);
        fails += !same(y, ref, N * C);
    }
    return fails;
}
