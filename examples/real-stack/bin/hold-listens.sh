#!/usr/bin/env bash
# Hold haq's proxy listen addresses with a plain TCP relay (bridge.py) while a router starts,
# then free them just before `haq run` binds them.
#
#   bin/hold-listens.sh start    # relay HAQ_LISTENS[i] -> LLAMA upstream[i]
#   bin/start-vllm-router.sh     # (with UPSTREAMS="$HAQ_LISTENS") now finds healthy workers
#   bin/hold-listens.sh stop && haq run scenario.yaml
#
# Env (see env.sh): HAQ_LISTENS (listen addresses, default "127.0.0.1:19101 127.0.0.1:19102"),
#   LLAMA_PORTS (the upstreams, same order).
set -euo pipefail
. "$(dirname "$0")/env.sh"
HAQ_LISTENS=${HAQ_LISTENS:-"127.0.0.1:19101 127.0.0.1:19102"}

case ${1:-start} in
  start)
    pairs=""
    set -- $LLAMA_PORTS
    for l in $HAQ_LISTENS; do pairs="$pairs $l=127.0.0.1:$1"; shift; done
    # shellcheck disable=SC2086
    launch bridge python3 -u "$(dirname "$0")/bridge.py" $pairs
    for l in $HAQ_LISTENS; do wait_port "${l##*:}" 10 "$RUN_DIR/bridge.pid"; done
    ;;
  stop)
    stop_pidfile "$RUN_DIR/bridge.pid" bridge
    # wait until the ports are free for haq
    for l in $HAQ_LISTENS; do
      for i in $(seq 1 40); do (exec 3<>"/dev/tcp/127.0.0.1/${l##*:}") 2>/dev/null || break; sleep 0.1; done
    done
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
