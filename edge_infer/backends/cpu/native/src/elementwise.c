/* fp32 element-wise kernels: unary math and activations, broadcasting binary ops with an
 * optional activation epilogue, softmax over the last axis, and strided copies (Reshape,
 * Transpose, Concat, Slice...) for any element size.
 *
 * Every kernel has a portable scalar version and a SIMD version (AVX2+FMA on x86-64, NEON on
 * aarch64, see simd_f32.h) chosen at run time with ei_has(). Results follow numpy's float32
 * arithmetic: the same operation order (x*alpha then +beta, not fused), so max/min/relu/clamp
 * and the arithmetic ops are bit-identical; exp is a Cody-Waite reduction with a degree-6
 * polynomial (about 1 ulp), tanh a Taylor series below 0.4 and 1 - 2/(exp(2|x|)+1) above,
 * erf the same rational fit as kernels/elementwise.py. fp-contract is off so the compiler
 * does not fuse a*b+c where numpy rounds twice; polynomials use explicit FMA.
 *
 * In place: y may equal x (or a, or b): every kernel reads an element before writing it.
 */
#pragma GCC optimize("fp-contract=off", "no-math-errno")
#include "simd_f32.h"
#include "elementwise.h"

#include <string.h>

/* ---- scalar math ---------------------------------------------------------------------- */

#define EXP_HI 88.72283935546875f      /* above: exp overflows float32 */
#define EXP_LO (-103.97208404541015625f)  /* below: exp is 0 in float32 */
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO (-2.12194440e-4f)
#define RND_MAGIC 12582912.0f           /* 1.5 * 2^23: (v + M) - M rounds v to nearest even */
#define EXP_C5 1.9875691500E-4f
#define EXP_C4 1.3981999507E-3f
#define EXP_C3 8.3334519073E-3f
#define EXP_C2 4.1665795894E-2f
#define EXP_C1 1.6666665459E-1f
#define EXP_C0 5.0000001201E-1f

static inline float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float s_abs(float x) { return bits_f(f_bits(x) & 0x7fffffffu); }
static inline float s_copysign(float m, float s) {
    return bits_f((f_bits(m) & 0x7fffffffu) | (f_bits(s) & 0x80000000u));
}
static inline float s_pow2i(int k) { return bits_f((uint32_t)(k + 127) << 23); }
static inline float s_max(float c, float x) { return c > x ? c : x; }   /* x when x is NaN */
static inline float s_min(float c, float x) { return c < x ? c : x; }
static inline float s_maxn(float a, float b) { return (a != a || a > b) ? a : b; }   /* numpy maximum */
static inline float s_minn(float a, float b) { return (a != a || a < b) ? a : b; }

float ei_expf(float x) {
    float xc = s_min(EXP_HI, s_max(EXP_LO, x));
    float n = (xc * LOG2E + RND_MAGIC) - RND_MAGIC;
    float r = xc - n * LN2_HI;
    r = r - n * LN2_LO;
    float p = EXP_C5;
    p = p * r + EXP_C4; p = p * r + EXP_C3; p = p * r + EXP_C2; p = p * r + EXP_C1; p = p * r + EXP_C0;
    p = p * (r * r) + r + 1.0f;
    int ni = (int)n, n1 = ni >> 1;
    float y = p * s_pow2i(n1) * s_pow2i(ni - n1);
    if (x > EXP_HI) y = bits_f(0x7f800000u);
    if (x != x) y = x;
    return y;
}

#define TANH_SMALL 0.4f
#define T3 (-3.33333333333333333e-1f)
#define T5 1.33333333333333333e-1f
#define T7 (-5.39682539682539683e-2f)
#define T9 2.18694885361552028e-2f
#define T11 (-8.86323552990219657e-3f)
#define T13 3.59212803657248102e-3f

static float s_tanh(float x) {
    float a = s_abs(x), z = x * x;
    float p = T13;
    p = p * z + T11; p = p * z + T9; p = p * z + T7; p = p * z + T5; p = p * z + T3;
    float small = x + x * (z * p);
    float e = ei_expf(a + a);
    float big = s_copysign(1.0f - 2.0f / (e + 1.0f), x);
    return a < TANH_SMALL ? small : big;
}

static inline float s_sigmoid(float x) { return 1.0f / (ei_expf(-x) + 1.0f); }

/* erf(v) for |v| <= 4: v P(v^2) / Q(v^2), kernels/elementwise.py's float32 fit */
#define ERF_P0 (-2.72614225801306e-10f)
#define ERF_P1 2.77068142495902e-08f
#define ERF_P2 (-2.10102402082508e-06f)
#define ERF_P3 (-5.69250639462346e-05f)
#define ERF_P4 (-7.34990630326855e-04f)
#define ERF_P5 (-2.95459980854025e-03f)
#define ERF_P6 (-1.60960333262415e-02f)
#define ERF_Q0 (-1.45660718464996e-05f)
#define ERF_Q1 (-2.13374055278905e-04f)
#define ERF_Q2 (-1.68282697438203e-03f)
#define ERF_Q3 (-7.37332916720468e-03f)
#define ERF_Q4 (-1.42647390514189e-02f)
#define INV_SQRT2 0.70710678118654752f
#define SQRT_2_OVER_PI 0.79788456080286536f

static float s_gelu(float x) {
    float v = x * INV_SQRT2;
    v = s_max(-4.0f, s_min(4.0f, v));
    float z = v * v;
    float p = ERF_P0;
    p = p * z + ERF_P1; p = p * z + ERF_P2; p = p * z + ERF_P3; p = p * z + ERF_P4; p = p * z + ERF_P5;
    p = p * z + ERF_P6;
    p = p * v;
    float q = ERF_Q0;
    q = q * z + ERF_Q1; q = q * z + ERF_Q2; q = q * z + ERF_Q3; q = q * z + ERF_Q4;
    p = p / q;
    p = s_max(-1.0f, s_min(1.0f, p));
    return (p + 1.0f) * x * 0.5f;
}

static float s_gelu_tanh(float x) {
    float y = x * x;
    y = y * 0.044715f; y = y + 1.0f; y = y * x; y = y * SQRT_2_OVER_PI;
    y = s_tanh(y);
    return (y + 1.0f) * x * 0.5f;
}

/* floor/ceil/round without libm: values of magnitude >= 2^23 are integers already */
static inline float s_rint(float x) {
    float a = s_abs(x);
    if (!(a < 8388608.0f)) return x;
    return s_copysign((a + 8388608.0f) - 8388608.0f, x);
}
static inline float s_floor(float x) { float r = s_rint(x); return r > x ? r - 1.0f : r; }
static inline float s_ceil(float x) { float r = s_rint(x); return r < x ? r + 1.0f : r; }

/* the hardware square root (correctly rounded, as numpy's), without libm's errno path */
static float s_sqrt(float x) {
#if defined(__x86_64__)
    return _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(x)));
#elif defined(__aarch64__)
    return vget_lane_f32(vsqrt_f32(vdup_n_f32(x)), 0);
#else
    return __builtin_sqrtf(x);
#endif
}

static float unary1(int op, float x, float p0, float p1) {
    switch (op) {
    case EI_U_COPY: return x;
    case EI_U_RELU: return s_max(0.0f, x);
    case EI_U_LEAKY: { float t = x * p0; return p0 <= 1.0f ? s_maxn(x, t) : s_minn(x, t); }
    case EI_U_CLIP: return s_min(p1, s_max(p0, x));
    case EI_U_SIGMOID: return s_sigmoid(x);
    case EI_U_TANH: return s_tanh(x);
    case EI_U_HSIGMOID: { float t = x * p0; t = t + p1; return s_min(1.0f, s_max(0.0f, t)); }
    case EI_U_HSWISH: { float t = x * p0; t = t + p1; return s_min(1.0f, s_max(0.0f, t)) * x; }
    case EI_U_SILU: return x * s_sigmoid(x);
    case EI_U_GELU: return s_gelu(x);
    case EI_U_GELU_TANH: return s_gelu_tanh(x);
    case EI_U_EXP: return ei_expf(x);
    case EI_U_NEG: return -x;
    case EI_U_ABS: return s_abs(x);
    case EI_U_SQRT: return s_sqrt(x);
    case EI_U_RECIP: return 1.0f / x;
    case EI_U_FLOOR: return s_floor(x);
    case EI_U_CEIL: return s_ceil(x);
    case EI_U_ROUND: return s_rint(x);
    default: return x;
    }
}

static void unary_scalar(int op, const float *x, float *y, int64_t n, float p0, float p1) {
    switch (op) {   /* the hot simple cases get their own loops */
    case EI_U_COPY: if (x != y) memmove(y, x, (size_t)n * 4); return;
    case EI_U_RELU: for (int64_t i = 0; i < n; i++) y[i] = s_max(0.0f, x[i]); return;
    case EI_U_CLIP: for (int64_t i = 0; i < n; i++) y[i] = s_min(p1, s_max(p0, x[i])); return;
    default: for (int64_t i = 0; i < n; i++) y[i] = unary1(op, x[i], p0, p1); return;
    }
}

static inline float binary1(int op, float a, float b) {
    switch (op) {
    case EI_B_ADD: return a + b;
    case EI_B_SUB: return a - b;
    case EI_B_MUL: return a * b;
    case EI_B_DIV: return a / b;
    case EI_B_MAX: return s_maxn(a, b);
    case EI_B_MIN: return s_minn(a, b);
    case EI_B_PRELU: return a > 0.0f ? a : a * b;
    default: return a;
    }
}

static void binary_row_scalar(int op, const float *a, int64_t sa, const float *b, int64_t sb,
                              float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = binary1(op, a[i * sa], b[i * sb]);
}

/* ---- SIMD ---------------------------------------------------------------------------- */
#ifdef EI_SIMD_READY

static inline VATTR VF VNAME(vexp)(VF x) {
    VF xc = vmin(vset(EXP_HI), vmax(vset(EXP_LO), x));
    VF n = vsub(vfma(xc, vset(LOG2E), vset(RND_MAGIC)), vset(RND_MAGIC));
    VF r = vsub(xc, vmul(n, vset(LN2_HI)));
    r = vsub(r, vmul(n, vset(LN2_LO)));
    VF p = vset(EXP_C5);
    p = vfma(p, r, vset(EXP_C4)); p = vfma(p, r, vset(EXP_C3)); p = vfma(p, r, vset(EXP_C2));
    p = vfma(p, r, vset(EXP_C1)); p = vfma(p, r, vset(EXP_C0));
    p = vadd(vfma(p, vmul(r, r), r), vset(1.0f));
    VI ni = vcvt_i(n), n1 = vsrai1(ni);
    VF y = vmul(vmul(p, vpow2i(n1)), vpow2i(visub(ni, n1)));
    y = vsel(vgt(x, vset(EXP_HI)), vset(__builtin_inff()), y);
    return vsel(visnan(x), x, y);
}

static inline VATTR VF VNAME(vtanh)(VF x) {
    VF a = vabs(x), z = vmul(x, x);
    VF p = vset(T13);
    p = vfma(p, z, vset(T11)); p = vfma(p, z, vset(T9)); p = vfma(p, z, vset(T7));
    p = vfma(p, z, vset(T5)); p = vfma(p, z, vset(T3));
    VF small = vfma(x, vmul(z, p), x);
    VF e = VNAME(vexp)(vadd(a, a));
    VF big = vsub(vset(1.0f), vdiv(vset(2.0f), vadd(e, vset(1.0f))));
    big = vor(vabs(big), vsignbit(x));
    return vsel(vlt(a, vset(TANH_SMALL)), small, big);
}

static inline VATTR VF VNAME(vsigmoid)(VF x) {
    return vdiv(vset(1.0f), vadd(VNAME(vexp)(vneg(x)), vset(1.0f)));
}

static inline VATTR VF VNAME(vgelu)(VF x) {
    VF v = vmul(x, vset(INV_SQRT2));
    v = vmax(vset(-4.0f), vmin(vset(4.0f), v));
    VF z = vmul(v, v);
    VF p = vset(ERF_P0);
    p = vfma(p, z, vset(ERF_P1)); p = vfma(p, z, vset(ERF_P2)); p = vfma(p, z, vset(ERF_P3));
    p = vfma(p, z, vset(ERF_P4)); p = vfma(p, z, vset(ERF_P5)); p = vfma(p, z, vset(ERF_P6));
    p = vmul(p, v);
    VF q = vset(ERF_Q0);
    q = vfma(q, z, vset(ERF_Q1)); q = vfma(q, z, vset(ERF_Q2)); q = vfma(q, z, vset(ERF_Q3));
    q = vfma(q, z, vset(ERF_Q4));
    p = vdiv(p, q);
    p = vmax(vset(-1.0f), vmin(vset(1.0f), p));
    return vmul(vmul(vadd(p, vset(1.0f)), x), vset(0.5f));
}

static inline VATTR VF VNAME(vgelu_tanh)(VF x) {
    VF y = vmul(x, x);
    y = vmul(y, vset(0.044715f)); y = vadd(y, vset(1.0f)); y = vmul(y, x);
    y = vmul(y, vset(SQRT_2_OVER_PI));
    y = VNAME(vtanh)(y);
    return vmul(vmul(vadd(y, vset(1.0f)), x), vset(0.5f));
}

/* one loop per op: full vectors, then the tail through a VW-float buffer */
#define ULOOP(EXPR)                                                                  \
    for (; i + VW <= n; i += VW) { VF v = vload(x + i); vstore(y + i, (EXPR)); }   \
    if (i < n) {                                                                     \
        float buf[VW] = {0};                                                         \
        memcpy(buf, x + i, (size_t)(n - i) * 4);                                     \
        VF v = vload(buf); vstore(buf, (EXPR));                                      \
        memcpy(y + i, buf, (size_t)(n - i) * 4);                                     \
    }                                                                                \
    return;

static VATTR void VNAME(unary_simd)(int op, const float *x, float *y, int64_t n, float p0, float p1) {
    int64_t i = 0;
    VF c0 = vset(p0), c1 = vset(p1), zero = vset(0.0f), one = vset(1.0f);
    switch (op) {
    case EI_U_COPY: if (x != y) memmove(y, x, (size_t)n * 4); return;
    case EI_U_RELU: ULOOP(vmax(zero, v))
    case EI_U_LEAKY:
        if (p0 <= 1.0f) { ULOOP(vmaxn(v, vmul(v, c0))) } else { ULOOP(vminn(v, vmul(v, c0))) }
    case EI_U_CLIP: ULOOP(vmin(c1, vmax(c0, v)))
    case EI_U_SIGMOID: ULOOP(VNAME(vsigmoid)(v))
    case EI_U_TANH: ULOOP(VNAME(vtanh)(v))
    case EI_U_HSIGMOID: ULOOP(vmin(one, vmax(zero, vadd(vmul(v, c0), c1))))
    case EI_U_HSWISH: ULOOP(vmul(vmin(one, vmax(zero, vadd(vmul(v, c0), c1))), v))
    case EI_U_SILU: ULOOP(vmul(v, VNAME(vsigmoid)(v)))
    case EI_U_GELU: ULOOP(VNAME(vgelu)(v))
    case EI_U_GELU_TANH: ULOOP(VNAME(vgelu_tanh)(v))
    case EI_U_EXP: ULOOP(VNAME(vexp)(v))
    case EI_U_NEG: ULOOP(vneg(v))
    case EI_U_ABS: ULOOP(vabs(v))
    case EI_U_SQRT: ULOOP(vsqrt(v))
    case EI_U_RECIP: ULOOP(vdiv(one, v))
    case EI_U_FLOOR: ULOOP(vfloor(v))
    case EI_U_CEIL: ULOOP(vceil(v))
    case EI_U_ROUND: ULOOP(vrint(v))
    default: unary_scalar(op, x, y, n, p0, p1); return;
    }
}

/* y[i] = a op b over one row; SA/SB: 1 (contiguous) or 0 (one value broadcast) */
#define BLOOP(EXPR, LA, LB, TA, TB)                                                  \
    for (; i + VW <= n; i += VW) { VF va = LA; VF vb = LB; vstore(y + i, (EXPR)); } \
    if (i < n) {                                                                     \
        float ba[VW] = {0}, bb[VW] = {0}, by[VW];                                    \
        TA; TB;                                                                      \
        VF va = vload(ba); VF vb = vload(bb); vstore(by, (EXPR));                   \
        memcpy(y + i, by, (size_t)(n - i) * 4);                                      \
    }                                                                                \
    return;
#define BOPS(LA, LB, TA, TB)                                                         \
    switch (op) {                                                                    \
    case EI_B_ADD: BLOOP(vadd(va, vb), LA, LB, TA, TB)                               \
    case EI_B_SUB: BLOOP(vsub(va, vb), LA, LB, TA, TB)                               \
    case EI_B_MUL: BLOOP(vmul(va, vb), LA, LB, TA, TB)                               \
    case EI_B_DIV: BLOOP(vdiv(va, vb), LA, LB, TA, TB)                               \
    case EI_B_MAX: BLOOP(vmaxn(va, vb), LA, LB, TA, TB)                              \
    case EI_B_MIN: BLOOP(vminn(va, vb), LA, LB, TA, TB)                              \
    case EI_B_PRELU: BLOOP(vsel(vgt(va, vset(0.0f)), va, vmul(va, vb)), LA, LB, TA, TB) \
    default: binary_row_scalar(op, a, sa, b, sb, y, n); return;                      \
    }

#define TAIL_V(buf, p) memcpy(buf, (p) + i, (size_t)(n - i) * 4)
#define TAIL_S(buf, p) for (int k = 0; k < VW; k++) buf[k] = (p)[0]

static VATTR void VNAME(binary_row_simd)(int op, const float *a, int64_t sa, const float *b, int64_t sb,
                                         float *y, int64_t n) {
    int64_t i = 0;
    if (sa == 1 && sb == 1) {
        BOPS(vload(a + i), vload(b + i), TAIL_V(ba, a), TAIL_V(bb, b))
    } else if (sa == 1 && sb == 0) {
        VF bs = vset(b[0]);
        BOPS(vload(a + i), bs, TAIL_V(ba, a), TAIL_S(bb, b))
    } else if (sa == 0 && sb == 1) {
        VF as = vset(a[0]);
        BOPS(as, vload(b + i), TAIL_S(ba, a), TAIL_V(bb, b))
    }
    binary_row_scalar(op, a, sa, b, sb, y, n);
}
#endif   /* EI_SIMD_READY */

/* ---- AVX-512: the exp-based activations of the detectors (SiLU, Sigmoid) and HardSwish
 * over 16 lanes. Same operations, constants and order as the AVX2 vexp / vsigmoid above, so
 * the results match them; YOLOv8n-640 runs 28 separate SiLU steps over 11.7M values (8.8 ms
 * at 1 thread on AVX2, ~2 cycles a value: the exp polynomial and the division, not memory). */
#if defined(__x86_64__)
#define Z512 __attribute__((target("avx512f")))
static inline Z512 __m512 z_exp(__m512 x) {
    __m512 xc = _mm512_min_ps(_mm512_set1_ps(EXP_HI), _mm512_max_ps(_mm512_set1_ps(EXP_LO), x));
    __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(LOG2E), _mm512_set1_ps(RND_MAGIC)),
                             _mm512_set1_ps(RND_MAGIC));
    __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(LN2_HI)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(LN2_LO)));
    __m512 p = _mm512_set1_ps(EXP_C5);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C0));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i ni = _mm512_cvtps_epi32(n), n1 = _mm512_srai_epi32(ni, 1);
    __m512i e1 = _mm512_slli_epi32(_mm512_add_epi32(n1, _mm512_set1_epi32(127)), 23);
    __m512i e2 = _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, n1), _mm512_set1_epi32(127)), 23);
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_castsi512_ps(e1)), _mm512_castsi512_ps(e2));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_HI), _CMP_GT_OQ),
                           _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

static inline Z512 __m512 z_sigmoid(__m512 x) {
    __m512 nx = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
    return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(z_exp(nx), _mm512_set1_ps(1.0f)));
}

static inline Z512 __m512 z_unary(int op, __m512 v, __m512 c0, __m512 c1) {
    switch (op) {
    case EI_U_SIGMOID: return z_sigmoid(v);
    case EI_U_SILU: return _mm512_mul_ps(v, z_sigmoid(v));
    default:        /* EI_U_HSWISH */
        return _mm512_mul_ps(_mm512_min_ps(_mm512_set1_ps(1.0f), _mm512_max_ps(_mm512_setzero_ps(),
                             _mm512_add_ps(_mm512_mul_ps(v, c0), c1))), v);
    }
}

/* 1 when op is one of them (done), else 0 */
static Z512 int unary_avx512(int op, const float *x, float *y, int64_t n, float p0, float p1) {
    if (op != EI_U_SIGMOID && op != EI_U_SILU && op != EI_U_HSWISH) return 0;
    __m512 c0 = _mm512_set1_ps(p0), c1 = _mm512_set1_ps(p1);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, z_unary(op, _mm512_loadu_ps(x + i), c0, c1));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, z_unary(op, _mm512_maskz_loadu_ps(m, x + i), c0, c1));
    }
    return 1;
}
#endif

/* ---- dispatch ------------------------------------------------------------------------ */

void ei_unary_f32_range(int op, const float *x, float *y, int64_t n, float p0, float p1) {
#if defined(__x86_64__)
    if (ei_has(EI_AVX512) && unary_avx512(op, x, y, n, p0, p1)) return;
#endif
#ifdef EI_SIMD_READY
    if (ei_has(EI_SIMD_ISA)) { VNAME(unary_simd)(op, x, y, n, p0, p1); return; }
#endif
    unary_scalar(op, x, y, n, p0, p1);
}

static void binary_row(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n) {
#ifdef EI_SIMD_READY
    if (ei_has(EI_SIMD_ISA)) { VNAME(binary_row_simd)(op, a, sa, b, sb, y, n); return; }
#endif
    binary_row_scalar(op, a, sa, b, sb, y, n);
}

#define PAR_MIN 32768     /* elements below which a kernel runs on the calling thread */
#define BLOCK 8192        /* elements per work unit */
#define ROWVEC_MAX 256    /* rows up to this long repeat as a tiled operand (binary_rowvec) */
#define ROWVEC_TILE 1024

static void unary_range(void *ctx, int64_t b, int64_t e) {
    const ei_unary_f32_args *a = (const ei_unary_f32_args *)ctx;
    int64_t lo = b * BLOCK, hi = EI_MIN(e * BLOCK, a->n);
    ei_unary_f32_range(a->op, a->x + lo, a->y + lo, hi - lo, a->p0, a->p1);
}

void ei_unary_f32(const ei_unary_f32_args *a) {
    if (a->threads <= 1 || a->n < PAR_MIN) {
        ei_unary_f32_range(a->op, a->x, a->y, a->n, a->p0, a->p1);
        return;
    }
    ei_parallel_for((a->n + BLOCK - 1) / BLOCK, PAR_MIN / BLOCK, unary_range, (void *)a, a->threads);
}

/* work unit u = (row, block of the row); rows are indexed over dims [0, rank-1) */
/* One operand contiguous, the other one row of `inner` values repeated over every row (a
 * squeeze-excite gate, a bias): which one repeats (1: b, 2: a), else 0. */
static int row_vector_operand(const ei_binary_f32_args *a) {
    int r = a->rank;
    if (r < 2 || a->shape[r - 1] > ROWVEC_MAX) return 0;
    int b_rep = a->sa[r - 1] == 1 && a->sb[r - 1] == 1, a_rep = b_rep;
    int64_t stride = a->shape[r - 1];
    for (int d = r - 2; d >= 0 && (a_rep || b_rep); d--) {
        b_rep = b_rep && a->sa[d] == stride && a->sb[d] == 0;
        a_rep = a_rep && a->sb[d] == stride && a->sa[d] == 0;
        stride *= a->shape[d];
    }
    return b_rep ? 1 : a_rep ? 2 : 0;
}

/* rows [rb, re) of the row-vector case: the repeated row tiled to ROWVEC_TILE values once, then
 * many rows per binary_row call (one call per row of 16 channels cost more in dispatch than
 * in arithmetic: the 56x56x16 gate Mul of MobileNetV3 took 27 us) */
static void binary_rowvec(const ei_binary_f32_args *a, int rep, int64_t rb, int64_t re) {
    int64_t inner = a->shape[a->rank - 1], k = ROWVEC_TILE / inner;
    float tile[ROWVEC_TILE];
    const float *v = rep == 1 ? a->b : a->a, *x = rep == 1 ? a->a : a->b;
    for (int64_t i = 0; i < k; i++) memcpy(tile + i * inner, v, (size_t)inner * 4);
    for (int64_t row = rb; row < re; row += k) {
        int64_t m = EI_MIN(k, re - row) * inner;
        float *y = a->y + row * inner;
        if (rep == 1) binary_row(a->op, x + row * inner, 1, tile, 1, y, m);
        else binary_row(a->op, tile, 1, x + row * inner, 1, y, m);
        if (a->act != EI_U_COPY) ei_unary_f32_range(a->act, y, y, m, a->p0, a->p1);
    }
}

static void binary_units(const ei_binary_f32_args *a, int64_t ub, int64_t ue) {
    int r = a->rank;
    int64_t inner = a->shape[r - 1];
    int64_t nblk = (inner + BLOCK - 1) / BLOCK;
    int rep = nblk == 1 ? row_vector_operand(a) : 0;
    if (rep) { binary_rowvec(a, rep, ub, ue); return; }
    for (int64_t u = ub; u < ue; u++) {
        int64_t row = u / nblk, blk = u % nblk;
        int64_t oa = 0, ob = 0, rem = row;
        for (int d = r - 2; d >= 0; d--) {
            int64_t idx = rem % a->shape[d];
            rem /= a->shape[d];
            oa += idx * a->sa[d];
            ob += idx * a->sb[d];
        }
        int64_t lo = blk * BLOCK, len = EI_MIN(BLOCK, inner - lo);
        int64_t sa = a->sa[r - 1], sb = a->sb[r - 1];
        float *y = a->y + row * inner + lo;
        binary_row(a->op, a->a + oa + lo * sa, sa, a->b + ob + lo * sb, sb, y, len);
        if (a->act != EI_U_COPY) ei_unary_f32_range(a->act, y, y, len, a->p0, a->p1);
    }
}

static void binary_range(void *ctx, int64_t b, int64_t e) { binary_units((const ei_binary_f32_args *)ctx, b, e); }

void ei_binary_f32(const ei_binary_f32_args *a) {
    int r = a->rank;
    if (r < 1 || r > EI_MAX_RANK) return;
    int64_t total = 1;
    for (int d = 0; d < r; d++) total *= a->shape[d];
    if (total == 0) return;
    int64_t inner = a->shape[r - 1];
    int64_t units = (total / inner) * ((inner + BLOCK - 1) / BLOCK);
    if (a->threads <= 1 || total < PAR_MIN) {
        binary_units(a, 0, units);
        return;
    }
    int64_t per_unit = total / units;
    ei_parallel_for(units, EI_MAX(1, PAR_MIN / EI_MAX(per_unit, 1)), binary_range, (void *)a, a->threads);
}

/* ---- softmax over the last axis -------------------------------------------------------- */

static void softmax_rows(const ei_softmax_f32_args *a, int64_t rb, int64_t re) {
    int64_t n = a->cols;
    for (int64_t r = rb; r < re; r++) {
        const float *x = a->x + r * n;
        float *y = a->y + r * n;
        float m = x[0];
        for (int64_t i = 1; i < n; i++) m = s_maxn(m, x[i]);
        float neg = -m;
        ei_binary_f32_args add = {x, &neg, y, EI_B_ADD, EI_U_EXP, 0.f, 0.f, 1, 1, {n}, {1}, {0}};
        binary_units(&add, 0, (n + BLOCK - 1) / BLOCK);     /* y = exp(x - max) */
        float s;
        int64_t i = 0;
        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
        for (; i + 4 <= n; i += 4) { s0 += y[i]; s1 += y[i + 1]; s2 += y[i + 2]; s3 += y[i + 3]; }
        for (; i < n; i++) s0 += y[i];
        s = (s0 + s1) + (s2 + s3);
        ei_binary_f32_args div = {y, &s, y, EI_B_DIV, EI_U_COPY, 0.f, 0.f, 1, 1, {n}, {1}, {0}};
        binary_units(&div, 0, (n + BLOCK - 1) / BLOCK);
    }
}

static void softmax_range(void *ctx, int64_t b, int64_t e) { softmax_rows((const ei_softmax_f32_args *)ctx, b, e); }

void ei_softmax_f32(const ei_softmax_f32_args *a) {
    if (a->rows <= 0 || a->cols <= 0) return;
    if (a->threads <= 1 || a->rows * a->cols < PAR_MIN) {
        softmax_rows(a, 0, a->rows);
        return;
    }
    ei_parallel_for(a->rows, EI_MAX(1, PAR_MIN / a->cols), softmax_range, (void *)a, a->threads);
}

/* ---- strided copies -------------------------------------------------------------------- */

/* outer rows [r0, r1) of copy d (rows: the product of all dims but the last) */
static void copy_rows(const ei_copy_desc *d, int64_t r0, int64_t r1) {
    int r = d->rank;
    int64_t es = d->elsize;
    if (r == 0) { if (r0 == 0 && r1 > 0) memmove(d->dst, d->src, (size_t)es); return; }
    int64_t inner = d->shape[r - 1], ss = d->ss[r - 1], ds = d->ds[r - 1];
    int contig = ss == es && ds == es;
    if (inner == 0 || r1 <= r0) return;
    int64_t idx[EI_MAX_RANK] = {0};
    const char *s = d->src;
    char *t = d->dst;
    /* the odometer at row r0 */
    for (int k = r - 2; k >= 0; k--) {
        int64_t prod = 1;
        for (int j = k + 1; j < r - 1; j++) prod *= d->shape[j];
        idx[k] = (r0 / prod) % d->shape[k];
        s += idx[k] * d->ss[k];
        t += idx[k] * d->ds[k];
    }
    for (int64_t row = r0; row < r1; row++) {
        if (contig) {
            memmove(t, s, (size_t)(inner * es));
        } else {
            switch (es) {
            case 4: for (int64_t i = 0; i < inner; i++) *(uint32_t *)(t + i * ds) = *(const uint32_t *)(s + i * ss); break;
            case 1: for (int64_t i = 0; i < inner; i++) t[i * ds] = s[i * ss]; break;
            case 2: for (int64_t i = 0; i < inner; i++) *(uint16_t *)(t + i * ds) = *(const uint16_t *)(s + i * ss); break;
            case 8: for (int64_t i = 0; i < inner; i++) *(uint64_t *)(t + i * ds) = *(const uint64_t *)(s + i * ss); break;
            default: for (int64_t i = 0; i < inner; i++) memcpy(t + i * ds, s + i * ss, (size_t)es);
            }
        }
        /* next row: odometer over the outer dims */
        for (int k = r - 2; k >= 0; k--) {
            s += d->ss[k];
            t += d->ds[k];
            if (++idx[k] < d->shape[k]) break;
            s -= d->ss[k] * d->shape[k];
            t -= d->ds[k] * d->shape[k];
            idx[k] = 0;
        }
    }
}

static int64_t copy_nrows(const ei_copy_desc *d) {
    int64_t rows = 1;
    for (int k = 0; k < d->rank - 1; k++) rows *= d->shape[k];
    return rows;
}

void ei_copy(const ei_copy_args *a) {
    for (int64_t k = 0; k < a->count; k++) copy_rows(&a->descs[k], 0, copy_nrows(&a->descs[k]));
}

/* units [u0, u1) of `units`: the same fraction of every desc's rows */
typedef struct { const ei_copy_args *c; int64_t units; } copy_par_ctx;

static void copy_par_range(void *vctx, int64_t u0, int64_t u1) {
    const copy_par_ctx *x = (const copy_par_ctx *)vctx;
    for (int64_t k = 0; k < x->c->count; k++) {
        const ei_copy_desc *d = &x->c->descs[k];
        int64_t rows = copy_nrows(d);
        copy_rows(d, rows * u0 / x->units, rows * u1 / x->units);
    }
}

/* a copy below ~32 KB per thread is not worth a hand-off */
#define COPY_PAR_BYTES 32768

void ei_copy_par(const ei_copy_par_args *a) {
    int64_t bytes = 0, units = 1;
    for (int64_t k = 0; k < a->c.count; k++) {
        const ei_copy_desc *d = &a->c.descs[k];
        int64_t rows = copy_nrows(d), n = rows * d->elsize;
        if (d->rank > 0) n *= d->shape[d->rank - 1];
        bytes += n;
        if (rows > units) units = rows;
    }
    int64_t t = a->threads < 1 ? 1 : a->threads;
    if (t > 1 && bytes < 2 * COPY_PAR_BYTES) t = 1;
    if (t == 1) { ei_copy(&a->c); return; }
    copy_par_ctx x = { &a->c, units };
    ei_parallel_for(units, EI_MAX(1, units * COPY_PAR_BYTES / bytes), copy_par_range, &x, (int)t);
}

void ei_seq(const ei_seq_args *a) { ei_run_steps(a->steps, a->n); }

/* ---- self-test: SIMD against scalar on seeded data, odd sizes ------------------------------ */

static uint32_t rng_state = 12345u;
static float frand(float lo, float hi) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng_state >> 8) * (1.0f / 16777216.0f);
}

static int close_enough(float a, float b) {
    if (a != a || b != b) return (a != a) == (b != b);
    if (a == b) return 1;
    float d = s_abs(a - b), m = EI_MAX(s_abs(a), s_abs(b));
    return d <= 1e-5f * m + 1e-6f;
}

static int compare_paths(void (*fn)(const void *), const void *args, const float *y, float *ref, int64_t n) {
    int old = ei_set_isa_mask(0);
    fn(args);
    memcpy(ref, y, (size_t)n * 4);
    ei_set_isa_mask(old);
    fn(args);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !close_enough(y[i], ref[i]);
    return bad ? 1 : 0;
}

int ei_selftest_pool_internal(void);

int ei_selftest_elementwise(void) {
    enum { N = 301 };
    static float x[N], b[N], y[N], ref[N];
    int fails = 0;
    for (int i = 0; i < N; i++) { x[i] = frand(-12.f, 12.f); b[i] = frand(0.5f, 3.f); }
    x[0] = 0.0f; x[1] = -0.0f; x[2] = 100.f; x[3] = -100.f; x[4] = 0.39f; x[5] = -3.0f;
    static const int64_t sizes[] = {1, 3, 7, 8, 9, 17, 301};
    static const int unary_ops[] = EI_U_OPS;
    for (unsigned u = 0; u < sizeof unary_ops / sizeof unary_ops[0]; u++) {
        int op = unary_ops[u];
        int hard = op == EI_U_HSIGMOID || op == EI_U_HSWISH;
        for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            float p0 = op == EI_U_LEAKY ? 0.1f : op == EI_U_CLIP ? -1.5f : hard ? 1.f / 6.f : 0.f;
            float p1 = op == EI_U_CLIP ? 6.0f : hard ? 0.5f : 0.f;
            const float *src = x;
            float tmp[N];
            if (op == EI_U_SQRT) { for (int i = 0; i < N; i++) tmp[i] = s_abs(x[i]); src = tmp; }
            ei_unary_f32_args a = {src, y, sizes[s], op, 1, p0, p1};
            fails += compare_paths((void (*)(const void *))ei_unary_f32, &a, y, ref, sizes[s]);
        }
    }
    /* binary: same shape, scalar on either side, per-channel (rows x cols with b per row) */
    for (int op = 0; op < EI_B_COUNT; op++) {
        ei_binary_f32_args same = {x, b, y, op, EI_U_RELU, 0.f, 0.f, 1, 1, {N}, {1}, {1}};
        fails += compare_paths((void (*)(const void *))ei_binary_f32, &same, y, ref, N);
        ei_binary_f32_args bs = {x, b, y, op, EI_U_COPY, 0.f, 0.f, 1, 1, {N}, {1}, {0}};
        fails += compare_paths((void (*)(const void *))ei_binary_f32, &bs, y, ref, N);
        ei_binary_f32_args as = {x, b, y, op, EI_U_COPY, 0.f, 0.f, 1, 1, {N}, {0}, {1}};
        fails += compare_paths((void (*)(const void *))ei_binary_f32, &as, y, ref, N);
        ei_binary_f32_args pc = {x, b, y, op, EI_U_SIGMOID, 0.f, 0.f, 2, 1, {7, 43}, {43, 1}, {1, 0}};
        fails += compare_paths((void (*)(const void *))ei_binary_f32, &pc, y, ref, N);
        ei_binary_f32_args nhwc = {x, b, y, op, EI_U_COPY, 0.f, 0.f, 2, 1, {43, 7}, {7, 1}, {0, 1}};
        fails += compare_paths((void (*)(const void *))ei_binary_f32, &nhwc, y, ref, N);
    }
    ei_softmax_f32_args sm = {x, y, 7, 43, 1, 0};
    fails += compare_paths((void (*)(const void *))ei_softmax_f32, &sm, y, ref, N);
    return fails + ei_selftest_pool_internal();
}
