/* The graph index (producers, consumers, initializers, shapes, constants) and graph edits. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

/* ---- a set of names (subgraph scopes) ---------------------------------------------------------
 */

typedef struct rk_set {
    const char **keys;
    size_t n, cap; /* cap: power of two, 0 when empty */
} rk_set;

static uint64_t rk_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; ++s)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int rk_set_has(const rk_set *s, const char *k) {
    if (!s->cap) return 0;
    for (size_t i = rk_hash(k) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->keys[i]) return 0;
        if (strcmp(s->keys[i], k) == 0) return 1;
    }
}

/* 1 added, 0 present, -1 out of memory */
static int rk_set_add(rk_set *s, const char *k) {
    if (rk_set_has(s, k)) return 0;
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        const char **keys = calloc(cap, sizeof *keys);
        if (!keys) return -1;
        for (size_t i = 0; i < s->cap; ++i)
            if (s->keys[i]) {
                size_t j = rk_hash(s->keys[i]) & (cap - 1);
                while (keys[j])
                    j = (j + 1) & (cap - 1);
                keys[j] = s->keys[i];
            }
        free(s->keys);
        s->keys = keys;
        s->cap = cap;
    }
    size_t j = rk_hash(k) & (s->cap - 1);
    while (s->keys[j])
        j = (j + 1) & (s->cap - 1);
    s->keys[j] = k;
    s->n++;
    return 1;
}

static void rk_set_free(rk_set *s) {
    free(s->keys);
    memset(s, 0, sizeof *s);
}

static ropekit_status rk_set_put(rk_set *s, const char *k) {
    return rk_set_add(s, k) < 0 ? RK_OOM() : ROPEKIT_OK;
}

/* Names a graph defines: inputs, initializers, sparse initializers, node outputs. */
static ropekit_status rk_graph_defs(const Onnx__GraphProto *g, rk_set *defs) {
    for (size_t i = 0; i < g->n_input; ++i)
        RK_TRY(rk_set_put(defs, g->input[i]->name));
    for (size_t i = 0; i < g->n_initializer; ++i)
        if (g->initializer[i]->name) RK_TRY(rk_set_put(defs, g->initializer[i]->name));
    for (size_t i = 0; i < g->n_sparse_initializer; ++i)
        if (g->sparse_initializer[i]->values->name)
            RK_TRY(rk_set_put(defs, g->sparse_initializer[i]->values->name));
    for (size_t i = 0; i < g->n_node; ++i)
        for (size_t o = 0; o < g->node[i]->n_output; ++o)
            if (*g->node[i]->output[o]) RK_TRY(rk_set_put(defs, g->node[i]->output[o]));
    return ROPEKIT_OK;
}

static ropekit_status rk_node_free_names(const Onnx__NodeProto *n, rk_set *out);

/* Names a subgraph reads from enclosing scopes, added to `out`. */
static ropekit_status rk_subgraph_free_names(const Onnx__GraphProto *g, rk_set *out) {
    rk_set defs = {0}, inner = {0};
    ropekit_status s = rk_graph_defs(g, &defs);
    for (size_t i = 0; s == ROPEKIT_OK && i < g->n_node; ++i) {
        const Onnx__NodeProto *n = g->node[i];
        for (size_t k = 0; s == ROPEKIT_OK && k < n->n_input; ++k)
            if (*n->input[k] && !rk_set_has(&defs, n->input[k])) s = rk_set_put(out, n->input[k]);
        if (s == ROPEKIT_OK) s = rk_node_free_names(n, &inner);
    }
    for (size_t i = 0; s == ROPEKIT_OK && i < inner.cap; ++i)
        if (inner.keys[i] && !rk_set_has(&defs, inner.keys[i])) s = rk_set_put(out, inner.keys[i]);
    for (size_t i = 0; s == ROPEKIT_OK && i < g->n_output; ++i)
        if (*g->output[i]->name && !rk_set_has(&defs, g->output[i]->name))
            s = rk_set_put(out, g->output[i]->name);
    rk_set_free(&defs);
    rk_set_free(&inner);
    return s;
}

/* Names the subgraphs of node n read from n's scope (or further out). */
static ropekit_status rk_node_free_names(const Onnx__NodeProto *n, rk_set *out) {
    for (size_t a = 0; a < n->n_attribute; ++a) {
        const Onnx__AttributeProto *at = n->attribute[a];
        if (at->g) RK_TRY(rk_subgraph_free_names(at->g, out));
        for (size_t k = 0; k < at->n_graphs; ++k)
            RK_TRY(rk_subgraph_free_names(at->graphs[k], out));
    }
    return ROPEKIT_OK;
}

static int rk_node_has_subgraphs(const Onnx__NodeProto *n) {
    for (size_t a = 0; a < n->n_attribute; ++a)
        if (n->attribute[a]->g || n->attribute[a]->n_graphs) return 1;
    return 0;
}

int rk_is_constant_node(const Onnx__NodeProto *n) {
    return strcmp(n->op_type, "Constant") == 0 &&
           (!n->domain || !*n->domain || strcmp(n->domain, "ai.onnx") == 0);
}

/* ---- the index ------------------------------------------------------------------------------ */

static void rk_index_clear(rk_graph *ix) {
    for (size_t i = 0; i < ix->n_values; ++i)
        free(ix->values[i].consumers);
    ix->n_values = 0;
    if (ix->slots) memset(ix->slots, 0, ix->n_slots * sizeof *ix->slots);
}

static int64_t rk_lookup(const rk_graph *ix, const char *name) {
    if (!ix->n_slots) return -1;
    for (size_t i = rk_hash(name) & (ix->n_slots - 1);; i = (i + 1) & (ix->n_slots - 1)) {
        uint32_t v = ix->slots[i];
        if (!v) return -1;
        if (strcmp(ix->values[v - 1].name, name) == 0) return v - 1;
    }
}

static ropekit_status rk_rehash(rk_graph *ix, size_t want) {
    size_t cap = 64;
    while (cap < 2 * want)
        cap *= 2;
    if (cap <= ix->n_slots) return ROPEKIT_OK;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return RK_OOM();
    for (size_t v = 0; v < ix->n_values; ++v) {
        size_t j = rk_hash(ix->values[v].name) & (cap - 1);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = (uint32_t)(v + 1);
    }
    free(ix->slots);
    ix->slots = slots;
    ix->n_slots = cap;
    return ROPEKIT_OK;
}

/* The value `name`, added when missing. */
static ropekit_status rk_value_get(rk_graph *ix, const char *name, rk_value **out) {
    int64_t v = rk_lookup(ix, name);
    if (v < 0) {
        if (ix->n_values >= INT32_MAX - 1)
            return rk_fail(ROPEKIT_ERROR_OVERFLOW, "too many values in the graph");
        if (ix->n_values == ix->cap_values) {
            size_t cap = ix->cap_values ? 2 * ix->cap_values : 256;
            rk_value *nv = realloc(ix->values, cap * sizeof *nv);
            if (!nv) return RK_OOM();
            ix->values = nv;
            ix->cap_values = cap;
        }
        RK_TRY(rk_rehash(ix, ix->n_values + 1));
        v = (int64_t)ix->n_values++;
        rk_value *val = &ix->values[v];
        memset(val, 0, sizeof *val);
        val->name = name;
        val->producer = -1;
        size_t j = rk_hash(name) & (ix->n_slots - 1);
        while (ix->slots[j])
            j = (j + 1) & (ix->n_slots - 1);
        ix->slots[j] = (uint32_t)(v + 1);
    }
    *out = &ix->values[v];
    return ROPEKIT_OK;
}

static ropekit_status rk_add_consumer(rk_value *v, int32_t node) {
    if (v->n_consumers && v->consumers[v->n_consumers - 1] == node) return ROPEKIT_OK;
    if (v->n_consumers == v->cap_consumers) {
        uint32_t cap = v->cap_consumers ? 2 * v->cap_consumers : 4;
        int32_t *c = realloc(v->consumers, cap * sizeof *c);
        if (!c) return RK_OOM();
        v->consumers = c;
        v->cap_consumers = cap;
    }
    v->consumers[v->n_consumers++] = node;
    return ROPEKIT_OK;
}

static int rk_is_main(const rk_graph *ix) {
    return ix->model && ix->model->proto && ix->model->proto->graph == ix->g;
}

static ropekit_status rk_dangling(const rk_graph *ix, const char *what, const char *name) {
    return rk_fail(ROPEKIT_ERROR_PARSE,
                   "graph '%s': %s reads '%s', which no node, graph input or "
                   "initializer defines",
                   rk_s(ix->g->name), what, name);
}

/* A use of `name` by node `pos` (-1: a graph output). */
static ropekit_status rk_use(rk_graph *ix, const char *name, int32_t pos, const char *what) {
    int64_t v = rk_lookup(ix, name);
    if (v < 0) {
        if (rk_is_main(ix)) return rk_dangling(ix, what, name);
        rk_value *val; /* a subgraph opened on its own: the name comes from an outer scope */
        RK_TRY(rk_value_get(ix, name, &val));
        v = val - ix->values;
    }
    return pos >= 0 ? rk_add_consumer(&ix->values[v], pos) : ROPEKIT_OK;
}

/* The graph must be acyclic (a node that reads, directly or through other nodes, its own
 * output; a self-loop included): Kahn's algorithm over the producer -> consumer edges, linear in
 * nodes + uses. On a cycle, the message names a node on it and the value it reads around. */
static ropekit_status rk_check_acyclic(const rk_graph *ix) {
    const Onnx__GraphProto *g = ix->g;
    size_t n = g->n_node;
    if (n == 0) return ROPEKIT_OK;
    uint32_t *indeg = calloc(n, sizeof *indeg);
    int32_t *queue = malloc(n * sizeof *queue);
    if (!indeg || !queue) {
        free(indeg);
        free(queue);
        return RK_OOM();
    }
    for (size_t v = 0; v < ix->n_values; ++v)
        if (ix->values[v].producer >= 0)
            for (uint32_t k = 0; k < ix->values[v].n_consumers; ++k)
                indeg[ix->values[v].consumers[k]]++;
    size_t head = 0, tail = 0;
    for (size_t i = 0; i < n; ++i)
        if (indeg[i] == 0) queue[tail++] = (int32_t)i;
    while (head < tail) {
        const Onnx__NodeProto *node = g->node[queue[head++]];
        for (size_t o = 0; o < node->n_output; ++o) {
            if (!*node->output[o]) continue;
            int64_t v = rk_lookup(ix, node->output[o]);
            if (v < 0) continue;
            const rk_value *val = &ix->values[v];
            for (uint32_t k = 0; k < val->n_consumers; ++k)
                if (--indeg[val->consumers[k]] == 0) queue[tail++] = val->consumers[k];
        }
    }
    ropekit_status s = ROPEKIT_OK;
    if (tail < n) {
        /* Every node left has an input produced by a node left: walk producers backwards from
         * one until a node repeats; that node is on a cycle. indeg is reused as the visit mark. */
        int32_t cur = -1;
        for (size_t i = 0; i < n && cur < 0; ++i)
            if (indeg[i] != 0) cur = (int32_t)i;
        for (size_t i = 0; i < n; ++i)
            indeg[i] = indeg[i] != 0 ? 1u : 0u;
        for (size_t steps = 0; steps <= n; ++steps) {
            if (indeg[cur] == 2u) break;
            indeg[cur] = 2u;
            const Onnx__NodeProto *node = g->node[cur];
            int32_t next = -1;
            for (size_t k = 0; k < node->n_input && next < 0; ++k) {
                if (!*node->input[k]) continue;
                int64_t v = rk_lookup(ix, node->input[k]);
                int32_t p = v >= 0 ? ix->values[v].producer : -1;
                if (p >= 0 && indeg[p] != 0) next = p;
            }
            if (next < 0) break; /* only through subgraph reads: cur is still on the cycle */
            cur = next;
        }
        const Onnx__NodeProto *node = g->node[cur];
        int self = 0;
        for (size_t k = 0; k < node->n_input; ++k)
            for (size_t o = 0; o < node->n_output; ++o)
                self |= *node->input[k] && !strcmp(node->input[k], node->output[o]);
        s = rk_fail(ROPEKIT_ERROR_PARSE,
                    "graph '%s': the nodes form a cycle: node %d '%s' (%s) %s (%zu of %zu "
                    "nodes are on or behind cycles)",
                    rk_s(g->name), (int)cur, rk_s(node->name), node->op_type,
                    self ? "reads its own output" : "is on it", n - tail, n);
    }
    free(indeg);
    free(queue);
    return s;
}

ropekit_status rk_graph_refresh(rk_graph *ix) {
    Onnx__GraphProto *g = ix->g;
    rk_index_clear(ix);
    if (g->n_node >= INT32_MAX) return rk_fail(ROPEKIT_ERROR_OVERFLOW, "too many nodes");
    rk_value *v;
    for (size_t i = 0; i < g->n_input; ++i) {
        RK_TRY(rk_value_get(ix, g->input[i]->name, &v));
        if (v->flags & RK_VALUE_INPUT)
            return rk_fail(ROPEKIT_ERROR_PARSE, "graph '%s': input '%s' is listed twice",
                           rk_s(g->name), v->name);
        v->flags |= RK_VALUE_INPUT;
        v->info = g->input[i];
    }
    for (size_t i = 0; i < g->n_initializer; ++i) {
        Onnx__TensorProto *t = g->initializer[i];
        if (!t->name || !*t->name)
            return rk_fail(ROPEKIT_ERROR_PARSE, "graph '%s': initializer %zu has no name",
                           rk_s(g->name), i);
        RK_TRY(rk_value_get(ix, t->name, &v));
        if (v->flags & (RK_VALUE_INITIALIZER | RK_VALUE_SPARSE_INIT))
            return rk_fail(ROPEKIT_ERROR_PARSE, "graph '%s': initializer '%s' is defined twice",
                           rk_s(g->name), t->name);
        v->flags |= RK_VALUE_INITIALIZER;
        v->initializer = t;
    }
    for (size_t i = 0; i < g->n_sparse_initializer; ++i) {
        const char *name = g->sparse_initializer[i]->values->name;
        if (!name || !*name)
            return rk_fail(ROPEKIT_ERROR_PARSE, "graph '%s': sparse initializer %zu has no name",
                           rk_s(g->name), i);
        RK_TRY(rk_value_get(ix, name, &v));
        if (v->flags & (RK_VALUE_INITIALIZER | RK_VALUE_SPARSE_INIT))
            return rk_fail(ROPEKIT_ERROR_PARSE, "graph '%s': initializer '%s' is defined twice",
                           rk_s(g->name), name);
        v->flags |= RK_VALUE_SPARSE_INIT;
    }
    for (size_t i = 0; i < g->n_node; ++i) {
        const Onnx__NodeProto *n = g->node[i];
        for (size_t o = 0; o < n->n_output; ++o) {
            if (!*n->output[o]) continue; /* an omitted optional output */
            RK_TRY(rk_value_get(ix, n->output[o], &v));
            if (v->producer >= 0 ||
                v->flags & (RK_VALUE_INPUT | RK_VALUE_INITIALIZER | RK_VALUE_SPARSE_INIT))
                return rk_fail(ROPEKIT_ERROR_PARSE,
                               "graph '%s': value '%s' is defined twice "
                               "(again by node '%s', %s)",
                               rk_s(g->name), v->name, rk_s(n->name), n->op_type);
            v->producer = (int32_t)i;
            v->producer_output = (int32_t)o;
        }
    }
    char what[160];
    for (size_t i = 0; i < g->n_node; ++i) {
        const Onnx__NodeProto *n = g->node[i];
        snprintf(what, sizeof what, "node '%.100s' (%.40s)", rk_s(n->name), n->op_type);
        for (size_t k = 0; k < n->n_input; ++k)
            if (*n->input[k]) RK_TRY(rk_use(ix, n->input[k], (int32_t)i, what));
        if (rk_node_has_subgraphs(n)) {
            rk_set free_names = {0};
            ropekit_status s = rk_node_free_names(n, &free_names);
            for (size_t k = 0; s == ROPEKIT_OK && k < free_names.cap; ++k)
                if (free_names.keys[k]) s = rk_use(ix, free_names.keys[k], (int32_t)i, what);
            rk_set_free(&free_names);
            RK_TRY(s);
        }
    }
    for (size_t i = 0; i < g->n_output; ++i) {
        const char *name = g->output[i]->name;
        RK_TRY(rk_use(ix, name, -1, "a graph output"));
        RK_TRY(rk_value_get(ix, name, &v));
        v->flags |= RK_VALUE_OUTPUT;
        if (!v->info) v->info = g->output[i];
    }
    for (size_t i = 0; i < g->n_value_info; ++i) {
        int64_t k = rk_lookup(ix, g->value_info[i]->name);
        if (k >= 0 && !ix->values[k].info) ix->values[k].info = g->value_info[i];
    }
    /* Consumer lists are ascending by construction except for subgraph uses (added in set
     * order, still per node in ascending node order), so nothing to sort. */
    return rk_check_acyclic(ix);
}

ropekit_status rk_graph_open(ropekit_model *m, Onnx__GraphProto *g, rk_graph **out) {
    *out = NULL;
    if (!g) g = m ? m->proto->graph : NULL;
    if (!g) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "no graph");
    rk_graph *ix = calloc(1, sizeof *ix);
    if (!ix) return RK_OOM();
    ix->model = m;
    ix->g = g;
    ropekit_status s = rk_graph_refresh(ix);
    if (s != ROPEKIT_OK) {
        rk_graph_close(ix);
        return s;
    }
    *out = ix;
    return ROPEKIT_OK;
}

void rk_graph_close(rk_graph *ix) {
    if (!ix) return;
    rk_index_clear(ix);
    free(ix->values);
    free(ix->slots);
    free(ix);
}

const rk_value *rk_graph_value(const rk_graph *ix, const char *name) {
    int64_t v = rk_lookup(ix, name);
    return v < 0 ? NULL : &ix->values[v];
}

Onnx__NodeProto *rk_graph_producer(const rk_graph *ix, const char *name) {
    const rk_value *v = rk_graph_value(ix, name);
    return v && v->producer >= 0 ? ix->g->node[v->producer] : NULL;
}

/* ---- shapes and constants ---------------------------------------------------------------------
 */

static void rk_shape_from_dims(rk_shape *out, int32_t elem_type, const int64_t *dims, size_t n) {
    out->elem_type = elem_type;
    if (n > RK_SHAPE_MAX_RANK) return;
    out->rank = (int32_t)n;
    for (size_t i = 0; i < n; ++i)
        out->dims[i] = dims[i];
}

void rk_graph_shape(const rk_graph *ix, const char *name, rk_shape *out) {
    memset(out, 0, sizeof *out);
    out->rank = -1;
    const rk_value *v = rk_graph_value(ix, name);
    if (!v) return;
    if (v->initializer) {
        rk_shape_from_dims(out, v->initializer->data_type, v->initializer->dims,
                           v->initializer->n_dims);
        return;
    }
    const Onnx__TypeProto *tp = v->info ? v->info->type : NULL;
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type) {
        const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
        out->elem_type = tt->has_elem_type ? tt->elem_type : 0;
        if (tt->shape && tt->shape->n_dim <= RK_SHAPE_MAX_RANK) {
            out->rank = (int32_t)tt->shape->n_dim;
            for (size_t i = 0; i < tt->shape->n_dim; ++i) {
                const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
                out->dims[i] =
                    d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                            d->dim_value >= 0
                        ? d->dim_value
                        : -1;
            }
        }
        /* a value_info with a type but no shape (torch's optimize=False exports): a Constant
         * still knows its shape */
        if (out->rank >= 0 || v->producer < 0 || !rk_is_constant_node(ix->g->node[v->producer]))
            return;
    }
    if (v->producer >= 0 && rk_is_constant_node(ix->g->node[v->producer])) {
        const Onnx__NodeProto *n = ix->g->node[v->producer];
        const Onnx__AttributeProto *a;
        if ((a = rk_node_attr(n, "value")) && a->t) {
            rk_shape_from_dims(out, a->t->data_type, a->t->dims, a->t->n_dims);
        } else if ((a = rk_node_attr(n, "value_float")) || (a = rk_node_attr(n, "value_int"))) {
            rk_shape_from_dims(out, a->name[6] == 'f' ? RK_DT_FLOAT : RK_DT_INT64, NULL, 0);
        } else if ((a = rk_node_attr(n, "value_floats")) || (a = rk_node_attr(n, "value_ints"))) {
            int64_t len = (int64_t)(a->name[6] == 'f' ? a->n_floats : a->n_ints);
            rk_shape_from_dims(out, a->name[6] == 'f' ? RK_DT_FLOAT : RK_DT_INT64, &len, 1);
        }
    }
}

static ropekit_status rk_const(const rk_graph *ix, const char *name, int64_t *oi, double *od,
                               size_t cap, size_t *count) {
    const rk_value *v = rk_graph_value(ix, name);
    if (!v || v->flags & RK_VALUE_INPUT)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "'%s' is not a constant%s", name,
                       v ? " (a graph input)" : " (undefined)");
    if (v->initializer)
        return oi ? rk_tensor_read_i64(ix->model, v->initializer, oi, cap, count)
                  : rk_tensor_read_f64(ix->model, v->initializer, od, cap, count);
    const Onnx__NodeProto *n = v->producer >= 0 ? ix->g->node[v->producer] : NULL;
    if (!n || !rk_is_constant_node(n))
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "'%s' is not a constant (computed by %s)",
                       name, n ? n->op_type : "nothing");
    const Onnx__AttributeProto *a;
    if ((a = rk_node_attr(n, "value")) && a->t)
        return oi ? rk_tensor_read_i64(ix->model, a->t, oi, cap, count)
                  : rk_tensor_read_f64(ix->model, a->t, od, cap, count);
    size_t len = 0;
    const float *fv = NULL;
    const int64_t *iv = NULL;
    if ((a = rk_node_attr(n, "value_float")) && a->has_f)
        fv = &a->f, len = 1;
    else if ((a = rk_node_attr(n, "value_floats")))
        fv = a->floats, len = a->n_floats;
    else if ((a = rk_node_attr(n, "value_int")) && a->has_i)
        iv = &a->i, len = 1;
    else if ((a = rk_node_attr(n, "value_ints")))
        iv = a->ints, len = a->n_ints;
    else
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "Constant '%s' has no numeric value attribute",
                       name);
    if (len > cap)
        return rk_fail(ROPEKIT_ERROR_SHAPE, "constant '%s' has %zu elements, at most %zu expected",
                       name, len, cap);
    for (size_t i = 0; i < len; ++i) {
        if (iv) {
            if (oi)
                oi[i] = iv[i];
            else
                od[i] = (double)iv[i];
        } else if (od) {
            od[i] = fv[i];
        } else {
            if (!rk_f64_to_i64(fv[i], &oi[i]))
                return rk_fail(ROPEKIT_ERROR_DTYPE,
                               "constant '%s' element %zu (%g) is not an "
                               "integer",
                               name, i, (double)fv[i]);
        }
    }
    *count = len;
    return ROPEKIT_OK;
}

ropekit_status rk_graph_const_i64(const rk_graph *ix, const char *name, int64_t *out, size_t cap,
                                  size_t *count) {
    return rk_const(ix, name, out, NULL, cap, count);
}

ropekit_status rk_graph_const_f64(const rk_graph *ix, const char *name, double *out, size_t cap,
                                  size_t *count) {
    return rk_const(ix, name, NULL, out, cap, count);
}

/* ---- edits ------------------------------------------------------------------------------------
 */

static int rk_defined_in_subgraphs(const Onnx__GraphProto *g, const char *name, int depth);

/* Values node `pos` reads (inputs and subgraph free names), each once. */
static ropekit_status rk_node_reads(const rk_graph *ix, int32_t pos, int64_t **out, size_t *n) {
    const Onnx__NodeProto *node = ix->g->node[pos];
    rk_set names = {0};
    ropekit_status s = ROPEKIT_OK;
    for (size_t k = 0; s == ROPEKIT_OK && k < node->n_input; ++k)
        if (*node->input[k]) s = rk_set_put(&names, node->input[k]);
    if (s == ROPEKIT_OK) s = rk_node_free_names(node, &names);
    *out = NULL;
    *n = 0;
    if (s == ROPEKIT_OK && names.n) {
        *out = malloc(names.n * sizeof **out);
        if (!*out) s = RK_OOM();
        for (size_t k = 0; s == ROPEKIT_OK && k < names.cap; ++k)
            if (names.keys[k]) {
                int64_t v = rk_lookup(ix, names.keys[k]);
                if (v >= 0) (*out)[(*n)++] = v;
            }
    }
    rk_set_free(&names);
    return s;
}

ropekit_status rk_graph_remove_nodes(rk_graph *ix, const int32_t *positions, size_t n,
                                     size_t *n_removed) {
    Onnx__GraphProto *g = ix->g;
    size_t nn = g->n_node;
    if (n_removed) *n_removed = 0;
    for (size_t i = 0; i < n; ++i)
        if (positions[i] < 0 || (size_t)positions[i] >= nn)
            return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE,
                           "node position %" PRId32 " is outside "
                           "[0, %zu)",
                           positions[i], nn);
    uint8_t *dead = calloc(nn ? nn : 1, 1);
    uint32_t *live = malloc((ix->n_values ? ix->n_values : 1) * sizeof *live);
    int32_t *work = malloc((nn ? nn : 1) * sizeof *work);
    uint8_t *lost = calloc(ix->n_values ? ix->n_values : 1, 1); /* a value lost a consumer */
    if (!dead || !live || !work || !lost) {
        free(dead), free(live), free(work), free(lost);
        return RK_OOM();
    }
    for (size_t v = 0; v < ix->n_values; ++v)
        live[v] = ix->values[v].n_consumers;
    size_t top = 0;
    for (size_t i = 0; i < n; ++i)
        if (!dead[positions[i]]) dead[positions[i]] = 1, work[top++] = positions[i];
    ropekit_status s = ROPEKIT_OK;
    while (top > 0 && s == ROPEKIT_OK) {
        int32_t p = work[--top];
        int64_t *reads;
        size_t nr;
        s = rk_node_reads(ix, p, &reads, &nr);
        for (size_t r = 0; s == ROPEKIT_OK && r < nr; ++r) {
            rk_value *v = &ix->values[reads[r]];
            lost[reads[r]] = 1;
            if (--live[reads[r]] > 0 || v->flags & RK_VALUE_OUTPUT || v->producer < 0 ||
                dead[v->producer])
                continue;
            /* the producer dies when none of its outputs is used any more */
            const Onnx__NodeProto *prod = g->node[v->producer];
            int used = 0;
            for (size_t o = 0; o < prod->n_output && !used; ++o) {
                if (!*prod->output[o]) continue;
                int64_t k = rk_lookup(ix, prod->output[o]);
                used = k >= 0 && (live[k] > 0 || ix->values[k].flags & RK_VALUE_OUTPUT);
            }
            if (!used) dead[v->producer] = 1, work[top++] = v->producer;
        }
        free(reads);
    }
    /* nothing may still read what is removed */
    for (size_t i = 0; s == ROPEKIT_OK && i < nn; ++i)
        for (size_t o = 0; dead[i] && s == ROPEKIT_OK && o < g->node[i]->n_output; ++o) {
            const rk_value *v =
                *g->node[i]->output[o] ? rk_graph_value(ix, g->node[i]->output[o]) : NULL;
            for (uint32_t c = 0; v && c < v->n_consumers; ++c)
                if (!dead[v->consumers[c]])
                    s = rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE,
                                "cannot remove node '%s' (%s): "
                                "node %" PRId32 " still reads its output '%s'",
                                rk_s(g->node[i]->name), g->node[i]->op_type, v->consumers[c],
                                v->name);
            if (v && s == ROPEKIT_OK && v->flags & RK_VALUE_OUTPUT)
                s = rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE,
                            "cannot remove node '%s' (%s): its "
                            "output '%s' is a graph output",
                            rk_s(g->node[i]->name), g->node[i]->op_type, v->name);
        }
    /* Decide everything before freeing anything: the index points at names in these messages. */
    uint8_t *drop_vi = NULL, *drop_init = NULL;
    if (s == ROPEKIT_OK) {
        drop_vi = calloc(g->n_value_info + 1, 1);
        drop_init = calloc(g->n_initializer + 1, 1);
        if (!drop_vi || !drop_init) s = RK_OOM();
    }
    if (s == ROPEKIT_OK) {
        for (size_t i = 0; i < g->n_value_info; ++i) {
            const rk_value *v = rk_graph_value(ix, g->value_info[i]->name);
            drop_vi[i] = v && v->producer >= 0 && dead[v->producer];
        }
        for (size_t i = 0; i < g->n_initializer; ++i) {
            Onnx__TensorProto *t = g->initializer[i];
            int64_t k = rk_lookup(ix, t->name);
            drop_init[i] = k >= 0 && ix->values[k].initializer == t && lost[k] && live[k] == 0 &&
                           !(ix->values[k].flags & (RK_VALUE_INPUT | RK_VALUE_OUTPUT));
        }
        size_t w = 0;
        for (size_t i = 0; i < g->n_value_info; ++i) {
            if (drop_vi[i])
                protobuf_c_message_free_unpacked(&g->value_info[i]->base, NULL);
            else
                g->value_info[w++] = g->value_info[i];
        }
        g->n_value_info = w;
        w = 0;
        for (size_t i = 0; i < g->n_initializer; ++i) {
            if (drop_init[i])
                protobuf_c_message_free_unpacked(&g->initializer[i]->base, NULL);
            else
                g->initializer[w++] = g->initializer[i];
        }
        g->n_initializer = w;
        size_t removed = 0;
        w = 0;
        for (size_t i = 0; i < nn; ++i) {
            if (dead[i]) {
                rk_node_free(g->node[i]);
                ++removed;
            } else {
                g->node[w++] = g->node[i];
            }
        }
        g->n_node = w;
        if (n_removed) *n_removed = removed;
        s = rk_graph_refresh(ix); /* the index pointed into freed messages */
    }
    free(drop_vi), free(drop_init);
    free(dead), free(live), free(work), free(lost);
    return s;
}

ropekit_status rk_graph_insert_node(rk_graph *ix, Onnx__NodeProto *node, int32_t hint,
                                    int32_t *pos) {
    Onnx__GraphProto *g = ix->g;
    ropekit_status s = ROPEKIT_OK;
    int64_t lo = 0;
    if (!node->op_type || !*node->op_type)
        s = rk_fail(ROPEKIT_ERROR_PARSE, "a node to insert needs an op_type");
    for (size_t o = 0; s == ROPEKIT_OK && o < node->n_output; ++o)
        if (*node->output[o] && rk_graph_value(ix, node->output[o]))
            s = rk_fail(ROPEKIT_ERROR_PARSE, "cannot insert %s: its output '%s' is already defined",
                        node->op_type, node->output[o]);
    rk_set reads = {0};
    for (size_t k = 0; s == ROPEKIT_OK && k < node->n_input; ++k)
        if (*node->input[k]) s = rk_set_put(&reads, node->input[k]);
    if (s == ROPEKIT_OK) s = rk_node_free_names(node, &reads);
    for (size_t k = 0; s == ROPEKIT_OK && k < reads.cap; ++k) {
        if (!reads.keys[k]) continue;
        const rk_value *v = rk_graph_value(ix, reads.keys[k]);
        if (!v || (v->producer < 0 &&
                   !(v->flags & (RK_VALUE_INPUT | RK_VALUE_INITIALIZER | RK_VALUE_SPARSE_INIT))))
            s = rk_fail(ROPEKIT_ERROR_PARSE, "cannot insert %s: its input '%s' is not defined",
                        node->op_type, reads.keys[k]);
        else if (v->producer + 1 > lo)
            lo = v->producer + 1;
    }
    rk_set_free(&reads);
    if (s == ROPEKIT_OK && g->n_node >= INT32_MAX - 1)
        s = rk_fail(ROPEKIT_ERROR_OVERFLOW, "too many nodes");
    Onnx__NodeProto **nodes = NULL;
    if (s == ROPEKIT_OK && !(nodes = realloc(g->node, (g->n_node + 1) * sizeof *nodes)))
        s = RK_OOM();
    if (s != ROPEKIT_OK) {
        rk_node_free(node);
        return s;
    }
    g->node = nodes;
    int64_t at = hint >= lo && (size_t)hint <= g->n_node ? hint : lo;
    memmove(&nodes[at + 1], &nodes[at], (g->n_node - (size_t)at) * sizeof *nodes);
    nodes[at] = node;
    g->n_node++;
    if (pos) *pos = (int32_t)at;
    return rk_graph_refresh(ix);
}

/* Rename free uses of `from` inside subgraph g (stop where g defines `from` itself). */
static ropekit_status rk_subgraph_rename(Onnx__GraphProto *g, const char *from, const char *to);

static ropekit_status rk_rename_in_node(Onnx__NodeProto *n, const char *from, const char *to,
                                        int inputs) {
    for (size_t k = 0; inputs && k < n->n_input; ++k)
        if (strcmp(n->input[k], from) == 0) {
            char *c = rk_strdup(to);
            if (!c) return RK_OOM();
            free(n->input[k]);
            n->input[k] = c;
        }
    for (size_t a = 0; a < n->n_attribute; ++a) {
        Onnx__AttributeProto *at = n->attribute[a];
        if (at->g) RK_TRY(rk_subgraph_rename(at->g, from, to));
        for (size_t k = 0; k < at->n_graphs; ++k)
            RK_TRY(rk_subgraph_rename(at->graphs[k], from, to));
    }
    return ROPEKIT_OK;
}

static ropekit_status rk_subgraph_rename(Onnx__GraphProto *g, const char *from, const char *to) {
    rk_set defs = {0};
    ropekit_status s = rk_graph_defs(g, &defs);
    int shadowed = s == ROPEKIT_OK && rk_set_has(&defs, from);
    rk_set_free(&defs);
    if (s != ROPEKIT_OK || shadowed) return s;
    for (size_t i = 0; i < g->n_node; ++i)
        RK_TRY(rk_rename_in_node(g->node[i], from, to, 1));
    for (size_t i = 0; i < g->n_output; ++i)
        if (strcmp(g->output[i]->name, from) == 0) {
            char *c = rk_strdup(to);
            if (!c) return RK_OOM();
            free(g->output[i]->name);
            g->output[i]->name = c;
        }
    return ROPEKIT_OK;
}

ropekit_status rk_graph_replace_uses(rk_graph *ix, const char *from, const char *to) {
    const rk_value *f = rk_graph_value(ix, from), *t = rk_graph_value(ix, to);
    if (!f || !t)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE,
                       "replace '%s' by '%s': '%s' is not "
                       "defined",
                       from, to, f ? to : from);
    if (f->flags & RK_VALUE_OUTPUT)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "replace '%s': it is a graph output", from);
    if (rk_defined_in_subgraphs(ix->g, to, 0))
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE,
                       "replace '%s' by '%s': a subgraph defines "
                       "'%s' itself",
                       from, to, to);
    for (uint32_t c = 0; c < f->n_consumers; ++c)
        if (f->consumers[c] <= t->producer)
            return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE,
                           "replace '%s' by '%s': node %" PRId32
                           " reads it before '%s' is computed (node %" PRId32 ")",
                           from, to, f->consumers[c], to, t->producer);
    /* copy the names: renaming frees strings the index points to */
    char *fc = rk_strdup(from), *tc = rk_strdup(to);
    ropekit_status s = fc && tc ? ROPEKIT_OK : RK_OOM();
    for (uint32_t c = 0; s == ROPEKIT_OK && c < f->n_consumers; ++c)
        s = rk_rename_in_node(ix->g->node[f->consumers[c]], fc, tc, 1);
    free(fc);
    free(tc);
    ropekit_status r = rk_graph_refresh(ix);
    return s != ROPEKIT_OK ? s : r;
}

ropekit_status rk_graph_add_initializer(rk_graph *ix, Onnx__TensorProto *t) {
    Onnx__GraphProto *g = ix->g;
    ropekit_status s = ROPEKIT_OK;
    Onnx__TensorProto **v = NULL;
    if (!t->name || !*t->name)
        s = rk_fail(ROPEKIT_ERROR_PARSE, "an initializer needs a name");
    else if (rk_graph_value(ix, t->name))
        s = rk_fail(ROPEKIT_ERROR_PARSE, "initializer '%s' is already defined", t->name);
    else if (!(v = realloc(g->initializer, (g->n_initializer + 1) * sizeof *v)))
        s = RK_OOM();
    if (s != ROPEKIT_OK) {
        protobuf_c_message_free_unpacked(&t->base, NULL);
        return s;
    }
    g->initializer = v;
    v[g->n_initializer++] = t;
    return rk_graph_refresh(ix);
}

/* Is `name` defined anywhere inside the subgraphs of g's nodes? */
static int rk_defined_in_subgraphs(const Onnx__GraphProto *g, const char *name, int depth) {
    if (depth > RK_MAX_NESTING) return 1;
    for (size_t i = 0; i < g->n_node; ++i)
        for (size_t a = 0; a < g->node[i]->n_attribute; ++a) {
            const Onnx__AttributeProto *at = g->node[i]->attribute[a];
            for (size_t k = 0; k < (at->g ? 1 : 0) + at->n_graphs; ++k) {
                const Onnx__GraphProto *sg =
                    at->g ? (k == 0 ? at->g : at->graphs[k - 1]) : at->graphs[k];
                rk_set defs = {0};
                int hit = rk_graph_defs(sg, &defs) != ROPEKIT_OK || rk_set_has(&defs, name);
                rk_set_free(&defs);
                if (hit || rk_defined_in_subgraphs(sg, name, depth + 1)) return 1;
            }
        }
    return 0;
}

char *rk_graph_unique_name(const rk_graph *ix, const char *base) {
    size_t n = strlen(base) + 24;
    char *name = malloc(n);
    if (!name) return NULL;
    snprintf(name, n, "%s", base);
    for (uint64_t k = 1; rk_graph_value(ix, name) || rk_defined_in_subgraphs(ix->g, name, 0); ++k)
        snprintf(name, n, "%s_%" PRIu64, base, k);
    return name;
}

/* ---- opsets -----------------------------------------------------------------------------------
 */

static int rk_same_domain(const char *a, const char *b) {
    a = rk_s(a);
    b = rk_s(b);
    if (strcmp(a, "ai.onnx") == 0) a = "";
    if (strcmp(b, "ai.onnx") == 0) b = "";
    return strcmp(a, b) == 0;
}

int64_t rk_model_opset(const Onnx__ModelProto *m, const char *domain) {
    for (size_t i = 0; i < m->n_opset_import; ++i)
        if (rk_same_domain(m->opset_import[i]->domain, domain)) return m->opset_import[i]->version;
    return -1;
}

ropekit_status rk_model_import_opset(Onnx__ModelProto *m, const char *domain, int64_t version) {
    if (rk_model_opset(m, domain) >= 0) return ROPEKIT_OK;
    Onnx__OperatorSetIdProto **v =
        realloc(m->opset_import, (m->n_opset_import + 1) * sizeof *m->opset_import);
    if (!v) return RK_OOM();
    m->opset_import = v;
    Onnx__OperatorSetIdProto *op = malloc(sizeof *op);
    if (!op) return RK_OOM();
    onnx__operator_set_id_proto__init(op);
    if (!(op->domain = rk_strdup(domain))) {
        free(op);
        return RK_OOM();
    }
    op->has_version = 1;
    op->version = version;
    v[m->n_opset_import++] = op;
    return ROPEKIT_OK;
}
