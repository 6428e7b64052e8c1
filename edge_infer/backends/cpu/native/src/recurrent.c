/* fp32 recurrence of the LSTM, GRU and RNN kernels (kernels/recurrent.py): one direction,
 * every time step, in one call.
 *
 * Python does what BLAS does best before the call (the input projection of all steps with
 * the summed biases, one GEMM) and packs the weights once; this loop then runs the part
 * numpy pays per step in call overhead: per batch row (rows are independent across the whole
 * sequence), g = xp[t, b] + h_b @ RT, the gate arithmetic of kernels/recurrent.py in the same
 * order, the state update in place and the Y row. A row past its sequence_lens keeps its state
 * and writes zeros, as the numpy kernel does. Activations: every ONNX recurrent activation but
 * Softplus (the numpy kernel serves models with it); exp is ei_expf (about 1 ulp), so results
 * agree with numpy to float rounding, not bit for bit.
 */
#include "edge_native.h"
#include "elementwise.h"

#include <string.h>

enum { RNN_OP = 0, GRU_OP = 1, LSTM_OP = 2 };
enum { A_RELU = 0, A_TANH, A_SIGMOID, A_AFFINE, A_LEAKY, A_THRESH, A_SCALED_TANH, A_HARD_SIGMOID,
       A_ELU, A_SOFTSIGN };

typedef struct {
    const float *xp, *rt, *rt_h, *rb_h, *peep;
    const int32_t *lens;
    float *h, *c, *y, *scratch;
    int64_t seq, batch, hidden, xp_t, xp_b, y_t, y_b;
    int32_t op, reverse, input_forget, linear_before_reset, has_clip;
    int32_t act[3];
    float alpha[3], beta[3];
    float clip;
} ei_recurrent_f32_args;

EI_API void ei_recurrent_f32(const ei_recurrent_f32_args *a);

static inline float r_tanh(float x) {
    float ax = x < 0 ? -x : x;
    float t = 1.0f - 2.0f / (ei_expf(ax + ax) + 1.0f);
    return x < 0 ? -t : t;
}

static inline float r_act(int code, float x, float alpha, float beta) {
    switch (code) {
    case A_RELU: return x > 0 ? x : 0.0f;
    case A_TANH: return r_tanh(x);
    case A_SIGMOID: return 1.0f / (1.0f + ei_expf(-x));
    case A_AFFINE: return x * alpha + beta;
    case A_LEAKY: return x >= 0 ? x : x * alpha;
    case A_THRESH: return x > alpha ? x : 0.0f;
    case A_SCALED_TANH: return alpha * r_tanh(beta * x);
    case A_HARD_SIGMOID: { float v = x * alpha + beta; return v < 0 ? 0.0f : (v > 1 ? 1.0f : v); }
    case A_ELU: return x >= 0 ? x : alpha * (ei_expf(x) - 1.0f);
    case A_SOFTSIGN: return x / (1.0f + (x < 0 ? -x : x));
    default: return x;
    }
}

static void act_n(const ei_recurrent_f32_args *a, int slot, float *v, int64_t n) {
    int code = a->act[slot];
    float al = a->alpha[slot], be = a->beta[slot];
    for (int64_t j = 0; j < n; j++) v[j] = r_act(code, v[j], al, be);
}

static void clip_n(const ei_recurrent_f32_args *a, float *v, int64_t n) {
    if (!a->has_clip) return;
    float lo = -a->clip, hi = a->clip;
    for (int64_t j = 0; j < n; j++) v[j] = v[j] < lo ? lo : (v[j] > hi ? hi : v[j]);
}

/* g[0:cols] += h[0:k] @ w (k x cols, row-major) */
static void row_gemv(float *g, const float *h, const float *w, int64_t k, int64_t cols) {
    for (int64_t i = 0; i < k; i++) {
        float hv = h[i];
        const float *wr = w + i * cols;
        for (int64_t j = 0; j < cols; j++) g[j] += hv * wr[j];
    }
}

static void lstm_row(const ei_recurrent_f32_args *a, const float *xp, float *h, float *c, float *g) {
    int64_t H = a->hidden, gh = 4 * H;
    memcpy(g, xp, (size_t)gh * sizeof(float));
    row_gemv(g, h, a->rt, H, gh);
    float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
    if (a->peep) {
        for (int64_t j = 0; j < H; j++) { gi[j] += a->peep[j] * c[j]; gf[j] += a->peep[2 * H + j] * c[j]; }
    }
    clip_n(a, gi, H); clip_n(a, gf, H); clip_n(a, gc, H);
    act_n(a, 0, gi, H);
    if (a->input_forget) for (int64_t j = 0; j < H; j++) gf[j] = 1.0f - gi[j];
    else act_n(a, 0, gf, H);
    act_n(a, 1, gc, H);
    for (int64_t j = 0; j < H; j++) c[j] = gf[j] * c[j] + gi[j] * gc[j];
    if (a->peep) for (int64_t j = 0; j < H; j++) go[j] += a->peep[H + j] * c[j];
    clip_n(a, go, H);
    act_n(a, 0, go, H);
    for (int64_t j = 0; j < H; j++) h[j] = go[j] * r_act(a->act[2], c[j], a->alpha[2], a->beta[2]);
}

static void gru_row(const ei_recurrent_f32_args *a, const float *xp, float *h, float *g) {
    int64_t H = a->hidden;
    float *zr = g, *hh = g + 2 * H, *tmp = g + 3 * H;
    memcpy(zr, xp, (size_t)(2 * H) * sizeof(float));
    row_gemv(zr, h, a->rt, H, 2 * H);
    clip_n(a, zr, 2 * H);
    act_n(a, 0, zr, 2 * H);
    const float *z = zr, *r = zr + H;
    if (a->linear_before_reset) {
        for (int64_t j = 0; j < H; j++) hh[j] = a->rb_h ? a->rb_h[j] : 0.0f;
        row_gemv(hh, h, a->rt_h, H, H);
        for (int64_t j = 0; j < H; j++) hh[j] = hh[j] * r[j] + xp[2 * H + j];
    } else {
        for (int64_t j = 0; j < H; j++) { tmp[j] = r[j] * h[j]; hh[j] = 0.0f; }
        row_gemv(hh, tmp, a->rt_h, H, H);
        for (int64_t j = 0; j < H; j++) hh[j] += xp[2 * H + j];
    }
    clip_n(a, hh, H);
    act_n(a, 1, hh, H);
    for (int64_t j = 0; j < H; j++) h[j] = hh[j] + z[j] * (h[j] - hh[j]);
}

static void rnn_row(const ei_recurrent_f32_args *a, const float *xp, float *h, float *g) {
    int64_t H = a->hidden;
    memcpy(g, xp, (size_t)H * sizeof(float));
    row_gemv(g, h, a->rt, H, H);
    clip_n(a, g, H);
    act_n(a, 0, g, H);
    memcpy(h, g, (size_t)H * sizeof(float));
}

void ei_recurrent_f32(const ei_recurrent_f32_args *a) {
    int64_t H = a->hidden;
    for (int64_t b = 0; b < a->batch; b++) {
        float *h = a->h + b * H, *c = a->c ? a->c + b * H : NULL;
        int64_t len = a->lens ? a->lens[b] : a->seq;
        for (int64_t s = 0; s < a->seq; s++) {
            int64_t t = a->reverse ? a->seq - 1 - s : s;
            float *y = a->y ? a->y + t * a->y_t + b * a->y_b : NULL;
            if (t >= len) {                       /* past this row's end: state kept, Y zero */
                if (y) memset(y, 0, (size_t)H * sizeof(float));
                continue;
            }
            const float *xp = a->xp + t * a->xp_t + b * a->xp_b;
            if (a->op == LSTM_OP) lstm_row(a, xp, h, c, a->scratch);
            else if (a->op == GRU_OP) gru_row(a, xp, h, a->scratch);
            else rnn_row(a, xp, h, a->scratch);
            if (y) memcpy(y, h, (size_t)H * sizeof(float));
        }
    }
}
