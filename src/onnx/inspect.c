/* ropekit_model_inspect (a summary of a model) and its text / JSON formatting. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx_internal.h"

/* The public info, and the allocations it owns. */
typedef struct rk_info {
    ropekit_model_info pub; /* first: the public pointer is this struct's address */
    void **allocs;
    size_t n_allocs, cap_allocs;
} rk_info;

static void *rk_info_alloc(rk_info *info, size_t count, size_t size) {
    if (info->n_allocs == info->cap_allocs) {
        size_t cap = info->cap_allocs ? 2 * info->cap_allocs : 16;
        void **a = realloc(info->allocs, cap * sizeof *a);
        if (!a) return NULL;
        info->allocs = a;
        info->cap_allocs = cap;
    }
    void *p = calloc(count ? count : 1, size);
    if (p) info->allocs[info->n_allocs++] = p;
    return p;
}

void ropekit_model_info_free(ropekit_model_info *pub) {
    rk_info *info = (rk_info *)pub;
    if (!info) return;
    for (size_t i = 0; i < info->n_allocs; ++i)
        free(info->allocs[i]);
    free(info->allocs);
    free(info);
}

/* ---- values -----------------------------------------------------------------------------------
 */

static ropekit_status rk_info_value(rk_info *info, const Onnx__ValueInfoProto *vi,
                                    ropekit_onnx_value *out) {
    out->name = vi->name;
    out->elem_type = "?";
    out->rank = -1;
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return ROPEKIT_OK;
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (tt->has_elem_type) out->elem_type = rk_dtype_name(tt->elem_type);
    if (!tt->shape) return ROPEKIT_OK;
    if (tt->shape->n_dim > INT32_MAX) return rk_fail(ROPEKIT_ERROR_OVERFLOW, "rank overflow");
    ropekit_onnx_dim *dims = rk_info_alloc(info, tt->shape->n_dim, sizeof *dims);
    if (!dims) return RK_OOM();
    for (size_t i = 0; i < tt->shape->n_dim; ++i) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        dims[i].value = -1;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
            d->dim_value >= 0)
            dims[i].value = d->dim_value;
        else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                 d->dim_param)
            dims[i].param = d->dim_param;
    }
    out->rank = (int32_t)tt->shape->n_dim;
    out->dims = dims;
    return ROPEKIT_OK;
}

/* ---- walking: node counts and rotary nodes ----------------------------------------------------
 */

typedef struct rk_scan {
    rk_info *info;
    const Onnx__GraphProto *main;
    int64_t subgraph_nodes;
    const Onnx__NodeProto **rotary;
    size_t n_rotary, cap_rotary;
} rk_scan;

static int rk_is_rotary(const Onnx__NodeProto *n) {
    return strcmp(n->op_type, "RotaryEmbedding") == 0 ||
           strcmp(n->op_type, "MRotaryEmbedding") == 0;
}

static ropekit_status rk_scan_graph(void *ctx, Onnx__GraphProto *g, int depth) {
    rk_scan *s = ctx;
    if (depth > 0) s->subgraph_nodes += (int64_t)g->n_node;
    for (size_t i = 0; i < g->n_node; ++i) {
        if (!rk_is_rotary(g->node[i])) continue;
        if (s->n_rotary == s->cap_rotary) {
            size_t cap = s->cap_rotary ? 2 * s->cap_rotary : 16;
            const Onnx__NodeProto **r = realloc(s->rotary, cap * sizeof *r);
            if (!r) return RK_OOM();
            s->rotary = r;
            s->cap_rotary = cap;
        }
        s->rotary[s->n_rotary++] = g->node[i];
    }
    return ROPEKIT_OK;
}

static ropekit_status rk_info_rotary(rk_info *info, const Onnx__NodeProto *n,
                                     ropekit_onnx_rotary_node *r) {
    r->name = rk_s(n->name);
    r->domain = rk_s(n->domain);
    r->op_type = n->op_type;
    r->n_inputs = n->n_input;
    r->inputs = (const char *const *)n->input;
    r->n_outputs = n->n_output;
    r->outputs = (const char *const *)n->output;
    ropekit_onnx_attr *attrs = rk_info_alloc(info, n->n_attribute, sizeof *attrs);
    if (!attrs) return RK_OOM();
    for (size_t a = 0; a < n->n_attribute; ++a) {
        const Onnx__AttributeProto *at = n->attribute[a];
        ropekit_onnx_attr *o = &attrs[a];
        o->name = at->name;
        o->kind = '?';
        int type = at->has_type ? (int)at->type : -1;
        if (type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT || (type < 0 && at->has_i)) {
            o->kind = 'i';
            o->i = at->i;
        } else if (type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT ||
                   (type < 0 && at->has_f)) {
            o->kind = 'f';
            o->f = at->f;
        } else if (type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING && at->has_s) {
            char *str = rk_info_alloc(info, at->s.len + 1, 1);
            if (!str) return RK_OOM();
            if (at->s.len) memcpy(str, at->s.data, at->s.len);
            o->kind = 's';
            o->s = str;
        } else if (type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS) {
            o->kind = 'I';
            o->n = at->n_ints;
            o->ints = at->ints;
        } else if (type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS) {
            o->kind = 'F';
            o->n = at->n_floats;
            o->floats = at->floats;
        }
    }
    r->n_attrs = n->n_attribute;
    r->attrs = attrs;
    return ROPEKIT_OK;
}

/* ---- op counts --------------------------------------------------------------------------------
 */

static int rk_cmp_op(const void *a, const void *b) {
    const ropekit_onnx_op_count *x = a, *y = b;
    int c = strcmp(x->domain, y->domain);
    return c ? c : strcmp(x->op_type, y->op_type);
}

static int rk_cmp_count(const void *a, const void *b) {
    const ropekit_onnx_op_count *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return rk_cmp_op(a, b);
}

static int rk_cmp_ext(const void *a, const void *b) {
    const Onnx__TensorProto *x = *(const Onnx__TensorProto *const *)a,
                            *y = *(const Onnx__TensorProto *const *)b;
    return strcmp(rk_tensor_external(x, "location"), rk_tensor_external(y, "location"));
}

/* Bytes a tensor keeps inline. */
static int64_t rk_inline_bytes(const Onnx__TensorProto *t) {
    if (rk_tensor_is_external(t)) return 0;
    uint64_t b = t->has_raw_data ? t->raw_data.len : 0;
    b += (uint64_t)t->n_float_data * 4 + (uint64_t)t->n_int32_data * 4 +
         (uint64_t)t->n_int64_data * 8 + (uint64_t)t->n_double_data * 8 +
         (uint64_t)t->n_uint64_data * 8;
    for (size_t i = 0; i < t->n_string_data; ++i)
        b += t->string_data[i].len;
    return (int64_t)b; /* bounded by the 2 GiB file */
}

static int64_t rk_external_bytes(const Onnx__TensorProto *t) {
    int64_t v = 0;
    const char *len = rk_tensor_external(t, "length");
    if (len) {
        for (const char *p = len; *p; ++p)
            v = v * 10 + (*p - '0'); /* digits, checked at load */
        return v;
    }
    int bits = rk_dtype_bits(t->has_data_type ? t->data_type : 0);
    int64_t n = rk_tensor_numel(t), total;
    if (bits == 0 || !rk_mul(n, bits, &total)) return 0;
    return total / 8 + (total % 8 != 0);
}

typedef struct rk_ext_list {
    const Onnx__TensorProto **t;
    size_t n;
} rk_ext_list;

/* Look at (never read) an external data file: f->problem says why reading would fail. */
static ropekit_status rk_file_problem(rk_info *info, const ropekit_model *model,
                                      ropekit_onnx_external_file *f, int64_t end) {
    char buf[256];
    const char *why = rk_location_problem(f->location);
    struct stat st;
    buf[0] = '\0';
    if (why) {
        snprintf(buf, sizeof buf, "%s", why);
    } else if (!model->dir) {
        return ROPEKIT_OK; /* loaded from memory: nothing to look at */
    } else {
        size_t n = strlen(model->dir) + strlen(f->location) + 2;
        char *path = malloc(n);
        if (!path) return RK_OOM();
        snprintf(path, n, "%s/%s", model->dir, f->location);
        if (stat(path, &st) != 0)
            snprintf(buf, sizeof buf, "is missing (%s)", strerror(errno));
        else if (!S_ISREG(st.st_mode))
            snprintf(buf, sizeof buf, "is %s, not a regular file",
                     S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "special");
        else if ((int64_t)st.st_size < end)
            snprintf(buf, sizeof buf, "has %lld bytes, its tensors need %lld",
                     (long long)st.st_size, (long long)end);
        free(path);
    }
    if (!buf[0]) return ROPEKIT_OK;
    char *copy = rk_info_alloc(info, strlen(buf) + 1, 1);
    if (!copy) return RK_OOM();
    memcpy(copy, buf, strlen(buf) + 1);
    f->problem = copy;
    return ROPEKIT_OK;
}

static ropekit_status rk_info_initializers(rk_info *info, const ropekit_model *model,
                                           const Onnx__GraphProto *g) {
    ropekit_model_info *p = &info->pub;
    size_t n_ext = 0;
    const Onnx__TensorProto **ext =
        rk_info_alloc(info, 2 * g->n_sparse_initializer + g->n_initializer, sizeof *ext);
    if (!ext) return RK_OOM();
    for (size_t i = 0; i < g->n_initializer + 2 * g->n_sparse_initializer; ++i) {
        const Onnx__TensorProto *t;
        if (i < g->n_initializer) {
            t = g->initializer[i];
        } else {
            const Onnx__SparseTensorProto *sp = g->sparse_initializer[(i - g->n_initializer) / 2];
            t = (i - g->n_initializer) % 2 ? sp->indices : sp->values;
            if (!t) continue;
        }
        p->initializer_bytes += rk_inline_bytes(t);
        if (rk_tensor_is_external(t)) {
            int64_t b = rk_external_bytes(t);
            if (!rk_add(p->external_bytes, b, &p->external_bytes))
                return rk_fail(ROPEKIT_ERROR_OVERFLOW, "external data sizes overflow int64");
            ext[n_ext++] = t;
        }
    }
    p->n_initializers = (int64_t)(g->n_initializer + g->n_sparse_initializer);
    ropekit_onnx_external_file *files = rk_info_alloc(info, n_ext, sizeof *files);
    if (!files) return RK_OOM();
    /* tensors sorted by location, then one entry per file; `end`: the furthest byte they need */
    qsort(ext, n_ext, sizeof *ext, rk_cmp_ext);
    size_t nf = 0;
    int64_t end = 0;
    for (size_t i = 0; i <= n_ext; ++i) {
        const char *loc = i < n_ext ? rk_tensor_external(ext[i], "location") : NULL;
        if (nf && (!loc || strcmp(files[nf - 1].location, loc) != 0))
            RK_TRY(rk_file_problem(info, model, &files[nf - 1], end));
        if (!loc) break;
        int64_t b = rk_external_bytes(ext[i]), off = 0, e;
        const char *os = rk_tensor_external(ext[i], "offset");
        for (const char *q = os; q && *q; ++q)
            off = off * 10 + (*q - '0'); /* digits, checked at load */
        if (!rk_add(off, b, &e)) e = INT64_MAX;
        if (nf && strcmp(files[nf - 1].location, loc) == 0) {
            files[nf - 1].tensors++;
            rk_add(files[nf - 1].bytes, b, &files[nf - 1].bytes);
            if (e > end) end = e;
        } else {
            files[nf].location = loc;
            files[nf].tensors = 1;
            files[nf].bytes = b;
            files[nf].problem = NULL;
            ++nf;
            end = e;
        }
    }
    p->n_external_files = nf;
    p->external_files = files;
    return ROPEKIT_OK;
}

static ropekit_status rk_info_build(rk_info *info, const ropekit_model *model) {
    ropekit_model_info *p = &info->pub;
    Onnx__ModelProto *m = model->proto;
    const Onnx__GraphProto *g = m->graph;
    p->ir_version = m->has_ir_version ? m->ir_version : -1;
    p->producer_name = rk_s(m->producer_name);
    p->producer_version = rk_s(m->producer_version);
    p->graph_name = rk_s(g->name);

    ropekit_onnx_opset *ops = rk_info_alloc(info, m->n_opset_import, sizeof *ops);
    if (!ops) return RK_OOM();
    for (size_t i = 0; i < m->n_opset_import; ++i) {
        ops[i].domain = rk_s(m->opset_import[i]->domain);
        ops[i].version = m->opset_import[i]->version;
    }
    p->n_opsets = m->n_opset_import;
    p->opsets = ops;

    const char **keys = rk_info_alloc(info, m->n_metadata_props, sizeof *keys);
    const char **vals = rk_info_alloc(info, m->n_metadata_props, sizeof *vals);
    if (!keys || !vals) return RK_OOM();
    for (size_t i = 0; i < m->n_metadata_props; ++i) {
        keys[i] = rk_s(m->metadata_props[i]->key);
        vals[i] = rk_s(m->metadata_props[i]->value);
    }
    p->n_metadata = m->n_metadata_props;
    p->metadata_keys = keys;
    p->metadata_values = vals;

    p->n_nodes = (int64_t)g->n_node;
    p->n_functions = (int64_t)m->n_functions;
    ropekit_onnx_op_count *counts = rk_info_alloc(info, g->n_node, sizeof *counts);
    if (!counts) return RK_OOM();
    for (size_t i = 0; i < g->n_node; ++i) {
        counts[i].domain = rk_s(g->node[i]->domain);
        counts[i].op_type = g->node[i]->op_type;
        counts[i].count = 1;
    }
    qsort(counts, g->n_node, sizeof *counts, rk_cmp_op);
    size_t nc = 0;
    for (size_t i = 0; i < g->n_node; ++i) {
        if (nc && rk_cmp_op(&counts[nc - 1], &counts[i]) == 0)
            counts[nc - 1].count++;
        else
            counts[nc++] = counts[i];
    }
    qsort(counts, nc, sizeof *counts, rk_cmp_count);
    p->n_op_counts = nc;
    p->op_counts = counts;

    RK_TRY(rk_info_initializers(info, model, g));

    /* inputs that are not initializers (IR < 4 lists initializers as inputs too) */
    ropekit_onnx_value *in = rk_info_alloc(info, g->n_input, sizeof *in);
    ropekit_onnx_value *out = rk_info_alloc(info, g->n_output, sizeof *out);
    if (!in || !out) return RK_OOM();
    rk_graph *ix;
    RK_TRY(rk_graph_open((ropekit_model *)model, NULL, &ix)); /* checks every reference */
    size_t ni = 0;
    ropekit_status s = ROPEKIT_OK;
    for (size_t i = 0; s == ROPEKIT_OK && i < g->n_input; ++i) {
        const rk_value *v = rk_graph_value(ix, g->input[i]->name);
        if (v && v->initializer) continue;
        s = rk_info_value(info, g->input[i], &in[ni++]);
    }
    rk_graph_close(ix);
    RK_TRY(s);
    for (size_t i = 0; i < g->n_output; ++i)
        RK_TRY(rk_info_value(info, g->output[i], &out[i]));
    p->n_inputs = ni;
    p->inputs = in;
    p->n_outputs = g->n_output;
    p->outputs = out;

    rk_scan scan = {info, g, 0, NULL, 0, 0};
    s = rk_model_for_each_graph(m, rk_scan_graph, &scan);
    ropekit_onnx_rotary_node *rot = NULL;
    if (s == ROPEKIT_OK && !(rot = rk_info_alloc(info, scan.n_rotary, sizeof *rot))) s = RK_OOM();
    for (size_t i = 0; s == ROPEKIT_OK && i < scan.n_rotary; ++i)
        s = rk_info_rotary(info, scan.rotary[i], &rot[i]);
    free(scan.rotary);
    RK_TRY(s);
    p->n_subgraph_nodes = scan.subgraph_nodes;
    p->n_rotary = scan.n_rotary;
    p->rotary = rot;
    return ROPEKIT_OK;
}

ropekit_status ropekit_model_inspect(const ropekit_model *model, ropekit_model_info **out) {
    if (!model || !out)
        return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "model and out must not be NULL");
    *out = NULL;
    rk_info *info = calloc(1, sizeof *info);
    if (!info) return RK_OOM();
    ropekit_status s = rk_info_build(info, model);
    if (s != ROPEKIT_OK) {
        ropekit_model_info_free(&info->pub);
        char msg[400];
        snprintf(msg, sizeof msg, "%s", ropekit_last_error());
        return rk_fail(s, "%s: %s", model->name, msg);
    }
    rk_clear_error();
    *out = &info->pub;
    return ROPEKIT_OK;
}

/* ---- formatting -------------------------------------------------------------------------------
 */

static void rk_json_num(rk_buf *b, double v) {
    if (isfinite(v))
        rk_buf_printf(b, "%.9g", v);
    else
        rk_buf_puts(b, "null");
}

static const char *rk_domain_name(const char *d) {
    return *d ? d : "ai.onnx";
}

/* [d0, d1, ...]: numbers, symbolic names, and "?" (text) or null (JSON) for unknown dims */
static void rk_dims(rk_buf *b, const ropekit_onnx_value *v, int json) {
    rk_buf_puts(b, "[");
    for (int32_t i = 0; i < v->rank; ++i) {
        if (i) rk_buf_puts(b, json ? "," : ", ");
        if (v->dims[i].value >= 0)
            rk_buf_printf(b, "%" PRId64, v->dims[i].value);
        else if (v->dims[i].param && json)
            rk_buf_json_str(b, v->dims[i].param);
        else if (v->dims[i].param)
            rk_buf_text_str(b, v->dims[i].param);
        else
            rk_buf_puts(b, json ? "null" : "?");
    }
    rk_buf_puts(b, "]");
}

static void rk_text_value(rk_buf *b, const ropekit_onnx_value *v) {
    rk_buf_puts(b, "  ");
    rk_buf_text_str(b, v->name);
    rk_buf_printf(b, "  %s", v->elem_type);
    if (v->rank < 0) {
        rk_buf_puts(b, " (shape unknown)\n");
        return;
    }
    rk_dims(b, v, 0);
    rk_buf_puts(b, "\n");
}

static void rk_attr_value(rk_buf *b, const ropekit_onnx_attr *a, int json) {
    switch (a->kind) {
    case 'i': rk_buf_printf(b, "%" PRId64, a->i); break;
    case 'f':
        if (json)
            rk_json_num(b, a->f);
        else
            rk_buf_printf(b, "%.9g", a->f);
        break;
    case 's':
        if (json)
            rk_buf_json_str(b, a->s);
        else
            rk_buf_text_str(b, a->s);
        break;
    case 'I':
    case 'F':
        rk_buf_puts(b, "[");
        for (size_t k = 0; k < a->n; ++k) {
            if (k) rk_buf_puts(b, json ? "," : ", ");
            if (a->kind == 'I')
                rk_buf_printf(b, "%" PRId64, a->ints[k]);
            else if (json)
                rk_json_num(b, a->floats[k]);
            else
                rk_buf_printf(b, "%.9g", a->floats[k]);
        }
        rk_buf_puts(b, "]");
        break;
    default: rk_buf_puts(b, json ? "null" : "?"); break;
    }
}

static void rk_format_text(rk_buf *b, const ropekit_model_info *p) {
    if (p->ir_version >= 0)
        rk_buf_printf(b, "ir_version: %" PRId64 "\n", p->ir_version);
    else
        rk_buf_puts(b, "ir_version: (not given)\n");
    rk_buf_puts(b, "producer: ");
    if (!*p->producer_name && !*p->producer_version) rk_buf_puts(b, "(not given)");
    rk_buf_text_str(b, p->producer_name);
    if (*p->producer_version) {
        rk_buf_puts(b, " ");
        rk_buf_text_str(b, p->producer_version);
    }
    rk_buf_puts(b, "\ngraph: ");
    rk_buf_text_str(b, p->graph_name);
    rk_buf_puts(b, "\nopsets:");
    for (size_t i = 0; i < p->n_opsets; ++i) {
        rk_buf_puts(b, i ? ", " : " ");
        rk_buf_text_str(b, rk_domain_name(p->opsets[i].domain));
        rk_buf_printf(b, " %" PRId64, p->opsets[i].version);
    }
    rk_buf_puts(b, "\n");
    if (p->n_metadata) {
        rk_buf_printf(b, "metadata: %zu\n", p->n_metadata);
        for (size_t i = 0; i < p->n_metadata; ++i) {
            rk_buf_puts(b, "  ");
            rk_buf_text_str(b, p->metadata_keys[i]);
            rk_buf_puts(b, ": ");
            rk_buf_text_str(b, p->metadata_values[i]);
            rk_buf_puts(b, "\n");
        }
    }
    rk_buf_printf(b,
                  "nodes: %" PRId64 " (in subgraphs: %" PRId64 ", model functions: %" PRId64 ")\n",
                  p->n_nodes, p->n_subgraph_nodes, p->n_functions);
    for (size_t i = 0; i < p->n_op_counts; ++i) {
        rk_buf_printf(b, "  %8" PRId64 "  ", p->op_counts[i].count);
        if (*p->op_counts[i].domain) {
            rk_buf_text_str(b, p->op_counts[i].domain);
            rk_buf_puts(b, ".");
        }
        rk_buf_text_str(b, p->op_counts[i].op_type);
        rk_buf_puts(b, "\n");
    }
    rk_buf_printf(b,
                  "initializers: %" PRId64 ", %" PRId64 " bytes inline, %" PRId64
                  " bytes in external data\n",
                  p->n_initializers, p->initializer_bytes, p->external_bytes);
    rk_buf_printf(b, "external data files: %zu\n", p->n_external_files);
    for (size_t i = 0; i < p->n_external_files; ++i) {
        rk_buf_puts(b, "  ");
        rk_buf_text_str(b, p->external_files[i].location);
        rk_buf_printf(b, "  %" PRId64 " tensors, %" PRId64 " bytes\n", p->external_files[i].tensors,
                      p->external_files[i].bytes);
        if (p->external_files[i].problem)
            rk_buf_printf(b, "    warning: this file %s\n", p->external_files[i].problem);
    }
    rk_buf_printf(b, "inputs: %zu\n", p->n_inputs);
    for (size_t i = 0; i < p->n_inputs; ++i)
        rk_text_value(b, &p->inputs[i]);
    rk_buf_printf(b, "outputs: %zu\n", p->n_outputs);
    for (size_t i = 0; i < p->n_outputs; ++i)
        rk_text_value(b, &p->outputs[i]);
    rk_buf_printf(b, "rotary embedding nodes: %zu\n", p->n_rotary);
    for (size_t i = 0; i < p->n_rotary; ++i) {
        const ropekit_onnx_rotary_node *r = &p->rotary[i];
        rk_buf_puts(b, "  ");
        rk_buf_text_str(b, rk_domain_name(r->domain));
        rk_buf_puts(b, ".");
        rk_buf_text_str(b, r->op_type);
        rk_buf_puts(b, " '");
        rk_buf_text_str(b, r->name);
        rk_buf_puts(b, "' (");
        for (size_t k = 0; k < r->n_inputs; ++k) {
            if (k) rk_buf_puts(b, ", ");
            rk_buf_text_str(b, r->inputs[k]);
        }
        rk_buf_puts(b, ") -> (");
        for (size_t k = 0; k < r->n_outputs; ++k) {
            if (k) rk_buf_puts(b, ", ");
            rk_buf_text_str(b, r->outputs[k]);
        }
        rk_buf_puts(b, ")");
        for (size_t k = 0; k < r->n_attrs; ++k) {
            rk_buf_puts(b, " ");
            rk_buf_text_str(b, r->attrs[k].name);
            rk_buf_puts(b, "=");
            rk_attr_value(b, &r->attrs[k], 0);
        }
        rk_buf_puts(b, "\n");
    }
}

static void rk_json_value(rk_buf *b, const ropekit_onnx_value *v) {
    rk_buf_puts(b, "{\"name\":");
    rk_buf_json_str(b, v->name);
    rk_buf_puts(b, ",\"elem_type\":");
    rk_buf_json_str(b, v->elem_type);
    rk_buf_puts(b, ",\"shape\":");
    if (v->rank < 0) {
        rk_buf_puts(b, "null}");
        return;
    }
    rk_dims(b, v, 1);
    rk_buf_puts(b, "}");
}

static void rk_json_strs(rk_buf *b, const char *const *v, size_t n) {
    rk_buf_puts(b, "[");
    for (size_t k = 0; k < n; ++k) {
        if (k) rk_buf_puts(b, ",");
        rk_buf_json_str(b, v[k]);
    }
    rk_buf_puts(b, "]");
}

static void rk_format_json(rk_buf *b, const ropekit_model_info *p) {
    rk_buf_puts(b, "{\"ir_version\":");
    if (p->ir_version >= 0)
        rk_buf_printf(b, "%" PRId64, p->ir_version);
    else
        rk_buf_puts(b, "null");
    rk_buf_puts(b, ",\"producer_name\":");
    rk_buf_json_str(b, p->producer_name);
    rk_buf_puts(b, ",\"producer_version\":");
    rk_buf_json_str(b, p->producer_version);
    rk_buf_puts(b, ",\"graph_name\":");
    rk_buf_json_str(b, p->graph_name);
    rk_buf_puts(b, ",\"opsets\":[");
    for (size_t i = 0; i < p->n_opsets; ++i) {
        rk_buf_puts(b, i ? ",{\"domain\":" : "{\"domain\":");
        rk_buf_json_str(b, p->opsets[i].domain);
        rk_buf_printf(b, ",\"version\":%" PRId64 "}", p->opsets[i].version);
    }
    rk_buf_puts(b, "],\"metadata\":[");
    for (size_t i = 0; i < p->n_metadata; ++i) {
        rk_buf_puts(b, i ? ",{\"key\":" : "{\"key\":");
        rk_buf_json_str(b, p->metadata_keys[i]);
        rk_buf_puts(b, ",\"value\":");
        rk_buf_json_str(b, p->metadata_values[i]);
        rk_buf_puts(b, "}");
    }
    rk_buf_printf(b,
                  "],\"nodes\":%" PRId64 ",\"subgraph_nodes\":%" PRId64 ",\"functions\":%" PRId64
                  ",\"ops\":[",
                  p->n_nodes, p->n_subgraph_nodes, p->n_functions);
    for (size_t i = 0; i < p->n_op_counts; ++i) {
        rk_buf_puts(b, i ? ",{\"domain\":" : "{\"domain\":");
        rk_buf_json_str(b, p->op_counts[i].domain);
        rk_buf_puts(b, ",\"op_type\":");
        rk_buf_json_str(b, p->op_counts[i].op_type);
        rk_buf_printf(b, ",\"count\":%" PRId64 "}", p->op_counts[i].count);
    }
    rk_buf_printf(b,
                  "],\"initializers\":{\"count\":%" PRId64 ",\"inline_bytes\":%" PRId64
                  ",\"external_bytes\":%" PRId64 "},\"external_files\":[",
                  p->n_initializers, p->initializer_bytes, p->external_bytes);
    for (size_t i = 0; i < p->n_external_files; ++i) {
        rk_buf_puts(b, i ? ",{\"location\":" : "{\"location\":");
        rk_buf_json_str(b, p->external_files[i].location);
        rk_buf_printf(b, ",\"tensors\":%" PRId64 ",\"bytes\":%" PRId64 ",\"problem\":",
                      p->external_files[i].tensors, p->external_files[i].bytes);
        if (p->external_files[i].problem)
            rk_buf_json_str(b, p->external_files[i].problem);
        else
            rk_buf_puts(b, "null");
        rk_buf_puts(b, "}");
    }
    rk_buf_puts(b, "],\"inputs\":[");
    for (size_t i = 0; i < p->n_inputs; ++i) {
        if (i) rk_buf_puts(b, ",");
        rk_json_value(b, &p->inputs[i]);
    }
    rk_buf_puts(b, "],\"outputs\":[");
    for (size_t i = 0; i < p->n_outputs; ++i) {
        if (i) rk_buf_puts(b, ",");
        rk_json_value(b, &p->outputs[i]);
    }
    rk_buf_puts(b, "],\"rotary_nodes\":[");
    for (size_t i = 0; i < p->n_rotary; ++i) {
        const ropekit_onnx_rotary_node *r = &p->rotary[i];
        rk_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        rk_buf_json_str(b, r->name);
        rk_buf_puts(b, ",\"domain\":");
        rk_buf_json_str(b, r->domain);
        rk_buf_puts(b, ",\"op_type\":");
        rk_buf_json_str(b, r->op_type);
        rk_buf_puts(b, ",\"inputs\":");
        rk_json_strs(b, r->inputs, r->n_inputs);
        rk_buf_puts(b, ",\"outputs\":");
        rk_json_strs(b, r->outputs, r->n_outputs);
        rk_buf_puts(b, ",\"attributes\":{");
        for (size_t k = 0; k < r->n_attrs; ++k) {
            if (k) rk_buf_puts(b, ",");
            rk_buf_json_str(b, r->attrs[k].name);
            rk_buf_puts(b, ":");
            rk_attr_value(b, &r->attrs[k], 1);
        }
        rk_buf_puts(b, "}}");
    }
    rk_buf_puts(b, "]}\n");
}

ropekit_status ropekit_model_info_format(const ropekit_model_info *info, ropekit_onnx_format format,
                                         char **text) {
    if (!info || !text)
        return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "info and text must not be NULL");
    *text = NULL;
    if (format != ROPEKIT_ONNX_FORMAT_TEXT && format != ROPEKIT_ONNX_FORMAT_JSON)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "unknown format %d", (int)format);
    rk_buf b = {0};
    rk_buf_putn(&b, "", 0);
    if (format == ROPEKIT_ONNX_FORMAT_JSON)
        rk_format_json(&b, info);
    else
        rk_format_text(&b, info);
    if (b.oom) {
        free(b.p);
        return RK_OOM();
    }
    *text = b.p;
    rk_clear_error();
    return ROPEKIT_OK;
}
