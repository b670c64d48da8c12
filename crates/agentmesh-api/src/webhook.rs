//! Webhooks at the API: the body that adds a subscription, what the routes
//! answer, and the [`Sender`] that makes one signed request per ledger entry,
//! used by the daemon's deliverer and by `webhook test`.
//!
//! A request is in the Standard Webhooks form: a JSON body
//! ([`agentmesh_core::webhook::body`]), and the headers `webhook-id` (the
//! ledger entry's id, the same on every retry and from every daemon, so a
//! receiver drops what it has seen), `webhook-timestamp` (Unix seconds) and
//! `webhook-signature` (`v1,` and the base64 of the HMAC-SHA256, keyed by the
//! secret's bytes, of `id.timestamp.body`).
//!
//! The sender is safe by default: connect and response timeouts, no
//! redirects, at most [`MAX_RESPONSE_BYTES`] of a response read, TLS checked
//! against the system's roots, and every address a name resolves to checked
//! against the subscription ([`agentmesh_core::webhook::address_allowed`]):
//! a name that resolves to a private address is refused unless the operator
//! allows private addresses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_core::webhook::{self, Attempt, NewWebhook, UrlPolicy};
use agentmesh_core::{InvalidInput, LedgerEntry, Timestamp, Webhook};
use serde::{Deserialize, Serialize};

/// How much of a receiver's answer is read, at most.
pub const MAX_RESPONSE_BYTES: u64 = 64 * 1024;
/// How long a connection may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a receiver may take to answer, when the daemon sets no other.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// `POST /v1/meshes/{mesh}/webhooks`: add a subscription.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookBody {
    /// The receiver: `https://...`, or `http://` to a loopback host.
    pub url: String,
    /// The ledger kinds to send (`task_completed`, `task_*`); all when empty.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Only entries about a task carrying one of these tags; any when empty.
    #[serde(default)]
    pub tags: Vec<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The signing secret (`whsec_` and base64); one is made when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Send the ledger from its first entry, not only what comes next.
    #[serde(default)]
    pub from_start: bool,
}

impl From<WebhookBody> for NewWebhook {
    fn from(body: WebhookBody) -> NewWebhook {
        NewWebhook {
            url: body.url,
            kinds: body.kinds,
            tags: body.tags,
            description: body.description,
            secret: body.secret,
            from_start: body.from_start,
        }
    }
}

/// What adding a subscription answers: the subscription, and its secret, the
/// one time it is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAddedView {
    /// The subscription as stored.
    pub webhook: Webhook,
    /// The signing secret: keep it, it is not shown again.
    pub secret: String,
}

/// What a test delivery answers: the attempt, as the delivery log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookTestView {
    /// The subscription.
    pub webhook_id: String,
    /// The attempt.
    pub attempt: Attempt,
}

/// A fresh secret from the system's random source.
pub fn new_secret() -> Result<String, String> {
    let mut key = [0u8; 32];
    fill_random(&mut key)?;
    Ok(webhook::secret_for(&key))
}

fn fill_random(buf: &mut [u8]) -> Result<(), String> {
    getrandom::fill(buf).map_err(|err| format!("no random bytes: {err}"))
}

/// A draw in `[0, 1)` for the backoff's jitter.
pub fn jitter() -> f64 {
    let mut bytes = [0u8; 4];
    if fill_random(&mut bytes).is_err() {
        return 0.5;
    }
    f64::from(u32::from_le_bytes(bytes)) / (f64::from(u32::MAX) + 1.0)
}

/// The `webhook-signature` of a message: `v1,` and the base64 of the
/// HMAC-SHA256 of `id.timestamp.body` keyed by `key`.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let mut ctx = ring::hmac::Context::with_key(&key);
    ctx.update(id.as_bytes());
    ctx.update(b".");
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    format!("v1,{}", webhook::base64_encode(ctx.sign().as_ref()))
}

/// Checks every address a name resolves to against the subscription's
/// policy (see the module docs).
struct CheckedResolver {
    policy: UrlPolicy,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy;
        let host = name.as_str().to_ascii_lowercase();
        Box::pin(async move {
            let loopback = host == "localhost" || host.ends_with(".localhost");
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(refused) = found.iter().find(|a| !webhook::address_allowed(a.ip(), loopback, policy))
            {
                let why = format!(
                    "{host} resolves to {}, a private or reserved address (the daemon's \
                     --webhook-allow-private allows it)",
                    refused.ip()
                );
                return Err(why.into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

/// Sends signed webhook requests (see the module docs). Asynchronous: the
/// deliverer runs it on the daemon's runtime; [`Sender::send_blocking`] is for
/// a caller on a thread that may block.
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    policy: UrlPolicy,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").field("policy", &self.policy).finish_non_exhaustive()
    }
}

impl Sender {
    /// A sender under `policy` whose receivers must answer within `timeout`.
    pub fn new(policy: UrlPolicy, timeout: Duration) -> Result<Sender, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(CheckedResolver { policy }))
            .user_agent(concat!("agentmesh-webhooks/", env!("CARGO_PKG_VERSION")))
            .pool_max_idle_per_host(2)
            .build()
            .map_err(|err| format!("cannot build the webhook client: {err}"))?;
        Ok(Sender { client, policy })
    }

    /// Sends one message to `hook`'s receiver, signed with `key` (the
    /// secret's bytes, [`webhook::secret_key`]), and says how it went.
    pub async fn send(&self, hook: &Webhook, key: &[u8], message: &Message<'_>, now: Timestamp) -> Attempt {
        let started = Instant::now();
        let outcome = self.try_send(hook, key, message, now).await;
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (status, error) = match outcome {
            Ok(status) if (200..300).contains(&status) => (Some(status), None),
            Ok(status) if (300..400).contains(&status) => {
                (Some(status), Some(format!("answered {status}: redirects are not followed")))
            }
            Ok(status) => (Some(status), Some(format!("answered {status}"))),
            Err(error) => (None, Some(error)),
        };
        Attempt {
            at: now.iso(),
            entry_id: message.id.to_owned(),
            kind: message.kind.to_owned(),
            status,
            latency_ms,
            error,
        }
    }

    /// [`Sender::send`] on a runtime of its own, for a thread that may block
    /// (not one of an async runtime's workers).
    pub fn send_blocking(
        &self,
        hook: &Webhook,
        key: &[u8],
        message: &Message<'_>,
        now: Timestamp,
    ) -> Attempt {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        match runtime {
            Ok(runtime) => runtime.block_on(self.send(hook, key, message, now)),
            Err(err) => Attempt {
                at: now.iso(),
                entry_id: message.id.to_owned(),
                kind: message.kind.to_owned(),
                status: None,
                latency_ms: 0,
                error: Some(format!("no runtime to send on: {err}")),
            },
        }
    }

    async fn try_send(
        &self,
        hook: &Webhook,
        key: &[u8],
        message: &Message<'_>,
        now: Timestamp,
    ) -> Result<u16, String> {
        webhook::check_url("url", &hook.url, self.policy).map_err(|e: InvalidInput| e.problem)?;
        let timestamp = now.millis().div_euclid(1000);
        let mut response = self
            .client
            .post(&hook.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", message.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", sign(key, message.id, timestamp, &message.body))
            .body(message.body.clone())
            .send()
            .await
            .map_err(|err| describe(&err))?;
        let status = response.status().as_u16();
        // Read (a bounded part of) the answer so the connection can be used
        // again; what it says is not kept.
        let mut read = 0u64;
        while let Ok(Some(chunk)) = response.chunk().await {
            read += chunk.len() as u64;
            if read >= MAX_RESPONSE_BYTES {
                break;
            }
        }
        Ok(status)
    }
}

/// One message: the entry's id, its kind, and the body.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    /// The `webhook-id`: the ledger entry's id.
    pub id: &'a str,
    /// The entry's kind.
    pub kind: &'a str,
    /// The JSON body.
    pub body: Vec<u8>,
}

impl<'a> Message<'a> {
    /// The message of a ledger entry whose sequence is `seq`.
    pub fn of(entry: &'a LedgerEntry, seq: Option<u64>) -> Message<'a> {
        let body = serde_json::to_vec(&webhook::body(entry, seq)).unwrap_or_default();
        Message { id: &entry.id, kind: &entry.kind, body }
    }
}

/// A request error in words, with its causes (what kind of failure first).
fn describe(err: &reqwest::Error) -> String {
    let what = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    format!("the request {what}: {}", crate::remote::describe(err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The Standard Webhooks specification's example message and secret.
        let key = webhook::secret_key("secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            sign(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn secrets_are_new_and_in_the_whsec_form() {
        let (a, b) = (new_secret().unwrap(), new_secret().unwrap());
        assert_ne!(a, b);
        assert_eq!(webhook::secret_key("secret", &a).unwrap().len(), 32);
        let j = jitter();
        assert!((0.0..1.0).contains(&j));
    }
}
