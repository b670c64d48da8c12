//! Group commit per mesh: the writes of one mesh that arrive together in one
//! store share one transaction, and so one mesh lock and one COMMIT.
//!
//! A COMMIT waits for the server to flush its WAL, and the writes of a mesh run
//! one at a time under its advisory lock, so one transaction per write would
//! bound a mesh to one flush per write. Here the first write of a mesh opens a
//! batch: it begins a transaction, takes the mesh lock and runs its operation.
//! Writes of the same mesh that arrive meanwhile join the open batch and run,
//! one after another on the same connection, each inside a savepoint (one that
//! fails is undone alone). When every write that joined has run, the first one
//! closes the batch and commits it; each write returns its own result once that
//! COMMIT succeeded, or the COMMIT's error. A write that finds the batch full or
//! closing opens the next one, which waits for the mesh lock. Uncontended, a
//! write is exactly one transaction of its own: when nobody joined its batch,
//! the opener's writes go out with its COMMIT, in one round trip.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use agentmesh_store::{StoreError, StoreResult};

use crate::db::{Carried, CarryFailed, Db};
use crate::pool::{Conn, Pool};
use crate::{Fail, Res, classify, cluster};

/// The most writes one batch takes.
const MAX_BATCH: usize = 32;
/// How many ended batches a mesh remembers, for the writes still to read how
/// their batch ended.
const ENDED_KEPT: u64 = 1024;

/// The open batches of one store, by mesh.
#[derive(Default)]
pub(crate) struct Batches {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    /// Writes run, and transactions committed, for [`crate::PgStore::write_stats`].
    writes: AtomicU64,
    commits: AtomicU64,
}

/// One mesh's batch: its state, and the connection of its open transaction.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    changed: Condvar,
    conn: Mutex<Option<Open>>,
}

/// The open batch's transaction: its connection, and the writes the last
/// operation left pending, for the next one (or the opener's COMMIT) to send
/// first.
struct Open {
    conn: Conn,
    carried: Option<Carried>,
}

#[derive(Default)]
struct SlotState {
    /// A batch is open and takes more writes.
    open: bool,
    /// The number of the latest batch opened.
    batch: u64,
    /// Writes that joined the open batch, its opener included.
    joined: usize,
    /// Writes that joined the open batch and have not run yet.
    running: usize,
    /// How ended batches ended: `None` committed, else why not.
    ended: HashMap<u64, Option<Ended>>,
    /// The number of the latest write that joined a batch (its savepoint's name).
    write: u64,
    /// Joined writes whose carried writes failed, by number: they were undone,
    /// and this is their error.
    failed: HashMap<u64, StoreError>,
}

/// Why a batch did not commit, for every write in it.
#[derive(Clone)]
enum Ended {
    Busy,
    Failed(String),
}

impl Ended {
    fn of(err: &StoreError) -> Ended {
        match err {
            StoreError::Busy => Ended::Busy,
            other => Ended::Failed(other.to_string()),
        }
    }

    fn error(&self) -> StoreError {
        match self {
            Ended::Busy => StoreError::Busy,
            Ended::Failed(why) => {
                StoreError::Backend(format!("the transaction was not committed: {why}").into())
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a batch needs of its store.
pub(crate) struct Scope<'a> {
    pub(crate) pool: &'a Pool,
    pub(crate) schema: &'a str,
    pub(crate) channel: &'a str,
}

impl Batches {
    fn slot(&self, mesh_id: &str) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        match slots.get(mesh_id) {
            Some(slot) => Arc::clone(slot),
            None => {
                let slot = Arc::new(Slot::default());
                slots.insert(mesh_id.to_owned(), Arc::clone(&slot));
                slot
            }
        }
    }

    /// Writes run and transactions committed so far.
    pub(crate) fn stats(&self) -> (u64, u64) {
        (self.writes.load(Ordering::Relaxed), self.commits.load(Ordering::Relaxed))
    }

    /// Runs `op` in the mesh's open batch, or in a new one; returns once the
    /// batch committed (see the module docs).
    pub(crate) fn write<T>(
        &self,
        scope: &Scope<'_>,
        mesh_id: &str,
        op: impl FnOnce(&Db<'_>) -> Res<T>,
    ) -> StoreResult<T> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        // An operation that panics fails like one that returned an error, so the
        // batch ends as always (its work undone, its batch-mates' kept) and no
        // later write of the mesh waits for a batch nobody closes; the panic goes
        // on in the caller once the batch has ended.
        let mut panicked = None;
        let guarded = |db: &Db<'_>| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(db))).unwrap_or_else(|payload| {
                panicked = Some(payload);
                Err(Fail(StoreError::Backend("the operation panicked".into())))
            })
        };
        let slot = self.slot(mesh_id);
        let mut state = lock(&slot.state);
        let outcome = loop {
            if !state.open {
                break lead(scope, &slot, state, mesh_id, guarded, &self.commits);
            }
            if state.joined < MAX_BATCH {
                break join(scope, &slot, state, guarded);
            }
            // Full: wait for it to close, then open the next.
            state = slot.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
        };
        if let Some(payload) = panicked {
            std::panic::resume_unwind(payload);
        }
        outcome
    }
}

/// `BEGIN` and the mesh lock, as one text sent in one round trip.
fn begin_sql(schema: &str, mesh_id: &str) -> String {
    format!("BEGIN; SELECT pg_advisory_xact_lock({})", crate::db::mesh_lock_key(schema, mesh_id))
}

/// Opens a batch, runs `op` first in it, lets the writes that joined run, and
/// commits.
fn lead<T>(
    scope: &Scope<'_>,
    slot: &Slot,
    mut state: MutexGuard<'_, SlotState>,
    mesh_id: &str,
    op: impl FnOnce(&Db<'_>) -> Res<T>,
    commits: &AtomicU64,
) -> StoreResult<T> {
    state.open = true;
    state.batch += 1;
    state.joined = 1;
    state.running = 0;
    let batch = state.batch;
    // Taken before the state is let go: writes that join wait for it.
    let mut conn_slot = lock(&slot.conn);
    drop(state);

    let mut conn = match scope.pool.checkout() {
        Ok(conn) => conn,
        Err(Fail(err)) => {
            // The writes that joined find no transaction, and the batch's error.
            drop(conn_slot);
            end(slot, batch, Some(Ended::of(&err)));
            return Err(err);
        }
    };
    // BEGIN and the lock go out with the operation's first statement.
    let db = Db::with_prefix(&mut conn, scope.schema, begin_sql(scope.schema, mesh_id));
    let outcome = op(&db);
    let alone = outcome.is_ok() && {
        let mut state = lock(&slot.state);
        // Nobody joined while the operation ran: close the batch, so that its
        // writes may go out with the COMMIT.
        let alone = state.joined == 1;
        if alone {
            state.open = false;
        }
        alone
    };
    if alone {
        // A write that arrives now opens the next batch, whose BEGIN may wait
        // on the server for this one's mesh lock.
        drop(conn_slot);
        let finished = db.finish(Some(&cluster::notify_and_commit(scope.channel, mesh_id)));
        let began = db.began();
        drop(db);
        let ended = match finished {
            Ok(committed) => {
                if committed {
                    commits.fetch_add(1, Ordering::Relaxed);
                }
                scope.pool.checkin(conn);
                None
            }
            Err(Fail(err)) => {
                // Whatever was begun is undone; a connection that cannot say so
                // is closed.
                if conn.undo(began) {
                    scope.pool.checkin(conn);
                } else {
                    drop(conn);
                    scope.pool.forget();
                }
                Some(err)
            }
        };
        end(slot, batch, ended.as_ref().map(Ended::of));
        return match ended {
            None => outcome.map_err(|Fail(e)| e),
            Some(err) => Err(err),
        };
    }
    let outcome = outcome.and_then(|value| db.finish(None).map(|_| value));
    let began = db.began();
    drop(db);
    let mut in_transaction = began;
    if outcome.is_err() && began {
        // The opener ran without a savepoint: undo its work.
        if let Err(err) = conn.batch_execute("ROLLBACK").map_err(classify) {
            drop(conn);
            scope.pool.forget();
            drop(conn_slot);
            end(slot, batch, Some(Ended::of(&err)));
            return outcome.map_err(|Fail(e)| e);
        }
        in_transaction = false;
    }
    if !in_transaction {
        // Nothing is open on the server: close the batch when nobody joined it,
        // else begin again for the writes that did.
        let mut state = lock(&slot.state);
        if state.joined == 1 {
            state.open = false;
            drop(state);
            drop(conn_slot);
            scope.pool.checkin(conn);
            end(slot, batch, None);
            return outcome.map_err(|Fail(e)| e);
        }
        drop(state);
        if let Err(err) = conn.batch_execute(&begin_sql(scope.schema, mesh_id)).map_err(classify) {
            drop(conn);
            scope.pool.forget();
            drop(conn_slot);
            end(slot, batch, Some(Ended::of(&err)));
            return outcome.map_err(|Fail(e)| e);
        }
    }
    *conn_slot = Some(Open { conn, carried: None });
    drop(conn_slot);

    // Every write that joined runs; then no more may join. The connection
    // leaves the slot before the batch closes: the next batch's opener holds
    // the slot while it waits for the mesh lock, which this batch holds until
    // it commits, so taking the connection after the close could wait for the
    // opener while the opener waits for the commit.
    let open = {
        let mut state = lock(&slot.state);
        while state.running > 0 {
            state = slot.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        let open = lock(&slot.conn).take();
        state.open = false;
        open
    };
    slot.changed.notify_all();
    let Some(Open { mut conn, carried }) = open else {
        let err = StoreError::Backend("the batch's connection was lost".into());
        end(slot, batch, Some(Ended::of(&err)));
        return Err(err);
    };
    // The last joined write's pending writes go out before the COMMIT, not with
    // it: one that failed is undone alone, and the batch still commits.
    if carried.is_some() {
        let (flushed, failed) = {
            let db = Db::new(&mut conn, scope.schema).carrying(carried);
            let flushed = db.finish(None);
            (flushed, db.take_carry_failed())
        };
        if let Some(CarryFailed { owner, error }) = failed {
            lock(&slot.state).failed.insert(owner, error);
        }
        if let Err(Fail(err)) = flushed {
            drop(conn);
            scope.pool.forget();
            end(slot, batch, Some(Ended::of(&err)));
            return Err(err);
        }
    }
    // A write of a mesh announces itself to every listener as it commits.
    let committed = conn.batch_execute(&cluster::notify_and_commit(scope.channel, mesh_id)).map_err(classify);
    match committed {
        Ok(()) => {
            commits.fetch_add(1, Ordering::Relaxed);
            scope.pool.checkin(conn);
            end(slot, batch, None);
            outcome.map_err(|Fail(e)| e)
        }
        Err(err) => {
            drop(conn);
            scope.pool.forget();
            end(slot, batch, Some(Ended::of(&err)));
            Err(err)
        }
    }
}

/// Runs `op` in the open batch, inside a savepoint, and waits for the batch to end.
fn join<T>(
    scope: &Scope<'_>,
    slot: &Slot,
    mut state: MutexGuard<'_, SlotState>,
    op: impl FnOnce(&Db<'_>) -> Res<T>,
) -> StoreResult<T> {
    state.joined += 1;
    state.running += 1;
    state.write += 1;
    let (batch, write) = (state.batch, state.write);
    drop(state);
    let (outcome, failed) = {
        let mut conn_slot = lock(&slot.conn);
        match conn_slot.as_mut() {
            Some(open) => {
                let carried = open.carried.take();
                let (outcome, failed, pass_on) =
                    in_savepoint(&mut open.conn, scope.schema, write, carried, op);
                open.carried = pass_on;
                (outcome, failed)
            }
            // The opener could not begin: the batch's error is below.
            None => (Err(Fail(StoreError::Busy)), None),
        }
    };
    let mut state = lock(&slot.state);
    if let Some(CarryFailed { owner, error }) = failed {
        state.failed.insert(owner, error);
    }
    state.running -= 1;
    slot.changed.notify_all();
    loop {
        if let Some(ended) = state.ended.get(&batch) {
            let ended = ended.clone();
            let failed = state.failed.remove(&write);
            return match (ended, failed) {
                (None, None) => outcome.map_err(|Fail(e)| e),
                (None, Some(error)) => Err(error),
                (Some(why), _) => Err(why.error()),
            };
        }
        state = slot.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
    }
}

/// Runs a joined write's operation inside its own savepoint (`op<write>`), with
/// the previous operation's pending writes sent ahead of its first statement.
/// Returns its outcome, what became of the carried writes when they failed, and
/// the writes to hand on to the next operation: its own pending ones when it
/// succeeded (they go out with the next statement on the connection, after its
/// savepoint), or the carried ones when it sent nothing.
fn in_savepoint<T>(
    conn: &mut Conn,
    schema: &str,
    write: u64,
    carried: Option<Carried>,
    op: impl FnOnce(&Db<'_>) -> Res<T>,
) -> (Res<T>, Option<CarryFailed>, Option<Carried>) {
    let savepoint = format!("op{write}");
    let db = Db::with_prefix(conn, schema, format!("SAVEPOINT {savepoint}")).carrying(carried);
    let mut pass_on = None;
    let outcome = match op(&db) {
        Ok(value) if db.began() => {
            let writes = db.take_deferred();
            if !writes.is_empty() {
                pass_on = Some(Carried { owner: write, savepoint: savepoint.clone(), writes });
            }
            Ok(value)
        }
        // Nothing went out yet: what it left (and what it carries) goes now,
        // behind its savepoint.
        Ok(value) => db.finish(None).map(|_| value),
        Err(err) => Err(err),
    };
    let began = db.began();
    let failed = db.take_carry_failed();
    let unsent = db.take_carried();
    drop(db);
    if outcome.is_err()
        && began
        && let Err(err) = conn.batch_execute(&format!("ROLLBACK TO SAVEPOINT {savepoint}"))
    {
        return (Err(Fail(crate::classify(err))), failed, unsent);
    }
    (outcome, failed, unsent.or(pass_on))
}

/// Records how `batch` ended and wakes the writes waiting for it.
fn end(slot: &Slot, batch: u64, ended: Option<Ended>) {
    let mut state = lock(&slot.state);
    if state.batch == batch && state.open {
        state.open = false;
    }
    state.ended.insert(batch, ended);
    if batch > ENDED_KEPT {
        let oldest = batch - ENDED_KEPT;
        state.ended.retain(|b, _| *b > oldest);
    }
    drop(state);
    slot.changed.notify_all();
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use agentmesh_store::StoreError;

    use crate::testing::FreshStore;

    /// A write whose operation panics leaves nothing behind, and the mesh's next
    /// write runs (it does not wait for a batch nobody closes).
    #[test]
    fn a_panicking_write_is_undone_and_the_mesh_goes_on() {
        let url = agentmesh_test_support::require_postgres!();
        let store = std::sync::Arc::new(FreshStore::new(&url));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.write("m", |db| {
                db.execute(
                    "INSERT INTO agentmesh_meta (key, value) VALUES ('written-before-a-panic', '')",
                    &[],
                )?;
                if db.began() {
                    panic!("an operation panics after its first statement");
                }
                Ok(())
            })
        }));
        assert!(panicked.is_err(), "the panic reaches the caller");

        let (sent, received) = mpsc::channel();
        let next = std::sync::Arc::clone(&store);
        let writer = std::thread::spawn(move || {
            let count = next.write("m", |db| {
                let row = db.query_one(
                    "SELECT COUNT(*) FROM agentmesh_meta WHERE key = 'written-before-a-panic'",
                    &[],
                )?;
                Ok(row.get::<_, i64>(0))
            });
            let _ = sent.send(count);
        });
        let count = received
            .recv_timeout(Duration::from_secs(20))
            .expect("the next write of the mesh ran")
            .expect("the next write succeeded");
        writer.join().expect("the next writer");
        assert_eq!(count, 0, "the panicking write was rolled back");
    }

    /// A lone write's deferred writes go out with its COMMIT. A checked one that
    /// changes no row fails the transaction on the server: the operation gets
    /// the check's own error, and nothing of it is committed, in the mesh's
    /// batch and in a transaction of its own alike.
    #[test]
    fn a_checked_write_that_changes_no_row_fails_its_operation_with_its_own_error() {
        let url = agentmesh_test_support::require_postgres!();
        let store = FreshStore::new(&url);
        let op = |key: &'static str| {
            move |db: &crate::db::Db<'_>| {
                db.defer(
                    "INSERT INTO agentmesh_meta (key, value) VALUES ($1, 'written')",
                    vec![std::sync::Arc::new(key.to_owned())],
                    None,
                );
                db.defer(
                    "WITH w AS (UPDATE agentmesh_meta SET value = 'changed' WHERE key = 'absent' RETURNING 1)
                     SELECT 1 / count(*)::INT FROM w",
                    Vec::new(),
                    Some(std::sync::Arc::new(|| StoreError::TaskNotFound {
                        mesh_id: "m".into(),
                        task_id: "absent".into(),
                    })),
                );
                Ok(())
            }
        };
        let batched = store.write("m", op("batched"));
        let own = store.write_own("m", op("own"));
        let ok = store.write("m", |db| {
            db.defer("INSERT INTO agentmesh_meta (key, value) VALUES ('kept', 'written')", Vec::new(), None);
            Ok(())
        });
        let keys = store
            .write("m", |db| {
                let rows = db.query(
                    "SELECT key FROM agentmesh_meta WHERE key IN ('batched', 'own', 'kept') ORDER BY key",
                    &[],
                )?;
                Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>())
            })
            .expect("the rows");
        for outcome in [&batched, &own] {
            assert!(
                matches!(outcome, Err(StoreError::TaskNotFound { task_id, .. }) if task_id == "absent"),
                "{outcome:?}"
            );
        }
        assert!(ok.is_ok(), "{ok:?}");
        assert_eq!(keys, ["kept"], "only the write that succeeded committed");
    }

    /// The writes a joined operation leaves pending go out with the next
    /// operation's first statement; one of them that fails there undoes its
    /// own operation alone, which reports the error, and the batch commits the
    /// rest.
    #[test]
    fn a_carried_write_that_fails_undoes_its_own_operation_alone() {
        let url = agentmesh_test_support::require_postgres!();
        let store = std::sync::Arc::new(FreshStore::new(&url));
        store
            .write("m", |db| {
                db.execute("INSERT INTO agentmesh_meta (key, value) VALUES ('taken', 'first')", &[]).map(drop)
            })
            .expect("the first row");
        let (opened, open) = mpsc::channel();
        let leader = {
            let store = std::sync::Arc::clone(&store);
            std::thread::spawn(move || {
                store.write("m", |db| {
                    db.execute("SELECT 1", &[])?;
                    let _ = opened.send(());
                    // Long enough for the others to join this batch.
                    std::thread::sleep(Duration::from_millis(500));
                    Ok(())
                })
            })
        };
        open.recv().expect("the batch is open");
        let joiners: Vec<_> = ["a", "taken", "c"]
            .into_iter()
            .map(|key| {
                let store = std::sync::Arc::clone(&store);
                std::thread::spawn(move || {
                    store.write("m", |db| {
                        db.execute("SELECT 1", &[])?;
                        // No ON CONFLICT: the key taken fails when it goes out.
                        db.defer(
                            "INSERT INTO agentmesh_meta (key, value) VALUES ($1, 'joined')",
                            vec![std::sync::Arc::new(key.to_owned())],
                            None,
                        );
                        Ok(())
                    })
                })
            })
            .collect();
        leader.join().expect("the leader").expect("the leader's write");
        let outcomes: Vec<_> = joiners.into_iter().map(|j| j.join().expect("a joiner")).collect();
        let rows = store
            .write("m", |db| {
                let rows = db.query(
                    "SELECT key, value FROM agentmesh_meta WHERE key IN ('a', 'taken', 'c') ORDER BY key",
                    &[],
                )?;
                Ok(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, String>(1))).collect::<Vec<_>>())
            })
            .expect("the rows");
        let (writes, commits) = store.write_stats();
        assert!(outcomes[0].is_ok(), "{:?}", outcomes[0].as_ref().err());
        assert!(outcomes[1].is_err(), "the write of a taken key fails");
        assert!(outcomes[2].is_ok(), "{:?}", outcomes[2].as_ref().err());
        let expected = [("a", "joined"), ("c", "joined"), ("taken", "first")];
        let expected: Vec<(String, String)> =
            expected.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        assert_eq!(rows, expected);
        assert!(
            commits < writes,
            "the joiners shared the leader's batch: {writes} writes in {commits} commits"
        );
    }
}
