'use strict';
// pg-boss: claim latency at queue depth and claim+complete throughput.
//
// Both cases drive pg-boss's public `fetch` and `complete` calls. Its `work()`
// loop is not used: after each batch it sleeps for the rest of its polling
// interval (0.5 s at least), so with one job per fetch it tops out at a few jobs
// per second per worker; `fetch` + `complete` in a loop is what `work()` does
// without the sleep.
//   pg-claim-depth: one sample is `fetch` of one job then `complete` of it, with
//     N jobs waiting; an untimed `send` after each sample holds the depth at N.
//   pg-claim-complete-K-clients: K concurrent loops of `fetch` + `complete` over
//     a prefilled queue, until `fetch` finds nothing; one sample is one loop turn.

const PgBoss = require('pg-boss');
const lib = require('./lib');

const SYSTEM = 'pg-boss';
const SCHEMA = 'peers_pg_boss';
const QUEUE = 'bench';

/** A pg-boss instance on our schema without its maintenance and cron loops. */
async function startBoss(max) {
  const boss = new PgBoss({
    connectionString: lib.DATABASE_URL,
    schema: SCHEMA,
    max,
    supervise: false,
    schedule: false,
    migrate: true,
  });
  boss.on('error', (err) => process.stderr.write(`[pg-boss error] ${err && err.stack ? err.stack : err}\n`));
  await boss.start();
  return boss;
}

/** A new schema and queue holding `n` jobs with data {i: 0..n-1}, added with `insert`. */
async function freshQueue(n, batch, max) {
  await lib.dropSchema(SCHEMA);
  const boss = await startBoss(max);
  await boss.createQueue(QUEUE);
  const start = lib.nowNs();
  for (let i = 0; i < n; i += batch) {
    const jobs = [];
    for (let j = i; j < Math.min(n, i + batch); j++) jobs.push({ name: QUEUE, data: { i: j } });
    await boss.insert(jobs);
  }
  const fillS = (lib.nowNs() - start) / 1e9;
  await lib.vacuumAnalyze(SCHEMA, 'job');
  lib.note(SYSTEM, `filled ${n} jobs with insert in ${fillS.toFixed(2)} s`);
  return boss;
}

/** Job counts by state. */
async function states() {
  return lib.withClient(async (c) => {
    const { rows } = await c.query(`select state, count(*)::int as count from ${lib.quoteSchema(SCHEMA)}.job group by state`);
    return Object.fromEntries(rows.map((r) => [r.state, r.count]));
  });
}

function showStates(s) {
  return Object.entries(s).map(([k, v]) => `${k}=${v}`).join(' ') || 'empty';
}

async function claimDepth(n, sz, checks) {
  const boss = await freshQueue(n, sz.fillBatch, 10);
  const sampler = new lib.Sampler(sz);
  const seen = new Set();
  let fetched = 0;
  let missing = 0;
  let duplicates = 0;
  let notCompleted = 0;
  let nextData = n;
  let more = true;
  while (more) {
    const t = lib.nowNs();
    const jobs = await boss.fetch(QUEUE);
    if (jobs.length !== 1) {
      missing += 1;
      if (missing > 10) break;
      continue;
    }
    const done = await boss.complete(QUEUE, jobs[0].id);
    more = sampler.add(lib.nowNs() - t);
    fetched += 1;
    if (done.affected !== 1) notCompleted += 1;
    if (seen.has(jobs[0].data.i)) duplicates += 1;
    seen.add(jobs[0].data.i);
    await boss.send(QUEUE, { i: nextData++ });
  }
  await boss.stop({ graceful: false });

  const label = `pg-claim-depth n=${n}`;
  const latencies = sampler.latencies;
  if (sampler.shortNote()) lib.note(SYSTEM, `${label}: ${sampler.shortNote()}`);
  const s = await states();
  checks.check(`${label}: every fetch returned one job`, missing === 0, `${missing} empty fetches`);
  checks.check(`${label}: no job fetched twice`, duplicates === 0, `${duplicates} duplicates`);
  checks.check(`${label}: every complete call completed its job`, notCompleted === 0, `${notCompleted} not completed`);
  checks.check(
    `${label}: completed rows = fetched, depth held at N`,
    s.completed === fetched && s.created === n && Object.keys(s).length === 2,
    showStates(s),
  );
  const total = latencies.reduce((a, b) => a + b, 0);
  console.log(lib.resultLine({
    caseName: 'pg-claim-depth', n, ops: latencies.length, seconds: total / 1e9, latenciesNs: latencies, system: SYSTEM,
  }));
}

async function claimComplete(k, sz, checks) {
  const boss = await freshQueue(sz.jobs, sz.fillBatch, Math.max(10, k + 2));
  const latencies = [];
  const seen = new Uint8Array(sz.jobs);
  let duplicates = 0;
  let notCompleted = 0;
  const client = async () => {
    for (;;) {
      const t = lib.nowNs();
      const jobs = await boss.fetch(QUEUE);
      if (jobs.length === 0) return;
      const done = await boss.complete(QUEUE, jobs[0].id);
      latencies.push(lib.nowNs() - t);
      if (done.affected !== 1) notCompleted += 1;
      if (seen[jobs[0].data.i]++) duplicates += 1;
    }
  };
  const t0 = lib.nowNs();
  await Promise.all(Array.from({ length: k }, client));
  const t1 = lib.nowNs();
  await boss.stop({ graceful: false });

  const label = `pg-claim-complete-${k}-clients`;
  const s = await states();
  checks.check(`${label}: every job fetched once`, latencies.length === sz.jobs && duplicates === 0, `${latencies.length} fetched, ${duplicates} duplicates`);
  checks.check(`${label}: every complete call completed its job`, notCompleted === 0, `${notCompleted} not completed`);
  checks.check(`${label}: every job completed`, s.completed === sz.jobs && Object.keys(s).length === 1, showStates(s));
  console.log(lib.resultLine({
    caseName: label, n: sz.jobs, ops: latencies.length, seconds: (t1 - t0) / 1e9, latenciesNs: latencies, system: SYSTEM, extra: { clients: k },
  }));
}

lib.runMain(SYSTEM, async (opts, checks) => {
  const sz = lib.sizes(opts.quick);
  try {
    if (opts.cases.includes('depth')) {
      for (const n of sz.depths) await claimDepth(n, sz, checks);
    }
    if (opts.cases.includes('throughput')) {
      for (const k of sz.clients) await claimComplete(k, sz, checks);
    }
  } finally {
    await lib.dropSchema(SCHEMA);
  }
});
