'use strict';
// Shared pieces of the Node.js peer benchmarks: options, sizes, the result line,
// checks and the schema each peer owns.

const fs = require('node:fs');
const path = require('node:path');
const pg = require('pg');

const DATABASE_URL = process.env.PEERS_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';

/** `--quick` and `--cases=depth,throughput` (both optional). */
function parseArgs(argv) {
  const opts = { quick: false, cases: ['depth', 'throughput'] };
  for (const arg of argv) {
    if (arg === '--quick') opts.quick = true;
    else if (arg.startsWith('--cases=')) opts.cases = arg.slice('--cases='.length).split(',').filter(Boolean);
    else throw new Error(`unknown argument: ${arg}`);
  }
  return opts;
}

/** Sizes of every case, shared with the Python peer: bench/peers/sizes.json. */
function sizes(quick) {
  const all = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'sizes.json'), 'utf8'));
  const s = all[quick ? 'quick' : 'full'];
  return {
    depths: s.depths,
    samples: s.samples,
    sampleBudgetNs: s.sample_budget_s * 1e9,
    minSamples: s.min_samples,
    warmup: s.warmup,
    jobs: s.jobs,
    clients: s.clients,
    fillBatch: s.fill_batch,
  };
}

/** `x` rounded to `digits` decimals, half up (as the seed harness and agentmesh-bench do). */
function round(x, digits) {
  const scale = 10 ** digits;
  return Math.floor(x * scale + 0.5) / scale;
}

/** The `p` quantile (0..1) of `sortedNs` in microseconds, by nearest rank. */
function percentileUs(sortedNs, p) {
  if (sortedNs.length === 0) return 0;
  const rank = Math.ceil(p * sortedNs.length);
  const idx = Math.min(Math.max(rank, 1), sortedNs.length) - 1;
  return sortedNs[idx] / 1000;
}

/**
 * One result line in the seed harness's format, `{"case","n","ops","seconds",
 * "ops_per_s","p50_us","p99_us"}`, followed by `system` and any `extra` fields.
 * `latenciesNs` null means the case has no per-operation latency: p50/p99 are null.
 */
function resultLine({ caseName, n, ops, seconds, latenciesNs, system, extra = {} }) {
  let p50 = null;
  let p99 = null;
  if (latenciesNs) {
    const sorted = Float64Array.from(latenciesNs).sort();
    p50 = round(percentileUs(sorted, 0.5), 1);
    p99 = round(percentileUs(sorted, 0.99), 1);
  }
  return JSON.stringify({
    case: caseName,
    n,
    ops,
    seconds: round(seconds, 6),
    ops_per_s: round(seconds > 0 ? ops / seconds : 0, 1),
    p50_us: p50,
    p99_us: p99,
    system,
    ...extra,
  });
}

/** Nanoseconds on a monotonic clock, as a Number. */
function nowNs() {
  return Number(process.hrtime.bigint());
}

/**
 * The samples of one claim-depth case: `warmup` operations first, then up to
 * `samples` timed ones. A queue whose operations are slow stops early: warming
 * up after a tenth of the time budget, sampling after the budget once it has
 * `minSamples`. `add` takes one operation's latency and says whether to go on.
 */
class Sampler {
  constructor(sz) {
    this.sz = sz;
    this.latencies = [];
    this.warmed = 0;
    this.phaseStart = null;
    this.sampling = false;
    this.done = false;
  }

  add(latencyNs) {
    const now = nowNs();
    if (this.phaseStart === null) this.phaseStart = now - latencyNs;
    if (!this.sampling) {
      this.warmed += 1;
      if (this.warmed >= this.sz.warmup || now - this.phaseStart > this.sz.sampleBudgetNs / 10) {
        this.sampling = true;
        this.phaseStart = now;
      }
      return true;
    }
    this.latencies.push(latencyNs);
    const full = this.latencies.length >= this.sz.samples;
    const late = this.latencies.length >= this.sz.minSamples && now - this.phaseStart > this.sz.sampleBudgetNs;
    if (full || late) this.done = true;
    return !this.done;
  }

  /** A note for stderr when the budget cut the samples short. */
  shortNote() {
    const n = this.latencies.length;
    return n < this.sz.samples ? `${n} of ${this.sz.samples} samples within the ${this.sz.sampleBudgetNs / 1e9} s budget` : '';
  }
}

/** Behaviour checks: `check ok|FAIL` lines on stderr; `failed()` at the end. */
class Checks {
  constructor(system) {
    this.system = system;
    this.failures = [];
  }

  check(name, ok, detail = '') {
    const shown = detail ? ` (${detail})` : '';
    process.stderr.write(`check ${ok ? 'ok  ' : 'FAIL'} ${this.system}: ${name}${shown}\n`);
    if (!ok) this.failures.push(`${name}${shown}`);
    return ok;
  }

  failed() {
    return this.failures.length > 0;
  }
}

function note(system, message) {
  process.stderr.write(`[${system}] ${message}\n`);
}

/** Runs `fn(client)` on one short-lived connection of its own. */
async function withClient(fn) {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** A schema name is only ever one of ours: lower-case letters and underscores. */
function quoteSchema(schema) {
  if (!/^peers_[a-z_]+$/.test(schema)) throw new Error(`not a peer schema: ${schema}`);
  return `"${schema}"`;
}

async function dropSchema(schema) {
  await withClient((c) => c.query(`drop schema if exists ${quoteSchema(schema)} cascade`));
}

/** `VACUUM (ANALYZE)` of one table, so each case starts from planner statistics of its full queue. */
async function vacuumAnalyze(schema, table) {
  await withClient((c) => c.query(`vacuum (analyze) ${quoteSchema(schema)}."${table}"`));
}

/** Runs `main(opts, checks)` and sets the exit status: 1 when a check failed, 2 on an error. */
function runMain(system, main) {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`${system}: ${err.message}\n`);
    process.exit(2);
  }
  const checks = new Checks(system);
  main(opts, checks).then(
    () => {
      if (checks.failed()) {
        process.stderr.write(`[${system}] FAILED: ${checks.failures.length} check(s)\n`);
        process.exit(1);
      }
      process.exit(0);
    },
    (err) => {
      process.stderr.write(`[${system}] ERROR: ${err && err.stack ? err.stack : err}\n`);
      process.exit(2);
    },
  );
}

module.exports = {
  DATABASE_URL,
  Checks,
  Sampler,
  dropSchema,
  note,
  nowNs,
  quoteSchema,
  resultLine,
  runMain,
  sizes,
  vacuumAnalyze,
  withClient,
};
