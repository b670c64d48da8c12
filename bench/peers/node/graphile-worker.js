'use strict';
// graphile-worker: claim latency at queue depth and claim+complete throughput.
//
// graphile-worker has no public "fetch one job" call: its runner fetches, runs
// the task and deletes the finished job (completion is a DELETE). So every case
// here runs the runner itself:
//   pg-claim-depth: a runner with concurrency 1 on a queue of N jobs; one sample
//     is the time from one task returning to the next task starting, that is the
//     runner completing a job and fetching the next. Each task enqueues one job
//     before it returns (outside the sample), so every fetch sees N waiting jobs.
//   pg-claim-complete-K-clients: `runOnce` with concurrency K over a prefilled
//     queue, defaults (one fetch and one delete per job), and again with the
//     batching preset of graphile-worker's performance page (system
//     "graphile-worker-batched": local queue of 500, batched completion).

const { EventEmitter } = require('node:events');
const { Logger, makeWorkerUtils, run, runOnce } = require('graphile-worker');
const lib = require('./lib');

const SYSTEM = 'graphile-worker';
const SCHEMA = 'peers_graphile_worker';
const TASK = 'bench';
/** The batching options of https://worker.graphile.org/docs/performance. */
const BATCHED_PRESET = {
  worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 },
};

// Warnings and errors only: the default logger writes a line per completed job.
const logger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') process.stderr.write(`[graphile-worker ${level}] ${message}\n`);
});

function options(extra) {
  return { connectionString: lib.DATABASE_URL, schema: SCHEMA, logger, ...extra };
}

/**
 * A new schema holding `n` jobs with payloads {i: 0..n-1}, added with `addJobs`.
 * `flags` go on every job (see claimDepth).
 */
async function freshQueue(n, batch, flags) {
  await lib.dropSchema(SCHEMA);
  const utils = await makeWorkerUtils(options({}));
  await utils.migrate();
  const start = lib.nowNs();
  for (let i = 0; i < n; i += batch) {
    const specs = [];
    for (let j = i; j < Math.min(n, i + batch); j++) specs.push({ identifier: TASK, payload: { i: j }, flags });
    await utils.addJobs(specs);
  }
  const fillS = (lib.nowNs() - start) / 1e9;
  await lib.vacuumAnalyze(SCHEMA, '_private_jobs');
  lib.note(SYSTEM, `filled ${n} jobs with addJobs in ${fillS.toFixed(2)} s`);
  return utils;
}

async function jobRows() {
  return lib.withClient(async (c) => {
    const { rows } = await c.query(
      `select count(*)::int as total, count(*) filter (where locked_at is not null)::int as locked
         from ${lib.quoteSchema(SCHEMA)}._private_jobs`,
    );
    return rows[0];
  });
}

/**
 * Stopping the runner while a task runs can leave that job locked and not
 * deleted (its completion loses the race with the pool's release), so the case
 * stops it idle: every job carries the flag `bench`, and once the samples are
 * taken the runner is told to skip that flag (`forbiddenFlags`, checked before
 * each fetch). Until then it passes no flags, and its fetch query has no flag
 * clause, as for a runner without `forbiddenFlags`.
 */
async function claimDepth(n, sz, checks) {
  const flags = ['bench'];
  const utils = await freshQueue(n, sz.fillBatch, flags);
  const sampler = new lib.Sampler(sz);
  const seen = new Set();
  let started = 0;
  let duplicates = 0;
  let nextPayload = n;
  let lastEnd = 0;
  let idle;
  const idled = new Promise((resolve) => { idle = resolve; });
  const events = new EventEmitter();
  events.on('worker:getJob:empty', () => { if (sampler.done) idle(); });
  const taskList = {
    [TASK]: async (payload) => {
      const at = lib.nowNs();
      if (started > 0 && !sampler.done) sampler.add(at - lastEnd);
      started += 1;
      if (seen.has(payload.i)) duplicates += 1;
      seen.add(payload.i);
      await utils.addJob(TASK, { i: nextPayload++ }, { flags });
      lastEnd = lib.nowNs();
    },
  };
  const runner = await run(options({
    concurrency: 1,
    noHandleSignals: true,
    taskList,
    events,
    forbiddenFlags: () => (sampler.done ? flags : null),
  }));
  await idled;
  // The last job's completion was sent before the empty fetch; let it land.
  let rows = await jobRows();
  for (let tries = 0; rows.locked > 0 && tries < 50; tries++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    rows = await jobRows();
  }
  await runner.stop();
  await runner.promise;
  await utils.release();

  const label = `pg-claim-depth n=${n}`;
  const gaps = sampler.latencies;
  if (sampler.shortNote()) lib.note(SYSTEM, `${label}: ${sampler.shortNote()}`);
  rows = await jobRows();
  checks.check(`${label}: no job ran twice`, duplicates === 0, `${duplicates} duplicates of ${started}`);
  // n prefilled + one enqueued per task run, one deleted per completed job.
  checks.check(
    `${label}: every fetched job completed (deleted), depth held at N`,
    rows.total === n && rows.locked === 0,
    `${started} run, ${rows.total} left, ${rows.locked} locked`,
  );
  const total = gaps.reduce((a, b) => a + b, 0);
  console.log(lib.resultLine({
    caseName: 'pg-claim-depth', n, ops: gaps.length, seconds: total / 1e9, latenciesNs: gaps, system: SYSTEM,
  }));
}

async function claimComplete(k, sz, checks, system, preset) {
  const utils = await freshQueue(sz.jobs, sz.fillBatch, undefined);
  await utils.release();
  const seen = new Uint8Array(sz.jobs);
  let ran = 0;
  let duplicates = 0;
  let t0 = null;
  const events = new EventEmitter();
  events.on('pool:create', () => { t0 = lib.nowNs(); });
  const taskList = {
    [TASK]: async (payload) => {
      if (seen[payload.i]++) duplicates += 1;
      ran += 1;
    },
  };
  await runOnce(options({
    concurrency: k, maxPoolSize: Math.max(10, k + 2), noHandleSignals: true, taskList, events, preset,
  }));
  const t1 = lib.nowNs();
  // runOnce can resolve before the DELETEs of its last jobs commit (the runner
  // does not await a completion before fetching again); they land within a few
  // milliseconds, so wait for them before checking.
  let rows = await jobRows();
  for (let tries = 0; rows.total > 0 && tries < 100; tries++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    rows = await jobRows();
  }

  const label = `pg-claim-complete-${k}-clients (${system})`;
  checks.check(`${label}: every job ran once`, ran === sz.jobs && duplicates === 0, `${ran} runs, ${duplicates} duplicates`);
  checks.check(`${label}: every job completed (deleted)`, rows.total === 0, `${rows.total} left, ${rows.locked} locked`);
  console.log(lib.resultLine({
    caseName: `pg-claim-complete-${k}-clients`,
    n: sz.jobs,
    ops: ran,
    seconds: (t1 - t0) / 1e9,
    latenciesNs: null,
    system,
    extra: { clients: k },
  }));
}

lib.runMain(SYSTEM, async (opts, checks) => {
  const sz = lib.sizes(opts.quick);
  try {
    if (opts.cases.includes('depth')) {
      for (const n of sz.depths) await claimDepth(n, sz, checks);
    }
    if (opts.cases.includes('throughput')) {
      for (const k of sz.clients) await claimComplete(k, sz, checks, SYSTEM, undefined);
      for (const k of sz.clients) await claimComplete(k, sz, checks, `${SYSTEM}-batched`, BATCHED_PRESET);
    }
  } finally {
    await lib.dropSchema(SCHEMA);
  }
});
