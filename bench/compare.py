#!/usr/bin/env python3
"""Join two bench JSONL files on (case, n) and print a Markdown comparison table.

Usage: bench/compare.py SEED.jsonl OURS.jsonl

Each line is {"case","n","ops","seconds","ops_per_s","p50_us","p99_us"}; lines
that are not JSON objects are ignored, and a missing file counts as empty.
Rows follow the seed order; a row only our side has goes after the rows of
the case it follows on our side, with the seed columns left empty.
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


def merged_keys(seed, ours):
    keys = list(seed)
    prev = None
    for k in ours:
        if k not in keys:
            # After the last row of the case that precedes it on our side.
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
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2])
    seed, ours = load(sys.argv[1]), load(sys.argv[2])
    print("| case | n | seed ops/s | ours ops/s | ops/s ratio (ours/seed) "
          "| seed p50 µs | ours p50 µs | p50 ratio (seed/ours) | seed p99 µs | ours p99 µs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in merged_keys(seed, ours):
        s, o = seed.get(key, {}), ours.get(key, {})
        cells = [key[0], f"{key[1]:,}",
                 num(s.get("ops_per_s")), num(o.get("ops_per_s")),
                 ratio(o.get("ops_per_s"), s.get("ops_per_s")),
                 num(s.get("p50_us")), num(o.get("p50_us")),
                 ratio(s.get("p50_us"), o.get("p50_us")),
                 num(s.get("p99_us")), num(o.get("p99_us"))]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
