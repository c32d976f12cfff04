/* bench_webgpu: the WebGPU operators on one adapter against two copies of the activation bytes
 * on the same adapter (copyBufferToBuffer, and a WGSL compute shader that copies 16 bytes per
 * invocation) and against the CPU backend on the same shape.
 *
 * Times are wall clock around `reps` submissions followed by one wait (the queue drains between
 * batches), median of 7 batches; bytes moved = x read + y written + table rows read once per
 * token; GB/s = bytes / time. The shapes are the CPU benchmark's (bench/bench_cpu.c), scaled
 * down with --small for software adapters.
 * Usage: bench_webgpu [--backend vulkan|gl] [--small] [--reps N] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ropekit_webgpu.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct shape {
    const char *name;
    int64_t B, S, Nq, H, R, P;
    ropekit_dtype x, t;
} shape;

static uint16_t f2h(float f) { /* values in [-1, 1): normal float16, truncation is fine here */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000, e = (u >> 23) & 0xff, m = u & 0x7fffff;
    if (e < 103) return (uint16_t)s;
    return (uint16_t)(s | ((e - 112) << 10) | (m >> 13));
}

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
} shader_copy;

static shader_copy shader_copy_make(WGPUDevice dev, WGPUBuffer src, WGPUBuffer dst, uint64_t bytes) {
    shader_copy c = {NULL, NULL, 0};
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
    return c;
}

static void shader_copy_submit(WGPUDevice dev, const shader_copy *c) {
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(dev, NULL);
    WGPUComputePassEncoder pass = wgpuCommandEncoderBeginComputePass(enc, NULL);
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

int main(int argc, char **argv) {
    ropekit_webgpu_options opt = {ROPEKIT_WEBGPU_BACKEND_ANY, 0, 0, 0, 0};
    int small = 0, reps = 20;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            ++i;
            opt.backend = !strcmp(argv[i], "gl") ? ROPEKIT_WEBGPU_BACKEND_GL : ROPEKIT_WEBGPU_BACKEND_VULKAN;
        } else if (!strcmp(argv[i], "--small")) small = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    }
    ropekit_webgpu *ctx;
    if (ropekit_webgpu_create(&opt, &ctx) != ROPEKIT_OK) {
        fprintf(stderr, "no adapter: %s\n", ropekit_webgpu_last_error());
        return 1;
    }
    printf("adapter: %s (shader-f16 %s, shader-f64 %s), CPU variant %s\n",
           ropekit_webgpu_adapter_name(ctx), ropekit_webgpu_has_f16(ctx) ? "on" : "off",
           ropekit_webgpu_has_f64(ctx) ? "on" : "off", ropekit_cpu_variant());
    const int64_t sdiv = small ? 16 : 1;
    shape shapes[] = {
        {"Llama-3-8B prefill S=8192/div, 32 heads x128", 1, 8192 / sdiv, 32, 128, 128, 131072 / sdiv, ROPEKIT_FLOAT32, ROPEKIT_FLOAT32},
        {"same, float16 x and tables", 1, 8192 / sdiv, 32, 128, 128, 131072 / sdiv, ROPEKIT_FLOAT16, ROPEKIT_FLOAT16},
        {"same, bfloat16 x, float32 tables", 1, 8192 / sdiv, 32, 128, 128, 131072 / sdiv, ROPEKIT_BFLOAT16, ROPEKIT_FLOAT32},
        {"Phi-2 partial R=32 of 80, S=4096/div, 32 heads", 1, 4096 / sdiv, 32, 80, 32, 8192, ROPEKIT_FLOAT16, ROPEKIT_FLOAT16},
        {"decode B=64, 32 heads x128", 64, 1, 32, 128, 128, 131072 / sdiv, ROPEKIT_FLOAT32, ROPEKIT_FLOAT32},
    };
    printf("\n| shape | x | tables | variant | WebGPU ms | GB/s | buffer copy ms | shader copy ms | vs faster copy | CPU ms | vs CPU |\n");
    printf("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k) {
        const shape *sh = &shapes[k];
        size_t xe = ropekit_dtype_size(sh->x), te = ropekit_dtype_size(sh->t);
        size_t nx = (size_t)(sh->B * sh->S * sh->Nq * sh->H), nt = (size_t)(sh->P * sh->R / 2);
        size_t ntok = (size_t)(sh->B * sh->S);
        void *hx = malloc(nx * xe), *hy = malloc(nx * xe), *hc = malloc(nt * te), *hs = malloc(nt * te);
        int64_t *pos = malloc(ntok * sizeof *pos);
        fill(hx, sh->x, nx), fill(hc, sh->t, nt), fill(hs, sh->t, nt);
        for (size_t i = 0; i < ntok; ++i) pos[i] = (int64_t)((i * 7919u) % (size_t)sh->P);
        WGPUBuffer bx, by, bc, bs;
        ropekit_webgpu_buffer_create(ctx, nx * xe, &bx);
        ropekit_webgpu_buffer_create(ctx, nx * xe, &by);
        ropekit_webgpu_buffer_create(ctx, nt * te, &bc);
        ropekit_webgpu_buffer_create(ctx, nt * te, &bs);
        ropekit_webgpu_write(ctx, bx, 0, hx, nx * xe);
        ropekit_webgpu_write(ctx, bc, 0, hc, nt * te);
        ropekit_webgpu_write(ctx, bs, 0, hs, nt * te);
        int64_t xs[3] = {sh->B, sh->S, sh->Nq * sh->H}, ts[2] = {sh->P, sh->R / 2}, ps[2] = {sh->B, sh->S};
        ropekit_webgpu_tensor gx = ropekit_webgpu_tensor_contiguous(bx, 0, sh->x, 3, xs);
        ropekit_webgpu_tensor gy = ropekit_webgpu_tensor_contiguous(by, 0, sh->x, 3, xs);
        ropekit_webgpu_tensor gc = ropekit_webgpu_tensor_contiguous(bc, 0, sh->t, 2, ts);
        ropekit_webgpu_tensor gs = ropekit_webgpu_tensor_contiguous(bs, 0, sh->t, 2, ts);
        ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
        ropekit_rotary_embedding_attrs at = {0, sh->R, sh->Nq, 0};
        const uint64_t copy_bytes = (nx * xe) & ~(size_t)15; /* whole vec4s */
        shader_copy sc = shader_copy_make(ropekit_webgpu_device(ctx), bx, by, copy_bytes);
        double t_op[7], t_cp[7], t_sc[7], t_cpu[7];
        int bad = 0;
        for (int b = 0; b < 8 && !bad; ++b) { /* batch 0 warms up (pipeline compile) */
            double t0 = now();
            for (int r = 0; r < reps; ++r)
                if (ropekit_webgpu_rotary_embedding(ctx, &gx, &gc, &gs, &ids, &at, &gy) != ROPEKIT_OK) bad = 1;
            ropekit_webgpu_wait(ctx);
            double t1 = now();
            for (int r = 0; r < reps; ++r) { /* the copy: one command buffer per repetition too */
                WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ropekit_webgpu_device(ctx), NULL);
                wgpuCommandEncoderCopyBufferToBuffer(enc, bx, 0, by, 0, (nx * xe + 3) & ~(size_t)3);
                WGPUCommandBuffer cmd = wgpuCommandEncoderFinish(enc, NULL);
                WGPUQueue q = wgpuDeviceGetQueue(ropekit_webgpu_device(ctx));
                wgpuQueueSubmit(q, 1, &cmd);
                wgpuQueueRelease(q);
                wgpuCommandBufferRelease(cmd);
                wgpuCommandEncoderRelease(enc);
            }
            ropekit_webgpu_wait(ctx);
            double t2 = now();
            for (int r = 0; r < reps; ++r) shader_copy_submit(ropekit_webgpu_device(ctx), &sc);
            ropekit_webgpu_wait(ctx);
            const double shader_copy_s = (now() - t2) * (double)(nx * xe) / (double)copy_bytes;
            t2 = now();
            ropekit_tensor cx = ropekit_tensor_contiguous(hx, sh->x, 3, xs);
            ropekit_tensor cy = ropekit_tensor_contiguous(hy, sh->x, 3, xs);
            ropekit_tensor cc = ropekit_tensor_contiguous(hc, sh->t, 2, ts);
            ropekit_tensor cs = ropekit_tensor_contiguous(hs, sh->t, 2, ts);
            ropekit_rotary_embedding(&cx, &cc, &cs, &ids, &at, &cy);
            double t3 = now();
            if (b > 0) {
                t_op[b - 1] = (t1 - t0) / reps;
                t_cp[b - 1] = (t2 - t1) / reps;
                t_sc[b - 1] = shader_copy_s / reps;
                t_cpu[b - 1] = t3 - t2;
            }
        }
        if (bad) {
            printf("| %s | %s | %s | error: %s |\n", sh->name, ropekit_dtype_name(sh->x),
                   ropekit_dtype_name(sh->t), ropekit_webgpu_last_error());
        } else {
            qsort(t_op, 7, sizeof(double), cmp_d);
            qsort(t_cp, 7, sizeof(double), cmp_d);
            qsort(t_sc, 7, sizeof(double), cmp_d);
            qsort(t_cpu, 7, sizeof(double), cmp_d);
            double bytes = 2.0 * (double)(nx * xe) + (double)ntok * (double)(sh->R * te) + (double)ntok * 8;
            double op = t_op[3], cp = t_cp[3], scp = t_sc[3], cpu = t_cpu[3];
            /* copy bandwidth counts read + write of the activation bytes, like the op */
            double best = cp < scp ? cp : scp;
            double ratio = (bytes / op) / (2.0 * (double)(nx * xe) / best);
            printf("| %s | %s | %s | %s | %.3f | %.1f | %.3f | %.3f | %.2f | %.3f | %.2fx |\n",
                   sh->name, ropekit_dtype_name(sh->x), ropekit_dtype_name(sh->t),
                   ropekit_webgpu_last_variant(ctx), op * 1e3, bytes / op / 1e9, cp * 1e3,
                   scp * 1e3, ratio, cpu * 1e3, cpu / op);
        }
        wgpuBindGroupRelease(sc.group), wgpuComputePipelineRelease(sc.pipeline);
        wgpuBufferRelease(bx), wgpuBufferRelease(by), wgpuBufferRelease(bc), wgpuBufferRelease(bs);
        free(hx), free(hy), free(hc), free(hs), free(pos);
    }
    ropekit_webgpu_destroy(ctx);
    return 0;
}
