/* fp32 ConvTranspose on NHWC tensors, on the packed SGEMM micro-kernels of sgemm.c, in its
 * sub-pixel form: no column matrix and no scatter-add.
 *
 * y[b, oy, ox, m] = bias[m] + sum x[b, iy, ix, c] W[c, m, ky, kx] over oy = iy sh - pt + ky dh
 * (and the same along x). An output row oy is reached only by the taps ky of its phase
 * ry = oy mod sh: those with (ry + pt - ky dh) = 0 (mod sh), i.e. ky = k0 + j * sh / g
 * (g = gcd(sh, dh)), each from input row iy = (oy + pt - k0 dh) / sh - j dh / g. So the output
 * pixels of one phase (ry, rx) form an ordinary correlation of the input with that phase's taps:
 * a GEMM whose rows are the phase's output pixels (ox = rx, rx + sw, ...: sw * m floats apart in
 * y, the micro-kernels' ldc), whose K is (tap row, tap column, input channel), and whose packed
 * weights are that phase's taps (packed once at prepare by ei_convt_f32_pack: per group, per
 * phase, 16-column panels as conv_f32.c). Every output is written exactly once, with the bias
 * as the first K block's initial value and the activation on the last, in registers (Relu,
 * Clip) or on the tile's rows right after (the other EI_ACT_* codes).
 *
 * A row of A for one tap is one input pixel: consecutive output pixels of a phase read
 * consecutive input pixels, so with >= 16 channels per group the K blocks never cross a tap and
 * a micro-tile whose input pixels all lie inside the image is read in place (row stride c); a
 * tap row outside the image reads zeros; only border tiles (and narrow inputs, < 16 channels,
 * whose taps are gathered into one K block) copy rows into a per-thread tile. A k2 s2 upsampling
 * (kernel = stride, no pads) never copies and needs no scratch at all.
 *
 * Work items are (image, output row, column phase, block of its pixels, group, block of output
 * panels), handed out dynamically by the pool like the conv items. */
#include "sgemm.h"
#include "elementwise.h"
#include "selftest_rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const float *x;         /* (n, h, w, c) */
    float *y;               /* (n, oh, ow, m) */
    const float *wpack;     /* ei_convt_f32_pack's layout */
    const float *bias;      /* m, or NULL */
    float *scratch;         /* ei_convt_f32_scratch bytes */
    int32_t n, c, h, w, m, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, group;
    int32_t act;            /* EI_U_* (0: none) */
    float p0, p1;
    int32_t threads;
} ei_convt_f32_args;

enum { CT_KC = 320, CT_MC = 96, CT_INPLACE_MIN = 16 };
#define CT_TILE ((int64_t)CT_MC * CT_KC)

static const float ct_zero_row[CT_KC];

/* the taps of one output phase r along one dim: k = k0 + j * step (j < cnt); the input index
 * of output o (o = r mod s) and tap j is base(o) - j * di, base(o) = (o + p - k0 d) / s */
typedef struct { int64_t k0, step, cnt, di; } ct_taps;

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

static ct_taps phase_taps(int64_t r, int64_t s, int64_t p, int64_t d, int64_t k) {
    ct_taps t = { 0, 1, 0, 0 };
    int64_t g = gcd64(d, s), want = ((r + p) % s + s) % s;
    t.step = s / g;
    t.di = d / g;
    for (int64_t kk = 0; kk < EI_MIN(k, t.step); kk++)
        if ((kk * d) % s == want) {
            t.k0 = kk;
            t.cnt = (k - kk + t.step - 1) / t.step;
            break;
        }
    return t;
}

/* taps k < kernel whose phase ((k d - p) mod s) is below r: where phase r starts in the packing */
static int64_t taps_before(int64_t r, int64_t s, int64_t p, int64_t d, int64_t k) {
    int64_t n = 0;
    for (int64_t kk = 0; kk < k; kk++) n += (((kk * d - p) % s + s) % s) < r;
    return n;
}

typedef struct {
    const ei_convt_f32_args *a;
    ei_sg_kernel k;
    int64_t cg, mg, panels, ktot, kc, mc, ncp, ncb, nbx, nrx, items;
    int inplace;
    /* fold: kernel = stride, no pads, no output padding, one group: every input pixel's taps
     * tile the output exactly, so the GEMM runs over input pixels with all kh * kw * m outputs
     * of a pixel as its columns (J), each output written once (staged per micro-tile and copied
     * to its output rows): one pass over the input however many taps, and 4x the columns of a
     * phase (a 2x2 upsampling to one channel fills 4 lanes, not 1) */
    int fold;
    int64_t J, rows, nrb;
} ct_plan;

static int ct_folds(const ei_convt_f32_args *a) {
    return a->group == 1 && a->kh == a->sh && a->kw == a->sw && (a->dh == 1 || a->kh == 1) &&
           (a->dw == 1 || a->kw == 1) && a->pt == 0 && a->pl == 0 && (int64_t)a->oh == (int64_t)a->h * a->sh &&
           (int64_t)a->ow == (int64_t)a->w * a->sw;
}

/* K blocks of at most CT_KC, as even as possible */
static void ct_make_plan(const ei_convt_f32_args *a, ei_sg_kernel k, ct_plan *p) {
    p->a = a;
    p->k = k;
    p->cg = a->c / a->group;
    p->mg = a->m / a->group;
    p->fold = ct_folds(a);
    if (p->fold) {
        int64_t mr = k.mr, t = a->threads < 1 ? 1 : a->threads, want = t > 1 ? 4 * t : 1;
        p->J = (int64_t)a->kh * a->kw * a->m;
        p->panels = (p->J + EI_SG_NR - 1) / EI_SG_NR;
        p->rows = (int64_t)a->n * a->h * a->w;
        p->kc = ei_k_block(a->c, CT_KC);
        p->mc = EI_MIN((int64_t)(CT_MC / mr) * mr, (p->rows + mr - 1) / mr * mr);
        p->ncp = p->panels < 16 ? p->panels : 16;
        for (;;) {
            int64_t items = ((p->rows + p->mc - 1) / p->mc) * ((p->panels + p->ncp - 1) / p->ncp);
            if (items >= want) break;
            if (p->ncp > 2) p->ncp = (p->ncp + 1) / 2;
            else if (p->mc > 2 * mr) p->mc = (p->mc / 2 + mr - 1) / mr * mr;
            else break;
        }
        p->nrb = (p->rows + p->mc - 1) / p->mc;
        p->ncb = (p->panels + p->ncp - 1) / p->ncp;
        p->items = p->nrb * p->ncb;
        p->inplace = 1;
        return;
    }
    p->panels = (p->mg + EI_SG_NR - 1) / EI_SG_NR;
    p->ktot = (int64_t)a->kh * a->kw * p->cg;
    p->inplace = p->cg >= CT_INPLACE_MIN;
    p->kc = p->inplace ? ei_k_block(p->cg, CT_KC) : CT_KC;
    p->nrx = EI_MIN((int64_t)a->sw, (int64_t)a->ow);
    int64_t per_row = ((int64_t)a->ow + a->sw - 1) / a->sw;        /* pixels of phase 0 in a row */
    int64_t mr = k.mr, mc = (CT_MC / mr) * mr;
    if (mc > (per_row + mr - 1) / mr * mr) mc = (per_row + mr - 1) / mr * mr;
    if (mc < mr) mc = mr;
    int64_t ncp = p->panels < 16 ? p->panels : 16, t = a->threads < 1 ? 1 : a->threads;
    int64_t want = t > 1 ? 4 * t : 1;
    for (;;) {
        int64_t items = (int64_t)a->n * a->oh * p->nrx * ((per_row + mc - 1) / mc) * a->group *
                        ((p->panels + ncp - 1) / ncp);
        if (items >= want || ncp <= 1) break;
        ncp = (ncp + 1) / 2;
    }
    p->mc = mc;
    p->ncp = ncp > 0 ? ncp : 1;
    p->ncb = (p->panels + p->ncp - 1) / p->ncp;
    p->nbx = (per_row + mc - 1) / mc;
    p->items = (int64_t)a->n * a->oh * p->nrx * p->nbx * a->group * p->ncb;
}

/* where the packed weights of (group g, phase ry, rx) start, in floats */
static int64_t phase_offset(const ct_plan *p, int64_t g, int64_t ry, int64_t rx, int64_t cnt_y) {
    const ei_convt_f32_args *a = p->a;
    int64_t before = taps_before(ry, a->sh, a->pt, a->dh, a->kh) * a->kw +
                     cnt_y * taps_before(rx, a->sw, a->pl, a->dw, a->kw);
    return (g * p->ktot + before * p->cg) * p->panels * EI_SG_NR;
}

/* floats of packed weights (fold: the panels, then the bias tiled over the J columns) */
EI_API int64_t ei_convt_f32_pack_size(const ei_convt_f32_args *a) {
    if (ct_folds(a)) {
        int64_t panels = ((int64_t)a->kh * a->kw * a->m + EI_SG_NR - 1) / EI_SG_NR;
        return panels * EI_SG_NR * ((int64_t)a->c + 1);
    }
    int64_t mg = a->m / a->group, panels = (mg + EI_SG_NR - 1) / EI_SG_NR;
    return (int64_t)a->group * a->kh * a->kw * (a->c / a->group) * panels * EI_SG_NR;
}

/* fold packing: panels of 16 of the J = (ky, kx, m) columns over K = c rows; a->bias (if set)
 * tiled over J after them */
static void ct_pack_fold(const ct_plan *p, const float *w, float *out) {
    const ei_convt_f32_args *a = p->a;
    const int64_t kk = (int64_t)a->kh * a->kw, c = a->c;
    for (int64_t pn = 0; pn < p->panels; pn++)
        for (int64_t k = 0; k < c; k++) {
            float *d = out + (pn * c + k) * EI_SG_NR;
            for (int64_t j = 0; j < EI_SG_NR && pn * EI_SG_NR + j < p->J; j++) {
                int64_t col = pn * EI_SG_NR + j, tap = col / a->m, mm = col - tap * a->m;
                d[j] = w[(k * a->m + mm) * kk + tap];
            }
        }
    float *bt = out + p->panels * c * EI_SG_NR;
    for (int64_t j = 0; j < p->J; j++) bt[j] = a->bias ? a->bias[j % a->m] : 0.0f;
}

/* w: ONNX (c, m / group, kh, kw) -> per group, per phase (ry, rx), panels of 16 output
 * channels of K = (tap row j, tap column j', input channel) rows, zero-padded columns */
EI_API void ei_convt_f32_pack(const ei_convt_f32_args *a, const float *w, float *out) {
    ct_plan p;
    ct_make_plan(a, ei_sg_scalar(), &p);
    memset(out, 0, (size_t)ei_convt_f32_pack_size(a) * sizeof(float));
    if (p.fold) {
        ct_pack_fold(&p, w, out);
        return;
    }
    const int64_t kk = (int64_t)a->kh * a->kw;
    for (int64_t g = 0; g < a->group; g++)
        for (int64_t ry = 0; ry < EI_MIN((int64_t)a->sh, (int64_t)a->oh); ry++) {
            ct_taps ty = phase_taps(ry, a->sh, a->pt, a->dh, a->kh);
            for (int64_t rx = 0; rx < p.nrx; rx++) {
                ct_taps tx = phase_taps(rx, a->sw, a->pl, a->dw, a->kw);
                int64_t kp = ty.cnt * tx.cnt * p.cg;
                float *o = out + phase_offset(&p, g, ry, rx, ty.cnt);
                for (int64_t pn = 0; pn < p.panels; pn++)
                    for (int64_t k = 0; k < kp; k++) {
                        int64_t tap = k / p.cg, ci = k - tap * p.cg;
                        int64_t ky = ty.k0 + (tap / tx.cnt) * ty.step, kx = tx.k0 + (tap % tx.cnt) * tx.step;
                        const float *src = w + (g * p.cg + ci) * p.mg * kk + ky * a->kw + kx;
                        float *d = o + (pn * kp + k) * EI_SG_NR;
                        for (int64_t j = 0; j < EI_SG_NR && pn * EI_SG_NR + j < p.mg; j++)
                            d[j] = src[(pn * EI_SG_NR + j) * kk];
                    }
            }
        }
}

/* 1 when some micro-tile may have to copy rows (taps gathered, or input columns outside the
 * image for some output pixels); 0 when every row of A is read in place */
static int ct_gathers(const ct_plan *p) {
    const ei_convt_f32_args *a = p->a;
    if (p->fold) return 0;
    if (!p->inplace) return 1;
    for (int64_t rx = 0; rx < p->nrx; rx++) {
        ct_taps tx = phase_taps(rx, a->sw, a->pl, a->dw, a->kw);
        int64_t cnt = (a->ow - rx + a->sw - 1) / a->sw, ix0 = (rx + a->pl - tx.k0 * a->dw) / a->sw;
        for (int64_t j = 0; j < tx.cnt; j++) {
            int64_t lo = ix0 - j * tx.di, hi = lo + cnt - 1;
            if (lo < 0 || hi >= a->w) return 1;
        }
    }
    return 0;
}

/* bytes of scratch: one tile per thread where rows may be copied, else none */
EI_API int64_t ei_convt_f32_scratch(const ei_convt_f32_args *a) {
    ct_plan p;
    ct_make_plan(a, ei_sg_pick(), &p);
    if (!ct_gathers(&p)) return 0;
    int64_t t = a->threads < 1 ? 1 : a->threads;
    return t * CT_TILE * (int64_t)sizeof(float);
}

/* rows r < nrows (output pixels whose tap-0 input column is ixp + r) of K block [k0, k1) into
 * d (row stride k1 - k0): input values, zeros for taps outside the image */
static void ct_gather(const ct_plan *p, const float *xb, int64_t iy0, int64_t ixp, ct_taps ty, ct_taps tx,
                      int64_t k0, int64_t k1, int nrows, float *d) {
    const ei_convt_f32_args *a = p->a;
    const int64_t cg = p->cg, kcn = k1 - k0;
    for (int r = 0; r < nrows; r++) {
        float *dr = d + r * kcn;
        for (int64_t k = k0; k < k1;) {
            int64_t tap = k / cg, ci = k - tap * cg;
            int64_t iy = iy0 - (tap / tx.cnt) * ty.di, ix = ixp + r - (tap % tx.cnt) * tx.di;
            int64_t len = EI_MIN(cg - ci, k1 - k);
            if (iy < 0 || iy >= a->h || ix < 0 || ix >= a->w) memset(dr, 0, (size_t)len * sizeof(float));
            else ei_copy_floats(dr, xb + (iy * a->w + ix) * a->c + ci, len);
            dr += len;
            k += len;
        }
    }
}

static void ct_item(const ct_plan *p, int64_t item, float *tile) {
    const ei_convt_f32_args *a = p->a;
    int64_t cb = item % p->ncb;
    item /= p->ncb;
    int64_t g = item % a->group;
    item /= a->group;
    int64_t bx = item % p->nbx;
    item /= p->nbx;
    int64_t rx = item % p->nrx;
    item /= p->nrx;
    int64_t oy = item % a->oh, b = item / a->oh;
    int64_t cnt = (a->ow - rx + a->sw - 1) / a->sw, i0 = bx * p->mc, i1 = EI_MIN(cnt, i0 + p->mc);
    if (i0 >= i1) return;
    const int64_t np = i1 - i0, ry = oy % a->sh, ldc = (int64_t)a->sw * a->m;
    ct_taps ty = phase_taps(ry, a->sh, a->pt, a->dh, a->kh), tx = phase_taps(rx, a->sw, a->pl, a->dw, a->kw);
    const int64_t kp = ty.cnt * tx.cnt * p->cg;
    int64_t pn0 = cb * p->ncp, pn1 = EI_MIN(p->panels, pn0 + p->ncp);
    int64_t c0 = g * p->mg + pn0 * EI_SG_NR, c1 = g * p->mg + EI_MIN(p->mg, pn1 * EI_SG_NR);
    float *yrow = a->y + ((b * a->oh + oy) * a->ow + rx + a->sw * i0) * a->m;   /* pixel i0 + i: + i * ldc */
    if (kp == 0) {                      /* no tap reaches these outputs: the bias alone */
        for (int64_t i = 0; i < np; i++) {
            float *row = yrow + i * ldc;
            for (int64_t j = c0; j < c1; j++) row[j] = a->bias ? a->bias[j] : 0.0f;
            ei_unary_f32_range(a->act, row + c0, row + c0, c1 - c0, a->p0, a->p1);
        }
        return;
    }
    const int64_t iy0 = (oy + a->pt - ty.k0 * a->dh) / a->sh;          /* exact: oy is of phase ry */
    const int64_t ixp = (rx + a->pl - tx.k0 * a->dw) / a->sw + i0;      /* pixel i0's tap-0 column */
    const float *wph = a->wpack + phase_offset(p, g, ry, rx, ty.cnt);
    const float *xb = a->x + b * a->h * a->w * a->c + g * p->cg;
    const int mr = p->k.mr;
    const int inline_clamp = a->act == EI_U_RELU || a->act == EI_U_CLIP;
    const float *asrc[CT_MC];
    int64_t alda[CT_MC];
    for (int64_t k0 = 0, k1; k0 < kp; k0 = k1) {
        int64_t tap = k0 / p->cg;
        k1 = p->inplace ? EI_MIN(k0 + p->kc, (tap + 1) * p->cg) : EI_MIN(kp, k0 + p->kc);
        int64_t kcn = k1 - k0;
        int64_t iy = iy0 - (tap / tx.cnt) * ty.di, ixt = ixp - (tap % tx.cnt) * tx.di;
        for (int64_t i = 0, t = 0; i < np; i += mr, t++) {
            int m_rows = (int)EI_MIN((int64_t)mr, np - i);
            if (p->inplace) {
                if (iy < 0 || iy >= a->h) {         /* a tap row above or below the image */
                    asrc[t] = ct_zero_row;
                    alda[t] = 0;
                    continue;
                }
                if (ixt + i >= 0 && ixt + i + m_rows <= a->w) {
                    asrc[t] = xb + (iy * a->w + ixt + i) * a->c + (k0 - tap * p->cg);
                    alda[t] = a->c;
                    continue;
                }
            }
            ct_gather(p, xb, iy0, ixp + i, ty, tx, k0, k1, m_rows, tile + i * kcn);
            asrc[t] = tile + i * kcn;
            alda[t] = kcn;
        }
        int last = k1 == kp;
        for (int64_t pn = pn0; pn < pn1; pn++) {
            int64_t col = g * p->mg + pn * EI_SG_NR;
            int nr = (int)EI_MIN((int64_t)EI_SG_NR, p->mg - pn * EI_SG_NR);
            int two = p->k.fn2 != NULL && pn + 1 < pn1;
            int nr2 = two ? (int)EI_MIN((int64_t)EI_SG_NR, p->mg - (pn + 1) * EI_SG_NR) : 0;
            const float *bp = wph + (pn * kp + k0) * EI_SG_NR;
            ei_sg_ep ep = { k0 == 0 && a->bias ? a->bias + col : NULL, NULL, 0, 0.0f, 0.0f, k0 > 0, 0 };
            if (last && inline_clamp) {
                ep.clamp = 1;
                ep.lo = a->act == EI_U_RELU ? 0.0f : a->p0;
                ep.hi = a->act == EI_U_RELU ? INFINITY : a->p1;
            }
            for (int64_t i = 0, t = 0; i < np; i += mr, t++) {
                int m_rows = (int)EI_MIN((int64_t)mr, np - i);
                float *cp = yrow + i * ldc + col;
                if (two) p->k.fn2(m_rows, kcn, asrc[t], alda[t], bp, kp * EI_SG_NR, cp, ldc, nr2, &ep);
                else p->k.fn(m_rows, kcn, asrc[t], alda[t], bp, cp, ldc, nr, &ep);
            }
            pn += two;
        }
    }
    if (a->act != 0 && !inline_clamp)
        for (int64_t i = 0; i < np; i++) {
            float *row = yrow + i * ldc + c0;
            ei_unary_f32_range(a->act, row, row, c1 - c0, a->p0, a->p1);
        }
}

/* fold: rows r0 .. of one row block (input pixels), panels pn0 .. pn1 */
static void ct_item_fold(const ct_plan *p, int64_t item) {
    const ei_convt_f32_args *a = p->a;
    const int64_t cb = item % p->ncb, rb = item / p->ncb, c = a->c, m = a->m, run = (int64_t)a->kw * m;
    const int64_t r0 = rb * p->mc, r1 = EI_MIN(p->rows, r0 + p->mc);
    const int64_t pn0 = cb * p->ncp, pn1 = EI_MIN(p->panels, pn0 + p->ncp);
    const float *bias = a->bias ? a->wpack + p->panels * c * EI_SG_NR : NULL;
    const int mr = p->k.mr, inline_clamp = a->act == EI_U_RELU || a->act == EI_U_CLIP;
    float stage[EI_SG_MR_MAX * 2 * EI_SG_NR];
    for (int64_t r = r0; r < r1; r += mr) {
        int m_rows = (int)EI_MIN((int64_t)mr, r1 - r);
        const float *ar = a->x + r * c;
        for (int64_t pn = pn0; pn < pn1; pn++) {
            int two = p->k.fn2 != NULL && pn + 1 < pn1;
            int64_t j0 = pn * EI_SG_NR, j1 = EI_MIN(p->J, j0 + (two ? 2 : 1) * EI_SG_NR);
            int nr = (int)EI_MIN((int64_t)EI_SG_NR, p->J - j0);
            int nr2 = two ? (int)EI_MIN((int64_t)EI_SG_NR, p->J - j0 - EI_SG_NR) : 0;
            for (int64_t k0 = 0, k1; k0 < c; k0 = k1) {
                k1 = EI_MIN(c, k0 + p->kc);
                ei_sg_ep ep = { k0 == 0 && bias ? bias + j0 : NULL, NULL, 0, 0.0f, 0.0f, k0 > 0, 0 };
                if (k1 == c && inline_clamp) {
                    ep.clamp = 1;
                    ep.lo = a->act == EI_U_RELU ? 0.0f : a->p0;
                    ep.hi = a->act == EI_U_RELU ? INFINITY : a->p1;
                }
                const float *bp = a->wpack + (pn * c + k0) * EI_SG_NR;
                if (two) p->k.fn2(m_rows, k1 - k0, ar + k0, c, bp, c * EI_SG_NR, stage, 2 * EI_SG_NR, nr2, &ep);
                else p->k.fn(m_rows, k1 - k0, ar + k0, c, bp, stage, 2 * EI_SG_NR, nr, &ep);
            }
            /* the tile's columns to their output pixels: runs of (kx, m) per kernel row ky (the
             * same for every row of the tile: found once); the pixel position found once per
             * tile, then stepped */
            int64_t rky[2 * EI_SG_NR], rj[2 * EI_SG_NR], rlen[2 * EI_SG_NR];
            int nruns = 0;
            for (int64_t j = j0; j < j1; nruns++) {
                int64_t ky = j / run, e = EI_MIN(j1, (ky + 1) * run);
                rky[nruns] = ky; rj[nruns] = j; rlen[nruns] = e - j;
                j = e;
            }
            int64_t ix = r % a->w, iy = (r / a->w) % a->h, b = r / ((int64_t)a->w * a->h);
            for (int rr = 0; rr < m_rows; rr++) {
                float *srow = stage + rr * 2 * EI_SG_NR;
                if (a->act != 0 && !inline_clamp) ei_unary_f32_range(a->act, srow, srow, j1 - j0, a->p0, a->p1);
                if (rr > 0 && ++ix == a->w) {
                    ix = 0;
                    if (++iy == a->h) { iy = 0; b++; }
                }
                float *base = a->y + ((b * a->oh + iy * a->sh) * a->ow + ix * a->sw) * m;
                for (int q = 0; q < nruns; q++)
                    ei_copy_floats(base + rky[q] * (a->ow * m - run) + rj[q], srow + (rj[q] - j0), rlen[q]);
            }
            pn += two;
        }
    }
}

typedef struct { ct_plan p; int gathers; } ct_ctx;

static void ct_range(void *vctx, int64_t i0, int64_t i1) {
    const ct_ctx *c = (const ct_ctx *)vctx;
    float *tile = c->gathers ? c->p.a->scratch + (int64_t)ei_pool_slot() * CT_TILE : NULL;
    for (int64_t i = i0; i < i1; i++) {
        if (c->p.fold) ct_item_fold(&c->p, i);
        else ct_item(&c->p, i, tile);
    }
}

static void convt_with(const ei_convt_f32_args *a, ei_sg_kernel k) {
    ct_ctx c;
    ct_make_plan(a, k, &c.p);
    c.gathers = ct_gathers(&c.p);
    if (c.p.items <= 0 || a->m <= 0) return;
    /* an item below ~2^18 multiply-adds is not worth a thread hand-off */
    int64_t macs = (int64_t)a->n * a->h * a->w * a->c * c.p.mg * a->kh * a->kw, t = a->threads < 1 ? 1 : a->threads;
    if (macs < ((int64_t)1 << 18)) t = 1;
    ei_parallel_for(c.p.items, 1, ct_range, &c, (int)t);
}

EI_API void ei_convt_f32(const ei_convt_f32_args *a) {
    EI_CHECK(a->n >= 0 && a->c >= 1 && a->h >= 1 && a->w >= 1 && a->m >= 1 && a->oh >= 0 && a->ow >= 0);
    EI_CHECK(a->kh >= 1 && a->kw >= 1 && a->sh >= 1 && a->sw >= 1 && a->dh >= 1 && a->dw >= 1);
    EI_CHECK(a->group >= 1 && a->c % a->group == 0 && a->m % a->group == 0);
    EI_CHECK(a->x != NULL && a->y != NULL && a->wpack != NULL);
    convt_with(a, ei_sg_pick());
}

/* ---- self-test: the dispatched micro-kernel and the scalar one against a direct
 * double-precision ConvTranspose, on seeded shapes (strides 1-3, kernels 1-4 below, at and above
 * the stride, dilations, pads, output padding, groups, narrow and wide channels, every inline
 * and post-pass activation) ---- */

EI_API int ei_selftest_convt_f32(void) {
    int fails = 0;
    st_state = 4242;
    static const int acts[] = { 0, EI_U_RELU, EI_U_CLIP, EI_U_HSWISH, EI_U_SIGMOID, EI_U_LEAKY };
    for (int trial = 0; trial < 80; trial++) {
        ei_convt_f32_args a;
        memset(&a, 0, sizeof a);
        a.group = trial % 6 == 5 ? 2 : 1;
        a.n = st_int(1, 2);
        a.c = a.group * (trial % 3 == 0 ? st_int(1, 7) : st_int(16, 40));
        a.m = a.group * st_int(1, 35);
        a.h = st_int(1, 7); a.w = st_int(1, 13);
        a.kh = st_int(1, 4); a.kw = st_int(1, 4);
        a.sh = st_int(1, 3); a.sw = st_int(1, 3);
        a.dh = trial % 4 == 3 ? 2 : 1; a.dw = trial % 5 == 4 ? 2 : 1;
        int pb = st_int(0, 2), pr = st_int(0, 2);
        a.pt = st_int(0, 2); a.pl = st_int(0, 2);
        if (trial % 5 == 0) {                   /* kernel = stride, no pads: the fold form */
            a.group = 1; a.c = st_int(1, 40); a.m = trial % 10 == 0 ? 1 : st_int(1, 40);
            a.kh = a.sh; a.kw = a.sw; a.dh = a.dw = 1; a.pt = a.pl = pb = pr = 0;
            a.n = 1 + trial % 2; a.w = st_int(1, 30);
        }
        int oph = trial % 7 == 6 ? EI_MIN(a.sh - 1, 1) : 0, opw = trial % 7 == 6 ? EI_MIN(a.sw - 1, 1) : 0;
        a.oh = a.sh * (a.h - 1) + oph + (a.kh - 1) * a.dh + 1 - a.pt - pb;
        a.ow = a.sw * (a.w - 1) + opw + (a.kw - 1) * a.dw + 1 - a.pl - pr;
        if (a.oh <= 0 || a.ow <= 0) continue;
        a.act = acts[trial % 6];
        a.p0 = a.act == EI_U_CLIP ? -0.3f : a.act == EI_U_HSWISH ? 1.0f / 6 : a.act == EI_U_LEAKY ? 0.1f : 0.0f;
        a.p1 = a.act == EI_U_CLIP ? 0.4f : a.act == EI_U_HSWISH ? 0.5f : 0.0f;
        a.threads = 1 + trial % 3;
        int cg = a.c / a.group, mg = a.m / a.group, kk = a.kh * a.kw;
        int64_t nx = (int64_t)a.n * a.h * a.w * a.c, ny = (int64_t)a.n * a.oh * a.ow * a.m, nw = (int64_t)a.c * mg * kk;
        float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw), *bias = malloc(sizeof(float) * a.m);
        float *y0 = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny);
        float *pk = malloc(sizeof(float) * (size_t)ei_convt_f32_pack_size(&a));
        float *scr = malloc((size_t)ei_convt_f32_scratch(&a) + 64);
        for (int64_t i = 0; i < nx; i++) x[i] = st_unif();
        for (int64_t i = 0; i < nw; i++) w[i] = st_unif();
        for (int i = 0; i < a.m; i++) bias[i] = st_unif();
        a.bias = trial % 3 ? bias : NULL;
        ei_convt_f32_pack(&a, w, pk);
        a.x = x; a.wpack = pk; a.scratch = scr;
        a.y = y0;
        convt_with(&a, ei_sg_scalar());
        a.y = y1;
        convt_with(&a, ei_sg_pick());
        for (int64_t q = 0; q < ny && fails < 1000; q++) {
            int64_t j = q % a.m, pix = q / a.m, b = pix / (a.oh * a.ow), oy = pix / a.ow % a.oh, ox = pix % a.ow;
            int64_t g = j / mg, jm = j % mg;
            double s = a.bias ? bias[j] : 0.0, mag = fabs(s);
            for (int ky = 0; ky < a.kh; ky++)
                for (int kx = 0; kx < a.kw; kx++) {
                    int64_t ny_ = oy + a.pt - (int64_t)ky * a.dh, nx_ = ox + a.pl - (int64_t)kx * a.dw;
                    if (ny_ % a.sh || nx_ % a.sw) continue;
                    int64_t iy = ny_ / a.sh, ix = nx_ / a.sw;
                    if (iy < 0 || iy >= a.h || ix < 0 || ix >= a.w) continue;
                    for (int ci = 0; ci < cg; ci++) {
                        double t = (double)x[((b * a.h + iy) * a.w + ix) * a.c + g * cg + ci] *
                                   w[(((int64_t)g * cg + ci) * mg + jm) * kk + ky * a.kw + kx];
                        s += t;
                        mag += fabs(t);
                    }
                }
            float ref = (float)s;
            ei_unary_f32_range(a.act, &ref, &ref, 1, a.p0, a.p1);
            double tol = 1e-5 * (mag + 1.0);
            if (fabs(y0[q] - ref) > tol || fabs(y1[q] - ref) > tol) fails++;
        }
        free(x); free(w); free(bias); free(y0); free(y1); free(pk); free(scr);
    }
    return fails;
}
