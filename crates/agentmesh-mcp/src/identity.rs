//! Who is calling: the machine's daemon id, the coordinator run and the session.
//!
//! The daemon id names the machine. It is created once per data dir
//! (`<data-dir>/daemon-id`, `mach_<uuid>`) and read by every later process, so a
//! coordinator that restarts is still the same machine. The run id is fresh for
//! each `agentmesh mcp` process (and each HTTP MCP session): completion events are
//! addressed to the run that enqueued the task, so two coordinators on one machine
//! each receive only their own.
//!
//! The worker session is fresh in the same way unless `--session` pins it: every
//! worker started from one shared MCP configuration claims, heartbeats and
//! completes as a session of its own, so two of them never share an assignment.
//! A coordinator's stamp carries only the pinned session: a fresh one would tie
//! the coordinator's events to one process, and a restarted coordinator could not
//! take over what its previous run left queued.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use agentmesh_api::wire::{CoordinatorBody, DrainBody};

/// The daemon-id file's name in the data dir.
pub const DAEMON_ID_FILE_NAME: &str = "daemon-id";

/// The identity a tool server acts under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The machine (`mach_...`).
    pub daemon_id: String,
    /// This coordinator run.
    pub run_id: String,
    /// The agent session, when the agent was started with one (`--session`).
    pub session_id: Option<String>,
    /// The session the worker tools act as when a call names none: the pinned
    /// session, else one made for this identity (`ses_<uuid>`).
    pub worker_session: String,
}

impl Identity {
    /// An identity on machine `daemon_id` with a fresh run id, and a fresh worker
    /// session unless `session_id` pins one.
    pub fn fresh_run(daemon_id: impl Into<String>, session_id: Option<String>) -> Identity {
        let session_id = session_id.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
        let worker_session =
            session_id.clone().unwrap_or_else(|| agentmesh_store::ids::mint_prefixed("ses_"));
        Identity {
            daemon_id: daemon_id.into(),
            run_id: agentmesh_store::ids::mint_prefixed("run_"),
            session_id,
            worker_session,
        }
    }

    /// The coordinator stamp of a task this identity enqueues.
    pub fn coordinator(&self) -> CoordinatorBody {
        CoordinatorBody {
            daemon_id: Some(self.daemon_id.clone()),
            run_id: Some(self.run_id.clone()),
            session_id: self.session_id.clone(),
        }
    }

    /// The drain request of this coordinator.
    pub fn drain_body(&self, limit: Option<u32>) -> DrainBody {
        DrainBody {
            daemon_id: self.daemon_id.clone(),
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            limit,
            ..DrainBody::default()
        }
    }
}

/// A fresh daemon id: `mach_` and a time-ordered UUID without dashes.
pub fn new_daemon_id() -> String {
    agentmesh_store::ids::mint_prefixed("mach_")
}

/// Reads the daemon id of the data dir `dir`, creating it (and the dir) on first
/// use. Two processes starting at once agree: the file is created exclusively and
/// the loser reads the winner's id.
pub fn load_or_create_daemon_id(dir: &Path) -> io::Result<String> {
    let path = dir.join(DAEMON_ID_FILE_NAME);
    match read_id(&path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        read => return read,
    }
    // A data dir created here is private to its owner, as the store creates it.
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    let id = new_daemon_id();
    // Written whole under a private name, then linked into place: the link fails
    // when another process got there first, so nobody ever reads a half-written id.
    let staged = dir.join(format!(".{DAEMON_ID_FILE_NAME}.{}", agentmesh_store::ids::mint_prefixed("")));
    let mut file = OpenOptions::new().write(true).create_new(true).open(&staged)?;
    let published = file
        .write_all(format!("{id}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::hard_link(&staged, &path));
    let _ = fs::remove_file(&staged);
    match published {
        Ok(()) => Ok(id),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => read_id(&path),
        Err(err) => Err(err),
    }
}

fn read_id(path: &Path) -> io::Result<String> {
    let text = fs::read_to_string(path)?;
    let id = text.trim();
    if id.is_empty() || id.chars().any(char::is_whitespace) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} holds no daemon id", path.display()),
        ));
    }
    Ok(id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_id_is_created_once_per_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_daemon_id(&dir.path().join("data")).unwrap();
        assert!(first.starts_with("mach_") && first.len() == 5 + 32, "{first}");
        assert_eq!(load_or_create_daemon_id(&dir.path().join("data")).unwrap(), first);
        assert_ne!(load_or_create_daemon_id(dir.path()).unwrap(), first);
    }

    #[test]
    fn each_run_is_new_and_stamps_the_coordinator() {
        let a = Identity::fresh_run("mach_x", Some(" s1 ".into()));
        let b = Identity::fresh_run("mach_x", None);
        let c = Identity::fresh_run("mach_x", None);
        assert_ne!(a.run_id, b.run_id);
        assert_eq!(a.coordinator().session_id.as_deref(), Some("s1"));
        assert_eq!(b.drain_body(Some(3)).limit, Some(3));
        assert_eq!(a.worker_session, "s1");
        assert!(b.worker_session.starts_with("ses_"), "{}", b.worker_session);
        assert_ne!(b.worker_session, c.worker_session);
        assert_eq!(b.coordinator().session_id, None, "a session made for the process is no stamp");
    }
}
