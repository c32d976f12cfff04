/* The RoPE fusion pass: match every site, build shared tables, rewrite, report.
 * See include/ropekit_fuse.h for the contract and fuse_internal.h for the structure. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_json.h"
#include "fuse_internal.h"
#include "ropekit_fuse.h"

/* A Cos or Sin value the fusion leaves in the graph, and why. */
typedef struct rk_unfused {
    char *value;
    const char *op; /* "Cos" / "Sin" (static) */
    char reason[2 * RK_REASON];
    int64_t *sites; /* indices of the sites its values reach */
    size_t n_sites;
    int feeds_rotary; /* it already feeds a RotaryEmbedding-family node (an opset-23 export) */
} rk_unfused;

struct ropekit_fuse_report {
    rk_site *sites;
    size_t n_sites;
    int64_t nodes_before, nodes_after;
    int64_t table_bytes, tables;
    int64_t max_positions;
    char max_positions_source[160];
    char target[24];
    char mode[24];
    int dry_run;
    char warnings[8][256];
    int n_warnings;
    rk_unfused *unfused; /* Cos/Sin values still in the graph afterwards (or, dry run, that would be) */
    size_t n_unfused;
    rk_buf attention_log; /* match_qknorm.c: DeepSeek-V4 attention sites */
    int64_t attention_found, attention_fused;
};

/* ---- tables -------------------------------------------------------------------------------- */

typedef struct rk_table {
    const rk_angles *angles; /* owned by a site */
    const rk_site *site;     /* RK_ANGLES_ROWS: the first site reading these rows */
    int32_t elem_type;
    char *cos_name, *sin_name;
    char *idx; /* RK_ANGLES_ROWS: Range(0, rows, 1) */
    char *pos; /* RK_ANGLES_ROWS: the (B, S) index built for an earlier site, reusable by later
                * sites of the same layout when it is computed before them */
    rk_layout pos_layout;
} rk_table;

static ropekit_dtype to_rk_dtype(int32_t t) {
    return t == RK_DT_FLOAT16 ? ROPEKIT_FLOAT16 : t == RK_DT_BFLOAT16 ? ROPEKIT_BFLOAT16 : ROPEKIT_FLOAT32;
}

ropekit_status rk_angles_tables(const rk_angles *a, int32_t elem_type, int64_t P, char **cos_out,
                                char **sin_out, int64_t *rows_out) {
    ropekit_dtype dt = to_rk_dtype(elem_type);
    size_t es = ropekit_dtype_size(dt);
    int64_t rows = a->kind == RK_ANGLES_TABLE ? a->rows : P;
    size_t n = (size_t)rows * (size_t)a->half;
    char *cos_buf = malloc(n * es + 1), *sin_buf = malloc(n * es + 1);
    *cos_out = *sin_out = NULL;
    if (!cos_buf || !sin_buf) {
        free(cos_buf), free(sin_buf);
        return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory for a %lld x %lld table",
                       (long long)rows, (long long)a->half);
    }
    int64_t shape[2] = {rows, a->half};
    ropekit_tensor ct = ropekit_tensor_contiguous(cos_buf, dt, 2, shape);
    ropekit_tensor st = ropekit_tensor_contiguous(sin_buf, dt, 2, shape);
    ropekit_status s = ROPEKIT_OK;
    if (a->kind == RK_ANGLES_INV_FREQ) {
        s = ropekit_rope_cos_sin_table(a->inv_freq, a->half, a->scale, ROPEKIT_ANGLE_GRAPH, &ct, &st);
    } else {
        for (size_t i = 0; i < n; ++i) {
            rk_store(cos_buf, dt, (int64_t)i, a->cos_rows[i] * a->scale);
            rk_store(sin_buf, dt, (int64_t)i, a->sin_rows[i] * a->scale);
        }
    }
    if (s != ROPEKIT_OK) {
        free(cos_buf), free(sin_buf);
        return s;
    }
    *cos_out = cos_buf, *sin_out = sin_buf, *rows_out = rows;
    return ROPEKIT_OK;
}

/* Adds the cos/sin initializers for an angle source (P rows; graph arithmetic). */
static ropekit_status add_tables(rk_graph *ix, const rk_angles *a, int32_t elem_type, int64_t P,
                                 rk_table *t, int64_t *bytes) {
    char *cos_buf, *sin_buf;
    int64_t rows;
    RK_TRY(rk_angles_tables(a, elem_type, P, &cos_buf, &sin_buf, &rows));
    size_t es = ropekit_dtype_size(to_rk_dtype(elem_type));
    size_t n = (size_t)rows * (size_t)a->half;
    int64_t shape[2] = {rows, a->half};
    ropekit_status s;
    t->cos_name = rk_graph_unique_name(ix, "ropekit_cos_cache");
    t->sin_name = t->cos_name ? rk_graph_unique_name(ix, "ropekit_sin_cache") : NULL;
    Onnx__TensorProto *tc = t->sin_name ? rk_new_tensor(t->cos_name, elem_type, shape, 2, cos_buf, n * es) : NULL;
    free(cos_buf);
    if (!tc) {
        free(sin_buf);
        return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory for the cos table");
    }
    s = rk_graph_add_initializer(ix, tc);
    Onnx__TensorProto *ts = s == ROPEKIT_OK ? rk_new_tensor(t->sin_name, elem_type, shape, 2, sin_buf, n * es) : NULL;
    free(sin_buf);
    if (s != ROPEKIT_OK) return s;
    if (!ts) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory for the sin table");
    RK_TRY(rk_graph_add_initializer(ix, ts));
    *bytes += (int64_t)(2 * n * es);
    return ROPEKIT_OK;
}

/* ---- rewriting one site ----------------------------------------------------------------------- */

static ropekit_status add_int_initializer(rk_graph *ix, const char *base, const int64_t *v,
                                          size_t n, char **name) {
    *name = rk_graph_unique_name(ix, base);
    if (!*name) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
    int64_t dims[1] = {(int64_t)n};
    Onnx__TensorProto *t = rk_new_tensor(*name, RK_DT_INT64, dims, 1, v, n * sizeof *v);
    if (!t) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
    return rk_graph_add_initializer(ix, t);
}

/* A node with one new output named after `base` (unique), inserted as early as its inputs allow
 * (hint 0) or at `hint`; an optional int attribute. *out gets the output name (owned). */
static ropekit_status add_node(rk_graph *ix, const char *op, const char *const *ins, size_t nin,
                               const char *base, const char *attr, int64_t attr_v, int32_t hint,
                               char **out) {
    *out = rk_graph_unique_name(ix, base);
    if (!*out) return RK_OOM();
    Onnx__NodeProto *n = rk_new_node(op, "", *out, ins, nin, (const char *const *)out, 1);
    if (!n) return RK_OOM();
    if (attr) {
        ropekit_status st = rk_node_add_attr_int(n, attr, attr_v);
        if (st != ROPEKIT_OK) {
            rk_node_free(n);
            return st;
        }
    }
    return rk_graph_insert_node(ix, n, hint, NULL);
}

/* The graph's own cos/sin rows for the default mechanism, shared by the sites that read the
 * same terms: rows = Reshape(Slice(Cast<T>(term), first half | every other column), (-1, R/2)),
 * idx = Reshape(Range(0, rows, 1), term.shape[:-1]) — the identity position index, (B', S). */
static ropekit_status rows_half(rk_graph *ix, const rk_site *s, const char *term, const char *base,
                                const char *c_h, const char *c_0, const char *c_end,
                                const char *c_last, const char *c_2, const char *c_shape,
                                int second, const char *c_1, char **out) {
    char *cast = NULL, *sl = NULL, *neg = NULL;
    ropekit_status st = ROPEKIT_OK;
    rk_shape ts;
    rk_graph_shape(ix, term, &ts);
    int negate = s->sin_negated && term == s->sin_term; /* a rotation by -angle: -sin rows */
    const char *cur = term;
    if (ts.elem_type != s->elem_type) { /* unknown or another type: the fused op needs T */
        const char *in[1] = {term};
        st = add_node(ix, "Cast", in, 1, "ropekit_rows_cast", "to", s->elem_type, 0, &cast);
        cur = cast;
    }
    if (st == ROPEKIT_OK && negate) {
        const char *in[1] = {cur};
        st = add_node(ix, "Neg", in, 1, "ropekit_rows_neg", NULL, 0, 0, &neg);
        cur = neg;
    }
    if (st == ROPEKIT_OK && s->term_full) {
        /* the first half (every other column from 0), or for a sin held with its sign on the
         * second member of each pair (Concat(-sin, sin)), the second half (from 1) */
        const char *start = second ? (s->interleaved ? c_1 : c_h) : c_0;
        const char *in[5] = {cur, start, s->interleaved || second ? c_end : c_h, c_last, c_2};
        st = add_node(ix, "Slice", in, s->interleaved ? 5 : 4, "ropekit_rows_half", NULL, 0, 0, &sl);
        cur = sl;
    }
    if (st == ROPEKIT_OK) {
        const char *in[2] = {cur, c_shape};
        st = add_node(ix, "Reshape", in, 2, base, NULL, 0, 0, out);
    }
    free(cast), free(sl), free(neg);
    return st;
}

static ropekit_status add_int_initializer(rk_graph *ix, const char *base, const int64_t *v,
                                          size_t n, char **name);

/* A 1-element int64 initializer when `want`, else nothing (*name stays NULL): the rows' Slice
 * and Reshape get only the constants they read, so the fused model has no unused initializers
 * (onnxruntime warns about each one when it loads the model). */
static ropekit_status add_int_if(rk_graph *ix, int want, const char *base, int64_t v, char **name) {
    return want ? add_int_initializer(ix, base, &v, 1, name) : ROPEKIT_OK;
}

static ropekit_status add_rows(rk_graph *ix, const rk_site *s, rk_table *rw) {
    int64_t h = s->rotary_dim / 2, shape[2] = {-1, h};
    char *c_h = NULL, *c_0 = NULL, *c_end = NULL, *c_last = NULL, *c_2 = NULL, *c_shape = NULL;
    char *c_s1 = NULL;
    char *c_zero = NULL, *c_one = NULL, *shp = NULL, *n1 = NULL, *n0 = NULL, *rng = NULL;
    ropekit_status st;
    /* what rows_half's Slice reads: half-split pairs end (or, for sin held on the second member,
     * start) at h; adjacent pairs take every other column (step 2) to the end */
    int full = s->term_full, inter = s->interleaved, second = s->sin_second;
    if ((st = add_int_if(ix, full && !inter, "ropekit_rows_h", h, &c_h)) ||
        (st = add_int_if(ix, 1, "ropekit_rows_0", 0, &c_0)) ||
        (st = add_int_if(ix, full && (inter || second), "ropekit_rows_end", INT64_MAX, &c_end)) ||
        (st = add_int_if(ix, full, "ropekit_rows_axis", -1, &c_last)) ||
        (st = add_int_if(ix, full && inter, "ropekit_rows_step", 2, &c_2)) ||
        (st = add_int_initializer(ix, "ropekit_rows_shape", shape, 2, &c_shape)) ||
        (st = add_int_if(ix, full && inter && second, "ropekit_rows_start1", 1, &c_s1)))
        goto done;
    if ((st = rows_half(ix, s, s->cos_term, "ropekit_cos_rows", c_h, c_0, c_end, c_last, c_2,
                        c_shape, 0, NULL, &rw->cos_name)) ||
        (st = rows_half(ix, s, s->sin_term, "ropekit_sin_rows", c_h, c_0, c_end, c_last, c_2,
                        c_shape, s->sin_second, c_s1, &rw->sin_name)))
        goto done;
    {
        /* scalars for Range: 0-d initializers */
        char *z = rk_graph_unique_name(ix, "ropekit_rows_zero"), *o = rk_graph_unique_name(ix, "ropekit_rows_one");
        int64_t zero = 0, one = 1;
        Onnx__TensorProto *tz = z ? rk_new_tensor(z, RK_DT_INT64, NULL, 0, &zero, sizeof zero) : NULL;
        Onnx__TensorProto *to = o ? rk_new_tensor(o, RK_DT_INT64, NULL, 0, &one, sizeof one) : NULL;
        c_zero = z, c_one = o;
        if (!tz || !to) {
            if (tz) protobuf_c_message_free_unpacked(&tz->base, NULL);
            if (to) protobuf_c_message_free_unpacked(&to->base, NULL);
            st = RK_OOM();
            goto done;
        }
        if ((st = rk_graph_add_initializer(ix, tz)) != ROPEKIT_OK) {
            protobuf_c_message_free_unpacked(&to->base, NULL);
            goto done;
        }
        if ((st = rk_graph_add_initializer(ix, to)) != ROPEKIT_OK) goto done;
    }
    {
        /* n = rows of the table as a scalar; idx = Reshape(Range(0, n, 1), shape(term)[:-1]) */
        const char *a[1] = {rw->cos_name};
        const char *b[2];
        if ((st = add_node(ix, "Shape", a, 1, "ropekit_rows_shape_of", NULL, 0, 0, &shp))) goto done;
        /* Slice(shape, [0], [1]) -> [n]; Reshape([n], []) -> n */
        const char *sl[3] = {shp, c_0, NULL};
        char *one_vec = NULL;
        int64_t onev = 1;
        if ((st = add_int_initializer(ix, "ropekit_rows_1", &onev, 1, &one_vec))) goto done;
        sl[2] = one_vec;
        st = add_node(ix, "Slice", sl, 3, "ropekit_rows_n1", NULL, 0, 0, &n1);
        free(one_vec);
        if (st) goto done;
        char *scalar_shape = rk_graph_unique_name(ix, "ropekit_rows_scalar");
        int64_t d0[1] = {0};
        Onnx__TensorProto *ts = scalar_shape ? rk_new_tensor(scalar_shape, RK_DT_INT64, d0, 1, NULL, 0) : NULL;
        if (!ts) {
            free(scalar_shape);
            st = RK_OOM();
            goto done;
        }
        if ((st = rk_graph_add_initializer(ix, ts)) != ROPEKIT_OK) {
            free(scalar_shape);
            goto done;
        }
        b[0] = n1, b[1] = scalar_shape;
        st = add_node(ix, "Reshape", b, 2, "ropekit_rows_n", NULL, 0, 0, &n0);
        free(scalar_shape);
        if (st) goto done;
        const char *r3[3] = {c_zero, n0, c_one};
        if ((st = add_node(ix, "Range", r3, 3, "ropekit_rows_range", NULL, 0, 0, &rng))) goto done;
        rw->idx = rng; /* Range(0, rows, 1); each site reshapes it to its (B', S) */
        rng = NULL;
    }
done:
    free(c_h), free(c_0), free(c_end), free(c_last), free(c_2), free(c_shape), free(c_zero);
    free(c_s1), free(c_one), free(shp), free(n1), free(n0), free(rng);
    return st;
}

/* per site: the identity index for x's (B, S): Expand(Reshape(range, [-1, S]), (B, S)), with
 * B and S read from x (the rows are (B', S) with B' = 1 or B) */
static ropekit_status site_positions(rk_graph *ix, const rk_site *s, const char *range, char **pos) {
    int64_t seq = s->layout == RK_LAYOUT_BSNH ? 1 : 2, axes[2] = {0, seq}, m1 = -1;
    char *ax = NULL, *axs = NULL, *cm1 = NULL, *shp = NULL, *bs = NULL, *sq = NULL, *tgt = NULL,
         *idx = NULL;
    ropekit_status st;
    const char *a[1] = {s->x};
    if (!(st = add_int_initializer(ix, "ropekit_bs_axes", axes, 2, &ax)) &&
        !(st = add_int_initializer(ix, "ropekit_s_axis", &seq, 1, &axs)) &&
        !(st = add_int_initializer(ix, "ropekit_minus_one", &m1, 1, &cm1)) &&
        !(st = add_node(ix, "Shape", a, 1, "ropekit_x_shape", NULL, 0, 0, &shp))) {
        const char *g[2] = {shp, ax}, *g1[2] = {shp, axs};
        if (!(st = add_node(ix, "Gather", g, 2, "ropekit_x_bs", NULL, 0, 0, &bs)) &&
            !(st = add_node(ix, "Gather", g1, 2, "ropekit_x_s", NULL, 0, 0, &sq))) {
            const char *c[2] = {cm1, sq};
            if (!(st = add_node(ix, "Concat", c, 2, "ropekit_rows_bs", "axis", 0, 0, &tgt))) {
                const char *r[2] = {range, tgt};
                if (!(st = add_node(ix, "Reshape", r, 2, "ropekit_rows_index", NULL, 0, 0, &idx))) {
                    const char *e[2] = {idx, bs};
                    st = add_node(ix, "Expand", e, 2, "ropekit_position_index", NULL, 0, 0, pos);
                }
            }
        }
    }
    free(ax), free(axs), free(cm1), free(shp), free(bs), free(sq), free(tgt), free(idx);
    return st;
}

static ropekit_status rewrite_site(rk_graph *ix, rk_site *s, rk_table *t,
                                   ropekit_fuse_target target, int64_t *counter) {
    const rk_value *ov = rk_graph_value(ix, s->output);
    if (!ov || ov->producer < 0) return rk_fail(ROPEKIT_ERROR_PARSE, "site output '%s' vanished", s->output);
    int32_t hint = ov->producer;
    int mrope = s->angles.mrope;
    int onnx_op = target == ROPEKIT_FUSE_TARGET_ONNX && !mrope;
    char base[96];
    snprintf(base, sizeof base, "ropekit_rope_%lld", (long long)(*counter)++);
    char *node_name = rk_graph_unique_name(ix, base);
    char *out = rk_graph_unique_name(ix, s->output);
    char *y_pre = NULL;
    char *x_in = NULL, *x3 = NULL, *y3 = NULL, *shape_in = NULL, *shape_out = NULL, *pos_name = NULL;
    ropekit_status st = ROPEKIT_OK;
    const char *positions = s->angles.positions;
    if (s->angles.kind == RK_ANGLES_ROWS) {
        const rk_value *pv = t->pos ? rk_graph_value(ix, t->pos) : NULL;
        if (pv && pv->producer >= 0 && pv->producer < hint && t->pos_layout == s->layout) {
            positions = t->pos; /* the same tokens: the index is shared */
        } else {
            if ((st = site_positions(ix, s, t->idx, &pos_name)) != ROPEKIT_OK) goto done;
            positions = pos_name;
            if (!t->pos) {
                t->pos = rk_strdup(pos_name);
                t->pos_layout = s->layout;
                if (!t->pos) {
                    st = RK_OOM();
                    goto done;
                }
            }
        }
    }
    if (!node_name || !out) {
        st = rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    x_in = rk_strdup(s->x);
    if (!x_in) {
        st = rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    if (s->x_perm) {
        /* channels the graph reorders before rotating: the fused node reads x[..., perm] */
        char *perm = NULL, *gx = NULL;
        if ((st = add_int_initializer(ix, "ropekit_x_perm", s->x_perm, (size_t)s->head_size,
                                      &perm)) != ROPEKIT_OK)
            goto done;
        const char *gin[2] = {s->x, perm};
        st = add_node(ix, "Gather", gin, 2, "ropekit_x_permuted", "axis", 3, hint, &gx);
        free(perm);
        if (st != ROPEKIT_OK) {
            free(gx);
            goto done;
        }
        free(x_in);
        x_in = gx;
    }
    if (s->layout == RK_LAYOUT_BSNH) {
        /* (B, S, N, H) -> (B, S, N*H) for the fused op, and back */
        int64_t to3[3] = {0, 0, -1}, to4[4] = {0, 0, s->num_heads, s->head_size};
        if ((st = add_int_initializer(ix, "ropekit_shape_bsd", to3, 3, &shape_in)) != ROPEKIT_OK ||
            (st = add_int_initializer(ix, "ropekit_shape_bsnh", to4, 4, &shape_out)) != ROPEKIT_OK)
            goto done;
        x3 = rk_graph_unique_name(ix, "ropekit_x3");
        y3 = rk_graph_unique_name(ix, "ropekit_y3");
        if (!x3 || !y3) {
            st = rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
        const char *ins[2] = {x_in, shape_in};
        Onnx__NodeProto *r = rk_new_node("Reshape", "", x3, ins, 2, (const char *const *)&x3, 1);
        if (!r || (st = rk_graph_insert_node(ix, r, hint, NULL)) != ROPEKIT_OK) {
            if (!r) st = rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
        free(x_in);
        x_in = rk_strdup(x3);
    }
    {
        if (s->y_perm && !(y_pre = rk_graph_unique_name(ix, "ropekit_y_fused_order"))) {
            st = RK_OOM();
            goto done;
        }
        const char *out4 = s->y_perm ? y_pre : out; /* the fused node's 4D result */
        const char *rope_out = s->layout == RK_LAYOUT_BSNH ? y3 : out4;
        const char *ins[4];
        if (onnx_op) {
            ins[0] = x_in, ins[1] = t->cos_name, ins[2] = t->sin_name, ins[3] = positions;
        } else {
            ins[0] = x_in, ins[1] = positions, ins[2] = t->cos_name, ins[3] = t->sin_name;
        }
        int own = target == ROPEKIT_FUSE_TARGET_ROPEKIT; /* ai.ropekit: same inputs and attributes */
        const char *op = mrope ? "MRotaryEmbedding" : own ? "MsRotaryEmbedding" : "RotaryEmbedding";
        Onnx__NodeProto *n = rk_new_node(op, onnx_op ? "" : own ? "ai.ropekit" : "com.microsoft",
                                         node_name, ins, 4, &rope_out, 1);
        if (!n) {
            st = rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
        int partial = s->head_size < 0 || s->rotary_dim < s->head_size;
        if ((s->interleaved && (st = rk_node_add_attr_int(n, "interleaved", 1))) ||
            (s->num_heads > 0 && (st = rk_node_add_attr_int(n, "num_heads", s->num_heads))) ||
            (partial && (st = rk_node_add_attr_int(n, "rotary_embedding_dim", s->rotary_dim))) ||
            (mrope && (st = rk_node_add_attr_ints(n, "mrope_section", s->angles.mrope_section, 3))) ||
            (mrope && s->angles.mrope_layout &&
             (st = rk_node_add_attr_int(n, "mrope_layout", s->angles.mrope_layout)))) {
            rk_node_free(n);
            goto done;
        }
        if ((st = rk_graph_insert_node(ix, n, hint, NULL)) != ROPEKIT_OK) goto done;
    }
    if (s->layout == RK_LAYOUT_BSNH) {
        const char *o4 = s->y_perm ? y_pre : out;
        const char *ins[2] = {y3, shape_out};
        Onnx__NodeProto *r = rk_new_node("Reshape", "", o4, ins, 2, &o4, 1);
        if (!r || (st = rk_graph_insert_node(ix, r, hint, NULL)) != ROPEKIT_OK) {
            if (!r) st = rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
    }
    if (s->y_perm) {
        /* the graph's channel order of the result (a rotation on trailing channels):
         * out[..., c] = fused[..., y_perm[c]] */
        char *perm = NULL;
        if ((st = add_int_initializer(ix, "ropekit_y_perm", s->y_perm, (size_t)s->head_size,
                                      &perm)) != ROPEKIT_OK)
            goto done;
        const char *gin[2] = {y_pre, perm};
        Onnx__NodeProto *gn = rk_new_node("Gather", "", out, gin, 2, (const char *const *)&out, 1);
        free(perm);
        if (!gn || (st = rk_node_add_attr_int(gn, "axis", 3)) != ROPEKIT_OK) {
            if (gn) rk_node_free(gn);
            else st = RK_OOM();
            goto done;
        }
        if ((st = rk_graph_insert_node(ix, gn, hint, NULL)) != ROPEKIT_OK) goto done;
    }
    ov = rk_graph_value(ix, s->output);
    if (ov && (ov->flags & RK_VALUE_OUTPUT)) {
        /* a graph output keeps its name: the old producer gives it up, the fused node takes it */
        const rk_value *nv = rk_graph_value(ix, out);
        char *dead = rk_graph_unique_name(ix, "ropekit_replaced");
        if (!nv || nv->producer < 0 || !dead) {
            free(dead);
            st = rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
        Onnx__NodeProto *old = ix->g->node[ov->producer], *fresh = ix->g->node[nv->producer];
        char *keep = old->output[ov->producer_output];
        old->output[ov->producer_output] = dead;
        free(fresh->output[nv->producer_output]);
        fresh->output[nv->producer_output] = keep;
        if ((st = rk_graph_refresh(ix)) != ROPEKIT_OK) goto done;
        ov = rk_graph_value(ix, dead);
    } else if ((st = rk_graph_replace_uses(ix, s->output, out)) != ROPEKIT_OK) {
        goto done;
    } else {
        ov = rk_graph_value(ix, s->output);
    }
    if (ov && ov->producer >= 0) {
        int32_t pos = ov->producer;
        if ((st = rk_graph_remove_nodes(ix, &pos, 1, NULL)) != ROPEKIT_OK) goto done;
    }
    s->fused = 1;
    s->fused_node = node_name;
    node_name = NULL;
done:
    free(node_name), free(out), free(x_in), free(x3), free(y3), free(shape_in), free(shape_out);
    free(pos_name), free(y_pre);
    return st;
}

/* ---- the pass ------------------------------------------------------------------------------- */

static void warn(ropekit_fuse_report *r, const char *fmt, ...) {
    if (r->n_warnings >= 8) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->warnings[r->n_warnings++], sizeof r->warnings[0], fmt, ap);
    va_end(ap);
}

/* Every Cos/Sin of the main graph, with the sites its value reaches within a few nodes
 * (bounded breadth-first walk forward: a site's output is at most ~16 nodes from its Cos/Sin). */
#define TRIG_REACH 24
#define TRIG_VISIT 4096

static ropekit_status collect_trig(rk_graph *ix, ropekit_fuse_report *r) {
    Onnx__GraphProto *g = ix->g;
    size_t cap = 0;
    int32_t *queue = malloc(TRIG_VISIT * sizeof *queue), *level = malloc(TRIG_VISIT * sizeof *level);
    uint32_t *stamp = calloc(g->n_node ? g->n_node : 1, sizeof *stamp);
    ropekit_status st = ROPEKIT_OK;
    if (!queue || !level || !stamp) st = RK_OOM();
    uint32_t gen = 0;
    for (size_t i = 0; st == ROPEKIT_OK && i < g->n_node; ++i) {
        const Onnx__NodeProto *n = g->node[i];
        if ((n->domain && n->domain[0]) || n->n_output < 1 || !n->output[0][0] ||
            (strcmp(n->op_type, "Cos") != 0 && strcmp(n->op_type, "Sin") != 0))
            continue;
        if (r->n_unfused == cap) {
            size_t nc = cap ? 2 * cap : 8;
            rk_unfused *nu = realloc(r->unfused, nc * sizeof *nu);
            if (!nu) {
                st = RK_OOM();
                break;
            }
            r->unfused = nu, cap = nc;
        }
        rk_unfused *u = &r->unfused[r->n_unfused];
        memset(u, 0, sizeof *u);
        u->value = rk_strdup(n->output[0]);
        u->op = n->op_type[0] == 'C' ? "Cos" : "Sin";
        if (!u->value) {
            st = RK_OOM();
            break;
        }
        ++r->n_unfused;
        /* walk forward */
        ++gen;
        size_t head = 0, tail = 0;
        queue[tail] = (int32_t)i, level[tail++] = 0;
        stamp[i] = gen;
        while (head < tail && st == ROPEKIT_OK) {
            int32_t at = queue[head], lv = level[head++];
            const Onnx__NodeProto *m = g->node[at];
            if (strstr(m->op_type, "RotaryEmbedding")) u->feeds_rotary = 1;
            for (size_t k = 0; k < m->n_output; ++k) {
                const char *o = m->output[k];
                for (size_t si = 0; si < r->n_sites; ++si) {
                    if (strcmp(r->sites[si].output, o) != 0) continue;
                    int64_t *ns = realloc(u->sites, (u->n_sites + 1) * sizeof *ns);
                    if (!ns) {
                        st = RK_OOM();
                        break;
                    }
                    u->sites = ns;
                    u->sites[u->n_sites++] = (int64_t)si;
                }
                const rk_value *v = rk_graph_value(ix, o);
                if (!v || lv + 1 > TRIG_REACH) continue;
                for (uint32_t c = 0; c < v->n_consumers && tail < TRIG_VISIT; ++c) {
                    int32_t q = v->consumers[c];
                    if (stamp[q] == gen) continue;
                    stamp[q] = gen;
                    queue[tail] = q, level[tail++] = lv + 1;
                }
            }
        }
    }
    free(queue), free(level), free(stamp);
    return st;
}

/* After the rewrite (or, dry run, as it would be): which Cos/Sin stay, and why. */
static void account_trig(rk_graph *ix, ropekit_fuse_report *r) {
    size_t keep = 0;
    for (size_t i = 0; i < r->n_unfused; ++i) {
        rk_unfused *u = &r->unfused[i];
        const rk_value *v = rk_graph_value(ix, u->value);
        int present = v && v->producer >= 0;
        int all_done = u->n_sites > 0;
        const rk_site *skipped = NULL;
        for (size_t k = 0; k < u->n_sites; ++k) {
            const rk_site *s = &r->sites[u->sites[k]];
            int done = r->dry_run ? !s->reason[0] : s->fused;
            if (!done && !skipped) skipped = s;
            all_done &= done;
        }
        /* per-call rows: a Cos/Sin whose sites are all fused now feeds the fused nodes */
        int rows_fed = (all_done && !strcmp(r->mode, "per-call rows")) ||
                       (u->feeds_rotary && !skipped); /* already the input of a fused op */
        if (!present || rows_fed ||
            (r->dry_run && all_done && !(v->flags & RK_VALUE_OUTPUT) && v->n_consumers <= u->n_sites)) {
            free(u->value), free(u->sites);
            continue; /* gone with its sites */
        }
        if (skipped) {
            snprintf(u->reason, sizeof u->reason, "site %lld (x=%s) was not fused: %s",
                     (long long)(skipped - r->sites), skipped->x, skipped->reason);
        } else if (all_done) {
            const Onnx__NodeProto *c = v->n_consumers ? ix->g->node[v->consumers[0]] : NULL;
            snprintf(u->reason, sizeof u->reason, "its RoPE sites are fused, but it is still read by %s "
                     "'%s'", c ? c->op_type : "a graph output", c && c->n_output ? c->output[0] : u->value);
        } else {
            const Onnx__NodeProto *c = v->n_consumers ? ix->g->node[v->consumers[0]] : NULL;
            snprintf(u->reason, sizeof u->reason, "no RoPE site was recognized around it (first reader: "
                     "%s '%s'): not of the form x*cos + rot(x)*sin that ropekit matches",
                     c ? c->op_type : "a graph output", c && c->n_output ? c->output[0] : u->value);
        }
        r->unfused[keep++] = *u;
    }
    r->n_unfused = keep;
}

/* Every RoPE site, by what its subgraph computes (match_linear.c). */
static ropekit_status match_all(rk_graph *ix, ropekit_fuse_report *r) {
    size_t cap = 0;
    return rk_match_linear_all(ix, &r->sites, &r->n_sites, &cap);
}

static int64_t choose_max_positions(const ropekit_fuse_options *o,
                                    ropekit_fuse_report *r, ropekit_status *st) {
    *st = ROPEKIT_OK;
    if (o->max_positions > 0) {
        snprintf(r->max_positions_source, sizeof r->max_positions_source, "option");
        return o->max_positions;
    }
    if (o->config_path) {
        rk_hf_config cfg;
        if ((*st = rk_hf_config_read(o->config_path, &cfg)) != ROPEKIT_OK) return 0;
        char how[128];
        int64_t p = rk_hf_config_max_positions(&cfg, how, sizeof how);
        if (p > 0) {
            snprintf(r->max_positions_source, sizeof r->max_positions_source, "%s (%s)",
                     o->config_path, how);
            return p;
        }
        warn(r, "%s: %s", o->config_path, how);
    }
    snprintf(r->max_positions_source, sizeof r->max_positions_source, "default");
    warn(r, "table length %d is a default: pass --max-positions or a config.json, position ids "
         "past it are rejected by the fused op", ROPEKIT_FUSE_DEFAULT_MAX_POSITIONS);
    return ROPEKIT_FUSE_DEFAULT_MAX_POSITIONS;
}

/* The tables the fusion would build, before building (or verifying with) any: inline, past
 * 2 GiB they cannot be stored in an .onnx file, and computing them first would take minutes and
 * GBs. Saved with external data (external_min_bytes > 0), a table of at least that many bytes
 * goes to OUT.data and only the smaller ones count towards the 2 GiB; all of them must still fit
 * in memory while the model is built and written. */
static ropekit_status check_table_bytes(const ropekit_fuse_report *r, int64_t external_min_bytes) {
    double inline_per_row = 0, inline_fixed = 0, all_bytes = 0;
    for (size_t i = 0; i < r->n_sites; ++i) {
        const rk_site *s = &r->sites[i];
        if (s->reason[0] || !s->angles_ok || s->angles.kind == RK_ANGLES_ROWS) continue; /* no table */
        int seen = 0;
        for (size_t k = 0; k < i && !seen; ++k) {
            const rk_site *o = &r->sites[k];
            seen = !o->reason[0] && o->angles_ok && o->angles.kind != RK_ANGLES_ROWS &&
                   o->elem_type == s->elem_type && rk_angles_same(&o->angles, &s->angles);
        }
        if (seen) continue;
        /* two tables (cos, sin) of rows x half elements each */
        double row = (double)s->angles.half * (double)ropekit_dtype_size(to_rk_dtype(s->elem_type));
        double rows =
            s->angles.kind == RK_ANGLES_TABLE ? (double)s->angles.rows : (double)r->max_positions;
        all_bytes += 2.0 * row * rows;
        if (external_min_bytes > 0 && row * rows >= (double)external_min_bytes) continue;
        if (s->angles.kind == RK_ANGLES_TABLE)
            inline_fixed += 2.0 * row * rows;
        else
            inline_per_row += 2.0 * row;
    }
    const double gib = 1024.0 * 1024.0 * 1024.0;
    double total = inline_fixed + inline_per_row * (double)r->max_positions;
    if (total > (double)RK_MAX_MODEL_BYTES) {
        double fit =
            inline_per_row > 0 ? ((double)RK_MAX_MODEL_BYTES - inline_fixed) / inline_per_row : 0;
        return rk_fail(ROPEKIT_ERROR_OVERFLOW,
                       "a table length of %lld (%s) needs cos/sin tables of %.1f GiB, over the 2 "
                       "GiB an .onnx file can hold; use a table length of at most %lld "
                       "(--max-positions N), or write the tables to external data "
                       "(--external-data)",
                       (long long)r->max_positions, r->max_positions_source, total / gib,
                       (long long)(fit > 0 ? fit : 0));
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double memory = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (memory > 0 && all_bytes > memory)
        return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY,
                       "a table length of %lld (%s) needs cos/sin tables of %.1f GiB, more than "
                       "this machine's %.1f GiB of memory; use a smaller --max-positions N",
                       (long long)r->max_positions, r->max_positions_source, all_bytes / gib,
                       memory / gib);
    return ROPEKIT_OK;
}

ropekit_status ropekit_fuse(ropekit_model *model, const ropekit_fuse_options *options,
                            ropekit_fuse_report **report) {
    rk_clear_error();
    if (!model || !report) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "model and report are required");
    *report = NULL;
    ropekit_fuse_options defaults = ROPEKIT_FUSE_OPTIONS_INIT;
    const ropekit_fuse_options *o = options ? options : &defaults;
    if ((o->max_positions < 0 && o->max_positions != ROPEKIT_FUSE_TABLE_FROM_CONFIG) ||
        o->max_positions > ((int64_t)1 << 31))
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "max_positions = %lld is outside [1, 2^31] "
                       "(0: per-call rows, -1: a table sized from the config)",
                       (long long)o->max_positions);
    if (o->external_min_bytes < 0)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE,
                       "external_min_bytes = %lld is negative "
                       "(0: the model is saved inline)",
                       (long long)o->external_min_bytes);
    int fixed_table = o->max_positions != 0;
    Onnx__ModelProto *mp = model->proto;
    if (!mp->graph) return rk_fail(ROPEKIT_ERROR_PARSE, "the model has no graph");
    if (o->target == ROPEKIT_FUSE_TARGET_ONNX && rk_model_opset(mp, "") < 23)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "--target onnx needs a model that already "
                       "imports opset 23 or later (this one imports %lld); use the default "
                       "com.microsoft target", (long long)rk_model_opset(mp, ""));
    ropekit_fuse_report *r = calloc(1, sizeof *r);
    if (!r) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
    snprintf(r->target, sizeof r->target, o->target == ROPEKIT_FUSE_TARGET_ONNX      ? "onnx"
                                           : o->target == ROPEKIT_FUSE_TARGET_ROPEKIT ? "ropekit"
                                                                                      : "ort");
    r->dry_run = o->dry_run != 0;
    r->nodes_before = (int64_t)mp->graph->n_node;
    rk_graph *ix = NULL;
    ropekit_status st = rk_graph_open(model, NULL, &ix);
    const char *own_domain = o->target == ROPEKIT_FUSE_TARGET_ROPEKIT ? "ai.ropekit" : "com.microsoft";
    if (st == ROPEKIT_OK) st = rk_match_begin(ix);
    if (st == ROPEKIT_OK) /* DeepSeek-V4 attention first: it contains interleaved RoPE sites */
        st = rk_fuse_qknorm(ix, own_domain, r->dry_run, &r->attention_log, &r->attention_found,
                            &r->attention_fused);
    if (st == ROPEKIT_OK && r->attention_fused) {
        /* com.microsoft is imported in every target: with libropekit_ort registered, onnxruntime
         * needs the import for the contrib nodes its optimizer adds (src/ort/ropekit_ort.c) */
        st = rk_model_import_opset(mp, own_domain, 1);
        if (st == ROPEKIT_OK) st = rk_model_import_opset(mp, "com.microsoft", 1);
        if (st == ROPEKIT_OK)
            st = rk_model_set_metadata(mp, "ropekit.requires",
                                       "libropekit_ort (ropekit.ort_custom_ops_library())");
    }
    if (st == ROPEKIT_OK) st = rk_match_begin(ix);
    if (st == ROPEKIT_OK) st = match_all(ix, r);
    rk_match_end(); /* the memo must not outlive the graph as matched */
    if (st == ROPEKIT_OK) st = collect_trig(ix, r);
    snprintf(r->mode, sizeof r->mode, fixed_table ? "fixed table" : "per-call rows");
    for (size_t i = 0; st == ROPEKIT_OK && i < r->n_sites; ++i) {
        rk_site *s = &r->sites[i];
        if (s->reason[0] || !s->angles_ok) continue;
        if (fixed_table) {
            if (!s->angles.kind) /* the angle source is not a table ropekit can build */
                snprintf(s->reason, RK_REASON, "%s", s->angle_reason[0] ? s->angle_reason
                         : "the angle source is not recognized");
            continue;
        }
        /* the default: the graph's own rows, whatever computes them (kept: the probe positions) */
        if (!s->cos_term || !s->sin_term) {
            snprintf(s->reason, RK_REASON, "the cos/sin tensors of the site are not known");
            continue;
        }
        char *pos = s->angles.positions;
        s->probe_mrope = s->angles.mrope;
        if (s->angles.kind == RK_ANGLES_TABLE) s->probe_limit = s->angles.rows;
        s->angles.positions = NULL;
        rk_angles_free(&s->angles);
        s->angles.kind = RK_ANGLES_ROWS;
        s->angles.positions = pos;
        s->angles.half = s->rotary_dim / 2;
        s->angles.scale = 1.0f;
        if (rk_model_opset(mp, "") < 11)
            snprintf(s->reason, RK_REASON, "per-call rows need opset >= 11 (Range); this model "
                     "imports %lld: use --max-positions N", (long long)rk_model_opset(mp, ""));
    }
    int needs_length = 0; /* tables built from inv_freq need a length; graph tables have theirs */
    for (size_t i = 0; i < r->n_sites; ++i)
        needs_length |= r->sites[i].angles_ok && r->sites[i].angles.kind == RK_ANGLES_INV_FREQ;
    if (st == ROPEKIT_OK && needs_length) r->max_positions = choose_max_positions(o, r, &st);
    /* the head count is needed whenever the fused op gets a partial width or a 3D input */
    /* (checked below), then every site that passed is checked numerically */
    /* no shape information in the graph: the dims that do not follow its inputs' */
    const char **pnames = st == ROPEKIT_OK ? calloc(r->n_sites + 1, sizeof *pnames) : NULL;
    rk_shape *pshapes = pnames ? calloc(r->n_sites + 1, sizeof *pshapes) : NULL;
    size_t np = 0;
    if (st == ROPEKIT_OK && !pshapes) st = rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; pshapes && i < r->n_sites; ++i) {
        const rk_site *s = &r->sites[i];
        if (!s->reason[0] && s->angles_ok && (s->num_heads <= 0 || s->head_size <= 0))
            pnames[np++] = s->x;
    }
    if (np && !rk_probe_dims(ix, pnames, np, pshapes)) np = 0;
    for (size_t i = 0, k = 0; k < np && i < r->n_sites; ++i) {
        rk_site *s = &r->sites[i];
        if (s->reason[0] || !s->angles_ok || (s->num_heads > 0 && s->head_size > 0)) continue;
        const rk_shape *ps = &pshapes[k++];
        int hd = s->layout == RK_LAYOUT_BNSH ? 1 : 2;
        if (ps->rank != 4) continue;
        if (s->num_heads <= 0 && ps->dims[hd] > 0) s->num_heads = s->xdims[hd] = ps->dims[hd];
        if (s->head_size <= 0 && ps->dims[3] > 0) s->head_size = s->xdims[3] = ps->dims[3];
    }
    free(pnames), free(pshapes);
    for (size_t i = 0; st == ROPEKIT_OK && i < r->n_sites; ++i) {
        rk_site *s = &r->sites[i];
        if (s->reason[0] || !s->angles_ok) continue;
        int partial = s->head_size < 0 || s->rotary_dim < s->head_size;
        if ((partial || s->layout == RK_LAYOUT_BSNH) && s->num_heads <= 0)
            snprintf(s->reason, RK_REASON, "the number of heads of '%s' is unknown (no shape "
                     "information); the fused op needs it for a partial width", s->x);
        else if (s->layout == RK_LAYOUT_BSNH && s->head_size <= 0)
            snprintf(s->reason, RK_REASON, "the head size of '%s' is unknown", s->x);
    }
    if (st == ROPEKIT_OK) st = check_table_bytes(r, o->external_min_bytes);
    if (st == ROPEKIT_OK) rk_sites_verify(ix, r->sites, r->n_sites, r->max_positions);
    rk_table *tables = NULL;
    size_t n_tables = 0;
    int64_t counter = 0;
    if (st == ROPEKIT_OK && !r->dry_run) {
        tables = calloc(r->n_sites ? r->n_sites : 1, sizeof *tables);
        if (!tables) st = rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; st == ROPEKIT_OK && i < r->n_sites; ++i) {
            rk_site *s = &r->sites[i];
            if (s->reason[0] || !s->angles_ok) continue;
            rk_table *t = NULL;
            int rows = s->angles.kind == RK_ANGLES_ROWS;
            for (size_t k = 0; k < n_tables && !t; ++k) {
                const rk_site *f = tables[k].site;
                if (rows ? f && f->elem_type == s->elem_type && f->term_full == s->term_full &&
                               f->interleaved == s->interleaved && f->rotary_dim == s->rotary_dim &&
                               f->sin_second == s->sin_second &&
                               f->sin_negated == s->sin_negated &&
                               !strcmp(f->cos_term, s->cos_term) && !strcmp(f->sin_term, s->sin_term)
                         : !f && tables[k].elem_type == s->elem_type &&
                               rk_angles_same(tables[k].angles, &s->angles))
                    t = &tables[k];
            }
            if (!t && rows) {
                t = &tables[n_tables];
                t->site = s;
                t->elem_type = s->elem_type;
                if ((st = add_rows(ix, s, t)) != ROPEKIT_OK) break;
                ++n_tables;
            } else if (!t) {
                t = &tables[n_tables];
                t->angles = &s->angles;
                t->elem_type = s->elem_type;
                st = add_tables(ix, &s->angles, s->elem_type, r->max_positions, t, &r->table_bytes);
                if (st != ROPEKIT_OK) break;
                ++n_tables;
                r->tables += 2;
            }
            if (!s->angles.mrope && o->target == ROPEKIT_FUSE_TARGET_ONNX) {
                /* ai.onnx op: nothing to import */
            } else if ((o->target == ROPEKIT_FUSE_TARGET_ROPEKIT &&
                        (st = rk_model_import_opset(mp, "ai.ropekit", 1)) != ROPEKIT_OK) ||
                       (st = rk_model_import_opset(mp, "com.microsoft", 1)) != ROPEKIT_OK) {
                break;
            }
            st = rewrite_site(ix, s, t, o->target, &counter);
        }
    }
    for (size_t k = 0; k < n_tables; ++k)
        free(tables[k].cos_name), free(tables[k].sin_name), free(tables[k].idx), free(tables[k].pos);
    free(tables);
    if (st == ROPEKIT_OK) {
        account_trig(ix, r);
        int64_t fused = 0, fusable = 0;
        for (size_t i = 0; i < r->n_sites; ++i)
            fused += r->sites[i].fused, fusable += !r->sites[i].reason[0];
        if (r->n_sites && (r->dry_run ? fusable : fused) == 0)
            warn(r, "%zu RoPE sites found and none %s (exit status 3 from `ropekit fuse`)",
                 r->n_sites, r->dry_run ? "fusable" : "fused");
        else if (r->n_sites && (r->dry_run ? fusable : fused) < (int64_t)r->n_sites)
            warn(r, "%lld of %zu RoPE sites left unfused (reasons above)",
                 (long long)((int64_t)r->n_sites - (r->dry_run ? fusable : fused)), r->n_sites);
        if (r->n_unfused)
            warn(r, "%zu Cos/Sin value%s left unfused (listed with reasons)", r->n_unfused,
                 r->n_unfused == 1 ? "" : "s");
    }
    rk_graph_close(ix);
    r->nodes_after = (int64_t)mp->graph->n_node;
    if (st != ROPEKIT_OK) {
        ropekit_fuse_report_free(r);
        return st;
    }
    *report = r;
    return ROPEKIT_OK;
}

/* ---- reports ---------------------------------------------------------------------------------- */

int64_t ropekit_fuse_report_sites(const ropekit_fuse_report *r) { return r ? (int64_t)r->n_sites : 0; }

int64_t ropekit_fuse_report_fused(const ropekit_fuse_report *r) {
    int64_t n = 0;
    for (size_t i = 0; r && i < r->n_sites; ++i) n += r->sites[i].fused;
    return n;
}

static const char *angle_desc(const rk_site *s) {
    if (!s->angles_ok) return "?";
    if (s->angles.kind == RK_ANGLES_ROWS) return "the graph's own cos/sin rows";
    if (s->angles.kind == RK_ANGLES_TABLE) return "the graph's own table";
    return s->angles.scale != 1.0f ? "position_ids*inv_freq, scaled" : "position_ids*inv_freq";
}

ropekit_status ropekit_fuse_report_text(const ropekit_fuse_report *r, char **text) {
    rk_clear_error();
    if (!r || !text) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "report and text are required");
    rk_buf b = {0};
    for (size_t i = 0; i < r->n_sites; ++i) {
        const rk_site *s = &r->sites[i];
        rk_buf_printf(&b, "site %zu (layer %lld)  %-20s x=%s  R=%lld%s  %s  %s%s\n", i,
                  (long long)s->layer, s->variant, s->x, (long long)s->rotary_dim,
                  s->interleaved ? " interleaved" : "", angle_desc(s),
                  s->fused ? "fused" : (r->dry_run && !s->reason[0] ? "fusable" : "skipped: "),
                  s->fused || (r->dry_run && !s->reason[0]) ? "" : s->reason);
    }
    int64_t fused = ropekit_fuse_report_fused(r), fusable = 0;
    for (size_t i = 0; i < r->n_sites; ++i) fusable += !r->sites[i].reason[0];
    rk_buf_printf(&b, "%zu RoPE sites found, %lld %s, %lld skipped\n", r->n_sites,
              (long long)(r->dry_run ? fusable : fused), r->dry_run ? "fusable (dry run)" : "fused",
              (long long)((int64_t)r->n_sites - fusable));
    rk_buf_printf(&b, "nodes %lld -> %lld; tables %lld (%lld bytes)", (long long)r->nodes_before,
              (long long)r->nodes_after, (long long)r->tables, (long long)r->table_bytes);
    if (r->max_positions > 0)
        rk_buf_printf(&b, ", %lld rows (%s)", (long long)r->max_positions, r->max_positions_source);
    rk_buf_printf(&b, "; %s; target %s\n", r->mode, r->target);
    for (size_t i = 0; i < r->n_unfused; ++i) {
        rk_buf_printf(&b, "unfused %s '", r->unfused[i].op);
        rk_buf_text_str(&b, r->unfused[i].value);
        rk_buf_printf(&b, "': ");
        rk_buf_text_str(&b, r->unfused[i].reason);
        rk_buf_printf(&b, "\n");
    }
    if (r->attention_log.p) rk_buf_printf(&b, "%s", r->attention_log.p);
    if (r->attention_fused || (!strcmp(r->target, "ropekit") && ropekit_fuse_report_fused(r)))
        rk_buf_printf(&b, "the fused model needs libropekit_ort: register "
                      "ropekit.ort_custom_ops_library() with onnxruntime\n");
    if (b.oom) {
        free(b.p);
        return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    *text = b.p;
    return ROPEKIT_OK;
}

ropekit_status ropekit_fuse_report_json(const ropekit_fuse_report *r, char **json) {
    rk_clear_error();
    if (!r || !json) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "report and json are required");
    rk_buf b = {0};
    rk_buf_printf(&b, "{\n  \"target\": \"%s\",\n  \"dry_run\": %s,\n  \"nodes_before\": %lld,\n"
              "  \"nodes_after\": %lld,\n  \"tables\": %lld,\n  \"table_bytes\": %lld,\n"
              "  \"mode\": \"%s\",\n  \"max_positions\": %lld,\n  \"max_positions_source\": ",
              r->target, r->dry_run ? "true" : "false", (long long)r->nodes_before,
              (long long)r->nodes_after, (long long)r->tables, (long long)r->table_bytes,
              r->mode, (long long)r->max_positions);
    rk_buf_json_str(&b, r->max_positions_source);
    rk_buf_printf(&b, ",\n  \"sites_found\": %zu,\n  \"sites_fused\": %lld,\n  \"warnings\": [",
              r->n_sites, (long long)ropekit_fuse_report_fused(r));
    /* (attention_* and requires are printed before "sites" below) */
    for (int i = 0; i < r->n_warnings; ++i) {
        rk_buf_printf(&b, i ? ", " : "");
        rk_buf_json_str(&b, r->warnings[i]);
    }
    rk_buf_printf(&b, "],\n  \"unfused\": [");
    for (size_t i = 0; i < r->n_unfused; ++i) {
        rk_buf_printf(&b, "%s\n    {\"op\": \"%s\", \"value\": ", i ? "," : "", r->unfused[i].op);
        rk_buf_json_str(&b, r->unfused[i].value);
        rk_buf_printf(&b, ", \"reason\": ");
        rk_buf_json_str(&b, r->unfused[i].reason);
        rk_buf_printf(&b, "}");
    }
    rk_buf_printf(&b, "%s]", r->n_unfused ? "\n  " : "");
    rk_buf_printf(&b, ",\n  \"attention_sites_found\": %lld,\n  \"attention_sites_fused\": %lld,"
              "\n  \"requires\": %s", (long long)r->attention_found, (long long)r->attention_fused,
              r->attention_fused || (!strcmp(r->target, "ropekit") && ropekit_fuse_report_fused(r))
                  ? "\"libropekit_ort\"" : "null");
    rk_buf_printf(&b, ",\n  \"sites\": [");
    for (size_t i = 0; i < r->n_sites; ++i) {
        const rk_site *s = &r->sites[i];
        rk_buf_printf(&b, "%s\n    {\"index\": %zu, \"layer\": %lld, \"variant\": \"%s\", \"x\": ",
                  i ? "," : "", i, (long long)s->layer, s->variant);
        rk_buf_json_str(&b, s->x);
        rk_buf_printf(&b, ", \"output\": ");
        rk_buf_json_str(&b, s->output);
        rk_buf_printf(&b, ", \"rotary_dim\": %lld, \"head_size\": %lld, \"num_heads\": %lld, "
                  "\"interleaved\": %d, \"layout\": \"%s\", \"angles\": \"%s\", \"scale\": %.9g, "
                  "\"dtype\": \"%s\", \"status\": \"%s\", \"reason\": ",
                  (long long)s->rotary_dim, (long long)s->head_size, (long long)s->num_heads,
                  s->interleaved, s->layout == RK_LAYOUT_BSNH ? "BSNH" : "BNSH", angle_desc(s),
                  (double)(s->angles_ok ? s->angles.scale : 1.0f),
                  s->elem_type ? rk_dtype_name(s->elem_type) : "?",
                  s->fused ? "fused" : (s->reason[0] ? "skipped" : (r->dry_run ? "fusable" : "skipped")));
        if (s->reason[0])
            rk_buf_json_str(&b, s->reason);
        else
            rk_buf_printf(&b, "null");
        if (s->angles_ok && s->angles.mrope)
            rk_buf_printf(&b, ", \"mrope_section\": [%lld, %lld, %lld], \"mrope_layout\": %d",
                      (long long)s->angles.mrope_section[0], (long long)s->angles.mrope_section[1],
                      (long long)s->angles.mrope_section[2], s->angles.mrope_layout);
        rk_buf_printf(&b, ", \"fused_node\": ");
        if (s->fused_node)
            rk_buf_json_str(&b, s->fused_node);
        else
            rk_buf_printf(&b, "null");
        rk_buf_printf(&b, "}");
    }
    rk_buf_printf(&b, "\n  ]\n}\n");
    if (b.oom) {
        free(b.p);
        return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    *json = b.p;
    return ROPEKIT_OK;
}

int64_t ropekit_fuse_report_warning_count(const ropekit_fuse_report *r) {
    return r ? r->n_warnings : 0;
}

const char *ropekit_fuse_report_warning(const ropekit_fuse_report *r, int64_t i) {
    return r && i >= 0 && i < r->n_warnings ? r->warnings[i] : NULL;
}

int64_t ropekit_fuse_report_unfused_trig(const ropekit_fuse_report *r) {
    return r ? (int64_t)r->n_unfused : 0;
}

int ropekit_fuse_exit_status(const ropekit_fuse_report *r) {
    if (!r || !r->n_sites) return 0;
    int64_t done = 0;
    for (size_t i = 0; i < r->n_sites; ++i)
        done += r->dry_run ? !r->sites[i].reason[0] : r->sites[i].fused;
    return done ? 0 : 3;
}

void ropekit_fuse_report_free(ropekit_fuse_report *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_unfused; ++i) free(r->unfused[i].value), free(r->unfused[i].sites);
    free(r->unfused);
    for (size_t i = 0; i < r->n_sites; ++i) rk_site_free(&r->sites[i]);
    free(r->sites);
    free(r->attention_log.p);
    free(r);
}
