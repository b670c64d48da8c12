#!/usr/bin/env bash
# Benchmark the original TypeScript store (seed harness) and agentmesh side by side.
#
# Usage: bench/compare.sh [--quick] [--only=a,b] [--shared DIR]
#        bench/compare.sh --pg [--quick] [--only=pg-a,pg-b] [--peers=a,b|none]
#                         [--database-url=URL]
#
#   --quick       every N divided by 10 (smoke run), passed to both benchmarks
#   --only=a,b    run only these groups: enqueue, claim-depth, claim-with-deps,
#                 pending-events, ledger, http (ours only: the
#                 daemon under 8 HTTP clients, with two requests per task and
#                 with one complete-and-claim per task, its store under 8
#                 threads, the same HTTP load with no store behind it, and
#                 the claim-then-complete loads over HTTP and on the store
#                 with 32 clients), floor (ours only:
#                 what an fdatasync of 4 KiB, a bare SQLite commit, a bare
#                 drain and a round trip through the store's writer thread
#                 cost on this machine), reads (ours only: claims of 8
#                 threads on a 100k queue alone, beside a reader looping
#                 status and the pending list, and beside a thread that only
#                 spins on the CPU); the seed side skips the last three and
#                 their rows show with empty seed columns
#   --shared DIR  folder holding bench/seed-harness and reference/seeds
#                 (default: ../shared relative to the repo root)
#   --pg          PostgreSQL instead of the seed: agentmesh's groups
#                 pg-claim-depth, pg-throughput and pg-floor (or those --only
#                 names) and, when bench/peers/run.sh exists, the peers
#                 (graphile-worker, pg-boss, procrastinate; --peers=a,b picks,
#                 --peers=none skips them), on the same server, one after the
#                 other, joined into one table by bench/compare_pg.py
#   --pg-cases=TEXT,...  only agentmesh's pg cases whose name contains one of
#                 these (for paired runs of one load)
#   --pg-depths=N,... --pg-tasks=N  other sizes for agentmesh's pg-claim-depth
#                 and pg-throughput (the peers keep theirs: bench/peers/sizes.json)
#   --database-url=URL  the database of --pg (default
#                 postgres://postgres@127.0.0.1:5432/test); every case and
#                 peer works in a schema of its own and drops it
#
# The seed harness is copied to target/seed-harness/ (git-ignored) and run there;
# its node_modules is kept between runs, so only the first run pays for
# `npm install`. The generated seed store source stays inside that copy.
#
# Without --pg our bench runs twice, one run after the other: with
# --durability=full (every acknowledged write fsynced, the default) and with
# --durability=process-crash-only (synchronous=NORMAL, as the seed's store runs).
# The table's "full" columns are the first run, its "relaxed" columns the second:
# relaxed over seed ops/s says whether the same guarantee as the seed's costs more
# than it did, full over relaxed ops/s what the fsync of every commit costs. See
# bench/README.md for how to read it.
#
# Output (all under target/bench/):
#   seed.jsonl               seed harness JSON lines
#   agentmesh.jsonl          `agentmesh-bench --durability=full` JSON lines
#   agentmesh-relaxed.jsonl  `agentmesh-bench --durability=process-crash-only`
#   compare.md               Markdown table joined on (case, n) by
#                            `bench/compare.py seed agentmesh agentmesh-relaxed`,
#                            also printed to stdout
# and with --pg:
#   agentmesh-pg.jsonl  agentmesh's pg-* lines
#   peers/all.jsonl     the peers' lines (and peers/<system>.jsonl, by run.sh)
#   compare-pg.md       one table: agentmesh and every peer per (case, n)
set -uo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || exit 2
shared=$root/../shared
bench_args=()
pg=0 quick=() pg_sizes=() only='' peers='' database_url=postgres://postgres@127.0.0.1:5432/test
while [ $# -gt 0 ]; do
    case $1 in
        --quick) bench_args+=("$1"); quick=(--quick) ;;
        --only=*) bench_args+=("$1"); only=${1#--only=} ;;
        --pg) pg=1 ;;
        --peers=*) peers=${1#--peers=} ;;
        --pg-depths=* | --pg-tasks=* | --pg-cases=*) pg_sizes+=("$1") ;;
        --database-url) [ $# -ge 2 ] || { echo "compare.sh: --database-url needs a URL" >&2; exit 2; }
                        database_url=$2; shift ;;
        --database-url=*) database_url=${1#--database-url=} ;;
        --shared) [ $# -ge 2 ] || { echo "compare.sh: --shared needs a DIR" >&2; exit 2; }
                  shared=$2; shift ;;
        --shared=*) shared=${1#--shared=} ;;
        -h | --help) sed -n '2,/^set /s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "compare.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

out=$root/target/bench
note() { echo "compare.sh: $*" >&2; }

# ── PostgreSQL: agentmesh's pg groups and the peers on one server ────────────
if [ $pg -eq 1 ]; then
    mkdir -p "$out"
    groups=${only:-pg-claim-depth,pg-throughput,pg-floor}
    note "agentmesh bench --only=$groups ${quick[*]} ..."
    (cd "$root" && cargo run --release -q -p agentmesh-bench -- "${quick[@]}" "${pg_sizes[@]}" --only="$groups" \
        --database-url="$database_url") > "$out/agentmesh-pg.jsonl"
    ours_rc=$?
    [ $ours_rc -eq 0 ] || note "agentmesh side FAILED (exit $ours_rc); see stderr above"
    peers_rc=0
    mkdir -p "$out/peers"
    : > "$out/peers/all.jsonl"
    if [ "$peers" = none ]; then
        note "peers skipped (--peers=none)"
    elif [ -x "$root/bench/peers/run.sh" ]; then
        peer_args=("${quick[@]}")
        [ -z "$peers" ] || peer_args+=(--only="$peers")
        note "peers ${peer_args[*]:-(full)} ..."
        PEERS_DATABASE_URL=$database_url "$root/bench/peers/run.sh" "${peer_args[@]}" > /dev/null
        peers_rc=$?
        [ $peers_rc -eq 0 ] || note "peers FAILED (exit $peers_rc); see stderr above"
    else
        note "no bench/peers/run.sh: agentmesh's lines only"
    fi
    python3 "$root/bench/compare_pg.py" "$out/agentmesh-pg.jsonl" "$out/peers/all.jsonl" | tee "$out/compare-pg.md"
    note "wrote $out/{agentmesh-pg.jsonl,peers/all.jsonl,compare-pg.md}"
    [ $ours_rc -eq 0 ] && [ $peers_rc -eq 0 ]
    exit
fi

harness_src=$shared/bench/seed-harness
seeds=$shared/reference/seeds
harness=$root/target/seed-harness
for d in "$harness_src" "$seeds"; do
    [ -d "$d" ] || { echo "compare.sh: not a directory: $d" >&2; exit 2; }
done
mkdir -p "$harness" "$out"

# ── Seed side ─────────────────────────────────────────────────────────────────
run_seed() {
    # Refresh the copy (everything but node_modules); the source is read-only.
    find "$harness" -mindepth 1 -maxdepth 1 ! -name node_modules -exec rm -rf {} +
    cp -R "$harness_src"/. "$harness"/ &&
        find "$harness" -path "$harness/node_modules" -prune -o -exec chmod u+w {} + || return 1
    (cd "$harness" && ./extract.sh "$seeds" >&2) || return 1
    # Reinstall only when node_modules is missing or the lock file changed.
    if ! cmp -s "$harness_src/package-lock.json" "$harness/node_modules/.seed-harness-lock" 2>/dev/null; then
        note "npm install in $harness (builds better-sqlite3, about a minute) ..."
        (cd "$harness" && npm install --no-audit --no-fund --loglevel=error >&2) || return 1
        cp "$harness_src/package-lock.json" "$harness/node_modules/.seed-harness-lock"
    fi
    note "seed bench ${bench_args[*]:-(full)} ..."
    (cd "$harness" && npm run --silent bench -- "${bench_args[@]}") > "$out/seed.jsonl"
}
: > "$out/seed.jsonl"
run_seed; seed_rc=$?
[ $seed_rc -eq 0 ] || note "seed side FAILED (exit $seed_rc); see stderr above"

# ── Our side, in both durability modes ────────────────────────────────────────
run_ours() { # DURABILITY FILE
    note "agentmesh bench --durability=$1 ${bench_args[*]:-(full)} ..."
    (cd "$root" && cargo run --release -q -p agentmesh-bench -- --durability="$1" "${bench_args[@]}") > "$2"
    local rc=$?
    if [ $rc -ne 0 ]; then
        note "agentmesh side ($1) FAILED (exit $rc): missing or broken agentmesh-bench; showing what it printed"
    elif [ ! -s "$2" ]; then
        note "agentmesh side ($1) printed no results"
    fi
    return $rc
}
run_ours full "$out/agentmesh.jsonl"; ours_rc=$?
run_ours process-crash-only "$out/agentmesh-relaxed.jsonl"; relaxed_rc=$?

# ── Table ─────────────────────────────────────────────────────────────────────
python3 "$root/bench/compare.py" "$out/seed.jsonl" "$out/agentmesh.jsonl" "$out/agentmesh-relaxed.jsonl" |
    tee "$out/compare.md"
note "wrote $out/{seed.jsonl,agentmesh.jsonl,agentmesh-relaxed.jsonl,compare.md}"
[ $seed_rc -eq 0 ] && [ $ours_rc -eq 0 ] && [ $relaxed_rc -eq 0 ]
