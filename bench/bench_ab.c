/* ropekit_bench_ab: two or more builds of libropekit.so timed in ONE process (dlopen), one call of
 * each per round in a rotating order, then a copy of the same bytes by memcpy and by streaming
 * stores. Speed claims between builds need this: on the benchmark Xeon (a KVM guest) the same
 * build's time moves by 5-30% between processes and allocations, more than most changes; calls of
 * A and B alternated on the same buffers see the same pages, caches and load.
 *
 *   ropekit_bench_ab LIBS VARIANT SECONDS XOFF YOFF THREADS ROW...
 *     LIBS     name=path[,name=path...] (at most 8; the first is the base the ratios divide)
 *     VARIANT  ropekit_set_cpu_variant's name (avx512, avx2, ...) for every build
 *     SECONDS  time per row (at least 15 rounds)
 *     XOFF/YOFF x and y start this many bytes past a 64-byte line (numpy's large arrays: 16)
 *     ROW      shape:dtype, dtype f32 | f16 | bf16; shapes (the C benchmark's, bench_cpu.c):
 *              llama (1, 4096, 40*128), llamaip (the same in place), qkv (the q+k heads of a
 *              packed QKV buffer in place), llamanp (no position ids), qwen3 (4, 2048, 24*128),
 *              phi (1, 2048, 64*80, R = 32), bnsh (1, 32, 4096, 128), bnship, bnshnp, mrope
 *              (Qwen2.5-VL, 1, 4096, 32*128), qk (DeepSeek-V4 QKNorm S = 256), rg (its
 *              regroup), dec (one decode token, 32 x 128), llama16k (llama at S = 16384: x and y
 *              larger than the Xeon's L3), llama64, bnsh64, bnshnp64, phi64, mrope64 (64 tokens:
 *              in the L2, the kernel's speed without the memory's), llama16, bnsh16 (16
 *              tokens: float32 in the L2 too), qk4, rg4 (the DeepSeek-V4 rows at 4 tokens)
 *
 * Buffers (bench_mem.h, the method of bench/results-cpu.md): every call of a large row takes the
 * next of K copies of its large buffers and every copy the next of K source/destination pairs
 * (K: >= 768 MiB per pool), so calls and copies start with their operands out of the caches;
 * calls of all builds share one rotation. ROPEKIT_BENCH_HOT=1: one set and one pair reused (the
 * method before session 7: the memcpy then ran right after the streaming copy of the same
 * destination, the calls on data a 300 MiB L3 can hold).
 *
 * Per row: the fastest call of each copy and of each build, the median in parentheses; then ratios
 * formed per round (a round: one call of each build in a rotating order, then memcpy and the
 * streaming copy, so that all of them see the same state of the guest) and given as the min and
 * the median over the rounds: base time / build time, and "cp/l" the faster copy of the round /
 * the build's time (the results tables' "vs copy"); "copy GB/s" the faster copy's speed in its
 * fastest, median and slowest round (how much the memory itself moved during the row). */
#define _GNU_SOURCE /* madvise, MADV_HUGEPAGE */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dl.h"
#include "bench_mem.h"
#include "bench_rows.h"

#define MAXL 8
#define MAXN 4000
static double g_t[MAXL][MAXN], g_c[MAXN], g_nt[MAXN], g_cr[MAXN];
static double g_rb[MAXL][MAXN], g_rc[MAXL][MAXN]; /* per-round ratios */
static bm_set g_sets[BM_MAXK];
static job g_jobs[BM_MAXK];

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s LIBS VARIANT SECONDS XOFF YOFF THREADS ROW...\n", argv[0]);
        return 2;
    }
    api L[MAXL];
    const char *names[MAXL];
    int nl = 0;
    const int thr = atoi(argv[6]);
    const char *hot_env = getenv("ROPEKIT_BENCH_HOT");
    const int hot = hot_env && *hot_env == '1';
    for (char *tok = strtok(argv[1], ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq || nl == MAXL) {
            fprintf(stderr, "LIBS: name=path[,name=path...], at most %d\n", MAXL);
            return 2;
        }
        *eq = 0;
        names[nl] = tok;
        L[nl] = load(eq + 1);
        if (L[nl].setv(argv[2]) != ROPEKIT_OK || L[nl].setn(thr) != ROPEKIT_OK) {
            fprintf(stderr, "%s: %s\n", tok, L[nl].err());
            return 1;
        }
        ++nl;
    }
    const double budget = atof(argv[3]);
    const size_t xoff = (size_t)atol(argv[4]), yoff = (size_t)atol(argv[5]);
    if (nl == 0 || xoff > 63 || yoff > 63) {
        fprintf(stderr, "no LIBS, or an offset above 63\n");
        return 2;
    }
    printf("variant %s, %d thread(s), x +%zu B, y +%zu B, %s; us per call: min (median); ratios "
           "per round (one call of each build, then the copies): %s time / build time (min, "
           "median); cp/l: the faster copy's time / build time (min/median); copy GB/s: the "
           "faster copy's fastest, median and slowest round\n",
           argv[2], thr, xoff, yoff, hot ? "buffers reused (ROPEKIT_BENCH_HOT)" : "cold buffers",
           names[0]);
    printf("%-12s %8s %8s", "row", "memcpy", "ntcopy");
    for (int l = 0; l < nl; ++l)
        printf(" %18s", names[l]);
    for (int l = 1; l < nl; ++l)
        printf(" %13s", names[l]);
    printf("\n");
    for (int a = 7; a < argc; ++a) {
        ropekit_dtype T;
        const shp *s = parse_row(argv[a], &T);
        if (!s) {
            fprintf(stderr, "row %s: not shape:f32|f16|bf16 (shapes: see the source)\n", argv[a]);
            return 2;
        }
        bm_reset();
        memset(&g_sets[0], 0, sizeof g_sets[0]);
        const double bytes = setup(s, T, xoff, yoff, &g_jobs[0], &g_sets[0]);
        const size_t large = bm_set_large_bytes(&g_sets[0]);
        const int K = hot ? 1 : bm_sets_for(large);
        for (int k = 1; k < K; ++k) {
            bm_clone(&g_sets[0], &g_sets[k]);
            g_jobs[k] = job_on(&g_jobs[0], &g_sets[0], &g_sets[k]);
        }
        const size_t half = (size_t)(bytes / 2);
        bm_copies cp;
        bm_copies_init(&cp, half, xoff, yoff, !hot && large > 0);
        for (int l = 0; l < nl; ++l) /* warm-up: the library's thread pool, code, tables */
            call(&L[l], &g_jobs[0]);
        memcpy(cp.dst[0], cp.src[0], half);
        int n = 0, ks = 0, kc = 0;
        const double t_end = now_s() + budget;
        while (n < MAXN && (now_s() < t_end || n < 15)) {
            for (int k = 0; k < nl; ++k) {
                const int l = (k + n) % nl;
                const job *j = &g_jobs[ks];
                ks = (ks + 1) % K;
                const double t0 = now_s();
                call(&L[l], j);
                g_t[l][n] = now_s() - t0;
            }
            /* hot: memcpy then the streaming copy on the one pair (as before session 7) */
            double t0 = now_s();
            memcpy(cp.dst[kc], cp.src[kc], half);
            g_c[n] = now_s() - t0;
            kc = (kc + 1) % cp.k;
            t0 = now_s();
            bm_nt_copy(cp.dst[kc], cp.src[kc], half);
            g_nt[n] = now_s() - t0;
            kc = (kc + 1) % cp.k;
            ++n;
        }
        /* per-round ratios (a round: one call of each build, then the two copies, so all see
         * the same guest state): build vs base and the faster copy vs each build */
        for (int l = 0; l < nl; ++l)
            for (int r = 0; r < n; ++r) {
                const double cp_r = g_c[r] < g_nt[r] ? g_c[r] : g_nt[r];
                g_rb[l][r] = g_t[0][r] / g_t[l][r], g_rc[l][r] = cp_r / g_t[l][r];
            }
        for (int r = 0; r < n; ++r)
            g_cr[r] = g_c[r] < g_nt[r] ? g_c[r] : g_nt[r];
        for (int l = 0; l < nl; ++l) {
            qsort(g_t[l], (size_t)n, sizeof(double), cmp_d);
            qsort(g_rb[l], (size_t)n, sizeof(double), cmp_d);
            qsort(g_rc[l], (size_t)n, sizeof(double), cmp_d);
        }
        qsort(g_c, (size_t)n, sizeof(double), cmp_d);
        qsort(g_nt, (size_t)n, sizeof(double), cmp_d);
        qsort(g_cr, (size_t)n, sizeof(double), cmp_d);
        const int dp = g_c[0] < 1e-4 ? 2 : 0; /* decimals: small calls in hundredths of a us */
        printf("%-12s %8.*f %8.*f", argv[a], dp, g_c[0] * 1e6, dp, g_nt[0] * 1e6);
        for (int l = 0; l < nl; ++l)
            printf("  %8.*f (%6.*f)", dp, g_t[l][0] * 1e6, dp, g_t[l][n / 2] * 1e6);
        for (int l = 1; l < nl; ++l) /* per-round build vs base: min, median */
            printf("  %5.3f %5.3f", g_rb[l][0], g_rb[l][n / 2]);
        printf("  cp/l");
        for (int l = 0; l < nl; ++l) /* per-round copy vs build: min, median */
            printf(" %4.2f/%4.2f", g_rc[l][0], g_rc[l][n / 2]);
        /* how much the copy itself moved: its GB/s (bytes / faster copy) fastest, median, slowest */
        printf("  copy GB/s %.1f %.1f %.1f", bytes / g_cr[0] * 1e-9, bytes / g_cr[n / 2] * 1e-9,
               bytes / g_cr[n - 1] * 1e-9);
        printf("  %.1f MB n=%d K=%d/%d\n", bytes * 1e-6, n, K, cp.k);
        fflush(stdout);
    }
    return 0;
}
