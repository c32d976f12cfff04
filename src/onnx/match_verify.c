/* Never a wrong fusion: every site a matcher accepts is checked numerically before it is
 * rewritten. The original subgraph (from the rotated tensor x and the position ids to the site's
 * output) is evaluated on probe inputs with the evaluator of eval.c; the fused operator runs on
 * the same inputs with the tables the rewrite would write (ropekit's CPU operators, bit-identical
 * to the scalar reference in src/cpu/ref.c). Any disagreement beyond rounding, or a subgraph
 * that cannot be evaluated (an op the evaluator does not know, shapes that do not fit: the
 * original would fail too), refuses the site with the reason.
 *
 * Probes: batch 2, sequence 3 (symbolic dims of graph inputs named like those of the position
 * ids get the same values), x random in [-1, 1] in its element type, positions spread over the
 * table's first 8192 rows (0, the last probed row, and values between; different per batch row,
 * so a table that ignores the batch or the token is caught). All sites share one evaluator, so the
 * angle subgraph they share is evaluated once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_internal.h"

/* batch and sequence of the probes: 2 x 3, or the graph's own where its shapes are static */
static _Thread_local int64_t tl_probe_b = 2, tl_probe_s = 3;
#define PROBE_B tl_probe_b
#define PROBE_S tl_probe_s
#define PROBE_MAX_BS 1024
#define PROBE_MAX_POS 8192
#define MAX_ELEMS ((int64_t)1 << 22)
#define BUDGET ((int64_t)1 << 25)

static ropekit_dtype to_dtype(int32_t t) {
    return t == RK_DT_FLOAT16    ? ROPEKIT_FLOAT16
           : t == RK_DT_BFLOAT16 ? ROPEKIT_BFLOAT16
                                 : ROPEKIT_FLOAT32;
}

/* dims of a value's declared type, by name, into the evaluator */
static void name_dims(rk_eval *e, const rk_graph *ix, const char *name, const int64_t *probe,
                      int rank) {
    const rk_value *v = rk_graph_value(ix, name);
    const Onnx__TypeProto *tp = v && v->info ? v->info->type : NULL;
    const Onnx__TypeProto__Tensor *tt = tp ? tp->tensor_type : NULL;
    if (!tt || !tt->shape || (int)tt->shape->n_dim != rank) return;
    for (int i = 0; i < rank; ++i) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        if (d && d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
            d->dim_param && d->dim_param[0])
            rk_eval_set_dim(e, d->dim_param, probe[i]);
    }
}

/* the site's static batch and sequence where known, else 2 x 3 */
static void probe_bs(const rk_site *s, int64_t *b, int64_t *t) {
    int64_t B = s->xdims[0], S = s->layout == RK_LAYOUT_BSNH ? s->xdims[1] : s->xdims[2];
    *b = B > 0 ? B : 2;
    *t = S > 0 ? S : 3;
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* probe inputs of one site: x's dims and values */
static int site_x_dims(const rk_site *s, int64_t *dims) {
    int64_t N = s->num_heads > 0 ? s->num_heads : 2;
    int64_t H = s->head_size > 0 ? s->head_size : s->rotary_dim;
    if (H <= 0 || H > 65536 || N > 4096) return 0;
    if (s->layout == RK_LAYOUT_BSNH)
        dims[0] = PROBE_B, dims[1] = PROBE_S, dims[2] = N, dims[3] = H;
    else
        dims[0] = PROBE_B, dims[1] = N, dims[2] = PROBE_S, dims[3] = H;
    return 1;
}

/* positions: shape (B, S) or (3, B, S), values in [0, L) */
static void probe_positions(int64_t L, int mrope, double *p, int64_t *n) {
    static const double frac[] = {0.0, 1.0, 0.5, 0.125, 0.75, 0.3, 0.9, 0.05, 0.6};
    int64_t k = (mrope ? 3 : 1) * PROBE_B * PROBE_S;
    for (int64_t i = 0; i < k; ++i) {
        double f = frac[i % (int64_t)(sizeof frac / sizeof *frac)];
        int64_t v = (int64_t)floor(f * (double)(L - 1));
        if (mrope && i >= PROBE_B * PROBE_S) v = (v * 7 + i) % L; /* other streams differ */
        p[i] = (double)(v < 0 ? 0 : v >= L ? L - 1 : v);
    }
    *n = k;
}

static void refuse(rk_site *s, const char *fmt, const char *detail) {
    snprintf(s->reason, RK_REASON, fmt, detail);
}

/* tables already built for an angle source (most sites share one) */
#define TABLE_CACHE 8
typedef struct table_cache {
    const rk_angles *a[TABLE_CACHE];
    int32_t type[TABLE_CACHE];
    char *cos[TABLE_CACHE], *sin[TABLE_CACHE];
    int64_t rows[TABLE_CACHE];
    int n;
} table_cache;

static ropekit_status cached_tables(table_cache *tc, const rk_site *s, int64_t P, char **cb,
                                    char **sb, int64_t *rows) {
    for (int i = 0; i < tc->n; ++i)
        if (tc->type[i] == s->elem_type && rk_angles_same(tc->a[i], &s->angles)) {
            *cb = tc->cos[i], *sb = tc->sin[i], *rows = tc->rows[i];
            return ROPEKIT_OK;
        }
    RK_TRY(rk_angles_tables(&s->angles, s->elem_type, P, cb, sb, rows));
    int k = tc->n < TABLE_CACHE ? tc->n++ : TABLE_CACHE - 1;
    if (tc->n == TABLE_CACHE && k == TABLE_CACHE - 1 && tc->a[k])
        free(tc->cos[k]), free(tc->sin[k]);
    tc->a[k] = &s->angles, tc->type[k] = s->elem_type;
    tc->cos[k] = *cb, tc->sin[k] = *sb, tc->rows[k] = *rows;
    return ROPEKIT_OK;
}

static void cache_free(table_cache *tc) {
    for (int i = 0; i < tc->n; ++i)
        free(tc->cos[i]), free(tc->sin[i]);
    tc->n = 0;
}

/* run the fused operator on x (T bytes) -> y (T bytes) */
static ropekit_status run_fused(table_cache *tc, const rk_site *s, const int64_t *xdims, void *x,
                                void *y, const double *pos, int64_t npos, int64_t table_rows,
                                char *rows_cos, char *rows_sin, int64_t n_rows) {
    ropekit_dtype dt = to_dtype(s->elem_type);
    char *cb = rows_cos, *sb = rows_sin;
    int64_t rows = n_rows, maxp = 0;
    for (int64_t i = 0; i < npos; ++i)
        maxp = pos[i] > (double)maxp ? (int64_t)pos[i] : maxp;
    /* an inv_freq table's first rows do not depend on its length: build only what is read */
    int64_t P =
        s->angles.kind == RK_ANGLES_TABLE ? 0 : (maxp + 1 < table_rows ? maxp + 1 : table_rows);
    if (!rows_cos) RK_TRY(cached_tables(tc, s, P, &cb, &sb, &rows));
    int64_t tshape[2] = {rows, s->angles.half};
    ropekit_tensor ct = ropekit_tensor_contiguous(cb, dt, 2, tshape);
    ropekit_tensor st = ropekit_tensor_contiguous(sb, dt, 2, tshape);
    int64_t pids[3 * PROBE_MAX_BS];
    for (int64_t i = 0; i < npos; ++i)
        pids[i] = (int64_t)pos[i];
    int64_t pshape[3] = {3, PROBE_B, PROBE_S};
    ropekit_tensor pt = s->angles.mrope
                            ? ropekit_tensor_contiguous(pids, ROPEKIT_INT64, 3, pshape)
                            : ropekit_tensor_contiguous(pids, ROPEKIT_INT64, 2, pshape + 1);
    int64_t d3[3] = {xdims[0], xdims[1], xdims[2] * xdims[3]};
    int bsnh = s->layout == RK_LAYOUT_BSNH;
    ropekit_tensor xt =
        bsnh ? ropekit_tensor_contiguous(x, dt, 3, d3) : ropekit_tensor_contiguous(x, dt, 4, xdims);
    ropekit_tensor yt =
        bsnh ? ropekit_tensor_contiguous(y, dt, 3, d3) : ropekit_tensor_contiguous(y, dt, 4, xdims);
    int partial = s->head_size < 0 || s->rotary_dim < xdims[3];
    int64_t N = bsnh ? xdims[2] : xdims[1];
    ropekit_status r;
    if (s->angles.mrope) {
        ropekit_mrotary_embedding_attrs at = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
        memcpy(at.mrope_section, s->angles.mrope_section, sizeof at.mrope_section);
        at.mrope_layout = s->angles.mrope_layout;
        at.interleaved = s->interleaved;
        at.rotary_embedding_dim = partial ? s->rotary_dim : 0;
        at.num_heads = N;
        r = ropekit_mrotary_embedding(&xt, &pt, &ct, &st, &at, &yt);
    } else {
        ropekit_ms_rotary_embedding_attrs at = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
        at.interleaved = s->interleaved;
        at.rotary_embedding_dim = partial ? s->rotary_dim : 0;
        at.num_heads = N;
        r = ropekit_ms_rotary_embedding(&xt, &pt, &ct, &st, &at, &yt);
    }
    return r;
}

static void verify_one(table_cache *tc, rk_eval *e, rk_site *s, const int64_t *xdims,
                       const double *xv, int64_t table_rows, const double *pos, int64_t npos) {
    int64_t n = xdims[0] * xdims[1] * xdims[2] * xdims[3];
    const rk_ten *y = rk_eval_get(e, s->output);
    if (!y) {
        refuse(s, "the original subgraph does not evaluate on probe inputs (%s); not fused",
               rk_eval_error(e));
        return;
    }
    if (y->n != n || y->rank != 4 || memcmp(y->dims, xdims, 4 * sizeof *xdims) != 0) {
        char d[96];
        snprintf(d, sizeof d, "%lld elements of rank %d for an input of %lld", (long long)y->n,
                 y->rank, (long long)n);
        refuse(s, "the site's output is not shaped like its input on probe inputs (%s)", d);
        return;
    }
    ropekit_dtype dt = to_dtype(s->elem_type);
    size_t es = ropekit_dtype_size(dt);
    char *xb = malloc((size_t)n * es + 1), *yb = malloc((size_t)n * es + 1);
    if (!xb || !yb) {
        free(xb), free(yb);
        refuse(s, "%s", "out of memory while verifying the site");
        return;
    }
    int64_t H = xdims[3];
    for (int64_t i = 0; i < n; ++i) /* the fused node reads x[..., x_perm] */
        rk_store(xb, dt, i, (float)xv[s->x_perm ? i - i % H + s->x_perm[i % H] : i]);
    char *rc = NULL, *rs = NULL;
    int64_t n_rows = 0;
    double rpos[3 * PROBE_MAX_BS];
    if (s->angles.kind == RK_ANGLES_ROWS) {
        /* the graph's own rows for these probes, as the rewrite feeds them, and the identity index
         */
        const rk_ten *tcos = rk_eval_get(e, s->cos_term),
                     *tsin = tcos ? rk_eval_get(e, s->sin_term) : NULL;
        int64_t W = s->term_full ? s->rotary_dim : s->rotary_dim / 2, h = s->rotary_dim / 2;
        if (!tcos || !tsin) {
            refuse(s, "the site's cos/sin do not evaluate on probe inputs (%s); not fused",
                   rk_eval_error(e));
            free(xb), free(yb);
            return;
        }
        int r = tcos->rank;
        int64_t Bp = r == 3 ? tcos->dims[0] : 1, S = r >= 2 ? tcos->dims[r - 2] : -1;
        int64_t lead = 1;
        for (int q = 0; q < r - 1; ++q)
            lead *= tcos->dims[q];
        if (r >= 2 && r <= 4 && S != PROBE_S)
            S = PROBE_S; /* rank 4: (B', 1, S, W) or (B', S, 1, W) */
        Bp = S > 0 && lead % S == 0 ? lead / S : -1;
        if (r < 2 || r > 4 || tsin->rank != r ||
            memcmp(tsin->dims, tcos->dims, sizeof tcos->dims) || tcos->dims[r - 1] != W ||
            (Bp != 1 && Bp != PROBE_B)) {
            char d[96];
            snprintf(d, sizeof d, "rank %d, last dim %lld for R = %lld", r,
                     (long long)(r > 0 ? tcos->dims[r - 1] : -1), (long long)s->rotary_dim);
            refuse(s, "the site's cos/sin are not per-token rows (B or 1, S, R) (%s)", d);
            free(xb), free(yb);
            return;
        }
        n_rows = Bp * S;
        rc = malloc((size_t)(n_rows * h) * es + 1), rs = malloc((size_t)(n_rows * h) * es + 1);
        if (!rc || !rs) {
            free(rc), free(rs), free(xb), free(yb);
            refuse(s, "%s", "out of memory while verifying the site");
            return;
        }
        for (int64_t q = 0; q < n_rows; ++q)
            for (int64_t k = 0; k < h; ++k) {
                int64_t col = s->term_full && s->interleaved ? 2 * k : k;
                int64_t scol = col + (s->term_full && s->sin_second ? (s->interleaved ? 1 : h) : 0);
                rk_store(rc, dt, q * h + k, (float)tcos->v[q * W + col]);
                rk_store(rs, dt, q * h + k,
                         (float)(s->sin_negated ? -tsin->v[q * W + scol] : tsin->v[q * W + scol]));
            }
        for (int64_t b = 0; b < PROBE_B; ++b)
            for (int64_t t = 0; t < PROBE_S; ++t)
                rpos[b * PROBE_S + t] = (double)((Bp == 1 ? 0 : b) * S + t);
        pos = rpos, npos = PROBE_B * PROBE_S;
    }
    ropekit_status r = run_fused(tc, s, xdims, xb, yb, pos, npos, table_rows, rc, rs, n_rows);
    free(rc), free(rs);
    if (r != ROPEKIT_OK) {
        refuse(s, "the fused operator refuses the site's probe inputs: %s", ropekit_last_error());
        free(xb), free(yb);
        return;
    }
    double worst = 0, scale = 1;
    int64_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
        /* (the graph's channel order: y[..., c] = fused[..., y_perm[c]]) */
        int64_t j = s->y_perm ? i - i % xdims[3] + s->y_perm[i % xdims[3]] : i;
        double a = y->v[i], b = (double)rk_load(yb, dt, j);
        double d = fabs(a - b);
        if (!(d <= worst)) worst = d, at = i; /* NaN counts as the worst */
        if (fabs(a) > scale) scale = fabs(a);
    }
    double tol = s->elem_type == RK_DT_FLOAT ? 1e-5 : 1e-2;
    if (!(worst <= tol * scale)) {
        char d[160];
        int64_t jt = s->y_perm ? at - at % xdims[3] + s->y_perm[at % xdims[3]] : at;
        snprintf(d, sizeof d, "element %lld: %.6g vs %.6g, max |diff| %.3g", (long long)at,
                 y->v[at], (double)rk_load(yb, dt, jt), worst);
        refuse(s,
               "the original subgraph and the fused operator disagree on probe inputs (%s); "
               "not fused",
               d);
    }
    free(xb), free(yb);
}

void rk_sites_verify(const rk_graph *ix, rk_site *sites, size_t n, int64_t table_rows) {
    rk_eval *e = NULL;
    table_cache tc = {0};
    /* sites are verified in groups of one positions value (an evaluator binds one probe per
     * positions tensor); most models have one */
    for (size_t first = 0; first < n; ++first) {
        rk_site *s0 = &sites[first];
        if (s0->reason[0] || !s0->angles_ok || s0->verified) continue;
        int64_t gb, gs;
        probe_bs(s0, &gb, &gs);
        if (gb * gs > PROBE_MAX_BS) {
            refuse(s0, "%s", "the static batch x sequence of the site is too large to verify");
            continue;
        }
        tl_probe_b = gb, tl_probe_s = gs;
        int mrope = s0->angles.mrope || s0->probe_mrope,
            rows_mode = s0->angles.kind == RK_ANGLES_ROWS;
        const char *pname = s0->angles.positions;
        int64_t L = s0->angles.kind == RK_ANGLES_TABLE ? s0->angles.rows
                    : rows_mode ? (s0->probe_limit > 0 ? s0->probe_limit : PROBE_MAX_POS)
                                : table_rows;
        if (L <= 0) L = 1;
        e = rk_eval_new(ix, MAX_ELEMS, BUDGET);
        if (!e) {
            refuse(s0, "%s", "out of memory while verifying the site");
            continue;
        }
        double pos[3 * PROBE_MAX_BS];
        int64_t npos, pdims[3] = {3, PROBE_B, PROBE_S};
        /* probes up to 8191 at most: far enough to expose a low-precision angle (float16 is
         * exact to 2048), cheap enough that building the probe table costs little */
        probe_positions(L < PROBE_MAX_POS ? L : PROBE_MAX_POS, mrope, pos, &npos);
        int ok = 1;
        if (pname) {
            /* (per-call rows: positions as the graph computes them from these probes) */
            name_dims(e, ix, pname, mrope ? pdims : pdims + 1, mrope ? 3 : 2);
            ok = rk_eval_bind(e, pname, RK_DT_INT64, mrope ? 3 : 2, mrope ? pdims : pdims + 1, pos);
        }
        rk_eval_set_dim(e, NULL, 4); /* other unnamed dims */
        uint32_t seed = 0x9e3779b9u;
        for (size_t i = first; i < n; ++i) {
            rk_site *s = &sites[i];
            int64_t Ls = s->angles.kind == RK_ANGLES_TABLE ? s->angles.rows
                         : s->angles.kind == RK_ANGLES_ROWS
                             ? (s->probe_limit > 0 ? s->probe_limit : PROBE_MAX_POS)
                             : table_rows;
            int64_t sb, ss;
            probe_bs(s, &sb, &ss);
            if (s->reason[0] || !s->angles_ok || s->verified ||
                (!pname) != (!s->angles.positions) || sb != gb || ss != gs ||
                (pname && strcmp(s->angles.positions, pname) != 0) ||
                (s->angles.mrope || s->probe_mrope) != mrope ||
                (s->angles.kind == RK_ANGLES_ROWS) != rows_mode || Ls != L)
                continue;
            s->verified = 1;
            int64_t xdims[4];
            if (!ok) {
                refuse(s, "the position ids could not be bound for verification (%s)",
                       rk_eval_error(e));
                continue;
            }
            if (!site_x_dims(s, xdims)) {
                refuse(s, "%s", "the site's head shape is too large to verify");
                continue;
            }
            int64_t cnt = xdims[0] * xdims[1] * xdims[2] * xdims[3];
            double *xv = malloc((size_t)cnt * sizeof *xv);
            if (!xv) {
                refuse(s, "%s", "out of memory while verifying the site");
                continue;
            }
            for (int64_t k = 0; k < cnt; ++k)
                xv[k] = (double)lcg(&seed) / (1 << 24) * 2 - 1;
            int64_t bs[4] = {xdims[0], 0, 0, 0};
            (void)bs;
            if (s->layout == RK_LAYOUT_BSNH) {
                int64_t nd[4] = {PROBE_B, PROBE_S, xdims[2], xdims[3]};
                name_dims(e, ix, s->x, nd, 4);
            } else {
                name_dims(e, ix, s->x, xdims, 4);
            }
            /* x widened from float16 / bfloat16 (the rotation computed in float32): the site
             * reads the narrow tensor too, so that is the one bound (the widening is exact) */
            const char *bind = s->x;
            int32_t bind_type = s->elem_type;
            Onnx__NodeProto *cx = rk_producer_op(ix, s->x, "Cast");
            rk_shape cs;
            if (cx && rk_input(cx, 0) && s->elem_type == RK_DT_FLOAT &&
                rk_attr_i(cx, "to", 0) == RK_DT_FLOAT && rk_value_rank(ix, cx->input[0], &cs) &&
                (cs.elem_type == RK_DT_FLOAT16 || cs.elem_type == RK_DT_BFLOAT16))
                bind = cx->input[0], bind_type = cs.elem_type;
            if (!rk_eval_bind(e, bind, bind_type, 4, xdims, xv)) {
                refuse(s, "the rotated tensor could not be bound for verification (%s)",
                       rk_eval_error(e));
                free(xv);
                continue;
            }
            /* the bound values are rounded to T by the evaluator; give the fused op the same */
            for (int64_t k = 0; k < cnt; ++k) {
                ropekit_dtype dt = to_dtype(bind_type);
                float f = (float)xv[k];
                xv[k] = (double)rk_round_to(dt, f);
            }
            verify_one(&tc, e, s, xdims, xv, table_rows, pos, npos);
            free(xv);
        }
        rk_eval_free(e);
        e = NULL;
    }
    cache_free(&tc);
    tl_probe_b = 2, tl_probe_s = 3;
}
