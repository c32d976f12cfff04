// fi_rope.h: the C entry point of bench/cuda/fi_rope.cu (FlashInfer's cos/sin-cache RoPE).
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
enum { FI_FLOAT16 = 1, FI_BFLOAT16 = 2 };
typedef struct fi_rope_call {
    int dtype;            /* FI_FLOAT16 or FI_BFLOAT16 (FlashInfer's API takes no other) */
    void *x, *y;          /* (nnz, num_q_heads + num_k_heads, head_dim); q heads first */
    float *cos_sin_cache; /* (P, rotary_dim) float32: cos in [0, R/2), sin in [R/2, R) */
    int64_t *pos_ids;     /* (nnz) rows of the cache */
    uint32_t nnz, num_q_heads, num_k_heads, rotary_dim, head_dim;
    size_t x_stride_token, y_stride_token; /* elements */
} fi_rope_call;
typedef struct fi_rope_plan {
    int kind; /* 0 head-parallel, 1 token-parallel, 2 token-parallel split, 3 RopeQuantize (other H)
               */
    int regs;
    unsigned grid_x, grid_y, block_x, block_y, resident_ctas;
} fi_rope_plan;
int fi_rope_apply(const fi_rope_call *c, cudaStream_t st); /* cudaError_t; -1 exception; -2 dtype */
int fi_rope_plan_of(const fi_rope_call *c, fi_rope_plan *p);
#ifdef __cplusplus
}
#endif
