/* The `ropekit fuse` subcommand (tools/cmd_fuse.c). */
#ifndef ROPEKIT_CMD_FUSE_H
#define ROPEKIT_CMD_FUSE_H

#define ROPEKIT_FUSE_ARGS                                                                          \
    "IN.onnx OUT.onnx [--fixed-table] [--max-positions N] [--config FILE] "                        \
    "[--target ort|onnx|ropekit] [--json] [--dry-run] [--external-data[=BYTES]]"
#define ROPEKIT_FUSE_SUMMARY                                                                       \
    "Replace the RoPE subgraphs of a model with fused com.microsoft.RotaryEmbedding /\n"           \
    "MRotaryEmbedding nodes (ai.onnx.RotaryEmbedding with --target onnx, opset >= 23\n"            \
    "models only). By default the fused node reads the graph's own per-call cos/sin\n"             \
    "rows (no table, no position limit, any angle source). --fixed-table builds tables\n"          \
    "from the model's own inv_freq instead; their length is --max-positions (implies\n"            \
    "it), else from --config (implies it) or a config.json next to the model (IN's\n"              \
    "stem + .config.json, then config.json), else 4096 with a warning. Prints each\n"              \
    "site (fused, or skipped with the reason), every Cos/Sin value left unfused with\n"            \
    "its reason, and node counts; --json for programs; warnings on stderr. Every site\n"           \
    "is checked numerically (original subgraph vs fused op on probe inputs) first.\n"              \
    "The input is never modified; the output is written atomically, only over a\n"                 \
    "regular file (or through a symbolic link to one), keeping its mode. Weights in\n"             \
    "external data are copied into OUT.data when OUT is in another directory;\n"                   \
    "--external-data[=BYTES] also moves initializers of >= BYTES (1024) there.\n"                  \
    "Exit status: 0 done, 1 error, 2 usage, 3 RoPE sites found but none fused\n"                   \
    "(with --dry-run: none fusable); the output is still written."

/* --external-data without a value: initializers of at least this many bytes (onnx's default) */
#define ROPEKIT_FUSE_EXTERNAL_MIN_BYTES 1024

int ropekit_cmd_fuse(int argc, char **argv);

#endif
