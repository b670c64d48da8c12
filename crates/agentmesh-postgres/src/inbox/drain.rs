//! Drains, peeks and acks: the walk's events routed by the core, the delivered,
//! deduplicated and quarantined ones taken off the queue.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use agentmesh_core::Timestamp;
use agentmesh_core::daemon_id::machine_core;
use agentmesh_core::events::held::quarantine_entry;
use agentmesh_core::events::presence::drain_refreshes_presence;
use agentmesh_core::events::{DrainCounter, DrainRouter, RouteDecision, Routed};
use agentmesh_store::ids::mint_at;
use agentmesh_store::{DrainOutcome, DrainRequest, InboxEvent};

use super::presence::{Presence, presence, touch_coordinator};
use super::reconcile::{drop_stale_alerts, reconcile_refine};
use super::walk::{Candidate, drain_lanes, parse, walk};
use crate::db::Db;
use crate::{Res, ledger};

/// Accept-mode passes of events enforce mode would hold back are logged, once per
/// kind per process, so a log is told about them without being flooded.
static WARNED_V1_ACCEPTED: AtomicBool = AtomicBool::new(false);
static WARNED_INVALID_ACCEPTED: AtomicBool = AtomicBool::new(false);

fn warn_once(routed: &Routed, mesh_id: &str) {
    let flag = match routed.counter {
        Some(DrainCounter::V1BroadcastAccepted) => &WARNED_V1_ACCEPTED,
        Some(DrainCounter::V2ValidationFailedAccepted) => &WARNED_INVALID_ACCEPTED,
        _ => return,
    };
    if !flag.swap(true, Ordering::Relaxed) {
        match &routed.violation {
            Some(violation) => {
                tracing::warn!(mesh_id, %violation, "accepted an event that fails the v2 contract; enforce mode would hold it")
            }
            None => tracing::warn!(
                mesh_id,
                "accepted an unversioned event as a broadcast; enforce mode would hold it"
            ),
        }
    }
}

/// The lanes and the router of one drain or peek judged at `now_ms`.
fn router_for<'a>(
    db: &Db<'_>,
    mesh_id: &str,
    request: &'a DrainRequest,
    now_ms: i64,
) -> Res<(Vec<String>, DrainRouter<'a>, Presence)> {
    let me = request.drainer.address();
    let mine = presence(db, mesh_id, me.machine.as_deref(), &me.key, now_ms)?;
    let mut live: HashSet<String> = mine.live_others.iter().cloned().collect();
    // The coordinators live on the machines of the other ids the drainer answers
    // to keep their unicasts too.
    for alias in request.drainer.aliases() {
        let machine = machine_core(&alias.daemon_id);
        live.extend(presence(db, mesh_id, machine, &me.key, now_ms)?.live_others);
    }
    let router = DrainRouter::with_live(&request.drainer, request.enforce, live);
    let lanes = drain_lanes(db, mesh_id, request, &router)?;
    Ok((lanes, router, mine))
}

/// Drains in the caller's transaction, which holds the mesh's lock: every event
/// it takes is taken by no other drain.
///
/// Counters: `v2RoutedAway` counts the events this drain's routing examined and
/// left queued (system events, broadcast terminal events of other
/// coordinators). Unicasts in lanes it does not read (for another machine, for
/// a sibling session, for another live coordinator) count nowhere: they never
/// reach this drain's routing, and such a row is deduplicated by event id (and
/// marked drained) only by its own coordinator's drain.
pub(crate) fn drain(db: &Db<'_>, mesh_id: &str, request: &DrainRequest, now: Timestamp) -> Res<DrainOutcome> {
    let mut out = DrainOutcome::default();
    if request.only_events.as_ref().is_some_and(Vec::is_empty) {
        return Ok(out);
    }
    let limit = request.effective_limit();
    if limit == 0 {
        return Ok(out);
    }
    let (lanes, mut router, presence) = router_for(db, mesh_id, request, now.millis())?;
    if drain_refreshes_presence(presence.my_last_seen, now.millis()) {
        touch_coordinator(db, mesh_id, request.drainer.identity(), now)?;
    }
    let mut taken: Vec<Taken> = Vec::new();
    walk(db, mesh_id, request, lanes, limit as i64, |c, drained| {
        if let Some(projected) = &c.projected {
            let routed = router.route_projected(projected, |event_id| drained.contains(event_id));
            match routed.decision {
                RouteDecision::RoutedAway { .. } => return Ok(false),
                RouteDecision::Deliver => {
                    taken.push(Taken::of(&c));
                    out.events.push(c.into_inbox_event());
                }
                RouteDecision::DedupSkipped | RouteDecision::Quarantine { .. } => taken.push(Taken::of(&c)),
            }
            return Ok(out.events.len() >= limit);
        }
        let raw = parse(&c.payload);
        let routed = router.route(&raw, |event_id| drained.contains(event_id));
        warn_once(&routed, mesh_id);
        match routed.decision {
            RouteDecision::RoutedAway { .. } => return Ok(false),
            RouteDecision::Deliver => {
                taken.push(Taken::of(&c));
                out.events.push(c.into_inbox_event());
            }
            RouteDecision::DedupSkipped => taken.push(Taken::of(&c)),
            RouteDecision::Quarantine { reason } => {
                taken.push(Taken::of(&c));
                let id = mint_at(now);
                ledger::append(db, &quarantine_entry(mesh_id, &c.id, &raw, reason, c.queued_at, id, now))?;
                out.quarantined.push(c.id);
            }
        }
        Ok(out.events.len() >= limit)
    })?;
    take(db, mesh_id, &taken)?;
    out.counters = router.counters();
    out.events = reconcile_refine(db, mesh_id, std::mem::take(&mut out.events), now)?;
    out.events = drop_stale_alerts(db, mesh_id, std::mem::take(&mut out.events))?;
    Ok(out)
}

/// The queue entry of an event a drain or ack takes, and its event id.
struct Taken {
    lane: String,
    queued_at: i64,
    id: String,
    event_id: Option<String>,
}

impl Taken {
    fn of(c: &Candidate) -> Taken {
        Taken { lane: c.lane.clone(), queued_at: c.queued_at, id: c.id.clone(), event_id: c.event_id.clone() }
    }
}

/// Takes events off the queue, recording their event ids as drained: one
/// statement for the queue entries, one for the dedup records.
fn take(db: &Db<'_>, mesh_id: &str, taken: &[Taken]) -> Res<()> {
    if taken.is_empty() {
        return Ok(());
    }
    let lanes: Vec<&str> = taken.iter().map(|t| t.lane.as_str()).collect();
    let times: Vec<i64> = taken.iter().map(|t| t.queued_at).collect();
    let ids: Vec<&str> = taken.iter().map(|t| t.id.as_str()).collect();
    db.execute(
        "DELETE FROM mesh_inbox_queue q
          USING unnest($2::text[], $3::bigint[], $4::text[]) AS t(lane, queued_at, id)
          WHERE q.mesh_id = $1 AND q.lane = t.lane AND q.queued_at = t.queued_at AND q.id = t.id",
        &[&mesh_id, &lanes, &times, &ids],
    )?;
    let (event_ids, ids): (Vec<&str>, Vec<&str>) =
        taken.iter().filter_map(|t| t.event_id.as_deref().map(|e| (e, t.id.as_str()))).unzip();
    if !event_ids.is_empty() {
        db.execute(
            "INSERT INTO mesh_inbox_drained (mesh_id, event_id, id)
             SELECT $1, t.event_id, t.id FROM unnest($2::text[], $3::text[]) AS t(event_id, id)
             ON CONFLICT DO NOTHING",
            &[&mesh_id, &event_ids, &ids],
        )?;
    }
    Ok(())
}

/// What a drain would deliver, marking and counting nothing, in one snapshot.
///
/// A peek reads no clock and writes nothing: it judges liveness at the newest
/// presence instant recorded for the mesh (the latest moment the store knows
/// of), and it does not refresh the drainer's presence.
pub(crate) fn peek(db: &Db<'_>, mesh_id: &str, request: &DrainRequest) -> Res<Vec<InboxEvent>> {
    let mut events = Vec::new();
    if request.only_events.as_ref().is_some_and(Vec::is_empty) {
        return Ok(events);
    }
    let limit = request.effective_limit();
    // As a drain: a limit of 0 hands out nothing.
    if limit == 0 {
        return Ok(events);
    }
    let newest: Option<i64> = db
        .query_one("SELECT MAX(last_seen_ms) FROM mesh_coordinator_presence WHERE mesh_id = $1", &[&mesh_id])?
        .get(0);
    let (lanes, mut router, _) = router_for(db, mesh_id, request, newest.unwrap_or(i64::MIN))?;
    walk(db, mesh_id, request, lanes, limit as i64, |c, drained| {
        let decision = match &c.projected {
            Some(projected) => router.route_projected(projected, |id| drained.contains(id)).decision,
            None => router.route(&parse(&c.payload), |id| drained.contains(id)).decision,
        };
        if decision == RouteDecision::Deliver {
            events.push(c.into_inbox_event());
        }
        Ok(events.len() >= limit)
    })?;
    // A peek reads no clock: a rebuilt terminal is dated like the newest event seen.
    let at = Timestamp::from_millis(events.iter().map(|e| e.queued_at_ms).max().unwrap_or(0));
    let events = reconcile_refine(db, mesh_id, events, at)?;
    drop_stale_alerts(db, mesh_id, events)
}

/// Takes the queued events of `ids` off the queue; how many were queued.
pub(crate) fn ack(db: &Db<'_>, mesh_id: &str, ids: &[String]) -> Res<u64> {
    let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    ids.sort_unstable();
    ids.dedup();
    let rows = db.query(
        "SELECT q.lane, q.queued_at, q.id, e.event_id
           FROM mesh_pending_events e
           JOIN mesh_inbox_queue q ON q.mesh_id = e.mesh_id AND q.lane = e.lane
                                  AND q.queued_at = e.queued_at AND q.id = e.id
          WHERE e.mesh_id = $1 AND e.id = ANY($2)",
        &[&mesh_id, &ids],
    )?;
    let taken: Vec<Taken> = rows
        .iter()
        .map(|r| Taken { lane: r.get(0), queued_at: r.get(1), id: r.get(2), event_id: r.get(3) })
        .collect();
    take(db, mesh_id, &taken)?;
    Ok(taken.len() as u64)
}
