/* Model load / validate / serialize / save, and external tensor data. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx_internal.h"

/* ---- wire-format pre-check ---------------------------------------------------------------
 * protobuf-c's unpack is bounds-checked but recursive without a depth limit, so a file of
 * nested empty messages would exhaust the stack. This walk (bounded recursion) checks every
 * tag, length and the nesting depth of known message fields first, and gives errors with
 * byte offsets. */

typedef struct rk_wire {
    const uint8_t *base;
    const char *name;
} rk_wire;

static int rk_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return 1;
        }
    }
    return 0;
}

static ropekit_status rk_wire_check(const rk_wire *w, const uint8_t *p, const uint8_t *end,
                                    const ProtobufCMessageDescriptor *d, int depth) {
    if (depth > RK_MAX_NESTING)
        return rk_fail(ROPEKIT_ERROR_PARSE, "%s: messages nested deeper than %d at byte %zu",
                       w->name, RK_MAX_NESTING, (size_t)(p - w->base));
    while (p < end) {
        size_t at = (size_t)(p - w->base);
        uint64_t key, v;
        if (!rk_varint(&p, end, &key))
            return rk_fail(ROPEKIT_ERROR_PARSE, "%s: truncated field tag at byte %zu", w->name, at);
        uint64_t field = key >> 3;
        if (field == 0 || field > 536870911u)
            return rk_fail(ROPEKIT_ERROR_PARSE, "%s: invalid field number %" PRIu64 " at byte %zu",
                           w->name, field, at);
        switch (key & 7) {
        case 0:
            if (!rk_varint(&p, end, &v))
                return rk_fail(ROPEKIT_ERROR_PARSE,
                               "%s: truncated varint (field %" PRIu64 ") at byte %zu", w->name,
                               field, at);
            break;
        case 1:
        case 5: {
            size_t need = (key & 7) == 1 ? 8 : 4;
            if ((size_t)(end - p) < need)
                return rk_fail(ROPEKIT_ERROR_PARSE,
                               "%s: truncated fixed-size field %" PRIu64 " at byte %zu", w->name,
                               field, at);
            p += need;
            break;
        }
        case 2: {
            if (!rk_varint(&p, end, &v))
                return rk_fail(ROPEKIT_ERROR_PARSE,
                               "%s: truncated length (field %" PRIu64 ") at byte %zu", w->name,
                               field, at);
            if (v > (uint64_t)(end - p))
                return rk_fail(ROPEKIT_ERROR_PARSE,
                               "%s: truncated: field %" PRIu64 " at byte %zu needs %" PRIu64
                               " bytes, %zu left",
                               w->name, field, at, v, (size_t)(end - p));
            const ProtobufCFieldDescriptor *f =
                d ? protobuf_c_message_descriptor_get_field(d, (unsigned)field) : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE)
                RK_TRY(rk_wire_check(w, p, p + v, f->descriptor, depth + 1));
            p += v;
            break;
        }
        default:
            return rk_fail(ROPEKIT_ERROR_PARSE,
                           "%s: unsupported wire type %u (field %" PRIu64 ") at byte %zu", w->name,
                           (unsigned)(key & 7), field, at);
        }
    }
    return ROPEKIT_OK;
}

/* ---- dtypes ------------------------------------------------------------------------------- */

/* TensorProto.DataType codes 0..26: name and bits per element (0: not fixed, e.g. strings). */
static const struct {
    const char *name;
    int bits;
} rk_dtypes[] = {{"undefined", 0},      {"float32", 32},   {"uint8", 8},
                 {"int8", 8},           {"uint16", 16},    {"int16", 16},
                 {"int32", 32},         {"int64", 64},     {"string", 0},
                 {"bool", 8},           {"float16", 16},   {"float64", 64},
                 {"uint32", 32},        {"uint64", 64},    {"complex64", 64},
                 {"complex128", 128},   {"bfloat16", 16},  {"float8e4m3fn", 8},
                 {"float8e4m3fnuz", 8}, {"float8e5m2", 8}, {"float8e5m2fnuz", 8},
                 {"uint4", 4},          {"int4", 4},       {"float4e2m1", 4},
                 {"float8e8m0", 8},     {"uint2", 2},      {"int2", 2}};

const char *rk_dtype_name(int32_t t) {
    if (t < 0 || (size_t)t >= sizeof rk_dtypes / sizeof rk_dtypes[0]) return "?";
    return rk_dtypes[t].name;
}

int rk_dtype_bits(int32_t t) {
    if (t < 0 || (size_t)t >= sizeof rk_dtypes / sizeof rk_dtypes[0]) return 0;
    return rk_dtypes[t].bits; /* unknown codes (6-bit floats, newer types): size not checked */
}

/* ---- tensors ------------------------------------------------------------------------------ */

int64_t rk_tensor_numel(const Onnx__TensorProto *t) {
    int64_t n = 1;
    for (size_t i = 0; i < t->n_dims; ++i)
        if (!rk_mul(n, t->dims[i], &n)) return -1;
    return n;
}

int rk_tensor_is_external(const Onnx__TensorProto *t) {
    return t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
}

const char *rk_tensor_external(const Onnx__TensorProto *t, const char *key) {
    for (size_t i = 0; i < t->n_external_data; ++i) {
        const Onnx__StringStringEntryProto *e = t->external_data[i];
        if (e && e->key && e->value && strcmp(e->key, key) == 0) return e->value;
    }
    return NULL;
}

/* Expected byte size of the data of n elements of type dt, or -1 when the size is not fixed. */
static int64_t rk_data_bytes(int32_t dt, int64_t n) {
    int bits = rk_dtype_bits(dt);
    if (bits == 0) return -1;
    int64_t total;
    if (!rk_mul(n, bits, &total)) return -2;
    return total / 8 + (total % 8 != 0);
}

static int rk_parse_u64(const char *s, int64_t *out) {
    if (!s || !*s) return 0;
    int64_t v = 0;
    for (; *s; ++s) {
        if (*s < '0' || *s > '9') return 0;
        if (!rk_mul(v, 10, &v) || !rk_add(v, *s - '0', &v)) return 0;
    }
    *out = v;
    return 1;
}

/* Checks one tensor: dims, data sizes, external data entries. */
static ropekit_status rk_validate_tensor(const char *model, const Onnx__TensorProto *t,
                                         const char *what) {
    const char *name = rk_s(t->name);
    int64_t n = 1;
    for (size_t i = 0; i < t->n_dims; ++i) {
        if (t->dims[i] < 0)
            return rk_fail(ROPEKIT_ERROR_PARSE, "%s: %s '%s': dims[%zu] = %" PRId64 " is negative",
                           model, what, name, i, t->dims[i]);
        if (!rk_mul(n, t->dims[i], &n))
            return rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: %s '%s': element count overflows int64",
                           model, what, name);
    }
    int32_t dt = t->has_data_type ? t->data_type : 0;
    int64_t bytes = rk_data_bytes(dt, n);
    if (bytes == -2)
        return rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: %s '%s': byte size overflows int64", model,
                       what, name);
    if (rk_tensor_is_external(t)) {
        for (size_t i = 0; i < t->n_external_data; ++i) {
            const Onnx__StringStringEntryProto *e = t->external_data[i];
            if (!e || !e->key || !e->value)
                return rk_fail(ROPEKIT_ERROR_PARSE,
                               "%s: %s '%s': external_data[%zu] lacks a key "
                               "or value",
                               model, what, name, i);
        }
        const char *loc = rk_tensor_external(t, "location");
        if (!loc || !*loc)
            return rk_fail(ROPEKIT_ERROR_PARSE, "%s: %s '%s': external data without a location",
                           model, what, name);
        const char *keys[2] = {"offset", "length"};
        for (int k = 0; k < 2; ++k) {
            const char *s = rk_tensor_external(t, keys[k]);
            int64_t v;
            if (s && !rk_parse_u64(s, &v))
                return rk_fail(ROPEKIT_ERROR_PARSE,
                               "%s: %s '%s': external data %s '%s' is not a "
                               "non-negative integer",
                               model, what, name, keys[k], s);
        }
        const char *len = rk_tensor_external(t, "length");
        int64_t lv;
        if (len && bytes >= 0 && rk_parse_u64(len, &lv) && lv != bytes)
            return rk_fail(ROPEKIT_ERROR_PARSE,
                           "%s: %s '%s': external length %" PRId64
                           " but dims and type need %" PRId64 " bytes",
                           model, what, name, lv, bytes);
        return ROPEKIT_OK;
    }
    if (t->has_raw_data) {
        if (bytes >= 0 && (uint64_t)t->raw_data.len != (uint64_t)bytes)
            return rk_fail(ROPEKIT_ERROR_PARSE,
                           "%s: %s '%s': raw_data has %zu bytes, dims and type "
                           "(%s) need %" PRId64,
                           model, what, name, t->raw_data.len, rk_dtype_name(dt), bytes);
        return ROPEKIT_OK;
    }
    /* Typed fields: one value per element, two for the complex types. */
    size_t have = 0, fields = 0;
    int64_t want = n;
    const char *field = NULL;
    switch (dt) {
    case RK_DT_FLOAT:
    case RK_DT_COMPLEX64:
        have = t->n_float_data;
        field = "float_data";
        break;
    case RK_DT_INT32:
    case RK_DT_INT16:
    case RK_DT_INT8:
    case RK_DT_UINT16:
    case RK_DT_UINT8:
    case RK_DT_BOOL:
    case RK_DT_FLOAT16:
    case RK_DT_BFLOAT16:
        have = t->n_int32_data;
        field = "int32_data";
        break;
    case RK_DT_INT64:
        have = t->n_int64_data;
        field = "int64_data";
        break;
    case RK_DT_UINT32:
    case RK_DT_UINT64:
        have = t->n_uint64_data;
        field = "uint64_data";
        break;
    case RK_DT_DOUBLE:
    case RK_DT_COMPLEX128:
        have = t->n_double_data;
        field = "double_data";
        break;
    case RK_DT_STRING:
        have = t->n_string_data;
        field = "string_data";
        break;
    default: return ROPEKIT_OK;
    }
    if ((dt == RK_DT_COMPLEX64 || dt == RK_DT_COMPLEX128) && !rk_mul(n, 2, &want))
        return rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: %s '%s': element count overflows", model, what,
                       name);
    fields = (t->n_float_data > 0) + (t->n_int32_data > 0) + (t->n_int64_data > 0) +
             (t->n_uint64_data > 0) + (t->n_double_data > 0) + (t->n_string_data > 0);
    if ((uint64_t)have != (uint64_t)want || fields > 1)
        return rk_fail(ROPEKIT_ERROR_PARSE,
                       "%s: %s '%s' (%s, %" PRId64 " elements): %s has %zu "
                       "values, expected %" PRId64 "%s",
                       model, what, name, rk_dtype_name(dt), n, field, have, want,
                       fields > 1 ? " and no other data field" : "");
    return ROPEKIT_OK;
}

/* ---- walking every graph -------------------------------------------------------------------- */

typedef struct rk_walk {
    rk_graph_fn fn;
    void *ctx;
} rk_walk;

static ropekit_status rk_walk_graph(const rk_walk *w, Onnx__GraphProto *g, int depth);

static ropekit_status rk_walk_nodes(const rk_walk *w, Onnx__NodeProto **nodes, size_t n,
                                    int depth) {
    for (size_t i = 0; i < n; ++i) {
        Onnx__NodeProto *node = nodes[i];
        for (size_t a = 0; a < node->n_attribute; ++a) {
            Onnx__AttributeProto *at = node->attribute[a];
            if (at->g) RK_TRY(rk_walk_graph(w, at->g, depth + 1));
            for (size_t k = 0; k < at->n_graphs; ++k)
                RK_TRY(rk_walk_graph(w, at->graphs[k], depth + 1));
        }
    }
    return ROPEKIT_OK;
}

static ropekit_status rk_walk_graph(const rk_walk *w, Onnx__GraphProto *g, int depth) {
    RK_TRY(w->fn(w->ctx, g, depth));
    return rk_walk_nodes(w, g->node, g->n_node, depth);
}

ropekit_status rk_model_for_each_graph(Onnx__ModelProto *m, rk_graph_fn fn, void *ctx) {
    rk_walk w = {fn, ctx};
    if (m->graph) RK_TRY(rk_walk_graph(&w, m->graph, 0));
    for (size_t i = 0; i < m->n_training_info; ++i) {
        if (m->training_info[i]->initialization)
            RK_TRY(rk_walk_graph(&w, m->training_info[i]->initialization, 0));
        if (m->training_info[i]->algorithm)
            RK_TRY(rk_walk_graph(&w, m->training_info[i]->algorithm, 0));
    }
    for (size_t i = 0; i < m->n_functions; ++i) {
        /* a function body is a node list: wrap it in a transient graph view */
        Onnx__GraphProto view = ONNX__GRAPH_PROTO__INIT;
        view.n_node = m->functions[i]->n_node;
        view.node = m->functions[i]->node;
        view.name = m->functions[i]->name;
        RK_TRY(rk_walk_graph(&w, &view, 0));
    }
    return ROPEKIT_OK;
}

/* ---- validation ----------------------------------------------------------------------------- */

static ropekit_status rk_validate_attr_tensors(const char *model, const Onnx__AttributeProto *at) {
    if (at->t) RK_TRY(rk_validate_tensor(model, at->t, "attribute tensor"));
    for (size_t k = 0; k < at->n_tensors; ++k)
        RK_TRY(rk_validate_tensor(model, at->tensors[k], "attribute tensor"));
    const Onnx__SparseTensorProto *sp[1] = {at->sparse_tensor};
    for (size_t k = 0; k < 1 + at->n_sparse_tensors; ++k) {
        const Onnx__SparseTensorProto *s = k == 0 ? sp[0] : at->sparse_tensors[k - 1];
        if (!s) continue;
        if (s->values) RK_TRY(rk_validate_tensor(model, s->values, "sparse values"));
        if (s->indices) RK_TRY(rk_validate_tensor(model, s->indices, "sparse indices"));
    }
    return ROPEKIT_OK;
}

static ropekit_status rk_validate_graph(void *ctx, Onnx__GraphProto *g, int depth) {
    const char *model = ctx;
    (void)depth;
    for (size_t i = 0; i < g->n_initializer; ++i)
        RK_TRY(rk_validate_tensor(model, g->initializer[i], "initializer"));
    for (size_t i = 0; i < g->n_sparse_initializer; ++i) {
        const Onnx__SparseTensorProto *s = g->sparse_initializer[i];
        if (!s->values)
            return rk_fail(ROPEKIT_ERROR_PARSE, "%s: sparse initializer %zu has no values", model,
                           i);
        RK_TRY(rk_validate_tensor(model, s->values, "sparse initializer"));
        if (s->indices) RK_TRY(rk_validate_tensor(model, s->indices, "sparse indices"));
    }
    for (size_t i = 0; i < g->n_node; ++i) {
        const Onnx__NodeProto *n = g->node[i];
        if (!n->op_type || !*n->op_type)
            return rk_fail(ROPEKIT_ERROR_PARSE, "%s: graph '%s' node %zu ('%s') has no op_type",
                           model, rk_s(g->name), i, rk_s(n->name));
        for (size_t a = 0; a < n->n_attribute; ++a) {
            if (!n->attribute[a]->name)
                return rk_fail(ROPEKIT_ERROR_PARSE,
                               "%s: node '%s' (%s) has an attribute without a "
                               "name",
                               model, rk_s(n->name), n->op_type);
            RK_TRY(rk_validate_attr_tensors(model, n->attribute[a]));
        }
    }
    const Onnx__ValueInfoProto *const *lists[3] = {
        (const Onnx__ValueInfoProto *const *)g->input,
        (const Onnx__ValueInfoProto *const *)g->output,
        (const Onnx__ValueInfoProto *const *)g->value_info};
    size_t counts[3] = {g->n_input, g->n_output, g->n_value_info};
    for (int l = 0; l < 3; ++l)
        for (size_t i = 0; i < counts[l]; ++i)
            if (!lists[l][i]->name)
                return rk_fail(ROPEKIT_ERROR_PARSE, "%s: graph '%s' has a %s without a name", model,
                               rk_s(g->name),
                               l == 0   ? "graph input"
                               : l == 1 ? "graph output"
                                        : "value_info");
    return ROPEKIT_OK;
}

static ropekit_status rk_model_validate(const char *name, Onnx__ModelProto *m) {
    if (!m->graph) return rk_fail(ROPEKIT_ERROR_PARSE, "%s: the model has no graph", name);
    for (size_t i = 0; i < m->n_opset_import; ++i)
        if (!m->opset_import[i]->has_version)
            return rk_fail(ROPEKIT_ERROR_PARSE, "%s: opset_import[%zu] ('%s') has no version", name,
                           i, rk_s(m->opset_import[i]->domain));
    return rk_model_for_each_graph(m, rk_validate_graph, (void *)name);
}

/* ---- load ----------------------------------------------------------------------------------- */

static ropekit_status rk_model_parse(const uint8_t *data, size_t size, const char *name,
                                     ropekit_model *m) {
    if (size > RK_MAX_MODEL_BYTES)
        return rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: %zu bytes is over the 2 GiB protobuf limit",
                       name, size);
    /* the wire-format walk names the field and byte; say first what that means */
    rk_wire w = {data, "not an ONNX model (or a damaged one)"};
    ropekit_status s = rk_wire_check(&w, data, data + size, &onnx__model_proto__descriptor, 0);
    if (s != ROPEKIT_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", ropekit_last_error());
        return rk_fail(s, "%s: %s", name, detail);
    }
    m->proto = onnx__model_proto__unpack(NULL, size, data);
    if (!m->proto)
        return rk_fail(ROPEKIT_ERROR_PARSE,
                       "%s: not a valid ONNX model (protobuf-c could not unpack it)", name);
    if (!m->proto->graph && !m->proto->has_ir_version && m->proto->n_opset_import == 0)
        return rk_fail(ROPEKIT_ERROR_PARSE,
                       "%s: not an ONNX model: %s (no graph, ir_version or opset_import)", name,
                       size == 0 ? "the file is empty" : "no ModelProto fields");
    return rk_model_validate(name, m->proto);
}

static ropekit_status rk_model_new(const char *name, const char *dir, ropekit_model **out) {
    ropekit_model *m = calloc(1, sizeof *m);
    if (!m) return RK_OOM();
    m->name = rk_strdup(name);
    m->dir = dir ? rk_strdup(dir) : NULL;
    if (!m->name || (dir && !m->dir)) {
        ropekit_model_free(m);
        return RK_OOM();
    }
    *out = m;
    return ROPEKIT_OK;
}

ropekit_status ropekit_model_load_from_memory(const void *data, size_t size, const char *base_dir,
                                              ropekit_model **out) {
    if (!out) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "out is NULL");
    *out = NULL;
    if (!data && size) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "data is NULL");
    ropekit_model *m = NULL;
    RK_TRY(rk_model_new("<memory>", base_dir, &m));
    ropekit_status s = rk_model_parse(data ? data : (const void *)"", size, m->name, m);
    if (s != ROPEKIT_OK) {
        ropekit_model_free(m);
        return s;
    }
    rk_clear_error();
    *out = m;
    return ROPEKIT_OK;
}

static char *rk_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return rk_strdup(".");
    if (slash == path) return rk_strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = '\0';
    }
    return d;
}

/* dir + "/" + name, malloc'd */
static char *rk_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

ropekit_status ropekit_model_load(const char *path, ropekit_model **out) {
    if (!out) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "out is NULL");
    *out = NULL;
    if (!path) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return rk_fail(ROPEKIT_ERROR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return rk_fail(ROPEKIT_ERROR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return rk_fail(ROPEKIT_ERROR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > RK_MAX_MODEL_BYTES) {
        close(fd);
        return rk_fail(ROPEKIT_ERROR_OVERFLOW,
                       "%s: %" PRIu64 " bytes is over the 2 GiB protobuf "
                       "limit (large models keep their weights in external data)",
                       path, (uint64_t)st.st_size);
    }
    /* read(), not mmap(): a file shortened while we parse gives a short read (a parse error),
     * never SIGBUS */
    size_t size = (size_t)st.st_size, got = 0;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "%s: out of memory (%zu bytes)", path, size);
    }
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got > (1u << 30) ? (1u << 30) : size - got);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return rk_fail(ROPEKIT_ERROR_IO, "%s: read: %s", path, strerror(e));
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    close(fd);
    char *dir = rk_dirname(path);
    ropekit_model *m = NULL;
    ropekit_status s = dir ? rk_model_new(path, dir, &m) : RK_OOM();
    free(dir);
    if (s == ROPEKIT_OK) {
        s = rk_model_parse(buf, got, path, m);
        m->has_id = 1;
        m->dev = st.st_dev;
        m->ino = st.st_ino;
    }
    free(buf);
    if (s != ROPEKIT_OK) {
        ropekit_model_free(m);
        return s;
    }
    rk_clear_error();
    *out = m;
    return ROPEKIT_OK;
}

void ropekit_model_free(ropekit_model *m) {
    if (!m) return;
    if (m->proto) protobuf_c_message_free_unpacked(&m->proto->base, NULL);
    free(m->dir);
    free(m->name);
    free(m);
}

void ropekit_onnx_free(void *p) {
    free(p);
}

/* ---- serialize / save ----------------------------------------------------------------------- */

static ropekit_status rk_packed_size(const ropekit_model *m, size_t *size) {
    size_t n = onnx__model_proto__get_packed_size(m->proto);
    if (n > RK_MAX_MODEL_BYTES)
        return rk_fail(ROPEKIT_ERROR_OVERFLOW,
                       "the model would be %zu bytes, over the 2 GiB "
                       "protobuf limit; move initializers to external data",
                       n);
    *size = n;
    return ROPEKIT_OK;
}

ropekit_status ropekit_model_serialize(const ropekit_model *m, void **data, size_t *size) {
    if (!m || !data || !size)
        return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "model, data and size must not be NULL");
    *data = NULL;
    *size = 0;
    size_t n = 0;
    RK_TRY(rk_packed_size(m, &n));
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory (%zu bytes)", n);
    size_t w = onnx__model_proto__pack(m->proto, buf);
    if (w != n) {
        free(buf);
        return rk_fail(ROPEKIT_ERROR_PARSE, "protobuf-c packed %zu bytes, expected %zu", w, n);
    }
    *data = buf;
    *size = n;
    return ROPEKIT_OK;
}

/* Does `path` name the same file as (dev, ino)? */
static int rk_same_file(const char *path, dev_t dev, ino_t ino) {
    struct stat st;
    return stat(path, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/* Same directory, by identity (so "a/b" and "./a/b" agree). */
static int rk_same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static const char *rk_file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "not a regular file";
}

/* The file a save replaces. Only regular files are ever replaced: a symbolic link to a regular
 * file is written through (the file it points to is replaced, the link stays); a dangling link,
 * a link to anything else, a directory, a device, a FIFO or a socket are refused. *real is the
 * path to write (malloc'd); *exists says whether it names a file now, whose stat is *st. */
static ropekit_status rk_resolve_dest(const char *path, char **real, struct stat *st, int *exists) {
    *real = NULL;
    *exists = 0;
    struct stat ls;
    if (lstat(path, &ls) != 0) {
        if (errno != ENOENT) return rk_fail(ROPEKIT_ERROR_IO, "%s: %s", path, strerror(errno));
        *real = rk_strdup(path);
        return *real ? ROPEKIT_OK : RK_OOM();
    }
    if (S_ISLNK(ls.st_mode)) {
        if (stat(path, st) != 0)
            return rk_fail(ROPEKIT_ERROR_IO,
                           "refusing to write %s: it is a %s symbolic link; only regular files "
                           "are replaced (nothing was written)",
                           path, errno == ENOENT ? "dangling" : "unresolvable");
        if (!S_ISREG(st->st_mode))
            return rk_fail(ROPEKIT_ERROR_IO,
                           "refusing to write %s: it is a symbolic link to %s; only regular "
                           "files are replaced (nothing was written)",
                           path, rk_file_kind(st->st_mode));
        char *r = realpath(path, NULL);
        if (!r) return rk_fail(ROPEKIT_ERROR_IO, "%s: %s", path, strerror(errno));
        *real = r;
        *exists = 1;
        return ROPEKIT_OK;
    }
    if (!S_ISREG(ls.st_mode))
        return rk_fail(ROPEKIT_ERROR_IO,
                       "refusing to write %s: it is %s; only regular files are replaced "
                       "(nothing was written)",
                       path, rk_file_kind(ls.st_mode));
    *st = ls;
    *exists = 1;
    *real = rk_strdup(path);
    return *real ? ROPEKIT_OK : RK_OOM();
}

/* ---- temporary files --------------------------------------------------------------------------
 * A save writes DIR/.ropekit-PID-N.tmp (a short hidden name: any output name that fits NAME_MAX
 * works) and renames it over the destination. The live ones are listed here so that
 * ropekit_onnx_remove_temp_files, called from a signal handler, can unlink them; leftovers of
 * processes that are gone (SIGKILL, a crash) are removed by the next save into that directory. */

#define RK_TMP_SLOTS 32
#define RK_TMP_PREFIX ".ropekit-"
#define RK_TMP_SUFFIX ".tmp"
static char rk_tmp_paths[RK_TMP_SLOTS][PATH_MAX];
static _Atomic int rk_tmp_state[RK_TMP_SLOTS]; /* 0 free, 1 being filled in, 2 live */

static int rk_tmp_register(const char *path) {
    if (strlen(path) >= PATH_MAX) return -1;
    for (int i = 0; i < RK_TMP_SLOTS; ++i) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&rk_tmp_state[i], &expect, 1)) {
            strcpy(rk_tmp_paths[i], path);
            atomic_store(&rk_tmp_state[i], 2);
            return i;
        }
    }
    return -1; /* not listed: a signal leaves it, the next save removes it */
}

/* A listed slot names another path (the next name tried after EEXIST). */
static void rk_tmp_relist(int slot, const char *path) {
    if (slot < 0 || strlen(path) >= PATH_MAX) return;
    atomic_store(&rk_tmp_state[slot], 1);
    strcpy(rk_tmp_paths[slot], path);
    atomic_store(&rk_tmp_state[slot], 2);
}

static void rk_tmp_unregister(int slot) {
    if (slot >= 0) atomic_store(&rk_tmp_state[slot], 0);
}

void ropekit_onnx_remove_temp_files(void) {
    for (int i = 0; i < RK_TMP_SLOTS; ++i)
        if (atomic_load(&rk_tmp_state[i]) == 2) (void)unlink(rk_tmp_paths[i]);
}

/* The pid of a name RK_TMP_PREFIX digits "-" digits RK_TMP_SUFFIX, else 0. */
static long rk_tmp_name_pid(const char *name) {
    size_t np = strlen(RK_TMP_PREFIX);
    if (strncmp(name, RK_TMP_PREFIX, np) != 0) return 0;
    const char *p = name + np;
    long pid = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 10; ++p, ++digits)
        pid = pid * 10 + (*p - '0');
    if (!digits || *p != '-') return 0;
    ++p;
    for (digits = 0; *p >= '0' && *p <= '9' && digits < 10; ++p)
        ++digits;
    if (!digits || strcmp(p, RK_TMP_SUFFIX) != 0) return 0;
    return pid;
}

/* Remove the temporary files of dead processes in `dir` (best effort, never an error). */
static void rk_tmp_clean_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = rk_tmp_name_pid(e->d_name);
        if (pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to know */
        char *p = rk_join(dir, e->d_name);
        struct stat st;
        if (p && lstat(p, &st) == 0 && S_ISREG(st.st_mode)) (void)unlink(p);
        free(p);
    }
    closedir(d);
}

typedef struct rk_tmp {
    char *path;
    int fd, slot;
} rk_tmp;

/* A new temporary file in `dir`, mode `mode` (minus the umask). */
static ropekit_status rk_tmp_create(const char *dir, mode_t mode, const char *dest, rk_tmp *t) {
    static _Atomic unsigned counter;
    t->fd = -1;
    t->slot = -1;
    size_t n = strlen(dir) + 64;
    t->path = malloc(n);
    if (!t->path) return RK_OOM();
    for (int attempt = 0; t->fd < 0 && attempt < 100; ++attempt) {
        snprintf(t->path, n, "%s/" RK_TMP_PREFIX "%ld-%u" RK_TMP_SUFFIX, dir, (long)getpid(),
                 atomic_fetch_add(&counter, 1));
        /* listed before it exists: listed after open(), a signal in between left the file (an
         * unlink of a name not yet created, or of a stale one with this PID, is harmless) */
        if (t->slot < 0)
            t->slot = rk_tmp_register(t->path);
        else
            rk_tmp_relist(t->slot, t->path);
        t->fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        if (t->fd < 0 && errno != EEXIST) break;
    }
    if (t->fd < 0) {
        int err = errno;
        rk_tmp_unregister(t->slot);
        t->slot = -1;
        ropekit_status s = rk_fail(ROPEKIT_ERROR_IO, "%s: cannot create a temporary file in %s: %s",
                                   dest, dir, strerror(err));
        free(t->path);
        t->path = NULL;
        return s;
    }
    return ROPEKIT_OK;
}

/* Remove (on failure) or forget (after the rename) a temporary file. */
static void rk_tmp_drop(rk_tmp *t, int remove) {
    if (t->fd >= 0) close(t->fd);
    t->fd = -1;
    if (t->path) {
        rk_tmp_unregister(t->slot);
        if (remove) unlink(t->path);
    }
    free(t->path);
    t->path = NULL;
}

static ropekit_status rk_write_all(int fd, const uint8_t *p, size_t n, const char *tmp) {
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return rk_fail(ROPEKIT_ERROR_IO, "%s: write: %s", tmp, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return ROPEKIT_OK;
}

/* Keep the replaced file's mode bits, and its owner and group where the process may. */
static void rk_keep_owner_mode(int fd, const struct stat *old) {
    struct stat now;
    if (fstat(fd, &now) != 0) return;
    if (now.st_uid != old->st_uid || now.st_gid != old->st_gid)
        (void)fchown(fd, old->st_uid, old->st_gid); /* EPERM: stays ours */
    (void)fchmod(fd, old->st_mode & 07777);         /* after chown, which clears set-id bits */
}

/* fsync, close; then rename over `dest`. */
static ropekit_status rk_tmp_commit(rk_tmp *t, const char *dest) {
    ropekit_status s = ROPEKIT_OK;
    if (fsync(t->fd) != 0) s = rk_fail(ROPEKIT_ERROR_IO, "%s: fsync: %s", t->path, strerror(errno));
    if (close(t->fd) != 0 && s == ROPEKIT_OK)
        s = rk_fail(ROPEKIT_ERROR_IO, "%s: close: %s", t->path, strerror(errno));
    t->fd = -1;
    if (s == ROPEKIT_OK && rename(t->path, dest) != 0)
        s = rk_fail(ROPEKIT_ERROR_IO, "%s: rename to %s: %s", t->path, dest, strerror(errno));
    rk_tmp_drop(t, s != ROPEKIT_OK);
    return s;
}

/* ---- what a save writes -------------------------------------------------------------------- */

typedef struct rk_ext_scan {
    const ropekit_model *m;
    const char *dest, *data_dest;
    struct stat dest_st, data_st;
    int dest_exists, data_exists;
    int has_external;        /* anywhere */
    int has_nested_external; /* outside the main graph's initializers */
} rk_ext_scan;

static ropekit_status rk_check_ext_tensor(rk_ext_scan *s, const Onnx__TensorProto *t, int top) {
    if (!t || !rk_tensor_is_external(t)) return ROPEKIT_OK;
    s->has_external = 1;
    if (!top) s->has_nested_external = 1;
    if (!s->m->dir) return ROPEKIT_OK;
    const char *loc = rk_tensor_external(t, "location");
    char *p = rk_join(s->m->dir, loc);
    if (!p) return RK_OOM();
    int same = s->dest_exists && rk_same_file(p, s->dest_st.st_dev, s->dest_st.st_ino);
    int same_data = s->data_exists && rk_same_file(p, s->data_st.st_dev, s->data_st.st_ino);
    free(p);
    if (same || same_data)
        return rk_fail(ROPEKIT_ERROR_IO,
                       "refusing to write %s: it is the external data file '%s' of the input "
                       "model",
                       same ? s->dest : s->data_dest, loc);
    return ROPEKIT_OK;
}

static ropekit_status rk_check_ext_graph(void *ctx, Onnx__GraphProto *g, int depth) {
    rk_ext_scan *s = ctx;
    int top = depth == 0 && g == s->m->proto->graph;
    for (size_t i = 0; i < g->n_initializer; ++i)
        RK_TRY(rk_check_ext_tensor(s, g->initializer[i], top));
    for (size_t i = 0; i < g->n_sparse_initializer; ++i) {
        RK_TRY(rk_check_ext_tensor(s, g->sparse_initializer[i]->values, 0));
        RK_TRY(rk_check_ext_tensor(s, g->sparse_initializer[i]->indices, 0));
    }
    for (size_t i = 0; i < g->n_node; ++i)
        for (size_t a = 0; a < g->node[i]->n_attribute; ++a) {
            const Onnx__AttributeProto *at = g->node[i]->attribute[a];
            RK_TRY(rk_check_ext_tensor(s, at->t, 0));
            for (size_t k = 0; k < at->n_tensors; ++k)
                RK_TRY(rk_check_ext_tensor(s, at->tensors[k], 0));
        }
    return ROPEKIT_OK;
}

/* The model as it is written: a shallow copy of the proto whose moved initializers are copies
 * pointing into the new data file. Nothing of the model itself is changed. */
typedef struct rk_save_view {
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__TensorProto **inits;
    Onnx__TensorProto *copies;
    Onnx__StringStringEntryProto *entries; /* 3 per copy */
    Onnx__StringStringEntryProto **entry_ptrs;
    char (*numbers)[2][24];
    const Onnx__TensorProto **sources; /* the model's tensor for each copy */
    size_t n_moved;
} rk_save_view;

static void rk_save_view_free(rk_save_view *v) {
    free(v->inits);
    free(v->copies);
    free(v->entries);
    free(v->entry_ptrs);
    free(v->numbers);
    free(v->sources);
}

static int rk_moves(const Onnx__TensorProto *t, int move_external, int64_t min_bytes) {
    if (rk_tensor_is_external(t)) return move_external;
    return min_bytes > 0 && t->has_raw_data && (int64_t)t->raw_data.len >= min_bytes;
}

/* Plan the view and write the data file's bytes to `fd`. `loc` is the data file's name. */
static ropekit_status rk_save_view_build(const ropekit_model *m, int move_external,
                                         int64_t min_bytes, const char *loc, rk_save_view *v) {
    memset(v, 0, sizeof *v);
    v->model = *m->proto;
    v->graph = *m->proto->graph;
    v->model.graph = &v->graph;
    const Onnx__GraphProto *g = m->proto->graph;
    size_t n = g->n_initializer, k = 0;
    for (size_t i = 0; i < n; ++i)
        k += (size_t)rk_moves(g->initializer[i], move_external, min_bytes);
    if (k == 0) return ROPEKIT_OK;
    v->inits = malloc(n * sizeof *v->inits);
    v->copies = calloc(k, sizeof *v->copies);
    v->entries = calloc(3 * k, sizeof *v->entries);
    v->entry_ptrs = calloc(3 * k, sizeof *v->entry_ptrs);
    v->numbers = calloc(k, sizeof *v->numbers);
    v->sources = calloc(k, sizeof *v->sources);
    if (!v->inits || !v->copies || !v->entries || !v->entry_ptrs || !v->numbers || !v->sources)
        return RK_OOM();
    for (size_t i = 0, j = 0; i < n; ++i) {
        Onnx__TensorProto *t = g->initializer[i];
        v->inits[i] = t;
        if (!rk_moves(t, move_external, min_bytes)) continue;
        Onnx__TensorProto *c = &v->copies[j];
        *c = *t;
        c->has_raw_data = 0;
        c->raw_data.len = 0;
        c->raw_data.data = NULL;
        c->has_data_location = 1;
        c->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
        c->n_external_data = 3;
        c->external_data = &v->entry_ptrs[3 * j];
        for (int e = 0; e < 3; ++e) {
            onnx__string_string_entry_proto__init(&v->entries[3 * j + e]);
            v->entry_ptrs[3 * j + e] = &v->entries[3 * j + e];
        }
        v->entries[3 * j].key = "location";
        v->entries[3 * j].value = (char *)loc;
        v->entries[3 * j + 1].key = "offset";
        v->entries[3 * j + 1].value = v->numbers[j][0];
        v->entries[3 * j + 2].key = "length";
        v->entries[3 * j + 2].value = v->numbers[j][1];
        v->sources[j] = t;
        v->inits[i] = c;
        ++j;
    }
    v->graph.initializer = v->inits;
    v->n_moved = k;
    return ROPEKIT_OK;
}

/* Write the moved tensors' bytes to fd (offsets aligned) and fill in their offsets/lengths. */
static ropekit_status rk_save_view_write_data(const ropekit_model *m, rk_save_view *v, rk_tmp *t,
                                              int64_t *total) {
    static const uint8_t zeros[4096];
    int64_t off = 0;
    for (size_t j = 0; j < v->n_moved; ++j) {
        ropekit_tensor_bytes b;
        RK_TRY(rk_tensor_bytes(m, v->sources[j], &b));
        int64_t align = b.size >= 4096 ? 4096 : 16;
        int64_t pad = (align - off % align) % align;
        ropekit_status s = rk_write_all(t->fd, zeros, (size_t)pad, t->path);
        off += pad;
        if (s == ROPEKIT_OK) s = rk_write_all(t->fd, b.data, b.size, t->path);
        snprintf(v->numbers[j][0], sizeof v->numbers[j][0], "%" PRId64, off);
        snprintf(v->numbers[j][1], sizeof v->numbers[j][1], "%zu", b.size);
        off += (int64_t)b.size;
        ropekit_tensor_bytes_release(&b);
        RK_TRY(s);
    }
    *total = off;
    return ROPEKIT_OK;
}

ropekit_status ropekit_model_save(const ropekit_model *m, const char *path) {
    return ropekit_model_save_with(m, path, NULL);
}

ropekit_status ropekit_model_save_with(const ropekit_model *m, const char *path,
                                       const ropekit_save_options *options) {
    if (!m || !path) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "model and path must not be NULL");
    if (!*path) return rk_fail(ROPEKIT_ERROR_IO, "the output path is empty");
    int64_t min_bytes = options ? options->external_min_bytes : 0;
    if (min_bytes < 0)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE,
                       "external_min_bytes = %" PRId64 " is negative", min_bytes);
    char *real = NULL, *dir = NULL, *data_path = NULL;
    const char *base;
    struct stat dest_st, data_st;
    memset(&dest_st, 0, sizeof dest_st);
    memset(&data_st, 0, sizeof data_st);
    int exists = 0, data_exists = 0;
    rk_save_view view;
    memset(&view, 0, sizeof view);
    rk_tmp mt = {NULL, -1, -1}, dt = {NULL, -1, -1};
    void *data = NULL;
    ropekit_status s = rk_resolve_dest(path, &real, &dest_st, &exists);
    if (s != ROPEKIT_OK) goto done;
    if (m->has_id && exists && dest_st.st_dev == m->dev && dest_st.st_ino == m->ino) {
        s = rk_fail(ROPEKIT_ERROR_IO, "refusing to overwrite the input model %s", path);
        goto done;
    }
    dir = rk_dirname(real);
    base = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
    if (!dir || !(data_path = malloc(strlen(real) + 8))) {
        s = RK_OOM();
        goto done;
    }
    sprintf(data_path, "%s.data", real);
    struct stat dls;
    if (lstat(data_path, &dls) == 0) {
        data_exists = 1;
        data_st = dls;
    }
    rk_ext_scan scan = {m, path, data_path, dest_st, data_st, exists, data_exists, 0, 0};
    if ((s = rk_model_for_each_graph(m->proto, rk_check_ext_graph, &scan)) != ROPEKIT_OK) goto done;
    /* External data: references stay valid when the output is beside the input; otherwise every
     * external tensor is copied into OUT.data beside the output (never a reference across
     * directories). Inline initializers of at least min_bytes go there too. */
    int move_external = scan.has_external && !(m->dir && rk_same_dir(dir, m->dir));
    if (move_external && scan.has_nested_external) {
        s = rk_fail(ROPEKIT_ERROR_UNSUPPORTED,
                    "the model keeps tensors of subgraphs, Constant nodes or sparse initializers "
                    "in external data files relative to %s; write the output in that directory, "
                    "not %s",
                    m->dir ? m->dir : "(unknown)", dir);
        goto done;
    }
    if (move_external && !m->dir) {
        s = rk_fail(ROPEKIT_ERROR_IO, "the model has external data but was loaded from memory "
                                      "without a directory: its tensors cannot be copied");
        goto done;
    }
    if ((s = rk_save_view_build(m, move_external, min_bytes, "", &view)) != ROPEKIT_OK) goto done;
    char *loc = NULL;
    if (view.n_moved) {
        if (strlen(base) + 5 > NAME_MAX) {
            s = rk_fail(ROPEKIT_ERROR_IO,
                        "%s: the name is too long for its external data file "
                        "'%s.data' (at most %d bytes)",
                        path, base, NAME_MAX);
            goto done;
        }
        if (data_exists && !S_ISREG(data_st.st_mode)) {
            s = rk_fail(ROPEKIT_ERROR_IO,
                        "refusing to write the external data file %s: it is %s; only regular "
                        "files are replaced (nothing was written)",
                        data_path, rk_file_kind(data_st.st_mode));
            goto done;
        }
        loc = strrchr(data_path, '/') ? strrchr(data_path, '/') + 1 : data_path;
        for (size_t j = 0; j < 3 * view.n_moved; j += 3)
            view.entries[j].value = loc;
    }
    size_t size = onnx__model_proto__get_packed_size(&view.model);
    if (size > RK_MAX_MODEL_BYTES) {
        s = rk_fail(ROPEKIT_ERROR_OVERFLOW,
                    "%s: the model would be %zu bytes, over the 2 GiB protobuf limit; keep its "
                    "large tensors in external data (ropekit fuse --external-data, "
                    "ropekit_save_options.external_min_bytes)",
                    path, size);
        goto done;
    }
    if (!(data = malloc(size ? size : 1))) {
        s = rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory (%zu bytes)", size);
        goto done;
    }
    rk_tmp_clean_stale(dir);
    /* A replaced file keeps its mode from the start (never wider in between), else 0666 minus
     * the umask (applied by the kernel: no umask() calls, which would race with threads). */
    mode_t mode = exists ? (dest_st.st_mode & 0777) : 0666;
    if (view.n_moved) {
        mode_t dmode = data_exists ? (data_st.st_mode & 0777) : mode;
        if ((s = rk_tmp_create(dir, dmode, data_path, &dt)) != ROPEKIT_OK) goto done;
        if (data_exists) rk_keep_owner_mode(dt.fd, &data_st);
        int64_t total = 0;
        if ((s = rk_save_view_write_data(m, &view, &dt, &total)) != ROPEKIT_OK) goto done;
        size = onnx__model_proto__get_packed_size(&view.model); /* offsets are written now */
        if (size > RK_MAX_MODEL_BYTES) {
            s = rk_fail(ROPEKIT_ERROR_OVERFLOW, "%s: over the 2 GiB protobuf limit", path);
            goto done;
        }
        void *d2 = realloc(data, size ? size : 1);
        if (!d2) {
            s = RK_OOM();
            goto done;
        }
        data = d2;
    }
    size_t w = onnx__model_proto__pack(&view.model, data);
    if (w != size) {
        s = rk_fail(ROPEKIT_ERROR_PARSE, "protobuf-c packed %zu bytes, expected %zu", w, size);
        goto done;
    }
    if ((s = rk_tmp_create(dir, mode, path, &mt)) != ROPEKIT_OK) goto done;
    if (exists) rk_keep_owner_mode(mt.fd, &dest_st);
    if ((s = rk_write_all(mt.fd, data, size, mt.path)) != ROPEKIT_OK) goto done;
    /* the data file first: the model never names bytes that are not there yet */
    if (dt.path && (s = rk_tmp_commit(&dt, data_path)) != ROPEKIT_OK) goto done;
    if ((s = rk_tmp_commit(&mt, real)) != ROPEKIT_OK) goto done;
    /* make the renames durable; failure to sync the directory is not fatal */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    rk_clear_error();
done:
    rk_tmp_drop(&mt, 1);
    rk_tmp_drop(&dt, 1);
    rk_save_view_free(&view);
    free(data);
    free(data_path);
    free(dir);
    free(real);
    return s;
}

/* ---- tensor bytes, external data --------------------------------------------------------------
 */

const char *rk_location_problem(const char *loc) {
    if (!loc || !*loc) return "has no location";
    if (loc[0] == '/') return "is an absolute path";
    int depth = 0;
    const char *p = loc;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0) return "leaves the model directory";
        } else if (n > 0 && !(n == 1 && p[0] == '.')) {
            ++depth;
        }
        p += n + (e != NULL);
    }
    return depth == 0 ? "is not a file name" : NULL;
}

/* A location must be relative and stay inside the model directory, judged on its text. */
static ropekit_status rk_check_location(const Onnx__TensorProto *t, const char *loc) {
    const char *why = rk_location_problem(loc);
    if (why)
        return rk_fail(ROPEKIT_ERROR_PARSE, "tensor '%s': external data location %s: '%s'",
                       rk_s(t->name), why, loc);
    return ROPEKIT_OK;
}

/* Messages put the cause before the directory, which can be long. */
ropekit_status rk_tensor_bytes(const ropekit_model *m, const Onnx__TensorProto *t,
                               ropekit_tensor_bytes *out) {
    memset(out, 0, sizeof *out);
    const char *name = rk_s(t->name);
    if (!rk_tensor_is_external(t)) {
        if (!t->has_raw_data)
            return rk_fail(ROPEKIT_ERROR_UNSUPPORTED,
                           "tensor '%s' keeps its values in typed "
                           "fields, not raw bytes",
                           name);
        out->data = t->raw_data.data;
        out->size = t->raw_data.len;
        return ROPEKIT_OK;
    }
    const char *loc = rk_tensor_external(t, "location");
    if (!m || !m->dir)
        return rk_fail(ROPEKIT_ERROR_IO,
                       "tensor '%s' is in external file '%s' but the model has "
                       "no directory (loaded from memory)",
                       name, loc);
    RK_TRY(rk_check_location(t, loc));
    int64_t offset = 0, length = -1;
    const char *s;
    if ((s = rk_tensor_external(t, "offset"))) rk_parse_u64(s, &offset); /* checked at load */
    if ((s = rk_tensor_external(t, "length"))) rk_parse_u64(s, &length);
    char *path = rk_join(m->dir, loc);
    if (!path) return RK_OOM();
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    if (fd < 0) {
        ropekit_status st =
            rk_fail(ROPEKIT_ERROR_IO, "tensor '%s': external data file '%s': %s (in %s)", name, loc,
                    strerror(errno), m->dir);
        free(path);
        return st;
    }
    struct stat st;
    ropekit_status r = ROPEKIT_OK;
    if (fstat(fd, &st) != 0)
        r = rk_fail(ROPEKIT_ERROR_IO, "tensor '%s': external data file '%s': %s (in %s)", name, loc,
                    strerror(errno), m->dir);
    else if (!S_ISREG(st.st_mode))
        r = rk_fail(ROPEKIT_ERROR_IO,
                    "tensor '%s': external data file '%s' is %s, not a regular file (in %s)", name,
                    loc, rk_file_kind(st.st_mode), m->dir);
    int64_t fsize = r == ROPEKIT_OK ? (int64_t)st.st_size : 0;
    if (r == ROPEKIT_OK) {
        if (length < 0) length = offset <= fsize ? fsize - offset : -1;
        int64_t end;
        if (length < 0 || !rk_add(offset, length, &end) || end > fsize)
            r = rk_fail(ROPEKIT_ERROR_PARSE,
                        "tensor '%s': external data offset %" PRId64 " + length %" PRId64
                        " is past the end of '%s' (%" PRId64 " bytes; in %s)",
                        name, offset, length < 0 ? 0 : length, loc, fsize, m->dir);
    }
    if (r == ROPEKIT_OK) {
        int64_t want = rk_data_bytes(t->has_data_type ? t->data_type : 0, rk_tensor_numel(t));
        if (want >= 0 && want != length)
            r = rk_fail(ROPEKIT_ERROR_PARSE,
                        "tensor '%s': %" PRId64 " bytes in '%s', dims and type need %" PRId64
                        " (in %s)",
                        name, length, loc, want, m->dir);
    }
    if (r == ROPEKIT_OK && length > 0) {
        long page = sysconf(_SC_PAGESIZE);
        int64_t base = offset - offset % (page > 0 ? page : 4096);
        size_t maplen = (size_t)(offset + length - base);
        void *map = mmap(NULL, maplen, PROT_READ, MAP_PRIVATE, fd, (off_t)base);
        if (map == MAP_FAILED) {
            r = rk_fail(ROPEKIT_ERROR_IO, "tensor '%s': mmap of '%s': %s (in %s)", name, loc,
                        strerror(errno), m->dir);
        } else {
            out->map_base_ = map;
            out->map_len_ = maplen;
            out->data = (const uint8_t *)map + (offset - base);
            out->size = (size_t)length;
        }
    }
    close(fd);
    free(path);
    return r;
}

void ropekit_tensor_bytes_release(ropekit_tensor_bytes *b) {
    if (!b) return;
    if (b->map_base_) munmap(b->map_base_, b->map_len_);
    memset(b, 0, sizeof *b);
}

ropekit_status ropekit_model_initializer_bytes(const ropekit_model *m, const char *name,
                                               ropekit_tensor_bytes *out) {
    if (!m || !name || !out)
        return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "model, name and out must not be NULL");
    memset(out, 0, sizeof *out);
    const Onnx__GraphProto *g = m->proto->graph;
    for (size_t i = 0; i < g->n_initializer; ++i)
        if (g->initializer[i]->name && strcmp(g->initializer[i]->name, name) == 0) {
            RK_TRY(rk_tensor_bytes(m, g->initializer[i], out));
            rk_clear_error();
            return ROPEKIT_OK;
        }
    return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "no initializer named '%s'", name);
}
