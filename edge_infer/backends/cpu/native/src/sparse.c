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
    int32_t threads, pad;
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

typedef void (*sp_tile_fn)(const ei_sparse_mm_args *, const void *, int64_t, void *);

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

static void sp_range(void *ctx, int64_t begin, int64_t end) {
    const sp_job *job = (const sp_job *)ctx;
    const ei_sparse_mm_args *a = job->a;
    const int tr = a->transposed;
    const int64_t K = tr ? a->rows : a->cols, R = tr ? a->cols : a->rows;
    char *buf = (char *)sp_scratch((size_t)(K + R) * SP_T * 4);
    if (!buf) return;
    void *xt = buf, *yt = buf + (size_t)K * SP_T * 4;
    for (int64_t t = begin; t < end; t++) {
        int64_t p0 = t * SP_T, n = EI_MIN(SP_T, a->p - p0);
        /* gather the input tile (zero-padded past the last pixel); a full fp32 tile of
         * pixel-contiguous rows (NCHW) is read in place */
        const void *xsrc = xt;
        int64_t xs = SP_T;
        if (!a->int8 && a->x_sp == 1 && n == SP_T) {
            xsrc = (const float *)a->x + p0;
            xs = a->x_sk;
        } else if (a->int8) {
            const int8_t *x = (const int8_t *)a->x;
            int32_t *d = (int32_t *)xt;
            for (int64_t k = 0; k < K; k++) {
                const int8_t *src = x + k * a->x_sk + p0 * a->x_sp;
                int64_t j = 0;
                for (; j < n; j++) d[k * SP_T + j] = src[j * a->x_sp];
                for (; j < SP_T; j++) d[k * SP_T + j] = 0;
            }
        } else {
            const float *x = (const float *)a->x;
            float *d = (float *)xt;
            if (a->x_sp == 1) {
                for (int64_t k = 0; k < K; k++) {
                    memcpy(d + k * SP_T, x + k * a->x_sk + p0, (size_t)n * 4);
                    for (int64_t j = n; j < SP_T; j++) d[k * SP_T + j] = 0.0f;
                }
            } else {
                for (int64_t j = 0; j < SP_T; j++) {
                    const float *src = x + (p0 + j) * a->x_sp;
                    if (j < n) for (int64_t k = 0; k < K; k++) d[k * SP_T + j] = src[k * a->x_sk];
                    else for (int64_t k = 0; k < K; k++) d[k * SP_T + j] = 0.0f;
                }
            }
        }
        job->tile(a, xsrc, xs, yt);
        /* store with the bias */
        if (a->int8) {
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
            } else {
                for (int64_t j = 0; j < n; j++) {
                    float *dst = y + (p0 + j) * a->y_sp;
                    for (int64_t r = 0; r < R; r++) dst[r * a->y_sr] = s[r * SP_T + j] + (b ? b[r] : 0.0f);
                }
            }
        }
    }
}

void ei_sparse_mm(const ei_sparse_mm_args *a) {
    if (a->p <= 0) return;
    sp_job job = {a, sp_pick()};
    int64_t tiles = (a->p + SP_T - 1) / SP_T;
    ei_parallel_for(tiles, 1, sp_range, &job, a->threads);
}

/* ---- self-test: every SIMD path against the scalar one, seeded random data ---------- */

static uint32_t sp_rng = 12345u;
static uint32_t sp_rand(void) { sp_rng = sp_rng * 1664525u + 1013904223u; return sp_rng >> 8; }

/* build a CSR (uint8 deltas, bridged) of a random rows x cols matrix at ~density */
static int sp_case(int int8, int tr, int rows, int cols, int64_t p, int x_chlast) {
    int32_t *indptr = calloc(rows + 1, 4);
    uint8_t *idx = malloc((size_t)rows * cols + 1);
    float *vf = malloc(((size_t)rows * cols + 1) * 4);
    int8_t *vi = malloc((size_t)rows * cols + 1);
    int64_t n = 0;
    for (int r = 0; r < rows; r++) {
        int prev = 0;
        for (int c = 0; c < cols; c++) {
            if (sp_rand() % 5) continue;
            int d = c - prev;
            while (d > 255) { idx[n] = 255; vf[n] = 0; vi[n] = 0; n++; d -= 255; }
            idx[n] = (uint8_t)d; vf[n] = (float)((int)(sp_rand() % 2001) - 1000) / 997.0f;
            vi[n] = (int8_t)((int)(sp_rand() % 255) - 127); n++; prev = c;
        }
        indptr[r + 1] = (int32_t)n;
    }
    int K = tr ? rows : cols, R = tr ? cols : rows;
    size_t esz = int8 ? 1 : 4, ysz = int8 ? 8 : 4;
    char *x = malloc((size_t)K * p * esz + 1);
    for (int64_t i = 0; i < (int64_t)K * p; i++) {
        if (int8) ((int8_t *)x)[i] = (int8_t)((int)(sp_rand() % 256) - 128);
        else ((float *)x)[i] = (float)((int)(sp_rand() % 2001) - 1000) / 1000.0f;
    }
    char *y0 = malloc((size_t)R * p * ysz + 1), *y1 = malloc((size_t)R * p * ysz + 1);
    ei_sparse_mm_args a = {0};
    a.encoding = EI_SP_CSR; a.int8 = int8; a.rows = rows; a.cols = cols; a.br = a.bc = 1;
    a.index_bytes = 1; a.transposed = tr; a.indptr = indptr; a.indices = idx;
    a.values = int8 ? (const void *)vi : (const void *)vf; a.p = p; a.x = x;
    a.x_sk = x_chlast ? 1 : p; a.x_sp = x_chlast ? K : 1;
    a.y_sr = x_chlast ? 1 : p; a.y_sp = x_chlast ? R : 1; a.threads = 1;
    int fails = 0;
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
    free(indptr); free(idx); free(vf); free(vi); free(x); free(y0); free(y1);
    return fails;
}

EI_API int ei_selftest_sparse(void) {
    int fails = 0;
    const int shapes[][3] = {{1, 1, 1}, {7, 13, 33}, {16, 600, 40}, {33, 24, 97}};
    for (int s = 0; s < 4; s++)
        for (int int8 = 0; int8 < 2; int8++)
            for (int tr = 0; tr < 2; tr++)
                for (int cl = 0; cl < 2; cl++)
                    fails += sp_case(int8, tr, shapes[s][0], shapes[s][1], shapes[s][2], cl);
    return fails;
}
