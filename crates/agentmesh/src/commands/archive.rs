//! `agentmesh archive`: the mesh's archive of finished tasks and old ledger
//! entries. `status` says what it holds; `retention` shows or sets the mesh's
//! own windows; `export` writes it out as gzip-compressed JSON lines and, with
//! `--drop`, deletes from the archive what the file holds once it is synced.

use std::fs::OpenOptions;
use std::io::{BufWriter, Write};

use agentmesh_api::wire::SliceParams;
use agentmesh_api::{ArchivedTasksParams, MeshApi};
use agentmesh_core::retention::{ArchiveMark, MeshRetention, Window};
use agentmesh_store::archive::ArchiveState;
use anyhow::Context as _;
use flate2::Compression;
use flate2::write::GzEncoder;

use super::Context;
use crate::cli::{ArchiveCommand, ArchiveExportArgs, ArchiveRetentionArgs, ArchiveRunArgs};
use crate::output::Output;

/// Tasks or entries read per request while exporting.
const PAGE: u32 = 500;

/// Runs `archive ...`.
pub(super) fn run(ctx: &Context, command: ArchiveCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        ArchiveCommand::Status => {
            let state = ctx.read_api()?.archive(ctx.mesh())?;
            out.emit(&state, |w| write_state(w, ctx.mesh(), &state))
        }
        ArchiveCommand::Retention(args) => retention(ctx, args, out),
        ArchiveCommand::Export(args) => export(ctx, args, out),
        ArchiveCommand::Run(args) => run_now(ctx, &args, out),
        ArchiveCommand::Compact => super::backup::compact(ctx, out),
    }
}

fn write_state(w: &mut dyn Write, mesh: &str, state: &ArchiveState) -> std::io::Result<()> {
    writeln!(
        w,
        "archive of mesh {mesh}: {} task(s), {} ledger entr(ies)",
        state.tasks, state.ledger_entries
    )?;
    if state.ledger_through > 0 {
        writeln!(w, "  ledger archived through sequence {}", state.ledger_through)?;
    }
    if state.dropped_through > 0 {
        writeln!(
            w,
            "  exported and dropped through sequence {} (a cursor before it is answered cursor_expired)",
            state.dropped_through
        )?;
    }
    write_retention(w, &state.retention)
}

fn write_retention(w: &mut dyn Write, retention: &MeshRetention) -> std::io::Result<()> {
    let shown = |window: Option<Window>| window.map_or_else(|| "the daemon's".to_owned(), |w| w.to_string());
    writeln!(
        w,
        "  retention: finished tasks {}, ledger {}, drained events {}",
        shown(retention.tasks),
        shown(retention.ledger),
        shown(retention.events)
    )
}

fn retention(ctx: &Context, args: ArchiveRetentionArgs, out: &mut Output) -> anyhow::Result<()> {
    if !args.clear && args.tasks.is_none() && args.ledger.is_none() && args.events.is_none() {
        let state = ctx.read_api()?.archive(ctx.mesh())?;
        return out.emit(&state.retention, |w| write_retention(w, &state.retention));
    }
    let api = ctx.api()?;
    let mut windows = if args.clear { MeshRetention::default() } else { api.archive(ctx.mesh())?.retention };
    if let Some(tasks) = args.tasks {
        windows.tasks = Some(tasks);
    }
    if let Some(ledger) = args.ledger {
        windows.ledger = Some(ledger);
    }
    if let Some(events) = args.events {
        windows.events = Some(events);
    }
    let state = api.set_retention(ctx.mesh(), windows)?;
    out.emit(&state.retention, |w| write_retention(w, &state.retention))
}

/// Rows each step of `archive run` moves at most.
const RUN_STEP: u32 = 500;

/// `archive run`: steps until nothing outlived its window, on the data dir's
/// store (never through a daemon: a daemon runs the same steps by itself).
fn run_now(ctx: &Context, args: &ArchiveRunArgs, out: &mut Output) -> anyhow::Result<()> {
    if ctx.server_on_command_line() {
        anyhow::bail!("archive run works on the data dir's store; a daemon archives by itself every minute");
    }
    let store = ctx.store()?;
    let policy = agentmesh_core::retention::RetentionPolicy {
        tasks: args.retain_tasks,
        ledger: args.retain_ledger,
        ..agentmesh_core::retention::RetentionPolicy::default()
    };
    let now = (ctx.store_config().clock())();
    let mut total = agentmesh_store::archive::ArchiveReport::default();
    loop {
        let step = agentmesh_store::retry::retrying(|| store.archive_expired(&policy, now, RUN_STEP))?;
        total.add(step);
        if total.tasks + total.ledger_entries > 0 && step.more {
            eprintln!("  {} task(s), {} ledger entr(ies) archived so far", total.tasks, total.ledger_entries);
        }
        if !step.more {
            break;
        }
    }
    let (tasks, entries) = (total.tasks, total.ledger_entries);
    out.emit(&serde_json::json!({ "tasksArchived": tasks, "ledgerEntriesArchived": entries }), |w| {
        writeln!(w, "archived {tasks} task(s) and {entries} ledger entr(ies)")
    })
}

/// What an export wrote.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Exported {
    file: String,
    tasks: u64,
    ledger_entries: u64,
    /// Through where the archive was dropped, with `--drop`.
    #[serde(skip_serializing_if = "Option::is_none")]
    dropped: Option<ArchiveMark>,
}

fn export(ctx: &Context, args: ArchiveExportArgs, out: &mut Output) -> anyhow::Result<()> {
    let api = if args.drop { ctx.api()? } else { ctx.read_api()? };
    let mesh = ctx.mesh();
    // The end of what exists now: rows archived while the export runs wait
    // for the next one, so --drop deletes exactly what the file holds.
    let end = api.archive(mesh)?.end;
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    // The archive is the mesh's data: readable by its owner only, as the
    // database is.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(&args.output).with_context(|| {
        format!("cannot create {} (an export never writes over a file)", args.output.display())
    })?;
    let mut gz = GzEncoder::new(BufWriter::new(file), Compression::default());
    let tasks = write_tasks(api, mesh, end.tasks_through, &mut gz)?;
    let ledger_entries = write_ledger(api, mesh, end.ledger_through, &mut gz)?;
    let file = gz.finish()?.into_inner().map_err(|e| e.into_error())?;
    file.sync_all().with_context(|| format!("cannot sync {}", args.output.display()))?;
    let dropped = if args.drop { Some(api.drop_archived(mesh, end)?) } else { None };
    let shown = args.output.display().to_string();
    let report = Exported { file: shown.clone(), tasks, ledger_entries, dropped };
    out.emit(&report, |w| {
        writeln!(w, "exported {tasks} task(s) and {ledger_entries} ledger entr(ies) to {shown}")?;
        if let Some(mark) = dropped {
            if mark.ledger_through < end.ledger_through {
                writeln!(
                    w,
                    "dropped them from the archive, the ledger only through sequence {}: a webhook \
                     subscription has not sent what follows",
                    mark.ledger_through
                )?;
            } else {
                writeln!(w, "dropped them from the archive")?;
            }
        }
        Ok(())
    })
}

/// Writes the archived tasks up to position `through`, one line each.
fn write_tasks(api: &dyn MeshApi, mesh: &str, through: u64, sink: &mut dyn Write) -> anyhow::Result<u64> {
    let mut after = 0;
    let mut written = 0;
    while after < through {
        let page = api.archived_tasks(mesh, ArchivedTasksParams { after, limit: Some(PAGE) })?;
        for archived in page.tasks.iter().filter(|t| t.pos <= through) {
            serde_json::to_writer(
                &mut *sink,
                &serde_json::json!({ "type": "task", "pos": archived.pos, "task": archived.task }),
            )?;
            sink.write_all(b"\n")?;
            written += 1;
        }
        eprint_progress("tasks", written);
        match page.next_after {
            Some(next) => after = next,
            None => break,
        }
    }
    Ok(written)
}

/// Writes the archived ledger entries up to sequence `through`, one line
/// each, in the ledger's order (the joined ledger's pages begin with the
/// archive's entries, counted in `archived`).
fn write_ledger(api: &dyn MeshApi, mesh: &str, through: u64, sink: &mut dyn Write) -> anyhow::Result<u64> {
    let mut after_seq = 0;
    let mut written = 0;
    if through == 0 {
        return Ok(0);
    }
    loop {
        let params = SliceParams { after_seq: Some(after_seq), limit: Some(PAGE), ..SliceParams::default() };
        let page = api.ledger_slice(mesh, params)?;
        let archived = page.archived as usize;
        for (entry, seq) in page.entries.iter().zip(&page.seqs).take(archived) {
            if *seq > through {
                break;
            }
            serde_json::to_writer(
                &mut *sink,
                &serde_json::json!({ "type": "ledger", "seq": seq, "entry": entry }),
            )?;
            sink.write_all(b"\n")?;
            written += 1;
        }
        eprint_progress("ledger entries", written);
        let last = page.seqs.get(archived.saturating_sub(1)).copied().unwrap_or(after_seq);
        if archived < page.entries.len() || !page.cursor.has_more || last >= through || archived == 0 {
            break;
        }
        after_seq = last;
    }
    Ok(written)
}

/// Progress of a long export, on stderr every 10,000 rows.
fn eprint_progress(what: &str, written: u64) {
    if written > 0 && written.is_multiple_of(10_000) {
        eprintln!("  {written} {what} written");
    }
}
