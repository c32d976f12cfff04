/* Runs the fuzz harness once on each file given (for regression tests in any build). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    int bad = 0;
    for (int i = 1; i < argc; ++i) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "replay: cannot open %s\n", argv[i]);
            bad = 1;
            continue;
        }
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
        size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
        fclose(f);
        LLVMFuzzerTestOneInput(buf, got);
        free(buf);
    }
    printf("replayed %d inputs\n", argc - 1);
    return bad;
}
