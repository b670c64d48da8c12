//! Where the database file of a data directory is, including the move from the
//! original's older file name.

use std::io;
use std::path::{Path, PathBuf};

/// The database file in a data directory.
pub const DB_FILE_NAME: &str = "mesh-runtime.db";
/// The original's older name for it.
pub const LEGACY_DB_FILE_NAME: &str = "beads.db";

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The database file to open in `dir`.
///
/// `mesh-runtime.db` when it exists. Otherwise a legacy `beads.db` (with its `-wal`
/// and `-shm` companions) is renamed to it with `rename`. When a rename fails, the
/// file that really holds the data is used in place: never a fresh, empty store
/// beside stranded data. The next open retries the rename.
pub fn resolve_db_path(dir: &Path, mut rename: impl FnMut(&Path, &Path) -> io::Result<()>) -> PathBuf {
    let next = dir.join(DB_FILE_NAME);
    if next.exists() {
        return next;
    }
    let legacy = dir.join(LEGACY_DB_FILE_NAME);
    if !legacy.exists() {
        return next;
    }
    let moved = rename(&legacy, &next).and_then(|()| {
        for suffix in ["-wal", "-shm"] {
            let companion = with_suffix(&legacy, suffix);
            if companion.exists() {
                rename(&companion, &with_suffix(&next, suffix))?;
            }
        }
        Ok(())
    });
    match moved {
        Ok(()) => next,
        Err(err) => {
            let chosen = if next.exists() { next } else { legacy };
            tracing::warn!(%err, using = %chosen.display(), "beads.db rename failed; using the existing database in place");
            chosen
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path, text: &str) {
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn legacy_files_are_renamed_with_their_companions() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("beads.db"), "db");
        touch(&dir.path().join("beads.db-wal"), "wal");
        let p = resolve_db_path(dir.path(), |a, b| std::fs::rename(a, b));
        assert_eq!(p, dir.path().join("mesh-runtime.db"));
        assert_eq!(std::fs::read_to_string(dir.path().join("mesh-runtime.db-wal")).unwrap(), "wal");
        assert!(!dir.path().join("beads.db").exists());
    }

    #[test]
    fn a_failed_rename_keeps_using_the_file_with_the_data() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("beads.db"), "db");
        let p = resolve_db_path(dir.path(), |_, _| Err(io::Error::other("locked")));
        assert_eq!(p, dir.path().join("beads.db"));
        assert!(!dir.path().join("mesh-runtime.db").exists(), "no empty store beside the data");
    }

    #[test]
    fn a_failed_companion_rename_uses_the_moved_main_file() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("beads.db"), "db");
        touch(&dir.path().join("beads.db-shm"), "shm");
        let p = resolve_db_path(dir.path(), |a, b| {
            if a.to_string_lossy().ends_with("-shm") {
                Err(io::Error::other("busy"))
            } else {
                std::fs::rename(a, b)
            }
        });
        assert_eq!(p, dir.path().join("mesh-runtime.db"));
    }
}
