/* CPU feature detection, the step runner and the thread pool (see edge_native.h). */
#define _GNU_SOURCE
#include "edge_native.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

int ei_abi_version(void) { return EI_ABI_VERSION; }

static int detect_features(void) {
    int f = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f |= EI_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) f |= EI_AVX512;
#elif defined(__aarch64__)
    unsigned long hw = getauxval(AT_HWCAP);
    f |= EI_NEON;                       /* baseline on aarch64 */
    (void)HWCAP_ASIMD;
    if (hw & HWCAP_ASIMDDP) f |= EI_DOTPROD;
#endif
    return f;
}

static int features = -1;
static volatile int isa_mask = -1;

int ei_cpu_features(void) {
    if (features < 0) features = detect_features();
    return features;
}

int ei_set_isa_mask(int mask) {
    int old = isa_mask;
    isa_mask = mask;
    return old;
}

int ei_has(int feature) { return (ei_cpu_features() & isa_mask & feature) == feature; }

void ei_run_steps(const ei_step *steps, int64_t n) {
    for (int64_t i = 0; i < n; i++) steps[i].fn(steps[i].args);
}

/* ---- thread pool ---- */

static pthread_mutex_t pool_owner = PTHREAD_MUTEX_INITIALIZER;  /* held by the caller using the pool */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t cv_done = PTHREAD_COND_INITIALIZER;
static int n_workers = 0;
static uint64_t generation = 0;
static int pending = 0;
static struct { ei_range_fn fn; void *ctx; int64_t n; int chunks; } job;

static void run_chunk(ei_range_fn fn, void *ctx, int64_t n, int chunks, int i) {
    int64_t b = n * i / chunks, e = n * (i + 1) / chunks;
    if (e > b) fn(ctx, b, e);
}

static void *worker_main(void *arg) {
    int id = (int)(intptr_t)arg;   /* 1..n_workers; chunk 0 is the caller's */
    uint64_t seen = 0;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (generation == seen) pthread_cond_wait(&cv_work, &mu);
        seen = generation;
        if (id < job.chunks) {
            ei_range_fn fn = job.fn; void *ctx = job.ctx; int64_t n = job.n; int chunks = job.chunks;
            pthread_mutex_unlock(&mu);
            run_chunk(fn, ctx, n, chunks, id);
            pthread_mutex_lock(&mu);
            if (--pending == 0) pthread_cond_signal(&cv_done);
        }
    }
    return NULL;
}

static int ensure_workers(int want) {       /* called with mu held */
    while (n_workers < want && n_workers < EI_MAX_THREADS - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)(n_workers + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        n_workers++;
    }
    return n_workers;
}

void ei_parallel_for(int64_t n, int64_t grain, ei_range_fn fn, void *ctx, int threads) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t max_chunks = (n + grain - 1) / grain;
    int chunks = threads < 1 ? 1 : threads;
    if (chunks > EI_MAX_THREADS) chunks = EI_MAX_THREADS;
    if (chunks > max_chunks) chunks = (int)max_chunks;
    if (chunks <= 1 || pthread_mutex_trylock(&pool_owner) != 0) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&mu);
    int have = ensure_workers(chunks - 1);
    if (chunks > have + 1) chunks = have + 1;
    job.fn = fn; job.ctx = ctx; job.n = n; job.chunks = chunks;
    pending = chunks - 1;
    generation++;
    pthread_cond_broadcast(&cv_work);
    pthread_mutex_unlock(&mu);
    run_chunk(fn, ctx, n, chunks, 0);
    pthread_mutex_lock(&mu);
    while (pending > 0) pthread_cond_wait(&cv_done, &mu);
    pthread_mutex_unlock(&mu);
    pthread_mutex_unlock(&pool_owner);
}
