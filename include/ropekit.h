/*
 * ropekit.h — rotary position embedding (RoPE), done exactly, on the CPU.
 *
 * This header is the manual. It covers:
 *   1. status codes and the last-error message
 *   2. element types and tensor views
 *   3. the operators (one entry point each):
 *        ropekit_rotary_embedding          ai.onnx.RotaryEmbedding (opset 23)
 *        ropekit_ms_rotary_embedding       com.microsoft.RotaryEmbedding
 *        ropekit_mrotary_embedding         com.microsoft.MRotaryEmbedding (multimodal, Qwen-VL)
 *        ropekit_qknorm_rotary_embedding   com.microsoft.QKNormRotaryEmbedding (MLA, DeepSeek-V4)
 *        ropekit_inverse_rotary_regroup    com.microsoft.InverseRotaryRegroup
 *   4. cos/sin table builders (rope types default, linear, yarn, longrope, llama3), and RoPE
 *      with the angles computed on the fly instead of read from a table
 *   5. CPU variants (ref, avx2, avx512: same bits) and threads
 *
 * ----------------------------------------------------------------------------------------------
 * Notation (used throughout)
 *
 *   H  head size, R rotary width (0 < R <= H, R even), h = R/2. Channels x[R:H] are copied.
 *   A table row holds h values: cos[p][k] = cos(theta_k * p), sin[p][k] = sin(theta_k * p).
 *
 *   Half-split pairs, interleaved = 0 (GPT-NeoX, HF "rotate_half"): lanes [x0..x(h-1) | xh..x(R-1)]
 *     pair (x[k], x[k+h]):  y[k]   = c[k]*x[k] - s[k]*x[k+h]
 *                           y[k+h] = s[k]*x[k] + c[k]*x[k+h]
 *   Adjacent pairs, interleaved = 1 (GPT-J, Meta LLaMA):      lanes [x0 x1 | x2 x3 | ...]
 *     pair (x[2k], x[2k+1]): y[2k]   = c[k]*x[2k] - s[k]*x[2k+1]
 *                            y[2k+1] = s[k]*x[2k] + c[k]*x[2k+1]
 *   inverse = 1 rotates by -theta (s replaced by -s); it undoes the forward rotation.
 *
 * ----------------------------------------------------------------------------------------------
 * Arithmetic (the same in every ropekit backend and variant, bit for bit on the CPU)
 *
 *   Inputs are converted to float exactly. For each output of a pair, both products are exact in
 *   a wide type W and their sum is rounded once to W:
 *     W = float  when x and the tables are both 16-bit (float16/bfloat16): 11- or 8-bit
 *                significands multiply exactly in float;
 *     W = double when x or the tables are float32; the double result is then rounded to float.
 *   The float result is rounded to the output type T (round to nearest, ties to even). So float32
 *   outputs are correctly rounded (within 0.5 ulp of the exact result of the rounded inputs) and
 *   16-bit outputs are within 1 ulp (two roundings: to float, then to T).
 *   Because the products are exact, a fused multiply-add gives the same bits: implementations may
 *   use one. QKNormRotaryEmbedding fixes its own rounding points (see its section).
 *
 * ----------------------------------------------------------------------------------------------
 * Conventions
 *
 *   - Every function returns ropekit_status (ROPEKIT_OK = 0). On failure nothing has been written
 *     to any output, and ropekit_last_error() says which argument broke which rule, e.g.
 *     "position_ids[0][3] = 70000 is outside cos_cache rows [0, 4096)".
 *   - All arguments are validated before any output memory is touched: out-of-range position ids,
 *     odd or oversized rotary widths, mismatched shapes or dtypes, overflowing sizes are errors,
 *     never out-of-bounds accesses. The library never aborts, exits or prints.
 *   - The caller allocates outputs. Strides are in elements (DLPack style), so views into a packed
 *     QKV buffer work without copies. In place (output view == input view: same data pointer, same
 *     shape, same strides) is allowed for every operator; any other overlap between an output and
 *     an input, or between two outputs, is rejected with ROPEKIT_ERROR_ALIASING.
 *   - Thread safety: every function is reentrant; calls on disjoint outputs may run concurrently.
 *     The last-error message is thread-local.
 */
#ifndef ROPEKIT_H
#define ROPEKIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(ROPEKIT_SHARED_BUILD)
#define ROPEKIT_API __declspec(dllexport)
#elif defined(__GNUC__)
#define ROPEKIT_API __attribute__((visibility("default")))
#else
#define ROPEKIT_API
#endif

#define ROPEKIT_VERSION_MAJOR 0
#define ROPEKIT_VERSION_MINOR 1
#define ROPEKIT_VERSION_PATCH 0

/** "MAJOR.MINOR.PATCH" of the library actually loaded. */
ROPEKIT_API const char *ropekit_version(void);

/* ============================================================================================
 * 1. Status
 * ========================================================================================== */

typedef enum ropekit_status {
    ROPEKIT_OK = 0,
    ROPEKIT_ERROR_NULL_POINTER = 1,          /* a required pointer (argument or tensor data) is NULL */
    ROPEKIT_ERROR_INVALID_ATTRIBUTE = 2,     /* an attribute value breaks the operator's contract */
    ROPEKIT_ERROR_SHAPE = 3,                 /* a rank or dimension does not match the contract */
    ROPEKIT_ERROR_DTYPE = 4,                 /* an element type is not allowed or does not match */
    ROPEKIT_ERROR_POSITION_OUT_OF_RANGE = 5, /* a position id selects no row of the table */
    ROPEKIT_ERROR_OVERFLOW = 6,              /* a size or offset computation would overflow int64 */
    ROPEKIT_ERROR_ALIASING = 7,              /* an output partially overlaps an input or output */
    ROPEKIT_ERROR_UNSUPPORTED = 8,           /* valid in the ONNX contract, not implemented here
                                                (and misaligned tensor data, see ropekit_tensor) */
    ROPEKIT_ERROR_OUT_OF_MEMORY = 9,
    ROPEKIT_ERROR_IO = 10,                   /* file could not be read or written (tools) */
    ROPEKIT_ERROR_PARSE = 11,                /* malformed input file (tools) */
    ROPEKIT_ERROR_DEVICE = 12                /* a GPU runtime call failed (CUDA, WebGPU backends) */
} ropekit_status;

/** Stable name of a status, e.g. "ROPEKIT_ERROR_SHAPE". Never NULL. */
ROPEKIT_API const char *ropekit_status_str(ropekit_status status);

/** The message of the last failed call on this thread ("" if none). Valid until the next call
 *  of a ropekit function on this thread. */
ROPEKIT_API const char *ropekit_last_error(void);

/* ============================================================================================
 * 2. Element types and tensor views
 * ========================================================================================== */

typedef enum ropekit_dtype {
    ROPEKIT_FLOAT32 = 1,  /* IEEE binary32 */
    ROPEKIT_FLOAT16 = 2,  /* IEEE binary16, stored as uint16_t */
    ROPEKIT_BFLOAT16 = 3, /* bfloat16 (upper half of binary32), stored as uint16_t */
    ROPEKIT_INT64 = 4     /* position ids */
} ropekit_dtype;

/** Name of a dtype ("float32", ...), "invalid" for unknown values. */
ROPEKIT_API const char *ropekit_dtype_name(ropekit_dtype dtype);
/** Size of one element in bytes, 0 for unknown values. */
ROPEKIT_API size_t ropekit_dtype_size(ropekit_dtype dtype);

#define ROPEKIT_MAX_RANK 4

/**
 * A strided view of memory the caller owns. Element (i0, i1, ...) lives at
 * data + (i0*strides[0] + i1*strides[1] + ...) * element_size. Strides are in elements and may be
 * any value (zero and negative too) as long as the offsets fit in int64.
 * Alignment: data must be a multiple of the element size (4 for float32, 2 for float16 and
 * bfloat16, 8 for int64), as C requires for a float * or int64_t *; malloc, numpy and every
 * framework allocator give that. A misaligned view (a float32 array at an odd address, e.g. a
 * numpy view into a byte buffer) is refused with ROPEKIT_ERROR_UNSUPPORTED, nothing read.
 * A view with no elements (some shape entry 0) reads no memory: data may then be NULL or any
 * address.
 * Use ropekit_tensor_contiguous() to fill in row-major strides. Inputs are never written through.
 */
typedef struct ropekit_tensor {
    void *data;
    ropekit_dtype dtype;
    int32_t rank;                       /* 1 .. ROPEKIT_MAX_RANK */
    int64_t shape[ROPEKIT_MAX_RANK];    /* entries >= 0; entries past rank are ignored */
    int64_t strides[ROPEKIT_MAX_RANK];  /* in elements */
} ropekit_tensor;

/** A row-major (C-contiguous) view: strides computed from the shape. Shape entries past `rank`
 *  are ignored. Does not validate (the operators do). */
ROPEKIT_API ropekit_tensor ropekit_tensor_contiguous(void *data, ropekit_dtype dtype, int32_t rank,
                                                     const int64_t *shape);

/* ============================================================================================
 * 3. Operators
 *
 * Element types: T (activations, x and y) is float32, float16 or bfloat16. Rotary tables are T,
 * or float32 for any T (a ropekit extension: float32 tables keep long contexts exact; ONNX and
 * ORT require T). cos and sin must have the same dtype and shape. Position ids are int64.
 * ========================================================================================== */

/* ---- 3.1 ai.onnx.RotaryEmbedding (opset 23) ------------------------------------------------
 *
 * Inputs, in the operator's order:
 *   x             T  (B, S, N*H) with num_heads = N, or (B, N, S, H)
 *   cos_cache     2D (P, h) with position_ids, 3D (B, S, h) without
 *   sin_cache     same as cos_cache
 *   position_ids  int64 (B, S) or NULL. Token (b, s) uses row position_ids[b][s], which must lie
 *                 in [0, P). (The onnx reference implementation wraps negative ids the numpy
 *                 way, ORT CPU rejects them, ORT CUDA passes the token through unchanged;
 *                 ropekit rejects them.)
 * Output:
 *   y             T, same shape as x (may be x itself: in place).
 * Differences from the references, all deliberate:
 *   - interleaved must be 0 or 1 (the onnx reference takes any non-zero as 1, ORT only == 1);
 *   - the table width must be exactly h (as onnx >= 1.20 and ORT; the schema's function body
 *     would slice a wider table);
 *   - S may exceed P as long as every id is in range (ORT rejects S > P);
 *   - with rank-4 x, num_heads may be 0 or must equal N.
 */
typedef struct ropekit_rotary_embedding_attrs {
    int64_t interleaved;          /* 0: half-split pairs, 1: adjacent pairs */
    int64_t rotary_embedding_dim; /* R; 0 means R = H. Must be even, 0 < R <= H */
    int64_t num_heads;            /* required (> 0) for rank-3 x */
    int64_t inverse;              /* ropekit extension: 1 rotates by -theta */
} ropekit_rotary_embedding_attrs;
#define ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT {0, 0, 0, 0}

ROPEKIT_API ropekit_status ropekit_rotary_embedding(const ropekit_tensor *x,
                                                    const ropekit_tensor *cos_cache,
                                                    const ropekit_tensor *sin_cache,
                                                    const ropekit_tensor *position_ids,
                                                    const ropekit_rotary_embedding_attrs *attrs,
                                                    const ropekit_tensor *y);

/* ---- 3.2 com.microsoft.RotaryEmbedding (ORT contrib, version 1) ----------------------------
 *
 * Inputs, in the operator's order (not the ai.onnx order):
 *   input         T  (B, S, N*H) with num_heads = N, or (B, N, S, H)
 *   position_ids  int64, either shape (1): an offset, token s of every batch uses row
 *                 position_ids[0] + s (0 <= offset, offset + S <= P); or (B, S): a row per token.
 *   cos_cache     (P, h)
 *   sin_cache     (P, h)
 * Output: y, same shape as input (may be input itself).
 * Attributes as in ORT, with these deliberate differences:
 *   - scale is applied: cos and sin are multiplied by it in float and rounded to the table type
 *     before use (ORT parses scale and ignores it, so models fused for ORT leave it at 1).
 *   - the head size comes from num_heads (rank 3) or from the shape (rank 4), never from the
 *     table width (ORT takes H = 2 * cos.shape[1] when rotary_embedding_dim is 0, which silently
 *     changes the head split on a narrow table); the table width must be exactly h.
 *   - R must be even (ORT does not check).
 *   - is_packed_batching must be 0 (ROPEKIT_ERROR_UNSUPPORTED otherwise).
 */
typedef struct ropekit_ms_rotary_embedding_attrs {
    int64_t interleaved;
    int64_t rotary_embedding_dim;
    int64_t num_heads;
    float scale;                /* default 1.0 */
    int64_t is_packed_batching; /* must be 0 */
    int64_t inverse;            /* ropekit extension */
} ropekit_ms_rotary_embedding_attrs;
#define ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT {0, 0, 0, 1.0f, 0, 0}

ROPEKIT_API ropekit_status ropekit_ms_rotary_embedding(
    const ropekit_tensor *input, const ropekit_tensor *position_ids,
    const ropekit_tensor *cos_cache, const ropekit_tensor *sin_cache,
    const ropekit_ms_rotary_embedding_attrs *attrs, const ropekit_tensor *y);

/* ---- 3.3 com.microsoft.MRotaryEmbedding (multimodal RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL) ---
 *
 * Inputs:
 *   input         T  (B, S, N*H) with num_heads, or (B, N, S, H)
 *   position_ids  int64 (3, B, S): streams T (temporal), H (height), W (width)
 *   cos_cache     (P, h)
 *   sin_cache     (P, h)
 * Output: y, same shape as input (may be input itself).
 *
 * For each token a row of h cos/sin values is assembled; column k reads
 * cache[position_ids[a(k)][b][s]][k], with stream a(k) given by the layout:
 *   mrope_layout 0 (sectioned, Qwen2-VL/2.5-VL): columns [0, sec0) from T, [sec0, sec0+sec1) from H,
 *                the rest from W. (HF doubles the section list over its full-width table; the
 *                same thing on the half table.)
 *   mrope_layout 1 (interleaved, Qwen3-VL): T everywhere, then columns 1, 4, 7, ... below 3*sec1
 *                from H and columns 2, 5, 8, ... below 3*sec2 from W.
 * mrope_section: three non-negative numbers summing to h (NOT doubled). Default Qwen3-VL: 24,20,20.
 * `interleaved` is the pairing of x lanes, independent of the layout. scale as in 3.2 (applied;
 * ORT applies it here too). Text tokens (three equal streams) get plain RoPE.
 * Position ids of the streams that a layout actually reads must lie in [0, P): out-of-range ids
 * are an error (ORT CPU agrees; the published WebGPU kernel copies the pair through).
 */
typedef struct ropekit_mrotary_embedding_attrs {
    int64_t mrope_section[3];
    int64_t mrope_layout;       /* 0 sectioned, 1 interleaved */
    int64_t interleaved;
    int64_t rotary_embedding_dim;
    int64_t num_heads;
    float scale;                /* default 1.0 */
    int64_t is_packed_batching; /* must be 0 */
    int64_t inverse;            /* ropekit extension */
} ropekit_mrotary_embedding_attrs;
#define ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT {{0, 0, 0}, 0, 0, 0, 0, 1.0f, 0, 0}

ROPEKIT_API ropekit_status ropekit_mrotary_embedding(
    const ropekit_tensor *input, const ropekit_tensor *position_ids,
    const ropekit_tensor *cos_cache, const ropekit_tensor *sin_cache,
    const ropekit_mrotary_embedding_attrs *attrs, const ropekit_tensor *y);

/* ---- 3.4 com.microsoft.QKNormRotaryEmbedding (MLA query / latent-KV preparation) -----------
 *
 * T = float32, float16 or bfloat16; M = float32.
 *   query          T (B, S, num_heads*head_dim)
 *   kv             T (B, S, head_dim)    one latent row per token, shared by every head
 *   kv_norm_weight M (head_dim)
 *   cos, sin       M (B, S, rope_head_dim), already gathered per token and pre-interleaved
 *                  (cos[2i] == cos[2i+1] in practice; not required)
 * Outputs:
 *   query_out      T (B, S, num_heads, head_dim)   may be query itself (same element mapping)
 *   kv_out         T (B, S, head_dim)              may be kv itself
 * Attributes: num_heads > 0, head_dim > 0, rope_head_dim even in [0, head_dim] (0: no rotation),
 * epsilon, simulate_fp8 (then nope = head_dim - rope_head_dim must be a multiple of 64).
 *
 * Rounding points (Rt(v) = round float v to T and back; every op below is in float unless said):
 *   sum of squares ss: the squares in double, summed in the fixed order of sixteen lanes (lane j
 *     takes channels j, j+16, ... in order; then lanes j and j+8, j and j+4, j and j+2, j and j+1
 *     are added), the total rounded to float. (The CUDA reference sums in float, in another
 *     order; the difference is far below the tolerances.)
 *   query, per (token, head): r = Rt(1 / sqrtf(ss / head_dim + epsilon)); q[c] = Rt(q[c] * r).
 *   kv, per token: r = 1 / sqrtf(ss / head_dim + epsilon) (not rounded);
 *     k[c] = Rt((k[c] * r) * w[c]).
 *   rotation of the tail channels t in [0, rope_head_dim) (channel nope + t), x = the rounded
 *     values above, tables in float, W = double as in the Arithmetic section:
 *       y[t] = x[t]*cos[t] + (t odd ? x[t-1] : -x[t+1]) * sin[t]    (partner from t's parity)
 *   fp8 (kv only, simulate_fp8 = 1) on the leading nope channels, blocks of 64:
 *     amax = max |k|; ratio = max(amax / 448, 1e-30f);
 *     scale = amax > 0 ? 2^ceil(logf(ratio) / 0.69314718f) : 1;
 *     k' = Rt(e4m3(clamp(k / scale, -448, 448)) * scale), e4m3 = round to the FP8-E4M3FN grid,
 *     ties to even (exponent floor -6, subnormal step 2^-9).
 *   everything is stored as T.
 */
typedef struct ropekit_qknorm_rotary_embedding_attrs {
    int64_t num_heads;
    int64_t head_dim;
    int64_t rope_head_dim; /* default 0 */
    float epsilon;         /* default 1e-6 */
    int64_t simulate_fp8;  /* default 1 */
} ropekit_qknorm_rotary_embedding_attrs;
#define ROPEKIT_QKNORM_ROTARY_EMBEDDING_ATTRS_INIT {0, 0, 0, 1e-6f, 1}

ROPEKIT_API ropekit_status ropekit_qknorm_rotary_embedding(
    const ropekit_tensor *query, const ropekit_tensor *kv, const ropekit_tensor *kv_norm_weight,
    const ropekit_tensor *cos, const ropekit_tensor *sin,
    const ropekit_qknorm_rotary_embedding_attrs *attrs, const ropekit_tensor *query_out,
    const ropekit_tensor *kv_out);

/* ---- 3.5 com.microsoft.InverseRotaryRegroup ------------------------------------------------
 *
 *   input   T (N, num_heads*head_dim)   attention output, one row per token
 *   cos,sin M = float32 (N, rope_head_dim)
 *   out     T (num_groups, N, group_dim), group_dim = num_heads*head_dim / num_groups
 * Each head's tail channels are rotated back (inverse of 3.4's rotation, partner from parity):
 *     y[t] = x[t]*cos[t] + (t odd ? -x[t-1] : x[t+1]) * sin[t]
 * in W = double for float32 x (one rounding) and W = double then float then T for 16-bit x;
 * other channels are copied bit-exactly. Flat channel f = head*head_dim + c goes to
 * out[f / group_dim][n][f % group_dim]. rope_head_dim = 0 is a pure regroup. num_groups must
 * divide num_heads*head_dim. out may not overlap input (the regroup moves elements).
 */
typedef struct ropekit_inverse_rotary_regroup_attrs {
    int64_t num_heads;
    int64_t head_dim;
    int64_t rope_head_dim; /* default 0 */
    int64_t num_groups;    /* default 1 */
} ropekit_inverse_rotary_regroup_attrs;
#define ROPEKIT_INVERSE_ROTARY_REGROUP_ATTRS_INIT {0, 0, 0, 1}

ROPEKIT_API ropekit_status ropekit_inverse_rotary_regroup(
    const ropekit_tensor *input, const ropekit_tensor *cos, const ropekit_tensor *sin,
    const ropekit_inverse_rotary_regroup_attrs *attrs, const ropekit_tensor *out);

/* ============================================================================================
 * 4. cos/sin tables
 *
 * Two steps, as models do it: rope parameters -> inv_freq (h float32 values) and an attention
 * factor; inv_freq -> tables. For bit parity with an exported model, skip step 1 and take the
 * model's own inv_freq (an initializer in exported graphs).
 * ========================================================================================== */

typedef enum ropekit_rope_type {
    ROPEKIT_ROPE_DEFAULT = 0,  /* inv_i = theta^(-2i/d) */
    ROPEKIT_ROPE_LINEAR = 1,   /* inv_i / factor */
    ROPEKIT_ROPE_DYNAMIC = 2,  /* dynamic NTK: depends on the sequence length; always refused */
    ROPEKIT_ROPE_YARN = 3,
    ROPEKIT_ROPE_LONGROPE = 4,
    ROPEKIT_ROPE_LLAMA3 = 5
} ropekit_rope_type;

/** Rope parameters, named as in Hugging Face configs (`rope_parameters` in transformers 5.x,
 *  `rope_scaling` in 4.x). Unused fields are ignored; 0 means "not given" for the optional ones. */
typedef struct ropekit_rope_config {
    ropekit_rope_type rope_type;
    int64_t rotary_dim;     /* d = int(head_dim * partial_rotary_factor); even, > 0 */
    double rope_theta;      /* base, > 0 (default 10000 is NOT assumed: give it) */
    int64_t max_position_embeddings;          /* longrope: with original_*, gives its factor */
    double factor;                            /* linear, yarn, longrope, llama3 */
    int64_t original_max_position_embeddings; /* yarn, longrope, llama3 */
    double attention_factor;                  /* 0: the type's default */
    double beta_fast, beta_slow;              /* yarn; 0: 32 and 1 */
    double mscale, mscale_all_dim;            /* yarn (DeepSeek); 0: not given */
    int32_t truncate;                         /* yarn; 1 (default in HF) floors/ceils the ramp */
    double low_freq_factor, high_freq_factor; /* llama3 */
    const double *long_factor;                /* longrope: d/2 values each */
    const double *short_factor;
} ropekit_rope_config;

/** Compute inv_freq (rotary_dim/2 float32 values, written to inv_freq[0 .. inv_freq_len)) and the
 *  attention factor. seq_len only matters for longrope (long factors when seq_len >
 *  original_max_position_embeddings, short otherwise; pass 0 for "short"). The maths is done in
 *  double and rounded once; Hugging Face computes in float32, so values can differ from theirs in
 *  the last bits. inv_freq_len must equal rotary_dim/2. */
ROPEKIT_API ropekit_status ropekit_rope_inv_freq(const ropekit_rope_config *config,
                                                 int64_t seq_len, float *inv_freq,
                                                 int64_t inv_freq_len, float *attention_factor);

typedef enum ropekit_angle_mode {
    /* As exported graphs compute it: angle = float(float(p) * inv) (one float32 rounding),
     * c = float(cos(angle)) * float(attention_factor) in float32, then rounded to T.
     * Reproduces Hugging Face / ONNX graph tables to within the last bit of cos. */
    ROPEKIT_ANGLE_GRAPH = 0,
    /* angle = p * inv in double, c = cos(angle) * attention_factor in double, rounded once to T. */
    ROPEKIT_ANGLE_ACCURATE = 1
} ropekit_angle_mode;

/** Fill cos_table and sin_table, each 2D (P, h) of float32, float16 or bfloat16 (same dtype and
 *  shape, strided views allowed), with rows for positions 0 .. P-1 built from inv_freq[0 .. h). */
ROPEKIT_API ropekit_status ropekit_rope_cos_sin_table(const float *inv_freq, int64_t inv_freq_len,
                                                      float attention_factor,
                                                      ropekit_angle_mode mode,
                                                      const ropekit_tensor *cos_table,
                                                      const ropekit_tensor *sin_table);

/** ai.onnx.RotaryEmbedding (3.1) without tables: the cos/sin of each token are computed from its
 *  position id, exactly as ROPEKIT_ANGLE_ACCURATE would have tabulated them in float32 —
 *  cos(p * inv_freq[k]) * attention_factor in double, rounded once to float32 — so the result is
 *  bit for bit that of ropekit_rotary_embedding with such a float32 table. No table means no
 *  table length: any position id p with |p| <= 2^53 is valid (negative ids rotate backwards).
 *  position_ids (B, S) is required; inv_freq_len must be rotary_embedding_dim/2 (or H/2).
 *  Costs h cosine/sine evaluations per token (a table is faster when it fits): the option for
 *  long contexts where no table of the right length exists, or exact angles are wanted. */
ROPEKIT_API ropekit_status ropekit_rotary_embedding_on_the_fly(
    const ropekit_tensor *x, const float *inv_freq, int64_t inv_freq_len, float attention_factor,
    const ropekit_tensor *position_ids, const ropekit_rotary_embedding_attrs *attrs,
    const ropekit_tensor *y);

/* ============================================================================================
 * 5. CPU variants and threads
 *
 * Variants. Each operator has a scalar reference ("ref") and SIMD variants ("avx2": AVX2 + FMA +
 * F16C; "avx512": AVX-512 F/BW/VL; on AArch64 "neon"). All give the same bits for every input
 * (see Arithmetic), so the choice only changes speed. (One reservation: a NaN result is a NaN
 * in every variant, but its sign and payload are not specified; IEEE 754 leaves them open, and
 * so do compilers.) The best variant the CPU and OS support is chosen at the first call; the
 * environment variable ROPEKIT_CPU_VARIANT=ref|avx2|avx512|neon, read then, overrides it (an
 * unknown or unsupported name falls back to the best one). Uncommon layouts (innermost stride
 * != 1, a regroup whose groups split a head) run the reference code in every variant. Large
 * outputs (calls writing 24 MiB or more in all, out of place) are written with streaming stores,
 * as memcpy writes large copies (rows that do not start on a cache line through an aligned
 * window in L1; same bits).
 *
 * Threads. A call is split by token (batch x sequence rows; the regroup's input rows) into
 * contiguous ranges, so results never depend on the thread count. ropekit keeps a small pool
 * of persistent threads, created at the first call that needs them. Cost model: a split costs a
 * thread wake-up, the claims and a final join (a few microseconds), so calls that move less than
 * 512 KiB (a few tens of microseconds of one-thread work) run on the calling thread alone (a
 * decode step pays no wake-up). Larger calls are cut into a few chunks per thread that the
 * caller and the woken threads claim one at a time: when another process holds a core, its
 * thread wakes late, finds the chunks taken, and the caller has done the work alone, so a split
 * call is not slower than a one-thread call by more than the wake-up. A worker that has just run
 * a chunk polls for the next call for 20 microseconds before it sleeps (back-to-back calls then
 * pay no wake-up; a split call keeps the other cores busy that much longer), and the caller polls
 * for the chunks it waits on. Streaming stores are chosen for the whole call, not per chunk. One
 * call at a time uses the pool; a call made while another holds it runs on its caller's thread.
 * ========================================================================================== */

/** Name of the variant in use: "ref", "avx2", "avx512" or "neon". Never NULL. */
ROPEKIT_API const char *ropekit_cpu_variant(void);

/** Use variant `name` ("ref", "avx2", "avx512", "neon", or "auto" for the best supported) for
 *  the following calls, process-wide (meant for tests and benchmarks). Errors: NULL_POINTER,
 *  INVALID_ATTRIBUTE (unknown name), UNSUPPORTED (not built for this architecture, or this CPU
 *  or OS cannot run it); on error nothing changes. */
ROPEKIT_API ropekit_status ropekit_set_cpu_variant(const char *name);

/** Threads used by the following large calls, the caller's included, process-wide. Default 1:
 *  the caller decides. n must be in [1, 256] (INVALID_ATTRIBUTE otherwise). */
ROPEKIT_API ropekit_status ropekit_set_num_threads(int n);
ROPEKIT_API int ropekit_get_num_threads(void);

/** Let a host thread pool run the work instead of ropekit's pool.
 *
 *  When `fn` is set (process-wide; NULL restores ropekit's own pool), every call large enough
 *  to split calls fn(host_ctx, n, task, task_ctx) once, on the caller's thread, with n >= 2 work
 *  items (tokens). fn must call task(task_ctx, begin, end) for ranges that together cover
 *  [0, n) exactly once — any split, from any threads, concurrently or not — and return only
 *  when all of them have returned. The results are the same for every split. The thread count
 *  of ropekit_set_num_threads is then not used. Set it before making calls, not during one. */
typedef void (*ropekit_task_fn)(void *task_ctx, int64_t begin, int64_t end);
typedef void (*ropekit_parallel_for_fn)(void *host_ctx, int64_t n, ropekit_task_fn task,
                                        void *task_ctx);
ROPEKIT_API ropekit_status ropekit_set_parallel_for(ropekit_parallel_for_fn fn, void *host_ctx);

#ifdef __cplusplus
}
#endif

#endif /* ROPEKIT_H */
