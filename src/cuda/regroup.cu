/* InverseRotaryRegroup on the GPU.
 *
 *   regroup_kernel  one thread per 16-byte chunk of a token's row (4 chunks in flight per
 *                   thread), written to its group. */
#include "common.cuh"

namespace rk_cuda {
namespace {

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
    int same_c0; /* every chunk of a thread at the same channel of its head (regroup_words) */
};

#define RK_RG_BATCH 4 /* chunks per thread, all loaded before the first store */

/* Where the chunk starting at feature f0 of a token goes: group g, offset gc in the group's
 * output row, and its channel c0 within the head (32-bit fast division when F < 2^31). */
__device__ __forceinline__ void chunk_place(const RgArgs &a, long long f0, long long &g,
                                            long long &gc, int &c0) {
    if (a.small) {
        const unsigned g32 = fdiv((unsigned)f0, a.d_gd);
        g = g32, gc = (unsigned)f0 - g32 * (unsigned)a.gd;
        c0 = (int)((unsigned)f0 - fdiv((unsigned)f0, a.d_hd) * (unsigned)a.hd);
    } else {
        g = f0 / a.gd, gc = f0 - g * a.gd, c0 = (int)(f0 % a.hd);
    }
}

/* The table columns of the 4 pairs (c0 + i, c0 + i + 1), i = 0, 2, 4, 6, of a chunk of 8
 * channels at head channel c0 (nope and c0 even). Pairs before nope (a chunk across nope) read
 * column 0 instead, so that the 8 loads are issued together with no branch between them; their
 * results are not used (rotate_words). */
__device__ __forceinline__ void chunk_columns(const RgArgs &a, const float *cs, const float *sn,
                                              int c0, float2 *c2, float2 *s2) {
    if (a.tab_vec) { /* rows contiguous, 8-byte aligned pairs */
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int tt = max(c0 + 2 * q - a.nope, 0);
            c2[q] = __ldg(reinterpret_cast<const float2 *>(cs + tt));
            s2[q] = __ldg(reinterpret_cast<const float2 *>(sn + tt));
        }
    } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const long long tt = max(c0 + 2 * q - a.nope, 0);
            c2[q] = make_float2(__ldg(cs + tt * a.cos_s[1]), __ldg(cs + (tt + 1) * a.cos_s[1]));
            s2[q] = make_float2(__ldg(sn + tt * a.sin_s[1]), __ldg(sn + (tt + 1) * a.sin_s[1]));
        }
    }
}

/* Inverse rotation of the pairs of chunk w at or after nope; pair q = word q (lo_of / hi_of,
 * one paired rounding by pack2); the words before nope are kept by select, bit for bit. */
template <int DT>
__device__ __forceinline__ void rotate_words(uint4 &w, int c0, int nope, const float2 *c2,
                                             const float2 *s2) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        unsigned &ww = word(w, q);
        const double x0 = lo_of<DT>(ww), x1 = hi_of<DT>(ww);
        const float y0 = (float)(x0 * (double)c2[q].x + x1 * (double)s2[q].x);
        const float y1 = (float)(x1 * (double)c2[q].y - x0 * (double)s2[q].y);
        const unsigned r = pack2<DT>(y0, y1);
        ww = c0 + 2 * q < nope ? ww : r;
    }
}

/* regroup_kernel's loop for contiguous 16-bit rows (V = 8): a chunk stays one uint4 (4
 * registers) from load to store. The element-array form (8 registers per chunk) spilled in the
 * bfloat16 kernel (40 bytes of stack at 64 registers). Same arithmetic and bits in every MODE:
 *   0  the 2026-12-01 loop: per pair a branch (pair before nope?) and the pair's two table
 *      loads, so a tail chunk waited for 4 table latencies one after the other;
 *   1  a chunk's 8 table loads issued together (chunk_columns), pairs by select
 *      (rotate_words); x loads skip L1 allocation, y stores are evict-first (touched once);
 *   2  as 1, and where every chunk of the thread is at the same head channel (a.same_c0: the
 *      grid step is a multiple of the head) the columns are loaded once, before the loop,
 *      while the first x loads are in flight. */
template <int DT, int MODE>
__device__ __forceinline__ void regroup_words(const RgArgs &a, const typename Elt<DT>::raw *x,
                                              typename Elt<DT>::raw *out, const float *cs,
                                              const float *sn, long long step) {
    constexpr int V = 8;
    const long long jfirst = (long long)blockIdx.y * blockDim.x + threadIdx.x;
    float2 hc[4], hs[4];
    bool htail = false;
    int hc0 = 0;
    if constexpr (MODE == 2) {
        if (jfirst < a.chunks) {
            long long g, gc;
            chunk_place(a, jfirst * V, g, gc, hc0);
            htail = hc0 + V > a.nope;
        }
        if (htail) chunk_columns(a, cs, sn, hc0, hc, hs);
    }
    for (long long j0 = jfirst; j0 < a.chunks; j0 += RK_RG_BATCH * step) {
        uint4 w[RK_RG_BATCH];
#pragma unroll
        for (int k = 0; k < RK_RG_BATCH; ++k) {
            const long long j = j0 + k * step;
            if (j < a.chunks) {
                if constexpr (MODE >= 1) w[k] = ld_x(x + j * V, RK_HINT_X_NOALLOC);
                else w[k] = *reinterpret_cast<const uint4 *>(x + j * V);
            }
        }
#pragma unroll
        for (int k = 0; k < RK_RG_BATCH; ++k) {
            const long long j = j0 + k * step;
            if (j >= a.chunks) break;
            long long g, gc;
            int c0;
            chunk_place(a, j * V, g, gc, c0);
            if constexpr (MODE == 2) {
                if (htail) rotate_words<DT>(w[k], c0, a.nope, hc, hs);
            } else if constexpr (MODE == 1) {
                if (c0 + V > a.nope) {
                    float2 c2[4], s2[4];
                    chunk_columns(a, cs, sn, c0, c2, s2);
                    rotate_words<DT>(w[k], c0, a.nope, c2, s2);
                }
            } else if (c0 + V > a.nope) { /* pairs (i, i+1), i even: nope and c0 are even */
                const float *ct = cs + (c0 - a.nope) * a.cos_s[1], *stb = sn + (c0 - a.nope) * a.sin_s[1];
#pragma unroll
                for (int q = 0; q < V / 2; ++q) {
                    const int i = 2 * q;
                    if (c0 + i < a.nope) continue; /* copied bit for bit */
                    float2 c2, s2;
                    if (a.tab_vec) { /* rows contiguous, 8-byte aligned pairs */
                        c2 = __ldg(reinterpret_cast<const float2 *>(ct + i));
                        s2 = __ldg(reinterpret_cast<const float2 *>(stb + i));
                    } else {
                        c2 = make_float2(__ldg(ct + i * a.cos_s[1]), __ldg(ct + (i + 1) * a.cos_s[1]));
                        s2 = make_float2(__ldg(stb + i * a.sin_s[1]), __ldg(stb + (i + 1) * a.sin_s[1]));
                    }
                    unsigned &ww = word(w[k], q);
                    const double x0 = lo_of<DT>(ww), x1 = hi_of<DT>(ww);
                    const float y0 = (float)(x0 * (double)c2.x + x1 * (double)s2.x);
                    const float y1 = (float)(x1 * (double)c2.y - x0 * (double)s2.y);
                    ww = pack2<DT>(y0, y1);
                }
            }
            if constexpr (MODE >= 1) st_y(out + g * a.os[0] + gc, w[k], RK_HINT_Y_STREAM);
            else *reinterpret_cast<uint4 *>(out + g * a.os[0] + gc) = w[k];
        }
    }
}

template <int DT, int V, int MODE>
__global__ void __launch_bounds__(256, MODE == 2 ? 3 : 4) regroup_kernel(const RgArgs a) {
    typedef typename Elt<DT>::raw raw;
    const long long n = blockIdx.x;
    const raw *x = reinterpret_cast<const raw *>(a.x) + n * a.xs[0];
    raw *out = reinterpret_cast<raw *>(a.out) + n * a.os[1];
    const float *cs = a.cos ? a.cos + n * a.cos_s[0] : nullptr;
    const float *sn = a.sin ? a.sin + n * a.sin_s[0] : nullptr;
    const long long step = (long long)gridDim.y * blockDim.x;
    if constexpr (sizeof(raw) == 2 && V == 8) { /* 16-bit chunks kept as 4 words: pair q = word q */
        regroup_words<DT, MODE>(a, x, out, cs, sn, step);
    } else {
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
                chunk_place(a, f0, g, gc, c0);
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
}

template <int DT, int V>
ropekit_status launch_regroup_t(const RgArgs &a, long long n, cudaStream_t st) {
    long long per = (a.chunks + 256 * RK_RG_BATCH - 1) / (256 * RK_RG_BATCH);
    if (per < 1) per = 1;
    if (per > 65535) per = 65535;
    int threads = a.chunks < 256 ? (int)((a.chunks + 31) / 32 * 32) : 256;
    /* ROPEKIT_CUDA_REGROUP=0|1|2 (timing knob, 16-bit chunks): 0 plain accesses, 1 cache hints,
     * 2 hints + table columns hoisted (where every chunk of a thread is at the same channel) */
    static const int mode = env_int("ROPEKIT_CUDA_REGROUP", 0, 2, 1);
    const long long step = per * threads;
    RgArgs b = a;
    b.same_c0 = (step * V) % a.hd == 0;
    const dim3 grid((unsigned)n, (unsigned)per);
    if constexpr (V != 8) {
        regroup_kernel<DT, V, 0><<<grid, threads, 0, st>>>(b);
    } else {
        if (mode == 0) regroup_kernel<DT, V, 0><<<grid, threads, 0, st>>>(b);
        else if (mode == 2 && b.same_c0) regroup_kernel<DT, V, 2><<<grid, threads, 0, st>>>(b);
        else regroup_kernel<DT, V, 1><<<grid, threads, 0, st>>>(b);
    }
    return launched("regroup kernel launch");
}

} // namespace

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

} // namespace rk_cuda
