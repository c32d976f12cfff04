/* Tiny test harness: CHECK counts, prints failures, and main() ends with REPORT(). */
#ifndef ROPEKIT_TEST_CHECK_H
#define ROPEKIT_TEST_CHECK_H
#include <stdio.h>
#include <string.h>

static int g_passed, g_failed, g_skipped;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (cond) {                                                                            \
            ++g_passed;                                                                        \
        } else {                                                                               \
            ++g_failed;                                                                        \
            if (g_failed <= 50) {                                                              \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);                                    \
                printf(__VA_ARGS__);                                                           \
                printf("\n");                                                                  \
            }                                                                                  \
        }                                                                                      \
    } while (0)

/* A ropekit call that must fail with `status` and a ropekit_last_error() containing `text`. */
#define EXPECT_ERR(call, status, text)                                                         \
    do {                                                                                       \
        ropekit_status st_ = (call);                                                           \
        CHECK(st_ == (status) && strstr(ropekit_last_error(), text) != NULL,                   \
              "%s: got %s \"%s\", want %s containing \"%s\"", #call, ropekit_status_str(st_),  \
              ropekit_last_error(), #status, text);                                            \
    } while (0)

#define SKIP(...)                                                                              \
    do {                                                                                       \
        ++g_skipped;                                                                           \
        printf("SKIP: ");                                                                      \
        printf(__VA_ARGS__);                                                                   \
        printf("\n");                                                                          \
    } while (0)

#define REPORT()                                                                               \
    (printf("%d passed, %d failed, %d skipped\n", g_passed, g_failed, g_skipped),              \
     g_failed ? 1 : 0)

/* xorshift64*: deterministic test randomness */
static unsigned long long g_rng = 0x9E3779B97F4A7C15ull;
static inline unsigned long long rng_u64(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}
static inline double rng_unit(void) { return (double)(rng_u64() >> 11) * 0x1p-53; }
static inline float rng_normalish(void) { return (float)(rng_unit() * 4.0 - 2.0); }
#endif
