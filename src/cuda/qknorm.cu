/* QKNormRotaryEmbedding on the GPU.
 *
 *   qknorm_kernel   a block per 16 rows of one flat list (all kv rows, then all query rows),
 *                   one half-warp per row: the row is staged in shared memory as float, squares
 *                   summed in double in the CPU's sixteen-lane order (lane j = half-warp lane
 *                   j), so the result is the CPU's bit for bit; then the tail is rotated in
 *                   place and the row normalised and stored (16-bit rows with a finite sum of
 *                   squares round two values per instruction; fp8 rounding by bit arithmetic). */
#include "common.cuh"

namespace rk_cuda {
namespace {

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
    int tab_vec;       /* cos/sin rows contiguous, pairs 8-byte aligned (register kernel) */
    int tab16, w16;    /* cos/sin rows, w contiguous and 16-byte aligned (bulk-copy kernel) */
    int bst;           /* bulk-copy kernel: query output rows 16-byte aligned (bulk stores) */
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

/* ---- the register kernel (16-bit rows, head_dim % 16 == 0, <= 512, rope 0 or 64) ----------
 *
 * Eight threads per row, four rows per warp, the row in registers from load to store: thread
 * t (0..7) holds the 32-bit words t, t+8, t+16, ... of its row, i.e. channels 2t + 16u and
 * 2t + 16u + 1 for u = 0, 1, ...: exactly the channels of the CPU's sum-of-squares lanes 2t and
 * 2t+1, in the order the CPU adds them. So the two lane sums are two chains of double FMAs in
 * the thread, and the CPU's tree (lane j += lane j + width, width 8, 4, 2, 1) is three xor
 * shuffles (4, 2, 1) and one addition; every thread of the row ends with the same sum. No
 * shared memory: the staged kernel above wrote every row to shared memory as floats and read it
 * back twice (ncu: 91% of the shared-memory pipe for float16, 76% issue slots for bfloat16, 980
 * instructions per thread and row). The rope tail (nope % 16 == 0) is the last RT words of every
 * thread, where pair (c, c+1), c even, is one word; the register array holds the tail words
 * first (w[0..RT)) so that their register indices are constants for any head size. */
#define RK_QR_MAXW 32 /* words per thread: head_dim <= 512 */

/* 32-bit accesses with the default hints of ld_x / st_y (common.cuh): x L1::no_allocate, y
 * evict-first. Fixed here (ROPEKIT_CUDA_HINTS does not apply): a run-time choice is a branch per
 * access, and this kernel makes 32 + 32 of them per thread and row. */
__device__ __forceinline__ unsigned ld_w(const unsigned *p) {
    unsigned v;
    asm("ld.global.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ void st_w(unsigned *p, unsigned v) {
    asm volatile("st.global.cs.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

/* The two 16-bit values of a word as doubles (exact): one conversion instruction each
 * (F2F.F64.F16 / F2F.F64.BF16 read the half in place), where lo_of / hi_of + (double) took an
 * unpacking instruction and a float -> double conversion. bfloat16 -> double needs sm_90. */
template <int DT> __device__ __forceinline__ void word_to_double(unsigned w, double &lo, double &hi) {
    const unsigned short l = (unsigned short)(w & 0xffffu), h = (unsigned short)(w >> 16);
    if constexpr (DT == ROPEKIT_FLOAT16) {
        asm("cvt.f64.f16 %0, %1;" : "=d"(lo) : "h"(l));
        asm("cvt.f64.f16 %0, %1;" : "=d"(hi) : "h"(h));
    } else {
#if __CUDA_ARCH__ >= 900
        asm("cvt.f64.bf16 %0, %1;" : "=d"(lo) : "h"(l));
        asm("cvt.f64.bf16 %0, %1;" : "=d"(hi) : "h"(h));
#else
        lo = lo_of<DT>(w), hi = hi_of<DT>(w);
#endif
    }
}

/* The rotation of one tail pair (x0, x1) = the word w of two values already rounded to T, with
 * table values c0, s0 (column t) and c1, s1 (column t + 1), in double as the contract has it:
 *   y0 = x0*c0 - x1*s0,  y1 = x1*c1 + x0*s1  (products exact: 24 + 11 bits), rounded to T.
 * Every 16-bit tail of the register, pipelined and bulk-copy kernels goes through it. */
template <int DT>
__device__ __forceinline__ unsigned rotate_word(unsigned w, float c0, float s0, float c1, float s1) {
    double x0, x1;
    word_to_double<DT>(w, x0, x1);
    const float y0 = (float)(x0 * (double)c0 - x1 * (double)s0);
    const float y1 = (float)(x1 * (double)c1 + x0 * (double)s1);
    return pack2<DT>(y0, y1);
}

/* Row gr of the flat list (the T kv rows, then the T*nh query rows, token-major): its token
 * (b, s), whether it is the kv row, and its input and output rows. */
template <int DT>
__device__ __forceinline__ bool decode_row(const QkArgs &a, long long gr, long long &b, long long &s,
                                           const typename Elt<DT>::raw *&x, typename Elt<DT>::raw *&y) {
    typedef typename Elt<DT>::raw raw;
    long long tk;
    int row;
    if (gr < a.T) {
        tk = gr, row = a.nh;
    } else if (a.small) {
        const unsigned q = (unsigned)(gr - a.T), t32 = fdiv(q, a.d_nh);
        tk = t32, row = (int)(q - t32 * (unsigned)a.nh);
    } else {
        tk = (gr - a.T) / a.nh, row = (int)(gr - a.T - tk * a.nh);
    }
    if (a.small) {
        const unsigned b32 = fdiv((unsigned)tk, a.d_S);
        b = b32, s = (unsigned)tk - b32 * a.d_S.d;
    } else {
        b = tk / a.S, s = tk - b * a.S;
    }
    if (row == a.nh) {
        x = reinterpret_cast<const raw *>(a.kv) + b * a.kvs[0] + s * a.kvs[1];
        y = reinterpret_cast<raw *>(a.kv_out) + b * a.kvos[0] + s * a.kvos[1];
        return true;
    }
    x = reinterpret_cast<const raw *>(a.q) + b * a.qs[0] + s * a.qs[1] + row * a.qs[2];
    y = reinterpret_cast<raw *>(a.q_out) + b * a.qos[0] + s * a.qos[1] + row * a.qos[2];
    return false;
}

/* One row, given thread t's words of it: wn(m) = word t + 8m (nope), wt(k) = word t + 8(nn + k)
 * (tail; m, k compile-time constants after unrolling), wr(m) = word t + 8m again for the kv
 * row's weight and fp8 passes: the sum of squares, the norm, fp8 and the
 * rotation, stored to yw (= the output row + t, as words). RT: tail words per thread
 * (rope_dim = 16 RT); NN: nope words per thread, or 0 = nn read at run time
 * (<= RK_QR_MAXW - RT). */
template <int DT, int RT, int NN, typename WN, typename WR, typename WT>
__device__ __forceinline__ void qk_reg_row(const QkArgs &a, WN wn, WR wr, WT wt, int nn, bool kvrow, long long b,
                                           long long s, unsigned *yw, int t, unsigned mask) {
    constexpr int NNMAX = NN ? NN : RK_QR_MAXW - RT;
    const float hdf = (float)a.hd;
    const int nope = a.nope;
    /* CPU lanes 2t (low halves) and 2t+1 (high halves), words in channel order */
    double q0 = 0.0, q1 = 0.0;
#pragma unroll
    for (int m = 0; m < NNMAX; ++m)
        if (NN || m < nn) {
            double v0, v1;
            word_to_double<DT>(wn(m), v0, v1);
            q0 = fma(v0, v0, q0), q1 = fma(v1, v1, q1);
        }
#pragma unroll
    for (int k = 0; k < RT; ++k) {
        double v0, v1;
        word_to_double<DT>(wt(k), v0, v1);
        q0 = fma(v0, v0, q0), q1 = fma(v1, v1, q1);
    }
#pragma unroll
    for (int d = 4; d >= 1; d >>= 1) {
        q0 += __shfl_xor_sync(mask, q0, d, 8);
        q1 += __shfl_xor_sync(mask, q1, d, 8);
    }
    const float ss = (float)(q0 + q1);
    /* the tail's table columns tt = 2t + 16k and tt + 1, loaded once the sum no longer
     * holds registers (their latency hides under the leading channels' stores) */
    float c0[RT ? RT : 1], c1[RT ? RT : 1], s0[RT ? RT : 1], s1[RT ? RT : 1];
    if constexpr (RT > 0) {
        const float *cs = a.cos + b * a.cos_s[0] + s * a.cos_s[1];
        const float *sn = a.sin + b * a.sin_s[0] + s * a.sin_s[1];
        if (a.tab_vec) {
#pragma unroll
            for (int k = 0; k < RT; ++k) {
                const float2 cv = __ldg(reinterpret_cast<const float2 *>(cs + 2 * t + 16 * k));
                const float2 sv = __ldg(reinterpret_cast<const float2 *>(sn + 2 * t + 16 * k));
                c0[k] = cv.x, c1[k] = cv.y, s0[k] = sv.x, s1[k] = sv.y;
            }
        } else {
#pragma unroll
            for (int k = 0; k < RT; ++k) {
                const long long tt = 2 * t + 16 * k;
                c0[k] = __ldg(cs + tt * a.cos_s[2]), c1[k] = __ldg(cs + (tt + 1) * a.cos_s[2]);
                s0[k] = __ldg(sn + tt * a.sin_s[2]), s1[k] = __ldg(sn + (tt + 1) * a.sin_s[2]);
            }
        }
    }
    unsigned tw[RT ? RT : 1]; /* the tail words rounded to T: Rt(x * r) or Rt((x * r) * w) */
    if (!kvrow) {
        const float r = round_to<DT>(__fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, hdf), a.eps))));
        /* finite ss means finite x, so with a finite r no x*r is NaN */
        const bool fast = isfinite(ss) && isfinite(r);
        if constexpr (DT == ROPEKIT_FLOAT16) {
            /* x and r are float16 values, so x * r (22 significant bits, |x * r| >= 2^-48) is
             * exact in float and Rt(x * r) is float16's correctly rounded product: one paired
             * float16 multiply (round to nearest even, subnormals kept) per word instead of two
             * unpacks, two float products and a paired rounding. Any NaN stays a NaN. */
            const __half2 r2 = __half2half2(__float2half_rn(r)); /* r is a float16 value: exact */
#pragma unroll
            for (int m = 0; m < NNMAX; ++m)
                if (NN || m < nn) {
                    const unsigned v = wn(m);
                    const __half2 p2 = __hmul2(*reinterpret_cast<const __half2 *>(&v), r2);
                    st_w(yw + 8 * m, *reinterpret_cast<const unsigned *>(&p2));
                }
        } else if (fast) {
#pragma unroll
            for (int m = 0; m < NNMAX; ++m)
                if (NN || m < nn)
                    st_w(yw + 8 * m, pack2_finite<DT>(__fmul_rn(lo_of<DT>(wn(m)), r),
                                                      __fmul_rn(hi_of<DT>(wn(m)), r)));
        } else {
#pragma unroll
            for (int m = 0; m < NNMAX; ++m)
                if (NN || m < nn)
                    st_w(yw + 8 * m, pack2<DT>(__fmul_rn(lo_of<DT>(wn(m)), r),
                                               __fmul_rn(hi_of<DT>(wn(m)), r)));
        }
#pragma unroll
        for (int k = 0; k < RT; ++k) /* Rt(x * r) */
            tw[k] = pack2<DT>(__fmul_rn(lo_of<DT>(wt(k)), r), __fmul_rn(hi_of<DT>(wt(k)), r));
    } else {
        const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, hdf), a.eps)));
        /* k[c] = Rt((x[c] * r) * w[c]) */
        auto normed = [&](unsigned v, int c) {
            return pack2<DT>(__fmul_rn(__fmul_rn(lo_of<DT>(v), r), __ldg(a.w + c * a.ws)),
                             __fmul_rn(__fmul_rn(hi_of<DT>(v), r), __ldg(a.w + (c + 1) * a.ws)));
        };
        if (a.fp8) { /* blocks of 64 channels = 4 words of each of the 8 threads (nope % 64 == 0) */
#pragma unroll
            for (int m0 = 0; m0 < NNMAX; m0 += 4) {
                if (!NN && m0 >= nn) break;
                float v[8];
                float amax = 0.0f;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const unsigned e = normed(wr(m0 + i), 2 * t + 16 * (m0 + i));
                    v[2 * i] = lo_of<DT>(e), v[2 * i + 1] = hi_of<DT>(e);
                    amax = fmaxf(amax, fmaxf(fabsf(v[2 * i]), fabsf(v[2 * i + 1])));
                }
#pragma unroll
                for (int d = 4; d >= 1; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, d, 8));
                const float scale = fp8_block_scale(amax);
                /* x / scale == x * (1 / scale): see the staged kernel */
                const float inv = __frcp_rn(scale);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float q = fminf(fmaxf(__fmul_rn(v[i], inv), -448.0f), 448.0f);
                    v[i] = __fmul_rn(e4m3_round(q), scale);
                }
#pragma unroll
                for (int i = 0; i < 4; ++i) st_w(yw + 8 * (m0 + i), pack2<DT>(v[2 * i], v[2 * i + 1]));
            }
        } else {
#pragma unroll
            for (int m = 0; m < NNMAX; ++m)
                if (NN || m < nn) st_w(yw + 8 * m, normed(wr(m), 2 * t + 16 * m));
        }
#pragma unroll
        for (int k = 0; k < RT; ++k) tw[k] = normed(wt(k), nope + 2 * t + 16 * k);
    }
    /* the tail: pair (x0, x1) = word k, already rounded to T */
#pragma unroll
    for (int k = 0; k < RT; ++k) st_w(yw + 8 * (nn + k), rotate_word<DT>(tw[k], c0[k], s0[k], c1[k], s1[k]));
}

template <int DT, int RT, int NN, int MINB>
__global__ void __launch_bounds__(256, MINB) qknorm_reg_kernel(const QkArgs a) {
    typedef typename Elt<DT>::raw raw;
    constexpr int NNMAX = NN ? NN : RK_QR_MAXW - RT;
    const int t = threadIdx.x & 7;
    const unsigned mask = 0xffu << (threadIdx.x & 24);
    const int nn = NN ? NN : (a.hd >> 4) - RT;
    const long long per = blockDim.x >> 3;
    for (long long gr = (long long)blockIdx.x * per + (threadIdx.x >> 3); gr < a.rows; gr += (long long)gridDim.x * per) {
        long long b, s;
        const raw *x;
        raw *y;
        const bool kvrow = decode_row<DT>(a, gr, b, s, x, y);
        const unsigned *xw = reinterpret_cast<const unsigned *>(x) + t;
        unsigned w[RT + NNMAX];
#pragma unroll
        for (int m = 0; m < NNMAX; ++m) w[RT + m] = (NN || m < nn) ? ld_w(xw + 8 * m) : 0u;
#pragma unroll
        for (int k = 0; k < RT; ++k) w[k] = ld_w(xw + 8 * (nn + k));
        /* the kv row reads its leading words again (one row in 129) instead of keeping them in
         * registers through the weight and fp8 passes */
        auto wn = [&](int m) { return w[RT + m]; };
        auto wr = [&](int m) { return xw[8 * m]; };
        auto wt = [&](int k) { return w[k]; };
        qk_reg_row<DT, RT, NN>(a, wn, wr, wt, nn, kvrow, b, s, reinterpret_cast<unsigned *>(y) + t, t, mask);
    }
}

/* ---- the pipelined kernel (variant 3) --------------------------------------------------------
 * ncu on the register kernel (bfloat16, DS-V4): 0.61 eligible warps per scheduler, DRAM 68%,
 * 7.0 of 16.5 cycles between issues waiting on L1TEX: with 80 registers (24 warps per SM) a
 * warp has its row's loads in flight only until it starts the row's arithmetic (the 32-deep
 * double chains, the divisions), so about half the time nothing is in flight. Here each warp
 * walks quads of 4 consecutive rows (one per 8-thread group) and copies the next NS - 1 quads
 * into shared memory with cp.async (16 bytes per lane, NS stages) before working on the current
 * one from shared memory: the next rows are always in flight, in no register. A staged row is
 * RK_QP_RW words (256 + 8: the 4 rows of a stage start 8 banks apart, so the groups' reads,
 * word t + 8u of their rows, are free of bank conflicts). Needs 16-byte aligned rows. */
#define RK_QP_RW (8 * RK_QR_MAXW + 8)

__device__ __forceinline__ void cp_async_x16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <int DT, int RT, int NN, int NS>
__global__ void __launch_bounds__(128, 6) qknorm_pipe_kernel(const QkArgs a) {
    typedef typename Elt<DT>::raw raw;
    extern __shared__ __align__(16) unsigned qp_smem[];
    const int lane = threadIdx.x & 31, g = lane >> 3, t = lane & 7;
    const unsigned mask = 0xffu << (lane & 24);
    const int nn = NN ? NN : (a.hd >> 4) - RT;
    const int chunks = a.hd >> 3; /* 16-byte chunks per row */
    unsigned *wb = qp_smem + (threadIdx.x >> 5) * (NS * 4 * RK_QP_RW);
    const long long nq = (a.rows + 3) >> 2;
    const long long nw = (long long)gridDim.x * (blockDim.x >> 5);
    /* copies quad qd into stage st: group g finds its row, every lane copies chunks of all 4 */
    auto issue = [&](long long qd, int st) {
        const long long gr = 4 * qd + g;
        long long b, s;
        const raw *x = nullptr;
        raw *y;
        if (gr < a.rows) (void)decode_row<DT>(a, gr, b, s, x, y);
        unsigned *sb = wb + st * (4 * RK_QP_RW);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const raw *xr = reinterpret_cast<const raw *>(__shfl_sync(0xffffffffu, (unsigned long long)x, 8 * r));
            if (xr)
                for (int c = lane; c < chunks; c += 32) cp_async_x16(sb + r * RK_QP_RW + 4 * c, xr + 8 * c);
        }
    };
    /* NS - 1 quads in flight while one is worked on; one commit group per quad (empty ones
     * past the end), so that wait_group<NS - 1> always means "the current quad has landed" */
    long long qd = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
#pragma unroll
    for (int p = 0; p < NS - 1; ++p) {
        if (qd + p * nw < nq) issue(qd + p * nw, p);
        cp_async_commit();
    }
    for (int st = 0; qd < nq; qd += nw, st = st + 1 == NS ? 0 : st + 1) {
        const long long qn = qd + (NS - 1) * nw;
        if (qn < nq) issue(qn, st == 0 ? NS - 1 : st - 1); /* the stage worked on last time */
        cp_async_commit();
        cp_async_wait<NS - 1>();
        __syncwarp();
        const long long gr = 4 * qd + g;
        if (gr < a.rows) {
            long long b, s;
            const raw *x;
            raw *y;
            const bool kvrow = decode_row<DT>(a, gr, b, s, x, y);
            /* the words are read from shared memory where they are used (twice): no registers */
            const unsigned *sx = wb + st * (4 * RK_QP_RW) + g * RK_QP_RW + t;
            auto wn = [&](int m) { return sx[8 * m]; };
            auto wt = [&](int k) { return sx[8 * (nn + k)]; };
            qk_reg_row<DT, RT, NN>(a, wn, wn, wt, nn, kvrow, b, s, reinterpret_cast<unsigned *>(y) + t, t, mask);
        }
        __syncwarp();
    }
}

/* ---- the bulk-copy kernel (variant 4, sm_90) ----------------------------------------------
 * ncu on the pipelined kernel (R2/R3 of the previous session): 65-70 M instructions, 0.45-0.5
 * issued per scheduler, 12 cycles between a warp's instructions: each warp spent ~976
 * instructions per quad of rows (the cp.async copies' addressing, every word read twice from
 * shared memory with 32-bit loads, the per-row division and square root for 4 rows) and could
 * not keep up with the memory. Here:
 *   - a row is brought into shared memory by ONE instruction (cp.async.bulk, the TMA's bulk
 *     copy, completion counted in bytes on a per-stage mbarrier), NS stages of 8 rows per warp,
 *     so the next rows are in flight in no register and at no per-word cost;
 *   - four threads per row (8 rows per warp): thread p holds CPU lanes 4p .. 4p+3 of every
 *     16-channel group u (8 bytes: one 64-bit shared load), so its four lane sums are four
 *     chains of double FMAs in the CPU's order, and the CPU's tree (lane j += lane j + width,
 *     width 8, 4, 2, 1) is two xor shuffles (2, 1) and two additions in the thread. The
 *     per-row scalar work (division, square root) is shared by 8 rows per warp instruction;
 *   - query rows are scaled by one paired 16-bit multiply per word when it is exact (below),
 *     written back into their stage and stored by one bulk copy per row (cp.async.bulk from
 *     shared memory, a bulk async-group per row's thread 0) where the query output rows are
 *     16-byte aligned, else by 64-bit stores; kv rows by 64-bit stores.
 * Launched with NS = 1 stage, one item per warp, registers capped for 5 blocks (20 warps) per
 * SM (MINB; 96 registers, no spills): the hardware hands out blocks as SMs free up, and the
 * other warps of the SM hide a warp's copy latency. H200, DS-V4 2048 tokens, 16-bit, vs copy
 * (this session's R1/R2): 2 stages at 12 warps per SM (168 registers, 67.7 KB per block) with
 * 4 items per warp 87.3-88.6%, 2 items 89.9-90.6%; 1 stage, 16 warps 81-82%, 20 warps
 * 90.9-92.6%, 24 warps (MINB 6) about the same; bulk stores on top 95.4-96.0%. (Measured
 * slower: items from an atomic work counter, 84-85% at 8 warps per SM.)
 * Rows are 16-byte aligned (input) and 8-byte aligned (output), head_dim % 16 == 0 and <= 512,
 * rope 0 or 64 (RT = rope / 16 tail groups per thread), fp8 with nope % 64 == 0. */
#define RK_QT_WARPS 4 /* warps per block */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* the kernel's body is built for sm_90 and later */
__device__ __forceinline__ void st_w2(void *p, uint2 v) {
    asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" :: "l"(p), "r"(v.x), "r"(v.y) : "memory");
}
#endif

/* x * r for a word of two 16-bit values x and a 16-bit value r (both halves of r2 = r):
 * correctly rounded to T by one paired multiply. Equal to the contract's Rt(x * r) (the product
 * rounded to float, then to T) whenever x * r is exact in float: always for float16 (22
 * significant bits, |x * r| >= 2^-48), and for bfloat16 when r >= 2^-9 (16 significant bits,
 * the product's last bit >= 2^-133 * 2^-16 = 2^-149, float's last subnormal bit; inf and NaN
 * products are inf and NaN either way). fma with -0 is the product exactly rounded (sm_80+). */
template <int DT> __device__ __forceinline__ unsigned mul2_rt(unsigned x, unsigned r2) {
    unsigned d;
    if constexpr (DT == ROPEKIT_FLOAT16)
        asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(r2));
    else
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(r2), "r"(0x80008000u));
    return d;
}

/* Rotates the two pairs of a tail group (words w.x, w.y) with table columns t .. t+3 in c, s. */
template <int DT> __device__ __forceinline__ uint2 rotate_group(uint2 w, float4 c, float4 s) {
    return make_uint2(rotate_word<DT>(w.x, c.x, s.x, c.y, s.y), rotate_word<DT>(w.y, c.z, s.z, c.w, s.w));
}

template <int DT, int RT, int NS, int MINB>
__global__ void __launch_bounds__(32 * RK_QT_WARPS, MINB) qknorm_tma_kernel(const QkArgs a) {
#if __CUDA_ARCH__ >= 900
    typedef typename Elt<DT>::raw raw;
    extern __shared__ __align__(128) unsigned char qt_smem[];
    const int lane = threadIdx.x & 31, g = lane >> 2, p = lane & 3, wid = threadIdx.x >> 5;
    const unsigned mask = 0xfu << (lane & 28);
    const int G = a.hd >> 4, nn = G - RT;            /* 16-channel groups: all, leading */
    const int rs = ((a.hd * 2 + 127) & ~127) + 32;     /* staged row bytes: rows 8 banks apart */
    const unsigned rbytes = (unsigned)a.hd * 2u;
    unsigned long long *bars = reinterpret_cast<unsigned long long *>(qt_smem) + wid * NS;
    unsigned char *wb = qt_smem + 128 + (size_t)wid * NS * 8 * rs;
    warp_mbar_init(bars, NS, 8);
    /* The work: items j = 0, 1, ... of one list, the kv batches (rows 8j .. 8j+7 of the T kv
     * rows: a kv batch, whose weight and fp8 passes cost about 4 query batches, comes first) and
     * then the query batches (flat rows T + 8f ..); warp w's k-th item is j = w + k*nw. */
    const long long nw = (long long)gridDim.x * RK_QT_WARPS, w = (long long)blockIdx.x * RK_QT_WARPS + wid;
    const long long nk = (a.T + 7) >> 3, nq = (a.rows - a.T + 7) >> 3;
    /* item k -> first flat row (-1: none) and the end of its list */
    auto item = [&](long long k, long long &lim) -> long long {
        const long long j = w + k * nw;
        if (j < nk) {
            lim = a.T;
            return 8 * j;
        }
        lim = a.rows;
        return j - nk < nq ? a.T + 8 * (j - nk) : -1;
    };
    /* item -> stage st: each row's thread 0 announces its bytes and starts its row's copy; the
     * stage's barrier completes when all 8 have arrived and all bytes have landed */
    auto issue = [&](long long base, long long lim, int st) {
        if (p != 0) return;
        const unsigned bar = smem_u32(bars + st);
        const long long gr = base + g;
        if (gr < lim) {
            long long b, s;
            const raw *x;
            raw *y;
            (void)decode_row<DT>(a, gr, b, s, x, y);
            const unsigned dst = smem_u32(wb + (size_t)(st * 8 + g) * rs);
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(rbytes) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(dst), "l"(x), "r"(rbytes), "r"(bar) : "memory");
        } else {
            asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
        }
    };
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        long long lim;
        const long long base = item(i, lim);
        if (base >= 0) issue(base, lim, i);
    }
    unsigned phase = 0;
    for (long long k = 0;; ++k) {
        const int st = (int)(k % NS);
        long long lim;
        const long long base = item(k, lim);
        if (base < 0) break;
        {
            mbar_wait(smem_u32(bars + st), (phase >> st) & 1u);
            phase ^= 1u << st;
        }
        const long long gr = base + g;
        /* bulk stores: a query item's rows are written back into the stage, then copied out */
        const bool bst = a.bst && lim == a.rows;
        raw *y = nullptr;
        if (gr < lim) {
            long long b, s;
            const raw *x;
            const bool kvrow = decode_row<DT>(a, gr, b, s, x, y);
            const uint2 *xs = reinterpret_cast<const uint2 *>(wb + (size_t)(st * 8 + g) * rs) + p; /* group u: xs[4u] */
            char *yb = reinterpret_cast<char *>(y) + 8 * p;                                        /* group u: yb + 32u */
            /* the tail's table values, loaded before the sum so that their latency hides under it */
            float4 tc[RT ? RT : 1], tsn[RT ? RT : 1];
            if constexpr (RT > 0) {
                const float *cs = a.cos + b * a.cos_s[0] + s * a.cos_s[1];
                const float *sn = a.sin + b * a.sin_s[0] + s * a.sin_s[1];
#pragma unroll
                for (int k = 0; k < RT; ++k) {
                    const int t = 16 * k + 4 * p;
                    if (a.tab16) {
                        tc[k] = __ldg(reinterpret_cast<const float4 *>(cs + t));
                        tsn[k] = __ldg(reinterpret_cast<const float4 *>(sn + t));
                    } else {
                        const long long c1 = a.cos_s[2], s1 = a.sin_s[2];
                        tc[k] = make_float4(__ldg(cs + t * c1), __ldg(cs + (t + 1) * c1), __ldg(cs + (t + 2) * c1), __ldg(cs + (t + 3) * c1));
                        tsn[k] = make_float4(__ldg(sn + t * s1), __ldg(sn + (t + 1) * s1), __ldg(sn + (t + 2) * s1), __ldg(sn + (t + 3) * s1));
                    }
                }
            }
            /* CPU lanes 4p + i, i = 0..3, channels 16u + 4p + i in the CPU's order */
            double q0 = 0.0, q1 = 0.0, q2 = 0.0, q3 = 0.0;
#pragma unroll 8
            for (int u = 0; u < G; ++u) {
                const uint2 v = xs[4 * u];
                double v0, v1, v2, v3;
                word_to_double<DT>(v.x, v0, v1);
                word_to_double<DT>(v.y, v2, v3);
                q0 = fma(v0, v0, q0), q1 = fma(v1, v1, q1), q2 = fma(v2, v2, q2), q3 = fma(v3, v3, q3);
            }
            /* width 8: lanes 4p+i += 4(p+2)+i (thread p ^ 2); width 4: += thread p ^ 1 (the sums are
             * the same in every thread: a + b == b + a); width 2 and 1 in the thread */
            q0 += __shfl_xor_sync(mask, q0, 2), q1 += __shfl_xor_sync(mask, q1, 2);
            q2 += __shfl_xor_sync(mask, q2, 2), q3 += __shfl_xor_sync(mask, q3, 2);
            q0 += __shfl_xor_sync(mask, q0, 1), q1 += __shfl_xor_sync(mask, q1, 1);
            q2 += __shfl_xor_sync(mask, q2, 1), q3 += __shfl_xor_sync(mask, q3, 1);
            const float ss = (float)((q0 + q2) + (q1 + q3));
            const float hdf = (float)a.hd;
            if (!kvrow) {
                const float r = round_to<DT>(__fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, hdf), a.eps))));
                const unsigned rh = (unsigned)Elt<DT>::st(r), r2 = rh | rh << 16; /* r is a T value: exact */
                uint2 *xw = const_cast<uint2 *>(xs);
                auto put = [&](int u, uint2 o) {
                    if (bst) xw[4 * u] = o;
                    else st_w2(yb + 32 * u, o);
                };
                if (DT == ROPEKIT_FLOAT16 || r >= 0x1p-9f) { /* mul2_rt is Rt(x * r) */
#pragma unroll 4
                    for (int u = 0; u < nn; ++u) {
                        const uint2 v = xs[4 * u];
                        put(u, make_uint2(mul2_rt<DT>(v.x, r2), mul2_rt<DT>(v.y, r2)));
                    }
#pragma unroll
                    for (int k = 0; k < RT; ++k) {
                        const uint2 v = xs[4 * (nn + k)];
                        put(nn + k, rotate_group<DT>(make_uint2(mul2_rt<DT>(v.x, r2), mul2_rt<DT>(v.y, r2)), tc[k], tsn[k]));
                    }
                } else { /* bfloat16, r < 2^-9 (or NaN): the products in float */
                    auto sc = [&](unsigned w) { return pack2<DT>(__fmul_rn(lo_of<DT>(w), r), __fmul_rn(hi_of<DT>(w), r)); };
#pragma unroll 1
                    for (int u = 0; u < nn; ++u) {
                        const uint2 v = xs[4 * u];
                        put(u, make_uint2(sc(v.x), sc(v.y)));
                    }
#pragma unroll
                    for (int k = 0; k < RT; ++k) {
                        const uint2 v = xs[4 * (nn + k)];
                        put(nn + k, rotate_group<DT>(make_uint2(sc(v.x), sc(v.y)), tc[k], tsn[k]));
                    }
                }
            } else {
                const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, hdf), a.eps)));
                /* k[c] = Rt((x[c] * r) * w[c]) for the 4 channels of group u, as floats */
                auto normed = [&](int u, float *f) {
                    const uint2 v = xs[4 * u];
                    const int c = 16 * u + 4 * p;
                    float4 wv;
                    if (a.w16) wv = __ldg(reinterpret_cast<const float4 *>(a.w + c));
                    else wv = make_float4(__ldg(a.w + c * a.ws), __ldg(a.w + (c + 1) * a.ws), __ldg(a.w + (c + 2) * a.ws), __ldg(a.w + (c + 3) * a.ws));
                    f[0] = round_to<DT>(__fmul_rn(__fmul_rn(lo_of<DT>(v.x), r), wv.x));
                    f[1] = round_to<DT>(__fmul_rn(__fmul_rn(hi_of<DT>(v.x), r), wv.y));
                    f[2] = round_to<DT>(__fmul_rn(__fmul_rn(lo_of<DT>(v.y), r), wv.z));
                    f[3] = round_to<DT>(__fmul_rn(__fmul_rn(hi_of<DT>(v.y), r), wv.w));
                };
                if (a.fp8) { /* blocks of 64 channels = 4 groups (nope % 64 == 0) */
#pragma unroll 1
                    for (int u0 = 0; u0 < nn; u0 += 4) {
                        float v[16];
                        float amax = 0.0f;
#pragma unroll
                        for (int i = 0; i < 4; ++i) normed(u0 + i, v + 4 * i);
#pragma unroll
                        for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(v[i]));
                        amax = fmaxf(amax, __shfl_xor_sync(mask, amax, 2));
                        amax = fmaxf(amax, __shfl_xor_sync(mask, amax, 1));
                        const float scale = fp8_block_scale(amax);
                        const float inv = __frcp_rn(scale); /* x / scale == x * (1 / scale): see the staged kernel */
#pragma unroll
                        for (int i = 0; i < 16; ++i) {
                            const float q = fminf(fmaxf(__fmul_rn(v[i], inv), -448.0f), 448.0f);
                            v[i] = __fmul_rn(e4m3_round(q), scale);
                        }
#pragma unroll
                        for (int i = 0; i < 4; ++i)
                            st_w2(yb + 32 * (u0 + i), make_uint2(pack2<DT>(v[4 * i], v[4 * i + 1]), pack2<DT>(v[4 * i + 2], v[4 * i + 3])));
                    }
                } else {
#pragma unroll 1
                    for (int u = 0; u < nn; ++u) {
                        float v[4];
                        normed(u, v);
                        st_w2(yb + 32 * u, make_uint2(pack2<DT>(v[0], v[1]), pack2<DT>(v[2], v[3])));
                    }
                }
#pragma unroll
                for (int k = 0; k < RT; ++k) {
                    float v[4];
                    normed(nn + k, v);
                    const uint2 w2 = make_uint2(pack2<DT>(v[0], v[1]), pack2<DT>(v[2], v[3]));
                    st_w2(yb + 32 * (nn + k), rotate_group<DT>(w2, tc[k], tsn[k]));
                }
            }
        }
        if (bst) { /* the rows written back into the stage: each row's thread 0 copies its row out */
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncwarp();
            if (p == 0 && gr < lim) {
                const unsigned src = smem_u32(wb + (size_t)(st * 8 + g) * rs);
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(y), "r"(src), "r"(rbytes) : "memory");
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            }
        }
        __syncwarp();
        /* the stage's rows have been read (their values are in registers or stored): refill it
         * (the proxy fence orders those generic-proxy reads before the async-proxy writes) */
        long long nlim;
        const long long nbase = item(k + NS, nlim);
        if (nbase >= 0) {
            /* the stage's bulk stores have read it */
            if (bst && p == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue(nbase, nlim, st);
        }
    }
    /* the shared memory stays until the bulk stores have read it (their writes complete
     * before the kernel does) */
    if (a.bst && p == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
}

/* Items (quads of rows, batches of 8 rows) per warp in the pipelined and bulk-copy kernels:
 * 0 = as many blocks as are resident at once, each warp striding over the whole list (a static
 * split: on an H200 ncu measured SMs' active cycles from 198 k to 296 k, average 264 k, in one
 * launch); M > 0 = M items per warp and as many blocks as that takes, handed to the SMs by the
 * hardware as blocks finish. ROPEKIT_CUDA_QKNORM_ITEMS=0..64 (timing knob). */
int qknorm_items() { /* (small calls keep a resident-size grid: decode measured 8.1 vs 21.7 us) */
    static const int v = env_int("ROPEKIT_CUDA_QKNORM_ITEMS", 0, 64, -1);
    return v; /* -1: the kernel's default (bulk-copy 1, pipelined 0) */
}
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
template <int DT, int RT, int NN, int MINB>
ropekit_status launch_qknorm_reg_t(const QkArgs &a, cudaStream_t st) {
    const long long per = 256 / 8;
    long long blocks = (a.rows + per - 1) / per;
    if (blocks > (1ll << 30)) blocks = 1ll << 30; /* the kernel loops over the rest */
    qknorm_reg_kernel<DT, RT, NN, MINB><<<(unsigned)blocks, 256, 0, st>>>(a);
    return launched("qknorm kernel launch");
}
/* Blocks of kernel f (threads per block, shm bytes of dynamic shared memory) resident on one
 * SM of the current device, in *n; a few (kernel, size, device) answers are kept. */
cudaError_t resident_per_sm(const void *f, int threads, size_t shm, int *n) {
    struct Entry {
        const void *f;
        size_t shm;
        int threads, dev, n;
    };
    static std::mutex mu;
    static Entry cache[16];
    static int next = 0;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    std::lock_guard<std::mutex> lk(mu);
    for (const Entry &c : cache)
        if (c.n > 0 && c.f == f && c.shm == shm && c.threads == threads && c.dev == dev) return *n = c.n, cudaSuccess;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, f, threads, shm);
    if (e != cudaSuccess) return e;
    if (*n <= 0) return cudaErrorInvalidConfiguration;
    cache[next] = Entry{f, shm, threads, dev, *n}, next = (next + 1) % 16;
    return cudaSuccess;
}
/* The launch of the pipelined and bulk-copy kernels, whose warps walk `items` work items
 * (quads, batches of 8 rows): `warps` per block, shm bytes of dynamic shared memory. per_warp
 * 0: as many blocks as are resident at once (fewer for small calls), each warp striding over
 * the list; M > 0: M items per warp and as many blocks as that takes (at least the resident
 * count), handed to the SMs by the hardware as blocks finish. */
ropekit_status launch_walk(void (*kern)(QkArgs), const QkArgs &a, long long items, int warps, size_t shm,
                           int per_warp, cudaStream_t st) {
    cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void *>(kern),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm);
    if (e != cudaSuccess) return cuda_fail(e, "qknorm shared memory");
    int per_sm = 0;
    e = resident_per_sm(reinterpret_cast<const void *>(kern), 32 * warps, shm, &per_sm);
    if (e != cudaSuccess) return cuda_fail(e, "qknorm kernel setup");
    long long blocks = (items + warps - 1) / warps;
    const long long resident = (long long)per_sm * sm_count();
    if (per_warp > 0 && blocks > resident) {
        blocks = (items + (long long)warps * per_warp - 1) / ((long long)warps * per_warp);
        if (blocks < resident) blocks = resident;
        if (blocks > (1ll << 30)) blocks = 1ll << 30; /* the warps loop over the rest */
    } else if (blocks > resident) {
        blocks = resident;
    }
    kern<<<(unsigned)blocks, 32 * warps, shm, st>>>(a);
    return launched("qknorm kernel launch");
}
/* The pipelined kernel: 4 warps per block, NS stages of 4 staged rows per warp. */
template <int DT, int RT, int NN, int NS>
ropekit_status launch_qknorm_pipe_t(const QkArgs &a, cudaStream_t st) {
    constexpr size_t shm = 4 * NS * 4 * RK_QP_RW * sizeof(unsigned);
    const int per_warp = qknorm_items() < 0 ? 0 : qknorm_items();
    return launch_walk(qknorm_pipe_kernel<DT, RT, NN, NS>, a, (a.rows + 3) / 4, 4, shm, per_warp, st);
}
/* Whether the current device has the bulk copy (sm_90 and later). */
bool device_sm90() {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 9;
}
/* The bulk-copy kernel: RK_QT_WARPS warps per block, NS stages of 8 rows per warp. */
template <int DT, int RT, int NS, int MINB>
ropekit_status launch_qknorm_tma_t(const QkArgs &a, cudaStream_t st) {
    const int rs = ((a.hd * 2 + 127) & ~127) + 32;
    const size_t shm = 128 + (size_t)RK_QT_WARPS * NS * 8 * rs;
    const long long items = (a.T + 7) / 8 + (a.rows - a.T + 7) / 8;
    const int per_warp = qknorm_items() < 0 ? 1 : qknorm_items();
    return launch_walk(qknorm_tma_kernel<DT, RT, NS, MINB>, a, items, RK_QT_WARPS, shm, per_warp, st);
}
template <int DT> ropekit_status launch_qknorm_reg(const QkArgs &a, int variant, cudaStream_t st) {
    if (variant >= 4) {
        return a.rd == 0 ? launch_qknorm_tma_t<DT, 0, 1, 5>(a, st) : launch_qknorm_tma_t<DT, 4, 1, 5>(a, st);
    }
    if (variant == 3) {
        if (a.rd == 0) return launch_qknorm_pipe_t<DT, 0, 0, 2>(a, st);
        if (a.hd == 512) return launch_qknorm_pipe_t<DT, 4, 28, 2>(a, st);
        return launch_qknorm_pipe_t<DT, 4, 0, 2>(a, st);
    }
    if (a.rd == 0) return launch_qknorm_reg_t<DT, 0, 0, 3>(a, st);
    if (a.hd == 512) return launch_qknorm_reg_t<DT, 4, 28, 3>(a, st);
    return launch_qknorm_reg_t<DT, 4, 0, 3>(a, st);
}

/* The register kernels' conditions: 16-bit rows of 32-bit words (channel stride 1, even row
 * strides, 4-byte aligned bases), head_dim % 16 == 0 and <= 512, rope 0 or 64 (so nope % 16 ==
 * 0: every thread's tail words are its last ones). Variant (ROPEKIT_CUDA_QKNORM_KERNEL, a
 * timing knob): 5 (default) 4 for calls of >= 65536 rows, else 3; 4 the bulk-copy kernel where
 * the device is sm_90 or later, the input rows 16-byte aligned and the output rows 8-byte
 * aligned, else 3; 3 the pipelined kernel where
 * the input rows are 16-byte aligned, else the register kernel; 1 the register kernel; 0 the
 * staged kernel. H200, same round (previous session's R3), DS-V4 2048 tokens, vs copy: float16
 * 77.9 / 80.5 / 84.7%, bfloat16 75.1 / 79.9 / 83.8% (staged / register / pipelined). */
int qknorm_reg_variant() {
    static const int v = env_int("ROPEKIT_CUDA_QKNORM_KERNEL", 0, 5, 5);
    /* 2 (a 64-register register kernel, measured slower: spills) is no longer built */
    return v;
}
bool qknorm_reg_ok(const rk_qknorm_plan *p) {
    if (!qknorm_reg_variant() || p->dtype == ROPEKIT_FLOAT32) return false;
    if (p->head_dim % 16 != 0 || p->head_dim > 16 * RK_QR_MAXW) return false;
    if (p->rope_dim != 0 && p->rope_dim != 64) return false;
    if (p->head_dim <= p->rope_dim || (p->simulate_fp8 && p->nope % 64 != 0)) return false;
    auto words = [](const void *base, const int64_t *st, int n) {
        if ((uintptr_t)base % 4 != 0 || st[n - 1] != 1) return false;
        for (int i = 0; i < n - 1; ++i)
            if (st[i] % 2 != 0) return false;
        return true;
    };
    return words(p->q, p->qs, 4) && words(p->q_out, p->qos, 4) && words(p->kv, p->kvs, 3) &&
           words(p->kv_out, p->kvos, 3);
}

/* Bytes per global access of a 16-bit QKNorm row: bfloat16 8 (conflict-free staging: 76% of
 * copy vs 73% with 16), float16 16 (78.5% vs 76%: its conversions cost more than the bank
 * conflicts; H200, same calls). ROPEKIT_CUDA_QKNORM_PIECE=8|16 forces one (timing knob). */
int qknorm_piece(ropekit_dtype dt) {
    static const int forced = env_int("ROPEKIT_CUDA_QKNORM_PIECE", 8, 16, 0);
    if (forced == 8 || forced == 16) return forced;
    return dt == ROPEKIT_BFLOAT16 ? 8 : 16;
}

} // namespace

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
    if (qknorm_reg_ok(p)) {
        a.tab_vec = p->rope_dim > 0 && p->cos_s[2] == 1 && p->sin_s[2] == 1 &&
                    (uintptr_t)p->cos % 8 == 0 && (uintptr_t)p->sin % 8 == 0 && p->cos_s[0] % 2 == 0 &&
                    p->cos_s[1] % 2 == 0 && p->sin_s[0] % 2 == 0 && p->sin_s[1] % 2 == 0;
        int v = qknorm_reg_variant();
        /* the pipelined kernel copies 16-byte chunks: 16-byte aligned input rows */
        const bool rows16 = (uintptr_t)p->q % 16 == 0 && (uintptr_t)p->kv % 16 == 0 && p->qs[0] % 8 == 0 &&
                            p->qs[1] % 8 == 0 && p->qs[2] % 8 == 0 && p->kvs[0] % 8 == 0 && p->kvs[1] % 8 == 0;
        /* the bulk-copy kernel also stores 8-byte pieces: 8-byte aligned output rows */
        const bool out8 = (uintptr_t)p->q_out % 8 == 0 && (uintptr_t)p->kv_out % 8 == 0 && p->qos[0] % 4 == 0 &&
                          p->qos[1] % 4 == 0 && p->qos[2] % 4 == 0 && p->kvos[0] % 4 == 0 && p->kvos[1] % 4 == 0;
        /* 5 (default): the bulk-copy kernel for large calls, the pipelined one for small calls
         * (decode: a warp has one item, whose latency the bulk-copy kernel's 8-row items and
         * 4-thread rows lengthen; H200: decode 64 tokens 10.4 vs 8.3 us) */
        if (v == 5) v = a.rows >= 65536 ? 4 : 3;
        if (v == 4 && !(rows16 && out8 && device_sm90())) v = 3;
        if (v == 3 && !rows16) v = 1;
        a.tab16 = p->rope_dim > 0 && p->cos_s[2] == 1 && p->sin_s[2] == 1 && (uintptr_t)p->cos % 16 == 0 &&
                  (uintptr_t)p->sin % 16 == 0 && p->cos_s[0] % 4 == 0 && p->cos_s[1] % 4 == 0 &&
                  p->sin_s[0] % 4 == 0 && p->sin_s[1] % 4 == 0;
        a.w16 = p->ws == 1 && (uintptr_t)p->w % 16 == 0;
        /* bulk stores of the query rows: 16-byte aligned output rows */
        a.bst = (uintptr_t)p->q_out % 16 == 0 && p->qos[0] % 8 == 0 && p->qos[1] % 8 == 0 &&
                p->qos[2] % 8 == 0 && p->qos[3] == 1;
        return p->dtype == ROPEKIT_FLOAT16 ? launch_qknorm_reg<ROPEKIT_FLOAT16>(a, v, st)
                                           : launch_qknorm_reg<ROPEKIT_BFLOAT16>(a, v, st);
    }
    if (p->dtype == ROPEKIT_FLOAT32) return launch_qknorm_t<ROPEKIT_FLOAT32, false>(a, nhw * 16, shm, st);
    const bool w8 = qknorm_piece(p->dtype) == 8;
    if (p->dtype == ROPEKIT_FLOAT16)
        return w8 ? launch_qknorm_t<ROPEKIT_FLOAT16, true>(a, nhw * 16, shm, st)
                  : launch_qknorm_t<ROPEKIT_FLOAT16, false>(a, nhw * 16, shm, st);
    return w8 ? launch_qknorm_t<ROPEKIT_BFLOAT16, true>(a, nhw * 16, shm, st)
              : launch_qknorm_t<ROPEKIT_BFLOAT16, false>(a, nhw * 16, shm, st);
}

} // namespace rk_cuda
