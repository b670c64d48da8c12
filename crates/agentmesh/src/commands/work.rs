//! `agentmesh work -- <command...>`: turns any command-line program into a
//! worker session.
//!
//! The loop: claim a task; run the command with it (the message on stdin and in
//! `AGENTMESH_TASK_MESSAGE`, with `AGENTMESH_TASK_ID`, `AGENTMESH_TASK_EPOCH` and
//! `AGENTMESH_MESH`; `{message}` and `{id}` in the arguments replaced); renew the
//! lease from a heartbeat thread every third of it while the command runs, and
//! forward the command's last output line as the task's progress note (within
//! [`PROGRESS_EVERY`] of its printing); when it
//! exits, complete the task with the tail of its output as the summary (exit 0) or
//! fail it with a reason naming the exit status; repeat. With nothing to claim it
//! waits, backing off up to two seconds, and asks again.
//!
//! Idleness: while there is nothing to claim (not with `--once`), the session
//! reports itself idle (`agentmesh sessions` lists it, renewed while it waits);
//! once it takes a task again, and when it exits, it removes that report.
//!
//! Chaining: unless the loop is stopping or runs `--once`, the report and the next
//! claim go as one `complete-and-claim` (one request, one transaction). A task
//! claimed that way is run even when a stop signal arrives while the request is on
//! its way: it was taken before the loop saw the stop, and is finished like a
//! running one. When a retried report finds that an earlier attempt did land, the
//! answer that carried the next claim was lost, so the loop takes over whatever
//! task its session holds.
//!
//! Every call goes through [`MeshApi`], so the same loop runs on the data dir or
//! against a daemon (`--server`).
//!
//! Fencing: every heartbeat and the final report carry the claim's epoch. A
//! heartbeat refused because the task is no longer ours (a stale epoch after the
//! lease ran out and the task was reclaimed, a cancellation) means the work is
//! someone else's now: the command is killed, nothing is reported, and the loop
//! moves on.
//!
//! Stopping: the first SIGINT or SIGTERM stops the loop taking new work; a running
//! command is waited for and its task reported, then the process exits 0. A second
//! signal kills the command (its task is failed as interrupted). The command runs
//! in its own process group, so a Ctrl-C typed at the terminal reaches the worker
//! loop only, not the command.
//!
//! Progress goes to stderr. Stdout carries only the final result: with `--json`
//! one document, `{"completed": n, "failed": n, "tasks": [...]}`.

use std::io::{Read, Write};
use std::num::NonZeroU32;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use agentmesh_api::views::ClaimView;
use agentmesh_api::wire::{
    ClaimBody, CompleteAndClaimBody, CompletionBody, HeartbeatBody, IdleBody, ListParams, ProgressBody,
};
use agentmesh_api::{MeshApi, MeshError};
use agentmesh_core::{InvalidInput, Progress, Task, TaskStatus};
use anyhow::Context as _;
use serde::Serialize;

use super::{Context, id};
use crate::cli::WorkArgs;
use crate::output::{self, Output};

/// How much of the command's output becomes the task's summary, in characters.
const SUMMARY_CHARS: usize = 2_000;
/// Bytes of each output stream kept while the command runs (the tail).
const KEPT_BYTES: usize = 16 * 1024;
/// The first wait when there is nothing to claim; it doubles up to [`IDLE_MAX`].
const IDLE_MIN: Duration = Duration::from_millis(250);
/// The longest wait between two claims when there is nothing to claim.
const IDLE_MAX: Duration = Duration::from_secs(2);
/// How long an idle report of a waiting worker holds; it is renewed every third
/// of it while the worker waits.
const IDLE_REPORT_SECS: u32 = 300;
/// The provider type an idle report names when the worker was given none.
const DEFAULT_PROVIDER: &str = "command";
/// How often a running command and the signal count are checked.
const POLL: Duration = Duration::from_millis(50);
/// How often the heartbeat thread looks for a new last output line to forward
/// as the task's progress.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// How long to wait, after the command exited, for its output pipes to close
/// (a background grandchild may hold them open forever).
const DRAIN_WAIT: Duration = Duration::from_secs(2);
/// How often a report is tried while the daemon cannot be reached.
const REPORT_ATTEMPTS: u32 = 5;
/// Error codes of a heartbeat refusal meaning the task is no longer ours.
const TAKEN_AWAY_CODES: &[&str] =
    &["stale_epoch", "not_assigned_to_session", "invalid_transition", "task_not_found"];

/// What the loop did, printed at exit.
#[derive(Debug, Default, Serialize)]
struct WorkSummary {
    /// Tasks reported completed.
    completed: u64,
    /// Tasks reported failed.
    failed: u64,
    /// Every task claimed, in order.
    tasks: Vec<TaskRecord>,
}

/// One claimed task and what became of it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct TaskRecord {
    id: String,
    /// `completed`, `failed`, `taken_away` (the command was killed and nothing
    /// reported) or `unreported` (the report was refused or could not be sent).
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// The fixed parts of every claim, heartbeat and report.
struct Worker<'a> {
    api: &'a dyn MeshApi,
    mesh: &'a str,
    node: String,
    session: String,
    lease_ms: NonZeroU32,
    command: &'a [String],
    /// SIGINT/SIGTERM received so far.
    signals: Arc<AtomicUsize>,
}

/// Runs `work`.
pub(super) fn run(ctx: &Context, args: WorkArgs, out: &mut Output) -> anyhow::Result<()> {
    let node = id("nodeId", &args.node)?.to_owned();
    let session = id("sessionId", &args.session)?.to_owned();
    if args.command.first().is_none_or(|program| program.trim().is_empty()) {
        return Err(InvalidInput::new("command", "must name a program to run").into());
    }
    let lease_ms = crate::duration::lease_millis(args.lease).ok_or_else(|| {
        InvalidInput::new(
            "lease",
            format!("must be between 3s and {}", crate::duration::format(crate::duration::MAX_LEASE)),
        )
    })?;
    let signals = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&signals);
    ctrlc::set_handler(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })
    .context("failed to install the SIGINT/SIGTERM handler")?;

    let worker = Worker {
        api: ctx.api()?,
        mesh: ctx.mesh(),
        node,
        session,
        lease_ms,
        command: &args.command,
        signals,
    };
    let claim = ClaimBody {
        node_id: worker.node.clone(),
        session_id: worker.session.clone(),
        capability_tags: args.tags,
        provider_type: args.provider.clone(),
        provider_max_parallel: None,
        node_is_worktree: false,
        lease_ms: Some(lease_ms),
        assigned_transcript_profile: None,
        allowed_task_difficulties: None,
    };

    let mut summary = WorkSummary::default();
    let mut idle_report =
        IdleReport { provider: args.provider.unwrap_or_else(|| DEFAULT_PROVIDER.to_owned()), at: None };
    let mut idle = IDLE_MIN;
    let mut nothing_to_claim = None;
    // The claim that came back with the last report, when it was chained.
    let mut chained: Option<ClaimView> = None;
    let chain = (!args.once).then_some(&claim);
    eprintln!("worker {}@{} in mesh {}: waiting for tasks", worker.session, worker.node, worker.mesh);
    while chained.as_ref().is_some_and(|view| view.task.is_some()) || !worker.stop_requested() {
        let next = match chained.take() {
            Some(view) => Ok(view),
            None => worker.api.claim(worker.mesh, claim.clone()),
        };
        let view = match next {
            Ok(view) => view,
            Err(err) if args.once || !is_transient(&err) => return Err(err).context("claim failed"),
            Err(err) => {
                eprintln!("claim failed: {err}; retrying in {}s", IDLE_MAX.as_secs());
                if !worker.idle_wait(IDLE_MAX) {
                    break;
                }
                continue;
            }
        };
        let Some(task) = view.task else {
            if args.once {
                let reason = view.refusal.unwrap_or_else(|| "no pending task".to_owned());
                eprintln!("nothing to claim: {}", super::claim::refusal_words(&reason));
                nothing_to_claim = Some(reason);
                break;
            }
            worker.report_idle(&mut idle_report);
            if !worker.idle_wait(idle) {
                break;
            }
            idle = (idle * 2).min(IDLE_MAX);
            continue;
        };
        idle = IDLE_MIN;
        worker.forget_idle(&mut idle_report);
        let (record, next) = worker.run_task(&task, chain)?;
        chained = next;
        match record.status {
            "completed" => summary.completed += 1,
            "failed" => summary.failed += 1,
            _ => {}
        }
        summary.tasks.push(record);
        if args.once {
            break;
        }
    }
    worker.forget_idle(&mut idle_report);
    if worker.stop_requested() {
        eprintln!("stopped");
    }
    out.emit(&summary, |w| match &nothing_to_claim {
        Some(reason) => writeln!(w, "nothing to claim: {}", super::claim::refusal_words(reason)),
        None => writeln!(w, "completed {}, failed {}", summary.completed, summary.failed),
    })
}

/// Errors worth retrying in a long-running loop: the daemon is down or busy.
fn is_transient(err: &MeshError) -> bool {
    !err.is_caller_error()
}

/// How a command run ended.
enum Ended {
    /// It exited by itself.
    Exited(ExitStatus),
    /// It was killed after a second stop signal.
    Interrupted,
    /// It was killed because the task was taken away.
    TakenAway,
}

/// The worker's idle report: its provider type, and when it was last made
/// (`None` while the session has no report standing).
struct IdleReport {
    provider: String,
    at: Option<Instant>,
}

impl Worker<'_> {
    /// Reports the session idle, unless a report made less than a third of its
    /// lifetime ago still stands. A failure is told on stderr, never fatal.
    fn report_idle(&self, report: &mut IdleReport) {
        let renew_after = Duration::from_secs(u64::from(IDLE_REPORT_SECS / 3));
        if report.at.is_some_and(|at| at.elapsed() < renew_after) {
            return;
        }
        let body = IdleBody {
            node_id: self.node.clone(),
            session_id: self.session.clone(),
            provider_type: report.provider.clone(),
            ttl_secs: Some(IDLE_REPORT_SECS),
            metadata: None,
        };
        match self.api.report_idle(self.mesh, body) {
            Ok(_) => report.at = Some(Instant::now()),
            Err(err) => eprintln!("could not report the session idle: {err}"),
        }
    }

    /// Removes the idle report, if one stands. A failure is told on stderr; the
    /// report then runs out by itself.
    fn forget_idle(&self, report: &mut IdleReport) {
        if report.at.take().is_none() {
            return;
        }
        if let Err(err) = self.api.remove_idle_session(self.mesh, &self.node, &self.session) {
            eprintln!("could not remove the session's idle report: {err}");
        }
    }

    fn stop_requested(&self) -> bool {
        self.signals.load(Ordering::SeqCst) > 0
    }

    /// Sleeps `span` unless a stop signal arrives; returns whether to go on.
    fn idle_wait(&self, span: Duration) -> bool {
        let until = Instant::now() + span;
        while Instant::now() < until {
            if self.stop_requested() {
                return false;
            }
            thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
        }
        !self.stop_requested()
    }

    /// Runs the command for `task` and reports how it ended; with `chain`, the
    /// report also claims the next task (see the module doc), which is returned.
    fn run_task(
        &self,
        task: &Task,
        chain: Option<&ClaimBody>,
    ) -> anyhow::Result<(TaskRecord, Option<ClaimView>)> {
        let epoch = task.epoch();
        eprintln!("claimed {} (epoch {epoch}): {}", task.id, output::excerpt(&task.message, 80));
        let started = Instant::now();
        let argv: Vec<String> =
            self.command.iter().map(|arg| substitute(arg, &task.message, &task.id)).collect();
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .env("AGENTMESH_TASK_ID", &task.id)
            .env("AGENTMESH_TASK_MESSAGE", &task.message)
            .env("AGENTMESH_TASK_EPOCH", epoch.to_string())
            .env("AGENTMESH_MESH", self.mesh)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                let reason = format!("the command {:?} could not be started: {err}", argv[0]);
                eprintln!("{}: {reason}", task.id);
                return Ok(self.report(task, started, None, Err(reason), None, chain));
            }
        };
        eprintln!("running {} for {}", argv[0], task.id);

        if let Some(mut stdin) = child.stdin.take() {
            let message = task.message.clone();
            // A command that never reads its stdin must not block the worker.
            thread::spawn(move || {
                let _ = stdin.write_all(message.as_bytes());
            });
        }
        let (done_tx, done_rx) = mpsc::channel();
        let stdout = keep_tail(child.stdout.take(), done_tx.clone());
        let stderr = keep_tail(child.stderr.take(), done_tx);

        let taken_away = AtomicBool::new(false);
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let ended = thread::scope(|scope| {
            let taken_away = &taken_away;
            let output = [&*stdout, &*stderr];
            scope.spawn(move || self.heartbeat(task, epoch, output, stop_rx, taken_away));
            let ended = self.wait(&mut child, &task.id, taken_away);
            drop(stop_tx);
            ended
        })?;

        // Both readers finish when the pipes close; don't wait forever for that. A
        // pipe still open after the wait is held by something the command left
        // running in its process group: that group is ended, so the readers (and
        // what held the pipes) do not outlive the task.
        let deadline = Instant::now() + DRAIN_WAIT;
        let mut finished = 0;
        while finished < 2 && done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok()
        {
            finished += 1;
        }
        if finished < 2 {
            kill(&mut child);
            let deadline = Instant::now() + DRAIN_WAIT;
            while finished < 2
                && done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok()
            {
                finished += 1;
            }
        }
        let tail = summary_of(&text_of(&stdout), &text_of(&stderr));
        let summary = Some(tail).filter(|s| !s.is_empty());
        let seconds = started.elapsed().as_secs_f64();
        Ok(match ended {
            Ended::TakenAway => {
                eprintln!("{}: taken away after {seconds:.1}s; command killed, nothing reported", task.id);
                let record = TaskRecord {
                    id: task.id.clone(),
                    status: "taken_away",
                    exit_code: None,
                    seconds: round(seconds),
                    summary,
                    reason: Some(
                        "the task was taken away (its lease ran out or it was cancelled)".to_owned(),
                    ),
                };
                (record, None)
            }
            Ended::Interrupted => {
                let reason = "interrupted: the worker was stopped and the command killed".to_owned();
                self.report(task, started, None, Err(reason), summary, None)
            }
            Ended::Exited(status) if status.success() => {
                self.report(task, started, status.code(), Ok(()), summary, chain)
            }
            Ended::Exited(status) => {
                let reason = format!("the command failed: {}", describe(status));
                self.report(task, started, status.code(), Err(reason), summary, chain)
            }
        })
    }

    /// Waits for the command, killing it on a second stop signal or when the task
    /// is taken away.
    fn wait(&self, child: &mut Child, id: &str, taken_away: &AtomicBool) -> anyhow::Result<Ended> {
        let mut announced = false;
        let mut killed: Option<Ended> = None;
        loop {
            if let Some(status) = child.try_wait().context("failed to wait for the command")? {
                return Ok(killed.unwrap_or(Ended::Exited(status)));
            }
            if killed.is_none() {
                let signals = self.signals.load(Ordering::SeqCst);
                if signals == 1 && !announced {
                    eprintln!(
                        "stopping: waiting for the command of {id} to finish (interrupt again to kill it)"
                    );
                    announced = true;
                }
                if signals >= 2 {
                    eprintln!("stopping: killing the command of {id}");
                    kill(child);
                    killed = Some(Ended::Interrupted);
                } else if taken_away.load(Ordering::SeqCst) {
                    kill(child);
                    killed = Some(Ended::TakenAway);
                }
            }
            thread::sleep(POLL);
        }
    }

    /// Renews the lease every third of it until `stop` closes, and sooner when the
    /// command printed a new last line (`output`: its stdout and stderr tails),
    /// which goes with the beat as the progress note; sets `taken_away` and
    /// returns when a heartbeat is refused because the task is not ours.
    fn heartbeat(
        &self,
        task: &Task,
        epoch: u64,
        output: [&Mutex<Vec<u8>>; 2],
        stop: mpsc::Receiver<()>,
        taken_away: &AtomicBool,
    ) {
        let every = Duration::from_millis(u64::from(self.lease_ms.get()) / 3);
        let mut last_beat = Instant::now();
        let mut said: Option<String> = None;
        loop {
            match stop.recv_timeout(every.min(PROGRESS_EVERY)) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let line = output.iter().find_map(|kept| last_line(&text_of(kept)));
            let news = line.is_some() && line != said;
            if !news && last_beat.elapsed() < every {
                continue;
            }
            let progress = news.then(|| ProgressBody { percent: None, note: line.clone() });
            let body = HeartbeatBody {
                task_id: task.id.clone(),
                session_id: self.session.clone(),
                epoch,
                lease_ms: self.lease_ms,
                progress,
            };
            last_beat = Instant::now();
            match self.api.heartbeat(self.mesh, body) {
                Ok(_) => {
                    if news {
                        said = line;
                    }
                }
                Err(err) if TAKEN_AWAY_CODES.contains(&err.code()) => {
                    eprintln!("{}: heartbeat refused ({}): {err}", task.id, err.code());
                    taken_away.store(true, Ordering::SeqCst);
                    return;
                }
                Err(err) => eprintln!("{}: heartbeat failed, will retry: {err}", task.id),
            }
        }
    }

    /// Sends a report, with the next claim when `chain` is given, retrying while
    /// the daemon is unreachable or busy (a few times, [`IDLE_MAX`] apart): the
    /// work is done, and losing its report would leave the task to be reclaimed and
    /// done again. Returns the reported task and, with `chain`, the next claim.
    fn complete_with_retries(
        &self,
        body: CompletionBody,
        chain: Option<&ClaimBody>,
    ) -> Result<(Task, Option<ClaimView>), MeshError> {
        let mut attempt = 1;
        loop {
            let sent = match chain {
                Some(claim) => self
                    .api
                    .complete_and_claim(
                        self.mesh,
                        CompleteAndClaimBody { completion: body.clone(), claim: claim.clone() },
                    )
                    .map(|view| (view.completed, Some(view.next))),
                None => self.api.complete(self.mesh, body.clone()).map(|task| (task, None)),
            };
            match sent {
                Err(err) if is_transient(&err) && attempt < REPORT_ATTEMPTS => {
                    eprintln!("report failed ({err}); retrying in {}s", IDLE_MAX.as_secs());
                    thread::sleep(IDLE_MAX);
                    attempt += 1;
                }
                // A retry refused because an earlier attempt did land (its answer
                // was lost on the way back) is a success: the task ended, by this
                // session, under this epoch.
                Err(err) if attempt > 1 && err.is_caller_error() => {
                    return match self.already_reported(&body) {
                        Some(task) => Ok((task, chain.map(|_| self.held_task()))),
                        None => Err(err),
                    };
                }
                other => return other,
            }
        }
    }

    /// The task, when it already ended the way `body` reports, by this session at
    /// the epoch `body` presents.
    fn already_reported(&self, body: &CompletionBody) -> Option<Task> {
        let task = self.api.show_task(self.mesh, body.task_id.as_deref()?).ok()?;
        let wanted = if body.failed { TaskStatus::Failed } else { TaskStatus::Completed };
        let ours = task.status == wanted
            && task.assigned_session_id.as_deref() == Some(body.session_id.as_str())
            && Some(task.epoch()) == body.epoch;
        ours.then_some(task)
    }

    /// The task this session holds, as a claim answer (none when it holds none or
    /// the look fails: the next claim then says why).
    fn held_task(&self) -> ClaimView {
        let assigned = self.api.list_tasks(self.mesh, ListParams::statuses(Some("assigned".to_owned())));
        let task = assigned
            .unwrap_or_default()
            .into_iter()
            .find(|task| task.assigned_session_id.as_deref() == Some(self.session.as_str()));
        if let Some(task) = &task {
            eprintln!("{}: taking over the task a lost answer had claimed", task.id);
        }
        ClaimView { task, refusal: None, blocked_by: Vec::new() }
    }

    /// Completes (`Ok`) or fails (`Err(reason)`) the task and records the outcome;
    /// with `chain` (and no stop signal yet), claims the next task in the same
    /// request and returns that claim.
    fn report(
        &self,
        task: &Task,
        started: Instant,
        exit_code: Option<i32>,
        outcome: Result<(), String>,
        summary: Option<String>,
        chain: Option<&ClaimBody>,
    ) -> (TaskRecord, Option<ClaimView>) {
        let seconds = started.elapsed().as_secs_f64();
        let chain = chain.filter(|_| !self.stop_requested());
        let (failed, reason) = match &outcome {
            Ok(()) => (false, None),
            Err(reason) => (true, Some(reason.clone())),
        };
        let body = CompletionBody {
            session_id: self.session.clone(),
            task_id: Some(task.id.clone()),
            epoch: Some(task.epoch()),
            summary: summary.clone(),
            failed,
            reason: reason.clone(),
            occurred_at: None,
        };
        let (status, next) = match self.complete_with_retries(body, chain) {
            Ok((_, next)) if failed => {
                eprintln!(
                    "{}: failed after {seconds:.1}s: {}",
                    task.id,
                    reason.as_deref().unwrap_or_default()
                );
                ("failed", next)
            }
            Ok((_, next)) => {
                eprintln!("{}: done in {seconds:.1}s; completed", task.id);
                ("completed", next)
            }
            Err(err) => {
                eprintln!("{}: the report was not accepted: {err}", task.id);
                ("unreported", None)
            }
        };
        (
            TaskRecord { id: task.id.clone(), status, exit_code, seconds: round(seconds), summary, reason },
            next,
        )
    }
}

/// Seconds to a tenth, for the summary document.
fn round(seconds: f64) -> f64 {
    (seconds * 10.0).round() / 10.0
}

/// Reads a stream to its end on a thread, keeping its last [`KEPT_BYTES`]; says
/// so on `done` when finished.
fn keep_tail(stream: Option<impl Read + Send + 'static>, done: mpsc::Sender<()>) -> Arc<Mutex<Vec<u8>>> {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&kept);
    thread::spawn(move || {
        if let Some(mut stream) = stream {
            let mut buf = [0_u8; 8192];
            while let Ok(n @ 1..) = stream.read(&mut buf) {
                let mut kept = sink.lock().unwrap_or_else(|e| e.into_inner());
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > KEPT_BYTES {
                    let excess = kept.len() - KEPT_BYTES;
                    kept.drain(..excess);
                }
            }
        }
        let _ = done.send(());
    });
    kept
}

fn text_of(kept: &Mutex<Vec<u8>>) -> String {
    String::from_utf8_lossy(&kept.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
}

/// The last line of `text` with something on it, as a progress note: control
/// characters dropped, at most [`Progress::NOTE_MAX_CHARS`] characters (its end).
fn last_line(text: &str) -> Option<String> {
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    let clean: String = line.chars().filter(|c| !c.is_control()).collect();
    let count = clean.chars().count();
    let kept = clean.chars().skip(count.saturating_sub(Progress::NOTE_MAX_CHARS)).collect::<String>();
    Some(kept.trim().to_owned()).filter(|l| !l.is_empty())
}

/// The summary: the last [`SUMMARY_CHARS`] characters of stdout, or of stderr
/// when stdout is blank.
fn summary_of(stdout: &str, stderr: &str) -> String {
    let text = if stdout.trim().is_empty() { stderr.trim() } else { stdout.trim() };
    let count = text.chars().count();
    if count <= SUMMARY_CHARS {
        return text.to_owned();
    }
    let skipped = count - SUMMARY_CHARS;
    format!("…{}", text.chars().skip(skipped + 1).collect::<String>())
}

/// `arg` with every `{message}` and `{id}` replaced, in one pass (a message that
/// itself contains `{id}` is left as written).
fn substitute(arg: &str, message: &str, id: &str) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("{message}") {
            out.push_str(message);
            rest = after;
        } else if let Some(after) = tail.strip_prefix("{id}") {
            out.push_str(id);
            rest = after;
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// An exit status in words: `exit status 3`, `killed by signal 9`.
fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    #[cfg(unix)]
    if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
        return format!("killed by signal {signal}");
    }
    status.to_string()
}

/// Kills the command and everything it started (its process group).
fn kill(child: &mut Child) {
    #[cfg(unix)]
    {
        // The command leads its own process group (its id is the group's id), so
        // SIGKILL to the group reaches its children too, which would otherwise keep
        // the output pipes open. The signal is sent by the kill(2) system call
        // itself; no process is started for it.
        let group = rustix::process::Pid::from_child(child);
        if rustix::process::kill_process_group(group, rustix::process::Signal::KILL).is_ok() {
            return;
        }
    }
    let _ = child.kill();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_in_one_pass() {
        assert_eq!(substitute("do: {message}", "fix {id}", "t1"), "do: fix {id}");
        assert_eq!(substitute("{id}-{id}", "m", "t1"), "t1-t1");
        assert_eq!(substitute("{other} {message", "m", "t1"), "{other} {message");
        assert_eq!(substitute("plain", "m", "t1"), "plain");
    }

    #[test]
    fn the_summary_is_the_tail_of_stdout_else_stderr() {
        assert_eq!(summary_of("  out\n", "err"), "out");
        assert_eq!(summary_of(" \n", "err\n"), "err");
        let long = "x".repeat(5_000) + "END";
        let tail = summary_of(&long, "");
        assert_eq!(tail.chars().count(), SUMMARY_CHARS);
        assert!(tail.starts_with('…') && tail.ends_with("END"));
    }
}
