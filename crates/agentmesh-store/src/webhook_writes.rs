//! The webhook writes both stores share, over each store's rows
//! ([`WebhookRows`]): the rules are the core's ([`agentmesh_core::webhook`]);
//! the operator's commands are recorded here, each with its ledger entry in
//! the same transaction. The deliverer's progress is written by version
//! ([`save_progress`]): a write that read an older version than the stored one
//! changes nothing, so an operator's command made meanwhile always stands.

use agentmesh_core::webhook::{ValidWebhook, Webhook, WebhookState, kinds};
use agentmesh_core::{LedgerEntry, Timestamp};
use serde_json::json;

use crate::StoreError;
use crate::ids::mint_at;

/// A store's webhook rows, in the transaction of one write.
pub trait WebhookRows {
    /// The store's error, which every error of a write converts into.
    type Error: From<StoreError>;

    /// The subscription `id` of the mesh.
    fn find(&self, mesh_id: &str, id: &str) -> Result<Option<Webhook>, Self::Error>;
    /// Stores a new subscription with its secret.
    fn insert(&self, hook: &Webhook, secret: &str) -> Result<(), Self::Error>;
    /// Stores `hook` over the one of its id (the secret is kept).
    fn update(&self, hook: &Webhook) -> Result<(), Self::Error>;
    /// Removes the subscription `id` of the mesh.
    fn delete(&self, mesh_id: &str, id: &str) -> Result<(), Self::Error>;
    /// Appends a ledger entry.
    fn append(&self, entry: &LedgerEntry) -> Result<(), Self::Error>;
    /// The sequence number of the mesh's last ledger entry this transaction
    /// sees (0 when it has none).
    fn last_seq(&self, mesh_id: &str) -> Result<u64, Self::Error>;
}

/// What an operator does to a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookCommand {
    /// A failing subscription delivers again, from the entry it is stuck on
    /// (ledger `webhook_resumed`). An active one is left as it is.
    Resume,
    /// The subscription passes the entry it is stuck on without delivering it
    /// and delivers again (ledger `webhook_skipped`, naming the entry).
    Skip,
    /// The subscription is removed (ledger `webhook_removed`); it is answered
    /// as it was.
    Remove,
}

/// Adds a subscription of `mesh_id` with `secret`, following from the ledger's
/// first entry or from its own `webhook_added` entry (what is written after it).
pub fn add<R: WebhookRows>(
    rows: &R,
    mesh_id: &str,
    valid: &ValidWebhook,
    secret: &str,
    now: Timestamp,
) -> Result<Webhook, R::Error> {
    agentmesh_core::validate_id("meshId", mesh_id).map_err(StoreError::from)?;
    let mut hook = Webhook::new(format!("wh_{}", mint_at(now).replace('-', "")), mesh_id, valid, 0, now);
    rows.append(&hook.entry(kinds::ADDED, mint_at(now), now, json!({ "fromStart": valid.from_start })))?;
    if !valid.from_start {
        hook.cursor = rows.last_seq(mesh_id)?;
    }
    rows.insert(&hook, secret)?;
    Ok(hook)
}

fn found<R: WebhookRows>(rows: &R, mesh_id: &str, id: &str) -> Result<Webhook, R::Error> {
    rows.find(mesh_id, id)?.ok_or_else(|| {
        StoreError::NotFound { kind: "webhook", mesh_id: mesh_id.to_owned(), id: id.to_owned() }.into()
    })
}

/// Runs an operator's command on a subscription (see [`WebhookCommand`]); an
/// unknown id is [`StoreError::NotFound`]. A skip of a subscription stuck on
/// no entry is refused, since there is nothing to skip.
pub fn command<R: WebhookRows>(
    rows: &R,
    mesh_id: &str,
    id: &str,
    command: WebhookCommand,
    now: Timestamp,
) -> Result<Webhook, R::Error> {
    let mut hook = found(rows, mesh_id, id)?;
    let was = hook.state;
    let (kind, extra) = match command {
        WebhookCommand::Remove => {
            rows.delete(mesh_id, id)?;
            rows.append(&hook.entry(
                kinds::REMOVED,
                mint_at(now),
                now,
                json!({ "delivered": hook.delivered }),
            ))?;
            return Ok(hook);
        }
        WebhookCommand::Resume if was == WebhookState::Active && hook.failures == 0 => return Ok(hook),
        WebhookCommand::Resume => (kinds::RESUMED, json!({ "was": was.as_str() })),
        WebhookCommand::Skip => {
            let stuck = hook.stuck_on.take().ok_or_else(|| {
                StoreError::InvalidInput(agentmesh_core::InvalidInput::new(
                    "webhookId",
                    format!("webhook {id} is not stuck on an entry: there is nothing to skip"),
                ))
            })?;
            hook.cursor = hook.cursor.max(stuck.seq);
            let extra =
                json!({ "skippedEntryId": stuck.entry_id, "skippedKind": stuck.kind, "was": was.as_str() });
            (kinds::SKIPPED, extra)
        }
    };
    hook.state = WebhookState::Active;
    hook.failures = 0;
    hook.retry_at = None;
    hook.failing_since = None;
    hook.version += 1;
    rows.append(&hook.entry(kind, mint_at(now), now, extra))?;
    rows.update(&hook)?;
    Ok(hook)
}

/// Writes the deliverer's progress: `hook` as the deliverer made it from the
/// version it read (`hook.version`). Stored with the next version and
/// returned; `None`, with nothing changed, when the stored version is another
/// (an operator's command came first) or the subscription is gone. Turning
/// failing is recorded (`webhook_failing`).
pub fn save_progress<R: WebhookRows>(
    rows: &R,
    hook: &Webhook,
    now: Timestamp,
) -> Result<Option<Webhook>, R::Error> {
    let Some(stored) = rows.find(&hook.mesh_id, &hook.id)? else {
        return Ok(None);
    };
    if stored.version != hook.version {
        return Ok(None);
    }
    let mut next = hook.clone();
    next.version += 1;
    if stored.state == WebhookState::Active && next.state == WebhookState::Failing {
        let why = json!({ "failures": next.failures, "lastError": next.last_error });
        rows.append(&next.entry(kinds::FAILING, mint_at(now), now, why))?;
    }
    rows.update(&next)?;
    Ok(Some(next))
}
