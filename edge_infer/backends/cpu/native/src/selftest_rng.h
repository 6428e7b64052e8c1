/* The self-tests' seeded generator (a 64-bit LCG): one state per translation unit, which each
 * self-test seeds itself, so its cases do not depend on which other self-test ran first. */
#ifndef EI_SELFTEST_RNG_H
#define EI_SELFTEST_RNG_H

#include <stdint.h>

static uint64_t st_state;

static inline uint64_t st_next(void) {
    st_state = st_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return st_state;
}

/* 31 random bits */
static inline uint32_t st_rand(void) { return (uint32_t)(st_next() >> 33); }

/* uniform in [-1, 1) on a 2^-23 grid */
static inline float st_unif(void) { return (float)((st_next() >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f; }

/* an integer in [lo, hi] */
static inline int st_int(int lo, int hi) { return lo + (int)((st_unif() + 1.0f) * 0.5f * (hi - lo + 1)) % (hi - lo + 1); }

#endif
