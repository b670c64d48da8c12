//! [`RemoteMesh`]: the operations sent to a running daemon over HTTP.

use std::path::Path;
use std::time::Duration;

use agentmesh_core::{LedgerEntry, LedgerSlice, Task};
use reqwest::Method;
use reqwest::blocking::{Client, RequestBuilder};
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::views::{
    AckView, CheckPathsView, ClaimView, CompleteAndClaimView, ConflictView, DeletedEventsView,
    DeliveryChangeView, DeliveryConfirmedView, DeliveryView, DispatchChangeView, DispatchView,
    DispatchedTaskView, DrainView, FingerprintView, HeldEventView, HoldReleasedView, HoldView,
    IdleRemovedView, IdleSessionView, ImportView, InboxEventView, MissionDetailView, MissionSaved,
    MissionView, NodeRankView, PushView, RateVerdictView, RemovedView, RequeueHeldView, RequeueView,
    ReserveView, RetractView, StaleDispatchesView, StatusView, ToolCallLogView,
};
use crate::wire::{
    AckBody, BatchEnqueueBody, CancelBody, CheckPathsBody, ClaimBody, CompleteAndClaimBody, CompletionBody,
    ConflictParams, DeleteEventsBody, DeliveryBody, DeliveryListParams, DeliveryStatusBody, DispatchBody,
    DispatchStatusBody, DispatchedTaskBody, DrainBody, EnqueueBody, FenceBody, FingerprintParams,
    HeartbeatBody, HeldParams, HoldBody, IdleBody, ImportBody, LedgerParams, ListParams, MissionBody,
    MissionListParams, PlacementBody, PriorityBody, PushEventBody, RemoveDispatchesBody, RequeueBody,
    RequeueHeldBody, ReservationListParams, ReserveBody, RetractBody, SliceParams, StaleDispatchesBody,
    ToolCallBody, ToolCallParams, WatchParams,
};
use crate::{MeshApi, MeshError, MeshResult};

/// How long an ordinary request may take, end to end.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How much longer than its own timeout a watch request may take to answer.
const WATCH_GRACE: Duration = Duration::from_secs(30);
/// The first path segments of the daemon's own routes. A base URL holding one of
/// them names a route of the daemon rather than the daemon (`.../v1` would send
/// every request to `.../v1/v1/...`), so it is refused, naming the root URL.
const DAEMON_ROUTES: [&str; 4] = ["v1", "mcp", "metrics", "healthz"];

/// The mesh operations of a daemon at a base URL (`http://127.0.0.1:7433`).
#[derive(Debug, Clone)]
pub struct RemoteMesh {
    base: reqwest::Url,
    auth: HeaderValue,
    client: Client,
}

/// The answer of `POST .../events/peek`.
#[derive(serde::Deserialize)]
struct PeekAnswer {
    events: Vec<InboxEventView>,
}

/// The error body every daemon error has.
#[derive(serde::Deserialize)]
struct ErrorAnswer {
    error: ErrorDetail,
}

#[derive(serde::Deserialize)]
struct ErrorDetail {
    code: String,
    message: String,
}

impl RemoteMesh {
    /// Checks a daemon's base URL as [`RemoteMesh::new`] does, without a token:
    /// an http(s) URL of the daemon's root, or of a prefix a proxy serves it under.
    pub fn check_base_url(base_url: &str) -> MeshResult<()> {
        parse_base_url(base_url).map(|_| ())
    }

    /// A client of the daemon at `base_url`, presenting `token`. An `https` URL
    /// is checked against the bundled public roots (see [`RemoteMesh::trusting`]).
    pub fn new(base_url: &str, token: &str) -> MeshResult<RemoteMesh> {
        RemoteMesh::trusting(base_url, token, None)
    }

    /// [`RemoteMesh::new`], also trusting the CA certificates of the PEM file
    /// `ca_cert` (for a daemon whose certificate a private CA signed). Without it
    /// the client trusts the Mozilla root set built into the binary, the same on
    /// every machine and independent of the system's certificate store.
    pub fn trusting(base_url: &str, token: &str, ca_cert: Option<&Path>) -> MeshResult<RemoteMesh> {
        let base = parse_base_url(base_url)?;
        let token = token.trim();
        if token.is_empty() {
            return Err(agentmesh_core::InvalidInput::new("token", "must not be blank").into());
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            agentmesh_core::InvalidInput::new("token", "contains characters a header cannot carry")
        })?;
        // Kept out of `Debug` output and out of HTTP/2 header compression tables.
        auth.set_sensitive(true);
        let mut builder = Client::builder().timeout(REQUEST_TIMEOUT).use_rustls_tls();
        if let Some(path) = ca_cert {
            for cert in read_ca_certs(path)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|err| MeshError::Unreachable { url: base.to_string(), reason: err.to_string() })?;
        Ok(RemoteMesh { base, auth, client })
    }

    /// The daemon's base URL.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    /// `v1/meshes/{mesh}/{segments...}`, every segment percent-encoded.
    fn url(&self, mesh: &str, segments: &[&str]) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["v1", "meshes", mesh]).extend(segments);
        }
        url
    }

    fn request(&self, method: Method, mesh: &str, segments: &[&str]) -> RequestBuilder {
        self.client.request(method, self.url(mesh, segments)).header(AUTHORIZATION, self.auth.clone())
    }

    fn get<T: DeserializeOwned>(
        &self,
        mesh: &str,
        segments: &[&str],
        query: &impl Serialize,
    ) -> MeshResult<T> {
        self.send(self.request(Method::GET, mesh, segments).query(query))
    }

    fn post<T: DeserializeOwned>(
        &self,
        mesh: &str,
        segments: &[&str],
        body: &impl Serialize,
    ) -> MeshResult<T> {
        self.send(self.request(Method::POST, mesh, segments).json(body))
    }

    fn delete<T: DeserializeOwned>(&self, mesh: &str, segments: &[&str]) -> MeshResult<T> {
        self.send(self.request(Method::DELETE, mesh, segments))
    }

    /// Sends the request and reads the answer: the view on success, the daemon's
    /// error (code and message) otherwise.
    fn send<T: DeserializeOwned>(&self, request: RequestBuilder) -> MeshResult<T> {
        let unreachable = |reason: String| MeshError::Unreachable { url: self.base.to_string(), reason };
        let response = request.send().map_err(|err| {
            if let Some(tls) = tls_failure(&err) {
                unreachable(format!(
                    "the TLS handshake failed ({tls}); if the daemon's certificate is signed by a private \
                     CA, trust it with --ca-cert FILE or $AGENTMESH_CA_CERT"
                ))
            } else if err.is_connect() {
                MeshError::CannotConnect { url: self.base.to_string(), reason: describe(&err) }
            } else {
                unreachable(describe(&err))
            }
        })?;
        let status = response.status();
        let bytes = response.bytes().map_err(|err| unreachable(describe(&err)))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes)
                .map_err(|err| unreachable(format!("unexpected answer ({status}): {err}")));
        }
        match serde_json::from_slice::<ErrorAnswer>(&bytes) {
            Ok(ErrorAnswer { error }) => {
                Err(MeshError::Remote { status: status.as_u16(), code: error.code, message: error.message })
            }
            Err(_) => Err(MeshError::Remote {
                status: status.as_u16(),
                code: "http_error".to_owned(),
                message: format!("the daemon answered {status}"),
            }),
        }
    }
}

/// Parses a daemon's base URL, with a trailing slash so that routes join under it.
/// The error names the `server` field, and for a URL holding a route of the
/// daemon (`http://host:7433/v1`) it names the root URL to use instead.
fn parse_base_url(base_url: &str) -> MeshResult<reqwest::Url> {
    let invalid = |why: String| MeshError::from(agentmesh_core::InvalidInput::new("server", why));
    let mut base = reqwest::Url::parse(base_url.trim())
        .map_err(|err| invalid(format!("{base_url:?} is not a URL: {err}")))?;
    if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
        return Err(invalid(format!("{base_url:?} is not an http(s) URL")));
    }
    let segments: Vec<String> = base
        .path_segments()
        .map(|segments| segments.filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    if let Some(at) = segments.iter().position(|s| DAEMON_ROUTES.contains(&s.as_str())) {
        let mut root = base.clone();
        root.set_path(&segments[..at].join("/"));
        root.set_query(None);
        root.set_fragment(None);
        return Err(invalid(format!(
            "{base_url:?} ends in /{}, a route of the daemon: use the daemon's root URL, {root}",
            segments[at..].join("/")
        )));
    }
    if !base.path().ends_with('/') {
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    Ok(base)
}

/// The certificates of the PEM file `path`; an unreadable file, or one that
/// holds no certificate, is an invalid `caCert`.
fn read_ca_certs(path: &Path) -> MeshResult<Vec<reqwest::Certificate>> {
    let invalid = |reason: String| agentmesh_core::InvalidInput::new("caCert", reason);
    let pem = std::fs::read(path).map_err(|err| invalid(format!("cannot read {}: {err}", path.display())))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|err| {
        invalid(format!("{} is not a PEM certificate file: {}", path.display(), describe(&err)))
    })?;
    if certs.is_empty() {
        return Err(invalid(format!("{} holds no PEM certificate", path.display())).into());
    }
    Ok(certs)
}

/// The rustls error behind `err`, if the TLS handshake failed (an untrusted or
/// mismatched certificate, a peer that does not speak TLS).
fn tls_failure(err: &reqwest::Error) -> Option<&rustls::Error> {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        // An I/O error wraps the rustls error, possibly inside further I/O errors,
        // without listing it among its sources.
        let mut inner: &(dyn std::error::Error + 'static) = cause;
        while let Some(wrapped) = inner.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            inner = wrapped;
        }
        if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        source = cause.source();
    }
    None
}

/// An HTTP client error with its causes, on one line.
pub(crate) fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// No query parameters.
const NO_QUERY: &[(&str, &str)] = &[];

impl MeshApi for RemoteMesh {
    fn enqueue(&self, mesh: &str, body: EnqueueBody) -> MeshResult<Task> {
        self.post(mesh, &["tasks"], &body)
    }

    fn enqueue_batch(&self, mesh: &str, body: BatchEnqueueBody) -> MeshResult<Vec<Task>> {
        self.post(mesh, &["tasks", "batch"], &body)
    }

    fn list_tasks(&self, mesh: &str, params: ListParams) -> MeshResult<Vec<Task>> {
        self.get(mesh, &["tasks"], &params)
    }

    fn show_task(&self, mesh: &str, id: &str) -> MeshResult<Task> {
        self.get(mesh, &["tasks", id], &NO_QUERY)
    }

    fn cancel_task(&self, mesh: &str, id: &str, body: CancelBody) -> MeshResult<Task> {
        self.post(mesh, &["tasks", id, "cancel"], &body)
    }

    fn set_priority(&self, mesh: &str, id: &str, body: PriorityBody) -> MeshResult<Task> {
        self.post(mesh, &["tasks", id, "priority"], &body)
    }

    fn requeue_task(&self, mesh: &str, id: &str, body: RequeueBody) -> MeshResult<RequeueView> {
        self.post(mesh, &["tasks", id, "requeue"], &body)
    }

    fn claim(&self, mesh: &str, body: ClaimBody) -> MeshResult<ClaimView> {
        self.post(mesh, &["claims"], &body)
    }

    fn heartbeat(&self, mesh: &str, body: HeartbeatBody) -> MeshResult<Task> {
        self.post(mesh, &["heartbeats"], &body)
    }

    fn complete(&self, mesh: &str, body: CompletionBody) -> MeshResult<Task> {
        self.post(mesh, &["completions"], &body)
    }

    fn complete_and_claim(&self, mesh: &str, body: CompleteAndClaimBody) -> MeshResult<CompleteAndClaimView> {
        self.post(mesh, &["complete-and-claim"], &body)
    }

    fn push_event(&self, mesh: &str, body: PushEventBody) -> MeshResult<PushView> {
        self.post(mesh, &["events"], &body)
    }

    fn drain(&self, mesh: &str, body: DrainBody) -> MeshResult<DrainView> {
        self.post(mesh, &["events", "drain"], &body)
    }

    fn peek(&self, mesh: &str, body: DrainBody) -> MeshResult<Vec<InboxEventView>> {
        self.post::<PeekAnswer>(mesh, &["events", "peek"], &body).map(|a| a.events)
    }

    fn watch(&self, mesh: &str, body: DrainBody, timeout: Duration) -> MeshResult<DrainView> {
        let timeout = crate::watch::watch_timeout("timeout", timeout)?;
        let params = WatchParams { timeout_secs: Some(timeout.as_secs().max(1)) };
        let request = self
            .request(Method::POST, mesh, &["events", "watch"])
            .query(&params)
            .json(&body)
            .timeout(timeout + WATCH_GRACE);
        self.send(request)
    }

    fn ack(&self, mesh: &str, body: AckBody) -> MeshResult<AckView> {
        self.post(mesh, &["events", "ack"], &body)
    }

    fn delete_events(&self, mesh: &str, body: DeleteEventsBody) -> MeshResult<DeletedEventsView> {
        self.post(mesh, &["events", "delete"], &body)
    }

    fn retract(&self, mesh: &str, body: RetractBody) -> MeshResult<RetractView> {
        self.post(mesh, &["events", "retract"], &body)
    }

    fn held_events(&self, mesh: &str, params: HeldParams) -> MeshResult<Vec<HeldEventView>> {
        self.get(mesh, &["events", "held"], &params)
    }

    fn requeue_held(&self, mesh: &str, body: RequeueHeldBody) -> MeshResult<RequeueHeldView> {
        self.post(mesh, &["events", "held", "requeue"], &body)
    }

    fn completion_fingerprints(
        &self,
        mesh: &str,
        params: FingerprintParams,
    ) -> MeshResult<Vec<FingerprintView>> {
        self.get(mesh, &["completions", "fingerprints"], &params)
    }

    fn completion_conflicts(&self, mesh: &str, params: ConflictParams) -> MeshResult<Vec<ConflictView>> {
        self.get(mesh, &["completions", "conflicts"], &params)
    }

    fn ledger_tail(&self, mesh: &str, params: LedgerParams) -> MeshResult<Vec<LedgerEntry>> {
        self.get(mesh, &["ledger"], &params)
    }

    fn ledger_slice(&self, mesh: &str, params: SliceParams) -> MeshResult<LedgerSlice> {
        self.get(mesh, &["ledger", "slice"], &params)
    }

    fn import_ledger(&self, mesh: &str, body: ImportBody) -> MeshResult<ImportView> {
        self.post(mesh, &["ledger", "import"], &body)
    }

    fn upsert_mission(&self, mesh: &str, body: MissionBody) -> MeshResult<MissionSaved> {
        self.post(mesh, &["missions"], &body)
    }

    fn missions(&self, mesh: &str, params: MissionListParams) -> MeshResult<Vec<MissionView>> {
        self.get(mesh, &["missions"], &params)
    }

    fn mission(&self, mesh: &str, id: &str) -> MeshResult<MissionDetailView> {
        self.get(mesh, &["missions", id], &NO_QUERY)
    }

    fn report_idle(&self, mesh: &str, body: IdleBody) -> MeshResult<IdleSessionView> {
        self.post(mesh, &["idle-sessions"], &body)
    }

    fn idle_sessions(&self, mesh: &str) -> MeshResult<Vec<IdleSessionView>> {
        self.get(mesh, &["idle-sessions"], &NO_QUERY)
    }

    fn remove_idle_session(
        &self,
        mesh: &str,
        node_id: &str,
        session_id: &str,
    ) -> MeshResult<IdleRemovedView> {
        self.delete(mesh, &["idle-sessions", node_id, session_id])
    }

    fn record_dispatched_task(&self, mesh: &str, body: DispatchedTaskBody) -> MeshResult<DispatchedTaskView> {
        self.post(mesh, &["tasks", "dispatched"], &body)
    }

    fn delivery_confirmed(&self, mesh: &str, task_id: &str) -> MeshResult<DeliveryConfirmedView> {
        self.get(mesh, &["tasks", task_id, "delivery"], &NO_QUERY)
    }

    fn hold_task(&self, mesh: &str, body: HoldBody) -> MeshResult<HoldView> {
        self.post(mesh, &["holds"], &body)
    }

    fn holds(&self, mesh: &str) -> MeshResult<Vec<HoldView>> {
        self.get(mesh, &["holds"], &NO_QUERY)
    }

    fn hold(&self, mesh: &str, task_id: &str) -> MeshResult<HoldView> {
        self.get(mesh, &["holds", task_id], &NO_QUERY)
    }

    fn release_hold(&self, mesh: &str, task_id: &str) -> MeshResult<HoldReleasedView> {
        self.delete(mesh, &["holds", task_id])
    }

    fn reserve(&self, mesh: &str, body: ReserveBody) -> MeshResult<ReserveView> {
        let wait = crate::watch::watch_timeout("waitSecs", Duration::from_secs(body.wait_secs.unwrap_or(0)))?;
        let request = self.request(Method::POST, mesh, &["reservations"]).json(&body);
        if wait.is_zero() { self.send(request) } else { self.send(request.timeout(wait + WATCH_GRACE)) }
    }

    fn renew_reservation(
        &self,
        mesh: &str,
        id: &str,
        body: FenceBody,
    ) -> MeshResult<agentmesh_core::Reservation> {
        self.post(mesh, &["reservations", id, "renew"], &body)
    }

    fn release_reservation(
        &self,
        mesh: &str,
        id: &str,
        body: FenceBody,
    ) -> MeshResult<agentmesh_core::Reservation> {
        self.post(mesh, &["reservations", id, "release"], &body)
    }

    fn reservations(
        &self,
        mesh: &str,
        params: ReservationListParams,
    ) -> MeshResult<Vec<agentmesh_core::Reservation>> {
        self.get(mesh, &["reservations"], &params)
    }

    fn check_paths(&self, mesh: &str, body: CheckPathsBody) -> MeshResult<CheckPathsView> {
        self.post(mesh, &["reservations", "check"], &body)
    }

    fn archive(&self, mesh: &str) -> MeshResult<agentmesh_store::archive::ArchiveState> {
        self.get(mesh, &["archive"], &())
    }

    fn set_retention(
        &self,
        mesh: &str,
        body: agentmesh_core::retention::MeshRetention,
    ) -> MeshResult<agentmesh_store::archive::ArchiveState> {
        self.post(mesh, &["retention"], &body)
    }

    fn archived_tasks(
        &self,
        mesh: &str,
        params: crate::ArchivedTasksParams,
    ) -> MeshResult<crate::ArchivedTasksView> {
        self.get(mesh, &["archive", "tasks"], &params)
    }

    fn drop_archived(
        &self,
        mesh: &str,
        body: agentmesh_core::retention::ArchiveMark,
    ) -> MeshResult<agentmesh_core::retention::ArchiveMark> {
        self.post(mesh, &["archive", "drop"], &body)
    }

    fn add_webhook(
        &self,
        mesh: &str,
        body: crate::webhook::WebhookBody,
    ) -> MeshResult<crate::webhook::WebhookAddedView> {
        self.post(mesh, &["webhooks"], &body)
    }

    fn webhooks(&self, mesh: &str) -> MeshResult<Vec<agentmesh_core::Webhook>> {
        #[derive(serde::Deserialize)]
        struct Listed {
            webhooks: Vec<agentmesh_core::Webhook>,
        }
        self.get::<Listed>(mesh, &["webhooks"], &()).map(|l| l.webhooks)
    }

    fn webhook(&self, mesh: &str, id: &str) -> MeshResult<agentmesh_core::Webhook> {
        self.get(mesh, &["webhooks", id], &())
    }

    fn remove_webhook(&self, mesh: &str, id: &str) -> MeshResult<agentmesh_core::Webhook> {
        self.delete(mesh, &["webhooks", id])
    }

    fn webhook_command(
        &self,
        mesh: &str,
        id: &str,
        command: agentmesh_store::WebhookCommand,
    ) -> MeshResult<agentmesh_core::Webhook> {
        let verb = match command {
            agentmesh_store::WebhookCommand::Resume => "resume",
            agentmesh_store::WebhookCommand::Skip => "skip",
            agentmesh_store::WebhookCommand::Remove => return self.remove_webhook(mesh, id),
        };
        self.post(mesh, &["webhooks", id, verb], &serde_json::json!({}))
    }

    fn test_webhook(&self, mesh: &str, id: &str) -> MeshResult<crate::webhook::WebhookTestView> {
        self.post(mesh, &["webhooks", id, "test"], &serde_json::json!({}))
    }

    fn send_delivery(&self, mesh: &str, body: DeliveryBody) -> MeshResult<DeliveryView> {
        self.post(mesh, &["deliveries"], &body)
    }

    fn deliveries(&self, mesh: &str, params: DeliveryListParams) -> MeshResult<Vec<DeliveryView>> {
        self.get(mesh, &["deliveries"], &params)
    }

    fn delivery(&self, mesh: &str, id: &str) -> MeshResult<DeliveryView> {
        self.get(mesh, &["deliveries", id], &NO_QUERY)
    }

    fn update_delivery(
        &self,
        mesh: &str,
        id: &str,
        body: DeliveryStatusBody,
    ) -> MeshResult<DeliveryChangeView> {
        self.post(mesh, &["deliveries", id, "status"], &body)
    }

    fn record_dispatch(&self, mesh: &str, body: DispatchBody) -> MeshResult<DispatchView> {
        self.post(mesh, &["dispatches"], &body)
    }

    fn dispatches(&self, mesh: &str) -> MeshResult<Vec<DispatchView>> {
        self.get(mesh, &["dispatches"], &NO_QUERY)
    }

    fn dispatch(&self, mesh: &str, task_id: &str) -> MeshResult<DispatchView> {
        self.get(mesh, &["dispatches", task_id], &NO_QUERY)
    }

    fn update_dispatches(&self, mesh: &str, body: DispatchStatusBody) -> MeshResult<DispatchChangeView> {
        self.post(mesh, &["dispatches", "status"], &body)
    }

    fn mark_stale_dispatches(
        &self,
        mesh: &str,
        body: StaleDispatchesBody,
    ) -> MeshResult<StaleDispatchesView> {
        self.post(mesh, &["dispatches", "mark-stale"], &body)
    }

    fn remove_dispatches(&self, mesh: &str, body: RemoveDispatchesBody) -> MeshResult<RemovedView> {
        self.post(mesh, &["dispatches", "remove"], &body)
    }

    fn placement(&self, mesh: &str, body: PlacementBody) -> MeshResult<Vec<NodeRankView>> {
        self.post(mesh, &["placement"], &body)
    }

    fn coordinator_presence(
        &self,
        mesh: &str,
        body: crate::wire::PresenceBody,
    ) -> MeshResult<crate::views::PresenceView> {
        self.post(mesh, &["coordinators", "presence"], &body)
    }

    fn status(&self, mesh: &str) -> MeshResult<StatusView> {
        self.get(mesh, &["status"], &NO_QUERY)
    }

    fn meshes(&self) -> MeshResult<Vec<crate::views::MeshSummaryView>> {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["v1", "meshes"]);
        }
        self.send(self.client.get(url).header(AUTHORIZATION, self.auth.clone()))
    }

    fn record_tool_call(&self, mesh: &str, body: ToolCallBody) -> MeshResult<RateVerdictView> {
        self.post(mesh, &["tool-calls"], &body)
    }

    fn tool_calls(&self, mesh: &str, params: ToolCallParams) -> MeshResult<ToolCallLogView> {
        self.get(mesh, &["tool-calls"], &params)
    }
}

#[cfg(test)]
mod tests {
    use agentmesh_store::StoreError;

    use super::*;

    #[test]
    fn ids_are_path_segments_and_bad_servers_name_the_flag() {
        let remote = RemoteMesh::new("http://127.0.0.1:7433", "t").unwrap();
        assert_eq!(
            remote.url("my mesh", &["tasks", "a/b"]).as_str(),
            "http://127.0.0.1:7433/v1/meshes/my%20mesh/tasks/a%2Fb"
        );
        let prefixed = RemoteMesh::new("http://host:1/prefix", "t").unwrap();
        assert_eq!(prefixed.url("m", &["status"]).as_str(), "http://host:1/prefix/v1/meshes/m/status");
        let secret = RemoteMesh::new("http://127.0.0.1:7433", "s3cret-token").unwrap();
        assert!(!format!("{secret:?}").contains("s3cret"), "the token never shows in Debug output");
        let err = RemoteMesh::new("not a url", "t").unwrap_err();
        assert_eq!(err.code(), "invalid_input");
        assert!(RemoteMesh::new("ftp://x", "t").is_err());
        assert!(RemoteMesh::new("http://x", " ").is_err());
    }

    #[test]
    fn a_url_holding_a_daemon_route_names_the_root_url() {
        for (url, root) in [
            ("http://host:7433/v1", "http://host:7433/"),
            ("http://host:7433/v1/", "http://host:7433/"),
            ("http://host:7433/v1/meshes/default/tasks", "http://host:7433/"),
            ("http://host:7433/mcp", "http://host:7433/"),
            ("https://proxy.test/agentmesh/v1?x=1", "https://proxy.test/agentmesh"),
        ] {
            let err = RemoteMesh::check_base_url(url).unwrap_err();
            let MeshError::Store(StoreError::InvalidInput(invalid)) = &err else { panic!("{url}: {err:?}") };
            assert_eq!(invalid.field, "server");
            assert!(
                invalid.problem.contains(&format!("use the daemon's root URL, {root}")),
                "{url}: {invalid}"
            );
        }
        for url in ["http://host:7433", "http://host:7433/", "http://host:1/prefix", "http://host:1/v1x/"] {
            RemoteMesh::check_base_url(url).unwrap();
        }
    }
}
