/* Benchmark data shared by bench_cpu.c and bench_threads.c: a fixed-seed xorshift generator and
 * fills of random values and of cos/sin tables, rounded to the tensor's dtype. */
#ifndef ROPEKIT_BENCH_DATA_H
#define ROPEKIT_BENCH_DATA_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ropekit.h"

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static inline double urand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * 0x1p-53;
}

static inline uint16_t f32_to_16(float f, ropekit_dtype t) { /* round to nearest even */
    if (t == ROPEKIT_BFLOAT16) {
        uint32_t u;
        memcpy(&u, &f, 4);
        u += 0x7fffu + ((u >> 16) & 1u);
        return (uint16_t)(u >> 16);
    }
    /* float16 by hand (values here are normal and small) */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a < 0x38800000u) return (uint16_t)sign; /* tiny: zero is fine for timing data */
    return (uint16_t)(sign | (((a - 0x38000000u) + 0xfffu + ((a >> 13) & 1u)) >> 13));
}

static inline void fill(void *p, ropekit_dtype t, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; ++i) {
        float v = (float)(lo + (hi - lo) * urand());
        if (t == ROPEKIT_FLOAT32)
            ((float *)p)[i] = v;
        else
            ((uint16_t *)p)[i] = f32_to_16(v, t);
    }
}

/* cos/sin of random angles (rounded to t), so that repeated in-place calls neither grow nor
 * shrink the data (no infinities or subnormals creeping in over thousands of repeats). */
static inline void fill_cos_sin(void *c, void *s, ropekit_dtype t, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        double a = 6.283185307179586 * urand();
        float cv = (float)cos(a), sv = (float)sin(a);
        if (t == ROPEKIT_FLOAT32)
            ((float *)c)[i] = cv, ((float *)s)[i] = sv;
        else
            ((uint16_t *)c)[i] = f32_to_16(cv, t), ((uint16_t *)s)[i] = f32_to_16(sv, t);
    }
}
#endif
