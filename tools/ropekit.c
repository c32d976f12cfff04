/* ropekit — command line tool for ONNX models.
 *
 *   ropekit inspect IN.onnx [--json]
 *   ropekit fuse IN.onnx OUT.onnx [--fixed-table] [--max-positions N] [--config FILE] [--target ort|onnx|ropekit]
 *                [--json] [--dry-run]                                (tools/cmd_fuse.c)
 *   ropekit bench [--json] [--threads 1,2] [--filter NAME] ...       (tools/cmd_bench.c)
 *
 * Exit status: 0 success, 1 runtime error (message on stderr), 2 usage error; `ropekit fuse`
 * adds its own (tools/cmd_fuse.c). Messages start with "ropekit COMMAND: ".
 * SIGINT, SIGTERM, SIGHUP and SIGXFSZ remove the temporary file of a save in progress.
 * Each subcommand is one function in the table below; new ones (fuse, ...) are added there. */
#define _POSIX_C_SOURCE 200809L /* sigaction */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_json.h"
#include "cmd_bench.h"
#include "cmd_fuse.h"
#include "ropekit_onnx.h"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

typedef struct command {
    const char *name;
    const char *args;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} command;

static int cmd_inspect(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const command commands[] = {
    {"inspect", "IN.onnx [--json]",
     "Summarize a model: opsets, nodes by op type, initializers, external data\n"
     "files, graph inputs and outputs with shapes, existing rotary embedding\n"
     "nodes. --json: one JSON object instead of text.",
     cmd_inspect},
    {"fuse", ROPEKIT_FUSE_ARGS, ROPEKIT_FUSE_SUMMARY, ropekit_cmd_fuse},
    {"bench", ROPEKIT_BENCH_ARGS, ROPEKIT_BENCH_SUMMARY, ropekit_cmd_bench},
    {"help", "[COMMAND]", "Show this help, or a command's.", cmd_help},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* The summary, each line indented by `indent` spaces. */
static void print_summary(FILE *f, const char *s, int indent) {
    while (*s) {
        size_t n = strcspn(s, "\n");
        fprintf(f, "%*s%.*s\n", indent, "", (int)n, s);
        s += n + (s[n] == '\n');
    }
}

static void usage(FILE *f) {
    fprintf(f, "usage: ropekit COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; ++i) {
        fprintf(f, "  %s %s\n", commands[i].name, commands[i].args);
        print_summary(f, commands[i].summary, 6);
    }
    fprintf(f, "\noptions: --version, --help\n"
               "exit status: 0 success, 1 error (message on stderr), 2 usage error\n");
}

static const command *find_command(const char *name) {
    for (size_t i = 0; i < N_COMMANDS; ++i)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static int g_json; /* inspect --json: errors are also a JSON object on stdout */

static int usage_error(const char *cmd, const char *fmt, const char *arg) {
    char msg[1024];
    snprintf(msg, sizeof msg, fmt, arg);
    fprintf(stderr, "ropekit%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "", msg);
    if (g_json) rk_cli_json_error(stdout, cmd ? cmd : "", "usage", msg, EXIT_USAGE);
    const command *c = cmd ? find_command(cmd) : NULL;
    if (c)
        fprintf(stderr, "usage: ropekit %s %s\n", c->name, c->args);
    else
        fprintf(stderr, "run 'ropekit --help' for usage\n");
    return EXIT_USAGE;
}

static int runtime_error(const char *cmd, ropekit_status s) {
    const char *msg = ropekit_last_error();
    fprintf(stderr, "ropekit %s: %s\n", cmd, *msg ? msg : ropekit_status_str(s));
    if (g_json)
        rk_cli_json_error(stdout, cmd, ropekit_status_str(s), *msg ? msg : ropekit_status_str(s),
                          EXIT_RUNTIME);
    return EXIT_RUNTIME;
}

static int cmd_inspect(int argc, char **argv) {
    const char *in = NULL;
    int json = 0, options = 1;
    g_json = rk_cli_wants_json(argc, argv);
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (options && strcmp(a, "--") == 0) {
            options = 0;
        } else if (options && strcmp(a, "--json") == 0) {
            json = 1;
        } else if (options && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            return cmd_help(2, (char *[]){"help", "inspect", NULL});
        } else if (options && a[0] == '-' && a[1] != '\0') {
            return usage_error("inspect", "unknown option '%s'", a);
        } else if (in) {
            return usage_error("inspect", "unexpected argument '%s' (one model at a time)", a);
        } else {
            in = a;
        }
    }
    if (!in) return usage_error("inspect", "%s", "missing the model file");
    if (!*in) return usage_error("inspect", "%s", "the model path is empty");

    ropekit_model *model = NULL;
    ropekit_model_info *info = NULL;
    char *text = NULL;
    ropekit_status s = ropekit_model_load(in, &model);
    if (s == ROPEKIT_OK) s = ropekit_model_inspect(model, &info);
    if (s == ROPEKIT_OK)
        s = ropekit_model_info_format(
            info, json ? ROPEKIT_ONNX_FORMAT_JSON : ROPEKIT_ONNX_FORMAT_TEXT, &text);
    int rc = s == ROPEKIT_OK ? EXIT_OK : runtime_error("inspect", s);
    for (size_t i = 0; info && i < info->n_external_files; ++i)
        if (info->external_files[i].problem)
            fprintf(stderr, "ropekit inspect: warning: external data file '%s' %s\n",
                    info->external_files[i].location, info->external_files[i].problem);
    if (text && (fputs(text, stdout) == EOF || fflush(stdout) != 0)) {
        fprintf(stderr, "ropekit inspect: cannot write the output\n");
        rc = EXIT_RUNTIME;
    }
    ropekit_onnx_free(text);
    ropekit_model_info_free(info);
    ropekit_model_free(model);
    return rc;
}

static int cmd_help(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) argv[1] = "help";
    if (argc > 2) return usage_error("help", "unexpected argument '%s'", argv[2]);
    if (argc == 2) {
        const command *c = find_command(argv[1]);
        if (!c) return usage_error("help", "unknown command '%s'", argv[1]);
        printf("usage: ropekit %s %s\n\n", c->name, c->args);
        print_summary(stdout, c->summary, 0);
        return EXIT_OK;
    }
    usage(stdout);
    return EXIT_OK;
}

/* Remove the temporary file of a save in progress, then die of the signal as before. */
static void on_signal(int sig) {
    ropekit_onnx_remove_temp_files();
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv) {
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; ++i) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        struct sigaction old;
        /* a signal the caller ignores (nohup, background jobs) stays ignored */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("ropekit %s\n", ropekit_version());
        return EXIT_OK;
    }
    const command *c = find_command(name);
    if (!c) return usage_error(NULL, "unknown command '%s'", name);
    return c->run(argc - 1, argv + 1);
}
