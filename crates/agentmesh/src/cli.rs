//! The command line: every command, flag and help text, as clap derive types.
//!
//! This module only describes the grammar. It does not validate values the core
//! owns (modes, priorities, statuses are plain strings here, so the core's error
//! names the field), and it never touches the store; `commands` does both.

use std::path::PathBuf;
use std::time::Duration;

use agentmesh_api::wire::NotBeforeBody;
use clap::{ArgGroup, Args, Parser, Subcommand};

use crate::duration;

/// A durable coordination runtime for meshes of AI coding agents.
///
/// A coordinator enqueues tasks, workers claim and complete them, and every
/// decision is recorded in an append-only ledger.
#[derive(Debug, Parser)]
#[command(name = "agentmesh", version = VERSION, max_term_width = 100, after_help = EXAMPLES)]
pub(crate) struct Cli {
    /// Options every command accepts, before or after the subcommand.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// What `--version` prints after the name: the version and the commit it was built
/// from (`unknown` when it was built outside a git checkout; the daemon crate's
/// `build.rs` finds it, for `agentmesh_build_info` too).
pub(crate) const VERSION: &str = agentmesh_daemon::VERSION_LINE;

/// The help heading of the options every command accepts.
const GLOBAL: &str = "Global options";

/// Rewrites the usage line of a clap error so that the global options read as
/// what they are, optional (`[--data-dir <DIR>]`).
///
/// A missing-argument or conflict error shows the options the command line used
/// in its usage line, and clap counts a value taken from the environment
/// (`$AGENTMESH_HOME`, `$AGENTMESH_SERVER`, ...) as used: without this, a
/// forgotten `--session` under `export AGENTMESH_HOME=...` printed
/// `Usage: agentmesh claim --node <NODE> --session <SESSION> --data-dir <DIR>`,
/// as if `--data-dir` were required too.
pub(crate) fn optional_globals_in_usage(mut err: clap::Error) -> clap::Error {
    use clap::CommandFactory;
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::StyledStr(usage)) = err.get(ContextKind::Usage) else {
        return err;
    };
    let mut text = usage.to_string();
    let command = Cli::command();
    for arg in command.get_arguments().filter(|arg| arg.is_global_set()) {
        let Some(long) = arg.get_long() else { continue };
        let shown = match arg.get_value_names() {
            Some(names) if arg.get_action().takes_values() => {
                let names: Vec<&str> = names.iter().map(|name| name.as_str()).collect();
                format!("--{long} <{}>", names.join("> <"))
            }
            _ => format!("--{long}"),
        };
        text = bracketed(&text, &shown);
    }
    let style = command.get_styles().get_usage();
    let text = match text.strip_prefix("Usage:") {
        Some(rest) => format!("{}Usage:{}{rest}", style.render(), style.render_reset()),
        None => text,
    };
    err.insert(ContextKind::Usage, ContextValue::StyledStr(text.into()));
    err
}

/// `text` with every whole-word `option` (not already in brackets) put in
/// brackets.
fn bracketed(text: &str, option: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text;
    while let Some(at) = rest.find(option) {
        let (before, from) = rest.split_at(at);
        let after = &from[option.len()..];
        out.push_str(before);
        let starts_word = out.is_empty() || out.ends_with(' ');
        let ends_word = after.is_empty() || after.starts_with([' ', '\n']);
        if starts_word && ends_word {
            out.push('[');
            out.push_str(option);
            out.push(']');
        } else {
            out.push_str(option);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Shown after `agentmesh --help`.
const EXAMPLES: &str = "\
Examples:
  agentmesh task add 'fix the flaky login test' --tag os=linux --priority high
  agentmesh claim --node laptop --session worker-1 --json
  agentmesh complete --session worker-1 --summary 'fixed; added a regression test'
  agentmesh mission add auth --title 'Harden login' --goal 'no flaky auth tests'
  agentmesh task add 'fix the session timeout' --mission auth
  agentmesh mission show auth
  agentmesh events drain --daemon mach_A --run run-1
  agentmesh ledger tail --limit 10";

/// Options shared by every command.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Directory holding the database (mesh-runtime.db) [default: ~/.agentmesh]
    #[arg(long, global = true, value_name = "DIR", env = "AGENTMESH_HOME", help_heading = GLOBAL)]
    pub data_dir: Option<PathBuf>,
    /// The database: postgres://user@host:5432/db for a PostgreSQL installation
    /// that several daemons share, else sqlite:///path/to/mesh-runtime.db or a
    /// path; a SQLite URL given with --data-dir must name the data dir's
    /// mesh-runtime.db [default: <data-dir>/mesh-runtime.db]
    #[arg(long, global = true, value_name = "URL", env = "AGENTMESH_DATABASE_URL", help_heading = GLOBAL)]
    pub database_url: Option<String>,
    /// The PostgreSQL schema of the installation, created when missing (one
    /// database can hold several) [default: agentmesh]
    #[arg(long, global = true, value_name = "NAME", env = "AGENTMESH_DATABASE_SCHEMA", help_heading = GLOBAL)]
    pub database_schema: Option<String>,
    /// The mesh to work in; nothing crosses from one mesh to another
    #[arg(
        long,
        global = true,
        value_name = "ID",
        env = "AGENTMESH_MESH",
        default_value = "default",
        help_heading = GLOBAL
    )]
    pub mesh: String,
    /// Print exactly one JSON document on stdout (errors included)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,
    /// How long one request to the store may take, retries included, before it
    /// is answered with what held it up (busy, lock_timeout, unavailable; exit
    /// status 75); `serve` bounds every request it answers by it
    #[arg(
        long,
        global = true,
        value_name = "DURATION",
        env = "AGENTMESH_REQUEST_TIMEOUT",
        default_value = "5s",
        value_parser = duration::server_timeout,
        help_heading = GLOBAL
    )]
    pub request_timeout: std::time::Duration,
    /// What a write the embedded file acknowledged survives: full (it is on
    /// disk before the answer, so it survives a power loss) or
    /// process-crash-only (faster; a power loss may roll back the last writes,
    /// though never hand out an epoch or a ledger number twice). PostgreSQL
    /// follows its server's synchronous_commit
    #[arg(
        long,
        global = true,
        value_name = "MODE",
        env = "AGENTMESH_DURABILITY",
        default_value = "full",
        help_heading = GLOBAL
    )]
    pub durability: agentmesh_store::Durability,
    /// Talk to the daemon at this URL instead of opening the data dir:
    /// http://HOST:PORT (https:// for a daemon serving TLS), e.g.
    /// http://127.0.0.1:7433; a bare HOST:PORT means http://HOST:PORT
    #[arg(long, global = true, value_name = "URL", env = "AGENTMESH_SERVER", help_heading = GLOBAL)]
    pub server: Option<String>,
    /// Also trust the CA certificates in this PEM file when talking to an https
    /// daemon (one with a self-signed or private-CA certificate)
    #[arg(long, global = true, value_name = "FILE", env = "AGENTMESH_CA_CERT", help_heading = GLOBAL)]
    pub ca_cert: Option<PathBuf>,
    /// File holding the daemon's API token: read by clients, created (mode 0600) by
    /// `serve` when missing [default: $AGENTMESH_TOKEN for clients, else
    /// <data-dir>/daemon.token]
    #[arg(long, global = true, value_name = "FILE", help_heading = GLOBAL)]
    pub token_file: Option<PathBuf>,
    /// `--data-dir` was given on the command line (not only as `$AGENTMESH_HOME`);
    /// set by `main` from clap's matches.
    #[arg(skip)]
    pub data_dir_on_command_line: bool,
    /// `--server` was given on the command line (not only as `$AGENTMESH_SERVER`);
    /// set by `main` from clap's matches.
    #[arg(skip)]
    pub server_on_command_line: bool,
}

/// The top-level commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// See the whole job run once: an embedded daemon, a coordinator enqueueing
    /// dependent tasks, two workers doing them, a summary
    #[command(after_help = DEMO_EXAMPLES, after_long_help = DEMO_HELP)]
    Demo,
    /// Run the daemon: the HTTP API on a local address, until SIGINT or SIGTERM
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
    /// Enqueue, inspect, cancel and requeue tasks (the coordinator's side)
    #[command(subcommand, after_help = TASK_EXAMPLES)]
    Task(TaskCommand),
    /// Claim the next task for a worker session
    #[command(after_help = CLAIM_EXAMPLES)]
    Claim(ClaimArgs),
    /// Report that a worker session's task ended
    #[command(after_help = COMPLETE_EXAMPLES)]
    Complete(CompleteArgs),
    /// Extend a claimed task's lease, optionally with how the work is going (a
    /// percent and a one-line note, shown on the task and kept in the ledger)
    #[command(after_help = HEARTBEAT_EXAMPLES)]
    Heartbeat(HeartbeatArgs),
    /// Queue, drain, peek, watch, acknowledge and retract coordinator inbox events;
    /// list and requeue held ones
    #[command(subcommand, after_help = EVENTS_EXAMPLES)]
    Events(EventsCommand),
    /// Completion fingerprints still in force, the most recently recorded first: a
    /// second completion with one of these keys was (or will be) dropped as a duplicate
    #[command(after_help = FINGERPRINTS_EXAMPLES)]
    Fingerprints(FingerprintsArgs),
    /// Recent completion conflicts, newest first: two tasks that claimed one
    /// completion fingerprint
    #[command(after_help = CONFLICTS_EXAMPLES)]
    Conflicts(ConflictsArgs),
    /// The mesh at a glance: tasks, assignments, idle sessions, inbox, recent ledger
    #[command(after_help = STATUS_EXAMPLES)]
    Status,
    /// Read, export and import the append-only ledger
    #[command(subcommand, after_help = LEDGER_EXAMPLES)]
    Ledger(LedgerCommand),
    /// Create, list and inspect missions: named plans that group tasks
    #[command(subcommand, after_help = MISSION_EXAMPLES)]
    Mission(MissionCommand),
    /// List the worker sessions that reported themselves idle, or remove one's report
    #[command(after_help = SESSIONS_EXAMPLES)]
    Sessions(SessionsArgs),
    /// List the in-flight holds of acknowledged tasks, or set, show and release one
    #[command(after_help = HOLDS_EXAMPLES)]
    Holds(HoldsArgs),
    /// Send the mesh's ledger entries to HTTP receivers, signed: add, list, show,
    /// test, resume, skip and remove subscriptions
    #[command(subcommand, after_help = WEBHOOK_EXAMPLES)]
    Webhook(WebhookCommand),
    /// The archive of finished tasks and old ledger entries: its state, the
    /// mesh's own retention windows, and an export to a compressed file
    #[command(subcommand, after_help = ARCHIVE_EXAMPLES)]
    Archive(ArchiveCommand),
    /// Reserve path patterns of a repository before editing them: denied, with
    /// every conflicting holder, when another session holds an overlapping one
    #[command(after_help = RESERVE_EXAMPLES)]
    Reserve(ReserveArgs),
    /// Release a path reservation (its holder's session and epoch)
    #[command(after_help = RELEASE_EXAMPLES)]
    Release(ReleaseArgs),
    /// List the path reservations in force, renew one, or check paths against them
    #[command(after_help = RESERVATIONS_EXAMPLES)]
    Reservations(ReservationsArgs),
    /// Guard a repository's commits: a pre-commit hook that refuses a commit
    /// staging paths another session holds an exclusive reservation on
    #[command(subcommand, after_help = GUARD_EXAMPLES)]
    Guard(GuardCommand),
    /// List the messages still waiting to be delivered to worker sessions, or show
    /// and move one
    #[command(after_help = DELIVERIES_EXAMPLES)]
    Deliveries(DeliveriesArgs),
    /// List the direct dispatches not yet finished, or show, move, mark stale and
    /// remove them
    #[command(after_help = DISPATCHES_EXAMPLES)]
    Dispatches(DispatchesArgs),
    /// The rate guard's recent tool calls, per caller role
    #[command(name = "tool-calls", after_help = TOOL_CALLS_EXAMPLES)]
    ToolCalls(ToolCallsArgs),
    /// List the meshes the data dir holds, with their tasks by status, undrained
    /// events, ledger entries and missions
    #[command(after_help = MESHES_EXAMPLES)]
    Meshes,
    /// Turn any command into a worker: claim a task, run the command with it,
    /// report the outcome, repeat
    #[command(after_help = WORK_EXAMPLES, after_long_help = WORK_LONG_HELP)]
    Work(WorkArgs),
    /// Import an original ADHDev ledger directory (database, queue and inbox files)
    #[command(name = "import-adhdev", after_help = IMPORT_ADHDEV_EXAMPLES)]
    ImportAdhdev(ImportAdhdevArgs),
    /// Copy every mesh from one database to another (SQLite to PostgreSQL or back),
    /// losslessly; running it again copies only what is missing
    #[command(after_help = MIGRATE_EXAMPLES, after_long_help = MIGRATE_LONG_HELP)]
    Migrate(MigrateArgs),
    /// Copy the data dir's database to a file, consistently, while a daemon
    /// serves it; the copy is verified and its contents printed
    #[command(after_help = BACKUP_EXAMPLES, after_long_help = BACKUP_LONG_HELP)]
    Backup(BackupArgs),
    /// Install a backup as the data dir's database (with the daemon stopped),
    /// keeping the old database file beside it
    #[command(after_help = RESTORE_EXAMPLES, after_long_help = RESTORE_LONG_HELP)]
    Restore(RestoreArgs),
    /// Serve the MCP tools over stdin/stdout, for an agent's MCP configuration
    #[command(after_help = MCP_EXAMPLES)]
    Mcp(McpArgs),
    /// Print a shell completion script (bash, zsh, fish or powershell)
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions(CompletionsArgs),
    /// Print or write the manual pages, generated from this command line
    #[command(after_help = MAN_EXAMPLES)]
    Man(ManArgs),
    /// Print the OpenAPI 3.1 document of the daemon's HTTP API (what a daemon
    /// serves at /openapi.json), generated from its routes and types
    #[command(after_help = OPENAPI_EXAMPLES)]
    Openapi,
}

/// Shown after `agentmesh serve --help`.
const SERVE_EXAMPLES: &str = "\
Examples:
  agentmesh serve
  agentmesh --data-dir /srv/agentmesh serve --listen 127.0.0.1:8080 --log-format json
  agentmesh serve --listen 127.0.0.1:0 --token-file ./daemon.token";

/// Shown after `agentmesh task --help`.
const TASK_EXAMPLES: &str = "\
Examples:
  agentmesh task add 'fix the flaky login test' --id login --tag os=linux --priority high
  agentmesh task list --status pending
  agentmesh task list --status blocked --mission auth
  agentmesh task show login
  agentmesh task cancel login --reason 'fixed upstream'";

/// Shown after `agentmesh claim --help`.
const CLAIM_EXAMPLES: &str = "\
The claimed task's fencing epoch is printed as `(epoch N)`, and with --json as the
document's `epoch` field (also named `dispatchNonce`, the original's name): pass it to
`agentmesh complete --epoch N` when the task is done.

Examples:
  agentmesh claim --node laptop --session worker-1 --json
  agentmesh claim --node laptop --session worker-1 --tag os=linux --provider claude-cli --lease 30m";

/// Shown after `agentmesh complete --help`.
const COMPLETE_EXAMPLES: &str = "\
Examples:
  agentmesh complete --session worker-1 --epoch 1 --summary 'fixed; added a regression test'
  agentmesh complete --session worker-1 --task login --epoch 1 --failed --reason 'tests still red'
  agentmesh complete --session worker-1 --summary done --claim-next laptop --lease 10m";

/// Shown after `agentmesh heartbeat --help`.
const HEARTBEAT_EXAMPLES: &str = "\
Examples:
  agentmesh heartbeat --session worker-1 --task login --epoch 1
  agentmesh heartbeat --session worker-1 --task login --epoch 1 --percent 40 --note 'running the tests'
  agentmesh heartbeat --session worker-1 --task login --epoch 1 --lease 30m";

/// Shown after `agentmesh events --help`.
const EVENTS_EXAMPLES: &str = "\
Examples:
  agentmesh events drain --daemon mach_A --run run-1
  agentmesh events watch --daemon mach_A --run run-1 --timeout 2m
  agentmesh events push --event agent:ready --node laptop
  agentmesh events held --reason pending_retention_expired
  agentmesh events requeue-held --task login";

/// Shown after `agentmesh status --help`.
const STATUS_EXAMPLES: &str = "\
Examples:
  agentmesh status
  agentmesh --server http://127.0.0.1:7433 --mesh backend status --json";

/// Shown after `agentmesh ledger --help`.
const LEDGER_EXAMPLES: &str = "\
Examples:
  agentmesh ledger tail --limit 20
  agentmesh ledger slice --limit 500 --json
  agentmesh ledger slice --after-seq 0 --limit 500 --json
  agentmesh ledger export --output ledger.jsonl";

/// Shown after `agentmesh mission --help`.
const MISSION_EXAMPLES: &str = "\
Examples:
  agentmesh mission add auth --title 'Login rework' --goal 'SSO behind a flag'
  agentmesh mission list --status active
  agentmesh mission show auth";

/// Shown after `agentmesh sessions --help`.
const SESSIONS_EXAMPLES: &str = "\
Examples:
  agentmesh sessions
  agentmesh sessions --json
  agentmesh sessions remove --node laptop --session worker-1";

/// Shown after `agentmesh sessions remove --help`.
const SESSIONS_REMOVE_EXAMPLES: &str = "\
Examples:
  agentmesh sessions remove --node laptop --session worker-1";

/// Shown after `agentmesh reserve --help`.
const RESERVE_EXAMPLES: &str = "\
Patterns are relative to the repository root and anchored there: src/parser
is that directory and everything under it, src/*.rs the Rust files directly in
src, **/*.rs every Rust file. The scope defaults to the repository's
agentmesh.scope setting (git config agentmesh.scope github.com/acme/app), else
the git top level of the working directory, and names compare without case when
its core.ignorecase is true. A denied request exits with status 1 after naming every conflict.

Examples:
  agentmesh reserve src/parser 'tests/**/*.rs' --session w1 --node laptop --reason 'parser rewrite'
  agentmesh reserve docs --shared --ttl 2h --session w1 --node laptop
  agentmesh reserve src/lib.rs --wait 5m --session w2 --node desktop
  agentmesh reserve src --scope github.com/acme/app --session w1 --node laptop --json";

/// Shown after `agentmesh release --help`.
const RELEASE_EXAMPLES: &str = "\
Examples:
  agentmesh release 01a24f3c-0000-7000-8000-000000000001 --session w1 --epoch 1";

/// Shown after `agentmesh reservations --help`.
const RESERVATIONS_EXAMPLES: &str = "\
Examples:
  agentmesh reservations
  agentmesh reservations --all-scopes --json
  agentmesh reservations renew 01a24f3c-0000-7000-8000-000000000001 --session w1 --epoch 1 --ttl 1h
  agentmesh reservations check src/lib.rs docs/a.md --session w2";

/// Shown after `agentmesh reservations renew --help`.
const RESERVATIONS_RENEW_EXAMPLES: &str = "\
Examples:
  agentmesh reservations renew 01a24f3c-0000-7000-8000-000000000001 --session w1 --epoch 1
  agentmesh reservations renew 01a24f3c-0000-7000-8000-000000000001 --session w1 --epoch 1 --ttl 2h";

/// Shown after `agentmesh reservations check --help`.
const RESERVATIONS_CHECK_EXAMPLES: &str = "\
Examples:
  agentmesh reservations check src/lib.rs docs/a.md --session w2
  agentmesh reservations --scope github.com/acme/app check src/parser/mod.rs --json";

/// Shown after `agentmesh guard --help`.
const GUARD_EXAMPLES: &str = "\
The hook runs `agentmesh guard check` before every commit: it reads the staged
paths (both sides of a rename) and refuses the commit when another session's
exclusive reservation covers one. The committing session is $AGENTMESH_SESSION;
the reservations are found as every command finds them ($AGENTMESH_SERVER,
$AGENTMESH_HOME, $AGENTMESH_MESH, $AGENTMESH_TOKEN). AGENTMESH_GUARD=warn prints
the conflicts and lets the commit through, AGENTMESH_GUARD=off skips the check,
and `git commit --no-verify` skips every pre-commit hook.

Examples:
  agentmesh guard install
  agentmesh guard install --repo ~/src/app --json
  agentmesh guard check --session w2";

/// Shown after `agentmesh guard install --help`.
const GUARD_INSTALL_EXAMPLES: &str = "\
The hook goes where git looks for hooks: core.hooksPath when it is set, else
the repository's hooks directory. A pre-commit hook already there is kept, as
pre-commit.agentmesh-chained, and runs first: when it fails, the commit stops
there. Installing again changes nothing. The hook runs this agentmesh binary,
by its absolute path.

Examples:
  agentmesh guard install
  agentmesh guard install --repo ~/src/app
  agentmesh guard install --json";

/// Shown after `agentmesh guard check --help`.
const GUARD_CHECK_EXAMPLES: &str = "\
Exits 0 when no staged path is in another session's way (silently) or when the
reservations cannot be read in time (a daemon that does not answer, no
database: one line on stderr says so, and the commit goes ahead), 1 when a
staged path is reserved, after naming each path, its holder, the pattern and
the task. With AGENTMESH_GUARD=warn it names them and exits 0.

Examples:
  agentmesh guard check
  agentmesh guard check --session w2
  AGENTMESH_GUARD=warn agentmesh guard check --session w2 --json";

/// Shown after `agentmesh holds --help`.
const HOLDS_EXAMPLES: &str = "\
Examples:
  agentmesh holds
  agentmesh holds --json
  agentmesh holds set t-42 --reason acked
  agentmesh holds set t-42 --reason idle_after_ack --first-idle-since-ack 2025-01-01T00:00:00Z --read-failures 1
  agentmesh holds show t-42
  agentmesh holds release t-42";

/// Shown after `agentmesh webhook --help`.
const WEBHOOK_EXAMPLES: &str = "\
Examples:
  agentmesh webhook add https://ci.example.com/hooks/mesh --kind task_completed --kind task_failed
  agentmesh webhook add http://127.0.0.1:9000/hook --kind 'task_*' --tag ci --description 'CI bot'
  agentmesh webhook list
  agentmesh webhook show wh_0190f3a2 --json
  agentmesh webhook test wh_0190f3a2
  agentmesh webhook resume wh_0190f3a2
  agentmesh webhook skip wh_0190f3a2
  agentmesh webhook remove wh_0190f3a2

Each matching ledger entry is POSTed as JSON with the headers webhook-id (the
entry's id: the same on every retry), webhook-timestamp and webhook-signature
(v1,<base64 HMAC-SHA256 of id.timestamp.body keyed by the secret's bytes>). A
2xx moves the subscription on; failures are retried with backoff, then the
subscription is marked failing until it is resumed or the entry skipped.";

/// Shown after `agentmesh archive --help`.
const ARCHIVE_EXAMPLES: &str = "\
Examples:
  agentmesh archive status
  agentmesh archive retention --tasks 3d --ledger 90d
  agentmesh archive retention --events 2h
  agentmesh archive retention --clear
  agentmesh archive export --output backend-2026-12.jsonl.gz
  agentmesh archive export --output backend-2026-12.jsonl.gz --drop
  agentmesh archive run

The daemon moves finished tasks (after 7 days) and ledger entries (after 30)
to the archive, a file beside the database (a table set on PostgreSQL); task
show, the ledger and the dashboard still read them, marked archived. serve
--retain-tasks, --retain-ledger and --retain-events set the daemon's windows;
a mesh may set its own.";

/// `agentmesh archive ...`
#[derive(Debug, Subcommand)]
pub(crate) enum ArchiveCommand {
    /// How much the mesh's archive holds, where an export would end, and the
    /// mesh's own retention windows
    #[command(after_help = ARCHIVE_STATUS_EXAMPLES)]
    Status,
    /// Show, set or clear the mesh's own retention windows (recorded in the
    /// ledger); a window is a duration (7d, 36h, 90m) or off
    #[command(after_help = ARCHIVE_RETENTION_EXAMPLES)]
    Retention(ArchiveRetentionArgs),
    /// Write the mesh's archive out as gzip-compressed JSON lines (tasks, then
    /// ledger entries), and with --drop delete what was written from the
    /// archive once the file is safely on disk
    #[command(after_help = ARCHIVE_EXPORT_EXAMPLES)]
    Export(ArchiveExportArgs),
    /// Move what outlived the retention windows to the archive now, in every
    /// mesh of the data dir (a daemon does this every minute by itself)
    #[command(after_help = ARCHIVE_RUN_EXAMPLES)]
    Run(ArchiveRunArgs),
    /// Give the free pages of the database file and of its archive back to the
    /// file system, with the daemon stopped (a file made before agentmesh did
    /// this by itself is rewritten once, which needs about twice its size free)
    #[command(after_help = ARCHIVE_COMPACT_EXAMPLES)]
    Compact,
}

/// Shown after `agentmesh archive compact --help`.
const ARCHIVE_COMPACT_EXAMPLES: &str = "\
Examples:
  agentmesh --data-dir /srv/agentmesh archive compact
  agentmesh archive compact --json

Retention frees pages as it moves rows out, and a database made by this agentmesh
gives them back to the file system as it goes. One made before keeps them for reuse:
its file stops growing but does not shrink until it is compacted once.";

/// Shown after `agentmesh archive run --help`.
const ARCHIVE_RUN_EXAMPLES: &str = "\
Examples:
  agentmesh archive run
  agentmesh archive run --retain-tasks 1d --retain-ledger 7d --json

The windows are the daemon's (serve --retain-tasks, --retain-ledger); a mesh's own
windows (archive retention) still apply to it.";

/// `agentmesh archive run`
#[derive(Debug, Args)]
pub(crate) struct ArchiveRunArgs {
    /// How long finished tasks stay in the hot database (7d, 36h, off)
    #[arg(long, value_name = "WINDOW", env = "AGENTMESH_RETAIN_TASKS", default_value = "7d", value_parser = window("--retain-tasks"))]
    pub retain_tasks: agentmesh_core::retention::Window,
    /// How long ledger entries stay in the hot database (30d, off)
    #[arg(long, value_name = "WINDOW", env = "AGENTMESH_RETAIN_LEDGER", default_value = "30d", value_parser = window("--retain-ledger"))]
    pub retain_ledger: agentmesh_core::retention::Window,
}

/// Shown after `agentmesh archive status --help`.
const ARCHIVE_STATUS_EXAMPLES: &str = "\
Examples:
  agentmesh archive status
  agentmesh --mesh backend archive status --json";

/// Shown after `agentmesh archive retention --help`.
const ARCHIVE_RETENTION_EXAMPLES: &str = "\
Examples:
  agentmesh archive retention
  agentmesh archive retention --tasks 1d
  agentmesh archive retention --ledger off
  agentmesh archive retention --clear";

/// Shown after `agentmesh archive export --help`.
const ARCHIVE_EXPORT_EXAMPLES: &str = "\
Examples:
  agentmesh archive export --output archive.jsonl.gz
  agentmesh archive export --output archive.jsonl.gz --drop
  gzip -dc archive.jsonl.gz | head

Each line is {\"type\":\"task\",\"pos\":N,\"task\":{...}} or
{\"type\":\"ledger\",\"seq\":N,\"entry\":{...}}. --drop never deletes a ledger
entry a webhook subscription has not sent; a follower whose cursor falls
before what was dropped is answered cursor_expired.";

/// `agentmesh archive retention`
#[derive(Debug, Args)]
pub(crate) struct ArchiveRetentionArgs {
    /// How long finished tasks of this mesh stay in the hot database (7d,
    /// 36h, off)
    #[arg(long, value_name = "WINDOW", value_parser = window("--tasks"))]
    pub tasks: Option<agentmesh_core::retention::Window>,
    /// How long ledger entries of this mesh stay in the hot database (30d,
    /// off)
    #[arg(long, value_name = "WINDOW", value_parser = window("--ledger"))]
    pub ledger: Option<agentmesh_core::retention::Window>,
    /// How long drained inbox events of this mesh are kept, from when they were
    /// queued (1d, 2h, off); then deleted
    #[arg(long, value_name = "WINDOW", value_parser = window("--events"))]
    pub events: Option<agentmesh_core::retention::Window>,
    /// Go back to the daemon's windows
    #[arg(long, conflicts_with_all = ["tasks", "ledger", "events"])]
    pub clear: bool,
}

/// `agentmesh archive export`
#[derive(Debug, Args)]
pub(crate) struct ArchiveExportArgs {
    /// The file to write (gzip-compressed JSON lines); refused when it exists
    #[arg(long, short, value_name = "FILE")]
    pub output: PathBuf,
    /// Delete what was written from the archive, once the file is on disk
    #[arg(long)]
    pub drop: bool,
}

/// A value parser of a retention window, naming `flag` in its error.
fn window(flag: &'static str) -> impl Fn(&str) -> Result<agentmesh_core::retention::Window, String> + Clone {
    move |text| agentmesh_core::retention::Window::parse(flag, text).map_err(|e| e.problem)
}

/// `agentmesh webhook ...`
#[derive(Debug, Subcommand)]
pub(crate) enum WebhookCommand {
    /// Add a subscription; its signing secret is printed once
    #[command(after_help = WEBHOOK_ADD_EXAMPLES)]
    Add(WebhookAddArgs),
    /// List the mesh's subscriptions, with their state and cursor
    #[command(after_help = WEBHOOK_LIST_EXAMPLES)]
    List,
    /// Show one subscription with its delivery log (the last attempts)
    #[command(after_help = WEBHOOK_SHOW_EXAMPLES)]
    Show(WebhookIdArgs),
    /// Send a signed sample to a subscription's receiver and print how it went
    /// (its cursor does not move); exits 1 when the receiver did not take it
    #[command(after_help = WEBHOOK_TEST_EXAMPLES)]
    Test(WebhookIdArgs),
    /// Deliver again to a failing subscription, from the entry it is stuck on
    #[command(after_help = WEBHOOK_RESUME_EXAMPLES)]
    Resume(WebhookIdArgs),
    /// Pass the entry a subscription is stuck on without delivering it, and go on
    #[command(after_help = WEBHOOK_SKIP_EXAMPLES)]
    Skip(WebhookIdArgs),
    /// Remove a subscription
    #[command(after_help = WEBHOOK_REMOVE_EXAMPLES)]
    Remove(WebhookIdArgs),
}

/// Shown after `agentmesh webhook add --help`.
const WEBHOOK_ADD_EXAMPLES: &str = "\
Examples:
  agentmesh webhook add https://ci.example.com/hooks/mesh --kind task_completed --kind task_failed
  agentmesh webhook add http://127.0.0.1:9000/hook --kind 'task_*' --tag ci --description 'CI bot'
  agentmesh webhook add https://audit.example.com/in --from-start --json";

/// Shown after `agentmesh webhook list --help`.
const WEBHOOK_LIST_EXAMPLES: &str = "\
Examples:
  agentmesh webhook list
  agentmesh webhook list --json";

/// Shown after `agentmesh webhook show --help`.
const WEBHOOK_SHOW_EXAMPLES: &str = "\
Examples:
  agentmesh webhook show wh_0190f3a2
  agentmesh webhook show wh_0190f3a2 --json";

/// Shown after `agentmesh webhook test --help`.
const WEBHOOK_TEST_EXAMPLES: &str = "\
Examples:
  agentmesh webhook test wh_0190f3a2";

/// Shown after `agentmesh webhook resume --help`.
const WEBHOOK_RESUME_EXAMPLES: &str = "\
Examples:
  agentmesh webhook resume wh_0190f3a2";

/// Shown after `agentmesh webhook skip --help`.
const WEBHOOK_SKIP_EXAMPLES: &str = "\
Examples:
  agentmesh webhook skip wh_0190f3a2";

/// Shown after `agentmesh webhook remove --help`.
const WEBHOOK_REMOVE_EXAMPLES: &str = "\
Examples:
  agentmesh webhook remove wh_0190f3a2";

/// Arguments of `webhook add`.
#[derive(Debug, Args)]
pub(crate) struct WebhookAddArgs {
    /// The receiver: https://..., or http:// to a loopback host
    #[arg(value_name = "URL")]
    pub url: String,
    /// Send only this ledger kind (repeatable; a prefix with a star, e.g.
    /// 'task_*'); every kind without one
    #[arg(long = "kind", value_name = "KIND")]
    pub kinds: Vec<String>,
    /// Send only entries about a task carrying this tag (repeatable)
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// What it is for
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// The signing secret (whsec_ and base64 of 24 to 64 bytes); one is made
    /// when not given
    #[arg(long, value_name = "SECRET", env = "AGENTMESH_WEBHOOK_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// Send the mesh's whole ledger from its first entry, not only what comes next
    #[arg(long)]
    pub from_start: bool,
}

/// Arguments of the `webhook` commands that name one subscription.
#[derive(Debug, Args)]
pub(crate) struct WebhookIdArgs {
    /// The subscription's id (wh_...)
    #[arg(value_name = "ID")]
    pub id: String,
}

/// Shown after `agentmesh holds set --help`.
const HOLDS_SET_EXAMPLES: &str = "\
Examples:
  agentmesh holds set t-42 --reason acked
  agentmesh holds set t-42 --reason idle_after_ack --first-idle-since-ack 2025-01-01T00:00:00Z --read-failures 1";

/// Shown after `agentmesh holds show --help`.
const HOLDS_SHOW_EXAMPLES: &str = "\
Examples:
  agentmesh holds show t-42
  agentmesh holds show t-42 --json";

/// Shown after `agentmesh holds release --help`.
const HOLDS_RELEASE_EXAMPLES: &str = "\
Examples:
  agentmesh holds release t-42";

/// Shown after `agentmesh deliveries --help`.
const DELIVERIES_EXAMPLES: &str = "\
Examples:
  agentmesh deliveries
  agentmesh deliveries --session worker-1 --json
  agentmesh deliveries show dlv-1
  agentmesh deliveries mark dlv-1 acked";

/// Shown after `agentmesh deliveries show --help`.
const DELIVERY_SHOW_EXAMPLES: &str = "\
Examples:
  agentmesh deliveries show dlv-1
  agentmesh deliveries show dlv-1 --json";

/// Shown after `agentmesh deliveries mark --help`.
const DELIVERY_MARK_EXAMPLES: &str = "\
Examples:
  agentmesh deliveries mark dlv-1 delivered
  agentmesh deliveries mark dlv-1 acked
  agentmesh deliveries mark dlv-1 queued --attempt --error 'session busy'
  agentmesh deliveries mark dlv-1 failed --error 'session gone'";

/// Shown after `agentmesh dispatches --help`.
const DISPATCHES_EXAMPLES: &str = "\
Examples:
  agentmesh dispatches
  agentmesh --mesh backend dispatches --json
  agentmesh dispatches show login
  agentmesh dispatches mark completed --task login
  agentmesh dispatches mark-stale --older-than 1h
  agentmesh dispatches remove login signup";

/// Shown after `agentmesh dispatches show --help`.
const DISPATCH_SHOW_EXAMPLES: &str = "\
Examples:
  agentmesh dispatches show login
  agentmesh dispatches show login --json";

/// Shown after `agentmesh dispatches mark --help`.
const DISPATCH_MARK_EXAMPLES: &str = "\
Examples:
  agentmesh dispatches mark acked --task login
  agentmesh dispatches mark completed --task login
  agentmesh dispatches mark failed --session worker-1";

/// Shown after `agentmesh dispatches mark-stale --help`.
const DISPATCH_MARK_STALE_EXAMPLES: &str = "\
Examples:
  agentmesh dispatches mark-stale --older-than 1h
  agentmesh dispatches mark-stale --older-than 90s --json";

/// Shown after `agentmesh dispatches remove --help`.
const DISPATCH_REMOVE_EXAMPLES: &str = "\
Examples:
  agentmesh dispatches remove login
  agentmesh dispatches remove login signup --json";

/// Shown after `agentmesh fingerprints --help`.
const FINGERPRINTS_EXAMPLES: &str = "\
Examples:
  agentmesh fingerprints
  agentmesh fingerprints --task login
  agentmesh fingerprints --session worker-1 --limit 20 --json";

/// Shown after `agentmesh conflicts --help`.
const CONFLICTS_EXAMPLES: &str = "\
Examples:
  agentmesh conflicts
  agentmesh conflicts --task login
  agentmesh conflicts --session worker-1 --within 1d --json";

/// Shown after `agentmesh tool-calls --help`.
const TOOL_CALLS_EXAMPLES: &str = "\
Examples:
  agentmesh tool-calls
  agentmesh tool-calls --role coordinator
  agentmesh tool-calls --role worker --within 30s --limit 20 --json";

/// Shown after `agentmesh meshes --help`.
const MESHES_EXAMPLES: &str = "\
Examples:
  agentmesh meshes
  agentmesh --data-dir ~/adhdev-ledger meshes --json";

/// Shown after `agentmesh import-adhdev --help`.
const IMPORT_ADHDEV_EXAMPLES: &str = "\
Examples:
  agentmesh import-adhdev ~/.adhdev/ledger
  agentmesh --data-dir /srv/agentmesh import-adhdev /tmp/adhdev-ledger --json";

/// Shown after `agentmesh migrate -h`.
const MIGRATE_EXAMPLES: &str = "\
Examples:
  agentmesh migrate --from ~/.agentmesh --to postgres://mesh@db.internal:5432/mesh
  agentmesh --database-schema team_a migrate --from /srv/agentmesh --to postgres://db/mesh --json
  agentmesh migrate --from postgres://db/mesh --from-schema team_a --to /srv/agentmesh-copy";

/// Shown after `agentmesh migrate --help`.
const MIGRATE_LONG_HELP: &str = "\
Every mesh of the source is copied as stored: tasks with their status, epoch, lease,
assignment, dependencies and unknown fields; the ledger, whose entries keep their ids
and are appended in the source's order; inbox events, drained or not, with their
fingerprints, queue times and routing; missions; the scheduler cursor; and the runtime
records (direct dispatches, session deliveries, idle sessions, completion fingerprints
and conflicts, the tool-call log, coordinator presence). Nothing is recorded in the
ledger that the source did not hold.

A record the target already holds (by its id or key) is left as it is, so running the
command again copies nothing new, and a copy that was interrupted completes. A record
whose id the target keeps for another mesh (a SQLite file keeps task and mission ids
unique across its meshes) is not copied: it is counted and named as a conflict.
Nothing is written to the source beyond what opening it with this agentmesh does (a
schema upgrade, importing legacy queue files). Stop the daemons writing to the source
first: a later run copies the records added since, but a record already copied keeps
the state it was copied in (a task completed in the source afterwards stays pending in
the target).

Progress goes to stderr, per mesh and kind of record; the counts go to stdout when it
ends (one JSON document with --json). --data-dir, --database-url and --mesh are not
used; --database-schema names the schema of a PostgreSQL side that has no
--from-schema or --to-schema of its own.

Examples:
  agentmesh migrate --from ~/.agentmesh --to postgres://mesh@db.internal:5432/mesh
  agentmesh --database-schema team_a migrate --from /srv/agentmesh --to postgres://db/mesh --json
  agentmesh migrate --from postgres://db/mesh --from-schema team_a --to /srv/agentmesh-copy
  agentmesh migrate --from sqlite:///srv/old/mesh-runtime.db --to sqlite:///srv/new/mesh-runtime.db";

/// Shown after `agentmesh backup -h`.
const BACKUP_EXAMPLES: &str = "\
Examples:
  agentmesh backup /backups/mesh-2025-06-01.db
  agentmesh --data-dir /srv/agentmesh backup /backups/mesh.db --force --json";

/// Shown after `agentmesh backup --help`.
const BACKUP_LONG_HELP: &str = "\
The copy is one consistent snapshot of the database, taken while a daemon (or any
other agentmesh process) goes on writing to it: SQLite's online backup API copies the
file a few hundred pages at a time under one read transaction, so the copy holds every
write committed before it began and none after, and it ends however busy the writers
are. Writers are never blocked; the database's WAL grows by what they write meanwhile.

The copy is written beside DEST under a temporary name, as one self-contained file
(no -wal beside it), synced, then verified before it is renamed to DEST: SQLite's
integrity check, the schema version, and the tasks by mesh and status, ledger
entries, inbox events and missions, which must equal what the database held when the
copy began. What it holds is printed (one JSON document with --json); progress goes
to stderr for a copy that takes more than a second. An existing DEST is left alone
unless --force is given.

It works on the embedded SQLite database of --data-dir (or --database-url
sqlite://...), not through --server: run it on the daemon's machine. A PostgreSQL
installation is backed up with PostgreSQL's tools: pg_dump -n <schema> for a logical
copy, base backups with WAL archiving for point-in-time recovery.

Examples:
  agentmesh backup /backups/mesh-2025-06-01.db
  agentmesh --data-dir /srv/agentmesh backup /backups/mesh.db --force --json
  agentmesh restore /backups/mesh-2025-06-01.db --dry-run";

/// Shown after `agentmesh restore -h`.
const RESTORE_EXAMPLES: &str = "\
Examples:
  agentmesh restore /backups/mesh.db --dry-run
  agentmesh --data-dir /srv/agentmesh restore /backups/mesh.db";

/// Shown after `agentmesh restore --help`.
const RESTORE_LONG_HELP: &str = "\
BACKUP is verified first (SQLite's integrity check, agentmesh's tables, a schema
version this agentmesh knows; a newer one means upgrading agentmesh first), and
nothing is changed when it fails. Then the data dir's daemon lock is taken for the
whole restore, so no daemon starts meanwhile. The restore is refused, naming the
daemon, while one serves the data dir, and also while any other process (an agentmesh
mcp or work on the data dir) has the database open: stop them first.

The backup is copied into the data dir under a temporary name, synced and verified.
The old database is kept: it is moved aside, with its -wal and -shm, to
mesh-runtime.db.before-restore-<time>, before the copy is renamed into place. The
restored database gets a new ledger id (a follower paging the ledger by sequence
starts over), and its ledger numbers and claim epochs continue above the highest the
old database handed out, so a worker still holding a task from before the restore
cannot report it. Start the daemon again when it is done; delete the old file once
the restored data is confirmed.

With --dry-run, BACKUP is only verified and what it holds printed. PostgreSQL
installations are restored with pg_restore or from a base backup (PITR).

Examples:
  agentmesh restore /backups/mesh.db --dry-run
  agentmesh --data-dir /srv/agentmesh restore /backups/mesh.db
  agentmesh --data-dir /srv/agentmesh serve";

/// Shown after `agentmesh mcp --help`.
const MCP_EXAMPLES: &str = "\
Examples:
  agentmesh mcp
  agentmesh mcp --session worker-1
  agentmesh --server http://127.0.0.1:7433 mcp
  claude mcp add agentmesh -- agentmesh mcp";

/// Shown after `agentmesh completions --help`.
const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  agentmesh completions bash > ~/.local/share/bash-completion/completions/agentmesh
  agentmesh completions zsh > \"${fpath[1]}/_agentmesh\"
  agentmesh completions fish > ~/.config/fish/completions/agentmesh.fish
  agentmesh completions powershell >> $PROFILE";

/// Shown after `agentmesh openapi --help`.
const OPENAPI_EXAMPLES: &str = "\
No daemon is needed: the document is built into the binary.

Examples:
  agentmesh openapi > agentmesh-openapi.json
  curl -s http://127.0.0.1:7433/openapi.json | diff - <(agentmesh openapi)";

/// Shown after `agentmesh man --help`.
const MAN_EXAMPLES: &str = "\
Examples:
  agentmesh man | man -l -
  agentmesh man task add | man -l -
  agentmesh man --out ~/.local/share/man/man1";

/// Shown after `agentmesh demo -h`.
const DEMO_EXAMPLES: &str = "\
Examples:
  agentmesh demo
  agentmesh demo --json
  agentmesh demo --data-dir /tmp/mesh-demo
  agentmesh --data-dir /tmp/mesh-demo ledger tail";

/// Shown after `agentmesh demo --help`.
const DEMO_HELP: &str = "\
The demo starts a daemon on a free loopback port over a fresh temporary data dir
(removed at exit; with --data-dir the data stays there). As a coordinator it enqueues
a mission of five tasks, some depending on others, and starts two workers (`agentmesh
work` processes, each running a short shell command per task). It waits until the
coordinator has received every completion, each exactly once, then stops the workers
and the daemon and prints a summary: exit status 0 when all of that happened, 1 and
the reason when something did not. Progress goes to stderr; --json prints the summary
as one document. The demo runs a daemon of its own, so --server is refused.

Examples:
  agentmesh demo
  agentmesh demo --json
  agentmesh demo --data-dir /tmp/mesh-demo
  agentmesh --data-dir /tmp/mesh-demo ledger tail";

/// Shown after `agentmesh work -h`.
const WORK_EXAMPLES: &str = "\
Examples:
  agentmesh work --node laptop --session w1 -- claude -p '{message}'
  agentmesh work --node laptop --session w2 --tag os=linux --lease 30m -- sh -c 'make test'
  agentmesh work --node laptop --session w3 --once --json -- ./do-task.sh";

/// Shown after `agentmesh work --help`.
const WORK_LONG_HELP: &str = "\
The command gets the task's message on stdin and in $AGENTMESH_TASK_MESSAGE, with
$AGENTMESH_TASK_ID, $AGENTMESH_TASK_EPOCH and $AGENTMESH_MESH; `{message}` and `{id}`
in its arguments are replaced by the message and the task id. Exit status 0 completes
the task with the tail of the command's output as the summary; any other status fails
it. Ctrl-C stops taking work and waits for the running command (twice kills it).

Examples:
  agentmesh work --node laptop --session w1 -- claude -p '{message}'
  agentmesh work --node laptop --session w2 --tag os=linux --lease 30m -- sh -c 'make test'
  agentmesh work --node laptop --session w3 --once --json -- ./do-task.sh";

/// Arguments of `completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// Arguments of `man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write one page per command (agentmesh.1, agentmesh-task-add.1, ...) into this
    /// directory instead of printing one page
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub out: Option<PathBuf>,
    /// The command whose page to print, such as `task add` [default: agentmesh itself]
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Arguments of `work`.
#[derive(Debug, Args)]
pub(crate) struct WorkArgs {
    /// The node (machine or worktree) the worker runs on
    #[arg(long, value_name = "NODE")]
    pub node: String,
    /// The worker session claiming tasks
    #[arg(long, value_name = "SESSION")]
    pub session: String,
    /// A capability tag the node offers, such as os=linux (repeatable)
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// The session's provider type, such as claude-cli
    #[arg(long, value_name = "TYPE")]
    pub provider: Option<String>,
    /// Lease length, such as 90s, 10m or 1h (a bare number is seconds; at least 3s),
    /// renewed by heartbeats every third of it
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = duration::work_lease)]
    pub lease: Duration,
    /// Do one task, or none when there is nothing to claim, then exit
    #[arg(long)]
    pub once: bool,
    /// The command to run for each task, and its arguments
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Arguments of `import-adhdev`.
#[derive(Debug, Args)]
pub(crate) struct ImportAdhdevArgs {
    /// The ADHDev ledger directory (holding mesh-runtime.db or beads.db,
    /// <mesh>.queue.json and *.pending-events.jsonl files)
    #[arg(value_name = "LEDGER_DIR")]
    pub ledger_dir: PathBuf,
}

/// Arguments of `migrate`.
#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Where the meshes are: a data dir, sqlite:///path/to/mesh-runtime.db, or
    /// postgres://user@host:5432/db (it must hold a database; nothing is copied into it)
    #[arg(long, value_name = "DATA_DIR|URL")]
    pub from: String,
    /// Where they go: a data dir, a sqlite:// file URL or a postgres:// URL
    /// (created when missing)
    #[arg(long, value_name = "URL|DATA_DIR")]
    pub to: String,
    /// The PostgreSQL schema of --from [default: --database-schema, else agentmesh]
    #[arg(long, value_name = "NAME")]
    pub from_schema: Option<String>,
    /// The PostgreSQL schema of --to [default: --database-schema, else agentmesh]
    #[arg(long, value_name = "NAME")]
    pub to_schema: Option<String>,
    /// Records copied per transaction (at most this many are held in memory)
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub page_size: u32,
}

/// Arguments of `backup`.
#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    /// The file to write the backup to (its directory must exist)
    #[arg(value_name = "DEST")]
    pub dest: PathBuf,
    /// Replace DEST if it exists
    #[arg(long)]
    pub force: bool,
}

/// Arguments of `restore`.
#[derive(Debug, Args)]
pub(crate) struct RestoreArgs {
    /// The backup file to install (written by `agentmesh backup`, or any copy of
    /// an agentmesh database)
    #[arg(value_name = "BACKUP")]
    pub backup: PathBuf,
    /// Only verify BACKUP and print what it holds; change nothing
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `mcp`.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// Pin the agent session this server belongs to: events for a coordinator
    /// session go only to it, and worker tools act as it when called without a
    /// sessionId (without it, each process is a worker session of its own)
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
}

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (the bound address is printed)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7433")]
    pub listen: std::net::SocketAddr,
    /// Log line format on stderr (filtered by RUST_LOG, default info)
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Close a connection that has not sent a complete request head this long
    /// after it opened or began the request, or that pauses this long inside a
    /// request body (e.g. 10s, 500ms, 1m)
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::server_timeout)]
    pub header_timeout: std::time::Duration,
    /// Close a keep-alive connection that sends nothing this long after its last
    /// answer
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration::server_timeout)]
    pub idle_timeout: std::time::Duration,
    /// Serve at most N connections at once; more are answered 503 and closed at
    /// once [default: 4096, fewer if the open-file limit leaves less room]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// Start even while another daemon serves the data dir (both then run the
    /// lease reaper and the sweeps); without it, a second daemon refuses to start
    /// and names the first
    #[arg(long)]
    pub allow_second_daemon: bool,
    /// Serve HTTPS with the certificate chain in this PEM file (leaf first);
    /// needs --tls-key
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert's certificate; needs --tls-cert
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Let webhook subscriptions send over plain http to hosts that are not
    /// loopback
    #[arg(long, env = "AGENTMESH_WEBHOOK_ALLOW_HTTP")]
    pub webhook_allow_http: bool,
    /// Let webhook subscriptions send to private, link-local and other
    /// non-public addresses
    #[arg(long, env = "AGENTMESH_WEBHOOK_ALLOW_PRIVATE")]
    pub webhook_allow_private: bool,
    /// How long a webhook receiver may take to answer
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::server_timeout)]
    pub webhook_timeout: std::time::Duration,
    /// The delay before a failed webhook request is tried again; it doubles
    /// with each failure in a row, up to 10 minutes (less a random part)
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration::server_timeout)]
    pub webhook_retry: std::time::Duration,
    /// Failed requests in a row after which a webhook subscription is marked
    /// failing (it then waits for `webhook resume` or `webhook skip`)
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub webhook_attempts: u32,
    /// How long finished tasks stay in the hot database before they move to
    /// the archive (a duration such as 7d or 36h, or off); a mesh may set its
    /// own
    #[arg(long, value_name = "WINDOW", env = "AGENTMESH_RETAIN_TASKS", default_value = "7d", value_parser = window("--retain-tasks"))]
    pub retain_tasks: agentmesh_core::retention::Window,
    /// How long ledger entries stay in the hot database before they move to
    /// the archive (30d, or off); a mesh may set its own
    #[arg(long, value_name = "WINDOW", env = "AGENTMESH_RETAIN_LEDGER", default_value = "30d", value_parser = window("--retain-ledger"))]
    pub retain_ledger: agentmesh_core::retention::Window,
    /// How long drained inbox events are kept before they are deleted (the
    /// ledger holds the change each announced; 1d, or off)
    #[arg(long, value_name = "WINDOW", env = "AGENTMESH_RETAIN_EVENTS", default_value = "1d", value_parser = window("--retain-events"))]
    pub retain_events: agentmesh_core::retention::Window,
}

/// How `serve` writes its log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines
    Text,
    /// One JSON object per line
    Json,
}

/// `agentmesh task ...`
#[derive(Debug, Subcommand)]
pub(crate) enum TaskCommand {
    /// Enqueue a task
    #[command(after_help = TASK_ADD_EXAMPLES)]
    Add(Box<TaskAddArgs>),
    /// List the tasks of the mesh, oldest first
    #[command(after_help = TASK_LIST_EXAMPLES)]
    List(TaskListArgs),
    /// Show one task with every field
    #[command(after_help = TASK_SHOW_EXAMPLES)]
    Show(TaskShowArgs),
    /// Cancel a pending or assigned task
    #[command(after_help = TASK_CANCEL_EXAMPLES)]
    Cancel(TaskCancelArgs),
    /// Put a task back in the queue, spending one retry
    #[command(after_help = TASK_REQUEUE_EXAMPLES)]
    Requeue(TaskRequeueArgs),
    /// Change the pull priority of a pending or assigned task
    #[command(after_help = TASK_PRIORITY_EXAMPLES)]
    Priority(TaskPriorityArgs),
    /// Record a task already dispatched straight to a session: assigned to it,
    /// with its delivery confirmed (an id the mesh holds changes nothing)
    #[command(name = "record-dispatched", after_help = TASK_RECORD_DISPATCHED_EXAMPLES)]
    RecordDispatched(TaskRecordDispatchedArgs),
    /// Say whether a delivery of the task reached its session (delivered, acked
    /// or completed)
    #[command(after_help = TASK_DELIVERED_EXAMPLES)]
    Delivered(TaskShowArgs),
}

/// Shown after `agentmesh task record-dispatched --help`.
const TASK_RECORD_DISPATCHED_EXAMPLES: &str = "\
Examples:
  agentmesh task record-dispatched fix-login --node laptop --session worker-1 --message 'fix the login form'
  agentmesh task record-dispatched fix-login --node laptop --session worker-1 --message 'fix it' --mission auth --json";

/// Shown after `agentmesh task delivered --help`.
const TASK_DELIVERED_EXAMPLES: &str = "\
Examples:
  agentmesh task delivered fix-login
  agentmesh task delivered fix-login --json";

/// Shown after `agentmesh task priority --help`.
const TASK_PRIORITY_EXAMPLES: &str = "\
Examples:
  agentmesh task priority login high --reason 'blocks the release'
  agentmesh task priority notes low";

/// Shown after `agentmesh task add --help`.
const TASK_ADD_EXAMPLES: &str = "\
Examples:
  agentmesh task add 'fix the flaky login test' --tag os=linux --priority high
  agentmesh task add 'write the release notes' --id notes --depends-on login --mode validation
  agentmesh task add 'retry the nightly deploy' --not-before 2h --max-retries 3
  agentmesh task add 'fix the build' --coordinator-daemon mach_A --coordinator-run run-1";

/// Shown after `agentmesh task list --help`.
const TASK_LIST_EXAMPLES: &str = "\
Examples:
  agentmesh task list
  agentmesh task list --status pending --status assigned --json
  agentmesh task list --status blocked
  agentmesh task list --tag os=linux --node laptop --text login --limit 20
  agentmesh task list --session worker-1 --mission auth --offset 20 --limit 20";

/// Shown after `agentmesh task show --help`.
const TASK_SHOW_EXAMPLES: &str = "\
Examples:
  agentmesh task show login
  agentmesh task show login --json";

/// Shown after `agentmesh task cancel --help`.
const TASK_CANCEL_EXAMPLES: &str = "\
Examples:
  agentmesh task cancel login --reason 'fixed upstream'";

/// Shown after `agentmesh task requeue --help`.
const TASK_REQUEUE_EXAMPLES: &str = "\
Examples:
  agentmesh task requeue login --reason 'retry on another node'
  agentmesh task requeue login --force --max-retries 3";

/// Arguments of `task add`.
#[derive(Debug, Args)]
pub(crate) struct TaskAddArgs {
    /// The instruction for the worker
    pub message: String,
    /// Task id [default: a fresh UUID]
    #[arg(long)]
    pub id: Option<String>,
    /// Kind of work: code_change, validation, live_debug_readonly, launch_app or convergence
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Mark the task read-only, so it may run beside other work on a busy node
    #[arg(long)]
    pub readonly: bool,
    /// Only this node may claim the task
    #[arg(long, value_name = "NODE")]
    pub target_node: Option<String>,
    /// Only this worker session may claim the task
    #[arg(long, value_name = "SESSION")]
    pub target_session: Option<String>,
    /// A capability tag the claiming node must offer (repeatable)
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Pull priority: low, normal or high [default: normal]
    #[arg(long, value_name = "PRIORITY")]
    pub priority: Option<String>,
    /// Earliest claim time: a duration from now (90s, 10m, 2h), an ISO-8601 instant,
    /// or a bare number of milliseconds (an offset from now below one year, else
    /// epoch milliseconds)
    #[arg(long, value_name = "WHEN", value_parser = duration::not_before)]
    pub not_before: Option<NotBeforeBody>,
    /// A task that must complete first (repeatable; it may be enqueued later)
    #[arg(long = "depends-on", value_name = "ID")]
    pub depends_on: Vec<String>,
    /// The mission the task belongs to
    #[arg(long, value_name = "ID")]
    pub mission: Option<String>,
    /// How often the task may be requeued before it fails [default: 1]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_retries: Option<i64>,
    /// How hard the work is: easy, medium, difficult or freeform
    #[arg(long, value_name = "LEVEL")]
    pub difficulty: Option<String>,
    /// A path the task will touch, relative to the repository root (repeatable):
    /// its claim reserves them, and waits while another holder has them
    #[arg(long = "path", value_name = "PATTERN")]
    pub paths: Vec<String>,
    /// The repository of --path (default: the repository's `git config agentmesh.scope`,
    /// else the git top level of the working directory)
    #[arg(long, value_name = "SCOPE", requires = "paths")]
    pub paths_scope: Option<String>,
    /// The coordinator session that enqueues the task
    #[arg(long, value_name = "SESSION")]
    pub coordinator_session: Option<String>,
    /// The daemon of the coordinator that enqueues the task; its completion event
    /// is addressed there (without it the event is a broadcast)
    #[arg(long, value_name = "DAEMON_ID")]
    pub coordinator_daemon: Option<String>,
    /// The run id of the coordinator that enqueues the task
    #[arg(long, value_name = "RUN_ID")]
    pub coordinator_run: Option<String>,
}

/// Arguments of `task list`: the filters of the HTTP API's task listing; every
/// one given must match.
#[derive(Debug, Args)]
pub(crate) struct TaskListArgs {
    /// Only tasks with this status: pending, blocked (pending, held back by a
    /// failed dependency; pending lists these too), assigned, completed, failed or
    /// cancelled (repeatable) [default: every status]
    #[arg(long = "status", value_name = "STATUS")]
    pub statuses: Vec<String>,
    /// Only tasks requiring this capability tag, such as os=linux
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,
    /// Only tasks held by, or pinned to, this node
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Only tasks held by, or pinned to, this worker session
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Only tasks of this mission
    #[arg(long, value_name = "ID")]
    pub mission: Option<String>,
    /// Only tasks that depend on this task
    #[arg(long, value_name = "ID")]
    pub depends_on: Option<String>,
    /// Only tasks whose id or message contains this text (case-insensitive)
    #[arg(long, value_name = "TEXT")]
    pub text: Option<String>,
    /// Skip this many matching tasks first (to page with --limit) [default: 0]
    #[arg(long, value_name = "N")]
    pub offset: Option<u32>,
    /// List at most this many matching tasks, 1 to 1000 [default: every one]
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

/// Arguments of `task show`.
#[derive(Debug, Args)]
pub(crate) struct TaskShowArgs {
    /// The task id
    pub id: String,
}

/// Arguments of `task record-dispatched`.
#[derive(Debug, Args)]
pub(crate) struct TaskRecordDispatchedArgs {
    /// The task id
    pub id: String,
    /// The instruction text that was sent
    #[arg(long, value_name = "TEXT")]
    pub message: String,
    /// The node it was sent to
    #[arg(long, value_name = "NODE")]
    pub node: String,
    /// The session it was sent to
    #[arg(long, value_name = "SESSION")]
    pub session: String,
    /// The session's provider type
    #[arg(long, value_name = "PROVIDER")]
    pub provider: Option<String>,
    /// The mission the task belongs to
    #[arg(long, value_name = "MISSION")]
    pub mission: Option<String>,
    /// Kind of work: code_change, validation, live_debug_readonly, launch_app or convergence
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
}

/// Arguments of `task cancel`.
#[derive(Debug, Args)]
pub(crate) struct TaskCancelArgs {
    /// The task id
    pub id: String,
    /// Why the task is withdrawn
    #[arg(long)]
    pub reason: Option<String>,
}

/// Arguments of `task priority`.
#[derive(Debug, Args)]
pub(crate) struct TaskPriorityArgs {
    /// The task id
    pub id: String,
    /// The new priority: low, normal or high
    pub priority: String,
    /// Why it changes
    #[arg(long)]
    pub reason: Option<String>,
}

/// Arguments of `task requeue`.
#[derive(Debug, Args)]
pub(crate) struct TaskRequeueArgs {
    /// The task id
    pub id: String,
    /// Why the task goes back
    #[arg(long)]
    pub reason: Option<String>,
    /// Requeue even an assigned or completed task, ignoring the retry budget
    #[arg(long)]
    pub force: bool,
    /// Set a new retry budget for the task
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,
    /// Keep the task pinned to its target session (the pin is dropped by default)
    #[arg(long)]
    pub keep_session_pin: bool,
}

/// Arguments of `claim`.
#[derive(Debug, Args)]
pub(crate) struct ClaimArgs {
    /// The node (machine or worktree) the session runs on
    #[arg(long, value_name = "NODE")]
    pub node: String,
    /// The worker session asking for work
    #[arg(long, value_name = "SESSION")]
    pub session: String,
    /// A capability tag the node offers, such as os=linux (repeatable)
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// The session's provider type, such as claude-cli
    #[arg(long, value_name = "TYPE")]
    pub provider: Option<String>,
    /// At most this many tasks assigned at once to this provider on this node
    #[arg(long, value_name = "N")]
    pub max_parallel: Option<u32>,
    /// The node is a worktree clone (never takes convergence tasks)
    #[arg(long)]
    pub worktree: bool,
    /// Lease length, such as 90s, 10m or 1h (a bare number is seconds); the task is
    /// reclaimed when it runs out [default: 10m]
    #[arg(long, alias = "lease-secs", value_name = "DURATION", value_parser = duration::claim_lease)]
    pub lease: Option<Duration>,
    /// The class of the session's transcript, stamped on the task it claims
    /// (assignedTranscriptProfile; with --transcript-timing)
    #[arg(long, value_name = "CLASS", requires = "transcript_timing")]
    pub transcript_class: Option<String>,
    /// When the session's transcript is written (with --transcript-class)
    #[arg(long, value_name = "TIMING", requires = "transcript_class")]
    pub transcript_timing: Option<String>,
    /// The session emits PTY turn events (with --transcript-class)
    #[arg(long, requires = "transcript_class")]
    pub emits_pty_turn_events: bool,
    /// Take only tasks of this difficulty: easy, medium, difficult or freeform
    /// (repeatable); tasks without a difficulty are taken too [default: any]
    #[arg(long = "difficulty", value_name = "LEVEL")]
    pub difficulties: Vec<String>,
}

/// Arguments of `heartbeat`.
#[derive(Debug, Args)]
pub(crate) struct HeartbeatArgs {
    /// The worker session holding the task
    #[arg(long, value_name = "SESSION")]
    pub session: String,
    /// The task
    #[arg(long, value_name = "ID")]
    pub task: String,
    /// The epoch the claim returned (the N of `claimed ID (epoch N)`); a beat for
    /// an older epoch is refused: the task is no longer this session's
    #[arg(long, value_name = "N")]
    pub epoch: u64,
    /// The new lease from now, such as 90s, 10m or 1h (a bare number is seconds)
    /// [default: 10m]
    #[arg(long, value_name = "DURATION", value_parser = duration::claim_lease)]
    pub lease: Option<Duration>,
    /// How far along the work is, 0 to 100
    #[arg(long, value_name = "PERCENT")]
    pub percent: Option<u32>,
    /// What the worker is doing now: one line of at most 200 characters
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
}

/// Arguments of `complete`.
#[derive(Debug, Args)]
pub(crate) struct CompleteArgs {
    /// The reporting worker session
    #[arg(long, value_name = "SESSION")]
    pub session: String,
    /// The task [default: the session's assigned task]
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// The epoch the claim returned: the N of `claimed ID (epoch N)`, or the
    /// `epoch` field of `claim --json` (the same value as its `dispatchNonce`); a
    /// report for an older epoch is refused (the task was claimed again or
    /// cancelled since) [default: not checked]
    #[arg(long, value_name = "N")]
    pub epoch: Option<u64>,
    /// The worker's account of what was done
    #[arg(long, value_name = "TEXT")]
    pub summary: Option<String>,
    /// Report failure instead of success
    #[arg(long)]
    pub failed: bool,
    /// Why the task failed (with --failed) [default: "worker reported failure"]
    #[arg(long, requires = "failed")]
    pub reason: Option<String>,
    /// When the work ended by the worker's clock, ISO 8601 (such as
    /// 2026-01-01T12:00:00.000Z); without --task it picks among several assigned
    /// tasks of the session by their dispatch time [default: the daemon's time]
    #[arg(long, value_name = "TIME")]
    pub occurred_at: Option<String>,
    /// Then claim the session's next task on NODE, in the same transaction
    #[arg(long, value_name = "NODE")]
    pub claim_next: Option<String>,
    /// A capability tag the node offers, for the next claim (repeatable)
    #[arg(long = "tag", value_name = "TAG", requires = "claim_next")]
    pub tags: Vec<String>,
    /// The session's provider type, for the next claim
    #[arg(long, value_name = "TYPE", requires = "claim_next")]
    pub provider: Option<String>,
    /// Lease length of the next claim, such as 90s, 10m or 1h (a bare number is
    /// seconds) [default: 10m]
    #[arg(long, alias = "lease-secs", value_name = "DURATION", value_parser = duration::claim_lease, requires = "claim_next")]
    pub lease: Option<Duration>,
}

/// `agentmesh events ...`
#[derive(Debug, Subcommand)]
pub(crate) enum EventsCommand {
    /// Queue an event for a coordinator, from JSON or from flags
    #[command(after_help = PUSH_EXAMPLES)]
    Push(Box<EventsPushArgs>),
    /// Hand a coordinator its events, oldest first, and mark them drained
    #[command(after_help = DRAIN_EXAMPLES)]
    Drain(EventsDrainArgs),
    /// Show what a drain would hand out now, marking nothing
    #[command(after_help = PEEK_EXAMPLES)]
    Peek(EventsDrainArgs),
    /// Wait for the coordinator's next events and drain them the moment they land
    #[command(after_help = WATCH_EXAMPLES)]
    Watch(EventsWatchArgs),
    /// Mark events drained by id (after they were delivered some other way)
    #[command(after_help = ACK_EXAMPLES)]
    Ack(EventsAckArgs),
    /// Delete events by id, drained or not (their fingerprints take new events again)
    #[command(after_help = DELETE_EVENTS_EXAMPLES)]
    Delete(EventsAckArgs),
    /// Withdraw the undelivered mesh:dispatch_blocked events of a task
    #[command(after_help = RETRACT_EXAMPLES)]
    Retract(EventsRetractArgs),
    /// List the held events (quarantined by an enforce-mode drain, or never
    /// drained and moved to the ledger by retention) not yet put back
    #[command(after_help = HELD_EXAMPLES)]
    Held(HeldFilterArgs),
    /// Put held events back in the inbox, by id or by the filters of `events held`
    #[command(name = "requeue-held", after_help = REQUEUE_HELD_EXAMPLES)]
    RequeueHeld(RequeueHeldArgs),
}

/// The filters of `events held` and `events requeue-held`; every one given must match.
#[derive(Debug, Args)]
pub(crate) struct HeldFilterArgs {
    /// Held for this reason: pending_retention_expired,
    /// v2_enforce_unversioned_quarantined, v2_enforce_validation_failed_quarantined
    /// or pending_trim_dropped
    #[arg(long, value_name = "REASON")]
    pub reason: Option<String>,
    /// About this node (any of its id forms)
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// About this task
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// Of this event name, such as agent:generating_completed
    #[arg(long, value_name = "NAME")]
    pub event: Option<String>,
    /// Held at least this long ago: a duration (90s, 10m, 1h30m, 2d; a bare
    /// number is seconds)
    #[arg(long, value_name = "DURATION", value_parser = duration::age)]
    pub older_than: Option<Duration>,
}

/// Arguments of `events requeue-held`.
#[derive(Debug, Args)]
pub(crate) struct RequeueHeldArgs {
    /// Held entry ids, as `events held` prints them (instead of filters)
    #[arg(value_name = "ID")]
    pub ids: Vec<String>,
    /// Which held events, when no id is given
    #[command(flatten)]
    pub filter: HeldFilterArgs,
    /// Requeue every held event of the mesh
    #[arg(long)]
    pub all: bool,
}

/// Arguments of `fingerprints`.
#[derive(Debug, Args)]
pub(crate) struct FingerprintsArgs {
    /// Only fingerprints of this task's completions
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// Only fingerprints naming this session
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// At most this many, 1 to 1000 [default: 100]
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

/// Arguments of `conflicts`.
#[derive(Debug, Args)]
pub(crate) struct ConflictsArgs {
    /// Only conflicts this task took part in (on either side)
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// Only conflicts this session took part in (on either side)
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// How far back: a duration (90s, 10m, 1h30m, 2d; a bare number is seconds)
    /// [default: 1h]
    #[arg(long, value_name = "DURATION", value_parser = duration::age)]
    pub within: Option<Duration>,
}

/// Shown after `agentmesh events held --help`.
const HELD_EXAMPLES: &str = "\
Examples:
  agentmesh events held
  agentmesh events held --reason pending_retention_expired --older-than 10m
  agentmesh events held --task login --json";

/// Shown after `agentmesh events requeue-held --help`.
const REQUEUE_HELD_EXAMPLES: &str = "\
Examples:
  agentmesh events requeue-held evt-held-1 evt-held-2
  agentmesh events requeue-held --task login
  agentmesh events requeue-held --reason pending_retention_expired --older-than 1d
  agentmesh events requeue-held --all";

/// Shown after `agentmesh events drain --help`.
const DRAIN_EXAMPLES: &str = "\
Examples:
  agentmesh events drain --daemon mach_A --run run-1
  agentmesh events drain --daemon mach_A --run run-1 --only agent:generating_completed --limit 10 --json";

/// Shown after `agentmesh events peek --help`.
const PEEK_EXAMPLES: &str = "\
Examples:
  agentmesh events peek --daemon mach_A --run run-1
  agentmesh events peek --daemon mach_A --run run-1 --session coord-1 --json";

/// Shown after `agentmesh events watch --help`.
const WATCH_EXAMPLES: &str = "\
Examples:
  agentmesh events watch --daemon mach_A --run run-1
  agentmesh --server http://127.0.0.1:7433 events watch --daemon mach_A --run run-1 --timeout 5m --json";

/// Shown after `agentmesh events ack --help`.
const ACK_EXAMPLES: &str = "\
Examples:
  agentmesh events ack evt-1 evt-2";

/// Shown after `agentmesh events delete --help`.
const DELETE_EVENTS_EXAMPLES: &str = "\
Examples:
  agentmesh events delete evt-1 evt-2
  agentmesh events delete evt-1 --json";

/// Shown after `agentmesh events retract --help`.
const RETRACT_EXAMPLES: &str = "\
Examples:
  agentmesh events retract --task login";

/// Shown after `agentmesh events push --help`.
const PUSH_EXAMPLES: &str = "\
Examples:
  agentmesh events push --event agent:generating_completed --task t1 --summary 'done' \\
      --node laptop --to-daemon mach_A --to-run run-1
  agentmesh events push --file event.json
  some-producer | agentmesh events push --file -";

/// Arguments of `events push`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["file", "event"])))]
pub(crate) struct EventsPushArgs {
    /// Read the event's JSON from this file (`-` for stdin), in the original's shape;
    /// meshId defaults to --mesh and queuedAt to now
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Build the event from flags: its name, such as agent:generating_completed
    #[arg(long, value_name = "NAME")]
    pub event: Option<String>,
    /// The task the event is about (metadataEvent.taskId)
    #[arg(long, value_name = "ID", conflicts_with = "file")]
    pub task: Option<String>,
    /// The worker's summary (metadataEvent.finalSummary)
    #[arg(long, value_name = "TEXT", conflicts_with = "file")]
    pub summary: Option<String>,
    /// The node the event is about
    #[arg(long, value_name = "NODE", conflicts_with = "file")]
    pub node: Option<String>,
    /// The coordinator daemon the event is for (targetCoordinatorDaemonId)
    #[arg(long, value_name = "DAEMON_ID", conflicts_with = "file")]
    pub to_daemon: Option<String>,
    /// The coordinator session the event is for (targetCoordinatorSessionId)
    #[arg(long, value_name = "SESSION", conflicts_with = "file")]
    pub to_session: Option<String>,
    /// The run id of the coordinator the event is for [default: the daemon id]
    #[arg(long, value_name = "RUN_ID")]
    pub to_run: Option<String>,
    /// Who the event is for: unicast, broadcast or system [default: by event name]
    #[arg(long, value_name = "SCOPE")]
    pub scope: Option<String>,
    /// This machine's id: an event with no coordinator is stamped as dispatched by
    /// it (without one such an event stays unversioned)
    #[arg(long, value_name = "MACHINE_ID")]
    pub machine_id: Option<String>,
}

/// Arguments of `events drain` and `events peek`.
#[derive(Debug, Args)]
pub(crate) struct EventsDrainArgs {
    /// The draining coordinator's daemon (any of its id forms)
    #[arg(long, value_name = "DAEMON_ID")]
    pub daemon: String,
    /// The draining coordinator's run id
    #[arg(long, value_name = "RUN_ID")]
    pub run: String,
    /// The draining coordinator's session, for a CLI coordinator
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Another id this daemon answers to, such as its status instance id (repeatable)
    #[arg(long = "also-known-as", value_name = "ID")]
    pub also_known_as: Vec<String>,
    /// Only events with this name (repeatable); the others stay queued
    #[arg(long = "only", value_name = "EVENT", num_args = 1..)]
    pub only: Vec<String>,
    /// At most this many events [default: 100]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Hold back unversioned and invalid v2 events instead of delivering them
    /// [default: on when MESH_PROTOCOL_V2_ENFORCE is 1, true, on or yes]
    #[arg(long)]
    pub enforce: bool,
}

/// Arguments of `events ack`.
#[derive(Debug, Args)]
pub(crate) struct EventsAckArgs {
    /// Event ids, as drain and peek print them
    #[arg(value_name = "ID", required = true)]
    pub ids: Vec<String>,
}

/// Arguments of `events retract`.
#[derive(Debug, Args)]
pub(crate) struct EventsRetractArgs {
    /// The task whose blocked-dispatch alerts are withdrawn
    #[arg(long, value_name = "ID")]
    pub task: String,
}

/// `agentmesh events watch`
#[derive(Debug, Args)]
pub(crate) struct EventsWatchArgs {
    /// Who is waiting
    #[command(flatten)]
    pub drain: EventsDrainArgs,
    /// Give up after this long and print no events: 1s to 10m, such as 45s or 2m (a
    /// bare number is seconds)
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::watch_timeout)]
    pub timeout: Duration,
}

/// `agentmesh ledger ...`
#[derive(Debug, Subcommand)]
pub(crate) enum LedgerCommand {
    /// Print the newest entries, oldest first
    #[command(after_help = LEDGER_TAIL_EXAMPLES)]
    Tail(LedgerTailArgs),
    /// Read one page of the ledger slice protocol
    #[command(after_help = LEDGER_SLICE_EXAMPLES)]
    Slice(LedgerSliceArgs),
    /// Write every entry of the mesh as JSON lines, oldest first
    #[command(after_help = LEDGER_EXPORT_EXAMPLES)]
    Export(LedgerExportArgs),
    /// Add entries from a JSON-lines file (all or none); entries already present are skipped
    #[command(after_help = LEDGER_IMPORT_EXAMPLES)]
    Import(LedgerImportArgs),
}

/// Shown after `agentmesh ledger tail --help`.
const LEDGER_TAIL_EXAMPLES: &str = "\
Examples:
  agentmesh ledger tail --limit 50
  agentmesh ledger tail --kind task_failed --since 2025-01-01T00:00:00Z --json
  agentmesh ledger tail --task t1 --limit 50";

/// Shown after `agentmesh ledger slice --help`.
const LEDGER_SLICE_EXAMPLES: &str = "\
Examples:
  agentmesh ledger slice --limit 500 --json
  agentmesh ledger slice --after-seq 0 --limit 500 --json
  agentmesh ledger slice --after 0192f1c2-entry --kind task_claimed --json";

/// Shown after `agentmesh ledger export --help`.
const LEDGER_EXPORT_EXAMPLES: &str = "\
Examples:
  agentmesh ledger export > ledger.jsonl
  agentmesh --mesh backend ledger export --output backend.jsonl";

/// Shown after `agentmesh ledger import --help`.
const LEDGER_IMPORT_EXAMPLES: &str = "\
Examples:
  agentmesh ledger import ledger.jsonl
  agentmesh --server http://127.0.0.1:7433 ledger export | agentmesh ledger import -";

/// `agentmesh ledger export`
#[derive(Debug, Args)]
pub(crate) struct LedgerExportArgs {
    /// Write to this file instead of stdout
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `agentmesh ledger import`
#[derive(Debug, Args)]
pub(crate) struct LedgerImportArgs {
    /// The JSON-lines file (`-` for stdin), one entry per line, as `ledger export` writes
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

/// Arguments of `ledger tail`.
#[derive(Debug, Args)]
pub(crate) struct LedgerTailArgs {
    /// How many of the newest entries to print
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// Only entries of this kind, such as task_claimed (repeatable)
    #[arg(long = "kind", value_name = "KIND")]
    pub kinds: Vec<String>,
    /// Only entries at or after this ISO-8601 instant
    #[arg(long, value_name = "ISO")]
    pub since: Option<String>,
    /// Only entries about this task, read from its creation on, archived or not
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
}

/// Arguments of `ledger slice`.
#[derive(Debug, Args)]
pub(crate) struct LedgerSliceArgs {
    /// Start after this entry id (the previous page's next cursor), in
    /// (timestamp, id) order
    #[arg(long, value_name = "ID", conflicts_with = "after_seq")]
    pub after: Option<String>,
    /// Start after this sequence number (0: the first), in commit order, which
    /// never skips an entry committed late or imported with an old timestamp
    #[arg(long, value_name = "SEQ")]
    pub after_seq: Option<u64>,
    /// Page size, 1 to 500 [default: 100]
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// Only entries of this kind
    #[arg(long, value_name = "KIND")]
    pub kind: Option<String>,
    /// Only entries at or after this ISO-8601 instant
    #[arg(long, value_name = "ISO")]
    pub since: Option<String>,
}

/// `agentmesh mission ...`
#[derive(Debug, Subcommand)]
pub(crate) enum MissionCommand {
    /// Create a mission, or update the one with this id
    #[command(after_help = MISSION_ADD_EXAMPLES)]
    Add(MissionAddArgs),
    /// List the missions of the mesh with their progress, most recently updated first
    #[command(after_help = MISSION_LIST_EXAMPLES)]
    List(MissionListArgs),
    /// Show one mission, its progress and its tasks
    #[command(after_help = MISSION_SHOW_EXAMPLES)]
    Show(MissionShowArgs),
}

/// Shown after `agentmesh mission add --help`.
const MISSION_ADD_EXAMPLES: &str = "\
Examples:
  agentmesh mission add auth --title 'Login rework' --goal 'SSO behind a flag'
  agentmesh mission add auth --title 'Login rework' --status closed";

/// Shown after `agentmesh mission list --help`.
const MISSION_LIST_EXAMPLES: &str = "\
Examples:
  agentmesh mission list
  agentmesh mission list --status active --json";

/// Shown after `agentmesh mission show --help`.
const MISSION_SHOW_EXAMPLES: &str = "\
Examples:
  agentmesh mission show auth
  agentmesh mission show auth --json";

/// Arguments of `mission add`.
#[derive(Debug, Args)]
pub(crate) struct MissionAddArgs {
    /// The mission id; tasks join it with `task add --mission <ID>`
    pub id: String,
    /// Short title
    #[arg(long, value_name = "TEXT")]
    pub title: String,
    /// What done looks like [default: empty, or the current goal on an update]
    #[arg(long, value_name = "TEXT")]
    pub goal: Option<String>,
    /// Status word, such as active, paused or closed (lowercase letters and _)
    /// [default: active, or the current status on an update]
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    /// Where the mission came from; written once (a mission that has one keeps it)
    #[arg(long, value_name = "TEXT")]
    pub source: Option<String>,
}

/// Arguments of `mission list`.
#[derive(Debug, Args)]
pub(crate) struct MissionListArgs {
    /// Only missions with this status (repeatable) [default: every status]
    #[arg(long = "status", value_name = "STATUS")]
    pub statuses: Vec<String>,
}

/// Arguments of `mission show`.
#[derive(Debug, Args)]
pub(crate) struct MissionShowArgs {
    /// The mission id
    pub id: String,
}

/// Arguments of `deliveries`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct DeliveriesArgs {
    /// Without one, the waiting deliveries are listed
    #[command(subcommand)]
    pub command: Option<DeliveriesCommand>,
    /// Only deliveries addressed to this worker session
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
}

/// `agentmesh deliveries ...`
#[derive(Debug, Subcommand)]
pub(crate) enum DeliveriesCommand {
    /// Show one delivery with every field, whatever its status
    #[command(after_help = DELIVERY_SHOW_EXAMPLES)]
    Show(DeliveryShowArgs),
    /// Move a delivery to a status: delivered, acked (read by the session),
    /// completed, failed, ...; never backwards, never out of failed, expired or
    /// cancelled
    #[command(after_help = DELIVERY_MARK_EXAMPLES)]
    Mark(DeliveryMarkArgs),
}

/// Arguments of `deliveries show`.
#[derive(Debug, Args)]
pub(crate) struct DeliveryShowArgs {
    /// The delivery id
    pub id: String,
}

/// Arguments of `deliveries mark`.
#[derive(Debug, Args)]
pub(crate) struct DeliveryMarkArgs {
    /// The delivery id
    pub id: String,
    /// delivering, queued, delivered, acked, completed, failed, expired or cancelled
    pub status: String,
    /// The delivery error to record (cleared when absent)
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
    /// Count one more delivery attempt (a retry, which may move the status back)
    #[arg(long)]
    pub attempt: bool,
}

/// Arguments of `dispatches`.
#[derive(Debug, Args)]
pub(crate) struct DispatchesArgs {
    /// Without one, the dispatches not yet finished are listed
    #[command(subcommand)]
    pub command: Option<DispatchesCommand>,
}

/// `agentmesh dispatches ...`
#[derive(Debug, Subcommand)]
pub(crate) enum DispatchesCommand {
    /// Show the dispatch of one task with every field, whatever its status
    #[command(after_help = DISPATCH_SHOW_EXAMPLES)]
    Show(DispatchShowArgs),
    /// Move the dispatch of a task, or every open one of a session, to a status:
    /// dispatched, acked, completed, failed or stale (completed and failed never change)
    #[command(after_help = DISPATCH_MARK_EXAMPLES)]
    Mark(DispatchMarkArgs),
    /// Mark `dispatched` rows nobody acknowledged in time stale
    #[command(name = "mark-stale", after_help = DISPATCH_MARK_STALE_EXAMPLES)]
    MarkStale(DispatchStaleArgs),
    /// Forget the dispatches of these tasks
    #[command(after_help = DISPATCH_REMOVE_EXAMPLES)]
    Remove(DispatchRemoveArgs),
}

/// Arguments of `dispatches show`.
#[derive(Debug, Args)]
pub(crate) struct DispatchShowArgs {
    /// The dispatched task's id
    pub task: String,
}

/// Arguments of `dispatches mark`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["task", "session"])))]
pub(crate) struct DispatchMarkArgs {
    /// dispatched, acked, completed, failed or stale
    pub status: String,
    /// The dispatch of this task
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// Every open dispatch of this session
    #[arg(long, value_name = "SESSION", conflicts_with = "task")]
    pub session: Option<String>,
}

/// Arguments of `dispatches mark-stale`.
#[derive(Debug, Args)]
pub(crate) struct DispatchStaleArgs {
    /// Sent at least this long ago: a duration (90s, 10m, 1h30m, 2d; a bare number
    /// is seconds)
    #[arg(long, value_name = "DURATION", value_parser = duration::age)]
    pub older_than: Duration,
}

/// Arguments of `dispatches remove`.
#[derive(Debug, Args)]
pub(crate) struct DispatchRemoveArgs {
    /// The tasks whose dispatches go
    #[arg(value_name = "TASK", required = true)]
    pub tasks: Vec<String>,
}

/// Where a reservation command's repository scope comes from.
#[derive(Debug, Args)]
pub(crate) struct ScopeArgs {
    /// The repository scope (a repository id or root); default: the repository's
    /// `git config agentmesh.scope`, else the git top level of the working directory
    #[arg(long, value_name = "SCOPE")]
    pub scope: Option<String>,
    /// Compare names without case (default: the repository's core.ignorecase)
    #[arg(long)]
    pub ignore_case: bool,
}

/// Arguments of `reserve`.
#[derive(Debug, Args)]
pub(crate) struct ReserveArgs {
    /// Path patterns, relative to the repository root
    #[arg(value_name = "PATTERN", required = true)]
    pub patterns: Vec<String>,
    /// The holder's session
    #[arg(long, value_name = "SESSION")]
    pub session: String,
    /// The holder's node
    #[arg(long, value_name = "NODE")]
    pub node: String,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Shared: others may share the paths, none may take them exclusively
    #[arg(long)]
    pub shared: bool,
    /// Why, in a line
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// How long it lives unless renewed (default 1h; at most a week)
    #[arg(long, value_name = "DURATION", value_parser = duration::reservation_ttl)]
    pub ttl: Option<Duration>,
    /// When denied, wait up to this long for the conflict to clear (at most 10m)
    #[arg(long, value_name = "DURATION", value_parser = duration::watch_timeout)]
    pub wait: Option<Duration>,
}

/// Arguments of `release` and `reservations renew`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The reservation
    #[arg(value_name = "RESERVATION")]
    pub reservation: String,
    /// The holder's session
    #[arg(long, value_name = "SESSION")]
    pub session: String,
    /// The epoch the grant gave
    #[arg(long, value_name = "N")]
    pub epoch: u64,
}

/// Arguments of `reservations`.
#[derive(Debug, Args)]
pub(crate) struct ReservationsArgs {
    /// Without one, the reservations in force in the scope are listed
    #[command(subcommand)]
    pub command: Option<ReservationsCommand>,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// List every scope's reservations
    #[arg(long, conflicts_with = "scope")]
    pub all_scopes: bool,
}

/// `agentmesh reservations ...`
#[derive(Debug, Subcommand)]
pub(crate) enum ReservationsCommand {
    /// Extend a reservation, by its holder
    #[command(after_help = RESERVATIONS_RENEW_EXAMPLES)]
    Renew(RenewArgs),
    /// Say which paths another holder's exclusive reservation covers (exit
    /// status 1 when one does)
    #[command(after_help = RESERVATIONS_CHECK_EXAMPLES)]
    Check(CheckArgs),
}

/// Arguments of `reservations renew`.
#[derive(Debug, Args)]
pub(crate) struct RenewArgs {
    #[command(flatten)]
    pub fence: ReleaseArgs,
    /// How long from now (default: as long as it was last given)
    #[arg(long, value_name = "DURATION", value_parser = duration::reservation_ttl)]
    pub ttl: Option<Duration>,
}

/// Arguments of `reservations check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Paths relative to the repository root
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<String>,
    /// The session asking: its own reservations are not in its way
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `agentmesh guard ...`
#[derive(Debug, Subcommand)]
pub(crate) enum GuardCommand {
    /// Install the pre-commit hook in a repository, keeping (and first running)
    /// the pre-commit hook already there
    #[command(after_help = GUARD_INSTALL_EXAMPLES)]
    Install(GuardInstallArgs),
    /// Check the staged paths against the reservations of other sessions (what
    /// the hook runs)
    #[command(after_help = GUARD_CHECK_EXAMPLES)]
    Check(GuardCheckArgs),
}

/// Arguments of `guard install`.
#[derive(Debug, Args)]
pub(crate) struct GuardInstallArgs {
    /// A directory of the repository [default: the working directory]
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
}

/// Arguments of `guard check`.
#[derive(Debug, Args)]
pub(crate) struct GuardCheckArgs {
    /// The committing session: its own reservations are not in its way
    #[arg(long, value_name = "SESSION", env = "AGENTMESH_SESSION")]
    pub session: Option<String>,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// Arguments of `holds`.
#[derive(Debug, Args)]
pub(crate) struct HoldsArgs {
    /// Without one, the mesh's holds are listed in the order they were first held
    #[command(subcommand)]
    pub command: Option<HoldsCommand>,
}

/// `agentmesh holds ...`
#[derive(Debug, Subcommand)]
pub(crate) enum HoldsCommand {
    /// Hold a task in flight, or update its hold (the first held time is kept)
    #[command(after_help = HOLDS_SET_EXAMPLES)]
    Set(HoldSetArgs),
    /// Show the hold of one task
    #[command(after_help = HOLDS_SHOW_EXAMPLES)]
    Show(HoldTaskArgs),
    /// Release the hold of one task
    #[command(after_help = HOLDS_RELEASE_EXAMPLES)]
    Release(HoldTaskArgs),
}

/// Arguments of `holds set`.
#[derive(Debug, Args)]
pub(crate) struct HoldSetArgs {
    /// The held task
    #[arg(value_name = "TASK")]
    pub task: String,
    /// Why it is held (acked, idle_after_ack, ...)
    #[arg(long, value_name = "REASON")]
    pub reason: String,
    /// When its session was first seen idle since it acknowledged the task (ISO-8601)
    #[arg(long, value_name = "WHEN")]
    pub first_idle_since_ack: Option<String>,
    /// How many reads of the session failed so far
    #[arg(long, value_name = "N")]
    pub read_failures: Option<u32>,
}

/// Arguments of `holds show` and `holds release`.
#[derive(Debug, Args)]
pub(crate) struct HoldTaskArgs {
    /// The held task
    #[arg(value_name = "TASK")]
    pub task: String,
}

/// Arguments of `sessions`.
#[derive(Debug, Args)]
pub(crate) struct SessionsArgs {
    /// Without one, the idle sessions are listed
    #[command(subcommand)]
    pub command: Option<SessionsCommand>,
}

/// `agentmesh sessions ...`
#[derive(Debug, Subcommand)]
pub(crate) enum SessionsCommand {
    /// Forget a session's idle report (what a session shutting down does)
    #[command(after_help = SESSIONS_REMOVE_EXAMPLES)]
    Remove(SessionRemoveArgs),
}

/// Arguments of `sessions remove`.
#[derive(Debug, Args)]
pub(crate) struct SessionRemoveArgs {
    /// The node the session runs on
    #[arg(long, value_name = "NODE")]
    pub node: String,
    /// The session
    #[arg(long, value_name = "SESSION")]
    pub session: String,
}

/// Arguments of `tool-calls`.
#[derive(Debug, Args)]
pub(crate) struct ToolCallsArgs {
    /// Only calls of this caller role: coordinator, worker or unknown
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,
    /// How far back: a duration (90s, 10m; a bare number is seconds) [default:
    /// the log's 100s]
    #[arg(long, value_name = "DURATION", value_parser = duration::age)]
    pub within: Option<Duration>,
    /// List at most this many calls, 1 to 1000 [default: 100]
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The words of one shell command line, up to its first unquoted `|`, `>` or
    /// `<`: quotes group and are removed, a backslash escapes the next character.
    fn shell_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word: Option<String> = None;
        let mut chars = line.chars();
        let mut quote = None;
        while let Some(c) = chars.next() {
            match (quote, c) {
                (None, '|' | '>' | '<') => break,
                (None, c) if c.is_whitespace() => words.extend(word.take()),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    word.get_or_insert_with(String::new);
                }
                (Some(q), c) if c == q => quote = None,
                (Some('\''), c) => word.get_or_insert_with(String::new).push(c),
                (_, '\\') => word.get_or_insert_with(String::new).extend(chars.next()),
                (_, c) => word.get_or_insert_with(String::new).push(c),
            }
        }
        words.extend(word);
        words
    }

    /// The example command lines of a help text: each line starting with
    /// `agentmesh `, joined with the lines it continues onto (a trailing `\`).
    fn examples(help: &str) -> Vec<String> {
        let mut found = Vec::new();
        let mut lines = help.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if !line.starts_with("agentmesh ") {
                continue;
            }
            let mut example = line.to_owned();
            while let Some(stripped) = example.strip_suffix('\\') {
                example = format!("{stripped} {}", lines.next().unwrap_or_default());
            }
            found.push(example);
        }
        found
    }

    #[test]
    fn every_command_has_examples_and_every_example_parses() {
        fn walk(command: &clap::Command, path: &str, seen: &mut usize) {
            // `-h` shows the short text, `--help` the long one when there is one.
            let texts: Vec<String> = [command.get_after_help(), command.get_after_long_help()]
                .into_iter()
                .flatten()
                .map(ToString::to_string)
                .collect();
            assert!(!texts.is_empty(), "`{path} --help` has no examples");
            for text in &texts {
                let found = examples(text);
                assert!(!found.is_empty(), "`{path} --help` shows no example starting with `agentmesh `");
                for example in found {
                    if let Err(err) = Cli::try_parse_from(shell_words(&example)) {
                        panic!("the example of `{path}` does not parse: {example}\n{err}");
                    }
                }
            }
            *seen += 1;
            for sub in command.get_subcommands().filter(|sub| sub.get_name() != "help") {
                walk(sub, &format!("{path} {}", sub.get_name()), seen);
            }
        }
        let mut seen = 0;
        walk(&Cli::command(), "agentmesh", &mut seen);
        assert!(seen >= 35, "only {seen} commands were walked");
    }

    #[test]
    fn shell_words_follow_quotes_and_stop_at_redirections() {
        assert_eq!(shell_words("a 'b c' \"d\\\"e\" f\\ g | h"), ["a", "b c", "d\"e", "f g"]);
        assert_eq!(shell_words("x '' > out"), ["x", ""]);
        assert_eq!(examples("Examples:\n  agentmesh a \\\n      --b c\n  other"), ["agentmesh a  --b c"]);
    }

    #[test]
    fn usage_lines_show_global_options_in_brackets() {
        assert_eq!(
            bracketed("Usage: agentmesh claim --node <NODE> --data-dir <DIR>", "--data-dir <DIR>"),
            "Usage: agentmesh claim --node <NODE> [--data-dir <DIR>]"
        );
        assert_eq!(bracketed("a [--json] --json --jsonx", "--json"), "a [--json] [--json] --jsonx");
        // Options after the subcommand count as used, as values from the environment do.
        let err =
            Cli::try_parse_from(["agentmesh", "claim", "--node", "n", "--mesh", "m", "--data-dir", "d"])
                .unwrap_err();
        let usage = optional_globals_in_usage(err).render().to_string();
        assert!(usage.contains("--session <SESSION>"), "{usage}");
        assert!(usage.contains("[--data-dir <DIR>]") && usage.contains("[--mesh <ID>]"), "{usage}");
        assert!(!usage.contains(" --data-dir <DIR> "), "{usage}");
    }

    #[test]
    fn global_options_go_before_or_after_the_subcommand() {
        let before = Cli::try_parse_from(["agentmesh", "--json", "--mesh", "m", "task", "list"]).unwrap();
        let after = Cli::try_parse_from(["agentmesh", "task", "list", "--mesh", "m", "--json"]).unwrap();
        assert!(before.global.json && after.global.json);
        assert_eq!(before.global.mesh, "m");
        assert_eq!(after.global.mesh, "m");
    }

    #[test]
    fn durations_take_a_unit_and_refuse_zero() {
        use crate::duration::server_timeout;
        use std::time::Duration;
        assert_eq!(server_timeout("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(server_timeout("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(server_timeout("7"), Ok(Duration::from_secs(7)));
        assert_eq!(server_timeout("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(server_timeout("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["0s", "", "s", "10 parsecs", "-1s", "1.5s", "99999999999999999999h"] {
            assert!(server_timeout(bad).is_err(), "{bad:?} was accepted");
        }
        let err = Cli::try_parse_from(["agentmesh", "serve", "--header-timeout", "0s"]).unwrap_err();
        assert!(err.to_string().contains("--header-timeout"), "{err}");
    }
}
