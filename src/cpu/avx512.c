/* AVX-512 F/BW/VL variant (16 float lanes). Compiled with -mavx512f -mavx512bw -mavx512vl (and
 * AVX2/FMA/F16C); run only after dispatch.c has checked the CPU. The kernels are in
 * simd_body.h. bfloat16 is rounded with integer arithmetic, except in QKNorm on CPUs with
 * AVX512_BF16: its VCVTNEPS2BF16 reads subnormal inputs as zero, which rk_f32_to_bf16 does not,
 * so it is used only on vectors without one (see bf16_hw_bits). */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

typedef __m512 vf;
typedef __m512d vd;
#define VL 16
#define RK_SUFFIX(name) name##_avx512
#include "force_inline.h"
#define RK_V RK_FORCE_INLINE

RK_V vf f_ld(const float *p) {
    return _mm512_loadu_ps(p);
}
RK_V void f_st(float *p, vf v) {
    _mm512_storeu_ps(p, v);
}
RK_V vf ld_f32(const void *p) {
    return _mm512_loadu_ps(p);
}
RK_V void st_f32(void *p, vf v) {
    _mm512_storeu_ps(p, v);
}
RK_V vf ld_f16(const void *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
RK_V void st_f16(void *p, vf v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, 0));
}
RK_V vf rt_f16(vf v) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, 0));
}
RK_V vf ld_bf16(const void *p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
/* rk_f32_to_bf16 in each 32-bit lane (result in the low 16 bits). */
RK_V __m512i bf16_bits(vf v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                             _mm512_and_si512(hi, _mm512_set1_epi32(1)))),
        16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (__builtin_expect(nan != 0, 0)) /* quiet NaN: the top half with the quiet bit set */
        r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return r;
}
RK_V void st_bf16(void *p, vf v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(bf16_bits(v)));
}
RK_V vf rt_bf16(vf v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(v), 16));
}

RK_V vf f_set1(float a) {
    return _mm512_set1_ps(a);
}
RK_V vf f_mul(vf a, vf b) {
    return _mm512_mul_ps(a, b);
}
RK_V vf f_add(vf a, vf b) {
    return _mm512_add_ps(a, b);
}
RK_V vf f_sub(vf a, vf b) {
    return _mm512_sub_ps(a, b);
}
RK_V vf f_div(vf a, vf b) {
    return _mm512_div_ps(a, b);
}
RK_V vf f_xor(vf a, vf b) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
RK_V vf f_addsub(vf a, vf b) {
    return _mm512_mask_sub_ps(_mm512_add_ps(a, b), 0x5555, a, b);
}
RK_V vf f_dupe(vf a) {
    return _mm512_moveldup_ps(a);
}
RK_V vf f_dupo(vf a) {
    return _mm512_movehdup_ps(a);
}
/* max/min return the second operand when either is NaN */
RK_V vf f_max(vf a, vf b) {
    return _mm512_max_ps(a, b);
}
RK_V vf f_min(vf a, vf b) {
    return _mm512_min_ps(a, b);
}
RK_V vf f_abs(vf a) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff)));
}
RK_V float f_hmax(vf a) {
    return _mm512_reduce_max_ps(a);
}
/* Round to the FP8-E4M3FN grid, ties to even (|v| <= 448, not NaN): the step is 2^q with
 * q = max(floor(log2|v|) - 3, -9); adding and subtracting 2^(q+23) rounds to it. */
RK_V vf f_e4m3(vf v) {
    __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512i u = _mm512_castps_si512(v);
    __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(sign, u));
    __m512i e =
        _mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(a), 23), _mm512_set1_epi32(127 + 3));
    e = _mm512_max_epi32(e, _mm512_set1_epi32(-9));
    __m512 c = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127 + 23)), 23));
    __m512 r = _mm512_sub_ps(_mm512_add_ps(a, c), c);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), _mm512_and_si512(sign, u)));
}

RK_V vd d_zero(void) {
    return _mm512_setzero_pd();
}
RK_V vd d_lo(vf a) {
    return _mm512_cvtps_pd(_mm512_castps512_ps256(a));
}
RK_V vd d_hi(vf a) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
RK_V vf d_pack(vd lo, vd hi) {
    __m512d l = _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)));
    return _mm512_castpd_ps(_mm512_insertf64x4(l, _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
}
RK_V vd d_ld(const double *p) {
    return _mm512_loadu_pd(p);
}
RK_V void d_st(double *p, vd v) {
    _mm512_storeu_pd(p, v);
}
RK_V vd d_mul(vd a, vd b) {
    return _mm512_mul_pd(a, b);
}
RK_V vd d_add(vd a, vd b) {
    return _mm512_add_pd(a, b);
}
RK_V vd d_addsub(vd a, vd b) {
    return _mm512_mask_sub_pd(_mm512_add_pd(a, b), 0x55, a, b);
}
RK_V vd d_dupe(vd a) {
    return _mm512_movedup_pd(a);
}
RK_V vd d_dupo(vd a) {
    return _mm512_permute_pd(a, 0xff);
}
RK_V vd d_swap(vd a) {
    return _mm512_permute_pd(a, 0x55);
}
/* Non-temporal (streaming) stores of the same values; p aligned to 32 bytes. */
RK_V void f_st_nt(float *p, vf v) {
    _mm512_stream_ps(p, v);
} /* p aligned to 64 bytes */
RK_V void st_f16_nt(void *p, vf v) {
    _mm256_stream_si256((__m256i *)p, _mm512_cvtps_ph(v, 0));
}
RK_V void st_bf16_nt(void *p, vf v) {
    _mm256_stream_si256((__m256i *)p, _mm512_cvtepi32_epi16(bf16_bits(v)));
}
/* The same stores as 16-byte streaming stores (nt16_*: p aligned to 16 bytes only), in address
 * order: outputs 16 bytes into a line (numpy's arrays) streamed without the staging window. */
RK_V void nt16_si256(void *p, __m256i v) {
    _mm_stream_si128((__m128i *)p, _mm256_castsi256_si128(v));
    _mm_stream_si128((__m128i *)p + 1, _mm256_extracti128_si256(v, 1));
}
RK_V void nt16_si512(void *p, __m512i v) {
    nt16_si256(p, _mm512_castsi512_si256(v));
    nt16_si256((char *)p + 32, _mm512_extracti64x4_epi64(v, 1));
}
RK_V void nt16_f32(void *p, vf v) {
    nt16_si512(p, _mm512_castps_si512(v));
}
RK_V void nt16_f16(void *p, vf v) {
    nt16_si256(p, _mm512_cvtps_ph(v, 0));
}
RK_V void nt16_bf16(void *p, vf v) {
    nt16_si256(p, _mm512_cvtepi32_epi16(bf16_bits(v)));
}
RK_V void st_fence(void) {
    _mm_sfence();
}
RK_V vd d_ldf(const float *p) {
    return _mm512_cvtps_pd(_mm256_loadu_ps(p));
}
RK_V void d_stf(float *p, vd v) {
    _mm256_storeu_ps(p, _mm512_cvtpd_ps(v));
}
RK_V vd d_fmsub(vd a, vd b, vd c) {
    return _mm512_fmsub_pd(a, b, c);
}
RK_V vd d_fmadd(vd a, vd b, vd c) {
    return _mm512_fmadd_pd(a, b, c);
}
RK_V vd d_fmaddsub(vd a, vd b, vd c) {
    return _mm512_fmaddsub_pd(a, b, c);
}
/* float a*b -/+ c fused: only where a*b is exact in float (float16 x float16 products) */
#define RK_HAVE_F_FMA 1
RK_V vf f_fmsub(vf a, vf b, vf c) {
    return _mm512_fmsub_ps(a, b, c);
}
RK_V vf f_fmadd(vf a, vf b, vf c) {
    return _mm512_fmadd_ps(a, b, c);
}
RK_V vf f_fmaddsub(vf a, vf b, vf c) {
    return _mm512_fmaddsub_ps(a, b, c);
}

/* ref.c's sixteen-lane sum, lanes j and j+8, j+4, j+2, j+1 added in that order: acc[0] holds
 * lanes 0..7, acc[1] lanes 8..15. */
RK_V double d_reduce16(const vd *acc) {
    __m512d a = _mm512_add_pd(acc[0], acc[1]);
    __m256d b = _mm256_add_pd(_mm512_castpd512_pd256(a), _mm512_extractf64x4_pd(a, 1));
    __m128d c = _mm_add_pd(_mm256_castpd256_pd128(b), _mm256_extractf128_pd(b, 1));
    return _mm_cvtsd_f64(_mm_add_sd(c, _mm_unpackhi_pd(c, c)));
}
RK_V float f_lane0(vf a) {
    return _mm512_cvtss_f32(a);
}

/* even a - (-b), odd a + (-b): ref.c's inverse tail rotation, sg = -1 */
RK_V vd d_subadd_neg(vd a, vd b) {
    return _mm512_mask_sub_pd(_mm512_add_pd(a, b), 0xaa, a, b);
}

/* AVX512_BF16's VCVTNEPS2BF16 rounds to nearest even and quiets NaNs as rk_f32_to_bf16 does, but
 * reads a subnormal input as zero. A normal input never rounds to zero, so a vector whose
 * result has no (signed) zero is exact; one with a zero (a zero or subnormal input) is rounded
 * again with integer arithmetic. The instruction is written in assembly so that this file needs
 * no -mavx512bf16; it runs only where rk_avx512_bf16_hw() has seen the CPU support it. */
#define RK_HAVE_BF16_HW 1
RK_V __m256i bf16_hw_bits(vf v) {
    __m256i r;
    __asm__("vcvtneps2bf16 %1, %0" : "=v"(r) : "v"(v));
    if (__builtin_expect(_mm256_testn_epi16_mask(r, _mm256_set1_epi16(0x7fff)) != 0, 0))
        r = _mm512_cvtepi32_epi16(bf16_bits(v));
    return r;
}
RK_V void st_bf16_hw(void *p, vf v) {
    _mm256_storeu_si256((__m256i *)p, bf16_hw_bits(v));
}
RK_V void st_bf16_hw_nt(void *p, vf v) {
    _mm256_stream_si256((__m256i *)p, bf16_hw_bits(v));
}
RK_V void nt16_bf16_hw(void *p, vf v) {
    nt16_si256(p, bf16_hw_bits(v));
}
RK_V vf rt_bf16_hw(vf v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16_hw_bits(v)), 16));
}

/* 32 bfloat16 values from even (e) and odd (o) elements, in order: VCVTNE2PS2BF16 then one word
 * shuffle (zeros and subnormals as in bf16_hw_bits). */
RK_V void st_bf16_hw_pair(void *p, vf e, vf o, int nt) {
    __m512i r;
    __asm__("vcvtne2ps2bf16 %2, %1, %0" : "=v"(r) : "v"(o), "v"(e));
    if (__builtin_expect(_mm512_testn_epi16_mask(r, _mm512_set1_epi16(0x7fff)) != 0, 0))
        r = _mm512_or_si512(bf16_bits(e), _mm512_slli_epi32(bf16_bits(o), 16));
    else
        r = _mm512_permutexvar_epi16(_mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26,
                                                      10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
                                                      19, 3, 18, 2, 17, 1, 16, 0),
                                     r);
    if (nt == 2)
        nt16_si512(p, r);
    else if (nt)
        _mm512_stream_si512((__m512i *)p, r);
    else
        _mm512_storeu_si512(p, r);
}

/* A CPU feature the QKNorm kernels use when present, unless a test turns it off: the CPUID
 * leaf 7 bit (subleaf, register word: 0 EAX .. 3 EDX, bit) read once into *cached (-1 until
 * then), and *sw set by the feature's test hook. */
#include <cpuid.h>
static int rk_leaf7_feature(int *cached, const int *sw, unsigned subleaf, int word, int bit) {
    int hw = __atomic_load_n(cached, __ATOMIC_RELAXED);
    if (hw < 0) {
        unsigned r[4] = {0, 0, 0, 0};
        if (__get_cpuid_max(0, NULL) >= 7) __cpuid_count(7, subleaf, r[0], r[1], r[2], r[3]);
        hw = (int)((r[word] >> bit) & 1u);
        __atomic_store_n(cached, hw, __ATOMIC_RELAXED);
    }
    return hw && !__atomic_load_n(sw, __ATOMIC_RELAXED);
}

/* AVX512_BF16 (CPUID.(EAX=7,ECX=1):EAX bit 5); rk_avx512_force_bf16_sw(1) turns its use off
 * (tests: the integer path of CPUs without it). */
static int g_bf16_hw = -1, g_bf16_sw;
void rk_avx512_force_bf16_sw(int on);
void rk_avx512_force_bf16_sw(int on) {
    __atomic_store_n(&g_bf16_sw, on, __ATOMIC_RELAXED);
}
static int rk_avx512_bf16_hw(void) {
    return rk_leaf7_feature(&g_bf16_hw, &g_bf16_sw, 1, 0, 5);
}
#define RK_BF16_HW_OK() rk_avx512_bf16_hw()

/* 32 bfloat16 values as floats: *e = elements 0, 2, .. 30, *o = elements 1, 3, .. 31. */
#define RK_HAVE_BF16_PAIRS 1
RK_V void ld_bf16_eo(const void *p, vf *e, vf *o) {
    __m512i u = _mm512_loadu_si512(p);
    *e = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    *o = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xffff0000u)));
}
/* The same 2*VL values back from even and odd elements (nt: a streaming store, p aligned). */
#define RK_HAVE_BF16_EO 1
RK_V void st_bf16_eo(void *p, vf e, vf o, int nt) {
    __m512i r = _mm512_or_si512(bf16_bits(e), _mm512_slli_epi32(bf16_bits(o), 16));
    if (nt == 2)
        nt16_si512(p, r);
    else if (nt)
        _mm512_stream_si512((__m512i *)p, r);
    else
        _mm512_storeu_si512(p, r);
}
/* (*a, *b) = (lanes 0, 2, .. 14; lanes 1, 3, .. 15) -> (lanes 0 .. 7; lanes 8 .. 15) */
RK_V void d_unpair(vd *a, vd *b) {
    __m512d e = *a, o = *b;
    *a = _mm512_permutex2var_pd(e, _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0), o);
    *b = _mm512_permutex2var_pd(e, _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4), o);
}

/* 8 float16 values widened to doubles: two narrow conversions beat a wide one, then a lane
 * extract (QKNorm's sums of squares). */
#define RK_HAVE_D_LD_F16 1
RK_V vd d_ld_f16(const void *p) {
    return _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
}

/* AVX512_FP16 (CPUID.(EAX=7,ECX=0):EDX bit 23: Sapphire Rapids and later Xeons), for float16
 * QKNorm only, written in assembly as VCVTNEPS2BF16 above (no -mavx512fp16 for this file).
 * VMULPH multiplies float16 values with one rounding to float16. The float product of two
 * float16 values is exact (at most 22 significant bits), so ref.c's Rt(x * r) for a float16 x and
 * a factor r already rounded to float16 (the query heads' r) is that product rounded once to
 * float16: VMULPH's result, subnormal results included (MXCSR's DAZ and FTZ do not apply to
 * float16 operations; ropekit leaves MXCSR as it finds it). A NaN may differ in payload. Not
 * used for the sums of squares: VCVTPH2PD (8 float16 to doubles) made them slower than
 * VCVTPH2PS + VCVTPS2PD (dev VM, Xeon EMR guest, qk4:f16 hot: 0.71x). rk_avx512_force_f16_sw(1)
 * turns VMULPH off (tests: the code CPUs without it run). */
#define RK_HAVE_F16_HW 1
static int g_f16_hw = -1, g_f16_sw;
void rk_avx512_force_f16_sw(int on);
void rk_avx512_force_f16_sw(int on) {
    __atomic_store_n(&g_f16_sw, on, __ATOMIC_RELAXED);
}
static int rk_avx512_f16_hw(void) {
    return rk_leaf7_feature(&g_f16_hw, &g_f16_sw, 0, 3, 23);
}
#define RK_F16_HW_OK() rk_avx512_f16_hw()
typedef __m512i vh; /* 2*VL float16 values */
/* r (a float16 value, as a float in every lane) in every float16 lane */
RK_V vh h_set1(vf r) {
    __m256i h = _mm512_cvtps_ph(r, 0);
    return _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
}
/* y = Rt(x * r) of 2*VL float16 values (nt: as st_f16's nt; y aligned to 64 bytes for nt = 1) */
RK_V void h_mul_st(void *y, const void *x, vh r, int nt) {
    __m512i v;
    __asm__("vmulph %2, %1, %0" : "=v"(v) : "v"(_mm512_loadu_si512(x)), "v"(r));
    if (nt == 2)
        nt16_si512(y, v);
    else if (nt)
        _mm512_stream_si512((__m512i *)y, v);
    else
        _mm512_storeu_si512(y, v);
}
/* Rt(x * r) of VL float16 values, as floats */
RK_V vf h_mul_ld(const void *x, vh r) {
    __m256i v;
    __asm__("vmulph %2, %1, %0"
            : "=v"(v)
            : "v"(_mm256_loadu_si256((const __m256i *)x)), "v"(_mm512_castsi512_si256(r)));
    return _mm512_cvtph_ps(v);
}

#define RK_HAVE_NT 1 /* f_st_nt & co. are streaming stores (rk_sw) */
#define RK_HAVE_NT16 1 /* nt16_*: 16-byte streaming stores (nt = 2) */
#include "simd_body.h"

const rk_cpu_kernels rk_kernels_avx512 = {"avx512", rotary_avx512, qknorm_avx512, regroup_avx512};
#endif
