#!/usr/bin/env bash
# Start vllm-router (PyPI vllm-router 0.1.17) or sglang-router (PyPI sglang-router 0.3.2: the
# same router core, same flags) on 127.0.0.1:ROUTER_PORT in front of UPSTREAMS; called by
# start-vllm-router.sh and start-sglang-router.sh.
#   bin/start-rs-router.sh vllm-router|sglang-router
# Log: LOG_DIR/NAME.log (every line stamped with UTC ms and CLOCK_MONOTONIC by tslog.py);
# pid: RUN_DIR/NAME.pid. Idempotent.
#
# It does not listen until every worker answers its health check (--worker-startup-*), so
# start the upstreams (or haq's listen addresses) first.
#
# Env (see env.sh): UPSTREAMS, ROUTER_PORT (8080), VLLM_ROUTER_VENV / SGLANG_ROUTER_VENV,
#   ROUTER_POLICY (round_robin), PROMETHEUS_PORT (29001 vllm-router, 29002 sglang-router),
#   HEALTH_INTERVAL (60, the router's default), CB_FAILURES (10, default), CB_TIMEOUT (60, default),
#   RETRIES (5, default), STARTUP_TIMEOUT (120), ROUTER_WAIT (1: wait until it listens),
#   ROUTER_EXTRA (more flags, e.g. "--disable-circuit-breaker").
set -euo pipefail
. "$(dirname "$0")/env.sh"

name=${1:?usage: start-rs-router.sh vllm-router|sglang-router}
case $name in
  vllm-router) cmd=("$VLLM_ROUTER_VENV/bin/vllm-router"); prom=29001 ;;
  sglang-router) cmd=("$SGLANG_ROUTER_VENV/bin/python" -m sglang_router.launch_router); prom=29002 ;;
  *) echo "start-rs-router.sh: unknown router $name" >&2; exit 2 ;;
esac
ROUTER_POLICY=${ROUTER_POLICY:-round_robin}
PROMETHEUS_PORT=${PROMETHEUS_PORT:-$prom}
HEALTH_INTERVAL=${HEALTH_INTERVAL:-60}
CB_FAILURES=${CB_FAILURES:-10}
CB_TIMEOUT=${CB_TIMEOUT:-60}
RETRIES=${RETRIES:-5}
STARTUP_TIMEOUT=${STARTUP_TIMEOUT:-120}

# shellcheck disable=SC2046
launch "$name" "${cmd[@]}" \
  --host 127.0.0.1 --port "$ROUTER_PORT" \
  --worker-urls $(urls_of "$UPSTREAMS") \
  --policy "$ROUTER_POLICY" \
  --prometheus-host 127.0.0.1 --prometheus-port "$PROMETHEUS_PORT" \
  --health-check-interval-secs "$HEALTH_INTERVAL" \
  --cb-failure-threshold "$CB_FAILURES" --cb-timeout-duration-secs "$CB_TIMEOUT" \
  --retry-max-retries "$RETRIES" \
  --worker-startup-timeout-secs "$STARTUP_TIMEOUT" --worker-startup-check-interval 1 \
  --log-level "${ROUTER_LOG_LEVEL:-info}" \
  ${ROUTER_EXTRA:-}

if [ "${ROUTER_WAIT:-1}" = 1 ]; then
  wait_port "$ROUTER_PORT" "$STARTUP_TIMEOUT" "$RUN_DIR/$name.pid"
  echo "$name listens on 127.0.0.1:$ROUTER_PORT -> $UPSTREAMS"
fi
