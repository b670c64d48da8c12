//! Turning an enqueue request into a pending task: validation and normalization,
//! and dependency-cycle detection.

use std::collections::{HashSet, VecDeque};

use serde_json::Value;

use crate::ids::{validate_id, validate_optional_id};
use crate::{InvalidInput, Task, TaskMode, TaskPriority, TaskStatus, Timestamp, guardrail, tags};

/// One year in milliseconds: a numeric `notBefore` below this is an offset from now.
const NOT_BEFORE_OFFSET_LIMIT_MS: i64 = 365 * 24 * 60 * 60 * 1000;

/// When a task may first be claimed.
#[derive(Debug, Clone, PartialEq)]
pub enum NotBefore {
    /// An instant in ISO-8601 form.
    Iso(String),
    /// Milliseconds: an offset from now when below one year, else epoch milliseconds.
    Millis(i64),
}

/// What a coordinator asks for when it enqueues a task. Strings are validated by
/// [`prepare_task`], so transports can pass user input straight through.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewTask {
    /// Caller-chosen id; a fresh UUID when `None`.
    pub id: Option<String>,
    /// The instruction text.
    pub message: String,
    /// Task mode by name.
    pub task_mode: Option<String>,
    /// Explicit read-only flag.
    pub readonly: Option<bool>,
    /// Node pin.
    pub target_node_id: Option<String>,
    /// Session pin.
    pub target_session_id: Option<String>,
    /// Required capability tags.
    pub required_tags: Vec<String>,
    /// Priority by name.
    pub priority: Option<String>,
    /// Earliest claim time.
    pub not_before: Option<NotBefore>,
    /// Dependencies by task id.
    pub depends_on: Vec<String>,
    /// Mission id.
    pub mission_id: Option<String>,
    /// Consensus group id.
    pub consensus_group_id: Option<String>,
    /// Model override.
    pub model: Option<String>,
    /// Thinking-level override.
    pub thinking_level: Option<String>,
    /// Difficulty.
    pub difficulty: Option<String>,
    /// The paths the task will touch (patterns relative to `paths_scope`).
    pub paths: Vec<String>,
    /// The repository scope of `paths`; required with them.
    pub paths_scope: Option<String>,
    /// Retry budget for requeues.
    pub max_retries: Option<i64>,
    /// The coordinator session that enqueues.
    pub source_coordinator_session_id: Option<String>,
    /// The daemon of the coordinator that enqueues (completion events go there).
    pub source_coordinator_daemon_id: Option<String>,
    /// The run id of the coordinator that enqueues.
    pub source_coordinator_run_id: Option<String>,
    /// Multipart input envelope.
    pub input: Option<Value>,
}

fn trimmed(value: &Option<String>) -> Option<String> {
    value.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// The difficulties a task may carry, as the original names them: a hint for
/// which worker suits it (`freeform` says it has no particular one).
pub const DIFFICULTIES: [&str; 4] = ["easy", "medium", "difficult", "freeform"];

/// Validates `new` and builds the pending task for mesh `mesh_id`. A read-only
/// task whose message asks for a forbidden operation is refused
/// ([`guardrail::check_readonly_message`]).
///
/// `fresh_id` is used when the request carries no id. Checks that need the rest of
/// the queue (duplicate id, dependency cycles) are the store's.
pub fn prepare_task(
    mesh_id: &str,
    new: &NewTask,
    fresh_id: &str,
    now: Timestamp,
) -> Result<Task, InvalidInput> {
    let mesh_id = validate_id("meshId", mesh_id)?;
    let message = new.message.trim();
    if message.is_empty() {
        return Err(InvalidInput::new("message", "must not be empty"));
    }
    let id = match &new.id {
        Some(id) if id.trim().is_empty() => {
            return Err(InvalidInput::new("id", "must not be blank when given"));
        }
        Some(id) => validate_id("id", id)?.to_owned(),
        None => fresh_id.to_owned(),
    };
    let task_mode = new.task_mode.as_deref().map(str::parse::<TaskMode>).transpose()?;
    let priority = new.priority.as_deref().map(str::parse::<TaskPriority>).transpose()?;
    let not_before = match &new.not_before {
        None => None,
        Some(nb) => Some(normalize_not_before(nb, now)?),
    };
    let max_retries = match new.max_retries {
        None => None,
        Some(n) if n < 0 => return Err(InvalidInput::new("maxRetries", "must be zero or more")),
        Some(n) => Some(u32::try_from(n).map_err(|_| InvalidInput::new("maxRetries", "is too large"))?),
    };
    let mut depends_on: Vec<String> = Vec::new();
    for (i, dep) in new.depends_on.iter().enumerate() {
        let dep = validate_id(&format!("dependsOn[{i}]"), dep)?;
        if !depends_on.iter().any(|d| d == dep) {
            depends_on.push(dep.to_owned());
        }
    }
    let required_tags = tags::normalize_tags(&new.required_tags);

    let mut task = Task::new(id, mesh_id, message, &now.iso());
    task.status = TaskStatus::Pending;
    task.task_mode = task_mode;
    task.readonly = new.readonly;
    task.target_node_id = validate_optional_id("targetNodeId", new.target_node_id.as_deref())?;
    task.target_session_id = validate_optional_id("targetSessionId", new.target_session_id.as_deref())?;
    task.required_tags = (!required_tags.is_empty()).then_some(required_tags);
    task.priority = priority.filter(|p| *p != TaskPriority::Normal);
    task.not_before = not_before;
    task.depends_on = (!depends_on.is_empty()).then_some(depends_on);
    task.mission_id = validate_optional_id("missionId", new.mission_id.as_deref())?;
    task.consensus_group_id = validate_optional_id("consensusGroupId", new.consensus_group_id.as_deref())?;
    task.model = trimmed(&new.model);
    task.thinking_level = trimmed(&new.thinking_level);
    task.model_source = task.model.as_ref().map(|_| "explicit".to_owned());
    task.thinking_level_source = task.thinking_level.as_ref().map(|_| "explicit".to_owned());
    task.difficulty = match trimmed(&new.difficulty) {
        Some(d) if !DIFFICULTIES.contains(&d.as_str()) => {
            return Err(InvalidInput::new(
                "difficulty",
                format!("unknown difficulty {d:?} (expected one of {})", DIFFICULTIES.join(", ")),
            ));
        }
        other => other,
    };
    if !new.paths.is_empty() {
        let paths = crate::reservation::parse_patterns("paths", &new.paths)?;
        let scope = new.paths_scope.as_deref().ok_or_else(|| {
            InvalidInput::new("pathsScope", "must name the repository of the paths (its root or id)")
        })?;
        task.paths_scope = Some(
            crate::reservation::check_scope(scope).map_err(|e| InvalidInput::new("pathsScope", e.problem))?,
        );
        task.paths = Some(paths);
    } else if trimmed(&new.paths_scope).is_some() {
        return Err(InvalidInput::new("pathsScope", "names the repository of paths, and no paths are given"));
    }
    task.max_retries = max_retries;
    task.source_coordinator_session_id =
        validate_optional_id("coordinator.sessionId", new.source_coordinator_session_id.as_deref())?;
    task.source_coordinator_daemon_id =
        validate_optional_id("coordinator.daemonId", new.source_coordinator_daemon_id.as_deref())?;
    task.source_coordinator_run_id =
        validate_optional_id("coordinator.runId", new.source_coordinator_run_id.as_deref())?;
    task.input = new.input.clone();
    if task.is_readonly() {
        guardrail::check_readonly_message(&task.message)?;
    }
    Ok(task)
}

fn normalize_not_before(nb: &NotBefore, now: Timestamp) -> Result<String, InvalidInput> {
    let at = match nb {
        NotBefore::Iso(text) => Timestamp::parse_iso(text)
            .ok_or_else(|| InvalidInput::new("notBefore", format!("{text:?} is not an ISO-8601 instant")))?,
        NotBefore::Millis(ms) if *ms < 0 => {
            return Err(InvalidInput::new("notBefore", "must not be negative"));
        }
        NotBefore::Millis(ms) if *ms < NOT_BEFORE_OFFSET_LIMIT_MS => now.plus_millis(*ms),
        NotBefore::Millis(ms) => Timestamp::from_millis(*ms),
    };
    Ok(at.max(now).iso())
}

/// Looks for a dependency cycle that adding `new_id` with `deps` would close.
///
/// A cycle through the new task needs a path from one of its dependencies back to
/// it, which means walking backwards from `new_id` through the tasks that depend on
/// it (`dependents_of`) until one of `deps` turns up. A new task that nobody depends
/// on yet costs one lookup. Returns the cycle as a list of ids starting and ending
/// with `new_id`.
pub fn find_dependency_cycle(
    new_id: &str,
    deps: &[String],
    mut dependents_of: impl FnMut(&str) -> Vec<String>,
) -> Option<Vec<String>> {
    if deps.iter().any(|d| d == new_id) {
        return Some(vec![new_id.to_owned(), new_id.to_owned()]);
    }
    let targets: HashSet<&str> = deps.iter().map(String::as_str).collect();
    // parent[x] = the task x was reached from, walking towards dependents.
    let mut parent: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut queue: VecDeque<String> = VecDeque::from([new_id.to_owned()]);
    let mut seen: HashSet<String> = HashSet::from([new_id.to_owned()]);
    while let Some(current) = queue.pop_front() {
        for dependent in dependents_of(&current) {
            if !seen.insert(dependent.clone()) {
                continue;
            }
            parent.insert(dependent.clone(), current.clone());
            if targets.contains(dependent.as_str()) {
                // new -> dependent (new depends on it) -> ... -> new, read backwards.
                let mut path = vec![new_id.to_owned(), dependent.clone()];
                let mut at = dependent;
                while let Some(p) = parent.get(&at) {
                    path.push(p.clone());
                    at = p.clone();
                }
                return Some(path);
            }
            queue.push_back(dependent);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_millis(1_735_689_600_000)
    }

    fn req(message: &str) -> NewTask {
        NewTask { message: message.to_owned(), ..NewTask::default() }
    }

    #[test]
    fn message_must_not_be_blank() {
        let err = prepare_task("m", &req("  \n"), "id", now()).unwrap_err();
        assert_eq!(err.field, "message");
    }

    #[test]
    fn fields_are_normalized() {
        let mut r = req("  do it  ");
        r.priority = Some("normal".into());
        r.depends_on = vec![" a".into(), "a".into(), "b".into()];
        r.required_tags = vec![" os=linux ".into(), "".into()];
        r.not_before = Some(NotBefore::Millis(5_000));
        let t = prepare_task("m", &r, "fresh", now()).unwrap();
        assert_eq!(t.id, "fresh");
        assert_eq!(t.message, "do it");
        assert_eq!(t.priority, None, "normal priority is not stored");
        assert_eq!(t.dependencies(), ["a", "b"]);
        assert_eq!(t.tags_required(), ["os=linux"]);
        assert_eq!(t.not_before.as_deref(), Some("2025-01-01T00:00:05.000Z"));
    }

    #[test]
    fn paths_come_with_their_scope_and_a_bad_one_is_named() {
        let mut r = NewTask { message: "edit".into(), ..NewTask::default() };
        r.paths = vec!["./src/parser/".into(), "src/*.rs".into()];
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap_err().field, "pathsScope");
        r.paths_scope = Some("/repo".into());
        let task = prepare_task("m", &r, "i", now()).unwrap();
        let paths: Vec<&str> = task.paths.iter().flatten().map(|p| p.as_str()).collect();
        assert_eq!((paths, task.paths_scope.as_deref()), (vec!["src/parser", "src/*.rs"], Some("/repo")));
        r.paths.push("../x".into());
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap_err().field, "paths[2]");
        r.paths.clear();
        assert_eq!(
            prepare_task("m", &r, "i", now()).unwrap_err().field,
            "pathsScope",
            "a scope without paths"
        );
    }

    #[test]
    fn a_difficulty_is_one_of_the_four_and_an_unknown_one_is_named() {
        let mut r = req("x");
        r.difficulty = Some(" difficult ".into());
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap().difficulty.as_deref(), Some("difficult"));
        r.difficulty = Some("hard".into());
        let err = prepare_task("m", &r, "i", now()).unwrap_err();
        assert_eq!(err.field, "difficulty");
        assert!(err.problem.contains("easy, medium, difficult, freeform"), "{}", err.problem);
        r.difficulty = Some("  ".into());
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap().difficulty, None, "blank is none");
    }

    #[test]
    fn past_not_before_becomes_now_and_bad_values_are_named() {
        let mut r = req("x");
        r.not_before = Some(NotBefore::Iso("2000-01-01T00:00:00Z".into()));
        assert_eq!(
            prepare_task("m", &r, "i", now()).unwrap().not_before.as_deref(),
            Some("2025-01-01T00:00:00.000Z")
        );
        r.not_before = Some(NotBefore::Iso("soon".into()));
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap_err().field, "notBefore");
        r.not_before = None;
        r.task_mode = Some("refactor".into());
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap_err().field, "taskMode");
        r.task_mode = None;
        r.priority = Some("urgent".into());
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap_err().field, "priority");
        r.priority = None;
        r.max_retries = Some(-1);
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap_err().field, "maxRetries");
    }

    #[test]
    fn every_id_of_the_request_follows_the_id_rule() {
        let mut r = req("x");
        r.id = Some("x\u{0}y\nz".into());
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap_err().field, "id");
        r.id = Some(" t1 ".into());
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap().id, "t1");
        assert_eq!(prepare_task("a\nb", &r, "i", now()).unwrap_err().field, "meshId");
        r.depends_on = vec!["a".into(), "b\rc".into()];
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap_err().field, "dependsOn[1]");
        r.depends_on = Vec::new();
        r.target_session_id = Some("s".repeat(201));
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap_err().field, "targetSessionId");
        r.target_session_id = None;
        r.source_coordinator_run_id = Some("run\u{1b}".into());
        assert_eq!(prepare_task("m", &r, "i", now()).unwrap_err().field, "coordinator.runId");
    }

    #[test]
    fn cycles_are_found_through_dependents() {
        // b depends on a, c depends on b. Adding a with dependsOn [c] closes a->c->b->a.
        let dependents = |id: &str| -> Vec<String> {
            match id {
                "a" => vec!["b".into()],
                "b" => vec!["c".into()],
                _ => vec![],
            }
        };
        let cycle = find_dependency_cycle("a", &["c".into()], dependents).unwrap();
        assert_eq!(cycle, ["a", "c", "b", "a"]);
        assert!(find_dependency_cycle("a", &["x".into()], dependents).is_none());
        assert!(find_dependency_cycle("a", &["a".into()], dependents).is_some());
    }
}
