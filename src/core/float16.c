/* float16 / bfloat16 conversions, round to nearest, ties to even. Written from the IEEE 754
 * encodings; tested exhaustively against F16C hardware and numpy in tests/. */
#include <math.h>

#include "internal.h"

float rk_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return rk_f32_from_bits(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp == 0) {                                                           /* zero, subnormal */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return rk_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t rk_f32_to_f16(float f) {
    uint32_t u = rk_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                                    /* below 2^-14: subnormal result */
        uint32_t e = a >> 23;
        if (e < 102) return sign; /* below 2^-25 (and 2^-25 itself ties to 0) */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14 .. 24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((a - 0x38000000u) + 0xfffu + ((a >> 13) & 1u)) >> 13;
    return (uint16_t)(sign | r);
}

/* Round |d| to a grid of `bits` significand bits (including the leading one) whose smallest
 * step is 2^min_q: the result is exactly representable in the target format. */
static double round_to_grid(double ad, int bits, int min_q) {
    int e;
    (void)frexp(ad, &e); /* ad = m * 2^e, m in [0.5, 1) */
    int q = e - bits;
    if (q < min_q) q = min_q;
    return ldexp(nearbyint(ldexp(ad, -q)), q);
}

uint16_t rk_f64_to_f16(double d) {
    uint16_t sign = signbit(d) ? 0x8000u : 0;
    double ad = fabs(d);
    if (isnan(d)) return (uint16_t)(sign | 0x7e00u);
    if (ad >= 65520.0) return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | rk_f32_to_f16((float)round_to_grid(ad, 11, -24)));
}

uint16_t rk_f64_to_bf16(double d) {
    uint16_t sign = signbit(d) ? 0x8000u : 0;
    double ad = fabs(d);
    if (isnan(d)) return (uint16_t)(sign | 0x7fc0u);
    if (ad >= 0x1.ffp127) return (uint16_t)(sign | 0x7f80u); /* halfway past the max rounds up */
    return (uint16_t)(sign | rk_f32_to_bf16((float)round_to_grid(ad, 8, -133)));
}

float rk_e4m3_round(float v) {
    if (isnan(v) || v == 0.0f) return v;
    float av = fabsf(v);
    int e;
    (void)frexpf(av, &e);
    int q = e - 4; /* 3 stored significand bits + the leading one */
    if (q < -9) q = -9;
    float r = ldexpf(nearbyintf(ldexpf(av, -q)), q);
    return v < 0 ? -r : r;
}
