/*
 * cases.c — the shared case-file reader (see cases.h and tests/cases/README.md).
 *
 * Parsing reads the bytes through a cursor that never moves past the end of the data: every
 * read first checks that the bytes are there, every size is computed with overflow checks and
 * compared with the bytes that remain, and every count is bounded by what the remaining bytes
 * could hold before anything is allocated. On any error the partially built result is freed
 * and a message says what was wrong, in which case, at which byte offset.
 */
#include "cases.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RK_CASES_MAGIC "RKCASES1"
#define RK_CASES_MAGIC_LEN 8
#define RK_CASES_MAX_FILE ((size_t)1 << 30) /* refuse files over 1 GiB */

/* ---- per-op layout ------------------------------------------------------------------------ */

typedef struct op_layout {
    const char *name;
    int n_int, n_float, n_tensors, n_outputs;
    const char *inputs[RK_CASE_MAX_INPUTS];
    int optional[RK_CASE_MAX_INPUTS]; /* 1: may be absent (present = 0) */
    const char *outputs[RK_CASE_MAX_OUTPUTS];
} op_layout;

static const op_layout g_layouts[RK_OP_COUNT] = {
    {"rotary_embedding", 4, 0, 4, 1,
     {"x", "cos_cache", "sin_cache", "position_ids"}, {0, 0, 0, 1}, {"y"}},
    {"ms_rotary_embedding", 5, 1, 4, 1,
     {"input", "position_ids", "cos_cache", "sin_cache"}, {0, 0, 0, 0}, {"y"}},
    {"mrotary_embedding", 8, 1, 4, 1,
     {"input", "position_ids", "cos_cache", "sin_cache"}, {0, 0, 0, 0}, {"y"}},
    {"qknorm_rotary_embedding", 4, 1, 5, 2,
     {"query", "kv", "kv_norm_weight", "cos", "sin"}, {0, 0, 0, 1, 1}, {"query_out", "kv_out"}},
    {"inverse_rotary_regroup", 4, 0, 3, 1,
     {"input", "cos", "sin"}, {0, 1, 1}, {"out"}},
};

const char *rk_case_op_name(rk_case_op op) {
    return (unsigned)op < RK_OP_COUNT ? g_layouts[op].name : "invalid";
}

const char *rk_case_input_name(rk_case_op op, int i) {
    if ((unsigned)op >= RK_OP_COUNT || i < 0 || i >= g_layouts[op].n_tensors) return "?";
    return g_layouts[op].inputs[i];
}

const char *rk_case_output_name(rk_case_op op, int i) {
    if ((unsigned)op >= RK_OP_COUNT || i < 0 || i >= g_layouts[op].n_outputs) return "?";
    return g_layouts[op].outputs[i];
}

/* Element size of a ropekit_dtype, 0 for unknown values (libc only: no library call). */
static size_t dtype_size(uint32_t dtype) {
    switch (dtype) {
    case ROPEKIT_FLOAT32: return 4;
    case ROPEKIT_FLOAT16: return 2;
    case ROPEKIT_BFLOAT16: return 2;
    case ROPEKIT_INT64: return 8;
    default: return 0;
    }
}

static const char *dtype_str(ropekit_dtype dtype) {
    switch (dtype) {
    case ROPEKIT_FLOAT32: return "float32";
    case ROPEKIT_FLOAT16: return "float16";
    case ROPEKIT_BFLOAT16: return "bfloat16";
    case ROPEKIT_INT64: return "int64";
    default: return "invalid";
    }
}

/* ---- CRC-32 (IEEE 802.3, as zlib.crc32) ----------------------------------------------------- */

uint32_t rk_cases_crc32(const void *data, size_t n) {
    const unsigned char *p = data;
    uint32_t table[256]; /* built per call (cheap next to the data): no shared state */
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- bounded cursor ------------------------------------------------------------------------ */

typedef struct cursor {
    const unsigned char *p;
    size_t size, pos;
    char *err;
    size_t errlen;
    char where[96]; /* "rotary_embedding case 12 (offset 3456)", for messages */
} cursor;

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static size_t remaining(const cursor *c) {
    return c->size - c->pos;
}

/* Little-endian reads; each fails (returns -1 with a message) rather than read past the end. */
static int read_bytes(cursor *c, void *dst, size_t n, const char *what) {
    if (remaining(c) < n) {
        set_err(c->err, c->errlen, "%s: truncated: %s needs %zu bytes at offset %zu, %zu left",
                c->where, what, n, c->pos, remaining(c));
        return -1;
    }
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int read_u32(cursor *c, uint32_t *v, const char *what) {
    unsigned char b[4];
    if (read_bytes(c, b, 4, what) != 0) return -1;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}

static int read_i64(cursor *c, int64_t *v, const char *what) {
    unsigned char b[8];
    if (read_bytes(c, b, 8, what) != 0) return -1;
    uint64_t u = 0;
    for (int i = 7; i >= 0; --i) u = u << 8 | b[i];
    memcpy(v, &u, sizeof u); /* two's complement, no implementation-defined conversion */
    return 0;
}

static int read_f32(cursor *c, float *v, const char *what) {
    uint32_t u;
    if (read_u32(c, &u, what) != 0) return -1;
    memcpy(v, &u, sizeof *v);
    return 0;
}

/* ---- cases --------------------------------------------------------------------------------- */

static void free_case(rk_case *c) {
    for (int i = 0; i < RK_CASE_MAX_INPUTS; ++i) {
        free(c->inputs[i].data);
        c->inputs[i].data = NULL;
    }
}

void rk_cases_free(rk_case_file *f) {
    if (!f) return;
    if (f->cases)
        for (size_t i = 0; i < f->count; ++i) free_case(&f->cases[i]);
    free(f->cases);
    memset(f, 0, sizeof *f);
}

size_t rk_tensor_nbytes(const ropekit_tensor *t) {
    size_t n = dtype_size((uint32_t)t->dtype);
    for (int i = 0; i < t->rank && i < ROPEKIT_MAX_RANK; ++i) n *= (size_t)t->shape[i];
    return n;
}

/* Row-major strides for a shape. */
static void set_contiguous(ropekit_tensor *t) {
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; --i) {
        t->strides[i] = s;
        s *= t->shape[i];
    }
}

/* One tensor record: present, dtype, rank, shape, data. The data is copied into a fresh buffer
 * (the file position may not be aligned for the element type). */
static int read_tensor(cursor *c, rk_case *k, int i) {
    const op_layout *L = &g_layouts[k->op];
    const char *name = L->inputs[i];
    k->input_offset[i] = c->pos;
    uint32_t present, dtype, rank;
    if (read_u32(c, &present, "a tensor's present flag") != 0) return -1;
    if (present > 1) {
        set_err(c->err, c->errlen, "%s: input %d (%s): present = %u at offset %zu, must be 0 or 1",
                c->where, i, name, present, k->input_offset[i]);
        return -1;
    }
    if (!present) {
        if (!L->optional[i]) {
            set_err(c->err, c->errlen, "%s: input %d (%s) is required but absent", c->where, i,
                    name);
            return -1;
        }
        return 0;
    }
    if (read_u32(c, &dtype, "a tensor's dtype") != 0 || read_u32(c, &rank, "a tensor's rank") != 0)
        return -1;
    size_t es = dtype_size(dtype);
    if (es == 0) {
        set_err(c->err, c->errlen, "%s: input %d (%s): unknown dtype %u", c->where, i, name, dtype);
        return -1;
    }
    if (rank < 1 || rank > ROPEKIT_MAX_RANK) {
        set_err(c->err, c->errlen, "%s: input %d (%s): rank %u is outside [1, %d]", c->where, i,
                name, rank, ROPEKIT_MAX_RANK);
        return -1;
    }
    ropekit_tensor *t = &k->inputs[i];
    memset(t, 0, sizeof *t);
    t->dtype = (ropekit_dtype)dtype;
    t->rank = (int32_t)rank;
    /* bytes = es * product of the shape. bound = es * product of max(dim, 1) must fit in what is
     * left of the file too, so that no dimension (even beside a zero one) is larger than the
     * file and no product of dimensions can overflow, here or in later stride computations. */
    size_t bytes = es, bound = es;
    for (uint32_t d = 0; d < rank; ++d) {
        int64_t n;
        if (read_i64(c, &n, "a tensor's shape") != 0) return -1;
        if (n < 0) {
            set_err(c->err, c->errlen, "%s: input %d (%s): shape[%u] = %lld is negative",
                    c->where, i, name, d, (long long)n);
            return -1;
        }
        size_t m = n > 0 ? (size_t)n : 1;
        if ((uint64_t)n > (uint64_t)SIZE_MAX || m > remaining(c) / bound) {
            set_err(c->err, c->errlen, "%s: input %d (%s): shape[%u] = %lld makes the tensor "
                    "larger than the %zu bytes left", c->where, i, name, d, (long long)n,
                    remaining(c));
            return -1;
        }
        t->shape[d] = n;
        bound *= m;
        bytes *= (size_t)n;
    }
    if (bytes > remaining(c)) {
        set_err(c->err, c->errlen, "%s: input %d (%s): truncated: %zu data bytes at offset %zu, "
                "%zu left", c->where, i, name, bytes, c->pos, remaining(c));
        return -1;
    }
    set_contiguous(t);
    /* malloc's alignment suits every element type; never NULL, even for 0 elements */
    t->data = malloc(bytes ? bytes : 1);
    if (!t->data) {
        set_err(c->err, c->errlen, "%s: input %d (%s): out of memory (%zu bytes)", c->where, i,
                name, bytes);
        return -1;
    }
    if (read_bytes(c, t->data, bytes, "tensor data") != 0) return -1;
    k->present[i] = 1;
    return 0;
}

/* Fill the attribute struct from the file's integers and floats (order: tests/cases/README.md). */
static void fill_attrs(rk_case *k, const int64_t *iv, const float *fv) {
    switch (k->op) {
    case RK_OP_ROTARY_EMBEDDING: {
        ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
        a.interleaved = iv[0], a.rotary_embedding_dim = iv[1], a.num_heads = iv[2];
        a.inverse = iv[3];
        k->attrs.rotary = a;
        break;
    }
    case RK_OP_MS_ROTARY_EMBEDDING: {
        ropekit_ms_rotary_embedding_attrs a = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
        a.interleaved = iv[0], a.is_packed_batching = iv[1], a.num_heads = iv[2];
        a.rotary_embedding_dim = iv[3], a.inverse = iv[4];
        a.scale = fv[0];
        k->attrs.ms = a;
        break;
    }
    case RK_OP_MROTARY_EMBEDDING: {
        ropekit_mrotary_embedding_attrs a = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
        a.interleaved = iv[0], a.num_heads = iv[1], a.rotary_embedding_dim = iv[2];
        a.inverse = iv[3], a.mrope_layout = iv[4];
        a.mrope_section[0] = iv[5], a.mrope_section[1] = iv[6], a.mrope_section[2] = iv[7];
        a.scale = fv[0]; /* is_packed_batching stays 0: not in the file */
        k->attrs.mrope = a;
        break;
    }
    case RK_OP_QKNORM_ROTARY_EMBEDDING: {
        ropekit_qknorm_rotary_embedding_attrs a = ROPEKIT_QKNORM_ROTARY_EMBEDDING_ATTRS_INIT;
        a.num_heads = iv[0], a.head_dim = iv[1], a.rope_head_dim = iv[2];
        a.simulate_fp8 = iv[3];
        a.epsilon = fv[0];
        k->attrs.qknorm = a;
        break;
    }
    case RK_OP_INVERSE_ROTARY_REGROUP: {
        ropekit_inverse_rotary_regroup_attrs a = ROPEKIT_INVERSE_ROTARY_REGROUP_ATTRS_INIT;
        a.num_heads = iv[0], a.head_dim = iv[1], a.rope_head_dim = iv[2], a.num_groups = iv[3];
        k->attrs.regroup = a;
        break;
    }
    case RK_OP_COUNT: break;
    }
}

/* The outputs' dtypes and shapes. For QKNorm and the regroup they come from the attributes,
 * which must agree with the input shapes so that no output is larger than its input (the
 * operator itself checks everything else). */
static int set_outputs(cursor *c, rk_case *k) {
    const ropekit_tensor *x = &k->inputs[0];
    k->n_outputs = g_layouts[k->op].n_outputs;
    ropekit_tensor *o = k->outputs;
    memset(o, 0, sizeof k->outputs);
    if (k->op <= RK_OP_MROTARY_EMBEDDING) { /* y: same as x */
        o[0] = *x;
        o[0].data = NULL;
        return 0;
    }
    int64_t nh, hd;
    if (k->op == RK_OP_QKNORM_ROTARY_EMBEDDING) {
        nh = k->attrs.qknorm.num_heads, hd = k->attrs.qknorm.head_dim;
        const ropekit_tensor *kv = &k->inputs[1];
        if (x->rank != 3 || nh <= 0 || hd <= 0 || nh > x->shape[2] / hd ||
            nh * hd != x->shape[2]) {
            set_err(c->err, c->errlen, "%s: query (rank %d) and kv do not match num_heads = %lld, "
                    "head_dim = %lld", c->where, (int)x->rank, (long long)nh, (long long)hd);
            return -1;
        }
        int64_t qo[4] = {x->shape[0], x->shape[1], nh, hd};
        o[0].dtype = x->dtype, o[0].rank = 4;
        memcpy(o[0].shape, qo, sizeof qo);
        o[1] = *kv; /* kv_out: T (query's type), kv's shape */
        o[1].data = NULL;
        o[1].dtype = x->dtype;
    } else { /* regroup: (num_groups, N, F / num_groups) */
        nh = k->attrs.regroup.num_heads, hd = k->attrs.regroup.head_dim;
        int64_t G = k->attrs.regroup.num_groups;
        if (x->rank != 2 || nh <= 0 || hd <= 0 || nh > x->shape[1] / hd ||
            nh * hd != x->shape[1] || G <= 0 || x->shape[1] % G != 0) {
            set_err(c->err, c->errlen, "%s: input (rank %d) does not match num_heads = %lld, "
                    "head_dim = %lld, num_groups = %lld", c->where, (int)x->rank, (long long)nh,
                    (long long)hd, (long long)G);
            return -1;
        }
        int64_t out[3] = {G, x->shape[0], x->shape[1] / G};
        o[0].dtype = x->dtype, o[0].rank = 3;
        memcpy(o[0].shape, out, sizeof out);
    }
    for (int i = 0; i < k->n_outputs; ++i) set_contiguous(&o[i]);
    return 0;
}

static int read_case(cursor *c, rk_case_op op, size_t index, rk_case *k) {
    const op_layout *L = &g_layouts[op];
    snprintf(c->where, sizeof c->where, "%s case %zu (offset %zu)", L->name, index, c->pos);
    const char *where = c->where;
    k->op = op, k->index = index, k->offset = c->pos;
    k->n_inputs = L->n_tensors;

    uint32_t n;
    int64_t iv[8] = {0}; /* the largest n_int (mrotary_embedding) */
    float fv[1] = {0};   /* the largest n_float */
    if (read_u32(c, &n, "n_int") != 0) return -1;
    if (n != (uint32_t)L->n_int) {
        set_err(c->err, c->errlen, "%s: n_int = %u, %s has %d", where, n, L->name, L->n_int);
        return -1;
    }
    for (uint32_t i = 0; i < n; ++i)
        if (read_i64(c, &iv[i], "an integer attribute") != 0) return -1;
    if (read_u32(c, &n, "n_float") != 0) return -1;
    if (n != (uint32_t)L->n_float) {
        set_err(c->err, c->errlen, "%s: n_float = %u, %s has %d", where, n, L->name, L->n_float);
        return -1;
    }
    for (uint32_t i = 0; i < n; ++i)
        if (read_f32(c, &fv[i], "a float attribute") != 0) return -1;
    fill_attrs(k, iv, fv);
    if (read_u32(c, &n, "n_tensors") != 0) return -1;
    if (n != (uint32_t)L->n_tensors) {
        set_err(c->err, c->errlen, "%s: n_tensors = %u, %s has %d inputs", where, n, L->name,
                L->n_tensors);
        return -1;
    }
    for (int i = 0; i < L->n_tensors; ++i)
        if (read_tensor(c, k, i) != 0) return -1;
    return set_outputs(c, k);
}

int rk_cases_load_memory(const void *data, size_t size, rk_case_file *out, char *err,
                         size_t errlen) {
    if (!out) {
        set_err(err, errlen, "rk_cases_load: out is NULL");
        return -1;
    }
    memset(out, 0, sizeof *out);
    if (err && errlen) err[0] = '\0';
    if (!data && size) {
        set_err(err, errlen, "rk_cases_load: data is NULL");
        return -1;
    }
    const size_t header = RK_CASES_MAGIC_LEN + 8, trailer = 4;
    if (size < header + trailer) {
        set_err(err, errlen, "file is %zu bytes, shorter than the %zu-byte header and trailer",
                size, header + trailer);
        return -1;
    }
    const unsigned char *p = data;
    if (memcmp(p, RK_CASES_MAGIC, RK_CASES_MAGIC_LEN) != 0) {
        set_err(err, errlen, "bad magic (not an " RK_CASES_MAGIC " case file)");
        return -1;
    }
    /* the CRC-32 trailer catches truncation and flipped bits before any parsing */
    size_t body = size - trailer;
    uint32_t want = (uint32_t)p[body] | (uint32_t)p[body + 1] << 8 |
                    (uint32_t)p[body + 2] << 16 | (uint32_t)p[body + 3] << 24;
    uint32_t got = rk_cases_crc32(p, body);
    if (got != want) {
        set_err(err, errlen, "CRC-32 mismatch (file says %08x, contents give %08x): truncated "
                "or corrupt", want, got);
        return -1;
    }

    cursor c = {p, body, RK_CASES_MAGIC_LEN, err, errlen, "header"};
    uint32_t op, count;
    if (read_u32(&c, &op, "op") != 0 || read_u32(&c, &count, "case count") != 0) return -1;
    if (op >= RK_OP_COUNT) {
        set_err(err, errlen, "unknown op %u (0 .. %d)", op, RK_OP_COUNT - 1);
        return -1;
    }
    /* a case is at least three u32 counts: bound count before allocating */
    if (count > remaining(&c) / 12) {
        set_err(err, errlen, "case count %u cannot fit in the %zu bytes left", count,
                remaining(&c));
        return -1;
    }
    rk_case_file f = {(rk_case_op)op, 0, NULL};
    f.cases = calloc(count ? count : 1, sizeof *f.cases);
    if (!f.cases) {
        set_err(err, errlen, "out of memory (%u cases)", count);
        return -1;
    }
    for (uint32_t i = 0; i < count; ++i) {
        f.count = i + 1; /* so that rk_cases_free frees this case's buffers on error */
        if (read_case(&c, f.op, i, &f.cases[i]) != 0) {
            rk_cases_free(&f);
            return -1;
        }
    }
    f.count = count;
    if (c.pos != body) {
        set_err(err, errlen, "%zu unexpected bytes after the last case (offset %zu)",
                body - c.pos, c.pos);
        rk_cases_free(&f);
        return -1;
    }
    *out = f;
    return 0;
}

/* Read a whole file into a malloc'd buffer (in chunks: no fseek/ftell, so pipes work too). */
static unsigned char *read_file(const char *path, size_t *size, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        set_err(err, errlen, "%s: cannot open", path);
        return NULL;
    }
    size_t cap = 0, n = 0;
    unsigned char *buf = NULL;
    for (;;) {
        if (n == cap) {
            if (cap >= RK_CASES_MAX_FILE) {
                set_err(err, errlen, "%s: larger than %zu bytes", path, (size_t)RK_CASES_MAX_FILE);
                break;
            }
            size_t bigger = cap ? 2 * cap : (size_t)1 << 16;
            unsigned char *p = realloc(buf, bigger);
            if (!p) {
                set_err(err, errlen, "%s: out of memory", path);
                break;
            }
            buf = p, cap = bigger;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0) {
            if (ferror(fp)) {
                set_err(err, errlen, "%s: read error", path);
                break;
            }
            fclose(fp);
            *size = n;
            return buf; /* end of file */
        }
    }
    free(buf);
    fclose(fp);
    return NULL;
}

int rk_cases_load(const char *path, rk_case_file *out, char *err, size_t errlen) {
    if (out) memset(out, 0, sizeof *out);
    if (!path || !out) {
        set_err(err, errlen, "rk_cases_load: NULL argument");
        return -1;
    }
    size_t size = 0;
    unsigned char *buf = read_file(path, &size, err, errlen);
    if (!buf) return -1;
    int rc = rk_cases_load_memory(buf, size, out, err, errlen);
    free(buf);
    if (rc != 0 && err && errlen) { /* prefix the path */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", err);
        set_err(err, errlen, "%s: %s", path, msg);
    }
    return rc;
}

/* ---- outputs and running ------------------------------------------------------------------- */

int rk_case_alloc_outputs(const rk_case *c, ropekit_tensor out[RK_CASE_MAX_OUTPUTS]) {
    for (int i = 0; i < c->n_outputs; ++i) {
        out[i] = c->outputs[i];
        size_t n = rk_tensor_nbytes(&out[i]);
        out[i].data = calloc(n ? n : 1, 1);
        if (!out[i].data) {
            for (int j = 0; j < i; ++j) {
                free(out[j].data);
                out[j].data = NULL;
            }
            return -1;
        }
    }
    return c->n_outputs;
}

void rk_case_free_outputs(const rk_case *c, ropekit_tensor out[RK_CASE_MAX_OUTPUTS]) {
    for (int i = 0; i < c->n_outputs; ++i) {
        free(out[i].data);
        out[i].data = NULL;
    }
}

ropekit_status rk_case_run_cpu(const rk_case *c, const ropekit_tensor *out) {
    const ropekit_tensor *in[RK_CASE_MAX_INPUTS];
    for (int i = 0; i < RK_CASE_MAX_INPUTS; ++i)
        in[i] = i < c->n_inputs && c->present[i] ? &c->inputs[i] : NULL;
    switch (c->op) {
    case RK_OP_ROTARY_EMBEDDING:
        return ropekit_rotary_embedding(in[0], in[1], in[2], in[3], &c->attrs.rotary, &out[0]);
    case RK_OP_MS_ROTARY_EMBEDDING:
        return ropekit_ms_rotary_embedding(in[0], in[1], in[2], in[3], &c->attrs.ms, &out[0]);
    case RK_OP_MROTARY_EMBEDDING:
        return ropekit_mrotary_embedding(in[0], in[1], in[2], in[3], &c->attrs.mrope, &out[0]);
    case RK_OP_QKNORM_ROTARY_EMBEDDING:
        return ropekit_qknorm_rotary_embedding(in[0], in[1], in[2], in[3], in[4],
                                               &c->attrs.qknorm, &out[0], &out[1]);
    case RK_OP_INVERSE_ROTARY_REGROUP:
        return ropekit_inverse_rotary_regroup(in[0], in[1], in[2], &c->attrs.regroup, &out[0]);
    case RK_OP_COUNT: break;
    }
    return ROPEKIT_ERROR_INVALID_ATTRIBUTE;
}

/* ---- description --------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, pos;
} sbuf;

/* Append to a bounded buffer; output past the end is dropped, the buffer stays terminated. */
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->pos >= b->len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->pos, b->len - b->pos, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    b->pos = (size_t)n >= b->len - b->pos ? b->len : b->pos + (size_t)n;
}

char *rk_case_describe(const rk_case *c, char *buf, size_t buflen) {
    if (!buf || buflen == 0) return buf;
    buf[0] = '\0';
    sbuf b = {buf, buflen, 0};
    sb_printf(&b, "%s #%zu:", rk_case_op_name(c->op), c->index);
    for (int i = 0; i < c->n_inputs; ++i) {
        sb_printf(&b, "%s %s", i ? "," : "", rk_case_input_name(c->op, i));
        if (!c->present[i]) {
            sb_printf(&b, " absent");
            continue;
        }
        const ropekit_tensor *t = &c->inputs[i];
        sb_printf(&b, " %s [", dtype_str(t->dtype));
        for (int d = 0; d < t->rank; ++d)
            sb_printf(&b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        sb_printf(&b, "]");
    }
    switch (c->op) {
    case RK_OP_ROTARY_EMBEDDING: {
        const ropekit_rotary_embedding_attrs *a = &c->attrs.rotary;
        sb_printf(&b, "; interleaved=%lld rotary_embedding_dim=%lld num_heads=%lld inverse=%lld",
                  (long long)a->interleaved, (long long)a->rotary_embedding_dim,
                  (long long)a->num_heads, (long long)a->inverse);
        break;
    }
    case RK_OP_MS_ROTARY_EMBEDDING: {
        const ropekit_ms_rotary_embedding_attrs *a = &c->attrs.ms;
        sb_printf(&b, "; interleaved=%lld rotary_embedding_dim=%lld num_heads=%lld scale=%.9g "
                  "inverse=%lld", (long long)a->interleaved, (long long)a->rotary_embedding_dim,
                  (long long)a->num_heads, (double)a->scale, (long long)a->inverse);
        break;
    }
    case RK_OP_MROTARY_EMBEDDING: {
        const ropekit_mrotary_embedding_attrs *a = &c->attrs.mrope;
        sb_printf(&b, "; interleaved=%lld rotary_embedding_dim=%lld num_heads=%lld scale=%.9g "
                  "inverse=%lld mrope_layout=%lld mrope_section=[%lld,%lld,%lld]",
                  (long long)a->interleaved, (long long)a->rotary_embedding_dim,
                  (long long)a->num_heads, (double)a->scale, (long long)a->inverse,
                  (long long)a->mrope_layout, (long long)a->mrope_section[0],
                  (long long)a->mrope_section[1], (long long)a->mrope_section[2]);
        break;
    }
    case RK_OP_QKNORM_ROTARY_EMBEDDING: {
        const ropekit_qknorm_rotary_embedding_attrs *a = &c->attrs.qknorm;
        sb_printf(&b, "; num_heads=%lld head_dim=%lld rope_head_dim=%lld epsilon=%.9g "
                  "simulate_fp8=%lld", (long long)a->num_heads, (long long)a->head_dim,
                  (long long)a->rope_head_dim, (double)a->epsilon, (long long)a->simulate_fp8);
        break;
    }
    case RK_OP_INVERSE_ROTARY_REGROUP: {
        const ropekit_inverse_rotary_regroup_attrs *a = &c->attrs.regroup;
        sb_printf(&b, "; num_heads=%lld head_dim=%lld rope_head_dim=%lld num_groups=%lld",
                  (long long)a->num_heads, (long long)a->head_dim, (long long)a->rope_head_dim,
                  (long long)a->num_groups);
        break;
    }
    case RK_OP_COUNT: break;
    }
    return buf;
}
