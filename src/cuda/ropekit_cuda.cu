/* libropekit_cuda: the ropekit operators on NVIDIA GPUs. Contracts: include/ropekit.h and
 * include/ropekit_cuda.h; maths: src/cpu/ref.c (this file follows its rounding points exactly).
 *
 * Flow: the CPU library's plan builders (src/core/validate.c) check every argument without
 * reading tensor data -> a kernel is picked (dtype, table dtype, 16-byte vectors or scalar) ->
 * one launch. Position ids are checked by the kernel (device memory): a bad id's row is never
 * read, its pairs are copied, and the event is recorded in an error state.
 *
 * Kernels
 *   rotary_flat_kernel  RotaryEmbedding (both flavours) and MRotaryEmbedding when channels are
 *                   contiguous and 16-byte chunks fit the layout: one thread per (token, group of
 *                   4 heads, 16-byte chunk), no shared memory, no barrier; rotated chunks before
 *                   copied ones (warp-uniform paths with partial rotary). It issues the 4 heads'
 *                   x loads first (L1::no_allocate), reads the chunk's table columns once (they
 *                   stay in L1/L2 for the other heads), converts them once to the wide type and
 *                   stores with evict-first (.cs) hints. Half-split chunks load lanes [k, k+V)
 *                   and [k+h, k+h+V); interleaved chunks V adjacent lanes; chunks of [R, H) are
 *                   copied bit for bit. Every 16-byte access is one vector instruction (inline
 *                   PTX: nvcc split some plain uint4 stores into four).
 *   rotary_kernel   the same for any strides (one element per lane): a block takes a few
 *                   tokens, gathers their columns into shared memory once, heads reuse them.
 *   qknorm_kernel   a block per 16 rows of one flat list (all kv rows, then all query rows),
 *                   one half-warp per row: the row is staged in shared memory as float, squares
 *                   summed in double in the CPU's sixteen-lane order (lane j = half-warp lane
 *                   j), so the result is the CPU's bit for bit; then the tail is rotated in
 *                   place and the row normalised and stored (16-bit rows with a finite sum of
 *                   squares round two values per instruction; fp8 rounding by bit arithmetic).
 *   regroup_kernel  one thread per 16-byte chunk of a token's row (4 chunks in flight per
 *                   thread), written to its group.
 */
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

namespace {

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
FastDiv make_div(long long d) {
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

__device__ void record_bad(DevErr *e, unsigned long long key, int kind, long long stream,
                           long long b, long long s, long long value, long long rows,
                           long long seq) {
    atomicAdd(&e->count, 1ull);
    const unsigned long long nk = ~key;
    volatile DevErr *v = e;
    if (nk <= v->nkey) return;
    while (atomicCAS(&e->lock, 0, 1) != 0) { /* sm_70+: independent thread scheduling */
    }
    __threadfence();
    if (nk > v->nkey) {
        v->nkey = nk, v->kind = kind, v->stream = stream, v->b = b, v->s = s;
        v->value = value, v->rows = rows, v->seq = seq;
    }
    __threadfence();
    atomicExch(&e->lock, 0);
}

/* ---- rotary ------------------------------------------------------------------------------- */

struct RotArgs {
    const char *x;
    char *y;
    long long xs[4], ys[4];
    long long B, S, T; /* T = B*S tokens */
    int N, H, R, h;
    int interleaved, inverse, apply_scale;
    float scale;
    const char *cos, *sin;
    long long cos_rs, cos_cs, sin_rs, sin_cs, cos_bs, cos_ss, sin_bs, sin_ss;
    int rows;
    long long table_rows;
    const long long *pos;
    long long pos_as, pos_bs, pos_ss;
    int sec0, sec1, sec2, layout, stream_mask;
    int tpb;               /* tokens per block */
    int items, rot_items;  /* per head */
    DevErr *err;
    int ngroups;           /* head groups of G heads (flat kernel) */
    int rot_total;         /* flat kernel: rotation threads per token (ngroups * rot_items) */
    int copy_items;        /* flat kernel: 16-byte chunks of [R, H) per head */
    int tab_vec;           /* table columns contiguous and 16-byte aligned */
    int small;             /* flat thread count and S fit in 31 bits: 32-bit fast division */
    int hints;             /* flat kernel: cache hints on x and y (RK_HINT_*) */
    FastDiv d_per_tok, d_rot_items, d_copy_items, d_S;
};

__device__ __forceinline__ int mrope_stream(const RotArgs &a, int k) {
    if (a.layout == 0) return k < a.sec0 ? 0 : (k < a.sec0 + a.sec1 ? 1 : 2);
    if (k % 3 == 1 && k < 3 * a.sec1) return 1;
    if (k % 3 == 2 && k < 3 * a.sec2) return 2;
    return 0;
}

/* Table row of token (b, s) for id stream `st`; false when it selects no row. */
__device__ __forceinline__ bool token_row(const RotArgs &a, long long b, long long s, int st,
                                          long long *row, long long *value) {
    long long r;
    if (a.rows == RK_ROWS_OFFSET) {
        long long off = a.pos[0];
        *value = off;
        *row = off + s;
        return !(off < 0 || a.S > a.table_rows || off > a.table_rows - a.S);
    }
    if (a.rows == RK_ROWS_MROPE) r = a.pos[st * a.pos_as + b * a.pos_bs + s * a.pos_ss];
    else r = a.pos[b * a.pos_bs + s * a.pos_ss];
    *value = r;
    *row = r;
    return r >= 0 && r < a.table_rows;
}

/* cos/sin of column k for token (b, s) as the rotation uses them; false: copy the pair. */
template <int TDT>
__device__ __forceinline__ bool fetch_cs(const RotArgs &a, long long b, long long s, int k,
                                         float *c, float *sn) {
    typedef typename Elt<TDT>::raw traw;
    long long co, so;
    if (a.rows == RK_ROWS_TABLE_3D) {
        co = b * a.cos_bs + s * a.cos_ss + k * a.cos_cs;
        so = b * a.sin_bs + s * a.sin_ss + k * a.sin_cs;
    } else {
        long long row, value;
        int st = a.rows == RK_ROWS_MROPE ? mrope_stream(a, k) : 0;
        if (!token_row(a, b, s, st, &row, &value)) return false;
        co = row * a.cos_rs + k * a.cos_cs;
        so = row * a.sin_rs + k * a.sin_cs;
    }
    float cv = Elt<TDT>::ld(__ldg(reinterpret_cast<const traw *>(a.cos) + co));
    float sv = Elt<TDT>::ld(__ldg(reinterpret_cast<const traw *>(a.sin) + so));
    if (a.apply_scale) {
        cv = round_to<TDT>(__fmul_rn(cv, a.scale));
        sv = round_to<TDT>(__fmul_rn(sv, a.scale));
    }
    *c = cv;
    *sn = a.inverse ? -sv : sv;
    return true;
}

template <bool WIDE>
__device__ __forceinline__ void rotate(float x0, float x1, typename std::conditional<WIDE, double, float>::type c,
                                       typename std::conditional<WIDE, double, float>::type s,
                                       float *y0, float *y1) {
    if constexpr (WIDE) { /* products exact in double: an fma gives the same bits */
        double a = x0, b = x1;
        *y0 = (float)(c * a - s * b);
        *y1 = (float)(s * a + c * b);
    } else { /* 16-bit x and tables: products exact in float */
        *y0 = c * x0 - s * x1;
        *y1 = s * x0 + c * x1;
    }
}

/* DT: x dtype, TDT: table dtype, V: elements per chunk (16 bytes, or 1 for any strides),
 * SMEM: gather the columns into shared memory (h small enough). */
template <int DT, int TDT, int V, bool SMEM>
__global__ void __launch_bounds__(256) rotary_kernel(const RotArgs a) {
    constexpr bool WIDE = DT == ROPEKIT_FLOAT32 || TDT == ROPEKIT_FLOAT32;
    typedef typename std::conditional<WIDE, double, float>::type W;
    typedef typename Elt<DT>::raw raw;
    extern __shared__ __align__(16) unsigned char smem[];
    long long *xoff = reinterpret_cast<long long *>(smem);
    long long *yoff = xoff + a.tpb, *tb = yoff + a.tpb, *ts = tb + a.tpb;
    W *cw = reinterpret_cast<W *>(ts + a.tpb);
    W *sw = cw + (size_t)a.tpb * a.h;
    unsigned char *ok = reinterpret_cast<unsigned char *>(sw + (size_t)a.tpb * a.h);

    const long long tok0 = (long long)blockIdx.x * a.tpb;
    const int ntok = (int)min((long long)a.tpb, a.T - tok0);
    const int tid = threadIdx.x, nt = blockDim.x;
    for (int i = tid; i < ntok; i += nt) {
        long long t = tok0 + i, b = t / a.S, s = t - b * a.S;
        tb[i] = b, ts[i] = s;
        xoff[i] = b * a.xs[0] + s * a.xs[1];
        yoff[i] = b * a.ys[0] + s * a.ys[1];
    }
    __syncthreads();
    /* out-of-range ids: counted here, once per (token, stream); never used below */
    if (a.err && a.rows != RK_ROWS_TABLE_3D) {
        for (int i = tid; i < ntok * 3; i += nt) {
            int tl = i / 3, st = i - tl * 3;
            if (!((a.stream_mask >> st) & 1)) continue;
            long long row, value, b = tb[tl], s = ts[tl];
            if (token_row(a, b, s, st, &row, &value)) continue;
            int kind = a.rows == RK_ROWS_MROPE ? ERR_IDS_MROPE
                     : a.rows == RK_ROWS_OFFSET ? ERR_OFFSET : ERR_IDS_2D;
            unsigned long long key = (unsigned long long)((a.rows == RK_ROWS_MROPE ? st : 0) * a.B + b) *
                                         (unsigned long long)a.S + (unsigned long long)s;
            record_bad(a.err, key, kind, st, b, s, value, a.table_rows, a.S);
        }
    }
    if constexpr (SMEM) {
        for (int i = tid; i < ntok * a.h; i += nt) {
            int tl = i / a.h, k = i - tl * a.h;
            float c, s;
            bool good = fetch_cs<TDT>(a, tb[tl], ts[tl], k, &c, &s);
            cw[i] = good ? (W)c : (W)1;
            sw[i] = good ? (W)s : (W)0;
            ok[i] = good;
        }
        __syncthreads();
    }
    const int per_tok = a.N * a.items;
    const long long xs3 = a.xs[3], ys3 = a.ys[3];
    for (int i = tid; i < ntok * per_tok; i += nt) {
        const int tl = i / per_tok, r = i - tl * per_tok, n = r / a.items, u = r - n * a.items;
        const raw *xp = reinterpret_cast<const raw *>(a.x) + xoff[tl] + n * a.xs[2];
        raw *yp = reinterpret_cast<raw *>(a.y) + yoff[tl] + n * a.ys[2];
        if (u >= a.rot_items) { /* channels [R, H): copied bit for bit */
            const long long c0 = a.R + (long long)(u - a.rot_items) * V;
            raw v[V];
            load_raw<DT, V>(xp + c0 * xs3, xs3, v);
            store_raw<DT, V>(yp + c0 * ys3, ys3, v);
            continue;
        }
        auto col = [&](int k, W *c, W *s, bool *good) {
            if constexpr (SMEM) {
                int j = tl * a.h + k;
                *c = cw[j], *s = sw[j], *good = ok[j];
            } else {
                float cf, sf;
                *good = fetch_cs<TDT>(a, tb[tl], ts[tl], k, &cf, &sf);
                *c = cf, *s = sf;
            }
        };
        if (!a.interleaved) { /* pairs (k, k+h), k in [k0, k0+V) */
            const long long k0 = (long long)u * V;
            raw va[V], vb[V];
            load_raw<DT, V>(xp + k0 * xs3, xs3, va);
            load_raw<DT, V>(xp + (k0 + a.h) * xs3, xs3, vb);
#pragma unroll
            for (int j = 0; j < V; ++j) {
                W c, s;
                bool good;
                col((int)k0 + j, &c, &s, &good);
                if (good) {
                    float y0, y1;
                    rotate<WIDE>(Elt<DT>::ld(va[j]), Elt<DT>::ld(vb[j]), c, s, &y0, &y1);
                    va[j] = Elt<DT>::st(y0), vb[j] = Elt<DT>::st(y1);
                }
            }
            store_raw<DT, V>(yp + k0 * ys3, ys3, va);
            store_raw<DT, V>(yp + (k0 + a.h) * ys3, ys3, vb);
        } else { /* adjacent pairs: lanes [l0, l0+L) */
            constexpr int L = V >= 2 ? V : 2;
            const long long l0 = (long long)u * L;
            raw v[L];
            load_raw<DT, L>(xp + l0 * xs3, xs3, v);
#pragma unroll
            for (int j = 0; j < L; j += 2) {
                W c, s;
                bool good;
                col((int)(l0 / 2) + j / 2, &c, &s, &good);
                if (good) {
                    float y0, y1;
                    rotate<WIDE>(Elt<DT>::ld(v[j]), Elt<DT>::ld(v[j + 1]), c, s, &y0, &y1);
                    v[j] = Elt<DT>::st(y0), v[j + 1] = Elt<DT>::st(y1);
                }
            }
            store_raw<DT, L>(yp + l0 * ys3, ys3, v);
        }
    }
}


/* Loads NC table values of column k0.. (contiguous, 16-byte aligned when vec) as floats. */
template <int TDT, int NC>
__device__ __forceinline__ void load_cols(const char *base, long long off, long long cs, bool vec,
                                          float *out) {
    typedef typename Elt<TDT>::raw traw;
    const traw *p = reinterpret_cast<const traw *>(base) + off;
    if constexpr ((NC * sizeof(traw)) % 16 == 0) {
        if (vec) {
            constexpr int NV = NC * sizeof(traw) / 16, PER = 16 / sizeof(traw);
#pragma unroll
            for (int v = 0; v < NV; ++v) {
                union { uint4 u; traw e[PER]; } t;
                t.u = __ldg(reinterpret_cast<const uint4 *>(p) + v);
#pragma unroll
                for (int i = 0; i < PER; ++i) out[v * PER + i] = Elt<TDT>::ld(t.e[i]);
            }
            return;
        }
    }
#pragma unroll
    for (int i = 0; i < NC; ++i) out[i] = Elt<TDT>::ld(__ldg(p + i * cs));
}

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

/* pack2_finite for any value: bfloat16 NaNs take the CPU's rule (quiet, payload kept), so a
 * word holding a NaN is converted again element by element. The test is one compare per pair
 * and the branch is never taken on finite data. float16 NaNs keep the hardware's payload
 * (ropekit_cuda.h). */
template <int DT> __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    const unsigned u = pack2_finite<DT>(lo, hi);
    if constexpr (DT == ROPEKIT_BFLOAT16)
        if (__builtin_expect(isnan(lo) || isnan(hi), 0)) return pack2_each<DT>(lo, hi);
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

/* Flat kernel for 16-byte chunks (contiguous channels).
 *
 * Thread shape: one thread per (token, group of G heads, chunk); no shared memory, no barrier.
 * A token's threads are laid out rotation chunks first (ngroups x rot_items), then the copied
 * chunks of [R, H) (ngroups x copy_items), so that with partial rotary (Phi: 2 rotated and 6
 * copied chunks per head) a warp is all rotation or all copy instead of running both paths
 * one after the other with most lanes idle. Blocks of 128 threads (flat_block): measured a
 * little faster than 256 on the 16-bit rows (finer tail).
 *
 * Order inside a rotation thread: the x loads of its G heads first (they do not depend on the
 * ids), then the id and the chunk's table columns (one 16-byte vector per 16 bytes of table;
 * an MRoPE chunk whose columns all read one stream loads like a plain one), converted once and
 * used for the G heads, column by column, so that a column's wide (double) cos/sin live only
 * while it is used. 16-bit results are rounded two at a time (pack2). x is loaded with
 * L1::no_allocate and y stored with .cs (evict first): RK_HINT_*, the largest single gain
 * measured (16-bit Llama rows 80% -> 88-90% of copy).
 *
 * Registers (flat_min_blocks): half-split chunks with G = 4 hold 8 x vectors and 16 table
 * columns; capped at 64 registers (4 blocks of 256 per SM) they spill 150-230 bytes, so they
 * get 80 (3 blocks: measured faster than 4 blocks with spills). G = 2 and adjacent pairs fit
 * in 64 registers. */
template <int G>
constexpr int flat_min_blocks() { return G == 4 ? 3 : 4; }

template <int DT, int TDT, bool IL, int G>
__global__ void __launch_bounds__(256, flat_min_blocks<G>()) rotary_flat_kernel(const RotArgs a) {
    constexpr bool WIDE = DT == ROPEKIT_FLOAT32 || TDT == ROPEKIT_FLOAT32;
    typedef typename std::conditional<WIDE, double, float>::type W;
    typedef typename Elt<DT>::raw raw;
    constexpr int V = 16 / sizeof(raw);
    constexpr int NC = IL ? V / 2 : V; /* table columns per chunk */
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int per_tok = a.ngroups * a.items;
    long long tok, b, s;
    int r;
    if (a.small) {
        const unsigned t32 = fdiv((unsigned)i, a.d_per_tok), b32 = fdiv(t32, a.d_S);
        tok = t32, b = b32, s = t32 - b32 * a.d_S.d, r = (int)((unsigned)i - t32 * (unsigned)per_tok);
    } else {
        tok = i / per_tok, b = tok / a.S, s = tok - b * a.S, r = (int)(i - tok * per_tok);
    }
    if (tok >= a.T) return;
    const int hints = a.hints;
    if (r >= a.rot_total) { /* channels [R, H): copied bit for bit */
        r -= a.rot_total;
        const int grp = (int)fdiv((unsigned)r, a.d_copy_items), u = r - grp * a.copy_items;
        const int n0 = grp * G;
        const long long c0 = a.R + (long long)u * V;
        const raw *xp = reinterpret_cast<const raw *>(a.x) + b * a.xs[0] + s * a.xs[1] + n0 * a.xs[2] + c0;
        raw *yp = reinterpret_cast<raw *>(a.y) + b * a.ys[0] + s * a.ys[1] + n0 * a.ys[2] + c0;
        uint4 v[G];
#pragma unroll
        for (int g = 0; g < G; ++g)
            if (n0 + g < a.N) v[g] = ld_x(xp + g * a.xs[2], hints);
#pragma unroll
        for (int g = 0; g < G; ++g)
            if (n0 + g < a.N) st_y(yp + g * a.ys[2], v[g], hints);
        return;
    }
    const int grp = (int)fdiv((unsigned)r, a.d_rot_items), u = r - grp * a.rot_items;
    const int n0 = grp * G;
    const raw *xp = reinterpret_cast<const raw *>(a.x) + b * a.xs[0] + s * a.xs[1] + n0 * a.xs[2];
    raw *yp = reinterpret_cast<raw *>(a.y) + b * a.ys[0] + s * a.ys[1] + n0 * a.ys[2];
    /* x loads first: they do not depend on the ids */
    const int k0 = u * NC;
    uint4 va[G], vb[G];
#pragma unroll
    for (int g = 0; g < G; ++g)
        if (n0 + g < a.N) {
            const raw *q = xp + g * a.xs[2];
            va[g] = ld_x(q + (IL ? 2 * k0 : k0), hints);
            if (!IL) vb[g] = ld_x(q + k0 + a.h, hints);
        }
    /* out-of-range ids: counted by one thread per token */
    if (a.err && grp == 0 && u == 0 && a.rows != RK_ROWS_TABLE_3D) {
        for (int st = 0; st < 3; ++st) {
            if (!((a.stream_mask >> st) & 1)) continue;
            long long row, value;
            if (token_row(a, b, s, st, &row, &value)) continue;
            int kind = a.rows == RK_ROWS_MROPE ? ERR_IDS_MROPE
                     : a.rows == RK_ROWS_OFFSET ? ERR_OFFSET : ERR_IDS_2D;
            unsigned long long key = (unsigned long long)((a.rows == RK_ROWS_MROPE ? st : 0) * a.B + b) *
                                         (unsigned long long)a.S + (unsigned long long)s;
            record_bad(a.err, key, kind, st, b, s, value, a.table_rows, a.S);
        }
    }
    /* the chunk's columns */
    float cf[NC], sf[NC];
    unsigned good = 0;
    bool whole = true;            /* one table row for every column of the chunk */
    long long co = 0, so = 0;     /* its offsets */
    if (a.rows == RK_ROWS_MROPE) {
        int sts[NC];
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            sts[j] = mrope_stream(a, k0 + j);
            whole = whole && sts[j] == sts[0];
        }
        if (whole) { /* sectioned layouts: chunks rarely straddle a section */
            long long row, value;
            if (token_row(a, b, s, sts[0], &row, &value)) {
                good = (1u << NC) - 1u;
                co = row * a.cos_rs + k0 * a.cos_cs, so = row * a.sin_rs + k0 * a.sin_cs;
            }
        } else { /* columns from several streams: one lookup per stream, one load per column */
            long long rw[3] = {0, 0, 0}, v3;
            bool ok[3] = {false, false, false};
#pragma unroll
            for (int st = 0; st < 3; ++st)
                ok[st] = ((a.stream_mask >> st) & 1) && token_row(a, b, s, st, &rw[st], &v3);
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                const int st = sts[j];
                const long long row = st == 0 ? rw[0] : st == 1 ? rw[1] : rw[2];
                cf[j] = 1.0f, sf[j] = 0.0f;
                if (!(st == 0 ? ok[0] : st == 1 ? ok[1] : ok[2])) continue;
                good |= 1u << j;
                cf[j] = Elt<TDT>::ld(__ldg(reinterpret_cast<const typename Elt<TDT>::raw *>(a.cos) + row * a.cos_rs + (k0 + j) * a.cos_cs));
                sf[j] = Elt<TDT>::ld(__ldg(reinterpret_cast<const typename Elt<TDT>::raw *>(a.sin) + row * a.sin_rs + (k0 + j) * a.sin_cs));
            }
        }
    } else if (a.rows == RK_ROWS_TABLE_3D) {
        good = (1u << NC) - 1u;
        co = b * a.cos_bs + s * a.cos_ss + k0 * a.cos_cs;
        so = b * a.sin_bs + s * a.sin_ss + k0 * a.sin_cs;
    } else {
        long long row, value;
        if (token_row(a, b, s, 0, &row, &value)) {
            good = (1u << NC) - 1u;
            co = row * a.cos_rs + k0 * a.cos_cs, so = row * a.sin_rs + k0 * a.sin_cs;
        }
    }
    if (whole) {
        if (good) {
            load_cols<TDT, NC>(a.cos, co, a.cos_cs, a.tab_vec, cf);
            load_cols<TDT, NC>(a.sin, so, a.sin_cs, a.tab_vec, sf);
        } else {
#pragma unroll
            for (int j = 0; j < NC; ++j) cf[j] = 1.0f, sf[j] = 0.0f;
        }
    }
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        if (a.apply_scale) {
            cf[j] = round_to<TDT>(__fmul_rn(cf[j], a.scale));
            sf[j] = round_to<TDT>(__fmul_rn(sf[j], a.scale));
        }
        if (a.inverse) sf[j] = -sf[j];
    }
    if constexpr (sizeof(raw) == 4) { /* float32 x: a vector holds V floats */
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            if (!((good >> j) & 1)) continue; /* bad id: the pair is copied */
            const W c = cf[j], sn = sf[j];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                unsigned &w0 = word(va[g], IL ? 2 * j : j), &w1 = IL ? word(va[g], 2 * j + 1) : word(vb[g], j);
                float y0, y1;
                rotate<WIDE>(__uint_as_float(w0), __uint_as_float(w1), c, sn, &y0, &y1);
                w0 = __float_as_uint(y0), w1 = __float_as_uint(y1);
            }
        }
    } else if constexpr (IL) { /* 16-bit adjacent pairs: word j holds pair j */
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            if (!((good >> j) & 1)) continue;
            const W c = cf[j], sn = sf[j];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                unsigned &w = word(va[g], j);
                float y0, y1;
                rotate<WIDE>(lo_of<DT>(w), hi_of<DT>(w), c, sn, &y0, &y1);
                w = pack2<DT>(y0, y1);
            }
        }
    } else { /* 16-bit half-split: word q of va/vb holds columns 2q and 2q+1 */
#pragma unroll
        for (int q = 0; q < NC / 2; ++q) {
            const unsigned gm = (good >> (2 * q)) & 3u;
            if (!gm) continue;
            const W c0 = cf[2 * q], s0 = sf[2 * q], c1 = cf[2 * q + 1], s1 = sf[2 * q + 1];
            /* halves whose column had a bad id keep x's bits */
            const unsigned keep = (gm & 1u ? 0u : 0xffffu) | (gm & 2u ? 0u : 0xffff0000u);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                unsigned &wa = word(va[g], q), &wb = word(vb[g], q);
                float ya0, yb0, ya1, yb1;
                rotate<WIDE>(lo_of<DT>(wa), lo_of<DT>(wb), c0, s0, &ya0, &yb0);
                rotate<WIDE>(hi_of<DT>(wa), hi_of<DT>(wb), c1, s1, &ya1, &yb1);
                const unsigned na = pack2<DT>(ya0, ya1), nb = pack2<DT>(yb0, yb1);
                wa = (na & ~keep) | (wa & keep), wb = (nb & ~keep) | (wb & keep);
            }
        }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (n0 + g >= a.N) continue;
        raw *q = yp + g * a.ys[2];
        st_y(q + (IL ? 2 * k0 : k0), va[g], hints);
        if (!IL) st_y(q + k0 + a.h, vb[g], hints);
    }
}

/* ---- QKNormRotaryEmbedding ---------------------------------------------------------------- */

struct QkArgs {
    const char *q, *kv;
    char *q_out, *kv_out;
    long long qs[4], qos[4], kvs[3], kvos[3];
    const float *w;
    long long ws;
    const float *cos, *sin;
    long long cos_s[3], sin_s[3];
    long long S;
    int nh, hd, rd, nope, fp8;
    float eps;
    int rowstride; /* floats per staged row */
    int vec_q_in, vec_q_out, vec_kv_in, vec_kv_out;
    long long T, rows; /* tokens B*S; rows T*(nh+1): every token's kv row, then the query rows */
    int small;         /* rows < 2^31: 32-bit fast division */
    int hints;         /* cache hints on the rows (RK_HINT_*) */
    FastDiv d_nh, d_S; /* by nh and by S */
};

/* As rk_e4m3_round, for |v| <= 448 (the clamp before every call): round to nearest even on the
 * grid of 3 stored significand bits, quantum 2^q with q = e - 4 (frexpf's e) and q >= -9. The
 * rounding is one float addition of 2^(q+23), whose ulp is 2^q (exact for |v| < 2^(q+5)), and
 * its exact subtraction: a handful of instructions where frexpf/ldexpf/rintf cost dozens. */
__device__ __forceinline__ float e4m3_round(float v) {
    if (isnan(v) || v == 0.0f) return v;
    const float av = fabsf(v);
    int q = (int)(__float_as_uint(av) >> 23) - 130; /* frexpf's e - 4 (subnormals: clamped) */
    if (q < -9) q = -9;
    const float big = __uint_as_float((unsigned)(q + 150) << 23); /* 2^(q+23) */
    const float r = __fsub_rn(__fadd_rn(av, big), big);
    return v < 0 ? -r : r;
}

/* 2^ceil(logf(ratio) / ln 2) as the contract computes it (CUDA's logf: within 1 ulp of the
 * CPU's). The power of two is built from its exponent; n stays in [-99, 120] for finite amax. */
__device__ __forceinline__ float fp8_block_scale(float amax) {
    if (!(amax > 0.0f)) return 1.0f;
    const float ratio = fmaxf(__fdiv_rn(amax, 448.0f), 1e-30f);
    const float n = ceilf(__fdiv_rn(logf(ratio), 0.69314718f));
    return n <= 127.0f ? __uint_as_float((unsigned)((int)n + 127) << 23) : __int_as_float(0x7f800000);
}

/* Shared-memory row passes: a half-warp's lanes own float4 chunks (lane*4 + 64*i) when the row
 * length is a multiple of 4, else single channels (lane + 16*i). Passes are separated by
 * __syncwarp, so ownership may change between passes. */
template <typename F>
__device__ __forceinline__ void row_pass(float *buf, int n, int lane, F f) {
    if (n % 4 == 0) {
#pragma unroll 1
        for (int c = lane * 4; c < n; c += 64) {
            float4 v = *reinterpret_cast<float4 *>(buf + c);
            v.x = f(c, v.x), v.y = f(c + 1, v.y), v.z = f(c + 2, v.z), v.w = f(c + 3, v.w);
            *reinterpret_cast<float4 *>(buf + c) = v;
        }
    } else {
#pragma unroll 1
        for (int c = lane; c < n; c += 16) buf[c] = f(c, buf[c]);
    }
}

/* The row as floats in buf. Vector rows: each lane issues up to 4 16-byte loads (a whole
 * 512-channel 16-bit row) before the first conversion, so they are in flight together. */
template <int DT, int V, bool W8>
__device__ __forceinline__ void stage_row(const typename Elt<DT>::raw *p, long long st, int vec,
                                          int n, float *buf, int lane, int hints) {
    typedef typename Elt<DT>::raw raw;
    if constexpr (W8) {
        if (vec) { /* 16-bit, n % 8 == 0, 16-byte aligned: 8-byte pieces (4 channels) */
            /* A 16-byte piece is 8 channels, 32 bytes as floats: lanes' float4 stores 32 bytes
             * apart hit every bank twice (ncu on an H200: 53% of the shared store wavefronts
             * were conflicts). With 4 channels per piece, each float4 store lands next to the
             * neighbour lane's. The 8 loads of a 512-channel row are issued together. */
            constexpr int U = 8;
            for (int c0 = lane * 4; c0 < n; c0 += 64 * U) {
                uint2 r[U];
#pragma unroll
                for (int k = 0; k < U; ++k)
                    if (c0 + k * 64 < n) r[k] = ld_x8(p + c0 + k * 64, hints);
#pragma unroll
                for (int k = 0; k < U; ++k) {
                    const int c = c0 + k * 64;
                    if (c >= n) break;
                    *reinterpret_cast<float4 *>(buf + c) =
                        make_float4(lo_of<DT>(r[k].x), hi_of<DT>(r[k].x), lo_of<DT>(r[k].y), hi_of<DT>(r[k].y));
                }
            }
            return;
        }
    }
    if (vec) { /* n % V == 0, 16-byte aligned */
        constexpr int U = 4;
        for (int c0 = lane * V; c0 < n; c0 += 16 * V * U) {
            uint4 r[U];
#pragma unroll
            for (int k = 0; k < U; ++k)
                if (c0 + k * 16 * V < n) r[k] = ld_x(p + c0 + k * 16 * V, hints);
#pragma unroll
            for (int k = 0; k < U; ++k) {
                const int c = c0 + k * 16 * V;
                if (c >= n) break;
                const unsigned w[4] = {r[k].x, r[k].y, r[k].z, r[k].w};
                if constexpr (V == 4) {
                    *reinterpret_cast<float4 *>(buf + c) = make_float4(
                        __uint_as_float(w[0]), __uint_as_float(w[1]), __uint_as_float(w[2]), __uint_as_float(w[3]));
                } else {
#pragma unroll
                    for (int i = 0; i < 4; i += 2)
                        *reinterpret_cast<float4 *>(buf + c + 2 * i) =
                            make_float4(lo_of<DT>(w[i]), hi_of<DT>(w[i]), lo_of<DT>(w[i + 1]), hi_of<DT>(w[i + 1]));
                }
            }
        }
    } else { /* uncommon layouts: kept rolled, so that they do not set the register count */
#pragma unroll 1
        for (int c = lane; c < n; c += 16) buf[c] = Elt<DT>::ld(p[c * st]);
    }
}

/* Rotates the tail of the row in buf, channels [nope, hd), in place: pair (t, t+1), t even,
 * x = norm(c, buf[c]) (the rounded values of the contract), products in double:
 *   y[t] = x[t]*cos[t] - x[t+1]*sin[t],  y[t+1] = x[t+1]*cos[t+1] + x[t]*sin[t+1].
 * One lane per pair. */
template <typename N>
__device__ __forceinline__ void rope_pass(float *buf, const QkArgs &a, const float *cs,
                                          const float *sn, int lane, N norm) {
#pragma unroll 1
    for (int t = 2 * lane; t < a.rd; t += 32) {
        const int c = a.nope + t;
        float2 v;
        if (a.nope % 2 == 0) v = *reinterpret_cast<const float2 *>(buf + c); /* no bank conflict */
        else v = make_float2(buf[c], buf[c + 1]);
        const double x0 = norm(c, v.x), x1 = norm(c + 1, v.y);
        const double c0 = __ldg(cs + t * a.cos_s[2]), s0 = __ldg(sn + t * a.sin_s[2]);
        const double c1 = __ldg(cs + (t + 1) * a.cos_s[2]), s1 = __ldg(sn + (t + 1) * a.sin_s[2]);
        v = make_float2((float)(x0 * c0 - x1 * s0), (float)(x1 * c1 + x0 * s1));
        if (a.nope % 2 == 0) *reinterpret_cast<float2 *>(buf + c) = v;
        else buf[c] = v.x, buf[c + 1] = v.y;
    }
}

/* Stores the row: channel c < nope as norm(c, buf[c]) rounded to T, the others (already
 * final: rope_pass) rounded to T. fast: no value can be NaN (the caller proved it), so 16-bit
 * chunks of leading channels are rounded two at a time with no NaN test. */
template <int DT, int V, bool W8, typename N>
__device__ __forceinline__ void write_row(typename Elt<DT>::raw *p, long long st, int vec,
                                          const QkArgs &a, const float *buf, int lane, bool fast,
                                          N norm) {
    typedef typename Elt<DT>::raw raw;
    const int nope = a.nope;
    if constexpr (W8) {
        if (vec) { /* 16-bit, 8-byte pieces: float4 reads of buf free of bank conflicts */
#pragma unroll 4
            for (int c = lane * 4; c < a.hd; c += 64) {
                const float4 v = *reinterpret_cast<const float4 *>(buf + c);
                uint2 o;
                if (c + 4 <= nope) {
                    const float y0 = norm(c, v.x), y1 = norm(c + 1, v.y);
                    const float y2 = norm(c + 2, v.z), y3 = norm(c + 3, v.w);
                    if (fast) {
                        o.x = pack2_finite<DT>(y0, y1), o.y = pack2_finite<DT>(y2, y3);
                    } else {
                        o.x = pack2_each<DT>(y0, y1), o.y = pack2_each<DT>(y2, y3);
                    }
                } else {
                    float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                    for (int i = 0; i < 4; ++i) f[i] = c + i < nope ? norm(c + i, f[i]) : f[i];
                    o.x = pack2_each<DT>(f[0], f[1]), o.y = pack2_each<DT>(f[2], f[3]);
                }
                st_y8(p + c, o, a.hints);
            }
            return;
        }
    }
    if (vec) { /* hd % V == 0, 16-byte aligned */
#pragma unroll 2
        for (int c = lane * V; c < a.hd; c += 16 * V) {
            uint4 o;
            unsigned *ow = &o.x;
            if (c + V <= nope) {
#pragma unroll
                for (int i = 0; i < V; i += 4) {
                    const float4 v = *reinterpret_cast<const float4 *>(buf + c + i);
                    const float y0 = norm(c + i, v.x), y1 = norm(c + i + 1, v.y);
                    const float y2 = norm(c + i + 2, v.z), y3 = norm(c + i + 3, v.w);
                    if constexpr (V == 4) {
                        o = make_uint4(__float_as_uint(y0), __float_as_uint(y1), __float_as_uint(y2), __float_as_uint(y3));
                    } else if (fast) {
                        ow[i / 2] = pack2_finite<DT>(y0, y1), ow[i / 2 + 1] = pack2_finite<DT>(y2, y3);
                    } else {
                        ow[i / 2] = pack2_each<DT>(y0, y1), ow[i / 2 + 1] = pack2_each<DT>(y2, y3);
                    }
                }
            } else {
                raw r[V];
#pragma unroll
                for (int i = 0; i < V; ++i) {
                    const float v = buf[c + i];
                    r[i] = Elt<DT>::st(c + i < nope ? norm(c + i, v) : v);
                }
                memcpy(&o, r, 16);
            }
            st_y(p + c, o, a.hints);
        }
    } else {
#pragma unroll 1
        for (int c = lane; c < a.hd; c += 16) p[c * st] = Elt<DT>::st(c < nope ? norm(c, buf[c]) : buf[c]);
    }
}

/* Sum of squares of buf[0, n) in the CPU's sixteen-lane double order; every lane gets it.
 * (A float-sum variant was measured no faster on an H200: the exact order costs nothing.) */
__device__ __forceinline__ float half_warp_ss(const float *buf, int n, int lane, unsigned mask) {
    double acc = 0.0;
#pragma unroll 8
    for (int c = lane; c < n; c += 16) {
        double v = buf[c];
        acc = fma(v, v, acc); /* v*v is exact: same as lane[j] += v*v */
    }
    for (int m = 8; m >= 1; m >>= 1) acc += __shfl_xor_sync(mask, acc, m, 16);
    return (float)acc;
}

/* One half-warp per row, a block per 16 consecutive rows of one flat list: the T kv rows
 * first, then the T*nh query rows (token-major). Every block is full, and the kv rows, whose
 * weight and fp8 passes make them several times slower than a query row, share blocks with
 * each other only (no block holds 15 finished query rows while one kv row runs) and start
 * first, so that their latency hides under the query blocks. (The first version gave each
 * token its own blocks of 16 rows: the kv row had a block of its own, 15 half-warps idle.)
 * The row is staged in shared memory as float: the sum of squares needs the CPU's lane order
 * (lane j: channels j, j+16, ...), the stores vectors (16 bytes; 8 for bfloat16 rows, whose float4
 * staging is then free of bank conflicts: qknorm_piece). (Tried and slower: a grid of
 * resident blocks whose half-warps walk many rows with the next row's loads issued before the
 * current row's arithmetic, 65% vs 78% of copy for float16: 64 registers, 4 blocks per SM.) */
template <int DT, bool W8>
__global__ void __launch_bounds__(256, 5) qknorm_kernel(const QkArgs a) {
    typedef typename Elt<DT>::raw raw;
    constexpr int V = 16 / sizeof(raw);
    extern __shared__ __align__(16) unsigned char smem[];
    const int hw = threadIdx.x >> 4, nhw = blockDim.x >> 4, lane = threadIdx.x & 15;
    const unsigned mask = 0xffffu << (threadIdx.x & 16);
    float *buf = reinterpret_cast<float *>(smem) + (size_t)hw * a.rowstride;
    const float hdf = (float)a.hd;
    const int nope = a.nope;
    for (long long gr = (long long)blockIdx.x * nhw + hw; gr < a.rows; gr += (long long)gridDim.x * nhw) {
        long long t, b, s;
        int row;
        if (gr < a.T) { /* the kv rows first */
            t = gr, row = a.nh;
        } else if (a.small) {
            const unsigned q = (unsigned)(gr - a.T), t32 = fdiv(q, a.d_nh);
            t = t32, row = (int)(q - t32 * (unsigned)a.nh);
        } else {
            t = (gr - a.T) / a.nh, row = (int)(gr - a.T - t * a.nh);
        }
        if (a.small) {
            const unsigned b32 = fdiv((unsigned)t, a.d_S);
            b = b32, s = (unsigned)t - b32 * a.d_S.d;
        } else {
            b = t / a.S, s = t - b * a.S;
        }
        const float *cs = a.rd ? a.cos + b * a.cos_s[0] + s * a.cos_s[1] : nullptr;
        const float *sn = a.rd ? a.sin + b * a.sin_s[0] + s * a.sin_s[1] : nullptr;
        if (row < a.nh) { /* a query head */
            const raw *x = reinterpret_cast<const raw *>(a.q) + b * a.qs[0] + s * a.qs[1] + row * a.qs[2];
            raw *y = reinterpret_cast<raw *>(a.q_out) + b * a.qos[0] + s * a.qos[1] + row * a.qos[2];
            stage_row<DT, V, W8>(x, a.qs[3], a.vec_q_in, a.hd, buf, lane, a.hints);
            __syncwarp(mask);
            const float ss = half_warp_ss(buf, a.hd, lane, mask);
            const float r = round_to<DT>(__fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, hdf), a.eps))));
            /* finite ss means finite x, so with a finite r no x*r is NaN */
            const bool fast = isfinite(ss) && isfinite(r);
            /* rope: Rt(x*r), rotated; nope: x*r (rounded when stored) */
            if (a.rd) {
                rope_pass(buf, a, cs, sn, lane, [&](int, float v) { return round_to<DT>(__fmul_rn(v, r)); });
                __syncwarp(mask);
            }
            write_row<DT, V, W8>(y, a.qos[3], a.vec_q_out, a, buf, lane, fast,
                             [&](int, float v) { return __fmul_rn(v, r); });
        } else { /* the kv row */
            const raw *x = reinterpret_cast<const raw *>(a.kv) + b * a.kvs[0] + s * a.kvs[1];
            raw *y = reinterpret_cast<raw *>(a.kv_out) + b * a.kvos[0] + s * a.kvos[1];
            stage_row<DT, V, W8>(x, a.kvs[2], a.vec_kv_in, a.hd, buf, lane, a.hints);
            __syncwarp(mask);
            const float ss = half_warp_ss(buf, a.hd, lane, mask);
            const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, hdf), a.eps)));
            __syncwarp(mask);
            row_pass(buf, a.hd, lane, [&](int c, float v) {
                return round_to<DT>(__fmul_rn(__fmul_rn(v, r), __ldg(a.w + c * a.ws)));
            });
            __syncwarp(mask);
            if (a.fp8) {
#pragma unroll 1
                for (int c0 = 0; c0 < nope; c0 += 64) {
                    float amax = 0.0f;
                    for (int i = lane; i < 64; i += 16) amax = fmaxf(amax, fabsf(buf[c0 + i]));
                    for (int m = 8; m >= 1; m >>= 1)
                        amax = fmaxf(amax, __shfl_xor_sync(mask, amax, m, 16));
                    const float scale = fp8_block_scale(amax);
                    /* x / scale == x * (1 / scale): scale is a power of two whose reciprocal
                     * is a normal float (or 0 for an infinite scale), so both are the correctly
                     * rounded quotient */
                    const float inv = __frcp_rn(scale);
                    for (int i = lane; i < 64; i += 16) {
                        float q = fminf(fmaxf(__fmul_rn(buf[c0 + i], inv), -448.0f), 448.0f);
                        buf[c0 + i] = __fmul_rn(e4m3_round(q), scale);
                    }
                }
                __syncwarp(mask);
            }
            if (a.rd) {
                rope_pass(buf, a, cs, sn, lane, [](int, float v) { return v; });
                __syncwarp(mask);
            }
            write_row<DT, V, W8>(y, a.kvos[2], a.vec_kv_out, a, buf, lane, false, [](int, float v) { return v; });
        }
        __syncwarp(mask);
    }
}

/* ---- InverseRotaryRegroup ----------------------------------------------------------------- */

struct RgArgs {
    const char *x;
    char *out;
    long long xs[2], os[3];
    const float *cos, *sin;
    long long cos_s[2], sin_s[2];
    long long F, chunks; /* chunks of V per token */
    int hd, nope, gd;
    int small; /* F < 2^31: 32-bit fast division */
    FastDiv d_gd, d_hd;
    int tab_vec; /* cos/sin rows contiguous, pairs 8-byte aligned */
};

#define RK_RG_BATCH 4 /* chunks per thread, all loaded before the first store */

template <int DT, int V>
__global__ void __launch_bounds__(256, 4) regroup_kernel(const RgArgs a) {
    typedef typename Elt<DT>::raw raw;
    const long long n = blockIdx.x;
    const raw *x = reinterpret_cast<const raw *>(a.x) + n * a.xs[0];
    raw *out = reinterpret_cast<raw *>(a.out) + n * a.os[1];
    const float *cs = a.cos ? a.cos + n * a.cos_s[0] : nullptr;
    const float *sn = a.sin ? a.sin + n * a.sin_s[0] : nullptr;
    const long long step = (long long)gridDim.y * blockDim.x;
    for (long long j0 = (long long)blockIdx.y * blockDim.x + threadIdx.x; j0 < a.chunks;
         j0 += RK_RG_BATCH * step) {
        raw v[RK_RG_BATCH][V];
#pragma unroll
        for (int k = 0; k < RK_RG_BATCH; ++k) {
            const long long j = j0 + k * step;
            if (j < a.chunks) load_raw<DT, V>(x + j * V * a.xs[1], a.xs[1], v[k]);
        }
#pragma unroll
        for (int k = 0; k < RK_RG_BATCH; ++k) {
            const long long j = j0 + k * step;
            if (j >= a.chunks) break;
            const long long f0 = j * V;
            long long g, gc;
            int c0;
            if (a.small) {
                const unsigned g32 = fdiv((unsigned)f0, a.d_gd);
                g = g32, gc = (unsigned)f0 - g32 * (unsigned)a.gd;
                c0 = (int)((unsigned)f0 - fdiv((unsigned)f0, a.d_hd) * (unsigned)a.hd);
            } else {
                g = f0 / a.gd, gc = f0 - g * a.gd, c0 = (int)(f0 % a.hd);
            }
            if (c0 + V > a.nope) {
                if constexpr (V > 1) { /* pairs (i, i+1), i even: nope and c0 are even */
                    const float *ct = cs + (c0 - a.nope) * a.cos_s[1], *stb = sn + (c0 - a.nope) * a.sin_s[1];
#pragma unroll
                    for (int i = 0; i < V; i += 2) {
                        if (c0 + i < a.nope) continue; /* copied bit for bit */
                        float2 c2, s2;
                        if (a.tab_vec) { /* rows contiguous, 8-byte aligned pairs */
                            c2 = __ldg(reinterpret_cast<const float2 *>(ct + i));
                            s2 = __ldg(reinterpret_cast<const float2 *>(stb + i));
                        } else {
                            c2 = make_float2(__ldg(ct + i * a.cos_s[1]), __ldg(ct + (i + 1) * a.cos_s[1]));
                            s2 = make_float2(__ldg(stb + i * a.sin_s[1]), __ldg(stb + (i + 1) * a.sin_s[1]));
                        }
                        const double x0 = Elt<DT>::ld(v[k][i]), x1 = Elt<DT>::ld(v[k][i + 1]);
                        const float y0 = (float)(x0 * (double)c2.x + x1 * (double)s2.x);
                        const float y1 = (float)(x1 * (double)c2.y - x0 * (double)s2.y);
                        v[k][i] = Elt<DT>::st(y0), v[k][i + 1] = Elt<DT>::st(y1);
                    }
                } else { /* one channel; its partner is read again */
                    const int c = c0;
                    if (c >= a.nope) {
                        const int t = c - a.nope, t0 = t & ~1;
                        const long long fp = f0 - (t - t0);
                        const double x0 = Elt<DT>::ld(x[fp * a.xs[1]]), x1 = Elt<DT>::ld(x[(fp + 1) * a.xs[1]]);
                        const float yv = t == t0
                            ? (float)(x0 * (double)__ldg(cs + t0 * a.cos_s[1]) + x1 * (double)__ldg(sn + t0 * a.sin_s[1]))
                            : (float)(x1 * (double)__ldg(cs + t * a.cos_s[1]) - x0 * (double)__ldg(sn + t * a.sin_s[1]));
                        v[k][0] = Elt<DT>::st(yv);
                    }
                }
            }
            store_raw<DT, V>(out + g * a.os[0] + gc * a.os[2], a.os[2], v[k]);
        }
    }
}

/* ---- host helpers ------------------------------------------------------------------------- */

ropekit_status cuda_fail(cudaError_t e, const char *what) {
    return rk_fail(ROPEKIT_CUDA_ERROR_RUNTIME, "CUDA error in %s: %s (%s)", what,
                   cudaGetErrorName(e), cudaGetErrorString(e));
}

ropekit_status launched(const char *what) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? ROPEKIT_OK : cuda_fail(e, what);
}

int sm_count(void) {
    int dev = 0, n = 132;
    if (cudaGetDevice(&dev) == cudaSuccess)
        (void)cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 132;
}

bool aligned(const void *p, long long elems_ok) { return ((uintptr_t)p % 16 == 0) && elems_ok; }

} // namespace

struct ropekit_cuda_error_state {
    DevErr *dev;
    int device;
    int is_default;
};

namespace {
std::mutex g_default_mu;
ropekit_cuda_error_state *g_default[64];

ropekit_status state_or_default(ropekit_cuda_error_state **st) {
    if (*st) return ROPEKIT_OK;
    return ropekit_cuda_error_state_default(st);
}

/* ---- rotary launch ------------------------------------------------------------------------ */

template <int DT, int TDT, int V, bool SMEM>
ropekit_status launch_rotary_t(const RotArgs &a, unsigned blocks, size_t shm, cudaStream_t st) {
    rotary_kernel<DT, TDT, V, SMEM><<<blocks, 256, shm, st>>>(a);
    return launched("rotary kernel launch");
}

/* Benchmark knobs, read once (bench/cuda/run_device.sh variants compares them; not for
 * users): ROPEKIT_CUDA_HEADS_PER_THREAD=2|4 (flat kernel G, default 4),
 * ROPEKIT_CUDA_HINTS=<RK_HINT_* bits> (cache hints on x and y in the flat and QKNorm kernels,
 * default 5: x L1::no_allocate, y .cs), ROPEKIT_CUDA_BLOCK=64|128|256 (flat kernel block
 * size, default 128),
 * ROPEKIT_CUDA_QKNORM_PIECE=8|16 (qknorm_piece). */
int env_int(const char *name, int lo, int hi, int dflt) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end = nullptr;
    const long v = strtol(e, &end, 10);
    return *end == 0 && v >= lo && v <= hi ? (int)v : dflt;
}
int flat_heads_per_thread() {
    static const int g = env_int("ROPEKIT_CUDA_HEADS_PER_THREAD", 2, 4, 4) == 2 ? 2 : 4;
    return g;
}
int flat_hints() {
    static const int h = env_int("ROPEKIT_CUDA_HINTS", 0, 7, 5);
    return h;
}
int flat_block() {
    static const int bs = env_int("ROPEKIT_CUDA_BLOCK", 64, 256, 128);
    return bs == 64 || bs == 128 ? bs : 256;
}

template <int DT, int TDT>
ropekit_status launch_rotary_flat(const RotArgs &a, long long threads_total, int G, cudaStream_t st) {
    /* blocks of 256, or smaller ones when that is needed to give every SM two blocks */
    long long bs = flat_block();
    const long long sms = sm_count();
    while (bs > 64 && (threads_total + bs - 1) / bs < 2 * sms) bs /= 2;
    const long long blocks = (threads_total + bs - 1) / bs;
    if (blocks > INT_MAX) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many tokens for one launch");
    const dim3 grid((unsigned)blocks), block((unsigned)bs);
    if (G == 2) {
        if (a.interleaved) rotary_flat_kernel<DT, TDT, true, 2><<<grid, block, 0, st>>>(a);
        else rotary_flat_kernel<DT, TDT, false, 2><<<grid, block, 0, st>>>(a);
    } else {
        if (a.interleaved) rotary_flat_kernel<DT, TDT, true, 4><<<grid, block, 0, st>>>(a);
        else rotary_flat_kernel<DT, TDT, false, 4><<<grid, block, 0, st>>>(a);
    }
    return launched("rotary kernel launch");
}

template <int DT, int TDT>
ropekit_status launch_rotary_scalar(const RotArgs &a, bool smem, unsigned blocks, size_t shm,
                                    cudaStream_t st) {
    return smem ? launch_rotary_t<DT, TDT, 1, true>(a, blocks, shm, st)
                : launch_rotary_t<DT, TDT, 1, false>(a, blocks, shm, st);
}

ropekit_status run_rotary(const rk_rotary_plan *p, void *stream, ropekit_cuda_error_state *errors) {
    if (p->B == 0 || p->S == 0 || p->N == 0) return ROPEKIT_OK;
    if (p->rows != RK_ROWS_TABLE_3D) RK_TRY(state_or_default(&errors));
    const int dt = p->dtype, tdt = p->table_dtype;
    const long long es = (long long)ropekit_dtype_size(p->dtype);
    const int V = (int)(16 / es);
    const long long h = p->R / 2;
    if (p->H > INT_MAX / 4 || p->N > INT_MAX / 4)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "head size or head count too large for the CUDA kernel");
    bool vec = p->xs[3] == 1 && p->ys[3] == 1 && p->H % V == 0 &&
               (p->interleaved ? p->R % V == 0 : h % V == 0) &&
               aligned(p->x, p->xs[0] % V == 0 && p->xs[1] % V == 0 && p->xs[2] % V == 0) &&
               aligned(p->y, p->ys[0] % V == 0 && p->ys[1] % V == 0 && p->ys[2] % V == 0);
    RotArgs a;
    memset(&a, 0, sizeof a);
    a.x = p->x, a.y = p->y;
    for (int i = 0; i < 4; ++i) a.xs[i] = p->xs[i], a.ys[i] = p->ys[i];
    a.B = p->B, a.S = p->S, a.T = p->B * p->S;
    a.N = (int)p->N, a.H = (int)p->H, a.R = (int)p->R, a.h = (int)h;
    a.interleaved = p->interleaved, a.inverse = p->inverse, a.apply_scale = p->apply_scale;
    a.scale = p->scale;
    a.cos = p->cos, a.sin = p->sin;
    a.cos_rs = p->cos_rs, a.cos_cs = p->cos_cs, a.sin_rs = p->sin_rs, a.sin_cs = p->sin_cs;
    a.cos_bs = p->cos_bs, a.cos_ss = p->cos_ss, a.sin_bs = p->sin_bs, a.sin_ss = p->sin_ss;
    a.rows = (int)p->rows;
    a.table_rows = p->table_rows;
    a.pos = reinterpret_cast<const long long *>(p->pos);
    a.pos_as = p->pos_as, a.pos_bs = p->pos_bs, a.pos_ss = p->pos_ss;
    a.sec0 = (int)p->mrope_section[0], a.sec1 = (int)p->mrope_section[1];
    a.sec2 = (int)p->mrope_section[2], a.layout = p->mrope_layout;
    a.stream_mask = 1;
    if (p->rows == RK_ROWS_MROPE) {
        a.stream_mask = 0;
        for (long long k = 0; k < h; ++k)
            a.stream_mask |= 1 << rk_mrope_stream(p->mrope_section, p->mrope_layout, k);
    }
    const int vv = vec ? V : 1;
    a.rot_items = p->interleaved ? (vec ? (int)(p->R / V) : (int)h) : (int)(h / vv);
    a.items = a.rot_items + (int)((p->H - p->R) / vv);
    a.err = errors ? errors->dev : nullptr;
    const long long per_tok = (long long)a.N * a.items;
    if (per_tok > INT_MAX / 2)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "num_heads * head_size too large for the CUDA kernel");
    const bool wide = dt == ROPEKIT_FLOAT32 || tdt == ROPEKIT_FLOAT32;
    const bool smem = h <= 2048;
    const size_t col_bytes = smem ? (size_t)h * (2 * (wide ? 8 : 4) + 1) : 0;
    long long tpb = per_tok >= 1024 ? 1 : 1024 / per_tok;
    if (tpb > 64) tpb = 64;
    const long long sms = sm_count();
    while (tpb > 1 && (a.T + tpb - 1) / tpb < 2 * sms) tpb /= 2;
    auto shm_of = [&](long long n) { return (size_t)n * (32 + col_bytes) + 16; };
    while (tpb > 1 && shm_of(tpb) > 48 * 1024) --tpb;
    a.tpb = (int)tpb;
    const long long blocks = (a.T + tpb - 1) / tpb;
    if (blocks > INT_MAX) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many tokens for one launch");
    cudaStream_t st = (cudaStream_t)stream;
    const size_t shm = shm_of(tpb);
    /* flat kernel: 16-byte chunks, G = 4 heads per thread (ROPEKIT_CUDA_HEADS_PER_THREAD=2|4,
     * for benchmarks; 2 and 8 were measured slower on an H200, and so were a variant looping
     * over head groups with the next group's loads in flight, and copy threads of 8 heads for
     * [R, H) (Phi float16 78% vs 83% of copy)) */
    const int G = flat_heads_per_thread();
    a.ngroups = (int)((p->N + G - 1) / G);
    a.rot_total = a.ngroups * a.rot_items;
    a.copy_items = a.items - a.rot_items;
    a.hints = flat_hints();
    const long long flat_total = a.T * a.ngroups * (long long)a.items;
    a.small = flat_total < (1ll << 31) - 1024 && a.S < (1ll << 31);
    a.d_per_tok = make_div((long long)a.ngroups * a.items);
    a.d_rot_items = make_div(a.rot_items > 0 ? a.rot_items : 1);
    a.d_copy_items = make_div(a.copy_items > 0 ? a.copy_items : 1);
    a.d_S = make_div(a.S < (1ll << 31) ? a.S : 1);
    {
        const long long tes = (long long)ropekit_dtype_size(p->table_dtype), per = 16 / tes;
        const bool t3 = p->rows == RK_ROWS_TABLE_3D;
        a.tab_vec = p->cos_cs == 1 && p->sin_cs == 1 && (uintptr_t)p->cos % 16 == 0 &&
                    (uintptr_t)p->sin % 16 == 0 &&
                    (t3 ? p->cos_bs % per == 0 && p->cos_ss % per == 0 && p->sin_bs % per == 0 &&
                              p->sin_ss % per == 0
                        : p->cos_rs % per == 0 && p->sin_rs % per == 0);
    }
#define RK_ROT(DT_, TDT_)                                                                        \
    return vec ? launch_rotary_flat<DT_, TDT_>(a, flat_total, G, st)                             \
               : launch_rotary_scalar<DT_, TDT_>(a, smem, (unsigned)blocks, shm, st)
    if (dt == ROPEKIT_FLOAT32) RK_ROT(ROPEKIT_FLOAT32, ROPEKIT_FLOAT32);
    if (dt == ROPEKIT_FLOAT16) {
        if (tdt == ROPEKIT_FLOAT32) RK_ROT(ROPEKIT_FLOAT16, ROPEKIT_FLOAT32);
        RK_ROT(ROPEKIT_FLOAT16, ROPEKIT_FLOAT16);
    }
    if (tdt == ROPEKIT_FLOAT32) RK_ROT(ROPEKIT_BFLOAT16, ROPEKIT_FLOAT32);
    RK_ROT(ROPEKIT_BFLOAT16, ROPEKIT_BFLOAT16);
#undef RK_ROT
}

/* ---- qknorm / regroup launch -------------------------------------------------------------- */

template <int DT, bool W8>
ropekit_status launch_qknorm_t(const QkArgs &a, int threads, size_t shm, cudaStream_t st) {
    if (shm > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(qknorm_kernel<DT, W8>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm);
        if (e != cudaSuccess) return cuda_fail(e, "qknorm shared memory");
    }
    const long long per = threads / 16;
    long long blocks = (a.rows + per - 1) / per;
    if (blocks > (1ll << 30)) blocks = 1ll << 30; /* the kernel loops over the rest */
    qknorm_kernel<DT, W8><<<(unsigned)blocks, threads, shm, st>>>(a);
    return launched("qknorm kernel launch");
}
/* Bytes per global access of a 16-bit QKNorm row: bfloat16 8 (conflict-free staging: 76% of
 * copy vs 73% with 16), float16 16 (78.5% vs 76%: its conversions cost more than the bank
 * conflicts; H200, same calls). ROPEKIT_CUDA_QKNORM_PIECE=8|16 forces one (timing knob). */
int qknorm_piece(ropekit_dtype dt) {
    static const int forced = env_int("ROPEKIT_CUDA_QKNORM_PIECE", 8, 16, 0);
    if (forced == 8 || forced == 16) return forced;
    return dt == ROPEKIT_BFLOAT16 ? 8 : 16;
}

ropekit_status run_qknorm(const rk_qknorm_plan *p, void *stream) {
    if (p->B == 0 || p->S == 0) return ROPEKIT_OK;
    if (p->head_dim > (1 << 20) || p->num_heads > INT_MAX - 1)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "head_dim or num_heads too large for the CUDA kernel");
    const long long es = (long long)ropekit_dtype_size(p->dtype), V = 16 / es;
    QkArgs a;
    memset(&a, 0, sizeof a);
    a.q = p->q, a.kv = p->kv, a.q_out = p->q_out, a.kv_out = p->kv_out;
    for (int i = 0; i < 4; ++i) a.qs[i] = p->qs[i], a.qos[i] = p->qos[i];
    for (int i = 0; i < 3; ++i) a.kvs[i] = p->kvs[i], a.kvos[i] = p->kvos[i];
    a.w = p->w, a.ws = p->ws;
    a.cos = p->cos, a.sin = p->sin;
    for (int i = 0; i < 3; ++i) a.cos_s[i] = p->cos_s[i], a.sin_s[i] = p->sin_s[i];
    a.S = p->S;
    a.nh = (int)p->num_heads, a.hd = (int)p->head_dim, a.rd = (int)p->rope_dim;
    a.nope = (int)p->nope, a.fp8 = p->simulate_fp8, a.eps = p->epsilon;
    const bool hv = p->head_dim % V == 0;
    a.vec_q_in = hv && p->qs[3] == 1 && aligned(p->q, p->qs[0] % V == 0 && p->qs[1] % V == 0 && p->qs[2] % V == 0);
    a.vec_q_out = hv && p->qos[3] == 1 && aligned(p->q_out, p->qos[0] % V == 0 && p->qos[1] % V == 0 && p->qos[2] % V == 0);
    a.vec_kv_in = hv && p->kvs[2] == 1 && aligned(p->kv, p->kvs[0] % V == 0 && p->kvs[1] % V == 0);
    a.vec_kv_out = hv && p->kvos[2] == 1 && aligned(p->kv_out, p->kvos[0] % V == 0 && p->kvos[1] % V == 0);
    a.rowstride = (int)((p->head_dim + 31) / 32 * 32 + 16);
    const size_t row_bytes = (size_t)a.rowstride * 4;
    int dev = 0, max_optin = 48 * 1024;
    if (cudaGetDevice(&dev) == cudaSuccess)
        (void)cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    /* 16 half-warps (256 threads) when their rows fit in 48 KB, fewer (down to one warp) else */
    int nhw = 16;
    while (nhw > 2 && row_bytes * nhw > 48 * 1024) nhw -= 2;
    if (row_bytes * nhw > (size_t)max_optin)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "head_dim = %lld too large for the CUDA kernel",
                       (long long)p->head_dim);
    const long long tokens = p->B * p->S;
    if (tokens > LLONG_MAX / ((long long)p->num_heads + 1))
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many rows for one launch");
    a.T = tokens, a.rows = tokens * (p->num_heads + 1);
    a.hints = flat_hints();
    a.small = a.rows < (1ll << 31) - 1024;
    a.d_nh = make_div(p->num_heads);
    a.d_S = make_div(p->S < (1ll << 31) ? p->S : 1);
    cudaStream_t st = (cudaStream_t)stream;
    const size_t shm = row_bytes * nhw;
    if (p->dtype == ROPEKIT_FLOAT32) return launch_qknorm_t<ROPEKIT_FLOAT32, false>(a, nhw * 16, shm, st);
    const bool w8 = qknorm_piece(p->dtype) == 8;
    if (p->dtype == ROPEKIT_FLOAT16)
        return w8 ? launch_qknorm_t<ROPEKIT_FLOAT16, true>(a, nhw * 16, shm, st)
                  : launch_qknorm_t<ROPEKIT_FLOAT16, false>(a, nhw * 16, shm, st);
    return w8 ? launch_qknorm_t<ROPEKIT_BFLOAT16, true>(a, nhw * 16, shm, st)
              : launch_qknorm_t<ROPEKIT_BFLOAT16, false>(a, nhw * 16, shm, st);
}

template <int DT, int V>
ropekit_status launch_regroup_t(const RgArgs &a, long long n, cudaStream_t st) {
    long long per = (a.chunks + 256 * RK_RG_BATCH - 1) / (256 * RK_RG_BATCH);
    if (per < 1) per = 1;
    if (per > 65535) per = 65535;
    int threads = a.chunks < 256 ? (int)((a.chunks + 31) / 32 * 32) : 256;
    regroup_kernel<DT, V><<<dim3((unsigned)n, (unsigned)per), threads, 0, st>>>(a);
    return launched("regroup kernel launch");
}

ropekit_status run_regroup(const rk_regroup_plan *p, void *stream) {
    if (p->N == 0) return ROPEKIT_OK;
    if (p->N > INT_MAX) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many tokens for one launch");
    if (p->head_dim > INT_MAX || p->group_dim > INT_MAX)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "head_dim too large for the CUDA kernel");
    const long long es = (long long)ropekit_dtype_size(p->dtype), V = 16 / es;
    RgArgs a;
    memset(&a, 0, sizeof a);
    a.x = p->x, a.out = p->out;
    a.xs[0] = p->xs[0], a.xs[1] = p->xs[1];
    for (int i = 0; i < 3; ++i) a.os[i] = p->os[i];
    a.cos = p->cos, a.sin = p->sin;
    a.cos_s[0] = p->cos_s[0], a.cos_s[1] = p->cos_s[1];
    a.sin_s[0] = p->sin_s[0], a.sin_s[1] = p->sin_s[1];
    a.F = p->num_heads * p->head_dim;
    a.hd = (int)p->head_dim, a.nope = (int)p->nope, a.gd = (int)p->group_dim;
    const bool vec = p->xs[1] == 1 && p->os[2] == 1 && p->head_dim % V == 0 &&
                     p->group_dim % V == 0 && p->nope % 2 == 0 &&
                     aligned(p->x, p->xs[0] % V == 0) &&
                     aligned(p->out, p->os[0] % V == 0 && p->os[1] % V == 0);
    a.chunks = vec ? a.F / V : a.F;
    a.small = a.F < (1ll << 31);
    a.tab_vec = p->rope_dim > 0 && p->cos_s[1] == 1 && p->sin_s[1] == 1 &&
                (uintptr_t)p->cos % 8 == 0 && (uintptr_t)p->sin % 8 == 0 &&
                p->cos_s[0] % 2 == 0 && p->sin_s[0] % 2 == 0;
    a.d_gd = make_div(a.small ? a.gd : 1);
    a.d_hd = make_div(a.small ? a.hd : 1);
    cudaStream_t st = (cudaStream_t)stream;
    switch (p->dtype) {
    case ROPEKIT_FLOAT32:
        return vec ? launch_regroup_t<ROPEKIT_FLOAT32, 4>(a, p->N, st)
                   : launch_regroup_t<ROPEKIT_FLOAT32, 1>(a, p->N, st);
    case ROPEKIT_FLOAT16:
        return vec ? launch_regroup_t<ROPEKIT_FLOAT16, 8>(a, p->N, st)
                   : launch_regroup_t<ROPEKIT_FLOAT16, 1>(a, p->N, st);
    default:
        return vec ? launch_regroup_t<ROPEKIT_BFLOAT16, 8>(a, p->N, st)
                   : launch_regroup_t<ROPEKIT_BFLOAT16, 1>(a, p->N, st);
    }
}

} // namespace

/* ---- public API --------------------------------------------------------------------------- */

extern "C" {

const char *ropekit_cuda_last_error(void) { return ropekit_last_error(); }

ropekit_status ropekit_cuda_error_state_create(ropekit_cuda_error_state **state) {
    rk_clear_error();
    if (!state) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "state is NULL");
    *state = nullptr;
    ropekit_cuda_error_state *s = new (std::nothrow) ropekit_cuda_error_state();
    if (!s) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "error state: out of host memory");
    cudaError_t e = cudaGetDevice(&s->device);
    if (e == cudaSuccess) e = cudaMalloc(&s->dev, sizeof(DevErr));
    if (e == cudaSuccess) e = cudaMemset(s->dev, 0, sizeof(DevErr));
    if (e != cudaSuccess) {
        if (s->dev) cudaFree(s->dev);
        delete s;
        return cuda_fail(e, "error state creation");
    }
    *state = s;
    return ROPEKIT_OK;
}

void ropekit_cuda_error_state_destroy(ropekit_cuda_error_state *state) {
    if (!state || state->is_default) return;
    cudaFree(state->dev);
    delete state;
}

ropekit_status ropekit_cuda_error_state_default(ropekit_cuda_error_state **state) {
    if (!state) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "state is NULL");
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
    if (dev < 0 || dev >= 64) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "device %d: no default error state", dev);
    std::lock_guard<std::mutex> lock(g_default_mu);
    if (!g_default[dev]) {
        ropekit_cuda_error_state *s = nullptr;
        RK_TRY(ropekit_cuda_error_state_create(&s));
        s->is_default = 1;
        g_default[dev] = s;
    }
    *state = g_default[dev];
    return ROPEKIT_OK;
}

ropekit_status ropekit_cuda_error_state_reset(ropekit_cuda_error_state *state, void *stream) {
    rk_clear_error();
    RK_TRY(state_or_default(&state));
    cudaError_t e = cudaMemsetAsync(state->dev, 0, sizeof(DevErr), (cudaStream_t)stream);
    return e == cudaSuccess ? ROPEKIT_OK : cuda_fail(e, "error state reset");
}

ropekit_status ropekit_cuda_check_errors(ropekit_cuda_error_state *state, void *stream,
                                         int64_t *count) {
    rk_clear_error();
    if (count) *count = 0;
    RK_TRY(state_or_default(&state));
    DevErr h;
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaMemcpy(&h, state->dev, sizeof h, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return cuda_fail(e, "reading the error state");
    if (count) *count = (int64_t)h.count;
    if (h.count == 0) return ROPEKIT_OK;
    const char *tail = h.count == 1 ? "" : "s";
    if (h.kind == ERR_OFFSET)
        return rk_fail(ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position offset %lld with sequence "
                       "length %lld needs rows [%lld, %lld + %lld), cos_cache has rows [0, %lld) "
                       "(%llu token%s since the last reset were copied, not rotated)", h.value,
                       h.seq, h.value, h.value, h.seq, h.rows, h.count, tail);
    if (h.kind == ERR_IDS_MROPE)
        return rk_fail(ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position_ids[%lld][%lld][%lld] = %lld "
                       "is outside cos_cache rows [0, %lld) (%llu out-of-range id%s since the last "
                       "reset; their pairs were copied, not rotated)", h.stream, h.b, h.s, h.value,
                       h.rows, h.count, tail);
    return rk_fail(ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position_ids[%lld][%lld] = %lld is outside "
                   "cos_cache rows [0, %lld) (%llu out-of-range id%s since the last reset; their "
                   "pairs were copied, not rotated)", h.b, h.s, h.value, h.rows, h.count, tail);
}

ropekit_status ropekit_cuda_rotary_embedding(const ropekit_tensor *x,
                                             const ropekit_tensor *cos_cache,
                                             const ropekit_tensor *sin_cache,
                                             const ropekit_tensor *position_ids,
                                             const ropekit_rotary_embedding_attrs *attrs,
                                             const ropekit_tensor *y, void *stream,
                                             ropekit_cuda_error_state *errors) {
    rk_clear_error();
    rk_rotary_plan p;
    RK_TRY(rk_plan_rotary_embedding(x, cos_cache, sin_cache, position_ids, attrs, y, &p));
    return run_rotary(&p, stream, errors);
}

ropekit_status ropekit_cuda_ms_rotary_embedding(const ropekit_tensor *input,
                                                const ropekit_tensor *position_ids,
                                                const ropekit_tensor *cos_cache,
                                                const ropekit_tensor *sin_cache,
                                                const ropekit_ms_rotary_embedding_attrs *attrs,
                                                const ropekit_tensor *y, void *stream,
                                                ropekit_cuda_error_state *errors) {
    rk_clear_error();
    rk_rotary_plan p;
    RK_TRY(rk_plan_ms_rotary_embedding(input, position_ids, cos_cache, sin_cache, attrs, y, &p));
    return run_rotary(&p, stream, errors);
}

ropekit_status ropekit_cuda_mrotary_embedding(const ropekit_tensor *input,
                                              const ropekit_tensor *position_ids,
                                              const ropekit_tensor *cos_cache,
                                              const ropekit_tensor *sin_cache,
                                              const ropekit_mrotary_embedding_attrs *attrs,
                                              const ropekit_tensor *y, void *stream,
                                              ropekit_cuda_error_state *errors) {
    rk_clear_error();
    rk_rotary_plan p;
    RK_TRY(rk_plan_mrotary_embedding(input, position_ids, cos_cache, sin_cache, attrs, y, &p));
    return run_rotary(&p, stream, errors);
}

ropekit_status ropekit_cuda_qknorm_rotary_embedding(
    const ropekit_tensor *query, const ropekit_tensor *kv, const ropekit_tensor *kv_norm_weight,
    const ropekit_tensor *cos, const ropekit_tensor *sin,
    const ropekit_qknorm_rotary_embedding_attrs *attrs, const ropekit_tensor *query_out,
    const ropekit_tensor *kv_out, void *stream) {
    rk_clear_error();
    rk_qknorm_plan p;
    RK_TRY(rk_plan_qknorm_rotary_embedding(query, kv, kv_norm_weight, cos, sin, attrs, query_out,
                                           kv_out, &p));
    return run_qknorm(&p, stream);
}

ropekit_status ropekit_cuda_inverse_rotary_regroup(const ropekit_tensor *input,
                                                   const ropekit_tensor *cos,
                                                   const ropekit_tensor *sin,
                                                   const ropekit_inverse_rotary_regroup_attrs *attrs,
                                                   const ropekit_tensor *out, void *stream) {
    rk_clear_error();
    rk_regroup_plan p;
    RK_TRY(rk_plan_inverse_rotary_regroup(input, cos, sin, attrs, out, &p));
    return run_regroup(&p, stream);
}

} // extern "C"
