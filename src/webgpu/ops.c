/* The five operators on WebGPU: validate with the CPU library's plan builders (on stand-in
 * addresses), pick the variant, assemble its WGSL (cached as a pipeline), fill the parameter
 * block and dispatch. One function per kernel family: rotary (three operators), QKNorm, regroup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "webgpu_internal.h"

/* Element index of plan pointer `p` inside the bound range of a tensor whose host view is hv. */
static uint64_t elem_of(const void *p, const ropekit_tensor *hv, uint32_t base) {
    size_t es = ropekit_dtype_size(hv->dtype);
    return base + ((uintptr_t)p - (uintptr_t)hv->data) / es;
}

static int fits32(int64_t v) { return v >= 0 && v <= (int64_t)UINT32_MAX; }

static ropekit_status check_u32(const char *what, int64_t v) {
    if (!fits32(v))
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "%s = %lld does not fit the 32-bit indices of the "
                       "WebGPU kernels", what, (long long)v);
    return ROPEKIT_OK;
}

/* Does a view come in runs of m elements: unit channel stride, every outer stride and the
 * element offset multiples of m? m = 2: a packed 16-bit view pairs its elements into u32 words
 * (one invocation can own whole words; otherwise the written tensor uses the atomic
 * accessors); m = the elements in 16 bytes: the vector rotary kernel can read it. */
static int in_runs_of(int64_t m, const int64_t *strides, int n_outer, int64_t inner_stride,
                      uint64_t base) {
    if (inner_stride != 1 || base % (uint64_t)m) return 0;
    for (int i = 0; i < n_outer; ++i)
        if (strides[i] % m) return 0;
    return 1;
}

static int is_packed(rk_wg_kind k) { return k == RK_WG_F16P || k == RK_WG_BF16P; }
static rk_wg_kind atomic_of(rk_wg_kind k) { return k == RK_WG_F16P ? RK_WG_F16A : RK_WG_BF16A; }

/* A buffer written by a dispatch may not be bound a second time in it (WebGPU's usage scope
 * rule; wgpu applies it to the whole buffer, whatever the ranges). In place uses one binding. */
static ropekit_status check_writable_ranges(const rk_wg_binding *b, int n, unsigned writable) {
    for (int i = 1; i < n; ++i)
        for (int j = i + 1; j < n; ++j) {
            if (!b[i].buffer || b[i].buffer != b[j].buffer) continue;
            if (!(((writable >> i) | (writable >> j)) & 1u)) continue;
            return rk_fail(ROPEKIT_ERROR_ALIASING,
                           "WebGPU cannot bind a buffer that the call writes a second time "
                           "(bindings %d and %d share one buffer); use separate buffers, or the "
                           "same view for input and output (in place)", i, j);
        }
    return ROPEKIT_OK;
}

/* ---- rotary: RotaryEmbedding (both), MRotaryEmbedding ----------------------------------------- */


typedef struct rotary_args {
    const ropekit_webgpu_tensor *x, *cos, *sin, *y;
    ropekit_tensor hx, hc, hs, hy; /* stand-in views the plan was built from */
} rotary_args;

/* The pipeline key of a rotary variant from its signature (run_rotary's sig[]). */
static void rotary_key(char *key, size_t cap, const int *g) {
    snprintf(key, cap, "rotary %s x=%s y=%s t=%s %s%s%s %s wg%u hg%u%s%s",
             rk_wg_rows_name((uint32_t)g[0]), rk_wg_kind_name((rk_wg_kind)g[1]),
             rk_wg_kind_name((rk_wg_kind)g[2]), rk_wg_kind_name((rk_wg_kind)g[3]),
             rk_wg_arith_name((rk_wg_arith)g[4]), g[5] ? " vec16" : "", g[6] ? " tv" : "",
             g[7] ? "inplace" : "outofplace", (unsigned)g[8], (unsigned)g[9], g[10] ? " il" : "",
             g[11] ? " copy" : "");
}

static ropekit_status run_rotary(ropekit_webgpu *ctx, rk_rotary_plan *p, const rotary_args *a) {
    RK_TRY(rk_check_position_ids(p)); /* host ids: out of range -> error before any dispatch */
    if (p->B == 0 || p->S == 0 || p->N == 0 || p->H == 0) return ROPEKIT_OK;
    rk_wg_binding bind[6];
    memset(bind, 0, sizeof bind);
    uint32_t xb, yb, cb, sb;
    RK_TRY(rk_wg_bind_view(ctx, a->x, "x", &bind[1], &xb));
    RK_TRY(rk_wg_bind_view(ctx, a->y, "y", &bind[2], &yb));
    RK_TRY(rk_wg_bind_view(ctx, a->cos, "cos_cache", &bind[3], &cb));
    RK_TRY(rk_wg_bind_view(ctx, a->sin, "sin_cache", &bind[4], &sb));
    uint64_t x0 = elem_of(p->x, &a->hx, xb), y0 = elem_of(p->y, &a->hy, yb);
    uint64_t c0 = elem_of(p->cos, &a->hc, cb), s0 = elem_of(p->sin, &a->hs, sb);
    const int inplace = p->x == p->y && memcmp(p->xs, p->ys, sizeof p->xs) == 0;
    if (inplace) bind[1].buffer = NULL; /* x is read through y's binding */
    RK_TRY(check_writable_ranges(bind, 5, 1u << 2));

    const rk_wg_kind xk = rk_wg_kind_of(ctx, p->dtype), tk = rk_wg_kind_of(ctx, p->table_dtype);
    const int64_t h = p->R / 2;
    /* Packed 16-bit data: one invocation owns whole words (two pairs, SW = 2) when the layout
     * pairs elements into words; otherwise one pair per invocation and y written with atomics. */
    rk_wg_kind yk = xk;
    if (is_packed(xk)) {
        int paired = (p->interleaved || h % 2 == 0) && (p->H - p->R) % 2 == 0;
        paired = paired && in_runs_of(2, p->xs, 3, p->xs[3], x0) && in_runs_of(2, p->ys, 3, p->ys[3], y0);
        if (!paired) yk = atomic_of(xk);
    }
    const uint32_t sw = is_packed(yk) ? 2 : 1;
    rk_wg_arith ar = (p->dtype != ROPEKIT_FLOAT32 && p->table_dtype != ROPEKIT_FLOAT32)
                         ? RK_ARITH_NARROW
                         : (ctx->has_f64 ? RK_ARITH_WIDE64 : RK_ARITH_EXACT32);
    /* Contiguous heads whose halves (or pair runs) and copied span start on 16-byte boundaries:
     * the vector kernel (rotary_vec.wgsl), VE elements per access. */
    /* exact32 (no shader-f64): the element kernel only, as in the kernel packages. The vector
     * kernel with exact32 (40 inlined integer dot2 for the decode variant, 8 of them live) took
     * SwiftShader (through naga) over a minute of CPU time and 1.9-3 GB without finishing; the
     * element kernel compiles in 0.7 s (2026-12-02, results-webgpu.md). */
    const int64_t ve = 16 / (int64_t)ropekit_dtype_size(p->dtype);
    const int vec = ar != RK_ARITH_EXACT32 && in_runs_of(ve, p->xs, 3, p->xs[3], x0) &&
                    in_runs_of(ve, p->ys, 3, p->ys[3], y0) &&
                    (p->interleaved ? p->R % ve == 0 : h % ve == 0) && (p->H - p->R) % ve == 0;
    const int64_t per_unit = vec ? ve : sw; /* elements of the rotated span per unit */
    const int64_t units_rot = vec ? (p->interleaved ? p->R : h) / per_unit
                                  : (p->interleaved ? h : h / sw);
    const int64_t units = units_rot + (inplace ? 0 : (p->H - p->R) / per_unit);
    if (units == 0) return ROPEKIT_OK; /* in place with nothing to rotate cannot happen (R > 0) */
    /* heads per invocation: the wide64 and narrow vector kernels share their table loads,
     * conversions and checks between two heads, except in small grids (decode), which need the
     * invocations, and for short rotated runs (webgpu_internal.h) */
    int64_t hg = !vec ? RK_WG_ROTARY_HG
                 : ar == RK_ARITH_WIDE64 ? RK_WG_ROTARY_HG_VEC_WIDE64
                 : ar == RK_ARITH_NARROW ? RK_WG_ROTARY_HG_VEC_NARROW : RK_WG_ROTARY_HG_VEC;
    if (vec && hg > 1 && p->B * p->S * p->N * units < RK_WG_ROTARY_SMALL_GRID) hg = 1;
    if (vec && units_rot < RK_WG_ROTARY_HG_MIN_UNITS) hg = 1; /* short rotated runs */
    const int64_t ng = (p->N + hg - 1) / hg; /* head groups */
    int64_t total = p->B * p->S * ng; /* fits: validated sizes */
    if (total > (int64_t)UINT32_MAX / units)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "%lld invocations exceed the 32-bit index of the "
                       "WebGPU kernels", (long long)total * units);
    total *= units;

    /* ids: narrowed to u32 on the host (already checked against the table rows) */
    uint32_t rows_mode = p->rows == RK_ROWS_PER_TOKEN ? 0 : p->rows == RK_ROWS_OFFSET ? 1
                         : p->rows == RK_ROWS_TABLE_3D ? 2 : 3;
    if (rows_mode == 0 || rows_mode == 3) {
        RK_TRY(check_u32("table rows", p->table_rows));
        size_t streams = rows_mode == 3 ? 3 : 1, n = streams * (size_t)(p->B * p->S);
        uint32_t *ids = NULL; /* goes with the parameters: one queue write */
        RK_TRY(rk_wg_ids_host(ctx, n, &ids));
        size_t i = 0;
        for (size_t st = 0; st < streams; ++st)
            for (int64_t b = 0; b < p->B; ++b)
                for (int64_t s = 0; s < p->S; ++s)
                    ids[i++] = (uint32_t)p->pos[(int64_t)st * p->pos_as + b * p->pos_bs + s * p->pos_ss];
        RK_TRY(rk_wg_stage_ids(ctx, n, &bind[5]));
    }
    uint32_t prm[36];
    memset(prm, 0, sizeof prm);
    const int64_t vals[] = {(int64_t)x0, (int64_t)y0, (int64_t)c0, (int64_t)s0,
                            p->xs[0], p->xs[1], p->xs[2], p->xs[3],
                            p->ys[0], p->ys[1], p->ys[2], p->ys[3],
                            p->B, p->S, p->N, p->R, units_rot, units, total,
                            (p->interleaved ? 1 : 0) | (p->inverse ? 2 : 0) | (p->apply_scale ? 4 : 0),
                            p->cos_rs, p->cos_cs, p->sin_rs, p->sin_cs,
                            p->cos_bs, p->cos_ss, p->sin_bs, p->sin_ss,
                            p->rows == RK_ROWS_OFFSET ? p->offset : 0,
                            p->mrope_section[0], p->mrope_section[1], p->mrope_layout};
    static const char *names[] = {"x offset", "y offset", "cos offset", "sin offset", "x stride",
                                  "x stride", "x stride", "x stride", "y stride", "y stride",
                                  "y stride", "y stride", "B", "S", "N", "R", "units", "units",
                                  "invocations", "flags", "cos stride", "cos stride", "sin stride",
                                  "sin stride", "cos stride", "cos stride", "sin stride",
                                  "sin stride", "offset", "mrope_section", "mrope_section",
                                  "mrope_layout"};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; ++i) {
        RK_TRY(check_u32(names[i], vals[i]));
        prm[i] = (uint32_t)vals[i];
    }
    memcpy(&prm[32], &p->scale, 4);
    prm[33] = (uint32_t)ng;
    /* shifts for the kernel's divisors that are powers of two (log2 + 1; 0: divide). The vector
     * kernel runs the rotations (units_rot per token and head group) and the copies of [R, H)
     * (units - units_rot) as two ranges of invocations, rotations first (rotary_vec.wgsl). */
    const int64_t divisors[4] = {vec ? units_rot : units, ng, p->S, vec ? units - units_rot : 0};
    if (vec) prm[35] = (uint32_t)(p->B * p->S * ng * units_rot); /* <= total */
    for (int i = 0; i < 4; ++i)
        if (divisors[i] > 0 && (divisors[i] & (divisors[i] - 1)) == 0) {
            uint32_t k = 0;
            while (((int64_t)1 << k) < divisors[i]) ++k;
            prm[34] |= (k + 1) << (8 * i);
        }

    /* Vector kernel, half-split, rows per token (not MRoPE's per column), no scale: both tables
     * with unit column stride and every row start on a 16-byte boundary (vt columns) are read
     * as 16-byte vectors (rotary_vec_tv.wgsl). */
    const int64_t vt = 16 / (int64_t)ropekit_dtype_size(p->table_dtype);
    int tv = vec && !p->interleaved && !p->apply_scale && p->cos_cs == 1 && p->sin_cs == 1 &&
             c0 % (uint64_t)vt == 0 && s0 % (uint64_t)vt == 0;
    /* MRoPE: one row per vector when its VE columns share a stream (contiguous sections whose
     * boundaries are multiples of VE) */
    if (tv && rows_mode == 3)
        tv = p->mrope_layout == 0 && p->mrope_section[0] % ve == 0 &&
             (p->mrope_section[0] + p->mrope_section[1]) % ve == 0;
    if (tv && rows_mode == 2)
        tv = p->cos_bs % vt == 0 && p->cos_ss % vt == 0 && p->sin_bs % vt == 0 && p->sin_ss % vt == 0;
    else if (tv)
        tv = p->cos_rs % vt == 0 && p->sin_rs % vt == 0;
    /* workgroup: the context's size; by default (options.workgroup_size 0) at most
     * RK_WG_ROTARY_VEC_WG for the vector kernel */
    const uint32_t wg = vec && !ctx->wg_asked && ctx->wg > RK_WG_ROTARY_VEC_WG ? RK_WG_ROTARY_VEC_WG : ctx->wg;
    /* interleaved or not and whether [R, H) is copied are constants of the variant (one path
     * per pipeline: SwiftShader runs every run-time branch's both sides) */
    const int il = p->interleaved ? 1 : 0, copy = units > units_rot;
    const int sig[12] = {(int)rows_mode, (int)xk, (int)yk, (int)tk, (int)ar, vec, tv, inplace,
                         (int)wg, (int)hg, il, copy};
    const int same = ctx->rot_pipe && memcmp(sig, ctx->rot_sig, sizeof sig) == 0;
    char key[160] = "";
    if (!same) rotary_key(key, sizeof key, sig);
    WGPUComputePipeline pipe = ctx->rot_pipe;
    if (!same && !rk_wg_pipeline_find(ctx, key, &pipe)) { /* the key names the WGSL: built on a miss only */
        const rk_wg_rotary_cfg cfg = {rows_mode, xk, yk, tk, ar, vec, inplace, wg, sw,
                                      (uint32_t)hg, p->dtype, tv, ctx->integer_paths,
                                      ctx->has_f64, il, copy};
        rk_buf s = {0};
        rk_wg_rotary_wgsl(&s, &cfg);
        ropekit_status st = s.oom ? rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "WGSL assembly failed")
                                  : rk_wg_pipeline(ctx, RK_LAYOUT_ROTARY, key, s.p, &pipe);
        free(s.p);
        RK_TRY(st);
    }
    memcpy(ctx->rot_sig, sig, sizeof sig);
    ctx->rot_pipe = pipe;
    int dims;
    RK_TRY(rk_wg_dispatch(ctx, RK_LAYOUT_ROTARY, pipe, prm, sizeof prm, bind, 6, (uint64_t)total,
                          wg, &dims));
    if (!same || !ctx->variant_is_rot || dims != ctx->rot_dims) {
        if (same) rotary_key(key, sizeof key, sig);
        snprintf(ctx->last_variant, sizeof ctx->last_variant, "%s%s grid%dd", key,
                 ctx->integer_paths ? " intpaths" : "", dims);
        ctx->variant_is_rot = 1;
        ctx->rot_dims = dims;
    }
    return ROPEKIT_OK;
}

static ropekit_status rotary_views(rk_wg_addr_map *m, rotary_args *a) {
    RK_TRY(rk_wg_host_view(m, a->x, "x", &a->hx));
    RK_TRY(rk_wg_host_view(m, a->cos, "cos_cache", &a->hc));
    RK_TRY(rk_wg_host_view(m, a->sin, "sin_cache", &a->hs));
    return rk_wg_host_view(m, a->y, "y", &a->hy);
}

ropekit_status ropekit_webgpu_rotary_embedding(ropekit_webgpu *ctx, const ropekit_webgpu_tensor *x,
                                               const ropekit_webgpu_tensor *cos_cache,
                                               const ropekit_webgpu_tensor *sin_cache,
                                               const ropekit_tensor *position_ids,
                                               const ropekit_rotary_embedding_attrs *attrs,
                                               const ropekit_webgpu_tensor *y) {
    rk_clear_error();
    if (!ctx) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx is NULL");
    rk_wg_addr_map m = {{0}, 0};
    rotary_args a = {x, cos_cache, sin_cache, y, {0}, {0}, {0}, {0}};
    RK_TRY(rotary_views(&m, &a));
    rk_rotary_plan p;
    RK_TRY(rk_plan_rotary_embedding(&a.hx, &a.hc, &a.hs, position_ids, attrs, &a.hy, &p));
    return run_rotary(ctx, &p, &a);
}

ropekit_status ropekit_webgpu_ms_rotary_embedding(ropekit_webgpu *ctx,
                                                  const ropekit_webgpu_tensor *input,
                                                  const ropekit_tensor *position_ids,
                                                  const ropekit_webgpu_tensor *cos_cache,
                                                  const ropekit_webgpu_tensor *sin_cache,
                                                  const ropekit_ms_rotary_embedding_attrs *attrs,
                                                  const ropekit_webgpu_tensor *y) {
    rk_clear_error();
    if (!ctx) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx is NULL");
    rk_wg_addr_map m = {{0}, 0};
    rotary_args a = {input, cos_cache, sin_cache, y, {0}, {0}, {0}, {0}};
    RK_TRY(rotary_views(&m, &a));
    rk_rotary_plan p;
    RK_TRY(rk_plan_ms_rotary_embedding(&a.hx, position_ids, &a.hc, &a.hs, attrs, &a.hy, &p));
    return run_rotary(ctx, &p, &a);
}

ropekit_status ropekit_webgpu_mrotary_embedding(ropekit_webgpu *ctx,
                                                const ropekit_webgpu_tensor *input,
                                                const ropekit_tensor *position_ids,
                                                const ropekit_webgpu_tensor *cos_cache,
                                                const ropekit_webgpu_tensor *sin_cache,
                                                const ropekit_mrotary_embedding_attrs *attrs,
                                                const ropekit_webgpu_tensor *y) {
    rk_clear_error();
    if (!ctx) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx is NULL");
    rk_wg_addr_map m = {{0}, 0};
    rotary_args a = {input, cos_cache, sin_cache, y, {0}, {0}, {0}, {0}};
    RK_TRY(rotary_views(&m, &a));
    rk_rotary_plan p;
    RK_TRY(rk_plan_mrotary_embedding(&a.hx, position_ids, &a.hc, &a.hs, attrs, &a.hy, &p));
    return run_rotary(ctx, &p, &a);
}

/* ---- QKNormRotaryEmbedding ------------------------------------------------------------------- */

#ifndef RK_WG_QKNORM_VPT /* row kernel: the most 16-byte vectors per invocation (0: never) */
#define RK_WG_QKNORM_VPT 4
#endif
#ifndef RK_WG_QKNORM_RS /* row kernel: the most rows per invocation (1 or 2) */
#define RK_WG_QKNORM_RS 1
#endif
#ifndef RK_WG_QKNORM_QR /* row kernel: rows (groups of rl invocations) per workgroup; 1: on the
                          * H200 (R2 of 2026-12-01, one call, rl 64) float32 0.598 vs 0.644 ms
                          * with 2, bfloat16 0.820 vs 0.835; (R2 of 2026-12-02, rl 32) 0.557 vs
                          * 0.590, 0.549 vs 0.577 */
#define RK_WG_QKNORM_QR 1
#endif
#ifndef RK_WG_QKNORM_RL /* row kernel: invocations per row where the row fits (32 or 64); 32: on
                          * the H200 (R1 of 2026-12-02, one call) bfloat16 0.577 vs 0.773 ms with
                          * 64, float32 0.573 vs 0.596 */
#define RK_WG_QKNORM_RL 32
#endif

ropekit_status ropekit_webgpu_qknorm_rotary_embedding(
    ropekit_webgpu *ctx, const ropekit_webgpu_tensor *query, const ropekit_webgpu_tensor *kv,
    const ropekit_webgpu_tensor *kv_norm_weight, const ropekit_webgpu_tensor *cos,
    const ropekit_webgpu_tensor *sin, const ropekit_qknorm_rotary_embedding_attrs *attrs,
    const ropekit_webgpu_tensor *query_out, const ropekit_webgpu_tensor *kv_out) {
    rk_clear_error();
    if (!ctx) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx is NULL");
    rk_wg_addr_map m = {{0}, 0};
    ropekit_tensor hq, hkv, hw, hc, hs, hqo, hkvo;
    RK_TRY(rk_wg_host_view(&m, query, "query", &hq));
    RK_TRY(rk_wg_host_view(&m, kv, "kv", &hkv));
    RK_TRY(rk_wg_host_view(&m, kv_norm_weight, "kv_norm_weight", &hw));
    if (cos) RK_TRY(rk_wg_host_view(&m, cos, "cos", &hc));
    if (sin) RK_TRY(rk_wg_host_view(&m, sin, "sin", &hs));
    RK_TRY(rk_wg_host_view(&m, query_out, "query_out", &hqo));
    RK_TRY(rk_wg_host_view(&m, kv_out, "kv_out", &hkvo));
    rk_qknorm_plan p;
    RK_TRY(rk_plan_qknorm_rotary_embedding(&hq, &hkv, &hw, cos ? &hc : NULL, sin ? &hs : NULL,
                                           attrs, &hqo, &hkvo, &p));
    if (p.B == 0 || p.S == 0) return ROPEKIT_OK;
    rk_wg_binding bind[8];
    memset(bind, 0, sizeof bind);
    uint32_t qb, kvb, wb, cb = 0, sb = 0, qob, kvob;
    RK_TRY(rk_wg_bind_view(ctx, query, "query", &bind[1], &qb));
    RK_TRY(rk_wg_bind_view(ctx, kv, "kv", &bind[2], &kvb));
    RK_TRY(rk_wg_bind_view(ctx, kv_norm_weight, "kv_norm_weight", &bind[3], &wb));
    if (p.rope_dim > 0) {
        RK_TRY(rk_wg_bind_view(ctx, cos, "cos", &bind[4], &cb));
        RK_TRY(rk_wg_bind_view(ctx, sin, "sin", &bind[5], &sb));
    }
    RK_TRY(rk_wg_bind_view(ctx, query_out, "query_out", &bind[6], &qob));
    RK_TRY(rk_wg_bind_view(ctx, kv_out, "kv_out", &bind[7], &kvob));
    const int q_inplace = p.q == p.q_out && memcmp(p.qs, p.qos, sizeof p.qs) == 0;
    const int kv_inplace = p.kv == p.kv_out && memcmp(p.kvs, p.kvos, sizeof p.kvs) == 0;
    if (q_inplace) bind[1].buffer = NULL;
    if (kv_inplace) bind[2].buffer = NULL;
    RK_TRY(check_writable_ranges(bind, 8, (1u << 6) | (1u << 7)));
    uint64_t q0 = elem_of(p.q, &hq, qb), kv0 = elem_of(p.kv, &hkv, kvb);
    uint64_t qo0 = elem_of(p.q_out, &hqo, qob), kvo0 = elem_of(p.kv_out, &hkvo, kvob);
    uint64_t w0 = elem_of(p.w, &hw, wb);
    uint64_t c0 = p.rope_dim ? elem_of(p.cos, &hc, cb) : 0, s0 = p.rope_dim ? elem_of(p.sin, &hs, sb) : 0;
    const rk_wg_kind k = rk_wg_kind_of(ctx, p.dtype);
    rk_wg_kind ok_ = k; /* kind of the two outputs: atomics for unpaired packed layouts */
    if (is_packed(k)) {
        int paired = p.nope % 2 == 0 && in_runs_of(2, p.qs, 3, p.qs[3], q0) &&
                     in_runs_of(2, p.qos, 3, p.qos[3], qo0) && in_runs_of(2, p.kvs, 2, p.kvs[2], kv0) &&
                     in_runs_of(2, p.kvos, 2, p.kvos[2], kvo0);
        if (!paired) ok_ = atomic_of(k);
    }
    int64_t rows = p.B * p.S;
    if (rows > (int64_t)UINT32_MAX / (p.num_heads + 1))
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many rows for the WebGPU kernel");
    rows *= p.num_heads + 1;
    uint32_t prm[48];
    memset(prm, 0, sizeof prm);
    const int64_t vals[] = {(int64_t)q0, (int64_t)qo0, (int64_t)kv0, (int64_t)kvo0,
                            p.qs[0], p.qs[1], p.qs[2], p.qs[3],
                            p.qos[0], p.qos[1], p.qos[2], p.qos[3],
                            p.kvs[0], p.kvs[1], p.kvs[2], 0,
                            p.kvos[0], p.kvos[1], p.kvos[2], 0,
                            p.rope_dim ? p.cos_s[0] : 0, p.rope_dim ? p.cos_s[1] : 0,
                            p.rope_dim ? p.cos_s[2] : 0, 0,
                            p.rope_dim ? p.sin_s[0] : 0, p.rope_dim ? p.sin_s[1] : 0,
                            p.rope_dim ? p.sin_s[2] : 0, 0,
                            (int64_t)w0, p.ws, (int64_t)c0, (int64_t)s0,
                            p.B, p.S, p.num_heads, p.head_dim,
                            p.rope_dim, p.nope, p.simulate_fp8 ? 1 : 0, rows};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; ++i) {
        RK_TRY(check_u32("a QKNorm offset, stride or size", vals[i]));
        prm[i] = (uint32_t)vals[i];
    }
    memcpy(&prm[40], &p.epsilon, 4); /* prm[42] stays 0: the row kernel's P.zero */
    /* row kernel: 1/head_dim where head_dim is a power of two (ss / head_dim = ss * 2^-k,
     * exact where the result is a normal float32), else 0 */
    if ((p.head_dim & (p.head_dim - 1)) == 0) {
        const float inv = 1.0f / (float)p.head_dim;
        memcpy(&prm[41], &inv, 4);
    }

    /* The row kernel (qknorm_row.wgsl): every row read and written as 16-byte vectors (unit
     * channel stride, head_dim and every row start a multiple of the elements per vector), 64
     * invocations per row holding up to RK_WG_QKNORM_VPT vectors each; else the general kernel
     * (qknorm.wgsl: 16 invocations per row, one element per access). */
    const int64_t ve = 16 / (int64_t)ropekit_dtype_size(p.dtype);
    const int row_kernel =
        RK_WG_QKNORM_VPT > 0 && p.head_dim % ve == 0 && p.head_dim <= 64 * RK_WG_QKNORM_VPT * ve &&
        in_runs_of(ve, p.qs, 3, p.qs[3], q0) && in_runs_of(ve, p.qos, 3, p.qos[3], qo0) &&
        in_runs_of(ve, p.kvs, 2, p.kvs[2], kv0) && in_runs_of(ve, p.kvos, 2, p.kvos[2], kvo0);
    /* invocations per row: RK_WG_QKNORM_RL where the row fits in RK_WG_QKNORM_VPT vectors each,
     * else 64 */
    const uint32_t rl = RK_WG_QKNORM_RL == 32 && p.head_dim <= 32 * RK_WG_QKNORM_VPT * ve ? 32 : 64;
    const uint32_t vpt = row_kernel ? (uint32_t)((p.head_dim / ve + rl - 1) / rl) : 0;
    /* rows per workgroup: RK_WG_QKNORM_QR, fewer where the workgroup would exceed the adapter's
     * invocations or WebGPU's guaranteed 16 KiB of workgroup memory (per row: the staged row's
     * 16-byte vectors, a float per vector, 64 partial sums of at most 24 bytes and 64 minima,
     * the factor; package.c's row variants the same) */
    uint32_t qr = RK_WG_QKNORM_QR;
    /* two rows per invocation (twice the loads in flight) where each holds at most 2 vectors;
     * RK_WG_QKNORM_RS is 1 by default: on the H200 (R2) 2 was faster only for bfloat16, 0.591 vs
     * 0.612 ms, slower for float32 (0.571 vs 0.537, one group per workgroup) and float16 */
    const uint32_t rs = RK_WG_QKNORM_RS > 1 && vpt <= 2 ? 2 : 1;
    while (qr > 1 && (ctx->wg < rl * qr || qr * rs * (rl * vpt * 20 + rl * 28 + 4) > 16384))
        qr /= 2;
    char key[160];
    const rk_wg_arith ar = ctx->has_f64 ? RK_ARITH_WIDE64 : RK_ARITH_EXACT32;
    if (row_kernel)
        snprintf(key, sizeof key, "qknorm row %s rl%u vpt%u qr%u rs%u fs %s q_%s kv_%s",
                 ropekit_dtype_name(p.dtype), rl, vpt, qr, rs, rk_wg_arith_name(ar),
                 q_inplace ? "inplace" : "outofplace", kv_inplace ? "inplace" : "outofplace");
    else
        snprintf(key, sizeof key, "qknorm x=%s y=%s %s q_%s kv_%s", rk_wg_kind_name(k),
                 rk_wg_kind_name(ok_), rk_wg_arith_name(ar), q_inplace ? "inplace" : "outofplace",
                 kv_inplace ? "inplace" : "outofplace");
    WGPUComputePipeline pipe;
    if (!rk_wg_pipeline_find(ctx, key, &pipe)) { /* the key names the WGSL: built on a miss only */
        const rk_wg_qknorm_cfg cfg = {k, ok_, ar, q_inplace, kv_inplace, vpt, qr, p.dtype, ctx->integer_paths, rs, rl};
        rk_buf s = {0};
        rk_wg_qknorm_wgsl(&s, &cfg);
        ropekit_status st = s.oom ? rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "WGSL assembly failed")
                                  : rk_wg_pipeline(ctx, RK_LAYOUT_QKNORM, key, s.p, &pipe);
        free(s.p);
        RK_TRY(st);
    }
    int dims;
    /* general: 4 rows per 64-invocation workgroup; row kernel: qr rows of rl invocations */
    if (row_kernel)
        RK_TRY(rk_wg_dispatch(ctx, RK_LAYOUT_QKNORM, pipe, prm, sizeof prm, bind, 8,
                              (((uint64_t)rows + rs - 1) / rs) * rl, rl * qr, &dims));
    else
        RK_TRY(rk_wg_dispatch(ctx, RK_LAYOUT_QKNORM, pipe, prm, sizeof prm, bind, 8,
                              (uint64_t)rows * 16, 64, &dims));
    snprintf(ctx->last_variant, sizeof ctx->last_variant, "%s%s grid%dd", key,
             ctx->integer_paths ? " intpaths" : "", dims);
    ctx->variant_is_rot = 0;
    return ROPEKIT_OK;
}

/* ---- InverseRotaryRegroup --------------------------------------------------------------------- */

ropekit_status ropekit_webgpu_inverse_rotary_regroup(ropekit_webgpu *ctx,
                                                     const ropekit_webgpu_tensor *input,
                                                     const ropekit_webgpu_tensor *cos,
                                                     const ropekit_webgpu_tensor *sin,
                                                     const ropekit_inverse_rotary_regroup_attrs *attrs,
                                                     const ropekit_webgpu_tensor *out) {
    rk_clear_error();
    if (!ctx) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "ctx is NULL");
    rk_wg_addr_map m = {{0}, 0};
    ropekit_tensor hx, hc, hs, ho;
    RK_TRY(rk_wg_host_view(&m, input, "input", &hx));
    if (cos) RK_TRY(rk_wg_host_view(&m, cos, "cos", &hc));
    if (sin) RK_TRY(rk_wg_host_view(&m, sin, "sin", &hs));
    RK_TRY(rk_wg_host_view(&m, out, "out", &ho));
    rk_regroup_plan p;
    RK_TRY(rk_plan_inverse_rotary_regroup(&hx, cos ? &hc : NULL, sin ? &hs : NULL, attrs, &ho, &p));
    const int64_t F = p.num_heads * p.head_dim;
    if (p.N == 0 || F == 0) return ROPEKIT_OK;
    rk_wg_binding bind[5];
    memset(bind, 0, sizeof bind);
    uint32_t xb, ob, cb = 0, sb = 0;
    RK_TRY(rk_wg_bind_view(ctx, input, "input", &bind[1], &xb));
    RK_TRY(rk_wg_bind_view(ctx, out, "out", &bind[2], &ob));
    const int rope = p.rope_dim > 0;
    if (rope) {
        RK_TRY(rk_wg_bind_view(ctx, cos, "cos", &bind[3], &cb));
        RK_TRY(rk_wg_bind_view(ctx, sin, "sin", &bind[4], &sb));
    }
    RK_TRY(check_writable_ranges(bind, 5, 1u << 2));
    uint64_t x0 = elem_of(p.x, &hx, xb), o0 = elem_of(p.out, &ho, ob);
    uint64_t c0 = rope ? elem_of(p.cos, &hc, cb) : 0, s0 = rope ? elem_of(p.sin, &hs, sb) : 0;
    const rk_wg_kind k = rk_wg_kind_of(ctx, p.dtype);
    /* two features per invocation when a pair never straddles a group, the nope/rope boundary or
     * (packed) a word; one otherwise (32-bit storage only) */
    const int pairs_ok = p.group_dim % 2 == 0 && p.nope % 2 == 0 && p.head_dim % 2 == 0;
    rk_wg_kind ok_ = k; /* output kind: atomics when packed features do not pair into words */
    uint32_t ue = pairs_ok ? 2 : 1;
    if (is_packed(k)) {
        int64_t xs2[1] = {p.xs[0]}, os2[2] = {p.os[0], p.os[1]};
        int paired = pairs_ok && in_runs_of(2, xs2, 1, p.xs[1], x0) &&
                     in_runs_of(2, os2, 2, p.os[2], o0);
        if (!paired) {
            ok_ = atomic_of(k);
            ue = 1;
        }
    }
    const int64_t units = F / ue;
    if (p.N > (int64_t)UINT32_MAX / units)
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "too many elements for the WebGPU kernel");
    const int64_t total = p.N * units;
    const rk_wg_arith ar = ctx->has_f64 ? RK_ARITH_WIDE64 : RK_ARITH_EXACT32;
    uint32_t prm[28];
    memset(prm, 0, sizeof prm);
    const int64_t vals[] = {(int64_t)x0, (int64_t)o0, (int64_t)c0, (int64_t)s0,
                            p.xs[0], p.xs[1], 0, 0,
                            p.os[0], p.os[1], p.os[2], 0,
                            rope ? p.cos_s[0] : 0, rope ? p.cos_s[1] : 0, 0, 0,
                            rope ? p.sin_s[0] : 0, rope ? p.sin_s[1] : 0, 0, 0,
                            p.N, F, p.head_dim, p.nope, p.group_dim, units, total, 0};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; ++i) {
        RK_TRY(check_u32("a regroup offset, stride or size", vals[i]));
        prm[i] = (uint32_t)vals[i];
    }
    char key[160];
    snprintf(key, sizeof key, "regroup x=%s y=%s %s ue%u wg%u", rk_wg_kind_name(k),
             rk_wg_kind_name(ok_), rk_wg_arith_name(ar), ue,
             ctx->wg);
    WGPUComputePipeline pipe;
    if (!rk_wg_pipeline_find(ctx, key, &pipe)) { /* the key names the WGSL: built on a miss only */
        const rk_wg_regroup_cfg cfg = {k, ok_, ar, ue, ctx->wg, ctx->integer_paths};
        rk_buf s = {0};
        rk_wg_regroup_wgsl(&s, &cfg);
        ropekit_status st = s.oom ? rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "WGSL assembly failed")
                                  : rk_wg_pipeline(ctx, RK_LAYOUT_REGROUP, key, s.p, &pipe);
        free(s.p);
        RK_TRY(st);
    }
    int dims;
    RK_TRY(rk_wg_dispatch(ctx, RK_LAYOUT_REGROUP, pipe, prm, sizeof prm, bind, 5, (uint64_t)total,
                          ctx->wg, &dims));
    snprintf(ctx->last_variant, sizeof ctx->last_variant, "%s%s grid%dd", key,
             ctx->integer_paths ? " intpaths" : "", dims);
    ctx->variant_is_rot = 0;
    return ROPEKIT_OK;
}
