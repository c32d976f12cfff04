/* The C fusion API (ropekit_fuse.h): load an ONNX model, fuse its RoPE subgraphs, print the
 * report as JSON and save the fused copy.
 *
 *   fuse IN.onnx OUT.onnx [MAX_POSITIONS]
 *
 * Build against an installed ropekit (cmake --install, or the pip wheel's ropekit/ folder):
 *   cmake -S examples/c_fuse -B build-fuse -DCMAKE_PREFIX_PATH=PREFIX && cmake --build build-fuse
 * or  cc fuse.c $(pkg-config --cflags --libs ropekit_onnx)
 * Link ropekit_onnx alone: it contains the core API as well. */
#include <stdio.h>
#include <stdlib.h>

#include <ropekit_fuse.h>

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s IN.onnx OUT.onnx [MAX_POSITIONS]\n", argv[0]);
        return 2;
    }
    ropekit_fuse_options options = ROPEKIT_FUSE_OPTIONS_INIT;
    if (argc == 4) options.max_positions = strtoll(argv[3], NULL, 10);

    ropekit_model *model = NULL;
    ropekit_fuse_report *report = NULL;
    char *json = NULL;
    int rc = 1;
    if (ropekit_model_load(argv[1], &model) != ROPEKIT_OK) goto fail;
    if (ropekit_fuse(model, &options, &report) != ROPEKIT_OK) goto fail;
    if (ropekit_fuse_report_json(report, &json) != ROPEKIT_OK) goto fail;
    if (ropekit_model_save(model, argv[2]) != ROPEKIT_OK) goto fail;
    fputs(json, stdout);
    printf("%lld of %lld RoPE sites fused; wrote %s (ropekit %s)\n",
           (long long)ropekit_fuse_report_fused(report), (long long)ropekit_fuse_report_sites(report),
           argv[2], ropekit_version());
    rc = ropekit_fuse_report_sites(report) > 0 ? 0 : 1;
    goto done;
fail:
    fprintf(stderr, "fuse: %s\n", ropekit_last_error());
done:
    ropekit_onnx_free(json);
    ropekit_fuse_report_free(report);
    ropekit_model_free(model);
    return rc;
}
