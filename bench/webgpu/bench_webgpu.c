/* bench_webgpu: the WebGPU operators on one adapter against two copies of the activation bytes
 * on the same adapter (copyBufferToBuffer, and a WGSL compute shader that copies 16 bytes per
 * invocation) and against the CPU backend on the same shape.
 *
 * Two times per row, median of 7 batches of `reps` calls (one submission each, then one wait):
 * *kernel*: the GPU time of the compute pass from timestamp queries (WebGPU's timestamp-query
 * feature, through wgpu-native: options.timestamps and ropekit_webgpu_kernel_time; the shader
 * copy's passes likewise), per call; *wall*: wall clock from the first submission to the queue
 * being idle, per call (host work, parameter upload, bind group and submission included: on a
 * fast GPU the small rows measure these). The buffer copy has no pass to time: wall only.
 * Bytes moved = activations read + written + the table rows (and
 * ids, weights) read once per token; GB/s = bytes / time. The shapes are the bench cases of
 * src/webgpu/ops/<op>/bench.json (the CPU and CUDA benchmarks' shapes), scaled down with --small
 * for software adapters.
 * Usage: bench_webgpu [--backend vulkan|gl] [--small] [--reps N] [--no-cpu]
 *                     [--only rotary|qknorm|regroup] [--wg N] [--rows N,N,...]
 *                     [--dtypes float32,bfloat16,float16] [--no-f64 (shader-f64 off: exact32)]
 * (--dtypes: the QKNorm and regroup rows of these dtypes only) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wgpu.h> /* wgpuQueueGetTimestampPeriod */

#include "bench_common.h"
#include "ropekit_webgpu.h"



static void fill(void *p, ropekit_dtype dt, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        float v = (float)((i * 2654435761u) % 2000u) / 1000.0f - 1.0f;
        if (dt == ROPEKIT_FLOAT32) ((float *)p)[i] = v;
        else if (dt == ROPEKIT_FLOAT16) ((uint16_t *)p)[i] = f2h(v);
        else {
            uint32_t u;
            memcpy(&u, &v, 4);
            ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        }
    }
}

static ropekit_webgpu *g_ctx;


/* A plain copy kernel: one vec4<u32> per invocation, grid-stride over 65535 workgroups at most. */
static const char copy_wgsl[] =
    "@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;\n"
    "@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;\n"
    "@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3<u32>,\n"
    "                                     @builtin(num_workgroups) n: vec3<u32>) {\n"
    "    for (var i = g.x; i < arrayLength(&dst); i += n.x * 256u) { dst[i] = src[i]; }\n"
    "}\n";

typedef struct shader_copy {
    WGPUComputePipeline pipeline;
    WGPUBindGroup group;
    uint32_t groups;
    WGPUQuerySet ts;            /* begin/end of each pass (timestamp-query), or NULL */
    WGPUBuffer ts_resolve, ts_read;
    uint32_t ts_n, ts_cap;
} shader_copy;

static shader_copy shader_copy_make(WGPUDevice dev, WGPUBuffer src, WGPUBuffer dst, uint64_t bytes) {
    shader_copy c;
    memset(&c, 0, sizeof c);
    WGPUShaderSourceWGSL w;
    memset(&w, 0, sizeof w);
    w.chain.sType = WGPUSType_ShaderSourceWGSL;
    w.code = (WGPUStringView){copy_wgsl, WGPU_STRLEN};
    WGPUShaderModuleDescriptor md = {&w.chain, {"copy", WGPU_STRLEN}};
    WGPUShaderModule mod = wgpuDeviceCreateShaderModule(dev, &md);
    WGPUComputePipelineDescriptor pd;
    memset(&pd, 0, sizeof pd);
    pd.compute.module = mod;
    pd.compute.entryPoint = (WGPUStringView){"main", WGPU_STRLEN};
    c.pipeline = wgpuDeviceCreateComputePipeline(dev, &pd);
    wgpuShaderModuleRelease(mod);
    WGPUBindGroupLayout bgl = wgpuComputePipelineGetBindGroupLayout(c.pipeline, 0);
    WGPUBindGroupEntry e[2];
    memset(e, 0, sizeof e);
    e[0].binding = 0, e[0].buffer = src, e[0].size = bytes;
    e[1].binding = 1, e[1].buffer = dst, e[1].size = bytes;
    WGPUBindGroupDescriptor bd = {NULL, {"copy", WGPU_STRLEN}, bgl, 2, e};
    c.group = wgpuDeviceCreateBindGroup(dev, &bd);
    wgpuBindGroupLayoutRelease(bgl);
    uint64_t groups = (bytes / 16 + 255) / 256;
    c.groups = groups < 65535 ? (uint32_t)groups : 65535;
    if (ropekit_webgpu_has_timestamps(g_ctx)) {
        c.ts_cap = 1024;
        WGPUQuerySetDescriptor qd = {NULL, {"copy", WGPU_STRLEN}, WGPUQueryType_Timestamp, 2 * c.ts_cap};
        c.ts = wgpuDeviceCreateQuerySet(dev, &qd);
        WGPUBufferDescriptor r = {NULL, {"r", WGPU_STRLEN}, WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc, 16 * c.ts_cap, 0};
        WGPUBufferDescriptor m = {NULL, {"m", WGPU_STRLEN}, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, 16 * c.ts_cap, 0};
        c.ts_resolve = wgpuDeviceCreateBuffer(dev, &r);
        c.ts_read = wgpuDeviceCreateBuffer(dev, &m);
    }
    return c;
}

static void on_map(WGPUMapAsyncStatus status, WGPUStringView msg, void *u1, void *u2) {
    (void)msg, (void)u2;
    *(int *)u1 = status == WGPUMapAsyncStatus_Success ? 1 : -1;
}

/* GPU seconds of the copy passes since the last call (timestamps), or -1 without them. */
static double shader_copy_time(WGPUDevice dev, shader_copy *c) {
    if (!c->ts || !c->ts_n) return -1;
    const uint32_t n = c->ts_n;
    c->ts_n = 0;
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(dev, NULL);
    wgpuCommandEncoderResolveQuerySet(enc, c->ts, 0, 2 * n, c->ts_resolve, 0);
    wgpuCommandEncoderCopyBufferToBuffer(enc, c->ts_resolve, 0, c->ts_read, 0, 16 * (uint64_t)n);
    WGPUCommandBuffer cmd = wgpuCommandEncoderFinish(enc, NULL);
    WGPUQueue q = wgpuDeviceGetQueue(dev);
    wgpuQueueSubmit(q, 1, &cmd);
    wgpuCommandBufferRelease(cmd);
    wgpuCommandEncoderRelease(enc);
    int done = 0;
    WGPUBufferMapCallbackInfo cb = {NULL, WGPUCallbackMode_AllowProcessEvents, on_map, &done, NULL};
    wgpuBufferMapAsync(c->ts_read, WGPUMapMode_Read, 0, 16 * (size_t)n, cb);
    while (!done) ropekit_webgpu_wait(g_ctx);
    double ticks = 0;
    if (done > 0) {
        const uint64_t *t = wgpuBufferGetConstMappedRange(c->ts_read, 0, 16 * (size_t)n);
        for (uint32_t i = 0; t && i < n; ++i)
            if (t[2 * i + 1] > t[2 * i]) ticks += (double)(t[2 * i + 1] - t[2 * i]);
        wgpuBufferUnmap(c->ts_read);
    }
    const double period = (double)wgpuQueueGetTimestampPeriod(q);
    wgpuQueueRelease(q);
    return done > 0 ? ticks * period * 1e-9 : -1;
}

static void shader_copy_submit(WGPUDevice dev, shader_copy *c) {
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(dev, NULL);
    WGPUPassTimestampWrites tw = {NULL, c->ts, 2 * c->ts_n, 2 * c->ts_n + 1};
    WGPUComputePassDescriptor pd = {NULL, {"copy", WGPU_STRLEN}, NULL};
    if (c->ts && c->ts_n < c->ts_cap) pd.timestampWrites = &tw, c->ts_n++;
    WGPUComputePassEncoder pass = wgpuCommandEncoderBeginComputePass(enc, &pd);
    wgpuComputePassEncoderSetPipeline(pass, c->pipeline);
    wgpuComputePassEncoderSetBindGroup(pass, 0, c->group, 0, NULL);
    wgpuComputePassEncoderDispatchWorkgroups(pass, c->groups, 1, 1);
    wgpuComputePassEncoderEnd(pass);
    wgpuComputePassEncoderRelease(pass);
    WGPUCommandBuffer cmd = wgpuCommandEncoderFinish(enc, NULL);
    WGPUQueue q = wgpuDeviceGetQueue(dev);
    wgpuQueueSubmit(q, 1, &cmd);
    wgpuQueueRelease(q);
    wgpuCommandBufferRelease(cmd);
    wgpuCommandEncoderRelease(enc);
}

/* One benchmark row: the operator (op), the same bytes copied on the adapter both ways, and the
 * CPU backend (cpu) on the same host data. act: activation bytes (what a copy moves once);
 * bytes: what the operator moves in all. */
typedef struct row {
    const char *name;
    ropekit_dtype x, t;
    void (*op)(void *), (*cpu)(void *);
    void *arg;
    WGPUBuffer src, dst; /* activation-sized buffers for the copies */
    size_t act;
    double bytes;
} row;

static int g_reps = 20, g_bad, g_no_cpu;
static const char *g_rows; /* --rows: the 1-based numbers of the rows to run (all when NULL) */
static int g_row_no;
static int want_row(void) {
    char want[16], list[256];
    ++g_row_no;
    if (!g_rows) return 1;
    snprintf(want, sizeof want, ",%d,", g_row_no);
    snprintf(list, sizeof list, ",%s,", g_rows);
    return strstr(list, want) != NULL;
}
/* the first failing call's status and message: later calls (wait, kernel_time) clear the
 * library's last error, so it is kept here when the operator fails */
static char g_err[640];
static void op_failed(ropekit_status st) {
    if (!g_bad)
        snprintf(g_err, sizeof g_err, "%s: %s", ropekit_status_str(st),
                 *ropekit_webgpu_last_error() ? ropekit_webgpu_last_error() : "(no message)");
    g_bad = 1;
}

static double median7(double *t) {
    qsort(t, 7, sizeof(double), cmp_d);
    return t[3];
}

static void run_row(const row *r) {
    WGPUDevice dev = ropekit_webgpu_device(g_ctx);
    const uint64_t copy_bytes = r->act & ~(size_t)15; /* whole vec4s */
    shader_copy sc = shader_copy_make(dev, r->src, r->dst, copy_bytes);
    double t_op[7], t_cp[7], t_sc[7], t_cpu[7], k_op[7], k_sc[7];
    const double scale = (double)r->act / (double)copy_bytes;
    const int ts = ropekit_webgpu_has_timestamps(g_ctx);
    g_bad = 0;
    /* the first call compiles the pipeline (seconds for a large kernel, the GPU idle meanwhile:
     * an H200 drops its clock), then 0.25 s of calls bring the clock back before batch 0 */
    r->op(r->arg);
    ropekit_webgpu_wait(g_ctx);
    for (const double tw = now_s(); !g_bad && now_s() - tw < 0.25;) {
        for (int i = 0; i < g_reps; ++i) r->op(r->arg);
        ropekit_webgpu_wait(g_ctx);
    }
    for (int b = 0; b < 8 && !g_bad; ++b) { /* batch 0 warms up (pipeline compile) */
        double kop = -1, ksc = -1, sec = 0;
        uint32_t passes = 0;
        if (ts) ropekit_webgpu_kernel_time(g_ctx, &sec, &passes); /* reset the counters */
        double t0 = now_s();
        for (int i = 0; i < g_reps; ++i) r->op(r->arg);
        ropekit_webgpu_wait(g_ctx);
        double t1 = now_s();
        if (ts && ropekit_webgpu_kernel_time(g_ctx, &sec, &passes) == ROPEKIT_OK && passes)
            kop = sec / passes;
        const double t1b = now_s();
        for (int i = 0; i < g_reps; ++i) { /* the copy: one command buffer per repetition too */
            WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(dev, NULL);
            wgpuCommandEncoderCopyBufferToBuffer(enc, r->src, 0, r->dst, 0, (r->act + 3) & ~(size_t)3);
            WGPUCommandBuffer cmd = wgpuCommandEncoderFinish(enc, NULL);
            WGPUQueue q = wgpuDeviceGetQueue(dev);
            wgpuQueueSubmit(q, 1, &cmd);
            wgpuQueueRelease(q);
            wgpuCommandBufferRelease(cmd);
            wgpuCommandEncoderRelease(enc);
        }
        ropekit_webgpu_wait(g_ctx);
        double t2 = now_s();
        sc.ts_n = 0;
        for (int i = 0; i < g_reps; ++i) shader_copy_submit(dev, &sc);
        ropekit_webgpu_wait(g_ctx);
        const double t3 = now_s();
        const int nsc = (int)sc.ts_n;
        if (ts) ksc = shader_copy_time(dev, &sc);
        if (ksc > 0 && nsc) ksc = ksc / nsc * scale;
        const double t3b = now_s();
        if (!g_no_cpu) r->cpu(r->arg);
        const double t4 = now_s();
        if (b > 0) {
            t_op[b - 1] = (t1 - t0) / g_reps;
            t_cp[b - 1] = (t2 - t1b) / g_reps;
            t_sc[b - 1] = (t3 - t2) / g_reps * scale;
            t_cpu[b - 1] = t4 - t3b;
            k_op[b - 1] = kop;
            k_sc[b - 1] = ksc;
        }
    }
    if (g_bad) {
        printf("| %s | %s | %s | error: %s |\n", r->name, ropekit_dtype_name(r->x),
               r->t ? ropekit_dtype_name(r->t) : "-", g_err);
    } else {
        const double op = median7(t_op), cp = median7(t_cp), scp = median7(t_sc), cpu = median7(t_cpu);
        const double kop = median7(k_op), ksc = median7(k_sc);
        /* copy bandwidth counts read + write of the activation bytes, like the op */
        const double best = cp < scp ? cp : scp;
        const double wall_ratio = (r->bytes / op) / (2.0 * (double)r->act / best);
        printf("| %s | %s | %s | %s | ", r->name, ropekit_dtype_name(r->x),
               r->t ? ropekit_dtype_name(r->t) : "-", ropekit_webgpu_last_variant(g_ctx));
        if (kop > 0 && ksc > 0)
            printf("%.4f | %.1f | %.4f | %.2f | ", kop * 1e3, r->bytes / kop / 1e9, ksc * 1e3,
                   (r->bytes / kop) / (2.0 * (double)r->act / ksc));
        else printf("- | - | - | - | ");
        printf("%.3f | %.3f | %.3f | %.2f | %.3f | %.1fx |\n", op * 1e3, cp * 1e3, scp * 1e3,
               wall_ratio, cpu * 1e3, cpu / (kop > 0 ? kop : op));
    }
    fflush(stdout);
    wgpuBindGroupRelease(sc.group), wgpuComputePipelineRelease(sc.pipeline);
    if (sc.ts) wgpuQuerySetRelease(sc.ts), wgpuBufferRelease(sc.ts_resolve), wgpuBufferRelease(sc.ts_read);
}

static WGPUBuffer gbuf(size_t bytes, const void *host) {
    WGPUBuffer b = NULL;
    if (ropekit_webgpu_buffer_create(g_ctx, bytes < 16 ? 16 : bytes, &b) != ROPEKIT_OK) {
        fprintf(stderr, "buffer of %zu bytes: %s\n", bytes, ropekit_webgpu_last_error());
        exit(1);
    }
    if (host) ropekit_webgpu_write(g_ctx, b, 0, host, bytes);
    return b;
}

/* ---- RotaryEmbedding and MRotaryEmbedding (mrope: sections [16, 24, 24]) ---- */
typedef struct rot {
    int64_t B, S, N, H, R, P;
    int mrope;
    ropekit_webgpu_tensor gx, gy, gc, gs;
    ropekit_tensor cx, cy, cc, cs, ids;
} rot;
static ropekit_mrotary_embedding_attrs mrope_attrs(int64_t N) {
    ropekit_mrotary_embedding_attrs at = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
    at.mrope_section[0] = 16, at.mrope_section[1] = 24, at.mrope_section[2] = 24, at.num_heads = N;
    return at;
}
static void rot_op(void *p) {
    rot *a = p;
    ropekit_status st;
    if (a->mrope) {
        const ropekit_mrotary_embedding_attrs at = mrope_attrs(a->N);
        st = ropekit_webgpu_mrotary_embedding(g_ctx, &a->gx, &a->ids, &a->gc, &a->gs, &at, &a->gy);
    } else {
        ropekit_rotary_embedding_attrs at = {0, a->R, a->N, 0};
        st = ropekit_webgpu_rotary_embedding(g_ctx, &a->gx, &a->gc, &a->gs, &a->ids, &at, &a->gy);
    }
    if (st != ROPEKIT_OK) op_failed(st);
}
static void rot_cpu(void *p) {
    rot *a = p;
    if (a->mrope) {
        const ropekit_mrotary_embedding_attrs at = mrope_attrs(a->N);
        ropekit_mrotary_embedding(&a->cx, &a->ids, &a->cc, &a->cs, &at, &a->cy);
    } else {
        ropekit_rotary_embedding_attrs at = {0, a->R, a->N, 0};
        ropekit_rotary_embedding(&a->cx, &a->cc, &a->cs, &a->ids, &at, &a->cy);
    }
}
static void bench_rotary(const char *name, int64_t B, int64_t S, int64_t N, int64_t H, int64_t R,
                         int64_t P, ropekit_dtype x, ropekit_dtype t, int mrope) {
    const size_t xe = ropekit_dtype_size(x), te = ropekit_dtype_size(t);
    const size_t nx = (size_t)(B * S * N * H), nt = (size_t)(P * R / 2), ntok = (size_t)(B * S);
    const size_t nid = ntok * (mrope ? 3 : 1);
    void *hx = malloc(nx * xe), *hy = malloc(nx * xe), *hc = malloc(nt * te), *hs = malloc(nt * te);
    int64_t *pos = malloc(nid * sizeof *pos);
    fill(hx, x, nx), fill(hc, t, nt), fill(hs, t, nt);
    for (size_t i = 0; i < nid; ++i) pos[i] = (int64_t)((i * 7919u) % (size_t)P);
    rot a = {B, S, N, H, R, P, mrope, {0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}};
    int64_t xs[3] = {B, S, N * H}, ts[2] = {P, R / 2}, ps[3] = {3, B, S};
    WGPUBuffer bx = gbuf(nx * xe, hx), by = gbuf(nx * xe, NULL), bc = gbuf(nt * te, hc), bs = gbuf(nt * te, hs);
    a.gx = ropekit_webgpu_tensor_contiguous(bx, 0, x, 3, xs);
    a.gy = ropekit_webgpu_tensor_contiguous(by, 0, x, 3, xs);
    a.gc = ropekit_webgpu_tensor_contiguous(bc, 0, t, 2, ts);
    a.gs = ropekit_webgpu_tensor_contiguous(bs, 0, t, 2, ts);
    a.cx = ropekit_tensor_contiguous(hx, x, 3, xs), a.cy = ropekit_tensor_contiguous(hy, x, 3, xs);
    a.cc = ropekit_tensor_contiguous(hc, t, 2, ts), a.cs = ropekit_tensor_contiguous(hs, t, 2, ts);
    a.ids = mrope ? ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 3, ps)
                  : ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps + 1);
    const double bytes = 2.0 * (double)(nx * xe) + (double)ntok * (double)(R * te) + (double)nid * 8;
    row r = {name, x, t, rot_op, rot_cpu, &a, bx, by, nx * xe, bytes};
    run_row(&r);
    wgpuBufferRelease(bx), wgpuBufferRelease(by), wgpuBufferRelease(bc), wgpuBufferRelease(bs);
    free(hx), free(hy), free(hc), free(hs), free(pos);
}

/* ---- QKNormRotaryEmbedding and InverseRotaryRegroup (DeepSeek-V4: 128 heads x 512, rope 64) ---- */
enum { DS_NH = 128, DS_HD = 512, DS_RD = 64, DS_G = 8 };
typedef struct ds {
    int regroup;
    ropekit_webgpu_tensor g[7];
    ropekit_tensor c[7];
} ds;
static void ds_op(void *p) {
    ds *a = p;
    ropekit_status st;
    if (a->regroup) {
        ropekit_inverse_rotary_regroup_attrs at = {DS_NH, DS_HD, DS_RD, DS_G};
        st = ropekit_webgpu_inverse_rotary_regroup(g_ctx, &a->g[0], &a->g[1], &a->g[2], &at, &a->g[3]);
    } else {
        ropekit_qknorm_rotary_embedding_attrs at = {DS_NH, DS_HD, DS_RD, 1e-6f, 1};
        st = ropekit_webgpu_qknorm_rotary_embedding(g_ctx, &a->g[0], &a->g[1], &a->g[2], &a->g[3],
                                                    &a->g[4], &at, &a->g[5], &a->g[6]);
    }
    if (st != ROPEKIT_OK) op_failed(st);
}
static void ds_cpu(void *p) {
    ds *a = p;
    if (a->regroup) {
        ropekit_inverse_rotary_regroup_attrs at = {DS_NH, DS_HD, DS_RD, DS_G};
        ropekit_inverse_rotary_regroup(&a->c[0], &a->c[1], &a->c[2], &at, &a->c[3]);
    } else {
        ropekit_qknorm_rotary_embedding_attrs at = {DS_NH, DS_HD, DS_RD, 1e-6f, 1};
        ropekit_qknorm_rotary_embedding(&a->c[0], &a->c[1], &a->c[2], &a->c[3], &a->c[4], &at,
                                        &a->c[5], &a->c[6]);
    }
}
/* --dtypes LIST: the QKNorm / regroup rows of these dtypes only (comma-separated names) */
static const char *g_dtypes;
static int dtype_wanted(ropekit_dtype x) {
    if (!g_dtypes) return 1;
    const char *n = ropekit_dtype_name(x), *s = g_dtypes;
    const size_t len = strlen(n);
    for (const char *f; (f = strstr(s, n)); s = f + len)
        if ((f == g_dtypes || f[-1] == ',') && (f[len] == ',' || f[len] == 0)) return 1;
    return 0;
}
static void bench_ds(const char *name, int64_t T, ropekit_dtype x, int regroup) {
    if (!dtype_wanted(x)) return;
    ds a;
    memset(&a, 0, sizeof a);
    a.regroup = regroup;
    const int64_t F = (int64_t)DS_NH * DS_HD;
    /* the operator's tensors in call order: rank, shape, float32 (else x's type), read (input) */
    typedef struct spec { int rank; int64_t shape[4]; int f32, input; } spec;
    const spec rg[4] = {{2, {T, F}, 0, 1}, {2, {T, DS_RD}, 1, 1}, {2, {T, DS_RD}, 1, 1},
                        {3, {DS_G, T, F / DS_G}, 0, 0}}; /* x, cos, sin, out */
    const spec qk[7] = {{3, {1, T, F}, 0, 1},         {3, {1, T, DS_HD}, 0, 1}, {1, {DS_HD}, 1, 1},
                        {3, {1, T, DS_RD}, 1, 1},     {3, {1, T, DS_RD}, 1, 1},
                        {4, {1, T, DS_NH, DS_HD}, 0, 0}, {3, {1, T, DS_HD}, 0, 0}};
    /* q, kv, kv_norm_weight, cos, sin, query_out, kv_out */
    const spec *sp = regroup ? rg : qk;
    const int n = regroup ? 4 : 7;
    void *host[7];
    WGPUBuffer buf[7];
    double bytes = 0;
    for (int i = 0; i < n; ++i) {
        const ropekit_dtype dt = sp[i].f32 ? ROPEKIT_FLOAT32 : x;
        size_t cnt = 1;
        for (int k = 0; k < sp[i].rank; ++k) cnt *= (size_t)sp[i].shape[k];
        const size_t nb = cnt * ropekit_dtype_size(dt);
        host[i] = malloc(nb);
        if (sp[i].input) fill(host[i], dt, cnt);
        if (!regroup && i == 2) for (size_t k = 0; k < cnt; ++k) ((float *)host[i])[k] = 1.0f; /* weight */
        buf[i] = gbuf(nb, sp[i].input ? host[i] : NULL);
        a.g[i] = ropekit_webgpu_tensor_contiguous(buf[i], 0, dt, sp[i].rank, sp[i].shape);
        a.c[i] = ropekit_tensor_contiguous(host[i], dt, sp[i].rank, sp[i].shape);
        bytes += (double)nb;
    }
    /* the copies move the activations: x (regroup) or q (QKNorm, the kv row is 1/129 more) */
    const size_t act = (size_t)(T * F) * ropekit_dtype_size(x);
    row r = {name, x, (ropekit_dtype)0, ds_op, ds_cpu, &a, buf[0], regroup ? buf[3] : buf[5], act, bytes};
    run_row(&r);
    for (int i = 0; i < n; ++i) wgpuBufferRelease(buf[i]), free(host[i]);
}

int main(int argc, char **argv) {
    ropekit_webgpu_options opt = {ROPEKIT_WEBGPU_BACKEND_ANY, 0, 0, 0, 0, 1};
    int small = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            ++i;
            opt.backend = !strcmp(argv[i], "gl") ? ROPEKIT_WEBGPU_BACKEND_GL : ROPEKIT_WEBGPU_BACKEND_VULKAN;
        } else if (!strcmp(argv[i], "--small")) small = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-cpu")) g_no_cpu = 1; /* skip the CPU backend (its column reads 0) */
        else if (!strcmp(argv[i], "--no-f64")) opt.disable_f64 = 1; /* shader-f64 off: exact32 */
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i]; /* rotary, qknorm or regroup */
        else if (!strcmp(argv[i], "--wg") && i + 1 < argc) opt.workgroup_size = atoi(argv[++i]); /* power of 2 */
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) g_rows = argv[++i]; /* e.g. 1,2,5 (table order) */
        else if (!strcmp(argv[i], "--dtypes") && i + 1 < argc) g_dtypes = argv[++i]; /* QKNorm/regroup rows */
        else {
            fprintf(stderr, "usage: bench_webgpu [--backend vulkan|gl] [--small] [--reps N] [--no-cpu] "
                            "[--only rotary|qknorm|regroup] [--wg N] [--rows N,N,...] "
                            "[--dtypes float32,bfloat16,float16] [--no-f64]\n");
            return 2;
        }
    }
    const int rot_rows = !only || !strcmp(only, "rotary"), qk_rows = !only || !strcmp(only, "qknorm"),
              rg_rows = !only || !strcmp(only, "regroup");
    if (ropekit_webgpu_create(&opt, &g_ctx) != ROPEKIT_OK) {
        fprintf(stderr, "no adapter: %s\n", ropekit_webgpu_last_error());
        return 1;
    }
    printf("adapter: %s (shader-f16 %s, shader-f64 %s), CPU variant %s\n",
           ropekit_webgpu_adapter_name(g_ctx), ropekit_webgpu_has_f16(g_ctx) ? "on" : "off",
           ropekit_webgpu_has_f64(g_ctx) ? "on" : "off", ropekit_cpu_variant());
    const int64_t d = small ? 16 : 1;
    const ropekit_dtype F32 = ROPEKIT_FLOAT32, F16 = ROPEKIT_FLOAT16, BF = ROPEKIT_BFLOAT16;
    printf("timing: kernel = GPU timestamps of the compute passes (%s); wall = per call, host work "
           "and submission included\n", ropekit_webgpu_has_timestamps(g_ctx) ? "timestamp-query" : "unavailable");
    printf("\n| shape | x | tables | variant | kernel ms | GB/s | shader copy kernel ms | vs shader copy | "
           "wall ms | buffer copy wall ms | shader copy wall ms | wall vs faster copy | CPU ms | CPU / kernel |\n");
    printf("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    if (want_row() && rot_rows) bench_rotary("Llama-3-8B prefill S=8192/div, 32 heads x128", 1, 8192 / d, 32, 128, 128, 131072 / d, F32, F32, 0);
    if (want_row() && rot_rows) bench_rotary("same, float16 x and tables", 1, 8192 / d, 32, 128, 128, 131072 / d, F16, F16, 0);
    if (want_row() && rot_rows) bench_rotary("same, bfloat16 x, float32 tables", 1, 8192 / d, 32, 128, 128, 131072 / d, BF, F32, 0);
    if (want_row() && rot_rows) bench_rotary("Phi-2 partial R=32 of 80, S=4096/div, 32 heads", 1, 4096 / d, 32, 80, 32, 8192, F16, F16, 0);
    if (want_row() && rot_rows) bench_rotary("same, float32", 1, 4096 / d, 32, 80, 32, 8192, F32, F32, 0);
    if (want_row() && rot_rows) bench_rotary("decode B=64, 32 heads x128", 64, 1, 32, 128, 128, 131072 / d, F32, F32, 0);
    if (want_row() && rot_rows) bench_rotary("same, float16", 64, 1, 32, 128, 128, 131072 / d, F16, F16, 0);
    if (want_row() && rot_rows) bench_rotary("MRoPE Qwen2.5-VL-7B S=8192/div, 32 heads x128, [16,24,24]", 1, 8192 / d, 32, 128, 128, 131072 / d, F32, F32, 1);
    if (want_row() && rot_rows) bench_rotary("same, bfloat16 x, float32 tables", 1, 8192 / d, 32, 128, 128, 131072 / d, BF, F32, 1);
    if (want_row() && qk_rows) bench_ds("QKNorm DeepSeek-V4 2048/div tokens, 128 heads x512, rope 64, fp8", 2048 / d, F32, 0);
    if (want_row() && qk_rows) bench_ds("same, bfloat16", 2048 / d, BF, 0);
    if (want_row() && qk_rows) bench_ds("same, float16", 2048 / d, F16, 0);
    if (want_row() && rg_rows) bench_ds("InverseRotaryRegroup DeepSeek-V4 2048/div tokens, 8 groups", 2048 / d, F32, 1);
    if (want_row() && rg_rows) bench_ds("same, bfloat16", 2048 / d, BF, 1);
    ropekit_webgpu_destroy(g_ctx);
    return 0;
}
