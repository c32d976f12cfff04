/* Shared by the benchmark programs that load several builds of libropekit.so into one process
 * (bench_ab.c, bench_threads.c): the public entry points they call, loaded with dlopen and
 * checked; the clock and comparator of bench_time.h and the arena of bench_mem.h come with it. */
#ifndef ROPEKIT_BENCH_DL_H
#define ROPEKIT_BENCH_DL_H
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_mem.h"
#include "bench_time.h"
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

/* Buffers: bench_mem.h's arena (the one allocator of the CPU benchmarks; bm_reset() between rows). */
static inline void *xalloc(size_t n) {
    return bm_alloc(n);
}

#endif
