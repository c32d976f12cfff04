/*
 * ropekit_webgpu.h — the ropekit operators as WGSL compute shaders, run from C through webgpu.h.
 * Library: libropekit_webgpu (exports ropekit_webgpu_* only; brings libropekit for the tensor,
 * status and attribute types).
 *
 * Same operators, attributes and contracts as ropekit.h (read it first), with these differences:
 *
 *   - Tensors are ropekit_webgpu_tensor: a WGPUBuffer (usage Storage, plus CopySrc/CopyDst for
 *     the read/write helpers), a byte offset, and the usual shape and element strides. Strides
 *     must be >= 0. In place = the same buffer, offset, shape and strides for input and output.
 *     A buffer that a call writes may not be bound a second time in that call (WebGPU's usage
 *     rule, applied by wgpu to the whole buffer): such calls are refused with
 *     ROPEKIT_ERROR_ALIASING, even when the two views do not overlap.
 *   - position_ids stay in HOST memory (an ordinary ropekit_tensor, int64): they are checked on
 *     the host exactly as on the CPU (an out-of-range id is ROPEKIT_ERROR_POSITION_OUT_OF_RANGE
 *     and nothing is dispatched), narrowed to u32 and uploaded with the call. WGSL has no 64-bit
 *     integers; this is the "narrow on the host with a checked conversion" way.
 *   - Calls are asynchronous: they validate, upload the parameters and ids (one queue write),
 *     record one compute pass and submit it to the device's queue, then return. A call whose
 *     parameters and narrowed ids are byte for byte those of a recent upload (up to 8 kept: the
 *     same ids for every layer's q and k in a decode step, a loop repeating a call) binds that
 *     upload again and writes nothing.
 *     ropekit_webgpu_wait() blocks until the queue is idle; ropekit_webgpu_read() waits for
 *     everything submitted before it. ropekit_webgpu_set_batch() records several calls per
 *     submission instead (decode loops: less host time per call; see its rules below).
 *   - Validation is the CPU library's own (same plan builders, same messages). WebGPU limits add
 *     a few rules, each refused with ROPEKIT_ERROR_UNSUPPORTED and a message: every bound range
 *     must fit maxStorageBufferBindingSize, and strides and element counts must fit in 32 bits.
 *     16-bit data (stored as packed u32: bfloat16 and float16 alike) is fastest
 *     with a unit last stride, even other strides, an even element offset and, for the
 *     half-split layout, an even R/2 (one invocation then owns whole 32-bit words); any other
 *     layout works too, its output written 16 bits at a time with atomics (variants f16a, bf16a).
 *
 * Variants (chosen per call; ropekit_webgpu_last_variant() names the one used):
 *   rows       ids2d (2D table + position_ids), offset (ms offset form), table3d, mrope
 *   storage    f32; f16p (f16 packed in u32, unpacked with bit arithmetic, shader-f16 or not:
 *              native f16 storage would convert through the hardware, which WGSL lets flush
 *              float16 subnormals); bf16p; f16a/bf16a for the written tensor of a packed
 *              layout that does not pair into words. Tables: f32 or x's type.
 *   arithmetic wide64: products in f64 (needs the shader-f64 feature: Vulkan on most GPUs and on
 *              lavapipe) — the CPU's arithmetic, bit-identical; narrow: 16-bit x and 16-bit
 *              tables, the CPU's float arithmetic (each product rounded to float, then the
 *              sum) — bit-identical; exact32: no shader-f64, the
 *              CPU's double arithmetic (exact 24x24-bit products, the sum rounded to double
 *              then to float; QKNorm's double sums of squares and correctly rounded division
 *              and square root) done in u32 integer arithmetic, which shader compilers cannot
 *              rewrite — bit-identical too, slower.
 *   kernel     vec16: x and y with unit channel stride and every offset, stride, R/2 (R when
 *              interleaved) and H - R a multiple of the elements in 16 bytes, arithmetic not
 *              exact32 — whole 16-byte vectors per access (rotary_vec.wgsl); otherwise one
 *              element per access, four heads per invocation (rotary.wgsl; always with exact32:
 *              software adapters such as SwiftShader compile the vector kernel's integer
 *              arithmetic for minutes). Same results either way.
 *   layout     in place or out of place
 *   grid       1-D dispatch, spread over 2-D or 3-D when the workgroup count exceeds
 *              maxComputeWorkgroupsPerDimension.
 *   Pipelines are compiled on first use and cached in the context per variant (up to 256;
 *   a context that needs more releases the oldest ones in turn and rebuilds them on their
 *   next use).
 *   Bind groups: each call creates its own, except that calls recorded into one batch
 *   (ropekit_webgpu_set_batch) share those of the same buffers and ranges; they are released at
 *   the submission (the queue keeps them while in use): once submitted, the context holds no
 *   reference to your buffers. A buffer destroyed with wgpuBufferDestroy and then passed
 *   to a call: ROPEKIT_ERROR_DEVICE with wgpu's message ("... has been destroyed"), returned by
 *   the call or, when batching, by the function that submits the batch; nothing of that call
 *   (batch) is submitted. Do not destroy a buffer that recorded calls use before they are
 *   submitted (ropekit_webgpu_flush first): wgpu-native finds that only in the submission,
 *   where it aborts the process (it treats submission errors as fatal).
 *   Rounding to float16/bfloat16 is done with integer arithmetic (round to nearest even), never
 *   with the shader compiler's conversions, so every adapter rounds the same way. Subnormals,
 *   which WGSL lets an adapter flush to zero (NVIDIA's Vulkan driver does for float32), and
 *   fused multiply-adds do not change any result: see "Exactness on every adapter" below.
 *
 * Implementation: wgpu-native (the library and webgpu.h/wgpu.h shipped in the PyPI `wgpu` wheel,
 * pinned in tests/requirements.txt; the build uses that wheel's headers). Tested (every shared
 * case, bit-identical where stated above) on an NVIDIA H200 through NVIDIA's Vulkan driver, on
 * Mesa lavapipe (Vulkan on the CPU) and on Mesa llvmpipe through OpenGL ES
 * (bench/results-webgpu.md). NVIDIA's OpenGL driver does not work: wgpu's GL backend cannot
 * build compute pipelines there, and ropekit_webgpu_create refuses that adapter.
 *
 * Debugging: ROPEKIT_WEBGPU_DUMP=1 prints the WGSL of a variant whose pipeline fails to build.
 *
 * Thread safety: one context per thread, or serialise calls on a context.
 */
#ifndef ROPEKIT_WEBGPU_H
#define ROPEKIT_WEBGPU_H

#include <webgpu.h>

#include "ropekit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ropekit_webgpu ropekit_webgpu;

typedef enum ropekit_webgpu_backend {
    ROPEKIT_WEBGPU_BACKEND_ANY = 0, /* the implementation's choice (Vulkan first) */
    ROPEKIT_WEBGPU_BACKEND_VULKAN = 1,
    ROPEKIT_WEBGPU_BACKEND_GL = 2 /* OpenGL ES / EGL (no shader-f16, no shader-f64) */
} ropekit_webgpu_backend;

typedef struct ropekit_webgpu_options {
    ropekit_webgpu_backend backend;
    int disable_f16; /* kept for compatibility: float16 is always packed in u32 (see storage) */
    int disable_f64; /* do not use shader-f64: the exact32 integer arithmetic (see Variants) */
    /* 0: min(256, maxComputeInvocationsPerWorkgroup) for the element-wise kernels and at most
     * 128 for the vector rotary kernel (measured 1-3% faster than 256 on an H200); else a power
     * of 2 >= 64 (capped at the device's limit), used by every kernel, the vector one included */
    int workgroup_size;
    /* 0: the device's maxComputeWorkgroupsPerDimension; else a smaller value, so that tests can
     * reach the 2-D and 3-D grids with small tensors */
    uint32_t max_workgroups_per_dim;
    /* 1: time every operator's compute pass on the GPU with timestamp queries (needs the
     * adapter's timestamp-query feature; see ropekit_webgpu_kernel_time). For benchmarks. */
    int timestamps;
} ropekit_webgpu_options;
/* Exactness on every adapter: the kernels compute a float operation on the hardware only where
 * its operands and result are such that the bits cannot depend on what the adapter does with
 * subnormals (WGSL lets it flush them; NVIDIA's Vulkan driver flushes float32 ones) or with
 * fused multiply-adds; every other element (subnormals, products out of float32's normal range,
 * infinities, NaNs) is computed with integer arithmetic, with the CPU's bits. For tests, the
 * environment variable ROPEKIT_WEBGPU_INTEGER_PATHS=1, read when a context is created, sends
 * every element of that context's calls through the integer paths (the same bits, slower; the
 * variant names then end in " intpaths" before the grid). */

/** Create a context with its own instance, adapter and device (options may be NULL). The device
 *  asks for the adapter's limits and for shader-f16 / shader-f64 where present. Both create
 *  functions build one small compute pipeline first: an adapter that cannot (too few storage
 *  buffers, no compute shaders through wgpu-native's backend) is ROPEKIT_ERROR_UNSUPPORTED with
 *  the backend's reason. */
ROPEKIT_API ropekit_status ropekit_webgpu_create(const ropekit_webgpu_options *options,
                                                 ropekit_webgpu **ctx);
/** Wrap an existing device (its features and limits decide the variants). The context adds a
 *  reference to the device and the instance; `instance` is used to wait (may be NULL: then
 *  waiting uses wgpuDevicePoll). */
ROPEKIT_API ropekit_status ropekit_webgpu_create_from_device(WGPUInstance instance,
                                                             WGPUDevice device,
                                                             const ropekit_webgpu_options *options,
                                                             ropekit_webgpu **ctx);
/** Release the pipelines, buffers, device and instance references (NULL is ignored). */
ROPEKIT_API void ropekit_webgpu_destroy(ropekit_webgpu *ctx);

/** The message of the last failed ropekit_webgpu_* call on this thread ("" if none). */
ROPEKIT_API const char *ropekit_webgpu_last_error(void);

ROPEKIT_API WGPUDevice ropekit_webgpu_device(const ropekit_webgpu *ctx);
/** "llvmpipe (LLVM 15.0.6, 256 bits) via Vulkan", ... */
ROPEKIT_API const char *ropekit_webgpu_adapter_name(const ropekit_webgpu *ctx);
/** 1 if the context uses shader-f16 (now always 0: float16 is stored packed) / shader-f64. */
ROPEKIT_API int ropekit_webgpu_has_f16(const ropekit_webgpu *ctx);
ROPEKIT_API int ropekit_webgpu_has_f64(const ropekit_webgpu *ctx);
/** Name of the variant the last successful operator call on this context used, e.g.
 *  "rotary ids2d x=bf16p t=f32 wide64 inplace grid1d" ("" before the first call). */
ROPEKIT_API const char *ropekit_webgpu_last_variant(const ropekit_webgpu *ctx);

/* ---- buffers --------------------------------------------------------------------------------- */

/** A buffer of `bytes` (rounded up to 4) with usage Storage | CopySrc | CopyDst. Release it with
 *  wgpuBufferRelease. */
ROPEKIT_API ropekit_status ropekit_webgpu_buffer_create(ropekit_webgpu *ctx, uint64_t bytes,
                                                        WGPUBuffer *buffer);
/** Copy host bytes into a buffer (queued; offset and bytes: any, handled in 4-byte words). */
ROPEKIT_API ropekit_status ropekit_webgpu_write(ropekit_webgpu *ctx, WGPUBuffer buffer,
                                                uint64_t offset, const void *src, uint64_t bytes);
/** Wait for all submitted work, then copy bytes of a buffer to host memory. */
ROPEKIT_API ropekit_status ropekit_webgpu_read(ropekit_webgpu *ctx, WGPUBuffer buffer,
                                               uint64_t offset, void *dst, uint64_t bytes);
/** Block until all work submitted on the context's queue has finished (recorded calls of a
 *  batching context are submitted first). */
ROPEKIT_API ropekit_status ropekit_webgpu_wait(ropekit_webgpu *ctx);
/** Batching. calls = 0 or 1 (the default): every operator call is submitted to the queue
 *  before it returns. calls = n > 1: operator calls are recorded into one command buffer and
 *  submitted n at a time (one queue submission and one parameter upload per batch: the host
 *  cost of a small call such as a decode step drops), or earlier by ropekit_webgpu_flush,
 *  ropekit_webgpu_wait, ropekit_webgpu_read, ropekit_webgpu_write, ropekit_webgpu_kernel_time,
 *  ropekit_webgpu_set_batch and ropekit_webgpu_destroy. Results are the same. While batching:
 *  work of your own on the device's queue that touches the calls' buffers (wgpuQueueWriteBuffer,
 *  submissions, mapping) needs ropekit_webgpu_flush() first; and a WebGPU error of a recorded
 *  call (the host validation, which still answers each call, has passed: a destroyed buffer, a
 *  lost device, out of memory) is returned by the function that submits the batch, as
 *  ROPEKIT_ERROR_DEVICE / ROPEKIT_ERROR_OUT_OF_MEMORY with "a batch of N recorded calls" in
 *  the message (WebGPU errors of your own calls on the device in between may be reported
 *  there too). calls outside [0, 256]: ROPEKIT_ERROR_INVALID_ATTRIBUTE. */
ROPEKIT_API ropekit_status ropekit_webgpu_set_batch(ropekit_webgpu *ctx, int calls);
/** Submit the calls a batching context has recorded; returns without waiting (ROPEKIT_OK when
 *  nothing is recorded). */
ROPEKIT_API ropekit_status ropekit_webgpu_flush(ropekit_webgpu *ctx);

/** 1 if the context records timestamps (options->timestamps set and the adapter has the
 *  timestamp-query feature). */
ROPEKIT_API int ropekit_webgpu_has_timestamps(const ropekit_webgpu *ctx);
/** GPU time of the operator dispatches since the previous call (or context creation): waits
 *  for them, reads their compute passes' begin/end timestamps and returns the sum in seconds
 *  and the number of passes (the first 1024 passes; later ones are not counted), then
 *  starts counting again. Host work, submission and gaps between passes are not included.
 *  ROPEKIT_ERROR_UNSUPPORTED when the context records no timestamps. */
ROPEKIT_API ropekit_status ropekit_webgpu_kernel_time(ropekit_webgpu *ctx, double *seconds,
                                                      uint32_t *passes);

/* ---- tensors --------------------------------------------------------------------------------- */

typedef struct ropekit_webgpu_tensor {
    WGPUBuffer buffer;
    /* bytes from the buffer's start to element 0, a multiple of the element size (else
     * ROPEKIT_ERROR_UNSUPPORTED, as the CPU functions answer data not aligned to its elements) */
    uint64_t offset;
    ropekit_dtype dtype;
    int32_t rank;
    int64_t shape[ROPEKIT_MAX_RANK];
    int64_t strides[ROPEKIT_MAX_RANK]; /* in elements, >= 0 */
} ropekit_webgpu_tensor;

/** A contiguous row-major view. */
ROPEKIT_API ropekit_webgpu_tensor ropekit_webgpu_tensor_contiguous(WGPUBuffer buffer,
                                                                   uint64_t offset,
                                                                   ropekit_dtype dtype,
                                                                   int32_t rank,
                                                                   const int64_t *shape);

/* ---- operators (contracts: ropekit.h section 3; position_ids in host memory) ------------------ */

ROPEKIT_API ropekit_status ropekit_webgpu_rotary_embedding(
    ropekit_webgpu *ctx, const ropekit_webgpu_tensor *x, const ropekit_webgpu_tensor *cos_cache,
    const ropekit_webgpu_tensor *sin_cache, const ropekit_tensor *position_ids,
    const ropekit_rotary_embedding_attrs *attrs, const ropekit_webgpu_tensor *y);

ROPEKIT_API ropekit_status ropekit_webgpu_ms_rotary_embedding(
    ropekit_webgpu *ctx, const ropekit_webgpu_tensor *input, const ropekit_tensor *position_ids,
    const ropekit_webgpu_tensor *cos_cache, const ropekit_webgpu_tensor *sin_cache,
    const ropekit_ms_rotary_embedding_attrs *attrs, const ropekit_webgpu_tensor *y);

ROPEKIT_API ropekit_status ropekit_webgpu_mrotary_embedding(
    ropekit_webgpu *ctx, const ropekit_webgpu_tensor *input, const ropekit_tensor *position_ids,
    const ropekit_webgpu_tensor *cos_cache, const ropekit_webgpu_tensor *sin_cache,
    const ropekit_mrotary_embedding_attrs *attrs, const ropekit_webgpu_tensor *y);

ROPEKIT_API ropekit_status ropekit_webgpu_qknorm_rotary_embedding(
    ropekit_webgpu *ctx, const ropekit_webgpu_tensor *query, const ropekit_webgpu_tensor *kv,
    const ropekit_webgpu_tensor *kv_norm_weight, const ropekit_webgpu_tensor *cos,
    const ropekit_webgpu_tensor *sin, const ropekit_qknorm_rotary_embedding_attrs *attrs,
    const ropekit_webgpu_tensor *query_out, const ropekit_webgpu_tensor *kv_out);

ROPEKIT_API ropekit_status ropekit_webgpu_inverse_rotary_regroup(
    ropekit_webgpu *ctx, const ropekit_webgpu_tensor *input, const ropekit_webgpu_tensor *cos,
    const ropekit_webgpu_tensor *sin, const ropekit_inverse_rotary_regroup_attrs *attrs,
    const ropekit_webgpu_tensor *out);

#ifdef __cplusplus
}
#endif

#endif /* ROPEKIT_WEBGPU_H */
