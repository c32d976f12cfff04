/* ropekit bench [--json] [--threads 1,2] [--filter NAME] [--dtypes f32,f16,bf16] [--time S] [--sweep]
 *
 * The CPU benchmark (bench/bench_cpu.c, built as ropekit_bench and installed next to ropekit):
 * this subcommand runs that program with the same arguments, the way git runs git-<command>.
 * The comparison with onnxruntime and the results file come from tools/bench. */
#define _POSIX_C_SOURCE 200809L /* readlink, PATH_MAX */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_bench.h"

int ropekit_cmd_bench(int argc, char **argv) {
    (void)argc; /* argv is NULL-terminated: passed on as it is */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 32);
    if (n <= 0) {
        fprintf(stderr, "ropekit bench: cannot locate the ropekit executable: %s\n", strerror(errno));
        return 1;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    strcpy(slash ? slash + 1 : self, "ropekit_bench");
    argv[0] = self;
    execv(self, argv);
    fprintf(stderr, "ropekit bench: cannot run %s: %s (build the ropekit_bench target)\n", self,
            strerror(errno));
    return 1;
}
