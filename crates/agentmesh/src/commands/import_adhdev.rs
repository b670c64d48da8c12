//! `agentmesh import-adhdev <ledger-dir>`: brings an original ADHDev ledger
//! directory into the data dir, losing nothing and importing nothing twice.
//!
//! Three kinds of source, in this order:
//! - the database (`mesh-runtime.db`, and an older `beads.db` beside or instead of
//!   it): every row of every mesh, through the store's
//!   `import_original_database` (the source file is read from a copy, never
//!   changed);
//! - every `<mesh>.queue.json`: the legacy queue parser, all or nothing per file;
//!   the file is left in place, and tasks whose id exists are skipped;
//! - every `*.pending-events.jsonl`: the store's legacy inbox import, which
//!   claims, imports and deletes each file; lines that are not events are counted
//!   and reported, never fatal.
//!
//! Rows already present are skipped (by id, or by event fingerprint), so running
//! the import again imports nothing. It writes to the local data dir only: a
//! daemon has no import route, so `--server` is refused.

use std::path::{Path, PathBuf};

use agentmesh_core::InvalidInput;
use agentmesh_sqlite::{DB_FILE_NAME, LEGACY_DB_FILE_NAME, OriginalDbReport, SqliteStore};
use agentmesh_store::legacy::{LegacyEventsReport, parse_legacy_queue, safe_mesh_id};
use anyhow::Context as _;
use serde::Serialize;
use serde_json::Value;

use super::Context;
use crate::cli::ImportAdhdevArgs;
use crate::now;
use crate::output::Output;

/// The name ending of a legacy queue file.
const QUEUE_SUFFIX: &str = ".queue.json";

/// Everything one import did, printed as the `--json` document.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ImportSummary {
    /// The ledger directory read.
    ledger_dir: String,
    /// One entry per database file found.
    databases: Vec<DatabaseImport>,
    /// One entry per legacy queue file found.
    queue_files: Vec<QueueFileImport>,
    /// The legacy inbox files.
    pending_events: LegacyEventsReport,
}

/// One database file.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DatabaseImport {
    file: String,
    #[serde(flatten)]
    report: OriginalDbReport,
}

/// One legacy queue file.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct QueueFileImport {
    file: String,
    mesh_id: String,
    imported: u64,
    skipped: u64,
    /// Why the file was refused whole, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Runs `import-adhdev`.
pub(super) fn run(ctx: &Context, args: ImportAdhdevArgs, out: &mut Output) -> anyhow::Result<()> {
    if let Some(url) = &ctx.server {
        return Err(InvalidInput::new(
            "server",
            format!("import-adhdev writes to the local data dir only; run it without --server (not {url})"),
        )
        .into());
    }
    let dir = &args.ledger_dir;
    if !dir.is_dir() {
        return Err(InvalidInput::new("ledgerDir", format!("{} is not a directory", dir.display())).into());
    }
    let store = ctx.store_config().open_sqlite()?;

    let mut databases = Vec::new();
    for name in [DB_FILE_NAME, LEGACY_DB_FILE_NAME] {
        let file = dir.join(name);
        if !file.is_file() || same_file(&file, store.path()) {
            continue;
        }
        let report = store
            .import_original_database(&file)
            .with_context(|| format!("failed to import {}", file.display()))?;
        databases.push(DatabaseImport { file: file.display().to_string(), report });
    }

    let mut queue_files = Vec::new();
    for file in queue_file_paths(dir)? {
        queue_files.push(import_queue_file(&store, &file));
    }

    let pending_events = store
        .import_legacy_pending_events(dir, now())
        .with_context(|| format!("failed to import the pending-events files of {}", dir.display()))?;

    let summary =
        ImportSummary { ledger_dir: dir.display().to_string(), databases, queue_files, pending_events };
    out.emit(&summary, |w| write_summary(w, &summary))
}

/// Whether two paths name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
}

/// The `<mesh>.queue.json` files of `dir`, sorted by name.
fn queue_file_paths(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("failed to list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("failed to list {}", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.len() > QUEUE_SUFFIX.len() && name.ends_with(QUEUE_SUFFIX) && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Imports one legacy queue file; a malformed file is reported, not fatal.
fn import_queue_file(store: &SqliteStore, file: &Path) -> QueueFileImport {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let stem = name.strip_suffix(QUEUE_SUFFIX).unwrap_or(name);
    let mut line = QueueFileImport {
        file: file.display().to_string(),
        mesh_id: stem.to_owned(),
        imported: 0,
        skipped: 0,
        error: None,
    };
    let parsed = std::fs::read_to_string(file).map_err(|e| e.to_string()).and_then(|text| {
        line.mesh_id = mesh_of_queue(&text, stem);
        parse_legacy_queue(file, &text, &line.mesh_id).map_err(|e| e.to_string())
    });
    let total = match parsed {
        Ok(tasks) => tasks.len() as u64,
        Err(err) => {
            line.error = Some(err);
            return line;
        }
    };
    match store.import_legacy_queue_file(&line.mesh_id, file) {
        Ok(imported) => {
            line.imported = imported;
            line.skipped = total.saturating_sub(imported);
        }
        Err(err) => line.error = Some(err.to_string()),
    }
    line
}

/// The mesh a queue file belongs to. The file name is the mesh id made safe for
/// a file name, so the entries' own `meshId` is preferred when it maps to it.
fn mesh_of_queue(text: &str, stem: &str) -> String {
    let first_mesh = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|doc| doc.as_array()?.first()?.get("meshId")?.as_str().map(str::to_owned));
    match first_mesh {
        Some(mesh) if safe_mesh_id(&mesh) == stem => mesh,
        _ => stem.to_owned(),
    }
}

fn write_summary(w: &mut dyn std::io::Write, s: &ImportSummary) -> std::io::Result<()> {
    if s.databases.is_empty() {
        writeln!(w, "database: none found ({DB_FILE_NAME} or {LEGACY_DB_FILE_NAME})")?;
    }
    for db in &s.databases {
        writeln!(w, "database {} (meshes: {})", db.file, db.report.meshes.join(", "))?;
        for t in &db.report.tables {
            write!(w, "  {:<24} imported {}, already present {}", t.what, t.imported, t.skipped)?;
            if t.bad > 0 {
                write!(w, ", unreadable {}", t.bad)?;
            }
            writeln!(w)?;
        }
    }
    if s.queue_files.is_empty() {
        writeln!(w, "queue files: none found")?;
    }
    for q in &s.queue_files {
        match &q.error {
            Some(err) => writeln!(w, "queue file {} (mesh {}): refused: {err}", q.file, q.mesh_id)?,
            None => writeln!(
                w,
                "queue file {} (mesh {}): imported {} task(s), already present {}",
                q.file, q.mesh_id, q.imported, q.skipped
            )?,
        }
    }
    let p = &s.pending_events;
    writeln!(
        w,
        "pending-events files: {} found, {} event(s) imported, {} bad line(s) skipped, {} file(s) removed, {} kept for a retry",
        p.files_scanned, p.events_imported, p.lines_skipped, p.files_removed, p.files_retained
    )
}
