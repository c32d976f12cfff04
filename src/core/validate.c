/* Contract validation for every operator: public entry point -> checked plan -> kernel.
 *
 * Each rule of include/ropekit.h is checked here and only here, before any output memory is
 * touched. Messages name the argument, the rule and the offending value. */
#include <math.h>
#include <stdio.h>

#include "internal.h"

/* ---- tensor views -------------------------------------------------------------------------- */

static int is_float_dtype(ropekit_dtype d) {
    return d == ROPEKIT_FLOAT32 || d == ROPEKIT_FLOAT16 || d == ROPEKIT_BFLOAT16;
}

static void format_shape(const ropekit_tensor *t, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < t->rank && used < n; ++i)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (used < n) snprintf(buf + used, n - used, t->rank == 1 ? ",)" : ")");
}

/* Checks a view on its own: present, a known dtype, a supported rank, non-negative dims,
 * offsets that fit in int64 bytes, data present and aligned to the element size when there are
 * elements (an empty view may have any data pointer, NULL included). */
ropekit_status rk_check_view(const ropekit_tensor *t, const char *name, rk_span *span) {
    if (t == NULL) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "%s: tensor pointer is NULL", name);
    size_t es = rk_dtype_size(t->dtype);
    if (es == 0) return rk_fail(ROPEKIT_ERROR_DTYPE, "%s: unknown dtype %d", name, (int)t->dtype);
    if (t->rank < 1 || t->rank > ROPEKIT_MAX_RANK)
        return rk_fail(ROPEKIT_ERROR_SHAPE, "%s: rank %d is outside [1, %d]", name, (int)t->rank,
                       ROPEKIT_MAX_RANK);
    int64_t numel = 1, lo = 0, hi = 0;
    for (int i = 0; i < t->rank; ++i) {
        if (t->shape[i] < 0)
            return rk_fail(ROPEKIT_ERROR_SHAPE, "%s: shape[%d] = %lld is negative", name, i,
                           (long long)t->shape[i]);
        if (!rk_mul(numel, t->shape[i], &numel))
            return rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: element count overflows int64", name);
    }
    if (numel > 0) {
        for (int i = 0; i < t->rank; ++i) {
            int64_t ext;
            if (!rk_mul(t->shape[i] - 1, t->strides[i], &ext))
                return rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: offset along dim %d overflows int64",
                               name, i);
            if (!(ext < 0 ? rk_add(lo, ext, &lo) : rk_add(hi, ext, &hi)))
                return rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: offsets overflow int64", name);
        }
        int64_t down, up; /* bytes below and above data: lo <= 0 <= hi */
        if (lo == INT64_MIN || !rk_mul(-lo, (int64_t)es, &down) || !rk_add(hi, 1, &up) ||
            !rk_mul(up, (int64_t)es, &up))
            return rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: byte offsets overflow int64", name);
        if (t->data == NULL)
            return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "%s: data is NULL but the tensor has %lld "
                           "elements", name, (long long)numel);
        uintptr_t base = (uintptr_t)t->data;
        if (base % es != 0) /* element strides keep every element as aligned as data */
            return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "%s: data address %p is not aligned to "
                           "its %zu-byte %s elements (ropekit needs aligned data: copy the "
                           "array to aligned memory)", name, t->data, es,
                           ropekit_dtype_name(t->dtype));
        if ((uint64_t)down > base || (uint64_t)up > UINTPTR_MAX - base)
            return rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: view wraps around the address space", name);
        span->lo = base - (uintptr_t)down;
        span->hi = base + (uintptr_t)up;
    } else {
        span->lo = span->hi = (uintptr_t)t->data;
    }
    return ROPEKIT_OK;
}

/* An output must not write one element twice: dims sorted by |stride| must nest. */
ropekit_status rk_check_no_self_overlap(const ropekit_tensor *t, const char *name) {
    int64_t st[ROPEKIT_MAX_RANK], sh[ROPEKIT_MAX_RANK];
    int n = 0;
    for (int i = 0; i < t->rank; ++i) {
        if (t->shape[i] == 0) return ROPEKIT_OK;
        if (t->shape[i] == 1) continue;
        st[n] = t->strides[i] < 0 ? -t->strides[i] : t->strides[i];
        sh[n] = t->shape[i];
        ++n;
    }
    for (int i = 1; i < n; ++i) /* insertion sort by stride */
        for (int j = i; j > 0 && st[j] < st[j - 1]; --j) {
            int64_t a = st[j], b = sh[j];
            st[j] = st[j - 1], sh[j] = sh[j - 1], st[j - 1] = a, sh[j - 1] = b;
        }
    int64_t need = 1;
    for (int i = 0; i < n; ++i) {
        if (st[i] < need)
            return rk_fail(ROPEKIT_ERROR_ALIASING, "%s: strides make elements overlap (an output "
                           "must address each element once)", name);
        need = st[i] * sh[i]; /* cannot overflow: check_view bounded (sh-1)*st */
    }
    return ROPEKIT_OK;
}

static int spans_overlap(rk_span a, rk_span b) {
    return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

static ropekit_status check_float_dtype(const ropekit_tensor *t, const char *name) {
    if (!is_float_dtype(t->dtype))
        return rk_fail(ROPEKIT_ERROR_DTYPE, "%s: dtype %s is not float32, float16 or bfloat16",
                       name, ropekit_dtype_name(t->dtype));
    return ROPEKIT_OK;
}

static ropekit_status check_dtype(const ropekit_tensor *t, const char *name, ropekit_dtype want) {
    if (t->dtype != want)
        return rk_fail(ROPEKIT_ERROR_DTYPE, "%s: dtype is %s, must be %s", name,
                       ropekit_dtype_name(t->dtype), ropekit_dtype_name(want));
    return ROPEKIT_OK;
}

/* Checks rank and every dim; a dim of -1 in `want` is not checked. */
static ropekit_status check_shape(const ropekit_tensor *t, const char *name, int rank,
                                  const int64_t *want, const char *what) {
    int ok = t->rank == rank;
    for (int i = 0; ok && i < rank; ++i) ok = want[i] < 0 || t->shape[i] == want[i];
    if (ok) return ROPEKIT_OK;
    char got[96], exp[96] = "(";
    format_shape(t, got, sizeof got);
    size_t used = 1;
    for (int i = 0; i < rank; ++i)
        used += (size_t)(want[i] < 0 ? snprintf(exp + used, sizeof exp - used, i ? ", ?" : "?")
                                     : snprintf(exp + used, sizeof exp - used, i ? ", %lld" : "%lld",
                                                (long long)want[i]));
    snprintf(exp + used, sizeof exp - used, rank == 1 ? ",)" : ")");
    return rk_fail(ROPEKIT_ERROR_SHAPE, "%s: shape %s, expected %s %s", name, got, exp, what);
}

/* A present view of dtype `dtype` and shape `want` (checked in that order). */
static ropekit_status check_tensor(const ropekit_tensor *t, const char *name, ropekit_dtype dtype,
                                   int rank, const int64_t *want, const char *what, rk_span *span) {
    RK_TRY(rk_check_view(t, name, span));
    RK_TRY(check_dtype(t, name, dtype));
    return check_shape(t, name, rank, want, what);
}

/* The same for the float32, float16 or bfloat16 view whose dtype the others follow. */
static ropekit_status check_float_tensor(const ropekit_tensor *t, const char *name, int rank,
                                         const int64_t *want, const char *what, rk_span *span) {
    RK_TRY(rk_check_view(t, name, span));
    RK_TRY(check_float_dtype(t, name));
    return check_shape(t, name, rank, want, what);
}

/* An output view: check_tensor, then no element addressed twice. */
static ropekit_status check_output_tensor(const ropekit_tensor *t, const char *name,
                                          ropekit_dtype dtype, int rank, const int64_t *want,
                                          const char *what, rk_span *span) {
    RK_TRY(check_tensor(t, name, dtype, rank, want, what, span));
    return rk_check_no_self_overlap(t, name);
}

typedef struct rk_named_span {
    const char *name;
    rk_span span;
} rk_named_span;

/* Output `out` may equal an input exactly (in place is decided by the caller and passed as
 * `same_as`: the index of the input it is identical to, or -1); it may overlap nothing else. */
static ropekit_status check_output_overlap(const char *out_name, rk_span out, int same_as,
                                           const rk_named_span *inputs, int n) {
    for (int i = 0; i < n; ++i) {
        if (i == same_as || !inputs[i].name) continue;
        if (spans_overlap(out, inputs[i].span))
            return rk_fail(ROPEKIT_ERROR_ALIASING, "%s overlaps %s (in place is allowed only with "
                           "an identical view of the input being rotated)", out_name,
                           inputs[i].name);
    }
    return ROPEKIT_OK;
}

/* ---- rotary operators -------------------------------------------------------------------- */

/* The parts of the three rotary contracts that are the same: x/y layout, head split, widths. */
typedef struct rk_rotary_args {
    const char *x_name;
    int64_t interleaved, rotary_embedding_dim, num_heads;
} rk_rotary_args;


/* Canonical (B, S, N, H) dims and strides of a rank-3 (B, S, N*H) or rank-4 (B, N, S, H) view. */
static ropekit_status canonical_bsnh(const ropekit_tensor *t, int64_t N, int64_t H,
                                     const char *name, int64_t dims[4], int64_t st[4]) {
    if (t->rank == 4) {
        dims[0] = t->shape[0], dims[1] = t->shape[2], dims[2] = t->shape[1], dims[3] = t->shape[3];
        st[0] = t->strides[0], st[1] = t->strides[2], st[2] = t->strides[1], st[3] = t->strides[3];
        return ROPEKIT_OK;
    }
    dims[0] = t->shape[0], dims[1] = t->shape[1], dims[2] = N, dims[3] = H;
    st[0] = t->strides[0], st[1] = t->strides[1], st[3] = t->strides[2];
    if (!rk_mul(H, t->strides[2], &st[2]))
        return rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: head stride overflows int64", name);
    return ROPEKIT_OK;
}

static ropekit_status rotary_common(const ropekit_tensor *x, const ropekit_tensor *y,
                                    const rk_rotary_args *a, rk_rotary_plan *p, rk_span *xspan,
                                    rk_span *yspan, int *in_place) {
    RK_TRY(rk_check_view(x, a->x_name, xspan));
    RK_TRY(check_float_dtype(x, a->x_name));
    RK_TRY(rk_check_view(y, "y", yspan));
    if (x->rank != 3 && x->rank != 4)
        return rk_fail(ROPEKIT_ERROR_SHAPE, "%s: rank must be 3 (B, S, N*H) or 4 (B, N, S, H), "
                       "got %d", a->x_name, (int)x->rank);
    if (a->interleaved != 0 && a->interleaved != 1)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "interleaved = %lld, must be 0 or 1",
                       (long long)a->interleaved);
    if (a->num_heads < 0)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "num_heads = %lld is negative",
                       (long long)a->num_heads);
    int64_t N, H;
    if (x->rank == 3) {
        if (a->num_heads == 0)
            return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "num_heads is required (> 0) for "
                           "rank-3 %s", a->x_name);
        if (x->shape[2] % a->num_heads != 0)
            return rk_fail(ROPEKIT_ERROR_SHAPE, "%s: hidden size %lld is not a multiple of "
                           "num_heads = %lld", a->x_name, (long long)x->shape[2],
                           (long long)a->num_heads);
        N = a->num_heads;
        H = x->shape[2] / N;
    } else {
        N = x->shape[1];
        H = x->shape[3];
        if (a->num_heads != 0 && a->num_heads != N)
            return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "num_heads = %lld does not match "
                           "%s.shape[1] = %lld", (long long)a->num_heads, a->x_name, (long long)N);
    }
    int64_t R = a->rotary_embedding_dim;
    if (R < 0)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "rotary_embedding_dim = %lld is negative",
                       (long long)R);
    if (R == 0) R = H;
    if (R == 0)
        return rk_fail(ROPEKIT_ERROR_SHAPE, "%s: head size is 0, nothing to rotate", a->x_name);
    if (R > H)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "rotary_embedding_dim = %lld exceeds the "
                       "head size %lld", (long long)R, (long long)H);
    if (R % 2 != 0) {
        if (a->rotary_embedding_dim != 0)
            return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "rotary_embedding_dim = %lld is odd; "
                           "the rotary width must be even", (long long)R);
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "rotary_embedding_dim = 0 means the head "
                       "size %lld, which is odd; the rotary width must be even (set "
                       "rotary_embedding_dim to an even width to copy the last channel)",
                       (long long)R);
    }
    /* y: same dtype, same shape */
    if (y->dtype != x->dtype)
        return rk_fail(ROPEKIT_ERROR_DTYPE, "y: dtype %s differs from %s dtype %s",
                       ropekit_dtype_name(y->dtype), a->x_name, ropekit_dtype_name(x->dtype));
    RK_TRY(check_shape(y, "y", x->rank, x->shape, "(the shape of the input)"));
    RK_TRY(rk_check_no_self_overlap(y, "y"));

    memset(p, 0, sizeof *p);
    p->dtype = x->dtype;
    int64_t dims[4];
    RK_TRY(canonical_bsnh(x, N, H, a->x_name, dims, p->xs));
    RK_TRY(canonical_bsnh(y, N, H, "y", dims, p->ys));
    p->B = dims[0], p->S = dims[1], p->N = dims[2], p->H = dims[3], p->R = R;
    p->x = (const char *)x->data;
    p->y = (char *)y->data;
    p->interleaved = (int)a->interleaved;
    *in_place = x->data == y->data && memcmp(p->xs, p->ys, sizeof p->xs) == 0;
    return ROPEKIT_OK;
}

/* cos/sin: same dtype (T or float32), same shape, `rank` dims with the last equal to h. */
static ropekit_status check_tables(const ropekit_tensor *c, const ropekit_tensor *s,
                                   const char *cname, const char *sname, ropekit_dtype T,
                                   const int64_t *want, int rank, const char *what,
                                   rk_span *cspan, rk_span *sspan) {
    RK_TRY(rk_check_view(c, cname, cspan));
    RK_TRY(rk_check_view(s, sname, sspan));
    if (c->dtype != T && c->dtype != ROPEKIT_FLOAT32)
        return rk_fail(ROPEKIT_ERROR_DTYPE, "%s: dtype %s must be the input's (%s) or float32",
                       cname, ropekit_dtype_name(c->dtype), ropekit_dtype_name(T));
    if (s->dtype != c->dtype)
        return rk_fail(ROPEKIT_ERROR_DTYPE, "%s: dtype %s differs from %s dtype %s", sname,
                       ropekit_dtype_name(s->dtype), cname, ropekit_dtype_name(c->dtype));
    RK_TRY(check_shape(c, cname, rank, want, what));
    RK_TRY(check_shape(s, sname, rank, c->shape, "(the shape of the cos table)"));
    return ROPEKIT_OK;
}

static void set_table_2d(rk_rotary_plan *p, const ropekit_tensor *c, const ropekit_tensor *s) {
    p->table_dtype = c->dtype;
    p->cos = (const char *)c->data, p->sin = (const char *)s->data;
    p->cos_rs = c->strides[0], p->cos_cs = c->strides[1];
    p->sin_rs = s->strides[0], p->sin_cs = s->strides[1];
}

/* Checks the ids of one stream (-1: plain (B, S) ids) against the table rows. */
static ropekit_status check_stream_ids(const rk_rotary_plan *p, int stream) {
    /* offsets in elements, the pointer formed only for an element that exists: pos is NULL
     * when the ids have no elements, and NULL + offset is undefined even for offset 0 */
    const int64_t base = stream >= 0 ? stream * p->pos_as : 0;
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t s = 0; s < p->S; ++s) {
            int64_t v = p->pos[base + b * p->pos_bs + s * p->pos_ss];
            if (v >= 0 && v < p->table_rows) continue;
            if (stream >= 0)
                return rk_fail(ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position_ids[%d][%lld][%lld] = "
                               "%lld is outside cos_cache rows [0, %lld)", stream, (long long)b,
                               (long long)s, (long long)v, (long long)p->table_rows);
            return rk_fail(ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position_ids[%lld][%lld] = %lld is "
                           "outside cos_cache rows [0, %lld)", (long long)b, (long long)s,
                           (long long)v, (long long)p->table_rows);
        }
    return ROPEKIT_OK;
}

ropekit_status rk_check_position_ids(rk_rotary_plan *p) {
    switch (p->rows) {
    case RK_ROWS_TABLE_3D: return ROPEKIT_OK;
    case RK_ROWS_OFFSET: {
        int64_t off = p->pos[0], rows = p->table_rows;
        if (off < 0 || p->S > rows || off > rows - p->S)
            return rk_fail(ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position offset %lld with "
                           "sequence length %lld needs rows [%lld, %lld + %lld), cos_cache has "
                           "rows [0, %lld)", (long long)off, (long long)p->S, (long long)off,
                           (long long)off, (long long)p->S, (long long)rows);
        p->offset = off;
        return ROPEKIT_OK;
    }
    case RK_ROWS_MROPE: {
        int used[3] = {0, 0, 0};
        for (int64_t k = 0; k < p->R / 2; ++k)
            used[rk_mrope_stream(p->mrope_section, p->mrope_layout, k)] = 1;
        for (int st = 0; st < 3; ++st)
            if (used[st]) RK_TRY(check_stream_ids(p, st));
        return ROPEKIT_OK;
    }
    default: return check_stream_ids(p, -1);
    }
}

/* The last step of the three rotary entry points: read the ids, then rotate on the CPU. */
static ropekit_status check_ids_and_run(rk_rotary_plan *p) {
    RK_TRY(rk_check_position_ids(p));
    if (p->B > 0 && p->S > 0 && p->N > 0) rk_cpu_rotary(p);
    return ROPEKIT_OK;
}

/* ---- the small-call fast path ----------------------------------------------------------
 * The common call (a decode token, one batch of them): x and y contiguous rank 3 (B, S, N*H) or
 * rank 4 (B, N, S, H), contiguous 2-D tables, contiguous (B, S) position ids. fast_view accepts
 * only what rk_check_view accepts (a known float or int64 dtype checked by the caller, dims > 0,
 * row-major strides, data present and aligned, no wrap-around) with numel <= 2^40, so nothing
 * here overflows; rotary_plan_fast accepts only calls that rk_plan_rotary_embedding_full accepts
 * and builds the same plan (tests/test_views.c compares them on random mutations). Any other call
 * goes the full way, which reports every error as before. */
#define RK_FAST_MAX_NUMEL ((int64_t)1 << 40)
static inline __attribute__((always_inline)) int fast_view(const ropekit_tensor *t, int rank,
                                                           size_t es, rk_span *span) {
    if (t->rank != rank || t->data == NULL || ((uintptr_t)t->data & (es - 1))) return 0; /* es: 2^k */
    int64_t numel = 1;
    for (int i = rank - 1; i >= 0; --i) {
        if (t->shape[i] <= 0 || t->strides[i] != numel || !rk_mul(numel, t->shape[i], &numel) ||
            numel > RK_FAST_MAX_NUMEL)
            return 0;
    }
    const uintptr_t base = (uintptr_t)t->data, bytes = (uintptr_t)numel * es;
    if (bytes > UINTPTR_MAX - base) return 0;
    span->lo = base, span->hi = base + bytes;
    return 1;
}
static int spans_overlap(rk_span a, rk_span b);

static int rotary_plan_fast(const ropekit_tensor *x, const ropekit_tensor *c,
                            const ropekit_tensor *s, const ropekit_tensor *pos,
                            const ropekit_rotary_embedding_attrs *a, const ropekit_tensor *y,
                            rk_rotary_plan *plan) {
    if (!a || !x || !y || !c || !s || !pos) return 0;
    if ((a->inverse | a->interleaved) & ~(int64_t)1 || a->num_heads < 0) return 0;
    const ropekit_dtype T = x->dtype, TT = c->dtype;
    const size_t es = T == ROPEKIT_FLOAT32 ? 4 : T == ROPEKIT_FLOAT16 || T == ROPEKIT_BFLOAT16 ? 2 : 0;
    if (!es || y->dtype != T || (TT != T && TT != ROPEKIT_FLOAT32) || s->dtype != TT ||
        pos->dtype != ROPEKIT_INT64)
        return 0;
    const int rank = x->rank;
    rk_span xs, ys, cs, ss, ps;
    if ((rank != 3 && rank != 4) || !fast_view(x, rank, es, &xs) || !fast_view(y, rank, es, &ys))
        return 0;
    for (int i = 0; i < rank; ++i)
        if (y->shape[i] != x->shape[i]) return 0;
    int64_t B = x->shape[0], S, N, H;
    if (rank == 3) {
        N = a->num_heads, S = x->shape[1];
        if (N == 0) return 0;
        if ((N & (N - 1)) == 0) { /* a power of two (32 heads...): no division */
            if (x->shape[2] & (N - 1)) return 0;
            H = x->shape[2] >> __builtin_ctzll((unsigned long long)N);
        } else {
            if (x->shape[2] % N) return 0;
            H = x->shape[2] / N;
        }
    } else {
        if (a->num_heads != 0 && a->num_heads != x->shape[1]) return 0;
        N = x->shape[1], S = x->shape[2], H = x->shape[3];
    }
    const int64_t R = a->rotary_embedding_dim ? a->rotary_embedding_dim : H;
    if (R <= 0 || R > H || R % 2) return 0;
    const size_t tes = TT == ROPEKIT_FLOAT32 ? 4 : 2;
    if (!fast_view(c, 2, tes, &cs) || !fast_view(s, 2, tes, &ss) || c->shape[1] != R / 2 ||
        s->shape[0] != c->shape[0] || s->shape[1] != R / 2)
        return 0;
    if (!fast_view(pos, 2, 8, &ps) || pos->shape[0] != B || pos->shape[1] != S) return 0;
    const int in_place = x->data == y->data; /* same shape, both row-major: identical views */
    if ((!in_place && spans_overlap(ys, xs)) || spans_overlap(ys, cs) || spans_overlap(ys, ss) ||
        spans_overlap(ys, ps))
        return 0;
    /* every field written (no memset: for a struct this size it is a `rep stos`, whose start-up
     * alone is tens of cycles); a field added to the plan must be added here */
#if UINTPTR_MAX == 0xffffffffffffffffu && !defined(_WIN32)
    _Static_assert(sizeof(rk_rotary_plan) == 312, "rotary_plan_fast sets every plan field");
#endif
    rk_rotary_plan *p = plan;
    p->apply_scale = 0, p->scale = 0.0f;
    p->cos_bs = p->cos_ss = p->sin_bs = p->sin_ss = 0;
    p->pos_as = 0, p->offset = 0;
    p->mrope_section[0] = p->mrope_section[1] = p->mrope_section[2] = 0, p->mrope_layout = 0;
    p->dtype = T;
    p->table_dtype = TT;
    p->B = B, p->S = S, p->N = N, p->H = H, p->R = R;
    p->x = (const char *)x->data;
    p->y = (char *)y->data;
    /* canonical (b, s, n, c) strides, as canonical_bsnh makes them */
    if (rank == 3) {
        p->xs[0] = p->ys[0] = x->strides[0], p->xs[1] = p->ys[1] = x->strides[1];
        p->xs[2] = p->ys[2] = H, p->xs[3] = p->ys[3] = 1;
    } else {
        p->xs[0] = p->ys[0] = x->strides[0], p->xs[1] = p->ys[1] = x->strides[2];
        p->xs[2] = p->ys[2] = x->strides[1], p->xs[3] = p->ys[3] = 1;
    }
    p->interleaved = (int)a->interleaved;
    p->inverse = (int)a->inverse;
    p->cos = (const char *)c->data, p->sin = (const char *)s->data;
    p->cos_rs = c->strides[0], p->cos_cs = 1, p->sin_rs = s->strides[0], p->sin_cs = 1;
    p->rows = RK_ROWS_PER_TOKEN;
    p->pos = (const int64_t *)pos->data;
    p->pos_bs = pos->strides[0], p->pos_ss = pos->strides[1];
    p->table_rows = c->shape[0];
    return 1;
}

ropekit_status rk_plan_rotary_embedding(const ropekit_tensor *x, const ropekit_tensor *cos_cache,
                                        const ropekit_tensor *sin_cache,
                                        const ropekit_tensor *position_ids,
                                        const ropekit_rotary_embedding_attrs *attrs,
                                        const ropekit_tensor *y, rk_rotary_plan *plan) {
    if (rotary_plan_fast(x, cos_cache, sin_cache, position_ids, attrs, y, plan)) return ROPEKIT_OK;
    return rk_plan_rotary_embedding_full(x, cos_cache, sin_cache, position_ids, attrs, y, plan);
}

ropekit_status rk_plan_rotary_embedding_full(const ropekit_tensor *x,
                                             const ropekit_tensor *cos_cache,
                                             const ropekit_tensor *sin_cache,
                                             const ropekit_tensor *position_ids,
                                             const ropekit_rotary_embedding_attrs *attrs,
                                             const ropekit_tensor *y, rk_rotary_plan *plan) {
    if (!attrs) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "attrs is NULL");
    if (attrs->inverse != 0 && attrs->inverse != 1)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "inverse = %lld, must be 0 or 1",
                       (long long)attrs->inverse);
    rk_rotary_args a = {"x", attrs->interleaved, attrs->rotary_embedding_dim, attrs->num_heads};
    rk_rotary_plan p;
    rk_span xs, ys, cs, ss, ps = {0, 0};
    int in_place;
    RK_TRY(rotary_common(x, y, &a, &p, &xs, &ys, &in_place));
    p.inverse = (int)attrs->inverse;
    int64_t h = p.R / 2;
    if (position_ids) {
        int64_t want[2] = {-1, h};
        RK_TRY(check_tables(cos_cache, sin_cache, "cos_cache", "sin_cache", x->dtype, want, 2,
                            "(rows, rotary_embedding_dim/2) with position_ids", &cs, &ss));
        int64_t pw[2] = {p.B, p.S};
        RK_TRY(check_tensor(position_ids, "position_ids", ROPEKIT_INT64, 2, pw, "(batch, sequence)",
                            &ps));
        set_table_2d(&p, cos_cache, sin_cache);
        p.rows = RK_ROWS_PER_TOKEN;
        p.pos = (const int64_t *)position_ids->data;
        p.pos_bs = position_ids->strides[0], p.pos_ss = position_ids->strides[1];
        p.table_rows = cos_cache->shape[0];
    } else {
        int64_t want[3] = {p.B, p.S, h};
        RK_TRY(check_tables(cos_cache, sin_cache, "cos_cache", "sin_cache", x->dtype, want, 3,
                            "(batch, sequence, rotary_embedding_dim/2) without position_ids", &cs,
                            &ss));
        p.table_dtype = cos_cache->dtype;
        p.cos = (const char *)cos_cache->data, p.sin = (const char *)sin_cache->data;
        p.rows = RK_ROWS_TABLE_3D;
        p.cos_bs = cos_cache->strides[0], p.cos_ss = cos_cache->strides[1];
        p.cos_cs = cos_cache->strides[2];
        p.sin_bs = sin_cache->strides[0], p.sin_ss = sin_cache->strides[1];
        p.sin_cs = sin_cache->strides[2];
    }
    rk_named_span ins[4] = {{"x", xs}, {"cos_cache", cs}, {"sin_cache", ss},
                            {position_ids ? "position_ids" : NULL, ps}};
    RK_TRY(check_output_overlap("y", ys, in_place ? 0 : -1, ins, 4));
    *plan = p;
    return ROPEKIT_OK;
}

ropekit_status ropekit_rotary_embedding(const ropekit_tensor *x, const ropekit_tensor *cos_cache,
                                        const ropekit_tensor *sin_cache,
                                        const ropekit_tensor *position_ids,
                                        const ropekit_rotary_embedding_attrs *attrs,
                                        const ropekit_tensor *y) {
    rk_clear_error();
    rk_rotary_plan p;
    RK_TRY(rk_plan_rotary_embedding(x, cos_cache, sin_cache, position_ids, attrs, y, &p));
    return check_ids_and_run(&p);
}

/* Shared by the two com.microsoft rotary ops (MRotaryEmbedding passes its own attributes in
 * this form): input/y through rotary_common, then scale, is_packed_batching, inverse. */
static ropekit_status ms_rotary_common(const ropekit_tensor *input, const ropekit_tensor *y,
                                       const ropekit_ms_rotary_embedding_attrs *ms,
                                       rk_rotary_plan *p, rk_span *xs, rk_span *ys, int *in_place) {
    rk_rotary_args a = {"input", ms->interleaved, ms->rotary_embedding_dim, ms->num_heads};
    RK_TRY(rotary_common(input, y, &a, p, xs, ys, in_place));
    if (ms->is_packed_batching != 0)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "is_packed_batching = %lld: only 0 is supported",
                       (long long)ms->is_packed_batching);
    if (ms->inverse != 0 && ms->inverse != 1)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "inverse = %lld, must be 0 or 1",
                       (long long)ms->inverse);
    if (!isfinite(ms->scale))
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "scale is not finite");
    p->inverse = (int)ms->inverse;
    p->scale = ms->scale;
    p->apply_scale = ms->scale != 1.0f;
    return ROPEKIT_OK;
}

/* The com.microsoft rotary ops: 2D (rows, R/2) tables and a present int64 position_ids. */
static ropekit_status ms_tables_and_ids(const ropekit_tensor *input,
                                        const ropekit_tensor *position_ids,
                                        const ropekit_tensor *cos_cache,
                                        const ropekit_tensor *sin_cache, rk_rotary_plan *p,
                                        rk_span *cs, rk_span *ss, rk_span *ps) {
    int64_t want[2] = {-1, p->R / 2};
    RK_TRY(check_tables(cos_cache, sin_cache, "cos_cache", "sin_cache", input->dtype, want, 2,
                        "(max_sequence_length, rotary_embedding_dim/2)", cs, ss));
    set_table_2d(p, cos_cache, sin_cache);
    p->table_rows = cos_cache->shape[0];
    if (position_ids == NULL)
        return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "position_ids is required");
    RK_TRY(rk_check_view(position_ids, "position_ids", ps));
    RK_TRY(check_dtype(position_ids, "position_ids", ROPEKIT_INT64));
    p->pos = (const int64_t *)position_ids->data;
    return ROPEKIT_OK;
}

/* The com.microsoft rotary ops' last check: y overlaps none of its inputs but an identical
 * input (in place). */
static ropekit_status check_ms_output(rk_span ys, int in_place, rk_span xs, rk_span ps, rk_span cs,
                                      rk_span ss) {
    rk_named_span ins[4] = {
        {"input", xs}, {"position_ids", ps}, {"cos_cache", cs}, {"sin_cache", ss}};
    return check_output_overlap("y", ys, in_place ? 0 : -1, ins, 4);
}

ropekit_status rk_plan_ms_rotary_embedding(const ropekit_tensor *input,
                                           const ropekit_tensor *position_ids,
                                           const ropekit_tensor *cos_cache,
                                           const ropekit_tensor *sin_cache,
                                           const ropekit_ms_rotary_embedding_attrs *attrs,
                                           const ropekit_tensor *y,
    rk_rotary_plan *plan) {
    if (!attrs) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "attrs is NULL");
    rk_rotary_plan p;
    rk_span xs, ys, cs, ss, ps;
    int in_place;
    RK_TRY(ms_rotary_common(input, y, attrs, &p, &xs, &ys, &in_place));
    RK_TRY(ms_tables_and_ids(input, position_ids, cos_cache, sin_cache, &p, &cs, &ss, &ps));
    if (position_ids->rank == 1 && position_ids->shape[0] == 1) {
        p.rows = RK_ROWS_OFFSET; /* the offset is read and checked by rk_check_position_ids */
    } else {
        int64_t pw[2] = {p.B, p.S};
        RK_TRY(check_shape(position_ids, "position_ids", 2, pw,
                           "(batch, sequence), or (1,) for an offset"));
        p.rows = RK_ROWS_PER_TOKEN;
        p.pos_bs = position_ids->strides[0], p.pos_ss = position_ids->strides[1];
    }
    RK_TRY(check_ms_output(ys, in_place, xs, ps, cs, ss));
    *plan = p;
    return ROPEKIT_OK;
}

ropekit_status ropekit_ms_rotary_embedding(const ropekit_tensor *input,
                                           const ropekit_tensor *position_ids,
                                           const ropekit_tensor *cos_cache,
                                           const ropekit_tensor *sin_cache,
                                           const ropekit_ms_rotary_embedding_attrs *attrs,
                                           const ropekit_tensor *y) {
    rk_clear_error();
    rk_rotary_plan p;
    RK_TRY(rk_plan_ms_rotary_embedding(input, position_ids, cos_cache, sin_cache, attrs, y, &p));
    return check_ids_and_run(&p);
}

ropekit_status rk_plan_mrotary_embedding(const ropekit_tensor *input,
                                         const ropekit_tensor *position_ids,
                                         const ropekit_tensor *cos_cache,
                                         const ropekit_tensor *sin_cache,
                                         const ropekit_mrotary_embedding_attrs *attrs,
                                         const ropekit_tensor *y,
    rk_rotary_plan *plan) {
    if (!attrs) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "attrs is NULL");
    ropekit_ms_rotary_embedding_attrs ms = {attrs->interleaved,        attrs->rotary_embedding_dim,
                                            attrs->num_heads,          attrs->scale,
                                            attrs->is_packed_batching, attrs->inverse};
    rk_rotary_plan p;
    rk_span xs, ys, cs, ss, ps;
    int in_place;
    RK_TRY(ms_rotary_common(input, y, &ms, &p, &xs, &ys, &in_place));
    int64_t h = p.R / 2;
    if (attrs->mrope_layout != 0 && attrs->mrope_layout != 1)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "mrope_layout = %lld, must be 0 "
                       "(sectioned) or 1 (interleaved)", (long long)attrs->mrope_layout);
    const int64_t *sec = attrs->mrope_section;
    if (sec[0] < 0 || sec[1] < 0 || sec[2] < 0 || sec[0] > h || sec[1] > h || sec[2] > h ||
        sec[0] + sec[1] + sec[2] != h)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "mrope_section = [%lld, %lld, %lld] must "
                       "be non-negative and sum to rotary_embedding_dim/2 = %lld (it is not "
                       "doubled)", (long long)sec[0], (long long)sec[1], (long long)sec[2],
                       (long long)h);
    RK_TRY(ms_tables_and_ids(input, position_ids, cos_cache, sin_cache, &p, &cs, &ss, &ps));
    int64_t pw[3] = {3, p.B, p.S};
    RK_TRY(check_shape(position_ids, "position_ids", 3, pw, "(3 streams, batch, sequence)"));
    p.rows = RK_ROWS_MROPE;
    p.pos_as = position_ids->strides[0];
    p.pos_bs = position_ids->strides[1], p.pos_ss = position_ids->strides[2];
    memcpy(p.mrope_section, sec, sizeof p.mrope_section);
    p.mrope_layout = (int)attrs->mrope_layout;
    RK_TRY(check_ms_output(ys, in_place, xs, ps, cs, ss));
    *plan = p;
    return ROPEKIT_OK;
}

ropekit_status ropekit_mrotary_embedding(const ropekit_tensor *input,
                                         const ropekit_tensor *position_ids,
                                         const ropekit_tensor *cos_cache,
                                         const ropekit_tensor *sin_cache,
                                         const ropekit_mrotary_embedding_attrs *attrs,
                                         const ropekit_tensor *y) {
    rk_clear_error();
    rk_rotary_plan p;
    RK_TRY(rk_plan_mrotary_embedding(input, position_ids, cos_cache, sin_cache, attrs, y, &p));
    return check_ids_and_run(&p);
}

/* ---- QKNormRotaryEmbedding ----------------------------------------------------------------- */

static ropekit_status check_rope_dims(int64_t num_heads, int64_t head_dim, int64_t rope) {
    if (num_heads <= 0)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "num_heads = %lld, must be > 0",
                       (long long)num_heads);
    if (head_dim <= 0)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "head_dim = %lld, must be > 0",
                       (long long)head_dim);
    if (rope < 0 || rope > head_dim || rope % 2 != 0)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "rope_head_dim = %lld, must be even and "
                       "in [0, head_dim = %lld]", (long long)rope, (long long)head_dim);
    int64_t hidden;
    if (!rk_mul(num_heads, head_dim, &hidden))
        return rk_fail(ROPEKIT_ERROR_OVERFLOW, "num_heads * head_dim overflows int64");
    return ROPEKIT_OK;
}

/* Optional float32 (..., rope) tables: NULL allowed only when rope == 0. */
static ropekit_status check_m_table(const ropekit_tensor *t, const char *name, int rank,
                                    const int64_t *want, int64_t rope, rk_span *span) {
    span->lo = span->hi = 0;
    if (t == NULL) {
        if (rope == 0) return ROPEKIT_OK;
        return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "%s is required when rope_head_dim > 0", name);
    }
    return check_tensor(t, name, ROPEKIT_FLOAT32, rank, want,
                        rank == 3 ? "(batch, sequence, rope_head_dim)" : "(tokens, rope_head_dim)",
                        span);
}

ropekit_status rk_plan_qknorm_rotary_embedding(
    const ropekit_tensor *query, const ropekit_tensor *kv, const ropekit_tensor *kv_norm_weight,
    const ropekit_tensor *cos, const ropekit_tensor *sin,
    const ropekit_qknorm_rotary_embedding_attrs *attrs, const ropekit_tensor *query_out,
    const ropekit_tensor *kv_out,
    rk_qknorm_plan *plan) {
    if (!attrs) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "attrs is NULL");
    int64_t nh = attrs->num_heads, hd = attrs->head_dim, rd = attrs->rope_head_dim;
    RK_TRY(check_rope_dims(nh, hd, rd));
    if (attrs->simulate_fp8 != 0 && attrs->simulate_fp8 != 1)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "simulate_fp8 = %lld, must be 0 or 1",
                       (long long)attrs->simulate_fp8);
    if (attrs->simulate_fp8 && (hd - rd) % 64 != 0)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "simulate_fp8 needs head_dim - "
                       "rope_head_dim = %lld to be a multiple of 64", (long long)(hd - rd));
    float eps = attrs->epsilon;
    if (!isfinite(eps) || eps < 0.0f)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "epsilon must be finite and >= 0");
    rk_span qs, ks, ws, cs, ss, qos, kos;
    int64_t q3[3] = {-1, -1, nh * hd};
    RK_TRY(check_float_tensor(query, "query", 3, q3, "(batch, sequence, num_heads*head_dim)", &qs));
    int64_t B = query->shape[0], S = query->shape[1];
    ropekit_dtype T = query->dtype;
    int64_t k3[3] = {B, S, hd};
    RK_TRY(check_tensor(kv, "kv", T, 3, k3, "(batch, sequence, head_dim)", &ks));
    RK_TRY(
        check_tensor(kv_norm_weight, "kv_norm_weight", ROPEKIT_FLOAT32, 1, &hd, "(head_dim)", &ws));
    int64_t c3[3] = {B, S, rd};
    RK_TRY(check_m_table(cos, "cos", 3, c3, rd, &cs));
    RK_TRY(check_m_table(sin, "sin", 3, c3, rd, &ss));
    int64_t qo4[4] = {B, S, nh, hd};
    RK_TRY(check_output_tensor(query_out, "query_out", T, 4, qo4,
                               "(batch, sequence, num_heads, head_dim)", &qos));
    RK_TRY(check_output_tensor(kv_out, "kv_out", T, 3, k3, "(batch, sequence, head_dim)", &kos));

    rk_qknorm_plan p;
    memset(&p, 0, sizeof p);
    p.dtype = T;
    p.B = B, p.S = S, p.num_heads = nh, p.head_dim = hd, p.rope_dim = rd, p.nope = hd - rd;
    p.epsilon = eps;
    p.simulate_fp8 = (int)attrs->simulate_fp8;
    p.q = (const char *)query->data, p.kv = (const char *)kv->data;
    p.q_out = (char *)query_out->data, p.kv_out = (char *)kv_out->data;
    p.qs[0] = query->strides[0], p.qs[1] = query->strides[1], p.qs[3] = query->strides[2];
    if (!rk_mul(hd, query->strides[2], &p.qs[2]))
        return rk_fail(ROPEKIT_ERROR_OVERFLOW, "query: head stride overflows int64");
    memcpy(p.qos, query_out->strides, sizeof p.qos);
    memcpy(p.kvs, kv->strides, sizeof p.kvs);
    memcpy(p.kvos, kv_out->strides, sizeof p.kvos);
    p.w = (const float *)kv_norm_weight->data, p.ws = kv_norm_weight->strides[0];
    if (rd > 0) {
        p.cos = (const float *)cos->data, p.sin = (const float *)sin->data;
        memcpy(p.cos_s, cos->strides, sizeof p.cos_s);
        memcpy(p.sin_s, sin->strides, sizeof p.sin_s);
    }
    /* in place: identical element mapping */
    int q_in_place = query->data == query_out->data && memcmp(p.qs, p.qos, sizeof p.qs) == 0;
    int kv_in_place = kv->data == kv_out->data && memcmp(p.kvs, p.kvos, sizeof p.kvs) == 0;
    rk_named_span ins[6] = {{"query", qs}, {"kv", ks}, {"kv_norm_weight", ws},
                            {rd ? "cos" : NULL, cs}, {rd ? "sin" : NULL, ss}, {"kv_out", kos}};
    RK_TRY(check_output_overlap("query_out", qos, q_in_place ? 0 : -1, ins, 6));
    RK_TRY(check_output_overlap("kv_out", kos, kv_in_place ? 1 : -1, ins, 5));
    *plan = p;
    return ROPEKIT_OK;
}

ropekit_status ropekit_qknorm_rotary_embedding(
    const ropekit_tensor *query, const ropekit_tensor *kv, const ropekit_tensor *kv_norm_weight,
    const ropekit_tensor *cos, const ropekit_tensor *sin,
    const ropekit_qknorm_rotary_embedding_attrs *attrs, const ropekit_tensor *query_out,
    const ropekit_tensor *kv_out) {
    rk_clear_error();
    rk_qknorm_plan p;
    RK_TRY(rk_plan_qknorm_rotary_embedding(query, kv, kv_norm_weight, cos, sin, attrs, query_out, kv_out, &p));
    if (p.B > 0 && p.S > 0) rk_cpu_qknorm(&p);
    return ROPEKIT_OK;
}

/* ---- InverseRotaryRegroup ------------------------------------------------------------------ */

ropekit_status rk_plan_inverse_rotary_regroup(const ropekit_tensor *input,
                                              const ropekit_tensor *cos,
                                              const ropekit_tensor *sin,
                                              const ropekit_inverse_rotary_regroup_attrs *attrs,
                                              const ropekit_tensor *out,
    rk_regroup_plan *plan) {
    if (!attrs) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "attrs is NULL");
    int64_t nh = attrs->num_heads, hd = attrs->head_dim, rd = attrs->rope_head_dim;
    RK_TRY(check_rope_dims(nh, hd, rd));
    int64_t F = nh * hd, G = attrs->num_groups;
    if (G <= 0 || F % G != 0)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "num_groups = %lld must be > 0 and divide "
                       "num_heads*head_dim = %lld", (long long)G, (long long)F);
    rk_span is, cs, ss, os;
    int64_t i2[2] = {-1, F};
    RK_TRY(check_float_tensor(input, "input", 2, i2, "(tokens, num_heads*head_dim)", &is));
    int64_t N = input->shape[0];
    int64_t c2[2] = {N, rd};
    RK_TRY(check_m_table(cos, "cos", 2, c2, rd, &cs));
    RK_TRY(check_m_table(sin, "sin", 2, c2, rd, &ss));
    int64_t o3[3] = {G, N, F / G};
    RK_TRY(check_output_tensor(out, "out", input->dtype, 3, o3, "(num_groups, tokens, group_dim)",
                               &os));
    rk_named_span ins[3] = {{"input", is}, {rd ? "cos" : NULL, cs}, {rd ? "sin" : NULL, ss}};
    RK_TRY(check_output_overlap("out", os, -1, ins, 3));

    rk_regroup_plan p;
    memset(&p, 0, sizeof p);
    p.dtype = input->dtype;
    p.N = N, p.num_heads = nh, p.head_dim = hd, p.rope_dim = rd, p.nope = hd - rd;
    p.num_groups = G, p.group_dim = F / G;
    p.x = (const char *)input->data, p.out = (char *)out->data;
    memcpy(p.xs, input->strides, sizeof p.xs);
    memcpy(p.os, out->strides, sizeof p.os);
    if (rd > 0) {
        p.cos = (const float *)cos->data, p.sin = (const float *)sin->data;
        memcpy(p.cos_s, cos->strides, sizeof p.cos_s);
        memcpy(p.sin_s, sin->strides, sizeof p.sin_s);
    }
    *plan = p;
    return ROPEKIT_OK;
}

ropekit_status ropekit_inverse_rotary_regroup(const ropekit_tensor *input,
                                              const ropekit_tensor *cos,
                                              const ropekit_tensor *sin,
                                              const ropekit_inverse_rotary_regroup_attrs *attrs,
                                              const ropekit_tensor *out) {
    rk_clear_error();
    rk_regroup_plan p;
    RK_TRY(rk_plan_inverse_rotary_regroup(input, cos, sin, attrs, out, &p));
    if (p.N > 0) rk_cpu_regroup(&p);
    return ROPEKIT_OK;
}
