/* RK_FORCE_INLINE: the SIMD kernels' small helpers and row loops are always inlined, so that
 * constant arguments (widths, dtypes, layouts) fold. Sanitizer builds (CMakeLists.txt,
 * ROPEKIT_SANITIZE) define RK_NO_FORCED_INLINE and compile at -O0: forced inlining at -O0 gave
 * every inlined copy its own redzoned locals (frames of 4-10 MB, over the 8 MB stack), and at -O1
 * clang 14 took 3-5 minutes per SIMD file on an idle core (over 25 under CI's load) with ASan +
 * UBSan (pointer-overflow checks in the inlined loops); plain calls keep frames under 0.1 MB and
 * compile in seconds. Same code, same bits: only the inlining differs. */
#ifndef ROPEKIT_FORCE_INLINE_H
#define ROPEKIT_FORCE_INLINE_H
#ifdef RK_NO_FORCED_INLINE
#define RK_FORCE_INLINE static inline
#else
#define RK_FORCE_INLINE static inline __attribute__((always_inline))
#endif
#endif
