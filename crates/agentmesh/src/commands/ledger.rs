//! `agentmesh ledger tail|slice|export|import`: the append-only ledger.
//!
//! `tail` is for people (the newest entries, printed oldest first, like `tail`);
//! `slice` is the paging protocol daemons use between themselves, exposed so a
//! script can walk the whole ledger with `--after`. `export` walks that protocol
//! to write every entry as one JSON line; `import` reads such lines back, checking
//! every line before anything is stored (all or none), and skips entries whose id
//! is already present, so importing the same file twice changes nothing.

use std::fs::File;
use std::io::{self, BufWriter, Read as _, Write};
use std::path::Path;

use agentmesh_api::wire::{ImportBody, LedgerParams, SliceParams};
use agentmesh_core::{InvalidInput, LedgerEntry};
use anyhow::Context as _;

use super::Context;
use crate::cli::{LedgerCommand, LedgerExportArgs, LedgerImportArgs, LedgerSliceArgs, LedgerTailArgs};
use crate::output::{self, Noun, Output};

/// Entries per page while exporting (the slice protocol's largest page).
const EXPORT_PAGE: u32 = 500;

/// Runs one `ledger` subcommand.
pub(super) fn run(ctx: &Context, command: LedgerCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        LedgerCommand::Tail(args) => tail(ctx, args, out),
        LedgerCommand::Slice(args) => slice(ctx, args, out),
        LedgerCommand::Export(args) => export(ctx, args, out),
        LedgerCommand::Import(args) => import(ctx, args, out),
    }
}

fn tail(ctx: &Context, args: LedgerTailArgs, out: &mut Output) -> anyhow::Result<()> {
    let kinds: Vec<String> =
        args.kinds.iter().map(|k| k.trim().to_owned()).filter(|k| !k.is_empty()).collect();
    let params = LedgerParams {
        tail: Some(args.limit),
        since: args.since,
        kind: (!kinds.is_empty()).then(|| kinds.join(",")),
        task: args.task,
    };
    // Checked before the store opens, so a refused filter is bad input even on a
    // data dir with no database.
    agentmesh_core::LedgerQuery::try_from(params.clone())?;
    let entries = ctx.read_api()?.ledger_tail(ctx.mesh(), params)?;
    out.emit(&entries, |w| {
        output::write_listing(w, ctx.mesh(), Noun("ledger entry", "ledger entries"), entries.len(), |w| {
            output::write_ledger_entries(w, &entries)
        })
    })
}

fn slice(ctx: &Context, args: LedgerSliceArgs, out: &mut Output) -> anyhow::Result<()> {
    let params = SliceParams {
        after_id: args.after.map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()),
        after_seq: args.after_seq,
        since: args.since,
        kind: args.kind.map(|k| k.trim().to_owned()).filter(|k| !k.is_empty()),
        limit: args.limit,
    };
    agentmesh_core::SliceQuery::try_from(params.clone())?;
    let slice = ctx.read_api()?.ledger_slice(ctx.mesh(), params)?;
    out.emit(&slice, |w| {
        output::write_listing(
            w,
            ctx.mesh(),
            Noun("ledger entry", "ledger entries"),
            slice.entries.len(),
            |w| output::write_ledger_entries(w, &slice.entries),
        )?;
        match (slice.cursor.next_after_seq, &slice.cursor.next_after_id, slice.cursor.has_more) {
            (Some(seq), _, true) => writeln!(w, "more entries follow: --after-seq {seq}"),
            (None, Some(next), true) => writeln!(w, "more entries follow: --after {next}"),
            _ => Ok(()),
        }
    })
}

fn export(ctx: &Context, args: LedgerExportArgs, out: &mut Output) -> anyhow::Result<()> {
    if args.output.is_none() && out.is_json() {
        return Err(InvalidInput::new(
            "output",
            "with --json, export needs --output FILE (stdout carries the JSON summary)",
        )
        .into());
    }
    let api = ctx.read_api()?;
    let mut sink: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(BufWriter::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(io::stdout().lock())),
    };
    let mut after_id = None;
    let mut exported: u64 = 0;
    loop {
        let params =
            SliceParams { after_id: after_id.take(), limit: Some(EXPORT_PAGE), ..SliceParams::default() };
        let page = api.ledger_slice(ctx.mesh(), params)?;
        for entry in &page.entries {
            serde_json::to_writer(&mut sink, entry)?;
            sink.write_all(b"\n")?;
            exported += 1;
        }
        match page.cursor.next_after_id {
            Some(next) if page.cursor.has_more => after_id = Some(next),
            _ => break,
        }
    }
    sink.flush()?;
    drop(sink);
    match &args.output {
        Some(path) => {
            let file = path.display().to_string();
            out.emit(&serde_json::json!({ "exported": exported, "file": file }), |w| {
                writeln!(w, "exported {exported} entries to {file}")
            })
        }
        None => Ok(()),
    }
}

/// Reads ledger entries, one JSON object per line (blank lines skipped). A line
/// that is not an entry of `mesh` refuses the whole file, naming the line.
fn read_entries(text: &str, mesh: &str) -> Result<Vec<LedgerEntry>, InvalidInput> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let field = format!("line {}", i + 1);
        let entry: LedgerEntry = serde_json::from_str(line)
            .map_err(|err| InvalidInput::new(field.clone(), format!("is not a ledger entry: {err}")))?;
        if entry.mesh_id != mesh {
            return Err(InvalidInput::new(
                field,
                format!("the entry belongs to mesh {:?}, not {mesh:?}", entry.mesh_id),
            ));
        }
        entries.push(entry);
    }
    Ok(entries)
}

fn read_file(path: &Path) -> Result<String, InvalidInput> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .map_err(|err| InvalidInput::new("file", format!("cannot read stdin: {err}")))?;
        return Ok(text);
    }
    std::fs::read_to_string(path)
        .map_err(|err| InvalidInput::new("file", format!("cannot read {}: {err}", path.display())))
}

fn import(ctx: &Context, args: LedgerImportArgs, out: &mut Output) -> anyhow::Result<()> {
    let entries = read_entries(&read_file(&args.file)?, ctx.mesh())?;
    let total = entries.len();
    let view = ctx.api()?.import_ledger(ctx.mesh(), ImportBody { entries })?;
    out.emit(&view, |w| {
        writeln!(
            w,
            "imported {} of {total} entries ({} already present)",
            view.imported,
            total as u64 - view.imported
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_lines_are_checked_and_named() {
        let good = r#"{"id":"e1","meshId":"m","timestamp":"2025-01-01T00:00:00.000Z","kind":"task_enqueued","payload":{}}"#;
        let text = format!("{good}\n\n{good}\n");
        assert_eq!(read_entries(&text, "m").unwrap().len(), 2);
        let err = read_entries(&format!("{good}\nnot json\n"), "m").unwrap_err();
        assert_eq!(err.field, "line 2");
        let err = read_entries(good, "other").unwrap_err();
        assert_eq!(err.field, "line 1");
    }
}
