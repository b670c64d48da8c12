//! Drains, peeks and acks: the walk's events routed by the core, the delivered,
//! deduplicated and quarantined ones taken off the queue.

use agentmesh_store::ids::mint_at;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use agentmesh_core::Timestamp;
use agentmesh_core::daemon_id::machine_core;
use agentmesh_core::events::held::quarantine_entry;
use agentmesh_core::events::presence::drain_refreshes_presence;
use agentmesh_core::events::{DrainCounter, DrainRouter, RouteDecision};
use agentmesh_store::{DrainOutcome, DrainRequest, InboxEvent};
use rusqlite::{Connection, OptionalExtension, params};

use super::presence::{Presence, presence, touch_coordinator};
use super::reconcile::{drop_stale_alerts, reconcile_refine};
use super::walk::{Candidate, drain_lanes, parse, walk};
use crate::{Res, ledger};

/// Accept-mode passes of events enforce mode would hold back are logged, once per
/// kind per process, so a log is told about them without being flooded.
pub(super) static WARNED_V1_ACCEPTED: AtomicBool = AtomicBool::new(false);
pub(super) static WARNED_INVALID_ACCEPTED: AtomicBool = AtomicBool::new(false);

pub(super) fn warn_once(routed: &agentmesh_core::events::Routed, mesh_id: &str) {
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
pub(super) fn router_for<'a>(
    conn: &Connection,
    mesh_id: &str,
    request: &'a DrainRequest,
    now_ms: i64,
) -> Res<(Vec<String>, DrainRouter<'a>, Presence)> {
    let me = request.drainer.address();
    let mine = presence(conn, mesh_id, me.machine.as_deref(), &me.key, now_ms)?;
    let mut live: HashSet<String> = mine.live_others.iter().cloned().collect();
    // The coordinators live on the machines of the other ids the drainer answers
    // to keep their unicasts too.
    for alias in request.drainer.aliases() {
        let machine = machine_core(&alias.daemon_id);
        live.extend(presence(conn, mesh_id, machine, &me.key, now_ms)?.live_others);
    }
    let router = DrainRouter::with_live(&request.drainer, request.enforce, live);
    let lanes = drain_lanes(conn, mesh_id, request, &router)?;
    Ok((lanes, router, mine))
}

/// Drains in the caller's transaction.
///
/// Counters: `v2RoutedAway` counts the events this drain's routing examined and
/// left queued: system events, broadcast terminal events of other
/// coordinators, and unicasts in a lane it reads that routing
/// still routes away (its addressee became live between the lane choice and the
/// routing cannot happen inside one transaction, so in practice: none). Unicasts
/// in lanes it does not read (for another machine, for a sibling session told
/// apart by session, for another live coordinator) count nowhere, as events
/// targeted at another daemon already did: they never reach this drain's
/// routing. For the same reason such a row is deduplicated by event id (and
/// marked drained) only by its own coordinator's drain.
pub(crate) fn drain(
    conn: &Connection,
    mesh_id: &str,
    request: &DrainRequest,
    now: Timestamp,
) -> Res<DrainOutcome> {
    let mut out = DrainOutcome::default();
    if request.only_events.as_ref().is_some_and(Vec::is_empty) {
        return Ok(out);
    }
    let limit = request.effective_limit();
    if limit == 0 {
        return Ok(out);
    }
    let (lanes, mut router, presence) = router_for(conn, mesh_id, request, now.millis())?;
    if drain_refreshes_presence(presence.my_last_seen, now.millis()) {
        touch_coordinator(conn, mesh_id, request.drainer.identity(), now)?;
    }
    let mut taken: Vec<Taken> = Vec::new();
    walk(conn, mesh_id, request, lanes, limit as i64, |c, drained| {
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
                ledger::append(conn, &quarantine_entry(mesh_id, &c.id, &raw, reason, c.queued_at, id, now))?;
                out.quarantined.push(c.id);
            }
        }
        Ok(out.events.len() >= limit)
    })?;
    take(conn, mesh_id, &taken)?;
    out.counters = router.counters();
    out.events = reconcile_refine(conn, mesh_id, std::mem::take(&mut out.events), now)?;
    out.events = drop_stale_alerts(conn, mesh_id, std::mem::take(&mut out.events))?;
    Ok(out)
}

/// The queue entry of an event a drain takes, and its event id.
pub(super) struct Taken {
    pub(super) lane: String,
    pub(super) queued_at: i64,
    pub(super) id: String,
    pub(super) event_id: Option<String>,
}

impl Taken {
    pub(super) fn of(c: &Candidate) -> Taken {
        Taken { lane: c.lane.clone(), queued_at: c.queued_at, id: c.id.clone(), event_id: c.event_id.clone() }
    }
}

/// The queue entries of one lane from (?3, ?4) to (?5, ?6), both included.
macro_rules! queue_range {
    () => {
        "mesh_id = ?1 AND lane = ?2 AND (queued_at, id) >= (?3, ?4) AND (queued_at, id) <= (?5, ?6)"
    };
}

/// Takes events off the queue, recording their event ids as drained (a drain's
/// delivered, deduplicated and quarantined events; an ack's events).
///
/// A lane whose taken events are all its queue holds between the first and the
/// last of them (the usual case: a coordinator taking its own events in a row)
/// loses them in one range delete; otherwise each entry goes on its own.
pub(super) fn take(conn: &Connection, mesh_id: &str, taken: &[Taken]) -> Res<()> {
    let mut lanes: Vec<&str> = taken.iter().map(|t| t.lane.as_str()).collect();
    lanes.sort_unstable();
    lanes.dedup();
    for lane in lanes {
        let mut of_lane: Vec<&Taken> = taken.iter().filter(|t| t.lane == lane).collect();
        // A drain's walk hands them over in this order already; an ack need not.
        of_lane.sort_unstable_by(|a, b| (a.queued_at, &a.id).cmp(&(b.queued_at, &b.id)));
        let (first, last) = (of_lane[0], of_lane[of_lane.len() - 1]);
        let bounds = params![mesh_id, lane, first.queued_at, first.id, last.queued_at, last.id];
        let between: i64 = conn
            .prepare_cached(concat!("SELECT COUNT(*) FROM mesh_inbox_queue WHERE ", queue_range!()))?
            .query_row(bounds, |r| r.get(0))?;
        if between == of_lane.len() as i64 {
            conn.prepare_cached(concat!("DELETE FROM mesh_inbox_queue WHERE ", queue_range!()))?
                .execute(bounds)?;
        } else {
            let mut dequeue = conn.prepare_cached(
                "DELETE FROM mesh_inbox_queue WHERE mesh_id = ?1 AND lane = ?2 AND queued_at = ?3 AND id = ?4",
            )?;
            for t in of_lane {
                dequeue.execute(params![mesh_id, t.lane, t.queued_at, t.id])?;
            }
        }
    }
    // The dedup records go in statements of up to RECORDS_PER_INSERT rows each.
    let records: Vec<(&str, &str)> =
        taken.iter().filter_map(|t| t.event_id.as_deref().map(|e| (e, t.id.as_str()))).collect();
    for chunk in records.chunks(RECORDS_PER_INSERT) {
        let rows =
            (0..chunk.len()).map(|i| format!("(?1, ?{}, ?{})", 2 * i + 2, 2 * i + 3)).collect::<Vec<_>>();
        let mut insert = conn.prepare_cached(&format!(
            "INSERT OR IGNORE INTO mesh_inbox_drained (mesh_id, event_id, id) VALUES {}",
            rows.join(", ")
        ))?;
        insert.raw_bind_parameter(1, mesh_id)?;
        for (i, (event_id, id)) in chunk.iter().enumerate() {
            insert.raw_bind_parameter(2 * i + 2, event_id)?;
            insert.raw_bind_parameter(2 * i + 3, id)?;
        }
        insert.raw_execute()?;
    }
    Ok(())
}

/// Dedup records one statement of [`take`] inserts at most.
pub(super) const RECORDS_PER_INSERT: usize = 50;

/// What a drain would deliver, marking and counting nothing.
///
/// A peek reads no clock and writes nothing: it judges liveness at the newest
/// presence instant recorded for the mesh (the latest moment the store knows
/// of), and it does not refresh the drainer's presence.
pub(crate) fn peek(conn: &Connection, mesh_id: &str, request: &DrainRequest) -> Res<Vec<InboxEvent>> {
    let mut events = Vec::new();
    if request.only_events.as_ref().is_some_and(Vec::is_empty) {
        return Ok(events);
    }
    let limit = request.effective_limit();
    // As a drain: a limit of 0 hands out nothing.
    if limit == 0 {
        return Ok(events);
    }
    let newest: Option<i64> = conn
        .prepare_cached("SELECT MAX(last_seen_ms) FROM mesh_coordinator_presence WHERE mesh_id = ?1")?
        .query_row([mesh_id], |r| r.get(0))?;
    let (lanes, mut router, _) = router_for(conn, mesh_id, request, newest.unwrap_or(i64::MIN))?;
    walk(conn, mesh_id, request, lanes, limit as i64, |c, drained| {
        let decision = match &c.projected {
            Some(projected) => router.route_projected(projected, |id| drained.contains(id)).decision,
            None => {
                let raw = parse(&c.payload);
                if router.route(&raw, |id| drained.contains(id)).decision == RouteDecision::Deliver {
                    events.push(c.into_inbox_event());
                }
                return Ok(events.len() >= limit);
            }
        };
        if decision == RouteDecision::Deliver {
            events.push(c.into_inbox_event());
        }
        Ok(events.len() >= limit)
    })?;
    // A peek reads no clock: a rebuilt terminal is dated like the newest event seen.
    let at = Timestamp::from_millis(events.iter().map(|e| e.queued_at_ms).max().unwrap_or(0));
    let events = reconcile_refine(conn, mesh_id, events, at)?;
    drop_stale_alerts(conn, mesh_id, events)
}

pub(crate) fn ack(conn: &Connection, mesh_id: &str, ids: &[String]) -> Res<u64> {
    let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut find = conn.prepare_cached(
        "SELECT q.lane, q.queued_at, q.id, e.event_id
           FROM mesh_pending_events e
           JOIN mesh_inbox_queue q ON q.mesh_id = e.mesh_id AND q.lane = e.lane
                                  AND q.queued_at = e.queued_at AND q.id = e.id
          WHERE e.mesh_id = ?1 AND e.id = ?2",
    )?;
    let mut taken = Vec::new();
    for id in ids {
        let queued = find
            .query_row(params![mesh_id, id], |r| {
                Ok(Taken { lane: r.get(0)?, queued_at: r.get(1)?, id: r.get(2)?, event_id: r.get(3)? })
            })
            .optional()?;
        taken.extend(queued);
    }
    take(conn, mesh_id, &taken)?;
    Ok(taken.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentmesh_core::events::{EmitHint, PendingEvent, stamp_event};
    use serde_json::json;

    use super::super::walk::DEDUP_RANGE_MAX;
    use crate::inbox::{count, insert_row};

    /// Event-id dedup holds whether a page's id range holds few dedup records
    /// (read as one range) or many (asked id by id).
    #[test]
    fn event_id_dedup_holds_across_a_wide_id_range() {
        use agentmesh_core::events::{CoordinatorIdentity, Drainer};
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        let me = CoordinatorIdentity::new("mach_A", "run-1", None);
        let request = DrainRequest {
            drainer: Drainer::new(me.clone(), &[]),
            only_events: None,
            enforce: false,
            limit: Some(1000),
        };
        let queue = |conn: &Connection, task: &str, event_id: &str, at: i64| {
            let mut ev = PendingEvent::new(
                "agent:generating_completed",
                "m",
                "",
                serde_json::Map::from_iter([("taskId".to_owned(), json!(task))]),
                Timestamp::from_millis(at),
            );
            ev.target_coordinator_daemon_id = Some("mach_A".to_owned());
            let hint = EmitHint { coordinator_run_id: Some("run-1".to_owned()), ..EmitHint::default() };
            stamp_event(&mut ev, &hint, event_id, None);
            assert!(insert_row(conn, &format!("row-{task}"), &ev).unwrap());
        };
        let n = DEDUP_RANGE_MAX as usize + 100;
        for i in 0..n {
            queue(&conn, &format!("t{i}"), &format!("e{i:05}"), i as i64);
        }
        let first = drain(&conn, "m", &request, Timestamp::from_millis(10_000)).unwrap();
        assert_eq!(first.events.len(), n);
        // Copies of drained events (new content, known ids) at both ends of the
        // range, around a new one: the range holds every earlier record.
        queue(&conn, "copy-low", "e00000", 20_000);
        queue(&conn, "new", "e00300x", 20_001);
        queue(&conn, "copy-high", &format!("e{:05}", n - 1), 20_002);
        let wide = drain(&conn, "m", &request, Timestamp::from_millis(30_000)).unwrap();
        let ids: Vec<&str> = wide.events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["row-new"]);
        assert_eq!((wide.counters.v2_delivered, wide.counters.v2_dedup_skipped), (1, 2));
        // A narrow range: one copy of a drained event next to its original's id.
        queue(&conn, "copy-narrow", "e00300x", 40_000);
        let narrow = drain(&conn, "m", &request, Timestamp::from_millis(50_000)).unwrap();
        assert!(narrow.events.is_empty());
        assert_eq!((narrow.counters.v2_delivered, narrow.counters.v2_dedup_skipped), (0, 1));
        assert_eq!(count(&conn, "m").unwrap(), 0);
    }
}
