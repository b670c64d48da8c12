//! Path reservations: this store's rows for the reservation writes both stores
//! share ([`agentmesh_store::reservation_writes`]), and the reads. Writes run
//! on the one writer, so the reservations of every mesh are serial.

use agentmesh_core::{LedgerEntry, Reservation, Timestamp};
use agentmesh_store::reservation_writes::{self, ReservationRows, ancestors, prefixes};
use rusqlite::{Connection, OptionalExtension, params};

use crate::{Fail, Res, ledger};

/// The reservation rows of one write transaction.
pub(crate) struct Rows<'a>(pub(crate) &'a Connection);

fn decode(payload: &str) -> Res<Reservation> {
    Ok(serde_json::from_str(payload)?)
}

impl ReservationRows for Rows<'_> {
    type Error = Fail;

    /// Two index lookups: its ancestors (itself included) by equality, the
    /// ones under it by one range.
    fn near(&self, mesh_id: &str, scope: &str, prefix: &str) -> Res<Vec<Reservation>> {
        let payloads: Vec<String> = if prefix.is_empty() {
            self.0
                .prepare_cached(
                    "SELECT payload FROM mesh_path_reservations WHERE mesh_id = ?1 AND scope = ?2",
                )?
                .query_map(params![mesh_id, scope], |r| r.get(0))?
                .collect::<Result<_, _>>()?
        } else {
            let up = serde_json::to_string(&ancestors(prefix))?;
            self.0
                .prepare_cached(
                    "SELECT payload FROM mesh_path_reservations WHERE mesh_id = ?1 AND id IN (
                        SELECT reservation_id FROM mesh_path_reservation_prefixes
                         WHERE mesh_id = ?1 AND scope = ?2 AND prefix IN (SELECT value FROM json_each(?3))
                        UNION
                        SELECT reservation_id FROM mesh_path_reservation_prefixes
                         WHERE mesh_id = ?1 AND scope = ?2 AND prefix > ?4 || '/' AND prefix < ?4 || '0')",
                )?
                .query_map(params![mesh_id, scope, up, prefix], |r| r.get(0))?
                .collect::<Result<_, _>>()?
        };
        payloads.iter().map(|p| decode(p)).collect()
    }

    fn find(&self, mesh_id: &str, id: &str) -> Res<Option<Reservation>> {
        find(self.0, mesh_id, id)
    }

    fn put(&self, reservation: &Reservation) -> Res<()> {
        let payload = serde_json::to_string(reservation)?;
        let existed = self
            .0
            .prepare_cached(
                "UPDATE mesh_path_reservations SET expires_ms = ?3, payload = ?4 WHERE mesh_id = ?1 AND id = ?2",
            )?
            .execute(params![reservation.mesh_id, reservation.id, reservation.expires_ms(), payload])?;
        if existed > 0 {
            return Ok(());
        }
        self.0
            .prepare_cached(
                "INSERT INTO mesh_path_reservations
                    (mesh_id, id, scope, session_id, task_id, expires_ms, created_at, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                reservation.mesh_id,
                reservation.id,
                reservation.scope,
                reservation.session_id,
                reservation.task_id,
                reservation.expires_ms(),
                reservation.created_at,
                payload
            ])?;
        let mut add = self.0.prepare_cached(
            "INSERT OR IGNORE INTO mesh_path_reservation_prefixes (mesh_id, scope, prefix, reservation_id)
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        for prefix in prefixes(&reservation.patterns) {
            add.execute(params![reservation.mesh_id, reservation.scope, prefix, reservation.id])?;
        }
        Ok(())
    }

    fn remove(&self, reservation: &Reservation) -> Res<()> {
        self.0
            .prepare_cached("DELETE FROM mesh_path_reservations WHERE mesh_id = ?1 AND id = ?2")?
            .execute(params![reservation.mesh_id, reservation.id])?;
        let mut drop_prefix = self.0.prepare_cached(
            "DELETE FROM mesh_path_reservation_prefixes
              WHERE mesh_id = ?1 AND scope = ?2 AND prefix = ?3 AND reservation_id = ?4",
        )?;
        for prefix in prefixes(&reservation.patterns) {
            drop_prefix.execute(params![reservation.mesh_id, reservation.scope, prefix, reservation.id])?;
        }
        Ok(())
    }

    fn append(&self, entry: &LedgerEntry) -> Res<()> {
        ledger::append(self.0, entry).map(drop)
    }

    fn of_task(&self, mesh_id: &str, task_id: &str) -> Res<Vec<Reservation>> {
        let mut stmt = self.0.prepare_cached(
            "SELECT payload FROM mesh_path_reservations WHERE mesh_id = ?1 AND task_id = ?2 ORDER BY id",
        )?;
        let rows = stmt.query_map(params![mesh_id, task_id], |r| r.get::<_, String>(0))?;
        rows.map(|payload| decode(&payload?)).collect()
    }
}

pub(crate) fn find(conn: &Connection, mesh_id: &str, id: &str) -> Res<Option<Reservation>> {
    let payload: Option<String> = conn
        .prepare_cached("SELECT payload FROM mesh_path_reservations WHERE mesh_id = ?1 AND id = ?2")?
        .query_row(params![mesh_id, id], |r| r.get(0))
        .optional()?;
    payload.as_deref().map(decode).transpose()
}

/// The reservations in force at `now`, of `scope` when given, oldest first.
pub(crate) fn in_force(
    conn: &Connection,
    mesh_id: &str,
    scope: Option<&str>,
    now: Timestamp,
) -> Res<Vec<Reservation>> {
    let mut stmt = conn.prepare_cached(
        "SELECT payload FROM mesh_path_reservations
          WHERE mesh_id = ?1 AND (?2 IS NULL OR scope = ?2) AND (expires_ms IS NULL OR expires_ms > ?3)
          ORDER BY created_at, id",
    )?;
    let rows = stmt.query_map(params![mesh_id, scope, now.millis()], |r| r.get::<_, String>(0))?;
    rows.map(|payload| decode(&payload?)).collect()
}

/// Removes every reservation lapsed at `now`, in every mesh.
pub(crate) fn expire(conn: &Connection, now: Timestamp) -> Res<u64> {
    let mut stmt = conn.prepare_cached(
        "SELECT payload FROM mesh_path_reservations WHERE expires_ms IS NOT NULL AND expires_ms <= ?1
          ORDER BY expires_ms LIMIT 1000",
    )?;
    let lapsed = stmt
        .query_map([now.millis()], |r| r.get::<_, String>(0))?
        .map(|payload| decode(&payload?))
        .collect::<Res<Vec<Reservation>>>()?;
    reservation_writes::expire(&Rows(conn), &lapsed, now)
}
