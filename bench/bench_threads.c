/* ropekit_bench_threads: one thread vs two, and builds against each other, alternated in one
 * process (each library loaded with dlopen; public API only). Results:
 * bench/results-cpu-threads.md. ropekit_bench_threads LIBS VARIANT SECONDS ROW... (e.g.
 * ropekit_bench_threads new=build/libropekit.so avx2 0.2 llama:f32 dec:bf16:32) LIBS:
 * name=path,name=path (up to 4). Each round runs, in a rotated order, every library with 1 thread
 * and with 2 threads, a memcpy of half the bytes moved on 1 thread and on 2 threads (a helper
 * thread sleeping on a condition variable, as bench_cpu.c), and reports min / median us per call
 * and the ratios t1/t2 (per library) and copy1/copy2 (the copy's own 2-thread scaling on this
 * guest: the ceiling for memory-bound rows). ROW: NAME:DTYPE[:S] with NAME one of llama qkv bnsh
 * bnship bnshnp llamanp qwen3 phi mrope qk rg dec (llama 32 heads x 128 at S tokens: the cost-model
 * sweep) dec64 (B tokens, 40x128). THR_GAP_US=N: every timed call made alone after an N us pause
 * (pool workers asleep). */

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_dl.h"
#include "bench_data.h"

static ropekit_tensor tc(void *d, ropekit_dtype t, int32_t r, const int64_t *sh) {
    ropekit_tensor x;
    memset(&x, 0, sizeof x);
    x.data = d, x.dtype = t, x.rank = r;
    int64_t st = 1;
    for (int i = r - 1; i >= 0; --i)
        x.shape[i] = sh[i], x.strides[i] = st, st *= sh[i];
    return x;
}

/* ---- a 2-thread memcpy: the helper sleeps on a condition variable ---- */
static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ccv = PTHREAD_COND_INITIALIZER, cdone = PTHREAD_COND_INITIALIZER;
static int cgen, cleft;
static char *cdst;
static const char *csrc;
static size_t cn;
static void *cworker(void *arg) {
    (void)arg;
    int seen = 0;
    pthread_mutex_lock(&cmu);
    for (;;) {
        while (cgen == seen)
            pthread_cond_wait(&ccv, &cmu);
        seen = cgen;
        pthread_mutex_unlock(&cmu);
        size_t b = (cn / 2) & ~(size_t)63;
        memcpy(cdst + b, csrc + b, cn - b);
        pthread_mutex_lock(&cmu);
        if (--cleft == 0) pthread_cond_signal(&cdone);
    }
    return NULL;
}
static void copy2(char *d, const char *s, size_t n) {
    pthread_mutex_lock(&cmu);
    cdst = d, csrc = s, cn = n, cleft = 1, ++cgen;
    pthread_cond_signal(&ccv);
    pthread_mutex_unlock(&cmu);
    memcpy(d, s, (n / 2) & ~(size_t)63);
    pthread_mutex_lock(&cmu);
    while (cleft > 0)
        pthread_cond_wait(&cdone, &cmu);
    pthread_mutex_unlock(&cmu);
}

enum { ROT, MROT, QK, RG };
typedef struct job {
    int kind, nopos;
    ropekit_tensor x, y, kv, kvo, w, cs, sn, pos;
    ropekit_rotary_embedding_attrs ra;
    ropekit_mrotary_embedding_attrs ma;
    ropekit_qknorm_rotary_embedding_attrs qa;
    ropekit_inverse_rotary_regroup_attrs ga;
} job;
static void call(api *a, job *j) {
    ropekit_status st;
    if (j->kind == QK)
        st = a->qk(&j->x, &j->kv, &j->w, &j->cs, &j->sn, &j->qa, &j->y, &j->kvo);
    else if (j->kind == RG)
        st = a->rg(&j->x, &j->cs, &j->sn, &j->ga, &j->y);
    else if (j->kind == MROT)
        st = a->mrot(&j->x, &j->pos, &j->cs, &j->sn, &j->ma, &j->y);
    else
        st = a->rot(&j->x, &j->cs, &j->sn, j->nopos ? NULL : &j->pos, &j->ra, &j->y);
    if (st) {
        fprintf(stderr, "call failed: %s\n", a->err());
        exit(1);
    }
}
typedef struct shp {
    const char *name;
    int kind;
    int64_t B, S, N, H, R;
    int bnsh, inplace, nopos, packed;
} shp;
static const shp g_sh[] = {
    {"llama", ROT, 1, 4096, 40, 128, 128, 0, 0, 0, 0},
    {"qkv", ROT, 1, 4096, 40, 128, 128, 0, 1, 0, 1},
    {"bnsh", ROT, 1, 4096, 32, 128, 128, 1, 0, 0, 0},
    {"bnship", ROT, 1, 4096, 32, 128, 128, 1, 1, 0, 0},
    {"bnshnp", ROT, 1, 4096, 32, 128, 128, 1, 0, 1, 0},
    {"llamanp", ROT, 1, 4096, 40, 128, 128, 0, 0, 1, 0},
    {"qwen3", ROT, 4, 2048, 24, 128, 128, 0, 0, 0, 0},
    {"phi", ROT, 1, 2048, 64, 80, 32, 0, 0, 0, 0},
    {"mrope", MROT, 1, 4096, 32, 128, 128, 0, 0, 0, 0},
    {"qk", QK, 1, 256, 128, 512, 64, 0, 0, 0, 0},
    {"rg", RG, 1, 256, 128, 512, 64, 0, 0, 0, 0},
    {"dec", ROT, 1, 1, 32, 128, 128, 0, 0, 0, 0},
    {"dec64", ROT, 64, 1, 40, 128, 128, 0, 0, 0, 0},
};
static double build(job *j, const shp *s0, ropekit_dtype T, int64_t Sover, void **bufs, int *nb) {
    shp s = *s0;
    if (Sover > 0) {
        if (!strcmp(s.name, "dec64"))
            s.B = Sover;
        else
            s.S = Sover;
    }
    size_t es = T == ROPEKIT_FLOAT32 ? 4 : 2;
    memset(j, 0, sizeof *j);
    j->kind = s.kind;
    int64_t B = s.B, S = s.S, N = s.N, H = s.H, R = s.R, h = R / 2;
    if (s.kind == QK) {
        size_t nq = S * N * H, nk = S * H, nt = S * R;
        void *q = bufs[(*nb)++] = xalloc(nq * es), *qo = bufs[(*nb)++] = xalloc(nq * es);
        void *kv = bufs[(*nb)++] = xalloc(nk * es), *kvo = bufs[(*nb)++] = xalloc(nk * es);
        float *w = bufs[(*nb)++] = xalloc(H * 4), *cs = bufs[(*nb)++] = xalloc(nt * 4),
              *sn = bufs[(*nb)++] = xalloc(nt * 4);
        fill(q, T, nq, -2, 2), fill(kv, T, nk, -2, 2), fill(w, ROPEKIT_FLOAT32, H, .5, 1.5);
        fill(cs, ROPEKIT_FLOAT32, nt, -1, 1), fill(sn, ROPEKIT_FLOAT32, nt, -1, 1);
        j->x = tc(q, T, 3, (int64_t[]){1, S, N * H});
        j->y = tc(qo, T, 4, (int64_t[]){1, S, N, H});
        j->kv = tc(kv, T, 3, (int64_t[]){1, S, H});
        j->kvo = tc(kvo, T, 3, (int64_t[]){1, S, H});
        j->w = tc(w, ROPEKIT_FLOAT32, 1, (int64_t[]){H});
        j->cs = tc(cs, ROPEKIT_FLOAT32, 3, (int64_t[]){1, S, R});
        j->sn = tc(sn, ROPEKIT_FLOAT32, 3, (int64_t[]){1, S, R});
        j->qa = (ropekit_qknorm_rotary_embedding_attrs){N, H, R, 1e-6f, 1};
        return 2.0 * (nq + nk) * es + 2.0 * nt * 4;
    }
    if (s.kind == RG) {
        int64_t Tn = S, F = N * H, G = 8;
        size_t nx = Tn * F, nt = Tn * R;
        void *x = bufs[(*nb)++] = xalloc(nx * es), *o = bufs[(*nb)++] = xalloc(nx * es);
        float *cs = bufs[(*nb)++] = xalloc(nt * 4), *sn = bufs[(*nb)++] = xalloc(nt * 4);
        fill(x, T, nx, -2, 2), fill(cs, ROPEKIT_FLOAT32, nt, -1, 1),
            fill(sn, ROPEKIT_FLOAT32, nt, -1, 1);
        j->x = tc(x, T, 2, (int64_t[]){Tn, F});
        j->y = tc(o, T, 3, (int64_t[]){G, Tn, F / G});
        j->cs = tc(cs, ROPEKIT_FLOAT32, 2, (int64_t[]){Tn, R});
        j->sn = tc(sn, ROPEKIT_FLOAT32, 2, (int64_t[]){Tn, R});
        j->ga = (ropekit_inverse_rotary_regroup_attrs){N, H, R, G};
        return 2.0 * nx * es + 2.0 * nt * 4;
    }
    int64_t P = S < 4096 ? 4096 : S;
    size_t nx = B * S * N * H;
    void *x = bufs[(*nb)++] = xalloc(nx * es), *y = bufs[(*nb)++] = xalloc(nx * es);
    void *tcb = bufs[(*nb)++] = xalloc(P * h * es), *tsb = bufs[(*nb)++] = xalloc(P * h * es);
    fill(x, T, nx, -2, 2), fill_cos_sin(tcb, tsb, T, P * h);
    int streams = s.kind == MROT ? 3 : 1;
    int64_t *pos = bufs[(*nb)++] = xalloc(streams * B * S * 8);
    for (int64_t i = 0; i < streams * B * S; ++i)
        pos[i] = S == 1 ? (int64_t)(urand() * (P - 1)) : i % S;
    if (s.bnsh) {
        j->x = tc(x, T, 4, (int64_t[]){B, N, S, H});
        j->y = tc(y, T, 4, (int64_t[]){B, N, S, H});
    } else {
        j->x = tc(x, T, 3, (int64_t[]){B, S, N * H});
        j->y = tc(y, T, 3, (int64_t[]){B, S, N * H});
    }
    if (s.packed) {
        int64_t row = (N + N / 5) * H;
        void *qkv = bufs[(*nb)++] = xalloc(B * S * row * es);
        fill(qkv, T, B * S * row, -2, 2);
        j->x = (ropekit_tensor){qkv, T, 3, {B, S, N * H}, {S * row, row, 1}};
    }
    if (s.inplace) j->y = j->x;
    j->nopos = s.nopos;
    if (s.nopos) {
        j->cs = tc(tcb, T, 3, (int64_t[]){B, S, h});
        j->sn = tc(tsb, T, 3, (int64_t[]){B, S, h});
    } else {
        j->cs = tc(tcb, T, 2, (int64_t[]){P, h});
        j->sn = tc(tsb, T, 2, (int64_t[]){P, h});
    }
    if (s.kind == MROT) {
        j->pos = tc(pos, ROPEKIT_INT64, 3, (int64_t[]){3, B, S});
        j->ma = (ropekit_mrotary_embedding_attrs){{16, 24, 24}, 0, 0, R, N, 1.0f, 0, 0};
    } else {
        j->pos = tc(pos, ROPEKIT_INT64, 2, (int64_t[]){B, S});
        j->ra = (ropekit_rotary_embedding_attrs){0, R, s.bnsh ? 0 : N, 0};
    }
    return 2.0 * nx * es + (double)B * S * R * es;
}

#define MAXL 4
int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: ropekit_bench_threads LIBS VARIANT SECONDS ROW..\n");
        return 2;
    }
    api L[MAXL];
    char *names[MAXL];
    int nl = 0;
    char *libs = strdup(argv[1]);
    for (char *tok = strtok(libs, ","); tok && nl < MAXL; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            fprintf(stderr, "LIBS: name=path\n");
            return 2;
        }
        *eq = 0;
        names[nl] = tok;
        L[nl] = load(eq + 1);
        if (L[nl].setv(argv[2])) {
            fprintf(stderr, "variant %s refused\n", argv[2]);
            return 1;
        }
        ++nl;
    }
    double budget = atof(argv[3]);
    pthread_t ct;
    pthread_create(&ct, NULL, cworker, NULL);
    printf(
        "variant %s; us per call, min (median); t1/t2 = 1-thread / 2-thread time (min, median)\n",
        argv[2]);
    printf("%-14s %8s %7s %9s %13s", "row", "MB", "copy1", "copy2", "copy1/2");
    for (int l = 0; l < nl; ++l)
        printf(" | %-6s %9s %9s %11s", names[l], "1thr", "2thr", "t1/t2");
    printf("\n");
    for (int a = 4; a < argc; ++a) {
        char nm[64];
        snprintf(nm, sizeof nm, "%s", argv[a]);
        char *c1 = strchr(nm, ':');
        if (!c1) continue;
        *c1 = 0;
        char *dn = c1 + 1, *c2 = strchr(dn, ':');
        int64_t Sover = 0;
        if (c2) *c2 = 0, Sover = atoll(c2 + 1);
        ropekit_dtype T = !strcmp(dn, "f32")   ? ROPEKIT_FLOAT32
                          : !strcmp(dn, "f16") ? ROPEKIT_FLOAT16
                                               : ROPEKIT_BFLOAT16;
        const shp *s = NULL;
        for (size_t i = 0; i < sizeof g_sh / sizeof g_sh[0]; ++i)
            if (!strcmp(g_sh[i].name, nm)) s = &g_sh[i];
        if (!s) {
            fprintf(stderr, "no row %s\n", nm);
            continue;
        }
        void *bufs[12];
        int nb = 0;
        job j;
        double bytes = build(&j, s, T, Sover, bufs, &nb);
        size_t half = (size_t)(bytes / 2);
        char *k0 = xalloc(half), *k1 = xalloc(half);
        memset(k0, 1, half);
        /* items: lib l with 1 thread = 2l, with 2 threads = 2l+1; copy1 = 2nl, copy2 = 2nl+1 */
        const int ni = 2 * nl + 2;
        enum { MAXN = 20000 };
        static double tt[2 * MAXL + 2][MAXN];
        for (int l = 0; l < nl; ++l) {
            L[l].setn(1), call(&L[l], &j), L[l].setn(2), call(&L[l], &j);
        }
        memcpy(k1, k0, half), copy2(k1, k0, half);
        /* repeat each item so that one sample is >= ~20 us */
        double t0 = now_s();
        call(&L[0], &j);
        double one = now_s() - t0;
        int reps = one < 20e-6 ? (int)(20e-6 / (one > 1e-8 ? one : 1e-8)) + 1 : 1;
        /* THR_GAP_US: each timed call alone, after a pause of that many us (pool workers asleep) */
        const char *gap_env = getenv("THR_GAP_US");
        const long gap_us = gap_env ? atol(gap_env) : 0;
        if (gap_us > 0) reps = 1;
        int n = 0;
        double t_end = now_s() + budget;
        while (n < MAXN && (now_s() < t_end || n < 5)) {
            for (int k = 0; k < ni; ++k) {
                int it = (k + n) % ni;
                double ta;
                if (gap_us > 0) {
                    struct timespec ts = {0, gap_us * 1000};
                    nanosleep(&ts, NULL);
                }
                if (it < 2 * nl) {
                    api *A = &L[it / 2];
                    A->setn(it % 2 ? 2 : 1);
                    ta = now_s();
                    for (int r = 0; r < reps; ++r)
                        call(A, &j);
                } else if (it == 2 * nl) {
                    ta = now_s();
                    for (int r = 0; r < reps; ++r)
                        memcpy(k1, k0, half);
                } else {
                    ta = now_s();
                    for (int r = 0; r < reps; ++r) {
                        if (2 * half >= (1u << 20))
                            copy2(k1, k0, half);
                        else
                            memcpy(k1, k0, half);
                    }
                }
                tt[it][n] = (now_s() - ta) / reps;
            }
            ++n;
        }
        for (int i = 0; i < ni; ++i)
            qsort(tt[i], n, sizeof(double), cmp_d);
        const int m = n / 2;
        char label[160];
        snprintf(label, sizeof label, "%s:%s%s%s", nm, dn, c2 ? ":" : "", c2 ? c2 + 1 : "");
        printf("%-14s %8.3f %7.1f %9.1f %6.2f %6.2f", label, bytes / 1e6, tt[2 * nl][0] * 1e6,
               tt[2 * nl + 1][0] * 1e6, tt[2 * nl][0] / tt[2 * nl + 1][0],
               tt[2 * nl][m] / tt[2 * nl + 1][m]);
        for (int l = 0; l < nl; ++l)
            printf(" | %-6s %9.2f %9.2f %5.2f %5.2f", names[l], tt[2 * l][0] * 1e6,
                   tt[2 * l + 1][0] * 1e6, tt[2 * l][0] / tt[2 * l + 1][0],
                   tt[2 * l][m] / tt[2 * l + 1][m]);
        printf("  n=%d r=%d\n", n, reps);
        fflush(stdout);
        free(k0), free(k1);
        for (int i = 0; i < nb; ++i)
            free(bufs[i]);
    }
    return 0;
}
