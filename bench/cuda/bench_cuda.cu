// bench_cuda: libropekit_cuda on the benchmark shapes (bench/results-cuda.md), through the public
// API. Times with CUDA events (median of many launches; decode inside a CUDA graph), counts the
// bytes each call must move (x read + y written + the cos/sin rows and ids it reads), and compares
// with a device-to-device cudaMemcpy of the activation bytes measured in the same run. Prefill,
// QKNorm, regroup and the copy are timed on the GPU alone (the stream is held while the call is
// enqueued: median_us), with the call's host cost (validation + launch) in its own column; the
// decode rows keep the launch latency in the time (that is what they measure).
// Inputs are random (never zeros); positions random in a 131072-row table.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_timing.cuh"
#include "ropekit_cuda.h"

#define RK(call)                                                                               \
    do {                                                                                       \
        ropekit_status s_ = (call);                                                            \
        if (s_ != ROPEKIT_OK) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, ropekit_status_str(s_),     \
                    ropekit_cuda_last_error());                                                \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

static const long long TABLE_ROWS = 131072;
/* argv[1]: run only the rows whose "shape x/tables" contains it, or one of its '|'-separated
 * parts ("S=8192|QKNorm") */
static const char *g_only;
static bool skip(const char *name, ropekit_dtype T, ropekit_dtype TT) {
    if (!g_only) return false;
    char key[256];
    snprintf(key, sizeof key, "%s %s/%s", name, ropekit_dtype_name(T), TT ? ropekit_dtype_name(TT) : "-");
    for (const char *p = g_only;;) {
        const char *bar = strchr(p, '|');
        const size_t n = bar ? (size_t)(bar - p) : strlen(p);
        char part[256];
        snprintf(part, sizeof part, "%.*s", (int)(n < 255 ? n : 255), p);
        if (n && strstr(key, part)) return false;
        if (!bar) return true;
        p = bar + 1;
    }
}
static ropekit_cuda_error_state *g_err;

__device__ unsigned hash32(unsigned long long i, unsigned seed) {
    unsigned long long z = i * 0x9e3779b97f4a7c15ull + seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (unsigned)(z ^ (z >> 31));
}
__global__ void fill_kernel(void *p, int dt, size_t n, unsigned seed, float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = lo + (hi - lo) * (hash32(i, seed) >> 8) * (1.0f / 16777216.0f);
        if (dt == ROPEKIT_FLOAT32) ((float *)p)[i] = v;
        else if (dt == ROPEKIT_FLOAT16) ((unsigned short *)p)[i] = __half_as_ushort(__float2half_rn(v));
        else ((unsigned short *)p)[i] = (unsigned short)(__float_as_uint(v) >> 16);
    }
}
__global__ void ids_kernel(long long *p, size_t n, unsigned seed, long long rows) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash32(i, seed) % rows;
}

static unsigned g_seed = 12345;
static void *dalloc(size_t bytes) {
    void *p;
    CK(cudaMalloc(&p, bytes));
    return p;
}
static void *drand(ropekit_dtype dt, size_t n, float lo, float hi) {
    size_t es = ropekit_dtype_size(dt);
    void *p = dalloc(n * es);
    fill_kernel<<<1024, 256, 0, g_st>>>(p, dt, n, g_seed++, lo, hi);
    CK(cudaGetLastError());
    return p;
}
static long long *dids(size_t n, long long rows) {
    long long *p = (long long *)dalloc(n * 8);
    ids_kernel<<<256, 256, 0, g_st>>>(p, n, g_seed++, rows);
    CK(cudaGetLastError());
    return p;
}
static ropekit_tensor tv(void *d, ropekit_dtype dt, int rank, std::vector<long long> shape) {
    int64_t s[4] = {0, 0, 0, 0};
    for (int i = 0; i < rank; ++i) s[i] = shape[i];
    return ropekit_tensor_contiguous(d, dt, rank, s);
}

static double copy_us(size_t bytes) {
    void *a = dalloc(bytes), *b = dalloc(bytes);
    CK(cudaMemsetAsync(a, 1, bytes, g_st));
    double us = median_us([&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, g_st)); }, 30, true);
    CK(cudaFree(a));
    CK(cudaFree(b));
    return us;
}

static void row(const char *shape, ropekit_dtype T, ropekit_dtype TT, double us, double bytes,
                double cus, size_t xbytes, double host_us) {
    char host[32] = "";
    if (host_us >= 0) snprintf(host, sizeof host, "%.1f", host_us);
    printf("| %-44s | %-8s | %-8s | %9.2f | %8.1f | %6.2f | %9.2f | %5.1f%% | %6s |\n", shape,
           ropekit_dtype_name(T), TT ? ropekit_dtype_name(TT) : "-", us, bytes / 1e6,
           bytes / us / 1e6, cus, 100.0 * cus / us * (bytes / (2.0 * xbytes)), host);
    fflush(stdout);
}

// Rotary prefill/decode: x (B, S, N*H) -> y, or in place on a packed QKV buffer.
static void bench_rotary(const char *name, ropekit_dtype T, ropekit_dtype TT, long long B,
                         long long S, long long N, long long H, long long R, int op,
                         int decode_graph, int packed) {
    if (skip(name, T, TT)) return;
    const size_t es = ropekit_dtype_size(T), tes = ropekit_dtype_size(TT);
    const long long h = (R ? R : H) / 2, tokens = B * S;
    const long long E = packed ? 8 : 0;  // V heads beside q and k
    void *x = drand(T, (size_t)(tokens * (N + E) * H), -4, 4);
    void *y = packed ? x : dalloc((size_t)(tokens * N * H) * es);
    void *c = drand(TT, (size_t)(TABLE_ROWS * h), -1, 1), *s = drand(TT, (size_t)(TABLE_ROWS * h), -1, 1);
    long long *ids = dids((size_t)(op >= 2 ? 3 * tokens : tokens), TABLE_ROWS);
    int64_t xs[3] = {B, S, N * H}, xst[3] = {S * (N + E) * H, (N + E) * H, 1};
    ropekit_tensor xt = ropekit_tensor_contiguous(x, T, 3, xs);
    memcpy(xt.strides, xst, sizeof xst);
    ropekit_tensor yt = packed ? xt : ropekit_tensor_contiguous(y, T, 3, xs);
    ropekit_tensor ct = tv(c, TT, 2, {TABLE_ROWS, h}), st = tv(s, TT, 2, {TABLE_ROWS, h});
    ropekit_tensor it = op >= 2 ? tv(ids, ROPEKIT_INT64, 3, {3, B, S}) : tv(ids, ROPEKIT_INT64, 2, {B, S});
    auto call = [&] {
        if (op >= 2) { /* 2: Qwen2.5-VL sections [16, 24, 24]; 3: Qwen3-VL interleaved [24, 20, 20] */
            ropekit_mrotary_embedding_attrs a = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
            a.mrope_section[0] = 16, a.mrope_section[1] = 24, a.mrope_section[2] = 24;
            if (op == 3) a.mrope_section[0] = 24, a.mrope_section[1] = 20, a.mrope_section[2] = 20, a.mrope_layout = 1;
            a.num_heads = N;
            RK(ropekit_cuda_mrotary_embedding(&xt, &it, &ct, &st, &a, &yt, g_st, g_err));
        } else { /* 1: adjacent pairs (interleaved, GPT-J style) */
            ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
            a.num_heads = N, a.rotary_embedding_dim = R, a.interleaved = op == 1;
            RK(ropekit_cuda_rotary_embedding(&xt, &ct, &st, &it, &a, &yt, g_st, g_err));
        }
    };
    const size_t xbytes = (size_t)(tokens * N * H) * es;
    const double streams = op >= 2 ? 3 : 1;
    const double bytes = 2.0 * xbytes + tokens * (2.0 * h * tes + 8 * streams);
    double cus = copy_us(xbytes);
    if (decode_graph == 2) { /* the decode sweep: graph of 20 only */
        char nm[160];
        snprintf(nm, sizeof nm, "%s, graph of 20", name);
        row(nm, T, TT, graph_us(call, 20, 100), bytes, cus, xbytes, -1);
    } else if (decode_graph) {
        double us1 = graph_us(call, 1, 200), us20 = graph_us(call, 20, 100);
        double plain_host, plain = median_us(call, 200, false, &plain_host);
        char nm[160];
        snprintf(nm, sizeof nm, "%s, graph of 20", name);
        row(nm, T, TT, us20, bytes, cus, xbytes, -1);
        snprintf(nm, sizeof nm, "%s, graph of 1", name);
        row(nm, T, TT, us1, bytes, cus, xbytes, -1);
        snprintf(nm, sizeof nm, "%s, stream launch", name);
        row(nm, T, TT, plain, bytes, cus, xbytes, plain_host);
    } else {
        double host, us = median_us(call, 30, true, &host);
        row(name, T, TT, us, bytes, cus, xbytes, host);
    }
    int64_t cnt = 0;
    RK(ropekit_cuda_check_errors(g_err, g_st, &cnt));
    CK(cudaFree(x));
    if (!packed) CK(cudaFree(y));
    CK(cudaFree(c));
    CK(cudaFree(s));
    CK(cudaFree(ids));
}

static void bench_qknorm(const char *name, ropekit_dtype T, long long B, long long S, int graph, int fp8 = 1) {
    if (skip(name, T, (ropekit_dtype)0)) return;
    const long long nh = 128, hd = 512, rd = 64, tokens = B * S;
    const size_t es = ropekit_dtype_size(T);
    void *q = drand(T, (size_t)(tokens * nh * hd), -3, 3), *kv = drand(T, (size_t)(tokens * hd), -3, 3);
    void *qo = dalloc((size_t)(tokens * nh * hd) * es), *ko = dalloc((size_t)(tokens * hd) * es);
    void *w = drand(ROPEKIT_FLOAT32, (size_t)hd, 0.5f, 1.5f);
    void *c = drand(ROPEKIT_FLOAT32, (size_t)(tokens * rd), -1, 1), *s = drand(ROPEKIT_FLOAT32, (size_t)(tokens * rd), -1, 1);
    ropekit_tensor qt = tv(q, T, 3, {B, S, nh * hd}), kt = tv(kv, T, 3, {B, S, hd});
    ropekit_tensor qot = tv(qo, T, 4, {B, S, nh, hd}), kot = tv(ko, T, 3, {B, S, hd});
    ropekit_tensor wt = tv(w, ROPEKIT_FLOAT32, 1, {hd});
    ropekit_tensor ct = tv(c, ROPEKIT_FLOAT32, 3, {B, S, rd}), st = tv(s, ROPEKIT_FLOAT32, 3, {B, S, rd});
    ropekit_qknorm_rotary_embedding_attrs a = ROPEKIT_QKNORM_ROTARY_EMBEDDING_ATTRS_INIT;
    a.num_heads = nh, a.head_dim = hd, a.rope_head_dim = rd, a.simulate_fp8 = fp8;
    auto call = [&] { RK(ropekit_cuda_qknorm_rotary_embedding(&qt, &kt, &wt, &ct, &st, &a, &qot, &kot, g_st)); };
    const size_t xbytes = (size_t)(tokens * (nh + 1) * hd) * es;
    const double bytes = 2.0 * xbytes + tokens * 2.0 * rd * 4 + hd * 4;
    double cus = copy_us(xbytes);
    double host = -1, us = graph ? graph_us(call, 20, 100) : median_us(call, 30, true, &host);
    row(name, T, (ropekit_dtype)0, us, bytes, cus, xbytes, host);
    for (void *p : {q, kv, qo, ko, w, c, s}) CK(cudaFree(p));
}

static void bench_regroup(const char *name, ropekit_dtype T, long long N) {
    if (skip(name, T, (ropekit_dtype)0)) return;
    const long long nh = 128, hd = 512, rd = 64, G = 8, F = nh * hd;
    const size_t es = ropekit_dtype_size(T);
    void *x = drand(T, (size_t)(N * F), -4, 4), *o = dalloc((size_t)(N * F) * es);
    void *c = drand(ROPEKIT_FLOAT32, (size_t)(N * rd), -1, 1), *s = drand(ROPEKIT_FLOAT32, (size_t)(N * rd), -1, 1);
    ropekit_tensor xt = tv(x, T, 2, {N, F}), ot = tv(o, T, 3, {G, N, F / G});
    ropekit_tensor ct = tv(c, ROPEKIT_FLOAT32, 2, {N, rd}), st = tv(s, ROPEKIT_FLOAT32, 2, {N, rd});
    ropekit_inverse_rotary_regroup_attrs a = ROPEKIT_INVERSE_ROTARY_REGROUP_ATTRS_INIT;
    a.num_heads = nh, a.head_dim = hd, a.rope_head_dim = rd, a.num_groups = G;
    auto call = [&] { RK(ropekit_cuda_inverse_rotary_regroup(&xt, &ct, &st, &a, &ot, g_st)); };
    const size_t xbytes = (size_t)(N * F) * es;
    const double bytes = 2.0 * xbytes + N * 2.0 * rd * 4;
    double cus = copy_us(xbytes);
    double host, us = median_us(call, 30, true, &host);
    row(name, T, (ropekit_dtype)0, us, bytes, cus, xbytes, host);
    for (void *p : {x, o, c, s}) CK(cudaFree(p));
}

int main(int argc, char **argv) {
    if (argc > 1) g_only = argv[1];
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int drv = 0, rt = 0;
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    printf("GPU: %s, %d SMs, L2 %d MB; CUDA driver API %d, runtime %d\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, drv, rt);
    CK(cudaStreamCreateWithFlags(&g_st, cudaStreamNonBlocking));
    RK(ropekit_cuda_error_state_create(&g_err));
    printf("\n| shape | x | tables | time us | MB moved | TB/s | copy us | vs copy | host us |\n");
    printf("|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    const ropekit_dtype F32 = ROPEKIT_FLOAT32, F16 = ROPEKIT_FLOAT16, BF = ROPEKIT_BFLOAT16;
    const ropekit_dtype dts[3] = {F32, F16, BF};
    for (ropekit_dtype T : dts) {
        bench_rotary("Llama-3-8B prefill B=1 S=8192 32+8 x128", T, F32, 1, 8192, 40, 128, 0, 0, 0, 0);
        if (T != F32) bench_rotary("Llama-3-8B prefill B=1 S=8192 32+8 x128", T, T, 1, 8192, 40, 128, 0, 0, 0, 0);
    }
    bench_rotary("Llama prefill S=8192, in place packed QKV", BF, F32, 1, 8192, 40, 128, 0, 0, 0, 1);
    for (ropekit_dtype T : dts) {
        bench_rotary("Llama-3-8B prefill B=1 S=4096 32+8 x128", T, F32, 1, 4096, 40, 128, 0, 0, 0, 0);
        if (T != F32) bench_rotary("Llama-3-8B prefill B=1 S=4096 32+8 x128", T, T, 1, 4096, 40, 128, 0, 0, 0, 0);
    }
    for (ropekit_dtype T : dts) bench_rotary("Qwen3-0.6B prefill B=4 S=2048 16+8 x128", T, F32, 4, 2048, 24, 128, 0, 0, 0, 0);
    for (ropekit_dtype T : dts) {
        bench_rotary("Phi-2 partial B=1 S=8192 32+32 x80 R32", T, F32, 1, 8192, 64, 80, 32, 0, 0, 0);
        if (T != F32) bench_rotary("Phi-2 partial B=1 S=8192 32+32 x80 R32", T, T, 1, 8192, 64, 80, 32, 0, 0, 0);
    }
    for (ropekit_dtype T : dts) {
        bench_rotary("MRoPE Qwen2.5-VL-7B S=8192 28+4 x128", T, F32, 1, 8192, 32, 128, 0, 2, 0, 0);
        if (T != F32) bench_rotary("MRoPE Qwen2.5-VL-7B S=8192 28+4 x128", T, T, 1, 8192, 32, 128, 0, 2, 0, 0);
    }
    for (ropekit_dtype T : dts) bench_rotary("MRoPE interleaved Qwen3-VL-8B S=8192 32+8 x128", T, T, 1, 8192, 40, 128, 0, 3, 0, 0);
    for (long long B : {1LL, 64LL, 256LL})
        for (ropekit_dtype T : dts) {
            char nm[96];
            snprintf(nm, sizeof nm, "decode B=%lld S=1 32+8 x128", B);
            bench_rotary(nm, T, F32, B, 1, 40, 128, 0, 0, 1, 0);
        }
    /* the decode sweep (kernel choice on one-wave calls): B tokens of S=1, graph of 20 only,
     * tables in float32 and in x's dtype; Llama (32+8 x128), Qwen3 (16+8 x128), Phi-2 partial
     * rotary (32+32 x80 R32), adjacent pairs (the Llama shape, interleaved); B=1024 and 2048 are
     * more than one wave (the default there is the flat, tile or bulk kernel) */
    struct DecShape { const char *name; long long N, H, R; int op; };
    const DecShape dshapes[] = {{"dsweep Llama 32+8 x128", 40, 128, 0, 0},
                                {"dsweep Qwen3 16+8 x128", 24, 128, 0, 0},
                                {"dsweep Phi-2 32+32 x80 R32", 64, 80, 32, 0},
                                {"dsweep interleaved 32+8 x128", 40, 128, 0, 1}};
    for (const DecShape &d : dshapes)
        for (long long B : {1LL, 8LL, 32LL, 64LL, 128LL, 256LL, 512LL, 1024LL, 2048LL})
            for (ropekit_dtype T : dts)
                for (int tx = 0; tx < (T == F32 ? 1 : 2); ++tx) {
                    char nm[96];
                    snprintf(nm, sizeof nm, "%s B=%lld", d.name, B);
                    bench_rotary(nm, T, tx ? T : F32, B, 1, d.N, d.H, d.R, d.op, 2, 0);
                }
    for (ropekit_dtype T : dts) bench_qknorm("QKNorm DS-V4 2048 tok 128x512 rope64 fp8", T, 1, 2048, 0);
    for (ropekit_dtype T : dts) bench_qknorm("QKNorm DS-V4 2048 tok 128x512 rope64 no fp8", T, 1, 2048, 0, 0);
    for (ropekit_dtype T : dts) bench_qknorm("QKNorm DS-V4 decode 64 tok (graph of 20)", T, 64, 1, 1);
    for (ropekit_dtype T : dts) bench_regroup("Regroup DS-V4 2048 tok 128x512 rope64 g8", T, 2048);
    int64_t cnt = 0;
    RK(ropekit_cuda_check_errors(g_err, g_st, &cnt));
    printf("\nout-of-range ids counted during the benchmark: %lld\n", (long long)cnt);
    ropekit_cuda_error_state_destroy(g_err);
    return 0;
}
