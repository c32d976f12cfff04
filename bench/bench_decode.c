/* ropekit_bench_decode: one decode token, 32 heads x 128 (Llama), the parts of one call measured
 * separately, interleaved in one process (min over rounds of batches of K calls), AVX2 variant.
 * Results: bench/results-cpu-threads.md.
 *   ropekit_bench_decode [SECONDS [YGAP]]   (YGAP: y placed 16 KiB + YGAP bytes after x)
 *   ropekit_bench_decode count ITEM N       (N calls of one part, untimed: for valgrind counts)
 *   clock   a dependent chain of 8000 imuls (3 cycles each): the core clock
 *   fma     the bare loop's 2048 multiplies/FMAs alone (x in double, y stored as double; 16 KiB
 *           of each, used twice, so that they stay in L1)
 *   cvt     only the contract's 2048 conversions of one f32 token (1024 VCVTPS2PD ymm<-m128 +
 *           1024 VCVTPD2PS xmm<-ymm, with their loads and stores)
 *   bare    the f32 loop alone, flat (256 steps of 8 pairs: 4 cvtps2pd, 4 mul, 4 fma, 4 cvtpd2ps)
 *   bare32  the same as 32 heads x 8 steps (the kernel's loop nest)
 *   plan    argument validation + plan + position-id check (no rotation)
 *   kern    the avx2 kernel on a ready plan (rk_kernels_avx2.rotary)
 *   cpu     rk_cpu_rotary (dispatch, cost model, kernel)
 *   full    ropekit_rotary_embedding (everything)
 *   f16/bf16 full and kern for the 16-bit dtypes (16-bit tables)
 *   B64     decode B = 64, 40 x 128 (random ids): full call; "hot": the kernel on a plan whose
 *           64 tokens all read token 0's x, table row and write its y (arithmetic alone, in L1);
 *           memcpy: x to y, the same bytes (1.3 MB f32, 0.66 MB 16-bit). Only with DEC_B64=1.
 * DEC_VARIANT=avx512: the public calls on that variant (the kern parts stay avx2).
 * Linked with libropekit.a (internal symbols). Built with -mavx2 -mfma -mf16c. */

#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
#define NT 4096 /* elements of one token: 32 x 128 */
#define H2 64   /* pairs per head */
static float xs[NT] __attribute__((aligned(64))), ys[NT] __attribute__((aligned(64)));
static double cd[H2] __attribute__((aligned(64))), sd[H2] __attribute__((aligned(64)));
static float cvt_buf[NT] __attribute__((aligned(64)));

/* The core clock: a dependent chain of imuls (3 cycles each on Intel and AMD cores since
 * Skylake / Zen; a chain of add-immediates is no clock on Golden Cove, whose renamer folds them).
 */
static __attribute__((noinline)) void clock_chain(long iters) {
    long v = 3;
    for (long i = 0; i < iters; ++i)
        __asm__ volatile("imul %0,%0\n\timul %0,%0\n\timul %0,%0\n\timul %0,%0\n\t"
                         "imul %0,%0\n\timul %0,%0\n\timul %0,%0\n\timul %0,%0"
                         : "+r"(v));
}
/* 4096 floats widened (1024 x 4) and 1024 narrowings, as one f32 token needs (the empty asm
 * keeps the compiler from folding each round trip into a copy) */
static __attribute__((noinline)) void cvt_only(void) {
    const float *x = xs;
    float *y = cvt_buf;
    for (int i = 0; i < NT; i += 16) {
        __m256d a = _mm256_cvtps_pd(_mm_load_ps(x + i)),
                b = _mm256_cvtps_pd(_mm_load_ps(x + i + 4));
        __m256d c = _mm256_cvtps_pd(_mm_load_ps(x + i + 8)),
                d = _mm256_cvtps_pd(_mm_load_ps(x + i + 12));
        __asm__("" : "+x"(a), "+x"(b), "+x"(c), "+x"(d));
        _mm_store_ps(y + i, _mm256_cvtpd_ps(a)), _mm_store_ps(y + i + 4, _mm256_cvtpd_ps(b));
        _mm_store_ps(y + i + 8, _mm256_cvtpd_ps(c)), _mm_store_ps(y + i + 12, _mm256_cvtpd_ps(d));
    }
}
/* one step: 8 pairs of one head (a = x[k..k+8), b = x[k+64..k+72)), cos/sin rows c_ and s_ */
#define STEPT(xh, yh, k, c_, s_)                                                                   \
    do {                                                                                           \
        __m256d al = _mm256_cvtps_pd(_mm_load_ps(xh + k)),                                         \
                ah = _mm256_cvtps_pd(_mm_load_ps(xh + k + 4));                                     \
        __m256d bl = _mm256_cvtps_pd(_mm_load_ps(xh + 64 + k)),                                    \
                bh = _mm256_cvtps_pd(_mm_load_ps(xh + 64 + k + 4));                                \
        __m256d cl = _mm256_load_pd(c_ + k), ch = _mm256_load_pd(c_ + k + 4);                      \
        __m256d sl = _mm256_load_pd(s_ + k), sh = _mm256_load_pd(s_ + k + 4);                      \
        _mm_store_ps(yh + k, _mm256_cvtpd_ps(_mm256_fmsub_pd(cl, al, _mm256_mul_pd(sl, bl))));     \
        _mm_store_ps(yh + k + 4, _mm256_cvtpd_ps(_mm256_fmsub_pd(ch, ah, _mm256_mul_pd(sh, bh)))); \
        _mm_store_ps(yh + 64 + k,                                                                  \
                     _mm256_cvtpd_ps(_mm256_fmadd_pd(sl, al, _mm256_mul_pd(cl, bl))));             \
        _mm_store_ps(yh + 64 + k + 4,                                                              \
                     _mm256_cvtpd_ps(_mm256_fmadd_pd(sh, ah, _mm256_mul_pd(ch, bh))));             \
    } while (0)
#define STEP(xh, yh, k) STEPT(xh, yh, k, cd, sd) /* the tables cd/sd of the bare loops */
static double xd[NT / 2] __attribute__((aligned(64))), yd[NT / 2] __attribute__((aligned(64)));
/* the bare loop's 2048 multiplies/FMAs with the same loads and stores but no conversions (x
 * already in double, y stored as double) */
static __attribute__((noinline)) void fma_only(void) {
    for (int hd = 0; hd < 32; ++hd) {
        const double *xh = xd + (hd & 15) * 128; /* 16 KiB of doubles each, twice: L1 */
        double *yh = yd + (hd & 15) * 128;
        for (int k = 0; k < 64; k += 8) {
            __m256d al = _mm256_load_pd(xh + k), ah = _mm256_load_pd(xh + k + 4);
            __m256d bl = _mm256_load_pd(xh + 64 + k), bh = _mm256_load_pd(xh + 64 + k + 4);
            __m256d cl = _mm256_load_pd(cd + k), ch = _mm256_load_pd(cd + k + 4);
            __m256d sl = _mm256_load_pd(sd + k), sh = _mm256_load_pd(sd + k + 4);
            _mm256_store_pd(yh + k, _mm256_fmsub_pd(cl, al, _mm256_mul_pd(sl, bl)));
            _mm256_store_pd(yh + k + 4, _mm256_fmsub_pd(ch, ah, _mm256_mul_pd(sh, bh)));
            _mm256_store_pd(yh + 64 + k, _mm256_fmadd_pd(sl, al, _mm256_mul_pd(cl, bl)));
            _mm256_store_pd(yh + 64 + k + 4, _mm256_fmadd_pd(sh, ah, _mm256_mul_pd(ch, bh)));
        }
    }
}
static __attribute__((noinline)) void bare_flat(void) {
    for (int t = 0; t < 256; ++t) {
        const int hd = t >> 3, k = (t & 7) * 8;
        const float *xh = xs + hd * 128;
        float *yh = ys + hd * 128;
        STEP(xh, yh, k);
    }
}
static __attribute__((noinline)) void bare_heads(void) {
    for (int hd = 0; hd < 32; ++hd) {
        const float *xh = xs + hd * 128;
        float *yh = ys + hd * 128;
        for (int k = 0; k < 64; k += 8)
            STEP(xh, yh, k);
    }
}

/* the same loop nest with the kernel's table layout (STEPT, above): cos and sin rows in one
 * stack union, the sin row 1024 doubles (8 KiB) after the cos row */
static int g_tab_gap = 1024; /* doubles between the cos and the sin row */
static __attribute__((noinline)) void bare_stack(void) {
    double tab[2048 + 64] __attribute__((aligned(64)));
    double *c_ = tab, *s_ = tab + g_tab_gap;
    for (int k = 0; k < 64; k += 4) {
        _mm256_store_pd(c_ + k, _mm256_cvtps_pd(_mm_load_ps(xs + 4000 + k)));
        _mm256_store_pd(s_ + k, _mm256_cvtps_pd(_mm_load_ps(xs + 3000 + k)));
    }
    for (int hd = 0; hd < 32; ++hd) {
        const float *xh = xs + hd * 128;
        float *yh = ys + hd * 128;
        for (int k = 0; k < 64; k += 8)
            STEPT(xh, yh, k, c_, s_);
    }
}

static uint16_t to16(float f, ropekit_dtype t) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (t == ROPEKIT_BFLOAT16) {
        u += 0x7fffu + ((u >> 16) & 1u);
        return (uint16_t)(u >> 16);
    }
    return (uint16_t)_cvtss_sh(f, 0);
}
typedef struct dj {
    ropekit_tensor x, y, c, s, pos;
    ropekit_rotary_embedding_attrs a;
    rk_rotary_plan plan;
} dj;
static void setup_b(dj *j, ropekit_dtype T, int64_t P, int64_t nh, int64_t nt, int64_t B);
static void setup_n(dj *j, ropekit_dtype T, int64_t P, int64_t nh, int64_t nt) {
    setup_b(j, T, P, nh, nt, 1);
}
static void setup(dj *j, ropekit_dtype T, int64_t P) {
    setup_n(j, T, P, 32, NT);
}
static long g_yd = -1; /* >= 0: y = x + 16 KiB + g_yd bytes (one buffer) */
/* B tokens of NTT elements (nh heads), random position ids */
static void setup_b(dj *j, ropekit_dtype T, int64_t P, int64_t nh, int64_t NTT, int64_t B) {
    size_t es = T == ROPEKIT_FLOAT32 ? 4 : 2;
    const size_t xn = (size_t)(B * NTT > NT ? B * NTT : NT);
    void *x = aligned_alloc(64, xn * es), *y = aligned_alloc(64, xn * es); /* NTT <= NT used */
    if (g_yd >= 0 && B == 1) {
        char *b = aligned_alloc(4096, 3 * NT * es + 8192);
        x = b, y = b + NT * 4 + g_yd;
    }
    const int64_t hh = NTT / nh / 2;
    void *c = aligned_alloc(64, P * hh * es), *s = aligned_alloc(64, P * hh * es);
    int64_t *pos = aligned_alloc(64, (size_t)(B * 8 + 64));
    uint32_t r = 12345;
    for (size_t i = 0; i < xn; ++i) {
        r = r * 1664525u + 1013904223u;
        float v = (float)((r >> 8) * (4.0 / 16777216.0) - 2.0);
        if (es == 4)
            ((float *)x)[i] = v;
        else
            ((uint16_t *)x)[i] = to16(v, T);
    }
    for (int64_t i = 0; i < P * hh; ++i) {
        float cv = (float)__builtin_cos(0.001 * i), sv = (float)__builtin_sin(0.001 * i);
        if (es == 4)
            ((float *)c)[i] = cv, ((float *)s)[i] = sv;
        else
            ((uint16_t *)c)[i] = to16(cv, T), ((uint16_t *)s)[i] = to16(sv, T);
    }
    pos[0] = 1234;
    for (int64_t b = 1; b < B; ++b)
        r = r * 1664525u + 1013904223u, pos[b] = (int64_t)((r >> 8) % (uint32_t)P);
    int64_t xsh[3] = {B, 1, NTT}, tsh[2] = {P, hh}, psh[2] = {B, 1};
    j->x = ropekit_tensor_contiguous(x, T, 3, xsh);
    j->y = ropekit_tensor_contiguous(y, T, 3, xsh);
    j->c = ropekit_tensor_contiguous(c, T, 2, tsh);
    j->s = ropekit_tensor_contiguous(s, T, 2, tsh);
    j->pos = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, psh);
    j->a = (ropekit_rotary_embedding_attrs){0, 0, nh, 0};
    if (rk_plan_rotary_embedding(&j->x, &j->c, &j->s, &j->pos, &j->a, &j->y, &j->plan) ||
        rk_check_position_ids(&j->plan)) {
        fprintf(stderr, "plan: %s\n", ropekit_last_error());
        exit(1);
    }
}
static dj J[10];
static rk_rotary_plan g_hot[2]; /* B = 64 plans whose tokens all read token 0's x and write y's */
static volatile int sink;
static void do_plan(dj *j) {
    rk_rotary_plan p;
    rk_clear_error();
    sink += rk_plan_rotary_embedding(&j->x, &j->c, &j->s, &j->pos, &j->a, &j->y, &p);
    sink += rk_check_position_ids(&p);
}
enum {
    I_CLOCK,
    I_FMA,
    I_CVT,
    I_BARE,
    I_BARE32,
    I_BSTK,
    I_BSTK2,
    I_PLAN,
    I_KERN,
    I_CPU,
    I_FULL,
    I_F16F,
    I_F16K,
    I_BF16F,
    I_BF16K,
    I_K8,
    I_K16,
    I_K1,
    I_D64,
    I_D64H,
    I_D64F16,
    I_D64F16H,
    I_D64BF16,
    I_D64CP,
    I_D64CP16,
    NI
};
static const char *iname[NI] = {
    "clock(8k imul)", "fma only",        "cvt only",      "bare flat", "bare 32x8",
    "bare stack8K",   "bare stack64",    "plan+ids",      "kern avx2", "rk_cpu_rotary",
    "full f32",       "full f16",        "kern f16",      "full bf16", "kern bf16",
    "kern f32 8x512", "kern f32 16x256", "kern f32 1x128",
    "B64 f32 full",   "B64 f32 hot",     "B64 f16 full",  "B64 f16 hot", "B64 bf16 full",
    "B64 memcpy f32", "B64 memcpy 16"};
static void run_item(int it) {
    switch (it) {
    case I_CLOCK: clock_chain(1000); break; /* 24000 cycles */
    case I_FMA: fma_only(); break;
    case I_CVT: cvt_only(); break;
    case I_BARE: bare_flat(); break;
    case I_BARE32: bare_heads(); break;
    case I_BSTK:
        g_tab_gap = 1024;
        bare_stack();
        break;
    case I_BSTK2:
        g_tab_gap = 64;
        bare_stack();
        break;
    case I_PLAN: do_plan(&J[0]); break;
    case I_KERN: rk_kernels_avx2.rotary(&J[0].plan); break;
    case I_CPU: rk_cpu_rotary(&J[0].plan); break;
    case I_FULL:
        sink += ropekit_rotary_embedding(&J[0].x, &J[0].c, &J[0].s, &J[0].pos, &J[0].a, &J[0].y);
        break;
    case I_F16F:
        sink += ropekit_rotary_embedding(&J[1].x, &J[1].c, &J[1].s, &J[1].pos, &J[1].a, &J[1].y);
        break;
    case I_F16K: rk_kernels_avx2.rotary(&J[1].plan); break;
    case I_BF16F:
        sink += ropekit_rotary_embedding(&J[2].x, &J[2].c, &J[2].s, &J[2].pos, &J[2].a, &J[2].y);
        break;
    case I_BF16K: rk_kernels_avx2.rotary(&J[2].plan); break;
    case I_K8: rk_kernels_avx2.rotary(&J[3].plan); break;
    case I_K16: rk_kernels_avx2.rotary(&J[4].plan); break;
    case I_K1: rk_kernels_avx2.rotary(&J[5].plan); break;
    case I_D64:
        sink += ropekit_rotary_embedding(&J[6].x, &J[6].c, &J[6].s, &J[6].pos, &J[6].a, &J[6].y);
        break;
    case I_D64H: rk_kernels_avx2.rotary(&g_hot[0]); break;
    case I_D64F16:
        sink += ropekit_rotary_embedding(&J[7].x, &J[7].c, &J[7].s, &J[7].pos, &J[7].a, &J[7].y);
        break;
    case I_D64F16H: rk_kernels_avx2.rotary(&g_hot[1]); break;
    case I_D64BF16:
        sink += ropekit_rotary_embedding(&J[8].x, &J[8].c, &J[8].s, &J[8].pos, &J[8].a, &J[8].y);
        break;
    case I_D64CP: memcpy(J[6].y.data, J[6].x.data, 64 * 5120 * 4); break;
    default: memcpy(J[7].y.data, J[7].x.data, 64 * 5120 * 2); break;
    }
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
int main(int argc, char **argv) {
    double budget = argc > 1 ? atof(argv[1]) : 1.0;
    if (argc > 2 && strcmp(argv[1], "count")) g_yd = atol(argv[2]);
    /* DEC_VARIANT=avx512: the public calls ("full", "plan", "rk_cpu_rotary") on that variant; the
     * "kern" parts are the avx2 kernel always */
    const char *var = getenv("DEC_VARIANT") && *getenv("DEC_VARIANT") ? getenv("DEC_VARIANT") : "avx2";
    if (ropekit_set_cpu_variant(var)) {
        fprintf(stderr, "no %s\n", var);
        return 1;
    }
    printf("variant of the public calls: %s\n", ropekit_cpu_variant());
    for (int i = 0; i < NT; ++i)
        xs[i] = (float)(i % 97) * 0.01f - 0.5f, xd[i % (NT / 2)] = xs[i];
    for (int i = 0; i < H2; ++i)
        cd[i] = 0.5 + i * 1e-3, sd[i] = 0.25 - i * 1e-3;
    setup(&J[0], ROPEKIT_FLOAT32, 4096), setup(&J[1], ROPEKIT_FLOAT16, 4096),
        setup(&J[2], ROPEKIT_BFLOAT16, 4096);
    setup_n(&J[3], ROPEKIT_FLOAT32, 4096, 8, NT), setup_n(&J[4], ROPEKIT_FLOAT32, 4096, 16, NT);
    setup_n(&J[5], ROPEKIT_FLOAT32, 4096, 1, 128);
    /* decode B = 64, 40 x 128 (bench_rows.h's dec64): full calls; "hot": the kernel with every
     * token on token 0's x and y and table row (the arithmetic alone, all in L1) */
    setup_b(&J[6], ROPEKIT_FLOAT32, 4096, 40, 5120, 64);
    setup_b(&J[7], ROPEKIT_FLOAT16, 4096, 40, 5120, 64);
    setup_b(&J[8], ROPEKIT_BFLOAT16, 4096, 40, 5120, 64);
    for (int k = 0; k < 2; ++k) {
        g_hot[k] = J[6 + k].plan;
        g_hot[k].xs[0] = g_hot[k].ys[0] = 0, g_hot[k].pos_bs = 0;
    }
    if (argc > 3 && !strcmp(argv[1], "count")) { /* dec count ITEM N: for instruction counts */
        int it = atoi(argv[2]), n = atoi(argv[3]);
        for (int k = 0; k < n; ++k)
            run_item(it);
        return 0;
    }
    /* the B = 64 parts (100 us each) only with DEC_B64=1: they would take most rounds' time */
    const int ni = getenv("DEC_B64") && atoi(getenv("DEC_B64")) ? NI : I_D64;
    enum { K = 20, MAXR = 20000 };
    static double t[NI][MAXR];
    for (int it = 0; it < ni; ++it)
        for (int k = 0; k < 50; ++k)
            run_item(it);
    int n = 0;
    double end = now() + budget;
    while (n < MAXR && (now() < end || n < 10)) {
        for (int k = 0; k < ni; ++k) {
            int it = (k + n) % ni;
            double a = now();
            for (int r = 0; r < K; ++r)
                run_item(it);
            t[it][n] = (now() - a) / K;
        }
        ++n;
    }
    for (int it = 0; it < ni; ++it)
        qsort(t[it], n, sizeof(double), cmpd);
    double ghz = 24000.0 / (t[I_CLOCK][0] * 1e9);
    printf("x %p y %p (y - x = %ld, mod 4096 = %ld), tables %p\n", J[0].x.data, J[0].y.data,
           (long)((char *)J[0].y.data - (char *)J[0].x.data),
           (long)(((char *)J[0].y.data - (char *)J[0].x.data) & 4095), J[0].c.data);
    printf("rounds %d (x%d calls); clock %.3f GHz (min), %.3f (median)\n", n, K, ghz,
           24000.0 / (t[I_CLOCK][n / 2] * 1e9));
    printf("%-16s %9s %9s %9s\n", "part", "min ns", "med ns", "min cyc");
    for (int it = 1; it < ni; ++it)
        printf("%-16s %9.1f %9.1f %9.0f\n", iname[it], t[it][0] * 1e9, t[it][n / 2] * 1e9,
               t[it][0] * 1e9 * ghz);
    return sink == 12345678 ? 1 : 0;
}
