/* The sparse product of sparse.c, compiled once per ISA: sparse.c includes this file with
 * SP_NAME(f) (function-name suffix) and SP_ATTR (target attribute) defined.
 *
 * A tile is SP_T = 32 pixels, held as four 8-lane vectors (GCC/clang vector extensions:
 * ymm registers under AVX2, pairs of q registers under NEON, plain lanes elsewhere). Normal
 * mode keeps one output row's accumulators in registers while it walks the row's entries
 * (XNNPACK's sparse scheme); transposed mode scatters into the output tile in memory. */

typedef float sp_v8f __attribute__((vector_size(32)));
typedef float sp_v8fu __attribute__((vector_size(32), aligned(4)));
typedef int32_t sp_v8i __attribute__((vector_size(32)));
typedef int32_t sp_v8iu __attribute__((vector_size(32), aligned(4)));

/* a full fp32 tile row straight into pixel-contiguous Y (NCHW), with the bias */
SP_ATTR static inline void SP_NAME(put)(const ei_sparse_mm_args *a, float *y, int64_t r, const sp_v8f *acc) {
    sp_v8fu *dst = (sp_v8fu *)(y + r * a->y_sr);
    float b = a->bias ? ((const float *)a->bias)[r] : 0.0f;
    dst[0] = acc[0] + b; dst[1] = acc[1] + b; dst[2] = acc[2] + b; dst[3] = acc[3] + b;
}

/* xt: the input tile, row `in` at xt + in * xs (xs elements); yt: the output tile, R rows of
 * SP_T; float or int32 by a->int8. */
SP_ATTR static void SP_NAME(tile)(const ei_sparse_mm_args *a, const void *xt, int64_t xs, void *yt,
                                  float *ydirect) {
    const int br = a->br, bc = a->bc, int8 = a->int8, tr = a->transposed;
    const int R = tr ? a->cols : a->rows;
    const float *xf = (const float *)xt; const int32_t *xi = (const int32_t *)xt;
    const float *vf = (const float *)a->values; const int8_t *vi = (const int8_t *)a->values;
    float *yf = (float *)yt; int32_t *yi = (int32_t *)yt;
    if (tr) memset(yt, 0, (size_t)R * SP_T * 4);
#define SP_ACC_F(dst, v, in) do { const sp_v8fu *xp_ = (const sp_v8fu *)(xf + (in) * xs); float v_ = (v); \
        dst[0] += v_ * xp_[0]; dst[1] += v_ * xp_[1]; dst[2] += v_ * xp_[2]; dst[3] += v_ * xp_[3]; } while (0)
#define SP_ACC_I(dst, v, in) do { const sp_v8iu *xp_ = (const sp_v8iu *)(xi + (in) * xs); int32_t v_ = (v); \
        dst[0] += v_ * xp_[0]; dst[1] += v_ * xp_[1]; dst[2] += v_ * xp_[2]; dst[3] += v_ * xp_[3]; } while (0)
    if (int8 && a->f32_exact && !tr) {
        /* int8 in float lanes: products (<= 2^14) and sums of <= 1024 of them (<= 2^24) are
         * exact in float32 (Python sets f32_exact only then), and FMAs are the fastest lanes */
        if (a->encoding == EI_SP_BITMASK) {
            const int64_t cols = a->cols, nbits = (int64_t)a->rows * a->cols;
            for (int64_t r = 0; r < a->rows; r++) {
                int64_t e = a->row_offsets[r];
                sp_v8f acc[4] = {{0}};
                for (int64_t c0 = 0; c0 < cols; c0 += 56) {
                    uint64_t bits = sp_bits56(a->mask, nbits, r * cols + c0);
                    if (cols - c0 < 56) bits &= (((uint64_t)1) << (cols - c0)) - 1;
                    for (; bits; bits &= bits - 1) { SP_ACC_F(acc, (float)vi[e], c0 + __builtin_ctzll(bits)); e++; }
                }
                for (int k = 0; k < 4; k++) ((sp_v8iu *)(yi + r * SP_T))[k] = __builtin_convertvector(acc[k], sp_v8i);
            }
            return;
        }
        const int32_t *ip = a->indptr;
        const uint8_t *j8 = (const uint8_t *)a->indices; const uint16_t *j16 = (const uint16_t *)a->indices;
        for (int rb = 0; rb < a->rows / br; rb++) {
            int64_t c = 0, e0 = ip[rb], e1 = ip[rb + 1];
            if (br == 1) {
                sp_v8f acc[4] = {{0}};
                for (int64_t e = e0; e < e1; e++) {
                    c += a->index_bytes == 1 ? j8[e] : j16[e];
                    const int8_t *v = vi + e * bc;
                    for (int t = 0; t < bc; t++) SP_ACC_F(acc, (float)v[t], c * bc + t);
                }
                for (int k = 0; k < 4; k++) ((sp_v8iu *)(yi + (int64_t)rb * SP_T))[k] = __builtin_convertvector(acc[k], sp_v8i);
            } else {
                sp_v8f acc[4][4] = {{{0}}};
                for (int64_t e = e0; e < e1; e++) {
                    c += a->index_bytes == 1 ? j8[e] : j16[e];
                    const int8_t *v = vi + e * 4;
                    SP_ACC_F(acc[0], (float)v[0], c); SP_ACC_F(acc[1], (float)v[1], c);
                    SP_ACC_F(acc[2], (float)v[2], c); SP_ACC_F(acc[3], (float)v[3], c);
                }
                for (int i = 0; i < 4; i++)
                    for (int k = 0; k < 4; k++)
                        ((sp_v8iu *)(yi + ((int64_t)rb * 4 + i) * SP_T))[k] = __builtin_convertvector(acc[i][k], sp_v8i);
            }
        }
        return;
    }
    if (a->encoding == EI_SP_BITMASK && !tr) {   /* normal mode, one loop per dtype */
        const int64_t cols = a->cols, nbits = (int64_t)a->rows * a->cols;
        for (int64_t r = 0; r < a->rows; r++) {
            int64_t e = a->row_offsets[r];
            if (int8) {
                sp_v8i acc[4] = {{0}};
                for (int64_t c0 = 0; c0 < cols; c0 += 56) {
                    uint64_t bits = sp_bits56(a->mask, nbits, r * cols + c0);
                    if (cols - c0 < 56) bits &= (((uint64_t)1) << (cols - c0)) - 1;
                    for (; bits; bits &= bits - 1) { SP_ACC_I(acc, vi[e], c0 + __builtin_ctzll(bits)); e++; }
                }
                memcpy(yi + r * SP_T, acc, sizeof acc);
            } else {
                sp_v8f acc[4] = {{0}};
                for (int64_t c0 = 0; c0 < cols; c0 += 56) {
                    uint64_t bits = sp_bits56(a->mask, nbits, r * cols + c0);
                    if (cols - c0 < 56) bits &= (((uint64_t)1) << (cols - c0)) - 1;
                    for (; bits; bits &= bits - 1) { SP_ACC_F(acc, vf[e], c0 + __builtin_ctzll(bits)); e++; }
                }
                if (ydirect) SP_NAME(put)(a, ydirect, r, acc);
                else memcpy(yf + r * SP_T, acc, sizeof acc);
            }
        }
        return;
    }
    if (a->encoding == EI_SP_BITMASK) {
        const int64_t cols = a->cols, nbits = (int64_t)a->rows * a->cols;
        for (int64_t r = 0; r < a->rows; r++) {
            int64_t e = a->row_offsets[r];
            sp_v8f af[4] = {{0}}; sp_v8i ai[4] = {{0}};
            for (int64_t c0 = 0; c0 < cols; c0 += 56) {
                uint64_t bits = sp_bits56(a->mask, nbits, r * cols + c0);
                int64_t left = cols - c0;
                if (left < 56) bits &= (((uint64_t)1) << left) - 1;
                while (bits) {
                    int64_t c = c0 + __builtin_ctzll(bits);
                    bits &= bits - 1;
                    if (tr) {
                        if (int8) SP_ACC_I(((sp_v8iu *)(yi + c * SP_T)), vi[e], r);
                        else SP_ACC_F(((sp_v8fu *)(yf + c * SP_T)), vf[e], r);
                    } else if (int8) SP_ACC_I(ai, vi[e], c);
                    else SP_ACC_F(af, vf[e], c);
                    e++;
                }
            }
            if (!tr) {
                if (int8) memcpy(yi + r * SP_T, ai, sizeof ai);
                else if (ydirect) SP_NAME(put)(a, ydirect, r, af);
                else memcpy(yf + r * SP_T, af, sizeof af);
            }
        }
        return;
    }
    const int32_t *ip = a->indptr;
    const uint8_t *i8 = (const uint8_t *)a->indices; const uint16_t *i16 = (const uint16_t *)a->indices;
    const int rb_count = a->rows / br, bs = br * bc;
    if (!tr && int8 && br == 1) {   /* int8 normal mode, CSR / 1x4 blocks */
        for (int rb = 0; rb < rb_count; rb++) {
            int64_t c = 0;
            sp_v8i acc[4] = {{0}};
            for (int64_t e = ip[rb]; e < ip[rb + 1]; e++) {
                c += a->index_bytes == 1 ? i8[e] : i16[e];
                const int8_t *v = vi + e * bc;
                for (int t = 0; t < bc; t++) if (v[t]) SP_ACC_I(acc, v[t], c * bc + t);
            }
            memcpy(yi + (int64_t)rb * SP_T, acc, sizeof acc);
        }
        return;
    }
    if (!tr && !int8) {          /* fp32 normal mode, one loop per block shape: registers stay put */
        for (int rb = 0; rb < rb_count; rb++) {
            int64_t c = 0, e0 = ip[rb], e1 = ip[rb + 1];
            if (br == 1) {
                sp_v8f acc[4] = {{0}};
                for (int64_t e = e0; e < e1; e++) {
                    c += a->index_bytes == 1 ? i8[e] : i16[e];
                    const float *v = vf + e * bc;
                    for (int t = 0; t < bc; t++) SP_ACC_F(acc, v[t], c * bc + t);
                }
                if (ydirect) SP_NAME(put)(a, ydirect, rb, acc);
                else memcpy(yf + (int64_t)rb * SP_T, acc, sizeof acc);
            } else {                 /* 4x1 blocks: four output rows share each input row */
                sp_v8f acc[4][4] = {{{0}}};
                for (int64_t e = e0; e < e1; e++) {
                    c += a->index_bytes == 1 ? i8[e] : i16[e];
                    const float *v = vf + e * 4;
                    SP_ACC_F(acc[0], v[0], c); SP_ACC_F(acc[1], v[1], c);
                    SP_ACC_F(acc[2], v[2], c); SP_ACC_F(acc[3], v[3], c);
                }
                for (int i = 0; i < 4; i++) {
                    int64_t r = (int64_t)rb * 4 + i;
                    if (ydirect) SP_NAME(put)(a, ydirect, r, acc[i]);
                    else memcpy(yf + r * SP_T, acc[i], sizeof acc[i]);
                }
            }
        }
        return;
    }
    for (int rb = 0; rb < rb_count; rb++) {
        sp_v8f af[4][4] = {{{0}}}; sp_v8i ai[4][4] = {{{0}}};   /* [row in block][lane group] */
        int64_t c = 0;
        for (int64_t e = ip[rb]; e < ip[rb + 1]; e++) {
            c += a->index_bytes == 1 ? i8[e] : i16[e];
            for (int i = 0; i < br; i++) {
                int64_t r = (int64_t)rb * br + i;
                for (int t = 0; t < bc; t++) {
                    int64_t col = c * bc + t;
                    if (int8) {
                        int32_t v = vi[e * bs + i * bc + t];
                        if (!v) continue;
                        if (tr) SP_ACC_I(((sp_v8iu *)(yi + col * SP_T)), v, r);
                        else SP_ACC_I(ai[i], v, col);
                    } else {
                        float v = vf[e * bs + i * bc + t];
                        if (v == 0.0f) continue;
                        if (tr) SP_ACC_F(((sp_v8fu *)(yf + col * SP_T)), v, r);
                        else SP_ACC_F(af[i], v, col);
                    }
                }
            }
        }
        if (!tr) {
            for (int i = 0; i < br; i++) {
                int64_t r = (int64_t)rb * br + i;
                if (int8) memcpy(yi + r * SP_T, ai[i], sizeof ai[i]);
                else if (ydirect) SP_NAME(put)(a, ydirect, r, af[i]);
                else memcpy(yf + r * SP_T, af[i], sizeof af[i]);
            }
        }
    }
#undef SP_ACC_F
#undef SP_ACC_I
}
