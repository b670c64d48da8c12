//! Decisions of the writes as data: each function takes what a write loaded (the
//! task or mission as it is), the request, the time and a minter of ledger entry
//! ids, and returns what must be stored: the row as it becomes, the ledger
//! entries that record it, the event to queue and what happens to the
//! dependents; or the refusal, with the ledger entry that records it. A store
//! persists exactly that, in the transaction it loaded in, so every backend
//! keeps the same ledger and the same refusals.
//!
//! Ids are minted by the caller, only when an entry is made (`mint` is called at
//! most once per entry, in the order the entries are written).
//!
//! - [`task`]: enqueue, claim, completion and failure, heartbeat, cancel,
//!   requeue, reclaim, and the blocks they leave on dependents.
//! - [`mission`]: creating and updating a mission.
//! - [`direct`]: recording a task already dispatched straight to a session.

pub mod direct;
pub mod mission;
pub mod task;

pub use mission::{MissionRefusal, MissionUpsert, upsert_mission};
pub use task::{Decision, Dependents, HolderRefusal, Refused, Report, RequeueKind};
