//! Who may claim which task: the gates in their fixed order, and
//! the refusal reasons.
//!
//! A store finds candidates in claim order (tier, then priority, then age) and asks
//! [`check_gates`] about each; the first that passes every gate wins. When none
//! does, the refusal is the reason of the candidate that got furthest through the
//! gates ([`ClaimRefusal::furthest`]).

use std::fmt;

pub mod walk;

use crate::{TaskMode, Timestamp, daemon_id, tags};

/// The worker session asking for work.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claimant {
    /// The node (machine or worktree) the session runs on.
    pub node_id: String,
    /// The worker session.
    pub session_id: String,
    /// The node's capability tags.
    pub capability_tags: Vec<String>,
    /// The session's provider type (`claude-cli`, `codex-cli`, ...).
    pub provider_type: Option<String>,
    /// At most this many tasks may be assigned at once to this provider on this
    /// node (all id forms of the node count).
    pub provider_max_parallel: Option<u32>,
    /// The node is a worktree clone, which never takes a convergence task.
    pub node_is_worktree: bool,
    /// How the session's transcript is read, stamped on the task it claims
    /// (`assignedTranscriptProfile`).
    pub transcript_profile: Option<TranscriptProfile>,
    /// The task difficulties the session takes (`allowedTaskDifficulties`):
    /// a task of another difficulty stays pending for it. `None` takes any.
    pub allowed_difficulties: Option<Vec<String>>,
}

/// How a worker session's transcript is to be read, as the original's claim
/// takes it and stamps it on the assignment (`assignedTranscriptProfile`):
/// the transcript's class and timing, and whether the session emits PTY turn
/// events.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TranscriptProfile {
    /// The transcript's class.
    pub class: String,
    /// When the transcript is written.
    pub timing: String,
    /// Whether the session emits PTY turn events.
    #[serde(default)]
    pub emits_pty_turn_events: bool,
}

impl TranscriptProfile {
    /// The longest class or timing taken.
    pub const MAX_LEN: usize = 64;

    /// Checks a profile a caller gave: `class` and `timing` one line, not
    /// blank, at most [`TranscriptProfile::MAX_LEN`] characters; `within`
    /// prefixes the field names (`assignedTranscriptProfile`). Returns it
    /// trimmed.
    pub fn checked(self, within: &str) -> Result<TranscriptProfile, crate::InvalidInput> {
        let field = |name: &str, value: &str| {
            crate::InvalidInput::one_line(&format!("{within}.{name}"), value, Self::MAX_LEN)
        };
        Ok(TranscriptProfile {
            class: field("class", &self.class)?,
            timing: field("timing", &self.timing)?,
            emits_pty_turn_events: self.emits_pty_turn_events,
        })
    }

    /// The profile as the task stores it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "class": self.class,
            "timing": self.timing,
            "emitsPtyTurnEvents": self.emits_pty_turn_events,
        })
    }
}

impl Claimant {
    /// The provider and the parallel cap a claim of this claimant is held to:
    /// when it names a provider (not blank), a cap and its node.
    pub fn parallel_cap(&self) -> Option<(&str, u32)> {
        let provider = self.provider_type.as_deref().map(str::trim).filter(|p| !p.is_empty())?;
        let max = self.provider_max_parallel?;
        (!self.node_id.trim().is_empty()).then_some((provider, max))
    }
}

/// Why a claim returned no task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimRefusal {
    /// The session already holds an assigned task.
    SessionAlreadyAssigned,
    /// No pending task could go to this session at all.
    NoPendingCandidates,
    /// Gate 1: the node lacks a required capability tag.
    RequiredTagsUnsatisfied,
    /// Gate 2: a dependency is not completed, or the task carries a `blockedReason`.
    DependenciesUnsatisfied,
    /// Gate 3: the task's `notBefore` is still in the future.
    NotBeforeDelayed,
    /// Gate 4: the task is parked.
    TaskParked,
    /// Gate 5: a convergence task and a worktree node.
    ConvergenceTargetIsWorktree,
    /// Gate 6: the task is pinned to another node or session.
    TargetPinUnmatched,
    /// Gate 7: the task's difficulty is not one the claimant takes.
    DifficultyFloorUnmet,
    /// Gate 8: the (node, provider) parallel cap is reached.
    ParallelCapReached,
    /// Gate 9: a write task and a node that already runs an assigned task.
    NodeBusyWithActiveAssignment,
    /// Gate 10, decided by the store once every other gate passed: another
    /// holder's path reservation overlaps the paths the task declares (the
    /// ledger's `reservation_denied` entry names the holder).
    PathsReserved,
}

impl ClaimRefusal {
    /// Every refusal, in gate order.
    pub const ALL: [ClaimRefusal; 12] = [
        ClaimRefusal::SessionAlreadyAssigned,
        ClaimRefusal::NoPendingCandidates,
        ClaimRefusal::RequiredTagsUnsatisfied,
        ClaimRefusal::DependenciesUnsatisfied,
        ClaimRefusal::NotBeforeDelayed,
        ClaimRefusal::TaskParked,
        ClaimRefusal::ConvergenceTargetIsWorktree,
        ClaimRefusal::TargetPinUnmatched,
        ClaimRefusal::DifficultyFloorUnmet,
        ClaimRefusal::ParallelCapReached,
        ClaimRefusal::NodeBusyWithActiveAssignment,
        ClaimRefusal::PathsReserved,
    ];

    /// The reason's wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ClaimRefusal::SessionAlreadyAssigned => "session_already_assigned",
            ClaimRefusal::NoPendingCandidates => "no_pending_candidates",
            ClaimRefusal::RequiredTagsUnsatisfied => "required_tags_unsatisfied",
            ClaimRefusal::DependenciesUnsatisfied => "dependencies_unsatisfied",
            ClaimRefusal::NotBeforeDelayed => "not_before_delayed",
            ClaimRefusal::TaskParked => "task_parked",
            ClaimRefusal::ConvergenceTargetIsWorktree => "convergence_target_is_worktree",
            ClaimRefusal::TargetPinUnmatched => "target_pin_unmatched",
            ClaimRefusal::DifficultyFloorUnmet => "difficulty_floor_unmet",
            ClaimRefusal::ParallelCapReached => "parallel_cap_reached",
            ClaimRefusal::NodeBusyWithActiveAssignment => "node_busy_with_active_assignment",
            ClaimRefusal::PathsReserved => "paths_reserved",
        }
    }

    /// How far through the gate chain a candidate with this refusal got.
    pub const fn depth(self) -> u8 {
        match self {
            ClaimRefusal::SessionAlreadyAssigned | ClaimRefusal::NoPendingCandidates => 0,
            ClaimRefusal::RequiredTagsUnsatisfied => 1,
            ClaimRefusal::DependenciesUnsatisfied => 2,
            ClaimRefusal::NotBeforeDelayed => 3,
            ClaimRefusal::TaskParked => 4,
            ClaimRefusal::ConvergenceTargetIsWorktree => 5,
            ClaimRefusal::TargetPinUnmatched => 6,
            ClaimRefusal::DifficultyFloorUnmet => 7,
            ClaimRefusal::ParallelCapReached => 8,
            ClaimRefusal::NodeBusyWithActiveAssignment => 9,
            ClaimRefusal::PathsReserved => 10,
        }
    }

    /// Of two refusals, the one that got further (the first on a tie).
    pub fn furthest(best: Option<ClaimRefusal>, next: ClaimRefusal) -> ClaimRefusal {
        match best {
            Some(b) if b.depth() >= next.depth() => b,
            _ => next,
        }
    }
}

impl fmt::Display for ClaimRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the gates need to know about one candidate task. Stores fill it from
/// projected columns, without decoding the whole task.
#[derive(Debug, Clone, Copy)]
pub struct CandidateFacts<'a> {
    /// Required capability tags.
    pub required_tags: &'a [String],
    /// Every dependency completed and no `blockedReason`.
    pub dependencies_met: bool,
    /// `notBefore` in milliseconds, `None` when unset or unparsable.
    pub not_before_ms: Option<i64>,
    /// The task is parked.
    pub parked: bool,
    /// The task mode.
    pub task_mode: Option<TaskMode>,
    /// The task is read-only.
    pub readonly: bool,
    /// The node pin.
    pub target_node_id: Option<&'a str>,
    /// The session pin.
    pub target_session_id: Option<&'a str>,
    /// The task's difficulty, when the claimant takes only some (`None`
    /// otherwise, or when the task has none).
    pub difficulty: Option<&'a str>,
}

/// Facts about the claimant's node that hold for every candidate of one claim.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeLoad {
    /// Some assigned task runs on the node (any id form).
    pub node_busy: bool,
    /// The (node, provider) parallel cap is reached.
    pub cap_reached: bool,
}

impl NodeLoad {
    /// The load of `claimant`'s node from what a store counted on it (every id
    /// form of the node): whether any task is assigned there, and how many of
    /// its assigned tasks run the claimant's provider (counted only when
    /// [`Claimant::parallel_cap`] applies; any number otherwise).
    pub fn from_counts(claimant: &Claimant, node_busy: bool, of_provider: u64) -> NodeLoad {
        let cap_reached = claimant.parallel_cap().is_some_and(|(_, max)| of_provider >= u64::from(max));
        NodeLoad { node_busy, cap_reached }
    }
}

/// Whether `claimant` takes a task of `difficulty`: it names no difficulties,
/// or the task has none (or `freeform`, which is unconstrained), or the task's
/// is among those it names.
pub fn difficulty_allowed(difficulty: Option<&str>, claimant: &Claimant) -> bool {
    let Some(allowed) = &claimant.allowed_difficulties else { return true };
    match difficulty.map(str::trim).filter(|d| !d.is_empty() && *d != "freeform") {
        None => true,
        Some(d) => allowed.iter().any(|a| a.trim() == d),
    }
}

/// Applies the gates, in order, to one candidate. `Ok` means the claimant may take it.
pub fn check_gates(
    task: &CandidateFacts<'_>,
    claimant: &Claimant,
    load: NodeLoad,
    now: Timestamp,
) -> Result<(), ClaimRefusal> {
    if !tags::satisfies_required_tags(task.required_tags, &claimant.capability_tags) {
        return Err(ClaimRefusal::RequiredTagsUnsatisfied);
    }
    if !task.dependencies_met {
        return Err(ClaimRefusal::DependenciesUnsatisfied);
    }
    if task.not_before_ms.is_some_and(|nb| nb > now.millis()) {
        return Err(ClaimRefusal::NotBeforeDelayed);
    }
    if task.parked {
        return Err(ClaimRefusal::TaskParked);
    }
    if task.task_mode == Some(TaskMode::Convergence) && claimant.node_is_worktree {
        return Err(ClaimRefusal::ConvergenceTargetIsWorktree);
    }
    if let Some(pin) = task.target_session_id
        && !daemon_id::session_ids_equivalent(pin, &claimant.session_id)
    {
        return Err(ClaimRefusal::TargetPinUnmatched);
    }
    if let Some(pin) = task.target_node_id
        && !daemon_id::node_pin_matches(pin, &claimant.node_id)
    {
        return Err(ClaimRefusal::TargetPinUnmatched);
    }
    if !difficulty_allowed(task.difficulty, claimant) {
        return Err(ClaimRefusal::DifficultyFloorUnmet);
    }
    if load.cap_reached {
        return Err(ClaimRefusal::ParallelCapReached);
    }
    if load.node_busy && !task.readonly {
        return Err(ClaimRefusal::NodeBusyWithActiveAssignment);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimant() -> Claimant {
        Claimant {
            node_id: "daemon_mach_A".into(),
            session_id: "s1".into(),
            capability_tags: vec!["os=linux".into()],
            ..Claimant::default()
        }
    }

    #[test]
    fn the_parallel_cap_applies_to_a_named_provider_with_a_cap_on_a_node() {
        let capped = Claimant {
            provider_type: Some(" claude-cli ".into()),
            provider_max_parallel: Some(2),
            ..claimant()
        };
        assert_eq!(capped.parallel_cap(), Some(("claude-cli", 2)));
        let no_provider = Claimant { provider_type: Some("  ".into()), ..capped.clone() };
        let no_cap = Claimant { provider_max_parallel: None, ..capped.clone() };
        let no_node = Claimant { node_id: " ".into(), ..capped.clone() };
        for free in [&no_provider, &no_cap, &no_node] {
            assert_eq!(free.parallel_cap(), None, "{free:?}");
            assert!(!NodeLoad::from_counts(free, true, 99).cap_reached);
        }
        assert_eq!(NodeLoad::from_counts(&capped, true, 1), NodeLoad { node_busy: true, cap_reached: false });
        assert_eq!(NodeLoad::from_counts(&capped, true, 2), NodeLoad { node_busy: true, cap_reached: true });
        assert_eq!(NodeLoad::from_counts(&capped, false, 0), NodeLoad::default());
    }

    fn open_task() -> CandidateFacts<'static> {
        CandidateFacts {
            required_tags: &[],
            dependencies_met: true,
            not_before_ms: None,
            parked: false,
            task_mode: None,
            readonly: false,
            target_node_id: None,
            target_session_id: None,
            difficulty: None,
        }
    }

    #[test]
    fn a_claimant_that_names_difficulties_takes_only_those_and_tasks_without_one() {
        let picky =
            Claimant { allowed_difficulties: Some(vec!["easy".into(), "medium".into()]), ..claimant() };
        let of = |difficulty: Option<&'static str>| CandidateFacts { difficulty, ..open_task() };
        let load = NodeLoad::default();
        assert_eq!(
            check_gates(&of(Some("difficult")), &picky, load, NOW),
            Err(ClaimRefusal::DifficultyFloorUnmet)
        );
        for takes in [Some("easy"), Some("medium"), Some("freeform"), None, Some(" ")] {
            assert_eq!(check_gates(&of(takes), &picky, load, NOW), Ok(()), "{takes:?}");
        }
        assert_eq!(check_gates(&of(Some("difficult")), &claimant(), load, NOW), Ok(()), "no list takes any");
        // The gate comes after the pins and before the cap.
        let capped = NodeLoad { cap_reached: true, ..load };
        assert_eq!(
            check_gates(&of(Some("difficult")), &picky, capped, NOW),
            Err(ClaimRefusal::DifficultyFloorUnmet)
        );
        let pinned = CandidateFacts { target_session_id: Some("other"), ..of(Some("difficult")) };
        assert_eq!(check_gates(&pinned, &picky, load, NOW), Err(ClaimRefusal::TargetPinUnmatched));
    }

    const NOW: Timestamp = Timestamp::from_millis(1_000_000);

    #[test]
    fn every_refusal_is_listed_once_in_gate_order() {
        let names: std::collections::BTreeSet<&str> = ClaimRefusal::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), ClaimRefusal::ALL.len());
        assert!(ClaimRefusal::ALL.windows(2).all(|pair| pair[0].depth() <= pair[1].depth()));
    }

    #[test]
    fn gates_run_in_order() {
        let c = claimant();
        let tags = vec!["gpu".to_owned()];
        let mut t = open_task();
        t.required_tags = &tags;
        t.dependencies_met = false;
        assert_eq!(check_gates(&t, &c, NodeLoad::default(), NOW), Err(ClaimRefusal::RequiredTagsUnsatisfied));
        t.required_tags = &[];
        assert_eq!(check_gates(&t, &c, NodeLoad::default(), NOW), Err(ClaimRefusal::DependenciesUnsatisfied));
        t.dependencies_met = true;
        t.not_before_ms = Some(NOW.millis() + 1);
        assert_eq!(check_gates(&t, &c, NodeLoad::default(), NOW), Err(ClaimRefusal::NotBeforeDelayed));
        t.not_before_ms = Some(NOW.millis());
        assert_eq!(check_gates(&t, &c, NodeLoad::default(), NOW), Ok(()));
    }

    #[test]
    fn busy_node_takes_only_readonly_work() {
        let c = claimant();
        let busy = NodeLoad { node_busy: true, cap_reached: false };
        let mut t = open_task();
        assert_eq!(check_gates(&t, &c, busy, NOW), Err(ClaimRefusal::NodeBusyWithActiveAssignment));
        t.readonly = true;
        assert_eq!(check_gates(&t, &c, busy, NOW), Ok(()));
        let capped = NodeLoad { node_busy: true, cap_reached: true };
        assert_eq!(check_gates(&t, &c, capped, NOW), Err(ClaimRefusal::ParallelCapReached));
    }

    #[test]
    fn convergence_never_on_a_worktree_and_pins_match_id_forms() {
        let mut c = claimant();
        let mut t = open_task();
        t.task_mode = Some(TaskMode::Convergence);
        c.node_is_worktree = true;
        assert_eq!(
            check_gates(&t, &c, NodeLoad::default(), NOW),
            Err(ClaimRefusal::ConvergenceTargetIsWorktree)
        );
        c.node_is_worktree = false;
        t.target_node_id = Some("mach_A");
        assert_eq!(check_gates(&t, &c, NodeLoad::default(), NOW), Ok(()));
        t.target_node_id = Some("mach_B");
        assert_eq!(check_gates(&t, &c, NodeLoad::default(), NOW), Err(ClaimRefusal::TargetPinUnmatched));
    }

    #[test]
    fn furthest_reason_wins() {
        let r = ClaimRefusal::furthest(None, ClaimRefusal::RequiredTagsUnsatisfied);
        let r = ClaimRefusal::furthest(Some(r), ClaimRefusal::NodeBusyWithActiveAssignment);
        let r = ClaimRefusal::furthest(Some(r), ClaimRefusal::DependenciesUnsatisfied);
        assert_eq!(r, ClaimRefusal::NodeBusyWithActiveAssignment);
    }
}
