/* Internal to libropekit_webgpu: the context, the WGSL assembly and one dispatch helper. */
#ifndef ROPEKIT_WEBGPU_INTERNAL_H
#define ROPEKIT_WEBGPU_INTERNAL_H

#include <stdint.h>

#include "../core/internal.h"
#include "ropekit_webgpu.h"

/* How a tensor's elements are stored in WGSL (shaders/load_*.wgsl, store_*.wgsl). */
typedef enum rk_wg_kind {
    RK_WG_F32 = 0,   /* array<f32> */
    RK_WG_F16 = 1,   /* array<f16> (shader-f16) */
    RK_WG_F16P = 2,  /* float16 packed two per u32 */
    RK_WG_BF16P = 3, /* bfloat16 packed two per u32 */
    RK_WG_F16A = 4,  /* float16 packed, written tensor of an unpaired layout: array<atomic<u32>> */
    RK_WG_BF16A = 5, /* bfloat16 likewise */
    RK_WG_V4 = 6     /* any type, contiguous 16-byte vectors: array<vec4<u32>> (rotary_vec.wgsl) */
} rk_wg_kind;

/* 0: float16 tensors are always stored packed in u32 (RK_WG_F16P), shader-f16 or not. array<f16>
 * (RK_WG_F16) reads and writes go through the hardware's f16 <-> f32 conversions, which WGSL
 * lets flush float16 subnormals, and naga (wgpu-native 29) has no bitcast for vec2<f16> to take
 * the bits instead; the packed words are converted with integer arithmetic (common.wgsl). */
#ifndef RK_WG_F16_STORAGE
#define RK_WG_F16_STORAGE 0
#endif

typedef enum rk_wg_arith { RK_ARITH_NARROW = 0, RK_ARITH_WIDE64 = 1, RK_ARITH_EXACT32 = 2 } rk_wg_arith;

/* The three pipeline layouts (one bind group each). */
typedef enum rk_wg_layout { RK_LAYOUT_ROTARY = 0, RK_LAYOUT_QKNORM = 1, RK_LAYOUT_REGROUP = 2 } rk_wg_layout;

#define RK_WG_MAX_BINDINGS 8
#define RK_WG_MAX_PIPELINES 256
#define RK_WG_TS_PASSES 1024
/* Bind groups of the distinct bindings of the calls recorded for one submission (a batch),
 * reused by its calls on the same buffers and ranges and released when it is submitted: each
 * submission's calls create their bind groups, and the creation is where WebGPU reports a
 * destroyed buffer (reusing an older one, wgpu-native finds it only in the submission, where it
 * aborts the process). Each entry holds a reference to its buffers until then. */
#define RK_WG_BG_CACHE 8
/* Argument slots of unbatched calls remembered for reuse (see args_recs), and the largest slot
 * (bytes) for which the ring keeps room for that many. */
#define RK_WG_ARGS_RECS 8
#define RK_WG_ARGS_RING_SMALL (64u << 10)
/* Batching: the parameter buffer holds a whole batch of calls up to this size (bytes). */
#define RK_WG_ARGS_BATCH_MAX (4u << 20)

/* Heads per invocation (HG) of the rotary kernels (the C host and the kernel packages): they
 * share the index arithmetic and the cos/sin loads (and conversions), and their loads are in
 * flight together. Measured on an H200 (Vulkan): the element kernel gains with 4 (Llama float32
 * 0.159 -> 0.141 ms per call); the vector kernel, GPU time (timestamps, bench/results-webgpu.md):
 * with the wide64 arithmetic 2 heads (Llama float32 0.082 -> 0.079 ms, bfloat16 with float32
 * tables 0.055 -> 0.054, MRoPE float32 0.089 -> 0.084, bfloat16 0.070 -> 0.062), with 16-bit
 * tables (narrow) 1 head (float16 0.067 vs 0.071 with 2); 4 heads were slower for every row. */
#define RK_WG_ROTARY_HG 4
#ifndef RK_WG_ROTARY_HG_VEC
#define RK_WG_ROTARY_HG_VEC 1 /* narrow and exact32 */
#endif
#ifndef RK_WG_ROTARY_HG_VEC_WIDE64
#define RK_WG_ROTARY_HG_VEC_WIDE64 2
#endif
/* The C host's narrow vector kernel (16-bit x and tables, not the packages'): 2 heads since the
 * per-vector operand checks (Llama float16 0.0758 -> 0.0679 ms on the H200, R1 of 2026-12-01);
 * Phi-2's partial rotation was slower with 2 (0.0226 -> 0.0255): see RK_WG_ROTARY_HG_MIN_UNITS. */
#ifndef RK_WG_ROTARY_HG_VEC_NARROW
#define RK_WG_ROTARY_HG_VEC_NARROW 2
#endif
/* Heads of a group are N * units apart in the grid's lanes: with fewer than this many rotation
 * units per head (a rotated run under 128 bytes per head) the vector kernel keeps 1 head per
 * invocation, so that neighbouring lanes read neighbouring vectors. */
#ifndef RK_WG_ROTARY_HG_MIN_UNITS
#define RK_WG_ROTARY_HG_MIN_UNITS 8
#endif
/* Below this many one-head invocations the vector kernel keeps 1 head per invocation (decode,
 * B=64 x 32 heads x 128: 32768 invocations, 0.0060 ms with 1 head vs 0.0066 with 2 on the H200). */
/* Workgroup size of the vector rotary kernel, at most (the context's size when smaller): 128 was
 * 1-3% faster than 256 on the H200 for every prefill row (float16 0.0647 -> 0.0627 ms), 64 the
 * same but slower for Phi-2's partial rotation. */
#ifndef RK_WG_ROTARY_VEC_WG
#define RK_WG_ROTARY_VEC_WG 128u
#endif
#ifndef RK_WG_ROTARY_SMALL_GRID
#define RK_WG_ROTARY_SMALL_GRID (1 << 20)
#endif

typedef struct rk_wg_pipeline {
    char key[192];
    WGPUComputePipeline pipeline;
} rk_wg_cached_pipeline;

typedef struct rk_wg_cached_bg {
    WGPUBindGroup bg; /* NULL: empty slot */
    int layout, n;
    WGPUBindGroupEntry e[RK_WG_MAX_BINDINGS]; /* buffer, offset, size of each binding */
} rk_wg_cached_bg;

struct ropekit_webgpu {
    WGPUInstance instance; /* may be NULL for a wrapped device */
    WGPUAdapter adapter;   /* NULL for a wrapped device */
    WGPUDevice device;
    WGPUQueue queue;
    char adapter_name[256];
    int has_f16, has_f64;
    int integer_paths;           /* ROPEKIT_WEBGPU_INTEGER_PATHS=1: pipelines built with FAST = false */
    uint32_t wg;                 /* workgroup size of the element-wise kernels */
    int wg_asked;                /* options.workgroup_size given: the vector kernel uses wg too */
    uint32_t max_groups_per_dim; /* maxComputeWorkgroupsPerDimension */
    uint64_t max_binding;        /* maxStorageBufferBindingSize */
    uint32_t storage_align;      /* minStorageBufferOffsetAlignment */
    uint32_t max_storage_per_stage;
    WGPUBindGroupLayout bgl[3];
    WGPUPipelineLayout layout[3];
    /* The parameters and the narrowed position ids of the current call, one buffer written
     * with one queue write per dispatch: [0, params) the uniform block, [ids_off, ...) the ids
     * (usage Uniform | Storage | CopyDst; grows, never shrinks). args_host is its host image. */
    WGPUBuffer args;
    uint64_t args_bytes;
    unsigned char *args_host;
    size_t args_host_bytes;
    uint32_t ids_off;     /* max(256, minStorageBufferOffsetAlignment) */
    uint64_t ids_staged;  /* bytes of ids staged for the next dispatch (0: none) */
    /* The current call's slot of args: [slot, slot + slot_bytes), parameters at slot, ids at
     * slot + ids_off, bound with dynamic offsets. */
    uint64_t slot, slot_bytes;
    /* Unbatched calls: args is a ring of slots whose contents args_host mirrors; a call whose
     * parameters and ids equal those of a slot in args_recs (the same ids for every layer of a
     * decode step, a loop repeating a call) binds that slot and uploads nothing, otherwise its
     * arguments go to the next slot of the ring (ring_pos) with one queue write. The call's
     * arguments are assembled in stage (params at 0, ids at ids_off) before the comparison. */
    struct rk_wg_args_rec {
        uint64_t at, span;       /* the slot [at, at + span) */
        uint64_t pbytes, ibytes; /* parameter bytes at `at`, id bytes at at + ids_off */
        int valid;
    } args_recs[RK_WG_ARGS_RECS];
    int args_rec_next;
    uint64_t ring_pos;
    unsigned char *stage;
    size_t stage_bytes;
    /* options.batch > 1: calls recorded into enc (n_pending of them, their slots in
     * [0, args_used)), submitted with one queue write of args by rk_wg_flush; an error scope
     * pushed at the batch's first call is popped there. */
    int batch, n_pending;
    WGPUCommandEncoder enc;
    uint64_t args_used;
    WGPUBuffer dummy;    /* bound where a binding is unused (in place, no ids, no tables) */
    rk_wg_cached_pipeline pipes[RK_WG_MAX_PIPELINES];
    int n_pipes, max_pipes, pipe_next; /* built, capacity, slot evicted next when full */
    rk_wg_cached_bg bgs[RK_WG_BG_CACHE];
    int bg_next; /* slot replaced next (round robin) */
    char last_variant[192];
    /* The last rotary call's variant: a call with the same signature (decode loops) takes its
     * pipeline without formatting the key (~5,000 instructions of snprintf per call). */
    int rot_sig[12], rot_dims, variant_is_rot; /* variant_is_rot: last_variant is rot_sig's */
    WGPUComputePipeline rot_pipe;              /* NULL: no signature kept */
    /* timestamps (options->timestamps): begin/end of each dispatch's pass, RK_WG_TS_PASSES */
    WGPUQuerySet ts_set;
    WGPUBuffer ts_resolve, ts_read;
    uint32_t ts_n;
    char device_error[512]; /* filled by the error scope / uncaptured error callbacks */
};

/* One bound tensor of a dispatch: what to bind and where element 0 is inside the range. */
typedef struct rk_wg_binding {
    WGPUBuffer buffer;  /* NULL: bind the dummy buffer */
    uint64_t offset, size;
} rk_wg_binding;

/* ropekit_webgpu_tensor -> ropekit_tensor whose data is a stand-in address: the same buffer
 * gets the same base in one call, so the CPU validation sees overlaps exactly as they are. */
typedef struct rk_wg_addr_map {
    WGPUBuffer buffers[RK_WG_MAX_BINDINGS];
    int n;
} rk_wg_addr_map;

ropekit_status rk_wg_host_view(rk_wg_addr_map *map, const ropekit_webgpu_tensor *t,
                               const char *name, ropekit_tensor *out);
/* Element index (in the tensor's elements) of a plan pointer relative to the bound range start
 * of the tensor's buffer; fills the binding (aligned range covering the view). */
ropekit_status rk_wg_bind_view(ropekit_webgpu *ctx, const ropekit_webgpu_tensor *t,
                               const char *name, rk_wg_binding *bind, uint32_t *elem_base);

rk_wg_kind rk_wg_kind_of(const ropekit_webgpu *ctx, ropekit_dtype dt);
const char *rk_wg_kind_name(rk_wg_kind k);

/* The cached pipeline of `key`: 1 and *out set when the context has built it, else 0 (the
 * operators assemble the WGSL only then; a key names its WGSL text exactly). */
int rk_wg_pipeline_find(const ropekit_webgpu *ctx, const char *key, WGPUComputePipeline *out);
/* Build (or find in the cache) the pipeline of `key` from the WGSL text `source`. */
ropekit_status rk_wg_pipeline(ropekit_webgpu *ctx, rk_wg_layout layout, const char *key,
                              const char *source, WGPUComputePipeline *out);

/* Write params, bind, dispatch `invocations` (spread over a 1-D/2-D/3-D grid of `wg`-wide
 * groups) and submit. Returns the grid's dimensionality through *grid_dims. */
ropekit_status rk_wg_dispatch(ropekit_webgpu *ctx, rk_wg_layout layout,
                              WGPUComputePipeline pipeline, const void *params,
                              size_t params_bytes, const rk_wg_binding *bindings, int n_bindings,
                              uint64_t invocations, uint32_t wg, int *grid_dims);

/* Host room for `count` narrowed position ids of the next dispatch (its slot of args: a
 * batching context may submit its recorded calls first to make room); valid until
 * rk_wg_stage_ids. */
ropekit_status rk_wg_ids_host(ropekit_webgpu *ctx, size_t count, uint32_t **ids);
/* The ids written to rk_wg_ids_host go with the next dispatch's parameters (one queue write);
 * *bind is their binding. */
ropekit_status rk_wg_stage_ids(ropekit_webgpu *ctx, size_t count, rk_wg_binding *bind);
/* Submit the recorded calls of a batching context (no-op otherwise). */
ropekit_status rk_wg_flush(ropekit_webgpu *ctx);
/* Releases the cached bind groups (and their buffer references). */
void rk_wg_bg_cache_clear(ropekit_webgpu *ctx);

/* ---- WGSL text (src/webgpu/kernels.c) ---------------------------------------------------- */

/* Embedded .wgsl files (generated at build time from src/webgpu/shaders and ops). */
const char *rk_wgsl_file(const char *name);

/* Append an embedded file (a missing one sets b->oom). */
void rk_wgsl_add_file(rk_buf *b, const char *file);
/* Binding declaration plus accessors (load and/or store templates) of a tensor. */
void rk_wgsl_tensor(rk_buf *b, int binding, const char *name, rk_wg_kind kind, int load, int store);
/* Load accessors of `name` that read the buffer variable of another tensor (in place). */
void rk_wgsl_alias_loads(rk_buf *b, const char *name, const char *var_of, rk_wg_kind kind);
/* A placeholder declaration for a binding the variant does not read. */
void rk_wgsl_unused(rk_buf *b, int binding, int writable);


/* ---- whole variants (kernels.c): the text one pipeline is built from. The C host and the
 * kernel packages (tools/webgpu_package.c, for the JavaScript runner) assemble it here. ---- */
typedef struct rk_wg_rotary_cfg {
    uint32_t rows_mode;        /* 0 ids2d, 1 offset, 2 table3d, 3 mrope */
    rk_wg_kind xk, yk, tk;     /* x, y and table storage (x and y become V4 when vec) */
    rk_wg_arith ar;
    int vec, inplace;
    uint32_t wg, sw, hg;       /* workgroup size, elements per store, heads per invocation */
    ropekit_dtype dtype;       /* x's dtype (the vector kernel's element conversions) */
    int tv;                    /* vector kernel: tables bound as 16-byte vectors (rotary_vec_tv.wgsl) */
    int integer_paths;         /* FAST = false (ROPEKIT_WEBGPU_INTEGER_PATHS=1) */
    int f64;                   /* shader-f64 available: the narrow arithmetic's slow path in f64 */
    /* The layout as constants of the variant: il 1 interleaved, 0 half-split; copy 1 when the
     * dispatch has a range of invocations copying [R, H), 0 when not. With constants the
     * compiler drops the paths the call cannot take (SwiftShader runs both sides of every
     * run-time branch). -1 (kernel packages): pipeline-overridable constants RK_IL (default 2:
     * read P.flags at run time) and RK_COPY (default true), which the JavaScript runner sets
     * per pipeline. (inverse and scale stay run-time flags: one negation, one multiply.) */
    int il, copy;
} rk_wg_rotary_cfg;
typedef struct rk_wg_qknorm_cfg {
    rk_wg_kind k, ok;          /* input and output storage */
    rk_wg_arith ar;
    int q_inplace, kv_inplace;
    uint32_t vpt, qr;    /* row kernel (qknorm_row.wgsl): vectors per invocation (0: the
                            general kernel), row groups (rl invocations each) per workgroup */
    ropekit_dtype dtype; /* row kernel: the element type */
    int integer_paths;
    uint32_t rs;         /* row kernel: rows per invocation (1 or 2) */
    uint32_t rl;         /* row kernel: invocations per row, 32 or 64 (0: 64) */
} rk_wg_qknorm_cfg;
typedef struct rk_wg_regroup_cfg {
    rk_wg_kind k, ok;
    rk_wg_arith ar;
    uint32_t ue, wg;           /* features per invocation, workgroup size */
    int integer_paths;
} rk_wg_regroup_cfg;

void rk_wg_rotary_wgsl(rk_buf *s, const rk_wg_rotary_cfg *c);
void rk_wg_qknorm_wgsl(rk_buf *s, const rk_wg_qknorm_cfg *c);
void rk_wg_regroup_wgsl(rk_buf *s, const rk_wg_regroup_cfg *c);
const char *rk_wg_arith_name(rk_wg_arith a);
const char *rk_wg_rows_name(uint32_t rows_mode);

#endif
