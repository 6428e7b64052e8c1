/* Data movement: strided N-D copies (Transpose, Concat, Slice, Split, Expand, Reshape
 * copies) for 1-, 4- and 8-byte elements, and table gathers (int8 lookup tables, nearest
 * Resize). meta = [ndim, dims[ndim], src strides[ndim], dst strides[ndim]] in elements. */

#define COPY_ND(NAME, T) \
__kernel void NAME(__global const T* src, int so, __global T* dst, int dof, int n, \
                   __global const int* meta) { \
    int i = get_global_id(0); \
    if (i >= n) return; \
    int nd = meta[0], r = i, is = 0, id = 0; \
    for (int d = nd - 1; d >= 0; d--) { \
        int k = r % meta[1 + d]; \
        r /= meta[1 + d]; \
        is += k * meta[1 + nd + d]; \
        id += k * meta[1 + 2 * nd + d]; \
    } \
    dst[dof + id] = src[so + is]; \
}
COPY_ND(copy_nd_1, uchar)
COPY_ND(copy_nd_2, ushort)
COPY_ND(copy_nd_4, uint)
COPY_ND(copy_nd_8, ulong)

/* y = table[x + 128] (int8 -> int8), written through a strided N-D destination (Concat) */
__kernel void lut_i8(__global const char* x, int xo, __global char* y, int yo, int n,
                     __global const char* table, __global const int* meta) {
    int i = get_global_id(0);
    if (i >= n) return;
    int nd = meta[0], r = i, is = 0, id = 0;
    for (int d = nd - 1; d >= 0; d--) {
        int k = r % meta[1 + d];
        r /= meta[1 + d];
        is += k * meta[1 + nd + d];
        id += k * meta[1 + 2 * nd + d];
    }
    if (nd == 0) { is = i; id = i; }
    y[yo + id] = table[(int)x[xo + is] + 128];
}

/* y[l, j] = x[l, idx[j]] (flat gather per leading row), 4- and 1-byte elements */
__kernel void gather_rows_4(__global const uint* x, int xo, __global uint* y, int yo, int n,
                            __global const int* idx, int out_row, int in_row) {
    int i = get_global_id(0);
    if (i >= n) return;
    int l = i / out_row, j = i % out_row;
    y[yo + i] = x[xo + l * in_row + idx[j]];
}

__kernel void gather_rows_1(__global const uchar* x, int xo, __global uchar* y, int yo, int n,
                            __global const int* idx, int out_row, int in_row) {
    int i = get_global_id(0);
    if (i >= n) return;
    int l = i / out_row, j = i % out_row;
    y[yo + i] = x[xo + l * in_row + idx[j]];
}

/* constant Pad, 4-byte elements: meta = [ndim, out dims, in dims, begin pads] */
__kernel void pad_const_4(__global const uint* x, int xo, __global uint* y, int yo, int n,
                          __global const int* meta, uint value) {
    int i = get_global_id(0);
    if (i >= n) return;
    int nd = meta[0], r = i, src = 0, stride = 1, inside = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int k = r % meta[1 + d] - meta[1 + 2 * nd + d];
        r /= meta[1 + d];
        int len = meta[1 + nd + d];
        inside &= k >= 0 && k < len;
        src += k * stride;
        stride *= len;
    }
    y[yo + i] = inside ? x[xo + src] : value;
}
