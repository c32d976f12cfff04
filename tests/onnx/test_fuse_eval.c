/* The fusion's analysis helpers on a committed fixture (tests/fixtures/models/llama.onnx):
 * memoized shape inference agrees with the unmemoized one, the numeric evaluator reproduces
 * cos(position * inv_freq) computed here independently, refuses unknown ops with a reason, and
 * the site verifier accepts the true site and refuses one whose table is tampered with.
 * Usage: test_fuse_eval REPO_ROOT */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "fuse_internal.h"

static const Onnx__NodeProto *first_op(const rk_graph *ix, const char *op) {
    for (size_t i = 0; i < ix->g->n_node; ++i)
        if (!strcmp(ix->g->node[i]->op_type, op)) return ix->g->node[i];
    return NULL;
}

static void push(void ***arr, size_t *n, void *item) {
    *arr = realloc(*arr, (*n + 1) * sizeof **arr);
    (*arr)[(*n)++] = item;
}

static void add_i64(Onnx__GraphProto *g, const char *name, const int64_t *v, int64_t n) {
    push((void ***)&g->initializer, &g->n_initializer,
         rk_new_tensor(name, RK_DT_INT64, &n, 1, v, (size_t)n * sizeof *v));
}

/* Transpose, Slice (negative and positive steps), GatherND and ScatterND (negative and
 * out-of-range indices) of x = 0..23 (2, 3, 4), against element lists written out here. */
static void test_view_and_index_ops(void) {
    Onnx__ModelProto *mp = malloc(sizeof *mp);
    onnx__model_proto__init(mp);
    mp->has_ir_version = 1, mp->ir_version = 9;
    Onnx__OperatorSetIdProto *op = malloc(sizeof *op);
    onnx__operator_set_id_proto__init(op);
    op->domain = rk_strdup(""), op->has_version = 1, op->version = 18;
    push((void ***)&mp->opset_import, &mp->n_opset_import, op);
    Onnx__GraphProto *g = mp->graph = malloc(sizeof *g);
    onnx__graph_proto__init(g);
    g->name = rk_strdup("g");
    Onnx__ValueInfoProto *vx = malloc(sizeof *vx);
    onnx__value_info_proto__init(vx);
    vx->name = rk_strdup("x");
    push((void ***)&g->input, &g->n_input, vx);
    const char *x = "x", *tin[5] = {"x", "starts", "ends", "axes", "steps"};
    const char *outs[5] = {"t", "s", "gnd", "snd", "bad"}, *gin[2] = {"x", "nd_idx"};
    const char *sin_[3] = {"x", "sc_idx", "upd"}, *bin[2] = {"x", "bad_idx"};
    Onnx__NodeProto *tr = rk_new_node("Transpose", NULL, "t", &x, 1, &outs[0], 1);
    rk_node_add_attr_ints(tr, "perm", (const int64_t[]){2, 0, 1}, 3);
    push((void ***)&g->node, &g->n_node, tr);
    push((void ***)&g->node, &g->n_node, rk_new_node("Slice", NULL, "s", tin, 5, &outs[1], 1));
    push((void ***)&g->node, &g->n_node, rk_new_node("GatherND", NULL, "gnd", gin, 2, &outs[2], 1));
    push((void ***)&g->node, &g->n_node,
         rk_new_node("ScatterND", NULL, "snd", sin_, 3, &outs[3], 1));
    push((void ***)&g->node, &g->n_node, rk_new_node("GatherND", NULL, "bad", bin, 2, &outs[4], 1));
    int64_t d22[2] = {2, 2}, d12[2] = {1, 2}, d14[2] = {1, 4};
    const int64_t nd_idx[4] = {1, -1, 0, 0}, sc_idx[2] = {0, 1}, bad_idx[2] = {0, 3};
    const float upd[4] = {-1, -2, -3, -4};
    push((void ***)&g->initializer, &g->n_initializer,
         rk_new_tensor("nd_idx", RK_DT_INT64, d22, 2, nd_idx, sizeof nd_idx));
    push((void ***)&g->initializer, &g->n_initializer,
         rk_new_tensor("sc_idx", RK_DT_INT64, d12, 2, sc_idx, sizeof sc_idx));
    push((void ***)&g->initializer, &g->n_initializer,
         rk_new_tensor("upd", RK_DT_FLOAT, d14, 2, upd, sizeof upd));
    push((void ***)&g->initializer, &g->n_initializer,
         rk_new_tensor("bad_idx", RK_DT_INT64, d12, 2, bad_idx, sizeof bad_idx));
    add_i64(g, "starts", (const int64_t[]){-1, 1}, 2); /* axis 2 from the end, axis 1 from 1 */
    add_i64(g, "ends", (const int64_t[]){INT64_MIN, 3}, 2);
    add_i64(g, "axes", (const int64_t[]){2, 1}, 2);
    add_i64(g, "steps", (const int64_t[]){-2, 1}, 2);
    for (int i = 0; i < 5; ++i) {
        Onnx__ValueInfoProto *v = malloc(sizeof *v);
        onnx__value_info_proto__init(v);
        v->name = rk_strdup(outs[i]);
        push((void ***)&g->output, &g->n_output, v);
    }
    size_t n = onnx__model_proto__get_packed_size(mp);
    uint8_t *buf = malloc(n);
    onnx__model_proto__pack(mp, buf);
    protobuf_c_message_free_unpacked(&mp->base, NULL);
    ropekit_model *m = NULL;
    rk_graph *ix = NULL;
    CHECK(ropekit_model_load_from_memory(buf, n, NULL, &m) == ROPEKIT_OK &&
              rk_graph_open(m, NULL, &ix) == ROPEKIT_OK,
          "Transpose/Slice model loads: %s", ropekit_last_error());
    free(buf);
    if (!ix) {
        ropekit_model_free(m);
        return;
    }
    rk_eval *e = rk_eval_new(ix, 1 << 10, 1 << 12);
    double xv[24];
    for (int i = 0; i < 24; ++i)
        xv[i] = i;
    CHECK(rk_eval_bind(e, "x", RK_DT_FLOAT, 3, (const int64_t[]){2, 3, 4}, xv), "bind x");
    /* t[c][a][b] = x[a][b][c] */
    const double tw[24] = {0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21,
                           2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23};
    /* s[a][b][k] = x[a][1 + b][3 - 2k] */
    const double sw[8] = {7, 5, 11, 9, 19, 17, 23, 21};
    const rk_ten *t = rk_eval_get(e, "t");
    CHECK(t && t->rank == 3 && t->dims[0] == 4 && t->dims[1] == 2 && t->dims[2] == 3 &&
              !memcmp(t->v, tw, sizeof tw),
          "Transpose perm (2, 0, 1) (%s)", t ? "values" : rk_eval_error(e));
    const rk_ten *sl = rk_eval_get(e, "s");
    CHECK(sl && sl->rank == 3 && sl->dims[0] == 2 && sl->dims[1] == 2 && sl->dims[2] == 2 &&
              !memcmp(sl->v, sw, sizeof sw),
          "Slice with steps (-2, 1) (%s)", sl ? "values" : rk_eval_error(e));
    /* gnd = (x[1][2][:], x[0][0][:]) */
    const double gw[8] = {20, 21, 22, 23, 0, 1, 2, 3};
    const rk_ten *gn = rk_eval_get(e, "gnd");
    CHECK(gn && gn->rank == 2 && gn->dims[0] == 2 && gn->dims[1] == 4 &&
              !memcmp(gn->v, gw, sizeof gw),
          "GatherND with a negative index (%s)", gn ? "values" : rk_eval_error(e));
    /* snd = x with x[0][1][:] = upd */
    double snw[24];
    memcpy(snw, xv, sizeof snw);
    snw[4] = -1, snw[5] = -2, snw[6] = -3, snw[7] = -4;
    const rk_ten *sn = rk_eval_get(e, "snd");
    CHECK(sn && sn->rank == 3 && sn->n == 24 && !memcmp(sn->v, snw, sizeof snw), "ScatterND (%s)",
          sn ? "values" : rk_eval_error(e));
    CHECK(!rk_eval_get(e, "bad") && strstr(rk_eval_error(e), "GatherND index out of range"),
          "GatherND index 3 on a dim of 3 refused (%s)", rk_eval_error(e));
    rk_eval_free(e);
    rk_graph_close(ix);
    ropekit_model_free(m);
}

int main(int argc, char **argv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/models/llama.onnx", argc > 1 ? argv[1] : ".");
    ropekit_model *m = NULL;
    if (ropekit_model_load(path, &m) != ROPEKIT_OK) {
        printf("FAIL cannot load %s: %s\n", path, ropekit_last_error());
        return 1;
    }
    rk_graph *ix = NULL;
    CHECK(rk_graph_open(m, NULL, &ix) == ROPEKIT_OK, "graph index");

    /* memoized and plain shape inference agree on every value */
    size_t n = ix->n_values, differ = 0;
    rk_shape *plain = calloc(n, sizeof *plain);
    for (size_t i = 0; i < n; ++i)
        rk_value_rank(ix, ix->values[i].name, &plain[i]);
    CHECK(rk_match_begin(ix) == ROPEKIT_OK, "memo");
    for (size_t i = 0; i < n; ++i) {
        rk_shape s;
        rk_value_rank(ix, ix->values[i].name, &s);
        /* the memo may know more (no depth cap), never something else */
        if (plain[i].rank >= 0 && (s.rank != plain[i].rank ||
                                   memcmp(s.dims, plain[i].dims, (size_t)s.rank * sizeof *s.dims)))
            ++differ;
    }
    CHECK(differ == 0, "%zu values with a different shape under the memo", differ);
    rk_site site;
    int matched = 0; /* the first site (the first Add that is a candidate) */
    for (size_t i = 0; i < ix->g->n_node && !matched; ++i)
        if (!strcmp(ix->g->node[i]->op_type, "Add"))
            matched = rk_match_linear_at(ix, ix->g->node[i], &site);
    rk_match_end();
    free(plain);
    CHECK(matched && !site.reason[0] && site.cos_term && site.angles.kind == RK_ANGLES_INV_FREQ,
          "rotate_half site matched (%s)", matched ? site.reason : "no match");

    /* the evaluator: cos rows for given positions, against cos(float(p) * inv_freq) here */
    rk_eval *e = rk_eval_new(ix, 1 << 20, 1 << 22);
    CHECK(e != NULL, "evaluator");
    int64_t pd[2] = {2, 3};
    double pos[6] = {0, 1, 7, 100, 2047, 33};
    CHECK(rk_eval_bind(e, site.angles.positions, RK_DT_INT64, 2, pd, pos), "bind positions");
    rk_eval_set_dim(e, "batch", 2);
    rk_eval_set_dim(e, "sequence", 3);
    const rk_ten *c = rk_eval_get(e, site.cos_term);
    CHECK(c && c->rank == 3 && c->dims[0] == 2 && c->dims[1] == 3 && c->dims[2] == site.rotary_dim,
          "cos term (%s)", c ? "shape" : rk_eval_error(e));
    double worst = 0;
    int64_t h = site.rotary_dim / 2;
    for (int64_t r = 0; c && r < 6; ++r)
        for (int64_t k = 0; k < site.rotary_dim; ++k) {
            float ang = (float)pos[r] * site.angles.inv_freq[k % h];
            double want = (double)(float)cos((double)ang) * site.angles.scale;
            double d = fabs(c->v[r * site.rotary_dim + k] - want);
            worst = d > worst ? d : worst;
        }
    CHECK(worst < 1e-6, "cos rows differ from cos(p * inv_freq) by %g", worst);
    /* an op outside the evaluator's set: a clear refusal, not a crash */
    const Onnx__NodeProto *sm = first_op(ix, "Softmax");
    const rk_ten *y = sm ? rk_eval_get(e, sm->output[0]) : NULL;
    CHECK(sm && !y && strstr(rk_eval_error(e), "does not know"), "Softmax refused: %s",
          rk_eval_error(e));
    rk_eval_free(e);

    /* the verifier: the true site passes, a tampered table (inv_freq doubled) is refused */
    rk_sites_verify(ix, &site, 1, 2048);
    CHECK(site.verified && !site.reason[0], "the true site verifies (%s)", site.reason);
    site.verified = 0;
    for (int64_t k = 0; k < h; ++k)
        site.angles.inv_freq[k] *= 2;
    rk_sites_verify(ix, &site, 1, 2048);
    CHECK(strstr(site.reason, "disagree") != NULL, "tampered table refused (%s)", site.reason);
    rk_site_free(&site);

    rk_graph_close(ix);
    ropekit_model_free(m);
    test_view_and_index_ops();
    return REPORT();
}
