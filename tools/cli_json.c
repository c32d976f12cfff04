/* Errors as JSON for `--json` modes (see cli_json.h). */
#include "cli_json.h"

#include <string.h>

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; ++p) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else if (*p < 0x80)
            fputc(*p, f);
        else { /* UTF-8 passes through; a byte that starts no valid sequence becomes U+FFFD */
            int n = *p >= 0xf0 && *p < 0xf5 ? 3 : *p >= 0xe0 ? 2 : *p >= 0xc2 && *p < 0xe0 ? 1 : -1;
            int ok = n > 0;
            for (int i = 1; ok && i <= n; ++i) ok = (p[i] & 0xc0) == 0x80;
            if (ok) {
                fwrite(p, 1, (size_t)n + 1, f);
                p += n;
            } else {
                fputs("\\ufffd", f);
            }
        }
    }
    fputc('"', f);
}

void rk_cli_json_error(FILE *f, const char *command, const char *status, const char *message,
                       int exit_status) {
    fputs("{\"error\": {\"command\": ", f);
    json_str(f, command);
    fputs(", \"status\": ", f);
    json_str(f, status);
    fputs(", \"message\": ", f);
    json_str(f, message);
    fprintf(f, ", \"exit_status\": %d}}\n", exit_status);
    fflush(f);
}

int rk_cli_wants_json(int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--") == 0) return 0;
        if (strcmp(argv[i], "--json") == 0) return 1;
    }
    return 0;
}
