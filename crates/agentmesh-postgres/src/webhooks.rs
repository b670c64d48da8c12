//! Webhook subscriptions: this store's rows for the webhook writes both
//! stores share ([`agentmesh_store::webhook_writes`]), and the reads. A write
//! reads its subscription `FOR UPDATE`, so the writes of one subscription
//! (a deliverer's progress, an operator's command) are serial.

use agentmesh_core::webhook::ValidWebhook;
use agentmesh_core::{LedgerEntry, Timestamp, Webhook};
use agentmesh_store::webhook_writes::{self, WebhookRows};
use agentmesh_store::{StoreResult, WebhookCommand};

use crate::db::Db;
use crate::{Fail, PgStore, Res, ledger};

fn decode(payload: &str) -> Res<Webhook> {
    serde_json::from_str(payload).map_err(|e| crate::db::corrupt("a webhook subscription", e))
}

fn encode(hook: &Webhook) -> Res<String> {
    serde_json::to_string(hook).map_err(|e| crate::db::corrupt("a webhook subscription", e))
}

/// The webhook rows of one write transaction.
pub(crate) struct Rows<'a, 'c>(pub(crate) &'a Db<'c>);

impl WebhookRows for Rows<'_, '_> {
    type Error = Fail;

    fn find(&self, mesh_id: &str, id: &str) -> Res<Option<Webhook>> {
        let row = self.0.query_opt(
            "SELECT payload FROM mesh_webhooks WHERE mesh_id = $1 AND id = $2 FOR UPDATE",
            &[&mesh_id, &id],
        )?;
        row.map(|r| decode(r.get(0))).transpose()
    }

    fn insert(&self, hook: &Webhook, secret: &str) -> Res<()> {
        let payload = encode(hook)?;
        self.0.execute(
            "INSERT INTO mesh_webhooks (mesh_id, id, secret, created_at, payload) VALUES ($1, $2, $3, $4, $5)",
            &[&hook.mesh_id, &hook.id, &secret, &hook.created_at, &payload],
        )?;
        Ok(())
    }

    fn update(&self, hook: &Webhook) -> Res<()> {
        let payload = encode(hook)?;
        self.0.execute(
            "UPDATE mesh_webhooks SET payload = $3 WHERE mesh_id = $1 AND id = $2",
            &[&hook.mesh_id, &hook.id, &payload],
        )?;
        Ok(())
    }

    fn delete(&self, mesh_id: &str, id: &str) -> Res<()> {
        self.0.execute("DELETE FROM mesh_webhooks WHERE mesh_id = $1 AND id = $2", &[&mesh_id, &id])?;
        Ok(())
    }

    fn append(&self, entry: &LedgerEntry) -> Res<()> {
        ledger::append(self.0, entry).map(drop)
    }

    fn last_seq(&self, mesh_id: &str) -> Res<u64> {
        let row =
            self.0.query_one("SELECT MAX(seq) FROM mesh_event_ledger WHERE mesh_id = $1", &[&mesh_id])?;
        Ok(row.get::<_, Option<i64>>(0).map_or(0, crate::db::unsigned))
    }
}

impl agentmesh_store::WebhookStore for PgStore {
    fn add_webhook(
        &self,
        mesh_id: &str,
        valid: &ValidWebhook,
        secret: &str,
        now: Timestamp,
    ) -> StoreResult<Webhook> {
        self.write_with(mesh_id, &[], |db| webhook_writes::add(&Rows(db), mesh_id, valid, secret, now))
    }

    fn webhooks(&self, mesh_id: Option<&str>) -> StoreResult<Vec<Webhook>> {
        self.read(|db| {
            let rows = db.query(
                "SELECT payload FROM mesh_webhooks WHERE $1::text IS NULL OR mesh_id = $1 ORDER BY created_at, id",
                &[&mesh_id],
            )?;
            rows.iter().map(|r| decode(r.get(0))).collect()
        })
    }

    fn webhook_secret(&self, mesh_id: &str, id: &str) -> StoreResult<Option<String>> {
        self.read(|db| {
            let row = db.query_opt(
                "SELECT secret FROM mesh_webhooks WHERE mesh_id = $1 AND id = $2",
                &[&mesh_id, &id],
            )?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn webhook_command(
        &self,
        mesh_id: &str,
        id: &str,
        command: WebhookCommand,
        now: Timestamp,
    ) -> StoreResult<Webhook> {
        self.write_with(mesh_id, &[], |db| webhook_writes::command(&Rows(db), mesh_id, id, command, now))
    }

    fn save_webhook_progress(&self, hook: &Webhook, now: Timestamp) -> StoreResult<Option<Webhook>> {
        self.write_with(&hook.mesh_id, &[], |db| webhook_writes::save_progress(&Rows(db), hook, now))
    }
}
