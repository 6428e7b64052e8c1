/* fp32 convolution (NHWC) and GEMM with constant B on the packed SGEMM of sgemm.c.
 *
 * Output rows are the output pixels (n, oy, ox) of one group, columns its output channels:
 * Y[p, g*mg + j] = sum_k A[p, k] W_g[k, j], k = (ky, kx, ci) over the group's cg channels.
 * A 1x1 stride-1 unpadded conv (and a GEMM: h = rows, w = 1) reads A straight from the input
 * (row stride c); any other conv gathers the im2col rows of one tile (MC rows x KC taps) into
 * per-thread scratch right before they are used (contiguous runs: a whole kernel row of taps
 * at once where it lies inside the input), so no whole column matrix is ever materialised
 * and the tile is in cache for the micro-kernels. (Packing A into MR-interleaved micro-panels,
 * as BLAS does, measured slower here: 43 vs 67 GFLOP/s on a 56x56 576->64 1x1, one thread;
 * the transpose costs more than the six row streams it saves.)
 *
 * Work items are (group, row block, column block); the pool hands them out dynamically, so a
 * descheduled thread's items are taken by the others; with threads, the blocks are the split
 * that hand-out finishes first (plan_split, searched once at prepare by ei_conv_f32_plan).
 * Each item runs its K blocks in order (micro-tiles outer, panels inner)
 * and applies the fused epilogue to its tile when the last one is done: bias (initial value
 * of the first block), residual, and the activation (Relu/Clip in the micro-kernel, the other
 * unary activations of elementwise.c on the tile's rows while they are in cache). */
#include "sgemm.h"
#include "elementwise.h"
#include "selftest_conv.h"
#include "selftest_rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { KC_MAX = 320, MC_MAX = 96 };
/* fewest channels per group for the indirect path: a tap's pointers are loaded per kc values */
enum { IND_MIN_CG = 16 };

typedef struct {
    const ei_conv_f32_args *a;
    ei_sg_kernel k;
    int64_t rows, K, cg, mg, panels, kc, tiles, nc_panels, nrb, ncb, items;
    int mr;                     /* rows of a micro-tile */
    int direct;
    /* implicit: K blocks never cross a kernel row (krow = kw * cg values of k), so a block of
     * an output pixel whose kernel columns all lie inside the input ([oxa, oxb)) is one
     * contiguous run of the NHWC input, and a micro-tile of such pixels in one output row is
     * read in place (row stride sw * c): no im2col copy */
    int implicit;
    int64_t krow, oxa, oxb;
    /* indirect (the ISA's ei_sg_ikr): every micro-tile's A rows through per (tap, row)
     * pointers into the input, a zero row for padding taps, so no tile is copied whatever
     * output rows it spans; K blocks are whole taps (itap of them, as even as possible) or,
     * past KC_MAX channels, a tap's channels in icb even sub-blocks */
    int indirect;
    int64_t itap, icb;
} cv_plan;

/* -1: the plan's choice; 0: never indirect; 1: indirect wherever the kernel has it (A/B) */
static int indirect_mode = -1;

static int is_direct(const ei_conv_f32_args *a) {
    return a->kh == 1 && a->kw == 1 && a->sh == 1 && a->sw == 1 && a->pt == 0 && a->pl == 0 &&
           a->oh == a->h && a->ow == a->w;
}

/* When the pool (runtime.c) finishes a job of n items on t threads whose item i costs
 * cost[i]: it cuts the job into C = min(n, EI_CHUNKS_PER_THREAD * t) chunks (chunk c: items
 * [n c / C, n (c + 1) / C)); thread s takes its own chunks [C s / t, C (s + 1) / t) in order,
 * then the untaken ones of slots s + 1, s + 2, ...; threads equally fast. */
double ei_pool_makespan(const double *cost, int64_t n, int t) {
    int64_t C = EI_MIN(n, (int64_t)EI_CHUNKS_PER_THREAD * t);
    double cc[EI_CHUNKS_PER_THREAD * EI_MAX_THREADS], clock[EI_MAX_THREADS] = { 0 };
    int64_t next[EI_MAX_THREADS], end[EI_MAX_THREADS];
    if (t > EI_MAX_THREADS || C <= 0) return 0.0;
    for (int64_t c = 0; c < C; c++) {
        cc[c] = 0.0;
        for (int64_t i = n * c / C; i < n * (c + 1) / C; i++) cc[c] += cost[i];
    }
    for (int s = 0; s < t; s++) { next[s] = C * s / t; end[s] = C * (s + 1) / t; }
    double span = 0.0;
    for (int done = 0; done < t;) {
        int s = -1;                             /* the thread free first takes the next chunk */
        for (int q = 0; q < t; q++)
            if (clock[q] >= 0.0 && (s < 0 || clock[q] < clock[s])) s = q;
        int took = 0;
        for (int k = 0; k < t && !took; k++) {
            int o = (s + k) % t;
            if (next[o] < end[o]) { clock[s] += cc[next[o]++]; took = 1; }
        }
        if (!took) { span = EI_MAX(span, clock[s]); clock[s] = -1.0; done++; }
    }
    return span;
}

/* Row blocks (nrb, whole micro-tiles, even) and column blocks (ncp panels each) for t
 * threads: of the splits with nrb from the fewest blocks of MC_MAX rows up to a few more and
 * ncp from 16 panels halving down to one pair, the one the pool's hand-out finishes first
 * (ei_pool_makespan), each item costed as its multiply-adds plus the A and B it reads (a
 * read float ~ 8 multiply-adds: small items cost more per output), among those with at
 * least as many items as the pool makes chunks (fewer leave a late thread's share to it alone:
 * two items for two threads made SqueezeNet's small layers 40% slower). Cutting the rows alone
 * (96-row blocks) left ResNet-50's 14x14 1x1 convs 196 rows as blocks of 96, 96 and 4: twelve
 * items of which the pool's eight chunks held one or two big ones, so one thread ran 5 of 8
 * units (2-thread scaling 1.45x on single convs). */
static void plan_split(const cv_plan *p, int t, int64_t mr, int64_t tiles, int64_t *nrb_io, int64_t *ncp_io) {
    enum { MAX_ITEMS = 512 };
    double cost[MAX_ITEMS], best = 0.0;
    int64_t nrb0 = *nrb_io, ncp0 = *ncp_io, want = (int64_t)EI_CHUNKS_PER_THREAD * t;
    int best_full = -1;
    if (t > EI_MAX_THREADS) return;
    for (int64_t ncp = ncp0; ncp >= 1; ncp = ncp > 2 ? (ncp + 1) / 2 : ncp - 1) {
        if (ncp == 1 && ncp0 > 1) break;        /* one panel only where there is one */
        int64_t ncb = (p->panels + ncp - 1) / ncp;
        for (int64_t nrb = nrb0; nrb <= EI_MIN(tiles, nrb0 + 4 * t); nrb++) {
            int64_t n = p->a->group * nrb * ncb;
            if (n > MAX_ITEMS) break;
            for (int64_t i = 0; i < n; i++) {
                int64_t cb = i % ncb, rb = (i / ncb) % nrb;
                int64_t r0 = EI_MIN(p->rows, tiles * rb / nrb * mr), r1 = EI_MIN(p->rows, tiles * (rb + 1) / nrb * mr);
                int64_t c0 = cb * ncp * EI_SG_NR, c1 = EI_MIN(p->panels, (cb + 1) * ncp) * EI_SG_NR;
                double rows = (double)(r1 - r0), cols = (double)(c1 - c0);
                cost[i] = rows * cols + 8.0 * (rows + cols);
            }
            double span = ei_pool_makespan(cost, n, t);
            int full = n >= want;               /* a chunk per item at least */
            if (full > best_full || (full == best_full && span < best * 0.995)) {
                best = span;
                best_full = full;
                *nrb_io = nrb;
                *ncp_io = ncp;
            }
        }
    }
}

/* K blocks of at most KC_MAX, as even as possible (no thin last block) */
static void make_plan(const ei_conv_f32_args *a, ei_sg_kernel k, cv_plan *p) {
    p->a = a;
    p->k = k;
    p->rows = (int64_t)a->n * a->oh * a->ow;
    p->cg = a->c / a->group;
    p->mg = a->m / a->group;
    p->K = p->cg * a->kh * a->kw;
    p->panels = (p->mg + EI_SG_NR - 1) / EI_SG_NR;
    p->kc = ei_k_block(p->K, KC_MAX);
    p->direct = is_direct(a);
    p->krow = (int64_t)a->kw * p->cg;
    /* (a kernel row of fewer than 64 values, as a 3-channel stem's, is cheaper copied than
     * run as blocks of its own) */
    p->implicit = !p->direct && a->group == 1 && a->dw == 1 && p->krow >= 64;
    /* a residual written in place (z == y, conv_native.residual_in_place: K <= KC_MAX) must
     * be summed in one K block: a kernel row's block would store partial sums over z first */
    if (a->z != NULL && a->z == a->y && p->K <= KC_MAX) p->implicit = 0;
    if (p->implicit) p->kc = ei_k_block(p->krow, KC_MAX);
    p->oxa = EI_MIN((int64_t)a->ow, ((int64_t)a->pl + a->sw - 1) / a->sw);
    int64_t lastx = (int64_t)a->w - 1 - (int64_t)(a->kw - 1) * a->dw + a->pl;
    p->oxb = lastx < 0 ? 0 : EI_MIN((int64_t)a->ow, lastx / a->sw + 1);
    if (p->oxb < p->oxa) p->oxb = p->oxa;
    /* row blocks of whole micro-tiles, at most MC_MAX rows, as even as possible; NC: up to 16
     * panels (256 columns: a KC x NC block of B is 320 KB at most, L2-sized). With threads,
     * the split that the pool's hand-out finishes first (plan_split). */
    /* micro-tile rows: the kernel's most (AVX-512 14, else its mr) for a layer of few rows
     * on one thread, where each weight row then feeds more rows (ResNet-50's 7x7 layers,
     * 49 rows: 4 tiles instead of 12+12+12+12+1; 1 thread, A/B interleaved on its conv
     * shapes: 7x7 layers 4-7% faster, 14x14 0-3%), and for 64 rows or fewer at any thread
     * count (2 threads, A/B interleaved per split on ResNet-50's 7x7 layers, loaded machine:
     * 3x3 convs 4-7% faster by min, 1x1 ones 0-9% by median); the default mr otherwise (at 2
     * threads 14-row tiles made the 14x14 layers 10-19% slower, the 56x56 ones 1-5%) */
    p->mr = (a->threads <= 1 && p->rows <= 196) || p->rows <= 64 ? k.mr_max : k.mr;
    /* indirect where the im2col tiles would mostly be copied: output rows shorter than two
     * micro-tiles (most tiles then cross a row or hold a border pixel: ResNet-50's 14x14 and
     * 7x7 layers, 2-8% faster, 1 thread, C loop min of 300-3000) or convs the kernel-row
     * blocks do not read in place; not on longer rows, where those read most tiles in place
     * (1 thread: 28x28 64->64 352.7 -> 362.2 us, 56x56 64->64 1385 -> 1465, 28x28 128->128
     * 1280 -> 1295, 56x56 64->128 stride 2 648 -> 683) */
    p->indirect = !p->direct && k.ifn != NULL && p->cg >= IND_MIN_CG && indirect_mode != 0 &&
                  (indirect_mode == 1 || !p->implicit || a->ow < 2 * p->mr);
    if (p->indirect) {
        int64_t taps = (int64_t)a->kh * a->kw;
        if (p->cg <= KC_MAX) {
            int64_t per = KC_MAX / p->cg, nb = (taps + per - 1) / per;
            p->itap = (taps + nb - 1) / nb;
            p->icb = 1;
        } else {
            p->itap = 1;
            p->icb = (p->cg + KC_MAX - 1) / KC_MAX;
        }
    }
    int64_t mr = p->mr, tiles = (p->rows + mr - 1) / mr, tmax = MC_MAX / mr;
    int64_t nrb = (tiles + tmax - 1) / tmax, ncp = p->panels < 16 ? p->panels : 16;
    if (a->threads > 1 && a->split_mr == mr && a->split_threads == a->threads && a->split_rows >= nrb &&
        a->split_rows <= EI_MAX(nrb, tiles) && a->split_panels >= 1 && a->split_panels <= ncp) {
        nrb = a->split_rows;            /* chosen at prepare (the search costs ~10 us) */
        ncp = a->split_panels;
    } else if (a->threads > 1) plan_split(p, a->threads, mr, tiles, &nrb, &ncp);
    p->tiles = tiles;
    p->nrb = nrb;
    p->nc_panels = ncp;
    p->ncb = (p->panels + ncp - 1) / ncp;
    p->items = a->group * p->nrb * p->ncb;
}


/* per thread: one MC x KC im2col tile */
static const float zero_row[KC_MAX];
#define TILE_FLOATS ((int64_t)MC_MAX * KC_MAX)

/* bytes of scratch: one tile per thread (none for direct convs and GEMMs) */
EI_API int64_t ei_conv_f32_scratch(const ei_conv_f32_args *a) {
    if (is_direct(a)) return 0;
    int64_t t = a->threads < 1 ? 1 : a->threads;
    return t * TILE_FLOATS * (int64_t)sizeof(float);
}

/* short runs (a few channels) copied inline: a memcpy call costs more than they do */
/* where tap k0 of an im2col row starts: kernel row, kernel column, channel */
typedef struct { int64_t ky, kx, ci; } tap_pos;

/* the im2col row of output pixel (b, oy, ox), taps [k0, k1) of group g, into d; padding taps are zeros.
 * With one group and no horizontal dilation, the taps of one kernel row that lie inside the
 * input are one contiguous run of the NHWC input (a 7x7 stem on 3 channels: 21 floats per
 * copy instead of 3) */
static void im2col_row(const cv_plan *p, int64_t g, int64_t b, int64_t oy, int64_t ox, int64_t k0, int64_t k1,
                       tap_pos t0, float *d) {
    const ei_conv_f32_args *a = p->a;
    const int64_t cg = p->cg, kw = a->kw;
    /* (ky, kx, ci) advanced by each run's length (no divisions per run) */
    int64_t ky = t0.ky, kx = t0.kx, ci = t0.ci;
    const int64_t iy0 = oy * a->sh - a->pt, ix0 = ox * a->sw - a->pl;
    const float *xb = a->x + b * a->h * a->w * a->c + g * cg;
    int joined = a->group == 1 && a->dw == 1;
    if (joined && k0 == 0 && k1 == p->K && ix0 >= 0 && ix0 + (kw - 1) < a->w) {
        /* the whole row of a pixel whose kernel columns all lie inside the input (most of
         * them): one run of kw * cg floats per kernel row, zeros for rows in the padding */
        const int64_t run = kw * cg;
        for (int64_t r = 0; r < a->kh; r++, d += run) {
            int64_t iy = iy0 + r * a->dh;
            if (iy < 0 || iy >= a->h) memset(d, 0, (size_t)run * sizeof(float));
            else ei_copy_floats(d, xb + (iy * a->w + ix0) * a->c, run);
        }
        return;
    }
    int64_t k = k0;
    while (k < k1) {
        int64_t iy = iy0 + ky * a->dh, ix = ix0 + kx * a->dw, len;
        if (iy < 0 || iy >= a->h) {                 /* the rest of this kernel row is padding */
            len = EI_MIN((kw - kx) * cg - ci, k1 - k);
            memset(d, 0, (size_t)len * sizeof(float));
        } else if (ix < 0 || ix >= a->w) {
            len = EI_MIN(cg - ci, k1 - k);
            memset(d, 0, (size_t)len * sizeof(float));
        } else {
            /* joined: extend over the following taps of this kernel row inside the input */
            int64_t taps = joined ? EI_MIN(kw - kx, (int64_t)a->w - ix) : 1;
            len = EI_MIN(taps * cg - ci, k1 - k);
            ei_copy_floats(d, xb + (iy * a->w + ix) * a->c + ci, len);
        }
        d += len;
        k += len;
        for (ci += len; ci >= cg; ci -= cg)
            if (++kx == kw) { kx = 0; ky++; }
    }
}

static void post_activation(const cv_plan *p, int64_t g, int64_t r0, int64_t r1, int64_t pn0, int64_t pn1,
                            int inline_clamp);

/* the K blocks of the indirect path: block kb covers taps [*t0, *t0 + *nt) and, of each, the
 * channels [*c0, *c0 + *cn); K rows [k0, k0 + nt * cn) of the packed weights */
static void ind_block(const cv_plan *p, int64_t kb, int64_t *t0, int64_t *nt, int64_t *c0, int64_t *cn) {
    int64_t taps = (int64_t)p->a->kh * p->a->kw;
    if (p->icb == 1) {
        int64_t nb = (taps + p->itap - 1) / p->itap;
        *t0 = taps * kb / nb;
        *nt = taps * (kb + 1) / nb - *t0;
        *c0 = 0;
        *cn = p->cg;
    } else {
        *t0 = kb / p->icb;
        *nt = 1;
        *c0 = p->cg * (kb % p->icb) / p->icb;
        *cn = p->cg * (kb % p->icb + 1) / p->icb - *c0;
    }
}

static int64_t ind_blocks(const cv_plan *p) {
    int64_t taps = (int64_t)p->a->kh * p->a->kw;
    return p->icb == 1 ? (taps + p->itap - 1) / p->itap : taps * p->icb;
}

/* one item on the indirect kernel: per K block, per micro-tile, the (tap, row) pointers of its
 * pixels, then every panel pair of the item on them */
/* What work item ``item`` covers: group g, output rows [r0, r1) (whole micro-tiles), weight
 * panels [pn0, pn1) of the group's packed weights wg */
typedef struct { int64_t g, r0, r1, pn0, pn1; const float *wg; } cv_item;

static cv_item item_of(const cv_plan *p, int64_t item) {
    int64_t cb = item % p->ncb, rb = (item / p->ncb) % p->nrb, g = item / (p->ncb * p->nrb);
    cv_item it = { g, EI_MIN(p->rows, p->tiles * rb / p->nrb * p->mr),
                   EI_MIN(p->rows, p->tiles * (rb + 1) / p->nrb * p->mr), cb * p->nc_panels, 0,
                   p->a->wpack + g * p->panels * p->K * EI_SG_NR };
    it.pn1 = EI_MIN(p->panels, it.pn0 + p->nc_panels);
    return it;
}

/* One micro-tile's epilogue (output row ``row``, column ``col``): the bias only on the first K
 * block (a bias-less first block still starts from zero: load_c 0), the clamp and the residual
 * on the last; and the weights the caller computes with next prefetched into L2 (the next
 * pair's rows, after the last pair the next K block's first, then the next column block's): on
 * an item's first micro-tile they come from memory (each layer's weights are read once a run),
 * and the kernel's own rows 64 steps ahead leave each pair's first 64 rows unfetched (ResNet-50's
 * conv shapes 1% faster, 1 thread) */
static ei_sg_ep tile_ep(const cv_plan *p, int first, int last, int clamp, int64_t row, int64_t col,
                        const float *wg, const float *bp, int two, int64_t pn, int64_t pn0, int64_t pn1,
                        int64_t k1) {
    const ei_conv_f32_args *a = p->a;
    ei_sg_ep ep = { first && a->bias ? a->bias + col : NULL, NULL, a->m, 0.0f, 0.0f, !first, 0, NULL };
    if (last && clamp) {
        ep.clamp = 1;
        ep.lo = a->act == EI_U_RELU ? 0.0f : a->p0;
        ep.hi = a->act == EI_U_RELU ? INFINITY : a->p1;
    }
    ep.z = last && a->z ? a->z + row * a->m + col : NULL;
    if (two) {
        if (pn + 2 < pn1) ep.pf = bp + 2 * p->K * EI_SG_NR;
        else if (k1 < p->K) ep.pf = wg + (pn0 * p->K + k1) * EI_SG_NR;
        else if (pn1 < p->panels) ep.pf = wg + pn1 * p->K * EI_SG_NR;
    }
    return ep;
}

static void run_item_indirect(const cv_plan *p, int64_t item) {
    const ei_conv_f32_args *a = p->a;
    const int mr = p->mr;
    const cv_item it = item_of(p, item);
    const int64_t g = it.g, r0 = it.r0, r1 = it.r1, nrows = r1 - r0, pn0 = it.pn0, pn1 = it.pn1;
    const float *wg = it.wg;
    int inline_clamp = a->act == EI_U_RELU || a->act == EI_U_CLIP;
    const int64_t plane = (int64_t)a->oh * a->ow, nkb = ind_blocks(p);
    const float *ap[KC_MAX / IND_MIN_CG * EI_SG_MR_MAX];
    for (int64_t kb = 0; kb < nkb; kb++) {
        int64_t t0, nt, c0, cn;
        ind_block(p, kb, &t0, &nt, &c0, &cn);
        int64_t k0 = t0 * p->cg + c0, k1 = k0 + nt * cn;
        int last = kb == nkb - 1;
        int64_t b = r0 / plane, oy = (r0 - b * plane) / a->ow, ox = r0 - b * plane - oy * a->ow;
        for (int64_t i = 0; i < nrows; i += mr) {
            int m_rows = (int)EI_MIN((int64_t)mr, nrows - i);
            for (int r = 0; r < m_rows; r++) {
                const float *xb = a->x + b * a->h * a->w * a->c + g * p->cg + c0;
                int64_t iy0 = oy * a->sh - a->pt, ix0 = ox * a->sw - a->pl;
                for (int64_t t = 0; t < nt; t++) {
                    int64_t ky = (t0 + t) / a->kw, kx = (t0 + t) - ky * a->kw;
                    int64_t iy = iy0 + ky * a->dh, ix = ix0 + kx * a->dw;
                    ap[t * EI_SG_MR_MAX + r] = iy < 0 || iy >= a->h || ix < 0 || ix >= a->w
                                                   ? zero_row : xb + (iy * a->w + ix) * a->c;
                }
                if (++ox == a->ow) { ox = 0; if (++oy == a->oh) { oy = 0; b++; } }
            }
            for (int64_t pn = pn0; pn < pn1; pn++) {
                int64_t col = g * p->mg + pn * EI_SG_NR;
                int two = pn + 1 < pn1;
                int nr = (int)EI_MIN((int64_t)EI_SG_NR, p->mg - (pn + two) * EI_SG_NR);
                const float *bp = wg + (pn * p->K + k0) * EI_SG_NR;
                ei_sg_ep ep = tile_ep(p, kb == 0, last, inline_clamp, r0 + i, col, wg, bp, two, pn, pn0, pn1, k1);
                float *cp = a->y + (r0 + i) * a->m + col;
                p->k.ifn(m_rows, two ? 2 : 1, (int)nt, cn, ap, bp, p->K * EI_SG_NR, cp, a->m, nr, &ep);
                pn += two;
            }
        }
    }
    post_activation(p, g, r0, r1, pn0, pn1, inline_clamp);
}

static void run_item(const cv_plan *p, int64_t item, float *tile) {
    const ei_conv_f32_args *a = p->a;
    const int mr = p->mr;
    const cv_item it = item_of(p, item);
    const int64_t g = it.g, r0 = it.r0, r1 = it.r1, nrows = r1 - r0, pn0 = it.pn0, pn1 = it.pn1;
    const float *wg = it.wg;
    int inline_clamp = a->act == EI_U_RELU || a->act == EI_U_CLIP;
    /* A of micro-tile t (rows [t * mr, ...) of this item): asrc[t], row stride alda[t] */
    const float *asrc[MC_MAX];
    int64_t alda[MC_MAX];
    for (int64_t k0 = 0, k1; k0 < p->K; k0 = k1) {
        k1 = p->implicit ? EI_MIN(k0 + p->kc, (k0 / p->krow + 1) * p->krow) : EI_MIN(p->K, k0 + p->kc);
        int64_t kcn = k1 - k0;
        if (p->direct) {
            for (int64_t i = 0, t = 0; i < nrows; i += mr, t++) {
                asrc[t] = a->x + (r0 + i) * a->c + g * p->cg + k0;
                alda[t] = a->c;
            }
        } else {
            /* the tile's pixels in order: (b, oy, ox) of r0 once, then stepped */
            const int64_t plane = (int64_t)a->oh * a->ow, tap = k0 / p->cg, ky = k0 / p->krow;
            int64_t b = r0 / plane, oy = (r0 - b * plane) / a->ow, ox = r0 - b * plane - oy * a->ow;
            tap_pos t0 = { tap / a->kw, tap % a->kw, k0 - tap * p->cg };
            for (int64_t i = 0, t = 0; i < nrows; i += mr, t++) {
                int64_t m_rows = EI_MIN((int64_t)mr, nrows - i);
                if (p->implicit && ox >= p->oxa && ox + m_rows <= p->oxb) {
                    int64_t iy = oy * a->sh - a->pt + ky * a->dh;
                    if (iy < 0 || iy >= a->h) {         /* a kernel row in the padding: zeros */
                        asrc[t] = zero_row;
                        alda[t] = 0;
                    } else {
                        asrc[t] = a->x + ((b * a->h + iy) * a->w + ox * a->sw - a->pl) * a->c + (k0 - ky * p->krow);
                        alda[t] = (int64_t)a->sw * a->c;
                    }
                    ox += m_rows;
                    if (ox == a->ow) { ox = 0; if (++oy == a->oh) { oy = 0; b++; } }
                    continue;
                }
                for (int64_t r = i; r < i + m_rows; r++) {
                    im2col_row(p, g, b, oy, ox, k0, k1, t0, tile + r * kcn);
                    if (++ox == a->ow) { ox = 0; if (++oy == a->oh) { oy = 0; b++; } }
                }
                asrc[t] = tile + i * kcn;
                alda[t] = kcn;
            }
        }
        int last = k1 == p->K;
        /* micro-tiles outer, panels inner: each A micro-panel comes into L1 once (from memory,
         * for a 1x1 conv reading its input in place) and serves every panel of the item there;
         * the item's KC x NC block of B stays in L2 (measured 1 thread against panels outer:
         * ResNet-50 per-step sum 54.0 -> 53.0 ms, 1x1 convs on 56x56 and 112x112 up to 10%) */
        for (int64_t i = 0, t = 0; i < nrows; i += mr, t++) {
            int m_rows = (int)EI_MIN((int64_t)mr, nrows - i);
            for (int64_t pn = pn0; pn < pn1; pn++) {
                int64_t col = g * p->mg + pn * EI_SG_NR;
                int nr = (int)EI_MIN((int64_t)EI_SG_NR, p->mg - pn * EI_SG_NR);
                /* two panels at once where the ISA has that kernel (the first is then full) */
                int two = p->k.fn2 != NULL && pn + 1 < pn1;
                int nr2 = two ? (int)EI_MIN((int64_t)EI_SG_NR, p->mg - (pn + 1) * EI_SG_NR) : 0;
                const float *bp = wg + (pn * p->K + k0) * EI_SG_NR;
                ei_sg_ep ep = tile_ep(p, k0 == 0, last, inline_clamp, r0 + i, col, wg, bp, two, pn, pn0, pn1, k1);
                float *cp = a->y + (r0 + i) * a->m + col;
                if (two) p->k.fn2(m_rows, kcn, asrc[t], alda[t], bp, p->K * EI_SG_NR, cp, a->m, nr2, &ep);
                else p->k.fn(m_rows, kcn, asrc[t], alda[t], bp, cp, a->m, nr, &ep);
                pn += two;
            }
        }
    }
    post_activation(p, g, r0, r1, pn0, pn1, inline_clamp);
}

/* the activations the micro-kernels do not apply, over an item's rows and columns */
static void post_activation(const cv_plan *p, int64_t g, int64_t r0, int64_t r1, int64_t pn0, int64_t pn1,
                            int inline_clamp) {
    const ei_conv_f32_args *a = p->a;
    if (a->act != 0 && !inline_clamp) {
        int64_t c0 = g * p->mg + pn0 * EI_SG_NR, c1 = g * p->mg + EI_MIN(p->mg, pn1 * EI_SG_NR);
        if (c0 == 0 && c1 == a->m) {    /* every column: the item's rows are one run (a call
                                         * per 16-channel pixel cost MobileNetV3's HardSwish
                                         * stem a third of its time) */
            float *rows = a->y + r0 * a->m;
            ei_unary_f32_range(a->act, rows, rows, (r1 - r0) * a->m, a->p0, a->p1);
            return;
        }
        for (int64_t r = r0; r < r1; r++) {
            float *row = a->y + r * a->m + c0;
            ei_unary_f32_range(a->act, row, row, c1 - c0, a->p0, a->p1);
        }
    }
}

typedef struct { cv_plan p; } cv_ctx;

static void cv_range(void *vctx, int64_t i0, int64_t i1) {
    const cv_ctx *c = (const cv_ctx *)vctx;
    float *tile = c->p.direct ? NULL : c->p.a->scratch + (int64_t)ei_pool_slot() * TILE_FLOATS;
    for (int64_t i = i0; i < i1; i++) {
        if (c->p.indirect) run_item_indirect(&c->p, i);
        else run_item(&c->p, i, tile);
    }
}

static void conv_with(const ei_conv_f32_args *a, ei_sg_kernel k) {
    cv_ctx c;
    make_plan(a, k, &c.p);
    if (c.p.rows <= 0 || a->m <= 0) return;
    if (c.p.K == 0) {                   /* no taps: bias (or zero), residual, activation */
        for (int64_t r = 0; r < c.p.rows; r++)
            for (int64_t j = 0; j < a->m; j++) {
                float v = (a->bias ? a->bias[j] : 0.0f) + (a->z ? a->z[r * a->m + j] : 0.0f);
                ei_unary_f32_range(a->act, &v, &v, 1, a->p0, a->p1);
                a->y[r * a->m + j] = v;
            }
        return;
    }
    /* an item below ~2^18 multiply-adds is not worth a thread hand-off */
    int64_t macs = c.p.rows * a->m * c.p.K, t = a->threads < 1 ? 1 : a->threads;
    if (macs < ((int64_t)1 << 18)) t = 1;
    ei_parallel_for(c.p.items, 1, cv_range, &c, (int)t);
}

EI_API void ei_conv_f32(const ei_conv_f32_args *a) { conv_with(a, ei_sg_pick()); }

/* at prepare: the work split for the current micro-kernel and a->threads into a->split_* */
EI_API void ei_conv_f32_plan(ei_conv_f32_args *a) {
    cv_plan p;
    a->split_mr = 0;
    make_plan(a, ei_sg_pick(), &p);
    a->split_mr = p.mr;
    a->split_threads = a->threads;
    a->split_rows = (int32_t)p.nrb;
    a->split_panels = (int32_t)p.nc_panels;
}

EI_API const char *ei_conv_f32_isa(void) { return ei_sg_pick().name; }

/* whether ei_conv_f32 runs this conv on the indirect path (the current ISA and mode) */
EI_API int ei_conv_f32_indirect(const ei_conv_f32_args *a) {
    cv_plan p;
    make_plan(a, ei_sg_pick(), &p);
    return p.indirect;
}

/* tests and A/B timing: -1 the plan's choice of the indirect path, 0 never, 1 wherever the
 * micro-kernel has it; returns the previous mode */
EI_API int ei_conv_f32_set_indirect(int mode) {
    int old = indirect_mode;
    indirect_mode = mode < 0 ? -1 : mode > 0 ? 1 : 0;
    return old;
}

/* ---- self-test: the dispatched micro-kernel vs the scalar one, and both vs a direct
 * double-precision reference, on seeded shapes (odd sizes, groups, strides, dilations, pads,
 * K blocking, residual, every inline and post-pass activation) ---- */

static void st_pack(const float *w, int m, int cg, int kh, int kw, int group, float *pk) {
    /* w: (m, cg, kh, kw) ONNX order -> group, panel, K = (ky, kx, ci), 16 */
    int mg = m / group, panels = (mg + 15) / 16, K = cg * kh * kw;
    memset(pk, 0, sizeof(float) * (size_t)group * panels * K * 16);
    for (int g = 0; g < group; g++)
        for (int j = 0; j < mg; j++)
            for (int ci = 0; ci < cg; ci++)
                for (int ky = 0; ky < kh; ky++)
                    for (int kx = 0; kx < kw; kx++) {
                        int k = (ky * kw + kx) * cg + ci;
                        pk[(((int64_t)g * panels + j / 16) * K + k) * 16 + j % 16] =
                            w[(((int64_t)(g * mg + j) * cg + ci) * kh + ky) * kw + kx];
                    }
}

EI_API int ei_selftest_conv_f32(void) {
    int fails = 0;
    st_state = 777;
    static const int acts[] = { 0, EI_U_RELU, EI_U_CLIP, EI_U_HSWISH, EI_U_SILU, EI_U_SIGMOID, EI_U_LEAKY };
    for (int trial = 0; trial < 76; trial++) {
        /* trials 60+: wide rows and >= 22 channels, so micro-tiles read the input in place
         * (implicit blocks: every tile shape against the kernel-row blocking); 72+: more
         * channels than a K block, so the indirect path splits each tap's channels */
        int wide = trial >= 60, deep = trial >= 72;
        ei_conv_f32_args a;
        memset(&a, 0, sizeof a);
        a.group = trial % 5 == 3 && !wide ? st_int(2, 3) : 1;
        a.n = st_int(1, 2);
        a.c = a.group * (deep ? st_int(KC_MAX + 1, 2 * KC_MAX + 40) : wide ? st_int(22, 80)
                                                                       : st_int(1, trial % 7 == 0 ? 90 : 20));
        a.m = a.group * st_int(1, 40);
        a.h = st_int(1, 9); a.w = deep ? st_int(3, 9) : wide ? st_int(14, 40) : st_int(1, 11);
        int one = trial % 4 == 0 && !wide;
        a.kh = one ? 1 : st_int(1, 3); a.kw = one ? 1 : st_int(1, 3);
        a.sh = one ? 1 : st_int(1, 2); a.sw = one ? 1 : st_int(1, 2);
        a.dh = one ? 1 : st_int(1, 2); a.dw = one ? 1 : st_int(1, 2);
        if (wide) { a.kw = trial % 3 == 0 ? 1 : 3; a.dw = 1; }
        a.pt = one ? 0 : st_int(0, 2); a.pl = one ? 0 : st_int(0, 2);
        int pb = one ? 0 : st_int(0, 2), pr = one ? 0 : st_int(0, 2);
        a.oh = (a.h + a.pt + pb - (a.kh - 1) * a.dh - 1) / a.sh + 1;
        a.ow = (a.w + a.pl + pr - (a.kw - 1) * a.dw - 1) / a.sw + 1;
        if (a.oh <= 0 || a.ow <= 0) continue;
        a.act = acts[trial % 7];
        a.p0 = a.act == EI_U_CLIP ? -0.3f : a.act == EI_U_HSWISH ? 1.0f / 6 : a.act == EI_U_LEAKY ? 0.1f : 0.0f;
        a.p1 = a.act == EI_U_CLIP ? 0.4f : a.act == EI_U_HSWISH ? 0.5f : 0.0f;
        a.threads = 1 + trial % 3;
        int cg = a.c / a.group, mg = a.m / a.group, panels = (mg + 15) / 16, K = cg * a.kh * a.kw;
        int64_t nx = (int64_t)a.n * a.h * a.w * a.c, ny = (int64_t)a.n * a.oh * a.ow * a.m;
        float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * a.m * K), *bias = malloc(sizeof(float) * a.m);
        float *z = malloc(sizeof(float) * ny), *y0 = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny);
        float *y2 = malloc(sizeof(float) * ny);
        float *pk = malloc(sizeof(float) * (size_t)a.group * panels * K * 16);
        float *scr = malloc((size_t)ei_conv_f32_scratch(&a) + 64);
        for (int64_t i = 0; i < nx; i++) x[i] = st_unif();
        for (int64_t i = 0; i < (int64_t)a.m * K; i++) w[i] = st_unif();
        for (int i = 0; i < a.m; i++) bias[i] = st_unif();
        for (int64_t i = 0; i < ny; i++) z[i] = st_unif();
        st_pack(w, a.m, cg, a.kh, a.kw, a.group, pk);
        a.x = x; a.wpack = pk; a.scratch = scr;
        a.bias = trial % 3 ? bias : NULL;
        a.z = trial % 2 ? z : NULL;
        a.y = y0;
        conv_with(&a, ei_sg_scalar());
        /* the dispatched kernel on its indirect path wherever it has one, then without it (the
         * im2col tiles), then back to the plan's choice */
        int mode = ei_conv_f32_set_indirect(1);
        a.y = y1;
        conv_with(&a, ei_sg_pick());
        ei_conv_f32_set_indirect(0);
        a.y = y2;
        conv_with(&a, ei_sg_pick());
        ei_conv_f32_set_indirect(mode);
        for (int64_t q = 0; q < ny && fails < 1000; q++) {
            double mag;
            float ref = st_conv_ref(&a, w, q, &mag);
            double tol = 1e-5 * (mag + 1.0);
            if (fabs(y0[q] - ref) > tol || fabs(y1[q] - ref) > tol || fabs(y2[q] - ref) > tol ||
                fabs(y0[q] - y1[q]) > tol)
                fails++;
        }
        free(x); free(w); free(bias); free(z); free(y0); free(y1); free(y2); free(pk); free(scr);
    }
    return fails;
}
