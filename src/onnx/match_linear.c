/* RoPE sites found by what the subgraph computes, not by how an exporter spelled it.
 *
 * A candidate is an Add or Sub of two products, one factor of which is derived from a Cos or a
 * Sin (through any ops whose other inputs are constants or shapes), possibly gathered into its
 * final form by Concat / Unsqueeze / Reshape (halves written separately, or stacked pairs). The
 * rotated tensor x is the latest value every path of the candidate's data flow goes through.
 *
 * The subgraph x -> y is then evaluated on probe shapes with x symbolic (a "linear map"): every
 * element of every intermediate tensor is a short list of terms (element of x, coefficient).
 * Data-movement ops (Slice, Split, Concat, Reshape, Transpose, Unsqueeze, Squeeze, Expand, Tile,
 * Gather, GatherElements, GatherND, Flatten) are evaluated by the interpreter of eval.c on
 * element labels, so their exact ONNX semantics (and opset differences) are the interpreter's;
 * Neg, Cast, Identity, Mul / Div by an x-independent tensor and Add / Sub are applied to the term
 * lists here (at most two terms per element). Everything that does not depend on x (cos/sin,
 * slice bounds, shapes) is evaluated numerically by eval.c.
 *
 * The result, y[i] = a_i * x[p(i)] + b_i * x[q(i)], is a RoPE when, within each (token, head)
 * line of channels: channels with one term pass through with coefficient 1 (the rotated ones come
 * first: a leading partial rotation); the rotated channels come in pairs (c, c') reading the same
 * two elements of x, the pairs being half-split (c' = c + R/2) or adjacent (c' = c + 1); within a
 * pair, cos is the coefficient of the element the channel "keeps" in both, and the cross
 * coefficients are -sin and +sin. The kept elements form a permutation of x's channels: the
 * identity for the usual forms, another one when the exporter interleaves the channels before a
 * rotate_half (MLA's view(..., d/2, 2).transpose) — the fused node then reads x through a Gather
 * of that permutation. The fused node's per-call rows come from a graph value that holds the cos
 * (sin) coefficients per token: one of the x-independent factors of the products, or a value it
 * was broadcast from (Unsqueeze / Expand / Tile / Reshape / Cast), read as (B' or 1, S, R or R/2)
 * rows. Each site is still checked numerically (match_verify.c) before anything is rewritten. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_internal.h"

#define LIN_MAX_ELEMS ((int64_t)1 << 18) /* elements of x and of every intermediate */
#define LIN_BUDGET ((int64_t)1 << 23)    /* terms over one analysis */
#define LIN_CLOSURE 128                  /* values on the data paths from y back to x */
#define LIN_PROBE_DIM 2                  /* every symbolic dimension */
#define LIN_MAX_DEP_DEPTH 400
#define LIN_MAX_COEF 24

/* ---- value classes: constant-like and angle-derived ----------------------------------------- */

enum { CL_DATA = 0, CL_CONST = 1, CL_ANGLE = 2 };

static int default_domain(const Onnx__NodeProto *n) {
    return !n->domain || !n->domain[0] || !strcmp(n->domain, "ai.onnx");
}

static size_t vidx(const rk_graph *ix, const char *name) {
    const rk_value *v = name ? rk_graph_value(ix, name) : NULL;
    return v ? (size_t)(v - ix->values) : (size_t)-1;
}

/* Is the constant `name` a table of sinusoids over its rows (a precomputed cos, sin or [sin | cos]
 * cache)? Every column t[r] of cos(r f + p) or sin(r f + p) satisfies t[r+1] + t[r-1] = 2 cos(f)
 * t[r] (a constant column is the frequency 0); an embedding does not; an all-zero table is not
 * taken. Checked on the first rows of tables up to 2^23 elements. */
#define SINUSOID_ROWS 24
static int sinusoid_table(const rk_graph *ix, const char *name) {
    if (!name) return 0;
    rk_shape ts;
    rk_graph_shape(ix, name, &ts);
    int64_t n = 1, W = ts.rank >= 2 ? ts.dims[ts.rank - 1] : 0;
    for (int i = 0; i < ts.rank && n <= ((int64_t)1 << 23); ++i)
        n = ts.dims[i] > 0 ? n * ts.dims[i] : ((int64_t)1 << 24);
    /* (P, W), or with leading 1s: (1, 1, P, W) */
    if (ts.rank < 2 || W < 1 || n > ((int64_t)1 << 23) || n / W < 4 ||
        (ts.elem_type != RK_DT_FLOAT && ts.elem_type != RK_DT_FLOAT16 &&
         ts.elem_type != RK_DT_BFLOAT16 && ts.elem_type != RK_DT_DOUBLE))
        return 0;
    int64_t P = n / W;
    double *t = malloc((size_t)n * sizeof *t);
    size_t count = 0;
    int ok = t && rk_graph_const_f64(ix, name, t, (size_t)n, &count) == ROPEKIT_OK &&
             (int64_t)count == n;
    double tol = ts.elem_type == RK_DT_FLOAT || ts.elem_type == RK_DT_DOUBLE ? 1e-4 : 2e-2;
    int64_t rows = P < SINUSOID_ROWS ? P : SINUSOID_ROWS, nonzero = 0;
    for (int64_t k = 0; ok && k < W; ++k) {
        /* the step's cosine, from the row farthest from 0 (a column that stays near 0 is a slow
         * sine: c = 1 up to the tolerance) */
        int64_t at = 1;
        for (int64_t r = 1; r + 1 < rows; ++r)
            if (fabs(t[r * W + k]) > fabs(t[at * W + k])) at = r;
        double b0 = t[at * W + k], c = 1.0;
        /* (float32 tables: the step is fitted down to 0.01, so a short table's slow sines, as a
         * fixed-shape encoder folds for its few positions, still fit) */
        if (fabs(b0) > (tol <= 1e-4 ? 0.01 : 0.25))
            c = (t[(at - 1) * W + k] + t[(at + 1) * W + k]) / (2 * b0);
        ok = fabs(c) <= 1 + tol;
        for (int64_t r = 1; ok && r + 1 < rows; ++r) {
            double a = t[(r - 1) * W + k], b = t[r * W + k], d = t[(r + 1) * W + k];
            ok = fabs(a) <= 1 + tol && fabs(b) <= 1 + tol && fabs(d) <= 1 + tol &&
                 fabs(a + d - 2 * c * b) <= tol;
            nonzero |= a != 0 || b != 0 || d != 0;
        }
    }
    free(t);
    return ok && nonzero;
}

/* the constant (initializer or Constant) a constant data input was broadcast, cast or cut from */
static const char *table_of(const rk_graph *ix, const char *v) {
    for (int guard = 0; v && guard < 8; ++guard) {
        const rk_value *val = rk_graph_value(ix, v);
        if (!val) return NULL;
        const Onnx__NodeProto *p = rk_graph_producer(ix, v);
        if (((val->flags & RK_VALUE_INITIALIZER) && !(val->flags & RK_VALUE_INPUT)) ||
            (p && rk_is_constant_node(p)))
            return v;
        if (!p || !default_domain(p) ||
            (strcmp(p->op_type, "Expand") && strcmp(p->op_type, "Tile") &&
             strcmp(p->op_type, "Cast") && strcmp(p->op_type, "Identity") &&
             strcmp(p->op_type, "Unsqueeze") && strcmp(p->op_type, "Reshape") &&
             strcmp(p->op_type, "Slice") && strcmp(p->op_type, "Squeeze") &&
             strcmp(p->op_type, "Transpose"))) /* (torch.gather with optimize=False) */
            return NULL;
        v = rk_input(p, 0);
    }
    return NULL;
}

/* One pass in node order: constants (initializers, Constant, Shape/Size and what is computed from
 * them only), angle-derived values (Cos / Sin, rows gathered from a sinusoid table, and what is
 * computed from them and constants). */
static int is_table(const rk_graph *ix, uint8_t *memo, const char *data) {
    const char *t = table_of(ix, data);
    size_t i = vidx(ix, t);
    if (i >= ix->n_values) return 0;
    if (!memo[i]) memo[i] = sinusoid_table(ix, t) ? 2 : 1;
    return memo[i] == 2;
}

static uint8_t *classify(const rk_graph *ix) {
    uint8_t *cl = calloc(ix->n_values ? ix->n_values : 1, 1);
    uint8_t *tab = calloc(ix->n_values ? ix->n_values : 1, 1);
    if (!cl || !tab) {
        free(cl), free(tab);
        return NULL;
    }
    for (size_t i = 0; i < ix->n_values; ++i)
        if ((ix->values[i].flags & RK_VALUE_INITIALIZER) && !(ix->values[i].flags & RK_VALUE_INPUT))
            cl[i] = CL_CONST;
    for (size_t k = 0; k < ix->g->n_node; ++k) {
        const Onnx__NodeProto *n = ix->g->node[k];
        int c = CL_CONST, any_angle = 0;
        if (!default_domain(n)) {
            c = CL_DATA;
        } else if (!strcmp(n->op_type, "Constant") || !strcmp(n->op_type, "Shape") ||
                   !strcmp(n->op_type, "Size")) {
            c = CL_CONST;
        } else if (!strcmp(n->op_type, "Cos") || !strcmp(n->op_type, "Sin")) {
            c = CL_ANGLE;
        } else if ((!strcmp(n->op_type, "Gather") || !strcmp(n->op_type, "GatherND") ||
                    !strcmp(n->op_type, "GatherElements")) &&
                   n->n_input >= 2 && vidx(ix, n->input[0]) < ix->n_values &&
                   cl[vidx(ix, n->input[0])] == CL_CONST && is_table(ix, tab, n->input[0])) {
            c = CL_ANGLE; /* rows of a cos/sin cache, gathered by positions */
        } else {
            for (size_t j = 0; j < n->n_input && c != CL_DATA; ++j) {
                if (!n->input[j][0]) continue;
                size_t v = vidx(ix, n->input[j]);
                int cj = v < ix->n_values ? cl[v] : CL_DATA;
                if (cj == CL_DATA) c = CL_DATA;
                any_angle |= cj == CL_ANGLE;
            }
            if (c != CL_DATA && any_angle) c = CL_ANGLE;
            if (c == CL_CONST && !n->n_input) c = CL_DATA; /* random generators and the like */
        }
        for (size_t j = 0; j < n->n_output; ++j) {
            size_t v = vidx(ix, n->output[j]);
            if (v < ix->n_values) cl[v] = (uint8_t)c;
        }
    }
    free(tab);
    return cl;
}

/* ---- the linear map ------------------------------------------------------------------------- */

/* A tensor whose elements are linear in x: element i is sum_t cf[2i+t] * x[idx[2i+t]], t < nt[i].
 */
typedef struct lten {
    int rank;
    int64_t dims[RK_SHAPE_MAX_RANK];
    int64_t n;
    uint8_t *nt;
    int64_t *idx;
    double *cf;
} lten;

typedef struct lin_ctx {
    const rk_graph *ix;
    const char *x;
    size_t xi;
    size_t xsrc; /* x = Cast<float>(xsrc) widened from float16/bfloat16: xsrc reads as x */
    int32_t xprod;
    int xrank;
    int64_t xdims[RK_SHAPE_MAX_RANK];
    rk_eval *e; /* x bound (zeros): every x-independent value */
    int8_t *dep;
    lten **memo;
    int64_t budget;
    const char *coef[LIN_MAX_COEF]; /* x-independent factors of the products met */
    int n_coef;
    char why[RK_REASON];
} lin_ctx;

static void lten_free(lten *t) {
    if (t) free(t->nt), free(t->idx), free(t->cf), free(t);
}

static int lfail(lin_ctx *c, const char *fmt, const char *a, const char *b) {
    if (!c->why[0]) snprintf(c->why, sizeof c->why, fmt, a ? a : "", b ? b : "");
    return 0;
}

static lten *lten_new(lin_ctx *c, int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) {
        if (dims[i] < 0 || (dims[i] && n > LIN_MAX_ELEMS / dims[i]))
            n = LIN_MAX_ELEMS + 1;
        else
            n *= dims[i];
    }
    if (rank < 0 || rank > RK_SHAPE_MAX_RANK || n > LIN_MAX_ELEMS || (c->budget -= n) < 0) {
        lfail(c, "the rotation's tensors are too large to analyse%s%s", NULL, NULL);
        return NULL;
    }
    lten *t = calloc(1, sizeof *t);
    if (t) {
        t->nt = calloc((size_t)(n ? n : 1), 1);
        t->idx = calloc((size_t)(2 * (n ? n : 1)), sizeof *t->idx);
        t->cf = calloc((size_t)(2 * (n ? n : 1)), sizeof *t->cf);
    }
    if (!t || !t->nt || !t->idx || !t->cf) {
        lten_free(t);
        lfail(c, "out of memory%s%s", NULL, NULL);
        return NULL;
    }
    t->rank = rank;
    if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
    t->n = n;
    return t;
}

/* Does `name` depend on x? (Shape and Size do not carry values.) */
static int depends(lin_ctx *c, const char *name, int depth) {
    size_t i = vidx(c->ix, name);
    if (i >= c->ix->n_values) return 0;
    if (i == c->xi || i == c->xsrc) return 1;
    if (c->dep[i] >= 0) return c->dep[i];
    const rk_value *v = &c->ix->values[i];
    if (v->producer < 0 || (v->flags & (RK_VALUE_INPUT | RK_VALUE_INITIALIZER)) ||
        v->producer < c->xprod) {
        c->dep[i] = 0;
        return 0;
    }
    if (depth > LIN_MAX_DEP_DEPTH) return 1; /* unknown: counted as dependent (then refused) */
    const Onnx__NodeProto *n = c->ix->g->node[v->producer];
    int d = 0;
    if (strcmp(n->op_type, "Shape") && strcmp(n->op_type, "Size"))
        for (size_t k = 0; k < n->n_input && !d; ++k)
            if (n->input[k][0]) d = depends(c, n->input[k], depth + 1);
    c->dep[i] = (int8_t)d;
    return d;
}

static int bcast_dims(const int64_t *a, int ra, const int64_t *b, int rb, int64_t *out, int *r) {
    int rank = ra > rb ? ra : rb;
    for (int i = 0; i < rank; ++i) {
        int ia = i - (rank - ra), ib = i - (rank - rb);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da != db && da != 1 && db != 1) return 0;
        out[i] = da == 1 ? db : da;
    }
    *r = rank;
    return 1;
}

static int all_zero(const rk_ten *t) {
    for (int64_t i = 0; i < t->n; ++i)
        if (t->v[i] != 0) return 0;
    return 1;
}

/* the x-independent value `name`, evaluated */
static const rk_ten *indep(lin_ctx *c, const char *name) {
    const rk_ten *t = rk_eval_get(c->e, name);
    if (!t) lfail(c, "'%s' does not evaluate on probe inputs (%s)", name, rk_eval_error(c->e));
    return t;
}

static lten *lin_get(lin_ctx *c, const char *name, int depth);

static int is_move_op(const char *op) {
    static const char *const ops[] = {
        "Slice",  "Split", "Concat", "Reshape",        "Transpose", "Squeeze", "Unsqueeze",
        "Expand", "Tile",  "Gather", "GatherElements", "GatherND",  "Flatten"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; ++i)
        if (!strcmp(op, ops[i])) return 1;
    return 0;
}

/* A data-movement node: the interpreter moves element labels (1-based, 0 = a zero). */
static lten *lin_move(lin_ctx *c, const Onnx__NodeProto *n, const char *want, int depth) {
    int concat = !strcmp(n->op_type, "Concat");
    size_t m = n->n_input;
    if (m > 64) {
        lfail(c, "'%s': too many inputs%s", want, NULL);
        return NULL;
    }
    const lten *src[64] = {0};
    int64_t base[64] = {0}, total = 0;
    rk_eval *e2 = rk_eval_new(c->ix, LIN_MAX_ELEMS, 8 * LIN_MAX_ELEMS);
    lten *out = NULL;
    double *lab = NULL;
    if (!e2) {
        lfail(c, "out of memory%s%s", NULL, NULL);
        return NULL;
    }
    for (size_t k = 0; k < m; ++k) {
        if (!n->input[k][0]) continue;
        int d = depends(c, n->input[k], 0);
        if (d && k > 0 && !concat) {
            lfail(c, "'%s' is an index or shape computed from the rotated tensor (in %s)",
                  n->input[k], n->op_type);
            goto done;
        }
        if (d || concat) {
            const lten *s = NULL;
            const rk_ten *z = NULL;
            int rank;
            const int64_t *dims;
            int64_t cnt;
            if (d) {
                if (!(s = lin_get(c, n->input[k], depth + 1))) goto done;
                rank = s->rank, dims = s->dims, cnt = s->n;
            } else {
                if (!(z = indep(c, n->input[k]))) goto done;
                if (!all_zero(z)) {
                    lfail(c, "'%s' adds a constant to the rotation (not linear)%s", n->input[k],
                          NULL);
                    goto done;
                }
                rank = z->rank, dims = z->dims, cnt = z->n;
            }
            free(lab);
            lab = malloc((size_t)(cnt ? cnt : 1) * sizeof *lab);
            if (!lab) {
                lfail(c, "out of memory%s%s", NULL, NULL);
                goto done;
            }
            for (int64_t i = 0; i < cnt; ++i)
                lab[i] = s ? (double)(total + i + 1) : 0.0;
            src[k] = s;
            base[k] = total;
            if (s) total += cnt;
            if (!rk_eval_bind(e2, n->input[k], RK_DT_DOUBLE, rank, dims, lab)) {
                lfail(c, "labels of '%s' could not be bound (%s)", n->input[k], rk_eval_error(e2));
                goto done;
            }
        } else {
            const rk_ten *t = indep(c, n->input[k]);
            if (!t || !rk_eval_bind(e2, n->input[k], t->type, t->rank, t->dims, t->v)) {
                if (t) lfail(c, "'%s' could not be bound (%s)", n->input[k], rk_eval_error(e2));
                goto done;
            }
        }
    }
    {
        const rk_ten *o = rk_eval_get(e2, want);
        if (!o) {
            lfail(c, "'%s' does not evaluate on probe shapes (%s)", want, rk_eval_error(e2));
            goto done;
        }
        if (!(out = lten_new(c, o->rank, o->dims))) goto done;
        for (int64_t i = 0; i < o->n; ++i) {
            double L = o->v[i];
            if (L == 0) continue;
            int64_t l = (int64_t)L - 1;
            size_t k = 0;
            while (k < m && !(src[k] && l >= base[k] && l < base[k] + src[k]->n))
                ++k;
            if (k == m || L != floor(L)) {
                lten_free(out);
                out = NULL;
                lfail(c, "'%s': an element that is not moved from its input%s", want, NULL);
                goto done;
            }
            int64_t j = l - base[k];
            out->nt[i] = src[k]->nt[j];
            memcpy(out->idx + 2 * i, src[k]->idx + 2 * j, 2 * sizeof *out->idx);
            memcpy(out->cf + 2 * i, src[k]->cf + 2 * j, 2 * sizeof *out->cf);
        }
    }
done:
    free(lab);
    rk_eval_free(e2);
    return out;
}

/* a + s * b, elementwise with broadcasting (b NULL: scale a by the tensor t, or divide) */
static lten *lin_arith(lin_ctx *c, const char *want, const lten *a, const lten *b, double s,
                       const rk_ten *t, int divide) {
    int64_t od[RK_SHAPE_MAX_RANK] = {0};
    int r;
    const int64_t *bd = b ? b->dims : t->dims;
    int rb = b ? b->rank : t->rank;
    if (!bcast_dims(a->dims, a->rank, bd, rb, od, &r)) {
        lfail(c, "'%s' does not evaluate on probe shapes (operands do not broadcast)%s", want,
              NULL);
        return NULL;
    }
    lten *o = lten_new(c, r, od);
    if (!o) return NULL;
    /* the operands' offsets, advanced with the output's multi-index (stride 0: broadcast) */
    int64_t sa[RK_SHAPE_MAX_RANK], sb[RK_SHAPE_MAX_RANK], cnt[RK_SHAPE_MAX_RANK] = {0};
    int64_t pa = 1, pb = 1;
    for (int i = r - 1; i >= 0; --i) {
        int ja = i - (r - a->rank), jb = i - (r - rb);
        int64_t da = ja >= 0 ? a->dims[ja] : 1, db = jb >= 0 ? bd[jb] : 1;
        sa[i] = da == 1 ? 0 : pa, sb[i] = db == 1 ? 0 : pb;
        pa *= da, pb *= db;
    }
    int64_t ia = 0, ib = 0;
    for (int64_t i = 0; i < o->n; ++i) {
        if (i) { /* next multi-index */
            int d = r - 1;
            while (d > 0 && cnt[d] + 1 == od[d]) {
                ia -= sa[d] * cnt[d], ib -= sb[d] * cnt[d], cnt[d] = 0;
                --d;
            }
            ++cnt[d], ia += sa[d], ib += sb[d];
        }
        int k = a->nt[ia];
        if (!b) {
            double f = t->v[ib];
            if (divide) f = 1.0 / f;
            for (int q = 0; q < k; ++q)
                o->idx[2 * i + q] = a->idx[2 * ia + q], o->cf[2 * i + q] = a->cf[2 * ia + q] * f;
            o->nt[i] = (uint8_t)k;
            continue;
        }
        memcpy(o->idx + 2 * i, a->idx + 2 * ia, 2 * sizeof *o->idx);
        memcpy(o->cf + 2 * i, a->cf + 2 * ia, 2 * sizeof *o->cf);
        for (int q = 0; q < b->nt[ib]; ++q) {
            int64_t x = b->idx[2 * ib + q];
            double f = s * b->cf[2 * ib + q];
            int p = 0;
            while (p < k && o->idx[2 * i + p] != x)
                ++p;
            if (p < k) {
                o->cf[2 * i + p] += f;
            } else if (k < 2) {
                o->idx[2 * i + k] = x, o->cf[2 * i + k] = f, ++k;
            } else {
                lten_free(o);
                lfail(c, "'%s' combines more than two elements of the rotated tensor%s", want,
                      NULL);
                return NULL;
            }
        }
        o->nt[i] = (uint8_t)k;
    }
    return o;
}

static lten *lin_copy(lin_ctx *c, const lten *a, double s) {
    lten *o = lten_new(c, a->rank, a->dims);
    if (!o) return NULL;
    memcpy(o->nt, a->nt, (size_t)a->n);
    memcpy(o->idx, a->idx, (size_t)(2 * a->n) * sizeof *o->idx);
    for (int64_t i = 0; i < 2 * a->n; ++i)
        o->cf[i] = a->cf[i] * s;
    return o;
}

static int is_float_dt(int64_t t) {
    return t == RK_DT_FLOAT || t == RK_DT_FLOAT16 || t == RK_DT_BFLOAT16 || t == RK_DT_DOUBLE;
}

static lten *lin_node(lin_ctx *c, const Onnx__NodeProto *n, const char *name, int depth) {
    const char *op = n->op_type;
    if (!default_domain(n)) {
        lfail(c, "%s (domain %s) on the path from the rotated tensor", op, n->domain);
        return NULL;
    }
    if (!strcmp(op, "Identity") || !strcmp(op, "Dropout") ||
        (!strcmp(op, "Cast") && is_float_dt(rk_attr_i(n, "to", 0))) || !strcmp(op, "Neg")) {
        if (strcmp(n->output[0], name)) {
            lfail(c, "'%s' is a secondary output of %s", name, op);
            return NULL;
        }
        const lten *a = lin_get(c, n->input[0], depth + 1);
        return a ? lin_copy(c, a, !strcmp(op, "Neg") ? -1.0 : 1.0) : NULL;
    }
    if (!strcmp(op, "Mul") || !strcmp(op, "Div") || !strcmp(op, "Add") || !strcmp(op, "Sub")) {
        const char *i0 = rk_input(n, 0), *i1 = rk_input(n, 1);
        if (!i0 || !i1) {
            lfail(c, "%s '%s' lacks an operand", op, name);
            return NULL;
        }
        int d0 = depends(c, i0, 0), d1 = depends(c, i1, 0);
        int mul = op[0] == 'M', div = op[0] == 'D';
        if (mul || div) {
            if (d0 && d1) {
                lfail(c, "'%s' multiplies two values computed from the rotated tensor%s", name,
                      NULL);
                return NULL;
            }
            if (div && d1) {
                lfail(c, "'%s' divides by the rotated tensor%s", name, NULL);
                return NULL;
            }
            const char *xs = d0 ? i0 : i1, *ks = d0 ? i1 : i0;
            const lten *a = lin_get(c, xs, depth + 1);
            const rk_ten *t = a ? indep(c, ks) : NULL;
            if (!t) return NULL;
            if (mul && c->n_coef < LIN_MAX_COEF) c->coef[c->n_coef++] = ks;
            return lin_arith(c, name, a, NULL, 1.0, t, div);
        }
        double s = op[0] == 'S' ? -1.0 : 1.0;
        if (d0 && d1) {
            const lten *a = lin_get(c, i0, depth + 1);
            const lten *b = a ? lin_get(c, i1, depth + 1) : NULL;
            return b ? lin_arith(c, name, a, b, s, NULL, 0) : NULL;
        }
        const char *xs = d0 ? i0 : i1, *ks = d0 ? i1 : i0;
        const rk_ten *t = indep(c, ks);
        const lten *a = t ? lin_get(c, xs, depth + 1) : NULL;
        if (!a) return NULL;
        if (!all_zero(t)) {
            lfail(c, "'%s' adds a constant to the rotation (not linear)%s", name, NULL);
            return NULL;
        }
        /* 0 + a, a - 0, 0 - a */
        lten *z = lten_new(c, t->rank, t->dims);
        lten *o =
            z ? (d0 ? lin_arith(c, name, a, z, 1.0, NULL, 0) : lin_arith(c, name, z, a, s, NULL, 0))
              : NULL;
        lten_free(z);
        return o;
    }
    if (is_move_op(op)) return lin_move(c, n, name, depth);
    lfail(c,
          "%s '%s' is on the path from the rotated tensor (not a data movement or a product "
          "with cos/sin)",
          op, name);
    return NULL;
}

static lten *lin_get(lin_ctx *c, const char *name, int depth) {
    size_t i = vidx(c->ix, name);
    if (i >= c->ix->n_values) {
        lfail(c, "'%s' is not a value of the graph%s", name, NULL);
        return NULL;
    }
    if (c->memo[i]) return c->memo[i];
    if (depth > 256) {
        lfail(c, "'%s' is too far from the rotated tensor%s", name, NULL);
        return NULL;
    }
    lten *t = NULL;
    if (i == c->xi || i == c->xsrc) { /* (the widening is exact) */
        if ((t = lten_new(c, c->xrank, c->xdims)))
            for (int64_t k = 0; k < t->n; ++k)
                t->nt[k] = 1, t->idx[2 * k] = k, t->cf[2 * k] = 1.0;
    } else {
        const rk_value *v = &c->ix->values[i];
        if (v->producer < 0 || (v->flags & (RK_VALUE_INPUT | RK_VALUE_INITIALIZER)))
            lfail(c, "'%s' does not depend on the rotated tensor%s", name, NULL);
        else
            t = lin_node(c, c->ix->g->node[v->producer], name, depth);
    }
    c->memo[i] = t;
    return t;
}

/* ---- the rotated tensor: the latest value all data paths of y go through ----------------------
 */

static int is_lin_op(const Onnx__NodeProto *n) {
    const char *op = n->op_type;
    return default_domain(n) && (is_move_op(op) || !strcmp(op, "Identity") || !strcmp(op, "Cast") ||
                                 !strcmp(op, "Neg") || !strcmp(op, "Mul") || !strcmp(op, "Div") ||
                                 !strcmp(op, "Add") || !strcmp(op, "Sub"));
}

typedef struct closure {
    size_t v[LIN_CLOSURE];
    int32_t in[LIN_CLOSURE][8]; /* positions (in v) of the data inputs; -1 ends */
    int leaf[LIN_CLOSURE];
    size_t n;
} closure;

static int cl_find(const closure *cs, size_t v) {
    for (size_t i = 0; i < cs->n; ++i)
        if (cs->v[i] == v) return (int)i;
    return -1;
}

/* data inputs of the producer of value v, by the classes (constants and angles are not data) */
static int data_inputs(const rk_graph *ix, const uint8_t *cl, size_t v, size_t *out, int *n) {
    const rk_value *val = &ix->values[v];
    *n = 0;
    if (val->producer < 0 || (val->flags & (RK_VALUE_INPUT | RK_VALUE_INITIALIZER))) return 0;
    const Onnx__NodeProto *nd = ix->g->node[val->producer];
    if (!is_lin_op(nd)) return 0;
    int concat = !strcmp(nd->op_type, "Concat"),
        binary = !strcmp(nd->op_type, "Mul") || !strcmp(nd->op_type, "Div") ||
                 !strcmp(nd->op_type, "Add") || !strcmp(nd->op_type, "Sub");
    size_t lim = concat || binary ? nd->n_input : (nd->n_input ? 1 : 0);
    if (lim > 8) return 0;
    for (size_t k = 0; k < lim; ++k) {
        size_t u = nd->input[k][0] ? vidx(ix, nd->input[k]) : (size_t)-1;
        if (u < ix->n_values && cl[u] == CL_DATA) out[(*n)++] = u;
    }
    if (binary && *n == 2 && strcmp(nd->op_type, "Add") && strcmp(nd->op_type, "Sub"))
        return 0; /* a product of two data values: not linear, a leaf */
    return *n > 0;
}

/* x for the candidate output y, or NULL */
static const char *find_x(const rk_graph *ix, const uint8_t *cl, const char *y) {
    closure cs;
    cs.n = 0;
    size_t yv = vidx(ix, y);
    if (yv >= ix->n_values) return NULL;
    cs.v[cs.n++] = yv;
    for (size_t at = 0; at < cs.n; ++at) {
        size_t ins[8];
        int k = 0;
        cs.leaf[at] = !data_inputs(ix, cl, cs.v[at], ins, &k);
        int q = 0;
        for (int j = 0; j < k && !cs.leaf[at]; ++j) {
            int p = cl_find(&cs, ins[j]);
            if (p < 0) {
                if (cs.n == LIN_CLOSURE) return NULL;
                p = (int)cs.n;
                cs.v[cs.n++] = ins[j];
            }
            cs.in[at][q++] = p;
        }
        cs.in[at][q] = -1;
        if (cs.leaf[at]) cs.in[at][0] = -1;
    }
    /* x comes before every product with cos/sin (it is what they multiply) */
    int32_t first_product = INT32_MAX;
    for (size_t c = 0; c < cs.n; ++c) {
        int32_t prod = ix->values[cs.v[c]].producer;
        const Onnx__NodeProto *m = prod >= 0 ? ix->g->node[prod] : NULL;
        if (!m || !default_domain(m) || strcmp(m->op_type, "Mul") || m->n_input != 2) continue;
        for (int k = 0; k < 2; ++k) {
            size_t u = vidx(ix, m->input[k]);
            if (u < ix->n_values && cl[u] == CL_ANGLE && prod < first_product) first_product = prod;
        }
    }
    if (first_product == INT32_MAX) return NULL;
    /* the latest cut, preferring one of rank 4 (what the fused node takes: a (.., h, 2) view of
     * x for complex-number pairs is a later cut than x itself) */
    size_t best = (size_t)-1, best4 = (size_t)-1;
    int32_t best_prod = INT32_MIN, best4_prod = INT32_MIN;
    for (size_t c = 1; c < cs.n; ++c) {
        int32_t prod = ix->values[cs.v[c]].producer;
        if (prod >= first_product ||
            (best != (size_t)-1 && prod <= best_prod && best4 != (size_t)-1 && prod <= best4_prod))
            continue;
        /* is c a cut? walk from y avoiding c: no leaf may be reached */
        uint8_t seen[LIN_CLOSURE] = {0};
        int stack[LIN_CLOSURE], sp = 0, cut = 1;
        stack[sp++] = 0;
        seen[0] = 1;
        while (sp && cut) {
            int a = stack[--sp];
            if (cs.leaf[a]) {
                cut = 0;
                break;
            }
            for (int j = 0; cs.in[a][j] >= 0; ++j) {
                int b = cs.in[a][j];
                if (b == (int)c || seen[b]) continue;
                seen[b] = 1;
                stack[sp++] = b;
            }
        }
        if (!cut) continue;
        if (best == (size_t)-1 || prod > best_prod) best = c, best_prod = prod;
        rk_shape sh;
        if ((best4 == (size_t)-1 || prod > best4_prod) &&
            rk_value_rank(ix, ix->values[cs.v[c]].name, &sh) && sh.rank == 4)
            best4 = c, best4_prod = prod;
    }
    if (best4 != (size_t)-1) best = best4;
    return best == (size_t)-1 ? NULL : ix->values[cs.v[best]].name;
}

/* ---- reading the map as a RoPE ----------------------------------------------------------------
 */

typedef struct lin_rope {
    int64_t R, H, L, h;
    int interleaved;
    int64_t *perm;       /* H: the fused node reads x[..., perm] */
    int64_t *yperm;      /* H: the site's result is fused[..., yperm] */
    double *cosv, *sinv; /* L x h: per line (token, head) and pair */
} lin_rope;

/* a and b equal within tol (relative above 1); NaN equals NaN, an infinity itself */
static int same_val(double a, double b, double tol) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    return fabs(a - b) <= tol * fmax(1.0, fmax(fabs(a), fabs(b)));
}

static int close_to(double a, double b) {
    return same_val(a, b, 1e-6);
}

/* coefficient of source channel u in element (line l, channel ch) */
static double co(const lten *y, int64_t H, int64_t l, int64_t ch, int64_t u) {
    int64_t i = l * H + ch;
    for (int t = 0; t < y->nt[i]; ++t)
        if (y->idx[2 * i + t] == l * H + u) return y->cf[2 * i + t];
    return NAN;
}

/* 1: a RoPE (r filled); -1: not one the fused operator computes, why says what it is instead */
#define NOT_ROPE(...)                                                                              \
    do {                                                                                           \
        snprintf(why, nw, __VA_ARGS__);                                                            \
        res = -1;                                                                                  \
        goto done;                                                                                 \
    } while (0)

static int read_rope(const lin_ctx *c, const lten *y, lin_rope *r, char *why, size_t nw) {
    memset(r, 0, sizeof *r);
    if (y->rank != c->xrank || c->xrank != 4 || memcmp(y->dims, c->xdims, 4 * sizeof *y->dims)) {
        snprintf(why, nw, "the result is not shaped like the rotated tensor '%s'", c->x);
        return -1;
    }
    int64_t H = y->dims[3], L = H > 0 ? y->n / H : 0;
    if (H < 2 || L < 1) {
        snprintf(why, nw, "the rotated tensor '%s' has fewer than 2 channels", c->x);
        return -1;
    }
    int64_t *s1 = malloc((size_t)H * sizeof *s1), *s2 = malloc((size_t)H * sizeof *s2);
    uint8_t *used = calloc((size_t)H, 1);
    int res = 0;
    r->perm = malloc((size_t)H * sizeof *r->perm);
    if (!s1 || !s2 || !used || !r->perm) NOT_ROPE("out of memory");
    /* the structure of every line must be that of line 0 */
    for (int64_t l = 0; l < L; ++l)
        for (int64_t ch = 0; ch < H; ++ch) {
            int64_t i = l * H + ch, a = -1, b = -1;
            int k = y->nt[i];
            if (k < 1) NOT_ROPE("output channel %lld does not read '%s'", (long long)ch, c->x);
            for (int t = 0; t < k; ++t) {
                int64_t s = y->idx[2 * i + t];
                if (s / H != l)
                    NOT_ROPE("an output element reads '%s' at another token or head", c->x);
                if (t == 0)
                    a = s % H;
                else
                    b = s % H;
            }
            if (b >= 0 && b < a) {
                int64_t tmp = a;
                a = b, b = tmp;
            }
            if (l == 0) {
                s1[ch] = a, s2[ch] = b;
            } else if (s1[ch] != a || s2[ch] != b) {
                NOT_ROPE("the channels read differ between tokens or heads");
            }
            if (k == 1 && (a != ch || y->cf[2 * i] != 1.0))
                NOT_ROPE("output channel %lld is neither rotated nor passed through unchanged",
                         (long long)ch);
        }
    int64_t first = -1, last = -1, R = 0;
    for (int64_t ch = 0; ch < H; ++ch)
        if (s2[ch] >= 0) {
            if (first < 0) first = ch;
            last = ch, ++R;
        }
    if (R == 0) NOT_ROPE("no channel of '%s' is rotated", c->x);
    if (last - first + 1 != R || R % 2)
        NOT_ROPE("the rotated channels are not one range of even width");
    /* the fused node rotates its leading R channels: channels [first, first + R) come first
     * in its order, the pass-through ones after them (yperm maps the result back) */
    r->yperm = malloc((size_t)H * sizeof *r->yperm);
    if (!r->yperm) NOT_ROPE("out of memory");
    for (int64_t ch = 0, j = R; ch < H; ++ch) {
        if (ch >= first && ch <= last) {
            r->yperm[ch] = ch - first;
        } else {
            r->perm[j] = ch, used[ch] = 1; /* passed through: reads its own channel */
            r->yperm[ch] = j++;
        }
    }
    int64_t h = R / 2;
    int half = 1, adj = 1;
    for (int64_t k = 0; k < h; ++k) {
        int64_t a = first + k, b = first + 2 * k;
        half &= s1[a] == s1[a + h] && s2[a] == s2[a + h];
        adj &= s1[b] == s1[b + 1] && s2[b] == s2[b + 1];
    }
    if (!half && !adj) NOT_ROPE("the rotated channels pair neither as halves nor as neighbours");
    r->interleaved = !half;
    r->R = R, r->H = H, r->L = L, r->h = h;
    r->cosv = malloc((size_t)(L * h) * sizeof *r->cosv);
    r->sinv = malloc((size_t)(L * h) * sizeof *r->sinv);
    if (!r->cosv || !r->sinv) NOT_ROPE("out of memory");
    for (int64_t k = 0; k < h; ++k) {
        /* (c1, c2: the pair's channels in the result) */
        int64_t c1 = first + (r->interleaved ? 2 * k : k),
                c2 = first + (r->interleaved ? 2 * k + 1 : k + h);
        int64_t opt[2][2] = {{s1[c1], s2[c1]}, {s2[c1], s1[c1]}};
        if (opt[1][0] == c1) { /* prefer keeping channels where they are */
            int64_t t0 = opt[0][0], t1 = opt[0][1];
            opt[0][0] = opt[1][0], opt[0][1] = opt[1][1], opt[1][0] = t0, opt[1][1] = t1;
        }
        int chosen = -1;
        for (int o = 0; o < 2 && chosen < 0; ++o) {
            int64_t u = opt[o][0], w = opt[o][1];
            int ok = 1;
            for (int64_t l = 0; l < L && ok; ++l)
                ok = close_to(co(y, H, l, c1, u), co(y, H, l, c2, w)) &&
                     close_to(co(y, H, l, c2, u), -co(y, H, l, c1, w));
            if (ok) chosen = o;
        }
        if (chosen < 0)
            NOT_ROPE("channels %lld and %lld are not rotated by one angle (x*cos - y*sin, "
                     "y*cos + x*sin)",
                     (long long)c1, (long long)c2);
        int64_t u = opt[chosen][0], w = opt[chosen][1];
        if (used[u] || used[w])
            NOT_ROPE("the rotation reads a channel of '%s' twice or outside its rotated range",
                     c->x);
        used[u] = used[w] = 1;
        r->perm[c1 - first] = u, r->perm[c2 - first] = w;
        for (int64_t l = 0; l < L; ++l) {
            r->cosv[l * h + k] = co(y, H, l, c1, u);
            r->sinv[l * h + k] = co(y, H, l, c2, u);
        }
    }
    res = 1;
done:
    free(s1), free(s2), free(used);
    if (res != 1) {
        free(r->perm), free(r->yperm), free(r->cosv), free(r->sinv);
        r->perm = r->yperm = NULL, r->cosv = r->sinv = NULL;
    }
    return res;
}
#undef NOT_ROPE

/* Does V hold `want` (L x h) as per-token rows? Fills the layout and whether V is full width. */
static int rows_match(const lin_ctx *c, const rk_ten *V, const lin_rope *r, const double *want,
                      int lay_want, int second, rk_layout *layout, int *full) {
    if (!V || V->rank < 2 || V->rank > 4) return 0;
    int64_t W = V->dims[V->rank - 1];
    if (W != r->R && W != r->h) return 0;
    *full = W == r->R && r->R != r->h;
    if (second && !*full) return 0;
    const int64_t *X = c->xdims;
    for (int lay = 0; lay < 2; ++lay) {
        int heads = lay == 0 ? 1 : 2, tok = lay == 0 ? 2 : 1;
        /* V as (B' or 1, [1,] S, [1,] W): rank 4 as it broadcasts; rank 3 and 2 as the fused
         * node's rows read it, (B', S, W) and (S, W) */
        int64_t vd[4] = {1, 1, 1, W};
        if (V->rank == 4) {
            memcpy(vd, V->dims, sizeof vd);
        } else {
            vd[0] = V->rank == 3 ? V->dims[0] : 1;
            vd[tok] = V->dims[V->rank - 2];
        }
        if ((lay_want >= 0 && lay != lay_want) || vd[heads] != 1 || vd[tok] != X[tok] ||
            (vd[0] != 1 && vd[0] != X[0]))
            continue;
        int ok = 1;
        for (int64_t l = 0; l < r->L && ok; ++l) {
            int64_t i0 = l / (X[1] * X[2]), i1 = (l / X[2]) % X[1], i2 = l % X[2];
            int64_t s = lay == 0 ? i2 : i1, row = (vd[0] == 1 ? 0 : i0) * X[tok] + s;
            for (int64_t k = 0; k < r->h && ok; ++k) {
                int64_t col = *full ? (r->interleaved ? 2 * k : k) : k;
                if (second) col += r->interleaved ? 1 : r->h; /* the pair's second member */
                double a = V->v[row * W + col], b = want[l * r->h + k];
                ok =
                    same_val(a, b, V->type != RK_DT_FLOAT && V->type != RK_DT_DOUBLE ? 2e-3 : 1e-6);
            }
        }
        if (ok) {
            *layout = lay == 0 ? RK_LAYOUT_BNSH : RK_LAYOUT_BSNH;
            return 1;
        }
    }
    return 0;
}

/* the values a factor was broadcast from: itself, then through Unsqueeze / Expand / ... */
static size_t factor_chain(const rk_graph *ix, const char *v, const char **out, size_t cap) {
    size_t n = 0;
    for (int guard = 0; v && n < cap && guard < 10; ++guard) {
        out[n++] = v;
        const Onnx__NodeProto *p = rk_graph_producer(ix, v);
        if (!p || !default_domain(p)) break;
        const char *op = p->op_type;
        if (strcmp(op, "Unsqueeze") && strcmp(op, "Squeeze") && strcmp(op, "Expand") &&
            strcmp(op, "Tile") && strcmp(op, "Reshape") && strcmp(op, "Cast") &&
            strcmp(op, "Identity") && strcmp(op, "Flatten"))
            break;
        v = rk_input(p, 0);
    }
    return n;
}

/* The position ids the rows are computed from (an int64 graph input of rank 2 that cos depends
 * on), and the smallest number of rows of a constant table gathered on the way (0: none). */
static void find_positions(const rk_graph *ix, const char *from, const char **pos, int64_t *limit) {
    const char *stack[64];
    size_t seen[256];
    int sp = 0, ns = 0;
    stack[sp++] = from;
    *pos = NULL;
    *limit = 0;
    int sliced = 0;
    while (sp) {
        const char *v = stack[--sp];
        size_t vi = vidx(ix, v);
        int dup = 0;
        for (int i = 0; i < ns && !dup; ++i)
            dup = seen[i] == vi;
        if (dup || vi >= ix->n_values || ns == 256) continue;
        seen[ns++] = vi;
        const rk_value *val = &ix->values[vi];
        if (val->flags & RK_VALUE_INPUT) {
            rk_shape sh;
            rk_graph_shape(ix, v, &sh);
            if (!*pos && sh.elem_type == RK_DT_INT64 && sh.rank == 2) *pos = val->name;
            continue;
        }
        const Onnx__NodeProto *n = val->producer >= 0 ? ix->g->node[val->producer] : NULL;
        if (!n) continue;
        if (default_domain(n) &&
            (!strcmp(n->op_type, "Gather") || !strcmp(n->op_type, "GatherND") ||
             !strcmp(n->op_type, "GatherElements"))) {
            rk_shape ts;
            const char *tn = table_of(ix, rk_input(n, 0));
            if (tn)
                rk_graph_shape(ix, tn, &ts);
            else
                ts.rank = -1;
            if (tn && ts.rank >= 1 && ts.dims[0] > 0 && (!*limit || ts.dims[0] < *limit))
                *limit = ts.dims[0];
            if (rk_producer_op(ix, rk_input(n, 0), "Slice")) sliced = 1;
        }
        for (size_t k = 0; k < n->n_input && sp < 64; ++k)
            if (n->input[k][0]) stack[sp++] = n->input[k];
    }
    /* a table cut to a run-time length (cache[:seq_len]) bounds the positions by that length:
     * the probes then keep the graph's own position ids */
    if (sliced) *pos = NULL;
}

/* ---- one candidate -----------------------------------------------------------------------------
 */

static void set_angles(const rk_graph *ix, rk_site *s, const char *const *cchain, size_t nc,
                       const char *const *schain, size_t ns) {
    /* the fixed-table mode needs the angle source (the default per-call rows do not): Cos/Sin of
     * position * inv_freq for full-width half-split tables, GPT-J's sincos table for adjacent
     * pairs, read from the values the rows were matched to or those they were broadcast from */
    int have = 0;
    char why[RK_REASON] = "";
    int64_t h = s->rotary_dim / 2;
    s->angle_reason[0] = '\0';
    for (size_t i = 0; i < nc && !have && !s->x_perm && !s->sin_negated; ++i) {
        for (size_t j = 0; j < ns && !have; ++j) {
            rk_angles_free(&s->angles);
            if (s->interleaved) {
                have =
                    rk_match_sincos_table(ix, cchain[i], schain[j], &s->angles, why, sizeof why) &&
                    s->angles.half == h;
                continue;
            }
            if (!s->term_full) break;
            int32_t cc = 0, cs = 0;
            if (!rk_match_angle_term(ix, cchain[i], 0, &s->angles, &cc, s->angle_reason, RK_REASON))
                break; /* (the reason of the last value tried is kept) */
            rk_angles sa;
            memset(&sa, 0, sizeof sa);
            if (rk_match_angle_term(ix, schain[j], 1, &sa, &cs, why, sizeof why)) {
                have = rk_angles_same(&s->angles, &sa) && s->angles.half == h &&
                       (!cc || cc == s->elem_type);
                if (!have)
                    snprintf(why, sizeof why, "cos and sin come from different angle sources");
            }
            rk_angles_free(&sa);
        }
    }
    if (!have) {
        rk_angles_free(&s->angles);
        if (s->sin_negated)
            snprintf(s->angle_reason, RK_REASON,
                     "the rotation of '%s' is by -angle (negated sin): only per-call rows are "
                     "supported (not --max-positions)",
                     s->x);
        else if (s->x_perm)
            snprintf(s->angle_reason, RK_REASON,
                     "the channels of '%s' are reordered before the "
                     "rotation: only per-call rows are supported (not --max-positions)",
                     s->x);
        else if (!s->interleaved && !s->term_full)
            snprintf(s->angle_reason, RK_REASON,
                     "half-width cos/sin: only per-call rows are "
                     "supported for them (not --max-positions)");
        else if (why[0] && (s->interleaved || !s->angle_reason[0]))
            snprintf(s->angle_reason, RK_REASON, "%s", why);
        else if (!s->angle_reason[0])
            snprintf(s->angle_reason, RK_REASON, "the angle source of '%s' is not recognized",
                     s->x);
    }
    const char *pos = NULL;
    int64_t limit = 0;
    find_positions(ix, s->cos_term, &pos, &limit);
    if (!s->angles.positions && pos) s->angles.positions = rk_strdup(pos);
    if (limit > 0) s->probe_limit = limit;
}

/* 1: *site filled (possibly with a reason); 0: not a RoPE site */
/* The positions the angle factor `angle` is computed from, bound with distinct values (below the
 * rows of a table they gather from): rows of different tokens then differ in the analysis. */
static void bind_positions(rk_eval *e, const rk_graph *ix, const char *angle) {
    const char *pos = NULL;
    int64_t limit = 0;
    if (!angle) return;
    find_positions(ix, angle, &pos, &limit);
    rk_shape ps;
    if (!pos) return;
    rk_graph_shape(ix, pos, &ps);
    if (ps.rank != 2) return;
    int64_t dims[2], L = limit > 0 ? limit : 4096;
    for (int i = 0; i < 2; ++i)
        dims[i] = ps.dims[i] > 0 ? ps.dims[i] : LIN_PROBE_DIM;
    if (dims[0] * dims[1] > 4096) return;
    double v[4096];
    for (int64_t i = 0; i < dims[0] * dims[1]; ++i)
        v[i] = (double)((1 + 3 * i) % L);
    rk_eval_bind(e, pos, RK_DT_INT64, 2, dims, v);
}

static int analyze(const rk_graph *ix, const char *y, const char *x, const char *anchor,
                   const char *angle, rk_site *site) {
    memset(site, 0, sizeof *site);
    rk_shape xs;
    rk_value_rank(ix, x, &xs);
    lin_ctx c;
    memset(&c, 0, sizeof c);
    c.ix = ix, c.x = x, c.xi = vidx(ix, x), c.budget = LIN_BUDGET;
    if (c.xi >= ix->n_values) return 0;
    c.xprod = ix->values[c.xi].producer;
    c.xsrc = (size_t)-1;
    const Onnx__NodeProto *wc = rk_producer_op(ix, x, "Cast");
    rk_shape ws;
    if (wc && rk_attr_i(wc, "to", 0) == RK_DT_FLOAT && rk_input(wc, 0) &&
        rk_value_rank(ix, wc->input[0], &ws) &&
        (ws.elem_type == RK_DT_FLOAT16 || ws.elem_type == RK_DT_BFLOAT16)) {
        c.xsrc = vidx(ix, wc->input[0]);
        int32_t sp = c.xsrc < ix->n_values ? ix->values[c.xsrc].producer : -1;
        if (sp < c.xprod) c.xprod = sp;
    }
    int res = 0;
    lin_rope r;
    memset(&r, 0, sizeof r);
    char why[RK_REASON] = "";
    if (xs.rank != 4) {
        /* a product of x with cos/sin without the shape to analyse it: a site with a reason */
        snprintf(why, sizeof why,
                 "the shape of '%s' is unknown or not rank 4 (no shape "
                 "information to analyse the rotation)",
                 x);
        res = -1;
    }
    c.xrank = 4;
    int64_t nx = 1;
    for (int i = 0; i < 4 && res == 0; ++i) {
        c.xdims[i] = xs.dims[i] > 0 ? xs.dims[i] : LIN_PROBE_DIM;
        nx *= c.xdims[i];
    }
    if (res == 0 && nx > LIN_MAX_ELEMS) {
        snprintf(why, sizeof why, "'%s' is too large to analyse at its static shape", x);
        res = -1;
    }
    double *zeros = NULL;
    lten *yl = NULL;
    if (res == 0) {
        c.e = rk_eval_new(ix, (int64_t)1 << 22, (int64_t)1 << 25);
        c.dep = malloc(ix->n_values ? ix->n_values : 1);
        c.memo = calloc(ix->n_values ? ix->n_values : 1, sizeof *c.memo);
        zeros = calloc((size_t)nx, sizeof *zeros);
        if (!c.e || !c.dep || !c.memo || !zeros) goto out;
        memset(c.dep, -1, ix->n_values ? ix->n_values : 1);
        rk_eval_set_dim(c.e, NULL, LIN_PROBE_DIM);
        bind_positions(c.e, ix, angle);
        if (!rk_eval_bind(c.e, x, xs.elem_type ? xs.elem_type : RK_DT_FLOAT, 4, c.xdims, zeros))
            goto out;
        yl = lin_get(&c, y, 0);
        if (!yl) { /* (candidates are products with cos/sin: reported, with what they are) */
            snprintf(why, sizeof why,
                     "not a rotation of '%.160s' the fused operator computes: %.400s", x,
                     c.why[0] ? c.why : "the subgraph could not be analysed");
            res = -1;
        } else {
            res = read_rope(&c, yl, &r, why, sizeof why);
            if (res < 0) {
                char w[RK_REASON];
                snprintf(w, sizeof w, "%s", why);
                snprintf(why, sizeof why,
                         "not a rotation of '%.160s' the fused operator computes: %.400s", x, w);
            }
        }
    }
    /* a site from here on */
    site->variant = "rotate_half";
    site->x = rk_strdup(x);
    site->output = rk_strdup(y);
    site->anchor = rk_strdup(anchor);
    site->head_size = site->num_heads = -1;
    for (int i = 0; i < 4; ++i)
        site->xdims[i] = xs.rank == 4 ? xs.dims[i] : -1;
    site->elem_type = xs.elem_type ? xs.elem_type : RK_DT_FLOAT;
    res = 1;
    if (!site->x || !site->output || !site->anchor) {
        snprintf(site->reason, RK_REASON, "out of memory");
        goto out;
    }
    if (why[0]) {
        snprintf(site->reason, RK_REASON, "%s", why);
        goto out;
    }
    site->interleaved = r.interleaved;
    site->rotary_dim = r.R;
    site->variant = r.interleaved ? (r.R < r.H ? "interleaved_partial" : "interleaved")
                                  : (r.R < r.H ? "rotate_half_partial" : "rotate_half");
    int identity = 1;
    for (int64_t ch = 0; ch < r.H; ++ch)
        identity &= r.perm[ch] == ch;
    if (!identity) {
        site->variant = r.interleaved ? "interleaved_permuted" : "rotate_half_permuted";
        site->x_perm = r.perm;
        r.perm = NULL;
    }
    int y_identity = 1;
    for (int64_t ch = 0; ch < r.H; ++ch)
        y_identity &= r.yperm[ch] == ch;
    if (!y_identity) { /* rotated channels after pass-through ones ([nope | rope]) */
        site->variant = r.interleaved ? "interleaved_trailing" : "rotate_half_trailing";
        site->y_perm = r.yperm;
        r.yperm = NULL;
    }
    /* the graph values holding the rows: the factors themselves (as they broadcast: they give
     * the layout), or a value they were broadcast from (the earliest that holds the rows) */
    const char *cchain[12], *schain[12];
    size_t nc = 0, ns = 0;
    int found = 0, full_c = 0, full_s = 0;
    rk_layout lay_c = RK_LAYOUT_BNSH, lay_s = RK_LAYOUT_BNSH;
    int negated = 0;
retry:
    for (int i = 0; i < c.n_coef && !found; ++i) {
        nc = factor_chain(ix, c.coef[i], cchain, 12);
        int want = -1;
        rk_layout lay0;
        int full0;
        if (rows_match(&c, rk_eval_get(c.e, cchain[0]), &r, r.cosv, -1, 0, &lay0, &full0))
            want = lay0 == RK_LAYOUT_BNSH ? 0 : 1;
        for (size_t a = nc; a-- > 0 && !found;) {
            const rk_ten *V = rk_eval_get(c.e, cchain[a]);
            if (!rows_match(&c, V, &r, r.cosv, want, 0, &lay_c, &full_c)) continue;
            for (int j = 0; j < c.n_coef && !found; ++j) {
                /* sin comes from another product's factor than cos (they may be equal on the
                 * probes, e.g. both fed from outside the graph) */
                if (!strcmp(c.coef[j], c.coef[i])) continue;
                ns = factor_chain(ix, c.coef[j], schain, 12);
                for (size_t q = 0; q < 2 * ns && !found; ++q) {
                    /* (sin as the first member's coefficient of each pair, else the second's:
                     * a sin factor Concat(-s, s) holds +s there) */
                    size_t b = ns - 1 - q % ns;
                    int second = q >= ns;
                    const rk_ten *U = rk_eval_get(c.e, schain[b]);
                    if (U &&
                        rows_match(&c, U, &r, r.sinv, lay_c == RK_LAYOUT_BNSH ? 0 : 1, second,
                                   &lay_s, &full_s) &&
                        full_s == full_c && U->rank == V->rank &&
                        !memcmp(U->dims, V->dims, sizeof U->dims)) {
                        found = 1;
                        site->sin_second = second;
                        site->sin_negated = negated;
                        site->cos_term = rk_strdup(cchain[a]);
                        site->sin_term = rk_strdup(schain[b]);
                        /* the chains from the matched values on, for the angle source */
                        memmove(cchain, cchain + a, (nc - a) * sizeof *cchain), nc -= a;
                        memmove(schain, schain + b, (ns - b) * sizeof *schain), ns -= b;
                    }
                }
            }
        }
    }
    if (!found && !negated) {
        /* a rotation by -angle (rotate_half written cat(x2, -x1), NanoChat): the coefficients
         * are -sin of a graph value holding sin; the fused node then reads Neg(sin) */
        for (int64_t q = 0; q < r.L * r.h; ++q)
            r.sinv[q] = -r.sinv[q];
        negated = 1;
        goto retry;
    }
    if (!found) {
        snprintf(site->reason, RK_REASON,
                 "the cos/sin coefficients of the rotation of '%s' are "
                 "not held by a graph value as per-token rows (B or 1, S, R or R/2)",
                 x);
        goto out;
    }
    if (!site->cos_term || !site->sin_term) {
        snprintf(site->reason, RK_REASON, "out of memory");
        goto out;
    }
    site->term_full = full_c;
    site->layout = lay_c;
    if (xs.dims[3] > 0) site->head_size = xs.dims[3];
    int64_t nh = xs.dims[lay_c == RK_LAYOUT_BNSH ? 1 : 2];
    if (nh > 0) site->num_heads = nh;
    if ((site->x_perm || site->y_perm) && site->head_size <= 0) {
        snprintf(site->reason, RK_REASON,
                 "the head size of '%s' is unknown (needed to reorder "
                 "its channels)",
                 x);
        goto out;
    }
    set_angles(ix, site, cchain, nc, schain, ns);
    if (site->angles.mrope)
        site->variant = site->angles.mrope_layout ? "mrope_interleaved" : "mrope_sectioned";
    rk_site_accept(site);
out:
    if (res == 1 && !site->x) res = 0;
    free(r.perm), free(r.yperm), free(r.cosv), free(r.sinv);
    free(zeros);
    if (c.memo)
        for (size_t i = 0; i < ix->n_values; ++i)
            lten_free(c.memo[i]);
    free(c.memo), free(c.dep);
    rk_eval_free(c.e);
    return res;
}

/* ---- the pass -----------------------------------------------------------------------------------
 */

static int mul_with_angle(const rk_graph *ix, const uint8_t *cl, const char *v) {
    const Onnx__NodeProto *m = rk_producer_op(ix, v, "Mul");
    if (!m || m->n_input != 2) return -1;
    int a = 0;
    for (int k = 0; k < 2; ++k) {
        size_t u = vidx(ix, m->input[k]);
        a |= u < ix->n_values && cl[u] == CL_ANGLE;
    }
    return a;
}

static ropekit_status push_site(rk_site **sites, size_t *n, size_t *cap, rk_site *s) {
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 16;
        rk_site *ns = realloc(*sites, nc * sizeof *ns);
        if (!ns) {
            rk_site_free(s);
            return RK_OOM();
        }
        *sites = ns, *cap = nc;
    }
    s->layer = (int64_t)(*n / 2);
    (*sites)[(*n)++] = *s;
    return ROPEKIT_OK;
}

static _Thread_local const rk_graph *tl_sort_ix;

static int by_position(const void *a, const void *b) {
    const rk_site *x = a, *y = b;
    const rk_value *vx = rk_graph_value(tl_sort_ix, x->output),
                   *vy = rk_graph_value(tl_sort_ix, y->output);
    int32_t px = vx ? vx->producer : -1, py = vy ? vy->producer : -1;
    return (px > py) - (px < py);
}

/* x float16 / bfloat16 while the rotation is computed in float32 (x and rotate_half(x) widened,
 * float32 cos/sin: OLMo 2): the site rotates the widened x, Cast<float>(x), in float32. */
static const char *widened(const rk_graph *ix, const char *x, const char *y) {
    rk_shape xs, ys;
    if (!x || !rk_value_rank(ix, x, &xs) || !rk_value_rank(ix, y, &ys) ||
        (xs.elem_type != RK_DT_FLOAT16 && xs.elem_type != RK_DT_BFLOAT16) ||
        ys.elem_type != RK_DT_FLOAT)
        return x;
    const rk_value *v = rk_graph_value(ix, x);
    for (uint32_t k = 0; v && k < v->n_consumers; ++k) {
        const Onnx__NodeProto *n = ix->g->node[v->consumers[k]];
        if (default_domain(n) && !strcmp(n->op_type, "Cast") &&
            rk_attr_i(n, "to", 0) == RK_DT_FLOAT && n->n_output == 1)
            return n->output[0];
    }
    return x;
}

/* The site at the Add/Sub `nd`, if it is a candidate: 1 with *site filled (possibly with a
 * reason), 0 if not a candidate. chain/nch (optional) get the values the site may end at. */
static int site_at(const rk_graph *ix, const uint8_t *cl, const Onnx__NodeProto *nd, rk_site *site,
                   const char **chain, int *nch) {
    const char *own[6];
    int k = 0;
    if (!chain) chain = own;
    if (!default_domain(nd) || (strcmp(nd->op_type, "Add") && strcmp(nd->op_type, "Sub")) ||
        nd->n_input != 2 || nd->n_output != 1)
        return 0;
    int a0 = mul_with_angle(ix, cl, nd->input[0]), a1 = mul_with_angle(ix, cl, nd->input[1]);
    if (a0 < 0 || a1 < 0 || !(a0 | a1)) return 0;
    const char *angle = NULL; /* an angle factor, for the position ids */
    const Onnx__NodeProto *m = rk_graph_producer(ix, nd->input[a0 ? 0 : 1]);
    for (int q = 0; q < 2 && !angle; ++q)
        if (vidx(ix, m->input[q]) < ix->n_values && cl[vidx(ix, m->input[q])] == CL_ANGLE)
            angle = m->input[q];
    /* the output: the Add/Sub, or what gathers its halves / pairs */
    chain[k++] = nd->output[0];
    for (int up = 0; up < 5; ++up) {
        const Onnx__NodeProto *u = rk_main_consumer(ix, chain[k - 1]);
        if (!u || !default_domain(u) || u->n_output < 1 ||
            (strcmp(u->op_type, "Concat") && strcmp(u->op_type, "Unsqueeze") &&
             strcmp(u->op_type, "Reshape") && strcmp(u->op_type, "Flatten") &&
             strcmp(u->op_type, "Squeeze")))
            break;
        chain[k++] = u->output[0];
    }
    if (nch) *nch = k;
    /* the widest form that reads as a RoPE; else the most telling refusal */
    int have = 0;
    for (int j = k - 1; j >= 0; --j) {
        const char *x = widened(ix, find_x(ix, cl, chain[j]), chain[j]);
        rk_site t;
        if (!x || !analyze(ix, chain[j], x, nd->output[0], angle, &t)) continue;
        if (!t.reason[0]) {
            if (have) rk_site_free(site);
            *site = t;
            return 1;
        }
        if (!have || strstr(site->reason, "is not shaped like")) {
            if (have) rk_site_free(site);
            *site = t;
            have = 1;
        } else {
            rk_site_free(&t);
        }
    }
    return have;
}

int rk_match_linear_at(const rk_graph *ix, const Onnx__NodeProto *nd, rk_site *site) {
    uint8_t *cl = classify(ix);
    int r = cl && site_at(ix, cl, nd, site, NULL, NULL);
    free(cl);
    return r;
}

/* A value fed from outside: a float graph input, or one moved / widened / joined from such inputs
 * and constants only (a few ops deep). */
static int external_factor(const rk_graph *ix, const uint8_t *cl, const char *v, int depth) {
    const rk_value *val = v ? rk_graph_value(ix, v) : NULL;
    if (!val || depth > 8) return 0;
    size_t i = (size_t)(val - ix->values);
    if (cl[i] == CL_CONST) return 1;
    if (val->flags & RK_VALUE_INPUT) {
        rk_shape sh;
        rk_graph_shape(ix, v, &sh);
        return sh.elem_type == RK_DT_FLOAT || sh.elem_type == RK_DT_FLOAT16 ||
               sh.elem_type == RK_DT_BFLOAT16;
    }
    const Onnx__NodeProto *p = val->producer >= 0 ? ix->g->node[val->producer] : NULL;
    if (!p || !default_domain(p) ||
        (!is_move_op(p->op_type) && strcmp(p->op_type, "Cast") && strcmp(p->op_type, "Identity")))
        return 0;
    for (size_t k = 0; k < p->n_input; ++k)
        if (p->input[k][0] && !external_factor(ix, cl, p->input[k], depth + 1)) return 0;
    return 1;
}

/* cos/sin that come from outside the graph's arithmetic (graph inputs: a layer exported alone
 * with its position embeddings, a decoder fed cos/sin caches; or constant sinusoid tables the
 * exporter folded them to): an Add/Sub of two products none
 * of whose factors derive from a Cos/Sin, tried with each pair of factors (one per product) as
 * the coefficients. Only a pair under which the subgraph reads as a RoPE makes a site. */
static int site_given_factors(const rk_graph *ix, uint8_t *cl, const Onnx__NodeProto *nd,
                              rk_site *site, const char **chain, int *nch) {
    if (!default_domain(nd) || nd->n_input != 2) return 0;
    const Onnx__NodeProto *m[2] = {rk_producer_op(ix, nd->input[0], "Mul"),
                                   rk_producer_op(ix, nd->input[1], "Mul")};
    if (!m[0] || !m[1] || m[0]->n_input != 2 || m[1]->n_input != 2) return 0;
    for (int p = 0; p < 4; ++p) {
        const char *v0 = m[0]->input[p & 1], *v1 = m[1]->input[p >> 1];
        size_t f0 = vidx(ix, v0), f1 = vidx(ix, v1);
        if (f0 >= ix->n_values || f1 >= ix->n_values) continue;
        uint8_t c0 = cl[f0], c1 = cl[f1];
        /* graph inputs, or constants that are sinusoid tables: cos/sin folded by the exporter
         * when nothing in them depends on the inputs (a fixed-shape encoder: positions are
         * arange(S) of the exported S) */
        int given = c0 == CL_DATA && c1 == CL_DATA && external_factor(ix, cl, v0, 0) &&
                    external_factor(ix, cl, v1, 0);
        int folded = c0 == CL_CONST && c1 == CL_CONST && strcmp(v0, v1) != 0 &&
                     sinusoid_table(ix, table_of(ix, v0)) && sinusoid_table(ix, table_of(ix, v1));
        if (!given && !folded) continue;
        cl[f0] = cl[f1] = CL_ANGLE;
        int found = site_at(ix, cl, nd, site, chain, nch);
        cl[f0] = c0, cl[f1] = c1;
        if (found && !site->reason[0]) return 1;
        if (found) rk_site_free(site);
    }
    return 0;
}

ropekit_status rk_match_linear_all(const rk_graph *ix, rk_site **sites, size_t *n, size_t *cap) {
    uint8_t *cl = classify(ix);
    const char **claimed = NULL; /* values that ended a candidate already */
    size_t n_claimed = 0, cap_claimed = 0;
    if (!cl) return RK_OOM();
    ropekit_status st = ROPEKIT_OK;
    for (size_t k = 0; k < ix->g->n_node && st == ROPEKIT_OK; ++k) {
        const Onnx__NodeProto *nd = ix->g->node[k];
        const char *chain[6];
        int nch = 0, dup = 0;
        rk_site t;
        /* (a cheap test first: candidates are Add/Sub of products) */
        if (strcmp(nd->op_type, "Add") && strcmp(nd->op_type, "Sub")) continue;
        /* the Add and Sub of one site (halves computed apart) end at the same value */
        const char *first = nd->n_output ? nd->output[0] : NULL;
        for (size_t i = 0; first && i < n_claimed && !dup; ++i)
            dup = !strcmp(claimed[i], first);
        if (dup) continue;
        if (!site_at(ix, cl, nd, &t, chain, &nch) &&
            !site_given_factors(ix, cl, nd, &t, chain, &nch))
            continue;
        for (int j = 0; j < nch && !dup; ++j)
            for (size_t i = 0; i < n_claimed && !dup; ++i)
                dup = !strcmp(claimed[i], chain[j]);
        if (n_claimed + (size_t)nch > cap_claimed) {
            size_t nc = 2 * cap_claimed + (size_t)nch + 16;
            const char **c2 = realloc(claimed, nc * sizeof *c2);
            if (!c2) {
                rk_site_free(&t);
                st = RK_OOM();
                break;
            }
            claimed = c2, cap_claimed = nc;
        }
        for (int j = 0; j < nch; ++j)
            claimed[n_claimed++] = chain[j];
        if (dup)
            rk_site_free(&t);
        else
            st = push_site(sites, n, cap, &t);
    }
    free(claimed);
    free(cl);
    /* sites in graph order (the report's layers, and the rewrite's order) */
    if (st == ROPEKIT_OK && *n > 1) {
        tl_sort_ix = ix;
        qsort(*sites, *n, sizeof **sites, by_position);
        for (size_t i = 0; i < *n; ++i)
            (*sites)[i].layer = (int64_t)(i / 2);
    }
    return st;
}
