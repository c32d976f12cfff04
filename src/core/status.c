/* Status names, the thread-local last-error message, dtype helpers, tensor views. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

#define RK_STR2(x) #x
#define RK_STR(x) RK_STR2(x)

const char *ropekit_version(void) {
    return RK_STR(ROPEKIT_VERSION_MAJOR) "." RK_STR(ROPEKIT_VERSION_MINOR) "." RK_STR(
        ROPEKIT_VERSION_PATCH);
}

static _Thread_local char rk_message[512];

ropekit_status rk_fail(ropekit_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rk_message, sizeof rk_message, fmt, ap);
    va_end(ap);
    return status;
}

void rk_clear_error(void) { rk_message[0] = '\0'; }

const char *ropekit_last_error(void) { return rk_message; }

const char *ropekit_status_str(ropekit_status status) {
    switch (status) {
    case ROPEKIT_OK: return "ROPEKIT_OK";
    case ROPEKIT_ERROR_NULL_POINTER: return "ROPEKIT_ERROR_NULL_POINTER";
    case ROPEKIT_ERROR_INVALID_ATTRIBUTE: return "ROPEKIT_ERROR_INVALID_ATTRIBUTE";
    case ROPEKIT_ERROR_SHAPE: return "ROPEKIT_ERROR_SHAPE";
    case ROPEKIT_ERROR_DTYPE: return "ROPEKIT_ERROR_DTYPE";
    case ROPEKIT_ERROR_POSITION_OUT_OF_RANGE: return "ROPEKIT_ERROR_POSITION_OUT_OF_RANGE";
    case ROPEKIT_ERROR_OVERFLOW: return "ROPEKIT_ERROR_OVERFLOW";
    case ROPEKIT_ERROR_ALIASING: return "ROPEKIT_ERROR_ALIASING";
    case ROPEKIT_ERROR_UNSUPPORTED: return "ROPEKIT_ERROR_UNSUPPORTED";
    case ROPEKIT_ERROR_OUT_OF_MEMORY: return "ROPEKIT_ERROR_OUT_OF_MEMORY";
    case ROPEKIT_ERROR_IO: return "ROPEKIT_ERROR_IO";
    case ROPEKIT_ERROR_PARSE: return "ROPEKIT_ERROR_PARSE";
    case ROPEKIT_ERROR_DEVICE: return "ROPEKIT_ERROR_DEVICE";
    }
    return "ROPEKIT_ERROR_UNKNOWN";
}

const char *ropekit_dtype_name(ropekit_dtype dtype) {
    switch (dtype) {
    case ROPEKIT_FLOAT32: return "float32";
    case ROPEKIT_FLOAT16: return "float16";
    case ROPEKIT_BFLOAT16: return "bfloat16";
    case ROPEKIT_INT64: return "int64";
    }
    return "invalid";
}

size_t ropekit_dtype_size(ropekit_dtype dtype) {
    switch (dtype) {
    case ROPEKIT_FLOAT32: return 4;
    case ROPEKIT_FLOAT16:
    case ROPEKIT_BFLOAT16: return 2;
    case ROPEKIT_INT64: return 8;
    }
    return 0;
}

ropekit_tensor ropekit_tensor_contiguous(void *data, ropekit_dtype dtype, int32_t rank,
                                         const int64_t *shape) {
    ropekit_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.rank = rank;
    if (rank < 1 || rank > ROPEKIT_MAX_RANK || shape == NULL) return t;
    int64_t stride = 1;
    for (int32_t i = rank - 1; i >= 0; --i) {
        t.shape[i] = shape[i];
        t.strides[i] = stride;
        if (shape[i] > 0 && !rk_mul(stride, shape[i], &stride)) stride = 0; /* caught later */
    }
    return t;
}
