/* ONNX layer tests (C only): round trips of the committed models and the transformer fixtures,
 * corrupt input (every truncation, bit flips, random bytes), crafted invalid models, external
 * data (path escapes, ranges), atomic save and its refusals, the graph index and graph edits.
 *
 * usage: test_onnx SOURCE_DIR   (finds tests/onnx/data and tests/fixtures/models there) */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "config_json.h"
#include "onnx_internal.h"

static const char *g_src = ".";

/* ---- helpers ------------------------------------------------------------------------------ */

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

/* Both files can be read and hold the same bytes. */
static int same_file_bytes(const char *p1, const char *p2) {
    size_t n1, n2;
    unsigned char *a = read_file(p1, &n1), *b = read_file(p2, &n2);
    int same = a && b && n1 == n2 && memcmp(a, b, n1) == 0;
    free(a);
    free(b);
    return same;
}

static char *path2(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* A load that must fail without crashing: returns the status, checks the message. */
static ropekit_status try_load(const void *data, size_t n) {
    ropekit_model *m = NULL;
    ropekit_status s = ropekit_model_load_from_memory(data, n, NULL, &m);
    if (s != ROPEKIT_OK) {
        CHECK(m == NULL && *ropekit_last_error() != '\0', "failed load leaves a message");
        return s;
    }
    /* whatever loads must inspect, format and serialize without crashing */
    ropekit_model_info *info = NULL;
    if (ropekit_model_inspect(m, &info) == ROPEKIT_OK) {
        char *t = NULL;
        CHECK(ropekit_model_info_format(info, ROPEKIT_ONNX_FORMAT_JSON, &t) == ROPEKIT_OK, "json");
        ropekit_onnx_free(t);
        ropekit_model_info_free(info);
    } else {
        CHECK(*ropekit_last_error() != '\0', "failed inspect leaves a message");
    }
    void *out;
    size_t on;
    if (ropekit_model_serialize(m, &out, &on) == ROPEKIT_OK) ropekit_onnx_free(out);
    ropekit_model_free(m);
    return s;
}

/* ---- building models in C (malloc'd, freed with protobuf_c_message_free_unpacked) --------- */

static void push(void ***arr, size_t *n, void *item) {
    *arr = realloc(*arr, (*n + 1) * sizeof **arr);
    (*arr)[(*n)++] = item;
}

static Onnx__ModelProto *tm_new(void) {
    Onnx__ModelProto *m = malloc(sizeof *m);
    onnx__model_proto__init(m);
    m->has_ir_version = 1;
    m->ir_version = 9;
    Onnx__OperatorSetIdProto *op = malloc(sizeof *op);
    onnx__operator_set_id_proto__init(op);
    op->domain = rk_strdup("");
    op->has_version = 1;
    op->version = 18;
    push((void ***)&m->opset_import, &m->n_opset_import, op);
    m->graph = malloc(sizeof *m->graph);
    onnx__graph_proto__init(m->graph);
    m->graph->name = rk_strdup("g");
    return m;
}

static Onnx__ValueInfoProto *tm_vi(const char *name, int32_t elem, int rank, const int64_t *dims,
                                   const char *param0) {
    Onnx__ValueInfoProto *v = malloc(sizeof *v);
    onnx__value_info_proto__init(v);
    v->name = rk_strdup(name);
    if (elem) {
        v->type = malloc(sizeof *v->type);
        onnx__type_proto__init(v->type);
        v->type->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
        v->type->tensor_type = malloc(sizeof *v->type->tensor_type);
        onnx__type_proto__tensor__init(v->type->tensor_type);
        v->type->tensor_type->has_elem_type = 1;
        v->type->tensor_type->elem_type = elem;
        if (rank >= 0) {
            Onnx__TensorShapeProto *sh = malloc(sizeof *sh);
            onnx__tensor_shape_proto__init(sh);
            for (int i = 0; i < rank; ++i) {
                Onnx__TensorShapeProto__Dimension *d = malloc(sizeof *d);
                onnx__tensor_shape_proto__dimension__init(d);
                if (i == 0 && param0) {
                    d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                    d->dim_param = rk_strdup(param0);
                } else {
                    d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                    d->dim_value = dims[i];
                }
                push((void ***)&sh->dim, &sh->n_dim, d);
            }
            v->type->tensor_type->shape = sh;
        }
    }
    return v;
}

static void tm_input(Onnx__ModelProto *m, Onnx__ValueInfoProto *v) {
    push((void ***)&m->graph->input, &m->graph->n_input, v);
}
static void tm_output(Onnx__ModelProto *m, const char *name) {
    push((void ***)&m->graph->output, &m->graph->n_output,
         tm_vi(name, RK_DT_FLOAT, -1, NULL, NULL));
}
static Onnx__NodeProto *tm_node_in(Onnx__GraphProto *g, const char *op, const char *in0,
                                   const char *in1, const char *out) {
    const char *ins[2] = {in0, in1};
    Onnx__NodeProto *n = rk_new_node(op, NULL, out, ins, in1 ? 2 : (in0 ? 1 : 0), &out, 1);
    push((void ***)&g->node, &g->n_node, n);
    return n;
}
static Onnx__NodeProto *tm_node(Onnx__ModelProto *m, const char *op, const char *in0,
                                const char *in1, const char *out) {
    return tm_node_in(m->graph, op, in0, in1, out);
}
static Onnx__TensorProto *tm_init(Onnx__ModelProto *m, const char *name, int32_t dt,
                                  const int64_t *dims, size_t rank, const void *raw, size_t n) {
    Onnx__TensorProto *t = rk_new_tensor(name, dt, dims, rank, raw, n);
    push((void ***)&m->graph->initializer, &m->graph->n_initializer, t);
    return t;
}
static void tm_free(Onnx__ModelProto *m) {
    protobuf_c_message_free_unpacked(&m->base, NULL);
}

/* Pack, then load from memory (so every load-time check runs). */
static ropekit_status tm_load(Onnx__ModelProto *mp, const char *dir, ropekit_model **out) {
    size_t n = onnx__model_proto__get_packed_size(mp);
    uint8_t *buf = malloc(n ? n : 1);
    onnx__model_proto__pack(mp, buf);
    ropekit_status s = ropekit_model_load_from_memory(buf, n, dir, out);
    free(buf);
    return s;
}

static void tm_write(Onnx__ModelProto *mp, const char *path) {
    size_t n = onnx__model_proto__get_packed_size(mp);
    uint8_t *buf = malloc(n ? n : 1);
    onnx__model_proto__pack(mp, buf);
    write_file(path, buf, n);
    free(buf);
}

/* A minimal valid model: y = Relu(x). */
static Onnx__ModelProto *tm_relu(void) {
    Onnx__ModelProto *m = tm_new();
    int64_t d[1] = {2};
    tm_input(m, tm_vi("x", RK_DT_FLOAT, 1, d, NULL));
    tm_node(m, "Relu", "x", NULL, "y");
    tm_output(m, "y");
    return m;
}

/* ---- A. committed models: byte-identical round trips, inspect ------------------------------ */

static void test_roundtrip_file(const char *path, int expect_inspect_ok) {
    size_t n;
    unsigned char *bytes = read_file(path, &n);
    CHECK(bytes != NULL, "read %s", path);
    if (!bytes) return;
    ropekit_model *m = NULL;
    ropekit_status s = ropekit_model_load(path, &m);
    CHECK(s == ROPEKIT_OK, "load %s: %s", path, ropekit_last_error());
    if (s == ROPEKIT_OK) {
        void *out = NULL;
        size_t on = 0;
        CHECK(ropekit_model_serialize(m, &out, &on) == ROPEKIT_OK, "serialize %s", path);
        CHECK(on == n && memcmp(out, bytes, n) == 0,
              "%s: round trip is byte-identical (%zu vs %zu)", path, on, n);
        ropekit_onnx_free(out);
        ropekit_model_info *info = NULL;
        s = ropekit_model_inspect(m, &info);
        CHECK((s == ROPEKIT_OK) == expect_inspect_ok, "inspect %s: %s", path, ropekit_last_error());
        for (int f = 0; info && f < 2; ++f) {
            char *t = NULL;
            CHECK(ropekit_model_info_format(info, (ropekit_onnx_format)f, &t) == ROPEKIT_OK && t,
                  "format");
            ropekit_onnx_free(t);
        }
        ropekit_model_info_free(info);
    }
    ropekit_model_free(m);
    free(bytes);
}

static void test_committed_models(void) {
    char *dir = path2(g_src, "tests/onnx/data");
    const char *ok[] = {"tiny_rope.onnx", "subgraph_if.onnx", "external.onnx"};
    for (size_t i = 0; i < 3; ++i) {
        char *p = path2(dir, ok[i]);
        test_roundtrip_file(p, 1);
        free(p);
    }
    char *p = path2(dir, "dangling.onnx");
    test_roundtrip_file(p, 0);
    free(p);
    p = path2(dir, "truncated.onnx");
    ropekit_model *m = NULL;
    CHECK(ropekit_model_load(p, &m) == ROPEKIT_ERROR_PARSE && !m, "truncated file refused");
    CHECK(strstr(ropekit_last_error(), "truncated") != NULL, "message: %s", ropekit_last_error());
    free(p);
    p = path2(dir, "no_such_file.onnx");
    CHECK(ropekit_model_load(p, &m) == ROPEKIT_ERROR_IO, "missing file: IO");
    free(p);
    CHECK(ropekit_model_load(dir, &m) == ROPEKIT_ERROR_IO, "a directory: IO");
    free(dir);

    /* tiny_rope: the index sees both rotary nodes, the Constant, value_info shapes */
    p = path2(g_src, "tests/onnx/data/tiny_rope.onnx");
    CHECK(ropekit_model_load(p, &m) == ROPEKIT_OK, "load tiny_rope");
    free(p);
    if (!m) return;
    ropekit_model_info *info = NULL;
    CHECK(ropekit_model_inspect(m, &info) == ROPEKIT_OK, "inspect");
    if (info) {
        CHECK(info->n_rotary == 2 && info->n_nodes == 5 && info->n_opsets == 2, "counts");
        CHECK(info->n_inputs == 2 && info->inputs[0].rank == 3 && info->inputs[0].dims[0].param &&
                  strcmp(info->inputs[0].dims[0].param, "batch") == 0 &&
                  info->inputs[0].dims[2].value == 16,
              "input shape");
        CHECK(info->n_metadata == 2 && info->initializer_bytes == 512, "metadata, bytes");
    }
    ropekit_model_info_free(info);
    rk_graph *ix = NULL;
    CHECK(rk_graph_open(m, NULL, &ix) == ROPEKIT_OK, "index");
    if (ix) {
        double two[2];
        size_t cnt = 0;
        CHECK(rk_graph_const_f64(ix, "two", two, 2, &cnt) == ROPEKIT_OK && cnt == 1 &&
                  two[0] == 2.0,
              "Constant value tensor");
        rk_shape sh;
        rk_graph_shape(ix, "x2", &sh);
        CHECK(sh.rank == 3 && sh.dims[0] == -1 && sh.dims[2] == 16 && sh.elem_type == RK_DT_FLOAT,
              "value_info shape");
        const rk_value *v = rk_graph_value(ix, "position_ids");
        CHECK(v && v->n_consumers == 2 && (v->flags & RK_VALUE_INPUT), "position_ids consumers");
        Onnx__NodeProto *pq = rk_graph_producer(ix, "q_rot");
        CHECK(pq && strcmp(pq->op_type, "RotaryEmbedding") == 0, "producer");
    }
    rk_graph_close(ix);
    ropekit_model_free(m);
}

/* Loads the committed model at `rel` (under the source tree) and indexes its graph; NULL (the
 * failure counted, *m freed) when either step fails. */
static rk_graph *open_committed(const char *rel, ropekit_model **m) {
    char *p = path2(g_src, rel);
    *m = NULL;
    CHECK(ropekit_model_load(p, m) == ROPEKIT_OK, "load %s: %s", rel, ropekit_last_error());
    free(p);
    rk_graph *ix = NULL;
    CHECK(*m && rk_graph_open(*m, NULL, &ix) == ROPEKIT_OK, "index %s: %s", rel,
          ropekit_last_error());
    if (!ix) {
        ropekit_model_free(*m);
        *m = NULL;
    }
    return ix;
}

/* Every readable element type, raw and typed, and Constant value attributes (the fuzz seed). */
static void test_dtypes(void) {
    ropekit_model *m;
    rk_graph *ix = open_committed("fuzz/corpus/dtypes.onnx", &m);
    if (!ix) return;
    const struct {
        const char *name;
        double v0, v1;
    } f[] = {{"raw_float32", 0.5, -1},
             {"typed_float32", 0.5, -1},
             {"raw_float16", 1, -2},
             {"typed_float16", 1, -2},
             {"raw_float64", 3, 4},
             {"typed_float64", 3, 4},
             {"raw_int32", -1, 7},
             {"typed_int32", -1, 7},
             {"raw_int64", 5, -6},
             {"typed_int64", 5, -6},
             {"raw_uint8", 1, 255},
             {"typed_uint8", 1, 255},
             {"raw_bool", 1, 0},
             {"typed_bool", 1, 0},
             {"typed_bf16", 1, 3},
             {"c_fs", 1, 2},
             {"c_is", 1, 2}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; ++i) {
        double d[4];
        size_t n = 0;
        ropekit_status s = rk_graph_const_f64(ix, f[i].name, d, 4, &n);
        CHECK(s == ROPEKIT_OK && n >= 2 && d[0] == f[i].v0 && d[1] == f[i].v1, "%s: %s %g %g",
              f[i].name, ropekit_status_str(s), n ? d[0] : 0, n > 1 ? d[1] : 0);
    }
    int64_t iv[4];
    size_t n = 0;
    CHECK(rk_graph_const_i64(ix, "c_i", iv, 4, &n) == ROPEKIT_OK && n == 1 && iv[0] == 3, "c_i");
    double d[4];
    CHECK(rk_graph_const_f64(ix, "c_f", d, 4, &n) == ROPEKIT_OK && n == 1 && d[0] == 1.5, "c_f");
    uint64_t big = (1ull << 63) + 1;
    CHECK(rk_graph_const_f64(ix, "typed_uint64", d, 4, &n) == ROPEKIT_OK && d[0] == 2 &&
              d[1] == (double)big,
          "uint64");
    CHECK(rk_graph_const_i64(ix, "raw_uint64", iv, 4, &n) == ROPEKIT_ERROR_DTYPE,
          "2^63+1: no int64");
    CHECK(rk_graph_const_i64(ix, "raw_uint32", iv, 4, &n) == ROPEKIT_OK && iv[1] == 4000000000,
          "uint32");
    CHECK(rk_graph_const_f64(ix, "sp", d, 4, &n) == ROPEKIT_ERROR_INVALID_ATTRIBUTE,
          "sparse initializers are not read as constants");
    CHECK(rk_graph_value(ix, "sp") && (rk_graph_value(ix, "sp")->flags & RK_VALUE_SPARSE_INIT),
          "sparse initializer indexed");
    rk_graph_close(ix);
    ropekit_model_free(m);
}

/* A value read two subgraph levels down keeps its producer; it counts as read by the top If. */
static void test_nested_subgraphs(void) {
    ropekit_model *m;
    rk_graph *ix = open_committed("fuzz/corpus/nested_if.onnx", &m);
    if (!ix) return;
    const rk_value *top = rk_graph_value(ix, "top");
    CHECK(top && top->n_consumers == 1 && top->consumers[0] == 1, "If reads top");
    const rk_value *x = rk_graph_value(ix, "x");
    CHECK(x && x->n_consumers == 2, "Relu and the If (else branch) read x");
    char *u = rk_graph_unique_name(ix, "it");
    CHECK(u && strcmp(u, "it_1") == 0, "names two levels down are taken");
    free(u);
    rk_graph_close(ix);
    ropekit_model_free(m);
}

/* ---- B. the transformer fixtures (whatever exists) --------------------------------------------
 */

static void test_fixtures(void) {
    char *dir = path2(g_src, "tests/fixtures/models");
    DIR *d = opendir(dir);
    int n = 0;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t len = strlen(e->d_name);
            if (len < 5 || strcmp(e->d_name + len - 5, ".onnx") != 0) continue;
            char *p = path2(dir, e->d_name);
            test_roundtrip_file(p, 1);
            free(p);
            ++n;
        }
        closedir(d);
    }
    if (n == 0)
        SKIP("no models in %s", dir);
    else
        printf("fixture round trips: %d models\n", n);
    free(dir);
}

/* ---- C. corrupt input -------------------------------------------------------------------------
 */

static void test_corrupt(void) {
    char *p = path2(g_src, "tests/onnx/data/tiny_rope.onnx");
    size_t n;
    unsigned char *good = read_file(p, &n);
    free(p);
    CHECK(good != NULL, "read tiny_rope");
    if (!good) return;
    unsigned char *buf = malloc(n);
    /* every truncation: a prefix that cuts the graph field must fail */
    int failed = 0;
    for (size_t k = 0; k < n; ++k) {
        memcpy(buf, good, k);
        failed += try_load(buf, k) != ROPEKIT_OK;
    }
    CHECK(try_load(good, 0) != ROPEKIT_OK, "empty input fails");
    CHECK(try_load(good, n / 2) == ROPEKIT_ERROR_PARSE, "half a model fails");
    CHECK(failed > (int)n - 64, "most truncations fail (%d of %zu)", failed, n);
    /* every single-bit flip */
    for (size_t bit = 0; bit < 8 * n; ++bit) {
        memcpy(buf, good, n);
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        try_load(buf, n);
    }
    /* bytes set to special values */
    const unsigned char specials[] = {0x00, 0xff, 0x80, 0x7f};
    for (size_t i = 0; i < n; ++i)
        for (size_t k = 0; k < sizeof specials; ++k) {
            memcpy(buf, good, n);
            buf[i] = specials[k];
            try_load(buf, n);
        }
    free(buf);
    /* random bytes, and random bytes behind a plausible start */
    unsigned char rnd[600];
    for (int it = 0; it < 3000; ++it) {
        size_t len = (size_t)(rng_u64() % sizeof rnd);
        for (size_t i = 0; i < len; ++i)
            rnd[i] = (unsigned char)rng_u64();
        if (it % 2 && len > 40) memcpy(rnd, good, 40);
        try_load(rnd, len);
    }
    free(good);
    CHECK(1, "no crash on corrupt input");
}

/* Nested If-style messages: ModelProto.graph -> GraphProto.node -> NodeProto.attribute ->
 * AttributeProto.g -> GraphProto ... `levels` times. */
static void test_deep_nesting(void) {
    size_t levels = 3000, cap = levels * 16 + 64, len = 0;
    unsigned char *buf = malloc(cap), *tmp = malloc(cap);
    const unsigned fields[3] = {6 /* Attr.g */, 5 /* Node.attribute */, 1 /* Graph.node */};
    for (size_t i = 0; i < levels; ++i) {
        unsigned field = fields[i % 3];
        size_t k = 0;
        tmp[k++] = (unsigned char)(field << 3 | 2);
        size_t v = len;
        do {
            tmp[k++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
            v >>= 7;
        } while (v);
        memcpy(tmp + k, buf, len);
        memcpy(buf, tmp, k + len);
        len += k;
    }
    /* wrap as ModelProto.graph (the innermost level above ends in a GraphProto) */
    size_t k = 0;
    tmp[k++] = 7 << 3 | 2;
    size_t v = len;
    do {
        tmp[k++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    memcpy(tmp + k, buf, len);
    ropekit_model *m = NULL;
    ropekit_status s = ropekit_model_load_from_memory(tmp, k + len, NULL, &m);
    CHECK(s == ROPEKIT_ERROR_PARSE && strstr(ropekit_last_error(), "nested deeper"),
          "deep nesting refused: %s", ropekit_last_error());
    ropekit_model_free(m);
    free(buf);
    free(tmp);
}

/* ---- D. crafted invalid models ----------------------------------------------------------------
 */

/* Counts one check: status s is `want` and the error message contains needle (NULL: any). */
static void expect_status(ropekit_status s, ropekit_status want, const char *needle,
                          const char *what) {
    CHECK(s == want && (!needle || strstr(ropekit_last_error(), needle)),
          "%s: got %s '%s', want %s '%s'", what, ropekit_status_str(s), ropekit_last_error(),
          ropekit_status_str(want), needle ? needle : "");
}

static void expect_load(Onnx__ModelProto *mp, ropekit_status want, const char *needle,
                        const char *what) {
    ropekit_model *m = NULL;
    expect_status(tm_load(mp, NULL, &m), want, needle, what);
    ropekit_model_free(m);
    tm_free(mp);
}

static void expect_inspect(Onnx__ModelProto *mp, ropekit_status want, const char *needle,
                           const char *what) {
    ropekit_model *m = NULL;
    ropekit_status s = tm_load(mp, NULL, &m);
    CHECK(s == ROPEKIT_OK, "%s loads: %s", what, ropekit_last_error());
    if (m) {
        ropekit_model_info *info = NULL;
        expect_status(ropekit_model_inspect(m, &info), want, needle, what);
        ropekit_model_info_free(info);
    }
    ropekit_model_free(m);
    tm_free(mp);
}

static void rename_node(Onnx__NodeProto *n, const char *name) {
    free(n->name);
    n->name = rk_strdup(name);
}

static void test_crafted(void) {
    Onnx__ModelProto *m;
    float f4[4] = {1, 2, 3, 4};
    int64_t d22[2] = {2, 2}, dneg[2] = {2, -1}, dbig[3] = {1ll << 40, 1ll << 40, 1ll << 40};

    m = tm_relu();
    tm_init(m, "w", RK_DT_FLOAT, d22, 2, f4, 12);
    expect_load(m, ROPEKIT_ERROR_PARSE, "raw_data has 12 bytes", "raw_data size mismatch");

    m = tm_relu();
    tm_init(m, "w", RK_DT_FLOAT, dneg, 2, f4, 0);
    expect_load(m, ROPEKIT_ERROR_PARSE, "negative", "negative dim");

    m = tm_relu();
    tm_init(m, "w", RK_DT_FLOAT, dbig, 3, f4, 0);
    expect_load(m, ROPEKIT_ERROR_OVERFLOW, "overflows", "dims overflow");

    m = tm_relu();
    {
        Onnx__TensorProto *t = tm_init(m, "w", RK_DT_FLOAT, d22, 2, f4, 0);
        t->has_raw_data = 0;
        free(t->raw_data.data);
        t->raw_data.data = NULL;
        t->float_data = malloc(3 * sizeof(float));
        t->n_float_data = 3;
        memcpy(t->float_data, f4, 12);
    }
    expect_load(m, ROPEKIT_ERROR_PARSE, "float_data has 3 values", "typed count mismatch");

    /* typed fields: one value per element (d22: 4), two for the complex types */
    const struct {
        int32_t dt;
        size_t n_float, n_double;
        const char *needle; /* NULL: loads */
    } typed[] = {{RK_DT_COMPLEX64, 8, 0, NULL},
                 {RK_DT_COMPLEX64, 4, 0, "float_data has 4 values, expected 8"},
                 {RK_DT_COMPLEX128, 0, 8, NULL},
                 {RK_DT_COMPLEX128, 0, 4, "double_data has 4 values, expected 8"},
                 {RK_DT_DOUBLE, 0, 4, NULL},
                 {RK_DT_DOUBLE, 0, 8, "double_data has 8 values, expected 4"}};
    for (size_t i = 0; i < sizeof typed / sizeof typed[0]; ++i) {
        m = tm_relu();
        Onnx__TensorProto *t = tm_init(m, "w", typed[i].dt, d22, 2, f4, 0);
        t->has_raw_data = 0;
        free(t->raw_data.data);
        t->raw_data.data = NULL;
        t->n_float_data = typed[i].n_float;
        t->float_data = calloc(8, sizeof(float));
        t->n_double_data = typed[i].n_double;
        t->double_data = calloc(8, sizeof(double));
        expect_load(m, typed[i].needle ? ROPEKIT_ERROR_PARSE : ROPEKIT_OK, typed[i].needle,
                    "typed count of a complex or double tensor");
    }

    m = tm_relu();
    free(m->graph->node[0]->op_type);
    m->graph->node[0]->op_type = NULL;
    expect_load(m, ROPEKIT_ERROR_PARSE, "no op_type", "missing op_type");

    m = tm_relu();
    protobuf_c_message_free_unpacked(&m->graph->base, NULL);
    m->graph = NULL;
    expect_load(m, ROPEKIT_ERROR_PARSE, "no graph", "no graph");

    m = tm_relu();
    tm_node(m, "Neg", "x", NULL, "y");
    expect_inspect(m, ROPEKIT_ERROR_PARSE, "defined twice", "duplicate definition");

    m = tm_relu();
    tm_node(m, "Neg", "ghost", NULL, "z");
    expect_inspect(m, ROPEKIT_ERROR_PARSE, "'ghost'", "dangling input");

    m = tm_relu();
    push((void ***)&m->graph->output, &m->graph->n_output, tm_vi("nowhere", 0, -1, NULL, NULL));
    expect_inspect(m, ROPEKIT_ERROR_PARSE, "'nowhere'", "dangling graph output");

    /* cycles: a self-loop, a two-node cycle (named), and a 20000-node ring (linear time) */
    m = tm_relu();
    rename_node(tm_node(m, "Add", "x", "s", "s"), "selfish");
    expect_inspect(m, ROPEKIT_ERROR_PARSE, "node 1 'selfish' (Add) reads its own output",
                   "self-loop");
    m = tm_relu();
    rename_node(tm_node(m, "Add", "x", "b", "a"), "first");
    rename_node(tm_node(m, "Neg", "a", NULL, "b"), "second");
    tm_node(m, "Relu", "b", NULL, "after");
    expect_inspect(m, ROPEKIT_ERROR_PARSE, "the nodes form a cycle: node ", "two-node cycle");
    {
        m = tm_relu();
        enum { RING = 20000 };
        char in[32], out[32];
        for (int i = 0; i < RING; ++i) {
            snprintf(in, sizeof in, "r%d", (i + RING - 1) % RING);
            snprintf(out, sizeof out, "r%d", i);
            tm_node(m, "Neg", in, NULL, out);
        }
        expect_inspect(m, ROPEKIT_ERROR_PARSE, "(20000 of 20001 nodes", "20000-node ring");
        /* the same chain without the back edge is fine */
        m = tm_relu();
        for (int i = 0; i < RING; ++i) {
            snprintf(in, sizeof in, i ? "r%d" : "x", i - 1);
            snprintf(out, sizeof out, "r%d", i);
            tm_node(m, "Neg", in, NULL, out);
        }
        expect_inspect(m, ROPEKIT_OK, NULL, "20000-node chain");
    }

    /* a subgraph reading a name defined nowhere */
    m = tm_relu();
    {
        Onnx__NodeProto *n = tm_node(m, "If", "x", NULL, "z");
        Onnx__GraphProto *sg = malloc(sizeof *sg);
        onnx__graph_proto__init(sg);
        tm_node_in(sg, "Identity", "ghost2", NULL, "inner");
        push((void ***)&sg->output, &sg->n_output, tm_vi("inner", 0, -1, NULL, NULL));
        Onnx__AttributeProto *a = malloc(sizeof *a);
        onnx__attribute_proto__init(a);
        a->name = rk_strdup("then_branch");
        a->g = sg;
        push((void ***)&n->attribute, &n->n_attribute, a);
    }
    expect_inspect(m, ROPEKIT_ERROR_PARSE, "'ghost2'", "dangling subgraph reference");

    /* external data entries */
    m = tm_relu();
    {
        Onnx__TensorProto *t = tm_init(m, "w", RK_DT_FLOAT, d22, 2, f4, 0);
        t->has_raw_data = 0;
        t->has_data_location = 1;
        t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    }
    expect_load(m, ROPEKIT_ERROR_PARSE, "without a location", "external without location");

    /* unknown fields survive, at the top level and inside a node */
    m = tm_relu();
    uint8_t payload[4] = {2, 0xaa, 0xbb, 7}; /* protobuf-c keeps the length prefix in data */
    ProtobufCMessageUnknownField uf[2] = {{1000, PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, 3, payload},
                                          {99, PROTOBUF_C_WIRE_TYPE_VARINT, 1, payload + 3}};
    m->base.n_unknown_fields = 1;
    m->base.unknown_fields = &uf[0];
    m->graph->node[0]->base.n_unknown_fields = 1;
    m->graph->node[0]->base.unknown_fields = &uf[1];
    {
        size_t n = onnx__model_proto__get_packed_size(m);
        uint8_t *in = malloc(n);
        onnx__model_proto__pack(m, in);
        ropekit_model *lm = NULL;
        CHECK(ropekit_model_load_from_memory(in, n, NULL, &lm) == ROPEKIT_OK,
              "unknown fields load");
        void *out = NULL;
        size_t on = 0;
        if (lm) ropekit_model_serialize(lm, &out, &on);
        CHECK(on == n && out && memcmp(in, out, n) == 0, "unknown fields kept byte for byte");
        CHECK(lm && lm->proto->base.n_unknown_fields == 1 &&
                  lm->proto->graph->node[0]->base.n_unknown_fields == 1,
              "unknown fields parsed");
        ropekit_onnx_free(out);
        ropekit_model_free(lm);
        free(in);
    }
    m->base.n_unknown_fields = 0;
    m->base.unknown_fields = NULL;
    m->graph->node[0]->base.n_unknown_fields = 0;
    m->graph->node[0]->base.unknown_fields = NULL;
    tm_free(m);

    /* group wire types are refused with a message */
    const unsigned char group[] = {0x0b, 0x0c};
    CHECK(try_load(group, 2) == ROPEKIT_ERROR_PARSE, "group wire type");
}

/* ---- E. external data and save ----------------------------------------------------------------
 */

static char g_tmp[64];

static int count_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, ".ropekit-", 9) == 0 || strstr(e->d_name, ".tmp.")) ++n;
    if (d) closedir(d);
    return n;
}

static Onnx__TensorProto *tm_ext(Onnx__ModelProto *m, const char *name, const char *loc,
                                 const char *offset, const char *length) {
    int64_t d4[1] = {4};
    Onnx__TensorProto *t = tm_init(m, name, RK_DT_FLOAT, d4, 1, NULL, 0);
    free(t->raw_data.data);
    t->raw_data.data = NULL;
    t->has_raw_data = 0;
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    const char *kv[3][2] = {{"location", loc}, {"offset", offset}, {"length", length}};
    for (int i = 0; i < 3; ++i) {
        if (!kv[i][1]) continue;
        Onnx__StringStringEntryProto *e = malloc(sizeof *e);
        onnx__string_string_entry_proto__init(e);
        e->key = rk_strdup(kv[i][0]);
        e->value = rk_strdup(kv[i][1]);
        push((void ***)&t->external_data, &t->n_external_data, e);
    }
    return t;
}

static void test_external(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/ropekit_onnx_XXXXXX");
    CHECK(mkdtemp(g_tmp) != NULL, "mkdtemp");
    char *sub = path2(g_tmp, "sub"), *other = path2(g_tmp, "other");
    mkdir(sub, 0755);
    mkdir(other, 0755);
    float w[16];
    for (int i = 0; i < 16; ++i)
        w[i] = (float)i;
    char *wbin = path2(g_tmp, "w.bin");
    write_file(wbin, w, sizeof w);

    Onnx__ModelProto *mp = tm_relu();
    tm_ext(mp, "ok", "w.bin", "16", "16");
    tm_ext(mp, "ok_dotdot", "sub/../w.bin", "0", NULL);
    tm_ext(mp, "ok_tail", "./w.bin", "48", NULL);
    tm_ext(mp, "abs", "/etc/passwd", NULL, NULL);
    tm_ext(mp, "escape", "../w.bin", NULL, NULL);
    tm_ext(mp, "escape2", "sub/../../w.bin", NULL, NULL);
    tm_ext(mp, "beyond", "w.bin", "60", "16");
    tm_ext(mp, "missing", "nope.bin", NULL, NULL);
    tm_ext(mp, "whole", "w.bin", NULL, NULL); /* 64 bytes for 4 floats */
    tm_ext(mp, "dir_only", "sub/..", NULL, NULL);
    char *model_path = path2(g_tmp, "model.onnx");
    tm_write(mp, model_path);
    tm_free(mp);

    ropekit_model *m = NULL;
    CHECK(ropekit_model_load(model_path, &m) == ROPEKIT_OK,
          "load with external refs (even a "
          "missing file): %s",
          ropekit_last_error());
    if (m) {
        ropekit_tensor_bytes b;
        CHECK(ropekit_model_initializer_bytes(m, "ok", &b) == ROPEKIT_OK && b.size == 16 &&
                  memcmp(b.data, w + 4, 16) == 0,
              "offset/length read: %s", ropekit_last_error());
        ropekit_tensor_bytes_release(&b);
        CHECK(ropekit_model_initializer_bytes(m, "ok_dotdot", &b) == ROPEKIT_ERROR_PARSE,
              "no length: whole file (64 bytes) disagrees with 4 floats");
        ropekit_tensor_bytes_release(&b);
        CHECK(ropekit_model_initializer_bytes(m, "ok_tail", &b) == ROPEKIT_OK && b.size == 16 &&
                  memcmp(b.data, w + 12, 16) == 0,
              "tail read: %s", ropekit_last_error());
        ropekit_tensor_bytes_release(&b);
        const struct {
            const char *name, *needle;
            ropekit_status want;
        } bad[] = {{"abs", "absolute", ROPEKIT_ERROR_PARSE},
                   {"escape", "leaves the model directory", ROPEKIT_ERROR_PARSE},
                   {"escape2", "leaves the model directory", ROPEKIT_ERROR_PARSE},
                   {"beyond", "past the end", ROPEKIT_ERROR_PARSE},
                   {"missing", "No such file", ROPEKIT_ERROR_IO},
                   {"whole", "need 16", ROPEKIT_ERROR_PARSE},
                   {"dir_only", "is not a file name", ROPEKIT_ERROR_PARSE},
                   {"x", "no initializer", ROPEKIT_ERROR_INVALID_ATTRIBUTE}};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
            ropekit_status s = ropekit_model_initializer_bytes(m, bad[i].name, &b);
            CHECK(s == bad[i].want && strstr(ropekit_last_error(), bad[i].needle) && !b.data,
                  "%s: %s '%s'", bad[i].name, ropekit_status_str(s), ropekit_last_error());
        }
        /* constants through the index read external bytes too */
        rk_graph *ix = NULL;
        CHECK(rk_graph_open(m, NULL, &ix) == ROPEKIT_OK, "index");
        double v[4];
        size_t cnt = 0;
        CHECK(ix && rk_graph_const_f64(ix, "ok", v, 4, &cnt) == ROPEKIT_OK && cnt == 4 &&
                  v[0] == 4 && v[3] == 7,
              "external constant");
        CHECK(ix && rk_graph_const_f64(ix, "escape", v, 4, &cnt) == ROPEKIT_ERROR_PARSE,
              "external constant escape refused");
        rk_graph_close(ix);

        /* save: same directory works, atomically, byte-identical */
        char *out = path2(g_tmp, "out.onnx");
        CHECK(ropekit_model_save(m, out) == ROPEKIT_OK, "save: %s", ropekit_last_error());
        CHECK(same_file_bytes(model_path, out), "saved bytes identical");
        struct stat st;
        CHECK(stat(out, &st) == 0 && (st.st_mode & 0777) == (0666 & ~(mode_t)umask(022)),
              "mode 0666 - umask");
        umask(022);
        CHECK(ropekit_model_save(m, out) == ROPEKIT_OK, "save over an existing output");
        /* refusals */
        CHECK(ropekit_model_save(m, model_path) == ROPEKIT_ERROR_IO &&
                  strstr(ropekit_last_error(), "input model"),
              "refuse overwriting the input");
        CHECK(ropekit_model_save(m, wbin) == ROPEKIT_ERROR_IO &&
                  strstr(ropekit_last_error(), "external data"),
              "refuse overwriting external data");
        /* another directory: the external tensors are copied into out.onnx.data beside it */
        char *far = path2(other, "out.onnx");
        CHECK(ropekit_model_save(m, far) == ROPEKIT_ERROR_PARSE &&
                  strstr(ropekit_last_error(), "tensor 'ok_dotdot'"),
              "another directory needs every external tensor readable: %s", ropekit_last_error());
        CHECK(access(far, F_OK) != 0 && count_tmp_files(other) == 0, "nothing written there");
        free(far);
        CHECK(count_tmp_files(g_tmp) == 0, "no temporary files left");
        size_t n3;
        unsigned char *w2 = read_file(wbin, &n3);
        CHECK(w2 && n3 == sizeof w && memcmp(w2, w, sizeof w) == 0, "external data untouched");
        free(w2);
        unlink(out);
        free(out);
    }
    ropekit_model_free(m);

    /* a model over 2 GiB is refused before anything is written */
    Onnx__ModelProto *big = tm_relu();
    int64_t d1[1] = {1};
    Onnx__TensorProto *t = tm_init(big, "w", RK_DT_UINT8, d1, 1, "x", 1);
    m = NULL;
    CHECK(tm_load(big, other, &m) == ROPEKIT_OK, "load small");
    tm_free(big);
    if (m) {
        t = m->proto->graph->initializer[0];
        size_t real = t->raw_data.len;
        t->raw_data.len = (size_t)1 << 31; /* never read: sizes are checked first */
        char *out = path2(other, "big.onnx");
        void *data = NULL;
        size_t sz = 0;
        CHECK(ropekit_model_serialize(m, &data, &sz) == ROPEKIT_ERROR_OVERFLOW && !data,
              "serialize > 2 GiB refused");
        CHECK(ropekit_model_save(m, out) == ROPEKIT_ERROR_OVERFLOW &&
                  strstr(ropekit_last_error(), "2 GiB"),
              "save > 2 GiB refused: %s", ropekit_last_error());
        CHECK(access(out, F_OK) != 0 && count_tmp_files(other) == 0, "nothing written");
        t->raw_data.len = real;
        char *nodir = path2(g_tmp, "no/such/dir.onnx");
        CHECK(ropekit_model_save(m, nodir) == ROPEKIT_ERROR_IO, "missing directory: IO: %s",
              ropekit_last_error());
        free(nodir);
        free(out);
    }
    ropekit_model_free(m);

    /* external length that disagrees with dims is refused at load */
    mp = tm_relu();
    tm_ext(mp, "w", "w.bin", "0", "12");
    expect_load(mp, ROPEKIT_ERROR_PARSE, "external length 12", "external length mismatch");
    mp = tm_relu();
    tm_ext(mp, "w", "w.bin", "-5", NULL);
    expect_load(mp, ROPEKIT_ERROR_PARSE, "not a non-negative integer", "negative offset");

    unlink(wbin);
    unlink(model_path);
    rmdir(sub);
    rmdir(other);
    rmdir(g_tmp);
    free(wbin);
    free(model_path);
    free(sub);
    free(other);
}

/* Saving a model with external data into another directory, and large inline initializers
 * moved out with external_min_bytes. */
static void test_external_elsewhere(void) {
    char root[64];
    snprintf(root, sizeof root, "/tmp/ropekit_ext_XXXXXX");
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    char *a = path2(root, "a"), *b = path2(root, "b");
    mkdir(a, 0755);
    mkdir(b, 0755);
    float w[8];
    for (int i = 0; i < 8; ++i)
        w[i] = 1.5f * (float)i;
    char *d1 = path2(a, "model.onnx.data"), *d2 = path2(a, "more.bin");
    write_file(d1, w, 16);
    write_file(d2, w + 4, 16);
    Onnx__ModelProto *mp = tm_relu();
    tm_ext(mp, "w1", "model.onnx.data", "0", "16");
    tm_ext(mp, "w2", "more.bin", NULL, NULL);
    int64_t d64[1] = {64};
    float big[64];
    for (int i = 0; i < 64; ++i)
        big[i] = (float)i;
    tm_init(mp, "big", RK_DT_FLOAT, d64, 1, big, sizeof big);
    char *in = path2(a, "model.onnx");
    tm_write(mp, in);
    tm_free(mp);
    ropekit_model *m = NULL;
    CHECK(ropekit_model_load(in, &m) == ROPEKIT_OK, "load: %s", ropekit_last_error());
    char *out = path2(b, "fused.onnx"), *outdata = path2(b, "fused.onnx.data");
    if (m) {
        CHECK(ropekit_model_save(m, out) == ROPEKIT_OK, "save elsewhere: %s", ropekit_last_error());
        ropekit_model *o = NULL;
        CHECK(ropekit_model_load(out, &o) == ROPEKIT_OK, "reload: %s", ropekit_last_error());
        const char *names[3] = {"w1", "w2", "big"};
        const float *want[3] = {w, w + 4, big};
        size_t sizes[3] = {16, 16, sizeof big};
        for (int k = 0; o && k < 3; ++k) {
            ropekit_tensor_bytes tb;
            CHECK(ropekit_model_initializer_bytes(o, names[k], &tb) == ROPEKIT_OK &&
                      tb.size == sizes[k] && memcmp(tb.data, want[k], sizes[k]) == 0,
                  "%s reads back: %s", names[k], ropekit_last_error());
            ropekit_tensor_bytes_release(&tb);
        }
        const Onnx__GraphProto *g = o ? o->proto->graph : NULL;
        for (size_t i = 0; g && i < g->n_initializer; ++i) {
            const Onnx__TensorProto *t = g->initializer[i];
            if (!rk_tensor_is_external(t)) {
                CHECK(strcmp(t->name, "big") == 0, "only 'big' stays inline");
                continue;
            }
            CHECK(strcmp(rk_tensor_external(t, "location"), "fused.onnx.data") == 0,
                  "%s is in fused.onnx.data, not '%s'", t->name, rk_tensor_external(t, "location"));
        }
        ropekit_model_free(o);
        /* the input model object was not changed: saving beside the input keeps its references */
        char *same = path2(a, "copy.onnx");
        CHECK(ropekit_model_save(m, same) == ROPEKIT_OK, "save beside: %s", ropekit_last_error());
        CHECK(same_file_bytes(in, same), "beside the input: identical bytes");
        char *samedata = path2(a, "copy.onnx.data");
        CHECK(access(samedata, F_OK) != 0, "no data file when nothing moves");
        /* external_min_bytes moves 'big' out, beside the input too */
        ropekit_save_options so = ROPEKIT_SAVE_OPTIONS_INIT;
        so.external_min_bytes = 100;
        CHECK(ropekit_model_save_with(m, same, &so) == ROPEKIT_OK, "save_with: %s",
              ropekit_last_error());
        o = NULL;
        CHECK(ropekit_model_load(same, &o) == ROPEKIT_OK, "reload");
        ropekit_tensor_bytes tb;
        CHECK(o && ropekit_model_initializer_bytes(o, "big", &tb) == ROPEKIT_OK &&
                  tb.size == sizeof big && memcmp(tb.data, big, sizeof big) == 0,
              "big moved and reads back: %s", ropekit_last_error());
        ropekit_tensor_bytes_release(&tb);
        const Onnx__TensorProto *bt = NULL;
        for (size_t i = 0; o && i < o->proto->graph->n_initializer; ++i)
            if (!strcmp(o->proto->graph->initializer[i]->name, "big"))
                bt = o->proto->graph->initializer[i];
        CHECK(bt && rk_tensor_is_external(bt) &&
                  !strcmp(rk_tensor_external(bt, "location"), "copy.onnx.data"),
              "big is in copy.onnx.data");
        ropekit_model_free(o);
        so.external_min_bytes = -1;
        CHECK(ropekit_model_save_with(m, same, &so) == ROPEKIT_ERROR_INVALID_ATTRIBUTE,
              "negative threshold refused");
        /* an output whose data file would be an input data file is refused */
        char *clash = path2(a, "model.onnx");
        (void)clash;
        free(clash);
        unlink(same);
        unlink(samedata);
        free(same);
        free(samedata);
        CHECK(count_tmp_files(a) == 0 && count_tmp_files(b) == 0, "no temporary files left");
        /* a missing external file is named with its tensor */
        unlink(d2);
        CHECK(ropekit_model_save(m, out) == ROPEKIT_ERROR_IO &&
                  strstr(ropekit_last_error(), "'w2'") && strstr(ropekit_last_error(), "more.bin"),
              "missing data file named: %s", ropekit_last_error());
        CHECK(count_tmp_files(b) == 0, "no temporary files after a failure");
    }
    ropekit_model_free(m);
    unlink(out);
    unlink(outdata);
    unlink(in);
    unlink(d1);
    unlink(d2);
    rmdir(a);
    rmdir(b);
    rmdir(root);
    free(a), free(b), free(d1), free(d2), free(in), free(out), free(outdata);
}

static void on_fsize(int sig) {
    (void)sig;
    ropekit_onnx_remove_temp_files();
    _exit(3);
}

/* Destinations that are not regular files, modes, long names, leftovers, signals. */
static void test_destinations(void) {
    char root[64];
    snprintf(root, sizeof root, "/tmp/ropekit_dest_XXXXXX");
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    Onnx__ModelProto *mp = tm_relu();
    ropekit_model *m = NULL;
    CHECK(tm_load(mp, root, &m) == ROPEKIT_OK, "load");
    tm_free(mp);
    if (!m) return;
    char *target = path2(root, "target.onnx"), *link = path2(root, "link.onnx");
    write_file(target, "old", 3);
    CHECK(symlink("target.onnx", link) == 0, "symlink");
    CHECK(ropekit_model_save(m, link) == ROPEKIT_OK, "save through a link: %s",
          ropekit_last_error());
    struct stat st;
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link stays a link");
    CHECK(stat(target, &st) == 0 && st.st_size > 3, "its target was replaced");
    /* refused: dangling link, directory, FIFO, device; nothing changes */
    char *dangling = path2(root, "dangling.onnx"), *dir = path2(root, "dir.onnx"),
         *fifo = path2(root, "fifo.onnx"), *devlink = path2(root, "dev.onnx");
    CHECK(symlink("nowhere.onnx", dangling) == 0 && mkdir(dir, 0755) == 0 &&
              mkfifo(fifo, 0644) == 0 && symlink("/dev/null", devlink) == 0,
          "make the odd destinations");
    const struct {
        const char *path, *needle;
    } bad[] = {{dangling, "dangling symbolic link"},
               {dir, "a directory"},
               {fifo, "a FIFO"},
               {devlink, "symbolic link to a character device"},
               {"/dev/null", "a character device"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        ropekit_status s = ropekit_model_save(m, bad[i].path);
        CHECK(s == ROPEKIT_ERROR_IO && strstr(ropekit_last_error(), bad[i].needle) &&
                  strstr(ropekit_last_error(), "nothing was written"),
              "%s refused: %s", bad[i].path, ropekit_last_error());
    }
    CHECK(lstat(dangling, &st) == 0 && S_ISLNK(st.st_mode), "dangling link kept");
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "FIFO kept");
    CHECK(lstat(devlink, &st) == 0 && S_ISLNK(st.st_mode), "device link kept");
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null kept");
    char *nowhere = path2(root, "nowhere.onnx");
    CHECK(access(nowhere, F_OK) != 0, "nothing created behind the dangling link");
    /* the mode of a replaced file is kept, also through the link */
    CHECK(chmod(target, 0600) == 0, "chmod");
    CHECK(ropekit_model_save(m, target) == ROPEKIT_OK, "replace a 0600 file");
    CHECK(stat(target, &st) == 0 && (st.st_mode & 07777) == 0600, "mode 0600 kept: %o",
          (unsigned)(st.st_mode & 07777));
    CHECK(chmod(target, 0640) == 0 && ropekit_model_save(m, link) == ROPEKIT_OK &&
              stat(target, &st) == 0 && (st.st_mode & 07777) == 0640,
          "mode kept through a link");
    /* a 250-character name (the temporary name is short) */
    char name[251];
    memset(name, 'n', 245);
    memcpy(name + 245, ".onnx", 6);
    char *longp = path2(root, name);
    CHECK(ropekit_model_save(m, longp) == ROPEKIT_OK, "250-character name: %s",
          ropekit_last_error());
    CHECK(ropekit_model_save(m, longp) == ROPEKIT_OK, "and replacing it");
    unlink(longp);
    free(longp);
    /* leftovers of a dead process are removed by the next save; a live one's stay */
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    char stale_name[64], live_name[64];
    snprintf(stale_name, sizeof stale_name, ".ropekit-%ld-0.tmp", (long)child);
    snprintf(live_name, sizeof live_name, ".ropekit-%ld-7.tmp", (long)getppid());
    char *stale = path2(root, stale_name), *live = path2(root, live_name),
         *other = path2(root, ".ropekit-notes.tmp");
    write_file(stale, "x", 1);
    write_file(live, "x", 1);
    write_file(other, "x", 1);
    CHECK(ropekit_model_save(m, target) == ROPEKIT_OK, "save");
    CHECK(access(stale, F_OK) != 0, "a dead process's temporary file is removed");
    CHECK(access(live, F_OK) == 0, "a live process's temporary file stays");
    CHECK(access(other, F_OK) == 0, "names outside the pattern stay");
    unlink(live);
    unlink(other);
    free(stale), free(live), free(other);
    /* a signal during the write: the handler's ropekit_onnx_remove_temp_files leaves nothing
     * (SIGXFSZ from a file size limit interrupts the write deterministically) */
    Onnx__ModelProto *bp = tm_relu();
    static float bigv[1 << 14];
    int64_t dn[1] = {1 << 14};
    tm_init(bp, "big", RK_DT_FLOAT, dn, 1, bigv, sizeof bigv);
    ropekit_model *bm = NULL;
    CHECK(tm_load(bp, root, &bm) == ROPEKIT_OK, "load big");
    tm_free(bp);
    char *sigout = path2(root, "signal.onnx");
    fflush(NULL);
    child = fork();
    if (child == 0) {
        struct rlimit rl = {8192, 8192};
        signal(SIGXFSZ, on_fsize);
        setrlimit(RLIMIT_FSIZE, &rl);
        (void)ropekit_model_save(bm, sigout);
        _exit(4);
    }
    int wst = 0;
    waitpid(child, &wst, 0);
    CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 3, "the save was interrupted by the signal (%d)",
          wst);
    CHECK(access(sigout, F_OK) != 0 && count_tmp_files(root) == 0,
          "no temporary file left after the signal");
    ropekit_model_free(bm);
    free(sigout);
    unlink(dangling), unlink(fifo), unlink(devlink), rmdir(dir), unlink(link), unlink(target);
    free(dangling), free(dir), free(fifo), free(devlink), free(nowhere), free(link), free(target);
    ropekit_model_free(m);
    rmdir(root);
}

/* ---- F. the graph index and edits -------------------------------------------------------------
 */

static int32_t pos_of(const rk_graph *ix, const char *value) {
    const rk_value *v = rk_graph_value(ix, value);
    return v ? v->producer : -2;
}

static const char *op_at(const rk_graph *ix, size_t i) {
    return i < ix->g->n_node ? ix->g->node[i]->op_type : "-";
}

static void test_graph(void) {
    Onnx__ModelProto *mp = tm_new();
    int64_t dx[2] = {0, 4}, d2[1] = {2}, d3[1] = {3};
    tm_input(mp, tm_vi("x", RK_DT_FLOAT, 2, dx, "batch"));
    tm_input(mp, tm_vi("over", RK_DT_FLOAT, 1, d2, NULL)); /* an input with a default */
    float inv[2] = {0.5f, 0.25f};
    tm_init(mp, "inv", RK_DT_FLOAT, d2, 1, inv, sizeof inv);
    tm_init(mp, "w2", RK_DT_FLOAT, d2, 1, inv, sizeof inv);
    tm_init(mp, "over", RK_DT_FLOAT, d2, 1, inv, sizeof inv);
    uint16_t h16[2] = {0x3c00, 0xc000};
    tm_init(mp, "h16", RK_DT_FLOAT16, d2, 1, h16, sizeof h16);
    uint8_t i32le[8] = {0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0};
    tm_init(mp, "i32", RK_DT_INT32, d2, 1, i32le, sizeof i32le);
    Onnx__TensorProto *bf = tm_init(mp, "bf", RK_DT_BFLOAT16, d2, 1, NULL, 0);
    bf->has_raw_data = 0;
    free(bf->raw_data.data);
    bf->raw_data.data = NULL;
    bf->int32_data = malloc(2 * sizeof(int32_t));
    bf->int32_data[0] = 0x3f80;
    bf->int32_data[1] = 0x4040;
    bf->n_int32_data = 2;
    Onnx__TensorProto *i64 = tm_init(mp, "i64", RK_DT_INT64, d3, 1, NULL, 0);
    i64->has_raw_data = 0;
    free(i64->raw_data.data);
    i64->raw_data.data = NULL;
    i64->int64_data = malloc(3 * sizeof(int64_t));
    i64->int64_data[0] = 5, i64->int64_data[1] = -6, i64->int64_data[2] = 7;
    i64->n_int64_data = 3;
    Onnx__NodeProto *k = tm_node(mp, "Constant", NULL, NULL, "k"); /* 0 */
    int64_t kv[2] = {1, 2};
    rk_node_add_attr_ints(k, "value_ints", kv, 2);
    tm_node(mp, "Mul", "x", "inv", "a");         /* 1 shared angle */
    tm_node(mp, "Cos", "a", NULL, "c");          /* 2 only layer 1 */
    tm_node(mp, "Sin", "a", NULL, "s");          /* 3 shared */
    tm_node(mp, "Mul", "c", "w2", "p1");         /* 4 */
    tm_node(mp, "Mul", "x", "s", "p2");          /* 5 */
    tm_node(mp, "Add", "p1", "p2", "r1");        /* 6 the layer's last node */
    tm_node(mp, "Identity", "r1", NULL, "out1"); /* 7 */
    tm_node(mp, "Neg", "s", NULL, "n2");         /* 8 another reader of s */
    tm_node(mp, "Add", "n2", "over", "out2");    /* 9 */
    tm_node(mp, "Exp", "x", NULL, "unused");     /* 10 dead already: must stay */
    tm_output(mp, "out1");
    tm_output(mp, "out2");
    push((void ***)&mp->graph->value_info, &mp->graph->n_value_info,
         tm_vi("p1", RK_DT_FLOAT, 2, dx, "batch"));
    push((void ***)&mp->graph->value_info, &mp->graph->n_value_info,
         tm_vi("s", RK_DT_FLOAT, 2, dx, "batch"));

    ropekit_model *m = NULL;
    CHECK(tm_load(mp, NULL, &m) == ROPEKIT_OK, "graph model loads: %s", ropekit_last_error());
    tm_free(mp);
    if (!m) return;
    rk_graph *ix = NULL;
    CHECK(rk_graph_open(m, NULL, &ix) == ROPEKIT_OK, "open: %s", ropekit_last_error());
    if (!ix) {
        ropekit_model_free(m);
        return;
    }
    /* queries */
    const rk_value *va = rk_graph_value(ix, "a");
    CHECK(va && va->producer == 1 && va->n_consumers == 2 && va->consumers[0] == 2 &&
              va->consumers[1] == 3,
          "consumers of a");
    const rk_value *vx = rk_graph_value(ix, "x");
    CHECK(vx && vx->n_consumers == 3 && vx->producer == -1 && (vx->flags & RK_VALUE_INPUT), "x");
    CHECK(rk_graph_value(ix, "out1")->flags & RK_VALUE_OUTPUT, "graph output flag");
    rk_shape sh;
    rk_graph_shape(ix, "x", &sh);
    CHECK(sh.rank == 2 && sh.dims[0] == -1 && sh.dims[1] == 4, "input shape");
    rk_graph_shape(ix, "inv", &sh);
    CHECK(sh.rank == 1 && sh.dims[0] == 2 && sh.elem_type == RK_DT_FLOAT, "initializer shape");
    rk_graph_shape(ix, "k", &sh);
    CHECK(sh.rank == 1 && sh.dims[0] == 2 && sh.elem_type == RK_DT_INT64, "Constant shape");
    rk_graph_shape(ix, "r1", &sh);
    CHECK(sh.rank == -1, "unknown shape");

    double d[4];
    int64_t iv[4];
    size_t cnt = 0;
    CHECK(rk_graph_const_f64(ix, "inv", d, 4, &cnt) == ROPEKIT_OK && cnt == 2 && d[0] == 0.5 &&
              d[1] == 0.25,
          "float raw");
    CHECK(rk_graph_const_f64(ix, "h16", d, 4, &cnt) == ROPEKIT_OK && d[0] == 1.0 && d[1] == -2.0,
          "float16 raw");
    CHECK(rk_graph_const_f64(ix, "bf", d, 4, &cnt) == ROPEKIT_OK && d[0] == 1.0 && d[1] == 3.0,
          "bfloat16 typed");
    CHECK(rk_graph_const_i64(ix, "i32", iv, 4, &cnt) == ROPEKIT_OK && iv[0] == -1 && iv[1] == 7,
          "int32 raw little-endian");
    CHECK(rk_graph_const_i64(ix, "i64", iv, 4, &cnt) == ROPEKIT_OK && cnt == 3 && iv[1] == -6,
          "int64 typed");
    CHECK(rk_graph_const_i64(ix, "k", iv, 4, &cnt) == ROPEKIT_OK && cnt == 2 && iv[1] == 2,
          "Constant value_ints");
    CHECK(rk_graph_const_i64(ix, "i64", iv, 2, &cnt) == ROPEKIT_ERROR_SHAPE, "cap");
    CHECK(rk_graph_const_i64(ix, "inv", iv, 4, &cnt) == ROPEKIT_ERROR_DTYPE, "0.5 is no int");
    CHECK(rk_graph_const_i64(ix, "h16", iv, 4, &cnt) == ROPEKIT_OK && iv[1] == -2, "integral f16");
    CHECK(rk_graph_const_f64(ix, "over", d, 4, &cnt) == ROPEKIT_ERROR_INVALID_ATTRIBUTE,
          "an initializer that is a graph input is not constant");
    CHECK(rk_graph_const_f64(ix, "a", d, 4, &cnt) == ROPEKIT_ERROR_INVALID_ATTRIBUTE, "computed");
    CHECK(rk_graph_const_f64(ix, "zz", d, 4, &cnt) == ROPEKIT_ERROR_INVALID_ATTRIBUTE, "undefined");

    char *u = rk_graph_unique_name(ix, "a");
    CHECK(u && strcmp(u, "a_1") == 0, "unique name: %s", u ? u : "(null)");
    free(u);
    u = rk_graph_unique_name(ix, "fresh");
    CHECK(u && strcmp(u, "fresh") == 0, "unique name fresh");
    free(u);

    /* a fused node replaces the layer: insert, rewire, remove; shared nodes stay */
    const char *fin[2] = {"x", "inv"}, *fout[1] = {"fused"};
    Onnx__NodeProto *f = rk_new_node("RotaryEmbedding", "com.microsoft", "fused", fin, 2, fout, 1);
    rk_node_add_attr_int(f, "num_heads", 2);
    int32_t at = -1;
    CHECK(rk_graph_insert_node(ix, f, pos_of(ix, "r1"), &at) == ROPEKIT_OK && at == 6,
          "insert at the hint: %s", ropekit_last_error());
    CHECK(strcmp(op_at(ix, 6), "RotaryEmbedding") == 0 && strcmp(op_at(ix, 7), "Add") == 0,
          "order after insert");
    int32_t add = pos_of(ix, "r1");
    CHECK(rk_graph_remove_nodes(ix, &add, 1, NULL) == ROPEKIT_ERROR_INVALID_ATTRIBUTE,
          "cannot remove a node whose output is still read");
    CHECK(rk_graph_replace_uses(ix, "r1", "fused") == ROPEKIT_OK, "replace: %s",
          ropekit_last_error());
    CHECK(rk_graph_value(ix, "r1")->n_consumers == 0, "r1 unused now");
    add = pos_of(ix, "r1");
    size_t removed = 0;
    CHECK(rk_graph_remove_nodes(ix, &add, 1, &removed) == ROPEKIT_OK, "remove: %s",
          ropekit_last_error());
    /* Add, Mul p1, Mul p2, Cos go; Mul a and Sin s stay (Neg reads s); Exp stays */
    CHECK(removed == 4, "removed %zu nodes", removed);
    const char *want[] = {"Constant", "Mul", "Sin", "RotaryEmbedding",
                          "Identity", "Neg", "Add", "Exp"};
    CHECK(ix->g->n_node == 8, "8 nodes left, got %zu", ix->g->n_node);
    for (size_t i = 0; i < 8; ++i)
        CHECK(strcmp(op_at(ix, i), want[i]) == 0, "node %zu: %s, want %s", i, op_at(ix, i),
              want[i]);
    CHECK(rk_graph_value(ix, "w2") == NULL, "w2 (read only by the removed Mul) removed");
    CHECK(rk_graph_value(ix, "inv") != NULL && rk_graph_value(ix, "over") != NULL,
          "inv (still read) and over (a graph input) stay");
    CHECK(ix->g->n_value_info == 1 && strcmp(ix->g->value_info[0]->name, "s") == 0,
          "value_info of p1 removed, of s kept");

    /* invalid edits change nothing */
    const char *gin[1] = {"nothing"}, *gout[1] = {"g1"};
    CHECK(rk_graph_insert_node(ix, rk_new_node("Neg", NULL, NULL, gin, 1, gout, 1), -1, NULL) ==
              ROPEKIT_ERROR_PARSE,
          "insert reading an undefined value");
    const char *din[1] = {"x"}, *dout[1] = {"s"};
    CHECK(rk_graph_insert_node(ix, rk_new_node("Neg", NULL, NULL, din, 1, dout, 1), -1, NULL) ==
              ROPEKIT_ERROR_PARSE,
          "insert redefining a value");
    CHECK(rk_graph_replace_uses(ix, "a", "n2") == ROPEKIT_ERROR_INVALID_ATTRIBUTE,
          "replace with a value computed later");
    CHECK(rk_graph_replace_uses(ix, "out1", "x") == ROPEKIT_ERROR_UNSUPPORTED, "graph output");
    CHECK(ix->g->n_node == 8, "unchanged");
    /* insert without a hint: right after the last producer */
    const char *nin[1] = {"s"}, *nout[1] = {"s_neg"};
    CHECK(rk_graph_insert_node(ix, rk_new_node("Neg", NULL, NULL, nin, 1, nout, 1), -1, &at) ==
                  ROPEKIT_OK &&
              at == 3,
          "insert after Sin: %d", at);
    int32_t p = at;
    CHECK(rk_graph_remove_nodes(ix, &p, 1, &removed) == ROPEKIT_OK && removed == 1,
          "removing an unused node removes only it");
    Onnx__TensorProto *nt = rk_new_tensor("table", RK_DT_FLOAT, d2, 1, inv, sizeof inv);
    CHECK(rk_graph_add_initializer(ix, nt) == ROPEKIT_OK && rk_graph_value(ix, "table"),
          "add initializer");
    nt = rk_new_tensor("inv", RK_DT_FLOAT, d2, 1, inv, sizeof inv);
    CHECK(rk_graph_add_initializer(ix, nt) == ROPEKIT_ERROR_PARSE, "duplicate initializer");
    CHECK(rk_model_opset(m->proto, "") == 18 && rk_model_opset(m->proto, "ai.onnx") == 18 &&
              rk_model_opset(m->proto, "com.microsoft") == -1,
          "opset lookup");
    CHECK(rk_model_import_opset(m->proto, "com.microsoft", 1) == ROPEKIT_OK &&
              rk_model_import_opset(m->proto, "ai.onnx", 23) == ROPEKIT_OK &&
              rk_model_opset(m->proto, "com.microsoft") == 1 &&
              rk_model_opset(m->proto, "") == 18 && m->proto->n_opset_import == 2,
          "opset import");
    rk_graph_close(ix);

    /* the edited model serializes, reloads and indexes */
    void *bytes = NULL;
    size_t n = 0;
    CHECK(ropekit_model_serialize(m, &bytes, &n) == ROPEKIT_OK, "serialize edited");
    ropekit_model *m2 = NULL;
    CHECK(ropekit_model_load_from_memory(bytes, n, NULL, &m2) == ROPEKIT_OK, "reload edited");
    ropekit_model_info *info = NULL;
    CHECK(m2 && ropekit_model_inspect(m2, &info) == ROPEKIT_OK && info->n_rotary == 1,
          "inspect edited: %s", ropekit_last_error());
    ropekit_model_info_free(info);
    ropekit_model_free(m2);
    ropekit_onnx_free(bytes);
    ropekit_model_free(m);
}

/* Subgraph readers keep outer producers alive, and renaming reaches into subgraphs. */
static void test_subgraph_consumers(void) {
    Onnx__ModelProto *mp = tm_new();
    int64_t d2[1] = {2};
    tm_input(mp, tm_vi("x", RK_DT_FLOAT, 1, d2, NULL));
    tm_input(mp, tm_vi("cond", RK_DT_BOOL, 0, d2, NULL));
    tm_node(mp, "Sin", "x", NULL, "s"); /* 0 read by Neg and by the If's branch */
    tm_node(mp, "Neg", "s", NULL, "n"); /* 1 to be removed */
    tm_node(mp, "Cos", "x", NULL, "c"); /* 2 read only inside the branch: a rename target */
    Onnx__NodeProto *iff = tm_node(mp, "If", "cond", NULL, "z"); /* 3 */
    for (int b = 0; b < 2; ++b) {
        Onnx__GraphProto *sg = malloc(sizeof *sg);
        onnx__graph_proto__init(sg);
        sg->name = rk_strdup(b ? "else" : "then");
        tm_node_in(sg, "Add", "s", "c", b ? "e" : "t");
        push((void ***)&sg->output, &sg->n_output, tm_vi(b ? "e" : "t", 0, -1, NULL, NULL));
        Onnx__AttributeProto *a = malloc(sizeof *a);
        onnx__attribute_proto__init(a);
        a->name = rk_strdup(b ? "else_branch" : "then_branch");
        a->has_type = 1;
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
        a->g = sg;
        push((void ***)&iff->attribute, &iff->n_attribute, a);
    }
    tm_output(mp, "z");
    ropekit_model *m = NULL;
    CHECK(tm_load(mp, NULL, &m) == ROPEKIT_OK, "subgraph model: %s", ropekit_last_error());
    tm_free(mp);
    rk_graph *ix = NULL;
    CHECK(m && rk_graph_open(m, NULL, &ix) == ROPEKIT_OK, "open: %s", ropekit_last_error());
    if (!ix) {
        ropekit_model_free(m);
        return;
    }
    const rk_value *s = rk_graph_value(ix, "s");
    CHECK(s && s->n_consumers == 2 && s->consumers[1] == 3, "the If reads s through its branch");
    int32_t p = 1;
    size_t removed = 0;
    CHECK(rk_graph_remove_nodes(ix, &p, 1, &removed) == ROPEKIT_OK && removed == 1,
          "Sin survives: the branch reads s (removed %zu)", removed);
    CHECK(rk_graph_producer(ix, "s") != NULL, "s still produced");
    char *u = rk_graph_unique_name(ix, "t");
    CHECK(u && strcmp(u, "t_1") == 0, "names defined in subgraphs are taken");
    free(u);

    /* rename c -> s2 (a new value computed before the If) reaches the branches */
    const char *in[1] = {"x"}, *out[1] = {"s2"};
    CHECK(rk_graph_insert_node(ix, rk_new_node("Tanh", NULL, NULL, in, 1, out, 1), 2, NULL) ==
              ROPEKIT_OK,
          "insert Tanh");
    CHECK(rk_graph_replace_uses(ix, "c", "s2") == ROPEKIT_OK, "replace into subgraphs: %s",
          ropekit_last_error());
    const rk_value *c = rk_graph_value(ix, "c"), *s2 = rk_graph_value(ix, "s2");
    CHECK(c && c->n_consumers == 0 && s2 && s2->n_consumers == 1 &&
              strcmp(ix->g->node[s2->consumers[0]]->op_type, "If") == 0,
          "the branches read s2 now");
    p = c ? c->producer : 0;
    CHECK(rk_graph_remove_nodes(ix, &p, 1, &removed) == ROPEKIT_OK && removed == 1, "drop Cos");
    const Onnx__GraphProto *then_g = rk_node_attr(rk_graph_producer(ix, "z"), "then_branch")->g;
    CHECK(strcmp(then_g->node[0]->input[1], "s2") == 0, "branch input renamed");
    /* a top-level value named like a subgraph's own value cannot take over its uses */
    const char *tout[1] = {"t"};
    CHECK(rk_graph_insert_node(ix, rk_new_node("Tanh", NULL, NULL, in, 1, tout, 1), 0, NULL) ==
              ROPEKIT_OK,
          "insert t");
    CHECK(rk_graph_replace_uses(ix, "s2", "t") == ROPEKIT_ERROR_INVALID_ATTRIBUTE &&
              strstr(ropekit_last_error(), "subgraph defines"),
          "shadowed rename refused: %s", ropekit_last_error());
    rk_graph_close(ix);
    ropekit_model_free(m);
}

/* ---- G. config.json values -------------------------------------------------------------------
 */

static void test_config(void) {
    const struct {
        const char *json, *needle;
        int64_t want;
    } cases[] = {
        {"{\"max_position_embeddings\": 4096}", "max_position_embeddings 4096", 4096},
        {"{\"max_position_embeddings\": -5}",
         "max_position_embeddings is -5, not a positive integer", 0},
        {"{\"max_position_embeddings\": \"2048\"}",
         "max_position_embeddings is the string \"2048\", not a number", 0},
        {"{\"max_position_embeddings\": 1e300}",
         "max_position_embeddings is 1e300, not a positive integer (out of range)", 0},
        {"{\"max_position_embeddings\": 9.3e18}", "(out of range)", 0},
        {"{\"max_position_embeddings\": 2048.5}", "is 2048.5, not a positive integer", 0},
        {"{\"max_position_embeddings\": 0}", "is 0, not a positive integer", 0},
        {"{\"max_position_embeddings\": NaN}", "gives no max_position_embeddings", 0},
        {"{\"hidden_size\": 64}", "gives no max_position_embeddings", 0},
        {"{\"text_config\": {\"max_position_embeddings\": -1}}",
         "is -1, not a positive integer (in text_config)", 0},
        {"{\"n_positions\": 1024}", "max_position_embeddings 1024", 1024},
        /* scaling fields out of range are ignored, never converted */
        {"{\"max_position_embeddings\": 100, \"rope_scaling\": {\"type\": \"linear\", \"factor\": "
         "1e300, "
         "\"original_max_position_embeddings\": 1e300}}",
         "max_position_embeddings 100", 100},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        rk_hf_config cfg;
        char how[256] = "";
        ropekit_status s = rk_hf_config_parse(cases[i].json, strlen(cases[i].json), "c.json", &cfg);
        int64_t got = s == ROPEKIT_OK ? rk_hf_config_max_positions(&cfg, how, sizeof how) : -1;
        CHECK(s == ROPEKIT_OK && got == cases[i].want && strstr(how, cases[i].needle),
              "config %s: got %lld '%s', want %lld '%s'", cases[i].json, (long long)got, how,
              (long long)cases[i].want, cases[i].needle);
    }
    /* a directory, a FIFO, a missing file */
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ropekit_cfg_XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    rk_hf_config cfg;
    CHECK(rk_hf_config_read(dir, &cfg) == ROPEKIT_ERROR_IO &&
              strstr(ropekit_last_error(), "is a directory; pass the config file itself"),
          "config dir: %s", ropekit_last_error());
    char *fifo = path2(dir, "fifo.json"), *none = path2(dir, "none.json");
    CHECK(mkfifo(fifo, 0644) == 0, "mkfifo");
    CHECK(rk_hf_config_read(fifo, &cfg) == ROPEKIT_ERROR_IO &&
              strstr(ropekit_last_error(), "not a regular file"),
          "config FIFO (never blocks): %s", ropekit_last_error());
    CHECK(rk_hf_config_read(none, &cfg) == ROPEKIT_ERROR_IO &&
              strstr(ropekit_last_error(), "No such file"),
          "config missing: %s", ropekit_last_error());
    unlink(fifo);
    rmdir(dir);
    free(fifo);
    free(none);
}

int main(int argc, char **argv) {
    if (argc > 1) g_src = argv[1];
    umask(022);
    test_committed_models();
    test_dtypes();
    test_nested_subgraphs();
    test_fixtures();
    test_corrupt();
    test_deep_nesting();
    test_crafted();
    test_external();
    test_external_elsewhere();
    test_destinations();
    test_graph();
    test_subgraph_consumers();
    test_config();
    return REPORT();
}
