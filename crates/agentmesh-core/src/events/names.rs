//! Event names and the named sets the inbox rules are written in.
//!
//! Names are compared exactly (no trimming, no case folding), as the original's
//! `Set.has` did. This module only classifies names; what happens to an event of a
//! given class is decided in [`super::routing`], [`super::stamp`] and by the store.

use super::envelope::Scope;

/// A worker began a turn (an acknowledgement; no coordinator text).
pub const AGENT_GENERATING_STARTED: &str = "agent:generating_started";
/// A worker turn finished or the session went idle; carries the final summary.
pub const AGENT_GENERATING_COMPLETED: &str = "agent:generating_completed";
/// A worker session stopped.
pub const AGENT_STOPPED: &str = "agent:stopped";
/// A session is idle and ready for work (silent; drives remote claims).
pub const AGENT_READY: &str = "agent:ready";
/// A worker is parked on a yes/no consent prompt.
pub const AGENT_WAITING_APPROVAL: &str = "agent:waiting_approval";
/// An approval prompt went away (silent retraction).
pub const AGENT_APPROVAL_RESOLVED: &str = "agent:approval_resolved";
/// A worker asks a multiple-choice question.
pub const AGENT_WAITING_CHOICE: &str = "agent:waiting_choice";
/// The stall watchdog or the long-generation monitor fired.
pub const MONITOR_NO_PROGRESS: &str = "monitor:no_progress";
/// The older name of [`MONITOR_NO_PROGRESS`], found in legacy inboxes.
pub const MONITOR_LONG_GENERATING: &str = "monitor:long_generating";
/// The refinery accepted an async merge job; a terminal refine event follows.
pub const REFINE_ACCEPTED: &str = "refine:accepted";
/// A refine job finished successfully.
pub const REFINE_COMPLETED: &str = "refine:completed";
/// A refine job failed.
pub const REFINE_FAILED: &str = "refine:failed";
/// A worktree node finished bootstrapping.
pub const WORKTREE_BOOTSTRAP_COMPLETE: &str = "worktree_bootstrap_complete";
/// A worktree node failed to bootstrap.
pub const WORKTREE_BOOTSTRAP_FAILED: &str = "worktree_bootstrap_failed";
/// Every task of a mission is terminal (a one-shot hint).
pub const MISSION_CLOSE_CANDIDATE: &str = "mission_close_candidate";
/// A queued task will not dispatch; the payload's `reason` says why.
pub const MESH_DISPATCH_BLOCKED: &str = "mesh:dispatch_blocked";
/// Graph orchestration stalled.
pub const MESH_GRAPH_STALE: &str = "mesh:graph_stale";

/// Task events that belong to the coordinator that dispatched the task. They are
/// stamped unicast by default.
pub const TERMINAL_TASK_EVENTS: &[&str] =
    &[AGENT_GENERATING_COMPLETED, AGENT_STOPPED, REFINE_COMPLETED, REFINE_FAILED, REFINE_ACCEPTED];

/// Events whose default scope is `system` (delivered to no coordinator).
///
/// Empty: the newest original routes `mesh:dispatch_blocked` to the coordinator
/// that enqueued the task (see [`UNICAST_ALERT_EVENTS`]), so `system` is reachable
/// only through an explicit scope override at emit time.
pub const SYSTEM_EVENTS: &[&str] = &[];

/// Alerts that page the originating coordinator: unicast by default, but not
/// terminal task events.
pub const UNICAST_ALERT_EVENTS: &[&str] = &[MESH_DISPATCH_BLOCKED];

/// The names a forwarded (relayed) event may carry; anything else is refused at
/// the forwarding boundary.
pub const MESH_COORDINATOR_EVENTS: &[&str] = &[
    AGENT_GENERATING_STARTED,
    AGENT_GENERATING_COMPLETED,
    AGENT_STOPPED,
    AGENT_READY,
    AGENT_WAITING_APPROVAL,
    AGENT_APPROVAL_RESOLVED,
    AGENT_WAITING_CHOICE,
    MONITOR_NO_PROGRESS,
    REFINE_ACCEPTED,
    REFINE_COMPLETED,
    REFINE_FAILED,
    WORKTREE_BOOTSTRAP_COMPLETE,
    WORKTREE_BOOTSTRAP_FAILED,
    MISSION_CLOSE_CANDIDATE,
];

/// Events a coordinator is blocked waiting for. When no coordinator of a mesh is
/// idle, the reconcile loop drains only these into a generating coordinator.
pub const FORCE_INJECT_EVENTS: &[&str] = &[
    AGENT_GENERATING_COMPLETED,
    AGENT_STOPPED,
    AGENT_WAITING_APPROVAL,
    AGENT_WAITING_CHOICE,
    REFINE_COMPLETED,
    REFINE_FAILED,
    WORKTREE_BOOTSTRAP_COMPLETE,
    WORKTREE_BOOTSTRAP_FAILED,
];

/// Undrained events the retention sweep never expires, at any age. The same set
/// as [`FORCE_INJECT_EVENTS`]: their payload may be the only copy of a worker's
/// output.
pub const NEVER_EXPIRE_EVENTS: &[&str] = FORCE_INJECT_EVENTS;

/// Level-backed approval nudges, exempt from the idle hold.
pub const APPROVAL_EVENTS: &[&str] = &[AGENT_WAITING_APPROVAL, AGENT_WAITING_CHOICE];

/// Events dropped at drain once the task they are about is already terminal
/// (see [`super::stale`]).
pub const STALE_TASK_DROPPABLE_EVENTS: &[&str] = &[MESH_DISPATCH_BLOCKED, MONITOR_NO_PROGRESS];

/// Completions whose fingerprint is keyed by task id rather than by timestamp.
pub const TERMINAL_COMPLETION_EVENTS: &[&str] = &[AGENT_GENERATING_COMPLETED, AGENT_STOPPED];

/// The terminal outcomes of a refine job.
pub const REFINE_TERMINAL_EVENTS: &[&str] = &[REFINE_COMPLETED, REFINE_FAILED];

/// Node-lifecycle events of a worktree bootstrap, fingerprinted by node.
pub const WORKTREE_BOOTSTRAP_EVENTS: &[&str] = &[WORKTREE_BOOTSTRAP_COMPLETE, WORKTREE_BOOTSTRAP_FAILED];

fn member(set: &[&str], name: &str) -> bool {
    set.contains(&name)
}

/// True for [`TERMINAL_TASK_EVENTS`].
pub fn is_terminal_task_event(name: &str) -> bool {
    member(TERMINAL_TASK_EVENTS, name)
}

/// True for [`SYSTEM_EVENTS`].
pub fn is_system_event(name: &str) -> bool {
    member(SYSTEM_EVENTS, name)
}

/// True for [`MESH_COORDINATOR_EVENTS`].
pub fn is_mesh_coordinator_event(name: &str) -> bool {
    member(MESH_COORDINATOR_EVENTS, name)
}

/// True for [`FORCE_INJECT_EVENTS`].
pub fn is_force_inject_event(name: &str) -> bool {
    member(FORCE_INJECT_EVENTS, name)
}

/// True for [`NEVER_EXPIRE_EVENTS`].
pub fn is_never_expire_event(name: &str) -> bool {
    member(NEVER_EXPIRE_EVENTS, name)
}

/// True for [`APPROVAL_EVENTS`].
pub fn is_approval_event(name: &str) -> bool {
    member(APPROVAL_EVENTS, name)
}

/// True for [`STALE_TASK_DROPPABLE_EVENTS`].
pub fn is_stale_task_droppable_event(name: &str) -> bool {
    member(STALE_TASK_DROPPABLE_EVENTS, name)
}

/// True for [`TERMINAL_COMPLETION_EVENTS`].
pub fn is_terminal_completion_event(name: &str) -> bool {
    member(TERMINAL_COMPLETION_EVENTS, name)
}

/// True for [`REFINE_TERMINAL_EVENTS`].
pub fn is_refine_terminal_event(name: &str) -> bool {
    member(REFINE_TERMINAL_EVENTS, name)
}

/// True for [`WORKTREE_BOOTSTRAP_EVENTS`].
pub fn is_worktree_bootstrap_event(name: &str) -> bool {
    member(WORKTREE_BOOTSTRAP_EVENTS, name)
}

/// The scope an event is stamped with when the emitter does not choose one:
/// `system` for [`SYSTEM_EVENTS`], `unicast` for terminal task events and
/// unicast alerts, `broadcast` for everything else (node lifecycle and progress).
pub fn default_scope_for_event(name: &str) -> Scope {
    if is_system_event(name) {
        Scope::System
    } else if is_terminal_task_event(name) || member(UNICAST_ALERT_EVENTS, name) {
        Scope::Unicast
    } else {
        Scope::Broadcast
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_sizes_match_the_original() {
        assert_eq!(TERMINAL_TASK_EVENTS.len(), 5);
        assert_eq!(MESH_COORDINATOR_EVENTS.len(), 14);
        assert_eq!(FORCE_INJECT_EVENTS.len(), 8);
        assert_eq!(NEVER_EXPIRE_EVENTS, FORCE_INJECT_EVENTS);
        assert!(SYSTEM_EVENTS.is_empty());
    }

    #[test]
    fn coordinator_events_exclude_mesh_alerts() {
        assert!(is_mesh_coordinator_event(AGENT_READY));
        assert!(is_mesh_coordinator_event(MISSION_CLOSE_CANDIDATE));
        assert!(!is_mesh_coordinator_event(MESH_DISPATCH_BLOCKED));
        assert!(!is_mesh_coordinator_event(MESH_GRAPH_STALE));
    }

    #[test]
    fn predicates_are_exact() {
        assert!(is_terminal_task_event("refine:accepted"));
        assert!(!is_terminal_task_event(" agent:stopped"));
        assert!(!is_terminal_task_event("AGENT:STOPPED"));
        assert!(is_force_inject_event(WORKTREE_BOOTSTRAP_FAILED));
        assert!(!is_force_inject_event(REFINE_ACCEPTED));
        assert!(is_never_expire_event(AGENT_WAITING_CHOICE));
        assert!(is_approval_event(AGENT_WAITING_APPROVAL));
        assert!(!is_approval_event(AGENT_APPROVAL_RESOLVED));
        assert!(is_stale_task_droppable_event(MONITOR_NO_PROGRESS));
        assert!(is_terminal_completion_event(AGENT_STOPPED));
        assert!(!is_terminal_completion_event(REFINE_COMPLETED));
        assert!(is_refine_terminal_event(REFINE_FAILED));
        assert!(!is_refine_terminal_event(REFINE_ACCEPTED));
        assert!(is_worktree_bootstrap_event(WORKTREE_BOOTSTRAP_COMPLETE));
        assert!(!is_system_event(MESH_DISPATCH_BLOCKED));
    }

    #[test]
    fn default_scopes() {
        for name in TERMINAL_TASK_EVENTS {
            assert_eq!(default_scope_for_event(name), Scope::Unicast, "{name}");
        }
        assert_eq!(default_scope_for_event(MESH_DISPATCH_BLOCKED), Scope::Unicast);
        assert_eq!(default_scope_for_event(AGENT_READY), Scope::Broadcast);
        assert_eq!(default_scope_for_event("node_joined"), Scope::Broadcast);
        assert_eq!(default_scope_for_event(WORKTREE_BOOTSTRAP_COMPLETE), Scope::Broadcast);
        assert_eq!(default_scope_for_event(AGENT_WAITING_APPROVAL), Scope::Broadcast);
    }
}
