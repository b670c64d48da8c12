//! Webhook subscriptions: a receiver's URL, the ledger entries it wants, and
//! where its delivery stands.
//!
//! A subscription follows its mesh's ledger by a durable cursor (the sequence
//! number of the last entry it has passed). The daemon's deliverer sends every
//! matching entry, in ledger order, one request each, signed in the Standard
//! Webhooks form; the cursor moves only past entries the receiver answered with
//! a 2xx. A failed request is retried with exponential backoff; after
//! [`DeliveryPolicy::max_attempts`] failures in a row the subscription is
//! marked failing and delivers nothing more (later entries wait behind the one
//! that failed: nothing is skipped) until an operator resumes it, or skips the
//! entry, each recorded in the ledger.
//!
//! This module holds the rules: what a subscription may name (a URL a daemon
//! may call, a filter, a secret), which entries match, the backoff, and the
//! state changes. Sending is the daemon's; storing is the stores'.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::{InvalidInput, LedgerEntry, Timestamp};

/// Ledger kinds the webhook commands write.
pub mod kinds {
    /// A subscription was added.
    pub const ADDED: &str = "webhook_added";
    /// A subscription was removed.
    pub const REMOVED: &str = "webhook_removed";
    /// A failing subscription was resumed by an operator.
    pub const RESUMED: &str = "webhook_resumed";
    /// An operator moved a subscription's cursor past an entry it could not
    /// deliver.
    pub const SKIPPED: &str = "webhook_skipped";
    /// A subscription was marked failing after its attempts ran out.
    pub const FAILING: &str = "webhook_failing";
}

/// The prefix of a secret in the Standard Webhooks form: `whsec_` and the
/// base64 of the key.
pub const SECRET_PREFIX: &str = "whsec_";
/// The fewest key bytes a secret may have.
pub const MIN_SECRET_BYTES: usize = 24;
/// The most key bytes a secret may have.
pub const MAX_SECRET_BYTES: usize = 64;
/// The longest URL a subscription may name, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// The most kinds or tags a filter may name.
pub const MAX_FILTER_ITEMS: usize = 64;
/// How many of the last attempts a subscription keeps in its delivery log.
pub const LOG_LEN: usize = 20;

/// Where a daemon may send: the operator's settings, which a subscription
/// cannot change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UrlPolicy {
    /// Plain `http://` to a host that is not loopback is allowed.
    pub allow_http: bool,
    /// Private, link-local and other non-public addresses are allowed for a
    /// subscription whose host is not loopback.
    pub allow_private: bool,
}

/// A subscription as a caller asks for it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewWebhook {
    /// The receiver: `https://...`, or `http://` to a loopback host.
    pub url: String,
    /// The ledger kinds to send (`task_completed`, or a prefix with a star:
    /// `task_*`, `*`). Empty: every kind.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Only entries about a task carrying one of these tags. Empty: any.
    #[serde(default)]
    pub tags: Vec<String>,
    /// What it is for, for the operator.
    #[serde(default)]
    pub description: Option<String>,
    /// The signing secret (`whsec_` and the base64 of 24 to 64 bytes); one is
    /// made when none is given.
    #[serde(default)]
    pub secret: Option<String>,
    /// Start from the ledger's first entry instead of what is written after
    /// the subscription.
    #[serde(default)]
    pub from_start: bool,
}

/// A subscription's parts, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidWebhook {
    /// The URL, trimmed.
    pub url: String,
    /// The host is loopback.
    pub loopback: bool,
    /// The kinds, trimmed, each once.
    pub kinds: Vec<String>,
    /// The tags, trimmed, each once.
    pub tags: Vec<String>,
    /// The description, trimmed; `None` when blank.
    pub description: Option<String>,
    /// The secret the caller gave, checked.
    pub secret: Option<String>,
    /// Start from the first entry.
    pub from_start: bool,
}

impl NewWebhook {
    /// Checks every field against `policy`; the error names the field.
    pub fn validate(&self, policy: UrlPolicy) -> Result<ValidWebhook, InvalidInput> {
        let target = check_url("url", &self.url, policy)?;
        let kinds = filter_items("kinds", &self.kinds, |field, kind| {
            let name = kind.strip_suffix('*').unwrap_or(kind);
            if name.contains('*') || !name.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c == ':') {
                return Err(InvalidInput::new(
                    field,
                    format!("{kind:?} is not a ledger kind (lower case and _, optionally ending in *)"),
                ));
            }
            Ok(())
        })?;
        let tags = filter_items("tags", &self.tags, |_, _| Ok(()))?;
        let description = match self.description.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(InvalidInput::one_line("description", text, 500)?),
        };
        let secret = self
            .secret
            .as_deref()
            .map(|s| secret_key("secret", s).map(|_| s.trim().to_owned()))
            .transpose()?;
        Ok(ValidWebhook {
            url: target.url,
            loopback: target.loopback,
            kinds,
            tags,
            description,
            secret,
            from_start: self.from_start,
        })
    }
}

fn filter_items(
    field: &str,
    items: &[String],
    check: impl Fn(&str, &str) -> Result<(), InvalidInput>,
) -> Result<Vec<String>, InvalidInput> {
    if items.len() > MAX_FILTER_ITEMS {
        return Err(InvalidInput::new(field, format!("at most {MAX_FILTER_ITEMS} items")));
    }
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("{field}[{i}]");
        let item = InvalidInput::one_line(&field, item, 200)?;
        check(&field, &item)?;
        if !out.contains(&item) {
            out.push(item);
        }
    }
    Ok(out)
}

/// A receiver URL a daemon may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The URL, trimmed.
    pub url: String,
    /// The host is loopback (`localhost`, `127.0.0.0/8`, `::1`).
    pub loopback: bool,
}

/// Checks a receiver URL: `https`, or `http` to a loopback host unless the
/// policy allows any; no user name or password in it; a host given as an
/// address must be public unless it is loopback or the policy allows private
/// ones. Names are checked again when they are resolved
/// ([`address_allowed`]).
pub fn check_url(field: &str, url: &str, policy: UrlPolicy) -> Result<Target, InvalidInput> {
    let url = url.trim();
    if url.is_empty() {
        return Err(InvalidInput::new(field, "must not be blank"));
    }
    if url.len() > MAX_URL_BYTES {
        return Err(InvalidInput::new(field, format!("longer than {MAX_URL_BYTES} bytes")));
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(InvalidInput::new(field, "must not contain spaces or control characters"));
    }
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| InvalidInput::new(field, "must be an absolute URL (https://host/path)"))?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "https" && scheme != "http" {
        return Err(InvalidInput::new(field, format!("scheme {scheme:?} is not http or https")));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(InvalidInput::new(field, "must not carry a user name or password"));
    }
    let host = host_of(authority).ok_or_else(|| InvalidInput::new(field, "has no host"))?;
    let host = host.to_ascii_lowercase();
    let address: Option<IpAddr> = host.parse().ok();
    let loopback =
        host == "localhost" || host.ends_with(".localhost") || address.is_some_and(|a| a.is_loopback());
    if scheme == "http" && !loopback && !policy.allow_http {
        return Err(InvalidInput::new(
            field,
            "plain http is allowed only to a loopback host (use https, or start the daemon with \
             --webhook-allow-http)",
        ));
    }
    if let Some(address) = address.filter(|a| !address_allowed(*a, loopback, policy)) {
        return Err(InvalidInput::new(
            field,
            format!(
                "{address} is a private or reserved address (start the daemon with \
                 --webhook-allow-private to allow it)"
            ),
        ));
    }
    Ok(Target { url: url.to_owned(), loopback })
}

fn host_of(authority: &str) -> Option<&str> {
    let host = if let Some(bracketed) = authority.strip_prefix('[') {
        bracketed.split_once(']')?.0
    } else {
        authority.rsplit_once(':').map_or(authority, |(host, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) { host } else { authority }
        })
    };
    (!host.is_empty()).then_some(host)
}

/// Whether a daemon may connect to `address` for a subscription: any address
/// for a loopback subscription (its name or address is loopback), else only
/// a public one unless the policy allows private ones.
pub fn address_allowed(address: IpAddr, loopback_subscription: bool, policy: UrlPolicy) -> bool {
    if loopback_subscription {
        return address.is_loopback();
    }
    policy.allow_private || is_public(address)
}

fn is_public(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (b == 18 || b == 19))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0x0db8)
        }
    }
}

/// The key bytes of a secret in the `whsec_<base64>` form; the error names
/// `field`.
pub fn secret_key(field: &str, secret: &str) -> Result<Vec<u8>, InvalidInput> {
    let encoded = secret
        .trim()
        .strip_prefix(SECRET_PREFIX)
        .ok_or_else(|| InvalidInput::new(field, format!("must start with {SECRET_PREFIX}")))?;
    let key = base64_decode(encoded)
        .ok_or_else(|| InvalidInput::new(field, format!("is not {SECRET_PREFIX} and standard base64")))?;
    if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
        return Err(InvalidInput::new(
            field,
            format!("its key must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, not {}", key.len()),
        ));
    }
    Ok(key)
}

/// A secret in the `whsec_<base64>` form for `key` (the caller's random bytes).
pub fn secret_for(key: &[u8]) -> String {
    format!("{SECRET_PREFIX}{}", base64_encode(key))
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut n) = (0u32, 0u32);
    for c in text.bytes() {
        let value = BASE64.iter().position(|b| *b == c)? as u32;
        bits = (bits << 6) | value;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    (bits == 0).then_some(out)
}

/// Whether a subscription's filter takes `kind`.
pub fn kind_matches(kinds: &[String], kind: &str) -> bool {
    kinds.is_empty()
        || kinds.iter().any(|k| match k.strip_suffix('*') {
            Some(prefix) => kind.starts_with(prefix),
            None => k == kind,
        })
}

/// A subscription's delivery state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookState {
    /// Delivering.
    Active,
    /// Its attempts ran out: nothing is sent until an operator resumes it or
    /// skips the entry it is stuck on.
    Failing,
}

impl WebhookState {
    /// The state's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookState::Active => "active",
            WebhookState::Failing => "failing",
        }
    }
}

/// One delivery attempt, as the delivery log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// When it was made (ISO).
    pub at: String,
    /// The ledger entry it carried.
    pub entry_id: String,
    /// The entry's kind.
    pub kind: String,
    /// The receiver's HTTP status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How long the request took, in milliseconds.
    pub latency_ms: u64,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Attempt {
    /// The receiver took the entry (a 2xx).
    pub fn delivered(&self) -> bool {
        self.error.is_none() && self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// The entry a subscription failed to deliver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StuckEntry {
    /// The ledger entry.
    pub entry_id: String,
    /// Its kind.
    pub kind: String,
    /// Its sequence number: the cursor past it.
    pub seq: u64,
}

/// A stored subscription. Its secret is kept apart and never part of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    /// Its id.
    pub id: String,
    /// The mesh whose ledger it follows.
    pub mesh_id: String,
    /// The receiver.
    pub url: String,
    /// The kinds it takes (empty: all).
    pub kinds: Vec<String>,
    /// The tags it takes (empty: any).
    pub tags: Vec<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When it was added (ISO).
    pub created_at: String,
    /// Delivering or failing.
    pub state: WebhookState,
    /// The ledger sequence it has passed: entries after it are still to send.
    pub cursor: u64,
    /// Entries delivered so far.
    pub delivered: u64,
    /// Failed attempts in a row on the entry it is on.
    pub failures: u32,
    /// When the next attempt may be made (ISO), after a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
    /// Since when it is failing (ISO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<String>,
    /// The last failure, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The entry the last failed attempt carried, while it is not delivered:
    /// what a skip passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck_on: Option<StuckEntry>,
    /// The last attempts, oldest first (at most [`LOG_LEN`]).
    #[serde(default)]
    pub log: Vec<Attempt>,
    /// Bumped by every change; a deliverer's write names the version it read,
    /// so an operator's command in between is never overwritten.
    pub version: u64,
}

impl Webhook {
    /// A new subscription from `valid`, following from `cursor`.
    pub fn new(id: String, mesh_id: &str, valid: &ValidWebhook, cursor: u64, now: Timestamp) -> Webhook {
        Webhook {
            id,
            mesh_id: mesh_id.to_owned(),
            url: valid.url.clone(),
            kinds: valid.kinds.clone(),
            tags: valid.tags.clone(),
            description: valid.description.clone(),
            created_at: now.iso(),
            state: WebhookState::Active,
            cursor,
            delivered: 0,
            failures: 0,
            retry_at: None,
            failing_since: None,
            last_error: None,
            stuck_on: None,
            log: Vec::new(),
            version: 1,
        }
    }

    /// Whether the filter takes `entry` (its kind; its task's `tags` when the
    /// filter names tags: `None` when the entry is about no task, or the task
    /// is gone).
    pub fn takes(&self, entry: &LedgerEntry, task_tags: Option<&[String]>) -> bool {
        kind_matches(&self.kinds, &entry.kind)
            && (self.tags.is_empty()
                || task_tags.is_some_and(|tags| tags.iter().any(|t| self.tags.contains(t))))
    }

    /// Whether the filter names tags (the deliverer then reads entries' tasks).
    pub fn filters_by_tag(&self) -> bool {
        !self.tags.is_empty()
    }

    /// A ledger entry for an operator's command on this subscription (never
    /// the secret).
    pub fn entry(&self, kind: &str, id: String, now: Timestamp, extra: serde_json::Value) -> LedgerEntry {
        let mut payload = serde_json::json!({
            "webhookId": self.id,
            "url": redacted(&self.url),
            "kinds": self.kinds,
            "tags": self.tags,
            "cursor": self.cursor,
        });
        if let (Some(map), serde_json::Value::Object(more)) = (payload.as_object_mut(), extra) {
            map.extend(more);
        }
        LedgerEntry {
            id,
            mesh_id: self.mesh_id.clone(),
            timestamp: now.iso(),
            kind: kind.to_owned(),
            node_id: None,
            session_id: None,
            provider_type: None,
            payload,
        }
    }

    /// Appends `attempts` to the log, keeping the last [`LOG_LEN`].
    pub fn log_attempts(&mut self, attempts: impl IntoIterator<Item = Attempt>) {
        self.log.extend(attempts);
        let over = self.log.len().saturating_sub(LOG_LEN);
        self.log.drain(..over);
    }
}

/// `url` with its query and fragment cut (they may carry a receiver's token),
/// for the ledger and logs.
pub fn redacted(url: &str) -> String {
    match url.find(['?', '#']) {
        Some(at) => format!("{}?…", &url[..at]),
        None => url.to_owned(),
    }
}

/// How the deliverer retries: the daemon's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryPolicy {
    /// The first retry's delay, in milliseconds; each next one doubles, up to
    /// [`Self::max_delay_ms`].
    pub base_delay_ms: u64,
    /// The longest delay between two attempts, in milliseconds.
    pub max_delay_ms: u64,
    /// Failed attempts in a row after which a subscription is marked failing.
    pub max_attempts: u32,
}

impl Default for DeliveryPolicy {
    /// 5 s doubling to 10 min; failing after 10 attempts (about 35 minutes).
    fn default() -> DeliveryPolicy {
        DeliveryPolicy { base_delay_ms: 5_000, max_delay_ms: 600_000, max_attempts: 10 }
    }
}

impl DeliveryPolicy {
    /// The delay before the attempt after `failures` failures in a row, with
    /// `jitter` in `[0, 1)` (the caller's random draw) taking up to half of it
    /// off, so receivers that fail together are not retried together.
    pub fn delay_ms(&self, failures: u32, jitter: f64) -> u64 {
        let doublings = failures.saturating_sub(1).min(30);
        let full = self.base_delay_ms.saturating_mul(1u64 << doublings).min(self.max_delay_ms);
        let off = (full as f64 * 0.5 * jitter.clamp(0.0, 1.0)) as u64;
        full - off
    }
}

/// The body a receiver gets for one ledger entry: what happened, where, to
/// which task, when, and where to read more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookPayload {
    /// The ledger kind (`task_completed`, `task_failed`, `reservation_granted`,
    /// ...; `webhook_test` for `webhook test`'s sample).
    #[serde(rename = "type")]
    pub kind: String,
    /// When the entry was written (ISO-8601).
    pub timestamp: String,
    /// The entry's facts.
    pub data: WebhookData,
}

/// The facts of one delivered ledger entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookData {
    /// The ledger entry's id, also the request's `webhook-id`.
    pub entry_id: String,
    /// The mesh.
    pub mesh_id: String,
    /// The task the entry is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The node involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The session involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The entry's `status`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
    /// The entry's `reason` (a failure, a refusal), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<serde_json::Value>,
    /// The worker's summary, when the entry has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<serde_json::Value>,
    /// The task's epoch, when the entry has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<serde_json::Value>,
    /// Where to read more, relative to the daemon's address.
    pub links: WebhookLinks,
}

/// The API paths a receiver follows to read more (the bearer token needed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookLinks {
    /// The mesh's ledger entries of this kind.
    pub ledger: String,
    /// The task, when the entry is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// The ledger after this entry, in commit order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// The body a receiver gets for `entry`, whose sequence number is `seq`.
pub fn body(entry: &LedgerEntry, seq: Option<u64>) -> WebhookPayload {
    let field = |key: &str| entry.payload.get(key).cloned();
    let mesh = &entry.mesh_id;
    WebhookPayload {
        kind: entry.kind.clone(),
        timestamp: entry.timestamp.clone(),
        data: WebhookData {
            entry_id: entry.id.clone(),
            mesh_id: mesh.clone(),
            task_id: entry.task_id().map(str::to_owned),
            node_id: entry.node_id.clone(),
            session_id: entry.session_id.clone(),
            status: field("status"),
            reason: field("reason"),
            summary: field("summary"),
            epoch: field("epoch"),
            links: WebhookLinks {
                ledger: format!("/v1/meshes/{mesh}/ledger?kind={}", entry.kind),
                task: entry.task_id().map(|task| format!("/v1/meshes/{mesh}/tasks/{task}")),
                after: seq.map(|seq| format!("/v1/meshes/{mesh}/ledger/slice?afterSeq={seq}")),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: UrlPolicy = UrlPolicy { allow_http: false, allow_private: false };

    #[test]
    fn receivers_must_be_https_or_loopback_http_and_public() {
        for ok in [
            "https://hooks.example.com/agentmesh",
            "http://127.0.0.1:8080/hook",
            "http://localhost/hook",
            "http://[::1]:9000/",
            "https://93.184.216.34/x",
        ] {
            assert!(check_url("url", ok, ANY).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("", "blank"),
            ("hooks.example.com", "absolute"),
            ("ftp://x.example", "scheme"),
            ("http://hooks.example.com/", "loopback"),
            ("https://user:pw@hooks.example.com/", "password"),
            ("https://10.0.0.7/hook", "private"),
            ("https://169.254.169.254/latest", "private"),
            ("https://[fe80::1]/", "private"),
            ("https://[::ffff:192.168.1.1]/", "private"),
            ("https://100.64.0.1/", "private"),
            ("https:///path", "host"),
        ] {
            let err = check_url("url", bad, ANY).expect_err(bad);
            assert_eq!(err.field, "url");
            assert!(err.problem.contains(says), "{bad}: {}", err.problem);
        }
        let open = UrlPolicy { allow_http: true, allow_private: true };
        assert!(check_url("url", "http://10.0.0.7/hook", open).is_ok());
    }

    #[test]
    fn resolved_addresses_follow_the_subscription() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let private: IpAddr = "192.168.0.4".parse().unwrap();
        let public: IpAddr = "8.8.8.8".parse().unwrap();
        assert!(address_allowed(lo, true, ANY));
        assert!(!address_allowed(public, true, ANY), "a loopback name must not resolve elsewhere");
        assert!(!address_allowed(lo, false, ANY), "a public name resolving to loopback is refused");
        assert!(!address_allowed(private, false, ANY));
        assert!(address_allowed(public, false, ANY));
        assert!(address_allowed(private, false, UrlPolicy { allow_private: true, ..ANY }));
    }

    #[test]
    fn secrets_round_trip_and_bad_ones_name_the_field() {
        let key: Vec<u8> = (0u8..32).collect();
        let secret = secret_for(&key);
        assert!(secret.starts_with("whsec_"));
        assert_eq!(secret_key("secret", &secret).unwrap(), key);
        for bad in ["whsec_", "nope", "whsec_!!!!", &secret_for(&[1; 8])] {
            assert_eq!(secret_key("secret", bad).unwrap_err().field, "secret", "{bad}");
        }
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
        assert_eq!(base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
    }

    #[test]
    fn filters_take_kinds_by_name_or_prefix_and_tags_by_the_task() {
        let valid = NewWebhook {
            url: "http://127.0.0.1/h".into(),
            kinds: vec!["task_completed".into(), "reservation_*".into(), "task_completed".into()],
            tags: vec!["ci".into()],
            ..NewWebhook::default()
        }
        .validate(ANY)
        .unwrap();
        assert_eq!(valid.kinds, ["task_completed", "reservation_*"]);
        let hook = Webhook::new("w".into(), "m", &valid, 0, Timestamp::from_millis(0));
        let entry = |kind: &str| LedgerEntry {
            id: "e".into(),
            mesh_id: "m".into(),
            timestamp: "t".into(),
            kind: kind.into(),
            node_id: None,
            session_id: None,
            provider_type: None,
            payload: serde_json::json!({ "taskId": "t1" }),
        };
        let ci = ["ci".to_owned()];
        assert!(hook.takes(&entry("task_completed"), Some(&ci)));
        assert!(hook.takes(&entry("reservation_granted"), Some(&ci)));
        assert!(!hook.takes(&entry("task_failed"), Some(&ci)));
        assert!(!hook.takes(&entry("task_completed"), Some(&["docs".to_owned()])));
        assert!(!hook.takes(&entry("task_completed"), None));
        let bad = NewWebhook {
            url: "http://127.0.0.1/h".into(),
            kinds: vec!["Task*x".into()],
            ..Default::default()
        };
        assert_eq!(bad.validate(ANY).unwrap_err().field, "kinds[0]");
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_jitter_takes_at_most_half() {
        let policy = DeliveryPolicy { base_delay_ms: 100, max_delay_ms: 1_000, max_attempts: 5 };
        assert_eq!(policy.delay_ms(1, 0.0), 100);
        assert_eq!(policy.delay_ms(2, 0.0), 200);
        assert_eq!(policy.delay_ms(4, 0.0), 800);
        assert_eq!(policy.delay_ms(9, 0.0), 1_000);
        assert_eq!(policy.delay_ms(400, 0.0), 1_000);
        assert_eq!(policy.delay_ms(2, 0.999_999), 101);
    }

    #[test]
    fn the_log_keeps_the_last_attempts() {
        let valid =
            NewWebhook { url: "http://127.0.0.1/h".into(), ..NewWebhook::default() }.validate(ANY).unwrap();
        let mut hook = Webhook::new("w".into(), "m", &valid, 0, Timestamp::from_millis(0));
        let attempt = |n: u64| Attempt {
            at: n.to_string(),
            entry_id: "e".into(),
            kind: "k".into(),
            status: Some(200),
            latency_ms: n,
            error: None,
        };
        hook.log_attempts((0..30).map(attempt));
        assert_eq!(hook.log.len(), LOG_LEN);
        assert_eq!(hook.log[0].latency_ms, 10);
        assert_eq!(redacted("https://x.example/h?token=abc"), "https://x.example/h?…");
    }
}
