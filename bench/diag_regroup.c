/* ropekit_diag_regroup: the InverseRotaryRegroup's memory access pattern as plain copies, no
 * arithmetic (a diagnostic program, not a benchmark of ropekit). The regroup reads a token's row
 * of F values and writes it to G output regions (group g of token n at out + (g*N + n) * F/G);
 * here the same bytes are copied in the same orders, all in one process, alternated:
 *
 *   memcpy    one memcpy of the whole input (the results tables' reference)
 *   ntcopy    one streaming-store copy of the whole input (as bench_ab.c's nt_copy)
 *   tok-nt    token by token, each token's G runs of F/G values to their G regions, streamed
 *             (the regroup's order: G write streams N*F/G values apart)
 *   grp-nt    group by group, token by token (the output in memory order: one write stream,
 *             the input read in runs of F/G values)
 *   tok-cp / grp-cp   the same two orders with memcpy per run (normal stores)
 *
 * Streamed runs store their partial first and last lines normally, whole lines with streaming
 * stores (what ropekit's staged rows do). Prints min and median us per copy of each.
 *
 *   ropekit_diag_regroup N F G ES XOFF YOFF SECONDS [HUGE]
 *     (the bench rows' regroup: 256 65536 8 2 16 16 0.3); HUGE 1 (default): the buffers are
 *     madvise'd MADV_HUGEPAGE as bench_ab.c's, 0: MADV_NOHUGEPAGE (4 KiB pages). The process's
 *     AnonHugePages (/proc/self/smaps_rollup) is printed: how much of it the kernel gave as
 *     2 MiB pages. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "bench_time.h"

static int g_huge = 1;
static void *xalloc(size_t n) { /* as bench_dl.h: 2 MiB aligned, huge pages asked for */
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, n + 64) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    (void)madvise(p, n + 64, g_huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(p, 1, n + 64);
    return p;
}
static void nt_copy(char *d, const char *s, size_t n) {
    size_t i = 0;
#if defined(__SSE2__)
    for (; i < n && ((uintptr_t)(d + i) & 63); ++i)
        d[i] = s[i];
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 64; k += 16)
            _mm_stream_si128((__m128i *)(d + i + k), _mm_loadu_si128((const __m128i *)(s + i + k)));
#endif
    if (i < n) memcpy(d + i, s + i, n - i);
}
static void fence(void) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

enum { M_MEMCPY, M_NT, M_TOKNT, M_GRPNT, M_TOKCP, M_GRPCP, NM };
static const char *g_names[NM] = {"memcpy", "ntcopy", "tok-nt", "grp-nt", "tok-cp", "grp-cp"};
#define MAXR 4000
static double g_t[NM][MAXR];

/* The regroup's runs copied token by token (grp 0) or group by group (grp 1); nt: streamed. */
static void copy_runs(char *y, const char *x, size_t N, size_t G, size_t row, size_t run, int grp,
                      int nt) {
    const size_t outer = grp ? G : N, inner = grp ? N : G;
    for (size_t a = 0; a < outer; ++a)
        for (size_t b = 0; b < inner; ++b) {
            const size_t n = grp ? b : a, g = grp ? a : b;
            char *d = y + (g * N + n) * run;
            const char *s = x + n * row + g * run;
            if (nt)
                nt_copy(d, s, run);
            else
                memcpy(d, s, run);
        }
    if (nt) fence();
}

static void run_mode(int m, char *y, const char *x, size_t N, size_t G, size_t row, size_t run,
                     size_t total) {
    switch (m) {
    case M_MEMCPY: memcpy(y, x, total); break;
    case M_NT: nt_copy(y, x, total), fence(); break;
    default:
        copy_runs(y, x, N, G, row, run, m == M_GRPNT || m == M_GRPCP, m == M_TOKNT || m == M_GRPNT);
        break;
    }
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s N F G ES XOFF YOFF SECONDS [HUGE]\n", argv[0]);
        return 2;
    }
    const size_t N = (size_t)atol(argv[1]), F = (size_t)atol(argv[2]), G = (size_t)atol(argv[3]);
    const size_t es = (size_t)atol(argv[4]), xo = (size_t)atol(argv[5]), yo = (size_t)atol(argv[6]);
    const double sec = atof(argv[7]);
    if (argc > 8) g_huge = atoi(argv[8]);
    if (!N || !F || !G || F % G || !es || xo > 63 || yo > 63) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    const size_t row = F * es, run = row / G, total = N * row;
    char *x = (char *)xalloc(total) + xo, *y = (char *)xalloc(total) + yo;
    for (size_t i = 0; i < total; ++i) /* distinct bytes: the check below sees misplaced runs */
        x[i] = (char)(i * 2654435761u >> 13);
    for (int m = 0; m < NM; ++m) { /* every mode writes the regroup's output */
        memset(y, 0, total);
        run_mode(m, y, x, N, G, row, run, total);
        int bad = 0;
        for (size_t n = 0; n < N && !bad; ++n)
            for (size_t g = 0; g < G && !bad; ++g)
                bad = memcmp(y + (g * N + n) * run, x + n * row + g * run, run) != 0;
        if (m > M_NT && bad) {
            fprintf(stderr, "%s: wrong output\n", g_names[m]);
            return 1;
        }
    }
    int r = 0;
    const double t_end = now_s() + sec;
    while (r < MAXR && (now_s() < t_end || r < 5)) {
        for (int k = 0; k < NM; ++k) {
            const int m = (k + r) % NM;
            const double t0 = now_s();
            run_mode(m, y, x, N, G, row, run, total);
            g_t[m][r] = now_s() - t0;
        }
        ++r;
    }
    printf("N %zu F %zu G %zu es %zu x +%zu y +%zu: %.1f MB copied, %d rounds; us min (median), "
           "memcpy min / min\n",
           N, F, G, es, xo, yo, (double)total * 1e-6, r);
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "AnonHugePages:", 14))
            printf("  (huge pages %s) %s", g_huge ? "asked" : "refused", line);
    if (f) fclose(f);
    for (int m = 0; m < NM; ++m)
        qsort(g_t[m], (size_t)r, sizeof(double), cmp_d);
    for (int m = 0; m < NM; ++m)
        printf("  %-7s %8.0f (%8.0f)  %5.2f\n", g_names[m], g_t[m][0] * 1e6, g_t[m][r / 2] * 1e6,
               g_t[M_MEMCPY][0] / g_t[m][0]);
    return 0;
}
