/* fp32 3x3 stride-1 convolution (NHWC, dilation 1, one group, any padding, H, W and channel
 * counts) by Winograd F(4x4, 3x3): each 4x4 output tile is A^T [U (.) V] A with V = B^T d B
 * of its 6x6 input tile d and U = G g G^T of the 3x3 kernel g, so the 36 multiply-adds per
 * output pixel and channel pair of the direct conv become 36 / 16 = 2.25 (plus transforms).
 * ei_winograd2_f32* run F(2x2, 3x3) the same way (4x4 input tiles, 16 points: 16 / 4 = 4
 * multiply-adds per output): where the output has few 4x4 tiles (ResNet-50's 14x14 and 7x7
 * layers), each transformed weight serves 4x the tiles and the weights grow 16/9, not 36/9
 * (kernels/conv_winograd.py picks the form). p->r (4 or 2) and p->np (36, 16) carry it.
 *
 * The weights are transformed once at prepare (ei_winograd_f32_pack, in double precision)
 * into the SGEMM's packed panels, one (C x M) matrix per transform point xi: 36 panels sets.
 * A run goes over the tiles in bands (the transformed input of a band stays a few MB):
 *   1. input transform: V[xi] (tiles x C) of each block of TB tiles, in the band's scratch;
 *   2. per (tile block, block of output channels): 36 GEMMs V[xi] (TB x C) @ U[xi] (C x NC)
 *      on sgemm.c's micro-kernels into per-thread scratch, then the output transform of the
 *      block with the fused epilogue (bias, residual, Relu/Clip in registers; the other
 *      activations of elementwise.c on each pixel's channels while they are in cache): the
 *      same epilogue, in the same order, as conv_f32.c's.
 * Both steps are items handed out dynamically by the pool (ei_parallel_for: the input transform
 * per block and 16-channel chunk, the GEMMs per block and column block, the blocks and column
 * blocks chosen for the threads as conv_f32.c's plan_split does); the transforms
 * are winograd_f32_body.h compiled for AVX-512, AVX2+FMA, NEON and scalar (channel tails),
 * chosen at run time.
 *
 * Error: the transforms add rounding of order 1e-6 relative to the sum of |products| (the
 * points +-2 scale terms by up to 8 in A^T and 5 in B^T); F(2x2, 3x3)'s coefficients are 0,
 * +-1 and +-1/2 (exact), so it adds little (14x14 256->256, relative L2 against a float64
 * direct conv: SGEMM 2.9e-7, F(2x2) 4.0e-7, F(4x4) 1.7e-6); the self-test bounds both against
 * a double-precision direct conv. */
#include "sgemm.h"
#include "elementwise.h"
#include "selftest_conv.h"
#include "selftest_rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

enum { KC_MAX = 320, TB_MAX = 48, NCP_MAX = 8, BAND_FLOATS = 1 << 20 };

typedef struct {
    const ei_conv_f32_args *a;
    ei_sg_kernel k;
    int64_t tiles_x, tiles_img, tiles, panels, kc;
    int64_t units;                  /* tiles in units of 12 (every micro-kernel's rows divide it) */
    int64_t tb, ncp, nblk, ncb;     /* most tiles per block (V's row stride), panels per column
                                     * block, counts; block b: tiles [blk_t0(b), blk_t0(b + 1)) */
    int64_t band_blk, band_floats;  /* blocks per band, floats of the band's V */
    int64_t ccn;                    /* channel chunks per block of the input transform */
    float *v;                       /* the band's transformed input */
    int64_t band_b0;                /* first block of the band */
    int64_t band_nblk;
    int r, np;                      /* output tile side (4: F(4x4, 3x3), 2: F(2x2, 3x3)) and
                                     * transform points ((r + 2)^2: 36, 16) */
} wg_plan;

/* ---- the transforms, per ISA ---- */
#define WGF_NAME(f) wgf_##f##_scalar
#define WGF_ATTR
#define WGF_V 1
#define WGF_T float
#define WGF_LOAD(p) (*(p))
#define WGF_STORE(p, v) (*(p) = (v))
#define WGF_SET(c) (c)
#define WGF_ADD(a, b) ((a) + (b))
#define WGF_SUB(a, b) ((a) - (b))
#define WGF_FMA(a, b, c) ((a) * (b) + (c))
#define WGF_MAX(c, v) ((c) > (v) ? (c) : (v))
#define WGF_MIN(c, v) ((c) < (v) ? (c) : (v))
#include "winograd_f32_body.h"

#if defined(__x86_64__)
#define WGF_NAME(f) wgf_##f##_avx2
#define WGF_ATTR __attribute__((target("avx2,fma")))
#define WGF_V 8
#define WGF_T __m256
#define WGF_LOAD(p) _mm256_loadu_ps(p)
#define WGF_STORE(p, v) _mm256_storeu_ps((p), (v))
#define WGF_SET(c) _mm256_set1_ps(c)
#define WGF_ADD(a, b) _mm256_add_ps((a), (b))
#define WGF_SUB(a, b) _mm256_sub_ps((a), (b))
#define WGF_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define WGF_MAX(c, v) _mm256_max_ps((c), (v))
#define WGF_MIN(c, v) _mm256_min_ps((c), (v))
#include "winograd_f32_body.h"

#define WGF_NAME(f) wgf_##f##_avx512
#define WGF_ATTR __attribute__((target("avx512f")))
#define WGF_V 16
#define WGF_T __m512
#define WGF_LOAD(p) _mm512_loadu_ps(p)
#define WGF_STORE(p, v) _mm512_storeu_ps((p), (v))
#define WGF_SET(c) _mm512_set1_ps(c)
#define WGF_ADD(a, b) _mm512_add_ps((a), (b))
#define WGF_SUB(a, b) _mm512_sub_ps((a), (b))
#define WGF_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define WGF_MAX(c, v) _mm512_max_ps((c), (v))
#define WGF_MIN(c, v) _mm512_min_ps((c), (v))
#include "winograd_f32_body.h"
#endif

#if defined(__aarch64__)
#define WGF_NAME(f) wgf_##f##_neon
#define WGF_ATTR
#define WGF_V 4
#define WGF_T float32x4_t
#define WGF_LOAD(p) vld1q_f32(p)
#define WGF_STORE(p, v) vst1q_f32((p), (v))
#define WGF_SET(c) vdupq_n_f32(c)
#define WGF_ADD(a, b) vaddq_f32((a), (b))
#define WGF_SUB(a, b) vsubq_f32((a), (b))
#define WGF_FMA(a, b, c) vfmaq_f32((c), (a), (b))
#define WGF_MAX(c, v) vmaxq_f32((c), (v))
#define WGF_MIN(c, v) vminq_f32((c), (v))
#include "winograd_f32_body.h"
#endif

/* channels [c0, c1): the widest vectors over as many as they cover, then narrower ones */
static void wg_input(const wg_plan *p, int64_t t0, int64_t nt, int64_t c0, int64_t c1, float *dst) {
    int64_t c = c0, tb = p->tb;
#if defined(__x86_64__)
    if (ei_has(EI_AVX512) && c1 - c >= 16) {
        int64_t e = c + (c1 - c) / 16 * 16;
        (p->r == 2 ? wgf_input2_avx512 : wgf_input_avx512)(p, t0, nt, c, e, dst, tb);
        c = e;
    }
    if (ei_has(EI_AVX2) && c1 - c >= 8) {
        int64_t e = c + (c1 - c) / 8 * 8;
        (p->r == 2 ? wgf_input2_avx2 : wgf_input_avx2)(p, t0, nt, c, e, dst, tb);
        c = e;
    }
#elif defined(__aarch64__)
    if (ei_has(EI_NEON) && c1 - c >= 4) {
        int64_t e = c + (c1 - c) / 4 * 4;
        (p->r == 2 ? wgf_input2_neon : wgf_input_neon)(p, t0, nt, c, e, dst, tb);
        c = e;
    }
#endif
    if (c < c1) (p->r == 2 ? wgf_input2_scalar : wgf_input_scalar)(p, t0, nt, c, c1, dst, tb);
}

static void wg_output(const wg_plan *p, const float *mb, int64_t ldm, int64_t t0, int64_t nt, int64_t ncol,
                      int64_t col0) {
    int64_t j = 0, tb = p->tb;
#if defined(__x86_64__)
    if (ei_has(EI_AVX512) && ncol >= 16) {
        (p->r == 2 ? wgf_output2_avx512 : wgf_output_avx512)(p, mb, ldm, tb, t0, nt, 0, ncol / 16 * 16, col0);
        j = ncol / 16 * 16;
    }
    if (ei_has(EI_AVX2) && ncol - j >= 8) {
        int64_t e = j + (ncol - j) / 8 * 8;
        (p->r == 2 ? wgf_output2_avx2 : wgf_output_avx2)(p, mb, ldm, tb, t0, nt, j, e, col0);
        j = e;
    }
#elif defined(__aarch64__)
    if (ei_has(EI_NEON) && ncol >= 4) {
        (p->r == 2 ? wgf_output2_neon : wgf_output_neon)(p, mb, ldm, tb, t0, nt, 0, ncol / 4 * 4, col0);
        j = ncol / 4 * 4;
    }
#endif
    if (j < ncol) (p->r == 2 ? wgf_output2_scalar : wgf_output_scalar)(p, mb, ldm, tb, t0, nt, j, ncol, col0);
}

/* the first tile of block b */
static int64_t blk_t0(const wg_plan *p, int64_t b) {
    return EI_MIN(p->tiles, p->units * b / p->nblk * 12);
}

/* blocks (nblk, from the fewest of TB_MAX tiles up to a few more) and panels per column block
 * (ncp, from NCP_MAX halving down to one pair) for t threads: the split whose items the pool
 * finishes first (ei_pool_makespan; an item costed as its multiply-adds plus the V and U it
 * reads), among those with an item per pool chunk at least; over the first band's blocks */
static void wg_split(const wg_plan *p, int t, int64_t *nblk_io, int64_t *ncp_io) {
    enum { MAX_ITEMS = 512 };
    double cost[MAX_ITEMS], best = 0.0;
    int64_t nblk0 = *nblk_io, ncp0 = *ncp_io, want = (int64_t)EI_CHUNKS_PER_THREAD * t, C = EI_MAX(1, p->a->c);
    int best_full = -1;
    if (t > EI_MAX_THREADS) return;
    for (int64_t ncp = ncp0; ncp >= 1; ncp = ncp > 2 ? (ncp + 1) / 2 : ncp - 1) {
        if (ncp == 1 && ncp0 > 1) break;
        int64_t ncb = (p->panels + ncp - 1) / ncp;
        for (int64_t nblk = nblk0; nblk <= EI_MIN(p->units, nblk0 + 4 * t); nblk++) {
            int64_t tb = (p->units + nblk - 1) / nblk * 12;
            int64_t bb = EI_MAX(EI_MAX((int64_t)1, BAND_FLOATS / (p->np * tb * C)), (want + ncb - 1) / ncb);
            int64_t nb = EI_MIN(bb, nblk), n = nb * ncb;
            if (n > MAX_ITEMS) break;
            for (int64_t i = 0; i < n; i++) {
                int64_t cb = i % ncb, b = i / ncb;
                double rows = (double)(EI_MIN(p->tiles, p->units * (b + 1) / nblk * 12) -
                                       EI_MIN(p->tiles, p->units * b / nblk * 12));
                double cols = (double)((EI_MIN(p->panels, (cb + 1) * ncp) - cb * ncp) * EI_SG_NR);
                cost[i] = rows * cols + 8.0 * (rows + cols);
            }
            double span = ei_pool_makespan(cost, n, t);
            int full = n >= want;
            if (full > best_full || (full == best_full && span < best * 0.995)) {
                best = span;
                best_full = full;
                *nblk_io = nblk;
                *ncp_io = ncp;
            }
        }
    }
}

/* the plan depends on the shapes and the thread count only (not on the ISA: the scratch
 * sized at prepare fits a run under any ISA mask) */
static void make_plan(const ei_conv_f32_args *a, ei_sg_kernel k, int r, wg_plan *p) {
    memset(p, 0, sizeof *p);
    p->a = a;
    p->k = k;
    p->r = r;
    p->np = (r + 2) * (r + 2);
    p->tiles_x = (a->ow + r - 1) / r;
    p->tiles_img = p->tiles_x * ((a->oh + r - 1) / r);
    p->tiles = (int64_t)a->n * p->tiles_img;
    p->panels = (a->m + EI_SG_NR - 1) / EI_SG_NR;
    int64_t nb = EI_MAX((int64_t)1, (a->c + KC_MAX - 1) / KC_MAX);
    p->kc = (a->c + nb - 1) / nb;
    int64_t t = a->threads < 1 ? 1 : a->threads, want = t > 1 ? 4 * t : 1;
    /* blocks of whole 12-tile units (a multiple of every micro-kernel's rows), at most TB_MAX
     * tiles, as even as possible; with threads, the blocks and column blocks that the pool's
     * hand-out finishes first (as conv_f32.c's plan_split: 96/96/4-row blocks at 56x56 left one
     * thread most of the work) */
    p->units = (p->tiles + 11) / 12;
    int64_t nblk = (p->units + TB_MAX / 12 - 1) / (TB_MAX / 12), ncp = EI_MIN(p->panels, (int64_t)NCP_MAX);
    if (t > 1 && a->split_mr == 12 && a->split_threads == t && a->split_rows >= nblk &&
        a->split_rows <= p->units && a->split_panels >= 1 && a->split_panels <= ncp) {
        nblk = a->split_rows;           /* chosen at prepare (ei_winograd_f32_plan) */
        ncp = a->split_panels;
    } else if (t > 1) wg_split(p, (int)t, &nblk, &ncp);
    p->nblk = nblk;
    p->tb = (p->units + nblk - 1) / nblk * 12;
    p->ncp = ncp;
    p->ncb = (p->panels + ncp - 1) / ncp;
    /* a band: the blocks whose V fits BAND_FLOATS, and enough of them for the threads */
    int64_t blk_floats = p->np * p->tb * EI_MAX((int64_t)1, (int64_t)a->c);
    int64_t bb = EI_MAX((int64_t)1, BAND_FLOATS / blk_floats);
    bb = EI_MAX(bb, (want + p->ncb - 1) / p->ncb);
    p->band_blk = EI_MIN(bb, p->nblk);
    p->band_floats = p->band_blk * blk_floats;
    /* the input transform: each block's channels in chunks of whole 16-channel vectors, so a
     * band of few blocks (one at 14x14) still gives every thread a share; not for a band of
     * under 2048 tile-channels (~5 us: less than the hand-out and join cost) */
    int64_t c16 = a->c / 16, band_tiles = EI_MIN(p->tiles, p->band_blk * p->tb);
    p->ccn = band_tiles * a->c < 2048 ? 1 : EI_MAX((int64_t)1, EI_MIN(c16, (want + p->band_blk - 1) / p->band_blk));
}

static int64_t mb_floats(const wg_plan *p) { return p->np * p->tb * p->ncp * EI_SG_NR; }

/* bytes of scratch: the band's V and one transform-domain output block per thread */
static int64_t scratch_with(const ei_conv_f32_args *a, int r) {
    wg_plan p;
    make_plan(a, ei_sg_scalar(), r, &p);
    int64_t t = a->threads < 1 ? 1 : a->threads;
    return (p.band_floats + t * mb_floats(&p)) * (int64_t)sizeof(float);
}

EI_API int64_t ei_winograd_f32_scratch(const ei_conv_f32_args *a) { return scratch_with(a, 4); }
EI_API int64_t ei_winograd2_f32_scratch(const ei_conv_f32_args *a) { return scratch_with(a, 2); }

static void in_range(void *vp, int64_t i0, int64_t i1) {
    const wg_plan *p = (const wg_plan *)vp;
    int64_t c16 = p->a->c / 16;
    for (int64_t i = i0; i < i1; i++) {
        int64_t blk = i / p->ccn, j = i % p->ccn, b = p->band_b0 + blk;
        int64_t t0 = blk_t0(p, b), nt = blk_t0(p, b + 1) - t0;
        int64_t c0 = c16 * j / p->ccn * 16, c1 = j + 1 == p->ccn ? p->a->c : c16 * (j + 1) / p->ccn * 16;
        wg_input(p, t0, nt, c0, c1, p->v + blk * p->np * p->tb * p->a->c);
    }
}

/* one (tile block, column block) of the band: np GEMMs into mb, then the output transform */
static void gemm_item(const wg_plan *p, int64_t item, float *mb) {
    const ei_conv_f32_args *a = p->a;
    int64_t cb = item % p->ncb, blk = item / p->ncb;
    int64_t t0 = blk_t0(p, p->band_b0 + blk), nt = blk_t0(p, p->band_b0 + blk + 1) - t0;
    int64_t pn0 = cb * p->ncp, pn1 = EI_MIN(p->panels, pn0 + p->ncp), ldm = p->ncp * EI_SG_NR;
    int64_t C = a->c, col0 = pn0 * EI_SG_NR, ncol = EI_MIN((int64_t)a->m, pn1 * EI_SG_NR) - col0;
    const float *vb = p->v + blk * p->np * p->tb * C;
    const int mr = p->k.mr;
    for (int64_t xi = 0; xi < p->np; xi++) {
        const float *vx = vb + xi * p->tb * C;
        const float *ux = a->wpack + xi * p->panels * C * EI_SG_NR;
        float *mx = mb + xi * p->tb * ldm;
        for (int64_t k0 = 0; k0 < C; k0 += p->kc) {
            int64_t kcn = EI_MIN(p->kc, C - k0);
            ei_sg_ep ep = { NULL, NULL, 0, 0.0f, 0.0f, k0 > 0, 0 };
            for (int64_t pn = pn0; pn < pn1; pn++) {
                int nr = (int)EI_MIN((int64_t)EI_SG_NR, a->m - pn * EI_SG_NR);
                int two = p->k.fn2 != NULL && pn + 1 < pn1;
                int nr2 = two ? (int)EI_MIN((int64_t)EI_SG_NR, a->m - (pn + 1) * EI_SG_NR) : 0;
                const float *bp = ux + (pn * C + k0) * EI_SG_NR;
                float *cp = mx + (pn - pn0) * EI_SG_NR;
                for (int64_t i = 0; i < nt; i += mr) {
                    int m_rows = (int)EI_MIN((int64_t)mr, nt - i);
                    if (two) p->k.fn2(m_rows, kcn, vx + i * C + k0, C, bp, C * EI_SG_NR, cp + i * ldm, ldm, nr2, &ep);
                    else p->k.fn(m_rows, kcn, vx + i * C + k0, C, bp, cp + i * ldm, ldm, nr, &ep);
                }
                pn += two;
            }
        }
    }
    wg_output(p, mb, ldm, t0, nt, ncol, col0);
    if (a->act != 0 && a->act != EI_U_RELU && a->act != EI_U_CLIP) {
        /* the other activations on each pixel's columns of the block, still in cache */
        for (int64_t r = 0; r < nt; r++) {
            int64_t t = t0 + r, b = t / p->tiles_img, q = t - b * p->tiles_img;
            int64_t oy0 = q / p->tiles_x * p->r, ox0 = q % p->tiles_x * p->r;
            for (int64_t yy = oy0; yy < EI_MIN(oy0 + p->r, (int64_t)a->oh); yy++) {
                float *row = a->y + ((b * a->oh + yy) * a->ow + ox0) * a->m + col0;
                for (int64_t xx = ox0; xx < EI_MIN(ox0 + p->r, (int64_t)a->ow); xx++, row += a->m)
                    ei_unary_f32_range(a->act, row, row, ncol, a->p0, a->p1);
            }
        }
    }
}

static void gemm_range(void *vp, int64_t i0, int64_t i1) {
    const wg_plan *p = (const wg_plan *)vp;
    float *mb = p->v + p->band_floats + (int64_t)ei_pool_slot() * mb_floats(p);
    for (int64_t i = i0; i < i1; i++) gemm_item(p, i, mb);
}

static void winograd_with(const ei_conv_f32_args *a, ei_sg_kernel k, int r) {
    wg_plan p;
    make_plan(a, k, r, &p);
    if (p.tiles <= 0 || a->m <= 0 || a->c <= 0) return;     /* (Python routes no empty conv here) */
    p.v = a->scratch;
    /* ~2^18 multiply-adds an item at least, else one thread */
    int64_t macs = p.tiles * p.np * (int64_t)a->c * a->m, t = a->threads < 1 ? 1 : a->threads;
    if (macs < ((int64_t)1 << 18) * t) t = 1;
    for (int64_t b0 = 0; b0 < p.nblk; b0 += p.band_blk) {
        p.band_b0 = b0;
        p.band_nblk = EI_MIN(p.band_blk, p.nblk - b0);
        ei_parallel_for(p.band_nblk * p.ccn, 1, in_range, &p, (int)t);
        ei_parallel_for(p.band_nblk * p.ncb, 1, gemm_range, &p, (int)t);
    }
}

/* a->kh == a->kw == 3, strides and dilations 1, one group (Python routes only those here) */
EI_API void ei_winograd_f32(const ei_conv_f32_args *a) { winograd_with(a, ei_sg_pick(), 4); }

/* at prepare: the work split for a->threads into a->split_* (call before sizing the scratch) */
static void plan_with(ei_conv_f32_args *a, int r) {
    wg_plan p;
    a->split_mr = 0;
    make_plan(a, ei_sg_scalar(), r, &p);
    a->split_mr = 12;                   /* (the split's tile unit; any micro-kernel) */
    a->split_threads = a->threads;
    a->split_rows = (int32_t)p.nblk;
    a->split_panels = (int32_t)p.ncp;
}

EI_API void ei_winograd_f32_plan(ei_conv_f32_args *a) { plan_with(a, 4); }

/* F(2x2, 3x3): the same conv on 2x2 output tiles, 16 transform points (weights 16/9 of the
 * direct conv's instead of 36/9, 2.25x fewer multiply-adds than it instead of 4x) */
EI_API void ei_winograd2_f32(const ei_conv_f32_args *a) { winograd_with(a, ei_sg_pick(), 2); }
EI_API void ei_winograd2_f32_plan(ei_conv_f32_args *a) { plan_with(a, 2); }

/* (m, c, 3, 3) ONNX weights -> U = G g G^T per transform point (G: n x 3), packed as the
 * SGEMM's panels: out[xi][panel][ci][16], xi = row * n + col (zero past the last output
 * channel), in double precision */
static void pack_with(const float *w, int32_t m, int32_t c, float *out, const double (*G)[3], int n) {
    int64_t panels = (m + EI_SG_NR - 1) / EI_SG_NR;
    memset(out, 0, sizeof(float) * (size_t)(n * n * panels * c * EI_SG_NR));
    for (int64_t j = 0; j < m; j++)
        for (int64_t ci = 0; ci < c; ci++) {
            const float *g = w + (j * c + ci) * 9;
            double gg[6][3];
            for (int l = 0; l < n; l++)
                for (int b = 0; b < 3; b++) gg[l][b] = G[l][0] * g[b] + G[l][1] * g[3 + b] + G[l][2] * g[6 + b];
            for (int l = 0; l < n; l++)
                for (int kk = 0; kk < n; kk++) {
                    double u = gg[l][0] * G[kk][0] + gg[l][1] * G[kk][1] + gg[l][2] * G[kk][2];
                    out[(((l * n + kk) * panels + j / EI_SG_NR) * c + ci) * EI_SG_NR + j % EI_SG_NR] = (float)u;
                }
        }
}

/* F(4x4, 3x3): 36 points */
EI_API void ei_winograd_f32_pack(const float *w, int32_t m, int32_t c, float *out) {
    static const double G[6][3] = { { 1.0 / 4, 0, 0 }, { -1.0 / 6, -1.0 / 6, -1.0 / 6 },
                                    { -1.0 / 6, 1.0 / 6, -1.0 / 6 }, { 1.0 / 24, 1.0 / 12, 1.0 / 6 },
                                    { 1.0 / 24, -1.0 / 12, 1.0 / 6 }, { 0, 0, 1 } };
    pack_with(w, m, c, out, G, 6);
}

/* F(2x2, 3x3): 16 points, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1] */
EI_API void ei_winograd2_f32_pack(const float *w, int32_t m, int32_t c, float *out) {
    static const double G[4][3] = { { 1, 0, 0 }, { 0.5, 0.5, 0.5 }, { 0.5, -0.5, 0.5 }, { 0, 0, 1 } };
    pack_with(w, m, c, out, G, 4);
}

/* the transforms' widest vectors under the current ISA mask, and the GEMM's micro-kernel */
EI_API const char *ei_winograd_f32_isa(void) { return ei_sg_pick().name; }

/* ---- self-test: the dispatched kernels vs the scalar ones, and both vs a direct
 * double-precision conv, on seeded shapes (odd sizes, partial tiles, every padding,
 * channel tails, several K / column blocks and bands, residual, every activation) ---- */

EI_API int ei_selftest_winograd_f32(void) {
    int fails = 0;
    st_state = 4242;
    static const int acts[] = { 0, EI_U_RELU, EI_U_CLIP, EI_U_HSWISH, EI_U_SILU, EI_U_SIGMOID, EI_U_LEAKY };
    for (int trial = 0; trial < 80; trial++) {
        int r = trial < 40 ? 4 : 2, np = (r + 2) * (r + 2);   /* F(4x4, 3x3), then F(2x2, 3x3) */
        ei_conv_f32_args a;
        memset(&a, 0, sizeof a);
        int big = trial % 10 == 9;                  /* several K blocks / bands */
        a.n = st_int(1, 2);
        a.c = big ? st_int(300, 400) : st_int(1, trial % 3 ? 40 : 70);
        a.m = big ? st_int(20, 40) : st_int(1, trial % 4 ? 40 : 150);
        a.h = st_int(1, big ? 12 : 19); a.w = st_int(1, big ? 12 : 23);
        a.kh = a.kw = 3; a.sh = a.sw = a.dh = a.dw = 1; a.group = 1;
        a.pt = st_int(0, 2); a.pl = st_int(0, 2);
        int pb = st_int(0, 2), pr = st_int(0, 2);
        a.oh = a.h + a.pt + pb - 2;
        a.ow = a.w + a.pl + pr - 2;
        if (a.oh <= 0 || a.ow <= 0) continue;
        a.act = acts[trial % 7];
        a.p0 = a.act == EI_U_CLIP ? -0.3f : a.act == EI_U_LEAKY ? 0.1f : 0.0f;
        a.p1 = a.act == EI_U_CLIP ? 0.4f : 0.0f;
        a.threads = 1 + trial % 3;
        int panels = (a.m + 15) / 16;
        int64_t nx = (int64_t)a.n * a.h * a.w * a.c, ny = (int64_t)a.n * a.oh * a.ow * a.m;
        float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * a.m * a.c * 9), *bias = malloc(sizeof(float) * a.m);
        float *z = malloc(sizeof(float) * ny), *y0 = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny);
        float *pk = malloc(sizeof(float) * (size_t)np * panels * a.c * 16);
        float *scr = malloc((size_t)scratch_with(&a, r));
        for (int64_t i = 0; i < nx; i++) x[i] = st_unif();
        for (int64_t i = 0; i < (int64_t)a.m * a.c * 9; i++) w[i] = st_unif();
        for (int i = 0; i < a.m; i++) bias[i] = st_unif();
        for (int64_t i = 0; i < ny; i++) z[i] = st_unif();
        if (r == 4) ei_winograd_f32_pack(w, a.m, a.c, pk);
        else ei_winograd2_f32_pack(w, a.m, a.c, pk);
        a.x = x; a.wpack = pk; a.scratch = scr;
        a.bias = trial % 3 ? bias : NULL;
        a.z = trial % 2 ? z : NULL;
        a.y = y0;
        winograd_with(&a, ei_sg_scalar(), r);
        a.y = y1;
        winograd_with(&a, ei_sg_pick(), r);
        for (int64_t q = 0; q < ny && fails < 1000; q++) {
            double mag;
            float ref = st_conv_ref(&a, w, q, &mag);
            /* Winograd's error grows with the sum of |products| (the transforms' large coefficients) */
            double tol = 2e-5 * (mag + 1.0);
            if (fabs(y0[q] - ref) > tol || fabs(y1[q] - ref) > tol || fabs(y0[q] - y1[q]) > tol) fails++;
        }
        free(x); free(w); free(bias); free(z); free(y0); free(y1); free(pk); free(scr);
    }
    return fails;
}
