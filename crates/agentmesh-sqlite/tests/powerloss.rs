//! Power loss under a busy store: what an acknowledged write survives, and that
//! no fencing epoch or ledger sequence number is handed out twice.
//!
//! The store runs on a VFS that keeps every write since a file's last sync
//! apart (`agentmesh_powercut`). Threads enqueue, claim, complete, queue and drain inbox
//! events, follow the ledger by sequence and read assigned tasks, recording
//! every write the store acknowledged and every epoch and sequence number an
//! answer carried ([`workload`]). At a random moment the power is cut: every
//! write and sync fails from then on, a sync in flight included. The threads run
//! into the dead disk and stop, the store is dropped, the unsynced writes are
//! undone (all of them, or all but a random part kept by whole writes or by
//! 512-byte sectors, as a disk that reorders its cache may leave them), and the
//! file is opened again. Then:
//!
//! - SQLite's integrity check passes;
//! - every acknowledged write is there: the task exists, in the state the write
//!   left it or a later one; a queued event is delivered now or was drained; a
//!   drained one is not delivered again. [`Durability::Full`] promises this;
//!   under [`Durability::ProcessCrashOnly`] the writes missing are counted, and
//!   the run must find some, or it would prove nothing;
//! - every ledger entry the follower read is there (`Full`);
//! - the store goes on working: the stranded tasks are reclaimed, pending ones
//!   claimed, entries appended; every epoch a claim hands out after the reopen
//!   is above every epoch seen for that task before the cut, and every entry
//!   appended after the reopen is numbered above every sequence number seen
//!   before the cut, in both modes.
//!
//! Each mode runs [`DEFAULT_CUTS`] cuts on one file
//! (`AGENTMESH_POWERLOSS_CUTS=N` for more) and prints a summary line to stderr.
//! The choices (when to cut, which operations, what survives) come from a
//! seed, printed first; `AGENTMESH_POWERLOSS_SEED=S` makes the same choices
//! again (the threads' interleaving still varies).

#[path = "powerloss/workload.rs"]
mod workload;

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use agentmesh_core::{Claimant, NewTask, TaskStatus};
use agentmesh_sqlite::{Durability, OpenOptions, SqliteStore};
use agentmesh_store::conformance::support::drain_request;
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome};
use rusqlite::{Connection, OpenFlags, OptionalExtension};

use agentmesh_powercut::{Disk, Granularity, Loss, Restored, VFS_NAME};
use workload::{Ack, Clock, MESH, Progress, Rng, Seen, owner, report};

/// Power cuts per mode unless `AGENTMESH_POWERLOSS_CUTS` says otherwise.
const DEFAULT_CUTS: usize = 40;
/// Examples a failure lists of each kind.
const EXAMPLES: usize = 10;

#[test]
fn full_durability_keeps_every_acknowledged_write_through_power_losses() {
    run(Durability::Full);
}

#[test]
fn process_crash_only_loses_writes_to_power_losses_but_never_hands_a_number_out_twice() {
    run(Durability::ProcessCrashOnly);
}

/// What the whole run saw and found.
#[derive(Debug, Default)]
struct Run {
    /// The highest epoch seen for each task before the last cut.
    epochs: HashMap<String, u64>,
    /// The highest ledger sequence number seen before the last cut.
    max_seq: u64,
    /// The follower's cursor.
    cursor: u64,
    /// The label of the next inbox event.
    label: u64,
    acknowledged: usize,
    /// Acknowledged writes missing after a cut.
    lost: Findings,
    /// Ledger entries the follower read that are missing after a cut.
    vanished: Findings,
    /// Claims that handed out an epoch seen for their task before a cut.
    reused_epochs: Findings,
    /// Entries appended after a reopen numbered at or below a sequence number
    /// seen before the cut: what was found, by entry id (an entry is found
    /// again at later reopens).
    reused_seqs: BTreeMap<String, String>,
    restored: Restored,
    /// Cuts that found unsynced writes to undo.
    cuts_unsynced: usize,
    /// Cuts that kept a random part of them.
    cuts_harsh: usize,
    checkpoints: usize,
}

/// How many of one kind of failure there were, and the first few.
#[derive(Debug, Default)]
struct Findings {
    count: usize,
    examples: Vec<String>,
}

impl Findings {
    fn add(&mut self, what: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(what());
        }
    }
}

/// The ledger around one reopen: the entries appended after it are numbered
/// above `head`, the highest number that survived the cut; they must be above
/// `seen`, the highest number an answer carried before it.
#[derive(Debug, Clone, Copy, Default)]
struct SeqRange {
    head: u64,
    seen: u64,
}

fn run(mode: Durability) {
    let seed = env_number("AGENTMESH_POWERLOSS_SEED").unwrap_or_else(random_seed);
    let cuts = env_number("AGENTMESH_POWERLOSS_CUTS").map_or(DEFAULT_CUTS, |n| n as usize);
    eprintln!("powerloss mode={mode} seed={seed} (AGENTMESH_POWERLOSS_SEED={seed} makes the same choices)");
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let disk = Disk::attach(dir.path()).expect("the directory becomes a disk");
    let db = dir.path().canonicalize().expect("the directory resolves").join("mesh-runtime.db");
    let options = OpenOptions { durability: mode, vfs: Some(VFS_NAME.to_owned()) };
    let clock = Clock::start();
    let mut rng = Rng(seed);
    let mut run = Run::default();
    // What the stretch before the last cut saw, and its ledger numbers.
    let mut before: Option<(Seen, SeqRange)> = None;

    // Stretch `cut` runs after the `cut`-th power cut (the 0th is the first
    // open) and ends with the next one, or, the last, with a clean close.
    for cut in 0..=cuts {
        let at = format!("mode={mode} seed={seed} cut={cut}");
        let mut seen = Seen::default();
        // The file as the cut left it, before the store writes to it.
        let check = before.as_ref().map(|(seen, range)| inspect(&db, seen, *range, &mut run, &at));
        let range = SeqRange { head: check.as_ref().map_or(0, |c| highest_seq(c, &at)), seen: run.max_seq };
        let store = SqliteStore::open_with(&db, &options)
            .unwrap_or_else(|err| panic!("{at}: the store opens after the cut: {err}"));
        if let (Some(check), Some((seen_before, _))) = (&check, &before) {
            verify(&store, check, seen_before, &mut seen, &mut run, &clock, &at);
        }
        recover(&store, &disk, &mut seen, &clock, &at);
        if let Some(check) = check {
            reused_seqs(&check, range, &mut run, &at);
        }
        if cut < cuts {
            let cut_after = Duration::from_millis(20 + rng.below(230));
            let (threads, cursor) =
                workload::run(&store, &disk, &clock, &mut rng, cut_after, run.cursor, run.label);
            seen.merge(threads);
            run.cursor = cursor;
            run.label += 1_000_000;
        }
        assert!(seen.unexpected.is_empty(), "{at}: {}", seen.unexpected.join("; "));
        settle(&seen, &mut run, &at);
        drop(store);
        if cut < cuts {
            power_cycle(&disk, &db, &mut rng, &mut run, &at);
        }
        before = Some((seen, range));
    }

    let reused = run.reused_epochs.count + run.reused_seqs.len();
    let summary = format!(
        "powerloss mode={mode} cuts={cuts} acknowledged={} lost={} reused={reused} \
         (vanished ledger entries {}, epochs reused {}, sequence numbers reused {}; \
         {} cuts found unsynced writes: {} undone, {} KiB, {} pieces kept in {} harsh cuts; \
         {} checkpoints; seed {seed}, {:.1} s)",
        run.acknowledged,
        run.lost.count,
        run.vanished.count,
        run.reused_epochs.count,
        run.reused_seqs.len(),
        run.cuts_unsynced,
        run.restored.unsynced,
        run.restored.unsynced_bytes / 1024,
        run.restored.kept,
        run.cuts_harsh,
        run.checkpoints,
        started.elapsed().as_secs_f64(),
    );
    // Straight to the process's stderr, past the test harness's capture.
    let _ = writeln!(std::io::stderr(), "{summary}");

    let list = |examples: &[String]| examples.join("\n  ");
    assert_eq!(
        run.reused_epochs.count,
        0,
        "{summary}\nepochs handed out twice:\n  {}",
        list(&run.reused_epochs.examples)
    );
    let seqs: Vec<String> = run.reused_seqs.values().take(EXAMPLES).cloned().collect();
    assert!(seqs.is_empty(), "{summary}\nsequence numbers handed out twice:\n  {}", list(&seqs));
    match mode {
        Durability::Full => {
            assert_eq!(
                run.lost.count,
                0,
                "{summary}\nacknowledged writes lost:\n  {}",
                list(&run.lost.examples)
            );
            assert_eq!(
                run.vanished.count,
                0,
                "{summary}\nledger entries read, then lost:\n  {}",
                list(&run.vanished.examples)
            );
        }
        Durability::ProcessCrashOnly => assert!(
            run.lost.count > 0,
            "{summary}\nno acknowledged write was lost: no cut caught an unsynced commit, so the run proves nothing"
        ),
    }
}

/// Opens the file as the cut left it (the power back on, the store not open
/// yet): SQLite's integrity check; the entries appended after the reopen before
/// the cut that took a number seen before that reopen's cut; the ledger entries
/// the follower read that are gone.
fn inspect(db: &Path, seen: &Seen, range: SeqRange, run: &mut Run, at: &str) -> Connection {
    let conn = Connection::open_with_flags_and_vfs(db, OpenFlags::default(), VFS_NAME)
        .unwrap_or_else(|err| panic!("{at}: the file opens after the cut: {err}"));
    let integrity: Vec<String> = conn
        .prepare("PRAGMA integrity_check")
        .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
        .unwrap_or_else(|err| panic!("{at}: the integrity check runs: {err}"));
    assert_eq!(integrity, ["ok"], "{at}: SQLite's integrity check after the cut");
    reused_seqs(&conn, range, run, at);
    let mut exists = conn.prepare("SELECT 1 FROM mesh_event_ledger WHERE id = ?1").expect("a ledger lookup");
    for id in &seen.entries {
        let found: Option<i64> = exists.query_row([id], |r| r.get(0)).optional().expect("a ledger lookup");
        if found.is_none() {
            run.vanished.add(|| format!("{at}: ledger entry {id}, read by the follower before the cut"));
        }
    }
    drop(exists);
    conn
}

/// The highest ledger sequence number in the file.
fn highest_seq(conn: &Connection, at: &str) -> u64 {
    let head: Option<i64> = conn
        .query_row("SELECT MAX(seq) FROM mesh_event_ledger", [], |r| r.get(0))
        .unwrap_or_else(|err| panic!("{at}: reading the ledger's head: {err}"));
    head.map_or(0, |h| u64::try_from(h).unwrap_or(0))
}

/// Notes the entries appended after a reopen (numbered above `range.head`) that
/// took a number at or below `range.seen`.
fn reused_seqs(conn: &Connection, range: SeqRange, run: &mut Run, at: &str) {
    let bound = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let rows: Vec<(String, i64)> = conn
        .prepare("SELECT id, seq FROM mesh_event_ledger WHERE seq > ?1 AND seq <= ?2")
        .and_then(|mut stmt| {
            stmt.query_map([bound(range.head), bound(range.seen)], |r| Ok((r.get(0)?, r.get(1)?)))?.collect()
        })
        .unwrap_or_else(|err| panic!("{at}: reading the ledger: {err}"));
    for (id, seq) in rows {
        let found = format!(
            "{at}: entry {id}, appended after the reopen, took sequence number {seq}; {} was seen before the cut",
            range.seen
        );
        run.reused_seqs.entry(id).or_insert(found);
    }
}

/// Checks that the writes acknowledged in the stretch before the cut are there,
/// and notes the ones that are not. Drains the coordinator's inbox: what it
/// gets now was not drained before.
fn verify(
    store: &SqliteStore,
    check: &Connection,
    before: &Seen,
    seen: &mut Seen,
    run: &mut Run,
    clock: &Clock,
    at: &str,
) {
    let mut now: HashMap<&str, Option<Progress>> = HashMap::new();
    for ack in &before.acks {
        let Some((task, least)) = ack.progress() else { continue };
        let found = *now.entry(task).or_insert_with(|| {
            let found = store.find_task(MESH, task).unwrap_or_else(|err| panic!("{at}: find_task: {err}"));
            found.as_ref().map(Progress::of)
        });
        match found {
            None => run.lost.add(|| format!("{at}: {ack:?} acknowledged, the task is gone")),
            Some(found) if found < least => {
                run.lost.add(|| format!("{at}: {ack:?} acknowledged, the task is back at {found}"));
            }
            Some(_) => {}
        }
    }

    let mut delivered = HashSet::new();
    loop {
        let outcome = store
            .drain_pending_events(MESH, &drain_request(&owner()), clock.now())
            .unwrap_or_else(|err| panic!("{at}: draining after the cut: {err}"));
        if outcome.events.is_empty() {
            break;
        }
        for event in outcome.events {
            seen.acks.push(Ack::Drained { event: event.id.clone() });
            delivered.insert(event.id);
        }
    }
    let drained_before: HashSet<&String> = before
        .acks
        .iter()
        .filter_map(|ack| match ack {
            Ack::Drained { event } => Some(event),
            _ => None,
        })
        .collect();
    let mut drained =
        check.prepare("SELECT 1 FROM mesh_inbox_drained WHERE id = ?1").expect("a drained lookup");
    for ack in &before.acks {
        match ack {
            Ack::Drained { event } if delivered.contains(event) => {
                run.lost.add(|| format!("{at}: event {event}, drained before the cut, is delivered again"));
            }
            Ack::Queued { event } if !delivered.contains(event) && !drained_before.contains(event) => {
                // Drained by a drain that never answered (its commit survived
                // the cut), or gone.
                let found: Option<i64> =
                    drained.query_row([event], |r| r.get(0)).optional().expect("a drained lookup");
                if found.is_none() {
                    run.lost.add(|| format!("{at}: event {event}, queued before the cut, is gone"));
                }
            }
            _ => {}
        }
    }
}

/// After a reopen: reclaims the tasks the stopped workers held, claims and
/// completes pending ones (the claims hand out epochs right after the cut),
/// enqueues a task.
fn recover(store: &SqliteStore, disk: &Disk, seen: &mut Seen, clock: &Clock, at: &str) {
    let stranded = store.queue_entries(MESH, &[TaskStatus::Assigned]);
    for task in seen.settle(stranded, disk, "listing assigned tasks").unwrap_or_default() {
        seen.task(&task);
        // The workers claim with a lease of a millisecond: by now it has lapsed.
        let reclaimed = store.reclaim_if_lease_expired(MESH, &task.id, clock.now().plus_millis(2));
        if let Some(Some(task)) = seen.settle(reclaimed, disk, "reclaim") {
            seen.reclaimed(&task);
        }
    }
    let claimant =
        Claimant { node_id: "n-recovery".into(), session_id: "s-recovery".into(), ..Claimant::default() };
    for _ in 0..16 {
        let claim = store.claim_next(MESH, &claimant, &ClaimOptions::default(), clock.now());
        let Some(ClaimOutcome::Claimed(task)) = seen.settle(claim, disk, "claim") else { break };
        seen.claimed(&task);
        let done = store.complete_task(MESH, &report(&claimant, &task), clock.now());
        let Some(task) = seen.settle(done, disk, "complete") else { break };
        seen.completed(&task);
    }
    let new = NewTask { message: format!("enqueued on reopening ({at})"), ..NewTask::default() };
    if let Some(task) = seen.settle(store.enqueue(MESH, &new, clock.now()), disk, "enqueue") {
        seen.acks.push(Ack::Enqueued { task: task.id });
    }
}

/// At the end of a stretch: notes the claims that handed out an epoch seen
/// before the last cut, then adds what the stretch saw to what the run saw.
fn settle(seen: &Seen, run: &mut Run, at: &str) {
    for ack in &seen.acks {
        if let Ack::Claimed { task, epoch } = ack
            && let Some(before) = run.epochs.get(task).filter(|before| epoch <= before)
        {
            run.reused_epochs.add(|| {
                format!("{at}: task {task} claimed at epoch {epoch}; {before} was seen before the cut")
            });
        }
    }
    run.acknowledged += seen.acks.len();
    run.checkpoints += seen.checkpoints;
    for (task, epoch) in &seen.epochs {
        let before = run.epochs.entry(task.clone()).or_default();
        *before = (*before).max(*epoch);
    }
    run.max_seq = run.max_seq.max(seen.max_seq);
}

/// Once the store is dropped: undoes what was not synced (all of it, or all
/// but a random part), and removes the shared-memory index, in which a power
/// loss leaves nothing to trust.
fn power_cycle(disk: &Disk, db: &Path, rng: &mut Rng, run: &mut Run, at: &str) {
    // The checkpointer thread closes its connection on its own once the store
    // is dropped: the drop does not wait for it.
    let closing = Instant::now();
    while disk.open_files() > 0 {
        assert!(
            closing.elapsed() < Duration::from_secs(10),
            "{at}: {} files still open 10 s after the store was dropped",
            disk.open_files()
        );
        thread::sleep(Duration::from_millis(1));
    }
    let mut keep_rng = rng.fork();
    let keep_share = [0.25, 0.5, 0.9][rng.below(3) as usize];
    let mut keep = move || keep_rng.chance(keep_share);
    let loss = match rng.below(4) {
        0 | 1 => Loss::All,
        2 => Loss::Some { granularity: Granularity::Write, keep: &mut keep },
        _ => Loss::Some { granularity: Granularity::Sector, keep: &mut keep },
    };
    run.cuts_harsh += usize::from(matches!(loss, Loss::Some { .. }));
    let restored =
        disk.power_cycle(loss).unwrap_or_else(|err| panic!("{at}: undoing the unsynced writes: {err}"));
    run.cuts_unsynced += usize::from(restored.unsynced > 0);
    run.restored.unsynced += restored.unsynced;
    run.restored.unsynced_bytes += restored.unsynced_bytes;
    run.restored.kept += restored.kept;
    let shm = PathBuf::from(format!("{}-shm", db.display()));
    match std::fs::remove_file(&shm) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => panic!("{at}: removing {}: {err}", shm.display()),
    }
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(value.trim().parse().unwrap_or_else(|_| panic!("{name}={value:?} is not a number")))
}

/// A seed that differs from run to run: the standard library seeds its hash
/// maps at random.
fn random_seed() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(0);
    hasher.finish()
}
