/* libFuzzer harness: load from memory, inspect (text and JSON), index the graph, read every
 * constant and shape, edit the graph (remove, insert, add an initializer) and check that what
 * comes out still loads and indexes; serialization must be stable after one round; run the RoPE
 * fusion and check that its output loads and indexes too.
 *
 *   fuzz_load fuzz/corpus                 (ROPEKIT_FUZZ=ON build; libFuzzer flags apply)
 *   fuzz_load_replay FILE...              (any build: runs the same checks once per file)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"
#include "ropekit_fuse.h"

#define FUZZ_ASSERT(c)                                                                             \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)

static void exercise_index(ropekit_model *m) {
    rk_graph *ix = NULL;
    if (rk_graph_open(m, NULL, &ix) != ROPEKIT_OK) return;
    double d[64];
    int64_t iv[64];
    size_t n;
    for (size_t v = 0; v < ix->n_values; ++v) {
        const rk_value *val = &ix->values[v];
        rk_shape sh;
        rk_graph_shape(ix, val->name, &sh);
        FUZZ_ASSERT(sh.rank >= -1 && sh.rank <= RK_SHAPE_MAX_RANK);
        (void)rk_graph_const_f64(ix, val->name, d, 64, &n);
        (void)rk_graph_const_i64(ix, val->name, iv, 64, &n);
        FUZZ_ASSERT(rk_graph_value(ix, val->name) == val);
        for (uint32_t c = 0; c < val->n_consumers; ++c)
            FUZZ_ASSERT(val->consumers[c] >= 0 && (size_t)val->consumers[c] < ix->g->n_node);
        if (val->producer >= 0) FUZZ_ASSERT(rk_graph_producer(ix, val->name) != NULL);
    }
    /* edits: remove the first node whose outputs nothing reads (with its dead inputs), insert an
     * Identity of the first defined value, add an initializer */
    for (size_t i = 0; i < ix->g->n_node; ++i) {
        int32_t p = (int32_t)i;
        size_t removed = 0;
        ropekit_status s = rk_graph_remove_nodes(ix, &p, 1, &removed);
        if (s == ROPEKIT_OK) break;
        FUZZ_ASSERT(s == ROPEKIT_ERROR_INVALID_ATTRIBUTE || s == ROPEKIT_ERROR_OUT_OF_MEMORY);
    }
    for (size_t v = 0; v < ix->n_values; ++v) {
        const rk_value *val = &ix->values[v];
        if (val->producer < 0 && !(val->flags & (RK_VALUE_INPUT | RK_VALUE_INITIALIZER))) continue;
        char *out = rk_graph_unique_name(ix, "fuzz_out");
        const char *in[1] = {val->name}, *outs[1] = {out};
        Onnx__NodeProto *node = out ? rk_new_node("Identity", NULL, NULL, in, 1, outs, 1) : NULL;
        free(out);
        if (!node) break;
        /* copy the name: the edits below free strings the index points to */
        char *from = rk_strdup(val->name), *to = rk_strdup(node->output[0]);
        FUZZ_ASSERT(rk_graph_insert_node(ix, node, 0, NULL) == ROPEKIT_OK);
        if (from && to) {
            ropekit_status s = rk_graph_replace_uses(ix, from, to);
            FUZZ_ASSERT(s == ROPEKIT_OK || s == ROPEKIT_ERROR_UNSUPPORTED ||
                        s == ROPEKIT_ERROR_INVALID_ATTRIBUTE || s == ROPEKIT_ERROR_OUT_OF_MEMORY);
        }
        free(from);
        free(to);
        break;
    }
    char *tname = rk_graph_unique_name(ix, "fuzz_table");
    if (tname) {
        float two[2] = {1.0f, 2.0f};
        int64_t dims[1] = {2};
        Onnx__TensorProto *t = rk_new_tensor(tname, RK_DT_FLOAT, dims, 1, two, sizeof two);
        if (t) FUZZ_ASSERT(rk_graph_add_initializer(ix, t) == ROPEKIT_OK);
        free(tname);
    }
    rk_graph_close(ix);
    /* the edited model must still be a valid one */
    void *bytes = NULL;
    size_t size = 0;
    if (ropekit_model_serialize(m, &bytes, &size) != ROPEKIT_OK) return;
    ropekit_model *m2 = NULL;
    FUZZ_ASSERT(ropekit_model_load_from_memory(bytes, size, NULL, &m2) == ROPEKIT_OK);
    rk_graph *ix2 = NULL;
    FUZZ_ASSERT(rk_graph_open(m2, NULL, &ix2) == ROPEKIT_OK);
    rk_graph_close(ix2);
    ropekit_model_free(m2);
    ropekit_onnx_free(bytes);
}

/* The RoPE fusion on a fresh copy: matching and rewriting never crash, a report is produced,
 * and the rewritten model still serializes, loads and indexes. */
static void exercise_fuse(const uint8_t *data, size_t size, int64_t max_positions,
                          ropekit_fuse_target target) {
    ropekit_model *m = NULL;
    if (ropekit_model_load_from_memory(data, size, NULL, &m) != ROPEKIT_OK) return;
    ropekit_fuse_options o = ROPEKIT_FUSE_OPTIONS_INIT;
    o.max_positions = max_positions;
    o.target = target;
    ropekit_fuse_report *r = NULL;
    ropekit_status s = ropekit_fuse(m, &o, &r);
    FUZZ_ASSERT(s == ROPEKIT_OK || ropekit_last_error()[0] != '\0');
    if (s == ROPEKIT_OK) {
        char *text = NULL, *json = NULL;
        FUZZ_ASSERT(ropekit_fuse_report_text(r, &text) == ROPEKIT_OK && text);
        FUZZ_ASSERT(ropekit_fuse_report_json(r, &json) == ROPEKIT_OK && json);
        FUZZ_ASSERT(ropekit_fuse_report_fused(r) <= ropekit_fuse_report_sites(r));
        ropekit_onnx_free(text);
        ropekit_onnx_free(json);
        void *bytes = NULL;
        size_t n = 0;
        if (ropekit_model_serialize(m, &bytes, &n) == ROPEKIT_OK) {
            ropekit_model *m2 = NULL;
            FUZZ_ASSERT(ropekit_model_load_from_memory(bytes, n, NULL, &m2) == ROPEKIT_OK);
            rk_graph *ix = NULL;
            FUZZ_ASSERT(rk_graph_open(m2, NULL, &ix) == ROPEKIT_OK);
            rk_graph_close(ix);
            ropekit_model_free(m2);
        }
        ropekit_onnx_free(bytes);
    }
    ropekit_fuse_report_free(r);
    ropekit_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ropekit_model *m = NULL;
    if (ropekit_model_load_from_memory(data, size, NULL, &m) != ROPEKIT_OK) {
        FUZZ_ASSERT(m == NULL && ropekit_last_error()[0] != '\0');
        return 0;
    }
    ropekit_model_info *info = NULL;
    if (ropekit_model_inspect(m, &info) == ROPEKIT_OK) {
        for (int f = 0; f < 2; ++f) {
            char *text = NULL;
            FUZZ_ASSERT(ropekit_model_info_format(info, (ropekit_onnx_format)f, &text) ==
                        ROPEKIT_OK);
            FUZZ_ASSERT(text && strlen(text) > 0);
            ropekit_onnx_free(text);
        }
        ropekit_model_info_free(info);
    }
    for (size_t i = 0; i < m->proto->graph->n_initializer; ++i) {
        ropekit_tensor_bytes b;
        const char *name = m->proto->graph->initializer[i]->name;
        if (name && ropekit_model_initializer_bytes(m, name, &b) == ROPEKIT_OK)
            ropekit_tensor_bytes_release(&b);
    }
    /* serialization is stable after one round: pack(unpack(pack(x))) == pack(x) */
    void *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    if (ropekit_model_serialize(m, &b1, &n1) == ROPEKIT_OK) {
        ropekit_model *r = NULL;
        FUZZ_ASSERT(ropekit_model_load_from_memory(b1, n1, NULL, &r) == ROPEKIT_OK);
        FUZZ_ASSERT(ropekit_model_serialize(r, &b2, &n2) == ROPEKIT_OK);
        FUZZ_ASSERT(n1 == n2 && memcmp(b1, b2, n1) == 0);
        ropekit_model_free(r);
    }
    ropekit_onnx_free(b1);
    ropekit_onnx_free(b2);
    exercise_index(m);
    ropekit_model_free(m);
    /* one fusion per input (the CI smoke's cost), the mode picked by the input's size: small
     * fixed tables (the input decides the width, not the length) or the default per-call rows
     * in each target */
    if (size % 2 == 0)
        exercise_fuse(data, size, 8, ROPEKIT_FUSE_TARGET_ORT);
    else
        exercise_fuse(data, size, 0, (ropekit_fuse_target)((size / 2) % 3));
    return 0;
}
