//! The reservation writes both stores share, over each store's rows
//! ([`ReservationRows`]): the decisions are the core's
//! ([`agentmesh_core::reservation`]), the ledger entries are written here.
//!
//! Each write runs in one transaction in which the mesh's reservations are
//! serial (SQLite's one writer; PostgreSQL's reservations lock of the mesh), so
//! the conflicts a grant was checked against stay true until it commits.

use agentmesh_core::reservation::{self, Conflict, NewReservation, PathPattern, Reservation, kinds};
use agentmesh_core::{LedgerEntry, Task, TaskStatus, Timestamp};
use serde_json::json;

use crate::StoreError;
use crate::ids::mint_at;

/// What a reservation request came to. Not boxed: built once per request and
/// moved straight to the caller.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Reserved {
    /// Granted, as stored.
    Granted(Reservation),
    /// Denied: every conflicting reservation, once each.
    Denied(Vec<Conflict>),
}

/// Who renews or releases a reservation: its holder's session and the
/// reservation's fencing epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The holder's session.
    pub session_id: String,
    /// The epoch the holder was given.
    pub epoch: u64,
}

/// A store's reservation rows, in the transaction of one write.
pub trait ReservationRows {
    /// The store's error, which every error of a write converts into.
    type Error: From<StoreError>;

    /// The reservations of `scope` that may overlap a pattern of the literal
    /// prefix `prefix` (folded to lower case): those with a pattern whose
    /// folded prefix is it, an ancestor of it (see [`ancestors`]), or under
    /// it; with `prefix` empty (a pattern starting with a wildcard), every
    /// one of the scope. Lapsed ones may be among them.
    fn near(&self, mesh_id: &str, scope: &str, prefix: &str) -> Result<Vec<Reservation>, Self::Error>;
    /// The reservation `id`.
    fn find(&self, mesh_id: &str, id: &str) -> Result<Option<Reservation>, Self::Error>;
    /// Stores a new reservation, or stores `reservation` over the one of its id.
    fn put(&self, reservation: &Reservation) -> Result<(), Self::Error>;
    /// Removes `reservation` (as stored: its prefixes are those of its patterns).
    fn remove(&self, reservation: &Reservation) -> Result<(), Self::Error>;
    /// Appends a ledger entry.
    fn append(&self, entry: &LedgerEntry) -> Result<(), Self::Error>;
    /// The reservations taken for the task `task_id`.
    fn of_task(&self, mesh_id: &str, task_id: &str) -> Result<Vec<Reservation>, Self::Error>;
}

/// The reservations of `scope` that may overlap a pattern of one of the
/// folded literal `prefixes` ([`ReservationRows::near`] of each), each once.
fn near<R: ReservationRows>(
    rows: &R,
    mesh_id: &str,
    scope: &str,
    prefixes: &[String],
) -> Result<Vec<Reservation>, R::Error> {
    let mut found: Vec<Reservation> = Vec::new();
    for prefix in prefixes {
        for reservation in rows.near(mesh_id, scope, prefix)? {
            if !found.iter().any(|f| f.id == reservation.id) {
                found.push(reservation);
            }
        }
    }
    Ok(found)
}

/// The reservations of `scope` in force at `now` that may overlap one of
/// `patterns` (what [`crate::ReservationQuery::Near`] answers).
pub fn near_in_force<R: ReservationRows>(
    rows: &R,
    mesh_id: &str,
    scope: &str,
    patterns: &[PathPattern],
    now: Timestamp,
) -> Result<Vec<Reservation>, R::Error> {
    let near = near(rows, mesh_id, scope, &prefixes(patterns))?;
    Ok(near.into_iter().filter(|r| r.is_active(now)).collect())
}

/// The folded literal prefixes of `patterns`, each once.
pub fn prefixes(patterns: &[PathPattern]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in patterns {
        let prefix = p.literal_prefix(true);
        if !out.contains(&prefix) {
            out.push(prefix);
        }
    }
    out
}

/// Every ancestor of a folded prefix, itself and the root (`""`) included:
/// the prefixes whose patterns may cover it.
pub fn ancestors(prefix: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut at = 0;
    while let Some(slash) = prefix[at..].find('/') {
        out.push(prefix[..at + slash].to_owned());
        at += slash + 1;
    }
    if !prefix.is_empty() {
        out.push(prefix.to_owned());
    }
    out
}

fn entry(reservation: &Reservation, kind: &str, now: Timestamp, extra: serde_json::Value) -> LedgerEntry {
    let mut payload = json!({
        "reservationId": reservation.id,
        "scope": reservation.scope,
        "patterns": reservation.patterns,
        "exclusive": reservation.exclusive,
        "epoch": reservation.epoch,
    });
    if let Some(task) = &reservation.task_id {
        payload["taskId"] = json!(task);
    }
    if let Some(expires) = &reservation.expires_at {
        payload["expiresAt"] = json!(expires);
    }
    if let (Some(map), serde_json::Value::Object(more)) = (payload.as_object_mut(), extra) {
        map.extend(more);
    }
    LedgerEntry {
        id: mint_at(now),
        mesh_id: reservation.mesh_id.clone(),
        timestamp: now.iso(),
        kind: kind.to_owned(),
        node_id: Some(reservation.node_id.clone()),
        session_id: Some(reservation.session_id.clone()),
        provider_type: None,
        payload,
    }
}

/// Grants `request` unless it conflicts with another holder's reservation in
/// force; a denial is recorded too (`reservation_denied`, naming every
/// conflict).
pub fn reserve<R: ReservationRows>(
    rows: &R,
    mesh_id: &str,
    request: &NewReservation,
    now: Timestamp,
) -> Result<Reserved, R::Error> {
    agentmesh_core::validate_id("meshId", mesh_id).map_err(StoreError::from)?;
    let valid = request.validate().map_err(StoreError::from)?;
    let near = near(rows, mesh_id, &valid.scope, &prefixes(&valid.patterns))?;
    let found = reservation::conflicts(
        &valid.patterns,
        valid.exclusive,
        &valid.session_id,
        valid.ignore_case,
        &near,
        now,
    );
    let asked = valid.grant(mesh_id, mint_at(now), now);
    if !found.is_empty() {
        let denied = entry(&asked, kinds::DENIED, now, json!({ "conflicts": found }));
        rows.append(&LedgerEntry { payload: without_grant(denied.payload), ..denied })?;
        return Ok(Reserved::Denied(found));
    }
    rows.put(&asked)?;
    rows.append(&entry(&asked, kinds::GRANTED, now, json!({ "reason": asked.reason })))?;
    Ok(Reserved::Granted(asked))
}

/// A denial's entry names what was asked, not an id or expiry it never had.
fn without_grant(mut payload: serde_json::Value) -> serde_json::Value {
    if let Some(map) = payload.as_object_mut() {
        map.remove("reservationId");
        map.remove("expiresAt");
        map.remove("epoch");
    }
    payload
}

/// The reservation `id` as its holder may change it, or the refusal.
fn fenced<R: ReservationRows>(
    rows: &R,
    mesh_id: &str,
    id: &str,
    fence: &Fence,
    now: Timestamp,
) -> Result<Reservation, R::Error> {
    let Some(held) = rows.find(mesh_id, id)? else {
        return Err(StoreError::NotFound {
            kind: "reservation",
            mesh_id: mesh_id.to_owned(),
            id: id.to_owned(),
        }
        .into());
    };
    if let Err(problem) = reservation::check_fence(&held, &fence.session_id, fence.epoch, now) {
        return Err(StoreError::ReservationFenced { reservation_id: id.to_owned(), problem }.into());
    }
    Ok(held)
}

/// Renews the reservation `id` for `ttl_ms` from `now` (its time to live so
/// far when none is given), by its holder.
fn renew<R: ReservationRows>(
    rows: &R,
    mesh_id: &str,
    id: &str,
    fence: &Fence,
    ttl_ms: Option<u64>,
    now: Timestamp,
) -> Result<Reservation, R::Error> {
    let asked = ttl_ms.map(reservation::check_ttl).transpose().map_err(StoreError::from)?;
    let held = fenced(rows, mesh_id, id, fence, now)?;
    if held.task_id.is_some() {
        return Err(StoreError::ReservationFenced {
            reservation_id: id.to_owned(),
            problem: String::from("lives as long as its task is held: renew the task's lease instead"),
        }
        .into());
    }
    let ttl = asked.unwrap_or_else(|| lived(&held));
    let renewed = reservation::renewed(&held, ttl, now);
    rows.put(&renewed)?;
    rows.append(&entry(&renewed, kinds::RENEWED, now, json!({})))?;
    Ok(renewed)
}

/// How long `held` was granted or last renewed for.
fn lived(held: &Reservation) -> u64 {
    let from = Timestamp::parse_iso(&held.renewed_at).map(Timestamp::millis);
    match (from, held.expires_ms()) {
        (Some(from), Some(to)) => u64::try_from(to - from).unwrap_or(reservation::DEFAULT_TTL_MS).max(1),
        _ => reservation::DEFAULT_TTL_MS,
    }
}

/// Releases the reservation `id`, by its holder; no other reservation changes.
fn release<R: ReservationRows>(
    rows: &R,
    mesh_id: &str,
    id: &str,
    fence: &Fence,
    now: Timestamp,
) -> Result<Reservation, R::Error> {
    let held = fenced(rows, mesh_id, id, fence, now)?;
    rows.remove(&held)?;
    rows.append(&entry(&held, kinds::RELEASED, now, json!({ "by": "holder" })))?;
    Ok(held)
}

/// What a holder does to its reservation
/// ([`ReservationStore::reservation_command`](crate::ReservationStore::reservation_command)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservationCommand {
    /// Extends it for `ttl_ms` from `now` (the time it was last given when
    /// none), ledger `reservation_renewed`. A task's reservation is refused.
    Renew {
        /// The new time to live.
        ttl_ms: Option<u64>,
    },
    /// Releases it (ledger `reservation_released`); no other reservation of the
    /// holder changes.
    Release,
}

/// Runs a holder's command on the reservation `id` (see [`ReservationCommand`]).
pub fn command<R: ReservationRows>(
    rows: &R,
    mesh_id: &str,
    id: &str,
    fence: &Fence,
    command: ReservationCommand,
    now: Timestamp,
) -> Result<Reservation, R::Error> {
    match command {
        ReservationCommand::Renew { ttl_ms } => renew(rows, mesh_id, id, fence, ttl_ms, now),
        ReservationCommand::Release => release(rows, mesh_id, id, fence, now),
    }
}

/// Removes the lapsed reservations `lapsed` (each with its
/// `reservation_expired` entry); returns how many.
pub fn expire<R: ReservationRows>(rows: &R, lapsed: &[Reservation], now: Timestamp) -> Result<u64, R::Error> {
    for held in lapsed {
        rows.remove(held)?;
        rows.append(&entry(held, kinds::EXPIRED, now, json!({})))?;
    }
    Ok(u64::try_from(lapsed.len()).unwrap_or(u64::MAX))
}

/// What keeps `session_id` from claiming `task`: each other holder's
/// reservation in force that overlaps the paths the task declares (none for a
/// task without paths).
pub fn blocking<R: ReservationRows>(
    rows: &R,
    task: &Task,
    session_id: &str,
    now: Timestamp,
) -> Result<Vec<Conflict>, R::Error> {
    let (Some(paths), Some(scope)) = (&task.paths, &task.paths_scope) else {
        return Ok(Vec::new());
    };
    let near = near(rows, &task.mesh_id, scope, &prefixes(paths))?;
    Ok(reservation::conflicts(paths, true, session_id, false, &near, now))
}

/// Records a claim stepping over `task` for `claimant` because of `found`:
/// `reservation_denied`, with the task and every conflict.
pub fn skipped<R: ReservationRows>(
    rows: &R,
    task: &Task,
    claimant: &agentmesh_core::Claimant,
    found: &[Conflict],
    now: Timestamp,
) -> Result<(), R::Error> {
    rows.append(&LedgerEntry {
        id: mint_at(now),
        mesh_id: task.mesh_id.clone(),
        timestamp: now.iso(),
        kind: kinds::DENIED.to_owned(),
        node_id: Some(claimant.node_id.clone()),
        session_id: Some(claimant.session_id.clone()),
        provider_type: claimant.provider_type.clone(),
        payload: json!({
            "taskId": task.id,
            "scope": task.paths_scope,
            "patterns": task.paths,
            "exclusive": true,
            "claim": true,
            "conflicts": found,
        }),
    })
}

/// Keeps a task's reservation with its hold, after a write took the task from
/// `before` to `after`: a claim (assigned with a new epoch) takes the
/// reservation of its paths; a task leaving that hold (completed, failed,
/// cancelled, requeued, reclaimed) ends it (`reservation_released`, by
/// `task_ended`). A task without paths has none.
pub fn follow_task<R: ReservationRows>(
    rows: &R,
    before: &Task,
    after: &Task,
    now: Timestamp,
) -> Result<(), R::Error> {
    let held = |t: &Task| t.status == TaskStatus::Assigned;
    let same_hold = held(before) && held(after) && before.epoch() == after.epoch();
    if same_hold {
        return Ok(());
    }
    if held(before) {
        for ended in rows.of_task(&before.mesh_id, &before.id)? {
            rows.remove(&ended)?;
            let status = after.status.as_str();
            rows.append(&entry(
                &ended,
                kinds::RELEASED,
                now,
                json!({ "by": "task_ended", "taskStatus": status }),
            ))?;
        }
    }
    if held(after)
        && let Some(taken) = reservation::for_task(after, mint_at(now), now)
    {
        rows.put(&taken)?;
        rows.append(&entry(&taken, kinds::GRANTED, now, json!({ "reason": taken.reason })))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_run_from_the_root_to_the_prefix() {
        assert_eq!(ancestors(""), [""]);
        assert_eq!(ancestors("src"), ["", "src"]);
        assert_eq!(ancestors("src/a/b.rs"), ["", "src", "src/a", "src/a/b.rs"]);
    }
}
