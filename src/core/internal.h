/* Internal interfaces shared by the core (validation, tables) and the CPU kernels.
 *
 * Data flows one way: the public entry points validate their arguments into a plan (below),
 * then a kernel executes the plan. A plan holds only checked, canonical information: a kernel
 * never needs to check anything again, and every index it forms is known to be in bounds. */
#ifndef ROPEKIT_INTERNAL_H
#define ROPEKIT_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "ropekit.h"

#if defined(__GNUC__)
#define RK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RK_PRINTF(f, a)
#endif

/* ---- errors --------------------------------------------------------------------------------
 * rk_fail records the thread-local message and returns the status, so validators can write
 * `return rk_fail(ROPEKIT_ERROR_SHAPE, "x must have rank 3 or 4, got %d", rank);` */
ropekit_status rk_fail(ropekit_status status, const char *fmt, ...) RK_PRINTF(2, 3);
void rk_clear_error(void);

/* A growing NUL-terminated string; start from {0}. On allocation failure `oom` is set and later
 * appends do nothing: check it once at the end. The caller frees p. */
typedef struct rk_buf {
    char *p;
    size_t n, cap;
    int oom;
} rk_buf;
void rk_buf_putn(rk_buf *b, const char *s, size_t n);
void rk_buf_puts(rk_buf *b, const char *s);
void rk_buf_printf(rk_buf *b, const char *fmt, ...) RK_PRINTF(2, 3);

#define RK_TRY(expr)                                                                           \
    do {                                                                                       \
        ropekit_status rk_s_ = (expr);                                                         \
        if (rk_s_ != ROPEKIT_OK) return rk_s_;                                                 \
    } while (0)

/* Byte range [lo, hi) a view can touch; empty (lo == hi) when it has no elements. */
typedef struct rk_span {
    uintptr_t lo, hi;
} rk_span;

/* A view on its own: present, known dtype, rank 1..4, dims >= 0, offsets within int64 bytes and
 * the address space, data present and aligned to the element size when it has elements (so the
 * kernels' element loads are aligned). Fills its byte span. */
ropekit_status rk_check_view(const ropekit_tensor *t, const char *name, rk_span *span);
/* An output must address each element once. */
ropekit_status rk_check_no_self_overlap(const ropekit_tensor *t, const char *name);

/* ropekit_dtype_size inlined for the per-call paths (validation, dispatch): 0 for an unknown dtype. */
static inline size_t rk_dtype_size(ropekit_dtype d) {
    return d == ROPEKIT_FLOAT32 ? 4 : d == ROPEKIT_FLOAT16 || d == ROPEKIT_BFLOAT16 ? 2
                                   : d == ROPEKIT_INT64 ? 8 : 0;
}

/* ---- checked int64 arithmetic (return 0 on overflow) ------------------------------------- */
static inline int rk_mul(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int rk_add(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* ---- 16-bit float conversions (round to nearest, ties to even; NaN stays NaN) ------------ */
static inline float rk_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t rk_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float rk_bf16_to_f32(uint16_t h) { return rk_f32_from_bits((uint32_t)h << 16); }
static inline uint16_t rk_f32_to_bf16(float f) {
    uint32_t u = rk_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float rk_f16_to_f32(uint16_t h);
uint16_t rk_f32_to_f16(float f);
/* From double directly (one rounding), for the table builders. */
uint16_t rk_f64_to_f16(double d);
uint16_t rk_f64_to_bf16(double d);

/* Read element i of a float-like array of dtype dt as float (exact). */
static inline float rk_load(const void *p, ropekit_dtype dt, int64_t i) {
    switch (dt) {
    case ROPEKIT_FLOAT32: return ((const float *)p)[i];
    case ROPEKIT_FLOAT16: return rk_f16_to_f32(((const uint16_t *)p)[i]);
    default: return rk_bf16_to_f32(((const uint16_t *)p)[i]);
    }
}
/* Round a float to dtype dt and store it as element i. */
static inline void rk_store(void *p, ropekit_dtype dt, int64_t i, float v) {
    switch (dt) {
    case ROPEKIT_FLOAT32: ((float *)p)[i] = v; break;
    case ROPEKIT_FLOAT16: ((uint16_t *)p)[i] = rk_f32_to_f16(v); break;
    default: ((uint16_t *)p)[i] = rk_f32_to_bf16(v); break;
    }
}
/* Round a float to dt and back (the contracts' Rt). */
static inline float rk_round_to(ropekit_dtype dt, float v) {
    switch (dt) {
    case ROPEKIT_FLOAT32: return v;
    case ROPEKIT_FLOAT16: return rk_f16_to_f32(rk_f32_to_f16(v));
    default: return rk_bf16_to_f32(rk_f32_to_bf16(v));
    }
}

/* ---- plans ------------------------------------------------------------------------------- */

/* How a rotary plan finds the table row(s) of token (b, s). */
typedef enum rk_row_source {
    RK_ROWS_PER_TOKEN = 0, /* position_ids (B, S): row = pos[b*pos_sb + s*pos_ss] */
    RK_ROWS_OFFSET = 1,    /* one offset: row = offset + s */
    RK_ROWS_TABLE_3D = 2,  /* no ids: the table is (B, S, h); "row" (b, s) */
    RK_ROWS_MROPE = 3      /* position_ids (3, B, S) and a column -> stream map */
} rk_row_source;

/* Everything a rotary kernel needs: RotaryEmbedding (both flavours) and MRotaryEmbedding.
 * x and y are canonical 4D views (B, S, N, H) in elements; the tables are 2D (rows, h) or, for
 * RK_ROWS_TABLE_3D, addressed as (b, s, k). All ids have been checked against the rows. */
typedef struct rk_rotary_plan {
    ropekit_dtype dtype;       /* T of x and y */
    ropekit_dtype table_dtype; /* T or float32 */
    int64_t B, S, N, H, R;     /* R = rotary width, h = R/2 */
    const char *x;
    char *y;
    int64_t xs[4], ys[4]; /* strides of (b, s, n, c) in elements */
    int interleaved;
    int inverse;
    int apply_scale; /* scale != 1 */
    float scale;
    /* tables */
    const char *cos, *sin;
    int64_t cos_rs, cos_cs, sin_rs, sin_cs; /* row and column strides (2D tables) */
    int64_t cos_bs, cos_ss, sin_bs, sin_ss; /* batch and sequence strides (3D tables) */
    /* row source */
    rk_row_source rows;
    int64_t table_rows; /* rows of a 2D table */
    const int64_t *pos;
    int64_t pos_as, pos_bs, pos_ss; /* stream, batch, sequence strides of position_ids */
    int64_t offset;
    int64_t mrope_section[3];
    int mrope_layout;
} rk_rotary_plan;

/* Stream (0 T, 1 H, 2 W) that MRoPE column k of h reads. */
static inline int rk_mrope_stream(const int64_t sec[3], int layout, int64_t k) {
    if (layout == 0) return k < sec[0] ? 0 : (k < sec[0] + sec[1] ? 1 : 2);
    if (k % 3 == 1 && k < 3 * sec[1]) return 1;
    if (k % 3 == 2 && k < 3 * sec[2]) return 2;
    return 0;
}

/* Element offset of table column k for token (b, s) in the cos (which = 0) or sin table. */
static inline int64_t rk_table_offset(const rk_rotary_plan *p, int which, int64_t b, int64_t s,
                                      int64_t k) {
    int64_t rs = which ? p->sin_rs : p->cos_rs, cs = which ? p->sin_cs : p->cos_cs;
    int64_t row;
    switch (p->rows) {
    case RK_ROWS_TABLE_3D:
        return b * (which ? p->sin_bs : p->cos_bs) + s * (which ? p->sin_ss : p->cos_ss) + k * cs;
    case RK_ROWS_OFFSET: row = p->offset + s; break;
    case RK_ROWS_MROPE:
        row = p->pos[rk_mrope_stream(p->mrope_section, p->mrope_layout, k) * p->pos_as +
                     b * p->pos_bs + s * p->pos_ss];
        break;
    default: row = p->pos[b * p->pos_bs + s * p->pos_ss]; break;
    }
    return row * rs + k * cs;
}

typedef struct rk_qknorm_plan {
    ropekit_dtype dtype;
    int64_t B, S, num_heads, head_dim, rope_dim, nope;
    float epsilon;
    int simulate_fp8;
    const char *q, *kv;
    char *q_out, *kv_out;
    int64_t qs[4], qos[4]; /* (b, s, head, c) */
    int64_t kvs[3], kvos[3]; /* (b, s, c) */
    const float *w;
    int64_t ws;
    const float *cos, *sin;
    int64_t cos_s[3], sin_s[3]; /* (b, s, t) */
} rk_qknorm_plan;

typedef struct rk_regroup_plan {
    ropekit_dtype dtype;
    int64_t N, num_heads, head_dim, rope_dim, nope, num_groups, group_dim;
    const char *x;
    char *out;
    int64_t xs[2];   /* (n, f) */
    int64_t os[3];   /* (g, n, c) */
    const float *cos, *sin;
    int64_t cos_s[2], sin_s[2];
} rk_regroup_plan;

/* ---- plan builders (src/core/validate.c) --------------------------------------------------
 * Each checks every rule of its operator that does not need to read tensor data (shapes, dtypes,
 * attributes, strides, overlaps) and fills the plan. Position ids are read only by
 * rk_check_position_ids (host memory), so a device backend can build the same plans for device
 * pointers and check ids on the device. */
ropekit_status rk_plan_rotary_embedding(const ropekit_tensor *x, const ropekit_tensor *cos_cache,
                                        const ropekit_tensor *sin_cache,
                                        const ropekit_tensor *position_ids,
                                        const ropekit_rotary_embedding_attrs *attrs,
                                        const ropekit_tensor *y, rk_rotary_plan *plan);
/* The same without the small-call fast path (every call checked rule by rule): for the tests that
 * compare the two. */
ropekit_status rk_plan_rotary_embedding_full(const ropekit_tensor *x,
                                             const ropekit_tensor *cos_cache,
                                             const ropekit_tensor *sin_cache,
                                             const ropekit_tensor *position_ids,
                                             const ropekit_rotary_embedding_attrs *attrs,
                                             const ropekit_tensor *y, rk_rotary_plan *plan);
ropekit_status rk_plan_ms_rotary_embedding(const ropekit_tensor *input,
                                           const ropekit_tensor *position_ids,
                                           const ropekit_tensor *cos_cache,
                                           const ropekit_tensor *sin_cache,
                                           const ropekit_ms_rotary_embedding_attrs *attrs,
                                           const ropekit_tensor *y, rk_rotary_plan *plan);
ropekit_status rk_plan_mrotary_embedding(const ropekit_tensor *input,
                                         const ropekit_tensor *position_ids,
                                         const ropekit_tensor *cos_cache,
                                         const ropekit_tensor *sin_cache,
                                         const ropekit_mrotary_embedding_attrs *attrs,
                                         const ropekit_tensor *y, rk_rotary_plan *plan);
ropekit_status rk_plan_qknorm_rotary_embedding(
    const ropekit_tensor *query, const ropekit_tensor *kv, const ropekit_tensor *kv_norm_weight,
    const ropekit_tensor *cos, const ropekit_tensor *sin,
    const ropekit_qknorm_rotary_embedding_attrs *attrs, const ropekit_tensor *query_out,
    const ropekit_tensor *kv_out, rk_qknorm_plan *plan);
ropekit_status rk_plan_inverse_rotary_regroup(const ropekit_tensor *input,
                                              const ropekit_tensor *cos, const ropekit_tensor *sin,
                                              const ropekit_inverse_rotary_regroup_attrs *attrs,
                                              const ropekit_tensor *out, rk_regroup_plan *plan);
/* Reads the plan's position ids (host memory) and checks each against the table rows; for the
 * offset form it also stores the offset in the plan. */
ropekit_status rk_check_position_ids(rk_rotary_plan *p);

/* ---- CPU kernels (src/cpu) --------------------------------------------------------------- */
void rk_ref_rotary(const rk_rotary_plan *p);
void rk_ref_qknorm(const rk_qknorm_plan *p);
void rk_ref_regroup(const rk_regroup_plan *p);

/* ---- CPU dispatch (src/cpu/dispatch.c) -----------------------------------------------------
 * The entry points call these once a plan is checked: they pick the variant chosen at first use
 * (cpuid, or ROPEKIT_CPU_VARIANT) and split the tokens over threads. Every variant gives the
 * bits of rk_ref_*; an empty plan is a no-op. */
void rk_cpu_rotary(const rk_rotary_plan *p);
void rk_cpu_qknorm(const rk_qknorm_plan *p);
void rk_cpu_regroup(const rk_regroup_plan *p);

/* Calls moving fewer bytes than this stay on the calling thread (tests set 0 to split tiny
 * calls too; a negative value restores the default). */
void rk_cpu_set_parallel_threshold(int64_t bytes);
/* Rotary outputs of at least this many bytes per thread are written with streaming stores
 * (tests set 0 to exercise them; a negative value restores the default). */
void rk_cpu_set_stream_threshold(int64_t bytes);
int64_t rk_cpu_stream_threshold(void);

/* A variant's kernels: each runs a whole (sub)plan on the calling thread. */
typedef struct rk_cpu_kernels {
    const char *name;
    void (*rotary)(const rk_rotary_plan *p);
    void (*qknorm)(const rk_qknorm_plan *p);
    void (*regroup)(const rk_regroup_plan *p);
} rk_cpu_kernels;
extern const rk_cpu_kernels rk_kernels_ref;
#if defined(__x86_64__) || defined(_M_X64)
extern const rk_cpu_kernels rk_kernels_avx2, rk_kernels_avx512;
#endif
#if defined(__aarch64__)
extern const rk_cpu_kernels rk_kernels_neon;
#endif

/* FP8-E4M3FN round trip of one float (exposed for tests). */
float rk_e4m3_round(float v);

#endif
