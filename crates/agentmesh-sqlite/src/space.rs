//! Disk space: what a checkpoint needs, what the filesystem has, and whether an
//! I/O error SQLite reports was a full disk.
//!
//! A checkpoint copies the WAL's pages into the database file, and pages past the
//! file's end make it grow. One that runs out of space half way keeps that growth,
//! while the WAL, not fully copied, can be neither truncated nor reused: the
//! space an operator freed is gone, and every write, which must append to the
//! WAL, fails again. (Closing the last connection and the daemon's start-up pass
//! both checkpoint, so a restart after freeing a few MB used them up at once.)
//! So the store starts no checkpoint the filesystem has no room for, in the
//! background, in the periodic pass or at close: the WAL is appended to instead,
//! which needs only the space of the writes themselves, and the checkpoint runs
//! once there is room for it.
//!
//! SQLite reports a write refused with `ENOSPC` as `SQLITE_FULL`, but other
//! refusals (growing the shared-memory index, `EDQUOT`, a failed sync) only as
//! an I/O error whose `errno` the safe API does not expose. For those,
//! [`exhausted`] writes a small file beside the database and reads the answer
//! the filesystem gives.

use std::io::Write as _;
use std::path::Path;

use agentmesh_store::FullStorage;
use rusqlite::Connection;
use rusqlite::config::DbConfig;

use crate::Res;

/// Room a checkpoint leaves free beyond its own growth, for the writes that go on
/// meanwhile.
const CHECKPOINT_MARGIN_BYTES: u64 = 1024 * 1024;

/// What [`exhausted`] writes: more than any single WAL frame or index page, so a
/// filesystem that refused SQLite refuses it too.
const PROBE_BYTES: usize = 64 * 1024;

/// How many bytes the database file must grow by for a checkpoint to copy
/// everything committed into it: the database's size in pages, less what the
/// file already holds on disk.
pub(crate) fn checkpoint_growth(conn: &Connection, db: &Path) -> Res<u64> {
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let logical = u64::try_from(pages.saturating_mul(page_size)).unwrap_or(0);
    let allocated = std::fs::metadata(db).map(|m| allocated_bytes(&m)).unwrap_or(0);
    Ok(logical.saturating_sub(allocated))
}

/// The bytes a file occupies on disk: its blocks, which a file with holes (a
/// checkpoint that wrote past a gap) has fewer of than its length suggests.
#[cfg(unix)]
fn allocated_bytes(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    meta.blocks().saturating_mul(512)
}

#[cfg(not(unix))]
fn allocated_bytes(meta: &std::fs::Metadata) -> u64 {
    meta.len()
}

/// The bytes an unprivileged writer may still use on the filesystem holding
/// `path`; `None` when the system does not say.
#[cfg(unix)]
pub(crate) fn available_bytes(path: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(path).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(not(unix))]
pub(crate) fn available_bytes(_path: &Path) -> Option<u64> {
    None
}

/// Whether the filesystem has room for a checkpoint of the database at `db`
/// through `conn` (outside a transaction): its growth and a margin. Logs why not.
/// When the sizes cannot be read the answer is yes, and the checkpoint runs as
/// it always did.
pub(crate) fn room_for_checkpoint(conn: &Connection, db: &Path, what: &str) -> bool {
    let growth = match checkpoint_growth(conn, db) {
        Ok(growth) => growth,
        Err(crate::Fail(err)) => {
            tracing::debug!(%err, "the size a checkpoint needs could not be read");
            return true;
        }
    };
    if growth == 0 {
        return true;
    }
    let Some(available) = available_bytes(db) else { return true };
    if available >= growth.saturating_add(CHECKPOINT_MARGIN_BYTES) {
        return true;
    }
    tracing::warn!(
        growth_bytes = growth,
        available_bytes = available,
        "{what} postponed: the database file would grow past the free space; writes go on in the WAL"
    );
    false
}

/// Prepares `conn` to be closed: when it is the last connection, SQLite
/// checkpoints the whole WAL into the database file before it deletes the WAL,
/// which is left undone when there is no room for it (the next opener reads the
/// WAL as it is).
pub(crate) fn before_close(conn: &Connection, db: &Path) {
    if !room_for_checkpoint(conn, db, "the checkpoint at close")
        && let Err(err) = conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
    {
        tracing::warn!(%err, "the checkpoint at close could not be turned off");
    }
}

/// Whether the filesystem holding `db` refuses new data right now, and why:
/// writes [`PROBE_BYTES`] to a scratch file beside it and syncs them, then
/// removes the file. `None` when that works or fails for another reason.
pub(crate) fn exhausted(db: &Path) -> Option<FullStorage> {
    let dir = db.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = db.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let probe = dir.join(format!(".{name}.space-probe-{}", std::process::id()));
    let written = std::fs::File::create(&probe)
        .and_then(|mut file| file.write_all(&[0; PROBE_BYTES]).and_then(|()| file.sync_data()));
    // The file may exist even when writing it failed.
    let _ = std::fs::remove_file(&probe);
    FullStorage::of_io(&written.err()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_needs_the_pages_the_file_does_not_hold_yet() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("space.db");
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; CREATE TABLE t (v BLOB)",
        )
        .unwrap();
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        assert_eq!(checkpoint_growth(&conn, &db).unwrap(), 0, "everything is in the database file");
        conn.execute("INSERT INTO t VALUES (zeroblob(1000000))", []).unwrap();
        let growth = checkpoint_growth(&conn, &db).unwrap();
        assert!((950_000..1_100_000).contains(&growth), "the blob's pages are only in the WAL: {growth}");
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        assert_eq!(checkpoint_growth(&conn, &db).unwrap(), 0);
    }

    #[test]
    fn a_filesystem_with_room_is_not_called_exhausted_and_keeps_no_probe() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("space.db");
        assert_eq!(exhausted(&db), None);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the probe file is removed");
        assert!(available_bytes(dir.path()).is_some_and(|n| n > 0));
    }
}
