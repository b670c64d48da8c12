//! The coordinator inbox: pending events and the v2 protocol that routes them.
//!
//! A pending event is what a worker-side producer queues for a coordinator: a
//! completion, a stop, an approval request, a refine outcome. Each one must reach
//! the right coordinator exactly once. This module holds the rules for that as
//! plain functions over values; the store applies them inside its transactions.
//!
//! - [`names`]: event names, the named sets, and the default scope per name.
//! - [`identity`]: coordinator identity, its equality and key.
//! - [`envelope`]: the [`PendingEvent`] model and its v2 envelope ([`Scope`],
//!   [`ProtocolVersion`], [`V2Envelope`]).
//! - [`contract`]: the v2 contract check ([`validate_v2`]) and the strict delivery
//!   rule.
//! - [`stamp`]: stamping the envelope at emit time ([`stamp_event`]).
//! - [`routing`]: the drain decision for one event ([`route_event`]), the batch
//!   router and the drain counters.
//! - [`fingerprint`] and [`metadata`]: the content dedup key and the metadata
//!   readers it is built from.
//! - [`wire`]: the flat payload that carries an event between daemons.
//! - [`message`]: the text shown to the coordinator.
//! - [`refine`]: backfilling a refine job's missing terminal event from the ledger
//!   and dropping superseded `refine:accepted` events.
//! - [`stale`]: dropping alerts about tasks that are already finished.
//! - [`completion`]: the events agentmesh queues itself (a task's completion or
//!   stop, a pushed event) with their node label and text.
//! - [`presence`]: which coordinators are live, and when a drain refreshes its record.
//! - [`held`]: the `event_held` and `event_held_requeued` entries, which held
//!   (quarantined or expired) events are still held, and the filters that select
//!   them for listing and requeueing.
//!
//! Nothing here reads a clock, mints an id or touches storage: times, fresh event
//! ids, machine ids and "was this event id drained before" all come from the caller.

pub mod completion;
pub mod contract;
pub mod envelope;
pub mod fingerprint;
pub mod held;
pub mod identity;
mod js;
pub mod message;
pub mod metadata;
pub mod names;
pub mod presence;
pub mod refine;
pub mod routing;
pub mod stale;
pub mod stamp;
pub mod wire;

pub use completion::{EventToQueue, completion_event, node_label, texted_event};
pub use contract::{
    ContractViolation, PendingEventV2, ViolationDetail, should_deliver_to, validate_v2, validate_v2_at,
};
pub use envelope::{PendingEvent, ProtocolVersion, Scope, V2Envelope};
pub use fingerprint::{durable_completion_dedup_key, pending_event_fingerprint, refine_terminal_fingerprint};
pub use identity::{CoordinatorIdentity, assert_coordinator_identity};
pub use message::{
    EVENTS_WITH_TEXT, MessageOptions, RecoveryContext, build_coordinator_message, coordinator_text,
};
pub use metadata::{is_weak_completion_metadata, read_completion_summary, read_refine_job_id, refine_job_id};
pub use names::default_scope_for_event;
pub use routing::{
    Address, DrainCounter, DrainCounters, DrainRouter, Drainer, ProjectedRoute, QuarantineReason, RouteClass,
    RouteDecision, Routed, RoutedAwayReason, drainer_takes_unicast, enforce_from_env_value,
    identity_delivers_to, project_route, route_event, route_event_live, route_projected,
};
pub use stamp::{EmitHint, EmitStamp, StampOutcome, build_emit_stamp, stamp_event};
pub use wire::{read_v2_envelope_from_wire, to_wire};
