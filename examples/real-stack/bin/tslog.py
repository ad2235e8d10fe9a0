#!/usr/bin/env python3
"""Stamp every line of stdin with the wall-clock time (UTC, ms) and CLOCK_MONOTONIC (s),
strip ANSI colour codes, append to the file named by argv[1] (or stdout).

Routers log at 1 s resolution (vllm-router, sglang-router) or not at all per request; the
monotonic stamp is the clock of haq's trace (`run_start.mono_ns`), so a router's log line
maps onto a run: t_trace_us = (mono_s * 1e9 - mono_ns) / 1000.

    some-router 2>&1 | tslog.py LOGFILE
"""
import datetime
import re
import sys
import time

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def main() -> None:
    out = open(sys.argv[1], "a", buffering=1) if len(sys.argv) > 1 else sys.stdout
    for raw in iter(sys.stdin.buffer.readline, b""):
        mono = time.clock_gettime(time.CLOCK_MONOTONIC)
        wall = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        line = ANSI.sub("", raw.decode("utf-8", "replace").rstrip("\n"))
        out.write(f"{wall}Z mono={mono:.6f} {line}\n")
        out.flush()


if __name__ == "__main__":
    main()
