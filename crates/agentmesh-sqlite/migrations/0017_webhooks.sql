-- Webhook subscriptions: the subscription as JSON in payload (its filter,
-- cursor, delivery state and log), its signing secret apart, never in payload.
CREATE TABLE mesh_webhooks (
    mesh_id TEXT NOT NULL,
    id TEXT NOT NULL,
    secret TEXT NOT NULL,
    created_at TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (mesh_id, id)
) WITHOUT ROWID;
