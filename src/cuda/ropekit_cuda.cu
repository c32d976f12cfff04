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
 *                   4 heads, 16-byte chunk), no shared memory, no barrier. It issues the 4 heads'
 *                   x loads first, reads the chunk's table columns once (they stay in L1/L2 for
 *                   the other heads) and converts them once to the wide type. Half-split chunks
 *                   load lanes [k, k+V) and [k+h, k+h+V); interleaved chunks V adjacent lanes;
 *                   chunks of [R, H) are copied bit for bit.
 *   rotary_kernel   the same for any strides (one element per lane): a block takes a few
 *                   tokens, gathers their columns into shared memory once, heads reuse them.
 *   qknorm_kernel   a block per (token, 16 rows), one half-warp per row (query heads, then the
 *                   kv row): the row is staged in shared memory as float, squares summed in
 *                   double in the CPU's sixteen-lane order (lane j = half-warp lane j), so the
 *                   result is the CPU's bit for bit; then normalise / fp8 / rotate and store.
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
    int tab_vec;           /* table columns contiguous and 16-byte aligned */
    int small;             /* flat thread count and S fit in 31 bits: 32-bit fast division */
    FastDiv d_per_tok, d_items, d_S;
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

/* Flat kernel for 16-byte chunks (contiguous channels): one thread per (token, group of RK_G
 * heads, chunk). The chunk's table columns are gathered once (no shared memory, no barrier) and
 * used for the RK_G heads, whose loads are all issued before the first use. */
/* 4 blocks of 256 per SM (64 registers), except for 16-bit x with float32 tables in half-split
 * chunks, whose 16 double columns would spill: 3 blocks there. */
template <int DT, int TDT, bool IL>
constexpr int flat_min_blocks() {
    return DT != ROPEKIT_FLOAT32 && TDT == ROPEKIT_FLOAT32 && !IL ? 3 : 4;
}

template <int DT, int TDT, bool IL, int RK_G>
__global__ void __launch_bounds__(256, flat_min_blocks<DT, TDT, IL>()) rotary_flat_kernel(const RotArgs a) {
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
    const int grp = (int)fdiv((unsigned)r, a.d_items), u = r - grp * a.items;
    const int n0 = grp * RK_G;
    const raw *xp = reinterpret_cast<const raw *>(a.x) + b * a.xs[0] + s * a.xs[1] + n0 * a.xs[2];
    raw *yp = reinterpret_cast<raw *>(a.y) + b * a.ys[0] + s * a.ys[1] + n0 * a.ys[2];
    if (u >= a.rot_items) { /* channels [R, H): copied bit for bit */
        const long long c0 = a.R + (long long)(u - a.rot_items) * V;
        uint4 v[RK_G];
#pragma unroll
        for (int g = 0; g < RK_G; ++g)
            if (n0 + g < a.N) v[g] = *reinterpret_cast<const uint4 *>(xp + g * a.xs[2] + c0);
#pragma unroll
        for (int g = 0; g < RK_G; ++g)
            if (n0 + g < a.N) *reinterpret_cast<uint4 *>(yp + g * a.ys[2] + c0) = v[g];
        return;
    }
    /* x loads first: they do not depend on the ids */
    const int k0 = u * NC;
    uint4 va[RK_G], vb[RK_G];
#pragma unroll
    for (int g = 0; g < RK_G; ++g)
        if (n0 + g < a.N) {
            const raw *q = xp + g * a.xs[2];
            va[g] = *reinterpret_cast<const uint4 *>(q + (IL ? 2 * k0 : k0));
            if (!IL) vb[g] = *reinterpret_cast<const uint4 *>(q + k0 + a.h);
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
    if (a.rows == RK_ROWS_MROPE) {
        long long r0 = 0, r1 = 0, r2 = 0, v3;
        const bool o0 = (a.stream_mask & 1) && token_row(a, b, s, 0, &r0, &v3);
        const bool o1 = (a.stream_mask & 2) && token_row(a, b, s, 1, &r1, &v3);
        const bool o2 = (a.stream_mask & 4) && token_row(a, b, s, 2, &r2, &v3);
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const int st = mrope_stream(a, k0 + j);
            const bool ok = st == 0 ? o0 : st == 1 ? o1 : o2;
            const long long row = st == 0 ? r0 : st == 1 ? r1 : r2;
            cf[j] = 1.0f, sf[j] = 0.0f;
            if (!ok) continue;
            good |= 1u << j;
            cf[j] = Elt<TDT>::ld(__ldg(reinterpret_cast<const typename Elt<TDT>::raw *>(a.cos) + row * a.cos_rs + (k0 + j) * a.cos_cs));
            sf[j] = Elt<TDT>::ld(__ldg(reinterpret_cast<const typename Elt<TDT>::raw *>(a.sin) + row * a.sin_rs + (k0 + j) * a.sin_cs));
        }
    } else {
        long long co, so;
        bool ok = true;
        if (a.rows == RK_ROWS_TABLE_3D) {
            co = b * a.cos_bs + s * a.cos_ss + k0 * a.cos_cs;
            so = b * a.sin_bs + s * a.sin_ss + k0 * a.sin_cs;
        } else {
            long long row, value;
            ok = token_row(a, b, s, 0, &row, &value);
            co = row * a.cos_rs + k0 * a.cos_cs;
            so = row * a.sin_rs + k0 * a.sin_cs;
        }
        if (ok) {
            good = (1u << NC) - 1u;
            load_cols<TDT, NC>(a.cos, co, a.cos_cs, a.tab_vec, cf);
            load_cols<TDT, NC>(a.sin, so, a.sin_cs, a.tab_vec, sf);
        }
    }
    W cw[NC], sw[NC];
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        float c = cf[j], sn = sf[j];
        if (a.apply_scale) {
            c = round_to<TDT>(__fmul_rn(c, a.scale));
            sn = round_to<TDT>(__fmul_rn(sn, a.scale));
        }
        cw[j] = (W)c;
        sw[j] = (W)(a.inverse ? -sn : sn);
    }
#pragma unroll
    for (int g = 0; g < RK_G; ++g) {
        if (n0 + g >= a.N) continue;
        union { uint4 u; raw e[V]; } A, Bv;
        A.u = va[g];
        if (!IL) Bv.u = vb[g];
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            if (!((good >> j) & 1)) continue;
            float y0, y1;
            if (IL) {
                rotate<WIDE>(Elt<DT>::ld(A.e[2 * j]), Elt<DT>::ld(A.e[2 * j + 1]), cw[j], sw[j], &y0, &y1);
                A.e[2 * j] = Elt<DT>::st(y0), A.e[2 * j + 1] = Elt<DT>::st(y1);
            } else {
                rotate<WIDE>(Elt<DT>::ld(A.e[j]), Elt<DT>::ld(Bv.e[j]), cw[j], sw[j], &y0, &y1);
                A.e[j] = Elt<DT>::st(y0), Bv.e[j] = Elt<DT>::st(y1);
            }
        }
        raw *q = yp + g * a.ys[2];
        *reinterpret_cast<uint4 *>(q + (IL ? 2 * k0 : k0)) = A.u;
        if (!IL) *reinterpret_cast<uint4 *>(q + k0 + a.h) = Bv.u;
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
};

__device__ float e4m3_round(float v) { /* as rk_e4m3_round */
    if (isnan(v) || v == 0.0f) return v;
    float av = fabsf(v);
    int e;
    (void)frexpf(av, &e);
    int q = e - 4;
    if (q < -9) q = -9;
    float r = ldexpf(rintf(ldexpf(av, -q)), q);
    return v < 0 ? -r : r;
}

__device__ float fp8_block_scale(float amax) {
    if (!(amax > 0.0f)) return 1.0f;
    float ratio = fmaxf(__fdiv_rn(amax, 448.0f), 1e-30f);
    return ldexpf(1.0f, (int)ceilf(__fdiv_rn(logf(ratio), 0.69314718f)));
}

/* Shared-memory row passes: a half-warp's lanes own float4 chunks (lane*4 + 64*i) when the row
 * length is a multiple of 4, else single channels (lane + 16*i). Passes are separated by
 * __syncwarp, so ownership may change between passes. */
template <typename F>
__device__ __forceinline__ void row_pass(float *buf, int n, int lane, F f) {
    if (n % 4 == 0) {
        for (int c = lane * 4; c < n; c += 64) {
            float4 v = *reinterpret_cast<float4 *>(buf + c);
            v.x = f(c, v.x), v.y = f(c + 1, v.y), v.z = f(c + 2, v.z), v.w = f(c + 3, v.w);
            *reinterpret_cast<float4 *>(buf + c) = v;
        }
    } else {
        for (int c = lane; c < n; c += 16) buf[c] = f(c, buf[c]);
    }
}

template <int DT, int V>
__device__ __forceinline__ void stage_row(const typename Elt<DT>::raw *p, long long st, int vec,
                                          int n, float *buf, int lane) {
    typedef typename Elt<DT>::raw raw;
    if (vec) { /* n % V == 0, 16-byte aligned */
        for (int c = lane * V; c < n; c += 16 * V) {
            raw r[V];
            load_raw<DT, V>(p + c, 1, r);
#pragma unroll
            for (int i = 0; i < V; i += 4)
                *reinterpret_cast<float4 *>(buf + c + i) =
                    make_float4(Elt<DT>::ld(r[i]), Elt<DT>::ld(r[i + 1]), Elt<DT>::ld(r[i + 2]), Elt<DT>::ld(r[i + 3]));
        }
    } else {
        for (int c = lane; c < n; c += 16) buf[c] = Elt<DT>::ld(p[c * st]);
    }
}

/* Stores a row from buf through norm(c, v), the value of channel c before the store's rounding
 * (for rope channels already rounded to T); the tail is rotated here (partner from the parity
 * of t, products in double). */
template <int DT, int V, typename N>
__device__ __forceinline__ void write_row(typename Elt<DT>::raw *p, long long st, int vec,
                                          const QkArgs &a, const float *buf, const float *cs,
                                          const float *sn, int lane, N norm) {
    typedef typename Elt<DT>::raw raw;
    auto value = [&](int c) -> float {
        if (c < a.nope) return norm(c, buf[c]);
        int t = c - a.nope, t0 = t & ~1, c0 = a.nope + t0;
        double x0 = norm(c0, buf[c0]), x1 = norm(c0 + 1, buf[c0 + 1]);
        if (t == t0) return (float)(x0 * (double)__ldg(cs + t0 * a.cos_s[2]) - x1 * (double)__ldg(sn + t0 * a.sin_s[2]));
        return (float)(x1 * (double)__ldg(cs + t * a.cos_s[2]) + x0 * (double)__ldg(sn + t * a.sin_s[2]));
    };
    if (vec) { /* hd % V == 0, 16-byte aligned */
        for (int c = lane * V; c < a.hd; c += 16 * V) {
            raw r[V];
            if (c + V <= a.nope) {
#pragma unroll
                for (int i = 0; i < V; i += 4) {
                    float4 v = *reinterpret_cast<const float4 *>(buf + c + i);
                    r[i] = Elt<DT>::st(norm(c + i, v.x)), r[i + 1] = Elt<DT>::st(norm(c + i + 1, v.y));
                    r[i + 2] = Elt<DT>::st(norm(c + i + 2, v.z)), r[i + 3] = Elt<DT>::st(norm(c + i + 3, v.w));
                }
            } else {
#pragma unroll
                for (int i = 0; i < V; ++i) r[i] = Elt<DT>::st(value(c + i));
            }
            store_raw<DT, V>(p + c, 1, r);
        }
    } else {
        for (int c = lane; c < a.hd; c += 16) p[c * st] = Elt<DT>::st(value(c));
    }
}

/* Sum of squares of buf[0, n) in the CPU's sixteen-lane double order; every lane gets it.
 * (A float-sum variant was measured no faster on an H200: the exact order costs nothing.) */
__device__ __forceinline__ float half_warp_ss(const float *buf, int n, int lane, unsigned mask) {
    double acc = 0.0;
#pragma unroll 4
    for (int c = lane; c < n; c += 16) {
        double v = buf[c];
        acc = fma(v, v, acc); /* v*v is exact: same as lane[j] += v*v */
    }
    for (int m = 8; m >= 1; m >>= 1) acc += __shfl_xor_sync(mask, acc, m, 16);
    return (float)acc;
}

template <int DT>
__global__ void __launch_bounds__(256, 5) qknorm_kernel(const QkArgs a) {
    typedef typename Elt<DT>::raw raw;
    constexpr int V = 16 / sizeof(raw);
    extern __shared__ __align__(16) unsigned char smem[];
    const long long t = blockIdx.x, b = t / a.S, s = t - b * a.S;
    const int hw = threadIdx.x >> 4, nhw = blockDim.x >> 4, lane = threadIdx.x & 15;
    const unsigned mask = 0xffffu << (threadIdx.x & 16);
    float *buf = reinterpret_cast<float *>(smem) + (size_t)hw * a.rowstride;
    const float *cs = a.rd ? a.cos + b * a.cos_s[0] + s * a.cos_s[1] : nullptr;
    const float *sn = a.rd ? a.sin + b * a.sin_s[0] + s * a.sin_s[1] : nullptr;
    const float hdf = (float)a.hd;
    const int nope = a.nope;
    /* rows 0..nh-1 are query heads, row nh the kv row; blockIdx.y picks nhw of them */
    for (int row = blockIdx.y * nhw + hw; row <= a.nh; row += nhw * gridDim.y) {
        if (row < a.nh) { /* a query head */
            const raw *x = reinterpret_cast<const raw *>(a.q) + b * a.qs[0] + s * a.qs[1] + row * a.qs[2];
            raw *y = reinterpret_cast<raw *>(a.q_out) + b * a.qos[0] + s * a.qos[1] + row * a.qos[2];
            stage_row<DT, V>(x, a.qs[3], a.vec_q_in, a.hd, buf, lane);
            __syncwarp(mask);
            const float ss = half_warp_ss(buf, a.hd, lane, mask);
            const float r = round_to<DT>(__fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, hdf), a.eps))));
            /* nope: x*r (rounded when stored); rope: Rt(x*r) */
            write_row<DT, V>(y, a.qos[3], a.vec_q_out, a, buf, cs, sn, lane, [&](int c, float v) {
                float w = __fmul_rn(v, r);
                return c < nope ? w : round_to<DT>(w);
            });
        } else { /* the kv row */
            const raw *x = reinterpret_cast<const raw *>(a.kv) + b * a.kvs[0] + s * a.kvs[1];
            raw *y = reinterpret_cast<raw *>(a.kv_out) + b * a.kvos[0] + s * a.kvos[1];
            stage_row<DT, V>(x, a.kvs[2], a.vec_kv_in, a.hd, buf, lane);
            __syncwarp(mask);
            const float ss = half_warp_ss(buf, a.hd, lane, mask);
            const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, hdf), a.eps)));
            __syncwarp(mask);
            row_pass(buf, a.hd, lane, [&](int c, float v) {
                return round_to<DT>(__fmul_rn(__fmul_rn(v, r), __ldg(a.w + c * a.ws)));
            });
            __syncwarp(mask);
            if (a.fp8) {
                for (int c0 = 0; c0 < nope; c0 += 64) {
                    float amax = 0.0f;
                    for (int i = lane; i < 64; i += 16) amax = fmaxf(amax, fabsf(buf[c0 + i]));
                    for (int m = 8; m >= 1; m >>= 1)
                        amax = fmaxf(amax, __shfl_xor_sync(mask, amax, m, 16));
                    const float scale = fp8_block_scale(amax);
                    for (int i = lane; i < 64; i += 16) {
                        float q = fminf(fmaxf(__fdiv_rn(buf[c0 + i], scale), -448.0f), 448.0f);
                        buf[c0 + i] = __fmul_rn(e4m3_round(q), scale);
                    }
                }
                __syncwarp(mask);
            }
            write_row<DT, V>(y, a.kvos[2], a.vec_kv_out, a, buf, cs, sn, lane, [](int, float v) { return v; });
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

int flat_heads_per_thread(int dt) {
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("ROPEKIT_CUDA_HEADS_PER_THREAD");
        env = e && (e[0] == '2' || e[0] == '4') && e[1] == 0 ? e[0] - '0' : 0;
    }
    if (env) return env;
    (void)dt;
    return 4;
}

template <int DT, int TDT>
ropekit_status launch_rotary_flat(const RotArgs &a, long long threads_total, int G, cudaStream_t st) {
    /* blocks of 256, or smaller ones when that is needed to give every SM two blocks */
    long long bs = 256;
    const long long sms = sm_count();
    while (bs > 64 && (threads_total + bs - 1) / bs < 2 * sms) bs /= 2;
    const long long blocks = (threads_total + bs - 1) / bs;
    if (blocks > INT_MAX) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many tokens for one launch");
    if (G == 2) {
        if (a.interleaved) rotary_flat_kernel<DT, TDT, true, 2><<<(unsigned)blocks, (unsigned)bs, 0, st>>>(a);
        else rotary_flat_kernel<DT, TDT, false, 2><<<(unsigned)blocks, (unsigned)bs, 0, st>>>(a);
    } else {
        if (a.interleaved) rotary_flat_kernel<DT, TDT, true, 4><<<(unsigned)blocks, (unsigned)bs, 0, st>>>(a);
        else rotary_flat_kernel<DT, TDT, false, 4><<<(unsigned)blocks, (unsigned)bs, 0, st>>>(a);
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
     * for benchmarks; 2 and 8 were measured slower on an H200, and so was a variant looping over
     * head groups with the next group's loads in flight) */
    const int G = flat_heads_per_thread(dt);
    a.ngroups = (int)((p->N + G - 1) / G);
    const long long flat_total = a.T * a.ngroups * (long long)a.items;
    a.small = flat_total < (1ll << 31) - 1024 && a.S < (1ll << 31);
    a.d_per_tok = make_div((long long)a.ngroups * a.items);
    a.d_items = make_div(a.items);
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

template <int DT>
ropekit_status launch_qknorm_t(const QkArgs &a, long long blocks, int threads, size_t shm,
                               cudaStream_t st) {
    if (shm > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(qknorm_kernel<DT>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm);
        if (e != cudaSuccess) return cuda_fail(e, "qknorm shared memory");
    }
    const long long rows = a.nh + 1, per = threads / 16;
    long long gy = (rows + per - 1) / per;
    if (gy > 65535) gy = 65535;
    qknorm_kernel<DT><<<dim3((unsigned)blocks, (unsigned)gy), threads, shm, st>>>(a);
    return launched("qknorm kernel launch");
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
    const long long blocks = p->B * p->S;
    if (blocks > INT_MAX) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many tokens for one launch");
    cudaStream_t st = (cudaStream_t)stream;
    const size_t shm = row_bytes * nhw;
    if (p->dtype == ROPEKIT_FLOAT32) return launch_qknorm_t<ROPEKIT_FLOAT32>(a, blocks, nhw * 16, shm, st);
    if (p->dtype == ROPEKIT_FLOAT16) return launch_qknorm_t<ROPEKIT_FLOAT16>(a, blocks, nhw * 16, shm, st);
    return launch_qknorm_t<ROPEKIT_BFLOAT16>(a, blocks, nhw * 16, shm, st);
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
