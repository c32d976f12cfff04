/* MRotaryEmbedding's part of the rotary kernels (src/cuda/rotary.cu, which includes this file
 * after RotArgs): which position-id stream (0 T, 1 H, 2 W) table column k reads, as
 * rk_mrope_stream (src/core/internal.h) for the plan's sections and layout. The rotation itself
 * is the rotary kernels' (same arithmetic, same bits); the flat kernel loads a chunk whose
 * columns all read one stream like a plain chunk, and run_rotary builds the mask of the streams
 * the columns use. MRoPE's vectorisable multi-wave calls take the tile kernel (tile_preferred):
 * its per-token gather computes each column's stream once per token. Measured slower on an
 * H200 and not kept (2026-12-02, bench/results-cuda.md "MRotaryEmbedding"): an MRoPE flat
 * kernel whose chunks read their streams from a per-call host map (8 blocks of 128 per SM by
 * registers against the capped tile kernel's 10: bfloat16 x / float32 tables 43.1 vs 40.4 us),
 * and L2 bulk prefetches (cp.async.bulk.prefetch) of the table rows and/or x rows of the token
 * 1024-2048 tokens ahead (0.7-23% slower on every sectioned row; the table rows alone 1-3%). */
#pragma once

__device__ __forceinline__ int mrope_stream(const RotArgs &a, int k) {
    if (a.layout == 0) return k < a.sec0 ? 0 : (k < a.sec0 + a.sec1 ? 1 : 2);
    if (k % 3 == 1 && k < 3 * a.sec1) return 1;
    if (k % 3 == 2 && k < 3 * a.sec2) return 2;
    return 0;
}
