/* AArch64 NEON variant (4 float lanes; ASIMD is part of every AArch64 CPU). The kernels are in
 * simd_body.h. Streaming stores are plain stores here. Tested on x86 hosts under qemu-user
 * (Debian: gcc-aarch64-linux-gnu qemu-user):
 *   S="src/core/status.c src/core/float16.c src/core/validate.c src/core/tables.c src/cpu/ref.c
 *      src/cpu/dispatch.c src/cpu/neon.c"
 *   aarch64-linux-gnu-gcc -O2 -std=c11 -ffp-contract=off -D_POSIX_C_SOURCE=200809L -Iinclude \
 *       -Isrc/core -static $S tests/test_variants.c -o /tmp/tv -lm -lpthread && qemu-aarch64
 * /tmp/tv */
#if defined(__aarch64__)
#include <arm_neon.h>

typedef float32x4_t vf;
typedef float64x2_t vd;
#define VL 4
#define RK_SUFFIX(name) name##_neon
#include "force_inline.h"
#define RK_V RK_FORCE_INLINE

RK_V vf f_ld(const float *p) {
    return vld1q_f32(p);
}
RK_V void f_st(float *p, vf v) {
    vst1q_f32(p, v);
}
RK_V vf ld_f32(const void *p) {
    return vld1q_f32((const float *)p);
}
RK_V void st_f32(void *p, vf v) {
    vst1q_f32((float *)p, v);
}
/* FCVTL / FCVTN: exact widening; narrowing rounds to nearest even (FPCR default), subnormals kept
 */
RK_V vf ld_f16(const void *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p)));
}
RK_V void st_f16(void *p, vf v) {
    vst1_u16((uint16_t *)p, vreinterpret_u16_f16(vcvt_f16_f32(v)));
}
RK_V vf rt_f16(vf v) {
    return vcvt_f32_f16(vcvt_f16_f32(v));
}
RK_V vf ld_bf16(const void *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p), 16));
}
/* rk_f32_to_bf16 in each 32-bit lane (result in the low 16 bits). */
RK_V uint32x4_t bf16_bits(vf v) {
    uint32x4_t u = vreinterpretq_u32_f32(v), hi = vshrq_n_u32(u, 16);
    uint32x4_t r = vshrq_n_u32(
        vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff), vandq_u32(hi, vdupq_n_u32(1)))), 16);
    uint32x4_t nan = vmvnq_u32(vceqq_f32(v, v));
    return vbslq_u32(nan, vorrq_u32(hi, vdupq_n_u32(0x40)), r);
}
RK_V void st_bf16(void *p, vf v) {
    vst1_u16((uint16_t *)p, vmovn_u32(bf16_bits(v)));
}
RK_V vf rt_bf16(vf v) {
    return vreinterpretq_f32_u32(vshlq_n_u32(bf16_bits(v), 16));
}
RK_V void f_st_nt(float *p, vf v) {
    vst1q_f32(p, v);
}
RK_V void st_f16_nt(void *p, vf v) {
    st_f16(p, v);
}
RK_V void st_bf16_nt(void *p, vf v) {
    st_bf16(p, v);
}
RK_V void st_fence(void) {}

RK_V vf f_set1(float a) {
    return vdupq_n_f32(a);
}
RK_V vf f_mul(vf a, vf b) {
    return vmulq_f32(a, b);
}
RK_V vf f_add(vf a, vf b) {
    return vaddq_f32(a, b);
}
RK_V vf f_sub(vf a, vf b) {
    return vsubq_f32(a, b);
}
RK_V vf f_div(vf a, vf b) {
    return vdivq_f32(a, b);
}
RK_V vf f_xor(vf a, vf b) {
    return vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)));
}
static const uint32_t rk_even_mask[4] = {~0u, 0, ~0u, 0};
RK_V vf f_addsub(vf a, vf b) {
    return vbslq_f32(vld1q_u32(rk_even_mask), vsubq_f32(a, b), vaddq_f32(a, b));
}
RK_V vf f_dupe(vf a) {
    return vtrn1q_f32(a, a);
}
RK_V vf f_dupo(vf a) {
    return vtrn2q_f32(a, a);
}
/* x86 semantics: a > b ? a : b (the second operand when either is NaN) */
RK_V vf f_max(vf a, vf b) {
    return vbslq_f32(vcgtq_f32(a, b), a, b);
}
RK_V vf f_min(vf a, vf b) {
    return vbslq_f32(vcltq_f32(a, b), a, b);
}
RK_V vf f_abs(vf a) {
    return vabsq_f32(a);
}
RK_V float f_hmax(vf a) {
    return vmaxvq_f32(a);
}
RK_V float f_lane0(vf a) {
    return vgetq_lane_f32(a, 0);
}
/* Round to the FP8-E4M3FN grid, ties to even (|v| <= 448, not NaN): the step is 2^q with
 * q = max(floor(log2|v|) - 3, -9); adding and subtracting 2^(q+23) rounds to it. */
RK_V vf f_e4m3(vf v) {
    uint32x4_t u = vreinterpretq_u32_f32(v), sign = vandq_u32(u, vdupq_n_u32(0x80000000u));
    vf a = vabsq_f32(v);
    int32x4_t e = vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_f32(a), 23)),
                            vdupq_n_s32(127 + 3));
    e = vmaxq_s32(e, vdupq_n_s32(-9));
    vf c = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(e, vdupq_n_s32(127 + 23)), 23));
    vf r = vsubq_f32(vaddq_f32(a, c), c);
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(r), sign));
}

RK_V vd d_zero(void) {
    return vdupq_n_f64(0.0);
}
RK_V vd d_lo(vf a) {
    return vcvt_f64_f32(vget_low_f32(a));
}
RK_V vd d_hi(vf a) {
    return vcvt_high_f64_f32(a);
}
RK_V vf d_pack(vd lo, vd hi) {
    return vcvt_high_f32_f64(vcvt_f32_f64(lo), hi);
}
RK_V vd d_ld(const double *p) {
    return vld1q_f64(p);
}
RK_V void d_st(double *p, vd v) {
    vst1q_f64(p, v);
}
RK_V vd d_mul(vd a, vd b) {
    return vmulq_f64(a, b);
}
RK_V vd d_add(vd a, vd b) {
    return vaddq_f64(a, b);
}
static const uint64_t rk_even_mask64[2] = {~0ull, 0};
RK_V vd d_addsub(vd a, vd b) {
    return vbslq_f64(vld1q_u64(rk_even_mask64), vsubq_f64(a, b), vaddq_f64(a, b));
}
RK_V vd d_subadd_neg(vd a, vd b) {
    return vbslq_f64(vld1q_u64(rk_even_mask64), vaddq_f64(a, b), vsubq_f64(a, b));
}
RK_V vd d_dupe(vd a) {
    return vtrn1q_f64(a, a);
}
RK_V vd d_dupo(vd a) {
    return vtrn2q_f64(a, a);
}
RK_V vd d_swap(vd a) {
    return vextq_f64(a, a, 1);
}
RK_V vd d_ldf(const float *p) {
    return vcvt_f64_f32(vld1_f32(p));
}
RK_V void d_stf(float *p, vd v) {
    vst1_f32(p, vcvt_f32_f64(v));
}
/* a*b - c as a*b + (-c): one rounding of the exact value (a zero result is +0, as in ref.c) */
RK_V vd d_fmsub(vd a, vd b, vd c) {
    return vfmaq_f64(vnegq_f64(c), a, b);
}
RK_V vd d_fmadd(vd a, vd b, vd c) {
    return vfmaq_f64(c, a, b);
}
RK_V vd d_fmaddsub(vd a, vd b, vd c) {
    return vbslq_f64(vld1q_u64(rk_even_mask64), d_fmsub(a, b, c), d_fmadd(a, b, c));
}
/* ref.c's sixteen-lane sum: acc[i] holds lanes 2i, 2i+1; lanes j and j+8, j+4, j+2, j+1 added. */
RK_V double d_reduce16(const vd *acc) {
    vd b0 = vaddq_f64(acc[0], acc[4]), b1 = vaddq_f64(acc[1], acc[5]);
    vd b2 = vaddq_f64(acc[2], acc[6]), b3 = vaddq_f64(acc[3], acc[7]);
    vd c0 = vaddq_f64(b0, b2), c1 = vaddq_f64(b1, b3);
    vd d = vaddq_f64(c0, c1);
    return vgetq_lane_f64(d, 0) + vgetq_lane_f64(d, 1);
}

#include "simd_body.h"

const rk_cpu_kernels rk_kernels_neon = {"neon", rotary_neon, qknorm_neon, regroup_neon};
#endif
