#!/usr/bin/env bash
# Start vllm-router (PyPI vllm-router 0.1.17) on 127.0.0.1:ROUTER_PORT in front of UPSTREAMS: see
# start-rs-router.sh for the flags and the environment.
exec "$(dirname "$0")/start-rs-router.sh" vllm-router
