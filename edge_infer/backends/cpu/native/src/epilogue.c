/* Element-wise epilogues: the int8 requantization epilogue (ei_int8.h) in scalar, AVX2 and
 * NEON, and int8 Add (TFLite ADD: each input's rescaled term from a 256-entry table, the sum
 * requantized). */
#include "ei_int8.h"
#include "selftest_rng.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

int ei_rq_simd(void) {
#if defined(__x86_64__)
    return ei_has(EI_AVX2);
#elif defined(__aarch64__)
    return ei_has(EI_NEON);
#else
    return 0;
#endif
}

static void rq_scalar(const ei_rq *rq, const int32_t *acc, int ch0, int n, int8_t *y, ptrdiff_t ys,
                      const int8_t *z) {
    for (int i = 0; i < n; i++) {
        int ch = ch0 + i;
        int32_t a = (int32_t)((uint32_t)acc[i] + (uint32_t)(rq->bias ? rq->bias[ch] : 0));
        int32_t zt = rq->ztab ? rq->ztab[(uint8_t)z[i * ys]] : 0;
        y[i * ys] = ei_rq_one(a, rq->mult[ch], rq->shift[ch], rq->zp_y, zt, rq->lo, rq->hi);
    }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma")))
static void rq_avx2(const ei_rq *rq_in, const int32_t *acc, int ch0, int n, int8_t *y, ptrdiff_t ys,
                    const int8_t *z) {
    /* a local copy: the int8 stores below could alias *rq_in, which would reload every field */
    const ei_rq copy = *rq_in, *rq = &copy;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        int ch = ch0 + i;
        __m256i a = _mm256_loadu_si256((const __m256i *)(acc + i));
        if (rq->bias) a = _mm256_add_epi32(a, _mm256_loadu_si256((const __m256i *)(rq->bias + ch)));
        __m128i p8 = ei_rq8_avx2(rq, a, ch, z ? z + i * ys : NULL, ys);
        if (ys == 1) {
            _mm_storel_epi64((__m128i *)(y + i), p8);
        } else {
            int8_t t[16];
            _mm_storeu_si128((__m128i *)t, p8);
            for (int j = 0; j < 8; j++) y[(i + j) * ys] = t[j];
        }
    }
    if (i < n) rq_scalar(rq, acc + i, ch0 + i, n - i, y + i * ys, ys, z ? z + i * ys : NULL);
}
#endif

#if defined(__aarch64__)
static void rq_neon(const ei_rq *rq_in, const int32_t *acc, int ch0, int n, int8_t *y, ptrdiff_t ys,
                    const int8_t *z) {
    const ei_rq copy = *rq_in, *rq = &copy;     /* see rq_avx2 */
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        int ch = ch0 + i;
        int32x4_t a0 = vld1q_s32(acc + i), a1 = vld1q_s32(acc + i + 4);
        if (rq->bias) { a0 = vaddq_s32(a0, vld1q_s32(rq->bias + ch)); a1 = vaddq_s32(a1, vld1q_s32(rq->bias + ch + 4)); }
        int8x8_t p8 = ei_rq8_neon(rq, a0, a1, ch, z ? z + i * ys : NULL, ys);
        if (ys == 1) {
            vst1_s8(y + i, p8);
        } else {
            int8_t t[8];
            vst1_s8(t, p8);
            for (int j = 0; j < 8; j++) y[(i + j) * ys] = t[j];
        }
    }
    if (i < n) rq_scalar(rq, acc + i, ch0 + i, n - i, y + i * ys, ys, z ? z + i * ys : NULL);
}
#endif

void ei_rq_run(int simd, const ei_rq *rq, const int32_t *acc, int ch0, int n, int8_t *y, ptrdiff_t ys,
               const int8_t *z) {
#if defined(__x86_64__)
    if (simd) { rq_avx2(rq, acc, ch0, n, y, ys, z); return; }
#elif defined(__aarch64__)
    if (simd) { rq_neon(rq, acc, ch0, n, y, ys, z); return; }
#endif
    (void)simd;
    rq_scalar(rq, acc, ch0, n, y, ys, z);
}

/* ---- int8 Add / Sub (same-shape operands) ----
 * t1, t2: MBQM((x_i - zp_i) << 20, M_i) per int8 value (index (uint8_t)x), built at prepare;
 * y = clamp(zp_y + MBQM(t1[a] + t2[b], qy, shy), -128, 127). |t| < 2^28, so the int32 sum is
 * exact, as the numpy kernel's int64 one. */
typedef struct {
    const int8_t *a, *b;
    int8_t *y;
    const int32_t *t1, *t2;
    int64_t n;
    int32_t qy, shy, zp_y, lo, hi;
    int32_t threads;
} ei_int8_add_args;

typedef struct { const ei_int8_add_args *a; int simd; } add_ctx;

#if defined(__x86_64__)
/* values s0 .. s1 - 1, 16 at a time: both tables read by gathers, the sum requantized in
 * registers as the AVX-512 GEMM epilogue does (ei_vq_store: the same MBQM, bit for bit) */
__attribute__((target("avx512f,avx512bw")))
static void add_avx512(const ei_int8_add_args *a, int64_t s0, int64_t s1) {
    ei_vq16 v;
    ei_vqc c;
    ei_vqc_prepare(&c, NULL, a->zp_y, a->lo, a->hi, ei_vq16_prepare1(&v, a->qy, a->shy));
    for (int64_t s = s0; s < s1; s += 16) {
        int n = (int)EI_MIN((int64_t)16, s1 - s);
        __mmask16 m = n == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
        __m512i ia = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(_mm512_maskz_loadu_epi8((__mmask64)m, a->a + s)));
        __m512i ib = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(_mm512_maskz_loadu_epi8((__mmask64)m, a->b + s)));
        __m512i acc = _mm512_add_epi32(_mm512_i32gather_epi32(ia, a->t1, 4), _mm512_i32gather_epi32(ib, a->t2, 4));
        ei_vq_store(&c, &v, m, acc, a->y + s, NULL);
    }
}
#endif

static void add_range(void *vctx, int64_t b0, int64_t b1) {
    const add_ctx *c = (const add_ctx *)vctx;
    const ei_int8_add_args *a = c->a;
    enum { BLK = 256 };
#if defined(__x86_64__)
    if (ei_has(EI_AVX512)) { add_avx512(a, b0 * BLK, EI_MIN(b1 * BLK, a->n)); return; }
#endif
    int32_t acc[BLK], sh[BLK], q[BLK];
    for (int i = 0; i < BLK; i++) { sh[i] = a->shy; q[i] = a->qy; }
    ei_rq rq = { NULL, q, sh, NULL, a->zp_y, a->lo, a->hi };
    for (int64_t s = b0 * BLK; s < b1 * BLK && s < a->n; s += BLK) {
        int len = (int)EI_MIN((int64_t)BLK, a->n - s);
        const int8_t *pa = a->a + s, *pb = a->b + s;
        for (int i = 0; i < len; i++) acc[i] = a->t1[(uint8_t)pa[i]] + a->t2[(uint8_t)pb[i]];
        ei_rq_run(c->simd, &rq, acc, 0, len, a->y + s, 1, NULL);
    }
}

EI_API void ei_int8_add(const ei_int8_add_args *a) {
    add_ctx c = { a, ei_rq_simd() };
    int64_t blocks = (a->n + 255) / 256;
    ei_parallel_for(blocks, 64, add_range, &c, a->threads);
}

/* ---- self-test: SIMD epilogue vs scalar on seeded random data ---- */

EI_API int ei_selftest_epilogue(void) {
    int fails = 0;
    if (!ei_rq_simd()) return 0;
    st_state = 12345;
    enum { N = 77 };
    int32_t acc[N], bias[N], mult[N], shift[N], ztab[256];
    int8_t z[N * 3], y0[N * 3], y1[N * 3];
    for (int i = 0; i < 256; i++) ztab[i] = (int32_t)(st_rand() % 2000) - 1000;
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < N; i++) {
            uint32_t r = st_rand();
            acc[i] = (trial % 7 == 0) ? (int32_t)st_rand() : (int32_t)(r % 400000) - 200000;
            bias[i] = (int32_t)(st_rand() % 20000) - 10000;
            mult[i] = (int32_t)((1u << 30) + (st_rand() & ((1u << 30) - 1)));
            shift[i] = (int32_t)(st_rand() % 24) - 20;
            if (trial % 5 == 0) shift[i] = (int32_t)(st_rand() % 34) - 31;   /* 0..31 right, 2 left */
            if (trial % 4 == 3) {       /* float32 multipliers in [2^-24, 1) (EI_RQ_FP32), ties included */
                union { float f; int32_t i; } m = { ldexpf(1.0f + (float)(st_rand() % 4096) / 4096.0f,
                                                           -1 - (int)(st_rand() % 24)) };
                mult[i] = m.i;
                shift[i] = EI_RQ_FP32;
            }
        }
        for (int i = 0; i < N * 3; i++) z[i] = (int8_t)st_rand();
        ei_rq rq = { (trial & 1) ? bias : NULL, mult, shift, (trial & 2) ? ztab : NULL,
                     (int32_t)(st_rand() % 256) - 128, -128 + (int32_t)(trial % 3) * 20, 127 };
        int ys = 1 + trial % 3, n = 1 + (int)(st_rand() % N);
        memset(y0, 0, sizeof y0); memset(y1, 0, sizeof y1);
        ei_rq_run(0, &rq, acc, 0, n, y0, ys, z);
        ei_rq_run(1, &rq, acc, 0, n, y1, ys, z);
        if (memcmp(y0, y1, sizeof y0) != 0) fails++;
    }
    /* int8 Add: every pair of values, against the scalar epilogue */
    int32_t t1[256], t2[256];
    for (int i = 0; i < 256; i++) { t1[i] = (int32_t)(st_rand() % (1 << 27)) - (1 << 26); t2[i] = (int32_t)(st_rand() % (1 << 27)) - (1 << 26); }
    static int8_t a[65536 + 3], b[65536 + 3], ya[65536 + 3], yb[65536 + 3];
    for (int i = 0; i < 65536 + 3; i++) { a[i] = (int8_t)(i & 255); b[i] = (int8_t)((i >> 8) + i); }
    ei_int8_add_args args = { a, b, ya, t1, t2, 65536 + 3, 1300000000, -9, -3, -128, 127, 1 };
    int old = ei_set_isa_mask(0);
    ei_int8_add(&args);
    ei_set_isa_mask(old);
    args.y = yb;
    ei_int8_add(&args);
    if (memcmp(ya, yb, sizeof ya) != 0) fails++;
    return fails;
}
