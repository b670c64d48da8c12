//! `agentmesh deliveries`: messages still waiting to be handed to worker sessions
//! (delivering, queued or acked, and not expired), highest priority first, then
//! oldest; `deliveries show` reads one delivery whatever its status, and
//! `deliveries mark` moves one through its lifecycle (delivered, acked, failed,
//! a counted retry) under the store's rule that a status never moves backwards.

use agentmesh_api::wire::{DeliveryListParams, DeliveryStatusBody};

use super::{Context, id};
use crate::cli::{DeliveriesArgs, DeliveriesCommand, DeliveryMarkArgs};
use crate::now;
use crate::output::{self, DeliveryView, Noun, Output};

/// Runs `deliveries`.
pub(super) fn run(ctx: &Context, args: DeliveriesArgs, out: &mut Output) -> anyhow::Result<()> {
    match args.command {
        None => list(ctx, args.session, out),
        Some(DeliveriesCommand::Show(args)) => {
            let delivery = ctx.read_api()?.delivery(ctx.mesh(), id("id", &args.id)?)?;
            out.emit(&delivery, |w| output::write_view_fields(w, &delivery))
        }
        Some(DeliveriesCommand::Mark(args)) => mark(ctx, args, out),
    }
}

fn list(ctx: &Context, session: Option<String>, out: &mut Output) -> anyhow::Result<()> {
    let session_id = session.as_deref().map(|s| id("sessionId", s).map(str::to_owned)).transpose()?;
    let deliveries: Vec<DeliveryView> =
        ctx.read_api()?.deliveries(ctx.mesh(), DeliveryListParams { session_id })?;
    let now = now();
    out.emit(&deliveries, |w| {
        output::write_listing(
            w,
            ctx.mesh(),
            Noun("active delivery", "active deliveries"),
            deliveries.len(),
            |w| output::write_delivery_table(w, &deliveries, now),
        )
    })
}

fn mark(ctx: &Context, args: DeliveryMarkArgs, out: &mut Output) -> anyhow::Result<()> {
    let id = id("id", &args.id)?;
    let body = DeliveryStatusBody { status: args.status, error: args.error, attempt: args.attempt };
    let view = ctx.api()?.update_delivery(ctx.mesh(), id, body)?;
    out.emit(&view, |w| {
        let d = &view.delivery;
        if view.changed {
            writeln!(w, "delivery {} is {} (attempts {})", d.id, d.status, d.attempt_count)
        } else {
            writeln!(
                w,
                "delivery {} stays {}: a status never moves backwards or leaves a final one",
                d.id, d.status
            )
        }
    })
}
