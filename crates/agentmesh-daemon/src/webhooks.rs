//! The webhook deliverer: sends each subscription's matching ledger entries
//! to its receiver, in ledger order, and moves its durable cursor past what
//! the receiver took.
//!
//! One task per active subscription, so a slow or failing receiver delays
//! only its own subscription. A task works in steps: read a page of the
//! mesh's ledger after the cursor (one store call on a blocking thread), send
//! each entry the filter takes, one request each, for at most
//! [`STEP_BUDGET`], then write the progress (cursor, counts, the delivery
//! log) in one store call, by version
//! ([`agentmesh_store::webhook_writes::save_progress`]). A failed request
//! stops the step: the entry is retried after the backoff of
//! [`DeliveryPolicy`], and after its last attempt the subscription turns
//! failing and its task ends, until an operator resumes it or skips the
//! entry.
//!
//! What a receiver sees: at least once, in order. A crash or a lost
//! leadership between a 2xx and the progress write sends the entries of
//! that step again, with the same `webhook-id`, so a receiver that drops
//! ids it has seen sees each entry exactly once.
//!
//! With several daemons on one PostgreSQL installation, only the upkeep
//! leader delivers (the [`crate::UpkeepConfig::leader`] hook, asked every
//! [`LEADER_CHECK`]); a new leader goes on from the stored cursors.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_api::webhook::{Message, Sender, jitter};
use agentmesh_core::webhook::{DeliveryPolicy, StuckEntry, UrlPolicy, WebhookState};
use agentmesh_core::{LedgerSlice, SliceQuery, Timestamp, Webhook};
use agentmesh_store::{Store, StoreError};
use tokio_util::sync::CancellationToken;

use crate::AppState;

/// How long one step sends before it writes its progress.
pub(crate) const STEP_BUDGET: Duration = Duration::from_millis(500);
/// How often the deliverer asks whether it leads, and looks for new
/// subscriptions when nothing wakes it.
pub(crate) const LEADER_CHECK: Duration = Duration::from_secs(1);
/// Entries read per page.
const PAGE: u32 = 200;
/// How long an idle subscription waits for a write before it looks again
/// (writes of other daemons on PostgreSQL are not announced to it).
const IDLE_POLL: Duration = Duration::from_millis(250);

/// The deliverer's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Where receivers may be.
    pub policy: UrlPolicy,
    /// How long a receiver may take to answer.
    pub timeout: Duration,
    /// Retries and when a subscription turns failing.
    pub delivery: DeliveryPolicy,
    /// Whether this daemon delivers at all.
    pub enabled: bool,
}

impl Default for WebhookConfig {
    fn default() -> WebhookConfig {
        WebhookConfig {
            policy: UrlPolicy::default(),
            timeout: agentmesh_api::webhook::DEFAULT_TIMEOUT,
            delivery: DeliveryPolicy::default(),
            enabled: true,
        }
    }
}

/// What one step came to.
enum Step {
    /// It moved on (or found the subscription changed): step again.
    Again,
    /// Nothing to send: wait for a write.
    Idle,
    /// A request failed: try again after this long.
    Wait(Duration),
    /// The subscription is gone or failing: its task ends.
    Stop,
}

/// Runs the deliverer until `shutdown` is cancelled.
pub(crate) async fn run(state: AppState, config: WebhookConfig, shutdown: CancellationToken) {
    if !config.enabled {
        return;
    }
    let sender = match Sender::new(config.policy, config.timeout) {
        Ok(sender) => sender,
        Err(err) => {
            tracing::error!(error = %err, "webhooks will not be delivered");
            return;
        }
    };
    let mut workers: HashMap<(String, String), (tokio::task::JoinHandle<()>, CancellationToken)> =
        HashMap::new();
    let wake = Arc::clone(&state.webhook_wake);
    // One listener for every subscription's task: the store's writes wake the
    // idle ones (a task that is not waiting looks again within IDLE_POLL).
    let wrote = Arc::new(tokio::sync::Notify::new());
    {
        let wrote = Arc::clone(&wrote);
        state.mesh.signal().listen(move || wrote.notify_waiters());
    }
    loop {
        let leads = match state.upkeep.leader.clone() {
            None => true,
            Some(hook) => tokio::task::spawn_blocking(move || hook()).await.unwrap_or(false),
        };
        workers.retain(|_, (task, _)| !task.is_finished());
        if leads {
            let store = Arc::clone(state.mesh.store());
            let listed = tokio::task::spawn_blocking(move || store.webhooks(None)).await;
            match listed {
                Ok(Ok(hooks)) => {
                    for hook in hooks.into_iter().filter(|h| h.state == WebhookState::Active) {
                        let key = (hook.mesh_id.clone(), hook.id.clone());
                        if workers.contains_key(&key) {
                            continue;
                        }
                        let stop = shutdown.child_token();
                        let task = tokio::spawn(deliver(
                            state.clone(),
                            sender.clone(),
                            config.delivery,
                            key.clone(),
                            (stop.clone(), Arc::clone(&wrote)),
                        ));
                        workers.insert(key, (task, stop));
                    }
                }
                Ok(Err(err)) => tracing::warn!(error = %err, "could not read the webhook subscriptions"),
                Err(join) => tracing::warn!(error = %join, "could not read the webhook subscriptions"),
            }
        } else {
            for (_, (_, stop)) in workers.drain() {
                stop.cancel();
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = wake.notified() => {}
            () = tokio::time::sleep(LEADER_CHECK) => {}
        }
    }
    for (_, (task, stop)) in workers.drain() {
        stop.cancel();
        let _ = task.await;
    }
}

/// One subscription's task (see the module docs).
async fn deliver(
    state: AppState,
    sender: Sender,
    policy: DeliveryPolicy,
    (mesh, id): (String, String),
    (stop, wrote): (CancellationToken, Arc<tokio::sync::Notify>),
) {
    loop {
        if stop.is_cancelled() {
            return;
        }
        let wait = match step(&state, &sender, policy, &mesh, &id).await {
            Ok(Step::Again) => continue,
            Ok(Step::Stop) => return,
            Ok(Step::Idle) => IDLE_POLL,
            Ok(Step::Wait(after)) => after,
            Err(err) => {
                tracing::warn!(webhook = %id, mesh = %mesh, error = %err, "webhook delivery step failed");
                LEADER_CHECK
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = wrote.notified() => {}
            () = state.webhook_wake.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Runs `op` on the store on a blocking thread.
async fn on_store<T: Send + 'static>(
    state: &AppState,
    op: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = Arc::clone(state.mesh.store());
    match tokio::task::spawn_blocking(move || op(store.as_ref())).await {
        Ok(result) => result,
        Err(join) => Err(StoreError::Unavailable(format!("a webhook store call did not finish: {join}"))),
    }
}

/// What a step reads before it sends.
enum Loaded {
    /// Nothing to do now: this step's answer.
    Done(Step),
    /// What to send from.
    Ready(Box<Ready>),
}

/// The subscription, its key, a page after its cursor, and, when it filters
/// by tag, each entry's task's tags.
struct Ready {
    hook: Webhook,
    key: Vec<u8>,
    page: LedgerSlice,
    tags: Vec<Option<Vec<String>>>,
}

/// One step of one subscription (see the module docs).
async fn step(
    state: &AppState,
    sender: &Sender,
    policy: DeliveryPolicy,
    mesh: &str,
    id: &str,
) -> Result<Step, StoreError> {
    let now = state.mesh.now();
    let (m, i) = (mesh.to_owned(), id.to_owned());
    let loaded = on_store(state, move |store| {
        let Some(hook) = store.webhooks(Some(&m))?.into_iter().find(|h| h.id == i) else {
            return Ok(Loaded::Done(Step::Stop));
        };
        if hook.state == WebhookState::Failing {
            return Ok(Loaded::Done(Step::Stop));
        }
        if let Some(retry_at) = hook.retry_at.as_deref().and_then(Timestamp::parse_iso) {
            let left = retry_at.millis() - now.millis();
            if left > 0 {
                return Ok(Loaded::Done(Step::Wait(Duration::from_millis(left.unsigned_abs()))));
            }
        }
        let Some(secret) = store.webhook_secret(&m, &i)? else {
            return Ok(Loaded::Done(Step::Stop));
        };
        let key = agentmesh_core::webhook::secret_key("secret", &secret)?;
        let query = SliceQuery { after_seq: Some(hook.cursor), limit: Some(PAGE), ..SliceQuery::default() };
        let page = store.ledger_slice(&m, &query)?;
        let mut tags = Vec::new();
        if hook.filters_by_tag() {
            for entry in &page.entries {
                let task = match entry.task_id() {
                    Some(task) => store.find_task(&m, task)?,
                    None => None,
                };
                tags.push(task.and_then(|t| t.required_tags));
            }
        }
        Ok(Loaded::Ready(Box::new(Ready { hook, key, page, tags })))
    })
    .await?;
    let Ready { mut hook, key, page, tags } = match loaded {
        Loaded::Ready(ready) => *ready,
        Loaded::Done(step) => return Ok(step),
    };
    let started = Instant::now();
    let read = hook.clone();
    let mut failed = false;
    let mut sent_all = true;
    let mut attempts = Vec::new();
    for (i, (entry, seq)) in page.entries.iter().zip(page.seqs.iter().copied()).enumerate() {
        if started.elapsed() >= STEP_BUDGET {
            sent_all = false;
            break;
        }
        if !hook.takes(entry, tags.get(i).and_then(Option::as_deref)) {
            hook.cursor = seq;
            continue;
        }
        let at = state.mesh.now();
        let attempt = sender.send(&hook, &key, &Message::of(entry, Some(seq)), at).await;
        let delivered = attempt.delivered();
        state.metrics.webhook_attempt(delivered);
        if delivered {
            hook.cursor = seq;
            hook.delivered += 1;
            hook.failures = 0;
            hook.retry_at = None;
            hook.last_error = None;
            hook.stuck_on = None;
            attempts.push(attempt);
            continue;
        }
        hook.failures += 1;
        hook.last_error.clone_from(&attempt.error);
        hook.stuck_on = Some(StuckEntry { entry_id: entry.id.clone(), kind: entry.kind.clone(), seq });
        if hook.failures >= policy.max_attempts {
            hook.state = WebhookState::Failing;
            hook.failing_since = Some(at.iso());
            hook.retry_at = None;
            tracing::warn!(
                webhook = %hook.id, mesh = %mesh, entry = %entry.id, failures = hook.failures,
                error = attempt.error.as_deref().unwrap_or(""),
                "webhook subscription is failing: nothing more is sent until it is resumed or the entry skipped"
            );
        } else {
            let delay = policy.delay_ms(hook.failures, jitter());
            hook.retry_at = Some(Timestamp::from_millis(at.millis().saturating_add(delay as i64)).iso());
        }
        attempts.push(attempt);
        failed = true;
        sent_all = false;
        break;
    }
    // Past the whole page with nothing held back: the page's cursor, which
    // may walk past other meshes' entries.
    if let Some(next) = page.cursor.next_after_seq.filter(|_| sent_all) {
        hook.cursor = hook.cursor.max(next);
    }
    if hook.cursor == read.cursor && attempts.is_empty() {
        return Ok(if page.cursor.has_more { Step::Again } else { Step::Idle });
    }
    hook.log_attempts(attempts);
    let now = state.mesh.now();
    let Some(saved) = on_store(state, move |store| store.save_webhook_progress(&hook, now)).await? else {
        // An operator's command (or another deliverer) came first: read again.
        return Ok(Step::Again);
    };
    if saved.state == WebhookState::Failing {
        return Ok(Step::Stop);
    }
    if failed {
        let now = state.mesh.now().millis();
        let wait = saved.retry_at.as_deref().and_then(Timestamp::parse_iso).map_or(0, |at| at.millis() - now);
        return Ok(Step::Wait(Duration::from_millis(wait.max(0).unsigned_abs())));
    }
    Ok(Step::Again)
}
