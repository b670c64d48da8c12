//! The read-only guardrail at enqueue: a read-only task (mode
//! `live_debug_readonly`, or `readonly: true`) whose message asks for a source
//! edit, a checkpoint, a deploy or version bump, a destructive shell command, a
//! package install, a container mutation or a git mutation is refused with the
//! original's reason, alone or in a batch, and nothing changes.

use agentmesh_core::NewTask;

use super::support::*;
use crate::{Store, StoreError};

/// One message per family of forbidden operations, with the labels the refusal
/// must name (in the refusal's order).
const FORBIDDEN: &[(&str, &str)] = &[
    ("read the logs, then git commit -am wip", "git_mutation"),
    ("rm -rf build && npm publish", "deploy_or_version_bump, destructive_shell"),
    ("edit src/lib.rs to log the request", "source_edit"),
    ("checkpoint the workspace before you look", "checkpoint"),
    ("look at the lockfile, then pip install requests", "package_install"),
    ("reproduce it with `docker run --rm alpine`", "container_mutation"),
];

/// Asserts that `result` is the guardrail's refusal naming `labels`, on a field
/// that is `message` or ends in `.message`.
#[track_caller]
fn assert_guardrail_refusal<T: std::fmt::Debug>(result: crate::StoreResult<T>, labels: &str, what: &str) {
    let expected = format!("live_debug_readonly_guardrail_violation: forbidden operations ({labels})");
    match expect_err(result, what) {
        StoreError::InvalidInput(e) => {
            assert!(
                e.field == "message" || e.field.ends_with(".message"),
                "expected {what} to be refused naming the message, it named {:?}",
                e.field
            );
            assert_eq!(e.problem, expected, "expected {what} to be refused with the original's reason");
        }
        other => panic!("expected {what} to be refused with {expected:?}, got {other:?}"),
    }
}

/// A read-only task (by mode or by flag) whose message asks for a forbidden operation is refused with `live_debug_readonly_guardrail_violation: forbidden operations (...)` naming every family found, alone or in a batch, and nothing changes; the same messages are accepted for a task that may change things, and prose about those operations passes the guardrail.
pub fn readonly_guardrail_refuses_forbidden_operations_and_changes_nothing(store: &dyn Store) {
    enqueue(store, MESH, new_task("existing"), at(0));
    let before = Snapshot::take(store, MESH);
    for (i, (message, labels)) in FORBIDDEN.iter().enumerate() {
        let by_mode = NewTask { message: (*message).into(), ..readonly_task(&format!("mode-{i}")) };
        let what = format!("enqueue of the live_debug_readonly task {message:?}");
        assert_guardrail_refusal(store.enqueue(MESH, &by_mode, at(1)), labels, &what);
        before.assert_unchanged(store, MESH, &format!("the refused {what}"));

        let by_flag =
            NewTask { message: (*message).into(), readonly: Some(true), ..new_task(&format!("flag-{i}")) };
        let what = format!("enqueue of the readonly:true task {message:?}");
        assert_guardrail_refusal(store.enqueue(MESH, &by_flag, at(1)), labels, &what);
        before.assert_unchanged(store, MESH, &format!("the refused {what}"));
    }

    let batch = [new_task("b1"), NewTask { message: "then git push --force".into(), ..readonly_task("b2") }];
    assert_guardrail_refusal(
        store.enqueue_batch(MESH, &batch, at(2)),
        "git_mutation",
        "a batch whose second task is read-only and pushes",
    );
    before.assert_unchanged(store, MESH, "a batch refused by the guardrail");

    for (i, (message, _)) in FORBIDDEN.iter().enumerate() {
        let writer = NewTask {
            message: (*message).into(),
            task_mode: Some("code_change".into()),
            ..new_task(&format!("writer-{i}"))
        };
        enqueue(store, MESH, writer, at(3));
    }
    let prose = "read the deploy logs and report why the release failed; do not git reset anything, \
                 and list what is in build/Release";
    let reader = NewTask { message: prose.into(), ..readonly_task("reader") };
    let task = enqueue(store, MESH, reader, at(4));
    assert!(task.is_readonly(), "expected the prose task to be stored read-only");
}
