/* Every CPU variant against the scalar reference, bit for bit: random cases of every operator
 * and dtype, widths below / at / above the vector widths and the gather chunk, rank 3 and 4,
 * partial rotation, both pairings, inverse, scale, strided (packed QKV), innermost stride 2 and
 * in place, float32 tables with 16-bit x, MRoPE both layouts, QKNorm with fp8 on and off, the
 * regroup with groups inside and across heads; thread counts 1, 2, 3 and a host parallel-for
 * with an odd split give the same bits. Whole output buffers are compared (untouched bytes too).
 * Inputs and outputs start at random byte offsets from a 64-byte line (multiples of the element
 * size, x and y apart), so the writes of rows that do not start on a line run too.
 * Inputs hold zeros, subnormals, huge values, infinities and NaN (one NaN encoding: x86's
 * default NaN, so a NaN's bits never depend on which operand it came from). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "internal.h"
#include "ropekit.h"

#if defined(__x86_64__) || defined(_M_X64)
void rk_avx512_force_bf16_sw(int on); /* src/cpu/avx512.c: test hooks */
void rk_avx512_force_f16_sw(int on);
#endif
int rk_cpu_feature_probes(void); /* src/cpu/dispatch.c: test hook */

static const char *g_variants[4];
static int g_nvariants;
static int g_cases;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

static int rnd(int n) {
    return (int)(rng_u64() % (unsigned long long)n);
}
static size_t es_of(ropekit_dtype t) {
    return ropekit_dtype_size(t);
}

/* A float stored as dtype t at element i. */
static void put(void *p, ropekit_dtype t, int64_t i, float v) {
    rk_store(p, t, i, v);
}

/* x-like values: mostly moderate, sometimes anything (random bits), zero, inf, NaN. */
static float wild_value(ropekit_dtype t, int specials) {
    int k = rnd(100);
    if (!specials || k < 75) return rng_normalish() * ldexpf(1.0f, rnd(7) - 3);
    if (k < 85) {
        uint32_t u = (uint32_t)rng_u64();
        if (t != ROPEKIT_FLOAT32) u &= 0xffff0000u; /* representable-ish; rounding tested too */
        float f = rk_f32_from_bits(u);
        return isnan(f) ? 1.5f : f;
    }
    if (k < 90) return rnd(2) ? 0.0f : -0.0f;
    if (k < 93) return ldexpf(rng_normalish(), t == ROPEKIT_FLOAT16 ? -20 : -130); /* subnormal */
    if (k < 96) return rnd(2) ? INFINITY : -INFINITY;
    if (k < 98) return rk_f32_from_bits(0xffc00000u); /* the default NaN */
    return t == ROPEKIT_FLOAT16 ? 65504.0f * (rnd(2) ? 1 : -1) : 3e38f;
}

static void fill(void *p, ropekit_dtype t, int64_t n, int specials) {
    for (int64_t i = 0; i < n; ++i)
        put(p, t, i, wild_value(t, specials));
}

/* Tables: finite and non-zero (a zero times an infinite x would make a second NaN). */
static void fill_table(void *p, ropekit_dtype t, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        float v = rng_normalish() * 0.5f;
        if (rnd(50) == 0) v = ldexpf(1.0f + (float)rng_unit(), -rnd(30));
        if (v == 0.0f || rk_round_to(t, v) == 0.0f) v = 0.25f;
        put(p, t, i, v);
    }
}

/* Host parallel-for used by the tests: ranges of 1, 2, 3, ... items, run backwards. */
static void odd_parallel_for(void *ctx, int64_t n, ropekit_task_fn task, void *task_ctx) {
    (void)ctx;
    int64_t bounds[4096];
    int nb = 0;
    bounds[nb++] = 0;
    for (int64_t b = 0, w = 1; b < n && nb < 4095; w++) {
        b = b + w < n ? b + w : n;
        bounds[nb++] = b;
    }
    bounds[nb - 1] = n;
    for (int i = nb - 1; i > 0; --i)
        task(task_ctx, bounds[i - 1], bounds[i]);
}

/* A case runs into output buffers (restored to `init` first); run for every variant and thread
 * setting and compare with the reference run. */
typedef struct bufs {
    int n;
    ropekit_dtype dt; /* every buffer holds elements of this type (the case's T) */
    size_t es;
    char *out[2], *init[2], *want[2];
    char *raw[2]; /* out[i] = raw[i] + shift[i]: the shift bytes before it must stay as they are */
    size_t size[2], shift[2];
} bufs;

typedef ropekit_status (*run_fn)(void *ctx, char *const *out);

/* The same bits, or both NaN: which NaN an operation returns (sign, payload) is left open by
 * IEEE 754 and by C compilers (gcc -O2 and clang -O0 builds of ref.c already differ there). */
static int is_nan_bits(uint32_t u, ropekit_dtype t) {
    if (t == ROPEKIT_FLOAT32) return (u & 0x7fffffffu) > 0x7f800000u;
    if (t == ROPEKIT_FLOAT16) return (u & 0x7c00u) == 0x7c00u && (u & 0x3ffu);
    return (u & 0x7f80u) == 0x7f80u && (u & 0x7fu);
}
static int same_element(const char *a, const char *b, ropekit_dtype t) {
    size_t es = ropekit_dtype_size(t);
    if (memcmp(a, b, es) == 0) return 1;
    uint32_t x = 0, y = 0;
    memcpy(&x, a, es), memcpy(&y, b, es);
    return is_nan_bits(x, t) && is_nan_bits(y, t);
}

static void check_case(const char *what, run_fn run, void *ctx, bufs *b) {
    ++g_cases;
    ropekit_set_cpu_variant("ref");
    ropekit_set_num_threads(1);
    for (int i = 0; i < b->n; ++i)
        memcpy(b->out[i], b->init[i], b->size[i]);
    ropekit_status st = run(ctx, b->out);
    CHECK(st == ROPEKIT_OK, "%s: ref failed: %s", what, ropekit_last_error());
    if (st != ROPEKIT_OK) return;
    for (int i = 0; i < b->n; ++i)
        memcpy(b->want[i], b->out[i], b->size[i]);
    for (int v = 0; v < g_nvariants; ++v)
        for (int th = 0; th < 4; ++th) {
            ropekit_set_cpu_variant(g_variants[v]);
            if (th < 3)
                ropekit_set_num_threads(th + 1);
            else
                ropekit_set_parallel_for(odd_parallel_for, NULL);
            for (int i = 0; i < b->n; ++i)
                memcpy(b->out[i], b->init[i], b->size[i]);
            st = run(ctx, b->out);
            ropekit_set_parallel_for(NULL, NULL);
            for (int i = 0; i < b->n; ++i) {
                size_t k = 0;
                while (k < b->shift[i] && (unsigned char)b->raw[i][k] == 0x5a)
                    ++k;
                CHECK(k == b->shift[i], "%s: variant %s: byte %zu before output %d written", what,
                      g_variants[v], b->shift[i] - k, i);
            }
            int same = st == ROPEKIT_OK, bi = 0;
            size_t at = 0;
            for (bi = 0; bi < b->n && same; ++bi)
                for (at = 0; at < b->size[bi]; at += b->es) /* element by element */
                    if (!same_element(b->out[bi] + at, b->want[bi] + at, b->dt)) {
                        same = 0;
                        break;
                    }
            unsigned got4 = 0, want4 = 0; /* the 4 aligned bytes around the first difference */
            if (!same && st == ROPEKIT_OK) {
                size_t a4 = at & ~(size_t)3;
                for (int k = 3; k >= 0; --k)
                    if (a4 + (size_t)k < b->size[bi - 1])
                        got4 = got4 << 8 | (unsigned char)b->out[bi - 1][a4 + (size_t)k],
                        want4 = want4 << 8 | (unsigned char)b->want[bi - 1][a4 + (size_t)k];
            }
            CHECK(same,
                  "%s: variant %s, %s %d: differs from ref (status %d, byte %zu: %08x, ref "
                  "%08x)",
                  what, g_variants[v], th < 3 ? "threads" : "host split", th + 1, (int)st, at, got4,
                  want4);
        }
    ropekit_set_num_threads(1);
}

static void bufs_free(bufs *b) {
    for (int i = 0; i < b->n; ++i)
        free(b->raw[i]), free(b->init[i]), free(b->want[i]);
}

/* Odd rounds: outputs from a 64-byte line, so that the streaming-store paths run too (direct
 * where the rows are aligned, through the staged writer where not). Even rounds: malloc's 16-byte
 * alignment. Both: half the time shifted by a random multiple of the element size below 64 bytes;
 * the buffer ends where the output does (the sanitizers see overruns). */
static int g_align_out;

/* A random start within a line for a buffer of es-byte elements (0 half the time). */
static size_t rnd_shift(size_t es) {
    return rnd(2) ? 0 : es * (size_t)rnd((int)(64 / es));
}

static void bufs_add(bufs *b, size_t size, const void *init) {
    int i = b->n++;
    b->size[i] = size, b->shift[i] = rnd_shift(b->es);
    void *raw = NULL;
    if (g_align_out) {
        if (posix_memalign(&raw, 64, b->shift[i] + size ? b->shift[i] + size : 1) != 0) exit(2);
    } else {
        raw = xmalloc(b->shift[i] + size);
    }
    b->raw[i] = raw, b->out[i] = b->raw[i] + b->shift[i];
    memset(b->raw[i], 0x5a, b->shift[i]);
    b->init[i] = xmalloc(size), b->want[i] = xmalloc(size);
    if (init)
        memcpy(b->init[i], init, size);
    else
        memset(b->init[i], 0xa5, size);
}

/* ---- rotary ------------------------------------------------------------------------------ */

enum { OP_ONNX = 0, OP_ONNX_3D, OP_MS_OFFSET, OP_MS_IDS, OP_MROPE, OP_COUNT };
enum { LAY_CONTIG = 0, LAY_INPLACE, LAY_PACKED, LAY_STRIDE2, LAY_COUNT };

typedef struct rot_case {
    int op, layout, rank;
    ropekit_dtype T, TT;
    int64_t B, S, N, H, R, P;
    ropekit_tensor x, cos, sin, pos, y; /* y.data is set per run */
    int64_t y_off;                      /* element offset of y in its buffer */
    ropekit_rotary_embedding_attrs a;
    ropekit_ms_rotary_embedding_attrs ma;
    ropekit_mrotary_embedding_attrs mra;
} rot_case;

static ropekit_status run_rot(void *ctx, char *const *out) {
    rot_case *c = (rot_case *)ctx;
    ropekit_tensor y = c->y, x = c->x;
    y.data = out[0] + c->y_off * (int64_t)es_of(c->T);
    if (c->layout == LAY_INPLACE) x = y;
    switch (c->op) {
    case OP_ONNX: return ropekit_rotary_embedding(&x, &c->cos, &c->sin, &c->pos, &c->a, &y);
    case OP_ONNX_3D: return ropekit_rotary_embedding(&x, &c->cos, &c->sin, NULL, &c->a, &y);
    case OP_MROPE: return ropekit_mrotary_embedding(&x, &c->pos, &c->cos, &c->sin, &c->mra, &y);
    default: return ropekit_ms_rotary_embedding(&x, &c->pos, &c->cos, &c->sin, &c->ma, &y);
    }
}

static const int64_t g_heads[] = {2,  4,  6,  8,  10, 14, 16,  18,  30,  32, 34,
                                  48, 62, 64, 66, 80, 96, 128, 130, 256, 600};

/* Fixed parameters of the next rotary_case (-1: random), for the cases that must run. */
typedef struct rot_force {
    int op, layout, rank, T, TT, il;
    int64_t H, R, S, N;
} rot_force;
static const rot_force g_random = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
static rot_force g_force = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
#define RK_PICK(field, random) (g_force.field >= 0 ? g_force.field : (random))

static void rotary_case(int big) {
    rot_case c;
    memset(&c, 0, sizeof c);
    c.op = RK_PICK(op, rnd(OP_COUNT));
    c.layout = RK_PICK(layout, rnd(LAY_COUNT));
    c.rank = RK_PICK(rank, 3 + rnd(2));
    ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    c.T = (ropekit_dtype)RK_PICK(T, (int)dts[rnd(3)]);
    c.TT = (ropekit_dtype)RK_PICK(TT, rnd(2) ? (int)c.T : (int)ROPEKIT_FLOAT32);
    c.H = RK_PICK(H, g_heads[rnd((int)(sizeof g_heads / sizeof g_heads[0]))]);
    c.R = RK_PICK(R, rnd(3) ? c.H : 2 * (1 + rnd((int)(c.H / 2))));
    c.B = 1 + rnd(3), c.S = RK_PICK(S, 1 + rnd(big ? 300 : 5)),
    c.N = RK_PICK(N, 1 + rnd(big ? 8 : 4));
    c.P = c.S + rnd(9);
    int64_t h = c.R / 2, B = c.B, S = c.S, N = c.N, H = c.H;
    int il = RK_PICK(il, rnd(2)), inv = rnd(2);
    const size_t es = es_of(c.T), tes = es_of(c.TT);

    /* x: a view of its own buffer, laid out per c.layout */
    int64_t st[4], n_el; /* strides of (b, s, n, ch) */
    int64_t off = 0;
    if (c.layout == LAY_PACKED) { /* (B, S, 3, N, H): x is the middle third */
        st[3] = 1, st[2] = H, st[1] = 3 * N * H, st[0] = S * 3 * N * H;
        off = N * H, n_el = B * S * 3 * N * H;
    } else if (c.layout == LAY_STRIDE2) {
        st[3] = 2, st[2] = 2 * H, st[1] = 2 * N * H, st[0] = 2 * S * N * H;
        n_el = 2 * B * S * N * H;
    } else if (c.rank == 4) { /* (B, N, S, H) contiguous */
        st[3] = 1, st[1] = H, st[2] = S * H, st[0] = N * S * H;
        n_el = B * S * N * H;
    } else {
        st[3] = 1, st[2] = H, st[1] = N * H, st[0] = S * N * H;
        n_el = B * S * N * H;
    }
    const size_t xsh = rnd_shift(es);
    char *xraw = xmalloc(xsh + (size_t)n_el * es), *xbuf = xraw + xsh;
    fill(xbuf, c.T, n_el, 1);
    if (c.rank == 3 && st[2] != H * st[3]) c.rank = 4; /* rank 3 needs heads adjacent */
    ropekit_tensor *x = &c.x;
    x->data = xbuf + off * (int64_t)es, x->dtype = c.T, x->rank = c.rank;
    if (c.rank == 3) {
        int64_t sh[3] = {B, S, N * H}, sr[3] = {st[0], st[1], st[3]};
        memcpy(x->shape, sh, sizeof sh), memcpy(x->strides, sr, sizeof sr);
    } else {
        int64_t sh[4] = {B, N, S, H}, sr[4] = {st[0], st[2], st[1], st[3]};
        memcpy(x->shape, sh, sizeof sh), memcpy(x->strides, sr, sizeof sr);
    }
    c.y = *x, c.y.data = NULL, c.y_off = off;

    /* tables and ids */
    void *tc, *ts;
    int64_t *ids = NULL;
    if (c.op == OP_ONNX_3D) {
        int64_t sh[3] = {B, S, h};
        tc = xmalloc((size_t)(B * S * h) * tes), ts = xmalloc((size_t)(B * S * h) * tes);
        fill_table(tc, c.TT, B * S * h), fill_table(ts, c.TT, B * S * h);
        c.cos = ropekit_tensor_contiguous(tc, c.TT, 3, sh);
        c.sin = ropekit_tensor_contiguous(ts, c.TT, 3, sh);
    } else {
        int64_t rs = h + (rnd(4) == 0 ? 3 : 0); /* sometimes a padded row */
        tc = xmalloc((size_t)(c.P * rs) * tes), ts = xmalloc((size_t)(c.P * rs) * tes);
        fill_table(tc, c.TT, c.P * rs), fill_table(ts, c.TT, c.P * rs);
        ropekit_tensor t = {tc, c.TT, 2, {c.P, h}, {rs, 1}};
        c.cos = t, t.data = ts, c.sin = t;
    }
    if (c.op == OP_ONNX || c.op == OP_MS_IDS) {
        ids = xmalloc((size_t)(B * S) * 8);
        for (int64_t i = 0; i < B * S; ++i)
            ids[i] = rnd((int)c.P);
        c.pos = ropekit_tensor_contiguous(ids, ROPEKIT_INT64, 2, (int64_t[]){B, S});
    } else if (c.op == OP_MS_OFFSET) {
        ids = xmalloc(8);
        ids[0] = rnd((int)(c.P - S + 1));
        c.pos = ropekit_tensor_contiguous(ids, ROPEKIT_INT64, 1, (int64_t[]){1});
    } else if (c.op == OP_MROPE) {
        ids = xmalloc((size_t)(3 * B * S) * 8);
        for (int64_t i = 0; i < 3 * B * S; ++i)
            ids[i] = rnd((int)c.P);
        c.pos = ropekit_tensor_contiguous(ids, ROPEKIT_INT64, 3, (int64_t[]){3, B, S});
    }
    int64_t nh = c.rank == 3 ? N : (rnd(2) ? N : 0);
    float scale = rnd(3) ? 1.0f : 0.5f + (float)rng_unit();
    c.a = (ropekit_rotary_embedding_attrs){il, rnd(2) && c.R == H ? 0 : c.R, nh, inv};
    c.ma = (ropekit_ms_rotary_embedding_attrs){il, c.R, nh, scale, 0, inv};
    int64_t s0 = rnd((int)h + 1), s1 = rnd((int)(h - s0) + 1);
    c.mra = (ropekit_mrotary_embedding_attrs){
        {s0, s1, h - s0 - s1}, rnd(2), il, c.R, nh, scale, 0, inv};

    bufs b = {0};
    b.es = es, b.dt = c.T;
    bufs_add(&b, (size_t)n_el * es, c.layout == LAY_INPLACE ? xbuf : NULL);
    char what[256];
    snprintf(what, sizeof what,
             "rotary op %d layout %d rank %d T %s tables %s B %lld S %lld N %lld "
             "H %lld R %lld il %d inv %d",
             c.op, c.layout, c.rank, ropekit_dtype_name(c.T), ropekit_dtype_name(c.TT),
             (long long)B, (long long)S, (long long)N, (long long)H, (long long)c.R, il, inv);
    check_case(what, run_rot, &c, &b);
    bufs_free(&b);
    free(xraw), free(tc), free(ts), free(ids);
}

/* The (B, N, S, H) layout fused dynamo models run (head-major: blocks of tokens share their
 * gathered table rows across heads) and the even/odd bfloat16 rows, in place and out of place,
 * every dtype and table type, both pairings, widths at and off the vector multiples and past the
 * gather chunk, sequences of several token blocks with a short last one. */
static void bnsh_cases(void) {
    /* h = R/2 = 48 and 56: one even/odd group of 2*VL columns (avx512) or several (avx2), then
     * VL-wide columns laid out plainly, then (56) scalar ones */
    static const int64_t heads[] = {64, 66, 80, 128, 600, 96, 112};
    const int dts[4] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16, ROPEKIT_BFLOAT16};
    for (int d = 0; d < 4; ++d) {
#if defined(__x86_64__) || defined(_M_X64)
        /* bfloat16 twice: avx512 rounding with AVX512_BF16's instruction, then with integers */
        rk_avx512_force_bf16_sw(d == 3);
#endif
        for (int hi = 0; hi < 7; ++hi)
            for (int il = 0; il < 2; ++il)
                for (int lay = 0; lay < 2; ++lay) { /* LAY_CONTIG, LAY_INPLACE */
                    g_force = g_random;
                    g_force.op = OP_ONNX, g_force.layout = lay, g_force.rank = 4;
                    g_force.T = dts[d], g_force.TT = (hi + il) % 2 ? dts[d] : ROPEKIT_FLOAT32;
                    g_force.H = heads[hi], g_force.R = heads[hi], g_force.il = il;
                    g_force.S = hi == 4 ? 9 : 131, g_force.N = 3;
                    rk_cpu_set_stream_threshold((hi + lay) % 2 ? 0 : -1);
                    g_align_out = 1;
                    rotary_case(0);
                }
    }
#if defined(__x86_64__) || defined(_M_X64)
    rk_avx512_force_bf16_sw(0);
#endif
    g_force = g_random;
    rk_cpu_set_stream_threshold(-1);
    g_align_out = 0;
}

/* Calls below the streaming threshold that go token by token (rotary_tokens: decode tokens, short
 * rank-3 runs): every op, dtype, table type, pairing and layout, widths with the row loop's
 * constant width (R = 128: h = 64) with and without copied channels, and others. */
static void token_cases(void) {
    static const int64_t hr[][2] = {{128, 128}, {160, 128}, {130, 128}, {128, 64}, {96, 96}, {66, 66}};
    const int dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    for (int d = 0; d < 3; ++d)
        for (int hi = 0; hi < 6; ++hi)
            for (int il = 0; il < 2; ++il)
                for (int lay = 0; lay < 3; ++lay)
                    for (int k = 0; k < 2; ++k) {
                        g_force = g_random;
                        g_force.layout = lay, g_force.rank = 3 + k;
                        g_force.T = dts[d], g_force.TT = (hi + il + k) % 2 ? dts[d] : ROPEKIT_FLOAT32;
                        g_force.H = hr[hi][0], g_force.R = hr[hi][1], g_force.il = il;
                        g_force.S = k ? 1 : 1 + (hi % 3), g_force.N = 1 + (hi + lay) % 5;
                        rotary_case(0);
                    }
    g_force = g_random;
}

/* ---- QKNorm ------------------------------------------------------------------------------ */

typedef struct qk_case {
    ropekit_tensor q, kv, w, cos, sin, qo, ko;
    ropekit_qknorm_rotary_embedding_attrs a;
    int q_inplace, kv_inplace;
} qk_case;

static ropekit_status run_qk(void *ctx, char *const *out) {
    qk_case *c = (qk_case *)ctx;
    ropekit_tensor q = c->q, kv = c->kv, qo = c->qo, ko = c->ko;
    qo.data = out[0], ko.data = out[1];
    if (c->q_inplace) q.data = out[0];
    if (c->kv_inplace) kv.data = out[1];
    return ropekit_qknorm_rotary_embedding(&q, &kv, &c->w, c->a.rope_head_dim ? &c->cos : NULL,
                                           c->a.rope_head_dim ? &c->sin : NULL, &c->a, &qo, &ko);
}

/* tiny: values whose products with the norm are subnormal (float32 subnormals for bfloat16:
 * the hardware conversion reads them as zero, the kernels must not). */
static void fill_qk(void *p, ropekit_dtype t, int64_t n, int specials, int tiny) {
    fill(p, t, n, specials);
    if (tiny)
        for (int64_t i = 0; i < n; ++i)
            if (rnd(4))
                put(p, t, i, ldexpf(rng_normalish(), t == ROPEKIT_FLOAT16 ? -20 : -128 - rnd(12)));
}

/* mla: DeepSeek-like layouts (head_dim 64k + 64, nope a multiple of 64, several heads, out of
 * place, unpadded rows): the grouped sums of squares and, with aligned outputs, the streaming
 * stores. */
static void qknorm_case(int big, int mla) {
    qk_case c;
    memset(&c, 0, sizeof c);
    ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    ropekit_dtype T = dts[rnd(3)];
    const size_t es = es_of(T);
    int fp8 = rnd(2);
    static const int64_t ropes[] = {0, 2, 6, 8, 16, 18, 32, 64, 66};
    int64_t rd = ropes[rnd(9)], hd;
    if (mla)
        rd = 64, hd = 64 * (1 + rnd(big ? 8 : 2)) + rd;
    else if (fp8)
        hd = 64 * rnd(big ? 9 : 4) + rd;
    else
        hd = rd + rnd(big ? 500 : 70);
    if (hd == 0) hd = rd = 2;
    int64_t nh = 1 + rnd(big || mla ? 16 : 3), B = 1 + rnd(2), S = 1 + rnd(big ? 40 : 4);
    int tiny = rnd(mla ? 3 : 8) == 0;
    c.a = (ropekit_qknorm_rotary_embedding_attrs){nh, hd, rd,
                                                  rnd(2) && !tiny ? 1e-6f : (float)rng_unit(), fp8};
    c.q_inplace = !mla && rnd(3) == 0, c.kv_inplace = !mla && rnd(3) == 0;
    int specials = rnd(4) == 0;
    /* query: contiguous, or rows padded (packed) */
    int64_t qrow = nh * hd + (c.q_inplace || mla ? 0 : rnd(2) * 7);
    const size_t qsh = rnd_shift(es), ksh = rnd_shift(es);
    char *qraw = xmalloc(qsh + (size_t)(B * S * qrow) * es), *qb = qraw + qsh;
    fill_qk(qb, T, B * S * qrow, specials, tiny);
    c.q = (ropekit_tensor){qb, T, 3, {B, S, nh * hd}, {S * qrow, qrow, 1}};
    int64_t krow = hd + (c.kv_inplace || mla ? 0 : rnd(2) * 5);
    char *kraw = xmalloc(ksh + (size_t)(B * S * krow) * es), *kb = kraw + ksh;
    fill_qk(kb, T, B * S * krow, specials, tiny);
    c.kv = (ropekit_tensor){kb, T, 3, {B, S, hd}, {S * krow, krow, 1}};
    float *w = xmalloc((size_t)hd * 4);
    for (int64_t i = 0; i < hd; ++i)
        w[i] = rng_normalish();
    c.w = ropekit_tensor_contiguous(w, ROPEKIT_FLOAT32, 1, &hd);
    int64_t ts[3] = {B, S, rd};
    float *cs = xmalloc((size_t)(B * S * rd) * 4 + 4), *sn = xmalloc((size_t)(B * S * rd) * 4 + 4);
    fill_table(cs, ROPEKIT_FLOAT32, B * S * rd), fill_table(sn, ROPEKIT_FLOAT32, B * S * rd);
    c.cos = ropekit_tensor_contiguous(cs, ROPEKIT_FLOAT32, 3, ts);
    c.sin = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 3, ts);
    c.qo = (ropekit_tensor){NULL, T, 4, {B, S, nh, hd}, {S * qrow, qrow, hd, 1}};
    c.ko = (ropekit_tensor){NULL, T, 3, {B, S, hd}, {S * krow, krow, 1}};
    bufs b = {0};
    b.es = es, b.dt = T;
    bufs_add(&b, (size_t)(B * S * qrow) * es, c.q_inplace ? qb : NULL);
    bufs_add(&b, (size_t)(B * S * krow) * es, c.kv_inplace ? kb : NULL);
    char what[200];
    snprintf(what, sizeof what,
             "qknorm T %s B %lld S %lld heads %lld head_dim %lld rope %lld "
             "fp8 %d in place %d/%d tiny %d",
             ropekit_dtype_name(T), (long long)B, (long long)S, (long long)nh, (long long)hd,
             (long long)rd, fp8, c.q_inplace, c.kv_inplace, tiny);
    check_case(what, run_qk, &c, &b);
    bufs_free(&b);
    free(qraw), free(kraw), free(w), free(cs), free(sn);
}

/* ---- InverseRotaryRegroup ---------------------------------------------------------------- */

typedef struct rg_case {
    ropekit_tensor x, cos, sin, out;
    ropekit_inverse_rotary_regroup_attrs a;
} rg_case;

static ropekit_status run_rg(void *ctx, char *const *out) {
    rg_case *c = (rg_case *)ctx;
    ropekit_tensor o = c->out;
    o.data = out[0];
    return ropekit_inverse_rotary_regroup(&c->x, c->a.rope_head_dim ? &c->cos : NULL,
                                          c->a.rope_head_dim ? &c->sin : NULL, &c->a, &o);
}

static void regroup_case(int big) {
    rg_case c;
    memset(&c, 0, sizeof c);
    ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    ropekit_dtype T = dts[rnd(3)];
    const size_t es = es_of(T);
    static const int64_t ropes[] = {0, 2, 6, 8, 16, 18, 32, 64, 66};
    int64_t rd = ropes[rnd(9)], hd = rd + 2 * rnd(big ? 200 : 40);
    if (hd == 0) hd = rd = 2;
    int64_t nh = 1 + rnd(big ? 32 : 6), N = 1 + rnd(big ? 200 : 6), F = nh * hd;
    int64_t G = 1;
    for (int tries = 0; tries < 10; ++tries) { /* a divisor of F: by heads, or splitting one */
        int64_t g = rnd(2) ? 1 + rnd((int)nh) : 1 + rnd(8);
        if (F % g == 0) {
            G = g;
            break;
        }
    }
    c.a = (ropekit_inverse_rotary_regroup_attrs){nh, hd, rd, G};
    int64_t row = F + rnd(2) * 3;
    const size_t xsh = rnd_shift(es);
    char *xraw = xmalloc(xsh + (size_t)(N * row) * es), *xb = xraw + xsh;
    fill(xb, T, N * row, rnd(4) == 0);
    c.x = (ropekit_tensor){xb, T, 2, {N, F}, {row, 1}};
    float *cs = xmalloc((size_t)(N * rd) * 4 + 4), *sn = xmalloc((size_t)(N * rd) * 4 + 4);
    fill_table(cs, ROPEKIT_FLOAT32, N * rd), fill_table(sn, ROPEKIT_FLOAT32, N * rd);
    c.cos = ropekit_tensor_contiguous(cs, ROPEKIT_FLOAT32, 2, (int64_t[]){N, rd});
    c.sin = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 2, (int64_t[]){N, rd});
    c.out = ropekit_tensor_contiguous(NULL, T, 3, (int64_t[]){G, N, F / G});
    bufs b = {0};
    b.es = es, b.dt = T;
    bufs_add(&b, (size_t)(N * F) * es, NULL);
    char what[200];
    snprintf(what, sizeof what,
             "regroup T %s N %lld heads %lld head_dim %lld rope %lld groups %lld",
             ropekit_dtype_name(T), (long long)N, (long long)nh, (long long)hd, (long long)rd,
             (long long)G);
    check_case(what, run_rg, &c, &b);
    bufs_free(&b);
    free(xraw), free(cs), free(sn);
}

/* ---- API ----------------------------------------------------------------------------------- */

static void test_api(void) {
    CHECK(ropekit_set_cpu_variant("ref") == ROPEKIT_OK, "set ref");
    CHECK(strcmp(ropekit_cpu_variant(), "ref") == 0, "query ref: %s", ropekit_cpu_variant());
    CHECK(ropekit_set_cpu_variant("sse9") == ROPEKIT_ERROR_INVALID_ATTRIBUTE, "unknown name");
    CHECK(strcmp(ropekit_cpu_variant(), "ref") == 0, "unchanged after error");
    CHECK(ropekit_set_cpu_variant(NULL) == ROPEKIT_ERROR_NULL_POINTER, "NULL name");
    CHECK(ropekit_set_cpu_variant("auto") == ROPEKIT_OK, "auto");
    CHECK(ropekit_set_num_threads(0) == ROPEKIT_ERROR_INVALID_ATTRIBUTE, "0 threads");
    CHECK(ropekit_set_num_threads(3) == ROPEKIT_OK && ropekit_get_num_threads() == 3, "3 threads");
    CHECK(ropekit_set_num_threads(1) == ROPEKIT_OK && ropekit_get_num_threads() == 1, "1 thread");
    static const char *all[4] = {"ref", "avx2", "avx512", "neon"};
    for (int i = 0; i < 4; ++i) {
        ropekit_status st = ropekit_set_cpu_variant(all[i]);
        CHECK(st == ROPEKIT_OK || st == ROPEKIT_ERROR_UNSUPPORTED, "%s: %d", all[i], (int)st);
        if (st == ROPEKIT_OK)
            g_variants[g_nvariants++] = all[i];
        else
            SKIP("variant %s: not supported here (%s)", all[i], ropekit_last_error());
    }
    ropekit_set_cpu_variant("auto");
    /* the CPU's features are probed once per process, not on every set_cpu_variant */
    for (int i = 0; i < 1000; ++i)
        (void)ropekit_set_cpu_variant(all[i % 4]);
    ropekit_set_cpu_variant("auto");
#if defined(__x86_64__) || defined(_M_X64)
    CHECK(rk_cpu_feature_probes() == 1, "cpuid probes: %d after 1000+ set_cpu_variant calls",
          rk_cpu_feature_probes());
#else
    CHECK(rk_cpu_feature_probes() == 0, "no cpuid probes off x86: %d", rk_cpu_feature_probes());
#endif
    printf("variants:");
    for (int i = 0; i < g_nvariants; ++i)
        printf(" %s", g_variants[i]);
    printf(" (auto: %s)\n", ropekit_cpu_variant());
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    test_api();
    rk_cpu_set_parallel_threshold(0); /* split even tiny calls over the threads */
    bnsh_cases();
    token_cases();
    for (int i = 0; i < rounds; ++i) {
        int big = i % 10 == 9;
        rk_cpu_set_stream_threshold(i % 2 ? 0 : -1); /* streaming stores on every other round */
        g_align_out = i % 2;
        rotary_case(big);
        rotary_case(0);
#if defined(__x86_64__) || defined(_M_X64)
        /* avx512 QKNorm half the time as on CPUs without AVX512_BF16 / AVX512_FP16: bfloat16
         * rounded with integers, float16 through float32 */
        rk_avx512_force_bf16_sw(i % 4 >= 2);
        rk_avx512_force_f16_sw(i % 4 >= 2);
#endif
        qknorm_case(big, 0);
        qknorm_case(big, 1);
        regroup_case(big);
    }
    rk_cpu_set_parallel_threshold(-1);
    rk_cpu_set_stream_threshold(-1);
#if defined(__x86_64__) || defined(_M_X64)
    rk_avx512_force_bf16_sw(0);
    rk_avx512_force_f16_sw(0);
#endif
    printf("%d cases\n", g_cases);
    return REPORT();
}
