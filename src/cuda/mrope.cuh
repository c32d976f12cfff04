/* MRotaryEmbedding (Qwen2-VL / Qwen2.5-VL / Qwen3-VL M-RoPE) on the GPU: the column -> id
 * stream map and the MRoPE flat kernel. src/cuda/rotary.cu includes this file after the rotary
 * kernels' shared pieces (RotArgs, token_row, record_if_bad, load_cols, rotate_chunk), so the
 * rotation is the rotary kernels' own (same arithmetic, same bits); run_rotary sends every
 * vectorisable MRoPE call here (mrope_launch), unless ROPEKIT_CUDA_ROTARY_KERNEL forces the
 * generic flat or tile kernel (which take MRoPE through fetch_cs / their MRoPE branch).
 *
 * Why a kernel of its own: MRoPE's only difference from a per-token rotary call is that table
 * column k reads the row of id stream mrope_stream(k) (0 T, 1 H, 2 W). In the generic flat
 * kernel each thread derived its chunk's streams column by column (8 comparisons and branches
 * per 16-bit chunk) before it could issue its id load, and the token's first thread looked up
 * all three streams' ids one after the other (a branch on each loaded id) before its own
 * columns: both lengthen the id -> table -> store chain that a thread's registers are held for.
 * Here the host maps each rotation chunk to its streams once per call (MropeChunks: one word
 * per chunk, passed as a kernel parameter), a thread reads its chunk's word, and the out-of-range
 * bookkeeping runs after the thread's stores. */
#pragma once

/* Which position-id stream (0 T, 1 H, 2 W) table column k reads, as rk_mrope_stream
 * (src/core/internal.h) for the plan's sections and layout. */
__device__ __forceinline__ int mrope_stream(const RotArgs &a, int k) {
    if (a.layout == 0) return k < a.sec0 ? 0 : (k < a.sec0 + a.sec1 ? 1 : 2);
    if (k % 3 == 1 && k < 3 * a.sec1) return 1;
    if (k % 3 == 2 && k < 3 * a.sec2) return 2;
    return 0;
}

/* Per rotation chunk u (NC table columns from k0 = u * NC): bits 2j..2j+1 the stream of column
 * j, bit MROPE_ONE: every column reads one stream (the stream of column 0), bits MROPE_REC +
 * st: this chunk's thread of head group 0 records stream st's out-of-range ids (the first chunk
 * whose columns read st). At most MROPE_MAX_CHUNKS chunks (head sizes up to 2 * 128 * NC
 * channels); larger heads take the generic kernels. */
constexpr int MROPE_MAX_CHUNKS = 128;
constexpr int MROPE_ONE = 31, MROPE_REC = 28;
struct MropeChunks {
    unsigned w[MROPE_MAX_CHUNKS];
};

/* Fills m for the plan's sections; false when the head has more chunks than m holds. */
inline bool mrope_chunks(const rk_rotary_plan *p, int rot_items, int nc, MropeChunks *m) {
    if (rot_items > MROPE_MAX_CHUNKS || nc > 8) return false;
    memset(m, 0, sizeof *m);
    unsigned seen = 0;
    for (int u = 0; u < rot_items; ++u) {
        unsigned w = 0, uses = 0;
        bool one = true;
        int st0 = 0;
        for (int j = 0; j < nc; ++j) {
            const int st = rk_mrope_stream(p->mrope_section, p->mrope_layout, (long long)u * nc + j);
            if (j == 0) st0 = st;
            one = one && st == st0;
            w |= (unsigned)st << (2 * j);
            uses |= 1u << st;
        }
        if (one) w |= 1u << MROPE_ONE;
        w |= (uses & ~seen) << MROPE_REC;
        seen |= uses;
        m->w[u] = w;
    }
    return true;
}

/* L2 prefetch of the table columns that stream st of token tf reads (pf_off / pf_len bytes of
 * its cos and sin rows: run_rotary), one bulk prefetch each (sm_90; nothing before). Issued
 * pf_tok tokens ahead of the token being rotated, so that the id -> table chain of a later
 * block finds its rows in L2. No effect on the results. */
template <int TDT>
__device__ __forceinline__ void mrope_prefetch(const RotArgs &a, long long tf, int st) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    typedef typename Elt<TDT>::raw traw;
    if (tf >= a.T || !a.pf_len[st]) return;
    long long bf, sf;
    if (a.small) {
        const unsigned b32 = fdiv((unsigned)tf, a.d_S);
        bf = b32, sf = (unsigned)tf - b32 * a.d_S.d;
    } else {
        bf = tf / a.S, sf = tf - bf * a.S;
    }
    const long long row = a.pos[st * a.pos_as + bf * a.pos_bs + sf * a.pos_ss];
    if (row < 0 || row >= a.table_rows) return;
    const char *c = a.cos + row * a.cos_rs * (long long)sizeof(traw) + a.pf_off[st];
    const char *sn = a.sin + row * a.sin_rs * (long long)sizeof(traw) + a.pf_off[st];
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c), "r"(a.pf_len[st]) : "memory");
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(sn), "r"(a.pf_len[st]) : "memory");
#else
    (void)a, (void)tf, (void)st;
#endif
}
/* L2 prefetch of token tf's x row (pf_x: heads contiguous, 16-byte multiples), in pieces of at
 * most 4 KB, pieces j, j + nj, ... of it. */
__device__ __forceinline__ void mrope_prefetch_x(const RotArgs &a, long long tf, int j, int nj) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (tf >= a.T) return;
    long long bf, sf;
    if (a.small) {
        const unsigned b32 = fdiv((unsigned)tf, a.d_S);
        bf = b32, sf = (unsigned)tf - b32 * a.d_S.d;
    } else {
        bf = tf / a.S, sf = tf - bf * a.S;
    }
    const char *x = a.x + (bf * a.xs[0] + sf * a.xs[1]) * a.pf_es;
    for (int o = j * 4096; o < a.pf_x; o += nj * 4096) {
        const int n = a.pf_x - o < 4096 ? a.pf_x - o : 4096;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(x + o), "r"(n) : "memory");
    }
#else
    (void)a, (void)tf, (void)j, (void)nj;
#endif
}
/* The tile kernel's share: the block's last 3 * ntok threads, one per (token, stream). */
template <int TDT>
__device__ __forceinline__ void mrope_prefetch_block(const RotArgs &a, long long tok0, int ntok,
                                                     unsigned tid, unsigned nt) {
    const unsigned first = nt - 3u * (unsigned)ntok;
    if (3u * (unsigned)ntok > nt || tid < first) return;
    const int j = (int)(tid - first), t = j / 3, st = j - 3 * t;
    mrope_prefetch<TDT>(a, tok0 + t + a.pf_tok, st);
}

/* Host: the byte range of a table row that each stream's columns cover (16-byte aligned, for
 * the bulk prefetch), or pf_len 0 (stream unused, or rows not 16-byte aligned). */
inline void mrope_prefetch_ranges(const rk_rotary_plan *p, RotArgs *a) {
    const long long tes = (long long)ropekit_dtype_size(p->table_dtype), h = p->R / 2;
    const bool al = p->cos_cs == 1 && p->sin_cs == 1 && (uintptr_t)p->cos % 16 == 0 &&
                    (uintptr_t)p->sin % 16 == 0 && (p->cos_rs * tes) % 16 == 0 && (p->sin_rs * tes) % 16 == 0;
    for (int st = 0; st < 3; ++st) {
        long long lo = -1, hi = -1;
        for (long long k = 0; k < h; ++k)
            if (rk_mrope_stream(p->mrope_section, p->mrope_layout, k) == st) {
                if (lo < 0) lo = k;
                hi = k + 1;
            }
        a->pf_off[st] = a->pf_len[st] = 0;
        if (!al || lo < 0) continue;
        const long long b0 = lo * tes / 16 * 16, b1 = (hi * tes + 15) / 16 * 16;
        a->pf_off[st] = (int)b0, a->pf_len[st] = (int)(b1 - b0);
    }
}

/* Thread shape, index decoding, copy threads for [R, H), x loads and stores as the generic flat
 * kernel (rotary_flat_body); only the chunk's columns and the id bookkeeping differ. */
template <int DT, int TDT, bool IL, int G>
__device__ __forceinline__ void mrope_flat_body(const RotArgs &a, const MropeChunks &m) {
    typedef typename Elt<DT>::raw raw;
    typedef typename Elt<TDT>::raw traw;
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
    if (a.pf_x && grp == 0 && u == 0) mrope_prefetch_x(a, tok + a.pf_tok, 0, 1); /* no id needed */
    const unsigned cw = m.w[u]; /* the chunk's streams */
    const int k0 = u * NC;
    uint4 va[G], vb[G];
#pragma unroll
    for (int g = 0; g < G; ++g)
        if (n0 + g < a.N) {
            const raw *q = xp + g * a.xs[2];
            va[g] = ld_x(q + (IL ? 2 * k0 : k0), hints);
            if (!IL) vb[g] = ld_x(q + k0 + a.h, hints);
        }
    float cf[NC], sf[NC];
    unsigned good = 0;
    const bool one = (cw >> MROPE_ONE) & 1u;
    long long row = 0;
    if (one) row = a.pos[(long long)(cw & 3u) * a.pos_as + b * a.pos_bs + s * a.pos_ss];
    if (a.pf_tok && grp == 0) { /* after the id load: both ids are in flight together */
#pragma unroll 1
        for (int st = 0; st < 3; ++st)
            if ((cw >> (MROPE_REC + st)) & 1u) mrope_prefetch<TDT>(a, tok + a.pf_tok, st);
    }
    if (one) { /* one stream (sectioned layouts: nearly every chunk) */
        if (row >= 0 && row < a.table_rows) {
            good = (1u << NC) - 1u;
            load_cols<TDT, NC>(a.cos, row * a.cos_rs + k0 * a.cos_cs, a.cos_cs, a.tab_vec, cf);
            load_cols<TDT, NC>(a.sin, row * a.sin_rs + k0 * a.sin_cs, a.sin_cs, a.tab_vec, sf);
        } else {
#pragma unroll
            for (int j = 0; j < NC; ++j) cf[j] = 1.0f, sf[j] = 0.0f;
        }
    } else { /* columns from several streams: one id per stream, one load per column */
        long long rw[3] = {0, 0, 0};
        bool ok[3] = {false, false, false};
        unsigned need = 0; /* the streams the chunk's columns read */
#pragma unroll
        for (int j = 0; j < NC; ++j) need |= 1u << ((cw >> (2 * j)) & 3u);
#pragma unroll
        for (int st = 0; st < 3; ++st)
            if ((need >> st) & 1u) {
                rw[st] = a.pos[st * a.pos_as + b * a.pos_bs + s * a.pos_ss];
                ok[st] = rw[st] >= 0 && rw[st] < a.table_rows;
            }
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const unsigned st = (cw >> (2 * j)) & 3u;
            const long long rr = st == 0 ? rw[0] : st == 1 ? rw[1] : rw[2];
            cf[j] = 1.0f, sf[j] = 0.0f;
            if (!(st == 0 ? ok[0] : st == 1 ? ok[1] : ok[2])) continue;
            good |= 1u << j;
            cf[j] = Elt<TDT>::ld(__ldg(reinterpret_cast<const traw *>(a.cos) + rr * a.cos_rs + (k0 + j) * a.cos_cs));
            sf[j] = Elt<TDT>::ld(__ldg(reinterpret_cast<const traw *>(a.sin) + rr * a.sin_rs + (k0 + j) * a.sin_cs));
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
    rotate_chunk<DT, TDT, IL, G, DT == ROPEKIT_FLOAT16>(va, vb, cf, sf, good);
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (n0 + g >= a.N) continue;
        raw *q = yp + g * a.ys[2];
        st_y(q + (IL ? 2 * k0 : k0), va[g], hints);
        if (!IL) st_y(q + k0 + a.h, vb[g], hints);
    }
    /* out-of-range ids: counted once per (token, stream), by head group 0's thread of the
     * stream's first chunk, after its stores (its id is in L1 by now) */
    if (a.err && grp == 0 && ((cw >> MROPE_REC) & 7u)) {
#pragma unroll 1
        for (int st = 0; st < 3; ++st)
            if ((cw >> (MROPE_REC + st)) & 1u) record_if_bad(a, b, s, st);
    }
}

template <int DT, int TDT, bool IL, int G>
__global__ void __launch_bounds__(256, 4) mrope_flat_kernel(const RotArgs a, const MropeChunks m) {
    mrope_flat_body<DT, TDT, IL, G>(a, m);
}

/* One launch of the MRoPE flat kernel: blocks as launch_rotary_flat chooses them (128 threads,
 * 256 with partial rotary, halved while the grid would not give every SM two blocks). */
template <int DT, int TDT>
ropekit_status mrope_launch(const RotArgs &a, const MropeChunks &m, long long threads_total,
                            cudaStream_t st) {
    long long bs = a.copy_items > 0 ? 256 : 128;
    { /* R1 (2026-12-02) experiment only: ROPEKIT_CUDA_MROPE_BLOCK=64|128|256 */
        static const int fb = env_int("ROPEKIT_CUDA_MROPE_BLOCK", 0, 256, 0);
        if (fb == 64 || fb == 128 || fb == 256) bs = fb;
    }
    const long long sms = sm_count();
    while (bs > 64 && (threads_total + bs - 1) / bs < 2 * sms) bs /= 2;
    const long long blocks = (threads_total + bs - 1) / bs;
    if (blocks > INT_MAX) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many tokens for one launch");
    const dim3 grid((unsigned)blocks), block((unsigned)bs);
    if (a.interleaved) mrope_flat_kernel<DT, TDT, true, FLAT_G><<<grid, block, 0, st>>>(a, m);
    else mrope_flat_kernel<DT, TDT, false, FLAT_G><<<grid, block, 0, st>>>(a, m);
    return launched("MRoPE kernel launch");
}
