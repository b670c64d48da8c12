//! One daemon per data dir: the lock file `<data-dir>/daemon.lock`.
//!
//! Two daemons on one database would both run the lease reaper and the upkeep
//! sweeps, and clients would not know which one to talk to. So `agentmesh serve`
//! takes [`DataDirLock`] before it binds: an exclusive `flock` on the lock file,
//! held for the life of the process. The operating system releases it when the
//! process ends, however it ends, so a crashed or killed daemon never leaves a
//! stale lock behind; the file itself stays and only says who held it last.
//!
//! The holder writes its pid into the file, and its address once it is bound, so
//! a second daemon refused the lock can name the first. Only the daemon takes the
//! lock: CLI commands and `agentmesh mcp` processes share the database freely, as
//! SQLite allows. On systems without `flock` the lock is not taken.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The lock file's name in the data dir.
pub const LOCK_FILE_NAME: &str = "daemon.lock";

/// Who holds (or last held) a data dir's lock, as its lock file says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// The holder's process id.
    pub pid: Option<u32>,
    /// The URL the holder listens on, once it is bound.
    pub address: Option<String>,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "pid {pid}")?,
            None => f.write_str("pid unknown")?,
        }
        match &self.address {
            Some(address) => write!(f, ", listening on {address}"),
            None => f.write_str(", address not known yet"),
        }
    }
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another process holds the lock: a daemon already serves the data dir.
    #[error("another agentmesh daemon already serves {} ({holder})", dir.display())]
    Held {
        /// The data dir.
        dir: PathBuf,
        /// What the lock file says about the holder.
        holder: LockHolder,
    },
    /// The lock file could not be opened, locked or written.
    #[error("could not lock {}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
}

/// The data dir's lock, held until dropped.
#[derive(Debug)]
pub struct DataDirLock {
    file: File,
    path: PathBuf,
    holder: LockHolder,
}

impl DataDirLock {
    /// Takes the lock of `data_dir` (which must exist) without waiting, and
    /// writes this process's pid into the lock file. Fails with
    /// [`LockError::Held`], naming the holder, when another process holds it.
    pub fn acquire(data_dir: &Path) -> Result<DataDirLock, LockError> {
        let path = data_dir.join(LOCK_FILE_NAME);
        let io_error = |source| LockError::Io { path: path.clone(), source };
        // Not truncated on open: until the lock is ours, the file is the holder's.
        let mut file = open_private(&path).map_err(io_error)?;
        if !try_lock(&file).map_err(io_error)? {
            let holder = read_holder(&mut file);
            return Err(LockError::Held { dir: data_dir.to_path_buf(), holder });
        }
        let holder = LockHolder { pid: Some(std::process::id()), address: None };
        let mut lock = DataDirLock { file, path: path.clone(), holder };
        lock.write_holder().map_err(io_error)?;
        Ok(lock)
    }

    /// Records the address the daemon listens on, for a second daemon's message.
    pub fn record_address(&mut self, address: &str) -> io::Result<()> {
        self.holder.address = Some(address.to_owned());
        self.write_holder()
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rewrites the file with the holder. The new text is written over the old
    /// before the file is cut to its length, so a reader never finds it empty.
    fn write_holder(&mut self) -> io::Result<()> {
        let mut text = serde_json::to_vec(&self.holder).map_err(io::Error::other)?;
        text.push(b'\n');
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&text)?;
        self.file.set_len(text.len() as u64)?;
        self.file.flush()
    }
}

/// Reads the holder from a lock file: its first JSON value, whatever follows;
/// an empty holder when there is none.
fn read_holder(file: &mut File) -> LockHolder {
    let mut text = Vec::new();
    if file.seek(SeekFrom::Start(0)).is_err() || file.read_to_end(&mut text).is_err() {
        return LockHolder::default();
    }
    serde_json::Deserializer::from_slice(&text)
        .into_iter::<LockHolder>()
        .next()
        .and_then(Result::ok)
        .unwrap_or_default()
}

/// Opens (or creates, mode 0600) the lock file for reading and writing.
fn open_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    options.open(path)
}

/// Takes an exclusive `flock` without waiting; `Ok(false)` when another open
/// file holds it.
#[cfg(unix)]
fn try_lock(file: &File) -> io::Result<bool> {
    use rustix::fs::{FlockOperation, flock};
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(errno) => Err(io::Error::from(errno)),
    }
}

/// Without `flock` there is no lock to take.
#[cfg(not(unix))]
fn try_lock(_file: &File) -> io::Result<bool> {
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_holder_and_a_dropped_one_frees_the_dir() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut first = DataDirLock::acquire(dir.path()).expect("the first lock");
        first.record_address("http://127.0.0.1:7433").expect("recorded");
        match DataDirLock::acquire(dir.path()) {
            Err(LockError::Held { holder, .. }) => {
                assert_eq!(holder.pid, Some(std::process::id()));
                assert_eq!(holder.address.as_deref(), Some("http://127.0.0.1:7433"));
            }
            other => panic!("expected Held, got {other:?}"),
        }
        drop(first);
        DataDirLock::acquire(dir.path()).expect("the lock is free again");
    }

    #[test]
    fn the_holder_is_read_past_trailing_text() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join(LOCK_FILE_NAME);
        std::fs::write(&path, "{\"pid\":7,\"address\":null}\n0.1:7433\"}\n").expect("written");
        let mut file = File::open(&path).expect("opened");
        assert_eq!(read_holder(&mut file), LockHolder { pid: Some(7), address: None });
        std::fs::write(&path, "").expect("written");
        let mut file = File::open(&path).expect("opened");
        assert_eq!(read_holder(&mut file), LockHolder::default());
    }
}
