/* Decode kernel (included by src/cuda/rotary.cu inside its namespace): rotary calls of at most
 * one wave (decode steps: a few tokens, many heads) with contiguous channels, per-token ids,
 * offsets or 3D tables (not MRoPE: its one-wave calls keep the flat kernel).
 *
 * Shape (after FlashInfer's head-parallel decode kernel): a 2D block of `items` x `dec_hy`
 * threads, blockIdx.x the token, blockIdx.y a group of dec_hy head groups (G heads each),
 * threadIdx.y the head group in it, threadIdx.x the piece of the head: no division for the
 * thread's place (the flat kernel divides its flat index three times), and a piece is PB bytes
 * (8: 4 pairs of 16-bit half-split columns, half the flat kernel's 16-byte chunk; 16), so more
 * threads with less work each on one-wave calls. A block's threads read the same id and table
 * row (one L1 line per warp, no shared memory, no barrier). Pieces of [R, H) are copied bit for
 * bit.
 *
 * LEAN (run_rotary's decode_lean: every element offset of x, y, the ids and the tables fits in
 * 32 bits, vector table loads, no scale, the default cache hints): the same kernel with 32-bit
 * offsets (one wide multiply-add per address), the cache hints and the kind of table rows
 * (per-token ids, an offset, 3D tables) known at compile time, no per-column fallback loads,
 * and the error record only on a bad id's path. (H200 ncu, session 8: the general version ran
 * 251 instructions per thread on decode B=256 float16 x / float32 tables, about 60 of them the
 * rotation of its 4 pairs.) Other calls take the general version (MODE -1).
 *
 * Arithmetic: the flat kernel's, pair by pair (rotate<WIDE>, pack2, scale_invert_cols): 0 ulp
 * from ref.c. A G-head thread converts each column's cos/sin to the wide type once for its G
 * heads; 16-bit x goes to double in one conversion (lo_f64 / hi_f64, sm_90); bfloat16 x with
 * bfloat16 tables rounds with pack2_finite (as the tile and bulk kernels). A bad id's token
 * keeps x's bits (all its columns read one row) and is recorded by one thread of the token.
 *
 * ROPEKIT_CUDA_ROTARY_KERNEL=decode forces it on every call it can take; benchmark knobs:
 * ROPEKIT_CUDA_DECODE_PIECE=8|16 sets PB, ROPEKIT_CUDA_DECODE_HEADS=1|2 sets G (G = 2 with
 * PB = 8 and LEAN only). */

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
    if (vec && (BYTES == 32 || BYTES == 16 || BYTES == 8 || BYTES == 4)) {
        union { uint4 u4[2]; uint2 u2; unsigned u1; traw e[NC]; } t;
        if constexpr (BYTES == 32) {
            t.u4[0] = __ldg(reinterpret_cast<const uint4 *>(p));
            t.u4[1] = __ldg(reinterpret_cast<const uint4 *>(p) + 1);
        } else if constexpr (BYTES == 16) t.u4[0] = __ldg(reinterpret_cast<const uint4 *>(p));
        else if constexpr (BYTES == 8) t.u2 = __ldg(reinterpret_cast<const uint2 *>(p));
        else if constexpr (BYTES == 4) t.u1 = __ldg(reinterpret_cast<const unsigned *>(p));
#pragma unroll
        for (int i = 0; i < NC; ++i) out[i] = Elt<TDT>::ld(t.e[i]);
        return;
    }
#pragma unroll
    for (int i = 0; i < NC; ++i) out[i] = Elt<TDT>::ld(__ldg(p + i * cs));
}

/* The low / high 16-bit element of a word as a double, by one conversion instruction (sm_90:
 * F2F.F64.F16 / F2F.F64.BF16 on the half register; exact, as (double)lo_of) instead of a
 * conversion to float and then to double. */
template <int DT> __device__ __forceinline__ double lo_f64(unsigned w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    double d;
    if constexpr (DT == ROPEKIT_FLOAT16)
        asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.f64.f16 %0, l; }" : "=d"(d) : "r"(w));
    else
        asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.f64.bf16 %0, l; }" : "=d"(d) : "r"(w));
    return d;
#else
    return (double)lo_of<DT>(w);
#endif
}
template <int DT> __device__ __forceinline__ double hi_f64(unsigned w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    double d;
    if constexpr (DT == ROPEKIT_FLOAT16)
        asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.f64.f16 %0, h; }" : "=d"(d) : "r"(w));
    else
        asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.f64.bf16 %0, h; }" : "=d"(d) : "r"(w));
    return d;
#else
    return (double)hi_of<DT>(w);
#endif
}
/* A 16-bit pair word: pack2, or pack2_finite for bfloat16 x with bfloat16 tables (a NaN result
 * then has the hardware's sign and payload, which ropekit_cuda.h leaves unspecified there, as
 * the tile and bulk kernels do: FIN in rotary.cu). */
template <int DT, int TDT> __device__ __forceinline__ unsigned dec_pack(float lo, float hi) {
    return pack2_fin<DT, DT == ROPEKIT_BFLOAT16 && TDT == ROPEKIT_BFLOAT16>(lo, hi);
}

/* The rotation of a piece of G heads: va/vb as loaded (half-split: columns [k0, k0+NC) and
 * [k0+h, ...); adjacent pairs: va alone), cf/sf the NC columns as the rotation uses them. Each
 * column's cos/sin is converted to W once, for all G heads. */
template <int DT, int TDT, bool IL, int PB, int G>
__device__ __forceinline__ void dec_rotate(DecVec<PB> (&va)[G], DecVec<PB> (&vb)[G], const float *cf,
                                           const float *sf) {
    constexpr bool WIDE = DT == ROPEKIT_FLOAT32 || TDT == ROPEKIT_FLOAT32;
    typedef typename std::conditional<WIDE, double, float>::type W;
    typedef typename Elt<DT>::raw raw;
    constexpr int E = PB / (int)sizeof(raw);
    constexpr int NC = IL ? E / 2 : E;
    if constexpr (sizeof(raw) == 4) { /* float32 x: word j is lane j */
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const W c = (W)cf[j], s = (W)sf[j];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                unsigned &w0 = va[g].w[IL ? 2 * j : j], &w1 = IL ? va[g].w[2 * j + 1] : vb[g].w[j];
                float y0, y1;
                rotate<WIDE>(__uint_as_float(w0), __uint_as_float(w1), c, s, &y0, &y1);
                w0 = __float_as_uint(y0), w1 = __float_as_uint(y1);
            }
        }
    } else if constexpr (IL) { /* 16-bit adjacent pairs: word j holds pair j */
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const W c = (W)cf[j], s = (W)sf[j];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float y0, y1;
                if constexpr (WIDE) rotate_d(lo_f64<DT>(va[g].w[j]), hi_f64<DT>(va[g].w[j]), c, s, &y0, &y1);
                else rotate<false>(lo_of<DT>(va[g].w[j]), hi_of<DT>(va[g].w[j]), c, s, &y0, &y1);
                va[g].w[j] = dec_pack<DT, TDT>(y0, y1);
            }
        }
    } else { /* 16-bit half-split: word q of va/vb holds columns 2q and 2q+1 */
#pragma unroll
        for (int q = 0; q < NC / 2; ++q) {
            const W c0 = (W)cf[2 * q], s0 = (W)sf[2 * q], c1 = (W)cf[2 * q + 1], s1 = (W)sf[2 * q + 1];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float ya0, yb0, ya1, yb1;
                if constexpr (WIDE) {
                    rotate_d(lo_f64<DT>(va[g].w[q]), lo_f64<DT>(vb[g].w[q]), c0, s0, &ya0, &yb0);
                    rotate_d(hi_f64<DT>(va[g].w[q]), hi_f64<DT>(vb[g].w[q]), c1, s1, &ya1, &yb1);
                } else {
                    rotate<false>(lo_of<DT>(va[g].w[q]), lo_of<DT>(vb[g].w[q]), c0, s0, &ya0, &yb0);
                    rotate<false>(hi_of<DT>(va[g].w[q]), hi_of<DT>(vb[g].w[q]), c1, s1, &ya1, &yb1);
                }
                va[g].w[q] = dec_pack<DT, TDT>(ya0, ya1), vb[g].w[q] = dec_pack<DT, TDT>(yb0, yb1);
            }
        }
    }
}

/* The default cache hints (flat_hints' default): the LEAN kernel's, at compile time. */
constexpr int DEC_LEAN_HINTS = RK_HINT_X_NOALLOC | RK_HINT_Y_STREAM;

/* MODE: -1 the general version (a.rows at run time, 64-bit offsets); else LEAN with rows of
 * kind MODE (RK_ROWS_PER_TOKEN, RK_ROWS_OFFSET or RK_ROWS_TABLE_3D) at compile time. */
template <int DT, int TDT, bool IL, int PB, int G, int MODE>
__global__ void __launch_bounds__(1024) rotary_decode_kernel(const RotArgs a) {
    constexpr bool LEAN = MODE >= 0;
    const int rows = LEAN ? MODE : a.rows;
    typedef typename Elt<DT>::raw raw;
    typedef typename std::conditional<LEAN, int, long long>::type I; /* offsets */
    constexpr int E = PB / (int)sizeof(raw); /* x elements per piece */
    constexpr int NC = IL ? E / 2 : E;       /* table columns per piece */
    /* the thread's head group in the block (hg) and piece of the head (u): with partial rotary
     * (copy_items > 0) by its linear index, the block's rotation pieces first, so that a warp
     * is all rotation or all copy (as the flat kernel's layout; a warp of 2 heads x 16 pieces
     * of Phi-2's 4 rotation and 12 copy pieces per head rotated with a quarter of its lanes) */
    int hg = (int)threadIdx.y, u = (int)threadIdx.x;
    if (a.copy_items > 0) {
        const unsigned t = threadIdx.y * blockDim.x + threadIdx.x, rb = blockDim.y * (unsigned)a.rot_items;
        if (t < rb) {
            hg = (int)fdiv(t, a.d_rot_items), u = (int)t - hg * a.rot_items;
        } else {
            const unsigned t2 = t - rb;
            hg = (int)fdiv(t2, a.d_copy_items), u = a.rot_items + ((int)t2 - hg * a.copy_items);
        }
    }
    const int n0 = (int)(blockIdx.y * blockDim.y + hg) * G;
    if (n0 >= a.N) return;
    const unsigned tok = blockIdx.x, b32 = fdiv(tok, a.d_S);
    const I b = (I)b32, s = (I)(tok - b32 * a.d_S.d);
    const int hints = LEAN ? DEC_LEAN_HINTS : a.hints;
    /* element offsets from x and y, added to the base pointer once per access (LEAN: one
     * 32-bit offset and one wide multiply-add per address) */
    const I xs2 = (I)a.xs[2], ys2 = (I)a.ys[2];
    const raw *xp = reinterpret_cast<const raw *>(a.x);
    raw *yp = reinterpret_cast<raw *>(a.y);
    const I xo = b * (I)a.xs[0] + s * (I)a.xs[1] + n0 * xs2, yo = b * (I)a.ys[0] + s * (I)a.ys[1] + n0 * ys2;
    if (u >= a.rot_items) { /* channels [R, H): copied bit for bit, in 16-byte pieces (copy16) */
        if (PB < 16 && a.dec_copy16) {
            const int c0 = a.R + (u - a.rot_items) * (16 / (int)sizeof(raw));
            DecVec<16> v[G];
#pragma unroll
            for (int g = 0; g < G; ++g)
                if (g == 0 || n0 + g < a.N) v[g] = dec_ld<16>(xp + (xo + g * xs2 + c0), hints);
#pragma unroll
            for (int g = 0; g < G; ++g)
                if (g == 0 || n0 + g < a.N) dec_st<16>(yp + (yo + g * ys2 + c0), v[g], hints);
            return;
        }
        const int c0 = a.R + (u - a.rot_items) * E;
        DecVec<PB> v[G];
#pragma unroll
        for (int g = 0; g < G; ++g)
            if (g == 0 || n0 + g < a.N) v[g] = dec_ld<PB>(xp + (xo + g * xs2 + c0), hints);
#pragma unroll
        for (int g = 0; g < G; ++g)
            if (g == 0 || n0 + g < a.N) dec_st<PB>(yp + (yo + g * ys2 + c0), v[g], hints);
        return;
    }
    const int k0 = u * NC;
    DecVec<PB> va[G], vb[G];
#pragma unroll
    for (int g = 0; g < G; ++g)
        if (g == 0 || n0 + g < a.N) {
            va[g] = dec_ld<PB>(xp + (xo + g * xs2 + (IL ? 2 * k0 : k0)), hints);
            if (!IL) vb[g] = dec_ld<PB>(xp + (xo + g * xs2 + k0 + a.h), hints);
        }
    if (!LEAN && a.err && n0 == 0 && u == 0 && rows != RK_ROWS_TABLE_3D) record_if_bad(a, b, s, 0);
    I co, so;
    bool good = true;
    if (rows == RK_ROWS_TABLE_3D) {
        co = b * (I)a.cos_bs + s * (I)a.cos_ss + k0 * (I)a.cos_cs;
        so = b * (I)a.sin_bs + s * (I)a.sin_ss + k0 * (I)a.sin_cs;
    } else if constexpr (LEAN) { /* token_row in 32 bits; tab_vec: column stride 1 */
        long long row;
        if (rows == RK_ROWS_OFFSET) {
            const long long off = a.pos[0];
            row = off + s;
            good = !(off < 0 || a.S > a.table_rows || off > a.table_rows - a.S);
        } else {
            row = a.pos[b * (I)a.pos_bs + s * (I)a.pos_ss];
            good = (unsigned long long)row < (unsigned long long)a.table_rows; /* 0 <= row < rows */
        }
        if (!good && a.err && n0 == 0 && u == 0) record_if_bad(a, b, s, 0);
        co = (I)row * (I)a.cos_rs + k0, so = (I)row * (I)a.sin_rs + k0;
    } else {
        long long row, value;
        good = token_row(a, b, s, 0, &row, &value);
        co = row * a.cos_rs + k0 * a.cos_cs, so = row * a.sin_rs + k0 * a.sin_cs;
    }
    if (good) {
        float cf[NC], sf[NC];
        dec_cols<TDT, NC>(a.cos, co, a.cos_cs, LEAN || a.tab_vec, cf);
        dec_cols<TDT, NC>(a.sin, so, a.sin_cs, LEAN || a.tab_vec, sf);
        scale_invert_cols<TDT, NC>(cf, sf, !LEAN && a.apply_scale, a.scale, a.inverse);
        dec_rotate<DT, TDT, IL, PB, G>(va, vb, cf, sf);
    }
#pragma unroll
    for (int g = 0; g < G; ++g)
        if (g == 0 || n0 + g < a.N) {
            dec_st<PB>(yp + (yo + g * ys2 + (IL ? 2 * k0 : k0)), va[g], hints);
            if (!IL) dec_st<PB>(yp + (yo + g * ys2 + k0 + a.h), vb[g], hints);
        }
}

/* Piece size in bytes (ROPEKIT_CUDA_DECODE_PIECE=8|16; 0 = unset: decode_shape decides). */
int decode_piece_env() {
    static const int p = env_int("ROPEKIT_CUDA_DECODE_PIECE", 0, 16, 0);
    return p == 0 ? 0 : p >= 16 ? 16 : 8;
}
/* Heads per thread (ROPEKIT_CUDA_DECODE_HEADS=1|2; 0 = unset). */
int decode_heads_env() {
    static const int g = env_int("ROPEKIT_CUDA_DECODE_HEADS", 0, 2, 0);
    return g;
}
/* Pieces per head for piece size pb (0: the layout does not split into such pieces). */
inline int decode_items(const rk_rotary_plan *p, int pb, int *rot) {
    const long long es = (long long)ropekit_dtype_size(p->dtype), e = pb / es, h = p->R / 2;
    if (p->H % e || (p->interleaved ? p->R % e : h % e)) return 0;
    *rot = (int)(p->interleaved ? p->R / e : h / e);
    return *rot + (int)((p->H - p->R) / e);
}

template <int DT, int TDT, bool IL, int PB, int G>
void launch_dec_lean(const RotArgs &a, dim3 grid, dim3 block, cudaStream_t st) {
    if (a.rows == RK_ROWS_TABLE_3D) rotary_decode_kernel<DT, TDT, IL, PB, G, RK_ROWS_TABLE_3D><<<grid, block, 0, st>>>(a);
    else if (a.rows == RK_ROWS_OFFSET) rotary_decode_kernel<DT, TDT, IL, PB, G, RK_ROWS_OFFSET><<<grid, block, 0, st>>>(a);
    else rotary_decode_kernel<DT, TDT, IL, PB, G, RK_ROWS_PER_TOKEN><<<grid, block, 0, st>>>(a);
}
template <int DT, int TDT, bool IL, int PB>
void launch_dec_pb(const RotArgs &a, dim3 grid, dim3 block, int g, bool lean, cudaStream_t st) {
    if (!lean) {
        rotary_decode_kernel<DT, TDT, IL, PB, 1, -1><<<grid, block, 0, st>>>(a);
        return;
    }
    if constexpr (PB == 8)
        if (g == 2) {
            launch_dec_lean<DT, TDT, IL, 8, 2>(a, grid, block, st);
            return;
        }
    launch_dec_lean<DT, TDT, IL, PB, 1>(a, grid, block, st);
}
/* pb: piece bytes, g: heads per thread (2 only with pb 8 and lean), hy: head groups per block */
template <int DT, int TDT>
ropekit_status launch_rotary_decode(const RotArgs &a, int pb, int g, int hy, bool lean, cudaStream_t st) {
    const int groups = (a.N + g - 1) / g;
    const dim3 grid((unsigned)a.T, (unsigned)((groups + hy - 1) / hy)), block((unsigned)a.items, (unsigned)hy);
    if (pb == 16) {
        if (a.interleaved) launch_dec_pb<DT, TDT, true, 16>(a, grid, block, 1, lean, st);
        else launch_dec_pb<DT, TDT, false, 16>(a, grid, block, 1, lean, st);
    } else {
        if (a.interleaved) launch_dec_pb<DT, TDT, true, 8>(a, grid, block, g, lean, st);
        else launch_dec_pb<DT, TDT, false, 8>(a, grid, block, g, lean, st);
    }
    return launched("rotary kernel launch");
}
