'use strict';
// Drops every schema the peer benchmarks create (run.sh calls it on exit).

const lib = require('./lib');

const SCHEMAS = ['peers_graphile_worker', 'peers_pg_boss', 'peers_procrastinate'];

(async () => {
  for (const schema of SCHEMAS) await lib.dropSchema(schema);
})().catch((err) => {
  process.stderr.write(`cleanup: ${err && err.message ? err.message : err}\n`);
  process.exit(1);
});
