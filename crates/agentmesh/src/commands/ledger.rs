//! `agentmesh ledger tail|slice`: reading the append-only ledger.
//!
//! `tail` is for people (the newest entries, printed oldest first, like `tail`);
//! `slice` is the paging protocol daemons use between themselves, exposed so a
//! script can walk the whole ledger with `--after`.

use agentmesh_core::{LedgerQuery, SliceQuery};

use super::{Context, normalize_instant};
use crate::cli::{LedgerCommand, LedgerSliceArgs, LedgerTailArgs};
use crate::output::{self, Output};

/// Runs one `ledger` subcommand.
pub fn run(ctx: &Context, command: LedgerCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        LedgerCommand::Tail(args) => tail(ctx, args, out),
        LedgerCommand::Slice(args) => slice(ctx, args, out),
    }
}

fn tail(ctx: &Context, args: LedgerTailArgs, out: &mut Output) -> anyhow::Result<()> {
    let query = LedgerQuery {
        tail: Some(args.limit),
        since: args.since.as_deref().map(|s| normalize_instant("since", s)).transpose()?,
        kinds: args.kinds.iter().map(|k| k.trim().to_owned()).filter(|k| !k.is_empty()).collect(),
    };
    let entries = ctx.store()?.read_ledger_ordered(ctx.mesh(), &query)?;
    out.emit(&entries, |w| output::write_ledger_entries(w, &entries))
}

fn slice(ctx: &Context, args: LedgerSliceArgs, out: &mut Output) -> anyhow::Result<()> {
    let query = SliceQuery {
        after_id: args.after.map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()),
        since: args.since.as_deref().map(|s| normalize_instant("since", s)).transpose()?,
        kind: args.kind.map(|k| k.trim().to_owned()).filter(|k| !k.is_empty()),
        limit: args.limit,
    };
    let slice = ctx.store()?.ledger_slice(ctx.mesh(), &query)?;
    out.emit(&slice, |w| {
        output::write_ledger_entries(w, &slice.entries)?;
        match (&slice.cursor.next_after_id, slice.cursor.has_more) {
            (Some(next), true) => writeln!(w, "more entries follow: --after {next}"),
            _ => Ok(()),
        }
    })
}
