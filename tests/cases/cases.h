/*
 * cases.h — reader for the shared correctness vectors tests/cases/<op>.bin (format:
 * tests/cases/README.md), written by scripts/make_shared_cases.py.
 *
 * Every backend runs the same cases and compares its outputs with the CPU reference:
 *
 *     rk_case_file f;
 *     char err[256];
 *     if (rk_cases_load(RK_CASES_DIR "/rotary_embedding.bin", &f, err, sizeof err) != 0) {
 *         fprintf(stderr, "%s\n", err);
 *         return 1;
 *     }
 *     for (size_t i = 0; i < f.count; ++i) {
 *         const rk_case *c = &f.cases[i];
 *         ropekit_tensor want[RK_CASE_MAX_OUTPUTS], got[RK_CASE_MAX_OUTPUTS];
 *         rk_case_alloc_outputs(c, want);          // host buffers, shapes of the op's outputs
 *         rk_case_run_cpu(c, want);                // the CPU library
 *         ...run the backend on c->inputs / c->attrs, read its outputs back into got...
 *         for (int k = 0; k < c->n_outputs; ++k)   // bit for bit (or the backend's tolerance)
 *             memcmp(want[k].data, got[k].data, rk_tensor_nbytes(&want[k]));
 *         rk_case_free_outputs(c, want);
 *     }
 *     rk_cases_free(&f);
 *
 * The loader reads the whole file, checks its CRC-32 trailer, and validates every count, dtype,
 * rank, shape and size against the bytes that remain, so a truncated or corrupt file is an error
 * message, never an out-of-bounds read. Each present input gets its own heap buffer (aligned for
 * its element type) and a contiguous ropekit_tensor view; absent optional inputs have data NULL
 * and present[i] = 0. Only libc and the ropekit.h types are used (the CPU library itself only by
 * rk_case_run_cpu). Nothing here is thread-safe against concurrent frees; loading is reentrant.
 */
#ifndef ROPEKIT_TEST_CASES_H
#define ROPEKIT_TEST_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "ropekit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Operator codes: the u32 after the magic, and the file names (rk_case_op_name). */
typedef enum rk_case_op {
    RK_OP_ROTARY_EMBEDDING = 0,        /* ropekit_rotary_embedding */
    RK_OP_MS_ROTARY_EMBEDDING = 1,     /* ropekit_ms_rotary_embedding */
    RK_OP_MROTARY_EMBEDDING = 2,       /* ropekit_mrotary_embedding */
    RK_OP_QKNORM_ROTARY_EMBEDDING = 3, /* ropekit_qknorm_rotary_embedding */
    RK_OP_INVERSE_ROTARY_REGROUP = 4,  /* ropekit_inverse_rotary_regroup */
    RK_OP_COUNT = 5
} rk_case_op;

#define RK_CASE_MAX_INPUTS 5
#define RK_CASE_MAX_OUTPUTS 2

/* One case: the operator's attributes and inputs, in the C API's argument order. */
typedef struct rk_case {
    rk_case_op op;
    size_t index;  /* position in the file, from 0 */
    size_t offset; /* byte offset of the case record in the file */
    union {
        ropekit_rotary_embedding_attrs rotary;         /* RK_OP_ROTARY_EMBEDDING */
        ropekit_ms_rotary_embedding_attrs ms;          /* RK_OP_MS_ROTARY_EMBEDDING */
        ropekit_mrotary_embedding_attrs mrope;         /* RK_OP_MROTARY_EMBEDDING */
        ropekit_qknorm_rotary_embedding_attrs qknorm;  /* RK_OP_QKNORM_ROTARY_EMBEDDING */
        ropekit_inverse_rotary_regroup_attrs regroup;  /* RK_OP_INVERSE_ROTARY_REGROUP */
    } attrs;
    int n_inputs;                               /* 4, 4, 4, 5, 3 by op */
    int present[RK_CASE_MAX_INPUTS];            /* 0: absent optional input */
    ropekit_tensor inputs[RK_CASE_MAX_INPUTS];  /* contiguous host views; data NULL when absent */
    size_t input_offset[RK_CASE_MAX_INPUTS];    /* byte offset of each tensor record in the file */
    int n_outputs;                              /* 1, or 2 for QKNorm (query_out, kv_out) */
    ropekit_tensor outputs[RK_CASE_MAX_OUTPUTS]; /* dtype and shape of each output; data NULL */
} rk_case;

typedef struct rk_case_file {
    rk_case_op op;
    size_t count;
    rk_case *cases;
} rk_case_file;

/* "rotary_embedding", "ms_rotary_embedding", "mrotary_embedding", "qknorm_rotary_embedding",
 * "inverse_rotary_regroup" (the file stems), "invalid" otherwise. */
const char *rk_case_op_name(rk_case_op op);

/* Name of input i of an operator as in ropekit.h ("x", "cos_cache", ...), "?" if out of range. */
const char *rk_case_input_name(rk_case_op op, int i);

/* Name of output i of an operator ("y"; "query_out", "kv_out"; "out"), "?" if out of range. */
const char *rk_case_output_name(rk_case_op op, int i);

/* Load a case file. Returns 0 on success (*out filled in; free it with rk_cases_free), -1 on
 * failure: *out is left empty and err (if not NULL) holds a message naming the file, the case
 * and the byte offset. */
int rk_cases_load(const char *path, rk_case_file *out, char *err, size_t errlen);

/* The same from memory (size bytes at data; the data is copied, not kept). */
int rk_cases_load_memory(const void *data, size_t size, rk_case_file *out, char *err,
                         size_t errlen);

/* Free everything rk_cases_load allocated; *f is left empty. NULL and empty files are fine. */
void rk_cases_free(rk_case_file *f);

/* CRC-32 (IEEE 802.3, the same as zlib.crc32) of n bytes: the files' trailer. */
uint32_t rk_cases_crc32(const void *data, size_t n);

/* Bytes of a contiguous tensor: product of the shape times the element size. */
size_t rk_tensor_nbytes(const ropekit_tensor *t);

/* Allocate zero-filled contiguous host buffers for the case's outputs (c->outputs' dtypes and
 * shapes): y for the rotary operators; query_out (B, S, num_heads, head_dim) and kv_out
 * (B, S, head_dim) for QKNorm; out (num_groups, N, group_dim) for the regroup. Returns the
 * number of outputs, or -1 when out of memory (nothing left allocated). */
int rk_case_alloc_outputs(const rk_case *c, ropekit_tensor out[RK_CASE_MAX_OUTPUTS]);

/* Free buffers from rk_case_alloc_outputs (their data pointers are set to NULL). */
void rk_case_free_outputs(const rk_case *c, ropekit_tensor out[RK_CASE_MAX_OUTPUTS]);

/* Run the case on the CPU library (the variant currently selected with
 * ropekit_set_cpu_variant), writing into out[0 .. c->n_outputs), caller-provided tensors of the
 * outputs' dtypes and shapes (any strides). Returns the library's status. */
ropekit_status rk_case_run_cpu(const rk_case *c, const ropekit_tensor *out);

/* A one-line description for failure messages, e.g.
 * "rotary_embedding #12: x float16 [2,3,4,8], cos_cache float32 [40,4], ..., interleaved=1 ...".
 * Always NUL-terminates buf (when buflen > 0); returns buf. */
char *rk_case_describe(const rk_case *c, char *buf, size_t buflen);

#ifdef __cplusplus
}
#endif

#endif /* ROPEKIT_TEST_CASES_H */
