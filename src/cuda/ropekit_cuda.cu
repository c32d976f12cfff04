/* libropekit_cuda: the ropekit operators on NVIDIA GPUs. Contracts: include/ropekit.h and
 * include/ropekit_cuda.h; maths: src/cpu/ref.c (the kernels follow its rounding points exactly).
 *
 * Flow: the CPU library's plan builders (src/core/validate.c) check every argument without
 * reading tensor data -> the family's run_* picks a kernel (dtype, table dtype, 16-byte vectors
 * or scalar) -> one launch. Position ids are checked by the kernel (device memory): a bad id's
 * row is never read, its pairs are copied, and the event is recorded in an error state.
 *
 * Files: this one holds the public entry points, the error states and the host helpers;
 * common.cuh the shared device helpers; rotary.cu (+ mrope.cuh) the rotary kernels of
 * RotaryEmbedding (both flavours) and MRotaryEmbedding, one plan -> launch path (run_rotary);
 * qknorm.cu QKNormRotaryEmbedding; regroup.cu InverseRotaryRegroup. */
#include <cstring>
#include "common.cuh"

namespace rk_cuda {

ropekit_status cuda_fail(cudaError_t e, const char *what) {
    return rk_fail(ROPEKIT_CUDA_ERROR_RUNTIME, "CUDA error in %s: %s (%s)", what,
                   cudaGetErrorName(e), cudaGetErrorString(e));
}

ropekit_status launched(const char *what) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? ROPEKIT_OK : cuda_fail(e, what);
}

int sm_count(void) {
    int dev = 0, n = 132;
    if (cudaGetDevice(&dev) == cudaSuccess)
        (void)cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 132;
}

int env_int(const char *name, int lo, int hi, int dflt) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end = nullptr;
    const long v = strtol(e, &end, 10);
    return *end == 0 && v >= lo && v <= hi ? (int)v : dflt;
}
int env_choice(const char *name, const char *const *names, int n, int dflt) {
    const char *e = getenv(name);
    if (!e) return dflt;
    for (int i = 0; i < n; ++i)
        if (names[i] && !strcmp(e, names[i])) return i;
    return dflt;
}
int flat_hints() {
    static const int h = env_int("ROPEKIT_CUDA_HINTS", 0, 7, 5);
    return h;
}

namespace {
std::mutex g_default_mu;
ropekit_cuda_error_state *g_default[64];
} // namespace

ropekit_status state_or_default(ropekit_cuda_error_state **st) {
    if (*st) return ROPEKIT_OK;
    return ropekit_cuda_error_state_default(st);
}

} // namespace rk_cuda

using namespace rk_cuda;

namespace {
/* The three rotary operators: a plan, then the one launch path. */
ropekit_status rotary_launch(ropekit_status planned, const rk_rotary_plan *p, void *stream,
                             ropekit_cuda_error_state *errors) {
    RK_TRY(planned);
    return run_rotary(p, stream, errors);
}
} // namespace

/* ---- public API --------------------------------------------------------------------------- */

extern "C" {

const char *ropekit_cuda_last_error(void) { return ropekit_last_error(); }

ropekit_status ropekit_cuda_error_state_create(ropekit_cuda_error_state **state) {
    rk_clear_error();
    if (!state) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "state is NULL");
    *state = nullptr;
    ropekit_cuda_error_state *s = new (std::nothrow) ropekit_cuda_error_state();
    if (!s) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "error state: out of host memory");
    cudaError_t e = cudaGetDevice(&s->device);
    if (e == cudaSuccess) e = cudaMalloc(&s->dev, sizeof(DevErr));
    if (e == cudaSuccess) e = cudaMemset(s->dev, 0, sizeof(DevErr));
    if (e != cudaSuccess) {
        if (s->dev) cudaFree(s->dev);
        delete s;
        return cuda_fail(e, "error state creation");
    }
    *state = s;
    return ROPEKIT_OK;
}

void ropekit_cuda_error_state_destroy(ropekit_cuda_error_state *state) {
    if (!state || state->is_default) return;
    cudaFree(state->dev);
    delete state;
}

ropekit_status ropekit_cuda_error_state_default(ropekit_cuda_error_state **state) {
    if (!state) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "state is NULL");
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
    if (dev < 0 || dev >= 64) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "device %d: no default error state", dev);
    std::lock_guard<std::mutex> lock(g_default_mu);
    if (!g_default[dev]) {
        ropekit_cuda_error_state *s = nullptr;
        RK_TRY(ropekit_cuda_error_state_create(&s));
        s->is_default = 1;
        g_default[dev] = s;
    }
    *state = g_default[dev];
    return ROPEKIT_OK;
}

ropekit_status ropekit_cuda_error_state_reset(ropekit_cuda_error_state *state, void *stream) {
    rk_clear_error();
    RK_TRY(state_or_default(&state));
    cudaError_t e = cudaMemsetAsync(state->dev, 0, sizeof(DevErr), (cudaStream_t)stream);
    return e == cudaSuccess ? ROPEKIT_OK : cuda_fail(e, "error state reset");
}

ropekit_status ropekit_cuda_check_errors(ropekit_cuda_error_state *state, void *stream,
                                         int64_t *count) {
    rk_clear_error();
    if (count) *count = 0;
    RK_TRY(state_or_default(&state));
    DevErr h;
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaMemcpy(&h, state->dev, sizeof h, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return cuda_fail(e, "reading the error state");
    if (count) *count = (int64_t)h.count;
    if (h.count == 0) return ROPEKIT_OK;
    const char *tail = h.count == 1 ? "" : "s";
    if (h.kind == ERR_OFFSET)
        return rk_fail(ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position offset %lld with sequence "
                       "length %lld needs rows [%lld, %lld + %lld), cos_cache has rows [0, %lld) "
                       "(%llu token%s since the last reset were copied, not rotated)", h.value,
                       h.seq, h.value, h.value, h.seq, h.rows, h.count, tail);
    if (h.kind == ERR_IDS_MROPE)
        return rk_fail(ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position_ids[%lld][%lld][%lld] = %lld "
                       "is outside cos_cache rows [0, %lld) (%llu out-of-range id%s since the last "
                       "reset; their pairs were copied, not rotated)", h.stream, h.b, h.s, h.value,
                       h.rows, h.count, tail);
    return rk_fail(ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position_ids[%lld][%lld] = %lld is outside "
                   "cos_cache rows [0, %lld) (%llu out-of-range id%s since the last reset; their "
                   "pairs were copied, not rotated)", h.b, h.s, h.value, h.rows, h.count, tail);
}

ropekit_status ropekit_cuda_rotary_embedding(const ropekit_tensor *x,
                                             const ropekit_tensor *cos_cache,
                                             const ropekit_tensor *sin_cache,
                                             const ropekit_tensor *position_ids,
                                             const ropekit_rotary_embedding_attrs *attrs,
                                             const ropekit_tensor *y, void *stream,
                                             ropekit_cuda_error_state *errors) {
    rk_clear_error();
    rk_rotary_plan p;
    return rotary_launch(rk_plan_rotary_embedding(x, cos_cache, sin_cache, position_ids, attrs, y, &p), &p, stream, errors);
}

ropekit_status ropekit_cuda_ms_rotary_embedding(const ropekit_tensor *input,
                                                const ropekit_tensor *position_ids,
                                                const ropekit_tensor *cos_cache,
                                                const ropekit_tensor *sin_cache,
                                                const ropekit_ms_rotary_embedding_attrs *attrs,
                                                const ropekit_tensor *y, void *stream,
                                                ropekit_cuda_error_state *errors) {
    rk_clear_error();
    rk_rotary_plan p;
    return rotary_launch(rk_plan_ms_rotary_embedding(input, position_ids, cos_cache, sin_cache, attrs, y, &p), &p, stream, errors);
}

ropekit_status ropekit_cuda_mrotary_embedding(const ropekit_tensor *input,
                                              const ropekit_tensor *position_ids,
                                              const ropekit_tensor *cos_cache,
                                              const ropekit_tensor *sin_cache,
                                              const ropekit_mrotary_embedding_attrs *attrs,
                                              const ropekit_tensor *y, void *stream,
                                              ropekit_cuda_error_state *errors) {
    rk_clear_error();
    rk_rotary_plan p;
    return rotary_launch(rk_plan_mrotary_embedding(input, position_ids, cos_cache, sin_cache, attrs, y, &p), &p, stream, errors);
}

ropekit_status ropekit_cuda_qknorm_rotary_embedding(
    const ropekit_tensor *query, const ropekit_tensor *kv, const ropekit_tensor *kv_norm_weight,
    const ropekit_tensor *cos, const ropekit_tensor *sin,
    const ropekit_qknorm_rotary_embedding_attrs *attrs, const ropekit_tensor *query_out,
    const ropekit_tensor *kv_out, void *stream) {
    rk_clear_error();
    rk_qknorm_plan p;
    RK_TRY(rk_plan_qknorm_rotary_embedding(query, kv, kv_norm_weight, cos, sin, attrs, query_out,
                                           kv_out, &p));
    return run_qknorm(&p, stream);
}

ropekit_status ropekit_cuda_inverse_rotary_regroup(const ropekit_tensor *input,
                                                   const ropekit_tensor *cos,
                                                   const ropekit_tensor *sin,
                                                   const ropekit_inverse_rotary_regroup_attrs *attrs,
                                                   const ropekit_tensor *out, void *stream) {
    rk_clear_error();
    rk_regroup_plan p;
    RK_TRY(rk_plan_inverse_rotary_regroup(input, cos, sin, attrs, out, &p));
    return run_regroup(&p, stream);
}

} // extern "C"
