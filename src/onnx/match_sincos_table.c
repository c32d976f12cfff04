/* GPT-J's angle source for the fixed-table mode: sin, cos = Split(G) with G one of
 *            GatherND(table, Unsqueeze(position_ids, -1)) | Gather(table, position_ids)
 *            | [Cast<float>] GatherElements(Tile(Expand(table, ones(3)), [B, 1, 1]),
 *                                           Tile(Expand(Unsqueeze(position_ids, -1), ones(3)),
 *                                                [1, 1, W = table width]), axis 1)
 *              (TorchScript, 4.x: torch.gather of the batch-repeated table by repeated ids)
 * The table is a constant of the graph (GPT-J's embed_positions: [sin | cos] per position); the
 * fixed table is its rows as they are. (The sites themselves are found by match_linear.c.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_internal.h"

static int unsqueeze_last(const rk_graph *ix, const Onnx__NodeProto *u, int rank) {
    int64_t axes[2];
    size_t n;
    return u && !strcmp(u->op_type, "Unsqueeze") && rk_eval_i64(ix, rk_input(u, 1), axes, 2, &n) &&
           n == 1 && (axes[0] == -1 || axes[0] == rank);
}

/* A vector of n ones: a constant, or ConstantOfShape(value 1) of an evaluable length n. */
static int ones_vector(const rk_graph *ix, const char *v, size_t want) {
    int64_t vals[8], len;
    size_t nv;
    if (rk_eval_i64(ix, v, vals, 8, &nv)) {
        if (nv != want) return 0;
        for (size_t i = 0; i < nv; ++i)
            if (vals[i] != 1) return 0;
        return 1;
    }
    Onnx__NodeProto *cs = rk_producer_op(ix, v, "ConstantOfShape");
    const Onnx__AttributeProto *val = cs ? rk_node_attr(cs, "value") : NULL;
    if (!val || !val->t || !rk_eval_i64_scalar(ix, rk_input(cs, 0), &len) || len != (int64_t)want ||
        rk_tensor_read_i64(ix->model, val->t, vals, 8, &nv) != ROPEKIT_OK || nv != 1 ||
        vals[0] != 1)
        return 0;
    return 1;
}

/* The elements of a repeats/shape vector: evaluated one Concat piece (or the whole) at a time;
 * pieces that do not evaluate are -2 (one element each). n elements, 0 on anything else. */
static int vector_elems(const rk_graph *ix, const char *v, int64_t *out, size_t cap, size_t *n) {
    if (rk_eval_i64(ix, v, out, cap, n)) return 1;
    Onnx__NodeProto *cat = rk_producer_op(ix, v, "Concat");
    if (!cat || cat->n_input > cap) return 0;
    size_t k = 0;
    for (size_t i = 0; i < cat->n_input; ++i) {
        int64_t part[8];
        size_t np;
        if (rk_eval_i64(ix, rk_input(cat, i), part, 8, &np)) {
            if (k + np > cap) return 0;
            memcpy(out + k, part, np * sizeof *part);
            k += np;
        } else {
            rk_shape ps;
            rk_value_rank(ix, rk_input(cat, i), &ps);
            if (ps.rank != 1 || ps.dims[0] != 1 || k + 1 > cap) return 0;
            out[k++] = -2;
        }
    }
    *n = k;
    return 1;
}

/* torch.gather(table.repeat(B, 1, 1), 1, position_ids.unsqueeze(-1).repeat(1, 1, W)) as the
 * TorchScript exporter writes it (see the top of the file): fills the table and the ids. */
static int gather_elements_source(const rk_graph *ix, const Onnx__NodeProto *ge, const char **table,
                                  const char **pos) {
    if (rk_attr_i(ge, "axis", 0) != 1) return 0;
    Onnx__NodeProto *td = rk_producer_op(ix, rk_input(ge, 0), "Tile");
    Onnx__NodeProto *ti = rk_producer_op(ix, rk_input(ge, 1), "Tile");
    Onnx__NodeProto *ed = td ? rk_producer_op(ix, rk_input(td, 0), "Expand") : NULL;
    Onnx__NodeProto *ei = ti ? rk_producer_op(ix, rk_input(ti, 0), "Expand") : NULL;
    if (!ed || !ei || !ones_vector(ix, rk_input(ed, 1), 3) || !ones_vector(ix, rk_input(ei, 1), 3))
        return 0;
    rk_shape ts;
    rk_graph_shape(ix, rk_input(ed, 0), &ts);
    if (ts.rank != 2 || ts.dims[1] <= 0) return 0;
    /* data: the table with a leading batch dim, repeated over it only */
    int64_t r[4];
    size_t nr;
    if (!vector_elems(ix, rk_input(td, 1), r, 4, &nr) || nr != 3 || r[1] != 1 || r[2] != 1)
        return 0;
    /* ids: (B, S, 1) repeated over the last axis to the table's width */
    Onnx__NodeProto *u = rk_producer_op(ix, rk_input(ei, 0), "Unsqueeze");
    if (!u || !unsqueeze_last(ix, u, 2)) return 0;
    if (!vector_elems(ix, rk_input(ti, 1), r, 4, &nr) || nr != 3 || r[0] != 1 || r[1] != 1)
        return 0;
    if (r[2] != ts.dims[1]) {
        /* W = Gather(Shape(data), 2 | -1) */
        Onnx__NodeProto *cat = rk_producer_op(ix, rk_input(ti, 1), "Concat");
        Onnx__NodeProto *uw =
            cat && cat->n_input == 3 ? rk_producer_op(ix, rk_input(cat, 2), "Unsqueeze") : NULL;
        Onnx__NodeProto *gw = uw ? rk_producer_op(ix, rk_input(uw, 0), "Gather") : NULL;
        Onnx__NodeProto *sw = gw ? rk_producer_op(ix, rk_input(gw, 0), "Shape") : NULL;
        int64_t k;
        if (r[2] != -2 || !sw || rk_attr_i(gw, "axis", 0) != 0 || rk_attr_i(sw, "start", 0) != 0 ||
            rk_node_attr(sw, "end") || !rk_eval_i64_scalar(ix, rk_input(gw, 1), &k) ||
            (k != 2 && k != -1) || !rk_input(sw, 0) || strcmp(sw->input[0], td->output[0]))
            return 0;
    }
    *table = rk_input(ed, 0);
    *pos = rk_input(u, 0);
    return 1;
}

/* sin = Split(G)[0], cos = Split(G)[1], G = GatherND(table, Unsqueeze(pos, -1)) | Gather(table,
 * pos) | [Cast] GatherElements(...): fills the angle source from the table. */
int rk_match_sincos_table(const rk_graph *ix, const char *cos_v, const char *sin_v, rk_angles *a,
                          char *reason, size_t n) {
    Onnx__NodeProto *sp = rk_graph_producer(ix, cos_v);
    if (!sp || strcmp(sp->op_type, "Split") || sp->n_output != 2 ||
        rk_graph_producer(ix, sin_v) != sp || strcmp(sp->output[0], sin_v) ||
        strcmp(sp->output[1], cos_v)) {
        snprintf(reason, n, "GPT-J sin/cos are not the two halves of one Split");
        return 0;
    }
    int64_t axis = rk_attr_i(sp, "axis", 0);
    if (axis != -1 && axis != 2) {
        snprintf(reason, n, "GPT-J sin/cos Split is not along the last axis");
        return 0;
    }
    int64_t sizes[3];
    size_t nsz = 0;
    if (rk_input(sp, 1) &&
        (!rk_eval_i64(ix, rk_input(sp, 1), sizes, 3, &nsz) || nsz != 2 || sizes[0] != sizes[1])) {
        snprintf(reason, n, "GPT-J sin/cos Split is not into two equal halves");
        return 0;
    }
    const char *g = rk_input(sp, 0), *table = NULL, *pos = NULL;
    Onnx__NodeProto *gn = rk_producer_op(ix, g, "GatherND");
    Onnx__NodeProto *gt = rk_producer_op(ix, g, "Gather");
    int32_t cast_to = 0;
    Onnx__NodeProto *ge = rk_producer_op(ix, rk_skip_casts(ix, g, &cast_to), "GatherElements");
    if (gn && rk_attr_i(gn, "batch_dims", 0) == 0) {
        Onnx__NodeProto *u = rk_producer_op(ix, rk_input(gn, 1), "Unsqueeze");
        if (u && unsqueeze_last(ix, u, 2)) table = rk_input(gn, 0), pos = rk_input(u, 0);
    } else if (gt && rk_attr_i(gt, "axis", 0) == 0) {
        table = rk_input(gt, 0), pos = rk_input(gt, 1);
    } else if (ge && (cast_to == 0 || cast_to == RK_DT_FLOAT || cast_to == RK_DT_FLOAT16 ||
                      cast_to == RK_DT_BFLOAT16 || cast_to == RK_DT_DOUBLE)) {
        gather_elements_source(ix, ge, &table, &pos);
    }
    if (!table || !pos) {
        snprintf(reason, n, "GPT-J sincos '%s' is not a table gathered by position ids", g);
        return 0;
    }
    rk_shape ts, ps;
    rk_graph_shape(ix, table, &ts);
    rk_graph_shape(ix, pos, &ps);
    if (ps.elem_type && ps.elem_type != RK_DT_INT64) {
        snprintf(reason, n, "position ids '%s' are not int64", pos);
        return 0;
    }
    if (ts.rank != 2 || ts.dims[0] <= 0 || ts.dims[1] <= 0 || ts.dims[1] % 2 ||
        ts.dims[1] > (1 << 30) || ts.dims[0] > ((int64_t)1 << 24)) {
        snprintf(reason, n, "the sinusoid table '%s' is not a constant (positions, 2h) tensor",
                 table);
        return 0;
    }
    int64_t rows = ts.dims[0], w = ts.dims[1], h = w / 2;
    if (nsz == 2 && sizes[0] != h) {
        snprintf(reason, n, "GPT-J sin/cos Split sizes do not halve the table '%s'", table);
        return 0;
    }
    double *buf = malloc((size_t)(rows * w) * sizeof *buf);
    size_t count;
    a->cos_rows = malloc((size_t)(rows * h) * sizeof(float));
    a->sin_rows = malloc((size_t)(rows * h) * sizeof(float));
    a->positions = rk_strdup(pos);
    if (!buf || !a->cos_rows || !a->sin_rows || !a->positions ||
        rk_graph_const_f64(ix, table, buf, (size_t)(rows * w), &count) != ROPEKIT_OK ||
        count != (size_t)(rows * w)) {
        free(buf);
        snprintf(reason, n, "the sinusoid table '%s' is not a constant of the graph", table);
        return 0;
    }
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < h; ++k) {
            a->sin_rows[r * h + k] = (float)buf[r * w + k];
            a->cos_rows[r * h + k] = (float)buf[r * w + h + k];
        }
    free(buf);
    a->kind = RK_ANGLES_TABLE;
    a->rows = rows;
    a->half = h;
    a->scale = 1.0f;
    return 1;
}
