/* ropekit's thread pool under stress: results never depend on the thread count or on timing.
 *
 * Every call is split (the parallel threshold set to 0) and its output compared bit for bit with
 * the same call made on one thread:
 *   - back-to-back calls of varied sizes (workers polling for the next job);
 *   - calls after a pause longer than the workers' poll (workers asleep: the wake-up path);
 *   - several application threads calling at once, each on its own buffers (one of them holds
 *     the pool, the others run on their own thread);
 *   - thread counts 2 .. 6 on whatever cores the machine has (oversubscribed on a 2-core VM).
 *   test_threads [rounds] */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "internal.h"
#include "ropekit.h"

enum { MAXS = 96, N = 8, H = 64, P = 128 };

typedef struct call {
    int64_t S;
    float x[MAXS * N * H], y[MAXS * N * H], want[MAXS * N * H];
    float c[P * H / 2], s[P * H / 2];
    int64_t pos[MAXS];
} call;

static uint32_t g_seed = 1;
static float frand(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return (float)(*st >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

static void init_call(call *k, int64_t S, uint32_t seed) {
    k->S = S;
    for (int64_t i = 0; i < S * N * H; ++i)
        k->x[i] = frand(&seed);
    for (int64_t i = 0; i < P * H / 2; ++i)
        k->c[i] = frand(&seed), k->s[i] = frand(&seed);
    for (int64_t i = 0; i < S; ++i)
        k->pos[i] = (int64_t)((seed = seed * 1664525u + 1013904223u) >> 8) % P;
}

static ropekit_status run_call(call *k, float *out) {
    int64_t xs[3] = {1, k->S, N * H}, ts[2] = {P, H / 2}, ps[2] = {1, k->S};
    ropekit_tensor x = ropekit_tensor_contiguous(k->x, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor y = ropekit_tensor_contiguous(out, ROPEKIT_FLOAT32, 3, xs);
    ropekit_tensor c = ropekit_tensor_contiguous(k->c, ROPEKIT_FLOAT32, 2, ts);
    ropekit_tensor s = ropekit_tensor_contiguous(k->s, ROPEKIT_FLOAT32, 2, ts);
    ropekit_tensor pos = ropekit_tensor_contiguous(k->pos, ROPEKIT_INT64, 2, ps);
    ropekit_rotary_embedding_attrs a = {0, 0, N, 0};
    return ropekit_rotary_embedding(&x, &c, &s, &pos, &a, &y);
}

/* The one-thread result of each call (computed before any thread starts). */
static void make_want(call *k) {
    ropekit_set_num_threads(1);
    CHECK(run_call(k, k->want) == ROPEKIT_OK, "one-thread call: %s", ropekit_last_error());
}

static int same(const call *k) {
    return memcmp(k->y, k->want, sizeof(float) * (size_t)(k->S * N * H)) == 0;
}

static void sleep_us(long us) {
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

typedef struct app {
    call *calls;
    int ncalls, reps, bad, failed_calls;
} app;

static void *app_main(void *arg) {
    app *a = (app *)arg;
    for (int r = 0; r < a->reps; ++r)
        for (int i = 0; i < a->ncalls; ++i) {
            call *k = &a->calls[i];
            memset(k->y, 0xff, sizeof k->y);
            if (run_call(k, k->y) != ROPEKIT_OK)
                ++a->failed_calls;
            else if (!same(k))
                ++a->bad;
        }
    return NULL;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    if (rounds < 1) rounds = 1;
    enum { NC = 12 };
    call *calls = malloc(sizeof(call) * NC);
    static const int64_t sizes[NC] = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 96, 7};
    for (int i = 0; i < NC; ++i) {
        init_call(&calls[i], sizes[i], g_seed += 7919);
        make_want(&calls[i]);
    }
    rk_cpu_set_parallel_threshold(0); /* split every call with more than one token */
    for (int r = 0; r < rounds; ++r)
        for (int th = 2; th <= 6; ++th) {
            ropekit_set_num_threads(th);
            /* back to back: each worker polls for the next job */
            int bad = 0, failed = 0;
            for (int rep = 0; rep < 20; ++rep)
                for (int i = 0; i < NC; ++i) {
                    memset(calls[i].y, 0xff, sizeof calls[i].y);
                    if (run_call(&calls[i], calls[i].y) != ROPEKIT_OK)
                        ++failed;
                    else if (!same(&calls[i]))
                        ++bad;
                }
            CHECK(failed == 0 && bad == 0, "%d threads, back to back: %d calls failed, %d differ",
                  th, failed, bad);
            /* after a pause: the workers are asleep */
            bad = failed = 0;
            for (int i = 0; i < NC; i += 3) {
                sleep_us(300);
                memset(calls[i].y, 0xff, sizeof calls[i].y);
                if (run_call(&calls[i], calls[i].y) != ROPEKIT_OK)
                    ++failed;
                else if (!same(&calls[i]))
                    ++bad;
            }
            CHECK(failed == 0 && bad == 0, "%d threads, after pauses: %d calls failed, %d differ",
                  th, failed, bad);
            /* four application threads at once, each on its own copies of the calls */
            enum { NA = 4 };
            pthread_t t[NA];
            app a[NA];
            call *own = malloc(sizeof(call) * NC * NA);
            for (int j = 0; j < NA; ++j) {
                memcpy(own + j * NC, calls, sizeof(call) * NC);
                a[j] = (app){own + j * NC, NC, 5, 0, 0};
            }
            int started = 0;
            for (int j = 0; j < NA; ++j)
                started += pthread_create(&t[j], NULL, app_main, &a[j]) == 0;
            CHECK(started == NA, "%d of %d application threads started", started, NA);
            for (int j = 0; j < started; ++j)
                pthread_join(t[j], NULL);
            for (int j = 0; j < started; ++j)
                CHECK(a[j].failed_calls == 0 && a[j].bad == 0,
                      "%d threads, application thread %d: %d calls failed, %d differ", th, j,
                      a[j].failed_calls, a[j].bad);
            free(own);
        }
    rk_cpu_set_parallel_threshold(-1);
    ropekit_set_num_threads(1);
    free(calls);
    return REPORT();
}
