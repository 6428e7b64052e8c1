/* Shared by every edge_infer OpenCL program (prepended to each .cl file at build).
 * Tensors live in one arena buffer (or a constant's own buffer) and are passed as
 * (pointer, element offset): no sub-buffers, so no device base-address alignment rule. */
#pragma OPENCL FP_CONTRACT OFF

/* activation codes: activations.cl (generated from edge_infer/ops/activations.py), prepended at build */

inline float act_apply(float v, int act, float p0, float p1) {
    switch (act) {
    case ACT_NONE: return v;
    case ACT_RELU: return v < 0.0f ? 0.0f : v;           /* NaN stays NaN, as np.clip */
    case ACT_CLIP: return fmin(fmax(v, p0), p1);
    case ACT_SIGMOID: return 1.0f / (1.0f + exp(-v));
    case ACT_TANH: return tanh(v);
    case ACT_HARDSIGMOID: return fmin(fmax(v * p0 + p1, 0.0f), 1.0f);
    case ACT_LEAKYRELU: return v >= 0.0f ? v : v * p0;
    case ACT_HARDSWISH: return v * fmin(fmax(v * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f);
    case ACT_SILU: return v / (1.0f + exp(-v));
    case ACT_GELU: return 0.5f * v * (1.0f + erf(v * 0.70710678118654752f));
    case ACT_GELUTANH: return 0.5f * v * (1.0f + tanh(0.7978845608028654f * v * (1.0f + 0.044715f * v * v)));
    case ACT_ABS: return fabs(v);
    case ACT_NEG: return -v;
    case ACT_SQRT: return sqrt(v);
    case ACT_EXP: return exp(v);
    case ACT_LOG: return log(v);
    case ACT_RECIPROCAL: return 1.0f / v;
    case ACT_FLOOR: return floor(v);
    case ACT_CEIL: return ceil(v);
    case ACT_ELU: return v > 0.0f ? v : p0 * expm1(v);
    case ACT_SELU: return v > 0.0f ? p1 * v : p1 * p0 * expm1(v);
    case ACT_SOFTPLUS: return fmax(v, 0.0f) + log1p(exp(-fabs(v)));
    case ACT_SOFTSIGN: return v / (1.0f + fabs(v));
    case ACT_ERF: return erf(v);
    }
    return v;
}

/* floor(v / 2^s) for any sign (no reliance on >> of negative values) */
inline long floor_shift(long v, int s) {
    return v >= 0 ? (v >> s) : -(((-v) + ((1L << s) - 1)) >> s);
}

/* TFLite MultiplyByQuantizedMultiplier(x, q, shift), x in the int32 range, q in
 * (INT32_MIN, INT32_MAX]: the merged single-division form of int8_common.Requantizer
 * (left shift wrapped to int32 as C does; then floor((xq + c + [xq < 0](2^S - 2c)) / 2^S)). */
inline long mbqm(long x, long q, int shift) {
    /* a float32 multiplier (ops/qmath.py FP32_SHIFT; q: its bits): rint(float(x) * s), half to even */
    if (shift == 64) return (long)rint((float)x * as_float((int)q));
    int left = shift > 0 ? shift : 0;
    int right = shift > 0 ? 0 : -shift;
    if (left) {
        long t = (x * (1L << left)) & 0xFFFFFFFFL;
        x = t >= 0x80000000L ? t - 0x100000000L : t;
    }
    long xq = x * q;
    int s = 31 + right;
    long c = (1L << 30) + (right > 0 ? (1L << (30 + right)) : 0L);
    long d = (1L << s) - 2 * c;
    return floor_shift(xq + c + (xq < 0 ? d : 0L), s);
}

inline int clamp_i(long v, int lo, int hi) { return (int)(v < lo ? lo : (v > hi ? hi : v)); }

/* up to 6-D index decomposition: meta = [ndim, dims..., strides(a)..., strides(b)...] */
#define MAXD 6
