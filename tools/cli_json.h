/* Errors as JSON for `--json` modes (tools/cli_json.c): a program that reads the JSON report
 * also gets a JSON object when there is no report. */
#ifndef ROPEKIT_CLI_JSON_H
#define ROPEKIT_CLI_JSON_H

#include <stdio.h>

/* Prints {"error": {"command": ..., "status": ..., "message": ..., "exit_status": N}} and a
 * newline to f. status: a ropekit_status name (ROPEKIT_ERROR_IO, ...) or "usage". */
void rk_cli_json_error(FILE *f, const char *command, const char *status, const char *message,
                       int exit_status);

/* Whether argv[1..argc) holds "--json" before any "--". */
int rk_cli_wants_json(int argc, char **argv);

#endif
