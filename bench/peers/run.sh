#!/usr/bin/env bash
# Benchmark the PostgreSQL job queues a user would otherwise pick: graphile-worker,
# pg-boss and procrastinate, each doing enqueue -> fetch -> complete on the local
# PostgreSQL (see bench/peers/README.md).
#
# Usage: bench/peers/run.sh [--quick] [--only=graphile-worker,pg-boss,procrastinate]
#
#   --quick     smaller sizes (depths up to 100k, 200 samples, 5k jobs), ~4 min
#   --only=a,b  run only these peers
#
# stdout: one JSON line per case, in the seed harness's format plus `system`
# (and `clients` for the throughput cases). stderr: progress and one
# `check ok|FAIL` line per behaviour check. The lines are also written, one file
# per system, to target/bench/peers/<system>.jsonl, for bench/compare.py.
# Exit status 1 when a peer failed a check or did not run to the end.
#
# PEERS_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test) names the
# database; each peer works in a schema of its own (peers_graphile_worker,
# peers_pg_boss, peers_procrastinate), created and dropped by the run.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null) || root=$(cd "$here/../.." && pwd)
all=(graphile-worker pg-boss procrastinate)
args=()
only=("${all[@]}")
while [ $# -gt 0 ]; do
    case $1 in
        --quick) args+=(--quick) ;;
        --only=*) IFS=, read -r -a only <<< "${1#--only=}" ;;
        -h | --help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
for peer in "${only[@]}"; do
    case " ${all[*]} " in
        *" $peer "*) ;;
        *) echo "run.sh: unknown peer: $peer (one of: ${all[*]})" >&2; exit 2 ;;
    esac
done
note() { echo "run.sh: $*" >&2; }

"$here/setup.sh" || { note "setup failed"; exit 2; }

out=$root/target/bench/peers
mkdir -p "$out"
all_lines=$out/all.jsonl
: > "$all_lines"
# Whatever happens, leave no peer schema behind.
trap 'node "$here/node/cleanup.js"' EXIT

failed=()
for peer in "${only[@]}"; do
    case $peer in
        graphile-worker) cmd=(node "$here/node/graphile-worker.js") ;;
        pg-boss) cmd=(node "$here/node/pg-boss.js") ;;
        procrastinate) cmd=("$here/.venv/bin/python" "$here/python/main.py") ;;
    esac
    note "$peer ${args[*]:-(full)} ..."
    start=$SECONDS
    "${cmd[@]}" "${args[@]}" | tee -a "$all_lines"
    rc=${PIPESTATUS[0]}
    note "$peer done in $((SECONDS - start)) s (exit $rc)"
    [ "$rc" -eq 0 ] || failed+=("$peer")
done

# One file per system, so compare.py can join any of them with agentmesh's lines.
python3 - "$all_lines" "$out" <<'EOF'
import json, sys
from pathlib import Path
by_system = {}
for line in Path(sys.argv[1]).read_text().splitlines():
    try:
        row = json.loads(line)
    except ValueError:
        continue
    if isinstance(row, dict) and "system" in row:
        by_system.setdefault(row["system"], []).append(line)
for system, lines in by_system.items():
    Path(sys.argv[2], f"{system}.jsonl").write_text("\n".join(lines) + "\n")
EOF
note "wrote $out/{all,<system>}.jsonl"

if [ ${#failed[@]} -gt 0 ]; then
    note "FAILED: ${failed[*]}"
    exit 1
fi
