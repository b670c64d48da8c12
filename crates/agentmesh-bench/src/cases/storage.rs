//! Groups `storage` and `pg-storage` (ours only): where the bytes of one completed
//! task go. A coordinator enqueues N tasks (10,000; 1,000 under `--quick`), 64 at a
//! time, each addressed back to it (`source_coordinator_*`), so every completion
//! queues an event for it; 8 worker sessions claim them and complete each with a
//! one-line summary; the coordinator drains its inbox after every 64 completions
//! (and once more at the end). Then the database's objects are measured:
//!
//! - SQLite: a `wal_checkpoint(TRUNCATE)`, then the pages of every table and
//!   index from the `dbstat` virtual table, plus the free pages;
//! - PostgreSQL: `VACUUM` of the case's schema, then `pg_relation_size` of every
//!   table, its TOAST relation (with its index) and every index.
//!
//! The floor (`storage-floor`, SQLite): the same content in the smallest
//! schema that still serves the product's lookups, filled from the product's
//! own rows after the load, so it holds exactly the text ours holds: a task row
//! (id, mesh, status, node, session, times and epoch as integers, the
//! coordinator, message, summary) with its key and a (mesh, status, created)
//! index; each ledger entry once (sequence, id, mesh, time, kind as an integer,
//! node, session, task, and its one piece of text: the message preview or the
//! summary) with its id key and a (mesh, time, id) index; the coordinator's
//! event (ids, a 16-byte fingerprint, its coordinator, session, task and the
//! coordinator's text) with its key, a (mesh, fingerprint) key and a (mesh,
//! event id) index. Nothing is said twice, and no JSON keys are stored.
//!
//! `storage-floor-packed` is the floor again with its long texts (the task's
//! message and summary, the event's text) stored as ours stores payloads,
//! deflated when that is shorter: what compression can reach.
//!
//! `pg-storage-floor` is the same floor on PostgreSQL, in a schema of its own
//! beside the case's (dropped after), with the same keys and indexes.
//!
//! Every object's bytes divided by N is one line on stdout,
//! `{"case":"storage-bytes","n":N,"object":"mesh_queue","kind":"table","bytes_per_task":…}`
//! (`pg-storage-bytes` on PostgreSQL), and their sum one more,
//! `{"case":"storage-bytes-per-task","n":N,"bytes_per_task":…}`; stderr has them
//! as a table. Checks: every task ended completed, and the inbox is empty.

use agentmesh_core::TaskStatus;
use agentmesh_core::events::{CoordinatorIdentity, Drainer};
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, DrainRequest, Outcome, Store};
use anyhow::Context as _;
use rusqlite::Connection;

use super::{claimant, count_of, show_stats};
use crate::data::{MESH_ID, UuidGen, at, message};
use crate::harness::Harness;

/// Worker sessions that claim and complete.
const WORKERS: usize = 8;
/// Tasks per enqueue, and completions between two drains.
const ROUND: usize = 64;
/// The coordinator's daemon and session, which every task names as its source.
const COORDINATOR_DAEMON: &str = "daemon_bench";
const COORDINATOR_SESSION: &str = "coordinator-1";

/// One measured object of the database.
struct Object {
    name: String,
    /// `table`, `index`, `toast` or `free`.
    kind: &'static str,
    bytes: u64,
}

/// Runs group `storage`.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(10_000);
    h.run_case(&format!("storage-{n}"), |h, case| {
        let label = case.label().to_owned();
        load(h, case.store(), &label, n)?;
        let objects = sqlite_objects(case.sqlite().path())?;
        report("storage", n, &objects);
        let floor = case.dir().join("floor.db");
        fill_floor(case.sqlite().path(), &floor)?;
        report("storage-floor", n, &sqlite_objects(&floor)?);
        let packed = case.dir().join("floor-packed.db");
        std::fs::copy(&floor, &packed)?;
        pack_floor(&packed)?;
        report("storage-floor-packed", n, &sqlite_objects(&packed)?);
        Ok(())
    });
}

/// Runs group `pg-storage`.
pub(crate) fn run_pg(h: &mut Harness) {
    let n = h.opts().scale(10_000);
    crate::pg::run_case(h, &format!("pg-storage-{n}"), |h, case| {
        let store = case.open_store(4)?;
        load(h, &store, case.label(), n)?;
        drop(store);
        let mut client = case.client()?;
        let objects = pg_objects(&mut client, case.schema())?;
        report("pg-storage", n, &objects);
        let floor = format!("{}_floor", case.schema());
        let filled =
            fill_pg_floor(&mut client, case.schema(), &floor).and_then(|()| pg_objects(&mut client, &floor));
        client.batch_execute(&format!("DROP SCHEMA IF EXISTS {floor} CASCADE"))?;
        report("pg-storage-floor", n, &filled?);
        Ok(())
    });
}

/// The coordinator's drain request: its own events, the default window.
fn drain_request() -> DrainRequest {
    let identity =
        CoordinatorIdentity::from_emit_fields(Some(COORDINATOR_DAEMON), None, Some(COORDINATOR_SESSION))
            .expect("the bench coordinator names a daemon");
    DrainRequest { drainer: Drainer::new(identity, &[]), only_events: None, enforce: false, limit: None }
}

/// Drains the coordinator's inbox until a drain hands out nothing; returns the
/// events handed out.
fn drain_all(store: &dyn Store, request: &DrainRequest, clock: &mut usize) -> anyhow::Result<usize> {
    let mut drained = 0;
    loop {
        *clock += 1;
        let batch = store.drain_pending_events(MESH_ID, request, at(*clock))?;
        if batch.events.is_empty() {
            return Ok(drained);
        }
        drained += batch.events.len();
    }
}

/// The load: N tasks enqueued, claimed, completed and their events drained.
fn load(h: &mut Harness, store: &dyn Store, label: &str, n: usize) -> anyhow::Result<()> {
    let ids = UuidGen::new(0xf000 + n as u32).take(n);
    let request = drain_request();
    let mut clock = 0;
    let (mut completed, mut drained) = (0, 0);
    for first in (0..n).step_by(ROUND) {
        let round = first..n.min(first + ROUND);
        let tasks: Vec<_> = round
            .clone()
            .map(|i| agentmesh_core::NewTask {
                id: Some(ids[i].clone()),
                message: message(i),
                source_coordinator_session_id: Some(COORDINATOR_SESSION.to_owned()),
                source_coordinator_daemon_id: Some(COORDINATOR_DAEMON.to_owned()),
                ..agentmesh_core::NewTask::default()
            })
            .collect();
        clock += 1;
        store.enqueue_batch(MESH_ID, &tasks, at(clock))?;
        for i in round {
            let worker = i % WORKERS;
            let session = format!("worker-{worker}");
            let who = claimant(format!("node-{worker}"), session.clone());
            clock += 1;
            let task = match store.claim_next(MESH_ID, &who, &ClaimOptions::default(), at(clock))? {
                ClaimOutcome::Claimed(task) => task,
                ClaimOutcome::Refused(reason) => anyhow::bail!("claim {i} refused: {reason}"),
            };
            let report = CompletionReport {
                session_id: session,
                task_id: Some(task.id.clone()),
                epoch: Some(task.epoch()),
                occurred_at: None,
                outcome: Outcome::Completed {
                    summary: Some(format!("Done: task {i} refactored, tests pass, diff summary sent.")),
                },
            };
            clock += 1;
            store.complete_task(MESH_ID, &report, at(clock))?;
            completed += 1;
        }
        drained += drain_all(store, &request, &mut clock)?;
    }
    drained += drain_all(store, &request, &mut clock)?;

    let stats = store.stats_by_status(MESH_ID)?;
    h.check(
        &format!("{label}: every task completed"),
        completed == n && count_of(&stats, TaskStatus::Completed) == n as u64,
        show_stats(&stats),
    );
    let left = store.pending_event_count(MESH_ID)?;
    h.check(
        &format!("{label}: every completion drained, the inbox empty"),
        drained == n && left == 0,
        format!("drained={drained} left={left}"),
    );
    Ok(())
}

/// Milliseconds since the epoch of an ISO column `c`, in SQL.
macro_rules! ms {
    ($c:literal) => {
        concat!("CAST(ROUND((julianday(", $c, ") - 2440587.5) * 86400000) AS INTEGER)")
    };
}

/// Builds the floor (see the module docs) at `floor` from the product's file at
/// `product`, each table filled in the product's row order.
fn fill_floor(product: &std::path::Path, floor: &std::path::Path) -> anyhow::Result<()> {
    let conn = Connection::open(floor).with_context(|| format!("failed to create {}", floor.display()))?;
    conn.execute("ATTACH DATABASE ?1 AS p", [product.to_string_lossy()])?;
    unpacked_sqlite(&conn)?;
    conn.execute_batch(concat!(
        "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL;
         CREATE TABLE task (
             id TEXT PRIMARY KEY, mesh_id TEXT NOT NULL, status INTEGER NOT NULL, node TEXT, session TEXT,
             created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, dispatched_ms INTEGER, epoch INTEGER,
             coordinator_daemon TEXT, coordinator_session TEXT, message TEXT NOT NULL, summary TEXT);
         CREATE INDEX task_by_status ON task (mesh_id, status, created_ms);
         CREATE TABLE ledger (
             seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, mesh_id TEXT NOT NULL, ts_ms INTEGER NOT NULL,
             kind INTEGER NOT NULL, node TEXT, session TEXT, task_id TEXT, detail TEXT);
         CREATE INDEX ledger_slice ON ledger (mesh_id, ts_ms, id);
         CREATE TABLE event (
             id TEXT PRIMARY KEY, mesh_id TEXT NOT NULL, event_id TEXT NOT NULL, fingerprint BLOB NOT NULL,
             queued_ms INTEGER NOT NULL, kind INTEGER NOT NULL, coordinator TEXT, session TEXT, task_id TEXT,
             text TEXT NOT NULL);
         CREATE UNIQUE INDEX event_fingerprint ON event (mesh_id, fingerprint);
         CREATE INDEX event_by_event_id ON event (mesh_id, event_id);
         BEGIN;
         INSERT INTO task
         SELECT id, mesh_id, 2, assigned_node_id, assigned_session_id, ",
        ms!("created_at"),
        ", ",
        ms!("updated_at"),
        ", ",
        ms!("dispatch_ts"),
        ", epoch,
                json_extract(j.json, '$.sourceCoordinatorDaemonId'),
                json_extract(j.json, '$.sourceCoordinatorSessionId'),
                json_extract(j.json, '$.message'), json_extract(j.json, '$.finalSummary')
           FROM p.mesh_queue q JOIN temp.task_json j ON j.rid = q.rowid ORDER BY q.rowid;
         INSERT INTO ledger
         SELECT seq, id, mesh_id, ",
        ms!("timestamp"),
        ", CASE kind WHEN 'task_dispatched' THEN 1 WHEN 'task_claimed' THEN 2 ELSE 3 END,
                node_id, session_id, json_extract(payload, '$.taskId'),
                COALESCE(json_extract(payload, '$.message'), json_extract(payload, '$.summary'))
           FROM p.mesh_event_ledger ORDER BY seq;
         INSERT INTO event
         SELECT id, mesh_id, event_id, randomblob(16), queued_at, 1, coordinator_daemon_id,
                json_extract(j.json, '$.metadataEvent.targetSessionId'),
                json_extract(j.json, '$.metadataEvent.taskId'), json_extract(j.json, '$.coordinatorMessage')
           FROM p.mesh_pending_events e JOIN temp.event_json j ON j.rid = e.rowid ORDER BY e.rowid;
         COMMIT;
         DETACH DATABASE p;"
    ))?;
    let (tasks, entries, events): (i64, i64, i64) = conn.query_row(
        "SELECT (SELECT COUNT(*) FROM task WHERE message <> '' AND summary <> ''),
                (SELECT COUNT(*) FROM ledger WHERE task_id IS NOT NULL),
                (SELECT COUNT(*) FROM event WHERE text <> '' AND task_id IS NOT NULL)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    anyhow::ensure!(
        tasks > 0 && entries == 3 * tasks && events == tasks,
        "the floor holds {tasks} tasks, {entries} entries, {events} events"
    );
    Ok(())
}

/// Turns a copy of the floor into the packed floor: its long texts (the task's
/// message and summary, the event's text) stored as ours stores payloads
/// (`agentmesh_store::packed`: deflated when that is shorter), then vacuumed so
/// its b-trees are as full as a fresh fill leaves them.
fn pack_floor(path: &std::path::Path) -> anyhow::Result<()> {
    use agentmesh_store::packed::{Packed, pack};
    use rusqlite::types::Value;
    let stored = |text: Option<String>| match text.as_deref().map(pack) {
        None => Value::Null,
        Some(Packed::Text(text)) => Value::Text(text.to_owned()),
        Some(Packed::Deflated(bytes)) => Value::Blob(bytes),
    };
    let conn = Connection::open(path).with_context(|| format!("failed to open {}", path.display()))?;
    conn.execute_batch("BEGIN")?;
    let tasks: Vec<(i64, Option<String>, Option<String>)> = conn
        .prepare("SELECT rowid, message, summary FROM task")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let mut update = conn.prepare("UPDATE task SET message = ?2, summary = ?3 WHERE rowid = ?1")?;
    for (rowid, message, summary) in tasks {
        update.execute(rusqlite::params![rowid, stored(message), stored(summary)])?;
    }
    let events: Vec<(i64, Option<String>)> = conn
        .prepare("SELECT rowid, text FROM event")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut update = conn.prepare("UPDATE event SET text = ?2 WHERE rowid = ?1")?;
    for (rowid, text) in events {
        update.execute(rusqlite::params![rowid, stored(text)])?;
    }
    drop(update);
    conn.execute_batch("COMMIT; VACUUM;")?;
    Ok(())
}

/// Copies the JSON text of the product's task and event payloads (stored packed,
/// see `agentmesh_store::packed`) into `temp.task_json` and `temp.event_json`,
/// keyed by the product row's rowid, for the floor's statements to read.
fn unpacked_sqlite(conn: &Connection) -> anyhow::Result<()> {
    for (table, temp) in [("mesh_queue", "task_json"), ("mesh_pending_events", "event_json")] {
        conn.execute_batch(&format!(
            "CREATE TEMP TABLE {temp} (rid INTEGER PRIMARY KEY, json TEXT NOT NULL)"
        ))?;
        let mut insert = conn.prepare(&format!("INSERT INTO temp.{temp} VALUES (?1, ?2)"))?;
        let mut read = conn.prepare(&format!("SELECT rowid, CAST(payload AS BLOB) FROM p.{table}"))?;
        let mut rows = read.query([])?;
        while let Some(row) = rows.next()? {
            let stored: Vec<u8> = row.get(1)?;
            insert.execute(rusqlite::params![
                row.get::<_, i64>(0)?,
                agentmesh_store::packed::unpack(&stored)?
            ])?;
        }
    }
    Ok(())
}

/// The same on PostgreSQL: `{floor}.task_json` and `{floor}.event_json`, keyed
/// by the product row's id (the floor drops them once filled).
fn unpacked_pg(client: &mut postgres::Client, schema: &str, floor: &str) -> anyhow::Result<()> {
    for (table, temp) in [("mesh_queue", "task_json"), ("mesh_pending_events", "event_json")] {
        let (mut ids, mut texts) = (Vec::new(), Vec::new());
        for row in client.query(&format!("SELECT id, payload FROM {schema}.{table}"), &[])? {
            ids.push(row.get::<_, String>(0));
            texts.push(agentmesh_store::packed::unpack(row.get(1))?.into_owned());
        }
        client.batch_execute(&format!(
            "CREATE TABLE {floor}.{temp} (id text PRIMARY KEY, json jsonb NOT NULL)"
        ))?;
        client.execute(
            &format!("INSERT INTO {floor}.{temp} SELECT * FROM unnest($1::text[], $2::text[]::jsonb[])"),
            &[&ids, &texts],
        )?;
    }
    Ok(())
}

/// Milliseconds since the epoch of an ISO column `c`, in PostgreSQL's SQL.
macro_rules! pg_ms {
    ($c:literal) => {
        concat!("(extract(epoch FROM ", $c, "::timestamptz) * 1000)::bigint")
    };
}

/// Builds the floor in schema `floor` from the product's rows in `schema`.
fn fill_pg_floor(client: &mut postgres::Client, schema: &str, floor: &str) -> anyhow::Result<()> {
    client.batch_execute(&format!("CREATE SCHEMA {floor}"))?;
    unpacked_pg(client, schema, floor)?;
    client.batch_execute(&format!(
        concat!(
            "CREATE TABLE {f}.task (
                 mesh_id text COLLATE \"C\" NOT NULL, id text COLLATE \"C\" NOT NULL, status smallint NOT NULL,
                 node text, session text, created_ms bigint NOT NULL, updated_ms bigint NOT NULL,
                 dispatched_ms bigint, epoch integer, coordinator_daemon text, coordinator_session text,
                 message text NOT NULL, summary text, PRIMARY KEY (mesh_id, id));
             CREATE INDEX task_by_status ON {f}.task (mesh_id, status, created_ms);
             CREATE TABLE {f}.ledger (
                 seq bigint PRIMARY KEY, id text COLLATE \"C\" NOT NULL, mesh_id text COLLATE \"C\" NOT NULL,
                 ts_ms bigint NOT NULL, kind smallint NOT NULL, node text, session text, task_id text, detail text,
                 UNIQUE (mesh_id, id));
             CREATE INDEX ledger_slice ON {f}.ledger (mesh_id, ts_ms, id);
             CREATE TABLE {f}.event (
                 mesh_id text COLLATE \"C\" NOT NULL, id text COLLATE \"C\" NOT NULL, event_id text NOT NULL,
                 fingerprint bytea NOT NULL, queued_ms bigint NOT NULL, kind smallint NOT NULL, coordinator text,
                 session text, task_id text, text text NOT NULL, PRIMARY KEY (mesh_id, id));
             CREATE UNIQUE INDEX event_fingerprint ON {f}.event (mesh_id, fingerprint);
             CREATE INDEX event_by_event_id ON {f}.event (mesh_id, event_id);
             INSERT INTO {f}.task
             SELECT q.mesh_id, q.id, 2, assigned_node_id, assigned_session_id, ",
            pg_ms!("created_at"),
            ", ",
            pg_ms!("updated_at"),
            ", ",
            pg_ms!("dispatch_ts"),
            ", epoch, j.json ->> 'sourceCoordinatorDaemonId',
                    j.json ->> 'sourceCoordinatorSessionId', j.json ->> 'message', j.json ->> 'finalSummary'
               FROM {s}.mesh_queue q JOIN {f}.task_json j ON j.id = q.id ORDER BY q.row_id;
             INSERT INTO {f}.ledger
             SELECT seq, id, mesh_id, ",
            pg_ms!("timestamp"),
            ", CASE kind WHEN 'task_dispatched' THEN 1 WHEN 'task_claimed' THEN 2 ELSE 3 END,
                    node_id, session_id, payload::jsonb ->> 'taskId',
                    COALESCE(payload::jsonb ->> 'message', payload::jsonb ->> 'summary')
               FROM {s}.mesh_event_ledger ORDER BY seq;
             INSERT INTO {f}.event
             SELECT e.mesh_id, e.id, e.event_id, decode(md5(COALESCE(e.fingerprint, e.id)), 'hex'), e.queued_at,
                    1, e.coordinator_daemon_id, j.json -> 'metadataEvent' ->> 'targetSessionId',
                    j.json -> 'metadataEvent' ->> 'taskId', j.json ->> 'coordinatorMessage'
               FROM {s}.mesh_pending_events e JOIN {f}.event_json j ON j.id = e.id ORDER BY e.row_id;
             DROP TABLE {f}.task_json, {f}.event_json;"
        ),
        f = floor,
        s = schema
    ))?;
    let row = client.query_one(
        &format!(
            "SELECT (SELECT COUNT(*) FROM {floor}.task WHERE message <> '' AND summary <> ''),
                    (SELECT COUNT(*) FROM {floor}.ledger WHERE task_id IS NOT NULL),
                    (SELECT COUNT(*) FROM {floor}.event WHERE text <> '' AND task_id IS NOT NULL)"
        ),
        &[],
    )?;
    let (tasks, entries, events): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    anyhow::ensure!(
        tasks > 0 && entries == 3 * tasks && events == tasks,
        "the floor holds {tasks} tasks, {entries} entries, {events} events"
    );
    Ok(())
}

/// The objects of the SQLite file at `path`, after a full checkpoint.
fn sqlite_objects(path: &std::path::Path) -> anyhow::Result<Vec<Object>> {
    let conn = Connection::open(path).with_context(|| format!("failed to open {}", path.display()))?;
    let (busy, _, _): (i64, i64, i64) =
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    anyhow::ensure!(busy == 0, "the checkpoint could not finish");
    let mut stmt = conn.prepare(
        "SELECT d.name, COALESCE(s.type, 'table'), SUM(d.pgsize)
           FROM dbstat AS d LEFT JOIN sqlite_schema AS s ON s.name = d.name
          GROUP BY d.name ORDER BY 3 DESC, 1",
    )?;
    let mut objects = stmt
        .query_map([], |r| {
            let kind: String = r.get(1)?;
            Ok(Object {
                name: r.get(0)?,
                kind: if kind == "index" { "index" } else { "table" },
                bytes: r.get::<_, i64>(2)?.try_into().unwrap_or(0),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    objects.push(Object { name: "(free pages)".to_owned(), kind: "free", bytes: (page_size * free) as u64 });
    Ok(objects)
}

/// The objects of `schema` after a `VACUUM` of its tables: each table's main
/// fork, its TOAST relation with the TOAST index, and each index.
fn pg_objects(client: &mut postgres::Client, schema: &str) -> anyhow::Result<Vec<Object>> {
    let tables: Vec<String> = client
        .query("SELECT tablename FROM pg_tables WHERE schemaname = $1", &[&schema])?
        .iter()
        .map(|row| row.get(0))
        .collect();
    for table in &tables {
        client.batch_execute(&format!("VACUUM {schema}.\"{table}\""))?;
    }
    let rows = client.query(
        "SELECT c.relname::text, 'table', pg_relation_size(c.oid)
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relkind = 'r'
         UNION ALL
         SELECT c.relname::text, 'toast', pg_total_relation_size(c.reltoastrelid)
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relkind = 'r' AND c.reltoastrelid <> 0
         UNION ALL
         SELECT i.relname::text, 'index', pg_relation_size(i.oid)
           FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
           JOIN pg_class c ON c.oid = x.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1
          ORDER BY 3 DESC, 1",
        &[&schema],
    )?;
    Ok(rows
        .iter()
        .map(|row| {
            let kind: &str = row.get(1);
            Object {
                name: row.get(0),
                kind: match kind {
                    "toast" => "toast",
                    "index" => "index",
                    _ => "table",
                },
                bytes: row.get::<_, i64>(2).try_into().unwrap_or(0),
            }
        })
        .collect())
}

/// Prints the objects as a table on stderr and as JSON lines on stdout.
fn report(prefix: &str, n: usize, objects: &[Object]) {
    let per_task = |bytes: u64| bytes as f64 / n as f64;
    let total: u64 = objects.iter().map(|o| o.bytes).sum();
    eprintln!("  {:<48} {:<6} {:>12} {:>10}", "object", "kind", "bytes", "B/task");
    for object in objects.iter().filter(|o| o.bytes > 0) {
        eprintln!(
            "  {:<48} {:<6} {:>12} {:>10.1}",
            object.name,
            object.kind,
            object.bytes,
            per_task(object.bytes)
        );
        let line = serde_json::json!({
            "case": format!("{prefix}-bytes"),
            "n": n,
            "object": object.name,
            "kind": object.kind,
            "bytes_per_task": per_task(object.bytes),
        });
        println!("{line}");
    }
    eprintln!("  {:<48} {:<6} {:>12} {:>10.1}", "total", "", total, per_task(total));
    let line = serde_json::json!({
        "case": format!("{prefix}-bytes-per-task"),
        "n": n,
        "bytes_per_task": per_task(total),
    });
    println!("{line}");
}
