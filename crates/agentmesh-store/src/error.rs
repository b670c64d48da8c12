//! [`StoreError`]: what can go wrong in a store, in the domain's words. Backends
//! classify their native errors here, so callers write one `match` for all.

use std::path::PathBuf;

use agentmesh_core::{InvalidInput, InvalidTransition};

/// Errors of store operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The request failed validation; nothing changed.
    #[error(transparent)]
    InvalidInput(#[from] InvalidInput),
    /// A task with this id exists already. Where ids are unique per database
    /// (the embedded file), the task that holds the id may be in another mesh;
    /// where they are unique per mesh (PostgreSQL), it is in the same one.
    #[error("{}", duplicate_task_message(task_id, existing_mesh_id, *scope))]
    DuplicateTaskId {
        /// The id.
        task_id: String,
        /// The mesh of the task that holds the id.
        existing_mesh_id: String,
        /// Where the backend keeps task ids unique.
        scope: IdScope,
    },
    /// Enqueueing would close a dependency cycle.
    #[error("dependency cycle detected: {}", .path.join(" -> "))]
    DependencyCycle {
        /// The cycle, starting and ending with the new task.
        path: Vec<String>,
    },
    /// No such task in the mesh.
    #[error("task {task_id} not found in mesh {mesh_id}")]
    TaskNotFound {
        /// The mesh.
        mesh_id: String,
        /// The id.
        task_id: String,
    },
    /// No such record (a delivery, a mission, ...) in the mesh.
    #[error("{kind} {id} not found in mesh {mesh_id}")]
    NotFound {
        /// What was looked for (`delivery`, `mission`).
        kind: &'static str,
        /// The mesh.
        mesh_id: String,
        /// The id.
        id: String,
    },
    /// A ledger cursor points before the oldest entry still kept: the entries
    /// after it were exported out of the archive and dropped.
    #[error(
        "the ledger cursor afterSeq {after_seq} of mesh {mesh_id} has expired: entries through {dropped_through} were dropped from the archive; read again from afterSeq {dropped_through}"
    )]
    CursorExpired {
        /// The mesh.
        mesh_id: String,
        /// The cursor asked for.
        after_seq: u64,
        /// The last sequence number dropped: the oldest cursor still served.
        dropped_through: u64,
    },
    /// The id is already used by a record of another mesh.
    #[error("{kind} id {id} is already used in another mesh")]
    IdInOtherMesh {
        /// What kind of record (`mission`).
        kind: &'static str,
        /// The id.
        id: String,
    },
    /// The task's status does not allow the operation.
    #[error(transparent)]
    InvalidTransition(#[from] InvalidTransition),
    /// The report carries a fencing epoch the task has moved past.
    #[error("stale epoch for task {task_id}: presented {presented}, current {current}")]
    StaleEpoch {
        /// The task.
        task_id: String,
        /// The epoch the worker presented.
        presented: u64,
        /// The task's epoch now.
        current: u64,
    },
    /// A renew or release of a reservation that its caller may not make: another
    /// session holds it, the epoch is not its epoch, or it lapsed.
    #[error("reservation {reservation_id}: {problem}")]
    ReservationFenced {
        /// The reservation.
        reservation_id: String,
        /// Why, in words.
        problem: String,
    },
    /// The task is not assigned to the reporting session (any more).
    #[error("task {task_id} is not assigned to session {session_id}")]
    NotAssignedToSession {
        /// The task.
        task_id: String,
        /// The session that reported.
        session_id: String,
    },
    /// The session holds no assigned task to complete.
    #[error("session {session_id} holds no assigned task in mesh {mesh_id}")]
    NoAssignedTask {
        /// The mesh.
        mesh_id: String,
        /// The session.
        session_id: String,
    },
    /// A legacy file could not be read or parsed; nothing was imported from it.
    #[error("legacy file {}: {problem}", .path.display())]
    LegacyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A stored row could not be decoded.
    #[error("stored {what} is unreadable: {problem}")]
    Corrupt {
        /// Which row.
        what: String,
        /// Why.
        problem: String,
    },
    /// The database was written by a newer agentmesh: its schema version is past
    /// the last one this build knows. It was not opened for writing and is left
    /// exactly as it was.
    #[error(
        "the database {} has schema version {found}, newer than version {supported}, the last this \
         agentmesh knows: it was written by a newer agentmesh; upgrade agentmesh to open it (the file \
         was left unchanged)",
        .path.display()
    )]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// Its schema version (`PRAGMA user_version`).
        found: i64,
        /// The last schema version this build knows.
        supported: i64,
    },
    /// Contention: the backend could not run the operation now because
    /// concurrent transactions held what it needed (SQLite: the database stayed
    /// locked past the busy timeout; a server database: a lock timeout, a
    /// deadlock or a serialization failure). The operation changed nothing, and
    /// the caller may run it again as it was ([`StoreError::is_retryable`]).
    #[error("database is busy")]
    Busy,
    /// A lock the operation needed stayed held past the backend's lock timeout
    /// (another transaction, an operator's `LOCK TABLE`, a long migration). The
    /// operation changed nothing; a retry after a while may succeed.
    #[error("a lock the operation needed stayed held past the lock timeout")]
    LockTimeout,
    /// The database could not be reached, or did not answer within the
    /// request's [deadline](crate::deadline): the server is down or the link to
    /// it is cut. When the answer to a write was what got lost, the write may
    /// have committed; the request is safe to retry where it is idempotent
    /// (a report with its epoch, an enqueue with its id).
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// The write needed disk space the database's filesystem does not have; it
    /// was not kept, and writes succeed again once space is freed.
    #[error("storage full: {0}")]
    StorageFull(FullStorage),
    /// Any other backend failure.
    #[error("database error")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Where a backend keeps the ids of tasks and missions unique
/// ([`crate::Store::profile`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdScope {
    /// Across every mesh of the database, as the original did: an id another
    /// mesh holds is refused. The embedded SQLite file.
    Database,
    /// Within one mesh: two meshes may each hold a task of the same id. A server
    /// database, whose every key starts with the mesh so it can be sharded by mesh.
    Mesh,
}

fn duplicate_task_message(task_id: &str, mesh_id: &str, scope: IdScope) -> String {
    match scope {
        IdScope::Database => {
            format!(
                "task {task_id} already exists (task ids are unique per database; it is in mesh {mesh_id})"
            )
        }
        IdScope::Mesh => format!("task {task_id} already exists in mesh {mesh_id}"),
    }
}

impl From<agentmesh_core::effects::mission::MissionRefusal> for StoreError {
    fn from(refusal: agentmesh_core::effects::mission::MissionRefusal) -> StoreError {
        use agentmesh_core::effects::mission::MissionRefusal;
        match refusal {
            MissionRefusal::Invalid(err) => StoreError::InvalidInput(err),
            MissionRefusal::InOtherMesh { id } => StoreError::IdInOtherMesh { kind: "mission", id },
        }
    }
}

impl StoreError {
    /// [`StoreError::TaskNotFound`] of `task_id` in `mesh_id`.
    pub fn task_not_found(mesh_id: &str, task_id: &str) -> StoreError {
        StoreError::TaskNotFound { mesh_id: mesh_id.to_owned(), task_id: task_id.to_owned() }
    }

    /// The error of a report or heartbeat on `task_id` by `session_id` that the
    /// core refused ([`agentmesh_core::effects::task::HolderRefusal`]).
    pub fn of_holder_refusal(
        task_id: &str,
        session_id: &str,
        refusal: agentmesh_core::effects::task::HolderRefusal,
    ) -> StoreError {
        use agentmesh_core::effects::task::HolderRefusal;
        match refusal {
            HolderRefusal::StaleEpoch { presented, current } => {
                StoreError::StaleEpoch { task_id: task_id.to_owned(), presented, current }
            }
            HolderRefusal::NotAssigned { from, action } => {
                StoreError::InvalidTransition(InvalidTransition { task_id: task_id.to_owned(), from, action })
            }
            HolderRefusal::OtherSession => StoreError::NotAssignedToSession {
                task_id: task_id.to_owned(),
                session_id: session_id.to_owned(),
            },
        }
    }

    /// A stable machine-readable code for wire errors.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::InvalidInput(_) => "invalid_input",
            StoreError::DuplicateTaskId { .. } => "duplicate_task_id",
            StoreError::DependencyCycle { .. } => "dependency_cycle_detected",
            StoreError::TaskNotFound { .. } => "task_not_found",
            StoreError::NotFound { .. } => "not_found",
            StoreError::CursorExpired { .. } => "cursor_expired",
            StoreError::IdInOtherMesh { .. } => "id_in_other_mesh",
            StoreError::InvalidTransition(_) => "invalid_transition",
            StoreError::StaleEpoch { .. } => "stale_epoch",
            StoreError::ReservationFenced { .. } => "reservation_fenced",
            StoreError::NotAssignedToSession { .. } => "not_assigned_to_session",
            StoreError::NoAssignedTask { .. } => "no_assigned_task",
            StoreError::LegacyFile { .. } => "legacy_file_invalid",
            StoreError::Corrupt { .. } => "corrupt_row",
            StoreError::SchemaTooNew { .. } => "schema_too_new",
            StoreError::Busy => "busy",
            StoreError::LockTimeout => "lock_timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::StorageFull(_) => "storage_full",
            StoreError::Backend(_) => "database_error",
        }
    }

    /// Whether running the same operation again may succeed: the error is
    /// [contention](StoreError::Busy), the operation changed nothing, and a retry
    /// after a short back-off is the right answer (see [`crate::retry`]). Every
    /// other error is final for that request.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Busy)
    }

    /// Whether the environment is at fault for now and the client should try
    /// again later (HTTP 503 with `Retry-After`): contention, a held lock, an
    /// unreachable database.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Busy | StoreError::LockTimeout | StoreError::Unavailable(_))
    }

    /// Whether the caller's request was at fault (as opposed to the system).
    pub fn is_caller_error(&self) -> bool {
        !matches!(
            self,
            StoreError::Corrupt { .. }
                | StoreError::SchemaTooNew { .. }
                | StoreError::Busy
                | StoreError::LockTimeout
                | StoreError::Unavailable(_)
                | StoreError::StorageFull(_)
                | StoreError::Backend(_)
        )
    }
}

/// What ran out when a write found its storage full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FullStorage {
    /// The filesystem has no space left (`ENOSPC`, or SQLite's `SQLITE_FULL`).
    #[error("no space left on the filesystem that holds the database")]
    NoSpace,
    /// The disk quota of the database's owner is used up (`EDQUOT`).
    #[error("the disk quota of the database's owner is used up")]
    Quota,
    /// A write went through, but the filesystem has almost nothing left: what
    /// [`crate::Store::probe_write`] reports, so that a daemon is not called ready
    /// while only the smallest writes fit.
    #[error("only {available_bytes} bytes are left on the filesystem that holds the database")]
    NearlyFull {
        /// The bytes still available.
        available_bytes: u64,
    },
}

impl FullStorage {
    /// The kind of storage exhaustion an I/O error reports, if it reports one.
    pub fn of_io(err: &std::io::Error) -> Option<FullStorage> {
        match err.kind() {
            std::io::ErrorKind::StorageFull => Some(FullStorage::NoSpace),
            std::io::ErrorKind::QuotaExceeded => Some(FullStorage::Quota),
            _ => None,
        }
    }
}
