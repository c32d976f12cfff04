/* ropekit fuse IN.onnx OUT.onnx [--fixed-table] [--max-positions N] [--config FILE] [--target ort|onnx|ropekit]
 *                               [--json] [--dry-run]
 *
 * Finds the RoPE subgraphs of a model and writes a copy with fused nodes (see ropekit_fuse.h).
 * The table length comes from --max-positions, else from --config, else from a Hugging Face
 * config next to the model (IN's stem + ".config.json", then "config.json" in IN's directory),
 * else a default (with a warning). The input file is never modified; the output is written
 * atomically. Warnings go to stderr. Exit status: 0 written (or, with --dry-run, matched), 1 error,
 * 2 usage, 3 written but RoPE sites were found and none was fused (dry run: none is fusable). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_json.h"
#include "cmd_fuse.h"
#include "ropekit_fuse.h"

static int g_json; /* --json: errors are also a JSON object on stdout */

static int fuse_usage(const char *fmt, const char *arg) {
    char msg[1024];
    snprintf(msg, sizeof msg, fmt, arg);
    fprintf(stderr, "ropekit fuse: %s\nusage: ropekit fuse %s\n", msg, ROPEKIT_FUSE_ARGS);
    if (g_json) rk_cli_json_error(stdout, "fuse", "usage", msg, 2);
    return 2;
}

/* IN's stem + ".config.json", else dir/config.json; NULL when neither exists. */
static char *find_config(const char *in) {
    size_t n = strlen(in);
    char *p = malloc(n + 32);
    if (!p) return NULL;
    memcpy(p, in, n + 1);
    if (n > 5 && strcmp(p + n - 5, ".onnx") == 0) {
        strcpy(p + n - 5, ".config.json");
        if (access(p, R_OK) == 0) return p;
    }
    const char *slash = strrchr(in, '/');
    size_t dlen = slash ? (size_t)(slash - in + 1) : 0;
    memcpy(p, in, dlen);
    strcpy(p + dlen, "config.json");
    if (access(p, R_OK) == 0) return p;
    free(p);
    return NULL;
}

static int fuse_help(void) {
    printf("usage: ropekit fuse %s\n\n%s\n", ROPEKIT_FUSE_ARGS, ROPEKIT_FUSE_SUMMARY);
    return 0;
}

static int parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return 0;
    *out = v;
    return 1;
}

int ropekit_cmd_fuse(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *config = NULL;
    int json = 0, fixed = 0;
    ropekit_fuse_options o = ROPEKIT_FUSE_OPTIONS_INIT;
    ropekit_save_options so = ROPEKIT_SAVE_OPTIONS_INIT;
    int options = 1;
    g_json = rk_cli_wants_json(argc, argv);
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!options || a[0] != '-' || !a[1]) {
            if (!in) in = a;
            else if (!out) out = a;
            else return fuse_usage("unexpected argument '%s'", a);
        } else if (!strcmp(a, "--")) {
            options = 0;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            return fuse_help();
        } else if (!strcmp(a, "--external-data")) {
            so.external_min_bytes = ROPEKIT_FUSE_EXTERNAL_MIN_BYTES;
        } else if (!strncmp(a, "--external-data=", 16)) {
            if (!parse_i64(a + 16, &so.external_min_bytes) || so.external_min_bytes <= 0)
                return fuse_usage("--external-data=BYTES needs a positive integer, not '%s'",
                                  a + 16);
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--dry-run")) {
            o.dry_run = 1;
        } else if (!strcmp(a, "--fixed-table")) {
            fixed = 1;
        } else if (!strcmp(a, "--max-positions") || !strcmp(a, "--config") || !strcmp(a, "--target")) {
            if (i + 1 >= argc) return fuse_usage("%s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--config")) {
                config = v;
            } else if (!strcmp(a, "--target")) {
                if (!strcmp(v, "ort"))
                    o.target = ROPEKIT_FUSE_TARGET_ORT;
                else if (!strcmp(v, "onnx"))
                    o.target = ROPEKIT_FUSE_TARGET_ONNX;
                else if (!strcmp(v, "ropekit")) /* ai.ropekit ops, run by libropekit_ort */
                    o.target = ROPEKIT_FUSE_TARGET_ROPEKIT;
                else
                    return fuse_usage("--target must be 'ort', 'onnx' or 'ropekit', not '%s'", v);
            } else if (!parse_i64(v, &o.max_positions) || o.max_positions <= 0) {
                return fuse_usage("--max-positions needs a positive integer, not '%s'", v);
            }
        } else {
            return fuse_usage("unknown option '%s'", a);
        }
    }
    if (!in) return fuse_usage("%s", "missing the input model");
    if (!*in) return fuse_usage("%s", "the input model path is empty");
    if (!out && !o.dry_run) return fuse_usage("%s", "missing the output file (or --dry-run)");
    if (out && !*out) return fuse_usage("%s", "the output path is empty");
    char *found = NULL;
    /* a fixed table (its length from --max-positions, --config or a config.json beside IN)
     * only when asked for; the default needs no length */
    if (o.max_positions == 0 && (fixed || config)) {
        o.max_positions = ROPEKIT_FUSE_TABLE_FROM_CONFIG;
        if (!config) config = found = find_config(in);
    }
    o.config_path = config;
    o.external_min_bytes = so.external_min_bytes; /* tables saved externally may pass 2 GiB */

    ropekit_model *m = NULL;
    ropekit_fuse_report *r = NULL;
    char *text = NULL;
    int rc = 1;
    ropekit_status st;
    if ((st = ropekit_model_load(in, &m)) != ROPEKIT_OK) goto fail;
    if ((st = ropekit_fuse(m, &o, &r)) != ROPEKIT_OK) goto fail;
    if (!o.dry_run && (st = ropekit_model_save_with(m, out, &so)) != ROPEKIT_OK) goto fail;
    if ((st = json ? ropekit_fuse_report_json(r, &text) : ropekit_fuse_report_text(r, &text)) !=
        ROPEKIT_OK)
        goto fail;
    fputs(text, stdout);
    if (!json && !o.dry_run) printf("wrote %s\n", out);
    fflush(stdout);
    for (int64_t i = 0; i < ropekit_fuse_report_warning_count(r); ++i)
        fprintf(stderr, "ropekit fuse: warning: %s\n", ropekit_fuse_report_warning(r, i));
    rc = ropekit_fuse_exit_status(r);
    goto done;
fail:
    fprintf(stderr, "ropekit fuse: %s\n", ropekit_last_error());
    if (json) rk_cli_json_error(stdout, "fuse", ropekit_status_str(st), ropekit_last_error(), rc);
done:
    ropekit_onnx_free(text);
    ropekit_fuse_report_free(r);
    ropekit_model_free(m);
    free(found);
    return rc;
}
