/* Test helper: onnx_roundtrip IN.onnx OUT.onnx — load then save (what `ropekit fuse` does with
 * no rewrite). Exit 0 on success, 1 with the library's message on stderr otherwise. */
#include <stdio.h>

#include "ropekit_onnx.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: onnx_roundtrip IN.onnx OUT.onnx\n");
        return 2;
    }
    ropekit_model *m = NULL;
    ropekit_status s = ropekit_model_load(argv[1], &m);
    if (s == ROPEKIT_OK) s = ropekit_model_save(m, argv[2]);
    if (s != ROPEKIT_OK)
        fprintf(stderr, "onnx_roundtrip: %s: %s\n", ropekit_status_str(s), ropekit_last_error());
    ropekit_model_free(m);
    return s == ROPEKIT_OK ? 0 : 1;
}
