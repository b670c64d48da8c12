//! `agentmesh deliveries`: messages still waiting to be handed to worker sessions
//! (delivering, queued or acked, and not expired), highest priority first, then
//! oldest.
//!
//! A read view for a person; deliveries are written by the daemon.

use super::{Context, required};
use crate::cli::DeliveriesArgs;
use crate::now;
use crate::output::{self, DeliveryView, Output};

/// Runs `deliveries`.
pub fn run(ctx: &Context, args: DeliveriesArgs, out: &mut Output) -> anyhow::Result<()> {
    let session = args.session.as_deref().map(|s| required("sessionId", s)).transpose()?;
    let now = now();
    let deliveries: Vec<DeliveryView> = ctx
        .store()?
        .active_session_deliveries(ctx.mesh(), session, now)?
        .into_iter()
        .map(DeliveryView::from)
        .collect();
    out.emit(&deliveries, |w| output::write_delivery_table(w, &deliveries, now))
}
