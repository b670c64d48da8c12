//! Webhook subscriptions: this store's rows for the webhook writes both
//! stores share ([`agentmesh_store::webhook_writes`]), and the reads.

use agentmesh_core::{LedgerEntry, Webhook};
use agentmesh_store::webhook_writes::WebhookRows;
use rusqlite::{Connection, OptionalExtension, params};

use crate::{Fail, Res, ledger};

/// The webhook rows of one write transaction.
pub(crate) struct Rows<'a>(pub(crate) &'a Connection);

fn decode(payload: &str) -> Res<Webhook> {
    Ok(serde_json::from_str(payload)?)
}

impl WebhookRows for Rows<'_> {
    type Error = Fail;

    fn find(&self, mesh_id: &str, id: &str) -> Res<Option<Webhook>> {
        let payload: Option<String> = self
            .0
            .prepare_cached("SELECT payload FROM mesh_webhooks WHERE mesh_id = ?1 AND id = ?2")?
            .query_row(params![mesh_id, id], |r| r.get(0))
            .optional()?;
        payload.as_deref().map(decode).transpose()
    }

    fn insert(&self, hook: &Webhook, secret: &str) -> Res<()> {
        self.0
            .prepare_cached(
                "INSERT INTO mesh_webhooks (mesh_id, id, secret, created_at, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![hook.mesh_id, hook.id, secret, hook.created_at, serde_json::to_string(hook)?])?;
        Ok(())
    }

    fn update(&self, hook: &Webhook) -> Res<()> {
        self.0
            .prepare_cached("UPDATE mesh_webhooks SET payload = ?3 WHERE mesh_id = ?1 AND id = ?2")?
            .execute(params![hook.mesh_id, hook.id, serde_json::to_string(hook)?])?;
        Ok(())
    }

    fn delete(&self, mesh_id: &str, id: &str) -> Res<()> {
        self.0
            .prepare_cached("DELETE FROM mesh_webhooks WHERE mesh_id = ?1 AND id = ?2")?
            .execute(params![mesh_id, id])?;
        Ok(())
    }

    fn append(&self, entry: &LedgerEntry) -> Res<()> {
        ledger::append(self.0, entry).map(drop)
    }

    fn last_seq(&self, mesh_id: &str) -> Res<u64> {
        let seq: Option<i64> = self
            .0
            .prepare_cached("SELECT MAX(seq) FROM mesh_event_ledger WHERE mesh_id = ?1")?
            .query_row([mesh_id], |r| r.get(0))?;
        Ok(seq.and_then(|s| u64::try_from(s).ok()).unwrap_or(0))
    }
}

/// The subscriptions of a mesh, or of every mesh, oldest first.
pub(crate) fn list(conn: &Connection, mesh_id: Option<&str>) -> Res<Vec<Webhook>> {
    let mut stmt = conn.prepare_cached(
        "SELECT payload FROM mesh_webhooks WHERE ?1 IS NULL OR mesh_id = ?1 ORDER BY created_at, id",
    )?;
    let rows = stmt.query_map([mesh_id], |r| r.get::<_, String>(0))?;
    rows.map(|payload| decode(&payload?)).collect()
}

/// The secret of a subscription.
pub(crate) fn secret(conn: &Connection, mesh_id: &str, id: &str) -> Res<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT secret FROM mesh_webhooks WHERE mesh_id = ?1 AND id = ?2")?
        .query_row(params![mesh_id, id], |r| r.get(0))
        .optional()?)
}
