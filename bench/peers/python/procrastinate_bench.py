"""procrastinate: claim latency at queue depth and claim+complete throughput.

Usage: python python/main.py [--quick] [--cases=depth,throughput]

Both cases run procrastinate's own worker (``App.run_worker_async``), which
fetches a job, runs its task and then marks the job succeeded, awaiting each
step; jobs are kept (``delete_jobs="never"``, the default), so a completed job
is a row with status ``succeeded``.

  pg-claim-depth: a worker with concurrency 1 on a queue of N jobs; one sample
    is the time from one task returning to the next task starting, that is the
    worker finishing a job and fetching the next. Each task defers one job
    before it returns (outside the sample), so every fetch sees N waiting jobs.
  pg-claim-complete-K-clients: a worker with concurrency K and ``wait=False``
    over a prefilled queue; it returns once the queue is empty and its jobs
    are finished.

The tables live in their own schema: every connection of the pool sets
``search_path`` to it, and the schema is dropped at the end.

stdout carries one JSON line per case, in the format of bench/peers/node/lib.js;
stderr carries progress and ``check ok|FAIL`` lines. Exit status 1 when a check
failed, 2 on an error.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from pathlib import Path

import procrastinate
import psycopg

SYSTEM = "procrastinate"
SCHEMA = "peers_procrastinate"
QUEUE = "bench"
DATABASE_URL = os.environ.get("PEERS_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
SIZES = Path(__file__).resolve().parent.parent / "sizes.json"


def note(message: str) -> None:
    print(f"[{SYSTEM}] {message}", file=sys.stderr, flush=True)


def round_half_up(x: float, digits: int) -> float:
    scale = 10**digits
    return math.floor(x * scale + 0.5) / scale


def percentile_us(sorted_ns: list[int], p: float) -> float:
    if not sorted_ns:
        return 0.0
    rank = math.ceil(p * len(sorted_ns))
    idx = min(max(rank, 1), len(sorted_ns)) - 1
    return sorted_ns[idx] / 1000


def js_number(x: float | None) -> float | int | None:
    """Numbers as JavaScript's JSON.stringify prints them: 163, not 163.0."""
    if x is None:
        return None
    return int(x) if float(x).is_integer() else x


def result_line(case: str, n: int, ops: int, seconds: float, latencies_ns: list[int] | None, extra: dict | None = None) -> str:
    p50 = p99 = None
    if latencies_ns is not None:
        ordered = sorted(latencies_ns)
        p50 = round_half_up(percentile_us(ordered, 0.5), 1)
        p99 = round_half_up(percentile_us(ordered, 0.99), 1)
    line = {
        "case": case,
        "n": n,
        "ops": ops,
        "seconds": js_number(round_half_up(seconds, 6)),
        "ops_per_s": js_number(round_half_up(ops / seconds if seconds > 0 else 0.0, 1)),
        "p50_us": js_number(p50),
        "p99_us": js_number(p99),
        "system": SYSTEM,
        **(extra or {}),
    }
    return json.dumps(line, separators=(",", ":"))


class Checks:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        shown = f" ({detail})" if detail else ""
        print(f"check {'ok  ' if ok else 'FAIL'} {SYSTEM}: {name}{shown}", file=sys.stderr, flush=True)
        if not ok:
            self.failures.append(name + shown)
        return ok


class Sampler:
    """Same rules as Sampler in bench/peers/node/lib.js."""

    def __init__(self, sz: dict) -> None:
        self.sz = sz
        self.latencies: list[int] = []
        self.warmed = 0
        self.phase_start: int | None = None
        self.sampling = False
        self.done = False

    def add(self, latency_ns: int) -> bool:
        now = time.perf_counter_ns()
        budget_ns = self.sz["sample_budget_s"] * 1e9
        if self.phase_start is None:
            self.phase_start = now - latency_ns
        if not self.sampling:
            self.warmed += 1
            if self.warmed >= self.sz["warmup"] or now - self.phase_start > budget_ns / 10:
                self.sampling = True
                self.phase_start = now
            return True
        self.latencies.append(latency_ns)
        full = len(self.latencies) >= self.sz["samples"]
        late = len(self.latencies) >= self.sz["min_samples"] and now - self.phase_start > budget_ns
        if full or late:
            self.done = True
        return not self.done

    def short_note(self) -> str:
        n = len(self.latencies)
        if n < self.sz["samples"]:
            return f"{n} of {self.sz['samples']} samples within the {self.sz['sample_budget_s']} s budget"
        return ""


async def admin(sql: str) -> list[tuple]:
    """One statement on a connection of its own (outside procrastinate's pool)."""
    async with await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True) as conn:
        cur = await conn.execute(sql)
        return await cur.fetchall() if cur.description else []


async def drop_schema() -> None:
    await admin(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')


async def status_counts() -> dict[str, int]:
    rows = await admin(f'SELECT status::text, count(*) FROM "{SCHEMA}".procrastinate_jobs GROUP BY status')
    return {status: count for status, count in rows}


def show(counts: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "empty"


class Handler:
    """What the bench task does; replaced per case."""

    async def run(self, i: int) -> None:  # pragma: no cover - replaced
        raise NotImplementedError


def make_app(pool_size: int) -> tuple[procrastinate.App, procrastinate.tasks.Task, list[Handler]]:
    connector = procrastinate.PsycopgConnector(
        conninfo=DATABASE_URL,
        kwargs={"options": f"-c search_path={SCHEMA}"},
        min_size=pool_size,
        max_size=pool_size,
    )
    app = procrastinate.App(connector=connector)
    handler: list[Handler] = [Handler()]

    @app.task(name="bench", queue=QUEUE)
    async def bench(i: int) -> None:
        await handler[0].run(i)

    return app, bench, handler


async def fresh_queue(app: procrastinate.App, task, n: int, batch: int) -> None:
    """A new schema holding `n` jobs with args {i: 0..n-1}, added with `batch_defer_async`."""
    await drop_schema()
    await admin(f'CREATE SCHEMA "{SCHEMA}"')
    await app.schema_manager.apply_schema_async()
    start = time.perf_counter()
    for lo in range(0, n, batch):
        await task.batch_defer_async(*({"i": j} for j in range(lo, min(n, lo + batch))))
    fill_s = time.perf_counter() - start
    await admin(f'VACUUM (ANALYZE) "{SCHEMA}".procrastinate_jobs')
    note(f"filled {n} jobs with batch_defer_async in {fill_s:.2f} s")


async def claim_depth(n: int, sz: dict, checks: Checks) -> None:
    app, task, handler = make_app(4)
    async with app.open_async():
        await fresh_queue(app, task, n, sz["fill_batch"])
        sampler = Sampler(sz)
        seen: set[int] = set()
        state = {"started": 0, "duplicates": 0, "next": n, "last_end": 0}
        reached = asyncio.Event()

        class Depth(Handler):
            async def run(self, i: int) -> None:
                at = time.perf_counter_ns()
                if state["started"] > 0 and not sampler.done and not sampler.add(at - state["last_end"]):
                    reached.set()
                state["started"] += 1
                if i in seen:
                    state["duplicates"] += 1
                seen.add(i)
                await task.defer_async(i=state["next"])
                state["next"] += 1
                state["last_end"] = time.perf_counter_ns()

        handler[0] = Depth()
        worker = asyncio.create_task(
            app.run_worker_async(queues=[QUEUE], concurrency=1, wait=True, install_signal_handlers=False)
        )
        await reached.wait()
        # Cancelling stops the worker gracefully: the running job finishes first.
        worker.cancel()
        try:
            await worker
        except asyncio.CancelledError:
            pass

    label = f"pg-claim-depth n={n}"
    if sampler.short_note():
        note(f"{label}: {sampler.short_note()}")
    counts = await status_counts()
    started = state["started"]
    checks.check(f"{label}: no job ran twice", state["duplicates"] == 0, f"{state['duplicates']} duplicates of {started}")
    checks.check(
        f"{label}: every fetched job succeeded, depth held at N",
        counts == {"succeeded": started, "todo": n},
        f"{started} run; {show(counts)}",
    )
    gaps = sampler.latencies
    print(result_line("pg-claim-depth", n, len(gaps), sum(gaps) / 1e9, gaps), flush=True)


async def claim_complete(k: int, sz: dict, checks: Checks) -> None:
    jobs = sz["jobs"]
    # One connection per concurrent job, one for LISTEN, one spare.
    app, task, handler = make_app(k + 2)
    async with app.open_async():
        await fresh_queue(app, task, jobs, sz["fill_batch"])
        seen = bytearray(jobs)
        state = {"ran": 0, "duplicates": 0}

        class Count(Handler):
            async def run(self, i: int) -> None:
                if seen[i]:
                    state["duplicates"] += 1
                seen[i] = 1
                state["ran"] += 1

        handler[0] = Count()
        t0 = time.perf_counter_ns()
        await app.run_worker_async(queues=[QUEUE], concurrency=k, wait=False, install_signal_handlers=False)
        t1 = time.perf_counter_ns()

    label = f"pg-claim-complete-{k}-clients"
    counts = await status_counts()
    checks.check(
        f"{label}: every job ran once",
        state["ran"] == jobs and state["duplicates"] == 0,
        f"{state['ran']} runs, {state['duplicates']} duplicates",
    )
    checks.check(f"{label}: every job succeeded", counts == {"succeeded": jobs}, show(counts))
    print(result_line(label, jobs, state["ran"], (t1 - t0) / 1e9, None, {"clients": k}), flush=True)


async def main(argv: list[str]) -> int:
    quick = False
    cases = ["depth", "throughput"]
    for arg in argv:
        if arg == "--quick":
            quick = True
        elif arg.startswith("--cases="):
            cases = [c for c in arg[len("--cases=") :].split(",") if c]
        else:
            print(f"{SYSTEM}: unknown argument: {arg}", file=sys.stderr)
            return 2
    sz = json.loads(SIZES.read_text())["quick" if quick else "full"]
    checks = Checks()
    try:
        if "depth" in cases:
            for n in sz["depths"]:
                await claim_depth(n, sz, checks)
        if "throughput" in cases:
            for k in sz["clients"]:
                await claim_complete(k, sz, checks)
    finally:
        await drop_schema()
    if checks.failures:
        note(f"FAILED: {len(checks.failures)} check(s)")
        return 1
    return 0


def cli() -> None:
    """Entry point (python/main.py): the App must not be built in ``__main__``."""
    try:
        code = asyncio.run(main(sys.argv[1:]))
    except Exception as exc:  # noqa: BLE001 - report and exit 2, as the Node peers do
        import traceback

        traceback.print_exc()
        print(f"[{SYSTEM}] ERROR: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)
