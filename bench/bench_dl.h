/* Shared by the benchmark programs that load several builds of libropekit.so into one process
 * (bench_ab.c, bench_threads.c): the public entry points they call, loaded with dlopen and
 * checked, a monotonic clock, a double comparison for qsort and bench_cpu.c's buffer allocator.
 * Include after _GNU_SOURCE is defined (madvise). */
#ifndef ROPEKIT_BENCH_DL_H
#define ROPEKIT_BENCH_DL_H
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ropekit.h"

typedef struct api {
    ropekit_status (*rot)(const ropekit_tensor *, const ropekit_tensor *, const ropekit_tensor *,
                          const ropekit_tensor *, const ropekit_rotary_embedding_attrs *,
                          const ropekit_tensor *);
    ropekit_status (*mrot)(const ropekit_tensor *, const ropekit_tensor *, const ropekit_tensor *,
                           const ropekit_tensor *, const ropekit_mrotary_embedding_attrs *,
                           const ropekit_tensor *);
    ropekit_status (*qk)(const ropekit_tensor *, const ropekit_tensor *, const ropekit_tensor *,
                         const ropekit_tensor *, const ropekit_tensor *,
                         const ropekit_qknorm_rotary_embedding_attrs *, const ropekit_tensor *,
                         const ropekit_tensor *);
    ropekit_status (*rg)(const ropekit_tensor *, const ropekit_tensor *, const ropekit_tensor *,
                         const ropekit_inverse_rotary_regroup_attrs *, const ropekit_tensor *);
    ropekit_status (*setv)(const char *);
    ropekit_status (*setn)(int);
    const char *(*err)(void);
} api;

static inline void *sym(void *h, const char *path, const char *name) {
    void *f = dlsym(h, name);
    if (!f) {
        fprintf(stderr, "%s: no symbol %s\n", path, name);
        exit(1);
    }
    return f;
}
static inline api load(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        exit(1);
    }
    api a;
    *(void **)&a.rot = sym(h, path, "ropekit_rotary_embedding");
    *(void **)&a.mrot = sym(h, path, "ropekit_mrotary_embedding");
    *(void **)&a.qk = sym(h, path, "ropekit_qknorm_rotary_embedding");
    *(void **)&a.rg = sym(h, path, "ropekit_inverse_rotary_regroup");
    *(void **)&a.setv = sym(h, path, "ropekit_set_cpu_variant");
    *(void **)&a.setn = sym(h, path, "ropekit_set_num_threads");
    *(void **)&a.err = sym(h, path, "ropekit_last_error");
    return a;
}

static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static inline int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* As bench_cpu.c: 2 MiB aligned with huge pages from 4 MiB on, 64 bytes of slack for offsets. */
static inline void *xalloc(size_t n) {
    void *p = NULL;
    size_t align = n >= ((size_t)4 << 20) ? (size_t)2 << 20 : 64;
    if (posix_memalign(&p, align, n + 64) != 0) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(2);
    }
    if (align > 64) (void)madvise(p, n + 64, MADV_HUGEPAGE);
    memset(p, 0, n + 64);
    return p;
}

#endif
