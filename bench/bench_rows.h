/* The rows of ropekit_bench_ab and ropekit_bench_copy (bench_ab.c, bench_copy.c): the C
 * benchmark's shapes (bench_cpu.c), their buffers (in a bm_set, bench_mem.h) and one call of a
 * build loaded with bench_dl.h; data from bench_data.h (the generator and fills of every CPU
 * benchmark). Include after bench_dl.h and bench_mem.h. */
#ifndef ROPEKIT_BENCH_ROWS_H
#define ROPEKIT_BENCH_ROWS_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_data.h"

enum { ROT, MROT, QK, RG };
/* The shapes of every CPU benchmark: name (the rows of ropekit_bench_ab, ropekit_bench_copy and
 * ropekit_bench_threads), title (the row of ropekit_bench's table and bench_ort.py, in that
 * order; NULL: not in the table). */
typedef struct shp {
    const char *name, *title;
    int kind;
    int64_t B, S, N, H, R;
    int bnsh, inplace, nopos, packed;
} shp;
static const shp g_shapes[] = {
    {"llama", "llama3-8b prefill", ROT, 1, 4096, 40, 128, 128, 0, 0, 0, 0},
    {"qkv", "llama3-8b QKV in place", ROT, 1, 4096, 40, 128, 128, 0, 1, 0, 1},
    {"bnsh", "bnsh 1x32x4096x128", ROT, 1, 4096, 32, 128, 128, 1, 0, 0, 0},
    {"bnship", "bnsh in place", ROT, 1, 4096, 32, 128, 128, 1, 1, 0, 0},
    {"bnshnp", "bnsh no position ids", ROT, 1, 4096, 32, 128, 128, 1, 0, 1, 0},
    {"llamanp", "llama3-8b no position ids", ROT, 1, 4096, 40, 128, 128, 0, 0, 1, 0},
    {"qwen3", "qwen3-0.6b prefill", ROT, 4, 2048, 24, 128, 128, 0, 0, 0, 0},
    {"phi", "phi-2 partial R=32", ROT, 1, 2048, 64, 80, 32, 0, 0, 0, 0},
    {"mrope", "qwen2.5-vl mrope", MROT, 1, 4096, 32, 128, 128, 0, 0, 0, 0},
    {"dec", "decode B=1 32x128", ROT, 1, 1, 32, 128, 128, 0, 0, 0, 0},
    {"dec64", "decode B=64 40x128", ROT, 64, 1, 40, 128, 128, 0, 0, 0, 0},
    {"qk", "dsv4 qknorm S=256", QK, 1, 256, 128, 512, 64, 0, 0, 0, 0},
    {"rg", "dsv4 regroup N=256", RG, 1, 256, 128, 512, 64, 0, 0, 0, 0},
    {"llamaip", NULL, ROT, 1, 4096, 40, 128, 128, 0, 1, 0, 0},
    {"llama16k", NULL, ROT, 1, 16384, 40, 128, 128, 0, 0, 0, 0}, /* x + y beyond the Xeon's L3 */
    /* 64 tokens: x and y (<= 1.3 MB) stay in the L2: the kernel's own speed, memory aside */
    {"llama64", NULL, ROT, 1, 64, 40, 128, 128, 0, 0, 0, 0},
    {"bnsh64", NULL, ROT, 1, 64, 32, 128, 128, 1, 0, 0, 0},
    {"bnshnp64", NULL, ROT, 1, 64, 32, 128, 128, 1, 0, 1, 0},
    {"phi64", NULL, ROT, 1, 64, 64, 80, 32, 0, 0, 0, 0},
    {"mrope64", NULL, MROT, 1, 64, 32, 128, 128, 0, 0, 0, 0},
    /* 16 tokens: float32 x and y (0.66 / 0.52 MB) in the L2 too (64 float32 tokens are 2.6 /
     * 2.1 MB, beyond a 2 MiB L2) */
    {"llama16", NULL, ROT, 1, 16, 40, 128, 128, 0, 0, 0, 0},
    {"bnsh16", NULL, ROT, 1, 16, 32, 128, 128, 1, 0, 0, 0},
    /* 4 tokens of the DeepSeek-V4 rows: 16-bit q and q_out 0.5 MB each (float32 1 MB), in the L2 */
    {"qk4", NULL, QK, 1, 4, 128, 512, 64, 0, 0, 0, 0},
    {"rg4", NULL, RG, 1, 4, 128, 512, 64, 0, 0, 0, 0},
};
#define N_SHAPES (sizeof g_shapes / sizeof g_shapes[0])

typedef struct job {
    int kind, nopos;
    ropekit_tensor x, y, kv, kvo, w, cs, sn, pos;
    ropekit_rotary_embedding_attrs ra;
    ropekit_mrotary_embedding_attrs ma;
    ropekit_qknorm_rotary_embedding_attrs qa;
    ropekit_inverse_rotary_regroup_attrs ga;
} job;

static inline void call(const api *a, const job *j) {
    ropekit_status st;
    if (j->kind == QK)
        st = a->qk(&j->x, &j->kv, &j->w, &j->cs, &j->sn, &j->qa, &j->y, &j->kvo);
    else if (j->kind == RG)
        st = a->rg(&j->x, &j->cs, &j->sn, &j->ga, &j->y);
    else if (j->kind == MROT)
        st = a->mrot(&j->x, &j->pos, &j->cs, &j->sn, &j->ma, &j->y);
    else
        st = a->rot(&j->x, &j->cs, &j->sn, j->nopos ? NULL : &j->pos, &j->ra, &j->y);
    if (st != ROPEKIT_OK) {
        fprintf(stderr, "call failed: %s\n", a->err());
        exit(1);
    }
}

/* row-major (the library's ropekit_tensor_contiguous; this program links no build) */
static inline ropekit_tensor ten(void *d, ropekit_dtype t, int32_t r, const int64_t *sh) {
    ropekit_tensor x;
    memset(&x, 0, sizeof x);
    x.data = d, x.dtype = t, x.rank = r;
    int64_t st = 1;
    for (int i = r - 1; i >= 0; --i)
        x.shape[i] = sh[i], x.strides[i] = st, st *= sh[i];
    return x;
}

/* The row's buffers and call; returns the bytes moved (as bench_cpu.c counts them). */
static inline double setup(const shp *s, ropekit_dtype T, size_t xoff, size_t yoff, job *j, bm_set *set) {
    const size_t es = T == ROPEKIT_FLOAT32 ? 4 : 2;
    const int64_t B = s->B, S = s->S, N = s->N, H = s->H, R = s->R, h = R / 2;
    memset(j, 0, sizeof *j);
    j->kind = s->kind;
#define BUF(n) bm_set_alloc(set, n)
    if (s->kind == QK || s->kind == RG) {
        const size_t nq = (size_t)(S * N * H), nt = (size_t)(S * R);
        char *q = (char *)BUF(nq * es) + xoff, *qo = (char *)BUF(nq * es) + yoff;
        float *cs = BUF(nt * 4), *sn = BUF(nt * 4);
        fill(q, T, nq, -2, 2), fill_cos_sin(cs, sn, ROPEKIT_FLOAT32, nt);
        if (s->kind == RG) {
            const int64_t G = 8, F = N * H;
            j->x = ten(q, T, 2, (int64_t[]){S, F});
            j->y = ten(qo, T, 3, (int64_t[]){G, S, F / G});
            j->cs = ten(cs, ROPEKIT_FLOAT32, 2, (int64_t[]){S, R});
            j->sn = ten(sn, ROPEKIT_FLOAT32, 2, (int64_t[]){S, R});
            j->ga = (ropekit_inverse_rotary_regroup_attrs){N, H, R, G};
            return 2.0 * (double)(nq * es) + 2.0 * (double)(nt * 4);
        }
        const size_t nk = (size_t)(S * H);
        char *kv = (char *)BUF(nk * es) + xoff, *kvo = (char *)BUF(nk * es) + yoff;
        float *w = BUF((size_t)H * 4);
        fill(kv, T, nk, -2, 2), fill(w, ROPEKIT_FLOAT32, (size_t)H, 0.5, 1.5);
        j->x = ten(q, T, 3, (int64_t[]){1, S, N * H});
        j->y = ten(qo, T, 4, (int64_t[]){1, S, N, H});
        j->kv = ten(kv, T, 3, (int64_t[]){1, S, H});
        j->kvo = ten(kvo, T, 3, (int64_t[]){1, S, H});
        j->w = ten(w, ROPEKIT_FLOAT32, 1, (int64_t[]){H});
        j->cs = ten(cs, ROPEKIT_FLOAT32, 3, (int64_t[]){1, S, R});
        j->sn = ten(sn, ROPEKIT_FLOAT32, 3, (int64_t[]){1, S, R});
        j->qa = (ropekit_qknorm_rotary_embedding_attrs){N, H, R, 1e-6f, 1};
        return 2.0 * (double)((nq + nk) * es) + 2.0 * (double)(nt * 4);
    }
    const int64_t P = S < 4096 ? 4096 : S, streams = s->kind == MROT ? 3 : 1;
    const size_t nx = (size_t)(B * S * N * H);
    char *x = (char *)BUF(nx * es) + xoff, *y = (char *)BUF(nx * es) + yoff;
    void *tc = BUF((size_t)(P * h) * es), *tsn = BUF((size_t)(P * h) * es);
    int64_t *pos = BUF((size_t)(streams * B * S) * 8);
    fill(x, T, nx, -2, 2), fill_cos_sin(tc, tsn, T, (size_t)(P * h));
    for (int64_t i = 0; i < streams * B * S; ++i)
        pos[i] = S == 1 ? (i * 977) % P : i % S;
    if (s->bnsh) {
        j->x = ten(x, T, 4, (int64_t[]){B, N, S, H});
        j->y = ten(y, T, 4, (int64_t[]){B, N, S, H});
    } else {
        j->x = ten(x, T, 3, (int64_t[]){B, S, N * H});
        j->y = ten(y, T, 3, (int64_t[]){B, S, N * H});
    }
    if (s->packed) { /* (B, S, (N + N/5) * H): q and k heads, then v */
        const int64_t row = (N + N / 5) * H;
        char *qkv = (char *)BUF((size_t)(B * S * row) * es) + xoff;
        fill(qkv, T, (size_t)(B * S * row), -2, 2);
        j->x = (ropekit_tensor){qkv, T, 3, {B, S, N * H}, {S * row, row, 1}};
    }
    if (s->inplace) j->y = j->x;
    j->cs = ten(tc, T, 2, (int64_t[]){P, h});
    j->sn = ten(tsn, T, 2, (int64_t[]){P, h});
    j->nopos = s->nopos;
    if (s->nopos) {
        j->cs = ten(tc, T, 3, (int64_t[]){B, S, h});
        j->sn = ten(tsn, T, 3, (int64_t[]){B, S, h});
    }
    if (s->kind == MROT) { /* Qwen2.5-VL: sections 16/24/24, position ids (3, B, S) */
        j->pos = ten(pos, ROPEKIT_INT64, 3, (int64_t[]){3, B, S});
        j->ma = (ropekit_mrotary_embedding_attrs)ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
        j->ma.mrope_section[0] = 16, j->ma.mrope_section[1] = 24, j->ma.mrope_section[2] = 24;
        j->ma.num_heads = N;
    } else {
        j->pos = ten(pos, ROPEKIT_INT64, 2, (int64_t[]){B, S});
        j->ra = (ropekit_rotary_embedding_attrs){0, R, s->bnsh ? 0 : N, 0};
    }
#undef BUF
    return 2.0 * (double)(nx * es) + (double)(B * S * R) * (double)es;
}

/* the job j of set s, moved onto the clone c (the large buffers c's own, the small ones shared) */
static inline job job_on(const job *j, const bm_set *s, const bm_set *c) {
    job k = *j;
    ropekit_tensor *t[] = {&k.x, &k.y, &k.kv, &k.kvo, &k.w, &k.cs, &k.sn, &k.pos};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; ++i)
        if (t[i]->data) t[i]->data = bm_rebase(t[i]->data, s, c);
    return k;
}

/* "shape:dtype" -> the shape (NULL: unknown) and the dtype */
static inline const shp *parse_row(const char *arg, ropekit_dtype *T) {
    char nm[32];
    snprintf(nm, sizeof nm, "%s", arg);
    char *colon = strchr(nm, ':');
    if (!colon) return NULL;
    *colon = 0;
    const char *dn = colon + 1;
    if (strcmp(dn, "f32") && strcmp(dn, "f16") && strcmp(dn, "bf16")) return NULL;
    *T = !strcmp(dn, "f32")   ? ROPEKIT_FLOAT32
         : !strcmp(dn, "f16") ? ROPEKIT_FLOAT16
                              : ROPEKIT_BFLOAT16;
    for (size_t i = 0; i < N_SHAPES; ++i)
        if (!strcmp(g_shapes[i].name, nm)) return &g_shapes[i];
    return NULL;
}
#endif
