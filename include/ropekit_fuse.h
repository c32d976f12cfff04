/*
 * ropekit_fuse.h — find RoPE subgraphs in an ONNX model and replace them with fused nodes.
 *
 * What is recognized (see src/onnx/match_*.c for the exact shapes):
 *   - rotations: half-split "rotate_half" (LLaMA, Mistral, Qwen2/3, Gemma, Phi-3, GPT-NeoX, ...),
 *     full or partial width (Slice/Concat around the rotation, Phi, GPT-NeoX), x in
 *     (B, N, S, H) or (B, S, N, H) layout;
 *   - angle sources: on-the-fly position_ids * inv_freq (elementwise Mul as torch.onnx dynamo
 *     exports of transformers 5.x write it, or MatMul + Transpose as TorchScript / 4.x), then
 *     Concat(freqs, freqs), Cos/Sin, an optional constant attention-scaling Mul and Casts;
 *   - M-RoPE with sections (Qwen2-VL, Qwen2.5-VL) -> com.microsoft.MRotaryEmbedding.
 * Every structure and constant is verified (slice bounds, axes, the Neg on the right half, the
 * same tensor on every path, equal cos/sin sources); names are never used for matching.
 *
 * The fused node's cos/sin: by default the graph's own per-call rows (see max_positions below:
 * no table length, no position cliff, any angle source); with a fixed table (max_positions),
 * tables built from the graph's own inv_freq and scaling with the graph's arithmetic
 * (ROPEKIT_ANGLE_GRAPH: float32 angle), stored in the activation type, one pair per angle source.
 * Every site is then checked numerically: its original subgraph is evaluated on probe inputs
 * (src/onnx/eval.c) and compared with the fused operator (ropekit's CPU reference) on the same
 * inputs; a mismatch, or a subgraph that cannot be evaluated, refuses the site. Refused, with
 * the reason, leaving the site as it was: structures that do not verify, unknown head counts
 * where the fused op needs them; in fixed-table mode also inv_freq computed at run time (graph
 * input, dynamic NTK, longrope short/long switching by a Where).
 * Trailing-channel rotations ([nope | rope], DeepSeek-V4) and one key head broadcast to all
 * heads (MLA) are not matched: com.microsoft.RotaryEmbedding rotates leading channels of every
 * head; such Cos/Sin are reported as unfused.
 */
#ifndef ROPEKIT_FUSE_H
#define ROPEKIT_FUSE_H

#include <stdint.h>

#include "ropekit.h"
#include "ropekit_onnx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ropekit_fuse_target {
    /* com.microsoft.RotaryEmbedding / MRotaryEmbedding: runs in stock onnxruntime, no opset
     * change (the com.microsoft domain, version 1, is imported if missing). */
    ROPEKIT_FUSE_TARGET_ORT = 0,
    /* ai.onnx.RotaryEmbedding (opset 23): only when the model already imports opset >= 23;
     * otherwise the fusion is refused (ROPEKIT_ERROR_UNSUPPORTED) — bumping the opset of every
     * other node is not proven safe. M-RoPE sites still use com.microsoft.MRotaryEmbedding. */
    ROPEKIT_FUSE_TARGET_ONNX = 1,
    /* ropekit's own domain ai.ropekit (MsRotaryEmbedding, MRotaryEmbedding, QKNormRotaryEmbedding,
     * InverseRotaryRegroup): bounds-checked, bfloat16; needs libropekit_ort. */
    ROPEKIT_FUSE_TARGET_ROPEKIT = 2
} ropekit_fuse_target;
/* DeepSeek-V4 attention (q/kv norm + RoPE, output inverse rotation + group reshape) is fused into
 * QKNormRotaryEmbedding / InverseRotaryRegroup (com.microsoft for ort and onnx, ai.ropekit for
 * ropekit), which only libropekit_ort runs: the report says so and the model's metadata gets
 * "ropekit.requires" = "libropekit_ort". */

/* Default table length when neither the caller nor a config.json gives one (a warning says so). */
#define ROPEKIT_FUSE_DEFAULT_MAX_POSITIONS 4096

/* max_positions value: a fixed table whose length comes from the config (else the default). */
#define ROPEKIT_FUSE_TABLE_FROM_CONFIG (-1)

typedef struct ropekit_fuse_options {
    /* How the fused node gets its cos/sin:
     *   0 (default): per-call rows. The fused node reads the graph's own cos/sin for this call
     *     (the tensors that multiply x and rot(x), cut to their R/2 distinct columns and reshaped
     *     to (rows, R/2)) with an identity position index (Range, reshaped to (B, S)). Whatever
     *     computes them — inv_freq on the fly (batch-expanded, cast, tiled), a Gather from a
     *     precomputed cache, a Where, longrope's switch, past-length offsets — stays in the graph
     *     and runs as before, so every position the original accepts works, at the original's cost
     *     for the angles. Verified numerically per site (duplicated columns equal, rows per token).
     *   N > 0: a fixed table of N rows built from the graph's constant inv_freq (or the graph's
     *     own constant table); positions >= N are rejected by the fused op; sources computed at
     *     run time (dynamic NTK, longrope switching, a graph input) are refused with the reason.
     *   ROPEKIT_FUSE_TABLE_FROM_CONFIG: a fixed table of max_position_embeddings rows (times the
     *     rope scaling factor when the scaling extends the context and no separate
     *     original_max_position_embeddings is given) from config_path, else the default. */
    int64_t max_positions;
    /* A Hugging Face config.json to read max_position_embeddings from, or NULL. */
    const char *config_path;
    ropekit_fuse_target target;
    int32_t dry_run; /* 1: match and report only; the model is not changed */
    /* How the fused model will be saved, for the size check made before any table is built:
     * 0 (default): inline (ropekit_model_save), so the new cos/sin tables must fit in the 2 GiB
     * an .onnx file can hold; N > 0: with ropekit_save_options.external_min_bytes = N, so only
     * tables smaller than N bytes count towards that limit (the others go to OUT.data, which has
     * none; they must still fit in this machine's memory). */
    int64_t external_min_bytes;
} ropekit_fuse_options;
#define ROPEKIT_FUSE_OPTIONS_INIT {0, NULL, ROPEKIT_FUSE_TARGET_ORT, 0, 0}

/** The outcome of a fusion, for people (text) and programs (JSON). Opaque. */
typedef struct ropekit_fuse_report ropekit_fuse_report;

/** Find and fuse every RoPE site of the model's main graph. On success *report describes each
 *  site (fused, or skipped with the reason), node counts before and after, table bytes added.
 *  A site that cannot be fused is left untouched; that is not an error. Errors (the model is
 *  then unchanged): ROPEKIT_ERROR_UNSUPPORTED for --target onnx on an opset < 23 model,
 *  ROPEKIT_ERROR_IO/PARSE for an unreadable config, ROPEKIT_ERROR_OUT_OF_MEMORY. */
ROPEKIT_API ropekit_status ropekit_fuse(ropekit_model *model, const ropekit_fuse_options *options,
                                        ropekit_fuse_report **report);

/** Number of sites found / fused. */
ROPEKIT_API int64_t ropekit_fuse_report_sites(const ropekit_fuse_report *report);
ROPEKIT_API int64_t ropekit_fuse_report_fused(const ropekit_fuse_report *report);

/** Warnings (for stderr): a default table length, sites left unfused, Cos/Sin values left in
 *  the graph. i in [0, count); NULL otherwise. The text report does not repeat them. */
ROPEKIT_API int64_t ropekit_fuse_report_warning_count(const ropekit_fuse_report *report);
ROPEKIT_API const char *ropekit_fuse_report_warning(const ropekit_fuse_report *report, int64_t i);
/** Cos/Sin values the fusion left in the graph (each is named, with its reason, in the text and
 *  JSON reports: the site that reads it and why that site was not fused, or that no site was
 *  recognized around it). */
ROPEKIT_API int64_t ropekit_fuse_report_unfused_trig(const ropekit_fuse_report *report);
/** The exit status `ropekit fuse` uses: 3 when RoPE sites were found but none was fused (with
 *  dry_run: none is fusable), else 0 — so scripts notice a fusion that did nothing. */
ROPEKIT_API int ropekit_fuse_exit_status(const ropekit_fuse_report *report);

/** The report as text (one line per site, then totals) or JSON; free with ropekit_onnx_free. */
ROPEKIT_API ropekit_status ropekit_fuse_report_text(const ropekit_fuse_report *report, char **text);
ROPEKIT_API ropekit_status ropekit_fuse_report_json(const ropekit_fuse_report *report, char **json);

ROPEKIT_API void ropekit_fuse_report_free(ropekit_fuse_report *report);

#ifdef __cplusplus
}
#endif

#endif
