/* ropekit bench [--json] [--threads 1,2] [--filter NAME] [--dtypes f32,f16,bf16] [--time S] [--sweep]
 *
 * The CPU benchmark (bench/bench_cpu.c, built as ropekit_bench and installed next to ropekit):
 * this subcommand runs that program with the same arguments, the way git runs git-<command>.
 * Where it looks, in order: $ROPEKIT_BENCH; ropekit_bench next to this executable; each
 * directory of $PATH; the install directory; the build directory (so a copied `ropekit` still
 * finds the one it was built with). The comparison with onnxruntime and the results file come
 * from tools/bench. */
#define _POSIX_C_SOURCE 200809L /* readlink, PATH_MAX */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_bench.h"

#ifndef ROPEKIT_BENCH_INSTALL_PATH
#define ROPEKIT_BENCH_INSTALL_PATH ""
#endif
#ifndef ROPEKIT_BENCH_BUILD_PATH
#define ROPEKIT_BENCH_BUILD_PATH ""
#endif

/* Try to run `path`; on failure append it to `tried` and return. */
static void try_exec(const char *path, char **argv, char *tried, size_t cap) {
    if (!path || !*path) return;
    execv(path, argv);
    size_t n = strlen(tried);
    snprintf(tried + n, cap - n, "  %s (%s)\n", path, strerror(errno));
}

int ropekit_cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; ++i)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ropekit bench %s\n\n%s\n", ROPEKIT_BENCH_ARGS, ROPEKIT_BENCH_SUMMARY);
            return 0;
        }
    /* argv is NULL-terminated: passed on as it is, named as the user ran it */
    argv[0] = "ropekit bench";
    static char tried[8192];
    tried[0] = '\0';
    try_exec(getenv("ROPEKIT_BENCH"), argv, tried, sizeof tried);
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n > 0) {
        path[n] = '\0';
        char *slash = strrchr(path, '/');
        strcpy(slash ? slash + 1 : path, "ropekit_bench");
        try_exec(path, argv, tried, sizeof tried);
    }
    const char *p = getenv("PATH");
    while (p && *p) {
        size_t len = strcspn(p, ":");
        if (len > 0 && len + 16 < sizeof path) {
            snprintf(path, sizeof path, "%.*s/ropekit_bench", (int)len, p);
            if (access(path, X_OK) == 0) try_exec(path, argv, tried, sizeof tried);
        }
        p += len + (p[len] == ':');
    }
    try_exec(ROPEKIT_BENCH_INSTALL_PATH, argv, tried, sizeof tried);
    try_exec(ROPEKIT_BENCH_BUILD_PATH, argv, tried, sizeof tried);
    fprintf(stderr,
            "ropekit bench: cannot find the benchmark program ropekit_bench; tried:\n%s"
            "  and no ropekit_bench in $PATH\n"
            "build it (cmake --build build --target ropekit_bench), put it next to ropekit or in "
            "$PATH, or set ROPEKIT_BENCH=/path/to/ropekit_bench\n",
            tried);
    return 1;
}
