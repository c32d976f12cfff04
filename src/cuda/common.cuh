/* Shared pieces of libropekit_cuda (the .cu files of src/cuda): element types and their exact
 * conversions, raw and 16-byte accesses with cache hints, 16-bit pair rounding, fast division,
 * the device error state, shared-memory addresses and per-warp mbarriers (the sm_90 bulk-copy
 * kernels), and the host helpers and per-family launch entries (run_rotary,
 * run_qknorm, run_regroup) that src/cuda/ropekit_cuda.cu's public functions call. Everything
 * here is inline or a declaration: each .cu file compiles its own copy of the device code. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdlib>
#include <cstdio>
#include <mutex>
#include <new>
#include <type_traits>

extern "C" {
#include "../core/internal.h"
}
#include "ropekit_cuda.h"

namespace rk_cuda {

/* ---- element types ------------------------------------------------------------------------ */

template <int DT> struct Elt;
template <> struct Elt<ROPEKIT_FLOAT32> {
    typedef float raw;
    static __device__ __forceinline__ float ld(raw v) { return v; }
    static __device__ __forceinline__ raw st(float f) { return f; }
};
template <> struct Elt<ROPEKIT_FLOAT16> {
    typedef unsigned short raw;
    static __device__ __forceinline__ float ld(raw v) { return __half2float(__ushort_as_half(v)); }
    static __device__ __forceinline__ raw st(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
template <> struct Elt<ROPEKIT_BFLOAT16> {
    typedef unsigned short raw;
    static __device__ __forceinline__ float ld(raw v) { return __uint_as_float((unsigned)v << 16); }
    static __device__ __forceinline__ raw st(float f) { /* as rk_f32_to_bf16: RN-even, NaN kept */
        const unsigned u = __float_as_uint(f);
        const raw h = __bfloat16_as_ushort(__float2bfloat16_rn(f));
        return (u & 0x7fffffffu) > 0x7f800000u ? (raw)((u >> 16) | 0x0040u) : h;
    }
};
template <int DT> __device__ __forceinline__ float round_to(float f) {
    return Elt<DT>::ld(Elt<DT>::st(f));
}

/* NC table columns (cos cf, sin sf, as loaded) made the values the rotation uses, as ref.c's
 * gather_columns does: times `scale` rounded back to the table type TDT when apply_scale
 * (com.microsoft's scale != 1), sin negated for the inverse rotation (the flat kernel, the
 * decode kernel). */
template <int TDT, int NC>
__device__ __forceinline__ void scale_invert_cols(float *cf, float *sf, bool apply_scale, float scale,
                                                  bool inverse) {
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        if (apply_scale) {
            cf[j] = round_to<TDT>(__fmul_rn(cf[j], scale));
            sf[j] = round_to<TDT>(__fmul_rn(sf[j], scale));
        }
        if (inverse) sf[j] = -sf[j];
    }
}

/* V elements of T at p (16-byte vector when V * sizeof(T) == 16, else V loads at stride st). */
template <int DT, int V>
__device__ __forceinline__ void load_raw(const typename Elt<DT>::raw *p, long long st,
                                         typename Elt<DT>::raw *r) {
    typedef typename Elt<DT>::raw raw;
    if constexpr (V * sizeof(raw) == 16) {
        union { uint4 u; raw e[V]; } t;
        t.u = *reinterpret_cast<const uint4 *>(p);
#pragma unroll
        for (int i = 0; i < V; ++i) r[i] = t.e[i];
    } else {
#pragma unroll
        for (int i = 0; i < V; ++i) r[i] = p[i * st];
    }
}
template <int DT, int V>
__device__ __forceinline__ void store_raw(typename Elt<DT>::raw *p, long long st,
                                          const typename Elt<DT>::raw *r) {
    typedef typename Elt<DT>::raw raw;
    if constexpr (V * sizeof(raw) == 16) {
        union { uint4 u; raw e[V]; } t;
#pragma unroll
        for (int i = 0; i < V; ++i) t.e[i] = r[i];
        *reinterpret_cast<uint4 *>(p) = t.u;
    } else {
#pragma unroll
        for (int i = 0; i < V; ++i) p[i * st] = r[i];
    }
}

/* ---- fast division by a run-time constant (n < 2^31, 1 <= d < 2^31) ----------------------- */

struct FastDiv {
    unsigned d, m, s;
};
inline FastDiv make_div(long long d) {
    FastDiv f;
    f.d = (unsigned)d;
    f.s = 0;
    while ((1ull << f.s) < (unsigned long long)d) ++f.s;
    f.m = (unsigned)(((1ull << 32) * ((1ull << f.s) - (unsigned long long)d)) / (unsigned long long)d + 1);
    return f;
}
__device__ __forceinline__ unsigned fdiv(unsigned n, const FastDiv &f) {
    return (__umulhi(n, f.m) + n) >> f.s;
}

/* ---- error state -------------------------------------------------------------------------- */

enum { ERR_IDS_2D = 0, ERR_IDS_MROPE = 1, ERR_OFFSET = 2 };

struct DevErr {                 /* zeroed = no error */
    unsigned long long count;   /* failed lookups */
    unsigned long long nkey;    /* ~(smallest key): larger is smaller */
    int lock, kind;
    long long stream, b, s, value, rows, seq;
};

/* ---- 16-bit pairs and 16-byte accesses for the flat kernel -------------------------------- */

/* The two elements of a 32-bit word of 16-bit values, as floats (exact). */
template <int DT> __device__ __forceinline__ float lo_of(unsigned w) {
    return Elt<DT>::ld((typename Elt<DT>::raw)(w & 0xffffu));
}
template <int DT> __device__ __forceinline__ float hi_of(unsigned w) {
    if constexpr (DT == ROPEKIT_BFLOAT16) return __uint_as_float(w & 0xffff0000u);
    else return Elt<DT>::ld((typename Elt<DT>::raw)(w >> 16));
}

/* Two floats rounded to a word of 16-bit values (lo in the low half) by one paired conversion
 * instruction, round to nearest even: Elt::st's result for every value but a bfloat16 NaN (the
 * hardware does not promise the CPU's quiet-NaN payload rule). For values known not to be NaN. */
template <int DT> __device__ __forceinline__ unsigned pack2_finite(float lo, float hi) {
    if constexpr (DT == ROPEKIT_FLOAT16) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned *>(&h);
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned *>(&h);
    }
}

/* The same word converted element by element with Elt::st (any value, NaNs by the CPU's rule). */
template <int DT> __device__ __forceinline__ unsigned pack2_each(float lo, float hi) {
    return Elt<DT>::st(lo) | (unsigned)Elt<DT>::st(hi) << 16;
}

/* pack2_finite for any value: a bfloat16 NaN half takes the CPU's rule (quiet, payload kept:
 * the float's top 16 bits | 0x0040), selected without a branch. (Until 2026-12-01 a NaN word
 * was converted again in a branch: one branch per pair cut the rotation into basic blocks of
 * one pair, which ptxas could not interleave; bfloat16 rows ran 2-6 points of the copy behind
 * float16.) float16 NaNs keep the hardware's payload (ropekit_cuda.h). */
template <int DT> __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    const unsigned u = pack2_finite<DT>(lo, hi);
    if constexpr (DT == ROPEKIT_BFLOAT16) {
        const unsigned q = __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632) | 0x00400040u;
        const unsigned m = (isnan(lo) ? 0x0000ffffu : 0u) | (isnan(hi) ? 0xffff0000u : 0u);
        return (u & ~m) | (q & m);
    }
    return u;
}

enum { RK_HINT_X_NOALLOC = 1, RK_HINT_X_STREAM = 2, RK_HINT_Y_STREAM = 4 };

/* 16-byte accesses of x and y, always single vector instructions: written as plain uint4
 * accesses, nvcc split some of them into four 32-bit stores (heads whose loads are
 * conditional). Hints: x is read exactly once, so L1::no_allocate keeps it from evicting the
 * table rows and ids that a token's threads share in L1, and .cs (evict first) also spares
 * L2; y is written once (.cs). Never the read-only (.nc) path for x: y may be x (in place). */
__device__ __forceinline__ uint4 ld_x(const void *p, int hints) {
    uint4 v;
    if (hints & RK_HINT_X_NOALLOC)
        asm("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else if (hints & RK_HINT_X_STREAM)
        asm("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else
        asm("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ void st_y(void *p, uint4 v, int hints) {
    if (hints & RK_HINT_Y_STREAM)
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
                     :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    else
        asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
                     :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
/* 8-byte versions (QKNorm's 16-bit rows: see stage_row). */
__device__ __forceinline__ uint2 ld_x8(const void *p, int hints) {
    uint2 v;
    if (hints & RK_HINT_X_NOALLOC)
        asm("ld.global.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    else if (hints & RK_HINT_X_STREAM)
        asm("ld.global.cs.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    else
        asm("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ void st_y8(void *p, uint2 v, int hints) {
    if (hints & RK_HINT_Y_STREAM)
        asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" :: "l"(p), "r"(v.x), "r"(v.y) : "memory");
    else
        asm volatile("st.global.v2.u32 [%0], {%1, %2};" :: "l"(p), "r"(v.x), "r"(v.y) : "memory");
}
__device__ __forceinline__ unsigned &word(uint4 &v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* ---- shared memory addresses and per-warp mbarriers (the sm_90 bulk-copy kernels: rotary.cu's
 * bulk kernel, qknorm.cu's TMA kernel) ------------------------------------------------------- */

/* The 32-bit shared-window address of p (PTX .shared operands). */
__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
/* A warp's n mbarriers, each expecting `count` arrivals per phase: lane 0 initialises them and
 * fences the initialisation for the async proxy (the bulk copies complete on them); the warp
 * then synchronises. Called by the whole warp. */
__device__ __forceinline__ void warp_mbar_init(unsigned long long *bars, int n, unsigned count) {
    if ((threadIdx.x & 31) == 0) {
        for (int i = 0; i < n; ++i)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bars + i)), "r"(count) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
}
/* Waits until the mbarrier at `bar` (shared address) has completed the phase of parity `par`. */
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned par) {
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred P; mbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2; selp.u32 %0, 1, 0, P; }"
                     : "=r"(done) : "r"(bar), "r"(par) : "memory");
}
#endif

/* ---- host side (src/cuda/ropekit_cuda.cu) ------------------------------------------------- */

ropekit_status cuda_fail(cudaError_t e, const char *what);
ropekit_status launched(const char *what);
int sm_count(void);
inline bool aligned(const void *p, long long elems_ok) { return ((uintptr_t)p % 16 == 0) && elems_ok; }
/* Benchmark knobs, read once (not for users): ROPEKIT_CUDA_HINTS=<RK_HINT_* bits> (cache hints
 * on x and y in the flat and QKNorm kernels, default 5: x L1::no_allocate, y .cs),
 * ROPEKIT_CUDA_QKNORM_PIECE=8|16 (qknorm_piece), ROPEKIT_CUDA_QKNORM_KERNEL=0..5 and
 * ROPEKIT_CUDA_QKNORM_ITEMS=0..64 (qknorm.cu: qknorm_reg_variant, qknorm_items),
 * ROPEKIT_CUDA_DECODE_PIECE=8|16 and ROPEKIT_CUDA_DECODE_HEADS=1|2 (the decode kernel's piece
 * and heads per thread: rotary.cu decode_shape). The rotary kernels' override is
 * ROPEKIT_CUDA_ROTARY_KERNEL=flat|tile|bulk|decode (ropekit_cuda.h; src/cuda/rotary.cu forced_kernel). */
int env_int(const char *name, int lo, int hi, int dflt);
/* The index i of names[i] (n entries; a null entry never matches) equal to the variable's
 * value, dflt when it is unset or names none of them (the kernel overrides: rotary.cu
 * forced_kernel, mrope_pipe.cuh mrope_env_kernel). */
int env_choice(const char *name, const char *const *names, int n, int dflt);
int flat_hints();

} // namespace rk_cuda

struct ropekit_cuda_error_state {
    rk_cuda::DevErr *dev;
    int device;
    int is_default;
};

namespace rk_cuda {
/* The caller's error state, or the current device's default one. */
ropekit_status state_or_default(ropekit_cuda_error_state **st);

/* One launch per call (src/cuda/rotary.cu, qknorm.cu, regroup.cu); plans fully validated. The
 * three rotary operators (RotaryEmbedding, com.microsoft.RotaryEmbedding, MRotaryEmbedding) share
 * run_rotary. */
ropekit_status run_rotary(const rk_rotary_plan *p, void *stream, ropekit_cuda_error_state *errors);
ropekit_status run_qknorm(const rk_qknorm_plan *p, void *stream);
ropekit_status run_regroup(const rk_regroup_plan *p, void *stream);
} // namespace rk_cuda

