/* DeepSeek-V4 attention (transformers 5.x, dynamo export) -> QKNormRotaryEmbedding and
 * InverseRotaryRegroup (operators.md 4-5), run by libropekit_ort (--target ort: com.microsoft,
 * --target ropekit: ai.ropekit).
 *
 * Each RoPE of the layer is  Concat(Slice(X, :nope), [Cast](Add(Mul([Cast]Slice(X, nope:), c),
 * Mul([Cast]rotate_pairs, s))))  on the trailing rope_head_dim channels of X (B, N, S, H), with
 * c, s = Unsqueeze(repeat_interleave(table), 1). What X is decides the site:
 *   query   X = Mul(Transpose(Reshape(q, (B, S, N, H))), [Cast]rsqrt(mean(x^2) + eps))
 *   kv      X = Transpose(Reshape([Cast]Mul(w, Mul([Cast]k, rsqrt(...))), (B, S, 1, H)))
 *   inverse the Concat feeds Transpose(0,2,1,3) -> Reshape(-1, G, gd) -> Transpose(1,0,2) (the
 *           grouped output projection's input); its sin is repeat_interleave(-sin).
 * A query and a kv site with the same tables become one QKNormRotaryEmbedding (simulate_fp8 0:
 * the transformers model has no fp8 step), an inverse site one InverseRotaryRegroup.
 *
 * The structure only proposes; the decision is numeric. The original subgraph is evaluated
 * (eval.c: every op rounded to its value's type, as a runtime does) on probe inputs and compared
 * with ropekit's operator on the same inputs: float32 within a few ulp (the graph rounds each
 * product of the rotation, the operator once), 16-bit bit for bit except rare single-ulp flips
 * (at most 1% of the elements). A 16-bit graph whose rounding points differ from the operator's
 * (for example one that rounds the normalized kv to T before the weight multiply) fails that and
 * is refused with the measured difference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_internal.h"

#define PB 1 /* probe batch (exports bake the batch of the example into their reshapes) */
#define PS 3 /* probe sequence length */

typedef enum { QK_QUERY = 1, QK_KV = 2, QK_INV = 3 } qk_kind;

typedef struct {
    qk_kind kind;
    const char *out;    /* the Concat's output (query, kv) or the regroup's Transpose (inverse) */
    const char *x;      /* X */
    const char *src;    /* query: q (B, S, N*H); kv: k (B, S, H); inverse: X */
    const char *weight; /* kv: the norm weight (as the graph multiplies it) */
    const char *cos_ri, *sin_ri; /* (B, S, rd) tables; inverse: sin_ri is repeat_interleave(-sin) */
    const char *sin_src;         /* inverse: the (B, S, rd/2) sin that is negated */
    float eps;
    int64_t N, H, rd, G;
    int used;
} qk_part;

static const char *skip_cast(const rk_graph *ix, const char *v) {
    for (int i = 0; i < 4 && v; ++i) {
        Onnx__NodeProto *c = rk_producer_op(ix, v, "Cast");
        if (!c) break;
        v = rk_input(c, 0);
    }
    return v;
}

static Onnx__NodeProto *prod(const rk_graph *ix, const char *v, const char *op) {
    return v ? rk_producer_op(ix, skip_cast(ix, v), op) : NULL;
}

static int perm_is(const Onnx__NodeProto *t, const int64_t *p, size_t n) {
    const Onnx__AttributeProto *a = rk_node_attr(t, "perm");
    if (!a || a->n_ints != n) return 0;
    for (size_t i = 0; i < n; ++i)
        if (a->ints[i] != p[i]) return 0;
    return 1;
}

/* the table of Unsqueeze(repeat_interleave(t), 1): returns repeat_interleave(t), *src = t */
static const char *table_of(const rk_graph *ix, const char *u, const char **src) {
    Onnx__NodeProto *un = prod(ix, u, "Unsqueeze");
    const char *ri = un ? rk_input(un, 0) : NULL;
    Onnx__NodeProto *rs = prod(ix, ri, "Reshape");
    Onnx__NodeProto *ex = rs ? prod(ix, rk_input(rs, 0), "Expand") : NULL;
    Onnx__NodeProto *u2 = ex ? prod(ix, rk_input(ex, 0), "Unsqueeze") : NULL;
    if (!u2) return NULL;
    *src = rk_input(u2, 0);
    return ri;
}

/* eps of [Cast]Reciprocal(Sqrt(Add(ReduceMean(..), eps))) */
static int rsqrt_eps(const rk_graph *ix, const char *r, float *eps) {
    Onnx__NodeProto *rc = prod(ix, r, "Reciprocal");
    Onnx__NodeProto *sq = rc ? prod(ix, rk_input(rc, 0), "Sqrt") : NULL;
    Onnx__NodeProto *ad = sq ? prod(ix, rk_input(sq, 0), "Add") : NULL;
    if (!ad || ad->n_input != 2) return 0;
    for (int i = 0; i < 2; ++i)
        if (prod(ix, ad->input[1 - i], "ReduceMean") && rk_const_scalar_f(ix, ad->input[i], eps))
            return 1;
    return 0;
}

static int reshape_dims(const rk_graph *ix, const Onnx__NodeProto *rs, int64_t *d, size_t cap,
                        size_t *n) {
    return rs && rk_input(rs, 1) && rk_eval_i64(ix, rs->input[1], d, cap, n);
}

/* the RoPE tail around Concat `cat`; fills x, rd, cos/sin tables */
static int match_tail(const rk_graph *ix, const Onnx__NodeProto *cat, qk_part *p) {
    if (strcmp(cat->op_type, "Concat") || (cat->domain && cat->domain[0]) || cat->n_input != 2 ||
        cat->n_output != 1)
        return 0;
    Onnx__NodeProto *nope = rk_producer_op(ix, cat->input[0], "Slice");
    Onnx__NodeProto *add = prod(ix, cat->input[1], "Add");
    if (!nope || !add || add->n_input != 2) return 0;
    const char *x = rk_input(nope, 0);
    int64_t s0, e0, a0, st0;
    if (!x || !rk_slice_params(ix, nope, &s0, &e0, &a0, &st0) || s0 != 0 || st0 != 1) return 0;
    const char *cu = NULL, *su = NULL;
    for (int i = 0; i < 2; ++i) {
        Onnx__NodeProto *m = prod(ix, add->input[i], "Mul");
        if (!m || m->n_input != 2) return 0;
        for (int j = 0; j < 2; ++j) {
            Onnx__NodeProto *sl = prod(ix, m->input[j], "Slice");
            Onnx__NodeProto *rs = prod(ix, m->input[j], "Reshape");
            int64_t s1, e1, a1, st1;
            if (sl && rk_input(sl, 0) && !strcmp(sl->input[0], x) &&
                rk_slice_params(ix, sl, &s1, &e1, &a1, &st1) && st1 == 1 && s1 == e0 && a1 == a0 &&
                s1 < 0 && s1 >= -65536)
                cu = m->input[1 - j], p->rd = -s1;
            else if (rs)
                su = m->input[1 - j];
        }
    }
    if (!cu || !su || p->rd <= 0 || p->rd % 2) return 0;
    const char *csrc, *ssrc;
    p->cos_ri = table_of(ix, cu, &csrc);
    p->sin_ri = table_of(ix, su, &ssrc);
    if (!p->cos_ri || !p->sin_ri) return 0;
    p->sin_src = ssrc;
    p->x = x;
    p->out = cat->output[0];
    return 1;
}

static int classify(const rk_graph *ix, const Onnx__NodeProto *cat, qk_part *p) {
    static const int64_t p0213[4] = {0, 2, 1, 3}, p102[3] = {1, 0, 2};
    int64_t d[8];
    size_t n;
    Onnx__NodeProto *xm = rk_producer_op(ix, p->x, "Mul");
    Onnx__NodeProto *xt = rk_producer_op(ix, p->x, "Transpose");
    if (xm && xm->n_input == 2) { /* query */
        for (int i = 0; i < 2; ++i) {
            Onnx__NodeProto *t = rk_producer_op(ix, xm->input[i], "Transpose");
            Onnx__NodeProto *rs = t ? rk_producer_op(ix, rk_input(t, 0), "Reshape") : NULL;
            if (!rs || !perm_is(t, p0213, 4) || !reshape_dims(ix, rs, d, 8, &n) || n != 4 ||
                !rsqrt_eps(ix, xm->input[1 - i], &p->eps))
                continue;
            p->kind = QK_QUERY, p->src = rk_input(rs, 0), p->N = d[2], p->H = d[3];
            return p->src != NULL;
        }
        return 0;
    }
    if (xt && perm_is(xt, p0213, 4)) { /* kv */
        Onnx__NodeProto *rs = rk_producer_op(ix, rk_input(xt, 0), "Reshape");
        Onnx__NodeProto *wm = rs ? prod(ix, rk_input(rs, 0), "Mul") : NULL;
        if (!wm || wm->n_input != 2 || !reshape_dims(ix, rs, d, 8, &n) || n != 4 || d[2] != 1)
            return 0;
        for (int i = 0; i < 2; ++i) {
            const rk_value *wv = rk_graph_value(ix, skip_cast(ix, wm->input[i]));
            Onnx__NodeProto *inner = prod(ix, wm->input[1 - i], "Mul");
            if (!wv || !wv->initializer || !inner || inner->n_input != 2) continue;
            for (int j = 0; j < 2; ++j)
                if (rsqrt_eps(ix, inner->input[1 - j], &p->eps)) {
                    p->kind = QK_KV, p->weight = wm->input[i];
                    p->src = skip_cast(ix, inner->input[j]), p->N = 1, p->H = d[3];
                    return p->src != NULL;
                }
        }
        return 0;
    }
    /* inverse: Concat -> Transpose(0,2,1,3) -> Reshape(-1, G, gd) -> Transpose(1,0,2) */
    Onnx__NodeProto *t1 = rk_single_consumer(ix, cat->output[0]);
    Onnx__NodeProto *rs = t1 && !strcmp(t1->op_type, "Transpose") && perm_is(t1, p0213, 4)
                              ? rk_single_consumer(ix, t1->output[0])
                              : NULL;
    Onnx__NodeProto *t2 =
        rs && !strcmp(rs->op_type, "Reshape") ? rk_single_consumer(ix, rs->output[0]) : NULL;
    if (!t2 || strcmp(t2->op_type, "Transpose") || !perm_is(t2, p102, 3) ||
        !reshape_dims(ix, rs, d, 8, &n) || n != 3 || d[1] <= 0 || d[2] <= 0)
        return 0;
    if (!prod(ix, p->sin_src, "Neg")) return 0;
    p->kind = QK_INV, p->src = p->x, p->G = d[1], p->out = t2->output[0];
    p->sin_src = rk_input(prod(ix, p->sin_src, "Neg"), 0);
    return p->sin_src != NULL;
}

/* ---- numeric verification ---------------------------------------------------------------- */

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static ropekit_dtype rkdt(int32_t t) {
    return t == RK_DT_FLOAT16    ? ROPEKIT_FLOAT16
           : t == RK_DT_BFLOAT16 ? ROPEKIT_BFLOAT16
                                 : ROPEKIT_FLOAT32;
}

/* values rounded to T (as doubles) and as T bytes */
static void probe_fill(uint32_t *seed, int32_t T, double *v, void *bytes, int64_t n, double scale) {
    ropekit_dtype dt = rkdt(T);
    for (int64_t i = 0; i < n; ++i) {
        double r = ((double)lcg(seed) / 16777216.0 * 2.0 - 1.0) * scale;
        rk_store(bytes, dt, i, (float)r);
        v[i] = rk_load(bytes, dt, i);
    }
}

/* compare the graph's values g (doubles, already in T) with the operator's y (T bytes) where
 * element i of y is g[map(i)]; returns 0 and a reason when they differ beyond rounding */
typedef struct {
    int64_t n, differ;
    double max_abs, max_ref;
} qk_cmp;

static void cmp_add(qk_cmp *c, double g, double y) {
    double d = fabs(g - y);
    c->n++;
    if (d > 0) c->differ++;
    if (d > c->max_abs) c->max_abs = d;
    if (fabs(g) > c->max_ref) c->max_ref = fabs(g);
}

static int cmp_ok(const qk_cmp *c, int32_t T, char *why, size_t nwhy, const char *what) {
    if (T == RK_DT_FLOAT) {
        if (c->max_abs <= 1e-6 * (c->max_ref > 1 ? c->max_ref : 1)) return 1;
    } else {
        double ulp = ldexp(c->max_ref > 0 ? c->max_ref : 1, T == RK_DT_FLOAT16 ? -10 : -7);
        if (c->max_abs <= ulp && c->differ * 100 <= c->n) return 1;
    }
    snprintf(why, nwhy,
             "the graph's %s differs from the operator's contract: %lld of %lld "
             "elements, max |d| %.3g at scale %.3g (its rounding points differ)",
             what, (long long)c->differ, (long long)c->n, c->max_abs, c->max_ref);
    return 0;
}

static int32_t elem_of(const rk_graph *ix, const char *v) {
    rk_shape s;
    rk_value_rank(ix, v, &s);
    return s.elem_type;
}

static int verify_qk(const rk_graph *ix, const qk_part *q, const qk_part *k, int32_t T, char *why,
                     size_t nwhy) {
    int64_t N = q->N, H = q->H, rd = q->rd, B = PB, S = PS;
    int64_t nq = B * S * N * H, nk = B * S * H, nt = B * S * rd;
    double *dq = malloc(sizeof(double) * (size_t)(nq + nk + 2 * nt + H));
    char *bq = malloc((size_t)(2 * nq + 2 * nk) * 4 + 16);
    float *ct = malloc(sizeof(float) * (size_t)(2 * nt + H));
    int ok = 0;
    rk_eval *e = NULL;
    if (!dq || !bq || !ct) {
        snprintf(why, nwhy, "out of memory");
        goto done;
    }
    double *dk = dq + nq, *dc = dk + nk, *ds = dc + nt;
    char *bk = bq + nq * 4, *oq = bk + nk * 4, *ok_ = oq + nq * 4;
    float *cf = ct, *sf = ct + nt, *wf = sf + nt;
    uint32_t seed = 12345u;
    probe_fill(&seed, T, dq, bq, nq, 3.0);
    probe_fill(&seed, T, dk, bk, nk, 2.0);
    int32_t TT = elem_of(ix, q->cos_ri) ? elem_of(ix, q->cos_ri) : T;
    for (int64_t i = 0; i < nt; i += 2) { /* pre-interleaved angles, in the tables' type */
        double a = ((double)lcg(&seed) / 16777216.0 * 2.0 - 1.0) * 3.0;
        char tmp[8];
        rk_store(tmp, rkdt(TT), 0, (float)cos(a));
        rk_store(tmp, rkdt(TT), 1, (float)sin(a));
        dc[i] = dc[i + 1] = rk_load(tmp, rkdt(TT), 0);
        ds[i] = ds[i + 1] = rk_load(tmp, rkdt(TT), 1);
    }
    for (int64_t i = 0; i < nt; ++i)
        cf[i] = (float)dc[i], sf[i] = (float)ds[i];
    e = rk_eval_new(ix, (int64_t)1 << 22, (int64_t)1 << 25);
    if (!e) {
        snprintf(why, nwhy, "out of memory");
        goto done;
    }
    int64_t dims_q[3] = {B, S, N * H}, dims_k[3] = {B, S, H}, dims_t[3] = {B, S, rd};
    rk_eval_bind(e, q->src, T, 3, dims_q, dq);
    rk_eval_bind(e, k->src, T, 3, dims_k, dk);
    rk_eval_bind(e, q->cos_ri, TT, 3, dims_t, dc);
    rk_eval_bind(e, q->sin_ri, TT, 3, dims_t, ds);
    const rk_ten *gw = rk_eval_get(e, k->weight);
    const rk_ten *gq = gw ? rk_eval_get(e, q->out) : NULL;
    const rk_ten *gk = gq ? rk_eval_get(e, k->out) : NULL;
    if (!gk) {
        snprintf(why, nwhy, "the attention subgraph cannot be evaluated: %s",
                 rk_s(rk_eval_error(e)));
        goto done;
    }
    if (gw->n != H || gq->n != nq || gk->n != nk) {
        snprintf(why, nwhy, "unexpected sizes in the attention subgraph");
        goto done;
    }
    for (int64_t i = 0; i < H; ++i)
        wf[i] = (float)gw->v[i];
    ropekit_dtype dt = rkdt(T);
    int64_t wd[1] = {H}, qod[4] = {B, S, N, H};
    ropekit_tensor tq = ropekit_tensor_contiguous(bq, dt, 3, dims_q);
    ropekit_tensor tk = ropekit_tensor_contiguous(bk, dt, 3, dims_k);
    ropekit_tensor tw = ropekit_tensor_contiguous(wf, ROPEKIT_FLOAT32, 1, wd);
    ropekit_tensor tc = ropekit_tensor_contiguous(cf, ROPEKIT_FLOAT32, 3, dims_t);
    ropekit_tensor ts = ropekit_tensor_contiguous(sf, ROPEKIT_FLOAT32, 3, dims_t);
    ropekit_tensor tqo = ropekit_tensor_contiguous(oq, dt, 4, qod);
    ropekit_tensor tko = ropekit_tensor_contiguous(ok_, dt, 3, dims_k);
    ropekit_qknorm_rotary_embedding_attrs at = {N, H, rd, q->eps, 0};
    if (ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &at, &tqo, &tko) != ROPEKIT_OK) {
        snprintf(why, nwhy, "the operator refuses these sizes: %s", ropekit_last_error());
        goto done;
    }
    qk_cmp cq = {0}, ck = {0};
    for (int64_t s = 0; s < S; ++s) /* graph (B, N, S, H), operator (B, S, N, H) */
        for (int64_t h = 0; h < N; ++h)
            for (int64_t c = 0; c < H; ++c)
                cmp_add(&cq, gq->v[(h * S + s) * H + c], rk_load(oq, dt, (s * N + h) * H + c));
    for (int64_t i = 0; i < nk; ++i)
        cmp_add(&ck, gk->v[i], rk_load(ok_, dt, i));
    ok = cmp_ok(&cq, T, why, nwhy, "normalized, rotated query") &&
         cmp_ok(&ck, T, why, nwhy, "normalized, rotated kv");
done:
    rk_eval_free(e);
    free(dq), free(bq), free(ct);
    return ok;
}

static int verify_inv(const rk_graph *ix, const qk_part *v, const char *sin_ri, int32_t T,
                      char *why, size_t nwhy) {
    int64_t N = v->N, H = v->H, rd = v->rd, S = PS, G = v->G, F = N * H;
    int64_t nx = PB * N * S * H, nt = PB * S * rd;
    double *dx = malloc(sizeof(double) * (size_t)(nx + nt + nt / 2));
    char *bx = malloc((size_t)(3 * nx) * 4 + 16);
    float *ct = malloc(sizeof(float) * (size_t)(2 * nt));
    int ok = 0;
    rk_eval *e = NULL;
    if (!dx || !bx || !ct) {
        snprintf(why, nwhy, "out of memory");
        goto done;
    }
    double *dc = dx + nx, *ds = dc + nt;
    char *bx2 = bx + nx * 4, *by = bx2 + nx * 4;
    uint32_t seed = 777u;
    probe_fill(&seed, T, dx, bx, nx, 2.0);
    int32_t TT = elem_of(ix, v->cos_ri) ? elem_of(ix, v->cos_ri) : T;
    for (int64_t i = 0; i < nt / 2; ++i) {
        double a = ((double)lcg(&seed) / 16777216.0 * 2.0 - 1.0) * 3.0;
        char tmp[8];
        rk_store(tmp, rkdt(TT), 0, (float)cos(a));
        rk_store(tmp, rkdt(TT), 1, (float)sin(a));
        dc[2 * i] = dc[2 * i + 1] = rk_load(tmp, rkdt(TT), 0);
        ds[i] = rk_load(tmp, rkdt(TT), 1);
    }
    e = rk_eval_new(ix, (int64_t)1 << 22, (int64_t)1 << 25);
    if (!e) {
        snprintf(why, nwhy, "out of memory");
        goto done;
    }
    int64_t dxd[4] = {PB, N, S, H}, dtd[3] = {PB, S, rd}, dsd[3] = {PB, S, rd / 2};
    rk_eval_bind(e, v->x, T, 4, dxd, dx);
    rk_eval_bind(e, v->cos_ri, TT, 3, dtd, dc);
    rk_eval_bind(e, v->sin_src, TT, 3, dsd, ds);
    const rk_ten *gs = rk_eval_get(e, sin_ri);
    const rk_ten *gy = gs ? rk_eval_get(e, v->out) : NULL;
    if (!gy || gy->n != nx || gs->n != nt) {
        snprintf(why, nwhy, "the output regroup cannot be evaluated: %s",
                 gy ? "unexpected sizes" : rk_s(rk_eval_error(e)));
        goto done;
    }
    ropekit_dtype dt = rkdt(T);
    for (int64_t s = 0; s < S; ++s) /* (B, N, S, H) -> (N_tokens, N*H) */
        for (int64_t h = 0; h < N; ++h)
            for (int64_t c = 0; c < H; ++c)
                rk_store(bx2, dt, s * F + h * H + c, (float)dx[(h * S + s) * H + c]);
    for (int64_t i = 0; i < nt; ++i)
        ct[i] = (float)dc[i], ct[nt + i] = (float)gs->v[i];
    int64_t xd[2] = {S, F}, td[2] = {S, rd}, yd[3] = {G, S, F / G};
    ropekit_tensor tx = ropekit_tensor_contiguous(bx2, dt, 2, xd);
    ropekit_tensor tc = ropekit_tensor_contiguous(ct, ROPEKIT_FLOAT32, 2, td);
    ropekit_tensor ts = ropekit_tensor_contiguous(ct + nt, ROPEKIT_FLOAT32, 2, td);
    ropekit_tensor ty = ropekit_tensor_contiguous(by, dt, 3, yd);
    ropekit_inverse_rotary_regroup_attrs at = {N, H, rd, G};
    if (ropekit_inverse_rotary_regroup(&tx, &tc, &ts, &at, &ty) != ROPEKIT_OK) {
        snprintf(why, nwhy, "the operator refuses these sizes: %s", ropekit_last_error());
        goto done;
    }
    qk_cmp c = {0};
    for (int64_t i = 0; i < nx; ++i)
        cmp_add(&c, gy->v[i], rk_load(by, dt, i));
    ok = cmp_ok(&c, T, why, nwhy, "inverse rotation and regroup");
done:
    rk_eval_free(e);
    free(dx), free(bx), free(ct);
    return ok;
}

/* ---- rewriting ------------------------------------------------------------------------------ */

static ropekit_status add_node(rk_graph *ix, const char *op, const char *domain, const char *base,
                               const char *const *in, size_t nin, char **out, size_t nout,
                               Onnx__NodeProto **made) {
    /* node names must be unique too: a running count, then made unique among values */
    static _Thread_local unsigned count;
    char numbered[96];
    snprintf(numbered, sizeof numbered, "%s_n%u", base, ++count);
    char *name = rk_graph_unique_name(ix, numbered);
    if (!name) return RK_OOM();
    Onnx__NodeProto *n = rk_new_node(op, domain, name, in, nin, (const char *const *)out, nout);
    free(name);
    if (!n) return RK_OOM();
    if (made) *made = n;
    return ROPEKIT_OK;
}

/* where inserted nodes go: at the replaced value's producer, or just after their inputs */
static _Thread_local int32_t g_hint;

static void set_hint(const rk_graph *ix, const char *replaced) {
    const rk_value *v = rk_graph_value(ix, replaced);
    g_hint = v && v->producer >= 0 ? v->producer : (int32_t)ix->g->n_node;
}

static ropekit_status insert(rk_graph *ix, Onnx__NodeProto *n) {
    return rk_graph_insert_node(ix, n, g_hint, NULL);
}

/* a Cast to float of v (or v itself when it is float already), name in *out (malloc'd) */
static ropekit_status to_float(rk_graph *ix, const char *v, char **out) {
    if (elem_of(ix, v) == RK_DT_FLOAT) return (*out = rk_strdup(v)) ? ROPEKIT_OK : RK_OOM();
    *out = rk_graph_unique_name(ix, "ropekit_f32");
    if (!*out) return RK_OOM();
    Onnx__NodeProto *n = NULL;
    RK_TRY(add_node(ix, "Cast", "", "ropekit_cast", &v, 1, out, 1, &n));
    if (rk_node_add_attr_int(n, "to", RK_DT_FLOAT) != ROPEKIT_OK) {
        rk_node_free(n);
        return RK_OOM();
    }
    return insert(ix, n);
}

static ropekit_status int_init(rk_graph *ix, const int64_t *v, size_t n, char **name) {
    *name = rk_graph_unique_name(ix, "ropekit_shape");
    if (!*name) return RK_OOM();
    int64_t dims[1] = {(int64_t)n};
    Onnx__TensorProto *t = rk_new_tensor(*name, RK_DT_INT64, dims, 1, v, n * sizeof *v);
    return t ? rk_graph_add_initializer(ix, t) : RK_OOM();
}

/* route the readers of `old` to `fresh` (and drop what became dead) */
static ropekit_status replace(rk_graph *ix, const char *old, const char *fresh) {
    RK_TRY(rk_graph_replace_uses(ix, old, fresh));
    const rk_value *v = rk_graph_value(ix, old);
    if (v && v->producer >= 0) {
        int32_t pos = v->producer;
        RK_TRY(rk_graph_remove_nodes(ix, &pos, 1, NULL));
    }
    return ROPEKIT_OK;
}

static ropekit_status rewrite_qk(rk_graph *ix, const qk_part *q, const qk_part *k,
                                 const char *domain, int64_t idx) {
    char *w = NULL, *c = NULL, *s = NULL, *outs[2] = {NULL, NULL}, *qt = NULL, *ku = NULL,
         *axes = NULL, *oq = rk_strdup(q->out), *ok = rk_strdup(k->out);
    char base[64];
    ropekit_status st = oq && ok ? ROPEKIT_OK : RK_OOM();
    set_hint(ix, q->out);
    if (st == ROPEKIT_OK) st = to_float(ix, k->weight, &w);
    if (st == ROPEKIT_OK) st = to_float(ix, q->cos_ri, &c);
    if (st == ROPEKIT_OK) st = to_float(ix, q->sin_ri, &s);
    if (st == ROPEKIT_OK) {
        outs[0] = rk_graph_unique_name(ix, "ropekit_query_out");
        outs[1] = rk_graph_unique_name(ix, "ropekit_kv_out");
        qt = rk_graph_unique_name(ix, "ropekit_query_bnsh");
        ku = rk_graph_unique_name(ix, "ropekit_kv_b1sh");
        if (!outs[0] || !outs[1] || !qt || !ku) st = RK_OOM();
    }
    Onnx__NodeProto *n = NULL;
    if (st == ROPEKIT_OK) {
        const char *in[5] = {q->src, k->src, w, c, s};
        snprintf(base, sizeof base, "ropekit_qknorm_%lld", (long long)idx);
        st = add_node(ix, "QKNormRotaryEmbedding", domain, base, in, 5, outs, 2, &n);
    }
    if (st == ROPEKIT_OK && ((st = rk_node_add_attr_int(n, "num_heads", q->N)) ||
                             (st = rk_node_add_attr_int(n, "head_dim", q->H)) ||
                             (st = rk_node_add_attr_int(n, "rope_head_dim", q->rd)) ||
                             (st = rk_node_add_attr_float(n, "epsilon", q->eps)) ||
                             (st = rk_node_add_attr_int(n, "simulate_fp8", 0)))) {
        rk_node_free(n);
        n = NULL;
    }
    if (st == ROPEKIT_OK) st = insert(ix, n);
    if (st == ROPEKIT_OK) {
        const char *in = outs[0];
        st = add_node(ix, "Transpose", "", "ropekit_transpose", &in, 1, &qt, 1, &n);
        static const int64_t perm[4] = {0, 2, 1, 3};
        if (st == ROPEKIT_OK && (st = rk_node_add_attr_ints(n, "perm", perm, 4)) != ROPEKIT_OK)
            rk_node_free(n);
        if (st == ROPEKIT_OK) st = insert(ix, n);
    }
    if (st == ROPEKIT_OK) {
        static const int64_t one[1] = {1};
        st = int_init(ix, one, 1, &axes);
        const char *in[2] = {outs[1], axes};
        if (st == ROPEKIT_OK)
            st = add_node(ix, "Unsqueeze", "", "ropekit_unsqueeze", in, 2, &ku, 1, &n);
        if (st == ROPEKIT_OK) st = insert(ix, n);
    }
    if (st == ROPEKIT_OK) st = replace(ix, oq, qt);
    if (st == ROPEKIT_OK) st = replace(ix, ok, ku);
    free(w), free(c), free(s), free(outs[0]), free(outs[1]), free(qt), free(ku), free(axes);
    free(oq), free(ok);
    return st;
}

static ropekit_status rewrite_inv(rk_graph *ix, const qk_part *v, const char *sin_ri,
                                  const char *domain, int64_t idx) {
    static const int64_t perm[4] = {0, 2, 1, 3};
    int64_t flat[2] = {-1, v->N * v->H}, tflat[2] = {-1, v->rd};
    char *c = NULL, *s = NULL, *t = NULL, *x2 = NULL, *c2 = NULL, *s2 = NULL, *sh = NULL,
         *tsh = NULL, *y = NULL, *old = rk_strdup(v->out);
    char base[64];
    Onnx__NodeProto *n = NULL;
    ropekit_status st = old ? ROPEKIT_OK : RK_OOM();
    set_hint(ix, v->out);
    if (st == ROPEKIT_OK) st = to_float(ix, v->cos_ri, &c);
    if (st == ROPEKIT_OK) st = to_float(ix, sin_ri, &s);
    if (st == ROPEKIT_OK) st = int_init(ix, flat, 2, &sh);
    if (st == ROPEKIT_OK) st = int_init(ix, tflat, 2, &tsh);
    if (st == ROPEKIT_OK) {
        t = rk_graph_unique_name(ix, "ropekit_bsnh");
        x2 = rk_graph_unique_name(ix, "ropekit_rows");
        c2 = rk_graph_unique_name(ix, "ropekit_cos_rows");
        s2 = rk_graph_unique_name(ix, "ropekit_sin_rows");
        y = rk_graph_unique_name(ix, "ropekit_groups");
        if (!t || !x2 || !c2 || !s2 || !y) st = RK_OOM();
    }
    if (st == ROPEKIT_OK) {
        st = add_node(ix, "Transpose", "", "ropekit_transpose", &v->x, 1, &t, 1, &n);
        if (st == ROPEKIT_OK && (st = rk_node_add_attr_ints(n, "perm", perm, 4)) != ROPEKIT_OK)
            rk_node_free(n);
        if (st == ROPEKIT_OK) st = insert(ix, n);
    }
    const char *r1[2] = {t, sh}, *r2[2] = {c, tsh}, *r3[2] = {s, tsh};
    if (st == ROPEKIT_OK &&
        (st = add_node(ix, "Reshape", "", "ropekit_reshape", r1, 2, &x2, 1, &n)) == ROPEKIT_OK)
        st = insert(ix, n);
    if (st == ROPEKIT_OK &&
        (st = add_node(ix, "Reshape", "", "ropekit_reshape", r2, 2, &c2, 1, &n)) == ROPEKIT_OK)
        st = insert(ix, n);
    if (st == ROPEKIT_OK &&
        (st = add_node(ix, "Reshape", "", "ropekit_reshape", r3, 2, &s2, 1, &n)) == ROPEKIT_OK)
        st = insert(ix, n);
    if (st == ROPEKIT_OK) {
        const char *in[3] = {x2, c2, s2};
        snprintf(base, sizeof base, "ropekit_regroup_%lld", (long long)idx);
        st = add_node(ix, "InverseRotaryRegroup", domain, base, in, 3, &y, 1, &n);
        if (st == ROPEKIT_OK && ((st = rk_node_add_attr_int(n, "num_heads", v->N)) ||
                                 (st = rk_node_add_attr_int(n, "head_dim", v->H)) ||
                                 (st = rk_node_add_attr_int(n, "rope_head_dim", v->rd)) ||
                                 (st = rk_node_add_attr_int(n, "num_groups", v->G))))
            rk_node_free(n);
        if (st == ROPEKIT_OK) st = insert(ix, n);
    }
    if (st == ROPEKIT_OK) st = replace(ix, old, y);
    free(c), free(s), free(t), free(x2), free(c2), free(s2), free(sh), free(tsh), free(y),
        free(old);
    return st;
}

/* ---- the pass ------------------------------------------------------------------------------- */

static void parts_free(qk_part *parts, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        qk_part *p = &parts[i];
        free((char *)p->out), free((char *)p->x), free((char *)p->src), free((char *)p->weight);
        free((char *)p->cos_ri), free((char *)p->sin_ri), free((char *)p->sin_src);
    }
    free(parts);
}

ropekit_status rk_fuse_qknorm(rk_graph *ix, const char *domain, int dry_run, rk_buf *log,
                              int64_t *n_found, int64_t *n_fused) {
    *n_found = *n_fused = 0;
    size_t cap = 16, n = 0;
    qk_part *parts = calloc(cap, sizeof *parts);
    if (!parts) return RK_OOM();
    ropekit_status st = ROPEKIT_OK;
    for (size_t i = 0; i < ix->g->n_node; ++i) {
        qk_part p = {0};
        if (!match_tail(ix, ix->g->node[i], &p) || !classify(ix, ix->g->node[i], &p)) continue;
        /* names are copied: the rewrite frees the nodes they live in */
        const char **f[7] = {&p.out, &p.x, &p.src, &p.weight, &p.cos_ri, &p.sin_ri, &p.sin_src};
        int oom = 0;
        for (int k = 0; k < 7; ++k)
            if (*f[k] && !(*f[k] = rk_strdup(*f[k]))) oom = 1;
        if (oom) {
            parts_free(parts, n);
            return RK_OOM();
        }
        if (n == cap) {
            qk_part *np = realloc(parts, 2 * cap * sizeof *np);
            if (!np) {
                parts_free(parts, n);
                return RK_OOM();
            }
            parts = np, cap *= 2;
        }
        parts[n++] = p;
    }
    /* pair each query with the kv of the same tables; each inverse with that pair's sin */
    typedef struct {
        qk_part *q, *k, *v;
        char why[RK_REASON], inv_why[RK_REASON];
    } group;
    group *gs = calloc(n ? n : 1, sizeof *gs);
    size_t ng = 0;
    if (!gs) {
        parts_free(parts, n);
        return RK_OOM();
    }
    for (size_t i = 0; i < n; ++i) {
        if (parts[i].kind != QK_QUERY) continue;
        group *g = &gs[ng++];
        g->q = &parts[i];
        for (size_t j = 0; j < n && !g->k; ++j)
            if (parts[j].kind == QK_KV && !parts[j].used &&
                !strcmp(parts[j].cos_ri, g->q->cos_ri) && !strcmp(parts[j].sin_ri, g->q->sin_ri) &&
                parts[j].H == g->q->H && parts[j].rd == g->q->rd)
                g->k = &parts[j], parts[j].used = 1;
        for (size_t j = 0; j < n && !g->v; ++j)
            if (parts[j].kind == QK_INV && !parts[j].used &&
                !strcmp(parts[j].cos_ri, g->q->cos_ri) &&
                !strcmp(parts[j].sin_src, g->q->sin_src) && parts[j].rd == g->q->rd)
                g->v = &parts[j], parts[j].used = 1, parts[j].N = g->q->N, parts[j].H = g->q->H;
        int32_t T = elem_of(ix, g->q->src);
        if (!g->k)
            snprintf(g->why, RK_REASON, "no kv norm + RoPE with the same tables");
        else if (g->k->eps != g->q->eps)
            snprintf(g->why, RK_REASON, "the query and kv norms use different epsilons (%g, %g)",
                     (double)g->q->eps, (double)g->k->eps);
        else if (T != RK_DT_FLOAT && T != RK_DT_FLOAT16 && T != RK_DT_BFLOAT16)
            snprintf(g->why, RK_REASON,
                     "the activation type of '%s' is unknown or not float, "
                     "float16, bfloat16",
                     g->q->src);
        else if (elem_of(ix, g->k->src) != T)
            snprintf(g->why, RK_REASON, "query and kv have different types");
        else if (g->q->N <= 0 || g->q->H <= 0 || g->q->rd > g->q->H || g->q->N > 4096 ||
                 g->q->H > 65536 || g->q->N * g->q->H > ((int64_t)1 << 20))
            snprintf(g->why, RK_REASON, "the head sizes are unknown or out of range (%lld x %lld)",
                     (long long)g->q->N, (long long)g->q->H);
        else if (verify_qk(ix, g->q, g->k, T, g->why, RK_REASON) && g->v) {
            int32_t TX = elem_of(ix, g->v->x) ? elem_of(ix, g->v->x) : T;
            if (g->v->G <= 0 || g->v->G > g->q->N * g->q->H || (g->q->N * g->q->H) % g->v->G)
                snprintf(g->inv_why, RK_REASON, "%lld groups do not divide the heads",
                         (long long)g->v->G);
            else
                verify_inv(ix, g->v, g->q->sin_ri, TX, g->inv_why, RK_REASON);
            if (g->inv_why[0]) g->v = NULL; /* the norm + RoPE is still fused */
        }
    }
    for (size_t i = 0; i < ng; ++i) {
        group *g = &gs[i];
        *n_found += 1;
        int ok = !g->why[0];
        rk_buf_printf(log,
                      "attention %zu  QKNormRotaryEmbedding  q=%s kv=%s  heads %lld x %lld, "
                      "rope %lld  %s%s\n",
                      i, g->q->src, g->k ? g->k->src : "?", (long long)g->q->N, (long long)g->q->H,
                      (long long)g->q->rd,
                      ok ? (dry_run ? "fusable" : "fused") : "skipped: ", ok ? "" : g->why);
        if (ok && g->v)
            rk_buf_printf(log, "attention %zu  InverseRotaryRegroup   x=%s  groups %lld  %s\n", i,
                          g->v->x, (long long)g->v->G, dry_run ? "fusable" : "fused");
        else if (ok)
            rk_buf_printf(log, "attention %zu  InverseRotaryRegroup   %s%s\n", i,
                          g->inv_why[0] ? "skipped: " : "not found", g->inv_why);
    }
    rk_match_end(); /* the graph changes from here on */
    for (size_t i = 0; st == ROPEKIT_OK && !dry_run && i < ng; ++i) {
        group *g = &gs[i];
        if (g->why[0]) continue;
        st = rewrite_qk(ix, g->q, g->k, domain, (int64_t)i);
        *n_fused += st == ROPEKIT_OK;
        if (st == ROPEKIT_OK && g->v) {
            st = rewrite_inv(ix, g->v, g->q->sin_ri, domain, (int64_t)i);
            *n_fused += st == ROPEKIT_OK;
        }
    }
    free(gs);
    parts_free(parts, n);
    return st;
}

ropekit_status rk_model_set_metadata(Onnx__ModelProto *m, const char *key, const char *value) {
    for (size_t i = 0; i < m->n_metadata_props; ++i)
        if (m->metadata_props[i]->key && !strcmp(m->metadata_props[i]->key, key)) {
            char *v = rk_strdup(value);
            if (!v) return RK_OOM();
            free(m->metadata_props[i]->value);
            m->metadata_props[i]->value = v;
            return ROPEKIT_OK;
        }
    Onnx__StringStringEntryProto **np =
        realloc(m->metadata_props, (m->n_metadata_props + 1) * sizeof *np);
    if (!np) return RK_OOM();
    m->metadata_props = np;
    Onnx__StringStringEntryProto *e = malloc(sizeof *e);
    if (!e) return RK_OOM();
    onnx__string_string_entry_proto__init(e);
    e->key = rk_strdup(key);
    e->value = rk_strdup(value);
    if (!e->key || !e->value) {
        free(e->key), free(e->value), free(e);
        return RK_OOM();
    }
    m->metadata_props[m->n_metadata_props++] = e;
    return ROPEKIT_OK;
}
