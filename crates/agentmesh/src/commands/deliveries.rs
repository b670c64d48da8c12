//! `agentmesh deliveries`: messages still waiting to be handed to worker sessions
//! (delivering, queued or acked, and not expired), highest priority first, then
//! oldest.
//!
//! A read view for a person; deliveries are written by the daemon.

use agentmesh_api::wire::DeliveryListParams;

use super::{Context, id};
use crate::cli::DeliveriesArgs;
use crate::now;
use crate::output::{self, DeliveryView, Noun, Output};

/// Runs `deliveries`.
pub fn run(ctx: &Context, args: DeliveriesArgs, out: &mut Output) -> anyhow::Result<()> {
    let session_id = args.session.as_deref().map(|s| id("sessionId", s).map(str::to_owned)).transpose()?;
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
