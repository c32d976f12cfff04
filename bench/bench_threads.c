/* ropekit_bench_threads: one thread vs two, and builds against each other, alternated in one
 * process (each library loaded with dlopen; public API only). Results:
 * bench/results-cpu-threads.md. ropekit_bench_threads LIBS VARIANT SECONDS ROW... (e.g.
 * ropekit_bench_threads new=build/libropekit.so avx2 0.2 llama:f32 dec:bf16:32) LIBS:
 * name=path,name=path (up to 4). Each round runs, in a rotated order, every library with 1 thread
 * and with 2 threads, a memcpy of half the bytes moved on 1 thread and on 2 threads (a helper
 * thread sleeping on a condition variable, as bench_cpu.c), and reports min / median us per call
 * and the ratios t1/t2 (per library) and copy1/copy2 (the copy's own 2-thread scaling on this
 * guest: the ceiling for memory-bound rows). ROW: NAME:DTYPE[:S] with NAME one of llama qkv bnsh
 * bnship bnshnp llamanp qwen3 phi mrope qk rg dec (llama 32 heads x 128 at S tokens: the cost-model
 * sweep) dec64 (B tokens, 40x128). THR_GAP_US=N: every timed call made alone after an N us pause
 * (pool workers asleep).
 *
 * Buffers: the method of bench/results-cpu.md (bench_mem.h, as ropekit_bench_ab): a large row's
 * calls (1 and 2 threads alike) take the next of K copies of its large buffers, the copies the
 * next of K source/destination pairs (>= 768 MiB per pool), so every timed call and copy starts
 * with its operands out of the caches; large copies are one-pass streaming-store copies
 * (bm_nt_copy, as ropekit's large calls store; on 2 threads each thread copies one half), small
 * ones memcpy on one thread (in the caches, as the small calls). Ratios are formed per round (a
 * round: every item once, in a rotated order) and given as min and median over the rounds:
 * t1/t2 = the round's 1-thread time / its 2-thread time. ROPEKIT_BENCH_HOT=1: one buffer set. */

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_dl.h"
#include "bench_rows.h" /* shapes, data, buffers and the call: as ropekit_bench_ab */

/* ---- a 2-thread memcpy: the helper sleeps on a condition variable ---- */
static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ccv = PTHREAD_COND_INITIALIZER, cdone = PTHREAD_COND_INITIALIZER;
static int cgen, cleft;
static char *cdst;
static const char *csrc;
static size_t cn;
static int cnt; /* 1: streaming-store copy */
static void cpy(char *d, const char *s, size_t n, int nt) {
    if (nt)
        bm_nt_copy(d, s, n);
    else
        memcpy(d, s, n);
}
static void *cworker(void *arg) {
    (void)arg;
    int seen = 0;
    pthread_mutex_lock(&cmu);
    for (;;) {
        while (cgen == seen)
            pthread_cond_wait(&ccv, &cmu);
        seen = cgen;
        pthread_mutex_unlock(&cmu);
        size_t b = (cn / 2) & ~(size_t)63;
        cpy(cdst + b, csrc + b, cn - b, cnt);
        pthread_mutex_lock(&cmu);
        if (--cleft == 0) pthread_cond_signal(&cdone);
    }
    return NULL;
}
static void copy2(char *d, const char *s, size_t n, int nt) {
    pthread_mutex_lock(&cmu);
    cdst = d, csrc = s, cn = n, cnt = nt, cleft = 1, ++cgen;
    pthread_cond_signal(&ccv);
    pthread_mutex_unlock(&cmu);
    cpy(d, s, (n / 2) & ~(size_t)63, nt);
    pthread_mutex_lock(&cmu);
    while (cleft > 0)
        pthread_cond_wait(&cdone, &cmu);
    pthread_mutex_unlock(&cmu);
}

#define MAXL 4
#define MAXN 20000
#define MINR 9 /* rounds per row at least */
static double g_tt[2 * MAXL + 2][MAXN], g_rr[MAXL + 1][MAXN];
static bm_set g_sets[BM_MAXK];
static job g_jobs[BM_MAXK];
int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: ropekit_bench_threads LIBS VARIANT SECONDS ROW..\n");
        return 2;
    }
    api L[MAXL];
    char *names[MAXL];
    int nl = 0;
    char *libs = strdup(argv[1]);
    for (char *tok = strtok(libs, ","); tok && nl < MAXL; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            fprintf(stderr, "LIBS: name=path\n");
            return 2;
        }
        *eq = 0;
        names[nl] = tok;
        L[nl] = load(eq + 1);
        if (L[nl].setv(argv[2])) {
            fprintf(stderr, "variant %s refused\n", argv[2]);
            return 1;
        }
        ++nl;
    }
    double budget = atof(argv[3]);
    const char *hot_env = getenv("ROPEKIT_BENCH_HOT");
    const int hot = hot_env && *hot_env == '1';
    pthread_t ct;
    pthread_create(&ct, NULL, cworker, NULL);
    printf("variant %s, %s; us per call: the fastest; t1/t2 = the round's 1-thread / 2-thread time "
           "(min, median over the rounds); copy1/2 the same for the copy\n",
           argv[2], hot ? "buffers reused (ROPEKIT_BENCH_HOT)" : "cold buffers");
    printf("%-14s %8s %7s %9s %13s", "row", "MB", "copy1", "copy2", "copy1/2");
    for (int l = 0; l < nl; ++l)
        printf(" | %-6s %9s %9s %11s", names[l], "1thr", "2thr", "t1/t2");
    printf("\n");
    for (int a = 4; a < argc; ++a) {
        char nm[64];
        snprintf(nm, sizeof nm, "%s", argv[a]);
        char *c1 = strchr(nm, ':');
        if (!c1) continue;
        *c1 = 0;
        char *dn = c1 + 1, *c2 = strchr(dn, ':');
        int64_t Sover = 0;
        if (c2) *c2 = 0, Sover = atoll(c2 + 1);
        ropekit_dtype T = !strcmp(dn, "f32")   ? ROPEKIT_FLOAT32
                          : !strcmp(dn, "f16") ? ROPEKIT_FLOAT16
                                               : ROPEKIT_BFLOAT16;
        const shp *s = NULL;
        for (size_t i = 0; i < N_SHAPES; ++i)
            if (!strcmp(g_shapes[i].name, nm)) s = &g_shapes[i];
        if (!s) {
            fprintf(stderr, "no row %s\n", nm);
            continue;
        }
        shp s1 = *s; /* :S overrides the tokens (dec64: the batch) */
        if (Sover > 0) {
            if (!strcmp(s1.name, "dec64"))
                s1.B = Sover;
            else
                s1.S = Sover;
        }
        bm_reset(); /* the previous row's buffers */
        memset(&g_sets[0], 0, sizeof g_sets[0]);
        double bytes = setup(&s1, T, 0, 0, &g_jobs[0], &g_sets[0]);
        const size_t large = bm_set_large_bytes(&g_sets[0]);
        const int K = hot ? 1 : bm_sets_for(large);
        for (int k = 1; k < K; ++k) {
            bm_clone(&g_sets[0], &g_sets[k]);
            g_jobs[k] = job_on(&g_jobs[0], &g_sets[0], &g_sets[k]);
        }
        size_t half = (size_t)(bytes / 2);
        bm_copies cp;
        bm_copies_init(&cp, half, 0, 0, !hot && large > 0);
        const int ntc = large > 0; /* large rows: streaming-store copies; small: memcpy */
        /* items: lib l with 1 thread = 2l, with 2 threads = 2l+1; copy1 = 2nl, copy2 = 2nl+1 */
        const int ni = 2 * nl + 2;
        for (int l = 0; l < nl; ++l) {
            L[l].setn(1), call(&L[l], &g_jobs[0]), L[l].setn(2), call(&L[l], &g_jobs[0]);
        }
        memcpy(cp.dst[0], cp.src[0], half), copy2(cp.dst[0], cp.src[0], half, ntc);
        /* repeat each item so that one sample is >= ~20 us */
        double t0 = now_s();
        call(&L[0], &g_jobs[0]);
        double one = now_s() - t0;
        int reps = one < 20e-6 ? (int)(20e-6 / (one > 1e-8 ? one : 1e-8)) + 1 : 1;
        /* THR_GAP_US: each timed call alone, after a pause of that many us (pool workers asleep) */
        const char *gap_env = getenv("THR_GAP_US");
        const long gap_us = gap_env ? atol(gap_env) : 0;
        if (gap_us > 0) reps = 1;
        int n = 0, ks = 0, kc = 0;
        double t_end = now_s() + budget;
        while (n < MAXN && (now_s() < t_end || n < MINR)) {
            for (int k = 0; k < ni; ++k) {
                int it = (k + n) % ni;
                double ta;
                if (gap_us > 0) {
                    struct timespec ts = {0, gap_us * 1000};
                    nanosleep(&ts, NULL);
                }
                if (it < 2 * nl) {
                    api *A = &L[it / 2];
                    A->setn(it % 2 ? 2 : 1);
                    const job *j = &g_jobs[ks];
                    ks = (ks + 1) % K;
                    ta = now_s();
                    for (int r = 0; r < reps; ++r)
                        call(A, j);
                } else {
                    char *d = cp.dst[kc];
                    const char *src = cp.src[kc];
                    kc = (kc + 1) % cp.k;
                    ta = now_s();
                    for (int r = 0; r < reps; ++r) {
                        if (it == 2 * nl || 2 * half < (1u << 20))
                            cpy(d, src, half, ntc);
                        else
                            copy2(d, src, half, ntc);
                    }
                }
                g_tt[it][n] = (now_s() - ta) / reps;
            }
            ++n;
        }
        /* per-round ratios: 1 thread / 2 threads, for each library and for the copy */
        for (int l = 0; l <= nl; ++l)
            for (int r = 0; r < n; ++r)
                g_rr[l][r] = g_tt[2 * l][r] / g_tt[2 * l + 1][r];
        for (int i = 0; i < ni; ++i)
            qsort(g_tt[i], n, sizeof(double), cmp_d);
        for (int l = 0; l <= nl; ++l)
            qsort(g_rr[l], n, sizeof(double), cmp_d);
        const int m = n / 2;
        char label[160];
        snprintf(label, sizeof label, "%s:%s%s%s", nm, dn, c2 ? ":" : "", c2 ? c2 + 1 : "");
        printf("%-14s %8.3f %7.1f %9.1f %6.2f %6.2f", label, bytes / 1e6, g_tt[2 * nl][0] * 1e6,
               g_tt[2 * nl + 1][0] * 1e6, g_rr[nl][0], g_rr[nl][m]);
        for (int l = 0; l < nl; ++l)
            printf(" | %-6s %9.2f %9.2f %5.2f %5.2f", names[l], g_tt[2 * l][0] * 1e6,
                   g_tt[2 * l + 1][0] * 1e6, g_rr[l][0], g_rr[l][m]);
        printf("  n=%d r=%d K=%d\n", n, reps, K);
        fflush(stdout);
    }
    return 0;
}
