//! agentmesh's vocabulary and rules as plain functions.
//!
//! This crate decides; stores persist and transports adapt. It does no I/O, runs
//! no SQL, never awaits and never reads a clock: time arrives as a [`Timestamp`]
//! argument and ids are handed in by the caller.
//!
//! - [`task`]: the task model (the original's queue entry), statuses, modes, priorities.
//! - [`enqueue`]: validating an enqueue request; dependency-cycle detection.
//! - [`guardrail`]: the read-only guardrail on the messages of read-only tasks.
//! - [`claim`]: claim gates and refusal reasons.
//! - [`lifecycle`]: transitions (claim, complete, fail, cancel, requeue, reclaim) and
//!   completion matching.
//! - [`effects`]: the decisions of the writes as data: the rows as they become,
//!   the ledger entries, the events to queue, or the refusal with its entry.
//! - [`ids`]: the one rule every identifier a caller passes follows.
//! - [`daemon_id`] and [`tags`]: identity forms and capability tags.
//! - [`ledger`]: ledger entries and the slice protocol.
//! - [`dispatch`], [`delivery`], [`sessions`]: direct dispatches, the session
//!   delivery queue and its monotonic statuses, idle sessions, completion
//!   fingerprints and conflicts.
//! - [`hold`]: in-flight holds of acknowledged tasks.
//! - [`reservation`]: path reservations of a repository, their patterns and the
//!   overlap rule.
//! - [`rate_guard`], [`mission`], [`placement`]: the tool-call rate guard, missions
//!   with derived progress, and node ranking under a scheduling strategy.
//! - [`webhook`]: webhook subscriptions: receivers a daemon may call, filters,
//!   secrets, retries and the body of one delivery.
//! - [`events`]: the coordinator inbox: pending events, v2 envelope, routing, fingerprints, texts.

pub mod claim;
pub mod daemon_id;
pub mod delivery;
pub mod dispatch;
pub mod effects;
pub mod enqueue;
mod error;
pub mod events;
pub mod guardrail;
pub mod hold;
pub mod ids;
pub mod ledger;
pub mod lifecycle;
pub mod mission;
pub mod placement;
pub mod rate_guard;
pub mod reservation;
pub mod retention;
pub mod sessions;
pub mod tags;
pub mod task;
mod time;
pub mod webhook;

pub use claim::{CandidateFacts, ClaimRefusal, Claimant, NodeLoad, TranscriptProfile};
pub use delivery::{DeliveryStatus, NewSessionDelivery, SessionDelivery};
pub use dispatch::{DirectDispatch, DispatchStatus, NewDirectDispatch};
pub use effects::direct::{DispatchedTask, NewDispatchedTask};
pub use enqueue::{DIFFICULTIES, NewTask, NotBefore};
pub use error::{InvalidInput, InvalidTransition, TaskAction};
pub use hold::{InflightHold, NewInflightHold};
pub use ids::{MAX_ID_BYTES, MeshId, validate_id};
pub use ledger::{LedgerEntry, LedgerQuery, LedgerSlice, SliceQuery};
pub use lifecycle::{RequeueOptions, Requeued};
pub use mission::{Mission, MissionProgress, NewMission};
pub use placement::{NodeCandidate, Strategy};
pub use rate_guard::{RateGuard, RateVerdict};
pub use reservation::{Conflict, NewReservation, PathPattern, Reservation};
pub use sessions::{
    CompletionConflict, CompletionFingerprint, FingerprintParts, IdleSession, fingerprint_parts,
};
pub use task::{Progress, ProgressReport, Task, TaskMode, TaskPriority, TaskStatus};
pub use time::Timestamp;
pub use webhook::{NewWebhook, Webhook, WebhookState};
