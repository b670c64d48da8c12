//! The command line: every command, flag and help text, as clap derive types.
//!
//! This module only describes the grammar. It does not validate values the core
//! owns (modes, priorities, statuses are plain strings here, so the core's error
//! names the field), and it never touches the store; `commands` does both.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand};

/// A durable coordination runtime for meshes of AI coding agents.
///
/// A coordinator enqueues tasks, workers claim and complete them, and every
/// decision is recorded in an append-only ledger.
#[derive(Debug, Parser)]
#[command(name = "agentmesh", version, max_term_width = 100, after_long_help = EXAMPLES)]
pub struct Cli {
    /// Options every command accepts, before or after the subcommand.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The help heading of the options every command accepts.
const GLOBAL: &str = "Global options";

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
pub struct GlobalArgs {
    /// Directory holding the database (mesh-runtime.db) [default: ~/.agentmesh]
    #[arg(long, global = true, value_name = "DIR", env = "AGENTMESH_HOME", help_heading = GLOBAL)]
    pub data_dir: Option<PathBuf>,
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
    /// Talk to the daemon at this URL instead of opening the data dir
    /// (e.g. http://127.0.0.1:7433)
    #[arg(long, global = true, value_name = "URL", env = "AGENTMESH_SERVER", help_heading = GLOBAL)]
    pub server: Option<String>,
    /// File holding the daemon's API token: read by clients, created (mode 0600) by
    /// `serve` when missing [default: $AGENTMESH_TOKEN for clients, else
    /// <data-dir>/daemon.token]
    #[arg(long, global = true, value_name = "FILE", help_heading = GLOBAL)]
    pub token_file: Option<PathBuf>,
}

/// The top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: the HTTP API on a local address, until SIGINT or SIGTERM
    Serve(ServeArgs),
    /// Enqueue, inspect, cancel and requeue tasks (the coordinator's side)
    #[command(subcommand)]
    Task(TaskCommand),
    /// Claim the next task for a worker session
    Claim(ClaimArgs),
    /// Report that a worker session's task ended
    Complete(CompleteArgs),
    /// Queue, drain, peek, watch, acknowledge and retract coordinator inbox events;
    /// list and requeue held ones
    #[command(subcommand)]
    Events(EventsCommand),
    /// Read the completion fingerprints and conflicts that explain a deduplicated
    /// or conflicting completion
    #[command(subcommand)]
    Completions(CompletionsCommand),
    /// The mesh at a glance: tasks, assignments, idle sessions, inbox, recent ledger
    Status,
    /// Read, export and import the append-only ledger
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// Create, list and inspect missions: named plans that group tasks
    #[command(subcommand)]
    Mission(MissionCommand),
    /// List the worker sessions that reported themselves idle, or remove one's report
    Sessions(SessionsArgs),
    /// List the messages still waiting to be delivered to worker sessions, or show
    /// and move one
    Deliveries(DeliveriesArgs),
    /// List the direct dispatches not yet finished, or show, move, mark stale and
    /// remove them
    Dispatches(DispatchesArgs),
    /// The rate guard's recent tool calls, per caller role
    #[command(name = "tool-calls")]
    ToolCalls(ToolCallsArgs),
    /// Turn any command into a worker: claim a task, run the command with it,
    /// report the outcome, repeat
    #[command(after_long_help = WORK_EXAMPLES)]
    Work(WorkArgs),
    /// Import an original ADHDev ledger directory (database, queue and inbox files)
    #[command(name = "import-adhdev")]
    ImportAdhdev(ImportAdhdevArgs),
    /// Serve the MCP tools over stdin/stdout, for an agent's MCP configuration
    Mcp(McpArgs),
}

/// Shown after `agentmesh work --help`.
const WORK_EXAMPLES: &str = "\
The command gets the task's message on stdin and in $AGENTMESH_TASK_MESSAGE, with
$AGENTMESH_TASK_ID, $AGENTMESH_TASK_EPOCH and $AGENTMESH_MESH; `{message}` and `{id}`
in its arguments are replaced by the message and the task id. Exit status 0 completes
the task with the tail of the command's output as the summary; any other status fails
it. Ctrl-C stops taking work and waits for the running command (twice kills it).

Examples:
  agentmesh work --node laptop --session w1 -- claude -p '{message}'
  agentmesh work --node laptop --session w2 --tag os=linux -- sh -c 'make test'
  agentmesh work --node laptop --session w3 --once --json -- ./do-task.sh";

/// Arguments of `work`.
#[derive(Debug, Args)]
pub struct WorkArgs {
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
    /// Lease length in seconds, renewed by heartbeats every third of it
    #[arg(long, value_name = "SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u32).range(3..=4_294_967))]
    pub lease: u32,
    /// Do one task, or none when there is nothing to claim, then exit
    #[arg(long)]
    pub once: bool,
    /// The command to run for each task, and its arguments
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Arguments of `import-adhdev`.
#[derive(Debug, Args)]
pub struct ImportAdhdevArgs {
    /// The ADHDev ledger directory (holding mesh-runtime.db or beads.db,
    /// <mesh>.queue.json and *.pending-events.jsonl files)
    #[arg(value_name = "LEDGER_DIR")]
    pub ledger_dir: PathBuf,
}

/// Arguments of `mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The agent session this server belongs to: events for a coordinator session
    /// go only to it, and worker tools use it when called without a sessionId
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
}

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (the bound address is printed)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7433")]
    pub listen: std::net::SocketAddr,
    /// Log line format on stderr (filtered by RUST_LOG, default info)
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How `serve` writes its log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines
    Text,
    /// One JSON object per line
    Json,
}

/// `agentmesh task ...`
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Enqueue a task
    Add(Box<TaskAddArgs>),
    /// List the tasks of the mesh, oldest first
    List(TaskListArgs),
    /// Show one task with every field
    Show(TaskShowArgs),
    /// Cancel a pending or assigned task
    Cancel(TaskCancelArgs),
    /// Put a task back in the queue, spending one retry
    Requeue(TaskRequeueArgs),
}

/// Arguments of `task add`.
#[derive(Debug, Args)]
pub struct TaskAddArgs {
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
    /// Earliest claim time: an ISO-8601 instant, or milliseconds (an offset from now
    /// below one year, else epoch milliseconds)
    #[arg(long, value_name = "ISO_OR_MS")]
    pub not_before: Option<String>,
    /// A task that must complete first (repeatable; it may be enqueued later)
    #[arg(long = "depends-on", value_name = "ID")]
    pub depends_on: Vec<String>,
    /// The mission the task belongs to
    #[arg(long, value_name = "ID")]
    pub mission: Option<String>,
    /// How often the task may be requeued before it fails [default: 1]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_retries: Option<i64>,
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

/// Arguments of `task list`.
#[derive(Debug, Args)]
pub struct TaskListArgs {
    /// Only tasks with this status: pending, assigned, completed, failed or cancelled
    /// (repeatable) [default: every status]
    #[arg(long = "status", value_name = "STATUS")]
    pub statuses: Vec<String>,
}

/// Arguments of `task show`.
#[derive(Debug, Args)]
pub struct TaskShowArgs {
    /// The task id
    pub id: String,
}

/// Arguments of `task cancel`.
#[derive(Debug, Args)]
pub struct TaskCancelArgs {
    /// The task id
    pub id: String,
    /// Why the task is withdrawn
    #[arg(long)]
    pub reason: Option<String>,
}

/// Arguments of `task requeue`.
#[derive(Debug, Args)]
pub struct TaskRequeueArgs {
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
pub struct ClaimArgs {
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
    /// Lease length in seconds; the task is reclaimed when it runs out
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u32).range(1..))]
    pub lease_secs: Option<u32>,
}

/// Arguments of `complete`.
#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// The reporting worker session
    #[arg(long, value_name = "SESSION")]
    pub session: String,
    /// The task [default: the session's assigned task]
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// The epoch the claim returned; a report for an older epoch is refused
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
    /// Then claim the session's next task on NODE, in the same transaction
    #[arg(long, value_name = "NODE")]
    pub claim_next: Option<String>,
    /// A capability tag the node offers, for the next claim (repeatable)
    #[arg(long = "tag", value_name = "TAG", requires = "claim_next")]
    pub tags: Vec<String>,
    /// The session's provider type, for the next claim
    #[arg(long, value_name = "TYPE", requires = "claim_next")]
    pub provider: Option<String>,
    /// Lease length in seconds of the next claim
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u32).range(1..), requires = "claim_next")]
    pub lease_secs: Option<u32>,
}

/// `agentmesh events ...`
#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Queue an event for a coordinator, from JSON or from flags
    #[command(after_long_help = PUSH_EXAMPLES)]
    Push(Box<EventsPushArgs>),
    /// Hand a coordinator its events, oldest first, and mark them drained
    Drain(EventsDrainArgs),
    /// Show what a drain would hand out now, marking nothing
    Peek(EventsDrainArgs),
    /// Wait for the coordinator's next events and drain them the moment they land
    Watch(EventsWatchArgs),
    /// Mark events drained by id (after they were delivered some other way)
    Ack(EventsAckArgs),
    /// Withdraw the undelivered mesh:dispatch_blocked events of a task
    Retract(EventsRetractArgs),
    /// List the held events (quarantined by an enforce-mode drain, or never
    /// drained and moved to the ledger by retention) not yet put back
    Held(HeldFilterArgs),
    /// Put held events back in the inbox, by id or by the filters of `events held`
    #[command(name = "requeue-held")]
    RequeueHeld(RequeueHeldArgs),
}

/// The filters of `events held` and `events requeue-held`; every one given must match.
#[derive(Debug, Args)]
pub struct HeldFilterArgs {
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
    /// Held at least this long ago: seconds, or a number with s, m, h or d (10m)
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub older_than: Option<u64>,
}

/// Arguments of `events requeue-held`.
#[derive(Debug, Args)]
pub struct RequeueHeldArgs {
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

/// An age or a span: whole seconds, or a number followed by s, m, h or d.
pub fn parse_age(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(format!("{text:?} is not an age (use seconds, or a number with s, m, h or d)")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not an age (use seconds, or a number with s, m, h or d)"))
}

/// `agentmesh completions ...`
#[derive(Debug, Subcommand)]
pub enum CompletionsCommand {
    /// Completion fingerprints still in force, the most recently recorded first: a
    /// second completion with one of these keys was (or will be) dropped as a duplicate
    Fingerprints(FingerprintsArgs),
    /// Recent completion conflicts, newest first: two tasks that claimed one
    /// completion fingerprint
    Conflicts(ConflictsArgs),
}

/// Arguments of `completions fingerprints`.
#[derive(Debug, Args)]
pub struct FingerprintsArgs {
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

/// Arguments of `completions conflicts`.
#[derive(Debug, Args)]
pub struct ConflictsArgs {
    /// Only conflicts this task took part in (on either side)
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// Only conflicts this session took part in (on either side)
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// How far back: seconds, or a number with s, m, h or d [default: 1h]
    #[arg(long, value_name = "SPAN", value_parser = parse_age)]
    pub within: Option<u64>,
}

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
pub struct EventsPushArgs {
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
pub struct EventsDrainArgs {
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
pub struct EventsAckArgs {
    /// Event ids, as drain and peek print them
    #[arg(value_name = "ID", required = true)]
    pub ids: Vec<String>,
}

/// Arguments of `events retract`.
#[derive(Debug, Args)]
pub struct EventsRetractArgs {
    /// The task whose blocked-dispatch alerts are withdrawn
    #[arg(long, value_name = "ID")]
    pub task: String,
}

/// `agentmesh events watch`
#[derive(Debug, Args)]
pub struct EventsWatchArgs {
    /// Who is waiting
    #[command(flatten)]
    pub drain: EventsDrainArgs,
    /// Give up after this many seconds and print no events (at most 600)
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub timeout: u64,
}

/// `agentmesh ledger ...`
#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Print the newest entries, oldest first
    Tail(LedgerTailArgs),
    /// Read one page of the ledger slice protocol
    Slice(LedgerSliceArgs),
    /// Write every entry of the mesh as JSON lines, oldest first
    Export(LedgerExportArgs),
    /// Add entries from a JSON-lines file (all or none); entries already present are skipped
    Import(LedgerImportArgs),
}

/// `agentmesh ledger export`
#[derive(Debug, Args)]
pub struct LedgerExportArgs {
    /// Write to this file instead of stdout
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `agentmesh ledger import`
#[derive(Debug, Args)]
pub struct LedgerImportArgs {
    /// The JSON-lines file (`-` for stdin), one entry per line, as `ledger export` writes
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

/// Arguments of `ledger tail`.
#[derive(Debug, Args)]
pub struct LedgerTailArgs {
    /// How many of the newest entries to print
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// Only entries of this kind, such as task_claimed (repeatable)
    #[arg(long = "kind", value_name = "KIND")]
    pub kinds: Vec<String>,
    /// Only entries at or after this ISO-8601 instant
    #[arg(long, value_name = "ISO")]
    pub since: Option<String>,
}

/// Arguments of `ledger slice`.
#[derive(Debug, Args)]
pub struct LedgerSliceArgs {
    /// Start after this entry id (the previous page's next cursor)
    #[arg(long, value_name = "ID")]
    pub after: Option<String>,
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
pub enum MissionCommand {
    /// Create a mission, or update the one with this id
    Add(MissionAddArgs),
    /// List the missions of the mesh with their progress, most recently updated first
    List(MissionListArgs),
    /// Show one mission, its progress and its tasks
    Show(MissionShowArgs),
}

/// Arguments of `mission add`.
#[derive(Debug, Args)]
pub struct MissionAddArgs {
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
}

/// Arguments of `mission list`.
#[derive(Debug, Args)]
pub struct MissionListArgs {
    /// Only missions with this status (repeatable) [default: every status]
    #[arg(long = "status", value_name = "STATUS")]
    pub statuses: Vec<String>,
}

/// Arguments of `mission show`.
#[derive(Debug, Args)]
pub struct MissionShowArgs {
    /// The mission id
    pub id: String,
}

/// Arguments of `deliveries`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DeliveriesArgs {
    /// Without one, the waiting deliveries are listed
    #[command(subcommand)]
    pub command: Option<DeliveriesCommand>,
    /// Only deliveries addressed to this worker session
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
}

/// `agentmesh deliveries ...`
#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// Show one delivery with every field, whatever its status
    Show(DeliveryShowArgs),
    /// Move a delivery to a status: delivered, acked (read by the session),
    /// completed, failed, ...; never backwards, never out of failed, expired or
    /// cancelled
    Mark(DeliveryMarkArgs),
}

/// Arguments of `deliveries show`.
#[derive(Debug, Args)]
pub struct DeliveryShowArgs {
    /// The delivery id
    pub id: String,
}

/// Arguments of `deliveries mark`.
#[derive(Debug, Args)]
pub struct DeliveryMarkArgs {
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
pub struct DispatchesArgs {
    /// Without one, the dispatches not yet finished are listed
    #[command(subcommand)]
    pub command: Option<DispatchesCommand>,
}

/// `agentmesh dispatches ...`
#[derive(Debug, Subcommand)]
pub enum DispatchesCommand {
    /// Show the dispatch of one task with every field, whatever its status
    Show(DispatchShowArgs),
    /// Move the dispatch of a task, or every open one of a session, to a status:
    /// dispatched, acked, completed, failed or stale (completed and failed never change)
    Mark(DispatchMarkArgs),
    /// Mark `dispatched` rows nobody acknowledged in time stale
    #[command(name = "mark-stale")]
    MarkStale(DispatchStaleArgs),
    /// Forget the dispatches of these tasks
    Remove(DispatchRemoveArgs),
}

/// Arguments of `dispatches show`.
#[derive(Debug, Args)]
pub struct DispatchShowArgs {
    /// The dispatched task's id
    pub task: String,
}

/// Arguments of `dispatches mark`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["task", "session"])))]
pub struct DispatchMarkArgs {
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
pub struct DispatchStaleArgs {
    /// Sent at least this long ago: seconds, or a number with s, m, h or d (1h)
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub older_than: u64,
}

/// Arguments of `dispatches remove`.
#[derive(Debug, Args)]
pub struct DispatchRemoveArgs {
    /// The tasks whose dispatches go
    #[arg(value_name = "TASK", required = true)]
    pub tasks: Vec<String>,
}

/// Arguments of `sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// Without one, the idle sessions are listed
    #[command(subcommand)]
    pub command: Option<SessionsCommand>,
}

/// `agentmesh sessions ...`
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Forget a session's idle report (what a session shutting down does)
    Remove(SessionRemoveArgs),
}

/// Arguments of `sessions remove`.
#[derive(Debug, Args)]
pub struct SessionRemoveArgs {
    /// The node the session runs on
    #[arg(long, value_name = "NODE")]
    pub node: String,
    /// The session
    #[arg(long, value_name = "SESSION")]
    pub session: String,
}

/// Arguments of `tool-calls`.
#[derive(Debug, Args)]
pub struct ToolCallsArgs {
    /// Only calls of this caller role: coordinator, worker or unknown
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,
    /// How far back: seconds, or a number with s, m, h or d [default: the log's
    /// 100 s]
    #[arg(long, value_name = "SPAN", value_parser = parse_age)]
    pub within: Option<u64>,
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

    #[test]
    fn ages_take_seconds_or_a_unit() {
        assert_eq!(parse_age("90"), Ok(90));
        assert_eq!(parse_age("10m"), Ok(600));
        assert_eq!(parse_age("2h"), Ok(7_200));
        assert_eq!(parse_age("1d"), Ok(86_400));
        assert!(parse_age("10 minutes").is_err());
        assert!(parse_age("m").is_err());
        assert!(parse_age("-5").is_err());
    }

    #[test]
    fn global_options_go_before_or_after_the_subcommand() {
        let before = Cli::try_parse_from(["agentmesh", "--json", "--mesh", "m", "task", "list"]).unwrap();
        let after = Cli::try_parse_from(["agentmesh", "task", "list", "--mesh", "m", "--json"]).unwrap();
        assert!(before.global.json && after.global.json);
        assert_eq!(before.global.mesh, "m");
        assert_eq!(after.global.mesh, "m");
    }
}
