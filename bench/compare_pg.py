#!/usr/bin/env python3
"""Join agentmesh's PostgreSQL cases and the peers' on (case, n) in one Markdown table.

Usage: bench/compare_pg.py AGENTMESH.jsonl [PEERS.jsonl]

AGENTMESH.jsonl holds `agentmesh-bench --only=pg-...` lines (system
`agentmesh`); PEERS.jsonl holds `bench/peers/run.sh` lines, each with its
`system`. Lines that are not JSON objects are ignored, a missing file counts as
empty, and a line without `system` in PEERS.jsonl counts as `peer`.

One row per (case, n, system): agentmesh first, then the peers, in the order
agentmesh printed its cases (cases only the peers have come last). On a peer's
row, `agentmesh ÷ peer ops/s` is agentmesh's throughput over the peer's and
`peer ÷ agentmesh p50` the peer's median over agentmesh's: above 1 agentmesh is
ahead. The floors of the same run (`pg-floor`, and `pg-throughput`'s
`pg-task-writes-floor-*`, the loop's writes without its rules) show as system
`postgres`. Against `pg-floor`: `p50 ÷ insert floor` is a single-client claim case's
median over that of `pg-insert-floor` (one bare INSERT + COMMIT round trip),
and `ops/s ÷ insert floor` a K-client case's throughput over that of
`pg-insert-floor-K-clients` (the HTTP case has 8 clients).
"""
import re
import json
import sys


def load(path, default_system):
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict) and "case" in r and "n" in r:
                    floor = r["case"].startswith(("pg-select-floor", "pg-insert-floor", "pg-task-writes-floor", "pgbench-"))
                    r.setdefault("system", "postgres" if floor else default_system)
                    rows.append(r)
    except FileNotFoundError:
        pass
    return rows


def num(x):
    if x is None:
        return ""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return ""
    r = a / b
    return f"{r:,.0f}×" if r >= 100 else f"{r:.2f}×"


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[2])
    ours = load(sys.argv[1], "agentmesh")
    peers = load(sys.argv[2], "peer") if len(sys.argv) == 3 else []
    keys = []
    for r in ours + peers:
        if (r["case"], r["n"]) not in keys:
            keys.append((r["case"], r["n"]))
    floors = {r["case"]: r for r in ours if r["case"].startswith("pg-insert-floor")}
    print("| case | n | system | ops/s | p50 µs | p99 µs | agentmesh ÷ peer ops/s "
          "| peer ÷ agentmesh p50 | p50 ÷ insert floor | ops/s ÷ insert floor |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for case, n in keys:
        mine = [r for r in ours if (r["case"], r["n"]) == (case, n)]
        theirs = [r for r in peers if (r["case"], r["n"]) == (case, n)]
        am = next((r for r in mine if r["system"] == "agentmesh"), {})
        clients = re.search(r"-(\d+)-clients", case)
        clients = int(clients.group(1)) if clients else 8 if case == "pg-http-claim-complete" else 1
        floor = floors.get("pg-insert-floor" if clients == 1 else f"pg-insert-floor-{clients}-clients", {})
        for r in mine + theirs:
            is_ours, is_peer = r["system"] == "agentmesh", r in theirs
            cells = [case, f"{n:,}", r["system"],
                     num(r.get("ops_per_s")), num(r.get("p50_us")), num(r.get("p99_us")),
                     ratio(am.get("ops_per_s"), r.get("ops_per_s")) if is_peer else "",
                     ratio(r.get("p50_us"), am.get("p50_us")) if is_peer else "",
                     ratio(r.get("p50_us"), floor.get("p50_us")) if is_ours and clients == 1 else "",
                     ratio(r.get("ops_per_s"), floor.get("ops_per_s")) if is_ours and clients > 1 else ""]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
