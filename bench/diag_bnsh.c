/* ropekit_diag_bnsh: the BNSH rotation's memory access order as plain copies, no arithmetic (a
 * diagnostic program, not a benchmark of ropekit). x and y are (N, S, H) (one batch row): the
 * rotary kernel visits them in blocks of TB tokens, and inside a block head by head, so it reads
 * and writes N pieces of TB * H values, S * H values apart, per block (bench/results-cpu.md,
 * group 1). Here the same bytes are copied x -> y in the same orders, alternated in one process,
 * every copy on the next of K cold x/y pairs (bench_mem.h: >= 768 MiB in all, as the tables):
 *
 *   memcpy    one memcpy of the whole tensor
 *   ntcopy    one streaming-store copy of the whole tensor (memory order; = block order with
 *             TB = S)
 *   blkT      block order, TB = T tokens, each piece streamed (16-byte streaming stores, one
 *             fence per copy as the kernel's), no prefetch
 *   blkT+pf   the same with the kernel's software prefetch: while a piece is copied row by row,
 *             the matching row of the next piece (the next head's, or head 0 of the next block)
 *             is prefetched (prefetcht0), one row per row
 *
 * Prints min and median us per copy, and per-round ratios (ntcopy time / mode time: min,
 * median; a round: every mode once, in a rotating order).
 *
 *   ropekit_diag_bnsh N S H ES XOFF YOFF SECONDS TB...   (the bench row: 32 4096 128 2 16 16 0.5
 *   16 64 256) */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_mem.h"
#include "bench_time.h"

#define MAXM 16
#define MAXR 2000
static double g_t[MAXM][MAXR], g_r[MAXM][MAXR];

/* block order: pieces of tb rows of rowb bytes, n heads of s rows; pf: prefetch the next piece */
static void copy_blocks(char *y, const char *x, size_t n, size_t s, size_t rowb, size_t tb,
                        int pf) {
    const size_t hs = s * rowb; /* a head's run */
    for (size_t s0 = 0; s0 < s; s0 += tb) {
        const size_t nb = s - s0 < tb ? s - s0 : tb;
        for (size_t h = 0; h < n; ++h) {
            const size_t off = h * hs + s0 * rowb;
            if (!pf) {
                bm_nt_pieces(y + off, x + off, nb * rowb);
                continue;
            }
            /* the next piece: the next head's, or head 0 of the next block */
            const size_t nxt = h + 1 < n ? off + hs : (s0 + tb) * rowb;
            for (size_t j = 0; j < nb; ++j) {
                const uintptr_t a = (uintptr_t)x + nxt + j * rowb;
                for (size_t o = 0; o < rowb; o += 64)
                    __builtin_prefetch((const void *)(a + o), 0, 3);
                bm_nt_pieces(y + off + j * rowb, x + off + j * rowb, rowb);
            }
        }
    }
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: %s N S H ES XOFF YOFF SECONDS TB...\n", argv[0]);
        return 2;
    }
    const size_t n = (size_t)atol(argv[1]), s = (size_t)atol(argv[2]), h = (size_t)atol(argv[3]);
    const size_t es = (size_t)atol(argv[4]), xo = (size_t)atol(argv[5]), yo = (size_t)atol(argv[6]);
    const double sec = atof(argv[7]);
    const size_t rowb = h * es, total = n * s * rowb;
    int nm = 2;
    size_t tbs[MAXM];
    int pfs[MAXM];
    char names[MAXM][24];
    snprintf(names[0], sizeof names[0], "memcpy");
    snprintf(names[1], sizeof names[1], "ntcopy");
    for (int a = 8; a < argc && nm + 2 <= MAXM; ++a)
        for (int pf = 0; pf < 2; ++pf) {
            tbs[nm] = (size_t)atol(argv[a]), pfs[nm] = pf;
            snprintf(names[nm], sizeof names[nm], "blk%zu%s", tbs[nm], pf ? "+pf" : "");
            ++nm;
        }
    if (!n || !s || !h || !es || xo > 63 || yo > 63) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    bm_copies cp; /* K cold x/y pairs */
    bm_copies_init(&cp, total, xo, yo, 1);
    for (int m = 2; m < nm; ++m) { /* every order writes the whole tensor */
        memset(cp.dst[0], 0, total);
        copy_blocks(cp.dst[0], cp.src[0], n, s, rowb, tbs[m], pfs[m]);
        if (memcmp(cp.dst[0], cp.src[0], total)) {
            fprintf(stderr, "%s: wrong output\n", names[m]);
            return 1;
        }
    }
    int r = 0, kc = 0;
    const double t_end = now_s() + sec;
    while (r < MAXR && (now_s() < t_end || r < 9)) {
        for (int k = 0; k < nm; ++k) {
            const int m = (k + r) % nm;
            char *y = cp.dst[kc];
            const char *x = cp.src[kc];
            kc = (kc + 1) % cp.k;
            const double t0 = now_s();
            if (m == 0)
                memcpy(y, x, total);
            else if (m == 1)
                bm_nt_copy(y, x, total);
            else
                copy_blocks(y, x, n, s, rowb, tbs[m], pfs[m]);
            g_t[m][r] = now_s() - t0;
        }
        ++r;
    }
    for (int m = 0; m < nm; ++m)
        for (int i = 0; i < r; ++i)
            g_r[m][i] = g_t[1][i] / g_t[m][i];
    for (int m = 0; m < nm; ++m) {
        qsort(g_t[m], (size_t)r, sizeof(double), cmp_d);
        qsort(g_r[m], (size_t)r, sizeof(double), cmp_d);
    }
    printf("N %zu S %zu H %zu es %zu x +%zu y +%zu: %.1f MB copied, %d rounds, K=%d pairs; us min "
           "(median); ntcopy / mode per round (min, median)\n",
           n, s, h, es, xo, yo, (double)total * 1e-6, r, cp.k);
    for (int m = 0; m < nm; ++m)
        printf("  %-10s %8.0f (%8.0f)  %5.2f %5.2f\n", names[m], g_t[m][0] * 1e6,
               g_t[m][r / 2] * 1e6, g_r[m][0], g_r[m][r / 2]);
    return 0;
}
