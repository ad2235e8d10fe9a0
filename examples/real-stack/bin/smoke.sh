#!/usr/bin/env bash
# Smoke test: llama-servers up, then each router in turn straight in front of them
# (no haq), one streaming chat completion through it with curl -N (Gemma is a base model:
# tiny prompt, temperature 0), the raw SSE saved to CAPTURE_DIR/through-ROUTER.sse, router down.
#   bin/smoke.sh [ROUTER...]     (default: vllm-router sglang-router litellm nginx)
# Env (see env.sh): CAPTURE_DIR (REALSTACK_DIR/captures), LITELLM_MASTER_KEY.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
CAPTURE_DIR=${CAPTURE_DIR:-$REALSTACK_DIR/captures}
mkdir -p "$CAPTURE_DIR"
"$here/start-llama.sh" >/dev/null
rc=0
for r in ${*:-vllm-router sglang-router litellm nginx}; do
  "$here/start-$r.sh" >/dev/null
  out=$CAPTURE_DIR/through-$r.sse
  curl -sN --max-time 60 "http://127.0.0.1:$ROUTER_PORT/v1/chat/completions" \
    -H "authorization: Bearer ${LITELLM_MASTER_KEY:-sk-realstack-local}" \
    -H 'content-type: application/json' -H "x-request-id: smoke-$r" \
    -D "$out.headers" -o "$out" \
    -d "{\"model\":\"$MODEL_NAME\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":16,\"temperature\":0,\"stream\":true}"
  n=$(grep -c '^data: {' "$out" || true)
  if grep -q '^data: \[DONE\]' "$out" && [ "$n" -ge 10 ]; then
    echo "ok   $r: $n data events + [DONE] ($out)"
  else
    echo "FAIL $r: $n data events ($out)"; rc=1
  fi
  "$here/stop-all.sh" "$r" >/dev/null
done
exit $rc
