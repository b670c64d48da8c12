//! The commands, one module each. A command checks its flags, calls one store
//! operation and emits the result; rules live in the core and the store, never here.
//!
//! [`Context`] carries what every command shares: the resolved data dir and mesh,
//! and the store, opened on first use so that a command refused for bad flags
//! never creates a data dir or a database.

use std::cell::OnceCell;
use std::path::PathBuf;

use agentmesh_core::{InvalidInput, Timestamp};
use agentmesh_sqlite::SqliteStore;
use agentmesh_store::Store;
use anyhow::Context as _;

use crate::cli::{Command, GlobalArgs};
use crate::output::Output;

mod claim;
mod complete;
mod deliveries;
mod dispatches;
mod events;
mod ledger;
mod mission;
mod serve;
mod sessions;
mod task;

/// What every command shares.
pub struct Context {
    /// Directory of the database.
    data_dir: PathBuf,
    /// The mesh every operation is scoped to.
    mesh: String,
    /// The store, opened by the first command that needs it.
    store: OnceCell<Box<dyn Store>>,
}

impl Context {
    /// Resolves the global options: `--data-dir`, else `$AGENTMESH_HOME` (both via
    /// clap), else `~/.agentmesh`; the mesh must not be blank.
    pub fn resolve(global: &GlobalArgs) -> anyhow::Result<Context> {
        let mesh = global.mesh.trim();
        if mesh.is_empty() {
            return Err(InvalidInput::new("mesh", "must not be blank").into());
        }
        let data_dir = match &global.data_dir {
            Some(dir) if dir.as_os_str().is_empty() => {
                return Err(InvalidInput::new("dataDir", "must not be blank").into());
            }
            Some(dir) => dir.clone(),
            None => default_data_dir()?,
        };
        Ok(Context { data_dir, mesh: mesh.to_owned(), store: OnceCell::new() })
    }

    /// The mesh id.
    pub fn mesh(&self) -> &str {
        &self.mesh
    }

    /// The store, opening (and creating) the database on first use.
    pub fn store(&self) -> anyhow::Result<&dyn Store> {
        if let Some(store) = self.store.get() {
            return Ok(store.as_ref());
        }
        let opened = SqliteStore::open_data_dir(&self.data_dir)
            .with_context(|| format!("failed to open the database in {}", self.data_dir.display()))?;
        Ok(self.store.get_or_init(|| Box::new(opened)).as_ref())
    }
}

/// `~/.agentmesh`, from `$HOME` (or `%USERPROFILE%`).
fn default_data_dir() -> anyhow::Result<PathBuf> {
    let home = ["HOME", "USERPROFILE"]
        .into_iter()
        .filter_map(std::env::var_os)
        .find(|v| !v.is_empty())
        .ok_or_else(|| {
            InvalidInput::new("dataDir", "no home directory is known; pass --data-dir or set AGENTMESH_HOME")
        })?;
    Ok(PathBuf::from(home).join(".agentmesh"))
}

/// Runs one parsed command.
pub fn run(ctx: &Context, command: Command, out: &mut Output) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(ctx, args),
        Command::Task(cmd) => task::run(ctx, cmd, out),
        Command::Claim(args) => claim::run(ctx, args, out),
        Command::Complete(args) => complete::run(ctx, args, out),
        Command::Events(cmd) => events::run(ctx, cmd, out),
        Command::Ledger(cmd) => ledger::run(ctx, cmd, out),
        Command::Mission(cmd) => mission::run(ctx, cmd, out),
        Command::Sessions => sessions::run(ctx, out),
        Command::Deliveries(args) => deliveries::run(ctx, args, out),
        Command::Dispatches => dispatches::run(ctx, out),
    }
}

/// Parses an ISO-8601 instant given for `field` and returns it in the stored form
/// (`2025-01-01T00:00:00.000Z`), so comparisons against stored instants hold
/// whatever offset or precision the user typed.
pub fn normalize_instant(field: &str, text: &str) -> Result<String, InvalidInput> {
    Timestamp::parse_iso(text)
        .map(Timestamp::iso)
        .ok_or_else(|| InvalidInput::new(field, format!("{text:?} is not an ISO-8601 instant")))
}

/// Refuses a blank value for `field`, returning it trimmed.
pub fn required<'a>(field: &str, value: &'a str) -> Result<&'a str, InvalidInput> {
    let trimmed = value.trim();
    if trimmed.is_empty() { Err(InvalidInput::new(field, "must not be blank")) } else { Ok(trimmed) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_normalized_and_garbage_names_the_field() {
        assert_eq!(
            normalize_instant("since", "2025-01-01T01:00:00+01:00").unwrap(),
            "2025-01-01T00:00:00.000Z"
        );
        assert_eq!(normalize_instant("since", "yesterday").unwrap_err().field, "since");
        assert_eq!(required("sessionId", "  ").unwrap_err().field, "sessionId");
        assert_eq!(required("sessionId", " s1 ").unwrap(), "s1");
    }
}
