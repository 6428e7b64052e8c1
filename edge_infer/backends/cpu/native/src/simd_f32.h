/* A small fp32 vector vocabulary over AVX2 (8 lanes, x86-64) and NEON (4 lanes, aarch64),
 * so that the element-wise and pooling kernels are written once and compiled for the ISA of
 * the build target: VF (vector), VW (lanes), VATTR (the target attribute every function
 * using these needs), VNAME(f) (the per-ISA function name), EI_SIMD_ISA (the feature bit to
 * check with ei_has). EI_SIMD_READY is undefined on other architectures (scalar only).
 *
 * vmax/vmin(c, x) return x when x is NaN (AVX2 maxps returns its second operand on NaN,
 * NEON fmax propagates NaN), so clamps with constant bounds keep NaN like numpy does.
 * vmaxn/vminn propagate a NaN from either operand (numpy's maximum/minimum). */
#ifndef EI_SIMD_F32_H
#define EI_SIMD_F32_H

#include "edge_native.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define VF __m256
#define VI __m256i
#define VW 8
#define VNAME(f) f##_avx2
#define EI_SIMD_ISA EI_AVX2
#define VATTR __attribute__((target("avx2,fma")))
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps((p), (v))
#define vset(c) _mm256_set1_ps(c)
#define vadd(a, b) _mm256_add_ps((a), (b))
#define vsub(a, b) _mm256_sub_ps((a), (b))
#define vmul(a, b) _mm256_mul_ps((a), (b))
#define vdiv(a, b) _mm256_div_ps((a), (b))
#define vfma(a, b, c) _mm256_fmadd_ps((a), (b), (c))          /* a*b + c */
#define vmax(a, b) _mm256_max_ps((a), (b))
#define vmin(a, b) _mm256_min_ps((a), (b))
#define visnan(a) _mm256_cmp_ps((a), (a), _CMP_UNORD_Q)
#define vmaxn(a, b) _mm256_blendv_ps(_mm256_max_ps((a), (b)), (a), visnan(a))
#define vminn(a, b) _mm256_blendv_ps(_mm256_min_ps((a), (b)), (a), visnan(a))
#define vsqrt(a) _mm256_sqrt_ps(a)
#define vfloor(a) _mm256_floor_ps(a)
#define vceil(a) _mm256_ceil_ps(a)
#define vrint(a) _mm256_round_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vabs(a) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (a))
#define vneg(a) _mm256_xor_ps(_mm256_set1_ps(-0.0f), (a))
#define vsignbit(a) _mm256_and_ps(_mm256_set1_ps(-0.0f), (a))
#define vor(a, b) _mm256_or_ps((a), (b))
#define vlt(a, b) _mm256_cmp_ps((a), (b), _CMP_LT_OQ)
#define vgt(a, b) _mm256_cmp_ps((a), (b), _CMP_GT_OQ)
#define vge(a, b) _mm256_cmp_ps((a), (b), _CMP_GE_OQ)
#define vsel(m, a, b) _mm256_blendv_ps((b), (a), (m))            /* m ? a : b */
#define vcvt_i(a) _mm256_cvtps_epi32(a)                           /* round to nearest */
#define vcvt_f(i) _mm256_cvtepi32_ps(i)
#define vpow2i(i) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32((i), _mm256_set1_epi32(127)), 23))
#define vsrai1(i) _mm256_srai_epi32((i), 1)
#define visub(a, b) _mm256_sub_epi32((a), (b))
static inline VATTR float vhsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline VATTR float vhmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define EI_SIMD_READY 1
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
#define VF float32x4_t
#define VI int32x4_t
#define VW 4
#define VNAME(f) f##_neon
#define EI_SIMD_ISA EI_NEON
#define VATTR
#define vload(p) vld1q_f32(p)
#define vstore(p, v) vst1q_f32((p), (v))
#define vset(c) vdupq_n_f32(c)
#define vadd(a, b) vaddq_f32((a), (b))
#define vsub(a, b) vsubq_f32((a), (b))
#define vmul(a, b) vmulq_f32((a), (b))
#define vdiv(a, b) vdivq_f32((a), (b))
#define vfma(a, b, c) vfmaq_f32((c), (a), (b))
#define vmax(a, b) vmaxq_f32((a), (b))
#define vmin(a, b) vminq_f32((a), (b))
#define vmaxn(a, b) vmaxq_f32((a), (b))
#define vminn(a, b) vminq_f32((a), (b))
#define vsqrt(a) vsqrtq_f32(a)
#define vfloor(a) vrndmq_f32(a)
#define vceil(a) vrndpq_f32(a)
#define vrint(a) vrndnq_f32(a)
#define vabs(a) vabsq_f32(a)
#define vneg(a) vnegq_f32(a)
#define vsignbit(a) vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(a), vdupq_n_u32(0x80000000u)))
#define vor(a, b) vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)))
#define vlt(a, b) vcltq_f32((a), (b))
#define vgt(a, b) vcgtq_f32((a), (b))
#define vge(a, b) vcgeq_f32((a), (b))
#define vsel(m, a, b) vbslq_f32((m), (a), (b))
#define visnan(a) vmvnq_u32(vceqq_f32((a), (a)))
#define vcvt_i(a) vcvtnq_s32_f32(a)
#define vcvt_f(i) vcvtq_f32_s32(i)
#define vpow2i(i) vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32((i), vdupq_n_s32(127)), 23))
#define vsrai1(i) vshrq_n_s32((i), 1)
#define visub(a, b) vsubq_s32((a), (b))
#define vhsum(v) vaddvq_f32(v)
#define vhmax(v) vmaxvq_f32(v)
#define EI_SIMD_READY 1
#endif

#endif
