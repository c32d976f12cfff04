/* The WebGPU context: instance, adapter and device (own or wrapped), the pipeline layouts, the
 * pipeline cache, buffers, waiting, and the one dispatch path every operator uses. Written
 * against wgpu-native's webgpu.h + wgpu.h (wgpuDevicePoll for blocking waits). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wgpu.h>

#include "webgpu_internal.h"

static WGPUStringView sv(const char *s) { return (WGPUStringView){s, s ? strlen(s) : 0}; }

static void copy_sv(char *dst, size_t cap, WGPUStringView v) {
    size_t n = v.data ? (v.length == WGPU_STRLEN ? strlen(v.data) : v.length) : 0;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(dst, v.data, n);
    dst[n] = '\0';
}

const char *ropekit_webgpu_last_error(void) { return ropekit_last_error(); }

/* ---- waiting ------------------------------------------------------------------------------ */

static void pump(ropekit_webgpu *ctx, int wait) {
    wgpuDevicePoll(ctx->device, wait ? 1 : 0, NULL);
    if (ctx->instance) wgpuInstanceProcessEvents(ctx->instance);
}

ropekit_status ropekit_webgpu_wait(ropekit_webgpu *ctx) {
    rk_clear_error();
    if (!ctx) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx is NULL");
    ropekit_status st = rk_wg_flush(ctx);
    pump(ctx, 1);
    return st;
}

ropekit_status ropekit_webgpu_set_batch(ropekit_webgpu *ctx, int calls) {
    rk_clear_error();
    if (!ctx) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx is NULL");
    if (calls < 0 || calls > 256)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "batch of %d calls: must be in [0, 256]", calls);
    RK_TRY(rk_wg_flush(ctx));
    ctx->batch = calls > 1 ? calls : 0;
    return ROPEKIT_OK;
}

ropekit_status ropekit_webgpu_flush(ropekit_webgpu *ctx) {
    rk_clear_error();
    if (!ctx) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx is NULL");
    return rk_wg_flush(ctx);
}

/* ---- device errors: an error scope around each group of calls ----------------------------- */

typedef struct scope_result {
    int done;
    WGPUErrorType type;
    char message[480];
} scope_result;

static void on_pop(WGPUPopErrorScopeStatus status, WGPUErrorType type, WGPUStringView message,
                   void *u1, void *u2) {
    (void)u2;
    scope_result *r = u1;
    r->type = status == WGPUPopErrorScopeStatus_Success ? type : WGPUErrorType_Unknown;
    copy_sv(r->message, sizeof r->message, message);
    r->done = 1;
}

static void push_scope(ropekit_webgpu *ctx) {
    wgpuDevicePushErrorScope(ctx->device, WGPUErrorFilter_Validation);
    wgpuDevicePushErrorScope(ctx->device, WGPUErrorFilter_OutOfMemory);
}

/* Pops the two scopes pushed by push_scope; ROPEKIT_ERROR_DEVICE with the message on error. */
static ropekit_status pop_scope(ropekit_webgpu *ctx, const char *what) {
    scope_result r[2];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 2; ++i) {
        WGPUPopErrorScopeCallbackInfo cb = {NULL, WGPUCallbackMode_AllowProcessEvents, on_pop,
                                            &r[i], NULL};
        wgpuDevicePopErrorScope(ctx->device, cb);
    }
    for (int spins = 0; (!r[0].done || !r[1].done) && spins < 1000; ++spins) pump(ctx, 0);
    for (int i = 0; i < 2; ++i) {
        if (!r[i].done) return rk_fail(ROPEKIT_ERROR_DEVICE, "%s: error scope never completed", what);
        if (r[i].type != WGPUErrorType_NoError)
            return rk_fail(i == 0 ? ROPEKIT_ERROR_OUT_OF_MEMORY : ROPEKIT_ERROR_DEVICE,
                           "%s: WebGPU error: %s", what, r[i].message);
    }
    return ROPEKIT_OK;
}

/* ---- context creation ---------------------------------------------------------------------- */

typedef struct request_result {
    int done, ok;
    void *handle;
    char message[256];
} request_result;

static void on_adapter(WGPURequestAdapterStatus status, WGPUAdapter adapter, WGPUStringView msg,
                       void *u1, void *u2) {
    (void)u2;
    request_result *r = u1;
    r->ok = status == WGPURequestAdapterStatus_Success;
    r->handle = adapter;
    copy_sv(r->message, sizeof r->message, msg);
    r->done = 1;
}

static void on_device(WGPURequestDeviceStatus status, WGPUDevice device, WGPUStringView msg,
                      void *u1, void *u2) {
    (void)u2;
    request_result *r = u1;
    r->ok = status == WGPURequestDeviceStatus_Success;
    r->handle = device;
    copy_sv(r->message, sizeof r->message, msg);
    r->done = 1;
}

static void on_uncaptured(WGPUDevice const *device, WGPUErrorType type, WGPUStringView msg,
                          void *u1, void *u2) {
    (void)device, (void)type, (void)u2;
    ropekit_webgpu *ctx = u1;
    if (ctx) copy_sv(ctx->device_error, sizeof ctx->device_error, msg);
}

static const char *backend_name(WGPUBackendType t) {
    switch (t) {
    case WGPUBackendType_Vulkan: return "Vulkan";
    case WGPUBackendType_OpenGL: return "OpenGL";
    case WGPUBackendType_OpenGLES: return "OpenGL ES";
    case WGPUBackendType_Metal: return "Metal";
    case WGPUBackendType_D3D12: return "D3D12";
    default: return "other";
    }
}

static ropekit_status make_layouts(ropekit_webgpu *ctx) {
    /* binding 0 is the uniform parameter block; the rest are storage buffers:
     * rotary:  1 x (read), 2 y (read_write), 3 cos, 4 sin, 5 ids
     * qknorm:  1 query, 2 kv, 3 weight, 4 cos, 5 sin, 6 query_out (rw), 7 kv_out (rw)
     * regroup: 1 input, 2 out (rw), 3 cos, 4 sin */
    static const int counts[3] = {6, 8, 5};
    static const unsigned writable[3] = {1u << 2, (1u << 6) | (1u << 7), 1u << 2};
    for (int l = 0; l < 3; ++l) {
        WGPUBindGroupLayoutEntry e[RK_WG_MAX_BINDINGS];
        memset(e, 0, sizeof e);
        for (int i = 0; i < counts[l]; ++i) {
            e[i].binding = (uint32_t)i;
            e[i].visibility = WGPUShaderStage_Compute;
            e[i].buffer.type = i == 0 ? WGPUBufferBindingType_Uniform
                                      : ((writable[l] >> i) & 1u ? WGPUBufferBindingType_Storage
                                                                 : WGPUBufferBindingType_ReadOnlyStorage);
            /* the parameters and the ids: in the call's slot of the args buffer */
            e[i].buffer.hasDynamicOffset = i == 0 || (l == RK_LAYOUT_ROTARY && i == 5);
        }
        WGPUBindGroupLayoutDescriptor d = {NULL, sv("ropekit"), (size_t)counts[l], e};
        ctx->bgl[l] = wgpuDeviceCreateBindGroupLayout(ctx->device, &d);
        WGPUPipelineLayoutDescriptor pd = {NULL, sv("ropekit"), 1, &ctx->bgl[l], 0};
        ctx->layout[l] = wgpuDeviceCreatePipelineLayout(ctx->device, &pd);
        if (!ctx->bgl[l] || !ctx->layout[l])
            return rk_fail(ROPEKIT_ERROR_DEVICE, "could not create the bind group layouts");
    }
    return ROPEKIT_OK;
}

/* the parameter block (uniform) and the position ids (read-only storage) of a call */
#define RK_WG_ARGS_USAGE (WGPUBufferUsage_Uniform | WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst)

static WGPUBuffer new_buffer(ropekit_webgpu *ctx, uint64_t bytes, WGPUBufferUsage usage) {
    WGPUBufferDescriptor d = {NULL, sv("ropekit"), usage, (bytes + 3) & ~(uint64_t)3, 0};
    return wgpuDeviceCreateBuffer(ctx->device, &d);
}

/* Some adapters are listed with compute limits but cannot build a compute pipeline through
 * wgpu-native: on NVIDIA's OpenGL driver wgpu's GL backend picks a GLSL version without compute
 * shaders or storage buffers (wgpu issues 4751 and 8616). Build one small pipeline of the kind
 * every operator uses, so such a context is refused here, once, with the backend's reason. */
static ropekit_status probe_compute(ropekit_webgpu *ctx) {
    static const char probe[] =
        "@group(0) @binding(2) var<storage, read_write> out_: array<u32>;\n"
        "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
        "    if (g.x < arrayLength(&out_)) { out_[g.x] = g.x; }\n"
        "}\n";
    WGPUComputePipeline p;
    if (rk_wg_pipeline(ctx, RK_LAYOUT_REGROUP, "probe", probe, &p) == ROPEKIT_OK) return ROPEKIT_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", ropekit_last_error());
    return rk_fail(ROPEKIT_ERROR_UNSUPPORTED,
                   "adapter %s cannot build compute pipelines through wgpu-native: %s",
                   ctx->adapter_name, why);
}

/* Read features and limits of ctx->device and create the shared objects. */
static ropekit_status finish_context(ropekit_webgpu *ctx, const ropekit_webgpu_options *opt) {
    WGPULimits lim;
    memset(&lim, 0, sizeof lim);
    if (wgpuDeviceGetLimits(ctx->device, &lim) != WGPUStatus_Success)
        return rk_fail(ROPEKIT_ERROR_DEVICE, "wgpuDeviceGetLimits failed");
    ctx->has_f16 = RK_WG_F16_STORAGE && wgpuDeviceHasFeature(ctx->device, WGPUFeatureName_ShaderF16) &&
                   !(opt && opt->disable_f16);
    ctx->has_f64 = wgpuDeviceHasFeature(ctx->device, (WGPUFeatureName)WGPUNativeFeature_ShaderF64) &&
                   !(opt && opt->disable_f64);
    /* tests: ROPEKIT_WEBGPU_PIPELINE_CACHE=N (1..RK_WG_MAX_PIPELINES) keeps at most N pipelines,
     * so a short test reaches the eviction of a full cache */
    const char *pc = getenv("ROPEKIT_WEBGPU_PIPELINE_CACHE");
    ctx->max_pipes = RK_WG_MAX_PIPELINES;
    if (pc && atoi(pc) >= 1 && atoi(pc) < RK_WG_MAX_PIPELINES) ctx->max_pipes = atoi(pc);
    const char *ip = getenv("ROPEKIT_WEBGPU_INTEGER_PATHS"); /* tests: every element on the integer paths */
    ctx->integer_paths = ip && strcmp(ip, "1") == 0;
    ctx->max_groups_per_dim = lim.maxComputeWorkgroupsPerDimension;
    if (opt && opt->max_workgroups_per_dim && opt->max_workgroups_per_dim < ctx->max_groups_per_dim)
        ctx->max_groups_per_dim = opt->max_workgroups_per_dim;
    ctx->max_binding = lim.maxStorageBufferBindingSize;
    ctx->storage_align = lim.minStorageBufferOffsetAlignment ? lim.minStorageBufferOffsetAlignment : 256;
    ctx->max_storage_per_stage = lim.maxStorageBuffersPerShaderStage;
    if (ctx->max_storage_per_stage < 7)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED,
                       "the device allows %u storage buffers per stage; ropekit needs 7",
                       ctx->max_storage_per_stage);
    uint32_t maxinv = lim.maxComputeInvocationsPerWorkgroup;
    uint32_t maxx = lim.maxComputeWorkgroupSizeX;
    uint32_t cap = maxinv < maxx ? maxinv : maxx;
    if (cap < 64) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "workgroups of %u invocations are too small", cap);
    uint32_t wg = opt && opt->workgroup_size ? (uint32_t)opt->workgroup_size : 256;
    if (wg & (wg - 1) || wg < 64)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE,
                       "workgroup_size %u must be a power of two >= 64", wg);
    ctx->wg = wg < cap ? wg : cap;
    ctx->wg_asked = opt && opt->workgroup_size;
    RK_TRY(make_layouts(ctx));
    ctx->ids_off = ctx->storage_align > 256 ? ctx->storage_align : 256;
    ctx->args_bytes = ctx->ids_off + 1024;
    ctx->args = new_buffer(ctx, ctx->args_bytes, RK_WG_ARGS_USAGE);
    ctx->args_host_bytes = (size_t)ctx->args_bytes;
    ctx->args_host = calloc(1, ctx->args_host_bytes);
    ctx->dummy = new_buffer(ctx, 16, WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst);
    if (!ctx->args_host) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
    if (!ctx->args || !ctx->dummy) return rk_fail(ROPEKIT_ERROR_DEVICE, "buffer creation failed");
    ctx->queue = wgpuDeviceGetQueue(ctx->device);
    if (opt && opt->timestamps && wgpuDeviceHasFeature(ctx->device, WGPUFeatureName_TimestampQuery)) {
        WGPUQuerySetDescriptor qd = {NULL, sv("ropekit timestamps"), WGPUQueryType_Timestamp,
                                     2 * RK_WG_TS_PASSES};
        ctx->ts_set = wgpuDeviceCreateQuerySet(ctx->device, &qd);
        ctx->ts_resolve = new_buffer(ctx, 16 * RK_WG_TS_PASSES,
                                     WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc);
        ctx->ts_read = new_buffer(ctx, 16 * RK_WG_TS_PASSES,
                                  WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst);
        if (!ctx->ts_set || !ctx->ts_resolve || !ctx->ts_read)
            return rk_fail(ROPEKIT_ERROR_DEVICE, "timestamp query set creation failed");
    }
    return probe_compute(ctx);
}

ropekit_status ropekit_webgpu_create(const ropekit_webgpu_options *opt, ropekit_webgpu **out) {
    rk_clear_error();
    if (!out) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx is NULL");
    *out = NULL;
    ropekit_webgpu *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
    int backend = opt ? (int)opt->backend : 0;
    WGPUInstanceExtras extras;
    memset(&extras, 0, sizeof extras);
    extras.chain.sType = (WGPUSType)WGPUSType_InstanceExtras;
    extras.backends = backend == ROPEKIT_WEBGPU_BACKEND_VULKAN ? WGPUInstanceBackend_Vulkan
                      : backend == ROPEKIT_WEBGPU_BACKEND_GL   ? WGPUInstanceBackend_GL
                                                               : WGPUInstanceBackend_All;
    WGPUInstanceDescriptor idesc;
    memset(&idesc, 0, sizeof idesc);
    idesc.nextInChain = &extras.chain;
    ctx->instance = wgpuCreateInstance(&idesc);
    ropekit_status st = ROPEKIT_OK;
    if (!ctx->instance) {
        st = rk_fail(ROPEKIT_ERROR_DEVICE, "wgpuCreateInstance failed");
        goto fail;
    }
    request_result ra = {0, 0, NULL, ""};
    WGPURequestAdapterOptions aopt;
    memset(&aopt, 0, sizeof aopt);
    aopt.powerPreference = WGPUPowerPreference_HighPerformance;
    aopt.featureLevel = backend == ROPEKIT_WEBGPU_BACKEND_GL ? WGPUFeatureLevel_Compatibility
                                                             : WGPUFeatureLevel_Core;
    WGPURequestAdapterCallbackInfo acb = {NULL, WGPUCallbackMode_AllowProcessEvents, on_adapter,
                                          &ra, NULL};
    wgpuInstanceRequestAdapter(ctx->instance, &aopt, acb);
    for (int i = 0; !ra.done && i < 100000; ++i) wgpuInstanceProcessEvents(ctx->instance);
    if (!ra.ok || !ra.handle) {
        st = rk_fail(ROPEKIT_ERROR_DEVICE, "no WebGPU adapter%s: %s",
                     backend == 1 ? " (Vulkan)" : backend == 2 ? " (GL)" : "", ra.message);
        goto fail;
    }
    ctx->adapter = ra.handle;
    WGPUAdapterInfo info;
    memset(&info, 0, sizeof info);
    if (wgpuAdapterGetInfo(ctx->adapter, &info) == WGPUStatus_Success) {
        char dev[200];
        copy_sv(dev, sizeof dev, info.device);
        snprintf(ctx->adapter_name, sizeof ctx->adapter_name, "%s via %s", dev,
                 backend_name(info.backendType));
        wgpuAdapterInfoFreeMembers(info);
    }
    WGPULimits lim;
    memset(&lim, 0, sizeof lim);
    wgpuAdapterGetLimits(ctx->adapter, &lim);
    lim.nextInChain = NULL;
    WGPUFeatureName feats[3];
    size_t nf = 0;
    if (opt && opt->timestamps && wgpuAdapterHasFeature(ctx->adapter, WGPUFeatureName_TimestampQuery))
        feats[nf++] = WGPUFeatureName_TimestampQuery;
    if (!(opt && opt->disable_f16) && wgpuAdapterHasFeature(ctx->adapter, WGPUFeatureName_ShaderF16))
        feats[nf++] = WGPUFeatureName_ShaderF16;
    if (!(opt && opt->disable_f64) &&
        wgpuAdapterHasFeature(ctx->adapter, (WGPUFeatureName)WGPUNativeFeature_ShaderF64))
        feats[nf++] = (WGPUFeatureName)WGPUNativeFeature_ShaderF64;
    WGPUDeviceDescriptor ddesc;
    memset(&ddesc, 0, sizeof ddesc);
    ddesc.label = sv("ropekit");
    ddesc.requiredFeatureCount = nf;
    ddesc.requiredFeatures = feats;
    ddesc.requiredLimits = &lim;
    ddesc.uncapturedErrorCallbackInfo.callback = on_uncaptured;
    ddesc.uncapturedErrorCallbackInfo.userdata1 = ctx;
    request_result rd = {0, 0, NULL, ""};
    WGPURequestDeviceCallbackInfo dcb = {NULL, WGPUCallbackMode_AllowProcessEvents, on_device, &rd,
                                         NULL};
    wgpuAdapterRequestDevice(ctx->adapter, &ddesc, dcb);
    for (int i = 0; !rd.done && i < 100000; ++i) wgpuInstanceProcessEvents(ctx->instance);
    if (!rd.ok || !rd.handle) {
        st = rk_fail(ROPEKIT_ERROR_DEVICE, "device request failed: %s", rd.message);
        goto fail;
    }
    ctx->device = rd.handle;
    st = finish_context(ctx, opt);
    if (st != ROPEKIT_OK) goto fail;
    *out = ctx;
    return ROPEKIT_OK;
fail:
    ropekit_webgpu_destroy(ctx);
    return st;
}

ropekit_status ropekit_webgpu_create_from_device(WGPUInstance instance, WGPUDevice device,
                                                 const ropekit_webgpu_options *opt,
                                                 ropekit_webgpu **out) {
    rk_clear_error();
    if (!out || !device) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx or device is NULL");
    *out = NULL;
    ropekit_webgpu *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
    if (instance) wgpuInstanceAddRef(instance);
    wgpuDeviceAddRef(device);
    ctx->instance = instance;
    ctx->device = device;
    snprintf(ctx->adapter_name, sizeof ctx->adapter_name, "(caller's device)");
    ropekit_status st = finish_context(ctx, opt);
    if (st != ROPEKIT_OK) {
        ropekit_webgpu_destroy(ctx);
        return st;
    }
    *out = ctx;
    return ROPEKIT_OK;
}

void ropekit_webgpu_destroy(ropekit_webgpu *ctx) {
    if (!ctx) return;
    if (ctx->device) {
        (void)rk_wg_flush(ctx); /* recorded calls still run; an error here has no one to go to */
        pump(ctx, 1);
    }
    if (ctx->enc) wgpuCommandEncoderRelease(ctx->enc);
    rk_wg_bg_cache_clear(ctx);
    for (int i = 0; i < ctx->n_pipes; ++i) wgpuComputePipelineRelease(ctx->pipes[i].pipeline);
    for (int l = 0; l < 3; ++l) {
        if (ctx->layout[l]) wgpuPipelineLayoutRelease(ctx->layout[l]);
        if (ctx->bgl[l]) wgpuBindGroupLayoutRelease(ctx->bgl[l]);
    }
    if (ctx->args) wgpuBufferRelease(ctx->args);
    if (ctx->dummy) wgpuBufferRelease(ctx->dummy);
    if (ctx->ts_set) wgpuQuerySetRelease(ctx->ts_set);
    if (ctx->ts_resolve) wgpuBufferRelease(ctx->ts_resolve);
    if (ctx->ts_read) wgpuBufferRelease(ctx->ts_read);
    if (ctx->queue) wgpuQueueRelease(ctx->queue);
    if (ctx->device) wgpuDeviceRelease(ctx->device);
    if (ctx->adapter) wgpuAdapterRelease(ctx->adapter);
    if (ctx->instance) wgpuInstanceRelease(ctx->instance);
    free(ctx->args_host);
    free(ctx->stage);
    free(ctx);
}

WGPUDevice ropekit_webgpu_device(const ropekit_webgpu *ctx) { return ctx ? ctx->device : NULL; }
const char *ropekit_webgpu_adapter_name(const ropekit_webgpu *ctx) {
    return ctx ? ctx->adapter_name : "";
}
int ropekit_webgpu_has_f16(const ropekit_webgpu *ctx) { return ctx ? ctx->has_f16 : 0; }
int ropekit_webgpu_has_f64(const ropekit_webgpu *ctx) { return ctx ? ctx->has_f64 : 0; }
const char *ropekit_webgpu_last_variant(const ropekit_webgpu *ctx) {
    return ctx ? ctx->last_variant : "";
}

/* ---- buffers ------------------------------------------------------------------------------- */

ropekit_status ropekit_webgpu_buffer_create(ropekit_webgpu *ctx, uint64_t bytes, WGPUBuffer *buf) {
    rk_clear_error();
    if (!ctx || !buf) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx or buffer is NULL");
    push_scope(ctx);
    *buf = new_buffer(ctx, bytes ? bytes : 4,
                      WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst);
    ropekit_status st = pop_scope(ctx, "buffer_create");
    if (st != ROPEKIT_OK || !*buf) {
        if (*buf) wgpuBufferRelease(*buf);
        *buf = NULL;
        return st != ROPEKIT_OK ? st : rk_fail(ROPEKIT_ERROR_DEVICE, "buffer creation failed");
    }
    return ROPEKIT_OK;
}

typedef struct map_result {
    int done, ok;
    char message[256];
} map_result;

static void on_map(WGPUMapAsyncStatus status, WGPUStringView msg, void *u1, void *u2) {
    (void)u2;
    map_result *r = u1;
    r->ok = status == WGPUMapAsyncStatus_Success;
    copy_sv(r->message, sizeof r->message, msg);
    r->done = 1;
}

/* [offset, offset + bytes) inside the buffer, widened to whole 4-byte words [lo, hi) (copies and
 * queue writes work in words). */
static ropekit_status word_range(WGPUBuffer buffer, uint64_t offset, uint64_t bytes,
                                 const char *what, uint64_t *lo, uint64_t *hi) {
    uint64_t size = wgpuBufferGetSize(buffer);
    if (offset > size || bytes > size - offset)
        return rk_fail(ROPEKIT_ERROR_SHAPE, "%s of [%llu, %llu) is outside the buffer's %llu bytes",
                       what, (unsigned long long)offset, (unsigned long long)(offset + bytes),
                       (unsigned long long)size);
    *lo = offset & ~(uint64_t)3;
    *hi = (offset + bytes + 3) & ~(uint64_t)3;
    if (*hi > size) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "the buffer's size is not a multiple of 4");
    return ROPEKIT_OK;
}

ropekit_status ropekit_webgpu_read(ropekit_webgpu *ctx, WGPUBuffer buffer, uint64_t offset,
                                   void *dst, uint64_t bytes) {
    rk_clear_error();
    if (!ctx || !buffer || (!dst && bytes)) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "NULL argument");
    if (bytes == 0) return ROPEKIT_OK;
    uint64_t lo = 0, hi = 0;
    RK_TRY(word_range(buffer, offset, bytes, "read", &lo, &hi));
    RK_TRY(rk_wg_flush(ctx));
    push_scope(ctx);
    WGPUBuffer staging = new_buffer(ctx, hi - lo, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst);
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->device, NULL);
    wgpuCommandEncoderCopyBufferToBuffer(enc, buffer, lo, staging, 0, hi - lo);
    WGPUCommandBuffer cmd = wgpuCommandEncoderFinish(enc, NULL);
    ropekit_status st = pop_scope(ctx, "read"); /* before submitting (see rk_wg_dispatch) */
    if (st == ROPEKIT_OK) wgpuQueueSubmit(ctx->queue, 1, &cmd);
    if (cmd) wgpuCommandBufferRelease(cmd);
    wgpuCommandEncoderRelease(enc);
    if (st == ROPEKIT_OK) {
        map_result r = {0, 0, ""};
        WGPUBufferMapCallbackInfo cb = {NULL, WGPUCallbackMode_AllowProcessEvents, on_map, &r, NULL};
        wgpuBufferMapAsync(staging, WGPUMapMode_Read, 0, (size_t)(hi - lo), cb);
        for (int i = 0; !r.done && i < 1000000; ++i) pump(ctx, 1);
        if (!r.ok) {
            st = rk_fail(ROPEKIT_ERROR_DEVICE, "mapping the read-back buffer failed: %s", r.message);
        } else {
            const char *p = wgpuBufferGetConstMappedRange(staging, 0, (size_t)(hi - lo));
            if (p) memcpy(dst, p + (offset - lo), (size_t)bytes);
            else st = rk_fail(ROPEKIT_ERROR_DEVICE, "mapped range is NULL");
            wgpuBufferUnmap(staging);
        }
    }
    wgpuBufferRelease(staging);
    return st;
}

int ropekit_webgpu_has_timestamps(const ropekit_webgpu *ctx) { return ctx && ctx->ts_set; }

ropekit_status ropekit_webgpu_kernel_time(ropekit_webgpu *ctx, double *seconds, uint32_t *passes) {
    rk_clear_error();
    if (!ctx || !seconds || !passes) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "NULL argument");
    *seconds = 0, *passes = 0;
    if (!ctx->ts_set)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED,
                       "the context records no timestamps (options.timestamps, or the adapter "
                       "has no timestamp-query feature)");
    RK_TRY(rk_wg_flush(ctx));
    const uint32_t n = ctx->ts_n;
    ctx->ts_n = 0;
    if (n == 0) return ROPEKIT_OK;
    push_scope(ctx);
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->device, NULL);
    wgpuCommandEncoderResolveQuerySet(enc, ctx->ts_set, 0, 2 * n, ctx->ts_resolve, 0);
    wgpuCommandEncoderCopyBufferToBuffer(enc, ctx->ts_resolve, 0, ctx->ts_read, 0, 16 * (uint64_t)n);
    WGPUCommandBuffer cmd = wgpuCommandEncoderFinish(enc, NULL);
    ropekit_status st = pop_scope(ctx, "kernel_time"); /* before submitting (see rk_wg_dispatch) */
    if (st == ROPEKIT_OK) wgpuQueueSubmit(ctx->queue, 1, &cmd);
    if (cmd) wgpuCommandBufferRelease(cmd);
    wgpuCommandEncoderRelease(enc);
    RK_TRY(st);
    map_result r = {0, 0, ""};
    WGPUBufferMapCallbackInfo cb = {NULL, WGPUCallbackMode_AllowProcessEvents, on_map, &r, NULL};
    wgpuBufferMapAsync(ctx->ts_read, WGPUMapMode_Read, 0, 16 * (size_t)n, cb);
    for (int i = 0; !r.done && i < 1000000; ++i) pump(ctx, 1);
    if (!r.ok) return rk_fail(ROPEKIT_ERROR_DEVICE, "mapping the timestamps failed: %s", r.message);
    const uint64_t *t = wgpuBufferGetConstMappedRange(ctx->ts_read, 0, 16 * (size_t)n);
    if (!t) {
        wgpuBufferUnmap(ctx->ts_read);
        return rk_fail(ROPEKIT_ERROR_DEVICE, "mapped range is NULL");
    }
    const double period = (double)wgpuQueueGetTimestampPeriod(ctx->queue); /* ns per tick */
    double ticks = 0;
    for (uint32_t i = 0; i < n; ++i)
        if (t[2 * i + 1] > t[2 * i]) ticks += (double)(t[2 * i + 1] - t[2 * i]);
    wgpuBufferUnmap(ctx->ts_read);
    *seconds = ticks * period * 1e-9;
    *passes = n;
    return ROPEKIT_OK;
}

ropekit_status ropekit_webgpu_write(ropekit_webgpu *ctx, WGPUBuffer buffer, uint64_t offset,
                                    const void *src, uint64_t bytes) {
    rk_clear_error();
    if (!ctx || !buffer || (!src && bytes)) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "NULL argument");
    if (bytes == 0) return ROPEKIT_OK;
    uint64_t lo = 0, hi = 0;
    RK_TRY(word_range(buffer, offset, bytes, "write", &lo, &hi));
    RK_TRY(rk_wg_flush(ctx)); /* queue order: recorded calls before this write */
    const void *data = src;
    unsigned char *tmp = NULL;
    if (lo != offset || hi != offset + bytes) { /* partial words: keep the bytes around them */
        tmp = malloc((size_t)(hi - lo));
        if (!tmp) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
        ropekit_status st = ropekit_webgpu_read(ctx, buffer, lo, tmp, hi - lo);
        if (st != ROPEKIT_OK) {
            free(tmp);
            return st;
        }
        memcpy(tmp + (offset - lo), src, (size_t)bytes);
        data = tmp;
    }
    push_scope(ctx);
    wgpuQueueWriteBuffer(ctx->queue, buffer, lo, data, (size_t)(hi - lo));
    free(tmp);
    return pop_scope(ctx, "write");
}

/* ---- tensors: validation views and bindings -------------------------------------------------- */

ropekit_webgpu_tensor ropekit_webgpu_tensor_contiguous(WGPUBuffer buffer, uint64_t offset,
                                                       ropekit_dtype dtype, int32_t rank,
                                                       const int64_t *shape) {
    /* the core's builder computes the strides (and leaves a bad rank for validation to report) */
    ropekit_tensor h = ropekit_tensor_contiguous(NULL, dtype, rank, shape);
    ropekit_webgpu_tensor t;
    memset(&t, 0, sizeof t);
    t.buffer = buffer;
    t.offset = offset;
    t.dtype = dtype;
    t.rank = rank;
    memcpy(t.shape, h.shape, sizeof t.shape);
    memcpy(t.strides, h.strides, sizeof t.strides);
    return t;
}

/* Stand-in addresses for validation; offsets must stay below 2^44. */
#define RK_WG_MAX_OFFSET_BITS 44 /* buffer slots at 2^62 + (slot << 48): above any host address */

ropekit_status rk_wg_host_view(rk_wg_addr_map *map, const ropekit_webgpu_tensor *t,
                               const char *name, ropekit_tensor *out) {
    if (!t) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "%s: tensor pointer is NULL", name);
    if (!t->buffer) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "%s: buffer is NULL", name);
    if (t->rank < 1 || t->rank > ROPEKIT_MAX_RANK)
        return rk_fail(ROPEKIT_ERROR_SHAPE, "%s: rank %d is outside [1, %d]", name, (int)t->rank,
                       ROPEKIT_MAX_RANK);
    for (int i = 0; i < t->rank; ++i)
        if (t->strides[i] < 0)
            return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "%s: stride[%d] = %lld: WebGPU views need "
                           "strides >= 0", name, i, (long long)t->strides[i]);
    size_t es = ropekit_dtype_size(t->dtype);
    if (es && t->offset % es)
        /* UNSUPPORTED, as the CPU core reports data not aligned to its elements */
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "%s: byte offset %llu is not a multiple of the "
                       "element size %zu (ropekit needs aligned data)", name,
                       (unsigned long long)t->offset, es);
    if (t->offset >= ((uint64_t)1 << RK_WG_MAX_OFFSET_BITS))
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "%s: byte offset %llu is too large", name,
                       (unsigned long long)t->offset);
    int slot = -1;
    for (int i = 0; i < map->n; ++i)
        if (map->buffers[i] == t->buffer) slot = i;
    if (slot < 0) {
        if (map->n == RK_WG_MAX_BINDINGS) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many buffers");
        slot = map->n;
        map->buffers[map->n++] = t->buffer;
    }
    memset(out, 0, sizeof *out);
    out->data = (void *)(uintptr_t)(((uint64_t)1 << 62) + ((uint64_t)slot << 48) + t->offset);
    out->dtype = t->dtype;
    out->rank = t->rank;
    for (int i = 0; i < ROPEKIT_MAX_RANK; ++i) {
        out->shape[i] = t->shape[i];
        out->strides[i] = t->strides[i];
    }
    return ROPEKIT_OK;
}

ropekit_status rk_wg_bind_view(ropekit_webgpu *ctx, const ropekit_webgpu_tensor *t,
                               const char *name, rk_wg_binding *bind, uint32_t *elem_base) {
    size_t es = ropekit_dtype_size(t->dtype);
    uint64_t span = 0; /* elements from element 0 to the last one, plus one */
    int empty = 0;
    for (int i = 0; i < t->rank; ++i) {
        if (t->shape[i] == 0) empty = 1;
        else span += (uint64_t)(t->shape[i] - 1) * (uint64_t)t->strides[i];
    }
    uint64_t lo = t->offset, hi = empty ? t->offset + es : t->offset + (span + 1) * es;
    uint64_t size = wgpuBufferGetSize(t->buffer);
    if (hi > size)
        return rk_fail(ROPEKIT_ERROR_SHAPE, "%s: the view needs bytes [%llu, %llu) of a buffer of %llu",
                       name, (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)size);
    uint64_t boff = lo - lo % ctx->storage_align;
    uint64_t bsize = ((hi - boff) + 3) & ~(uint64_t)3;
    if (boff + bsize > size)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "%s: the buffer's size %llu is not a multiple of 4",
                       name, (unsigned long long)size);
    if (bsize > ctx->max_binding)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "%s: the view spans %llu bytes, more than the "
                       "device's maxStorageBufferBindingSize (%llu)", name,
                       (unsigned long long)bsize, (unsigned long long)ctx->max_binding);
    if ((lo - boff) / es > UINT32_MAX || span > UINT32_MAX)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "%s: element offsets exceed 32 bits", name);
    bind->buffer = t->buffer;
    bind->offset = boff;
    bind->size = bsize;
    *elem_base = (uint32_t)((lo - boff) / es);
    return ROPEKIT_OK;
}

rk_wg_kind rk_wg_kind_of(const ropekit_webgpu *ctx, ropekit_dtype dt) {
    if (dt == ROPEKIT_FLOAT16) return ctx->has_f16 && RK_WG_F16_STORAGE ? RK_WG_F16 : RK_WG_F16P;
    if (dt == ROPEKIT_BFLOAT16) return RK_WG_BF16P;
    return RK_WG_F32;
}

/* ---- pipelines ------------------------------------------------------------------------------ */

int rk_wg_pipeline_find(const ropekit_webgpu *ctx, const char *key, WGPUComputePipeline *out) {
    for (int i = 0; i < ctx->n_pipes; ++i)
        if (strcmp(ctx->pipes[i].key, key) == 0) {
            *out = ctx->pipes[i].pipeline;
            return 1;
        }
    return 0;
}

ropekit_status rk_wg_pipeline(ropekit_webgpu *ctx, rk_wg_layout layout, const char *key,
                              const char *source, WGPUComputePipeline *out) {
    if (rk_wg_pipeline_find(ctx, key, out)) return ROPEKIT_OK;
    push_scope(ctx);
    WGPUShaderSourceWGSL wgsl;
    memset(&wgsl, 0, sizeof wgsl);
    wgsl.chain.sType = WGPUSType_ShaderSourceWGSL;
    wgsl.code = sv(source);
    WGPUShaderModuleDescriptor md = {&wgsl.chain, sv(key)};
    WGPUShaderModule mod = wgpuDeviceCreateShaderModule(ctx->device, &md);
    WGPUComputePipelineDescriptor pd;
    memset(&pd, 0, sizeof pd);
    pd.label = sv(key);
    pd.layout = ctx->layout[layout];
    pd.compute.module = mod;
    pd.compute.entryPoint = sv("main");
    WGPUComputePipeline p = mod ? wgpuDeviceCreateComputePipeline(ctx->device, &pd) : NULL;
    if (mod) wgpuShaderModuleRelease(mod);
    ropekit_status st = pop_scope(ctx, key);
    if (st != ROPEKIT_OK || !p) {
        if (p) wgpuComputePipelineRelease(p);
        if (getenv("ROPEKIT_WEBGPU_DUMP")) fprintf(stderr, "%s\n", source);
        return st != ROPEKIT_OK ? st : rk_fail(ROPEKIT_ERROR_DEVICE, "%s: pipeline creation failed", key);
    }
    /* A full cache gives up its slots in turn (round robin). Releasing the evicted pipeline is
     * safe: every operator call takes one pipeline and records it before it asks for another,
     * and recorded commands keep their pipeline alive until they have run. */
    int slot = ctx->n_pipes;
    if (slot < ctx->max_pipes) {
        ctx->n_pipes++;
    } else {
        slot = ctx->pipe_next;
        ctx->pipe_next = (slot + 1) % ctx->max_pipes;
        if (ctx->rot_pipe == ctx->pipes[slot].pipeline) ctx->rot_pipe = NULL;
        wgpuComputePipelineRelease(ctx->pipes[slot].pipeline);
    }
    snprintf(ctx->pipes[slot].key, sizeof ctx->pipes[0].key, "%s", key);
    ctx->pipes[slot].pipeline = p;
    *out = p;
    return ROPEKIT_OK;
}

/* ---- bind group cache ---------------------------------------------------------------------- */

static void bg_evict(rk_wg_cached_bg *c) {
    if (!c->bg) return;
    wgpuBindGroupRelease(c->bg);
    for (int i = 0; i < c->n; ++i)
        if (c->e[i].buffer) wgpuBufferRelease(c->e[i].buffer);
    memset(c, 0, sizeof *c);
}

/* Drops the cached bind groups that bind `buffer` (the ids buffer when it is replaced). */
static void bg_drop_buffer(ropekit_webgpu *ctx, WGPUBuffer buffer) {
    for (int k = 0; k < RK_WG_BG_CACHE; ++k)
        for (int i = 0; ctx->bgs[k].bg && i < ctx->bgs[k].n; ++i)
            if (ctx->bgs[k].e[i].buffer == buffer) {
                bg_evict(&ctx->bgs[k]);
                break;
            }
}

static int same_entries(const WGPUBindGroupEntry *a, const WGPUBindGroupEntry *b, int n) {
    for (int i = 0; i < n; ++i)
        if (a[i].buffer != b[i].buffer || a[i].offset != b[i].offset || a[i].size != b[i].size)
            return 0;
    return 1;
}

/* The entries' handles stay referenced while cached, so a released buffer's handle cannot be
 * reused by a new buffer and match a stale entry. */
static void bg_insert(ropekit_webgpu *ctx, int layout, const WGPUBindGroupEntry *e, int n,
                      WGPUBindGroup bg) {
    rk_wg_cached_bg *c = &ctx->bgs[ctx->bg_next];
    ctx->bg_next = (ctx->bg_next + 1) % RK_WG_BG_CACHE;
    bg_evict(c);
    c->bg = bg;
    c->layout = layout;
    c->n = n;
    memcpy(c->e, e, (size_t)n * sizeof *e);
    for (int i = 0; i < n; ++i)
        if (e[i].buffer) wgpuBufferAddRef(e[i].buffer);
}

void rk_wg_bg_cache_clear(ropekit_webgpu *ctx) {
    for (int k = 0; k < RK_WG_BG_CACHE; ++k) bg_evict(&ctx->bgs[k]);
}

static void args_forget(ropekit_webgpu *ctx) {
    for (int k = 0; k < RK_WG_ARGS_RECS; ++k) ctx->args_recs[k].valid = 0;
    ctx->ring_pos = 0;
}

/* args replaced by a buffer of `cap` bytes (its bind groups dropped; the queue keeps the old one
 * alive while in use) and args_host grown to match; the ring's slots forgotten. */
static ropekit_status args_grow(ropekit_webgpu *ctx, uint64_t cap) {
    if (cap > SIZE_MAX) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
    if (cap > ctx->args_host_bytes) { /* first (args_host covers args): grows, never shrinks */
        unsigned char *grown = realloc(ctx->args_host, (size_t)cap);
        if (!grown) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
        ctx->args_host = grown, ctx->args_host_bytes = (size_t)cap;
    }
    args_forget(ctx);
    if (ctx->args) { /* the queue keeps it alive while in use */
        bg_drop_buffer(ctx, ctx->args);
        wgpuBufferRelease(ctx->args);
    }
    ctx->args = new_buffer(ctx, cap, RK_WG_ARGS_USAGE);
    ctx->args_bytes = ctx->args ? cap : 0;
    if (!ctx->args) return rk_fail(ROPEKIT_ERROR_DEVICE, "could not allocate the parameter buffer");
    return ROPEKIT_OK;
}

/* A slot of `bytes` in args for the current call.
 * Batching: after the recorded calls' slots (submitting them first if args is full), the
 * arguments assembled in args_host at the slot (written by rk_wg_flush); the ring's slots are
 * forgotten (args_host is the batch's image now).
 * Unbatched: room for a slot in the ring (args at least RK_WG_ARGS_RECS slots of this size
 * when small) and in the host stage, where the arguments are assembled (rk_wg_dispatch picks
 * the slot). args grows only here, before any binding of it is taken for the call. */
static ropekit_status args_slot(ropekit_webgpu *ctx, uint64_t bytes) {
    bytes = (bytes + ctx->ids_off - 1) / ctx->ids_off * ctx->ids_off; /* slots stay aligned */
    if (ctx->batch) {
        args_forget(ctx);
        if (ctx->n_pending && ctx->args_used + bytes > ctx->args_bytes) RK_TRY(rk_wg_flush(ctx));
        const uint64_t at = ctx->n_pending ? ctx->args_used : 0;
        /* nothing recorded (at == 0): room for a whole batch of calls of this size (up to
         * RK_WG_ARGS_BATCH_MAX bytes; larger calls are submitted fewer at a time) */
        uint64_t want = bytes * (uint64_t)ctx->batch;
        if (want > RK_WG_ARGS_BATCH_MAX)
            want = bytes > RK_WG_ARGS_BATCH_MAX ? bytes : RK_WG_ARGS_BATCH_MAX;
        if (at == 0 && want > ctx->args_bytes) {
            uint64_t cap = ctx->args_bytes;
            while (cap < want) cap *= 2;
            RK_TRY(args_grow(ctx, cap));
        }
        ctx->slot = at;
        ctx->slot_bytes = bytes;
        return ROPEKIT_OK;
    }
    const uint64_t want = bytes <= RK_WG_ARGS_RING_SMALL ? bytes * RK_WG_ARGS_RECS : bytes;
    if (want > ctx->args_bytes) {
        uint64_t cap = ctx->args_bytes;
        while (cap < want) cap *= 2;
        RK_TRY(args_grow(ctx, cap));
    }
    if (bytes > ctx->stage_bytes) {
        if (bytes > SIZE_MAX) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
        unsigned char *grown = realloc(ctx->stage, (size_t)bytes);
        if (!grown) return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory");
        memset(grown + ctx->stage_bytes, 0, (size_t)bytes - ctx->stage_bytes);
        ctx->stage = grown, ctx->stage_bytes = (size_t)bytes;
    }
    ctx->slot = 0; /* chosen by rk_wg_dispatch */
    ctx->slot_bytes = bytes;
    return ROPEKIT_OK;
}

/* Unbatched: the slot of the arguments assembled in stage (pbytes of parameters, ibytes of
 * ids): a remembered slot holding the same bytes (nothing uploaded), else the ring's next slot,
 * written with one queue write. */
static uint64_t args_place(ropekit_webgpu *ctx, uint64_t pbytes, uint64_t ibytes) {
    for (int k = 0; k < RK_WG_ARGS_RECS; ++k) {
        const struct rk_wg_args_rec *r = &ctx->args_recs[k];
        if (r->valid && r->pbytes == pbytes && r->ibytes == ibytes &&
            memcmp(ctx->args_host + r->at, ctx->stage, pbytes) == 0 &&
            (!ibytes || memcmp(ctx->args_host + r->at + ctx->ids_off, ctx->stage + ctx->ids_off,
                               ibytes) == 0))
            return r->at;
    }
    const uint64_t span = ctx->slot_bytes;
    uint64_t at = ctx->ring_pos + span <= ctx->args_bytes ? ctx->ring_pos : 0;
    for (int k = 0; k < RK_WG_ARGS_RECS; ++k) { /* slots the new one overlaps are gone */
        struct rk_wg_args_rec *r = &ctx->args_recs[k];
        if (r->valid && r->at < at + span && at < r->at + r->span) r->valid = 0;
    }
    const size_t len = ibytes ? (size_t)ctx->ids_off + ibytes : pbytes;
    memcpy(ctx->args_host + at, ctx->stage, len);
    /* queue order: the write lands after every submitted call that read the slot before */
    wgpuQueueWriteBuffer(ctx->queue, ctx->args, at, ctx->args_host + at, len);
    struct rk_wg_args_rec *r = &ctx->args_recs[ctx->args_rec_next];
    ctx->args_rec_next = (ctx->args_rec_next + 1) % RK_WG_ARGS_RECS;
    r->at = at, r->span = span, r->pbytes = pbytes, r->ibytes = ibytes, r->valid = 1;
    ctx->ring_pos = at + span;
    return at;
}

ropekit_status rk_wg_ids_host(ropekit_webgpu *ctx, size_t count, uint32_t **ids) {
    uint64_t bytes = (uint64_t)count * 4;
    if (count > UINT32_MAX || bytes > ctx->max_binding)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "%zu position ids exceed the binding size limit", count);
    RK_TRY(args_slot(ctx, ctx->ids_off + (bytes < 16 ? 16 : bytes)));
    unsigned char *at = ctx->batch ? ctx->args_host + ctx->slot : ctx->stage;
    *ids = (uint32_t *)(void *)(at + ctx->ids_off);
    return ROPEKIT_OK;
}

ropekit_status rk_wg_stage_ids(ropekit_webgpu *ctx, size_t count, rk_wg_binding *bind) {
    uint64_t bytes = (uint64_t)count * 4;
    ctx->ids_staged = bytes;
    bind->buffer = ctx->args;
    bind->offset = ctx->ids_off; /* + the slot, as a dynamic offset */
    bind->size = bytes < 16 ? 16 : bytes; /* a binding of at least one vec4 */
    return ROPEKIT_OK;
}

ropekit_status rk_wg_flush(ropekit_webgpu *ctx) {
    if (!ctx->enc) return ROPEKIT_OK;
    const int n = ctx->n_pending;
    wgpuQueueWriteBuffer(ctx->queue, ctx->args, 0, ctx->args_host, (size_t)ctx->args_used);
    WGPUCommandBuffer cmd = wgpuCommandEncoderFinish(ctx->enc, NULL);
    char what[64];
    snprintf(what, sizeof what, "a batch of %d recorded call%s", n, n == 1 ? "" : "s");
    /* popped (pushed by the batch's first call) before submitting: wgpu-native aborts the
     * process on a submission of an invalid command buffer */
    ropekit_status st = pop_scope(ctx, what);
    if (st == ROPEKIT_OK) wgpuQueueSubmit(ctx->queue, 1, &cmd);
    if (cmd) wgpuCommandBufferRelease(cmd);
    wgpuCommandEncoderRelease(ctx->enc);
    ctx->enc = NULL;
    ctx->n_pending = 0;
    ctx->args_used = 0;
    rk_wg_bg_cache_clear(ctx); /* the next batch creates its own (see RK_WG_BG_CACHE) */
    return st;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

ropekit_status rk_wg_dispatch(ropekit_webgpu *ctx, rk_wg_layout layout,
                              WGPUComputePipeline pipeline, const void *params,
                              size_t params_bytes, const rk_wg_binding *bindings, int n_bindings,
                              uint64_t invocations, uint32_t wg, int *grid_dims) {
    uint64_t groups = (invocations + wg - 1) / wg;
    uint64_t m = ctx->max_groups_per_dim;
    uint32_t gx, gy = 1, gz = 1;
    if (groups <= m) {
        gx = (uint32_t)groups;
        *grid_dims = 1;
    } else if (groups <= m * m) { /* 2-D: about sqrt(groups) on a side */
        uint64_t x = (uint64_t)ceil(sqrt((double)groups));
        if (x > m) x = m;
        gx = (uint32_t)x;
        gy = (uint32_t)((groups + x - 1) / x);
        *grid_dims = 2;
    } else {
        uint64_t x = (uint64_t)ceil(cbrt((double)groups));
        if (x > m) x = m;
        uint64_t yz = (groups + x - 1) / x;
        uint64_t y = (uint64_t)ceil(sqrt((double)yz));
        if (y > m) y = m;
        uint64_t z = (yz + y - 1) / y;
        if (z > m) return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "dispatch of %llu workgroups is too large",
                                  (unsigned long long)groups);
        gx = (uint32_t)x, gy = (uint32_t)y, gz = (uint32_t)z;
        *grid_dims = 3;
    }
    /* the parameters and the staged ids (rk_wg_ids_host took their slot): one queue write */
    const uint64_t ids_bytes = ctx->ids_staged;
    ctx->ids_staged = 0;
    if (groups == 0) return ROPEKIT_OK;
    if (params_bytes > ctx->ids_off)
        return rk_fail(ROPEKIT_ERROR_DEVICE, "parameter block of %zu bytes", params_bytes);
    if (!ids_bytes) RK_TRY(args_slot(ctx, ctx->ids_off));
    uint64_t slot = ctx->slot;
    if (ctx->batch) {
        memcpy(ctx->args_host + slot, params, params_bytes);
        if (!ctx->enc) {
            push_scope(ctx); /* popped by rk_wg_flush */
            ctx->enc = wgpuDeviceCreateCommandEncoder(ctx->device, NULL);
        }
        ctx->args_used = slot + ctx->slot_bytes;
    }
    WGPUCommandEncoder enc = ctx->enc;
    if (!ctx->batch) {
        push_scope(ctx);
        memcpy(ctx->stage, params, params_bytes);
        slot = args_place(ctx, params_bytes, (ids_bytes + 3) & ~(uint64_t)3);
        enc = wgpuDeviceCreateCommandEncoder(ctx->device, NULL);
    }
    WGPUBindGroupEntry e[RK_WG_MAX_BINDINGS];
    memset(e, 0, sizeof e);
    e[0].binding = 0;
    e[0].buffer = ctx->args;
    e[0].size = params_bytes;
    for (int i = 1; i < n_bindings; ++i) {
        e[i].binding = (uint32_t)i;
        if (bindings[i].buffer) {
            e[i].buffer = bindings[i].buffer;
            e[i].offset = bindings[i].offset;
            e[i].size = bindings[i].size;
        } else {
            e[i].buffer = ctx->dummy;
            e[i].size = 16;
        }
    }
    WGPUBindGroup bg = NULL;
    int cached = 0;
    for (int k = 0; ctx->batch && k < RK_WG_BG_CACHE && !bg; ++k) /* this batch's */
        if (ctx->bgs[k].bg && ctx->bgs[k].layout == (int)layout && ctx->bgs[k].n == n_bindings &&
            same_entries(ctx->bgs[k].e, e, n_bindings))
            bg = ctx->bgs[k].bg, cached = 1;
    if (!bg) {
        WGPUBindGroupDescriptor bd = {NULL, sv("ropekit"), ctx->bgl[layout], (size_t)n_bindings, e};
        bg = wgpuDeviceCreateBindGroup(ctx->device, &bd);
    }
    WGPUPassTimestampWrites tw = {NULL, ctx->ts_set, 2 * ctx->ts_n, 2 * ctx->ts_n + 1};
    WGPUComputePassDescriptor pd = {NULL, sv("ropekit"), NULL};
    if (ctx->ts_set && ctx->ts_n < RK_WG_TS_PASSES) {
        pd.timestampWrites = &tw;
        ctx->ts_n++;
    }
    WGPUComputePassEncoder pass = wgpuCommandEncoderBeginComputePass(enc, &pd);
    wgpuComputePassEncoderSetPipeline(pass, pipeline);
    const uint32_t dyn[2] = {(uint32_t)slot, e[5].buffer == ctx->args ? (uint32_t)slot : 0};
    wgpuComputePassEncoderSetBindGroup(pass, 0, bg, layout == RK_LAYOUT_ROTARY ? 2 : 1, dyn);
    wgpuComputePassEncoderDispatchWorkgroups(pass, gx, gy, gz);
    wgpuComputePassEncoderEnd(pass);
    wgpuComputePassEncoderRelease(pass);
    if (ctx->batch) { /* recorded; errors are collected by rk_wg_flush */
        if (bg && !cached) bg_insert(ctx, (int)layout, e, n_bindings, bg);
        return ++ctx->n_pending >= ctx->batch ? rk_wg_flush(ctx) : ROPEKIT_OK;
    }
    WGPUCommandBuffer cmd = wgpuCommandEncoderFinish(enc, NULL);
    /* the errors of encoding, popped before submitting: wgpu-native aborts the process on a
     * submission of an invalid command buffer (nothing is submitted then: no output written) */
    ropekit_status st = pop_scope(ctx, "dispatch");
    if (st == ROPEKIT_OK) wgpuQueueSubmit(ctx->queue, 1, &cmd);
    if (cmd) wgpuCommandBufferRelease(cmd);
    wgpuCommandEncoderRelease(enc);
    if (bg) wgpuBindGroupRelease(bg); /* the submission keeps it alive while in use */
    return st;
}
