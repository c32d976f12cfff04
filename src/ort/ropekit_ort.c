/* libropekit_ort: ropekit's operators as ONNX Runtime custom operators.
 *
 * ONNX Runtime loads the library (SessionOptions.register_custom_ops_library) and calls
 * RegisterCustomOps, which adds two custom-op domains to the session options:
 *
 *   com.microsoft  QKNormRotaryEmbedding, InverseRotaryRegroup — the schema of onnxruntime's
 *                  contrib definitions (inputs, outputs, attributes and defaults, T in float,
 *                  float16, bfloat16 and M = float), operators no released onnxruntime has.
 *   ai.ropekit     RotaryEmbedding (ai.onnx order and semantics), MsRotaryEmbedding
 *                  (com.microsoft.RotaryEmbedding order), MRotaryEmbedding, QKNormRotaryEmbedding,
 *                  InverseRotaryRegroup — ropekit's documented semantics (include/ropekit.h):
 *                  bounds-checked position ids, bfloat16, float32 tables for 16-bit activations,
 *                  the `inverse` attribute.
 *
 * The CPU kernels run ropekit's CPU backend (the SIMD variant the CPU supports, bit-identical to
 * the scalar reference) and split large calls over onnxruntime's intra-op thread pool through
 * ropekit_set_parallel_for and OrtApi::KernelContext_ParallelFor: no thread of ropekit's own.
 * Built with ROPEKIT_ORT_CUDA (libropekit_ort_cuda), the same operators are also registered for
 * the CUDA execution provider and run on its compute stream through libropekit_cuda.
 *
 * Every invalid input becomes an onnxruntime error status carrying ropekit's message; the library
 * never prints, aborts or exits. It requests the C API version of the header it was compiled
 * against (ORT_API_VERSION, 21 for Debian's libonnxruntime-dev 1.21), so it loads in onnxruntime
 * 1.21 and every later release. */
#include <onnxruntime_c_api.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ropekit.h"
#ifdef ROPEKIT_ORT_CUDA
#include "ropekit_cuda.h"
#endif

#define RK_EXPORT __attribute__((visibility("default")))

static const OrtApi *g_api;
static const char k_ms_domain[] = "com.microsoft";
static const char k_rk_domain[] = "ai.ropekit";

/* ---- onnxruntime's thread pool as ropekit's parallel-for ----------------------------------- */

/* The kernel context of the Compute call running on this thread: ropekit calls the hook on the
 * caller's thread, so the hook finds the context of its own call here. */
static _Thread_local const OrtKernelContext *tl_context;

typedef struct {
    ropekit_task_fn task;
    void *task_ctx;
    int64_t n, chunks;
} rk_pf_job;

static void rk_pf_chunk(void *user, size_t i) {
    const rk_pf_job *j = user;
    /* n is a token count and chunks <= RK_MAX_CHUNKS: the products cannot overflow */
    int64_t begin = j->n * (int64_t)i / j->chunks, end = j->n * ((int64_t)i + 1) / j->chunks;
    if (begin < end) j->task(j->task_ctx, begin, end);
}

/* At most this many work items per call: enough for onnxruntime to balance its threads, few
 * enough that each item is worth a task. */
#define RK_MAX_CHUNKS 128

static void rk_parallel_for(void *host_ctx, int64_t n, ropekit_task_fn task, void *task_ctx) {
    (void)host_ctx;
    const OrtKernelContext *ctx = tl_context;
    if (ctx == NULL || n < 2) {
        task(task_ctx, 0, n);
        return;
    }
    rk_pf_job job = {task, task_ctx, n, n < RK_MAX_CHUNKS ? n : RK_MAX_CHUNKS};
    OrtStatus *st = g_api->KernelContext_ParallelFor(ctx, rk_pf_chunk, (size_t)job.chunks, 0, &job);
    if (st != NULL) {
        /* No pool could run it: every range is recomputed here (the tasks only read inputs and
         * write outputs, so running a range twice gives the same bits). */
        g_api->ReleaseStatus(st);
        task(task_ctx, 0, n);
    }
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void rk_install_hook(void) {
    (void)ropekit_set_parallel_for(rk_parallel_for, NULL);
}

/* ---- operators ------------------------------------------------------------------------------ */

typedef enum { RK_ONNX_ROPE, RK_MS_ROPE, RK_MROPE, RK_QKNORM, RK_REGROUP } rk_kind;

typedef struct {
    OrtCustomOp base; /* first: the callbacks get &base */
    rk_kind kind;
    const char *name;
    const char *domain;
    ONNXTensorElementDataType t; /* activations */
    ONNXTensorElementDataType m; /* tables (and the kv norm weight) */
    int cuda;
} rk_op;

typedef struct {
    const rk_op *op;
    char node[160]; /* the node's name, for messages */
    union {
        ropekit_rotary_embedding_attrs onnx;
        ropekit_ms_rotary_embedding_attrs ms;
        ropekit_mrotary_embedding_attrs mrope;
        ropekit_qknorm_rotary_embedding_attrs qknorm;
        ropekit_inverse_rotary_regroup_attrs regroup;
    } a;
#ifdef ROPEKIT_ORT_CUDA
    pthread_mutex_t cuda_lock; /* one launch + id check at a time per kernel (its error state) */
    ropekit_cuda_error_state *cuda_errors;
#endif
} rk_kernel;

static const rk_op *rk_of(const OrtCustomOp *op) {
    return (const rk_op *)(const void *)op;
}

static OrtStatus *rk_status(OrtErrorCode code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static OrtStatus *rk_status(OrtErrorCode code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return g_api->CreateStatus(code, msg);
}

static OrtErrorCode rk_code(ropekit_status s) {
    switch (s) {
    case ROPEKIT_ERROR_OUT_OF_MEMORY:
    case ROPEKIT_ERROR_DEVICE: return ORT_FAIL;
    case ROPEKIT_ERROR_UNSUPPORTED: return ORT_NOT_IMPLEMENTED;
    default: return ORT_INVALID_ARGUMENT;
    }
}

/* The prefix of every message: "ai.ropekit.RotaryEmbedding node 'rope_3': ". */
#define RK_WHERE "%s.%s node '%s': "
#define RK_WHERE_ARGS(k) (k)->op->domain, (k)->op->name, (k)->node

static OrtStatus *rk_fail(const rk_kernel *k, ropekit_status s, const char *msg) {
    return rk_status(rk_code(s), RK_WHERE "%s (%s)", RK_WHERE_ARGS(k), msg, ropekit_status_str(s));
}

/* ---- attributes ---- */

/* Whether the node has an attribute of this name, of any type: onnxruntime's array getter answers
 * for every attribute that exists (with 0 values when it is not a list of ints). */
static int rk_attr_exists(const OrtKernelInfo *info, const char *name) {
    size_t n = 0;
    OrtStatus *st = g_api->KernelInfoGetAttributeArray_int64(info, name, NULL, &n);
    if (st == NULL) return 1;
    g_api->ReleaseStatus(st);
    return 0;
}

/* An int attribute: its value, or dflt when the node does not have it. One of another type (a
 * float `interleaved = 1.0`, a string) is an error: read as absent it would run the default. */
static OrtStatus *rk_attr_i(const rk_kernel *k, const OrtKernelInfo *info, const char *name,
                            int64_t dflt, int64_t *out) {
    *out = dflt;
    OrtStatus *st = g_api->KernelInfoGetAttribute_int64(info, name, out);
    if (st == NULL) return NULL;
    g_api->ReleaseStatus(st);
    *out = dflt;
    if (!rk_attr_exists(info, name)) return NULL;
    return rk_status(ORT_INVALID_ARGUMENT,
                     RK_WHERE "attribute %s must be an int (AttributeProto INT), not another type "
                              "(ROPEKIT_ERROR_INVALID_ATTRIBUTE)",
                     RK_WHERE_ARGS(k), name);
}

static OrtStatus *rk_attr_f(const rk_kernel *k, const OrtKernelInfo *info, const char *name,
                            float dflt, float *out) {
    *out = dflt;
    OrtStatus *st = g_api->KernelInfoGetAttribute_float(info, name, out);
    if (st == NULL) return NULL;
    g_api->ReleaseStatus(st);
    *out = dflt;
    if (!rk_attr_exists(info, name)) return NULL;
    return rk_status(ORT_INVALID_ARGUMENT,
                     RK_WHERE "attribute %s must be a float (AttributeProto FLOAT), not another "
                              "type (ROPEKIT_ERROR_INVALID_ATTRIBUTE)",
                     RK_WHERE_ARGS(k), name);
}

#define RK_ATTR_I(name, dflt, field) RK_ATTR_TRY(rk_attr_i(k, info, name, dflt, &(field)))
#define RK_ATTR_F(name, dflt, field) RK_ATTR_TRY(rk_attr_f(k, info, name, dflt, &(field)))
#define RK_ATTR_TRY(expr)                                                                          \
    do {                                                                                           \
        OrtStatus *rk_ast_ = (expr);                                                               \
        if (rk_ast_ != NULL) return rk_ast_;                                                       \
    } while (0)

static OrtStatus *rk_read_attrs(rk_kernel *k, const OrtKernelInfo *info) {
    switch (k->op->kind) {
    case RK_ONNX_ROPE:
        RK_ATTR_I("interleaved", 0, k->a.onnx.interleaved);
        RK_ATTR_I("rotary_embedding_dim", 0, k->a.onnx.rotary_embedding_dim);
        RK_ATTR_I("num_heads", 0, k->a.onnx.num_heads);
        RK_ATTR_I("inverse", 0, k->a.onnx.inverse);
        break;
    case RK_MS_ROPE:
        RK_ATTR_I("interleaved", 0, k->a.ms.interleaved);
        RK_ATTR_I("rotary_embedding_dim", 0, k->a.ms.rotary_embedding_dim);
        RK_ATTR_I("num_heads", 0, k->a.ms.num_heads);
        RK_ATTR_F("scale", 1.0f, k->a.ms.scale);
        RK_ATTR_I("is_packed_batching", 0, k->a.ms.is_packed_batching);
        RK_ATTR_I("inverse", 0, k->a.ms.inverse);
        break;
    case RK_MROPE: {
        ropekit_mrotary_embedding_attrs *a = &k->a.mrope;
        RK_ATTR_I("mrope_layout", 0, a->mrope_layout);
        RK_ATTR_I("interleaved", 0, a->interleaved);
        RK_ATTR_I("rotary_embedding_dim", 0, a->rotary_embedding_dim);
        RK_ATTR_I("num_heads", 0, a->num_heads);
        RK_ATTR_F("scale", 1.0f, a->scale);
        RK_ATTR_I("is_packed_batching", 0, a->is_packed_batching);
        RK_ATTR_I("inverse", 0, a->inverse);
        size_t n = 0;
        OrtStatus *st = g_api->KernelInfoGetAttributeArray_int64(info, "mrope_section", NULL, &n);
        if (st != NULL) {
            g_api->ReleaseStatus(st);
            return rk_status(ORT_INVALID_ARGUMENT,
                             RK_WHERE "attribute mrope_section (3 ints) is required",
                             RK_WHERE_ARGS(k));
        }
        if (n != 3) /* 0 also for an attribute that is not a list of ints */
            return rk_status(ORT_INVALID_ARGUMENT,
                             RK_WHERE "attribute mrope_section must have 3 values (AttributeProto "
                                      "INTS), not %zu",
                             RK_WHERE_ARGS(k), n);
        st = g_api->KernelInfoGetAttributeArray_int64(info, "mrope_section", a->mrope_section, &n);
        if (st != NULL) return st;
        break;
    }
    case RK_QKNORM:
        RK_ATTR_I("num_heads", 0, k->a.qknorm.num_heads);
        RK_ATTR_I("head_dim", 0, k->a.qknorm.head_dim);
        RK_ATTR_I("rope_head_dim", 0, k->a.qknorm.rope_head_dim);
        RK_ATTR_F("epsilon", 1e-6f, k->a.qknorm.epsilon);
        RK_ATTR_I("simulate_fp8", 1, k->a.qknorm.simulate_fp8);
        break;
    case RK_REGROUP:
        RK_ATTR_I("num_heads", 0, k->a.regroup.num_heads);
        RK_ATTR_I("head_dim", 0, k->a.regroup.head_dim);
        RK_ATTR_I("rope_head_dim", 0, k->a.regroup.rope_head_dim);
        RK_ATTR_I("num_groups", 1, k->a.regroup.num_groups);
        break;
    }
    return NULL;
}

static OrtStatus *ORT_API_CALL rk_create_kernel(const OrtCustomOp *op, const OrtApi *api,
                                                const OrtKernelInfo *info, void **kernel) {
    (void)api;
    rk_kernel *k = calloc(1, sizeof *k);
    if (k == NULL) return g_api->CreateStatus(ORT_FAIL, "ropekit: out of memory creating a kernel");
    k->op = rk_of(op);
    size_t size = sizeof k->node;
    OrtStatus *st = g_api->KernelInfo_GetNodeName(info, k->node, &size);
    if (st != NULL) { /* too long or unavailable: the message names the op only */
        g_api->ReleaseStatus(st);
        snprintf(k->node, sizeof k->node, "?");
    }
    st = rk_read_attrs(k, info);
    if (st != NULL) {
        free(k);
        return st;
    }
#ifdef ROPEKIT_ORT_CUDA
    if (k->op->cuda && pthread_mutex_init(&k->cuda_lock, NULL) != 0) {
        free(k);
        return g_api->CreateStatus(ORT_FAIL, "ropekit: cannot create a mutex");
    }
#endif
    *kernel = k;
    return NULL;
}

static void ORT_API_CALL rk_destroy_kernel(void *kernel) {
    rk_kernel *k = kernel;
    if (k == NULL) return;
#ifdef ROPEKIT_ORT_CUDA
    if (k->op->cuda) {
        ropekit_cuda_error_state_destroy(k->cuda_errors);
        pthread_mutex_destroy(&k->cuda_lock);
    }
#endif
    free(k);
}

/* ---- tensors ---- */

static ropekit_dtype rk_dtype(ONNXTensorElementDataType t) {
    switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return ROPEKIT_FLOAT32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return ROPEKIT_FLOAT16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return ROPEKIT_BFLOAT16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return ROPEKIT_INT64;
    default: return (ropekit_dtype)0;
    }
}

/* The shape and data of an OrtValue as a contiguous ropekit view. present = 0 for an absent
 * optional input. */
typedef struct {
    int present;
    ropekit_tensor t;
    size_t rank;
    int64_t dims[ROPEKIT_MAX_RANK];
} rk_value;

static OrtStatus *rk_view(const rk_kernel *k, OrtValue *v, const char *name, rk_value *out) {
    memset(out, 0, sizeof *out);
    if (v == NULL) return NULL;
    OrtTensorTypeAndShapeInfo *info = NULL;
    OrtStatus *st = g_api->GetTensorTypeAndShape(v, &info);
    if (st != NULL) return st;
    ONNXTensorElementDataType et = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    st = g_api->GetTensorElementType(info, &et);
    if (st == NULL) st = g_api->GetDimensionsCount(info, &rank);
    if (st == NULL && (rank < 1 || rank > ROPEKIT_MAX_RANK)) {
        g_api->ReleaseTensorTypeAndShapeInfo(info);
        return rk_status(ORT_INVALID_ARGUMENT,
                         RK_WHERE
                         "%s has rank %zu; ropekit tensors have rank 1 to %d (ROPEKIT_ERROR_SHAPE)",
                         RK_WHERE_ARGS(k), name, rank, ROPEKIT_MAX_RANK);
    }
    if (st == NULL) st = g_api->GetDimensions(info, out->dims, rank);
    g_api->ReleaseTensorTypeAndShapeInfo(info);
    if (st != NULL) return st;
    void *data = NULL;
    st = g_api->GetTensorMutableData(v, &data);
    if (st != NULL) return st;
    out->present = 1;
    out->rank = rank;
    out->t = ropekit_tensor_contiguous(data, rk_dtype(et), (int32_t)rank, out->dims);
    return NULL;
}

static OrtStatus *rk_input(const rk_kernel *k, OrtKernelContext *ctx, size_t i, const char *name,
                           rk_value *out) {
    const OrtValue *v = NULL;
    OrtStatus *st = g_api->KernelContext_GetInput(ctx, i, &v);
    if (st != NULL) return st;
    return rk_view(k, (OrtValue *)v, name, out);
}

static OrtStatus *rk_output(const rk_kernel *k, OrtKernelContext *ctx, size_t i, const char *name,
                            const int64_t *dims, size_t rank, rk_value *out) {
    OrtValue *v = NULL;
    OrtStatus *st = g_api->KernelContext_GetOutput(ctx, i, dims, rank, &v);
    if (st != NULL) return st;
    if (v == NULL)
        return rk_status(ORT_FAIL, RK_WHERE "onnxruntime gave no buffer for output %s",
                         RK_WHERE_ARGS(k), name);
    return rk_view(k, v, name, out);
}

#define RK_TRY(expr)                                                                               \
    do {                                                                                           \
        OrtStatus *rk_st_ = (expr);                                                                \
        if (rk_st_ != NULL) return rk_st_;                                                         \
    } while (0)

static OrtStatus *rk_shape_error(const rk_kernel *k, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static OrtStatus *rk_shape_error(const rk_kernel *k, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rk_status(ORT_INVALID_ARGUMENT, RK_WHERE "%s", RK_WHERE_ARGS(k), msg);
}

/* ---- the compute of each operator, CPU or CUDA ---- */

typedef struct {
    void *stream; /* CUDA: the compute stream */
} rk_exec;

static ropekit_status rk_run_rope(rk_kernel *k, const rk_exec *ex, const rk_value *in,
                                  const rk_value *y) {
    const ropekit_tensor *pos;
    (void)ex;
    switch (k->op->kind) {
    case RK_ONNX_ROPE: pos = in[3].present ? &in[3].t : NULL;
#ifdef ROPEKIT_ORT_CUDA
        if (k->op->cuda)
            return ropekit_cuda_rotary_embedding(&in[0].t, &in[1].t, &in[2].t, pos, &k->a.onnx,
                                                 &y->t, ex->stream, k->cuda_errors);
#endif
        return ropekit_rotary_embedding(&in[0].t, &in[1].t, &in[2].t, pos, &k->a.onnx, &y->t);
    case RK_MS_ROPE:
#ifdef ROPEKIT_ORT_CUDA
        if (k->op->cuda)
            return ropekit_cuda_ms_rotary_embedding(&in[0].t, &in[1].t, &in[2].t, &in[3].t,
                                                    &k->a.ms, &y->t, ex->stream, k->cuda_errors);
#endif
        return ropekit_ms_rotary_embedding(&in[0].t, &in[1].t, &in[2].t, &in[3].t, &k->a.ms, &y->t);
    default:
#ifdef ROPEKIT_ORT_CUDA
        if (k->op->cuda)
            return ropekit_cuda_mrotary_embedding(&in[0].t, &in[1].t, &in[2].t, &in[3].t,
                                                  &k->a.mrope, &y->t, ex->stream, k->cuda_errors);
#endif
        return ropekit_mrotary_embedding(&in[0].t, &in[1].t, &in[2].t, &in[3].t, &k->a.mrope,
                                         &y->t);
    }
}

static const char *rk_last_message(const rk_kernel *k) {
#ifdef ROPEKIT_ORT_CUDA
    if (k->op->cuda) return ropekit_cuda_last_error();
#else
    (void)k;
#endif
    return ropekit_last_error();
}

static OrtStatus *rk_compute_rope(rk_kernel *k, OrtKernelContext *ctx, const rk_exec *ex) {
    static const char *const onnx_names[4] = {"X", "cos_cache", "sin_cache", "position_ids"};
    static const char *const ms_names[4] = {"input", "position_ids", "cos_cache", "sin_cache"};
    const char *const *names = k->op->kind == RK_ONNX_ROPE ? onnx_names : ms_names;
    rk_value in[4], y;
    for (size_t i = 0; i < 4; i++)
        RK_TRY(rk_input(k, ctx, i, names[i], &in[i]));
    if (!in[0].present) return rk_shape_error(k, "%s is required", names[0]);
    RK_TRY(rk_output(k, ctx, 0, "Y", in[0].dims, in[0].rank, &y));
    ropekit_status s;
#ifdef ROPEKIT_ORT_CUDA
    if (k->op->cuda) {
        /* Position ids are checked on the device: read the error state after the launch (one
         * stream synchronisation), so an out-of-range id is an error here as on the CPU. */
        pthread_mutex_lock(&k->cuda_lock);
        s = k->cuda_errors ? ROPEKIT_OK : ropekit_cuda_error_state_create(&k->cuda_errors);
        if (s == ROPEKIT_OK) s = rk_run_rope(k, ex, in, &y);
        if (s == ROPEKIT_OK) {
            int64_t bad = 0;
            s = ropekit_cuda_check_errors(k->cuda_errors, ex->stream, &bad);
            if (s != ROPEKIT_OK) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", ropekit_cuda_last_error());
                (void)ropekit_cuda_error_state_reset(k->cuda_errors, ex->stream);
                pthread_mutex_unlock(&k->cuda_lock);
                return rk_fail(k, s, msg);
            }
        }
        if (s != ROPEKIT_OK) {
            OrtStatus *st = rk_fail(k, s, ropekit_cuda_last_error());
            pthread_mutex_unlock(&k->cuda_lock);
            return st;
        }
        pthread_mutex_unlock(&k->cuda_lock);
        return NULL;
    }
#endif
    s = rk_run_rope(k, ex, in, &y);
    return s == ROPEKIT_OK ? NULL : rk_fail(k, s, rk_last_message(k));
}

/* onnxruntime's own kernels (the contrib CUDA kernels of these two operators) check only the
 * element count of kv_norm_weight and of the cos/sin tables, and ignore the tables when
 * rope_head_dim is 0. The com.microsoft-named operators accept the same: a tensor with the
 * expected number of elements is viewed in the expected shape; the ai.ropekit operators take
 * ropekit's exact shapes. Returns the view to pass (NULL for tables that are not read). */
static const ropekit_tensor *rk_lenient(const rk_kernel *k, rk_value *v, int rank,
                                        const int64_t *dims, int unused) {
    if (k->op->domain != k_ms_domain) return &v->t;
    if (unused) return NULL;
    int64_t want = 1, have = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || (dims[i] != 0 && want > INT64_MAX / dims[i])) return &v->t;
        want *= dims[i];
    }
    for (size_t i = 0; i < v->rank; i++)
        have *= v->dims[i]; /* onnxruntime's sizes fit */
    if (have == want) {
        memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
        v->rank = (size_t)rank;
        v->t = ropekit_tensor_contiguous(v->t.data, v->t.dtype, rank, dims);
    }
    return &v->t;
}

static OrtStatus *rk_compute_qknorm(rk_kernel *k, OrtKernelContext *ctx, const rk_exec *ex) {
    static const char *const names[5] = {"query", "kv", "kv_norm_weight", "cos", "sin"};
    rk_value in[5], qo, ko;
    for (size_t i = 0; i < 5; i++) {
        RK_TRY(rk_input(k, ctx, i, names[i], &in[i]));
        if (!in[i].present) return rk_shape_error(k, "%s is required", names[i]);
    }
    const ropekit_qknorm_rotary_embedding_attrs *a = &k->a.qknorm;
    /* The output shapes come from these; ropekit checks everything else. */
    if (in[0].rank != 3)
        return rk_shape_error(k,
                              "query must be rank 3 (B, S, num_heads*head_dim), not rank %zu "
                              "(ROPEKIT_ERROR_SHAPE)",
                              in[0].rank);
    if (a->num_heads <= 0 || a->head_dim <= 0)
        return rk_shape_error(k,
                              "num_heads = %lld and head_dim = %lld must be > 0 "
                              "(ROPEKIT_ERROR_INVALID_ATTRIBUTE)",
                              (long long)a->num_heads, (long long)a->head_dim);
    /* Checked before the outputs are allocated: a query_out of B*S*num_heads*head_dim elements
     * from attributes that do not match the query could overflow or be huge. */
    if (a->num_heads > INT64_MAX / a->head_dim)
        return rk_shape_error(k,
                              "num_heads*head_dim = %lld*%lld overflows int64 "
                              "(ROPEKIT_ERROR_OVERFLOW)",
                              (long long)a->num_heads, (long long)a->head_dim);
    if (in[0].dims[2] != a->num_heads * a->head_dim)
        return rk_shape_error(k,
                              "query has %lld channels per token, num_heads*head_dim = %lld*%lld "
                              "= %lld (ROPEKIT_ERROR_SHAPE)",
                              (long long)in[0].dims[2], (long long)a->num_heads,
                              (long long)a->head_dim, (long long)(a->num_heads * a->head_dim));
    int64_t qdims[4] = {in[0].dims[0], in[0].dims[1], a->num_heads, a->head_dim};
    RK_TRY(rk_output(k, ctx, 0, "query_out", qdims, 4, &qo));
    RK_TRY(rk_output(k, ctx, 1, "kv_out", in[1].dims, in[1].rank, &ko));
    int64_t wdims[1] = {a->head_dim}, tdims[3] = {in[0].dims[0], in[0].dims[1], a->rope_head_dim};
    const ropekit_tensor *w = rk_lenient(k, &in[2], 1, wdims, 0);
    const ropekit_tensor *c = rk_lenient(k, &in[3], 3, tdims, a->rope_head_dim == 0);
    const ropekit_tensor *sn = rk_lenient(k, &in[4], 3, tdims, a->rope_head_dim == 0);
    ropekit_status s;
#ifdef ROPEKIT_ORT_CUDA
    if (k->op->cuda)
        s = ropekit_cuda_qknorm_rotary_embedding(&in[0].t, &in[1].t, w, c, sn, a, &qo.t, &ko.t,
                                                 ex->stream);
    else
#endif
        s = ropekit_qknorm_rotary_embedding(&in[0].t, &in[1].t, w, c, sn, a, &qo.t, &ko.t);
    (void)ex;
    return s == ROPEKIT_OK ? NULL : rk_fail(k, s, rk_last_message(k));
}

static OrtStatus *rk_compute_regroup(rk_kernel *k, OrtKernelContext *ctx, const rk_exec *ex) {
    static const char *const names[3] = {"input", "cos", "sin"};
    rk_value in[3], out;
    for (size_t i = 0; i < 3; i++) {
        RK_TRY(rk_input(k, ctx, i, names[i], &in[i]));
        if (!in[i].present) return rk_shape_error(k, "%s is required", names[i]);
    }
    const ropekit_inverse_rotary_regroup_attrs *a = &k->a.regroup;
    if (in[0].rank != 2)
        return rk_shape_error(k,
                              "input must be rank 2 (N, num_heads*head_dim), not rank %zu "
                              "(ROPEKIT_ERROR_SHAPE)",
                              in[0].rank);
    if (a->num_heads <= 0 || a->head_dim <= 0 || a->num_groups <= 0)
        return rk_shape_error(k,
                              "num_heads = %lld, head_dim = %lld and num_groups = %lld must be "
                              "> 0 (ROPEKIT_ERROR_INVALID_ATTRIBUTE)",
                              (long long)a->num_heads, (long long)a->head_dim,
                              (long long)a->num_groups);
    if (a->num_heads > INT64_MAX / a->head_dim)
        return rk_shape_error(k, "num_heads*head_dim overflows int64 (ROPEKIT_ERROR_OVERFLOW)");
    int64_t width = a->num_heads * a->head_dim;
    if (width % a->num_groups != 0)
        return rk_shape_error(k,
                              "num_groups = %lld does not divide num_heads*head_dim = %lld "
                              "(ROPEKIT_ERROR_INVALID_ATTRIBUTE)",
                              (long long)a->num_groups, (long long)width);
    if (in[0].dims[1] != width)
        return rk_shape_error(k,
                              "input has %lld channels per row, num_heads*head_dim = %lld "
                              "(ROPEKIT_ERROR_SHAPE)",
                              (long long)in[0].dims[1], (long long)width);
    int64_t odims[3] = {a->num_groups, in[0].dims[0], width / a->num_groups};
    RK_TRY(rk_output(k, ctx, 0, "output", odims, 3, &out));
    int64_t tdims[2] = {in[0].dims[0], a->rope_head_dim};
    const ropekit_tensor *c = rk_lenient(k, &in[1], 2, tdims, a->rope_head_dim == 0);
    const ropekit_tensor *sn = rk_lenient(k, &in[2], 2, tdims, a->rope_head_dim == 0);
    ropekit_status s;
#ifdef ROPEKIT_ORT_CUDA
    if (k->op->cuda)
        s = ropekit_cuda_inverse_rotary_regroup(&in[0].t, c, sn, a, &out.t, ex->stream);
    else
#endif
        s = ropekit_inverse_rotary_regroup(&in[0].t, c, sn, a, &out.t);
    (void)ex;
    return s == ROPEKIT_OK ? NULL : rk_fail(k, s, rk_last_message(k));
}

static OrtStatus *ORT_API_CALL rk_compute(void *kernel, OrtKernelContext *ctx) {
    rk_kernel *k = kernel;
    rk_exec ex = {NULL};
#ifdef ROPEKIT_ORT_CUDA
    if (k->op->cuda) RK_TRY(g_api->KernelContext_GetGPUComputeStream(ctx, &ex.stream));
#endif
    const OrtKernelContext *saved = tl_context;
    tl_context = ctx;
    OrtStatus *st;
    switch (k->op->kind) {
    case RK_QKNORM: st = rk_compute_qknorm(k, ctx, &ex); break;
    case RK_REGROUP: st = rk_compute_regroup(k, ctx, &ex); break;
    default: st = rk_compute_rope(k, ctx, &ex); break;
    }
    tl_context = saved;
    return st;
}

/* ---- OrtCustomOp callbacks: names, types, arity ---- */

static const char *ORT_API_CALL rk_get_name(const OrtCustomOp *op) {
    return rk_of(op)->name;
}

static const char *ORT_API_CALL rk_get_ep(const OrtCustomOp *op) {
    return rk_of(op)->cuda ? "CUDAExecutionProvider" : "CPUExecutionProvider";
}

static size_t ORT_API_CALL rk_input_count(const OrtCustomOp *op) {
    switch (rk_of(op)->kind) {
    case RK_QKNORM: return 5;
    case RK_REGROUP: return 3;
    default: return 4;
    }
}

static size_t ORT_API_CALL rk_output_count(const OrtCustomOp *op) {
    return rk_of(op)->kind == RK_QKNORM ? 2 : 1;
}

static ONNXTensorElementDataType ORT_API_CALL rk_input_type(const OrtCustomOp *op, size_t i) {
    const rk_op *o = rk_of(op);
    switch (o->kind) {
    case RK_ONNX_ROPE: /* X, cos_cache, sin_cache, position_ids */
        return i == 0 ? o->t : i == 3 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : o->m;
    case RK_MS_ROPE: /* input, position_ids, cos_cache, sin_cache */
    case RK_MROPE: return i == 0 ? o->t : i == 1 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : o->m;
    case RK_QKNORM: /* query, kv (T); kv_norm_weight, cos, sin (M) */ return i < 2 ? o->t : o->m;
    case RK_REGROUP: /* input (T); cos, sin (M) */ return i == 0 ? o->t : o->m;
    }
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}

static ONNXTensorElementDataType ORT_API_CALL rk_output_type(const OrtCustomOp *op, size_t i) {
    (void)i;
    return rk_of(op)->t;
}

static OrtCustomOpInputOutputCharacteristic ORT_API_CALL rk_input_char(const OrtCustomOp *op,
                                                                       size_t i) {
    return rk_of(op)->kind == RK_ONNX_ROPE && i == 3 ? INPUT_OUTPUT_OPTIONAL
                                                     : INPUT_OUTPUT_REQUIRED;
}

static OrtCustomOpInputOutputCharacteristic ORT_API_CALL rk_output_char(const OrtCustomOp *op,
                                                                        size_t i) {
    (void)op;
    (void)i;
    return INPUT_OUTPUT_REQUIRED;
}

static OrtMemType ORT_API_CALL rk_input_mem(const OrtCustomOp *op, size_t i) {
    (void)op;
    (void)i;
    return OrtMemTypeDefault;
}

static int ORT_API_CALL rk_variadic_zero(const OrtCustomOp *op) {
    (void)op;
    return 0;
}
static int ORT_API_CALL rk_variadic_one(const OrtCustomOp *op) {
    (void)op;
    return 1;
}
static int ORT_API_CALL rk_start_version(const OrtCustomOp *op) {
    (void)op;
    return 1;
}
static int ORT_API_CALL rk_end_version(const OrtCustomOp *op) {
    (void)op;
    return 1;
}

/* ---- the operator table ---- */

#define F32 ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT
#define F16 ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16
#define BF16 ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16

/* One registration per (operator, T, M): onnxruntime builds the type constraints of each
 * operator from the set of its registrations. Rotary tables are T, or float for any T. */
#define RK_ROPE_TYPES(kind, name, dom, cuda)                                                       \
    {{0}, kind, name, dom, F32, F32, cuda}, {{0}, kind, name, dom, F16, F16, cuda},                \
        {{0}, kind, name, dom, F16, F32, cuda}, {{0}, kind, name, dom, BF16, BF16, cuda}, {        \
        {0}, kind, name, dom, BF16, F32, cuda                                                      \
    }
#define RK_FIXED_M(kind, name, dom, cuda)                                                          \
    {{0}, kind, name, dom, F32, F32, cuda}, {{0}, kind, name, dom, F16, F32, cuda}, {              \
        {0}, kind, name, dom, BF16, F32, cuda                                                      \
    }
#define RK_ALL_OPS(cuda)                                                                           \
    RK_FIXED_M(RK_QKNORM, "QKNormRotaryEmbedding", k_ms_domain, cuda),                             \
        RK_FIXED_M(RK_REGROUP, "InverseRotaryRegroup", k_ms_domain, cuda),                         \
        RK_ROPE_TYPES(RK_ONNX_ROPE, "RotaryEmbedding", k_rk_domain, cuda),                         \
        RK_ROPE_TYPES(RK_MS_ROPE, "MsRotaryEmbedding", k_rk_domain, cuda),                         \
        RK_ROPE_TYPES(RK_MROPE, "MRotaryEmbedding", k_rk_domain, cuda),                            \
        RK_FIXED_M(RK_QKNORM, "QKNormRotaryEmbedding", k_rk_domain, cuda),                         \
        RK_FIXED_M(RK_REGROUP, "InverseRotaryRegroup", k_rk_domain, cuda)

static rk_op g_ops[] = {
    RK_ALL_OPS(0),
#ifdef ROPEKIT_ORT_CUDA
    RK_ALL_OPS(1),
#endif
};
#define RK_NUM_OPS (sizeof g_ops / sizeof g_ops[0])

static void rk_init_ops(void) {
    for (size_t i = 0; i < RK_NUM_OPS; i++) {
        OrtCustomOp *b = &g_ops[i].base;
        memset(b, 0, sizeof *b);
        b->version = ORT_API_VERSION;
        b->GetName = rk_get_name;
        b->GetExecutionProviderType = rk_get_ep;
        b->GetInputType = rk_input_type;
        b->GetInputTypeCount = rk_input_count;
        b->GetOutputType = rk_output_type;
        b->GetOutputTypeCount = rk_output_count;
        b->GetInputCharacteristic = rk_input_char;
        b->GetOutputCharacteristic = rk_output_char;
        b->GetInputMemoryType = rk_input_mem;
        b->GetVariadicInputMinArity = rk_variadic_one;
        b->GetVariadicInputHomogeneity = rk_variadic_zero;
        b->GetVariadicOutputMinArity = rk_variadic_one;
        b->GetVariadicOutputHomogeneity = rk_variadic_zero;
        b->CreateKernelV2 = rk_create_kernel;
        b->KernelComputeV2 = rk_compute;
        b->KernelDestroy = rk_destroy_kernel;
        b->GetStartVersion = rk_start_version;
        b->GetEndVersion = rk_end_version;
    }
}

static pthread_once_t g_ops_once = PTHREAD_ONCE_INIT;

/* The domains handed to onnxruntime must outlive every session that uses them; they are kept
 * here and released when the library is unloaded. */
typedef struct rk_domain_node {
    OrtCustomOpDomain *domain;
    struct rk_domain_node *next;
} rk_domain_node;
static rk_domain_node *g_domains;
static pthread_mutex_t g_domains_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((destructor)) static void rk_release_domains(void) {
    pthread_mutex_lock(&g_domains_lock);
    while (g_domains != NULL) {
        rk_domain_node *n = g_domains;
        g_domains = n->next;
        if (g_api) g_api->ReleaseCustomOpDomain(n->domain);
        free(n);
    }
    pthread_mutex_unlock(&g_domains_lock);
}

static OrtStatus *rk_add_domain(OrtSessionOptions *options, const char *name) {
    rk_domain_node *node = malloc(sizeof *node);
    if (node == NULL) return g_api->CreateStatus(ORT_FAIL, "ropekit: out of memory");
    OrtStatus *st = g_api->CreateCustomOpDomain(name, &node->domain);
    if (st != NULL) {
        free(node);
        return st;
    }
    for (size_t i = 0; i < RK_NUM_OPS && st == NULL; i++)
        if (g_ops[i].domain == name) st = g_api->CustomOpDomain_Add(node->domain, &g_ops[i].base);
    if (st == NULL) st = g_api->AddCustomOpDomain(options, node->domain);
    if (st != NULL) {
        g_api->ReleaseCustomOpDomain(node->domain);
        free(node);
        return st;
    }
    pthread_mutex_lock(&g_domains_lock);
    node->next = g_domains;
    g_domains = node;
    pthread_mutex_unlock(&g_domains_lock);
    return NULL;
}

/* Entry point (OrtApi::RegisterCustomOpsLibrary / SessionOptions.register_custom_ops_library). */
RK_EXPORT OrtStatus *ORT_API_CALL RegisterCustomOps(OrtSessionOptions *options,
                                                    const OrtApiBase *api_base);
RK_EXPORT OrtStatus *ORT_API_CALL RegisterCustomOps(OrtSessionOptions *options,
                                                    const OrtApiBase *api_base) {
    if (api_base == NULL) return NULL; /* nothing to report through */
    const OrtApi *api = api_base->GetApi(ORT_API_VERSION);
    if (api == NULL) {
        /* An onnxruntime older than the header: version 1 of the API can still say so. */
        const OrtApi *v1 = api_base->GetApi(1);
        if (v1 == NULL) return NULL;
        char msg[256];
        snprintf(msg, sizeof msg,
                 "libropekit_ort needs onnxruntime C API version %d (onnxruntime 1.%d or newer); "
                 "this onnxruntime is %s",
                 ORT_API_VERSION, ORT_API_VERSION, api_base->GetVersionString());
        return v1->CreateStatus(ORT_FAIL, msg);
    }
    g_api = api;
    pthread_once(&g_ops_once, rk_init_ops);
    pthread_once(&g_once, rk_install_hook);
    /* A custom domain named com.microsoft is accepted, but while it is registered onnxruntime
     * (seen in 1.32) fails on models that do not import com.microsoft themselves as soon as its
     * optimizer inserts contrib nodes ("com.microsoft:FusedMatMul(-1) is not a registered
     * function/op"). ROPEKIT_ORT_COM_MICROSOFT=0 registers only ai.ropekit for such models. */
    const char *ms = getenv("ROPEKIT_ORT_COM_MICROSOFT");
    OrtStatus *st = ms && !strcmp(ms, "0") ? NULL : rk_add_domain(options, k_ms_domain);
    if (st == NULL) st = rk_add_domain(options, k_rk_domain);
    return st;
}
