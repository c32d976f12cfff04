/* float16 / bfloat16 / FP8-E4M3 conversions: exhaustive where the domain is small, against an
 * independent algorithm (round on a double grid with nearbyint) and against F16C hardware. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
/* F16C is VEX-encoded: it needs the CPU bit and the OS saving YMM state (OSXSAVE + XCR0).
 * Asked once: cpuid traps to the hypervisor in a VM (microseconds), and the probes call this
 * millions of times. */
static int query_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & (1u << 29)) || !(c & (1u << 27))) return 0;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
}
static int have_f16c(void) {
    static int known = -1;
    if (known < 0) known = query_f16c();
    return known;
}
#else
static uint16_t hw_f32_to_f16(float f) { (void)f; return 0; }
static float hw_f16_to_f32(uint16_t h) { (void)h; return 0; }
static int have_f16c(void) { return 0; }
#endif

static int f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }

/* Floats worth converting: every f16 value, the midpoints between neighbours and one float ulp
 * either side, plus random bit patterns. */
static void for_each_probe(void (*fn)(float)) {
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        float v = rk_f16_to_f32((uint16_t)h), w = rk_f16_to_f32((uint16_t)(h + 1));
        fn(v);
        if ((h & 0x7fffu) < 0x7c00u && isfinite(w) && signbit(v) == signbit(w)) {
            float mid = (float)(((double)v + (double)w) / 2);
            fn(mid);
            fn(nextafterf(mid, INFINITY));
            fn(nextafterf(mid, -INFINITY));
        }
    }
    for (int i = 0; i < 2000000; ++i) fn(rk_f32_from_bits((uint32_t)rng_u64()));
    fn(65504.0f), fn(65519.99f), fn(65520.0f), fn(1e30f), fn(INFINITY), fn(-INFINITY), fn(NAN);
}

static long g_mismatch_grid, g_mismatch_hw;
static void probe_f16(float f) {
    uint16_t a = rk_f32_to_f16(f);
    uint16_t b = rk_f64_to_f16((double)f);
    if (isnan(f)) {
        if (!f16_is_nan(a) || !f16_is_nan(b)) ++g_mismatch_grid;
    } else if (a != b) {
        if (g_mismatch_grid++ < 5) printf("  f16 grid mismatch %a: %04x vs %04x\n", f, a, b);
    }
    if (have_f16c()) {
        uint16_t c = hw_f32_to_f16(f);
        if (isnan(f) ? !f16_is_nan(c) : a != c) {
            if (g_mismatch_hw++ < 5) printf("  f16 hw mismatch %a: %04x vs %04x\n", f, a, c);
        }
    }
}

static long g_mismatch_bf16;
static void probe_bf16(float f) {
    uint16_t a = rk_f32_to_bf16(f), b = rk_f64_to_bf16((double)f);
    int bad = isnan(f) ? !((a & 0x7f80u) == 0x7f80u && (a & 0x7fu)) : a != b;
    if (bad && g_mismatch_bf16++ < 5) printf("  bf16 mismatch %a: %04x vs %04x\n", f, a, b);
}

static void test_f16_roundtrip(void) {
    long bad = 0, bad_hw = 0;
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        float v = rk_f16_to_f32((uint16_t)h);
        uint16_t back = rk_f32_to_f16(v);
        if (f16_is_nan((uint16_t)h) ? !f16_is_nan(back) : back != h) ++bad;
        if (have_f16c()) {
            float w = hw_f16_to_f32((uint16_t)h);
            if (isnan(v) ? !isnan(w) : memcmp(&v, &w, 4) != 0) ++bad_hw;
        }
    }
    CHECK(bad == 0, "%ld float16 values do not survive f16 -> f32 -> f16", bad);
    if (have_f16c())
        CHECK(bad_hw == 0, "%ld float16 values decode differently from F16C", bad_hw);
    else
        SKIP("no F16C on this CPU: float16 decode not compared with hardware");
}

static void test_bf16_roundtrip(void) {
    long bad = 0;
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        uint16_t back = rk_f32_to_bf16(rk_bf16_to_f32((uint16_t)h));
        int nan = (h & 0x7f80u) == 0x7f80u && (h & 0x7fu);
        if (nan ? (back & 0x7fu) == 0 : back != h) ++bad;
    }
    CHECK(bad == 0, "%ld bfloat16 values do not survive bf16 -> f32 -> bf16", bad);
}

/* double -> 16-bit must round once: a double just above a float16 midpoint rounds up even when
 * rounding it to float first would land on the midpoint and tie to even (down). */
static void test_f64_single_rounding(void) {
    double one = 1.0, ulp = 0x1p-10;
    double just_above_mid = one + ulp / 2 + 0x1p-40; /* float(.) == one + ulp/2 exactly */
    CHECK((float)just_above_mid == (float)(one + ulp / 2), "test premise");
    CHECK(rk_f32_to_f16((float)just_above_mid) == 0x3c00u, "via float ties to even (down)");
    CHECK(rk_f64_to_f16(just_above_mid) == 0x3c01u, "double -> f16 rounds up once: %04x",
          rk_f64_to_f16(just_above_mid));
    double bf_mid = 1.0 + 0x1p-8 + 0x1p-40;
    CHECK(rk_f64_to_bf16(bf_mid) == 0x3f81u, "double -> bf16 rounds up once: %04x",
          rk_f64_to_bf16(bf_mid));
    CHECK(rk_f64_to_f16(65519.0) == 0x7bffu && rk_f64_to_f16(65520.0) == 0x7c00u,
          "float16 overflow threshold");
    CHECK(rk_f64_to_f16(0x1p-25) == 0 && rk_f64_to_f16(0x1.0000001p-25) == 1,
          "float16 smallest subnormal threshold");
    CHECK(rk_f64_to_f16(-0.0) == 0x8000u && rk_f64_to_bf16(-0.0) == 0x8000u, "negative zero");
    CHECK(rk_f64_to_bf16(0x1p-134) == 0 && rk_f64_to_bf16(0x1.0000001p-134) == 1,
          "bfloat16 smallest subnormal threshold");
}

/* Independent E4M3FN decoder: 1 sign, 4 exponent (bias 7), 3 mantissa; 0x7f/0xff are NaN. */
static double e4m3_decode(int code) {
    int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return s ? -v : v;
}

static void test_e4m3(void) {
    int fixed = 0, ties = 0, n_ties = 0;
    for (int code = 0; code < 0x7f; ++code) { /* positive finite codes; max 0x7e = 448 */
        float v = (float)e4m3_decode(code);
        fixed += rk_e4m3_round(v) == v && rk_e4m3_round(-v) == -v;
        if (code + 1 < 0x7f) {
            double w = e4m3_decode(code + 1), mid = ((double)v + w) / 2;
            float expect = (float)((code & 1) ? w : v); /* ties to the even code */
            ++n_ties;
            ties += rk_e4m3_round((float)mid) == expect &&
                    rk_e4m3_round(nextafterf((float)mid, 1e9f)) == (float)w &&
                    rk_e4m3_round(nextafterf((float)mid, -1e9f)) == v;
        }
    }
    CHECK(fixed == 0x7f, "%d of 127 E4M3 values are fixed points", fixed);
    CHECK(ties == n_ties, "%d of %d E4M3 midpoints round as expected", ties, n_ties);
    CHECK(rk_e4m3_round(448.0f) == 448.0f && rk_e4m3_round(0x1p-10f) == 0.0f &&
              rk_e4m3_round(0x1.01p-10f) == 0x1p-9f,
          "E4M3 max and subnormal edges");
}

int main(void) {
    test_f16_roundtrip();
    test_bf16_roundtrip();
    for_each_probe(probe_f16);
    CHECK(g_mismatch_grid == 0, "%ld float -> float16 conversions differ from the grid method",
          g_mismatch_grid);
    if (have_f16c())
        CHECK(g_mismatch_hw == 0, "%ld float -> float16 conversions differ from F16C",
              g_mismatch_hw);
    else
        SKIP("no F16C on this CPU: float16 encode not compared with hardware");
    for_each_probe(probe_bf16);
    CHECK(g_mismatch_bf16 == 0, "%ld float -> bfloat16 conversions differ from the grid method",
          g_mismatch_bf16);
    test_f64_single_rounding();
    test_e4m3();
    return REPORT();
}
