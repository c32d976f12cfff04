/* MRotaryEmbedding's pipelined tile kernel (src/cuda/rotary.cu includes this file after the tile
 * kernel; run_rotary chooses it through mrope_kernel).
 *
 * The tile kernel takes one token per block: the block's first threads load the token's three
 * position ids, then its table rows (a dependent second load), stage the columns in shared
 * memory, and only after a barrier can any thread rotate. With MRoPE that id -> table chain is
 * two memory latencies against the single latency of the x loads, so the blocks spend about half
 * their life with nothing of x in flight (ncu: DRAM 55-61% of peak at 10 blocks of 128 per SM).
 *
 * This kernel keeps the tile kernel's thread shape (a thread: one 16-byte chunk of G heads of a
 * token; a block: tpb tokens, a "slot") but loops over slots (block j takes slots j, j + grid,
 * ...) and pipelines the chain across them: in the iteration of slot q a gather thread (one per
 * staged column, its stream fixed for the whole kernel) issues the table loads of slot q+1 from
 * the id it loaded one iteration earlier and the id load of slot q+2, while every thread rotates
 * slot q from the columns staged in the previous iteration and issues its x loads of slot q+1
 * right after its stores of slot q. So each iteration waits for one memory latency, x and table
 * loads in flight together, and has one barrier; shared memory holds two slots' columns.
 * Same arithmetic (rotate_chunk) and bits as the tile and flat kernels; out-of-range ids are
 * counted by the gather thread of each stream's first column. */
#pragma once

template <int DT, int TDT, int G>
__device__ __forceinline__ void rotary_pipe_body(const RotArgs &a) {
    typedef typename Elt<DT>::raw raw;
    typedef typename Elt<TDT>::raw traw;
    constexpr int V = 16 / sizeof(raw);
    constexpr int NC = V; /* half-split pairs: table columns per chunk */
    extern __shared__ __align__(16) unsigned char smem[];
    const int hp = a.hp, tpb = a.tpb;
    const int bufn = tpb * hp; /* floats per slot */
    float *cw = reinterpret_cast<float *>(smem);
    float *sw = cw + 2 * bufn;
    unsigned char *okb = reinterpret_cast<unsigned char *>(sw + 2 * bufn);

    /* run_rotary takes this kernel only when a.small: token indices in 32 bits */
    const int T = (int)a.T, nslots = (T + tpb - 1) / tpb, step = (int)gridDim.x;
    const unsigned tid = threadIdx.x;
    const int per_tok = a.ngroups * a.items;
    const int tl = (int)fdiv(tid, a.d_per_tok), r = (int)tid - tl * per_tok; /* r < rot_total */
    const int grp = (int)fdiv((unsigned)r, a.d_rot_items), u = r - grp * a.rot_items;
    const int n0 = grp * G, k0 = u * NC;
    const int hints = a.hints;
    uint4 va[G], vb[G];
    auto load_x = [&](int slot) {
        const int tok = slot * tpb + tl;
        if (tok >= T) return;
        const unsigned b = fdiv((unsigned)tok, a.d_S), s = (unsigned)tok - b * a.d_S.d;
        const raw *xp =
            reinterpret_cast<const raw *>(a.x) + b * a.xs[0] + s * a.xs[1] + n0 * a.xs[2] + k0;
#pragma unroll
        for (int g = 0; g < G; ++g)
            if (n0 + g < a.N) {
                va[g] = ld_x(xp + g * a.xs[2], hints);
                vb[g] = ld_x(xp + g * a.xs[2] + a.h, hints);
            }
    };
    /* the gather role: thread gi < tpb * h stages column gk of the slot's token gt; its stream
     * is fixed for the whole kernel */
    const bool gth = tid < (unsigned)(tpb * a.h);
    const int gt = gth ? (int)fdiv(tid, a.d_h) : 0, gk = (int)tid - gt * a.h;
    const int gst = gth ? mrope_stream(a, gk) : 0;
    /* the first column of the column's stream: it counts the stream's out-of-range ids */
    const int g1st = a.layout == 0 ? (gst == 0 ? 0 : gst == 1 ? a.sec0 : a.sec0 + a.sec1) : gst;
    auto gathers = [&](int slot) {
        return gth && slot >= 0 && slot < nslots && slot * tpb + gt < T;
    };
    auto load_id = [&](int slot) -> long long {
        const unsigned tok = (unsigned)(slot * tpb + gt), b = fdiv(tok, a.d_S),
                       s = tok - b * a.d_S.d;
        return __ldg(a.pos + gst * a.pos_as + b * a.pos_bs + s * a.pos_ss);
    };
    const traw *ctab = reinterpret_cast<const traw *>(a.cos),
               *stab = reinterpret_cast<const traw *>(a.sin);

    /* prologue: x and the id of the block's first slot */
    int q = (int)blockIdx.x - step; /* the slot rotated in the iteration: none in the first */
    load_x(q + step);
    long long idn = gathers(q + step) ? load_id(q + step) : 0;
    for (int cur = 0;; cur ^= 1) {
        const int qn = q + step;
        /* slot qn's table loads (its id arrived during the last iteration), the next id */
        const bool gn = gathers(qn);
        const bool good = idn >= 0 && idn < a.table_rows;
        traw cr = 0, sr = 0;
        long long id2 = 0;
        if (gn) {
            if (good) { /* a bad id's row is never read */
                cr = __ldg(ctab + idn * a.cos_rs + gk * a.cos_cs);
                sr = __ldg(stab + idn * a.sin_rs + gk * a.sin_cs);
            }
            if (gathers(qn + step)) id2 = load_id(qn + step);
        }
        if (gn) { /* stage slot qn's column as fetch_cs gives it */
            float cv = Elt<TDT>::ld(cr), sv = Elt<TDT>::ld(sr);
            if (a.apply_scale) {
                cv = round_to<TDT>(__fmul_rn(cv, a.scale));
                sv = round_to<TDT>(__fmul_rn(sv, a.scale));
            }
            const int j = (cur ^ 1) * bufn + gt * hp + gk;
            cw[j] = good ? cv : 1.0f;
            sw[j] = good ? (a.inverse ? -sv : sv) : 0.0f;
            okb[j] = good;
            /* out-of-range ids: counted by the first column of each stream */
            if (!good && a.err && gk == g1st) {
                const unsigned tok = (unsigned)(qn * tpb + gt), b = fdiv(tok, a.d_S),
                               s = tok - b * a.d_S.d;
                const unsigned long long key =
                    (unsigned long long)(gst * a.B + b) * (unsigned long long)a.S +
                    (unsigned long long)s;
                record_bad(a.err, key, ERR_IDS_MROPE, gst, b, s, idn, a.table_rows, a.S);
            }
        }
        if (q >= 0) { /* rotate slot q from the columns staged in the last iteration */
            const int tok = q * tpb + tl;
            if (tok < T) {
                const int j = cur * bufn + tl * hp + k0;
                const float *cp = cw + j, *sp = sw + j;
                const unsigned char *op = okb + j;
                float cf[NC], sf[NC];
#pragma unroll
                for (int v = 0; v < NC / 4; ++v) {
                    const float4 c4 = reinterpret_cast<const float4 *>(cp)[v];
                    const float4 s4 = reinterpret_cast<const float4 *>(sp)[v];
                    cf[4 * v] = c4.x, cf[4 * v + 1] = c4.y, cf[4 * v + 2] = c4.z,
                           cf[4 * v + 3] = c4.w;
                    sf[4 * v] = s4.x, sf[4 * v + 1] = s4.y, sf[4 * v + 2] = s4.z,
                           sf[4 * v + 3] = s4.w;
                }
                unsigned gm = 0;
                if constexpr (NC == 8) {
                    const uint2 o = *reinterpret_cast<const uint2 *>(op);
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        gm |= ((o.x >> (8 * i)) & 1u) << i;
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        gm |= ((o.y >> (8 * i)) & 1u) << (4 + i);
                } else {
                    const unsigned o = *reinterpret_cast<const unsigned *>(op);
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        gm |= ((o >> (8 * i)) & 1u) << i;
                }
                rotate_chunk<DT, TDT, false, G, false>(va, vb, cf, sf, gm);
                const unsigned b = fdiv((unsigned)tok, a.d_S), s = (unsigned)tok - b * a.d_S.d;
                raw *yp =
                    reinterpret_cast<raw *>(a.y) + b * a.ys[0] + s * a.ys[1] + n0 * a.ys[2] + k0;
#pragma unroll
                for (int g = 0; g < G; ++g)
                    if (n0 + g < a.N) {
                        st_y(yp + g * a.ys[2], va[g], hints);
                        st_y(yp + g * a.ys[2] + a.h, vb[g], hints);
                    }
            }
            if (qn < nslots) load_x(qn); /* in flight across the barrier */
        }
        if (qn >= nslots) break;
        idn = id2;
        q = qn;
        __syncthreads();
    }
}

/* Registers: capped at 56 (9 blocks of 128 threads per SM), or under the 1024-thread bound only
 * (61-64: 8 blocks) for float16 x with float16 tables (mrope_kernel). */
template <int DT, int TDT, int G>
__global__ void __maxnreg__(56) rotary_pipe_kernel(const RotArgs a) {
    rotary_pipe_body<DT, TDT, G>(a);
}
template <int DT, int TDT, int G>
__global__ void __launch_bounds__(1024) rotary_pipe_kernel_free(const RotArgs a) {
    rotary_pipe_body<DT, TDT, G>(a);
}

/* Which MRoPE kernel takes a call that run_rotary gives the tile kernel: 0 the tile kernel, 1 the
 * pipelined kernel without a register cap, 2 capped at 56. Chosen on an H200 (R1 and R2 of
 * 2026-12-02, same-run A/B against main's tile kernel, bench/results-cuda.md "MRotaryEmbedding"):
 * the pipelined kernel where x and the tables are 16-bit or the layout is interleaved (float16
 * 40.9 -> 39.0 us, bfloat16 42.0 -> 41.0, interleaved float32 98.3 -> 93.8, float16 51.1 ->
 * 48.3, bfloat16 53.2 -> 49.3), capped at 56 registers but for float16 x with float16 tables
 * (uncapped 39.6 vs 40.6 us; interleaved bfloat16 capped 49.6 vs 52.3); the tile kernel for the
 * sectioned layout with float32 x or tables, where the pipelined kernel's double-precision
 * rotation needs more registers and spills (bfloat16 x / float32 tables 40.3 -> 43.7-44.0 us,
 * float32 74.3 -> 74.8-75.5). ROPEKIT_CUDA_MROPE=tile|pipe|pipe56 (tests and benchmarks, read
 * once) overrides it for every MRoPE call that the tile kernel would take. */
int mrope_env_kernel() {
    static const char *const names[] = {"tile", "pipe", "pipe56"}; /* the values 0, 1, 2 */
    static const int m = env_choice("ROPEKIT_CUDA_MROPE", names, 3, -1);
    return m;
}
int mrope_kernel(const rk_rotary_plan *p) {
    if (mrope_env_kernel() >= 0) return mrope_env_kernel();
    const bool wide = p->dtype == ROPEKIT_FLOAT32 || p->table_dtype == ROPEKIT_FLOAT32;
    if (wide && p->mrope_layout == 0) return 0;
    return p->dtype == ROPEKIT_FLOAT16 && p->table_dtype == ROPEKIT_FLOAT16 ? 1 : 2;
}

/* Shared memory of the pipelined kernel: two slots' staged columns. */
size_t mrope_pipe_shm(const RotArgs &a) {
    return (size_t)2 * a.tpb * a.hp * 9;
}

/* One wave of resident blocks, the slots split evenly among them (4 slots per block, i.e. more
 * blocks than fit at once, was 1-4% slower: R1). */
template <int DT, int TDT>
ropekit_status launch_rotary_pipe(const RotArgs &a, int threads, int kernel, cudaStream_t st) {
    void (*k)(RotArgs) = kernel == 1 ? rotary_pipe_kernel_free<DT, TDT, TILE_G>
                                     : rotary_pipe_kernel<DT, TDT, TILE_G>;
    const size_t shm = mrope_pipe_shm(a);
    int per_sm = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, threads, shm);
    if (e != cudaSuccess) return cuda_fail(e, "rotary occupancy");
    const long long nslots = (a.T + a.tpb - 1) / a.tpb;
    const long long resident = (long long)(per_sm > 0 ? per_sm : 1) * sm_count();
    const long long iters = (nslots + resident - 1) / resident;
    const long long blocks = (nslots + iters - 1) / iters;
    if (blocks > INT_MAX)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many tokens for one launch");
    k<<<(unsigned)blocks, (unsigned)threads, shm, st>>>(a);
    return launched("rotary kernel launch");
}
