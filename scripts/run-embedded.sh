#!/usr/bin/env bash
# `make run`: the main job on the embedded default, on any machine (CPU is enough).
#   1. set up AIRFLOW_HOME (.airflow): render airflow.cfg.template, migrate the SQLite DB
#   2. run the dlperf_smoke DAG end to end through Airflow (dag.test): plan, prepare, real
#      PyTorch BERT trials with torchrun (1n1g and 1n2g, local processes), collect,
#      aggregate, report, publish to the local store (.run/store), cleanup
#   3. print the result table and where the JSON, Markdown, plots and logs are
# Extra arguments go to the run as a JSON conf, e.g.:  scripts/run-embedded.sh '{"trials": 1}'
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$ROOT/.airflow}"
export AIRFLOW_CONFIG="$AIRFLOW_HOME/airflow.cfg"
PY="$ROOT/.venv/bin/python"
CONF="${1:-{\}}"
DAG="${DLPERF_DAG:-dlperf_smoke}"

bash scripts/airflow-env.sh
mkdir -p .run
LOG="$ROOT/.run/embedded-$(date -u +%Y%m%dT%H%M%S).log"
echo "running $DAG through Airflow (dag.test); Airflow's log: $LOG"
start=$(date +%s)
# the full log goes to $LOG; the trials' progress lines ("dlperf: ...") are shown here as they come
progress() { { grep --line-buffered -o 'dlperf: .*' || true; } | sed -u -e 's/^dlperf: /  /' -e 's/ \[[a-z_.]*\.TrialOperator\].*$//'; }
if ! "$PY" -m dlperf_tasks.airflow.embedded run --dag "$DAG" --conf "$CONF" 2>&1 | tee "$LOG" | progress; then
    echo "the $DAG run FAILED; last lines of $LOG:" >&2
    grep -E "ERROR|Error|error:|failed" "$LOG" | tail -20 >&2 || tail -40 "$LOG" >&2
    exit 1
fi
echo "$DAG finished in $(( $(date +%s) - start )) s"
echo
"$PY" -m dlperf_tasks.airflow.embedded show --dag "$DAG"
# commands that work as printed in a new shell from this directory (tests/unit/test_readme_commands.py)
cat <<EOF

next, from $ROOT in any shell ('make shell' first to type plain 'dlperf'):
  .venv/bin/dlperf results ls             # the runs in the store
  .venv/bin/dlperf results show latest    # the newest run, cell by cell
  make serve                              # the Airflow UI and the results page on http://127.0.0.1:8080
EOF
