/* ropekit_bench: CPU speed of every operator on model shapes, as effective bandwidth and as a
 * fraction of a memcpy of the same bytes measured in the same run with the same thread count.
 *
 *   ropekit_bench [--json] [--threads 1,2] [--filter NAME] [--dtypes f32,f16,bf16] [--time S]
 *                 [--sweep]   (--sweep: the Llama head layout, 40 x 128, over S = 1 .. 8192)
 *                 [--offset B] [--yoffset B]  (x / y start B bytes past a 64-byte boundary, as
 *                 numpy's default arrays start 16 bytes into a page; default 0; --yoffset defaults
 *                 to --offset)
 *
 * Bytes moved per call: read x + write y + the cos/sin values once per token (QKNorm: query,
 * kv, their outputs, cos/sin; the regroup: input, output, cos/sin). The copy moves the same
 * bytes (half of them read, half written): the faster of glibc's memcpy and a streaming-store
 * copy, both timed. Large rows are timed cold (bench_mem.h: every call and every copy takes the
 * next of K copies of its large buffers, >= 768 MiB in all, so none starts with its operands in
 * the caches); ROPEKIT_BENCH_HOT=1 reuses one set (the method before session 7). Times are
 * medians of batches after a warm-up; decode shapes fit in cache and are reported per call, in
 * cache. The variant is the library's (ROPEKIT_CPU_VARIANT=ref|avx2|avx512 to force one). */
#define _GNU_SOURCE /* madvise, MADV_HUGEPAGE */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_dl.h" /* the api struct, bench_mem.h, bench_time.h */
#include "bench_rows.h"
#include "ropekit.h"

/* ---- memcpy over T threads (helpers sleep on a condition variable between copies; copies
 * under 1 MiB stay on one thread, as ropekit's calls do) ------------------------------------ */

typedef struct copy_job {
    char *dst;
    const char *src;
    size_t n;
    int nt; /* streaming stores (bm_nt_copy) instead of memcpy */
} copy_job;
static copy_job g_copy;
static pthread_mutex_t g_copy_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_copy_cv = PTHREAD_COND_INITIALIZER,
                      g_copy_done_cv = PTHREAD_COND_INITIALIZER;
static int g_copy_gen, g_copy_left, g_copy_quit, g_copy_gen_start;
static int g_copy_threads = 1;
static pthread_t g_copy_tid[16];

static void copy_part(int i, int parts) {
    size_t b = g_copy.n * (size_t)i / (size_t)parts, e = g_copy.n * (size_t)(i + 1) / (size_t)parts;
    b &= ~(size_t)63, e = i == parts - 1 ? g_copy.n : e & ~(size_t)63;
    if (g_copy.nt)
        bm_nt_copy(g_copy.dst + b, g_copy.src + b, e - b);
    else
        memcpy(g_copy.dst + b, g_copy.src + b, e - b);
}

static void *copy_worker(void *arg) {
    int id = (int)(intptr_t)arg;
    pthread_mutex_lock(&g_copy_mu);
    int seen = g_copy_gen_start; /* jobs posted before this thread started are not its own */
    for (;;) {
        while (g_copy_gen == seen && !g_copy_quit)
            pthread_cond_wait(&g_copy_cv, &g_copy_mu);
        if (g_copy_quit) break;
        seen = g_copy_gen;
        pthread_mutex_unlock(&g_copy_mu);
        copy_part(id, g_copy_threads);
        pthread_mutex_lock(&g_copy_mu);
        if (--g_copy_left == 0) pthread_cond_signal(&g_copy_done_cv);
    }
    pthread_mutex_unlock(&g_copy_mu);
    return NULL;
}

static void copy_threads_start(int t) {
    g_copy_threads = t;
    g_copy_quit = 0;
    g_copy_gen_start = g_copy_gen;
    for (int i = 1; i < t; ++i)
        pthread_create(&g_copy_tid[i], NULL, copy_worker, (void *)(intptr_t)i);
}
static void copy_threads_stop(void) {
    pthread_mutex_lock(&g_copy_mu);
    g_copy_quit = 1;
    pthread_cond_broadcast(&g_copy_cv);
    pthread_mutex_unlock(&g_copy_mu);
    for (int i = 1; i < g_copy_threads; ++i)
        pthread_join(g_copy_tid[i], NULL);
    g_copy_threads = 1;
}
static void par_copy(void *dst, const void *src, size_t n, int nt) {
    g_copy.dst = dst, g_copy.src = src, g_copy.n = n, g_copy.nt = nt;
    if (g_copy_threads == 1 || 2 * n < 1024 * 1024) {
        copy_part(0, 1);
        return;
    }
    pthread_mutex_lock(&g_copy_mu);
    g_copy_left = g_copy_threads - 1;
    ++g_copy_gen;
    pthread_cond_broadcast(&g_copy_cv);
    pthread_mutex_unlock(&g_copy_mu);
    copy_part(0, g_copy_threads);
    pthread_mutex_lock(&g_copy_mu);
    while (g_copy_left > 0)
        pthread_cond_wait(&g_copy_done_cv, &g_copy_mu);
    pthread_mutex_unlock(&g_copy_mu);
}

/* ---- timing ------------------------------------------------------------------------------- */

typedef void (*call_fn)(void *ctx);

static double g_budget = 0.4;  /* seconds per measurement */
static int64_t g_xoff, g_yoff; /* --offset / --yoffset: bytes past 64-byte alignment */

/* Calls per batch so that a batch takes about 1 ms. */
static int calibrate(call_fn f, void *ctx, double *one_out) {
    for (int i = 0; i < 3; ++i)
        f(ctx);
    double t0 = now_s();
    f(ctx);
    double one = now_s() - t0;
    if (one < 1e-9) one = 1e-9;
    *one_out = one;
    return one < 1e-3 ? (int)(1e-3 / one) + 1 : 1;
}

/* Median (med) and fastest (best) seconds per call of each of the n items, their batches
 * alternating (a round: one batch of each, so that a burst of load on the shared machine or a
 * change of the guest's memory speed hits all), after a warm-up. With 3 items (the call, memcpy,
 * the streaming copy) also the per-round ratios: the round's faster copy / the call's time, min
 * and median over the rounds (rmin, rmed), and the faster copy's time in its fastest and slowest
 * round (cfast, cslow: how much the copy itself moved). */
#define MAXITEM 3
#define MIN_ROUNDS 15
typedef struct rounds {
    int n;
    double rmin, rmed, cfast, cslow;
} rounds;
static void time_items(int n, call_fn *f, void **ctx, double *med, double *best, rounds *ro) {
    double one[MAXITEM], per_round = 0;
    int k[MAXITEM];
    for (int i = 0; i < n; ++i)
        k[i] = calibrate(f[i], ctx[i], &one[i]), per_round += one[i] * k[i];
    int batches = (int)(g_budget / per_round) + 1;
    if (batches < MIN_ROUNDS) batches = MIN_ROUNDS;
    if (batches > 2001) batches = 2001;
    double *v[MAXITEM], *rr = malloc(sizeof(double) * (size_t)batches),
                        *cr = malloc(sizeof(double) * (size_t)batches);
    for (int i = 0; i < n; ++i)
        v[i] = malloc(sizeof(double) * (size_t)batches);
    for (int b = 0; b < batches; ++b)
        for (int i = 0; i < n; ++i) {
            double t0 = now_s();
            for (int r = 0; r < k[i]; ++r)
                f[i](ctx[i]);
            v[i][b] = (now_s() - t0) / k[i];
        }
    ro->n = batches;
    if (n == 3) {
        for (int b = 0; b < batches; ++b)
            cr[b] = v[1][b] < v[2][b] ? v[1][b] : v[2][b], rr[b] = cr[b] / v[0][b];
        qsort(rr, (size_t)batches, sizeof(double), cmp_d);
        qsort(cr, (size_t)batches, sizeof(double), cmp_d);
        ro->rmin = rr[0], ro->rmed = rr[batches / 2], ro->cfast = cr[0], ro->cslow = cr[batches - 1];
    }
    for (int i = 0; i < n; ++i) {
        qsort(v[i], (size_t)batches, sizeof(double), cmp_d);
        med[i] = v[i][batches / 2], best[i] = v[i][0];
        free(v[i]);
    }
    free(rr), free(cr);
}

/* the copies: the next pair of the pool per call (one pair for small rows: in cache) */
typedef struct copy_ctx {
    bm_copies *pool;
    int nt;
} copy_ctx;
static void call_copy(void *ctx) {
    copy_ctx *c = (copy_ctx *)ctx;
    bm_copies *p = c->pool;
    par_copy(p->dst[p->next], p->src[p->next], p->n, c->nt);
    p->next = (p->next + 1) % p->k;
}

/* ---- shapes, data, buffers, the call: bench_rows.h (the rows of every CPU benchmark) ---------- */

/* bench_rows.h's calls through the entry points this program links */
static const api g_api = {ropekit_rotary_embedding,        ropekit_mrotary_embedding,
                          ropekit_qknorm_rotary_embedding, ropekit_inverse_rotary_regroup,
                          ropekit_set_cpu_variant,         ropekit_set_num_threads,
                          ropekit_last_error};
/* the call on the next of the row's K buffer sets */
typedef struct rot_ctx {
    const job *j;
    int k, next;
} rot_ctx;
static void call_rot(void *ctx) {
    rot_ctx *r = (rot_ctx *)ctx;
    call(&g_api, &r->j[r->next]);
    r->next = (r->next + 1) % r->k;
}
static job g_jobs[BM_MAXK];
static bm_set g_set[BM_MAXK];

typedef struct result {
    const char *shape, *dtype;
    int threads;
    double sec, bytes, copy_sec;    /* copy: the faster of memcpy and the streaming copy */
    double best_sec, best_copy_sec; /* fastest batch: less sensitive to a busy machine */
    double memcpy_sec, nt_sec;
    rounds ro; /* per-round ratios and the copy's spread */
    int sets; /* buffer sets the calls rotate over (1: in cache) */
} result;

static const char *dname(ropekit_dtype t) {
    return t == ROPEKIT_FLOAT32 ? "f32" : t == ROPEKIT_FLOAT16 ? "f16" : "bf16";
}

static result bench_one(const shp *sh, ropekit_dtype T, int threads) {
    bm_set *set = &g_set[0];
    bm_reset();
    memset(set, 0, sizeof *set);
    const double bytes = setup(sh, T, (size_t)g_xoff, (size_t)g_yoff, &g_jobs[0], set);
    ropekit_set_num_threads(threads);
    result r = {sh->title, dname(T), threads, 0, bytes, 0, 0, 0, 0, 0, {0, 0, 0, 0, 0}, 1};
    const char *hot_env = getenv("ROPEKIT_BENCH_HOT");
    const int hot = hot_env && *hot_env == '1';
    const size_t large = bm_set_large_bytes(set);
    const int K = hot ? 1 : bm_sets_for(large);
    for (int k = 1; k < K; ++k) { /* the same call on clones of the large buffers */
        bm_clone(set, &g_set[k]);
        g_jobs[k] = job_on(&g_jobs[0], set, &g_set[k]);
    }
    r.sets = K;
    rot_ctx rc = {g_jobs, K, 0};
    /* copies of half the bytes (read + write = the same bytes moved), same thread count, at the
     * arrays' offsets, cold (pairs rotated) where the row is */
    size_t half = (size_t)(bytes / 2);
    bm_copies pool;
    bm_copies_init(&pool, half, (size_t)g_xoff, (size_t)g_yoff, !hot && large > 0);
    copy_ctx cm = {&pool, 0}, cn = {&pool, 1};
    copy_threads_start(threads);
    call_fn f[3] = {call_rot, call_copy, call_copy};
    void *ctx[3] = {&rc, &cm, &cn};
    double med[3], best[3];
    time_items(3, f, ctx, med, best, &r.ro);
    copy_threads_stop();
    r.sec = med[0], r.best_sec = best[0];
    r.memcpy_sec = med[1], r.nt_sec = med[2];
    r.copy_sec = med[1] < med[2] ? med[1] : med[2];
    r.best_copy_sec = best[1] < best[2] ? best[1] : best[2];
    return r;
}

int main(int argc, char **argv) {
    int json = 0, sweep = 0;
    const char *filter = NULL;
    int threads[4] = {1, 2}, nthreads = 2;
    int dt_on[3] = {1, 1, 1};
    int yoff_set = 0;
    int64_t g_yoff2 = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--sweep") == 0)
            sweep = 1;
        else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc)
            filter = argv[++i];
        else if (strcmp(argv[i], "--offset") == 0 && i + 1 < argc)
            g_xoff = g_yoff = atoi(argv[++i]);
        else if (strcmp(argv[i], "--yoffset") == 0 && i + 1 < argc)
            g_yoff2 = atoi(argv[++i]), yoff_set = 1;
        else if (strcmp(argv[i], "--time") == 0 && i + 1 < argc)
            g_budget = atof(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            nthreads = 0;
            for (char *t = strtok(argv[++i], ","); t && nthreads < 4; t = strtok(NULL, ","))
                threads[nthreads++] = atoi(t);
        } else if (strcmp(argv[i], "--dtypes") == 0 && i + 1 < argc) {
            dt_on[0] = dt_on[1] = dt_on[2] = 0;
            for (char *t = strtok(argv[++i], ","); t; t = strtok(NULL, ","))
                for (int d = 0; d < 3; ++d)
                    if (strcmp(t, d == 0 ? "f32" : d == 1 ? "f16" : "bf16") == 0) dt_on[d] = 1;
        } else {
            fprintf(
                stderr,
                "usage: %s [--json] [--threads 1,2] [--filter NAME] "
                "[--dtypes f32,f16,bf16] [--time SECONDS] [--sweep] [--offset B] [--yoffset B]\n",
                argv[0]);
            return 2;
        }
    }
    if (yoff_set) g_yoff = g_yoff2;
    if (g_xoff < 0 || g_xoff > 64 || g_yoff < 0 || g_yoff > 64) {
        fprintf(stderr, "--offset / --yoffset: 0 .. 64 bytes\n");
        return 2;
    }
    const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    const char *variant = ropekit_cpu_variant();
    if (json)
        printf("{\"variant\": \"%s\", \"results\": [\n", variant);
    else {
        printf("variant %s; median per call; GB/s = bytes moved / time; ratio = that / the copy's "
               "GB/s (the faster of memcpy and a streaming copy of the same bytes, same threads, "
               "same cache state); best = the same ratio from the fastest batches; rnd min/med: the "
               "ratio per round (one batch of the call, then of each copy), min and median; copy "
               "fast/slow: the faster copy's GB/s in its fastest / slowest round; sets: buffer "
               "sets rotated (1: in cache)\n",
               variant);
        printf("%-22s %-5s %3s %12s %10s %9s %9s %8s %8s %8s %8s %8s %8s %8s %8s %4s\n", "shape",
               "dtype", "thr", "time", "MB moved", "GB/s", "copy", "ratio", "best", "rnd min",
               "rnd med", "cp fast", "cp slow", "memcpy", "ntcopy", "sets");
    }
    shp shapes[64];
    char names[64][32];
    size_t nshapes = 0;
    if (sweep) {
        for (int64_t S = 1; S <= 8192; S *= 2, ++nshapes) {
            snprintf(names[nshapes], sizeof names[0], "sweep S=%lld", (long long)S);
            shapes[nshapes] = g_shapes[0]; /* llama3-8b prefill's heads at S tokens */
            shapes[nshapes].title = names[nshapes], shapes[nshapes].S = S;
        }
    } else {
        for (size_t i = 0; i < N_SHAPES; ++i)
            if (g_shapes[i].title) shapes[nshapes++] = g_shapes[i];
    }
    int first = 1;
    for (size_t s = 0; s < nshapes; ++s) {
        if (filter && !strstr(shapes[s].title, filter)) continue;
        for (int d = 0; d < 3; ++d) {
            if (!dt_on[d]) continue;
            for (int t = 0; t < nthreads; ++t) {
                result r = bench_one(&shapes[s], dts[d], threads[t]);
                double gbs = r.bytes / r.sec * 1e-9, cgbs = r.bytes / r.copy_sec * 1e-9;
                if (json) {
                    printf("%s  {\"shape\": \"%s\", \"dtype\": \"%s\", \"threads\": %d, "
                           "\"seconds\": %.9g, \"bytes\": %.0f, \"gbps\": %.4g, "
                           "\"copy_seconds\": %.9g, \"copy_gbps\": %.4g, \"ratio_copy\": %.4g, "
                           "\"best_seconds\": %.9g, \"best_copy_seconds\": %.9g, "
                           "\"best_ratio_copy\": %.4g, \"memcpy_seconds\": %.9g, "
                           "\"ntcopy_seconds\": %.9g, \"rounds\": %d, \"round_ratio_min\": %.4g, "
                           "\"round_ratio_median\": %.4g, \"copy_fast_seconds\": %.9g, "
                           "\"copy_slow_seconds\": %.9g, \"sets\": %d, \"variant\": \"%s\"}",
                           first ? "" : ",\n", r.shape, r.dtype, r.threads, r.sec, r.bytes, gbs,
                           r.copy_sec, cgbs, gbs / cgbs, r.best_sec, r.best_copy_sec,
                           r.best_copy_sec / r.best_sec, r.memcpy_sec, r.nt_sec, r.ro.n, r.ro.rmin,
                           r.ro.rmed, r.ro.cfast, r.ro.cslow, r.sets, variant);
                } else {
                    char tbuf[32];
                    if (r.sec < 1e-3)
                        snprintf(tbuf, sizeof tbuf, "%.0f ns", r.sec * 1e9);
                    else
                        snprintf(tbuf, sizeof tbuf, "%.3f ms", r.sec * 1e3);
                    printf("%-22s %-5s %3d %12s %10.2f %9.2f %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f "
                           "%8.2f %8.2f %8.2f %4d\n",
                           r.shape, r.dtype, r.threads, tbuf, r.bytes * 1e-6, gbs, cgbs, gbs / cgbs,
                           r.best_copy_sec / r.best_sec, r.ro.rmin, r.ro.rmed,
                           r.bytes / r.ro.cfast * 1e-9, r.bytes / r.ro.cslow * 1e-9,
                           r.bytes / r.memcpy_sec * 1e-9,
                           r.bytes / r.nt_sec * 1e-9, r.sets);
                }
                fflush(stdout);
                first = 0;
            }
        }
    }
    if (json) printf("\n]}\n");
    return 0;
}
