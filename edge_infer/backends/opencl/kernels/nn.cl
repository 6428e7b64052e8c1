/* Softmax, LRN and the separable Resize filter stage. */

/* one work item per row: rows = outer * inner, the axis has L values at stride inner */
__kernel void softmax_f32(__global const float* x, int xo, __global float* y, int yo,
                          int L, int inner, int rows, int log_softmax) {
    int r = get_global_id(0);
    if (r >= rows) return;
    int base = (r / inner) * L * inner + r % inner;
    float m = -INFINITY;
    for (int k = 0; k < L; k++) m = fmax(m, x[xo + base + k * inner]);
    float s = 0.0f;
    for (int k = 0; k < L; k++) {
        float e = exp(x[xo + base + k * inner] - m);
        s += e;
        if (!log_softmax) y[yo + base + k * inner] = e;
    }
    if (log_softmax) {
        float ls = log(s);
        for (int k = 0; k < L; k++) y[yo + base + k * inner] = (x[xo + base + k * inner] - m) - ls;
    } else {
        for (int k = 0; k < L; k++) y[yo + base + k * inner] = y[yo + base + k * inner] / s;
    }
}

/* y = x * (bias + alpha / size * sum of x^2 over channels [c - before, c + size - 1 - before]) ^ -beta;
 * channel c = (i / inner) % C, neighbours at stride inner */
__kernel void lrn_f32(__global const float* x, int xo, __global float* y, int yo, int n,
                      int C, int inner, int size, int before, float k, float bias, float beta) {
    int i = get_global_id(0);
    if (i >= n) return;
    int c = (i / inner) % C;
    float s = 0.0f;
    for (int j = 0; j < size; j++) {
        int cc = c - before + j;
        if (cc < 0 || cc >= C) continue;
        float v = x[xo + i + (cc - c) * inner];
        s += v * v;
    }
    y[yo + i] = x[xo + i] * pow(s * k + bias, -beta);
}

/* one separable Resize stage along an axis: dst[o_outer, o, inner] =
 * sum_t w[o, t] * src[o_outer, idx[o, t], inner]; outside (mask[o] != 0) -> extrap */
__kernel void resize_axis_f32(__global const float* src, int so, __global float* dst, int dof, int n,
                              __global const int* idx, __global const float* w, __global const char* mask,
                              int T, int in_len, int out_len, int inner, float extrap) {
    int i = get_global_id(0);
    if (i >= n) return;
    int in_i = i % inner, r = i / inner, o = r % out_len, outer = r / out_len;
    if (mask[o]) { dst[dof + i] = extrap; return; }
    int sb = so + outer * in_len * inner + in_i;
    float acc = w[o * T] * src[sb + idx[o * T] * inner];
    for (int t = 1; t < T; t++) acc += w[o * T + t] * src[sb + idx[o * T + t] * inner];
    dst[dof + i] = acc;
}

/* Reduce over one contiguous block of axes: x viewed as (outer, L, inner), one work item per
 * (outer, inner). op: 0 sum, 1 mean, 2 max, 3 min. */
__kernel void reduce_f32(__global const float* x, int xo, __global float* y, int yo,
                         int L, int inner, int total, int op) {
    int i = get_global_id(0);
    if (i >= total) return;
    int base = xo + (i / inner) * L * inner + i % inner;
    float acc = op == 2 ? -INFINITY : (op == 3 ? INFINITY : 0.0f);
    for (int k = 0; k < L; k++) {
        float v = x[base + k * inner];
        acc = op == 2 ? fmax(acc, v) : (op == 3 ? fmin(acc, v) : acc + v);
    }
    y[yo + i] = op == 1 ? acc / (float)L : acc;
}
