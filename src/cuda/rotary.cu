/* RotaryEmbedding (ai.onnx and com.microsoft) and MRotaryEmbedding on the GPU: one kernel family
 * (MRoPE's per-column id streams: src/cuda/mrope.cuh), one launch path (run_rotary).
 *
 *   rotary_flat_kernel  when channels are contiguous and 16-byte chunks fit the layout: one
 *                   thread per (token, group of 2 heads (1 on one-wave calls: decode), 16-byte
 *                   chunk), no shared memory, no
 *                   barrier; rotated chunks before copied ones (warp-uniform paths with partial
 *                   rotary). It issues the 2 heads' x loads first (L1::no_allocate), reads the
 *                   chunk's table columns once (they stay in L1/L2 for the other heads), converts
 *                   them once to the wide type and stores with evict-first (.cs) hints.
 *                   Half-split chunks load lanes [k, k+V) and [k+h, k+h+V); interleaved chunks V
 *                   adjacent lanes; chunks of [R, H) are copied bit for bit. Every 16-byte access
 *                   is one vector instruction (inline PTX: nvcc split some plain uint4 stores into
 *                   four).
 *   rotary_tile_kernel  the same chunks, 2 heads per thread; a block's first threads gather its
 *                   tokens' table columns into shared memory once per token, one barrier.
 *                   Chosen by tile_preferred (MRoPE, full-rotary rows with tables in x's
 *                   dtype), measured faster there on an H200. Both share rotate_chunk
 *                   (branch-free arithmetic). ROPEKIT_CUDA_ROTARY_KERNEL=flat|tile forces one
 *                   (ropekit_cuda.h; tests and benchmarks).
 *   rotary_decode_kernel  calls of at most one wave (decode steps; not MRoPE): one block row
 *                   per token, 8- or 16-byte pieces, 1-2 heads per thread
 *                   (src/cuda/rotary_decode.cuh; decode_preferred, decode_shape).
 *   rotary_kernel   the same for any strides (one element per lane): a block takes a few
 *                   tokens, gathers their columns into shared memory once, heads reuse them.
 * Position ids are checked in the kernel: a bad id's row is never read, its pairs are copied,
 * and the event is recorded in the error state (record_bad). */
#include "common.cuh"

#include <cstring>

namespace rk_cuda {
namespace {

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
    int hp;                /* tile kernel: row stride of the staged columns (h rounded up to 8) */
    FastDiv d_h;
    int bulk_nh, bulk_groups; /* bulk kernel: heads per item, items per token */
    int bulk_stage;           /* bulk kernel: bytes of one stage (bulk_nh head rows) */
    int flat_g1;              /* flat kernel with one head per thread (one-wave calls) */
    int dec_copy16;           /* decode kernel: pieces of [R, H) are 16 bytes (rotary_decode.cuh) */
};

#include "mrope.cuh"

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

/* Count token (b, s)'s id of stream `st` in the device error state when it selects no row. */
__device__ __forceinline__ void record_if_bad(const RotArgs &a, long long b, long long s, int st) {
    long long row, value;
    if (token_row(a, b, s, st, &row, &value)) return;
    int kind = a.rows == RK_ROWS_MROPE ? ERR_IDS_MROPE : a.rows == RK_ROWS_OFFSET ? ERR_OFFSET : ERR_IDS_2D;
    unsigned long long key = (unsigned long long)((a.rows == RK_ROWS_MROPE ? st : 0) * a.B + b) *
                                 (unsigned long long)a.S + (unsigned long long)s;
    record_bad(a.err, key, kind, st, b, s, value, a.table_rows, a.S);
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

/* The rotation in double of x values already widened (products exact in double: an fma gives the
 * same bits), rounded once to float: rotate<true>'s and the decode kernel's. */
__device__ __forceinline__ void rotate_d(double a, double b, double c, double s, float *y0, float *y1) {
    *y0 = (float)(c * a - s * b);
    *y1 = (float)(s * a + c * b);
}

template <bool WIDE>
__device__ __forceinline__ void rotate(float x0, float x1, typename std::conditional<WIDE, double, float>::type c,
                                       typename std::conditional<WIDE, double, float>::type s,
                                       float *y0, float *y1) {
    if constexpr (WIDE) {
        rotate_d(x0, x1, c, s, y0, y1);
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
            record_if_bad(a, tb[tl], ts[tl], st);
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

/* The rotation of one 16-byte chunk of G heads (flat and tile kernels): va/vb hold x's chunks
 * (half-split: lanes [k0, k0+V) and [k0+h, k0+h+V); adjacent pairs: va alone), cf/sf the
 * chunk's NC table columns, bit j of `good` whether column j has a table row (else its pairs
 * keep x's bits). Branch-free: a pair whose column has no row is computed with cos 1, sin 0 and
 * then replaced by x's bits through a select, so the whole chunk is one basic block that ptxas
 * can schedule across pairs and heads (a branch per column, as until 2026-12-01, split it:
 * bfloat16 rows +1.5-2.5 points of the copy on an H200). SKIP keeps that branch for the
 * half-split 16-bit columns: the flat kernel's float16 rows measured 1-4 points slower without
 * it (bench/results-cuda.md), so they keep the earlier code. */
/* FIN: bfloat16 results rounded by pack2_finite (one paired conversion; a NaN result is a NaN
 * with the hardware's sign and payload, which ropekit.h section 5 leaves unspecified) instead of
 * pack2 (the CPU's NaN rule: about 8 more instructions per word). Same bits for every other
 * value. The tile kernel (half-split, uncapped: 49 registers) and the bulk kernel use it for
 * bfloat16 x with bfloat16 tables: H200, R1/R2 of 2026-12-02 (session 7), same-run A/B against
 * pack2: Llama S=8192 47.68 -> 46.78 and 46.88 -> 46.56 µs, S=4096 26.98 -> 26.88 and 27.07 ->
 * 26.59, Phi-2 (bulk) 47.90 -> 47.04 and 47.49 -> 46.78; ncu (Llama S=8192): 25.3 M -> 20.3 M
 * instructions. Capped at 48 registers it spills 4 bytes and was level (R1); with a NaN check
 * and an exact redo of the chunk it spilled 92 bytes and was 19% slower (R1). */
template <int DT, bool FIN> __device__ __forceinline__ unsigned pack2_fin(float lo, float hi) {
    if constexpr (FIN) return pack2_finite<DT>(lo, hi);
    else return pack2<DT>(lo, hi);
}

template <int DT, int TDT, bool IL, int G, bool SKIP, bool FIN = false>
__device__ __forceinline__ void rotate_chunk(uint4 (&va)[G], uint4 (&vb)[G], const float *cf,
                                             const float *sf, unsigned good) {
    constexpr bool WIDE = DT == ROPEKIT_FLOAT32 || TDT == ROPEKIT_FLOAT32;
    typedef typename std::conditional<WIDE, double, float>::type W;
    typedef typename Elt<DT>::raw raw;
    constexpr int V = 16 / sizeof(raw);
    constexpr int NC = IL ? V / 2 : V;
    if constexpr (sizeof(raw) == 4) { /* float32 x: a vector holds V floats */
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const bool ok = (good >> j) & 1; /* bad id: the pair is copied */
            const W c = cf[j], sn = sf[j];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                unsigned &w0 = word(va[g], IL ? 2 * j : j), &w1 = IL ? word(va[g], 2 * j + 1) : word(vb[g], j);
                float y0, y1;
                rotate<WIDE>(__uint_as_float(w0), __uint_as_float(w1), c, sn, &y0, &y1);
                w0 = ok ? __float_as_uint(y0) : w0, w1 = ok ? __float_as_uint(y1) : w1;
            }
        }
    } else if constexpr (IL) { /* 16-bit adjacent pairs: word j holds pair j */
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const bool ok = (good >> j) & 1;
            const W c = cf[j], sn = sf[j];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                unsigned &w = word(va[g], j);
                float y0, y1;
                rotate<WIDE>(lo_of<DT>(w), hi_of<DT>(w), c, sn, &y0, &y1);
                const unsigned n = pack2_fin<DT, FIN>(y0, y1);
                w = ok ? n : w;
            }
        }
    } else { /* 16-bit half-split: word q of va/vb holds columns 2q and 2q+1 */
#pragma unroll
        for (int q = 0; q < NC / 2; ++q) {
            const unsigned gm = (good >> (2 * q)) & 3u;
            if (SKIP && !gm) continue;
            const W c0 = cf[2 * q], s0 = sf[2 * q], c1 = cf[2 * q + 1], s1 = sf[2 * q + 1];
            /* halves whose column had a bad id keep x's bits */
            const unsigned keep = (gm & 1u ? 0u : 0xffffu) | (gm & 2u ? 0u : 0xffff0000u);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                unsigned &wa = word(va[g], q), &wb = word(vb[g], q);
                float ya0, yb0, ya1, yb1;
                rotate<WIDE>(lo_of<DT>(wa), lo_of<DT>(wb), c0, s0, &ya0, &yb0);
                rotate<WIDE>(hi_of<DT>(wa), hi_of<DT>(wb), c1, s1, &ya1, &yb1);
                const unsigned na = pack2_fin<DT, FIN>(ya0, ya1), nb = pack2_fin<DT, FIN>(yb0, yb1);
                wa = (na & ~keep) | (wa & keep), wb = (nb & ~keep) | (wb & keep);
            }
        }
    }
}

/* Flat kernel for 16-byte chunks (contiguous channels).
 *
 * Thread shape: one thread per (token, group of G heads, chunk); no shared memory, no barrier.
 * A token's threads are laid out rotation chunks first (ngroups x rot_items), then the copied
 * chunks of [R, H) (ngroups x copy_items), so that with partial rotary (Phi: 2 rotated and 6
 * copied chunks per head) a warp is all rotation or all copy instead of running both paths
 * one after the other with most lanes idle. Blocks of 128 threads (launch_rotary_flat).
 *
 * Order inside a rotation thread: the x loads of its G heads first (they do not depend on the
 * ids), then the id and the chunk's table columns (one 16-byte vector per 16 bytes of table;
 * an MRoPE chunk whose columns all read one stream loads like a plain one), converted once and
 * used for the G heads, column by column, so that a column's wide (double) cos/sin live only
 * while it is used. 16-bit results are rounded two at a time (pack2). x is loaded with
 * L1::no_allocate and y stored with .cs (evict first): RK_HINT_*, the largest single gain
 * measured (16-bit Llama rows 80% -> 88-90% of copy).
 *
 * G = FLAT_G = 2 heads per thread on calls of more than one wave, 1 on one-wave calls
 * (decode; run_rotary's flat_g1) (55-64 registers, 4 blocks of 256 threads per
 * SM). Until 2026-12-02 calls of more than one wave took G = 4 (80 registers: 3 blocks, 24
 * warps per SM); on an H200 (R1 of 2026-12-02, same-run A/B, bench/results-cuda.md) G = 2 was
 * faster on every row the flat kernel took: 16-bit x with float32 tables on Llama S=8192 48.3
 * -> 46.1 µs (90 -> 93-95% of the copy), S=4096 27.5 -> 26.4 µs, Phi-2 partial 52.1 -> 50.3 µs
 * (81 -> 84-85%), Phi-2 float32 93.0 -> 90.8 µs. */
constexpr int FLAT_G = 2;

template <int DT, int TDT, bool IL, int G>
__device__ __forceinline__ void rotary_flat_body(const RotArgs &a) {
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
            record_if_bad(a, b, s, st);
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
    scale_invert_cols<TDT, NC>(cf, sf, a.apply_scale, a.scale, a.inverse);
    rotate_chunk<DT, TDT, IL, G, DT == ROPEKIT_FLOAT16>(va, vb, cf, sf, good);
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (n0 + g >= a.N) continue;
        raw *q = yp + g * a.ys[2];
        st_y(q + (IL ? 2 * k0 : k0), va[g], hints);
        if (!IL) st_y(q + k0 + a.h, vb[g], hints);
    }
}

/* (A cap of 56 registers, 36 warps per SM, spilled 8-40 bytes and lost up to 11% on the
 * bfloat16 rows: R2 of 2026-12-02.) */
template <int DT, int TDT, bool IL, int G>
__global__ void __launch_bounds__(256, 4) rotary_flat_kernel(const RotArgs a) {
    rotary_flat_body<DT, TDT, IL, G>(a);
}

#include "rotary_decode.cuh"

/* Tile kernel (16-byte chunks, contiguous channels, as the flat kernel): a block takes `tpb`
 * tokens and one thread per (token, group of G = TILE_G heads, chunk). Each
 * thread issues its x loads first; meanwhile the block's first threads look up the tokens'
 * position ids and gather their table columns (fetch_cs: scale, inverse, MRoPE streams and
 * out-of-range ids as everywhere) into shared memory as floats, once per token for all of its
 * heads; one barrier; then every thread reads its chunk's columns from shared memory (16-byte
 * reads, broadcast to the threads of the same chunk). The id -> table chain runs once per token
 * instead of once per thread, and a thread holds only its own x vectors, so it needs few
 * registers (45-60 with G = 2) and an SM keeps more warps in flight than with the flat kernel's
 * 80-register threads. Same arithmetic (rotate_chunk) and same bits as the flat kernel.
 * Measured on an H200 (bench/results-cuda.md): G = 1 (32-50 registers) was 8-30 points of the
 * copy slower than the flat kernel on every row (each thread converts its own columns; float32
 * tables need 8 float<->double conversions per pair); G = 2 is faster on MRoPE and on most
 * 16-bit rows, slower on float32 and partial-rotary rows: tile_preferred chooses. */
constexpr int TILE_G = 2;
template <int DT, int TDT, bool IL, int G, bool FIN>
__device__ __forceinline__ void rotary_tile_body(const RotArgs &a) {
    typedef typename Elt<DT>::raw raw;
    constexpr int V = 16 / sizeof(raw);
    constexpr int NC = IL ? V / 2 : V; /* table columns per chunk: 2, 4 or 8 */
    extern __shared__ __align__(16) unsigned char smem[];
    const int hp = a.hp; /* row stride of the staged columns, a multiple of 8 */
    float *cw = reinterpret_cast<float *>(smem);
    float *sw = cw + (size_t)a.tpb * hp;
    unsigned char *ok = reinterpret_cast<unsigned char *>(sw + (size_t)a.tpb * hp);

    const long long tok0 = (long long)blockIdx.x * a.tpb;
    const int ntok = (int)min((long long)a.tpb, a.T - tok0);
    const unsigned tid = threadIdx.x;
    const int per_tok = a.ngroups * a.items;
    const int tl = (int)fdiv(tid, a.d_per_tok);
    int r = (int)tid - tl * per_tok;
    const bool live = tl < ntok;
    const long long tok = tok0 + tl;
    long long b = 0, s = 0;
    if (live) {
        if (a.small) {
            const unsigned b32 = fdiv((unsigned)tok, a.d_S);
            b = b32, s = (unsigned)tok - b32 * a.d_S.d;
        } else {
            b = tok / a.S, s = tok - b * a.S;
        }
    }
    const int hints = a.hints;
    const bool copy = r >= a.rot_total;
    int n0 = 0, k0 = 0;
    uint4 va[G], vb[G];
    const raw *xp = nullptr;
    raw *yp = nullptr;
    if (copy) { /* channels [R, H): copied bit for bit, before the barrier */
        r -= a.rot_total;
        const int grp = (int)fdiv((unsigned)r, a.d_copy_items), u = r - grp * a.copy_items;
        n0 = grp * G;
        const long long c0 = a.R + (long long)u * V;
        if (live) {
            xp = reinterpret_cast<const raw *>(a.x) + b * a.xs[0] + s * a.xs[1] + n0 * a.xs[2] + c0;
            yp = reinterpret_cast<raw *>(a.y) + b * a.ys[0] + s * a.ys[1] + n0 * a.ys[2] + c0;
#pragma unroll
            for (int g = 0; g < G; ++g)
                if (n0 + g < a.N) va[g] = ld_x(xp + g * a.xs[2], hints);
#pragma unroll
            for (int g = 0; g < G; ++g)
                if (n0 + g < a.N) st_y(yp + g * a.ys[2], va[g], hints);
        }
    } else if (live) { /* x loads first: they do not depend on the ids */
        const int grp = (int)fdiv((unsigned)r, a.d_rot_items), u = r - grp * a.rot_items;
        n0 = grp * G;
        k0 = u * NC;
        xp = reinterpret_cast<const raw *>(a.x) + b * a.xs[0] + s * a.xs[1] + n0 * a.xs[2];
        yp = reinterpret_cast<raw *>(a.y) + b * a.ys[0] + s * a.ys[1] + n0 * a.ys[2];
#pragma unroll
        for (int g = 0; g < G; ++g)
            if (n0 + g < a.N) {
                const raw *q = xp + g * a.xs[2];
                va[g] = ld_x(q + (IL ? 2 * k0 : k0), hints);
                if (!IL) vb[g] = ld_x(q + k0 + a.h, hints);
            }
    }
    /* the block's tokens' columns, once per token */
    const unsigned nt = blockDim.x;
    for (unsigned i = tid; i < (unsigned)(ntok * a.h); i += nt) {
        const int t = (int)fdiv(i, a.d_h), k = (int)i - t * a.h;
        const long long tt = tok0 + t;
        long long bb, ss;
        if (a.small) {
            const unsigned b32 = fdiv((unsigned)tt, a.d_S);
            bb = b32, ss = (unsigned)tt - b32 * a.d_S.d;
        } else {
            bb = tt / a.S, ss = tt - bb * a.S;
        }
        float c, sn;
        const bool good = fetch_cs<TDT>(a, bb, ss, k, &c, &sn);
        cw[t * hp + k] = good ? c : 1.0f;
        sw[t * hp + k] = good ? sn : 0.0f;
        ok[t * hp + k] = good;
    }
    /* out-of-range ids: counted once per (token, stream) */
    if (a.err && a.rows != RK_ROWS_TABLE_3D) {
        for (unsigned i = tid; i < (unsigned)(ntok * 3); i += nt) {
            const int t = (int)(i / 3), st = (int)i - t * 3;
            if (!((a.stream_mask >> st) & 1)) continue;
            const long long tt = tok0 + t, bb = tt / a.S;
            record_if_bad(a, bb, tt - bb * a.S, st);
        }
    }
    __syncthreads();
    if (copy || !live) return;
    /* the chunk's columns from shared memory (hp and k0 are multiples of NC) */
    float cf[NC], sf[NC];
    unsigned good = 0;
    {
        const float *cp = cw + tl * hp + k0, *sp = sw + tl * hp + k0;
        const unsigned char *op = ok + tl * hp + k0;
        if constexpr (NC >= 4) {
#pragma unroll
            for (int v = 0; v < NC / 4; ++v) {
                const float4 c4 = reinterpret_cast<const float4 *>(cp)[v];
                const float4 s4 = reinterpret_cast<const float4 *>(sp)[v];
                cf[4 * v] = c4.x, cf[4 * v + 1] = c4.y, cf[4 * v + 2] = c4.z, cf[4 * v + 3] = c4.w;
                sf[4 * v] = s4.x, sf[4 * v + 1] = s4.y, sf[4 * v + 2] = s4.z, sf[4 * v + 3] = s4.w;
            }
            if constexpr (NC == 8) {
                const uint2 o = *reinterpret_cast<const uint2 *>(op);
                unsigned m = 0;
#pragma unroll
                for (int j = 0; j < 4; ++j) m |= ((o.x >> (8 * j)) & 1u) << j;
#pragma unroll
                for (int j = 0; j < 4; ++j) m |= ((o.y >> (8 * j)) & 1u) << (4 + j);
                good = m;
            } else {
                const unsigned o = *reinterpret_cast<const unsigned *>(op);
#pragma unroll
                for (int j = 0; j < 4; ++j) good |= ((o >> (8 * j)) & 1u) << j;
            }
        } else {
            const float2 c2 = *reinterpret_cast<const float2 *>(cp);
            const float2 s2 = *reinterpret_cast<const float2 *>(sp);
            cf[0] = c2.x, cf[1] = c2.y, sf[0] = s2.x, sf[1] = s2.y;
            const unsigned o = *reinterpret_cast<const unsigned short *>(op);
            good = (o & 1u) | ((o >> 7) & 2u);
        }
    }
    rotate_chunk<DT, TDT, IL, G, false, FIN>(va, vb, cf, sf, good);
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (n0 + g >= a.N) continue;
        raw *q = yp + g * a.ys[2];
        st_y(q + (IL ? 2 * k0 : k0), va[g], hints);
        if (!IL) st_y(q + k0 + a.h, vb[g], hints);
    }
}

/* The tile kernel as ptxas compiles it under its 1024-thread bound (32-62 registers), and with
 * a cap of 48 registers (TILE_CAP; tile_capped chooses). ptxas fits the half-split bfloat16
 * and float32 kernels in 48 registers without spills (50-56 uncapped): 10 blocks of 128
 * threads per SM instead of 9 (8 for 64 registers), 40 warps — on an H200 (bench/results-
 * cuda.md, 2026-12-01 R2) MRoPE bfloat16 41.3 -> 40.2 µs (87 -> 89% of the copy), Llama
 * S=8192 bfloat16 with float32 tables 48.0 -> 47.7 µs, float32 (tile kernel forced) 88.5 ->
 * 87.1 µs (93 -> 94.5%). The float16 x / float16 tables kernel spills 8 bytes at 48 and was
 * 1-3% slower capped; a cap of 40 spilled 16-96 bytes and was 2-20% slower everywhere.
 * (__maxnreg__ excludes __launch_bounds__; 48 registers admit 1024-thread blocks.) */
constexpr int TILE_CAP = 48;
/* FIN (rotate_chunk) for half-split bfloat16 x with bfloat16 tables */
template <int DT, int TDT, bool IL, int G>
__global__ void __launch_bounds__(1024) rotary_tile_kernel(const RotArgs a) {
    rotary_tile_body<DT, TDT, IL, G, DT == ROPEKIT_BFLOAT16 && TDT == ROPEKIT_BFLOAT16 && !IL>(a);
}
template <int DT, int TDT, bool IL, int G>
__global__ void __maxnreg__(TILE_CAP) rotary_tile_kernel_capped(const RotArgs a) {
    rotary_tile_body<DT, TDT, IL, G, DT == ROPEKIT_BFLOAT16 && TDT == ROPEKIT_BFLOAT16 && !IL>(a);
}

#include "mrope_pipe.cuh"

/* ---- the bulk kernel (sm_90) -----------------------------------------------------------------
 * Work item: bulk_nh consecutive heads of one token (up to BULK_BYTES of x, the token's heads
 * split evenly). A warp brings its item's head rows into shared memory by bulk copies
 * (cp.async.bulk, the TMA's bulk copy; one copy per item when the heads are contiguous, else one
 * per head row; completion counted in bytes on the warp's mbarrier), fetches its lanes' table
 * columns meanwhile, rotates the pairs [0, R) in shared memory (lane -> a unit of 2 table
 * columns, used for every head of the item), and stores the whole rows back by bulk copies from
 * shared memory: the bytes in flight cost no registers, and the pass-through channels [R, H) of
 * partial rotary are never touched by a thread. Same arithmetic as rotate_chunk (rotate<WIDE>,
 * pack2, a pair whose column has no table row keeps x's bits). run_rotary takes it for partial
 * rotary on calls of more than one wave: H200, R2 of 2026-12-02, same-run A/B against the flat
 * kernel, Phi-2 S=8192: float32 90.8 -> 88.1 µs (90.5 -> 93.3% of the copy), 16-bit 50.7-51.0
 * -> 47.6-47.9 (84 -> 89-90%). On full-rotary rows it was slower than the flat and tile kernels
 * (Llama S=8192 bf16/f32 46.5 -> 54.7 µs, R1): a lane rotates its columns through all of an
 * item's heads, one after the other, so with 20-32 warps per SM too few items are in flight
 * (ncu: 0.77 eligible warps per scheduler); with 60% of the bytes passed through, that phase is
 * short. NS stages per warp (BULK_NS). */
#define RK_RB_WARPS 4

/* A lane's unit of 2 table columns (cos, sin, whether the column has a table row). */
struct RbCols {
    float c0, s0, c1, s1;
    bool g0, g1;
};
template <int TDT>
__device__ __forceinline__ RbCols rb_cols(const RotArgs &a, long long b, long long s, int c) {
    RbCols r;
    r.g0 = fetch_cs<TDT>(a, b, s, 2 * c, &r.c0, &r.s0);
    r.g1 = fetch_cs<TDT>(a, b, s, 2 * c + 1, &r.c1, &r.s1);
    return r;
}
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900 /* (used by the sm_90 kernel body only) */
/* The lane's first unit (its columns are fetched before the item's rows have landed). */
__device__ __forceinline__ int rb_first(const RotArgs &a, int lane) {
    const int hu = a.h >> 1, CL = hu < 32 ? hu : 32;
    if (hu == 0 || lane >= (32 / CL) * CL) return -1;
    return lane % CL;
}
#endif

template <int DT, int TDT, bool IL, int UNR>
__device__ __forceinline__ void rb_rotate(const RotArgs &a, unsigned char *stage, int nh, long long b,
                                          long long s, int lane, const RbCols &first) {
    constexpr bool WIDE = DT == ROPEKIT_FLOAT32 || TDT == ROPEKIT_FLOAT32;
    typedef typename std::conditional<WIDE, double, float>::type W;
    typedef typename Elt<DT>::raw raw;
    const int hu = a.h >> 1; /* units of 2 table columns per head */
    if (hu == 0) return;
    const int CL = hu < 32 ? hu : 32, P = 32 / CL;
    if (lane >= P * CL) return;
    const int str = lane / CL;
    const unsigned rowb = (unsigned)a.H * (unsigned)sizeof(raw);
    for (int c = lane - str * CL; c < hu; c += CL) {
        const RbCols t = c == lane - str * CL ? first : rb_cols<TDT>(a, b, s, c);
        const float cf0 = t.c0, sf0 = t.s0, cf1 = t.c1, sf1 = t.s1;
        const bool g0 = t.g0, g1 = t.g1;
        if (!g0 && !g1) continue; /* no table row: the pairs keep x's bits */
        const W c0 = g0 ? (W)cf0 : (W)1, s0 = g0 ? (W)sf0 : (W)0;
        const W c1 = g1 ? (W)cf1 : (W)1, s1 = g1 ? (W)sf1 : (W)0;
#pragma unroll UNR
        for (int n = str; n < nh; n += P) {
            unsigned char *row = stage + (size_t)n * rowb;
            if constexpr (sizeof(raw) == 2 && !IL) { /* word c of each half: columns 2c, 2c+1 */
                unsigned *pa = reinterpret_cast<unsigned *>(row) + c;
                unsigned *pb = reinterpret_cast<unsigned *>(row + (size_t)a.h * 2) + c;
                const unsigned wa = *pa, wb = *pb;
                float ya0, yb0, ya1, yb1;
                rotate<WIDE>(lo_of<DT>(wa), lo_of<DT>(wb), c0, s0, &ya0, &yb0);
                rotate<WIDE>(hi_of<DT>(wa), hi_of<DT>(wb), c1, s1, &ya1, &yb1);
                const unsigned keep = (g0 ? 0u : 0xffffu) | (g1 ? 0u : 0xffff0000u);
                const unsigned na = pack2_fin<DT, DT == ROPEKIT_BFLOAT16 && TDT == ROPEKIT_BFLOAT16>(ya0, ya1), nb = pack2_fin<DT, DT == ROPEKIT_BFLOAT16 && TDT == ROPEKIT_BFLOAT16>(yb0, yb1);
                *pa = (na & ~keep) | (wa & keep), *pb = (nb & ~keep) | (wb & keep);
            } else if constexpr (sizeof(raw) == 2) { /* 2 adjacent pairs: word j = pair of column 2c+j */
                uint2 *pp = reinterpret_cast<uint2 *>(row) + c;
                uint2 w = *pp;
                float y0, y1, z0, z1;
                rotate<WIDE>(lo_of<DT>(w.x), hi_of<DT>(w.x), c0, s0, &y0, &y1);
                rotate<WIDE>(lo_of<DT>(w.y), hi_of<DT>(w.y), c1, s1, &z0, &z1);
                const unsigned n0 = pack2_fin<DT, DT == ROPEKIT_BFLOAT16 && TDT == ROPEKIT_BFLOAT16>(y0, y1), n1 = pack2_fin<DT, DT == ROPEKIT_BFLOAT16 && TDT == ROPEKIT_BFLOAT16>(z0, z1);
                w.x = g0 ? n0 : w.x, w.y = g1 ? n1 : w.y;
                *pp = w;
            } else if constexpr (!IL) { /* float32: 2 columns of each half */
                float2 *pa = reinterpret_cast<float2 *>(row) + c;
                float2 *pb = reinterpret_cast<float2 *>(row + (size_t)a.h * 4) + c;
                float2 va = *pa, vb = *pb;
                float ya0, yb0, ya1, yb1;
                rotate<WIDE>(va.x, vb.x, c0, s0, &ya0, &yb0);
                rotate<WIDE>(va.y, vb.y, c1, s1, &ya1, &yb1);
                if (g0) va.x = ya0, vb.x = yb0;
                if (g1) va.y = ya1, vb.y = yb1;
                *pa = va, *pb = vb;
            } else { /* float32 adjacent pairs: (x, y) column 2c, (z, w) column 2c+1 */
                float4 *pp = reinterpret_cast<float4 *>(row) + c;
                float4 v = *pp;
                float y0, y1, z0, z1;
                rotate<WIDE>(v.x, v.y, c0, s0, &y0, &y1);
                rotate<WIDE>(v.z, v.w, c1, s1, &z0, &z1);
                if (g0) v.x = y0, v.y = y1;
                if (g1) v.z = z0, v.w = z1;
                *pp = v;
            }
        }
    }
}

template <int DT, int TDT, bool IL, int NS, int MINB>
__global__ void __launch_bounds__(32 * RK_RB_WARPS, MINB) rotary_bulk_kernel(const RotArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    typedef typename Elt<DT>::raw raw;
    extern __shared__ __align__(128) unsigned char rb_smem[];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    unsigned long long *bars = reinterpret_cast<unsigned long long *>(rb_smem) + wid * NS;
    unsigned char *wb = rb_smem + 128 + (size_t)wid * NS * a.bulk_stage;
    const unsigned rowb = (unsigned)a.H * (unsigned)sizeof(raw);
    const bool xrun = a.xs[2] == a.H, yrun = a.ys[2] == a.H; /* an item's rows are one run */
    warp_mbar_init(bars, NS, 1);
    const long long nw = (long long)gridDim.x * RK_RB_WARPS, w = (long long)blockIdx.x * RK_RB_WARPS + wid;
    const long long items = a.T * a.bulk_groups;
    /* item j -> token (b, s), first head n0, head count nh */
    auto decode = [&](long long j, long long &b, long long &s, int &n0, int &nh) {
        const long long t = j / a.bulk_groups;
        const int hg = (int)(j - t * a.bulk_groups);
        b = t / a.S, s = t - b * a.S;
        n0 = hg * a.bulk_nh;
        nh = min(a.bulk_nh, a.N - n0);
    };
    auto issue = [&](long long j, int st) {
        long long b, s;
        int n0, nh;
        decode(j, b, s, n0, nh);
        const unsigned bar = smem_u32(bars + st);
        unsigned char *dst = wb + (size_t)st * a.bulk_stage;
        const raw *x = reinterpret_cast<const raw *>(a.x) + b * a.xs[0] + s * a.xs[1] + n0 * a.xs[2];
        if (lane == 0)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"((unsigned)nh * rowb) : "memory");
        __syncwarp();
        if (xrun) {
            if (lane == 0)
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             :: "r"(smem_u32(dst)), "l"(x), "r"((unsigned)nh * rowb), "r"(bar) : "memory");
        } else {
            for (int r = lane; r < nh; r += 32)
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             :: "r"(smem_u32(dst + (size_t)r * rowb)), "l"(x + r * a.xs[2]), "r"(rowb), "r"(bar) : "memory");
        }
    };
#pragma unroll
    for (int i = 0; i < NS; ++i)
        if (w + i * nw < items) issue(w + i * nw, i);
    unsigned phase = 0;
    for (long long k = 0;; ++k) {
        const long long j = w + k * nw;
        if (j >= items) break;
        const int st = (int)(k % NS);
        long long b, s;
        int n0, nh;
        decode(j, b, s, n0, nh);
        /* the lane's first table columns, loaded while the rows are in flight */
        RbCols first = {1.0f, 0.0f, 1.0f, 0.0f, false, false};
        const int c1st = rb_first(a, lane);
        if (c1st >= 0) first = rb_cols<TDT>(a, b, s, c1st);
        {
            mbar_wait(smem_u32(bars + st), (phase >> st) & 1u);
            phase ^= 1u << st;
        }
        unsigned char *stage = wb + (size_t)st * a.bulk_stage;
        /* out-of-range ids: counted once per token (by the item of its first heads) */
        if (a.err && lane == 0 && n0 == 0 && a.rows != RK_ROWS_TABLE_3D) record_if_bad(a, b, s, 0);
        rb_rotate<DT, TDT, IL, MINB >= 10 ? 2 : 4>(a, stage, nh, b, s, lane, first);
        /* the rotated rows (generic-proxy writes) before the bulk stores (async proxy) read them */
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        raw *y = reinterpret_cast<raw *>(a.y) + b * a.ys[0] + s * a.ys[1] + n0 * a.ys[2];
        if (yrun) {
            if (lane == 0) {
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                             :: "l"(y), "r"(smem_u32(stage)), "r"((unsigned)nh * rowb) : "memory");
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            }
        } else if (lane < nh) {
            for (int r = lane; r < nh; r += 32)
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                             :: "l"(y + r * a.ys[2]), "r"(smem_u32(stage + (size_t)r * rowb)), "r"(rowb) : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
        /* refill the stage once its bulk stores have read it */
        const long long jn = j + NS * nw;
        if (jn < items) {
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            __syncwarp();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue(jn, st);
        }
    }
    /* the shared memory stays until the bulk stores have read it */
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
}

/* ---- launch ------------------------------------------------------------------------------- */

template <int DT, int TDT, int V, bool SMEM>
ropekit_status launch_rotary_t(const RotArgs &a, unsigned blocks, size_t shm, cudaStream_t st) {
    rotary_kernel<DT, TDT, V, SMEM><<<blocks, 256, shm, st>>>(a);
    return launched("rotary kernel launch");
}

/* ROPEKIT_CUDA_ROTARY_KERNEL=flat|tile|bulk|decode (ropekit_cuda.h, for tests and benchmarks): that
 * kernel on every call it can take; unset (or any other value): run_rotary's
 * choice. Read once. */
enum { FORCE_NONE = 0, FORCE_FLAT = 1, FORCE_TILE = 2, FORCE_BULK = 3, FORCE_DECODE = 4 };
int forced_kernel() {
    /* indexed by FORCE_*: a new choice is one more name here and one more FORCE_ value */
    static const char *const names[] = {nullptr, "flat", "tile", "bulk", "decode"};
    static const int k = env_choice("ROPEKIT_CUDA_ROTARY_KERNEL", names,
                                    (int)(sizeof names / sizeof names[0]), FORCE_NONE);
    return k;
}

template <int DT, int TDT>
ropekit_status launch_rotary_flat(const RotArgs &a, long long threads_total, cudaStream_t st) {
    /* blocks of 128 (full rotary: faster than 256 on the 16-bit rows, finer tail; Llama S=8192
     * bfloat16/float32 46.4 vs 47.7 µs) or 256 (partial rotary, where a block mixes rotation
     * and copy warps: Phi-2 float32 91.4 -> 90.7 µs, float16/float32 51.6 -> 50.7, other dtype
     * pairs level; 64 was slower on Phi-2: H200, R2 of 2026-12-02), or smaller ones when that is
     * needed to give every SM two blocks */
    long long bs = a.copy_items > 0 ? 256 : 128;
    const long long sms = sm_count();
    while (bs > 64 && (threads_total + bs - 1) / bs < 2 * sms) bs /= 2;
    const long long blocks = (threads_total + bs - 1) / bs;
    if (blocks > INT_MAX) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many tokens for one launch");
    const dim3 grid((unsigned)blocks), block((unsigned)bs);
    if (a.interleaved) rotary_flat_kernel<DT, TDT, true, FLAT_G><<<grid, block, 0, st>>>(a);
    else if (a.flat_g1) rotary_flat_kernel<DT, TDT, false, 1><<<grid, block, 0, st>>>(a);
    else rotary_flat_kernel<DT, TDT, false, FLAT_G><<<grid, block, 0, st>>>(a);
    return launched("rotary kernel launch");
}

/* Which kernel takes a vectorisable call: the tile kernel (2 heads per thread) where it measured
 * faster than the flat kernel on an H200 (bench/results-cuda.md, same-run A/B): x over the whole
 * head (no partial rotary), half-split pairs, per-token ids with the tables in x's dtype
 * (float32/float32 94% of the copy vs 92-93% flat; bfloat16/bfloat16 46.9 vs 49.6 µs on Llama
 * S=8192; float16/float16 level), and MRoPE. 16-bit x with float32 tables takes the flat kernel
 * since 2026-12-02 (Llama bfloat16 47.6 -> 46.4 µs with 2 heads per flat thread, R1). Everything
 * else (partial rotary, adjacent pairs, offsets, 3D tables: slower there or not measured) keeps
 * the flat kernel, and so do calls of at most one wave (one_wave in run_rotary: decode steps).
 * ROPEKIT_CUDA_ROTARY_KERNEL (forced_kernel) overrides this. */
bool tile_preferred(const rk_rotary_plan *p, bool one_wave) {
    if (forced_kernel() != FORCE_NONE) return forced_kernel() == FORCE_TILE;
    if (one_wave) return false;
    if (p->interleaved || p->R != p->H) return false;
    if (p->rows == RK_ROWS_MROPE) return true;
    return p->rows == RK_ROWS_PER_TOKEN && p->table_dtype == p->dtype;
}
/* The tile kernel's target block size: 128 threads (one token per block on the benchmark
 * shapes) measured faster than 256 on MRoPE 16-bit (82 -> 86-87% of the copy), level elsewhere;
 * tokens per block = this / threads per token, at least 1. */
constexpr int TILE_THREADS = 128;

/* The capped tile kernel (TILE_CAP) for every dtype pair but 16-bit x with tables in x's dtype
 * (float16, and half-split bfloat16 with FIN: their capped builds spill 4 bytes; bfloat16 capped
 * and uncapped, FIN: 47.71 and 46.78 µs on Llama S=8192, R1 of 2026-12-02 session 7). */
bool tile_capped(int dt, int tdt, bool il) {
    return !(dt == ROPEKIT_FLOAT16 && tdt == ROPEKIT_FLOAT16) &&
           !(dt == ROPEKIT_BFLOAT16 && tdt == ROPEKIT_BFLOAT16 && !il);
}
template <int DT, int TDT>
ropekit_status launch_rotary_tile(const RotArgs &a, long long blocks, int threads, size_t shm,
                                  cudaStream_t st) {
    if (blocks > INT_MAX) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many tokens for one launch");
    const dim3 grid((unsigned)blocks), block((unsigned)threads);
    if (tile_capped(DT, TDT, a.interleaved)) {
        if (a.interleaved) rotary_tile_kernel_capped<DT, TDT, true, TILE_G><<<grid, block, shm, st>>>(a);
        else rotary_tile_kernel_capped<DT, TDT, false, TILE_G><<<grid, block, shm, st>>>(a);
    } else {
        if (a.interleaved) rotary_tile_kernel<DT, TDT, true, TILE_G><<<grid, block, shm, st>>>(a);
        else rotary_tile_kernel<DT, TDT, false, TILE_G><<<grid, block, shm, st>>>(a);
    }
    return launched("rotary kernel launch");
}

/* Bulk kernel: bytes per item (R1 of 2026-12-02, forced on every row: 5 KB faster than 10 KB
 * (5 blocks per SM by shared memory) and 2.5 KB on every row; Phi-2 bf16/bf16 47.6 vs 49.3 and
 * 55.5 µs). One item per warp: 2 items per warp were level or slower (R2). */
constexpr int BULK_BYTES = 5120;
bool device_sm90() {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 9;
}
constexpr int BULK_NS = 1; /* stages per warp (2, the next item in flight while one is rotated,
                            * was slower on every row: R1 of 2026-12-02) */
/* Blocks of 4 warps per SM the registers are fitted to: 8 (53-64 registers, no spills; 32
 * warps). 10 (48 registers, 8-40 bytes of spills) was 2.3-4.1 µs slower on Phi-2 float32 and
 * 16-bit x with float32 tables, level with 16-bit tables (R2 of 2026-12-02). */
constexpr int BULK_MINB = 8;
size_t bulk_shm(const RotArgs &a) { return 128 + (size_t)RK_RB_WARPS * BULK_NS * a.bulk_stage; }
template <int DT, int TDT> void (*bulk_kernel_of(const RotArgs &a))(RotArgs) {
    return a.interleaved ? rotary_bulk_kernel<DT, TDT, true, BULK_NS, BULK_MINB> : rotary_bulk_kernel<DT, TDT, false, BULK_NS, BULK_MINB>;
}

template <int DT, int TDT>
ropekit_status launch_rotary_bulk(const RotArgs &a, cudaStream_t st) {
    void (*k)(RotArgs) = bulk_kernel_of<DT, TDT>(a);
    const size_t shm = bulk_shm(a);
    cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void *>(k),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm);
    if (e != cudaSuccess) return cuda_fail(e, "rotary shared memory");
    const long long items = a.T * a.bulk_groups;
    long long blocks = (items + RK_RB_WARPS - 1) / RK_RB_WARPS;
    if (blocks > (1ll << 30)) blocks = 1ll << 30; /* the warps loop over the rest */
    k<<<(unsigned)blocks, 32 * RK_RB_WARPS, shm, st>>>(a);
    return launched("rotary kernel launch");
}
/* Whether the bulk kernel that launch_rotary_bulk would run has its body: code compiled for
 * sm_90 or later (a library built for sm_80 only and run on an sm_90 GPU through its PTX has an
 * empty kernel there). */
template <int DT, int TDT> bool bulk_built(const RotArgs &a) {
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, reinterpret_cast<const void *>(bulk_kernel_of<DT, TDT>(a))) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return fa.ptxVersion >= 90 && fa.binaryVersion >= 90;
}

template <int DT, int TDT>
ropekit_status launch_rotary_scalar(const RotArgs &a, bool smem, unsigned blocks, size_t shm,
                                    cudaStream_t st) {
    return smem ? launch_rotary_t<DT, TDT, 1, true>(a, blocks, shm, st)
                : launch_rotary_t<DT, TDT, 1, false>(a, blocks, shm, st);
}

/* Whether a one-wave call (one_wave in run_rotary) takes the decode kernel rather than the flat
 * one (the flat kernel, one head per thread, remains for MRoPE, layouts the decode pieces do not
 * fit, and ROPEKIT_CUDA_ROTARY_KERNEL=flat). H200, session 9, bench_cuda decode sweep (B=1..512,
 * Llama / Qwen3 / Phi-2 partial / adjacent pairs, 5 dtype pairs; graph of 20, same-run A/B):
 * bench/results-cuda.md "Decode". */
bool decode_preferred(const rk_rotary_plan *p) {
    (void)p;
    return true;
}
/* The decode kernel's piece (bytes) and heads per thread: 4 pairs per thread where LEAN allows
 * 2 heads (H200, R1 of session 9, bench_cuda decode sweep, graph of 20, against 2-pair threads:
 * float32 half-split PB 8 x 2 heads vs PB 16 x 1: Llama B=256 3.46 vs 3.60 µs, B=64 2.23 vs
 * 2.37; 16-bit adjacent pairs PB 8 x 2 heads vs PB 8 x 1: B=256 f16/f32 2.79 vs 3.18, B=512
 * 3.79 vs 4.84; 16-bit half-split 4 pairs in one head (PB 8) level with 2 x 2 (B=256 2.92 /
 * 2.92) and faster at B <= 128), else 16-byte pieces for float32 x (8-byte pieces of 2 float32
 * pairs: B=256 4.25 vs 3.77 µs of the flat kernel, session 8). ROPEKIT_CUDA_DECODE_PIECE /
 * _HEADS override (benchmarks). */
void decode_shape(const rk_rotary_plan *p, bool lean, int *pb, int *g) {
    const bool f32 = p->dtype == ROPEKIT_FLOAT32;
    if (lean && (f32 ? !p->interleaved : p->interleaved)) *pb = 8, *g = 2;
    else *pb = f32 ? 16 : 8, *g = 1;
    if (decode_piece_env()) *pb = decode_piece_env();
    if (decode_heads_env()) *g = decode_heads_env();
    if (!lean || *pb != 8) *g = 1;
}
/* Every element offset the decode kernel forms fits in 32 bits (and the rest of LEAN's terms). */
bool decode_lean(const rk_rotary_plan *p, const RotArgs &a) {
    if (!a.tab_vec || p->apply_scale || a.hints != DEC_LEAN_HINTS) return false;
    auto span = [](long long n, long long st) { return n > 1 ? (n - 1) * (st < 0 ? -st : st) : 0ll; };
    const long long lim = INT_MAX;
    if (span(p->B, p->xs[0]) + span(p->S, p->xs[1]) + span(p->N, p->xs[2]) + p->H > lim) return false;
    if (span(p->B, p->ys[0]) + span(p->S, p->ys[1]) + span(p->N, p->ys[2]) + p->H > lim) return false;
    const long long h = p->R / 2;
    if (p->rows == RK_ROWS_TABLE_3D)
        return span(p->B, p->cos_bs) + span(p->S, p->cos_ss) + h <= lim &&
               span(p->B, p->sin_bs) + span(p->S, p->sin_ss) + h <= lim;
    if (p->rows == RK_ROWS_PER_TOKEN && span(p->B, p->pos_bs) + span(p->S, p->pos_ss) + 1 > lim) return false;
    const long long cr = p->cos_rs < 0 ? -p->cos_rs : p->cos_rs, sr = p->sin_rs < 0 ? -p->sin_rs : p->sin_rs;
    const long long rs = cr > sr ? cr : sr, rows = p->table_rows > 1 ? p->table_rows : 1;
    return p->table_rows <= lim && rs <= lim / rows && rows * rs + h <= lim;
}

} // namespace

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
    /* flat kernel: 16-byte chunks, FLAT_G = 2 heads per thread (tried and slower on an H200:
     * 4 heads on multi-wave calls (until 2026-12-02), 8 heads, a variant looping over head
     * groups with the next group's loads in flight, copy threads of 8 heads for [R, H), a
     * grid-stride variant loading the next item's id (and x) ahead, partial-rotary threads
     * grouped so that blocks are all rotation or all copy, and one thread per 16-byte chunk in
     * memory order (51-76% of the copy: issue-bound); bench/results-cuda.md "Tried") */
    /* the tile kernel (tile_preferred) when a token's threads fit one block and its columns fit
     * shared memory; else the flat kernel */
    /* Calls that fill at most one wave of 4-head threads at 6 blocks of 128 per SM (one_wave:
     * decode steps) take the flat kernel also where the tile kernel would be chosen: more
     * threads with less work each, so the single wave ends sooner (H200, decode B=256 in a CUDA
     * graph of 20, same-run A/B: bfloat16 4.07 µs (tile kernel) -> 3.61; bench/results-cuda.md). */
    const long long per4 = (long long)((p->N + 3) / 4) * a.items;
    const bool one_wave = vec && per4 > 0 && a.T <= (long long)sm_count() * 768 / per4;
    const long long tile_per_tok = (long long)((p->N + TILE_G - 1) / TILE_G) * a.items;
    const long long hp = (h + 7) / 8 * 8;
    const bool tile = vec && tile_per_tok >= 1 && tile_per_tok <= 1024 && hp * 9 <= 48 * 1024 &&
                      tile_preferred(p, one_wave);
    /* ... with one head per thread (half-split pairs): twice the threads of 2-head threads, half
     * the work each (H200, R2 of 2026-12-02 session 7, CUDA graph of 20, same-run A/B: decode
     * B=64 f16/f32 2.73 -> 2.58 µs, bf16/f32 2.68 -> 2.56, B=256 f16/f32 3.55 -> 3.48, bf16/f32
     * 3.53 -> 3.43, float32 level (2.48 -> 2.47, 3.86 -> 3.76); ncu B=256 f16: 5.06 -> 4.80 µs,
     * 14% -> 26% achieved occupancy; blocks of 64 instead of 128: level) */
    a.flat_g1 = !tile && one_wave && !p->interleaved;
    const int G = tile ? TILE_G : a.flat_g1 ? 1 : FLAT_G;
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
    long long tile_blocks = 0;
    int tile_thr = 0;
    size_t tile_shm = 0;
    if (tile) {
        long long tt = TILE_THREADS / tile_per_tok;
        if (tt < 1) tt = 1;
        while (tt > 1 && tt * tile_per_tok > 1024) --tt;
        while (tt > 1 && (a.T + tt - 1) / tt < 2 * sms) tt /= 2;
        while (tt > 1 && (size_t)(tt * hp * 9) > 48 * 1024) --tt;
        if (tt > a.T) tt = a.T;
        a.tpb = (int)tt;
        a.hp = (int)hp;
        a.d_h = make_div(h > 0 ? h : 1);
        tile_thr = (int)(tt * tile_per_tok);
        tile_blocks = (a.T + tt - 1) / tt;
        tile_shm = (size_t)(tt * hp * 9);
    }
    /* the bulk kernel (sm_90): contiguous 16-byte-aligned rows, no MRoPE; partial rotary on
     * calls of more than one wave (bulk_preferred), or forced; an item of bulk_nh head rows of
     * one token within BULK_BYTES, the token's heads split evenly */
    bool bulk = false;
    if (vec && p->rows != RK_ROWS_MROPE &&
        (forced_kernel() == FORCE_BULK || (forced_kernel() == FORCE_NONE && !one_wave && p->R < p->H)) &&
        device_sm90()) {
        const long long rowb = p->H * es;
        long long groups = (p->N * rowb + BULK_BYTES - 1) / BULK_BYTES;
        if (groups < 1) groups = 1;
        if (groups > p->N) groups = p->N;
        const long long nh = (p->N + groups - 1) / groups;
        a.bulk_nh = (int)nh;
        a.bulk_groups = (int)((p->N + nh - 1) / nh);
        a.bulk_stage = (int)((nh * rowb + 127) / 128 * 128);
        bulk = nh * rowb <= 64 * 1024 && bulk_shm(a) <= 200 * 1024;
    }
    /* MRoPE's pipelined tile kernel (src/cuda/mrope_pipe.cuh) where the tile kernel would run */
    const int mk = tile && p->rows == RK_ROWS_MROPE ? mrope_kernel(p) : 0;
    const bool pipe = mk > 0 && !p->interleaved && p->R == p->H && a.small && tile_per_tok >= h &&
                      mrope_pipe_shm(a) <= 48 * 1024;
    /* the decode kernel (src/cuda/rotary_decode.cuh) on one-wave calls (decode_preferred), or
     * forced: pieces of dec_pb bytes, dec_g heads per thread, dec_hy head groups per block of
     * about 128 threads; its LEAN version when every offset fits in 32 bits (decode_lean) */
    int dec_hy = 0, dec_pb = 0, dec_g = 1;
    bool dec_lean = false;
    if (vec && !tile && !bulk && p->rows != RK_ROWS_MROPE && a.T < (1ll << 31) &&
        (forced_kernel() == FORCE_DECODE || (forced_kernel() == FORCE_NONE && one_wave && decode_preferred(p)))) {
        dec_lean = decode_lean(p, a);
        decode_shape(p, dec_lean, &dec_pb, &dec_g);
        int rot = 0;
        const int items = decode_items(p, dec_pb, &rot);
        int copy = items - rot;
        const long long v16 = 16 / es; /* [R, H) in 16-byte pieces where they fit */
        a.dec_copy16 = copy > 0 && dec_pb < 16 && p->R % v16 == 0 && (p->H - p->R) % v16 == 0;
        if (a.dec_copy16) copy = (int)((p->H - p->R) / v16);
        if (items > 0 && rot + copy <= 1024) {
            const int groups = (int)((p->N + dec_g - 1) / dec_g);
            dec_hy = rot + copy >= 128 ? 1 : 128 / (rot + copy);
            if (dec_hy > groups) dec_hy = groups;
            if ((groups + dec_hy - 1) / dec_hy > 65535) dec_hy = 0; /* grid.y: the flat kernel */
        }
        if (dec_hy) { /* (the flat kernel's items stay as they are otherwise) */
            a.rot_items = rot, a.copy_items = copy, a.items = rot + copy;
            a.d_rot_items = make_div(rot), a.d_copy_items = make_div(copy > 0 ? copy : 1);
        }
    }
#define RK_ROT(DT_, TDT_)                                                                        \
    return dec_hy ? launch_rotary_decode<DT_, TDT_>(a, dec_pb, dec_g, dec_hy, dec_lean, st)     \
           : bulk && bulk_built<DT_, TDT_>(a) ? launch_rotary_bulk<DT_, TDT_>(a, st)            \
           : pipe ? launch_rotary_pipe<DT_, TDT_>(a, tile_thr, mk, st)                           \
           : tile ? launch_rotary_tile<DT_, TDT_>(a, tile_blocks, tile_thr, tile_shm, st)         \
           : vec ? launch_rotary_flat<DT_, TDT_>(a, flat_total, st)                              \
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

} // namespace rk_cuda
