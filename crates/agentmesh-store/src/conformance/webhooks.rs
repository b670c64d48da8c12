//! Rules of webhook subscriptions: where a new one starts following the
//! ledger, that its secret is kept apart, that a deliverer's progress is
//! written only over the version it read, and that an operator's resume,
//! skip and removal are recorded; and of the per-entry sequence numbers of a
//! slice, which a subscription's cursor is made of.

use agentmesh_core::webhook::{Attempt, NewWebhook, StuckEntry, UrlPolicy, ValidWebhook, WebhookState};
use agentmesh_core::{SliceQuery, Webhook};

use super::support::*;
use crate::{Store, StoreError, WebhookCommand};

const SECRET: &str = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3";

fn valid(from_start: bool) -> ValidWebhook {
    NewWebhook {
        url: "http://127.0.0.1:9/hook".into(),
        kinds: vec!["task_*".into()],
        from_start,
        ..NewWebhook::default()
    }
    .validate(UrlPolicy::default())
    .expect("a valid subscription")
}

fn add(store: &dyn Store, mesh: &str, from_start: bool) -> Webhook {
    ok(store.add_webhook(mesh, &valid(from_start), SECRET, at(5)), "add_webhook")
}

fn listed(store: &dyn Store, mesh: &str) -> Vec<Webhook> {
    ok(store.webhooks(Some(mesh)), "webhooks")
}

fn by_seq(store: &dyn Store, mesh: &str, after: u64) -> agentmesh_core::LedgerSlice {
    let query = SliceQuery { after_seq: Some(after), limit: Some(500), ..SliceQuery::default() };
    ok(store.ledger_slice(mesh, &query), "ledger_slice")
}

/// A new subscription follows from its own `webhook_added` entry (the entries
/// before it are not its), or from the first entry when asked; it is listed
/// by mesh and across meshes, never with its secret, which is read apart;
/// the ledger entry names it without the secret.
pub fn webhook_starts_after_its_own_entry_and_keeps_its_secret_apart(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let hook = add(store, MESH, false);
    settled(store, MESH);
    let page = by_seq(store, MESH, hook.cursor);
    assert!(page.entries.is_empty(), "expected nothing after the new subscription's cursor, got {page:?}");
    let head = by_seq(store, MESH, 0);
    assert_eq!(head.entries.last().map(|e| e.kind.as_str()), Some("webhook_added"));
    assert_eq!(head.seqs.last().copied(), Some(hook.cursor), "expected the cursor at its own entry");
    let text = serde_json::to_string(&head.entries).unwrap();
    assert!(!text.contains(SECRET), "the ledger must never hold the secret: {text}");
    let from_start = add(store, MESH, true);
    assert_eq!(from_start.cursor, 0);
    settled(store, MESH);
    assert_eq!(by_seq(store, MESH, from_start.cursor).entries[0].kind, "task_dispatched");
    assert_eq!(listed(store, MESH).iter().map(|h| &h.id).collect::<Vec<_>>(), [&hook.id, &from_start.id]);
    assert_eq!(ok(store.webhooks(None), "webhooks(None)").len(), 2);
    assert!(listed(store, "mesh-b").is_empty(), "expected another mesh to have none");
    assert!(!serde_json::to_string(&listed(store, MESH)).unwrap().contains(SECRET));
    assert_eq!(ok(store.webhook_secret(MESH, &hook.id), "webhook_secret").as_deref(), Some(SECRET));
    assert_eq!(ok(store.webhook_secret("mesh-b", &hook.id), "webhook_secret"), None);
}

/// A deliverer's progress is stored over the version it read and bumps it; a
/// write from an older version changes nothing (an operator's command came
/// first); turning failing is recorded once.
pub fn webhook_progress_is_written_only_over_the_version_read(store: &dyn Store) {
    let hook = add(store, MESH, true);
    let mut moved = hook.clone();
    moved.cursor = 7;
    moved.delivered = 3;
    moved.log_attempts([Attempt {
        at: at(6).iso(),
        entry_id: "e1".into(),
        kind: "task_dispatched".into(),
        status: Some(204),
        latency_ms: 2,
        error: None,
    }]);
    let saved = ok(store.save_webhook_progress(&moved, at(6)), "save").expect("saved over its version");
    assert_eq!((saved.cursor, saved.delivered, saved.version), (7, 3, hook.version + 1));
    assert_eq!(listed(store, MESH), std::slice::from_ref(&saved));
    let stale = Webhook { cursor: 99, ..moved };
    assert_eq!(ok(store.save_webhook_progress(&stale, at(7)), "save stale"), None);
    assert_eq!(listed(store, MESH)[0].cursor, 7, "a stale write must change nothing");
    let failing = Webhook {
        state: WebhookState::Failing,
        failures: 3,
        last_error: Some("503".into()),
        stuck_on: Some(StuckEntry { entry_id: "e2".into(), kind: "task_claimed".into(), seq: 9 }),
        ..saved
    };
    let failed = ok(store.save_webhook_progress(&failing, at(8)), "save failing").expect("saved");
    let again = ok(store.save_webhook_progress(&failed, at(9)), "save again").expect("saved");
    assert_eq!(again.state, WebhookState::Failing);
    let kinds = ledger_kinds(store, MESH);
    assert_eq!(kinds.iter().filter(|k| *k == "webhook_failing").count(), 1, "{kinds:?}");
    let gone = Webhook { id: "wh_gone".into(), ..again };
    assert_eq!(ok(store.save_webhook_progress(&gone, at(9)), "save unknown"), None);
}

/// Resume makes a failing subscription deliver again from the entry it is
/// stuck on; skip passes that entry (its cursor moves to it) and is refused
/// when there is nothing to skip; both are recorded, and a version read before
/// them can no longer be written. Removal is recorded and leaves nothing.
pub fn webhook_resume_skip_and_remove_are_recorded(store: &dyn Store) {
    let hook = add(store, MESH, true);
    let stuck = Webhook {
        state: WebhookState::Failing,
        failures: 10,
        stuck_on: Some(StuckEntry { entry_id: "e2".into(), kind: "task_claimed".into(), seq: 9 }),
        ..hook.clone()
    };
    let stuck = ok(store.save_webhook_progress(&stuck, at(6)), "save").expect("saved");
    let resumed = ok(store.webhook_command(MESH, &hook.id, WebhookCommand::Resume, at(7)), "resume");
    assert_eq!((resumed.state, resumed.failures, resumed.cursor), (WebhookState::Active, 0, 0));
    assert_eq!(resumed.stuck_on.as_ref().map(|s| s.seq), Some(9), "resume retries the entry it is stuck on");
    assert_eq!(ok(store.save_webhook_progress(&stuck, at(8)), "stale"), None);
    let skipped = ok(store.webhook_command(MESH, &hook.id, WebhookCommand::Skip, at(8)), "skip");
    assert_eq!((skipped.cursor, skipped.stuck_on.clone()), (9, None));
    match store.webhook_command(MESH, &hook.id, WebhookCommand::Skip, at(9)) {
        Err(StoreError::InvalidInput(e)) => assert_eq!(e.field, "webhookId"),
        other => panic!("expected a skip with nothing to skip refused, got {other:?}"),
    }
    let removed = ok(store.webhook_command(MESH, &hook.id, WebhookCommand::Remove, at(10)), "remove");
    assert_eq!(removed.id, hook.id);
    assert!(listed(store, MESH).is_empty());
    match store.webhook_command(MESH, &hook.id, WebhookCommand::Remove, at(11)) {
        Err(StoreError::NotFound { kind: "webhook", .. }) => {}
        other => panic!("expected not found, got {other:?}"),
    }
    let kinds: Vec<String> =
        ledger_kinds(store, MESH).into_iter().filter(|k| k.starts_with("webhook_")).collect();
    assert_eq!(
        kinds,
        ["webhook_added", "webhook_failing", "webhook_resumed", "webhook_skipped", "webhook_removed"]
    );
}

/// A page read by sequence names each entry's sequence number, and reading
/// after one of them gives exactly the entries that follow it.
pub fn ledger_slice_names_each_entrys_sequence(store: &dyn Store) {
    for (i, id) in ["t1", "t2", "t3"].into_iter().enumerate() {
        enqueue(store, MESH, new_task(id), at(i as i64));
        enqueue(store, "mesh-b", new_task(&format!("b-{id}")), at(i as i64));
    }
    let page = by_seq(store, MESH, 0);
    assert_eq!(page.seqs.len(), page.entries.len());
    assert!(page.seqs.windows(2).all(|w| w[0] != w[1]), "{:?}", page.seqs);
    for (i, seq) in page.seqs.iter().enumerate() {
        let rest = by_seq(store, MESH, *seq);
        let ids = |entries: &[agentmesh_core::LedgerEntry]| {
            entries.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
        };
        assert_eq!(ids(&rest.entries), ids(&page.entries[i + 1..]), "after seq {seq}");
    }
    let by_time = ok(store.ledger_slice(MESH, &SliceQuery::default()), "slice by time");
    assert!(by_time.seqs.is_empty(), "a page by time carries no sequence numbers");
}
