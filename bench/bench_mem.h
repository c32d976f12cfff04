/* The memory side of the CPU benchmarks' "vs a copy of the same bytes" (ropekit_bench,
 * ropekit_bench_ab, ropekit_bench_copy): buffers from one arena, cold buffer sets, the copies.
 *
 * The one method (bench/results-cpu.md, "Machine, build, method"): a large call and the copy it
 * is compared with both start with their operands out of the caches. Each timed call of a large
 * row takes the next of K copies of its large buffers (x, y, ...), and each timed copy the next
 * of K source/destination pairs, K such that a pool holds >= BM_POOL bytes (768 MiB, 2.5x the
 * benchmark Xeon's 300 MiB L3): by the time a set comes round again the other sets' traffic has
 * pushed it out. Reused buffers would instead leave a row's data in that L3 (a whole 16-bit
 * Llama row and its copy fit), so that both the copy's speed and the call's depended on what the
 * previous call left there and on the other tenants of the host's L3: the two tools disagreed
 * by 1.3-1.6x on the same row (R1 of session 7). The copy: the faster of glibc's memcpy and a
 * streaming-store copy (the memory's own speed for these bytes; glibc's memcpy takes streaming
 * stores only above a threshold from the L3's size, which this guest reports as 300 MiB). Small
 * calls (decode) stay in the caches, as they do in a model: they are in-cache figures. */
#ifndef ROPEKIT_BENCH_MEM_H
#define ROPEKIT_BENCH_MEM_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#ifndef BM_POOL
#define BM_POOL ((size_t)768 << 20) /* bytes of cold buffers per pool (calls, copies) */
#endif
#define BM_COLD_MIN ((size_t)4 << 20) /* buffers from this size are cloned per set */
#define BM_MAXB 12
#define BM_MAXK 64

/* ---- arena: one mapping, handed out in 2 MiB-aligned pieces (huge pages where the kernel gives
 * them, as numpy's large arrays get them), touched once; bm_reset() reuses it for the next row,
 * so its pages are faulted in only once per process ------------------------------------------- */
static char *bm_base;
static size_t bm_cap, bm_used, bm_touched;
static inline void *bm_alloc(size_t n) {
    if (!bm_base) {
        bm_cap = (size_t)6 << 30; /* address space only (MAP_NORESERVE) */
        void *p = mmap(NULL, bm_cap + ((size_t)2 << 20), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "arena: mmap failed\n");
            exit(2);
        }
        bm_base = (char *)(((uintptr_t)p + ((2u << 20) - 1)) & ~(uintptr_t)((2u << 20) - 1));
#ifdef MADV_HUGEPAGE
        (void)madvise(bm_base, bm_cap, MADV_HUGEPAGE);
#endif
    }
    const size_t a = n >= ((size_t)1 << 20) ? (size_t)2 << 20 : 4096;
    size_t at = (bm_used + a - 1) & ~(a - 1);
    const size_t end = at + n + 128; /* 64 bytes of slack for offsets, 64 past the end */
    if (end > bm_cap) {
        fprintf(stderr, "arena: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    if (end > bm_touched) { /* fault the new pages in now, not in a timed call */
        memset(bm_base + bm_touched, 0, end - bm_touched);
        bm_touched = end;
    }
    bm_used = end;
    return bm_base + at;
}
static inline void bm_reset(void) {
    bm_used = 0;
}

/* ---- buffer sets: the buffers of one row's call; clones share the small ones (tables, ids,
 * weights: read by every call, cache-resident in a model too) -------------------------------- */
typedef struct bm_set {
    int n;
    char *p[BM_MAXB];
    size_t sz[BM_MAXB];
} bm_set;
static inline void *bm_set_alloc(bm_set *s, size_t n) {
    if (s->n == BM_MAXB) {
        fprintf(stderr, "bm_set: too many buffers\n");
        exit(2);
    }
    s->sz[s->n] = n;
    return s->p[s->n++] = (char *)bm_alloc(n);
}
static inline size_t bm_set_large_bytes(const bm_set *s) {
    size_t t = 0;
    for (int i = 0; i < s->n; ++i)
        if (s->sz[i] >= BM_COLD_MIN) t += s->sz[i];
    return t;
}
static inline void bm_clone(const bm_set *s, bm_set *c) {
    *c = *s;
    for (int i = 0; i < s->n; ++i)
        if (s->sz[i] >= BM_COLD_MIN) {
            c->p[i] = (char *)bm_alloc(s->sz[i]);
            memcpy(c->p[i], s->p[i], s->sz[i] + 64);
        }
}
/* a pointer into set s, moved to the same place in its clone c */
static inline void *bm_rebase(const void *q, const bm_set *s, const bm_set *c) {
    for (int i = 0; i < s->n; ++i)
        if ((const char *)q >= s->p[i] && (const char *)q < s->p[i] + s->sz[i] + 64)
            return c->p[i] + ((const char *)q - s->p[i]);
    return (void *)(uintptr_t)q;
}
/* sets per pool: BM_POOL bytes of large buffers at least, 2 at least (1: nothing large) */
static inline int bm_sets_for(size_t large_bytes) {
    if (large_bytes == 0) return 1;
    size_t k = (BM_POOL + large_bytes - 1) / large_bytes;
    return k < 2 ? 2 : k > BM_MAXK ? BM_MAXK : (int)k;
}

/* ---- the copies ------------------------------------------------------------------------------ */
/* n bytes with streaming stores (whole 16-byte pieces from d's first 16-byte boundary on), as
 * ropekit's large calls store; no fence (bm_nt_copy fences; a caller storing many pieces fences
 * once) */
static inline void bm_nt_pieces(char *d, const char *s, size_t n) {
    size_t i = 0;
#if defined(__SSE2__)
    for (; i < n && ((uintptr_t)(d + i) & 15); ++i)
        d[i] = s[i];
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 64; k += 16)
            _mm_stream_si128((__m128i *)(d + i + k), _mm_loadu_si128((const __m128i *)(s + i + k)));
#endif
    if (i < n) memcpy(d + i, s + i, n - i);
}
static inline void bm_nt_copy(char *d, const char *s, size_t n) {
    bm_nt_pieces(d, s, n);
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

/* K source/destination pairs of n bytes at offsets (so, doff) past a 64-byte line */
typedef struct bm_copies {
    int k, next;
    size_t n;
    char *src[BM_MAXK], *dst[BM_MAXK];
} bm_copies;
static inline void bm_copies_init(bm_copies *c, size_t n, size_t so, size_t doff, int cold) {
    c->k = cold ? bm_sets_for(2 * n) : 1, c->next = 0, c->n = n;
    for (int i = 0; i < c->k; ++i) {
        c->src[i] = (char *)bm_alloc(n) + so, c->dst[i] = (char *)bm_alloc(n) + doff;
        memset(c->src[i], 1 + i, n);
    }
}
#endif
