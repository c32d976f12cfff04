/* A small numeric evaluator of ONNX nodes on concrete, small tensors (see fuse_internal.h).
 *
 * Values are held as doubles (integers exactly up to 2^53, which probe shapes and positions never
 * approach) and rounded to their element type after every operation, so float32 and float16
 * arithmetic is reproduced as a runtime computes it. Each value is evaluated once per evaluator
 * (memoized by value index); the recursion is bounded in depth, every tensor in elements and the
 * whole evaluation in elements allocated, so the cost is linear in the subgraph and bounded. An op
 * outside the supported set, a broadcast that does not fit, an index out of range or a symbolic
 * dimension without a probe value make the value (and everything that reads it) fail, with the
 * reason kept for the caller. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_internal.h"

#define EVAL_MAX_DEPTH 512
#define EVAL_MAX_DIMS 32

enum { ST_NONE = 0, ST_BUSY = 1, ST_OK = 2, ST_FAIL = 3 };

struct rk_eval {
    const rk_graph *ix;
    int64_t max_elems, budget;
    uint8_t *state;
    rk_ten **vals;
    size_t n;
    char *dim_name[EVAL_MAX_DIMS];
    int64_t dim_value[EVAL_MAX_DIMS];
    size_t n_dims;
    int64_t default_dim;
    char err[RK_REASON];   /* the failure of the current question */
    char first[RK_REASON]; /* the first failure, for values that failed before */
};

static int efail(rk_eval *e, const char *fmt, ...) {
    if (!e->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->err, sizeof e->err, fmt, ap);
        va_end(ap);
        if (!e->first[0]) memcpy(e->first, e->err, sizeof e->first);
    }
    return 0;
}

static void ten_free(rk_ten *t) {
    if (t) free(t->v), free(t);
}

static int is_float_type(int32_t t) {
    return t == RK_DT_FLOAT || t == RK_DT_FLOAT16 || t == RK_DT_BFLOAT16 || t == RK_DT_DOUBLE;
}

static double round_to(int32_t t, double x) {
    switch (t) {
    case RK_DT_FLOAT: return (double)(float)x;
    case RK_DT_FLOAT16: return (double)rk_f16_to_f32(rk_f64_to_f16(x));
    case RK_DT_BFLOAT16: return (double)rk_bf16_to_f32(rk_f64_to_bf16(x));
    case RK_DT_DOUBLE: return x;
    case RK_DT_BOOL: return x != 0;
    default: return isfinite(x) ? trunc(x) : 0; /* integers */
    }
}

static rk_ten *ten_new(rk_eval *e, int32_t type, int rank, const int64_t *dims) {
    if (rank < 0 || rank > RK_SHAPE_MAX_RANK) {
        efail(e, "a tensor of rank %d", rank);
        return NULL;
    }
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) {
        if (dims[i] < 0 || (dims[i] && n > e->max_elems / dims[i])) {
            efail(e, "a probe tensor would exceed %lld elements", (long long)e->max_elems);
            return NULL;
        }
        n *= dims[i];
    }
    if (n > e->max_elems || (e->budget -= n) < 0) {
        efail(e, "the evaluation would exceed its element budget");
        return NULL;
    }
    rk_ten *t = calloc(1, sizeof *t);
    if (t) t->v = calloc((size_t)(n ? n : 1), sizeof *t->v);
    if (!t || !t->v) {
        ten_free(t);
        efail(e, "out of memory");
        return NULL;
    }
    t->type = type;
    t->rank = rank;
    if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
    t->n = n;
    return t;
}

rk_eval *rk_eval_new(const rk_graph *ix, int64_t max_elems, int64_t budget) {
    rk_eval *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->ix = ix;
    e->max_elems = max_elems;
    e->budget = budget;
    e->n = ix->n_values;
    e->default_dim = -1;
    e->state = calloc(e->n ? e->n : 1, 1);
    e->vals = calloc(e->n ? e->n : 1, sizeof *e->vals);
    if (!e->state || !e->vals) {
        rk_eval_free(e);
        return NULL;
    }
    return e;
}

void rk_eval_free(rk_eval *e) {
    if (!e) return;
    for (size_t i = 0; e->vals && i < e->n; ++i)
        ten_free(e->vals[i]);
    for (size_t i = 0; i < e->n_dims; ++i)
        free(e->dim_name[i]);
    free(e->vals), free(e->state), free(e);
}

const char *rk_eval_error(const rk_eval *e) {
    return e->err[0] ? e->err : "evaluation failed";
}

int rk_eval_set_dim(rk_eval *e, const char *param, int64_t value) {
    if (!param || !param[0]) {
        e->default_dim = value;
        return 1;
    }
    for (size_t i = 0; i < e->n_dims; ++i)
        if (!strcmp(e->dim_name[i], param)) return e->dim_value[i] == value;
    if (e->n_dims == EVAL_MAX_DIMS) return 0;
    e->dim_name[e->n_dims] = rk_strdup(param);
    if (!e->dim_name[e->n_dims]) return 0;
    e->dim_value[e->n_dims++] = value;
    return 1;
}

static int64_t dim_of(const rk_eval *e, const char *param) {
    for (size_t i = 0; param && i < e->n_dims; ++i)
        if (!strcmp(e->dim_name[i], param)) return e->dim_value[i];
    return -1;
}

static size_t vindex(const rk_eval *e, const char *name) {
    const rk_value *v = name ? rk_graph_value(e->ix, name) : NULL;
    return v ? (size_t)(v - e->ix->values) : (size_t)-1;
}

int rk_eval_bind(rk_eval *e, const char *name, int32_t type, int rank, const int64_t *dims,
                 const double *values) {
    size_t i = vindex(e, name);
    if (i >= e->n) return efail(e, "'%s' is not a value of the graph", name ? name : "?");
    rk_ten *t = ten_new(e, type, rank, dims);
    if (!t) return 0;
    for (int64_t k = 0; k < t->n; ++k)
        t->v[k] = round_to(type, values[k]);
    ten_free(e->vals[i]);
    e->vals[i] = t;
    e->state[i] = ST_OK;
    return 1;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static void strides_of(const rk_ten *t, int64_t *st) {
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; --i)
        st[i] = s, s *= t->dims[i];
}

/* numpy broadcasting of k shapes into out (rank r). */
static int broadcast_shape(rk_eval *e, const rk_ten *const *ts, int k, int *r, int64_t *out) {
    int rank = 0;
    *r = 0;
    for (int j = 0; j < k; ++j)
        if (ts[j]->rank > rank) rank = ts[j]->rank;
    for (int i = 0; i < rank; ++i) {
        int64_t d = 1;
        for (int j = 0; j < k; ++j) {
            int ii = i - (rank - ts[j]->rank);
            int64_t dj = ii >= 0 ? ts[j]->dims[ii] : 1;
            if (dj == d || dj == 1) continue;
            if (d != 1)
                return efail(e, "shapes do not broadcast (%lld against %lld)", (long long)d,
                             (long long)dj);
            d = dj;
        }
        out[i] = d;
    }
    *r = rank;
    return 1;
}

/* offset in t of the broadcast multi-index idx (rank r) */
static int64_t bcast_off(const rk_ten *t, const int64_t *st, const int64_t *idx, int r) {
    int64_t off = 0;
    for (int i = 0; i < t->rank; ++i) {
        int64_t k = idx[i + r - t->rank];
        off += (t->dims[i] == 1 ? 0 : k) * st[i];
    }
    return off;
}

static void next_index(int64_t *idx, const int64_t *dims, int r) {
    for (int i = r - 1; i >= 0; --i) {
        if (++idx[i] < dims[i]) return;
        idx[i] = 0;
    }
}

/* A new tensor of a's type and rank with shape `dims` whose element at index idx is
 * a->v[base + sum_k idx[k] * step[k]] (offsets in elements of a): the copies Transpose and Slice
 * make of a strided view of a. */
static rk_ten *copy_strided_view(rk_eval *e, const rk_ten *a, const int64_t *dims, int64_t base,
                                 const int64_t *step) {
    rk_ten *o = ten_new(e, a->type, a->rank, dims);
    if (!o) return NULL;
    int64_t idx[RK_SHAPE_MAX_RANK] = {0};
    for (int64_t i = 0; i < o->n; ++i, next_index(idx, dims, a->rank)) {
        int64_t off = base;
        for (int k = 0; k < a->rank; ++k)
            off += idx[k] * step[k];
        o->v[i] = a->v[off];
    }
    return o;
}

/* an index held as a double, saturated (never a wrapping conversion) */
static int64_t to_i64(double x) {
    return x >= 0x1p63 ? INT64_MAX : x <= -0x1p63 ? INT64_MIN : x == x ? (int64_t)x : 0;
}

static int to_i64_vec(rk_eval *e, const rk_ten *t, int64_t *out, size_t cap, size_t *n) {
    *n = 0;
    if (t->n > (int64_t)cap) return efail(e, "an index vector of %lld elements", (long long)t->n);
    for (int64_t i = 0; i < t->n; ++i) {
        double x = t->v[i]; /* INT64_MAX as a double is 2^63: saturate, do not wrap */
        out[i] = x >= 0x1p63 ? INT64_MAX : x <= -0x1p63 ? INT64_MIN : x == x ? (int64_t)x : 0;
    }
    *n = (size_t)t->n;
    return 1;
}

static int norm_axis(rk_eval *e, int64_t a, int rank, int64_t *out) {
    *out = 0;
    if (a < 0) a += rank;
    if (a < 0 || a >= rank)
        return efail(e, "axis %lld out of range for rank %d", (long long)a, rank);
    *out = a;
    return 1;
}

static const rk_ten *get(rk_eval *e, const char *name, int depth);

static const rk_ten *in_at(rk_eval *e, const Onnx__NodeProto *n, size_t i, int depth) {
    const char *nm = rk_input(n, i);
    if (!nm) {
        efail(e, "%s '%s' lacks input %zu", n->op_type, n->output[0], i);
        return NULL;
    }
    return get(e, nm, depth + 1);
}

/* integer list from an attribute or an input (opset-dependent spelling) */
static int ints_arg(rk_eval *e, const Onnx__NodeProto *n, const char *attr, size_t input,
                    int64_t *out, size_t cap, size_t *count, int *present, int depth) {
    const Onnx__AttributeProto *a = rk_node_attr(n, attr);
    *present = 0;
    if (a && a->n_ints <= cap) {
        memcpy(out, a->ints, a->n_ints * sizeof *out);
        *count = a->n_ints;
        *present = 1;
        return 1;
    }
    if (input != (size_t)-1 && rk_input(n, input)) {
        const rk_ten *t = in_at(e, n, input, depth);
        if (!t || !to_i64_vec(e, t, out, cap, count)) return 0;
        *present = 1;
    }
    return 1;
}

/* ---- the ops ----------------------------------------------------------------------------- */

static double unary(const char *op, double x, int *ok) {
    if (!strcmp(op, "Neg")) return -x;
    if (!strcmp(op, "Abs")) return fabs(x);
    if (!strcmp(op, "Cos")) return cos(x);
    if (!strcmp(op, "Sin")) return sin(x);
    if (!strcmp(op, "Sqrt")) return sqrt(x);
    if (!strcmp(op, "Reciprocal")) return 1.0 / x;
    if (!strcmp(op, "Exp")) return exp(x);
    if (!strcmp(op, "Log")) return log(x);
    if (!strcmp(op, "Floor")) return floor(x);
    if (!strcmp(op, "Ceil")) return ceil(x);
    if (!strcmp(op, "Not")) return x == 0;
    if (!strcmp(op, "Sign")) return (x > 0) - (x < 0);
    if (!strcmp(op, "Erf")) return erf(x);
    if (!strcmp(op, "Tanh")) return tanh(x);
    if (!strcmp(op, "Sigmoid")) return 1.0 / (1.0 + exp(-x));
    *ok = 0;
    return 0;
}

/* 1: the result is bool */
static int binary_kind(const char *op) {
    static const char *const arith[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod"};
    static const char *const cmp[] = {"Equal",       "Greater", "Less", "GreaterOrEqual",
                                      "LessOrEqual", "And",     "Or",   "Xor"};
    for (size_t i = 0; i < sizeof arith / sizeof *arith; ++i)
        if (!strcmp(op, arith[i])) return 1;
    for (size_t i = 0; i < sizeof cmp / sizeof *cmp; ++i)
        if (!strcmp(op, cmp[i])) return 2;
    return 0;
}

static double binary(const char *op, double a, double b, int integer) {
    switch (op[0]) {
    case 'A':
        if (op[1] == 'd') return a + b;
        return (a != 0) && (b != 0); /* And */
    case 'S': return a - b;
    case 'M':
        if (op[1] == 'u') return a * b;
        if (op[1] == 'a') return a > b ? a : b;
        if (op[1] == 'i') return a < b ? a : b;
        return integer ? (b != 0 ? a - b * floor(a / b) : 0) : fmod(a, b); /* Mod */
    case 'D':
        if (integer) return b != 0 ? trunc(a / b) : 0;
        return a / b;
    case 'P': return pow(a, b);
    case 'E': return a == b;
    case 'G': return op[7] ? a >= b : a > b;
    case 'L': return op[4] ? a <= b : a < b;
    case 'O': return (a != 0) || (b != 0);
    default: return (a != 0) != (b != 0); /* Xor */
    }
}

static rk_ten *elementwise(rk_eval *e, const char *op, const rk_ten *const *ts, int k,
                           int32_t type) {
    int r;
    int64_t dims[RK_SHAPE_MAX_RANK], idx[RK_SHAPE_MAX_RANK] = {0};
    int64_t st[3][RK_SHAPE_MAX_RANK];
    if (!broadcast_shape(e, ts, k, &r, dims)) return NULL;
    rk_ten *o = ten_new(e, type, r, dims);
    if (!o) return NULL;
    for (int j = 0; j < k; ++j)
        strides_of(ts[j], st[j]);
    int integer = !is_float_type(ts[k - 1]->type);
    for (int64_t i = 0; i < o->n; ++i, next_index(idx, dims, r)) {
        double v[3];
        for (int j = 0; j < k; ++j)
            v[j] = ts[j]->v[bcast_off(ts[j], st[j], idx, r)];
        double y = k == 3 ? (v[0] != 0 ? v[1] : v[2]) : binary(op, v[0], v[1], integer);
        o->v[i] = round_to(type, y);
    }
    return o;
}

static rk_ten *copy_with_shape(rk_eval *e, const rk_ten *a, int rank, const int64_t *dims) {
    rk_ten *o = ten_new(e, a->type, rank, dims);
    if (!o) return NULL;
    if (o->n != a->n) {
        efail(e, "a reshape from %lld to %lld elements", (long long)a->n, (long long)o->n);
        ten_free(o);
        return NULL;
    }
    memcpy(o->v, a->v, (size_t)a->n * sizeof *a->v);
    return o;
}

static rk_ten *op_reshape(rk_eval *e, const Onnx__NodeProto *n, const rk_ten *a, const rk_ten *s) {
    int64_t t[RK_SHAPE_MAX_RANK];
    size_t nt;
    if (!to_i64_vec(e, s, t, RK_SHAPE_MAX_RANK, &nt)) return NULL;
    int allowzero = (int)rk_attr_i(n, "allowzero", 0);
    int64_t known = 1, minus = -1;
    for (size_t i = 0; i < nt; ++i) {
        if (t[i] == 0 && !allowzero) {
            if ((int)i >= a->rank) {
                efail(e, "Reshape copies dim %zu of a rank-%d tensor", i, a->rank);
                return NULL;
            }
            t[i] = a->dims[i];
        }
        if (t[i] == -1 && minus < 0) {
            minus = (int64_t)i;
        } else if (t[i] < 0) {
            efail(e, "Reshape to a negative dim");
            return NULL;
        } else {
            known *= t[i];
        }
    }
    if (minus >= 0) {
        if (known == 0 || a->n % known) {
            efail(e, "Reshape of %lld elements cannot infer its -1", (long long)a->n);
            return NULL;
        }
        t[minus] = a->n / known;
    }
    return copy_with_shape(e, a, (int)nt, t);
}

static rk_ten *op_transpose(rk_eval *e, const Onnx__NodeProto *n, const rk_ten *a) {
    int64_t perm[RK_SHAPE_MAX_RANK], dims[RK_SHAPE_MAX_RANK], st[RK_SHAPE_MAX_RANK];
    const Onnx__AttributeProto *pa = rk_node_attr(n, "perm");
    if (pa && pa->n_ints != (size_t)a->rank) {
        efail(e, "Transpose perm of %zu entries on rank %d", pa->n_ints, a->rank);
        return NULL;
    }
    int seen[RK_SHAPE_MAX_RANK] = {0};
    for (int i = 0; i < a->rank; ++i) {
        perm[i] = pa ? pa->ints[i] : a->rank - 1 - i;
        if (perm[i] < 0 || perm[i] >= a->rank || seen[perm[i]]++) {
            efail(e, "Transpose perm is not a permutation");
            return NULL;
        }
        dims[i] = a->dims[perm[i]];
    }
    strides_of(a, st);
    int64_t step[RK_SHAPE_MAX_RANK];
    for (int k = 0; k < a->rank; ++k)
        step[k] = st[perm[k]];
    return copy_strided_view(e, a, dims, 0, step);
}

static rk_ten *op_slice(rk_eval *e, const Onnx__NodeProto *n, const rk_ten *a, int depth) {
    int64_t starts[RK_SHAPE_MAX_RANK], ends[RK_SHAPE_MAX_RANK], axes[RK_SHAPE_MAX_RANK],
        steps[RK_SHAPE_MAX_RANK];
    size_t ns, ne, na = 0, nst = 0;
    int p1, p2, p3, p4;
    if (!ints_arg(e, n, "starts", 1, starts, RK_SHAPE_MAX_RANK, &ns, &p1, depth) ||
        !ints_arg(e, n, "ends", 2, ends, RK_SHAPE_MAX_RANK, &ne, &p2, depth) ||
        !ints_arg(e, n, "axes", 3, axes, RK_SHAPE_MAX_RANK, &na, &p3, depth) ||
        !ints_arg(e, n, "steps", 4, steps, RK_SHAPE_MAX_RANK, &nst, &p4, depth))
        return NULL;
    if (!p1 || !p2 || ns != ne || (p3 && na != ns) || (p4 && nst != ns)) {
        efail(e, "Slice '%s' has inconsistent parameters", n->output[0]);
        return NULL;
    }
    int64_t lo[RK_SHAPE_MAX_RANK], step[RK_SHAPE_MAX_RANK], dims[RK_SHAPE_MAX_RANK];
    for (int i = 0; i < a->rank; ++i)
        lo[i] = 0, step[i] = 1, dims[i] = a->dims[i];
    for (size_t k = 0; k < ns; ++k) {
        int64_t ax;
        if (!norm_axis(e, p3 ? axes[k] : (int64_t)k, a->rank, &ax)) return NULL;
        int64_t d = a->dims[ax], s = starts[k], en = ends[k], stp = p4 ? steps[k] : 1;
        if (stp == 0) {
            efail(e, "Slice step 0");
            return NULL;
        }
        if (s < 0) s += d;
        if (en < 0 && en > INT64_MIN / 2) en += d;
        if (stp > 0) {
            s = s < 0 ? 0 : s > d ? d : s;
            en = en < 0 ? 0 : en > d ? d : en;
            dims[ax] = en > s ? (en - s + stp - 1) / stp : 0;
        } else {
            s = s < 0 ? -1 : s > d - 1 ? d - 1 : s;
            en = en < -1 ? -1 : en > d - 1 ? d - 1 : en;
            dims[ax] = s > en ? (s - en + (-stp) - 1) / (-stp) : 0;
        }
        lo[ax] = s, step[ax] = stp;
    }
    int64_t st[RK_SHAPE_MAX_RANK], base = 0;
    strides_of(a, st);
    for (int k = 0; k < a->rank; ++k)
        base += lo[k] * st[k], step[k] *= st[k];
    return copy_strided_view(e, a, dims, base, step);
}

static rk_ten *op_concat(rk_eval *e, const Onnx__NodeProto *n, int depth) {
    if (n->n_input == 0 || n->n_input > 4096) {
        efail(e, "Concat with %zu inputs", n->n_input);
        return NULL;
    }
    const rk_ten *first = in_at(e, n, 0, depth);
    if (!first) return NULL;
    int64_t ax, dims[RK_SHAPE_MAX_RANK];
    if (!norm_axis(e, rk_attr_i(n, "axis", 0), first->rank, &ax)) return NULL;
    memcpy(dims, first->dims, sizeof dims);
    dims[ax] = 0;
    for (size_t i = 0; i < n->n_input; ++i) {
        const rk_ten *t = in_at(e, n, i, depth);
        if (!t) return NULL;
        if (t->rank != first->rank) {
            efail(e, "Concat '%s' of ranks %d and %d", n->output[0], first->rank, t->rank);
            return NULL;
        }
        for (int k = 0; k < t->rank; ++k)
            if (k != ax && t->dims[k] != first->dims[k]) {
                efail(e, "Concat '%s' of mismatched shapes", n->output[0]);
                return NULL;
            }
        dims[ax] += t->dims[ax];
    }
    rk_ten *o = ten_new(e, first->type, first->rank, dims);
    if (!o) return NULL;
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < ax; ++k)
        outer *= dims[k];
    for (int k = (int)ax + 1; k < first->rank; ++k)
        inner *= dims[k];
    int64_t col = 0;
    for (size_t i = 0; i < n->n_input; ++i) {
        const rk_ten *t = get(e, n->input[i], depth + 1);
        int64_t w = t->dims[ax] * inner;
        for (int64_t r = 0; r < outer; ++r)
            memcpy(o->v + r * dims[ax] * inner + col, t->v + r * w, (size_t)w * sizeof *o->v);
        col += w;
    }
    return o;
}

static rk_ten *op_expand(rk_eval *e, const rk_ten *a, const rk_ten *s) {
    int64_t t[RK_SHAPE_MAX_RANK];
    size_t nt;
    if (!to_i64_vec(e, s, t, RK_SHAPE_MAX_RANK, &nt)) return NULL;
    rk_ten shape = {0};
    shape.rank = (int32_t)nt;
    memcpy(shape.dims, t, nt * sizeof *t);
    const rk_ten *both[2] = {a, &shape};
    int r;
    int64_t dims[RK_SHAPE_MAX_RANK], st[RK_SHAPE_MAX_RANK], idx[RK_SHAPE_MAX_RANK] = {0};
    if (!broadcast_shape(e, both, 2, &r, dims)) return NULL;
    rk_ten *o = ten_new(e, a->type, r, dims);
    if (!o) return NULL;
    strides_of(a, st);
    for (int64_t i = 0; i < o->n; ++i, next_index(idx, dims, r))
        o->v[i] = a->v[bcast_off(a, st, idx, r)];
    return o;
}

static rk_ten *op_tile(rk_eval *e, const rk_ten *a, const rk_ten *rp) {
    int64_t reps[RK_SHAPE_MAX_RANK], dims[RK_SHAPE_MAX_RANK], st[RK_SHAPE_MAX_RANK];
    size_t nr;
    if (!to_i64_vec(e, rp, reps, RK_SHAPE_MAX_RANK, &nr)) return NULL;
    if ((int)nr != a->rank) {
        efail(e, "Tile repeats of length %zu on rank %d", nr, a->rank);
        return NULL;
    }
    for (int i = 0; i < a->rank; ++i) {
        if (reps[i] < 0) {
            efail(e, "Tile by a negative count");
            return NULL;
        }
        dims[i] = a->dims[i] * reps[i];
    }
    rk_ten *o = ten_new(e, a->type, a->rank, dims);
    if (!o) return NULL;
    strides_of(a, st);
    int64_t idx[RK_SHAPE_MAX_RANK] = {0};
    for (int64_t i = 0; i < o->n; ++i, next_index(idx, dims, a->rank)) {
        int64_t off = 0;
        for (int k = 0; k < a->rank; ++k)
            off += (idx[k] % a->dims[k]) * st[k];
        o->v[i] = a->v[off];
    }
    return o;
}

static rk_ten *op_gather(rk_eval *e, const Onnx__NodeProto *n, const rk_ten *a, const rk_ten *ind) {
    int64_t ax;
    if (!norm_axis(e, rk_attr_i(n, "axis", 0), a->rank, &ax)) return NULL;
    int r = a->rank - 1 + ind->rank;
    if (r > RK_SHAPE_MAX_RANK) {
        efail(e, "Gather result rank %d", r);
        return NULL;
    }
    int64_t dims[RK_SHAPE_MAX_RANK];
    int k = 0;
    for (int i = 0; i < ax; ++i)
        dims[k++] = a->dims[i];
    for (int i = 0; i < ind->rank; ++i)
        dims[k++] = ind->dims[i];
    for (int i = (int)ax + 1; i < a->rank; ++i)
        dims[k++] = a->dims[i];
    rk_ten *o = ten_new(e, a->type, r, dims);
    if (!o) return NULL;
    int64_t outer = 1, inner = 1, d = a->dims[ax];
    for (int i = 0; i < ax; ++i)
        outer *= a->dims[i];
    for (int i = (int)ax + 1; i < a->rank; ++i)
        inner *= a->dims[i];
    int64_t pos = 0;
    for (int64_t p = 0; p < outer; ++p)
        for (int64_t j = 0; j < ind->n; ++j) {
            int64_t q = to_i64(ind->v[j]);
            if (q < 0) q += d;
            if (q < 0 || q >= d) {
                ten_free(o);
                efail(e, "Gather index %lld out of range [0, %lld) in '%s'", (long long)ind->v[j],
                      (long long)d, n->output[0]);
                return NULL;
            }
            memcpy(o->v + pos, a->v + (p * d + q) * inner, (size_t)inner * sizeof *o->v);
            pos += inner;
        }
    return o;
}

/* Offset in a of the slice that the m leading indices q[0..m) (negative from the end) name, as
 * GatherND and ScatterND read them; 0 when one is out of range. */
static int nd_offset(const rk_ten *a, const int64_t *st, const double *q, int64_t m, int64_t *off) {
    *off = 0;
    for (int64_t k = 0; k < m; ++k) {
        int64_t v = to_i64(q[k]);
        if (v < 0) v += a->dims[k];
        if (v < 0 || v >= a->dims[k]) return 0;
        *off += v * st[k];
    }
    return 1;
}

/* GatherElements / ScatterElements: the offset in a (strides st) of the element at index idx
 * with coordinate q (negative counts from the end) on axis ax; 0 when out of range. */
static int element_offset(const rk_ten *a, const int64_t *st, const int64_t *idx, int64_t ax,
                          int64_t q, int64_t *off) {
    if (q < 0) q += a->dims[ax];
    *off = 0;
    for (int k = 0; k < a->rank; ++k) {
        int64_t c = k == ax ? q : idx[k];
        if (c < 0 || c >= a->dims[k]) return 0;
        *off += c * st[k];
    }
    return 1;
}

static rk_ten *op_gather_elements(rk_eval *e, const Onnx__NodeProto *n, const rk_ten *a,
                                  const rk_ten *ind) {
    int64_t ax, st[RK_SHAPE_MAX_RANK], idx[RK_SHAPE_MAX_RANK] = {0};
    if (!norm_axis(e, rk_attr_i(n, "axis", 0), a->rank, &ax)) return NULL;
    if (ind->rank != a->rank) {
        efail(e, "GatherElements of ranks %d and %d", a->rank, ind->rank);
        return NULL;
    }
    rk_ten *o = ten_new(e, a->type, ind->rank, ind->dims);
    if (!o) return NULL;
    strides_of(a, st);
    for (int64_t i = 0; i < o->n; ++i, next_index(idx, ind->dims, ind->rank)) {
        int64_t off;
        if (!element_offset(a, st, idx, ax, to_i64(ind->v[i]), &off)) {
            ten_free(o);
            efail(e, "GatherElements index out of range in '%s'", n->output[0]);
            return NULL;
        }
        o->v[i] = a->v[off];
    }
    return o;
}

static rk_ten *op_gather_nd(rk_eval *e, const Onnx__NodeProto *n, const rk_ten *a,
                            const rk_ten *ind) {
    if (rk_attr_i(n, "batch_dims", 0) != 0 || ind->rank < 1) {
        efail(e, "GatherND with batch_dims");
        return NULL;
    }
    int64_t m = ind->dims[ind->rank - 1];
    if (m < 1 || m > a->rank) {
        efail(e, "GatherND index depth %lld", (long long)m);
        return NULL;
    }
    int64_t dims[RK_SHAPE_MAX_RANK], st[RK_SHAPE_MAX_RANK];
    int r = 0;
    for (int i = 0; i < ind->rank - 1; ++i)
        dims[r++] = ind->dims[i];
    for (int i = (int)m; i < a->rank; ++i)
        dims[r++] = a->dims[i];
    rk_ten *o = ten_new(e, a->type, r, dims);
    if (!o) return NULL;
    strides_of(a, st);
    int64_t inner = m < a->rank ? st[m - 1] : 1, rows = ind->n / m;
    for (int64_t j = 0; j < rows; ++j) {
        int64_t off;
        if (!nd_offset(a, st, ind->v + j * m, m, &off)) {
            ten_free(o);
            efail(e, "GatherND index out of range in '%s'", n->output[0]);
            return NULL;
        }
        memcpy(o->v + j * inner, a->v + off, (size_t)inner * sizeof *o->v);
    }
    return o;
}

/* LayerNormalization's Y: X normalized over the axes from `axis` on (mean 0, variance 1 with
 * epsilon), in double, then times Scale and plus B (broadcast as Mul/Add do), rounded to X's
 * type. Mean and InvStdDev (outputs 1, 2) are not evaluated. */
static rk_ten *op_layer_norm(rk_eval *e, const Onnx__NodeProto *n, const rk_ten *x,
                             const rk_ten *scale, const rk_ten *bias) {
    int64_t axis = rk_attr_i(n, "axis", -1);
    const Onnx__AttributeProto *ep = rk_node_attr(n, "epsilon");
    double eps = ep ? (double)ep->f : 1e-5;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank || !is_float_type(x->type)) {
        efail(e, "LayerNormalization over axis %lld of a rank-%d input", (long long)axis, x->rank);
        return NULL;
    }
    int64_t inner = 1;
    for (int d = (int)axis; d < x->rank; ++d)
        inner *= x->dims[d];
    rk_ten *nrm = copy_with_shape(e, x, x->rank, x->dims);
    if (!nrm) return NULL;
    nrm->type = RK_DT_DOUBLE; /* kept exact until the final rounding */
    for (int64_t g = 0; inner && g < x->n / inner; ++g) {
        double *v = nrm->v + g * inner, mean = 0, var = 0;
        for (int64_t i = 0; i < inner; ++i)
            mean += v[i];
        mean /= (double)inner;
        for (int64_t i = 0; i < inner; ++i)
            var += (v[i] - mean) * (v[i] - mean);
        var /= (double)inner;
        for (int64_t i = 0; i < inner; ++i)
            v[i] = (v[i] - mean) / sqrt(var + eps);
    }
    const rk_ten *ms[2] = {nrm, scale};
    rk_ten *y = elementwise(e, "Mul", ms, 2, RK_DT_DOUBLE);
    ten_free(nrm);
    if (y && bias) {
        const rk_ten *as[2] = {y, bias};
        rk_ten *z = elementwise(e, "Add", as, 2, RK_DT_DOUBLE);
        ten_free(y);
        y = z;
    }
    if (y && y->rank != x->rank) {
        efail(e, "LayerNormalization's Scale/B widen its input");
        ten_free(y);
        return NULL;
    }
    if (y) {
        y->type = x->type;
        for (int64_t i = 0; i < y->n; ++i)
            y->v[i] = round_to(y->type, y->v[i]);
    }
    return y;
}

/* Einsum with an explicit output ("ij,jk->ik", "i,j->ij", "bhsd->bshd"): one or two inputs,
 * letters only (no ellipsis), every letter of one size wherever it appears; letters absent from
 * the output are summed over. The loop runs over every letter, charged to the element budget. */
#define EINSUM_MAX_LETTERS 16
static rk_ten *op_einsum(rk_eval *e, const Onnx__NodeProto *n, const rk_ten **in, size_t nin) {
    const Onnx__AttributeProto *at = rk_node_attr(n, "equation");
    char eq[128];
    size_t len = at ? at->s.len : 0, k = 0;
    if (!at || len == 0 || len >= sizeof eq) {
        efail(e, "Einsum without a usable equation");
        return NULL;
    }
    for (size_t i = 0; i < len; ++i)
        if (at->s.data[i] != ' ') eq[k++] = (char)at->s.data[i];
    eq[k] = 0;
    char *arrow = strstr(eq, "->");
    if (!arrow || strchr(eq, '.')) {
        efail(e, "Einsum '%s': only explicit outputs without ellipsis are evaluated", eq);
        return NULL;
    }
    *arrow = 0;
    const char *terms[3] = {eq, NULL, arrow + 2};
    char *comma = strchr(eq, ',');
    if (comma) *comma = 0, terms[1] = comma + 1;
    if ((comma ? 2u : 1u) != nin || (terms[1] && strchr(terms[1], ','))) {
        efail(e, "Einsum '%s' does not name its %zu inputs", eq, nin);
        return NULL;
    }
    char letters[EINSUM_MAX_LETTERS];
    int64_t size[EINSUM_MAX_LETTERS];
    int nl = 0;
    /* each input term: its letters, sizes checked against the input's shape */
    for (size_t t = 0; t < nin; ++t) {
        const char *term = terms[t];
        if ((int)strlen(term) != in[t]->rank) {
            efail(e, "Einsum term '%s' for an input of rank %d", term, in[t]->rank);
            return NULL;
        }
        for (int d = 0; term[d]; ++d) {
            int c = (unsigned char)term[d], j = 0;
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
                efail(e, "Einsum term '%s': not a letter", term);
                return NULL;
            }
            while (j < nl && letters[j] != c)
                ++j;
            if (j == nl) {
                if (nl == EINSUM_MAX_LETTERS) {
                    efail(e, "Einsum with more than %d letters", EINSUM_MAX_LETTERS);
                    return NULL;
                }
                letters[nl] = (char)c, size[nl++] = in[t]->dims[d];
            } else if (size[j] != in[t]->dims[d]) {
                efail(e, "Einsum letter '%c' of sizes %lld and %lld", c, (long long)size[j],
                      (long long)in[t]->dims[d]);
                return NULL;
            }
        }
    }
    /* strides of every letter in each input and in the output */
    int64_t st[3][EINSUM_MAX_LETTERS] = {{0}};
    int64_t odims[RK_SHAPE_MAX_RANK];
    int orank = (int)strlen(terms[2]);
    if (orank > RK_SHAPE_MAX_RANK) {
        efail(e, "Einsum output of rank %d", orank);
        return NULL;
    }
    for (int d = 0; d < orank; ++d) {
        int j = 0;
        while (j < nl && letters[j] != terms[2][d])
            ++j;
        if (j == nl || strchr(terms[2] + d + 1, terms[2][d])) {
            efail(e, "Einsum output '%s': a letter not in the inputs, or repeated", terms[2]);
            return NULL;
        }
        odims[d] = size[j];
    }
    for (size_t t = 0; t < 3; ++t) {
        if (!terms[t]) continue;
        int r = (int)strlen(terms[t]);
        int64_t stride = 1;
        for (int d = r - 1; d >= 0; --d) {
            int j = 0;
            while (letters[j] != terms[t][d])
                ++j;
            st[t][j] += stride; /* a repeated letter in one input: its diagonal */
            stride *= t == 2 ? odims[d] : in[t]->dims[d];
        }
    }
    int64_t iters = 1;
    for (int j = 0; j < nl; ++j) {
        if (size[j] == 0) iters = 0;
        if (iters && size[j] > e->max_elems / iters) {
            efail(e, "an Einsum of more than %lld steps", (long long)e->max_elems);
            return NULL;
        }
        iters *= size[j];
    }
    if ((e->budget -= iters) < 0) {
        efail(e, "the evaluation would exceed its element budget");
        return NULL;
    }
    rk_ten *o = ten_new(e, in[0]->type, orank, odims);
    if (!o) return NULL;
    int64_t idx[EINSUM_MAX_LETTERS] = {0}, off[3] = {0, 0, 0};
    for (int64_t it = 0; it < iters; ++it) {
        double p = in[0]->v[off[0]];
        if (nin == 2) p *= in[1]->v[off[1]];
        o->v[off[2]] += p;
        for (int j = nl - 1; j >= 0; --j) { /* next index, offsets kept in step */
            for (int t = 0; t < 3; ++t)
                off[t] += st[t][j];
            if (++idx[j] < size[j]) break;
            for (int t = 0; t < 3; ++t)
                off[t] -= st[t][j] * size[j];
            idx[j] = 0;
        }
    }
    for (int64_t i = 0; i < o->n; ++i)
        o->v[i] = round_to(o->type, o->v[i]);
    return o;
}

static rk_ten *op_matmul(rk_eval *e, const rk_ten *a0, const rk_ten *b0) {
    if (a0->rank < 1 || b0->rank < 1) {
        efail(e, "MatMul of a scalar");
        return NULL;
    }
    rk_ten a = *a0, b = *b0;
    int pa = a.rank == 1, pb = b.rank == 1;
    if (pa) a.rank = 2, a.dims[1] = a.dims[0], a.dims[0] = 1;
    if (pb) b.rank = 2, b.dims[1] = 1;
    int64_t M = a.dims[a.rank - 2], K = a.dims[a.rank - 1], N = b.dims[b.rank - 1];
    if (b.dims[b.rank - 2] != K) {
        efail(e, "MatMul inner dims %lld and %lld", (long long)K, (long long)b.dims[b.rank - 2]);
        return NULL;
    }
    rk_ten ba = a, bb = b; /* batch parts */
    ba.rank -= 2, bb.rank -= 2;
    const rk_ten *both[2] = {&ba, &bb};
    int r;
    int64_t dims[RK_SHAPE_MAX_RANK], sa[RK_SHAPE_MAX_RANK], sb[RK_SHAPE_MAX_RANK];
    if (!broadcast_shape(e, both, 2, &r, dims)) return NULL;
    strides_of(&ba, sa), strides_of(&bb, sb);
    int64_t odims[RK_SHAPE_MAX_RANK];
    int orank = r;
    memcpy(odims, dims, (size_t)r * sizeof *dims);
    if (!pa) odims[orank++] = M;
    if (!pb) odims[orank++] = N;
    rk_ten *o = ten_new(e, a0->type, orank, odims);
    if (!o) return NULL;
    int64_t idx[RK_SHAPE_MAX_RANK] = {0}, nb = 1;
    for (int i = 0; i < r; ++i)
        nb *= dims[i];
    for (int64_t bi = 0; bi < nb; ++bi, next_index(idx, dims, r)) {
        const double *pa_ = a0->v + bcast_off(&ba, sa, idx, r) * M * K;
        const double *pb_ = b0->v + bcast_off(&bb, sb, idx, r) * K * N;
        double *po = o->v + bi * M * N;
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                double s = 0;
                for (int64_t k = 0; k < K; ++k)
                    s += pa_[i * K + k] * pb_[k * N + j];
                po[i * N + j] = round_to(o->type, s);
            }
    }
    return o;
}

static rk_ten *op_reduce(rk_eval *e, const Onnx__NodeProto *n, const rk_ten *a, int depth) {
    int64_t axes[RK_SHAPE_MAX_RANK];
    size_t na = 0;
    int present;
    if (!ints_arg(e, n, "axes", 1, axes, RK_SHAPE_MAX_RANK, &na, &present, depth)) return NULL;
    int red[RK_SHAPE_MAX_RANK] = {0};
    if (!present || na == 0) {
        if (rk_attr_i(n, "noop_with_empty_axes", 0)) return copy_with_shape(e, a, a->rank, a->dims);
        for (int i = 0; i < a->rank; ++i)
            red[i] = 1;
    }
    for (size_t i = 0; i < na; ++i) {
        int64_t ax;
        if (!norm_axis(e, axes[i], a->rank, &ax)) return NULL;
        red[ax] = 1;
    }
    int keep = (int)rk_attr_i(n, "keepdims", 1);
    int64_t dims[RK_SHAPE_MAX_RANK], kd[RK_SHAPE_MAX_RANK];
    int r = 0;
    for (int i = 0; i < a->rank; ++i) {
        kd[i] = red[i] ? 1 : a->dims[i];
        if (!red[i] || keep) dims[r++] = kd[i];
    }
    rk_ten *o = ten_new(e, a->type, r, dims);
    if (!o) return NULL;
    const char *op = n->op_type;
    int is_max = !strcmp(op, "ReduceMax"), is_min = !strcmp(op, "ReduceMin");
    int is_mean = !strcmp(op, "ReduceMean");
    for (int64_t i = 0; i < o->n; ++i)
        o->v[i] = is_max ? -INFINITY : is_min ? INFINITY : 0;
    int64_t *cnt = NULL;
    rk_ten kt = {0};
    kt.rank = a->rank;
    memcpy(kt.dims, kd, sizeof kd);
    int64_t st[RK_SHAPE_MAX_RANK], idx[RK_SHAPE_MAX_RANK] = {0};
    strides_of(&kt, st);
    int64_t group = o->n ? a->n / o->n : 0;
    (void)cnt;
    for (int64_t i = 0; i < a->n; ++i, next_index(idx, a->dims, a->rank)) {
        int64_t off = 0;
        for (int k = 0; k < a->rank; ++k)
            off += (red[k] ? 0 : idx[k]) * st[k];
        double x = a->v[i];
        if (is_max)
            o->v[off] = x > o->v[off] ? x : o->v[off];
        else if (is_min)
            o->v[off] = x < o->v[off] ? x : o->v[off];
        else
            o->v[off] += x;
    }
    for (int64_t i = 0; i < o->n; ++i)
        o->v[i] = round_to(o->type, is_mean && group ? o->v[i] / (double)group : o->v[i]);
    return o;
}

static rk_ten *op_scatter_nd(rk_eval *e, const Onnx__NodeProto *n, const rk_ten *a,
                             const rk_ten *ind, const rk_ten *upd) {
    const Onnx__AttributeProto *red = rk_node_attr(n, "reduction");
    if ((red && red->has_s && !(red->s.len == 4 && !memcmp(red->s.data, "none", 4))) ||
        ind->rank < 1) {
        efail(e, "ScatterND with a reduction");
        return NULL;
    }
    int64_t m = ind->dims[ind->rank - 1], st[RK_SHAPE_MAX_RANK];
    if (m < 1 || m > a->rank) {
        efail(e, "ScatterND index depth %lld", (long long)m);
        return NULL;
    }
    rk_ten *o = copy_with_shape(e, a, a->rank, a->dims);
    if (!o) return NULL;
    strides_of(a, st);
    int64_t inner = m < a->rank ? st[m - 1] : 1, rows = ind->n / m;
    if (upd->n != rows * inner) {
        ten_free(o);
        efail(e, "ScatterND updates of the wrong size");
        return NULL;
    }
    for (int64_t j = 0; j < rows; ++j) {
        int64_t off;
        if (!nd_offset(a, st, ind->v + j * m, m, &off)) {
            ten_free(o);
            efail(e, "ScatterND index out of range");
            return NULL;
        }
        memcpy(o->v + off, upd->v + j * inner, (size_t)inner * sizeof *o->v);
    }
    return o;
}

static rk_ten *op_scatter_elements(rk_eval *e, const Onnx__NodeProto *n, const rk_ten *a,
                                   const rk_ten *ind, const rk_ten *upd) {
    const Onnx__AttributeProto *red = rk_node_attr(n, "reduction");
    int64_t ax, st[RK_SHAPE_MAX_RANK], idx[RK_SHAPE_MAX_RANK] = {0};
    if ((red && red->has_s && !(red->s.len == 4 && !memcmp(red->s.data, "none", 4))) ||
        ind->rank != a->rank || upd->n != ind->n ||
        !norm_axis(e, rk_attr_i(n, "axis", 0), a->rank, &ax)) {
        efail(e, "ScatterElements with a reduction or mismatched shapes");
        return NULL;
    }
    rk_ten *o = copy_with_shape(e, a, a->rank, a->dims);
    if (!o) return NULL;
    strides_of(a, st);
    for (int64_t i = 0; i < ind->n; ++i, next_index(idx, ind->dims, ind->rank)) {
        int64_t off;
        if (!element_offset(a, st, idx, ax, to_i64(ind->v[i]), &off)) {
            ten_free(o);
            efail(e, "ScatterElements index out of range");
            return NULL;
        }
        o->v[off] = upd->v[i];
    }
    return o;
}

/* a value without a producer (or a Constant): an initializer or a graph input */
static rk_ten *leaf(rk_eval *e, const char *name) {
    const rk_value *v = rk_graph_value(e->ix, name);
    rk_shape sh;
    rk_graph_shape(e->ix, name, &sh);
    int is_input = v && (v->flags & RK_VALUE_INPUT);
    if (!is_input) {
        if (sh.rank < 0) {
            efail(e, "the shape of constant '%s' is unknown", name);
            return NULL;
        }
        rk_ten *t = ten_new(e, sh.elem_type ? sh.elem_type : RK_DT_FLOAT, sh.rank, sh.dims);
        size_t count = 0;
        if (!t) return NULL;
        if (rk_graph_const_f64(e->ix, name, t->v, (size_t)t->n, &count) != ROPEKIT_OK ||
            (int64_t)count != t->n) {
            ten_free(t);
            efail(e, "'%s' is not a readable constant: %s", name, ropekit_last_error());
            return NULL;
        }
        for (int64_t i = 0; i < t->n; ++i)
            t->v[i] = round_to(t->type, t->v[i]);
        return t;
    }
    /* a graph input the caller did not bind: probe dims by name, deterministic contents */
    const Onnx__TypeProto *tp = v->info ? v->info->type : NULL;
    const Onnx__TypeProto__Tensor *tt = tp ? tp->tensor_type : NULL;
    if (!tt || !tt->shape || tt->shape->n_dim > RK_SHAPE_MAX_RANK) {
        efail(e, "graph input '%s' has no shape to probe", name);
        return NULL;
    }
    int64_t dims[RK_SHAPE_MAX_RANK];
    for (size_t i = 0; i < tt->shape->n_dim; ++i) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        int64_t x = -1;
        if (d && d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            x = d->dim_value;
        else if (d && d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
            x = dim_of(e, d->dim_param);
        if (x < 0) x = e->default_dim;
        if (x < 0) {
            efail(e, "graph input '%s' has a dimension without a probe value", name);
            return NULL;
        }
        dims[i] = x;
    }
    int32_t type = tt->has_elem_type ? tt->elem_type : RK_DT_FLOAT;
    rk_ten *t = ten_new(e, type, (int)tt->shape->n_dim, dims);
    if (!t) return NULL;
    /* (seeded by the value: two inputs, e.g. a cos and a sin fed from outside, differ) */
    uint32_t s = 12345u + 2654435761u * (uint32_t)vindex(e, name);
    for (int64_t i = 0; i < t->n; ++i) {
        s = s * 1664525u + 1013904223u;
        t->v[i] = is_float_type(type) ? round_to(type, ((double)(s >> 8) / (1 << 24)) * 2 - 1) : 1;
    }
    return t;
}

static int store(rk_eval *e, const char *name, rk_ten *t) {
    size_t i = vindex(e, name);
    if (i >= e->n) {
        ten_free(t);
        return 0;
    }
    ten_free(e->vals[i]);
    e->vals[i] = t;
    e->state[i] = t ? ST_OK : ST_FAIL;
    return t != NULL;
}

/* evaluates node n, storing every output it produces */
static void eval_node(rk_eval *e, const Onnx__NodeProto *n, const char *want, int depth) {
    const char *op = n->op_type;
    rk_ten *o = NULL;
    const rk_ten *a = NULL, *b = NULL, *c = NULL;
    int kind;
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0) {
        efail(e, "'%s' is computed by %s.%s, which the evaluator does not know", want, n->domain,
              op);
        store(e, want, NULL);
        return;
    }
    if (rk_is_constant_node(n)) {
        o = leaf(e, want);
    } else if (!strcmp(op, "Identity") || !strcmp(op, "Dropout")) {
        if (strcmp(want, n->output[0]) != 0) {
            efail(e, "'%s' is the mask of a Dropout", want);
        } else if ((a = in_at(e, n, 0, depth))) {
            o = copy_with_shape(e, a, a->rank, a->dims);
        }
    } else if (!strcmp(op, "Cast") || !strcmp(op, "CastLike")) {
        int32_t to = (int32_t)rk_attr_i(n, "to", 0);
        if ((a = in_at(e, n, 0, depth)) && !strcmp(op, "CastLike") && (b = in_at(e, n, 1, depth)))
            to = b->type;
        if (a && (strcmp(op, "CastLike") || b) && (o = copy_with_shape(e, a, a->rank, a->dims))) {
            o->type = to;
            for (int64_t i = 0; i < o->n; ++i)
                o->v[i] = round_to(to, o->v[i]);
        }
    } else if ((!strcmp(op, "Max") || !strcmp(op, "Min")) && n->n_input != 2) {
        /* variadic: one input is a copy (torch writes Max(x) with optimize=False), more fold */
        if (n->n_input >= 1 && (a = in_at(e, n, 0, depth)))
            o = copy_with_shape(e, a, a->rank, a->dims);
        for (size_t j = 1; o && j < n->n_input; ++j) {
            rk_ten *acc = o;
            o = NULL;
            if ((b = in_at(e, n, j, depth))) {
                const rk_ten *ts[2] = {acc, b};
                o = elementwise(e, op, ts, 2, acc->type);
            }
            ten_free(acc);
        }
    } else if ((kind = binary_kind(op)) != 0) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth))) {
            const rk_ten *ts[2] = {a, b};
            o = elementwise(e, op, ts, 2, kind == 2 ? RK_DT_BOOL : a->type);
        }
    } else if (!strcmp(op, "Where")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth)) &&
            (c = in_at(e, n, 2, depth))) {
            const rk_ten *ts[3] = {a, b, c};
            o = elementwise(e, op, ts, 3, b->type);
        }
    } else if (!strcmp(op, "Shape") || !strcmp(op, "Size")) {
        if ((a = in_at(e, n, 0, depth))) {
            int64_t s = rk_attr_i(n, "start", 0), en = rk_attr_i(n, "end", a->rank);
            if (s < 0) s += a->rank;
            if (en < 0) en += a->rank;
            s = s < 0 ? 0 : s > a->rank ? a->rank : s;
            en = en < s ? s : en > a->rank ? a->rank : en;
            int64_t len = !strcmp(op, "Size") ? 1 : en - s;
            o = ten_new(e, RK_DT_INT64, !strcmp(op, "Size") ? 0 : 1, &len);
            if (o && !strcmp(op, "Size"))
                o->v[0] = (double)a->n;
            else if (o)
                for (int64_t i = 0; i < len; ++i)
                    o->v[i] = (double)a->dims[s + i];
        }
    } else if (!strcmp(op, "Reshape")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth))) o = op_reshape(e, n, a, b);
    } else if (!strcmp(op, "Flatten")) {
        if ((a = in_at(e, n, 0, depth))) {
            int64_t ax = rk_attr_i(n, "axis", 1), d[2] = {1, 1};
            if (ax < 0) ax += a->rank;
            for (int i = 0; i < a->rank; ++i)
                d[i < ax ? 0 : 1] *= a->dims[i];
            o = copy_with_shape(e, a, 2, d);
        }
    } else if (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze")) {
        int64_t axes[RK_SHAPE_MAX_RANK];
        size_t na = 0;
        int present;
        if ((a = in_at(e, n, 0, depth)) &&
            ints_arg(e, n, "axes", 1, axes, RK_SHAPE_MAX_RANK, &na, &present, depth)) {
            int64_t dims[RK_SHAPE_MAX_RANK];
            int r = 0, ok = 1;
            if (!strcmp(op, "Unsqueeze")) {
                int rr = a->rank + (int)na, isnew[RK_SHAPE_MAX_RANK] = {0}, k = 0;
                int64_t ax;
                if (rr > RK_SHAPE_MAX_RANK) ok = efail(e, "Unsqueeze past rank 16");
                for (size_t i = 0; ok && i < na; ++i)
                    if ((ok = norm_axis(e, axes[i], rr, &ax))) isnew[ax] = 1;
                for (int i = 0; ok && i < rr; ++i)
                    dims[r++] = isnew[i] ? 1 : a->dims[k++];
            } else {
                int drop[RK_SHAPE_MAX_RANK] = {0};
                int64_t ax;
                for (size_t i = 0; ok && i < na; ++i)
                    if ((ok = norm_axis(e, axes[i], a->rank, &ax))) {
                        if (a->dims[ax] != 1) ok = efail(e, "Squeeze of a dim that is not 1");
                        drop[ax] = 1;
                    }
                for (int i = 0; ok && i < a->rank; ++i)
                    if (!(na ? drop[i] : a->dims[i] == 1)) dims[r++] = a->dims[i];
            }
            if (ok) o = copy_with_shape(e, a, r, dims);
        }
    } else if (!strcmp(op, "Transpose")) {
        if ((a = in_at(e, n, 0, depth))) o = op_transpose(e, n, a);
    } else if (!strcmp(op, "Slice")) {
        if ((a = in_at(e, n, 0, depth))) o = op_slice(e, n, a, depth);
    } else if (!strcmp(op, "Concat")) {
        o = op_concat(e, n, depth);
    } else if (!strcmp(op, "Split")) {
        int64_t sizes[64], ax;
        size_t ns = 0;
        int present;
        if ((a = in_at(e, n, 0, depth)) && norm_axis(e, rk_attr_i(n, "axis", 0), a->rank, &ax) &&
            ints_arg(e, n, "split", 1, sizes, 64, &ns, &present, depth)) {
            size_t k = n->n_output;
            if (!present) {
                int64_t d = a->dims[ax], per = k ? (d + (int64_t)k - 1) / (int64_t)k : 0;
                for (size_t i = 0; i < k && i < 64; ++i) {
                    sizes[i] = d - per * (int64_t)i < per ? d - per * (int64_t)i : per;
                    if (sizes[i] < 0) sizes[i] = 0;
                }
                ns = k;
            }
            int64_t total = 0;
            int sizes_ok = 1; /* the split sizes come from the model: negative or huge ones */
            for (size_t i = 0; i < ns && sizes_ok; ++i)
                sizes_ok = sizes[i] >= 0 && rk_add(total, sizes[i], &total);
            if (!sizes_ok || ns != k || total != a->dims[ax]) {
                efail(e, "Split '%s' sizes do not cover the axis", n->output[0]);
            } else {
                int64_t off = 0;
                for (size_t i = 0; i < k; ++i) {
                    int64_t dims[RK_SHAPE_MAX_RANK], outer = 1, inner = 1;
                    memcpy(dims, a->dims, sizeof dims);
                    dims[ax] = sizes[i];
                    for (int q = 0; q < ax; ++q)
                        outer *= a->dims[q];
                    for (int q = (int)ax + 1; q < a->rank; ++q)
                        inner *= a->dims[q];
                    rk_ten *t = ten_new(e, a->type, a->rank, dims);
                    if (!t) break;
                    for (int64_t r = 0; r < outer; ++r)
                        memcpy(t->v + r * sizes[i] * inner, a->v + (r * a->dims[ax] + off) * inner,
                               (size_t)(sizes[i] * inner) * sizeof *t->v);
                    off += sizes[i];
                    if (!n->output[i][0])
                        ten_free(t);
                    else if (strcmp(n->output[i], want) != 0)
                        store(e, n->output[i], t);
                    else
                        o = t;
                }
            }
        }
    } else if (!strcmp(op, "SequenceAt")) {
        /* only a sequence made by SplitToSequence (torch's split with optimize=False): the
         * element is that chunk of the split tensor */
        const Onnx__NodeProto *p = rk_input(n, 0) ? rk_graph_producer(e->ix, n->input[0]) : NULL;
        int64_t sizes[64], ax, pos = 0;
        size_t ns = 0;
        if (!p || (p->domain && p->domain[0] && strcmp(p->domain, "ai.onnx")) ||
            strcmp(p->op_type, "SplitToSequence")) {
            efail(e, "'%s' is computed by SequenceAt of a sequence not made by SplitToSequence",
                  want);
        } else if ((a = in_at(e, p, 0, depth)) && (b = in_at(e, n, 1, depth)) &&
                   norm_axis(e, rk_attr_i(p, "axis", 0), a->rank, &ax) &&
                   (c = rk_input(p, 1) ? in_at(e, p, 1, depth) : NULL, !rk_input(p, 1) || c) &&
                   to_i64_vec(e, b, &pos, 1, &ns) && ns == 1) {
            int64_t d = a->dims[ax], total = 0;
            int keep = 1, ok = 1;
            ns = 0;
            if (!c) { /* chunks of 1; keepdims 0 removes the axis */
                for (int64_t i = 0; i < d && i < 64; ++i)
                    sizes[ns++] = 1;
                keep = rk_attr_i(p, "keepdims", 1) != 0;
                ok = d <= 64;
            } else if (c->rank == 0) {
                int64_t per = 0;
                size_t one = 0;
                ok = to_i64_vec(e, c, &per, 1, &one) && per > 0;
                for (int64_t off = 0; ok && off < d; off += per)
                    if (ns < 64)
                        sizes[ns++] = d - off < per ? d - off : per;
                    else
                        ok = 0;
            } else {
                ok = to_i64_vec(e, c, sizes, 64, &ns);
            }
            for (size_t i = 0; ok && i < ns; ++i)
                ok = sizes[i] >= 0 && rk_add(total, sizes[i], &total);
            if (pos < 0) pos += (int64_t)ns;
            if (!ok || total != d || pos < 0 || pos >= (int64_t)ns) {
                efail(e, "SplitToSequence '%s': split sizes or SequenceAt position out of range",
                      p->output[0]);
            } else {
                int64_t off = 0, dims[RK_SHAPE_MAX_RANK], outer = 1, inner = 1;
                for (int64_t i = 0; i < pos; ++i)
                    off += sizes[i];
                memcpy(dims, a->dims, sizeof dims);
                dims[ax] = sizes[pos];
                for (int q = 0; q < ax; ++q)
                    outer *= a->dims[q];
                for (int q = (int)ax + 1; q < a->rank; ++q)
                    inner *= a->dims[q];
                rk_ten *t = ten_new(e, a->type, a->rank, dims);
                if (t) {
                    for (int64_t r = 0; r < outer; ++r)
                        memcpy(t->v + r * sizes[pos] * inner, a->v + (r * d + off) * inner,
                               (size_t)(sizes[pos] * inner) * sizeof *t->v);
                    if (!keep) { /* drop the axis (size 1) */
                        for (int q = (int)ax; q + 1 < a->rank; ++q)
                            t->dims[q] = t->dims[q + 1];
                        t->rank--;
                    }
                }
                o = t;
            }
        }
    } else if (!strcmp(op, "Expand")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth))) o = op_expand(e, a, b);
    } else if (!strcmp(op, "Tile")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth))) o = op_tile(e, a, b);
    } else if (!strcmp(op, "Gather")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth))) o = op_gather(e, n, a, b);
    } else if (!strcmp(op, "GatherElements")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth)))
            o = op_gather_elements(e, n, a, b);
    } else if (!strcmp(op, "GatherND")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth)))
            o = op_gather_nd(e, n, a, b);
    } else if (!strcmp(op, "MatMul")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth))) o = op_matmul(e, a, b);
    } else if (!strcmp(op, "Softmax")) {
        /* over the last axis only, named explicitly or of a rank-2 input: there opset 13's
         * single-axis softmax and older opsets' flattened one agree (the default axis differs) */
        const Onnx__AttributeProto *ax = rk_node_attr(n, "axis");
        if ((a = in_at(e, n, 0, depth))) {
            int64_t axis = ax ? ax->i : -1;
            if (axis < 0) axis += a->rank;
            if (a->rank < 1 || axis != a->rank - 1 || (!ax && a->rank != 2) ||
                !is_float_type(a->type)) {
                efail(e,
                      "Softmax over axis %lld of a rank-%d input (only the last axis is "
                      "evaluated)",
                      (long long)(ax ? ax->i : -1), a->rank);
            } else if ((o = copy_with_shape(e, a, a->rank, a->dims))) {
                int64_t w = a->dims[a->rank - 1];
                for (int64_t g = 0; w && g < o->n / w; ++g) {
                    double *v = o->v + g * w, mx = -INFINITY, sum = 0;
                    for (int64_t i = 0; i < w; ++i)
                        mx = v[i] > mx ? v[i] : mx;
                    for (int64_t i = 0; i < w; ++i)
                        sum += (v[i] = isinf(mx) && mx < 0 ? 1.0 : exp(v[i] - mx));
                    for (int64_t i = 0; i < w; ++i)
                        v[i] = round_to(o->type, v[i] / sum);
                }
            }
        }
    } else if (!strcmp(op, "LayerNormalization")) {
        if (strcmp(want, n->output[0]) != 0) {
            efail(e, "'%s' is the Mean/InvStdDev output of a LayerNormalization", want);
        } else if (n->n_input >= 2 && (a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth)) &&
                   (n->n_input < 3 || !n->input[2][0] || (c = in_at(e, n, 2, depth)))) {
            o = op_layer_norm(e, n, a, b, c);
        }
    } else if (!strcmp(op, "Einsum")) {
        const rk_ten *ins[2] = {NULL, NULL};
        if (n->n_input >= 1 && n->n_input <= 2 && (ins[0] = in_at(e, n, 0, depth)) &&
            (n->n_input == 1 || (ins[1] = in_at(e, n, 1, depth))))
            o = op_einsum(e, n, ins, n->n_input);
        else if (n->n_input < 1 || n->n_input > 2)
            efail(e, "Einsum of %zu inputs", n->n_input);
    } else if (!strncmp(op, "Reduce", 6) && (!strcmp(op + 6, "Max") || !strcmp(op + 6, "Min") ||
                                             !strcmp(op + 6, "Sum") || !strcmp(op + 6, "Mean"))) {
        if ((a = in_at(e, n, 0, depth))) o = op_reduce(e, n, a, depth);
    } else if (!strcmp(op, "Range")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth)) &&
            (c = in_at(e, n, 2, depth))) {
            if (a->n != 1 || b->n != 1 || c->n != 1 || c->v[0] == 0) {
                efail(e, "Range '%s' of non-scalars or step 0", n->output[0]);
            } else {
                double cnt = ceil((b->v[0] - a->v[0]) / c->v[0]);
                int64_t len = cnt > 0 ? (int64_t)(cnt < 1e12 ? cnt : 1e12) : 0;
                if ((o = ten_new(e, a->type, 1, &len)))
                    for (int64_t i = 0; i < len; ++i)
                        o->v[i] = round_to(a->type, a->v[0] + (double)i * c->v[0]);
            }
        }
    } else if (!strcmp(op, "ConstantOfShape")) {
        int64_t dims[RK_SHAPE_MAX_RANK];
        size_t nd;
        if ((a = in_at(e, n, 0, depth)) && to_i64_vec(e, a, dims, RK_SHAPE_MAX_RANK, &nd)) {
            const Onnx__AttributeProto *va = rk_node_attr(n, "value");
            double x = 0;
            int32_t type = RK_DT_FLOAT;
            size_t cnt;
            if (va && va->t) {
                type = va->t->data_type;
                if (rk_tensor_read_f64(e->ix->model, va->t, &x, 1, &cnt) != ROPEKIT_OK || cnt != 1)
                    efail(e, "ConstantOfShape '%s' has no one-element value", n->output[0]);
            }
            if (!e->err[0] && (o = ten_new(e, type, (int)nd, dims)))
                for (int64_t i = 0; i < o->n; ++i)
                    o->v[i] = round_to(type, x);
        }
    } else if (!strcmp(op, "ScatterND")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth)) &&
            (c = in_at(e, n, 2, depth)))
            o = op_scatter_nd(e, n, a, b, c);
    } else if (!strcmp(op, "ScatterElements")) {
        if ((a = in_at(e, n, 0, depth)) && (b = in_at(e, n, 1, depth)) &&
            (c = in_at(e, n, 2, depth)))
            o = op_scatter_elements(e, n, a, b, c);
    } else {
        int ok = 1;
        (void)unary(op, 0, &ok);
        if (!ok) {
            efail(e, "'%s' is computed by %s, which the evaluator does not know", want, op);
        } else if ((a = in_at(e, n, 0, depth)) && (o = copy_with_shape(e, a, a->rank, a->dims))) {
            for (int64_t i = 0; i < o->n; ++i)
                o->v[i] = round_to(o->type, unary(op, o->v[i], &ok));
        }
    }
    store(e, want, o);
}

static const rk_ten *get(rk_eval *e, const char *name, int depth) {
    size_t i = vindex(e, name);
    if (i >= e->n) {
        efail(e, "'%s' is not a value of the graph", name ? name : "?");
        return NULL;
    }
    if (e->state[i] == ST_OK) return e->vals[i];
    if (e->state[i] == ST_FAIL) {
        efail(e, "%s", e->first[0] ? e->first : "an earlier failure");
        return NULL;
    }
    if (e->state[i] == ST_BUSY) {
        efail(e, "'%s' depends on itself", name);
        return NULL;
    }
    if (depth > EVAL_MAX_DEPTH) {
        efail(e, "'%s' is more than %d nodes from the probe inputs", name, EVAL_MAX_DEPTH);
        return NULL;
    }
    e->state[i] = ST_BUSY;
    const rk_value *v = &e->ix->values[i];
    if (v->producer < 0 || (v->flags & (RK_VALUE_INPUT | RK_VALUE_INITIALIZER)))
        store(e, name, leaf(e, name));
    else
        eval_node(e, e->ix->g->node[v->producer], name, depth);
    return e->state[i] == ST_OK ? e->vals[i] : NULL;
}

const rk_ten *rk_eval_get(rk_eval *e, const char *name) {
    e->err[0] = '\0';
    return get(e, name, 0);
}
