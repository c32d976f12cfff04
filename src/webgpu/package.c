/* webgpu_package: the generated half of the WebGPU kernel packages (build/webgpu-packages/OP/),
 * run by the build. For each operator it writes
 *   variants.json   every variant the JavaScript runner (js/ropekit-webgpu.js) can pick: its
 *                   `when` conditions, dispatch constants and WGSL file
 *   <variant>.wgsl  the variant's complete WGSL, assembled by the very functions the C host
 *                   uses (kernels.c: rk_wg_rotary_wgsl, ...) from the embedded shader sources
 *   test.json       the shared correctness vectors (tests/cases/OP.bin) as inputs plus the
 *                   CPU reference's outputs (src/cpu/ref.c), tensor data in base64
 * scripts/webgpu_package.py then merges variants.json into the operator's contract
 * (src/webgpu/ops/OP/manifest.json) and writes manifest.json and README.md.
 *
 * Usage: webgpu_package CASES_DIR OUT_DIR */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cases.h"
#include "webgpu_internal.h"

/* The packages' workgroup size: WebGPU's compatibility-mode minimum of
 * maxComputeInvocationsPerWorkgroup, so every variant runs on every adapter. */
#define PKG_WG 128u

static const char *dtype_name(ropekit_dtype d) {
    return d == ROPEKIT_FLOAT32 ? "float32" : d == ROPEKIT_FLOAT16 ? "float16" : d == ROPEKIT_BFLOAT16 ? "bfloat16" : "int64";
}

static rk_wg_kind kind_of(ropekit_dtype d, int f16) {
    return d == ROPEKIT_FLOAT32 ? RK_WG_F32 : d == ROPEKIT_BFLOAT16 ? RK_WG_BF16P : f16 ? RK_WG_F16 : RK_WG_F16P;
}
static int packed(rk_wg_kind k) { return k == RK_WG_F16P || k == RK_WG_BF16P; }
static rk_wg_kind atomic_of(rk_wg_kind k) { return k == RK_WG_F16P ? RK_WG_F16A : RK_WG_BF16A; }

static int write_text(const char *dir, const char *name, const char *text) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "webgpu_package: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs(text, f);
    return fclose(f) == 0 ? 0 : -1;
}

/* one variant: its WGSL file and its entry in variants.json */
static int emit(const char *dir, FILE *vj, int *first, const char *name, const rk_buf *wgsl,
                const char *when, const char *dispatch) {
    char file[160];
    snprintf(file, sizeof file, "%s.wgsl", name);
    if (wgsl->oom || !wgsl->p) {
        fprintf(stderr, "webgpu_package: assembling %s failed\n", name);
        return -1;
    }
    if (write_text(dir, file, wgsl->p) != 0) return -1;
    fprintf(vj, "%s\n    {\"name\": \"%s\", \"wgsl\": \"%s\", \"when\": {%s}, \"dispatch\": {%s}}",
            *first ? "" : ",", name, file, when, dispatch);
    *first = 0;
    return 0;
}

static const char *kshort(rk_wg_kind k) { return rk_wg_kind_name(k); }

/* RotaryEmbedding, com.microsoft.RotaryEmbedding, MRotaryEmbedding */
static int rotary_variants(const char *dir, FILE *vj, const uint32_t *rows, int nrows) {
    static const ropekit_dtype pairs[5][2] = {{ROPEKIT_FLOAT32, ROPEKIT_FLOAT32},
                                              {ROPEKIT_FLOAT16, ROPEKIT_FLOAT16},
                                              {ROPEKIT_FLOAT16, ROPEKIT_FLOAT32},
                                              {ROPEKIT_BFLOAT16, ROPEKIT_BFLOAT16},
                                              {ROPEKIT_BFLOAT16, ROPEKIT_FLOAT32}};
    int first = 1;
    for (int r = 0; r < nrows; ++r)
        for (int d = 0; d < 5; ++d) {
            const ropekit_dtype dt = pairs[d][0], tdt = pairs[d][1];
            const int uses_f16 = (dt == ROPEKIT_FLOAT16 || tdt == ROPEKIT_FLOAT16) && RK_WG_F16_STORAGE;
            for (int f16 = 0; f16 <= uses_f16; ++f16) {
                const rk_wg_kind xk = kind_of(dt, f16), tk = kind_of(tdt, f16);
                const rk_wg_arith ar = dt != ROPEKIT_FLOAT32 && tdt != ROPEKIT_FLOAT32 ? RK_ARITH_NARROW : RK_ARITH_EXACT32;
                /* exact32: the element kernel only. With the integer arithmetic inlined eight times
                 * per vector, the vector kernel took SwiftShader 164 s to compile (the element
                 * kernel 1-2 s); its variants then match any layout (no "kernel" condition). */
                /* vec16 variants come with the tables read as 16-byte vectors (tv: the runner's
                 * fact table_loads = "vec16", the C host's conditions in ops.c) and without */
                for (int vec = ar == RK_ARITH_NARROW; vec >= 0; --vec)
                    for (int tv = vec; tv >= 0; --tv)
                        for (int paired = 1; paired >= (vec || !packed(xk) ? 1 : 0); --paired) {
                            const rk_wg_kind yk = paired ? xk : atomic_of(xk);
                            const uint32_t sw = packed(yk) ? 2 : 1, hg = vec ? RK_WG_ROTARY_HG_VEC : RK_WG_ROTARY_HG;
                            rk_wg_rotary_cfg cfg = {rows[r], xk, yk, tk, ar, vec, 0, PKG_WG, sw, hg, dt, tv, 0, 0, -1, -1};
                            rk_buf s = {0};
                            rk_wg_rotary_wgsl(&s, &cfg);
                            char name[128], when[512], disp[256];
                            snprintf(name, sizeof name, "%s-%s-%s-t%s-%s%s%s", rk_wg_rows_name(rows[r]), kshort(xk),
                                     kshort(yk), kshort(tk), rk_wg_arith_name(ar), vec ? "-vec16" : "", tv ? "-tv" : "");
                            snprintf(when, sizeof when,
                                     "\"rows\": \"%s\", \"dtype\": \"%s\", \"table_dtype\": \"%s\""
                                     "%s%s%s%s, \"limits\": {\"maxComputeInvocationsPerWorkgroup\": %u}",
                                     rk_wg_rows_name(rows[r]), dtype_name(dt), dtype_name(tdt),
                                     ar != RK_ARITH_NARROW ? "" : vec ? ", \"kernel\": \"vec16\"" : ", \"kernel\": \"element\"",
                                     !vec ? "" : tv ? ", \"table_loads\": \"vec16\"" : ", \"table_loads\": \"element\"",
                                     uses_f16 ? (f16 ? ", \"shader-f16\": true" : ", \"shader-f16\": false") : "",
                                     !vec && packed(xk) ? (paired ? ", \"paired\": true" : ", \"paired\": false") : "",
                                     PKG_WG);
                            snprintf(disp, sizeof disp,
                                     "\"workgroup_size\": %u, \"SW\": %u, \"HG\": %u, \"VE\": %u, \"VT\": %u, "
                                     "\"params_u32\": 36, \"arithmetic\": \"%s\"",
                                     PKG_WG, sw, hg, vec ? 16u / (unsigned)ropekit_dtype_size(dt) : 0u,
                                     tv ? 16u / (unsigned)ropekit_dtype_size(tdt) : 0u, rk_wg_arith_name(ar));
                            int rc = emit(dir, vj, &first, name, &s, when, disp);
                            free(s.p);
                            if (rc) return -1;
                        }
            }
        }
    return 0;
}

static int qknorm_variants(const char *dir, FILE *vj) {
    static const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    int first = 1;
    /* the row kernel (qknorm_row.wgsl, as the C host's ops.c): the runner's fact kernel = "row"
     * where head_dim is a multiple of the 16-byte vector's elements VE and at most 64 * 4 * VE
     * (the runner's tensors are contiguous: every row starts on a vector), vpt = the vectors per
     * invocation, ceil(head_dim / VE / 64); 2 rows of 64 invocations per workgroup */
    for (int d = 0; d < 3; ++d)
        for (uint32_t vpt = 1; vpt <= 4; ++vpt) {
            const uint32_t qr = 2, smem = qr * (64 * vpt * 20 + 64 * 28 + 4);
            rk_wg_qknorm_cfg cfg = {RK_WG_V4, RK_WG_V4, RK_ARITH_EXACT32, 0, 0, vpt, qr, dts[d], 0, 1, 64};
            rk_buf s = {0};
            rk_wg_qknorm_wgsl(&s, &cfg);
            char name[128], when[384], disp[192];
            snprintf(name, sizeof name, "qknorm-row-%s-vpt%u-exact32", dtype_name(dts[d]), vpt);
            snprintf(when, sizeof when,
                     "\"kernel\": \"row\", \"dtype\": \"%s\", \"vpt\": %u, \"limits\": "
                     "{\"maxComputeInvocationsPerWorkgroup\": %u, \"maxComputeWorkgroupStorageSize\": %u}",
                     dtype_name(dts[d]), vpt, 64 * qr, smem);
            snprintf(disp, sizeof disp, "\"workgroup_size\": %u, \"rows_per_workgroup\": %u, \"params_u32\": 48, "
                     "\"arithmetic\": \"exact32\"", 64 * qr, qr);
            int rc = emit(dir, vj, &first, name, &s, when, disp);
            free(s.p);
            if (rc) return -1;
        }
    for (int d = 0; d < 3; ++d)
        for (int f16 = 0; f16 <= (dts[d] == ROPEKIT_FLOAT16 && RK_WG_F16_STORAGE); ++f16) {
            const rk_wg_kind k = kind_of(dts[d], f16);
            for (int paired = 1; paired >= (packed(k) ? 0 : 1); --paired) {
                const rk_wg_kind ok = paired ? k : atomic_of(k);
                /* vpt 0: the general kernel (qknorm.wgsl), any layout */
                rk_wg_qknorm_cfg cfg = {k, ok, RK_ARITH_EXACT32, 0, 0, 0, 1, dts[d], 0, 1, 64};
                rk_buf s = {0};
                rk_wg_qknorm_wgsl(&s, &cfg);
                char name[128], when[384], disp[192];
                snprintf(name, sizeof name, "qknorm-%s-%s-exact32", kshort(k), kshort(ok));
                snprintf(when, sizeof when, "\"kernel\": \"element\", \"dtype\": \"%s\"%s%s, \"limits\": {\"maxComputeInvocationsPerWorkgroup\": 64}",
                         dtype_name(dts[d]),
                         dts[d] == ROPEKIT_FLOAT16 && RK_WG_F16_STORAGE ? (f16 ? ", \"shader-f16\": true" : ", \"shader-f16\": false") : "",
                         packed(k) ? (paired ? ", \"paired\": true" : ", \"paired\": false") : "");
                snprintf(disp, sizeof disp, "\"workgroup_size\": 64, \"rows_per_workgroup\": 4, \"params_u32\": 48, "
                         "\"arithmetic\": \"exact32\"");
                int rc = emit(dir, vj, &first, name, &s, when, disp);
                free(s.p);
                if (rc) return -1;
            }
        }
    return 0;
}

static int regroup_variants(const char *dir, FILE *vj) {
    static const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    int first = 1;
    for (int d = 0; d < 3; ++d)
        for (int f16 = 0; f16 <= (dts[d] == ROPEKIT_FLOAT16 && RK_WG_F16_STORAGE); ++f16) {
            const rk_wg_kind k = kind_of(dts[d], f16);
            for (int ue = 2; ue >= 1; --ue) {
                /* packed: two features per invocation only when they pair into words; one
                 * feature per invocation writes its half-word with atomics */
                const rk_wg_kind ok = packed(k) && ue == 1 ? atomic_of(k) : k;
                rk_wg_regroup_cfg cfg = {k, ok, RK_ARITH_EXACT32, (uint32_t)ue, PKG_WG, 0};
                rk_buf s = {0};
                rk_wg_regroup_wgsl(&s, &cfg);
                char name[128], when[384], disp[192];
                snprintf(name, sizeof name, "regroup-%s-%s-exact32-ue%d", kshort(k), kshort(ok), ue);
                snprintf(when, sizeof when, "\"dtype\": \"%s\"%s, \"pairs\": %s, \"limits\": "
                         "{\"maxComputeInvocationsPerWorkgroup\": %u}", dtype_name(dts[d]),
                         dts[d] == ROPEKIT_FLOAT16 && RK_WG_F16_STORAGE ? (f16 ? ", \"shader-f16\": true" : ", \"shader-f16\": false") : "",
                         ue == 2 ? "true" : "false", PKG_WG);
                snprintf(disp, sizeof disp, "\"workgroup_size\": %u, \"UE\": %d, \"params_u32\": 28, "
                         "\"arithmetic\": \"exact32\"", PKG_WG, ue);
                int rc = emit(dir, vj, &first, name, &s, when, disp);
                free(s.p);
                if (rc) return -1;
            }
        }
    return 0;
}

/* ---- test.json ------------------------------------------------------------------------------ */

static void put_b64(FILE *f, const unsigned char *p, size_t n) {
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        fputc(t[v >> 18 & 63], f);
        fputc(t[v >> 12 & 63], f);
        fputc(i + 1 < n ? t[v >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? t[v & 63] : '=', f);
    }
}

static void put_tensor(FILE *f, const char *name, const ropekit_tensor *t) {
    fprintf(f, "{\"name\": \"%s\", \"dtype\": \"%s\", \"shape\": [", name, dtype_name(t->dtype));
    for (int i = 0; i < t->rank; ++i) fprintf(f, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    fputs("], \"data\": \"", f);
    put_b64(f, t->data, rk_tensor_nbytes(t));
    fputs("\"}", f);
}

static void put_attrs(FILE *f, const rk_case *c) {
    switch (c->op) {
    case RK_OP_ROTARY_EMBEDDING: {
        const ropekit_rotary_embedding_attrs *a = &c->attrs.rotary;
        fprintf(f, "{\"interleaved\": %lld, \"rotary_embedding_dim\": %lld, \"num_heads\": %lld, \"inverse\": %lld}",
                (long long)a->interleaved, (long long)a->rotary_embedding_dim, (long long)a->num_heads, (long long)a->inverse);
        break;
    }
    case RK_OP_MS_ROTARY_EMBEDDING: {
        const ropekit_ms_rotary_embedding_attrs *a = &c->attrs.ms;
        fprintf(f, "{\"interleaved\": %lld, \"rotary_embedding_dim\": %lld, \"num_heads\": %lld, \"scale\": %.9g, "
                "\"is_packed_batching\": %lld, \"inverse\": %lld}", (long long)a->interleaved,
                (long long)a->rotary_embedding_dim, (long long)a->num_heads, (double)a->scale,
                (long long)a->is_packed_batching, (long long)a->inverse);
        break;
    }
    case RK_OP_MROTARY_EMBEDDING: {
        const ropekit_mrotary_embedding_attrs *a = &c->attrs.mrope;
        fprintf(f, "{\"mrope_section\": [%lld, %lld, %lld], \"mrope_layout\": %lld, \"interleaved\": %lld, "
                "\"rotary_embedding_dim\": %lld, \"num_heads\": %lld, \"scale\": %.9g, \"is_packed_batching\": %lld, "
                "\"inverse\": %lld}", (long long)a->mrope_section[0], (long long)a->mrope_section[1],
                (long long)a->mrope_section[2], (long long)a->mrope_layout, (long long)a->interleaved,
                (long long)a->rotary_embedding_dim, (long long)a->num_heads, (double)a->scale,
                (long long)a->is_packed_batching, (long long)a->inverse);
        break;
    }
    case RK_OP_QKNORM_ROTARY_EMBEDDING: {
        const ropekit_qknorm_rotary_embedding_attrs *a = &c->attrs.qknorm;
        fprintf(f, "{\"num_heads\": %lld, \"head_dim\": %lld, \"rope_head_dim\": %lld, \"epsilon\": %.9g, "
                "\"simulate_fp8\": %lld}", (long long)a->num_heads, (long long)a->head_dim,
                (long long)a->rope_head_dim, (double)a->epsilon, (long long)a->simulate_fp8);
        break;
    }
    default: {
        const ropekit_inverse_rotary_regroup_attrs *a = &c->attrs.regroup;
        fprintf(f, "{\"num_heads\": %lld, \"head_dim\": %lld, \"rope_head_dim\": %lld, \"num_groups\": %lld}",
                (long long)a->num_heads, (long long)a->head_dim, (long long)a->rope_head_dim,
                (long long)a->num_groups);
    }
    }
}

/* Layout cases, after the shared ones: 16-bit x and tables in layouts the shared cases do not
 * reach, so that every package's vec16 variants with 16-byte table loads ("-tv") run in the
 * browser suite: half-split heads whose halves and table rows are whole 16-byte vectors, full and
 * partial rotation, every row form of the operator, MRoPE sections on vector boundaries (and one
 * that is not: vec16 with scalar table loads). Inputs from a fixed generator, expected outputs
 * from the CPU reference like the shared cases. */
typedef struct layout_spec {
    rk_case_op op;
    ropekit_dtype dt;
    int64_t B, S, N, H, R, P;
    int rows; /* 0 ids2d, 1 offset (ms), 2 table3d (onnx), 3 mrope */
    int64_t inverse, sec[3];
} layout_spec;

static const layout_spec g_layout[] = {
    {RK_OP_ROTARY_EMBEDDING, ROPEKIT_FLOAT16, 1, 3, 2, 32, 32, 6, 0, 0, {0}},
    {RK_OP_ROTARY_EMBEDDING, ROPEKIT_BFLOAT16, 2, 2, 3, 48, 32, 5, 0, 1, {0}},
    {RK_OP_ROTARY_EMBEDDING, ROPEKIT_FLOAT16, 2, 3, 1, 48, 32, 0, 2, 0, {0}},
    {RK_OP_MS_ROTARY_EMBEDDING, ROPEKIT_FLOAT16, 1, 4, 2, 64, 32, 9, 1, 0, {0}},
    {RK_OP_MS_ROTARY_EMBEDDING, ROPEKIT_BFLOAT16, 2, 3, 1, 64, 64, 7, 0, 1, {0}},
    {RK_OP_MROTARY_EMBEDDING, ROPEKIT_FLOAT16, 1, 5, 2, 64, 64, 11, 3, 0, {8, 16, 8}},
    {RK_OP_MROTARY_EMBEDDING, ROPEKIT_BFLOAT16, 2, 2, 1, 48, 32, 6, 3, 1, {8, 0, 8}},
    {RK_OP_MROTARY_EMBEDDING, ROPEKIT_FLOAT16, 1, 3, 2, 32, 32, 5, 3, 0, {4, 8, 4}},
};

static uint32_t g_lcg = 2024u;
static uint16_t next16(void) {
    g_lcg = g_lcg * 1664525u + 1013904223u;
    return (uint16_t)(g_lcg >> 16);
}
/* a 16-bit value: x (|v| in [2^-4, 2^4)) or a table entry (|v| in [2^-4, 1)) */
static uint16_t value16(ropekit_dtype dt, int table) {
    const uint16_t r = next16();
    const unsigned e = table ? 11u + (r & 3u) : 11u + (r & 7u); /* float16 biased exponent */
    return dt == ROPEKIT_FLOAT16 ? (uint16_t)((r & 0x83ffu) | (e << 10))
                                 : (uint16_t)((r & 0x807fu) | ((e + 112u) << 7));
}

static ropekit_tensor host(ropekit_dtype dt, int rank, const int64_t *shape, void **keep) {
    size_t n = 1;
    for (int i = 0; i < rank; ++i) n *= (size_t)shape[i];
    *keep = calloc(n ? n : 1, ropekit_dtype_size(dt));
    return ropekit_tensor_contiguous(*keep, dt, rank, shape);
}

/* Build layout case j of op into c (its buffers in keep[5]); 0 when there is none. */
static int layout_case(rk_case_op op, size_t j, rk_case *c, void *keep[5]) {
    const layout_spec *L = NULL;
    for (size_t i = 0, k = 0; i < sizeof g_layout / sizeof g_layout[0]; ++i)
        if (g_layout[i].op == op && k++ == j) L = &g_layout[i];
    if (!L) return 0;
    memset(c, 0, sizeof *c);
    c->op = op;
    const int64_t xs[3] = {L->B, L->S, L->N * L->H}, h = L->R / 2;
    const int64_t t2[2] = {L->P, h}, t3[3] = {L->B, L->S, h}, ids2[2] = {L->B, L->S},
                  ids3[3] = {3, L->B, L->S}, one[1] = {1};
    ropekit_tensor x = host(L->dt, 3, xs, &keep[0]);
    ropekit_tensor cs = L->rows == 2 ? host(L->dt, 3, t3, &keep[1]) : host(L->dt, 2, t2, &keep[1]);
    ropekit_tensor sn = L->rows == 2 ? host(L->dt, 3, t3, &keep[2]) : host(L->dt, 2, t2, &keep[2]);
    ropekit_tensor ids = L->rows == 3 ? host(ROPEKIT_INT64, 3, ids3, &keep[3])
                         : L->rows == 1 ? host(ROPEKIT_INT64, 1, one, &keep[3])
                                        : host(ROPEKIT_INT64, 2, ids2, &keep[3]);
    if (!x.data || !cs.data || !sn.data || !ids.data) return -1;
    for (size_t i = 0; i < rk_tensor_nbytes(&x) / 2; ++i) ((uint16_t *)x.data)[i] = value16(L->dt, 0);
    for (size_t i = 0; i < rk_tensor_nbytes(&cs) / 2; ++i) {
        ((uint16_t *)cs.data)[i] = value16(L->dt, 1);
        ((uint16_t *)sn.data)[i] = value16(L->dt, 1);
    }
    int64_t *id = ids.data;
    const size_t nid = rk_tensor_nbytes(&ids) / 8;
    for (size_t i = 0; i < nid && L->rows != 2; ++i) /* table3d: no ids */
        id[i] = L->rows == 1 ? L->P - L->S : (int64_t)((i * 5 + 1) % (size_t)L->P);
    c->n_outputs = 1;
    c->outputs[0] = ropekit_tensor_contiguous(NULL, L->dt, 3, xs);
    c->n_inputs = 4;
    for (int i = 0; i < 4; ++i) c->present[i] = 1;
    if (op == RK_OP_ROTARY_EMBEDDING) {
        c->inputs[0] = x, c->inputs[1] = cs, c->inputs[2] = sn, c->inputs[3] = ids;
        c->present[3] = L->rows != 2;
        if (L->rows == 2) c->inputs[3] = ropekit_tensor_contiguous(NULL, ROPEKIT_INT64, 0, NULL);
        c->attrs.rotary = (ropekit_rotary_embedding_attrs){0, L->R, L->N, L->inverse};
    } else {
        c->inputs[0] = x, c->inputs[1] = ids, c->inputs[2] = cs, c->inputs[3] = sn;
        if (op == RK_OP_MS_ROTARY_EMBEDDING) {
            c->attrs.ms = (ropekit_ms_rotary_embedding_attrs){0, L->R, L->N, 1.0f, 0, L->inverse};
        } else {
            ropekit_mrotary_embedding_attrs a = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
            memcpy(a.mrope_section, L->sec, sizeof a.mrope_section);
            a.rotary_embedding_dim = L->R, a.num_heads = L->N, a.inverse = L->inverse;
            c->attrs.mrope = a;
        }
    }
    return 1;
}

/* One case of test.json: inputs and the CPU reference's outputs. */
static int put_case(FILE *f, const rk_case *c, size_t index, const char *prefix) {
    ropekit_tensor out[RK_CASE_MAX_OUTPUTS];
    if (rk_case_alloc_outputs(c, out) < 0) return -1;
    int rc = 0;
    if (rk_case_run_cpu(c, out) != ROPEKIT_OK) {
        fprintf(stderr, "webgpu_package: CPU reference failed on %s case %zu: %s\n",
                rk_case_op_name(c->op), index, ropekit_last_error());
        rc = -1;
    } else {
        char desc[512];
        rk_case_describe(c, desc, sizeof desc);
        for (char *q = desc; *q; ++q)
            if (*q == '"' || *q == '\\') *q = '\'';
        fprintf(f, "%s\n    {\"index\": %zu, \"describe\": \"%s%s\",\n     \"attributes\": ", index ? "," : "",
                index, prefix, desc);
        put_attrs(f, c);
        fputs(",\n     \"inputs\": [", f);
        for (int k = 0; k < c->n_inputs; ++k) {
            fputs(k ? ", " : "", f);
            if (c->present[k]) put_tensor(f, rk_case_input_name(c->op, k), &c->inputs[k]);
            else fprintf(f, "{\"name\": \"%s\", \"absent\": true}", rk_case_input_name(c->op, k));
        }
        fputs("],\n     \"outputs\": [", f);
        for (int k = 0; k < c->n_outputs; ++k) {
            fputs(k ? ", " : "", f);
            put_tensor(f, rk_case_output_name(c->op, k), &out[k]);
        }
        fputs("]}", f);
    }
    rk_case_free_outputs(c, out);
    return rc;
}

static int write_tests(const char *cases_dir, const char *dir, rk_case_op op) {
    char path[1200], err[256];
    snprintf(path, sizeof path, "%s/%s.bin", cases_dir, rk_case_op_name(op));
    rk_case_file cf;
    if (rk_cases_load(path, &cf, err, sizeof err) != 0) {
        fprintf(stderr, "webgpu_package: %s\n", err);
        return -1;
    }
    snprintf(path, sizeof path, "%s/test.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) {
        rk_cases_free(&cf);
        return -1;
    }
    int rc = 0;
    fprintf(f, "{\n  \"source\": \"tests/cases/%s.bin (inputs), then the layout cases of src/webgpu/package.c; "
               "expected outputs: the CPU reference src/cpu/ref.c\",\n"
               "  \"compare\": \"bit for bit\",\n  \"cases\": [", rk_case_op_name(op));
    for (size_t i = 0; i < cf.count && rc == 0; ++i) rc = put_case(f, &cf.cases[i], i, "");
    for (size_t j = 0; rc == 0; ++j) { /* then the layout cases */
        rk_case c;
        void *keep[5] = {0};
        const int got = layout_case(op, j, &c, keep);
        c.index = cf.count + j;
        if (got < 0) fprintf(stderr, "webgpu_package: out of memory\n");
        rc = got > 0 ? put_case(f, &c, cf.count + j, "layout case: ") : got;
        for (int k = 0; k < 5; ++k) free(keep[k]);
        if (got == 0) break;
    }
    fputs("\n  ]\n}\n", f);
    if (fclose(f) != 0) rc = -1;
    rk_cases_free(&cf);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: webgpu_package CASES_DIR OUT_DIR\n");
        return 2;
    }
    static const uint32_t rows_onnx[] = {0, 2}, rows_ms[] = {0, 1}, rows_mrope[] = {3};
    mkdir(argv[2], 0755);
    for (int op = 0; op < RK_OP_COUNT; ++op) {
        char dir[1024], path[1200];
        snprintf(dir, sizeof dir, "%s/%s", argv[2], rk_case_op_name((rk_case_op)op));
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/variants.json", dir);
        FILE *vj = fopen(path, "wb");
        if (!vj) {
            fprintf(stderr, "webgpu_package: cannot write %s\n", path);
            return 1;
        }
        fputs("[", vj);
        int rc = op == RK_OP_ROTARY_EMBEDDING        ? rotary_variants(dir, vj, rows_onnx, 2)
                 : op == RK_OP_MS_ROTARY_EMBEDDING   ? rotary_variants(dir, vj, rows_ms, 2)
                 : op == RK_OP_MROTARY_EMBEDDING     ? rotary_variants(dir, vj, rows_mrope, 1)
                 : op == RK_OP_QKNORM_ROTARY_EMBEDDING ? qknorm_variants(dir, vj)
                                                       : regroup_variants(dir, vj);
        fputs("\n]\n", vj);
        if (fclose(vj) != 0) rc = -1;
        if (rc == 0) rc = write_tests(argv[1], dir, (rk_case_op)op);
        if (rc != 0) return 1;
    }
    return 0;
}
