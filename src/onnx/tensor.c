/* Decoding small constant tensors, and building new messages for graph edits. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

/* ---- decoding ---------------------------------------------------------------------------------
 */

static uint64_t rk_le(const uint8_t *p, int bytes) { /* little-endian, any host */
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i)
        v = (v << 8) | p[i];
    return v;
}

/* Element i as double (exact for every supported type but int64/uint64 beyond 2^53) and as
 * int64 (*is_int: the value is an integer representable in int64). */
typedef struct rk_elem {
    double d;
    int64_t i;
    int is_int;
} rk_elem;

static int rk_decode(int32_t dt, const Onnx__TensorProto *t, const ropekit_tensor_bytes *raw,
                     size_t idx, rk_elem *e) {
    const uint8_t *r = raw ? (const uint8_t *)raw->data : NULL;
    int bits = rk_dtype_bits(dt);
    uint64_t u = 0;
    if (r) u = rk_le(r + idx * (size_t)(bits / 8), bits / 8);
    e->is_int = 0;
    switch (dt) {
    case RK_DT_FLOAT: {
        float f;
        uint32_t w = r ? (uint32_t)u : 0;
        if (r)
            memcpy(&f, &w, 4);
        else
            f = t->float_data[idx];
        e->d = f;
        break;
    }
    case RK_DT_DOUBLE: {
        double f;
        if (r)
            memcpy(&f, &u, 8);
        else
            f = t->double_data[idx];
        e->d = f;
        break;
    }
    case RK_DT_FLOAT16: e->d = rk_f16_to_f32(r ? (uint16_t)u : (uint16_t)t->int32_data[idx]); break;
    case RK_DT_BFLOAT16:
        e->d = rk_bf16_to_f32(r ? (uint16_t)u : (uint16_t)t->int32_data[idx]);
        break;
    case RK_DT_INT8: e->i = r ? (int8_t)u : (int8_t)t->int32_data[idx]; goto integer;
    case RK_DT_UINT8: e->i = r ? (uint8_t)u : (uint8_t)t->int32_data[idx]; goto integer;
    case RK_DT_BOOL: e->i = r ? (uint8_t)u != 0 : t->int32_data[idx] != 0; goto integer;
    case RK_DT_INT16: e->i = r ? (int16_t)u : (int16_t)t->int32_data[idx]; goto integer;
    case RK_DT_UINT16: e->i = r ? (uint16_t)u : (uint16_t)t->int32_data[idx]; goto integer;
    case RK_DT_INT32: e->i = r ? (int32_t)(uint32_t)u : t->int32_data[idx]; goto integer;
    case RK_DT_UINT32: e->i = r ? (uint32_t)u : (uint32_t)t->uint64_data[idx]; goto integer;
    case RK_DT_INT64: e->i = r ? (int64_t)u : t->int64_data[idx]; goto integer;
    case RK_DT_UINT64: {
        uint64_t v = r ? u : t->uint64_data[idx];
        e->d = (double)v;
        e->is_int = v <= (uint64_t)INT64_MAX;
        e->i = e->is_int ? (int64_t)v : 0;
        return 1;
    }
    default: return 0;
    }
    e->is_int = rk_f64_to_i64(e->d, &e->i); /* floating point: integral and in range? */
    return 1;
integer:
    e->d = (double)e->i;
    e->is_int = 1;
    return 1;
}

static ropekit_status rk_tensor_read(const ropekit_model *m, const Onnx__TensorProto *t,
                                     int64_t *oi, double *od, size_t cap, size_t *count) {
    const char *name = t->name ? t->name : "";
    int32_t dt = t->has_data_type ? t->data_type : 0;
    int64_t n = rk_tensor_numel(t);
    switch (dt) {
    case RK_DT_FLOAT:
    case RK_DT_DOUBLE:
    case RK_DT_FLOAT16:
    case RK_DT_BFLOAT16:
    case RK_DT_INT8:
    case RK_DT_UINT8:
    case RK_DT_BOOL:
    case RK_DT_INT16:
    case RK_DT_UINT16:
    case RK_DT_INT32:
    case RK_DT_UINT32:
    case RK_DT_INT64:
    case RK_DT_UINT64: break;
    default:
        return rk_fail(ROPEKIT_ERROR_DTYPE,
                       "tensor '%s': element type %s cannot be read as a "
                       "number",
                       name, rk_dtype_name(dt));
    }
    if (n < 0 || (uint64_t)n > cap)
        return rk_fail(ROPEKIT_ERROR_SHAPE,
                       "tensor '%s' has %" PRId64 " elements, at most %zu "
                       "expected",
                       name, n, cap);
    ropekit_tensor_bytes raw;
    int use_raw = t->has_raw_data || rk_tensor_is_external(t);
    if (use_raw) RK_TRY(rk_tensor_bytes(m, t, &raw));
    /* sizes were checked at load (inline) or by rk_tensor_bytes (external) */
    ropekit_status s = ROPEKIT_OK;
    for (int64_t i = 0; i < n; ++i) {
        rk_elem e = {0, 0, 0};
        rk_decode(dt, t, use_raw ? &raw : NULL, (size_t)i, &e);
        if (od) od[i] = e.d;
        if (oi) {
            if (!e.is_int) {
                s = rk_fail(ROPEKIT_ERROR_DTYPE,
                            "tensor '%s' element %" PRId64 " (%g) is not an "
                            "int64 integer",
                            name, i, e.d);
                break;
            }
            oi[i] = e.i;
        }
    }
    if (use_raw) ropekit_tensor_bytes_release(&raw);
    if (s == ROPEKIT_OK) *count = (size_t)n;
    return s;
}

ropekit_status rk_tensor_read_i64(const ropekit_model *m, const Onnx__TensorProto *t, int64_t *out,
                                  size_t cap, size_t *count) {
    return rk_tensor_read(m, t, out, NULL, cap, count);
}

ropekit_status rk_tensor_read_f64(const ropekit_model *m, const Onnx__TensorProto *t, double *out,
                                  size_t cap, size_t *count) {
    return rk_tensor_read(m, t, NULL, out, cap, count);
}

/* ---- building messages ------------------------------------------------------------------------
 */

char *rk_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void rk_node_free(Onnx__NodeProto *n) {
    if (n) protobuf_c_message_free_unpacked(&n->base, NULL);
}

static char **rk_strv(const char *const *v, size_t n) {
    char **out = calloc(n ? n : 1, sizeof *out);
    if (!out) return NULL;
    for (size_t i = 0; i < n; ++i)
        if (!(out[i] = rk_strdup(v[i] ? v[i] : ""))) {
            while (i--)
                free(out[i]);
            free(out);
            return NULL;
        }
    return out;
}

Onnx__NodeProto *rk_new_node(const char *op_type, const char *domain, const char *name,
                             const char *const *inputs, size_t n_inputs, const char *const *outputs,
                             size_t n_outputs) {
    Onnx__NodeProto *n = malloc(sizeof *n);
    if (!n) return NULL;
    onnx__node_proto__init(n);
    n->op_type = rk_strdup(op_type);
    n->domain = domain ? rk_strdup(domain) : NULL;
    n->name = name ? rk_strdup(name) : NULL;
    n->input = rk_strv(inputs, n_inputs);
    n->n_input = n->input ? n_inputs : 0;
    n->output = rk_strv(outputs, n_outputs);
    n->n_output = n->output ? n_outputs : 0;
    if (!n->op_type || (domain && !n->domain) || (name && !n->name) || !n->input || !n->output) {
        rk_node_free(n);
        return NULL;
    }
    return n;
}

static Onnx__AttributeProto *rk_add_attr(Onnx__NodeProto *n, const char *name,
                                         Onnx__AttributeProto__AttributeType type) {
    Onnx__AttributeProto **v = realloc(n->attribute, (n->n_attribute + 1) * sizeof *v);
    if (!v) return NULL;
    n->attribute = v;
    Onnx__AttributeProto *a = malloc(sizeof *a);
    if (!a) return NULL;
    onnx__attribute_proto__init(a);
    if (!(a->name = rk_strdup(name))) {
        free(a);
        return NULL;
    }
    a->has_type = 1;
    a->type = type;
    v[n->n_attribute++] = a;
    return a;
}

ropekit_status rk_node_add_attr_int(Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = rk_add_attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (!a) return RK_OOM();
    a->has_i = 1;
    a->i = v;
    return ROPEKIT_OK;
}

ropekit_status rk_node_add_attr_float(Onnx__NodeProto *n, const char *name, float v) {
    Onnx__AttributeProto *a = rk_add_attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (!a) return RK_OOM();
    a->has_f = 1;
    a->f = v;
    return ROPEKIT_OK;
}

ropekit_status rk_node_add_attr_ints(Onnx__NodeProto *n, const char *name, const int64_t *v,
                                     size_t count) {
    Onnx__AttributeProto *a = rk_add_attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    if (!a) return RK_OOM();
    a->ints = malloc((count ? count : 1) * sizeof *a->ints);
    if (!a->ints) return RK_OOM();
    if (count) memcpy(a->ints, v, count * sizeof *v);
    a->n_ints = count;
    return ROPEKIT_OK;
}

const Onnx__AttributeProto *rk_node_attr(const Onnx__NodeProto *n, const char *name) {
    for (size_t i = 0; i < n->n_attribute; ++i)
        if (strcmp(n->attribute[i]->name, name) == 0) return n->attribute[i];
    return NULL;
}

Onnx__TensorProto *rk_new_tensor(const char *name, int32_t data_type, const int64_t *dims,
                                 size_t rank, const void *raw, size_t raw_size) {
    Onnx__TensorProto *t = malloc(sizeof *t);
    if (!t) return NULL;
    onnx__tensor_proto__init(t);
    t->name = rk_strdup(name);
    t->has_data_type = 1;
    t->data_type = data_type;
    t->dims = malloc((rank ? rank : 1) * sizeof *t->dims);
    t->has_raw_data = 1;
    t->raw_data.data = malloc(raw_size ? raw_size : 1);
    if (!t->name || !t->dims || !t->raw_data.data) {
        free(t->dims);
        t->dims = NULL;
        free(t->raw_data.data);
        t->raw_data.data = NULL;
        t->has_raw_data = 0;
        protobuf_c_message_free_unpacked(&t->base, NULL);
        return NULL;
    }
    if (rank) memcpy(t->dims, dims, rank * sizeof *dims);
    t->n_dims = rank;
    if (raw_size) memcpy(t->raw_data.data, raw, raw_size);
    t->raw_data.len = raw_size;
    return t;
}
