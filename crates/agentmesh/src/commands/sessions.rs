//! `agentmesh sessions`: the worker sessions of the mesh that reported themselves
//! idle and whose report has not run out.
//!
//! A read view for a person; sessions report idleness through the daemon. The
//! list is sorted by node, then session, so repeated runs line up.

use super::Context;
use crate::now;
use crate::output::{self, IdleSessionView, Output};

/// Runs `sessions`.
pub fn run(ctx: &Context, out: &mut Output) -> anyhow::Result<()> {
    let now = now();
    let mut sessions: Vec<IdleSessionView> =
        ctx.store()?.idle_sessions(ctx.mesh(), now)?.into_iter().map(IdleSessionView::from).collect();
    sessions.sort_by(|a, b| (&a.node_id, &a.session_id).cmp(&(&b.node_id, &b.session_id)));
    out.emit(&sessions, |w| output::write_idle_session_table(w, &sessions, now))
}
