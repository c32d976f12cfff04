// bench_flashinfer: FlashInfer's cos/sin-cache RoPE (the kernel behind its
// apply_rope_with_cos_sin_cache, what vLLM and SGLang call; bench/cuda/fi_rope.cu) next to
// libropekit_cuda's ropekit_cuda_rotary_embedding on the same inputs in the same process.
// Build: bench/cuda/build_flashinfer.sh (downloads the flashinfer-python wheel from PyPI, builds
// fi_rope.cu with FlashInfer's own JIT flags and links this file with libropekit_cuda).
//
// Timing as bench_cuda.cu (one copy: bench_timing.cuh): GPU time between CUDA events while a one-thread kernel holds the
// stream (the host's launch cost stays out), median of 30 calls after 3 warm-ups; a
// device-to-device cudaMemcpyAsync of the activation bytes timed the same way; "vs copy" =
// (MB moved / time) / (copy bandwidth), MB moved = x read + y written + a cache row (R float32)
// and an int64 id per token. Three rounds per row, FlashInfer and ropekit alternating (the order
// flips each round), each round with its own copy time. Decode rows: a CUDA graph of 20 calls.
//
// Same work on both sides: x (tokens, Nq + Nk heads, H) in float16 or bfloat16 (FlashInfer's API
// takes no other x dtype), the q heads then the k heads of each token (FlashInfer: q = x,
// k = x + Nq*H, both with token stride (Nq+Nk)*H; ropekit: one rank-3 x with num_heads = Nq+Nk),
// out of place, half-split pairs (FlashInfer is_neox = True), positions random in a 131072-row
// table of real RoPE angles (cos, sin of p * theta^(-2i/R) in double, rounded to float32): ropekit
// gets the float32 cos and sin tables (P, R/2), FlashInfer the same values as its float32 cache
// (P, R) = [cos | sin] (it requires float32). Partial rotary: R < H, channels [R, H) pass through.
//
// Agreement: both outputs and the CPU library's (libropekit ropekit_rotary_embedding, the
// reference ropekit's CUDA library is bit-exact to) on the same inputs; per element the distance
// in units in the last place of the output dtype (|ordered bits difference|), max and histogram.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_timing.cuh"
#include "fi_rope.h"
#include "ropekit.h"
#include "ropekit_cuda.h"

#define RK(call)                                                                                   \
    do {                                                                                           \
        ropekit_status s_ = (call);                                                                \
        if (s_ != ROPEKIT_OK) {                                                                    \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, ropekit_status_str(s_));            \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)
#define FI(call)                                                                                   \
    do {                                                                                           \
        int e_ = (call);                                                                           \
        if (e_ != 0) {                                                                             \
            fprintf(stderr, "%s:%d: FlashInfer call failed (%d)\n", __FILE__, __LINE__, e_);       \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

static const long long TABLE_ROWS = 131072;
static ropekit_cuda_error_state *g_err;

__device__ unsigned hash32(unsigned long long i, unsigned seed) {
    unsigned long long z = i * 0x9e3779b97f4a7c15ull + seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (unsigned)(z ^ (z >> 31));
}
__global__ void fill_kernel(unsigned short *p, int bf, size_t n, unsigned seed, float lo,
                            float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = lo + (hi - lo) * (hash32(i, seed) >> 8) * (1.0f / 16777216.0f);
        p[i] = bf ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                  : __half_as_ushort(__float2half_rn(v));
    }
}
__global__ void ids_kernel(long long *p, size_t n, unsigned seed, long long rows) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash32(i, seed) % rows;
}
// cos/sin of p * theta^(-2i/R), i < R/2, in double, rounded to float32
__global__ void table_kernel(float *c, float *s, long long rows, int h, double theta) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)rows * h;
         i += (size_t)gridDim.x * blockDim.x) {
        const long long p = (long long)(i / h);
        const int j = (int)(i % h);
        const double a = (double)p * pow(theta, -2.0 * j / (2.0 * h));
        c[i] = (float)cos(a);
        s[i] = (float)sin(a);
    }
}
static void *dalloc(size_t bytes) {
    void *p;
    CK(cudaMalloc(&p, bytes));
    return p;
}

// distance in ulps of two 16-bit floats of the same format (sign-magnitude ordering)
static long ulps16(unsigned short a, unsigned short b) {
    const long oa = (a & 0x8000) ? -(long)(a & 0x7fff) : (long)a;
    const long ob = (b & 0x8000) ? -(long)(b & 0x7fff) : (long)b;
    return labs(oa - ob);
}
static double val16(unsigned short v, int bf) {
    if (bf) {
        unsigned u = (unsigned)v << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    return (double)__half2float(__ushort_as_half(v));
}
struct Agree {
    long max_ulp = 0, n = 0, n_diff = 0, hist[4] = {0, 0, 0, 0}; // 0, 1, 2, >2 ulps
    double max_abs = 0;
    size_t worst = 0; // an element with the largest ulp distance
};
static Agree compare(const std::vector<unsigned short> &a, const std::vector<unsigned short> &ref,
                     int bf) {
    Agree g;
    g.n = (long)a.size();
    for (size_t i = 0; i < a.size(); ++i) {
        const long u = ulps16(a[i], ref[i]);
        g.hist[u > 2 ? 3 : u]++;
        if (u) {
            g.n_diff++;
            if (u > g.max_ulp) g.max_ulp = u, g.worst = i;
            g.max_abs = std::max(g.max_abs, fabs(val16(a[i], bf) - val16(ref[i], bf)));
        }
    }
    return g;
}

struct Shape {
    const char *name;
    long long B, S, Nq, Nk, H, R;
    double theta;
    bool decode;
    bool packed; // in place on a packed QKV buffer (8 V heads after q and k; vLLM's in-place call)
};

static void bench(const Shape &sh, int bf, FILE *agree_out) {
    const ropekit_dtype T = bf ? ROPEKIT_BFLOAT16 : ROPEKIT_FLOAT16;
    const long long tokens = sh.B * sh.S, N = sh.Nq + sh.Nk, R = sh.R ? sh.R : sh.H, h = R / 2;
    const long long E = sh.packed ? 8 : 0, W = (N + E) * sh.H;    // W: elements per token of x
    const size_t n = (size_t)(tokens * N * sh.H), xbytes = n * 2; // the rotated heads' bytes
    unsigned short *x = (unsigned short *)dalloc((size_t)(tokens * W) * 2);
    unsigned short *yf = sh.packed ? x : (unsigned short *)dalloc(xbytes);
    unsigned short *yr = sh.packed ? x : (unsigned short *)dalloc(xbytes);
    float *c = (float *)dalloc((size_t)(TABLE_ROWS * h) * 4),
          *s = (float *)dalloc((size_t)(TABLE_ROWS * h) * 4);
    float *cache = (float *)dalloc((size_t)(TABLE_ROWS * R) * 4);
    long long *ids = (long long *)dalloc((size_t)tokens * 8);
    fill_kernel<<<1024, 256, 0, g_st>>>(x, bf, (size_t)(tokens * W), 777u + (unsigned)tokens, -4,
                                        4);
    ids_kernel<<<256, 256, 0, g_st>>>(ids, (size_t)tokens, 4242u, TABLE_ROWS);
    table_kernel<<<1024, 256, 0, g_st>>>(c, s, TABLE_ROWS, (int)h, sh.theta);
    CK(cudaGetLastError());
    CK(cudaMemcpy2DAsync(cache, R * 4, c, h * 4, h * 4, TABLE_ROWS, cudaMemcpyDeviceToDevice,
                         g_st));
    CK(cudaMemcpy2DAsync(cache + h, R * 4, s, h * 4, h * 4, TABLE_ROWS, cudaMemcpyDeviceToDevice,
                         g_st));
    if (!sh.packed) {
        CK(cudaMemsetAsync(yf, 0xff, xbytes, g_st));
        CK(cudaMemsetAsync(yr, 0xff, xbytes, g_st));
    }

    fi_rope_call fc;
    fc.dtype = bf ? FI_BFLOAT16 : FI_FLOAT16;
    fc.x = x, fc.y = yf, fc.cos_sin_cache = cache, fc.pos_ids = (int64_t *)ids;
    fc.nnz = (uint32_t)tokens, fc.num_q_heads = (uint32_t)sh.Nq, fc.num_k_heads = (uint32_t)sh.Nk;
    fc.rotary_dim = (uint32_t)R, fc.head_dim = (uint32_t)sh.H;
    fc.x_stride_token = fc.y_stride_token = (size_t)W;
    fi_rope_plan plan;
    FI(fi_rope_plan_of(&fc, &plan));
    auto fi_call = [&] { FI(fi_rope_apply(&fc, g_st)); };

    const int64_t xs[3] = {sh.B, sh.S, N * sh.H}, ts[2] = {TABLE_ROWS, h}, is[2] = {sh.B, sh.S};
    ropekit_tensor xt = ropekit_tensor_contiguous(x, T, 3, xs),
                   yt = ropekit_tensor_contiguous(yr, T, 3, xs);
    if (sh.packed) {
        const int64_t pst[3] = {sh.S * W, W, 1};
        memcpy(xt.strides, pst, sizeof pst);
        yt = xt;
    }
    ropekit_tensor ct = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 2, ts);
    ropekit_tensor st = ropekit_tensor_contiguous(s, ROPEKIT_FLOAT32, 2, ts);
    ropekit_tensor it = ropekit_tensor_contiguous(ids, ROPEKIT_INT64, 2, is);
    ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
    a.num_heads = N, a.rotary_embedding_dim = sh.R;
    auto rk_call = [&] {
        RK(ropekit_cuda_rotary_embedding(&xt, &ct, &st, &it, &a, &yt, g_st, g_err));
    };

    // agreement first (one call each into 0xff-filled outputs; out-of-place rows), then timing
    if (!sh.packed) {
        fi_call();
        rk_call();
        CK(cudaStreamSynchronize(g_st));
        std::vector<unsigned short> hx(n), hf(n), hr(n), hc(n), ho(n);
        std::vector<float> hscale(n); // max |product| of each output's sum (0: pass-through)
        CK(cudaMemcpy(hx.data(), x, xbytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hf.data(), yf, xbytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hr.data(), yr, xbytes, cudaMemcpyDeviceToHost));
        {
            std::vector<float> hcos((size_t)(TABLE_ROWS * h)), hsin(hcos.size());
            std::vector<long long> hids((size_t)tokens);
            CK(cudaMemcpy(hcos.data(), c, hcos.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hsin.data(), s, hsin.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hids.data(), ids, hids.size() * 8, cudaMemcpyDeviceToHost));
            ropekit_tensor xh = ropekit_tensor_contiguous(hx.data(), T, 3, xs),
                           yh = ropekit_tensor_contiguous(hc.data(), T, 3, xs);
            ropekit_tensor ch = ropekit_tensor_contiguous(hcos.data(), ROPEKIT_FLOAT32, 2, ts);
            ropekit_tensor sh2 = ropekit_tensor_contiguous(hsin.data(), ROPEKIT_FLOAT32, 2, ts);
            ropekit_tensor ih = ropekit_tensor_contiguous(hids.data(), ROPEKIT_INT64, 2, is);
            RK(ropekit_rotary_embedding(&xh, &ch, &sh2, &ih, &a, &yh));
            // the exact result of the rounded inputs, rounded once to T: products exact in double
            // (at most 24 + 11 significand bits), their sum exact to 2^-53 relative, one rounding
            for (size_t i = 0; i < n; ++i) {
                const long long t = (long long)(i / (size_t)(N * sh.H)), j = (long long)(i % sh.H);
                if (j >= R) {
                    ho[i] = hx[i];
                    hscale[i] = 0;
                    continue;
                }
                const long long k = j % h, row = hids[(size_t)t] * h + k;
                const double cv = hcos[(size_t)row], sv = hsin[(size_t)row];
                const double v = val16(hx[i], bf);
                const double o = val16(hx[j < h ? i + h : i - h], bf);
                const double y = j < h ? cv * v - sv * o : sv * o + cv * v;
                hscale[i] = (float)std::max(fabs(cv * v), fabs(sv * o));
                ho[i] = bf ? __bfloat16_as_ushort(__double2bfloat16(y))
                           : __half_as_ushort(__double2half(y));
            }
        }
        const Agree gr = compare(hr, hc, bf), gf = compare(hf, hc, bf), gfr = compare(hf, hr, bf);
        const Agree er = compare(hr, ho, bf), ef = compare(hf, ho, bf);
        // pass-through channels [R, H) of FlashInfer's output: must equal x
        long pass_diff = 0;
        for (size_t i = 0; i < n; ++i)
            if ((long long)(i % sh.H) >= R && hf[i] != hx[i]) ++pass_diff;
        fprintf(
            agree_out,
            "| %s | %s | %ld | %ld (%.3f%%) | %ld | %.3g | %ld / %ld / %ld / %ld | %ld | %ld | %ld "
            "(%.4f%%) | %ld (%.3f%%) | %.4g / %.4g / %.4g, %.3g |\n",
            sh.name, bf ? "bf16" : "f16", gr.max_ulp, gf.n_diff, 100.0 * gf.n_diff / gf.n,
            gf.max_ulp, gf.max_abs, gf.hist[0], gf.hist[1], gf.hist[2], gf.hist[3], gfr.max_ulp,
            pass_diff, er.max_ulp, 100.0 * er.n_diff / er.n, ef.max_ulp, 100.0 * ef.n_diff / ef.n,
            val16(ho[ef.worst], bf), val16(hf[ef.worst], bf), val16(hr[ef.worst], bf),
            (double)hscale[ef.worst]);
        fflush(agree_out);
    }

    const double bytes = 2.0 * xbytes + tokens * (2.0 * h * 4 + 8);
    double fus[3], rus[3], cus[3], fl[3] = {0, 0, 0}, rl[3] = {0, 0, 0}, fh = 0, rh = 0;
    for (int r = 0; r < 3; ++r) {
        {
            void *a0 = dalloc(xbytes), *b0 = dalloc(xbytes);
            CK(cudaMemsetAsync(a0, 1, xbytes, g_st));
            cus[r] = median_us(
                [&] { CK(cudaMemcpyAsync(b0, a0, xbytes, cudaMemcpyDeviceToDevice, g_st)); }, 30,
                true);
            CK(cudaFree(a0));
            CK(cudaFree(b0));
        }
        for (int k = 0; k < 2; ++k) {
            const bool fi_now = (k == 0) == (r % 2 == 0);
            if (sh.decode) { // graph of 20; plain stream launches (latency) in the last column
                if (fi_now)
                    fus[r] = graph_us(fi_call, 20, 100),
                    fl[r] = median_us(fi_call, 200, false, &fh);
                else
                    rus[r] = graph_us(rk_call, 20, 100),
                    rl[r] = median_us(rk_call, 200, false, &rh);
            } else {
                if (fi_now)
                    fus[r] = median_us(fi_call, 30, true, &fh);
                else
                    rus[r] = median_us(rk_call, 30, true, &rh);
            }
        }
    }
    auto med3 = [](const double *v) {
        double t[3] = {v[0], v[1], v[2]};
        std::sort(t, t + 3);
        return t[1];
    };
    const double f = med3(fus), rr = med3(rus);
    char fv[64], rv[64];
    auto vs = [&](const double *u, char *out) {
        snprintf(out, 64, "%.1f%%, %.1f%%, %.1f%%", 100.0 * cus[0] / u[0] * bytes / (2.0 * xbytes),
                 100.0 * cus[1] / u[1] * bytes / (2.0 * xbytes),
                 100.0 * cus[2] / u[2] * bytes / (2.0 * xbytes));
    };
    vs(fus, fv);
    vs(rus, rv);
    char ctas[64] = "", lat[96] = "";
    if (sh.decode) snprintf(lat, sizeof lat, "; stream launch %.2f / %.2f us", med3(fl), med3(rl));
    if (plan.kind < 3)
        snprintf(ctas, sizeof ctas, " (token-parallel from %u blocks)", plan.resident_ctas);
    static const char *kinds[] = {"head-parallel", "token-parallel", "token-parallel split",
                                  "RopeQuantize"};
    printf(
        "| %s | %s | %.2f | %.2f | %.3f | %s | %s | %.2f | %s, %d regs, grid %ux%u, block %ux%u%s "
        "| %.1f / %.1f%s |\n",
        sh.name, bf ? "bf16" : "f16", f, rr, f / rr, fv, rv, med3(cus), kinds[plan.kind], plan.regs,
        plan.grid_x, plan.grid_y, plan.block_x, plan.block_y, ctas, fh, rh, lat);
    fflush(stdout);
    int64_t cnt = 0;
    RK(ropekit_cuda_check_errors(g_err, g_st, &cnt));
    if (!sh.packed) {
        CK(cudaFree(yf));
        CK(cudaFree(yr));
    }
    for (void *p : {(void *)x, (void *)c, (void *)s, (void *)cache, (void *)ids})
        CK(cudaFree(p));
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : nullptr;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int drv = 0, rt = 0;
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    printf("GPU: %s, %d SMs, L2 %d MB; CUDA driver API %d, runtime %d\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, drv, rt);
    CK(cudaStreamCreateWithFlags(&g_st, cudaStreamNonBlocking));
    RK(ropekit_cuda_error_state_create(&g_err));
    const Shape shapes[] = {
        {"Llama-3-8B prefill B=1 S=8192 32+8 x128", 1, 8192, 32, 8, 128, 0, 500000.0, false, false},
        {"Llama-3-8B prefill B=1 S=4096 32+8 x128", 1, 4096, 32, 8, 128, 0, 500000.0, false, false},
        {"Qwen3-0.6B prefill B=4 S=2048 16+8 x128", 4, 2048, 16, 8, 128, 0, 1000000.0, false,
         false},
        {"Phi-2 partial B=1 S=8192 32+32 x80 R32", 1, 8192, 32, 32, 80, 32, 10000.0, false, false},
        {"Llama S=8192 in place, packed QKV 32+8+8 x128", 1, 8192, 32, 8, 128, 0, 500000.0, false,
         true},
        {"decode B=256 S=1 32+8 x128 (graph of 20)", 256, 1, 32, 8, 128, 0, 500000.0, true, false},
        {"decode B=64 S=1 32+8 x128 (graph of 20)", 64, 1, 32, 8, 128, 0, 500000.0, true, false},
        /* the decode sweep (session 9): more batch sizes, Qwen3's 16+8 heads */
        {"decode B=1 S=1 32+8 x128 (graph of 20)", 1, 1, 32, 8, 128, 0, 500000.0, true, false},
        {"decode B=8 S=1 32+8 x128 (graph of 20)", 8, 1, 32, 8, 128, 0, 500000.0, true, false},
        {"decode B=32 S=1 32+8 x128 (graph of 20)", 32, 1, 32, 8, 128, 0, 500000.0, true, false},
        {"decode B=128 S=1 32+8 x128 (graph of 20)", 128, 1, 32, 8, 128, 0, 500000.0, true, false},
        {"decode B=512 S=1 32+8 x128 (graph of 20)", 512, 1, 32, 8, 128, 0, 500000.0, true, false},
        {"decode Qwen3 B=256 S=1 16+8 x128 (graph of 20)", 256, 1, 16, 8, 128, 0, 1000000.0, true,
         false},
    };
    std::vector<char> abuf(1 << 16);
    FILE *agree = fmemopen(abuf.data(), abuf.size(), "w");
    printf("\n| shape | x | FlashInfer us | ropekit us | FI / ropekit | FlashInfer vs copy (3 "
           "rounds) | ropekit vs copy "
           "(3 rounds) | copy us | FlashInfer kernel | host us FI / ropekit |\n");
    printf("|---|---|---:|---:|---:|---|---|---:|---|---|\n");
    for (const Shape &sh : shapes)
        for (int bf = 0; bf < 2; ++bf)
            if (!only || strstr(sh.name, only)) bench(sh, bf, agree);
    fclose(agree);
    printf(
        "\nAgreement on the same inputs, in ulps of the output dtype: with the CPU reference\n"
        "(libropekit ropekit_rotary_embedding, float32 tables), and with the exact result of the\n"
        "rounded inputs rounded once to the output dtype (host, double: the products are exact)\n\n"
        "| shape | x | ropekit CUDA vs CPU max ulp | FlashInfer elements differing from CPU | "
        "FlashInfer max ulp | FlashInfer max abs diff | FlashInfer 0 / 1 / 2 / >2 ulp | "
        "FlashInfer vs ropekit CUDA max ulp | FlashInfer pass-through channels changed | "
        "ropekit max ulp from exact (elements differing) | FlashInfer max ulp from exact "
        "(elements differing) | FlashInfer's worst element: exact / FlashInfer / ropekit, larger "
        "product |\n|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|\n%s",
        abuf.data());
    int64_t cnt = 0;
    RK(ropekit_cuda_check_errors(g_err, g_st, &cnt));
    printf("\nout-of-range ids counted by ropekit: %lld\n", (long long)cnt);
    ropekit_cuda_error_state_destroy(g_err);
    return 0;
}
