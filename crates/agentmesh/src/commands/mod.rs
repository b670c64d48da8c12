//! The commands, one module each. A command checks its flags, calls one store
//! operation and emits the result; rules live in the core and the store, never here.
//!
//! [`Context`] carries what every command shares: the resolved data dir and mesh,
//! and the store, opened on first use so that a command refused for bad flags
//! never creates a data dir or a database. A command that only reads asks for
//! [`Context::read_api`], which refuses a data dir that holds no database
//! ([`NoDatabase`]) instead of creating one: a mistyped `--data-dir` must not
//! read as an empty system.
//!
//! A failure that the user can fix from the command line leaves [`run`] with a
//! message that ends with how ([`Context::advise`]): no daemon at `--server`
//! (start one), a token the daemon refused (which token source was used), a URL
//! that is not the daemon's API, an id the mesh does not hold (the listing that
//! shows them).

use std::cell::OnceCell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentmesh_api::ENFORCE_ENV;
use agentmesh_api::{LocalMesh, MeshApi, MeshError, RemoteMesh};
use agentmesh_core::events::enforce_from_env_value;
use agentmesh_core::{InvalidInput, MeshId};
use agentmesh_daemon::TOKEN_FILE_NAME;
use agentmesh_sqlite::{DB_FILE_NAME, LEGACY_DB_FILE_NAME};
use agentmesh_store::{Store, StoreError};
pub(crate) use database::StoreConfig;
pub(crate) use migrate::run as migrate;

use crate::cli::{Command, GlobalArgs};
use crate::failure::with_fix;
use crate::output::Output;

mod archive;
mod backup;
mod claim;
mod complete;
mod completion_records;
mod completions;
pub(crate) mod database;
mod deliveries;
mod demo;
mod dispatches;
mod events;
mod guard;
mod heartbeat;
mod holds;
mod import_adhdev;
mod ledger;
mod man;
mod mcp;
mod meshes;
mod migrate;
mod mission;
mod openapi;
mod reservations;
mod serve;
mod sessions;
mod status;
mod task;
mod tool_calls;
mod webhooks;
mod work;

/// The environment variable a client reads its token from.
pub(crate) const TOKEN_ENV: &str = "AGENTMESH_TOKEN";
/// The environment variable `--server` is read from.
const SERVER_ENV: &str = "AGENTMESH_SERVER";
/// The message of the daemon's answer to a path it has no route for.
const ROUTE_NOT_FOUND: &str = "no such route";

/// A command that only reads was pointed at a data dir with no database in it.
#[derive(Debug)]
pub(crate) struct NoDatabase {
    /// The data dir, as given.
    pub data_dir: PathBuf,
    /// The database file `--database-url` named, if it did.
    pub database_file: Option<PathBuf>,
}

impl std::fmt::Display for NoDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(file) = &self.database_file {
            return write!(
                f,
                "no database at {file}: check --database-url (or $AGENTMESH_DATABASE_URL), or create it with \
                 a command that writes, such as `agentmesh --database-url sqlite://{file} task add ...`",
                file = file.display()
            );
        }
        write!(
            f,
            "no database in {dir}: it holds neither {DB_FILE_NAME} nor {LEGACY_DB_FILE_NAME}; point --data-dir \
             (or $AGENTMESH_HOME) at the data dir that holds one, talk to a running daemon with \
             --server http://HOST:PORT (or ${SERVER_ENV}), or create one there with a command that writes, \
             such as `agentmesh --data-dir {dir} task add ...` or `agentmesh --data-dir {dir} serve`",
            dir = self.data_dir.display()
        )
    }
}

impl std::error::Error for NoDatabase {}

/// What every command shares.
pub(crate) struct Context {
    /// Where the store lives: the data dir, and the database a URL named.
    store_config: StoreConfig,
    /// Enforce mode for drains (`MESH_PROTOCOL_V2_ENFORCE`), read once here.
    enforce: bool,
    /// The data dir was named by `--data-dir` on the command line.
    data_dir_on_command_line: bool,
    /// `--server` was given on the command line.
    server_on_command_line: bool,
    /// The mesh every operation is scoped to.
    mesh: MeshId,
    /// The daemon to talk to, if any.
    server: Option<String>,
    /// An extra CA file `--ca-cert` names, trusted for an https daemon.
    ca_cert: Option<PathBuf>,
    /// `--token-file`, if given.
    token_file: Option<PathBuf>,
    /// Where the token presented to the daemon came from, once it was read.
    token_source: OnceCell<TokenSource>,
    /// The store, opened by the first command that needs it.
    store: OnceCell<Arc<dyn Store>>,
    /// The mesh operations, set up by the first command that needs them.
    api: OnceCell<Arc<dyn MeshApi>>,
}

impl Context {
    /// Resolves the global options: `--data-dir`, else `$AGENTMESH_HOME` (both via
    /// clap), else `~/.agentmesh`, which must not be a file, or the directory of
    /// the database `--database-url` (or `$AGENTMESH_DATABASE_URL`) names (see
    /// [`StoreConfig::resolve`]); the mesh follows the id rule, and `--server`
    /// must be a daemon's root URL. Enforce mode is read from the environment
    /// here, once, and handed to whatever drains.
    pub(crate) fn resolve(global: &GlobalArgs) -> anyhow::Result<Context> {
        let mesh = MeshId::parse(&global.mesh)?;
        if global.data_dir.as_ref().is_some_and(|dir| dir.as_os_str().is_empty()) {
            return Err(InvalidInput::new("dataDir", "must not be blank").into());
        }
        let store_config = StoreConfig::resolve(
            global.data_dir.as_deref(),
            global.database_url.as_deref(),
            global.database_schema.as_deref(),
            default_data_dir,
        )?
        .with_request_timeout(global.request_timeout)
        .with_durability(global.durability);
        let data_dir = store_config.dir();
        if std::fs::metadata(data_dir).is_ok_and(|meta| !meta.is_dir()) {
            return Err(InvalidInput::new(
                "dataDir",
                format!(
                    "{} is a file, not a directory: point --data-dir (or $AGENTMESH_HOME) at a directory, \
                     or leave both unset for ~/.agentmesh",
                    data_dir.display()
                ),
            )
            .into());
        }
        let server = global.server.as_deref().map(server_url).transpose()?;
        Ok(Context {
            enforce: enforce_from_env_value(std::env::var(ENFORCE_ENV).ok().as_deref()),
            store_config,
            data_dir_on_command_line: global.data_dir_on_command_line,
            server_on_command_line: global.server_on_command_line,
            mesh,
            server,
            ca_cert: global.ca_cert.clone(),
            token_file: global.token_file.clone(),
            token_source: OnceCell::new(),
            store: OnceCell::new(),
            api: OnceCell::new(),
        })
    }

    /// The token file `--token-file` names, else the data dir's.
    pub(crate) fn token_file(&self) -> PathBuf {
        self.token_file.clone().unwrap_or_else(|| self.data_dir().join(TOKEN_FILE_NAME))
    }

    /// The mesh operations: against the daemon of `--server`, else on the data dir.
    pub(crate) fn api(&self) -> anyhow::Result<&dyn MeshApi> {
        Ok(self.shared_api()?.as_ref())
    }

    /// The mesh operations for a command that only reads: [`Context::api`], except
    /// that on a data dir holding no database it fails with [`NoDatabase`] and
    /// creates nothing (no directory, no file). Through a daemon it is `api`.
    pub(crate) fn read_api(&self) -> anyhow::Result<&dyn MeshApi> {
        if self.server.is_none() && self.api.get().is_none() && !self.store_config.database_exists() {
            return Err(NoDatabase {
                data_dir: self.data_dir().to_owned(),
                database_file: self.store_config.database_file().map(Path::to_owned),
            }
            .into());
        }
        self.api()
    }

    /// [`Context::api`], as a handle that can outlive the borrow (for servers that
    /// hand it to other threads).
    pub(crate) fn shared_api(&self) -> anyhow::Result<&Arc<dyn MeshApi>> {
        if let Some(api) = self.api.get() {
            return Ok(api);
        }
        let api: Arc<dyn MeshApi> = match &self.server {
            Some(url) => Arc::new(RemoteMesh::trusting(url, &self.client_token()?, self.ca_cert.as_deref())?),
            None => Arc::new(
                LocalMesh::new(Arc::clone(self.store()?), self.store_config.clock())
                    .with_enforce(self.enforce)
                    .with_webhooks(webhook_policy_from_env(), agentmesh_api::webhook::DEFAULT_TIMEOUT)
                    .with_request_timeout(self.store_config.request_timeout()),
            ),
        };
        Ok(self.api.get_or_init(|| api))
    }

    /// The data dir.
    pub(crate) fn data_dir(&self) -> &Path {
        self.store_config.dir()
    }

    /// Where the store lives; [`StoreConfig::open`] is the one way a store is
    /// opened.
    pub(crate) fn store_config(&self) -> &StoreConfig {
        &self.store_config
    }

    /// Whether drains run in enforce mode (`MESH_PROTOCOL_V2_ENFORCE`, read once
    /// at start-up).
    pub(crate) fn enforce(&self) -> bool {
        self.enforce
    }

    /// Whether `--data-dir` was given on the command line (not only through
    /// `$AGENTMESH_HOME` or the default).
    pub(crate) fn data_dir_on_command_line(&self) -> bool {
        self.data_dir_on_command_line
    }

    /// Whether `--server` was given on the command line (not only through
    /// `$AGENTMESH_SERVER`).
    pub(crate) fn server_on_command_line(&self) -> bool {
        self.server_on_command_line
    }

    /// The token a client presents: `--token-file`, else `$AGENTMESH_TOKEN`, else
    /// the data dir's token file (a daemon on this machine and data dir).
    /// The source is remembered for [`Context::advise`].
    fn client_token(&self) -> anyhow::Result<String> {
        let from_file = |path: &Path, source: TokenSource| -> anyhow::Result<String> {
            let text = std::fs::read_to_string(path).map_err(|err| {
                InvalidInput::new(
                    "tokenFile",
                    format!(
                        "cannot read {}: {err}; pass --token-file the file the daemon wrote its token to \
                         (<its data dir>/{TOKEN_FILE_NAME}, or the --token-file it was started with)",
                        path.display()
                    ),
                )
            })?;
            if text.trim().is_empty() {
                return Err(InvalidInput::new(
                    "tokenFile",
                    format!(
                        "{} holds no token; pass --token-file the file the daemon wrote its token to \
                         (<its data dir>/{TOKEN_FILE_NAME}, or the --token-file it was started with)",
                        path.display()
                    ),
                )
                .into());
            }
            let _ = self.token_source.set(source);
            Ok(text.trim().to_owned())
        };
        if let Some(path) = &self.token_file {
            return from_file(path, TokenSource::Flag(path.clone()));
        }
        if let Some(token) = std::env::var(TOKEN_ENV).ok().filter(|t| !t.trim().is_empty()) {
            let _ = self.token_source.set(TokenSource::Env);
            return Ok(token.trim().to_owned());
        }
        // This machine's daemon token goes only to a daemon on this machine.
        let default = self.data_dir().join(TOKEN_FILE_NAME);
        if default.exists() && self.server.as_deref().is_some_and(is_loopback_url) {
            return from_file(&default, TokenSource::DataDir(default.clone()));
        }
        let server = self.server.as_deref().unwrap_or("the daemon");
        Err(InvalidInput::new(
            "token",
            format!(
                "no API token for {server}: the daemon writes its token to <its data dir>/{TOKEN_FILE_NAME} \
                 (or the --token-file it was started with); pass that file with --token-file FILE, or set \
                 {TOKEN_ENV} to its contents"
            ),
        )
        .into())
    }

    /// Adds to `err` what the user can do about it, when the cause is one they can
    /// fix from the command line; other errors pass through unchanged. The fix
    /// goes after the error ([`with_fix`]), so the message ends with what to do.
    fn advise(&self, err: anyhow::Error) -> anyhow::Error {
        match self.fix_for(&err) {
            Some(fix) => with_fix(err, fix),
            None => err,
        }
    }

    /// What the user can do about `err`, if it is a mistake they can fix: see
    /// [`Context::advise`].
    fn fix_for(&self, err: &anyhow::Error) -> Option<String> {
        if let Some(server) = &self.server
            && let Some(mesh_error) = err.chain().find_map(|cause| cause.downcast_ref::<MeshError>())
        {
            match mesh_error {
                MeshError::CannotConnect { .. } => {
                    return Some(format!(
                        "no agentmesh daemon answers at {server}: start one with `agentmesh serve` (it \
                         listens on http://127.0.0.1:7433 unless given --listen), or point --server or \
                         ${SERVER_ENV} at the daemon's address"
                    ));
                }
                MeshError::Remote { status: 401, .. } => {
                    let token = self
                        .token_source
                        .get()
                        .map_or_else(|| "the token".to_owned(), |source| format!("the token from {source}"));
                    return Some(format!(
                        "the daemon at {server} refused {token}: pass that daemon's own token (in \
                         <its data dir>/{TOKEN_FILE_NAME}, or the --token-file it was started with) with \
                         --token-file or ${TOKEN_ENV}"
                    ));
                }
                MeshError::Remote { status: 404, code, message }
                    if code == "http_error" || message == ROUTE_NOT_FOUND =>
                {
                    return Some(format!(
                        "{server} does not serve the agentmesh API: give --server the daemon's root URL, \
                         such as http://127.0.0.1:7433, without a path of the daemon's own"
                    ));
                }
                _ => {}
            }
        }
        let mesh = self.mesh();
        let listing = match crate::failure::code_of(err).as_str() {
            "task_not_found" => "task list",
            "not_found" => {
                let message = format!("{err:#}");
                let kind = |word: &str| message.split(": ").any(|part| part.starts_with(word));
                if kind("mission ") {
                    "mission list"
                } else if kind("delivery ") {
                    "deliveries"
                } else if kind("dispatch ") {
                    "dispatches"
                } else if kind("held event ") {
                    "events held"
                } else {
                    return None;
                }
            }
            _ => return None,
        };
        Some(format!("`agentmesh {listing}` shows the ids mesh {mesh:?} holds; --mesh ID reads another mesh"))
    }

    /// The mesh id.
    pub(crate) fn mesh(&self) -> &str {
        &self.mesh
    }

    /// The mesh id, parsed by the id rule when the command started.
    pub(crate) fn mesh_id(&self) -> &MeshId {
        &self.mesh
    }

    /// The store of the data dir, opening (and creating) the database on first use.
    /// Commands that may run through a daemon use [`Context::api`] instead.
    pub(crate) fn store(&self) -> anyhow::Result<&Arc<dyn Store>> {
        if let Some(store) = self.store.get() {
            return Ok(store);
        }
        log_warnings();
        let opened = self.store_config.open()?;
        Ok(self.store.get_or_init(|| opened.into_store()))
    }
}

/// Where the token a client presents came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TokenSource {
    /// `--token-file PATH`.
    Flag(PathBuf),
    /// `$AGENTMESH_TOKEN`.
    Env,
    /// The data dir's token file, read for a daemon on this machine.
    DataDir(PathBuf),
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::Flag(path) => write!(f, "--token-file {}", path.display()),
            TokenSource::Env => write!(f, "${TOKEN_ENV}"),
            TokenSource::DataDir(path) => write!(f, "the data dir's token file {}", path.display()),
        }
    }
}

/// Sends the store's warnings (a data dir open to other users, a legacy file left
/// unimported) to stderr, filtered by `RUST_LOG` (default `warn`). `serve` and
/// `mcp` install their own logging before this runs, and theirs stays.
pub(super) fn log_warnings() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Fails only when a subscriber is installed already.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .with_target(false)
        .try_init();
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

/// The daemon URL of `--server` (or `$AGENTMESH_SERVER`): an http(s) URL of the
/// daemon's root, or a bare `HOST:PORT`, taken as `http://HOST:PORT`. Anything
/// else is refused naming `server`, with what to write instead.
fn server_url(given: &str) -> Result<String, InvalidInput> {
    const WRITE: &str = "write --server http://HOST:PORT (https:// for a daemon serving TLS), such as \
                         --server http://127.0.0.1:7433";
    let invalid = |why: String| InvalidInput::new("server", format!("{why}; {WRITE}"));
    let trimmed = given.trim();
    if trimmed.is_empty() {
        return Err(invalid("must not be blank".to_owned()));
    }
    let url = match trimmed.split_once("://") {
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") => {
            trimmed.to_owned()
        }
        Some((scheme, _)) => {
            return Err(invalid(format!("{given:?} is not an http(s) URL (scheme {scheme:?})")));
        }
        None if is_host_and_port(trimmed) => format!("http://{trimmed}"),
        None => return Err(invalid(format!("{given:?} is neither a URL nor HOST:PORT"))),
    };
    match RemoteMesh::check_base_url(&url) {
        Ok(()) => Ok(url),
        // Names the daemon's root URL to use instead.
        Err(MeshError::Store(StoreError::InvalidInput(refused))) if refused.problem.contains("root URL") => {
            Err(refused)
        }
        Err(MeshError::Store(StoreError::InvalidInput(refused))) => Err(invalid(refused.problem)),
        Err(err) => Err(invalid(err.to_string())),
    }
}

/// Whether `text` (no scheme) starts with `HOST:PORT`, such as `127.0.0.1:7433`,
/// `localhost:7433` or `[::1]:7433`, perhaps followed by a path.
fn is_host_and_port(text: &str) -> bool {
    let authority = text.split('/').next().unwrap_or_default();
    let Some((host, port)) = authority.rsplit_once(':') else { return false };
    let host_ok = match host.strip_prefix('[') {
        Some(v6) => v6.strip_suffix(']').is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()),
        None => {
            !host.is_empty()
                && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
        }
    };
    host_ok && !port.is_empty() && port.parse::<u16>().is_ok()
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

/// Runs one parsed command; a failure comes back with advice when the user can
/// fix its cause ([`Context::advise`]).
///
/// A command that is one request (a task added, a claim, a list) runs within
/// `--request-timeout`, across its store calls: a store that cannot answer in
/// time fails it with `busy`, `lock_timeout` or `unavailable` (exit status
/// 75). Commands that run on (`serve`, `work`, `mcp`, a watch's wait) or move
/// data in bulk (the ledger, imports, migrations) bound each of their own
/// requests instead, or wait as long as the store's timeouts let them.
pub(crate) fn run(ctx: &Context, command: Command, out: &mut Output) -> anyhow::Result<()> {
    let one_request = matches!(
        command,
        Command::Task(_)
            | Command::Claim(_)
            | Command::Complete(_)
            | Command::Heartbeat(_)
            | Command::Events(_)
            | Command::Fingerprints(_)
            | Command::Conflicts(_)
            | Command::Status
            | Command::Mission(_)
            | Command::Sessions(_)
            | Command::Holds(_)
            | Command::Webhook(_)
            | Command::Archive(crate::cli::ArchiveCommand::Status | crate::cli::ArchiveCommand::Retention(_))
            | Command::Release(_)
            | Command::Reservations(_)
            | Command::Guard(_)
            | Command::Deliveries(_)
            | Command::Dispatches(_)
            | Command::ToolCalls(_)
            | Command::Meshes
    );
    let deadline = one_request.then(|| std::time::Instant::now() + ctx.store_config().request_timeout());
    agentmesh_store::deadline::within(deadline, || dispatch(ctx, command, out)).map_err(|err| ctx.advise(err))
}

fn dispatch(ctx: &Context, command: Command, out: &mut Output) -> anyhow::Result<()> {
    match command {
        Command::Demo => demo::run(ctx, out),
        Command::Serve(args) => serve::run(ctx, args),
        Command::Task(cmd) => task::run(ctx, cmd, out),
        Command::Claim(args) => claim::run(ctx, args, out),
        Command::Complete(args) => complete::run(ctx, args, out),
        Command::Heartbeat(args) => heartbeat::run(ctx, args, out),
        Command::Events(cmd) => events::run(ctx, cmd, out),
        Command::Fingerprints(args) => completion_records::fingerprints(ctx, args, out),
        Command::Conflicts(args) => completion_records::conflicts(ctx, args, out),
        Command::Status => status::run(ctx, out),
        Command::Ledger(cmd) => ledger::run(ctx, cmd, out),
        Command::Mission(cmd) => mission::run(ctx, cmd, out),
        Command::Sessions(args) => sessions::run(ctx, args, out),
        Command::Holds(args) => holds::run(ctx, args, out),
        Command::Webhook(cmd) => webhooks::run(ctx, cmd, out),
        Command::Archive(cmd) => archive::run(ctx, cmd, out),
        Command::Reserve(args) => reservations::reserve(ctx, args, out),
        Command::Release(args) => reservations::release(ctx, args, out),
        Command::Reservations(args) => reservations::run(ctx, args, out),
        Command::Guard(cmd) => guard::run(ctx, cmd, out),
        Command::Deliveries(args) => deliveries::run(ctx, args, out),
        Command::Dispatches(args) => dispatches::run(ctx, args, out),
        Command::ToolCalls(args) => tool_calls::run(ctx, args, out),
        Command::Meshes => meshes::run(ctx, out),
        Command::Work(args) => work::run(ctx, args, out),
        Command::ImportAdhdev(args) => import_adhdev::run(ctx, args, out),
        Command::Backup(args) => backup::backup(ctx, args, out),
        Command::Restore(args) => backup::restore(ctx, args, out),
        // `main` runs it before any context is resolved (see `migrate`).
        Command::Migrate(_) => Err(anyhow::anyhow!("migrate names its databases itself; main runs it")),
        Command::Mcp(args) => mcp::run(ctx, args),
        Command::Completions(args) => completions::run(args, out),
        Command::Man(args) => man::run(args, out),
        Command::Openapi => openapi::run(out),
    }
}

/// Refuses a blank value for `field`, returning it trimmed.
pub(crate) fn required<'a>(field: &str, value: &'a str) -> Result<&'a str, InvalidInput> {
    let trimmed = value.trim();
    if trimmed.is_empty() { Err(InvalidInput::new(field, "must not be blank")) } else { Ok(trimmed) }
}

/// An id given for `field`, checked by the core's id rule (as every transport
/// checks it) and returned trimmed. Flags are checked before the store opens, so a
/// refused id never creates a data dir or a database.
pub(crate) fn id<'a>(field: &str, value: &'a str) -> Result<&'a str, InvalidInput> {
    agentmesh_core::validate_id(field, value)
}

/// Where webhook receivers may be when this process checks a subscription
/// itself (without a daemon): the daemon's `--webhook-allow-*` settings, from
/// their environment variables.
pub(crate) fn webhook_policy_from_env() -> agentmesh_core::webhook::UrlPolicy {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"));
    agentmesh_core::webhook::UrlPolicy {
        allow_http: set("AGENTMESH_WEBHOOK_ALLOW_HTTP"),
        allow_private: set("AGENTMESH_WEBHOOK_ALLOW_PRIVATE"),
    }
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
    fn a_bare_host_and_port_is_an_http_server_and_other_mistakes_say_what_to_write() {
        for (given, url) in [
            ("127.0.0.1:7433", "http://127.0.0.1:7433"),
            (" localhost:7433 ", "http://localhost:7433"),
            ("[::1]:7433", "http://[::1]:7433"),
            ("mesh.internal:8080/prefix", "http://mesh.internal:8080/prefix"),
            ("http://127.0.0.1:7433", "http://127.0.0.1:7433"),
            ("HTTPS://mesh.example", "HTTPS://mesh.example"),
        ] {
            assert_eq!(server_url(given).as_deref(), Ok(url), "{given}");
        }
        for bad in ["", "127.0.0.1", "localhost", "ftp://x", "7433", "host:port", "a b:1", "http://"] {
            let err = server_url(bad).unwrap_err();
            assert_eq!(err.field, "server", "{bad}");
            assert!(err.problem.ends_with("such as --server http://127.0.0.1:7433"), "{bad}: {err}");
        }
        let route = server_url("http://127.0.0.1:7433/v1").unwrap_err();
        assert!(route.problem.contains("root URL, http://127.0.0.1:7433/"), "{route}");
    }

    #[test]
    fn a_database_is_either_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let exists = |dir: &Path| StoreConfig::data_dir(dir).database_exists();
        assert!(!exists(dir.path()));
        assert!(!exists(&dir.path().join("typo")));
        std::fs::write(dir.path().join(LEGACY_DB_FILE_NAME), "").unwrap();
        assert!(exists(dir.path()));
        let message = NoDatabase { data_dir: dir.path().join("typo"), database_file: None }.to_string();
        assert!(message.starts_with("no database in ") && message.contains("typo"), "{message}");
    }

    #[test]
    fn blank_flags_name_the_field() {
        assert_eq!(required("sessionId", "  ").unwrap_err().field, "sessionId");
        assert_eq!(required("sessionId", " s1 ").unwrap(), "s1");
        assert_eq!(id("sessionId", "s\n1").unwrap_err().field, "sessionId");
        assert_eq!(id("mesh", " m ").unwrap(), "m");
    }
}
