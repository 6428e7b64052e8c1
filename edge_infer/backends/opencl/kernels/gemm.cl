/* Tiled GEMMs with local-memory tiles: C = epilogue(alpha * A @ B), every operand addressed
 * by (offset, row stride, column stride, two batch strides), so transposes, NHWC/NCHW
 * convolution operands and grouped convolutions need no copies.
 * Batch index b = get_global_id(2) splits into (b / nb2, b % nb2). */


/* float32: a work group computes a TM x TN block of C from TK-deep tiles of A and B staged
 * in local memory; each work item keeps RM x RN accumulators in registers, its rows and
 * columns interleaved by the group's 8 x 8 shape (neighbouring work items touch neighbouring
 * columns: coalesced on GPUs, vectorised across work items by PoCL). */
#define TM 32
#define TN 32
#define TK 16
#define RM 4
#define RN 4
#define WG 8

__kernel __attribute__((reqd_work_group_size(WG, WG, 1)))
void gemm_f32(__global const float* A, int a_off, int a_rs, int a_cs, int a_s1, int a_s2,
              __global const float* B, int b_off, int b_rs, int b_cs, int b_s1, int b_s2,
              __global float* C, int c_off, int c_rs, int c_cs, int c_s1, int c_s2,
              int M, int N, int K, int nb2, float alpha,
              __global const float* bias, int bias_off, int bias_rs, int bias_cs, int bias_s2, float beta,
              __global const float* Z, int z_off, int z_rs, int z_cs, int z_s1, int z_s2,
              int act, float p0, float p1, int flags) {
    __local float As[TK][TM + 1];
    __local float Bs[TK][TN + 1];
    int lc = get_local_id(0), lr = get_local_id(1);
    int lid = lr * WG + lc;
    int row0 = get_group_id(1) * TM, col0 = get_group_id(0) * TN;
    int bt = get_global_id(2), b1 = bt / nb2, b2 = bt % nb2;
    int ab = a_off + b1 * a_s1 + b2 * a_s2;
    int bb = b_off + b1 * b_s1 + b2 * b_s2;
    float acc[RM][RN];
    for (int r = 0; r < RM; r++)
        for (int c = 0; c < RN; c++) acc[r][c] = 0.0f;
    for (int t = 0; t < K; t += TK) {
        for (int e = lid; e < TM * TK; e += WG * WG) {      /* A tile: TM rows x TK */
            int r = e / TK, k = e % TK;
            int gr = row0 + r, gk = t + k;
            As[k][r] = (gr < M && gk < K) ? A[ab + gr * a_rs + gk * a_cs] : 0.0f;
        }
        for (int e = lid; e < TK * TN; e += WG * WG) {      /* B tile: TK x TN columns */
            int k = e / TN, c = e % TN;
            int gk = t + k, gc = col0 + c;
            Bs[k][c] = (gk < K && gc < N) ? B[bb + gk * b_rs + gc * b_cs] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TK; k++) {
            float a[RM], b[RN];
            for (int r = 0; r < RM; r++) a[r] = As[k][lr + r * WG];
            for (int c = 0; c < RN; c++) b[c] = Bs[k][lc + c * WG];
            for (int r = 0; r < RM; r++)
                for (int c = 0; c < RN; c++) acc[r][c] += a[r] * b[c];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < RM; r++) {
        int row = row0 + lr + r * WG;
        if (row >= M) continue;
        for (int c = 0; c < RN; c++) {
            int col = col0 + lc + c * WG;
            if (col >= N) continue;
            float v = alpha == 1.0f ? acc[r][c] : acc[r][c] * alpha;
            if (flags & 1) {
                float bv = bias[bias_off + b2 * bias_s2 + row * bias_rs + col * bias_cs];
                v += beta == 1.0f ? bv : bv * beta;
            }
            if (flags & 2) v += Z[z_off + b1 * z_s1 + b2 * z_s2 + row * z_rs + col * z_cs];
            C[c_off + b1 * c_s1 + b2 * c_s2 + row * c_rs + col * c_cs] = act_apply(v, act, p0, p1);
        }
    }
}

/* int8 GEMM (TFLite FULLY_CONNECTED / CONV_2D core): acc = sum (a - zp_a)(b - zp_b) in int32,
 * + bias (int64, folded at prepare), requantized per row or column (q, shift indexed by
 * row * q_rs + col * q_cs), + zp_y, + residual table[z] (int64, 256 entries), clamped. */
__kernel __attribute__((reqd_work_group_size(WG, WG, 1)))
void gemm_i8(__global const char* A, int a_off, int a_rs, int a_cs, int a_s1, int a_s2, int zp_a,
             __global const char* B, int b_off, int b_rs, int b_cs, int b_s1, int b_s2, int zp_b,
             __global char* C, int c_off, int c_rs, int c_cs, int c_s1, int c_s2,
             int M, int N, int K, int nb2,
             __global const long* bias, int bias_rs, int bias_cs, int bias_s2,
             __global const int* qm, __global const int* qs, int q_rs, int q_cs, int q_s2, int zp_y,
             __global const char* Z, int z_off, int z_rs, int z_cs, int z_s1, int z_s2,
             __global const long* ztab, int lo, int hi, int flags) {
    __local int As[TK][TM + 1];
    __local int Bs[TK][TN + 1];
    int lc = get_local_id(0), lr = get_local_id(1);
    int lid = lr * WG + lc;
    int row0 = get_group_id(1) * TM, col0 = get_group_id(0) * TN;
    int bt = get_global_id(2), b1 = bt / nb2, b2 = bt % nb2;
    int ab = a_off + b1 * a_s1 + b2 * a_s2;
    int bb = b_off + b1 * b_s1 + b2 * b_s2;
    int acc[RM][RN];
    for (int r = 0; r < RM; r++)
        for (int c = 0; c < RN; c++) acc[r][c] = 0;
    for (int t = 0; t < K; t += TK) {
        for (int e = lid; e < TM * TK; e += WG * WG) {
            int r = e / TK, k = e % TK;
            int gr = row0 + r, gk = t + k;
            As[k][r] = (gr < M && gk < K) ? (int)A[ab + gr * a_rs + gk * a_cs] - zp_a : 0;
        }
        for (int e = lid; e < TK * TN; e += WG * WG) {
            int k = e / TN, c = e % TN;
            int gk = t + k, gc = col0 + c;
            Bs[k][c] = (gk < K && gc < N) ? (int)B[bb + gk * b_rs + gc * b_cs] - zp_b : 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TK; k++) {
            int a[RM], b[RN];
            for (int r = 0; r < RM; r++) a[r] = As[k][lr + r * WG];
            for (int c = 0; c < RN; c++) b[c] = Bs[k][lc + c * WG];
            for (int r = 0; r < RM; r++)
                for (int c = 0; c < RN; c++) acc[r][c] += a[r] * b[c];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < RM; r++) {
        int row = row0 + lr + r * WG;
        if (row >= M) continue;
        for (int c = 0; c < RN; c++) {
            int col = col0 + lc + c * WG;
            if (col >= N) continue;
            long v = (long)acc[r][c];
            if (flags & 1) v += bias[b2 * bias_s2 + row * bias_rs + col * bias_cs];
            int qi = b2 * q_s2 + row * q_rs + col * q_cs;
            v = mbqm(v, (long)qm[qi], qs[qi]) + zp_y;
            if (flags & 2) v += ztab[(int)Z[z_off + b1 * z_s1 + b2 * z_s2 + row * z_rs + col * z_cs] + 128];
            C[c_off + b1 * c_s1 + b2 * c_s2 + row * c_rs + col * c_cs] = (char)clamp_i(v, lo, hi);
        }
    }
}

/* float32 for CPU OpenCL devices (PoCL): no local memory, no barriers. Each work item owns
 * CM rows of one column; neighbouring work items take neighbouring columns, which the
 * driver's work-group vectoriser turns into SIMD lanes over contiguous B and C rows, and the
 * CPU caches do the tiling that local memory does on a GPU. Same arguments as gemm_f32. */
#define CM 8
__kernel void gemm_f32_cpu(__global const float* A, int a_off, int a_rs, int a_cs, int a_s1, int a_s2,
                           __global const float* B, int b_off, int b_rs, int b_cs, int b_s1, int b_s2,
                           __global float* C, int c_off, int c_rs, int c_cs, int c_s1, int c_s2,
                           int M, int N, int K, int nb2, float alpha,
                           __global const float* bias, int bias_off, int bias_rs, int bias_cs, int bias_s2, float beta,
                           __global const float* Z, int z_off, int z_rs, int z_cs, int z_s1, int z_s2,
                           int act, float p0, float p1, int flags) {
    int col = get_global_id(0), row0 = get_global_id(1) * CM;
    int bt = get_global_id(2), b1 = bt / nb2, b2 = bt % nb2;
    if (col >= N) return;
    int ab = a_off + b1 * a_s1 + b2 * a_s2;
    int bb = b_off + b1 * b_s1 + b2 * b_s2 + col * b_cs;
    float acc[CM];
    for (int r = 0; r < CM; r++) acc[r] = 0.0f;
    int rows = min(CM, M - row0);
    if (rows == CM) {
        for (int k = 0; k < K; k++) {
            float b = B[bb + k * b_rs];
            int ak = ab + row0 * a_rs + k * a_cs;
            for (int r = 0; r < CM; r++) acc[r] += A[ak + r * a_rs] * b;
        }
    } else {
        for (int k = 0; k < K; k++) {
            float b = B[bb + k * b_rs];
            int ak = ab + row0 * a_rs + k * a_cs;
            for (int r = 0; r < rows; r++) acc[r] += A[ak + r * a_rs] * b;
        }
    }
    for (int r = 0; r < rows; r++) {
        int row = row0 + r;
        float v = alpha == 1.0f ? acc[r] : acc[r] * alpha;
        if (flags & 1) {
            float bv = bias[bias_off + b2 * bias_s2 + row * bias_rs + col * bias_cs];
            v += beta == 1.0f ? bv : bv * beta;
        }
        if (flags & 2) v += Z[z_off + b1 * z_s1 + b2 * z_s2 + row * z_rs + col * z_cs];
        C[c_off + b1 * c_s1 + b2 * c_s2 + row * c_rs + col * c_cs] = act_apply(v, act, p0, p1);
    }
}

/* int8 for CPU OpenCL devices: gemm_i8's arithmetic, gemm_f32_cpu's work split. */
__kernel void gemm_i8_cpu(__global const char* A, int a_off, int a_rs, int a_cs, int a_s1, int a_s2, int zp_a,
                          __global const char* B, int b_off, int b_rs, int b_cs, int b_s1, int b_s2, int zp_b,
                          __global char* C, int c_off, int c_rs, int c_cs, int c_s1, int c_s2,
                          int M, int N, int K, int nb2,
                          __global const long* bias, int bias_rs, int bias_cs, int bias_s2,
                          __global const int* qm, __global const int* qs, int q_rs, int q_cs, int q_s2, int zp_y,
                          __global const char* Z, int z_off, int z_rs, int z_cs, int z_s1, int z_s2,
                          __global const long* ztab, int lo, int hi, int flags) {
    int col = get_global_id(0), row0 = get_global_id(1) * CM;
    int bt = get_global_id(2), b1 = bt / nb2, b2 = bt % nb2;
    if (col >= N) return;
    int ab = a_off + b1 * a_s1 + b2 * a_s2;
    int bb = b_off + b1 * b_s1 + b2 * b_s2 + col * b_cs;
    int acc[CM];
    for (int r = 0; r < CM; r++) acc[r] = 0;
    int rows = min(CM, M - row0);
    for (int k = 0; k < K; k++) {
        int b = (int)B[bb + k * b_rs] - zp_b;
        int ak = ab + row0 * a_rs + k * a_cs;
        if (rows == CM) {
            for (int r = 0; r < CM; r++) acc[r] += ((int)A[ak + r * a_rs] - zp_a) * b;
        } else {
            for (int r = 0; r < rows; r++) acc[r] += ((int)A[ak + r * a_rs] - zp_a) * b;
        }
    }
    for (int r = 0; r < rows; r++) {
        int row = row0 + r;
        long v = (long)acc[r];
        if (flags & 1) v += bias[b2 * bias_s2 + row * bias_rs + col * bias_cs];
        int qi = b2 * q_s2 + row * q_rs + col * q_cs;
        v = mbqm(v, (long)qm[qi], qs[qi]) + zp_y;
        if (flags & 2) v += ztab[(int)Z[z_off + b1 * z_s1 + b2 * z_s2 + row * z_rs + col * z_cs] + 128];
        C[c_off + b1 * c_s1 + b2 * c_s2 + row * c_rs + col * c_cs] = (char)clamp_i(v, lo, hi);
    }
}
