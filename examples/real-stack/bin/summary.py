#!/usr/bin/env python3
"""One block per haq run under RUNS_DIR: haq's verdicts (report.json) next to the router's
own evidence from its log (realstack/*.log, copied there by run-haq.sh).

    summary.py RUNS_DIR

Router evidence counted: vllm-router/sglang-router `Failed to send` lines and circuit
breaker transitions, LiteLLM Router `Connection error` lines (one per attempt) and cooldowns, nginx `connect() failed` and
`upstream prematurely closed` lines; client requests that did not complete (requests.csv).
"""
import csv
import glob
import json
import os
import re
import sys

EVIDENCE = {
    "failed_send": re.compile(r"Failed to send"),
    "breaker": re.compile(r"Circuit breaker state transition: (\S+ -> \S+)"),
    "connection_error": re.compile(r"LiteLLM Router:.*Connection error"),
    "cooldown": re.compile(r"[Cc]ooldown|cooling down"),
    "connect_failed": re.compile(r"connect\(\) failed"),
    "premature_close": re.compile(r"prematurely closed"),
}


def router_evidence(run):
    counts = {}
    breaker = []
    for path in sorted(glob.glob(os.path.join(run, "realstack", "*.log"))):
        if os.path.basename(path).startswith("llama-"):
            continue
        with open(path, errors="replace") as f:
            for line in f:
                for k, rx in EVIDENCE.items():
                    m = rx.search(line)
                    if m:
                        counts[k] = counts.get(k, 0) + 1
                        if k == "breaker":
                            breaker.append(m.group(1))
    return counts, breaker


def main():
    runs = sys.argv[1] if len(sys.argv) > 1 else "."
    for rep in sorted(glob.glob(os.path.join(runs, "*", "report.json"))):
        run = os.path.dirname(rep)
        with open(rep) as f:
            d = json.load(f)
        print(f"## {os.path.basename(run)}: result {d.get('result')}, valid {d.get('valid')}")
        for v in d.get("verdicts", []):
            if v["status"] != "NOT_EVALUATED":
                print(f"   {v['name']:15s} {v['status']:8s} {v['summary'][:220]}")
        fc = {x["kind"]: x["count"] for x in d.get("finding_counts", [])}
        if fc:
            print(f"   findings: {fc}")
        counts, breaker = router_evidence(run)
        print(f"   router log: {counts or 'nothing about upstreams'}" + (f", breaker {breaker}" if breaker else ""))
        rows = os.path.join(run, "requests.csv")
        if os.path.exists(rows):
            with open(rows) as f:
                bad = [r for r in csv.DictReader(f) if r.get("outcome") not in ("completed", None)]
            print(f"   client requests not completed: {len(bad)}" + (f" ({', '.join(r.get('id', '?') + ':' + r.get('outcome', '?') for r in bad[:6])})" if bad else ""))


if __name__ == "__main__":
    main()
