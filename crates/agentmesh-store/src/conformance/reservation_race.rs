//! Path reservations raced by many OS processes, each with a store of its own
//! on one database (what each backend's `multiprocess` test runs, with
//! [`race_in_processes`] in the parent and [`racer`] in each child): every
//! process reserves patterns that overlap the others', and releases what it
//! was granted on its next turn. Afterwards the ledger, read in commit order,
//! is replayed: at no point may two sessions hold overlapping reservations
//! where either is exclusive, and every denial must name a reservation that
//! was held at that point.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentmesh_core::{NewReservation, PathPattern, SliceQuery, Timestamp};

use crate::retry::retrying;
use crate::{Fence, ReservationCommand, Reserved, Store};

/// The mesh the race runs in.
pub const RACE_MESH: &str = "reserve-race";

/// Turns of the race per process.
const ROUNDS: usize = 60;

/// The argument that makes a test binary a racer: `RACER_ARG <db> <n> <start file>`.
pub const RACER_ARG: &str = "--reserve-racer";

/// The parent: starts `processes` copies of `exe` as racers on the database
/// `db` (which each opens itself), lets them go together once all are
/// started, and checks what they report against the ledger of `store` (see the
/// module). Panics naming what broke; returns the grants and denials.
pub fn race_in_processes(exe: &Path, db: &str, processes: usize, store: &dyn Store) -> Raced {
    let start = std::env::temp_dir().join(format!("agentmesh-reserve-race-{}.go", std::process::id()));
    let start_arg = start.to_str().expect("a UTF-8 temp dir").to_owned();
    let children: Vec<Child> = (0..processes)
        .map(|n| {
            Command::new(exe)
                .args([RACER_ARG, db, &n.to_string(), &start_arg])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a racer")
        })
        .collect();
    // Every racer is started before any begins, so their turns overlap.
    std::fs::write(&start, b"go").expect("the start file");
    let mut total = Raced::default();
    for child in children {
        let out = child.wait_with_output().expect("a racer ends");
        assert!(out.status.success(), "a racer failed: {:?}", out.status);
        let text = String::from_utf8(out.stdout).expect("a racer prints UTF-8");
        let counts: Vec<u64> = text.split_whitespace().map(|w| w.parse().expect("a count")).collect();
        total.granted += counts[0];
        total.denied += counts[1];
    }
    let _ = std::fs::remove_file(&start);
    let seen = check_reservation_ledger(store, RACE_MESH)
        .unwrap_or_else(|problem| panic!("the reservation ledger breaks the invariant: {problem}"));
    assert_eq!(seen, total, "the ledger records every answer");
    assert!(total.granted > 0 && total.denied > 0, "the race needs grants and denials: {total:?}");
    total
}

/// A racer (`args` after [`RACER_ARG`]: the database, its number and the start
/// file): waits for the start, races on `store`, and prints its grants and
/// denials for the parent.
pub fn racer(store: &dyn Store, args: &[String]) {
    let n: usize = args[1].parse().expect("a racer number");
    let go = Path::new(&args[2]);
    let until = Instant::now() + Duration::from_secs(60);
    while !go.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
    let raced = race_reservations(store, RACE_MESH, n, ROUNDS, Timestamp::from_millis(1_780_000_000_000));
    println!("{} {}", raced.granted, raced.denied);
}

/// The patterns the racers ask for, all overlapping some of the others.
const PATTERNS: [&str; 7] =
    ["src/**", "src/a.rs", "src/*.rs", "src/deep", "src/deep/x.rs", "**/*.rs", "docs"];

/// What one racer did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Raced {
    /// Grants.
    pub granted: u64,
    /// Denials.
    pub denied: u64,
}

/// Racer `n`: `rounds` turns of "release what I hold, then ask for a pattern",
/// exclusive three times in four, in mesh `mesh` at `now`; a grant is held for
/// a millisecond before the next turn, so that the racers' holds overlap.
pub fn race_reservations(store: &dyn Store, mesh: &str, n: usize, rounds: usize, now: Timestamp) -> Raced {
    let session = format!("racer-{n}");
    let mut held: Option<(String, u64)> = None;
    let mut raced = Raced::default();
    for round in 0..rounds {
        if let Some((id, epoch)) = held.take() {
            let fence = Fence { session_id: session.clone(), epoch };
            retrying(|| store.reservation_command(mesh, &id, &fence, ReservationCommand::Release, now))
                .expect("a release of a grant");
        }
        let pick = (n * 31 + round * 17) % PATTERNS.len();
        let request = NewReservation {
            scope: "repo".into(),
            session_id: session.clone(),
            node_id: format!("node-{n}"),
            patterns: vec![PATTERNS[pick].to_owned()],
            exclusive: !(n + round).is_multiple_of(4),
            ..NewReservation::default()
        };
        match retrying(|| store.reserve(mesh, &request, now)).expect("a reservation request") {
            Reserved::Granted(r) => {
                raced.granted += 1;
                held = Some((r.id, r.epoch));
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Reserved::Denied(_) => raced.denied += 1,
        }
    }
    if let Some((id, epoch)) = held {
        let fence = Fence { session_id: session, epoch };
        retrying(|| store.reservation_command(mesh, &id, &fence, ReservationCommand::Release, now))
            .expect("the last release");
    }
    raced
}

/// One reservation as the replay holds it.
struct Held {
    session: String,
    patterns: Vec<PathPattern>,
    exclusive: bool,
}

fn patterns_of(value: &serde_json::Value) -> Vec<PathPattern> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(|p| PathPattern::parse("p", p.as_str()?).ok()).collect())
        .unwrap_or_default()
}

/// Replays mesh `mesh`'s ledger in commit order and checks the invariant (see
/// the module); returns the grants and denials it saw.
pub fn check_reservation_ledger(store: &dyn Store, mesh: &str) -> Result<Raced, String> {
    let mut active: HashMap<String, Held> = HashMap::new();
    let mut seen = Raced::default();
    let mut after = 0;
    loop {
        let query = SliceQuery { after_seq: Some(after), limit: Some(500), ..SliceQuery::default() };
        let page = store.ledger_slice(mesh, &query).map_err(|e| e.to_string())?;
        for entry in &page.entries {
            let p = &entry.payload;
            let id = p["reservationId"].as_str().unwrap_or_default().to_owned();
            match entry.kind.as_str() {
                "reservation_granted" => {
                    seen.granted += 1;
                    let new = Held {
                        session: entry.session_id.clone().unwrap_or_default(),
                        patterns: patterns_of(&p["patterns"]),
                        exclusive: p["exclusive"].as_bool().unwrap_or(true),
                    };
                    for (other_id, other) in &active {
                        let clash = other.session != new.session
                            && (other.exclusive || new.exclusive)
                            && new
                                .patterns
                                .iter()
                                .any(|a| other.patterns.iter().any(|b| a.overlaps(b, false)));
                        if clash {
                            return Err(format!(
                                "entry {}: {id} ({:?} by {}) granted while {other_id} ({:?} by {}) held",
                                entry.id, new.patterns, new.session, other.patterns, other.session
                            ));
                        }
                    }
                    active.insert(id, new);
                }
                "reservation_released" | "reservation_expired" => {
                    active.remove(&id);
                }
                "reservation_denied" => {
                    seen.denied += 1;
                    let conflicts = p["conflicts"].as_array().cloned().unwrap_or_default();
                    if conflicts.is_empty() {
                        return Err(format!("entry {}: a denial names no conflict", entry.id));
                    }
                    for c in conflicts {
                        let named = c["reservationId"].as_str().unwrap_or_default();
                        if !active.contains_key(named) {
                            return Err(format!("entry {}: a denial names {named}, not held then", entry.id));
                        }
                    }
                }
                _ => {}
            }
        }
        match page.cursor.next_after_seq {
            Some(next) if page.cursor.has_more => after = next,
            _ => break,
        }
    }
    if !active.is_empty() {
        return Err(format!("{} reservations still held after every racer released", active.len()));
    }
    Ok(seen)
}
