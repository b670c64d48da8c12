//! Path reservations: a holder (a session on a node) reserves path patterns of
//! one repository scope, exclusive or shared, so that two agents never edit the
//! same files at once.
//!
//! A request that overlaps another holder's exclusive reservation, or asks
//! exclusive over another holder's shared one, is denied with every conflicting
//! reservation named once ([`conflicts`]). A reservation lives for a time to
//! live, renewed by its holder, or for as long as the task it was taken for is
//! held (its `taskId`, fenced by the task's epoch). Renewing or releasing one
//! needs its holder's session and epoch ([`check_fence`]); releasing one never
//! touches another of the same holder. The overlap rule is in [`pattern`].

pub mod pattern;

pub use pattern::PathPattern;

use crate::{InvalidInput, Timestamp};

/// At most this many patterns in one reservation.
pub const MAX_PATTERNS: usize = 64;

/// The time to live of a reservation that names none: one hour.
pub const DEFAULT_TTL_MS: u64 = 60 * 60 * 1000;

/// The longest time to live a reservation may ask for: one week.
pub const MAX_TTL_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// At most this many characters in a scope.
pub const MAX_SCOPE_CHARS: usize = 512;

/// The ledger kinds of reservations.
pub mod kinds {
    /// A reservation was granted.
    pub const GRANTED: &str = "reservation_granted";
    /// A request was denied; the entry names every conflict.
    pub const DENIED: &str = "reservation_denied";
    /// A holder renewed its reservation.
    pub const RENEWED: &str = "reservation_renewed";
    /// A reservation was released: by its holder, or with the task it was
    /// taken for.
    pub const RELEASED: &str = "reservation_released";
    /// A reservation outlived its time to live and was removed.
    pub const EXPIRED: &str = "reservation_expired";
}

/// A reservation as stored. Its JSON form (camelCase) is what the API answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// Its id.
    pub id: String,
    /// The mesh.
    pub mesh_id: String,
    /// The repository scope (a repository id or root the holder names).
    pub scope: String,
    /// The holder's session.
    pub session_id: String,
    /// The holder's node.
    pub node_id: String,
    /// What it reserves.
    pub patterns: Vec<PathPattern>,
    /// Exclusive (no other holder may reserve an overlapping pattern) or
    /// shared (others may share, none may take it exclusive).
    pub exclusive: bool,
    /// Why, in the holder's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The task it was taken for: it lives as long as the task is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The fencing epoch a renew or release must present: the task's epoch
    /// for a task's reservation, else 1.
    pub epoch: u64,
    /// Names are compared without case (the repository's file system ignores
    /// case).
    #[serde(default)]
    pub ignore_case: bool,
    /// When it was granted (ISO).
    pub created_at: String,
    /// When it was last granted or renewed (ISO).
    pub renewed_at: String,
    /// When it lapses (ISO); none for a task's reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl Reservation {
    /// Whether it is in force at `now`: a task's reservation until the task
    /// ends (its rows are removed then), any other until it expires.
    pub fn is_active(&self, now: Timestamp) -> bool {
        self.expires_ms().is_none_or(|expires| expires > now.millis())
    }

    /// When it lapses, in milliseconds since the epoch.
    pub fn expires_ms(&self) -> Option<i64> {
        self.expires_at.as_deref().and_then(Timestamp::parse_iso).map(Timestamp::millis)
    }
}

/// What a holder asks to reserve.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewReservation {
    /// The repository scope.
    pub scope: String,
    /// The holder's session.
    pub session_id: String,
    /// The holder's node.
    pub node_id: String,
    /// Path patterns (see [`pattern`]).
    pub patterns: Vec<String>,
    /// Exclusive (the default) or shared.
    #[serde(default = "exclusive_by_default")]
    pub exclusive: bool,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
    /// How long it lives unless renewed, in milliseconds ([`DEFAULT_TTL_MS`]
    /// when none is given).
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// Compare names without case.
    #[serde(default)]
    pub ignore_case: bool,
}

fn exclusive_by_default() -> bool {
    true
}

/// A request checked and normalized ([`NewReservation::validate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidReservation {
    /// The scope, trimmed.
    pub scope: String,
    /// The holder's session.
    pub session_id: String,
    /// The holder's node.
    pub node_id: String,
    /// The patterns, normalized, each once, in the order given.
    pub patterns: Vec<PathPattern>,
    /// Exclusive or shared.
    pub exclusive: bool,
    /// Why, trimmed.
    pub reason: Option<String>,
    /// How long it lives.
    pub ttl_ms: u64,
    /// Compare names without case.
    pub ignore_case: bool,
}

impl NewReservation {
    /// Checks every field, naming the first bad one (`patterns[2]` for a bad
    /// pattern).
    pub fn validate(&self) -> Result<ValidReservation, InvalidInput> {
        let scope = check_scope(&self.scope)?;
        crate::ids::validate_id("sessionId", &self.session_id)?;
        crate::ids::validate_id("nodeId", &self.node_id)?;
        let patterns = parse_patterns("patterns", &self.patterns)?;
        if patterns.is_empty() {
            return Err(InvalidInput::new("patterns", "must name at least one path pattern"));
        }
        let reason = match self.reason.as_deref() {
            None => None,
            Some(r) if r.trim().is_empty() => None,
            Some(r) => Some(InvalidInput::one_line("reason", r, 500)?),
        };
        let ttl_ms = self.ttl_ms.map_or(Ok(DEFAULT_TTL_MS), check_ttl)?;
        Ok(ValidReservation {
            scope,
            session_id: self.session_id.trim().to_owned(),
            node_id: self.node_id.trim().to_owned(),
            patterns,
            exclusive: self.exclusive,
            reason,
            ttl_ms,
            ignore_case: self.ignore_case,
        })
    }
}

impl ValidReservation {
    /// The reservation this request is granted as, at `now`, with `id`.
    pub fn grant(&self, mesh_id: &str, id: String, now: Timestamp) -> Reservation {
        let ttl = i64::try_from(self.ttl_ms).unwrap_or(i64::MAX);
        Reservation {
            id,
            mesh_id: mesh_id.to_owned(),
            scope: self.scope.clone(),
            session_id: self.session_id.clone(),
            node_id: self.node_id.clone(),
            patterns: self.patterns.clone(),
            exclusive: self.exclusive,
            reason: self.reason.clone(),
            task_id: None,
            epoch: 1,
            ignore_case: self.ignore_case,
            created_at: now.iso(),
            renewed_at: now.iso(),
            expires_at: Some(now.plus_millis(ttl).iso()),
        }
    }
}

/// A time to live a caller gave (`ttlMs`): at least 1 ms, at most
/// [`MAX_TTL_MS`].
pub fn check_ttl(ms: u64) -> Result<u64, InvalidInput> {
    match ms {
        0 => Err(InvalidInput::new("ttlMs", "must be at least 1")),
        ms if ms > MAX_TTL_MS => {
            Err(InvalidInput::new("ttlMs", format!("must be at most {MAX_TTL_MS} (a week)")))
        }
        ms => Ok(ms),
    }
}

/// A scope as the stores keep it: trimmed, one line, not blank.
pub fn check_scope(scope: &str) -> Result<String, InvalidInput> {
    InvalidInput::one_line("scope", scope, MAX_SCOPE_CHARS)
}

/// Parses a list of patterns, naming `field[i]` for a bad one, dropping
/// repeats (after normalization); at most [`MAX_PATTERNS`].
pub fn parse_patterns(field: &str, raw: &[String]) -> Result<Vec<PathPattern>, InvalidInput> {
    if raw.len() > MAX_PATTERNS {
        return Err(InvalidInput::new(field, format!("must hold at most {MAX_PATTERNS} patterns")));
    }
    let mut out: Vec<PathPattern> = Vec::with_capacity(raw.len());
    for (i, text) in raw.iter().enumerate() {
        let pattern = PathPattern::parse(&format!("{field}[{i}]"), text)?;
        if !out.contains(&pattern) {
            out.push(pattern);
        }
    }
    Ok(out)
}

/// Another holder's reservation that a request overlaps, named once however
/// many of its patterns overlap.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Conflict {
    /// The conflicting reservation.
    pub reservation_id: String,
    /// Its holder's session.
    pub session_id: String,
    /// Its holder's node.
    pub node_id: String,
    /// The task it was taken for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Whether it is exclusive.
    pub exclusive: bool,
    /// Its patterns that overlap the request.
    pub patterns: Vec<PathPattern>,
    /// The request's patterns it overlaps.
    pub requested: Vec<PathPattern>,
    /// When it lapses (ISO); none for a task's reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let patterns: Vec<&str> = self.patterns.iter().map(PathPattern::as_str).collect();
        write!(
            f,
            "{} ({}) held by session {} on node {}",
            patterns.join(", "),
            if self.exclusive { "exclusive" } else { "shared" },
            self.session_id,
            self.node_id
        )?;
        if let Some(task) = &self.task_id {
            write!(f, " for task {task}")?;
        }
        if let Some(expires) = &self.expires_at {
            write!(f, " until {expires}")?;
        }
        Ok(())
    }
}

/// What a request for `patterns` (exclusive or not, by `session_id`) meets
/// among `held` (the scope's reservations): each reservation of another
/// session that is in force at `now` and overlaps it where either side is
/// exclusive, once, in the order of `held`. A holder never conflicts with
/// itself.
pub fn conflicts<'a>(
    patterns: &[PathPattern],
    exclusive: bool,
    session_id: &str,
    ignore_case: bool,
    held: impl IntoIterator<Item = &'a Reservation>,
    now: Timestamp,
) -> Vec<Conflict> {
    let mut found = Vec::new();
    for other in held {
        if other.session_id == session_id || !(exclusive || other.exclusive) || !other.is_active(now) {
            continue;
        }
        let fold = ignore_case || other.ignore_case;
        let mut theirs = Vec::new();
        let mut ours = Vec::new();
        for a in patterns {
            for b in &other.patterns {
                if a.overlaps(b, fold) {
                    if !theirs.contains(b) {
                        theirs.push(b.clone());
                    }
                    if !ours.contains(a) {
                        ours.push(a.clone());
                    }
                }
            }
        }
        if !theirs.is_empty() {
            found.push(Conflict {
                reservation_id: other.id.clone(),
                session_id: other.session_id.clone(),
                node_id: other.node_id.clone(),
                task_id: other.task_id.clone(),
                exclusive: other.exclusive,
                patterns: theirs,
                requested: ours,
                expires_at: other.expires_at.clone(),
            });
        }
    }
    found
}

/// The reservations among `held` that stand in the way of `session_id`
/// editing `path`: each exclusive reservation of another session, in force at
/// `now`, with a pattern that covers the path (its covering patterns in
/// [`Conflict::patterns`], the path in [`Conflict::requested`]). What a commit
/// guard and a worker's check ask.
pub fn covering<'a>(
    path: &PathPattern,
    session_id: Option<&str>,
    ignore_case: bool,
    held: impl IntoIterator<Item = &'a Reservation>,
    now: Timestamp,
) -> Vec<Conflict> {
    let mut found = Vec::new();
    for other in held {
        if Some(other.session_id.as_str()) == session_id || !other.exclusive || !other.is_active(now) {
            continue;
        }
        let fold = ignore_case || other.ignore_case;
        let theirs: Vec<PathPattern> =
            other.patterns.iter().filter(|p| p.covers(path.as_str(), fold)).cloned().collect();
        if !theirs.is_empty() {
            found.push(Conflict {
                reservation_id: other.id.clone(),
                session_id: other.session_id.clone(),
                node_id: other.node_id.clone(),
                task_id: other.task_id.clone(),
                exclusive: true,
                patterns: theirs,
                requested: vec![path.clone()],
                expires_at: other.expires_at.clone(),
            });
        }
    }
    found
}

/// The reservation a claim takes for `task` (as the claim leaves it: assigned,
/// with its new epoch) when the task declares paths: exclusive, held by the
/// claiming session and node, fenced by the task's epoch, with no time to
/// live of its own (it ends with the task's hold).
pub fn for_task(task: &crate::Task, id: String, now: Timestamp) -> Option<Reservation> {
    let patterns = task.paths.clone().filter(|p| !p.is_empty())?;
    Some(Reservation {
        id,
        mesh_id: task.mesh_id.clone(),
        scope: task.paths_scope.clone()?,
        session_id: task.assigned_session_id.clone()?,
        node_id: task.assigned_node_id.clone().unwrap_or_default(),
        patterns,
        exclusive: true,
        reason: Some(format!("task {}", task.id)),
        task_id: Some(task.id.clone()),
        epoch: task.epoch(),
        ignore_case: false,
        created_at: now.iso(),
        renewed_at: now.iso(),
        expires_at: None,
    })
}

/// Why a renew or release by `session_id` presenting `epoch` is refused, if it
/// is: another session holds the reservation, the epoch is not its epoch, or it
/// lapsed at `now`.
pub fn check_fence(
    reservation: &Reservation,
    session_id: &str,
    epoch: u64,
    now: Timestamp,
) -> Result<(), String> {
    if reservation.session_id != session_id {
        return Err(format!("held by session {}, not {session_id}", reservation.session_id));
    }
    if reservation.epoch != epoch {
        return Err(format!("presented epoch {epoch}, current {}", reservation.epoch));
    }
    if !reservation.is_active(now) {
        return Err(format!("lapsed at {}", reservation.expires_at.as_deref().unwrap_or("?")));
    }
    Ok(())
}

/// `reservation` renewed at `now` for `ttl_ms` more.
pub fn renewed(reservation: &Reservation, ttl_ms: u64, now: Timestamp) -> Reservation {
    let ttl = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
    Reservation {
        renewed_at: now.iso(),
        expires_at: reservation.task_id.is_none().then(|| now.plus_millis(ttl).iso()),
        ..reservation.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_millis(1_780_000_000_000);

    fn request(session: &str, patterns: &[&str], exclusive: bool) -> ValidReservation {
        NewReservation {
            scope: "repo".into(),
            session_id: session.into(),
            node_id: format!("{session}-node"),
            patterns: patterns.iter().map(|p| (*p).to_owned()).collect(),
            exclusive,
            ..NewReservation::default()
        }
        .validate()
        .expect("a valid request")
    }

    fn held(session: &str, patterns: &[&str], exclusive: bool) -> Reservation {
        request(session, patterns, exclusive).grant("m", format!("r-{session}"), T0)
    }

    #[test]
    fn exclusive_meets_everything_shared_meets_only_exclusive() {
        let mine = request("me", &["src/lib.rs"], true);
        let shared = held("other", &["src/**"], false);
        let exclusive = held("third", &["src/*.rs", "src/lib.rs"], true);
        let far = held("far", &["docs/**"], true);
        let own = held("me", &["src/**"], true);
        let all = [shared.clone(), exclusive.clone(), far, own];

        let found = conflicts(&mine.patterns, true, "me", false, &all, T0);
        let ids: Vec<&str> = found.iter().map(|c| c.reservation_id.as_str()).collect();
        assert_eq!(ids, ["r-other", "r-third"], "each conflicting reservation once, never the holder's own");
        assert_eq!(found[1].patterns.len(), 2, "both of its overlapping patterns, in one conflict");
        assert_eq!(found[1].requested, mine.patterns);

        let asking_shared = conflicts(&mine.patterns, false, "me", false, &all, T0);
        let ids: Vec<&str> = asking_shared.iter().map(|c| c.reservation_id.as_str()).collect();
        assert_eq!(ids, ["r-third"], "shared beside shared is fine");
    }

    #[test]
    fn a_lapsed_reservation_conflicts_with_nothing() {
        let old = held("other", &["src"], true);
        let later = T0.plus_millis(i64::try_from(DEFAULT_TTL_MS).unwrap());
        assert!(
            conflicts(&[PathPattern::parse("p", "src").unwrap()], true, "me", false, [&old], later)
                .is_empty()
        );
        assert_eq!(
            conflicts(&[PathPattern::parse("p", "src").unwrap()], true, "me", false, [&old], T0).len(),
            1
        );
    }

    #[test]
    fn case_is_ignored_when_either_side_asks() {
        let mut theirs = held("other", &["SRC/lib.rs"], true);
        let ours = [PathPattern::parse("p", "src/LIB.rs").unwrap()];
        assert!(conflicts(&ours, true, "me", false, [&theirs], T0).is_empty());
        assert_eq!(conflicts(&ours, true, "me", true, [&theirs], T0).len(), 1);
        theirs.ignore_case = true;
        assert_eq!(conflicts(&ours, true, "me", false, [&theirs], T0).len(), 1);
    }

    #[test]
    fn a_path_is_in_the_way_of_another_holders_exclusive_reservation_only() {
        let theirs = held("other", &["src/**"], true);
        let shared = held("third", &["src"], false);
        let mine = held("me", &["src/lib.rs"], true);
        let path = PathPattern::parse("paths[0]", "src/lib.rs").unwrap();
        let found = covering(&path, Some("me"), false, [&theirs, &shared, &mine], T0);
        let ids: Vec<&str> = found.iter().map(|c| c.reservation_id.as_str()).collect();
        assert_eq!(ids, ["r-other"]);
        let elsewhere = PathPattern::parse("paths[0]", "docs/x.md").unwrap();
        assert!(covering(&elsewhere, Some("me"), false, [&theirs], T0).is_empty());
        assert_eq!(covering(&path, None, false, [&mine], T0).len(), 1, "no session: every holder counts");
    }

    #[test]
    fn the_fence_names_holder_epoch_and_lapse() {
        let r = held("me", &["a"], true);
        assert!(check_fence(&r, "me", 1, T0).is_ok());
        assert!(check_fence(&r, "you", 1, T0).unwrap_err().contains("held by session me"));
        assert!(check_fence(&r, "me", 2, T0).unwrap_err().contains("presented epoch 2, current 1"));
        let lapsed = T0.plus_millis(i64::try_from(DEFAULT_TTL_MS).unwrap());
        assert!(check_fence(&r, "me", 1, lapsed).unwrap_err().contains("lapsed"));
        let later = T0.plus_millis(1_000);
        assert_eq!(renewed(&r, 5_000, later).expires_at, Some(later.plus_millis(5_000).iso()));
    }

    #[test]
    fn validation_names_the_field() {
        let base = NewReservation {
            scope: "repo".into(),
            session_id: "s".into(),
            node_id: "n".into(),
            patterns: vec!["src".into()],
            exclusive: true,
            ..NewReservation::default()
        };
        let field = |r: NewReservation| r.validate().unwrap_err().field;
        assert_eq!(field(NewReservation { scope: " ".into(), ..base.clone() }), "scope");
        assert_eq!(field(NewReservation { session_id: String::new(), ..base.clone() }), "sessionId");
        assert_eq!(field(NewReservation { node_id: " ".into(), ..base.clone() }), "nodeId");
        assert_eq!(field(NewReservation { patterns: vec![], ..base.clone() }), "patterns");
        assert_eq!(
            field(NewReservation { patterns: vec!["a".into(), "../b".into()], ..base.clone() }),
            "patterns[1]"
        );
        assert_eq!(field(NewReservation { ttl_ms: Some(0), ..base.clone() }), "ttlMs");
        assert_eq!(field(NewReservation { ttl_ms: Some(MAX_TTL_MS + 1), ..base.clone() }), "ttlMs");
        assert_eq!(field(NewReservation { reason: Some("a\nb".into()), ..base.clone() }), "reason");
        let ok = NewReservation { patterns: vec!["./src/".into(), "src".into()], ..base }.validate().unwrap();
        assert_eq!(ok.patterns.len(), 1, "repeats after normalization count once");
        assert_eq!(ok.ttl_ms, DEFAULT_TTL_MS);
    }
}
