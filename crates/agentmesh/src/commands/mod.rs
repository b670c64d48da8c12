//! The commands, one module each. A command checks its flags, calls one store
//! operation and emits the result; rules live in the core and the store, never here.
//!
//! [`Context`] carries what every command shares: the resolved data dir and mesh,
//! and the store, opened on first use so that a command refused for bad flags
//! never creates a data dir or a database.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentmesh_api::{LocalMesh, MeshApi, RemoteMesh};
use agentmesh_core::InvalidInput;
use agentmesh_daemon::TOKEN_FILE_NAME;
use agentmesh_sqlite::SqliteStore;
use agentmesh_store::Store;
use anyhow::Context as _;

use crate::cli::{Command, GlobalArgs};
use crate::output::Output;

mod claim;
mod complete;
mod completions;
mod deliveries;
mod dispatches;
mod events;
mod import_adhdev;
mod ledger;
mod mcp;
mod mission;
mod serve;
mod sessions;
mod status;
mod task;
mod tool_calls;
mod work;

/// The environment variable a client reads its token from.
pub const TOKEN_ENV: &str = "AGENTMESH_TOKEN";

/// What every command shares.
pub struct Context {
    /// Directory of the database.
    data_dir: PathBuf,
    /// The mesh every operation is scoped to.
    mesh: String,
    /// The daemon to talk to, if any.
    server: Option<String>,
    /// `--token-file`, if given.
    token_file: Option<PathBuf>,
    /// The store, opened by the first command that needs it.
    store: OnceCell<Arc<dyn Store>>,
    /// The mesh operations, set up by the first command that needs them.
    api: OnceCell<Arc<dyn MeshApi>>,
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
        let server = match global.server.as_deref().map(str::trim) {
            Some("") => return Err(InvalidInput::new("server", "must not be blank").into()),
            other => other.map(str::to_owned),
        };
        Ok(Context {
            data_dir,
            mesh: mesh.to_owned(),
            server,
            token_file: global.token_file.clone(),
            store: OnceCell::new(),
            api: OnceCell::new(),
        })
    }

    /// The token file `--token-file` names, else the data dir's.
    pub fn token_file(&self) -> PathBuf {
        self.token_file.clone().unwrap_or_else(|| self.data_dir.join(TOKEN_FILE_NAME))
    }

    /// The mesh operations: against the daemon of `--server`, else on the data dir.
    pub fn api(&self) -> anyhow::Result<&dyn MeshApi> {
        Ok(self.shared_api()?.as_ref())
    }

    /// [`Context::api`], as a handle that can outlive the borrow (for servers that
    /// hand it to other threads).
    pub fn shared_api(&self) -> anyhow::Result<&Arc<dyn MeshApi>> {
        if let Some(api) = self.api.get() {
            return Ok(api);
        }
        let api: Arc<dyn MeshApi> = match &self.server {
            Some(url) => Arc::new(RemoteMesh::new(url, &self.client_token()?)?),
            None => Arc::new(LocalMesh::new(Arc::clone(self.store()?), crate::now)),
        };
        Ok(self.api.get_or_init(|| api))
    }

    /// The data dir.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The token a client presents: `--token-file`, else `$AGENTMESH_TOKEN`, else
    /// the data dir's token file (a daemon on this machine and data dir).
    fn client_token(&self) -> anyhow::Result<String> {
        let from_file = |path: &Path| -> anyhow::Result<String> {
            let text = std::fs::read_to_string(path).map_err(|err| {
                InvalidInput::new("tokenFile", format!("cannot read {}: {err}", path.display()))
            })?;
            Ok(text.trim().to_owned())
        };
        if let Some(path) = &self.token_file {
            return from_file(path);
        }
        if let Some(token) = std::env::var(TOKEN_ENV).ok().filter(|t| !t.trim().is_empty()) {
            return Ok(token.trim().to_owned());
        }
        // This machine's daemon token goes only to a daemon on this machine.
        let default = self.data_dir.join(TOKEN_FILE_NAME);
        if default.exists() && self.server.as_deref().is_some_and(is_loopback_url) {
            return from_file(&default);
        }
        Err(InvalidInput::new(
            "token",
            format!("no API token: pass --token-file or set {TOKEN_ENV} (the daemon writes its token to <data-dir>/{TOKEN_FILE_NAME})"),
        )
        .into())
    }

    /// The mesh id.
    pub fn mesh(&self) -> &str {
        &self.mesh
    }

    /// The store of the data dir, opening (and creating) the database on first use.
    /// Commands that may run through a daemon use [`Context::api`] instead.
    pub fn store(&self) -> anyhow::Result<&Arc<dyn Store>> {
        if let Some(store) = self.store.get() {
            return Ok(store);
        }
        let opened = SqliteStore::open_data_dir(&self.data_dir)
            .with_context(|| format!("failed to open the database in {}", self.data_dir.display()))?;
        Ok(self.store.get_or_init(|| Arc::new(opened)))
    }
}

/// Whether `url` names a daemon on this machine (`localhost` or a loopback address).
fn is_loopback_url(url: &str) -> bool {
    let rest = url.trim().split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
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
        Command::Completions(cmd) => completions::run(ctx, cmd, out),
        Command::Status => status::run(ctx, out),
        Command::Ledger(cmd) => ledger::run(ctx, cmd, out),
        Command::Mission(cmd) => mission::run(ctx, cmd, out),
        Command::Sessions(args) => sessions::run(ctx, args, out),
        Command::Deliveries(args) => deliveries::run(ctx, args, out),
        Command::Dispatches(args) => dispatches::run(ctx, args, out),
        Command::ToolCalls(args) => tool_calls::run(ctx, args, out),
        Command::Work(args) => work::run(ctx, args, out),
        Command::ImportAdhdev(args) => import_adhdev::run(ctx, args, out),
        Command::Mcp(args) => mcp::run(ctx, args),
    }
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
    fn only_loopback_servers_get_the_data_dirs_token() {
        for url in ["http://127.0.0.1:7433", "http://localhost:1/x", "http://[::1]:7433/", "127.0.0.2:80"] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in [
            "http://example.com:7433",
            "http://10.0.0.5",
            "http://127.0.0.1.evil.test",
            "http://[2001:db8::1]:1",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }

    #[test]
    fn blank_flags_name_the_field() {
        assert_eq!(required("sessionId", "  ").unwrap_err().field, "sessionId");
        assert_eq!(required("sessionId", " s1 ").unwrap(), "s1");
    }
}
