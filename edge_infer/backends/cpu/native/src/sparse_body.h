/* The sparse product of sparse.c, compiled once per ISA: sparse.c includes this file with
 * SP_NAME(f) (function-name suffix) and SP_ATTR (target attribute) defined. Plain C over
 * fixed-width pixel tiles (SP_T); the per-ISA target attribute lets the compiler vectorize
 * the pixel loops (AVX2: 4 x 8 lanes, NEON: 8 x 4 lanes), the accumulators staying in
 * registers. The entry iteration reads the encodings directly (see sparse.c). */

/* acc[0..T) += v * x[0..T) */
SP_ATTR static inline void SP_NAME(axpy_f)(float *restrict acc, float v, const float *restrict x) {
    for (int j = 0; j < SP_T; j++) acc[j] += v * x[j];
}
SP_ATTR static inline void SP_NAME(axpy_i)(int32_t *restrict acc, int32_t v, const int32_t *restrict x) {
    for (int j = 0; j < SP_T; j++) acc[j] += v * x[j];
}

/* one tile of SP_T pixels: xt is the input tile (K rows of stride SP_T), yt the output tile
 * (R rows of stride SP_T); float or int32 by a->int8. Output tile starts at zero. */
SP_ATTR static void SP_NAME(tile)(const ei_sparse_mm_args *a, const void *xt, void *yt) {
    const int br = a->br, bc = a->bc, int8 = a->int8, tr = a->transposed;
    const int R = tr ? a->cols : a->rows;
    if (int8) memset(yt, 0, (size_t)R * SP_T * sizeof(int32_t));
    else memset(yt, 0, (size_t)R * SP_T * sizeof(float));
    float *yf = (float *)yt; int32_t *yi = (int32_t *)yt;
    const float *xf = (const float *)xt; const int32_t *xi = (const int32_t *)xt;
    const float *vf = (const float *)a->values; const int8_t *vi = (const int8_t *)a->values;
    if (a->encoding == EI_SP_BITMASK) {
        const int64_t cols = a->cols, nbits = (int64_t)a->rows * a->cols;
        for (int64_t r = 0; r < a->rows; r++) {
            int64_t e = a->row_offsets[r];
            for (int64_t c0 = 0; c0 < cols; c0 += 56) {
                uint64_t bits = sp_bits56(a->mask, nbits, r * cols + c0);
                int64_t left = cols - c0;
                if (left < 56) bits &= (((uint64_t)1) << left) - 1;
                while (bits) {
                    int64_t c = c0 + __builtin_ctzll(bits);
                    bits &= bits - 1;
                    int64_t out = tr ? c : r, in = tr ? r : c;
                    if (int8) SP_NAME(axpy_i)(yi + out * SP_T, vi[e], xi + in * SP_T);
                    else SP_NAME(axpy_f)(yf + out * SP_T, vf[e], xf + in * SP_T);
                    e++;
                }
            }
        }
        return;
    }
    const int32_t *ip = a->indptr;
    const uint8_t *i8 = (const uint8_t *)a->indices; const uint16_t *i16 = (const uint16_t *)a->indices;
    const int rb_count = a->rows / br, bs = br * bc;
    for (int rb = 0; rb < rb_count; rb++) {
        int64_t c = 0;
        for (int64_t e = ip[rb]; e < ip[rb + 1]; e++) {
            c += a->index_bytes == 1 ? i8[e] : i16[e];
            for (int i = 0; i < br; i++) {
                for (int t = 0; t < bc; t++) {
                    int64_t r = (int64_t)rb * br + i, col = c * bc + t;
                    int64_t out = tr ? col : r, in = tr ? r : col;
                    if (int8) {
                        int32_t v = vi[e * bs + i * bc + t];
                        if (v) SP_NAME(axpy_i)(yi + out * SP_T, v, xi + in * SP_T);
                    } else {
                        float v = vf[e * bs + i * bc + t];
                        if (v != 0.0f) SP_NAME(axpy_f)(yf + out * SP_T, v, xf + in * SP_T);
                    }
                }
            }
        }
    }
}
