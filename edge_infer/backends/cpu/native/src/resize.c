/* fp32 linear (bilinear) Resize over two adjacent axes.
 *
 * The tensor is seen as [planes, H, W, inner]: NHWC is (N, H, W, C), NCHW (N*C, H, W, 1), a
 * resize of one axis has the other's taps the identity. Per output row and column, prepare
 * (kernels/resize_native.py) computed the two source indices and their float32 weights with
 * the shared coordinate math (ops/resize.py), so every coordinate mode the schema accepts is
 * one table here. Each output is
 *     a = x[y0, x0] * wy0 + x[y1, x0] * wy1,  b = x[y0, x1] * wy0 + x[y1, x1] * wy1,
 *     y = a * wx0 + b * wx1
 * rounded after every operation (fp-contract off): the numpy kernel's separable order (rows,
 * then columns), so both give the same bits. Vectorized over `inner`: AVX-512, AVX2, NEON;
 * scalar elsewhere and for inner == 1 (NCHW planes), where it is a gather.
 */
#pragma GCC optimize("fp-contract=off")
#include "simd_f32.h"

typedef struct {
    const float *x; float *y;
    const int32_t *iy, *ix;     /* (oh, 2), (ow, 2): source rows / columns, clamped into the input */
    const float *wy, *wx;       /* (oh, 2), (ow, 2): their weights */
    int64_t planes, h, w, inner, oh, ow;
    int32_t threads, pad_;
} ei_resize_linear_args;

static void px_scalar(const float *p00, const float *p10, const float *p01, const float *p11, float *out,
                      int64_t n, float wy0, float wy1, float wx0, float wx1) {
    for (int64_t c = 0; c < n; c++) {
        float a = p00[c] * wy0 + p10[c] * wy1, b = p01[c] * wy0 + p11[c] * wy1;
        out[c] = a * wx0 + b * wx1;
    }
}

#ifdef EI_SIMD_READY
VATTR static void VNAME(px)(const float *p00, const float *p10, const float *p01, const float *p11, float *out,
                            int64_t n, float wy0, float wy1, float wx0, float wx1) {
    VF vy0 = vset(wy0), vy1 = vset(wy1), vx0 = vset(wx0), vx1 = vset(wx1);
    int64_t c = 0;
    for (; c + VW <= n; c += VW) {
        VF a = vadd(vmul(vload(p00 + c), vy0), vmul(vload(p10 + c), vy1));
        VF b = vadd(vmul(vload(p01 + c), vy0), vmul(vload(p11 + c), vy1));
        vstore(out + c, vadd(vmul(a, vx0), vmul(b, vx1)));
    }
    px_scalar(p00 + c, p10 + c, p01 + c, p11 + c, out + c, n - c, wy0, wy1, wx0, wx1);
}
#endif

#if defined(__x86_64__)
__attribute__((target("avx512f")))
static void px_avx512(const float *p00, const float *p10, const float *p01, const float *p11, float *out,
                      int64_t n, float wy0, float wy1, float wx0, float wx1) {
    __m512 vy0 = _mm512_set1_ps(wy0), vy1 = _mm512_set1_ps(wy1), vx0 = _mm512_set1_ps(wx0), vx1 = _mm512_set1_ps(wx1);
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 m = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1);
        __m512 a = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, p00 + c), vy0),
                                 _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p10 + c), vy1));
        __m512 b = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, p01 + c), vy0),
                                 _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p11 + c), vy1));
        _mm512_mask_storeu_ps(out + c, m, _mm512_add_ps(_mm512_mul_ps(a, vx0), _mm512_mul_ps(b, vx1)));
    }
}
#endif

typedef void (*px_fn)(const float *, const float *, const float *, const float *, float *, int64_t,
                      float, float, float, float);

typedef struct { const ei_resize_linear_args *a; px_fn px; } rl_ctx;

static void resize_linear_range(void *vctx, int64_t b, int64_t e) {
    const rl_ctx *c = (const rl_ctx *)vctx;
    const ei_resize_linear_args *a = c->a;
    const int64_t row = a->w * a->inner;
    for (int64_t r = b; r < e; r++) {            /* r: (plane, output row) */
        int64_t oy = r % a->oh, p = r / a->oh;
        const float *r0 = a->x + (p * a->h + a->iy[2 * oy]) * row, *r1 = a->x + (p * a->h + a->iy[2 * oy + 1]) * row;
        float wy0 = a->wy[2 * oy], wy1 = a->wy[2 * oy + 1];
        float *out = a->y + r * a->ow * a->inner;
        if (a->inner == 1) {
            for (int64_t ox = 0; ox < a->ow; ox++) {
                int32_t x0 = a->ix[2 * ox], x1 = a->ix[2 * ox + 1];
                float s = r0[x0] * wy0 + r1[x0] * wy1, t = r0[x1] * wy0 + r1[x1] * wy1;
                out[ox] = s * a->wx[2 * ox] + t * a->wx[2 * ox + 1];
            }
            continue;
        }
        for (int64_t ox = 0; ox < a->ow; ox++, out += a->inner) {
            int64_t x0 = (int64_t)a->ix[2 * ox] * a->inner, x1 = (int64_t)a->ix[2 * ox + 1] * a->inner;
            c->px(r0 + x0, r1 + x0, r0 + x1, r1 + x1, out, a->inner, wy0, wy1, a->wx[2 * ox], a->wx[2 * ox + 1]);
        }
    }
}

/* which vectors the kernel uses under the current ISA mask (for inspect's note) */
EI_API const char *ei_resize_linear_isa(void) {
#if defined(__x86_64__)
    if (ei_has(EI_AVX512)) return "AVX-512";
#endif
#ifdef EI_SIMD_READY
    if (ei_has(EI_SIMD_ISA)) return EI_SIMD_ISA == EI_AVX2 ? "AVX2" : "NEON";
#endif
    return "scalar";
}

EI_API void ei_resize_linear_f32(const ei_resize_linear_args *a) {
    EI_CHECK(a->planes >= 0 && a->h >= 1 && a->w >= 1 && a->inner >= 1 && a->oh >= 0 && a->ow >= 0);
    rl_ctx c = { a, px_scalar };
#ifdef EI_SIMD_READY
    if (ei_has(EI_SIMD_ISA)) c.px = VNAME(px);
#endif
#if defined(__x86_64__)
    if (ei_has(EI_AVX512)) c.px = px_avx512;
#endif
    int64_t rows = a->planes * a->oh, total = rows * a->ow * a->inner;
    if (total <= 0) return;
    int64_t grain = EI_MAX((int64_t)1, 16384 / EI_MAX(a->ow * a->inner, (int64_t)1));
    ei_parallel_for(rows, grain, resize_linear_range, &c, total >= 32768 ? a->threads : 1);
}

/* ---- self-test: the dispatched path (AVX-512 / AVX2 / NEON under the ISA mask) against the
 * formula evaluated element by element; fp-contract is off, so they agree bit for bit ---- */
#include <stdlib.h>
#include <string.h>

EI_API int ei_selftest_resize(void) {
    enum { P = 2, H = 5, W = 7, OH = 9, OW = 11, CMAX = 40 };
    static const int inners[] = { 1, 3, 8, 16, 17, 33, 40 };
    static float x[P * H * W * CMAX], y[P * OH * OW * CMAX];
    int32_t iy[2 * OH], ix[2 * OW];
    float wy[2 * OH], wx[2 * OW];
    uint32_t seed = 7;
    int fails = 0;
#define RND() (seed = seed * 1103515245u + 12345u, (seed >> 8) & 0xffff)
    for (size_t k = 0; k < sizeof inners / sizeof inners[0]; k++) {
        int c = inners[k];
        for (int i = 0; i < P * H * W * c; i++) x[i] = (float)RND() / 4096.0f - 8.0f;
        for (int i = 0; i < 2 * OH; i++) { iy[i] = (int32_t)(RND() % H); wy[i] = (float)RND() / 65536.0f; }
        for (int i = 0; i < 2 * OW; i++) { ix[i] = (int32_t)(RND() % W); wx[i] = (float)RND() / 65536.0f; }
        ei_resize_linear_args a = { x, y, iy, ix, wy, wx, P, H, W, c, OH, OW, 1, 0 };
        ei_resize_linear_f32(&a);
        for (int p = 0; p < P; p++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++)
                    for (int ch = 0; ch < c; ch++) {
                        const float *b = x + (int64_t)p * H * W * c;
                        float v00 = b[(iy[2 * oy] * W + ix[2 * ox]) * c + ch], v10 = b[(iy[2 * oy + 1] * W + ix[2 * ox]) * c + ch];
                        float v01 = b[(iy[2 * oy] * W + ix[2 * ox + 1]) * c + ch], v11 = b[(iy[2 * oy + 1] * W + ix[2 * ox + 1]) * c + ch];
                        float s = v00 * wy[2 * oy] + v10 * wy[2 * oy + 1], t = v01 * wy[2 * oy] + v11 * wy[2 * oy + 1];
                        float want = s * wx[2 * ox] + t * wx[2 * ox + 1];
                        float got = y[(((int64_t)p * OH + oy) * OW + ox) * c + ch];
                        fails += memcmp(&got, &want, sizeof got) != 0;
                    }
    }
#undef RND
    return fails;
}
