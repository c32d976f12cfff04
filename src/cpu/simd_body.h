/* The SIMD kernels, written once over a small vector vocabulary and compiled once per ISA:
 * src/cpu/avx2.c (8 float lanes), avx512.c (16) and neon.c (4) define the vocabulary below, then
 * include this file. Every operation mirrors src/cpu/ref.c: the same products, the same rounding
 * points, so every output has the reference's bits (a NaN may differ in sign and payload).
 *
 * Vocabulary the includer provides (vf: VL floats, vd: VL/2 doubles):
 *   VL, RK_SUFFIX(name)
 *   vf ld_f32/ld_f16/ld_bf16(const void *), st_f32/st_f16/st_bf16(void *, vf), vf
 * rt_f16/rt_bf16(vf) (16-bit conversions round to nearest even exactly as rk_f32_to_f16 /
 * rk_f32_to_bf16) f_ld/f_st (floats), f_st_nt/st_f16_nt/st_bf16_nt (streaming stores, aligned),
 * st_fence vf f_set1, f_mul, f_add, f_sub, f_div, f_xor, f_addsub (even a-b, odd a+b), f_dupe,
 * f_dupo (even/odd lane copied to the pair), f_max/f_min (x86 rule: a > b ? a : b, so a NaN in a
 *      gives b), f_abs, f_e4m3 (FP8 grid, |v| <= 448)
 *   vd d_lo, d_hi (float halves widened), vf d_pack(vd lo, vd hi) (narrowed), d_ld, d_st, d_mul,
 *      d_add, d_addsub, d_subadd_neg (even a+b, odd a-b), d_dupe, d_dupo, d_swap (pair swap),
 *      d_zero, d_ldf/d_stf (VL/2 floats widened / narrowed), d_fmsub/d_fmadd/d_fmaddsub
 *      (a*b -/+ c, used only where a*b is exact, so fusing changes no bit)
 *   float f_hmax(vf), f_lane0(vf); double d_reduce16(const vd acc[32 / VL]) (ref.c's lane sum)
 * Optional (QKNorm only; each macro defined by the includer that provides it):
 *   RK_HAVE_BF16_HW: st_bf16_hw/st_bf16_hw_nt/rt_bf16_hw (a conversion instruction, same bits),
 *      st_bf16_hw_pair(p, even, odd, nt) (2*VL values from even and odd elements, in order) and
 *      RK_BF16_HW_OK() (whether this CPU may run them)
 *   RK_HAVE_BF16_PAIRS (VL = 8 or 16): ld_bf16_eo(p, &even, &odd) (2*VL bfloat16 as two vf of
 *      the even and odd elements), d_unpair(&a, &b) (even/odd lanes back in order)
 *   RK_HAVE_D_LD_F16: vd d_ld_f16(p) (VL/2 float16 widened to doubles)
 *   RK_HAVE_F16_HW: float16 multiplication (same bits), RK_F16_HW_OK() (whether this CPU may run
 *      it): a type vh of 2*VL float16 values, vh h_set1(vf r) (a float16 value in every lane),
 *      h_mul_st(y, x, r, nt) (y = Rt(x * r), 2*VL float16 values; nt as st_f16's), vf
 *      h_mul_ld(x, r) (Rt(x * r) of VL float16 values, as floats)
 *   RK_HAVE_NT16 (x86): nt16_f32/nt16_f16/nt16_bf16(p, v) (and nt16_bf16_hw with RK_HAVE_BF16_HW),
 *      a vector's stores as 16-byte streaming stores in address order (p aligned to 16 bytes);
 *      st_bf16_eo / st_bf16_hw_pair with nt = 2 likewise
 */
#include <math.h>
#include <string.h>

#include "../core/internal.h"

#include "force_inline.h"
#define RK_INLINE RK_FORCE_INLINE

/* src/cpu/dispatch.c: output bytes of the whole call this thread is running a part of (0
 * outside a call). Streaming stores are chosen for the call, not for one chunk of it. */
int64_t rk_cpu_part_bytes(void);
RK_INLINE int large_output(int64_t own_bytes) {
    const int64_t thr = rk_cpu_stream_threshold(), part = rk_cpu_part_bytes();
    return own_bytes >= thr || part >= thr;
}
#define RK_CHUNK 256 /* table columns gathered per token at a time */

RK_INLINE vf ld_t(const void *p, ropekit_dtype dt) {
    return dt == ROPEKIT_FLOAT32 ? ld_f32(p) : dt == ROPEKIT_FLOAT16 ? ld_f16(p) : ld_bf16(p);
}
RK_INLINE void st_t(void *p, ropekit_dtype dt, vf v) {
    if (dt == ROPEKIT_FLOAT32)
        st_f32(p, v);
    else if (dt == ROPEKIT_FLOAT16)
        st_f16(p, v);
    else
        st_bf16(p, v);
}
RK_INLINE vf rt_t(vf v, ropekit_dtype dt) {
    return dt == ROPEKIT_FLOAT32 ? v : dt == ROPEKIT_FLOAT16 ? rt_f16(v) : rt_bf16(v);
}
RK_INLINE size_t esz(ropekit_dtype dt) {
    return dt == ROPEKIT_FLOAT32 ? 4 : 2;
}
/* VL values of type dt widened to two double vectors, and back (rounded to float, then dt). */
RK_INLINE void ld_d2(const char *p, ropekit_dtype dt, vd *lo, vd *hi) {
    if (dt == ROPEKIT_FLOAT32) {
        *lo = d_ldf((const float *)p), *hi = d_ldf((const float *)p + VL / 2);
    } else {
        vf v = ld_t(p, dt);
        *lo = d_lo(v), *hi = d_hi(v);
    }
}
RK_INLINE void st_d2(char *p, ropekit_dtype dt, vd lo, vd hi, int nt) {
    if (dt == ROPEKIT_FLOAT32) {
        if (nt)
            f_st_nt((float *)p, d_pack(lo, hi));
        else
            d_stf((float *)p, lo), d_stf((float *)p + VL / 2, hi);
    } else if (nt) {
        if (dt == ROPEKIT_FLOAT16)
            st_f16_nt(p, d_pack(lo, hi));
        else
            st_bf16_nt(p, d_pack(lo, hi));
    } else {
        st_t(p, dt, d_pack(lo, hi));
    }
}
/* A 16-bit store (nt: streaming, p aligned to 2*VL bytes; nt = 2: 16-byte streaming stores, p
 * aligned to 16 bytes, RK_HAVE_NT16 only). */
RK_INLINE void st_16(void *p, ropekit_dtype dt, vf v, int nt) {
    if (!nt)
        st_t(p, dt, v);
#ifdef RK_HAVE_NT16
    else if (nt == 2 && dt == ROPEKIT_FLOAT16)
        nt16_f16(p, v);
    else if (nt == 2)
        nt16_bf16(p, v);
#endif
    else if (dt == ROPEKIT_FLOAT16)
        st_f16_nt(p, v);
    else
        st_bf16_nt(p, v);
}

/* ============================ RotaryEmbedding / MRotaryEmbedding ============================ */

/* Columns [i0, i1) of contiguous table rows cp/sp (element k at offset k) into c/sn. */
RK_INLINE void gather_run(const char *cp, const char *sp, ropekit_dtype tdt, int inverse,
                          int64_t i0, int64_t i1, float *c, float *sn) {
    const int64_t tes = (int64_t)esz(tdt);
    const vf neg = f_set1(inverse ? -0.0f : 0.0f); /* sign flip by xor, as C's unary - */
    int64_t i = i0;
    for (; i + VL <= i1; i += VL) {
        f_st(c + i, ld_t(cp + i * tes, tdt));
        f_st(sn + i, f_xor(ld_t(sp + i * tes, tdt), neg));
    }
    for (; i < i1; ++i) {
        float sv = rk_load(sp, tdt, i);
        c[i] = rk_load(cp, tdt, i);
        sn[i] = inverse ? -sv : sv;
    }
}

/* cos/sin of columns [k0, k0+n) of token (b, s) as ref.c's gather_columns makes them.
 * strm: MRoPE stream of every column (NULL when the plan is not MRoPE or has no such map). */
RK_INLINE void gather(const rk_rotary_plan *p, ropekit_dtype tdt, const unsigned char *strm,
                      int64_t b, int64_t s, int64_t k0, int64_t n, float *c, float *sn) {
    const int64_t tes = (int64_t)esz(tdt);
    const int fast = p->cos_cs == 1 && p->sin_cs == 1 && !p->apply_scale;
    if (fast && p->rows != RK_ROWS_MROPE) {
        const char *cp = p->cos + rk_table_offset(p, 0, b, s, k0) * tes;
        const char *sp = p->sin + rk_table_offset(p, 1, b, s, k0) * tes;
        gather_run(cp, sp, tdt, p->inverse, 0, n, c, sn);
        return;
    }
    if (fast && strm) { /* runs of columns from one stream's row */
        const int64_t *pos = p->pos + b * p->pos_bs + s * p->pos_ss;
        for (int64_t i = 0; i < n;) {
            int st = strm[k0 + i];
            int64_t j = i + 1;
            while (j < n && strm[k0 + j] == st)
                ++j;
            int64_t row = pos[st * p->pos_as];
            gather_run(p->cos + (row * p->cos_rs + k0) * tes, p->sin + (row * p->sin_rs + k0) * tes,
                       tdt, p->inverse, i, j, c, sn);
            i = j;
        }
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        float cv = rk_load(p->cos, tdt, rk_table_offset(p, 0, b, s, k0 + i));
        float sv = rk_load(p->sin, tdt, rk_table_offset(p, 1, b, s, k0 + i));
        if (p->apply_scale) {
            cv = rk_round_to(tdt, cv * p->scale);
            sv = rk_round_to(tdt, sv * p->scale);
        }
        c[i] = cv;
        sn[i] = p->inverse ? -sv : sv;
    }
}

#define RK_MAXSTREAM 4096 /* MRoPE: widest h with a precomputed column -> stream map */

/* n < 64 bytes, by fixed-size pieces (no library call per row end) */
RK_INLINE void wr_bytes(void *dst, const void *src, int n) {
    char *d = (char *)dst;
    const char *s = (const char *)src;
    if (n & 32) memcpy(d, s, 32), d += 32, s += 32;
    if (n & 16) memcpy(d, s, 16), d += 16, s += 16;
    if (n & 8) memcpy(d, s, 8), d += 8, s += 8;
    if (n & 4) memcpy(d, s, 4), d += 4, s += 4;
    if (n & 2) memcpy(d, s, 2), d += 2, s += 2;
    if (n & 1) *d = (char)*s;
}

/* n bytes, bit for bit (vector registers only move the bits); the last n % (4*VL) by fixed-size
 * pieces, not a memcpy call per row (partial rotary copies 96-byte tails: 64 + 32 on avx512) */
RK_INLINE void copy_bytes(char *dst, const char *src, int64_t n, int nt) {
    int64_t i = 0;
#ifdef RK_HAVE_NT16
    if (nt == 2) { /* dst aligned to 16 bytes: 16-byte loads and streaming stores (bm_nt_copy's) */
        for (; i + 16 <= n; i += 16)
            _mm_stream_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
        if (i < n) wr_bytes(dst + i, src + i, (int)(n - i));
        return;
    }
#endif
    if (nt) /* dst aligned to 4*VL bytes */
        for (; i + 4 * VL <= n; i += 4 * VL)
            f_st_nt((float *)(dst + i), f_ld((const float *)(src + i)));
    for (; i + 4 * VL <= n; i += 4 * VL)
        f_st((float *)(dst + i), f_ld((const float *)(src + i)));
    if (i < n) wr_bytes(dst + i, src + i, (int)(n - i));
}

/* ---- Output rows that do not start on a cache line ----------------------------------------
 * Streaming stores need aligned addresses and must write whole 64-byte lines (a line half
 * streamed, half stored normally is far slower than either). Outputs whose rows are not line
 * aligned (numpy's arrays start 16 bytes into a page; odd head widths; partial rotary's copied
 * tails) are therefore computed into a window in L1 (`rk_sw`) laid out like the destination:
 * window byte i is destination byte rb + i, rb a line address, so a row starting 16 bytes into a
 * line starts 16 bytes into a window line, and consecutive rows adjacent in memory are adjacent
 * in the window. Every destination line the run of rows covers whole goes out as one aligned
 * load and a streaming store, once no row still being computed writes into it (one row later:
 * the loads then need not wait on the row's stores just issued); the partial lines at a run's two
 * ends as normal stores of exactly their bytes. Only out of place (the output overlaps no input:
 * validation), so holding a line's bytes back changes nothing that is read later. QKNorm and the
 * regroup write outputs whose vector stores all land on 16-byte boundaries (numpy's +16 B) with
 * 16-byte streaming stores from the registers instead (nt = 2: qknorm_nt16, regroup's nt16). */
#ifdef RK_HAVE_NT
#define RK_STAGE 4096               /* bytes of one staged row at most */
#ifndef RK_NOSTG /* -D1 for diagnostic builds: no staged rows (normal stores where unaligned) */
#define RK_NOSTG 0
#endif
#ifndef RK_NONT16 /* -D1 for diagnostic builds: no 16-byte streaming stores (rows staged instead) */
#define RK_NONT16 0
#endif
#ifndef RK_SWLAG /* -D for diagnostic builds: lines written out this many bytes behind the row */
#define RK_SWLAG 0
#endif
#define RK_SWB (2 * RK_STAGE + RK_SWLAG + 128) /* window bytes */
typedef struct rk_sw {
    char buf[RK_SWB] __attribute__((aligned(64)));
    char *rb; /* destination line of buf[0] (NULL: no run) */
    char *fp; /* the run's bytes below fp are written out */
    char *wp; /* end of the run's rows so far */
    char *rs; /* start of the row being computed */
} rk_sw;

RK_INLINE void sw_init(rk_sw *w) {
    w->rb = w->fp = w->wp = w->rs = NULL;
}
RK_INLINE char *sw_line(char *a) {
    return (char *)((uintptr_t)a & ~(uintptr_t)63);
}
RK_INLINE void wr_line_nt(char *dst, const char *src) { /* both 64-byte aligned */
#if defined(RK_SWNORMAL) /* diagnostic: the window's lines out with normal stores */
    for (int i = 0; i < 64; i += 4 * VL)
        f_st((float *)(dst + i), f_ld((const float *)(src + i)));
#else
    for (int i = 0; i < 64; i += 4 * VL)
        f_st_nt((float *)(dst + i), f_ld((const float *)(src + i)));
#endif
}
/* The run's bytes [fp, lim) out (lim a line address; whole lines streamed, the run's first line
 * from its first byte stored normally). */
RK_INLINE void sw_out(rk_sw *w, char *lim) {
    char *f = w->fp;
    if (f >= lim) return;
    const int o = (int)((uintptr_t)f & 63);
    if (o) {
        wr_bytes(f, w->buf + (f - w->rb), 64 - o);
        f += 64 - o;
    }
    for (; f < lim; f += 64)
        wr_line_nt(f, w->buf + (f - w->rb));
    w->fp = f;
}
/* The whole run out (its last partial line with normal stores). */
RK_INLINE void sw_end(rk_sw *w) {
    if (!w->rb) return;
    sw_out(w, sw_line(w->wp));
    if (w->wp > w->fp) wr_bytes(w->fp, w->buf + (w->fp - w->rb), (int)(w->wp - w->fp));
    w->rb = NULL;
}
/* Where to compute the n bytes (n <= RK_STAGE) of the row at dst; sw_done(w, n) after. */
RK_INLINE char *sw_row(rk_sw *w, char *dst, int64_t n) {
    if (w->rb && dst == w->wp) {        /* the run goes on */
        if (dst + n - w->rb > RK_SWB) { /* window full: its last partial line to the front */
            char *lim = sw_line(w->wp);
            sw_out(w, lim);
            if (w->wp > lim) memcpy(w->buf, w->buf + (lim - w->rb), 64);
            w->rb = lim;
        }
    } else {
        sw_end(w);
        w->rb = sw_line(dst), w->fp = w->wp = dst;
    }
    w->rs = dst;
    return w->buf + (dst - w->rb);
}
RK_INLINE void sw_done(rk_sw *w, int64_t n) {
#if RK_SWLAG
    if ((uintptr_t)w->rs - (uintptr_t)w->rb > RK_SWLAG)
        sw_out(w, sw_line(w->rs - RK_SWLAG));
#else
    sw_out(w, sw_line(w->rs)); /* the lines only earlier rows write into */
#endif
    w->wp = w->rs + n;
}
#endif

/* One pair, exactly as ref.c's rotate_pair. */
RK_INLINE void pair_scalar(int wide, const char *x, char *y, ropekit_dtype dt, int64_t i0,
                           int64_t i1, float c, float s) {
    float a = rk_load(x, dt, i0), bb = rk_load(x, dt, i1), y0, y1;
    if (wide) {
        y0 = (float)((double)c * a - (double)s * bb);
        y1 = (float)((double)s * a + (double)c * bb);
    } else {
        y0 = c * a - s * bb;
        y1 = s * a + c * bb;
    }
    rk_store(y, dt, i0, y0);
    rk_store(y, dt, i1, y1);
}

/* Table entries per table held for a block of tokens (floats or doubles): a block is as many
 * tokens as fit (at most RK_TB_MAX), so that every head reuses the block's gathered rows. 4096:
 * 64-token blocks for 128-wide heads, so that a BNSH head's rows are visited 64 at a time (16 KiB
 * of 16-bit x per head and block, where 16-token blocks read 32 heads' 4 KiB pieces in turn):
 * BNSH out of place 1.05-1.15x faster (16-bit, medians) on the Xeon, cold buffers, one-process
 * A/B of R2 (session 7), float32 1.03x, rank-3 rows unchanged (no blocks there). */
#ifndef RK_TABE /* -D for diagnostic builds */
#define RK_TABE 4096
#endif
#ifndef RK_TB_MAX
#define RK_TB_MAX 64 /* tokens per block at most */
#endif

/* bfloat16 rows as even/odd halves of 32-bit words (RK_HAVE_BF16_EO: ld_bf16_eo / st_bf16_eo):
 * no widening shuffle on the way in, no narrowing pack on the way out. The tables of such a row
 * are stored in the same even/odd order. */
#ifdef RK_HAVE_BF16_EO
#define RK_EO(dt) ((dt) == ROPEKIT_BFLOAT16)
#else
#define RK_EO(dt) 0
#endif
#ifndef RK_HAVE_BF16_HW
#define RK_BF16_HW_OK() 0
#endif
#ifndef RK_HAVE_F16_HW
#define RK_F16_HW_OK() 0
#endif

/* 2*VL bfloat16 outputs from their even (e) and odd (o) elements (nt: a streaming store, p
 * aligned to 4*VL bytes). hw: the CPU's conversion instruction (st_bf16_hw_pair: the same bits;
 * a vector holding a zero result, which a subnormal input gives, is rounded again with
 * integers), otherwise st_bf16_eo's integer rounding. */
RK_INLINE void st_eo(void *p, vf e, vf o, int nt, int hw) {
#if defined(RK_HAVE_BF16_EO) && defined(RK_HAVE_BF16_HW)
    if (hw) {
        st_bf16_hw_pair(p, e, o, nt);
        return;
    }
#else
    (void)hw;
#endif
#ifdef RK_HAVE_BF16_EO
    st_bf16_eo(p, e, o, nt);
#else
    (void)p, (void)e, (void)o, (void)nt;
#endif
}

/* The cos/sin of one token laid out for its rows (n columns from c/sn, table entries per token
 * returned):
 *   half-split:  T1 = c[k],            T2 = s[k]             (eo: each group of 2*VL columns as
 *                                                             its even columns, then its odd)
 *   interleaved: T1 = [c0 s0 c1 s1..], T2 = [s0 c0 s1 c1..]  so y = addsub(T1*dupe(x), T2*dupo(x))
 *                (eo: T1 = c, T2 = s: the pair's two elements are the word's two halves)
 * as floats, or as doubles for the wide type. */
RK_INLINE int64_t lay_tables(int il, int eo, int wide, int64_t n, const float *c, const float *sn,
                             float *t1f, float *t2f, double *t1d, double *t2d) {
#define RK_PUT(t, i, v) (wide ? (void)(t##d[i] = (v)) : (void)(t##f[i] = (v)))
    if (il && !eo) {
        for (int64_t i = 0; i < n; ++i) {
            RK_PUT(t1, 2 * i, c[i]), RK_PUT(t1, 2 * i + 1, sn[i]);
            RK_PUT(t2, 2 * i, sn[i]), RK_PUT(t2, 2 * i + 1, c[i]);
        }
        return 2 * n;
    }
    int64_t i = 0;
    if (eo && !il)
        for (; i + 2 * VL <= n; i += 2 * VL)
            for (int e = 0; e < VL; ++e) {
                RK_PUT(t1, i + e, c[i + 2 * e]), RK_PUT(t1, i + VL + e, c[i + 2 * e + 1]);
                RK_PUT(t2, i + e, sn[i + 2 * e]), RK_PUT(t2, i + VL + e, sn[i + 2 * e + 1]);
            }
    if (wide && !eo) /* widened VL/2 at a time (a decode token's whole table setup) */
        for (; i + VL / 2 <= n; i += VL / 2)
            d_st(t1d + i, d_ldf(c + i)), d_st(t2d + i, d_ldf(sn + i));
    for (; i < n; ++i)
        RK_PUT(t1, i, c[i]), RK_PUT(t2, i, sn[i]);
    return n;
#undef RK_PUT
}

/* float16 x with float16 tables (the float path): every product of two float16 values is exact in
 * float (at most 22 significant bits, magnitudes in [2^-48, 2^32]: no underflow, no overflow), so
 * c*a - s*b fused as fmsub(c, a, s*b) is the same single rounding of the same exact value. */
#ifdef RK_HAVE_F_FMA
#define RK_F16_FMA(dt) ((dt) == ROPEKIT_FLOAT16)
#else
#define RK_F16_FMA(dt) 0
#endif

/* One head row (columns [k0, k0 + n) of its pairs) with the token's tables T1/T2. */
RK_INLINE void rotate_row(const char *x, char *y, ropekit_dtype dt, int wide, int nt, int hw,
                          int il, int eo, int64_t h, int64_t k0, int64_t n, const float *t1f,
                          const float *t2f, const double *t1d, const double *t2d) {
    const int64_t es = (int64_t)esz(dt);
    int64_t i = 0;
#define RK_TC(i) (wide ? (float)t1d[i] : t1f[i]) /* a table value as the float it was */
#define RK_TS(i) (wide ? (float)t2d[i] : t2f[i])
#ifdef RK_HAVE_BF16_EO
    if (eo) { /* bfloat16, 2*VL elements per step as even/odd halves */
        const char *xa = x + (il ? 2 * k0 : k0) * es, *xb = x + (k0 + h) * es;
        char *ya = y + (il ? 2 * k0 : k0) * es, *yb = y + (k0 + h) * es;
        if (!il) {
            for (; i + 2 * VL <= n; i += 2 * VL) {
                vf ae, ao, be, bo;
                ld_bf16_eo(xa + i * es, &ae, &ao);
                ld_bf16_eo(xb + i * es, &be, &bo);
                vf r[4]; /* ya even, ya odd, yb even, yb odd */
                for (int q = 0; q < 2; ++q) {
                    vf a = q ? ao : ae, bb = q ? bo : be;
                    const int64_t o = i + q * VL;
                    if (wide) {
                        vd cl = d_ld(t1d + o), ch = d_ld(t1d + o + VL / 2);
                        vd sl = d_ld(t2d + o), sh = d_ld(t2d + o + VL / 2);
                        vd al = d_lo(a), ah = d_hi(a), bl = d_lo(bb), bh = d_hi(bb);
                        r[q] =
                            d_pack(d_fmsub(cl, al, d_mul(sl, bl)), d_fmsub(ch, ah, d_mul(sh, bh)));
                        r[2 + q] =
                            d_pack(d_fmadd(sl, al, d_mul(cl, bl)), d_fmadd(sh, ah, d_mul(ch, bh)));
                    } else {
                        vf cv = f_ld(t1f + o), sv = f_ld(t2f + o);
                        r[q] = f_sub(f_mul(cv, a), f_mul(sv, bb));
                        r[2 + q] = f_add(f_mul(sv, a), f_mul(cv, bb));
                    }
                }
                st_eo(ya + i * es, r[0], r[1], nt, hw);
                st_eo(yb + i * es, r[2], r[3], nt, hw);
            }
            /* fewer than 2*VL columns left (all of them when h < 2*VL: partial rotary such as
             * R = 32 on avx512): the VL-wide loop below, over table columns laid out plainly */
        } else {
            for (; i + VL <= n; i += VL) { /* VL pairs = 2*VL elements */
                vf e, o, ye, yo;
                ld_bf16_eo(xa + 2 * i * es, &e, &o);
                if (wide) {
                    vd cl = d_ld(t1d + i), ch = d_ld(t1d + i + VL / 2);
                    vd sl = d_ld(t2d + i), sh = d_ld(t2d + i + VL / 2);
                    vd el = d_lo(e), eh = d_hi(e), ol = d_lo(o), oh = d_hi(o);
                    ye = d_pack(d_fmsub(cl, el, d_mul(sl, ol)), d_fmsub(ch, eh, d_mul(sh, oh)));
                    yo = d_pack(d_fmadd(sl, el, d_mul(cl, ol)), d_fmadd(sh, eh, d_mul(ch, oh)));
                } else {
                    vf cv = f_ld(t1f + i), sv = f_ld(t2f + i);
                    ye = f_sub(f_mul(cv, e), f_mul(sv, o));
                    yo = f_add(f_mul(sv, e), f_mul(cv, o));
                }
                st_eo(ya + 2 * i * es, ye, yo, nt, hw);
            }
            for (; i < n; ++i)
                pair_scalar(wide, x, y, dt, 2 * (k0 + i), 2 * (k0 + i) + 1, RK_TC(i), RK_TS(i));
            return;
        }
    }
#else
    (void)eo, (void)hw;
#endif
    if (!il) {
        const char *xa = x + k0 * es, *xb = x + (k0 + h) * es;
        char *ya = y + k0 * es, *yb = y + (k0 + h) * es;
        for (; i + VL <= n; i += VL) {
            if (wide) { /* c*a - s*b: both products exact in double */
                vd al, ah, bl, bh;
                ld_d2(xa + i * es, dt, &al, &ah);
                ld_d2(xb + i * es, dt, &bl, &bh);
                vd cl = d_ld(t1d + i), ch = d_ld(t1d + i + VL / 2);
                vd sl = d_ld(t2d + i), sh = d_ld(t2d + i + VL / 2);
                st_d2(ya + i * es, dt, d_fmsub(cl, al, d_mul(sl, bl)),
                      d_fmsub(ch, ah, d_mul(sh, bh)), nt);
                st_d2(yb + i * es, dt, d_fmadd(sl, al, d_mul(cl, bl)),
                      d_fmadd(sh, ah, d_mul(ch, bh)), nt);
            } else if (RK_F16_FMA(dt)) { /* float16: c*a is exact, fusing changes no bit */
#ifdef RK_HAVE_F_FMA
                vf a = ld_t(xa + i * es, dt), bb = ld_t(xb + i * es, dt);
                vf cv = f_ld(t1f + i), sv = f_ld(t2f + i);
                st_16(ya + i * es, dt, f_fmsub(cv, a, f_mul(sv, bb)), nt);
                st_16(yb + i * es, dt, f_fmadd(sv, a, f_mul(cv, bb)), nt);
#endif
            } else { /* bfloat16 products are exact in float but may underflow: no FMA */
                vf a = ld_t(xa + i * es, dt), bb = ld_t(xb + i * es, dt);
                vf cv = f_ld(t1f + i), sv = f_ld(t2f + i);
                st_16(ya + i * es, dt, f_sub(f_mul(cv, a), f_mul(sv, bb)), nt);
                st_16(yb + i * es, dt, f_add(f_mul(sv, a), f_mul(cv, bb)), nt);
            }
        }
        for (; i < n; ++i)
            pair_scalar(wide, x, y, dt, k0 + i, k0 + i + h, RK_TC(i), RK_TS(i));
    } else {
        const int64_t m = 2 * n;
        const char *xa = x + 2 * k0 * es;
        char *ya = y + 2 * k0 * es;
        for (; i + VL <= m; i += VL) {
            if (wide) {
                vd xl, xh;
                ld_d2(xa + i * es, dt, &xl, &xh);
                vd lo = d_fmaddsub(d_ld(t1d + i), d_dupe(xl), d_mul(d_ld(t2d + i), d_dupo(xl)));
                vd hi = d_fmaddsub(d_ld(t1d + i + VL / 2), d_dupe(xh),
                                   d_mul(d_ld(t2d + i + VL / 2), d_dupo(xh)));
                st_d2(ya + i * es, dt, lo, hi, nt);
            } else if (RK_F16_FMA(dt)) {
#ifdef RK_HAVE_F_FMA
                vf xv = ld_t(xa + i * es, dt);
                st_16(ya + i * es, dt,
                      f_fmaddsub(f_ld(t1f + i), f_dupe(xv), f_mul(f_ld(t2f + i), f_dupo(xv))), nt);
#endif
            } else {
                vf xv = ld_t(xa + i * es, dt);
                st_16(ya + i * es, dt,
                      f_addsub(f_mul(f_ld(t1f + i), f_dupe(xv)), f_mul(f_ld(t2f + i), f_dupo(xv))),
                      nt);
            }
        }
        for (i /= 2; i < n; ++i)
            pair_scalar(wide, x, y, dt, 2 * (k0 + i), 2 * (k0 + i) + 1, RK_TC(2 * i), RK_TS(2 * i));
    }
#undef RK_TC
#undef RK_TS
}

/* Lines of n bytes at a for reading (w: and for writing). Addresses as integers: a prefetch past
 * a buffer is harmless, pointer arithmetic past it would not be. */
RK_INLINE void prefetch_row(uintptr_t a, int64_t n, int w) {
    for (int64_t o = 0; o < n; o += 64)
        if (w)
            __builtin_prefetch((const void *)(a + (uintptr_t)o), 1);
        else
            __builtin_prefetch((const void *)(a + (uintptr_t)o), 0);
}

/* The head-major (BNSH) loop's x prefetch: the next head's piece, row by row, one piece ahead,
 * into the L2 (prefetcht1: locality 2) rather than the L1, where the block's laid-out tables
 * (32 KiB float, 64 KiB double for 64 tokens), read again for every head, live: a likely reason,
 * not shown (the guest has no PMU); the same order as plain copies costs nothing
 * (bench/diag_bnsh.c). Xeon EMR, session 9 R1, ropekit_bench_ab one process, +16 B, base =
 * prefetcht0, median of per-round ratios: avx512 bnsh f16 1.014, f32 1.048, no ids bf16 1.022;
 * avx2 1.041, 1.053, 1.018 (rank-3 rows do not take this path). -D for diagnostic builds:
 * RK_HM_PFL the locality (3: prefetcht0), RK_HM_PFD how many pieces ahead (1; 2 was level:
 * 0.976-0.999), RK_HM_NOPF none (the hardware prefetchers alone: 0.74-0.85). */
#ifndef RK_HM_PFL
#define RK_HM_PFL 2
#endif
#ifndef RK_HM_PFD
#define RK_HM_PFD 1
#endif
#ifndef RK_WCONST /* -DRK_WCONST=0 for diagnostic builds: the generic row loop only */
#define RK_WCONST 1
#endif
RK_INLINE void prefetch_row_hm(uintptr_t a, int64_t n) {
#ifndef RK_HM_NOPF
    for (int64_t o = 0; o < n; o += 64)
        __builtin_prefetch((const void *)(a + (uintptr_t)o), 0, RK_HM_PFL);
#else
    (void)a, (void)n;
#endif
}

/* Tables of a block of tokens laid out for their rows (lay_tables), as floats or doubles. */
typedef union rk_tab {
    float f[2][RK_TABE];
    double d[2][RK_TABE];
} __attribute__((aligned(64))) rk_tab;
#ifndef RK_HAVE_NT
typedef struct rk_sw rk_sw; /* no staging window without streaming stores (sw is NULL) */
#endif

/* One head row of rotary_fast (x, y: its first elements; rowb bytes), the same for both row
 * orders: columns [k0, k0 + n) rotated with the token's tables (entries from o on), then tn bytes
 * from byte toff on copied bit for bit (partial rotation out of place: channels [R, H), on the
 * last column chunk; tn = 0: none). sw: the row is computed in the staging window and streamed
 * from it (NULL: straight into y). */
RK_INLINE void rotary_row(const char *x, char *y, int64_t rowb, rk_sw *sw, ropekit_dtype dt,
                          int wide, int nt, int hw, int il, int eo, int64_t h, int64_t k0,
                          int64_t n, int64_t toff, int64_t tn, const rk_tab *t, int64_t o) {
#ifdef RK_HAVE_NT
    if (sw) y = sw_row(sw, y, rowb);
#else
    (void)rowb;
#endif
    rotate_row(x, y, dt, wide, nt, hw, il, eo, h, k0, n, t->f[0] + o, t->f[1] + o, t->d[0] + o,
               t->d[1] + o);
    if (tn) copy_bytes(y + toff, x + toff, tn, 0);
#ifdef RK_HAVE_NT
    if (sw) sw_done(sw, rowb);
#else
    (void)sw;
#endif
}

/* All tokens of a plan whose x and y have innermost stride 1, in blocks of TB tokens of one
 * batch row: the block's cos/sin rows are gathered and laid out for the pairing once (lay_tables),
 * then every head of every token in the block reuses them. The rows are visited in memory order:
 * token by token, heads inside (x (B, S, N*H): a token's heads are adjacent), or head by head,
 * the block's tokens inside (x (B, N, S, H), the layout fused dynamo models run: a head's tokens
 * are adjacent, so each head's block is one contiguous run, where token-major order would touch
 * N rows a head stride apart per token, 2N streams that the hardware prefetchers and the TLB lose).
 * The next rows are prefetched in software, one block's worth (head-major) or one token
 * (token-major) ahead: hardware prefetchers lose track of strided rows (packed QKV) and of new
 * runs. */
RK_INLINE void rotary_fast(const rk_rotary_plan *p, ropekit_dtype dt, ropekit_dtype tdt, int wide,
                           int nt, int hw, int stg) {
    const int64_t h = p->R / 2, es = (int64_t)esz(dt), rowb = p->H * es;
#ifdef RK_HAVE_NT
    rk_sw sw; /* stg: rows computed in the window, streamed from it */
    sw_init(&sw);
#define RK_SWP (stg ? &sw : NULL)
#else
    (void)stg;
#define RK_SWP NULL
#endif
    const int il = p->interleaved, eo = RK_EO(dt);
    float c[RK_CHUNK], sn[RK_CHUNK];
    rk_tab tab;
    const int in_place = p->x == p->y;
    const int copy_tail = p->R < p->H && !in_place; /* channels [R, H) copied bit for bit */
    const int head_major = p->N > 1 && p->xs[2] > p->xs[1];
    unsigned char strm_buf[RK_MAXSTREAM];
    const unsigned char *strm = NULL;
    if (p->rows == RK_ROWS_MROPE && h <= RK_MAXSTREAM) {
        for (int64_t k = 0; k < h; ++k)
            strm_buf[k] = (unsigned char)rk_mrope_stream(p->mrope_section, p->mrope_layout, k);
        strm = strm_buf;
    }
    /* entries per token per table: at most 2 * RK_CHUNK (interleaved, not eo) */
    const int64_t n0 = h < RK_CHUNK ? h : RK_CHUNK, m0 = il && !eo ? 2 * n0 : n0;
    int64_t TB = m0 > 0 ? RK_TABE / m0 : 1;
    if (TB > RK_TB_MAX) TB = RK_TB_MAX;
    if (TB < 1) TB = 1;
    if (!head_major) TB = 1; /* nothing to share: every token's heads follow it */
    /* the plan's addresses and byte strides in locals: the row stores (through char pointers)
     * would otherwise make the compiler reload them from the plan for every row */
    const char *const X = p->x;
    char *const Y = p->y;
    const int64_t xb = p->xs[0] * es, xt = p->xs[1] * es, xh = p->xs[2] * es;
    const int64_t yb = p->ys[0] * es, yt = p->ys[1] * es, yh = p->ys[2] * es;
    const int64_t N = p->N, S = p->S, B = p->B, toff = p->R * es;
    const int64_t tail = copy_tail ? (p->H - p->R) * es : 0;
#define RK_XROW(b, s, hd) (X + (b)*xb + (s)*xt + (hd)*xh)
#define RK_YROW(b, s, hd) (Y + (b)*yb + (s)*yt + (hd)*yh)
#define RK_XADDR(b, s, hd) ((uintptr_t)X + (uintptr_t)((b)*xb + (s)*xt + (hd)*xh))
#define RK_YADDR(b, s, hd) ((uintptr_t)Y + (uintptr_t)((b)*yb + (s)*yt + (hd)*yh))
    const int pfy = !in_place && !nt && !stg; /* a streamed row is not read first */
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s0 = 0; s0 < S; s0 += TB) {
            const int64_t nb = S - s0 < TB ? S - s0 : TB;
            for (int64_t k0 = 0; k0 < h; k0 += RK_CHUNK) {
                const int64_t n = h - k0 < RK_CHUNK ? h - k0 : RK_CHUNK;
                const int64_t tn = k0 + n == h ? tail : 0; /* the last chunk copies the tail */
                int64_t m = 0;
                for (int64_t j = 0; j < nb; ++j) {
                    gather(p, tdt, strm, b, s0 + j, k0, n, c, sn);
                    m = lay_tables(il, eo, wide, n, c, sn, tab.f[0] + j * m0, tab.f[1] + j * m0,
                                   tab.d[0] + j * m0, tab.d[1] + j * m0);
                }
                (void)m;
                /* Two loops (as in 8c39a0b), not one with the order as a variable: with the
                 * merged loop of e6d5e33, rows stored the same way ran 0.82-0.96x of 8c39a0b on
                 * the Xeon (Phi-2 16-bit rows, 2026-12-01). */
                /* The rows of a block in memory order (RK_HM_HEADS: head-major, RK_TM_HEADS:
                 * token-major), instantiated with the rotated width as a constant for the
                 * common ones (R = 128, 64, 32: rotate_row's loops, offsets and tails fold, as
                 * rotary_tokens' RK_TOK_HEADS) and once for any width. Dev VM (Xeon EMR guest),
                 * one-process A/B against the generic loop, median of per-round ratios: in the
                 * L2 (64 tokens) BNSH f16 / f32 / bf16 1.09-1.17 / 1.12 / 1.47 (avx2 f16 1.21,
                 * bf16 1.12), MRoPE f16 1.21; warm rank 3 (ROPEKIT_BENCH_HOT) Llama f16 / f32
                 * 1.06 / 1.14 (avx2 1.25 / 1.24), Qwen3 f16 1.08, Phi-2 f16 1.08; cold avx512
                 * rows level (0.97-1.00: memory-bound), cold avx2 bfloat16 rows 1.06-1.08. */
#define RK_HM_HEADS(hh, kk, nn, swp, tnn)                                                          \
    for (int64_t hd = 0; hd < N; ++hd)                                                             \
        for (int64_t j = 0; j < nb; ++j) {                                                         \
            const int64_t s = s0 + j;                                                              \
            if ((kk) == 0) { /* the row one block ahead: the next head's */                        \
                int64_t bn = b, sn_ = s, hn = hd + RK_HM_PFD;                                      \
                while (hn >= N) hn -= N, sn_ += TB;                                                \
                if (sn_ >= S) sn_ -= S, ++bn;                                                      \
                if (bn < B) {                                                                      \
                    prefetch_row_hm(RK_XADDR(bn, sn_, hn), rowb);                                  \
                    if (pfy) prefetch_row(RK_YADDR(bn, sn_, hn), rowb, 1);                         \
                }                                                                                  \
            }                                                                                      \
            rotary_row(RK_XROW(b, s, hd), RK_YROW(b, s, hd), rowb, swp, dt, wide, nt, hw, il, eo, \
                       hh, kk, nn, toff, tnn, &tab, j * m0);                                       \
        }
#define RK_TM_HEADS(hh, kk, nn, swp, tnn)                                                          \
    for (int64_t j = 0; j < nb; ++j) {                                                             \
        const int64_t s = s0 + j;                                                                  \
        int64_t bn = s + 1 < S ? b : b + 1, sn_ = s + 1 < S ? s + 1 : 0;                           \
        const int pf = bn < B && (kk) == 0;                                                        \
        for (int64_t hd = 0; hd < N; ++hd) {                                                       \
            if (pf) { /* the next token's row of this head */                                     \
                prefetch_row(RK_XADDR(bn, sn_, hd), rowb, 0);                                      \
                if (pfy) prefetch_row(RK_YADDR(bn, sn_, hd), rowb, 1);                             \
            }                                                                                      \
            rotary_row(RK_XROW(b, s, hd), RK_YROW(b, s, hd), rowb, swp, dt, wide, nt, hw, il, eo, \
                       hh, kk, nn, toff, tnn, &tab, j * m0);                                       \
        }                                                                                          \
    }
#define RK_BY_WIDTH(M)                                                                             \
    if (RK_WCONST && h == 64) {                                                                    \
        M(64, 0, 64, RK_SWP, tn)                                                                   \
    } else if (RK_WCONST && h == 32) {                                                             \
        M(32, 0, 32, RK_SWP, tn)                                                                   \
    } else if (RK_WCONST && h == 16) {                                                             \
        M(16, 0, 16, RK_SWP, tn)                                                                   \
    } else {                                                                                       \
        M(h, k0, n, RK_SWP, tn)                                                                    \
    }
                if (head_major) {
                    RK_BY_WIDTH(RK_HM_HEADS)
                } else {
                    RK_BY_WIDTH(RK_TM_HEADS)
                }
#undef RK_BY_WIDTH
#undef RK_HM_HEADS
#undef RK_TM_HEADS
            }
        }
#undef RK_XROW
#undef RK_YROW
#undef RK_XADDR
#undef RK_YADDR
#undef RK_SWP
#ifdef RK_HAVE_NT
    if (stg) sw_end(&sw);
#endif
    if (nt || stg) st_fence();
}

/* ---- calls that write less than the streaming threshold, token by token ------------------
 * A decode token (32 heads x 128) is about 2000 cycles of arithmetic: the per-call work before
 * the first row matters. rotary_tokens is rotary_fast for plans whose rows go token by token
 * (token-major, TB = 1), one gather chunk (h <= RK_CHUNK), contiguous unscaled table rows, normal
 * stores: the token's cos/sin rows are laid out for rotate_row straight from the table (no float
 * staging row and no per-column loop where the layout allows: lay_row), in a frame of 8 KiB, and
 * the next token's table rows are prefetched with its x rows. The same rotate_row: the same bits. */
typedef union rk_tab1 {
    float f[2][2 * RK_CHUNK];
    double d[2][2 * RK_CHUNK];
} __attribute__((aligned(64))) rk_tab1;

/* One token's table rows cp/sp (n columns, table type tdt) laid out as lay_tables lays them. */
RK_INLINE void lay_row(const char *cp, const char *sp, ropekit_dtype tdt, int inverse, int il,
                       int eo, int wide, int64_t n, rk_tab1 *t) {
    const int64_t tes = (int64_t)esz(tdt);
    if ((il && !eo) || (eo && !il && wide)) { /* pair-interleaved layouts: by column */
        float c[RK_CHUNK], sn[RK_CHUNK];
        gather_run(cp, sp, tdt, inverse, 0, n, c, sn);
        lay_tables(il, eo, wide, n, c, sn, t->f[0], t->f[1], t->d[0], t->d[1]);
        return;
    }
    const vf neg = f_set1(inverse ? -0.0f : 0.0f); /* sign flip by xor, as C's unary - */
    int64_t i = 0;
    if (wide) { /* wide: the tables are float32 (a 16-bit x takes T or float32 tables) */
        const float *cf = (const float *)cp, *sf = (const float *)sp;
        double *t1 = t->d[0], *t2 = t->d[1];
        if (!inverse)
            for (; i + VL <= n; i += VL) {
                d_st(t1 + i, d_ldf(cf + i)), d_st(t1 + i + VL / 2, d_ldf(cf + i + VL / 2));
                d_st(t2 + i, d_ldf(sf + i)), d_st(t2 + i + VL / 2, d_ldf(sf + i + VL / 2));
            }
        else
            for (; i + VL <= n; i += VL) {
                vf sv = f_xor(f_ld(sf + i), neg);
                d_st(t1 + i, d_ldf(cf + i)), d_st(t1 + i + VL / 2, d_ldf(cf + i + VL / 2));
                d_st(t2 + i, d_lo(sv)), d_st(t2 + i + VL / 2, d_hi(sv));
            }
        for (; i < n; ++i) {
            float sv = sf[i];
            t1[i] = cf[i], t2[i] = inverse ? -sv : sv;
        }
        return;
    }
    float *t1 = t->f[0], *t2 = t->f[1];
#ifdef RK_HAVE_BF16_EO
    if (eo && !il) /* bfloat16 tables: each group of 2*VL columns as its even, then its odd */
        for (; i + 2 * VL <= n; i += 2 * VL) {
            vf e, o;
            ld_bf16_eo(cp + i * tes, &e, &o);
            f_st(t1 + i, e), f_st(t1 + i + VL, o);
            ld_bf16_eo(sp + i * tes, &e, &o);
            f_st(t2 + i, f_xor(e, neg)), f_st(t2 + i + VL, f_xor(o, neg));
        }
#endif
    for (; i + VL <= n; i += VL) {
        f_st(t1 + i, ld_t(cp + i * tes, tdt));
        f_st(t2 + i, f_xor(ld_t(sp + i * tes, tdt), neg));
    }
    for (; i < n; ++i) {
        float sv = rk_load(sp, tdt, i);
        t1[i] = rk_load(cp, tdt, i), t2[i] = inverse ? -sv : sv;
    }
}

/* Whether rotary_tokens runs the plan (the output is below the streaming threshold). */
static int use_tokens(const rk_rotary_plan *p) {
#ifdef RK_DIAG_NO_TOK /* diagnostic builds: every call through rotary_fast (its in-L2 speed) */
    if (p) return 0;
#endif
    return !(p->N > 1 && p->xs[2] > p->xs[1]) && p->rows != RK_ROWS_MROPE && p->cos_cs == 1 &&
           p->sin_cs == 1 && !p->apply_scale && p->R / 2 <= RK_CHUNK;
}

#ifndef RK_TOK_PF /* -D for diagnostic builds: tokens ahead of the software prefetch (0: none) */
#define RK_TOK_PF 1
#endif
/* The next token's x and y rows are prefetched only where they do not continue the rows just
 * done (packed QKV, strided views): a contiguous run of rows is what the hardware prefetchers
 * follow, and prefetching it too was slower (decode B = 64 x 40 heads float32, avx2, one-process
 * A/B, min: benchmark Xeon, R1 of session 9, 130 us with x and y prefetched, 110 us with only
 * the table rows, 107 with none; dev VM 121 / 98 us). The
 * table rows (at random positions) always are. Diagnostic builds: -DRK_TOK_PFX / -DRK_TOK_PFY =
 * 0 never, 1 always, 2 (default) where not contiguous. */
#ifndef RK_TOK_PFX
#define RK_TOK_PFX 2
#endif
#ifndef RK_TOK_PFY
#define RK_TOK_PFY 2
#endif
RK_INLINE void rotary_tokens(const rk_rotary_plan *p, ropekit_dtype dt, ropekit_dtype tdt, int wide,
                             int hw) {
    const int64_t h = p->R / 2, es = (int64_t)esz(dt), tes = (int64_t)esz(tdt), rowb = p->H * es;
    const int il = p->interleaved, eo = RK_EO(dt), inv = p->inverse;
    rk_tab1 tab;
    const char *const X = p->x;
    char *const Y = p->y;
    const int in_place = X == Y;
    const int64_t tail = p->R < p->H && !in_place ? (p->H - p->R) * es : 0, toff = p->R * es;
    const int64_t xb = p->xs[0] * es, xt = p->xs[1] * es, xh = p->xs[2] * es;
    const int64_t yb = p->ys[0] * es, yt = p->ys[1] * es, yh = p->ys[2] * es;
    const int64_t N = p->N, S = p->S, B = p->B;
    const int64_t ct = h * tes; /* bytes of one table row */
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) {
            const char *cp = p->cos + rk_table_offset(p, 0, b, s, 0) * tes;
            const char *sp = p->sin + rk_table_offset(p, 1, b, s, 0) * tes;
            lay_row(cp, sp, tdt, inv, il, eo, wide, h, &tab);
            int64_t bn = b, sn_ = s + RK_TOK_PF;
            while (sn_ >= S && bn < B) sn_ -= S, ++bn;
            const int pf = RK_TOK_PF > 0 && bn < B;
            uintptr_t xn = 0, yn = 0;
            if (pf) { /* the next token's table rows, and its rows head by head below */
                prefetch_row((uintptr_t)p->cos + (uintptr_t)(rk_table_offset(p, 0, bn, sn_, 0) * tes),
                             ct, 0);
                prefetch_row((uintptr_t)p->sin + (uintptr_t)(rk_table_offset(p, 1, bn, sn_, 0) * tes),
                             ct, 0);
                xn = (uintptr_t)X + (uintptr_t)(bn * xb + sn_ * xt);
                yn = (uintptr_t)Y + (uintptr_t)(bn * yb + sn_ * yt);
            }
            const char *xr = X + b * xb + s * xt;
            char *yr = Y + b * yb + s * yt;
            const uintptr_t run = (uintptr_t)(N * rowb); /* a token's rows, when adjacent */
            const int pfx = pf && (RK_TOK_PFX == 1 ||
                                   (RK_TOK_PFX == 2 && (xh != rowb || xn != (uintptr_t)xr + run)));
            const int pfy = pf && !in_place &&
                            (RK_TOK_PFY == 1 ||
                             (RK_TOK_PFY == 2 && (yh != rowb || yn != (uintptr_t)yr + run)));
            /* rotary width 128 (most models) with the width as a constant: the row loop's
             * bounds and offsets fold (a decode token's kernel, avx2, Xeon dev VM: float32
             * 842 -> 767 ns, float16 449 -> 381 ns, min of 7000 rounds) */
#define RK_TOK_HEADS(hh)                                                                           \
    for (int64_t hd = 0; hd < N; ++hd) {                                                           \
        if (pfx) prefetch_row(xn + (uintptr_t)(hd * xh), rowb, 0);                                 \
        if (pfy) prefetch_row(yn + (uintptr_t)(hd * yh), rowb, 1);                                 \
        rotate_row(xr + hd * xh, yr + hd * yh, dt, wide, 0, hw, il, eo, hh, 0, hh, tab.f[0],       \
                   tab.f[1], tab.d[0], tab.d[1]);                                                  \
        if (tail) copy_bytes(yr + hd * yh + toff, xr + hd * xh + toff, tail, 0);                   \
    }
            if (h == 64) {
                RK_TOK_HEADS(64)
            } else {
                RK_TOK_HEADS(h)
            }
#undef RK_TOK_HEADS
        }
}

#define RK_TOKENS_BF16(hw)                                                                         \
    if (tf)                                                                                        \
        rotary_tokens(p, ROPEKIT_BFLOAT16, ROPEKIT_FLOAT32, 1, hw);                                \
    else                                                                                           \
        rotary_tokens(p, ROPEKIT_BFLOAT16, ROPEKIT_BFLOAT16, 0, hw);
static __attribute__((noinline)) void RK_SUFFIX(rotary_tok)(const rk_rotary_plan *p) {
    const int tf = p->table_dtype == ROPEKIT_FLOAT32;
    switch (p->dtype) {
    case ROPEKIT_FLOAT32: rotary_tokens(p, ROPEKIT_FLOAT32, ROPEKIT_FLOAT32, 1, 0); break;
    case ROPEKIT_FLOAT16:
        if (tf)
            rotary_tokens(p, ROPEKIT_FLOAT16, ROPEKIT_FLOAT32, 1, 0);
        else
            rotary_tokens(p, ROPEKIT_FLOAT16, ROPEKIT_FLOAT16, 0, 0);
        break;
    default:
        if (RK_EO(ROPEKIT_BFLOAT16) && RK_BF16_HW_OK()) {
            RK_TOKENS_BF16(1)
        } else {
            RK_TOKENS_BF16(0)
        }
        break;
    }
}

/* Streaming stores only where they write whole 64-byte lines and nothing else writes into those
 * lines (a line half streamed, half stored normally is far slower than either): the output is
 * 64-byte aligned, every head is rotated whole (R = H) by vector stores only (no scalar tail),
 * and heads, tokens and batches start on line boundaries. */
static int use_streaming(const rk_rotary_plan *p) {
#ifdef RK_DIAG_NO_NT /* diagnostic builds: normal stores only */
    return 0;
#endif
    const int64_t es = (int64_t)esz(p->dtype), h = p->R / 2;
    if (p->x == p->y || !large_output(p->B * p->S * p->N * p->H * es)) return 0;
    if (p->R != p->H || (p->interleaved ? 2 * h : h) % VL != 0 || (p->H * es) % 64) return 0;
    /* even/odd bfloat16 rows store 2*VL elements at a time, at offsets that are multiples of it */
    if (RK_EO(p->dtype) && (p->interleaved ? h % VL : h % (2 * VL)) != 0) return 0;
    if ((uintptr_t)p->y % 64 || (p->ys[0] * es) % 64 || (p->ys[1] * es) % 64 ||
        (p->ys[2] * es) % 64)
        return 0;
    return 1;
}

/* Streaming stores through the staging window (rk_sw) where use_streaming's direct ones cannot be
 * used: large, out of place, rows of at most RK_STAGE bytes rotated in one gather chunk. */
static int use_staging(const rk_rotary_plan *p) {
#if defined(RK_HAVE_NT) && !defined(RK_DIAG_NO_NT)
    const int64_t es = (int64_t)esz(p->dtype);
    return p->x != p->y && p->H * es <= RK_STAGE && p->R / 2 <= RK_CHUNK &&
           large_output(p->B * p->S * p->N * p->H * es);
#else
    (void)p;
    return 0;
#endif
}

/* bfloat16 rows: hw = 1 rounds with the CPU's conversion instruction where the vocabulary has
 * one (st_eo; avx512 with AVX512_BF16: bnsh bf16 rows 4.9-5.4 -> 4.1 ms on the Xeon, neutral on
 * the AMD dev VM) */
#define RK_ROTARY_BF16(nt, hw, stg)                                                                \
    if (tf)                                                                                        \
        rotary_fast(p, ROPEKIT_BFLOAT16, ROPEKIT_FLOAT32, 1, nt, hw, stg);                         \
    else                                                                                           \
        rotary_fast(p, ROPEKIT_BFLOAT16, ROPEKIT_BFLOAT16, 0, nt, hw, stg);
#define RK_ROTARY_CASES(nt, stg)                                                                   \
    switch (p->dtype) {                                                                            \
    case ROPEKIT_FLOAT32: rotary_fast(p, ROPEKIT_FLOAT32, ROPEKIT_FLOAT32, 1, nt, 0, stg); break;  \
    case ROPEKIT_FLOAT16:                                                                          \
        if (tf)                                                                                    \
            rotary_fast(p, ROPEKIT_FLOAT16, ROPEKIT_FLOAT32, 1, nt, 0, stg);                       \
        else                                                                                       \
            rotary_fast(p, ROPEKIT_FLOAT16, ROPEKIT_FLOAT16, 0, nt, 0, stg);                       \
        break;                                                                                     \
    default:                                                                                       \
        if (RK_EO(ROPEKIT_BFLOAT16) && RK_BF16_HW_OK()) {                                          \
            RK_ROTARY_BF16(nt, 1, stg)                                                             \
        } else {                                                                                   \
            RK_ROTARY_BF16(nt, 0, stg)                                                             \
        }                                                                                          \
        break;                                                                                     \
    }

/* The staged kernels in a function of their own (not inlined beside the direct ones): the direct
 * kernels then compile as they did before the window existed (their frame holds no window). */
static __attribute__((noinline)) void RK_SUFFIX(rotary_staged)(const rk_rotary_plan *p) {
    const int tf = p->table_dtype == ROPEKIT_FLOAT32;
    RK_ROTARY_CASES(0, 1)
}
/* The direct kernels in two functions of their own too (normal stores; streaming stores): inlined
 * into one frame, their instances' locals (tables of 64-token blocks) took 8.6 MB of stack in the
 * ASan build (no stack-slot sharing there), over the 8 MiB default; one call more per large call. */
static __attribute__((noinline)) void RK_SUFFIX(rotary_plain)(const rk_rotary_plan *p) {
    const int tf = p->table_dtype == ROPEKIT_FLOAT32;
    RK_ROTARY_CASES(0, 0)
}
static __attribute__((noinline)) void RK_SUFFIX(rotary_streamed)(const rk_rotary_plan *p) {
    const int tf = p->table_dtype == ROPEKIT_FLOAT32;
    RK_ROTARY_CASES(1, 0)
}
static void RK_SUFFIX(rotary)(const rk_rotary_plan *p) {
    if (p->xs[3] != 1 || p->ys[3] != 1) {
        rk_ref_rotary(p);
        return;
    }
    if (!large_output(p->B * p->S * p->N * p->H * (int64_t)esz(p->dtype))) {
        if (use_tokens(p)) {
            RK_SUFFIX(rotary_tok)(p);
            return;
        }
        RK_SUFFIX(rotary_plain)(p);
    } else if (use_streaming(p)) {
        RK_SUFFIX(rotary_streamed)(p);
    } else if (use_staging(p)) {
        RK_SUFFIX(rotary_staged)(p);
    } else {
        RK_SUFFIX(rotary_plain)(p);
    }
}

/* ================================= QKNorm / regroup helpers ================================= */

/* bfloat16 stores and roundings of the QKNorm kernel: hw = 1 uses the CPU's conversion
 * instruction where the vocabulary has one (RK_HAVE_BF16_HW: st_bf16_hw, st_bf16_hw_nt,
 * rt_bf16_hw, same bits as st_bf16 / rt_bf16), hw = 0 the integer rounding. */
RK_INLINE void st_q(void *p, ropekit_dtype dt, int hw, vf v, int nt) {
#ifdef RK_HAVE_BF16_HW
    if (hw && dt == ROPEKIT_BFLOAT16) { /* (avx512 only: nt16_* there too) */
        if (nt == 2)
            nt16_bf16_hw(p, v);
        else if (nt)
            st_bf16_hw_nt(p, v);
        else
            st_bf16_hw(p, v);
        return;
    }
#else
    (void)hw;
#endif
#ifdef RK_HAVE_NT16
    if (dt == ROPEKIT_FLOAT32 && nt == 2) {
        nt16_f32(p, v);
        return;
    }
#endif
    if (dt == ROPEKIT_FLOAT32 && nt)
        f_st_nt((float *)p, v);
    else
        st_16(p, dt, v, nt); /* st_t when !nt (float32 included) */
}
RK_INLINE vf rt_q(vf v, ropekit_dtype dt, int hw) {
#ifdef RK_HAVE_BF16_HW
    if (hw && dt == ROPEKIT_BFLOAT16) return rt_bf16_hw(v);
#else
    (void)hw;
#endif
    return rt_t(v, dt);
}

/* Sums of squares of G rows of n contiguous values (row g at x + g * stride bytes), each in
 * ref.c's sixteen-lane double order. Each row's lanes are dependency chains of n/16 additions;
 * interleaving G rows lets the chains of different rows overlap (one row alone would wait on
 * the add latency). The squares are exact in double (at most 2 x 24 significant bits), so a fused
 * multiply-add gives the bits of ref.c's multiply then add. */
#define RK_QPF 4   /* query rows are prefetched this many heads ahead */
#define RK_QTW 256 /* rope_dim at most, for the tables widened per token in qknorm_fast */
#define RK_QG (VL >= 8 ? VL / 4 : 1) /* rows at a time: 8 accumulator vectors in flight */
/* VL values at p widened to two double vectors for the sums of squares */
RK_INLINE void ld_sq(const char *p, ropekit_dtype dt, vd *lo, vd *hi) {
#ifdef RK_HAVE_D_LD_F16
    if (dt == ROPEKIT_FLOAT16) {
        *lo = d_ld_f16(p), *hi = d_ld_f16(p + VL);
        return;
    }
#endif
    vf f = ld_t(p, dt);
    *lo = d_lo(f), *hi = d_hi(f);
}

RK_INLINE void sum_sq_rows(const char *x, int64_t stride, ropekit_dtype dt, int64_t n, int G,
                           float *ss) {
    const int64_t es = (int64_t)esz(dt);
    vd acc[RK_QG][32 / VL];
    for (int g = 0; g < G; ++g)
        for (int j = 0; j < 32 / VL; ++j)
            acc[g][j] = d_zero();
    int64_t c = 0;
#ifdef RK_HAVE_BF16_PAIRS
    /* bfloat16, 32 channels at a time, even and odd channels apart (no widening shuffle):
     * acc[g][0] holds lanes 0, 2, .. 14, acc[g][1] lanes 1, 3, .. 15, put back in order after */
    if (dt == ROPEKIT_BFLOAT16 && n >= 32) {
        for (; c + 32 <= n; c += 32)
            for (int g = 0; g < G; ++g)
                for (int v = 0; v < 32 / (2 * VL); ++v) {
                    vf e, o;
                    ld_bf16_eo(x + g * stride + (c + 2 * v * VL) * es, &e, &o);
                    vd el = d_lo(e), ol = d_lo(o), eh = d_hi(e), oh = d_hi(o);
                    if (VL == 16) { /* acc[g][0]: lanes 0, 2, .. 14, acc[g][1]: 1, 3, .. 15 */
                        acc[g][0] = d_fmadd(el, el, acc[g][0]);
                        acc[g][1] = d_fmadd(ol, ol, acc[g][1]);
                        acc[g][0] = d_fmadd(eh, eh, acc[g][0]);
                        acc[g][1] = d_fmadd(oh, oh, acc[g][1]);
                    } else { /* VL 8: acc[g][0 / 1]: lanes 0, 2, 4, 6 / 1, 3, 5, 7; [2 / 3]: +8 */
                        acc[g][0] = d_fmadd(el, el, acc[g][0]);
                        acc[g][1] = d_fmadd(ol, ol, acc[g][1]);
                        acc[g][2 % (32 / VL)] = d_fmadd(eh, eh, acc[g][2 % (32 / VL)]);
                        acc[g][3 % (32 / VL)] = d_fmadd(oh, oh, acc[g][3 % (32 / VL)]);
                    }
                }
        for (int g = 0; g < G; ++g)
            for (int j = 0; j < 32 / VL; j += 2)
                d_unpair(&acc[g][j], &acc[g][j + 1]);
    }
#endif
    for (; c + 16 <= n; c += 16)
        for (int g = 0; g < G; ++g)
            for (int v = 0; v < 16 / VL; ++v) {
                vd lo, hi;
                ld_sq(x + g * stride + (c + v * VL) * es, dt, &lo, &hi);
                if (G == 1) { /* one chain per accumulator: the add's shorter latency */
                    acc[g][2 * v] = d_add(acc[g][2 * v], d_mul(lo, lo));
                    acc[g][2 * v + 1] = d_add(acc[g][2 * v + 1], d_mul(hi, hi));
                } else {
                    acc[g][2 * v] = d_fmadd(lo, lo, acc[g][2 * v]);
                    acc[g][2 * v + 1] = d_fmadd(hi, hi, acc[g][2 * v + 1]);
                }
            }
    for (int g = 0; g < G; ++g) {
        if (c == n) {
            ss[g] = (float)d_reduce16(acc[g]);
            continue;
        }
        const char *xg = x + g * stride;
        double lane[16];
        for (int j = 0; j < 32 / VL; ++j)
            d_st(lane + j * (VL / 2), acc[g][j]);
        for (int64_t k = c; k < n; ++k) {
            double v = rk_load(xg, dt, k);
            lane[k % 16] += v * v;
        }
        for (int width = 8; width >= 1; width /= 2)
            for (int j = 0; j < width; ++j)
                lane[j] += lane[j + width];
        ss[g] = (float)lane[0];
    }
}

/* A token's rd cos/sin widened to doubles once for all its heads (rd a multiple of VL). */
RK_INLINE void widen_tables(double *cw, double *sw, const float *cs, const float *sn, int64_t rd) {
    for (int64_t t = 0; t < rd; t += VL / 2) {
        d_st(cw + t, d_ldf(cs + t));
        d_st(sw + t, d_ldf(sn + t));
    }
}
/* VL rounded values xv rotated with widened tables cw/sw: tail_rotate's operations (inverse:
 * the regroup's sign), without its widening of cos/sin. */
RK_INLINE vf rot_wide(vf xv, const double *cw, const double *sw, int inverse) {
    vd r[2];
    for (int hh = 0; hh < 2; ++hh) {
        vd xd = hh ? d_hi(xv) : d_lo(xv);
        vd P = d_mul(xd, d_ld(cw + hh * (VL / 2))), Q = d_mul(d_swap(xd), d_ld(sw + hh * (VL / 2)));
        r[hh] = inverse ? d_subadd_neg(P, Q) : d_addsub(P, Q);
    }
    return d_pack(r[0], r[1]);
}

/* The pre-interleaved tail rotation of `rd` values v (already rounded, as floats in vbuf) with
 * float tables cs/sn, stored to y as dt. inverse: the regroup's sign. ref.c: rotate_tail_pair. */
RK_INLINE void tail_rotate(const float *v, const float *cs, const float *sn, int64_t rd,
                           int inverse, char *y, ropekit_dtype dt, int nt, int hw) {
    const int64_t es = (int64_t)esz(dt);
    int64_t t = 0;
    for (; t + VL <= rd; t += VL) {
        vf xv = f_ld(v + t), cv = f_ld(cs + t), sv = f_ld(sn + t);
        vd r[2];
        for (int hh = 0; hh < 2; ++hh) {
            vd xd = hh ? d_hi(xv) : d_lo(xv), cd = hh ? d_hi(cv) : d_lo(cv);
            vd sd = hh ? d_hi(sv) : d_lo(sv);
            vd P = d_mul(xd, cd), Q = d_mul(d_swap(xd), sd);
            r[hh] = inverse ? d_subadd_neg(P, Q) : d_addsub(P, Q);
        }
        st_q(y + t * es, dt, hw, d_pack(r[0], r[1]), nt);
    }
    for (; t < rd; t += 2) {
        double sg = inverse ? -1.0 : 1.0;
        float x0 = v[t], x1 = v[t + 1];
        float y0 = (float)((double)x0 * cs[t] - sg * ((double)x1 * sn[t]));
        float y1 = (float)((double)x1 * cs[t + 1] + sg * ((double)x0 * sn[t + 1]));
        rk_store(y, dt, t, y0);
        rk_store(y, dt, t + 1, y1);
    }
}

/* ================================== QKNormRotaryEmbedding ================================== */

#define RK_MAXROPE 1024

RK_INLINE float fp8_block_scale(float amax) {
    if (!(amax > 0.0f)) return 1.0f;
    float ratio = fmaxf(amax / 448.0f, 1e-30f);
    return exp2f(ceilf(logf(ratio) / 0.69314718f));
}

/* One query head, its sum of squares given: q[c] = Rt(q[c] * r), then the tail rotation. */
RK_INLINE void qknorm_head(const rk_qknorm_plan *p, ropekit_dtype dt, int nt, int hw, const char *x,
                           char *y, float ss, const float *cs, const float *sn, float *v,
                           const double *cw, const double *sw) {
    const int64_t es = (int64_t)esz(dt), hd = p->head_dim, nope = p->nope, rd = p->rope_dim;
    vf rv = rt_q(f_set1(1.0f / sqrtf(ss / (float)hd + p->epsilon)), dt, hw);
    float r = f_lane0(rv); /* rounded to T (vector conversions: same bits) */
    int64_t c = 0;
#define RK_X(c) ld_t(x + (c)*es, dt)
#ifdef RK_HAVE_F16_HW
    /* float16 x and r: Rt(x * r) is one float16 multiplication (RK_HAVE_F16_HW) */
    const int h16 = hw && dt == ROPEKIT_FLOAT16;
    const vh rh = h16 ? h_set1(rv) : (vh){0};
    if (h16)
        for (; c + 2 * VL <= nope; c += 2 * VL)
            h_mul_st(y + c * es, x + c * es, rh, nt);
#define RK_XR(c) (h16 ? h_mul_ld(x + (c)*es, rh) : rt_q(f_mul(RK_X(c), rv), dt, hw))
#else
#define RK_XR(c) rt_q(f_mul(RK_X(c), rv), dt, hw)
#endif
#ifdef RK_HAVE_BF16_EO
    if (dt == ROPEKIT_BFLOAT16) /* 2*VL at a time, even and odd channels apart (st_eo) */
        for (; c + 2 * VL <= nope; c += 2 * VL) {
            vf e, o;
            ld_bf16_eo(x + c * es, &e, &o);
            st_eo(y + c * es, f_mul(e, rv), f_mul(o, rv), nt, hw);
        }
#endif
    for (; c + 2 * VL <= nope; c += 2 * VL) {
        vf a = f_mul(RK_X(c), rv), b = f_mul(RK_X(c + VL), rv);
        st_q(y + c * es, dt, hw, a, nt);
        st_q(y + (c + VL) * es, dt, hw, b, nt);
    }
    for (; c + VL <= nope; c += VL)
        st_q(y + c * es, dt, hw, f_mul(RK_X(c), rv), nt);
    for (; c < nope; ++c)
        rk_store(y, dt, c, rk_load(x, dt, c) * r);
    if (rd == 0) return;
    int64_t t = 0;
    if (cw) { /* the token's tables as doubles (rd a multiple of VL): tail_rotate's operations,
               * on the rounded values in registers, without the widening of cos/sin per head */
        for (; t < rd; t += VL)
            st_q(y + (nope + t) * es, dt, hw, rot_wide(RK_XR(nope + t), cw + t, sw + t, 0), nt);
        return;
    }
    for (; t + VL <= rd; t += VL)
        f_st(v + t, RK_XR(nope + t));
    for (; t < rd; ++t)
        v[t] = rk_round_to(dt, rk_load(x, dt, nope + t) * r);
#undef RK_X
#undef RK_XR
    tail_rotate(v, cs, sn, rd, 0, y + nope * es, dt, nt, hw);
}

/* nt: query outputs written with streaming stores (see qknorm_streaming); stg: through staged
 * rows (rk_sw); kv_out never is. */
RK_INLINE void qknorm_fast(const rk_qknorm_plan *p, ropekit_dtype dt, int nt, int hw, int stg) {
    const int64_t es = (int64_t)esz(dt), hd = p->head_dim, nope = p->nope, rd = p->rope_dim;
#ifdef RK_HAVE_NT
    rk_sw qw;
    sw_init(&qw);
#else
    (void)stg;
#endif
    const int64_t hs = p->qs[2] * es, hos = p->qos[2] * es;
    float v[RK_MAXROPE] __attribute__((aligned(64)));
    double cwb[RK_QTW] __attribute__((aligned(64))), swb[RK_QTW] __attribute__((aligned(64)));
    const int tw = rd > 0 && rd % VL == 0 && rd <= RK_QTW;
    /* 16-bit rows in cache: RK_QG heads at a time (compute bound: the rows' add chains
     * overlap). Large calls (streaming stores) and float32 rows: one at a time; they wait on
     * memory, and the prefetches of one row at a time keep it busier than bursts for RK_QG rows
     * (Xeon EMR, dsv4 S=256, one thread: avx512 f16 +6%, bf16 +15%, avx2 f16 +2%, bf16 +8%). */
    const int G = dt == ROPEKIT_FLOAT32 || nt ? 1 : RK_QG;
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t s = 0; s < p->S; ++s) {
            const float *cs = rd ? p->cos + b * p->cos_s[0] + s * p->cos_s[1] : NULL;
            const float *sn = rd ? p->sin + b * p->sin_s[0] + s * p->sin_s[1] : NULL;
            const char *xt = p->q + (b * p->qs[0] + s * p->qs[1]) * es;
            char *yt = p->q_out + (b * p->qos[0] + s * p->qos[1]) * es;
            if (tw) widen_tables(cwb, swb, cs, sn, rd); /* once for all the token's heads */
            /* The rows RK_QPF heads ahead (in this token or the next) are prefetched: the
             * hardware prefetchers alone leave this loop waiting on memory. Addresses as
             * integers: a prefetch past the buffer is harmless, pointer arithmetic would not be. */
            int64_t bn = s + 1 < p->S ? b : b + 1, sn_ = s + 1 < p->S ? s + 1 : 0;
            const uintptr_t xnext =
                bn < p->B ? (uintptr_t)(p->q + (bn * p->qs[0] + sn_ * p->qs[1]) * es) : 0;
            for (int64_t h = 0; h < p->num_heads;) {
                float ss[RK_QG];
                int g = p->num_heads - h >= G ? G : 1;
                const int64_t hp = h + RK_QPF;
                const uintptr_t xp = hp < p->num_heads ? (uintptr_t)xt + (uintptr_t)(hp * hs)
                                     : xnext ? xnext + (uintptr_t)((hp - p->num_heads) * hs)
                                             : 0;
                if (xp)
                    for (int i = 0; i < g; ++i)
                        for (int64_t o = 0; o < hd * es; o += 64)
                            __builtin_prefetch((const void *)(xp + (uintptr_t)(i * hs + o)), 0);
                if (g == RK_QG)
                    sum_sq_rows(xt + h * hs, hs, dt, hd, RK_QG, ss);
                else
                    sum_sq_rows(xt + h * hs, hs, dt, hd, 1, ss);
                for (int i = 0; i < g; ++i) {
                    char *yq = yt + (h + i) * hos;
#ifdef RK_HAVE_NT
                    if (stg) {
                        qknorm_head(p, dt, 0, hw, xt + (h + i) * hs, sw_row(&qw, yq, hd * es),
                                    ss[i], cs, sn, v, tw ? cwb : NULL, tw ? swb : NULL);
                        sw_done(&qw, hd * es);
                        continue;
                    }
#endif
                    qknorm_head(p, dt, nt, hw, xt + (h + i) * hs, yq, ss[i], cs, sn, v,
                                tw ? cwb : NULL, tw ? swb : NULL);
                }
                h += g;
            }
            /* kv */
            const char *x = p->kv + (b * p->kvs[0] + s * p->kvs[1]) * es;
            char *y = p->kv_out + (b * p->kvos[0] + s * p->kvos[1]) * es;
            float ss;
            sum_sq_rows(x, 0, dt, hd, 1, &ss);
            float r = 1.0f / sqrtf(ss / (float)hd + p->epsilon);
            vf rv = f_set1(r);
            const float *w = p->w;
            if (p->simulate_fp8) { /* nope is a multiple of 64 */
                float blk[64] __attribute__((aligned(64)));
                for (int64_t c0 = 0; c0 < nope; c0 += 64) {
                    vf amax = f_set1(0.0f);
                    for (int i = 0; i < 64; i += VL) {
                        vf q = rt_q(f_mul(f_mul(ld_t(x + (c0 + i) * es, dt), rv), f_ld(w + c0 + i)),
                                    dt, hw);
                        f_st(blk + i, q);
                        amax = f_max(f_abs(q), amax); /* a NaN is skipped, as fmaxf does */
                    }
                    float scale = fp8_block_scale(f_hmax(amax));
                    vf sc = f_set1(scale), lo = f_set1(-448.0f), hi = f_set1(448.0f);
                    for (int i = 0; i < 64; i += VL) {
                        vf q = f_min(f_max(f_div(f_ld(blk + i), sc), lo), hi);
                        st_q(y + (c0 + i) * es, dt, hw, f_mul(f_e4m3(q), sc), 0);
                    }
                }
            } else {
                int64_t c = 0;
                for (; c + VL <= nope; c += VL)
                    st_q(y + c * es, dt, hw, f_mul(f_mul(ld_t(x + c * es, dt), rv), f_ld(w + c)),
                         0);
                for (; c < nope; ++c)
                    rk_store(y, dt, c, (rk_load(x, dt, c) * r) * w[c]);
            }
            if (rd == 0) continue;
            const char *xr = x + nope * es;
            const float *wr = w + nope;
            int64_t t = 0;
            for (; t + VL <= rd; t += VL)
                f_st(v + t, rt_q(f_mul(f_mul(ld_t(xr + t * es, dt), rv), f_ld(wr + t)), dt, hw));
            for (; t < rd; ++t)
                v[t] = rk_round_to(dt, (rk_load(xr, dt, t) * r) * wr[t]);
            tail_rotate(v, cs, sn, rd, 0, y + nope * es, dt, 0, hw);
        }
#ifdef RK_HAVE_NT
    if (stg) sw_end(&qw);
#endif
    if (nt || stg) st_fence();
}

/* Streaming stores for the query output under use_streaming's rules: large, out of place, every
 * head written whole by aligned vector stores (nope and rope_dim multiples of VL), heads on
 * 64-byte line boundaries. */
static int qknorm_streaming(const rk_qknorm_plan *p) {
    const int64_t es = (int64_t)esz(p->dtype);
    if (p->q == p->q_out || !large_output(p->B * p->S * p->num_heads * p->head_dim * es)) return 0;
    if (p->nope % VL || p->rope_dim % VL || (p->head_dim * es) % 64) return 0;
    if ((uintptr_t)p->q_out % 64 || (p->qos[0] * es) % 64 || (p->qos[1] * es) % 64 ||
        (p->qos[2] * es) % 64)
        return 0;
    return 1;
}
/* Where qknorm_streaming's cannot be used but every vector store lands on a 16-byte boundary
 * (numpy's arrays, 16 bytes into a line): 16-byte streaming stores straight from the registers
 * (nt = 2), as bm_nt_copy writes the copy the call is compared with. The output's rows are
 * adjacent, so every line but the call's first and last is written whole, in order. */
static int qknorm_nt16(const rk_qknorm_plan *p) {
#ifdef RK_HAVE_NT16
    const int64_t es = (int64_t)esz(p->dtype);
    if (RK_NONT16 || p->q == p->q_out ||
        !large_output(p->B * p->S * p->num_heads * p->head_dim * es))
        return 0;
    if (p->nope % VL || p->rope_dim % VL || (p->head_dim * es) % 16) return 0;
    /* float32 with 16 lanes: staged rows are faster (four 16-byte pieces per vector store:
     * avx512 qk f32 +16 B 0.885x of staged, R1 of session 9; avx2 1.32x of normal stores) */
    if (p->dtype == ROPEKIT_FLOAT32 && VL >= 16) return 0;
    return (uintptr_t)p->q_out % 16 == 0 && (p->qos[0] * es) % 16 == 0 &&
           (p->qos[1] * es) % 16 == 0 && (p->qos[2] * es) % 16 == 0;
#else
    (void)p;
    return 0;
#endif
}
/* Where neither can be used: through staged rows. */
static int qknorm_staging(const rk_qknorm_plan *p) {
#ifdef RK_HAVE_NT
    const int64_t es = (int64_t)esz(p->dtype);
    /* not with 8 lanes: there the kernel is compute bound (the sums of squares), the window's
     * copy costs more than the streaming saves (Xeon EMR, avx2, dsv4 rows at +16 bytes:
     * bfloat16 0.88-0.90x of direct normal stores, R1/R2 2026-12-01) */
    return !RK_NOSTG && VL >= 16 && p->q != p->q_out && p->head_dim * es <= RK_STAGE &&
           large_output(p->B * p->S * p->num_heads * p->head_dim * es);
#else
    (void)p;
    return 0;
#endif
}

#define RK_QKNORM_CASES(nt, stg)                                                                   \
    switch (p->dtype) {                                                                            \
    case ROPEKIT_FLOAT32: qknorm_fast(p, ROPEKIT_FLOAT32, nt, 0, stg); break;                      \
    case ROPEKIT_FLOAT16:                                                                          \
        if (RK_F16_HW_OK())                                                                        \
            qknorm_fast(p, ROPEKIT_FLOAT16, nt, 1, stg);                                           \
        else                                                                                       \
            qknorm_fast(p, ROPEKIT_FLOAT16, nt, 0, stg);                                           \
        break;                                                                                     \
    default:                                                                                       \
        if (RK_BF16_HW_OK())                                                                       \
            qknorm_fast(p, ROPEKIT_BFLOAT16, nt, 1, stg);                                          \
        else                                                                                       \
            qknorm_fast(p, ROPEKIT_BFLOAT16, nt, 0, stg);                                          \
        break;                                                                                     \
    }

static __attribute__((noinline)) void RK_SUFFIX(qknorm_staged)(const rk_qknorm_plan *p) {
    RK_QKNORM_CASES(0, 1) /* apart from the direct kernels, as rotary_staged */
}
static void RK_SUFFIX(qknorm)(const rk_qknorm_plan *p) {
    if (p->qs[3] != 1 || p->qos[3] != 1 || p->kvs[2] != 1 || p->kvos[2] != 1 || p->ws != 1 ||
        p->rope_dim > RK_MAXROPE || (p->rope_dim > 0 && (p->cos_s[2] != 1 || p->sin_s[2] != 1))) {
        rk_ref_qknorm(p);
        return;
    }
    if (qknorm_streaming(p)) {
        RK_QKNORM_CASES(1, 0)
    } else if (qknorm_nt16(p)) {
        RK_QKNORM_CASES(2, 0)
    } else if (qknorm_staging(p)) {
        RK_SUFFIX(qknorm_staged)(p);
    } else {
        RK_QKNORM_CASES(0, 0)
    }
}

/* =================================== InverseRotaryRegroup =================================== */

/* Large regroup calls prefetch their input rows this many heads ahead (-D0 for diagnostic builds:
 * none): the hardware prefetchers alone leave the loop waiting on memory, as QKNorm's (RK_QPF).
 * R2 of session 9 (Xeon EMR, one thread, one-process A/B, medians of the per-round ratios main /
 * build), x and y +16 B: avx512 f16 1.20x (nt16 alone 1.14x), bf16 1.23x (1.07x), f32 1.08x
 * (1.09x); avx2 1.42x (1.13x), 1.43x (1.07x), 1.12x (1.09x); aligned avx512 f16 1.15x (1.00x). */
#ifndef RK_RGPF
#define RK_RGPF 4
#endif
RK_INLINE void regroup_fast(const rk_regroup_plan *p, ropekit_dtype dt, int nt, int stg) {
    const int64_t es = (int64_t)esz(dt), hd = p->head_dim, nope = p->nope, rd = p->rope_dim;
    float v[RK_MAXROPE] __attribute__((aligned(64)));
    /* rope_dim a multiple of VL: the token's cos/sin widened to doubles once, not per head
     * (avx2 callgrind, dsv4 regroup float16: 21.9 -> 17.6 M instructions per call) */
    double cwb[RK_QTW] __attribute__((aligned(64))), swb[RK_QTW] __attribute__((aligned(64)));
    const int tw = rd > 0 && rd % VL == 0 && rd <= RK_QTW;
#ifdef RK_HAVE_NT
    rk_sw sw; /* stg: each head's output row computed in the window */
    sw_init(&sw);
#else
    (void)stg;
#endif
    for (int64_t n = 0; n < p->N; ++n) {
        const char *xn = p->x + n * p->xs[0] * es;
        const float *cs = rd ? p->cos + n * p->cos_s[0] : NULL;
        const float *sn = rd ? p->sin + n * p->sin_s[0] : NULL;
        if (tw) widen_tables(cwb, swb, cs, sn, rd); /* once for all the token's heads */
        for (int64_t h = 0; h < p->num_heads; ++h) {
            int64_t f0 = h * hd, g = f0 / p->group_dim, gc = f0 % p->group_dim;
            const char *x = xn + f0 * es;
            char *y = p->out + (g * p->os[0] + n * p->os[1] + gc) * es;
            if (RK_RGPF && (nt || stg)) /* addresses as integers (see qknorm_fast) */
                for (int64_t o = 0; o < hd * es; o += 64)
                    __builtin_prefetch(
                        (const void *)((uintptr_t)x + (uintptr_t)(RK_RGPF * hd * es + o)), 0);
#ifdef RK_HAVE_NT
            if (stg) y = sw_row(&sw, y, hd * es);
#endif
            copy_bytes(y, x, nope * es, nt);
            if (rd == 0) {
#ifdef RK_HAVE_NT
                if (stg) sw_done(&sw, hd * es);
#endif
                continue;
            }
            const char *xr = x + nope * es;
            int64_t t = 0;
            if (tw) { /* tail_rotate's inverse operations, the tables already widened */
                for (; t < rd; t += VL)
                    st_q(y + (nope + t) * es, dt, 0,
                         rot_wide(ld_t(xr + t * es, dt), cwb + t, swb + t, 1), nt);
            } else {
                for (; t + VL <= rd; t += VL)
                    f_st(v + t, ld_t(xr + t * es, dt));
                for (; t < rd; ++t)
                    v[t] = rk_load(xr, dt, t);
                tail_rotate(v, cs, sn, rd, 1, y + nope * es, dt, nt, 0);
            }
#ifdef RK_HAVE_NT
            if (stg) sw_done(&sw, hd * es);
#endif
        }
    }
#ifdef RK_HAVE_NT
    if (stg) sw_end(&sw);
#endif
    if (nt || stg) st_fence();
}

static void RK_SUFFIX(regroup)(const rk_regroup_plan *p) {
    if (p->xs[1] != 1 || p->os[2] != 1 || p->group_dim % p->head_dim != 0 ||
        p->rope_dim > RK_MAXROPE || (p->rope_dim > 0 && (p->cos_s[1] != 1 || p->sin_s[1] != 1))) {
        rk_ref_regroup(p);
        return;
    }
    /* streaming stores: large output, every vector store aligned (4*VL bytes) */
    const int64_t es = (int64_t)esz(p->dtype), w = 4 * VL;
    const int large = large_output(p->N * p->num_heads * p->head_dim * es);
    int nt = large && (uintptr_t)p->out % (uintptr_t)w == 0 && (p->os[0] * es) % w == 0 &&
             (p->os[1] * es) % w == 0 && (p->head_dim * es) % w == 0 && (p->nope * es) % w == 0;
#ifdef RK_HAVE_NT16
    /* every store on a 16-byte boundary (numpy's +16 B arrays): 16-byte streaming stores from
     * the registers, no staging window (the lines where one group's run meets the next token's
     * are written in two parts, at different times) */
    const int nt16 = !nt && large && !RK_NONT16 && (uintptr_t)p->out % 16 == 0 &&
                     (p->os[0] * es) % 16 == 0 && (p->os[1] * es) % 16 == 0 &&
                     (p->head_dim * es) % 16 == 0 && (p->nope * es) % 16 == 0 &&
                     p->rope_dim % VL == 0 && p->rope_dim <= RK_QTW;
#else
    const int nt16 = 0;
#endif
#ifdef RK_HAVE_NT
    /* otherwise through staged rows (rk_sw) */
    const int stg = !nt && !nt16 && large && p->head_dim * es <= RK_STAGE && !RK_NOSTG;
#else
    const int stg = 0;
#endif
#define RK_REGROUP_T(T)                                                                            \
    if (nt)                                                                                        \
        regroup_fast(p, T, 1, 0);                                                                  \
    else if (nt16)                                                                                 \
        regroup_fast(p, T, 2, 0);                                                                  \
    else if (stg)                                                                                  \
        regroup_fast(p, T, 0, 1);                                                                  \
    else                                                                                           \
        regroup_fast(p, T, 0, 0);
    switch (p->dtype) {
    case ROPEKIT_FLOAT32: RK_REGROUP_T(ROPEKIT_FLOAT32) break;
    case ROPEKIT_FLOAT16: RK_REGROUP_T(ROPEKIT_FLOAT16) break;
    default: RK_REGROUP_T(ROPEKIT_BFLOAT16) break;
    }
#undef RK_REGROUP_T
}
