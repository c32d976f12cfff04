/* check_cuda: every CUDA operator and option against the CPU library (same process), on fresh
 * random inputs. Prints the max ulp difference per op/dtype and exits non-zero on a mismatch
 * beyond the stated tolerance (0 ulp everywhere; QKNorm with fp8: 0 for the query, and at most
 * 0.5% of kv elements may differ, by fp8 block-scale flips from logf). The CPU side is the
 * oracle itself: the core's plan builders and src/cpu/ref.c, called directly. Exit 77 (skipped) when no
 * CUDA device is present. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "ropekit.h"
#include "ropekit_cuda.h"

static int g_fail = 0, g_cases = 0;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}
static double urand(double lo, double hi) { return lo + (hi - lo) * (double)(rnd() >> 11) * 0x1p-53; }

#define CK(call)                                                                               \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

/* ---- buffers ------------------------------------------------------------------------------ */

typedef struct buf {
    void *h, *d; /* host copy, device copy */
    size_t bytes;
} buf;

static buf buf_new(size_t bytes) {
    buf b;
    b.bytes = bytes ? bytes : 16;
    b.h = malloc(b.bytes);
    if (!b.h) exit(2);
    CK(cudaMalloc(&b.d, b.bytes));
    return b;
}
static void buf_free(buf *b) {
    free(b->h);
    CK(cudaFree(b->d));
}
static void up(buf *b) { CK(cudaMemcpy(b->d, b->h, b->bytes, cudaMemcpyHostToDevice)); }
static void *down(const buf *b) {
    void *p = malloc(b->bytes);
    if (!p) exit(2);
    CK(cudaMemcpy(p, b->d, b->bytes, cudaMemcpyDeviceToHost));
    return p;
}
static void poison(buf *b) {
    memset(b->h, 0xff, b->bytes);
    CK(cudaMemset(b->d, 0xff, b->bytes));
}
static void fill(buf *b, ropekit_dtype dt, double lo, double hi) {
    size_t n = b->bytes / ropekit_dtype_size(dt);
    for (size_t i = 0; i < n; ++i) rk_store(b->h, dt, (int64_t)i, (float)urand(lo, hi));
    up(b);
}
static ropekit_tensor view(void *data, ropekit_dtype dt, int rank, const int64_t *shape,
                           const int64_t *strides) {
    ropekit_tensor t = ropekit_tensor_contiguous(data, dt, rank, shape);
    if (strides) memcpy(t.strides, strides, sizeof(int64_t) * (size_t)rank);
    return t;
}
/* The same view on the device copy. */
static ropekit_tensor dview(const ropekit_tensor *t, const buf *b) {
    ropekit_tensor d = *t;
    d.data = (char *)b->d + ((const char *)t->data - (const char *)b->h);
    return d;
}

/* ---- comparison --------------------------------------------------------------------------- */

static int64_t ordered(ropekit_dtype dt, const void *p, size_t i) {
    if (dt == ROPEKIT_FLOAT32) {
        int32_t v;
        memcpy(&v, (const char *)p + 4 * i, 4);
        return v < 0 ? (int64_t)INT32_MIN - v : v;
    }
    int16_t v;
    memcpy(&v, (const char *)p + 2 * i, 2);
    return v < 0 ? (int64_t)INT16_MIN - v : v;
}

typedef struct opstat {
    const char *op;
    ropekit_dtype dt;
    int64_t max_ulp, diff, total;
} opstat;
static opstat g_stats[96];
static int g_nstats = 0;

static opstat *stat_for(const char *op, ropekit_dtype dt) {
    for (int i = 0; i < g_nstats; ++i)
        if (g_stats[i].dt == dt && strcmp(g_stats[i].op, op) == 0) return &g_stats[i];
    opstat *s = &g_stats[g_nstats++];
    s->op = op, s->dt = dt, s->max_ulp = s->diff = s->total = 0;
    return s;
}

/* Special values (g_special): a few NaNs, infinities, zeros of both signs, values near the
 * type's overflow and subnormals are written over the random inputs, so that the kernels'
 * fast paths (paired 16-bit rounding, QKNorm's finite-row path) meet every case of the
 * rounding rules. NaN results are compared as NaN: their sign and payload are not specified
 * (ropekit.h section 5), and the CPU's and the GPU's arithmetic make different ones. */
static int g_special = 0;

static int is_nan_at(ropekit_dtype dt, const void *p, size_t i) {
    if (dt == ROPEKIT_FLOAT32) {
        uint32_t v;
        memcpy(&v, (const char *)p + 4 * i, 4);
        return (v & 0x7fffffffu) > 0x7f800000u;
    }
    uint16_t v;
    memcpy(&v, (const char *)p + 2 * i, 2);
    return dt == ROPEKIT_FLOAT16 ? (v & 0x7fffu) > 0x7c00u : (v & 0x7fffu) > 0x7f80u;
}

/* Huge values only in x: a product of two huge values overflows, and whether an fma is formed
 * (either product may be the fused one) then decides between inf and a finite result. */
static void sprinkle(buf *b, ropekit_dtype dt, int one_in, int huge) {
    const float big = dt == ROPEKIT_FLOAT16 ? 65000.0f : 3.0e38f;
    const float tiny = dt == ROPEKIT_FLOAT16 ? 3.0e-7f : 2.0e-40f;
    const float sp[8] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, tiny, big, -big};
    size_t n = b->bytes / ropekit_dtype_size(dt);
    for (size_t i = 0; i < n; ++i)
        if (rnd() % (uint64_t)one_in == 0) rk_store(b->h, dt, (int64_t)i, sp[rnd() % (huge ? 8 : 6)]);
    up(b);
}

/* Compares n elements; returns the number that differ, updates the per-op stats. */
static int64_t compare(const char *op, ropekit_dtype dt, const void *want, const void *got,
                       size_t n, int64_t *max_ulp_out) {
    int64_t diff = 0, mu = 0;
    for (size_t i = 0; i < n; ++i) {
        if (g_special && is_nan_at(dt, want, i) && is_nan_at(dt, got, i)) continue;
        int64_t a = ordered(dt, want, i), b = ordered(dt, got, i);
        int64_t d = a > b ? a - b : b - a;
        if (d) ++diff;
        if (d > mu) mu = d;
    }
    opstat *s = stat_for(op, dt);
    if (mu > s->max_ulp) s->max_ulp = mu;
    s->diff += diff, s->total += (int64_t)n;
    if (max_ulp_out) *max_ulp_out = mu;
    return diff;
}

static void result(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ++g_cases;
    if (!ok) ++g_fail;
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static const char *dn(ropekit_dtype d) { return ropekit_dtype_name(d); }

/* ---- the CPU oracle: the CPU library's plan builders + src/cpu/ref.c ----------------------- */

static ropekit_status ref_rotary(rk_rotary_plan *p) {
    RK_TRY(rk_check_position_ids(p));
    if (p->B > 0 && p->S > 0 && p->N > 0) rk_ref_rotary(p);
    return ROPEKIT_OK;
}
static ropekit_status cpu_onnx(const ropekit_tensor *x, const ropekit_tensor *c, const ropekit_tensor *s,
                               const ropekit_tensor *ids, const ropekit_rotary_embedding_attrs *a,
                               const ropekit_tensor *y) {
    rk_rotary_plan p;
    RK_TRY(rk_plan_rotary_embedding(x, c, s, ids, a, y, &p));
    return ref_rotary(&p);
}
static ropekit_status cpu_ms(const ropekit_tensor *x, const ropekit_tensor *ids, const ropekit_tensor *c,
                             const ropekit_tensor *s, const ropekit_ms_rotary_embedding_attrs *a,
                             const ropekit_tensor *y) {
    rk_rotary_plan p;
    RK_TRY(rk_plan_ms_rotary_embedding(x, ids, c, s, a, y, &p));
    return ref_rotary(&p);
}
static ropekit_status cpu_mrope(const ropekit_tensor *x, const ropekit_tensor *ids, const ropekit_tensor *c,
                                const ropekit_tensor *s, const ropekit_mrotary_embedding_attrs *a,
                                const ropekit_tensor *y) {
    rk_rotary_plan p;
    RK_TRY(rk_plan_mrotary_embedding(x, ids, c, s, a, y, &p));
    return ref_rotary(&p);
}
static ropekit_status cpu_qknorm(const ropekit_tensor *q, const ropekit_tensor *kv, const ropekit_tensor *w,
                                 const ropekit_tensor *c, const ropekit_tensor *s,
                                 const ropekit_qknorm_rotary_embedding_attrs *a, const ropekit_tensor *qo,
                                 const ropekit_tensor *ko) {
    rk_qknorm_plan p;
    RK_TRY(rk_plan_qknorm_rotary_embedding(q, kv, w, c, s, a, qo, ko, &p));
    if (p.B > 0 && p.S > 0) rk_ref_qknorm(&p);
    return ROPEKIT_OK;
}
static ropekit_status cpu_regroup(const ropekit_tensor *x, const ropekit_tensor *c, const ropekit_tensor *s,
                                  const ropekit_inverse_rotary_regroup_attrs *a, const ropekit_tensor *o) {
    rk_regroup_plan p;
    RK_TRY(rk_plan_inverse_rotary_regroup(x, c, s, a, o, &p));
    if (p.N > 0) rk_ref_regroup(&p);
    return ROPEKIT_OK;
}

/* ---- rotary family ------------------------------------------------------------------------ */

enum { OP_ONNX = 0, OP_MS = 1, OP_MROPE = 2 };
enum { IDS_TOKEN = 0, IDS_OFFSET = 1, IDS_NONE = 2 };

typedef struct rcase {
    int op;
    ropekit_dtype T, TT;
    int64_t B, S, N, H, R, P;
    int rank, interleaved, inverse, ids;
    float scale;
    int64_t layout, sec[3];
    int packed_inplace; /* x = q+k heads of a packed QKV buffer, y = x */
    int inner;          /* channel stride (1: contiguous) */
    int tpad;           /* extra elements per table row (unaligned rows) */
    const char *name;
} rcase;

static void run_rotary_case(const rcase *c, ropekit_cuda_error_state *err) {
    const size_t es = ropekit_dtype_size(c->T), tes = ropekit_dtype_size(c->TT);
    const int64_t B = c->B, S = c->S, N = c->N, H = c->H, h = (c->R ? c->R : H) / 2;
    const int64_t E = c->packed_inplace ? 8 : 0; /* extra (V) heads */
    const int64_t in = c->inner;
    int64_t xshape[4], xstr[4];
    size_t xelems;
    if (c->rank == 3) {
        int64_t row = (N + E) * H * in;
        xshape[0] = B, xshape[1] = S, xshape[2] = N * H;
        xstr[0] = S * row, xstr[1] = row, xstr[2] = in;
        xelems = (size_t)(B * S * row);
    } else { /* (B, N, S, H) */
        xshape[0] = B, xshape[1] = N, xshape[2] = S, xshape[3] = H;
        xstr[3] = in, xstr[2] = H * in, xstr[1] = S * H * in, xstr[0] = N * S * H * in;
        xelems = (size_t)(B * N * S * H * in);
    }
    buf xb = buf_new(xelems * es), yb = buf_new(xelems * es);
    fill(&xb, c->T, -4, 4);
    if (g_special) sprinkle(&xb, c->T, 50, 1);
    void *x0 = malloc(xb.bytes); /* the input, kept for the in-place run */
    memcpy(x0, xb.h, xb.bytes);
    poison(&yb);
    ropekit_tensor x = view(xb.h, c->T, c->rank, xshape, xstr);
    ropekit_tensor y = c->packed_inplace ? x : view(yb.h, c->T, c->rank, xshape, xstr);
    /* tables */
    int64_t tshape[3];
    int trank;
    if (c->ids == IDS_NONE) trank = 3, tshape[0] = B, tshape[1] = S, tshape[2] = h;
    else trank = 2, tshape[0] = c->P, tshape[1] = h;
    size_t telems = (size_t)(tshape[0] * (tshape[1] + (trank == 2 ? c->tpad : 0)) * (trank == 3 ? tshape[2] : 1));
    buf cb = buf_new(telems * tes), sb = buf_new(telems * tes);
    fill(&cb, c->TT, -1, 1);
    fill(&sb, c->TT, -1, 1);
    if (g_special) sprinkle(&cb, c->TT, 400, 0), sprinkle(&sb, c->TT, 400, 0);
    ropekit_tensor ct = view(cb.h, c->TT, trank, tshape, NULL), st = view(sb.h, c->TT, trank, tshape, NULL);
    if (trank == 2) ct.strides[0] = st.strides[0] = h + c->tpad;
    /* ids */
    int64_t pshape[3] = {1, 1, 1};
    int prank = 0;
    if (c->op == OP_MROPE) prank = 3, pshape[0] = 3, pshape[1] = B, pshape[2] = S;
    else if (c->ids == IDS_TOKEN) prank = 2, pshape[0] = B, pshape[1] = S;
    else if (c->ids == IDS_OFFSET) prank = 1, pshape[0] = 1;
    size_t pelems = prank == 3 ? (size_t)(3 * B * S) : prank == 2 ? (size_t)(B * S) : 1;
    buf pb = buf_new(pelems * 8);
    int64_t *ids = (int64_t *)pb.h;
    for (size_t i = 0; i < pelems; ++i) ids[i] = (int64_t)(rnd() % (uint64_t)c->P);
    if (c->ids == IDS_OFFSET) ids[0] = (int64_t)(rnd() % (uint64_t)(c->P - S + 1));
    up(&pb);
    ropekit_tensor pt = view(pb.h, ROPEKIT_INT64, prank ? prank : 1, pshape, NULL);

    /* CPU on the host copies, then GPU on the device copies */
    ropekit_status s1, s2;
    ropekit_tensor dx = dview(&x, &xb), dy = c->packed_inplace ? dx : dview(&y, &yb);
    ropekit_tensor dc = dview(&ct, &cb), ds = dview(&st, &sb), dp = dview(&pt, &pb);
    if (c->op == OP_ONNX) {
        ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
        a.interleaved = c->interleaved, a.rotary_embedding_dim = c->R;
        a.num_heads = c->rank == 3 ? N : 0, a.inverse = c->inverse;
        s1 = cpu_onnx(&x, &ct, &st, c->ids == IDS_NONE ? NULL : &pt, &a, &y);
        s2 = ropekit_cuda_rotary_embedding(&dx, &dc, &ds, c->ids == IDS_NONE ? NULL : &dp, &a, &dy,
                                           NULL, err);
    } else if (c->op == OP_MS) {
        ropekit_ms_rotary_embedding_attrs a = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
        a.interleaved = c->interleaved, a.rotary_embedding_dim = c->R;
        a.num_heads = c->rank == 3 ? N : 0, a.inverse = c->inverse, a.scale = c->scale;
        s1 = cpu_ms(&x, &pt, &ct, &st, &a, &y);
        s2 = ropekit_cuda_ms_rotary_embedding(&dx, &dp, &dc, &ds, &a, &dy, NULL, err);
    } else {
        ropekit_mrotary_embedding_attrs a = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
        memcpy(a.mrope_section, c->sec, sizeof a.mrope_section);
        a.mrope_layout = c->layout;
        a.interleaved = c->interleaved, a.rotary_embedding_dim = c->R;
        a.num_heads = c->rank == 3 ? N : 0, a.inverse = c->inverse, a.scale = c->scale;
        s1 = cpu_mrope(&x, &pt, &ct, &st, &a, &y);
        s2 = ropekit_cuda_mrotary_embedding(&dx, &dp, &dc, &ds, &a, &dy, NULL, err);
    }
    CK(cudaDeviceSynchronize());
    if (s1 != ROPEKIT_OK || s2 != ROPEKIT_OK) {
        result(0, "%s: status cpu %s gpu %s (%s)", c->name, ropekit_status_str(s1),
               ropekit_status_str(s2), ropekit_cuda_last_error());
    } else {
        const buf *ob = c->packed_inplace ? &xb : &yb;
        void *got = down(ob);
        const char *op = c->op == OP_ONNX ? "RotaryEmbedding" : c->op == OP_MS ? "ms.RotaryEmbedding" : "MRotaryEmbedding";
        int64_t mu;
        int64_t d = compare(op, c->T, ob->h, got, ob->bytes / es, &mu);
        result(d == 0, "%-18s %-8s tables %-8s %-38s il=%d max ulp %lld, %lld of %zu differ", op,
               dn(c->T), dn(c->TT), c->name, c->interleaved, (long long)mu, (long long)d,
               ob->bytes / es);
        free(got);
    }
    free(x0);
    buf_free(&xb), buf_free(&yb), buf_free(&cb), buf_free(&sb), buf_free(&pb);
}

static void rotary_suite(ropekit_cuda_error_state *err) {
    const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    for (int di = 0; di < 3; ++di)
        for (int f32t = 0; f32t < 2; ++f32t) {
            ropekit_dtype T = dts[di], TT = f32t ? ROPEKIT_FLOAT32 : T;
            if (T == ROPEKIT_FLOAT32 && f32t) continue;
            for (int il = 0; il < 2; ++il) {
                rcase c;
                memset(&c, 0, sizeof c);
                c.T = T, c.TT = TT, c.interleaved = il, c.inner = 1, c.scale = 1.0f;
                /* ai.onnx: rank 3, full rotary */
                c.op = OP_ONNX, c.B = 2, c.S = 37, c.N = 5, c.H = 64, c.P = 300, c.rank = 3;
                c.name = il ? "onnx rank3 H64 interleaved" : "onnx rank3 H64";
                run_rotary_case(&c, err);
                /* rank 4, partial rotary, inverse */
                c.rank = 4, c.H = 80, c.R = 32, c.inverse = 1, c.name = "onnx rank4 H80 R32 inverse";
                run_rotary_case(&c, err);
                c.inverse = 0;
                /* no ids: 3D tables */
                c.rank = 3, c.H = 128, c.R = 0, c.ids = IDS_NONE, c.name = "onnx 3D tables (no ids)";
                run_rotary_case(&c, err);
                c.ids = IDS_TOKEN;
                /* packed QKV in place (q+k of 32+8+8 heads), Llama-like */
                c.B = 2, c.S = 19, c.N = 40, c.H = 128, c.packed_inplace = 1;
                c.name = "onnx packed QKV in place N=32+8";
                run_rotary_case(&c, err);
                c.packed_inplace = 0;
                /* scalar path: channel stride 2, odd head size with even rotary width */
                c.N = 3, c.H = 7, c.R = 6, c.inner = 2, c.name = "onnx strided H7 R6 stride2";
                run_rotary_case(&c, err);
                c.inner = 1, c.H = 20, c.R = 12, c.name = "onnx H20 R12 (h not a multiple of V)";
                run_rotary_case(&c, err);
                /* com.microsoft: offset form with scale, per-token with inverse */
                c.op = OP_MS, c.N = 4, c.H = 64, c.R = 0, c.ids = IDS_OFFSET, c.scale = 0.75f;
                c.name = "ms offset scale=0.75";
                run_rotary_case(&c, err);
                c.scale = 1.0f, c.B = 7, c.S = 1, c.N = 12, c.name = "ms offset decode B7 S1 (no scale)";
                run_rotary_case(&c, err);
                c.B = 2, c.S = 19, c.N = 4;
                c.ids = IDS_TOKEN, c.scale = 1.0f, c.inverse = 1, c.rank = 4, c.tpad = 1;
                c.name = "ms per-token rank4 inverse, table rows+1";
                run_rotary_case(&c, err);
                c.inverse = 0, c.rank = 3, c.tpad = 0;
                c.packed_inplace = 1, c.N = 12, c.H = 96, c.R = 64, c.name = "ms packed in place H96 R64";
                run_rotary_case(&c, err);
                c.packed_inplace = 0;
                /* MRoPE layouts 0 and 1 */
                c.op = OP_MROPE, c.N = 6, c.H = 128, c.R = 0, c.scale = 1.0f;
                for (int lay = 0; lay < 2; ++lay) {
                    c.layout = lay;
                    if (lay == 0) c.sec[0] = 16, c.sec[1] = 24, c.sec[2] = 24;
                    else c.sec[0] = 24, c.sec[1] = 20, c.sec[2] = 20;
                    c.name = lay ? "mrope layout1 [24,20,20]" : "mrope layout0 [16,24,24]";
                    run_rotary_case(&c, err);
                }
                c.layout = 0, c.sec[0] = 8, c.sec[1] = 12, c.sec[2] = 12, c.R = 64, c.H = 80;
                c.scale = 1.5f, c.inverse = 1, c.rank = 4, c.name = "mrope rank4 R64 H80 scale inverse";
                run_rotary_case(&c, err);
                /* prefill-sized calls (more than one wave, so the multi-wave kernel choices —
                 * tile, staged, flat with 4 heads — are reached without knobs; token counts
                 * that are no multiple of any block or step) */
                c.op = OP_ONNX, c.layout = 0, c.scale = 1.0f, c.inverse = 0, c.rank = 3;
                c.B = 2, c.S = 777, c.N = 40, c.H = 128, c.R = 0, c.P = 4099;
                c.name = "onnx prefill B2 S777 N40 H128";
                run_rotary_case(&c, err);
                c.B = 1, c.S = 3333, c.N = 16, c.H = 80, c.R = 32, c.inverse = 1;
                c.name = "onnx prefill S3333 N16 H80 R32 inverse";
                run_rotary_case(&c, err);
                c.op = OP_MROPE, c.inverse = 0, c.S = 1601, c.N = 32, c.H = 128, c.R = 0;
                c.sec[0] = 16, c.sec[1] = 24, c.sec[2] = 24;
                c.name = "mrope prefill S1601 N32 [16,24,24]";
                run_rotary_case(&c, err);
                /* chunks whose columns read several streams: interleaved layout, and sections
                 * that are no multiple of a chunk's columns */
                c.layout = 1, c.sec[0] = 24, c.sec[1] = 20, c.sec[2] = 20;
                c.name = "mrope prefill S1601 N32 layout1 [24,20,20]";
                run_rotary_case(&c, err);
                c.layout = 0, c.sec[0] = 10, c.sec[1] = 27, c.sec[2] = 27, c.B = 3, c.S = 301;
                c.name = "mrope prefill B3 S301 N32 [10,27,27]";
                run_rotary_case(&c, err);
            }
        }
}

/* ---- out-of-range ids --------------------------------------------------------------------- */

/* bad_ids_suite's MRoPE data: x [B, S, N*H] float32, ids [3, B, S] (host views, then the device
 * views), its reference output r. */
typedef struct bad_mrope_ctx {
    ropekit_tensor x, mt, ct, st, r, dx, dmt, dc, ds, dy;
    buf *xb, *yb, *ref;
    int64_t *ids;
    int64_t B, S, N, H, h;
} bad_mrope_ctx;

/* One MRoPE launch whose only bad id any column reads is the H-stream id of token (1, 2) (99,
 * set by the caller): one error counted with its message, and the output equal to the CPU's with
 * that id replaced by 0 and then the token's columns [k0, k1) (those of the H stream) copied from
 * x. err NULL: the default error state. */
static void bad_mrope_check(const bad_mrope_ctx *c, const ropekit_mrotary_embedding_attrs *mra,
                            ropekit_cuda_error_state *err, int64_t k0, int64_t k1, const char *what) {
    const int64_t B = c->B, S = c->S, N = c->N, H = c->H, h = c->h;
    ropekit_cuda_error_state_reset(err, NULL);
    poison(c->yb);
    ropekit_status s = ropekit_cuda_mrotary_embedding(&c->dx, &c->dmt, &c->dc, &c->ds, mra, &c->dy, NULL, err);
    int64_t count = 0;
    ropekit_status cs = ropekit_cuda_check_errors(err, NULL, &count);
    const char *msg = ropekit_cuda_last_error();
    int64_t *bad = c->ids + B * S + S + 2, saved = *bad;
    *bad = 0;
    ropekit_status s3 = cpu_mrope(&c->x, &c->mt, &c->ct, &c->st, mra, &c->r);
    *bad = saved;
    float *rf = (float *)c->ref->h;
    const float *xf = (const float *)c->xb->h;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = k0; k < k1; ++k) {
            int64_t base = (S + 2) * N * H + n * H;
            rf[base + k] = xf[base + k], rf[base + k + h] = xf[base + k + h];
        }
    void *got = down(c->yb);
    int64_t mu;
    int64_t d = compare("out-of-range ids", ROPEKIT_FLOAT32, c->ref->h, got, (size_t)(B * S * N * H), &mu);
    result(s == ROPEKIT_OK && s3 == ROPEKIT_OK && cs == ROPEKIT_ERROR_POSITION_OUT_OF_RANGE && count == 1 &&
               strstr(msg, "position_ids[1][1][2] = 99 is outside cos_cache rows [0, 16)") && d == 0,
           "%s: count %lld, only its stream's pairs copied (%lld differ): \"%s\"", what, (long long)count,
           (long long)d, msg);
    free(got);
    ropekit_cuda_error_state_reset(err, NULL);
}

static void bad_ids_prefill(ropekit_cuda_error_state *err, int layout);

static void bad_ids_suite(void) {
    ropekit_cuda_error_state *err = NULL;
    if (ropekit_cuda_error_state_create(&err) != ROPEKIT_OK) {
        result(0, "error state create: %s", ropekit_cuda_last_error());
        return;
    }
    const int64_t B = 2, S = 5, N = 3, H = 16, P = 16, h = 8;
    const ropekit_dtype T = ROPEKIT_FLOAT32;
    buf xb = buf_new((size_t)(B * S * N * H) * 4), yb = buf_new(xb.bytes), ref = buf_new(xb.bytes);
    buf cb = buf_new((size_t)(P * h) * 4), sb = buf_new((size_t)(P * h) * 4), pb = buf_new((size_t)(3 * B * S) * 8);
    fill(&xb, T, -4, 4);
    fill(&cb, T, -1, 1);
    fill(&sb, T, -1, 1);
    int64_t xs[3] = {B, S, N * H}, ts[2] = {P, h};
    ropekit_tensor x = view(xb.h, T, 3, xs, NULL), y = view(yb.h, T, 3, xs, NULL), r = view(ref.h, T, 3, xs, NULL);
    ropekit_tensor ct = view(cb.h, T, 2, ts, NULL), st = view(sb.h, T, 2, ts, NULL);
    ropekit_tensor dx = dview(&x, &xb), dy = dview(&y, &yb), dc = dview(&ct, &cb), ds = dview(&st, &sb);
    int64_t *ids = (int64_t *)pb.h;

    /* 1. ai.onnx, 2D ids: two bad tokens, the rest rotated */
    for (int64_t i = 0; i < B * S; ++i) ids[i] = (int64_t)(rnd() % (uint64_t)P);
    ids[0 * S + 3] = 70000, ids[1 * S + 1] = -1;
    up(&pb);
    int64_t ps[2] = {B, S};
    ropekit_tensor pt = view(pb.h, ROPEKIT_INT64, 2, ps, NULL), dp = dview(&pt, &pb);
    ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
    a.num_heads = N;
    poison(&yb);
    ropekit_status s = ropekit_cuda_rotary_embedding(&dx, &dc, &ds, &dp, &a, &dy, NULL, err);
    int64_t count = 0;
    ropekit_status cs = ropekit_cuda_check_errors(err, NULL, &count);
    const char *msg = ropekit_cuda_last_error();
    result(s == ROPEKIT_OK && cs == ROPEKIT_ERROR_POSITION_OUT_OF_RANGE && count == 2 &&
               strstr(msg, "position_ids[0][3] = 70000 is outside cos_cache rows [0, 16)"),
           "bad ids 2D: launch %s, check %s, count %lld: \"%s\"", ropekit_status_str(s),
           ropekit_status_str(cs), (long long)count, msg);
    /* expected: CPU with the bad ids replaced by 0, bad tokens copied */
    s = ropekit_rotary_embedding(&x, &ct, &st, &pt, &a, &y);
    result(s == ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "cpu refuses the same ids: %s", ropekit_last_error());
    int64_t fixed[10];
    memcpy(fixed, ids, sizeof fixed);
    fixed[3] = 0, fixed[S + 1] = 0;
    ropekit_tensor fpt = view(fixed, ROPEKIT_INT64, 2, ps, NULL);
    s = cpu_onnx(&x, &ct, &st, &fpt, &a, &r);
    float *rf = (float *)ref.h, *xf = (float *)xb.h;
    const int64_t bad_tok[2] = {3, S + 1};
    for (int k = 0; k < 2; ++k)
        memcpy(rf + bad_tok[k] * N * H, xf + bad_tok[k] * N * H, (size_t)(N * H) * 4);
    void *got = down(&yb);
    int64_t mu;
    int64_t d = compare("out-of-range ids", T, ref.h, got, (size_t)(B * S * N * H), &mu);
    result(s == ROPEKIT_OK && d == 0, "bad ids 2D: good tokens rotated, bad tokens copied (%lld differ)", (long long)d);
    free(got);
    ropekit_cuda_error_state_reset(err, NULL);
    cs = ropekit_cuda_check_errors(err, NULL, &count);
    result(cs == ROPEKIT_OK && count == 0, "reset clears the state");

    /* 2. com.microsoft offset whose window leaves the table: every token copied */
    ids[0] = P - S + 1;
    up(&pb);
    int64_t one = 1;
    ropekit_tensor ot = view(pb.h, ROPEKIT_INT64, 1, &one, NULL), dot = dview(&ot, &pb);
    ropekit_ms_rotary_embedding_attrs ma = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
    ma.num_heads = N;
    poison(&yb);
    s = ropekit_cuda_ms_rotary_embedding(&dx, &dot, &dc, &ds, &ma, &dy, NULL, err);
    cs = ropekit_cuda_check_errors(err, NULL, &count);
    msg = ropekit_cuda_last_error();
    got = down(&yb);
    result(s == ROPEKIT_OK && cs == ROPEKIT_ERROR_POSITION_OUT_OF_RANGE && count == B * S &&
               strstr(msg, "position offset 12 with sequence length 5") &&
               memcmp(got, xb.h, xb.bytes) == 0,
           "bad offset: every token copied, count %lld: \"%s\"", (long long)count, msg);
    free(got);
    ropekit_cuda_error_state_reset(err, NULL);

    /* 3. MRoPE: one bad H-stream id; the default error state (errors = NULL) */
    for (int64_t i = 0; i < 3 * B * S; ++i) ids[i] = (int64_t)(rnd() % (uint64_t)P);
    ids[1 * B * S + 1 * S + 2] = 99;
    up(&pb);
    int64_t ms3[3] = {3, B, S};
    ropekit_tensor mt = view(pb.h, ROPEKIT_INT64, 3, ms3, NULL), dmt = dview(&mt, &pb);
    bad_mrope_ctx c3 = {x, mt, ct, st, r, dx, dmt, dc, ds, dy, &xb, &yb, &ref, ids, B, S, N, H, h};
    ropekit_mrotary_embedding_attrs mra = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
    mra.mrope_section[0] = 2, mra.mrope_section[1] = 3, mra.mrope_section[2] = 3;
    mra.num_heads = N;
    bad_mrope_check(&c3, &mra, NULL, 2, 5, "bad MRoPE id (default state)");

    /* 3b. MRoPE sections [4, 4, 0]: every 16-byte chunk reads one stream (the flat kernel's
     * one-stream path); the bad H id of 3. again, and a bad W id that no column reads (not an
     * error, as on the CPU) */
    mra.mrope_section[0] = 4, mra.mrope_section[1] = 4, mra.mrope_section[2] = 0;
    ids[2 * B * S + 0 * S + 4] = 5000;
    up(&pb);
    bad_mrope_check(&c3, &mra, err, 4, 8, "bad MRoPE id, sections [4,4,0]");

    /* 4. validation happens before launch, with the CPU's messages */
    a.rotary_embedding_dim = 5;
    s = ropekit_cuda_rotary_embedding(&dx, &dc, &ds, &dp, &a, &dy, NULL, err);
    result(s == ROPEKIT_ERROR_INVALID_ATTRIBUTE && strstr(ropekit_cuda_last_error(), "odd"),
           "odd rotary width refused before launch: \"%s\"", ropekit_cuda_last_error());
    CK(cudaDeviceSynchronize());
    bad_ids_prefill(err, 0);
    bad_ids_prefill(err, 1);
    ropekit_cuda_error_state_destroy(err);
    buf_free(&xb), buf_free(&yb), buf_free(&ref), buf_free(&cb), buf_free(&sb), buf_free(&pb);
}

/* Out-of-range MRoPE ids on a prefill-sized call (more than one wave: the multi-wave MRoPE
 * kernels, not the small calls' flat kernel), both section layouts: five bad ids in the three
 * streams (the first and the last token, two bad streams of one token, ids just past the table,
 * negative and huge). Expected: the CPU's output with the bad ids replaced by 0, then the
 * columns of each bad (token, stream) copied from x; five errors counted, the message naming the
 * smallest bad (stream, b, s). */
static int mrope_col_stream(const int64_t sec[3], int layout, int64_t k) {
    if (layout == 0) return k < sec[0] ? 0 : k < sec[0] + sec[1] ? 1 : 2;
    if (k % 3 == 1 && k < 3 * sec[1]) return 1;
    if (k % 3 == 2 && k < 3 * sec[2]) return 2;
    return 0;
}

static void bad_ids_prefill(ropekit_cuda_error_state *err, int layout) {
    const int64_t B = 2, S = 1000, N = 32, H = 128, P = 300, h = H / 2;
    const ropekit_dtype T = ROPEKIT_FLOAT32;
    int64_t sec[3] = {16, 24, 24};
    if (layout) sec[0] = 24, sec[1] = 20, sec[2] = 20;
    buf xb = buf_new((size_t)(B * S * N * H) * 4), yb = buf_new(xb.bytes), ref = buf_new(xb.bytes);
    buf cb = buf_new((size_t)(P * h) * 4), sb = buf_new(cb.bytes), pb = buf_new((size_t)(3 * B * S) * 8);
    fill(&xb, T, -4, 4);
    fill(&cb, T, -1, 1);
    fill(&sb, T, -1, 1);
    int64_t xs[3] = {B, S, N * H}, ts[2] = {P, h}, ms3[3] = {3, B, S};
    ropekit_tensor x = view(xb.h, T, 3, xs, NULL), y = view(yb.h, T, 3, xs, NULL), r = view(ref.h, T, 3, xs, NULL);
    ropekit_tensor ct = view(cb.h, T, 2, ts, NULL), st = view(sb.h, T, 2, ts, NULL);
    ropekit_tensor mt = view(pb.h, ROPEKIT_INT64, 3, ms3, NULL);
    ropekit_tensor dx = dview(&x, &xb), dy = dview(&y, &yb), dc = dview(&ct, &cb), ds = dview(&st, &sb);
    ropekit_tensor dmt = dview(&mt, &pb);
    int64_t *ids = (int64_t *)pb.h;
    for (int64_t i = 0; i < 3 * B * S; ++i) ids[i] = (int64_t)(rnd() % (uint64_t)P);
    const struct { int64_t st, b, s, v; } bad[5] = {
        {1, 0, 0, P}, {0, 1, 999, -1}, {2, 0, 517, (int64_t)1 << 40}, {0, 1, 3, -7}, {2, 1, 3, P + 5}};
    for (int i = 0; i < 5; ++i) ids[(bad[i].st * B + bad[i].b) * S + bad[i].s] = bad[i].v;
    up(&pb);
    ropekit_mrotary_embedding_attrs mra = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
    memcpy(mra.mrope_section, sec, sizeof sec);
    mra.mrope_layout = layout, mra.num_heads = N;
    ropekit_cuda_error_state_reset(err, NULL);
    poison(&yb);
    ropekit_status s = ropekit_cuda_mrotary_embedding(&dx, &dmt, &dc, &ds, &mra, &dy, NULL, err);
    int64_t count = 0;
    ropekit_status cs = ropekit_cuda_check_errors(err, NULL, &count);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ropekit_cuda_last_error());
    for (int i = 0; i < 5; ++i) ids[(bad[i].st * B + bad[i].b) * S + bad[i].s] = 0;
    ropekit_status s3 = cpu_mrope(&x, &mt, &ct, &st, &mra, &r);
    float *rf = (float *)ref.h;
    const float *xf = (const float *)xb.h;
    for (int i = 0; i < 5; ++i)
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < h; ++k) {
                if (mrope_col_stream(sec, layout, k) != bad[i].st) continue;
                const int64_t base = (bad[i].b * S + bad[i].s) * N * H + n * H;
                rf[base + k] = xf[base + k], rf[base + k + h] = xf[base + k + h];
            }
    void *got = down(&yb);
    int64_t mu;
    int64_t d = compare("out-of-range ids", T, ref.h, got, (size_t)(B * S * N * H), &mu);
    result(s == ROPEKIT_OK && s3 == ROPEKIT_OK && cs == ROPEKIT_ERROR_POSITION_OUT_OF_RANGE && count == 5 &&
               strstr(msg, "position_ids[0][1][3] = -7 is outside cos_cache rows [0, 300)") && d == 0,
           "bad MRoPE ids, prefill B2 S1000 N32 layout %d: count %lld, bad streams' pairs copied (%lld differ): \"%s\"",
           layout, (long long)count, (long long)d, msg);
    free(got);
    ropekit_cuda_error_state_reset(err, NULL);
    buf_free(&xb), buf_free(&yb), buf_free(&ref), buf_free(&cb), buf_free(&sb), buf_free(&pb);
}

/* ---- QKNormRotaryEmbedding ---------------------------------------------------------------- */

/* Layout options of a QKNorm case (all 0: the plain case): element offsets of the query, kv,
 * output and weight data in their buffers (offsets that break 16- or 8-byte alignment send
 * the rows to the kernels for 4-byte words or the staged kernel), floats of padding after
 * each table row (8-byte but not 16-byte aligned rows), and the inputs' amplitude (default 3). */
typedef struct qk_layout {
    int64_t qoff, koff, ooff, woff, tpad;
    double amp;
} qk_layout;

static void qknorm_case_l(ropekit_dtype T, int64_t B, int64_t S, int64_t nh, int64_t hd, int64_t rd,
                          int fp8, int inplace, int qstride_pad, const char *name, qk_layout L) {
    const size_t es = ropekit_dtype_size(T);
    const int64_t qrow = nh * hd + qstride_pad; /* padded token stride: strided query view */
    const int64_t trow = rd + L.tpad;
    const double amp = L.amp > 0 ? L.amp : 3.0;
    buf qb = buf_new((size_t)(B * S * qrow + L.qoff) * es), kb = buf_new((size_t)(B * S * hd + L.koff) * es);
    buf qo = buf_new((size_t)(B * S * nh * hd + L.ooff) * es), ko = buf_new((size_t)(B * S * hd + L.ooff) * es);
    buf wb = buf_new((size_t)(hd + L.woff) * 4);
    buf cb = buf_new((size_t)(B * S * (rd ? trow : 1)) * 4), sb = buf_new(cb.bytes);
    fill(&qb, T, -amp, amp);
    fill(&kb, T, -amp, amp);
    if (g_special) sprinkle(&qb, T, 3000, 1), sprinkle(&kb, T, 3000, 1);
    fill(&wb, ROPEKIT_FLOAT32, 0.5, 1.5);
    float *cf = (float *)cb.h, *sf = (float *)sb.h;
    for (int64_t i = 0; i < B * S * (rd ? trow : 1); ++i) cf[i] = sf[i] = 2.0f; /* padding */
    for (int64_t tk = 0; tk < B * S && rd; ++tk)
        for (int64_t i = 0; i < rd; i += 2) { /* pre-interleaved, as models give them */
            double th = urand(0, 6.283185307179586);
            float *c = cf + tk * trow + i, *sn = sf + tk * trow + i;
            c[0] = c[1] = (float)cos(th), sn[0] = sn[1] = (float)sin(th);
        }
    up(&cb), up(&sb);
    poison(&qo), poison(&ko);
    int64_t q3[3] = {B, S, nh * hd}, q3s[3] = {S * qrow, qrow, 1}, k3[3] = {B, S, hd};
    int64_t qo4[4] = {B, S, nh, hd}, w1[1] = {hd}, c3[3] = {B, S, rd}, c3s[3] = {S * trow, trow, 1};
    char *qh = (char *)qb.h + L.qoff * (int64_t)es, *kh = (char *)kb.h + L.koff * (int64_t)es;
    ropekit_tensor q = view(qh, T, 3, q3, q3s), kv = view(kh, T, 3, k3, NULL);
    ropekit_tensor w = view((float *)wb.h + L.woff, ROPEKIT_FLOAT32, 1, w1, NULL);
    ropekit_tensor ct = view(cb.h, ROPEKIT_FLOAT32, 3, c3, c3s), st = view(sb.h, ROPEKIT_FLOAT32, 3, c3, c3s);
    ropekit_tensor qout, kout;
    if (inplace) { /* same element mapping: a rank-4 view of the query buffer */
        int64_t s4[4] = {S * qrow, qrow, hd, 1};
        qout = view(qh, T, 4, qo4, s4), kout = kv;
    } else {
        char *qoh = (char *)qo.h + L.ooff * (int64_t)es, *koh = (char *)ko.h + L.ooff * (int64_t)es;
        qout = view(qoh, T, 4, qo4, NULL), kout = view(koh, T, 3, k3, NULL);
    }
    const buf *qob = inplace ? &qb : &qo, *kob = inplace ? &kb : &ko;
    ropekit_qknorm_rotary_embedding_attrs a = ROPEKIT_QKNORM_ROTARY_EMBEDDING_ATTRS_INIT;
    a.num_heads = nh, a.head_dim = hd, a.rope_head_dim = rd, a.simulate_fp8 = fp8;
    ropekit_tensor dq = dview(&q, &qb), dk = dview(&kv, &kb), dw = dview(&w, &wb);
    ropekit_tensor dc = dview(&ct, &cb), ds = dview(&st, &sb), dqo = dview(&qout, qob), dko = dview(&kout, kob);
    ropekit_status s1 = cpu_qknorm(&q, &kv, &w, rd ? &ct : NULL, rd ? &st : NULL, &a, &qout, &kout);
    ropekit_status s2 = ropekit_cuda_qknorm_rotary_embedding(&dq, &dk, &dw, rd ? &dc : NULL, rd ? &ds : NULL,
                                                             &a, &dqo, &dko, NULL);
    CK(cudaDeviceSynchronize());
    if (s1 != ROPEKIT_OK || s2 != ROPEKIT_OK) {
        result(0, "qknorm %s: status cpu %s gpu %s (%s)", name, ropekit_status_str(s1),
               ropekit_status_str(s2), ropekit_cuda_last_error());
    } else {
        void *gq = down(qob), *gk = down(kob);
        int64_t muq, muk;
        const char *op = fp8 ? "QKNorm (fp8)" : "QKNorm";
        int64_t dq_ = compare(op, T, qob->h, gq, qob->bytes / es, &muq);
        int64_t dk_ = compare(op, T, kob->h, gk, kob->bytes / es, &muk);
        const int64_t nk = (int64_t)(kob->bytes / es);
        int ok = dq_ == 0 && (fp8 ? dk_ * 200 <= nk : dk_ == 0);
        result(ok, "QKNorm %-8s %-44s query max ulp %lld (%lld differ), kv max ulp %lld (%lld of %zu differ)",
               dn(T), name, (long long)muq, (long long)dq_, (long long)muk, (long long)dk_, kob->bytes / es);
        free(gq), free(gk);
    }
    buf_free(&qb), buf_free(&kb), buf_free(&qo), buf_free(&ko), buf_free(&wb), buf_free(&cb), buf_free(&sb);
}
static void qknorm_case(ropekit_dtype T, int64_t B, int64_t S, int64_t nh, int64_t hd, int64_t rd,
                        int fp8, int inplace, int qstride_pad, const char *name) {
    const qk_layout plain = {0, 0, 0, 0, 0, 0.0};
    qknorm_case_l(T, B, S, nh, hd, rd, fp8, inplace, qstride_pad, name, plain);
}

/* ---- InverseRotaryRegroup ------------------------------------------------------------------ */

static void regroup_case(ropekit_dtype T, int64_t N, int64_t nh, int64_t hd, int64_t rd, int64_t G,
                         int64_t xpad, const char *name) {
    const size_t es = ropekit_dtype_size(T);
    const int64_t F = nh * hd, row = F + xpad;
    buf xb = buf_new((size_t)(N * row) * es), ob = buf_new((size_t)(N * F) * es);
    buf cb = buf_new((size_t)(N * (rd ? rd : 1)) * 4), sb = buf_new(cb.bytes);
    fill(&xb, T, -4, 4);
    fill(&cb, ROPEKIT_FLOAT32, -1, 1);
    fill(&sb, ROPEKIT_FLOAT32, -1, 1);
    poison(&ob);
    int64_t x2[2] = {N, F}, x2s[2] = {row, 1}, o3[3] = {G, N, F / G}, c2[2] = {N, rd};
    ropekit_tensor x = view(xb.h, T, 2, x2, x2s), o = view(ob.h, T, 3, o3, NULL);
    ropekit_tensor ct = view(cb.h, ROPEKIT_FLOAT32, 2, c2, NULL), st = view(sb.h, ROPEKIT_FLOAT32, 2, c2, NULL);
    ropekit_inverse_rotary_regroup_attrs a = ROPEKIT_INVERSE_ROTARY_REGROUP_ATTRS_INIT;
    a.num_heads = nh, a.head_dim = hd, a.rope_head_dim = rd, a.num_groups = G;
    ropekit_tensor dx = dview(&x, &xb), dout = dview(&o, &ob), dc = dview(&ct, &cb), ds = dview(&st, &sb);
    ropekit_status s1 = cpu_regroup(&x, rd ? &ct : NULL, rd ? &st : NULL, &a, &o);
    ropekit_status s2 = ropekit_cuda_inverse_rotary_regroup(&dx, rd ? &dc : NULL, rd ? &ds : NULL, &a, &dout, NULL);
    CK(cudaDeviceSynchronize());
    if (s1 != ROPEKIT_OK || s2 != ROPEKIT_OK) {
        result(0, "regroup %s: status cpu %s gpu %s (%s)", name, ropekit_status_str(s1),
               ropekit_status_str(s2), ropekit_cuda_last_error());
    } else {
        void *g = down(&ob);
        int64_t mu, d = compare("InverseRotaryRegroup", T, ob.h, g, ob.bytes / es, &mu);
        result(d == 0, "Regroup %-8s %-40s max ulp %lld, %lld of %zu differ", dn(T), name,
               (long long)mu, (long long)d, ob.bytes / es);
        free(g);
    }
    buf_free(&xb), buf_free(&ob), buf_free(&cb), buf_free(&sb);
}

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("check_cuda: no CUDA device, skipped\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("check_cuda on %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    g_rng ^= (uint64_t)time(NULL) * 0x2545F4914F6CDD1Dull; /* fresh inputs every run */
    printf("seed %llx\n", (unsigned long long)g_rng);
    ropekit_cuda_error_state *err = NULL;
    if (ropekit_cuda_error_state_create(&err) != ROPEKIT_OK) return 2;

    rotary_suite(err);
    int64_t count = 0;
    ropekit_status cs = ropekit_cuda_check_errors(err, NULL, &count);
    result(cs == ROPEKIT_OK && count == 0, "no id flagged in the valid runs (count %lld)", (long long)count);
    bad_ids_suite();

    const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    for (int di = 0; di < 3; ++di) {
        ropekit_dtype T = dts[di];
        qknorm_case(T, 2, 3, 16, 512, 64, 1, 0, 0, "DeepSeek-V4 row 512/64 fp8");
        qknorm_case(T, 2, 3, 16, 512, 64, 0, 0, 0, "512/64 no fp8");
        qknorm_case(T, 1, 4, 8, 512, 64, 1, 1, 0, "512/64 fp8 in place");
        qknorm_case(T, 2, 2, 5, 192, 64, 1, 0, 24, "192/64 fp8 strided query");
        qknorm_case(T, 2, 2, 3, 37, 6, 0, 0, 3, "37/6 odd nope (scalar)");
        qknorm_case(T, 1, 3, 4, 128, 0, 0, 0, 0, "128/0 no rope");
        /* layouts at the edges of the 16-bit kernels' conditions: rows only 4-byte aligned (the
         * register kernel), outputs only 4-byte or 8-byte aligned (the bulk-copy kernel's 64-bit
         * stores instead of its bulk stores), tables and weights 8-byte aligned, a row
         * count that is no multiple of 8 with kv and query rows in one batch, large rows (the
         * bfloat16 scale below 2^-9: products in float), several stages' worth of rows */
        {
            const qk_layout q4 = {2, 2, 0, 0, 0, 0.0}, o4 = {0, 0, 2, 0, 0, 0.0};
            const qk_layout t8 = {0, 0, 0, 2, 2, 0.0}, big = {0, 0, 0, 0, 0, 6000.0};
            const qk_layout tiny = {0, 0, 0, 0, 0, 1e-3}, o8 = {0, 0, 4, 0, 0, 0.0};
            qknorm_case_l(T, 2, 3, 16, 512, 64, 1, 0, 0, "512/64 fp8 rows 4-byte aligned", q4);
            qknorm_case_l(T, 2, 3, 16, 512, 64, 1, 0, 0, "512/64 fp8 outputs 4-byte aligned", o4);
            qknorm_case_l(T, 2, 3, 16, 512, 64, 1, 0, 0, "512/64 fp8 outputs 8-byte aligned", o8);
            qknorm_case_l(T, 2, 3, 16, 512, 64, 1, 0, 0, "512/64 fp8 tables, w 8-byte aligned", t8);
            qknorm_case_l(T, 1, 3, 4, 128, 64, 0, 0, 0, "128/64 15 rows (kv + query batch)", t8);
            qknorm_case_l(T, 2, 3, 16, 512, 64, 1, 0, 0, "512/64 fp8 values to 6000", big);
            qknorm_case_l(T, 2, 3, 16, 512, 64, 0, 0, 0, "512/64 values to 1e-3", tiny);
            qknorm_case_l(T, 3, 37, 9, 256, 64, 1, 1, 0, "256/64 fp8 in place, 1110 rows", tiny);
            qknorm_case_l(T, 2, 29, 7, 64, 0, 0, 0, 8, "64/0 strided query, 464 rows", q4);
        }
        /* prefill size: 67080 rows, past the 16-bit bulk-copy kernel's size threshold and
         * several times the rows its resident warps hold at once */
        qknorm_case(T, 1, 520, 128, 512, 64, 1, 0, 0, "DS-V4 520 tokens fp8 (67080 rows)");
        for (int gi = 0; gi < 3; ++gi) {
            int64_t G = gi == 0 ? 1 : gi == 1 ? 2 : 8;
            char name[64];
            snprintf(name, sizeof name, "16x512 rope 64 groups %lld", (long long)G);
            regroup_case(T, 9, 16, 512, 64, G, 0, name);
        }
        regroup_case(T, 7, 4, 64, 0, 2, 0, "4x64 rope 0 (pure regroup) groups 2");
        regroup_case(T, 5, 3, 10, 4, 3, 5, "3x10 rope 4 strided (scalar) groups 3");
        regroup_case(T, 6, 8, 512, 64, 8, 8, "8x512 rope 64 padded rows groups 8");
    }
    /* special values through the fast paths: rotary with 16-bit and float32 tables (the
     * same-type tables round in float, where inf - inf can appear), QKNorm with fp8 */
    g_special = 1;
    for (int di = 0; di < 3; ++di)
        for (int f32t = 0; f32t < 2; ++f32t) {
            ropekit_dtype T = dts[di], TT = f32t ? ROPEKIT_FLOAT32 : T;
            if (T == ROPEKIT_FLOAT32 && f32t) continue;
            for (int il = 0; il < 2; ++il) {
                rcase c;
                memset(&c, 0, sizeof c);
                c.T = T, c.TT = TT, c.interleaved = il, c.inner = 1, c.scale = 1.0f;
                c.op = OP_ONNX, c.B = 2, c.S = 33, c.N = 8, c.H = 128, c.P = 300, c.rank = 3;
                c.name = "special values (NaN, inf, huge, tiny)";
                run_rotary_case(&c, err);
            }
        }
    for (int di = 0; di < 3; ++di) {
        qknorm_case(dts[di], 2, 3, 16, 512, 64, 1, 0, 0, "special values 512/64 fp8");
        qknorm_case(dts[di], 2, 3, 16, 512, 64, 0, 0, 0, "special values 512/64");
    }
    g_special = 0;
    ropekit_cuda_error_state_destroy(err);

    printf("\nsummary: max ulp difference GPU vs CPU per op and dtype (elements compared)\n");
    for (int i = 0; i < g_nstats; ++i)
        printf("  %-22s %-9s max ulp %lld  differing %lld of %lld\n", g_stats[i].op,
               dn(g_stats[i].dt), (long long)g_stats[i].max_ulp, (long long)g_stats[i].diff,
               (long long)g_stats[i].total);
    printf("%d checks, %d failed\n", g_cases, g_fail);
    return g_fail ? 1 : 0;
}
