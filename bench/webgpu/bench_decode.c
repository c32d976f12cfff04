/* bench_decode: the host path of one small WebGPU call (decode size), measured the way
 * bench_ort_webgpu.py measures onnxruntime's WebGPU EP: back-to-back calls, time per call =
 * wall clock of N calls plus the wait for the queue to go idle, divided by N (median of turns).
 *
 * Rows:
 *   op       ropekit_webgpu_rotary_embedding, decode B=64, S=1, 32 heads x128, ids2d
 *   op, new ids  the same calls with one position id changed before each call (the
 *            arguments differ from every earlier call's: a library that skips the upload of
 *            repeated arguments uploads them each time here)
 *   op+wait  the same call followed by ropekit_webgpu_wait each time (latency of one call)
 *   op, batch n   ropekit_webgpu_set_batch(ctx, n): n calls recorded per submission (libraries
 *            without set_batch: row left out)
 *   raw/...  the same steps done directly with webgpu.h on a trivial kernel, one step added per
 *            row, to see what each step costs on this adapter: empty submit; + compute pass;
 *            + 1 queue write (params); + 2 queue writes (params, ids); + error scopes (2 pushed,
 *            2 popped); + a new bind group per call; 8 dispatches per submission; and the
 *            uploads through a ring of 8 mapped MapWrite buffers copied in the call's encoder
 *            (re-mapped with mapAsync after the submission; a call finding none mapped falls
 *            back to the queue writes: counted).
 *   --float16: x and tables float16 (else float32). --op-only: the first row only, 8 calls of
 *   warm-up, and the process's CPU time per call (slow software adapters, whose threads'
 *   wall time moves with the machine's load). --raw-only: only the raw rows, with the process's
 *   CPU time per call beside each (a software adapter's host cost without ropekit's kernel).
 * --no-f64: shader-f64 off (the exact32 arithmetic, as on adapters without it).
 * Usage: bench_decode [--backend vulkan|gl] [--calls N] [--turns T] [--raw] [--raw-only] [--no-f64]
 *                     [--float16] [--op-only] */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <wgpu.h>

#include "bench_common.h"
#include "ropekit_webgpu.h"


/* CPU time of the process (all threads), seconds */
static double cpu_now(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static ropekit_webgpu *g_ctx;
static int g_calls = 2000, g_turns = 5, g_bad;
static ropekit_dtype g_dtype = ROPEKIT_FLOAT32;

/* ---- the operator ---- */
typedef struct dec {
    ropekit_webgpu_tensor gx, gy, gc, gs;
    ropekit_tensor ids;
} dec;

static void op_call(dec *d) {
    ropekit_rotary_embedding_attrs at = {0, 128, 32, 0};
    if (ropekit_webgpu_rotary_embedding(g_ctx, &d->gx, &d->gc, &d->gs, &d->ids, &at, &d->gy) != ROPEKIT_OK)
        g_bad = 1;
}

/* ---- raw webgpu.h steps ---- */
typedef struct raw {
    WGPUDevice dev;
    WGPUQueue q;
    WGPUComputePipeline pipe;
    WGPUBindGroupLayout bgl;
    WGPUBindGroup bg;
    WGPUBindGroupEntry e[3];
    WGPUBuffer uni, ids, out;
} raw;

static WGPUStringView sv(const char *s) { return (WGPUStringView){s, strlen(s)}; }

static void on_pop(WGPUPopErrorScopeStatus status, WGPUErrorType type, WGPUStringView message,
                   void *u1, void *u2) {
    (void)status, (void)type, (void)message, (void)u2;
    ++*(int *)u1;
}

enum { R_EMPTY, R_PASS, R_W1, R_W2, R_SCOPES, R_BG, R_BATCH8, R_RING, R_N };
static const char *raw_names[R_N] = {
    "raw: empty command buffer submitted", "raw: + compute pass (1 dispatch, cached bind group)",
    "raw: + 1 queue write (144 B params)", "raw: + 2 queue writes (params, 256 B ids)",
    "raw: + error scopes (2 pushed, 2 popped)", "raw: + new bind group per call",
    "raw: as '+ 2 queue writes', 8 dispatches per submission",
    "raw: as '+ error scopes', uploads through a ring of mapped buffers + 2 copies"};

/* raw ring: upload buffers (MapWrite | CopySrc) mapped again after each submission */
enum { RING = 8 };
static WGPUBuffer g_ring[RING];
static int g_ring_state[RING]; /* 1 mapped, 0 busy */
static long g_ring_fallbacks;

static void on_ring_map(WGPUMapAsyncStatus status, WGPUStringView message, void *u1, void *u2) {
    (void)message, (void)u2;
    *(int *)u1 = status == WGPUMapAsyncStatus_Success;
}

static void raw_call(raw *r, int mode, int i) {
    static uint32_t prm[36], idv[64];
    prm[0] = (uint32_t)i;
    idv[0] = (uint32_t)i;
    int popped = 0;
    if (mode >= R_SCOPES && mode != R_BATCH8) {
        wgpuDevicePushErrorScope(r->dev, WGPUErrorFilter_Validation);
        wgpuDevicePushErrorScope(r->dev, WGPUErrorFilter_OutOfMemory);
    }
    int ring = -1;
    if (mode == R_RING)
        for (int k = 0; k < RING && ring < 0; ++k)
            if (g_ring_state[(i + k) % RING]) ring = (i + k) % RING;
    if (mode == R_RING && ring < 0) g_ring_fallbacks++;
    if (mode >= R_W1 && ring < 0) wgpuQueueWriteBuffer(r->q, r->uni, 0, prm, sizeof prm);
    if (mode >= R_W2 && ring < 0) wgpuQueueWriteBuffer(r->q, r->ids, 0, idv, sizeof idv);
    WGPUBindGroup bg = r->bg;
    if (mode == R_BG) {
        WGPUBindGroupDescriptor bd = {NULL, sv("b"), r->bgl, 3, r->e};
        bg = wgpuDeviceCreateBindGroup(r->dev, &bd);
    }
    static WGPUCommandEncoder enc;
    if (mode != R_BATCH8 || i % 8 == 0) enc = wgpuDeviceCreateCommandEncoder(r->dev, NULL);
    if (ring >= 0) {
        unsigned char *p = wgpuBufferGetMappedRange(g_ring[ring], 0, 512);
        memcpy(p, prm, sizeof prm);
        memcpy(p + 256, idv, sizeof idv);
        wgpuBufferUnmap(g_ring[ring]);
        g_ring_state[ring] = 0;
        wgpuCommandEncoderCopyBufferToBuffer(enc, g_ring[ring], 0, r->uni, 0, sizeof prm);
        wgpuCommandEncoderCopyBufferToBuffer(enc, g_ring[ring], 256, r->ids, 0, sizeof idv);
    }
    if (mode >= R_PASS) {
        WGPUComputePassDescriptor pd = {NULL, sv("p"), NULL};
        WGPUComputePassEncoder pass = wgpuCommandEncoderBeginComputePass(enc, &pd);
        wgpuComputePassEncoderSetPipeline(pass, r->pipe);
        wgpuComputePassEncoderSetBindGroup(pass, 0, bg, 0, NULL);
        wgpuComputePassEncoderDispatchWorkgroups(pass, 1, 1, 1);
        wgpuComputePassEncoderEnd(pass);
        wgpuComputePassEncoderRelease(pass);
    }
    if (mode != R_BATCH8 || i % 8 == 7) {
        WGPUCommandBuffer cmd = wgpuCommandEncoderFinish(enc, NULL);
        wgpuQueueSubmit(r->q, 1, &cmd);
        wgpuCommandBufferRelease(cmd);
        wgpuCommandEncoderRelease(enc);
    }
    if (ring >= 0) {
        WGPUBufferMapCallbackInfo cb = {NULL, WGPUCallbackMode_AllowProcessEvents, on_ring_map,
                                        &g_ring_state[ring], NULL};
        wgpuBufferMapAsync(g_ring[ring], WGPUMapMode_Write, 0, 512, cb);
    }
    if (mode == R_BG) wgpuBindGroupRelease(bg);
    if (mode >= R_SCOPES && mode != R_BATCH8) {
        for (int k = 0; k < 2; ++k) {
            WGPUPopErrorScopeCallbackInfo cb = {NULL, WGPUCallbackMode_AllowProcessEvents, on_pop,
                                                &popped, NULL};
            wgpuDevicePopErrorScope(r->dev, cb);
        }
        for (int s = 0; popped < 2 && s < 1000; ++s) wgpuDevicePoll(r->dev, 0, NULL);
    }
}

static int raw_make(raw *r) {
    r->dev = ropekit_webgpu_device(g_ctx);
    r->q = wgpuDeviceGetQueue(r->dev);
    static const char src[] =
        "struct P { v: array<vec4<u32>, 9> }\n"
        "@group(0) @binding(0) var<uniform> prm: P;\n"
        "@group(0) @binding(1) var<storage, read> ids: array<u32>;\n"
        "@group(0) @binding(2) var<storage, read_write> out_: array<u32>;\n"
        "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
        "    out_[g.x] = prm.v[0].x + ids[g.x];\n"
        "}\n";
    WGPUShaderSourceWGSL w;
    memset(&w, 0, sizeof w);
    w.chain.sType = WGPUSType_ShaderSourceWGSL;
    w.code = sv(src);
    WGPUShaderModuleDescriptor md = {&w.chain, sv("raw")};
    WGPUShaderModule mod = wgpuDeviceCreateShaderModule(r->dev, &md);
    WGPUBufferDescriptor bd = {NULL, sv("u"), WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst, 256, 0};
    r->uni = wgpuDeviceCreateBuffer(r->dev, &bd);
    bd.usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst;
    r->ids = wgpuDeviceCreateBuffer(r->dev, &bd);
    r->out = wgpuDeviceCreateBuffer(r->dev, &bd);
    WGPUBufferDescriptor rd = {NULL, sv("ring"), WGPUBufferUsage_MapWrite | WGPUBufferUsage_CopySrc, 512, 1};
    for (int k = 0; k < RING; ++k) {
        g_ring[k] = wgpuDeviceCreateBuffer(r->dev, &rd);
        g_ring_state[k] = 1;
    }
    WGPUComputePipelineDescriptor pd;
    memset(&pd, 0, sizeof pd);
    pd.compute.module = mod;
    pd.compute.entryPoint = sv("main");
    r->pipe = wgpuDeviceCreateComputePipeline(r->dev, &pd); /* auto layout */
    wgpuShaderModuleRelease(mod);
    if (!r->pipe || !r->uni || !r->ids || !r->out) return 0;
    r->bgl = wgpuComputePipelineGetBindGroupLayout(r->pipe, 0);
    memset(r->e, 0, sizeof r->e);
    WGPUBuffer b[3] = {r->uni, r->ids, r->out};
    for (int i = 0; i < 3; ++i) {
        r->e[i].binding = (uint32_t)i;
        r->e[i].buffer = b[i];
        r->e[i].size = i == 0 ? 144 : 256;
    }
    WGPUBindGroupDescriptor gd = {NULL, sv("b"), r->bgl, 3, r->e};
    r->bg = wgpuDeviceCreateBindGroup(r->dev, &gd);
    return r->bg != NULL;
}

static void report(const char *name, double *t) {
    qsort(t, (size_t)g_turns, sizeof(double), cmp_d);
    printf("| %s | %.2f | %.2f | %.2f |\n", name, t[g_turns / 2] * 1e6, t[0] * 1e6,
           t[g_turns - 1] * 1e6);
    fflush(stdout);
}

int main(int argc, char **argv) {
    ropekit_webgpu_options opt = {ROPEKIT_WEBGPU_BACKEND_ANY, 0, 0, 0, 0, 0};
    int do_raw = 0, op_only = 0, raw_only = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            ++i;
            opt.backend = !strcmp(argv[i], "gl") ? ROPEKIT_WEBGPU_BACKEND_GL : ROPEKIT_WEBGPU_BACKEND_VULKAN;
        } else if (!strcmp(argv[i], "--calls") && i + 1 < argc) g_calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--turns") && i + 1 < argc) g_turns = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--raw")) do_raw = 1;
        else if (!strcmp(argv[i], "--raw-only")) do_raw = raw_only = 1;
        else if (!strcmp(argv[i], "--float16")) g_dtype = ROPEKIT_FLOAT16;
        else if (!strcmp(argv[i], "--no-f64")) opt.disable_f64 = 1; /* the exact32 arithmetic */
        else if (!strcmp(argv[i], "--op-only")) op_only = 1;
    }
    if (g_calls < 8 || g_turns < 1 || g_turns > 64) {
        fprintf(stderr, "usage: bench_decode [--backend vulkan|gl] [--calls N>=8] [--turns 1..64] [--raw] [--raw-only] [--float16] [--op-only]\n");
        return 2;
    }
    if (ropekit_webgpu_create(&opt, &g_ctx) != ROPEKIT_OK) {
        fprintf(stderr, "no adapter: %s\n", ropekit_webgpu_last_error());
        return 1;
    }
    printf("adapter: %s; %s; %d calls per turn, %d turns; us per call (median, min, max of turns)\n\n",
           ropekit_webgpu_adapter_name(g_ctx), g_dtype == ROPEKIT_FLOAT16 ? "float16" : "float32",
           g_calls, g_turns);
    printf("| row | us per call | min | max |\n|---|---:|---:|---:|\n");
    /* decode B=64, 32 heads x128, float32, tables of 4096 rows */
    const int64_t B = 64, N = 32, H = 128, P = 131072; /* bench_ort_webgpu.py's decode shape */
    const size_t nx = (size_t)(B * N * H), nt = (size_t)(P * H / 2);
    const size_t es = g_dtype == ROPEKIT_FLOAT16 ? 2 : 4;
    float *hx = malloc(nx * 4), *hc = malloc(nt * 4);
    int64_t *pos = malloc((size_t)B * sizeof *pos);
    for (size_t i = 0; i < nx; ++i) hx[i] = (float)((i * 2654435761u) % 2000u) / 1000.0f - 1.0f;
    for (size_t i = 0; i < nt; ++i) hc[i] = (float)((i * 40503u) % 2000u) / 1000.0f - 1.0f;
    if (es == 2) { /* float16 in place: the first half of each array */
        uint16_t *px = (uint16_t *)(void *)hx, *pc = (uint16_t *)(void *)hc;
        for (size_t i = 0; i < nx; ++i) px[i] = f2h(hx[i]);
        for (size_t i = 0; i < nt; ++i) pc[i] = f2h(hc[i]);
    }
    for (int64_t b = 0; b < B; ++b) pos[b] = (b * 7919) % P;
    WGPUBuffer bx, by, bc, bs;
    if (ropekit_webgpu_buffer_create(g_ctx, nx * es, &bx) || ropekit_webgpu_buffer_create(g_ctx, nx * es, &by) ||
        ropekit_webgpu_buffer_create(g_ctx, nt * es, &bc) || ropekit_webgpu_buffer_create(g_ctx, nt * es, &bs) ||
        ropekit_webgpu_write(g_ctx, bx, 0, hx, nx * es) || ropekit_webgpu_write(g_ctx, bc, 0, hc, nt * es) ||
        ropekit_webgpu_write(g_ctx, bs, 0, hc, nt * es)) {
        fprintf(stderr, "buffers: %s\n", ropekit_webgpu_last_error());
        return 1;
    }
    int64_t xs[3] = {B, 1, N * H}, ts[2] = {P, H / 2}, ps[2] = {B, 1};
    dec d;
    d.gx = ropekit_webgpu_tensor_contiguous(bx, 0, g_dtype, 3, xs);
    d.gy = ropekit_webgpu_tensor_contiguous(by, 0, g_dtype, 3, xs);
    d.gc = ropekit_webgpu_tensor_contiguous(bc, 0, g_dtype, 2, ts);
    d.gs = ropekit_webgpu_tensor_contiguous(bs, 0, g_dtype, 2, ts);
    d.ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
    double t[64];
    if (raw_only) goto raw_rows;
    for (int w = 0; w < 2; ++w) { /* warm up; then the rows, turns alternated */
        for (int i = 0; i < (op_only ? 4 : 200); ++i) op_call(&d);
        ropekit_webgpu_wait(g_ctx);
    }
    if (g_bad) {
        fprintf(stderr, "call failed: %s\n", ropekit_webgpu_last_error());
        return 1;
    }
    printf("| variant: %s | | | |\n", ropekit_webgpu_last_variant(g_ctx));
    double cpu[64];
    for (int k = 0; k < g_turns; ++k) {
        double t0 = now_s(), c0 = cpu_now();
        for (int i = 0; i < g_calls; ++i) op_call(&d);
        ropekit_webgpu_wait(g_ctx);
        t[k] = (now_s() - t0) / g_calls;
        cpu[k] = (cpu_now() - c0) / g_calls;
    }
    report("op: back-to-back calls", t);
    if (!op_only) {
        const int64_t p0 = pos[0];
        for (int k = 0; k < g_turns; ++k) {
            double t0 = now_s();
            for (int i = 0; i < g_calls; ++i) {
                pos[0] = (p0 + 1 + i) % P; /* a new id each call (never the one before) */
                op_call(&d);
            }
            ropekit_webgpu_wait(g_ctx);
            t[k] = (now_s() - t0) / g_calls;
        }
        pos[0] = p0;
        report("op, new ids: back-to-back calls, one id changed before each", t);
    }
    if (op_only) { /* a software adapter's threads: CPU time per call moves less with load */
        report("op: process CPU time per call (user + system, all threads)", cpu);
        ropekit_webgpu_destroy(g_ctx);
        free(hx), free(hc), free(pos);
        return g_bad;
    }
    for (int k = 0; k < g_turns; ++k) {
        double t0 = now_s();
        for (int i = 0; i < g_calls / 4; ++i) {
            op_call(&d);
            ropekit_webgpu_wait(g_ctx);
        }
        t[k] = (now_s() - t0) / (g_calls / 4);
    }
    report("op+wait: each call waited for", t);
    typedef ropekit_status (*set_batch_fn)(ropekit_webgpu *, int);
    set_batch_fn set_batch = (set_batch_fn)dlsym(RTLD_DEFAULT, "ropekit_webgpu_set_batch");
    static const int batches[3] = {4, 16, 64};
    for (int j = 0; j < 3 && set_batch; ++j) {
        if (set_batch(g_ctx, batches[j]) != ROPEKIT_OK) {
            fprintf(stderr, "set_batch: %s\n", ropekit_webgpu_last_error());
            return 1;
        }
        for (int i = 0; i < 200; ++i) op_call(&d);
        ropekit_webgpu_wait(g_ctx);
        for (int k = 0; k < g_turns; ++k) {
            double t0 = now_s();
            for (int i = 0; i < g_calls; ++i) op_call(&d);
            ropekit_webgpu_wait(g_ctx);
            t[k] = (now_s() - t0) / g_calls;
        }
        char name[64];
        snprintf(name, sizeof name, "op, batch %d: back-to-back calls", batches[j]);
        report(name, t);
    }
    if (set_batch) set_batch(g_ctx, 0);
    if (g_bad) {
        fprintf(stderr, "call failed: %s\n", ropekit_webgpu_last_error());
        return 1;
    }
raw_rows:
    if (do_raw) {
        raw r;
        if (!raw_make(&r)) {
            fprintf(stderr, "raw setup failed\n");
            return 1;
        }
        static double tr[R_N][64], cr[R_N][64];
        for (int k = 0; k < g_turns; ++k)
            for (int m = 0; m < R_N; ++m) {
                for (int i = 0; i < 64; ++i) raw_call(&r, m, i);
                ropekit_webgpu_wait(g_ctx);
                double t0 = now_s(), c0 = cpu_now();
                for (int i = 0; i < g_calls; ++i) raw_call(&r, m, i);
                ropekit_webgpu_wait(g_ctx);
                tr[m][k] = (now_s() - t0) / g_calls;
                cr[m][k] = (cpu_now() - c0) / g_calls;
            }
        for (int m = 0; m < R_N; ++m) report(raw_names[m], tr[m]);
        if (raw_only)
            for (int m = 0; m < R_N; ++m) {
                char name[160];
                snprintf(name, sizeof name, "%s: process CPU time per call", raw_names[m]);
                report(name, cr[m]);
            }
        printf("| raw ring: calls without a mapped buffer (queue writes instead) | %ld | | |\n",
               g_ring_fallbacks);
    }
    ropekit_webgpu_destroy(g_ctx);
    free(hx), free(hc), free(pos);
    return 0;
}
