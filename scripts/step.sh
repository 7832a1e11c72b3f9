#!/usr/bin/env bash
# One install step on one line: what it does and how long it took, e.g.
#   install: Python packages (requirements.lock) ... done in 41 s
# The command's own output (pip's progress and this machine's pip warnings) goes to
# .run/install.log; when the step fails, its last lines are shown.
# usage: scripts/step.sh "WHAT" COMMAND [ARG...]
set -uo pipefail
what=$1
shift
mkdir -p .run
log=.run/install.log
start=$(date +%s)
printf 'install: %s ... ' "$what"
echo "== $(date -u +%FT%TZ) $what: $*" >>"$log"
if "$@" >>"$log" 2>&1; then
    echo "done in $(( $(date +%s) - start )) s"
else
    rc=$?
    echo "FAILED (exit $rc) after $(( $(date +%s) - start )) s; the end of $log:"
    grep -v "^WARNING: Location '.*' is ignored" "$log" | tail -20
    exit "$rc"
fi
