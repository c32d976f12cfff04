/* Helpers shared by the WebGPU benchmark programs (bench_webgpu.c, bench_decode.c). */
#ifndef ROPEKIT_BENCH_COMMON_H
#define ROPEKIT_BENCH_COMMON_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../bench_time.h" /* now_s, cmp_d */

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
