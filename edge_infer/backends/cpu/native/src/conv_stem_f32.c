/* fp32 direct convolution (NHWC) for few input channels: a network's first conv on the image
 * (3 channels: ResNet-50's 7x7 stride 2, the MobileNets' and SqueezeNet's 3x3 stride 2).
 *
 * With K = kh * kw * c of only 27 or 147, conv_f32.c's im2col tile + SGEMM spends a quarter of
 * its time copying patches and runs its micro-kernels on short K blocks. Here each output row
 * is computed straight from the input: a tile of R pixels x 16/32 output channels keeps its
 * sums in registers over all taps (a kernel row of kw * c taps is one contiguous run of the NHWC
 * input, so the inner loop is a broadcast of one input value per pixel times the weight
 * vectors), then adds the residual, applies Relu / Clip / HardSigmoid / HardSwish in registers
 * and stores once; other activations (SiLU, ...) run over the finished output row while it is
 * in cache. Pixels whose kernel columns reach into the padding run one at a time over the taps
 * inside the input (no zero taps multiplied); kernel rows in the padding are skipped.
 *
 * Weights: conv_f32.c's packed panels (16 output channels, K = (ky, kx, ci) rows). Rows of the
 * output are handed out by the pool (one item per output row: no scratch, nothing allocated).
 * Micro-tiles per ISA: AVX-512 6 pixels x 64 channels, 12 x 32, 12 x 16 (a last single panel), AVX2
 * 5 x 16, NEON 4 x 16, scalar 2 x 16. Stride any, dilation 1, one group (the caller checks). */
#include "sgemm.h"
#include "elementwise.h"
#include "selftest_conv.h"
#include "selftest_rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const ei_conv_f32_args *a;
    int64_t K, oxa, oxb;
    int reg_act, post_act;      /* the activation applied in registers, or after the row */
} stem_plan;

/* ---- scalar ---- */
#define SV float
#define SL 1
#define SATTR
#define SN(f) f##_scalar
#define sload(p) (*(p))
#define sstore(p, v) (*(p) = (v))
#define sset(c) (c)
#define sfma(a, b, c) ((a) * (b) + (c))
#define sadd(a, b) ((a) + (b))
#define smul(a, b) ((a) * (b))
#define smax(a, b) ((a) > (b) ? (a) : (b))
#define smin(a, b) ((a) < (b) ? (a) : (b))
#define SR_MAIN 2
#define SPV_MAIN 16
#define STEM_SCALAR
#include "conv_stem_f32_body.h"
#undef STEM_SCALAR

#if defined(__x86_64__)
#include <immintrin.h>
/* ---- AVX2 + FMA ---- */
#define SV __m256
#define SL 8
#define SATTR __attribute__((target("avx2,fma")))
#define SN(f) f##_avx2
#define sload(p) _mm256_loadu_ps(p)
#define sstore(p, v) _mm256_storeu_ps((p), (v))
#define sset(c) _mm256_set1_ps(c)
#define sfma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define sadd(a, b) _mm256_add_ps((a), (b))
#define smul(a, b) _mm256_mul_ps((a), (b))
#define smax(a, b) _mm256_max_ps((a), (b))
#define smin(a, b) _mm256_min_ps((a), (b))
/* 5 pixels: 6 (12 accumulators + 2 weight vectors + the broadcast, 15 of 16 registers) made
 * GCC keep a weight vector on the stack and feed 6 FMAs a tap from there (ISA mask AVX2 on
 * the AVX-512 machine, 1 thread: ResNet-50's 7x7 2930 -> 2290 us, MobileNetV3's 3x3 3 -> 16
 * 147 -> 112, 3 -> 32 293 -> 228; 4 pixels 128 and 254) */
#define SR_MAIN 5
#define SPV_MAIN 2
#include "conv_stem_f32_body.h"

/* ---- AVX-512 ---- */
#define SV __m512
#define SL 16
#define SATTR __attribute__((target("avx512f")))
#define SN(f) f##_avx512
#define sload(p) _mm512_loadu_ps(p)
#define sstore(p, v) _mm512_storeu_ps((p), (v))
#define sset(c) _mm512_set1_ps(c)
#define sfma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define sadd(a, b) _mm512_add_ps((a), (b))
#define smul(a, b) _mm512_mul_ps((a), (b))
#define smax(a, b) _mm512_max_ps((a), (b))
#define smin(a, b) _mm512_min_ps((a), (b))
/* 12 x 32 (24 accumulators): with the stride-6 tiles 2-4% faster than 8 x 32 on MobileNet-v2's
 * 3 -> 32 (1 thread 177 -> 170, 163 -> 159 us) */
#define SR_MAIN 12
#define SPV_MAIN 2
#define SR_ALT 12
/* 6 x 64: 24 accumulators, 4 weight vectors, the broadcast (29 registers); with the stride-6
 * copy of the tiles 3-5% faster than 5 x 64 (ResNet-50's 7x7 1287 -> 1228 us, 2 threads
 * 721 -> 691; 3x3 3 -> 64 331 -> 321), which it had not been with a register per pixel
 * offset */
#define SR_WIDE 6
#include "conv_stem_f32_body.h"
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
/* ---- NEON ---- */
#define SV float32x4_t
#define SL 4
#define SATTR
#define SN(f) f##_neon
#define sload(p) vld1q_f32(p)
#define sstore(p, v) vst1q_f32((p), (v))
#define sset(c) vdupq_n_f32(c)
#define sfma(a, b, c) vfmaq_f32((c), (a), (b))
#define sadd(a, b) vaddq_f32((a), (b))
#define smul(a, b) vmulq_f32((a), (b))
#define smax(a, b) vmaxq_f32((a), (b))
#define smin(a, b) vminq_f32((a), (b))
#define SR_MAIN 4
#define SPV_MAIN 4
#include "conv_stem_f32_body.h"
#endif

typedef void (*stem_row_fn)(const stem_plan *p, int64_t row);

static stem_row_fn pick_row(const char **name) {
#if defined(__x86_64__)
    if (ei_has(EI_AVX512)) { if (name) *name = "avx512"; return stem_row_avx512; }
    if (ei_has(EI_AVX2)) { if (name) *name = "avx2"; return stem_row_avx2; }
#endif
#if defined(__aarch64__)
    if (ei_has(EI_NEON)) { if (name) *name = "neon"; return stem_row_neon; }
#endif
    if (name) *name = "scalar";
    return stem_row_scalar;
}

typedef struct { stem_plan p; stem_row_fn row; } stem_ctx;

static void stem_range(void *vctx, int64_t i0, int64_t i1) {
    const stem_ctx *c = (const stem_ctx *)vctx;
    for (int64_t i = i0; i < i1; i++) c->row(&c->p, i);
}

static void stem_with(const ei_conv_f32_args *a, stem_row_fn row) {
    EI_CHECK(a->group == 1 && a->dh == 1 && a->dw == 1 && a->sh >= 1 && a->sw >= 1);
    EI_CHECK(a->pt >= 0 && a->pl >= 0 && a->kh >= 1 && a->kw >= 1 && a->c >= 1);
    stem_ctx c;
    c.row = row;
    c.p.a = a;
    c.p.K = (int64_t)a->kh * a->kw * a->c;
    /* output columns whose kernel columns all lie inside the input */
    c.p.oxa = EI_MIN((int64_t)a->ow, ((int64_t)a->pl + a->sw - 1) / a->sw);
    int64_t lastx = (int64_t)a->w - a->kw + a->pl;
    c.p.oxb = lastx < 0 ? 0 : EI_MIN((int64_t)a->ow, lastx / a->sw + 1);
    if (c.p.oxb < c.p.oxa) c.p.oxb = c.p.oxa;
    int in_reg = a->act == EI_U_RELU || a->act == EI_U_CLIP || a->act == EI_U_HSIGMOID || a->act == EI_U_HSWISH;
    c.p.reg_act = in_reg ? a->act : 0;
    c.p.post_act = in_reg ? 0 : a->act;
    int64_t rows = (int64_t)a->n * a->oh;
    if (rows <= 0 || a->ow <= 0 || a->m <= 0) return;
    /* below ~2^18 multiply-adds a thread hand-off costs more than it saves */
    int64_t macs = rows * a->ow * a->m * c.p.K, t = a->threads < 1 ? 1 : a->threads;
    if (macs < ((int64_t)1 << 18)) t = 1;
    ei_parallel_for(rows, 1, stem_range, &c, (int)t);
}

EI_API void ei_conv_stem_f32(const ei_conv_f32_args *a) { stem_with(a, pick_row(NULL)); }

EI_API const char *ei_conv_stem_f32_isa(void) {
    const char *name;
    pick_row(&name);
    return name;
}

/* ---- self-test: the dispatched kernel and the scalar one vs a double-precision direct conv
 * on seeded shapes (1-4 channels, kernels 1-7, strides 1-3, pads past the kernel, odd widths,
 * output channels across partial panels, bias, residual, in-register and after-row
 * activations, 1-3 threads) ---- */
EI_API int ei_selftest_conv_stem_f32(void) {
    int fails = 0;
    st_state = 4242;
    static const int acts[] = { 0, EI_U_RELU, EI_U_CLIP, EI_U_HSWISH, EI_U_SILU, EI_U_HSIGMOID, EI_U_LEAKY };
    for (int trial = 0; trial < 80; trial++) {
        ei_conv_f32_args a;
        memset(&a, 0, sizeof a);
        a.group = 1;
        a.dh = a.dw = 1;
        a.n = st_int(1, 2);
        a.c = st_int(1, 4);
        a.m = trial % 4 == 0 ? st_int(1, 70) : 16 * st_int(1, 4);
        a.h = st_int(1, 12);
        a.w = st_int(1, 40);
        a.kh = st_int(1, 7);
        a.kw = st_int(1, 7);
        a.sh = st_int(1, 3);
        a.sw = st_int(1, 3);
        a.pt = st_int(0, 4);
        a.pl = st_int(0, 4);
        int pb = st_int(0, 4), pr = st_int(0, 4);
        a.oh = (a.h + a.pt + pb - a.kh) / a.sh + 1;
        a.ow = (a.w + a.pl + pr - a.kw) / a.sw + 1;
        if (a.h + a.pt + pb < a.kh || a.w + a.pl + pr < a.kw) continue;
        a.act = acts[trial % 7];
        a.p0 = a.act == EI_U_CLIP ? -0.3f : (a.act == EI_U_HSWISH || a.act == EI_U_HSIGMOID) ? 1.0f / 6 : a.act == EI_U_LEAKY ? 0.1f : 0.0f;
        a.p1 = a.act == EI_U_CLIP ? 0.4f : (a.act == EI_U_HSWISH || a.act == EI_U_HSIGMOID) ? 0.5f : 0.0f;
        a.threads = 1 + trial % 3;
        int panels = (a.m + 15) / 16, K = a.c * a.kh * a.kw;
        int64_t nx = (int64_t)a.n * a.h * a.w * a.c, ny = (int64_t)a.n * a.oh * a.ow * a.m;
        float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * a.m * K), *bias = malloc(sizeof(float) * a.m);
        float *z = malloc(sizeof(float) * ny), *y0 = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny);
        float *pk = calloc((size_t)panels * K * 16, sizeof(float));
        for (int64_t i = 0; i < nx; i++) x[i] = st_unif();
        for (int64_t i = 0; i < (int64_t)a.m * K; i++) w[i] = st_unif();
        for (int i = 0; i < a.m; i++) bias[i] = st_unif();
        for (int64_t i = 0; i < ny; i++) z[i] = st_unif();
        /* w: (m, c, kh, kw) ONNX order -> panel, K = (ky, kx, ci), 16 */
        for (int j = 0; j < a.m; j++)
            for (int ci = 0; ci < a.c; ci++)
                for (int ky = 0; ky < a.kh; ky++)
                    for (int kx = 0; kx < a.kw; kx++)
                        pk[((int64_t)(j / 16) * K + (ky * a.kw + kx) * a.c + ci) * 16 + j % 16] =
                            w[((j * a.c + ci) * a.kh + ky) * a.kw + kx];
        a.x = x; a.wpack = pk;
        a.bias = trial % 3 ? bias : NULL;
        a.z = trial % 2 ? z : NULL;
        a.y = y0;
        stem_with(&a, stem_row_scalar);
        a.y = y1;
        stem_with(&a, pick_row(NULL));
        for (int64_t q = 0; q < ny && fails < 1000; q++) {
            double mag;
            float ref = st_conv_ref(&a, w, q, &mag);
            double tol = 1e-5 * (mag + 1.0);
            if (!(fabs(y0[q] - ref) <= tol) || !(fabs(y1[q] - ref) <= tol)) fails++;
        }
        free(x); free(w); free(bias); free(z); free(y0); free(y1); free(pk);
    }
    return fails;
}
