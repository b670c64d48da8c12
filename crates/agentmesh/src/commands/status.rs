//! `agentmesh status`: the mesh at a glance.
//!
//! One read of the mesh's overview (the same view `GET /v1/meshes/{mesh}/status`
//! answers), printed for a person: task counts by status, the assignments in
//! flight with their age and the time left on their lease, idle sessions, the
//! inbox backlog per coordinator, and the newest ledger entries. `--json` prints
//! the view itself.

use std::io::{self, Write};

use agentmesh_api::views::StatusView;
use agentmesh_core::Timestamp;
use agentmesh_store::Durability;

use super::Context;
use crate::now;
use crate::output::{self, Output, Table};

/// Runs `status`.
pub(super) fn run(ctx: &Context, out: &mut Output) -> anyhow::Result<()> {
    let view = ctx.read_api()?.status(ctx.mesh())?;
    let now = now();
    out.emit(&view, |w| write_status(w, &view, now))
}

/// Writes the overview in sections, each skipped or summarised when empty.
fn write_status(w: &mut dyn Write, view: &StatusView, now: Timestamp) -> io::Result<()> {
    let counts: Vec<String> = view.tasks.iter().map(|(status, n)| format!("{n} {status}")).collect();
    writeln!(w, "mesh {}: {}", view.mesh_id, counts.join(", "))?;
    if let Some(mode) = view.durability.as_deref() {
        let promise = mode.parse::<Durability>().map_or("", Durability::promise);
        writeln!(w, "durability {mode}: {promise}")?;
    }

    writeln!(w)?;
    if view.active_assignments.is_empty() {
        writeln!(w, "no tasks in flight")?;
    } else {
        writeln!(w, "in flight:")?;
        let mut table =
            Table::new(vec!["  TASK", "SESSION", "NODE", "AGE", "LEASE LEFT", "EPOCH", "MESSAGE"]);
        for a in &view.active_assignments {
            let lease = a
                .lease_expires_at
                .as_deref()
                .and_then(Timestamp::parse_iso)
                .map_or_else(|| "-".to_owned(), |until| output::remaining(until.millis(), now));
            table.row(vec![
                format!("  {}", a.id),
                a.session_id.clone().unwrap_or_else(|| "-".to_owned()),
                a.node_id.clone().unwrap_or_else(|| "-".to_owned()),
                a.dispatch_timestamp.as_deref().map_or_else(|| "-".to_owned(), |t| output::age(t, now)),
                lease,
                a.epoch.to_string(),
                output::excerpt(&a.message, 50),
            ]);
        }
        table.write(w)?;
    }

    if !view.webhooks.is_empty() {
        writeln!(w)?;
        writeln!(w, "webhooks:")?;
        for hook in &view.webhooks {
            let state = match (&hook.stuck_on, hook.state) {
                (Some(stuck), agentmesh_core::WebhookState::Failing) => format!(
                    "FAILING on {} ({}) since {}: agentmesh webhook resume {} (or skip)",
                    stuck.entry_id,
                    stuck.kind,
                    hook.failing_since.as_deref().unwrap_or("-"),
                    hook.id
                ),
                (Some(stuck), _) => format!("retrying {} ({} failed attempts)", stuck.kind, hook.failures),
                (None, _) => hook.state.as_str().to_owned(),
            };
            writeln!(
                w,
                "  {}  {}  {} delivered  {state}",
                hook.id,
                agentmesh_core::webhook::redacted(&hook.url),
                hook.delivered
            )?;
        }
    }

    writeln!(w)?;
    if view.idle_sessions.is_empty() {
        writeln!(w, "no idle sessions")?;
    } else {
        let idle: Vec<String> = view
            .idle_sessions
            .iter()
            .map(|s| {
                format!(
                    "{}@{} ({}, {} left)",
                    s.session_id,
                    s.node_id,
                    s.provider_type,
                    output::remaining(s.expires_at, now)
                )
            })
            .collect();
        writeln!(w, "idle sessions: {}", idle.join(", "))?;
    }

    writeln!(w)?;
    if view.pending_events == 0 {
        writeln!(w, "inbox: empty")?;
    } else {
        writeln!(w, "inbox: {} undrained event(s)", view.pending_events)?;
        for group in &view.pending_by_coordinator {
            let who = match (&group.daemon_id, &group.run_id, &group.session_id) {
                (None, None, None) => "any coordinator (broadcast or unaddressed)".to_owned(),
                (daemon, run, session) => {
                    let mut parts = vec![daemon.clone().unwrap_or_else(|| "any daemon".to_owned())];
                    if let Some(run) = run {
                        parts.push(format!("run {run}"));
                    }
                    if let Some(session) = session {
                        parts.push(format!("session {session}"));
                    }
                    parts.join(", ")
                }
            };
            writeln!(w, "  {:>5}  {who}", group.count)?;
        }
    }

    writeln!(w)?;
    if view.recent_ledger.is_empty() {
        writeln!(w, "ledger: empty")
    } else {
        writeln!(w, "recent ledger:")?;
        output::write_ledger_entries(w, &view.recent_ledger)
    }
}

#[cfg(test)]
mod tests {
    use agentmesh_api::views::{ActiveAssignmentView, PendingForCoordinatorView};
    use serde_json::{Map, Value};

    use super::*;

    #[test]
    fn the_overview_names_each_part() {
        let now = Timestamp::parse_iso("2025-01-01T00:10:00Z").unwrap();
        let mut tasks = Map::new();
        tasks.insert("pending".into(), Value::from(2));
        tasks.insert("assigned".into(), Value::from(1));
        let view = StatusView {
            mesh_id: "m".into(),
            tasks,
            active_assignments: vec![ActiveAssignmentView {
                id: "t1".into(),
                node_id: Some("n1".into()),
                session_id: Some("w1".into()),
                provider_type: None,
                message: "write the parser".into(),
                dispatch_timestamp: Some("2025-01-01T00:05:00Z".into()),
                lease_expires_at: Some("2025-01-01T00:12:00Z".into()),
                epoch: 3,
            }],
            pending_events: 4,
            pending_by_coordinator: vec![PendingForCoordinatorView {
                daemon_id: Some("mach_A".into()),
                run_id: Some("run-1".into()),
                session_id: None,
                count: 4,
            }],
            idle_sessions: vec![],
            recent_ledger: vec![],
            durability: Some("process-crash-only".into()),
            webhooks: vec![failing_webhook()],
        };
        let mut text = Vec::new();
        write_status(&mut text, &view, now).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.starts_with("mesh m: 2 pending, 1 assigned\n"), "{text}");
        assert!(text.contains("t1") && text.contains("5m") && text.contains("2m"), "{text}");
        assert!(text.contains("inbox: 4 undrained event(s)") && text.contains("mach_A, run run-1"), "{text}");
        assert!(text.contains("no idle sessions") && text.contains("ledger: empty"), "{text}");
        assert!(
            text.contains("durability process-crash-only: an acknowledged write survives a process crash, not a power loss"),
            "{text}"
        );
        assert!(
            text.contains("wh_1  https://ci.example/h?…  7 delivered  FAILING on e9 (task_failed)")
                && text.contains("agentmesh webhook resume wh_1"),
            "{text}"
        );
    }

    fn failing_webhook() -> agentmesh_core::Webhook {
        let valid =
            agentmesh_core::NewWebhook { url: "https://ci.example/h?token=x".into(), ..Default::default() }
                .validate(agentmesh_core::webhook::UrlPolicy::default())
                .unwrap();
        let mut hook = agentmesh_core::Webhook::new("wh_1".into(), "m", &valid, 3, Timestamp::from_millis(0));
        hook.state = agentmesh_core::WebhookState::Failing;
        hook.delivered = 7;
        hook.failing_since = Some("2025-01-01T00:09:00Z".into());
        hook.stuck_on = Some(agentmesh_core::webhook::StuckEntry {
            entry_id: "e9".into(),
            kind: "task_failed".into(),
            seq: 9,
        });
        hook
    }
}
