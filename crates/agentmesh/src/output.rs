//! Writing results: one JSON document with `--json`, readable lines otherwise.
//!
//! Every command ends in exactly one [`Output::emit`] call, which is what keeps
//! `--json` output a single document. The JSON shapes are the core types' own
//! serde (camelCase, the original's field names); this module adds no wrappers.
//! The helpers below render the human form: aligned tables, relative ages and
//! one-line excerpts. Write errors (a closed pipe) are returned, never panicked on.

use std::io::{self, Write};

use agentmesh_core::{LedgerEntry, Task, Timestamp};
use serde::Serialize;
use serde_json::Value;

/// Where a command's result goes.
pub struct Output {
    json: bool,
    out: Box<dyn Write>,
}

impl Output {
    /// Output to stdout, as JSON when `json`.
    pub fn stdout(json: bool) -> Output {
        Output { json, out: Box::new(io::stdout().lock()) }
    }

    /// Whether results are printed as JSON.
    pub fn is_json(&self) -> bool {
        self.json
    }

    /// Prints the result: `value` as one JSON document with `--json`, else whatever
    /// `human` writes.
    pub fn emit<T: Serialize + ?Sized>(
        &mut self,
        value: &T,
        human: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> anyhow::Result<()> {
        if self.json {
            serde_json::to_writer_pretty(&mut self.out, value)?;
            writeln!(self.out)?;
        } else {
            human(&mut self.out)?;
        }
        self.out.flush()?;
        Ok(())
    }
}

/// A table with a header row and left-aligned columns, the last one unpadded.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column titles.
    pub fn new(header: Vec<&'static str>) -> Table {
        Table { header, rows: Vec::new() }
    }

    /// Adds a row; it must have one cell per column.
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len(), "a row needs one cell per column");
        self.rows.push(cells);
    }

    /// Writes the table, two spaces between columns.
    pub fn write(&self, w: &mut dyn Write) -> io::Result<()> {
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

/// The first line of `text`, cut to at most `max` characters (with an ellipsis).
pub fn excerpt(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or_default().trim();
    let multiline = text.trim().contains('\n');
    if first.chars().count() <= max && !multiline {
        return first.to_owned();
    }
    let kept: String = first.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

/// How long ago `iso` was, compactly (`42s`, `5m`, `3h`, `2d`); `?` when unparsable.
pub fn age(iso: &str, now: Timestamp) -> String {
    let Some(then) = Timestamp::parse_iso(iso) else {
        return "?".to_owned();
    };
    let secs = (now.millis() - then.millis()).max(0) / 1000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

/// The compact assignee of a task: `session@node`, or `-`.
pub fn assignee(task: &Task) -> String {
    match (&task.assigned_session_id, &task.assigned_node_id) {
        (Some(s), Some(n)) => format!("{s}@{n}"),
        (Some(s), None) => s.clone(),
        (None, Some(n)) => format!("@{n}"),
        (None, None) => "-".to_owned(),
    }
}

/// Writes tasks as a table (or `no tasks`); a pending task held by a failed
/// dependency shows as `blocked`.
pub fn write_task_table(w: &mut dyn Write, tasks: &[Task], now: Timestamp) -> io::Result<()> {
    if tasks.is_empty() {
        return writeln!(w, "no tasks");
    }
    let mut table = Table::new(vec!["ID", "STATUS", "PRIORITY", "ASSIGNEE", "AGE", "MESSAGE"]);
    for task in tasks {
        let status = match &task.blocked_reason {
            Some(_) if task.status == agentmesh_core::TaskStatus::Pending => "blocked".to_owned(),
            _ => task.status.to_string(),
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

/// Writes every set field of a task, one `key: value` per line, in the JSON order.
pub fn write_task_fields(w: &mut dyn Write, task: &Task) -> io::Result<()> {
    let value = serde_json::to_value(task).map_err(io::Error::other)?;
    let Value::Object(fields) = value else {
        return Err(io::Error::other("a task serializes to a JSON object"));
    };
    let width = fields.keys().map(|k| k.chars().count()).max().unwrap_or(0);
    for (key, value) in &fields {
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
pub fn write_ledger_entries(w: &mut dyn Write, entries: &[LedgerEntry]) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
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
    fn excerpts_and_ages_are_compact() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("a very long message indeed", 10), "a very lo…");
        assert_eq!(excerpt("first\nsecond", 20), "first…");
        let now = Timestamp::from_millis(1_735_689_600_000);
        assert_eq!(age(&now.plus_millis(-42_000).iso(), now), "42s");
        assert_eq!(age(&now.plus_millis(-7_200_000).iso(), now), "2h");
        assert_eq!(age("garbage", now), "?");
    }
}
