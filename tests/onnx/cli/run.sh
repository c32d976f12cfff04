#!/usr/bin/env bash
# CLI golden test: runs `ropekit ARGS` (ARGS from NAME.args) in tests/onnx/data and compares
# stdout, stderr and the exit status with NAME.out, NAME.err and NAME.rc, byte for byte.
# ARGS are split at white space; the word @EMPTY@ stands for an empty argument.
#   run.sh ROPEKIT NAME            check one case
#   run.sh ROPEKIT --update NAME...  rewrite the expected files from the current binary
set -u
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift
here="$(cd "$(dirname "$0")" && pwd)"
update=0
if [ "${1:-}" = "--update" ]; then update=1; shift; fi
status=0
for name in "$@"; do
    read -r -a args < "$here/$name.args" || true
    for i in "${!args[@]}"; do [ "${args[$i]}" = "@EMPTY@" ] && args[$i]=""; done
    tmp="$(mktemp -d)"
    (cd "$here/../data" && "$bin" "${args[@]}" >"$tmp/out" 2>"$tmp/err"; echo $? >"$tmp/rc")
    if [ $update = 1 ]; then
        cp "$tmp/out" "$here/$name.out"
        cp "$tmp/err" "$here/$name.err"
        cp "$tmp/rc" "$here/$name.rc"
    else
        for f in out err rc; do
            if ! cmp -s "$here/$name.$f" "$tmp/$f"; then
                echo "FAIL $name: $f differs (ropekit ${args[*]})"
                diff -u "$here/$name.$f" "$tmp/$f" | head -40
                status=1
            fi
        done
    fi
    rm -rf "$tmp"
done
[ $status = 0 ] && echo "ok: $*"
exit $status
