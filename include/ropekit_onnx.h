/*
 * ropekit_onnx.h — ONNX model I/O and inspection, for the `ropekit` command line tool.
 *
 * Built only when the library is configured with ROPEKIT_ONNX (needs protobuf-c); link the
 * static library ropekit_onnx (which brings ropekit_static and libprotobuf-c).
 *
 * Conventions (as in ropekit.h):
 *   - Every function that can fail returns ropekit_status (ROPEKIT_OK = 0) and sets the
 *     thread-local message read by ropekit_last_error(), e.g.
 *     "model.onnx: truncated: field 7 at byte 1234 needs 5000 bytes, 312 left".
 *   - ROPEKIT_ERROR_IO: the operating system refused (open, read, write, rename, mmap).
 *     ROPEKIT_ERROR_PARSE: the bytes are not a well-formed ONNX model, or the model contradicts
 *     itself (a tensor whose data size disagrees with its dims, a node input that nothing
 *     produces, an external data location outside the model directory, ...).
 *     ROPEKIT_ERROR_OVERFLOW: a size that cannot be represented (a model over 2 GiB, dims whose
 *     product overflows). ROPEKIT_ERROR_OUT_OF_MEMORY, ROPEKIT_ERROR_NULL_POINTER as usual.
 *   - Malformed input never crashes or reads out of bounds: every file is treated as hostile.
 *   - Objects are not shared between threads unless only read; different objects are
 *     independent. The library never prints.
 */
#ifndef ROPEKIT_ONNX_H
#define ROPEKIT_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "ropekit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================
 * 1. Models
 * ========================================================================================== */

/** A loaded ONNX model: the whole ModelProto in memory, including fields this build's schema
 *  does not know (they are kept byte for byte and written back), metadata, value_info and
 *  external data references. Tensor bytes stored in external files are NOT read by loading. */
typedef struct ropekit_model ropekit_model;

/** Load the .onnx file at `path` (at most 2 GiB; larger models keep weights in external data).
 *  On success *out owns the model (free with ropekit_model_free); on failure *out is NULL.
 *  External data locations are resolved against the directory of `path`.
 *  Checks, beyond the protobuf wire format: nesting depth (<= 100 messages), every node has an
 *  op_type, every tensor's dims are >= 0 and their product fits, inline data sizes match the
 *  dims and element type, external data entries have a location and integer offset/length. */
ROPEKIT_API ropekit_status ropekit_model_load(const char *path, ropekit_model **out);

/** As ropekit_model_load, from `size` bytes at `data` (copied; the caller keeps `data`).
 *  `base_dir` is the directory external data locations are relative to, or NULL: then reading
 *  external tensor bytes fails with ROPEKIT_ERROR_IO. */
ROPEKIT_API ropekit_status ropekit_model_load_from_memory(const void *data, size_t size,
                                                          const char *base_dir,
                                                          ropekit_model **out);

/** Free a model and everything it owns. NULL is allowed. */
ROPEKIT_API void ropekit_model_free(ropekit_model *model);

/** Serialize to a new buffer: *data (free with ropekit_onnx_free) of *size bytes. A model that
 *  was loaded and not changed serializes to the bytes it was read from whenever those bytes
 *  were canonical (fields in number order, as every protobuf library writes them).
 *  ROPEKIT_ERROR_OVERFLOW if the result would exceed 2 GiB (the protobuf limit). */
ROPEKIT_API ropekit_status ropekit_model_serialize(const ropekit_model *model, void **data,
                                                   size_t *size);

/** Write the model to `path` atomically: a temporary file DIR/.ropekit-PID-N.tmp in the
 *  destination's directory (a short hidden name, so any output name up to NAME_MAX works),
 *  fsync, then rename over `path`; on any failure the temporary file is removed and `path` is
 *  untouched. Same as ropekit_model_save_with(model, path, NULL).
 *
 *  Destinations: only regular files are ever replaced. A symbolic link to a regular file is
 *  written through (the file it points to is replaced, the link stays); a dangling link, a link
 *  to anything else, a directory, a device (/dev/stdout, ...), a FIFO or a socket is refused
 *  with ROPEKIT_ERROR_IO and nothing is written. A replaced file keeps its permission bits, and
 *  its owner and group where the process may set them; a new file gets 0666 minus the umask.
 *
 *  External data: when the output is in the directory the model was loaded from, the external
 *  references are kept as they are. Otherwise every external tensor of the main graph is copied
 *  into a new file OUT.data beside the output (OUT is the output's file name) and the output
 *  references only that file: never a location that leaves its directory. External tensors
 *  inside subgraphs, Constant nodes or sparse initializers are not copied (ROPEKIT_ERROR_UNSUPPORTED
 *  for another directory). OUT.data is written like the model (temporary file, rename), before
 *  it.
 *
 *  Temporary files: a process killed while saving leaves DIR/.ropekit-PID-N.tmp; the next save
 *  into DIR removes those whose PID is not a running process. Programs that want them removed
 *  on SIGINT/SIGTERM/SIGHUP call ropekit_onnx_remove_temp_files from their handler.
 *
 *  Refused (nothing written):
 *    - output over 2 GiB (ROPEKIT_ERROR_OVERFLOW; move large initializers to external data);
 *    - `path` (or OUT.data) is the file the model was loaded from, or one of its external data
 *      files (ROPEKIT_ERROR_IO: the input is never modified). */
ROPEKIT_API ropekit_status ropekit_model_save(const ropekit_model *model, const char *path);

typedef struct ropekit_save_options {
    /* 0: inline initializers stay inline. N > 0: every main-graph initializer with at least N
     * bytes of raw data is written to OUT.data instead (as onnx.save_model's size_threshold). */
    int64_t external_min_bytes;
} ropekit_save_options;
#define ROPEKIT_SAVE_OPTIONS_INIT {0}

/** ropekit_model_save with options (NULL: the defaults). The model itself is not changed. */
ROPEKIT_API ropekit_status ropekit_model_save_with(const ropekit_model *model, const char *path,
                                                   const ropekit_save_options *options);

/** Unlink the temporary files of saves in progress in this process. Async-signal-safe: meant
 *  for SIGINT/SIGTERM/SIGHUP handlers (the `ropekit` tool installs them); the interrupted save
 *  then fails or its rename finds no file. */
ROPEKIT_API void ropekit_onnx_remove_temp_files(void);

/** Free memory returned by this header's functions (serialized bytes, formatted text). */
ROPEKIT_API void ropekit_onnx_free(void *p);

/* ============================================================================================
 * 2. Tensor bytes (inline or external)
 * ========================================================================================== */

/** The stored bytes of one tensor: little-endian elements, row-major. `data` points into the
 *  model (inline raw_data: valid while the model lives and is not changed) or into a read-only
 *  mapping of the external file (valid until ropekit_tensor_bytes_release). */
typedef struct ropekit_tensor_bytes {
    const void *data;
    size_t size;
    void *map_base_; /* private */
    size_t map_len_; /* private */
} ropekit_tensor_bytes;

/** The raw bytes of the top-level initializer `name`. Only raw_data and external data have a
 *  byte form: a tensor stored in typed fields (float_data, ...) gives ROPEKIT_ERROR_UNSUPPORTED.
 *  External data: only this tensor's range of its file is mapped. The location must be relative,
 *  must not leave the model directory through '..' (symbolic links are followed, as Hugging Face
 *  caches need), offset + length must lie within the file (no length: up to its end) and the
 *  length must be what the dims and element type need; otherwise ROPEKIT_ERROR_PARSE. A model
 *  loaded from memory without base_dir cannot read external bytes (ROPEKIT_ERROR_IO).
 *  A file that is shortened while mapped can still raise SIGBUS: keep model files stable. */
ROPEKIT_API ropekit_status ropekit_model_initializer_bytes(const ropekit_model *model,
                                                           const char *name,
                                                           ropekit_tensor_bytes *out);

/** Release a mapping made by ropekit_model_initializer_bytes (a no-op for inline bytes). */
ROPEKIT_API void ropekit_tensor_bytes_release(ropekit_tensor_bytes *bytes);

/* ============================================================================================
 * 3. Inspection
 *
 * All strings point into the model (or the info): valid until the model is freed or changed,
 * or the info is freed. A name the file does not give is "".
 * ========================================================================================== */

typedef struct ropekit_onnx_opset {
    const char *domain; /* "" is ai.onnx */
    int64_t version;
} ropekit_onnx_opset;

typedef struct ropekit_onnx_op_count {
    const char *domain;
    const char *op_type;
    int64_t count;
} ropekit_onnx_op_count;

typedef struct ropekit_onnx_dim {
    int64_t value;     /* >= 0 when known */
    const char *param; /* symbolic name, or NULL; value = -1 and param = NULL: unknown */
} ropekit_onnx_dim;

typedef struct ropekit_onnx_value {
    const char *name;
    const char *elem_type; /* "float32", "int64", ..., "?" when not a tensor or not given */
    int32_t rank;          /* -1: shape not given */
    const ropekit_onnx_dim *dims;
} ropekit_onnx_value;

typedef struct ropekit_onnx_external_file {
    const char *location; /* as written in the model */
    int64_t tensors;
    int64_t bytes; /* sum of the tensors' lengths (from `length`, else dims x element size) */
    /* NULL, or why reading it fails: "is an absolute path", "leaves the model directory",
     * "is missing (No such file or directory)", "is a FIFO, not a regular file", "has 10 bytes,
     * its tensors need 56", ... (the file is looked at, never read) */
    const char *problem;
} ropekit_onnx_external_file;

typedef struct ropekit_onnx_attr {
    const char *name;
    char kind;     /* 'i' int, 'f' float, 's' string, 'I' ints, 'F' floats, '?' other */
    int64_t i;     /* 'i' */
    double f;      /* 'f' */
    const char *s; /* 's' (NUL-terminated copy; bytes after an embedded NUL are dropped) */
    size_t n;      /* 'I', 'F': count */
    const int64_t *ints;
    const float *floats;
} ropekit_onnx_attr;

/** A node that already is a fused rotary embedding: op_type RotaryEmbedding or
 *  MRotaryEmbedding (any domain), anywhere in the model (subgraphs included). */
typedef struct ropekit_onnx_rotary_node {
    const char *name, *domain, *op_type;
    size_t n_inputs, n_outputs, n_attrs;
    const char *const *inputs;
    const char *const *outputs;
    const ropekit_onnx_attr *attrs;
} ropekit_onnx_rotary_node;

typedef struct ropekit_model_info {
    int64_t ir_version; /* -1 if not given */
    const char *producer_name, *producer_version, *graph_name;
    size_t n_opsets;
    const ropekit_onnx_opset *opsets;
    size_t n_metadata;
    const char *const *metadata_keys;
    const char *const *metadata_values;
    int64_t n_nodes;          /* top-level graph */
    int64_t n_subgraph_nodes; /* inside If/Loop/Scan bodies */
    int64_t n_functions;      /* model-local functions */
    size_t n_op_counts;       /* by (domain, op_type), top-level graph, most frequent first */
    const ropekit_onnx_op_count *op_counts;
    int64_t n_initializers;    /* top-level, dense and sparse */
    int64_t initializer_bytes; /* inline bytes of their data */
    int64_t external_bytes;    /* bytes they keep in external files */
    size_t n_external_files;
    const ropekit_onnx_external_file *external_files;
    size_t n_inputs; /* graph inputs that are not initializers */
    const ropekit_onnx_value *inputs;
    size_t n_outputs;
    const ropekit_onnx_value *outputs;
    size_t n_rotary;
    const ropekit_onnx_rotary_node *rotary;
} ropekit_model_info;

/** Summarize a model. Checks the graph first (every node input is produced by a node, a graph
 *  input or an initializer, in this graph or an enclosing one; no value is defined twice):
 *  ROPEKIT_ERROR_PARSE otherwise. *out is freed with ropekit_model_info_free. */
ROPEKIT_API ropekit_status ropekit_model_inspect(const ropekit_model *model,
                                                 ropekit_model_info **out);
ROPEKIT_API void ropekit_model_info_free(ropekit_model_info *info);

typedef enum ropekit_onnx_format {
    ROPEKIT_ONNX_FORMAT_TEXT = 0, /* for people; non-printable bytes in names shown as \xNN */
    ROPEKIT_ONNX_FORMAT_JSON = 1  /* one JSON object, valid UTF-8 (invalid bytes become U+FFFD) */
} ropekit_onnx_format;

/** Format an info as text or JSON into a new NUL-terminated string *text (free with
 *  ropekit_onnx_free). The output is deterministic: golden tests compare it byte for byte. */
ROPEKIT_API ropekit_status ropekit_model_info_format(const ropekit_model_info *info,
                                                     ropekit_onnx_format format, char **text);

#ifdef __cplusplus
}
#endif

#endif /* ROPEKIT_ONNX_H */
