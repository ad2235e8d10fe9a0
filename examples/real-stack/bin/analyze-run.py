#!/usr/bin/env python3
"""Put a haq run and the real stack's own logs on one time line (ground truth for haq's verdicts).

    analyze-run.py RUN_DIR [--all]

Reads RUN_DIR/trace.jsonl (haq: faults, heals, replacement stages, proxy_request/proxy_end,
the client's requests and outcomes) and RUN_DIR/realstack/*.log (copied there by
run-haq.sh; every line stamped with CLOCK_MONOTONIC by tslog.py, the trace's clock; nginx's
access log carries $msec, wall clock, mapped through run_start.wall). Prints, in seconds
from the first fault: what the router logged about upstreams (failed sends, circuit
breaker, health, cooldown, connect() failed, ...), every upstream request haq's proxy saw,
every connect refused at a dead replica's closed listener, every client request that
failed, haq's verdicts (report.json), and a per-replica count of upstream attempts the router
made after the fault (from its own log where it names them).
"""
import datetime
import json
import os
import re
import sys
from collections import Counter, defaultdict

PATTERNS = re.compile(
    r"Failed to send|Circuit breaker|circuit|unhealthy|Removing|removed|health check|"
    r"marked|cooldown|Cooldown|APIConnectionError|Connection ?Error|connect\(\) failed|"
    r"prematurely|temporarily disabled|no live upstreams|upstream timed out|"
    r"status_code=5|Exception|error sending|retry|Retry|Worker.*(healthy|unhealthy)|"
    r"reset by peer|Connection refused|502|503",
)


def load_trace(run):
    evs = []
    with open(os.path.join(run, "trace.jsonl")) as f:
        for line in f:
            try:
                evs.append(json.loads(line))
            except ValueError:
                pass
    return evs


def main():
    run = sys.argv[1]
    show_all = "--all" in sys.argv
    evs = load_trace(run)
    start = evs[0]
    mono0 = start["mono_ns"] / 1e9
    wall0 = datetime.datetime.fromisoformat(start["wall"].replace("Z", "+00:00")).timestamp()
    faults = [e for e in evs if e["ev"] == "fault"]
    t_fault = (faults[0]["t"] / 1e6) if faults else 0.0
    print(f"run {run}")
    rep = os.path.join(run, "report.json")
    if os.path.exists(rep):
        with open(rep) as f:
            for v in json.load(f).get("verdicts", []):
                if v["status"] != "NOT_EVALUATED":
                    print(f"  verdict {v['name']}: {v['status']} - {v['summary'][:200]}")
    for e in evs:
        if e["ev"] in ("fault", "heal", "replacement", "observation", "exited"):
            rel = e["t"] / 1e6 - t_fault
            d = {k: v for k, v in e.items() if k not in ("ev", "t")}
            print(f"  haq  {rel:+9.3f}s {e['ev']}: {json.dumps(d)[:260]}")
    print(f"  (t=0: first fault at trace {t_fault:.3f}s; {faults[0]['replica'] if faults else '-'})")

    rows = []
    # router logs
    rdir = os.path.join(run, "realstack")
    per_up = defaultdict(list)
    for name in sorted(os.listdir(rdir)) if os.path.isdir(rdir) else []:
        path = os.path.join(rdir, name)
        if not name.endswith(".log"):
            continue
        src = name[:-4]
        for line in open(path, errors="replace"):
            m = re.match(r"^\S+Z mono=([0-9.]+) (.*)$", line.rstrip("\n"))
            if m:
                t = float(m.group(1)) - mono0
                text = m.group(2)
            elif src == "nginx-access":
                # $msec status ...
                try:
                    t = float(line.split()[0]) - wall0
                except ValueError:
                    continue
                text = line.rstrip("\n")
            elif src == "nginx-error":
                m2 = re.match(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) (.*)$", line.rstrip("\n"))
                if not m2:
                    continue
                ts = datetime.datetime.strptime(m2.group(1), "%Y/%m/%d %H:%M:%S")
                # nginx logs local time; this machine runs in UTC
                t = ts.replace(tzinfo=datetime.timezone.utc).timestamp() - wall0
                text = m2.group(2)
            else:
                continue
            if src.startswith("llama-"):
                continue
            if src == "nginx-access":
                ups = re.search(r"up=(\S+(?:, \S+)*) us=(\S+(?:, \S+)*)", text)
                if ups and t - t_fault >= 0:
                    for u, s in zip(ups.group(1).split(", "), ups.group(2).split(", ")):
                        per_up[u].append((t - t_fault, s))
                if show_all or (" 200 " not in text[:20] or ", " in text):
                    rows.append((t - t_fault, src, text))
                continue
            m3 = re.search(r"worker_url=(\S+)", text)
            if m3 and "Failed to send" in text and t - t_fault >= 0:
                per_up[m3.group(1)].append((t - t_fault, "failed_send"))
            if show_all or PATTERNS.search(text):
                rows.append((t - t_fault, src, text))

    # haq proxy + client
    by_id = {}
    for e in evs:
        if e["ev"] == "request":
            by_id[e["id"]] = {"sent": e["t"] / 1e6, "probe": e.get("probe")}
        elif e["ev"] == "end":
            by_id.setdefault(e["id"], {})["end"] = e
    routed = defaultdict(list)
    refused = defaultdict(list)
    for e in evs:
        if e["ev"] == "proxy_request":
            routed[e["replica"]].append((e["t"] / 1e6 - t_fault, e.get("id")))
            by_id.setdefault(e.get("id"), {})["replica"] = e["replica"]
        if e["ev"] == "proxy_refused":
            refused[e["replica"]].append(e["t"] / 1e6 - t_fault)
            rows.append((e["t"] / 1e6 - t_fault, "haq-proxy", f"connect refused {e['replica']} peer={e.get('peer')} how={e.get('how')}"))
        if e["ev"] == "proxy_end" and e.get("end") != "completed":
            rows.append((e["t"] / 1e6 - t_fault, "haq-proxy", f"proxy_end {e['replica']} id={e.get('id')} end={e.get('end')} events={e.get('events')} status={e.get('status')}"))
    for rid, r in by_id.items():
        end = r.get("end")
        if end and end.get("outcome") != "completed":
            rows.append((end["t"] / 1e6 - t_fault, "haq-client", f"{rid} {end.get('outcome')} status={end.get('status')} counted={end.get('counted')} replica={r.get('replica')} detail={str(end.get('detail'))[:120]}"))
    rows.sort(key=lambda r: r[0])
    print("\n  time line (s from the fault):")
    for t, src, text in rows:
        if t < -2 and not show_all:
            continue
        print(f"  {t:+9.3f}s {src:14s} {text[:300]}")

    print("\n  upstream requests seen by haq's proxy after the fault, per replica:")
    for rep, lst in sorted(routed.items()):
        after = [x for x in lst if x[0] >= 0]
        print(f"    {rep}: {len(after)} after (last {after[-1][0]:+.3f}s)" if after else f"    {rep}: 0 after")
    for rep, lst in sorted(refused.items()):
        after = [x for x in lst if x >= 0]
        if after:
            print(f"    {rep}: {len(after)} connects refused at its closed listener after the fault, first {after[0]:+.3f}s, last {after[-1]:+.3f}s (health checks included)")
    if per_up:
        print("  upstream attempts the router itself logged after the fault:")
        for u, lst in sorted(per_up.items()):
            c = Counter(s for _, s in lst)
            print(f"    {u}: {len(lst)} ({dict(c)}), first {lst[0][0]:+.3f}s, last {lst[-1][0]:+.3f}s")
    outcomes = Counter((r.get("end") or {}).get("outcome") for r in by_id.values() if r.get("sent", 0) >= t_fault)
    print(f"  client outcomes of requests sent after the fault: {dict(outcomes)}")


if __name__ == "__main__":
    main()
