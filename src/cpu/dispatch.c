/* CPU dispatch: which variant runs (chosen once at first use, overridable), and how the tokens
 * of a call are split over threads (ropekit's own small pool, or a host's parallel-for).
 *
 * Work is split by token (B*S rows for the rotary ops and QKNorm, N rows for the regroup): each
 * token's outputs are computed the same way whatever the split, so results never depend on the
 * thread count. A range of tokens becomes sub-plans (one per batch row), so every variant's
 * kernel — the reference included — only ever sees a whole plan. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/internal.h"

#if defined(__x86_64__) || defined(_M_X64)
#define RK_X86 1
#include <cpuid.h>
#else
#define RK_X86 0
#endif

/* ---- variants ------------------------------------------------------------------------------ */

const rk_cpu_kernels rk_kernels_ref = {"ref", rk_ref_rotary, rk_ref_qknorm, rk_ref_regroup};

#if RK_X86
static uint64_t xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
/* AVX2 + FMA + F16C, and the OS saving YMM state. */
static int probe_avx2(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned need1 =
        (1u << 12) | (1u << 27) | (1u << 28) | (1u << 29); /* FMA OSXSAVE AVX F16C */
    if ((c & need1) != need1) return 0;
    if ((xgetbv0() & 6u) != 6u) return 0;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b & (1u << 5)) != 0; /* AVX2 */
}
/* AVX-512 F, BW, VL (and AVX2 for the shared parts), and the OS saving ZMM/opmask state. */
static int probe_avx512(void) {
    if ((xgetbv0() & 0xe6u) != 0xe6u) return 0;
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned need = (1u << 16) | (1u << 30) | (1u << 31); /* F BW VL */
    return (b & need) == need;
}
/* The CPU's features are read once per process (cpuid traps to the hypervisor in a VM: a few
 * microseconds each time), not on every ropekit_set_cpu_variant call. */
static int g_has_avx2, g_has_avx512;
static atomic_int g_feature_probes;
static pthread_once_t g_features_once = PTHREAD_ONCE_INIT;
static void probe_features(void) {
    atomic_fetch_add(&g_feature_probes, 1);
    g_has_avx2 = probe_avx2();
    g_has_avx512 = g_has_avx2 && probe_avx512();
}
static int cpu_has_avx2(void) {
    pthread_once(&g_features_once, probe_features);
    return g_has_avx2;
}
static int cpu_has_avx512(void) {
    pthread_once(&g_features_once, probe_features);
    return g_has_avx512;
}
#endif

/* Test hook (tests/test_variants.c): how many times the CPU's features were probed. */
int rk_cpu_feature_probes(void);
int rk_cpu_feature_probes(void) {
#if RK_X86
    return atomic_load(&g_feature_probes);
#else
    return 0;
#endif
}

/* In order of preference, best first. */
static const rk_cpu_kernels *variant_by_name(const char *name) {
#if RK_X86
    if (strcmp(name, "avx512") == 0) return &rk_kernels_avx512;
    if (strcmp(name, "avx2") == 0) return &rk_kernels_avx2;
#endif
#if defined(__aarch64__)
    if (strcmp(name, "neon") == 0) return &rk_kernels_neon;
#endif
    if (strcmp(name, "ref") == 0) return &rk_kernels_ref;
    return NULL;
}

static int variant_available(const rk_cpu_kernels *k) {
#if RK_X86
    if (k == &rk_kernels_avx512) return cpu_has_avx512();
    if (k == &rk_kernels_avx2) return cpu_has_avx2();
#endif
#if defined(__aarch64__)
    if (k == &rk_kernels_neon) return 1; /* ASIMD is part of AArch64 */
#endif
    return k == &rk_kernels_ref;
}

static const rk_cpu_kernels *best_variant(void) {
#if RK_X86
    if (cpu_has_avx512()) return &rk_kernels_avx512;
    if (cpu_has_avx2()) return &rk_kernels_avx2;
#endif
#if defined(__aarch64__)
    return &rk_kernels_neon;
#endif
    return &rk_kernels_ref;
}

static _Atomic(const rk_cpu_kernels *) g_variant;
static pthread_once_t g_variant_once = PTHREAD_ONCE_INIT;

static void init_variant(void) {
    const rk_cpu_kernels *k = NULL;
    const char *env = getenv("ROPEKIT_CPU_VARIANT");
    if (env && *env) k = variant_by_name(env);
    if (!k || !variant_available(k)) k = best_variant(); /* unknown or unavailable: the best */
    atomic_store(&g_variant, k);
}

static const rk_cpu_kernels *variant(void) {
    pthread_once(&g_variant_once, init_variant);
    return atomic_load_explicit(&g_variant, memory_order_relaxed);
}

const char *ropekit_cpu_variant(void) {
    return variant()->name;
}

ropekit_status ropekit_set_cpu_variant(const char *name) {
    rk_clear_error();
    (void)variant();
    if (name == NULL) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "name is NULL");
    const rk_cpu_kernels *k = strcmp(name, "auto") == 0 ? best_variant() : variant_by_name(name);
    if (!k &&
        (strcmp(name, "avx2") == 0 || strcmp(name, "avx512") == 0 || strcmp(name, "neon") == 0))
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED,
                       "CPU variant \"%s\" is not built for this CPU "
                       "architecture",
                       name);
    if (!k)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE,
                       "unknown CPU variant \"%s\" (known: "
                       "auto, ref, avx2, avx512, neon)",
                       name);
    if (!variant_available(k))
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED,
                       "CPU variant \"%s\" is not supported by this "
                       "CPU",
                       name);
    atomic_store(&g_variant, k);
    return ROPEKIT_OK;
}

/* ---- threads ------------------------------------------------------------------------------- */

typedef void (*rk_range_fn)(void *ctx, int64_t begin, int64_t end);

#define RK_MAX_THREADS 256
/* The cost model: a call is split only when its one-thread time is well above what a split
 * costs. One thread moves 8-35 GB/s here (16-bit rows and QKNorm are compute bound, about as
 * slow per byte as float32 rows), so the bytes a call moves stand for its time. A split costs
 * the caller a wake-up of a sleeping worker (none when the worker still polls after a previous
 * call), the claims, and the wait for chunks already claimed. On the Xeon EMR guest (2026-12-02
 * R1/R2, 2 threads pinned to 2 cores, avx2 and avx512, 133 KB - 2.7 MB, one process alternating
 * 1 and 2 threads): back to back, calls from 532 KB gained 1.18-1.43x; but each after a 200 us
 * pause (the worker asleep), 532-800 KB calls ran 0.85-1.27x (fastest call / median: slower in
 * several rows), from 1.06 MB 1.07-1.51x. Below 1 MiB the calling thread runs the call alone
 * (a decode step pays no wake-up). */
#ifndef RK_PARALLEL_MIN_BYTES
#define RK_PARALLEL_MIN_BYTES (1024 * 1024)
#endif

static atomic_int g_num_threads = 1;
static _Atomic int64_t g_min_bytes = RK_PARALLEL_MIN_BYTES;

void rk_cpu_set_parallel_threshold(int64_t bytes) {
    atomic_store(&g_min_bytes, bytes < 0 ? RK_PARALLEL_MIN_BYTES : bytes);
}

/* Calls that write at least this many bytes in all (whatever the thread count: the last-level
 * cache is shared) bypass the caches with streaming stores, as memcpy does for large copies:
 * their lines would not stay in the caches anyway, and need not be read before they are
 * written. Below it, normal stores. 8 MiB: on the Xeon EMR guest (300 MiB L3) a call writing
 * 21 MB (Phi-2 16-bit, 42 MB moved in all) ran 1.29-1.33x faster streamed (R1 of session 7,
 * one thread, one-process A/B, medians, avx512 and avx2, buffers out of the caches; 1.30x with
 * its buffers reused); the 24 MiB of session 6 came from timings on reused buffers before
 * f77bd57 that found it 4-14% slower. */
#ifndef RK_STREAM_MIN_BYTES /* -D for diagnostic builds */
#define RK_STREAM_MIN_BYTES ((int64_t)8 << 20)
#endif
static _Atomic int64_t g_stream_bytes = RK_STREAM_MIN_BYTES;

void rk_cpu_set_stream_threshold(int64_t bytes) {
    atomic_store(&g_stream_bytes, bytes < 0 ? RK_STREAM_MIN_BYTES : bytes);
}
int64_t rk_cpu_stream_threshold(void) {
    return atomic_load_explicit(&g_stream_bytes, memory_order_relaxed);
}
static _Atomic(ropekit_parallel_for_fn) g_host_for;
static void *_Atomic g_host_ctx;

ropekit_status ropekit_set_num_threads(int n) {
    rk_clear_error();
    if (n < 1 || n > RK_MAX_THREADS)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "thread count %d is outside [1, %d]", n,
                       RK_MAX_THREADS);
    atomic_store(&g_num_threads, n);
    return ROPEKIT_OK;
}

int ropekit_get_num_threads(void) {
    return atomic_load(&g_num_threads);
}

ropekit_status ropekit_set_parallel_for(ropekit_parallel_for_fn fn, void *host_ctx) {
    rk_clear_error();
    atomic_store(&g_host_ctx, host_ctx);
    atomic_store(&g_host_for, fn);
    return ROPEKIT_OK;
}

/* The pool: workers 1..spawned-1 wait for a new job (a sequence number, odd while the caller
 * writes the job). A call cuts its units into chunks and publishes them; the caller and every
 * worker that sees the job in time claim chunks one at a time (an atomic counter tagged with the
 * call's generation) until none is left, then the caller waits only for chunks already claimed.
 * A worker that sees the job late (another process holds its core) finds nothing to claim and
 * the caller has done the work alone: a split call costs at most one wake-up more than a
 * one-thread call, never a wait for a sleeping thread.
 * Waiting is a short spin, then sleep: a worker that has just run a chunk polls for the next job
 * for RK_POOL_SPIN_NS before it sleeps on a condition variable (back-to-back calls, such as the q
 * and k rotations of a layer, find it awake: no futex wake-up, no guest IPI), and the caller polls
 * for the claimed chunks to finish (they are short: a few per thread per call) before it sleeps.
 * A caller signals the condition variable only when a worker sleeps on it. One parallel call at
 * a time (g_busy); a concurrent call runs on its own thread, with the same results (every unit is
 * computed the same way whatever the split). */
#ifndef RK_POOL_SPIN_NS
#define RK_POOL_SPIN_NS 20000 /* a worker's poll for the next job after one: 20 us */
#endif
#ifndef RK_DONE_SPIN_NS
#define RK_DONE_SPIN_NS 200000 /* the caller's poll for claimed chunks before it sleeps */
#endif
static pthread_mutex_t g_busy = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_work_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_done_cv = PTHREAD_COND_INITIALIZER;
static int g_spawned = 1;         /* threads in the pool, the caller counted */
static _Atomic uint64_t g_seq;    /* 2 * generation; odd while the job is being written */
static atomic_int g_sleepers;     /* workers asleep (or about to sleep) on g_work_cv */
static atomic_int g_caller_waits; /* the caller sleeps on g_done_cv */
static struct {
    _Atomic(rk_range_fn) fn;
    void *_Atomic ctx;
    _Atomic int64_t n, chunks, part_bytes;
    atomic_int parts;
} g_job;
static _Atomic uint64_t g_claim; /* (generation & 0xffffffff) << 32 | next chunk */
static atomic_int g_inflight;    /* threads inside claim_chunks */

static inline void cpu_relax(void) {
#if RK_X86
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}
static int64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Output bytes of the whole call being run by this thread (0: none), for the kernels'
 * streaming-store choice: a chunk of a large call is written like the large call it is part of. */
static _Thread_local int64_t tl_part_bytes;
int64_t rk_cpu_part_bytes(void);
int64_t rk_cpu_part_bytes(void) {
    return tl_part_bytes;
}

/* Runs chunks of job `gen` until none is left. */
static void claim_chunks(uint32_t gen, rk_range_fn fn, void *ctx, int64_t n, int64_t chunks,
                         int64_t part_bytes) {
    atomic_fetch_add(&g_inflight, 1);
    tl_part_bytes = part_bytes;
    for (;;) {
        uint64_t c = atomic_load(&g_claim);
        if ((uint32_t)(c >> 32) != gen || (int64_t)(c & 0xffffffffu) >= chunks) break;
        if (!atomic_compare_exchange_weak(&g_claim, &c, c + 1)) continue;
        const int64_t i = (int64_t)(c & 0xffffffffu), b = n * i / chunks, e = n * (i + 1) / chunks;
        if (b < e) fn(ctx, b, e);
    }
    tl_part_bytes = 0;
    if (atomic_fetch_sub(&g_inflight, 1) == 1 && atomic_load(&g_caller_waits)) {
        pthread_mutex_lock(&g_mu);
        pthread_cond_broadcast(&g_done_cv);
        pthread_mutex_unlock(&g_mu);
    }
}

/* The next sequence number after `seen` that is even (a job published), polling up to spin_ns,
 * then sleeping. */
static uint64_t wait_job(uint64_t seen, int64_t spin_ns) {
    if (spin_ns > 0) {
        const int64_t t0 = mono_ns();
        for (int k = 1;; ++k) {
            uint64_t q = atomic_load_explicit(&g_seq, memory_order_acquire);
            if (q != seen && !(q & 1)) return q;
            cpu_relax();
            if (k % 64 == 0 && mono_ns() - t0 > spin_ns) break;
        }
    }
    pthread_mutex_lock(&g_mu);
    atomic_fetch_add(&g_sleepers, 1);
    uint64_t q;
    while ((q = atomic_load(&g_seq)) == seen || (q & 1))
        pthread_cond_wait(&g_work_cv, &g_mu);
    atomic_fetch_sub(&g_sleepers, 1);
    pthread_mutex_unlock(&g_mu);
    return q;
}

static void *worker_main(void *arg) {
    const int id = (int)(intptr_t)arg;
    /* Starting from 0, a new worker also sees the job published before it existed (and skips
     * it when it had fewer parts than its id, or finds its chunks taken). */
    uint64_t seen = 0;
    int64_t spin = 0; /* no poll before the first job */
    for (;;) {
        uint64_t q = wait_job(seen, spin);
        /* the job's fields, consistent with q (seqlock: re-read when a new job was written) */
        rk_range_fn fn = atomic_load(&g_job.fn);
        void *ctx = atomic_load(&g_job.ctx);
        const int64_t n = atomic_load(&g_job.n), chunks = atomic_load(&g_job.chunks);
        const int64_t pb = atomic_load(&g_job.part_bytes);
        const int parts = atomic_load(&g_job.parts);
        if (atomic_load(&g_seq) != q) { /* a newer job is there or being written: that one */
            seen = q;
            spin = RK_POOL_SPIN_NS;
            continue;
        }
        seen = q;
        spin = 0;
        if (id >= parts) continue;
        claim_chunks((uint32_t)(q >> 1), fn, ctx, n, chunks, pb);
        spin = RK_POOL_SPIN_NS;
    }
    return NULL;
}
/* Grows the pool to `want` threads (caller included) as far as the system allows. */
static int pool_reserve(int want) {
    while (g_spawned < want) {
        pthread_t t;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0) break;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)g_spawned);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        ++g_spawned;
    }
    return g_spawned < want ? g_spawned : want;
}

#define RK_CHUNKS_PER_THREAD 4 /* chunks per thread: balance when a core is busy elsewhere */

/* units: tokens; bytes: all bytes the call moves (the cost model); out_bytes: bytes it writes. */
static void parallel_run(int64_t units, int64_t bytes, int64_t out_bytes, rk_range_fn fn,
                         void *ctx) {
    if (units <= 0) return;
    tl_part_bytes = out_bytes;
    if (units == 1 || bytes < atomic_load(&g_min_bytes)) {
        fn(ctx, 0, units);
        tl_part_bytes = 0;
        return;
    }
    ropekit_parallel_for_fn host = atomic_load(&g_host_for);
    if (host) {
        tl_part_bytes = 0;
        host(atomic_load(&g_host_ctx), units, fn, ctx);
        return;
    }
    int parts = atomic_load(&g_num_threads);
    if (parts > units) parts = (int)units;
    if (parts <= 1 || pthread_mutex_trylock(&g_busy) != 0) {
        fn(ctx, 0, units);
        tl_part_bytes = 0;
        return;
    }
    parts = pool_reserve(parts);
    int64_t chunks = (int64_t)parts * RK_CHUNKS_PER_THREAD;
    if (chunks > units) chunks = units;
    const int64_t pb = out_bytes; /* the whole call's output: see RK_STREAM_MIN_BYTES */
    /* publish: sequence odd, the job, the claim counter of its generation, sequence even */
    const uint64_t s0 = atomic_load(&g_seq),
                   q = s0 + 2; /* even: only a caller holding g_busy writes it */
    atomic_store(&g_seq, s0 + 1);
    atomic_store(&g_job.fn, fn), atomic_store(&g_job.ctx, ctx), atomic_store(&g_job.n, units);
    atomic_store(&g_job.chunks, chunks), atomic_store(&g_job.part_bytes, pb);
    atomic_store(&g_job.parts, parts);
    const uint32_t gen = (uint32_t)(q >> 1);
    atomic_store(&g_claim, (uint64_t)gen << 32);
    atomic_store(&g_seq, q);
    if (atomic_load(&g_sleepers) > 0) {
        pthread_mutex_lock(&g_mu);
        pthread_cond_broadcast(&g_work_cv);
        pthread_mutex_unlock(&g_mu);
    }
    claim_chunks(gen, fn, ctx, units, chunks, pb);
    if (atomic_load(&g_inflight) > 0) { /* chunks claimed by workers: poll, then sleep */
        const int64_t t0 = mono_ns();
        for (int k = 1; atomic_load(&g_inflight) > 0; ++k) {
            cpu_relax();
            if (k % 64 == 0 && mono_ns() - t0 > RK_DONE_SPIN_NS) break;
        }
        if (atomic_load(&g_inflight) > 0) {
            pthread_mutex_lock(&g_mu);
            atomic_store(&g_caller_waits, 1);
            while (atomic_load(&g_inflight) > 0)
                pthread_cond_wait(&g_done_cv, &g_mu);
            atomic_store(&g_caller_waits, 0);
            pthread_mutex_unlock(&g_mu);
        }
    }
    pthread_mutex_unlock(&g_busy);
}

/* ---- token ranges -> sub-plans ------------------------------------------------------------- */

typedef struct rotary_task {
    const rk_rotary_plan *p;
    void (*kernel)(const rk_rotary_plan *);
} rotary_task;

static void rotary_range(void *ctx, int64_t t0, int64_t t1) {
    const rotary_task *t = (const rotary_task *)ctx;
    const rk_rotary_plan *p = t->p;
    if (t0 == 0 && t1 == p->B * p->S) { /* the whole plan (every call not split): no sub-plans */
        t->kernel(p);
        return;
    }
    const int64_t es = (int64_t)rk_dtype_size(p->dtype);
    const int64_t tes = (int64_t)rk_dtype_size(p->table_dtype);
    while (t0 < t1) {
        int64_t b = t0 / p->S, s0 = t0 % p->S;
        int64_t s1 = p->S - s0 < t1 - t0 ? p->S : s0 + (t1 - t0);
        rk_rotary_plan q = *p;
        q.B = 1, q.S = s1 - s0;
        q.x = p->x + (b * p->xs[0] + s0 * p->xs[1]) * es;
        q.y = p->y + (b * p->ys[0] + s0 * p->ys[1]) * es;
        switch (p->rows) {
        case RK_ROWS_TABLE_3D:
            q.cos = p->cos + (b * p->cos_bs + s0 * p->cos_ss) * tes;
            q.sin = p->sin + (b * p->sin_bs + s0 * p->sin_ss) * tes;
            break;
        case RK_ROWS_OFFSET: q.offset = p->offset + s0; break;
        default: q.pos = p->pos + b * p->pos_bs + s0 * p->pos_ss; break;
        }
        t->kernel(&q);
        t0 += s1 - s0;
    }
}

void rk_cpu_rotary(const rk_rotary_plan *p) {
    if (p->B == 0 || p->S == 0 || p->N == 0) return;
    rotary_task t = {p, variant()->rotary};
    const int64_t row = p->N * p->H * (int64_t)rk_dtype_size(p->dtype);
    int64_t per_token = 2 * row + p->R * (int64_t)rk_dtype_size(p->table_dtype);
    parallel_run(p->B * p->S, p->B * p->S * per_token, p->B * p->S * row, rotary_range, &t);
}

typedef struct qknorm_task {
    const rk_qknorm_plan *p;
    void (*kernel)(const rk_qknorm_plan *);
} qknorm_task;

static void qknorm_range(void *ctx, int64_t t0, int64_t t1) {
    const qknorm_task *t = (const qknorm_task *)ctx;
    const rk_qknorm_plan *p = t->p;
    const int64_t es = (int64_t)rk_dtype_size(p->dtype);
    while (t0 < t1) {
        int64_t b = t0 / p->S, s0 = t0 % p->S;
        int64_t s1 = p->S - s0 < t1 - t0 ? p->S : s0 + (t1 - t0);
        rk_qknorm_plan q = *p;
        q.B = 1, q.S = s1 - s0;
        q.q = p->q + (b * p->qs[0] + s0 * p->qs[1]) * es;
        q.q_out = p->q_out + (b * p->qos[0] + s0 * p->qos[1]) * es;
        q.kv = p->kv + (b * p->kvs[0] + s0 * p->kvs[1]) * es;
        q.kv_out = p->kv_out + (b * p->kvos[0] + s0 * p->kvos[1]) * es;
        if (p->rope_dim > 0) {
            q.cos = p->cos + b * p->cos_s[0] + s0 * p->cos_s[1];
            q.sin = p->sin + b * p->sin_s[0] + s0 * p->sin_s[1];
        }
        t->kernel(&q);
        t0 += s1 - s0;
    }
}

void rk_cpu_qknorm(const rk_qknorm_plan *p) {
    if (p->B == 0 || p->S == 0) return;
    qknorm_task t = {p, variant()->qknorm};
    const int64_t qrow = p->num_heads * p->head_dim * (int64_t)rk_dtype_size(p->dtype);
    int64_t per_token = 2 * (p->num_heads + 1) * p->head_dim * (int64_t)rk_dtype_size(p->dtype);
    parallel_run(p->B * p->S, p->B * p->S * per_token, p->B * p->S * qrow, qknorm_range, &t);
}

typedef struct regroup_task {
    const rk_regroup_plan *p;
    void (*kernel)(const rk_regroup_plan *);
} regroup_task;

static void regroup_range(void *ctx, int64_t n0, int64_t n1) {
    const regroup_task *t = (const regroup_task *)ctx;
    const rk_regroup_plan *p = t->p;
    const int64_t es = (int64_t)rk_dtype_size(p->dtype);
    rk_regroup_plan q = *p;
    q.N = n1 - n0;
    q.x = p->x + n0 * p->xs[0] * es;
    q.out = p->out + n0 * p->os[1] * es;
    if (p->rope_dim > 0) {
        q.cos = p->cos + n0 * p->cos_s[0];
        q.sin = p->sin + n0 * p->sin_s[0];
    }
    t->kernel(&q);
}

void rk_cpu_regroup(const rk_regroup_plan *p) {
    if (p->N == 0) return;
    regroup_task t = {p, variant()->regroup};
    int64_t per_token = 2 * p->num_heads * p->head_dim * (int64_t)rk_dtype_size(p->dtype);
    parallel_run(p->N, p->N * per_token, p->N * per_token / 2, regroup_range, &t);
}
