/* Helpers shared by the WebGPU benchmark programs (bench_webgpu.c, bench_decode.c). */
#ifndef ROPEKIT_BENCH_COMMON_H
#define ROPEKIT_BENCH_COMMON_H

#include <stdint.h>
#include <string.h>
#include <time.h>

/* Monotonic wall clock in seconds. */
static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* qsort comparator of doubles, ascending. */
static inline int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* float32 -> float16 bits for the benchmarks' inputs: values in [-1, 1) (normal float16);
 * truncation is fine here. */
static inline uint16_t f2h(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000, e = (u >> 23) & 0xff, m = u & 0x7fffff;
    if (e < 103) return (uint16_t)s;
    return (uint16_t)(s | ((e - 112) << 10) | (m >> 13));
}

#endif
