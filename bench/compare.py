#!/usr/bin/env python3
"""Join bench JSONL files on (case, n) and print a Markdown comparison table.

Usage: bench/compare.py SEED.jsonl OURS.jsonl [RELAXED.jsonl]

Each line is {"case","n","ops","seconds","ops_per_s","p50_us","p99_us"}; lines
that are not JSON objects are ignored, and a missing file counts as empty.
Rows follow the seed order; a row only our side has goes after the rows of
the case it follows on our side, with the seed columns left empty.

With a third file (bench/compare.sh passes our run with
--durability=process-crash-only there, OURS being the --durability=full run),
the columns of OURS say "full" instead of "ours", and six columns follow the
usual ten: its ops/s, its ops/s over the seed's, the full run's ops/s over its,
its p50, the seed's p50 over its, and its p99. Without it the table is the
two-file table, so any two runs can still be set side by side.
"""
import json
import sys


def load(path):
    rows = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict) and "case" in r and "n" in r:
                    rows[(r["case"], r["n"])] = r
    except FileNotFoundError:
        pass
    return rows


def merged_keys(seed, *others):
    keys = list(seed)
    for ours in others:
        prev = None
        for k in ours:
            if k not in keys:
                # After the last row of the case that precedes it on this side.
                at = [i for i, (case, _) in enumerate(keys) if prev and case == prev[0]]
                keys.insert(at[-1] + 1 if at else 0, k)
            prev = k
    return keys


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
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.strip().splitlines()[2])
    seed, ours = load(sys.argv[1]), load(sys.argv[2])
    relaxed = load(sys.argv[3]) if len(sys.argv) == 4 else None
    # With the relaxed run beside it, OURS is the full-durability run: say so.
    o = "ours" if relaxed is None else "full"
    header = (f"| case | n | seed ops/s | {o} ops/s | ops/s ratio ({o}/seed) "
              f"| seed p50 µs | {o} p50 µs | p50 ratio (seed/{o}) | seed p99 µs | {o} p99 µs |")
    align = "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    if relaxed is not None:
        header += (" relaxed ops/s | ops/s ratio (relaxed/seed) | ops/s ratio (full/relaxed) "
                   "| relaxed p50 µs | p50 ratio (seed/relaxed) | relaxed p99 µs |")
        align += " ---: | ---: | ---: | ---: | ---: | ---: |"
    print(header)
    print(align)
    for key in merged_keys(seed, ours, *([relaxed] if relaxed is not None else [])):
        s, o = seed.get(key, {}), ours.get(key, {})
        cells = [key[0], f"{key[1]:,}",
                 num(s.get("ops_per_s")), num(o.get("ops_per_s")),
                 ratio(o.get("ops_per_s"), s.get("ops_per_s")),
                 num(s.get("p50_us")), num(o.get("p50_us")),
                 ratio(s.get("p50_us"), o.get("p50_us")),
                 num(s.get("p99_us")), num(o.get("p99_us"))]
        if relaxed is not None:
            r = relaxed.get(key, {})
            cells += [num(r.get("ops_per_s")),
                      ratio(r.get("ops_per_s"), s.get("ops_per_s")),
                      ratio(o.get("ops_per_s"), r.get("ops_per_s")),
                      num(r.get("p50_us")), ratio(s.get("p50_us"), r.get("p50_us")),
                      num(r.get("p99_us"))]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
