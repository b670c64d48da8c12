//! Readiness: whether the store can write right now, answered by `/readyz`.
//!
//! `/healthz` says the process is up and serving; it stays 200 while every write
//! fails. `/readyz` says whether a write would succeed, for a load balancer that
//! should send work elsewhere meanwhile, or a service manager that waits for the
//! daemon to be of use:
//!
//! - Every write the routes commit counts as a success (the `LocalMesh` write
//!   signal, bumped after each one), and every request that failed for a reason of
//!   the system's (`storage_full`, `busy`, `database_error`) as a failure. While
//!   such an outcome is younger than [`FRESH`], `/readyz` answers it: a loaded
//!   daemon is judged by its own traffic and pays nothing for the question.
//! - Otherwise (an idle daemon, or one the load balancer already stopped sending
//!   work to) `/readyz` asks the store for a probe write (`Store::probe_write`:
//!   a real transaction through the same connection, lock and WAL as every write,
//!   that changes no data), and answers its outcome. So a daemon whose disk was
//!   freed becomes ready again without any client's write, and an idle daemon on
//!   a disk that filled meanwhile is not called ready.
//! - One probe runs at a time. A probe that has not finished after the lock-wait
//!   threshold (waiting for the write lock another process holds, or behind a long
//!   write of this one) is answered 503 `lock_wait`; it goes on, and its outcome
//!   counts when it comes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use agentmesh_api::MeshError;
use agentmesh_store::{Store, StoreError};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// How long the outcome of a write answers `/readyz` without a probe.
pub const FRESH: Duration = Duration::from_secs(1);

/// How long `/readyz` waits for its probe write before it answers `lock_wait`,
/// unless [`crate::AppState::with_ready_lock_wait`] says otherwise.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(2);

/// What `/readyz` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A write succeeded.
    Ready,
    /// Writes fail, or wait too long.
    NotReady {
        /// A stable code: the write error's (`storage_full`, `busy`,
        /// `lock_timeout`, `unavailable`, `database_error`) or `lock_wait`.
        reason: &'static str,
        /// The reason in words.
        message: String,
    },
}

impl Verdict {
    /// The verdict a failed write gives, when the system was at fault; `None`
    /// for a caller's mistake, which says nothing about the store.
    fn of(err: &StoreError) -> Option<Verdict> {
        let message = match err {
            StoreError::StorageFull(_)
            | StoreError::Busy
            | StoreError::LockTimeout
            | StoreError::Unavailable(_) => err.to_string(),
            // Its text may hold paths or SQL: the log has it.
            StoreError::Backend(_) => {
                String::from("a write failed with a database error; the daemon's log has it")
            }
            _ => return None,
        };
        Some(Verdict::NotReady { reason: err.code(), message })
    }
}

/// What `/readyz` answers: `{"status": "ready"}` with 200, or `not_ready` with
/// the reason and 503.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadyView {
    /// `ready` or `not_ready`.
    pub(crate) status: String,
    /// Why writes fail: the write error's code (`storage_full`, `busy`,
    /// `lock_timeout`, `unavailable`, `database_error`) or `lock_wait`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// The reason in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
}

impl IntoResponse for Verdict {
    fn into_response(self) -> Response {
        match self {
            Verdict::Ready => {
                let view = ReadyView { status: "ready".to_owned(), reason: None, message: None };
                (StatusCode::OK, Json(view)).into_response()
            }
            Verdict::NotReady { reason, message } => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(axum::http::header::RETRY_AFTER, crate::error::RETRY_AFTER_SECS)],
                Json(ReadyView {
                    status: "not_ready".to_owned(),
                    reason: Some(reason.to_owned()),
                    message: Some(message),
                }),
            )
                .into_response(),
        }
    }
}

/// The last known outcome of a write, and the probe that refreshes it.
pub(crate) struct Readiness {
    /// The last outcome and when it came. A plain mutex: held only to copy or
    /// replace the value, never across an await.
    last: Mutex<Option<(Instant, Verdict)>>,
    /// Held by the probe in flight, from before it starts until its outcome is
    /// recorded, so probes never pile up.
    probe: Arc<tokio::sync::Mutex<()>>,
    /// How long `/readyz` waits for its probe, in milliseconds.
    lock_wait_ms: AtomicU64,
}

impl Readiness {
    pub(crate) fn new(lock_wait: Duration) -> Readiness {
        let readiness = Readiness {
            last: Mutex::new(None),
            probe: Arc::new(tokio::sync::Mutex::new(())),
            lock_wait_ms: AtomicU64::new(0),
        };
        readiness.set_lock_wait(lock_wait);
        readiness
    }

    /// Sets how long `/readyz` waits for its probe (at least 1 ms).
    pub(crate) fn set_lock_wait(&self, lock_wait: Duration) {
        let ms = u64::try_from(lock_wait.as_millis()).unwrap_or(u64::MAX).max(1);
        self.lock_wait_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> MutexGuard<'_, Option<(Instant, Verdict)>> {
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A write committed.
    pub(crate) fn wrote(&self) {
        *self.last() = Some((Instant::now(), Verdict::Ready));
    }

    /// A request failed with `err`; counts when the system was at fault.
    pub(crate) fn failed(&self, err: &MeshError) {
        if let MeshError::Store(err) = err
            && let Some(verdict) = Verdict::of(err)
        {
            *self.last() = Some((Instant::now(), verdict));
        }
    }

    /// The last outcome, when it is younger than [`FRESH`].
    fn fresh(&self) -> Option<Verdict> {
        self.last().as_ref().filter(|(at, _)| at.elapsed() < FRESH).map(|(_, verdict)| verdict.clone())
    }

    /// Whether the store can write: the last outcome while it is fresh, else the
    /// outcome of a probe write on `store`.
    pub(crate) async fn check(self: &Arc<Self>, store: Arc<dyn Store>) -> Verdict {
        if let Some(verdict) = self.fresh() {
            return verdict;
        }
        let asked = Instant::now();
        let wait = Duration::from_millis(self.lock_wait_ms.load(Ordering::Relaxed));
        let lock_wait = || Verdict::NotReady {
            reason: "lock_wait",
            message: format!(
                "a probe write has waited more than {} ms for the database's write lock",
                wait.as_millis()
            ),
        };
        let Ok(guard) = tokio::time::timeout(wait, Arc::clone(&self.probe).lock_owned()).await else {
            return lock_wait();
        };
        // A probe that ended while this one waited for its turn answers it too.
        if let Some(verdict) = self.fresh() {
            return verdict;
        }
        let readiness = Arc::clone(self);
        // The probe may outlast the answer (`lock_wait` at `wait`), up to a
        // request's default budget.
        let deadline = asked + wait.max(agentmesh_api::DEFAULT_REQUEST_TIMEOUT);
        let probe = tokio::task::spawn_blocking(move || {
            // Bounded like a request: a database that does not answer makes the
            // probe fail (`unavailable`, `busy`), and frees the probe's turn.
            let outcome = agentmesh_store::deadline::within(Some(deadline), || store.probe_write());
            let verdict = match &outcome {
                Ok(()) => Verdict::Ready,
                Err(err) => Verdict::of(err).unwrap_or_else(|| Verdict::NotReady {
                    reason: "database_error",
                    message: String::from("the probe write failed; the daemon's log has why"),
                }),
            };
            if let Err(err) = &outcome {
                tracing::warn!(%err, "the readiness probe write failed");
            }
            *readiness.last() = Some((Instant::now(), verdict.clone()));
            drop(guard);
            verdict
        });
        let left = wait.saturating_sub(asked.elapsed());
        match tokio::time::timeout(left, probe).await {
            Ok(Ok(verdict)) => verdict,
            Ok(Err(join)) => Verdict::NotReady {
                reason: "database_error",
                message: format!("the probe write did not finish: {join}"),
            },
            Err(_) => lock_wait(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_system_s_failures_make_a_daemon_unready() {
        let readiness = Readiness::new(DEFAULT_LOCK_WAIT);
        readiness
            .failed(&MeshError::Store(StoreError::TaskNotFound { mesh_id: "m".into(), task_id: "t".into() }));
        assert_eq!(readiness.fresh(), None, "a caller's mistake says nothing about the store");
        readiness.failed(&MeshError::Store(StoreError::StorageFull(agentmesh_store::FullStorage::NoSpace)));
        assert!(matches!(readiness.fresh(), Some(Verdict::NotReady { reason: "storage_full", .. })));
        readiness.wrote();
        assert_eq!(readiness.fresh(), Some(Verdict::Ready));
        readiness.failed(&MeshError::Store(StoreError::Backend("/secret/path: SQL".into())));
        let Some(Verdict::NotReady { reason, message }) = readiness.fresh() else { panic!("not ready") };
        assert_eq!(reason, "database_error");
        assert!(!message.contains("secret"), "{message}");
    }
}
