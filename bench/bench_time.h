/* The clock and the sort comparator of every benchmark program (CPU: bench_cpu.c and the programs
 * that include bench_dl.h; WebGPU: bench/webgpu/bench_common.h). */
#ifndef ROPEKIT_BENCH_TIME_H
#define ROPEKIT_BENCH_TIME_H
#include <time.h>

/* Monotonic wall clock in seconds. */
static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* qsort comparator of doubles, ascending. */
static inline int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
#endif
