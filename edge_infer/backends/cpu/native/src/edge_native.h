/* edge_infer native kernels: the shared pieces every kernel file uses.
 *
 * One plain C shared library (no Python C API), loaded with ctypes by
 * edge_infer/backends/cpu/native/__init__.py. Every kernel file includes this header.
 *
 * Steps: a kernel's prepare (in Python) fills an argument struct once; its eval is a call
 * `fn(args)`. ei_run_steps runs a run of such steps in one call, so consecutive native ops
 * cost one Python->C transition per graph segment, with the GIL released (ctypes releases it).
 *
 * ISA dispatch: kernels are compiled for the baseline ISA; faster versions carry
 * __attribute__((target(...))) and are chosen at run time with ei_has(). ei_set_isa_mask()
 * restricts the features seen (tests compare every path on one machine).
 */
#ifndef EDGE_NATIVE_H
#define EDGE_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#define EI_API __attribute__((visibility("default")))

/* bumped whenever a struct or signature seen by Python changes; the loader checks it */
#define EI_ABI_VERSION 4

/* ISA feature bits */
#define EI_AVX2     (1 << 0)   /* with FMA */
#define EI_AVX512   (1 << 1)   /* F + BW */
#define EI_NEON     (1 << 2)   /* aarch64 Advanced SIMD */
#define EI_DOTPROD  (1 << 3)   /* aarch64 sdot/udot (ARMv8.2 DotProd) */
#define EI_AMX      (1 << 4)   /* x86 AMX-TILE + AMX-INT8, tile data granted by the kernel */

EI_API int ei_abi_version(void);
/* features of this CPU, before the mask */
EI_API int ei_cpu_features(void);
/* features kernels may use = cpu features & mask; returns the previous mask */
EI_API int ei_set_isa_mask(int mask);
int ei_has(int feature);

/* ---- debug checks ----
 * Built with -DEI_DEBUG_CHECKS (`EDGE_INFER_NATIVE_DEBUG=1 python setup.py build_ext`), the
 * exported kernels check the preconditions of their argument struct before reading memory
 * (window geometry, strides and dilations >= 1, pads >= 0, channel/group divisibility,
 * quantization ranges, sparse index structure) and on a violation print
 * "edge_native: precondition failed in FN: COND (FILE:LINE)" to stderr and abort. The Python
 * side validates every value first (edge_infer/ops), so a failure means a bug there; the
 * release build compiles the checks out. ei_debug_checks() says which build is loaded. */
#ifdef EI_DEBUG_CHECKS
#define EI_CHECK(cond) do { if (!(cond)) ei_check_failed(__func__, #cond, __FILE__, __LINE__); } while (0)
#else
#define EI_CHECK(cond) ((void)0)
#endif
__attribute__((noreturn)) void ei_check_failed(const char *fn, const char *cond, const char *file, int line);
EI_API int ei_debug_checks(void);

/* ---- steps ---- */
typedef void (*ei_step_fn)(const void *args);
typedef struct { ei_step_fn fn; const void *args; } ei_step;
EI_API void ei_run_steps(const ei_step *steps, int64_t n);

/* ---- threads ----
 * fn(ctx, begin, end) over [0, n) split into contiguous chunks of at least `grain` items,
 * taken dynamically by the caller and up to threads - 1 workers. One pool per process: a call made while
 * the pool is busy (another thread's run, or a nested call) runs serially in the caller, so
 * concurrent runtimes never deadlock or oversubscribe. */
typedef void (*ei_range_fn)(void *ctx, int64_t begin, int64_t end);
EI_API void ei_parallel_for(int64_t n, int64_t grain, ei_range_fn fn, void *ctx, int threads);
/* inside fn: which participant runs this range, in [0, threads) (0: the caller); at most one
 * range runs per slot at a time, so per-thread scratch can be indexed by it. The pool cuts
 * [0, n) into up to 4 chunks per thread, handed out dynamically: fn must not assume one
 * range per thread. */
int ei_pool_slot(void);
/* how long idle workers spin before they sleep, in microseconds (default 200, or
 * EDGE_INFER_SPIN_US; a caller waiting for workers spins 5x that, and after contention was
 * seen every spin is cut to 20 us for a while: runtime.c); returns the previous value */
EI_API int ei_set_spin_us(int us);

/* [lo, hi) of the window taps k (0 <= k < kernel) with 0 <= o*stride - pad + k*dil < size:
 * the taps of output position o that lie inside the input (pools skip the padding) */
static inline void ei_tap_range(int64_t o, int stride, int pad, int dil, int kernel, int64_t size,
                                int *lo, int *hi) {
    int64_t start = o * stride - pad;
    int a = 0, b = kernel;
    while (a < kernel && start + (int64_t)a * dil < 0) a++;
    while (b > a && start + (int64_t)(b - 1) * dil >= size) b--;
    *lo = a; *hi = b;
}

#define EI_MAX_THREADS 64
/* the pool cuts a job into up to this many chunks per thread (runtime.c; the fp32 convs'
 * split simulations model the same hand-out) */
#define EI_CHUNKS_PER_THREAD 4
#define EI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define EI_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- pool counters and the per-step profile ----
 * ei_pool_stats copies the pool's counters (EI_POOL_NSTATS int64, in this order) into out
 * (when not NULL), then zeroes them if reset (reset & 2: the pool also forgets that it shrank
 * or saw contention, and the CPUs its workers moved to, for tests): parallel jobs run; jobs the caller ran alone
 * because the pool had shrunk; chunks handed out; chunks the caller ran itself; joins where
 * the caller waited for workers; ns it waited; ns it spent running chunks; waits that ended
 * asleep; times the pool shrank; jobs during which a spin stopped for contention (runtime.c). Counted for the thread that owns the pool. */
enum { EI_POOL_JOBS, EI_POOL_SERIAL_JOBS, EI_POOL_CHUNKS, EI_POOL_CALLER_CHUNKS, EI_POOL_WAITS,
       EI_POOL_WAIT_NS, EI_POOL_WORK_NS, EI_POOL_SLEEPS, EI_POOL_SHRINKS, EI_POOL_CALMS, EI_POOL_NSTATS };
EI_API void ei_pool_stats(int64_t *out, int reset);
/* while buf is set, ei_run_steps called from this thread appends one record of
 * EI_PROFILE_FIELDS int64 per step (up to cap_records): the step's args address, its wall
 * time in ns, then the pool counters' deltas over the step; returns the records written since
 * the previous call (buf NULL or cap 0: stop) */
#define EI_PROFILE_FIELDS (2 + EI_POOL_NSTATS)
EI_API int64_t ei_profile_steps(int64_t *buf, int64_t cap_records);
/* ei_run_steps for a plan's last run of steps: the workers are left to spin out their idle
 * budget instead of being sent to sleep, so a run that follows back to back finds them awake */
EI_API void ei_run_steps_linger(const ei_step *steps, int64_t n);

#endif
