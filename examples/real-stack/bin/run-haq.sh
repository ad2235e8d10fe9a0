#!/usr/bin/env bash
# One haq run against a real router: make sure the llama-servers run (healthy, not frozen),
# start `haq proxy SCENARIO` (haq's listen addresses, up before the router and between
# runs), (re)start ROUTER in front of them, run `haq run SCENARIO` (it borrows the listen
# addresses from `haq proxy`), copy the router's log lines of the run into the run
# directory, stop the router and `haq proxy`.
#
#   bin/run-haq.sh ROUTER SCENARIO [haq run args...]
#   ROUTER: vllm-router | sglang-router | litellm | nginx | nginx-direct
#     nginx-direct: nginx in front of the llama-servers themselves (no haq proxy in the path,
#     its upstream addresses are LLAMA_PORTS) - the scenario must then declare no `listen`.
# The scenario's target.url, each replica's upstream, listen, process.pid_file and
# process.restart are set (--set) from ROUTER_PORT, LLAMA_PORTS, HAQ_LISTENS and RUN_DIR.
#
# Env (see env.sh): HAQ (haq binary; default the repository's target/release/haq, else `haq`
#   on PATH), RUNS_DIR (REALSTACK_DIR/runs),
#   HAQ_LISTENS ("127.0.0.1:19101 127.0.0.1:19102", the scenario's listen addresses, same
#   order as LLAMA_PORTS), RUN_NAME (default ROUTER-SCENARIO-UTCTIME), HAQ_PROXY_DIR
#   (`haq proxy`'s control sockets, default RUN_DIR/haq-proxy), plus each router script's
#   own variables (ROUTER_EXTRA, CB_FAILURES, NGINX_KEEPALIVE, ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"

router=${1:?usage: run-haq.sh ROUTER SCENARIO [haq args]}
scenario=${2:?usage: run-haq.sh ROUTER SCENARIO [haq args]}
shift 2
# haq: $HAQ, else the repository's release build, else `haq` on PATH
repo=$(cd "$here/../../.." && pwd)
if [ -z "${HAQ:-}" ]; then
  if [ -x "$repo/target/release/haq" ]; then HAQ=$repo/target/release/haq; else HAQ=haq; fi
fi
RUNS_DIR=${RUNS_DIR:-$REALSTACK_DIR/runs}
HAQ_LISTENS=${HAQ_LISTENS:-"127.0.0.1:19101 127.0.0.1:19102"}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=$RUNS_DIR/${RUN_NAME:-$router-$(basename "$scenario" .yaml)-$stamp}
mkdir -p "$RUNS_DIR"

# the replicas: all running and not stopped by a previous freeze
for p in $LLAMA_PORTS; do
  f=$RUN_DIR/llama-$p.pid
  pid_alive "$f" && kill -CONT "$(cat "$f")" 2>/dev/null || true
done
"$here/start-llama.sh" >/dev/null

"$here/stop-all.sh" routers haq-proxy >/dev/null

# the scenario files name the default ports and paths; set them from this environment
# (replica i: LLAMA_PORTS[i], HAQ_LISTENS[i], its pid file and restart command here)
sets=(--set "target.url=http://127.0.0.1:$ROUTER_PORT/v1")
i=0
lis=($HAQ_LISTENS)
for p in $LLAMA_PORTS; do
  sets+=(--set "target.replicas[$i].upstream=127.0.0.1:$p")
  [ "$router" != nginx-direct ] && sets+=(--set "target.replicas[$i].listen=${lis[$i]}")
  sets+=(--set "target.replicas[$i].process.pid_file=$RUN_DIR/llama-$p.pid")
  sets+=(--set "target.replicas[$i].process.restart=LLAMA_WAIT=0 $here/start-llama.sh $p")
  i=$((i + 1))
done

# `haq proxy`: haq's listen addresses, relaying to the llama-servers, before the router
# starts (vllm-router and sglang-router do not listen until their workers answer); the
# run borrows them from it (the same sockets) and gives them back at its end.
export HAQ_PROXY_DIR=${HAQ_PROXY_DIR:-$RUN_DIR/haq-proxy}
if [ "$router" != nginx-direct ]; then
  launch haq-proxy "$HAQ" proxy "$scenario" "${sets[@]}" >/dev/null
  for l in $HAQ_LISTENS; do wait_port "${l##*:}" 30 "$RUN_DIR/haq-proxy.pid"; done
fi

rname=$router
case $router in
  vllm-router|sglang-router|litellm|nginx)
    export UPSTREAMS=$HAQ_LISTENS
    "$here/start-$router.sh" >/dev/null ;;
  nginx-direct)
    unset UPSTREAMS; . "$here/env.sh"; export UPSTREAMS
    rname=nginx
    "$here/start-nginx.sh" >/dev/null ;;
  *) echo "unknown router $router" >&2; exit 2 ;;
esac

logs="$rname haq-proxy"
[ "$rname" = nginx ] && logs="nginx nginx-access nginx-error haq-proxy"
declare -A off
for l in $logs; do off[$l]=$(stat -c %s "$LOG_DIR/$l.log" 2>/dev/null || echo 0); done
for p in $LLAMA_PORTS; do off[llama-$p]=$(stat -c %s "$LOG_DIR/llama-$p.log" 2>/dev/null || echo 0); done

echo "== $router: haq run $scenario -> $out"
set +e
"$HAQ" run "$scenario" --out "$out" "${sets[@]}" "$@"
rc=$?
set -e
sleep 1
mkdir -p "$out/realstack"
for l in "${!off[@]}"; do
  tail -c +$((off[$l] + 1)) "$LOG_DIR/$l.log" >"$out/realstack/$l.log" 2>/dev/null || true
done
{
  echo "router=$router upstreams=${UPSTREAMS:-} rc=$rc"
  [ -f "$RUN_DIR/litellm.yaml" ] && [ "$router" = litellm ] && cat "$RUN_DIR/litellm.yaml"
  [ "$rname" = nginx ] && cat "$RUN_DIR/nginx/nginx.conf"
} >"$out/realstack/stack.txt"
"$here/stop-all.sh" routers haq-proxy >/dev/null
echo "== haq exit $rc; router logs in $out/realstack/"
exit $rc
