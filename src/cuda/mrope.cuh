/* MRotaryEmbedding's part of the rotary kernels (src/cuda/rotary.cu, which includes this file
 * after RotArgs): which position-id stream (0 T, 1 H, 2 W) table column k reads, as
 * rk_mrope_stream (src/core/internal.h) for the plan's sections and layout. The rotation itself
 * is the rotary kernels' (same arithmetic, same bits); the flat kernel loads a chunk whose
 * columns all read one stream like a plain chunk, and run_rotary builds the mask of the streams
 * the columns use. */
#pragma once

__device__ __forceinline__ int mrope_stream(const RotArgs &a, int k) {
    if (a.layout == 0) return k < a.sec0 ? 0 : (k < a.sec0 + a.sec1 ? 1 : 2);
    if (k % 3 == 1 && k < 3 * a.sec1) return 1;
    if (k % 3 == 2 && k < 3 * a.sec2) return 2;
    return 0;
}
