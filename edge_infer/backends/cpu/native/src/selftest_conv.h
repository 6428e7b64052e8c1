/* The fp32 conv self-tests' reference (conv_f32.c, winograd_f32.c, conv_stem_f32.c): output
 * element q of the NHWC conv that a describes (a->x, a->bias, a->z; ONNX weights w of shape
 * (m, c / group, kh, kw)), summed in double precision, then its activation. *mag gets the sum
 * of the terms' magnitudes, which each kernel's rounding bound scales with. */
#ifndef EI_SELFTEST_CONV_H
#define EI_SELFTEST_CONV_H

#include "sgemm.h"
#include "elementwise.h"

#include <math.h>

static float st_conv_ref(const ei_conv_f32_args *a, const float *w, int64_t q, double *mag) {
    int64_t cg = a->c / a->group, mg = a->m / a->group;
    int64_t j = q % a->m, pix = q / a->m, b = pix / ((int64_t)a->oh * a->ow);
    int64_t oy = pix / a->ow % a->oh, ox = pix % a->ow, g = j / mg;
    double s = a->bias ? a->bias[j] : 0.0, m = fabs(s);
    for (int64_t ci = 0; ci < cg; ci++)
        for (int ky = 0; ky < a->kh; ky++)
            for (int kx = 0; kx < a->kw; kx++) {
                int64_t iy = oy * a->sh - a->pt + (int64_t)ky * a->dh, ix = ox * a->sw - a->pl + (int64_t)kx * a->dw;
                if (iy < 0 || iy >= a->h || ix < 0 || ix >= a->w) continue;
                double t = (double)a->x[((b * a->h + iy) * a->w + ix) * a->c + g * cg + ci] *
                           w[((j * cg + ci) * a->kh + ky) * a->kw + kx];
                s += t;
                m += fabs(t);
            }
    if (a->z) { s += a->z[q]; m += fabs(a->z[q]); }
    float ref = (float)s;
    ei_unary_f32_range(a->act, &ref, &ref, 1, a->p0, a->p1);
    *mag = m;
    return ref;
}

#endif
