//! Path reservations: this store's rows for the reservation writes both stores
//! share ([`agentmesh_store::reservation_writes`]), and the reads. Every write
//! of a mesh's reservations holds its reservations lock (see `locks`), taken
//! as the transaction begins, so the reservations a grant is checked against
//! are every one committed before it.

use agentmesh_core::{LedgerEntry, Reservation, Timestamp};
use agentmesh_store::reservation_writes::{self, ReservationRows, ancestors, prefixes};
use agentmesh_store::{Fence, ReservationCommand, ReservationQuery, Reserved, StoreResult};

use crate::db::Db;
use crate::{Fail, Lock, PgStore, Res, ledger};

fn decode(payload: &str) -> Res<Reservation> {
    serde_json::from_str(payload).map_err(|e| crate::db::corrupt("a path reservation", e))
}

/// The reservation rows of one write transaction.
pub(crate) struct Rows<'a, 'c>(pub(crate) &'a Db<'c>);

impl ReservationRows for Rows<'_, '_> {
    type Error = Fail;

    /// Two index lookups: the ancestors (itself included) by equality, the
    /// ones under it by one range.
    fn near(&self, mesh_id: &str, scope: &str, prefix: &str) -> Res<Vec<Reservation>> {
        let rows = if prefix.is_empty() {
            self.0.query(
                "SELECT id, payload FROM mesh_path_reservations WHERE mesh_id = $1 AND scope = $2",
                &[&mesh_id, &scope],
            )?
        } else {
            self.0.query(
                // The ids as one array (an init plan), so that even the
                // cached generic plan reads the reservations by their key
                // instead of hashing the whole mesh's.
                "SELECT id, payload FROM mesh_path_reservations WHERE mesh_id = $1 AND id = ANY(ARRAY(
                    SELECT reservation_id FROM mesh_path_reservation_prefixes
                     WHERE mesh_id = $1 AND scope = $2 AND prefix = ANY($3::text[])
                    UNION
                    SELECT reservation_id FROM mesh_path_reservation_prefixes
                     WHERE mesh_id = $1 AND scope = $2 AND prefix > $4 || '/' AND prefix < $4 || '0'))",
                &[&mesh_id, &scope, &ancestors(prefix), &prefix],
            )?
        };
        rows.iter().map(|r| decode(r.get(1))).collect()
    }

    fn find(&self, mesh_id: &str, id: &str) -> Res<Option<Reservation>> {
        find(self.0, mesh_id, id)
    }

    fn put(&self, reservation: &Reservation) -> Res<()> {
        let payload =
            serde_json::to_string(reservation).map_err(|e| crate::db::corrupt("a path reservation", e))?;
        let expires = reservation.expires_ms();
        let n = self.0.execute(
            "INSERT INTO mesh_path_reservations
                (mesh_id, id, scope, session_id, task_id, expires_ms, created_at, payload)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (mesh_id, id) DO UPDATE SET expires_ms = EXCLUDED.expires_ms, payload = EXCLUDED.payload",
            &[
                &reservation.mesh_id,
                &reservation.id,
                &reservation.scope,
                &reservation.session_id,
                &reservation.task_id,
                &expires,
                &reservation.created_at,
                &payload,
            ],
        )?;
        debug_assert_eq!(n, 1);
        let all = prefixes(&reservation.patterns);
        self.0.execute(
            "INSERT INTO mesh_path_reservation_prefixes (mesh_id, scope, prefix, reservation_id)
             SELECT $1, $2, p, $4 FROM unnest($3::text[]) AS p
             ON CONFLICT DO NOTHING",
            &[&reservation.mesh_id, &reservation.scope, &all, &reservation.id],
        )?;
        Ok(())
    }

    fn remove(&self, reservation: &Reservation) -> Res<()> {
        let all = prefixes(&reservation.patterns);
        self.0.execute(
            "DELETE FROM mesh_path_reservation_prefixes
              WHERE mesh_id = $1 AND scope = $2 AND prefix = ANY($3::text[]) AND reservation_id = $4",
            &[&reservation.mesh_id, &reservation.scope, &all, &reservation.id],
        )?;
        self.0.execute(
            "DELETE FROM mesh_path_reservations WHERE mesh_id = $1 AND id = $2",
            &[&reservation.mesh_id, &reservation.id],
        )?;
        Ok(())
    }

    fn append(&self, entry: &LedgerEntry) -> Res<()> {
        ledger::append_later(self.0, entry)
    }

    fn of_task(&self, mesh_id: &str, task_id: &str) -> Res<Vec<Reservation>> {
        let rows = self.0.query(
            "SELECT payload FROM mesh_path_reservations WHERE mesh_id = $1 AND task_id = $2 ORDER BY id",
            &[&mesh_id, &task_id],
        )?;
        rows.iter().map(|r| decode(r.get(0))).collect()
    }
}

fn find(db: &Db<'_>, mesh_id: &str, id: &str) -> Res<Option<Reservation>> {
    let row = db.query_opt(
        "SELECT payload FROM mesh_path_reservations WHERE mesh_id = $1 AND id = $2",
        &[&mesh_id, &id],
    )?;
    row.map(|r| decode(r.get(0))).transpose()
}

/// At most this many lapsed reservations of a mesh go in one sweep's
/// transaction.
const EXPIRE_BATCH: i64 = 1000;

impl agentmesh_store::ReservationStore for PgStore {
    fn reserve(
        &self,
        mesh_id: &str,
        request: &agentmesh_core::NewReservation,
        now: Timestamp,
    ) -> StoreResult<Reserved> {
        self.write_with(mesh_id, &[Lock::Reservations], |db| {
            reservation_writes::reserve(&Rows(db), mesh_id, request, now)
        })
    }

    fn reservation_command(
        &self,
        mesh_id: &str,
        id: &str,
        fence: &Fence,
        command: ReservationCommand,
        now: Timestamp,
    ) -> StoreResult<Reservation> {
        self.write_with(mesh_id, &[Lock::Reservations], |db| {
            reservation_writes::command(&Rows(db), mesh_id, id, fence, command, now)
        })
    }

    fn reservations(
        &self,
        mesh_id: &str,
        query: ReservationQuery<'_>,
        now: Timestamp,
    ) -> StoreResult<Vec<Reservation>> {
        self.read(|db| match query {
            ReservationQuery::All(scope) => {
                let rows = db.query(
                    "SELECT payload FROM mesh_path_reservations
                      WHERE mesh_id = $1 AND ($2::text IS NULL OR scope = $2)
                        AND (expires_ms IS NULL OR expires_ms > $3)
                      ORDER BY created_at, id",
                    &[&mesh_id, &scope, &now.millis()],
                )?;
                rows.iter().map(|r| decode(r.get(0))).collect()
            }
            ReservationQuery::Near { scope, patterns } => {
                reservation_writes::near_in_force(&Rows(db), mesh_id, scope, patterns, now)
            }
        })
    }

    fn expire_reservations(&self, now: Timestamp) -> StoreResult<u64> {
        let meshes: Vec<String> = self.read(|db| {
            let rows = db.query(
                "SELECT DISTINCT mesh_id FROM mesh_path_reservations /* all meshes */
                  WHERE expires_ms IS NOT NULL AND expires_ms <= $1",
                &[&now.millis()],
            )?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })?;
        let mut expired = 0;
        for mesh_id in meshes {
            expired += self.write_with(&mesh_id, &[Lock::Reservations], |db| {
                let rows = db.query(
                    "SELECT payload FROM mesh_path_reservations
                      WHERE mesh_id = $1 AND expires_ms IS NOT NULL AND expires_ms <= $2
                      ORDER BY expires_ms LIMIT $3",
                    &[&mesh_id, &now.millis(), &EXPIRE_BATCH],
                )?;
                let lapsed = rows.iter().map(|r| decode(r.get(0))).collect::<Res<Vec<_>>>()?;
                reservation_writes::expire(&Rows(db), &lapsed, now)
            })?;
        }
        Ok(expired)
    }
}
