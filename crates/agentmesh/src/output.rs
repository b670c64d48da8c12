//! Writing results: one JSON document with `--json`, readable lines otherwise.
//!
//! Every command ends in exactly one [`Output::emit`] call, which is what keeps
//! `--json` output a single document: the same views (`agentmesh_api::views`) the
//! daemon answers, so the output is identical whether the command ran on the data
//! dir or against a daemon. Tasks and ledger entries print through the core types'
//! own serde (camelCase, the original's field names).
//! The helpers below render the human form: aligned tables, relative ages and
//! one-line excerpts. Write errors (a closed pipe) are returned, never panicked on.
//! The human form speaks the command line's language: an event's coordinator
//! text names the MCP tools an agent calls, and is shown with the `agentmesh`
//! commands that do the same ([`cli_words`]); a drain's counters are counted in
//! words. `--json` keeps the machine names.
//!
//! stdout is locked only while a result is written, never for the whole command:
//! `agentmesh mcp` hands stdout to the MCP transport, whose writer takes the same
//! lock from another thread for every message.

use std::io::{self, Write};

pub(crate) use agentmesh_api::views::{
    ConflictView, DeliveryView, DispatchView, DrainView, FingerprintView, HeldEventView, HoldView,
    IdleSessionView, InboxEventView, MissionDetailView, MissionView, ProgressView, ToolCallLogView,
};
use agentmesh_core::events::{DrainCounter, coordinator_text, read_completion_summary};

use agentmesh_core::{LedgerEntry, Task, Timestamp};
use serde::Serialize;
use serde_json::{Map, Value};

/// Where a command's result goes.
pub(crate) struct Output {
    json: bool,
    out: io::Stdout,
}

impl Output {
    /// Output to stdout, as JSON when `json`.
    pub(crate) fn stdout(json: bool) -> Output {
        Output { json, out: io::stdout() }
    }

    /// Whether results are printed as JSON.
    pub(crate) fn is_json(&self) -> bool {
        self.json
    }

    /// Prints the result: `value` as one JSON document with `--json`, else whatever
    /// `human` writes.
    pub(crate) fn emit<T: Serialize + ?Sized>(
        &mut self,
        value: &T,
        human: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> anyhow::Result<()> {
        // Locked for this one result only (see the module docs), and buffered, so
        // the document reaches stdout in one piece.
        let mut out = io::BufWriter::new(self.out.lock());
        if self.json {
            serde_json::to_writer_pretty(&mut out, value)?;
            writeln!(out)?;
        } else {
            human(&mut out)?;
        }
        out.flush()?;
        Ok(())
    }
}

/// A table with a header row and left-aligned columns, the last one unpadded.
pub(crate) struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column titles.
    pub(crate) fn new(header: Vec<&'static str>) -> Table {
        Table { header, rows: Vec::new() }
    }

    /// Adds a row; it must have one cell per column. A control character in a cell
    /// (a row the original wrote may hold an id with a newline) is shown escaped, so
    /// one row is always one line.
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len(), "a row needs one cell per column");
        self.rows.push(cells.into_iter().map(printable).collect());
    }

    /// Writes the table, two spaces between columns.
    pub(crate) fn write(&self, w: &mut dyn Write) -> io::Result<()> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let header: Vec<String> = self.header.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let last = row.len().saturating_sub(1);
            let mut line = String::new();
            for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if i == last {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
                }
            }
            writeln!(w, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// `cell` with every control character escaped (`\n`, `\u{0}`), unchanged when it
/// has none.
fn printable(cell: String) -> String {
    if !cell.chars().any(char::is_control) {
        return cell;
    }
    cell.chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect()
}

/// What a listing holds, in the singular and the plural (`task`, `tasks`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Noun(pub &'static str, pub &'static str);

/// Writes a listing read from `mesh` and names the mesh: `no tasks in mesh "m"`
/// when it is empty, else the rows `write_rows` writes and a last line counting
/// them (`3 tasks in mesh "m"`), so a mistyped `--mesh` never reads as an empty
/// system.
pub(crate) fn write_listing(
    w: &mut dyn Write,
    mesh: &str,
    noun: Noun,
    count: usize,
    write_rows: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    if count == 0 {
        return writeln!(w, "no {} in mesh {mesh:?}", noun.1);
    }
    write_rows(w)?;
    writeln!(w, "{count} {} in mesh {mesh:?}", if count == 1 { noun.0 } else { noun.1 })
}

/// The first line of `text`, cut to at most `max` characters (with an ellipsis).
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or_default().trim();
    let multiline = text.trim().contains('\n');
    if first.chars().count() <= max && !multiline {
        return first.to_owned();
    }
    let kept: String = first.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

/// How long ago `iso` was, compactly (`42s`, `5m`, `3h`, `2d`); `?` when unparsable.
pub(crate) fn age(iso: &str, now: Timestamp) -> String {
    match Timestamp::parse_iso(iso) {
        Some(then) => compact_duration(now.millis() - then.millis()),
        None => "?".to_owned(),
    }
}

/// How long from `now` until `until_ms` (epoch milliseconds), compactly; `0s` once
/// it has passed.
pub(crate) fn remaining(until_ms: i64, now: Timestamp) -> String {
    compact_duration(until_ms.saturating_sub(now.millis()))
}

/// A span of milliseconds in its largest whole unit (`42s`, `5m`, `3h`, `2d`);
/// negative spans count as zero.
fn compact_duration(ms: i64) -> String {
    match ms.max(0) / 1000 {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

/// The compact assignee of a task: `session@node`, or `-`.
pub(crate) fn assignee(task: &Task) -> String {
    match (&task.assigned_session_id, &task.assigned_node_id) {
        (Some(s), Some(n)) => format!("{s}@{n}"),
        (Some(s), None) => s.clone(),
        (None, Some(n)) => format!("@{n}"),
        (None, None) => "-".to_owned(),
    }
}

/// Writes tasks as a table (or `no tasks`); a pending task held by a failed
/// dependency shows as `blocked`, the status `task list --status` filters it by.
pub(crate) fn write_task_table(w: &mut dyn Write, tasks: &[Task], now: Timestamp) -> io::Result<()> {
    if tasks.is_empty() {
        return writeln!(w, "no tasks");
    }
    let mut table = Table::new(vec!["ID", "STATUS", "PRIORITY", "ASSIGNEE", "AGE", "MESSAGE"]);
    for task in tasks {
        let status = if agentmesh_api::wire::is_blocked(task) {
            agentmesh_api::wire::BLOCKED_STATUS.to_owned()
        } else {
            task.status.to_string()
        };
        table.row(vec![
            task.id.clone(),
            status,
            task.priority.map_or("normal", |p| p.as_str()).to_owned(),
            assignee(task),
            age(&task.created_at, now),
            excerpt(&task.message, 60),
        ]);
    }
    table.write(w)
}

/// Writes every set field of a task, one `key: value` per line, in the JSON order;
/// its fencing epoch, `dispatchNonce`, is followed by `epoch`, the name `complete
/// --epoch` goes by.
pub(crate) fn write_task_fields(w: &mut dyn Write, task: &Task) -> io::Result<()> {
    let mut fields = Map::new();
    for (key, value) in json_object(task)? {
        let nonce = key == "dispatchNonce";
        if let (true, Some(progress)) = (key == "progress", &task.progress) {
            fields.insert(key, Value::String(progress_line(progress)));
            continue;
        }
        fields.insert(key, value);
        if nonce {
            fields.insert("epoch".to_owned(), Value::from(task.epoch()));
        }
    }
    write_fields(w, &fields)
}

/// A progress report in words: `40% running the tests (at 2026-12-06T10:00:00Z)`.
pub(crate) fn progress_line(progress: &agentmesh_core::Progress) -> String {
    let mut words = Vec::new();
    if let Some(percent) = progress.percent {
        words.push(format!("{percent}%"));
    }
    if let Some(note) = &progress.note {
        words.push(note.clone());
    }
    words.push(format!("(at {})", progress.at));
    words.join(" ")
}

/// Writes every field of a view, one `key: value` per line, in the JSON order.
pub(crate) fn write_view_fields<T: Serialize>(w: &mut dyn Write, view: &T) -> io::Result<()> {
    write_fields(w, &json_object(view)?)
}

/// `value` as a JSON object, for printing its fields.
fn json_object<T: Serialize>(value: &T) -> io::Result<Map<String, Value>> {
    match serde_json::to_value(value).map_err(io::Error::other)? {
        Value::Object(fields) => Ok(fields),
        _ => Err(io::Error::other("the value does not serialize to a JSON object")),
    }
}

/// Writes `fields` as aligned `key  value` lines, continuation lines indented.
fn write_fields(w: &mut dyn Write, fields: &Map<String, Value>) -> io::Result<()> {
    let width = fields.keys().map(|k| k.chars().count()).max().unwrap_or(0);
    for (key, value) in fields {
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Array(items) if items.iter().all(Value::is_string) => {
                items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
            }
            other => other.to_string(),
        };
        let mut lines = text.lines();
        writeln!(w, "{key:<width$}  {}", lines.next().unwrap_or_default())?;
        for more in lines {
            writeln!(w, "{:<width$}  {more}", "")?;
        }
    }
    Ok(())
}

/// Writes ledger entries, one line each: time, kind, task, session@node.
pub(crate) fn write_ledger_entries(w: &mut dyn Write, entries: &[LedgerEntry]) -> io::Result<()> {
    if entries.is_empty() {
        return writeln!(w, "no ledger entries");
    }
    let mut table = Table::new(vec!["TIME", "KIND", "TASK", "WHO"]);
    for entry in entries {
        let who = match (&entry.session_id, &entry.node_id) {
            (Some(s), Some(n)) => format!("{s}@{n}"),
            (Some(s), None) => s.clone(),
            (None, Some(n)) => format!("@{n}"),
            (None, None) => "-".to_owned(),
        };
        table.row(vec![
            entry.timestamp.clone(),
            entry.kind.clone(),
            entry.task_id().unwrap_or("-").to_owned(),
            who,
        ]);
    }
    table.write(w)
}

/// Writes inbox events (or `no events`): per event a line with its time, name, task
/// and id, then the text the coordinator reads (rendered by the core from the
/// event, as the MCP tools show it), indented; an event without that text gets a
/// one-line summary instead.
pub(crate) fn write_inbox_events(w: &mut dyn Write, events: &[InboxEventView]) -> io::Result<()> {
    if events.is_empty() {
        return writeln!(w, "no events");
    }
    for event in events {
        let payload = event.payload.parse();
        let metadata = payload.get("metadataEvent").and_then(Value::as_object);
        let task = metadata.and_then(|m| m.get("taskId")).and_then(Value::as_str).unwrap_or("-");
        writeln!(
            w,
            "{}  {}  task {task}  id {}",
            Timestamp::from_millis(event.queued_at).iso(),
            event.event.as_str().unwrap_or("?"),
            event.id
        )?;
        let message = payload.as_object().map(coordinator_text).unwrap_or_default();
        let message = cli_words(&message, metadata.and_then(|m| m.get("taskId")).and_then(Value::as_str));
        match Some(message.trim()).filter(|m| !m.is_empty()) {
            Some(message) => {
                for line in message.lines().map(str::trim_end) {
                    if line.is_empty() { writeln!(w)? } else { writeln!(w, "    {line}")? }
                }
            }
            None => writeln!(w, "    {}", one_line_summary(&payload))?,
        }
    }
    Ok(())
}

/// The MCP tools a coordinator text may name, and the command that does the same
/// (`{task}` is the event's task id).
const TOOL_COMMANDS: [(&str, &str); 12] = [
    ("show_task", "`agentmesh task show {task}`"),
    ("requeue_task", "`agentmesh task requeue {task}`"),
    ("cancel_task", "`agentmesh task cancel {task}`"),
    ("set_task_priority", "`agentmesh task priority {task}`"),
    ("enqueue_task", "`agentmesh task add`"),
    ("list_tasks", "`agentmesh task list`"),
    ("ledger_tail", "`agentmesh ledger tail`"),
    ("mesh_status", "`agentmesh status`"),
    ("wait_for_mesh_events", "`agentmesh events watch`"),
    ("get_pending_mesh_events", "`agentmesh events drain`"),
    ("list_held_events", "`agentmesh events held`"),
    ("send_to_session", "a session delivery (the MCP tool send_to_session; the CLI has no command for it)"),
];

/// The note a coordinator text ends a cut summary with, and the same for the CLI.
const CUT_NOTE: (&str, &str) = (
    "[summary cut here: show_task gives the whole summary]",
    "[summary cut here: `agentmesh task show {task}` gives the whole summary]",
);

/// A coordinator text as the command line tells it: each MCP tool it names
/// replaced by the `agentmesh` command that does the same, with the event's task
/// (`ID` when it names none). The worker's own words, below the text's
/// `--- ... final summary ---` line, are left as written, but for the note that
/// ends a cut summary.
pub(crate) fn cli_words(text: &str, task: Option<&str>) -> String {
    let task = task.map(str::trim).filter(|t| !t.is_empty()).unwrap_or("ID");
    let (head, summary) = match text.match_indices("\n--- ").find(|(at, _)| {
        text[at + 1..].lines().next().is_some_and(|line| line.ends_with(" final summary ---"))
    }) {
        Some((at, _)) => text.split_at(at),
        None => (text, ""),
    };
    let mut out = String::with_capacity(text.len() + 64);
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match TOOL_COMMANDS.iter().find(|(tool, _)| *tool == word.as_str()) {
            Some((_, command)) => out.push_str(&command.replace("{task}", task)),
            None => out.push_str(word),
        }
        word.clear();
    };
    for c in head.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    match summary.strip_suffix(CUT_NOTE.0) {
        Some(kept) => {
            out.push_str(kept);
            out.push_str(&CUT_NOTE.1.replace("{task}", task));
        }
        None => out.push_str(summary),
    }
    out
}

/// What a drain counter counted, in words (`2 left for another coordinator`).
fn counter_words(counter: DrainCounter, n: u64) -> String {
    let what = match counter {
        DrainCounter::V2Delivered => "routed here by address or scope",
        DrainCounter::V2RoutedAway => "left for another coordinator",
        DrainCounter::V2DedupSkipped => "skipped as already delivered",
        DrainCounter::V2ValidationFailedAccepted => "invalid but delivered (enforce mode is off)",
        DrainCounter::V2ReattributedToDrainer => "addressed to this coordinator's earlier run",
        DrainCounter::V1BroadcastAccepted => "unversioned, delivered as broadcasts",
        DrainCounter::V2ValidationFailedQuarantined => "invalid, held back",
        DrainCounter::V1UnversionedQuarantined => "unversioned, held back",
    };
    format!("{n} {what}")
}

/// One line about an event that carries no coordinator text: its node label and
/// the worker's summary (or failure reason), as far as the event has them.
fn one_line_summary(payload: &Value) -> String {
    let metadata = payload.get("metadataEvent").and_then(Value::as_object);
    let label = payload.get("nodeLabel").and_then(Value::as_str).map(str::trim).filter(|l| !l.is_empty());
    let said = metadata
        .and_then(|m| read_completion_summary(m).or_else(|| m.get("reason").and_then(Value::as_str)))
        .map(|s| excerpt(s, 100))
        .filter(|s| !s.is_empty());
    match (label, said) {
        (Some(label), Some(said)) => format!("{label}: {said}"),
        (Some(label), None) => label.to_owned(),
        (None, Some(said)) => said,
        (None, None) => "(no text)".to_owned(),
    }
}

/// Writes a drain from `mesh`: the delivered events (or `no events in mesh "m"`),
/// then one line with how many were delivered and held back and, in words,
/// every counter that is not zero.
pub(crate) fn write_drain(w: &mut dyn Write, mesh: &str, drain: &DrainView) -> io::Result<()> {
    if drain.events.is_empty() {
        writeln!(w, "no events in mesh {mesh:?}")?;
    } else {
        write_inbox_events(w, &drain.events)?;
    }
    let counters: Vec<String> = DrainCounter::ALL
        .into_iter()
        .filter(|c| drain.counters.get(*c) > 0)
        .map(|c| counter_words(c, drain.counters.get(c)))
        .collect();
    write!(w, "delivered {}, held back {}", drain.events.len(), drain.quarantined.len())?;
    if !drain.quarantined.is_empty() {
        write!(w, " (list them with `agentmesh events held`)")?;
    }
    if counters.is_empty() { writeln!(w) } else { writeln!(w, "; {}", counters.join(", ")) }
}

/// A mission's progress in words: `3/5 done (60%)`.
pub(crate) fn progress_summary(p: &ProgressView) -> String {
    format!("{}/{} done ({}%)", p.completed, p.total, p.percent_complete)
}

/// Writes missions as a table (or `no missions`).
pub(crate) fn write_mission_table(
    w: &mut dyn Write,
    missions: &[MissionView],
    now: Timestamp,
) -> io::Result<()> {
    if missions.is_empty() {
        return writeln!(w, "no missions");
    }
    let mut table = Table::new(vec!["ID", "STATUS", "TITLE", "PROGRESS", "UPDATED"]);
    for mission in missions {
        table.row(vec![
            mission.id.clone(),
            mission.status.clone(),
            excerpt(&mission.title, 40),
            progress_summary(&mission.progress),
            age(&mission.updated_at, now),
        ]);
    }
    table.write(w)
}

/// Writes one mission's fields (progress in words, with the count of every
/// status), then its tasks as a table.
pub(crate) fn write_mission_detail(
    w: &mut dyn Write,
    detail: &MissionDetailView,
    now: Timestamp,
) -> io::Result<()> {
    let mut fields = json_object(&detail.mission)?;
    let p = &detail.mission.progress;
    let counts = format!(
        "{}; pending {}, assigned {}, completed {}, failed {}, cancelled {}",
        progress_summary(p),
        p.pending,
        p.assigned,
        p.completed,
        p.failed,
        p.cancelled
    );
    fields.insert("progress".to_owned(), Value::String(counts));
    write_fields(w, &fields)?;
    writeln!(w)?;
    write_task_table(w, &detail.tasks, now)
}

/// Writes idle sessions as a table (or `no idle sessions`).
pub(crate) fn write_idle_session_table(
    w: &mut dyn Write,
    sessions: &[IdleSessionView],
    now: Timestamp,
) -> io::Result<()> {
    if sessions.is_empty() {
        return writeln!(w, "no idle sessions");
    }
    let mut table = Table::new(vec!["NODE", "SESSION", "PROVIDER", "EXPIRES IN"]);
    for session in sessions {
        let expires_in = remaining(session.expires_at, now);
        table.row(vec![
            session.node_id.clone(),
            session.session_id.clone(),
            session.provider_type.clone(),
            expires_in,
        ]);
    }
    table.write(w)
}

/// Writes deliveries as a table (or `no active deliveries`).
pub(crate) fn write_delivery_table(
    w: &mut dyn Write,
    deliveries: &[DeliveryView],
    now: Timestamp,
) -> io::Result<()> {
    if deliveries.is_empty() {
        return writeln!(w, "no active deliveries");
    }
    let mut table =
        Table::new(vec!["ID", "SESSION", "KIND", "PRIORITY", "STATUS", "ATTEMPTS", "AGE", "MESSAGE"]);
    for d in deliveries {
        table.row(vec![
            d.id.clone(),
            d.session_id.clone().unwrap_or_else(|| "-".to_owned()),
            d.kind.clone(),
            d.priority.to_string(),
            d.status.clone(),
            d.attempt_count.to_string(),
            age(&d.created_at, now),
            excerpt(&d.message, 60),
        ]);
    }
    table.write(w)
}

/// Writes direct dispatches as a table (or `no active dispatches`).
pub(crate) fn write_dispatch_table(
    w: &mut dyn Write,
    dispatches: &[DispatchView],
    now: Timestamp,
) -> io::Result<()> {
    if dispatches.is_empty() {
        return writeln!(w, "no active dispatches");
    }
    let mut table = Table::new(vec!["TASK", "NODE", "SESSION", "STATUS", "VIA", "AGE", "MESSAGE"]);
    for d in dispatches {
        table.row(vec![
            d.task_id.clone(),
            d.node_id.clone().unwrap_or_else(|| "-".to_owned()),
            d.session_id.clone().unwrap_or_else(|| "-".to_owned()),
            d.status.clone(),
            d.via.clone(),
            age(&d.dispatched_at, now),
            excerpt(&d.message, 60),
        ]);
    }
    table.write(w)
}

/// Writes in-flight holds as a table (or `no in-flight holds`).
pub(crate) fn write_hold_table(w: &mut dyn Write, holds: &[HoldView], now: Timestamp) -> io::Result<()> {
    if holds.is_empty() {
        return writeln!(w, "no in-flight holds");
    }
    let mut table = Table::new(vec!["TASK", "HELD", "REASON", "IDLE SINCE ACK", "READ FAILURES"]);
    for h in holds {
        table.row(vec![
            h.task_id.clone(),
            age(&h.held_at, now),
            h.hold_reason.clone(),
            h.first_idle_since_ack.as_deref().map_or_else(|| "-".to_owned(), |at| age(at, now)),
            h.read_failure_count.to_string(),
        ]);
    }
    table.write(w)
}

/// Writes held events as a table (or `no held events`).
pub(crate) fn write_held_table(w: &mut dyn Write, held: &[HeldEventView], now: Timestamp) -> io::Result<()> {
    if held.is_empty() {
        return writeln!(w, "no held events");
    }
    let mut table = Table::new(vec!["ID", "HELD", "REASON", "EVENT", "TASK", "NODE"]);
    for h in held {
        table.row(vec![
            h.held_entry_id.clone(),
            age(&h.held_at, now),
            h.reason.clone().unwrap_or_else(|| "-".to_owned()),
            h.event.clone().unwrap_or_else(|| "-".to_owned()),
            h.task_id.clone().unwrap_or_else(|| "-".to_owned()),
            h.node_id.clone().unwrap_or_else(|| "-".to_owned()),
        ]);
    }
    table.write(w)
}

/// Writes completion fingerprints as a table (or `no completion fingerprints`).
pub(crate) fn write_fingerprint_table(
    w: &mut dyn Write,
    fingerprints: &[FingerprintView],
    now: Timestamp,
) -> io::Result<()> {
    if fingerprints.is_empty() {
        return writeln!(w, "no completion fingerprints");
    }
    let mut table = Table::new(vec!["TASK", "SESSION", "EXPIRES IN", "FINGERPRINT"]);
    for f in fingerprints {
        table.row(vec![
            f.task_id.clone().unwrap_or_else(|| "-".to_owned()),
            f.session_id.clone().unwrap_or_else(|| "-".to_owned()),
            remaining(f.expires_at, now),
            f.fingerprint.clone(),
        ]);
    }
    table.write(w)
}

/// Writes completion conflicts as a table (or `no completion conflicts`): the
/// suppressed task and session beside the ones that held the fingerprint first.
pub(crate) fn write_conflict_table(w: &mut dyn Write, conflicts: &[ConflictView]) -> io::Result<()> {
    if conflicts.is_empty() {
        return writeln!(w, "no completion conflicts");
    }
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    let mut table = Table::new(vec!["TIME", "EVENT", "SUPPRESSED", "BY SESSION", "FIRST", "FIRST SESSION"]);
    for c in conflicts {
        table.row(vec![
            c.created_at.clone(),
            c.event.clone(),
            dash(&c.conflicting_task_id),
            dash(&c.conflicting_session_id),
            dash(&c.original_task_id),
            dash(&c.original_session_id),
        ]);
    }
    table.write(w)
}

/// Writes the rate guard's log: one line per caller role with its calls by tool,
/// then the calls, newest first (or `no recent tool calls`).
pub(crate) fn write_tool_call_log(w: &mut dyn Write, log: &ToolCallLogView) -> io::Result<()> {
    if log.by_role.is_empty() {
        return writeln!(w, "no recent tool calls");
    }
    for role in &log.by_role {
        let tools: Vec<String> = role.by_tool.iter().map(|t| format!("{} {}", t.tool, t.calls)).collect();
        writeln!(w, "{}: {} call(s) ({})", role.caller_role, role.calls, tools.join(", "))?;
    }
    writeln!(w)?;
    let mut table = Table::new(vec!["TIME", "ROLE", "SESSION", "TOOL"]);
    for call in &log.calls {
        table.row(vec![
            Timestamp::from_millis(call.called_at).iso(),
            call.caller_role.clone(),
            call.session_id.clone().unwrap_or_else(|| "-".to_owned()),
            call.tool.clone(),
        ]);
    }
    table.write(w)
}

#[cfg(test)]
mod tests {
    use agentmesh_core::{IdleSession, Mission, MissionProgress};

    use super::*;

    #[test]
    fn tables_align_and_do_not_pad_the_last_column() {
        let mut t = Table::new(vec!["ID", "STATUS"]);
        t.row(vec!["a-long-id".into(), "pending".into()]);
        t.row(vec!["b".into(), "assigned".into()]);
        let mut buf = Vec::new();
        t.write(&mut buf).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "ID         STATUS\na-long-id  pending\nb          assigned\n"
        );
    }

    #[test]
    fn a_control_character_in_a_cell_never_starts_a_line() {
        let mut t = Table::new(vec!["ID", "STATUS"]);
        t.row(vec!["x\u{0}y\nz".into(), "pending".into()]);
        let mut buf = Vec::new();
        t.write(&mut buf).unwrap();
        assert_eq!(String::from_utf8(buf).unwrap(), "ID          STATUS\nx\\u{0}y\\nz  pending\n");
    }

    #[test]
    fn listings_name_their_mesh() {
        let write = |count: usize| {
            let mut buf = Vec::new();
            write_listing(&mut buf, "prod", Noun("task", "tasks"), count, |w| writeln!(w, "ROWS")).unwrap();
            String::from_utf8(buf).unwrap()
        };
        assert_eq!(write(0), "no tasks in mesh \"prod\"\n");
        assert_eq!(write(1), "ROWS\n1 task in mesh \"prod\"\n");
        assert_eq!(write(2), "ROWS\n2 tasks in mesh \"prod\"\n");
    }

    #[test]
    fn excerpts_and_ages_are_compact() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("a very long message indeed", 10), "a very lo…");
        assert_eq!(excerpt("first\nsecond", 20), "first…");
        let now = Timestamp::from_millis(1_735_689_600_000);
        assert_eq!(age(&now.plus_millis(-42_000).iso(), now), "42s");
        assert_eq!(age(&now.plus_millis(-7_200_000).iso(), now), "2h");
        assert_eq!(age("garbage", now), "?");
    }

    #[test]
    fn coordinator_texts_name_commands_instead_of_tools() {
        let text = "[System] n1 has stopped.\nTask t1 failed: boom\n\nshow_task shows the task; requeue_task \
                    puts it back, and cancel_task drops it. my_show_task stays.";
        let shown = cli_words(text, Some("t1"));
        assert_eq!(
            shown,
            "[System] n1 has stopped.\nTask t1 failed: boom\n\n`agentmesh task show t1` shows the task; \
             `agentmesh task requeue t1` puts it back, and `agentmesh task cancel t1` drops it. my_show_task \
             stays."
        );
        let completion = "[System] n1 has completed (show_task shows the whole task).\n\n\
                          --- n1 final summary ---\nran show_task by hand\n…[summary cut here: show_task \
                          gives the whole summary]";
        let shown = cli_words(completion, None);
        assert!(shown.starts_with("[System] n1 has completed (`agentmesh task show ID` shows"), "{shown}");
        assert!(shown.contains("\nran show_task by hand\n"), "the worker's words stay: {shown}");
        assert!(
            shown.ends_with("[summary cut here: `agentmesh task show ID` gives the whole summary]"),
            "{shown}"
        );
        for (tool, _) in TOOL_COMMANDS {
            assert!(!cli_words(tool, Some("t")).contains(tool) || tool == "send_to_session", "{tool}");
        }
    }

    #[test]
    fn a_task_shows_its_epoch_by_both_names() {
        let mut task = Task::new("t1", "m", "work", "2025-01-01T00:00:00.000Z");
        let shown = |task: &Task| {
            let mut buf = Vec::new();
            write_task_fields(&mut buf, task).unwrap();
            String::from_utf8(buf).unwrap()
        };
        assert!(!shown(&task).contains("epoch"), "no claim, no epoch");
        task.dispatch_nonce = Some(3);
        let text = shown(&task);
        let value = |key: &str| {
            text.lines().find_map(|l| l.strip_prefix(key).filter(|rest| rest.starts_with(' '))).map(str::trim)
        };
        assert_eq!(value("dispatchNonce"), Some("3"), "{text}");
        assert_eq!(value("epoch"), Some("3"), "{text}");
    }

    #[test]
    fn drain_counters_read_as_words() {
        let counters = agentmesh_core::events::DrainCounters {
            v2_delivered: 1,
            v2_routed_away: 2,
            ..Default::default()
        };
        let drain = DrainView { events: vec![], quarantined: vec![], counters };
        let mut buf = Vec::new();
        write_drain(&mut buf, "m", &drain).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(
            text,
            "no events in mesh \"m\"\ndelivered 0, held back 0; 1 routed here by address or scope, 2 left for \
             another coordinator\n"
        );
        assert!(!text.contains("v2"), "{text}");
    }

    #[test]
    fn remaining_time_counts_down_to_zero() {
        let now = Timestamp::from_millis(1_735_689_600_000);
        assert_eq!(remaining(now.millis() + 90_000, now), "1m");
        assert_eq!(remaining(now.millis() + 3 * 86_400_000, now), "3d");
        assert_eq!(remaining(now.millis() - 5_000, now), "0s");
    }

    #[test]
    fn wire_views_use_the_original_names() {
        let progress = MissionProgress { total: 5, pending: 2, completed: 3, ..MissionProgress::default() };
        let mission = Mission {
            id: "m1".into(),
            mesh_id: "mesh".into(),
            title: "Harden login".into(),
            goal: String::new(),
            status: "active".into(),
            source: None,
            created_at: "2025-01-01T00:00:00.000Z".into(),
            updated_at: "2025-01-01T00:00:00.000Z".into(),
        };
        let view = MissionView::new(mission, progress);
        assert_eq!(progress_summary(&view.progress), "3/5 done (60%)");
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["meshId"], "mesh");
        assert_eq!(json["progress"]["percentComplete"], 60);

        let idle = IdleSessionView::from(IdleSession {
            mesh_id: "mesh".into(),
            node_id: "n1".into(),
            session_id: "s1".into(),
            provider_type: "claude-cli".into(),
            expires_at_ms: 1_735_689_600_000,
            metadata: None,
        });
        let json = serde_json::to_value(&idle).unwrap();
        assert_eq!(json["expiresAt"], 1_735_689_600_000_i64);
        assert_eq!(json["providerType"], "claude-cli");
        assert!(json.get("metadata").is_none(), "no metadata, no field");
    }
}
