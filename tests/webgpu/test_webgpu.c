/* test_webgpu: every shared correctness case (tests/cases/OP.bin, the vectors the CPU conformance
 * suite runs) on a WebGPU adapter, compared with the CPU reference (ref.c) bit for bit, in every
 * context configuration that selects a different variant family:
 *   default      shader-f16 and shader-f64 where the adapter has them
 *   packed16     shader-f16 off: float16 stored packed in u32
 *   nof64        shader-f64 off: the double arithmetic in integers (exact32), still bit for bit
 *   smallgrid    maxComputeWorkgroupsPerDimension capped at 3: the 2-D and 3-D grids
 * plus in place (x and y one buffer) for the rotary cases, variant names, and refusals.
 *
 * Backend: ROPEKIT_WEBGPU_BACKEND=vulkan|gl|any (default any); ROPEKIT_CASES_DIR overrides the
 * case folder compiled in. No adapter: exit 77 (skipped),
 * unless ROPEKIT_WEBGPU_REQUIRE=1 (CI), then it fails. Prints "N passed, N failed, N skipped" (tests/check.h).
 * ROPEKIT_WEBGPU_SAMPLE=K (default 1: everything) runs a deterministic sample for slow builds
 * (scripts/test.sh uses it under ASan): configuration i (in the order above) runs shared case k of
 * each file when (k + i) % K == 0, so with K = 4 every case still runs once, in one configuration.
 * ROPEKIT_WEBGPU_SAMPLE=BACKEND:K[,BACKEND:K...] samples only on those ROPEKIT_WEBGPU_BACKEND
 * values (CI's release run: gl:4, every case on Vulkan in every configuration, each once on GL).
 * ROPEKIT_WEBGPU_CONFIGS=NAME[,NAME...] runs only those configurations (then the other checks),
 * for short runs on a GPU machine. ROPEKIT_WEBGPU_TIMING=1 prints where the time went (sections,
 * and the variants whose first call, which builds the pipeline, costs most).
 * The tests share their contexts (shared_context, close_context): a context of the same options
 * is reused, with its pipelines, instead of building the same pipelines again.
 * Progress: a line per configuration and case file, as it goes (stdout is line-buffered). */
#define _POSIX_C_SOURCE 200112L /* setenv, unsetenv, clock_gettime */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cases.h"
#include "check.h"
#include "ropekit_webgpu.h"

static float to_f32(const void *p, ropekit_dtype dt, size_t i) {
    if (dt == ROPEKIT_FLOAT32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (dt == ROPEKIT_BFLOAT16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    /* float16 */
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), (int)e - 25);
    return s ? -v : v;
}

/* ulp distance for finite values of one dtype (ordered-integer difference) */
static uint64_t ulp_diff(const void *a, const void *b, ropekit_dtype dt, size_t i) {
    int64_t x, y;
    if (dt == ROPEKIT_FLOAT32) {
        int32_t u, v;
        memcpy(&u, (const char *)a + 4 * i, 4);
        memcpy(&v, (const char *)b + 4 * i, 4);
        x = u < 0 ? (int64_t)INT32_MIN - u : u;
        y = v < 0 ? (int64_t)INT32_MIN - v : v;
    } else {
        int16_t u, v;
        memcpy(&u, (const char *)a + 2 * i, 2);
        memcpy(&v, (const char *)b + 2 * i, 2);
        x = u < 0 ? (int64_t)INT16_MIN - u : u;
        y = v < 0 ? (int64_t)INT16_MIN - v : v;
    }
    return (uint64_t)(x > y ? x - y : y - x);
}

typedef struct config {
    const char *name;
    ropekit_webgpu_options opt;
    int batch; /* ropekit_webgpu_set_batch */
} config;

static ropekit_webgpu_backend backend_from_env(void) {
    const char *b = getenv("ROPEKIT_WEBGPU_BACKEND");
    if (b && strcmp(b, "vulkan") == 0) return ROPEKIT_WEBGPU_BACKEND_VULKAN;
    if (b && strcmp(b, "gl") == 0) return ROPEKIT_WEBGPU_BACKEND_GL;
    return ROPEKIT_WEBGPU_BACKEND_ANY;
}

/* ROPEKIT_WEBGPU_TIMING=1 (measurement, not a check): the process CPU time and wall time of
 * every run_gpu call, by variant. The first call of a variant in a context includes building
 * its pipeline (naga, then Mesa's shader compiler on lavapipe/llvmpipe, where the compile
 * happens at the first dispatch), so those calls give the compile cost per variant and how
 * much of it is the same variant built again in another context of the same features.
 * Printed at the end with each section's time. */
static int g_timing;
static int g_ctx_serial; /* serial number of the context last created (create_context) */
static struct { const ropekit_webgpu *ctx; int serial; } g_ctxs[16];
typedef struct timing_entry {
    char variant[160];
    int f64, last_serial, builds, calls;
    double first_cpu, first_wall, rest_cpu;
} timing_entry;
static timing_entry *g_tim;
static int g_ntim, g_captim;

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ropekit_webgpu_create, numbered for the timing (a new context's address may be a destroyed
 * one's) */
static ropekit_status create_context(const ropekit_webgpu_options *opt, ropekit_webgpu **ctx) {
    ropekit_status st = ropekit_webgpu_create(opt, ctx);
    if (st == ROPEKIT_OK && g_timing) {
        int k = 0;
        while (k < 15 && g_ctxs[k].ctx && g_ctxs[k].ctx != *ctx) ++k;
        g_ctxs[k].ctx = *ctx, g_ctxs[k].serial = ++g_ctx_serial;
    }
    return st;
}

static void timing_add(const ropekit_webgpu *ctx, const char *variant, double cpu, double wall) {
    int serial = -1;
    for (int k = 0; k < 16; ++k)
        if (g_ctxs[k].ctx == ctx) serial = g_ctxs[k].serial;
    const int f64 = ropekit_webgpu_has_f64(ctx);
    int i = 0;
    while (i < g_ntim && (g_tim[i].f64 != f64 || strcmp(g_tim[i].variant, variant) != 0)) ++i;
    if (i == g_ntim) {
        if (g_ntim == g_captim) {
            timing_entry *n = realloc(g_tim, (size_t)(g_captim * 2 + 64) * sizeof *n);
            if (!n) return;
            g_tim = n, g_captim = g_captim * 2 + 64;
        }
        memset(&g_tim[i], 0, sizeof g_tim[i]);
        snprintf(g_tim[i].variant, sizeof g_tim[i].variant, "%s", variant);
        g_tim[i].f64 = f64, g_tim[i].last_serial = -2, ++g_ntim;
    }
    timing_entry *e = &g_tim[i];
    ++e->calls;
    if (e->last_serial != serial) { /* first call in this context: the pipeline is built */
        e->last_serial = serial, ++e->builds;
        e->first_cpu += cpu, e->first_wall += wall;
    } else {
        e->rest_cpu += cpu;
    }
}

static int timing_cmp(const void *a, const void *b) {
    const double x = ((const timing_entry *)a)->first_cpu, y = ((const timing_entry *)b)->first_cpu;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void timing_report(void) {
    if (!g_timing) return;
    int builds = 0, calls = 0;
    double first = 0, again = 0, rest = 0, first_wall = 0;
    for (int i = 0; i < g_ntim; ++i) {
        const timing_entry *e = &g_tim[i];
        builds += e->builds, calls += e->calls, first += e->first_cpu, rest += e->rest_cpu;
        first_wall += e->first_wall;
        if (e->builds > 1) again += e->first_cpu * (double)(e->builds - 1) / (double)e->builds;
    }
    printf("timing: %d run_gpu calls, %d distinct variants (by name and shader-f64), built %d times "
           "(first call per context); first calls %.1f s CPU (%.1f s wall), later calls %.1f s CPU; "
           "builds of a variant already built in another context: about %.1f s CPU\n",
           calls, g_ntim, builds, first, first_wall, rest, again);
    static const char *fams[] = {"rotary ", "qknorm row ", "qknorm ", "regroup "};
    for (int f = 0; f < 4; ++f) {
        int n = 0, b = 0;
        double t = 0;
        for (int i = 0; i < g_ntim; ++i) {
            const char *v = g_tim[i].variant;
            if (strncmp(v, fams[f], strlen(fams[f])) != 0 || (f == 2 && strncmp(v, "qknorm row ", 11) == 0))
                continue;
            ++n, b += g_tim[i].builds, t += g_tim[i].first_cpu;
        }
        printf("timing: %s kernels: %d variants, built %d times, %.1f s CPU in first calls\n", fams[f], n, b, t);
    }
    qsort(g_tim, (size_t)g_ntim, sizeof *g_tim, timing_cmp);
    for (int i = 0; i < g_ntim && i < 25; ++i)
        printf("timing:   %6.2f s CPU in %d first calls (%.2f s each), %d calls: %s%s\n", g_tim[i].first_cpu,
               g_tim[i].builds, g_tim[i].first_cpu / g_tim[i].builds, g_tim[i].calls, g_tim[i].variant,
               g_tim[i].f64 ? "" : " [no f64]");
    free(g_tim);
}

/* the time of one section (a configuration, a test) when timing */
static void timing_section(const char *name, double cpu0, double wall0) {
    if (g_timing)
        printf("timing: section %s: %.1f s CPU, %.1f s wall\n", name,
               clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0, clock_s(CLOCK_MONOTONIC) - wall0);
}

/* A buffer of at least 16 bytes holding n bytes of data (NULL on failure). */
static WGPUBuffer upload_bytes(ropekit_webgpu *ctx, const void *data, size_t n) {
    WGPUBuffer b = NULL;
    if (ropekit_webgpu_buffer_create(ctx, n > 16 ? n : 16, &b) != ROPEKIT_OK) return NULL;
    if (n && ropekit_webgpu_write(ctx, b, 0, data, n) != ROPEKIT_OK) {
        wgpuBufferRelease(b);
        return NULL;
    }
    return b;
}

static WGPUBuffer upload(ropekit_webgpu *ctx, const ropekit_tensor *t) {
    return upload_bytes(ctx, t->data, rk_tensor_nbytes(t));
}

static ropekit_webgpu_tensor gview(WGPUBuffer b, const ropekit_tensor *t) {
    return ropekit_webgpu_tensor_contiguous(b, 0, t->dtype, t->rank, t->shape);
}

/* A context of its own for one test (the caller destroys it); a failure to create it is a
 * failed check (NULL returned). */
static ropekit_webgpu *open_context(const ropekit_webgpu_options *opt) {
    ropekit_webgpu *ctx = NULL;
    if (create_context(opt, &ctx) != ROPEKIT_OK) {
        CHECK(0, "context: %s", ropekit_webgpu_last_error());
        return NULL;
    }
    return ctx;
}

/* Contexts are kept for the whole run, one per set of options (and ROPEKIT_WEBGPU_INTEGER_PATHS,
 * read at creation): shared_context with the options of an earlier context gives that context
 * back, with the pipelines it has built. A pipeline takes 0.05-12 s to build on Mesa's software
 * adapters and the tests use many of the same variants, which each test's own context built
 * again (the same WGSL on a device of the same features). Options that differ only in
 * disable_f16 / disable_f64 and give the same features (OpenGL ES has neither; float16 is always
 * packed) share one context too. close_context hands it back, unbatched; run_call_chain, which
 * destroys its context with work in flight, makes its own. */
static struct pooled_context {
    ropekit_webgpu_options opt;
    int integer_paths;
    ropekit_webgpu *ctx;
} g_pool[16];
static int g_npool;

static int integer_paths_env(void) {
    const char *ip = getenv("ROPEKIT_WEBGPU_INTEGER_PATHS");
    return ip && strcmp(ip, "1") == 0;
}

/* A shared context for one test, handed back with close_context (never destroyed by the test);
 * a failure to create it is a failed check (NULL returned). */
static ropekit_webgpu *shared_context(const ropekit_webgpu_options *opt) {
    const int ip = integer_paths_env();
    for (int i = 0; i < g_npool; ++i)
        if (g_pool[i].integer_paths == ip && memcmp(&g_pool[i].opt, opt, sizeof *opt) == 0)
            return g_pool[i].ctx;
    ropekit_webgpu *ctx = NULL;
    if (create_context(opt, &ctx) != ROPEKIT_OK) {
        CHECK(0, "context: %s", ropekit_webgpu_last_error());
        return NULL;
    }
    for (int i = 0; i < g_npool; ++i) {
        ropekit_webgpu_options a = g_pool[i].opt, b = *opt;
        a.disable_f16 = b.disable_f16 = a.disable_f64 = b.disable_f64 = 0;
        if (g_pool[i].integer_paths == ip && memcmp(&a, &b, sizeof a) == 0 &&
            ropekit_webgpu_has_f16(g_pool[i].ctx) == ropekit_webgpu_has_f16(ctx) &&
            ropekit_webgpu_has_f64(g_pool[i].ctx) == ropekit_webgpu_has_f64(ctx)) {
            ropekit_webgpu_destroy(ctx);
            ctx = g_pool[i].ctx;
            break;
        }
    }
    if (g_npool < 16) g_pool[g_npool].opt = *opt, g_pool[g_npool].integer_paths = ip, g_pool[g_npool++].ctx = ctx;
    return ctx;
}

/* The end of a test's use of its context: unbatched for the next one (a pooled context) or
 * destroyed */
static void close_context(ropekit_webgpu *ctx) {
    for (int i = 0; i < g_npool; ++i)
        if (g_pool[i].ctx == ctx) {
            if (ropekit_webgpu_set_batch(ctx, 0) != ROPEKIT_OK)
                CHECK(0, "set_batch 0: %s", ropekit_webgpu_last_error());
            return;
        }
    ropekit_webgpu_destroy(ctx);
}

static void close_pool(void) {
    for (int i = 0; i < g_npool; ++i) {
        int first = 1; /* one context may stand for several sets of options */
        for (int k = 0; k < i; ++k) first = first && g_pool[k].ctx != g_pool[i].ctx;
        if (first) ropekit_webgpu_destroy(g_pool[i].ctx);
    }
    g_npool = 0;
}

/* A call of the tests of their own as a case for run_gpu: the operator and its host inputs in
 * the C API's order (NULL: an absent optional input); the caller sets the attributes. */
static rk_case make_case(rk_case_op op, const ropekit_tensor *const *in) {
    static const int n_in[RK_OP_COUNT] = {4, 4, 4, 5, 3};
    rk_case c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.n_inputs = n_in[op];
    c.n_outputs = op == RK_OP_QKNORM_ROTARY_EMBEDDING ? 2 : 1;
    for (int i = 0; i < c.n_inputs; ++i)
        if (in[i]) c.present[i] = 1, c.inputs[i] = *in[i];
    return c;
}

/* Run case c on the GPU (the one place the tests upload, view, call and read back): each present
 * input in a buffer of its own (int64 inputs, the ids and offsets, stay on the host); each output
 * in a buffer of its own, first filled with the byte 0xa5 so that an element the kernel does not
 * write differs from the CPU, or (in_place) in the buffer of input i (x; query and key/value).
 * lead: bytes before the views of input 0 and output 0 in their buffers (input 0's host data
 * starts lead bytes before in->data: those bytes are uploaded too). Returns the status of the
 * call or of the first failed step; the outputs read back into out[] (host tensors of the
 * outputs' shapes; rk_case_alloc_outputs). */
static ropekit_status run_gpu(ropekit_webgpu *ctx, const rk_case *c, int in_place, uint64_t lead,
                              const ropekit_tensor *out) {
    WGPUBuffer in[RK_CASE_MAX_INPUTS] = {0}, ob[RK_CASE_MAX_OUTPUTS] = {0};
    ropekit_webgpu_tensor gi[RK_CASE_MAX_INPUTS], go[RK_CASE_MAX_OUTPUTS];
    ropekit_status st = ROPEKIT_OK;
    const double cpu0 = g_timing ? clock_s(CLOCK_PROCESS_CPUTIME_ID) : 0, wall0 = g_timing ? clock_s(CLOCK_MONOTONIC) : 0;
    for (int i = 0; i < c->n_inputs; ++i) {
        if (!c->present[i] || c->inputs[i].dtype == ROPEKIT_INT64) continue; /* ids stay on host */
        const uint64_t l = i == 0 ? lead : 0;
        in[i] = upload_bytes(ctx, (const char *)c->inputs[i].data - l, rk_tensor_nbytes(&c->inputs[i]) + l);
        if (!in[i]) {
            st = ROPEKIT_ERROR_DEVICE;
            goto done;
        }
        gi[i] = ropekit_webgpu_tensor_contiguous(in[i], l, c->inputs[i].dtype, c->inputs[i].rank,
                                                 c->inputs[i].shape);
    }
    for (int i = 0; i < c->n_outputs; ++i) {
        const uint64_t l = i == 0 ? lead : 0;
        const size_t n = rk_tensor_nbytes(&out[i]);
        if (in_place) {
            go[i] = ropekit_webgpu_tensor_contiguous(in[i], l, out[i].dtype, out[i].rank, out[i].shape);
            continue;
        }
        unsigned char *fill = malloc(n + l + 1);
        if (!fill) {
            st = ROPEKIT_ERROR_OUT_OF_MEMORY;
            goto done;
        }
        memset(fill, 0xa5, n + l + 1);
        ob[i] = upload_bytes(ctx, fill, n + l);
        free(fill);
        if (!ob[i]) {
            st = ROPEKIT_ERROR_DEVICE;
            goto done;
        }
        go[i] = ropekit_webgpu_tensor_contiguous(ob[i], l, out[i].dtype, out[i].rank, out[i].shape);
    }
    const ropekit_tensor *ids = NULL;
    switch (c->op) {
    case RK_OP_ROTARY_EMBEDDING:
        ids = c->present[3] ? &c->inputs[3] : NULL;
        st = ropekit_webgpu_rotary_embedding(ctx, &gi[0], &gi[1], &gi[2], ids, &c->attrs.rotary, &go[0]);
        break;
    case RK_OP_MS_ROTARY_EMBEDDING:
        st = ropekit_webgpu_ms_rotary_embedding(ctx, &gi[0], &c->inputs[1], &gi[2], &gi[3],
                                                &c->attrs.ms, &go[0]);
        break;
    case RK_OP_MROTARY_EMBEDDING:
        st = ropekit_webgpu_mrotary_embedding(ctx, &gi[0], &c->inputs[1], &gi[2], &gi[3],
                                              &c->attrs.mrope, &go[0]);
        break;
    case RK_OP_QKNORM_ROTARY_EMBEDDING:
        st = ropekit_webgpu_qknorm_rotary_embedding(ctx, &gi[0], &gi[1], &gi[2],
                                                    c->present[3] ? &gi[3] : NULL,
                                                    c->present[4] ? &gi[4] : NULL,
                                                    &c->attrs.qknorm, &go[0], &go[1]);
        break;
    case RK_OP_INVERSE_ROTARY_REGROUP:
        st = ropekit_webgpu_inverse_rotary_regroup(ctx, &gi[0], c->present[1] ? &gi[1] : NULL,
                                                   c->present[2] ? &gi[2] : NULL,
                                                   &c->attrs.regroup, &go[0]);
        break;
    default: st = ROPEKIT_ERROR_UNSUPPORTED;
    }
    if (st != ROPEKIT_OK) goto done;
    for (int i = 0; i < c->n_outputs; ++i) {
        st = ropekit_webgpu_read(ctx, in_place ? in[i] : ob[i], i == 0 ? lead : 0, out[i].data,
                                 rk_tensor_nbytes(&out[i]));
        if (st != ROPEKIT_OK) goto done;
    }
    if (g_timing)
        timing_add(ctx, ropekit_webgpu_last_variant(ctx), clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0,
                   clock_s(CLOCK_MONOTONIC) - wall0);
done:
    for (int i = 0; i < RK_CASE_MAX_INPUTS; ++i)
        if (in[i]) wgpuBufferRelease(in[i]);
    for (int i = 0; i < RK_CASE_MAX_OUTPUTS; ++i)
        if (ob[i]) wgpuBufferRelease(ob[i]);
    return st;
}

/* The tests' own RotaryEmbedding calls: x (B, S, hidden) of dtype dt, tables (P, R/2) of dtype
 * tdt, position ids (B, S). */
typedef struct rotary_call {
    ropekit_dtype dt, tdt;
    int64_t xs[3], ts[2], ps[2];
    void *x, *cos, *sin;
    int64_t *pos;
    ropekit_rotary_embedding_attrs at;
} rotary_call;

/* The CPU reference writes yr (a failed CPU call is a failed check), then the same call runs on
 * the GPU (run_gpu, in place or not) into yg. Returns the GPU call's status (its variant:
 * ropekit_webgpu_last_variant). */
static ropekit_status run_rotary_both(ropekit_webgpu *ctx, const rotary_call *r, int in_place, void *yr,
                                      void *yg) {
    ropekit_tensor hx = ropekit_tensor_contiguous(r->x, r->dt, 3, r->xs);
    ropekit_tensor hy = ropekit_tensor_contiguous(yr, r->dt, 3, r->xs);
    ropekit_tensor hc = ropekit_tensor_contiguous(r->cos, r->tdt, 2, r->ts);
    ropekit_tensor hs = ropekit_tensor_contiguous(r->sin, r->tdt, 2, r->ts);
    ropekit_tensor ids = ropekit_tensor_contiguous(r->pos, ROPEKIT_INT64, 2, r->ps);
    CHECK(ropekit_rotary_embedding(&hx, &hc, &hs, &ids, &r->at, &hy) == ROPEKIT_OK, "cpu: %s",
          ropekit_last_error());
    rk_case c = make_case(RK_OP_ROTARY_EMBEDDING, (const ropekit_tensor *[]){&hx, &hc, &hs, &ids});
    c.attrs.rotary = r->at;
    const ropekit_tensor hg = ropekit_tensor_contiguous(yg, r->dt, 3, r->xs);
    return run_gpu(ctx, &c, in_place, 0, &hg);
}

/* Compare GPU outputs with the CPU reference bit for bit (every arithmetic variant: narrow,
 * wide64 and, without shader-f64, exact32). */
static void compare(const rk_case *c, const ropekit_tensor *gpu, const ropekit_tensor *ref,
                    const char *cfg, const char *variant) {
    char desc[256];
    rk_case_describe(c, desc, sizeof desc);
    for (int o = 0; o < c->n_outputs; ++o) {
        const ropekit_dtype dt = ref[o].dtype;
        size_t n = rk_tensor_nbytes(&ref[o]) / ropekit_dtype_size(dt);
        size_t bad = 0, first = 0;
        uint64_t worst = 0;
        for (size_t i = 0; i < n; ++i) {
            uint64_t d = ulp_diff(gpu[o].data, ref[o].data, dt, i);
            if (d) {
                if (!bad) first = i;
                ++bad;
                if (d > worst) worst = d;
            }
        }
        CHECK(bad == 0, "[%s] %s: output %d: %zu of %zu elements differ (worst %llu ulp), first at "
              "%zu: gpu %.9g cpu %.9g (variant %s)", cfg, desc, o, bad, n, (unsigned long long)worst,
              first, (double)to_f32(gpu[o].data, dt, first), (double)to_f32(ref[o].data, dt, first),
              variant);
    }
}

static int rotary_op(rk_case_op op) { return op <= RK_OP_MROTARY_EMBEDDING; }

/* Feature sets already run: a configuration whose context has the same effective features and
 * grid cap as an earlier one selects exactly the same variants (on OpenGL ES, without shader-f16
 * and shader-f64, default, packed16 and nof64 coincide) and is not run again. */
static int seen_sets[8][4], n_seen;

static size_t g_sample = 1; /* ROPEKIT_WEBGPU_SAMPLE */

static void run_config(const config *cfg, size_t cfg_index, const rk_case_file *files, int nfiles) {
    ropekit_webgpu *ctx = shared_context(&cfg->opt);
    CHECK(ctx != NULL, "[%s] context", cfg->name);
    if (!ctx) return;
    ropekit_status st = ropekit_webgpu_set_batch(ctx, cfg->batch);
    CHECK(st == ROPEKIT_OK, "[%s] set_batch: %s", cfg->name, ropekit_webgpu_last_error());
    const int set[4] = {ropekit_webgpu_has_f16(ctx), ropekit_webgpu_has_f64(ctx),
                        (int)cfg->opt.max_workgroups_per_dim, cfg->batch};
    for (int i = 0; i < n_seen && g_sample == 1; ++i) /* sampled runs: each config its own cases */
        if (memcmp(seen_sets[i], set, sizeof set) == 0) {
            printf("[%s] same features as an earlier configuration (shader-f16 %d, shader-f64 %d): "
                   "the same variants, not run again\n", cfg->name, set[0], set[1]);
            close_context(ctx);
            return;
        }
    if (n_seen < 8) memcpy(seen_sets[n_seen++], set, sizeof set);
    printf("[%s] adapter: %s, shader-f16 %s, shader-f64 %s\n", cfg->name,
           ropekit_webgpu_adapter_name(ctx), ropekit_webgpu_has_f16(ctx) ? "on" : "off",
           ropekit_webgpu_has_f64(ctx) ? "on" : "off");
    int runs = 0, grids[4] = {0}, vec_runs = 0, elem_runs = 0, exact32 = 0;
    for (int f = 0; f < nfiles; ++f) {
        size_t ran = 0;
        for (size_t k = 0; k < files[f].count; ++k) {
            const rk_case *c = &files[f].cases[k];
            /* the batched configuration records every 4th case (its calls use the same kernels
             * as the default one; this checks the recording path on every operator and layout
             * at a quarter of the time) */
            if ((k + cfg_index) % (g_sample * (cfg->batch ? 4 : 1)) != 0) continue;
            ++ran;
            ropekit_tensor ref[RK_CASE_MAX_OUTPUTS], gpu[RK_CASE_MAX_OUTPUTS];
            if (rk_case_alloc_outputs(c, ref) < 0 || rk_case_alloc_outputs(c, gpu) < 0) {
                CHECK(0, "out of memory");
                return;
            }
            CHECK(rk_case_run_cpu(c, ref) == ROPEKIT_OK, "cpu run: %s", ropekit_last_error());
            for (int in_place = 0; in_place <= (rotary_op(c->op) ? 1 : 0); ++in_place) {
                st = run_gpu(ctx, c, in_place, 0, gpu);
                const char *variant = ropekit_webgpu_last_variant(ctx);
                CHECK(st == ROPEKIT_OK, "[%s] %s case %zu%s: %s: %s", cfg->name, rk_case_op_name(c->op),
                      c->index, in_place ? " in place" : "", ropekit_status_str(st),
                      ropekit_webgpu_last_error());
                if (st != ROPEKIT_OK) continue;
                ++runs;
                if (rotary_op(c->op)) ++*(strstr(variant, " vec16 ") ? &vec_runs : &elem_runs);
                const char *g = strstr(variant, "grid");
                if (g && g[4] >= '1' && g[4] <= '3') grids[g[4] - '0']++;
                CHECK((strstr(variant, "inplace") != NULL) == in_place || !rotary_op(c->op),
                      "[%s] variant '%s' for in_place=%d", cfg->name, variant, in_place);
                if (strstr(variant, " exact32 ")) ++exact32;
                compare(c, gpu, ref, cfg->name, variant);
            }
            rk_case_free_outputs(c, ref);
            rk_case_free_outputs(c, gpu);
        }
        printf("[%s] %s: %zu of %zu cases\n", cfg->name, rk_case_op_name(files[f].op), ran,
               files[f].count);
    }
    printf("[%s] %d runs compared bit for bit with the CPU reference (%d with the integer exact32 "
           "arithmetic); grids 1d/2d/3d: %d/%d/%d; rotary kernels vector/element: %d/%d\n",
           cfg->name, runs, exact32, grids[1], grids[2], grids[3], vec_runs, elem_runs);
    CHECK(ropekit_webgpu_has_f64(ctx) || exact32 > 0, "[%s] no shader-f64, yet no exact32 run",
          cfg->name);
    CHECK(vec_runs > 0 && elem_runs > 0, "[%s] both rotary kernels ran (vector %d, element %d)",
          cfg->name, vec_runs, elem_runs);
    if (cfg->opt.max_workgroups_per_dim)
        CHECK(grids[2] > 0 && grids[3] > 0, "[%s] the capped grid reached 2-D %d and 3-D %d times",
              cfg->name, grids[2], grids[3]);
    close_context(ctx);
}

/* Refusals and contract errors, and the variant names of chosen calls. */
static void run_errors(ropekit_webgpu_backend backend) {
    ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = shared_context(&opt);
    if (!ctx) return;
    const int64_t B = 1, S = 4, N = 2, H = 8, P = 16;
    int64_t xs[4] = {B, N, S, H}, ts[2] = {P, H / 2}; /* ai.onnx rank 4: (B, N, S, H) */
    WGPUBuffer xb, yb, cb, sb;
    ropekit_webgpu_buffer_create(ctx, 4096, &xb);
    ropekit_webgpu_buffer_create(ctx, 4096, &yb);
    ropekit_webgpu_buffer_create(ctx, 4096, &cb);
    ropekit_webgpu_buffer_create(ctx, 4096, &sb);
    float ones[1024];
    for (int i = 0; i < 1024; ++i) ones[i] = 0.5f;
    ropekit_webgpu_write(ctx, xb, 0, ones, sizeof ones);
    ropekit_webgpu_write(ctx, yb, 0, ones, sizeof ones);
    ropekit_webgpu_write(ctx, cb, 0, ones, sizeof ones);
    ropekit_webgpu_write(ctx, sb, 0, ones, sizeof ones);
    ropekit_webgpu_tensor x = ropekit_webgpu_tensor_contiguous(xb, 0, ROPEKIT_FLOAT32, 4, xs);
    ropekit_webgpu_tensor y = ropekit_webgpu_tensor_contiguous(yb, 0, ROPEKIT_FLOAT32, 4, xs);
    ropekit_webgpu_tensor c = ropekit_webgpu_tensor_contiguous(cb, 0, ROPEKIT_FLOAT32, 2, ts);
    ropekit_webgpu_tensor s = ropekit_webgpu_tensor_contiguous(sb, 0, ROPEKIT_FLOAT32, 2, ts);
    int64_t pos[4] = {0, 1, 2, 3}, pshape[2] = {B, S};
    ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, pshape);
    ropekit_rotary_embedding_attrs at = {0, 0, 0, 0};
    ropekit_status st = ropekit_webgpu_rotary_embedding(ctx, &x, &c, &s, &ids, &at, &y);
    CHECK(st == ROPEKIT_OK, "plain call: %s", ropekit_webgpu_last_error());
    CHECK(strstr(ropekit_webgpu_last_variant(ctx), "rotary ids2d x=f32 y=f32 t=f32") != NULL,
          "variant name '%s'", ropekit_webgpu_last_variant(ctx));
    /* out-of-range id: error before dispatch, message names it, y untouched */
    float marker[64];
    for (int i = 0; i < 64; ++i) marker[i] = 7.0f;
    ropekit_webgpu_write(ctx, yb, 0, marker, sizeof marker);
    pos[2] = P;
    st = ropekit_webgpu_rotary_embedding(ctx, &x, &c, &s, &ids, &at, &y);
    CHECK(st == ROPEKIT_ERROR_POSITION_OUT_OF_RANGE && strstr(ropekit_webgpu_last_error(), "16"),
          "out-of-range id: %s (%s)", ropekit_status_str(st), ropekit_webgpu_last_error());
    pos[2] = -1;
    st = ropekit_webgpu_rotary_embedding(ctx, &x, &c, &s, &ids, &at, &y);
    CHECK(st == ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "negative id: %s", ropekit_status_str(st));
    float back[64];
    ropekit_webgpu_read(ctx, yb, 0, back, sizeof back);
    CHECK(memcmp(back, marker, sizeof back) == 0, "a refused call wrote to y");
    pos[2] = 2;
    /* odd rotary width: the core's contract error */
    at.rotary_embedding_dim = 3;
    st = ropekit_webgpu_rotary_embedding(ctx, &x, &c, &s, &ids, &at, &y);
    CHECK(st == ROPEKIT_ERROR_INVALID_ATTRIBUTE, "odd R: %s", ropekit_status_str(st));
    at.rotary_embedding_dim = 0;
    /* partial overlap of y with x in one buffer: aliasing */
    ropekit_webgpu_tensor y2 = x;
    y2.offset = 4;
    st = ropekit_webgpu_rotary_embedding(ctx, &x, &c, &s, &ids, &at, &y2);
    CHECK(st == ROPEKIT_ERROR_ALIASING, "overlap: %s", ropekit_status_str(st));
    /* a byte offset that is not a multiple of the element size: UNSUPPORTED, as the CPU core
     * reports a misaligned data address (was ROPEKIT_ERROR_SHAPE here) */
    ropekit_webgpu_tensor ym = y;
    ym.offset = 2;
    st = ropekit_webgpu_rotary_embedding(ctx, &x, &c, &s, &ids, &at, &ym);
    CHECK(st == ROPEKIT_ERROR_UNSUPPORTED && strstr(ropekit_webgpu_last_error(), "y: byte offset 2"),
          "misaligned offset: %s (%s)", ropekit_status_str(st), ropekit_webgpu_last_error());
    static float cpu_x[1 * 2 * 4 * 8 + 1], cpu_t[16 * 8 / 2]; /* B*N*S*H + 1, P*H/2 */
    ropekit_tensor cx = ropekit_tensor_contiguous((char *)cpu_x + 2, ROPEKIT_FLOAT32, 4, xs);
    ropekit_tensor ct = ropekit_tensor_contiguous(cpu_t, ROPEKIT_FLOAT32, 2, ts);
    CHECK(ropekit_rotary_embedding(&cx, &ct, &ct, &ids, &at, &cx) == ROPEKIT_ERROR_UNSUPPORTED,
          "CPU core, misaligned data: %s", ropekit_last_error());
    /* disjoint views of one buffer, one written: refused (WebGPU's usage scope rule) */
    ropekit_webgpu_tensor y3 = x;
    y3.offset = (uint64_t)(B * S * N * H) * 4;
    st = ropekit_webgpu_rotary_embedding(ctx, &x, &c, &s, &ids, &at, &y3);
    CHECK(st == ROPEKIT_ERROR_ALIASING, "disjoint views: %s", ropekit_status_str(st));
    /* view past the end of its buffer */
    ropekit_webgpu_tensor big = y;
    big.shape[1] = 1000;
    ropekit_webgpu_tensor bigx = x;
    bigx.shape[1] = 1000;
    int64_t pos_big[1000] = {0}, pb[2] = {1, 1000};
    ropekit_tensor ids_big = ropekit_tensor_contiguous(pos_big, ROPEKIT_INT64, 2, pb);
    st = ropekit_webgpu_rotary_embedding(ctx, &bigx, &c, &s, &ids_big, &at, &big);
    CHECK(st == ROPEKIT_ERROR_SHAPE, "view past the buffer: %s (%s)", ropekit_status_str(st),
          ropekit_webgpu_last_error());
    /* packed bfloat16 with an odd token stride: elements do not pair into words, so y is written
     * with atomics (variant y=bf16a), one pair per invocation */
    ropekit_webgpu_tensor xh = ropekit_webgpu_tensor_contiguous(xb, 0, ROPEKIT_BFLOAT16, 4, xs);
    xh.strides[2] = 9, xh.strides[1] = 36, xh.strides[0] = 72; /* odd token stride */
    ropekit_webgpu_tensor ch = ropekit_webgpu_tensor_contiguous(cb, 0, ROPEKIT_BFLOAT16, 2, ts);
    ropekit_webgpu_tensor sh = ropekit_webgpu_tensor_contiguous(sb, 0, ROPEKIT_BFLOAT16, 2, ts);
    ropekit_webgpu_tensor yh = ropekit_webgpu_tensor_contiguous(yb, 0, ROPEKIT_BFLOAT16, 4, xs);
    st = ropekit_webgpu_rotary_embedding(ctx, &xh, &ch, &sh, &ids, &at, &yh);
    CHECK(st == ROPEKIT_OK && strstr(ropekit_webgpu_last_variant(ctx), "x=bf16p y=bf16a"),
          "odd stride packed: %s (%s) variant %s", ropekit_status_str(st),
          ropekit_webgpu_last_error(), ropekit_webgpu_last_variant(ctx));
    /* negative stride */
    ropekit_webgpu_tensor xn = x;
    xn.strides[1] = -16;
    st = ropekit_webgpu_rotary_embedding(ctx, &xn, &c, &s, &ids, &at, &y);
    CHECK(st == ROPEKIT_ERROR_UNSUPPORTED, "negative stride: %s", ropekit_status_str(st));
    /* NULL buffer */
    ropekit_webgpu_tensor xz = x;
    xz.buffer = NULL;
    st = ropekit_webgpu_rotary_embedding(ctx, &xz, &c, &s, &ids, &at, &y);
    CHECK(st == ROPEKIT_ERROR_NULL_POINTER, "NULL buffer: %s", ropekit_status_str(st));
    wgpuBufferRelease(xb);
    wgpuBufferRelease(yb);
    wgpuBufferRelease(cb);
    wgpuBufferRelease(sb);
    close_context(ctx);
}

/* exact32 (no shader-f64) on inputs built to tell the CPU's double rounding from a single
 * rounding: y0 = c*a - s*b with c = 1, a = 1 + k 2^-23 and s*|b| = 2^-24 (1 + t 2^-46), 0 < t <
 * 2^17: the exact value lies above the float midpoint a + 2^-24 by less than half a double ulp,
 * so rounding to double lands on the midpoint and then ties to even (a when k is even), where
 * one rounding would give a + 2^-23. Plus exact cancellations (+0) and subnormal results. The
 * CPU reference must show the double rounding (checked), and the GPU its bits. */
static void run_double_rounding(ropekit_webgpu_backend backend) {
    ropekit_webgpu_options opt = {backend, 0, 1, 0, 0, 0};
    ropekit_webgpu *ctx = shared_context(&opt);
    if (!ctx) return;
    enum { n = 64 };
    float x[2 * n], cs[n], sn[n], yr[2 * n], yg[2 * n];
    int midpoint[n] = {0};
    uint32_t m1 = (1u << 23) + 12345u;
    for (int k = 0; k < n; ++k) {
        if (k < 48) { /* the double-rounding columns */
            uint64_t m2, t;
            do { /* m1 * m2 = 2^46 + t with 0 < t < 2^17 */
                ++m1;
                m2 = ((1ull << 46) + m1 - 1) / m1;
                t = (uint64_t)m1 * m2 - (1ull << 46);
            } while (t == 0 || t >= (1u << 17) || m2 >= (1u << 24));
            x[2 * k] = 1.0f + (float)(k * 2 + (k % 3 == 0)) * 0x1p-23f; /* a: even and odd k */
            cs[k] = 1.0f;
            sn[k] = ldexpf((float)m1, -24 - 23);  /* s = 2^-24 m1 2^-23 */
            x[2 * k + 1] = -ldexpf((float)m2, -23); /* b = -m2 2^-23 */
            midpoint[k] = 1;
        } else if (k < 56) { /* c*a = s*b exactly: +0 */
            x[2 * k] = 1.5f + (float)k, x[2 * k + 1] = 1.5f + (float)k;
            cs[k] = 0.75f, sn[k] = 0.75f;
        } else { /* subnormal results */
            x[2 * k] = ldexpf(1.25f + (float)k / 64, -70), x[2 * k + 1] = ldexpf(1.75f, -76 - (k - 56));
            cs[k] = ldexpf(1.5f, -70), sn[k] = ldexpf(1.125f, -75);
        }
    }
    int64_t pos[1] = {0};
    const rotary_call rc = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT32, {1, 1, 2 * n}, {1, n}, {1, 1}, x, cs, sn, pos, {1, 0, 1, 0}};
    ropekit_status st = run_rotary_both(ctx, &rc, 0, yr, yg);
    int ties = 0;
    for (int k = 0; k < n; ++k)
        if (midpoint[k]) {
            const float a = x[2 * k], once = nextafterf(a, 2.0f); /* a single rounding's result */
            const int even = (((uint32_t)((a - 1.0f) * 0x1p23f)) & 1u) == 0;
            CHECK(yr[2 * k] == (even ? a : once), "premise: CPU y0[%d] = %.9g, a = %.9g", k, (double)yr[2 * k], (double)a);
            ties += even;
        }
    CHECK(ties > 0, "no even-tie column");
    CHECK(st == ROPEKIT_OK, "double rounding: %s", ropekit_webgpu_last_error());
    CHECK(strstr(ropekit_webgpu_last_variant(ctx), " exact32 ") != NULL, "variant '%s'", ropekit_webgpu_last_variant(ctx));
    if (st == ROPEKIT_OK) {
        int bad = 0;
        for (int i = 0; i < 2 * n; ++i) bad += memcmp(&yr[i], &yg[i], 4) != 0;
        CHECK(bad == 0, "exact32 double rounding / zeros / subnormals: %d of %d elements differ from the CPU", bad, 2 * n);
        printf("exact32 edge cases: %d ties to even after the double rounding, %d elements compared\n", ties, 2 * n);
    }
    close_context(ctx);
}

/* The rotary kernel a call should take where the vector one applies: the vector kernel, except
 * with the exact32 arithmetic (no shader-f64), which takes the element kernel (ops.c: SwiftShader
 * could not compile the vector kernel's exact32 path); tv: the 16-byte table loads expected too. */
static int vector_variant_ok(const char *var, int tv) {
    if (strstr(var, " exact32 ")) return strstr(var, " vec16 ") == NULL;
    return strstr(var, " vec16 ") != NULL && (!tv || strstr(var, " tv ") != NULL);
}

/* The vector kernel (rotary_vec.wgsl) on layouts the shared cases reach rarely: five heads
 * (a group of four and a group of one), partial rotary (copied channels), interleaved and
 * half-split, in place and out of place, each dtype with float32 tables: bit for bit against
 * the CPU reference (wide64 with shader-f64, exact32 without), and the variant must be the
 * vector one. */
static void run_vector_layouts(ropekit_webgpu_backend backend) {
    ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = shared_context(&opt);
    if (!ctx) return;
    enum { B = 2, S = 3, N = 5, H = 48, R = 32, P = 16 };
    static const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    float cs[P * R / 2], sn[P * R / 2];
    uint32_t seed = 12345u;
    for (int i = 0; i < P * R / 2; ++i) {
        seed = seed * 1664525u + 1013904223u;
        cs[i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
        seed = seed * 1664525u + 1013904223u;
        sn[i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    int64_t pos[B * S];
    for (int i = 0; i < B * S; ++i) pos[i] = (i * 7 + 3) % P;
    for (int d = 0; d < 3; ++d)
        for (int il = 0; il <= 1; ++il)
            for (int in_place = 0; in_place <= 1; ++in_place) {
                const size_t n = (size_t)B * S * N * H, es = ropekit_dtype_size(dts[d]);
                unsigned char *x = malloc(n * es), *yr = malloc(n * es), *yg = malloc(n * es);
                for (size_t i = 0; i < n; ++i) {
                    seed = seed * 1664525u + 1013904223u;
                    const float v = (float)(seed >> 8) / 16777216.0f * 8.0f - 4.0f;
                    uint32_t u;
                    memcpy(&u, &v, 4);
                    if (dts[d] == ROPEKIT_FLOAT32) memcpy(x + 4 * i, &v, 4);
                    else if (dts[d] == ROPEKIT_BFLOAT16) ((uint16_t *)x)[i] = (uint16_t)(u >> 16);
                    else /* float16 from the float's sign, exponent in [-8, 2] and top mantissa bits */
                        ((uint16_t *)x)[i] = (uint16_t)(((u >> 16) & 0x8000u) | ((7u + (seed & 7u)) << 10) | ((u >> 13) & 0x3ffu));
                }
                const rotary_call rc = {dts[d], ROPEKIT_FLOAT32, {B, S, N * H}, {P, R / 2}, {B, S}, x, cs, sn,
                                        pos, {il, R, N, 0}};
                ropekit_status st = run_rotary_both(ctx, &rc, in_place, yr, yg);
                CHECK(st == ROPEKIT_OK, "vector layout %s il=%d in_place=%d: %s", ropekit_dtype_name(dts[d]),
                      il, in_place, ropekit_webgpu_last_error());
                CHECK(vector_variant_ok(ropekit_webgpu_last_variant(ctx), 0), "variant '%s'",
                      ropekit_webgpu_last_variant(ctx));
                if (st == ROPEKIT_OK) {
                    size_t bad = 0; /* bit for bit: wide64 with shader-f64, exact32 without */
                    for (size_t i = 0; i < n; ++i) bad += memcmp(yr + i * es, yg + i * es, es) != 0;
                    CHECK(bad == 0, "vector layout %s il=%d in_place=%d: %zu elements differ from the CPU",
                          ropekit_dtype_name(dts[d]), il, in_place, bad);
                }
                free(x), free(yr), free(yg);
            }
    close_context(ctx);
}

/* The vector kernel's 16-bit narrowing (f16_words4 / bf16_words4 in common.wgsl): a short path
 * when all eight values of a written vector are in the common range, the scalar rounding
 * otherwise. Vectors of moderate values (the short path) and of random finite bit patterns
 * (overflow to inf, subnormal and zero results: the scalar path), half-split and interleaved,
 * partial rotation (copied channels), tables of x's type and float32 (also read as 16-byte
 * vectors), with and without shader-f16 and shader-f64; bit for bit with the CPU. */
static void run_vector_narrowing(ropekit_webgpu_backend backend) {
    enum { B = 1, S = 4, N = 3, H = 64, R = 48, P = 8 };
    const ropekit_webgpu_options opts[3] = {{backend, 0, 0, 0, 0, 0}, {backend, 1, 0, 0, 0, 0},
                                            {backend, 0, 1, 0, 0, 0}};
    static const ropekit_dtype dts[2] = {ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    uint32_t seed = 777u;
    size_t inf_n[2] = {0, 0}, sub_n[2] = {0, 0};
    int64_t pos[B * S] = {5, 0, 7, 2};
    for (int o = 0; o < 3; ++o) {
        ropekit_webgpu *ctx = shared_context(&opts[o]);
        if (!ctx) return;
        for (int d = 0; d < 2; ++d)
            for (int t32 = 0; t32 <= 1; ++t32)
                for (int il = 0; il <= 1; ++il) {
                    const ropekit_dtype dt = dts[d], tdt = t32 ? ROPEKIT_FLOAT32 : dt;
                    const size_t n = (size_t)B * S * N * H, nt = (size_t)P * R / 2;
                    uint16_t x[B * S * N * H], yr[B * S * N * H], yg[B * S * N * H];
                    float cf[P * R / 2], sf[P * R / 2];
                    uint16_t ch[P * R / 2], sh[P * R / 2];
                    for (size_t i = 0; i < n; ++i) {
                        /* whole vectors of 8 elements: moderate (2^-4 .. 2^4), random finite bits, tiny
                         * (smallest normal exponents) or huge (largest finite exponents) */
                        const unsigned cls = (unsigned)(i / 8) % 4;
                        uint16_t v;
                        do {
                            seed = seed * 1664525u + 1013904223u;
                            v = (uint16_t)(seed >> 16);
                            const unsigned e = cls == 0 ? 11u + (seed & 7u) : cls == 2 ? 1u + (seed & 3u) : 27u + (seed & 3u);
                            /* bfloat16 "tiny": 2^-97 .. 2^-94, so that products and sums stay normal
                             * float32 (the H200's Vulkan driver flushes float32 subnormals; see
                             * bench/results-webgpu.md) and random bits likewise above 2^-96; "huge"
                             * below 2^127, so that products stay finite (a fused multiply-add
                             * would not overflow where the CPU's product does) */
                            if (cls != 1)
                                v = dt == ROPEKIT_FLOAT16 ? (uint16_t)((v & 0x83ffu) | (e << 10))
                                                          : (uint16_t)((v & 0x807fu) | ((cls == 3 ? e + 223u : cls == 0 ? e + 112u : e + 29u) << 7));
                            else if (dt == ROPEKIT_BFLOAT16 && ((v >> 7) & 0xffu) < 31u)
                                v = (uint16_t)(v | (31u << 7));
                        } while (dt == ROPEKIT_FLOAT16 ? (v & 0x7c00u) == 0x7c00u : (v & 0x7f80u) == 0x7f80u);
                        x[i] = v;
                    }
                    for (size_t i = 0; i < nt; ++i) { /* 16-bit table values, |v| < 2 */
                        uint16_t b[2];
                        for (int k = 0; k < 2; ++k) {
                            seed = seed * 1664525u + 1013904223u;
                            const uint32_t e = i % 5 == 0 ? 1u + (seed & 3u) : 12u + (seed & 3u); /* some tiny */
                            b[k] = dt == ROPEKIT_FLOAT16 ? (uint16_t)(((seed >> 16) & 0x83ffu) | (e << 10))
                                                         : (uint16_t)(((seed >> 16) & 0x807fu) | ((e + 112u) << 7));
                        }
                        ch[i] = b[0], sh[i] = b[1];
                        float f[2]; /* the same values in float32 (exact) */
                        for (int k = 0; k < 2; ++k) {
                            const uint32_t u = dt == ROPEKIT_BFLOAT16 ? (uint32_t)b[k] << 16
                                : ((uint32_t)(b[k] & 0x8000u) << 16) | ((((b[k] >> 10) & 31u) + 112u) << 23) |
                                      ((uint32_t)(b[k] & 0x3ffu) << 13);
                            memcpy(&f[k], &u, 4);
                        }
                        cf[i] = f[0], sf[i] = f[1];
                    }
                    const rotary_call rc = {dt, tdt, {B, S, N * H}, {P, R / 2}, {B, S}, x,
                                            t32 ? (void *)cf : (void *)ch, t32 ? (void *)sf : (void *)sh, pos,
                                            {il, R, N, 0}};
                    ropekit_status st = run_rotary_both(ctx, &rc, 0, yr, yg);
                    const char *var = ropekit_webgpu_last_variant(ctx);
                    CHECK(st == ROPEKIT_OK && vector_variant_ok(var, !il),
                          "narrowing %s tables %s il=%d opt %d: %s (variant '%s')", ropekit_dtype_name(dt),
                          ropekit_dtype_name(tdt), il, o, ropekit_webgpu_last_error(), var);
                    if (st == ROPEKIT_OK) {
                        size_t bad = 0, inf = 0, sub = 0;
                        for (size_t i = 0; i < n; ++i) {
                            bad += yr[i] != yg[i];
                            const unsigned e = dt == ROPEKIT_FLOAT16 ? (yr[i] >> 10) & 31u : (yr[i] >> 7) & 255u;
                            inf += e == (dt == ROPEKIT_FLOAT16 ? 31u : 255u), sub += e == 0;
                        }
                        CHECK(bad == 0, "narrowing %s tables %s il=%d opt %d: %zu elements differ from the CPU",
                              ropekit_dtype_name(dt), ropekit_dtype_name(tdt), il, o, bad);
                        inf_n[d] += inf, sub_n[d] += sub;
                    }
                }
        close_context(ctx);
    }
    /* the data reached the edges: overflow, and (float16, the scalar path) zero/subnormal results */
    for (int d = 0; d < 2; ++d)
        CHECK(inf_n[d] > 0 && (d == 1 || sub_n[d] > 0), "narrowing %s: %zu inf, %zu zero/subnormal results",
              ropekit_dtype_name(dts[d]), inf_n[d], sub_n[d]);
}

/* The vector kernel's 16-bit narrowing on chosen float32 values: x = +1 (first half) and -1
 * (second half), sin = 0 and float32 cos tables, so every output is the float16 / bfloat16
 * rounding of one table value (y0 = c*1 - 0*(-1), y1 = 0*1 + c*(-1)). The values: exact
 * midpoints between neighbouring 16-bit values at every exponent (ties to even), the midpoints
 * moved by 1-3 float32 steps either way, the 16-bit values themselves, random float32 bits over
 * the 16-bit range, and the edges (largest finite, the overflow threshold, smallest normal,
 * subnormal results, zeros, infinities); no float32 subnormals (flushed by some adapters, see
 * bench/results-webgpu.md). Bit for bit with the CPU, with and without shader-f16 and f64. */
static float narrowing_value(int bf16, uint32_t *seed, size_t i) {
    static const float f16_edges[] = {65504.0f, 65520.0f, 65519.996f, 65536.0f, 65535.0f, 6.103515625e-05f,
                                      6.1035152e-05f, 6.0975552e-05f, 5.9604645e-08f, 2.9802322e-08f,
                                      2.9802326e-08f, 2.9802319e-08f, 0.0f, 1.0f, 2048.0f, 2049.0f};
    static const float bf16_edges[] = {3.3895314e38f, 3.4028235e38f, 3.3961775e38f, 5.1922969e33f,
                                       5.1922963e33f, 5.2125793e33f, 1.17549435e-38f, 1.1800858e-38f,
                                       1.1777901e-38f, 1.1777903e-38f, 0.0f, 1.0f, 256.0f, 257.0f, 1.0039062f, 1.0058594f};
    *seed = *seed * 1664525u + 1013904223u;
    const uint32_t r = *seed;
    const unsigned cls = (unsigned)(i % 5);
    const int mbits = bf16 ? 7 : 10, emin = bf16 ? -133 : -26, emax = bf16 ? 127 : 16; /* emin: below the least subnormal */
    const int e = emin + (int)((r >> 8) % (unsigned)(emax - emin + 1));
    const double sign = (r & 1u) ? -1.0 : 1.0;
    const double mant = (double)((1u << mbits) + ((r >> 1) & ((1u << mbits) - 1u)));
    /* the 16-bit spacing at exponent e: subnormal below the least normal exponent */
    const int enorm = bf16 ? -126 : -14;
    const double u = ldexp(1.0, (e < enorm ? enorm : e) - mbits);
    float v;
    if (cls == 4) {
        const float *edges = bf16 ? bf16_edges : f16_edges;
        v = (float)(sign * (double)edges[(r >> 4) % 16]);
        if ((r >> 9) % 7 == 0) v = (float)(sign * INFINITY);
    } else if (cls == 3) { /* random bits, exponent within the 16-bit range (normal float32) */
        const uint32_t be = (uint32_t)(127 + e < 1 ? 1 : 127 + e > 254 ? 254 : 127 + e);
        uint32_t b = (r & 0x807fffffu) | (be << 23);
        memcpy(&v, &b, 4);
    } else {
        double m = e < enorm ? ldexp((double)((r >> 1) & ((1u << mbits) - 1u)), enorm - mbits) : ldexp(mant, e - mbits);
        if (cls != 2) m += 0.5 * u; /* a midpoint (exact in float32: 12 / 9 significant bits) */
        v = (float)(sign * m);
        if (cls == 1) { /* 1 to 3 float32 steps off the midpoint, either way */
            uint32_t b;
            memcpy(&b, &v, 4);
            const uint32_t k = 1u + ((r >> 20) % 3u);
            if ((b & 0x7fffffffu) > 0x00800000u + k) b = (r & 0x100000u) ? b + k : b - k;
            memcpy(&v, &b, 4);
        }
    }
    uint32_t b;
    memcpy(&b, &v, 4);
    if ((b & 0x7f800000u) == 0 && (b & 0x7fffffu) != 0) v = 0.0f; /* no float32 subnormals */
    return v;
}

static void run_narrowing_ties(ropekit_webgpu_backend backend) {
    enum { S = 256, N = 2, H = 128, R = 128, P = 256 };
    const ropekit_webgpu_options opts[3] = {{backend, 0, 0, 0, 0, 0}, {backend, 1, 0, 0, 0, 0},
                                            {backend, 0, 1, 0, 0, 0}};
    static const ropekit_dtype dts[2] = {ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    const size_t n = (size_t)S * N * H, nt = (size_t)P * R / 2;
    uint16_t *x = malloc(n * 2), *yr = malloc(n * 2), *yg = malloc(n * 2);
    float *cf = malloc(nt * 4), *sf = calloc(nt, 4);
    int64_t *pos = malloc(S * sizeof(int64_t));
    if (!x || !yr || !yg || !cf || !sf || !pos) {
        CHECK(0, "narrowing ties: out of memory");
        free(x), free(yr), free(yg), free(cf), free(sf), free(pos);
        return;
    }
    for (int i = 0; i < S; ++i) pos[i] = (i * 37) % P;
    size_t runs = 0;
    for (int o = 0; o < 3; ++o) {
        ropekit_webgpu *ctx = shared_context(&opts[o]);
        if (!ctx) break;
        for (int d = 0; d < 2; ++d) {
            const ropekit_dtype dt = dts[d];
            uint32_t seed = 4242u + (uint32_t)d;
            for (size_t i = 0; i < nt; ++i) cf[i] = narrowing_value(d, &seed, i);
            const uint16_t one = dt == ROPEKIT_FLOAT16 ? 0x3c00u : 0x3f80u;
            for (size_t i = 0; i < n; ++i) x[i] = (uint16_t)(one | ((i % H) >= R / 2 ? 0x8000u : 0u));
            const rotary_call rc = {dt, ROPEKIT_FLOAT32, {1, S, N * H}, {P, R / 2}, {1, S}, x, cf, sf, pos,
                                    {0, R, N, 0}};
            ropekit_status st = run_rotary_both(ctx, &rc, 0, yr, yg);
            const char *var = ropekit_webgpu_last_variant(ctx);
            CHECK(st == ROPEKIT_OK && vector_variant_ok(var, 1),
                  "narrowing ties %s opt %d: %s (variant '%s')", ropekit_dtype_name(dt), o,
                  ropekit_webgpu_last_error(), var);
            if (st == ROPEKIT_OK) {
                size_t bad = 0;
                for (size_t i = 0; i < n; ++i) {
                    if (yr[i] != yg[i] && bad++ < 3)
                        printf("  narrowing ties %s opt %d: element %zu: GPU 0x%04x, CPU 0x%04x\n",
                               ropekit_dtype_name(dt), o, i, yg[i], yr[i]);
                }
                CHECK(bad == 0, "narrowing ties %s opt %d: %zu of %zu elements differ from the CPU",
                      ropekit_dtype_name(dt), o, bad, n);
                runs++;
            }
        }
        close_context(ctx);
    }
    printf("narrowing ties: %zu runs of %zu elements compared bit for bit\n", runs, n);
    free(x), free(yr), free(yg), free(cf), free(sf), free(pos);
}

/* MRoPE through the vector kernel: its tables are read as 16-byte vectors (" tv ") when every
 * vector's columns share one id stream (sectioned layout, section boundaries multiples of the
 * elements per vector), with scalar loads otherwise; float32, float16 and bfloat16 x with tables
 * of x's type and float32, bit for bit with the CPU. */
static void run_mrope_vector_tables(ropekit_webgpu_backend backend) {
    ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = shared_context(&opt);
    if (!ctx) return;
    enum { B = 2, S = 3, N = 2, H = 80, R = 64, P = 7 };
    static const int64_t secs[3][3] = {{8, 16, 8}, {16, 8, 8}, {4, 12, 16}}; /* aligned to 8, 8, 4 */
    static const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    uint32_t seed = 99u;
    int64_t xs[3] = {B, S, N * H}, ts[2] = {P, R / 2}, ps[3] = {3, B, S}, pos[3 * B * S];
    for (int i = 0; i < 3 * B * S; ++i) pos[i] = (i * 3 + 1) % P;
    for (int d = 0; d < 3; ++d)
        for (int t32 = 0; t32 <= (dts[d] != ROPEKIT_FLOAT32); ++t32)
            for (int k = 0; k < 3; ++k) {
                const ropekit_dtype dt = dts[d], tdt = t32 ? ROPEKIT_FLOAT32 : dt;
                const size_t n = (size_t)B * S * N * H, es = ropekit_dtype_size(dt), ts_ = ropekit_dtype_size(tdt);
                const size_t nt = (size_t)P * R / 2;
                unsigned char *x = malloc(n * es), *yr = malloc(n * es), *yg = malloc(n * es);
                unsigned char *cs = malloc(nt * ts_), *sn = malloc(nt * ts_);
                for (size_t i = 0; i < n + 2 * nt; ++i) { /* values exact in every type: 8 bits */
                    seed = seed * 1664525u + 1013904223u;
                    const float v = (float)((int)(seed >> 24) - 128) / (i < n ? 16.0f : 128.0f);
                    unsigned char *dst = i < n ? x + i * es : i < n + nt ? cs + (i - n) * ts_ : sn + (i - n - nt) * ts_;
                    const ropekit_dtype t = i < n ? dt : tdt;
                    uint32_t u;
                    memcpy(&u, &v, 4);
                    if (t == ROPEKIT_FLOAT32) memcpy(dst, &v, 4);
                    else if (t == ROPEKIT_BFLOAT16) *(uint16_t *)dst = (uint16_t)(u >> 16);
                    else { /* float16 of an 8-bit value in [-8, 8): exact */
                        const uint32_t e = (u >> 23) & 255u;
                        *(uint16_t *)dst = v == 0.0f ? 0 : (uint16_t)(((u >> 16) & 0x8000u) | ((e - 112u) << 10) | ((u >> 13) & 0x3ffu));
                    }
                }
                ropekit_tensor hx = ropekit_tensor_contiguous(x, dt, 3, xs);
                ropekit_tensor hy = ropekit_tensor_contiguous(yr, dt, 3, xs);
                ropekit_tensor hc = ropekit_tensor_contiguous(cs, tdt, 2, ts);
                ropekit_tensor hs = ropekit_tensor_contiguous(sn, tdt, 2, ts);
                ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 3, ps);
                ropekit_mrotary_embedding_attrs at = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
                memcpy(at.mrope_section, secs[k], sizeof at.mrope_section);
                at.rotary_embedding_dim = R, at.num_heads = N;
                CHECK(ropekit_mrotary_embedding(&hx, &ids, &hc, &hs, &at, &hy) == ROPEKIT_OK, "cpu: %s",
                      ropekit_last_error());
                rk_case c = make_case(RK_OP_MROTARY_EMBEDDING, (const ropekit_tensor *[]){&hx, &ids, &hc, &hs});
                c.attrs.mrope = at;
                const ropekit_tensor hg = ropekit_tensor_contiguous(yg, dt, 3, xs);
                ropekit_status st = run_gpu(ctx, &c, 0, 0, &hg);
                const char *var = ropekit_webgpu_last_variant(ctx);
                const int aligned = k == 0 || k == 1 || (k == 2 && dt == ROPEKIT_FLOAT32); /* 4 | 4, 12 */
                CHECK(st == ROPEKIT_OK && vector_variant_ok(var, 0) &&
                          (strstr(var, " exact32 ") || (strstr(var, " tv ") != NULL) == aligned),
                      "mrope %s tables %s sections %d: %s (variant '%s')", ropekit_dtype_name(dt),
                      ropekit_dtype_name(tdt), k, ropekit_webgpu_last_error(), var);
                if (st == ROPEKIT_OK)
                    CHECK(memcmp(yr, yg, n * es) == 0, "mrope %s tables %s sections %d: differs from the CPU",
                          ropekit_dtype_name(dt), ropekit_dtype_name(tdt), k);
                free(x), free(yr), free(yg), free(cs), free(sn);
            }
    close_context(ctx);
}

/* The vector kernel's two ranges of invocations, rotations then copies (rotary_vec.wgsl): partial
 * rotations with many workgroups of each, copy:rotation ratios whole and fractional, the range
 * boundary inside a workgroup, workgroups of 64 and the default, a 2-D grid; bit for bit, every
 * output element written. */
static void run_vector_blocks(ropekit_webgpu_backend backend) {
    typedef struct shape { int64_t S, N, H, R; ropekit_dtype dt; } shape;
    static const shape shapes[] = {{64, 32, 80, 32, ROPEKIT_FLOAT16},   /* 4096 rotations, 12288 copies */
                                   {40, 16, 112, 64, ROPEKIT_BFLOAT16}, /* copies : rotations = 3 : 2 */
                                   {33, 8, 48, 32, ROPEKIT_FLOAT32},    /* 1 : 1, partial last blocks */
                                   {50, 4, 200, 8, ROPEKIT_FLOAT32}};   /* 1 rotation : 48 copies */
    const ropekit_webgpu_options opts[3] = {{backend, 0, 0, 0, 0, 0}, {backend, 0, 0, 64, 0, 0},
                                            {backend, 0, 0, 64, 16, 0}};
    uint32_t seed = 4242u;
    for (int o = 0; o < 3; ++o) {
        ropekit_webgpu *ctx = shared_context(&opts[o]);
        if (!ctx) return;
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k) {
            const shape *sh = &shapes[k];
            const int64_t P = sh->S + 3, h = sh->R / 2;
            const size_t n = (size_t)(sh->S * sh->N * sh->H), es = ropekit_dtype_size(sh->dt);
            unsigned char *x = malloc(n * es), *yr = malloc(n * es), *yg = malloc(n * es);
            float *cs = malloc((size_t)(P * h) * 4), *sn = malloc((size_t)(P * h) * 4);
            int64_t *pos = malloc((size_t)sh->S * 8);
            for (size_t i = 0; i < n; ++i) {
                seed = seed * 1664525u + 1013904223u;
                const float v = (float)((int)(seed >> 20) - 2048) / 256.0f; /* 12 bits: exact in all */
                uint32_t u;
                memcpy(&u, &v, 4);
                if (sh->dt == ROPEKIT_FLOAT32) memcpy(x + 4 * i, &v, 4);
                else if (sh->dt == ROPEKIT_BFLOAT16) ((uint16_t *)x)[i] = (uint16_t)(u >> 16);
                else
                    ((uint16_t *)x)[i] = v == 0.0f ? 0 : (uint16_t)(((u >> 16) & 0x8000u) | ((((u >> 23) & 255u) - 112u) << 10) | ((u >> 13) & 0x3ffu));
            }
            for (int64_t i = 0; i < P * h; ++i) {
                seed = seed * 1664525u + 1013904223u;
                cs[i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
                seed = seed * 1664525u + 1013904223u;
                sn[i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
            }
            for (int64_t i = 0; i < sh->S; ++i) pos[i] = (i * 5 + 2) % P;
            const rotary_call rc = {sh->dt, ROPEKIT_FLOAT32, {1, sh->S, sh->N * sh->H}, {P, h}, {1, sh->S}, x, cs,
                                    sn, pos, {0, sh->R, sh->N, 0}};
            ropekit_status st = run_rotary_both(ctx, &rc, 0, yr, yg); /* y starts 0xa5: every element written */
            CHECK(st == ROPEKIT_OK && vector_variant_ok(ropekit_webgpu_last_variant(ctx), 0),
                  "blocks shape %zu opt %d: %s (variant '%s')", k, o, ropekit_webgpu_last_error(),
                  ropekit_webgpu_last_variant(ctx));
            if (st == ROPEKIT_OK) {
                size_t bad = 0;
                for (size_t i = 0; i < n; ++i) bad += memcmp(yr + i * es, yg + i * es, es) != 0;
                CHECK(bad == 0, "blocks shape %zu opt %d (%s): %zu elements differ from the CPU", k, o,
                      ropekit_webgpu_last_variant(ctx), bad);
            }
            free(x), free(yr), free(yg), free(cs), free(sn), free(pos);
        }
        close_context(ctx);
    }
}

/* QKNormRotaryEmbedding on layouts the shared cases do not reach: the row kernel
 * (qknorm_row.wgsl) with 1, 2 and 4 vectors per invocation (head_dim up to 64 * 4 * VE), a row
 * count that leaves the last workgroup half full, partial vectors (head_dim 40: 64 invocations
 * for 10 or 5 vectors), fp8 on and off, in place and out of place, non-finite and zero inputs; and
 * the general kernel (qknorm.wgsl) for a view the row kernel refuses (query at an odd offset)
 * and a head_dim above its limit. Each dtype, bit for bit against the CPU reference, with the
 * double arithmetic (wide64) and, without shader-f64, in integers (exact32); the variant must be
 * the expected kernel. (A NaN matches any NaN: its sign and payload are not specified.) */
typedef struct qk_layout {
    int64_t B, S, nh, hd, rope;
    int fp8, in_place, q_off, row;
} qk_layout;

static void qk_fill(void *p, ropekit_dtype dt, size_t n, uint32_t *seed, float scale) {
    for (size_t i = 0; i < n; ++i) {
        *seed = *seed * 1664525u + 1013904223u;
        float v = ((float)(*seed >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
        uint32_t u;
        memcpy(&u, &v, 4);
        if (dt == ROPEKIT_FLOAT32)
            memcpy((char *)p + 4 * i, &v, 4);
        else if (dt == ROPEKIT_BFLOAT16)
            ((uint16_t *)p)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        else /* float16: sign, exponent in [-8, 2], top mantissa bits */
            ((uint16_t *)p)[i] = (uint16_t)(((u >> 16) & 0x8000u) | ((7u + (*seed & 7u)) << 10) |
                                            ((u >> 13) & 0x3ffu));
    }
}

static void qk_set(void *p, ropekit_dtype dt, size_t i, uint32_t f32bits) {
    if (dt == ROPEKIT_FLOAT32)
        memcpy((char *)p + 4 * i, &f32bits, 4);
    else if (dt == ROPEKIT_BFLOAT16)
        ((uint16_t *)p)[i] = (uint16_t)(f32bits >> 16);
    else
        ((uint16_t *)p)[i] = (uint16_t)(f32bits == 0x7fc00000u   ? 0x7e00u
                                        : f32bits == 0xff800000u ? 0xfc00u
                                                                 : 0u);
}

/* a NaN of dtype dt (its sign and payload are not specified: ropekit.h, section 5) */
static int qk_is_nan(const unsigned char *p, ropekit_dtype dt) {
    uint32_t u = 0;
    memcpy(&u, p, ropekit_dtype_size(dt));
    if (dt == ROPEKIT_FLOAT32) return (u & 0x7fffffffu) > 0x7f800000u;
    if (dt == ROPEKIT_BFLOAT16) return (u & 0x7fffu) > 0x7f80u;
    return (u & 0x7fffu) > 0x7c00u;
}

static void qknorm_layouts(ropekit_webgpu_backend backend, int no_f64) {
    ropekit_webgpu_options opt = {backend, 0, no_f64, 0, 0, 0};
    ropekit_webgpu *ctx = shared_context(&opt);
    if (!ctx) return;
    static const qk_layout lays[] = {
        {2, 3, 3, 512, 64, 1, 0, 0, 1}, {1, 2, 2, 1024, 64, 1, 1, 0, 1},
        {1, 3, 5, 40, 6, 0, 0, 0, 1},   {2, 1, 2, 40, 6, 0, 1, 0, 1},
        {1, 2, 3, 128, 64, 1, 0, 1, 0}, {1, 1, 2, 2048, 64, 1, 0, 0, -1},
        {2, 2, 1, 64, 0, 1, 0, 0, 1},   {1, 2, 4, 16, 16, 0, 0, 0, 1},
    };
    static const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    uint32_t seed = 777u;
    int ran = 0;
    for (size_t li = 0; li < sizeof lays / sizeof lays[0]; ++li)
        for (int d = 0; d < 3; ++d) {
            const qk_layout *L = &lays[li];
            const ropekit_dtype dt = dts[d];
            const size_t es = ropekit_dtype_size(dt);
            const int64_t F = L->nh * L->hd, T = L->B * L->S, off = L->q_off;
            const size_t nq = (size_t)(T * F), nkv = (size_t)(T * L->hd),
                         nt = (size_t)(T * L->rope);
            unsigned char *q = calloc(nq + (size_t)off, es), *kv = malloc(nkv * es);
            unsigned char *qr = malloc(nq * es), *kvr = malloc(nkv * es), *qg = malloc(nq * es),
                          *kvg = malloc(nkv * es);
            float *w = malloc((size_t)L->hd * 4), *cs = malloc((nt ? nt : 1) * 4),
                  *sn = malloc((nt ? nt : 1) * 4);
            const float scale = li % 2 ? 30.0f : 0.05f;
            qk_fill(q + (size_t)off * es, dt, nq, &seed, scale);
            qk_fill(kv, dt, nkv, &seed, scale);
            for (int64_t c = 0; c < L->hd; ++c)
                w[c] = 1.0f + 0.25f * (float)((c * 37) % 11 - 5) / 5.0f;
            for (size_t i = 0; i < nt; i += 2) {
                cs[i] = cs[i + 1] = cosf((float)i * 0.41f + 0.3f);
                sn[i] = sn[i + 1] = sinf((float)i * 0.41f + 0.3f);
            }
            if (li == 2) { /* a NaN in the kv row, an infinity and a zero head in the query */
                qk_set(kv, dt, 3, 0x7fc00000u);
                qk_set(q + (size_t)off * es, dt, (size_t)F + 5, 0xff800000u);
                memset(q + (size_t)(off + 2 * L->hd) * es, 0, (size_t)L->hd * es);
            }
            int64_t qsh[3] = {L->B, L->S, F}, kvsh[3] = {L->B, L->S, L->hd}, wsh[1] = {L->hd},
                    tsh[3] = {L->B, L->S, L->rope}, qosh[4] = {L->B, L->S, L->nh, L->hd};
            ropekit_tensor hq = ropekit_tensor_contiguous(q + (size_t)off * es, dt, 3, qsh);
            ropekit_tensor hkv = ropekit_tensor_contiguous(kv, dt, 3, kvsh);
            ropekit_tensor hw = ropekit_tensor_contiguous(w, ROPEKIT_FLOAT32, 1, wsh);
            ropekit_tensor hc = ropekit_tensor_contiguous(cs, ROPEKIT_FLOAT32, 3, tsh);
            ropekit_tensor hs = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 3, tsh);
            ropekit_tensor hqo = ropekit_tensor_contiguous(qr, dt, 4, qosh);
            ropekit_tensor hkvo = ropekit_tensor_contiguous(kvr, dt, 3, kvsh);
            ropekit_qknorm_rotary_embedding_attrs at = {L->nh, L->hd, L->rope, 1e-6f, L->fp8};
            CHECK(ropekit_qknorm_rotary_embedding(&hq, &hkv, &hw, L->rope ? &hc : NULL,
                                                  L->rope ? &hs : NULL, &at, &hqo,
                                                  &hkvo) == ROPEKIT_OK,
                  "cpu: %s", ropekit_last_error());
            /* query (and query_out) at an offset of q_off elements in its buffer */
            rk_case c = make_case(RK_OP_QKNORM_ROTARY_EMBEDDING,
                                  (const ropekit_tensor *[]){&hq, &hkv, &hw, L->rope ? &hc : NULL,
                                                             L->rope ? &hs : NULL});
            c.attrs.qknorm = at;
            const ropekit_tensor hg[2] = {ropekit_tensor_contiguous(qg, dt, 4, qosh),
                                          ropekit_tensor_contiguous(kvg, dt, 3, kvsh)};
            ropekit_status st = run_gpu(ctx, &c, L->in_place, (uint64_t)off * es, hg);
            const char *variant = ropekit_webgpu_last_variant(ctx);
            CHECK(st == ROPEKIT_OK, "qknorm layout %zu %s in_place=%d: %s", li,
                  ropekit_dtype_name(dt), L->in_place, ropekit_webgpu_last_error());
            /* row: 1 row kernel, 0 general kernel, -1 row kernel for 16-bit only (head_dim
             * 2048 is above the float32 limit of 1024) */
            const int want_row = L->row == -1 ? dt != ROPEKIT_FLOAT32 : L->row;
            CHECK((strstr(variant, "qknorm row ") != NULL) == want_row,
                  "qknorm layout %zu %s: variant '%s'", li, ropekit_dtype_name(dt), variant);
            if (st == ROPEKIT_OK) {
                size_t bad = 0, first = 0;
                uint32_t gb = 0, cb = 0; /* bits of the first difference: gpu, cpu */
                for (size_t i = 0; i < nq + nkv; ++i) {
                    const unsigned char *a = i < nq ? qg + i * es : kvg + (i - nq) * es;
                    const unsigned char *r = i < nq ? qr + i * es : kvr + (i - nq) * es;
                    if (memcmp(a, r, es) != 0 && !(qk_is_nan(a, dt) && qk_is_nan(r, dt)) && !bad++)
                        first = i, memcpy(&gb, a, es), memcpy(&cb, r, es);
                }
                CHECK(bad == 0,
                      "qknorm layout %zu %s in_place=%d (%s): %zu elements differ from the CPU, "
                      "first %s element %zu: gpu 0x%x cpu 0x%x",
                      li, ropekit_dtype_name(dt), L->in_place, variant, bad,
                      first < nq ? "query_out" : "kv_out", first < nq ? first : first - nq,
                      (unsigned)gb, (unsigned)cb);
                ++ran;
            }
            free(q), free(kv), free(qr), free(kvr), free(qg), free(kvg), free(w), free(cs),
                free(sn);
        }
    printf("qknorm layouts (%s): %d runs compared bit for bit\n",
           ropekit_webgpu_has_f64(ctx) ? "wide64" : "exact32", ran);
    close_context(ctx);
}

/* with shader-f64 (where the adapter has it: else both runs are exact32) and without */
static void run_qknorm_layouts(ropekit_webgpu_backend backend) {
    qknorm_layouts(backend, 0);
    qknorm_layouts(backend, 1);
}

/* QKNormRotaryEmbedding sums of squares at float32 rounding boundaries (the row kernel decides the
 * float32 sum from a sum in its own order where no rounding boundary is near, else recomputes it
 * in the contract's order): rows whose exact sum of squares rounds up while the contract's double
 * sum (sixteen lanes, butterfly) is exactly a tie that rounds down, because squares below half a
 * double ulp vanish in a lane (pattern 0) or in the butterfly (pattern 1); rows of 16-bit-exact
 * squares whose exact sum can be a tie (pattern 2); random rows with tiny values (pattern 3).
 * Every dtype, bit for bit against the CPU reference, wide64 and exact32. */
static uint16_t f16_exact(float v) { /* v exactly representable in float16 */
    uint16_t sg = v < 0 ? 0x8000u : 0u;
    float a = fabsf(v);
    if (a == 0.0f) return sg;
    if (a < 6.103515625e-05f) return (uint16_t)(sg | (uint16_t)(a * 16777216.0f));
    int e;
    float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    return (uint16_t)(sg | ((uint16_t)(e + 14) << 10) | ((uint16_t)(m * 2048.0f) & 0x3ffu));
}
static void qs_put(void *p, ropekit_dtype dt, size_t i, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if (dt == ROPEKIT_FLOAT32) memcpy((char *)p + 4 * i, &v, 4);
    else if (dt == ROPEKIT_BFLOAT16) ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
    else ((uint16_t *)p)[i] = f16_exact(v);
}
static void qknorm_sums(ropekit_webgpu_backend backend, int no_f64) {
    ropekit_webgpu_options opt = {backend, 0, no_f64, 0, 0, 0};
    ropekit_webgpu *ctx = shared_context(&opt);
    if (!ctx) return;
    enum { NB = 1, NS = 4, NH = 5, HD = 512, RD = 64 };
    static const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    int ran = 0;
    for (int d = 0; d < 3; ++d) {
        const ropekit_dtype dt = dts[d];
        const size_t es = ropekit_dtype_size(dt), nq = NB * NS * NH * HD, nkv = NB * NS * HD,
                     nt = NB * NS * RD;
        unsigned char *q = calloc(nq, es), *kv = calloc(nkv, es), *qr = malloc(nq * es),
                      *kvr = malloc(nkv * es), *qg = malloc(nq * es), *kvg = malloc(nkv * es);
        float *w = malloc(HD * 4), *cs = malloc(nt * 4), *sn = malloc(nt * 4), row[HD];
        /* float16 rows scaled by 2^8 (its smallest value is 2^-24) */
        const float k = dt == ROPEKIT_FLOAT16 ? 256.0f : 1.0f;
        const float tiny1 = dt == ROPEKIT_FLOAT16 ? 0x1p-19f : 0x1p-27f; /* square: 2^-54 of k^2 */
        const float tiny2 = dt == ROPEKIT_FLOAT16 ? 0x1p-24f : 0x1p-40f;
        uint32_t seed = 99u + (uint32_t)d;
        for (int r = 0; r < NS * (NH + 1); ++r) {
            const int pat = r % 4, m = (r * 7) % 53; /* (1 + m/128)^2 < 2: the tie is at 2^-24 */
            memset(row, 0, sizeof row);
            const float x0 = k * (1.0f + (float)m / 128.0f);
            if (pat == 0 || pat == 1) {
                row[0] = x0;
                row[1] = k * 0x1p-12f; /* square: half an ulp of x0^2 in float32 */
                if (pat == 0) /* lane 0: each square below half a double ulp of x0^2 */
                    for (int c = 16; c < HD; c += 16) row[c] = tiny1;
                else /* lane 2: lost when lane 0 + lane 2 are added in the butterfly */
                    row[2] = tiny2;
            } else if (pat == 2) { /* squares multiples of 2^-16 k^2 (bfloat16's 8 bits) */
                for (int c = 0; c < HD; ++c) row[c] = k * (0.5f + (float)((c * 37 + r) % 128) / 256.0f);
            } else {
                qk_fill(row, ROPEKIT_FLOAT32, HD, &seed, k);
                for (int c = 5; c < HD; c += 9) row[c] = tiny2 * (float)(1 + c % 3);
                for (int c = 0; c < HD; ++c) { /* exact in the dtype */
                    uint32_t u;
                    memcpy(&u, &row[c], 4);
                    if (dt == ROPEKIT_BFLOAT16) u &= 0xffff0000u;
                    else if (dt == ROPEKIT_FLOAT16 && fabsf(row[c]) >= 6.103515625e-05f) u &= 0xffffe000u;
                    else if (dt == ROPEKIT_FLOAT16) u = 0;
                    memcpy(&row[c], &u, 4);
                }
            }
            const int tok = r / (NH + 1), h = r % (NH + 1);
            for (int c = 0; c < HD; ++c) {
                if (h < NH) qs_put(q, dt, (size_t)(tok * NH + h) * HD + (size_t)c, row[c]);
                else qs_put(kv, dt, (size_t)tok * HD + (size_t)c, row[c]);
            }
        }
        for (int c = 0; c < HD; ++c) w[c] = 1.0f;
        for (size_t i = 0; i < nt; ++i) cs[i] = 1.0f, sn[i] = 0.0f;
        int64_t qsh[3] = {NB, NS, NH * HD}, kvsh[3] = {NB, NS, HD}, wsh[1] = {HD},
                tsh[3] = {NB, NS, RD}, qosh[4] = {NB, NS, NH, HD};
        ropekit_tensor hq = ropekit_tensor_contiguous(q, dt, 3, qsh);
        ropekit_tensor hkv = ropekit_tensor_contiguous(kv, dt, 3, kvsh);
        ropekit_tensor hw = ropekit_tensor_contiguous(w, ROPEKIT_FLOAT32, 1, wsh);
        ropekit_tensor hc = ropekit_tensor_contiguous(cs, ROPEKIT_FLOAT32, 3, tsh);
        ropekit_tensor hs = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 3, tsh);
        ropekit_tensor hqo = ropekit_tensor_contiguous(qr, dt, 4, qosh);
        ropekit_tensor hkvo = ropekit_tensor_contiguous(kvr, dt, 3, kvsh);
        ropekit_qknorm_rotary_embedding_attrs at = {NH, HD, RD, 1e-6f, 1};
        CHECK(ropekit_qknorm_rotary_embedding(&hq, &hkv, &hw, &hc, &hs, &at, &hqo, &hkvo) ==
                  ROPEKIT_OK,
              "cpu: %s", ropekit_last_error());
        rk_case cc = make_case(RK_OP_QKNORM_ROTARY_EMBEDDING,
                               (const ropekit_tensor *[]){&hq, &hkv, &hw, &hc, &hs});
        cc.attrs.qknorm = at;
        const ropekit_tensor hg[2] = {ropekit_tensor_contiguous(qg, dt, 4, qosh),
                                      ropekit_tensor_contiguous(kvg, dt, 3, kvsh)};
        ropekit_status st = run_gpu(ctx, &cc, 0, 0, hg);
        const char *variant = ropekit_webgpu_last_variant(ctx);
        CHECK(st == ROPEKIT_OK && strstr(variant, "qknorm row ") != NULL, "qknorm sums %s: %s (%s)",
              ropekit_dtype_name(dt), ropekit_webgpu_last_error(), variant);
        if (st == ROPEKIT_OK) {
            for (int r = 0; r < NS * (NH + 1); ++r) {
                const int tok = r / (NH + 1), h = r % (NH + 1);
                const size_t o = (h < NH ? (size_t)(tok * NH + h) : (size_t)tok) * HD * es;
                const unsigned char *a = (h < NH ? qg : kvg) + o, *e = (h < NH ? qr : kvr) + o;
                size_t bad = 0;
                for (int c = 0; c < HD; ++c) bad += memcmp(a + (size_t)c * es, e + (size_t)c * es, es) != 0;
                CHECK(bad == 0, "qknorm sums %s (%s) row %d (pattern %d): %zu elements differ",
                      ropekit_dtype_name(dt), variant, r, r % 4, bad);
            }
            ++ran;
        }
        free(q), free(kv), free(qr), free(kvr), free(qg), free(kvg), free(w), free(cs), free(sn);
    }
    printf("qknorm sums at rounding boundaries (%s): %d dtypes compared bit for bit\n",
           ropekit_webgpu_has_f64(ctx) ? "wide64" : "exact32", ran);
    close_context(ctx);
}
static void run_qknorm_sums(ropekit_webgpu_backend backend) {
    qknorm_sums(backend, 0);
    qknorm_sums(backend, 1);
}

/* QKNormRotaryEmbedding's factor 1/sqrt(ss/hd + eps) over a sweep of sums (the row kernel proves
 * the adapter's float32 sqrt and division with integer arithmetic): rows with a power of two 2^j
 * at channel 1 (its output is 2^j times the factor: the factor's bits) and a random value near
 * 2^j at channel 0, j in [-20, 20]; head_dim 64 (ss/hd a product) and 48 (a division), eps 1e-6
 * and 0; float32, bit for bit against the CPU reference. */
static void qknorm_factor(ropekit_webgpu_backend backend, int no_f64) {
    ropekit_webgpu_options opt = {backend, 0, no_f64, 0, 0, 0};
    ropekit_webgpu *ctx = shared_context(&opt);
    if (!ctx) return;
    enum { NS = 128, NH = 7 };
    uint32_t seed = 4242u;
    int ran = 0;
    for (int shape = 0; shape < 4; ++shape) {
        const int64_t HD = shape % 2 ? 48 : 64;
        const float eps = shape < 2 ? 1e-6f : 0.0f;
        const size_t nq = (size_t)(NS * NH * HD), nkv = (size_t)(NS * HD);
        float *q = calloc(nq, 4), *kv = calloc(nkv, 4), *w = malloc((size_t)HD * 4);
        float *qr = malloc(nq * 4), *kvr = malloc(nkv * 4), *qg = malloc(nq * 4), *kvg = malloc(nkv * 4);
        for (int64_t c = 0; c < HD; ++c) w[c] = 1.0f;
        for (int r = 0; r < NS * (NH + 1); ++r) {
            float *row = r % (NH + 1) < NH ? q + (size_t)((r / (NH + 1)) * NH + r % (NH + 1)) * (size_t)HD
                                           : kv + (size_t)(r / (NH + 1)) * (size_t)HD;
            seed = seed * 1664525u + 1013904223u;
            const int j = (int)(seed >> 27) - 16 + (int)((seed >> 8) & 7u) - 3; /* about -20 .. 20 */
            seed = seed * 1664525u + 1013904223u;
            const float m = 1.0f + (float)(seed >> 9) / 8388608.0f; /* [1, 2), 23 random bits */
            const int d = (int)((seed >> 3) & 15u) - 8;
            row[1] = ldexpf(1.0f, j);
            row[0] = ldexpf(m, j + d);
        }
        int64_t qsh[3] = {1, NS, NH * HD}, kvsh[3] = {1, NS, HD}, wsh[1] = {HD},
                qosh[4] = {1, NS, NH, HD};
        ropekit_tensor hq = ropekit_tensor_contiguous(q, ROPEKIT_FLOAT32, 3, qsh);
        ropekit_tensor hkv = ropekit_tensor_contiguous(kv, ROPEKIT_FLOAT32, 3, kvsh);
        ropekit_tensor hw = ropekit_tensor_contiguous(w, ROPEKIT_FLOAT32, 1, wsh);
        ropekit_tensor hqo = ropekit_tensor_contiguous(qr, ROPEKIT_FLOAT32, 4, qosh);
        ropekit_tensor hkvo = ropekit_tensor_contiguous(kvr, ROPEKIT_FLOAT32, 3, kvsh);
        ropekit_qknorm_rotary_embedding_attrs at = {NH, HD, 0, eps, 0};
        CHECK(ropekit_qknorm_rotary_embedding(&hq, &hkv, &hw, NULL, NULL, &at, &hqo, &hkvo) == ROPEKIT_OK,
              "cpu: %s", ropekit_last_error());
        rk_case cc = make_case(RK_OP_QKNORM_ROTARY_EMBEDDING,
                               (const ropekit_tensor *[]){&hq, &hkv, &hw, NULL, NULL});
        cc.attrs.qknorm = at;
        const ropekit_tensor hg[2] = {ropekit_tensor_contiguous(qg, ROPEKIT_FLOAT32, 4, qosh),
                                      ropekit_tensor_contiguous(kvg, ROPEKIT_FLOAT32, 3, kvsh)};
        ropekit_status st = run_gpu(ctx, &cc, 0, 0, hg);
        const char *variant = ropekit_webgpu_last_variant(ctx);
        CHECK(st == ROPEKIT_OK && strstr(variant, "qknorm row ") != NULL, "qknorm factor: %s (%s)",
              ropekit_webgpu_last_error(), variant);
        if (st == ROPEKIT_OK) {
            size_t bad = memcmp(qg, qr, nq * 4) != 0, badkv = memcmp(kvg, kvr, nkv * 4) != 0;
            CHECK(!bad && !badkv, "qknorm factor head_dim %lld eps %g (%s): query_out %s, kv_out %s",
                  (long long)HD, (double)eps, variant, bad ? "differs" : "same", badkv ? "differs" : "same");
            ++ran;
        }
        free(q), free(kv), free(w), free(qr), free(kvr), free(qg), free(kvg);
    }
    printf("qknorm factor sweep (%s): %d shapes of %d rows compared bit for bit\n",
           ropekit_webgpu_has_f64(ctx) ? "wide64" : "exact32", ran, NS * (NH + 1));
    close_context(ctx);
}
static void run_qknorm_factor(ropekit_webgpu_backend backend) {
    qknorm_factor(backend, 0);
    qknorm_factor(backend, 1);
}

/* Timestamps (options.timestamps): without them kernel_time is refused; with them (where the
 * adapter has timestamp-query) it counts each operator call's pass once, with a positive time,
 * and restarts from zero after reading. */
static void run_timestamps(ropekit_webgpu_backend backend) {
    ropekit_webgpu_options off = {backend, 0, 0, 0, 0, 0}, on = {backend, 0, 0, 0, 0, 1};
    ropekit_webgpu *ctx = NULL;
    double sec = -1;
    uint32_t passes = 99;
    if (create_context(&off, &ctx) == ROPEKIT_OK) {
        CHECK(!ropekit_webgpu_has_timestamps(ctx), "timestamps without options.timestamps");
        CHECK(ropekit_webgpu_kernel_time(ctx, &sec, &passes) == ROPEKIT_ERROR_UNSUPPORTED &&
                  strstr(ropekit_webgpu_last_error(), "timestamps") != NULL,
              "kernel_time without timestamps: '%s'", ropekit_webgpu_last_error());
        ropekit_webgpu_destroy(ctx);
    }
    ctx = NULL;
    if (create_context(&on, &ctx) != ROPEKIT_OK) {
        CHECK(0, "context: %s", ropekit_webgpu_last_error());
        return;
    }
    if (!ropekit_webgpu_has_timestamps(ctx)) {
        printf("timestamps: the adapter has no timestamp-query feature (not counted)\n");
        ropekit_webgpu_destroy(ctx);
        return;
    }
    enum { S = 4, N = 2, H = 8, P = 8 };
    float x[S * N * H], c[P * H / 2], sn[P * H / 2];
    for (int i = 0; i < S * N * H; ++i) x[i] = (float)i / 16.0f;
    for (int i = 0; i < P * H / 2; ++i) c[i] = 0.5f, sn[i] = 0.25f;
    int64_t pos[S] = {0, 1, 2, 3}, xs[3] = {1, S, N * H}, tsh[2] = {P, H / 2}, ps[2] = {1, S};
    ropekit_tensor hx = ropekit_tensor_contiguous(x, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 2, tsh);
    ropekit_tensor hs = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 2, tsh);
    ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
    WGPUBuffer bx = upload(ctx, &hx), by = upload(ctx, &hx), bc = upload(ctx, &hc),
               bs = upload(ctx, &hs);
    ropekit_webgpu_tensor gx = gview(bx, &hx), gy = gview(by, &hx), gc = gview(bc, &hc), gs = gview(bs, &hs);
    ropekit_rotary_embedding_attrs at = {0, 0, N, 0};
    CHECK(ropekit_webgpu_kernel_time(ctx, &sec, &passes) == ROPEKIT_OK && passes == 0 && sec == 0,
          "kernel_time before any call: %u passes, %g s", passes, sec);
    for (int i = 0; i < 3; ++i)
        CHECK(ropekit_webgpu_rotary_embedding(ctx, &gx, &gc, &gs, &ids, &at, &gy) == ROPEKIT_OK,
              "rotary: %s", ropekit_webgpu_last_error());
    CHECK(ropekit_webgpu_kernel_time(ctx, &sec, &passes) == ROPEKIT_OK && passes == 3 && sec > 0 &&
              sec < 1.0,
          "kernel_time after 3 calls: %u passes, %g s (%s)", passes, sec, ropekit_webgpu_last_error());
    CHECK(ropekit_webgpu_kernel_time(ctx, &sec, &passes) == ROPEKIT_OK && passes == 0 && sec == 0,
          "kernel_time read twice: %u passes, %g s", passes, sec);
    CHECK(ropekit_webgpu_kernel_time(ctx, NULL, &passes) == ROPEKIT_ERROR_NULL_POINTER, "NULL seconds");
    wgpuBufferRelease(bx), wgpuBufferRelease(by), wgpuBufferRelease(bc), wgpuBufferRelease(bs);
    ropekit_webgpu_destroy(ctx);
}

/* Repeated calls (the decode loop): the context reuses the bind group of identical bindings.
 * New data and new ids on the same buffers, and buffers released and replaced by new ones
 * (both, or only the output: a new handle could take a released one's address and match a
 * kept bind group of the old buffer), must all give the CPU's results bit for bit. */
static void run_repeated_calls(ropekit_webgpu_backend backend) {
    ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = shared_context(&opt);
    if (!ctx) return;
    enum { S = 3, N = 2, H = 8, P = 16, ITERS = 24 };
    float x[S * N * H], y[S * N * H], ref[S * N * H], c[P * H / 2], sn[P * H / 2];
    for (int i = 0; i < P * H / 2; ++i) c[i] = cosf((float)i * 0.37f), sn[i] = sinf((float)i * 0.37f);
    int64_t pos[S], xs[3] = {1, S, N * H}, tsh[2] = {P, H / 2}, ps[2] = {1, S};
    ropekit_tensor hx = ropekit_tensor_contiguous(x, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hr = ropekit_tensor_contiguous(ref, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 2, tsh);
    ropekit_tensor hs = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 2, tsh);
    ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
    ropekit_rotary_embedding_attrs at = {0, 0, N, 0};
    WGPUBuffer bc = upload(ctx, &hc), bs = upload(ctx, &hs), bx = NULL, by = NULL;
    ropekit_webgpu_tensor gc = gview(bc, &hc), gs = gview(bs, &hs);
    int bad = 0;
    for (int it = 0; it < 2 * ITERS; ++it) {
        int fresh = it >= ITERS; /* second half: new buffers for every call */
        for (int i = 0; i < S * N * H; ++i) x[i] = (float)((i * 7 + it * 13) % 29) / 8.0f - 1.5f;
        for (int s = 0; s < S; ++s) pos[s] = (it * 5 + s * 3) % P;
        if (!bx || (fresh && it % 2)) { /* both buffers new */
            if (bx) wgpuBufferRelease(bx), wgpuBufferRelease(by);
            bx = upload(ctx, &hx), by = upload(ctx, &hx);
        } else if (fresh) { /* only the output new: its handle may take the released one's place */
            wgpuBufferRelease(by);
            by = upload(ctx, &hx);
            if (ropekit_webgpu_write(ctx, bx, 0, x, sizeof x) != ROPEKIT_OK) {
                ++bad;
                break;
            }
        } else if (ropekit_webgpu_write(ctx, bx, 0, x, sizeof x) != ROPEKIT_OK) {
            ++bad;
            break;
        }
        ropekit_webgpu_tensor gx = gview(bx, &hx), gy = gview(by, &hx);
        if (!bx || !by || ropekit_webgpu_rotary_embedding(ctx, &gx, &gc, &gs, &ids, &at, &gy) != ROPEKIT_OK ||
            ropekit_webgpu_read(ctx, by, 0, y, sizeof y) != ROPEKIT_OK ||
            ropekit_rotary_embedding(&hx, &hc, &hs, &ids, &at, &hr) != ROPEKIT_OK) {
            ++bad;
            break;
        }
        if (memcmp(y, ref, sizeof y) != 0) ++bad;
    }
    CHECK(bad == 0, "repeated calls: %d of %d calls differ from the CPU or failed (%s)", bad,
          2 * ITERS, ropekit_webgpu_last_error());
    if (bx) wgpuBufferRelease(bx), wgpuBufferRelease(by);
    wgpuBufferRelease(bc), wgpuBufferRelease(bs);
    close_context(ctx);
}

/* Batching (ropekit_webgpu_set_batch): a chain of 11 calls, each with its own position ids or
 * offset (RotaryEmbedding with ids, MS RotaryEmbedding with a scalar offset: a call without
 * ids), out of place between two buffers and in place, recorded 4 at a time (submitted at the
 * 4th and 8th call and by the read): each call must use its own parameters and ids, in order,
 * bit for bit as the same chain on the CPU. A refused call (id out of range) is answered at
 * once and records nothing; bad batch sizes are refused. */
static void run_batched_calls(ropekit_webgpu_backend backend) {
    ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = shared_context(&opt);
    if (!ctx) return;
    CHECK(ropekit_webgpu_set_batch(ctx, -1) == ROPEKIT_ERROR_INVALID_ATTRIBUTE &&
              ropekit_webgpu_set_batch(ctx, 257) == ROPEKIT_ERROR_INVALID_ATTRIBUTE &&
              strstr(ropekit_webgpu_last_error(), "257") != NULL,
          "bad batch sizes: '%s'", ropekit_webgpu_last_error());
    CHECK(ropekit_webgpu_set_batch(NULL, 4) == ROPEKIT_ERROR_NULL_POINTER, "NULL ctx");
    CHECK(ropekit_webgpu_flush(ctx) == ROPEKIT_OK, "flush with nothing recorded");
    CHECK(ropekit_webgpu_set_batch(ctx, 4) == ROPEKIT_OK, "set_batch 4: %s", ropekit_webgpu_last_error());
    enum { B = 2, S = 3, N = 2, H = 16, P = 40, CALLS = 11 };
    float x[B * S * N * H], ref[2][B * S * N * H], y[B * S * N * H], c[P * H / 2], sn[P * H / 2];
    for (int i = 0; i < P * H / 2; ++i) c[i] = cosf((float)i * 0.29f), sn[i] = sinf((float)i * 0.29f);
    for (int i = 0; i < B * S * N * H; ++i) x[i] = (float)((i * 11) % 37) / 8.0f - 2.0f;
    int64_t pos[CALLS][B * S], off[CALLS], xs[3] = {B, S, N * H}, tsh[2] = {P, H / 2}, ps[2] = {B, S},
            os[1] = {1};
    ropekit_tensor hx = ropekit_tensor_contiguous(x, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hr[2] = {ropekit_tensor_contiguous(ref[0], ROPEKIT_FLOAT32, 3, xs),
                            ropekit_tensor_contiguous(ref[1], ROPEKIT_FLOAT32, 3, xs)};
    ropekit_tensor hc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 2, tsh);
    ropekit_tensor hs = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 2, tsh);
    WGPUBuffer bc = upload(ctx, &hc), bs = upload(ctx, &hs), bb[2] = {upload(ctx, &hx), upload(ctx, &hx)};
    ropekit_webgpu_tensor gc = gview(bc, &hc), gs = gview(bs, &hs), gb[2] = {gview(bb[0], &hx), gview(bb[1], &hx)};
    memcpy(ref[0], x, sizeof x);
    int cur = 0, bad = 0;
    ropekit_rotary_embedding_attrs at = {0, 0, N, 0};
    ropekit_ms_rotary_embedding_attrs ms = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
    ms.num_heads = N;
    for (int k = 0; k < CALLS; ++k) {
        for (int i = 0; i < B * S; ++i) pos[k][i] = (k * 7 + i * 5) % P;
        off[k] = k * 3 % (P - S);
        ropekit_tensor ids = ropekit_tensor_contiguous(pos[k], ROPEKIT_INT64, 2, ps);
        ropekit_tensor ofs = ropekit_tensor_contiguous(&off[k], ROPEKIT_INT64, 1, os);
        const int in_place = k % 3 == 2, nxt = in_place ? cur : 1 - cur, use_ms = k % 4 == 1;
        ropekit_status st = use_ms ? ropekit_ms_rotary_embedding(&hr[cur], &ofs, &hc, &hs, &ms, &hr[nxt])
                                   : ropekit_rotary_embedding(&hr[cur], &hc, &hs, &ids, &at, &hr[nxt]);
        ropekit_status gst = use_ms ? ropekit_webgpu_ms_rotary_embedding(ctx, &gb[cur], &ofs, &gc, &gs, &ms, &gb[nxt])
                                    : ropekit_webgpu_rotary_embedding(ctx, &gb[cur], &gc, &gs, &ids, &at, &gb[nxt]);
        if (st != ROPEKIT_OK || gst != ROPEKIT_OK) ++bad;
        if (k == 5) { /* refused at once, nothing recorded */
            int64_t badpos[B * S] = {0, 1, P, 2, 3, 4};
            ropekit_tensor bids = ropekit_tensor_contiguous(badpos, ROPEKIT_INT64, 2, ps);
            CHECK(ropekit_webgpu_rotary_embedding(ctx, &gb[nxt], &gc, &gs, &bids, &at, &gb[1 - nxt]) ==
                      ROPEKIT_ERROR_POSITION_OUT_OF_RANGE,
                  "batched call with an id out of range: %s", ropekit_webgpu_last_error());
        }
        cur = nxt;
    }
    CHECK(bad == 0, "batched chain: %d of %d calls failed (%s)", bad, CALLS, ropekit_webgpu_last_error());
    ropekit_status st = ropekit_webgpu_read(ctx, bb[cur], 0, y, sizeof y);
    CHECK(st == ROPEKIT_OK && memcmp(y, ref[cur], sizeof y) == 0,
          "batched chain of %d calls: result differs from the CPU (%s)", CALLS, ropekit_webgpu_last_error());
    CHECK(ropekit_webgpu_set_batch(ctx, 0) == ROPEKIT_OK, "set_batch 0");
    wgpuBufferRelease(bb[0]), wgpuBufferRelease(bb[1]), wgpuBufferRelease(bc), wgpuBufferRelease(bs);
    close_context(ctx);
}

/* The setup run_call_chain and run_argument_reuse share: calls of 1 to CHAIN_SMAX tokens of one
 * 8-channel head ping-pong between two device buffers bb[0], bb[1] (both holding x at first),
 * mirrored on the host by ref[0], ref[1] (the same chain on the CPU); tables of CHAIN_P rows at
 * angles i * freq; x[i] = ((i * mul) % mod) / 8 - 2.5; y and pos: room for a read-back and the ids
 * of the largest call. chain_open: 0 (a failed check, everything released) when out of memory. */
enum { CHAIN_N = 1, CHAIN_H = 8, CHAIN_P = 64, CHAIN_SMAX = 20000 };
typedef struct chain_setup {
    size_t ne; /* elements of the largest call */
    float *x, *ref[2], *y;
    int64_t *pos;
    float c[CHAIN_P * CHAIN_H / 2], sn[CHAIN_P * CHAIN_H / 2];
    ropekit_tensor hx, hc, hs;
    WGPUBuffer bc, bs, bb[2];
    ropekit_webgpu_tensor gc, gs;
    ropekit_rotary_embedding_attrs at;
} chain_setup;

static void chain_close(chain_setup *t) {
    WGPUBuffer b[4] = {t->bb[0], t->bb[1], t->bc, t->bs};
    for (int i = 0; i < 4; ++i)
        if (b[i]) wgpuBufferRelease(b[i]);
    free(t->x), free(t->ref[0]), free(t->ref[1]), free(t->y), free(t->pos);
}

static int chain_open(ropekit_webgpu *ctx, chain_setup *t, float freq, size_t mul, size_t mod) {
    memset(t, 0, sizeof *t);
    t->ne = (size_t)CHAIN_SMAX * CHAIN_N * CHAIN_H;
    t->x = malloc(t->ne * 4), t->ref[0] = malloc(t->ne * 4), t->ref[1] = malloc(t->ne * 4);
    t->y = malloc(t->ne * 4), t->pos = malloc((size_t)CHAIN_SMAX * sizeof *t->pos);
    if (!t->x || !t->ref[0] || !t->ref[1] || !t->y || !t->pos) {
        CHECK(0, "out of memory");
        chain_close(t);
        return 0;
    }
    for (int i = 0; i < CHAIN_P * CHAIN_H / 2; ++i)
        t->c[i] = cosf((float)i * freq), t->sn[i] = sinf((float)i * freq);
    for (size_t i = 0; i < t->ne; ++i) t->x[i] = (float)((i * mul) % mod) / 8.0f - 2.5f;
    int64_t xs[3] = {1, CHAIN_SMAX, CHAIN_N * CHAIN_H}, tsh[2] = {CHAIN_P, CHAIN_H / 2};
    t->hx = ropekit_tensor_contiguous(t->x, ROPEKIT_FLOAT32, 3, xs);
    t->hc = ropekit_tensor_contiguous(t->c, ROPEKIT_FLOAT32, 2, tsh);
    t->hs = ropekit_tensor_contiguous(t->sn, ROPEKIT_FLOAT32, 2, tsh);
    t->bc = upload(ctx, &t->hc), t->bs = upload(ctx, &t->hs);
    t->bb[0] = upload(ctx, &t->hx), t->bb[1] = upload(ctx, &t->hx);
    memcpy(t->ref[0], t->x, t->ne * 4);
    memcpy(t->ref[1], t->x, t->ne * 4);
    t->gc = gview(t->bc, &t->hc), t->gs = gview(t->bs, &t->hs);
    t->at = (ropekit_rotary_embedding_attrs){0, 0, CHAIN_N, 0};
    return 1;
}

/* Both ping-pong buffers against their CPU mirrors, bit for bit. */
static void chain_compare(ropekit_webgpu *ctx, chain_setup *t, const char *what, int calls) {
    for (int b = 0; b < 2; ++b) {
        ropekit_status st = ropekit_webgpu_read(ctx, t->bb[b], 0, t->y, t->ne * 4);
        CHECK(st == ROPEKIT_OK && memcmp(t->y, t->ref[b], t->ne * 4) == 0,
              "%s of %d calls: buffer %d differs from the CPU (%s)", what, calls, b,
              ropekit_webgpu_last_error());
    }
}

/* Unbatched calls back to back without waiting: a chain of calls of different sizes (1 to
 * 20,000 tokens: the parameter buffer grows; ids of 4 B to 80 KB) ping-pong between two
 * buffers, with a refused call (id out of range: an error before anything is uploaded, no
 * output touched) and a call failing in WebGPU (its output buffer destroyed: the bind group's
 * creation fails; nothing may be submitted, as wgpu-native aborts the process on the
 * submission of an invalid command buffer: it did before 2026-12-01) in the middle; the chain
 * must equal the same chain on the CPU bit for bit. Then the context destroyed with calls in
 * flight, unbatched and recorded (ASan). */
static void run_call_chain(ropekit_webgpu_backend backend) {
    ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = open_context(&opt); /* its own: destroyed with work in flight */
    if (!ctx) return;
    enum { N = CHAIN_N, H = CHAIN_H, P = CHAIN_P, SMAX = CHAIN_SMAX, CALLS = 14 };
    static const int seq[CALLS] = {3, 1100, 5, 20000, 2, 3000, 7, 1, 3000, 4, 20000, 6, 1100, 9};
    chain_setup t;
    if (!chain_open(ctx, &t, 0.37f, 13, 41)) {
        ropekit_webgpu_destroy(ctx);
        return;
    }
    WGPUBuffer dead = upload(ctx, &t.hx);
    float **ref = t.ref;
    int64_t *pos = t.pos;
    WGPUBuffer *bb = t.bb;
    const ropekit_rotary_embedding_attrs at = t.at;
    const ropekit_tensor hc = t.hc, hs = t.hs;
    const ropekit_webgpu_tensor gc = t.gc, gs = t.gs;
    int cur = 0, bad = 0, refused = 0, failed = 0;
    for (int k = 0; k < CALLS; ++k) {
        const int S = seq[k], nxt = 1 - cur;
        int64_t sh[3] = {1, S, N * H}, ps[2] = {1, S};
        for (int i = 0; i < S; ++i) pos[i] = (k * 11 + i * 3) % P;
        ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
        ropekit_tensor hin = ropekit_tensor_contiguous(ref[cur], ROPEKIT_FLOAT32, 3, sh);
        ropekit_tensor hout = ropekit_tensor_contiguous(ref[nxt], ROPEKIT_FLOAT32, 3, sh);
        ropekit_webgpu_tensor gin = ropekit_webgpu_tensor_contiguous(bb[cur], 0, ROPEKIT_FLOAT32, 3, sh);
        ropekit_webgpu_tensor gout = ropekit_webgpu_tensor_contiguous(bb[nxt], 0, ROPEKIT_FLOAT32, 3, sh);
        if (ropekit_rotary_embedding(&hin, &hc, &hs, &ids, &at, &hout) != ROPEKIT_OK ||
            ropekit_webgpu_rotary_embedding(ctx, &gin, &gc, &gs, &ids, &at, &gout) != ROPEKIT_OK)
            ++bad;
        if (k == 4) { /* refused before dispatch: nothing uploaded, nothing written */
            pos[S / 2] = P;
            refused = ropekit_webgpu_rotary_embedding(ctx, &gout, &gc, &gs, &ids, &at, &gin) ==
                      ROPEKIT_ERROR_POSITION_OUT_OF_RANGE;
        }
        if (k == 8) { /* rejected by WebGPU: the output buffer is destroyed (the bind group's
                       * creation fails; nothing is submitted: wgpu-native aborts the process on
                       * a submission of an invalid command buffer, as before 2026-12-01) */
            ropekit_webgpu_tensor gdead = ropekit_webgpu_tensor_contiguous(dead, 0, ROPEKIT_FLOAT32, 3, sh);
            wgpuBufferDestroy(dead);
            failed = ropekit_webgpu_rotary_embedding(ctx, &gout, &gc, &gs, &ids, &at, &gdead) ==
                     ROPEKIT_ERROR_DEVICE;
        }
        cur = nxt;
    }
    CHECK(bad == 0, "call chain: %d of %d calls failed (%s)", bad, CALLS, ropekit_webgpu_last_error());
    CHECK(refused, "call chain: a call with an id out of range must be refused before dispatch");
    CHECK(failed, "call chain: a call on a destroyed buffer must fail with ROPEKIT_ERROR_DEVICE (%s)",
          ropekit_webgpu_last_error());
    chain_compare(ctx, &t, "call chain", CALLS);
    printf("call chain: %d calls of 1-%d tokens compared bit for bit\n", CALLS, SMAX);
    wgpuBufferRelease(dead);
    /* destroyed with work in flight: unbatched calls, then recorded ones (batch of 8) */
    for (int k = 0; k < 2; ++k) {
        int64_t sh[3] = {1, 1000, N * H}, ps[2] = {1, 1000};
        for (int i = 0; i < 1000; ++i) pos[i] = i % P;
        ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
        ropekit_webgpu_tensor g0 = ropekit_webgpu_tensor_contiguous(bb[0], 0, ROPEKIT_FLOAT32, 3, sh);
        ropekit_webgpu_tensor g1 = ropekit_webgpu_tensor_contiguous(bb[1], 0, ROPEKIT_FLOAT32, 3, sh);
        int nbad = 0;
        for (int i = 0; i < 20; ++i) {
            if (k == 1 && i == 10) nbad += ropekit_webgpu_set_batch(ctx, 8) != ROPEKIT_OK;
            nbad += ropekit_webgpu_rotary_embedding(ctx, i % 2 ? &g1 : &g0, &gc, &gs, &ids, &at,
                                                    i % 2 ? &g0 : &g1) != ROPEKIT_OK;
        }
        CHECK(nbad == 0, "calls before destroy: %d failed (%s)", nbad, ropekit_webgpu_last_error());
        if (k == 1) break; /* the context is destroyed below with its work in flight */
    }
    chain_close(&t);
    ropekit_webgpu_destroy(ctx);
}

/* Unbatched calls that repeat earlier calls' arguments (parameters and position ids) bind the
 * argument slot that holds them instead of uploading them again (context.c, args_place). A chain
 * of 60 calls between two buffers, without a wait: ids from 11 sets (more than the 8 slots
 * remembered), repeats of the previous call, the same parameters with other ids, other shapes
 * (1 to 20,000 tokens: 80 KB of ids, slots that overlap and wrap around the ring), calls without
 * ids (MS RotaryEmbedding with an offset) and a stretch recorded by set_batch; each call must
 * use its own arguments: bit for bit as the same chain on the CPU. */
static void run_argument_reuse(ropekit_webgpu_backend backend) {
    ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = open_context(&opt);
    if (!ctx) return;
    enum { N = CHAIN_N, H = CHAIN_H, P = CHAIN_P, SMAX = CHAIN_SMAX, CALLS = 60 };
    chain_setup t;
    if (!chain_open(ctx, &t, 0.41f, 17, 43)) {
        ropekit_webgpu_destroy(ctx);
        return;
    }
    float **ref = t.ref;
    int64_t *pos = t.pos, os[1] = {1};
    WGPUBuffer *bb = t.bb;
    const ropekit_rotary_embedding_attrs at = t.at;
    const ropekit_tensor hc = t.hc, hs = t.hs;
    const ropekit_webgpu_tensor gc = t.gc, gs = t.gs;
    ropekit_ms_rotary_embedding_attrs ms = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
    ms.num_heads = N;
    int cur = 0, bad = 0, set = 0;
    for (int k = 0; k < CALLS; ++k) {
        const int S = k % 13 == 6 ? SMAX : k % 7 == 3 ? 1 : k % 5 == 2 ? 37 : 4, nxt = 1 - cur;
        if (k % 4 != 1) set = (k * 5) % 11; /* else the previous call's ids again */
        for (int i = 0; i < S; ++i) pos[i] = (set * 7 + i * 3) % P;
        int64_t sh[3] = {1, S, N * H}, ps[2] = {1, S}, off = set % (P - S > 0 ? P - S : 1);
        ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
        ropekit_tensor ofs = ropekit_tensor_contiguous(&off, ROPEKIT_INT64, 1, os);
        ropekit_tensor hin = ropekit_tensor_contiguous(ref[cur], ROPEKIT_FLOAT32, 3, sh);
        ropekit_tensor hout = ropekit_tensor_contiguous(ref[nxt], ROPEKIT_FLOAT32, 3, sh);
        ropekit_webgpu_tensor gin = ropekit_webgpu_tensor_contiguous(bb[cur], 0, ROPEKIT_FLOAT32, 3, sh);
        ropekit_webgpu_tensor gout = ropekit_webgpu_tensor_contiguous(bb[nxt], 0, ROPEKIT_FLOAT32, 3, sh);
        if (k == 40) bad += ropekit_webgpu_set_batch(ctx, 4) != ROPEKIT_OK;
        if (k == 47) bad += ropekit_webgpu_set_batch(ctx, 0) != ROPEKIT_OK;
        const int use_ms = k % 9 == 4 && S < P;
        ropekit_status st = use_ms ? ropekit_ms_rotary_embedding(&hin, &ofs, &hc, &hs, &ms, &hout)
                                   : ropekit_rotary_embedding(&hin, &hc, &hs, &ids, &at, &hout);
        ropekit_status gst = use_ms ? ropekit_webgpu_ms_rotary_embedding(ctx, &gin, &ofs, &gc, &gs, &ms, &gout)
                                    : ropekit_webgpu_rotary_embedding(ctx, &gin, &gc, &gs, &ids, &at, &gout);
        if (st != ROPEKIT_OK || gst != ROPEKIT_OK) ++bad;
        cur = nxt;
    }
    CHECK(bad == 0, "argument reuse: %d of %d calls failed (%s)", bad, CALLS, ropekit_webgpu_last_error());
    chain_compare(ctx, &t, "argument reuse chain", CALLS);
    printf("argument reuse: %d calls of 1-%d tokens compared bit for bit\n", CALLS, SMAX);
    chain_close(&t);
    ropekit_webgpu_destroy(ctx);
}

/* A buffer destroyed (wgpuBufferDestroy) after calls have used it, then passed again: the call
 * (unbatched) or the submission of its batch returns ROPEKIT_ERROR_DEVICE naming the destroyed
 * buffer, nothing is submitted, and the context keeps working. Before 2026-12-02 a call on
 * buffers whose bind group the context had kept from an earlier call reached the submission,
 * where wgpu-native aborted the process. Each of x, y and cos_cache in turn. */
static void run_destroyed_buffers(ropekit_webgpu_backend backend) {
    enum { S = 4, N = 2, H = 8, P = 16 };
    float x[S * N * H], y[S * N * H], ref[S * N * H], c[P * H / 2], sn[P * H / 2];
    for (int i = 0; i < S * N * H; ++i) x[i] = (float)((i * 5) % 23) / 4.0f - 2.0f;
    for (int i = 0; i < P * H / 2; ++i) c[i] = cosf((float)i * 0.3f), sn[i] = sinf((float)i * 0.3f);
    int64_t pos[S] = {3, 1, 4, 1}, xs[3] = {1, S, N * H}, tsh[2] = {P, H / 2}, ps[2] = {1, S};
    ropekit_tensor hx = ropekit_tensor_contiguous(x, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hr = ropekit_tensor_contiguous(ref, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 2, tsh);
    ropekit_tensor hs = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 2, tsh);
    ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
    ropekit_rotary_embedding_attrs at = {0, 0, N, 0};
    CHECK(ropekit_rotary_embedding(&hx, &hc, &hs, &ids, &at, &hr) == ROPEKIT_OK, "CPU reference");
    for (int batch = 0; batch < 2; ++batch)
        for (int which = 0; which < 3; ++which) {
            ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
            ropekit_webgpu *ctx = open_context(&opt);
            if (!ctx) return;
            WGPUBuffer b[3] = {upload(ctx, &hx), upload(ctx, &hx), upload(ctx, &hc)};
            WGPUBuffer bs = upload(ctx, &hs), fresh = upload(ctx, &hx);
            ropekit_webgpu_tensor gx = gview(b[0], &hx), gy = gview(b[1], &hx), gc = gview(b[2], &hc);
            ropekit_webgpu_tensor gs = gview(bs, &hs), gf = gview(fresh, &hx);
            int ok = batch ? ropekit_webgpu_set_batch(ctx, 4) == ROPEKIT_OK : 1;
            for (int k = 0; k < 3; ++k) /* the same buffers and ranges each time */
                ok = ok && ropekit_webgpu_rotary_embedding(ctx, &gx, &gc, &gs, &ids, &at, &gy) == ROPEKIT_OK;
            ok = ok && ropekit_webgpu_flush(ctx) == ROPEKIT_OK;
            CHECK(ok, "destroyed buffers: calls before the destroy (%s)", ropekit_webgpu_last_error());
            wgpuBufferDestroy(b[which]);
            ropekit_status st = ropekit_webgpu_rotary_embedding(ctx, &gx, &gc, &gs, &ids, &at, &gy);
            if (batch) {
                CHECK(st == ROPEKIT_OK, "destroyed buffers: a recorded call is answered by the "
                      "submission (%d: %s)", (int)st, ropekit_webgpu_last_error());
                st = ropekit_webgpu_flush(ctx);
            }
            CHECK(st == ROPEKIT_ERROR_DEVICE && strstr(ropekit_webgpu_last_error(), "destroyed"),
                  "destroyed buffers (%s, batch %d): want ROPEKIT_ERROR_DEVICE naming the destroyed "
                  "buffer, got %d (%s)", which == 0 ? "x" : which == 1 ? "y" : "cos_cache", batch,
                  (int)st, ropekit_webgpu_last_error());
            /* the context still works: the same call on live buffers */
            ropekit_webgpu_tensor gx2 = which == 0 ? gf : gx, gy2 = which == 1 ? gf : gy;
            WGPUBuffer cb = which == 2 ? upload(ctx, &hc) : NULL;
            ropekit_webgpu_tensor gc2 = cb ? gview(cb, &hc) : gc;
            if (which == 0 && ropekit_webgpu_write(ctx, fresh, 0, x, sizeof x) != ROPEKIT_OK) ok = 0;
            st = ropekit_webgpu_rotary_embedding(ctx, &gx2, &gc2, &gs, &ids, &at, &gy2);
            memset(y, 0, sizeof y);
            ropekit_status rs = ropekit_webgpu_read(ctx, which == 1 ? fresh : b[1], 0, y, sizeof y);
            CHECK(ok && st == ROPEKIT_OK && rs == ROPEKIT_OK && memcmp(y, ref, sizeof y) == 0,
                  "destroyed buffers (%d, batch %d): the next call on live buffers (%s)", which,
                  batch, ropekit_webgpu_last_error());
            for (int i = 0; i < 3; ++i) wgpuBufferRelease(b[i]);
            wgpuBufferRelease(bs), wgpuBufferRelease(fresh);
            if (cb) wgpuBufferRelease(cb);
            ropekit_webgpu_destroy(ctx);
        }
}

/* The pipeline kept for repeated rotary calls (ctx->rot_pipe: a call with the last call's variant
 * signature takes it without a cache lookup) evicted by other operators' pipelines: with a cache
 * of one pipeline (ROPEKIT_WEBGPU_PIPELINE_CACHE=1), a rotary decode call, two regroup calls
 * (each evicts the pipeline before it: the rotary one is released), then the rotary call again
 * with the same signature. It must build its pipeline again and give the CPU's bits; keeping the
 * released pipeline (the reset in rk_wg_pipeline removed) used freed memory: checked 2026-12-02
 * on lavapipe, the call failed or the process aborted. A rotary call evicted by a rotary call of
 * another signature and the regroup calls are compared too. */
static void run_pipeline_eviction(ropekit_webgpu_backend backend) {
    const char *old = getenv("ROPEKIT_WEBGPU_PIPELINE_CACHE");
    char saved[32] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    setenv("ROPEKIT_WEBGPU_PIPELINE_CACHE", "1", 1);
    ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = open_context(&opt);
    if (old) setenv("ROPEKIT_WEBGPU_PIPELINE_CACHE", saved, 1);
    else unsetenv("ROPEKIT_WEBGPU_PIPELINE_CACHE");
    if (!ctx) return;
    enum { B = 4, N = 4, H = 16, P = 32, F = N * H };
    float x[B * N * H], y[B * N * H], ref[B * N * H], c[P * H / 2], sn[P * H / 2];
    for (int i = 0; i < P * H / 2; ++i) c[i] = cosf((float)i * 0.23f), sn[i] = sinf((float)i * 0.23f);
    for (int i = 0; i < B * N * H; ++i) x[i] = (float)((i * 7) % 31) / 8.0f - 2.0f;
    uint16_t xh[B * F], yh[B * F], refh[B * F];
    for (int i = 0; i < B * F; ++i) xh[i] = (uint16_t)(0x3800u + (unsigned)(i * 37 % 1024)); /* float16 in [0.5, 1) */
    int64_t pos[B] = {5, 17, 30, 2}, xs[3] = {B, 1, N * H}, tsh[2] = {P, H / 2}, ps[2] = {B, 1};
    int64_t rs[2] = {B, F}, os[3] = {1, B, F};
    ropekit_tensor hx = ropekit_tensor_contiguous(x, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hr = ropekit_tensor_contiguous(ref, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 2, tsh);
    ropekit_tensor hs = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 2, tsh);
    ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
    ropekit_tensor gin32 = ropekit_tensor_contiguous(x, ROPEKIT_FLOAT32, 2, rs);
    ropekit_tensor gout32 = ropekit_tensor_contiguous(ref, ROPEKIT_FLOAT32, 3, os);
    ropekit_tensor gin16 = ropekit_tensor_contiguous(xh, ROPEKIT_FLOAT16, 2, rs);
    ropekit_tensor gout16 = ropekit_tensor_contiguous(refh, ROPEKIT_FLOAT16, 3, os);
    ropekit_rotary_embedding_attrs at = {0, 0, N, 0}, il = {1, 0, N, 0};
    ropekit_inverse_rotary_regroup_attrs ra = {N, H, 0, 1};
    WGPUBuffer bx = upload(ctx, &hx), by = upload(ctx, &hx), bc = upload(ctx, &hc), bs = upload(ctx, &hs);
    WGPUBuffer bxh = upload_bytes(ctx, xh, sizeof xh), byh = upload_bytes(ctx, xh, sizeof xh);
    ropekit_webgpu_tensor gx = gview(bx, &hx), gy = gview(by, &hx), gc = gview(bc, &hc), gs = gview(bs, &hs);
    ropekit_webgpu_tensor gi32 = gview(bx, &gin32), go32 = gview(by, &gout32);
    ropekit_webgpu_tensor gi16 = gview(bxh, &gin16), go16 = gview(byh, &gout16);
    int bad = 0, steps = 0;
    /* 0 rotary, 1 regroup f32, 2 regroup f16, 3 rotary again (its pipeline was evicted), 4 rotary
     * interleaved (evicts it), 5 rotary half-split again */
    static const int seq[] = {0, 0, 1, 2, 0, 0, 3, 0, 1, 0};
    for (size_t k = 0; k < sizeof seq / sizeof seq[0]; ++k, ++steps) {
        ropekit_status st, cst;
        const int op = seq[k];
        if (op == 1) {
            st = ropekit_webgpu_inverse_rotary_regroup(ctx, &gi32, NULL, NULL, &ra, &go32);
            cst = ropekit_inverse_rotary_regroup(&gin32, NULL, NULL, &ra, &gout32);
        } else if (op == 2) {
            st = ropekit_webgpu_inverse_rotary_regroup(ctx, &gi16, NULL, NULL, &ra, &go16);
            cst = ropekit_inverse_rotary_regroup(&gin16, NULL, NULL, &ra, &gout16);
        } else {
            const ropekit_rotary_embedding_attrs *a = op == 3 ? &il : &at;
            st = ropekit_webgpu_rotary_embedding(ctx, &gx, &gc, &gs, &ids, a, &gy);
            cst = ropekit_rotary_embedding(&hx, &hc, &hs, &ids, a, &hr);
        }
        ropekit_status rs_ = st == ROPEKIT_OK ? ropekit_webgpu_wait(ctx) : st;
        if (rs_ == ROPEKIT_OK && op == 2) rs_ = ropekit_webgpu_read(ctx, byh, 0, yh, sizeof yh);
        else if (rs_ == ROPEKIT_OK) rs_ = ropekit_webgpu_read(ctx, by, 0, y, sizeof y);
        const int same = op == 2 ? memcmp(yh, refh, sizeof yh) == 0 : memcmp(y, ref, sizeof y) == 0;
        if (st != ROPEKIT_OK || cst != ROPEKIT_OK || rs_ != ROPEKIT_OK || !same) {
            ++bad;
            printf("pipeline eviction: step %zu (op %d): %s\n", k, op,
                   st != ROPEKIT_OK || rs_ != ROPEKIT_OK ? ropekit_webgpu_last_error() : "differs from the CPU");
        }
    }
    CHECK(bad == 0, "pipeline eviction: %d of %d calls failed or differ from the CPU", bad, steps);
    wgpuBufferRelease(bx), wgpuBufferRelease(by), wgpuBufferRelease(bc), wgpuBufferRelease(bs);
    wgpuBufferRelease(bxh), wgpuBufferRelease(byh);
    ropekit_webgpu_destroy(ctx);
}

/* Edge values (issue 16, item 4: bit for bit with the CPU on every adapter, whatever it does
 * with subnormals, which WGSL lets an implementation flush (NVIDIA's Vulkan driver flushes
 * float32 ones), and with fused multiply-adds, which it may contract a*b + c*d into): x and tables
 * drawn from value classes — moderate, subnormals of the type, the smallest and largest normal
 * exponents, magnitudes whose products leave float32's normal range (below 2^-126, above its
 * largest finite value), zeros, infinities and NaNs — for every dtype combination (x float32,
 * float16, bfloat16; tables of x's type and float32), both rotary kernels (vector: contiguous
 * heads, element: H = 10), half-split and interleaved, MS RotaryEmbedding with scale 1.5 (the
 * scaled tables), MRoPE, QKNormRotaryEmbedding (row kernel, fp8 on and off) and the regroup, in
 * the default, shader-f16-off and shader-f64-off configurations. A NaN matches any NaN. The
 * premises are checked: the data reach subnormal, infinite and NaN results, and (16-bit x and
 * tables, float arithmetic) products below 2^-126 and above float32's range. */
static uint32_t edge_seed = 31337u;

static uint32_t edge_rand(void) {
    edge_seed = edge_seed * 1664525u + 1013904223u;
    return edge_seed >> 8;
}

/* bits of a random value of dtype dt from the classes above */
static uint32_t edge_bits(ropekit_dtype dt) {
    const uint32_t r = edge_rand() % 100u, m = edge_rand(), sg = edge_rand() & 1u;
    const int f16 = dt == ROPEKIT_FLOAT16;
    const int mb = dt == ROPEKIT_FLOAT32 ? 23 : f16 ? 10 : 7, eb = f16 ? 5 : 8, bias = f16 ? 15 : 127;
    const uint32_t mant = m & ((1u << mb) - 1u), emax = (1u << eb) - 1u;
    int e; /* unbiased exponent of a normal value */
    if (r < 30) e = (int)(m % 9u) - 4;                               /* moderate */
    else if (r < 40) return (sg << (mb + eb)) | (mant ? mant : 1u); /* subnormal */
    else if (r < 43) return sg << (mb + eb);                        /* zero */
    else if (r < 53) e = 1 - bias + (int)(m % 3u);                   /* smallest normal */
    else if (r < 63) e = bias - (int)(m % 3u);                       /* largest finite */
    else if (r < 80) e = f16 ? -10 + (int)(m % 6u) : -80 + (int)(m % 40u); /* products tiny */
    else if (r < 96) e = f16 ? 8 + (int)(m % 5u) : 50 + (int)(m % 40u);    /* products huge */
    else if (r < 98) return (sg << (mb + eb)) | (emax << mb);              /* infinity */
    else return (sg << (mb + eb)) | (emax << mb) | (1u << (mb - 1)) | (mant >> 1); /* NaN */
    return (sg << (mb + eb)) | ((uint32_t)(e + bias) << mb) | mant;
}

static void edge_fill(void *p, ropekit_dtype dt, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const uint32_t b = edge_bits(dt);
        if (dt == ROPEKIT_FLOAT32) memcpy((char *)p + 4 * i, &b, 4);
        else ((uint16_t *)p)[i] = (uint16_t)b;
    }
}

/* element i of a host tensor's data as a float (the CPU's exact widening) */
static float edge_f(const void *p, ropekit_dtype dt, size_t i) { return to_f32(p, dt, i); }

static int edge_is_nan(const void *p, ropekit_dtype dt, size_t i) {
    return qk_is_nan((const unsigned char *)p + i * ropekit_dtype_size(dt), dt);
}

/* elements of n that differ (a NaN matches any NaN); *first: the first one */
static size_t edge_diff(const void *gpu, const void *cpu, ropekit_dtype dt, size_t n, size_t *first) {
    const size_t es = ropekit_dtype_size(dt);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i)
        if (memcmp((const char *)gpu + i * es, (const char *)cpu + i * es, es) != 0 &&
            !(edge_is_nan(gpu, dt, i) && edge_is_nan(cpu, dt, i)) && !bad++)
            *first = i;
    return bad;
}

typedef struct edge_stats {
    size_t out_sub[3], out_inf[3], out_nan[3]; /* CPU results by x dtype (0 f32, 1 f16, 2 bf16) */
    size_t prod_small, prod_big;               /* 16-bit x and tables: products out of range */
} edge_stats;

static int edge_di(ropekit_dtype dt) { return dt == ROPEKIT_FLOAT32 ? 0 : dt == ROPEKIT_FLOAT16 ? 1 : 2; }

static void edge_count(edge_stats *st, const void *y, ropekit_dtype dt, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const float v = edge_f(y, dt, i);
        const double a = fabs((double)v);
        const double minn = dt == ROPEKIT_FLOAT16 ? 0x1p-14 : 0x1p-126;
        st->out_sub[edge_di(dt)] += a > 0 && a < minn;
        st->out_inf[edge_di(dt)] += isinf(v) != 0;
        st->out_nan[edge_di(dt)] += isnan(v) != 0;
    }
}

/* compare, count, check one call */
static void edge_check(ropekit_status st, ropekit_webgpu *ctx, const char *what, const ropekit_tensor *gpu,
                       const ropekit_tensor *cpu, int n_out, edge_stats *es) {
    const char *var = ropekit_webgpu_last_variant(ctx);
    CHECK(st == ROPEKIT_OK, "edge values %s: %s (%s)", what, ropekit_status_str(st), ropekit_webgpu_last_error());
    if (st != ROPEKIT_OK) return;
    size_t bad = 0, first = 0, n0 = 0;
    int fo = 0;
    for (int o = 0; o < n_out; ++o) {
        const size_t n = rk_tensor_nbytes(&cpu[o]) / ropekit_dtype_size(cpu[o].dtype);
        size_t f = 0, b = edge_diff(gpu[o].data, cpu[o].data, cpu[o].dtype, n, &f);
        if (b && !bad) first = f, fo = o;
        bad += b, n0 += n;
        edge_count(es, cpu[o].data, cpu[o].dtype, n);
    }
    uint32_t gb = 0, cb = 0;
    if (bad) {
        const size_t e = ropekit_dtype_size(cpu[fo].dtype);
        memcpy(&gb, (const char *)gpu[fo].data + first * e, e);
        memcpy(&cb, (const char *)cpu[fo].data + first * e, e);
    }
    CHECK(bad == 0, "edge values %s (%s): %zu of %zu elements differ from the CPU, first output %d element %zu: gpu 0x%x cpu 0x%x",
          what, var, bad, n0, fo, first, (unsigned)gb, (unsigned)cb);
}

/* products c*a of 16-bit x and tables outside float32's normal range (the premise) */
static void edge_products(edge_stats *es, const void *x, const void *t, ropekit_dtype dt, size_t nx, size_t nt) {
    for (size_t i = 0; i < nx; i += 7)
        for (size_t k = 0; k < nt; k += 5) {
            const double p = fabs((double)edge_f(x, dt, i) * (double)edge_f(t, dt, k));
            if (isnan(p) || isinf(p) || p == 0) continue;
            es->prod_small += p < 0x1p-126;
            es->prod_big += p > (double)FLT_MAX;
        }
}

static void run_edge_values(ropekit_webgpu_backend backend, int integer_paths) {
    const ropekit_webgpu_options opts[3] = {{backend, 0, 0, 0, 0, 0}, {backend, 1, 0, 0, 0, 0},
                                            {backend, 0, 1, 0, 0, 0}};
    /* integer_paths: ROPEKIT_WEBGPU_INTEGER_PATHS=1 for these contexts (every element on the
     * integer paths, which an adapter that does not flush subnormals otherwise reaches only for
     * the edge elements) */
    if (integer_paths) setenv("ROPEKIT_WEBGPU_INTEGER_PATHS", "1", 1);
    static const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    edge_stats es;
    memset(&es, 0, sizeof es);
    int runs = 0, vec = 0, elem = 0;
    /* ROPEKIT_WEBGPU_EDGE_OPTS=digits: only those of the three configurations (device rounds) */
    const char *eo = getenv("ROPEKIT_WEBGPU_EDGE_OPTS");
    for (int o = 0; o < 3; ++o) {
        if (eo && *eo && !strchr(eo, '0' + o)) continue;
        ropekit_webgpu *ctx = shared_context(&opts[o]);
        if (!ctx) break;
        for (int d = 0; d < 3; ++d)
            for (int t32 = 0; t32 <= (d != 0); ++t32) {
                const ropekit_dtype dt = dts[d], tdt = t32 ? ROPEKIT_FLOAT32 : dt;
                const size_t es_ = ropekit_dtype_size(dt), ts_ = ropekit_dtype_size(tdt);
                char what[160];
                /* RotaryEmbedding, vector (H 64, R 48) and element (H 10, R 8) kernels */
                for (int lay = 0; lay < 2; ++lay)
                    for (int il = 0; il <= 1; ++il) {
                        const int64_t S = 3, N = lay ? 3 : 2, H = lay ? 10 : 64, R = lay ? 8 : 48, P = 5;
                        const size_t n = (size_t)(S * N * H), nt = (size_t)(P * R / 2);
                        void *x = malloc(n * es_), *yr = malloc(n * es_), *yg = malloc(n * es_);
                        void *c = malloc(nt * ts_), *sn = malloc(nt * ts_);
                        edge_fill(x, dt, n), edge_fill(c, tdt, nt), edge_fill(sn, tdt, nt);
                        if (!t32) edge_products(&es, x, c, dt, n, nt);
                        int64_t xs[3] = {1, S, N * H}, tsh[2] = {P, R / 2}, ps[2] = {1, S}, pos[3] = {4, 0, 2};
                        ropekit_tensor hx = ropekit_tensor_contiguous(x, dt, 3, xs);
                        ropekit_tensor hy = ropekit_tensor_contiguous(yr, dt, 3, xs);
                        ropekit_tensor hg = ropekit_tensor_contiguous(yg, dt, 3, xs);
                        ropekit_tensor hc = ropekit_tensor_contiguous(c, tdt, 2, tsh);
                        ropekit_tensor hs = ropekit_tensor_contiguous(sn, tdt, 2, tsh);
                        ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
                        rk_case cs = make_case(RK_OP_ROTARY_EMBEDDING, (const ropekit_tensor *[]){&hx, &hc, &hs, &ids});
                        cs.attrs.rotary = (ropekit_rotary_embedding_attrs){il, R, N, 0};
                        CHECK(rk_case_run_cpu(&cs, &hy) == ROPEKIT_OK, "cpu: %s", ropekit_last_error());
                        ropekit_status st = run_gpu(ctx, &cs, 0, 0, &hg);
                        snprintf(what, sizeof what, "rotary x %s tables %s H %d il %d opt %d", ropekit_dtype_name(dt),
                                 ropekit_dtype_name(tdt), (int)H, il, o);
                        edge_check(st, ctx, what, &hg, &hy, 1, &es);
                        if (st == ROPEKIT_OK) {
                            const char *var = ropekit_webgpu_last_variant(ctx);
                            const int v = strstr(var, " vec16 ") != NULL; /* exact32: the element kernel */
                            CHECK(v == (!lay && !strstr(var, " exact32 ")) &&
                                      (strstr(var, " intpaths ") != NULL) == integer_paths,
                                  "edge values %s: variant '%s'", what, var);
                            ++*(v ? &vec : &elem), ++runs;
                        }
                        /* MS RotaryEmbedding with scale 1.5 (offset form), and MRoPE, on the vector layout */
                        if (!lay && !il) {
                            ropekit_ms_rotary_embedding_attrs ms = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
                            ms.rotary_embedding_dim = R, ms.num_heads = N, ms.scale = 1.5f;
                            int64_t off = 1, os[1] = {1};
                            ropekit_tensor ho = ropekit_tensor_contiguous(&off, ROPEKIT_INT64, 1, os);
                            rk_case cm = make_case(RK_OP_MS_ROTARY_EMBEDDING, (const ropekit_tensor *[]){&hx, &ho, &hc, &hs});
                            cm.attrs.ms = ms;
                            CHECK(rk_case_run_cpu(&cm, &hy) == ROPEKIT_OK, "cpu: %s", ropekit_last_error());
                            snprintf(what, sizeof what, "ms scale 1.5 x %s tables %s opt %d", ropekit_dtype_name(dt),
                                     ropekit_dtype_name(tdt), o);
                            edge_check(run_gpu(ctx, &cm, 0, 0, &hg), ctx, what, &hg, &hy, 1, &es);
                            ropekit_mrotary_embedding_attrs mr = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
                            mr.mrope_section[0] = 8, mr.mrope_section[1] = 8, mr.mrope_section[2] = 8;
                            mr.rotary_embedding_dim = R, mr.num_heads = N;
                            int64_t mp[9] = {0, 1, 2, 3, 4, 0, 2, 4, 1}, mps[3] = {3, 1, S};
                            ropekit_tensor hm = ropekit_tensor_contiguous(mp, ROPEKIT_INT64, 3, mps);
                            rk_case cr = make_case(RK_OP_MROTARY_EMBEDDING, (const ropekit_tensor *[]){&hx, &hm, &hc, &hs});
                            cr.attrs.mrope = mr;
                            CHECK(rk_case_run_cpu(&cr, &hy) == ROPEKIT_OK, "cpu: %s", ropekit_last_error());
                            snprintf(what, sizeof what, "mrope x %s tables %s opt %d", ropekit_dtype_name(dt),
                                     ropekit_dtype_name(tdt), o);
                            edge_check(run_gpu(ctx, &cr, 0, 0, &hg), ctx, what, &hg, &hy, 1, &es);
                        }
                        free(x), free(yr), free(yg), free(c), free(sn);
                    }
                printf("edge values: x %s tables %s configuration %d: rotary, MS, MRoPE done (%d failed so far)\n",
                       ropekit_dtype_name(dt), ropekit_dtype_name(tdt), o, g_failed);
                if (t32) continue;
                /* QKNormRotaryEmbedding (float32 weight and tables) and the regroup, per dtype */
                for (int fp8 = 0; fp8 <= 1; ++fp8) {
                    const int64_t S = 2, nh = 2, hd = 80, rope = 16;
                    const size_t nq = (size_t)(S * nh * hd), nkv = (size_t)(S * hd), nt = (size_t)(S * rope);
                    void *q = malloc(nq * es_), *kv = malloc(nkv * es_), *out = malloc((nq + nkv) * es_ * 2);
                    float w[80], cs_[32], sn_[32];
                    edge_fill(q, dt, nq), edge_fill(kv, dt, nkv);
                    edge_fill(w, ROPEKIT_FLOAT32, 80), edge_fill(cs_, ROPEKIT_FLOAT32, nt), edge_fill(sn_, ROPEKIT_FLOAT32, nt);
                    int64_t qsh[3] = {1, S, nh * hd}, kvsh[3] = {1, S, hd}, wsh[1] = {hd}, tsh[3] = {1, S, rope},
                            qosh[4] = {1, S, nh, hd};
                    ropekit_tensor hq = ropekit_tensor_contiguous(q, dt, 3, qsh), hkv = ropekit_tensor_contiguous(kv, dt, 3, kvsh);
                    ropekit_tensor hw = ropekit_tensor_contiguous(w, ROPEKIT_FLOAT32, 1, wsh);
                    ropekit_tensor hc = ropekit_tensor_contiguous(cs_, ROPEKIT_FLOAT32, 3, tsh);
                    ropekit_tensor hs = ropekit_tensor_contiguous(sn_, ROPEKIT_FLOAT32, 3, tsh);
                    char *ob = out;
                    ropekit_tensor cpu[2] = {ropekit_tensor_contiguous(ob, dt, 4, qosh),
                                             ropekit_tensor_contiguous(ob + nq * es_, dt, 3, kvsh)};
                    ropekit_tensor gpu[2] = {ropekit_tensor_contiguous(ob + (nq + nkv) * es_, dt, 4, qosh),
                                             ropekit_tensor_contiguous(ob + (2 * nq + nkv) * es_, dt, 3, kvsh)};
                    rk_case cq = make_case(RK_OP_QKNORM_ROTARY_EMBEDDING, (const ropekit_tensor *[]){&hq, &hkv, &hw, &hc, &hs});
                    cq.attrs.qknorm = (ropekit_qknorm_rotary_embedding_attrs){nh, hd, rope, 1e-6f, fp8};
                    CHECK(rk_case_run_cpu(&cq, cpu) == ROPEKIT_OK, "cpu: %s", ropekit_last_error());
                    snprintf(what, sizeof what, "qknorm %s fp8 %d opt %d", ropekit_dtype_name(dt), fp8, o);
                    edge_check(run_gpu(ctx, &cq, 0, 0, gpu), ctx, what, gpu, cpu, 2, &es);
                    if (fp8) { /* the regroup of q's rows: 2 groups, tails of 16 rotated back */
                        int64_t gsh[3] = {2, S, nh * hd / 2}, rsh[2] = {S, rope};
                        ropekit_tensor hx = ropekit_tensor_contiguous(q, dt, 2, (int64_t[2]){S, nh * hd});
                        ropekit_tensor rc = ropekit_tensor_contiguous(cs_, ROPEKIT_FLOAT32, 2, rsh);
                        ropekit_tensor rs = ropekit_tensor_contiguous(sn_, ROPEKIT_FLOAT32, 2, rsh);
                        ropekit_tensor rcpu = ropekit_tensor_contiguous(ob, dt, 3, gsh);
                        ropekit_tensor rgpu = ropekit_tensor_contiguous(ob + (nq + nkv) * es_, dt, 3, gsh);
                        rk_case cg = make_case(RK_OP_INVERSE_ROTARY_REGROUP, (const ropekit_tensor *[]){&hx, &rc, &rs});
                        cg.attrs.regroup = (ropekit_inverse_rotary_regroup_attrs){nh, hd, rope, 2};
                        CHECK(rk_case_run_cpu(&cg, &rcpu) == ROPEKIT_OK, "cpu: %s", ropekit_last_error());
                        snprintf(what, sizeof what, "regroup %s opt %d", ropekit_dtype_name(dt), o);
                        edge_check(run_gpu(ctx, &cg, 0, 0, &rgpu), ctx, what, &rgpu, &rcpu, 1, &es);
                    }
                    free(q), free(kv), free(out);
                }
            }
        close_context(ctx);
    }
    if (integer_paths) unsetenv("ROPEKIT_WEBGPU_INTEGER_PATHS");
    printf("edge values%s: %d rotary runs (vector %d, element %d); CPU results subnormal/inf/NaN: "
           "float32 %zu/%zu/%zu, float16 %zu/%zu/%zu, bfloat16 %zu/%zu/%zu; 16-bit products below "
           "2^-126 %zu, above FLT_MAX %zu\n", integer_paths ? " (integer paths)" : "", runs, vec, elem, es.out_sub[0], es.out_inf[0],
           es.out_nan[0], es.out_sub[1], es.out_inf[1], es.out_nan[1], es.out_sub[2], es.out_inf[2],
           es.out_nan[2], es.prod_small, es.prod_big);
    for (int d = 0; d < 3; ++d)
        CHECK(es.out_sub[d] > 0 && es.out_inf[d] > 0 && es.out_nan[d] > 0,
              "edge values premise: %s results reach subnormal, inf and NaN", ropekit_dtype_name(dts[d]));
    CHECK(es.prod_small > 0 && es.prod_big > 0, "edge values premise: 16-bit products out of float32's range");
}

/* float16 x with float16 tables (the vector kernel multiplies them with no per-operand check:
 * arith_narrow.wgsl): every float16 bit pattern as x (65536 values: subnormals, zeros,
 * infinities, NaNs included) against tables of edge float16 values — subnormals (2^-24 and the
 * largest), the smallest normals, 1 and its neighbours, the largest finite value, zeros of both
 * signs — so that products reach 2^-48 and sums reach 2^33 and cancel exactly; one table row
 * holds an infinity and a NaN (the slow path). Half-split and interleaved, plus MS
 * RotaryEmbedding with scale 1.5 (tables rounded to float16 after the scaling, up to infinity);
 * bit for bit with the CPU (a NaN matches any NaN). */
static void run_f16_products(ropekit_webgpu_backend backend) {
    enum { S = 64, N = 8, H = 128, P = 16 };
    static const uint16_t tv[] = {0x0001, 0x8001, 0x0002, 0x03ff, 0x83ff, 0x0200, 0x0400, 0x8400, 0x0401,
                                  0x3c00, 0xbc00, 0x3bff, 0x3c01, 0x7bff, 0xfbff, 0x7bfe, 0x0000, 0x8000,
                                  0x3555, 0xb7ff, 0x5bff, 0x1400, 0x2001, 0x0bff};
    const size_t nt = (size_t)P * (H / 2), n = (size_t)S * N * H;
    uint16_t *x = malloc(n * 2), *yr = malloc(n * 2), *yg = malloc(n * 2), *c = malloc(nt * 2), *sn = malloc(nt * 2);
    uint32_t seed = 77u;
    for (size_t i = 0; i < n; ++i) x[i] = (uint16_t)((i * 40503u) & 0xffffu); /* a permutation of all patterns */
    for (size_t i = 0; i < nt; ++i) {
        seed = seed * 1664525u + 1013904223u;
        c[i] = tv[(seed >> 8) % (sizeof tv / sizeof tv[0])];
        sn[i] = tv[(seed >> 20) % (sizeof tv / sizeof tv[0])];
    }
    c[(P - 1) * (H / 2) + 3] = 0x7c00, sn[(P - 1) * (H / 2) + 9] = 0x7e01; /* row P-1: inf, NaN */
    int64_t xs[3] = {1, S, N * H}, ts[2] = {P, H / 2}, ps[2] = {1, S}, pos[S];
    for (int i = 0; i < S; ++i) pos[i] = (i * 5) % P;
    ropekit_tensor hx = ropekit_tensor_contiguous(x, ROPEKIT_FLOAT16, 3, xs);
    ropekit_tensor hy = ropekit_tensor_contiguous(yr, ROPEKIT_FLOAT16, 3, xs);
    ropekit_tensor hg = ropekit_tensor_contiguous(yg, ROPEKIT_FLOAT16, 3, xs);
    ropekit_tensor hc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT16, 2, ts);
    ropekit_tensor hs = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT16, 2, ts);
    ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
    ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = open_context(&opt); /* its own: the shared one may be full (256 pipelines) in a full run */
    size_t sub = 0, inf = 0;
    /* the offset input of the k = 2 case: lives as long as the case (the case points to it) */
    int64_t off = 0, os[1] = {1};
    ropekit_tensor ho = ropekit_tensor_contiguous(&off, ROPEKIT_INT64, 1, os);
    for (int k = 0; ctx && k < 3; ++k) {
        rk_case cs;
        if (k < 2) {
            cs = make_case(RK_OP_ROTARY_EMBEDDING, (const ropekit_tensor *[]){&hx, &hc, &hs, &ids});
            cs.attrs.rotary = (ropekit_rotary_embedding_attrs){k, 0, N, 0};
        } else {
            /* offset form: token s uses row s, so only S <= P rows fit: a 16-token x */
            hx.shape[1] = hy.shape[1] = hg.shape[1] = P;
            cs = make_case(RK_OP_MS_ROTARY_EMBEDDING, (const ropekit_tensor *[]){&hx, &ho, &hc, &hs});
            ropekit_ms_rotary_embedding_attrs ms = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
            ms.num_heads = N, ms.scale = 1.5f;
            cs.attrs.ms = ms;
        }
        CHECK(rk_case_run_cpu(&cs, &hy) == ROPEKIT_OK, "f16 products: cpu: %s", ropekit_last_error());
        memset(yg, 0xa5, n * 2);
        ropekit_status st = run_gpu(ctx, &cs, 0, 0, &hg);
        const char *var = ropekit_webgpu_last_variant(ctx);
        CHECK(st == ROPEKIT_OK, "f16 products %d: %s", k, ropekit_webgpu_last_error());
        if (st != ROPEKIT_OK) continue;
        CHECK(strstr(var, " vec16 ") && strstr(var, " narrow "), "f16 products %d: variant '%s'", k, var);
        const size_t m = rk_tensor_nbytes(&hy) / 2;
        size_t first = 0, bad = edge_diff(yg, yr, ROPEKIT_FLOAT16, m, &first);
        CHECK(bad == 0, "f16 products %d (%s): %zu of %zu differ, first %zu: gpu 0x%04x cpu 0x%04x", k, var, bad, m,
              first, bad ? yg[first] : 0, bad ? yr[first] : 0);
        for (size_t i = 0; i < m; ++i) {
            sub += (yr[i] & 0x7c00) == 0 && (yr[i] & 0x3ff) != 0;
            inf += (yr[i] & 0x7fff) == 0x7c00;
        }
    }
    printf("f16 products: %zu subnormal and %zu infinite float16 results compared\n", sub, inf);
    CHECK(!ctx || (sub > 0 && inf > 0), "f16 products premise: subnormal and infinite results");
    if (ctx) ropekit_webgpu_destroy(ctx);
    free(x), free(yr), free(yg), free(c), free(sn);
}

/* The vector kernel with 2 heads per invocation (grids of at least RK_WG_ROTARY_SMALL_GRID
 * one-head invocations, 2^20: float16 x and tables, narrow; float32, wide64), half-split and
 * interleaved, x with a few edge values (subnormal, infinite, NaN, tiny and huge: units redone
 * exactly with both heads of the group) and pairs of subnormals among ordinary ones; bit for bit
 * with the CPU. */
static uint16_t heads2_h(float v) { /* float16 bits of a zero or a normal float16 value */
    uint32_t u;
    memcpy(&u, &v, 4);
    return v == 0.0f ? 0 : (uint16_t)(((u >> 16) & 0x8000u) | ((((u >> 23) & 255u) - 112u) << 10) | ((u >> 13) & 0x3ffu));
}
static void run_vector_heads2(ropekit_webgpu_backend backend) {
    enum { N = 32, H = 128, P = 64 };
    ropekit_webgpu_options opt = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = open_context(&opt); /* its own: the shared one may be full (256 pipelines) in a full run */
    if (!ctx) return;
    uint32_t seed = 99u;
    for (int f32 = 0; f32 <= 1; ++f32)
        for (int il = 0; il <= 1; ++il) {
            const ropekit_dtype dt = f32 ? ROPEKIT_FLOAT32 : ROPEKIT_FLOAT16;
            const int64_t ve = f32 ? 4 : 8, S = (1 << 20) / (N * (il ? H : H / 2) / ve);
            const size_t n = (size_t)(S * N * H), es = ropekit_dtype_size(dt), nt = (size_t)P * (H / 2);
            unsigned char *x = malloc(n * es), *yr = malloc(n * es), *yg = malloc(n * es);
            unsigned char *c = malloc(nt * es), *sn = malloc(nt * es);
            int64_t *pos = malloc((size_t)S * 8);
            for (size_t i = 0; i < n; ++i) {
                seed = seed * 1664525u + 1013904223u;
                const int edge = (seed >> 8) % 4096u == 0;
                const uint32_t b = edge ? edge_bits(dt) : 0;
                const float v = (float)((int)(seed >> 20) - 2048) / 256.0f;
                if (f32) memcpy(x + 4 * i, edge ? (const void *)&b : (const void *)&v, 4);
                else ((uint16_t *)x)[i] = edge ? (uint16_t)b : heads2_h(v); /* 12 bits: exact */
            }
            /* pairs of subnormals (an element and its rotation partner): results below the normal
             * range, which an adapter that flushes (the H200's float32) gets wrong on the fast
             * path, so a unit not redone shows */
            for (size_t i = 0; i < n; i += 1499) {
                const size_t k = i % H, j = il ? (i ^ 1u) : k < H / 2 ? i + H / 2 : i - H / 2;
                const uint32_t s1 = 1u + (uint32_t)(i % 97u), s2 = 3u + (uint32_t)(i % 89u);
                if (f32) memcpy(x + 4 * i, &s1, 4), memcpy(x + 4 * j, &s2, 4);
                else ((uint16_t *)x)[i] = (uint16_t)s1, ((uint16_t *)x)[j] = (uint16_t)s2;
            }
            for (size_t i = 0; i < nt; ++i) { /* multiples of 2^-10 in [-1, 1]: exact in float16 */
                const float cv = (float)(int)(1024.0f * cosf((float)i * 0.37f)) / 1024.0f;
                const float sv = (float)(int)(1024.0f * sinf((float)i * 0.37f)) / 1024.0f;
                if (f32) memcpy(c + 4 * i, &cv, 4), memcpy(sn + 4 * i, &sv, 4);
                else ((uint16_t *)c)[i] = heads2_h(cv), ((uint16_t *)sn)[i] = heads2_h(sv);
            }
            for (int64_t i = 0; i < S; ++i) pos[i] = (i * 7) % P;
            int64_t xs[3] = {1, S, N * H}, ts[2] = {P, H / 2}, ps[2] = {1, S};
            ropekit_tensor hx = ropekit_tensor_contiguous(x, dt, 3, xs);
            ropekit_tensor hy = ropekit_tensor_contiguous(yr, dt, 3, xs);
            ropekit_tensor hg = ropekit_tensor_contiguous(yg, dt, 3, xs);
            ropekit_tensor hc = ropekit_tensor_contiguous(c, dt, 2, ts);
            ropekit_tensor hs = ropekit_tensor_contiguous(sn, dt, 2, ts);
            ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
            rk_case cs = make_case(RK_OP_ROTARY_EMBEDDING, (const ropekit_tensor *[]){&hx, &hc, &hs, &ids});
            cs.attrs.rotary = (ropekit_rotary_embedding_attrs){il, 0, N, 0};
            CHECK(rk_case_run_cpu(&cs, &hy) == ROPEKIT_OK, "heads2: cpu: %s", ropekit_last_error());
            ropekit_status st = run_gpu(ctx, &cs, 0, 0, &hg);
            const char *var = ropekit_webgpu_last_variant(ctx);
            /* exact32 (no shader-f64: OpenGL ES) takes the element kernel (vector_variant_ok) */
            CHECK(st == ROPEKIT_OK && vector_variant_ok(var, 0) && (strstr(var, " exact32 ") || strstr(var, " hg2 ")),
                  "heads2 %s il %d: %s (variant '%s')",
                  ropekit_dtype_name(dt), il, ropekit_webgpu_last_error(), var);
            if (st == ROPEKIT_OK) {
                size_t first = 0, bad = edge_diff(yg, yr, dt, n, &first);
                CHECK(bad == 0, "heads2 %s il %d (%s): %zu of %zu elements differ from the CPU, first %zu",
                      ropekit_dtype_name(dt), il, var, bad, n, first);
            }
            free(x), free(yr), free(yg), free(c), free(sn), free(pos);
        }
    ropekit_webgpu_destroy(ctx);
}

/* options.workgroup_size: 0 gives the vector rotary kernel workgroups of 128 (the element kernel
 * 256, both capped by the device); an explicit size is used by the vector kernel too (it was
 * capped at 128 whatever was asked). Variant names and results, bit for bit, of a layout whose
 * grid has many workgroups of each size. */
static void run_workgroup_sizes(ropekit_webgpu_backend backend) {
    static const int sizes[4] = {0, 64, 256, 512};
    enum { S = 64, N = 8, H = 64 };
    float x[S * N * H], yr[S * N * H], yg[S * N * H], c[S * H / 2], sn[S * H / 2];
    uint32_t seed = 5u;
    for (int i = 0; i < S * N * H; ++i) x[i] = (float)((int)((seed = seed * 1664525u + 1013904223u) >> 20) - 2048) / 64.0f;
    for (int i = 0; i < S * H / 2; ++i) c[i] = cosf((float)i * 0.01f), sn[i] = sinf((float)i * 0.01f);
    int64_t xs[3] = {1, S, N * H}, ts[2] = {S, H / 2}, ps[2] = {1, S}, pos[S];
    for (int i = 0; i < S; ++i) pos[i] = (i * 7) % S;
    ropekit_tensor hx = ropekit_tensor_contiguous(x, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hy = ropekit_tensor_contiguous(yr, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hg = ropekit_tensor_contiguous(yg, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor hc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 2, ts);
    ropekit_tensor hs = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 2, ts);
    ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, ps);
    rk_case cs = make_case(RK_OP_ROTARY_EMBEDDING, (const ropekit_tensor *[]){&hx, &hc, &hs, &ids});
    cs.attrs.rotary = (ropekit_rotary_embedding_attrs){0, 0, N, 0};
    CHECK(rk_case_run_cpu(&cs, &hy) == ROPEKIT_OK, "cpu: %s", ropekit_last_error());
    for (int k = 0; k < 4; ++k) {
        ropekit_webgpu_options opt = {backend, 0, 0, sizes[k], 0, 0};
        ropekit_webgpu *ctx = shared_context(&opt);
        if (!ctx) return;
        ropekit_status st = run_gpu(ctx, &cs, 0, 0, &hg);
        const char *var = ropekit_webgpu_last_variant(ctx);
        /* the device's limit caps an explicit size (lavapipe and the H200 allow 1024) */
        char want[32];
        snprintf(want, sizeof want, " wg%d ", sizes[k] ? sizes[k] : 128);
        /* exact32 (no shader-f64): the element kernel, the context's size when none is asked */
        const int e32 = strstr(var, " exact32 ") != NULL;
        CHECK(st == ROPEKIT_OK && vector_variant_ok(var, 0) && (strstr(var, want) || (e32 && !sizes[k])),
              "workgroup_size %d: %s, variant '%s' (want%s)", sizes[k], ropekit_webgpu_last_error(), var, want);
        if (st == ROPEKIT_OK)
            CHECK(memcmp(yr, yg, sizeof yr) == 0, "workgroup_size %d: differs from the CPU", sizes[k]);
        close_context(ctx);
    }
}

/* Every WGSL file of every kernel package (build/webgpu-packages/OP/, the same WGSL assembly as
 * the C host: kernels.c) passes WGSL validation (a shader module, no pipeline: fast). A shared
 * WGSL function whose signature changes under one variant's feet fails here, with the
 * validator's message (main's f16_words4 gained an argument and the 16-bit QKNorm row variants
 * failed only when a 16-bit row ran). ROPEKIT_WEBGPU_PACKAGES: the packages elsewhere. */
typedef struct pop_result {
    int done;
    WGPUErrorType type;
    char msg[400];
} pop_result;
static void on_pop_scope(WGPUPopErrorScopeStatus status, WGPUErrorType type, WGPUStringView m,
                         void *u1, void *u2) {
    (void)u2;
    pop_result *r = u1;
    r->type = status == WGPUPopErrorScopeStatus_Success ? type : WGPUErrorType_Unknown;
    size_t n = m.data ? (m.length == WGPU_STRLEN ? strlen(m.data) : m.length) : 0;
    if (n >= sizeof r->msg) n = sizeof r->msg - 1;
    if (n) memcpy(r->msg, m.data, n);
    r->msg[n] = '\0';
    r->done = 1;
}
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)n + 1)) != NULL) {
            if (fread(b, 1, (size_t)n, f) != (size_t)n) {
                free(b);
                b = NULL;
            } else b[n] = '\0';
        }
    }
    fclose(f);
    return b;
}
static void run_package_wgsl(ropekit_webgpu_backend backend) {
    const char *dir = getenv("ROPEKIT_WEBGPU_PACKAGES");
    if (!dir || !*dir) dir = ROPEKIT_PACKAGES_DIR;
    static const char *ops[] = {"rotary_embedding", "ms_rotary_embedding", "mrotary_embedding",
                                "qknorm_rotary_embedding", "inverse_rotary_regroup"};
    ropekit_webgpu_options opt = {backend, 0, 1, 0, 0, 0}; /* the packages' adapter: no f64 */
    ropekit_webgpu *ctx = shared_context(&opt);
    if (!ctx) return;
    WGPUDevice dev = ropekit_webgpu_device(ctx);
    int files = 0, bad = 0;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s/manifest.json", dir, ops[o]);
        char *man = read_text(path);
        CHECK(man != NULL, "package WGSL: cannot read %s (build target webgpu_packages)", path);
        if (!man) continue;
        int in_op = 0;
        for (const char *p = strstr(man, "\"wgsl\""); p; p = strstr(p + 6, "\"wgsl\"")) {
            const char *q = strchr(p + 6, '"'), *e = q ? strchr(q + 1, '"') : NULL;
            if (!q || !e || e - q - 1 <= 0 || e - q - 1 > 200) continue; /* "wgsl": { ... } */
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(e - q - 1), q + 1);
            if (!strstr(name, ".wgsl")) continue;
            snprintf(path, sizeof path, "%s/%s/%s", dir, ops[o], name);
            char *src = read_text(path);
            CHECK(src != NULL, "package WGSL: cannot read %s", path);
            if (!src) continue;
            wgpuDevicePushErrorScope(dev, WGPUErrorFilter_Validation);
            WGPUShaderSourceWGSL wgsl;
            memset(&wgsl, 0, sizeof wgsl);
            wgsl.chain.sType = WGPUSType_ShaderSourceWGSL;
            wgsl.code = (WGPUStringView){src, strlen(src)};
            WGPUShaderModuleDescriptor md = {&wgsl.chain, {name, strlen(name)}};
            WGPUShaderModule mod = wgpuDeviceCreateShaderModule(dev, &md);
            pop_result r;
            memset(&r, 0, sizeof r);
            WGPUPopErrorScopeCallbackInfo cb = {NULL, WGPUCallbackMode_AllowProcessEvents,
                                                on_pop_scope, &r, NULL};
            wgpuDevicePopErrorScope(dev, cb);
            for (int i = 0; i < 100 && !r.done; ++i) ropekit_webgpu_wait(ctx);
            CHECK(r.done && r.type == WGPUErrorType_NoError && mod != NULL,
                  "package WGSL %s/%s: %s", ops[o], name, r.done ? r.msg : "error scope never popped");
            bad += !(r.done && r.type == WGPUErrorType_NoError && mod != NULL);
            if (mod) wgpuShaderModuleRelease(mod);
            free(src);
            ++files, ++in_op;
        }
        CHECK(in_op > 0, "package WGSL: %s lists no WGSL file", ops[o]);
        free(man);
    }
    printf("package WGSL: %d files validated, %d invalid\n", files, bad);
    close_context(ctx);
}

/* ROPEKIT_WEBGPU_TESTS=name[,name...]: only those of the tests after the configurations (device
 * rounds); default all */
static int want_test(const char *name) {
    const char *only = getenv("ROPEKIT_WEBGPU_TESTS");
    if (!only || !*only) return 1;
    char want[64], list[512];
    snprintf(want, sizeof want, ",%s,", name);
    snprintf(list, sizeof list, ",%s,", only);
    if (strstr(list, want)) return 1;
    printf("%s: not in ROPEKIT_WEBGPU_TESTS: not run\n", name);
    return 0;
}

/* ROPEKIT_WEBGPU_SAMPLE: K for every backend, or BACKEND:K[,BACKEND:K...] for the named backends
 * (ROPEKIT_WEBGPU_BACKEND; the others run everything). 0: parsed into *k; -1: malformed. */
static int parse_sample(const char *spec, size_t *k) {
    const char *b = getenv("ROPEKIT_WEBGPU_BACKEND");
    *k = 1;
    for (const char *p = spec;; ++p) {
        const char *comma = strchr(p, ','), *stop = comma ? comma : p + strlen(p);
        const char *colon = memchr(p, ':', (size_t)(stop - p)), *num = colon ? colon + 1 : p;
        if ((colon && colon == p) || (!colon && (p != spec || comma))) return -1; /* K only alone */
        char *end;
        const unsigned long long v = strtoull(num, &end, 10);
        if (num[0] < '0' || num[0] > '9' || end != stop || v < 1 || v > 1000) return -1;
        if (!colon || (b && strlen(b) == (size_t)(colon - p) && strncmp(p, b, (size_t)(colon - p)) == 0))
            *k = (size_t)v;
        if (!comma) return 0;
        p = comma;
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines appear as they are printed */
    static const char *names[] = {"rotary_embedding", "ms_rotary_embedding", "mrotary_embedding",
                                  "qknorm_rotary_embedding", "inverse_rotary_regroup"};
    rk_case_file files[5];
    char err[256];
    for (int i = 0; i < 5; ++i) {
        char path[1024];
        const char *dir = getenv("ROPEKIT_CASES_DIR"); /* a copy elsewhere (GPU machine) */
        snprintf(path, sizeof path, "%s/%s.bin", dir ? dir : ROPEKIT_CASES_DIR, names[i]);
        if (rk_cases_load(path, &files[i], err, sizeof err) != 0) {
            CHECK(0, "loading %s: %s", path, err);
            return REPORT();
        }
    }
    const char *timing = getenv("ROPEKIT_WEBGPU_TIMING");
    g_timing = timing && strcmp(timing, "1") == 0;
    const char *sample = getenv("ROPEKIT_WEBGPU_SAMPLE");
    if (sample && *sample && parse_sample(sample, &g_sample) != 0) {
        CHECK(0, "ROPEKIT_WEBGPU_SAMPLE=%s must be K or BACKEND:K[,BACKEND:K...] (BACKEND vulkan or "
              "gl, K an integer in [1, 1000])", sample);
        return REPORT();
    }
    if (g_sample > 1)
        printf("sampled (ROPEKIT_WEBGPU_SAMPLE=%s): configuration i runs case k when (k + i) %% "
               "%zu == 0\n", sample, g_sample);
    ropekit_set_cpu_variant("ref");
    ropekit_webgpu_backend backend = backend_from_env();
    ropekit_webgpu_options probe = {backend, 0, 0, 0, 0, 0};
    ropekit_webgpu *ctx = NULL;
    if (create_context(&probe, &ctx) != ROPEKIT_OK) {
        const char *req = getenv("ROPEKIT_WEBGPU_REQUIRE");
        printf("no WebGPU adapter: %s\n", ropekit_webgpu_last_error());
        if (req && strcmp(req, "1") == 0) {
            CHECK(0, "an adapter is required (ROPEKIT_WEBGPU_REQUIRE=1)");
            return REPORT();
        }
        printf("skipped\n");
        return 77;
    }
    ropekit_webgpu_destroy(ctx);
    config cfgs[] = {
        {"default", {backend, 0, 0, 0, 0, 0}, 0},
        {"packed16", {backend, 1, 0, 0, 0, 0}, 0},
        {"nof64", {backend, 0, 1, 0, 0, 0}, 0},
        {"smallgrid", {backend, 0, 0, 64, 6, 0}, 0}, /* up to 216 workgroups: 2-D above 6, 3-D above 36 */
        {"batched", {backend, 0, 0, 0, 0, 0}, 4}, /* calls recorded, submitted by the read */
    };
    /* ROPEKIT_WEBGPU_CONFIGS=name,name: only those configurations (device rounds with little
     * time); the tests after them always run */
    const char *only = getenv("ROPEKIT_WEBGPU_CONFIGS");
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; ++i) {
        if (only && *only) {
            char want[64];
            snprintf(want, sizeof want, ",%s,", cfgs[i].name);
            char list[256];
            snprintf(list, sizeof list, ",%s,", only);
            if (!strstr(list, want)) {
                printf("[%s] not in ROPEKIT_WEBGPU_CONFIGS: not run\n", cfgs[i].name);
                continue;
            }
        }
        const double cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), wall0 = clock_s(CLOCK_MONOTONIC);
        run_config(&cfgs[i], i, files, 5);
        timing_section(cfgs[i].name, cpu0, wall0);
    }
#define RUN(name, ...) \
    do { \
        const double cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), wall0 = clock_s(CLOCK_MONOTONIC); \
        if (want_test(#name)) run_##name(__VA_ARGS__); \
        timing_section(#name, cpu0, wall0); \
    } while (0)
    RUN(errors, backend);
    RUN(package_wgsl, backend);
    RUN(vector_layouts, backend);
    RUN(vector_narrowing, backend);
    RUN(narrowing_ties, backend);
    RUN(mrope_vector_tables, backend);
    RUN(vector_blocks, backend);
    RUN(qknorm_layouts, backend);
    RUN(qknorm_sums, backend);
    RUN(qknorm_factor, backend);
    RUN(timestamps, backend);
    RUN(repeated_calls, backend);
    RUN(batched_calls, backend);
    RUN(call_chain, backend);
    RUN(argument_reuse, backend);
    RUN(destroyed_buffers, backend);
    RUN(pipeline_eviction, backend);
    RUN(double_rounding, backend);
    RUN(workgroup_sizes, backend);
    RUN(edge_values, backend, 0);
    RUN(f16_products, backend);
    RUN(vector_heads2, backend);
    if (want_test("edge_values_integer")) run_edge_values(backend, 1);
#undef RUN
    for (int i = 0; i < 5; ++i) rk_cases_free(&files[i]);
    close_pool();
    timing_report();
    return REPORT();
}
