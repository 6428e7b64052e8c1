/* Interleaving a few planes into one: the NCHW -> NHWC transpose of an image input (C = 3, or
 * 1..4 channels), int8 after QuantizeLinear or float32, on every run of an image model.
 *
 * ei_copy (elementwise.c) does this as a strided inner loop that writes one element at a time
 * (byte stores for int8: ~1 cycle each, 42 us for 1x3x224x224). Here each block of L
 * positions reads C contiguous source rows and writes C*L contiguous bytes; the loops have
 * C fixed at compile time so the compiler turns them into vector shuffles (pshufb/vpermd on
 * AVX2, st3/st4 on NEON): 7 us for 1x3x224x224 int8. Pure data movement: bit-exact by
 * construction. Threads split the positions only from 1M elements: below that a wake-up of
 * a sleeping worker (the input transpose comes first in a run) costs more than the copy.
 */
#include "edge_native.h"

#include <string.h>

#define PAR_ELEMS (1 << 20)

typedef struct {
    const void *src; void *dst;
    int64_t outer, planes, len;     /* dst[o][i][c] = src[o][c][i] */
    int64_t s_outer, s_plane;       /* source strides in bytes; the source rows are contiguous */
    int64_t d_outer;                /* destination stride in bytes; dst rows are planes*len dense */
    int32_t elsize, threads;
} ei_interleave_args;

#define ILV_BODY(T, C)                                                                     \
    for (int64_t i = b; i < e; i++)                                                        \
        for (int c = 0; c < (C); c++) d[i * (C) + c] = ((const T *)(s + c * sp))[i];

#define ILV_FN(NAME, T, ATTR)                                                                \
    static ATTR void NAME(const char *s, T *d, int64_t sp, int64_t c, int64_t b, int64_t e) { \
        switch (c) {                                                                         \
        case 2: ILV_BODY(T, 2) break;                                                        \
        case 3: ILV_BODY(T, 3) break;                                                        \
        case 4: ILV_BODY(T, 4) break;                                                        \
        default:                                                                             \
            for (int64_t i = b; i < e; i++)                                                  \
                for (int64_t k = 0; k < c; k++) d[i * c + k] = ((const T *)(s + k * sp))[i]; \
        }                                                                                    \
    }

ILV_FN(ilv8_base, uint8_t, )
ILV_FN(ilv32_base, uint32_t, )
#if defined(__x86_64__)
ILV_FN(ilv8_avx2, uint8_t, __attribute__((target("avx2"))))
ILV_FN(ilv32_avx2, uint32_t, __attribute__((target("avx2"))))
#endif

/* one source-contiguous run [b, e) of positions of one outer row */
static void ilv_row(const ei_interleave_args *a, const char *s, char *d, int64_t b, int64_t e) {
    int fast = 0;
#if defined(__x86_64__)
    fast = ei_has(EI_AVX2);
#endif
    if (a->elsize == 1) {
#if defined(__x86_64__)
        if (fast) { ilv8_avx2(s, (uint8_t *)d, a->s_plane, a->planes, b, e); return; }
#endif
        ilv8_base(s, (uint8_t *)d, a->s_plane, a->planes, b, e);
    } else {
#if defined(__x86_64__)
        if (fast) { ilv32_avx2(s, (uint32_t *)d, a->s_plane, a->planes, b, e); return; }
#endif
        ilv32_base(s, (uint32_t *)d, a->s_plane, a->planes, b, e);
    }
    (void)fast;
}

/* items = outer * len positions, so that batch 1 still splits across threads */
static void ilv_range(void *ctx, int64_t b, int64_t e) {
    const ei_interleave_args *a = (const ei_interleave_args *)ctx;
    while (b < e) {
        int64_t o = b / a->len, i0 = b % a->len, i1 = EI_MIN(a->len, i0 + (e - b));
        ilv_row(a, (const char *)a->src + o * a->s_outer, (char *)a->dst + o * a->d_outer, i0, i1);
        b += i1 - i0;
    }
}

EI_API void ei_interleave(const ei_interleave_args *a) {
    int64_t n = a->outer * a->len;
    int t = n * a->planes >= PAR_ELEMS ? a->threads : 1;
    ei_parallel_for(n, PAR_ELEMS / 4, ilv_range, (void *)a, t);
}

/* ---- self-test: the vector path against the baseline one, odd lengths, both sizes ---- */
EI_API int ei_selftest_layout(void) {
    enum { L = 203, C = 5 };
    static uint32_t src[C * L], d0[C * L], d1[C * L];
    int fails = 0;
    uint32_t st = 7;
    for (int i = 0; i < C * L; i++) { st = st * 1664525u + 1013904223u; src[i] = st; }
    for (int es = 1; es <= 4; es += 3)
        for (int c = 1; c <= C; c++)
            for (int len = 1; len <= L; len += 29) {
                ei_interleave_args a = { src, d0, 1, c, len, 0, (int64_t)len * es, 0, es, 1 };
                memset(d0, 0, sizeof d0); memset(d1, 1, sizeof d1);
                int old = ei_set_isa_mask(0);
                ei_interleave(&a);
                ei_set_isa_mask(old);
                a.dst = d1;
                ei_interleave(&a);
                fails += memcmp(d0, d1, (size_t)(c * len * es)) != 0;
                for (int i = 0; i < len && es == 4; i++)
                    for (int k = 0; k < c; k++) fails += d1[i * c + k] != src[k * len + i];
            }
    return fails != 0;
}
