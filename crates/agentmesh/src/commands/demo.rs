//! `agentmesh demo`: the whole job, run once where it can be watched.
//!
//! In one process it starts the daemon (`agentmesh_daemon::serve`) on a free
//! loopback port over a temporary data dir (or `--data-dir`), and acts as a
//! coordinator through the HTTP API (`RemoteMesh`): it records a mission and
//! enqueues its five tasks in one batch, some depending on others, stamped with a
//! fresh coordinator run. Two workers run as child processes of this same binary
//! (`agentmesh work`, each on a node of its own), each doing every task it claims
//! with a short shell command. The coordinator watches its inbox until each task's
//! completion has arrived, checking that none arrives twice and that nothing of its
//! own is left queued afterwards; then the workers are stopped with SIGTERM (they
//! finish cleanly and print what they did, which is checked against the events) and
//! the daemon is shut down.
//!
//! Progress goes to stderr as it happens; the summary goes to stdout (one JSON
//! document with `--json`). Anything that does not happen as it should (a task
//! that fails, a completion seen twice or never, a worker that dies) ends the demo
//! with an error naming it, after the workers and the daemon were stopped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use agentmesh_api::wire::{BatchEnqueueBody, EnqueueBody, MissionBody};
use agentmesh_api::{MeshApi, RemoteMesh};
use agentmesh_core::InvalidInput;
use agentmesh_daemon::{ApiToken, AppState, TOKEN_FILE_NAME};
use agentmesh_mcp::identity::Identity;
use anyhow::{Context as _, bail};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::output::{self, Output};

/// The mission the demo's tasks belong to.
const MISSION: &str = "demo";

/// One task of the demo's plan.
struct PlannedTask {
    /// Its name in the batch, which `depends_on` refers to.
    reference: &'static str,
    message: &'static str,
    depends_on: &'static [&'static str],
}

/// The plan: one task first, two that can run side by side after it, and two more
/// in a chain after both.
const PLAN: [PlannedTask; 5] = [
    PlannedTask { reference: "plan", message: "outline the parser", depends_on: &[] },
    PlannedTask { reference: "lexer", message: "write the lexer", depends_on: &["plan"] },
    PlannedTask { reference: "parser", message: "write the parser", depends_on: &["plan"] },
    PlannedTask {
        reference: "tests",
        message: "test the lexer and the parser",
        depends_on: &["lexer", "parser"],
    },
    PlannedTask { reference: "notes", message: "write the release notes", depends_on: &["tests"] },
];

/// The workers: a session each, on a node each (two sessions on one node would
/// wait for each other: a node runs one writing task at a time).
const WORKERS: [(&str, &str); 2] = [("worker-1", "node-1"), ("worker-2", "node-2")];

/// What a worker runs for each task: a moment's work, and a line that becomes the
/// task's summary.
const WORKER_SCRIPT: &str = r#"sleep 1; echo "done: $AGENTMESH_TASK_MESSAGE""#;

/// The event a worker's completion reaches the coordinator as.
const COMPLETED_EVENT: &str = "agent:generating_completed";

/// How long the demo waits for every completion before it gives up.
const DEADLINE: Duration = Duration::from_secs(60);

/// How long one watch of the coordinator's inbox waits; between two, the workers
/// are checked to be alive.
const WATCH_FOR: Duration = Duration::from_secs(1);

/// How long a worker gets to stop after SIGTERM before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(15);

/// Environment variables a worker must not inherit: the demo passes it every
/// setting on its command line.
const WORKER_ENV_REMOVED: [&str; 4] =
    ["AGENTMESH_HOME", "AGENTMESH_MESH", "AGENTMESH_SERVER", "AGENTMESH_TOKEN"];

/// The summary, as `--json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DemoReport {
    /// The daemon's address while the demo ran.
    daemon: String,
    data_dir: PathBuf,
    /// The data dir was temporary and is gone.
    data_dir_removed: bool,
    mesh: String,
    mission: &'static str,
    coordinator: CoordinatorReport,
    /// The tasks in the order their completions arrived.
    tasks: Vec<TaskReport>,
    workers: Vec<WorkerReport>,
    /// From the start of the demo to the last completion, in seconds.
    seconds: f64,
}

/// The coordinator's side.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CoordinatorReport {
    daemon_id: String,
    run_id: String,
    /// Events its watches received, of every kind.
    events_received: usize,
    /// Completion events among them, one per task.
    completions: usize,
}

/// One task and who did it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct TaskReport {
    #[serde(rename = "ref")]
    reference: &'static str,
    id: String,
    message: &'static str,
    depends_on: Vec<&'static str>,
    /// The worker session that completed it.
    session: String,
    summary: String,
    /// When its completion reached the coordinator, in seconds from the start.
    completed_after_seconds: f64,
}

/// One worker and what it says it did.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WorkerReport {
    session: &'static str,
    node: &'static str,
    completed: u64,
    failed: u64,
    /// The refs of the tasks it completed.
    tasks: Vec<&'static str>,
}

/// Runs `demo`.
pub(super) fn run(ctx: &Context, out: &mut Output) -> anyhow::Result<()> {
    if ctx.store_config().database_file().is_some() {
        return Err(InvalidInput::new(
            "databaseUrl",
            "the demo works in a data dir: a temporary one, or --data-dir DIR; leave out --database-url",
        )
        .into());
    }
    if ctx.server_on_command_line() {
        return Err(
            InvalidInput::new("server", "the demo runs a daemon of its own; leave out --server").into()
        );
    }
    let started = Instant::now();
    let (data_dir, temporary) = if ctx.data_dir_on_command_line() {
        (ctx.data_dir().to_owned(), None)
    } else {
        let dir = tempfile::Builder::new()
            .prefix("agentmesh-demo-")
            .tempdir()
            .context("failed to create a temporary data dir")?;
        (dir.path().to_owned(), Some(dir))
    };
    let mesh = ctx.mesh();

    let daemon = EmbeddedDaemon::start(&data_dir, mesh, ctx.enforce())?;
    let kept = if temporary.is_some() { "removed at exit" } else { "kept" };
    eprintln!("daemon       {} (data dir {}, {kept})", daemon.url, data_dir.display());
    let ran = run_mesh(&daemon, &data_dir, mesh, started);
    let url = daemon.url.clone();
    let stopped = daemon.stop();
    let ran = ran?;
    stopped?;

    let data_dir_removed = match temporary {
        Some(dir) => {
            dir.close()
                .with_context(|| format!("failed to remove the temporary data dir {}", data_dir.display()))?;
            true
        }
        None => false,
    };
    let report = DemoReport {
        daemon: url,
        data_dir,
        data_dir_removed,
        mesh: mesh.to_owned(),
        mission: MISSION,
        coordinator: ran.coordinator,
        tasks: ran.tasks,
        workers: ran.workers,
        seconds: round(ran.seconds),
    };
    out.emit(&report, |w| write_summary(w, &report))
}

/// What happened in the mesh.
struct MeshRun {
    coordinator: CoordinatorReport,
    /// The completions, in arrival order.
    tasks: Vec<TaskReport>,
    workers: Vec<WorkerReport>,
    /// From the start of the demo to the last completion.
    seconds: f64,
}

/// Enqueues the plan, runs the workers, collects the completions and stops the
/// workers; the daemon stays up for the caller to stop.
fn run_mesh(
    daemon: &EmbeddedDaemon,
    data_dir: &Path,
    mesh: &str,
    started: Instant,
) -> anyhow::Result<MeshRun> {
    let api = RemoteMesh::new(&daemon.url, &daemon.token).context("failed to reach the embedded daemon")?;
    let identity = Identity::fresh_run(daemon.daemon_id.clone(), None);
    let ids = enqueue_plan(&api, mesh, &identity)?;
    eprintln!(
        "coordinator  run {} enqueued {} tasks in mission {MISSION:?}: {}",
        identity.run_id,
        ids.len(),
        describe_plan()
    );

    let mut workers = Workers::start(daemon, data_dir, mesh)?;
    let names: Vec<String> = WORKERS.iter().map(|(session, node)| format!("{session} on {node}")).collect();
    eprintln!("workers      {}, each running: sh -c '{WORKER_SCRIPT}'", names.join(", "));

    let collected = collect_completions(&api, mesh, &identity, &ids, &mut workers, started);
    let seconds = started.elapsed().as_secs_f64();
    // The workers stop whatever became of the collection: none is left behind.
    let stopped = workers.stop(&ids);
    let (tasks, events_received) = collected?;
    let workers = stopped?;
    check_workers_agree(&tasks, &workers)?;
    let coordinator = CoordinatorReport {
        daemon_id: identity.daemon_id,
        run_id: identity.run_id,
        events_received,
        completions: tasks.len(),
    };
    Ok(MeshRun { coordinator, tasks, workers, seconds })
}

/// Records the mission and enqueues the plan as one batch stamped with the
/// coordinator's identity; returns each task's id, in plan order.
fn enqueue_plan(api: &dyn MeshApi, mesh: &str, identity: &Identity) -> anyhow::Result<Vec<String>> {
    let mission = MissionBody {
        id: MISSION.to_owned(),
        title: "A parser in five steps".to_owned(),
        goal: Some("every task done by a worker and reported to the coordinator once".to_owned()),
        status: None,
        source: None,
    };
    api.upsert_mission(mesh, mission).context("the coordinator could not record the mission")?;
    let tasks = PLAN
        .iter()
        .map(|task| EnqueueBody {
            message: task.message.to_owned(),
            reference: Some(task.reference.to_owned()),
            depends_on: task.depends_on.iter().map(|dep| (*dep).to_owned()).collect(),
            mission_id: Some(MISSION.to_owned()),
            ..EnqueueBody::default()
        })
        .collect();
    let body = BatchEnqueueBody { tasks, coordinator: Some(identity.coordinator()) };
    let enqueued = api.enqueue_batch(mesh, body).context("the coordinator could not enqueue its tasks")?;
    Ok(enqueued.into_iter().map(|task| task.id).collect())
}

/// `plan; lexer, parser after plan; ...`: the plan in one line.
fn describe_plan() -> String {
    let steps: Vec<String> = PLAN
        .iter()
        .map(|task| match task.depends_on {
            [] => task.reference.to_owned(),
            deps => format!("{} after {}", task.reference, deps.join(" and ")),
        })
        .collect();
    steps.join(", ")
}

/// Watches the coordinator's inbox until every task's completion has arrived.
/// Fails on a completion seen twice, on a task that ends any other way, on a worker
/// that exits, and at the deadline; afterwards, a last drain must find nothing
/// more of the coordinator's. Returns the completions in arrival order and how
/// many events the watches received.
fn collect_completions(
    api: &dyn MeshApi,
    mesh: &str,
    identity: &Identity,
    ids: &[String],
    workers: &mut Workers,
    started: Instant,
) -> anyhow::Result<(Vec<TaskReport>, usize)> {
    let deadline = Instant::now() + DEADLINE;
    let mut completions: Vec<TaskReport> = Vec::with_capacity(ids.len());
    let mut received = 0;
    while completions.len() < ids.len() {
        if Instant::now() > deadline {
            let arrived: Vec<&str> = completions.iter().map(|c| c.reference).collect();
            bail!(
                "only {} of {} completions reached the coordinator within {}s (arrived: {})",
                completions.len(),
                ids.len(),
                DEADLINE.as_secs(),
                if arrived.is_empty() { "none".to_owned() } else { arrived.join(", ") }
            );
        }
        workers.check_running()?;
        let watched = api
            .watch(mesh, identity.drain_body(None), WATCH_FOR)
            .context("the coordinator's watch of its inbox failed")?;
        for event in watched.events {
            received += 1;
            let payload = event.payload.parse();
            let metadata = &payload["metadataEvent"];
            let task_id = metadata["taskId"].as_str().unwrap_or_default();
            let Some(index) = ids.iter().position(|id| id == task_id) else {
                continue;
            };
            let planned = &PLAN[index];
            if event.name() != COMPLETED_EVENT {
                let reason = metadata["reason"].as_str().unwrap_or("no reason given");
                bail!("task {:?} did not complete ({}): {reason}", planned.reference, event.name());
            }
            if completions.iter().any(|c| c.id == task_id) {
                bail!("the completion of task {:?} reached the coordinator twice", planned.reference);
            }
            if let Some(dep) =
                planned.depends_on.iter().find(|dep| !completions.iter().any(|c| c.reference == **dep))
            {
                bail!("task {:?} completed before its dependency {dep:?}", planned.reference);
            }
            let report = TaskReport {
                reference: planned.reference,
                id: task_id.to_owned(),
                message: planned.message,
                depends_on: planned.depends_on.to_vec(),
                session: text(&metadata["targetSessionId"]),
                summary: text(&metadata["finalSummary"]),
                completed_after_seconds: round(started.elapsed().as_secs_f64()),
            };
            eprintln!(
                "{:>11.1}s {:<7} completed by {}: {}",
                report.completed_after_seconds,
                report.reference,
                report.session,
                output::excerpt(&report.summary, 60)
            );
            completions.push(report);
        }
    }
    let rest = api.drain(mesh, identity.drain_body(None)).context("the coordinator's last drain failed")?;
    if let Some(event) = rest.events.iter().find(|event| {
        let payload = event.payload.parse();
        ids.iter().any(|id| payload["metadataEvent"]["taskId"].as_str() == Some(id.as_str()))
    }) {
        bail!(
            "an event about a task already reported was still queued for the coordinator: {}",
            event.name()
        );
    }
    Ok((completions, received + rest.events.len()))
}

/// A string field of an event, or `""`.
fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

/// Checks that each worker completed exactly the tasks whose completions named it.
fn check_workers_agree(completions: &[TaskReport], workers: &[WorkerReport]) -> anyhow::Result<()> {
    for worker in workers {
        let mut by_events: Vec<&str> =
            completions.iter().filter(|c| c.session == worker.session).map(|c| c.reference).collect();
        let mut by_worker = worker.tasks.clone();
        by_events.sort_unstable();
        by_worker.sort_unstable();
        if by_events != by_worker || worker.failed > 0 {
            bail!(
                "{} reports {} completed and {} failed ({}), but the coordinator's events name {}",
                worker.session,
                worker.completed,
                worker.failed,
                by_worker.join(", "),
                by_events.join(", ")
            );
        }
    }
    Ok(())
}

/// The summary printed on stdout without `--json`.
fn write_summary(w: &mut dyn Write, report: &DemoReport) -> std::io::Result<()> {
    writeln!(
        w,
        "demo passed: {} of {} tasks completed in {:.1}s by {} workers",
        report.tasks.len(),
        PLAN.len(),
        report.seconds,
        report.workers.len()
    )?;
    for worker in &report.workers {
        let tasks = if worker.tasks.is_empty() { "nothing".to_owned() } else { worker.tasks.join(", ") };
        writeln!(w, "  {} ({}): {tasks}", worker.session, worker.node)?;
    }
    writeln!(
        w,
        "  coordinator: {} completions received, each task's exactly once, each after its dependencies",
        report.coordinator.completions
    )?;
    if !report.data_dir_removed {
        writeln!(w, "  the data stays in {}", report.data_dir.display())?;
    }
    Ok(())
}

/// Seconds to a tenth.
fn round(seconds: f64) -> f64 {
    (seconds * 10.0).round() / 10.0
}

/// The daemon, served on a runtime of its own in this process.
struct EmbeddedDaemon {
    runtime: tokio::runtime::Runtime,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    /// `http://127.0.0.1:PORT`.
    url: String,
    /// The API token, also in `token_file` for the workers.
    token: String,
    token_file: PathBuf,
    /// The data dir's machine id.
    daemon_id: String,
}

impl EmbeddedDaemon {
    /// Opens the data dir and serves it on a free loopback port.
    fn start(data_dir: &Path, mesh: &str, enforce: bool) -> anyhow::Result<EmbeddedDaemon> {
        let store = super::StoreConfig::data_dir(data_dir).open_sqlite()?;
        let token_file = data_dir.join(TOKEN_FILE_NAME);
        let token = ApiToken::load_or_create(&token_file)
            .with_context(|| format!("failed to read or create the token file {}", token_file.display()))?;
        let daemon_id = agentmesh_mcp::load_or_create_daemon_id(data_dir)
            .with_context(|| format!("failed to read or create the daemon id in {}", data_dir.display()))?;
        let secret = token.secret().to_owned();
        let state = AppState::new(Arc::new(store), token)
            .with_daemon_id(daemon_id.clone())
            .with_mcp_mesh(agentmesh_core::MeshId::parse(mesh)?)
            .with_enforce(enforce);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("failed to start the async runtime")?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
            .context("failed to listen on a loopback port")?;
        let addr = listener.local_addr().context("failed to read the bound address")?;
        let shutdown = CancellationToken::new();
        let server = runtime.spawn(agentmesh_daemon::serve(listener, state, shutdown.clone()));
        Ok(EmbeddedDaemon {
            runtime,
            shutdown,
            server,
            url: format!("http://{addr}"),
            token: secret,
            token_file,
            daemon_id,
        })
    }

    /// Shuts the daemon down and waits for it.
    fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let served = self.runtime.block_on(self.server);
        self.runtime.shutdown_timeout(Duration::from_secs(5));
        match served {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(err).context("the embedded daemon failed"),
            Err(join) => bail!("the embedded daemon stopped unexpectedly: {join}"),
        }
    }
}

/// One worker process and what it printed.
struct WorkerProcess {
    session: &'static str,
    node: &'static str,
    child: Child,
    /// Its stdout (the `--json` summary), read to the end on a thread.
    stdout: Option<JoinHandle<String>>,
    /// Its stderr lines so far (progress, or why it failed).
    stderr: Arc<Mutex<Vec<String>>>,
}

/// The worker processes; dropping them kills whichever still runs.
struct Workers(Vec<WorkerProcess>);

impl Workers {
    /// Starts one `agentmesh work` process per entry of [`WORKERS`], against the
    /// embedded daemon.
    fn start(daemon: &EmbeddedDaemon, data_dir: &Path, mesh: &str) -> anyhow::Result<Workers> {
        let program = std::env::current_exe().context("failed to find the agentmesh binary")?;
        let mut workers = Workers(Vec::with_capacity(WORKERS.len()));
        for (session, node) in WORKERS {
            let mut command = Command::new(&program);
            for var in WORKER_ENV_REMOVED {
                command.env_remove(var);
            }
            command
                .arg("--data-dir")
                .arg(data_dir)
                .args(["--server", &daemon.url, "--mesh", mesh, "--token-file"])
                .arg(&daemon.token_file)
                .args([
                    "work",
                    "--node",
                    node,
                    "--session",
                    session,
                    "--json",
                    "--",
                    "sh",
                    "-c",
                    WORKER_SCRIPT,
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = command.spawn().with_context(|| format!("failed to start {session}"))?;
            let stdout = child.stdout.take().map(|mut pipe| {
                thread::spawn(move || {
                    let mut text = String::new();
                    let _ = pipe.read_to_string(&mut text);
                    text
                })
            });
            let stderr = Arc::new(Mutex::new(Vec::new()));
            if let Some(pipe) = child.stderr.take() {
                let lines = Arc::clone(&stderr);
                thread::spawn(move || {
                    for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                        lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                    }
                });
            }
            workers.0.push(WorkerProcess { session, node, child, stdout, stderr });
        }
        Ok(workers)
    }

    /// Fails when a worker has exited: it should run until it is stopped.
    fn check_running(&mut self) -> anyhow::Result<()> {
        for worker in &mut self.0 {
            if let Some(status) = worker.child.try_wait().context("failed to check on a worker")? {
                bail!("{} exited early ({status}){}", worker.session, worker.last_words());
            }
        }
        Ok(())
    }

    /// Stops every worker with SIGTERM and waits for it; each must exit 0 and
    /// print its summary. Returns what each says it did with the tasks `ids`.
    fn stop(mut self, ids: &[String]) -> anyhow::Result<Vec<WorkerReport>> {
        for worker in &mut self.0 {
            terminate(&mut worker.child);
        }
        let mut reports = Vec::with_capacity(self.0.len());
        for worker in &mut self.0 {
            let status = wait_for(&mut worker.child, STOP_WAIT)
                .with_context(|| format!("failed to wait for {}", worker.session))?;
            let Some(status) = status else {
                bail!("{} did not stop within {}s of SIGTERM", worker.session, STOP_WAIT.as_secs());
            };
            if !status.success() {
                bail!("{} stopped with {status}{}", worker.session, worker.last_words());
            }
            let text = worker.stdout.take().and_then(|reader| reader.join().ok()).unwrap_or_default();
            reports.push(worker.report(&text, ids)?);
        }
        Ok(reports)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for worker in &mut self.0 {
            if matches!(worker.child.try_wait(), Ok(None)) {
                let _ = worker.child.kill();
                let _ = worker.child.wait();
            }
        }
    }
}

impl WorkerProcess {
    /// The last lines the worker wrote to stderr, as the end of an error message.
    fn last_words(&self) -> String {
        let lines = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        let tail: Vec<&str> = lines.iter().rev().take(5).rev().map(String::as_str).collect();
        if tail.is_empty() { String::new() } else { format!("; it said:\n  {}", tail.join("\n  ")) }
    }

    /// Reads the worker's `--json` summary; the tasks it completed are named by
    /// their refs in the plan, whose ids are `ids`.
    fn report(&self, stdout: &str, ids: &[String]) -> anyhow::Result<WorkerReport> {
        let summary: Value = serde_json::from_str(stdout)
            .with_context(|| format!("{} printed no summary ({stdout:?})", self.session))?;
        let count = |field: &str| summary[field].as_u64().unwrap_or_default();
        let mut tasks = Vec::new();
        for task in
            summary["tasks"].as_array().into_iter().flatten().filter(|task| task["status"] == "completed")
        {
            let id = task["id"].as_str().unwrap_or_default();
            match ids.iter().position(|planned| planned == id) {
                Some(index) => tasks.push(PLAN[index].reference),
                None => bail!("{} completed task {id:?}, which is not one of the demo's", self.session),
            }
        }
        Ok(WorkerReport {
            session: self.session,
            node: self.node,
            completed: count("completed"),
            failed: count("failed"),
            tasks,
        })
    }
}

/// Asks a child to stop: SIGTERM on Unix (a worker then finishes its task and
/// prints its summary), a kill elsewhere.
fn terminate(child: &mut Child) {
    #[cfg(unix)]
    {
        use rustix::process::{Pid, Signal, kill_process};
        if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
            let _ = kill_process(pid, Signal::TERM);
        }
    }
    #[cfg(not(unix))]
    {
        let _ = child.kill();
    }
}

/// Waits up to `limit` for a child to exit; `None` when it still runs.
fn wait_for(child: &mut Child, limit: Duration) -> std::io::Result<Option<ExitStatus>> {
    let until = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(20));
    }
}
