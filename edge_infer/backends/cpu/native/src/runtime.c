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
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

/* AMX-TILE and AMX-INT8 (CPUID.7.0:EDX bits 24, 25); Linux hands a process the 8 KB tile
 * state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), which fails
 * where the kernel or the hypervisor does not enable it. */
static int amx_usable(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1) || !((d >> 25) & 1)) return 0;
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}
#endif

int ei_abi_version(void) { return EI_ABI_VERSION; }

#include <stdio.h>

void ei_check_failed(const char *fn, const char *cond, const char *file, int line) {
    fprintf(stderr, "edge_native: precondition failed in %s: %s (%s:%d)\n", fn, cond, file, line);
    fflush(stderr);
    abort();
}

int ei_debug_checks(void) {
#ifdef EI_DEBUG_CHECKS
    return 1;
#else
    return 0;
#endif
}

static int detect_features(void) {
    int f = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f |= EI_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) f |= EI_AVX512;
#if defined(__x86_64__)
    if ((f & EI_AVX512) && amx_usable()) f |= EI_AMX;
#endif
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

static void pool_park(void);
static void pool_nudge(void);
static void pool_snapshot(int64_t *out);

/* ---- per-step profile: while set (by the thread that runs the steps), ei_run_steps appends
 * one record of EI_PROFILE_FIELDS int64 per step: the step's args address, its wall time in
 * ns, then the deltas of the pool counters (EI_POOL_* order) over the step ---- */
static _Thread_local int64_t *prof_buf;
static _Thread_local int64_t prof_cap, prof_len;

int64_t ei_profile_steps(int64_t *buf, int64_t cap_records) {
    int64_t n = prof_len;
    prof_buf = cap_records > 0 ? buf : NULL;
    prof_cap = cap_records > 0 ? cap_records : 0;
    prof_len = 0;
    return n;
}

static int64_t now_ns(void);

static void run_profiled(const ei_step *steps, int64_t n) {
    int64_t before[EI_POOL_NSTATS], after[EI_POOL_NSTATS];
    for (int64_t i = 0; i < n; i++) {
        pool_snapshot(before);
        int64_t t0 = now_ns();
        steps[i].fn(steps[i].args);
        int64_t t1 = now_ns();
        pool_snapshot(after);
        if (prof_len < prof_cap) {
            int64_t *r = prof_buf + prof_len++ * EI_PROFILE_FIELDS;
            r[0] = (int64_t)(intptr_t)steps[i].args;
            r[1] = t1 - t0;
            for (int k = 0; k < EI_POOL_NSTATS; k++) r[2 + k] = after[k] - before[k];
        }
    }
}

/* Workers spin between the parallel kernels of one run of native steps. Outside such a run
 * (after it, or after a native call made from a numpy kernel) the caller goes back to
 * Python, often into numpy/BLAS, whose own threads need the cores our spinning workers would
 * hold: they are sent to sleep (measured: fp32 MobileNet-v2 at 2 threads took 2x longer). */
static _Thread_local int in_steps;
/* this thread's last run of steps handed jobs to workers (ei_parallel_for sets it) */
static _Thread_local int steps_went_parallel;

static void run_steps(const ei_step *steps, int64_t n, int park) {
    in_steps = 1;
    /* the workers went to sleep after the last run: when that run used them, wake them now,
     * so they spin by the time the first parallel layer comes instead of that layer waiting
     * out a wake-up (measured: the first conv of MobileNetV3 at 2 threads ran ~70% of its
     * chunks in the caller) */
    if (steps_went_parallel) pool_nudge();
    steps_went_parallel = 0;
    if (prof_buf) run_profiled(steps, n);
    else for (int64_t i = 0; i < n; i++) steps[i].fn(steps[i].args);
    in_steps = 0;
    if (park) pool_park();
}

void ei_run_steps(const ei_step *steps, int64_t n) { run_steps(steps, n, 1); }

/* The last run of steps of a plan: nothing of the plan follows, so the workers are not sent
 * to sleep; they spin out their idle budget (EDGE_INFER_SPIN_US, 20 us after contention) and
 * then sleep on their own. A run that comes back to back finds them awake: on this 2-core VM
 * the futex wake-up of sleeping workers cost every run of MobileNetV3 at 2 threads 60-90 us
 * (fp32 1.42 -> 1.33 ms; onnxruntime's pool spins after a run the same way). Code that
 * follows a run loses at most that budget of one core. */
void ei_run_steps_linger(const ei_step *steps, int64_t n) { run_steps(steps, n, 0); }

/* ---- thread pool ----
 *
 * A job is [0, n) cut into more chunks than threads (up to EI_CHUNKS_PER_THREAD each); every
 * participant, the caller included, takes the next chunk from one atomic counter until none
 * is left, and the caller then waits only for the chunks already taken. So a worker that the
 * OS has descheduled (another process took its core) holds up nothing it has not started: the
 * others take its share. (A fixed chunk per thread made a layer wait for the slowest
 * thread's time slice: 11x slower than onnxruntime on ResNet-50 with two busy processes.)
 *
 * Each participant owns a contiguous share of the chunks (slot s: [chunks * s / parts,
 * chunks * (s + 1) / parts)) and takes from it first, then from the others' untaken chunks.
 * The kernels cut their work along the same axis layer after layer (pixel rows), so a thread
 * mostly reads what it wrote itself in the layer before, from its own L2, and only a late
 * thread's share moves. (One shared counter handed the chunks out at random: half of every
 * layer's input came from the other core's cache; measured 2 threads on this 2-core VM,
 * MobileNet-v2 fp32 4.3-4.9 -> 3.7 ms, int8 2.3 -> 2.2 ms, when the other core was free.)
 *
 * Waiting (a worker for the next job, the caller for chunks that workers still run) spins
 * with the CPU's pause instruction for a bounded time (EDGE_INFER_SPIN_US, default 200 us; the
 * caller's join JOIN_SPIN times that), then sleeps on a condition variable: a graph calls the
 * pool once per layer, tens of microseconds apart, and a futex wake-up costs as much as a
 * small layer's share of the work (it made 2 threads slower than 1 on MobileNet-v2).
 *
 * No sched_yield while the job's threads fit the CPUs this process may use: with another
 * process runnable on the core, a yield hands it the core until it has used its slice, which
 * the scheduler checks at its next tick (4 ms at HZ=250), so a spinner that yielded came back
 * milliseconds late (measured on this 2-core machine under load, pool counters: with a yield
 * after 512 pauses the worker ran 1-5% of the chunks at 2 threads, without it 15-30%). When a
 * job has more threads than CPUs, our own threads share cores and a spin yields after a short
 * pause, so the thread it waits for can run.
 *
 * Contention: a spin stops early (and sleeps) when its thread was descheduled between two of
 * its checks (GAP_NS: the machine has more runnable threads than cores; with group scheduling
 * a spinner then takes CPU share from our own working threads), or when it finds itself on
 * the CPU of the thread it waits for (a worker on the caller's, the caller on a worker's: the
 * scheduler put both on one core). Either marks contention, and the next CALM_JOBS jobs spin
 * at most CALM_SPIN_NS, so waits go to sleep and give the core to whoever can use it.
 *
 * Shrinking: when the waits for workers cost more than the workers' share of the work (the
 * OS keeps descheduling them), the jobs run faster in the caller alone. The caller measures
 * both (its own time taking chunks, scaled by the chunks the workers took, against its time
 * waiting for them); over each window of SHRINK_WINDOW jobs where the waits were larger, the
 * next SHRINK_JOBS jobs run in the caller alone, then threads are tried again, so a machine
 * that becomes quiet gets them back within a few layers.
 *
 * The job is published through a sequence counter (odd while it is being written) so a
 * worker never acts on a half-written one; the chunk counter carries the job's number in its
 * high half, so a late worker cannot take a chunk of the next job with the previous one's
 * function.
 */
#include <stdatomic.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

static pthread_mutex_t pool_owner = PTHREAD_MUTEX_INITIALIZER;  /* held by the caller using the pool */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;          /* guards sleeping, and pool growth */
static pthread_cond_t cv_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t cv_done = PTHREAD_COND_INITIALIZER;
static int n_workers = 0;
static atomic_uint_fast64_t job_seq;        /* even: a job is published; odd: being written */
/* per participant: job number << 32 | the next chunk of its own share to take; each on a
 * cache line of its own */
static struct { atomic_uint_fast64_t v; char pad[64 - sizeof(atomic_uint_fast64_t)]; }
    next_chunk[EI_MAX_THREADS] __attribute__((aligned(64)));
static atomic_int pending;                  /* chunks of the current job not yet done */
static atomic_int sleepers;                 /* workers blocked on cv_work */
static atomic_int caller_waiting;           /* the caller blocked on cv_done */
static _Atomic(ei_range_fn) job_fn;
static _Atomic(void *) job_ctx;
static _Atomic int64_t job_n;
static _Atomic int job_chunks;
static _Atomic int job_parts;               /* participants: the caller (slot 0) and workers 1..parts-1 */
static _Atomic uint32_t job_id;
static _Atomic int64_t spin_ns = -1;
static atomic_int spin_yields;              /* the last job had more threads than CPUs */
static atomic_uint park_seq;                /* bumped: spinning workers go to sleep now */
static atomic_int caller_cpu = -1;          /* the CPU the caller published the last job from */
/* the CPU each worker runs a chunk on, -1 while it runs none */
static atomic_int slot_cpu[EI_MAX_THREADS] = { [0 ... EI_MAX_THREADS - 1] = -1 };
/* contention_seen: set by a spinner that stopped for contention; calm: short spins only,
 * contention was seen lately; calm_left: jobs until spins are long again (owner only) */
static atomic_int contention_seen, calm;
/* a worker found itself on the caller's CPU and left its chunks to the caller */
static atomic_int declined;
/* bumped by ei_pool_stats(reset & 2): a worker's affinity, whatever it is, counts as set by
 * somebody else (a test that pinned every thread to one CPU) */
static atomic_int pin_gen;
static int calm_left;
static _Thread_local int my_slot;

#define SHRINK_WINDOW 16
#define SHRINK_JOBS 64
#define JOIN_SPIN 5
#define GAP_NS 50000
#define CALM_JOBS 256
#define CALM_SPIN_NS 20000

/* counters (EI_POOL_* order), written only by the pool's owner; atomics so that a snapshot
 * read by another thread is never torn */
static _Atomic int64_t stats[EI_POOL_NSTATS];
/* the shrinking verdict's window, and the jobs still to run in the caller alone */
static int64_t win_jobs, win_work_ns, win_wait_ns;
static int serial_left;

static void stat_add(int k, int64_t v) {
    atomic_store_explicit(&stats[k], atomic_load_explicit(&stats[k], memory_order_relaxed) + v,
                          memory_order_relaxed);
}

static void pool_snapshot(int64_t *out) {
    for (int k = 0; k < EI_POOL_NSTATS; k++) out[k] = atomic_load_explicit(&stats[k], memory_order_relaxed);
}

void ei_pool_stats(int64_t *out, int reset) {
    if (out) pool_snapshot(out);
    if (reset)
        for (int k = 0; k < EI_POOL_NSTATS; k++) atomic_store_explicit(&stats[k], 0, memory_order_relaxed);
    if (reset & 2) {                /* forget what the pool learned: shrunk, short spins */
        pthread_mutex_lock(&pool_owner);
        serial_left = calm_left = 0;
        win_jobs = win_work_ns = win_wait_ns = 0;
        atomic_store(&calm, 0);
        atomic_store(&contention_seen, 0);
        atomic_fetch_add(&pin_gen, 1);
        pthread_mutex_unlock(&pool_owner);
    }
}

int ei_pool_slot(void) { return my_slot; }

static void pool_park(void) { atomic_fetch_add_explicit(&park_seq, 1, memory_order_relaxed); }

static atomic_uint nudge_seq;               /* bumped: sleeping workers go back to spinning */

static void pool_nudge(void) {
    if (atomic_load(&sleepers) == 0) return;
    pthread_mutex_lock(&mu);
    atomic_fetch_add(&nudge_seq, 1);
    pthread_cond_broadcast(&cv_work);
    pthread_mutex_unlock(&mu);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t spin_budget_ns(void) {
    if (spin_ns < 0) {
        const char *e = getenv("EDGE_INFER_SPIN_US");
        long us = e && *e ? strtol(e, NULL, 10) : 200;
        spin_ns = (int64_t)(us < 0 ? 0 : us) * 1000;
    }
    return spin_ns;
}

int ei_set_spin_us(int us) {
    int old = (int)(spin_budget_ns() / 1000);
    spin_ns = (int64_t)(us < 0 ? 0 : us) * 1000;
    return old;
}

/* CPUs this process may run on, read once */
static int cpus_usable(void) {
    static int n = 0;
    if (n <= 0) {
#if defined(__linux__)
        cpu_set_t set;
        n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
#endif
        if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (n <= 0) n = 1;
    }
    return n;
}

/* one step of a spin wait: the pause instruction; a yield only when our own threads share
 * cores (see above) */
static inline void spin_pause(int i) {
    if (i >= 256 && atomic_load_explicit(&spin_yields, memory_order_relaxed)) sched_yield();
    else cpu_relax();
}

static inline int cpu_now(void) {
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

/* A spin wait's check, every 64 pauses: whether to stop spinning and sleep. It stops at its
 * deadline; when the previous check is over GAP_NS ago (the spinner was descheduled: the
 * machine has more runnable threads than cores, and with group scheduling a spinner takes
 * the CPU share of our own working threads); and when it runs on the CPU of a thread it waits
 * for (`other`, or when `other` is -2 the CPU of any worker running a chunk). The last two
 * mark contention: the
 * following CALM_JOBS jobs spin at most CALM_SPIN_NS. */
typedef struct { int64_t deadline, last; } spin_state;

static int spin_stop(spin_state *st, int64_t budget, int other, int parts) {
    int64_t t = now_ns();
    if (st->deadline < 0) {
        if (atomic_load_explicit(&calm, memory_order_relaxed) && budget > CALM_SPIN_NS) budget = CALM_SPIN_NS;
        st->deadline = t + budget;
        st->last = t;
        return budget == 0;
    }
    if (t >= st->deadline) return 1;
    int shared = 0;
    if (t - st->last > GAP_NS) shared = 1;
    else if (other != -1) {
        int me = cpu_now();
        if (me >= 0 && other >= 0) shared = me == other;
        else if (me >= 0)
            for (int k = 1; k < parts && !shared; k++) shared = atomic_load_explicit(&slot_cpu[k], memory_order_relaxed) == me;
    }
    st->last = t;
    if (shared) atomic_store_explicit(&contention_seen, 1, memory_order_relaxed);
    return shared;
}

/* moves the calling worker off `cpu` (the caller's) to the other CPUs it may use; returns
 * whether it could. The scheduler wakes a sleeping worker on its waker's CPU when it deems
 * that cache-hot, and the caller on its waker's, so caller and worker often end up on one CPU
 * with the other idle, each at half speed (measured on this 2-core VM, quiet: MobileNet-v2
 * int8 at 2 threads, median 4.0 ms against 2.4 with the threads pinned apart). "The CPUs it
 * may use": the process's at the pool's start, minus the caller's CPU, re-derived whenever
 * the caller moves; where somebody else set the worker's affinity, that set instead. Not
 * when the job has more threads than CPUs: those share CPUs anyway. */
static _Thread_local cpu_set_t pinned_to;   /* the set this worker last gave itself */
static _Thread_local int pinned;
static _Thread_local int pinned_gen;
static cpu_set_t start_cpus;
static int start_cpus_ok;

static int move_off_cpu(int cpu, int parts) {
#if defined(__linux__)
    if (parts > cpus_usable()) return 1;
    cpu_set_t set;
    if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return 0;
    if (pinned && pinned_gen == atomic_load(&pin_gen) && CPU_EQUAL(&set, &pinned_to) && start_cpus_ok)
        set = start_cpus;
    if (!CPU_ISSET(cpu, &set)) return 0;
    CPU_CLR(cpu, &set);
    if (CPU_COUNT(&set) == 0 || pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) return 0;
    pinned_to = set;
    pinned = 1;
    pinned_gen = atomic_load(&pin_gen);
    return 1;
#else
    (void)cpu; (void)parts;
    return 1;
#endif
}

/* takes and runs chunks of job `id` until none is left: first those of its own share (slot
 * `me`), then those still untaken in the other participants' shares; signals the caller after
 * the last; returns how many it ran */
static int take_chunks(uint32_t id, ei_range_fn fn, void *ctx, int64_t n, int chunks, int parts, int me) {
    int ran = 0;
    for (int k = 0; k < parts; k++) {
        int s = (me + k) % parts;
        int end = (int)((int64_t)chunks * (s + 1) / parts);
        for (;;) {
            uint64_t v = atomic_load_explicit(&next_chunk[s].v, memory_order_acquire);
            if ((uint32_t)(v >> 32) != id || (int)(v & 0xffffffffu) >= end) break;
            /* a worker that the scheduler put on the caller's CPU would only time-slice with
             * the caller, both at half speed: it moves off that CPU where its affinity allows
             * another, else it leaves the chunks to the caller, which takes every chunk nobody
             * took */
            int cpu = me > 0 ? cpu_now() : -1;
            if (cpu >= 0 && cpu == atomic_load_explicit(&caller_cpu, memory_order_relaxed) &&
                !move_off_cpu(cpu, parts)) {
                atomic_store_explicit(&contention_seen, 1, memory_order_relaxed);
                atomic_store_explicit(&declined, 1, memory_order_relaxed);
                return ran;
            }
            if (!atomic_compare_exchange_weak_explicit(&next_chunk[s].v, &v, v + 1, memory_order_acq_rel,
                                                       memory_order_relaxed))
                continue;
            int i = (int)(v & 0xffffffffu);
            int64_t b = n * i / chunks, e = n * (i + 1) / chunks;
            int worker = my_slot > 0 && my_slot < EI_MAX_THREADS;
            if (worker) atomic_store_explicit(&slot_cpu[my_slot], cpu_now(), memory_order_relaxed);
            if (e > b) fn(ctx, b, e);
            if (worker) atomic_store_explicit(&slot_cpu[my_slot], -1, memory_order_relaxed);
            ran++;
            int left = atomic_fetch_sub(&pending, 1) - 1;
            atomic_thread_fence(memory_order_seq_cst);
            if (left == 0 && atomic_load(&caller_waiting)) {
                pthread_mutex_lock(&mu);
                pthread_cond_signal(&cv_done);
                pthread_mutex_unlock(&mu);
            }
        }
    }
    return ran;
}

/* waits until job_seq is even and differs from `seen`: spinning first, then asleep; a nudge
 * (pool_nudge) wakes it to spin again */
static uint64_t wait_for_job(uint64_t seen) {
    uint64_t s;
    for (;;) {
        spin_state st = { -1, 0 };
        unsigned park = atomic_load_explicit(&park_seq, memory_order_relaxed);
        for (int i = 0;; i++) {
            s = atomic_load_explicit(&job_seq, memory_order_acquire);
            if (s != seen && !(s & 1)) return s;
            if ((i & 63) == 0 && (atomic_load_explicit(&park_seq, memory_order_relaxed) != park ||
                                  spin_stop(&st, spin_budget_ns(),
                                            atomic_load_explicit(&caller_cpu, memory_order_relaxed), 0)))
                break;
            spin_pause(i);
        }
        pthread_mutex_lock(&mu);
        unsigned nudge = atomic_load(&nudge_seq);
        atomic_fetch_add(&sleepers, 1);
        atomic_thread_fence(memory_order_seq_cst);
        int woke = 0;
        for (;;) {
            s = atomic_load(&job_seq);
            if (s != seen && !(s & 1)) { woke = 1; break; }
            if (atomic_load(&nudge_seq) != nudge) break;
            pthread_cond_wait(&cv_work, &mu);
        }
        atomic_fetch_sub(&sleepers, 1);
        pthread_mutex_unlock(&mu);
        if (woke) return s;
    }
}

static void *worker_main(void *arg) {
    int id = (int)(intptr_t)arg;   /* 1..n_workers; slot 0 is the caller's */
    uint64_t seen = 0;
    my_slot = id;
    for (;;) {
        uint64_t s = wait_for_job(seen);
        ei_range_fn fn = atomic_load_explicit(&job_fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&job_ctx, memory_order_relaxed);
        int64_t n = atomic_load_explicit(&job_n, memory_order_relaxed);
        int chunks = atomic_load_explicit(&job_chunks, memory_order_relaxed);
        int parts = atomic_load_explicit(&job_parts, memory_order_relaxed);
        uint32_t jid = atomic_load_explicit(&job_id, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&job_seq, memory_order_relaxed) != s) continue;   /* torn: retry */
        seen = s;
        if (id >= parts) continue;
        take_chunks(jid, fn, ctx, n, chunks, parts, id);
    }
    return NULL;
}

static int ensure_workers(int want) {       /* called with mu held */
#if defined(__linux__)
    if (!start_cpus_ok) start_cpus_ok = sched_getaffinity(0, sizeof start_cpus, &start_cpus) == 0;
#endif
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

/* the caller waits for the chunks workers still run: spinning (JOIN_SPIN x the spin budget),
 * then asleep; returns whether it slept */
static int join_workers(int parts) {
    spin_state st = { -1, 0 };
    for (int i = 0; atomic_load_explicit(&pending, memory_order_acquire) > 0; i++) {
        if ((i & 63) == 0 && spin_stop(&st, JOIN_SPIN * spin_budget_ns(), -2, parts)) {
            pthread_mutex_lock(&mu);
            atomic_store(&caller_waiting, 1);
            atomic_thread_fence(memory_order_seq_cst);
            while (atomic_load(&pending) > 0) pthread_cond_wait(&cv_done, &mu);
            atomic_store(&caller_waiting, 0);
            pthread_mutex_unlock(&mu);
            return 1;
        }
        spin_pause(i);
    }
    return 0;
}

/* one job's costs into the shrinking verdict (see the pool's comment) */
static void judge_job(int64_t work_ns, int64_t wait_ns, int mine, int chunks) {
    if (mine == 0) return;          /* the workers took every chunk: nothing to scale by */
    /* the workers' share of the work, from the caller's own time per chunk */
    win_work_ns += work_ns * (chunks - mine) / mine;
    win_wait_ns += wait_ns;
    if (++win_jobs < SHRINK_WINDOW) return;
    if (win_wait_ns > win_work_ns) {
        serial_left = SHRINK_JOBS;
        stat_add(EI_POOL_SHRINKS, 1);
    }
    win_jobs = win_work_ns = win_wait_ns = 0;
}

static void run_serial(ei_range_fn fn, void *ctx, int64_t n) {
    int old = my_slot;
    my_slot = 0;
    fn(ctx, 0, n);
    my_slot = old;
}

void ei_parallel_for(int64_t n, int64_t grain, ei_range_fn fn, void *ctx, int threads) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t max_chunks = (n + grain - 1) / grain;
    int parts = threads < 1 ? 1 : threads;
    if (parts > EI_MAX_THREADS) parts = EI_MAX_THREADS;
    if (parts > max_chunks) parts = (int)max_chunks;
    if (parts <= 1 || pthread_mutex_trylock(&pool_owner) != 0) {
        run_serial(fn, ctx, n);
        return;
    }
    if (serial_left > 0) {          /* shrunk: the caller alone for now */
        serial_left--;
        stat_add(EI_POOL_SERIAL_JOBS, 1);
        run_serial(fn, ctx, n);
        if (!in_steps) pool_park();
        pthread_mutex_unlock(&pool_owner);
        return;
    }
    if (n_workers < parts - 1) {
        pthread_mutex_lock(&mu);
        ensure_workers(parts - 1);
        pthread_mutex_unlock(&mu);
    }
    if (parts > n_workers + 1) parts = n_workers + 1;
    int64_t chunks64 = EI_MIN(max_chunks, (int64_t)parts * EI_CHUNKS_PER_THREAD);
    int chunks = (int)chunks64;
    atomic_store_explicit(&spin_yields, parts > cpus_usable(), memory_order_relaxed);
    atomic_store_explicit(&caller_cpu, cpu_now(), memory_order_relaxed);
    steps_went_parallel = 1;
    uint32_t id = atomic_load_explicit(&job_id, memory_order_relaxed) + 1;
    /* publish: odd while writing, even when done */
    uint64_t s = atomic_load_explicit(&job_seq, memory_order_relaxed);
    atomic_store_explicit(&job_seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&job_fn, fn, memory_order_relaxed);
    atomic_store_explicit(&job_ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&job_n, n, memory_order_relaxed);
    atomic_store_explicit(&job_chunks, chunks, memory_order_relaxed);
    atomic_store_explicit(&job_parts, parts, memory_order_relaxed);
    atomic_store_explicit(&job_id, id, memory_order_relaxed);
    atomic_store(&pending, chunks);
    for (int k = 0; k < parts; k++)
        atomic_store(&next_chunk[k].v, (uint64_t)id << 32 | (uint64_t)((int64_t)chunks * k / parts));
    atomic_store(&job_seq, s + 2);
    /* store -> load (Dekker with a worker going to sleep): a full fence, not just the seq_cst
     * accesses, which qemu-user on x86 hosts does not order (measured: hangs under qemu) */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&sleepers) > 0) {
        pthread_mutex_lock(&mu);
        pthread_cond_broadcast(&cv_work);
        pthread_mutex_unlock(&mu);
    }
    int old_slot = my_slot;
    my_slot = 0;
    int64_t t0 = now_ns();
    int mine = take_chunks(id, fn, ctx, n, chunks, parts, 0);
    int64_t t1 = now_ns(), wait = 0;
    my_slot = old_slot;
    /* what is left was taken by workers that are running it: wait for them */
    if (atomic_load_explicit(&pending, memory_order_acquire) > 0) {
        stat_add(EI_POOL_SLEEPS, join_workers(parts));
        wait = now_ns() - t1;
        stat_add(EI_POOL_WAITS, 1);
        stat_add(EI_POOL_WAIT_NS, wait);
    }
    stat_add(EI_POOL_JOBS, 1);
    stat_add(EI_POOL_CHUNKS, chunks);
    stat_add(EI_POOL_CALLER_CHUNKS, mine);
    stat_add(EI_POOL_WORK_NS, t1 - t0);
    /* a worker that declined (it shares the caller's CPU) cost the caller wake-ups and time
     * slices and did nothing: counted as a wait of the job's length, so a window of such jobs
     * runs the next ones in the caller alone (nothing to wake) */
    if (atomic_exchange_explicit(&declined, 0, memory_order_relaxed)) wait += t1 - t0;
    judge_job(t1 - t0, wait, mine, chunks);
    if (atomic_exchange_explicit(&contention_seen, 0, memory_order_relaxed)) {
        stat_add(EI_POOL_CALMS, 1);
        calm_left = CALM_JOBS;
    } else if (calm_left > 0) calm_left--;
    atomic_store_explicit(&calm, calm_left > 0, memory_order_relaxed);
    if (!in_steps) pool_park();
    pthread_mutex_unlock(&pool_owner);
}

/* ---- self-test: every index visited exactly once, whatever the chunking, spinning or
 * sleeping, and with callers racing for the pool ---- */
typedef struct { atomic_int *hits; } st_pool_ctx;

static void st_pool_range(void *vctx, int64_t b, int64_t e) {
    st_pool_ctx *c = (st_pool_ctx *)vctx;
    for (int64_t i = b; i < e; i++) atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
}

static int st_pool_rounds(uint32_t seed, int rounds) {
    enum { N = 3000 };
    static _Thread_local atomic_int hits[N];
    int fails = 0;
    for (int r = 0; r < rounds; r++) {
        seed = seed * 1103515245u + 12345u;
        int64_t n = 1 + (seed >> 8) % N;
        int threads = 1 + (int)((seed >> 4) % 4);
        for (int64_t i = 0; i < n; i++) atomic_store_explicit(&hits[i], 0, memory_order_relaxed);
        st_pool_ctx c = { hits };
        ei_parallel_for(n, 1 + (seed >> 20) % 64, st_pool_range, &c, threads);
        for (int64_t i = 0; i < n; i++) fails += atomic_load(&hits[i]) != 1;
    }
    return fails;
}

static void *st_pool_thread(void *arg) {
    return (void *)(intptr_t)st_pool_rounds((uint32_t)(intptr_t)arg, 100);
}

EI_API int ei_selftest_pool(void) {
    int old = ei_set_spin_us(200), fails = st_pool_rounds(1, 200);
    ei_set_spin_us(0);                       /* every wait goes to sleep: the condvar paths */
    fails += st_pool_rounds(2, 100);
    ei_set_spin_us(5);                       /* both, mixed */
    fails += st_pool_rounds(3, 100);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, st_pool_thread, (void *)(intptr_t)(10 + i));
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        fails += (int)(intptr_t)r;
    }
    ei_set_spin_us(old);
    return fails;
}
