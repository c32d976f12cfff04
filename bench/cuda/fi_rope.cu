// fi_rope: FlashInfer's own RoPE code (include/flashinfer/pos_enc.cuh of the flashinfer-python
// wheel, unpacked at build time by bench/cuda/build_flashinfer.sh; nothing of FlashInfer is in
// this repository) behind a C entry point for bench_flashinfer. Compiled alone, with the flags
// FlashInfer's JIT gives its rope module (flashinfer/jit/core.py gen_jit_spec: -O3 -DNDEBUG
// -use_fast_math -std=c++17 --expt-relaxed-constexpr), so its kernels are the ones the wheel's
// `apply_rope_with_cos_sin_cache` runs: BatchQKApplyRotaryPosIdsCosSinCache with
// interleave = false (is_neox = True, half-split pairs), the cache float32 (P, R) = [cos | sin].
#include <cstdint>
#include <exception>

#include "flashinfer/pos_enc.cuh"

#include "fi_rope.h"

namespace {
template <typename T> int run(const fi_rope_call *c, cudaStream_t st) {
    T *x = (T *)c->x, *y = (T *)c->y;
    const size_t nh = (size_t)c->num_q_heads * c->head_dim; // k heads follow the q heads
    cudaError_t e = flashinfer::BatchQKApplyRotaryPosIdsCosSinCache<T, int64_t>(
        x, x + nh, y, y + nh, c->cos_sin_cache, c->pos_ids, c->nnz, c->num_q_heads, c->num_k_heads,
        c->rotary_dim, c->head_dim, c->x_stride_token, c->head_dim, c->x_stride_token, c->head_dim,
        c->y_stride_token, c->head_dim, c->y_stride_token, c->head_dim, /*interleave=*/false, st);
    return (int)e;
}

// The kernel the wheel's dispatch picks for this call (the same decision functions it calls):
// 0 head-parallel (small nnz), 1 token-parallel unsplit, 2 token-parallel split over heads; and
// its registers per thread.
template <typename T, size_t HD> void plan(const fi_rope_call *c, fi_rope_plan *p) {
    using namespace flashinfer;
    constexpr uint32_t vec_size = (uint32_t)std::max<size_t>(16 / sizeof(T), HD / 32);
    constexpr uint32_t bdx = (uint32_t)HD / vec_size;
    const uint32_t num_threads = std::max(128U, bdx), bdy = num_threads / bdx;
    const uint32_t nblks_x = (c->nnz + bdy - 1) / bdy;
    auto split_kernel =
        BatchQKApplyRotaryPosIdsCosSinCacheKernel<false, HD, vec_size, bdx, T, int64_t, 1, true>;
    auto unsplit_kernel =
        BatchQKApplyRotaryPosIdsCosSinCacheKernel<false, HD, vec_size, bdx, T, int64_t>;
    auto head_kernel = BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<false, HD, vec_size,
                                                                                bdx, T, int64_t>;
    uint32_t ctas = 0, split = 1;
    bool use_split = false;
    RopeResidentCtas((void *)unsplit_kernel, num_threads, ctas);
    const void *k = (void *)head_kernel;
    p->kind = 0;
    if (nblks_x >= ctas) {
        RopeHeadSplit(nblks_x, (void *)split_kernel, (void *)unsplit_kernel, num_threads,
                      c->num_q_heads, c->num_k_heads, false, split, use_split);
        k = use_split ? (void *)split_kernel : (void *)unsplit_kernel;
        p->kind = use_split ? 2 : 1;
    }
    cudaFuncAttributes a;
    cudaFuncGetAttributes(&a, k);
    p->regs = a.numRegs;
    p->grid_x = nblks_x, p->grid_y = p->kind == 0 ? c->num_q_heads + c->num_k_heads : split;
    p->block_x = bdx, p->block_y = bdy, p->resident_ctas = ctas;
}
template <typename T>
void plan_rq(const fi_rope_call *c, fi_rope_plan *p) { // head_dim not 64/128/256/512: RopeQuantize
    using namespace flashinfer;
    auto k = RopeQuantizeKernel<false, 32 / sizeof(T), 1, T, int64_t, T>;
    cudaFuncAttributes a;
    cudaFuncGetAttributes(&a, (void *)k);
    const uint32_t vs = 32 / sizeof(T), bdx = std::max(1u, (c->rotary_dim + vs - 1) / vs);
    const uint32_t bdy = std::max(1u, std::max(128U, bdx) / bdx);
    const uint32_t nope = (c->head_dim - c->rotary_dim + c->rotary_dim - 1) / c->rotary_dim;
    p->kind = 3, p->regs = a.numRegs, p->grid_x = (c->nnz + bdy - 1) / bdy;
    p->grid_y = (c->num_q_heads + c->num_k_heads) * (1 + nope), p->block_x = bdx, p->block_y = bdy;
    p->resident_ctas = 0;
}
} // namespace

extern "C" int fi_rope_apply(const fi_rope_call *c, cudaStream_t st) {
    try {
        if (c->dtype == FI_FLOAT16) return run<half>(c, st);
        if (c->dtype == FI_BFLOAT16) return run<nv_bfloat16>(c, st);
        return -2;
    } catch (const std::exception &) {
        return -1;
    }
}

extern "C" int fi_rope_plan_of(const fi_rope_call *c, fi_rope_plan *p) {
    try {
        const bool h = c->dtype == FI_FLOAT16;
        switch (c->head_dim) {
        case 64: h ? plan<half, 64>(c, p) : plan<nv_bfloat16, 64>(c, p); return 0;
        case 128: h ? plan<half, 128>(c, p) : plan<nv_bfloat16, 128>(c, p); return 0;
        case 256: h ? plan<half, 256>(c, p) : plan<nv_bfloat16, 256>(c, p); return 0;
        default: h ? plan_rq<half>(c, p) : plan_rq<nv_bfloat16>(c, p); return 0;
        }
    } catch (const std::exception &) {
        return -1;
    }
}
