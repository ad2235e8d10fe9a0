#!/usr/bin/env bash
# Stop everything the real-stack scripts started: each process named by a pid file in
# RUN_DIR (routers first, then llama-servers, then anything else such as echo upstreams).
# A frozen (SIGSTOPped) process is continued first. Only pids from these files are signalled.
#
#   bin/stop-all.sh              # everything
#   bin/stop-all.sh routers      # vllm-router, sglang-router, litellm, nginx
#   bin/stop-all.sh llama        # the llama-servers
#   bin/stop-all.sh NAME...      # RUN_DIR/NAME.pid
set -euo pipefail
. "$(dirname "$0")/env.sh"

routers="vllm-router sglang-router litellm nginx"
what=${*:-all}
names=""
for w in $what; do
  case $w in
    all) names="$names $routers $(cd "$RUN_DIR" && ls llama-*.pid 2>/dev/null | sed 's/\.pid$//') $(cd "$RUN_DIR" && ls *.pid 2>/dev/null | sed 's/\.pid$//')" ;;
    routers) names="$names $routers" ;;
    llama) names="$names $(cd "$RUN_DIR" && ls llama-*.pid 2>/dev/null | sed 's/\.pid$//')" ;;
    *) names="$names $w" ;;
  esac
done
seen=" "
for n in $names; do
  case $seen in *" $n "*) continue ;; esac
  seen="$seen$n "
  stop_pidfile "$RUN_DIR/$n.pid" "$n"
done
