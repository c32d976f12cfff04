/* AVX2 + FMA + F16C variant (8 float lanes). Compiled with -mavx2 -mfma -mf16c only; run only
 * after dispatch.c has checked the CPU. The kernels are in simd_body.h. */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

typedef __m256 vf;
typedef __m256d vd;
#define VL 8
#define RK_SUFFIX(name) name##_avx2
#include "force_inline.h"
#define RK_V RK_FORCE_INLINE

RK_V vf f_ld(const float *p) {
    return _mm256_loadu_ps(p);
}
RK_V void f_st(float *p, vf v) {
    _mm256_storeu_ps(p, v);
}
RK_V vf ld_f32(const void *p) {
    return _mm256_loadu_ps((const float *)p);
}
RK_V void st_f32(void *p, vf v) {
    _mm256_storeu_ps((float *)p, v);
}
RK_V vf ld_f16(const void *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
RK_V void st_f16(void *p, vf v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, 0));
}
RK_V vf rt_f16(vf v) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, 0));
}
RK_V vf ld_bf16(const void *p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
/* rk_f32_to_bf16 in each 32-bit lane (result in the low 16 bits). */
RK_V __m256i bf16_bits(vf v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                             _mm256_and_si256(hi, _mm256_set1_epi32(1)))),
        16);
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (__builtin_expect(_mm256_movemask_ps(nan) != 0, 0)) /* quiet NaN: top half | quiet bit */
        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)),
                               _mm256_castps_si256(nan));
    return r;
}
RK_V void st_bf16(void *p, vf v) {
    __m256i r = bf16_bits(v);
    __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(pk));
}
RK_V vf rt_bf16(vf v) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits(v), 16));
}

RK_V vf f_set1(float a) {
    return _mm256_set1_ps(a);
}
RK_V vf f_mul(vf a, vf b) {
    return _mm256_mul_ps(a, b);
}
RK_V vf f_add(vf a, vf b) {
    return _mm256_add_ps(a, b);
}
RK_V vf f_sub(vf a, vf b) {
    return _mm256_sub_ps(a, b);
}
RK_V vf f_div(vf a, vf b) {
    return _mm256_div_ps(a, b);
}
RK_V vf f_xor(vf a, vf b) {
    return _mm256_xor_ps(a, b);
}
RK_V vf f_addsub(vf a, vf b) {
    return _mm256_addsub_ps(a, b);
}
RK_V vf f_dupe(vf a) {
    return _mm256_moveldup_ps(a);
}
RK_V vf f_dupo(vf a) {
    return _mm256_movehdup_ps(a);
}
/* max/min return the second operand when either is NaN */
RK_V vf f_max(vf a, vf b) {
    return _mm256_max_ps(a, b);
}
RK_V vf f_min(vf a, vf b) {
    return _mm256_min_ps(a, b);
}
RK_V vf f_abs(vf a) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a);
}
RK_V float f_hmax(vf a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}
/* Round to the FP8-E4M3FN grid, ties to even (|v| <= 448, not NaN): the step is 2^q with
 * q = max(floor(log2|v|) - 3, -9); adding and subtracting 2^(q+23) rounds to it. */
RK_V vf f_e4m3(vf v) {
    __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign, v);
    __m256i e =
        _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(a), 23), _mm256_set1_epi32(127 + 3));
    e = _mm256_max_epi32(e, _mm256_set1_epi32(-9));
    __m256 c = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127 + 23)), 23));
    __m256 r = _mm256_sub_ps(_mm256_add_ps(a, c), c);
    return _mm256_or_ps(r, _mm256_and_ps(sign, v));
}

RK_V vd d_zero(void) {
    return _mm256_setzero_pd();
}
RK_V vd d_lo(vf a) {
    return _mm256_cvtps_pd(_mm256_castps256_ps128(a));
}
RK_V vd d_hi(vf a) {
    return _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
}
RK_V vf d_pack(vd lo, vd hi) {
    return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
}
RK_V vd d_ld(const double *p) {
    return _mm256_loadu_pd(p);
}
RK_V void d_st(double *p, vd v) {
    _mm256_storeu_pd(p, v);
}
RK_V vd d_mul(vd a, vd b) {
    return _mm256_mul_pd(a, b);
}
RK_V vd d_add(vd a, vd b) {
    return _mm256_add_pd(a, b);
}
RK_V vd d_addsub(vd a, vd b) {
    return _mm256_addsub_pd(a, b);
}
RK_V vd d_dupe(vd a) {
    return _mm256_movedup_pd(a);
}
RK_V vd d_dupo(vd a) {
    return _mm256_permute_pd(a, 0xf);
}
RK_V vd d_swap(vd a) {
    return _mm256_permute_pd(a, 0x5);
}
/* Non-temporal (streaming) stores of the same values; p aligned to 16 bytes. */
RK_V void f_st_nt(float *p, vf v) {
    _mm256_stream_ps(p, v);
} /* p aligned to 32 bytes */
RK_V void st_f16_nt(void *p, vf v) {
    _mm_stream_si128((__m128i *)p, _mm256_cvtps_ph(v, 0));
}
RK_V void st_bf16_nt(void *p, vf v) {
    __m256i r = bf16_bits(v);
    _mm_stream_si128((__m128i *)p, _mm256_castsi256_si128(
                                       _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08)));
}
/* The same stores as 16-byte streaming stores (nt16_*: p aligned to 16 bytes only), in address
 * order: outputs 16 bytes into a line (numpy's arrays) streamed without the staging window. */
RK_V void nt16_si256(void *p, __m256i v) {
    _mm_stream_si128((__m128i *)p, _mm256_castsi256_si128(v));
    _mm_stream_si128((__m128i *)p + 1, _mm256_extracti128_si256(v, 1));
}
RK_V void nt16_f32(void *p, vf v) {
    nt16_si256(p, _mm256_castps_si256(v));
}
RK_V void nt16_f16(void *p, vf v) {
    st_f16_nt(p, v);
}
RK_V void nt16_bf16(void *p, vf v) {
    st_bf16_nt(p, v);
}
RK_V void st_fence(void) {
    _mm_sfence();
}
RK_V vd d_ldf(const float *p) {
    return _mm256_cvtps_pd(_mm_loadu_ps(p));
}
RK_V void d_stf(float *p, vd v) {
    _mm_storeu_ps(p, _mm256_cvtpd_ps(v));
}
RK_V vd d_fmsub(vd a, vd b, vd c) {
    return _mm256_fmsub_pd(a, b, c);
}
RK_V vd d_fmadd(vd a, vd b, vd c) {
    return _mm256_fmadd_pd(a, b, c);
}
RK_V vd d_fmaddsub(vd a, vd b, vd c) {
    return _mm256_fmaddsub_pd(a, b, c);
}
/* float a*b -/+ c fused: only where a*b is exact in float (float16 x float16 products) */
#define RK_HAVE_F_FMA 1
RK_V vf f_fmsub(vf a, vf b, vf c) {
    return _mm256_fmsub_ps(a, b, c);
}
RK_V vf f_fmadd(vf a, vf b, vf c) {
    return _mm256_fmadd_ps(a, b, c);
}
RK_V vf f_fmaddsub(vf a, vf b, vf c) {
    return _mm256_fmaddsub_ps(a, b, c);
}

/* ref.c's sixteen-lane sum, lanes j and j+8, j+4, j+2, j+1 added in that order: acc[i] holds
 * lanes 4i..4i+3. */
RK_V double d_reduce16(const vd *acc) {
    __m256d b0 = _mm256_add_pd(acc[0], acc[2]), b1 = _mm256_add_pd(acc[1], acc[3]);
    __m256d b = _mm256_add_pd(b0, b1);
    __m128d c = _mm_add_pd(_mm256_castpd256_pd128(b), _mm256_extractf128_pd(b, 1));
    return _mm_cvtsd_f64(_mm_add_sd(c, _mm_unpackhi_pd(c, c)));
}
RK_V float f_lane0(vf a) {
    return _mm256_cvtss_f32(a);
}

/* even a - (-b), odd a + (-b): ref.c's inverse tail rotation, sg = -1 */
RK_V vd d_subadd_neg(vd a, vd b) {
    return _mm256_blend_pd(_mm256_add_pd(a, b), _mm256_sub_pd(a, b), 0xa);
}

/* 2*VL bfloat16 values as the even (e) and odd (o) elements of 32-bit words, and back (rotary
 * rows: no widening shuffle in, no narrowing pack out; nt: a streaming store, p aligned). */
#define RK_HAVE_BF16_EO 1
RK_V void ld_bf16_eo(const void *p, vf *e, vf *o) {
    __m256i u = _mm256_loadu_si256((const __m256i *)p);
    *e = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    *o = _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u)));
}
/* st_bf16_eo rounds as bf16_bits does, with less work per pair: the odd result stays in the top
 * half (no shift down and back up), a word blend joins the halves, one NaN test covers both. */
RK_V void st_bf16_eo(void *p, vf e, vf o, int nt) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    __m256i ue = _mm256_castps_si256(e), uo = _mm256_castps_si256(o);
    __m256i re = _mm256_srli_epi32(
        _mm256_add_epi32(ue,
                         _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(ue, 16), one))),
        16);
    __m256i ro = _mm256_add_epi32(
        uo, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(uo, 16), one)));
    __m256i r = _mm256_blend_epi16(re, ro, 0xaa); /* low words from re, high words from ro */
    if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(e, o, _CMP_UNORD_Q)) != 0, 0))
        r = _mm256_or_si256(bf16_bits(e), _mm256_slli_epi32(bf16_bits(o), 16)); /* a NaN */
    if (nt == 2)
        nt16_si256(p, r);
    else if (nt)
        _mm256_stream_si256((__m256i *)p, r);
    else
        _mm256_storeu_si256((__m256i *)p, r);
}

/* (*a, *b) = (lanes 0, 2, 4, 6; lanes 1, 3, 5, 7) -> (lanes 0 .. 3; lanes 4 .. 7) */
RK_V void d_unpair(vd *a, vd *b) {
    __m256d lo = _mm256_unpacklo_pd(*a, *b), hi = _mm256_unpackhi_pd(*a, *b); /* 0 1 4 5, 2 3 6 7 */
    *a = _mm256_permute2f128_pd(lo, hi, 0x20);
    *b = _mm256_permute2f128_pd(lo, hi, 0x31);
}
/* QKNorm's bfloat16 sums of squares take 2*VL values as even and odd elements (ld_bf16_eo) */
#define RK_HAVE_BF16_PAIRS 1

#define RK_HAVE_NT 1 /* f_st_nt & co. are streaming stores (rk_sw) */
#define RK_HAVE_NT16 1 /* nt16_*: 16-byte streaming stores (nt = 2) */
#include "simd_body.h"

const rk_cpu_kernels rk_kernels_avx2 = {"avx2", rotary_avx2, qknorm_avx2, regroup_avx2};
#endif
