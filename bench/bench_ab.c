/* ropekit_bench_ab: two or more builds of libropekit.so timed in ONE process (dlopen), one call of
 * each per round in a rotating order, then a copy of the same bytes by memcpy and by streaming
 * stores. Speed claims between builds need this: on the benchmark Xeon (a KVM guest) the same
 * build's time moves by 5-30% between processes and allocations, more than most changes; calls of
 * A and B alternated on the same buffers see the same pages, caches and load.
 *
 *   ropekit_bench_ab LIBS VARIANT SECONDS XOFF YOFF THREADS ROW...
 *     LIBS     name=path[,name=path...] (at most 8; the first is the base the ratios divide)
 *     VARIANT  ropekit_set_cpu_variant's name (avx512, avx2, ...) for every build
 *     SECONDS  time per row (at least 5 rounds)
 *     XOFF/YOFF x and y start this many bytes past a 64-byte line (numpy's large arrays: 16)
 *     ROW      shape:dtype, dtype f32 | f16 | bf16; shapes (the C benchmark's, bench_cpu.c):
 *              llama (1, 4096, 40*128), llamaip (the same in place), qkv (the q+k heads of a
 *              packed QKV buffer in place), llamanp (no position ids), qwen3 (4, 2048, 24*128),
 *              phi (1, 2048, 64*80, R = 32), bnsh (1, 32, 4096, 128), bnship, bnshnp, mrope
 *              (Qwen2.5-VL, 1, 4096, 32*128), qk (DeepSeek-V4 QKNorm S = 256), rg (its
 *              regroup), dec (one decode token, 32 x 128)
 *
 * Per row: the fastest call of each copy and of each build, the median in parentheses, each
 * build's ratio base time / build time (min and median), and copy time / build time (min; the
 * results tables' "vs memcpy") for memcpy ("c/l") and for the streaming-store copy ("nt/l"). */
#define _GNU_SOURCE /* madvise, MADV_HUGEPAGE */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "bench_dl.h"

/* A copy whose stores bypass the caches, as ropekit's streaming stores do (the memory-bound
 * reference where memcpy's normal stores leave the copy in a large last-level cache). */
static void nt_copy(char *d, const char *s, size_t n) {
    size_t i = 0;
#if defined(__SSE2__)
    for (; i < n && ((uintptr_t)(d + i) & 15); ++i)
        d[i] = s[i];
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 64; k += 16)
            _mm_stream_si128((__m128i *)(d + i + k), _mm_loadu_si128((const __m128i *)(s + i + k)));
    _mm_sfence();
#endif
    if (i < n) memcpy(d + i, s + i, n - i);
}

static uint32_t g_seed = 12345;
static float urand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)(g_seed >> 8) * (1.0f / 16777216.0f);
}
static uint16_t to_16(float v, ropekit_dtype t) { /* truncated: any value of the type will do */
    uint32_t u;
    memcpy(&u, &v, 4);
    if (t == ROPEKIT_BFLOAT16) return (uint16_t)(u >> 16);
    uint32_t sg = (u >> 16) & 0x8000u;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return (uint16_t)sg; /* |v| < 2^-14: zero */
    return (uint16_t)(sg | (uint32_t)e << 10 | ((u >> 13) & 0x3ffu));
}
static void put(void *p, ropekit_dtype t, size_t i, float v) {
    if (t == ROPEKIT_FLOAT32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = to_16(v, t);
}
static void fill(void *p, ropekit_dtype t, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; ++i)
        put(p, t, i, lo + (hi - lo) * urand());
}
/* cos/sin of random angles: a true rotation, so in-place rows keep their magnitude call after
 * call (no drift into subnormals or overflow) */
static void fill_cs(void *c, void *s, ropekit_dtype t, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        float a = 6.2831853f * urand();
        put(c, t, i, cosf(a)), put(s, t, i, sinf(a));
    }
}

enum { ROT, MROT, QK, RG };
typedef struct shp {
    const char *name;
    int kind;
    int64_t B, S, N, H, R;
    int bnsh, inplace, nopos, packed;
} shp;
static const shp g_shapes[] = {
    {"llama", ROT, 1, 4096, 40, 128, 128, 0, 0, 0, 0},
    {"llamaip", ROT, 1, 4096, 40, 128, 128, 0, 1, 0, 0},
    {"qkv", ROT, 1, 4096, 40, 128, 128, 0, 1, 0, 1},
    {"llamanp", ROT, 1, 4096, 40, 128, 128, 0, 0, 1, 0},
    {"qwen3", ROT, 4, 2048, 24, 128, 128, 0, 0, 0, 0},
    {"phi", ROT, 1, 2048, 64, 80, 32, 0, 0, 0, 0},
    {"bnsh", ROT, 1, 4096, 32, 128, 128, 1, 0, 0, 0},
    {"bnship", ROT, 1, 4096, 32, 128, 128, 1, 1, 0, 0},
    {"bnshnp", ROT, 1, 4096, 32, 128, 128, 1, 0, 1, 0},
    {"mrope", MROT, 1, 4096, 32, 128, 128, 0, 0, 0, 0},
    {"qk", QK, 1, 256, 128, 512, 64, 0, 0, 0, 0},
    {"rg", RG, 1, 256, 128, 512, 64, 0, 0, 0, 0},
    {"dec", ROT, 1, 1, 32, 128, 128, 0, 0, 0, 0},
};

typedef struct job {
    int kind, nopos;
    ropekit_tensor x, y, kv, kvo, w, cs, sn, pos;
    ropekit_rotary_embedding_attrs ra;
    ropekit_mrotary_embedding_attrs ma;
    ropekit_qknorm_rotary_embedding_attrs qa;
    ropekit_inverse_rotary_regroup_attrs ga;
} job;

static void call(const api *a, const job *j) {
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
static ropekit_tensor ten(void *d, ropekit_dtype t, int32_t r, const int64_t *sh) {
    ropekit_tensor x;
    memset(&x, 0, sizeof x);
    x.data = d, x.dtype = t, x.rank = r;
    int64_t st = 1;
    for (int i = r - 1; i >= 0; --i)
        x.shape[i] = sh[i], x.strides[i] = st, st *= sh[i];
    return x;
}

#define MAXB 10
/* The row's buffers and call; returns the bytes moved (as bench_cpu.c counts them). */
static double setup(const shp *s, ropekit_dtype T, size_t xoff, size_t yoff, job *j, void **bufs,
                    int *nb) {
    const size_t es = T == ROPEKIT_FLOAT32 ? 4 : 2;
    const int64_t B = s->B, S = s->S, N = s->N, H = s->H, R = s->R, h = R / 2;
    memset(j, 0, sizeof *j);
    j->kind = s->kind;
#define BUF(n) (bufs[(*nb)++] = xalloc(n))
    if (s->kind == QK || s->kind == RG) {
        const size_t nq = (size_t)(S * N * H), nt = (size_t)(S * R);
        char *q = (char *)BUF(nq * es) + xoff, *qo = (char *)BUF(nq * es) + yoff;
        float *cs = BUF(nt * 4), *sn = BUF(nt * 4);
        fill(q, T, nq, -2, 2), fill_cs(cs, sn, ROPEKIT_FLOAT32, nt);
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
        fill(kv, T, nk, -2, 2), fill(w, ROPEKIT_FLOAT32, (size_t)H, 0.5f, 1.5f);
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
    fill(x, T, nx, -2, 2), fill_cs(tc, tsn, T, (size_t)(P * h));
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

#define MAXL 8
#define MAXN 4000
static double g_t[MAXL][MAXN], g_c[MAXN], g_nt[MAXN];

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s LIBS VARIANT SECONDS XOFF YOFF THREADS ROW...\n", argv[0]);
        return 2;
    }
    api L[MAXL];
    const char *names[MAXL];
    int nl = 0;
    const int thr = atoi(argv[6]);
    for (char *tok = strtok(argv[1], ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq || nl == MAXL) {
            fprintf(stderr, "LIBS: name=path[,name=path...], at most %d\n", MAXL);
            return 2;
        }
        *eq = 0;
        names[nl] = tok;
        L[nl] = load(eq + 1);
        if (L[nl].setv(argv[2]) != ROPEKIT_OK || L[nl].setn(thr) != ROPEKIT_OK) {
            fprintf(stderr, "%s: %s\n", tok, L[nl].err());
            return 1;
        }
        ++nl;
    }
    const double budget = atof(argv[3]);
    const size_t xoff = (size_t)atol(argv[4]), yoff = (size_t)atol(argv[5]);
    if (nl == 0 || xoff > 63 || yoff > 63) {
        fprintf(stderr, "no LIBS, or an offset above 63\n");
        return 2;
    }
    printf("variant %s, %d thread(s), x +%zu B, y +%zu B; us per call: min (median); ratios: %s "
           "time / build time (min, median); c/l, nt/l: memcpy, streaming copy time / build time\n",
           argv[2], thr, xoff, yoff, names[0]);
    printf("%-12s %8s %8s", "row", "memcpy", "ntcopy");
    for (int l = 0; l < nl; ++l)
        printf(" %18s", names[l]);
    for (int l = 1; l < nl; ++l)
        printf(" %13s", names[l]);
    printf("\n");
    for (int a = 7; a < argc; ++a) {
        char nm[32];
        snprintf(nm, sizeof nm, "%s", argv[a]);
        char *colon = strchr(nm, ':');
        const shp *s = NULL;
        if (colon) {
            *colon = 0;
            for (size_t i = 0; i < sizeof g_shapes / sizeof g_shapes[0]; ++i)
                if (!strcmp(g_shapes[i].name, nm)) s = &g_shapes[i];
        }
        const char *dn = colon ? colon + 1 : "";
        const ropekit_dtype T = !strcmp(dn, "f32")   ? ROPEKIT_FLOAT32
                                : !strcmp(dn, "f16") ? ROPEKIT_FLOAT16
                                                     : ROPEKIT_BFLOAT16;
        if (!s || (strcmp(dn, "f32") && strcmp(dn, "f16") && strcmp(dn, "bf16"))) {
            fprintf(stderr, "row %s: not shape:f32|f16|bf16 (shapes: see the source)\n", argv[a]);
            return 2;
        }
        job j;
        void *bufs[MAXB];
        int nb = 0;
        const double bytes = setup(s, T, xoff, yoff, &j, bufs, &nb);
        const size_t half = (size_t)(bytes / 2);
        char *c0 = xalloc(half), *c1 = xalloc(half);
        memset(c0, 1, half);
        for (int l = 0; l < nl; ++l) /* warm-up: pages, caches, the library's thread pool */
            call(&L[l], &j);
        memcpy(c1 + yoff, c0 + xoff, half);
        int n = 0;
        const double t_end = now_s() + budget;
        while (n < MAXN && (now_s() < t_end || n < 5)) {
            for (int k = 0; k < nl; ++k) {
                const int l = (k + n) % nl;
                const double t0 = now_s();
                call(&L[l], &j);
                g_t[l][n] = now_s() - t0;
            }
            double t0 = now_s();
            memcpy(c1 + yoff, c0 + xoff, half);
            g_c[n] = now_s() - t0;
            t0 = now_s();
            nt_copy(c1 + yoff, c0 + xoff, half);
            g_nt[n] = now_s() - t0;
            ++n;
        }
        for (int l = 0; l < nl; ++l)
            qsort(g_t[l], (size_t)n, sizeof(double), cmp_d);
        qsort(g_c, (size_t)n, sizeof(double), cmp_d);
        qsort(g_nt, (size_t)n, sizeof(double), cmp_d);
        const int dp = g_c[0] < 1e-4 ? 2 : 0; /* decimals: small calls in hundredths of a us */
        printf("%-12s %8.*f %8.*f", argv[a], dp, g_c[0] * 1e6, dp, g_nt[0] * 1e6);
        for (int l = 0; l < nl; ++l)
            printf("  %8.*f (%6.*f)", dp, g_t[l][0] * 1e6, dp, g_t[l][n / 2] * 1e6);
        for (int l = 1; l < nl; ++l)
            printf("  %5.3f %5.3f", g_t[0][0] / g_t[l][0], g_t[0][n / 2] / g_t[l][n / 2]);
        printf("  c/l");
        for (int l = 0; l < nl; ++l)
            printf(" %5.2f", g_c[0] / g_t[l][0]);
        printf("  nt/l");
        for (int l = 0; l < nl; ++l)
            printf(" %5.2f", g_nt[0] / g_t[l][0]);
        printf("  %.1f MB n=%d\n", bytes * 1e-6, n);
        fflush(stdout);
        free(c0), free(c1);
        for (int i = 0; i < nb; ++i)
            free(bufs[i]);
    }
    return 0;
}
