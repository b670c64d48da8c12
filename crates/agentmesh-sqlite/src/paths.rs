//! Where the database file of a data directory is, including the move from the
//! original's older file name, and how the directory and the file are created:
//! private to their owner.

use std::io;
use std::path::{Path, PathBuf};

/// The database file in a data directory.
pub const DB_FILE_NAME: &str = "mesh-runtime.db";
/// The original's older name for it.
pub const LEGACY_DB_FILE_NAME: &str = "beads.db";

/// `path` with `suffix` appended to its file name (`-wal`, `-shm`).
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
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
///
/// Several processes may do this at once. The companions move first and the main
/// file last, so a `mesh-runtime.db` that exists always has its WAL beside it, and
/// a rename that finds its source gone (another process moved it) counts as done.
/// A rename never replaces a file, because its source exists only once.
pub fn resolve_db_path(dir: &Path, mut rename: impl FnMut(&Path, &Path) -> io::Result<()>) -> PathBuf {
    let next = dir.join(DB_FILE_NAME);
    if next.exists() {
        return next;
    }
    let legacy = dir.join(LEGACY_DB_FILE_NAME);
    if !legacy.exists() {
        return next;
    }
    let gone_is_done = |moved: io::Result<()>| match moved {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        other => other.map(|()| true),
    };
    let mut moved_here = Vec::new();
    let mut moved = Ok(());
    for suffix in ["-wal", "-shm"] {
        let (from, to) = (with_suffix(&legacy, suffix), with_suffix(&next, suffix));
        match gone_is_done(rename(&from, &to)) {
            Ok(true) => moved_here.push((from, to)),
            Ok(false) => {}
            Err(err) => {
                moved = Err(err);
                break;
            }
        }
    }
    let moved = moved.and_then(|()| gone_is_done(rename(&legacy, &next)));
    match moved {
        Ok(_) => next,
        Err(err) => {
            // The main file stayed: its companions go back beside it.
            if !next.exists() {
                for (from, to) in moved_here.iter().rev() {
                    let _ = rename(to, from);
                }
            }
            let chosen = if next.exists() { next } else { legacy };
            tracing::warn!(%err, using = %chosen.display(), "beads.db rename failed; using the existing database in place");
            chosen
        }
    }
}

/// Creates the data directory `dir`, and its missing parents, readable by its
/// owner only (mode 0700 whatever the umask). Returns whether `dir` was created
/// here; when it existed already and is open to other users, logs a warning: its
/// database holds every task message, summary and ledger entry.
pub fn create_private_dir(dir: &Path) -> io::Result<bool> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        private_dir_builder(true).create(parent)?;
    }
    match private_dir_builder(false).create(dir) {
        Ok(()) => {
            set_private(dir, 0o700)?;
            Ok(true)
        }
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {
            warn_if_shared(dir);
            Ok(false)
        }
        Err(err) => Err(err),
    }
}

/// Creates the database file `path`, empty and readable by its owner only (mode
/// 0600 whatever the umask), unless it exists. SQLite gives the `-wal` and `-shm`
/// files it creates beside a database the database file's own mode, so they are
/// private too.
pub(crate) fn create_private_file(path: &Path) -> io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => {
            set_private(path, 0o600)?;
            sync_parent(path)
        }
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err),
    }
}

/// Syncs the directory holding `path`, so that a file just created there is
/// still named after a power loss (SQLite syncs the directory of the WAL and
/// journals it creates, not of the database file).
#[cfg(unix)]
fn sync_parent(path: &Path) -> io::Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(parent)?.sync_all()
}

#[cfg(not(unix))]
fn sync_parent(_path: &Path) -> io::Result<()> {
    Ok(())
}

fn private_dir_builder(recursive: bool) -> std::fs::DirBuilder {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(recursive);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
}

/// Sets `mode` on what this process just created (the umask may have taken bits
/// away, never added any).
#[cfg(unix)]
fn set_private(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_private(_path: &Path, _mode: u32) -> io::Result<()> {
    Ok(())
}

#[cfg(unix)]
fn warn_if_shared(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(dir) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                dir = %dir.display(),
                mode = %format!("{mode:o}"),
                "the data directory is open to other users, and its database holds every task message, summary and \
                 ledger entry; chmod 700 it"
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_shared(_dir: &Path) {}

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
    fn a_failed_companion_rename_leaves_the_legacy_files_together() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("beads.db"), "db");
        touch(&dir.path().join("beads.db-wal"), "wal");
        touch(&dir.path().join("beads.db-shm"), "shm");
        let p = resolve_db_path(dir.path(), |a, b| {
            if a.to_string_lossy().ends_with("-shm") {
                Err(io::Error::other("busy"))
            } else {
                std::fs::rename(a, b)
            }
        });
        assert_eq!(p, dir.path().join("beads.db"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("beads.db-wal")).unwrap(),
            "wal",
            "the WAL is back"
        );
        for name in ["mesh-runtime.db", "mesh-runtime.db-wal", "mesh-runtime.db-shm"] {
            assert!(!dir.path().join(name).exists(), "{name} is not left behind");
        }
    }

    /// A process that finds `mesh-runtime.db` opens it at once: whenever the new
    /// name exists, the WAL must already be beside it.
    #[test]
    fn the_main_file_moves_after_its_companions() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("beads.db"), "db");
        touch(&dir.path().join("beads.db-wal"), "wal");
        let next = dir.path().join(DB_FILE_NAME);
        let p = resolve_db_path(dir.path(), |a, b| {
            std::fs::rename(a, b)?;
            if next.exists() {
                assert!(with_suffix(&next, "-wal").exists(), "{} exists without its WAL", next.display());
            }
            Ok(())
        });
        assert_eq!(p, next);
    }

    /// Another process renames the files between this one's look and its renames:
    /// both end on the new name, with the WAL beside it.
    #[test]
    fn two_processes_renaming_together_both_use_the_moved_files() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("beads.db"), "db");
        touch(&dir.path().join("beads.db-wal"), "wal");
        let mut other = None;
        let p = resolve_db_path(dir.path(), |a, b| {
            if other.is_none() {
                other = Some(resolve_db_path(dir.path(), |a, b| std::fs::rename(a, b)));
            }
            std::fs::rename(a, b)
        });
        assert_eq!(p, dir.path().join("mesh-runtime.db"));
        assert_eq!(other, Some(p));
        assert_eq!(std::fs::read_to_string(dir.path().join("mesh-runtime.db")).unwrap(), "db");
        assert_eq!(std::fs::read_to_string(dir.path().join("mesh-runtime.db-wal")).unwrap(), "wal");
        assert!(!dir.path().join("beads.db").exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_new_data_dir_and_database_file_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b/data");
        assert!(create_private_dir(&dir).unwrap());
        assert!(!create_private_dir(&dir).unwrap(), "the second call finds it");
        let db = dir.join(DB_FILE_NAME);
        create_private_file(&db).unwrap();
        create_private_file(&db).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&db), 0o600);
    }
}
