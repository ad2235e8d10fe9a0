#!/usr/bin/env bash
# The compatibility matrix (docs/compatibility.md): each scenario against each router, one
# after the other (bounded: each run under `timeout`), then one line per run with haq's verdicts.
#   bin/batch.sh                                   # the whole matrix: the defaults below
#   bin/batch.sh "vllm-router sglang-router" "kill-midstream freeze kill-restart kill-idle"
# Env: SCENARIO_DIR (../scenarios), RUN_TIMEOUT (400 s), plus run-haq.sh's (RUNS_DIR, HAQ, ...).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
SCENARIO_DIR=${SCENARIO_DIR:-$(cd "$here/../scenarios" && pwd)}
export RUNS_DIR=${RUNS_DIR:-$REALSTACK_DIR/runs}
routers=${1:-"vllm-router sglang-router nginx litellm"}
scenarios=${2:-"kill-midstream freeze kill-restart"}
for r in $routers; do
  for s in $scenarios; do
    timeout "${RUN_TIMEOUT:-400}" "$here/run-haq.sh" "$r" "$SCENARIO_DIR/$s.yaml"
  done
done
"$here/stop-all.sh" routers >/dev/null
"$here/summary.py" "$RUNS_DIR"
