#!/usr/bin/env bash
# Install the peer benchmarks' pinned packages into bench/peers/node_modules
# (from package-lock.json, with `npm ci`) and bench/peers/.venv (from
# requirements.txt, every package pinned, with `pip --no-deps`).
#
# Usage: bench/peers/setup.sh
#
# Idempotent: a part is installed again only when it is missing or its lock
# file changed since it was installed, so once installed this needs no
# network. Needs Node.js 20+ with npm, and Python 3.11+ (PEERS_PYTHON picks
# the interpreter; default python3.11, else python3).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
note() { echo "setup.sh: $*" >&2; }

# ── Node.js: graphile-worker, pg-boss, pg ─────────────────────────────────────
command -v node >/dev/null || { note "node not found (Node.js 20+ needed)"; exit 1; }
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
    { note "Node.js $(node --version) is too old: 20+ needed"; exit 1; }
if cmp -s package-lock.json node_modules/.peers-lock 2>/dev/null; then
    note "node_modules up to date"
else
    note "npm ci (graphile-worker, pg-boss) ..."
    npm ci --no-audit --no-fund --loglevel=error >&2
    cp package-lock.json node_modules/.peers-lock
fi

# ── Python: procrastinate ─────────────────────────────────────────────────────
if [ -x .venv/bin/python ] && cmp -s requirements.txt .venv/.peers-requirements 2>/dev/null; then
    note ".venv up to date"
else
    python=${PEERS_PYTHON:-}
    if [ -z "$python" ]; then
        for candidate in python3.11 python3; do
            if command -v "$candidate" >/dev/null &&
                "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))'; then
                python=$candidate
                break
            fi
        done
    fi
    [ -n "$python" ] || { note "no Python 3.11+ found (set PEERS_PYTHON)"; exit 1; }
    note "venv with $("$python" --version) and requirements.txt (procrastinate) ..."
    rm -rf .venv
    "$python" -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements.txt >&2
    .venv/bin/python -m pip check --disable-pip-version-check >&2
    cp requirements.txt .venv/.peers-requirements
fi
