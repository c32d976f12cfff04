/* Decode kernel (included by src/cuda/rotary.cu inside its namespace): rotary calls of at most
 * one wave (decode steps: a few tokens, many heads) with contiguous channels, per-token ids,
 * offsets or 3D tables (not MRoPE: its one-wave calls keep the flat kernel).
 *
 * Shape (after FlashInfer's head-parallel decode kernel): a 2D block of `items` x `dec_hy`
 * threads, blockIdx.x the token, blockIdx.y a group of dec_hy heads, threadIdx.y the head in it,
 * threadIdx.x the piece of the head: no division for the thread's place (the flat kernel divides
 * its flat index three times), and a piece is PB bytes (8 by default: 4 pairs of 16-bit
 * half-split columns, half the flat kernel's 16-byte chunk), so twice the threads with half the
 * work each on one-wave calls. A block's threads read the same id and table row (one L1 line
 * per warp, no shared memory, no barrier). Pieces of [R, H) are copied bit for bit.
 *
 * Arithmetic: the flat kernel's, pair by pair (rotate<WIDE>, pack2, apply_scale/inverse as in
 * rotary_flat_body): 0 ulp from ref.c. A bad id's token keeps x's bits (all its columns read
 * one row) and is recorded by one thread of the token.
 *
 * ROPEKIT_CUDA_ROTARY_KERNEL=decode forces it on every call it can take;
 * ROPEKIT_CUDA_DECODE_PIECE=8|16 (benchmark knob) sets PB. */

template <int PB> struct DecVec { unsigned w[PB / 4]; };
template <int PB> __device__ __forceinline__ DecVec<PB> dec_ld(const void *p, int hints) {
    DecVec<PB> v;
    if constexpr (PB == 16) {
        const uint4 u = ld_x(p, hints);
        v.w[0] = u.x, v.w[1] = u.y, v.w[2] = u.z, v.w[3] = u.w;
    } else {
        const uint2 u = ld_x8(p, hints);
        v.w[0] = u.x, v.w[1] = u.y;
    }
    return v;
}
template <int PB> __device__ __forceinline__ void dec_st(void *p, const DecVec<PB> &v, int hints) {
    if constexpr (PB == 16) st_y(p, make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]), hints);
    else st_y8(p, make_uint2(v.w[0], v.w[1]), hints);
}
/* NC table values from column offset `off` (16-bit tables: NC*2 bytes; float32: NC*4), one
 * vector load when the tables are contiguous and 16-byte aligned (tab_vec: the piece's columns
 * are then aligned to their size), else one load per column. */
template <int TDT, int NC>
__device__ __forceinline__ void dec_cols(const char *base, long long off, long long cs, bool vec, float *out) {
    typedef typename Elt<TDT>::raw traw;
    const traw *p = reinterpret_cast<const traw *>(base) + off;
    constexpr int BYTES = NC * (int)sizeof(traw);
    if (vec && (BYTES == 16 || BYTES == 8 || BYTES == 4)) {
        union { uint4 u4; uint2 u2; unsigned u1; traw e[NC]; } t;
        if constexpr (BYTES == 16) t.u4 = __ldg(reinterpret_cast<const uint4 *>(p));
        else if constexpr (BYTES == 8) t.u2 = __ldg(reinterpret_cast<const uint2 *>(p));
        else if constexpr (BYTES == 4) t.u1 = __ldg(reinterpret_cast<const unsigned *>(p));
#pragma unroll
        for (int i = 0; i < NC; ++i) out[i] = Elt<TDT>::ld(t.e[i]);
        return;
    }
#pragma unroll
    for (int i = 0; i < NC; ++i) out[i] = Elt<TDT>::ld(__ldg(p + i * cs));
}

template <int DT, int TDT, bool IL, int PB>
__global__ void __launch_bounds__(1024) rotary_decode_kernel(const RotArgs a) {
    constexpr bool WIDE = DT == ROPEKIT_FLOAT32 || TDT == ROPEKIT_FLOAT32;
    typedef typename std::conditional<WIDE, double, float>::type W;
    typedef typename Elt<DT>::raw raw;
    constexpr int E = PB / (int)sizeof(raw); /* x elements per piece */
    constexpr int NC = IL ? E / 2 : E;       /* table columns per piece */
    const long long tok = blockIdx.x;
    const int n = (int)(blockIdx.y * blockDim.y + threadIdx.y), u = (int)threadIdx.x;
    if (n >= a.N) return;
    const long long b = fdiv((unsigned)tok, a.d_S), s = tok - b * a.S;
    const int hints = a.hints;
    const raw *xp = reinterpret_cast<const raw *>(a.x) + b * a.xs[0] + s * a.xs[1] + n * a.xs[2];
    raw *yp = reinterpret_cast<raw *>(a.y) + b * a.ys[0] + s * a.ys[1] + n * a.ys[2];
    if (u >= a.rot_items) { /* channels [R, H): copied bit for bit */
        const long long c0 = a.R + (long long)(u - a.rot_items) * E;
        dec_st<PB>(yp + c0, dec_ld<PB>(xp + c0, hints), hints);
        return;
    }
    const int k0 = u * NC;
    DecVec<PB> va, vb;
    va = dec_ld<PB>(xp + (IL ? 2 * k0 : k0), hints);
    if (!IL) vb = dec_ld<PB>(xp + k0 + a.h, hints);
    if (a.err && n == 0 && u == 0 && a.rows != RK_ROWS_TABLE_3D) record_if_bad(a, b, s, 0);
    long long co, so;
    bool good = true;
    if (a.rows == RK_ROWS_TABLE_3D) {
        co = b * a.cos_bs + s * a.cos_ss + k0 * a.cos_cs;
        so = b * a.sin_bs + s * a.sin_ss + k0 * a.sin_cs;
    } else {
        long long row, value;
        good = token_row(a, b, s, 0, &row, &value);
        co = row * a.cos_rs + k0 * a.cos_cs, so = row * a.sin_rs + k0 * a.sin_cs;
    }
    if (good) {
        float cf[NC], sf[NC];
        dec_cols<TDT, NC>(a.cos, co, a.cos_cs, a.tab_vec, cf);
        dec_cols<TDT, NC>(a.sin, so, a.sin_cs, a.tab_vec, sf);
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            if (a.apply_scale) {
                cf[j] = round_to<TDT>(__fmul_rn(cf[j], a.scale));
                sf[j] = round_to<TDT>(__fmul_rn(sf[j], a.scale));
            }
            if (a.inverse) sf[j] = -sf[j];
        }
        if constexpr (sizeof(raw) == 4) { /* float32 x: word j is lane j */
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                unsigned &w0 = va.w[IL ? 2 * j : j], &w1 = IL ? va.w[2 * j + 1] : vb.w[j];
                float y0, y1;
                rotate<WIDE>(__uint_as_float(w0), __uint_as_float(w1), (W)cf[j], (W)sf[j], &y0, &y1);
                w0 = __float_as_uint(y0), w1 = __float_as_uint(y1);
            }
        } else if constexpr (IL) { /* 16-bit adjacent pairs: word j holds pair j */
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                float y0, y1;
                rotate<WIDE>(lo_of<DT>(va.w[j]), hi_of<DT>(va.w[j]), (W)cf[j], (W)sf[j], &y0, &y1);
                va.w[j] = pack2<DT>(y0, y1);
            }
        } else { /* 16-bit half-split: word q of va/vb holds columns 2q and 2q+1 */
#pragma unroll
            for (int q = 0; q < NC / 2; ++q) {
                float ya0, yb0, ya1, yb1;
                rotate<WIDE>(lo_of<DT>(va.w[q]), lo_of<DT>(vb.w[q]), (W)cf[2 * q], (W)sf[2 * q], &ya0, &yb0);
                rotate<WIDE>(hi_of<DT>(va.w[q]), hi_of<DT>(vb.w[q]), (W)cf[2 * q + 1], (W)sf[2 * q + 1], &ya1, &yb1);
                va.w[q] = pack2<DT>(ya0, ya1), vb.w[q] = pack2<DT>(yb0, yb1);
            }
        }
    }
    dec_st<PB>(yp + (IL ? 2 * k0 : k0), va, hints);
    if (!IL) dec_st<PB>(yp + k0 + a.h, vb, hints);
}

/* Piece size in bytes (ROPEKIT_CUDA_DECODE_PIECE=8|16, default 8). */
int decode_piece() {
    static const int p = env_int("ROPEKIT_CUDA_DECODE_PIECE", 8, 16, 8) >= 16 ? 16 : 8;
    return p;
}
/* Pieces per head for piece size pb (0: the layout does not split into such pieces). */
inline int decode_items(const rk_rotary_plan *p, int pb, int *rot) {
    const long long es = (long long)ropekit_dtype_size(p->dtype), e = pb / es, h = p->R / 2;
    if (p->H % e || (p->interleaved ? p->R % e : h % e)) return 0;
    *rot = (int)(p->interleaved ? p->R / e : h / e);
    return *rot + (int)((p->H - p->R) / e);
}

template <int DT, int TDT>
ropekit_status launch_rotary_decode(const RotArgs &a, int hy, cudaStream_t st) {
    const dim3 grid((unsigned)a.T, (unsigned)((a.N + hy - 1) / hy)), block((unsigned)a.items, (unsigned)hy);
    if (decode_piece() == 16) {
        if (a.interleaved) rotary_decode_kernel<DT, TDT, true, 16><<<grid, block, 0, st>>>(a);
        else rotary_decode_kernel<DT, TDT, false, 16><<<grid, block, 0, st>>>(a);
    } else {
        if (a.interleaved) rotary_decode_kernel<DT, TDT, true, 8><<<grid, block, 0, st>>>(a);
        else rotary_decode_kernel<DT, TDT, false, 8><<<grid, block, 0, st>>>(a);
    }
    return launched("rotary kernel launch");
}
