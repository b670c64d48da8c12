//! Several daemons on one installation: what one daemon commits wakes the
//! others' watches ([`PgStore::listen`], LISTEN/NOTIFY), the background upkeep
//! runs in one daemon at a time ([`UpkeepLeader`], a session advisory lock), and
//! time is read from the database's clock ([`database_now`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentmesh_core::Timestamp;
use agentmesh_store::StoreResult;
use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;

use crate::pool::{Pool, Target};
use crate::{Fail, PgStore, Res, quote_ident};

/// How long a listener waits for a notification before it looks whether it was
/// asked to stop.
const LISTEN_TICK: Duration = Duration::from_millis(200);
/// How long a listener waits before connecting again after its connection broke.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);
/// How often a listener makes sure its link is alive (a notification that
/// cannot arrive looks the same as none being sent), and how long the server
/// has to answer.
const LINK_CHECK_EVERY: Duration = Duration::from_secs(2);
const LINK_CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// The upkeep leader's lease: the server ends the leader's session once it has
/// been silent this long (`idle_session_timeout`), which frees the leadership
/// for another daemon; a leader renews it with each check, every upkeep tick.
pub const LEADER_LEASE: Duration = Duration::from_secs(15);

/// The notification channel of the installation in `schema`: `agentmesh_`
/// and the schema, or a hash of it where that would pass PostgreSQL's 63-byte
/// identifier limit.
pub(crate) fn channel(schema: &str) -> String {
    let name = format!("agentmesh_{schema}");
    if name.len() <= 63 {
        name
    } else {
        format!("agentmesh_{:016x}", crate::locks::hash(schema, &["channel"]) as u64)
    }
}

/// Announces the commits of one store to every listener of the installation
/// (`pg_notify` on its channel, the mesh id as the payload), from a thread of
/// its own, after the commits.
///
/// Not in the write's transaction: a notification sent there makes its COMMIT
/// take the server's one notification lock (per database) and hold it through
/// the WAL flush, so notifying writes would commit one at a time. Nor in a
/// transaction per write: a notifying transaction takes an id and flushes a
/// commit record of its own, which would double the commits of every write.
/// So a write marks its mesh once it committed, and the thread sends
/// every mesh marked since its last send in one statement, committed without
/// a flush of its own (see [`ANNOUNCE`]), [`HOLD`] after the first mark: one
/// commit for all the writes of that time. Dropping the announcer sends what is marked before it returns.
///
/// Claims and heartbeats are not announced (`Db::unannounced`).
/// What a listening daemon wakes is its waiting watches: inbox watches (an
/// event queued), reservation waits (a reservation released), the webhook
/// deliverer and dashboard streams (a ledger entry). A claim queues no event,
/// releases nothing and makes no task claimable, and a heartbeat only moves a
/// lease; the deliverer and the streams of other daemons find their entries at
/// their own poll. Announced, they doubled the announcements of a worker's
/// claim-then-complete loop, and a worker polling an empty queue woke every
/// daemon's watches with each poll.
pub(crate) struct Announcer {
    shared: Arc<Marks>,
    thread: Option<JoinHandle<()>>,
}

/// The meshes written since the last announcement, and whether the store is
/// closing.
#[derive(Default)]
struct Marks {
    pending: Mutex<(BTreeSet<String>, bool)>,
    wake: Condvar,
}

/// Sends one announcement of every mesh in `$2` on channel `$1`, in a
/// transaction that commits without waiting for its WAL flush
/// (`synchronous_commit` off for it alone): listeners are signalled at the
/// commit all the same, and an announcement lost to a crash costs only a
/// prompt wake-up, so it need not pay a durable commit of its own.
const ANNOUNCE: &str = "SELECT set_config('synchronous_commit', 'off', TRUE), pg_notify($1, mesh_id)
     FROM unnest($2::TEXT[]) AS mesh_id";

impl Announcer {
    pub(crate) fn start(pool: Arc<Pool>, channel: String) -> Announcer {
        let shared = Arc::new(Marks::default());
        let marks = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("agentmesh-pg-announce".into())
            .spawn(move || announce_loop(&pool, &channel, &marks))
            .ok();
        if thread.is_none() {
            tracing::warn!("could not start the thread announcing commits; other daemons wake on their own");
        }
        Announcer { shared, thread }
    }

    /// Marks a committed write of `mesh_id` for the next announcement.
    pub(crate) fn mark(&self, mesh_id: &str) {
        let mut pending = self.shared.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if !pending.0.contains(mesh_id) {
            pending.0.insert(mesh_id.to_owned());
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        self.shared.pending.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How long the announcer holds a mark before it sends: the writes of that
/// time share one announcement, so a busy store sends a few hundred a
/// second at most, whatever its write rate, and a lone write's announcement
/// does not compete with the write that follows it. Listeners learn of a
/// commit this much later; their watches poll as well.
const HOLD: Duration = Duration::from_millis(5);

fn announce_loop(pool: &Pool, channel: &str, marks: &Marks) {
    loop {
        let (meshes, closing) = {
            let mut pending = marks.pending.lock().unwrap_or_else(PoisonError::into_inner);
            while pending.0.is_empty() && !pending.1 {
                pending = marks.wake.wait(pending).unwrap_or_else(PoisonError::into_inner);
            }
            // Closing ends the hold at once.
            let until = std::time::Instant::now() + HOLD;
            while !pending.1 {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                pending = marks.wake.wait_timeout(pending, left).unwrap_or_else(PoisonError::into_inner).0;
            }
            (std::mem::take(&mut pending.0), pending.1)
        };
        if !meshes.is_empty() {
            let meshes: Vec<String> = meshes.into_iter().collect();
            let sent = pool.get().and_then(|mut conn| {
                let db = crate::Db::new(&mut conn, "");
                db.query(ANNOUNCE, &[&channel, &meshes]).map(drop)
            });
            // Nothing is lost with an announcement but a prompt wake-up: a
            // daemon's watches poll the store as well.
            if let Err(Fail(err)) = sent {
                tracing::warn!(channel, error = %err, meshes = meshes.len(), "could not announce commits");
            }
        }
        if closing {
            return;
        }
    }
}

/// A thread that listens for the installation's commits; stops when dropped.
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl PgStore {
    /// Calls `on_commit` with the mesh id of every write any store on this
    /// installation commits (this process's included), but for claims and
    /// heartbeats, which no waiter looks for (see the announcer), from a thread of its own
    /// with a connection of its own. When that connection breaks, it connects
    /// again and calls `on_commit("")` once it listens again: commits in between
    /// were missed, so a caller should look at everything again.
    pub fn listen(&self, on_commit: impl Fn(&str) + Send + 'static) -> StoreResult<Listener> {
        let target = self.pool.target().clone();
        let channel = channel(&self.schema);
        // The first connection is made here, so a server that cannot be reached
        // fails the caller instead of a thread's log.
        let first = listening(&target, &channel).map_err(|Fail(e)| e)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("agentmesh-pg-listen".into())
            .spawn(move || listen_loop(first, &target, &channel, &stopped, &on_commit))
            .map_err(|e| agentmesh_store::StoreError::Backend(Box::new(e)))?;
        Ok(Listener { stop, thread: Some(thread) })
    }

    /// The upkeep leadership of this installation, for one daemon.
    pub fn upkeep_leader(&self) -> UpkeepLeader {
        UpkeepLeader {
            target: self.pool.target().clone(),
            key: crate::locks::hash(&self.schema, &["upkeep-leader"]),
            session: Mutex::new(None),
        }
    }

    /// Measures how far the database's clock is from this machine's and makes
    /// [`database_now`] follow it; returns the offset in milliseconds.
    pub fn sync_clock(&self) -> StoreResult<i64> {
        self.read(|db| {
            let before = system_millis();
            let server: i64 =
                db.query_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT", &[])?.get(0);
            let after = system_millis();
            let offset = server - (before + (after - before) / 2);
            CLOCK_OFFSET_MS.store(offset, Ordering::Relaxed);
            Ok(offset)
        })
    }
}

fn listening(target: &Target, channel: &str) -> Res<Client> {
    let mut conn = target.session()?;
    conn.batch_execute(&format!("LISTEN {}", quote_ident(channel)))?;
    Ok(conn)
}

/// Hands on notifications until `stop`. A connection that breaks, or whose
/// link stops answering, is replaced; meanwhile the watches that wait go on
/// polling the store at their own pace, and every one is woken once the
/// listener is back (it may have missed commits).
fn listen_loop(first: Client, target: &Target, channel: &str, stop: &AtomicBool, on_commit: &dyn Fn(&str)) {
    let mut conn = Some(first);
    let mut checked = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let Some(live) = conn.as_mut() else {
            std::thread::sleep(RECONNECT_AFTER);
            match listening(target, channel) {
                Ok(fresh) => {
                    tracing::info!(channel, "listening for commits again");
                    conn = Some(fresh);
                    checked = std::time::Instant::now();
                    on_commit("");
                }
                Err(Fail(err)) => tracing::warn!(channel, error = %err, "could not listen for commits"),
            }
            continue;
        };
        if !drain_notifications(live, channel, on_commit) || live.is_closed() {
            if let Some(dead) = conn.take() {
                let_go(dead);
            }
        } else if checked.elapsed() >= LINK_CHECK_EVERY {
            checked = std::time::Instant::now();
            if let Err(err) = live.is_valid(LINK_CHECK_TIMEOUT) {
                tracing::warn!(channel, error = %err, "the connection listening for commits stopped answering");
                if let Some(dead) = conn.take() {
                    let_go(dead);
                }
            }
        }
    }
}

/// Hands on what arrives within one tick; `false` when the connection broke.
fn drain_notifications(conn: &mut Client, channel: &str, on_commit: &dyn Fn(&str)) -> bool {
    let mut notifications = conn.notifications();
    let mut iter = notifications.timeout_iter(LISTEN_TICK);
    loop {
        match iter.next() {
            Ok(Some(note)) => on_commit(note.payload()),
            Ok(None) => return true,
            Err(err) => {
                tracing::warn!(channel, error = %err, "the connection listening for commits broke");
                return false;
            }
        }
    }
}

/// Whether this daemon runs the installation's background upkeep: it does while
/// it holds a session advisory lock on a connection of its own. A daemon that
/// dies loses its connection and the server releases the lock, so the next
/// daemon to ask takes it over.
pub struct UpkeepLeader {
    target: Target,
    key: i64,
    /// The connection that holds (or tries for) the lock, and whether it holds it.
    session: Mutex<Option<(Client, bool)>>,
}

/// The leader's connection may be let go from an asynchronous task (the daemon
/// drops its upkeep there), where the blocking client may not close itself: it
/// is closed on a thread of its own.
impl Drop for UpkeepLeader {
    fn drop(&mut self) {
        let session = self.session.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((client, _)) = session {
            let_go(client);
        }
    }
}

/// Closes a blocking connection on a thread of its own: closing waits for the
/// connection to end, which on a dead link lasts until the server or the TCP
/// stack gives up, and the caller may be an asynchronous task.
fn let_go(client: Client) {
    let closing =
        std::thread::Builder::new().name("agentmesh-pg-close".to_owned()).spawn(move || drop(client));
    if let Err(err) = closing {
        tracing::warn!(error = %err, "could not close a PostgreSQL connection");
    }
}

impl std::fmt::Debug for UpkeepLeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpkeepLeader").field("key", &self.key).finish_non_exhaustive()
    }
}

impl UpkeepLeader {
    /// Whether this daemon leads now: keeps the lock it holds (checking its
    /// connection is alive), or tries to take it. Blocks for a round trip.
    pub fn holds(&self) -> bool {
        let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        match self.check(&mut session) {
            Ok(leads) => leads,
            Err(Fail(err)) => {
                tracing::warn!(error = %err, "lost the connection of the upkeep leadership");
                if let Some((client, _)) = session.take() {
                    let_go(client);
                }
                false
            }
        }
    }

    /// Renews the lease on the connection that holds it, or takes a fresh
    /// connection and tries for the lock. A connection that does not answer in
    /// time is let go: if it held the lock, the server frees it once the lease
    /// runs out.
    fn check(&self, session: &mut Option<(Client, bool)>) -> Res<bool> {
        if let Some((conn, held)) = session.as_mut()
            && let Err(err) = conn.is_valid(LINK_CHECK_TIMEOUT)
        {
            if *held {
                tracing::warn!(error = %err, "this daemon lost the upkeep leadership with its connection");
            }
            if let Some((client, _)) = session.take() {
                let_go(client);
            }
        }
        if session.is_none() {
            let mut conn = self.target.session()?;
            conn.batch_execute(&format!("SET idle_session_timeout = {}", LEADER_LEASE.as_millis()))?;
            *session = Some((conn, false));
        }
        let Some((conn, held)) = session.as_mut() else { return Ok(false) };
        if !*held {
            *held = conn.query_one("SELECT pg_try_advisory_lock($1)", &[&self.key])?.get(0);
            if *held {
                tracing::info!("this daemon now runs the installation's upkeep");
            }
        }
        Ok(*held)
    }
}

/// How far the database's clock is ahead of this machine's, in milliseconds, as
/// last measured by [`PgStore::sync_clock`].
static CLOCK_OFFSET_MS: AtomicI64 = AtomicI64::new(0);

#[allow(clippy::disallowed_methods)] // The offset is applied to this machine's clock.
fn system_millis() -> i64 {
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    i64::try_from(millis).unwrap_or(i64::MAX)
}

/// The time by the database's clock: this machine's clock corrected by the
/// offset [`PgStore::sync_clock`] last measured. Daemons on several machines
/// that read time here stamp leases, presence and ledger entries by one clock.
pub fn database_now() -> Timestamp {
    Timestamp::from_millis(system_millis().saturating_add(CLOCK_OFFSET_MS.load(Ordering::Relaxed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_stay_within_the_identifier_limit() {
        assert_eq!(channel("agentmesh"), "agentmesh_agentmesh");
        let long = "s".repeat(63);
        let named = channel(&long);
        assert!(named.len() <= 63 && named.starts_with("agentmesh_"), "{named}");
        assert_ne!(named, channel(&"t".repeat(63)));
    }
}
