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
 * Tables are built from the graph's own inv_freq and scaling with the graph's arithmetic
 * (ROPEKIT_ANGLE_GRAPH: float32 angle), stored in the activation type. One cos/sin pair per
 * angle source is shared by all its sites. Refused, with the reason, leaving the site as it was:
 * inv_freq computed at run time (graph input, dynamic NTK, longrope short/long switching by a
 * Where), structures that do not verify, unknown head counts where the fused op needs them.
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
    ROPEKIT_FUSE_TARGET_ONNX = 1
} ropekit_fuse_target;

/* Default table length when neither the caller nor a config.json gives one (a warning says so). */
#define ROPEKIT_FUSE_DEFAULT_MAX_POSITIONS 4096

typedef struct ropekit_fuse_options {
    /* Rows of the cos/sin tables = the largest position id + 1 the model will see. 0: from the
     * config (max_position_embeddings, times the rope scaling factor when the scaling extends the
     * context and no separate original_max_position_embeddings is given), else the default. */
    int64_t max_positions;
    /* A Hugging Face config.json to read max_position_embeddings from, or NULL. */
    const char *config_path;
    ropekit_fuse_target target;
    int32_t dry_run; /* 1: match and report only; the model is not changed */
} ropekit_fuse_options;
#define ROPEKIT_FUSE_OPTIONS_INIT {0, NULL, ROPEKIT_FUSE_TARGET_ORT, 0}

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
