/*
 * ropekit_cuda.h — the ropekit operators on NVIDIA GPUs (CUDA). Library: libropekit_cuda.
 *
 * Same operators, attributes, tensor views and contracts as ropekit.h (read it first: shapes,
 * layouts, in place, aliasing and the Arithmetic section all apply unchanged), with these
 * differences:
 *
 *   - Every tensor's `data` is a DEVICE pointer (cudaMalloc, or a view into such memory). Strides
 *     are in elements as on the CPU, so views into a packed QKV buffer work in place.
 *   - `stream` is a cudaStream_t passed as void* (NULL: the legacy default stream). The call is
 *     asynchronous: it validates every argument on the host, enqueues one kernel and returns.
 *     Nothing is read from tensor memory on the host, so calls may be captured in a CUDA graph.
 *   - Validation is the CPU library's own (the same plan builders, the same messages): every rule
 *     that does not need tensor data is checked before launch, and on failure nothing is enqueued.
 *   - Position ids live in device memory, so they are checked by the kernel (see "Position ids
 *     out of range" below) instead of before the call.
 *   - The error message of a failed call is read with ropekit_cuda_last_error() (thread-local,
 *     like ropekit_last_error(); libropekit_cuda carries its own copy of the validation code).
 *
 * Position ids out of range
 *   A table row is never read for an id outside [0, rows) (nor for an offset whose window
 *   [offset, offset + S) leaves the table). The pair(s) that would have used that row are COPIED
 *   from x to y unchanged (as ORT's CUDA kernel does), and the event is COUNTED in an error state
 *   (device memory, ropekit_cuda_error_state) together with the smallest bad index seen and its
 *   value. ropekit_cuda_check_errors() synchronises the stream, reads the state and returns
 *   ROPEKIT_ERROR_POSITION_OUT_OF_RANGE with the CPU-style message, e.g.
 *     "position_ids[0][3] = 70000 is outside cos_cache rows [0, 4096) (2 out-of-range ids since
 *      the last reset; their pairs were copied, not rotated)".
 *   Counting: one per (token, id stream) lookup that failed: 2D ids one per bad token, MRoPE one
 *   per bad (stream, token) among the streams its layout reads, the offset form one per token of
 *   a refused window (the whole window is refused, as on the CPU).
 *   Pass errors = NULL to use the library's default state of the current device (created on the
 *   first call that needs it, which must not be inside a stream capture: create it first with
 *   ropekit_cuda_error_state_default() when capturing). The state accumulates over calls until
 *   ropekit_cuda_error_state_reset(). Operators without position ids (QKNormRotaryEmbedding,
 *   InverseRotaryRegroup, RotaryEmbedding with 3D tables) never touch it.
 *
 * Arithmetic and agreement with the CPU library (measured on an H200: bench/results-cuda.md)
 *   Rotations follow the Arithmetic section exactly (products in double wherever the CPU uses
 *   double, the same rounding points), so RotaryEmbedding, com.microsoft.RotaryEmbedding,
 *   MRotaryEmbedding and InverseRotaryRegroup give the CPU library's bits for every dtype.
 *   QKNormRotaryEmbedding sums the squares in double in the CPU's sixteen-lane order (one
 *   half-warp lane per CPU lane, the same butterfly), so it gives the CPU's bits too, except that
 *   logf in the fp8 block scale is CUDA's (within 1 ulp): the two can differ only when amax/448 is
 *   within an ulp of a power of two (see ropekit.h 3.4). tests/cuda/check_cuda measured 0 ulp of
 *   difference for every operator, option and dtype. NaN inputs give NaN; the sign and payload
 *   of a float16 NaN output, and of a bfloat16 NaN output of RotaryEmbedding with bfloat16
 *   tables, may differ from the CPU's (ropekit.h section 5 leaves them unspecified).
 *
 * Kernel override (tests and benchmarks): ROPEKIT_CUDA_ROTARY_KERNEL=flat, =tile, =bulk or =decode
 *   in the environment (read once per process) makes the three rotary operators use that kernel
 *   on every call it can take (contiguous, 16-byte-aligned channels; tile: a token's threads fit
 *   one block; bulk: sm_90 or newer, not MRotaryEmbedding; decode: not MRotaryEmbedding); same
 *   bits. Unset or any other value: the
 *   library chooses per call. ROPEKIT_CUDA_MROPE=tile, =pipe or =pipe56 picks MRotaryEmbedding's
 *   kernel (the tile kernel or the pipelined one, uncapped or capped at 56 registers) on every
 *   call that the tile kernel would take; same bits.
 *
 * Thread safety: as the CPU library. Calls on different streams may run concurrently.
 * Requires a GPU of compute capability 8.0 or newer (the library carries sm_80 and sm_90 code).
 * Link: libropekit_cuda (exports ropekit_cuda_* only) and libropekit for the tensor and status
 * helpers (the CMake target ropekit_cuda brings it).
 */
#ifndef ROPEKIT_CUDA_H
#define ROPEKIT_CUDA_H

#include "ropekit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A CUDA runtime call failed (launch, allocation, copy); the message names the CUDA error.
 * (An alias kept for the first users of this header.) */
#define ROPEKIT_CUDA_ERROR_RUNTIME ROPEKIT_ERROR_DEVICE

/** The message of the last failed ropekit_cuda_* call on this thread ("" if none). */
ROPEKIT_API const char *ropekit_cuda_last_error(void);

/* ---- out-of-range position ids -------------------------------------------------------------- */

/** Opaque; holds a small block of device memory on the device current at creation. */
typedef struct ropekit_cuda_error_state ropekit_cuda_error_state;

/** Allocate a zeroed error state on the current device (synchronous). */
ROPEKIT_API ropekit_status ropekit_cuda_error_state_create(ropekit_cuda_error_state **state);
/** Free it (synchronous; NULL is ignored). Not for the default state. */
ROPEKIT_API void ropekit_cuda_error_state_destroy(ropekit_cuda_error_state *state);
/** The library's default state of the current device, created on first use. */
ROPEKIT_API ropekit_status ropekit_cuda_error_state_default(ropekit_cuda_error_state **state);
/** Zero the state, enqueued on `stream` (capturable). NULL: the default state. */
ROPEKIT_API ropekit_status ropekit_cuda_error_state_reset(ropekit_cuda_error_state *state,
                                                          void *stream);
/** Synchronise `stream`, read the state (NULL: the default state). ROPEKIT_OK when no id was out
 *  of range since the last reset; otherwise ROPEKIT_ERROR_POSITION_OUT_OF_RANGE with the message
 *  naming the smallest bad index and its value. *count (if not NULL) receives the count. The
 *  state is not reset. */
ROPEKIT_API ropekit_status ropekit_cuda_check_errors(ropekit_cuda_error_state *state,
                                                     void *stream, int64_t *count);

/* ---- operators (contracts: ropekit.h section 3) -------------------------------------------- */

ROPEKIT_API ropekit_status ropekit_cuda_rotary_embedding(
    const ropekit_tensor *x, const ropekit_tensor *cos_cache, const ropekit_tensor *sin_cache,
    const ropekit_tensor *position_ids, const ropekit_rotary_embedding_attrs *attrs,
    const ropekit_tensor *y, void *stream, ropekit_cuda_error_state *errors);

ROPEKIT_API ropekit_status ropekit_cuda_ms_rotary_embedding(
    const ropekit_tensor *input, const ropekit_tensor *position_ids,
    const ropekit_tensor *cos_cache, const ropekit_tensor *sin_cache,
    const ropekit_ms_rotary_embedding_attrs *attrs, const ropekit_tensor *y, void *stream,
    ropekit_cuda_error_state *errors);

ROPEKIT_API ropekit_status ropekit_cuda_mrotary_embedding(
    const ropekit_tensor *input, const ropekit_tensor *position_ids,
    const ropekit_tensor *cos_cache, const ropekit_tensor *sin_cache,
    const ropekit_mrotary_embedding_attrs *attrs, const ropekit_tensor *y, void *stream,
    ropekit_cuda_error_state *errors);

/* One launch for the query and the kv rows. */
ROPEKIT_API ropekit_status ropekit_cuda_qknorm_rotary_embedding(
    const ropekit_tensor *query, const ropekit_tensor *kv, const ropekit_tensor *kv_norm_weight,
    const ropekit_tensor *cos, const ropekit_tensor *sin,
    const ropekit_qknorm_rotary_embedding_attrs *attrs, const ropekit_tensor *query_out,
    const ropekit_tensor *kv_out, void *stream);

ROPEKIT_API ropekit_status ropekit_cuda_inverse_rotary_regroup(
    const ropekit_tensor *input, const ropekit_tensor *cos, const ropekit_tensor *sin,
    const ropekit_inverse_rotary_regroup_attrs *attrs, const ropekit_tensor *out, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* ROPEKIT_CUDA_H */
