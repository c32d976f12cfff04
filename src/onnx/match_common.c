/* Helpers shared by the RoPE matchers: node/attribute access, small constant evaluation (the
 * shape arithmetic exporters write into index paths), structural equivalence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_internal.h"

void rk_site_accept(rk_site *site) {
    if (site->elem_type != RK_DT_FLOAT && site->elem_type != RK_DT_FLOAT16 &&
        site->elem_type != RK_DT_BFLOAT16)
        snprintf(site->reason, RK_REASON, "'%s' has element type %s", site->x,
                 rk_dtype_name(site->elem_type));
    else
        site->angles_ok = 1;
}

void rk_angles_free(rk_angles *a) {
    free(a->positions);
    free(a->inv_freq);
    free(a->cos_rows);
    free(a->sin_rows);
    memset(a, 0, sizeof *a);
}

void rk_site_free(rk_site *s) {
    free(s->x);
    free(s->output);
    free(s->anchor);
    free(s->fused_node);
    free(s->cos_term);
    free(s->sin_term);
    free(s->x_perm);
    free(s->y_perm);
    rk_angles_free(&s->angles);
    memset(s, 0, sizeof *s);
}

static int is_default_domain(const Onnx__NodeProto *n) {
    return n->domain == NULL || n->domain[0] == '\0' || strcmp(n->domain, "ai.onnx") == 0;
}

Onnx__NodeProto *rk_producer_op(const rk_graph *ix, const char *name, const char *op) {
    if (!name) return NULL;
    Onnx__NodeProto *n = rk_graph_producer(ix, name);
    if (!n || !is_default_domain(n) || strcmp(n->op_type, op) != 0) return NULL;
    return n;
}

const char *rk_input(const Onnx__NodeProto *n, size_t i) {
    if (!n || i >= n->n_input || !n->input[i] || !n->input[i][0]) return NULL;
    return n->input[i];
}

int64_t rk_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def) {
    const Onnx__AttributeProto *a = rk_node_attr(n, name);
    return a && a->has_i ? a->i : def;
}

uint32_t rk_consumer_count(const rk_graph *ix, const char *name) {
    const rk_value *v = rk_graph_value(ix, name);
    return v ? v->n_consumers : 0;
}

Onnx__NodeProto *rk_single_consumer(const rk_graph *ix, const char *name) {
    const rk_value *v = rk_graph_value(ix, name);
    if (!v || v->n_consumers != 1 || (v->flags & RK_VALUE_OUTPUT)) return NULL;
    return ix->g->node[v->consumers[0]];
}

#define RK_EVAL_CAP 16

/* ---- shapes where the graph does not say: a little inference ------------------------------ */

static int eval_rec(const rk_graph *ix, const char *name, int64_t *out, size_t *count, int depth);
static void infer_shape(const rk_graph *ix, const char *name, rk_shape *out, int depth);

/* ---- memoization ------------------------------------------------------------------------------
 * Shape inference and the small int64 evaluation recurse into the inputs of a node, and a value
 * may be read by many paths (Concat(v, v, v) chains): uncached, that is exponential. Between
 * rk_match_begin and rk_match_end every value's result is computed once, in node order, so a
 * lookup finds its inputs already done and the whole analysis is linear in the graph. A value
 * whose producer comes later in the node list (an unsorted or cyclic graph) reads as unknown. */
enum { MEMO_NONE = 0, MEMO_BUSY = 1, MEMO_DONE = 2 };

typedef struct rk_memo {
    const rk_graph *ix;
    size_t n;
    uint8_t *shape_state, *eval_state, *eval_ok;
    rk_shape *shapes;
    int64_t (*evals)[RK_EVAL_CAP];
    uint8_t *eval_count;
    /* probe mode (rk_probe_dims): symbolic dims of declared shapes get concrete values, probe
     * k's value of the i-th distinct dim_param being probe_base[k] + i * probe_step[k] */
    int probe;
    const char *probe_param[RK_PROBE_PARAMS];
    size_t n_probe_params;
    int64_t probe_base, probe_step;
} rk_memo;

static _Thread_local rk_memo *tl_memo;

static rk_memo *memo_for(const rk_graph *ix) {
    return tl_memo && tl_memo->ix == ix ? tl_memo : NULL;
}

static size_t value_index(const rk_graph *ix, const char *name) {
    const rk_value *v = name ? rk_graph_value(ix, name) : NULL;
    return v ? (size_t)(v - ix->values) : (size_t)-1;
}

void rk_match_end(void) {
    rk_memo *m = tl_memo;
    tl_memo = NULL;
    if (!m) return;
    free(m->shape_state), free(m->eval_state), free(m->eval_ok), free(m->shapes);
    free(m->evals), free(m->eval_count);
    free(m);
}

static ropekit_status match_begin(const rk_graph *ix, int probe, int64_t base, int64_t step) {
    rk_match_end();
    rk_memo *m = calloc(1, sizeof *m);
    size_t n = ix->n_values ? ix->n_values : 1;
    if (m) {
        m->ix = ix;
        m->probe = probe;
        m->probe_base = base;
        m->probe_step = step;
        m->n = ix->n_values;
        m->shape_state = calloc(n, 1);
        m->eval_state = calloc(n, 1);
        m->eval_ok = calloc(n, 1);
        m->eval_count = calloc(n, 1);
        m->shapes = calloc(n, sizeof *m->shapes);
        m->evals = calloc(n, sizeof *m->evals);
    }
    tl_memo = m;
    if (!m || !m->shape_state || !m->eval_state || !m->eval_ok || !m->eval_count || !m->shapes ||
        !m->evals) {
        rk_match_end();
        return RK_OOM();
    }
    /* node order: each node's inputs are done before it (in a sorted graph) */
    for (size_t i = 0; i < ix->g->n_node; ++i) {
        const Onnx__NodeProto *nd = ix->g->node[i];
        for (size_t k = 0; k < nd->n_output; ++k) {
            const char *o = nd->output[k];
            if (!o || !o[0]) continue;
            rk_shape sh;
            int64_t v[RK_EVAL_CAP];
            size_t c;
            infer_shape(ix, o, &sh, 0);
            (void)eval_rec(ix, o, v, &c, 0);
        }
    }
    return ROPEKIT_OK;
}

ropekit_status rk_match_begin(const rk_graph *ix) {
    return match_begin(ix, 0, 0, 0);
}

/* probe mode: the declared symbolic dims of `name` (dim_param) get their probe values */
static void probe_declared(rk_memo *m, const rk_graph *ix, const char *name, rk_shape *out) {
    const rk_value *v = rk_graph_value(ix, name);
    const Onnx__TypeProto *tp = v && !v->initializer && v->info ? v->info->type : NULL;
    const Onnx__TypeProto__Tensor *tt =
        tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ? tp->tensor_type : NULL;
    if (!tt || !tt->shape || (int)tt->shape->n_dim != out->rank) return;
    for (int i = 0; i < out->rank; ++i) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        if (out->dims[i] >= 0 || !d ||
            d->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ||
            !d->dim_param || !d->dim_param[0])
            continue;
        size_t k = 0;
        while (k < m->n_probe_params && strcmp(m->probe_param[k], d->dim_param) != 0)
            ++k;
        if (k == m->n_probe_params) {
            if (k == RK_PROBE_PARAMS) continue; /* stays unknown */
            m->probe_param[m->n_probe_params++] = d->dim_param;
        }
        out->dims[i] = m->probe_base + (int64_t)k * m->probe_step;
    }
}

int rk_probe_dims(const rk_graph *ix, const char *const *names, size_t n, rk_shape *shapes) {
    /* two probes with different values for every symbolic dim: a dim that comes out the same
     * in both does not depend on them (the number of heads, the head size). One linear pass
     * over the graph per probe, whatever n is. */
    static const int64_t base[2] = {2, 5}, step[2] = {1, 2};
    for (int k = 0; k < 2; ++k) {
        if (match_begin(ix, 1, base[k], step[k]) != ROPEKIT_OK) return 0;
        for (size_t i = 0; i < n; ++i) {
            rk_shape sh;
            infer_shape(ix, names[i], &sh, 0);
            if (k == 0) {
                shapes[i] = sh;
                continue;
            }
            if (sh.rank != shapes[i].rank) shapes[i].rank = -1;
            for (int d = 0; d < shapes[i].rank; ++d)
                if (sh.dims[d] != shapes[i].dims[d]) shapes[i].dims[d] = -1;
        }
        rk_match_end();
    }
    return 1;
}

/* Where a Reshape target's unknown entries come from: Unsqueeze(Gather(Shape(z), k)). */
typedef struct rk_dim_src {
    const char *z[RK_SHAPE_MAX_RANK];
    int64_t k[RK_SHAPE_MAX_RANK];
} rk_dim_src;

/* A Reshape target, element by element: constants where they evaluate, -2 where they do not
 * (a Concat of pieces is evaluated piece by piece; an unknown piece must be one element, and
 * src records which dim of which value it reads when it is Gather(Shape(z), k)). */
static int reshape_target(const rk_graph *ix, const char *name, rk_shape *out, rk_dim_src *src,
                          int depth) {
    int64_t v[RK_SHAPE_MAX_RANK];
    size_t n;
    memset(src, 0, sizeof *src);
    if (eval_rec(ix, name, v, &n, depth + 1) && n <= RK_SHAPE_MAX_RANK) {
        out->rank = (int32_t)n;
        memcpy(out->dims, v, n * sizeof *v);
        return 1;
    }
    Onnx__NodeProto *cat = rk_producer_op(ix, name, "Concat");
    if (!cat || cat->n_input > RK_SHAPE_MAX_RANK) return 0;
    out->rank = 0;
    for (size_t i = 0; i < cat->n_input; ++i) {
        if (eval_rec(ix, rk_input(cat, i), v, &n, depth + 1)) {
            if (out->rank + (int32_t)n > RK_SHAPE_MAX_RANK) return 0;
            memcpy(out->dims + out->rank, v, n * sizeof *v);
            out->rank += (int32_t)n;
            continue;
        }
        Onnx__NodeProto *un = rk_producer_op(ix, rk_input(cat, i), "Unsqueeze");
        rk_shape us;
        if (!un) return 0;
        rk_graph_shape(ix, rk_input(un, 0), &us);
        if (us.rank > 0) return 0; /* only a scalar unsqueezed to one element is "one unknown" */
        Onnx__NodeProto *g = rk_producer_op(ix, rk_input(un, 0), "Gather");
        Onnx__NodeProto *sh = g ? rk_producer_op(ix, rk_input(g, 0), "Shape") : NULL;
        int64_t k;
        size_t nk;
        if (sh && rk_attr_i(g, "axis", 0) == 0 && rk_attr_i(sh, "start", 0) == 0 &&
            eval_rec(ix, rk_input(g, 1), &k, &nk, depth + 1) && nk == 1 && k >= 0) {
            src->z[out->rank] = rk_input(sh, 0);
            src->k[out->rank] = k;
        }
        out->dims[out->rank++] = -2; /* unknown value */
    }
    return 1;
}

/* Does `data` have z's dims except possibly the last? True when data comes from z through ops
 * that keep them: MatMul(., W) with a 2D constant W, elementwise ops with a constant of rank
 * <= 1, Cast, Identity. */
static int keeps_leading_dims(const rk_graph *ix, const char *data, const char *z) {
    for (int guard = 0; data && guard < 16; ++guard) {
        if (!strcmp(data, z)) return 1;
        Onnx__NodeProto *n = rk_graph_producer(ix, data);
        if (!n || !is_default_domain(n)) return 0;
        rk_shape c;
        if (!strcmp(n->op_type, "Cast") || !strcmp(n->op_type, "Identity")) {
            data = rk_input(n, 0);
        } else if (!strcmp(n->op_type, "MatMul")) {
            const char *wn = rk_skip_casts(ix, rk_input(n, 1), NULL);
            const rk_value *w = rk_graph_value(ix, wn);
            rk_graph_shape(ix, wn, &c);
            if (!w || !w->initializer || c.rank != 2) return 0;
            data = rk_input(n, 0);
        } else if (!strcmp(n->op_type, "Add") || !strcmp(n->op_type, "Mul") ||
                   !strcmp(n->op_type, "Sub") || !strcmp(n->op_type, "Div")) {
            int side = -1;
            for (int i = 0; i < 2 && side < 0; ++i) {
                const char *opnd = rk_skip_casts(ix, rk_input(n, (size_t)i), NULL);
                const rk_value *cv = rk_graph_value(ix, opnd);
                rk_graph_shape(ix, opnd, &c);
                if (cv && cv->initializer && c.rank >= 0 && c.rank <= 1) side = i;
            }
            if (side < 0) return 0;
            data = rk_input(n, (size_t)(1 - side));
        } else {
            return 0;
        }
    }
    return 0;
}

static void infer_shape_compute(const rk_graph *ix, const char *name, rk_shape *out, int depth);

static void infer_shape(const rk_graph *ix, const char *name, rk_shape *out, int depth) {
    rk_memo *m = memo_for(ix);
    size_t i = m ? value_index(ix, name) : (size_t)-1;
    if (i >= (m ? m->n : 0)) {
        infer_shape_compute(ix, name, out, depth);
        return;
    }
    if (m->shape_state[i] == MEMO_DONE) {
        *out = m->shapes[i];
        return;
    }
    if (m->shape_state[i] == MEMO_BUSY || (ix->values[i].producer >= 0 && depth > 0)) {
        /* a cycle, or a producer later in the node order: only what the graph declares */
        rk_graph_shape(ix, name, out);
        return;
    }
    m->shape_state[i] = MEMO_BUSY;
    infer_shape_compute(ix, name, out, 0);
    m->shapes[i] = *out;
    m->shape_state[i] = MEMO_DONE;
}

static void infer_shape_compute(const rk_graph *ix, const char *name, rk_shape *out, int depth) {
    if (!name) { /* an absent input (a fuzzed Where/Add with one operand) */
        memset(out, 0, sizeof *out);
        out->rank = -1;
        return;
    }
    rk_graph_shape(ix, name, out);
    rk_memo *m = memo_for(ix);
    if (m && m->probe && out->rank > 0) probe_declared(m, ix, name, out);
    if (out->rank >= 0 || depth > 24) return;
    Onnx__NodeProto *n = rk_graph_producer(ix, name);
    if (!n || !is_default_domain(n)) return;
    const char *op = n->op_type;
    rk_shape in;
    if (!strcmp(op, "Transpose")) {
        infer_shape(ix, rk_input(n, 0), &in, depth + 1);
        const Onnx__AttributeProto *perm = rk_node_attr(n, "perm");
        if (in.rank < 0 || !perm || perm->n_ints != (size_t)in.rank) return;
        for (int i = 0; i < in.rank; ++i) {
            if (perm->ints[i] < 0 || perm->ints[i] >= in.rank) return;
            out->dims[i] = in.dims[perm->ints[i]];
        }
        out->rank = in.rank;
        out->elem_type = in.elem_type;
    } else if (!strcmp(op, "Reshape")) {
        rk_shape t;
        rk_dim_src src;
        if (!reshape_target(ix, rk_input(n, 1), &t, &src, depth)) return;
        if (t.rank == 1 && t.dims[0] == -1) { /* flatten: 1D, length = numel when known */
            infer_shape(ix, rk_input(n, 0), &in, depth + 1);
            int64_t numel = in.rank >= 0 ? 1 : -1;
            for (int i = 0; i < in.rank && numel >= 0; ++i)
                numel = in.dims[i] < 0 ? -1 : numel * in.dims[i];
            out->rank = 1;
            out->dims[0] = numel;
            out->elem_type = in.elem_type;
            return;
        }
        infer_shape(ix, rk_input(n, 0), &in, depth + 1);
        int allowzero = (int)rk_attr_i(n, "allowzero", 0);
        /* entries read from the data's own leading dims (view(*x.shape[:-1], -1, H)) */
        int proven = 0;
        while (proven < t.rank && t.dims[proven] == -2 && src.z[proven] &&
               src.k[proven] == proven && in.rank > 0 && proven < in.rank - 1 &&
               keeps_leading_dims(ix, rk_input(n, 0), src.z[proven]))
            ++proven;
        int64_t known = 1, minus_one = -1;
        int resolvable = in.rank == proven + 1 && in.dims[in.rank - 1] > 0;
        for (int i = proven; i < t.rank && resolvable; ++i) {
            if (t.dims[i] == -1 && minus_one < 0) minus_one = i;
            else if (t.dims[i] > 0) known *= t.dims[i];
            else resolvable = 0;
        }
        for (int i = 0; i < t.rank; ++i) {
            int64_t d = t.dims[i];
            if (d == 0 && !allowzero) d = in.rank > i ? in.dims[i] : -1;
            if (i < proven) d = in.dims[i];
            out->dims[i] = d < 0 ? -1 : d;
        }
        if (resolvable && minus_one >= 0 && in.dims[in.rank - 1] % known == 0)
            out->dims[minus_one] = in.dims[in.rank - 1] / known;
        /* every dim known but one -1 (static shapes, or the probes of rk_probe_dims): numel */
        int64_t numel = in.rank >= 0 ? 1 : -1, rest = 1;
        minus_one = -1;
        for (int i = 0; i < in.rank && numel > 0; ++i)
            numel = in.dims[i] < 0 || (in.dims[i] && numel > INT64_MAX / in.dims[i])
                        ? -1
                        : numel * in.dims[i];
        for (int i = 0; i < t.rank && numel > 0 && rest > 0; ++i) {
            if (out->dims[i] >= 0 && t.dims[i] != -1)
                rest = out->dims[i] && rest > INT64_MAX / out->dims[i] ? -1 : rest * out->dims[i];
            else if (t.dims[i] == -1 && minus_one < 0)
                minus_one = i;
            else
                rest = -1;
        }
        if (numel > 0 && rest > 0 && minus_one >= 0 && numel % rest == 0)
            out->dims[minus_one] = numel / rest;
        out->rank = t.rank;
        out->elem_type = in.elem_type;
    } else if (!strcmp(op, "Slice") || !strcmp(op, "Split")) {
        infer_shape(ix, rk_input(n, 0), &in, depth + 1);
        if (in.rank <= 0) return;
        int64_t axis, len = -1;
        if (!strcmp(op, "Slice")) {
            int64_t a, b, st;
            if (!rk_slice_params(ix, n, &a, &b, &axis, &st) || st != 1) return; /* unknown */
            if (axis < 0) axis += in.rank;
            if (axis < 0 || axis >= in.rank) return;
            int64_t d = in.dims[axis];
            if (d >= 0) {
                if (a < 0) a += d;
                if (b < 0) b += d;
                if (b > d) b = d;
                if (a < 0) a = 0;
                len = b > a ? b - a : 0;
            } else if (a >= 0 && b >= a && b < ((int64_t)1 << 40)) {
                len = b - a; /* exact only if the dim is at least b: assumed by the exporter */
            }
        } else {
            axis = rk_attr_i(n, "axis", 0);
            if (axis < 0) axis += in.rank;
            if (axis < 0 || axis >= in.rank) return;
            size_t k = 0;
            while (k < n->n_output && strcmp(n->output[k], name) != 0) ++k;
            int64_t sizes[RK_EVAL_CAP];
            size_t ns;
            if (rk_input(n, 1) && eval_rec(ix, rk_input(n, 1), sizes, &ns, depth + 1) && k < ns)
                len = sizes[k];
            else if (in.dims[axis] >= 0 && in.dims[axis] % (int64_t)n->n_output == 0)
                len = in.dims[axis] / (int64_t)n->n_output;
        }
        *out = in;
        out->dims[axis] = len;
    } else if (!strcmp(op, "Gather")) {
        rk_shape idx;
        infer_shape(ix, rk_input(n, 0), &in, depth + 1);
        infer_shape(ix, rk_input(n, 1), &idx, depth + 1);
        int64_t axis = rk_attr_i(n, "axis", 0);
        if (in.rank <= 0 || idx.rank < 0) return;
        if (axis < 0) axis += in.rank;
        if (axis < 0 || axis >= in.rank || in.rank - 1 + idx.rank > RK_SHAPE_MAX_RANK) return;
        int r = 0;
        for (int i = 0; i < axis; ++i) out->dims[r++] = in.dims[i];
        for (int i = 0; i < idx.rank; ++i) out->dims[r++] = idx.dims[i];
        for (int i = (int)axis + 1; i < in.rank; ++i) out->dims[r++] = in.dims[i];
        out->rank = r;
        out->elem_type = in.elem_type;
    } else if (!strcmp(op, "ConstantOfShape")) {
        rk_shape s1;
        infer_shape(ix, rk_input(n, 0), &s1, depth + 1);
        if (s1.rank != 1 || s1.dims[0] < 0 || s1.dims[0] > RK_SHAPE_MAX_RANK) return;
        int64_t v[RK_SHAPE_MAX_RANK];
        size_t nv;
        int known = eval_rec(ix, rk_input(n, 0), v, &nv, depth + 1) && nv == (size_t)s1.dims[0];
        out->rank = (int32_t)s1.dims[0];
        for (int i = 0; i < out->rank; ++i) out->dims[i] = known ? v[i] : -1;
    } else if (!strcmp(op, "Mul") || !strcmp(op, "Add") || !strcmp(op, "Sub") ||
               !strcmp(op, "Div") || !strcmp(op, "Pow") || !strcmp(op, "Where") ||
               !strcmp(op, "Equal")) {
        /* numpy broadcasting; an unknown dim against 1 stays unknown. Where: its two values */
        rk_shape b;
        int off = !strcmp(op, "Where");
        infer_shape(ix, rk_input(n, (size_t)off), &in, depth + 1);
        infer_shape(ix, rk_input(n, (size_t)off + 1), &b, depth + 1);
        if (in.rank < 0 || b.rank < 0) return;
        int r = in.rank > b.rank ? in.rank : b.rank;
        for (int i = 0; i < r; ++i) {
            int ia = i - (r - in.rank), ib = i - (r - b.rank);
            int64_t da = ia >= 0 ? in.dims[ia] : 1, db = ib >= 0 ? b.dims[ib] : 1;
            int64_t d;
            if (da == db) d = da;
            else if (da == 1) d = db;
            else if (db == 1) d = da;
            else if (da < 0) d = db; /* the known one, if the graph is valid */
            else if (db < 0) d = da;
            else return;             /* incompatible: leave unknown */
            out->dims[i] = d;
        }
        out->rank = r;
        out->elem_type = in.elem_type ? in.elem_type : b.elem_type;
    } else if (!strcmp(op, "ReduceMean") || !strcmp(op, "ReduceSum")) {
        infer_shape(ix, rk_input(n, 0), &in, depth + 1);
        int64_t axes[RK_SHAPE_MAX_RANK];
        size_t na = 0;
        const Onnx__AttributeProto *aa = rk_node_attr(n, "axes");
        if (aa && aa->n_ints <= RK_SHAPE_MAX_RANK) {
            na = aa->n_ints;
            memcpy(axes, aa->ints, na * sizeof *axes);
        } else if (!rk_input(n, 1) || !eval_rec(ix, rk_input(n, 1), axes, &na, depth + 1)) {
            return;
        }
        if (in.rank <= 0 || !rk_attr_i(n, "keepdims", 1)) return;
        *out = in;
        for (size_t i = 0; i < na; ++i) {
            int64_t ax = axes[i] < 0 ? axes[i] + in.rank : axes[i];
            if (ax < 0 || ax >= in.rank) {
                out->rank = -1;
                return;
            }
            out->dims[ax] = 1;
        }
    } else if (!strcmp(op, "Concat")) {
        /* the axis dim is the sum of the inputs' when all are known */
        int64_t axis = rk_attr_i(n, "axis", 0), sum = 0;
        for (size_t i = 0; i < n->n_input; ++i) {
            rk_shape p;
            infer_shape(ix, rk_input(n, i), &p, depth + 1);
            if (p.rank <= 0) return;
            int64_t ax = axis < 0 ? axis + p.rank : axis;
            if (ax < 0 || ax >= p.rank || (i > 0 && p.rank != in.rank)) return;
            if (i == 0) in = p;
            sum = (sum < 0 || p.dims[ax] < 0) ? -1 : sum + p.dims[ax];
        }
        if (n->n_input == 0) return;
        *out = in;
        out->dims[axis < 0 ? axis + in.rank : axis] = sum;
    } else if (!strcmp(op, "Unsqueeze")) {
        int64_t axes[RK_SHAPE_MAX_RANK];
        size_t na = 0;
        infer_shape(ix, rk_input(n, 0), &in, depth + 1);
        if (in.rank < 0 || !rk_input(n, 1) || !eval_rec(ix, rk_input(n, 1), axes, &na, depth + 1))
            return;
        int r = in.rank + (int)na, k = 0;
        if (r > RK_SHAPE_MAX_RANK) return;
        int is_new[RK_SHAPE_MAX_RANK] = {0};
        for (size_t i = 0; i < na; ++i) {
            int64_t ax = axes[i] < 0 ? axes[i] + r : axes[i];
            if (ax < 0 || ax >= r) return;
            is_new[ax] = 1;
        }
        for (int i = 0; i < r; ++i) out->dims[i] = is_new[i] ? 1 : in.dims[k++];
        out->rank = r;
        out->elem_type = in.elem_type;
    } else if (!strcmp(op, "Expand")) {
        /* dims other than 1 are kept (Expand only broadcasts ones); the target may add leading
         * dims, which stay unknown unless the target evaluates */
        int64_t t[RK_SHAPE_MAX_RANK];
        size_t nt = 0;
        infer_shape(ix, rk_input(n, 0), &in, depth + 1);
        if (in.rank < 0) return;
        int known = rk_input(n, 1) && eval_rec(ix, rk_input(n, 1), t, &nt, depth + 1) &&
                    nt <= RK_SHAPE_MAX_RANK;
        if (!known) {
            rk_shape ts;
            infer_shape(ix, rk_input(n, 1), &ts, depth + 1);
            if (ts.rank != 1 || ts.dims[0] < 0 || ts.dims[0] > RK_SHAPE_MAX_RANK) return;
            nt = (size_t)ts.dims[0];
        }
        int r = in.rank > (int)nt ? in.rank : (int)nt;
        for (int i = 0; i < r; ++i) {
            int ii = i - (r - in.rank), it = i - (r - (int)nt);
            int64_t di = ii >= 0 ? in.dims[ii] : 1, dt = known && it >= 0 ? t[it] : -1;
            out->dims[i] = di != 1 ? di : (known ? (it >= 0 ? dt : 1) : -1);
        }
        out->rank = r;
        out->elem_type = in.elem_type;
    } else if (!strcmp(op, "Tile")) {
        /* the input's rank; dims times the repeats where both are known */
        rk_shape t;
        rk_dim_src src;
        infer_shape(ix, rk_input(n, 0), &in, depth + 1);
        if (in.rank < 0) return;
        int known = rk_input(n, 1) && reshape_target(ix, rk_input(n, 1), &t, &src, depth) &&
                    t.rank == in.rank;
        for (int i = 0; i < in.rank; ++i) {
            int64_t r = known ? t.dims[i] : -1;
            out->dims[i] = in.dims[i] >= 0 && r >= 0 && (r == 0 || in.dims[i] <= INT64_MAX / r)
                               ? in.dims[i] * r : -1;
        }
        out->rank = in.rank;
        out->elem_type = in.elem_type;
    } else if (!strcmp(op, "MatMul")) {
        rk_shape b;
        infer_shape(ix, rk_input(n, 0), &in, depth + 1);
        infer_shape(ix, rk_input(n, 1), &b, depth + 1);
        if (in.rank < 2 || b.rank < 2) return;
        int r = in.rank > b.rank ? in.rank : b.rank;
        for (int i = 0; i < r - 2; ++i) {
            int ia = i - (r - in.rank), ib = i - (r - b.rank);
            int64_t da = ia >= 0 ? in.dims[ia] : 1, db = ib >= 0 ? b.dims[ib] : 1;
            out->dims[i] = da == 1 ? db : (db == 1 ? da : (da == db ? da : -1));
        }
        out->dims[r - 2] = in.dims[in.rank - 2];
        out->dims[r - 1] = b.dims[b.rank - 1];
        out->rank = r;
        out->elem_type = in.elem_type;
    } else if (!strcmp(op, "Shape")) {
        infer_shape(ix, rk_input(n, 0), &in, depth + 1);
        if (in.rank < 0) return;
        int64_t start = rk_attr_i(n, "start", 0), end = rk_attr_i(n, "end", in.rank);
        if (start < 0) start += in.rank;
        if (end < 0) end += in.rank;
        if (end > in.rank) end = in.rank;
        out->rank = 1;
        out->dims[0] = start >= 0 && end >= start ? end - start : -1;
        out->elem_type = RK_DT_INT64;
    } else if (!strcmp(op, "Sqrt") || !strcmp(op, "Reciprocal") || !strcmp(op, "Sigmoid") ||
               !strcmp(op, "Softmax") || !strcmp(op, "Cos") || !strcmp(op, "Sin") ||
               !strcmp(op, "LayerNormalization") || !strcmp(op, "Erf") || !strcmp(op, "Tanh") ||
               !strcmp(op, "Relu") || !strcmp(op, "Gelu") || !strcmp(op, "Dropout")) {
        /* output 0 has the shape of input 0 */
        if (strcmp(n->output[0], name) != 0) return;
        infer_shape(ix, rk_input(n, 0), out, depth + 1);
    } else if (!strcmp(op, "Cast") || !strcmp(op, "Identity") || !strcmp(op, "Neg")) {
        infer_shape(ix, rk_input(n, 0), out, depth + 1);
        if (!strcmp(op, "Cast")) out->elem_type = (int32_t)rk_attr_i(n, "to", 0);
    }
}

Onnx__NodeProto *rk_main_consumer(const rk_graph *ix, const char *name) {
    const rk_value *v = rk_graph_value(ix, name);
    if (!v || (v->flags & RK_VALUE_OUTPUT)) return NULL;
    Onnx__NodeProto *main = NULL;
    for (uint32_t i = 0; i < v->n_consumers; ++i) {
        Onnx__NodeProto *c = ix->g->node[v->consumers[i]];
        if (!strcmp(c->op_type, "Shape") && (!c->domain || !c->domain[0])) continue;
        if (main) return NULL;
        main = c;
    }
    return main;
}

int rk_value_rank(const rk_graph *ix, const char *name, rk_shape *shape) {
    infer_shape(ix, name, shape, 0);
    return shape->rank > 0;
}

const char *rk_skip_casts(const rk_graph *ix, const char *name, int32_t *last_cast_to) {
    for (int guard = 0; name && guard < 16; ++guard) {
        Onnx__NodeProto *n = rk_graph_producer(ix, name);
        if (!n || !is_default_domain(n)) break;
        if (strcmp(n->op_type, "Cast") == 0) {
            if (last_cast_to && *last_cast_to == 0) *last_cast_to = (int32_t)rk_attr_i(n, "to", 0);
        } else if (strcmp(n->op_type, "Identity") != 0) {
            break;
        }
        name = rk_input(n, 0);
    }
    return name;
}

int rk_const_scalar_f(const rk_graph *ix, const char *name, float *out) {
    double v;
    size_t count;
    if (!name || rk_graph_const_f64(ix, name, &v, 1, &count) != ROPEKIT_OK || count != 1) return 0;
    *out = (float)v;
    return 1;
}

/* ---- small int64 evaluation ------------------------------------------------------------------ */


static int eval_binary(const rk_graph *ix, const Onnx__NodeProto *n, int op, int64_t *out,
                       size_t *count, int depth) {
    int64_t a[RK_EVAL_CAP], b[RK_EVAL_CAP];
    size_t na, nb;
    if (!eval_rec(ix, rk_input(n, 0), a, &na, depth + 1) ||
        !eval_rec(ix, rk_input(n, 1), b, &nb, depth + 1))
        return 0;
    size_t m = na > nb ? na : nb;
    if ((na != m && na != 1) || (nb != m && nb != 1)) return 0;
    for (size_t i = 0; i < m; ++i) {
        int64_t x = a[na == 1 ? 0 : i], y = b[nb == 1 ? 0 : i], r;
        switch (op) {
        case '+': if (__builtin_add_overflow(x, y, &r)) return 0; break;
        case '-': if (__builtin_sub_overflow(x, y, &r)) return 0; break;
        case '*': if (__builtin_mul_overflow(x, y, &r)) return 0; break;
        default: /* floor division, as ONNX Div on integers truncates: only exact, positive */
            if (y <= 0 || x < 0) return 0;
            r = x / y;
        }
        out[i] = r;
    }
    *count = m;
    return 1;
}

static int eval_compute(const rk_graph *ix, const char *name, int64_t *out, size_t *count,
                        int depth);

static int eval_rec(const rk_graph *ix, const char *name, int64_t *out, size_t *count, int depth) {
    rk_memo *m = memo_for(ix);
    size_t i = m ? value_index(ix, name) : (size_t)-1;
    if (i >= (m ? m->n : 0)) return eval_compute(ix, name, out, count, depth);
    if (m->eval_state[i] == MEMO_DONE) {
        if (!m->eval_ok[i]) return 0;
        *count = m->eval_count[i];
        memcpy(out, m->evals[i], *count * sizeof *out);
        return 1;
    }
    if (m->eval_state[i] == MEMO_BUSY || (ix->values[i].producer >= 0 && depth > 0))
        return 0; /* a cycle, or a producer later in the node order */
    m->eval_state[i] = MEMO_BUSY;
    int64_t buf[RK_EVAL_CAP];
    size_t c = 0;
    int ok = eval_compute(ix, name, buf, &c, 0) && c <= RK_EVAL_CAP;
    m->eval_ok[i] = (uint8_t)ok;
    m->eval_count[i] = (uint8_t)(ok ? c : 0);
    if (ok) memcpy(m->evals[i], buf, c * sizeof *buf);
    m->eval_state[i] = MEMO_DONE;
    if (!ok) return 0;
    *count = c;
    memcpy(out, buf, c * sizeof *buf);
    return 1;
}

static int eval_compute(const rk_graph *ix, const char *name, int64_t *out, size_t *count,
                        int depth) {
    if (!name || depth > 24) return 0;
    if (rk_graph_const_i64(ix, name, out, RK_EVAL_CAP, count) == ROPEKIT_OK) return 1;
    Onnx__NodeProto *n = rk_graph_producer(ix, name);
    if (!n || !is_default_domain(n)) return 0;
    const char *op = n->op_type;
    if (!strcmp(op, "Cast") || !strcmp(op, "Identity") || !strcmp(op, "Unsqueeze") ||
        !strcmp(op, "Squeeze") || !strcmp(op, "Reshape"))
        return eval_rec(ix, rk_input(n, 0), out, count, depth + 1); /* values kept in order */
    if (!strcmp(op, "Add")) return eval_binary(ix, n, '+', out, count, depth);
    if (!strcmp(op, "Sub")) return eval_binary(ix, n, '-', out, count, depth);
    if (!strcmp(op, "Mul")) return eval_binary(ix, n, '*', out, count, depth);
    if (!strcmp(op, "Div")) return eval_binary(ix, n, '/', out, count, depth);
    if (!strcmp(op, "Shape")) {
        rk_shape sh;
        infer_shape(ix, rk_input(n, 0), &sh, depth + 1);
        if (sh.rank <= 0) return 0;
        int64_t start = rk_attr_i(n, "start", 0), end = rk_attr_i(n, "end", sh.rank);
        if (start < 0) start += sh.rank;
        if (end < 0) end += sh.rank;
        if (end > sh.rank) end = sh.rank;
        if (start < 0 || start > end || end - start > RK_EVAL_CAP) return 0;
        for (int64_t i = start; i < end; ++i) {
            if (sh.dims[i] < 0) return 0; /* symbolic */
            out[i - start] = sh.dims[i];
        }
        *count = (size_t)(end - start);
        return 1;
    }
    if (!strcmp(op, "Gather")) {
        int64_t data[RK_EVAL_CAP], idx[RK_EVAL_CAP];
        size_t nd, ni;
        if (rk_attr_i(n, "axis", 0) != 0) return 0;
        Onnx__NodeProto *shp = rk_producer_op(ix, rk_input(n, 0), "Shape");
        if (shp && eval_rec(ix, rk_input(n, 1), idx, &ni, depth + 1)) {
            /* Gather(Shape(x), k): only the gathered dims need to be known */
            rk_shape sh;
            infer_shape(ix, rk_input(shp, 0), &sh, depth + 1);
            if (sh.rank <= 0) return 0;
            int64_t start = rk_attr_i(shp, "start", 0), end = rk_attr_i(shp, "end", sh.rank);
            if (start < 0) start += sh.rank;
            if (end < 0) end += sh.rank;
            if (end > sh.rank) end = sh.rank;
            if (start < 0 || start > end) return 0;
            for (size_t i = 0; i < ni; ++i) {
                int64_t k = idx[i] < 0 ? idx[i] + (end - start) : idx[i];
                if (k < 0 || k >= end - start || sh.dims[start + k] < 0) return 0;
                out[i] = sh.dims[start + k];
            }
            *count = ni;
            return 1;
        }
        if (!eval_rec(ix, rk_input(n, 0), data, &nd, depth + 1) ||
            !eval_rec(ix, rk_input(n, 1), idx, &ni, depth + 1))
            return 0;
        for (size_t i = 0; i < ni; ++i) {
            int64_t k = idx[i] < 0 ? idx[i] + (int64_t)nd : idx[i];
            if (k < 0 || k >= (int64_t)nd) return 0;
            out[i] = data[k];
        }
        *count = ni;
        return 1;
    }
    if (!strcmp(op, "Concat")) {
        size_t total = 0;
        for (size_t i = 0; i < n->n_input; ++i) {
            int64_t part[RK_EVAL_CAP];
            size_t np;
            if (!eval_rec(ix, rk_input(n, i), part, &np, depth + 1) || total + np > RK_EVAL_CAP)
                return 0;
            memcpy(out + total, part, np * sizeof *part);
            total += np;
        }
        *count = total;
        return 1;
    }
    return 0;
}

int rk_eval_i64(const rk_graph *ix, const char *name, int64_t *out, size_t cap, size_t *count) {
    int64_t buf[RK_EVAL_CAP];
    size_t n;
    if (!eval_rec(ix, name, buf, &n, 0) || n > cap) return 0;
    memcpy(out, buf, n * sizeof *buf);
    *count = n;
    return 1;
}

int rk_eval_i64_scalar(const rk_graph *ix, const char *name, int64_t *out) {
    size_t n;
    return rk_eval_i64(ix, name, out, 1, &n) && n == 1;
}

int rk_slice_params(const rk_graph *ix, const Onnx__NodeProto *n, int64_t *start, int64_t *end,
                    int64_t *axis, int64_t *step) {
    if (!n || strcmp(n->op_type, "Slice") != 0 || n->n_input < 3) return 0;
    if (!rk_eval_i64_scalar(ix, rk_input(n, 1), start) ||
        !rk_eval_i64_scalar(ix, rk_input(n, 2), end))
        return 0;
    *axis = -1; /* absent axes: all axes in order; with one start that means axis 0 */
    if (rk_input(n, 3)) {
        if (!rk_eval_i64_scalar(ix, rk_input(n, 3), axis)) return 0;
    } else {
        *axis = 0;
    }
    *step = 1;
    if (rk_input(n, 4) && !rk_eval_i64_scalar(ix, rk_input(n, 4), step)) return 0;
    return 1;
}

/* ---- structural equivalence ------------------------------------------------------------------ */

static int attrs_equal(const Onnx__NodeProto *a, const Onnx__NodeProto *b) {
    if (a->n_attribute != b->n_attribute) return 0;
    for (size_t i = 0; i < a->n_attribute; ++i) {
        const Onnx__AttributeProto *x = a->attribute[i];
        const Onnx__AttributeProto *y = rk_node_attr(b, x->name);
        if (!y || x->type != y->type || x->has_i != y->has_i || x->i != y->i || x->f != y->f ||
            x->n_ints != y->n_ints || x->n_floats != y->n_floats || x->t || y->t || x->g || y->g)
            return 0;
        if (x->n_ints && memcmp(x->ints, y->ints, x->n_ints * sizeof *x->ints) != 0) return 0;
        if (x->n_floats && memcmp(x->floats, y->floats, x->n_floats * sizeof *x->floats) != 0)
            return 0;
        if (x->has_s != y->has_s || x->s.len != y->s.len ||
            (x->s.len && memcmp(x->s.data, y->s.data, x->s.len) != 0))
            return 0;
    }
    return 1;
}

static int consts_equal(const rk_graph *ix, const char *a, const char *b) {
    double va[64], vb[64];
    size_t na, nb;
    rk_shape sa, sb;
    if (rk_graph_const_f64(ix, a, va, 64, &na) != ROPEKIT_OK ||
        rk_graph_const_f64(ix, b, vb, 64, &nb) != ROPEKIT_OK || na != nb)
        return 0;
    rk_graph_shape(ix, a, &sa);
    rk_graph_shape(ix, b, &sb);
    if (sa.elem_type != sb.elem_type || sa.rank != sb.rank) return 0;
    return memcmp(va, vb, na * sizeof *va) == 0;
}

/* work, not only depth, is bounded: at most EQUIV_BUDGET value pairs per question */
#define EQUIV_BUDGET 4096

static int equivalent_rec(const rk_graph *ix, const char *a, const char *b, int depth,
                          int *budget) {
    if (!a || !b) return 0;
    if (strcmp(a, b) == 0) return 1;
    if (depth <= 0 || --*budget < 0) return 0;
    if (consts_equal(ix, a, b)) return 1;
    Onnx__NodeProto *na = rk_graph_producer(ix, a), *nb = rk_graph_producer(ix, b);
    if (!na || !nb || strcmp(na->op_type, nb->op_type) != 0 || na->n_input != nb->n_input ||
        na->n_output != 1 || nb->n_output != 1 || !attrs_equal(na, nb))
        return 0;
    if ((na->domain ? na->domain : "")[0] != (nb->domain ? nb->domain : "")[0]) return 0;
    for (size_t i = 0; i < na->n_input; ++i) {
        const char *x = rk_input(na, i), *y = rk_input(nb, i);
        if (!x && !y) continue;
        if (!equivalent_rec(ix, x, y, depth - 1, budget)) return 0;
    }
    return 1;
}

int rk_equivalent(const rk_graph *ix, const char *a, const char *b, int depth) {
    int budget = EQUIV_BUDGET;
    return equivalent_rec(ix, a, b, depth, &budget);
}

const char *rk_other_operand(const Onnx__NodeProto *n, const char *one) {
    if (n->n_input != 2) return NULL;
    if (rk_input(n, 0) && strcmp(n->input[0], one) == 0) return rk_input(n, 1);
    if (rk_input(n, 1) && strcmp(n->input[1], one) == 0) return rk_input(n, 0);
    return NULL;
}

int rk_is_last_axis(int64_t axis, int rank) { return axis == -1 || (rank > 0 && axis == rank - 1); }

#define BIG_END ((int64_t)1 << 40) /* "to the end" in a Slice: any end at or past this */

