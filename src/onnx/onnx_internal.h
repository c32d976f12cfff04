/* Internal interfaces of the ONNX layer: the model object, tensor decoding, the graph index and
 * graph edits used by the fusion matchers and the rewriter.
 *
 * Invariants established by loading (rk_model_validate), which later code relies on:
 *   - every message pointer that protobuf-c may leave NULL is checked where used, but every
 *     node has a non-NULL op_type; every string in a repeated string field is non-NULL;
 *   - every TensorProto (initializers, Constant attributes, subgraphs, functions) has dims >= 0
 *     whose product fits in int64 bytes, and inline data whose size agrees with them;
 *   - external data entries have a non-NULL key and value, a "location", and numeric
 *     offset/length when given.
 * The graph index adds: within one graph, no value is defined twice, and every node input (and
 * every free name of a subgraph) is defined in the graph or an enclosing one.
 *
 * Every node, tensor and string in the model is allocated with malloc in the layout protobuf-c
 * frees (protobuf_c_message_free_unpacked with the default allocator), so edits must build new
 * messages with the rk_new_* helpers below (or equivalent malloc'd trees). */
#ifndef ROPEKIT_ONNX_INTERNAL_H
#define ROPEKIT_ONNX_INTERNAL_H

#include <stdint.h>
#include <sys/types.h>

#include "internal.h"
#include "onnx.pb-c.h"
#include "ropekit_onnx.h"

#define RK_MAX_NESTING 100 /* messages inside messages, as protobuf's default recursion limit */
#define RK_MAX_MODEL_BYTES ((size_t)INT32_MAX) /* protobuf's 2 GiB limit */

struct ropekit_model {
    Onnx__ModelProto *proto;
    char *dir;  /* directory external data is relative to; NULL if unknown */
    char *name; /* for messages: the path, or "<memory>" */
    int has_id; /* the source file's identity, to refuse overwriting it */
    dev_t dev;
    ino_t ino;
};

/* ---- element types ------------------------------------------------------------------------ */
enum {
    RK_DT_UNDEFINED = 0,
    RK_DT_FLOAT = 1,
    RK_DT_UINT8 = 2,
    RK_DT_INT8 = 3,
    RK_DT_UINT16 = 4,
    RK_DT_INT16 = 5,
    RK_DT_INT32 = 6,
    RK_DT_INT64 = 7,
    RK_DT_STRING = 8,
    RK_DT_BOOL = 9,
    RK_DT_FLOAT16 = 10,
    RK_DT_DOUBLE = 11,
    RK_DT_UINT32 = 12,
    RK_DT_UINT64 = 13,
    RK_DT_COMPLEX64 = 14,
    RK_DT_COMPLEX128 = 15,
    RK_DT_BFLOAT16 = 16
};
/* Name ("float32", "int64", ...; "?" for unknown codes). */
const char *rk_dtype_name(int32_t data_type);
/* Bits per element of a fixed-size type (4 for int4, ...), 0 for strings and unknown codes. */
int rk_dtype_bits(int32_t data_type);

#define RK_OOM() rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory")

/* An optional protobuf string, "" when absent. */
static inline const char *rk_s(const char *s) {
    return s ? s : "";
}

/* d as int64 when it is an integer in range (NaN, infinities, fractions, |d| >= 2^63: 0). */
static inline int rk_f64_to_i64(double d, int64_t *out) {
    if (!(d >= -0x1p63 && d < 0x1p63) || d != (double)(int64_t)d) return 0;
    *out = (int64_t)d;
    return 1;
}

/* ---- tensors ------------------------------------------------------------------------------ */
/* Element count from dims (checked at load: cannot overflow afterwards). */
int64_t rk_tensor_numel(const Onnx__TensorProto *t);
int rk_tensor_is_external(const Onnx__TensorProto *t);
/* What is wrong with an external data location, judged on its text ("is an absolute path",
 * "leaves the model directory", "is not a file name"), or NULL when it is fine. */
const char *rk_location_problem(const char *loc);
/* External data entry `key` of t, or NULL. */
const char *rk_tensor_external(const Onnx__TensorProto *t, const char *key);
/* Bytes of t's data: inline raw_data, or external (mapped, released by
 * ropekit_tensor_bytes_release). UNSUPPORTED for typed-field tensors. */
ropekit_status rk_tensor_bytes(const ropekit_model *m, const Onnx__TensorProto *t,
                               ropekit_tensor_bytes *out);
/* Decode up to `cap` elements of t (float, float16, bfloat16, double, int8..int64, uint8..uint64,
 * bool) from raw_data, typed fields or external data, as int64 (floats must be integral and in
 * range) or as double. *count = number of elements; ROPEKIT_ERROR_SHAPE if it exceeds cap. */
ropekit_status rk_tensor_read_i64(const ropekit_model *m, const Onnx__TensorProto *t, int64_t *out,
                                  size_t cap, size_t *count);
ropekit_status rk_tensor_read_f64(const ropekit_model *m, const Onnx__TensorProto *t, double *out,
                                  size_t cap, size_t *count);

/* ---- the graph index ------------------------------------------------------------------------ */
enum {
    RK_VALUE_INPUT = 1u,       /* a graph input */
    RK_VALUE_OUTPUT = 2u,      /* a graph output */
    RK_VALUE_INITIALIZER = 4u, /* a dense initializer */
    RK_VALUE_SPARSE_INIT = 8u  /* a sparse initializer */
};

typedef struct rk_value {
    const char *name;
    int32_t producer;        /* position of the producing node in graph->node, or -1 */
    int32_t producer_output; /* its output slot */
    uint32_t flags;
    Onnx__TensorProto *initializer;
    Onnx__ValueInfoProto *info; /* type from graph input, output or value_info, or NULL */
    int32_t *consumers;         /* node positions, ascending, each node once */
    uint32_t n_consumers, cap_consumers;
} rk_value;

typedef struct rk_graph {
    ropekit_model *model; /* for external data; may be NULL */
    Onnx__GraphProto *g;
    rk_value *values;
    size_t n_values, cap_values;
    uint32_t *slots; /* open addressing: value index + 1, 0 = empty */
    size_t n_slots;
} rk_graph;

/* Build the index of g (the model's main graph when g is NULL). Fails with
 * ROPEKIT_ERROR_PARSE on a dangling reference or a value defined twice. */
ropekit_status rk_graph_open(ropekit_model *m, Onnx__GraphProto *g, rk_graph **out);
void rk_graph_close(rk_graph *ix);
/* Rebuild after the graph was changed other than through the rk_graph_* edits. */
ropekit_status rk_graph_refresh(rk_graph *ix);

const rk_value *rk_graph_value(const rk_graph *ix, const char *name);
Onnx__NodeProto *rk_graph_producer(const rk_graph *ix, const char *name);
/* Shape of a value, from graph inputs/outputs/value_info, an initializer or a Constant.
 * rank -1 when unknown; dims[i] = -1 for symbolic or unknown dimensions. */
#define RK_SHAPE_MAX_RANK 16
typedef struct rk_shape {
    int32_t elem_type; /* 0 when unknown */
    int32_t rank;
    int64_t dims[RK_SHAPE_MAX_RANK];
} rk_shape;
void rk_graph_shape(const rk_graph *ix, const char *name, rk_shape *out);

/* A constant: a top-level initializer that is not also a graph input (a graph input can be
 * overridden at run time), or the output of a Constant node (value, value_float(s),
 * value_int(s)). Reads up to cap elements; ROPEKIT_ERROR_INVALID_ATTRIBUTE if `name` is not a
 * constant. */
ropekit_status rk_graph_const_i64(const rk_graph *ix, const char *name, int64_t *out, size_t cap,
                                  size_t *count);
ropekit_status rk_graph_const_f64(const rk_graph *ix, const char *name, double *out, size_t cap,
                                  size_t *count);

/* Remove the nodes at the given positions (INVALID_ATTRIBUTE, nothing changed, if a node not
 * being removed still reads one of their outputs, or an output is a graph output), then every node
 * that thereby lost its last consumer (outputs unused and not graph outputs, repeatedly), and
 * initializers and value_info entries of values nothing uses any more (initializers that are graph
 * inputs stay). Values used inside subgraphs count as used. Other nodes keep their order. Frees the
 * removed messages; node pointers and positions from before the call are invalid afterwards.
 * *n_removed (optional) gets the number of nodes removed. */
ropekit_status rk_graph_remove_nodes(rk_graph *ix, const int32_t *positions, size_t n,
                                     size_t *n_removed);
/* Insert `node` (ownership passes to the graph, also on failure) where the graph stays
 * topologically sorted: after the producers of its inputs (and of the outer names its
 * subgraphs read); at position `hint` when that is late enough (pass the position of the node
 * it replaces, to keep the original order), else right after the last of those producers.
 * Its outputs must be new names (PARSE otherwise, or if an input is undefined); connect them
 * with rk_graph_replace_uses. *pos (optional) gets the position. */
ropekit_status rk_graph_insert_node(rk_graph *ix, Onnx__NodeProto *node, int32_t hint,
                                    int32_t *pos);
/* Make every use of `from` (node inputs, subgraph references) read `to` instead. `from` must
 * not be a graph output (UNSUPPORTED), and every reader must come after the producer of `to`
 * (INVALID_ATTRIBUTE; nothing changed). */
ropekit_status rk_graph_replace_uses(rk_graph *ix, const char *from, const char *to);
/* Add an initializer (ownership passes to the graph, also on failure); PARSE if the name is
 * already defined. */
ropekit_status rk_graph_add_initializer(rk_graph *ix, Onnx__TensorProto *t);
/* A value name starting with `base` that is not defined in the graph (malloc'd, or NULL). */
char *rk_graph_unique_name(const rk_graph *ix, const char *base);

/* The model's opset version for `domain` ("" and "ai.onnx" are the same), -1 if not imported. */
int64_t rk_model_opset(const Onnx__ModelProto *m, const char *domain);
/* Import `domain` at `version` unless the model already imports that domain (any version). */
ropekit_status rk_model_import_opset(Onnx__ModelProto *m, const char *domain, int64_t version);

/* ---- building messages (malloc'd, freed by protobuf_c_message_free_unpacked) --------------- */
char *rk_strdup(const char *s);
Onnx__NodeProto *rk_new_node(const char *op_type, const char *domain, const char *name,
                             const char *const *inputs, size_t n_inputs, const char *const *outputs,
                             size_t n_outputs);
ropekit_status rk_node_add_attr_int(Onnx__NodeProto *n, const char *name, int64_t v);
ropekit_status rk_node_add_attr_float(Onnx__NodeProto *n, const char *name, float v);
ropekit_status rk_node_add_attr_ints(Onnx__NodeProto *n, const char *name, const int64_t *v,
                                     size_t count);
/* A tensor with raw_data (little-endian bytes, copied). */
Onnx__TensorProto *rk_new_tensor(const char *name, int32_t data_type, const int64_t *dims,
                                 size_t rank, const void *raw, size_t raw_size);
const Onnx__AttributeProto *rk_node_attr(const Onnx__NodeProto *n, const char *name);
void rk_node_free(Onnx__NodeProto *n);

/* ---- text output (src/onnx/text.c) ------------------------------------------------------------
 */
/* (rk_buf, the growing string, is in src/core/internal.h) */
/* s for people: printable ASCII and valid UTF-8 as is, other bytes as \xNN, '\\' doubled. */
void rk_buf_text_str(rk_buf *b, const char *s);
/* s as a JSON string literal (quotes included), valid UTF-8 (invalid bytes become U+FFFD). */
void rk_buf_json_str(rk_buf *b, const char *s);

/* ---- model internals ------------------------------------------------------------------------ */
/* Call fn on every graph of the model: the main graph, subgraphs of node attributes (depth
 * first), training graphs, and the nodes of model-local functions (as graph NULL, nodes given).
 * Used by validation and inspection; depth is bounded by RK_MAX_NESTING. */
typedef ropekit_status (*rk_graph_fn)(void *ctx, Onnx__GraphProto *g, int depth);
ropekit_status rk_model_for_each_graph(Onnx__ModelProto *m, rk_graph_fn fn, void *ctx);
/* op_type Constant in the default domain. */
int rk_is_constant_node(const Onnx__NodeProto *n);

#endif
