/* A program outside the project: found through the installed CMake package or pkg-config. */
#include <ropekit.h>
#include <stdio.h>

int main(void) {
    float x[1][1][2] = {{{1.0f, 0.0f}}}, c[1][1] = {{0.0f}}, s[1][1] = {{1.0f}};
    int64_t pos[1][1] = {{0}};
    ropekit_tensor tx = ropekit_tensor_contiguous(x, ROPEKIT_FLOAT32, 3, (int64_t[]){1, 1, 2});
    ropekit_tensor tc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 2, (int64_t[]){1, 1});
    ropekit_tensor ts = ropekit_tensor_contiguous(s, ROPEKIT_FLOAT32, 2, (int64_t[]){1, 1});
    ropekit_tensor tp = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, (int64_t[]){1, 1});
    ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
    a.num_heads = 1;
    /* a quarter turn: (1, 0) -> (0, 1) */
    if (ropekit_rotary_embedding(&tx, &tc, &ts, &tp, &a, &tx) != ROPEKIT_OK || x[0][0][0] != 0.0f ||
        x[0][0][1] != 1.0f) {
        printf("FAILED: %s\n", ropekit_last_error());
        return 1;
    }
    printf("installed ropekit %s works (variant %s)\n", ropekit_version(), ropekit_cpu_variant());
    return 0;
}
