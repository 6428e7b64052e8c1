/* The int8 GEMM / convolution's internal declarations, shared by int8_gemm.c (kinds, packing,
 * the portable micro-kernels, plan and driver), int8_gemm_vnni.c (the AVX-512 VNNI micro-kernels
 * and their fused requantization, the narrow layers' path) and int8_gemm_amx.c (the AMX tiles
 * and the implicit convolution); not part of the library's interface: the functions are hidden. */
#ifndef EI_INT8_GEMM_INTERNAL_H
#define EI_INT8_GEMM_INTERNAL_H

#include "int8_gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#pragma GCC visibility push(hidden)

/* a micro-kernel kind's tile (MR rows, NR channels), k-group (KR) and element size (int8_gemm.c's
 * header comment) */
typedef struct { int mr, nr, kr, es; } kind_t;
static const kind_t KINDS[N_KINDS] = { {4, 4, 1, 1}, {6, 16, 2, 2}, {8, 8, 1, 2}, {8, 8, 4, 1}, {8, 32, 4, 1}, {32, 32, 4, 1} };

/* a conv's blocking and per-thread scratch (make_plan, int8_gemm.c) */
typedef struct {
    kind_t k;
    int K, kg, R, P, mb, nrb, npan, ncb, ntasks, direct;
    int direct_nchw;            /* 1x1, stride 1, no padding, NCHW input: rows read along the planes */
    int sm;                     /* narrow (ei_gemm_sm_rows): rows per 16-lane vector, else 0 */
    int sm_gather;              /* narrow rows too long for one vpermt2d: gathered */
    int implicit;               /* AMX straight from the input on interior pixels (implicit_block) */
    int kgr;                    /* k-groups holding K (kg without the AMX tile padding) */
    int64_t k4;                 /* bytes between the u8 rows of A (VNNI / AMX) */
    int64_t off_rows, off_apack, off_acc, per_thread;
} plan_t;

/* int8_gemm.c: bytes of one packed panel of NR channels */
int64_t ei_gemm_panel_bytes(int kind, int K);

#if defined(__x86_64__)
/* int8_gemm.c: this CPU, under the ISA mask, runs the VNNI / AMX kinds */
int ei_gemm_has_vnni(void);
int ei_gemm_has_amx(void);

/* The requantization epilogue fused into ei_gemm_mk_vnni (NHWC output): the 8 x 32 tile is
 * requantized in registers (ei_vq16, ei_int8.h) and stored as int8, with no int32 round trip. */
typedef struct {
    ei_vq16 v[2];
    ei_vqc c;
    __m512i zlo[4], zhi[4];         /* zfast: the residual table's int16 terms as two byte planes */
    __mmask16 m[2];                 /* channels of the panel that exist */
    int zfast;                      /* the residual's rows in pairs through ei_gemm_vq_res_rows2 (VBMI) */
} vq_panel;

/* the narrow layers' constants (ei_gemm_sm_rows, int8_gemm_vnni.c) */
typedef struct {
    ei_vq16 v;
    ei_vqc c;
    __m512i w[16];                  /* k-group g: lane l = channel l % M's 4 weights */
} sm_consts;

/* ei_vq_pack4's 64 bytes as two rows of the panel's 32 channels (y, y + ys) */
__attribute__((target("avx512f,avx512bw")))
static inline void vq_rows2(__m512i p, const vq_panel *v, int8_t *y, int64_t ys) {
    const __mmask64 m = (__mmask64)v->m[0] | (__mmask64)v->m[1] << 16;
    __m256i hi = _mm512_extracti64x4_epi64(p, 1);
    if (m == 0xFFFFFFFFULL) {
        _mm256_storeu_si256((__m256i *)y, _mm512_castsi512_si256(p));
        _mm256_storeu_si256((__m256i *)(y + ys), hi);
    } else {
        _mm512_mask_storeu_epi8(y, m, p);
        _mm512_mask_storeu_epi8(y + ys, m, _mm512_castsi256_si512(hi));
    }
}

/* int8_gemm_vnni.c */
void ei_gemm_vq_prepare(vq_panel *v, const ei_int8_conv_args *a, const int32_t *corr, int ch0, int nch);
void ei_gemm_vq_res_rows2(const vq_panel *v, __m512i r0, __m512i r1, __m512i r2, __m512i r3, const int8_t *z,
                          int64_t zs, int8_t *y, int64_t ys);
int ei_gemm_has_consts(const ei_int8_conv_args *a);
void ei_gemm_consts_prepare(const ei_int8_conv_args *a, void *out);
void ei_gemm_sm_prepare(const ei_int8_conv_args *a, int kgr, sm_consts *s);
void ei_gemm_sm_rows(const ei_int8_conv_args *a, const sm_consts *s, int R, const uint8_t *ub, int kgs, int kgr,
                     int64_t r0, int nrows, int gather);
void ei_gemm_mk_vnni(const uint8_t *const *rows, const int32_t *corr, const void *bp, int kg, int32_t *c, int ldc);
void ei_gemm_mk_vnni_rq(const uint8_t *const *rows, const void *bp, int kg, const vq_panel *v, int nrow, int8_t *y,
                        int64_t ys, const int8_t *z);
void ei_gemm_mk_vnni_rq16(const uint8_t *const *rows, const void *bp, int kg, const vq_panel *v, int nrow, int8_t *y,
                          int64_t ys);
void ei_gemm_mk_vnni_rq8x2(const uint8_t *const *rows, const void *bp, int kg, const vq_panel *v, int nrow,
                           int8_t *y, int64_t ys);
void ei_gemm_mk_vnni_rq1(const uint8_t *row, const void *bp, int kg, const vq_panel *v, int8_t *y, const int8_t *z);
void ei_gemm_nchw_store(const ei_int8_conv_args *a, const plan_t *p, const int32_t *acc, int64_t r0, int nrows,
                        int ch0, int nch, const int32_t *corr);

/* int8_gemm_amx.c */
int ei_gemm_implicit_ok(const ei_int8_conv_args *a);
int64_t ei_gemm_implicit_panel_bytes(const ei_int8_conv_args *a);
void ei_gemm_implicit_prepare(const ei_int8_conv_args *a, char *out);
void ei_gemm_implicit_rows(const ei_int8_conv_args *a, const plan_t *p, int j0, int j1, int64_t b, int oy, int ox0,
                           int n, int32_t *cbuf);
void ei_gemm_amx_config(void);
void ei_gemm_amx_release(void);
void ei_gemm_amx_tile(const uint8_t *at, int64_t lda, const int8_t *b, int kg, int two_r, int two_c, int32_t *cbuf);
void ei_gemm_amx_panel(const ei_int8_conv_args *a, const vq_panel *v, const uint8_t *ub, int64_t lda, const void *bp,
                       int kg, int64_t r0, int nrows, int ch0, int32_t *cbuf);
#endif

#pragma GCC visibility pop

#endif
