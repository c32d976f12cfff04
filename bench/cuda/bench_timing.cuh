// bench_timing.cuh: the timing code of the CUDA benchmark programs (bench_cuda.cu,
// bench_flashinfer.cu), one copy for both: the CUDA error check CK, the stream every timed call
// runs on (g_st), hold_stream, wall_us, median_us (GPU time between two events, optionally with
// the stream held while the call is enqueued) and graph_us (per-launch time inside a CUDA graph).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(call)                                                                               \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));        \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

static cudaStream_t g_st;

// Holds the stream for `ns` nanoseconds of GPU time, so that the work enqueued after it is
// already queued when the GPU reaches it (the host's validation and launch cost then stays out
// of the events' interval; nvbench's "blocking kernel" idea, done with a timed spin).
__global__ void hold_stream(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

static double wall_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median GPU time of f() between two events on g_st. queued: the stream is held (hold_stream)
// while f is enqueued, so the time is the GPU's alone; otherwise the GPU idles while the host
// validates and launches, and that latency is in the time (decode-style rows). host_us
// (optional): median wall time of the f() call itself on the host (validation + launch, the
// API's host cost).
template <typename F> static double median_us(F f, int reps, bool queued = false, double *host_us = nullptr) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    double host_max = 0;
    for (int i = 0; i < 3; ++i) {
        const double h0 = wall_us();
        f();
        host_max = std::max(host_max, wall_us() - h0);
    }
    const unsigned long long hold_ns = (unsigned long long)(1000.0 * (30.0 + 4.0 * host_max));
    std::vector<float> t;
    std::vector<double> h;
    for (int i = 0; i < reps; ++i) {
        if (queued) hold_stream<<<1, 1, 0, g_st>>>(hold_ns);
        CK(cudaEventRecord(a, g_st));
        const double h0 = wall_us();
        f();
        h.push_back(wall_us() - h0);
        CK(cudaEventRecord(b, g_st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0f);
    }
    std::sort(t.begin(), t.end());
    std::sort(h.begin(), h.end());
    if (host_us) *host_us = h[h.size() / 2];
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return t[t.size() / 2];
}

// Per-launch time inside a CUDA graph of `k` launches of f (graph launch overhead amortised).
template <typename F> static double graph_us(F f, int k, int reps) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(g_st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < k; ++i) f();
    CK(cudaStreamEndCapture(g_st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    double us = median_us([&] { CK(cudaGraphLaunch(ge, g_st)); }, reps) / k;
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return us;
}
