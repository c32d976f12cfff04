/* ropekit_bench_copy: why two ways of timing "a copy of the same bytes" disagree, measured in one
 * process: one row's call and the copies of its bytes in each cache state, alternated round by
 * round (bench/results-cpu.md, "Machine, build, method", is the method chosen from it).
 *
 *   ropekit_bench_copy LIB VARIANT SECONDS XOFF YOFF ROW...   (rows: bench_ab.c's)
 *   ropekit_bench_copy --sweep SECONDS                         (copies of 8 .. 512 MiB)
 *
 * Per round, one of each (us per call: min, median; the ratio: that item's median / the call's
 * median, for the hot call and for the cold call):
 *   call hot    the call on one set of buffers, reused (the tools before session 7)
 *   call cold   the call on the next of K clones of its large buffers (>= 768 MiB in all)
 *   cp warm0    memcpy of half the bytes between one pair of 64-byte aligned buffers, reused:
 *               ropekit_bench's copy before session 7 (its destination in the caches)
 *   cp warm     the same at the row's offsets
 *   nt then cp  a streaming copy, then memcpy, on one pair reused (ropekit_bench_ab's before:
 *               memcpy's destination just pushed out of the caches by the streaming stores)
 *   cp cold     memcpy on the next of K pairs (>= 768 MiB), at the row's offsets
 *   cp cold0    the same, 64-byte aligned
 *   nt cold     the streaming-store copy on the next pair
 * --sweep: memcpy and the streaming copy of n bytes, hot (one pair reused) and cold (pairs
 * rotated over >= 768 MiB), GB/s as 2n / time (read + write), median of the rounds.
 * A reused item stays in the L3 only while the round's other traffic leaves it there: with the
 * cold items' 600+ MB per round the "hot" and "warm" items of a large row are not (R1 of session
 * 7: all its copies of a row ran alike), while a tool that reuses one set with little traffic
 * in between gets an L3-resident copy for some rows and not for others. */
#define _GNU_SOURCE /* madvise, MADV_HUGEPAGE */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dl.h"
#include "bench_mem.h"
#include "bench_rows.h"

#define MAXN 2000
enum { HOT, COLD, W0, W, ABNT, ABCP, CC, CC0, NTC, NITEM };
static const char *g_item[NITEM] = {"call hot",    "call cold", "cp warm0", "cp warm", "nt(ab)",
                                    "cp after nt", "cp cold",   "cp cold0", "nt cold"};
static double g_t[NITEM][MAXN];
static bm_set g_sets[BM_MAXK];
static job g_jobs[BM_MAXK];

static double med(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return v[n / 2];
}

static int sweep(double budget) {
    printf("copy sweep: GB/s = 2 n / median time (read + write); hot: one pair reused; cold: pairs "
           "rotated over >= 768 MiB\n%10s %12s %12s %12s %12s\n",
           "MiB", "memcpy hot", "nt hot", "memcpy cold", "nt cold");
    static double t[4][MAXN];
    for (size_t mib = 8; mib <= 512; mib *= 2) {
        const size_t n = mib << 20;
        bm_reset();
        bm_copies hotp, cold;
        bm_copies_init(&hotp, n, 0, 0, 0);
        bm_copies_init(&cold, n, 0, 0, 1);
        memcpy(hotp.dst[0], hotp.src[0], n);
        int r = 0, kc = 0;
        const double t_end = now_s() + budget;
        while (r < MAXN && (now_s() < t_end || r < 5)) {
            double t0 = now_s();
            memcpy(hotp.dst[0], hotp.src[0], n);
            double t1 = now_s();
            bm_nt_copy(hotp.dst[0], hotp.src[0], n);
            double t2 = now_s();
            memcpy(hotp.dst[0], hotp.src[0], n); /* the hot memcpy's destination back in cache */
            double t3 = now_s();
            memcpy(cold.dst[kc], cold.src[kc], n);
            double t4 = now_s();
            kc = (kc + 1) % cold.k;
            bm_nt_copy(cold.dst[kc], cold.src[kc], n);
            double t5 = now_s();
            kc = (kc + 1) % cold.k;
            t[0][r] = t1 - t0, t[1][r] = t2 - t1, t[2][r] = t4 - t3, t[3][r] = t5 - t4;
            (void)t3;
            ++r;
        }
        printf("%10zu", mib);
        for (int i = 0; i < 4; ++i)
            printf(" %12.2f", 2.0 * (double)n / med(t[i], r) * 1e-9);
        printf("   n=%d K=%d\n", r, cold.k);
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "--sweep")) return sweep(atof(argv[2]));
    if (argc < 7) {
        fprintf(stderr, "usage: %s LIB VARIANT SECONDS XOFF YOFF ROW... | --sweep SECONDS\n",
                argv[0]);
        return 2;
    }
    api A = load(argv[1]);
    if (A.setv(argv[2]) != ROPEKIT_OK || A.setn(1) != ROPEKIT_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], A.err());
        return 1;
    }
    const double budget = atof(argv[3]);
    const size_t xoff = (size_t)atol(argv[4]), yoff = (size_t)atol(argv[5]);
    if (xoff > 63 || yoff > 63) {
        fprintf(stderr, "an offset above 63\n");
        return 2;
    }
    printf("variant %s, 1 thread, x +%zu B, y +%zu B; per item: min, median us; /hot, /cold: the "
           "item's median / the call's (hot, cold) median\n",
           argv[2], xoff, yoff);
    for (int a = 6; a < argc; ++a) {
        ropekit_dtype T;
        const shp *s = parse_row(argv[a], &T);
        if (!s) {
            fprintf(stderr, "row %s: not shape:f32|f16|bf16\n", argv[a]);
            return 2;
        }
        bm_reset();
        memset(&g_sets[0], 0, sizeof g_sets[0]);
        const double bytes = setup(s, T, xoff, yoff, &g_jobs[0], &g_sets[0]);
        const size_t half = (size_t)(bytes / 2);
        /* the hot set: a clone of its own, so that the cold rotation never touches it */
        bm_set hs;
        bm_clone(&g_sets[0], &hs);
        const job hj = job_on(&g_jobs[0], &g_sets[0], &hs);
        const int K = bm_sets_for(bm_set_large_bytes(&g_sets[0]));
        for (int k = 1; k < K; ++k) {
            bm_clone(&g_sets[0], &g_sets[k]);
            g_jobs[k] = job_on(&g_jobs[0], &g_sets[0], &g_sets[k]);
        }
        bm_copies w0, w, ab, cold;
        bm_copies_init(&w0, half, 0, 0, 0);
        bm_copies_init(&w, half, xoff, yoff, 0);
        bm_copies_init(&ab, half, xoff, yoff, 0);
        bm_copies_init(&cold, half, xoff, yoff, 1);
        call(&A, &hj), call(&A, &g_jobs[0]);
        memcpy(w0.dst[0], w0.src[0], half), memcpy(w.dst[0], w.src[0], half);
        int n = 0, ks = 0, kc = 0;
        const double t_end = now_s() + budget;
        while (n < MAXN && (now_s() < t_end || n < 5)) {
            double t[NITEM + 1];
            t[0] = now_s();
            call(&A, &hj);
            t[1] = now_s();
            call(&A, &g_jobs[ks]);
            ks = (ks + 1) % K;
            t[2] = now_s();
            memcpy(w0.dst[0], w0.src[0], half);
            t[3] = now_s();
            memcpy(w.dst[0], w.src[0], half);
            t[4] = now_s();
            bm_nt_copy(ab.dst[0], ab.src[0], half);
            t[5] = now_s();
            memcpy(ab.dst[0], ab.src[0], half);
            t[6] = now_s();
            memcpy(cold.dst[kc], cold.src[kc], half);
            kc = (kc + 1) % cold.k;
            t[7] = now_s();
            memcpy(cold.dst[kc] - yoff, cold.src[kc] - xoff, half);
            kc = (kc + 1) % cold.k;
            t[8] = now_s();
            bm_nt_copy(cold.dst[kc], cold.src[kc], half);
            kc = (kc + 1) % cold.k;
            t[9] = now_s();
            for (int i = 0; i < NITEM; ++i)
                g_t[i][n] = t[i + 1] - t[i];
            ++n;
        }
        double mn[NITEM], md[NITEM];
        for (int i = 0; i < NITEM; ++i) {
            md[i] = med(g_t[i], n); /* sorts */
            mn[i] = g_t[i][0];
        }
        printf("%s  %.1f MB  n=%d  K=%d/%d\n", argv[a], bytes * 1e-6, n, K, cold.k);
        for (int i = 0; i < NITEM; ++i)
            printf("  %-12s %9.0f %9.0f  /hot %5.2f  /cold %5.2f\n", g_item[i], mn[i] * 1e6,
                   md[i] * 1e6, md[i] / md[HOT], md[i] / md[COLD]);
        fflush(stdout);
    }
    return 0;
}
