/* Sparse 1x1 conv / GEMM on sparse-encoded weights (edge_infer/sparse/encodings.py), fp32 and
 * int8, read straight from the encoding: CSR and block-CSR (1x4, 4x1) with uint8/uint16
 * delta-encoded column indices, or bitmask + packed values.
 *
 *   normal      Y[r, p] = sum_c S[r, c] X[c, p]      (S's rows are the outputs)
 *   transposed  Y[c, p] = sum_r S[r, c] X[r, p]      (S's rows are the inputs: MatMul B (K, N))
 *
 * X[k, p] is at x + k*x_sk + p*x_sp and Y[r, p] at y + r*y_sr + p*y_sp (elements), so one
 * kernel serves NCHW (p contiguous), NHWC and Gemm (channel contiguous). XNNPACK-style: the
 * pixels are cut into tiles of SP_T; a tile of X is gathered (transposed where channels are
 * contiguous; int8 widened to int32) into a (K, SP_T) scratch, the products accumulate into a
 * (R, SP_T) tile (float, or exact int32 for int8), which is stored with the bias: float32 Y
 * for fp32, the int64 accumulator for int8 (Python requantizes it exactly like the dense
 * int8 kernels do). Tiles run in parallel; each thread's scratch is its own, grown once.
 *
 * Versions: scalar (the reference), AVX2+FMA (x86-64, chosen at run time), NEON (aarch64
 * baseline): the same code (sparse_body.h) compiled per target, the pixel loops vectorized.
 * fp32 sums are in the same order in every version with FMA contraction disabled by ISA:
 * versions agree within float rounding (the self-test allows 1e-5 relative); int8 bit-exact. */
#include "edge_native.h"
#include "ei_int8.h"

#include <stdlib.h>
#include <string.h>

#define EI_SP_CSR 0
#define EI_SP_BCSR 1
#define EI_SP_BITMASK 2
#define SP_T 32

typedef struct {
    int32_t encoding, int8, rows, cols, br, bc, index_bytes, transposed;
    const int32_t *indptr;
    const void *indices;
    const void *values;
    const uint8_t *mask;
    const int64_t *row_offsets;   /* bitmask: index of each row's first value (rows + 1) */
    int64_t p;
    const void *x;
    int64_t x_sk, x_sp;
    void *y;
    int64_t y_sr, y_sp;
    const void *bias;             /* per output row: float (fp32) or int64 (int8), or NULL */
    int32_t threads;
    int32_t f32_exact;            /* int8, normal mode: <= 1024 entries per output row (exact in float) */
    /* int8 with a fused epilogue (ei_int8.h: bias, requantization, residual table, clamp):
     * Y is the int8 output and z the residual (Y's layout) instead of the int64 accumulator */
    const ei_rq *rq;
    const int8_t *z;
} ei_sparse_mm_args;

EI_API void ei_sparse_mm(const ei_sparse_mm_args *a);

/* up to 56 bits of the mask from bit position pos (little-endian bit order), bounded */
static inline uint64_t sp_bits56(const uint8_t *mask, int64_t nbits, int64_t pos) {
    int64_t nbytes = (nbits + 7) / 8, b = pos >> 3;
    uint64_t w = 0;
    for (int k = 0; k < 8 && b + k < nbytes; k++) w |= (uint64_t)mask[b + k] << (8 * k);
    return (w >> (pos & 7)) & ((((uint64_t)1) << 56) - 1);
}

#define SP_NAME(f) f##_scalar
#define SP_ATTR __attribute__((optimize("no-tree-vectorize")))
#include "sparse_body.h"
#undef SP_NAME
#undef SP_ATTR

#if defined(__x86_64__)
#define SP_NAME(f) f##_avx2
#define SP_ATTR __attribute__((target("avx2,fma")))
#include "sparse_body.h"
#undef SP_NAME
#undef SP_ATTR
#elif defined(__aarch64__)
#define SP_NAME(f) f##_neon
#define SP_ATTR
#include "sparse_body.h"
#undef SP_NAME
#undef SP_ATTR
#endif

typedef void (*sp_tile_fn)(const ei_sparse_mm_args *, const void *, int64_t, void *, float *);

static sp_tile_fn sp_pick(void) {
#if defined(__x86_64__)
    if (ei_has(EI_AVX2)) return tile_avx2;
#elif defined(__aarch64__)
    if (ei_has(EI_NEON)) return tile_neon;
#endif
    return tile_scalar;
}

typedef struct { const ei_sparse_mm_args *a; sp_tile_fn tile; } sp_job;

static __thread void *sp_buf;
static __thread size_t sp_cap;

static void *sp_scratch(size_t need) {
    if (need > sp_cap) {
        free(sp_buf);
        sp_buf = aligned_alloc(64, (need + 63) / 64 * 64);
        sp_cap = sp_buf ? need : 0;
    }
    return sp_buf;
}

#if defined(__x86_64__)
#include <immintrin.h>
/* 8x8 float transpose in registers */
__attribute__((target("avx2,fma")))
static inline void sp_tr8(__m256 *r) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20); r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20); r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31); r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31); r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* d[k*SP_T + j] = x[j*x_sp + k] for a full tile, channels contiguous; K % 8 == 0 */
__attribute__((target("avx2,fma")))
static void sp_gather_t_avx2(const float *x, int64_t x_sp, int64_t K, float *d) {
    __m256 r[8];
    for (int64_t j0 = 0; j0 < SP_T; j0 += 8)
        for (int64_t k0 = 0; k0 < K; k0 += 8) {
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(x + (j0 + i) * x_sp + k0);
            sp_tr8(r);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(d + (k0 + i) * SP_T + j0, r[i]);
        }
}

/* y[j*y_sp + r] = s[r*SP_T + j] + b[r] for a full tile, outputs contiguous; R % 8 == 0 */
__attribute__((target("avx2,fma")))
static void sp_store_t_avx2(const float *s, int64_t R, const float *b, float *y, int64_t y_sp) {
    __m256 r[8];
    for (int64_t r0 = 0; r0 < R; r0 += 8) {
        __m256 bb = b ? _mm256_loadu_ps(b + r0) : _mm256_setzero_ps();
        for (int64_t j0 = 0; j0 < SP_T; j0 += 8) {
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(s + (r0 + i) * SP_T + j0);
            sp_tr8(r);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(y + (j0 + i) * y_sp + r0, _mm256_add_ps(r[i], bb));
        }
    }
}
#endif

static void sp_range(void *ctx, int64_t begin, int64_t end) {
    const sp_job *job = (const sp_job *)ctx;
    const ei_sparse_mm_args *a = job->a;
    const int tr = a->transposed;
    const int64_t K = tr ? a->rows : a->cols, R = tr ? a->cols : a->rows;
    char *buf = (char *)sp_scratch((size_t)(K + 2 * R) * SP_T * 4);
    if (!buf) return;
    void *xt = buf, *yt = buf + (size_t)K * SP_T * 4;
    int32_t *tt = (int32_t *)(buf + (size_t)(K + R) * SP_T * 4);
    const int simd = ei_rq_simd();
    for (int64_t t = begin; t < end; t++) {
        int64_t p0 = t * SP_T, n = EI_MIN(SP_T, a->p - p0);
        /* gather the input tile (zero-padded past the last pixel); a full fp32 tile of
         * pixel-contiguous rows (NCHW) is read in place */
        const void *xsrc = xt;
        int64_t xs = SP_T;
        if (!a->int8 && a->x_sp == 1 && n == SP_T) {
            xsrc = (const float *)a->x + p0;
            xs = a->x_sk;
        } else if (a->int8 && a->f32_exact) {   /* int8 input widened to float lanes */
            const int8_t *x = (const int8_t *)a->x;
            float *d = (float *)xt;
            if (a->x_sk == 1) {
                for (int64_t j = 0; j < SP_T; j++) {
                    const int8_t *src = x + (p0 + j) * a->x_sp;
                    if (j < n) for (int64_t k = 0; k < K; k++) d[k * SP_T + j] = (float)src[k];
                    else for (int64_t k = 0; k < K; k++) d[k * SP_T + j] = 0.0f;
                }
            } else {
                for (int64_t k = 0; k < K; k++) {
                    const int8_t *src = x + k * a->x_sk + p0 * a->x_sp;
                    int64_t j = 0;
                    for (; j < n; j++) d[k * SP_T + j] = (float)src[j * a->x_sp];
                    for (; j < SP_T; j++) d[k * SP_T + j] = 0.0f;
                }
            }
        } else if (a->int8) {
            const int8_t *x = (const int8_t *)a->x;
            int32_t *d = (int32_t *)xt;
            if (a->x_sk == 1) {              /* channels contiguous: read rows of pixels */
                for (int64_t j = 0; j < SP_T; j++) {
                    const int8_t *src = x + (p0 + j) * a->x_sp;
                    if (j < n) for (int64_t k = 0; k < K; k++) d[k * SP_T + j] = src[k];
                    else for (int64_t k = 0; k < K; k++) d[k * SP_T + j] = 0;
                }
            } else {
                for (int64_t k = 0; k < K; k++) {
                    const int8_t *src = x + k * a->x_sk + p0 * a->x_sp;
                    int64_t j = 0;
                    for (; j < n; j++) d[k * SP_T + j] = src[j * a->x_sp];
                    for (; j < SP_T; j++) d[k * SP_T + j] = 0;
                }
            }
        } else {
            const float *x = (const float *)a->x;
            float *d = (float *)xt;
            if (a->x_sp == 1) {
                for (int64_t k = 0; k < K; k++) {
                    memcpy(d + k * SP_T, x + k * a->x_sk + p0, (size_t)n * 4);
                    for (int64_t j = n; j < SP_T; j++) d[k * SP_T + j] = 0.0f;
                }
            }
#if defined(__x86_64__)
            else if (a->x_sk == 1 && n == SP_T && K % 8 == 0 && ei_has(EI_AVX2)) {
                sp_gather_t_avx2(x + p0 * a->x_sp, a->x_sp, K, d);
            }
#endif
            else {
                for (int64_t j = 0; j < SP_T; j++) {
                    const float *src = x + (p0 + j) * a->x_sp;
                    if (j < n) for (int64_t k = 0; k < K; k++) d[k * SP_T + j] = src[k * a->x_sk];
                    else for (int64_t k = 0; k < K; k++) d[k * SP_T + j] = 0.0f;
                }
            }
        }
        /* a full fp32 tile of pixel-contiguous output rows is written from the registers */
        float *ydirect = (!a->int8 && !tr && a->y_sp == 1 && n == SP_T) ? (float *)a->y + p0 : NULL;
        job->tile(a, xsrc, xs, yt, ydirect);
        if (ydirect) continue;
        /* store with the bias */
        if (a->int8 && a->rq) {
            const int32_t *s = (const int32_t *)yt;
            const ei_rq *rq = a->rq;
            int8_t *y = (int8_t *)a->y;
            if (a->y_sr == 1 || R >= 8) {    /* per pixel, all channels: the SIMD epilogue */
                for (int64_t j = 0; j < n; j++)
                    for (int64_t r = 0; r < R; r++) tt[j * R + r] = s[r * SP_T + j];
                for (int64_t j = 0; j < n; j++) {
                    int64_t o = (p0 + j) * a->y_sp;
                    ei_rq_run(simd, rq, tt + j * R, 0, (int)R, y + o, (ptrdiff_t)a->y_sr, a->z ? a->z + o : NULL);
                }
            } else {
                for (int64_t r = 0; r < R; r++) {
                    int32_t bb = rq->bias ? rq->bias[r] : 0;
                    for (int64_t j = 0; j < n; j++) {
                        int64_t o = r * a->y_sr + (p0 + j) * a->y_sp;
                        int32_t acc = (int32_t)((uint32_t)s[r * SP_T + j] + (uint32_t)bb);
                        int32_t zt = rq->ztab ? rq->ztab[(uint8_t)a->z[o]] : 0;
                        y[o] = ei_rq_one(acc, rq->mult[r], rq->shift[r], rq->zp_y, zt, rq->lo, rq->hi);
                    }
                }
            }
        } else if (a->int8) {
            const int32_t *s = (const int32_t *)yt;
            const int64_t *b = (const int64_t *)a->bias;
            int64_t *y = (int64_t *)a->y;
            for (int64_t r = 0; r < R; r++) {
                int64_t bb = b ? b[r] : 0;
                int64_t *dst = y + r * a->y_sr + p0 * a->y_sp;
                for (int64_t j = 0; j < n; j++) dst[j * a->y_sp] = (int64_t)s[r * SP_T + j] + bb;
            }
        } else {
            const float *s = (const float *)yt;
            const float *b = (const float *)a->bias;
            float *y = (float *)a->y;
            if (a->y_sp == 1) {
                for (int64_t r = 0; r < R; r++) {
                    float bb = b ? b[r] : 0.0f;
                    float *dst = y + r * a->y_sr + p0;
                    for (int64_t j = 0; j < n; j++) dst[j] = s[r * SP_T + j] + bb;
                }
            }
#if defined(__x86_64__)
            else if (a->y_sr == 1 && n == SP_T && R % 8 == 0 && ei_has(EI_AVX2)) {
                sp_store_t_avx2(s, R, b, y + p0 * a->y_sp, a->y_sp);
            }
#endif
            else {
                for (int64_t j = 0; j < n; j++) {
                    float *dst = y + (p0 + j) * a->y_sp;
                    for (int64_t r = 0; r < R; r++) dst[r * a->y_sr] = s[r * SP_T + j] + (b ? b[r] : 0.0f);
                }
            }
        }
    }
}

#ifdef EI_DEBUG_CHECKS
static int sp_well_formed(const ei_sparse_mm_args *a) {
    /* CSR / BCSR: indptr starts at 0 and never decreases; the delta-coded block columns of
     * every block row add up to a column inside the matrix */
    if (a->encoding == EI_SP_BITMASK) return a->mask != NULL && a->row_offsets != NULL;
    if (a->indptr == NULL || a->indptr[0] != 0) return 0;
    const uint8_t *j8 = (const uint8_t *)a->indices; const uint16_t *j16 = (const uint16_t *)a->indices;
    for (int64_t rb = 0; rb < a->rows / a->br; rb++) {
        if (a->indptr[rb + 1] < a->indptr[rb]) return 0;
        int64_t c = 0;
        for (int64_t e = a->indptr[rb]; e < a->indptr[rb + 1]; e++) {
            c += a->index_bytes == 1 ? j8[e] : j16[e];
            if (c >= a->cols / a->bc) return 0;
        }
    }
    return 1;
}
#endif

void ei_sparse_mm(const ei_sparse_mm_args *a) {
    EI_CHECK(a->encoding == EI_SP_CSR || a->encoding == EI_SP_BCSR || a->encoding == EI_SP_BITMASK);
    EI_CHECK(a->rows >= 0 && a->cols >= 0 && a->br >= 1 && a->bc >= 1);
    EI_CHECK(a->encoding == EI_SP_BITMASK || a->index_bytes == 1 || a->index_bytes == 2);
    EI_CHECK(a->p <= 0 || (a->x != NULL && a->y != NULL && a->values != NULL));
#ifdef EI_DEBUG_CHECKS
    EI_CHECK(sp_well_formed(a));
#endif
    if (a->p <= 0) return;
    sp_job job = {a, sp_pick()};
    int64_t tiles = (a->p + SP_T - 1) / SP_T;
    ei_parallel_for(tiles, 1, sp_range, &job, a->threads);
}

/* ---- self-test: every SIMD path against the scalar one, seeded random data ---------- */

static uint32_t sp_rng = 12345u;
static uint32_t sp_rand(void) { sp_rng = sp_rng * 1664525u + 1013904223u; return sp_rng >> 8; }

/* encode a dense rows x cols matrix (float w, int8 wi) in `enc` with blocks br x bc and
 * idx_bytes-wide delta indices into a (caller-freed in one block) */
static void *sp_encode(ei_sparse_mm_args *a, int enc, int br, int bc, int idx_bytes, const float *w,
                       const int8_t *wi, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    /* worst case: every element stored plus a bridge per 255 columns */
    size_t cap = (n + (size_t)rows * (cols / 255 + 2) * (size_t)(br * bc) + 1) / 2 * 2;
    char *mem = calloc(1, (size_t)(rows + 1) * 12 + cap * (4 + 1 + 2) + n / 8 + 16);
    int64_t *offs = (int64_t *)mem;
    int32_t *indptr = (int32_t *)(mem + (rows + 1) * 8);
    char *p = mem + (rows + 1) * 12;
    float *vf = (float *)p; int8_t *vi = (int8_t *)(p + cap * 4); uint8_t *i8 = (uint8_t *)(p + cap * 5);
    uint16_t *i16 = (uint16_t *)i8; uint8_t *mask = (uint8_t *)(p + cap * 7);
    a->encoding = enc; a->rows = rows; a->cols = cols; a->br = br; a->bc = bc; a->index_bytes = idx_bytes;
    a->values = a->int8 ? (const void *)vi : (const void *)vf;
    if (enc == EI_SP_BITMASK) {
        int64_t e = 0;
        for (int r = 0; r < rows; r++) {
            offs[r] = e;
            for (int c = 0; c < cols; c++) {
                size_t i = (size_t)r * cols + c;
                if (a->int8 ? wi[i] != 0 : w[i] != 0.0f) {
                    mask[i >> 3] |= (uint8_t)(1u << (i & 7));
                    vf[e] = w[i]; vi[e] = wi[i]; e++;
                }
            }
        }
        offs[rows] = e;
        a->mask = mask; a->row_offsets = offs;
        return mem;
    }
    int maxd = idx_bytes == 1 ? 255 : 65535, bs = br * bc;
    int64_t e = 0;
    for (int rb = 0; rb < rows / br; rb++) {
        int prev = 0;
        for (int cb = 0; cb < cols / bc; cb++) {
            int any = 0;
            for (int i = 0; i < br; i++)
                for (int t = 0; t < bc; t++) {
                    size_t k = (size_t)(rb * br + i) * cols + cb * bc + t;
                    any |= a->int8 ? wi[k] != 0 : w[k] != 0.0f;
                }
            if (!any) continue;
            int d = cb - prev;
            while (d > maxd) {
                for (int q = 0; q < bs; q++) { vf[e * bs + q] = 0; vi[e * bs + q] = 0; }
                if (idx_bytes == 1) i8[e] = (uint8_t)maxd; else i16[e] = (uint16_t)maxd;
                e++; d -= maxd;
            }
            for (int i = 0; i < br; i++)
                for (int t = 0; t < bc; t++) {
                    size_t k = (size_t)(rb * br + i) * cols + cb * bc + t;
                    vf[e * bs + i * bc + t] = w[k]; vi[e * bs + i * bc + t] = wi[k];
                }
            if (idx_bytes == 1) i8[e] = (uint8_t)d; else i16[e] = (uint16_t)d;
            e++; prev = cb;
        }
        indptr[rb + 1] = (int32_t)e;
    }
    a->indptr = indptr; a->indices = i8;
    return mem;
}

/* every encoding of one random matrix: SIMD path vs scalar path */
static int sp_case(int int8, int tr, int rows, int cols, int64_t p, int x_chlast) {
    size_t n = (size_t)rows * cols;
    float *w = calloc(n + 1, 4);
    int8_t *wi = calloc(n + 1, 1);
    for (size_t i = 0; i < n; i++) {
        if (sp_rand() % 5) continue;
        w[i] = (float)((int)(sp_rand() % 2001) - 1000) / 997.0f;
        wi[i] = (int8_t)((int)(sp_rand() % 255) - 127);
        if (!wi[i]) wi[i] = 1;
        if (w[i] == 0.0f) w[i] = 0.5f;
    }
    int K = tr ? rows : cols, R = tr ? cols : rows;
    size_t esz = int8 ? 1 : 4, ysz = int8 ? 8 : 4;
    char *x = malloc((size_t)K * p * esz + 1);
    for (int64_t i = 0; i < (int64_t)K * p; i++) {
        if (int8) ((int8_t *)x)[i] = (int8_t)((int)(sp_rand() % 256) - 128);
        else ((float *)x)[i] = (float)((int)(sp_rand() % 2001) - 1000) / 1000.0f;
    }
    char *y0 = malloc((size_t)R * p * ysz + 1), *y1 = malloc((size_t)R * p * ysz + 1);
    const int encs[][4] = {{EI_SP_CSR, 1, 1, 1}, {EI_SP_CSR, 1, 1, 2}, {EI_SP_BITMASK, 1, 1, 1},
                           {EI_SP_BCSR, 1, 4, 1}, {EI_SP_BCSR, 4, 1, 2}};
    int fails = 0;
    for (int k = 0; k < 5; k++) {
        int br = encs[k][1], bc = encs[k][2];
        if (rows % br || cols % bc) continue;
        ei_sparse_mm_args a = {0};
        a.int8 = int8; a.transposed = tr;
        void *mem = sp_encode(&a, encs[k][0], br, bc, encs[k][3], w, wi, rows, cols);
        a.p = p; a.x = x;
        a.x_sk = x_chlast ? 1 : p; a.x_sp = x_chlast ? K : 1;
        a.y_sr = x_chlast ? 1 : p; a.y_sp = x_chlast ? R : 1; a.threads = 2;
        int prev_mask = ei_set_isa_mask(0);
        a.y = y0; ei_sparse_mm(&a);
        ei_set_isa_mask(prev_mask);
        a.y = y1; ei_sparse_mm(&a);
        for (int64_t i = 0; i < (int64_t)R * p; i++) {
            if (int8) { if (((int64_t *)y0)[i] != ((int64_t *)y1)[i]) { fails++; break; } }
            else {
                float u = ((float *)y0)[i], v = ((float *)y1)[i];
                float d = u > v ? u - v : v - u, m = (u > 0 ? u : -u) + 1.0f;
                if (d > 1e-5f * m) { fails++; break; }
            }
        }
        free(mem);
    }
    free(w); free(wi); free(x); free(y0); free(y1);
    return fails;
}

EI_API int ei_selftest_sparse(void) {
    int fails = 0;
    const int shapes[][3] = {{1, 1, 1}, {7, 13, 33}, {16, 600, 40}, {36, 24, 97}, {8, 16, 64}};
    for (int s = 0; s < 5; s++)
        for (int int8 = 0; int8 < 2; int8++)
            for (int tr = 0; tr < 2; tr++)
                for (int cl = 0; cl < 2; cl++)
                    fails += sp_case(int8, tr, shapes[s][0], shapes[s][1], shapes[s][2], cl);
    return fails;
}
